/* test_ldmoe_lab_cpu.c — CPU tests of the lab build of libldmoe (bench/moe/lab/ldmoe_lab.h,
 * build/lab/libldmoe_lab.so): every tile of both lists keeps its value and reports the geometry
 * of its kernel, the lab's arguments are validated, and the product API answers there as it does
 * in libldmoe.so. No GPU needed: every call returns before touching CUDA. */
#include <stdint.h>
#include <string.h>
#include "bench/moe/lab/ldmoe_lab.h"
#include "tests/unit/cunit_main.h"

static void *P(uintptr_t v) { return (void *)v; }

static ldmoe_lab_params_t good(void) {
    ldmoe_lab_params_t p;
    memset(&p, 0, sizeof p);
    p.base.x = P(0x10000); p.base.w = P(0x20000); p.base.offs = P(0x30000); p.base.y = P(0x40000);
    p.base.T = 0; p.base.E = 8; p.base.N = 1024; p.base.K = 512; p.base.layout = LDMOE_LAYOUT_LOCALIZED;
    p.base.num_domains = 2;
    return p;
}

/* The 21 tiles with the values and geometry they had before the lab split (the old enum
 * ldmoe_tile): the product's 7 in ldmoe.h, the other 14 here. */
static const struct { int tile, value, bm, bn; } kGeo[] = {
    {LDMOE_LAB_TILE_64x16, 1, 64, 16},           {LDMOE_LAB_TILE_64x64, 2, 64, 64},
    {LDMOE_TILE_128x128, 3, 128, 128},           {LDMOE_TILE_128x256, 4, 128, 256},
    {LDMOE_LAB_TILE_WG_256x128, 5, 256, 128},    {LDMOE_LAB_TILE_WG_128x128, 6, 128, 128},
    {LDMOE_TILE_64x16_K4, 7, 64, 16},            {LDMOE_TILE_64x64_K4, 8, 64, 64},
    {LDMOE_LAB_TILE_WG_256x128_K2, 9, 256, 128}, {LDMOE_LAB_TILE_WG_128x128_K2, 10, 128, 128},
    {LDMOE_LAB_TILE_WS_256x128, 11, 256, 128},   {LDMOE_LAB_TILE_WS_128x64, 12, 128, 64},
    {LDMOE_LAB_TILE_WS_128x16, 13, 128, 16},     {LDMOE_LAB_TILE_128x64_K2, 14, 128, 64},
    {LDMOE_LAB_TILE_WS_128x128, 15, 128, 128},   {LDMOE_LAB_TILE_64x8_K4, 16, 64, 8},
    {LDMOE_LAB_TILE_WS_256x64, 17, 256, 64},     {LDMOE_LAB_TILE_WS_128x64_K1, 18, 128, 64},
    {LDMOE_TILE_WS_256x128_EW, 19, 256, 128},    {LDMOE_TILE_WS_128x64_C16, 20, 128, 64},
    {LDMOE_TILE_WS_128x128_C16, 21, 128, 128},
};

static void test_tiles(void) {
    int listed = 0;
#define COUNT_(value, name, bm, bn) ++listed;
    LDMOE_TILE_LIST(COUNT_)
    LDMOE_LAB_TILE_LIST(COUNT_)
#undef COUNT_
    CU_ASSERT_EQUAL(sizeof kGeo / sizeof kGeo[0], listed);
    for (size_t i = 0; i < sizeof kGeo / sizeof kGeo[0]; ++i) {
        int bm = 0, bn = 0;
        int64_t bound = 0;
        CU_ASSERT_EQUAL(kGeo[i].tile, kGeo[i].value);
        CU_ASSERT_EQUAL(ldmoe_tile_info(1000, 8, 4096, 4096, LDMOE_LAYOUT_LOCALIZED, 2, kGeo[i].tile, &bm, &bn, &bound),
                        LDMOE_OK);
        CU_ASSERT_EQUAL(bm, kGeo[i].bm);
        CU_ASSERT_EQUAL(bn, kGeo[i].bn);
        CU_ASSERT_EQUAL(bound, ((1000 + bn - 1) / bn + 8) * 2 * ((2048 + bm - 1) / bm));
        ldmoe_lab_params_t p = good();   /* T = 0 with each tile: accepted, nothing launched */
        p.base.tile = kGeo[i].tile;
        CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm(&p), LDMOE_OK);
        CU_ASSERT_EQUAL(ldmoe_grouped_mm_ex(&p.base), LDMOE_OK);
    }
    /* 22..24 are the FP8 tiles (ldmoe.h LDMOE_FP8_TILE_LIST): geometry yes, the bf16 entry points no */
    CU_ASSERT_EQUAL(ldmoe_tile_info(1, 1, 64, 64, 0, 1, 22, NULL, NULL, NULL), LDMOE_OK);
    ldmoe_lab_params_t f = good();
    f.base.tile = LDMOE_TILE_WS_128x64_C16_FP8;
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm(&f), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_tile_info(1, 1, 64, 64, 0, 1, 24, NULL, NULL, NULL), LDMOE_OK);   /* WS_256x128_FP8 */
    CU_ASSERT_EQUAL(ldmoe_tile_info(1, 1, 64, 64, 0, 1, 25, NULL, NULL, NULL), LDMOE_OK);   /* WS_256x64_C16_FP8 */
    CU_ASSERT_EQUAL(ldmoe_tile_info(1, 1, 64, 64, 0, 1, 26, NULL, NULL, NULL), LDMOE_OK);   /* WS_256x128_C16_FP8 */
    CU_ASSERT_EQUAL(ldmoe_tile_info(1, 1, 64, 64, 0, 1, 27, NULL, NULL, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_tile_info(1, 1, 64, 64, 0, 1, -1, NULL, NULL, NULL), LDMOE_ERR_INVALID_ARG);
}

static void test_validation(void) {
    ldmoe_lab_params_t p = good();
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm(NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm(&p), LDMOE_OK);
    p = good(); p.debug_tiles = (uint32_t *)P(0x50000); p.debug_cap = 0;
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm(&p), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "debug_cap"));
    p = good(); p.debug_tiles = (uint32_t *)P(0x50000); p.debug_cap = 16;
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm(&p), LDMOE_OK);
    p = good(); p.tune = 0x100u;   /* unknown tune bit */
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm(&p), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "tune"));
    p = good(); p.tune = LDMOE_TUNE_DIAG_NO_MMA;   /* only the diagnostic build knows it */
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm(&p), LDMOE_ERR_INVALID_ARG);
    p = good(); p.tune = LDMOE_TUNE_SCALAR_EPILOGUE | LDMOE_TUNE_TOKENS_NORMAL | LDMOE_TUNE_WEIGHTS_NORMAL |
                         LDMOE_TUNE_STREAM_STORES | LDMOE_TUNE_DYNAMIC_ONLY | LDMOE_TUNE_NO_DEPENDENT |
                         LDMOE_TUNE_LATE_TAIL | LDMOE_TUNE_EARLY_TAIL;   /* all known bits: T = 0 is a no-op */
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm(&p), LDMOE_OK);
    p = good(); p.base.K = 100;   /* the product checks still apply */
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm(&p), LDMOE_ERR_ALIGNMENT);
    p = good(); p.base.tile = 99;
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm(&p), LDMOE_ERR_INVALID_ARG);
    /* the lab struct starts with the product's, so old callers' offsets still hold */
    CU_ASSERT_EQUAL(offsetof(ldmoe_lab_params_t, debug_tiles), sizeof(ldmoe_params_t));
}

static ldmoe_lab_fp8_params_t good_fp8(void) {
    ldmoe_lab_fp8_params_t f;
    memset(&f, 0, sizeof f);
    f.fp8.base = good().base;
    f.fp8.scaling = LDMOE_FP8_ROWWISE;
    f.fp8.x_scale = (const float *)P(0x60000);
    f.fp8.w_scale = (const float *)P(0x70000);
    return f;
}

/* The lab's FP8 entry: the product's FP8 checks, then the lab's own, before any CUDA call. */
static void test_validation_fp8(void) {
    ldmoe_lab_fp8_params_t f = good_fp8();
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm_fp8(NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm_fp8(&f), LDMOE_OK);   /* T = 0: nothing launched */
    f.fp8.base.tile = LDMOE_TILE_WS_128x128_C16_FP8;
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm_fp8(&f), LDMOE_OK);
    f = good_fp8(); f.fp8.base.tile = LDMOE_TILE_WS_128x64_C16;   /* a bf16 tile */
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm_fp8(&f), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "bf16 tile"));
    f = good_fp8(); f.fp8.scaling = 0;
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm_fp8(&f), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "scaling"));
    f = good_fp8(); f.tune = 0x100u;
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm_fp8(&f), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "tune"));
    f = good_fp8(); f.tune = LDMOE_TUNE_DYNAMIC_ONLY | LDMOE_TUNE_STREAM_STORES;
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm_fp8(&f), LDMOE_OK);
    f = good_fp8(); f.tune = LDMOE_TUNE_NO_DEPENDENT;
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm_fp8(&f), LDMOE_OK);
    CU_ASSERT_EQUAL(LDMOE_TUNE_NO_DEPENDENT, 0x20u);
    f = good_fp8(); f.tune = 0x40u;   /* the prefetch bit that was measured and removed: unknown again */
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm_fp8(&f), LDMOE_ERR_INVALID_ARG);
    f = good_fp8(); f.tune = 0x80u;   /* so is the early-claim one of the same experiments */
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm_fp8(&f), LDMOE_ERR_INVALID_ARG);
    f = good_fp8(); f.tune = LDMOE_TUNE_LATE_TAIL;
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm_fp8(&f), LDMOE_OK);
    f = good_fp8(); f.tune = LDMOE_TUNE_EARLY_TAIL;
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm_fp8(&f), LDMOE_OK);
    CU_ASSERT_EQUAL(LDMOE_TUNE_LATE_TAIL, 0x200u);
    f = good_fp8(); f.debug_tiles = (uint32_t *)P(0x50000); f.debug_cap = -1;
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm_fp8(&f), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "debug_cap"));
    f = good_fp8(); f.fp8.base.K = 24;   /* e4m3 rows of 16-byte chunks */
    CU_ASSERT_EQUAL(ldmoe_lab_grouped_mm_fp8(&f), LDMOE_ERR_ALIGNMENT);
    CU_ASSERT_EQUAL(offsetof(ldmoe_lab_fp8_params_t, debug_tiles), sizeof(ldmoe_fp8_params_t));
}

static void test_version(void) {
    CU_ASSERT(strncmp(ldmoe_version(), LDMOE_VERSION_STRING, strlen(LDMOE_VERSION_STRING)) == 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_version(), "[lab build]"));
}

static void register_tests(void) {
    CU_pSuite s = CU_add_suite("ldmoe_lab_cpu", NULL, NULL);
    CU_add_test(s, "all 21 tiles: values and geometry", test_tiles);
    CU_add_test(s, "lab argument validation", test_validation);
    CU_add_test(s, "lab FP8 argument validation", test_validation_fp8);
    CU_add_test(s, "version", test_version);
}
