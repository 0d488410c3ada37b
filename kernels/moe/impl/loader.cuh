// impl/loader.cuh — the load side of both kernel bodies, run by one thread: it claims tiles
// (scheduler.cuh) and fills the ring of shared-memory stages with TMA boxes, or with bulk copies
// of packed weights.
//
// Operands stream through a ring of STAGES shared-memory stages, each filled by 2 x KSUB TMA
// boxes (64 k x BM weight rows and 64 k x BN tokens per k-block; 128-byte rows, 128-byte
// swizzle) that complete on the stage's mbarrier; weights in the packed layout (ldmoe.h) come
// as 1-D bulk copies of the same shared-memory image instead (Loader::load_packed). One thread
// issues them, so the bytes in flight per SM are bounded by the ring, not by per-thread load
// slots. The ring never drains between tiles: loads of the next tile start while the current one
// computes.
#pragma once
#include <stdint.h>
#include "kernels/moe/impl/ptx.cuh"
#include "kernels/moe/impl/params.cuh"
#include "kernels/moe/impl/sched_setup.cuh"
#include "kernels/moe/impl/tile.cuh"

namespace ldmoe {

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
// FP8: where set_tile leaves the tile it decoded, for the consumers (shared memory). A base
// class, empty for bf16, so that the bf16 loader's layout, and with it those kernels' machine
// code, stays as it was.
template <bool kFp8> struct LoaderRec {};
template <> struct LoaderRec<true> { Tile *rec; };

template <class C>
struct Loader : LoaderRec<fp8_scaling_of<C>::value != 0> {
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
    int32_t wsc;           // FP8 block scales: w_scale element of tk's first row block, K block 0
    static constexpr bool kBlockScales = fp8_scaling_of<C>::value == LDMOE_FP8_BLOCK;

    // sh: the setup's results (sched_setup): mode, ranks, this SM's domain and, in sh.early_q >= 0,
    // a tail claim the setup made (ClaimerT::preclaimed).
    __device__ void start(const KParams &kp, const int32_t *pre, const SchedShared &sh, int64_t pq, int64_t total,
                          ClaimerT<DeviceAtomics> *claimer, Tile *next_rec = nullptr) {
        p = &kp; prefix = pre; per_queue = pq; mode = sh.mode;
        if constexpr (fp8_scaling_of<C>::value != 0) this->rec = next_rec;
        ts.shared = claimer;   // used with C::CLAIMER_SMEM only
        nk = (kp.K + kBK * C::KSUB - 1) / (kBK * C::KSUB);
        const int D = kp.D;
        uint32_t allow = 0;
        if (mode == kModeAware)
            for (int d = 0; d < D; ++d)
                if (ldmoe_may_steal(total, gridDim.x, kp.steal_waves, sh.domcnt[d])) allow |= 1u << d;
        // Static waves pay where neighbouring tiles share a weight block (several m-blocks per
        // expert: the prefill shapes); with one m-block per expert (decode) they only cost the
        // balance of the dynamic claims, so they are off there (doc/moe.md).
        const bool shared_weights = pre[kp.E] > kp.E;
        const int64_t waves = (kp.tune & LDMOE_TUNE_DYNAMIC_ONLY) || mode == kModeStatic || !shared_weights ? 0 :
            ldmoe_static_waves(total, (int32_t)gridDim.x, pq, sh.qranks, mode == kModeAware ? D : 1);
        // The last wave's claims wait for the tile's end in the FP8 kernels where experts have
        // several m-blocks (prefill): the claim's latency hides under a ring of long stages, and
        // the last tiles go to the CTAs that free up first instead of to those that asked a tile
        // earlier. Measured, not derived: decode stages are short enough that the wait shows, and
        // the bf16 prefill tile lost as much as the FP8 ones gained (doc/moe.md), so both keep
        // the claim one tile ahead.
        constexpr bool kFp8 = fp8_scaling_of<C>::value != 0;
        ts.late_tail = (kp.tune & LDMOE_TUNE_LATE_TAIL) || (kFp8 && shared_weights && !(kp.tune & LDMOE_TUNE_EARLY_TAIL));
        ts.cl().init(kp.ctr, mode, D, sh.my_dom, sh.rank, (int32_t)gridDim.x, pq, total, sh.qranks, sh.qbase, allow,
                   waves, (int32_t)blockIdx.x);
        if (sh.early_q >= 0) ts.cl().preclaimed(sh.early_q, sh.early_v);
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
        if constexpr (fp8_scaling_of<C>::value != 0) *this->rec = t;
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
        if constexpr (kBlockScales) {
            const KParamsF8 &f = static_cast<const KParamsF8 &>(*p);
            wsc = f.ws0 + (int32_t)ldmoe_fp8_block_wscale_index(p->ND, f.K8, t.wse, t.r0, 0);
        }
        // Chunks up to a quarter of the tile, then one half or one whole box: beyond that, more
        // small boxes cost more TMA operations per stage than the one larger box carrying the same
        // bytes (doc/moe.md).
        nbox = 0;
        xcls = 2;
        if constexpr (C::CHUNK < C::BN) {
            xcls = t.rows <= C::BN / 4 ? 0 : t.rows <= C::BN / 2 ? 1 : 2;
            if (xcls == 0) nbox = (uint32_t)((t.rows + C::CHUNK - 1) / C::CHUNK);
        }
    }
    // Fill the stage at `dst` with (tk, k); tk >= 0. `scl`: the stage's scale slot (FP8 block
    // scales, Fp8Cfg), which gets the scales of the stage's k-blocks in the same transaction.
    __device__ void fill(uint32_t dst, uint32_t bar, [[maybe_unused]] uint32_t scl = 0) const {
        fence_proxy_async();   // earlier generic reads of this stage before the async-proxy write
        constexpr uint32_t kBox = C::CHUNK * kRowBytes;
        bool no_x = false;
        if constexpr (diag_of<C>::value)
            no_x = C::STREAM_W && ((p->tune & LDMOE_TUNE_DIAG_NO_TOKENS) || ((p->tune & LDMOE_TUNE_DIAG_HALF_TOKENS) && (k & 1)));
        uint32_t scl_bytes = 0;
        if constexpr (kBlockScales) scl_bytes = C::SCL_TX;
        mbar_expect_tx(bar, (uint32_t)C::A_BYTES + scl_bytes +
                                (no_x ? 0u : nbox ? (uint32_t)C::KSUB * nbox * kBox
                                           : xcls == 1 ? (uint32_t)C::B_BYTES / 2 : (uint32_t)C::B_BYTES));
        int kb = k + rot;
        kb = kb >= nk ? kb - nk : kb;
        if constexpr (kBlockScales) load_scales(scl, bar, kb);
        if (p->packed) load_packed(dst, bar, kb);
        #pragma unroll
        for (int sub = 0; sub < C::KSUB; ++sub) {
            if (no_x) {
                if (!p->packed) tma_load_2d_hint(dst + sub * C::A_SUB, &p->tm_w, (kb * C::KSUB + sub) * kBK, wrow, bar, pol_w);
                continue;
            }
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
    // The block scales of k-step kb (Fp8Cfg's scale slot): per k-block the tile's token scales
    // (x_scale [KB, T] row kb from token tok; past the tensor's end zeros), and per 128-row block a
    // line with the weight scales of K blocks kb*KSUB ..; each box from the 16-byte aligned element
    // at or below the first one wanted, as TMA requires of a box's innermost coordinate. What the
    // boxes hold beyond the tile's tokens or K blocks belongs to other rows (or is zero) and only
    // meets columns that are never stored, or k-blocks whose operands are zero.
    __device__ void load_scales(uint32_t scl, uint32_t bar, int kb) const {
        const KParamsF8 &f = static_cast<const KParamsF8 &>(*p);
        #pragma unroll
        for (int sub = 0; sub < C::KSUB; ++sub) {
            const int32_t c = f.xs0 + (kb * C::KSUB + sub) * (int32_t)p->T + tok;
            tma_load_1d(scl + sub * C::XS_PITCH, &f.tm_xs, c & ~3, bar);
        }
        #pragma unroll
        for (int m = 0; m < C::MIB; ++m)
            tma_load_1d(scl + C::SCL_X + m * 128, &f.tm_ws, (wsc + m * f.KB + kb * C::KSUB) & ~3, bar);
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

}  // namespace ldmoe
