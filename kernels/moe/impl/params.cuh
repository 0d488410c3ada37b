// impl/params.cuh — what every kernel body shares about one launch: the constants of the
// shared-memory layout, the kernel's parameter block (KParams) with its optional outputs (per-tile
// counters, a launch timeline) and variant bits (impl/variants.h). A tile ticket becomes rows and
// columns in impl/tile.cuh.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <type_traits>
#include "kernels/moe/ldmoe.h"
#include "kernels/moe/ldmoe_tiles.h"
#include "kernels/moe/impl/variants.h"

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

// ---- variants and diagnostics ----------------------------------------------------------------
// KParams::tune holds the variant bits of impl/variants.h (0, the tuned default, from libldmoe's
// entry points). A tile shape C with `static constexpr bool DIAG = true` also compiles the
// diagnostic bits' code (LDMOE_TUNE_DIAG_*); every other shape compiles none of it.
template <class C, class = void> struct diag_of : std::false_type {};
template <class C> struct diag_of<C, std::void_t<decltype(C::DIAG)>> : std::bool_constant<C::DIAG> {};

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
    uint32_t tune;      // LDMOE_TUNE_* bits (impl/variants.h); 0 = the tuned default
    float steal_waves;
    unsigned *ctr;
    uint32_t *dbg;      // per-tile counters, 2 * dbg_cap words (debug_count; NULL: off)
    int64_t dbg_cap;
    uint64_t *trace;    // launch timeline, 8 words per CTA (trace_at; NULL: off)
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

// Launch timeline (KParams::trace): slot i of this CTA = %globaltimer (or v).
enum { kTrEntry, kTrSetup, kTrClaimed, kTrFirstData, kTrLoadsDone, kTrExit, kTrTiles, kTrSm };
__device__ __forceinline__ uint64_t globaltimer() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ void trace_at(const KParams &p, int slot, uint64_t v) {
    if (p.trace) p.trace[blockIdx.x * 8 + slot] = v;
}

// Per-tile counters (KParams::dbg): how often each tile was computed, and by CTAs of which
// domains.
__device__ __forceinline__ void debug_count(const KParams &p, int64_t gid, int my_dom) {
    if (p.dbg && gid < p.dbg_cap) {
        atomicAdd(&p.dbg[gid], 1u);
        atomicOr(&p.dbg[p.dbg_cap + gid], 1u << my_dom);
    }
}

}  // namespace ldmoe
