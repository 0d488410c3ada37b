// impl/all_warps.cuh — the all-warps body `grouped_mm_body` and its tile shape `Cfg`: every warp
// computes, thread 0 also loads (loader.cuh), one stage ahead of a CTA barrier per k-step.
// mma.sync everywhere, or wgmma on sm_90a without warp specialization. TMA and mbarriers make it
// sm_90+. The warp-specialized body is in warp_specialized.cuh.
//
// mma.sync (decode): weight rows on the MMA's M side, tokens on its N side (swap A/B), so 8..64
// tokens per expert do not waste the tensor cores; wgmma (prefill): tokens on M (two warpgroups
// x 64), weight rows on N (128 or 256). Every stage ends with a CTA barrier and
// wgmma.wait_group 0 there: keeping one group in flight across that barrier and the loader's
// divergent code made ptxas serialize the wgmmas (C7518). warp_specialized.cuh avoids both by
// giving loading to its own warpgroup.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>
#include "kernels/moe/impl/ptx.cuh"
#include "kernels/moe/impl/params.cuh"
#include "kernels/moe/impl/sched_setup.cuh"
#include "kernels/moe/impl/loader.cuh"
#include "kernels/moe/impl/tile.cuh"

namespace ldmoe {

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
    static constexpr int SMEM = kSmemAlignSlack + STAGES * STAGE_BYTES + EPI_BYTES + PREFIX_BYTES;
    static_assert(SMEM + kStaticSmemReserve <= kMaxSmemPerBlock, "shared memory per block");
    static constexpr bool STREAM_W = !WG && BN <= 64;            // decode: L2 hints (Loader::fill)
    static constexpr bool CLAIMER_SMEM = false;                  // scheduler state in registers (Loader)
    static constexpr int CHUNK = BN;                              // one token box per k-block
    static constexpr int WG_ACC = BM / 2;                         // f32 accumulators per thread
    static constexpr bool WARP_SPECIALIZED = false;               // grouped_mm_kernel (impl/library.cuh)
    static_assert(WG || (WM % 16 == 0 && WN % 8 == 0), "warp tile");
    static_assert(WG || NI == 1 || NI % 2 == 0, "B fragments load in pairs");
    static_assert(!WG || (THREADS == 256 && BN == 128 && (BM == 128 || BM == 256)), "wgmma tile");
};

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
        ld.start(p, prefix, sh, per_queue, total, &s_claimer);
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
            if (tid == 0) debug_count(p, t.gid, sh.my_dom);
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
            if (tid == 0) debug_count(p, t.gid, sh.my_dom);
        }
    }
}

}  // namespace ldmoe
