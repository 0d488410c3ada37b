/* test_ldmoe_cpu.c — CPU tests of libldmoe: tile numbering (the kernel's and the tests' shared
 * contract), the steal rule, the layout row mapping, AUTO's tile choice for both kinds of GPU,
 * and argument validation through the real library (no GPU needed: every rejected call returns
 * before touching CUDA), and the quantizer's division against IEEE division. The lab library has its own suite (test_ldmoe_lab_cpu.c). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/moe/ldmoe.h"
#include "kernels/moe/ldmoe_heuristics.h"
#include "kernels/moe/ldmoe_tiles.h"
#include "kernels/moe/impl/div_rn.h"
#include "kernels/ldshim_topology.h"
#include "tests/unit/cunit_main.h"

/* Build a prefix of m-blocks for `counts`. */
static void make_prefix(const int *counts, int E, int bn, int32_t *prefix) {
    prefix[0] = 0;
    for (int e = 0; e < E; ++e) prefix[e + 1] = prefix[e] + (counts[e] + bn - 1) / bn;
}

static void check_numbering(const int *counts, int E, int D, int nbs, int bn) {
    int32_t prefix[65];
    make_prefix(counts, E, bn, prefix);
    int64_t per = (int64_t)prefix[E] * nbs, total = per * D;
    unsigned char *seen = calloc(total ? total : 1, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(seen);
    int ok_roundtrip = 1, ok_range = 1, ok_block = 1;
    for (int d = 0; d < D; ++d)
        for (int64_t q = 0; q < per; ++q) {
            ldmoe_tile_pos_t p = ldmoe_decode_queue(prefix, E, nbs, d, q);
            if (p.d != d || p.b < 0 || p.b >= nbs || p.m < 0 || p.m >= prefix[p.e + 1] - prefix[p.e]) ok_block = 0;
            int64_t g = ldmoe_global_id(prefix, D, nbs, p);
            if (g < 0 || g >= total) { ok_range = 0; continue; }
            seen[g]++;
            ldmoe_tile_pos_t r = ldmoe_decode_global(prefix, E, D, nbs, g);
            if (r.e != p.e || r.d != p.d || r.b != p.b || r.m != p.m) ok_roundtrip = 0;
        }
    int ok_once = 1;
    for (int64_t g = 0; g < total; ++g) if (seen[g] != 1) ok_once = 0;
    CU_ASSERT(ok_block);
    CU_ASSERT(ok_range);
    CU_ASSERT(ok_roundtrip);
    CU_ASSERT(ok_once);
    free(seen);
}

static void test_numbering_fixed(void) {
    int counts[6] = {0, 17, 64, 0, 1, 130};
    check_numbering(counts, 6, 2, 3, 16);
    check_numbering(counts, 6, 1, 5, 64);
    check_numbering(counts, 6, 4, 1, 128);
}

static void test_numbering_random(void) {
    unsigned s = 12345;
    for (int it = 0; it < 200; ++it) {
        int E = 1 + (int)((s = s * 1103515245u + 12345u) >> 16) % 64;
        int counts[64];
        for (int e = 0; e < E; ++e) {
            s = s * 1103515245u + 12345u;
            counts[e] = ((s >> 16) % 4 == 0) ? 0 : (int)((s >> 8) % 300);
        }
        s = s * 1103515245u + 12345u;
        int D = 1 + (int)(s >> 16) % 4, nbs = 1 + (int)(s >> 20) % 7, bn = 8 << ((s >> 24) % 4);
        check_numbering(counts, E, D, nbs, bn);
    }
}

static void test_single_expert_all_empty_but_one(void) {
    int32_t prefix[5];
    int counts[4] = {0, 0, 0, 33};
    make_prefix(counts, 4, 16, prefix);
    CU_ASSERT_EQUAL(prefix[4], 3);
    CU_ASSERT_EQUAL(ldmoe_find_expert(prefix, 4, 0), 3);
    CU_ASSERT_EQUAL(ldmoe_find_expert(prefix, 4, 2), 3);
}

static void test_steal_rule(void) {
    CU_ASSERT_TRUE(ldmoe_may_steal(264, 132, 2.0f, 66));
    CU_ASSERT_FALSE(ldmoe_may_steal(263, 132, 2.0f, 66));
    CU_ASSERT_TRUE(ldmoe_may_steal(10, 132, 2.0f, 0));     /* empty domain: always */
    CU_ASSERT_TRUE(ldmoe_may_steal(1, 132, 1e-6f, 66));
    CU_ASSERT_FALSE(ldmoe_may_steal(1000000, 132, 1e9f, 66));
}

static void test_localized_rows(void) {
    const int E = 3, N = 12, D = 2;
    unsigned char seen[36] = {0};
    for (int e = 0; e < E; ++e)
        for (int n = 0; n < N; ++n) {
            int64_t r = ldmoe_localized_row(E, N, D, e, n);
            CU_ASSERT_FATAL(r >= 0 && r < E * N);
            seen[r]++;
        }
    for (int i = 0; i < E * N; ++i) CU_ASSERT_EQUAL(seen[i], 1);
    CU_ASSERT_EQUAL(ldmoe_localized_row(E, N, D, 0, 6), (int64_t)1 * E * 6 + 0);   /* slice 1, e 0, r 0 */
    CU_ASSERT_EQUAL(ldmoe_localized_row(E, N, D, 2, 7), (int64_t)(1 * E + 2) * 6 + 1);
}

#define P(v) ((void *)(uintptr_t)(v))

static ldmoe_params_t good(void) {
    ldmoe_params_t p;
    memset(&p, 0, sizeof p);
    p.x = P(0x10000); p.w = P(0x20000); p.offs = P(0x30000); p.y = P(0x40000);
    p.T = 0; p.E = 8; p.N = 1024; p.K = 512; p.layout = LDMOE_LAYOUT_LOCALIZED; p.num_domains = 2;
    return p;
}

static void test_validation(void) {
    ldmoe_params_t p = good();
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_OK);   /* T = 0: nothing to do, no CUDA call */
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(NULL), LDMOE_ERR_INVALID_ARG);
    p = good(); p.offs = NULL;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT(strstr(ldmoe_last_error(), "offs") != NULL);
    p = good(); p.T = 5; p.x = NULL;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_ERR_INVALID_ARG);
    p = good(); p.K = 100;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_ERR_ALIGNMENT);
    CU_ASSERT(strstr(ldmoe_last_error(), "K = 100") != NULL);
    p = good(); p.N = 1000;   /* not a multiple of 8*D = 16 */
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_ERR_ALIGNMENT);
    p = good(); p.y = P(0x40008);
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_ERR_ALIGNMENT);
    p = good(); p.offs = P(0x30002);
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_ERR_ALIGNMENT);
    p = good(); p.E = 0;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_ERR_INVALID_ARG);
    p = good(); p.E = LDMOE_MAX_EXPERTS + 1;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_ERR_UNSUPPORTED);
    p = good(); p.T = -1;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_ERR_INVALID_ARG);
    p = good(); p.T = (int64_t)1 << 31;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_ERR_UNSUPPORTED);
    p = good(); p.E = 1024; p.N = 1 << 21;   /* 2^31 weight rows */
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_ERR_UNSUPPORTED);
    p = good(); p.mode = 7;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_ERR_INVALID_ARG);
    p = good(); p.layout = 3;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_ERR_INVALID_ARG);
    p = good(); p.num_domains = 0;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_ERR_INVALID_ARG);
    p = good(); p.num_domains = 9;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_ERR_INVALID_ARG);
    p = good(); p.tile = 99;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_ERR_INVALID_ARG);
    p = good(); p.tile = 12;   /* a lab tile (bench/moe/lab/ldmoe_lab.h): not in this library */
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "not a tile of this library"));
    p = good(); p.tile = LDMOE_TILE_WS_128x64_C16;   /* a product tile: T = 0 is a no-op */
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_OK);
    p = good(); p.layout = LDMOE_LAYOUT_PLAIN; p.num_domains = 0; p.N = 1000;   /* plain: D = 1, 1000 % 8 == 0 */
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_OK);
    CU_ASSERT_EQUAL(ldmoe_grouped_mm(P(16), P(32), P(64), P(48), 0, 2, 64, 64, 0, 1, 0, 0.f, NULL), LDMOE_OK);
}

static void test_convert_validation(void) {
    CU_ASSERT_EQUAL(ldmoe_convert_layout(NULL, P(0x1000), 2, 64, 64, 2, 1, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_convert_layout(P(0x1000), P(0x1000 + 64), 2, 64, 64, 2, 1, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT(strstr(ldmoe_last_error(), "overlap") != NULL);
    CU_ASSERT_EQUAL(ldmoe_convert_layout(P(0x1000), P(0x1000000), 2, 63, 64, 2, 1, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_convert_layout(P(0x1000), P(0x1000000), 2, 64, 60, 2, 1, NULL), LDMOE_ERR_ALIGNMENT);
}

/* The packed layout's element offsets: every (slice, expert, row, k) lands in its own 2-byte
 * slot inside ldmoe_packed_bytes, slots of padding are never named, 16-byte chunks keep their 8
 * elements together, and box rows are 128 bytes with chunk c at position c ^ (row % 8). */
static void check_packed(int E, int N, int K, int D) {
    const int ND = N / D;
    const size_t bytes = ldmoe_packed_bytes(E, N, K, D);
    CU_ASSERT_EQUAL_FATAL(bytes, (size_t)D * E * ((ND + 127) / 128) * ((K + 255) / 256 * 4) * 16384);
    unsigned char *seen = calloc(bytes / 2, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(seen);
    int ok_range = 1, ok_chunk = 1, ok_swizzle = 1;
    for (int d = 0; d < D; ++d)
        for (int e = 0; e < E; ++e)
            for (int r = 0; r < ND; ++r)
                for (int k = 0; k < K; ++k) {
                    int64_t o = ldmoe_packed_offset(E, ND, K, d, e, r, k);
                    if (o < 0 || o + 2 > (int64_t)bytes || (o & 1)) { ok_range = 0; continue; }
                    seen[o / 2]++;
                    if (k % 8 && o != ldmoe_packed_offset(E, ND, K, d, e, r, k - k % 8) + 2 * (k % 8)) ok_chunk = 0;
                    int rr = r % 128, c = (k % 64) / 8;
                    if ((o % 16384) / 128 != rr || (o % 128) / 16 != (c ^ (rr % 8))) ok_swizzle = 0;
                }
    size_t named = 0, twice = 0;
    for (size_t i = 0; i < bytes / 2; ++i) { named += seen[i] != 0; twice += seen[i] > 1; }
    CU_ASSERT(ok_range);
    CU_ASSERT(ok_chunk);
    CU_ASSERT(ok_swizzle);
    CU_ASSERT_EQUAL(twice, 0);
    CU_ASSERT_EQUAL(named, (size_t)D * E * ND * K);
    /* slice d is the d-th contiguous 1/D of the buffer */
    CU_ASSERT_EQUAL(ldmoe_packed_offset(E, ND, K, D - 1, 0, 0, 0), (int64_t)(bytes / D) * (D - 1));
    free(seen);
}

static void test_packed_layout(void) {
    check_packed(3, 64, 72, 2);      /* rows and k padded */
    check_packed(2, 256, 256, 1);    /* no padding */
    check_packed(4, 520, 1032, 2);   /* 260 rows per slice: a partial third row block */
    check_packed(2, 96, 8, 4);
    CU_ASSERT_EQUAL(ldmoe_packed_bytes(0, 64, 64, 1), 0);
    CU_ASSERT_EQUAL(ldmoe_packed_bytes(2, 63, 64, 2), 0);   /* N % D */
    CU_ASSERT_EQUAL(ldmoe_packed_bytes(2, 64, 64, 9), 0);
    CU_ASSERT_EQUAL(ldmoe_packed_bytes(1, 64, INT32_MAX, 1), 0);        /* k blocks would overflow int32 */
    CU_ASSERT_EQUAL(ldmoe_packed_bytes(1024, 1 << 21, 64, 1), 0);      /* 2^31 weight rows */
    CU_ASSERT_EQUAL(ldmoe_packed_bytes(1, 64, INT32_MAX - 256, 1),
                    (size_t)1 * (((size_t)INT32_MAX - 256 + 255) / 256 * 4) * 16384);
    CU_ASSERT_EQUAL(ldmoe_packed_bytes(128, 1536, 2048, 2), (size_t)128 * 1536 * 2048 * 2);   /* the FACTS shapes pack without padding */
    CU_ASSERT_EQUAL(ldmoe_packed_bytes(32, 4096, 7168, 2), (size_t)32 * 4096 * 7168 * 2);
    /* packer validation (returns before any CUDA call) */
    CU_ASSERT_EQUAL(ldmoe_pack_weights(NULL, 0, P(0x1000), 2, 64, 64, 2, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_pack_weights(P(0x1000), 2, P(0x1000000), 2, 64, 64, 2, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT(strstr(ldmoe_last_error(), "src_layout") != NULL);
    CU_ASSERT_EQUAL(ldmoe_pack_weights(P(0x1000), 0, P(0x1000 + 64), 2, 64, 64, 2, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT(strstr(ldmoe_last_error(), "overlap") != NULL);
    CU_ASSERT_EQUAL(ldmoe_pack_weights(P(0x1000), 0, P(0x1000000), 2, 63, 64, 2, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_pack_weights(P(0x1000), 0, P(0x1000000), 2, 64, 60, 2, NULL), LDMOE_ERR_ALIGNMENT);
    CU_ASSERT_EQUAL(ldmoe_pack_weights(P(0x1000), 0, P(0x1000008), 2, 64, 64, 2, NULL), LDMOE_ERR_ALIGNMENT);
    CU_ASSERT_EQUAL(ldmoe_pack_weights(P(0x1000), 0, P(0x1000000), 2, 64, 64, 0, NULL), LDMOE_ERR_INVALID_ARG);
    /* the GEMM takes the packed layout with its D */
    ldmoe_params_t p = good();
    p.layout = LDMOE_LAYOUT_PACKED;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_OK);
    p.num_domains = 0;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT(strstr(ldmoe_last_error(), "packed") != NULL);
    int bm = 0, bn = 0;
    int64_t bound = 0;
    CU_ASSERT_EQUAL(ldmoe_tile_info(1000, 8, 4096, 4096, LDMOE_LAYOUT_PACKED, 2, LDMOE_TILE_WS_128x64_C16, &bm, &bn, &bound),
                    LDMOE_OK);
    CU_ASSERT_EQUAL(bound, ((1000 + 63) / 64 + 8) * 2 * (2048 / 128));
}

/* Which branch of AUTO this process's library takes: the wgmma one on a compute-capability
 * 9.0 GPU, the mma.sync one elsewhere and without a GPU (the suite also runs on the GPU
 * machine). At 512 tokens per expert the branches pick tiles of different heights. */
static int auto_uses_wgmma(void) {
    int bm = 0;
    CU_ASSERT_EQUAL(ldmoe_tile_info(8 * 512, 8, 4096, 4096, LDMOE_LAYOUT_PLAIN, 0, LDMOE_TILE_AUTO, &bm, NULL, NULL),
                    LDMOE_OK);
    CU_ASSERT(bm == 128 || bm == 256);
    return bm == 256;
}

static void test_tile_info(void) {
    int bm = 0, bn = 0;
    int64_t bound = 0;
    const int wg = auto_uses_wgmma();
    CU_ASSERT_EQUAL(ldmoe_tile_info(64, 8, 14336, 4096, LDMOE_LAYOUT_LOCALIZED, 2, 0, &bm, &bn, &bound), LDMOE_OK);
    CU_ASSERT_EQUAL(bm, wg ? 128 : 64);
    CU_ASSERT_EQUAL(bn, wg ? 64 : 16);
    CU_ASSERT_EQUAL(bound, (64 / bn + 8) * 2 * (7168 / bm));
    CU_ASSERT_EQUAL(ldmoe_tile_info(8 * 512, 8, 4096, 4096, LDMOE_LAYOUT_PLAIN, 0, 0, &bm, &bn, NULL), LDMOE_OK);
    CU_ASSERT_EQUAL(bm, wg ? 256 : 128);
    CU_ASSERT_EQUAL(bn, 128);
    CU_ASSERT_EQUAL(ldmoe_tile_info(100, 8, 4096, 4096, LDMOE_LAYOUT_PLAIN, 0, LDMOE_TILE_64x64_K4, &bm, &bn, &bound),
                    LDMOE_OK);
    CU_ASSERT_EQUAL(bn, 64);
    CU_ASSERT_EQUAL(bound, (2 + 8) * 1 * 64);
    CU_ASSERT_EQUAL(ldmoe_tile_info(1, 1, 64, 63, 0, 1, 0, NULL, NULL, NULL), LDMOE_ERR_ALIGNMENT);
    /* The shipped tiles keep their values and report the geometry their kernels are built with
     * (written out here, not taken from LDMOE_TILE_LIST, so a change to either shows). */
    static const struct { int tile, value, bm, bn; } geo[] = {
        {LDMOE_TILE_128x128, 3, 128, 128},        {LDMOE_TILE_128x256, 4, 128, 256},
        {LDMOE_TILE_64x16_K4, 7, 64, 16},         {LDMOE_TILE_64x64_K4, 8, 64, 64},
        {LDMOE_TILE_WS_256x128_EW, 19, 256, 128}, {LDMOE_TILE_WS_128x64_C16, 20, 128, 64},
        {LDMOE_TILE_WS_128x128_C16, 21, 128, 128},
    };
    int listed = 0;
#define COUNT_(value, name, bm, bn) ++listed;
    LDMOE_TILE_LIST(COUNT_)
#undef COUNT_
    CU_ASSERT_EQUAL(sizeof geo / sizeof geo[0], listed);
    for (size_t i = 0; i < sizeof geo / sizeof geo[0]; ++i) {
        bm = bn = 0;
        CU_ASSERT_EQUAL(geo[i].tile, geo[i].value);
        CU_ASSERT_EQUAL(ldmoe_tile_info(1000, 8, 4096, 4096, LDMOE_LAYOUT_LOCALIZED, 2, geo[i].tile, &bm, &bn, &bound), LDMOE_OK);
        CU_ASSERT_EQUAL(bm, geo[i].bm);
        CU_ASSERT_EQUAL(bn, geo[i].bn);
        CU_ASSERT_EQUAL(bound, ((1000 + bn - 1) / bn + 8) * 2 * ((2048 + bm - 1) / bm));
    }
    /* every other value is refused: the lab's tiles (1, 2, 5, 6, 9-18) among them; the FP8
     * tiles (22..26) answer their geometry (test_fp8_tiles) */
    for (int t = -1; t < 64; ++t) {
        int known = t == 0 || t == LDMOE_TILE_WS_128x64_C16_FP8 || t == LDMOE_TILE_WS_128x128_C16_FP8 ||
                    t == LDMOE_TILE_WS_256x128_FP8 || t == LDMOE_TILE_WS_256x64_C16_FP8 ||
                    t == LDMOE_TILE_WS_256x128_C16_FP8;
        for (size_t i = 0; i < sizeof geo / sizeof geo[0]; ++i) known |= geo[i].tile == t;
        if (!known) CU_ASSERT_EQUAL(ldmoe_tile_info(1, 1, 64, 64, 0, 1, t, NULL, NULL, NULL), LDMOE_ERR_INVALID_ARG);
    }
}

static int in_tile_list(int tile) {
#define IS_(value, name, bm, bn) if (tile == value) return 1;
    LDMOE_TILE_LIST(IS_)
#undef IS_
    return 0;
}

/* AUTO (ldmoe_heuristics.h) on both kinds of GPU: its thresholds, and that the tiles it can
 * return are exactly the library's tiles (none it cannot reach, none it lacks). */
static void test_auto_tile(void) {
    static const struct { int64_t T; int E, wgmma, tile; } want[] = {
        {0, 8, 1, LDMOE_TILE_WS_128x64_C16},     {32 * 8, 8, 1, LDMOE_TILE_WS_128x64_C16},
        {33 * 8, 8, 1, LDMOE_TILE_WS_128x128_C16}, {96 * 8, 8, 1, LDMOE_TILE_WS_128x128_C16},
        {97 * 8, 8, 1, LDMOE_TILE_WS_256x128_EW},  {1 << 30, 1, 1, LDMOE_TILE_WS_256x128_EW},
        {16 * 8, 8, 0, LDMOE_TILE_64x16_K4},       {17 * 8, 8, 0, LDMOE_TILE_64x64_K4},
        {96 * 8, 8, 0, LDMOE_TILE_64x64_K4},       {97 * 8, 8, 0, LDMOE_TILE_128x128},
        {1024 * 8, 8, 0, LDMOE_TILE_128x128},      {1025 * 8, 8, 0, LDMOE_TILE_128x256},
        {31, 2, 1, LDMOE_TILE_WS_128x64_C16},      {20, 0, 0, LDMOE_TILE_64x64_K4},   /* E <= 0: T itself */
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; ++i)
        CU_ASSERT_EQUAL(ldmoe_auto_tile(want[i].T, want[i].E, want[i].wgmma), want[i].tile);
    int reached[64] = {0}, outside = 0;
    for (int wgmma = 0; wgmma <= 1; ++wgmma)
        for (int64_t avg = 0; avg <= 4096; ++avg) {
            const int t = ldmoe_auto_tile(avg * 16, 16, wgmma);
            if (t <= 0 || t >= 64 || !in_tile_list(t)) ++outside;
            else reached[t] = 1;
        }
    CU_ASSERT_EQUAL(outside, 0);
#define REACHED_(value, name, bm, bn) CU_ASSERT(reached[value]);
    LDMOE_TILE_LIST(REACHED_)
#undef REACHED_
    /* ldmoe_tile_info resolves AUTO the same way, on whichever branch this machine takes */
    const int wg = auto_uses_wgmma();
    for (int64_t avg = 0; avg <= 2048; avg = avg ? avg * 2 : 1) {
        int bm = 0, bn = 0, xm = 0, xn = 0;
        CU_ASSERT_EQUAL(ldmoe_tile_info(avg * 4, 4, 4096, 4096, LDMOE_LAYOUT_PLAIN, 0, LDMOE_TILE_AUTO, &bm, &bn, NULL),
                        LDMOE_OK);
        CU_ASSERT_EQUAL(ldmoe_tile_info(avg * 4, 4, 4096, 4096, LDMOE_LAYOUT_PLAIN, 0, ldmoe_auto_tile(avg * 4, 4, wg),
                                        &xm, &xn, NULL), LDMOE_OK);
        CU_ASSERT(bm == xm && bn == xn);
    }
}

/* The caller says how big its struct is: a NULL or a struct shorter than the version-1 fields
 * is refused before the library touches the GPU (the copy itself needs one). */
static void test_get_topology_args(void) {
    ldshim_topology_t t;
    CU_ASSERT_EQUAL(ldmoe_get_topology(NULL, sizeof t), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "NULL"));
    CU_ASSERT_EQUAL(ldmoe_get_topology(&t, 8), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "version-1"));
    CU_ASSERT_EQUAL(ldmoe_get_topology(&t, LDSHIM_TOPOLOGY_V1_BYTES - 1), LDMOE_ERR_INVALID_ARG);
}

static void test_strings(void) {
    for (int s = 0; s <= 6; ++s) CU_ASSERT_PTR_NOT_NULL(ldmoe_error_string(s));
    CU_ASSERT_STRING_EQUAL(ldmoe_error_string(LDMOE_OK), "success");
    CU_ASSERT(strncmp(ldmoe_version(), LDMOE_VERSION_STRING, strlen(LDMOE_VERSION_STRING)) == 0);
}

/* ---- FP8 (ldmoe.h, ldmoe_fp8_params_t) ---------------------------------------------------- */

static ldmoe_fp8_params_t good_fp8(void) {
    ldmoe_fp8_params_t f;
    memset(&f, 0, sizeof f);
    f.base = good();
    f.scaling = LDMOE_FP8_ROWWISE;
    f.x_scale = (const float *)P(0x50000);
    f.w_scale = (const float *)P(0x60000);
    return f;
}

/* Every refusal of ldmoe_grouped_mm_fp8 comes before any CUDA call, with a message that names
 * what was wrong; a valid call with T > 0 reaches the device check (no GPU here: UNSUPPORTED). */
static void test_fp8_validation(void) {
    ldmoe_fp8_params_t f = good_fp8();
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_OK);   /* T = 0: nothing to do */
    f.scaling = LDMOE_FP8_BLOCK;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_OK);
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(NULL), LDMOE_ERR_INVALID_ARG);
    for (int sc = -1; sc <= 3; sc += 1) {
        if (sc == LDMOE_FP8_ROWWISE || sc == LDMOE_FP8_BLOCK) continue;
        f = good_fp8(); f.scaling = sc;
        CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "scaling"));
    }
    f = good_fp8(); f.base.K = 520;   /* a multiple of 8 (enough for bf16), not of 16 */
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_ALIGNMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "multiple of 16"));
    ldmoe_params_t b = good(); b.K = 520;   /* the bf16 entry point still takes it */
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&b), LDMOE_OK);
    f = good_fp8(); f.base.K = 100;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_ALIGNMENT);
    f = good_fp8(); f.base.tile = LDMOE_TILE_WS_128x64_C16;   /* a bf16 tile */
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "bf16 tile"));
    f = good_fp8(); f.base.tile = 99;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "not a tile"));
#define FP8_TILE_OK_(value, name, bm, bn)                                                     \
    f = good_fp8(); f.base.tile = LDMOE_TILE_##name;                                          \
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_OK);                                      \
    b = good(); b.tile = LDMOE_TILE_##name;   /* and the bf16 entry point refuses it */        \
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&b), LDMOE_ERR_INVALID_ARG);                          \
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "ldmoe_grouped_mm_fp8"));
    LDMOE_FP8_TILE_LIST(FP8_TILE_OK_)
#undef FP8_TILE_OK_
    /* the bf16 checks apply as they are */
    f = good_fp8(); f.base.offs = NULL;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_INVALID_ARG);
    f = good_fp8(); f.base.mode = 4;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_INVALID_ARG);
    f = good_fp8(); f.base.layout = 3;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_INVALID_ARG);
    f = good_fp8(); f.base.num_domains = 9;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_INVALID_ARG);
    f = good_fp8(); f.base.E = 0;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_INVALID_ARG);
    f = good_fp8(); f.base.N = 1000;   /* not a multiple of 8*D */
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_ALIGNMENT);
    f = good_fp8(); f.base.x = P(0x10008);
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_ALIGNMENT);
    f = good_fp8(); f.base.steal_waves = __builtin_nanf("");
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_INVALID_ARG);
    /* the scales */
    f = good_fp8(); f.base.T = 5; f.x_scale = NULL;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "x_scale"));
    f = good_fp8(); f.base.T = 5; f.w_scale = NULL;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_INVALID_ARG);
    f = good_fp8(); f.base.T = 5; f.base.w = NULL;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_INVALID_ARG);
    f = good_fp8(); f.w_scale = (const float *)P(0x60002);
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_ALIGNMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "4-byte"));
    f = good_fp8(); f.x_scale = (const float *)P(0x50001);
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_ALIGNMENT);
    /* a valid call that has work: the device check refuses it here (no compute capability 9.0 GPU) */
    f = good_fp8(); f.base.T = 5;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "9.0"));
    /* block scales only 4-byte aligned (the kernels read them from the 16-byte boundary below) */
    f = good_fp8(); f.base.T = 5; f.scaling = LDMOE_FP8_BLOCK;
    f.x_scale = (const float *)P(0x50004); f.w_scale = (const float *)P(0x6000c);
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "9.0"));
    /* block scales past int32 element coordinates: KB * T = 56 * 40e6 floats of x_scale; refused
     * before any CUDA call, while rowwise scales of the same call reach the device check */
    f = good_fp8(); f.base.T = 40000000; f.base.K = 7168; f.scaling = LDMOE_FP8_BLOCK;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "block scales"));
    f.scaling = LDMOE_FP8_ROWWISE;
    CU_ASSERT_EQUAL(ldmoe_grouped_mm_fp8(&f), LDMOE_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "9.0"));
}

/* The FP8 packed layout is the bf16 one of the same bytes: every e4m3 element gets its own byte
 * inside ldmoe_packed_bytes_fp8, its 16-byte chunk holds 16 consecutive k, and the box rows are
 * 128 bytes with chunk c at c ^ (row % 8). */
static void check_packed_fp8(int E, int N, int K, int D) {
    const int ND = N / D;
    const size_t bytes = ldmoe_packed_bytes_fp8(E, N, K, D);
    CU_ASSERT_EQUAL_FATAL(bytes, (size_t)D * E * ((ND + 127) / 128) * ((K + 511) / 512 * 4) * 16384);
    CU_ASSERT_EQUAL(bytes, ldmoe_packed_bytes(E, N, K / 2, D));
    unsigned char *seen = calloc(bytes, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(seen);
    int ok_range = 1, ok_chunk = 1, ok_swizzle = 1;
    for (int d = 0; d < D; ++d)
        for (int e = 0; e < E; ++e)
            for (int r = 0; r < ND; ++r)
                for (int k = 0; k < K; ++k) {
                    int64_t o = ldmoe_packed_offset_fp8(E, ND, K, d, e, r, k);
                    if (o < 0 || o >= (int64_t)bytes) { ok_range = 0; continue; }
                    seen[o]++;
                    if (k % 16 && o != ldmoe_packed_offset_fp8(E, ND, K, d, e, r, k - k % 16) + k % 16) ok_chunk = 0;
                    int rr = r % 128, c = (k % 128) / 16;
                    if ((o % 16384) / 128 != rr || (o % 128) / 16 != (c ^ (rr % 8)) ||
                        o / 16384 != ldmoe_packed_box(E, ND, K / 2, d, e, r / 128, k / 128))
                        ok_swizzle = 0;
                }
    size_t named = 0, twice = 0;
    for (size_t i = 0; i < bytes; ++i) { named += seen[i] != 0; twice += seen[i] > 1; }
    CU_ASSERT(ok_range);
    CU_ASSERT(ok_chunk);
    CU_ASSERT(ok_swizzle);
    CU_ASSERT_EQUAL(twice, 0);
    CU_ASSERT_EQUAL(named, (size_t)D * E * ND * K);
    free(seen);
}

static void test_fp8_layouts(void) {
    check_packed_fp8(3, 64, 144, 2);     /* rows and k padded */
    check_packed_fp8(2, 256, 512, 1);    /* no padding */
    check_packed_fp8(2, 520, 1040, 2);   /* 260 rows per slice, k past a whole stage */
    check_packed_fp8(1, 8, 16, 1);
    CU_ASSERT_EQUAL(ldmoe_packed_bytes_fp8(2, 64, 72, 1), 0);     /* K % 16 */
    CU_ASSERT_EQUAL(ldmoe_packed_bytes_fp8(2, 64, 8, 1), 0);
    CU_ASSERT_EQUAL(ldmoe_packed_bytes_fp8(2, 63, 64, 2), 0);     /* N % D */
    CU_ASSERT_EQUAL(ldmoe_packed_bytes_fp8(0, 64, 64, 1), 0);
    CU_ASSERT_EQUAL(ldmoe_packed_bytes_fp8(128, 1536, 2048, 2), (size_t)128 * 1536 * 2048);   /* no padding */
    CU_ASSERT_EQUAL(ldmoe_packed_bytes_fp8(32, 4096, 7168, 2), (size_t)32 * 4096 * 7168);
    /* packer and converter validation: before any CUDA call, K counted in e4m3 elements */
    CU_ASSERT_EQUAL(ldmoe_pack_weights_fp8(NULL, 0, P(0x1000), 2, 64, 64, 2, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_pack_weights_fp8(P(0x1000), 2, P(0x1000000), 2, 64, 64, 2, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "src_layout"));
    CU_ASSERT_EQUAL(ldmoe_pack_weights_fp8(P(0x1000), 0, P(0x1000000), 2, 64, 72, 2, NULL), LDMOE_ERR_ALIGNMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "K = 72"));
    CU_ASSERT_EQUAL(ldmoe_pack_weights_fp8(P(0x1000), 0, P(0x1000000), 2, 63, 64, 2, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_pack_weights_fp8(P(0x1000), 0, P(0x1000008), 2, 64, 64, 2, NULL), LDMOE_ERR_ALIGNMENT);
    CU_ASSERT_EQUAL(ldmoe_pack_weights_fp8(P(0x1000), 0, P(0x1000), 2, 64, 64, 2, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "overlap"));
    /* 2 x 64 x 64 e4m3 = 8 KiB: a destination 8 KiB past the source does not overlap it, 4 KiB past does */
    CU_ASSERT_EQUAL(ldmoe_pack_weights_fp8(P(0x1000), 0, P(0x1000 + 4096), 2, 64, 64, 2, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_convert_layout_fp8(NULL, P(0x1000), 2, 64, 64, 2, 1, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_convert_layout_fp8(P(0x1000), P(0x1000000), 2, 64, 72, 2, 1, NULL), LDMOE_ERR_ALIGNMENT);
    CU_ASSERT_EQUAL(ldmoe_convert_layout_fp8(P(0x1000), P(0x1000000), 2, 63, 64, 2, 1, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_convert_layout_fp8(P(0x1000), P(0x1000 + 4096), 2, 64, 64, 2, 1, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "overlap"));
    /* block-scale indexing: [D*E][ceil(N/D / 128)][ceil(K / 128)] */
    CU_ASSERT_EQUAL(ldmoe_fp8_kblocks(7168), 56);
    CU_ASSERT_EQUAL(ldmoe_fp8_kblocks(7184), 57);
    CU_ASSERT_EQUAL(ldmoe_fp8_rowblocks(1000), 8);
    CU_ASSERT_EQUAL(ldmoe_fp8_block_wscale_index(1024, 7168, 0, 0, 0), 0);
    CU_ASSERT_EQUAL(ldmoe_fp8_block_wscale_index(1024, 7168, 0, 127, 55), 55);
    CU_ASSERT_EQUAL(ldmoe_fp8_block_wscale_index(1024, 7168, 0, 128, 0), 56);
    CU_ASSERT_EQUAL(ldmoe_fp8_block_wscale_index(1024, 7168, 3, 1023, 55), 3 * 8 * 56 + 7 * 56 + 55);
}

/* The FP8 tiles: geometry through ldmoe_tile_info, AUTO's FP8 choice, values apart from bf16's. */
static void test_fp8_tiles(void) {
    int bm = 0, bn = 0;
    int64_t bound = 0;
    CU_ASSERT_EQUAL(ldmoe_tile_info(1000, 8, 4096, 4096, LDMOE_LAYOUT_PACKED, 2, LDMOE_TILE_WS_128x64_C16_FP8, &bm, &bn,
                                    &bound), LDMOE_OK);
    CU_ASSERT(bm == 128 && bn == 64);
    CU_ASSERT_EQUAL(bound, ((1000 + 63) / 64 + 8) * 2 * (2048 / 128));
    CU_ASSERT_EQUAL(ldmoe_tile_info(1000, 8, 4096, 4096, LDMOE_LAYOUT_PLAIN, 1, LDMOE_TILE_WS_128x128_C16_FP8, &bm, &bn,
                                    NULL), LDMOE_OK);
    CU_ASSERT(bm == 128 && bn == 128);
    CU_ASSERT_EQUAL(LDMOE_TILE_WS_128x64_C16_FP8, 22);
    CU_ASSERT_EQUAL(LDMOE_TILE_WS_128x128_C16_FP8, 23);
    CU_ASSERT_EQUAL(LDMOE_TILE_WS_256x128_FP8, 24);
    CU_ASSERT_EQUAL(ldmoe_tile_info(1000, 8, 4096, 4096, LDMOE_LAYOUT_PACKED, 2, LDMOE_TILE_WS_256x128_FP8, &bm, &bn,
                                    &bound), LDMOE_OK);
    CU_ASSERT(bm == 256 && bn == 128);
    CU_ASSERT_EQUAL(bound, ((1000 + 127) / 128 + 8) * 2 * (2048 / 256));
    CU_ASSERT_EQUAL(LDMOE_TILE_WS_256x64_C16_FP8, 25);
    CU_ASSERT_EQUAL(ldmoe_tile_info(1000, 8, 4096, 4096, LDMOE_LAYOUT_PACKED, 2, LDMOE_TILE_WS_256x64_C16_FP8, &bm, &bn,
                                    &bound), LDMOE_OK);
    CU_ASSERT(bm == 256 && bn == 64);
    CU_ASSERT_EQUAL(bound, ((1000 + 63) / 64 + 8) * 2 * (2048 / 256));
    CU_ASSERT_EQUAL(LDMOE_TILE_WS_256x128_C16_FP8, 26);
    CU_ASSERT_EQUAL(ldmoe_tile_info(1000, 8, 4096, 4096, LDMOE_LAYOUT_PACKED, 2, LDMOE_TILE_WS_256x128_C16_FP8, &bm, &bn,
                                    &bound), LDMOE_OK);
    CU_ASSERT(bm == 256 && bn == 128);
    CU_ASSERT_EQUAL(bound, ((1000 + 127) / 128 + 8) * 2 * (2048 / 256));
#define NOT_BF16_(value, name, bm_, bn_) CU_ASSERT(!in_tile_list(value));
    LDMOE_FP8_TILE_LIST(NOT_BF16_)
#undef NOT_BF16_
    /* AUTO by the average tokens per expert (the 32-expert bench shape: N = 4096 on 2 domains,
     * 132 SMs, where the 256-row block tile fills the waves as well as the 128-row one). */
#define AUTO8_(T, E, S) ldmoe_auto_tile_fp8((T), (E), 4096, 2, 132, (S))
    CU_ASSERT_EQUAL(AUTO8_(0, 8, LDMOE_FP8_ROWWISE), LDMOE_TILE_WS_128x64_C16_FP8);
    CU_ASSERT_EQUAL(AUTO8_(64 * 8, 8, LDMOE_FP8_ROWWISE), LDMOE_TILE_WS_128x64_C16_FP8);
    CU_ASSERT_EQUAL(LDMOE_FP8_PREFILL_MIN, 65);
    CU_ASSERT_EQUAL(AUTO8_(65 * 8 - 1, 8, LDMOE_FP8_ROWWISE), LDMOE_TILE_WS_128x64_C16_FP8);
    CU_ASSERT_EQUAL(AUTO8_(65 * 8, 8, LDMOE_FP8_ROWWISE), LDMOE_TILE_WS_256x128_FP8);
    CU_ASSERT_EQUAL(AUTO8_(2048 * 8, 8, LDMOE_FP8_ROWWISE), LDMOE_TILE_WS_256x128_FP8);
    CU_ASSERT_EQUAL(AUTO8_((int64_t)1 << 30, 1, LDMOE_FP8_ROWWISE), LDMOE_TILE_WS_256x128_FP8);
    CU_ASSERT_EQUAL(AUTO8_(20, 0, LDMOE_FP8_ROWWISE), LDMOE_TILE_WS_128x64_C16_FP8);
    CU_ASSERT_EQUAL(AUTO8_(0, 32, LDMOE_FP8_BLOCK), LDMOE_TILE_WS_256x64_C16_FP8);
    CU_ASSERT_EQUAL(AUTO8_(8 * 32, 32, LDMOE_FP8_BLOCK), LDMOE_TILE_WS_256x64_C16_FP8);
    CU_ASSERT_EQUAL(AUTO8_(64 * 8, 8, LDMOE_FP8_BLOCK), LDMOE_TILE_WS_256x64_C16_FP8);
    CU_ASSERT_EQUAL(AUTO8_(65 * 8 - 1, 8, LDMOE_FP8_BLOCK), LDMOE_TILE_WS_256x64_C16_FP8);
    CU_ASSERT_EQUAL(AUTO8_(65 * 8, 8, LDMOE_FP8_BLOCK), LDMOE_TILE_WS_256x128_C16_FP8);
    CU_ASSERT_EQUAL(AUTO8_((int64_t)1 << 30, 1, LDMOE_FP8_BLOCK), LDMOE_TILE_WS_256x128_C16_FP8);
#undef AUTO8_
    /* Wave fill: 448 tiles on 132 SMs take 4 waves, 448 / 528 of them full; none is 1. */
    CU_ASSERT_DOUBLE_EQUAL(ldmoe_wave_fill(448, 132), 448.0 / 528.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(ldmoe_wave_fill(896, 132), 896.0 / 924.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(ldmoe_wave_fill(264, 132), 1.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(ldmoe_wave_fill(0, 132), 1.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(ldmoe_wave_fill(5, 0), 1.0, 1e-12);
    /* Block scales on the 8-expert bench shape (N = 14336, 2 domains, 132 SMs): 256-row tiles
     * fill 0.85 of their waves, 128-row ones 0.97, so at every decode size the 128-row tile,
     * and the prefill tile from 65 tokens per expert. On the
     * 128-expert shape (N = 1536: 768 against 1536 tiles, both 0.97) and bound to 66 SMs the
     * 256-row tile everywhere at decode. Rowwise never looks at the waves. */
    CU_ASSERT_EQUAL(ldmoe_auto_tile_fp8(8 * 8, 8, 14336, 2, 132, LDMOE_FP8_BLOCK), LDMOE_TILE_WS_128x64_C16_FP8);
    CU_ASSERT_EQUAL(ldmoe_auto_tile_fp8(32 * 8, 8, 14336, 2, 132, LDMOE_FP8_BLOCK), LDMOE_TILE_WS_128x64_C16_FP8);
    CU_ASSERT_EQUAL(ldmoe_auto_tile_fp8(33 * 8, 8, 14336, 2, 132, LDMOE_FP8_BLOCK), LDMOE_TILE_WS_128x64_C16_FP8);
    CU_ASSERT_EQUAL(ldmoe_auto_tile_fp8(64 * 8, 8, 14336, 2, 132, LDMOE_FP8_BLOCK), LDMOE_TILE_WS_128x64_C16_FP8);
    CU_ASSERT_EQUAL(ldmoe_auto_tile_fp8(65 * 8, 8, 14336, 2, 132, LDMOE_FP8_BLOCK), LDMOE_TILE_WS_256x128_C16_FP8);
    CU_ASSERT_EQUAL(ldmoe_auto_tile_fp8(8 * 8, 8, 14336, 2, 66, LDMOE_FP8_BLOCK), LDMOE_TILE_WS_256x64_C16_FP8);
    CU_ASSERT_EQUAL(ldmoe_auto_tile_fp8(8 * 128, 128, 1536, 2, 132, LDMOE_FP8_BLOCK), LDMOE_TILE_WS_256x64_C16_FP8);
    CU_ASSERT_EQUAL(ldmoe_auto_tile_fp8(8 * 32, 32, 4096, 2, 132, LDMOE_FP8_BLOCK), LDMOE_TILE_WS_256x64_C16_FP8);
    CU_ASSERT_EQUAL(ldmoe_auto_tile_fp8(8 * 8, 8, 14336, 2, 132, LDMOE_FP8_ROWWISE), LDMOE_TILE_WS_128x64_C16_FP8);
    /* Degenerate sizes pick a tile and do not divide by zero. */
    CU_ASSERT_EQUAL(ldmoe_auto_tile_fp8(8, 1, 0, 0, 0, LDMOE_FP8_BLOCK), LDMOE_TILE_WS_256x64_C16_FP8);
    CU_ASSERT_EQUAL(ldmoe_auto_tile_fp8(8, 0, 128, 1, 0, LDMOE_FP8_BLOCK), LDMOE_TILE_WS_256x64_C16_FP8);
}

static float bits_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* The quantizer's division (impl/div_rn.h) against IEEE division: every finite bf16 x with
 * |x| <= 512 s (the kernel divides by s = amax / 448 only elements with |x| <= amax), for scales
 * made as the kernel makes them from random bf16 amax values, from amax values at the edges of
 * the range where it is used, and from significands of all ones. Quotients of 2^-12 and more
 * must be the same float; smaller ones (which become e4m3 zero either way) must both stay below
 * 2^-10, with x's sign. */
static void test_quantize_division(void) {
    float scales[160];
    int ns = 0;
    uint32_t seed = 12345;
    for (int i = 0; i < 120; ++i) {
        seed = seed * 1664525u + 1013904223u;
        const float amax = bits_f(((0x0080u + (seed >> 16) % 0x7e80u) & 0x7fffu) << 16);   /* a finite bf16 > 0 */
        scales[ns++] = amax * (1.f / 448.f);
    }
    const float edges[] = {1.f, 448.f, 0x1.fep127f, 0x1.000002p-71f, 0x1.fep-71f, 0x1p-60f, 1e30f, 3e-20f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; ++i) scales[ns++] = edges[i] * (1.f / 448.f);
    for (int e = -70; e <= 120; e += 10) scales[ns++] = ldexpf(0x1.fffffep0f, e);   /* significand all ones */
    long checked = 0, wrong = 0;
    for (int i = 0; i < ns; ++i) {
        const float s = scales[i];
        if (!(s >= LDMOE_DIV_MIN_SCALE && s <= LDMOE_DIV_MAX_SCALE)) continue;   /* the kernel divides there */
        const float r = 1.f / s;
        for (uint32_t b = 0; b < 0x10000u; ++b) {
            const float x = bits_f(b << 16);
            if (!isfinite(x) || fabsf(x) > 512.f * s) continue;
            const float want = x / s, got = ldmoe_div_by(x, s, r);
            ++checked;
            if (fabsf(want) >= 0x1p-12f ? f_bits(got) != f_bits(want)
                                        : !(fabsf(got) < 0x1p-10f && signbit(got) == signbit(x)))
                ++wrong;
        }
    }
    CU_ASSERT(ns > 130);
    CU_ASSERT(checked > 1000000);
    CU_ASSERT_EQUAL(wrong, 0);
    /* -0 keeps its sign */
    CU_ASSERT(signbit(ldmoe_div_by(-0.f, 3.f, 1.f / 3.f)));
}

/* ldmoe_quantize_fp8: every refusal before a CUDA call; T = 0 is a no-op. */
static void test_quantize_validation(void) {
    void *x = (void *)(uintptr_t)0x10000, *x8 = (void *)(uintptr_t)0x20000;
    float *xs = (float *)(uintptr_t)0x30000;
    CU_ASSERT_EQUAL(ldmoe_quantize_fp8(x, 0, 4096, LDMOE_FP8_ROWWISE, x8, xs, NULL), LDMOE_OK);
    CU_ASSERT_EQUAL(ldmoe_quantize_fp8(NULL, 0, 4096, LDMOE_FP8_BLOCK, NULL, NULL, NULL), LDMOE_OK);
    CU_ASSERT_EQUAL(ldmoe_quantize_fp8(x, 8, 4096, 0, x8, xs, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "scaling"));
    CU_ASSERT_EQUAL(ldmoe_quantize_fp8(x, 8, 4096, 3, x8, xs, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_quantize_fp8(x, -1, 4096, LDMOE_FP8_ROWWISE, x8, xs, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_quantize_fp8(x, 8, 0, LDMOE_FP8_ROWWISE, x8, xs, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_quantize_fp8(x, 8, 4104, LDMOE_FP8_ROWWISE, x8, xs, NULL), LDMOE_ERR_ALIGNMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "multiple of 16"));
    CU_ASSERT_EQUAL(ldmoe_quantize_fp8(x, (int64_t)1 << 31, 4096, LDMOE_FP8_ROWWISE, x8, xs, NULL), LDMOE_ERR_UNSUPPORTED);
    CU_ASSERT_EQUAL(ldmoe_quantize_fp8(NULL, 8, 4096, LDMOE_FP8_ROWWISE, x8, xs, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_quantize_fp8(x, 8, 4096, LDMOE_FP8_BLOCK, NULL, xs, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_quantize_fp8(x, 8, 4096, LDMOE_FP8_BLOCK, x8, NULL, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "non-NULL"));
    CU_ASSERT_EQUAL(ldmoe_quantize_fp8((char *)x + 8, 8, 4096, LDMOE_FP8_ROWWISE, x8, xs, NULL), LDMOE_ERR_ALIGNMENT);
    CU_ASSERT_EQUAL(ldmoe_quantize_fp8(x, 8, 4096, LDMOE_FP8_ROWWISE, (char *)x8 + 4, xs, NULL), LDMOE_ERR_ALIGNMENT);
    CU_ASSERT_EQUAL(ldmoe_quantize_fp8(x, 8, 4096, LDMOE_FP8_ROWWISE, x8, (float *)((char *)xs + 2), NULL),
                    LDMOE_ERR_ALIGNMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "aligned"));
}

static void register_tests(void) {
    CU_pSuite s = CU_add_suite("ldmoe_cpu", NULL, NULL);
    CU_add_test(s, "tile numbering, fixed counts", test_numbering_fixed);
    CU_add_test(s, "tile numbering, 200 random routings", test_numbering_random);
    CU_add_test(s, "expert search skips empty experts", test_single_expert_all_empty_but_one);
    CU_add_test(s, "steal rule", test_steal_rule);
    CU_add_test(s, "localized row mapping", test_localized_rows);
    CU_add_test(s, "argument validation", test_validation);
    CU_add_test(s, "converter validation", test_convert_validation);
    CU_add_test(s, "tile info", test_tile_info);
    CU_add_test(s, "AUTO's tile choice", test_auto_tile);
    CU_add_test(s, "packed layout and packer validation", test_packed_layout);
    CU_add_test(s, "ldmoe_get_topology argument checks", test_get_topology_args);
    CU_add_test(s, "strings", test_strings);
    CU_add_test(s, "FP8 argument validation", test_fp8_validation);
    CU_add_test(s, "FP8 packed layout, packer and converter validation", test_fp8_layouts);
    CU_add_test(s, "FP8 tiles and AUTO's FP8 choice", test_fp8_tiles);
    CU_add_test(s, "FP8 activation quantization validation", test_quantize_validation);
    CU_add_test(s, "FP8 quantizer's division is IEEE division", test_quantize_division);
}
