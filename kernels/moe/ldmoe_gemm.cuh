// ldmoe_gemm.cuh — the persistent grouped-GEMM kernel (mma.sync m16n8k16 bf16, sm_80+).
//
// Swap A/B: weight rows (N of the output) sit on the MMA's M side and tokens on its N side, so
// 8..64 tokens per expert do not waste the tensor cores. Operands stream through a
// kStages-deep cp.async ring (16-byte copies, 128-byte swizzled rows of 64 bf16). The ring
// never drains between tiles: loads of the next tile start while the current one computes,
// and each stage records which tile and k-step it holds.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>
#include "kernels/moe/ldmoe_sched.cuh"
#include "kernels/moe/ldmoe_wgmma_ops.cuh"

namespace ldmoe {

struct KParams {
    const __nv_bfloat16 *x;
    const __nv_bfloat16 *w;
    const int32_t *offs;
    __nv_bfloat16 *y;
    int64_t T;
    int32_t E, N, K, D, ND, nbs;   // ND = N/D rows per slice, nbs = n-blocks per slice
    int32_t mode;
    float steal_waves;
    unsigned *ctr;
    uint32_t *dbg;
    int64_t dbg_cap;
};

constexpr int kBK = 64;          // k per stage: one 128-byte row of bf16
constexpr int kRowBytes = kBK * 2;

// WG = false: mma.sync, weights on the MMA's M side (swap A/B), WARPS_M x WARPS_N warps.
// WG = true (sm_90a): two warpgroups, each one wgmma m64 x n(BM) x k16 per 16 k: tokens on the
// MMA's M side (64 per warpgroup, BN = 128), weights on its N side (BM = 128 or 256).
template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_, bool WG_ = false>
struct Cfg {
    static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
    static constexpr int STAGES = STAGES_;
    static constexpr bool WG = WG_;
    static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
    // Stages not being refilled while one computes. 1 for both paths: the wgmma path waits for
    // its k-step's group before the next barrier (wait_group 0). NOTES: keeping one group in
    // flight (wait_group 1, LAG 2) makes ptxas serialize the wgmmas (C7518), because the
    // scheduler's divergent code sits between issue and wait.
    static constexpr int LAG = 1;
    static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;   // per-warp tile
    static constexpr int MI = WM / 16, NI = WN / 8;
    static constexpr int A_BYTES = BM * kRowBytes, B_BYTES = BN * kRowBytes;
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr int EPI_LD = BM + 8;                         // padded bf16 row (tokens x n)
    static constexpr int EPI_BYTES = WG ? 0 : BN * EPI_LD * 2;   // wgmma stores from registers
    static constexpr int PREFIX_BYTES = (LDMOE_MAX_EXPERTS + 1) * 4;
    static constexpr int SMEM = 1024 + STAGES * STAGE_BYTES + EPI_BYTES + PREFIX_BYTES;  // +1 KiB: align
    static constexpr int WG_ACC = BM / 2;                         // f32 accumulators per thread
    static constexpr int A_CHUNKS = BM * 8, B_CHUNKS = BN * 8;    // 16-byte chunks per stage
    static constexpr int A_ITERS = (A_CHUNKS + THREADS - 1) / THREADS;
    static constexpr int B_ITERS = (B_CHUNKS + THREADS - 1) / THREADS;
    static_assert(WG || (WM % 16 == 0 && WN % 8 == 0), "warp tile");
    static_assert(WG || NI == 1 || NI % 2 == 0, "B fragments load in pairs");
    static_assert(!WG || (THREADS == 256 && BN == 128 && (BM == 128 || BM == 256)), "wgmma tile");
};

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
// Byte offset of 16-byte chunk c of row r in a swizzled [rows][64 bf16] tile.
__device__ __forceinline__ uint32_t swz(int r, int c) { return r * kRowBytes + ((c ^ (r & 7)) << 4); }

__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool valid) {
    int n = valid ? 16 : 0;   // src-size 0: zero-fill, nothing read
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
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
// Generic-proxy writes (cp.async) must be fenced before the async proxy (wgmma) reads them.
__device__ __forceinline__ void fence_proxy_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldsm_x4(uint32_t a, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a));
}
__device__ __forceinline__ void ldsm_x2(uint32_t a, uint32_t &r0, uint32_t &r1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(a));
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
    int32_t dom;        // slice
    const __nv_bfloat16 *wrow;   // first weight row of the tile
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
    int64_t start = pos.e ? (int64_t)__ldg(p.offs + pos.e - 1) : 0;
    int64_t end = __ldg(p.offs + pos.e);
    start = start < 0 ? 0 : (start > p.T ? p.T : start);
    end = end < start ? start : (end > p.T ? p.T : end);
    t.tok0 = start + (int64_t)pos.m * BN;
    int64_t left = end - t.tok0;
    t.rows = (int32_t)(left < BN ? left : BN);
    int32_t r0 = pos.b * BM;
    t.nrows = p.ND - r0 < BM ? p.ND - r0 : BM;
    t.n0 = pos.d * p.ND + r0;
    t.dom = pos.d;
    t.wrow = p.w + (((int64_t)pos.d * p.E + pos.e) * p.ND + r0) * p.K;
    return t;
}

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
    __shared__ int64_t s_next[2];              // claimed-ahead tickets
    __shared__ int32_t s_warp_sum[32];
    __shared__ int32_t s_domcnt[LDMOE_MAX_DOMAINS];
    __shared__ int32_t s_mode;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int E = p.E, D = p.D;

    // ---- 1. m-blocks per expert and their exclusive prefix (block-wide scan) ----
    {
        const int chunk = (E + C::THREADS - 1) / C::THREADS;
        const int lo = tid * chunk, hi = min(E, lo + chunk);
        int32_t sum = 0;
        for (int e = lo; e < hi; ++e) {
            int64_t s = e ? (int64_t)__ldg(p.offs + e - 1) : 0, f = __ldg(p.offs + e);
            s = s < 0 ? 0 : (s > p.T ? p.T : s);
            f = f < s ? s : (f > p.T ? p.T : f);
            int32_t mb = (int32_t)((f - s + C::BN - 1) / C::BN);
            prefix[e] = mb;   // temporarily the count
            sum += mb;
        }
        int32_t incl = sum;
        #pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int32_t v = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += v;
        }
        if (lane == 31) s_warp_sum[warp] = incl;
        if (tid < LDMOE_MAX_DOMAINS) s_domcnt[tid] = 0;
        __syncthreads();
        int32_t base = 0;
        for (int w2 = 0; w2 < warp; ++w2) base += s_warp_sum[w2];
        int32_t run = base + incl - sum;
        for (int e = lo; e < hi; ++e) { int32_t mb = prefix[e]; prefix[e] = run; run += mb; }
        if (tid == C::THREADS - 1) prefix[E] = run;   // last thread's running sum is the total
    }
    // ---- 2. SMs per domain in the map the kernels see (for the steal rule) ----
    const bool published = topo->magic == LDSHIM_TOPOLOGY_MAGIC;
    {
        const uint32_t nsm = published ? min(topo->num_sms, (uint32_t)LDSHIM_MAX_SMS) : gridDim.x;
        for (uint32_t s = tid; s < nsm; s += C::THREADS) {
            uint32_t d = published ? topo->sm_domain[s] : ldshim_even_domain(s, D);
            atomicAdd(&s_domcnt[d % D], 1);
        }
        if (tid == 0) {
            int m = p.mode;
            if (m == kModeAuto) m = (published && !(topo->flags & LDSHIM_TOPO_AWARE)) ? kModeUnaware : kModeAware;
            if (D == 1 && m == kModeAware) m = kModeUnaware;   // one slice: one queue
            s_mode = m;
        }
    }
    __syncthreads();
    const int mode = s_mode;
    const int64_t tiles_per_slice = (int64_t)prefix[E] * p.nbs;
    const int64_t total = tiles_per_slice * D;
    const int64_t per_queue = mode == kModeAware ? tiles_per_slice : total;
    const int my_dom = (int)(ldshim_sm_domain(topo, D) % D);

    Claimer cl;
    if (tid == 0) {
        cl.ctr = p.ctr; cl.per_queue = per_queue; cl.total = total; cl.D = D; cl.my_dom = my_dom;
        cl.mode = mode; cl.cur = 0; cl.empty_mask = 0; cl.allow_mask = 1u << my_dom;
        cl.retired = cl.last = cl.finished = false; cl.static_next = blockIdx.x;
        if (mode == kModeUnaware) cl.allow_mask = 1u;
        if (mode == kModeAware)
            for (int d = 0; d < D; ++d)
                if (ldmoe_may_steal(total, gridDim.x, p.steal_waves, s_domcnt[d])) cl.allow_mask |= 1u << d;
        s_next[0] = cl.slow_claim();
        s_next[1] = cl.slow_claim();
    }
    __syncthreads();

    // ---- 3. load side ----
    const int nk = (p.K + kBK - 1) / kBK;
    int64_t ld_tk = s_next[0];
    int ld_slot_next = 1;                 // s_next slot the load side reads at its next switch
    int ld_k = 0;
    Tile lt;
    if (ld_tk >= 0) lt = make_tile(p, prefix, C::BM, C::BN, mode, per_queue, ld_tk);
    // per-thread copy assignment, fixed across k-steps
    const __nv_bfloat16 *a_src[C::A_ITERS];
    const __nv_bfloat16 *b_src[C::B_ITERS];
    bool a_ok[C::A_ITERS], b_ok[C::B_ITERS];
    auto setup_copies = [&]() {
        #pragma unroll
        for (int i = 0; i < C::A_ITERS; ++i) {
            int idx = tid + i * C::THREADS, r = idx >> 3, c = idx & 7;
            a_ok[i] = idx < C::A_CHUNKS && r < lt.nrows;
            a_src[i] = a_ok[i] ? lt.wrow + (int64_t)r * p.K + c * 8 : p.w;
        }
        #pragma unroll
        for (int i = 0; i < C::B_ITERS; ++i) {
            int idx = tid + i * C::THREADS, r = idx >> 3, c = idx & 7;
            b_ok[i] = idx < C::B_CHUNKS && r < lt.rows;
            b_src[i] = b_ok[i] ? p.x + (lt.tok0 + r) * p.K + c * 8 : p.x;
        }
    };
    if (ld_tk >= 0) setup_copies();

    // pending split claim (thread 0)
    bool pend = false, pend_fast = false;
    int pend_slot = 0;
    int32_t pend_q = 0;
    unsigned pend_v = 0;

    auto load_stage = [&](int slot) {
        if (tid == 0) { s_ring_tk[slot] = ld_tk; s_ring_k[slot] = ld_k; }
        if (ld_tk < 0) return;
        const uint32_t a_base = smem_u32(ring + slot * C::STAGE_BYTES);
        const uint32_t b_base = a_base + C::A_BYTES;
        const int kofs = ld_k * kBK;
        #pragma unroll
        for (int i = 0; i < C::A_ITERS; ++i) {
            int idx = tid + i * C::THREADS;
            if (C::A_CHUNKS % C::THREADS == 0 || idx < C::A_CHUNKS) {
                int r = idx >> 3, c = idx & 7;
                bool ok = a_ok[i] && kofs + c * 8 < p.K;
                cp_async16(a_base + swz(r, c), ok ? a_src[i] + kofs : p.w, ok);
            }
        }
        #pragma unroll
        for (int i = 0; i < C::B_ITERS; ++i) {
            int idx = tid + i * C::THREADS;
            if (C::B_CHUNKS % C::THREADS == 0 || idx < C::B_CHUNKS) {
                int r = idx >> 3, c = idx & 7;
                bool ok = b_ok[i] && kofs + c * 8 < p.K;
                cp_async16(b_base + swz(r, c), ok ? b_src[i] + kofs : p.x, ok);
            }
        }
        if (++ld_k == nk) {   // switch the load side to the next claimed tile
            ld_k = 0;
            ld_tk = s_next[ld_slot_next];
            if (ld_tk >= 0) {
                lt = make_tile(p, prefix, C::BM, C::BN, mode, per_queue, ld_tk);
                setup_copies();
                if (tid == 0) { pend = true; pend_slot = ld_slot_next; pend_v = cl.issue(&pend_q, &pend_fast); }
            }
            ld_slot_next ^= 1;
        }
    };

    // ---- 4. compute side ----
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

    // The ticket just consumed from s_next[0] is replaced by a split claim, like every later one.
    if (tid == 0 && ld_tk >= 0) { pend = true; pend_slot = 0; pend_v = cl.issue(&pend_q, &pend_fast); }
    #pragma unroll 1
    for (int s = 0; s < C::STAGES - C::LAG; ++s) {
        // Short K can switch tiles inside the prologue: resolve each claim (and publish it with
        // a barrier) before the load side can read its slot.
        if (tid == 0 && pend) { s_next[pend_slot] = cl.resolve(pend_v, pend_q, pend_fast); pend = false; }
        __syncthreads();
        load_stage(s);
        cp_commit();
    }
    int rd = 0, wr = C::STAGES - C::LAG;

    #pragma unroll 1
    for (;;) {
        cp_wait<C::STAGES - C::LAG - 1>();
        if constexpr (C::WG) fence_proxy_async();
        // s_ring_tk[rd] was published >= 1 barrier ago; the barrier's reduction makes the exit
        // test visibly uniform, which keeps ptxas from serializing the wgmmas (C7518).
        const int64_t tk = s_ring_tk[rd];
        const bool done = __syncthreads_or(tk < 0);
        // Resolve the claim as late as possible (before the switch that follows the next one
        // reads its slot), so the atomic's latency hides behind a whole tile of loads.
        if (tid == 0 && pend && (ld_k == nk - 1 || ld_tk < 0)) {
            s_next[pend_slot] = cl.resolve(pend_v, pend_q, pend_fast);
            pend = false;
        }
        if (done) break;
        const int kstep = s_ring_k[rd];
        load_stage(wr);
        cp_commit();
        wr = wr + 1 == C::STAGES ? 0 : wr + 1;

        const uint32_t a_base = smem_u32(ring + rd * C::STAGE_BYTES);
        const uint32_t b_base = a_base + C::A_BYTES;
        if constexpr (C::WG) {
            // warpgroup wg: tokens wg*64.. (MMA A, from the B region) x all BM weight rows (MMA B)
            const uint32_t tok_base = b_base + (warp >> 2) * 64 * kRowBytes;
            wg_fence_acc(wacc);
            wg_fence();
            #pragma unroll
            for (int kk = 0; kk < kBK / 16; ++kk) {
                const int acc_in = kstep != 0 || kk != 0;   // first k of a tile starts from zero
                if constexpr (C::BM == 256) wgmma_m64n256k16(wacc, wg_desc(tok_base + kk * 32), wg_desc(a_base + kk * 32), acc_in);
                else wgmma_m64n128k16(wacc, wg_desc(tok_base + kk * 32), wg_desc(a_base + kk * 32), acc_in);
            }
            wg_commit();
            wg_fence_acc(wacc);
            wg_wait<0>();   // all four done: the stage may be refilled after the next barrier
        } else {
        #pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) {
            uint32_t af[C::MI][4], bf[C::NI][2];
            #pragma unroll
            for (int i = 0; i < C::MI; ++i) {
                int r = wm0 + i * 16 + (lane & 15), c = kk * 2 + (lane >> 4);
                ldsm_x4(a_base + swz(r, c), af[i][0], af[i][1], af[i][2], af[i][3]);
            }
            if constexpr (C::NI == 1) {
                int r = wn0 + (lane & 7), c = kk * 2 + ((lane >> 3) & 1);
                ldsm_x2(b_base + swz(r, c), bf[0][0], bf[0][1]);
            } else {
                #pragma unroll
                for (int j = 0; j < C::NI / 2; ++j) {
                    int r = wn0 + j * 16 + (lane & 7) + ((lane >> 4) << 3), c = kk * 2 + ((lane >> 3) & 1);
                    ldsm_x4(b_base + swz(r, c), bf[2 * j][0], bf[2 * j][1], bf[2 * j + 1][0], bf[2 * j + 1][1]);
                }
            }
            #pragma unroll
            for (int i = 0; i < C::MI; ++i)
                #pragma unroll
                for (int j = 0; j < C::NI; ++j) mma16816(acc[i][j], af[i], bf[j][0], bf[j][1]);
        }
        }
        rd = rd + 1 == C::STAGES ? 0 : rd + 1;

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
            if (p.dbg && tid == 0 && t.gid < p.dbg_cap) {
                atomicAdd(&p.dbg[t.gid], 1u);
                atomicOr(&p.dbg[p.dbg_cap + t.gid], 1u << my_dom);
            }
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
            if (p.dbg && tid == 0 && t.gid < p.dbg_cap) {
                atomicAdd(&p.dbg[t.gid], 1u);
                atomicOr(&p.dbg[p.dbg_cap + t.gid], 1u << my_dom);
            }
        }
    }
    cp_wait<0>();
}

}  // namespace ldmoe
