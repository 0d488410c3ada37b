/* ldmoe_tiles.h — tile numbering of the grouped GEMM, shared by the kernel, the host launcher
 * and the CPU tests (plain C, no CUDA needed).
 *
 * A tile is (expert e, slice d, n-block b within the slice, m-block m within the expert's
 * tokens): BM weight rows × BN tokens. With mb[e] = ceil(count_e / BN), prefix[e] = Σ_{i<e} mb[i],
 * nbs = ceil((N/D) / BM) n-blocks per slice:
 *
 *   global id   g = prefix[e]·D·nbs + (d·nbs + b)·mb[e] + m      (order of the shared queue)
 *   queue d     q = prefix[e]·nbs + b·mb[e] + m                 (order of domain d's queue)
 *
 * so consecutive tiles walk the m-blocks of one weight block (the weight block is read from HBM
 * once and from L2 by the others), then the next weight block of the same expert.
 * All functions are pure and thread-safe.
 */
#ifndef LDMOE_TILES_H
#define LDMOE_TILES_H

#include <stdint.h>

#if defined(__CUDACC__)
#define LDMOE_HD __host__ __device__ __forceinline__
#else
#define LDMOE_HD static inline
#endif

typedef struct ldmoe_tile_pos {
    int32_t e, d, b, m;   /* expert, slice, n-block in slice, m-block */
} ldmoe_tile_pos_t;

/* Expert whose tile range holds `v` in units of prefix: the largest e with prefix[e] <= v and
 * prefix[e+1] > v. prefix has E+1 entries, prefix[E] > v required. */
LDMOE_HD int32_t ldmoe_find_expert(const int32_t *prefix, int32_t E, int64_t v) {
    int32_t lo = 0, hi = E - 1;           /* answer in [lo, hi] */
    while (lo < hi) {
        int32_t mid = (lo + hi + 1) >> 1;
        if ((int64_t)prefix[mid] <= v) lo = mid; else hi = mid - 1;
    }
    return lo;
}

/* Decode a global id (shared queue / static order). */
LDMOE_HD ldmoe_tile_pos_t ldmoe_decode_global(const int32_t *prefix, int32_t E, int32_t D,
                                              int32_t nbs, int64_t g) {
    ldmoe_tile_pos_t p;
    int64_t per = (int64_t)D * nbs;
    p.e = ldmoe_find_expert(prefix, E, g / per);
    int64_t r = g - (int64_t)prefix[p.e] * per;
    int32_t mb = prefix[p.e + 1] - prefix[p.e];
    int32_t nbg = (int32_t)(r / mb);
    p.m = (int32_t)(r - (int64_t)nbg * mb);
    p.d = nbg / nbs;
    p.b = nbg - p.d * nbs;
    return p;
}

/* Decode index q of domain d's queue. */
LDMOE_HD ldmoe_tile_pos_t ldmoe_decode_queue(const int32_t *prefix, int32_t E, int32_t nbs,
                                             int32_t d, int64_t q) {
    ldmoe_tile_pos_t p;
    p.e = ldmoe_find_expert(prefix, E, q / nbs);
    int64_t r = q - (int64_t)prefix[p.e] * nbs;
    int32_t mb = prefix[p.e + 1] - prefix[p.e];
    p.b = (int32_t)(r / mb);
    p.m = (int32_t)(r - (int64_t)p.b * mb);
    p.d = d;
    return p;
}

/* Global id of a position (inverse of ldmoe_decode_global). */
LDMOE_HD int64_t ldmoe_global_id(const int32_t *prefix, int32_t D, int32_t nbs, ldmoe_tile_pos_t p) {
    int32_t mb = prefix[p.e + 1] - prefix[p.e];
    return (int64_t)prefix[p.e] * D * nbs + (int64_t)(p.d * nbs + p.b) * mb + p.m;
}

/* Stealing rule: a CTA whose own queue is empty may take from another domain's queue when the
 * launch holds at least `steal_waves` waves of tiles, or when that domain has no SM at all
 * (otherwise its tiles would wait for the last CTA's drain). */
LDMOE_HD int ldmoe_may_steal(int64_t total_tiles, int32_t grid, float steal_waves,
                             int32_t sms_in_victim_domain) {
    return sms_in_victim_domain == 0 || (double)total_tiles >= (double)steal_waves * (double)grid;
}

/* Static waves W of the scheduler (impl/scheduler.cuh): rank r of queue q runs the queue's tiles
 * r + i*ranks[q], i < W, and the rest of every queue is claimed tile by tile. W is one less than
 * the fewest whole waves any queue holds for its ranks, or the launch for its grid, so that at
 * least a wave of every queue stays dynamic for balancing and stealing; 0 below two waves. */
LDMOE_HD int64_t ldmoe_static_waves(int64_t total_tiles, int32_t grid, int64_t per_queue,
                                    const int32_t *ranks, int32_t nqueues) {
    int64_t w;
    int32_t q;
    if (grid <= 0) return 0;
    w = total_tiles / grid;
    for (q = 0; q < nqueues; ++q)
        if (ranks[q] > 0 && per_queue / ranks[q] < w) w = per_queue / ranks[q];
    return w > 1 ? w - 1 : 0;
}

/* Rank tables of the scheduler's queues: ranks[q] = SMs of domain q in the map (aware), or all
 * of them in queue 0 (other modes), 0 for the LDMOE_MAX_DOMAINS - nqueues entries past the
 * last queue; bases[q] = Σ_{q'<q} ranks[q']. domcnt has D entries (SMs per domain). */
LDMOE_HD void ldmoe_rank_tables(const int32_t *domcnt, int32_t D, int aware, int32_t *ranks, int32_t *bases,
                                int32_t max_queues) {
    /* Loops over max_queues only (a constant where the kernels call it), so that they unroll and
     * domcnt can live in registers; no value written is read back. */
    int32_t q, b = 0, all = 0;
    for (q = 0; q < max_queues; ++q) all += q < D ? domcnt[q] : 0;
    for (q = 0; q < max_queues; ++q) {
        const int32_t r = aware ? (q < D ? domcnt[q] : 0) : (q == 0 ? all : 0);
        ranks[q] = r;
        bases[q] = b;
        b += r;
    }
}

/* Row index mapping of the layouts: plain row (e, n) <-> localized row (d, e, r). */
LDMOE_HD int64_t ldmoe_localized_row(int32_t E, int32_t N, int32_t D, int32_t e, int32_t n) {
    int32_t nd = N / D;
    int32_t d = n / nd;
    return ((int64_t)d * E + e) * nd + (n - d * nd);
}

/* Packed layout (ldmoe.h, LDMOE_LAYOUT_PACKED): boxes of 128 rows x 64 k (16 KiB, 128-byte
 * swizzle), ordered [D][E][row block][k block]; k blocks per row block padded to a multiple of 4
 * so that a stage of up to four k-blocks never reads past a row block. */
#define LDMOE_PACK_ROWS 128   /* weight rows per box: the kernels' 128-row shared-memory block   */
#define LDMOE_PACK_K 64       /* k per box: 64 bf16, one 128-byte swizzled shared-memory row     */
#define LDMOE_PACK_BOX (LDMOE_PACK_ROWS * LDMOE_PACK_K * 2)   /* bytes per box (16 KiB)      */
#define LDMOE_PACK_KALIGN 4   /* k blocks per row block are a multiple of this (the largest stage) */
LDMOE_HD int32_t ldmoe_packed_rowblocks(int32_t ND) { return (int32_t)(((int64_t)ND + LDMOE_PACK_ROWS - 1) / LDMOE_PACK_ROWS); }
LDMOE_HD int32_t ldmoe_packed_kblocks(int32_t K) {
    return (int32_t)(((int64_t)K + LDMOE_PACK_K * LDMOE_PACK_KALIGN - 1) / (LDMOE_PACK_K * LDMOE_PACK_KALIGN) *
                     LDMOE_PACK_KALIGN);
}

/* Index of the box holding row block rb, k block kb of slice d of expert e. */
LDMOE_HD int64_t ldmoe_packed_box(int32_t E, int32_t ND, int32_t K, int32_t d, int32_t e, int32_t rb, int32_t kb) {
    return (((int64_t)d * E + e) * ldmoe_packed_rowblocks(ND) + rb) * ldmoe_packed_kblocks(K) + kb;
}

/* Byte offset of element (row r of slice d of expert e, column k) in the packed layout. */
LDMOE_HD int64_t ldmoe_packed_offset(int32_t E, int32_t ND, int32_t K, int32_t d, int32_t e, int32_t r, int32_t k) {
    int32_t rr = r % LDMOE_PACK_ROWS, c = (k % LDMOE_PACK_K) / 8;
    return ldmoe_packed_box(E, ND, K, d, e, r / LDMOE_PACK_ROWS, k / LDMOE_PACK_K) * LDMOE_PACK_BOX +
           (int64_t)rr * (LDMOE_PACK_K * 2) + ((c ^ (rr % 8)) * 16) + (k % 8) * 2;
}

/* The FP8 packed layout (ldmoe.h, ldmoe_pack_weights_fp8) is the bf16 packed layout of the same
 * bytes: a row of K e4m3 values is K/2 bf16-sized elements (K % 16 == 0), so a box holds 128 rows
 * x 128 k and byte k of a row lies where bf16 element k/2 does, plus k % 2. Byte offset of element
 * (row r of slice d of expert e, column k); total size: ldmoe_packed_box(E, ND, K/2, D, 0, 0, 0)
 * boxes. */
LDMOE_HD int64_t ldmoe_packed_offset_fp8(int32_t E, int32_t ND, int32_t K, int32_t d, int32_t e, int32_t r,
                                         int32_t k) {
    return ldmoe_packed_offset(E, ND, K / 2, d, e, r, k / 2) + (k % 2);
}

/* FP8 scale tables (ldmoe.h, ldmoe_fp8_params_t): K blocks of 128 for the block scheme, and the
 * index of the weight scale of (slice-expert se = d*E + e, row r of that slice, K block kb). */
#define LDMOE_FP8_BLOCK_K 128      /* k per scale block: one 128-byte k-block of the kernels     */
#define LDMOE_FP8_BLOCK_ROWS 128   /* weight rows per scale block                                */
LDMOE_HD int32_t ldmoe_fp8_kblocks(int32_t K) { return (int32_t)(((int64_t)K + LDMOE_FP8_BLOCK_K - 1) / LDMOE_FP8_BLOCK_K); }
LDMOE_HD int32_t ldmoe_fp8_rowblocks(int32_t ND) {
    return (int32_t)(((int64_t)ND + LDMOE_FP8_BLOCK_ROWS - 1) / LDMOE_FP8_BLOCK_ROWS);
}
LDMOE_HD int64_t ldmoe_fp8_block_wscale_index(int32_t ND, int32_t K, int32_t se, int32_t r, int32_t kb) {
    return ((int64_t)se * ldmoe_fp8_rowblocks(ND) + r / LDMOE_FP8_BLOCK_ROWS) * ldmoe_fp8_kblocks(K) + kb;
}

#endif /* LDMOE_TILES_H */
