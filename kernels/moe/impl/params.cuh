// impl/params.cuh — what every kernel body shares about one launch: the constants of the
// shared-memory layout, the kernel's parameter block (KParams), the variant bits and debug
// outputs the lab build sets, and the decoding of a tile ticket into rows and columns (Tile).
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <type_traits>
#include "kernels/moe/ldmoe.h"
#include "kernels/moe/ldmoe_tiles.h"
#include "kernels/moe/impl/scheduler.cuh"

namespace ldmoe {

// ---- shared-memory layout ----------------------------------------------------------------------

constexpr int kBK = 64;                 // k per k-block: one TMA box is 64 bf16 = 128 bytes per row
constexpr int kRowBytes = kBK * 2;      // a box row; the 128-byte swizzle works on whole rows
static_assert(kBK == LDMOE_PACK_K, "a packed box holds one k-block");
// Shared memory one block may use on compute capability 9.0 and 10.0
// (cudaDevAttrMaxSharedMemoryPerBlockOptin); every tile's dynamic plus static shared memory fits.
constexpr int kMaxSmemPerBlock = 227 * 1024;
// Dynamic shared memory is requested this much larger than it is used, so that the body can
// round its base up to the 1024-byte alignment the wgmma/TMA swizzle pattern needs.
constexpr int kSmemAlignSlack = 1024;
// Static shared memory of a kernel (barriers, tickets, SchedShared) stays below this.
constexpr int kStaticSmemReserve = 1024;
// Per-launch tables in shared memory: prefix[0..E] (m-blocks before expert e) followed, at
// kTStart, by tstart[0..E] (first token row of expert e: the running maximum of offs clamped to
// [0, T], so non-decreasing; tstart[E] = the last end). Expert e owns rows tstart[e] ..
// tstart[e+1] - 1.
constexpr int kTStart = LDMOE_MAX_EXPERTS + 1;
constexpr int kSchedTableBytes = 2 * kTStart * 4;

// Byte offset of 16-byte chunk c of row r in a swizzled [rows][64 bf16] tile.
__device__ __forceinline__ uint32_t swz(int r, int c) { return r * kRowBytes + ((c ^ (r & 7)) << 4); }

// ---- variant bits (KParams::tune) ----------------------------------------------------------------
// Same-process A/B switches between kernel variants. Only the lab library sets them
// (bench/moe/lab/ldmoe_lab.h, LDMOE_TUNE_*, which must keep these values); the product library
// always launches with 0, the tuned default.
constexpr uint32_t kTuneScalarEpilogue = 0x1u;   // store from registers, not via shared memory
constexpr uint32_t kTuneTokensNormal = 0x2u;     // decode: token boxes evict-normal in L2, not evict-last
constexpr uint32_t kTuneWeightsNormal = 0x4u;    // decode: weight boxes evict-normal in L2
constexpr uint32_t kTuneStreamStores = 0x8u;     // staged epilogue: st.global.cs output stores
constexpr uint32_t kTuneDynamicOnly = 0x10u;     // claim every tile from the counters (no static waves)
constexpr uint32_t kTuneNoDependent = 0x20u;     // FP8: an ordinary launch, not a programmatic dependent one
// The last wave's claims (TicketStream::late_tail): by default made when a tile ends in the FP8
// kernels where experts have several m-blocks (prefill), one tile ahead elsewhere (Loader::start);
// these force one way.
// (0x40 and 0x80 were experiments of 2026-12-03, measured and removed; not reused, so that old
// records keep their meaning.)
constexpr uint32_t kTuneLateTail = 0x200u;       // claim when the tile ends, every launch
constexpr uint32_t kTuneEarlyTail = 0x400u;      // claim one tile ahead, every launch
// (0x800, 0x1000 and 0x2000 were experiments of 2026-12-04, measured; 0x1000's change was kept
// without its bit. Not reused either.)
constexpr uint32_t kTuneAll = kTuneScalarEpilogue | kTuneTokensNormal | kTuneWeightsNormal | kTuneStreamStores |
                              kTuneDynamicOnly | kTuneNoDependent | kTuneLateTail | kTuneEarlyTail;
// The lab's diagnostic build only (-DLDMOE_DIAG, bench/moe/lab): bits that remove work from the
// warp-specialized kernels, to measure what the work costs; results are wrong by design.
// kDiagNoMma: consumers wait for and release every stage but issue no wgmma; kDiagNoStore: no
// output stores; kDiagNoTokens / kDiagHalfTokens (decode orientation): the producer loads no token
// boxes / token boxes for even k-steps only (the wgmmas read whatever the stage holds), to price
// the tokens' L2 reads; kDiagNoScaleMath (FP8 block scales): the sums add the accumulators as
// rowwise does (the scales are still loaded with each stage).
#ifdef LDMOE_DIAG
constexpr uint32_t kDiagNoMma = 0x40000000u, kDiagNoStore = 0x20000000u;
constexpr uint32_t kDiagNoTokens = 0x10000000u, kDiagHalfTokens = 0x08000000u;
constexpr uint32_t kDiagNoScaleMath = 0x02000000u;
#endif

// ---- the kernel's parameters -------------------------------------------------------------------

struct KParams {
    CUtensorMap tm_w;   // weights as a [E*N, K] bf16 matrix, box 64 k x BM rows, 128-byte swizzle
                        // (not set for the packed layout: its boxes are read with plain bulk copies)
    CUtensorMap tm_x;   // tokens  as a [T, K] bf16 matrix,   box 64 k x BN rows, 128-byte swizzle
                        // (tiles with token chunks, WsCfg CHUNK < BN: box 64 k x CHUNK rows)
    CUtensorMap tm_xh;  // tiles with token chunks: the tokens again with a BN/2-row box
    CUtensorMap tm_xb;  // tiles with token chunks: the tokens again with the whole BN-row box
    const __nv_bfloat16 *x;
    const __nv_bfloat16 *w;
    const int32_t *offs;
    __nv_bfloat16 *y;
    int64_t T;
    int32_t E, N, K, D, ND, nbs;   // ND = N/D rows per slice, nbs = n-blocks per slice
    int32_t packed;     // weights in LDMOE_LAYOUT_PACKED (ldmoe_tiles.h): pnb row blocks, pkb k-blocks
    int32_t pnb, pkb;
    int32_t mode;
    uint32_t tune;   // kTune* bits; 0 = the tuned default (all the product library passes)
    float steal_waves;
    unsigned *ctr;
    uint32_t *dbg;      // per-tile counters (lab: ldmoe_lab_params_t.debug_tiles; NULL: off)
    int64_t dbg_cap;
    uint64_t *trace;    // 8 per CTA (lab: ldmoe_lab_params_t.trace; NULL: off)
};

// The FP8 kernels' parameters (ldmoe_grouped_mm_fp8): KParams as for bf16, with the weights and
// tokens seen as rows of K/2 bf16-sized elements (KParams::K = K/2, the tensor maps and the
// packed layout in those units, so the load side is the bf16 one), plus the scales. A separate
// struct rather than more KParams fields: the bf16 kernels' parameter block, and with it their
// machine code, stays as it was (make sass-identity).
struct KParamsF8 : KParams {
    const float *xs;    // activation scales: [T] (rowwise) or [KB, T] (block)
    const float *ws;    // weight scales: [E*N] in the weights' row order (rowwise) or
                        // [D*E, ceil(ND/128), KB] (block), ldmoe.h
    int32_t K8;         // K in e4m3 elements (KParams::K = K8 / 2)
    int32_t KB;         // ceil(K8 / 128): K blocks of the block scales
    // Block scheme: the producer loads each stage's scales with its operands (Loader::fill), from
    // x_scale and w_scale seen as 1-D fp32 tensors, so they need no row stride of 16 bytes. A
    // 1-D map starts at a 16-byte aligned address: xs0 / ws0 are the elements between that address
    // and x_scale / w_scale (0..3), added to every coordinate.
    CUtensorMap tm_xs;  // x_scale [KB * T], box BN + 4 (the tile's token scales of one K block)
    CUtensorMap tm_ws;  // w_scale [D*E * ceil(ND/128) * KB], box 8 (the stage's K blocks of one row block)
    int32_t xs0, ws0;
};
// 0 for the bf16 shapes, the scaling scheme (enum ldmoe_fp8_scaling) for the FP8 ones (Fp8Cfg).
template <class C, class = void> struct fp8_scaling_of : std::integral_constant<int, 0> {};
template <class C> struct fp8_scaling_of<C, std::void_t<decltype(C::FP8)>> : std::integral_constant<int, C::FP8> {};

// Launch timeline (lab: ldmoe_lab_params_t.trace): slot i of this CTA = %globaltimer (or v).
enum { kTrEntry, kTrSetup, kTrClaimed, kTrFirstData, kTrLoadsDone, kTrExit, kTrTiles, kTrSm };
__device__ __forceinline__ uint64_t globaltimer() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ void trace_at(const KParams &p, int slot, uint64_t v) {
    if (p.trace) p.trace[blockIdx.x * 8 + slot] = v;
}

// Per-tile counters (lab: ldmoe_lab_params_t.debug_tiles): how often each tile was computed, and
// by CTAs of which domains.
__device__ __forceinline__ void debug_count(const KParams &p, int64_t gid, int my_dom) {
    if (p.dbg && gid < p.dbg_cap) {
        atomicAdd(&p.dbg[gid], 1u);
        atomicOr(&p.dbg[p.dbg_cap + gid], 1u << my_dom);
    }
}

// ---- one tile ----------------------------------------------------------------------------------

// Everything a thread needs about one tile.
struct Tile {
    int64_t gid;        // global id (debug counters)
    int64_t tok0;       // first token row
    int32_t rows;       // valid tokens (<= BN)
    int32_t nrows;      // valid weight rows (<= BM)
    int32_t n0;         // first output column
    int32_t wrow_idx;   // first weight row of the tile, as a row of the [E*N, K] weight matrix
    int32_t wse;        // d*E + e: the tile's slice of its expert (packed layout)
    int32_t r0;         // first weight row of the tile within that slice
};

__device__ __forceinline__ Tile make_tile(const KParams &p, const int32_t *prefix, int BM, int BN,
                                          int mode, int64_t per_queue, int64_t tk) {
    ldmoe_tile_pos_t pos;
    if (mode == kModeAware) {
        int32_t d = (int32_t)(tk / per_queue);
        pos = ldmoe_decode_queue(prefix, p.E, p.nbs, d, tk - (int64_t)d * per_queue);
    } else {
        pos = ldmoe_decode_global(prefix, p.E, p.D, p.nbs, tk);
    }
    Tile t;
    t.gid = ldmoe_global_id(prefix, p.D, p.nbs, pos);
    const int32_t *tstart = prefix + kTStart;   // shared memory: no global load on this path
    const int64_t start = tstart[pos.e];
    const int64_t end = max(tstart[pos.e], tstart[pos.e + 1]);
    t.tok0 = start + (int64_t)pos.m * BN;
    int64_t left = end - t.tok0;
    t.rows = (int32_t)(left < BN ? left : BN);
    int32_t r0 = pos.b * BM;
    t.nrows = p.ND - r0 < BM ? p.ND - r0 : BM;
    t.n0 = pos.d * p.ND + r0;
    t.wrow_idx = (int32_t)(((int64_t)pos.d * p.E + pos.e) * p.ND + r0);
    t.wse = pos.d * p.E + pos.e;
    t.r0 = r0;
    return t;
}

}  // namespace ldmoe
