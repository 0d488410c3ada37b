/* interpose.c — every way a program reaches the driver leads here.
 *
 *   exported cu* symbols        programs linked with -lcuda (driver API)
 *   dlsym                       dlopen("libcuda.so.1") + dlsym (static cudart does this)
 *   cuGetProcAddress[_v2]       how cudart (>= 11.3, static or dynamic) resolves everything
 *   cudaGetDriverEntryPoint*    programs asking the dynamic runtime for driver entries
 *
 * Each resolver calls the real one first and substitutes a wrapper only when the pointer
 * it got is provably the exact ABI variant the wrapper implements: the same address as
 * libcuda's exported symbol of that name, or (dladdr) a symbol of that exact name inside
 * libcuda. Anything else passes through untouched. In the stock state nothing is
 * substituted, so the program talks to the real driver directly.
 *
 * Entries reached through cuGetProcAddress are tagged api=runtime, exported symbols and
 * dlsym api=driver (policy `api`). */
#include "shim/alloc.h"
#include "shim/config.h"
#include "shim/device.h"
#include "shim/driver.h"
#include "shim/log.h"
#include "shim/pool.h"
#include "shim/registry.h"
#include "shim/report.h"
#include "shim/topology.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

/* --- wrappers' real targets ------------------------------------------------------------- */

enum {
    H_cuMemAlloc_v2, H_cuMemFree_v2, H_cuMemGetAddressRange_v2, H_cuIpcGetMemHandle,
    H_cuCtxEnablePeerAccess, H_cuDevicePrimaryCtxRetain, H_cuCtxCreate_v2, H_cuCtxCreate_v3,
    H_cuCtxCreate_v4, H_cuModuleLoad, H_cuModuleLoadData, H_cuModuleLoadDataEx,
    H_cuModuleLoadFatBinary, H_cuModuleUnload, H_cuLibraryLoadData, H_cuLibraryLoadFromFile,
    H_cuLibraryUnload, H_cuGetProcAddress, H_cuGetProcAddress_v2, H_COUNT
};

typedef struct {
    const char *name;    /* exact ABI name exported by libcuda */
    void *drv;           /* wrapper for symbol/dlsym resolution (api = driver)   */
    void *rt;            /* wrapper handed out by cuGetProcAddress (api = runtime) */
    void *real;          /* libcuda's own address, NULL if this driver lacks it  */
} hook_t;

static hook_t hooks[H_COUNT];
static void *libcuda_base;
static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;

#define REAL(name, type) ((type)hooks[H_##name].real)

static void hooks_init(void);
static inline const ld_driver_t *drv(void) {
    pthread_once(&hooks_once, hooks_init);
    ld_note_cuda_use();
    return ld_driver();
}

/* --- allocation ------------------------------------------------------------------------- */

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
    if (!drv()) return CUDA_ERROR_NOT_INITIALIZED;
    return ld_alloc(dptr, bytes, LD_API_DRIVER);
}
static CUresult rt_cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
    if (!drv()) return CUDA_ERROR_NOT_INITIALIZED;
    return ld_alloc(dptr, bytes, LD_API_RUNTIME);
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
    if (!drv()) return CUDA_ERROR_NOT_INITIALIZED;
    return ld_free(p);
}

EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr p) {
    const ld_driver_t *d = drv();
    if (!d) return CUDA_ERROR_NOT_INITIALIZED;
    ld_range_t r;
    if (ld_registry_find(p, &r) == 0) {
        /* The driver would answer only the one slice mapping holding p. */
        if (pbase) *pbase = r.base;
        if (psize) *psize = r.size;
        return CUDA_SUCCESS;
    }
    if (ld_pool_contains(p)) return CUDA_ERROR_NOT_FOUND;   /* freed by the program, kept by the pool */
    return d->cuMemGetAddressRange_v2(pbase, psize, p);
}

EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) {
    const ld_driver_t *d = drv();
    if (!d || !hooks[H_cuIpcGetMemHandle].real) return CUDA_ERROR_NOT_INITIALIZED;
    ld_range_t r;
    if (ld_registry_find(p, &r) == 0) {
        ld_rule_note_ipc_refused(r.rule);
        const char *rule = r.rule >= 0 && r.rule < ld_cfg.policy.n_rules ? ld_cfg.policy.rules[r.rule].name : "?";
        LD_WARN("cuIpcGetMemHandle(0x%llx): memory placed by rule '%s' is a VMM mapping and has no legacy IPC "
                "handle; exclude this size (%zu bytes) from the policy for programs that share it",
                (unsigned long long)p, rule, r.size);
        return CUDA_ERROR_INVALID_VALUE;      /* what the driver itself answers for VMM memory */
    }
    return REAL(cuIpcGetMemHandle, CUresult (*)(CUipcMemHandle *, CUdeviceptr))(h, p);
}

/* cuCtxEnablePeerAccess lets the *current* context read `peer`'s memory: extend the
 * access of the shim's ranges on peer's device to the current device. */
EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
    const ld_driver_t *d = drv();
    if (!d || !hooks[H_cuCtxEnablePeerAccess].real) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuCtxEnablePeerAccess, CUresult (*)(CUcontext, unsigned))(peer, flags);
    if (r != CUDA_SUCCESS || !ld_active()) return r;
    CUdevice me, owner;
    if (d->cuCtxGetDevice(&me) != CUDA_SUCCESS) return r;
    if (d->cuCtxPushCurrent_v2(peer) != CUDA_SUCCESS) return r;
    CUresult g = d->cuCtxGetDevice(&owner);
    CUcontext x;
    d->cuCtxPopCurrent_v2(&x);
    if (g == CUDA_SUCCESS) ld_device_grant_peer(d, owner, me);
    return r;
}

/* --- context creation: the probe ------------------------------------------------------- */

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    const ld_driver_t *d = drv();
    if (!d) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = d->cuDevicePrimaryCtxRetain(pctx, dev);
    if (r == CUDA_SUCCESS && pctx) ld_topology_on_context(d, dev, *pctx, 0);
    return r;
}

#define CTX_CREATED(r, pctx, dev) \
    do { if ((r) == CUDA_SUCCESS && (pctx)) ld_topology_on_context(ld_driver(), (dev), *(pctx), 1); } while (0)

EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    if (!drv() || !hooks[H_cuCtxCreate_v2].real) return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = REAL(cuCtxCreate_v2, CUresult (*)(CUcontext *, unsigned, CUdevice))(pctx, flags, dev);
    CTX_CREATED(r, pctx, dev);
    return r;
}

EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n, unsigned int flags, CUdevice dev) {
    if (!drv() || !hooks[H_cuCtxCreate_v3].real) return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = REAL(cuCtxCreate_v3, CUresult (*)(CUcontext *, CUexecAffinityParam *, int, unsigned, CUdevice))(
        pctx, params, n, flags, dev);
    CTX_CREATED(r, pctx, dev);
    return r;
}

EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev) {
    if (!drv() || !hooks[H_cuCtxCreate_v4].real) return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = REAL(cuCtxCreate_v4, CUresult (*)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice))(
        pctx, params, flags, dev);
    CTX_CREATED(r, pctx, dev);
    return r;
}

/* --- module loading: publication -------------------------------------------------------- */

EXPORT CUresult cuModuleLoad(CUmodule *m, const char *fname) {
    const ld_driver_t *d = drv();
    if (!d || !hooks[H_cuModuleLoad].real) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuModuleLoad, CUresult (*)(CUmodule *, const char *))(m, fname);
    if (r == CUDA_SUCCESS && m) ld_topology_on_module(d, LD_MOD_MODULE, *m, NULL, fname);
    return r;
}

EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *image) {
    const ld_driver_t *d = drv();
    if (!d) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = d->cuModuleLoadData(m, image);
    if (r == CUDA_SUCCESS && m) ld_topology_on_module(d, LD_MOD_MODULE, *m, image, NULL);
    return r;
}

EXPORT CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned int n, CUjit_option *opts, void **vals) {
    const ld_driver_t *d = drv();
    if (!d || !hooks[H_cuModuleLoadDataEx].real) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuModuleLoadDataEx, CUresult (*)(CUmodule *, const void *, unsigned, CUjit_option *, void **))(
        m, image, n, opts, vals);
    if (r == CUDA_SUCCESS && m) ld_topology_on_module(d, LD_MOD_MODULE, *m, image, NULL);
    return r;
}

EXPORT CUresult cuModuleLoadFatBinary(CUmodule *m, const void *fatbin) {
    const ld_driver_t *d = drv();
    if (!d || !hooks[H_cuModuleLoadFatBinary].real) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuModuleLoadFatBinary, CUresult (*)(CUmodule *, const void *))(m, fatbin);
    if (r == CUDA_SUCCESS && m) ld_topology_on_module(d, LD_MOD_MODULE, *m, fatbin, NULL);
    return r;
}

EXPORT CUresult cuModuleUnload(CUmodule m) {
    const ld_driver_t *d = drv();
    if (!d) return CUDA_ERROR_NOT_INITIALIZED;
    ld_topology_forget_module(m);
    return d->cuModuleUnload(m);
}

typedef CUresult (*lib_load_data_t)(CUlibrary *, const void *, CUjit_option *, void **, unsigned, CUlibraryOption *,
                                    void **, unsigned);
typedef CUresult (*lib_load_file_t)(CUlibrary *, const char *, CUjit_option *, void **, unsigned, CUlibraryOption *,
                                    void **, unsigned);

EXPORT CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, CUjit_option *jo, void **jv, unsigned int nj,
                                  CUlibraryOption *lo, void **lv, unsigned int nl) {
    const ld_driver_t *d = drv();
    if (!d || !hooks[H_cuLibraryLoadData].real) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuLibraryLoadData, lib_load_data_t)(lib, code, jo, jv, nj, lo, lv, nl);
    if (r == CUDA_SUCCESS && lib) ld_topology_on_module(d, LD_MOD_LIBRARY, *lib, code, NULL);
    return r;
}

EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *lib, const char *file, CUjit_option *jo, void **jv, unsigned int nj,
                                      CUlibraryOption *lo, void **lv, unsigned int nl) {
    const ld_driver_t *d = drv();
    if (!d || !hooks[H_cuLibraryLoadFromFile].real) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuLibraryLoadFromFile, lib_load_file_t)(lib, file, jo, jv, nj, lo, lv, nl);
    if (r == CUDA_SUCCESS && lib) ld_topology_on_module(d, LD_MOD_LIBRARY, *lib, NULL, file);
    return r;
}

EXPORT CUresult cuLibraryUnload(CUlibrary lib) {
    if (!drv() || !hooks[H_cuLibraryUnload].real) return CUDA_ERROR_NOT_INITIALIZED;
    ld_topology_forget_module(lib);
    return REAL(cuLibraryUnload, CUresult (*)(CUlibrary))(lib);
}

/* --- resolvers --------------------------------------------------------------------------- */

/* The wrapper for pointer `p`, if p is provably libcuda's entry of a hooked name. */
static void *substitute(void *p, int runtime) {
    if (!p || !ld_active()) return p;
    pthread_once(&hooks_once, hooks_init);
    for (int i = 0; i < H_COUNT; i++)
        if (hooks[i].real == p) return runtime ? hooks[i].rt : hooks[i].drv;
    Dl_info info;
    if (libcuda_base && dladdr(p, &info) && info.dli_fbase == libcuda_base && info.dli_sname &&
        info.dli_saddr == p) {
        for (int i = 0; i < H_COUNT; i++)
            if (!strcmp(hooks[i].name, info.dli_sname)) return runtime ? hooks[i].rt : hooks[i].drv;
    }
    return p;
}

typedef CUresult (*gpa2_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa1_t)(const char *, void **, int, cuuint64_t);

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status) {
    if (!drv() || !hooks[H_cuGetProcAddress_v2].real) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuGetProcAddress_v2, gpa2_t)(symbol, pfn, ver, flags, status);
    if (r == CUDA_SUCCESS && pfn) *pfn = substitute(*pfn, 1);
    return r;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags) {
    if (!drv() || !hooks[H_cuGetProcAddress].real) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuGetProcAddress, gpa1_t)(symbol, pfn, ver, flags);
    if (r == CUDA_SUCCESS && pfn) *pfn = substitute(*pfn, 1);
    return r;
}

/* The dynamic runtime's own resolvers (static cudart resolves through the hooked
 * cuGetProcAddress already; substituting twice is harmless: a wrapper is never libcuda's). */
typedef int (*gdep_t)(const char *, void **, unsigned long long, int *);
typedef int (*gdepv_t)(const char *, void **, unsigned int, unsigned long long, int *);
#define CUDA_ERROR_NOT_SUPPORTED_RT 801

#define RUNTIME_RESOLVER(name)                                                                     \
    EXPORT int name(const char *symbol, void **fp, unsigned long long flags, int *st) {             \
        static gdep_t real;                                                                        \
        if (!real) real = (gdep_t)ld_real_dlsym(RTLD_NEXT, #name);                                 \
        if (!real) return CUDA_ERROR_NOT_SUPPORTED_RT;                                             \
        int r = real(symbol, fp, flags, st);                                                       \
        if (r == 0 && fp) *fp = substitute(*fp, 1);                                                \
        return r;                                                                                  \
    }
#define RUNTIME_RESOLVER_V(name)                                                                   \
    EXPORT int name(const char *symbol, void **fp, unsigned int ver, unsigned long long flags, int *st) { \
        static gdepv_t real;                                                                       \
        if (!real) real = (gdepv_t)ld_real_dlsym(RTLD_NEXT, #name);                                \
        if (!real) return CUDA_ERROR_NOT_SUPPORTED_RT;                                             \
        int r = real(symbol, fp, ver, flags, st);                                                  \
        if (r == 0 && fp) *fp = substitute(*fp, 1);                                                \
        return r;                                                                                  \
    }
RUNTIME_RESOLVER(cudaGetDriverEntryPoint)
RUNTIME_RESOLVER(cudaGetDriverEntryPoint_ptsz)
RUNTIME_RESOLVER_V(cudaGetDriverEntryPointByVersion)
RUNTIME_RESOLVER_V(cudaGetDriverEntryPointByVersion_ptsz)

/* dlsym: names starting with "cu" (and a handle other than RTLD_NEXT) go through
 * ld_dlsym_cu; everything else tail-jumps to the real dlsym, so the real one still sees
 * its true caller (RTLD_NEXT and dlmopen namespaces depend on the return address). */
__attribute__((used, visibility("hidden"))) void *ld_dlsym_cu(void *handle, const char *name) {
    ld_note_cuda_use();
    return substitute(ld_real_dlsym(handle, name), 0);
}
void ld_dlsym_init(void);

#if defined(__x86_64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym,@function\n"
        "dlsym:\n"
        "  cmpq $-1, %rdi\n"            /* RTLD_NEXT */
        "  je 1f\n"
        "  testq %rsi, %rsi\n"
        "  je 1f\n"
        "  cmpb $0x63, (%rsi)\n"         /* 'c' */
        "  jne 1f\n"
        "  cmpb $0x75, 1(%rsi)\n"        /* 'u' */
        "  jne 1f\n"
        "  jmp ld_dlsym_cu\n"
        "1:\n"
        "  movq ld_real_dlsym_ptr(%rip), %rax\n"
        "  testq %rax, %rax\n"
        "  je 2f\n"
        "  jmp *%rax\n"
        "2:\n"
        "  pushq %rdi\n"
        "  pushq %rsi\n"
        "  subq $8, %rsp\n"
        "  call ld_dlsym_init\n"
        "  addq $8, %rsp\n"
        "  popq %rsi\n"
        "  popq %rdi\n"
        "  movq ld_real_dlsym_ptr(%rip), %rax\n"
        "  testq %rax, %rax\n"
        "  je 3f\n"
        "  jmp *%rax\n"
        "3:\n"
        "  xorl %eax, %eax\n"
        "  ret\n"
        ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym,%function\n"
        "dlsym:\n"
        "  cmn x0, #1\n"
        "  b.eq 1f\n"
        "  cbz x1, 1f\n"
        "  ldrb w2, [x1]\n"
        "  cmp w2, #0x63\n"
        "  b.ne 1f\n"
        "  ldrb w2, [x1, #1]\n"
        "  cmp w2, #0x75\n"
        "  b.ne 1f\n"
        "  b ld_dlsym_cu\n"
        "1:\n"
        "  adrp x2, ld_real_dlsym_ptr\n"
        "  ldr x2, [x2, :lo12:ld_real_dlsym_ptr]\n"
        "  cbz x2, 2f\n"
        "  br x2\n"
        "2:\n"
        "  stp x29, x30, [sp, #-32]!\n"
        "  stp x0, x1, [sp, #16]\n"
        "  bl ld_dlsym_init\n"
        "  ldp x0, x1, [sp, #16]\n"
        "  ldp x29, x30, [sp], #32\n"
        "  adrp x2, ld_real_dlsym_ptr\n"
        "  ldr x2, [x2, :lo12:ld_real_dlsym_ptr]\n"
        "  cbz x2, 3f\n"
        "  br x2\n"
        "3:\n"
        "  mov x0, #0\n"
        "  ret\n"
        ".size dlsym, .-dlsym\n");
#else
#error "ldshim's dlsym trampoline supports x86-64 and aarch64"
#endif

/* --- table -------------------------------------------------------------------------------- */

static void hooks_init(void) {
#define HOOK(n, w, wrt) hooks[H_##n] = (hook_t){#n, (void *)(w), (void *)(wrt), NULL}
    HOOK(cuMemAlloc_v2, cuMemAlloc_v2, rt_cuMemAlloc_v2);
    HOOK(cuMemFree_v2, cuMemFree_v2, cuMemFree_v2);
    HOOK(cuMemGetAddressRange_v2, cuMemGetAddressRange_v2, cuMemGetAddressRange_v2);
    HOOK(cuIpcGetMemHandle, cuIpcGetMemHandle, cuIpcGetMemHandle);
    HOOK(cuCtxEnablePeerAccess, cuCtxEnablePeerAccess, cuCtxEnablePeerAccess);
    HOOK(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
    HOOK(cuCtxCreate_v2, cuCtxCreate_v2, cuCtxCreate_v2);
    HOOK(cuCtxCreate_v3, cuCtxCreate_v3, cuCtxCreate_v3);
    HOOK(cuCtxCreate_v4, cuCtxCreate_v4, cuCtxCreate_v4);
    HOOK(cuModuleLoad, cuModuleLoad, cuModuleLoad);
    HOOK(cuModuleLoadData, cuModuleLoadData, cuModuleLoadData);
    HOOK(cuModuleLoadDataEx, cuModuleLoadDataEx, cuModuleLoadDataEx);
    HOOK(cuModuleLoadFatBinary, cuModuleLoadFatBinary, cuModuleLoadFatBinary);
    HOOK(cuModuleUnload, cuModuleUnload, cuModuleUnload);
    HOOK(cuLibraryLoadData, cuLibraryLoadData, cuLibraryLoadData);
    HOOK(cuLibraryLoadFromFile, cuLibraryLoadFromFile, cuLibraryLoadFromFile);
    HOOK(cuLibraryUnload, cuLibraryUnload, cuLibraryUnload);
    HOOK(cuGetProcAddress, cuGetProcAddress, cuGetProcAddress);
    HOOK(cuGetProcAddress_v2, cuGetProcAddress_v2, cuGetProcAddress_v2);
#undef HOOK
    const ld_driver_t *d = ld_driver();
    if (!d) return;
    for (int i = 0; i < H_COUNT; i++) hooks[i].real = ld_real_dlsym(d->handle, hooks[i].name);
    Dl_info info;
    if (d->cuInit && dladdr((void *)d->cuInit, &info)) libcuda_base = info.dli_fbase;
}
