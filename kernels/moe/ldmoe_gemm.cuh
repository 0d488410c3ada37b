// ldmoe_gemm.cuh — what both grouped-GEMM kernel bodies share (scheduler setup, tile decoding,
// the TMA loader, PTX helpers) and the all-warps body `grouped_mm_body` (mma.sync, or wgmma on
// sm_90a without warp specialization). TMA and mbarriers make every body sm_90+.
// The warp-specialized body is in ldmoe_ws.cuh.
//
// Operands stream through a ring of STAGES shared-memory stages, each filled by 2 x KSUB TMA
// boxes (64 k x BM weight rows and 64 k x BN tokens per k-block; 128-byte rows, 128-byte
// swizzle) that complete on the stage's mbarrier; weights in the packed layout (ldmoe.h) come
// as 1-D bulk copies of the same shared-memory image instead (Loader::load_packed). One thread issues them, so the bytes in
// flight per SM are bounded by the ring, not by per-thread load slots. The ring never drains
// between tiles: loads of the next tile start while the current one computes.
//
// grouped_mm_body, mma.sync (decode): weight rows on the MMA's M side, tokens on its N side
// (swap A/B), so 8..64 tokens per expert do not waste the tensor cores; wgmma (prefill):
// tokens on M (two warpgroups x 64), weight rows on N (128 or 256). Every stage ends with a
// CTA barrier and wgmma.wait_group 0 there: keeping one group in flight across that barrier
// and the loader's divergent code made ptxas serialize the wgmmas (C7518). ldmoe_ws.cuh avoids
// both by giving loading to its own warpgroup.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include "kernels/moe/ldmoe.h"
#include "kernels/moe/ldmoe_sched.cuh"
#include "kernels/moe/ldmoe_wgmma_ops.cuh"

namespace ldmoe {

// Diagnostic build only (-DLDMOE_DIAG, `make build/diag/libldmoe.so`, never installed): tune bits
// that remove work from the warp-specialized kernels, to measure what the work costs. Results
// are wrong by design. kDiagNoMma: consumers wait for and release every stage but issue no wgmma;
// kDiagNoStore: no output stores.
#ifdef LDMOE_DIAG
constexpr uint32_t kDiagNoMma = 0x40000000u, kDiagNoStore = 0x20000000u;
#endif

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
    uint32_t tune;   // LDMOE_TUNE_* bits (ldmoe.h); 0 = default
    float steal_waves;
    unsigned *ctr;
    uint32_t *dbg;
    int64_t dbg_cap;
    uint64_t *trace;   // 8 per CTA, ldmoe_params_t.trace (NULL: off)
};

// Debug timeline (ldmoe_params_t.trace): slot i of this CTA = %globaltimer (or v).
enum { kTrEntry, kTrSetup, kTrClaimed, kTrFirstData, kTrLoadsDone, kTrExit, kTrTiles, kTrSm };
__device__ __forceinline__ uint64_t globaltimer() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ void trace_at(const KParams &p, int slot, uint64_t v) {
    if (p.trace) p.trace[blockIdx.x * 8 + slot] = v;
}

constexpr int kBK = 64;          // k per stage: one 128-byte row of bf16
// Per-launch tables in shared memory: prefix[0..E] (m-blocks before expert e) followed, at
// kTStart, by tstart[0..E] (first token row of expert e: the running maximum of offs clamped to
// [0, T], so non-decreasing; tstart[E] = the last end). Expert e owns rows tstart[e] ..
// tstart[e+1] - 1.
constexpr int kTStart = LDMOE_MAX_EXPERTS + 1;
constexpr int kSchedTableBytes = 2 * kTStart * 4;
// Static shared memory of a kernel (barriers, tickets, SchedShared) stays below this; dynamic
// plus static must fit the 227 KiB a block may use.
constexpr int kStaticSmemReserve = 1024;
constexpr int kRowBytes = kBK * 2;

// WG = false: mma.sync, weights on the MMA's M side (swap A/B), WARPS_M x WARPS_N warps.
// WG = true (sm_90a): two warpgroups, each one wgmma m64 x n(BM) x k16 per 16 k: tokens on the
// MMA's M side (64 per warpgroup, BN = 128), weights on its N side (BM = 128 or 256).
// KSUB: k-blocks of 64 per stage (one TMA box each), so one stage reads KSUB*128 contiguous
// bytes of every weight row.
template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_, bool WG_ = false, int KSUB_ = 1>
struct Cfg {
    static constexpr int KSUB = KSUB_;
    static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
    static constexpr int STAGES = STAGES_;
    static constexpr bool WG = WG_;
    static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
    static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;   // per-warp tile
    static constexpr int MI = WM / 16, NI = WN / 8;
    static constexpr int A_SUB = BM * kRowBytes, B_SUB = BN * kRowBytes;   // one k-block
    static constexpr int A_BYTES = KSUB * A_SUB, B_BYTES = KSUB * B_SUB;
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr int EPI_LD = BM + 8;                         // padded bf16 row (tokens x n)
    static constexpr int EPI_BYTES = WG ? 0 : BN * EPI_LD * 2;   // wgmma stores from registers
    static constexpr int PREFIX_BYTES = kSchedTableBytes;
    static constexpr int SMEM = 1024 + STAGES * STAGE_BYTES + EPI_BYTES + PREFIX_BYTES;  // +1 KiB: align
    static_assert(SMEM + kStaticSmemReserve <= 227 * 1024, "shared memory per block");
    static constexpr bool STREAM_W = !WG && BN <= 64;            // decode: L2 hints (Loader::fill)
    static constexpr bool CLAIMER_SMEM = false;                  // scheduler state in registers (Loader)
    static constexpr int CHUNK = BN;                              // one token box per k-block
    static constexpr int WG_ACC = BM / 2;                         // f32 accumulators per thread
    static_assert(WG || (WM % 16 == 0 && WN % 8 == 0), "warp tile");
    static_assert(WG || NI == 1 || NI % 2 == 0, "B fragments load in pairs");
    static_assert(!WG || (THREADS == 256 && BN == 128 && (BM == 128 || BM == 256)), "wgmma tile");
};

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
// Byte offset of 16-byte chunk c of row r in a swizzled [rows][64 bf16] tile.
__device__ __forceinline__ uint32_t swz(int r, int c) { return r * kRowBytes + ((c ^ (r & 7)) << 4); }

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void fence_mbar_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t ok;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
    } while (!ok);
}
// One 2-D box of a tensor map into shared memory; completes on `bar` (rows past the tensor's
// end and k past K arrive as zeros).
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, int32_t c0, int32_t c1, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
        ::"r"(dst), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
// The same with an L2 cache policy (createpolicy). Decode tiles mark token boxes evict-last (every
// weight block of the expert reads them again) and weight boxes evict-first when experts have at
// most one m-block on average (each weight byte is then read once), evict-normal otherwise (the
// expert's other m-blocks read the block again from L2).
__device__ __forceinline__ void tma_load_2d_hint(uint32_t dst, const CUtensorMap *map, int32_t c0, int32_t c1,
                                                 uint32_t bar, uint64_t policy) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%2, %3}], [%4], %5;\n"
        ::"r"(dst), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar), "l"(policy) : "memory");
}
// A contiguous global range into shared memory (packed weights); completes on `bar`. Sizes and
// addresses are multiples of 16 bytes.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"((uint64_t)src), "r"(bytes), "r"(bar) : "memory");
}
__device__ __forceinline__ void bulk_load_hint(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar,
                                               uint64_t policy) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n"
                 ::"r"(dst), "l"((uint64_t)src), "r"(bytes), "r"(bar), "l"(policy) : "memory");
}
// Fetch a kernel parameter's tensor map into the TMA unit's descriptor cache ahead of its first use.
__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap *map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)map) : "memory");
}
__device__ __forceinline__ uint64_t policy_evict_first() {
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
    return p;
}
__device__ __forceinline__ uint64_t policy_evict_normal() {
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(p));
    return p;
}
__device__ __forceinline__ uint64_t policy_evict_last() {
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(p));
    return p;
}
// Shared-memory matrix descriptor for wgmma: K-major rows of 128 bytes, 128-byte swizzle, 8-row
// core groups 1024 bytes apart (SBO); LBO is unused for swizzled K-major operands (encoded 1).
__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
__device__ __forceinline__ void wg_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void wg_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Generic-proxy accesses of shared memory are ordered before later async-proxy (TMA) ones.
__device__ __forceinline__ void fence_proxy_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void ldsm_x4(uint32_t a, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a));
}
__device__ __forceinline__ void ldsm_x2(uint32_t a, uint32_t &r0, uint32_t &r1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(a));
}
// Four 8x8 b16 matrices from registers to shared memory, each transposed: lane l's pair (row
// l/4, columns 2(l%4), +1) of matrix i lands in row 2(l%4) (+1), column l/4 of the matrix whose
// eight row addresses lanes 8i..8i+7 give.
__device__ __forceinline__ void stsm_x4_trans(uint32_t a, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n"
                 ::"r"(a), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
#endif
}
// The same without the transpose: lane l's pair lands in row l/4, columns 2(l%4), +1.
__device__ __forceinline__ void stsm_x4(uint32_t a, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};\n"
                 ::"r"(a), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
#endif
}
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
__device__ __forceinline__ uint4 lds128(uint32_t a) {
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a) : "memory");
    return v;
}
// Barrier of `threads` threads (whole warps) on hardware barrier `id` (0 is __syncthreads').
// The compiler's intrinsic, not inline asm: it is a convergent operation the compiler will not
// duplicate into the two sides of a preceding one-lane branch (with asm bar.sync after
// `if (lane == 0) ...`, compute-sanitizer's synccheck reported divergent threads there).
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
    __barrier_sync_count((unsigned)id, (unsigned)threads);
}
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

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

// ---- shared by both kernel bodies ------------------------------------------------------------

// Block-wide setup: the expert token starts (tstart, see kTStart), m-blocks per expert and their
// exclusive prefix (prefix[E] = total), SMs per domain in the map the kernels see, and the
// resolved mode. All threads call it; it ends with a barrier.
struct SchedShared {
    int32_t warp_max[32];
    int32_t warp_sum[32];
    int32_t domcnt[LDMOE_MAX_DOMAINS];
    int32_t mode;
    int32_t rank;   // this SM's rank among the SMs of its domain (unaware: of all), by g_sm_key; -1: off the map
    int32_t qranks[LDMOE_MAX_DOMAINS];   // scheduler rank tables (ldmoe_rank_tables)
    int32_t qbase[LDMOE_MAX_DOMAINS];
};

// SM order key: the position at which the hardware handed each SM a CTA in a one-CTA-per-SM probe
// launch (ldmoe_api.cu writes it once per device, on the first launch's stream). Ranks follow
// (key, smid); all zeros (not probed yet) means plain SM-id order. Only ever a performance hint:
// the scheduler stays exactly-once whatever the keys say. (Defined here; one translation unit.)
__device__ uint16_t g_sm_key[LDSHIM_MAX_SMS];

// The scheduling mode a launch runs in: AUTO is aware unless the published map says the
// placement is not (LDSHIM_TOPO_AWARE clear); one slice is one queue.
__device__ __forceinline__ int resolve_mode(int mode, bool published, uint32_t flags, int D) {
    if (mode == kModeAuto) mode = (published && !(flags & LDSHIM_TOPO_AWARE)) ? kModeUnaware : kModeAware;
    if (D == 1 && mode == kModeAware) mode = kModeUnaware;
    return mode;
}

template <int THREADS, int BN>
__device__ __forceinline__ void sched_setup(const KParams &p, const ldshim_topology_t *topo, int32_t *prefix,
                                            SchedShared &sh) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int E = p.E, D = p.D;
    const int chunk = (E + THREADS - 1) / THREADS;
    const int lo = tid * chunk, hi = min(E, lo + chunk);
    int32_t *tstart = prefix + kTStart;
    // The map's loads are issued first, before any barrier, so that their latencies overlap each
    // other's and pass 1's (offs): the header, the entry and SM key of each of this thread's SM
    // slots, and those of this CTA's SM. Used after pass 2.
    const uint32_t t_magic = topo->magic, t_num = topo->num_sms, t_flags = topo->flags, t_version = topo->version;
    constexpr int SLOTS = (LDSHIM_MAX_SMS + THREADS - 1) / THREADS;
    uint32_t slot_dom[SLOTS], slot_key[SLOTS], slot_bound[SLOTS];
    #pragma unroll
    for (int i = 0; i < SLOTS; ++i) {
        const int sl = tid + i * THREADS;
        slot_dom[i] = sl < LDSHIM_MAX_SMS ? topo->sm_domain[sl] : 0u;
        slot_key[i] = sl < LDSHIM_MAX_SMS ? g_sm_key[sl] : 0u;
        slot_bound[i] = sl < LDSHIM_MAX_SMS ? topo->sm_bound[sl] : 1u;
    }
    uint32_t me;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(me));
    const uint32_t me_slot = me < LDSHIM_MAX_SMS ? me : 0u;
    const uint32_t me_dom = topo->sm_domain[me_slot], me_key = g_sm_key[me_slot];
    // Pass 1: expert ends offs[e] clamped to [0, T] and made monotone by a running maximum (a
    // block-wide max-scan): expert e owns rows tstart[e] = max(0, ends before e) up to
    // tstart[e+1]. Valid offs are unchanged by this; with decreasing (invalid) offs every row
    // still belongs to at most one expert, so the m-block total stays <= T/BN + E (no int32
    // wrap, no row written twice).
    auto end_of = [&](int e) {
        int64_t f = __ldg(p.offs + e);
        return (int32_t)(f < 0 ? 0 : (f > p.T ? p.T : f));   // T < 2^31 (checked on the host)
    };
    int32_t cmax = 0;
    for (int e = lo; e < hi; ++e) cmax = max(cmax, end_of(e));
    int32_t imax = cmax;
    #pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int32_t v = __shfl_up_sync(0xffffffffu, imax, o);
        if (lane >= o) imax = max(imax, v);
    }
    const int32_t lane_before = __shfl_up_sync(0xffffffffu, imax, 1);
    if (lane == 31) sh.warp_max[warp] = imax;
    if (tid < LDMOE_MAX_DOMAINS) sh.domcnt[tid] = 0;
    __syncthreads();
    int32_t run_max = lane >= 1 ? lane_before : 0;   // max of the ends before this thread's chunk
    for (int w2 = 0; w2 < warp; ++w2) run_max = max(run_max, sh.warp_max[w2]);
    // Pass 2: m-blocks per expert, then their exclusive prefix (block-wide sum-scan).
    int32_t sum = 0;
    for (int e = lo; e < hi; ++e) {
        const int32_t s = run_max, f = max(s, end_of(e));
        tstart[e] = s;
        if (e == E - 1) tstart[E] = f;
        const int32_t mb = (int32_t)(((int64_t)f - s + BN - 1) / BN);
        prefix[e] = mb;   // temporarily the count
        sum += mb;
        run_max = f;
    }
    int32_t incl = sum;
    #pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int32_t v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
    }
    if (lane == 31) sh.warp_sum[warp] = incl;
    __syncthreads();
    int32_t base = 0;
    for (int w2 = 0; w2 < warp; ++w2) base += sh.warp_sum[w2];
    int32_t run = base + incl - sum;
    for (int e = lo; e < hi; ++e) { int32_t mb = prefix[e]; prefix[e] = run; run += mb; }
    if (tid == THREADS - 1) prefix[E] = run;   // last thread's running sum is the total

    const bool published = t_magic == LDSHIM_TOPOLOGY_MAGIC;
    const uint32_t nsm = min(published ? t_num : gridDim.x, (uint32_t)LDSHIM_MAX_SMS);
    // Compute binding: only the SMs the process is bound to hold ranks (a domain with none of
    // them is stolen from by everyone, ldmoe_may_steal).
    const bool bound_set = published && t_version >= 2 && (t_flags & LDSHIM_TOPO_BOUND);
    auto dom_of = [&](uint32_t s, uint32_t entry) { return (published ? entry : ldshim_even_domain(s, D)) % D; };
    // The mode decides whether ranks count per domain (aware) or over all SMs; resolve it first.
    const int m = resolve_mode(p.mode, published, t_flags, D);
    const bool on_map = me < nsm && (!bound_set || topo->sm_bound[me_slot]);
    const uint32_t my_d = on_map ? dom_of(me, me_dom) : 0u;
    const uint32_t my_key = on_map ? me_key : 0u;
    if (tid == 0) sh.rank = on_map ? 0 : -1;
    __syncthreads();
    int32_t before = 0;   // SMs of my rank group ordered before me
    #pragma unroll
    for (int i = 0; i < SLOTS; ++i) {
        const uint32_t sl = tid + i * THREADS;
        if (sl >= nsm || (bound_set && !slot_bound[i])) continue;
        const uint32_t d = dom_of(sl, slot_dom[i]);
        atomicAdd(&sh.domcnt[d], 1);
        const uint32_t k = slot_key[i];
        if (on_map && (m != kModeAware || d == my_d) && (k < my_key || (k == my_key && sl < me))) ++before;
    }
    if (on_map && before) atomicAdd(&sh.rank, before);
    __syncthreads();
    if (tid == 0) {
        sh.mode = m;
        ldmoe_rank_tables(sh.domcnt, D, m == kModeAware, sh.qranks, sh.qbase, LDMOE_MAX_DOMAINS);
    }
    __syncthreads();
}

// First k-step (of nk) that weight block `blk` is streamed from: a Fibonacci-hash (Weyl)
// sequence of the block, see Loader.
__device__ __forceinline__ int first_kstep(int32_t blk, int nk) {
    return (int)(((uint64_t)((uint32_t)blk * 2654435769u) * (uint32_t)nk) >> 32);
}

// The load side, run by one thread: claims tiles (the next tile is claimed with a split atomic at
// each tile switch and resolved a whole tile later) and fills ring stages with TMA
// boxes, one of weights and one of tokens per 64 k, completing on the stage's mbarrier.
//
// Each weight block starts at its own k offset so that the SMs do not stream the same column
// band of many rows at once (DRAM channel camping on power-of-two row strides). The offset is a
// Fibonacci-hash (Weyl) sequence of the weight block, not of the tile: the m-blocks of one
// weight block are claimed together and read the same k-steps at about the same time, so the
// block comes from HBM once and from L2 for the others.
template <class C>
struct Loader {
    TicketStream<DeviceAtomics, C::CLAIMER_SMEM> ts;
    const KParams *p;
    const int32_t *prefix;
    int64_t per_queue;
    int mode, nk;
    int64_t tk;            // tile being loaded (-1: none left)
    int k, rot;            // k-step of tk, its first k-block
    int32_t wrow, tok;     // TMA row coordinates of tk
    const char *wsrc;      // packed layout: k-block 0 of tk's rows (its first 128-row block)
    const char *wsrc2;     // BM = 256: the second 128-row block (the first again past the slice's last)
    uint32_t nbox;         // C::CHUNK-row token boxes per k-block of tk (xcls 0)
    int32_t xcls;          // token columns of tk (tiles with chunks): 0 <= BN/4 (chunks), 1 <= BN/2, 2 <= BN
    uint64_t pol_w, pol_x;   // L2 policies (C::STREAM_W)

    // early_q >= 0: a tail claim the caller made at kernel entry (value early_v; ClaimerT::preclaimed).
    __device__ void start(const KParams &kp, const int32_t *pre, const SchedShared &sh, int64_t pq, int64_t total,
                          int my_dom, ClaimerT<DeviceAtomics> *claimer, int32_t early_q = -1, unsigned early_v = 0) {
        p = &kp; prefix = pre; per_queue = pq; mode = sh.mode;
        ts.shared = claimer;   // used with C::CLAIMER_SMEM only
        nk = (kp.K + kBK * C::KSUB - 1) / (kBK * C::KSUB);
        const int D = kp.D;
        uint32_t allow = 0;
        if (mode == kModeAware)
            for (int d = 0; d < D; ++d)
                if (ldmoe_may_steal(total, gridDim.x, kp.steal_waves, sh.domcnt[d])) allow |= 1u << d;
        // Static waves pay where neighbouring tiles share a weight block (several m-blocks per
        // expert: the prefill shapes); with one m-block per expert (decode) they measured 0-2 %
        // slower than claiming every tile, so they are off there.
        const bool shared_weights = pre[kp.E] > kp.E;
        const int64_t waves = (kp.tune & LDMOE_TUNE_DYNAMIC_ONLY) || mode == kModeStatic || !shared_weights ? 0 :
            ldmoe_static_waves(total, (int32_t)gridDim.x, pq, sh.qranks, mode == kModeAware ? D : 1);
        ts.cl().init(kp.ctr, mode, D, my_dom, sh.rank, (int32_t)gridDim.x, pq, total, sh.qranks, sh.qbase, allow,
                   waves, (int32_t)blockIdx.x);
        if (early_q >= 0) ts.cl().preclaimed(early_q, early_v);
        k = 0;
        if constexpr (C::STREAM_W) {
            const bool w_first = pre[kp.E] <= kp.E && !(kp.tune & LDMOE_TUNE_WEIGHTS_NORMAL);
            pol_w = w_first ? policy_evict_first() : policy_evict_normal();
            pol_x = (kp.tune & LDMOE_TUNE_TOKENS_NORMAL) ? policy_evict_normal() : policy_evict_last();
        }
        tk = ts.first();
        set_tile();
    }
    __device__ void set_tile() {
        if (tk < 0) return;
        const Tile t = make_tile(*p, prefix, C::BM, C::BN, mode, per_queue, tk);
        wrow = t.wrow_idx;
        tok = (int32_t)t.tok0;
        if (p->packed) {
            const int32_t rb = t.r0 / LDMOE_PACK_ROWS;
            const int64_t box = ((int64_t)t.wse * p->pnb + rb) * p->pkb;
            const char *w = reinterpret_cast<const char *>(p->w);
            wsrc = w + box * LDMOE_PACK_BOX + (int64_t)(t.r0 % LDMOE_PACK_ROWS) * kRowBytes;
            wsrc2 = rb + 1 < p->pnb ? wsrc + (int64_t)p->pkb * LDMOE_PACK_BOX : wsrc;
        }
        rot = first_kstep(t.wrow_idx / C::BM, nk);
        // Chunks up to a quarter of the tile, then one half or one whole box: four 16-row boxes
        // measured 0.5-4 % slower than one 64-row box carrying the same bytes, 13-25 % under
        // skewed routing (more TMA operations per stage).
        nbox = 0;
        xcls = 2;
        if constexpr (C::CHUNK < C::BN) {
            xcls = t.rows <= C::BN / 4 ? 0 : t.rows <= C::BN / 2 ? 1 : 2;
            if (xcls == 0) nbox = (uint32_t)((t.rows + C::CHUNK - 1) / C::CHUNK);
        }
    }
    // Fill the stage at `dst` with (tk, k); tk >= 0.
    __device__ void fill(uint32_t dst, uint32_t bar) const {
        fence_proxy_async();   // earlier generic reads of this stage before the async-proxy write
        constexpr uint32_t kBox = C::CHUNK * kRowBytes;
        mbar_expect_tx(bar, (uint32_t)C::A_BYTES + (nbox ? (uint32_t)C::KSUB * nbox * kBox
                                                       : xcls == 1 ? (uint32_t)C::B_BYTES / 2 : (uint32_t)C::B_BYTES));
        int kb = k + rot;
        kb = kb >= nk ? kb - nk : kb;
        if (p->packed) load_packed(dst, bar, kb);
        #pragma unroll
        for (int sub = 0; sub < C::KSUB; ++sub) {
            const int k0 = (kb * C::KSUB + sub) * kBK;   // boxes past K arrive as zeros
            if constexpr (C::STREAM_W) {
                if (!p->packed) tma_load_2d_hint(dst + sub * C::A_SUB, &p->tm_w, k0, wrow, bar, pol_w);
                if (C::CHUNK < C::BN && nbox) {
                    #pragma unroll 1
                    for (uint32_t c = 0; c < nbox; ++c)
                        tma_load_2d_hint(dst + C::A_BYTES + sub * C::B_SUB + c * kBox, &p->tm_x, k0,
                                         tok + (int32_t)(c * C::CHUNK), bar, pol_x);
                } else if constexpr (C::CHUNK < C::BN) {
                    tma_load_2d_hint(dst + C::A_BYTES + sub * C::B_SUB, xcls == 1 ? &p->tm_xh : &p->tm_xb, k0, tok,
                                     bar, pol_x);
                } else {
                    tma_load_2d_hint(dst + C::A_BYTES + sub * C::B_SUB, &p->tm_x, k0, tok, bar, pol_x);
                }
            } else {
                if (!p->packed) tma_load_2d(dst + sub * C::A_SUB, &p->tm_w, k0, wrow, bar);
                tma_load_2d(dst + C::A_BYTES + sub * C::B_SUB, &p->tm_x, k0, tok, bar);
            }
        }
    }
    // The stage's weights from the packed layout: k-blocks kb*KSUB .. of the tile's rows, each a
    // 128-row box stored as shared memory holds it, so a BM = 128 stage is one contiguous copy of
    // KSUB boxes, a BM = 64 k-block half a box, a BM = 256 k-block two boxes. The layout pads k to
    // whole stages with zeros (ldmoe_packed_kblocks), as the tensor map's bounds would.
    __device__ void load_packed(uint32_t dst, uint32_t bar, int kb) const {
        static_assert(LDMOE_PACK_KALIGN % C::KSUB == 0, "a stage's k-blocks never cross a packed row block");
        const int64_t off = (int64_t)kb * C::KSUB * LDMOE_PACK_BOX;
        auto copy = [&](uint32_t d, const char *src, uint32_t bytes) {
            if constexpr (C::STREAM_W) bulk_load_hint(d, src, bytes, bar, pol_w);
            else bulk_load(d, src, bytes, bar);
        };
        if constexpr (C::BM == LDMOE_PACK_ROWS) {
            static_assert(C::A_SUB == LDMOE_PACK_BOX, "one box per k-block");
            copy(dst, wsrc + off, (uint32_t)C::A_BYTES);
        } else {
            static_assert(C::BM == 64 || C::BM == 2 * LDMOE_PACK_ROWS, "weight rows per tile");
            #pragma unroll
            for (int sub = 0; sub < C::KSUB; ++sub) {
                const int64_t o = off + (int64_t)sub * LDMOE_PACK_BOX;
                if constexpr (C::BM == 64) {
                    copy(dst + sub * C::A_SUB, wsrc + o, (uint32_t)C::A_SUB);
                } else {
                    copy(dst + sub * C::A_SUB, wsrc + o, LDMOE_PACK_BOX);
                    copy(dst + sub * C::A_SUB + LDMOE_PACK_BOX, wsrc2 + o, LDMOE_PACK_BOX);
                }
            }
        }
    }
    __device__ void advance() {
        if (++k < nk) return;
        k = 0;
        tk = ts.next();
        set_tile();
    }
};

__device__ __forceinline__ void debug_count(const KParams &p, int64_t gid, int my_dom) {
    if (p.dbg && gid < p.dbg_cap) {
        atomicAdd(&p.dbg[gid], 1u);
        atomicOr(&p.dbg[p.dbg_cap + gid], 1u << my_dom);
    }
}

// All threads compute; thread 0 also loads (one stage ahead of a barrier per k-step).
template <class C>
__device__ void grouped_mm_body(const KParams &p, const ldshim_topology_t *topo) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // 1024-byte aligned base: the wgmma swizzle pattern follows absolute address bits.
    unsigned char *smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    unsigned char *ring = smem;
    __nv_bfloat16 *epi = reinterpret_cast<__nv_bfloat16 *>(smem + C::STAGES * C::STAGE_BYTES);
    int32_t *prefix = reinterpret_cast<int32_t *>(smem + C::STAGES * C::STAGE_BYTES + C::EPI_BYTES);
    __shared__ int64_t s_ring_tk[C::STAGES];   // tile ticket held by each stage (-1: none)
    __shared__ int32_t s_ring_k[C::STAGES];    // k-step held by each stage
    __shared__ ClaimerT<DeviceAtomics> s_claimer;   // thread 0's scheduler state (C::CLAIMER_SMEM)
    __shared__ __align__(8) uint64_t s_full[C::STAGES];   // stage landed (TMA transaction count)
    __shared__ SchedShared sh;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int E = p.E, D = p.D;
    sched_setup<C::THREADS, C::BN>(p, topo, prefix, sh);
    const int mode = sh.mode;
    const int64_t tiles_per_slice = (int64_t)prefix[E] * p.nbs;
    const int64_t total = tiles_per_slice * D;
    const int64_t per_queue = mode == kModeAware ? tiles_per_slice : total;
    const int my_dom = (int)(ldshim_sm_domain(topo, D) % D);
    const int nk = (p.K + kBK * C::KSUB - 1) / (kBK * C::KSUB);   // stages per tile

    Loader<C> ld{};   // used by thread 0 only
    auto load_stage = [&](int slot) {
        s_ring_tk[slot] = ld.tk;
        s_ring_k[slot] = ld.k;
        if (ld.tk < 0) return;
        ld.fill(smem_u32(ring + slot * C::STAGE_BYTES), smem_u32(&s_full[slot]));
        ld.advance();
    };
    if (tid == 0) {
        for (int st = 0; st < C::STAGES; ++st) mbar_init(smem_u32(&s_full[st]), 1);
        fence_mbar_init();
        ld.start(p, prefix, sh, per_queue, total, my_dom, &s_claimer);
    }

    // ---- compute side ----
    const int wm0 = (warp / C::WARPS_N) * C::WM;   // weight-row offset of this warp
    const int wn0 = (warp % C::WARPS_N) * C::WN;   // token offset of this warp
    float acc[C::WG ? 1 : C::MI][C::WG ? 1 : C::NI][4];   // mma.sync accumulators
    float wacc[C::WG ? C::WG_ACC : 1];                     // wgmma accumulators
    #pragma unroll
    for (int i = 0; i < (C::WG ? 1 : C::MI); ++i)
        #pragma unroll
        for (int j = 0; j < (C::WG ? 1 : C::NI); ++j)
            #pragma unroll
            for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.f;
    #pragma unroll
    for (int i = 0; i < (C::WG ? C::WG_ACC : 1); ++i) wacc[i] = 0.f;

    if (tid == 0)
        for (int st = 0; st < C::STAGES - 1; ++st) load_stage(st);
    __syncthreads();   // mbarrier init and the prologue's stage tickets are visible
    int rd = 0, wr = C::STAGES - 1;
    uint32_t phase = 0;   // parity of the current fill of stage rd

    #pragma unroll 1
    for (;;) {
        // s_ring_tk[rd] was published >= 1 barrier ago. The barrier also orders every thread's
        // reads of stage wr (computed last iteration) before thread 0 refills it. Its reduction
        // makes the exit test visibly uniform, which keeps ptxas from serializing the wgmmas.
        const int64_t tk = s_ring_tk[rd];
        const bool done = __syncthreads_or(tk < 0);
        if (done) break;
        const int kstep = s_ring_k[rd];
        if (tid == 0) load_stage(wr);
        wr = wr + 1 == C::STAGES ? 0 : wr + 1;
        mbar_wait(smem_u32(&s_full[rd]), phase);

        const uint32_t a_base = smem_u32(ring + rd * C::STAGE_BYTES);
        const uint32_t b_base = a_base + C::A_BYTES;
        if constexpr (C::WG) {
            // warpgroup wg: tokens wg*64.. (MMA A, from the B region) x all BM weight rows (MMA B)
            wg_fence_acc(wacc);
            wg_fence();
            #pragma unroll
            for (int sub = 0; sub < C::KSUB; ++sub) {
                const uint32_t tok_base = b_base + sub * C::B_SUB + (warp >> 2) * 64 * kRowBytes;
                const uint32_t w_base = a_base + sub * C::A_SUB;
                #pragma unroll
                for (int kk = 0; kk < kBK / 16; ++kk) {
                    const int acc_in = kstep != 0 || sub != 0 || kk != 0;   // a tile's first k starts from zero
                    wgmma_m64k16<C::BM>(wacc, wg_desc(tok_base + kk * 32), wg_desc(w_base + kk * 32), acc_in);
                }
            }
            wg_commit();
            wg_fence_acc(wacc);
            wg_wait<0>();   // this stage's wgmmas done: it may be refilled after the next barrier
        } else {
        #pragma unroll
        for (int kq = 0; kq < C::KSUB * kBK / 16; ++kq) {
            const int kk = kq & 3;
            const uint32_t a_sub = a_base + (kq >> 2) * C::A_SUB, b_sub = b_base + (kq >> 2) * C::B_SUB;
            uint32_t af[C::MI][4], bf[C::NI][2];
            #pragma unroll
            for (int i = 0; i < C::MI; ++i) {
                int r = wm0 + i * 16 + (lane & 15), c = kk * 2 + (lane >> 4);
                ldsm_x4(a_sub + swz(r, c), af[i][0], af[i][1], af[i][2], af[i][3]);
            }
            if constexpr (C::NI == 1) {
                int r = wn0 + (lane & 7), c = kk * 2 + ((lane >> 3) & 1);
                ldsm_x2(b_sub + swz(r, c), bf[0][0], bf[0][1]);
            } else {
                #pragma unroll
                for (int j = 0; j < C::NI / 2; ++j) {
                    int r = wn0 + j * 16 + (lane & 7) + ((lane >> 4) << 3), c = kk * 2 + ((lane >> 3) & 1);
                    ldsm_x4(b_sub + swz(r, c), bf[2 * j][0], bf[2 * j][1], bf[2 * j + 1][0], bf[2 * j + 1][1]);
                }
            }
            #pragma unroll
            for (int i = 0; i < C::MI; ++i)
                #pragma unroll
                for (int j = 0; j < C::NI; ++j) mma16816(acc[i][j], af[i], bf[j][0], bf[j][1]);
        }
        }
        if (++rd == C::STAGES) { rd = 0; phase ^= 1; }

        if constexpr (C::WG) {
          if (kstep == nk - 1) {   // ---- wgmma epilogue: bf16x2 stores from registers ----
            const Tile t = make_tile(p, prefix, C::BM, C::BN, mode, per_queue, tk);
            wg_wait<0>();
            wg_fence_acc(wacc);
            const int g = lane >> 2, q = lane & 3;
            const int tt = (warp >> 2) * 64 + (warp & 3) * 16 + g;
            #pragma unroll
            for (int j = 0; j < (C::WG ? C::WG_ACC / 4 : 0); ++j) {
                const int n = j * 8 + 2 * q;
                if (n < t.nrows) {
                    if (tt < t.rows)
                        *reinterpret_cast<__nv_bfloat162 *>(p.y + (t.tok0 + tt) * p.N + t.n0 + n) =
                            __floats2bfloat162_rn(wacc[4 * j], wacc[4 * j + 1]);
                    if (tt + 8 < t.rows)
                        *reinterpret_cast<__nv_bfloat162 *>(p.y + (t.tok0 + tt + 8) * p.N + t.n0 + n) =
                            __floats2bfloat162_rn(wacc[4 * j + 2], wacc[4 * j + 3]);
                }
            }
            if (tid == 0) debug_count(p, t.gid, my_dom);
          }
        } else if (kstep == nk - 1) {   // ---- epilogue: stage through smem, 16-byte coalesced stores ----
            const Tile t = make_tile(p, prefix, C::BM, C::BN, mode, per_queue, tk);
            const int g = lane >> 2, q = lane & 3;
            #pragma unroll
            for (int i = 0; i < C::MI; ++i)
                #pragma unroll
                for (int j = 0; j < C::NI; ++j) {
                    int n = wm0 + i * 16 + g, tt = wn0 + j * 8 + 2 * q;
                    epi[tt * C::EPI_LD + n] = __float2bfloat16_rn(acc[i][j][0]);
                    epi[(tt + 1) * C::EPI_LD + n] = __float2bfloat16_rn(acc[i][j][1]);
                    epi[tt * C::EPI_LD + n + 8] = __float2bfloat16_rn(acc[i][j][2]);
                    epi[(tt + 1) * C::EPI_LD + n + 8] = __float2bfloat16_rn(acc[i][j][3]);
                    acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;
                }
            __syncthreads();
            constexpr int CHUNKS = C::BN * (C::BM / 8);
            #pragma unroll 4
            for (int idx = tid; idx < CHUNKS; idx += C::THREADS) {
                int tt = idx / (C::BM / 8), c = idx % (C::BM / 8);
                if (tt < t.rows && c * 8 < t.nrows) {
                    uint4 v = *reinterpret_cast<const uint4 *>(epi + tt * C::EPI_LD + c * 8);
                    *reinterpret_cast<uint4 *>(p.y + (t.tok0 + tt) * p.N + t.n0 + c * 8) = v;
                }
            }
            if (tid == 0) debug_count(p, t.gid, my_dom);
        }
    }
}

}  // namespace ldmoe
