// impl/warp_specialized.cuh — warp-specialized wgmma body of the grouped GEMM (sm_90a) and its
// tile shape `WsCfg`.
//
// Three warpgroups per CTA (one CTA per SM). Warpgroup 0 is the producer: one thread claims tiles
// and fills a ring of shared-memory stages with TMA boxes, or bulk copies of packed weights
// (Loader, loader.cuh). The rest of warp 0 leaves; warps 1-3 leave too, or, with epilogue warps (EPIW), store each finished tile
// from shared memory (in the prefill orientation the warpgroup first gives registers to the
// consumers with setmaxnreg). Warpgroups 1 and 2 are the consumers: each issues wgmma for its
// half of the tile and keeps one wgmma group in flight while it waits for the next stage.
//
// Epilogues: decode tiles where it fits stage the output in shared memory per consumer
// warpgroup and write whole lines (store_staged; named barriers 1 and 2); prefill with EPIW hands
// a copy of the tile to the epilogue warps (named barriers 3 and 4); otherwise registers are
// stored directly. LDMOE_TUNE_SCALAR_EPILOGUE selects the direct stores at run time.
//
// Two mbarriers per stage. full[s] completes when the producer's arrive (with the stage's byte
// count) and the TMA bytes have landed; the producer writes the stage's tile ticket to shared
// memory before that arrive, so a consumer that saw the phase complete reads it.
// empty[s] completes when all eight consumer warps have finished the wgmmas that read stage s
// (one arrive per warp after wgmma.wait_group). The producer starts on empty's "previous" phase
// (parity 1 of a fresh barrier reads as complete), so the first pass through the ring does not
// wait. No CTA waits on another one (Claimer), so a partly resident grid cannot deadlock.
//
// When the claimer runs dry the producer publishes ticket -1 in the next stage and arrives on
// its full barrier without bytes; consumers see it and leave.
//
// Orientations:
//   WA = false (prefill): tokens on the MMA's M side (64 per consumer warpgroup, BN = 128),
//       weights on its N side (BM = 128 or 256 rows).
//   WA = true (decode):   weights on M (64 or 128 rows per consumer warpgroup, BM = 128 or 256),
//       tokens on N (BN = 16..128), so a handful of tokens per expert does not waste the tensor
//       cores; the larger BM reads each token block from L2 for twice as many weight rows.
#pragma once
#include <type_traits>
#include "kernels/moe/impl/ptx.cuh"
#include "kernels/moe/impl/params.cuh"
#include "kernels/moe/impl/sched_setup.cuh"
#include "kernels/moe/impl/loader.cuh"
#include "kernels/moe/impl/tile.cuh"

namespace ldmoe {

// EPIW_ (prefill only): epilogue warps. Warps 1..3 of the producer warpgroup store each tile's
// output from a shared-memory copy while the consumers go on with the next tile (see
// epilogue_warps), at the price of the ring stage the 64 KiB copy displaces.
// CHUNK_ (decode only; 0 = BN): rows of a token box. With CHUNK < BN a tile loads only the tokens
// it has: up to BN/4 of them as ceil(rows / CHUNK) boxes, up to BN/2 as one half-tile box, else
// one BN-row box (Loader::set_tile), each where a BN-row box would put its rows; and its wgmmas
// span only BN/4, BN/2 or BN columns to match (the first columns of the accumulators, whose layout
// is the same for every n). So a tile sized for the busiest expert costs the others neither token
// traffic nor tensor work. Columns past a tile's tokens are never stored.
template <int BM_, int BN_, int STAGES_, int KSUB_, bool WA_, bool EPIW_ = false, int CHUNK_ = 0>
struct WsCfg {
    static constexpr int BM = BM_, BN = BN_, STAGES = STAGES_, KSUB = KSUB_;
    static constexpr bool WA = WA_, EPIW = EPIW_;
    static constexpr int CHUNK = CHUNK_ ? CHUNK_ : BN_;
    static_assert(!EPIW || !WA, "epilogue warps: prefill orientation");
    static_assert(CHUNK == BN || (WA && (BN / 4) % CHUNK == 0 && CHUNK % 8 == 0 && (BN / 4) % 8 == 0),
                  "token boxes: decode orientation, whole 1024-byte swizzle atoms, chunks fill BN/4");
    static constexpr int THREADS = 384;                       // producer + two consumer warpgroups
    static constexpr bool WARP_SPECIALIZED = true;            // grouped_mm_ws_kernel (impl/library.cuh)
    static constexpr int A_SUB = BM * kRowBytes, B_SUB = BN * kRowBytes;   // one k-block
    static constexpr int A_BYTES = KSUB * A_SUB, B_BYTES = KSUB * B_SUB;
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr int PREFIX_BYTES = kSchedTableBytes;
    static constexpr int MMA_N = WA ? BN : BM;                // wgmma n per consumer warpgroup
    static constexpr int MI = WA ? BM / 128 : 1;              // m64 blocks per consumer warpgroup
    static constexpr int ACC = MMA_N / 2;                     // f32 accumulators per thread and block
    // Staged epilogue (decode orientation): each consumer warpgroup transposes its accumulators
    // into a [BN tokens][MI*64 weight rows] bf16 block in shared memory (stmatrix .trans; rows
    // padded by 16 bytes so the eight row addresses of a matrix hit distinct banks), then writes
    // whole 128-byte output lines with 16-byte stores. Only where the block fits next to the ring.
    // The block holds at most 64 tokens; a wider tile goes through it in passes of 64 (the 18 KiB
    // a whole 128-token block per warpgroup would take buy a sixth ring stage instead).
    static constexpr int EPI_PITCH = MI * 64 * 2 + 16;
    static constexpr int EPI_ROWS = BN < 64 ? BN : 64;
    static constexpr int EPI_WG = EPI_ROWS * EPI_PITCH;
    static constexpr bool EPI_STAGED =
        WA && BN % 16 == 0 &&
        kSmemAlignSlack + STAGES * STAGE_BYTES + 2 * EPI_WG + PREFIX_BYTES + kStaticSmemReserve <= kMaxSmemPerBlock;
    // Epilogue warps' copy of a tile: [BN tokens][BM weight rows] bf16, 16-byte chunks XOR-swizzled
    // by token row (chunk c of row r at c ^ (r % 8)), so stmatrix and the row reads hit distinct banks.
    static constexpr int EPIW_ROW = BM * 2;
    static constexpr int EPI_BYTES = EPIW ? BN * EPIW_ROW : EPI_STAGED ? 2 * EPI_WG : 0;
    static constexpr int SMEM = kSmemAlignSlack + STAGES * STAGE_BYTES + EPI_BYTES + PREFIX_BYTES;
    // Register split (setmaxnreg) for the prefill orientation. The CTA is launched holding
    // 168 registers per thread (__launch_bounds__(384, 1)); setmaxnreg only moves registers
    // between its warpgroups, so 128 x producer + 256 x consumer must not exceed 384 x 168, or
    // the consumers' increase waits forever. Decode tiles fit in the 168 they start with.
    static constexpr bool SPLIT_REGS = !WA;
    // The producer's 56 registers (SPLIT_REGS) cannot hold the scheduler state too (it spilled):
    // keep it in shared memory there; decode tiles have registers to spare.
    static constexpr bool CLAIMER_SMEM = SPLIT_REGS;
    static constexpr bool STREAM_W = WA;   // decode: weights evict-first, tokens evict-last in L2
    static constexpr int LAUNCH_REGS = 168, PRODUCER_REGS = 56, CONSUMER_REGS = 224;
    static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= THREADS * LAUNCH_REGS, "setmaxnreg budget");
    static_assert(WA ? (BM == 128 || BM == 256) : BN == 128, "each consumer warpgroup owns 64 x MI rows of the MMA's M side");
    static_assert(MMA_N % 8 == 0 && MMA_N >= 8 && MMA_N <= 256, "wgmma n");
    static_assert(STAGE_BYTES % 1024 == 0 && A_SUB % 1024 == 0 && B_SUB % 1024 == 0,
                  "swizzle atoms stay 1024-byte aligned");
    static_assert(SMEM + kStaticSmemReserve <= kMaxSmemPerBlock, "shared memory per block");
};

// FP8 tiles (ldmoe_grouped_mm_fp8): a WsCfg shape with e4m3 operands and scaling scheme SCALING
// (enum ldmoe_fp8_scaling). The stages hold the same bytes as the bf16 shape's, so a k-block is
// 128 k instead of 64: the producer and the ring are the bf16 ones over rows of K/2 bf16-sized
// elements (KParamsF8); only the consumers' math differs (run_tile_fp8 in grouped_mm_ws_body).
template <class Base, int SCALING>
struct Fp8Cfg : Base {
    static constexpr int FP8 = SCALING;
    // The promotion sums double the accumulators, and the block scales add the per-column
    // scales: at 168 registers the block-scaled tiles spilled (64 bytes with 128 token columns,
    // 8 with 64), so they take the prefill tiles' setmaxnreg split (producer 56, consumers 224)
    // and keep the producer's scheduler state in shared memory; so does the 256-row tile (two
    // m64 blocks of sums per thread). moe.mk checks their launch registers as for prefill.
    static constexpr bool SPLIT_REGS = SCALING == LDMOE_FP8_BLOCK || Base::MI > 1;
    static constexpr bool CLAIMER_SMEM = SPLIT_REGS;
    // The 256x128 tile's consumers hold two blocks of sums and a set of accumulators (192
    // registers) besides their addresses: at 224 they spilled more than at 232, where a few
    // bytes remain (build/moe-ptxas.log), so its producer gives up more. With 64 token columns
    // (two sets of sums and of accumulators, 128 registers) the usual split leaves both sides room.
    static constexpr bool WIDE_SUMS = Base::MI > 1 && Base::MMA_N > 64;
    static constexpr int PRODUCER_REGS = WIDE_SUMS ? 40 : Base::PRODUCER_REGS;
    static constexpr int CONSUMER_REGS = WIDE_SUMS ? 232 : Base::CONSUMER_REGS;
    static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= Base::THREADS * Base::LAUNCH_REGS, "setmaxnreg budget");
    // Block scales travel with the operands: each ring stage has a scale slot, after the scheduler
    // table, that the producer fills with TMA boxes counted in the stage's bytes (Loader::fill):
    // per k-block a row with the tile's BN token scales, then per 128-row block of the tile a line
    // with the weight scales of the stage's K blocks. The consumers only read the slot of the stage
    // they wait for and hand both back together, so no scale load or barrier of their own is left
    // in the k loop. A box starts at a 16-byte aligned element (TMA requires it of the innermost
    // coordinate), so a row holds BN + 4 scales from the aligned one at or below the tile's first
    // token (offset 0..3, computed by both sides), a line 8 weight scales (offset 0..3, KSUB <= 4
    // of them used); rows and lines start 128-byte aligned, as TMA's shared-memory side needs.
    static constexpr int MIB = Base::BM / LDMOE_FP8_BLOCK_ROWS;   // 128-row scale blocks per tile
    static constexpr int XS_BOX = Base::BN + 4, WS_BOX = 8;       // floats per token row / weight line
    static constexpr int XS_PITCH = (XS_BOX * 4 + 127) / 128 * 128;
    static constexpr int SCL_X = Base::KSUB * XS_PITCH;
    static constexpr int SCL_STAGE = SCALING == LDMOE_FP8_BLOCK ? SCL_X + MIB * 128 : 0;
    static constexpr int SCL_TX = Base::KSUB * XS_BOX * 4 + MIB * WS_BOX * 4;   // bytes the boxes bring
    static constexpr int SCL_OFF =
        (Base::STAGES * Base::STAGE_BYTES + Base::EPI_BYTES + Base::PREFIX_BYTES + 127) / 128 * 128;
    static constexpr int SMEM = SCALING == LDMOE_FP8_BLOCK ? kSmemAlignSlack + SCL_OFF + Base::STAGES * SCL_STAGE
                                                           : Base::SMEM;
    static_assert(SMEM + kStaticSmemReserve <= kMaxSmemPerBlock, "shared memory per block (FP8 scale slots)");
    static_assert(Base::KSUB <= 4 && XS_BOX <= 256 && (XS_BOX * 4) % 16 == 0,
                  "a weight line covers the stage's K blocks from any offset; token boxes within TMA's limits");
    static_assert(Base::WA && !Base::EPIW, "FP8: decode-orientation tiles (weights on the MMA's M side)");
    static_assert(Base::BM % LDMOE_FP8_BLOCK_ROWS == 0 && Base::MI * 64 <= LDMOE_FP8_BLOCK_ROWS,
                  "a consumer warpgroup's weight rows lie in one block of the block scales");
    static_assert(kRowBytes == LDMOE_FP8_BLOCK_K, "a k-block of e4m3 is one K block of the block scales");
};
// Hardware barriers 1 and 2: one per consumer warpgroup (staged decode epilogue).
constexpr int kStagedBar = 1;

// Staged epilogue of one consumer warpgroup (decode orientation, C::EPI_STAGED): acc holds
// weight rows (cw*MI + mi)*64 + 16*(warp%4) + {g, g+8} x tokens 8j + {2q, 2q+1} of the tile
// (g = lane/4, q = lane%4; wgmma's accumulator layout). Each 8x8 (8 weight rows x 8 tokens)
// matrix goes to shared memory transposed, so rows there are tokens; then the warpgroup writes
// its MI*64 output columns of each valid token row as 16-byte chunks (whole 128-byte lines).
// `buf` is this warpgroup's block, `wt` the thread's index in the warpgroup.
template <class C, int NA = C::ACC>
__device__ __forceinline__ void store_staged(const KParams &p, const Tile &t, const float (&acc)[C::MI][NA],
                                             uint32_t buf, int cw, int wt) {
    const int lane = wt & 31, wq = wt >> 5;
    const int mat = lane >> 3, r = lane & 7;   // this lane gives row r of matrix `mat`
    // N and N/D are multiples of 8 (host check) and so are n0 and BM, so a 16-byte chunk is
    // either all valid output columns or none, and 16-byte aligned in y.
    constexpr int CPR = C::MI * 64 * 2 / 16;   // chunks per token row of this warpgroup
    constexpr int ROWS = 2 * NA;               // token rows acc holds
    constexpr int PASS = ROWS < C::EPI_ROWS ? ROWS : C::EPI_ROWS;   // token rows per pass through buf
    const bool cs = p.tune & LDMOE_TUNE_STREAM_STORES;
    #pragma unroll
    for (int t0 = 0; t0 < ROWS; t0 += PASS) {
        named_bar_sync(kStagedBar + cw, 128);   // the previous copy-out has read buf
        #pragma unroll
        for (int mi = 0; mi < C::MI; ++mi) {
            #pragma unroll
            for (int jp = t0 / 16; jp < (t0 + PASS) / 16; ++jp) {   // tokens 16jp .. 16jp+15: four matrices
                // matrix 0: tokens 16jp.., weight rows +0..7; 1: same tokens, rows +8..15;
                // 2 and 3: tokens 16jp+8.. (acc[4j + 2h + {0,1}] is row g + 8h, tokens 8j + 2q + {0,1})
                const int tok = 16 * jp - t0 + 8 * (mat >> 1) + r;
                const int col = mi * 64 + wq * 16 + 8 * (mat & 1);
                const float *a = &acc[mi][8 * jp];
                stsm_x4_trans(buf + tok * C::EPI_PITCH + col * 2, pack_bf16x2(a[0], a[1]), pack_bf16x2(a[2], a[3]),
                              pack_bf16x2(a[4], a[5]), pack_bf16x2(a[6], a[7]));
            }
        }
        named_bar_sync(kStagedBar + cw, 128);
        #pragma unroll
        for (int it = 0; it < PASS * CPR / 128; ++it) {
            const int i = it * 128 + wt, tt = i / CPR, c = i % CPR;
            const int n = (cw * C::MI * 64) + c * 8;
            if (t0 + tt < t.rows && n < t.nrows) {
                const uint4 v = lds128(buf + tt * C::EPI_PITCH + c * 16);
                uint4 *dst = reinterpret_cast<uint4 *>(p.y + (t.tok0 + t0 + tt) * p.N + t.n0 + n);
                if (cs) __stcs(dst, v); else *dst = v;
            }
        }
    }
}

// Decode orientation without staging: scalar bf16 stores straight from the accumulators (each
// warp store writes 16 bytes into each of four token rows).
template <class C, int NA = C::ACC>
__device__ __forceinline__ void store_direct_wa(const KParams &p, const Tile &t, const float (&acc)[C::MI][NA],
                                                int cw, int wq, int lane) {
    const int g = lane >> 2, q = lane & 3;
    #pragma unroll
    for (int mi = 0; mi < C::MI; ++mi) {
        const int r0 = (cw * C::MI + mi) * 64 + wq * 16 + g;   // weight row of acc[mi][4j]
        #pragma unroll
        for (int j = 0; j < NA / 4; ++j) {
            #pragma unroll
            for (int v = 0; v < 4; ++v) {
                const int n = r0 + 8 * (v >> 1), tt = j * 8 + 2 * q + (v & 1);
                if (n < t.nrows && tt < t.rows)
                    p.y[(t.tok0 + tt) * p.N + t.n0 + n] = __float2bfloat16_rn(acc[mi][4 * j + v]);
            }
        }
    }
}

// Prefill with epilogue warps: two named barriers that the 256 consumer threads and the 96
// epilogue-warp threads all sync on, in turn. kEpiFree: the epilogue warps are done with the
// buffer; kEpiFull: a tile's copy (or the end mark) is in it. The epilogue warps wait at kEpiFull
// long before the consumers get there, so the consumers only ever wait for the previous copy-out.
// (bar.sync on both sides rather than bar.arrive: the same overlap, and compute-sanitizer's
// racecheck sees the ordering.)
constexpr int kEpiFull = 3, kEpiFree = 4, kEpiThreads = 256 + 96;

// Consumers (prefill, C::EPIW): wait until the copy buffer is free, write this warpgroup's 64 token
// rows x BM columns of acc into it (stmatrix, no transpose: acc rows are tokens), hand it over.
template <class C>
__device__ __forceinline__ void stage_prefill(const float (&acc)[C::MI][C::ACC], uint32_t buf, int cw, int wq,
                                              int lane, int64_t tk, volatile int64_t *epi_tk) {
    const int mat = lane >> 3, r = lane & 7;
    const int row = cw * 64 + wq * 16 + 8 * (mat & 1) + r;   // token row this lane addresses
    named_bar_sync(kEpiFree, kEpiThreads);
    #pragma unroll
    for (int jp = 0; jp < C::ACC / 8; ++jp) {   // columns 16jp .. 16jp+15: chunks 2jp, 2jp+1
        // matrix 0: rows +0..7, chunk 2jp; 1: rows +8..15, chunk 2jp; 2, 3: chunk 2jp+1
        const int c = 2 * jp + (mat >> 1);
        const float *a = &acc[0][8 * jp];
        stsm_x4(buf + row * C::EPIW_ROW + ((c ^ (row & 7)) << 4), pack_bf16x2(a[0], a[1]), pack_bf16x2(a[2], a[3]),
                pack_bf16x2(a[4], a[5]), pack_bf16x2(a[6], a[7]));
    }
    if (cw == 0 && wq == 0 && lane == 0) *epi_tk = tk;
    named_bar_sync(kEpiFull, kEpiThreads);
}

// Epilogue warps (warps 1..3, C::EPIW): copy each handed-over tile to y, a 512-byte token row per
// warp store (whole lines), rows of the expert and columns of the slice only. `et` = 0..95.
template <class C>
__device__ void epilogue_warps(const KParams &p, const int32_t *prefix, int mode, int64_t per_queue, uint32_t buf,
                               volatile int64_t *epi_tk, int et) {
    constexpr int CPR = C::EPIW_ROW / 16;   // chunks per token row
    #pragma unroll 1
    for (;;) {
        named_bar_sync(kEpiFree, kEpiThreads);
        named_bar_sync(kEpiFull, kEpiThreads);
        const int64_t tk = *epi_tk;
        if (tk < 0) return;
        const Tile t = make_tile(p, prefix, C::BM, C::BN, mode, per_queue, tk);
        #pragma unroll 4
        for (int i = et; i < C::BN * CPR; i += 96) {
            const int row = i / CPR, c = i % CPR;
            if (row < t.rows && c * 8 < t.nrows) {
                const uint4 v = lds128(buf + row * C::EPIW_ROW + ((c ^ (row & 7)) << 4));
                *reinterpret_cast<uint4 *>(p.y + (t.tok0 + row) * p.N + t.n0 + c * 8) = v;
            }
        }
    }
}

// FP8: one tile as run_tile does it, with e4m3 wgmmas (k = 32, four per 128-byte k-block) and
// promotion: each k-block's wgmmas start from zero (scale_d = 0) and, once they are done, are
// added into fp32 sums (times the k-block's scales in the block scheme), so the tensor cores
// never accumulate more than 128 products (doc/moe.md, "FP8"). Waiting for each k-block's
// group exposes the wgmma latency once per 128 k; a stage is handed back when its last
// k-block is promoted. The rowwise scales are applied once, before the stores. The block
// scales come with the stage, in its scale slot (Fp8Cfg, Loader::fill).
// (The consumers' run_tile calls this for the Fp8Cfg shapes; the arguments are the body's state.)
template <class C, int NN>
__device__ __forceinline__ void run_tile_fp8(const KParams &p, int nk,
                                             unsigned char *ring, unsigned char *epi, uint64_t *s_full, uint64_t *s_empty,
                                             uint32_t a_off, uint32_t a_step, uint32_t b_off, uint32_t b_step, int cw,
                                             int warp, int lane, int tid, int my_dom, int &s, uint32_t &ph,
                                             const Tile *s_ring_tile) {
    constexpr int NA = NN / 2;
    constexpr int SCH = fp8_scaling_of<C>::value;
    static_assert(SCH == LDMOE_FP8_ROWWISE || SCH == LDMOE_FP8_BLOCK, "scaling scheme");
    const KParamsF8 &pf = static_cast<const KParamsF8 &>(p);
    // The producer decoded the ticket when it started loading the tile and left the result with
    // the tile's first stage: decoding it again here (divisions and a binary search over the
    // experts, in series) would hold the landed stages between two tiles. Every lane's read is
    // ordered before lane 0 hands that stage back, as for the ticket.
    const Tile t = s_ring_tile[s];
    __syncwarp();
    const int q = lane & 3;
    const int wt = tid - 128 * (cw + 1);   // thread in this consumer warpgroup
    // AM accumulator sets. With two m64 blocks per warpgroup (C::MI = 2) and 128 token columns
    // (the prefill tiles) the two blocks' wgmmas go one after the other into one set, so that the
    // sums of both blocks and one set of accumulators fit the registers (two sets and two sums
    // spill); with up to 64 columns (also a prefill tile's chunked tail) both sets fit, and one
    // wait covers both blocks' wgmmas.
    constexpr int AM = C::MI > 1 && NN > 64 ? 1 : C::MI;
    float acc[AM][NA], sum[C::MI][NA];
    #pragma unroll
    for (int mi = 0; mi < C::MI; ++mi)
        #pragma unroll
        for (int i = 0; i < NA; ++i) sum[mi][i] = 0.f;
    // Block scheme: this warpgroup's weight rows lie in 128-row block `mb` of the tile, whose
    // weight scales are line mb of each stage's scale slot. The slot's boxes start at the aligned
    // element at or below the first scale wanted (Fp8Cfg); `wsc` and `xo` give the offsets: the
    // tile's w_scale element of row block mb and K block 0, and its x_scale element of K block 0.
    // The loader streams the tile's k-steps from first_kstep(...) on (loader.cuh).
    [[maybe_unused]] const int mb = cw * C::MI * 64 / LDMOE_FP8_BLOCK_ROWS;
    [[maybe_unused]] uint32_t wsc = 0, xo = 0;
    [[maybe_unused]] int rot = 0;
    if constexpr (SCH == LDMOE_FP8_BLOCK) {
        wsc = (uint32_t)pf.ws0 + (uint32_t)ldmoe_fp8_block_wscale_index(p.ND, pf.K8, t.wse, t.r0 + mb * LDMOE_FP8_BLOCK_ROWS, 0);
        xo = (uint32_t)pf.xs0 + (uint32_t)t.tok0;
        rot = first_kstep(t.wrow_idx / C::BM, nk);
    }
    [[maybe_unused]] bool no_scale_math = false;
    if constexpr (diag_of<C>::value) no_scale_math = p.tune & LDMOE_TUNE_DIAG_NO_SCALE_MATH;
    auto fence_acc = [&]() {
        #pragma unroll
        for (int a = 0; a < AM; ++a) wg_fence_acc(acc[a]);
    };
    // Rowwise: the scales of the thread's weight rows and token columns, applied once to the
    // sums after the k loop. Up to 64 token columns they are loaded here, so that their latency
    // passes under the loop instead of being waited for at every tile's end; wider tiles have no
    // registers to hold their token scales that long and load them after the loop.
    // sum[mi][4j + v]: weight row (cw*MI + mi)*64 + 16*(warp%4) + g + 8*(v/2), token 8j + 2q + v%2.
    constexpr bool RW_EARLY = SCH == LDMOE_FP8_ROWWISE && C::MMA_N <= 64;
    const int g = lane >> 2;
    [[maybe_unused]] float sw[C::MI][2];
    [[maybe_unused]] float sx[RW_EARLY ? NA / 2 : 1];
    [[maybe_unused]] auto load_sw = [&]() {
        #pragma unroll
        for (int mi = 0; mi < C::MI; ++mi) {
            const int r0 = (cw * C::MI + mi) * 64 + (warp & 3) * 16 + g;
            sw[mi][0] = r0 < t.nrows ? __ldg(pf.ws + t.wrow_idx + r0) : 0.f;
            sw[mi][1] = r0 + 8 < t.nrows ? __ldg(pf.ws + t.wrow_idx + r0 + 8) : 0.f;
        }
    };
    [[maybe_unused]] auto token_scale = [&](int tt) { return tt < t.rows ? __ldg(pf.xs + t.tok0 + tt) : 0.f; };
    if constexpr (RW_EARLY) {
        load_sw();
        #pragma unroll
        for (int j = 0; j < NA / 4; ++j) {
            sx[2 * j] = token_scale(8 * j + 2 * q);
            sx[2 * j + 1] = token_scale(8 * j + 2 * q + 1);
        }
    }
    #pragma unroll 1
    for (int kstep = 0; kstep < nk; ++kstep) {
        if (kstep) mbar_wait(smem_u32(&s_full[s]), ph);
        const uint32_t base = smem_u32(ring + s * C::STAGE_BYTES);
        #pragma unroll
        for (int sub = 0; sub < C::KSUB; ++sub) {
            if constexpr (diag_of<C>::value)
                if (p.tune & LDMOE_TUNE_DIAG_NO_MMA) continue;
            #pragma unroll
            for (int mg = 0; mg < C::MI; mg += AM) {   // m64 blocks mg .. mg + AM - 1
                fence_acc();
                wg_fence();
                #pragma unroll
                for (int kk = 0; kk < kRowBytes / 32; ++kk)
                    #pragma unroll
                    for (int a = 0; a < AM; ++a)
                        wgmma_m64k32_e4m3<NN>(acc[a],
                                              wg_desc(base + a_off + (mg + a) * 64 * kRowBytes + sub * a_step + kk * 32),
                                              wg_desc(base + b_off + sub * b_step + kk * 32), kk ? 1 : 0);
                wg_commit();
                if constexpr (SCH == LDMOE_FP8_BLOCK) {
                    wg_wait<0>();
                    fence_acc();
                    if (no_scale_math) {
                        #pragma unroll
                        for (int a = 0; a < AM; ++a)
                            #pragma unroll
                            for (int i = 0; i < NA; ++i) sum[mg + a][i] += acc[a][i];
                        continue;
                    }
                    // Token scales of k-block kb (tile columns 0..BN-1; columns past the tile's
                    // tokens hold other rows' scales or zeros and are never stored), then the
                    // weight scale of this warpgroup's row block.
                    int kq = kstep + rot;
                    kq = kq >= nk ? kq - nk : kq;
                    const uint32_t kb = (uint32_t)(kq * C::KSUB + sub);
                    const unsigned char *slot = ring + C::SCL_OFF + s * C::SCL_STAGE;
                    const float *r = reinterpret_cast<const float *>(slot + sub * C::XS_PITCH) +
                                     ((xo + kb * (uint32_t)p.T) & 3u);
                    const uint32_t wk = wsc + (uint32_t)(kq * C::KSUB);
                    const float sw = reinterpret_cast<const float *>(slot + C::SCL_X + mb * 128)[(wk & 3u) + sub];
                    // acc[a][4j + v] and [4j + 2 + v] belong to token column 8j + 2q + v.
                    #pragma unroll
                    for (int j = 0; j < NA / 4; ++j) {
                        const float b0 = sw * r[8 * j + 2 * q], b1 = sw * r[8 * j + 2 * q + 1];
                        #pragma unroll
                        for (int a = 0; a < AM; ++a) {
                            float *sm = sum[mg + a];
                            sm[4 * j] = fmaf(acc[a][4 * j], b0, sm[4 * j]);
                            sm[4 * j + 1] = fmaf(acc[a][4 * j + 1], b1, sm[4 * j + 1]);
                            sm[4 * j + 2] = fmaf(acc[a][4 * j + 2], b0, sm[4 * j + 2]);
                            sm[4 * j + 3] = fmaf(acc[a][4 * j + 3], b1, sm[4 * j + 3]);
                        }
                    }
                } else {
                    wg_wait<0>();
                    fence_acc();
                    #pragma unroll
                    for (int a = 0; a < AM; ++a)
                        #pragma unroll
                        for (int i = 0; i < NA; ++i) sum[mg + a][i] += acc[a][i];
                }
            }
        }
        // Every lane's reads of the stage (the block scales) before lane 0 hands it back.
        if constexpr (SCH == LDMOE_FP8_BLOCK) __syncwarp();
        if (lane == 0) mbar_arrive(smem_u32(&s_empty[s]));
        if (++s == C::STAGES) { s = 0; ph ^= 1; }
    }
    if constexpr (SCH == LDMOE_FP8_ROWWISE) {
        // Late (wide tiles): the weight scales first, then the token scales two at a time.
        if constexpr (!RW_EARLY) load_sw();
        #pragma unroll
        for (int j = 0; j < NA / 4; ++j) {
            float x0, x1;
            if constexpr (RW_EARLY) x0 = sx[2 * j], x1 = sx[2 * j + 1];
            else x0 = token_scale(8 * j + 2 * q), x1 = token_scale(8 * j + 2 * q + 1);
            #pragma unroll
            for (int mi = 0; mi < C::MI; ++mi) {
                sum[mi][4 * j] *= sw[mi][0] * x0;
                sum[mi][4 * j + 1] *= sw[mi][0] * x1;
                sum[mi][4 * j + 2] *= sw[mi][1] * x0;
                sum[mi][4 * j + 3] *= sw[mi][1] * x1;
            }
        }
    }
    if constexpr (diag_of<C>::value) {
        if (p.tune & LDMOE_TUNE_DIAG_NO_STORE) {
            if (tid == 128) debug_count(p, t.gid, my_dom);
            return;
        }
    }
    if (C::EPI_STAGED && !(p.tune & LDMOE_TUNE_SCALAR_EPILOGUE))
        store_staged<C, NA>(p, t, sum, smem_u32(epi + cw * C::EPI_WG), cw, wt);
    else
        store_direct_wa<C, NA>(p, t, sum, cw, warp & 3, lane);
    if (tid == 128) debug_count(p, t.gid, my_dom);
}

template <class C>
__device__ void grouped_mm_ws_body(const KParams &p, const ldshim_topology_t *topo) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    unsigned char *ring = smem;
    unsigned char *epi = smem + C::STAGES * C::STAGE_BYTES;   // C::EPI_BYTES (staged epilogue)
    int32_t *prefix = reinterpret_cast<int32_t *>(epi + C::EPI_BYTES);
    __shared__ int64_t s_ring_tk[C::STAGES];
    // FP8: the decoded tile of a tile's first stage, and the loader's next one (Loader::rec).
    __shared__ Tile s_ring_tile[fp8_scaling_of<C>::value != 0 ? C::STAGES + 1 : 1];
    __shared__ int32_t s_ring_x[C::STAGES];                    // the stage's Loader::xcls (token chunks)
    __shared__ int64_t s_epi_tk;                               // C::EPIW: tile in the copy buffer (-1: end)
    __shared__ __align__(8) uint64_t s_full[C::STAGES];
    __shared__ __align__(8) uint64_t s_empty[C::STAGES];
    __shared__ SchedShared sh;
    __shared__ ClaimerT<DeviceAtomics> s_claimer;   // the claiming thread's scheduler state (C::CLAIMER_SMEM)

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // Decode: the producer's first tile claim is made in the setup, as soon as the map is known, so
    // that the atomic's latency (a contended atomic) overlaps the rest of the setup instead of
    // following it. Prefill keeps its static ranks first (ClaimerT).
    // The FP8 kernels are launched as programmatic dependents of the stream's previous kernel
    // (impl/library.cuh launch): until the setup's griddep_wait they touch nothing that kernel may
    // write (tokens, scales, offsets, the counters, the output). The bf16 kernels are launched as
    // before.
    constexpr bool kDependent = fp8_scaling_of<C>::value != 0;
    if (tid == 0) {
        trace_at(p, kTrEntry, globaltimer());
        if (!p.packed) prefetch_tensormap(&p.tm_w);
        prefetch_tensormap(&p.tm_x);
        if constexpr (fp8_scaling_of<C>::value == LDMOE_FP8_BLOCK) {
            prefetch_tensormap(&static_cast<const KParamsF8 &>(p).tm_xs);
            prefetch_tensormap(&static_cast<const KParamsF8 &>(p).tm_ws);
        }
        if constexpr (C::CHUNK < C::BN) {
            prefetch_tensormap(&p.tm_xh);
            prefetch_tensormap(&p.tm_xb);
        }
        for (int st = 0; st < C::STAGES; ++st) {
            mbar_init(smem_u32(&s_full[st]), 1);
            mbar_init(smem_u32(&s_empty[st]), 8);   // one arrive per consumer warp
        }
        fence_mbar_init();
    }
    sched_setup<C::THREADS, C::BN, kDependent, C::WA>(p, topo, prefix, sh);   // ends with a barrier
    const int D = p.D, mode = sh.mode;
    const int64_t tiles_per_slice = (int64_t)prefix[p.E] * p.nbs;
    const int64_t total = tiles_per_slice * D;
    const int64_t per_queue = mode == kModeAware ? tiles_per_slice : total;

    if (warp < 4) {
        // ---------------- producer warpgroup ----------------
        if constexpr (C::SPLIT_REGS) setmaxnreg_dec<C::PRODUCER_REGS>();
        if constexpr (C::EPIW) {
            if (warp > 0) {
                epilogue_warps<C>(p, prefix, mode, per_queue, smem_u32(epi), &s_epi_tk, tid - 32);
                return;
            }
        }
        if (tid != 0) return;
        trace_at(p, kTrSetup, globaltimer());
        Loader<C> ld{};
        ld.start(p, prefix, sh, per_queue, total, &s_claimer, &s_ring_tile[fp8_scaling_of<C>::value != 0 ? C::STAGES : 0]);
        trace_at(p, kTrClaimed, globaltimer());
        int s = 0;
        uint32_t ph = 0;
        #pragma unroll 1
        for (;;) {
            mbar_wait(smem_u32(&s_empty[s]), ph ^ 1);
            const int64_t tk = ld.tk;
            s_ring_tk[s] = tk;
            if constexpr (C::CHUNK < C::BN) s_ring_x[s] = ld.xcls;
            if constexpr (fp8_scaling_of<C>::value != 0)
                if (tk >= 0 && ld.k == 0) s_ring_tile[s] = s_ring_tile[C::STAGES];
            if (tk < 0) {   // consumers: done
                mbar_arrive(smem_u32(&s_full[s]));
                trace_at(p, kTrLoadsDone, globaltimer());
                return;
            }
            if constexpr (fp8_scaling_of<C>::value == LDMOE_FP8_BLOCK)
                ld.fill(smem_u32(ring + s * C::STAGE_BYTES), smem_u32(&s_full[s]), smem_u32(ring + C::SCL_OFF + s * C::SCL_STAGE));
            else
                ld.fill(smem_u32(ring + s * C::STAGE_BYTES), smem_u32(&s_full[s]));
            ld.advance();
            if (++s == C::STAGES) { s = 0; ph ^= 1; }
        }
    }

    // ---------------- consumer warpgroups ----------------
    if constexpr (C::SPLIT_REGS) setmaxnreg_inc<C::CONSUMER_REGS>();
    const int cw = (warp >> 2) - 1;   // consumer warpgroup 0 / 1: rows cw*MI*64.. of the MMA's M side
    const int nk = (p.K + kBK * C::KSUB - 1) / (kBK * C::KSUB);
    // Offsets inside a stage of this warpgroup's A rows (MI blocks of 64) and of the shared B operand.
    const uint32_t a_off = C::WA ? cw * C::MI * 64 * kRowBytes : C::A_BYTES + cw * 64 * kRowBytes;
    const uint32_t a_step = C::WA ? C::A_SUB : C::B_SUB;
    const uint32_t b_off = C::WA ? C::A_BYTES : 0;
    const uint32_t b_step = C::WA ? C::B_SUB : C::A_SUB;
    // One tile, from its first stage (already landed in stage s) to its stores, with wgmmas of n =
    // NN columns into NN / 2 accumulators per thread and m64 block. The accumulators live in this
    // function only, so tiles of different NN (token chunks) share no wgmma registers: with one
    // accumulator array and a per-stage choice of n, ptxas serialized every wgmma (C7520).
    // The structure: the first k-step, nk - 1 steady steps that keep one wgmma group in flight,
    // then drain and store. The stage order is the producer's (a tile's k-steps are consecutive).
    auto run_tile = [&](auto nn, int &s, uint32_t &ph, int64_t tk) {
        if constexpr (fp8_scaling_of<C>::value != 0) {
            run_tile_fp8<C, decltype(nn)::value>(p, nk, ring, epi, s_full, s_empty, a_off, a_step,
                                                 b_off, b_step, cw, warp, lane, tid, sh.my_dom, s, ph, s_ring_tile);
        } else {
            constexpr int NN = decltype(nn)::value, NA = NN / 2;
            float acc[C::MI][NA];
            auto fence_all = [&]() {
                #pragma unroll
                for (int mi = 0; mi < C::MI; ++mi) wg_fence_acc(acc[mi]);
            };
            // One stage's wgmmas (4 x KSUB x MI of k16); `first` zeroes acc (the tile's first k-step).
            auto mma_stage = [&](int st, bool first) {
                const uint32_t base = smem_u32(ring + st * C::STAGE_BYTES);
                if constexpr (diag_of<C>::value) {
                    if (p.tune & LDMOE_TUNE_DIAG_NO_MMA) {
                        wg_commit();
                        return;
                    }
                }
                fence_all();
                wg_fence();
                #pragma unroll
                for (int sub = 0; sub < C::KSUB; ++sub) {
                    #pragma unroll
                    for (int kk = 0; kk < kBK / 16; ++kk)
                        #pragma unroll
                        for (int mi = 0; mi < C::MI; ++mi)
                            wgmma_m64k16<NN>(acc[mi], wg_desc(base + a_off + mi * 64 * kRowBytes + sub * a_step + kk * 32),
                                             wg_desc(base + b_off + sub * b_step + kk * 32),
                                             (first && sub == 0 && kk == 0) ? 0 : 1);
                }
                wg_commit();
            };
            mma_stage(s, true);
            int prev = s;
            if (++s == C::STAGES) { s = 0; ph ^= 1; }
            #pragma unroll 1
            for (int kstep = 1; kstep < nk; ++kstep) {
                mbar_wait(smem_u32(&s_full[s]), ph);
                mma_stage(s, false);
                wg_wait<1>();   // the previous stage's group is done: hand that stage back
                fence_all();
                if (lane == 0) mbar_arrive(smem_u32(&s_empty[prev]));
                prev = s;
                if (++s == C::STAGES) { s = 0; ph ^= 1; }
            }
            wg_wait<0>();
            fence_all();
            if (lane == 0) mbar_arrive(smem_u32(&s_empty[prev]));
            const Tile t = make_tile(p, prefix, C::BM, C::BN, mode, per_queue, tk);
            if constexpr (diag_of<C>::value) {
                if (p.tune & LDMOE_TUNE_DIAG_NO_STORE) {
                    if (tid == 128) debug_count(p, t.gid, sh.my_dom);
                    return;
                }
            }
            if constexpr (C::WA) {
                if (C::EPI_STAGED && !(p.tune & LDMOE_TUNE_SCALAR_EPILOGUE))
                    store_staged<C, NA>(p, t, acc, smem_u32(epi + cw * C::EPI_WG), cw, tid - 128 * (cw + 1));
                else
                    store_direct_wa<C, NA>(p, t, acc, cw, warp & 3, lane);
            } else if (C::EPIW && !(p.tune & LDMOE_TUNE_SCALAR_EPILOGUE)) {
                stage_prefill<C>(acc, smem_u32(epi), cw, warp & 3, lane, tk, &s_epi_tk);
            } else {
                const int g = lane >> 2, q = lane & 3;
                const int r0 = cw * 64 + (warp & 3) * 16 + g;   // M-side row of acc[0][4j], acc[0][4j+1]
                // M = tokens, N = weight rows: bf16x2 stores of adjacent output columns.
                #pragma unroll
                for (int j = 0; j < NA / 4; ++j) {
                    const int n = j * 8 + 2 * q;
                    if (n < t.nrows) {
                        if (r0 < t.rows)
                            *reinterpret_cast<__nv_bfloat162 *>(p.y + (t.tok0 + r0) * p.N + t.n0 + n) =
                                __floats2bfloat162_rn(acc[0][4 * j], acc[0][4 * j + 1]);
                        if (r0 + 8 < t.rows)
                            *reinterpret_cast<__nv_bfloat162 *>(p.y + (t.tok0 + r0 + 8) * p.N + t.n0 + n) =
                                __floats2bfloat162_rn(acc[0][4 * j + 2], acc[0][4 * j + 3]);
                    }
                }
            }
            if (tid == 128) debug_count(p, t.gid, sh.my_dom);
        }
    };


    int s = 0;
    uint32_t ph = 0;
    uint32_t ntiles = 0;   // tiles computed (trace)
    #pragma unroll 1
    for (;;) {
        mbar_wait(smem_u32(&s_full[s]), ph);
        int64_t tk;
        if constexpr (fp8_scaling_of<C>::value != 0) {
            // Lane 0, which releases the stage (s_empty) later, reads the ticket for its warp:
            // the producer may rewrite it once every warp's lane 0 has arrived, so no other
            // lane's read may be left unordered behind that arrive (racecheck flagged the
            // 256-row tile's form, where each lane read it).
            int64_t v = 0;
            if (lane == 0) v = s_ring_tk[s];
            tk = __shfl_sync(0xffffffffu, v, 0);
        } else {
            tk = s_ring_tk[s];
        }
        if (tid == 128 && p.trace && ntiles++ == 0) trace_at(p, kTrFirstData, globaltimer());
        if (tk < 0) break;
        if constexpr (C::CHUNK < C::BN) {   // n to match the tile's tokens (Loader::xcls)
            int xcls;
            if constexpr (fp8_scaling_of<C>::value != 0) xcls = __shfl_sync(0xffffffffu, lane == 0 ? s_ring_x[s] : 0, 0);
            else xcls = s_ring_x[s];
            if (xcls == 0) run_tile(std::integral_constant<int, C::MMA_N / 4>{}, s, ph, tk);
            else if (xcls == 1) run_tile(std::integral_constant<int, C::MMA_N / 2>{}, s, ph, tk);
            else run_tile(std::integral_constant<int, C::MMA_N>{}, s, ph, tk);
        } else {
            run_tile(std::integral_constant<int, C::MMA_N>{}, s, ph, tk);
        }
    }
    if constexpr (C::EPIW) {   // end mark for the epilogue warps, once they have the last copy
        named_bar_sync(kEpiFree, kEpiThreads);
        if (tid == 128) s_epi_tk = -1;
        named_bar_sync(kEpiFull, kEpiThreads);
    }
    if (tid == 128 && p.trace) {   // the last tile's stores are issued (not necessarily landed)
        uint32_t smid;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
        trace_at(p, kTrExit, globaltimer());
        trace_at(p, kTrTiles, ntiles ? ntiles - 1 : 0);
        trace_at(p, kTrSm, smid);
    }
}

}  // namespace ldmoe
