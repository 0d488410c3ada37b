/* driver.c — resolve the real libcuda lazily, without ever linking against it.
 *
 * The shim interposes dlsym, so the real one is found with dlvsym (which we do not
 * interpose). Nothing here calls cuInit: loading the library initializes nothing. */
#include "shim/driver.h"
#include "shim/log.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *(*dlsym_fn)(void *, const char *);
/* Read by the dlsym trampoline in interpose.c, hence not static. */
dlsym_fn ld_real_dlsym_ptr;
static pthread_once_t dlsym_once = PTHREAD_ONCE_INIT;

/* Sanitizers call dlsym while they start, before their own state exists: nothing on the
 * dlsym path may be instrumented. */
#define LD_NO_SANITIZE __attribute__((no_sanitize("address", "undefined")))

LD_NO_SANITIZE static void find_real_dlsym(void) {
    /* glibc >= 2.34 versions dlsym GLIBC_2.34; older x86-64 GLIBC_2.2.5, aarch64 GLIBC_2.17. */
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
    for (size_t i = 0; i < sizeof versions / sizeof *versions && !ld_real_dlsym_ptr; i++)
        ld_real_dlsym_ptr = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
}

LD_NO_SANITIZE void ld_dlsym_init(void) { pthread_once(&dlsym_once, find_real_dlsym); }

LD_NO_SANITIZE void *ld_real_dlsym(void *handle, const char *name) {
    pthread_once(&dlsym_once, find_real_dlsym);
    return ld_real_dlsym_ptr ? ld_real_dlsym_ptr(handle, name) : NULL;
}

static ld_driver_t drv;
static const ld_driver_t *drv_ok;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void load_driver(void) {
    const char *path = getenv("LDSHIM_LIBCUDA");
    if (!path || !*path) path = "libcuda.so.1";
    /* Prefer the copy the program already loaded; never change its symbol scope. */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (!h) h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        LD_INFO("cannot load %s (%s); the shim passes everything through", path, dlerror());
        return;
    }
    drv.handle = h;
    int missing = 0;
#define LD_LOAD_REQUIRED(name, args) \
    if (!(*(void **)&drv.name = ld_real_dlsym(h, #name))) { \
        LD_INFO("%s lacks %s; the shim passes everything through", path, #name); missing = 1; }
#define LD_LOAD_OPTIONAL(name, args) *(void **)&drv.name = ld_real_dlsym(h, #name);
    LD_DRIVER_REQUIRED(LD_LOAD_REQUIRED)
    LD_DRIVER_OPTIONAL(LD_LOAD_OPTIONAL)
#undef LD_LOAD_REQUIRED
#undef LD_LOAD_OPTIONAL
    if (!missing) drv_ok = &drv;
}

const ld_driver_t *ld_driver(void) {
    pthread_once(&drv_once, load_driver);
    return drv_ok;
}

const char *ld_cu_errname(CUresult r) {
    const char *s = NULL;
    const ld_driver_t *d = ld_driver();
    if (d && d->cuGetErrorName(r, &s) == CUDA_SUCCESS && s) return s;
    static __thread char buf[32];
    snprintf(buf, sizeof buf, "CUresult %d", (int)r);
    return buf;
}
