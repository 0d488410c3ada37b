// impl/library.cuh — one build of libldmoe: the kernels' entry points, argument validation, the
// tile table, per-stream counter workspaces, launches, the layout converters, and the exported
// API of ldmoe.h.
//
// A library is one translation unit that defines its policy, `struct ldmoe::Library`, and then
// includes this file once (kernels/moe/ldmoe_api.cu is libldmoe.so's). The policy says:
//   template <class C> using Kernel = ...;   the configuration each tile's kernel is instantiated
//                                            with (C itself; or a type derived from C, e.g. with
//                                            DIAG, impl/params.cuh diag_of)
//   static TileCfg extra_tile(int tile);     tiles beyond ldmoe.h's lists (TileCfg{}: none)
//   static const char *version();            what ldmoe_version() returns (LDMOE_VERSION_TEXT...)
// extra_tile and version are declared in the policy and defined after this file (they may use
// describe<>). Another build (another tile list, instrumented launches) is another translation
// unit with another policy; grouped_mm() and grouped_mm_fp8() take the KParams' optional outputs
// and variant bits (LaunchExtras), which the exported API leaves zero.
//
// Errors are values with a thread-local message; nothing is printed.
#pragma once
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include "kernels/ldshim_topology.h"
#include "kernels/moe/ldmoe.h"
#include "kernels/moe/ldmoe_heuristics.h"
#include "kernels/moe/impl/quantize.cuh"
#include "kernels/moe/impl/tile_shapes.cuh"
#include "kernels/moe/impl/variants.h"

#define LDMOE_API extern "C" __attribute__((visibility("default")))

// The symbol libldshim fills for this module when the module is loaded.
LDSHIM_DEFINE_TOPOLOGY();

namespace ldmoe {

template <class C>
__global__ void __launch_bounds__(C::THREADS, 1) grouped_mm_kernel(const __grid_constant__ KParams p) {
    grouped_mm_body<C>(p, &ldshim_topology);
}
template <class C>
__global__ void __launch_bounds__(C::THREADS, 1) grouped_mm_ws_kernel(const __grid_constant__ KParams p) {
    grouped_mm_ws_body<C>(p, &ldshim_topology);
}
// FP8 tiles: the same body over the larger parameter block (KParamsF8 starts with the KParams).
template <class C>
__global__ void __launch_bounds__(C::THREADS, 1) grouped_mm_ws_fp8_kernel(const __grid_constant__ KParamsF8 p) {
    grouped_mm_ws_body<C>(p, &ldshim_topology);
}

// plain [E, N, K] <-> localized [D, E, N/D, K], one 16-byte chunk per thread-iteration.
__global__ void convert_kernel(const uint4 *__restrict__ src, uint4 *__restrict__ dst, int E, int N,
                               int K, int D, int to_localized) {
    const int64_t kc = K / 8;
    const int64_t rows = (int64_t)E * N;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const int32_t e = (int32_t)(row / N), n = (int32_t)(row - (int64_t)e * N);
        const int64_t loc = ldmoe_localized_row(E, N, D, e, n);
        const uint4 *s = src + (to_localized ? row : loc) * kc;
        uint4 *d = dst + (to_localized ? loc : row) * kc;
        for (int64_t c = threadIdx.x; c < kc; c += blockDim.x) d[c] = s[c];
    }
}

// plain [E, N, K] or localized [D, E, N/D, K] -> packed (ldmoe_tiles.h): one 16-byte chunk of
// dst per thread-iteration, in dst order (writes are whole lines; reads gather), zeros in the padding.
__global__ void pack_kernel(const uint4 *__restrict__ src, uint4 *__restrict__ dst, int E, int N, int K, int D,
                            int src_localized, int64_t chunks) {
    const int32_t ND = N / D, pnb = ldmoe_packed_rowblocks(ND), pkb = ldmoe_packed_kblocks(K);
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < chunks; i += stride) {
        const int64_t box = i / (LDMOE_PACK_BOX / 16);
        const int32_t in_box = (int32_t)(i % (LDMOE_PACK_BOX / 16));
        const int32_t rr = in_box / 8, c = (in_box % 8) ^ (rr % 8);   // box row, logical 16-byte chunk
        const int32_t kb = (int32_t)(box % pkb);
        const int64_t rowblk = box / pkb;
        const int32_t rb = (int32_t)(rowblk % pnb), se = (int32_t)(rowblk / pnb);
        const int32_t d = se / E, e = se % E;
        const int32_t r = rb * LDMOE_PACK_ROWS + rr, k = kb * LDMOE_PACK_K + c * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r < ND && k < K) {
            const int64_t row = src_localized ? (int64_t)se * ND + r : (int64_t)e * N + (int64_t)d * ND + r;
            v = src[row * (K / 8) + k / 8];
        }
        dst[i] = v;
    }
}

}  // namespace ldmoe

using namespace ldmoe;

// ---------------------------------------------------------------------------------------------
// errors

static __thread char g_msg[256];

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    return code;
}
static int cuda_fail(cudaError_t e, const char *what) {
    return fail(LDMOE_ERR_CUDA, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

LDMOE_API const char *ldmoe_error_string(int status) {
    switch (status) {
    case LDMOE_OK: return "success";
    case LDMOE_ERR_INVALID_ARG: return "invalid argument";
    case LDMOE_ERR_ALIGNMENT: return "misaligned pointer or size";
    case LDMOE_ERR_UNSUPPORTED: return "unsupported configuration";
    case LDMOE_ERR_CUDA: return "CUDA error";
    case LDMOE_ERR_NO_MEMORY: return "out of memory";
    default: return "unknown ldmoe status";
    }
}

LDMOE_API const char *ldmoe_last_error(void) { return g_msg; }

// The version text every build starts its ldmoe_version() with (Library::version).
#define LDMOE_VERSION_TEXT LDMOE_VERSION_STRING " (sm_90a: warp-specialized wgmma, TMA; elsewhere: mma.sync m16n8k16)"

LDMOE_API const char *ldmoe_version(void) { return Library::version(); }

// ---------------------------------------------------------------------------------------------
// the tile table

namespace ldmoe {
struct TileCfg {
    int bm, bn, box, threads, smem;   // box: token rows per TMA box (bn, or a chunk of it)
    const void *fn;                   // NULL: not a tile of this library
    bool wgmma;   // sm_90a-only kernel (wgmma): compute capability 9.0 required
};
}  // namespace ldmoe

// The kernel of tile shape C (instantiated as Library::Kernel<C>); BM x BN as the tile list says.
template <class C, int BM, int BN> static TileCfg describe() {
    static_assert(C::BM == BM && C::BN == BN, "the tile list's geometry is the kernel's");
    if constexpr (C::WARP_SPECIALIZED)
        return {C::BM, C::BN, C::CHUNK, C::THREADS, C::SMEM, (const void *)grouped_mm_ws_kernel<C>, true};
    else
        return {C::BM, C::BN, C::BN, C::THREADS, C::SMEM, (const void *)grouped_mm_kernel<C>, C::WG};
}

// Every tile of ldmoe.h's LDMOE_TILE_LIST, then the library's own (Library::extra_tile); other
// values have no kernel.
static TileCfg tile_cfg(int tile) {
    switch (tile) {
#define LDMOE_TILE_CASE_(value, name, bm, bn) \
    case LDMOE_TILE_##name: return describe<Library::Kernel<Shape_##name>, bm, bn>();
        LDMOE_TILE_LIST(LDMOE_TILE_CASE_)
#undef LDMOE_TILE_CASE_
    default: return Library::extra_tile(tile);
    }
}

// Whether the current device runs the sm_90a wgmma kernels (compute capability exactly 9.0).
// A failing query (no GPU) answers no.
static bool device_has_wgmma(void) {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) { cudaGetLastError(); return false; }
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return major == 9 && minor == 0;
}

static int resolve_tile(int tile, int64_t T, int E) {
    return tile == LDMOE_TILE_AUTO ? ldmoe_auto_tile(T, E, device_has_wgmma()) : tile;
}

// The FP8 tiles (LDMOE_FP8_TILE_LIST): the kernel of `tile` for scaling scheme `scaling`
// (enum ldmoe_fp8_scaling); every other pair has none.
template <class C> static TileCfg describe_fp8() {
    static_assert(C::WARP_SPECIALIZED && fp8_scaling_of<C>::value != 0, "an FP8 shape");
    return {C::BM, C::BN, C::CHUNK, C::THREADS, C::SMEM, (const void *)grouped_mm_ws_fp8_kernel<C>, true};
}
static TileCfg tile_cfg_fp8(int tile, int scaling) {
    switch (tile) {
#define LDMOE_FP8_TILE_CASE_(value, name, bm, bn)                                                    \
    case LDMOE_TILE_##name:                                                                          \
        static_assert(Shape_##name<LDMOE_FP8_ROWWISE>::BM == bm && Shape_##name<LDMOE_FP8_ROWWISE>::BN == bn, \
                      "the FP8 tile list's geometry is the kernel's");                               \
        return scaling == LDMOE_FP8_ROWWISE ? describe_fp8<Library::Kernel<Shape_##name<LDMOE_FP8_ROWWISE>>>() \
             : scaling == LDMOE_FP8_BLOCK   ? describe_fp8<Library::Kernel<Shape_##name<LDMOE_FP8_BLOCK>>>()   \
                                            : TileCfg{};
        LDMOE_FP8_TILE_LIST(LDMOE_FP8_TILE_CASE_)
#undef LDMOE_FP8_TILE_CASE_
    default: return TileCfg{};
    }
}

// Which tiles check_sizes accepts: the bf16 entry points' (kTilesBf16), the FP8 one's
// (kTilesFp8, which also requires K % 16 == 0), or either (ldmoe_tile_info).
enum { kTilesBf16 = 1, kTilesFp8 = 2, kTilesAny = 3 };

static int check_sizes(int64_t T, int E, int N, int K, int layout, int D, int tile, int kinds = kTilesBf16) {
    if (T < 0) return fail(LDMOE_ERR_INVALID_ARG, "T = %lld must be >= 0", (long long)T);
    if (E < 1 || E > LDMOE_MAX_EXPERTS)
        return fail(E < 1 ? LDMOE_ERR_INVALID_ARG : LDMOE_ERR_UNSUPPORTED, "E = %d must be in 1..%d", E, LDMOE_MAX_EXPERTS);
    if (N < 1 || K < 1) return fail(LDMOE_ERR_INVALID_ARG, "N = %d and K = %d must be >= 1", N, K);
    if (layout != LDMOE_LAYOUT_PLAIN && layout != LDMOE_LAYOUT_LOCALIZED && layout != LDMOE_LAYOUT_PACKED)
        return fail(LDMOE_ERR_INVALID_ARG, "layout %d is not PLAIN (0), LOCALIZED (1) or PACKED (2)", layout);
    if (layout != LDMOE_LAYOUT_PLAIN && (D < 1 || D > LDMOE_MAX_DOMAINS))
        return fail(LDMOE_ERR_INVALID_ARG, "num_domains = %d must be in 1..%d for the %s layout", D, LDMOE_MAX_DOMAINS,
                    layout == LDMOE_LAYOUT_PACKED ? "packed" : "localized");
    const bool is_bf16 = tile_cfg(tile).fn != NULL, is_fp8 = tile_cfg_fp8(tile, LDMOE_FP8_ROWWISE).fn != NULL;
    if (tile != LDMOE_TILE_AUTO && !is_bf16 && !is_fp8)
        return fail(LDMOE_ERR_INVALID_ARG, "tile %d is not a tile of this library (enum ldmoe_tile)", tile);
    if (is_fp8 && !(kinds & kTilesFp8))
        return fail(LDMOE_ERR_INVALID_ARG, "tile %d is an FP8 tile (LDMOE_FP8_TILE_LIST): use ldmoe_grouped_mm_fp8", tile);
    if (is_bf16 && !(kinds & kTilesBf16))
        return fail(LDMOE_ERR_INVALID_ARG, "tile %d is a bf16 tile; ldmoe_grouped_mm_fp8 takes AUTO or LDMOE_FP8_TILE_LIST",
                    tile);
    if (K % 8) return fail(LDMOE_ERR_ALIGNMENT, "K = %d must be a multiple of 8 (16-byte rows)", K);
    if (kinds == kTilesFp8 && K % 16)
        return fail(LDMOE_ERR_ALIGNMENT, "K = %d must be a multiple of 16 for e4m3 (16-byte rows)", K);
    if (N % (8 * D)) return fail(LDMOE_ERR_ALIGNMENT, "N = %d must be a multiple of 8*D = %d", N, 8 * D);
    // TMA coordinates and dimensions are 32-bit: token rows and weight rows must fit.
    if (T > INT32_MAX) return fail(LDMOE_ERR_UNSUPPORTED, "T = %lld exceeds 2^31-1 rows", (long long)T);
    if ((int64_t)E * N > INT32_MAX) return fail(LDMOE_ERR_UNSUPPORTED, "E*N = %lld exceeds 2^31-1 weight rows", (long long)E * N);
    return LDMOE_OK;
}

LDMOE_API int ldmoe_tile_info(int64_t T, int E, int N, int K, int layout, int num_domains, int tile,
                              int *bm, int *bn, int64_t *bound) {
    int D = layout == LDMOE_LAYOUT_PLAIN ? 1 : num_domains;
    int rc = check_sizes(T, E, N, K, layout, D, tile, kTilesAny);
    if (rc) return rc;
    TileCfg c = tile_cfg(resolve_tile(tile, T, E));
    if (!c.fn) c = tile_cfg_fp8(tile, LDMOE_FP8_ROWWISE);
    int64_t nbs = (N / D + c.bm - 1) / c.bm;
    if (bm) *bm = c.bm;
    if (bn) *bn = c.bn;
    if (bound) *bound = ((T + c.bn - 1) / c.bn + E) * D * nbs;
    return LDMOE_OK;
}

// ---------------------------------------------------------------------------------------------
// TMA descriptors (cuTensorMapEncodeTiled, reached through the runtime: no link-time libcuda)

typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                    const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                    CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static encode_tiled_fn g_encode;   // set once under g_lock

static int get_encoder(encode_tiled_fn *out);

// A row-major bf16 [rows, K] matrix read in boxes of 64 k x box_rows, 128-byte swizzled.
static int make_map(encode_tiled_fn enc, CUtensorMap *m, const void *base, int64_t rows, int K, int box_rows,
                    const char *what) {
    cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)rows};
    cuuint64_t strides[1] = {(cuuint64_t)K * 2};
    cuuint32_t box[2] = {(cuuint32_t)kBK, (cuuint32_t)box_rows};
    cuuint32_t estr[2] = {1, 1};
    CUresult r = enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dims, strides, box, estr,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return fail(LDMOE_ERR_CUDA, "cuTensorMapEncodeTiled(%s: %lld x %d) failed with CUresult %d", what,
                    (long long)rows, K, (int)r);
    return LDMOE_OK;
}

// A device array of n floats as a 1-D tensor read in boxes of `box` elements (the FP8 block
// scales). The map starts at the 16-byte aligned address at or below `base`; *first is the
// element `base` is there (0..3), to add to coordinates (which the kernels round down to a
// multiple of 4: a box's innermost coordinate must be 16-byte aligned). Elements past base + n
// read as zeros.
static int make_map_1d(encode_tiled_fn enc, CUtensorMap *m, const float *base, int64_t n, int box, int32_t *first,
                       const char *what) {
    const uintptr_t a = (uintptr_t)base & ~(uintptr_t)15;
    *first = (int32_t)(((uintptr_t)base - a) / sizeof(float));
    cuuint64_t dims[1] = {(cuuint64_t)(n + *first)};
    cuuint64_t strides[1] = {0};   // rank 1: none
    cuuint32_t boxd[1] = {(cuuint32_t)box};
    cuuint32_t estr[1] = {1};
    CUresult r = enc(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 1, (void *)a, dims, strides, boxd, estr,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return fail(LDMOE_ERR_CUDA, "cuTensorMapEncodeTiled(%s: %lld floats, box %d) failed with CUresult %d", what,
                    (long long)n, box, (int)r);
    return LDMOE_OK;
}

// ---------------------------------------------------------------------------------------------
// per-device facts and per-(device, stream) counter workspaces

#define LDMOE_MAX_DEVICES 64
#define LDMOE_MAX_WORKSPACES 256

struct Workspace { int device; void *stream; unsigned *ctr; };

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_sms[LDMOE_MAX_DEVICES];
static unsigned g_attr_done[LDMOE_MAX_DEVICES];   // bit t: smem attribute set for tile t
// FP8 kernels: bit 2 * (tile - first FP8 tile) + scaling - 1.
static unsigned g_attr_done_fp8[LDMOE_MAX_DEVICES];
static Workspace g_ws[LDMOE_MAX_WORKSPACES];
static int g_nws;

// SM order probe: one CTA per SM (each takes all the shared memory a block may have); block b
// records that the hardware handed its SM out b-th. The hardware fills a GPC before the next, so
// this order puts consecutive static ranks of the scheduler on SMs of one GPC (impl/scheduler.cuh).
__global__ void sm_order_kernel() {
    extern __shared__ unsigned char pad[];
    if (threadIdx.x == 0) {
        unsigned s;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
        if (s < LDSHIM_MAX_SMS) g_sm_key[s] = (uint16_t)blockIdx.x;
        pad[0] = 0;
    }
}

static bool g_order_done[LDMOE_MAX_DEVICES];

// Caller holds g_lock. Queued on the first launch's stream, once per device; if it cannot run,
// the keys stay zero (SM-id order), which costs speed, never correctness.
static void sm_order_probe(int dev, int sms, void *stream) {
    if (g_order_done[dev]) return;
    g_order_done[dev] = true;
    int smem = 0;
    if (cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
        cudaFuncSetAttribute(sm_order_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) {
        (void)cudaGetLastError();   // our own failure, not the caller's
        return;
    }
    if (cudaLaunchKernel((const void *)sm_order_kernel, dim3(sms), dim3(32), NULL, smem, (cudaStream_t)stream) != cudaSuccess)
        (void)cudaGetLastError();
}

// One CTA per SM the process runs on: under compute binding (libldshim preloaded with
// `compute = domain:N | spread:K`) that is the bound set the shim publishes. Asked through the
// shim's host API, which needs no device copy (a first launch may be inside a graph capture).
static uint32_t bound_sms(int dev, uint32_t device_sms) {
    typedef int (*get_topology_fn)(int, ldshim_topology_t *, size_t);
    get_topology_fn fn = (get_topology_fn)dlsym(RTLD_DEFAULT, "ldshim_get_topology");
    ldshim_topology_t t;
    if (!fn || fn(dev, &t, sizeof t) != 0) return device_sms;
    return ldshim_bound_sms(&t, device_sms);
}

// Caller holds g_lock. attr/bit: where the kernel's shared-memory attribute is recorded as set.
// Caller holds g_lock. The SMs a launch on `dev` gets: the bound set's, else the device's.
static int device_sms(int dev, int *sms) {
    if (dev < 0 || dev >= LDMOE_MAX_DEVICES) return fail(LDMOE_ERR_UNSUPPORTED, "device %d beyond %d", dev, LDMOE_MAX_DEVICES);
    if (!g_sms[dev]) {
        int v = 0;
        cudaError_t e = cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev);
        if (e != cudaSuccess) return cuda_fail(e, "cudaDeviceGetAttribute(multiprocessor count)");
        g_sms[dev] = (int)bound_sms(dev, (uint32_t)v);
    }
    *sms = g_sms[dev];
    return LDMOE_OK;
}

static int device_setup(int dev, unsigned *attr, int bit, const TileCfg &c, int *sms) {
    int rc = device_sms(dev, sms);
    if (rc) return rc;
    cudaError_t e;
    if (!(attr[dev] & (1u << bit))) {
        if ((e = cudaFuncSetAttribute(c.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, c.smem)) != cudaSuccess)
            return cuda_fail(e, "cudaFuncSetAttribute(max dynamic shared memory)");
        attr[dev] |= 1u << bit;
    }
    return LDMOE_OK;
}

// Caller holds g_lock. A new workspace is zeroed on `stream`, so it is ordered before the launch.
static int workspace_get(int dev, void *stream, unsigned **out) {
    for (int i = 0; i < g_nws; ++i)
        if (g_ws[i].device == dev && g_ws[i].stream == stream) { *out = g_ws[i].ctr; return LDMOE_OK; }
    if (g_nws == LDMOE_MAX_WORKSPACES)
        return fail(LDMOE_ERR_UNSUPPORTED, "more than %d streams in use; call ldmoe_release()", LDMOE_MAX_WORKSPACES);
    unsigned *p = NULL;
    cudaError_t e = cudaMalloc((void **)&p, kCounterWords * sizeof(unsigned));
    if (e != cudaSuccess) return fail(LDMOE_ERR_NO_MEMORY, "workspace cudaMalloc: %s", cudaGetErrorString(e));
    if ((e = cudaMemsetAsync(p, 0, kCounterWords * sizeof(unsigned), (cudaStream_t)stream)) != cudaSuccess) {
        cudaFree(p);
        return cuda_fail(e, "workspace cudaMemsetAsync");
    }
    g_ws[g_nws++] = Workspace{dev, stream, p};
    *out = p;
    return LDMOE_OK;
}

// Caller holds g_lock.
static int get_encoder(encode_tiled_fn *out) {
    if (!g_encode) {
        void *fn = NULL;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q);
        if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn)
            return fail(LDMOE_ERR_UNSUPPORTED, "driver lacks cuTensorMapEncodeTiled (needs CUDA 12 driver): %s",
                        cudaGetErrorString(e));
        g_encode = (encode_tiled_fn)fn;
    }
    *out = g_encode;
    return LDMOE_OK;
}

LDMOE_API int ldmoe_release(void) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return cuda_fail(e, "cudaGetDevice");
    if ((e = cudaDeviceSynchronize()) != cudaSuccess) return cuda_fail(e, "cudaDeviceSynchronize");
    pthread_mutex_lock(&g_lock);
    int kept = 0;
    for (int i = 0; i < g_nws; ++i) {
        if (g_ws[i].device == dev) cudaFree(g_ws[i].ctr);
        else g_ws[kept++] = g_ws[i];
    }
    g_nws = kept;
    Library::release_device(dev);
    // A device reset after this loses the kernels' attributes and the SM order keys, and may
    // bind the process to other SMs: set them again.
    if (dev < LDMOE_MAX_DEVICES) {
        g_attr_done[dev] = 0;
        g_attr_done_fp8[dev] = 0;
        g_order_done[dev] = false;
        g_sms[dev] = 0;
    }
    pthread_mutex_unlock(&g_lock);
    return LDMOE_OK;
}

// ---------------------------------------------------------------------------------------------
// launches

// The KParams' optional outputs and variant bits (impl/params.cuh, impl/variants.h) for one
// launch; the exported API passes none (LaunchExtras{}). The caller has checked them: tune holds
// only bits its kernels know, counters is NULL or has 2 * counters_cap words.
struct LaunchExtras {
    uint32_t *counters;
    int64_t counters_cap;
    uint32_t tune;
    uint64_t *trace;
};

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

// The checks every grouped GEMM shares after its sizes: mode, steal_waves, pointers, alignment.
static int check_call(const ldmoe_params_t *p) {
    if (p->mode < LDMOE_MODE_AUTO || p->mode > LDMOE_MODE_STATIC)
        return fail(LDMOE_ERR_INVALID_ARG, "mode %d unknown (0 auto, 1 aware, 2 unaware, 3 static)", p->mode);
    if (!(p->steal_waves == p->steal_waves)) return fail(LDMOE_ERR_INVALID_ARG, "steal_waves is NaN");
    if (!p->offs) return fail(LDMOE_ERR_INVALID_ARG, "offs is NULL");
    if (p->T > 0 && (!p->x || !p->w || !p->y))
        return fail(LDMOE_ERR_INVALID_ARG, "x, w and y must be non-NULL (x=%p w=%p y=%p)", p->x, p->w, p->y);
    if (!aligned16(p->x) || !aligned16(p->w) || !aligned16(p->y))
        return fail(LDMOE_ERR_ALIGNMENT, "x, w and y must be 16-byte aligned (x=%p w=%p y=%p)", p->x, p->w, p->y);
    if (((uintptr_t)p->offs & 3u) != 0) return fail(LDMOE_ERR_ALIGNMENT, "offs must be 4-byte aligned");
    return LDMOE_OK;
}

// Everything of a launch but the launch: device facts, workspace, tensor maps and the KParams.
// Kr: the row length the load side sees, in bf16-sized elements (K for bf16, K/2 for e4m3).
static int prepare(const ldmoe_params_t *p, const LaunchExtras &ext, int D, int Kr, const TileCfg &c, unsigned *attr,
                   int bit, KParams &kp, int *sms) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return cuda_fail(e, "cudaGetDevice");
    unsigned *ctr = NULL;
    encode_tiled_fn enc = NULL;
    pthread_mutex_lock(&g_lock);
    int rc = device_setup(dev, attr, bit, c, sms);
    if (!rc) rc = get_encoder(&enc);
    if (!rc) rc = workspace_get(dev, p->stream, &ctr);
    if (!rc) sm_order_probe(dev, *sms, p->stream);
    pthread_mutex_unlock(&g_lock);
    if (rc) return rc;

    const bool packed = p->layout == LDMOE_LAYOUT_PACKED;
    if (!packed && (rc = make_map(enc, &kp.tm_w, p->w, (int64_t)p->E * p->N, Kr, c.bm, "weights"))) return rc;
    if ((rc = make_map(enc, &kp.tm_x, p->x, p->T, Kr, c.box, "tokens"))) return rc;
    if (c.box < c.bn && ((rc = make_map(enc, &kp.tm_xh, p->x, p->T, Kr, c.bn / 2, "tokens, half box")) ||
                         (rc = make_map(enc, &kp.tm_xb, p->x, p->T, Kr, c.bn, "tokens, whole box"))))
        return rc;
    kp.x = (const __nv_bfloat16 *)p->x;
    kp.w = (const __nv_bfloat16 *)p->w;
    kp.offs = p->offs;
    kp.y = (__nv_bfloat16 *)p->y;
    kp.T = p->T;
    kp.E = p->E; kp.N = p->N; kp.K = Kr; kp.D = D; kp.ND = p->N / D;
    kp.nbs = (kp.ND + c.bm - 1) / c.bm;
    kp.packed = packed;
    kp.pnb = ldmoe_packed_rowblocks(kp.ND);
    kp.pkb = ldmoe_packed_kblocks(Kr);
    kp.mode = p->mode;
    kp.steal_waves = p->steal_waves > 0.f ? p->steal_waves : LDMOE_DEFAULT_STEAL_WAVES;
    kp.ctr = ctr;
    kp.dbg = ext.counters;
    kp.dbg_cap = ext.counters ? ext.counters_cap : 0;
    kp.tune = ext.tune;
    kp.trace = ext.trace;
    return LDMOE_OK;
}

// dependent: a programmatic dependent launch (the FP8 kernels, which wait for the stream's previous
// kernel themselves, impl/ptx.cuh griddep_wait): its CTAs may start on SMs that kernel leaves free
// and set up (barriers, descriptors, registers) while it still runs, and the launch's gap after
// that kernel closes.
static int launch(const TileCfg &c, int sms, void *kparams, void *stream, bool dependent = false) {
    void *args[] = {kparams};
    cudaError_t e;
    if (dependent) {
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(sms);
        cfg.blockDim = dim3(c.threads);
        cfg.dynamicSmemBytes = c.smem;
        cfg.stream = (cudaStream_t)stream;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        e = cudaLaunchKernelExC(&cfg, c.fn, args);
    } else {
        e = cudaLaunchKernel(c.fn, dim3(sms), dim3(c.threads), args, c.smem, (cudaStream_t)stream);
    }
    if (e != cudaSuccess) return cuda_fail(e, "launch of the grouped-GEMM kernel");
    g_msg[0] = 0;
    return LDMOE_OK;
}

static int grouped_mm(const ldmoe_params_t *p, const LaunchExtras &ext) {
    const int D = p->layout == LDMOE_LAYOUT_PLAIN ? 1 : p->num_domains;
    int rc = check_sizes(p->T, p->E, p->N, p->K, p->layout, D, p->tile);
    if (rc) return rc;
    if ((rc = check_call(p))) return rc;
    if (p->T == 0) { g_msg[0] = 0; return LDMOE_OK; }

    const int tile = resolve_tile(p->tile, p->T, p->E);
    if (tile_cfg(tile).wgmma && !device_has_wgmma())
        return fail(LDMOE_ERR_UNSUPPORTED, "tile %d uses wgmma, which needs a compute capability 9.0 GPU", tile);
    const TileCfg c = tile_cfg(tile);
    KParams kp;
    memset(&kp, 0, sizeof kp);
    int sms = 0;
    if ((rc = prepare(p, ext, D, p->K, c, g_attr_done, tile, kp, &sms))) return rc;
    return launch(c, sms, &kp, p->stream);
}

// FP8 (ldmoe.h): the bf16 checks, then the scheme and the scales; the kernels see the e4m3 rows
// as rows of K/2 bf16-sized elements (KParamsF8).
static int grouped_mm_fp8(const ldmoe_fp8_params_t *f, const LaunchExtras &ext) {
    const ldmoe_params_t *p = &f->base;
    if (f->scaling != LDMOE_FP8_ROWWISE && f->scaling != LDMOE_FP8_BLOCK)
        return fail(LDMOE_ERR_INVALID_ARG, "scaling %d is neither LDMOE_FP8_ROWWISE (1) nor LDMOE_FP8_BLOCK (2)",
                    f->scaling);
    const int D = p->layout == LDMOE_LAYOUT_PLAIN ? 1 : p->num_domains;
    int rc = check_sizes(p->T, p->E, p->N, p->K, p->layout, D, p->tile, kTilesFp8);
    if (rc) return rc;
    if ((rc = check_call(p))) return rc;
    if (p->T > 0 && (!f->x_scale || !f->w_scale))
        return fail(LDMOE_ERR_INVALID_ARG, "x_scale and w_scale must be non-NULL (x_scale=%p w_scale=%p)",
                    (const void *)f->x_scale, (const void *)f->w_scale);
    if (((uintptr_t)f->x_scale & 3u) || ((uintptr_t)f->w_scale & 3u))
        return fail(LDMOE_ERR_ALIGNMENT, "x_scale and w_scale must be 4-byte aligned (float)");
    // The load side addresses the block scales with int32 element coordinates (Loader::load_scales).
    const int64_t nx = (int64_t)ldmoe_fp8_kblocks(p->K) * p->T;
    const int64_t nw = (int64_t)D * p->E * ldmoe_fp8_rowblocks(p->N / D) * ldmoe_fp8_kblocks(p->K);
    if (f->scaling == LDMOE_FP8_BLOCK && (nx > INT32_MAX - 512 || nw > INT32_MAX - 512))
        return fail(LDMOE_ERR_UNSUPPORTED, "block scales of %lld (x_scale) / %lld (w_scale) floats exceed 2^31 - 512",
                    (long long)nx, (long long)nw);
    if (p->T == 0) { g_msg[0] = 0; return LDMOE_OK; }

    if (!device_has_wgmma())
        return fail(LDMOE_ERR_UNSUPPORTED, "the FP8 tiles use wgmma, which needs a compute capability 9.0 GPU");
    int tile = p->tile;
    if (tile == LDMOE_TILE_AUTO) {
        // AUTO weighs how the tiles fill the waves of the SMs the launch will get.
        int dev = 0, sms = 0;
        cudaError_t e = cudaGetDevice(&dev);
        if (e != cudaSuccess) return cuda_fail(e, "cudaGetDevice");
        pthread_mutex_lock(&g_lock);
        rc = device_sms(dev, &sms);
        pthread_mutex_unlock(&g_lock);
        if (rc) return rc;
        tile = ldmoe_auto_tile_fp8(p->T, p->E, p->N, D, sms, f->scaling);
    }
    const TileCfg c = tile_cfg_fp8(tile, f->scaling);
    KParamsF8 kp;
    memset(&kp, 0, sizeof kp);
    int sms = 0;
    const int bit = 2 * (tile - LDMOE_TILE_WS_128x64_C16_FP8) + f->scaling - 1;
    if ((rc = prepare(p, ext, D, p->K / 2, c, g_attr_done_fp8, bit, kp, &sms))) return rc;
    kp.xs = f->x_scale;
    kp.ws = f->w_scale;
    kp.K8 = p->K;
    kp.KB = ldmoe_fp8_kblocks(p->K);
    if (f->scaling == LDMOE_FP8_BLOCK) {
        encode_tiled_fn enc = NULL;
        pthread_mutex_lock(&g_lock);
        rc = get_encoder(&enc);
        pthread_mutex_unlock(&g_lock);
        if (rc || (rc = make_map_1d(enc, &kp.tm_xs, f->x_scale, nx, c.bn + 4, &kp.xs0, "x_scale")) ||
            (rc = make_map_1d(enc, &kp.tm_ws, f->w_scale, nw, 8, &kp.ws0, "w_scale")))
            return rc;
    }
    return launch(c, sms, &kp, p->stream, !(ext.tune & LDMOE_TUNE_NO_DEPENDENT));
}

LDMOE_API int ldmoe_grouped_mm_ex(const ldmoe_params_t *p) {
    if (!p) return fail(LDMOE_ERR_INVALID_ARG, "params is NULL");
    return grouped_mm(p, LaunchExtras{});
}

LDMOE_API int ldmoe_grouped_mm_fp8(const ldmoe_fp8_params_t *p) {
    if (!p) return fail(LDMOE_ERR_INVALID_ARG, "params is NULL");
    return grouped_mm_fp8(p, LaunchExtras{});
}

LDMOE_API int ldmoe_grouped_mm(const void *x, const void *w, const int32_t *offs, void *y, int64_t T, int E,
                               int N, int K, int layout, int num_domains, int mode, float steal_waves,
                               void *stream) {
    ldmoe_params_t p;
    memset(&p, 0, sizeof p);
    p.x = x; p.w = w; p.offs = offs; p.y = y; p.T = T; p.E = E; p.N = N; p.K = K;
    p.layout = layout; p.num_domains = num_domains; p.mode = mode; p.steal_waves = steal_waves;
    p.stream = stream;
    // Not through the exported ldmoe_grouped_mm_ex: in a process that loaded two builds of this
    // API, the dynamic linker would bind that call to the first one loaded.
    return grouped_mm(&p, LaunchExtras{});
}

LDMOE_API int ldmoe_convert_layout(const void *src, void *dst, int E, int N, int K, int D, int to_localized,
                                   void *stream) {
    if (!src || !dst) return fail(LDMOE_ERR_INVALID_ARG, "src and dst must be non-NULL");
    if (E < 1 || N < 1 || K < 1 || D < 1 || D > LDMOE_MAX_DOMAINS)
        return fail(LDMOE_ERR_INVALID_ARG, "E=%d N=%d K=%d D=%d: all >= 1, D <= %d", E, N, K, D, LDMOE_MAX_DOMAINS);
    if (N % D) return fail(LDMOE_ERR_INVALID_ARG, "N = %d is not a multiple of D = %d", N, D);
    if (K % 8 || !aligned16(src) || !aligned16(dst))
        return fail(LDMOE_ERR_ALIGNMENT, "K must be a multiple of 8 and src/dst 16-byte aligned");
    const size_t bytes = (size_t)E * N * K * 2;
    if ((const char *)src < (const char *)dst + bytes && (const char *)dst < (const char *)src + bytes)
        return fail(LDMOE_ERR_INVALID_ARG, "src and dst overlap");
    int64_t rows = (int64_t)E * N;
    int grid = (int)(rows < 65536 ? rows : 65536);
    convert_kernel<<<grid, 128, 0, (cudaStream_t)stream>>>((const uint4 *)src, (uint4 *)dst, E, N, K, D, to_localized);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_fail(e, "launch of the layout converter");
    g_msg[0] = 0;
    return LDMOE_OK;
}

LDMOE_API size_t ldmoe_packed_bytes(int E, int N, int K, int D) {
    if (E < 1 || N < 1 || K < 1 || D < 1 || D > LDMOE_MAX_DOMAINS || N % D) return 0;
    if ((int64_t)E * N > INT32_MAX || K > INT32_MAX - 256) return 0;   // the kernels' row and k coordinates are int32
    return (size_t)ldmoe_packed_box(E, N / D, K, D, 0, 0, 0) * LDMOE_PACK_BOX;
}

LDMOE_API int ldmoe_pack_weights(const void *src, int src_layout, void *dst, int E, int N, int K, int D,
                                 void *stream) {
    if (!src || !dst) return fail(LDMOE_ERR_INVALID_ARG, "src and dst must be non-NULL");
    if (src_layout != LDMOE_LAYOUT_PLAIN && src_layout != LDMOE_LAYOUT_LOCALIZED)
        return fail(LDMOE_ERR_INVALID_ARG, "src_layout %d is neither PLAIN (0) nor LOCALIZED (1)", src_layout);
    if (E < 1 || N < 1 || K < 1 || D < 1 || D > LDMOE_MAX_DOMAINS)
        return fail(LDMOE_ERR_INVALID_ARG, "E=%d N=%d K=%d D=%d: all >= 1, D <= %d", E, N, K, D, LDMOE_MAX_DOMAINS);
    if (N % D) return fail(LDMOE_ERR_INVALID_ARG, "N = %d is not a multiple of D = %d", N, D);
    if (K % 8 || !aligned16(src) || !aligned16(dst))
        return fail(LDMOE_ERR_ALIGNMENT, "K must be a multiple of 8 and src/dst 16-byte aligned");
    if ((int64_t)E * N > INT32_MAX) return fail(LDMOE_ERR_UNSUPPORTED, "E*N = %lld exceeds 2^31-1 weight rows", (long long)E * N);
    const size_t sbytes = (size_t)E * N * K * 2, dbytes = ldmoe_packed_bytes(E, N, K, D);
    if ((const char *)src < (const char *)dst + dbytes && (const char *)dst < (const char *)src + sbytes)
        return fail(LDMOE_ERR_INVALID_ARG, "src and dst overlap");
    const int64_t chunks = (int64_t)(dbytes / 16);
    const int64_t blocks = (chunks + 255) / 256;
    pack_kernel<<<(int)(blocks < 65536 ? blocks : 65536), 256, 0, (cudaStream_t)stream>>>(
        (const uint4 *)src, (uint4 *)dst, E, N, K, D, src_layout == LDMOE_LAYOUT_LOCALIZED, chunks);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_fail(e, "launch of the weight packer");
    g_msg[0] = 0;
    return LDMOE_OK;
}

// ---------------------------------------------------------------------------------------------
// topology

LDMOE_API int ldmoe_get_topology(struct ldshim_topology *out, size_t size) {
    if (!out) return fail(LDMOE_ERR_INVALID_ARG, "out is NULL");
    if (size < LDSHIM_TOPOLOGY_V1_BYTES)
        return fail(LDMOE_ERR_INVALID_ARG, "size %zu is smaller than the version-1 topology (%zu bytes)", size,
                    (size_t)LDSHIM_TOPOLOGY_V1_BYTES);
    if (size > sizeof *out) size = sizeof *out;
    cudaError_t e = cudaMemcpyFromSymbol(out, ldshim_topology, size);
    if (e != cudaSuccess) return cuda_fail(e, "cudaMemcpyFromSymbol(ldshim_topology)");
    return LDMOE_OK;
}


// ---------------------------------------------------------------------------------------------
// FP8 converters: rows of K e4m3 bytes are rows of K/2 bf16-sized elements to the bf16 ones.

// The shared checks of the FP8 converters, with K counted in e4m3 elements.
static int check_fp8_layout_args(const void *src, const void *dst, int E, int N, int K, int D) {
    if (!src || !dst) return fail(LDMOE_ERR_INVALID_ARG, "src and dst must be non-NULL");
    if (E < 1 || N < 1 || K < 1 || D < 1 || D > LDMOE_MAX_DOMAINS)
        return fail(LDMOE_ERR_INVALID_ARG, "E=%d N=%d K=%d D=%d: all >= 1, D <= %d", E, N, K, D, LDMOE_MAX_DOMAINS);
    if (N % D) return fail(LDMOE_ERR_INVALID_ARG, "N = %d is not a multiple of D = %d", N, D);
    if (K % 16 || !aligned16(src) || !aligned16(dst))
        return fail(LDMOE_ERR_ALIGNMENT, "K = %d must be a multiple of 16 (e4m3 rows of 16-byte chunks) and src/dst "
                    "16-byte aligned", K);
    return LDMOE_OK;
}

LDMOE_API int ldmoe_convert_layout_fp8(const void *src, void *dst, int E, int N, int K, int D, int to_localized,
                                       void *stream) {
    int rc = check_fp8_layout_args(src, dst, E, N, K, D);
    return rc ? rc : ldmoe_convert_layout(src, dst, E, N, K / 2, D, to_localized, stream);
}

LDMOE_API size_t ldmoe_packed_bytes_fp8(int E, int N, int K, int D) {
    if (K < 16 || K % 16) return 0;
    return ldmoe_packed_bytes(E, N, K / 2, D);
}

LDMOE_API int ldmoe_pack_weights_fp8(const void *src, int src_layout, void *dst, int E, int N, int K, int D,
                                     void *stream) {
    if (src_layout != LDMOE_LAYOUT_PLAIN && src_layout != LDMOE_LAYOUT_LOCALIZED)
        return fail(LDMOE_ERR_INVALID_ARG, "src_layout %d is neither PLAIN (0) nor LOCALIZED (1)", src_layout);
    int rc = check_fp8_layout_args(src, dst, E, N, K, D);
    return rc ? rc : ldmoe_pack_weights(src, src_layout, dst, E, N, K / 2, D, stream);
}

LDMOE_API int ldmoe_quantize_fp8(const void *x, int64_t T, int K, int scaling, void *x8, float *x_scale,
                                 void *stream) {
    if (scaling != LDMOE_FP8_ROWWISE && scaling != LDMOE_FP8_BLOCK)
        return fail(LDMOE_ERR_INVALID_ARG, "scaling %d is neither LDMOE_FP8_ROWWISE (1) nor LDMOE_FP8_BLOCK (2)",
                    scaling);
    if (T < 0 || K < 1) return fail(LDMOE_ERR_INVALID_ARG, "T = %lld must be >= 0 and K = %d >= 1", (long long)T, K);
    if (T > INT32_MAX) return fail(LDMOE_ERR_UNSUPPORTED, "T = %lld exceeds 2^31-1 rows", (long long)T);
    if (K % 16) return fail(LDMOE_ERR_ALIGNMENT, "K = %d must be a multiple of 16 (16-byte e4m3 rows)", K);
    if (T > 0 && (!x || !x8 || !x_scale))
        return fail(LDMOE_ERR_INVALID_ARG, "x, x8 and x_scale must be non-NULL (x=%p x8=%p x_scale=%p)", x, x8,
                    (void *)x_scale);
    if (!aligned16(x) || !aligned16(x8) || ((uintptr_t)x_scale & 3u))
        return fail(LDMOE_ERR_ALIGNMENT, "x and x8 must be 16-byte aligned, x_scale 4-byte (x=%p x8=%p x_scale=%p)",
                    x, x8, (void *)x_scale);
    if (T == 0) { g_msg[0] = 0; return LDMOE_OK; }
    const int sh = quant_tpr_shift(K / 8), rows_per_cta = kQuantThreads >> sh;
    unsigned blocks = (unsigned)((T + rows_per_cta - 1) / rows_per_cta);
    if (scaling == LDMOE_FP8_ROWWISE) {
        // Rowwise CTAs loop over rows (quantize.cuh): no more of them than are resident at once
        // (the launch bounds promise four per SM).
        int dev = 0, sms = 0;
        cudaError_t e = cudaGetDevice(&dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        if (e != cudaSuccess) return cuda_fail(e, "cudaDeviceGetAttribute(multiprocessor count)");
        if (sms > 0 && blocks > 4u * (unsigned)sms) blocks = 4u * (unsigned)sms;
    }
    const uint4 *src = (const uint4 *)x;
    uint2 *dst = (uint2 *)x8;
    if (scaling == LDMOE_FP8_ROWWISE)
        quantize_fp8_kernel<LDMOE_FP8_ROWWISE><<<blocks, kQuantThreads, 0, (cudaStream_t)stream>>>(src, T, K, dst, x_scale, sh);
    else
        quantize_fp8_kernel<LDMOE_FP8_BLOCK><<<blocks, kQuantThreads, 0, (cudaStream_t)stream>>>(src, T, K, dst, x_scale, sh);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_fail(e, "launch of the FP8 quantization kernel");
    g_msg[0] = 0;
    return LDMOE_OK;
}
