/* fake_cudart.c — a fake CUDA runtime that reaches the driver the way the real cudart does:
 * dlopen("libcuda.so.1"), dlsym(handle, "cuGetProcAddress_v2") with the ordinary dlsym (so a
 * preloaded shim's dlsym interposer sees it), then cuGetProcAddress_v2 for every driver entry
 * with cudaVersion 13000 and CU_GET_PROC_ADDRESS_DEFAULT. Built both as libcudart.so.13 and
 * as a static archive linked into a program (the "static cudart" resolution path).
 *
 * Lazy initialization on the first call: cuInit(0), then per thread the primary context of
 * the thread's current device is retained and made current. Errors map CUresult ->
 * cudaError_t by number (they coincide for every code this fake returns).
 */
#include "tests/fake/fake_cudart.h"
#include "shim/cuda_compat.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RT_API __attribute__((visibility("default")))

/* Driver entries the runtime uses: X(field, base name, signature). */
#define RT_DRIVER(X) \
    X(init, "cuInit", (unsigned int)) \
    X(device_get_count, "cuDeviceGetCount", (int *)) \
    X(primary_retain, "cuDevicePrimaryCtxRetain", (CUcontext *, CUdevice)) \
    X(ctx_get_current, "cuCtxGetCurrent", (CUcontext *)) \
    X(ctx_set_current, "cuCtxSetCurrent", (CUcontext)) \
    X(ctx_synchronize, "cuCtxSynchronize", (void)) \
    X(ctx_enable_peer, "cuCtxEnablePeerAccess", (CUcontext, unsigned int)) \
    X(mem_alloc, "cuMemAlloc", (CUdeviceptr *, size_t)) \
    X(mem_free, "cuMemFree", (CUdeviceptr)) \
    X(mem_get_info, "cuMemGetInfo", (size_t *, size_t *)) \
    X(memset_d8, "cuMemsetD8", (CUdeviceptr, unsigned char, size_t)) \
    X(ipc_get_handle, "cuIpcGetMemHandle", (CUipcMemHandle *, CUdeviceptr)) \
    X(pointer_get_attr, "cuPointerGetAttribute", (void *, CUpointer_attribute, CUdeviceptr)) \
    X(module_load, "cuModuleLoadData", (CUmodule *, const void *)) \
    X(module_get_function, "cuModuleGetFunction", (CUfunction *, CUmodule, const char *)) \
    X(stream_create, "cuStreamCreate", (CUstream *, unsigned int)) \
    X(stream_destroy, "cuStreamDestroy", (CUstream))

/* Entries whose per-thread variant a --default-stream per-thread runtime uses. */
#define RT_DRIVER_PT(X) \
    X(launch, "cuLaunchKernel", (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, \
                                 CUstream, void **, void **)) \
    X(stream_sync, "cuStreamSynchronize", (CUstream))

static struct {
    CUresult (*get_proc)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
#define RT_FIELD(f, name, sig) CUresult (*f) sig;
    RT_DRIVER(RT_FIELD)
    RT_DRIVER_PT(RT_FIELD)
#undef RT_FIELD
    CUmodule mod;
    CUfunction kernel;
    cudaError_t init_error;
    CUcontext primary[64];
    int ndevices;
} rt;

static pthread_once_t rt_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t rt_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int rt_device;
static __thread CUcontext rt_bound;   /* the context this thread got from us */

static void rt_init_once(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) { rt.init_error = cudaErrorInitializationError; return; }
    rt.get_proc = (CUresult (*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))
        dlsym(h, "cuGetProcAddress_v2");
    if (!rt.get_proc) { rt.init_error = cudaErrorInitializationError; return; }
#define RT_RESOLVE(f, name, sig) \
    if (rt.get_proc(name, (void **)&rt.f, FAKE_CUDART_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, NULL) != CUDA_SUCCESS || \
        !rt.f) { rt.init_error = cudaErrorInitializationError; return; }
    RT_DRIVER(RT_RESOLVE)
#undef RT_RESOLVE
    const char *pt = getenv("FAKERT_PER_THREAD");
    cuuint64_t ptflag = pt && !strcmp(pt, "1") ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
#define RT_RESOLVE_PT(f, name, sig) \
    if (rt.get_proc(name, (void **)&rt.f, FAKE_CUDART_VERSION, ptflag, NULL) != CUDA_SUCCESS || !rt.f) { \
        rt.init_error = cudaErrorInitializationError; return; }
    RT_DRIVER_PT(RT_RESOLVE_PT)
#undef RT_RESOLVE_PT
    if (rt.init(0) != CUDA_SUCCESS) { rt.init_error = cudaErrorInitializationError; return; }
    if (rt.device_get_count(&rt.ndevices) != CUDA_SUCCESS || rt.ndevices <= 0) {
        rt.init_error = cudaErrorNoDevice;
        return;
    }
    if (rt.ndevices > 64) rt.ndevices = 64;
}

static cudaError_t rt_err(CUresult r) { return (cudaError_t)r; }

static CUcontext rt_primary(int dev, cudaError_t *err) {
    pthread_mutex_lock(&rt_lock);
    CUcontext c = rt.primary[dev];
    CUresult r = CUDA_SUCCESS;
    if (!c) {
        r = rt.primary_retain(&c, dev);
        if (r == CUDA_SUCCESS) rt.primary[dev] = c;
    }
    pthread_mutex_unlock(&rt_lock);
    *err = rt_err(r);
    return r == CUDA_SUCCESS ? c : NULL;
}

/* Process init + make the thread's device primary context current. */
static cudaError_t rt_ready(void) {
    pthread_once(&rt_once, rt_init_once);
    if (rt.init_error) return rt.init_error;
    CUcontext cur = NULL;
    rt.ctx_get_current(&cur);
    if (cur && cur == rt_bound) return cudaSuccess;
    if (cur) return cudaSuccess;   /* the program made its own context current: use it */
    cudaError_t e;
    CUcontext c = rt_primary(rt_device, &e);
    if (!c) return e;
    CUresult r = rt.ctx_set_current(c);
    if (r != CUDA_SUCCESS) return rt_err(r);
    rt_bound = c;
    return cudaSuccess;
}

RT_API cudaError_t cudaMalloc(void **p, size_t size) {
    cudaError_t e = rt_ready();
    if (e) return e;
    if (!p) return cudaErrorInvalidValue;
    CUdeviceptr d = 0;
    CUresult r = rt.mem_alloc(&d, size);
    if (r != CUDA_SUCCESS) return rt_err(r);
    *p = (void *)(uintptr_t)d;
    return cudaSuccess;
}

/* The real cudaFree synchronizes inside the driver's free; the fake only calls it. */
RT_API cudaError_t cudaFree(void *p) {
    cudaError_t e = rt_ready();
    if (e) return e;
    if (!p) return cudaSuccess;
    return rt_err(rt.mem_free((CUdeviceptr)(uintptr_t)p));
}

RT_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    cudaError_t e = rt_ready();
    if (e) return e;
    if ((unsigned)kind > cudaMemcpyDefault || (n && (!dst || !src))) return cudaErrorInvalidValue;
    memmove(dst, src, n);
    return cudaSuccess;
}

RT_API cudaError_t cudaMemset(void *p, int v, size_t n) {
    cudaError_t e = rt_ready();
    if (e) return e;
    return rt_err(rt.memset_d8((CUdeviceptr)(uintptr_t)p, (unsigned char)v, n));
}

RT_API cudaError_t cudaGetDeviceCount(int *n) {
    pthread_once(&rt_once, rt_init_once);
    if (rt.init_error) return rt.init_error;
    if (!n) return cudaErrorInvalidValue;
    *n = rt.ndevices;
    return cudaSuccess;
}

RT_API cudaError_t cudaSetDevice(int dev) {
    pthread_once(&rt_once, rt_init_once);
    if (rt.init_error) return rt.init_error;
    if (dev < 0 || dev >= rt.ndevices) return cudaErrorInvalidDevice;
    cudaError_t e;
    CUcontext c = rt_primary(dev, &e);
    if (!c) return e;
    CUresult r = rt.ctx_set_current(c);
    if (r != CUDA_SUCCESS) return rt_err(r);
    rt_device = dev;
    rt_bound = c;
    return cudaSuccess;
}

RT_API cudaError_t cudaGetDevice(int *dev) {
    if (!dev) return cudaErrorInvalidValue;
    *dev = rt_device;
    return cudaSuccess;
}

RT_API cudaError_t cudaDeviceSynchronize(void) {
    cudaError_t e = rt_ready();
    if (e) return e;
    return rt_err(rt.ctx_synchronize());
}

RT_API cudaError_t cudaMemGetInfo(size_t *freeb, size_t *total) {
    cudaError_t e = rt_ready();
    if (e) return e;
    return rt_err(rt.mem_get_info(freeb, total));
}

RT_API cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p) {
    cudaError_t e = rt_ready();
    if (e) return e;
    if (!h) return cudaErrorInvalidValue;
    CUipcMemHandle ch;
    CUresult r = rt.ipc_get_handle(&ch, (CUdeviceptr)(uintptr_t)p);
    if (r != CUDA_SUCCESS) return rt_err(r);
    memcpy(h->reserved, ch.reserved, sizeof h->reserved);
    return cudaSuccess;
}

RT_API cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
    cudaError_t e = rt_ready();
    if (e) return e;
    if (peer < 0 || peer >= rt.ndevices) return cudaErrorInvalidDevice;
    CUcontext pc = rt_primary(peer, &e);
    if (!pc) return e;
    return rt_err(rt.ctx_enable_peer(pc, flags));
}

RT_API cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
    cudaError_t e = rt_ready();
    if (e) return e;
    if (!a) return cudaErrorInvalidValue;
    int dev = -1;
    if (rt.pointer_get_attr(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS) {
        *a = (struct cudaPointerAttributes){ cudaMemoryTypeUnregistered, -2, NULL, (void *)p };
        return cudaSuccess;   /* unregistered host memory, as cudart >= 11 reports it */
    }
    *a = (struct cudaPointerAttributes){ cudaMemoryTypeDevice, dev, (void *)p, NULL };
    return cudaSuccess;
}

RT_API cudaError_t cudaGetDriverEntryPointByVersion(const char *sym, void **fn, unsigned int ver,
                                                    unsigned long long flags,
                                                    cudaDriverEntryPointQueryResult *st) {
    pthread_once(&rt_once, rt_init_once);
    if (!rt.get_proc) return cudaErrorInitializationError;
    CUdriverProcAddressQueryResult cst = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult r = rt.get_proc(sym, fn, (int)ver, flags, &cst);
    if (st) *st = (cudaDriverEntryPointQueryResult)cst;
    return rt_err(r);
}

RT_API cudaError_t cudaGetDriverEntryPoint(const char *sym, void **fn, unsigned long long flags,
                                           cudaDriverEntryPointQueryResult *st) {
    return cudaGetDriverEntryPointByVersion(sym, fn, FAKE_CUDART_VERSION, flags, st);
}

RT_API cudaError_t cudaStreamCreate(cudaStream_t *s) {
    cudaError_t e = rt_ready();
    if (e) return e;
    if (!s) return cudaErrorInvalidValue;
    return rt_err(rt.stream_create((CUstream *)s, 0));
}

RT_API cudaError_t cudaStreamDestroy(cudaStream_t s) {
    cudaError_t e = rt_ready();
    if (e) return e;
    return rt_err(rt.stream_destroy((CUstream)s));
}

RT_API cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    cudaError_t e = rt_ready();
    if (e) return e;
    return rt_err(rt.stream_sync((CUstream)s));
}

RT_API cudaError_t fakert_launch(unsigned grid, cudaStream_t s) {
    cudaError_t e = rt_ready();
    if (e) return e;
    pthread_mutex_lock(&rt_lock);
    CUresult r = CUDA_SUCCESS;
    if (!rt.kernel && (r = rt.module_load(&rt.mod, "FAKEMOD v1 functions=rt_kernel")) == CUDA_SUCCESS)
        r = rt.module_get_function(&rt.kernel, rt.mod, "rt_kernel");
    CUfunction k = rt.kernel;
    pthread_mutex_unlock(&rt_lock);
    if (r != CUDA_SUCCESS) return rt_err(r);
    void *params[] = { NULL };
    return rt_err(rt.launch(k, grid, 1, 1, 32, 1, 1, 0, (CUstream)s, params, NULL));
}

RT_API const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorCudartUnloading: return "driver shutting down";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorDeviceUninitialized: return "invalid device context";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorSymbolNotFound: return "named symbol not found";
    case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unrecognized error code";
    }
}
