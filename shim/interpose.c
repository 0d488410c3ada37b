/* interpose.c — every way a program reaches the driver leads here.
 *
 *   exported cu* symbols        programs linked with -lcuda (driver API)
 *   dlsym                       dlopen("libcuda.so.1") + dlsym (static cudart does this)
 *   cuGetProcAddress[_v2]       how cudart (>= 11.3, static or dynamic) resolves everything;
 *                               cudaGetDriverEntryPoint* answers through cudart's own pointer
 *                               to it, which cudart got through dlsym, so it needs no hook
 *
 * Each resolver calls the real one first and substitutes a wrapper only when the pointer
 * it got is provably the exact ABI variant the wrapper implements: the same address as
 * libcuda's exported symbol of that name, or (dladdr) a symbol of that exact name inside
 * libcuda. Anything else passes through untouched. In the stock state nothing is
 * substituted, so the program talks to the real driver directly.
 *
 * NOTES: the resolvers never dlopen anything (a "cu" name outside libcuda, say cuserid,
 * costs one dladdr and loads nothing) and nothing here waits on another thread's
 * initialization (see driver.c): a constructor running inside dlopen may reach us.
 *
 * Entries reached through cuGetProcAddress are tagged api=runtime, exported symbols and
 * dlsym api=driver (policy `api`). */
#include "shim/alloc.h"
#include "shim/compute.h"
#include "shim/config.h"
#include "shim/device.h"
#include "shim/driver.h"
#include "shim/log.h"
#include "shim/options.h"
#include "shim/place.h"
#include "shim/pool.h"
#include "shim/registry.h"
#include "shim/report.h"
#include "shim/topology.h"
#include "shim/vmm.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

/* --- wrappers' real targets ------------------------------------------------------------- */

/* Entry points that take a stream (compute binding: ld_compute_stream maps the per-thread
 * default stream to the calling thread's stream of the bound context). Each is hooked as
 * itself and as its _ptsz variant. X(name, parameters, arguments); the stream is `hStream`.
 * Older ABI variants are here too (cuStreamGetCaptureInfo, _v2, cuMemPrefetchAsync, the
 * unversioned stream memory operations): a cudart of an older toolkit resolves those. Every
 * function of cuda.h that takes a stream is in one of these lists or, with the reason, in
 * tests/unit/stream_hooks.py, which checks that against the header. */
#define LD_STREAM_HOOKS(X) \
    X(cuLaunchKernel, (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
                       unsigned shm, CUstream hStream, void **kp, void **ex), \
      (f, gx, gy, gz, bx, by, bz, shm, hStream, kp, ex)) \
    X(cuLaunchHostFunc, (CUstream hStream, CUhostFn fn, void *u), (hStream, fn, u)) \
    X(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream hStream), (dst, src, n, hStream)) \
    X(cuMemcpyHtoDAsync_v2, (CUdeviceptr dst, const void *src, size_t n, CUstream hStream), (dst, src, n, hStream)) \
    X(cuMemcpyDtoHAsync_v2, (void *dst, CUdeviceptr src, size_t n, CUstream hStream), (dst, src, n, hStream)) \
    X(cuMemcpyDtoDAsync_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream hStream), (dst, src, n, hStream)) \
    X(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D *cp, CUstream hStream), (cp, hStream)) \
    X(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D *cp, CUstream hStream), (cp, hStream)) \
    X(cuMemcpyPeerAsync, (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream hStream), \
      (dst, dc, src, sc, n, hStream)) \
    X(cuMemcpy3DPeerAsync, (const CUDA_MEMCPY3D_PEER *cp, CUstream hStream), (cp, hStream)) \
    X(cuMemcpyHtoAAsync_v2, (CUarray dst, size_t off, const void *src, size_t n, CUstream hStream), \
      (dst, off, src, n, hStream)) \
    X(cuMemcpyAtoHAsync_v2, (void *dst, CUarray src, size_t off, size_t n, CUstream hStream), (dst, src, off, n, hStream)) \
    X(cuMemsetD8Async, (CUdeviceptr dp, unsigned char v, size_t n, CUstream hStream), (dp, v, n, hStream)) \
    X(cuMemsetD16Async, (CUdeviceptr dp, unsigned short v, size_t n, CUstream hStream), (dp, v, n, hStream)) \
    X(cuMemsetD32Async, (CUdeviceptr dp, unsigned int v, size_t n, CUstream hStream), (dp, v, n, hStream)) \
    X(cuMemsetD2D8Async, (CUdeviceptr dp, size_t pitch, unsigned char v, size_t w, size_t h, CUstream hStream), \
      (dp, pitch, v, w, h, hStream)) \
    X(cuMemsetD2D16Async, (CUdeviceptr dp, size_t pitch, unsigned short v, size_t w, size_t h, CUstream hStream), \
      (dp, pitch, v, w, h, hStream)) \
    X(cuMemsetD2D32Async, (CUdeviceptr dp, size_t pitch, unsigned int v, size_t w, size_t h, CUstream hStream), \
      (dp, pitch, v, w, h, hStream)) \
    X(cuStreamSynchronize, (CUstream hStream), (hStream)) \
    X(cuStreamQuery, (CUstream hStream), (hStream)) \
    X(cuStreamWaitEvent, (CUstream hStream, CUevent ev, unsigned int fl), (hStream, ev, fl)) \
    X(cuStreamAddCallback, (CUstream hStream, CUstreamCallback cb, void *u, unsigned int fl), (hStream, cb, u, fl)) \
    X(cuStreamAttachMemAsync, (CUstream hStream, CUdeviceptr dp, size_t n, unsigned int fl), (hStream, dp, n, fl)) \
    X(cuStreamBeginCapture_v2, (CUstream hStream, CUstreamCaptureMode mode), (hStream, mode)) \
    X(cuStreamBeginCapture, (CUstream hStream), (hStream)) \
    X(cuStreamBeginCaptureToGraph, (CUstream hStream, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *ed, \
                                    size_t nd, CUstreamCaptureMode mode), (hStream, g, deps, ed, nd, mode)) \
    X(cuStreamEndCapture, (CUstream hStream, CUgraph *g), (hStream, g)) \
    X(cuStreamIsCapturing, (CUstream hStream, CUstreamCaptureStatus *st), (hStream, st)) \
    X(cuStreamGetCaptureInfo_v3, (CUstream hStream, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g, \
                                  const CUgraphNode **deps, const CUgraphEdgeData **ed, size_t *nd), \
      (hStream, st, id, g, deps, ed, nd)) \
    X(cuStreamGetCaptureInfo_v2, (CUstream hStream, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g, \
                                  const CUgraphNode **deps, size_t *nd), (hStream, st, id, g, deps, nd)) \
    X(cuStreamGetCaptureInfo, (CUstream hStream, CUstreamCaptureStatus *st, cuuint64_t *id), (hStream, st, id)) \
    X(cuStreamUpdateCaptureDependencies_v2, (CUstream hStream, CUgraphNode *deps, const CUgraphEdgeData *ed, size_t nd, \
                                             unsigned int fl), (hStream, deps, ed, nd, fl)) \
    X(cuStreamUpdateCaptureDependencies, (CUstream hStream, CUgraphNode *deps, size_t nd, unsigned int fl), \
      (hStream, deps, nd, fl)) \
    X(cuStreamGetPriority, (CUstream hStream, int *pr), (hStream, pr)) \
    X(cuStreamGetFlags, (CUstream hStream, unsigned int *fl), (hStream, fl)) \
    X(cuStreamGetId, (CUstream hStream, unsigned long long *id), (hStream, id)) \
    X(cuStreamGetDevice, (CUstream hStream, CUdevice *dev), (hStream, dev)) \
    X(cuStreamGetAttribute, (CUstream hStream, CUstreamAttrID at, CUstreamAttrValue *v), (hStream, at, v)) \
    X(cuStreamSetAttribute, (CUstream hStream, CUstreamAttrID at, const CUstreamAttrValue *v), (hStream, at, v)) \
    X(cuStreamWriteValue32_v2, (CUstream hStream, CUdeviceptr a, cuuint32_t v, unsigned int fl), (hStream, a, v, fl)) \
    X(cuStreamWaitValue32_v2, (CUstream hStream, CUdeviceptr a, cuuint32_t v, unsigned int fl), (hStream, a, v, fl)) \
    X(cuStreamWriteValue64_v2, (CUstream hStream, CUdeviceptr a, cuuint64_t v, unsigned int fl), (hStream, a, v, fl)) \
    X(cuStreamWaitValue64_v2, (CUstream hStream, CUdeviceptr a, cuuint64_t v, unsigned int fl), (hStream, a, v, fl)) \
    X(cuStreamBatchMemOp_v2, (CUstream hStream, unsigned int n, CUstreamBatchMemOpParams *ps, unsigned int fl), \
      (hStream, n, ps, fl)) \
    X(cuStreamWriteValue32, (CUstream hStream, CUdeviceptr a, cuuint32_t v, unsigned int fl), (hStream, a, v, fl)) \
    X(cuStreamWaitValue32, (CUstream hStream, CUdeviceptr a, cuuint32_t v, unsigned int fl), (hStream, a, v, fl)) \
    X(cuStreamWriteValue64, (CUstream hStream, CUdeviceptr a, cuuint64_t v, unsigned int fl), (hStream, a, v, fl)) \
    X(cuStreamWaitValue64, (CUstream hStream, CUdeviceptr a, cuuint64_t v, unsigned int fl), (hStream, a, v, fl)) \
    X(cuStreamBatchMemOp, (CUstream hStream, unsigned int n, CUstreamBatchMemOpParams *ps, unsigned int fl), \
      (hStream, n, ps, fl)) \
    X(cuEventRecord, (CUevent ev, CUstream hStream), (ev, hStream)) \
    X(cuEventRecordWithFlags, (CUevent ev, CUstream hStream, unsigned int fl), (ev, hStream, fl)) \
    X(cuGraphLaunch, (CUgraphExec ge, CUstream hStream), (ge, hStream)) \
    X(cuGraphUpload, (CUgraphExec ge, CUstream hStream), (ge, hStream)) \
    X(cuMemPrefetchAsync_v2, (CUdeviceptr dp, size_t n, CUmemLocation loc, unsigned int fl, CUstream hStream), \
      (dp, n, loc, fl, hStream)) \
    X(cuMemPrefetchAsync, (CUdeviceptr dp, size_t n, CUdevice dev, CUstream hStream), (dp, n, dev, hStream)) \
    X(cuMemMapArrayAsync, (CUarrayMapInfo *mi, unsigned int n, CUstream hStream), (mi, n, hStream)) \
    X(cuGraphicsMapResources, (unsigned int n, CUgraphicsResource *res, CUstream hStream), (n, res, hStream)) \
    X(cuGraphicsUnmapResources, (unsigned int n, CUgraphicsResource *res, CUstream hStream), (n, res, hStream)) \
    X(cuSignalExternalSemaphoresAsync, (const CUexternalSemaphore *es, const CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS *ps, \
                                        unsigned int n, CUstream hStream), (es, ps, n, hStream)) \
    X(cuWaitExternalSemaphoresAsync, (const CUexternalSemaphore *es, const CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS *ps, \
                                      unsigned int n, CUstream hStream), (es, ps, n, hStream)) \
    LD_STREAM_HOOKS_12080(X) LD_STREAM_HOOKS_13000(X)

/* Batched copies and decompression (CUDA 12.8), their 13.0 versions and batched prefetch and
 * discard (13.0): only where the headers declare them. */
#if CUDA_VERSION >= 12080
#define LD_STREAM_HOOKS_12080(X) \
    X(cuMemcpyBatchAsync, (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *at, \
                           size_t *ai, size_t na, size_t *fail, CUstream hStream), \
      (dsts, srcs, sizes, count, at, ai, na, fail, hStream)) \
    X(cuMemcpy3DBatchAsync, (size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail, unsigned long long fl, CUstream hStream), \
      (n, ops, fail, fl, hStream)) \
    X(cuMemBatchDecompressAsync, (CUmemDecompressParams *ps, size_t n, unsigned int fl, size_t *err, CUstream hStream), \
      (ps, n, fl, err, hStream))
#else
#define LD_STREAM_HOOKS_12080(X)
#endif
#if CUDA_VERSION >= 13000
#define LD_STREAM_HOOKS_13000(X) \
    X(cuMemcpyBatchAsync_v2, (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *at, \
                              size_t *ai, size_t na, CUstream hStream), (dsts, srcs, sizes, count, at, ai, na, hStream)) \
    X(cuMemcpy3DBatchAsync_v2, (size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long fl, CUstream hStream), \
      (n, ops, fl, hStream)) \
    X(cuMemPrefetchBatchAsync, (CUdeviceptr *dps, size_t *sizes, size_t count, CUmemLocation *locs, size_t *li, \
                                size_t nl, unsigned long long fl, CUstream hStream), \
      (dps, sizes, count, locs, li, nl, fl, hStream)) \
    X(cuMemDiscardBatchAsync, (CUdeviceptr *dps, size_t *sizes, size_t count, unsigned long long fl, CUstream hStream), \
      (dps, sizes, count, fl, hStream)) \
    X(cuMemDiscardAndPrefetchBatchAsync, (CUdeviceptr *dps, size_t *sizes, size_t count, CUmemLocation *locs, \
                                          size_t *li, size_t nl, unsigned long long fl, CUstream hStream), \
      (dps, sizes, count, locs, li, nl, fl, hStream))
#else
#define LD_STREAM_HOOKS_13000(X)
#endif

/* Entry points that take a stream and have no _ptsz variant. */
#define LD_STREAM1_HOOKS(X) \
    X(cuLaunchGridAsync, (CUfunction f, int gw, int gh, CUstream hStream), (f, gw, gh, hStream))

/* Synchronous per-thread-stream (_ptds) entry points. In a bound context each runs as its
 * stream-ordered variant on the calling thread's stream of the bound context (the one the
 * per-thread default stream maps to), then synchronizes that stream: ordered like the
 * per-thread stream, the host waiting at least as long as it would. Their legacy-stream
 * variants would wait for every blocking stream, and so invalidate a capture that another
 * thread runs on one. X(name, legacy, params, args, async, fallback): `async` is the
 * stream-ordered call on stream `s_`; with fallback 1 it is a translation (a copy of the
 * 2D-unaligned kind, or with a 1D CUDA array, made a 2D or 3D copy) and where the driver
 * refuses it the legacy variant runs, as it does where the driver lacks the async one. */
#define ASYNC(name, types, args) (HAVE(name) ? REAL(name, CUresult (*) types) args : LD_NO_ENTRY)
#define LD_NO_ENTRY ((CUresult)0x7fff0001)
#define LD_PTDS_HOOKS(X) \
    X(cuMemcpy_ptds, cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n), \
      ASYNC(cuMemcpyAsync, (CUdeviceptr, CUdeviceptr, size_t, CUstream), (dst, src, n, s_)), 0) \
    X(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD_v2, (CUdeviceptr dst, const void *src, size_t n), (dst, src, n), \
      ASYNC(cuMemcpyHtoDAsync_v2, (CUdeviceptr, const void *, size_t, CUstream), (dst, src, n, s_)), 0) \
    X(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH_v2, (void *dst, CUdeviceptr src, size_t n), (dst, src, n), \
      ASYNC(cuMemcpyDtoHAsync_v2, (void *, CUdeviceptr, size_t, CUstream), (dst, src, n, s_)), 0) \
    X(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n), \
      ASYNC(cuMemcpyDtoDAsync_v2, (CUdeviceptr, CUdeviceptr, size_t, CUstream), (dst, src, n, s_)), 0) \
    X(cuMemcpy2D_v2_ptds, cuMemcpy2D_v2, (const CUDA_MEMCPY2D *cp), (cp), \
      ASYNC(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D *, CUstream), (cp, s_)), 0) \
    X(cuMemcpy2DUnaligned_v2_ptds, cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D *cp), (cp), \
      ASYNC(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D *, CUstream), (cp, s_)), 1) \
    X(cuMemcpy3D_v2_ptds, cuMemcpy3D_v2, (const CUDA_MEMCPY3D *cp), (cp), \
      ASYNC(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D *, CUstream), (cp, s_)), 0) \
    X(cuMemcpyPeer_ptds, cuMemcpyPeer, (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n), \
      (dst, dc, src, sc, n), \
      ASYNC(cuMemcpyPeerAsync, (CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream), \
            (dst, dc, src, sc, n, s_)), 0) \
    X(cuMemcpy3DPeer_ptds, cuMemcpy3DPeer, (const CUDA_MEMCPY3D_PEER *cp), (cp), \
      ASYNC(cuMemcpy3DPeerAsync, (const CUDA_MEMCPY3D_PEER *, CUstream), (cp, s_)), 0) \
    X(cuMemcpyHtoA_v2_ptds, cuMemcpyHtoA_v2, (CUarray dst, size_t off, const void *src, size_t n), (dst, off, src, n), \
      ASYNC(cuMemcpyHtoAAsync_v2, (CUarray, size_t, const void *, size_t, CUstream), (dst, off, src, n, s_)), 0) \
    X(cuMemcpyAtoH_v2_ptds, cuMemcpyAtoH_v2, (void *dst, CUarray src, size_t off, size_t n), (dst, src, off, n), \
      ASYNC(cuMemcpyAtoHAsync_v2, (void *, CUarray, size_t, size_t, CUstream), (dst, src, off, n, s_)), 0) \
    X(cuMemcpyAtoA_v2_ptds, cuMemcpyAtoA_v2, (CUarray dst, size_t doff, CUarray src, size_t soff, size_t n), \
      (dst, doff, src, soff, n), \
      array_copy_async(CU_MEMORYTYPE_ARRAY, dst, 0, doff, CU_MEMORYTYPE_ARRAY, src, 0, soff, n, s_), 1) \
    X(cuMemcpyAtoD_v2_ptds, cuMemcpyAtoD_v2, (CUdeviceptr dst, CUarray src, size_t off, size_t n), (dst, src, off, n), \
      array_copy_async(CU_MEMORYTYPE_DEVICE, NULL, dst, 0, CU_MEMORYTYPE_ARRAY, src, 0, off, n, s_), 1) \
    X(cuMemcpyDtoA_v2_ptds, cuMemcpyDtoA_v2, (CUarray dst, size_t off, CUdeviceptr src, size_t n), (dst, off, src, n), \
      array_copy_async(CU_MEMORYTYPE_ARRAY, dst, 0, off, CU_MEMORYTYPE_DEVICE, NULL, src, 0, n, s_), 1) \
    X(cuMemsetD8_v2_ptds, cuMemsetD8_v2, (CUdeviceptr dp, unsigned char v, size_t n), (dp, v, n), \
      ASYNC(cuMemsetD8Async, (CUdeviceptr, unsigned char, size_t, CUstream), (dp, v, n, s_)), 0) \
    X(cuMemsetD16_v2_ptds, cuMemsetD16_v2, (CUdeviceptr dp, unsigned short v, size_t n), (dp, v, n), \
      ASYNC(cuMemsetD16Async, (CUdeviceptr, unsigned short, size_t, CUstream), (dp, v, n, s_)), 0) \
    X(cuMemsetD32_v2_ptds, cuMemsetD32_v2, (CUdeviceptr dp, unsigned int v, size_t n), (dp, v, n), \
      ASYNC(cuMemsetD32Async, (CUdeviceptr, unsigned int, size_t, CUstream), (dp, v, n, s_)), 0) \
    X(cuMemsetD2D8_v2_ptds, cuMemsetD2D8_v2, (CUdeviceptr dp, size_t pitch, unsigned char v, size_t w, size_t h), \
      (dp, pitch, v, w, h), \
      ASYNC(cuMemsetD2D8Async, (CUdeviceptr, size_t, unsigned char, size_t, size_t, CUstream), (dp, pitch, v, w, h, s_)), 0) \
    X(cuMemsetD2D16_v2_ptds, cuMemsetD2D16_v2, (CUdeviceptr dp, size_t pitch, unsigned short v, size_t w, size_t h), \
      (dp, pitch, v, w, h), \
      ASYNC(cuMemsetD2D16Async, (CUdeviceptr, size_t, unsigned short, size_t, size_t, CUstream), \
            (dp, pitch, v, w, h, s_)), 0) \
    X(cuMemsetD2D32_v2_ptds, cuMemsetD2D32_v2, (CUdeviceptr dp, size_t pitch, unsigned int v, size_t w, size_t h), \
      (dp, pitch, v, w, h), \
      ASYNC(cuMemsetD2D32Async, (CUdeviceptr, size_t, unsigned int, size_t, size_t, CUstream), (dp, pitch, v, w, h, s_)), 0)

/* Context and query entry points of compute binding (installed only when it is asked for). */
#define LD_COMPUTE_HOOKS(X) \
    X(cuCtxSetCurrent) X(cuCtxPushCurrent_v2) X(cuCtxGetCurrent) X(cuCtxPopCurrent_v2) X(cuStreamGetCtx) \
    X(cuStreamGetCtx_ptsz) X(cuStreamGetCtx_v2) X(cuStreamGetCtx_v2_ptsz) X(cuDeviceGetAttribute) \
    X(cuLaunchCooperativeKernel) X(cuLaunchCooperativeKernel_ptsz) X(cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz) \
    X(cuStreamCopyAttributes) X(cuStreamCopyAttributes_ptsz) X(cuCtxFromGreenCtx) X(cuStreamGetGreenCtx) \
    X(cuOccupancyMaxActiveClusters) X(cuOccupancyMaxPotentialClusterSize) X(cuGraphInstantiateWithParams) \
    X(cuGraphInstantiateWithParams_ptsz) \
    X(cuDevicePrimaryCtxRelease_v2) X(cuDevicePrimaryCtxRelease) X(cuDevicePrimaryCtxReset)

#define LD_H_STREAM(name, params, args) H_##name, H_##name##_ptsz,
#define LD_H_STREAM1(name, params, args) H_##name,
#define LD_H_PTDS(name, legacy, params, args, async, fb) H_##name,
#define LD_H_COMPUTE(name) H_##name,

enum {
    H_cuMemAlloc_v2, H_cuMemFree_v2, H_cuMemGetAddressRange_v2, H_cuIpcGetMemHandle,
    H_cuMemCreate, H_cuMemAllocAsync, H_cuMemAllocAsync_ptsz, H_cuMemAllocFromPoolAsync,
    H_cuMemAllocFromPoolAsync_ptsz, H_cuMemAllocManaged, H_cuMemAllocPitch_v2, H_cuMemRelease,
    H_cuMemFreeAsync, H_cuMemFreeAsync_ptsz, H_cuMemPoolSetAccess, H_cuMemPoolSetAttribute,
    H_cuMemPoolGetAttribute, H_cuMemPoolTrimTo,
    H_cuCtxEnablePeerAccess, H_cuDevicePrimaryCtxRetain, H_cuCtxCreate_v2, H_cuCtxCreate_v3,
    H_cuCtxCreate_v4, H_cuCtxDestroy_v2, H_cuDevicePrimaryCtxReset_v2, H_cuModuleLoad,
    H_cuModuleLoadData, H_cuModuleLoadDataEx, H_cuModuleLoadFatBinary, H_cuModuleUnload,
    H_cuLibraryLoadData, H_cuLibraryLoadFromFile, H_cuLibraryUnload, H_cuGetProcAddress,
    H_cuGetProcAddress_v2, H_cuPointerGetAttribute, H_cuPointerGetAttributes,
    LD_COMPUTE_HOOKS(LD_H_COMPUTE) LD_STREAM_HOOKS(LD_H_STREAM) LD_STREAM1_HOOKS(LD_H_STREAM1) LD_PTDS_HOOKS(LD_H_PTDS)
    H_COUNT
};
#define H_FIRST_COMPUTE (H_cuPointerGetAttributes + 1)

typedef struct {
    const char *name;    /* exact ABI name exported by libcuda */
    void *drv;           /* wrapper for symbol/dlsym resolution (api = driver)   */
    void *rt;            /* wrapper handed out by cuGetProcAddress (api = runtime) */
    void *real;          /* libcuda's own address, NULL if this driver lacks it  */
} hook_t;

/* Hooks from H_FIRST_COMPUTE on exist for compute binding: substituted only when it is
 * asked for, so the stock path and `compute = all` hand out libcuda's own pointers. */
static int hook_wanted(int i) { return i < H_FIRST_COMPUTE || ld_compute_requested(); }

static hook_t hooks[H_COUNT];      /* names and wrappers: defined by the table at the end */

/* libcuda's own entry for hook i, looked up once (idempotently) through its handle. */
static void *real_of(int i) {
    void *p = __atomic_load_n(&hooks[i].real, __ATOMIC_ACQUIRE);
    if (p) return p;
    void *h = ld_driver_handle();
    if (!h || !(p = ld_real_dlsym(h, hooks[i].name))) return NULL;
    __atomic_store_n(&hooks[i].real, p, __ATOMIC_RELEASE);
    return p;
}

#define REAL(name, type) ((type)real_of(H_##name))
#define HAVE(name) (real_of(H_##name) != NULL)

/* The wrappers' way to the driver table for the shim's own calls, with a side effect that
 * the name says: it notes that the program reached for CUDA (ld_note_cuda_use, which
 * decides whether the report is written at exit, report.h). NULL when the shim is inactive
 * or libcuda lacks something the shim needs: then wrappers only forward (REAL) and nothing
 * is localized or published. */
static inline const ld_driver_t *note_use_and_driver(void) {
    ld_note_cuda_use();
    return ld_active() ? ld_driver() : NULL;
}

/* --- allocation ------------------------------------------------------------------------- */

typedef CUresult (*alloc_t)(CUdeviceptr *, size_t);
typedef CUresult (*free_t)(CUdeviceptr);

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
    if (note_use_and_driver()) return ld_alloc(dptr, bytes, LD_API_DRIVER);
    return HAVE(cuMemAlloc_v2) ? REAL(cuMemAlloc_v2, alloc_t)(dptr, bytes) : CUDA_ERROR_NOT_INITIALIZED;
}
static CUresult rt_cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
    if (note_use_and_driver()) return ld_alloc(dptr, bytes, LD_API_RUNTIME);
    return HAVE(cuMemAlloc_v2) ? REAL(cuMemAlloc_v2, alloc_t)(dptr, bytes) : CUDA_ERROR_NOT_INITIALIZED;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
    if (note_use_and_driver()) return ld_free(p);
    return HAVE(cuMemFree_v2) ? REAL(cuMemFree_v2, free_t)(p) : CUDA_ERROR_NOT_INITIALIZED;
}

EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr p) {
    if (note_use_and_driver()) {
        ld_range_t r;
        if (ld_registry_find(p, &r) == 0) {
            /* The driver would answer only the one slice mapping holding p. */
            if (pbase) *pbase = r.base;
            if (psize) *psize = r.size;
            return CUDA_SUCCESS;
        }
        if (ld_pool_contains(p)) return CUDA_ERROR_NOT_FOUND;   /* freed by the program, kept by the pool */
    }
    if (!HAVE(cuMemGetAddressRange_v2)) return CUDA_ERROR_NOT_INITIALIZED;
    return REAL(cuMemGetAddressRange_v2, CUresult (*)(CUdeviceptr *, size_t *, CUdeviceptr))(pbase, psize, p);
}

EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) {
    ld_range_t r;
    if (note_use_and_driver() && ld_registry_find(p, &r) == 0) {
        ld_rule_note_ipc_refused(r.rule);
        const char *rule = r.rule >= 0 && r.rule < ld_cfg.policy.n_rules ? ld_cfg.policy.rules[r.rule].name : "?";
        LD_WARN(INTERPOSE, "cuIpcGetMemHandle(0x%llx): memory placed by rule '%s' is a VMM mapping and has no legacy IPC "
                           "handle; exclude this size (%zu bytes) from the policy for programs that share it",
                           (unsigned long long)p, rule, r.size);
        return CUDA_ERROR_INVALID_VALUE;      /* what the driver itself answers for VMM memory */
    }
    if (!HAVE(cuIpcGetMemHandle)) return CUDA_ERROR_NOT_INITIALIZED;
    return REAL(cuIpcGetMemHandle, CUresult (*)(CUipcMemHandle *, CUdeviceptr))(h, p);
}

/* Pointer attributes: the range a shim pointer belongs to is the whole shim range (the
 * driver would answer the one slice mapping holding it). Only a successful answer is
 * adjusted, so errors stay the driver's. */
static void fix_range_attr(CUpointer_attribute a, void *data, const ld_range_t *r) {
    if (!data) return;
    if (a == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) *(CUdeviceptr *)data = r->base;
    else if (a == CU_POINTER_ATTRIBUTE_RANGE_SIZE) *(size_t *)data = r->size;
}

/* Memory allocated while the bound context was current belongs to the program's primary. */
static void fix_context_attr(CUpointer_attribute a, void *data) {
    if (data && a == CU_POINTER_ATTRIBUTE_CONTEXT) *(CUcontext *)data = ld_compute_unbind(*(CUcontext *)data);
}

EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute a, CUdeviceptr p) {
    if (!HAVE(cuPointerGetAttribute)) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult res = REAL(cuPointerGetAttribute, CUresult (*)(void *, CUpointer_attribute, CUdeviceptr))(data, a, p);
    ld_range_t r;
    if (res == CUDA_SUCCESS && note_use_and_driver() && ld_registry_find(p, &r) == 0) fix_range_attr(a, data, &r);
    if (res == CUDA_SUCCESS) fix_context_attr(a, data);
    return res;
}

EXPORT CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *a, void **data, CUdeviceptr p) {
    if (!HAVE(cuPointerGetAttributes)) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult res = REAL(cuPointerGetAttributes, CUresult (*)(unsigned, CUpointer_attribute *, void **, CUdeviceptr))(
        n, a, data, p);
    ld_range_t r;
    if (res == CUDA_SUCCESS && a && data && note_use_and_driver() && ld_registry_find(p, &r) == 0)
        for (unsigned i = 0; i < n; i++) fix_range_attr(a[i], data[i], &r);
    if (res == CUDA_SUCCESS && a && data)
        for (unsigned i = 0; i < n; i++) fix_context_attr(a[i], data[i]);
    return res;
}

typedef CUresult (*create_t)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*async_t)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*managed_t)(CUdeviceptr *, size_t, unsigned int);
typedef CUresult (*pitch_t)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
typedef CUresult (*frompool_t)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);

/* The other allocation apis: placed in a domain where a rule or the state says so (place.c),
 * otherwise libcuda's own call (on out-of-memory retried once after the shim's pool of
 * freed ranges was trimmed, so kept ranges never cost the program memory). */
EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *p,
                            unsigned long long f) {
    if (!HAVE(cuMemCreate)) return CUDA_ERROR_NOT_INITIALIZED;
    const ld_driver_t *d = note_use_and_driver();
    create_t real = REAL(cuMemCreate, create_t);
    return d ? ld_place_create(d, real, h, n, p, f) : real(h, n, p, f);
}
#define ASYNC_WRAPPER(name, pt) \
    EXPORT CUresult name(CUdeviceptr *dp, size_t n, CUstream s) { \
        if (!HAVE(name)) return CUDA_ERROR_NOT_INITIALIZED; \
        s = ld_compute_stream(s, pt); \
        const ld_driver_t *d = note_use_and_driver(); \
        async_t real = REAL(name, async_t); \
        return d ? ld_place_async(d, real, dp, n, s, pt) : real(dp, n, s); \
    }
ASYNC_WRAPPER(cuMemAllocAsync, 0)
ASYNC_WRAPPER(cuMemAllocAsync_ptsz, 1)
#define FROMPOOL_WRAPPER(name, pt) \
    EXPORT CUresult name(CUdeviceptr *dp, size_t n, CUmemoryPool pool, CUstream s) { \
        if (!HAVE(name)) return CUDA_ERROR_NOT_INITIALIZED; \
        s = ld_compute_stream(s, pt); \
        const ld_driver_t *d = note_use_and_driver(); \
        frompool_t real = REAL(name, frompool_t); \
        return d ? ld_place_from_pool(d, real, dp, n, pool, s) : real(dp, n, pool, s); \
    }
FROMPOOL_WRAPPER(cuMemAllocFromPoolAsync, 0)
FROMPOOL_WRAPPER(cuMemAllocFromPoolAsync_ptsz, 1)
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dp, size_t n, unsigned int flags) {
    if (!HAVE(cuMemAllocManaged)) return CUDA_ERROR_NOT_INITIALIZED;
    const ld_driver_t *d = note_use_and_driver();
    managed_t real = REAL(cuMemAllocManaged, managed_t);
    return d ? ld_place_managed(d, real, dp, n, flags) : real(dp, n, flags);
}
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dp, size_t *pitch, size_t w, size_t h, unsigned int esz) {
    if (!HAVE(cuMemAllocPitch_v2)) return CUDA_ERROR_NOT_INITIALIZED;
    const ld_driver_t *d = note_use_and_driver();
    pitch_t real = REAL(cuMemAllocPitch_v2, pitch_t);
    return d ? ld_place_pitch(d, real, dp, pitch, w, h, esz) : real(dp, pitch, w, h, esz);
}

/* The frees of those apis, counted as tagged or not (alloc.h says what a free is). */
typedef CUresult (*release_t)(CUmemGenericAllocationHandle);
typedef CUresult (*free_async_t)(CUdeviceptr, CUstream);
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
    if (!HAVE(cuMemRelease)) return CUDA_ERROR_NOT_INITIALIZED;
    release_t real = REAL(cuMemRelease, release_t);
    return note_use_and_driver() ? ld_release(h, real) : real(h);
}
#define FREE_ASYNC_WRAPPER(name, pt) \
    EXPORT CUresult name(CUdeviceptr dp, CUstream s) { \
        if (!HAVE(name)) return CUDA_ERROR_NOT_INITIALIZED; \
        s = ld_compute_stream(s, pt); \
        free_async_t real = REAL(name, free_async_t); \
        return note_use_and_driver() ? ld_free_async(dp, s, real) : real(dp, s); \
    }
FREE_ASYNC_WRAPPER(cuMemFreeAsync, 0)
FREE_ASYNC_WRAPPER(cuMemFreeAsync_ptsz, 1)

/* The program's settings of a device's default pool reach the shim's pools of that device,
 * and the default pool's memory counters include theirs (place.h). */
typedef CUresult (*pool_access_t)(CUmemoryPool, const CUmemAccessDesc *, size_t);
typedef CUresult (*pool_attr_t)(CUmemoryPool, CUmemPool_attribute, void *);
typedef CUresult (*pool_trim_t)(CUmemoryPool, size_t);
EXPORT CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count) {
    if (!HAVE(cuMemPoolSetAccess)) return CUDA_ERROR_NOT_INITIALIZED;
    const ld_driver_t *d = note_use_and_driver();
    pool_access_t real = REAL(cuMemPoolSetAccess, pool_access_t);
    return d ? ld_place_pool_set_access(d, real, pool, map, count) : real(pool, map, count);
}
EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    if (!HAVE(cuMemPoolSetAttribute)) return CUDA_ERROR_NOT_INITIALIZED;
    const ld_driver_t *d = note_use_and_driver();
    pool_attr_t real = REAL(cuMemPoolSetAttribute, pool_attr_t);
    return d ? ld_place_pool_set_attribute(d, real, pool, attr, value) : real(pool, attr, value);
}
EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    if (!HAVE(cuMemPoolGetAttribute)) return CUDA_ERROR_NOT_INITIALIZED;
    const ld_driver_t *d = note_use_and_driver();
    pool_attr_t real = REAL(cuMemPoolGetAttribute, pool_attr_t);
    return d ? ld_place_pool_get_attribute(d, real, pool, attr, value) : real(pool, attr, value);
}
EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
    if (!HAVE(cuMemPoolTrimTo)) return CUDA_ERROR_NOT_INITIALIZED;
    const ld_driver_t *d = note_use_and_driver();
    pool_trim_t real = REAL(cuMemPoolTrimTo, pool_trim_t);
    return d ? ld_place_pool_trim_to(d, real, pool, keep) : real(pool, keep);
}

/* cuCtxEnablePeerAccess lets the *current* context read `peer`'s memory: extend the
 * access of the shim's ranges on peer's device to the current device. */
EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
    if (!HAVE(cuCtxEnablePeerAccess)) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuCtxEnablePeerAccess, CUresult (*)(CUcontext, unsigned))(peer, flags);
    const ld_driver_t *d = note_use_and_driver();
    if (r != CUDA_SUCCESS || !d) return r;
    CUdevice me, owner;
    if (d->pfn_cuCtxGetDevice(&me) != CUDA_SUCCESS) return r;
    if (d->pfn_cuCtxPushCurrent_v2(peer) != CUDA_SUCCESS) return r;
    CUresult g = d->pfn_cuCtxGetDevice(&owner);
    CUcontext x;
    d->pfn_cuCtxPopCurrent_v2(&x);
    if (g == CUDA_SUCCESS) ld_vmm_grant_peer(d, owner, me);
    return r;
}

/* --- context life: the probe, and forgetting what a destroyed context owned -------------- */

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    if (!HAVE(cuDevicePrimaryCtxRetain)) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuDevicePrimaryCtxRetain, CUresult (*)(CUcontext *, CUdevice))(pctx, dev);
    const ld_driver_t *d;
    if (r == CUDA_SUCCESS && pctx && (d = note_use_and_driver())) {
        ld_compute_note_retain(dev);
        ld_topology_on_context(d, dev, *pctx, 0, 1);
    }
    return r;
}

#define CTX_CREATED(r, pctx, dev) \
    do { const ld_driver_t *d_; \
         if ((r) == CUDA_SUCCESS && (pctx)) ld_compute_forget_handle(*(pctx)); \
         if ((r) == CUDA_SUCCESS && (pctx) && (d_ = note_use_and_driver())) \
             ld_topology_on_context(d_, (dev), *(pctx), 1, 0); } while (0)

/* --- compute binding: the context made current, the context reported, the streams --------- */

typedef CUresult (*ctx_fn)(CUcontext);
typedef CUresult (*ctxp_fn)(CUcontext *);

EXPORT CUresult cuCtxSetCurrent(CUcontext c) {
    if (!HAVE(cuCtxSetCurrent)) return CUDA_ERROR_NOT_INITIALIZED;
    return REAL(cuCtxSetCurrent, ctx_fn)(ld_compute_bind(c));
}
EXPORT CUresult cuCtxPushCurrent_v2(CUcontext c) {
    if (!HAVE(cuCtxPushCurrent_v2)) return CUDA_ERROR_NOT_INITIALIZED;
    return REAL(cuCtxPushCurrent_v2, ctx_fn)(ld_compute_bind(c));
}
EXPORT CUresult cuCtxGetCurrent(CUcontext *pc) {
    if (!HAVE(cuCtxGetCurrent)) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuCtxGetCurrent, ctxp_fn)(pc);
    if (r == CUDA_SUCCESS && pc) *pc = ld_compute_unbind(*pc);
    return r;
}
EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pc) {
    if (!HAVE(cuCtxPopCurrent_v2)) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuCtxPopCurrent_v2, ctxp_fn)(pc);
    if (r == CUDA_SUCCESS && pc) *pc = ld_compute_unbind(*pc);
    return r;
}

typedef CUresult (*sgc_fn)(CUstream, CUcontext *);
typedef CUresult (*sgc2_fn)(CUstream, CUcontext *, CUgreenCtx *);
#define STREAM_GET_CTX(name, pt) \
    EXPORT CUresult name(CUstream s, CUcontext *pc) { \
        if (!HAVE(name)) return CUDA_ERROR_NOT_INITIALIZED; \
        CUresult r = REAL(name, sgc_fn)(ld_compute_stream(s, pt), pc); \
        if (r == CUDA_SUCCESS && pc) *pc = ld_compute_unbind(*pc); \
        return r; \
    }
/* A stream of the bound context belongs to the program's primary context, as far as it can
 * tell: no green context of its own. */
#define STREAM_GET_CTX2(name, pt) \
    EXPORT CUresult name(CUstream s, CUcontext *pc, CUgreenCtx *pg) { \
        if (!HAVE(name)) return CUDA_ERROR_NOT_INITIALIZED; \
        CUcontext c = NULL; \
        CUresult r = REAL(name, sgc2_fn)(ld_compute_stream(s, pt), &c, pg); \
        if (r == CUDA_SUCCESS) { \
            CUcontext u = ld_compute_unbind(c); \
            if (u != c && pg) *pg = NULL; \
            if (pc) *pc = u; \
        } \
        return r; \
    }
/* A green context the program makes itself may get the address of one the shim destroyed. */
EXPORT CUresult cuCtxFromGreenCtx(CUcontext *pc, CUgreenCtx g) {
    if (!HAVE(cuCtxFromGreenCtx)) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuCtxFromGreenCtx, CUresult (*)(CUcontext *, CUgreenCtx))(pc, g);
    if (r == CUDA_SUCCESS && pc) ld_compute_forget_handle(*pc);
    return r;
}

STREAM_GET_CTX(cuStreamGetCtx, 0)
STREAM_GET_CTX(cuStreamGetCtx_ptsz, 1)
STREAM_GET_CTX2(cuStreamGetCtx_v2, 0)
STREAM_GET_CTX2(cuStreamGetCtx_v2_ptsz, 1)

/* With LDSHIM_COMPUTE_SMCOUNT=bound the SM count of a bound device is the bound count, so
 * programs size persistent and cooperative grids by it. By default the program sees the
 * device's count: the same launch configurations (and library algorithm choices) as stock. */
EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice dev) {
    if (!HAVE(cuDeviceGetAttribute)) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuDeviceGetAttribute, CUresult (*)(int *, CUdevice_attribute, CUdevice))(v, a, dev);
    int n;
    if (r == CUDA_SUCCESS && v && a == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT && ld_compute_sm_count(dev, &n)) *v = n;
    return r;
}

#define LD_STREAM_WRAPPERS(name, params, args) \
    EXPORT CUresult name params { \
        if (!HAVE(name)) return CUDA_ERROR_NOT_INITIALIZED; \
        hStream = ld_compute_stream(hStream, 0); \
        return REAL(name, CUresult (*) params) args; \
    } \
    EXPORT CUresult name##_ptsz params { \
        if (!HAVE(name##_ptsz)) return CUDA_ERROR_NOT_INITIALIZED; \
        hStream = ld_compute_stream(hStream, 1); \
        return REAL(name##_ptsz, CUresult (*) params) args; \
    }
LD_STREAM_HOOKS(LD_STREAM_WRAPPERS)

#define LD_STREAM1_WRAPPERS(name, params, args) \
    EXPORT CUresult name params { \
        if (!HAVE(name)) return CUDA_ERROR_NOT_INITIALIZED; \
        hStream = ld_compute_stream(hStream, 0); \
        return REAL(name, CUresult (*) params) args; \
    }
LD_STREAM1_HOOKS(LD_STREAM1_WRAPPERS)

/* A stream of the bound context has, as far as the program can tell, no green context. */
EXPORT CUresult cuStreamGetGreenCtx(CUstream s, CUgreenCtx *pg) {
    if (!HAVE(cuStreamGetGreenCtx)) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuStreamGetGreenCtx, CUresult (*)(CUstream, CUgreenCtx *))(ld_compute_stream(s, 0), pg);
    const ld_driver_t *d = ld_driver();
    CUcontext c = NULL;
    if (r == CUDA_SUCCESS && pg && *pg && d && d->pfn_cuCtxFromGreenCtx && d->pfn_cuCtxFromGreenCtx(&c, *pg) == CUDA_SUCCESS &&
        ld_compute_unbind(c) != c)
        *pg = NULL;
    return r;
}

/* The occupancy of a launch configuration: its stream names the context to compute it for. */
#define OCCUPANCY(name) \
    EXPORT CUresult name(int *out, CUfunction f, const CUlaunchConfig *cfg) { \
        if (!HAVE(name)) return CUDA_ERROR_NOT_INITIALIZED; \
        CUlaunchConfig c; \
        const CUlaunchConfig *use = cfg; \
        if (cfg) { \
            CUstream s = ld_compute_stream(cfg->hStream, 0); \
            if (s != cfg->hStream) { c = *cfg; c.hStream = s; use = &c; } \
        } \
        return REAL(name, CUresult (*)(int *, CUfunction, const CUlaunchConfig *))(out, f, use); \
    }
OCCUPANCY(cuOccupancyMaxActiveClusters)
OCCUPANCY(cuOccupancyMaxPotentialClusterSize)

/* Instantiation with CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD uploads on params->hUploadStream. */
#define INSTANTIATE_WITH_PARAMS(name, pt) \
    EXPORT CUresult name(CUgraphExec *ge, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p) { \
        if (!HAVE(name)) return CUDA_ERROR_NOT_INITIALIZED; \
        CUresult (*real)(CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *) = \
            REAL(name, CUresult (*)(CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *)); \
        CUstream s = p ? ld_compute_stream(p->hUploadStream, pt) : NULL; \
        if (!p || s == p->hUploadStream) return real(ge, g, p); \
        CUDA_GRAPH_INSTANTIATE_PARAMS c = *p; \
        c.hUploadStream = s; \
        CUresult r = real(ge, g, &c); \
        p->hErrNode_out = c.hErrNode_out; \
        p->result_out = c.result_out; \
        return r; \
    }
INSTANTIATE_WITH_PARAMS(cuGraphInstantiateWithParams, 0)
INSTANTIATE_WITH_PARAMS(cuGraphInstantiateWithParams_ptsz, 1)

/* A copy with a 1D CUDA array (cuMemcpyAtoA/AtoD/DtoA, which have no stream-ordered variant)
 * as a 3D copy of one row, on stream s. */
static CUresult array_copy_async(CUmemorytype dt, CUarray da, CUdeviceptr dd, size_t doff, CUmemorytype st, CUarray sa,
                                 CUdeviceptr sd, size_t soff, size_t n, CUstream s) {
    if (!HAVE(cuMemcpy3DAsync_v2)) return LD_NO_ENTRY;
    CUDA_MEMCPY3D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = st;
    c.srcArray = sa;
    c.srcDevice = sd;
    c.srcXInBytes = soff;
    c.srcPitch = n;
    c.srcHeight = 1;
    c.dstMemoryType = dt;
    c.dstArray = da;
    c.dstDevice = dd;
    c.dstXInBytes = doff;
    c.dstPitch = n;
    c.dstHeight = 1;
    c.WidthInBytes = n;
    c.Height = 1;
    c.Depth = 1;
    return REAL(cuMemcpy3DAsync_v2, CUresult (*)(const CUDA_MEMCPY3D *, CUstream))(&c, s);
}

/* A synchronous operation on the per-thread stream is refused while that stream captures. */
static CUresult ptds_capturing(CUstream s) {
    const ld_driver_t *d = ld_driver();
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (d && d->pfn_cuStreamIsCapturing && s != CU_STREAM_LEGACY && d->pfn_cuStreamIsCapturing(s, &st) == CUDA_SUCCESS &&
        st != CU_STREAM_CAPTURE_STATUS_NONE)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return CUDA_SUCCESS;
}

static CUresult ptds_sync(CUstream s) {
    const ld_driver_t *d = ld_driver();
    return d ? d->pfn_cuStreamSynchronize(s) : CUDA_ERROR_NOT_INITIALIZED;
}

#define LD_PTDS_WRAPPERS(name, legacy, params, args, async, fb) \
    EXPORT CUresult name params { \
        CUstream s_ = ld_compute_stream(CU_STREAM_PER_THREAD, 1); \
        if (s_ != CU_STREAM_PER_THREAD) { \
            CUresult r_ = ptds_capturing(s_); \
            if (r_ != CUDA_SUCCESS) return r_; \
            r_ = async; \
            if (r_ == CUDA_SUCCESS) return ptds_sync(s_); \
            if (r_ != LD_NO_ENTRY && !(fb && r_ == CUDA_ERROR_INVALID_VALUE)) return r_; \
            static void *legacy_fn; \
            void *f = __atomic_load_n(&legacy_fn, __ATOMIC_ACQUIRE); \
            if (!f && ld_driver_handle() && (f = ld_real_dlsym(ld_driver_handle(), #legacy))) \
                __atomic_store_n(&legacy_fn, f, __ATOMIC_RELEASE); \
            if (f) return ((CUresult (*) params)f) args; \
        } \
        if (!HAVE(name)) return CUDA_ERROR_NOT_INITIALIZED; \
        return REAL(name, CUresult (*) params) args; \
    }
LD_PTDS_HOOKS(LD_PTDS_WRAPPERS)

typedef CUresult (*coop_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                            void **);
#define COOP(name, pt) \
    EXPORT CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
                         unsigned shm, CUstream hStream, void **kp) { \
        if (!HAVE(name)) return CUDA_ERROR_NOT_INITIALIZED; \
        CUresult r = REAL(name, coop_fn)(f, gx, gy, gz, bx, by, bz, shm, ld_compute_stream(hStream, pt), kp); \
        if (r != CUDA_SUCCESS) ld_compute_note_launch_error(r, "a cooperative launch", gx * gy * gz); \
        return r; \
    }
COOP(cuLaunchCooperativeKernel, 0)
COOP(cuLaunchCooperativeKernel_ptsz, 1)

typedef CUresult (*lkex_fn)(const CUlaunchConfig *, CUfunction, void **, void **);
#define LAUNCH_EX(name, pt) \
    EXPORT CUresult name(const CUlaunchConfig *cfg, CUfunction f, void **kp, void **ex) { \
        if (!HAVE(name)) return CUDA_ERROR_NOT_INITIALIZED; \
        CUlaunchConfig c; \
        const CUlaunchConfig *use = cfg; \
        if (cfg) { \
            CUstream s = ld_compute_stream(cfg->hStream, pt); \
            if (s != cfg->hStream) { c = *cfg; c.hStream = s; use = &c; } \
        } \
        CUresult r = REAL(name, lkex_fn)(use, f, kp, ex); \
        if (r != CUDA_SUCCESS && cfg) \
            ld_compute_note_launch_error(r, "a launch with attributes (clusters, cooperative)", \
                                         cfg->gridDimX * cfg->gridDimY * cfg->gridDimZ); \
        return r; \
    }
LAUNCH_EX(cuLaunchKernelEx, 0)
LAUNCH_EX(cuLaunchKernelEx_ptsz, 1)

#define COPY_ATTR(name, pt) \
    EXPORT CUresult name(CUstream dst, CUstream src) { \
        if (!HAVE(name)) return CUDA_ERROR_NOT_INITIALIZED; \
        return REAL(name, CUresult (*)(CUstream, CUstream))(ld_compute_stream(dst, pt), ld_compute_stream(src, pt)); \
    }
COPY_ATTR(cuStreamCopyAttributes, 0)
COPY_ATTR(cuStreamCopyAttributes_ptsz, 1)

EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    if (!HAVE(cuCtxCreate_v2)) return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = REAL(cuCtxCreate_v2, CUresult (*)(CUcontext *, unsigned, CUdevice))(pctx, flags, dev);
    CTX_CREATED(r, pctx, dev);
    return r;
}

EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n, unsigned int flags, CUdevice dev) {
    if (!HAVE(cuCtxCreate_v3)) return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = REAL(cuCtxCreate_v3, CUresult (*)(CUcontext *, CUexecAffinityParam *, int, unsigned, CUdevice))(
        pctx, params, n, flags, dev);
    CTX_CREATED(r, pctx, dev);
    return r;
}

EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev) {
    if (!HAVE(cuCtxCreate_v4)) return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = REAL(cuCtxCreate_v4, CUresult (*)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice))(
        pctx, params, flags, dev);
    CTX_CREATED(r, pctx, dev);
    return r;
}

/* A destroyed or reset context takes the program's allocations with it: tear down the
 * shim's ranges that belonged to it (and what the pool keeps for its device) while the
 * context still exists, so nothing leaks and no stale range shadows a later address. */
EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
    const ld_driver_t *d = note_use_and_driver();
    if (d && ctx) {
        CUdevice dev = -1;
        if (d->pfn_cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS) {
            d->pfn_cuCtxGetDevice(&dev);
            CUcontext x;
            d->pfn_cuCtxPopCurrent_v2(&x);
        }
        ld_alloc_teardown_context(d, ctx, dev);
    }
    if (!HAVE(cuCtxDestroy_v2)) return CUDA_ERROR_NOT_INITIALIZED;
    return REAL(cuCtxDestroy_v2, CUresult (*)(CUcontext))(ctx);
}

#define PRIMARY_RESET(name) \
    EXPORT CUresult name(CUdevice dev) { \
        const ld_driver_t *d = note_use_and_driver(); \
        if (d) { \
            ld_alloc_teardown_context(d, NULL, dev);   /* first: ranges of the bound context sync in it */ \
            ld_place_forget_device(d, dev); \
            ld_compute_forget_device(d, dev); \
            ld_topology_unbind(dev); \
        } \
        if (!HAVE(name)) return CUDA_ERROR_NOT_INITIALIZED; \
        return REAL(name, CUresult (*)(CUdevice))(dev); \
    }
PRIMARY_RESET(cuDevicePrimaryCtxReset_v2)
PRIMARY_RESET(cuDevicePrimaryCtxReset)

/* The program's last release: the driver destroys the primary context, unless something
 * else holds it, as the bound green context does; so the binding goes first (bound again at
 * the next retain). */
#define PRIMARY_RELEASE(name) \
    EXPORT CUresult name(CUdevice dev) { \
        if (!HAVE(name)) return CUDA_ERROR_NOT_INITIALIZED; \
        const ld_driver_t *d = note_use_and_driver(); \
        if (d && ld_compute_note_release(dev)) { \
            ld_compute_forget_device(d, dev); \
            ld_topology_unbind(dev); \
        } \
        return REAL(name, CUresult (*)(CUdevice))(dev); \
    }
PRIMARY_RELEASE(cuDevicePrimaryCtxRelease_v2)
PRIMARY_RELEASE(cuDevicePrimaryCtxRelease)

/* --- module loading: publication -------------------------------------------------------- */

EXPORT CUresult cuModuleLoad(CUmodule *m, const char *fname) {
    if (!HAVE(cuModuleLoad)) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuModuleLoad, CUresult (*)(CUmodule *, const char *))(m, fname);
    const ld_driver_t *d;
    if (r == CUDA_SUCCESS && m && (d = note_use_and_driver())) ld_topology_on_module(d, LD_MOD_MODULE, *m, NULL, fname);
    return r;
}

EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *image) {
    if (!HAVE(cuModuleLoadData)) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuModuleLoadData, CUresult (*)(CUmodule *, const void *))(m, image);
    const ld_driver_t *d;
    if (r == CUDA_SUCCESS && m && (d = note_use_and_driver())) ld_topology_on_module(d, LD_MOD_MODULE, *m, image, NULL);
    return r;
}

EXPORT CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned int n, CUjit_option *opts, void **vals) {
    if (!HAVE(cuModuleLoadDataEx)) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuModuleLoadDataEx, CUresult (*)(CUmodule *, const void *, unsigned, CUjit_option *, void **))(
        m, image, n, opts, vals);
    const ld_driver_t *d;
    if (r == CUDA_SUCCESS && m && (d = note_use_and_driver())) ld_topology_on_module(d, LD_MOD_MODULE, *m, image, NULL);
    return r;
}

EXPORT CUresult cuModuleLoadFatBinary(CUmodule *m, const void *fatbin) {
    if (!HAVE(cuModuleLoadFatBinary)) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuModuleLoadFatBinary, CUresult (*)(CUmodule *, const void *))(m, fatbin);
    const ld_driver_t *d;
    if (r == CUDA_SUCCESS && m && (d = note_use_and_driver()))
        ld_topology_on_module(d, LD_MOD_MODULE, *m, fatbin, NULL);
    return r;
}

EXPORT CUresult cuModuleUnload(CUmodule m) {
    if (note_use_and_driver()) ld_topology_forget_module(LD_MOD_MODULE, m);
    if (!HAVE(cuModuleUnload)) return CUDA_ERROR_NOT_INITIALIZED;
    return REAL(cuModuleUnload, CUresult (*)(CUmodule))(m);
}

typedef CUresult (*lib_load_data_t)(CUlibrary *, const void *, CUjit_option *, void **, unsigned, CUlibraryOption *,
                                    void **, unsigned);
typedef CUresult (*lib_load_file_t)(CUlibrary *, const char *, CUjit_option *, void **, unsigned, CUlibraryOption *,
                                    void **, unsigned);

EXPORT CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, CUjit_option *jo, void **jv, unsigned int nj,
                                  CUlibraryOption *lo, void **lv, unsigned int nl) {
    if (!HAVE(cuLibraryLoadData)) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuLibraryLoadData, lib_load_data_t)(lib, code, jo, jv, nj, lo, lv, nl);
    const ld_driver_t *d;
    if (r == CUDA_SUCCESS && lib && (d = note_use_and_driver()))
        ld_topology_on_module(d, LD_MOD_LIBRARY, *lib, code, NULL);
    return r;
}

EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *lib, const char *file, CUjit_option *jo, void **jv, unsigned int nj,
                                      CUlibraryOption *lo, void **lv, unsigned int nl) {
    if (!HAVE(cuLibraryLoadFromFile)) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuLibraryLoadFromFile, lib_load_file_t)(lib, file, jo, jv, nj, lo, lv, nl);
    const ld_driver_t *d;
    if (r == CUDA_SUCCESS && lib && (d = note_use_and_driver()))
        ld_topology_on_module(d, LD_MOD_LIBRARY, *lib, NULL, file);
    return r;
}

EXPORT CUresult cuLibraryUnload(CUlibrary lib) {
    if (note_use_and_driver()) ld_topology_forget_module(LD_MOD_LIBRARY, lib);
    if (!HAVE(cuLibraryUnload)) return CUDA_ERROR_NOT_INITIALIZED;
    return REAL(cuLibraryUnload, CUresult (*)(CUlibrary))(lib);
}

/* --- resolvers --------------------------------------------------------------------------- */

/* 1 if `path` names libcuda (or the library LDSHIM_LIBCUDA points at; one the shim loaded
 * itself is named /proc/self/fd/N and known by its link map, ld_driver_is_map). */
static int is_libcuda(const char *path) {
    if (!path) return 0;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (!strncmp(base, "libcuda.so", 10)) return 1;
    const char *alt = ld_opt(LD_OPT_LIBCUDA);
    if (alt) {
        const char *ab = strrchr(alt, '/');
        ab = ab ? ab + 1 : alt;
        return !strcmp(base, ab);
    }
    return 0;
}

/* The wrapper for pointer `p`, if p is provably libcuda's entry of a hooked name: the same
 * address as libcuda's exported symbol of that name, or a dladdr hit on exactly that name
 * inside libcuda. A pointer outside libcuda (a "cu" name of another library, say cuserid)
 * costs one dladdr and loads nothing. */
static void *substitute(void *p, int runtime) {
    if (!p || !ld_active()) return p;
    for (int i = 0; i < H_COUNT; i++)
        if (__atomic_load_n(&hooks[i].real, __ATOMIC_ACQUIRE) == p)
            return hook_wanted(i) ? (runtime ? hooks[i].rt : hooks[i].drv) : p;
    Dl_info info;
    void *map = NULL;
    if (!dladdr1(p, &info, &map, RTLD_DL_LINKMAP) || !(is_libcuda(info.dli_fname) || ld_driver_is_map(map))) return p;
    /* libcuda is loaded (p lies in it): looking its exports up loads nothing new. */
    for (int i = 0; i < H_COUNT; i++)
        if (real_of(i) == p) return hook_wanted(i) ? (runtime ? hooks[i].rt : hooks[i].drv) : p;
    if (!info.dli_sname || info.dli_saddr != p) return p;
    for (int i = 0; i < H_COUNT; i++)
        if (!strcmp(hooks[i].name, info.dli_sname)) return hook_wanted(i) ? (runtime ? hooks[i].rt : hooks[i].drv) : p;
    return p;
}

typedef CUresult (*gpa2_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa1_t)(const char *, void **, int, cuuint64_t);

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status) {
    ld_note_cuda_use();
    if (!HAVE(cuGetProcAddress_v2)) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuGetProcAddress_v2, gpa2_t)(symbol, pfn, ver, flags, status);
    if (r == CUDA_SUCCESS && pfn) *pfn = substitute(*pfn, 1);
    return r;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags) {
    ld_note_cuda_use();
    if (!HAVE(cuGetProcAddress)) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuGetProcAddress, gpa1_t)(symbol, pfn, ver, flags);
    if (r == CUDA_SUCCESS && pfn) *pfn = substitute(*pfn, 1);
    return r;
}

/* dlsym: names starting with "cu" (and a handle other than RTLD_NEXT) go through
 * ld_dlsym_cu; everything else tail-jumps to the real dlsym, so the real one still sees
 * its true caller (RTLD_NEXT and dlmopen namespaces depend on the return address). */
__attribute__((used, visibility("hidden"))) void *ld_dlsym_cu(void *handle, const char *name) {
    void *p = ld_real_dlsym(handle, name);
    void *w = substitute(p, 0);
    if (w != p || (p && !strncmp(name, "cuGetProcAddress", 16))) ld_note_cuda_use();
    return w;
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

static hook_t hooks[H_COUNT] = {
#define HOOK(n, w, wrt) [H_##n] = {#n, (void *)(w), (void *)(wrt), NULL}
    HOOK(cuMemAlloc_v2, cuMemAlloc_v2, rt_cuMemAlloc_v2),
    HOOK(cuMemFree_v2, cuMemFree_v2, cuMemFree_v2),
    HOOK(cuMemGetAddressRange_v2, cuMemGetAddressRange_v2, cuMemGetAddressRange_v2),
    HOOK(cuIpcGetMemHandle, cuIpcGetMemHandle, cuIpcGetMemHandle),
    HOOK(cuMemCreate, cuMemCreate, cuMemCreate),
    HOOK(cuMemAllocAsync, cuMemAllocAsync, cuMemAllocAsync),
    HOOK(cuMemAllocAsync_ptsz, cuMemAllocAsync_ptsz, cuMemAllocAsync_ptsz),
    HOOK(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync),
    HOOK(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync_ptsz),
    HOOK(cuMemAllocManaged, cuMemAllocManaged, cuMemAllocManaged),
    HOOK(cuMemAllocPitch_v2, cuMemAllocPitch_v2, cuMemAllocPitch_v2),
    HOOK(cuMemRelease, cuMemRelease, cuMemRelease),
    HOOK(cuMemFreeAsync, cuMemFreeAsync, cuMemFreeAsync),
    HOOK(cuMemFreeAsync_ptsz, cuMemFreeAsync_ptsz, cuMemFreeAsync_ptsz),
    HOOK(cuMemPoolSetAccess, cuMemPoolSetAccess, cuMemPoolSetAccess),
    HOOK(cuMemPoolSetAttribute, cuMemPoolSetAttribute, cuMemPoolSetAttribute),
    HOOK(cuMemPoolGetAttribute, cuMemPoolGetAttribute, cuMemPoolGetAttribute),
    HOOK(cuMemPoolTrimTo, cuMemPoolTrimTo, cuMemPoolTrimTo),
    HOOK(cuCtxEnablePeerAccess, cuCtxEnablePeerAccess, cuCtxEnablePeerAccess),
    HOOK(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain),
    HOOK(cuCtxCreate_v2, cuCtxCreate_v2, cuCtxCreate_v2),
    HOOK(cuCtxCreate_v3, cuCtxCreate_v3, cuCtxCreate_v3),
    HOOK(cuCtxCreate_v4, cuCtxCreate_v4, cuCtxCreate_v4),
    HOOK(cuCtxDestroy_v2, cuCtxDestroy_v2, cuCtxDestroy_v2),
    HOOK(cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset_v2),
    HOOK(cuModuleLoad, cuModuleLoad, cuModuleLoad),
    HOOK(cuModuleLoadData, cuModuleLoadData, cuModuleLoadData),
    HOOK(cuModuleLoadDataEx, cuModuleLoadDataEx, cuModuleLoadDataEx),
    HOOK(cuModuleLoadFatBinary, cuModuleLoadFatBinary, cuModuleLoadFatBinary),
    HOOK(cuModuleUnload, cuModuleUnload, cuModuleUnload),
    HOOK(cuLibraryLoadData, cuLibraryLoadData, cuLibraryLoadData),
    HOOK(cuLibraryLoadFromFile, cuLibraryLoadFromFile, cuLibraryLoadFromFile),
    HOOK(cuLibraryUnload, cuLibraryUnload, cuLibraryUnload),
    HOOK(cuGetProcAddress, cuGetProcAddress, cuGetProcAddress),
    HOOK(cuGetProcAddress_v2, cuGetProcAddress_v2, cuGetProcAddress_v2),
    HOOK(cuPointerGetAttribute, cuPointerGetAttribute, cuPointerGetAttribute),
    HOOK(cuPointerGetAttributes, cuPointerGetAttributes, cuPointerGetAttributes),
#define HOOK1(n) HOOK(n, n, n),
#define HOOK_STREAM(n, params, args) HOOK(n, n, n), HOOK(n##_ptsz, n##_ptsz, n##_ptsz),
#define HOOK_STREAM1(n, params, args) HOOK(n, n, n),
#define HOOK_PTDS(n, legacy, params, args, async, fb) HOOK(n, n, n),
    LD_COMPUTE_HOOKS(HOOK1)
    LD_STREAM_HOOKS(HOOK_STREAM)
    LD_STREAM1_HOOKS(HOOK_STREAM1)
    LD_PTDS_HOOKS(HOOK_PTDS)
#undef HOOK1
#undef HOOK_STREAM
#undef HOOK_STREAM1
#undef HOOK_PTDS
#undef HOOK
};
