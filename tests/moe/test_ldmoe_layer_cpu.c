/* test_ldmoe_layer_cpu.c — CPU tests of the fused MoE layer's API (ldmoe_moe and its helpers)
 * through the real library: every rejected call returns before touching CUDA, so no GPU is
 * needed, and T = 0 returns success without a launch. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "kernels/moe/ldmoe.h"
#include "tests/unit/cunit_main.h"

/* Fake, aligned, never dereferenced device pointers: every call below fails (or returns for
 * T = 0) before any CUDA call. */
#define P(a) ((void *)(uintptr_t)(a))

static ldmoe_moe_params_t good(void) {
    ldmoe_moe_params_t p;
    memset(&p, 0, sizeof p);
    p.x = P(0x10000); p.w13 = P(0x20000); p.w2 = P(0x30000);
    p.topk_ids = (const int32_t *)P(0x40000); p.topk_weights = (const float *)P(0x50000); p.out = P(0x60000);
    p.T = 0; p.E = 128; p.H = 2048; p.I = 768; p.k = 8;
    p.layout = LDMOE_LAYOUT_PACKED; p.num_domains = 2;
    return p;
}

static void expect(const ldmoe_moe_params_t *p, int code, const char *needle) {
    int rc = ldmoe_moe(p);
    CU_ASSERT_EQUAL(rc, code);
    if (needle) CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), needle));
}

static void test_layer_validation(void) {
    ldmoe_moe_params_t p = good();
    CU_ASSERT_EQUAL(ldmoe_moe(NULL), LDMOE_ERR_INVALID_ARG);
    expect(&p, LDMOE_OK, NULL);   /* T = 0: nothing to do, no CUDA call */
    CU_ASSERT_STRING_EQUAL(ldmoe_last_error(), "");
    p = good(); p.T = -1; expect(&p, LDMOE_ERR_INVALID_ARG, "T = -1");
    p = good(); p.E = 0; expect(&p, LDMOE_ERR_INVALID_ARG, "E = 0");
    p = good(); p.E = 257; expect(&p, LDMOE_ERR_UNSUPPORTED, "1..256");
    p = good(); p.k = 0; expect(&p, LDMOE_ERR_INVALID_ARG, "k = 0");
    p = good(); p.k = 17; expect(&p, LDMOE_ERR_UNSUPPORTED, "1..16");
    p = good(); p.H = 2000; expect(&p, LDMOE_ERR_ALIGNMENT, "multiples of 64");
    p = good(); p.I = 96; p.layout = LDMOE_LAYOUT_PLAIN; expect(&p, LDMOE_ERR_ALIGNMENT, "multiples of 64");
    p = good(); p.I = 64 * 3; expect(&p, LDMOE_ERR_ALIGNMENT, "64 * num_domains = 128");   /* packed D = 2 */
    p = good(); p.I = 64 * 3; p.layout = LDMOE_LAYOUT_PLAIN; expect(&p, LDMOE_OK, NULL);     /* plain: D = 1 */
    p = good(); p.layout = LDMOE_LAYOUT_LOCALIZED; expect(&p, LDMOE_ERR_INVALID_ARG, "LDMOE_LAYOUT_PACKED");
    p = good(); p.num_domains = 0; expect(&p, LDMOE_ERR_INVALID_ARG, "num_domains = 0");
    p = good(); p.num_domains = 9; expect(&p, LDMOE_ERR_INVALID_ARG, "num_domains = 9");
    p = good(); p.mode = 4; expect(&p, LDMOE_ERR_INVALID_ARG, "mode 4");
    p = good(); p.steal_waves = NAN; expect(&p, LDMOE_ERR_INVALID_ARG, "NaN");
    p = good(); p.T = 4; p.topk_weights = NULL; expect(&p, LDMOE_ERR_INVALID_ARG, "non-NULL");
    p = good(); p.T = 4; p.out = NULL; expect(&p, LDMOE_ERR_INVALID_ARG, "non-NULL");
    p = good(); p.x = P(0x10008); expect(&p, LDMOE_ERR_ALIGNMENT, "16-byte");
    p = good(); p.w2 = P(0x30004); expect(&p, LDMOE_ERR_ALIGNMENT, "16-byte");
    p = good(); p.topk_ids = (const int32_t *)P(0x40002); expect(&p, LDMOE_ERR_ALIGNMENT, "4-byte");
    p = good(); p.T = (int64_t)1 << 40; expect(&p, LDMOE_ERR_UNSUPPORTED, "too large");
    p = good(); p.T = 1 << 20; p.E = 256; p.k = 16; expect(&p, LDMOE_ERR_UNSUPPORTED, "2^31");
    /* T*k*E within bounds, but 2^22 m-blocks x 2^19 weight-row blocks: a phase's tiles are numbered in 32 bits */
    p = good(); p.T = 1 << 26; p.E = 1; p.k = 1; p.H = 128; p.I = 1 << 23; expect(&p, LDMOE_ERR_UNSUPPORTED, "too many tiles");
}

static int fp8_call(ldmoe_moe_fp8_params_t *f, int code, const char *needle) {
    int rc = ldmoe_moe_fp8(f);
    CU_ASSERT_EQUAL(rc, code);
    if (needle) CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), needle));
    return rc;
}

static void test_layer_fp8_validation(void) {
    ldmoe_moe_fp8_params_t f;
    memset(&f, 0, sizeof f);
    CU_ASSERT_EQUAL(ldmoe_moe_fp8(NULL), LDMOE_ERR_INVALID_ARG);
    f.base = good(); f.scaling = LDMOE_FP8_BLOCK;
    fp8_call(&f, LDMOE_OK, NULL);   /* T = 0 with NULL scales: nothing to do */
    f.w13_scale = (const float *)P(0x70000); f.w2_scale = (const float *)P(0x80000);
    fp8_call(&f, LDMOE_OK, NULL);
    f.scaling = 0; fp8_call(&f, LDMOE_ERR_INVALID_ARG, "LDMOE_FP8_BLOCK");
    f.scaling = 7; fp8_call(&f, LDMOE_ERR_INVALID_ARG, "LDMOE_FP8_ROWWISE");
    f.scaling = LDMOE_FP8_ROWWISE; fp8_call(&f, LDMOE_OK, NULL);   /* a scale per weight row */
    f.tokens = 3; fp8_call(&f, LDMOE_ERR_INVALID_ARG, "LDMOE_FP8_TOKENS_E4M3_X");
    f.tokens = -1; fp8_call(&f, LDMOE_ERR_INVALID_ARG, "LDMOE_FP8_TOKENS_BF16");
    f.tokens = LDMOE_FP8_TOKENS_E4M3; fp8_call(&f, LDMOE_OK, NULL);   /* w8a8 */
    /* x given in e4m3: x_scale is read (and checked) only with LDMOE_FP8_TOKENS_E4M3_X */
    f.x_scale = (const float *)P(0x90002); fp8_call(&f, LDMOE_OK, NULL);
    f.tokens = LDMOE_FP8_TOKENS_E4M3_X; fp8_call(&f, LDMOE_ERR_ALIGNMENT, "x_scale must be 4-byte");
    f.x_scale = NULL; fp8_call(&f, LDMOE_OK, NULL);   /* T = 0: nothing read */
    f.base.T = 4; fp8_call(&f, LDMOE_ERR_INVALID_ARG, "x_scale must be non-NULL");
    f.base.T = 0; f.x_scale = (const float *)P(0x90000); fp8_call(&f, LDMOE_OK, NULL);
    f.tokens = LDMOE_FP8_TOKENS_BF16;
    f.scaling = LDMOE_FP8_BLOCK;
    f.base.layout = LDMOE_LAYOUT_PLAIN; fp8_call(&f, LDMOE_ERR_UNSUPPORTED, "packed");
    f.base = good(); f.base.num_domains = 1; f.base.I = 192; fp8_call(&f, LDMOE_ERR_ALIGNMENT, "multiples of 128");
    f.base = good(); f.base.T = 4; f.w2_scale = NULL; fp8_call(&f, LDMOE_ERR_INVALID_ARG, "non-NULL");
    f.w2_scale = (const float *)P(0x80002); fp8_call(&f, LDMOE_ERR_ALIGNMENT, "4-byte");
    f.base = good(); f.base.T = 4; f.base.k = 0; f.w2_scale = (const float *)P(0x80000);
    fp8_call(&f, LDMOE_ERR_INVALID_ARG, "k = 0");   /* the bf16 layer's checks apply */
    /* the FP8 packer: H and I multiples of 128 */
    CU_ASSERT_EQUAL(ldmoe_pack_moe_weights_fp8(P(0x1000000), P(0x4000000), P(0x2000000), P(0x5000000), 8, 256, 192, 1,
                                               NULL), LDMOE_ERR_ALIGNMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "multiples of 128"));
    CU_ASSERT_EQUAL(ldmoe_pack_moe_weights_fp8(NULL, P(0x4000000), P(0x2000000), P(0x5000000), 8, 256, 128, 1, NULL),
                    LDMOE_ERR_INVALID_ARG);
}

static void test_layer_packed_bytes(void) {
    size_t a = 0, b = 0;
    CU_ASSERT_EQUAL(ldmoe_moe_packed_bytes(128, 2048, 768, 2, &a, &b), LDMOE_OK);
    CU_ASSERT_EQUAL(a, (size_t)128 * 2 * 768 * 2048 * 2);
    CU_ASSERT_EQUAL(b, (size_t)128 * 2048 * 768 * 2);
    CU_ASSERT_EQUAL(ldmoe_moe_packed_bytes(64, 2048, 1408, 2, NULL, &b), LDMOE_OK);
    CU_ASSERT_EQUAL(b, (size_t)64 * 2048 * 1408 * 2);
    CU_ASSERT_EQUAL(ldmoe_moe_packed_bytes(8, 4096, 14336, 8, &a, NULL), LDMOE_OK);
    CU_ASSERT_EQUAL(ldmoe_moe_packed_bytes(64, 2048, 1408, 4, &a, &b), LDMOE_ERR_ALIGNMENT);   /* 1408 % 256 */
    CU_ASSERT_EQUAL(ldmoe_moe_packed_bytes(0, 2048, 768, 1, &a, &b), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_moe_packed_bytes(8, 2048, 768, 9, &a, &b), LDMOE_ERR_INVALID_ARG);
}

static void test_layer_pack_validation(void) {
    const size_t b13 = (size_t)8 * 2 * 128 * 256 * 2;
    CU_ASSERT_EQUAL(ldmoe_pack_moe_weights(NULL, P(0x100000), P(0x200000), P(0x300000), 8, 256, 128, 1, NULL),
                    LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_pack_moe_weights(P(0x100008), P(0x100000), P(0x200000), P(0x300000), 8, 256, 128, 1, NULL),
                    LDMOE_ERR_ALIGNMENT);
    /* w13 and its packed copy overlap */
    CU_ASSERT_EQUAL(ldmoe_pack_moe_weights(P(0x1000000), P(0x4000000), P(0x1000000 + b13 / 2), P(0x5000000), 8, 256,
                                           128, 1, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ldmoe_last_error(), "overlap"));
    CU_ASSERT_EQUAL(ldmoe_pack_moe_weights(P(0x1000000), P(0x4000000), P(0x2000000), P(0x5000000), 8, 256, 96, 1, NULL),
                    LDMOE_ERR_ALIGNMENT);
    CU_ASSERT_EQUAL(ldmoe_moe_errors(NULL, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_moe_reserve(-1, 8, 256, 128, 2, NULL), LDMOE_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(ldmoe_moe_reserve(4, 8, 250, 128, 2, NULL), LDMOE_ERR_ALIGNMENT);
}

static void register_tests(void) {
    CU_pSuite s = CU_add_suite("ldmoe layer (CPU)", NULL, NULL);
    CU_add_test(s, "argument validation", test_layer_validation);
    CU_add_test(s, "packed sizes", test_layer_packed_bytes);
    CU_add_test(s, "FP8 argument validation", test_layer_fp8_validation);
    CU_add_test(s, "packing and helpers validation", test_layer_pack_validation);
}
