// impl/layer/layer.cuh — the whole MoE layer in one persistent launch (ldmoe_moe; host side impl/layer/api.cuh):
//
//   out[t] = Σ_k w[t,k] · ( silu(x[t] · gateᵀ) ⊙ (x[t] · upᵀ) ) · w2[e(t,k)]ᵀ
//
// One CTA per SM (the bound set's count), co-resident (cooperative launch). Phases, in one launch:
//   1. routing. Local (decode launches of at most Cfg::LOCAL pairs): every CTA reads all ids and
//      builds the same expert-grouped pair list in shared memory (counts by shared atomics, ranks
//      in pair order by one warp), no barrier. Global: every (token, k) pair with an id in [0, E)
//      takes a rank by a global integer atomic and is written at list[e * cap + rank], each
//      token's valid-id mask goes to tokvalid[t]; one grid barrier. Either way a token with
//      no valid id gets a zero output row here, and an invalid id sets the error word.
//   2. every CTA builds the same tile tables from the per-expert counts (shared memory).
//   3. GEMM1 tiles then GEMM2 tiles, claimed from per-domain queues (local first, stealing by the
//      grouped GEMM's rule). GEMM1 tile (e, m-block, n-block): BM weight rows = BM/2 gate rows and
//      the matching BM/2 up rows (interleaved by 8: rows 0-7 of each 16-row group are gate,
//      8-15 up, so one mma fragment holds both and SwiGLU happens in registers) x BN routed
//      tokens, gathered from x by the loader (the wgmma tile: from the image below). h =
//      bf16(silu(g)·u) goes to h[pos, I] (pos: the pair's row in the expert-grouped order; the
//      wgmma tile: its image), then the (expert, m-block)'s readiness counter is incremented
//      (on the wgmma tiles by each consumer warp for its own stores: no tile-end barrier).
//      GEMM2 tile (e, m-block, n-block of H): its weight stages are loaded as soon as it is
//      claimed; its h rows only once the (e, m-block)'s GEMM1 tiles are all done (per-expert
//      readiness, no grid barrier). Epilogue: bf16(acc · routing weight) -> slot[(t,k), H].
//   4. combine: a token's valid slots summed in fp32 in k order, so out is bit-identical
//      whatever CTA or SM computed what. mma.sync tiles: each slot write counts an arrival on
//      (token, n-block of H) and the CTA whose arrival completes the token sums it; the decode
//      tile hands each GEMM2 tile's arrivals and sums to warps 9-10 (a 4-record ring, records
//      taken in turn), so its consumers go on to the next tile instead of waiting out two global
//      round trips. The wgmma tile: every thread after a last grid barrier, one pass (those round
//      trips per tile cost it more than the pass).
//   5. the last CTA to leave zeroes the counters the next launch needs at zero (counts, readiness,
//      queues); the barrier and arrival counters reset themselves. No host reset, graph-safe.
//
// Warp specialization: warp 11 (the scheduler) makes the tile metadata (claims, list entries) a
// few entries ahead, so that one warp's instructions per tile and a claim's round trip stand
// beside the stream, not in it (one warp doing both was what paced the decode tile); warp 8 (the
// producer) fills a ring of stages: packed weights by bulk copies of whole 2 KiB boxes, the wgmma
// tile's by one tensor-map copy a stage (mbarrier full_a, with their bytes; plain weights by
// cp.async; one warp issues every stage, so its operations per stage count), token rows by one bulk copy per row (full_b, with
// their bytes; the wgmma tile: a copy per 64-k box of an image, or warps 9-10's gather, below):
// one warp issuing 16-byte cp.asyncs for every row was what limited the layer once an expert has
// more than a few tokens.
// Warps 0-7 compute. mma.sync tiles (decode; prefill off Hopper or H % 256 != 0): weights on the mma's M side
// (m16n8k16, bf16 -> fp32), tokens on N, so a handful of tokens per expert costs only the n8
// blocks they fill; WM = BM/16 warps along M, WK = 8/WM split each stage's k range, partial sums
// reduced through shared memory in fixed warp order at the tile's end (deterministic).
// The wgmma tile (prefill on Hopper, 128 or 256 weight rows x 128 tokens): each warpgroup takes 64 tokens
// on wgmma's M side against all the weight rows on N, both by descriptor, whole k per warpgroup
// (no reduction), one wgmma group in flight across stages. GEMM2's token rows (h) reach a stage by
// one bulk copy per 64-k box: GEMM1 writes h in the stages' image (img_off); per-row copies of 128
// rows a stage were its limit. GEMM1's come the same way from the routed x's image, written once
// after the routing, or, where an m-block feeds few n-blocks (layer_gather), are gathered from x
// by warps 9-10 (16-byte cp.asyncs, each lane's arrival on full_b when its copies land), which
// saves the image's write and read. Each consumer warp releases a stage on its empty barrier.
// Stages of BK = 512 k (decode; 1024 for FP8), 256 (mma.sync prefill), 128 (wgmma, FP8's too) or 64
// (bf16's 256-row form); the ring runs across tile and phase boundaries, so weights keep streaming.
// FP8 tokens (A8, the 128-row wgmma tile only): x's image and h are e4m3 with a scale per row and
// 64 k beside them (x's equal in pairs: one per 128 k); a stage carries its token scales (kA8Scl).
//
// Deadlock freedom: a CTA claims GEMM2 tiles only once the GEMM1 queues it may take from are dry,
// so its GEMM1 entries precede its GEMM2 entries in its ring; only its producer waits for
// readiness (the consumers wait on nothing but the ring and the combine warps' record slots,
// which wait on nothing else, so this CTA's own GEMM1 tiles finish meanwhile); GEMM1 tiles never
// wait. Every GEMM1 tile is claimed before any CTA's GEMM2 sweep (aware mode) can complete its
// count: the phase-1 sweeper is still in phase 1. The global routing's grid barrier needs
// co-residency (cooperative launch).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>
#include <type_traits>
#include "kernels/ldshim_topology.h"
#include "kernels/moe/ldmoe.h"
#include "kernels/moe/impl/ptx.cuh"
#include "kernels/moe/impl/wgmma.cuh"
#include "kernels/moe/impl/layer/layer_sched.h"

namespace ldmoe {
namespace layer {

constexpr int kThreads = 384;            // warps 0-7: consumers (two aligned warpgroups); warp 8: producer;
constexpr int kConsumers = 256;          // warps 9-10: the decode tile's combine warps; warp 11: scheduler
constexpr int kProd = 8;                 // the producer warp
constexpr int kComb = 9;                 // the first combine warp (Cfg::CWARP; idle in the other tiles)
constexpr int kSched = 11;               // the scheduler warp: claims and tile entries
constexpr int kAhead = 2;                // entries the scheduler keeps made beyond the producer's
constexpr int kCombW = 2;                // combine warps: record i goes to warp kComb + i % kCombW
constexpr int kGatherT = 64;             // the wgmma tile's gathering threads (warps 9-10, layer_gather)
constexpr int kEpi = 4;                  // GEMM2 epilogue records in flight to the combine warps
static_assert(kEpi % kCombW == 0, "each record slot belongs to one combine warp");
constexpr int kMeta = 16;                // tile metadata ring
constexpr int kMaxE = 256;               // LDMOE_MOE_MAX_EXPERTS
constexpr int kMaxD = LDMOE_MAX_DOMAINS;
constexpr int kA8Scl = 2 * kImgRows * 4;   // FP8 tokens: a stage's token scales (two 64-k halves x 128 rows, fp32)

// Control words of the workspace (uint32). The rest of the workspace is laid out by the host.
enum {
    kCtlBarArrive = 0, kCtlBarGen = 1, kCtlExit = 2, kCtlErr = 3,
    kCtlDone1 = 4, kCtlDone2 = 5,   // aware mode: CTAs whose queues ran dry, per phase (the sweep)
    kCtlQ1 = 8,               // GEMM1 queue counters [8]
    kCtlQ2 = 16,              // GEMM2 queue counters [8]
    kCtlCounts = 32,          // per-expert pair counts [256]
    kCtlWords = 32 + kMaxE
};

struct LParams {
    // The wgmma tile's packed w13 and w2 as 4-D tensors (api.cuh, layer_weight_map): a stage's
    // weights are one box, one operation of the producer instead of one copy per 2 KiB box.
    CUtensorMap tm13, tm2;
    const __nv_bfloat16 *x, *w13, *w2;
    const int32_t *ids;
    const float *wts;
    __nv_bfloat16 *out;
    uint32_t *ctl;       // kCtlWords
    uint32_t *ready;     // [E + cap / BN + 1] readiness per (expert, m-block)
    int32_t *list;       // [E][cap] pair ids per expert
    int32_t *tokvalid;   // [T] bit j: the token's id j is valid (k <= 16)
    uint32_t *arrive;    // [T][H / BM]
    __nv_bfloat16 *h;    // [cap][I]; the wgmma tile: the stage image of h (img_off)
    __nv_bfloat16 *ximg; // the wgmma tile: the stage image of the routed x (img_off)
    __nv_bfloat16 *slot; // [cap][H]: a pair's w·y, bf16 (the sum is fp32; half the bytes of fp32 slots)
    const float *s13, *s2;   // FP8: block scales [E][2I/128][H/128] and [E][H/128][I/128]; rowwise [E][2I], [E][H]
    // FP8 tokens (the A8 tile): ximg and h hold e4m3 images (img8_off), these their scales, one per
    // token row and 64 k (x's two of a 128-k block equal): [image m-block][K/64][kImgRows], so a
    // stage's two halves lie together.
    float *xsc, *hsc;
    // x given in e4m3 (LDMOE_FP8_TOKENS_E4M3_X): x8 [T][H] and its scales x8s [T][H/128]. The
    // FP8-token tile's image pass copies them; the other tiles read x (== xdq, in the workspace),
    // which the launch fills with x8 * x8s rounded to bf16 before its tiles start.
    const unsigned char *x8;
    const float *x8s;
    __nv_bfloat16 *xdq;
    int32_t T, E, H, I, k, D, packed, mode, cap, f8row;
    float steal_waves;
};

// ---- PTX ------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t s_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void cp16(uint32_t dst, const void *src, bool valid) {
    const int n = valid ? 16 : 0;   // 0: zero-fill, nothing read
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void ldsm4(uint32_t a, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a));
}
__device__ __forceinline__ void ldsm2(uint32_t a, uint32_t &r0, uint32_t &r1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(a));
}
__device__ __forceinline__ void mma16816(float *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint2 lds64(uint32_t a) {
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(a));
    return v;
}
// Four e4m3 values (bytes 0..3) -> bf16x2 of bytes 0, 1 (lo) and of bytes 2, 3 (hi); exact (e4m3
// fits half and bf16).
__device__ __forceinline__ void e4m3x4_bf16(uint32_t v, uint32_t &lo, uint32_t &hi) {
    const __half2_raw a = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(v & 0xffffu), __NV_E4M3);
    const __half2_raw b = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(v >> 16), __NV_E4M3);
    const float2 fa = __half22float2(__half2(a)), fb = __half22float2(__half2(b));
    const __nv_bfloat162 x = __floats2bfloat162_rn(fa.x, fa.y), y = __floats2bfloat162_rn(fb.x, fb.y);
    lo = *reinterpret_cast<const uint32_t *>(&x);
    hi = *reinterpret_cast<const uint32_t *>(&y);
}
// The same times s, rounded once to bf16 (the FP8 wgmma tile's dequantization).
__device__ __forceinline__ uint32_t e4m3x2_bf16_scaled(uint32_t v2, float s) {
    const __half2_raw a = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(v2 & 0xffffu), __NV_E4M3);
    const float2 f = __half22float2(__half2(a));
    const __nv_bfloat162 x = __floats2bfloat162_rn(f.x * s, f.y * s);
    return *reinterpret_cast<const uint32_t *>(&x);
}
// SwiGLU's silu(g) * u. The quotient by the approximate divide (a reciprocal and a multiply): the
// IEEE division is a call with a slow path, and GEMM1's epilogue does one per h value. g far below
// zero makes the divisor infinite (or past 2^126): the quotient is then 0, as silu is there.
__device__ __forceinline__ float silu_mul(float g, float u) { return __fdividef(g, 1.f + __expf(-g)) * u; }
// FP8 tokens: two floats times inv -> e4m3x2 (saturating: a block's amax maps to 448 exactly,
// rounding may not exceed it), eight bf16 -> float, eight floats -> e4m3x8.
__device__ __forceinline__ uint32_t e4m3x2(float a, float b, float inv) {
    return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(a * inv, b * inv), __NV_SATFINITE, __NV_E4M3);
}
__device__ __forceinline__ void bf16x8_float(uint4 v, float (&f)[8]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 t = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&w[i]));
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}
__device__ __forceinline__ uint2 e4m3x8(const float (&f)[8], float inv) {
    return make_uint2(e4m3x2(f[0], f[1], inv) | e4m3x2(f[2], f[3], inv) << 16, e4m3x2(f[4], f[5], inv) | e4m3x2(f[6], f[7], inv) << 16);
}
__device__ __forceinline__ void sts128(uint32_t a, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
    asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"r"(a), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
}
// One thread publishes what the whole CTA wrote before a bar.sync (release is cumulative over what
// the barrier ordered before it), and acquires what the other CTAs published.
__device__ __forceinline__ void red_release(uint32_t *p, uint32_t v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t atom_add_acq_rel(uint32_t *p, uint32_t v) {
    uint32_t old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;\n" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}
__device__ __forceinline__ uint32_t ld_acquire(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
// Hand-overs between the scheduler and the producer warp through shared-memory words.
__device__ __forceinline__ void st_release_cta(int32_t *p, int32_t v) {
    asm volatile("st.release.cta.shared::cta.b32 [%0], %1;\n" ::"r"(s_u32(p)), "r"(v) : "memory");
}
__device__ __forceinline__ int32_t ld_acquire_cta(const int32_t *p) {
    int32_t v;
    asm volatile("ld.acquire.cta.shared::cta.b32 %0, [%1];\n" : "=r"(v) : "r"(s_u32(p)) : "memory");
    return v;
}
// Byte offset of 16-byte chunk c of row r in a token (B) stage buffer: rows of BK k, each padded
// by 16 bytes, so a row lands by one bulk copy and ldmatrix's 8 rows fall in 8 distinct bank groups.
template <int BK> __device__ __forceinline__ uint32_t brow(int r, int c) {
    return (uint32_t)(r * (BK * 2 + 16) + (c << 4));
}
// The wgmma tile's token operands lie in global memory as the stages will hold them: for m-block
// mbg (expert-grouped, mbp order) and stage ks of a K-long operand, BN rows x BK k as wgmma reads
// them by descriptor (per 64-k box, BN rows of 128 bytes, 16-byte chunk c of row r at c ^ (r % 8)),
// so a stage's token rows arrive by one bulk copy per box. A stage that K fills only half (K is
// a multiple of 64) holds zeros in its second box. Byte offset of chunk c of row r in a stage, and
// the element offset of (row r, k) of m-block mbg in an image:
template <int BN> __device__ __forceinline__ uint32_t tsw(int r, int c) {
    return (uint32_t)((c >> 3) * (BN * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}
template <int BN, int BK> __device__ __forceinline__ int64_t img_off(int mbg, int K, int r, int k) {
    const int kk = k % BK;
    return (int64_t)(mbg * ((K + BK - 1) / BK) + k / BK) * (BN * BK) + tsw<BN>(r, kk >> 3) / 2 + (kk & 7);
}
// The e4m3 image (FP8 tokens): a stage is one box of 128 k, 128 bytes a row; byte offset of (r, k)
// (K a multiple of 128).
template <int BN> __device__ __forceinline__ int64_t img8_off(int mbg, int K, int r, int k) {
    const int kk = k % 128;
    return (int64_t)(mbg * (K / 128) + k / 128) * (BN * 128) + tsw<BN>(r, kk >> 4) + (kk & 15);
}
// The h rows other CTAs stored (generic proxy) and this one acquired are ordered before this
// thread's later bulk copies of them (async proxy).
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }
// Weight (A) stages hold the packed layout's 16x64 boxes (2 KiB, one per 16 rows and 64 k; chunk c
// of box row rr at 16 (c ^ (rr % 8)), the wgmma/TMA 128-byte swizzle). Byte offset of logical
// chunk c (over the stage's BK k) of row r: row-group-major (a 16-row group's boxes as they lie in
// memory, one bulk copy per group) for the mma.sync tiles; k-box-major for the wgmma tile, so that
// every 8-row core group of a k box lies 1024 bytes after the previous one (the descriptor's
// single stride).
template <int BM, int BK, bool KBOX> __device__ __forceinline__ uint32_t aswz(int r, int c) {
    const int box = KBOX ? (c >> 3) * (BM / 16) + (r >> 4) : (r >> 4) * (BK / 64) + (c >> 3);
    return (uint32_t)((box * 16 + (r & 15)) * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// ---- shared state ---------------------------------------------------------------------------
template <int BN>
struct Meta {
    int32_t tile;     // the tile's index in its slice; -1: end of work
    int32_t phase;    // 1 or 2
    int32_t e, mb, nb, rows, mbg, ready;
    // Made once per tile so that a stage costs the producer only its k offset (one warp issues
    // every stage; its instructions per stage bound the decode tile, not the bytes): packed
    // weights: the tile's first 16-row group's boxes at k 0 (wsrc) and the bytes from one group's
    // boxes to the next (wgs); GEMM2: the tile's first h row (hrow).
    // wgrp: the wgmma tile's first 16-row group over the whole packed tensor (tm13 / tm2's third coordinate).
    const unsigned char *wsrc;
    int32_t wgs, hrow, wgrp;
    int32_t pair[BN];
    int32_t tok[BN];   // pair / k: the x row a GEMM1 tile gathers
};

// F8: weight-only FP8 (e4m3 weights in the packed layout, a 2 KiB box = 16 rows x 128 k; 128 x 128
// block or per-row scales; bf16 tokens): the mma.sync tiles widen in registers, the wgmma tiles
// (128 or 256 weight rows) dequantize each stage into bf16 buffers in shared memory (F8W below).
template <int BM, int BN, bool F8 = false, bool A8 = false>
struct Cfg {
    // WG: the wgmma tile (sm_90a): two warpgroups of 64 tokens each x the BM weight rows, both
    // operands by descriptor. Otherwise mma.sync.
    static constexpr bool WG = BN >= 128;
    static constexpr int WM = WG ? 1 : BM / 16, WK = 8 / WM;
    // k per stage: 512 for the decode tile (the producer's fixed cost per stage is then spread
    // over 32 KiB of weights), 256 for the mma.sync prefill tile (its token rows are 4x larger),
    // 128 for the wgmma tile (three stages of 128 weight and 128 token rows fit; six of 64 k were
    // slower, doc/moe.md).
    // FP8 decode: 1024 (32 KiB of e4m3 weights a stage, as bf16's 512: one warp issues every stage,
    // and its instructions per stage, not the bytes, bound a 16 KiB stage; decode-producer.txt).
    // The bf16 wgmma tile of 256 weight rows: 64 (four stages); FP8's: 128 (two).
    static constexpr int BK = WG ? (BM == 256 && !F8 ? 64 : 128) : BN <= 16 ? (F8 ? 1024 : 512) : 256, CH = BK / 8;   // CH: 16-byte chunks of a row
    static constexpr int KSTEP = BK / 16 / WK;    // k16 steps per warp per stage
    static constexpr int NT = BN / 8;             // n8 blocks
    // A8: e4m3 token rows (one 128-byte box row of 128 k each) and their two 64-k halves' scales (kA8Scl).
    static constexpr int A_BYTES = BM * BK * (F8 ? 1 : 2), B_BYTES = A8 ? BN * BK + kA8Scl : WG ? BN * BK * 2 : BN * (BK * 2 + 16);
    static constexpr int STAGE = A_BYTES + B_BYTES;
    static constexpr int STAGES = BN <= 16 ? (F8 ? 3 : 4) : (WG && BM != 128) ? (F8 ? 2 : 4) : A8 ? 6 : 3;   // FP8 decode: 65 KiB stages; FP8 256-row: 64 KiB
    static constexpr int RED_FLOATS = WG ? 0 : (WK - 1) * WM * 32 * NT * 4;
    static constexpr int ALIGN = WG ? 1024 : 128;   // wgmma's swizzle atoms: 1024-byte aligned
    static_assert(!WG || ((BM == 64 || BM == 128 || BM == 256) && BN == kImgRows && STAGE % 1024 == 0), "the wgmma tile: 64, 128 or 256 x 128");
    // Decode launches of at most LOCAL pairs route in every CTA's shared memory (see the body).
    static constexpr int LOCAL = BN <= 16 ? 2048 : 0;
    // The decode tile hands each GEMM2 tile's arrivals and combine to kCombW warps: two dependent
    // global round trips (the arrival atomics, then the k slot loads) per tile of 32 x <= 16 that
    // the consumers would otherwise wait out before their next tile. The mma.sync prefill tile's
    // consumers combine their tiles themselves; the wgmma tiles combine in one pass at the end.
    static constexpr bool CWARP = BN <= 16;
    static constexpr int KBOX = F8 ? 128 : 64;   // k per packed box row (128 bytes)
    // FP8: each consumer warp's k range in a stage is whole 128-k scale blocks (decode 1024 / 4: two, prefill 256 / 2: one)
    static_assert(!F8 || WG || (BK / WK) % 128 == 0, "FP8 on the mma.sync tiles: whole scale blocks per warp and stage");
    // The FP8 wgmma tiles: a stage is one 128-k scale block of e4m3 weights (BM x 128 bytes) and bf16
    // token rows; the consumers dequantize its weights a 64-k half at a time into one of CVT bf16
    // buffers (the wgmma B operand's layout), so that a buffer is rewritten only after every
    // warpgroup's wgmmas that read it are done: with three (128 rows), one barrier per half
    // suffices, with two (256 rows: two stages and two buffers fill shared memory) two (the body says why).
    static constexpr bool F8W = F8 && WG && !A8;
    static_assert(!A8 || (F8 && WG && BM == 128 && BK == 128), "the FP8-token tile: e4m3 x e4m3 wgmma, 128 weight rows, a 128-k stage");
    static constexpr int CVT = F8W ? (BM == 256 ? 2 : 3) : 0, CVT_BYTES = BM * 64 * 2;
    static_assert(!F8W || ((BM == 128 || BM == 256) && BK == 128), "the FP8 wgmma tiles: 128 or 256 weight rows, a 128-k stage");
    static_assert(!CWARP || BN <= 32, "the combine warp takes a record's rows one per lane");
    static_assert(WG || (BM % 16 == 0 && 8 % WM == 0 && (BK / 16) % WK == 0 && CH % 8 == 0), "warp layout");
    static_assert(BN % 16 == 0, "token blocks come in pairs of n8 (ldmatrix x4)");
};

// A GEMM2 tile's epilogue handed to a combine warp: its tokens, their valid-pair masks, its n-block.
template <int BN>
struct EpiRec {
    int32_t nb, rows;   // rows < 0: no more tiles
    int32_t tok[BN];
    int32_t mask[BN];
};

template <int BM, int BN, bool F8 = false, bool A8 = false>
struct Smem {
    using C = Cfg<BM, BN, F8, A8>;
    alignas(128) unsigned char ring[C::STAGES][C::STAGE];
    alignas(C::CVT > 0 ? 1024 : 16) unsigned char cvt[C::CVT > 0 ? C::CVT : 1][C::CVT > 0 ? C::CVT_BYTES : 16];   // F8W: dequantized weight halves
    uint64_t full_a[C::STAGES];       // the stage's weights landed (32 producer-lane arrivals + bytes)
    uint64_t full_b[C::STAGES];       // its token rows landed (32 producer-lane arrivals; + kGatherT gathering threads')
    uint64_t empty[C::STAGES];        // the 8 consumer warps are done with it
    uint64_t epi_full[C::CWARP ? kEpi : 1];    // a record written (consumer thread 0, after the slot stores)
    uint64_t epi_empty[C::CWARP ? kEpi : 1];   // its combine warp has read it
    EpiRec<BN> erec[C::CWARP ? kEpi : 1];
    float red[C::RED_FLOATS > 0 ? C::RED_FLOATS : 1];
    int32_t cnt[kMaxE];
    int32_t mbp[kMaxE + 1];      // m-block prefix per expert
    int32_t seg[kMaxE + 1];      // row prefix per expert (pos of its first pair)
    Meta<BN> meta[kMeta];
    int32_t stage_entry[C::STAGES];   // meta sequence number a stage holds (-1: none)
    int32_t stage_k[C::STAGES];
    int32_t mwritten;                 // meta entries written (the scheduler's)
    int32_t pseq;                     // the entry the producer is on
    float epi_w[BN];
    int32_t epi_mask[BN];             // bit j: the token's pair j is valid
    int32_t comb[BN];                 // the token a slot write completed (-1: none)
    int32_t comb_mask[BN];
    int32_t domcnt[kMaxD];
    int32_t my_dom;
    int32_t mode;
    int32_t fill[C::LOCAL ? kMaxE : 1];       // local routing: pairs placed per expert
    int32_t lpair[C::LOCAL ? C::LOCAL : 1];   // local routing: the expert-grouped pair list
    int16_t leid[C::LOCAL ? C::LOCAL : 1];    // local routing: each pair's expert (-1: invalid id)
};

// ---- routing --------------------------------------------------------------------------------
__device__ __forceinline__ void grid_barrier(uint32_t *ctl) {
    __syncthreads();
    if (threadIdx.x == 0) {
        volatile uint32_t *gen = ctl + kCtlBarGen;
        const uint32_t g = *gen;
        __threadfence();
        if (atomicAdd(ctl + kCtlBarArrive, 1u) == gridDim.x - 1) {
            ctl[kCtlBarArrive] = 0;
            __threadfence();
            atomicAdd(ctl + kCtlBarGen, 1u);
        } else {
            while (*gen == g) __nanosleep(32);
        }
        __threadfence();
    }
    __syncthreads();
}

// Token t's valid slots (msk) at columns col .. col + 3 added to sum in pair order, KB slot loads
// at once: each load is unconditional (j clamped below k: inside the token's slots), so no
// predicate or branch stands between them and a thread waits on memory once per KB slots.
template <int KB>
__device__ __forceinline__ void slots4(const LParams &p, int32_t t, int32_t msk, int col, float4 &sum) {
    const int K = p.k, H = p.H;
    for (int k0 = 0; k0 < K; k0 += KB) {   // k <= 16
        uint2 v[KB];
        #pragma unroll
        for (int kk = 0; kk < KB; ++kk)
            v[kk] = __ldcg(reinterpret_cast<const uint2 *>(p.slot + ((int64_t)t * K + min(k0 + kk, K - 1)) * H + col));
        #pragma unroll
        for (int kk = 0; kk < KB; ++kk)
            if ((msk >> (k0 + kk)) & 1) {   // no mask bit at or past k
                const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&v[kk].x));
                const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&v[kk].y));
                sum.x += lo.x; sum.y += lo.y; sum.z += hi.x; sum.w += hi.y;
            }
    }
}

// out[t, col .. col + 3] = bf16 of the sum of token t's valid slots (msk) in pair order: the fixed
// sum order that makes out bit-identical whichever CTA completes the token. Batches the size of
// k (to 8), so that few loads are wasted on clamped j.
__device__ __forceinline__ void combine4(const LParams &p, int32_t t, int32_t msk, int col) {
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    if (p.k <= 2) slots4<2>(p, t, msk, col, sum);
    else if (p.k <= 4) slots4<4>(p, t, msk, col, sum);
    else slots4<8>(p, t, msk, col, sum);
    __nv_bfloat162 lo = __floats2bfloat162_rn(sum.x, sum.y), hi = __floats2bfloat162_rn(sum.z, sum.w);
    uint2 o;
    o.x = *reinterpret_cast<uint32_t *>(&lo);
    o.y = *reinterpret_cast<uint32_t *>(&hi);
    *reinterpret_cast<uint2 *>(p.out + (int64_t)t * p.H + col) = o;
}

// combine4's sum over 8 columns by 16-byte loads, for NI (token, columns) items at once: the
// wgmma tiles' final pass, which streams every slot once (half the load instructions of combine4's
// for the same bytes). The slot loads of a batch of 8 j, for all NI items, are issued before the
// first is summed: each is a select of a load, so no branch stands between them and a thread
// waits on memory once per batch (a branch per slot made it wait once per slot). Each item's valid
// slots are summed in j order as ever.
template <int NI>
__device__ __forceinline__ void combine8(const LParams &p, const int32_t (&t)[NI], const int32_t (&msk)[NI], const int (&col)[NI]) {
    const int K = p.k, H = p.H;
    constexpr int KB = 8;
    float s[NI][8];
    #pragma unroll
    for (int n = 0; n < NI; ++n)
        #pragma unroll
        for (int i = 0; i < 8; ++i) s[n][i] = 0.f;
    for (int k0 = 0; k0 < K; k0 += KB) {   // k <= 16: one or two batches
        uint4 v[KB][NI];
        #pragma unroll
        for (int kk = 0; kk < KB; ++kk)
            #pragma unroll
            for (int n = 0; n < NI; ++n)   // no mask bit at or past k: j < k wherever a load is made
                v[kk][n] = (msk[n] >> (k0 + kk)) & 1
                               ? __ldcg(reinterpret_cast<const uint4 *>(p.slot + ((int64_t)t[n] * K + k0 + kk) * H + col[n]))
                               : make_uint4(0, 0, 0, 0);
        #pragma unroll
        for (int kk = 0; kk < KB; ++kk)
            #pragma unroll
            for (int n = 0; n < NI; ++n)
                if ((msk[n] >> (k0 + kk)) & 1) {
                    const uint32_t w[4] = {v[kk][n].x, v[kk][n].y, v[kk][n].z, v[kk][n].w};
                    #pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&w[i]));
                        s[n][2 * i] += f.x;
                        s[n][2 * i + 1] += f.y;
                    }
                }
    }
    #pragma unroll
    for (int n = 0; n < NI; ++n) {
        if (!msk[n]) continue;
        uint32_t o[4];
        #pragma unroll
        for (int i = 0; i < 4; ++i) {
            __nv_bfloat162 b = __floats2bfloat162_rn(s[n][2 * i], s[n][2 * i + 1]);
            o[i] = *reinterpret_cast<uint32_t *>(&b);
        }
        *reinterpret_cast<uint4 *>(p.out + (int64_t)t[n] * H + col[n]) = make_uint4(o[0], o[1], o[2], o[3]);
    }
}

// ---- the kernel body ------------------------------------------------------------------------
template <int BM, int BN, bool F8 = false, bool A8 = false>
__device__ void moe_layer_body(const LParams &p, const ldshim_topology_t *topo) {
    using C = Cfg<BM, BN, F8, A8>;
    constexpr int NCVT = C::CVT > 0 ? C::CVT : 1;   // F8W's bf16 buffers (a divisor in every instantiation)
    extern __shared__ __align__(128) unsigned char smem_raw[];
    // The launch gives C::ALIGN bytes of slack (api.cuh) for this alignment of the ring.
    Smem<BM, BN, F8, A8> &sh = *reinterpret_cast<Smem<BM, BN, F8, A8> *>(
        smem_raw + ((C::ALIGN - (s_u32(smem_raw) & (C::ALIGN - 1))) & (C::ALIGN - 1)));
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int E = p.E, H = p.H, I = p.I, K = p.k, D = p.D, cap = p.cap;
    const int64_t npairs = (int64_t)p.T * K;
    uint32_t *ctl = p.ctl;
    // The wgmma tile's GEMM1 token rows gathered from x (warps 9-10) rather than from its image.
    const bool gather = C::WG && !A8 && layer_gather(BM, I);

    // -- 1. routing --
    // Local (decode, at most C::LOCAL pairs): every CTA reads all ids and builds the same
    // expert-grouped list in its shared memory (counts by shared atomics, then ranks in pair order
    // by one warp), so no grid barrier, no global counts and no list loads stand between the
    // launch and the first weight bytes. Global: ranks by global atomics, then one grid barrier.
    const bool local = C::LOCAL > 0 && npairs <= C::LOCAL;
    if (local) {
        for (int e = tid; e < E; e += kThreads) { sh.cnt[e] = 0; sh.fill[e] = 0; }
        __syncthreads();
        for (int i = tid; i < (int)npairs; i += kThreads) {
            const int32_t e = __ldg(p.ids + i);
            const bool ok = e >= 0 && e < E;
            sh.leid[i] = (int16_t)(ok ? e : -1);
            if (ok) atomicAdd(&sh.cnt[e], 1);
            else if (blockIdx.x == 0) atomicOr(ctl + kCtlErr, 1u);
        }
        __syncthreads();
        for (int t = blockIdx.x * kThreads + tid; t < p.T; t += gridDim.x * kThreads) {
            int nv = 0;
            for (int j = 0; j < K; ++j) nv += sh.leid[t * K + j] >= 0;
            if (nv == 0) {
                uint4 *o = reinterpret_cast<uint4 *>(p.out + (int64_t)t * H);
                for (int c = 0; c < H / 8; ++c) o[c] = make_uint4(0, 0, 0, 0);
            }
        }
    } else {
        const int64_t stride = (int64_t)gridDim.x * kThreads;
        for (int64_t i = (int64_t)blockIdx.x * kThreads + tid; i < npairs; i += stride) {
            const int32_t e = __ldg(p.ids + i);
            if (e >= 0 && e < E) {
                const uint32_t r = atomicAdd(ctl + kCtlCounts + e, 1u);
                p.list[(int64_t)e * cap + r] = (int32_t)i;
            } else {
                atomicOr(ctl + kCtlErr, 1u);
            }
        }
        for (int64_t t = (int64_t)blockIdx.x * kThreads + tid; t < p.T; t += stride) {
            int32_t mask = 0;
            for (int j = 0; j < K; ++j) {
                const int32_t e = __ldg(p.ids + t * K + j);
                mask |= (int32_t)(e >= 0 && e < E) << j;
            }
            p.tokvalid[t] = mask;
            if (mask == 0) {
                uint4 *o = reinterpret_cast<uint4 *>(p.out + t * H);
                for (int c = 0; c < H / 8; ++c) o[c] = make_uint4(0, 0, 0, 0);
            }
        }
    }
    // x given in e4m3: the bf16 tiles' token rows, x8 * x8s rounded once to bf16 (as torch's
    // (x8.float() * s).bfloat16()), before the routing's grid barrier; a local launch has none, so
    // it meets one here. The stores are read by the producers' bulk copies (async proxy).
    if (!A8 && p.x8 != nullptr) {
        const int cpr = H / 16;   // 16-byte chunks of e4m3 a row
        const int64_t n = (int64_t)p.T * cpr;
        for (int64_t i = (int64_t)blockIdx.x * kThreads + tid; i < n; i += (int64_t)gridDim.x * kThreads) {
            const int64_t t = i / cpr;
            const int c = (int)(i - t * cpr);
            const uint4 v = __ldg(reinterpret_cast<const uint4 *>(p.x8 + t * H) + c);
            const float s = __ldg(p.x8s + t * (H / 128) + c / 8);
            uint4 *o = reinterpret_cast<uint4 *>(p.xdq + t * H) + 2 * c;
            o[0] = make_uint4(e4m3x2_bf16_scaled(v.x, s), e4m3x2_bf16_scaled(v.x >> 16, s), e4m3x2_bf16_scaled(v.y, s),
                              e4m3x2_bf16_scaled(v.y >> 16, s));
            o[1] = make_uint4(e4m3x2_bf16_scaled(v.z, s), e4m3x2_bf16_scaled(v.z >> 16, s), e4m3x2_bf16_scaled(v.w, s),
                              e4m3x2_bf16_scaled(v.w >> 16, s));
        }
        fence_proxy_async_global();
        if (local) grid_barrier(ctl);
    }
    // This SM's domain and the SMs per domain the scheduler may count on (bound set).
    if (tid < kMaxD) sh.domcnt[tid] = 0;
    __syncthreads();
    {
        const bool published = topo->magic == LDSHIM_TOPOLOGY_MAGIC;
        const uint32_t nsm = published ? min(topo->num_sms, (uint32_t)LDSHIM_MAX_SMS) : 0u;
        for (uint32_t s = tid; s < nsm; s += kThreads)
            if (ldshim_sm_is_bound(topo, s)) atomicAdd(&sh.domcnt[topo->sm_domain[s] % D], 1);
        if (tid == 0) {
            sh.my_dom = (int32_t)(ldshim_sm_domain(topo, (uint32_t)D) % (uint32_t)D);
            // AUTO: aware unless the published map says the placement is not; one slice, one queue.
            int md = p.mode;
            if (md == LDMOE_MODE_AUTO) md = published && !(topo->flags & LDSHIM_TOPO_AWARE) ? LDMOE_MODE_UNAWARE : LDMOE_MODE_AWARE;
            if (D == 1 && md == LDMOE_MODE_AWARE) md = LDMOE_MODE_UNAWARE;
            sh.mode = md;
            if (!published)   // even map over the grid's SMs
                for (int d = 0; d < D; ++d) sh.domcnt[d] = (gridDim.x + D - 1 - d) / D;
        }
    }
    if (!local) {
        grid_barrier(ctl);
        // -- 2. tables --
        for (int e = tid; e < E; e += kThreads) sh.cnt[e] = (int32_t)__ldcg(ctl + kCtlCounts + e);
    }
    __syncthreads();
    if (warp == 0) {   // exclusive prefixes of m-blocks and rows, 32 experts per pass
        int32_t mcarry = 0, rcarry = 0;
        for (int base = 0; base < E; base += 32) {
            const int e = base + lane;
            const int32_t c = e < E ? sh.cnt[e] : 0;
            int32_t m = (c + BN - 1) / BN, r = c;
            #pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int32_t mm = __shfl_up_sync(0xffffffffu, m, o), rr = __shfl_up_sync(0xffffffffu, r, o);
                if (lane >= o) { m += mm; r += rr; }
            }
            if (e < E) { sh.mbp[e + 1] = mcarry + m; sh.seg[e + 1] = rcarry + r; }
            mcarry += __shfl_sync(0xffffffffu, m, 31);
            rcarry += __shfl_sync(0xffffffffu, r, 31);
        }
        if (lane == 0) { sh.mbp[0] = 0; sh.seg[0] = 0; }
        if (local) {   // ranks in pair order: the same list in every CTA
            __syncwarp();
            for (int base = 0; base < (int)npairs; base += 32) {
                const int i = base + lane;
                const int e = i < (int)npairs ? sh.leid[i] : -1;
                const uint32_t same = __match_any_sync(0xffffffffu, e);
                const int before = e >= 0 ? sh.fill[e] : 0;
                __syncwarp();
                if (e >= 0) {
                    sh.lpair[sh.seg[e] + before + __popc(same & ((1u << lane) - 1u))] = i;
                    if (lane == __ffs(same) - 1) sh.fill[e] = before + __popc(same);
                }
                __syncwarp();
            }
        }
    }
    if (C::WG && (!gather || I % C::BK != 0)) {
        // The routed x, copied into its stage image (img_off) by a warp per expert-grouped row,
        // then a second grid barrier: every GEMM1 stage then takes its token rows by one bulk copy
        // instead of one per row (the copy's cost, T*k rows of H, is small beside GEMM1 at the
        // token counts that take this tile). Gathered (layer_gather), only h's zero box, where I
        // leaves the last stage half full.
        __syncthreads();
        const int nrows = sh.seg[E];
        // A warp's rows are row0, row0 + ws, ...; lane l finds the l-th of each 32 (its expert by
        // bisection, its token from the list) so that the list loads of 32 rows overlap, and each
        // row's x chunks are loaded kU at a time before any is used: a row then waits on memory
        // once per 4 KiB of bf16 x (once a row at H = 2048), not once per 512 bytes.
        constexpr int kU = 8;
        const int ws = gridDim.x * (kThreads / 32);
        for (int row0 = blockIdx.x * (kThreads / 32) + warp; row0 < nrows; row0 += 32 * ws) {
            int l_tok = 0, l_mbg = 0, l_r = 0;
            if (const int row = row0 + lane * ws; row < nrows) {
                int lo = 0, hi = E - 1;   // the row's expert: the last e with seg[e] <= row
                while (lo < hi) {
                    const int mid = (lo + hi + 1) >> 1;
                    if (sh.seg[mid] <= row) lo = mid; else hi = mid - 1;
                }
                const int re = row - sh.seg[lo];
                l_tok = __ldcg(p.list + (int64_t)lo * cap + re) / K;
                l_mbg = sh.mbp[lo] + re / BN;
                l_r = re % BN;
            }
            const int nr = min(32, (nrows - row0 + ws - 1) / ws);
            for (int i = 0; i < nr; ++i) {
                const int tok = __shfl_sync(0xffffffffu, l_tok, i), mbg = __shfl_sync(0xffffffffu, l_mbg, i),
                          r = __shfl_sync(0xffffffffu, l_r, i);
                const uint4 *src = reinterpret_cast<const uint4 *>(p.x + (int64_t)tok * H);
                constexpr int KC = C::BK / 8;   // chunks per stage
                if (A8 && p.x8 != nullptr) {
                    // x given in e4m3: its rows and 1 x 128 scales as they are (16 k a lane's chunk),
                    // each scale stored for both 64-k halves.
                    unsigned char *xi = reinterpret_cast<unsigned char *>(p.ximg);
                    const uint4 *src8 = reinterpret_cast<const uint4 *>(p.x8 + (int64_t)tok * H);
                    for (int c0 = 0; c0 < H / 16; c0 += 32 * kU) {
                        uint4 v[kU];
                        #pragma unroll
                        for (int u = 0; u < kU; ++u) {
                            const int c = c0 + 32 * u + lane;
                            v[u] = c < H / 16 ? __ldg(src8 + c) : make_uint4(0, 0, 0, 0);
                        }
                        #pragma unroll
                        for (int u = 0; u < kU; ++u)
                            if (const int c = c0 + 32 * u + lane; c < H / 16) {
                                *reinterpret_cast<uint4 *>(xi + img8_off<BN>(mbg, H, r, c * 16)) = v[u];
                                if ((c & 3) == 0)
                                    p.xsc[((int64_t)mbg * (H / 64) + c / 4) * BN + r] = __ldg(p.x8s + (int64_t)tok * (H / 128) + c / 8);
                            }
                    }
                } else if constexpr (A8) {
                    // e4m3 with a scale per 128 k (16 lanes' chunks; H % 128 == 0, so a pass's lanes past
                    // H are whole groups of 16): amax / 448, the FP8 range, DeepSeek's 1 x 128 scheme. The
                    // scale is stored for both 64-k halves (the images' scale layout is h's, per 64 k).
                    unsigned char *xi = reinterpret_cast<unsigned char *>(p.ximg);
                    for (int c0 = 0; c0 < H / 8; c0 += 32 * kU) {
                        uint4 v[kU];
                        #pragma unroll
                        for (int u = 0; u < kU; ++u) {
                            const int c = c0 + 32 * u + lane;
                            v[u] = c < H / 8 ? __ldg(src + c) : make_uint4(0, 0, 0, 0);
                        }
                        #pragma unroll
                        for (int u = 0; u < kU; ++u) {
                            const int c = c0 + 32 * u + lane;
                            float f[8];
                            bf16x8_float(v[u], f);
                            float amax = 0.f;
                            #pragma unroll
                            for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(f[j]));
                            #pragma unroll
                            for (int o = 1; o < 16; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
                            if (c < H / 8) {
                                const float inv = amax > 0.f ? 448.f / amax : 0.f;
                                *reinterpret_cast<uint2 *>(xi + img8_off<BN>(mbg, H, r, c * 8)) = e4m3x8(f, inv);
                                if ((c & 7) == 0) p.xsc[((int64_t)mbg * (H / 64) + c / 8) * BN + r] = amax / 448.f;
                            }
                        }
                    }
                } else if (!gather) {
                    const int nc = (H + C::BK - 1) / C::BK * KC;   // past H: the zero box
                    for (int c0 = lane; c0 < nc; c0 += 32 * kU) {
                        uint4 v[kU];
                        #pragma unroll
                        for (int u = 0; u < kU; ++u) {
                            const int c = c0 + 32 * u;
                            v[u] = c < H / 8 ? __ldg(src + c) : make_uint4(0, 0, 0, 0);
                        }
                        #pragma unroll
                        for (int u = 0; u < kU; ++u)
                            if (const int c = c0 + 32 * u; c < nc) *reinterpret_cast<uint4 *>(p.ximg + img_off<BN, C::BK>(mbg, H, r, c * 8)) = v[u];
                    }
                }
                for (int c = I / 8 + lane; c < (I + C::BK - 1) / C::BK * KC; c += 32)   // h's zero box
                    *reinterpret_cast<uint4 *>(p.h + img_off<BN, C::BK>(mbg, I, r, c * 8)) = make_uint4(0, 0, 0, 0);
            }
        }
        fence_proxy_async_global();   // these generic stores before the bulk copies that read them
        grid_barrier(ctl);
    }
    if (tid < C::STAGES) sh.stage_entry[tid] = -1;
    if (tid == 0) {
        sh.mwritten = 0;
        sh.pseq = 0;
        for (int s = 0; s < C::STAGES; ++s) {
            mbar_init(s_u32(&sh.full_a[s]), 32);
            mbar_init(s_u32(&sh.full_b[s]), gather ? 32 + kGatherT : 32);
            mbar_init(s_u32(&sh.empty[s]), kConsumers / 32);
        }
        if constexpr (C::CWARP)
            for (int i = 0; i < kEpi; ++i) {
                mbar_init(s_u32(&sh.epi_full[i]), 1);
                mbar_init(s_u32(&sh.epi_empty[i]), 1);
            }
        fence_mbar_init();
    }
    __syncthreads();

    const int32_t total_mb = sh.mbp[E];
    const int NB1 = 2 * I / BM, NB2 = H / BM;           // n-blocks per expert (all slices)
    const int NBs1 = NB1 / D, NBs2 = NB2 / D;           // per slice
    // An (expert, m-block)'s readiness count when its h is whole: a GEMM1 tile adds one per consumer
    // warp on the wgmma tiles (each warp releases its own stores: no barrier between the warpgroups
    // at a tile's end), one per tile elsewhere (after the consumers' barrier).
    const uint32_t ready_full = (uint32_t)NB1 * (C::WG ? kConsumers / 32 : 1);
    const int64_t per1 = (int64_t)total_mb * NBs1, per2 = (int64_t)total_mb * NBs2;   // tiles per slice
    // what the entry maker would otherwise work out per tile (one warp makes every entry)
    const bool steal1 = steal_allowed(per1 * D, p.steal_waves, gridDim.x), steal2 = steal_allowed(per2 * D, p.steal_waves, gridDim.x);
    const uint32_t kmag = 0xffffffffu / (uint32_t)K;   // pair / K = token: __umulhi(pair, kmag), + 1 at most
    const int rg1 = 2 * I / D / 16, rg2 = H / D / 16;   // 16-row groups per slice
    const int kb1 = H / C::KBOX, kb2 = I / C::KBOX;     // boxes per group row

    // -- scheduler (warp kSched; lane 0 claims) --
    // Queues: aware: one per slice, own first, others when stealing is allowed (the phase holds
    // steal_waves waves of tiles, or the slice's domain has no SM); unaware: one queue over all
    // slices (counter of slice 0); static: tile blockIdx.x + i * grid.
    // The tile metadata is made in steps (sched_one) so that no global latency stalls the warp:
    // lane 0 always holds the claim for the next entry in flight (its value is read a step later),
    // the list loads of a decoded entry land in registers and are written to the ring a step after
    // that.
    const int mode = sh.mode;
    const int my_dom = sh.my_dom;
    int s_phase = total_mb > 0 ? 1 : 0;   // phase of the claim in flight; 0: done
    int s_q = 0;                          // queue position (aware: offset from own domain)
    bool s_sweep = false;                 // aware: this CTA sweeps the phase's queues
    uint32_t s_static = 0;
    // A claim is issued (the counter's atomic) and resolved (its value read) apart, an entry later:
    // its round trip is longer than a decode stage, and the scheduler waiting on it would fall
    // behind the producer.
    uint32_t c_raw = 0;   // lane 0: the claim in flight: the counter's value (static: the tile)
    int c_q = -1;         // its queue; -1: none issued (this CTA's queues of the phase are dry)
    bool c_first = true;  // unaware: the phase's first claim (unaware_claim)
    auto claim_issue = [&](int phase) {   // lane 0
        uint32_t *qc = ctl + (phase == 1 ? kCtlQ1 : kCtlQ2);
        c_q = -1;
        if (mode == LDMOE_MODE_STATIC) {
            c_raw = blockIdx.x + s_static++ * gridDim.x;
            c_q = 0;
        } else if (mode == LDMOE_MODE_UNAWARE) {
            // Every CTA makes this first claim in both phases (a cooperative launch; total_mb is the
            // same in every CTA): unaware mode has no sweep, so a CTA leaving early would lose tile blockIdx.
            c_raw = unaware_claim(c_first, blockIdx.x, gridDim.x, c_first ? 0u : atomicAdd(qc, 1u));
            c_first = false;
            c_q = 0;
        } else {
            const bool steal = phase == 1 ? steal1 : steal2;
            for (; s_q < D; ++s_q) {
                const int q = my_dom + s_q - (my_dom + s_q >= D ? D : 0);
                if (s_sweep || may_take(s_q, steal, sh.domcnt[q])) {
                    c_raw = atomicAdd(qc + q, 1u);
                    c_q = q;
                    return;
                }
            }
        }
    };
    // lane 0: the claimed tile as slice << 32 | index in the slice; -1: this phase has no more for me
    auto claim_resolve = [&](int phase) -> int64_t {
        const uint32_t per = (uint32_t)(phase == 1 ? per1 : per2);
        for (;;) {
            if (c_q >= 0) {
                if (mode != LDMOE_MODE_AWARE) {   // one queue over the slices
                    if (c_raw >= per * D) return -1;
                    const uint32_t d = D == 1 ? 0u : c_raw / per;
                    return (int64_t)d << 32 | (c_raw - d * per);
                }
                if (c_raw < per) return (int64_t)c_q << 32 | c_raw;
                ++s_q;                 // that queue is dry: the next one, waited for here (rare)
                claim_issue(phase);
                continue;
            }
            // The sweep (sweep_after in layer_sched.h): the last CTA whose queues ran dry in this
            // phase takes what is left in every queue. Left means a slice the map counts SMs for
            // but no CTA of this grid runs on (a map that does not describe the grid); unswept,
            // its tiles would never be claimed and GEMM2 would wait for them forever.
            if (s_sweep || !sweep_after(atomicAdd(ctl + (phase == 1 ? kCtlDone1 : kCtlDone2), 1u), gridDim.x)) return -1;
            s_sweep = true;
            s_q = 0;
            claim_issue(phase);
        }
    };
    // The terminal entry is written. A launch with no valid id (no m-blocks, s_phase 0) writes it
    // on the first step: no claim is resolved, so the entry maker takes the end-of-work branch.
    bool ended = false;
    int bstate = 0;             // 1: an entry decoded, its list loads in registers
    int have = 0;               // entries written (the scheduler warp's copy of sh.mwritten)
    int r_t = 0, r_ph = 0, r_e = 0, r_mb = 0, r_nb = 0, r_rows = 0, r_mbg = 0, r_wgs = 0, r_wgrp = 0;
    const unsigned char *r_wsrc = nullptr;
    int32_t r_pair[(BN + 31) / 32];
    uint32_t r_rd = 0;
    if (warp == kSched && lane == 0 && s_phase != 0) claim_issue(1);
    // One step of the scheduler warp's entry maker; returns after at most one global round trip it waits on.
    auto sched_one = [&]() {
        if (bstate == 1) {
            Meta<BN> &m = sh.meta[have % kMeta];
            #pragma unroll
            for (int i = 0; i < (BN + 31) / 32; ++i)
                if (lane + 32 * i < BN) {
                    const uint32_t pr = (uint32_t)r_pair[i];
                    uint32_t tk = __umulhi(pr, kmag);
                    tk += (tk + 1) * (uint32_t)K <= pr;
                    m.pair[lane + 32 * i] = r_pair[i];
                    m.tok[lane + 32 * i] = (int32_t)tk;
                }
            if (lane == 0) {
                m.tile = r_t; m.phase = r_ph; m.e = r_e; m.mb = r_mb; m.nb = r_nb;
                m.rows = r_rows; m.mbg = r_mbg; m.ready = (int32_t)r_rd;
                m.wsrc = r_wsrc; m.wgs = r_wgs; m.wgrp = r_wgrp; m.hrow = sh.seg[r_e] + r_mb * BN;
            }
            bstate = 0;
            ++have;
            __syncwarp();
            if (lane == 0) st_release_cta(&sh.mwritten, have);
            return;
        }
        if (ended) return;
        int64_t t = -1;
        if (lane == 0 && s_phase != 0) t = claim_resolve(s_phase);
        t = __shfl_sync(0xffffffffu, t, 0);
        if (t < 0) {
            if (s_phase == 1) {   // GEMM1 queues empty for me: on to GEMM2
                s_phase = 2; s_q = 0; s_static = 0; s_sweep = false; c_first = true;
                if (lane == 0) claim_issue(2);
                return;
            }
            if (lane == 0) sh.meta[have % kMeta].tile = -1;
            ended = true;
            ++have;
            __syncwarp();
            if (lane == 0) st_release_cta(&sh.mwritten, have);
            return;
        }
        const int ph = s_phase, NBs = ph == 1 ? NBs1 : NBs2;
        const int td = (int)(t >> 32);
        const uint32_t idx = (uint32_t)t;
        // the tile's expert: the last e with mbp[e] * NBs <= idx, counted across the warp (layer_sched.h)
        const int ce = expert_count<uint32_t>(sh.mbp, E, NBs, idx, lane, 32);
        const TilePos tp = tile_in_expert<uint32_t>(sh.mbp, __reduce_add_sync(0xffffffffu, ce), NBs, td, idx);
        const int e = tp.e, mb = tp.mb;
        r_t = (int)idx; r_ph = ph; r_e = e; r_mb = mb; r_nb = tp.nb;
        if (lane == 0) {   // packed weights: slice d's group of expert e for n-block nbl, k 0
            const int kb = ph == 1 ? kb1 : kb2;   // boxes per group row
            const int64_t grp0 = ((int64_t)td * E + e) * (ph == 1 ? rg1 : rg2) + tp.nbl * (BM / 16);
            r_wsrc = reinterpret_cast<const unsigned char *>(ph == 1 ? p.w13 : p.w2) + grp0 * kb * 2048;
            r_wgs = kb * 2048;
            r_wgrp = (int)grp0;   // < E * max(2I, H) / 16: the host's tensor-map dims bound it
        }
        r_rows = min(BN, sh.cnt[e] - mb * BN);
        r_mbg = sh.mbp[e] + mb;
        #pragma unroll
        for (int i = 0; i < (BN + 31) / 32; ++i) {
            const int j = lane + 32 * i;
            r_pair[i] = j >= r_rows ? 0 : local ? sh.lpair[sh.seg[e] + mb * BN + j]
                                                : __ldcg(p.list + (int64_t)e * cap + mb * BN + j);
        }
        r_rd = ph == 2 && lane == 0 ? ld_acquire(p.ready + r_mbg) >= ready_full : 0u;
        bstate = 1;
        if (lane == 0) claim_issue(ph);   // the next entry's claim, in flight
    };
    constexpr int BK = C::BK;
    auto ksteps = [&](const Meta<BN> &m) { return ((m.phase == 1 ? H : I) + BK - 1) / BK; };

    if (warp == kProd) {
        // ---- producer: the scheduler's entries, then each stage's weights and token rows ----
        // Weights: packed, lane 0 bulk-copies the stage's boxes (bytes on full_a) and the other
        // lanes just arrive; plain, every lane cp.asyncs its chunks and arrives when they land.
        // Token rows: the lanes bulk-copy them (a row each, or lane 0 a stage image's boxes; bytes
        // on full_b) and the other lanes just arrive. A GEMM2 stage's h rows wait for the (expert,
        // m-block)'s GEMM1 tiles: its weights go out at once, its rows once ready (deferred, in
        // order), so the weights keep streaming; the consumers never wait on anything but these
        // barriers, so this CTA's own GEMM1 tiles finish while the producer waits.
        // Weights evict-first where experts have at most two m-blocks on average: a weight block's
        // m-blocks are consecutive claims that run at once, so its second read still finds it,
        // and the token images that every n-block reads stay in L2. Evict-normal otherwise.
        const uint64_t pol = BN <= 16 || total_mb <= 2 * E ? policy_evict_first() : policy_evict_normal();
        if (C::WG && p.packed && lane == 0) { prefetch_tensormap(&p.tm13); prefetch_tensormap(&p.tm2); }
        int lseq = 0, lk = 0;
        int pend_lo = 0, pend_hi = 0;   // steps whose token rows are deferred: [pend_lo, pend_hi)
        auto load_b = [&](int step) {   // token rows of the stage at ring step `step`
            const int slot = step % C::STAGES;
            const Meta<BN> &m = sh.meta[sh.stage_entry[slot] % kMeta];
            // the entry's fields read at once: each asm below clobbers memory, so a field read after
            // one is read again (and this warp's instructions per stage are what the decode tile waits on)
            const int ph = m.phase, rows = m.rows, mbg = m.mbg, hrow = m.hrow;
            const int Kd = ph == 1 ? H : I, k0 = sh.stage_k[slot] * BK;
            const uint32_t bytes = (uint32_t)min(BK, Kd - k0) * 2;
            const uint32_t b_s = s_u32(sh.ring[slot]) + C::A_BYTES, bar = s_u32(&sh.full_b[slot]);
            const bool own = !(gather && ph == 1);   // gathered: warps 9-10 fill the rows, this warp only arrives
            fence_proxy_async();   // this slot's last generic reads (ordered by its empty barrier) first
            if (ph == 2 && k0 == 0) fence_proxy_async_global();   // once per tile, after its readiness
            if constexpr (A8) {   // one e4m3 box and the stage's 1 KiB of token scales
                if (lane == 0) {
                    const uint32_t rb = (uint32_t)rows * 128;
                    const unsigned char *src = reinterpret_cast<const unsigned char *>(ph == 1 ? p.ximg : p.h) + img8_off<BN>(mbg, Kd, 0, k0);
                    const float *scl = (ph == 1 ? p.xsc : p.hsc) + ((int64_t)mbg * (Kd / 64) + k0 / 64) * BN;
                    mbar_expect_tx(bar, rb + kA8Scl);   // lane 0's arrival
                    bulk_load(b_s, src, rb, bar);
                    bulk_load(b_s + BN * BK, scl, kA8Scl, bar);
                }
            } else if constexpr (C::WG) {   // a box's rows lie together in the image: one copy per box
                if (own && lane == 0) {
                    const uint32_t rb = (uint32_t)rows * 128;
                    const __nv_bfloat16 *src = (ph == 1 ? p.ximg : p.h) + img_off<BN, BK>(mbg, Kd, 0, k0);
                    mbar_expect_tx(bar, rb * (BK / 64));   // lane 0's arrival
                    #pragma unroll
                    for (int b = 0; b < BK / 64; ++b) bulk_load(b_s + b * (BN * 128), src + b * (BN * 64), rb, bar);
                }
            } else {
                // One bulk copy per token row (x gathered by token at GEMM1, h by pair at GEMM2):
                // the copy engine moves the rows, not 16 bytes per lane-instruction of this warp.
                // Each lane's rows' sources first, then lane 0's arrival, then the copies.
                const __nv_bfloat16 *src[(BN + 31) / 32];
                #pragma unroll
                for (int i = 0; i < (BN + 31) / 32; ++i) {
                    const int r = lane + 32 * i;
                    src[i] = (ph == 1 ? p.x + (int64_t)(r < rows ? m.tok[r] : 0) * H : p.h + (int64_t)(hrow + r) * I) + k0;
                }
                if (lane == 0) mbar_expect_tx(bar, bytes * (uint32_t)rows);   // lane 0's arrival
                #pragma unroll
                for (int i = 0; i < (BN + 31) / 32; ++i)
                    if (lane + 32 * i < rows) bulk_load(b_s + brow<BK>(lane + 32 * i, 0), src[i], bytes, bar);
            }
            if (lane != 0 || !own) mbar_arrive(bar);
        };
        auto ready_of = [&](int step, bool block) {   // the GEMM1 rows of this deferred stage are done
            const Meta<BN> &m = sh.meta[sh.stage_entry[step % C::STAGES] % kMeta];
            uint32_t ok = 0;
            if (lane == 0) {
                do {
                    ok = ld_acquire(p.ready + m.mbg) >= ready_full;
                    if (!ok && block) __nanosleep(64);
                } while (!ok && block);
            }
            ok = __shfl_sync(0xffffffffu, ok, 0);
            __syncwarp();   // the lanes' h reads come after lane 0's acquire
            return ok != 0;
        };
        int known_ready = -1;   // entry whose readiness was seen
        for (int step = 0;; ++step) {
            while (ld_acquire_cta(&sh.mwritten) <= lseq) {}   // the scheduler warp makes it
            // deferred token rows whose GEMM1 rows are now done, in order
            while (pend_lo < pend_hi && ready_of(pend_lo, step - pend_lo >= C::STAGES - 1)) {
                known_ready = sh.stage_entry[pend_lo % C::STAGES];
                for (; pend_lo < pend_hi && sh.stage_entry[pend_lo % C::STAGES] == known_ready; ++pend_lo) load_b(pend_lo);
            }
            const int slot = step % C::STAGES;
            mbar_wait(s_u32(&sh.empty[slot]), ((uint32_t)(step / C::STAGES) & 1u) ^ 1u);
            const Meta<BN> &m = sh.meta[lseq % kMeta];
            // the entry's fields read at once (see load_b)
            const int m_tile = m.tile, m_ph = m.phase, m_ready = m.ready, m_wgs = m.wgs, m_wgrp = m.wgrp;
            const unsigned char *m_wsrc = m.wsrc;
            if (lane == 0) { sh.stage_entry[slot] = lseq; sh.stage_k[slot] = lk; }
            __syncwarp();
            if (m_tile < 0) {   // the end: flush the deferred rows, then wake the consumers
                while (pend_lo < pend_hi) {
                    ready_of(pend_lo, true);
                    load_b(pend_lo++);
                }
                mbar_arrive(s_u32(&sh.full_a[slot]));
                mbar_arrive(s_u32(&sh.full_b[slot]));
                break;
            }
            const int Kd = m_ph == 1 ? H : I, k0 = lk * BK;
            const uint32_t a_s = s_u32(sh.ring[slot]), bar = s_u32(&sh.full_a[slot]);
            if (p.packed) {
                if (lane == 0) {   // the tile's boxes from m_wsrc (made per tile by the entry maker)
                    fence_proxy_async();   // the consumers' generic reads of this slot's last use came first
                    if constexpr (C::WG) {
                        // k-box-major in the stage: the tensor map's box (a 128-byte row of KBOX k,
                        // 16 rows, BM/16 groups, BK/KBOX boxes) lands in that order; a half stage's
                        // second box lies past the tensor and arrives as zeros (against the zero
                        // token box). FP8: one box of 128 k, e4m3.
                        mbar_expect_tx(bar, (uint32_t)(BM / 16 * (BK / C::KBOX) * 2048));
                        tma_load_4d_hint(a_s, m_ph == 1 ? &p.tm13 : &p.tm2, 0, 0, m_wgrp, k0 / C::KBOX, bar, pol);
                    } else {   // a 16-row group's boxes lie together in memory and in the stage
                        const int nbox = min(BK / C::KBOX, (Kd - k0) / C::KBOX);
                        const unsigned char *w = m_wsrc + (int64_t)(k0 / C::KBOX) * 2048;
                        mbar_expect_tx(bar, (uint32_t)(BM / 16 * nbox * 2048));
                        #pragma unroll
                        for (int g = 0; g < BM / 16; ++g)
                            bulk_load_hint(a_s + g * (BK / C::KBOX) * 2048, w + (int64_t)g * m_wgs, nbox * 2048, bar, pol);
                    }
                } else {
                    mbar_arrive(bar);
                }
            } else if constexpr (F8) {
                __trap();   // FP8 weights are packed only (the host refuses plain ones)
            } else {
                #pragma unroll 4
                for (int r = 0; r < BM; ++r) {
                    const __nv_bfloat16 *row;
                    if (m.phase == 1) {
                        const int rr = r % 16, ch = m.nb * (BM / 2) + (r / 16) * 8 + (rr % 8);
                        row = p.w13 + ((int64_t)m.e * 2 * I + (rr < 8 ? ch : I + ch)) * H;
                    } else {
                        row = p.w2 + ((int64_t)m.e * H + m.nb * BM + r) * I;
                    }
                    #pragma unroll
                    for (int c = lane; c < C::CH; c += 32) {
                        const int kc = k0 + c * 8;   // wgmma: past K, the stage's first box again
                        if (C::WG || kc < Kd) cp16(a_s + aswz<BM, BK, C::WG>(r, c), row + (kc < Kd ? kc : kc - 64), true);
                    }
                }
                asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
            }
            if (m_ph == 1 || m_ready || known_ready == lseq) {
                if (pend_lo == pend_hi) load_b(step);
                else pend_hi = step + 1;   // keep the order behind the deferred ones
            } else {
                if (pend_lo == pend_hi) pend_lo = step;
                pend_hi = step + 1;
            }
            if (++lk == (Kd + BK - 1) / BK) {
                lk = 0;
                ++lseq;
                __syncwarp();   // this warp's reads of the entry before the scheduler may reuse its slot
                if (lane == 0) st_release_cta(&sh.pseq, lseq);
            }
        }
    } else if (warp < kProd) {
        // ---- consumers: 8 warps, WM along the weight rows, WK splitting each stage's k ----
        const int cw = warp, ctid = tid;
        const int wm = cw % C::WM, wk = cw / C::WM;
        float acc[C::NT][4];
        #pragma unroll
        for (int j = 0; j < C::NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
        // wgmma tile: warpgroup wg takes tokens [64 wg, 64 wg + 64), warp wl of it 16 of them;
        // wacc is the m64 x nBM accumulator (4 per n8 block: rows g and g + 8, columns 2q, 2q + 1).
        const int wg = cw >> 2, wl = cw & 3;
        float wacc[C::WG ? BM / 2 : 1];
        #pragma unroll
        for (int i = 0; i < (C::WG ? BM / 2 : 1); ++i) wacc[i] = 0.f;
        float pre_w = 0.f, pre_w2[2] = {0.f, 0.f};   // pre_w2: the wgmma tile's (its epilogue's tokens)
        int32_t pre_mask = 0;
        int eseq = 0;   // GEMM2 epilogue records handed to the combine warps (Cfg::CWARP)
        int cvt0 = 0;   // F8W: the halves converted in the tiles before, mod CVT (the buffers' sequence)
        auto cbar = [] { asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory"); };
        for (int cstep = 0;; ++cstep) {
            const int slot = cstep % C::STAGES;
            const uint32_t par = (uint32_t)(cstep / C::STAGES) & 1u;
            mbar_wait(s_u32(&sh.full_a[slot]), par);
            mbar_wait(s_u32(&sh.full_b[slot]), par);
            const Meta<BN> &m = sh.meta[sh.stage_entry[slot] % kMeta];
            if (m.tile < 0) break;   // every claimed tile is done
            const int ck = sh.stage_k[slot];
            const int nn = (m.rows + 7) / 8;   // n8 blocks with tokens
            const int kdim = m.phase == 1 ? H : I;
            if (ck == 0) {
                #pragma unroll
                for (int j = 0; j < C::NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
                if (C::WG && m.phase == 2) {   // the routing weights of this thread's two epilogue tokens, early
                    #pragma unroll
                    for (int hr = 0; hr < 2; ++hr) {
                        const int col = wg * 64 + wl * 16 + (lane >> 2) + 8 * hr;
                        pre_w2[hr] = col < m.rows ? __ldg(p.wts + m.pair[col]) : 0.f;
                    }
                } else if (m.phase == 2 && ctid < m.rows) {   // the epilogue's per-token values, early
                    const int32_t pr = m.pair[ctid];
                    pre_w = __ldg(p.wts + pr);
                    if (local) {
                        pre_mask = 0;
                        for (int j = 0; j < K; ++j) pre_mask |= (int32_t)(sh.leid[m.tok[ctid] * K + j] >= 0) << j;
                    } else {
                        pre_mask = __ldcg(p.tokvalid + m.tok[ctid]);
                    }
                }
            }
            [[maybe_unused]] auto give = [&](int sl) { __syncwarp(); if (lane == 0) mbar_arrive(s_u32(&sh.empty[sl])); };
            [[maybe_unused]] auto next = [&]() {   // the wgmma tile's next stage, landed
                ++cstep;
                const int sl = cstep % C::STAGES;
                const uint32_t ph = (uint32_t)(cstep / C::STAGES) & 1u;
                mbar_wait(s_u32(&sh.full_a[sl]), ph);
                mbar_wait(s_u32(&sh.full_b[sl]), ph);
                return sl;
            };
            if constexpr (A8) {
                // FP8 tokens, a whole tile here: e4m3 x e4m3 wgmmas (twice bf16's rate, half its
                // bytes a stage) into tacc, then promoted in fp32 (DeepSeek's scheme): wacc += tacc *
                // the tokens' scale * the weight block's scale (block scales; row scales multiply
                // the columns in the epilogue). GEMM1's token scales are per 128 k (x's 1 x 128),
                // so one group a stage; GEMM2's per 64 (h's come one GEMM1 tile of 64 channels at
                // a time), so two. Each group is waited for before its promotion: ptxas serializes
                // the wgmmas if a warpgroup reads one accumulator while it has another in flight
                // (C7514), so no half promotes during the next. Two loop copies (NH), as for F8W (C7518).
                const int nk = ksteps(m);
                if (wg * 64 < m.rows) {
                    const int g = lane >> 2;
                    float tacc[BM / 2];
                    #pragma unroll
                    for (int i = 0; i < BM / 2; ++i) wacc[i] = 0.f;
                    // Block scales: the rows of k blocks that GEMM1's gate rows (n8 blocks 2G) and up
                    // rows (2G + 1) lie in, one 128-row block each; GEMM2's BM rows lie in one. Found
                    // once a tile: the entry's fields in shared memory would be read again after every
                    // asm below. Row scales: none here (the epilogue's).
                    const float *bsA = nullptr, *bsB = nullptr;
                    if (!p.f8row) {
                        if (m.phase == 1) {
                            const int64_t rb = (int64_t)m.e * (2 * I / 128) + m.nb * (BM / 2) / 128;
                            bsA = p.s13 + rb * (H / 128);
                            bsB = p.s13 + (rb + I / 128) * (H / 128);
                        } else {
                            bsA = bsB = p.s2 + ((int64_t)m.e * (H / 128) + m.nb * BM / 128) * (I / 128);
                        }
                    }
                    auto wsc = [](const float *bs, int kb) -> float { return bs ? __ldg(bs + kb) : 1.f; };
                    auto tile_a8 = [&](auto nh_c) {
                        constexpr int NH = decltype(nh_c)::value, KS = 4 / NH;   // groups a stage, k32 steps a group
                        const bool gate_up = NH == 1;   // GEMM1
                        float nA = wsc(bsA, 0), nB = wsc(bsB, 0);
                        int sl = slot;
                        for (int kk = 0; kk < nk; ++kk) {
                            if (kk > 0) sl = next();
                            const float wA = nA, wB = nB;
                            if (kk + 1 < nk) { nA = wsc(bsA, kk + 1); nB = wsc(bsB, kk + 1); }
                            const uint32_t wts = s_u32(sh.ring[sl]), tok = wts + C::A_BYTES + wg * 64 * 128;
                            const float *scl = reinterpret_cast<const float *>(sh.ring[sl] + C::A_BYTES + BN * BK) + wg * 64 + wl * 16 + g;
                            #pragma unroll
                            for (int hf = 0; hf < NH; ++hf) {
                                wg_fence_acc(tacc);
                                wg_fence();
                                #pragma unroll
                                for (int ks = 0; ks < KS; ++ks)
                                    wgmma_m64k32_e4m3<BM>(tacc, wg_desc(tok + (KS * hf + ks) * 32), wg_desc(wts + (KS * hf + ks) * 32), ks);
                                wg_commit();
                                const float s0 = scl[hf * BN], s1 = scl[hf * BN + 8];
                                wg_wait<0>();
                                wg_fence_acc(tacc);
                                if (hf == NH - 1) give(sl);
                                const float a0 = s0 * wA, a1 = s1 * wA, b0 = s0 * wB, b1 = s1 * wB;
                                #pragma unroll
                                for (int j = 0; j < BM / 8; ++j) {
                                    const bool up = gate_up && (j & 1);
                                    const float c0 = up ? b0 : a0, c1 = up ? b1 : a1;
                                    wacc[4 * j] += tacc[4 * j] * c0;
                                    wacc[4 * j + 1] += tacc[4 * j + 1] * c0;
                                    wacc[4 * j + 2] += tacc[4 * j + 2] * c1;
                                    wacc[4 * j + 3] += tacc[4 * j + 3] * c1;
                                }
                            }
                        }
                    };
                    if (m.phase == 1) tile_a8(std::integral_constant<int, 1>{});
                    else tile_a8(std::integral_constant<int, 2>{});
                    if (p.f8row) {   // a scale per weight row: column 8 j + 2 q + u of the tile
                        const int q = lane & 3;
                        #pragma unroll
                        for (int j = 0; j < BM / 8; ++j)
                            #pragma unroll
                            for (int u = 0; u < 2; ++u) {
                                const int ch = m.nb * (BM / 2) + (j >> 1) * 8 + 2 * q + u;
                                const float sc = m.phase == 1 ? __ldg(p.s13 + (int64_t)m.e * 2 * I + ((j & 1) ? I + ch : ch))
                                                              : __ldg(p.s2 + (int64_t)m.e * H + m.nb * BM + 8 * j + 2 * q + u);
                                wacc[4 * j + u] *= sc;
                                wacc[4 * j + 2 + u] *= sc;
                            }
                    }
                } else {
                    give(slot);
                    for (int kk = 1; kk < nk; ++kk) give(next());
                }
            } else if constexpr (C::F8W) {
                // The FP8 wgmma tiles, a whole tile here. Stage kk is 128-k scale block kk: its e4m3
                // weights (the packed box layout: row r at r * 128, 16-byte chunk c at c ^ (r % 8))
                // are dequantized times their scale into bf16 buffer hs % CVT a 64-k half hs at a
                // time (the wgmma B layout: 128-byte rows, chunk c at c ^ (r % 8)), each consumer
                // thread one chunk of BM / 64 rows (r0 + 64 i, chunk cc of the half); then a barrier
                // of the 256 consumers and each warpgroup's wgmmas over the half. Buffer hs % CVT
                // was last read by the wgmmas of half hs - CVT; hs counts on across tiles, since
                // nothing between two tiles waits for the other warpgroup's last wgmmas (counted
                // from 0 in each tile, a first half could take the buffer they read). With three
                // buffers those are retired by then: every consumer passed the barrier of half
                // hs - 1 after its wg_wait<1> of half hs - 2 (or its tile's wg_wait<0>). With two,
                // a second barrier after each wg_wait<1> (the half before retired in every
                // warpgroup) precedes the next conversion. A stage (its token rows) goes back once
                // both halves' wgmmas are done. A warpgroup whose 64 tokens all lie past the tile's
                // rows converts and meets the barriers too.
                constexpr int RPT = BM / 64;   // rows a thread converts per half
                const int nk = ksteps(m);
                const int r0 = ctid >> 2, cc = ctid & 3;
                // the scale of this thread's row r (0 .. BM-1) at k block kb
                auto scale = [&](int r, int kb) -> float {
                    if (m.phase == 1) {   // 16-row group r / 16: 8 gate rows, then their 8 up rows
                        const int ch = m.nb * (BM / 2) + (r >> 4) * 8 + (r & 7), sr = (r & 8) ? I + ch : ch;
                        return p.f8row ? __ldg(p.s13 + (int64_t)m.e * 2 * I + sr)
                                       : __ldg(p.s13 + ((int64_t)m.e * (2 * I / 128) + sr / 128) * (H / 128) + kb);
                    }
                    const int sr = m.nb * BM + r;
                    return p.f8row ? __ldg(p.s2 + (int64_t)m.e * H + sr)
                                   : __ldg(p.s2 + ((int64_t)m.e * (H / 128) + sr / 128) * (I / 128) + kb);
                };
                // Two copies of the loop, with and without the wgmmas: a branch around them inside
                // one loop makes ptxas serialize the wgmmas (C7518).
                auto tile_loop = [&](auto act_c) {
                    constexpr bool ACT = decltype(act_c)::value;
                    // Block scales: a thread's rows r0 + 64 i share one for i < RPT / 2 and one for
                    // the rest (GEMM1's 64 or 128 gate and up channels lie in one 128-row block each,
                    // and r & 8 is r0's; GEMM2's rows in one block per 128), loaded a stage ahead.
                    // Row scales: sA and sB are the 128-row tile's two rows'; the 256-row tile loads
                    // each row's as it converts it (the same addresses every stage: L1).
                    float nA = scale(r0, 0), nB = scale(r0 + 64 * (RPT / 2), 0);
                    int sl = slot, prev = slot;
                    for (int kk = 0; kk < nk; ++kk) {
                        if (kk > 0) sl = next();
                        const float sA = nA, sB = nB;
                        if (kk + 1 < nk && !p.f8row) { nA = scale(r0, kk + 1); nB = scale(r0 + 64 * (RPT / 2), kk + 1); }
                        const uint32_t raw = s_u32(sh.ring[sl]), tok = raw + C::A_BYTES + wg * 64 * 128;
                        #pragma unroll
                        for (int hf = 0; hf < 2; ++hf) {
                            const uint32_t buf = s_u32(sh.cvt[(cvt0 + 2 * kk + hf) % NCVT]);
                            // Unrolled: the 256-row tile then spills a few registers and still runs faster
                            // than converting a row at a time (layer-time-fp8.txt).
                            #pragma unroll
                            for (int i = 0; i < RPT; ++i) {
                                const int r = r0 + 64 * i, sw = r & 7, c = hf * 4 + cc;
                                const float sc = RPT == 2 || !p.f8row ? (i < RPT / 2 ? sA : sB) : scale(r, 0);
                                const uint4 v = lds128(raw + r * 128 + ((c ^ sw) << 4));
                                sts128(buf + r * 128 + (((2 * cc) ^ sw) << 4), e4m3x2_bf16_scaled(v.x, sc), e4m3x2_bf16_scaled(v.x >> 16, sc),
                                       e4m3x2_bf16_scaled(v.y, sc), e4m3x2_bf16_scaled(v.y >> 16, sc));
                                sts128(buf + r * 128 + (((2 * cc + 1) ^ sw) << 4), e4m3x2_bf16_scaled(v.z, sc), e4m3x2_bf16_scaled(v.z >> 16, sc),
                                       e4m3x2_bf16_scaled(v.w, sc), e4m3x2_bf16_scaled(v.w >> 16, sc));
                            }
                            fence_proxy_async();   // these generic stores (and gathered rows) before the wgmmas' async reads
                            named_bar_sync(2, kConsumers);
                            if constexpr (ACT) {
                                wg_fence_acc(wacc);
                                wg_fence();
                                #pragma unroll
                                for (int ks = 0; ks < 4; ++ks)
                                    wgmma_m64k16<BM>(wacc, wg_desc(tok + hf * (BN * 128) + ks * 32), wg_desc(buf + ks * 32),
                                                     kk == 0 && hf == 0 && ks == 0 ? 0 : 1);
                                wg_commit();
                                wg_wait<1>();
                            }
                            if constexpr (C::CVT == 2) named_bar_sync(3, kConsumers);   // the half before is retired everywhere
                            if (hf == 0 && kk > 0) give(prev);   // stage kk - 1's second half is done
                        }
                        prev = sl;
                    }
                    if constexpr (ACT) {
                        wg_wait<0>();
                        wg_fence_acc(wacc);
                    }
                    give(prev);
                };
                if (wg * 64 < m.rows) tile_loop(std::true_type{});
                else tile_loop(std::false_type{});
                if constexpr (NCVT % 2) cvt0 = (cvt0 + 2 * nk) % NCVT;   // (an even count: always 0)
            } else if constexpr (C::WG) {
                // A whole tile here, stage after stage (its stages are consecutive in the ring).
                // Both operands by descriptor: this warpgroup's 64 token rows (M) and the BM
                // weight rows (N); the tile's first wgmma starts from zero (scale_d 0). One group
                // stays in flight: a stage is handed back once the next one's wgmmas are issued
                // and its own are done. A warpgroup whose 64 tokens all lie past the tile's rows
                // issues nothing and hands each stage back as it lands.
                const int nk = ksteps(m);
                auto issue = [&](int sl, bool first) {
                    const uint32_t a_s = s_u32(sh.ring[sl]), b_s = a_s + C::A_BYTES + wg * 64 * 128;
                    // Plain weights and gathered token rows land by cp.async, a generic-proxy write;
                    // wgmma reads through the async proxy (bulk copies need no fence: both sides are async).
                    if (!p.packed || (gather && m.phase == 1)) fence_proxy_async();
                    wg_fence_acc(wacc);
                    wg_fence();
                    #pragma unroll
                    for (int ks = 0; ks < BK / 16; ++ks)
                        wgmma_m64k16<BM>(wacc, wg_desc(b_s + (ks >> 2) * (BN * 128) + (ks & 3) * 32),
                                         wg_desc(a_s + (ks >> 2) * (BM * 128) + (ks & 3) * 32), first && ks == 0 ? 0 : 1);
                    wg_commit();
                };
                if (wg * 64 < m.rows) {
                    issue(slot, true);
                    int prev = slot;
                    for (int kk = 1; kk < nk; ++kk) {
                        const int sl = next();
                        issue(sl, false);
                        wg_wait<1>();
                        give(prev);
                        prev = sl;
                    }
                    wg_wait<0>();
                    wg_fence_acc(wacc);
                    give(prev);
                } else {
                    give(slot);
                    for (int kk = 1; kk < nk; ++kk) give(next());
                }
            } else {
                const uint32_t a_s = s_u32(sh.ring[slot]), b_s = a_s + C::A_BYTES;
                if constexpr (F8) {
                    // Weight-only FP8: this warp's k of the stage, a 128-k scale block at a time, in steps of
                    // 32: the e4m3 A tile by ldmatrix as b16 (16 rows x 32 bytes), each register's
                    // four values to two bf16x2, two m16n8k16 per step over a k order permuted alike
                    // on the token side (k 4q..4q+3 and 16+4q..16+4q+3 by two 8-byte loads). The
                    // block's partial sum is scaled into acc in fp32 (DeepSeek's promotion).
                    #pragma unroll
                    for (int blk = 0; blk < BK / C::WK / 128; ++blk) {
                        const int kw = wk * (BK / C::WK) + blk * 128;   // this block's first k in the stage
                        if (ck * BK + kw < kdim) {          // K a multiple of 128: a block is whole or absent
                            const int kb = (ck * BK + kw) / 128;
                            float sa, sb;   // scales of fragment rows g and g + 8
                            if (p.f8row) {   // a scale per weight row (each lane its rows')
                                if (m.phase == 1) {   // row g: gate channel ch, row g + 8: its up row
                                    const int64_t ch = (int64_t)m.e * 2 * I + m.nb * (BM / 2) + wm * 8 + (lane >> 2);
                                    sa = __ldg(p.s13 + ch);
                                    sb = __ldg(p.s13 + ch + I);
                                } else {
                                    const int64_t r = (int64_t)m.e * H + m.nb * BM + wm * 16 + (lane >> 2);
                                    sa = __ldg(p.s2 + r);
                                    sb = __ldg(p.s2 + r + 8);
                                }
                            } else if (m.phase == 1) {   // rows g: gate channel ch + g, g + 8: its up row
                                const int ch = m.nb * (BM / 2) + wm * 8;
                                const float *sc = p.s13 + (int64_t)m.e * (2 * I / 128) * (H / 128);
                                sa = __ldg(sc + (ch / 128) * (H / 128) + kb);
                                sb = __ldg(sc + ((I + ch) / 128) * (H / 128) + kb);
                            } else {
                                sa = sb = __ldg(p.s2 + ((int64_t)m.e * (H / 128) + (m.nb * BM + wm * 16) / 128) * (I / 128) + kb);
                            }
                            float tmp[C::NT][4];
                            #pragma unroll
                            for (int j = 0; j < C::NT; ++j) tmp[j][0] = tmp[j][1] = tmp[j][2] = tmp[j][3] = 0.f;
                            const int g = lane >> 2, q = lane & 3;
                            #pragma unroll
                            for (int s = 0; s < 128 / 32; ++s) {
                                const int k32 = kw / 32 + s;
                                uint32_t a0, a1, a2, a3, l0, h0, l1, h1, l2, h2, l3, h3;
                                ldsm4(a_s + aswz<BM, BK / 2, false>(wm * 16 + (lane & 15), 2 * k32 + (lane >> 4)), a0, a1, a2, a3);
                                e4m3x4_bf16(a0, l0, h0);
                                e4m3x4_bf16(a1, l1, h1);
                                e4m3x4_bf16(a2, l2, h2);
                                e4m3x4_bf16(a3, l3, h3);
                                #pragma unroll
                                for (int j = 0; j < C::NT; ++j) {
                                    if (j < nn) {
                                        const uint32_t rb = b_s + brow<BK>(j * 8 + g, 0) + k32 * 64 + q * 8;
                                        const uint2 u = lds64(rb), v = lds64(rb + 32);
                                        mma16816(tmp[j], l0, l1, l2, l3, u.x, v.x);
                                        mma16816(tmp[j], h0, h1, h2, h3, u.y, v.y);
                                    }
                                }
                            }
                            #pragma unroll
                            for (int j = 0; j < C::NT; ++j) {
                                acc[j][0] += tmp[j][0] * sa; acc[j][1] += tmp[j][1] * sa;
                                acc[j][2] += tmp[j][2] * sb; acc[j][3] += tmp[j][3] * sb;
                            }
                        }
                    }
                } else {
                #pragma unroll
                for (int s = 0; s < C::KSTEP; ++s) {
                    const int ks = wk * C::KSTEP + s;   // k16 index in the stage
                    if (ck * BK + ks * 16 >= kdim) continue;   // past K (a last stage that K does not fill)
                    uint32_t a0, a1, a2, a3;
                    ldsm4(a_s + aswz<BM, BK, false>(wm * 16 + (lane & 15), 2 * ks + (lane >> 4)), a0, a1, a2, a3);
                    #pragma unroll
                    for (int j = 0; j < C::NT; j += 2) {
                        if (j < nn) {
                            uint32_t b0, b1, b2, b3;
                            ldsm4(b_s + brow<BK>(j * 8 + (lane & 7) + ((lane >> 4) << 3), 2 * ks + ((lane >> 3) & 1)), b0, b1,
                                  b2, b3);
                            mma16816(acc[j], a0, a1, a2, a3, b0, b1);
                            if (j + 1 < nn) mma16816(acc[j + 1], a0, a1, a2, a3, b2, b3);
                        }
                    }
                }
                }
            }
            if constexpr (!C::WG) {
                __syncwarp();
                if (lane == 0) mbar_arrive(s_u32(&sh.empty[slot]));
                if (ck + 1 < ksteps(m)) continue;
            }
            // -- epilogue: reduce the k-split warps in fixed order, then store --
            if (!C::WG && m.phase == 2 && ctid < m.rows) { sh.epi_w[ctid] = pre_w; sh.epi_mask[ctid] = pre_mask; }
            if constexpr (C::CWARP)
                if (m.phase == 2) {   // the record for a combine warp (published after the stores' bar.sync)
                    const int ei = eseq % kEpi;
                    mbar_wait(s_u32(&sh.epi_empty[ei]), ((uint32_t)(eseq / kEpi) & 1u) ^ 1u);
                    if (ctid < m.rows) { sh.erec[ei].tok[ctid] = m.tok[ctid]; sh.erec[ei].mask[ctid] = pre_mask; }
                    if (ctid == 0) { sh.erec[ei].nb = m.nb; sh.erec[ei].rows = m.rows; }
                }
            if constexpr (C::WG) {   // every value it needs is this thread's or the entry's: no barrier
                const int g = lane >> 2, q = lane & 3;
                if (A8 && m.phase == 1 && wg * 64 < m.rows) {
                    // h in e4m3 for GEMM2's FP8 tokens: this tile's 64 channels of a token are its one
                    // 64-k scale block, spread over the 4 lanes of a quad (amax by two shuffles).
                    #pragma unroll
                    for (int hr = 0; hr < 2; ++hr) {
                        const int col = wg * 64 + wl * 16 + g + 8 * hr;
                        float hv[BM / 16][2];
                        float amax = 0.f;
                        #pragma unroll
                        for (int G = 0; G < BM / 16; ++G)
                            #pragma unroll
                            for (int u = 0; u < 2; ++u) {
                                const float gt = wacc[8 * G + 2 * hr + u], up = wacc[8 * G + 4 + 2 * hr + u];
                                hv[G][u] = silu_mul(gt, up);
                                amax = fmaxf(amax, fabsf(hv[G][u]));
                            }
                        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
                        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
                        if (col < m.rows) {
                            const float inv = amax > 0.f ? 448.f / amax : 0.f;
                            unsigned char *hi = reinterpret_cast<unsigned char *>(p.h);
                            #pragma unroll
                            for (int G = 0; G < BM / 16; ++G)
                                *reinterpret_cast<uint16_t *>(hi + img8_off<BN>(m.mbg, I, col, m.nb * (BM / 2) + 8 * G + 2 * q)) =
                                    (uint16_t)e4m3x2(hv[G][0], hv[G][1], inv);
                            if (q == 0) p.hsc[((int64_t)m.mbg * (I / 64) + m.nb) * BN + col] = amax / 448.f;
                        }
                    }
                } else if (wg * 64 < m.rows) {
                    #pragma unroll
                    for (int hr = 0; hr < 2; ++hr) {
                        const int col = wg * 64 + wl * 16 + g + 8 * hr;   // the tile's token
                        if (col >= m.rows) continue;
                        if (m.phase == 1) {   // n8 blocks 2G (gate) and 2G + 1 (up) of 16-row group G
                            // h goes to GEMM2's stage image (img_off places each channel in its stage)
                            #pragma unroll
                            for (int G = 0; G < BM / 16; ++G) {
                                float hv[2];
                                #pragma unroll
                                for (int u = 0; u < 2; ++u) {
                                    const float gt = wacc[8 * G + 2 * hr + u], up = wacc[8 * G + 4 + 2 * hr + u];
                                    hv[u] = silu_mul(gt, up);
                                }
                                *reinterpret_cast<__nv_bfloat162 *>(p.h + img_off<BN, BK>(m.mbg, I, col, m.nb * (BM / 2) + 8 * G + 2 * q)) =
                                    __floats2bfloat162_rn(hv[0], hv[1]);
                            }
                        } else {
                            __nv_bfloat16 *sl = p.slot + (int64_t)m.pair[col] * H + m.nb * BM + 2 * q;
                            const float w = pre_w2[hr];
                            #pragma unroll
                            for (int j = 0; j < BM / 8; ++j)
                                __stcg(reinterpret_cast<__nv_bfloat162 *>(sl + 8 * j), __floats2bfloat162_rn(wacc[4 * j + 2 * hr] * w, wacc[4 * j + 2 * hr + 1] * w));
                        }
                    }
                }
            } else {
                if (wk > 0) {
                    float *r = sh.red + (((wk - 1) * C::WM + wm) * 32 + lane) * C::NT * 4;
                    #pragma unroll
                    for (int j = 0; j < C::NT; ++j)
                        if (j < nn) { r[j * 4] = acc[j][0]; r[j * 4 + 1] = acc[j][1]; r[j * 4 + 2] = acc[j][2]; r[j * 4 + 3] = acc[j][3]; }
                }
                cbar();
                if (wk == 0) {
                    #pragma unroll
                    for (int w = 1; w < C::WK; ++w) {
                        const float *r = sh.red + (((w - 1) * C::WM + wm) * 32 + lane) * C::NT * 4;
                        #pragma unroll
                        for (int j = 0; j < C::NT; ++j)
                            if (j < nn) { acc[j][0] += r[j * 4]; acc[j][1] += r[j * 4 + 1]; acc[j][2] += r[j * 4 + 2]; acc[j][3] += r[j * 4 + 3]; }
                    }
                    const int g = lane >> 2, cc = (lane & 3) * 2;
                    if (m.phase == 1) {
                        const int ch = m.nb * (BM / 2) + wm * 8 + g;
                        const int64_t pos0 = sh.seg[m.e] + (int64_t)m.mb * BN;
                        #pragma unroll
                        for (int j = 0; j < C::NT; ++j) {
                            #pragma unroll
                            for (int u = 0; u < 2; ++u) {
                                const int col = j * 8 + cc + u;
                                if (j < nn && col < m.rows) {
                                    const float gt = acc[j][u], up = acc[j][2 + u];
                                    const float hv = silu_mul(gt, up);
                                    p.h[(pos0 + col) * I + ch] = __float2bfloat16_rn(hv);
                                }
                            }
                        }
                    } else {
                        const int row = m.nb * BM + wm * 16 + g;
                        #pragma unroll
                        for (int j = 0; j < C::NT; ++j) {
                            #pragma unroll
                            for (int u = 0; u < 2; ++u) {
                                const int col = j * 8 + cc + u;
                                if (j < nn && col < m.rows) {
                                    __nv_bfloat16 *sl = p.slot + (int64_t)m.pair[col] * H;
                                    const float w = sh.epi_w[col];
                                    __stcg(sl + row, __float2bfloat16_rn(acc[j][u] * w));
                                    __stcg(sl + row + 8, __float2bfloat16_rn(acc[j][2 + u] * w));
                                }
                            }
                        }
                    }
                }
            }
            if constexpr (C::WG) {   // GEMM2: combined after the last GEMM2 tile (below)
                if (m.phase == 1) {   // this warp's h stores, then its share of the readiness count
                    __syncwarp();
                    if (lane == 0) red_release(p.ready + m.mbg, 1u);
                }
                continue;
            }
            cbar();
            if (m.phase == 1) {
                if (ctid == 0) red_release(p.ready + m.mbg, 1u);
                continue;
            }
            if constexpr (C::CWARP) {
                if (ctid == 0) mbar_arrive(s_u32(&sh.epi_full[eseq % kEpi]));
                ++eseq;
                continue;
            }
            // arrivals on (token, n-block); the one that completes a token combines it
            if (ctid < BN) {
                int32_t tok = -1;
                if (ctid < m.rows) {
                    const int32_t t = m.tok[ctid];
                    uint32_t *a = p.arrive + (int64_t)t * NB2 + m.nb;
                    const int32_t msk = sh.epi_mask[ctid];
                    if (atom_add_acq_rel(a, 1u) + 1 == (uint32_t)__popc(msk)) { tok = t; *a = 0; }
                    sh.comb_mask[ctid] = msk;
                }
                sh.comb[ctid] = tok;
            }
            cbar();
            // The combine: every consumer thread takes 4 columns of a completed token, its valid
            // slots read in pair order (the fixed sum order), all of them in flight at once.
            for (int w = ctid; w < m.rows * (BM / 4); w += kConsumers) {
                const int j = w / (BM / 4);
                const int32_t t = sh.comb[j];
                if (t >= 0) combine4(p, t, sh.comb_mask[j], m.nb * BM + (w % (BM / 4)) * 4);
            }
        }
        if constexpr (C::CWARP)   // no more tiles: tell each combine warp
            if (ctid == 0)
                for (int w = 0; w < kCombW; ++w, ++eseq) {
                    mbar_wait(s_u32(&sh.epi_empty[eseq % kEpi]), ((uint32_t)(eseq / kEpi) & 1u) ^ 1u);
                    sh.erec[eseq % kEpi].rows = -1;
                    mbar_arrive(s_u32(&sh.epi_full[eseq % kEpi]));
                }
    } else if (warp == kSched) {
        // ---- scheduler: claims and tile entries, kAhead entries beyond the producer's. The ring
        // holds kMeta entries; the producer's and the consumers' (up to STAGES steps behind it,
        // a step an entry at least) lie within STAGES + kAhead + 1 of it. The producer waits on
        // this warp only when it has no entry, this warp on the producer only when it has
        // kAhead: never both. GEMM2 entries' readiness loads wait here, not in the producer. ----
        static_assert(C::STAGES + kAhead + 2 <= kMeta, "the entry ring");
        while (!ended) {
            while (have > ld_acquire_cta(&sh.pseq) + kAhead) __nanosleep(64);
            sched_one();
        }
    } else if (C::WG && gather && warp >= kComb && warp < kComb + kGatherT / 32) {
        // ---- the gatherers (wgmma tile, layer_gather): GEMM1 stages' token rows from x, 16 bytes
        // a thread, in the image's swizzled layout (tsw); the stages as the producer walks them.
        // Each thread's arrival on full_b fires when its copies land (cp.async...noinc); the
        // consumers' proxy fence then hands the generic writes to wgmma. GEMM2 stages (h, the
        // producer's) and the end get a plain arrival. The meta entries read here lie within
        // STAGES + 1 steps of the producer's, in the ring the scheduler keeps (kMeta). ----
        constexpr int CHR = BK / 8;              // 16-byte chunks of a row in a stage
        static_assert(!C::WG || kGatherT % CHR == 0, "whole rows per pass");
        const int gt = tid - kComb * 32, gc = gt % CHR;
        int gseq = 0, gk = 0;
        for (int step = 0;; ++step) {
            while (ld_acquire_cta(&sh.mwritten) <= gseq) {}
            const int slot = step % C::STAGES;
            const Meta<BN> &m = sh.meta[gseq % kMeta];
            const int m_tile = m.tile, ph = m.phase, rows = m.rows;
            const uint32_t bar = s_u32(&sh.full_b[slot]);
            mbar_wait(s_u32(&sh.empty[slot]), ((uint32_t)(step / C::STAGES) & 1u) ^ 1u);
            if (m_tile < 0) { mbar_arrive(bar); break; }
            const int nk = ((ph == 1 ? H : I) + BK - 1) / BK;
            if (ph == 1) {
                const uint32_t b_s = s_u32(sh.ring[slot]) + C::A_BYTES;
                const __nv_bfloat16 *xs = p.x + gk * BK + gc * 8;
                for (int r = gt / CHR; r < rows; r += kGatherT / CHR) cp16(b_s + tsw<BN>(r, gc), xs + (int64_t)m.tok[r] * H, true);
                asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
            } else {
                mbar_arrive(bar);
            }
            if (++gk == nk) { gk = 0; ++gseq; }
        }
    } else if (C::CWARP && warp >= kComb && warp < kComb + kCombW) {
        // ---- a combine warp: each of its GEMM2 tiles' arrivals on (token, n-block), then the sums of the
        // tokens whose arrivals it completed. The record's mbarrier (release by consumer thread 0
        // after a bar.sync behind the slot stores) and the arrival's acq_rel atomic carry the
        // slots' visibility as the consumers' own arrivals would. ----
        for (int i = warp - kComb;; i += kCombW) {   // this warp's records: one in kCombW
            const int ei = i % kEpi;
            mbar_wait(s_u32(&sh.epi_full[ei]), (uint32_t)(i / kEpi) & 1u);
            const EpiRec<BN> &r = sh.erec[ei];
            const int rows = r.rows, nb = r.nb;
            if (rows < 0) break;
            int32_t tok = -1, msk = 0;
            if (lane < rows) {
                const int32_t t = r.tok[lane];
                msk = r.mask[lane];
                uint32_t *a = p.arrive + (int64_t)t * NB2 + nb;
                if (atom_add_acq_rel(a, 1u) + 1 == (uint32_t)__popc(msk)) { tok = t; *a = 0; }
            }
            __syncwarp();   // the record read, and the lanes' loads below after each other's acquires
            if (lane == 0) mbar_arrive(s_u32(&sh.epi_empty[ei]));
            const uint32_t done = __ballot_sync(0xffffffffu, tok >= 0);
            const int nd = __popc(done);
            const int total = nd * (BM / 4);   // 4 columns of a completed token per lane and pass
            for (int base = 0; base < total; base += 32) {
                const int w = base + lane;
                uint32_t d = done;   // lane j of the (w / (BM/4))-th completed token
                for (int n = min(w, total - 1) / (BM / 4); n > 0; --n) d &= d - 1;
                const int j = __ffs(d) - 1;
                const int32_t tj = __shfl_sync(0xffffffffu, tok, j), mj = __shfl_sync(0xffffffffu, msk, j);
                if (w < total) combine4(p, tj, mj, nb * BM + (w % (BM / 4)) * 4);
            }
        }
    }
    cp_wait<0>();
    if constexpr (C::WG) {
        // The wgmma tiles' combine: after every GEMM2 tile (a grid barrier), all threads stream
        // the slots, 4 columns of a token each, its valid slots summed in j order. Per GEMM2 tile,
        // arrival atomics and slot loads would be two global round trips the tensor cores wait
        // out; here they are one pass over the slots.
        grid_barrier(ctl);
        const int per = H / 8;   // H % 256 == 0 on these tiles
        const int64_t items = (int64_t)p.T * per, stride = (int64_t)gridDim.x * kThreads;
        constexpr int NI = 2;
        for (int64_t w0 = (int64_t)blockIdx.x * kThreads + tid; w0 < items; w0 += NI * stride) {
            int32_t t[NI], msk[NI];
            int col[NI];
            #pragma unroll
            for (int n = 0; n < NI; ++n) {
                const int64_t w = w0 + n * stride;
                t[n] = (int32_t)(w < items ? w / per : 0);
                col[n] = (int)(w - (int64_t)t[n] * per) * 8;
                msk[n] = w < items ? __ldcg(p.tokvalid + t[n]) : 0;
            }
            combine8<NI>(p, t, msk, col);
        }
    }

    // -- 5. the last CTA out resets what the next launch needs at zero --
    __syncthreads();
    bool last = false;
    if (tid == 0) {
        __threadfence();
        last = atomicAdd(ctl + kCtlExit, 1u) == gridDim.x - 1;
        __threadfence();   // the other CTAs' counter uses, seen by this atomic, before the resets below
    }
    if (__syncthreads_or(last)) {
        __threadfence();
        for (int e = tid; e < E; e += kThreads) ctl[kCtlCounts + e] = 0;
        for (int i = tid; i < total_mb; i += kThreads) p.ready[i] = 0;
        if (tid < 16) ctl[kCtlQ1 + tid] = 0;
        if (tid == 0) ctl[kCtlExit] = ctl[kCtlDone1] = ctl[kCtlDone2] = 0;
        __threadfence();
    }
}

}  // namespace layer
}  // namespace ldmoe
