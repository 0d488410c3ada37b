/* fake_proc.c — cuGetProcAddress / cuGetProcAddress_v2 of the fake driver.
 *
 * Table-driven like the real driver: each row maps a base name and the first CUDA version
 * that used a given ABI variant to the exported function. A query picks the row with the
 * highest version <= cudaVersion; with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM a
 * per-thread (_ptds) row wins when one exists. The pointers are the exported symbols' own
 * addresses (the library is linked -Bsymbolic, so a preloaded shim exporting the same
 * names does not change them), so dladdr names the variant.
 */
#include "tests/fake/fake_internal.h"

#include <string.h>

typedef struct { const char *name; int version; int ptds; void *fn; } fk_proc_t;

#define P(base, ver, fn) { base, ver, 0, (void *)(fn) }
#define PT(base, ver, fn) { base, ver, 1, (void *)(fn) }

FAKE_API CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);

static const fk_proc_t fk_procs[] = {
    P("cuInit", 2000, cuInit),
    P("cuDriverGetVersion", 2020, cuDriverGetVersion),
    P("cuGetErrorString", 6000, cuGetErrorString),
    P("cuGetErrorName", 6000, cuGetErrorName),
    P("cuGetProcAddress", 11030, cuGetProcAddress),
    P("cuGetProcAddress", 12000, cuGetProcAddress_v2),
    P("cuDeviceGet", 2000, cuDeviceGet),
    P("cuDeviceGetCount", 2000, cuDeviceGetCount),
    P("cuDeviceGetName", 2000, cuDeviceGetName),
    P("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    P("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    P("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    P("cuDeviceCanAccessPeer", 4000, cuDeviceCanAccessPeer),
    P("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    P("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    P("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    P("cuCtxCreate", 3020, cuCtxCreate_v2),
    P("cuCtxCreate", 11040, cuCtxCreate_v3),
    P("cuCtxCreate", 12050, cuCtxCreate_v4),
    P("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    P("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    P("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    P("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    P("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    P("cuCtxGetDevice", 2000, cuCtxGetDevice),
    P("cuCtxSynchronize", 2000, cuCtxSynchronize),
    P("cuCtxEnablePeerAccess", 4000, cuCtxEnablePeerAccess),
    P("cuMemAlloc", 3020, cuMemAlloc_v2),
    P("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    P("cuMemFree", 3020, cuMemFree_v2),
    P("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    P("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    P("cuMemcpy", 4000, cuMemcpy),
    P("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2),
    P("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2),
    PT("cuMemcpyHtoD", 7000, cuMemcpyHtoD_v2_ptds),
    P("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2),
    PT("cuMemcpyDtoH", 7000, cuMemcpyDtoH_v2_ptds),
    P("cuMemsetD8", 3020, cuMemsetD8_v2),
    P("cuIpcGetMemHandle", 4010, cuIpcGetMemHandle),
    P("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    P("cuPointerGetAttributes", 7000, cuPointerGetAttributes),
    P("cuMemAddressReserve", 10020, cuMemAddressReserve),
    P("cuMemAddressFree", 10020, cuMemAddressFree),
    P("cuMemCreate", 10020, cuMemCreate),
    P("cuMemRelease", 10020, cuMemRelease),
    P("cuMemMap", 10020, cuMemMap),
    P("cuMemUnmap", 10020, cuMemUnmap),
    P("cuMemSetAccess", 10020, cuMemSetAccess),
    P("cuMemGetAccess", 10020, cuMemGetAccess),
    P("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    P("cuMemExportToShareableHandle", 10020, cuMemExportToShareableHandle),
    P("cuMemImportFromShareableHandle", 10020, cuMemImportFromShareableHandle),
    P("cuModuleLoadData", 2000, cuModuleLoadData),
    P("cuModuleLoadDataEx", 2010, cuModuleLoadDataEx),
    P("cuModuleLoadFatBinary", 2000, cuModuleLoadFatBinary),
    P("cuModuleUnload", 2000, cuModuleUnload),
    P("cuModuleGetFunction", 2000, cuModuleGetFunction),
    P("cuModuleGetGlobal", 3020, cuModuleGetGlobal_v2),
    P("cuFuncSetAttribute", 9000, cuFuncSetAttribute),
    P("cuLaunchKernel", 4000, cuLaunchKernel),
    PT("cuLaunchKernel", 7000, cuLaunchKernel_ptsz),
    P("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel),
    PT("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel_ptsz),
    P("cuLaunchKernelEx", 11060, cuLaunchKernelEx),
    PT("cuLaunchKernelEx", 11060, cuLaunchKernelEx_ptsz),
    P("cuLibraryGetKernel", 12000, cuLibraryGetKernel),
    P("cuKernelSetAttribute", 12000, cuKernelSetAttribute),
    P("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2),
    PT("cuMemcpyHtoDAsync", 7000, cuMemcpyHtoDAsync_v2_ptsz),
    P("cuStreamGetCtx", 9020, cuStreamGetCtx),
    PT("cuStreamGetCtx", 9020, cuStreamGetCtx_ptsz),
    P("cuStreamGetCtx", 12050, cuStreamGetCtx_v2),
    P("cuStreamWaitEvent", 3020, cuStreamWaitEvent),
    PT("cuStreamWaitEvent", 7000, cuStreamWaitEvent_ptsz),
    P("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2),
    PT("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2_ptsz),
    P("cuStreamEndCapture", 10000, cuStreamEndCapture),
    PT("cuStreamEndCapture", 10000, cuStreamEndCapture_ptsz),
    PT("cuStreamIsCapturing", 10000, cuStreamIsCapturing_ptsz),
    PT("cuStreamSynchronize", 7000, cuStreamSynchronize_ptsz),
    PT("cuEventRecord", 7000, cuEventRecord_ptsz),
    P("cuGraphInstantiate", 11000, cuGraphInstantiateWithFlags),
    P("cuGraphLaunch", 10000, cuGraphLaunch),
    PT("cuGraphLaunch", 10000, cuGraphLaunch_ptsz),
    P("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
    P("cuGraphDestroy", 10000, cuGraphDestroy),
    P("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
    P("cuDeviceGetMemPool", 11020, cuDeviceGetMemPool),
    P("cuDeviceSetMemPool", 11020, cuDeviceSetMemPool),
    P("cuMemPoolCreate", 11020, cuMemPoolCreate),
    P("cuMemPoolDestroy", 11020, cuMemPoolDestroy),
    P("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute),
    P("cuMemPoolSetAttribute", 11020, cuMemPoolSetAttribute),
    P("cuMemPoolSetAccess", 11020, cuMemPoolSetAccess),
    P("cuMemPoolGetAccess", 11020, cuMemPoolGetAccess),
    P("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
    P("cuMemAllocAsync", 11020, cuMemAllocAsync),
    PT("cuMemAllocAsync", 11020, cuMemAllocAsync_ptsz),
    P("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync),
    PT("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync_ptsz),
    P("cuMemFreeAsync", 11020, cuMemFreeAsync),
    PT("cuMemFreeAsync", 11020, cuMemFreeAsync_ptsz),
    P("cuMemAllocManaged", 6000, cuMemAllocManaged),
    P("cuMemAdvise", 12020, cuMemAdvise_v2),
    P("cuStreamGetDevice", 12080, cuStreamGetDevice),
    P("cuDeviceGetDevResource", 12040, cuDeviceGetDevResource),
    P("cuCtxGetDevResource", 12040, cuCtxGetDevResource),
    P("cuGreenCtxGetDevResource", 12040, cuGreenCtxGetDevResource),
    P("cuDevSmResourceSplitByCount", 12040, cuDevSmResourceSplitByCount),
    P("cuDevSmResourceSplit", 13010, cuDevSmResourceSplit),
    P("cuDevResourceGenerateDesc", 12040, cuDevResourceGenerateDesc),
    P("cuGreenCtxCreate", 12040, cuGreenCtxCreate),
    P("cuGreenCtxDestroy", 12040, cuGreenCtxDestroy),
    P("cuCtxFromGreenCtx", 12040, cuCtxFromGreenCtx),
    P("cuGreenCtxStreamCreate", 12050, cuGreenCtxStreamCreate),
    P("cuLibraryLoadData", 12000, cuLibraryLoadData),
    P("cuLibraryUnload", 12000, cuLibraryUnload),
    P("cuLibraryGetModule", 12000, cuLibraryGetModule),
    P("cuLibraryGetGlobal", 12000, cuLibraryGetGlobal),
    P("cuStreamCreate", 2000, cuStreamCreate),
    P("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    P("cuStreamSynchronize", 2000, cuStreamSynchronize),
    P("cuStreamIsCapturing", 10000, cuStreamIsCapturing),
    P("cuThreadExchangeStreamCaptureMode", 10010, cuThreadExchangeStreamCaptureMode),
    P("cuEventCreate", 2000, cuEventCreate),
    P("cuEventRecord", 2000, cuEventRecord),
    P("cuEventSynchronize", 2000, cuEventSynchronize),
    P("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),
    P("cuEventDestroy", 4000, cuEventDestroy_v2),
};

static CUresult fk_lookup(const char *sym, void **pfn, int ver, cuuint64_t flags,
                          CUdriverProcAddressQueryResult *st) {
    if (pfn) *pfn = NULL;
    if (!sym || !pfn || (flags & ~(cuuint64_t)3)) return CUDA_ERROR_INVALID_VALUE;
    int want_ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const fk_proc_t *best = NULL;
    int known = 0;
    for (size_t i = 0; i < sizeof fk_procs / sizeof fk_procs[0]; i++) {
        const fk_proc_t *p = &fk_procs[i];
        if (strcmp(p->name, sym) != 0) continue;
        known = 1;
        if (p->version > ver || (p->ptds && !want_ptds)) continue;
        if (!best || (p->ptds && !best->ptds) ||
            (p->ptds == best->ptds && p->version > best->version))
            best = p;
    }
    if (!best) {
        if (st) *st = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = best->fn;
    if (st) *st = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

/* Resolving works before cuInit, as with the real driver (cudart resolves cuInit itself). */
FAKE_API CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags,
                                      CUdriverProcAddressQueryResult *st) {
    fk_setup();
    CUresult r = fk_inject("cuGetProcAddress_v2", CUDA_ERROR_NOT_FOUND);
    if (r != CUDA_SUCCESS) return r;
    return fk_lookup(sym, pfn, ver, flags, st);
}

FAKE_API CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags) {
    fk_setup();
    CUresult r = fk_inject("cuGetProcAddress", CUDA_ERROR_NOT_FOUND);
    if (r != CUDA_SUCCESS) return r;
    return fk_lookup(sym, pfn, ver, flags, NULL);
}
