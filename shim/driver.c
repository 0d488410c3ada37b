/* driver.c — resolve the real libcuda lazily, without ever linking against it.
 *
 * The shim interposes dlsym, so the real one is found with dlvsym (which we do not
 * interpose). Nothing here calls cuInit: loading the library initializes nothing.
 *
 * NOTES: no pthread_once here. dlopen/dlsym/dlvsym take the dynamic loader's lock; a
 * thread inside dlopen (holding that lock) may run a constructor that reaches the shim.
 * Were the first initialization a "once" that another thread is running (and blocked on
 * the loader lock), both would wait forever. So every initialization below is idempotent:
 * a thread that finds nothing published does the work itself and publishes with an atomic
 * compare-and-swap; a loser discards its copy. */
#include "shim/driver.h"
#include "shim/dlcheck.h"
#include "shim/file.h"
#include "shim/log.h"
#include "shim/options.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef void *(*dlsym_fn)(void *, const char *);
/* Read by the dlsym trampoline in interpose.c, hence not static. */
dlsym_fn ld_real_dlsym_ptr;

/* Sanitizers call dlsym while they start, before their own state exists: nothing on the
 * dlsym path may be instrumented. */
#define LD_NO_SANITIZE __attribute__((no_sanitize("address", "undefined", "thread")))

LD_NO_SANITIZE void ld_dlsym_init(void) {
    if (__atomic_load_n(&ld_real_dlsym_ptr, __ATOMIC_ACQUIRE)) return;
    /* glibc >= 2.34 versions dlsym GLIBC_2.34; older x86-64 GLIBC_2.2.5, aarch64 GLIBC_2.17. */
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
    dlsym_fn f = NULL;
    for (size_t i = 0; i < sizeof versions / sizeof *versions && !f; i++)
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    if (f) __atomic_store_n(&ld_real_dlsym_ptr, f, __ATOMIC_RELEASE);
}

LD_NO_SANITIZE void *ld_real_dlsym(void *handle, const char *name) {
    dlsym_fn f = __atomic_load_n(&ld_real_dlsym_ptr, __ATOMIC_ACQUIRE);
    if (!f) {
        ld_dlsym_init();
        f = __atomic_load_n(&ld_real_dlsym_ptr, __ATOMIC_ACQUIRE);
    }
    return f ? f(handle, name) : NULL;
}

static void *lib_handle;            /* libcuda, once some thread opened it            */
static ld_driver_t *table;          /* published complete table                       */
static int table_failed;            /* 1: libcuda absent or incomplete: pass through  */

static int alt_warned;

/* LDSHIM_LIBCUDA as a path: the file the file layer checked is the file loaded (dlcheck.c),
 * so a FIFO swapped in under the name cannot block the program's first CUDA call. The
 * library's link-map name is then /proc/self/fd/./N, hence ld_driver_is_map. */
int ld_driver_is_map(const void *map) {
    void *h = __atomic_load_n(&lib_handle, __ATOMIC_ACQUIRE);
    struct link_map *m = NULL;
    return map && h && dlinfo(h, RTLD_DI_LINKMAP, &m) == 0 && (const void *)m == map;
}

void *ld_driver_handle(void) {
    void *h = __atomic_load_n(&lib_handle, __ATOMIC_ACQUIRE);
    if (h) return h;
    /* LDSHIM_LIBCUDA names another driver library (the tests' fake). One that cannot be
     * loaded, or is no CUDA driver, must not cost the program its real driver: warn once
     * and use libcuda.so.1, which is what the program itself reaches. */
    const char *alt = ld_opt(LD_OPT_LIBCUDA);
    if (alt) {
        /* A path is loaded only when it names a regular file (the file layer's check: a FIFO
         * would hang dlopen's open, a device or directory has no business here), and the very
         * file checked (ld_dlopen_checked). A bare name is the dynamic loader's to find, as
         * libcuda.so.1 is. */
        char why[200] = "";
        h = NULL;
        if (strchr(alt, '/')) {
            h = ld_dlopen_checked(alt, why, sizeof why);
        } else if (!(h = ld_dlopen_loaded_first(alt))) {
            const char *e = dlerror();
            snprintf(why, sizeof why, "%s", e ? e : "dlopen failed");
        }
        if (h) {
            /* The toolkit's stub libcuda exports the names and fails every call: a library
             * lacking any entry the shim needs is no driver for it. */
            const char *lack = NULL;
#define LD_CHECK_ENTRY_(name, args) if (!lack && !ld_real_dlsym(h, #name)) lack = #name;
            LD_DRIVER_REQUIRED(LD_CHECK_ENTRY_)
#undef LD_CHECK_ENTRY_
            /* cuDriverGetVersion initializes nothing; the stub answers it with an error. */
            int ver = 0;
            CUresult (*get_ver)(int *) = lack ? NULL : (CUresult(*)(int *))ld_real_dlsym(h, "cuDriverGetVersion");
            CUresult vr = get_ver ? get_ver(&ver) : CUDA_SUCCESS;
            if (lack || vr != CUDA_SUCCESS) {
                dlclose(h);
                h = NULL;
                if (lack) snprintf(why, sizeof why, "it exports no %s: not a CUDA driver the shim can use", lack);
                else snprintf(why, sizeof why, "its cuDriverGetVersion fails with error %d: a stub, not a driver",
                              (int)vr);
            }
        }
        if (!h && !__atomic_exchange_n(&alt_warned, 1, __ATOMIC_RELAXED)) {
            char shown[160];
            LD_WARN(DRIVER, "LDSHIM_LIBCUDA=%s cannot be used (%s); using libcuda.so.1",
                            ld_file_printable(alt, shown, sizeof shown), why);
        }
    }
    if (!h) h = ld_dlopen_loaded_first("libcuda.so.1");
    if (!h) return NULL;
    void *expect = NULL;
    if (!__atomic_compare_exchange_n(&lib_handle, &expect, h, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        dlclose(h);                 /* another thread published the same library */
        h = expect;
    }
    return h;
}

const ld_driver_t *ld_driver(void) {
    ld_driver_t *t = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
    if (t) return t;
    if (__atomic_load_n(&table_failed, __ATOMIC_ACQUIRE)) return NULL;
    void *h = ld_driver_handle();
    if (!h) {
        LD_INFO(DRIVER, "cannot load libcuda (%s); the shim passes everything through", dlerror());
        __atomic_store_n(&table_failed, 1, __ATOMIC_RELEASE);
        return NULL;
    }
    ld_driver_t *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->handle = h;
    int missing = 0;
#define LD_LOAD_REQUIRED(name, args) \
    if (!(*(void **)&n->pfn_##name = ld_real_dlsym(h, #name))) { \
        LD_INFO(DRIVER, "libcuda lacks %s; tagged allocations pass through", #name); missing = 1; }
#define LD_LOAD_OPTIONAL(name, args) *(void **)&n->pfn_##name = ld_real_dlsym(h, #name);
    LD_DRIVER_REQUIRED(LD_LOAD_REQUIRED)
    LD_DRIVER_OPTIONAL(LD_LOAD_OPTIONAL)
#undef LD_LOAD_REQUIRED
#undef LD_LOAD_OPTIONAL
    if (missing) {
        free(n);
        __atomic_store_n(&table_failed, 1, __ATOMIC_RELEASE);
        return NULL;
    }
    ld_driver_t *expect = NULL;
    if (!__atomic_compare_exchange_n(&table, &expect, n, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        free(n);                    /* lost the race: use the published one */
        return expect;
    }
    return n;
}

const char *ld_cu_errname(CUresult r) {
    const char *s = NULL;
    const ld_driver_t *d = ld_driver();
    if (d && d->pfn_cuGetErrorName(r, &s) == CUDA_SUCCESS && s) return s;
    static __thread char buf[32];
    snprintf(buf, sizeof buf, "CUresult %d", (int)r);
    return buf;
}

int ld_native_domain_count(const ld_driver_t *d, CUdevice dev) {
    int v = 0;
    if (d->pfn_cuDeviceGetAttribute(&v, LD_CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_COUNT, dev) != CUDA_SUCCESS) return 0;
    return v > 0 ? v : 0;
}
