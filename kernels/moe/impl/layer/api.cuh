// impl/layer/api.cuh — host side of the fused MoE layer (ldmoe_moe): argument checks, the layer
// packing kernel, per-(device, stream) layer workspaces, the cooperative launch.
//
// Included by ldmoe_api.cu after impl/library.cuh (one translation unit), so that the layer's
// kernel sees the same `ldshim_topology` symbol the shim fills for this module, and shares the
// library's error message, lock and SM count. Product only: the lab does not build the layer. The device code is impl/layer/layer.cuh.
#include "kernels/moe/impl/layer/layer.cuh"

namespace ldmoe {
namespace layer {

// Tile configurations: decode (few tokens per expert: 32 weight rows, i.e. 16 h channels of
// GEMM1, x 16 tokens: fine-grained tiles that fill every SM) and prefill: 128 or 256 weight rows
// x 128 tokens on wgmma (sm_90a only), 64 x 64 on mma.sync elsewhere (layer_tile).
template <int BM, int BN, bool F8, bool A8>
__global__ void __launch_bounds__(kThreads, 1) moe_layer_kernel(const __grid_constant__ LParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900   // bulk copies, mbarrier transactions
    moe_layer_body<BM, BN, F8, A8>(p, &ldshim_topology);
#else
    (void)p;
    __trap();
#endif
}

// plain w13 [E, 2I, H] / w2 [E, H, I] -> the layer's packed layout (ldmoe.h): one 16-byte chunk
// of dst per thread-iteration, in dst order (16-byte chunk c of a box row rr at c ^ (rr % 8)).
__global__ void pack_layer_kernel(const uint4 *__restrict__ src, uint4 *__restrict__ dst, int E, int R, int Kd,
                                  int D, int interleave, int I, int64_t chunks) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int Rs = R / D, kb = Kd / 64;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < chunks; i += stride) {
        // dst: [D][E][Rs/16][Kd/64][16][64 elements = 8 chunks]
        const int c = (int)(i % 8);
        const int rr = (int)((i / 8) % 16);
        const int64_t box = i / 128;
        const int b = (int)(box % kb);
        const int64_t grp = box / kb;   // over [D][E][Rs/16]
        const int g = (int)(grp % (Rs / 16));
        const int64_t de = grp / (Rs / 16);
        const int e = (int)(de % E), d = (int)(de / E);
        int row;   // row of expert e in the plain layout
        if (interleave) {   // w13: each 16-row group is 8 gate rows then the matching 8 up rows
            const int ch = d * (I / D) + g * 8 + (rr % 8);
            row = rr < 8 ? ch : I + ch;
        } else {
            row = d * Rs + g * 16 + rr;
        }
        // chunks swizzled inside each 128-byte box row (ldmatrix reads 8 rows conflict-free)
        dst[i] = src[((int64_t)e * R + row) * (Kd / 8) + b * 8 + (c ^ (rr % 8))];
    }
}

}  // namespace layer
}  // namespace ldmoe

using namespace ldmoe::layer;

// ---------------------------------------------------------------------------------------------
// argument checks (no CUDA call before they pass)

static int moe_check_dims(int64_t T, int E, int H, int I, int k, int layout, int D) {
    if (T < 0) return fail(LDMOE_ERR_INVALID_ARG, "T = %lld must be >= 0", (long long)T);
    if (E < 1 || E > LDMOE_MOE_MAX_EXPERTS)
        return fail(E < 1 ? LDMOE_ERR_INVALID_ARG : LDMOE_ERR_UNSUPPORTED, "E = %d must be in 1..%d", E,
                    LDMOE_MOE_MAX_EXPERTS);
    if (k < 1 || k > LDMOE_MOE_MAX_TOPK)
        return fail(k < 1 ? LDMOE_ERR_INVALID_ARG : LDMOE_ERR_UNSUPPORTED, "k = %d must be in 1..%d", k,
                    LDMOE_MOE_MAX_TOPK);
    if (H < 1 || I < 1) return fail(LDMOE_ERR_INVALID_ARG, "H = %d and I = %d must be >= 1", H, I);
    if (layout != LDMOE_LAYOUT_PLAIN && layout != LDMOE_LAYOUT_PACKED)
        return fail(LDMOE_ERR_INVALID_ARG, "layout %d: the layer takes LDMOE_LAYOUT_PLAIN (0) or LDMOE_LAYOUT_PACKED (2)",
                    layout);
    if (D < 1 || D > LDMOE_MAX_DOMAINS)
        return fail(LDMOE_ERR_INVALID_ARG, "num_domains = %d must be in 1..%d", D, LDMOE_MAX_DOMAINS);
    if (H % (64 * D) || I % (64 * D))
        return fail(LDMOE_ERR_ALIGNMENT, "H = %d and I = %d must be multiples of 64 * num_domains = %d (the layer's "
                    "tiles: 64-element k boxes, 32-row weight blocks per domain slice)", H, I, 64 * D);
    if ((int64_t)E * 2 * I * H >= ((int64_t)1 << 40) || (int64_t)H * I >= INT32_MAX)
        return fail(LDMOE_ERR_UNSUPPORTED, "weights of E = %d, H = %d, I = %d are too large", E, H, I);
    if (T * k > INT32_MAX / 2 || T * (int64_t)k * E >= ((int64_t)1 << 31))
        return fail(LDMOE_ERR_UNSUPPORTED, "T * k = %lld (x E = %d) too large for one launch (T*k*E < 2^31)",
                    (long long)(T * k), E);
    if (phase_tiles_max(T * k, E, H, I) >= ((int64_t)1 << 31))   // the kernel numbers a phase's tiles in 32 bits
        return fail(LDMOE_ERR_UNSUPPORTED, "T * k = %lld, E = %d, H = %d, I = %d: too many tiles for one launch "
                    "((T*k/16 + E) * max(2I, H)/32 must be < 2^31)", (long long)(T * k), E, H, I);
    return LDMOE_OK;
}

// ---------------------------------------------------------------------------------------------
// per-(device, stream) layer workspaces

namespace {
struct LayerWs {
    int device;
    void *stream;
    unsigned char *base;
    int64_t cap_pairs, cap_T;   // sizes it holds
    int64_t cap_img;            // pairs the wgmma tile's stage image of h holds (0: none)
    int64_t cap_ximg;           // pairs its image of the routed x holds (0: none; gathered launches need none)
    int64_t cap_xdq;            // tokens of bf16 x it holds in the same place (x given in e4m3, a bf16 tile)
    int32_t cap_E, cap_H, cap_I;
    // parts
    uint32_t *ctl, *ready, *arrive;
    int32_t *list, *tokvalid;
    __nv_bfloat16 *h, *ximg;
    float *hsc, *xsc;           // the FP8-token tile's scales of the two images
    __nv_bfloat16 *slot;
};
// The wgmma tile's stage images (layer.cuh, img_off): img_blocks_max m-blocks (layer_sched.h) of
// kImgRows rows, stages of BK k (a half-filled last one zero-padded). A launch of `pairs` takes the
// tile only with fewer than pairs / kDecodePairs experts, which bounds the partial blocks too.
constexpr int kImgBK = layer::Cfg<kWgBM, kImgRows>::BK;
size_t img_elems(int64_t pairs, int E, int K) {
    return (size_t)img_blocks_cap(pairs, E, kDecodePairs) * kImgRows * (size_t)((K + kImgBK - 1) / kImgBK) * kImgBK;
}
// Their scales (FP8 tokens): a float per image row and 64 k.
size_t scl_elems(int64_t pairs, int E, int K) {
    return (size_t)img_blocks_cap(pairs, E, kDecodePairs) * kImgRows * (size_t)(K / 64);
}
LayerWs g_lws[LDMOE_MAX_WORKSPACES];
int g_nlws;
bool g_layer_attr[LDMOE_MAX_DEVICES][9];   // by tile index (moe_run: 0-2, 5 bf16, 3-4, 6-8 FP8)

size_t align256(size_t v) { return (v + 255) & ~(size_t)255; }

// Offsets of the parts for these capacities; returns the total size.
size_t layout_ws(LayerWs &w, unsigned char *base) {
    size_t off = 0;
    auto take = [&](size_t bytes) { unsigned char *q = base ? base + off : NULL; off += align256(bytes); return q; };
    w.ctl = (uint32_t *)take(kCtlWords * 4);
    w.ready = (uint32_t *)take((size_t)(w.cap_E + w.cap_pairs / 16 + 1) * 4);
    w.arrive = (uint32_t *)take((size_t)w.cap_T * (w.cap_H / 32) * 4);
    const size_t zero_bytes = off;   // everything up to here starts (and is left) at zero
    w.list = (int32_t *)take((size_t)w.cap_E * w.cap_pairs * 4);
    w.tokvalid = (int32_t *)take((size_t)w.cap_T * 4);
    const size_t h_plain = (size_t)w.cap_pairs * w.cap_I, h_img = img_elems(w.cap_img, w.cap_E, w.cap_I);
    w.h = (__nv_bfloat16 *)take((h_plain > h_img ? h_plain : h_img) * 2);   // one layout per launch
    // x's image and the dequantized x: a launch takes the FP8-token tile (the image) or a bf16 one
    const size_t x_img = img_elems(w.cap_ximg, w.cap_E, w.cap_H), x_dq = (size_t)w.cap_xdq * w.cap_H;
    w.ximg = (__nv_bfloat16 *)take((x_img > x_dq ? x_img : x_dq) * 2);
    w.hsc = (float *)take(scl_elems(w.cap_img, w.cap_E, w.cap_I) * 4);
    w.xsc = (float *)take(scl_elems(w.cap_ximg, w.cap_E, w.cap_H) * 4);
    w.slot = (__nv_bfloat16 *)take((size_t)w.cap_pairs * w.cap_H * 2);
    (void)zero_bytes;
    return off;
}
size_t ws_zero_bytes(const LayerWs &w) {
    return (size_t)((unsigned char *)w.list - (unsigned char *)w.ctl);
}
}  // namespace

// Caller holds g_lock. The workspace of (dev, stream) holding at least these sizes: grown (the
// old one freed after the stream drains) when too small; never inside a stream capture.
// img: the launch takes the wgmma tile (h's stage image is sized too); ximg: and reads GEMM1's
// token rows from x's image (layer_gather says no); xdq: x comes in e4m3 to a bf16 tile.
static int layer_ws_get(int dev, void *stream, int64_t T, int E, int H, int I, int k, bool img, bool ximg,
                        bool xdq, LayerWs **out) {
    LayerWs *w = NULL;
    for (int i = 0; i < g_nlws; ++i)
        if (g_lws[i].device == dev && g_lws[i].stream == stream) w = &g_lws[i];
    const int64_t pairs = T * k;
    const int64_t img_pairs = img ? pairs : 0, ximg_pairs = img && ximg ? pairs : 0, xdq_T = xdq ? T : 0;
    if (w && w->cap_pairs >= pairs && w->cap_T >= T && w->cap_E >= E && w->cap_H >= H && w->cap_I >= I &&
        w->cap_img >= img_pairs && w->cap_ximg >= ximg_pairs && w->cap_xdq >= xdq_T) {
        *out = w;
        return LDMOE_OK;
    }
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing((cudaStream_t)stream, &cs);
    if (e != cudaSuccess) return cuda_fail(e, "cudaStreamIsCapturing");
    if (cs != cudaStreamCaptureStatusNone)
        return fail(LDMOE_ERR_UNSUPPORTED, "the layer workspace of this stream must grow (T=%lld k=%d E=%d H=%d I=%d) "
                    "inside a stream capture: call ldmoe_moe once at this size, or ldmoe_moe_reserve, before capturing",
                    (long long)T, k, E, H, I);
    if (!w && g_nlws == LDMOE_MAX_WORKSPACES)
        return fail(LDMOE_ERR_UNSUPPORTED, "more than %d streams in use; call ldmoe_release()", LDMOE_MAX_WORKSPACES);
    LayerWs n = {};
    n.device = dev;
    n.stream = stream;
    n.cap_pairs = w && w->cap_pairs > pairs ? w->cap_pairs : (pairs > 0 ? pairs : 1);
    n.cap_T = w && w->cap_T > T ? w->cap_T : (T > 0 ? T : 1);
    n.cap_E = w && w->cap_E > E ? w->cap_E : E;
    n.cap_H = w && w->cap_H > H ? w->cap_H : H;
    n.cap_I = w && w->cap_I > I ? w->cap_I : I;
    n.cap_img = w && w->cap_img > img_pairs ? w->cap_img : img_pairs;
    n.cap_ximg = w && w->cap_ximg > ximg_pairs ? w->cap_ximg : ximg_pairs;
    n.cap_xdq = w && w->cap_xdq > xdq_T ? w->cap_xdq : xdq_T;
    const size_t bytes = layout_ws(n, NULL);
    uint32_t err_word = 0;
    if (w) {   // the old one may still be in use by this stream's queued launches
        if ((e = cudaStreamSynchronize((cudaStream_t)stream)) != cudaSuccess) return cuda_fail(e, "cudaStreamSynchronize");
        if ((e = cudaMemcpy(&err_word, w->ctl + kCtlErr, 4, cudaMemcpyDeviceToHost)) != cudaSuccess)
            return cuda_fail(e, "reading the layer's error flag");
    }
    unsigned char *base = NULL;
    if ((e = cudaMalloc((void **)&base, bytes)) != cudaSuccess) {
        (void)cudaGetLastError();
        return fail(LDMOE_ERR_NO_MEMORY, "layer workspace cudaMalloc(%zu bytes): %s", bytes, cudaGetErrorString(e));
    }
    layout_ws(n, base);
    n.base = base;
    if ((e = cudaMemsetAsync(n.ctl, 0, ws_zero_bytes(n), (cudaStream_t)stream)) != cudaSuccess ||
        (err_word && (e = cudaMemsetAsync(n.ctl + kCtlErr, 1, 1, (cudaStream_t)stream)) != cudaSuccess)) {
        cudaFree(base);
        return cuda_fail(e, "layer workspace cudaMemsetAsync");
    }
    if (w) {
        cudaFree(w->base);
        *w = n;
    } else {
        g_lws[g_nlws] = n;
        w = &g_lws[g_nlws++];
    }
    *out = w;
    return LDMOE_OK;
}

// ldmoe_release's part for the layer: free the current device's layer workspaces (the device
// is synchronized by the caller). Caller holds g_lock.
static void layer_release_device(int dev) {
    int kept = 0;
    for (int i = 0; i < g_nlws; ++i) {
        if (g_lws[i].device == dev) cudaFree(g_lws[i].base);
        else g_lws[kept++] = g_lws[i];
    }
    g_nlws = kept;
    if (dev >= 0 && dev < LDMOE_MAX_DEVICES)
        for (bool &a : g_layer_attr[dev]) a = false;
}

// ---------------------------------------------------------------------------------------------
// the API

struct LayerCfg { const void *fn; int smem; };
template <int BM, int BN, bool F8 = false, bool A8 = false> static LayerCfg layer_cfg() {
    constexpr int bytes = (int)sizeof(Smem<BM, BN, F8, A8>) + layer::Cfg<BM, BN, F8, A8>::ALIGN;   // slack: the body aligns its ring
    static_assert(bytes <= 232448, "the layer's shared memory fits an sm_90 block");
    return {(const void *)moe_layer_kernel<BM, BN, F8, A8>, bytes};
}

// The wgmma tile's packed weights ([D][E][R/D/16 groups][Kd/KB boxes][16 rows][128 bytes]: KB = 64
// bf16 k or 128 e4m3 k a box row; a group's boxes at 2 KiB steps) as a 4-D tensor (a row's 64
// 2-byte units, 16 rows, group, box) whose box (64, 16, BM/16, BK/KB) is a stage in its
// k-box-major order: the element order of a box, dimension 0 fastest, is the stage's. The boxes
// are stored swizzled, so they are copied as they are (no TMA swizzle); a box past Kd arrives as
// zeros. The copy moves bytes, so e4m3 rows travel as 2-byte units.
template <int BM, bool F8 = false>
static int layer_weight_map(encode_tiled_fn enc, CUtensorMap *m, const void *base, int64_t groups, int Kd,
                            const char *what) {
    using C = layer::Cfg<BM, kImgRows, F8>;
    cuuint64_t dims[4] = {64, 16, (cuuint64_t)groups, (cuuint64_t)(Kd / C::KBOX)};
    cuuint64_t strides[3] = {128, (cuuint64_t)(Kd / C::KBOX) * 2048, 2048};   // bytes, dimensions 1..3
    cuuint32_t box[4] = {64, 16, BM / 16, C::BK / C::KBOX};
    cuuint32_t estr[4] = {1, 1, 1, 1};
    CUresult r = enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, (void *)base, dims, strides, box, estr,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return fail(LDMOE_ERR_CUDA, "cuTensorMapEncodeTiled(%s: %lld 16-row groups x %d k) failed with CUresult %d",
                    what, (long long)groups, Kd, (int)r);
    return LDMOE_OK;
}

// The launch of ldmoe_moe and ldmoe_moe_fp8 (s13, s2: FP8 block or row scales, f8row: which; NULL for
// bf16; a8: FP8 tokens where a wgmma tile runs; xs: x is e4m3 with these 1 x 128 scales).
static int moe_run(const ldmoe_moe_params_t *p, bool f8, const float *s13, const float *s2, bool f8row, bool a8,
                   const float *xs) {
    const int D = p->layout == LDMOE_LAYOUT_PACKED ? p->num_domains : 1;
    int rc = moe_check_dims(p->T, p->E, p->H, p->I, p->k, p->layout, p->layout == LDMOE_LAYOUT_PACKED ? p->num_domains : 1);
    if (rc) return rc;
    if (p->mode < LDMOE_MODE_AUTO || p->mode > LDMOE_MODE_STATIC)
        return fail(LDMOE_ERR_INVALID_ARG, "mode %d unknown (0 auto, 1 aware, 2 unaware, 3 static)", p->mode);
    if (!(p->steal_waves == p->steal_waves)) return fail(LDMOE_ERR_INVALID_ARG, "steal_waves is NaN");
    if (p->T > 0 && (!p->x || !p->w13 || !p->w2 || !p->topk_ids || !p->topk_weights || !p->out))
        return fail(LDMOE_ERR_INVALID_ARG, "x, w13, w2, topk_ids, topk_weights and out must be non-NULL");
    if (!aligned16(p->x) || !aligned16(p->w13) || !aligned16(p->w2) || !aligned16(p->out))
        return fail(LDMOE_ERR_ALIGNMENT, "x, w13, w2 and out must be 16-byte aligned");
    if (((uintptr_t)p->topk_ids & 3u) || ((uintptr_t)p->topk_weights & 3u))
        return fail(LDMOE_ERR_ALIGNMENT, "topk_ids and topk_weights must be 4-byte aligned");
    if (p->T == 0) { g_msg[0] = 0; return LDMOE_OK; }

    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return cuda_fail(e, "cudaGetDevice");
    int major = 0;
    if ((e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev)) != cudaSuccess)
        return cuda_fail(e, "cudaDeviceGetAttribute(compute capability)");
    if (major < 9)
        return fail(LDMOE_ERR_UNSUPPORTED, "the layer needs compute capability 9.0 or newer (bulk copies, mbarrier "
                    "transactions); this device has %d.x", major);
    // Tokens per expert, on average, picks the tile (no host sync: the routing is on the device).
    const int ci = f8 ? layer_tile_fp8(p->T, p->k, p->E, p->H, p->I, D, major, a8) : layer_tile(p->T, p->k, p->E, p->H, p->I, D, major);
    const bool wg = ci == kTileWg || ci == kTileWg256 || ci == kTileWgF8 || ci == kTileWg256F8 || ci == kTileWgA8;
    const int wbm = ci == kTileWg256 || ci == kTileWg256F8 ? 256 : kWgBM;   // a wgmma tile's weight rows
    const LayerCfg c = ci == kTileDecode ? layer_cfg<32, 16>()
                       : ci == kTileMma  ? layer_cfg<64, 64>()
                       : ci == kTileWg   ? layer_cfg<kWgBM, kImgRows>()
                       : ci == kTileWg256 ? layer_cfg<256, kImgRows>()
                       : ci == kTileDecodeF8 ? layer_cfg<32, 16, true>()
                       : ci == kTileMmaF8 ? layer_cfg<64, 64, true>()
                       : ci == kTileWgF8 ? layer_cfg<kWgBM, kImgRows, true>()
                       : ci == kTileWgA8 ? layer_cfg<kWgBM, kImgRows, true, true>()
                                         : layer_cfg<256, kImgRows, true>();
    int sms = 0;
    LayerWs *w = NULL;
    pthread_mutex_lock(&g_lock);
    rc = device_sms(dev, &sms);
    if (!rc && dev < LDMOE_MAX_DEVICES && !g_layer_attr[dev][ci]) {
        if ((e = cudaFuncSetAttribute(c.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, c.smem)) != cudaSuccess)
            rc = cuda_fail(e, "cudaFuncSetAttribute(max dynamic shared memory) of the layer kernel");
        else
            g_layer_attr[dev][ci] = true;
    }
    const bool xdq = xs && ci != kTileWgA8;   // a bf16 tile reads x dequantized into the workspace
    if (!rc) rc = layer_ws_get(dev, p->stream, p->T, p->E, p->H, p->I, p->k, wg, ci == kTileWgA8 || !layer_gather(wbm, p->I),
                               xdq, &w);
    encode_tiled_fn enc = NULL;
    const bool maps = wg && p->layout == LDMOE_LAYOUT_PACKED;
    if (!rc && maps) rc = get_encoder(&enc);
    LParams kp = {};
    if (!rc) {
        kp.x = xdq ? w->ximg : (const __nv_bfloat16 *)p->x;
        kp.x8 = xs ? (const unsigned char *)p->x : NULL;
        kp.x8s = xs;
        kp.xdq = xdq ? w->ximg : NULL;
        kp.w13 = (const __nv_bfloat16 *)p->w13;
        kp.w2 = (const __nv_bfloat16 *)p->w2;
        kp.ids = p->topk_ids;
        kp.wts = p->topk_weights;
        kp.out = (__nv_bfloat16 *)p->out;
        kp.ctl = w->ctl; kp.ready = w->ready; kp.list = w->list; kp.tokvalid = w->tokvalid;
        kp.arrive = w->arrive; kp.h = w->h; kp.ximg = w->ximg; kp.slot = w->slot;
        kp.hsc = w->hsc; kp.xsc = w->xsc;
        kp.s13 = s13; kp.s2 = s2; kp.f8row = f8row ? 1 : 0;
    }
    pthread_mutex_unlock(&g_lock);
    if (rc) return rc;
    if (maps) {
        auto mk = ci == kTileWg256 ? layer_weight_map<256> : ci == kTileWgF8 || ci == kTileWgA8 ? layer_weight_map<kWgBM, true>
                  : ci == kTileWg256F8 ? layer_weight_map<256, true> : layer_weight_map<kWgBM>;
        if ((rc = mk(enc, &kp.tm13, p->w13, (int64_t)p->E * 2 * p->I / 16, p->H, "packed w13")) ||
            (rc = mk(enc, &kp.tm2, p->w2, (int64_t)p->E * p->H / 16, p->I, "packed w2")))
            return rc;
    }
    kp.T = (int32_t)p->T; kp.E = p->E; kp.H = p->H; kp.I = p->I; kp.k = p->k; kp.D = D;
    kp.packed = p->layout == LDMOE_LAYOUT_PACKED;
    kp.mode = p->mode;
    kp.cap = (int32_t)(p->T * p->k);
    kp.steal_waves = p->steal_waves > 0.f ? p->steal_waves : LDMOE_DEFAULT_STEAL_WAVES;
    // Cooperative: the routing's grid barrier needs every CTA resident (one per SM).
    void *args[] = {&kp};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(sms);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = c.smem;
    cfg.stream = (cudaStream_t)p->stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if ((e = cudaLaunchKernelExC(&cfg, c.fn, args)) != cudaSuccess) return cuda_fail(e, "launch of the MoE layer kernel");
    g_msg[0] = 0;
    return LDMOE_OK;
}

LDMOE_API int ldmoe_moe(const ldmoe_moe_params_t *p) {
    if (!p) return fail(LDMOE_ERR_INVALID_ARG, "params is NULL");
    return moe_run(p, false, NULL, NULL, false, false, NULL);
}

LDMOE_API int ldmoe_moe_fp8(const ldmoe_moe_fp8_params_t *p) {
    if (!p) return fail(LDMOE_ERR_INVALID_ARG, "params is NULL");
    const ldmoe_moe_params_t *b = &p->base;
    if (p->scaling != LDMOE_FP8_BLOCK && p->scaling != LDMOE_FP8_ROWWISE)
        return fail(LDMOE_ERR_INVALID_ARG, "scaling %d: the FP8 layer takes LDMOE_FP8_ROWWISE (1, a scale per weight "
                    "row) or LDMOE_FP8_BLOCK (2, 128 x 128 weight blocks)", p->scaling);
    if (b->layout != LDMOE_LAYOUT_PACKED)
        return fail(LDMOE_ERR_UNSUPPORTED, "the FP8 layer takes packed weights (ldmoe_pack_moe_weights_fp8)");
    if (b->H % 128 || b->I % 128)
        return fail(LDMOE_ERR_ALIGNMENT, "H = %d and I = %d must be multiples of 128 (a consumer warp's k range is one scale block)", b->H, b->I);
    if (b->T > 0 && (!p->w13_scale || !p->w2_scale)) return fail(LDMOE_ERR_INVALID_ARG, "w13_scale and w2_scale must be non-NULL");
    if (((uintptr_t)p->w13_scale & 3u) || ((uintptr_t)p->w2_scale & 3u))
        return fail(LDMOE_ERR_ALIGNMENT, "w13_scale and w2_scale must be 4-byte aligned");
    if (p->tokens != LDMOE_FP8_TOKENS_BF16 && p->tokens != LDMOE_FP8_TOKENS_E4M3 && p->tokens != LDMOE_FP8_TOKENS_E4M3_X)
        return fail(LDMOE_ERR_INVALID_ARG, "tokens %d: LDMOE_FP8_TOKENS_BF16 (0, weight-only FP8), LDMOE_FP8_TOKENS_E4M3 "
                    "(1, tokens quantized to e4m3 on the wgmma tiles) or LDMOE_FP8_TOKENS_E4M3_X (2, x given in e4m3 "
                    "with x_scale)", p->tokens);
    const float *xs = NULL;
    if (p->tokens == LDMOE_FP8_TOKENS_E4M3_X) {
        if (b->T > 0 && !p->x_scale) return fail(LDMOE_ERR_INVALID_ARG, "x_scale must be non-NULL with LDMOE_FP8_TOKENS_E4M3_X");
        if ((uintptr_t)p->x_scale & 3u) return fail(LDMOE_ERR_ALIGNMENT, "x_scale must be 4-byte aligned");
        xs = p->x_scale;
    }
    return moe_run(b, true, p->w13_scale, p->w2_scale, p->scaling == LDMOE_FP8_ROWWISE, p->tokens != LDMOE_FP8_TOKENS_BF16,
                   xs);
}

LDMOE_API int ldmoe_moe_reserve(int64_t T, int E, int H, int I, int k, void *stream) {
    int rc = moe_check_dims(T, E, H, I, k, LDMOE_LAYOUT_PLAIN, 1);
    if (rc) return rc;
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return cuda_fail(e, "cudaGetDevice");
    if (dev >= LDMOE_MAX_DEVICES) return fail(LDMOE_ERR_UNSUPPORTED, "device %d beyond %d", dev, LDMOE_MAX_DEVICES);
    int major = 0;
    if ((e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev)) != cudaSuccess)
        return cuda_fail(e, "cudaDeviceGetAttribute(compute capability)");
    LayerWs *w = NULL;
    pthread_mutex_lock(&g_lock);
    // Images for any call up to these sizes that may take the wgmma tile (fewer experts or a
    // smaller H than reserved can choose it where these sizes do not); x's image always (the
    // FP8-token tile reads it; the bf16 tiles unless both gather at this I), and room for T rows
    // of x dequantized in the same place (x given in e4m3; past the image only at decode sizes).
    rc = layer_ws_get(dev, stream, T, E, H, I, k, major == 9 && T * k > kDecodePairs, true, true, &w);
    pthread_mutex_unlock(&g_lock);
    if (!rc) g_msg[0] = 0;
    return rc;
}

LDMOE_API int ldmoe_moe_errors(void *stream, uint32_t *flags) {
    if (!flags) return fail(LDMOE_ERR_INVALID_ARG, "flags is NULL");
    *flags = 0;
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return cuda_fail(e, "cudaGetDevice");
    uint32_t *ctl = NULL;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < g_nlws; ++i)
        if (g_lws[i].device == dev && g_lws[i].stream == stream) ctl = g_lws[i].ctl;
    pthread_mutex_unlock(&g_lock);
    if (!ctl) { g_msg[0] = 0; return LDMOE_OK; }   // no layer call on this stream yet
    uint32_t v = 0;
    if ((e = cudaMemcpyAsync(&v, ctl + kCtlErr, 4, cudaMemcpyDeviceToHost, (cudaStream_t)stream)) != cudaSuccess ||
        (e = cudaStreamSynchronize((cudaStream_t)stream)) != cudaSuccess)
        return cuda_fail(e, "reading the layer's error flag");
    if (v && (e = cudaMemsetAsync(ctl + kCtlErr, 0, 4, (cudaStream_t)stream)) != cudaSuccess)
        return cuda_fail(e, "clearing the layer's error flag");
    *flags = v;
    g_msg[0] = 0;
    return LDMOE_OK;
}

LDMOE_API int ldmoe_moe_packed_bytes(int E, int H, int I, int D, size_t *w13_bytes, size_t *w2_bytes) {
    int rc = moe_check_dims(0, E, H, I, 1, LDMOE_LAYOUT_PACKED, D);
    if (rc) return rc;
    if (w13_bytes) *w13_bytes = (size_t)E * 2 * I * H * 2;
    if (w2_bytes) *w2_bytes = (size_t)E * H * I * 2;
    g_msg[0] = 0;
    return LDMOE_OK;
}

// eb: bytes per weight element (2 bf16, 1 e4m3: the bf16 packer over rows of half as many
// 2-byte units, so a 2 KiB box holds 16 rows x 128 e4m3 k).
static int pack_run(const void *w13, const void *w2, void *w13_packed, void *w2_packed, int E, int H, int I, int D,
                    void *stream, int eb) {
    int rc = moe_check_dims(0, E, H, I, 1, LDMOE_LAYOUT_PACKED, D);
    if (rc) return rc;
    if (eb == 1 && (H % 128 || I % 128))
        return fail(LDMOE_ERR_ALIGNMENT, "H = %d and I = %d must be multiples of 128 for FP8 weights", H, I);
    if (!w13 || !w2 || !w13_packed || !w2_packed)
        return fail(LDMOE_ERR_INVALID_ARG, "w13, w2, w13_packed and w2_packed must be non-NULL");
    if (!aligned16(w13) || !aligned16(w2) || !aligned16(w13_packed) || !aligned16(w2_packed))
        return fail(LDMOE_ERR_ALIGNMENT, "w13, w2, w13_packed and w2_packed must be 16-byte aligned");
    const size_t b13 = (size_t)E * 2 * I * H * eb, b2 = (size_t)E * H * I * eb;
    auto overlap = [](const void *a, size_t na, const void *b, size_t nb) {
        return (uintptr_t)a < (uintptr_t)b + nb && (uintptr_t)b < (uintptr_t)a + na;
    };
    if (overlap(w13, b13, w13_packed, b13) || overlap(w2, b2, w2_packed, b2) || overlap(w13_packed, b13, w2_packed, b2))
        return fail(LDMOE_ERR_INVALID_ARG, "source and packed buffers must not overlap");
    const int64_t c13 = (int64_t)(b13 / 16), c2 = (int64_t)(b2 / 16);
    pack_layer_kernel<<<(unsigned)(c13 / 256 < 65536 ? c13 / 256 + 1 : 65536), 256, 0, (cudaStream_t)stream>>>(
        (const uint4 *)w13, (uint4 *)w13_packed, E, 2 * I, H * eb / 2, D, 1, I, c13);
    pack_layer_kernel<<<(unsigned)(c2 / 256 < 65536 ? c2 / 256 + 1 : 65536), 256, 0, (cudaStream_t)stream>>>(
        (const uint4 *)w2, (uint4 *)w2_packed, E, H, I * eb / 2, D, 0, I, c2);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_fail(e, "launch of the layer packing kernel");
    g_msg[0] = 0;
    return LDMOE_OK;
}

LDMOE_API int ldmoe_pack_moe_weights(const void *w13, const void *w2, void *w13_packed, void *w2_packed, int E, int H,
                                     int I, int D, void *stream) {
    return pack_run(w13, w2, w13_packed, w2_packed, E, H, I, D, stream, 2);
}

LDMOE_API int ldmoe_pack_moe_weights_fp8(const void *w13, const void *w2, void *w13_packed, void *w2_packed, int E,
                                         int H, int I, int D, void *stream) {
    return pack_run(w13, w2, w13_packed, w2_packed, E, H, I, D, stream, 1);
}
