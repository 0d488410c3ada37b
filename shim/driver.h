/* driver.h — the real CUDA driver, resolved lazily from libcuda.so.1.
 *
 * The shim never links against libcuda: the first call of ld_driver() dlopens
 * "libcuda.so.1" (or $LDSHIM_LIBCUDA, used by the tests' fake driver; one that cannot be
 * loaded or exports no cuInit is reported once and libcuda.so.1 used instead) and resolves
 * every entry below with the real dlsym. The shim's own driver calls go through this table, so
 * they never re-enter the shim's wrappers. Each member is the entry's name with a pfn_ prefix
 * (d->pfn_cuMemAlloc_v2 is the driver's cuMemAlloc_v2, resolved by that exact name): a driver
 * pointer never shares a name with the hook the shim exports, so a call says which it reaches.
 *
 * Thread-safety: ld_driver() is safe from any thread and never blocks on another thread
 * (idempotent initialization, see driver.c); the table is immutable once published. Entries the driver lacks are NULL; callers check the ones that may
 * be absent on old drivers (marked "optional"). Fork: the table stays valid in a child.
 */
#ifndef LDSHIM_DRIVER_H
#define LDSHIM_DRIVER_H

#include "shim/cuda_compat.h"

/* X(name, return-less signature). Required entries: a driver lacking one is unusable. */
#define LD_DRIVER_REQUIRED(X) \
    X(cuInit, (unsigned int)) \
    X(cuDriverGetVersion, (int *)) \
    X(cuGetErrorName, (CUresult, const char **)) \
    X(cuDeviceGet, (CUdevice *, int)) \
    X(cuDeviceGetCount, (int *)) \
    X(cuDeviceGetAttribute, (int *, CUdevice_attribute, CUdevice)) \
    X(cuDeviceGetUuid_v2, (CUuuid *, CUdevice)) \
    X(cuCtxGetCurrent, (CUcontext *)) \
    X(cuCtxSetCurrent, (CUcontext)) \
    X(cuCtxGetDevice, (CUdevice *)) \
    X(cuCtxSynchronize, (void)) \
    X(cuCtxPushCurrent_v2, (CUcontext)) \
    X(cuCtxPopCurrent_v2, (CUcontext *)) \
    X(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice)) \
    X(cuDevicePrimaryCtxRelease_v2, (CUdevice)) \
    X(cuMemAlloc_v2, (CUdeviceptr *, size_t)) \
    X(cuMemFree_v2, (CUdeviceptr)) \
    X(cuMemGetInfo_v2, (size_t *, size_t *)) \
    X(cuMemcpyHtoD_v2, (CUdeviceptr, const void *, size_t)) \
    X(cuMemcpyDtoH_v2, (void *, CUdeviceptr, size_t)) \
    X(cuModuleLoadData, (CUmodule *, const void *)) \
    X(cuModuleUnload, (CUmodule)) \
    X(cuModuleGetFunction, (CUfunction *, CUmodule, const char *)) \
    X(cuModuleGetGlobal_v2, (CUdeviceptr *, size_t *, CUmodule, const char *)) \
    X(cuFuncSetAttribute, (CUfunction, CUfunction_attribute, int)) \
    X(cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, \
                       unsigned, CUstream, void **, void **)) \
    X(cuStreamCreate, (CUstream *, unsigned int)) \
    X(cuStreamDestroy_v2, (CUstream)) \
    X(cuStreamSynchronize, (CUstream))

/* Optional entries: VMM (absent on very old drivers), libraries (12.0+), IPC import, stream
 * capture, green contexts (12.4+), memory pools. Only what the shim calls is here. */
#define LD_DRIVER_OPTIONAL(X) \
    X(cuGetProcAddress_v2, (const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *)) \
    X(cuMemAddressReserve, (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long)) \
    X(cuMemAddressFree, (CUdeviceptr, size_t)) \
    X(cuMemCreate, (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, \
                    unsigned long long)) \
    X(cuMemRelease, (CUmemGenericAllocationHandle)) \
    X(cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long)) \
    X(cuMemUnmap, (CUdeviceptr, size_t)) \
    X(cuMemSetAccess, (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t)) \
    X(cuMemGetAllocationGranularity, (size_t *, const CUmemAllocationProp *, \
                                      CUmemAllocationGranularity_flags)) \
    X(cuMemExportToShareableHandle, (void *, CUmemGenericAllocationHandle, \
                                     CUmemAllocationHandleType, unsigned long long)) \
    X(cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle *, void *, \
                                       CUmemAllocationHandleType)) \
    X(cuLibraryGetGlobal, (CUdeviceptr *, size_t *, CUlibrary, const char *)) \
    X(cuStreamIsCapturing, (CUstream, CUstreamCaptureStatus *)) \
    X(cuThreadExchangeStreamCaptureMode, (CUstreamCaptureMode *)) \
    X(cuDevicePrimaryCtxGetState, (CUdevice, unsigned int *, int *)) \
    X(cuMemcpyHtoDAsync_v2, (CUdeviceptr, const void *, size_t, CUstream)) \
    /* green contexts (CUDA 12.4+) and context-independent kernels (12.0+): compute.c */ \
    X(cuDeviceGetDevResource, (CUdevice, CUdevResource *, CUdevResourceType)) \
    X(cuDevSmResourceSplitByCount, (CUdevResource *, unsigned int *, const CUdevResource *, CUdevResource *, \
                                    unsigned int, unsigned int)) \
    X(cuDevResourceGenerateDesc, (CUdevResourceDesc *, CUdevResource *, unsigned int)) \
    X(cuGreenCtxCreate, (CUgreenCtx *, CUdevResourceDesc, CUdevice, unsigned int)) \
    X(cuGreenCtxDestroy, (CUgreenCtx)) \
    X(cuCtxFromGreenCtx, (CUcontext *, CUgreenCtx)) \
    X(cuGreenCtxStreamCreate, (CUstream *, CUgreenCtx, unsigned int, int)) \
    X(cuLibraryLoadData, (CUlibrary *, const void *, CUjit_option *, void **, unsigned int, CUlibraryOption *, \
                          void **, unsigned int)) \
    X(cuLibraryUnload, (CUlibrary)) \
    X(cuLibraryGetKernel, (CUkernel *, CUlibrary, const char *)) \
    X(cuKernelSetAttribute, (CUfunction_attribute, int, CUkernel, CUdevice)) \
    /* stream-ordered and managed memory placed in a domain (place.c) */ \
    X(cuMemPoolCreate, (CUmemoryPool *, const CUmemPoolProps *)) \
    X(cuMemPoolDestroy, (CUmemoryPool)) \
    X(cuMemPoolSetAccess, (CUmemoryPool, const CUmemAccessDesc *, size_t)) \
    X(cuMemPoolGetAccess, (CUmemAccess_flags *, CUmemoryPool, CUmemLocation *)) \
    X(cuMemPoolTrimTo, (CUmemoryPool, size_t)) \
    X(cuMemPoolGetAttribute, (CUmemoryPool, CUmemPool_attribute, void *)) \
    X(cuMemPoolSetAttribute, (CUmemoryPool, CUmemPool_attribute, void *)) \
    X(cuDeviceGetDefaultMemPool, (CUmemoryPool *, CUdevice)) \
    X(cuDeviceGetMemPool, (CUmemoryPool *, CUdevice)) \
    X(cuMemAllocFromPoolAsync, (CUdeviceptr *, size_t, CUmemoryPool, CUstream)) \
    X(cuMemAdvise_v2, (CUdeviceptr, size_t, CUmem_advise, CUmemLocation)) \
    X(cuStreamGetDevice, (CUstream, CUdevice *)) \
    X(cuPointerGetAttribute, (void *, CUpointer_attribute, CUdeviceptr))

typedef struct ld_driver {
#define LD_DRIVER_FIELD(name, args) CUresult (*pfn_##name) args;
    LD_DRIVER_REQUIRED(LD_DRIVER_FIELD)
    LD_DRIVER_OPTIONAL(LD_DRIVER_FIELD)
#undef LD_DRIVER_FIELD
    void *handle;          /* dlopen handle of libcuda */
} ld_driver_t;

/* The real driver, or NULL when libcuda cannot be loaded or lacks a required entry (the
 * reason is logged once at info level). Never initializes CUDA (no cuInit). */
const ld_driver_t *ld_driver(void);

/* The dlopen handle of libcuda even when it lacks a required entry (the exported
 * wrappers forward through it), or NULL when it cannot be loaded. */
void *ld_driver_handle(void);

/* 1 if `map` (a link map, from dladdr1 RTLD_DL_LINKMAP) is the published libcuda's: a library
 * of LDSHIM_LIBCUDA is loaded as /proc/self/fd/N, so its name says nothing. Loads nothing. */
int ld_driver_is_map(const void *map);

/* The real dlsym (the shim interposes dlsym). Safe before ld_driver(). */
void *ld_real_dlsym(void *handle, const char *name);

/* Locality domains the driver reports for dev (CUDA 13.4 attribute), 0 when it cannot say. */
int ld_native_domain_count(const ld_driver_t *d, CUdevice dev);

/* "CUDA_ERROR_OUT_OF_MEMORY" style name for messages; never NULL. */
const char *ld_cu_errname(CUresult r);

/* The shim's own driver work inside a program's thread (the probe, publishing the map):
 * this thread's stream-capture mode relaxed, so the shim's calls neither join nor invalidate
 * a capture the program runs in another thread, and a context made current for the work.
 *
 *     ld_own_calls_t oc;
 *     ld_own_calls_begin(&oc, d);         relax the capture mode
 *     ld_own_calls_push(&oc, ctx);        optional: make ctx current (0 when it is)
 *     ...
 *     ld_own_calls_pop(&oc);              optional: what push made current goes
 *     ld_own_calls_end(&oc);              pops if still pushed; the program's mode is back
 *
 * Header-only, so the probe's tests link it with their stub driver table. */
typedef struct {
    const ld_driver_t *d;
    CUstreamCaptureMode mode;      /* the program's, while relaxed */
    int relaxed, pushed;
} ld_own_calls_t;

static inline void ld_own_calls_begin(ld_own_calls_t *oc, const ld_driver_t *d) {
    oc->d = d;
    oc->mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    oc->relaxed = d->pfn_cuThreadExchangeStreamCaptureMode && d->pfn_cuThreadExchangeStreamCaptureMode(&oc->mode) == CUDA_SUCCESS;
    oc->pushed = 0;
}
static inline int ld_own_calls_push(ld_own_calls_t *oc, CUcontext ctx) {
    if (oc->pushed) return -1;
    oc->pushed = oc->d->pfn_cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS;
    return oc->pushed ? 0 : -1;
}
static inline void ld_own_calls_pop(ld_own_calls_t *oc) {
    if (!oc->pushed) return;
    CUcontext x;
    oc->d->pfn_cuCtxPopCurrent_v2(&x);
    oc->pushed = 0;
}
static inline void ld_own_calls_end(ld_own_calls_t *oc) {
    ld_own_calls_pop(oc);
    if (oc->relaxed) oc->d->pfn_cuThreadExchangeStreamCaptureMode(&oc->mode);
    oc->relaxed = 0;
}

#endif /* LDSHIM_DRIVER_H */
