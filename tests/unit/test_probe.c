/* test_probe.c — CUnit tests of the topology probe's host side (suite test-probe).
 *
 * Part 1: the classifiers and the balancer on synthetic latency matrices (shim/probe_classify.c).
 * Part 2: the cache file (shim/probe_cache.c): round trip, corruption, truncation, foreign.
 * Part 3: ld_probe_device (shim/probe.c) against a stub driver table whose "kernels" are
 * emulated on the CPU: orchestration, retries, fallback with one warning, cache and force,
 * context and memory hygiene, JSON.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include "shim/log.h"
#include "shim/options.h"
#include "shim/probe.h"
#include "shim/probe_cache.h"
#include "shim/probe_classify.h"

/* ---- synthetic data ---------------------------------------------------------------- */

static uint64_t rng_state;
static void rng_seed(uint64_t s) { rng_state = s * 0x9E3779B97F4A7C15ull + 1; }
static uint64_t rng_u64(void) {
    uint64_t x = rng_state;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    return rng_state = x;
}
static double rng_unit(void) { return (rng_u64() >> 11) * (1.0 / 9007199254740992.0); }
static double rng_gauss(void) {
    double u = rng_unit(), v = rng_unit();
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Interleaved truth: `ntpc0` TPCs in domain 0, the rest in 1, shuffled over TPC ids (as on
 * real chips, where domains are not contiguous ranges of SM ids). Clustered tests that
 * compare maps directly use seeds whose SM 0 lands in domain 0 (they assert it). */
static void make_truth(uint8_t *truth, uint32_t nsms, uint32_t ntpc0, uint64_t seed) {
    uint32_t ntpc = (nsms + 1) / 2;
    uint8_t tpc[LDSHIM_MAX_SMS];
    for (uint32_t t = 0; t < ntpc; t++) tpc[t] = t >= ntpc0;
    rng_seed(seed);
    for (uint32_t t = ntpc; t-- > 1;) {
        uint32_t j = (uint32_t)(rng_u64() % (t + 1));
        uint8_t x = tpc[t]; tpc[t] = tpc[j]; tpc[j] = x;
    }
    for (uint32_t s = 0; s < nsms; s++) truth[s] = tpc[s / 2];
}

static uint32_t count_of(const uint8_t *m, uint32_t n, uint8_t d) {
    uint32_t c = 0;
    for (uint32_t s = 0; s < n; s++) c += m[s] == d;
    return c;
}

/* lat[d][s][c] = near or far around `noise` (relative, uniform). */
static float *make_anchored(const uint8_t *truth, uint32_t nsms, double near, double far, double noise, uint64_t seed) {
    float *lat = malloc(2 * nsms * LD_PROBE_CHUNKS * sizeof *lat);
    rng_seed(seed);
    for (uint32_t d = 0; d < 2; d++)
        for (uint32_t s = 0; s < nsms; s++)
            for (uint32_t c = 0; c < LD_PROBE_CHUNKS; c++) {
                double base = truth[s] == d ? near : far;
                lat[(d * nsms + s) * LD_PROBE_CHUNKS + c] = (float)(base * (1.0 + noise * (2 * rng_unit() - 1)));
            }
    return lat;
}

/* Chunks spread symmetrically around the value so the median is exactly the value. */
static void set_chunks_exact(float *lat, uint32_t nsms, uint32_t d, uint32_t s, double v) {
    static const double spread[LD_PROBE_CHUNKS] = { -9, -5, -2, -1, 1, 2, 5, 9 };
    for (uint32_t c = 0; c < LD_PROBE_CHUNKS; c++)
        lat[(d * nsms + s) * LD_PROBE_CHUNKS + c] = (float)(v + spread[c]);
}

/* Shaped like FACTS.md's H200 data: per line a base of 260..330 cycles, a home group whose
 * SMs are `split` cycles faster than the others (about half the lines per group), a per-SM
 * offset, and Gaussian noise of `sd` cycles. */
static float *make_clustered(const uint8_t *truth, uint32_t nsms, uint32_t nl, uint32_t nd, double split, double sd,
                             uint64_t seed) {
    float *lat = malloc((size_t)nsms * nl * sizeof *lat);
    double off[LDSHIM_MAX_SMS];
    rng_seed(seed);
    for (uint32_t s = 0; s < nsms; s++) off[s] = 6.0 * rng_gauss();
    for (uint32_t l = 0; l < nl; l++) {
        double base = 260 + 70 * rng_unit();
        uint32_t home = (uint32_t)(rng_u64() % nd);
        for (uint32_t s = 0; s < nsms; s++) {
            double v = base + off[s] + (truth[s] == home ? -split / 2 : split / 2) + sd * rng_gauss();
            lat[(size_t)s * nl + l] = (float)v;
        }
    }
    return lat;
}

/* ---- part 1: classification -------------------------------------------------------- */

static void test_ring_visits_all(void) {
    int seen[LD_PROBE_RING_LEN] = {0};
    uint32_t i = 0;
    for (int h = 0; h < LD_PROBE_RING_LEN; h++) { seen[i]++; i = ld_ring_next(i, LD_PROBE_RING_LEN); }
    CU_ASSERT_EQUAL(i, 0);                      /* back at the start after 32 hops */
    for (int k = 0; k < LD_PROBE_RING_LEN; k++) CU_ASSERT_EQUAL(seen[k], 1);
    /* A stride sharing a factor with 32 would not: 8 visits 4 lines. */
    uint32_t j = 0, distinct = 0;
    int s8[32] = {0};
    for (int h = 0; h < 32; h++) { distinct += !s8[j]; s8[j] = 1; j = (j + 8) % 32; }
    CU_ASSERT_EQUAL(distinct, 4);
}

static void test_probe_lines_distinct(void) {
    for (uint32_t seed = 0; seed < LD_PROBE_ATTEMPTS; seed++) {
        static uint8_t used[LD_PROBE_REGION_LINES];
        memset(used, 0, sizeof used);
        int dup = 0;
        uint32_t lo = 0xffffffff, hi = 0;
        for (uint32_t l = 0; l < LD_PROBE_LINES; l++) {
            uint32_t x = ld_probe_line(l, seed, LD_PROBE_LINES);
            CU_ASSERT(x < LD_PROBE_REGION_LINES);
            if (x >= LD_PROBE_REGION_LINES) continue;
            dup += used[x]++;
            if (x < lo) lo = x;
            if (x > hi) hi = x;
        }
        CU_ASSERT_EQUAL(dup, 0);
        CU_ASSERT(hi - lo > LD_PROBE_REGION_LINES / 2);   /* spread over the region */
    }
}

static void test_even_map(void) {
    uint8_t m[9];
    ld_even_map(9, 2, m);
    const uint8_t want[9] = { 0, 0, 1, 1, 0, 0, 1, 1, 0 };
    CU_ASSERT_EQUAL(memcmp(m, want, 9), 0);
    CU_ASSERT_EQUAL(ld_first_split_tpc(m, 9), -1);
}

static void test_anchored_clean_70_70(void) {
    uint8_t truth[140], map[140], bal[140];
    make_truth(truth, 140, 35, 1);
    float *lat = make_anchored(truth, 140, 600, 900, 0.03, 2);
    ld_classify_t c;
    CU_ASSERT_EQUAL(ld_classify_anchored(lat, 2, 140, LD_PROBE_CHUNKS, map, &c), 0);
    CU_ASSERT_EQUAL(c.valid, 1);
    CU_ASSERT_EQUAL(memcmp(map, truth, 140), 0);
    CU_ASSERT(fabs(c.near_cycles - 600) < 20 && fabs(c.far_cycles - 900) < 30);
    CU_ASSERT(c.separation >= 1.25);
    CU_ASSERT_EQUAL(ld_balance_map(map, 140, 2, bal), 0);
    CU_ASSERT_EQUAL(memcmp(bal, map, 140), 0);
    free(lat);
}

static void test_anchored_uneven_74_66_balanced(void) {
    uint8_t truth[140], map[140], bal[140];
    make_truth(truth, 140, 37, 3);                     /* 74 / 66 SMs */
    float *lat = make_anchored(truth, 140, 600, 900, 0.03, 4);
    ld_classify_t c;
    CU_ASSERT_EQUAL(ld_classify_anchored(lat, 2, 140, LD_PROBE_CHUNKS, map, &c), 0);
    CU_ASSERT_EQUAL(count_of(map, 140, 0), 74);
    CU_ASSERT_EQUAL(ld_balance_map(map, 140, 2, bal), 2);   /* two TPCs of 2 SMs: 74-4 = 66+4 */
    CU_ASSERT_EQUAL(count_of(bal, 140, 0), 70);
    CU_ASSERT_EQUAL(ld_first_split_tpc(bal, 140), -1);      /* whole TPCs moved */
    uint32_t changed = 0;
    for (int s = 0; s < 140; s++) changed += bal[s] != map[s];
    CU_ASSERT_EQUAL(changed, 4);
    CU_ASSERT_EQUAL(memcmp(map, truth, 140), 0);            /* physical map untouched */
    free(lat);
}

static void test_anchored_reference_figures(void) {
    /* B300 study: 295 ns near, 488 ns far (ratio 1.65); at 1.9 GHz ~560 and ~927 cycles. */
    uint8_t truth[148], map[148];
    make_truth(truth, 148, 37, 5);
    float *lat = make_anchored(truth, 148, 295 * 1.9, 488 * 1.9, 0.05, 6);
    ld_classify_t c;
    CU_ASSERT_EQUAL(ld_classify_anchored(lat, 2, 148, LD_PROBE_CHUNKS, map, &c), 0);
    CU_ASSERT_EQUAL(memcmp(map, truth, 148), 0);
    CU_ASSERT(fabs(c.far_cycles / c.near_cycles - 488.0 / 295.0) < 0.05);
    free(lat);
}

/* Every SM near = 400, far = ratio * 400 except SM `odd_sm`, whose far is odd_ratio * 400. */
static int anchored_at_ratio(double ratio, int odd_sm, double odd_ratio, ld_classify_t *c) {
    uint8_t truth[132], map[132];
    make_truth(truth, 132, 33, 7);
    float *lat = malloc(2 * 132 * LD_PROBE_CHUNKS * sizeof *lat);
    for (uint32_t s = 0; s < 132; s++) {
        double r = (int)s == odd_sm ? odd_ratio : ratio;
        set_chunks_exact(lat, 132, truth[s], s, 400);
        set_chunks_exact(lat, 132, 1 - truth[s], s, 400 * r);
    }
    int rc = ld_classify_anchored(lat, 2, 132, LD_PROBE_CHUNKS, map, c);
    if (rc == 0 && memcmp(map, truth, 132)) rc = 99;
    free(lat);
    return rc;
}

static void test_anchored_ratio_threshold(void) {
    ld_classify_t c;
    CU_ASSERT_EQUAL(anchored_at_ratio(1.25, -1, 0, &c), 0);          /* exactly 1.25: accept */
    CU_ASSERT_EQUAL(anchored_at_ratio(1.26, -1, 0, &c), 0);
    CU_ASSERT_EQUAL(anchored_at_ratio(1.24, -1, 0, &c), 1);          /* just below: reject   */
    CU_ASSERT_EQUAL(c.valid, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.verdict, "132 of 132"));
    CU_ASSERT_EQUAL(anchored_at_ratio(1.6, 17, 1.2475, &c), 1);      /* one weak SM rejects  */
    CU_ASSERT_PTR_NOT_NULL(strstr(c.verdict, "1 of 132"));
    CU_ASSERT_PTR_NOT_NULL(strstr(c.verdict, "SM 17"));
    CU_ASSERT_EQUAL(anchored_at_ratio(1.6, 17, 1.2525, &c), 0);      /* just above: accept   */
    /* Noise around the threshold: medians of noisy chunks decide, not single chunks. */
    uint8_t truth[132], map[132];
    make_truth(truth, 132, 33, 8);
    float *lat = make_anchored(truth, 132, 400, 600, 0.08, 9);       /* ratio 1.5, +-8 % chunks */
    CU_ASSERT_EQUAL(ld_classify_anchored(lat, 2, 132, LD_PROBE_CHUNKS, map, &c), 0);
    free(lat);
    lat = make_anchored(truth, 132, 400, 460, 0.08, 10);              /* ratio 1.15: reject */
    CU_ASSERT_EQUAL(ld_classify_anchored(lat, 2, 132, LD_PROBE_CHUNKS, map, &c), 1);
    free(lat);
}

static void test_anchored_tpc_disagreement(void) {
    uint8_t truth[132], map[132];
    make_truth(truth, 132, 33, 11);
    truth[41] = 1 - truth[41];                                        /* TPC 20 split */
    float *lat = make_anchored(truth, 132, 600, 900, 0.02, 12);
    ld_classify_t c;
    CU_ASSERT_EQUAL(ld_classify_anchored(lat, 2, 132, LD_PROBE_CHUNKS, map, &c), 1);
    CU_ASSERT_EQUAL(c.bad_tpc, 20);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.verdict, "TPC 20"));
    free(lat);
}

static void test_anchored_odd_sm_count(void) {
    uint8_t truth[131], map[131], bal[131];
    make_truth(truth, 131, 34, 13);          /* 66 TPCs, the last one SM: 67 or 68 vs the rest */
    float *lat = make_anchored(truth, 131, 600, 900, 0.03, 14);
    ld_classify_t c;
    CU_ASSERT_EQUAL(ld_classify_anchored(lat, 2, 131, LD_PROBE_CHUNKS, map, &c), 0);
    CU_ASSERT_EQUAL(memcmp(map, truth, 131), 0);
    ld_balance_map(map, 131, 2, bal);
    uint32_t a = count_of(bal, 131, 0), b = count_of(bal, 131, 1);
    CU_ASSERT_EQUAL(a + b, 131);
    CU_ASSERT(a == b + 1 || b == a + 1);
    CU_ASSERT_EQUAL(ld_first_split_tpc(bal, 131), -1);
    free(lat);
}

static void test_balance_cases(void) {
    uint8_t m[LDSHIM_MAX_SMS], b[LDSHIM_MAX_SMS];
    /* 68/64 with 132 SMs: one full TPC. */
    make_truth(m, 132, 34, 15);
    CU_ASSERT_EQUAL(ld_balance_map(m, 132, 2, b), 1);
    CU_ASSERT_EQUAL(count_of(b, 132, 0), 66);
    /* 131 SMs, domain 0 = 66 full TPCs' worth minus... : diff 2 needs the one-SM TPC. */
    for (int s = 0; s < 131; s++) m[s] = (s / 2) % 2;      /* TPC 65 (SM 130, alone) -> 1 */
    m[130] = 1;                                            /* counts: 0 -> 66, 1 -> 65  (diff 1) */
    CU_ASSERT_EQUAL(ld_balance_map(m, 131, 2, b), 0);
    m[128] = m[129] = 1;                                   /* TPC 64 to 1: 64 vs 67 (diff 3) */
    CU_ASSERT_EQUAL(count_of(m, 131, 1), 67);
    CU_ASSERT_EQUAL(ld_balance_map(m, 131, 2, b), 1);
    CU_ASSERT_EQUAL(count_of(b, 131, 1), 65);
    /* diff 2 with a one-SM TPC in the larger group: move just it. */
    for (int s = 0; s < 131; s++) m[s] = (s / 2) % 2;
    m[130] = 0;                                            /* 0 -> 66 + ... */
    uint32_t z = count_of(m, 131, 0), o = count_of(m, 131, 1);
    CU_ASSERT_EQUAL(z - o, 3);
    CU_ASSERT_EQUAL(ld_balance_map(m, 131, 2, b), 1);
    CU_ASSERT_EQUAL(count_of(b, 131, 0), 65);
    /* 134 SMs as 68/66 with the lone... even count, diff 2, only full TPCs: no move helps. */
    for (int s = 0; s < 134; s++) m[s] = s < 68 ? 0 : 1;
    CU_ASSERT_EQUAL(ld_balance_map(m, 134, 2, b), 0);
    CU_ASSERT_EQUAL(memcmp(m, b, 134), 0);
    /* 80/52: 7 TPCs. */
    for (int s = 0; s < 132; s++) m[s] = s < 80 ? 0 : 1;
    CU_ASSERT_EQUAL(ld_balance_map(m, 132, 2, b), 7);
    CU_ASSERT_EQUAL(count_of(b, 132, 0), 66);
    /* one domain: nothing to do */
    memset(m, 0, 132);
    CU_ASSERT_EQUAL(ld_balance_map(m, 132, 1, b), 0);
}

static void test_one_domain(void) {
    uint8_t truth[132], map[132];
    ld_classify_t c;
    float lat1[132 * LD_PROBE_CHUNKS];
    for (int i = 0; i < 132 * LD_PROBE_CHUNKS; i++) lat1[i] = 700;
    CU_ASSERT_EQUAL(ld_classify_anchored(lat1, 1, 132, LD_PROBE_CHUNKS, map, &c), 0);
    CU_ASSERT_EQUAL(count_of(map, 132, 0), 132);
    CU_ASSERT_EQUAL(c.valid, 1);
    /* Two domains measured but every SM nearest to domain 0: no second domain -> reject. */
    memset(truth, 0, sizeof truth);
    float *lat = make_anchored(truth, 132, 600, 900, 0.02, 16);
    CU_ASSERT_EQUAL(ld_classify_anchored(lat, 2, 132, LD_PROBE_CHUNKS, map, &c), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.verdict, "domain 1"));
    free(lat);
}

static void test_anchored_bad_input(void) {
    uint8_t truth[132], map[132];
    make_truth(truth, 132, 33, 17);
    float *lat = make_anchored(truth, 132, 600, 900, 0.02, 18);
    ld_classify_t c;
    lat[77] = NAN;
    CU_ASSERT_EQUAL(ld_classify_anchored(lat, 2, 132, LD_PROBE_CHUNKS, map, &c), -1);
    lat[77] = 0;
    CU_ASSERT_EQUAL(ld_classify_anchored(lat, 2, 132, LD_PROBE_CHUNKS, map, &c), -1);
    CU_ASSERT_EQUAL(ld_classify_anchored(lat, 2, 0, LD_PROBE_CHUNKS, map, &c), -1);
    CU_ASSERT_EQUAL(ld_classify_anchored(lat, 9, 132, LD_PROBE_CHUNKS, map, &c), -1);
    free(lat);
}

static void test_anchored_ordinary_memory(void) {
    /* FACTS: interleaved HBM, 600-850 cycles/hop, per-SM medians ~710 in both "domains". */
    uint8_t map[132];
    float *lat = malloc(2 * 132 * LD_PROBE_CHUNKS * sizeof *lat);
    rng_seed(19);
    for (int i = 0; i < 2 * 132 * LD_PROBE_CHUNKS; i++) lat[i] = (float)(600 + 250 * rng_unit());
    ld_classify_t c;
    CU_ASSERT_EQUAL(ld_classify_anchored(lat, 2, 132, LD_PROBE_CHUNKS, map, &c), 1);
    CU_ASSERT(c.separation < 1.25);
    free(lat);
}

static void test_clustered_h200_shape(void) {
    uint8_t truth[132], map[132];
    make_truth(truth, 132, 33, 20);
    for (int trial = 0; trial < 4; trial++) {
        double sd = trial < 2 ? 5.0 : 15.0;
        float *lat = make_clustered(truth, 132, LD_PROBE_LINES, 2, 30, sd, 21 + trial);
        ld_classify_t c;
        int rc = ld_classify_clustered(lat, 132, LD_PROBE_LINES, 2, NULL, map, &c);
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT_EQUAL(memcmp(map, truth, 132), 0);
        CU_ASSERT_EQUAL(count_of(map, 132, 0), 66);
        CU_ASSERT_EQUAL(map[0], 0);
        CU_ASSERT(c.separation >= LD_PROBE_MIN_SEPARATION);
        CU_ASSERT(c.far_cycles - c.near_cycles > 20 && c.far_cycles - c.near_cycles < 40);
        if (rc) fprintf(stderr, "clustered sd %.0f: %s\n", sd, c.verdict);
        free(lat);
    }
}

static void test_clustered_uneven_and_labels(void) {
    uint8_t truth[140], map[140], labels[140];
    make_truth(truth, 140, 37, 30);                       /* 74/66 */
    float *lat = make_clustered(truth, 140, LD_PROBE_LINES, 2, 30, 8, 31);
    ld_classify_t c;
    CU_ASSERT_EQUAL(ld_classify_clustered(lat, 140, LD_PROBE_LINES, 2, NULL, map, &c), 0);
    CU_ASSERT_EQUAL(memcmp(map, truth, 140), 0);
    /* Anchored labels (even noisy ones) decide which group is domain 0. */
    for (int s = 0; s < 140; s++) labels[s] = (uint8_t)(1 - truth[s]);
    labels[3] = truth[3];                                 /* a minority vote */
    CU_ASSERT_EQUAL(ld_classify_clustered(lat, 140, LD_PROBE_LINES, 2, labels, map, &c), 0);
    for (int s = 0; s < 140; s++) CU_ASSERT_EQUAL(map[s], 1 - truth[s]);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.verdict, "from anchored"));
    free(lat);
}

static void test_clustered_spikes(void) {
    /* 1 % of the samples stalled by thousands of cycles (interrupts, page walks). */
    uint8_t truth[132], map[132];
    make_truth(truth, 132, 33, 80);
    float *lat = make_clustered(truth, 132, LD_PROBE_LINES, 2, 30, 8, 81);
    rng_seed(82);
    for (int i = 0; i < 132 * LD_PROBE_LINES; i++)
        if (rng_unit() < 0.01) lat[i] += (float)(3000 + 20000 * rng_unit());
    ld_classify_t c;
    CU_ASSERT_EQUAL(ld_classify_clustered(lat, 132, LD_PROBE_LINES, 2, NULL, map, &c), 0);
    for (int s = 0; s < 132; s++) CU_ASSERT_EQUAL(map[s], truth[s] ^ truth[0]);   /* SM 0's group is 0 */
    free(lat);
}

static void test_clustered_no_structure(void) {
    uint8_t truth[132], map[132];
    make_truth(truth, 132, 33, 40);
    for (int trial = 0; trial < 3; trial++) {
        float *lat = make_clustered(truth, 132, LD_PROBE_LINES, 2, 0.0, 15, 41 + trial);
        ld_classify_t c;
        CU_ASSERT_EQUAL(ld_classify_clustered(lat, 132, LD_PROBE_LINES, 2, NULL, map, &c), 1);
        CU_ASSERT(c.separation < 0.1);
        CU_ASSERT_EQUAL(c.valid, 0);
        free(lat);
    }
}

static void test_clustered_tpc_split(void) {
    uint8_t truth[132], map[132];
    make_truth(truth, 132, 33, 50);
    truth[61] = 1 - truth[61];                           /* measured structure splits TPC 30 */
    float *lat = make_clustered(truth, 132, LD_PROBE_LINES, 2, 30, 5, 51);
    ld_classify_t c;
    CU_ASSERT_EQUAL(ld_classify_clustered(lat, 132, LD_PROBE_LINES, 2, NULL, map, &c), 1);
    CU_ASSERT_EQUAL(c.bad_tpc, 30);
    free(lat);
}

static void test_clustered_three_domains(void) {
    uint8_t truth[132], map[132];
    for (int s = 0; s < 132; s++) truth[s] = (uint8_t)((s / 2) % 3);   /* already SM0 -> 0 */
    /* Relabel by first appearance to match "lowest SM id" numbering: 0,1,2 in order. */
    float *lat = make_clustered(truth, 132, LD_PROBE_LINES, 3, 30, 6, 60);
    ld_classify_t c;
    CU_ASSERT_EQUAL(ld_classify_clustered(lat, 132, LD_PROBE_LINES, 3, NULL, map, &c), 0);
    CU_ASSERT_EQUAL(memcmp(map, truth, 132), 0);
    free(lat);
}

static void test_topology_fill(void) {
    uint8_t m[132];
    ld_even_map(132, 2, m);
    ldshim_topology_t t;
    ld_topology_fill(&t, m, 132, 2, 1, 1, LDSHIM_SOURCE_CLUSTERED);
    CU_ASSERT_EQUAL(t.magic, LDSHIM_TOPOLOGY_MAGIC);
    CU_ASSERT_EQUAL(t.version, LDSHIM_TOPOLOGY_VERSION);
    CU_ASSERT_EQUAL(t.num_sms, 132);
    CU_ASSERT_EQUAL(t.sms_per_domain[0], 66);
    CU_ASSERT_EQUAL(t.sms_per_domain[1], 66);
    CU_ASSERT_EQUAL(t.flags, LDSHIM_TOPO_VALID | LDSHIM_TOPO_BALANCED | (3u << LDSHIM_TOPO_SOURCE_SHIFT));
    CU_ASSERT_EQUAL(memcmp(t.sm_domain, m, 132), 0);
}

/* ---- part 2: cache ----------------------------------------------------------------- */

static char tmpdir[256];

static void make_tmpdir(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ldshim-test-probe-XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); tmpdir[0] = 0; }
}

static void rm_rf(const char *dir) {
    char cmd[512];
    if (!dir[0] || strncmp(dir, "/tmp/ldshim-test-probe-", 23)) return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static void sample_key(ld_cache_key_t *k) {
    memset(k, 0, sizeof *k);
    snprintf(k->uuid, sizeof k->uuid, "GPU-12345678-9abc-def0-1234-56789abcdef0");
    k->driver_version = 13000;
    snprintf(k->kmod, sizeof k->kmod, "580.159.04");
    k->num_sms = 132;
    k->num_domains = 2;
}

static void sample_result(ld_probe_result_t *r) {
    memset(r, 0, sizeof *r);
    r->mode_used = LD_PROBE_CLUSTERED;
    r->attempts = 2;
    r->valid = 1;
    snprintf(r->verdict, sizeof r->verdict, "clustered: accepted, \"quoted\"\nnewline");
    r->num_sms = 132;
    r->num_domains = 2;
    r->near_cycles = 290.5;
    r->far_cycles = 321.25;
    r->separation = 1.125;
    make_truth(r->physical, 132, 34, 70);
    r->tpcs_moved = ld_balance_map(r->physical, 132, 2, r->balanced);
}

static int read_file(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t len = fread(buf, 1, n - 1, f);
    buf[len] = 0;
    fclose(f);
    return (int)len;
}

static int write_file(const char *path, const char *buf, size_t len) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    size_t w = fwrite(buf, 1, len, f);
    fclose(f);
    return w == len ? 0 : -1;
}

static void test_cache_roundtrip(void) {
    char dir[400], path[600], why[256];
    snprintf(dir, sizeof dir, "%s/a/b", tmpdir);          /* created, mode 0700 */
    ld_cache_key_t k;
    ld_probe_result_t w, r;
    sample_key(&k);
    sample_result(&w);
    CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_MISS);
    CU_ASSERT_EQUAL_FATAL(ld_cache_store(dir, &k, &w, why, sizeof why), 0);
    struct stat st;
    CU_ASSERT_EQUAL(stat(dir, &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0700);
    ld_cache_path(dir, &k, path, sizeof path);
    CU_ASSERT_EQUAL(stat(path, &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0600);
    memset(&r, 0, sizeof r);
    CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_HIT);
    CU_ASSERT_EQUAL(r.mode_used, LD_PROBE_CLUSTERED);
    CU_ASSERT_EQUAL(r.valid, 1);
    CU_ASSERT_EQUAL(r.attempts, 2);
    CU_ASSERT_EQUAL(r.num_sms, 132);
    CU_ASSERT_DOUBLE_EQUAL(r.near_cycles, 290.5, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(r.far_cycles, 321.25, 1e-6);
    CU_ASSERT_EQUAL(memcmp(r.physical, w.physical, 132), 0);
    CU_ASSERT_EQUAL(memcmp(r.balanced, w.balanced, 132), 0);
    CU_ASSERT_EQUAL(r.tpcs_moved, w.tpcs_moved);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.verdict, "accepted"));
    /* No temporary files left behind. */
    char cmd[700], out[64];
    snprintf(cmd, sizeof cmd, "ls '%s' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_PTR_NOT_NULL(fgets(out, sizeof out, p));
    pclose(p);
    CU_ASSERT_EQUAL(atoi(out), 1);
    /* Rewriting replaces it. */
    w.attempts = 4;
    CU_ASSERT_EQUAL(ld_cache_store(dir, &k, &w, why, sizeof why), 0);
    CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_HIT);
    CU_ASSERT_EQUAL(r.attempts, 4);
}

static void test_cache_corruption(void) {
    char dir[400], path[600], why[256], buf[8192];
    snprintf(dir, sizeof dir, "%s/corrupt", tmpdir);
    ld_cache_key_t k;
    ld_probe_result_t w, r;
    sample_key(&k);
    sample_result(&w);
    CU_ASSERT_EQUAL_FATAL(ld_cache_store(dir, &k, &w, why, sizeof why), 0);
    ld_cache_path(dir, &k, path, sizeof path);
    int len = read_file(path, buf, sizeof buf);
    CU_ASSERT_FATAL(len > 100);
    char *phys = strstr(buf, "physical ");
    CU_ASSERT_PTR_NOT_NULL_FATAL(phys);
    /* One flipped map digit: checksum mismatch. */
    char *d = phys + 9 + 5;
    *d = *d == '0' ? '1' : '0';
    write_file(path, buf, (size_t)len);
    CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_BAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "checksum"));
    *d = *d == '0' ? '1' : '0';
    /* Truncated at several places. */
    int cuts[] = { 0, 10, len / 2, len - 20, len - 1 };
    for (unsigned i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        write_file(path, buf, (size_t)cuts[i]);
        CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_BAD);
    }
    /* Garbage and binary. */
    write_file(path, "hello\n", 6);
    CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_BAD);
    char bin[300];
    memset(bin, 0, sizeof bin);
    write_file(path, bin, sizeof bin);
    CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_BAD);
    /* Huge file. */
    static char big[20000];
    memset(big, 'x', sizeof big);
    write_file(path, big, sizeof big);
    CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_BAD);
    /* Intact again. */
    write_file(path, buf, (size_t)len);
    CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_HIT);
}

/* Copy the file written for key `a` to the path of key `b` and load as `b`. */
static int load_foreign(const char *dir, ld_cache_key_t *a, ld_cache_key_t *b, char *why, size_t n) {
    char pa[600], pb[600], buf[8192];
    ld_probe_result_t w, r;
    sample_result(&w);
    if (ld_cache_store(dir, a, &w, why, n)) return 99;
    ld_cache_path(dir, a, pa, sizeof pa);
    ld_cache_path(dir, b, pb, sizeof pb);
    int len = read_file(pa, buf, sizeof buf);
    if (len <= 0 || write_file(pb, buf, (size_t)len)) return 98;
    return ld_cache_load(dir, b, &r, why, n);
}

static void test_cache_foreign(void) {
    char dir[400], why[256];
    snprintf(dir, sizeof dir, "%s/foreign", tmpdir);
    ld_cache_key_t a, b;
    sample_key(&a);
    b = a;
    b.uuid[5] = 'f';                                       /* another GPU */
    CU_ASSERT_EQUAL(load_foreign(dir, &a, &b, why, sizeof why), LD_CACHE_BAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "foreign"));
    b = a;
    b.driver_version = 13040;                              /* another driver: other file name */
    CU_ASSERT_EQUAL(load_foreign(dir, &a, &b, why, sizeof why), LD_CACHE_BAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "driver"));
    b = a;
    snprintf(b.kmod, sizeof b.kmod, "590.1");              /* same CUDA version, new kernel module */
    CU_ASSERT_EQUAL(load_foreign(dir, &a, &b, why, sizeof why), LD_CACHE_BAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "kernel module"));
    b = a;
    b.num_sms = 114;                                       /* sound file, other shape: stale */
    CU_ASSERT_EQUAL(load_foreign(dir, &a, &b, why, sizeof why), LD_CACHE_STALE);
    /* Another format version, checksum recomputed so only the version differs. */
    char path[600], buf[8192];
    ld_probe_result_t w, r;
    sample_result(&w);
    ld_cache_store(dir, &a, &w, why, sizeof why);
    ld_cache_path(dir, &a, path, sizeof path);
    int len = read_file(path, buf, sizeof buf);
    CU_ASSERT_FATAL(len > 0 && buf[22] == '1');
    buf[22] = '7';
    char *ck = strstr(buf, "checksum ");
    CU_ASSERT_PTR_NOT_NULL_FATAL(ck);
    uint64_t h = 0xcbf29ce484222325ull;
    for (char *q = buf; q < ck; q++) { h ^= (unsigned char)*q; h *= 0x100000001b3ull; }
    snprintf(ck, 40, "checksum %016llx\n", (unsigned long long)h);
    write_file(path, buf, strlen(buf));
    CU_ASSERT_EQUAL(ld_cache_load(dir, &a, &r, why, sizeof why), LD_CACHE_BAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "format 7"));
}

/* Replace the first line starting with `key ` by `key value` and recompute the checksum,
 * as someone forging an entry would. */
static void forge(const char *path, const char *key, const char *value) {
    char buf[8192], out[8192];
    int len = read_file(path, buf, sizeof buf);
    CU_ASSERT_FATAL(len > 0);
    char want[64];
    snprintf(want, sizeof want, "\n%s ", key);
    char *at = strstr(buf, want);
    CU_ASSERT_PTR_NOT_NULL_FATAL(at);
    at++;
    char *eol = strchr(at, '\n');
    char *ck = strstr(buf, "checksum ");
    CU_ASSERT_FATAL(eol && ck && eol < ck);
    int k = snprintf(out, sizeof out, "%.*s%s %s%.*s", (int)(at - buf), buf, key, value, (int)(ck - eol), eol);
    uint64_t h = ld_cache_checksum(out, (size_t)k);
    k += snprintf(out + k, sizeof out - (size_t)k, "checksum %016llx\n", (unsigned long long)h);
    CU_ASSERT_EQUAL(write_file(path, out, (size_t)k), 0);
}

/* The checksum says a file is whole, not that its maps are sound: forged maps are refused. */
static void test_cache_forged_maps(void) {
    char dir[400], path[600], why[256], map[LDSHIM_MAX_SMS + 1];
    snprintf(dir, sizeof dir, "%s/forged", tmpdir);
    ld_cache_key_t k;
    ld_probe_result_t w, r;
    sample_key(&k);
    sample_result(&w);
    ld_cache_path(dir, &k, path, sizeof path);
    /* All zero: every SM in domain 0, and the balanced map to match. */
    CU_ASSERT_EQUAL_FATAL(ld_cache_store(dir, &k, &w, why, sizeof why), 0);
    memset(map, '0', 132);
    map[132] = 0;
    forge(path, "physical", map);
    forge(path, "balanced", map);
    forge(path, "tpcs_moved", "0");
    CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_BAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "no SM in domain 1"));
    /* A balanced map that does not follow from the physical one. */
    CU_ASSERT_EQUAL_FATAL(ld_cache_store(dir, &k, &w, why, sizeof why), 0);
    for (int i = 0; i < 132; i++) map[i] = (char)('0' + w.balanced[i]);
    map[132] = 0;
    int t0 = -1, t1 = -1;                      /* swap a TPC of each domain: same counts */
    for (int t = 0; t < 66; t++) {
        if (map[2 * t] == '0' && t0 < 0) t0 = t;
        if (map[2 * t] == '1' && t1 < 0) t1 = t;
    }
    CU_ASSERT_FATAL(t0 >= 0 && t1 >= 0);
    map[2 * t0] = map[2 * t0 + 1] = '1';
    map[2 * t1] = map[2 * t1 + 1] = '0';
    forge(path, "balanced", map);
    CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_BAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "balanced map does not follow"));
    /* A TPC split between domains. */
    CU_ASSERT_EQUAL_FATAL(ld_cache_store(dir, &k, &w, why, sizeof why), 0);
    for (int i = 0; i < 132; i++) map[i] = (char)('0' + w.physical[i]);
    map[6] = map[7] == '0' ? '1' : '0';
    forge(path, "physical", map);
    CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_BAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "splits TPC 3"));
    /* A verdict with terminal escape codes loads with them neutralized. */
    CU_ASSERT_EQUAL_FATAL(ld_cache_store(dir, &k, &w, why, sizeof why), 0);
    forge(path, "verdict", "ok\x1b]0;pwned\x07\x1b[2J");
    memset(&r, 0, sizeof r);
    CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_HIT);
    CU_ASSERT_STRING_EQUAL(r.verdict, "ok?]0;pwned??[2J");
    /* The intact entry still loads. */
    CU_ASSERT_EQUAL_FATAL(ld_cache_store(dir, &k, &w, why, sizeof why), 0);
    CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_HIT);
    CU_ASSERT_EQUAL(memcmp(r.balanced, w.balanced, 132), 0);
}

/* Planted files, foreign owners and open modes: refused quickly, never waited on. */
static void test_cache_untrusted(void) {
    char dir[400], path[600], why[256], buf[64];
    ld_cache_key_t k;
    ld_probe_result_t w, r;
    sample_key(&k);
    sample_result(&w);
    snprintf(dir, sizeof dir, "%s/untrusted", tmpdir);
    ld_cache_path(dir, &k, path, sizeof path);
    CU_ASSERT_EQUAL_FATAL(ld_cache_store(dir, &k, &w, why, sizeof why), 0);
    alarm(20);   /* a blocking open would hang here: fail instead */
    CU_ASSERT_EQUAL(unlink(path), 0);
    CU_ASSERT_EQUAL_FATAL(mkfifo(path, 0600), 0);
    CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_BAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "not a regular file"));
    size_t len;
    CU_ASSERT_EQUAL(ld_cache_read_file(path, buf, sizeof buf - 1, &len, why, sizeof why), LD_CACHE_BAD);
    alarm(0);
    CU_ASSERT_EQUAL(unlink(path), 0);
    /* A symbolic link, even to a good entry, is not followed. */
    char real[620];
    snprintf(real, sizeof real, "%s.real", path);
    CU_ASSERT_EQUAL_FATAL(ld_cache_store(dir, &k, &w, why, sizeof why), 0);
    CU_ASSERT_EQUAL(rename(path, real), 0);
    CU_ASSERT_EQUAL(symlink(real, path), 0);
    CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_BAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "symbolic link"));
    CU_ASSERT_EQUAL(unlink(path), 0);
    CU_ASSERT_EQUAL(unlink(real), 0);
    /* A file others may write. */
    CU_ASSERT_EQUAL_FATAL(ld_cache_store(dir, &k, &w, why, sizeof why), 0);
    CU_ASSERT_EQUAL(chmod(path, 0666), 0);
    CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_BAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "writable by others"));
    CU_ASSERT_EQUAL(chmod(path, 0600), 0);
    CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_HIT);
    /* A directory others may write: neither read nor written. */
    for (int m = 0; m < 2; m++) {
        CU_ASSERT_EQUAL(chmod(dir, m ? 0777 : 0770), 0);
        CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_BAD);
        CU_ASSERT_PTR_NOT_NULL(strstr(why, m ? "writable by everyone" : "writable by its group"));
        CU_ASSERT_EQUAL(ld_cache_store(dir, &k, &w, why, sizeof why), -1);
        CU_ASSERT_PTR_NOT_NULL(strstr(why, "not trusted"));
    }
    CU_ASSERT_EQUAL(chmod(dir, 0700), 0);
    CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_HIT);
    /* Owned by someone else: only root can arrange that here. */
    if (geteuid() == 0) {
        CU_ASSERT_EQUAL(chown(path, 65534, 65534), 0);
        CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_BAD);
        CU_ASSERT_PTR_NOT_NULL(strstr(why, "owned by another user"));
        CU_ASSERT_EQUAL(chown(path, 0, 0), 0);
        CU_ASSERT_EQUAL(chown(dir, 65534, 65534), 0);
        CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r, why, sizeof why), LD_CACHE_BAD);
        CU_ASSERT_PTR_NOT_NULL(strstr(why, "owned by uid 65534"));
        CU_ASSERT_EQUAL(ld_cache_store(dir, &k, &w, why, sizeof why), -1);
        CU_ASSERT_EQUAL(chown(dir, 0, 0), 0);
    } else {
        fprintf(stderr, "\n  (skipped: files owned by another user need root to create)\n");
    }
    /* A write never leaves a temporary behind, and never writes outside its directory. */
    CU_ASSERT_EQUAL(ld_cache_write_file(dir, "/tmp/elsewhere.txt", "x", 1, why, sizeof why), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "not a file directly inside"));
    char cmd[700], out[64];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_PTR_NOT_NULL(fgets(out, sizeof out, p));
    pclose(p);
    CU_ASSERT_EQUAL(atoi(out), 1);
}

static void test_cache_dir_resolution(void) {
    char out[512];
    char *saved[3];
    const char *names[3] = { "LDSHIM_CACHE_DIR", "XDG_CACHE_HOME", "HOME" };
    for (int i = 0; i < 3; i++) { const char *v = getenv(names[i]); saved[i] = v ? strdup(v) : NULL; }
    setenv("LDSHIM_CACHE_DIR", "/x/ld", 1);
    setenv("XDG_CACHE_HOME", "/x/xdg", 1);
    setenv("HOME", "/x/home", 1);
    ld_options_reread();   /* the shim's variables are copied once; the test changes them */
    CU_ASSERT_EQUAL(ld_cache_dir("/opt/dir", out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "/opt/dir");
    CU_ASSERT_EQUAL(ld_cache_dir(NULL, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "/x/ld");
    unsetenv("LDSHIM_CACHE_DIR");
    ld_options_reread();
    CU_ASSERT_EQUAL(ld_cache_dir("", out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "/x/xdg/ldshim");
    /* XDG_CACHE_HOME and HOME are the start-time copies: a later setenv or unsetenv (the
     * program's, from any thread) changes nothing until the copy is made again. */
    setenv("XDG_CACHE_HOME", "/y/xdg", 1);
    unsetenv("HOME");
    CU_ASSERT_EQUAL(ld_cache_dir(NULL, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "/x/xdg/ldshim");
    setenv("HOME", "/x/home", 1);
    unsetenv("XDG_CACHE_HOME");
    ld_options_reread();
    CU_ASSERT_EQUAL(ld_cache_dir(NULL, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "/x/home/.cache/ldshim");
    /* A relative XDG_CACHE_HOME is ignored (the XDG spec): $HOME/.cache, not a directory
     * under whatever the cwd is at the first context. */
    static const char *const rel[] = { "rel/xdg", "./xdg", "../xdg", "xdg" };
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
        setenv("XDG_CACHE_HOME", rel[i], 1);
        ld_options_reread();
        CU_ASSERT_PTR_NULL(ld_env(LD_ENV_XDG_CACHE_HOME));
        CU_ASSERT_EQUAL(ld_cache_dir(NULL, out, sizeof out), 0);
        CU_ASSERT_STRING_EQUAL(out, "/x/home/.cache/ldshim");
    }
    /* An absolute one over the path bound is refused whole, like an LDSHIM_ path. */
    char *longp = malloc(LD_OPT_PATH_MAX + 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(longp);
    memset(longp, 'a', LD_OPT_PATH_MAX + 1);
    longp[0] = '/';
    longp[LD_OPT_PATH_MAX + 1] = 0;
    setenv("XDG_CACHE_HOME", longp, 1);
    ld_options_reread();
    CU_ASSERT_PTR_NULL(ld_env(LD_ENV_XDG_CACHE_HOME));
    CU_ASSERT_EQUAL(ld_cache_dir(NULL, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "/x/home/.cache/ldshim");
    longp[LD_OPT_PATH_MAX] = 0;   /* exactly the bound: taken */
    setenv("XDG_CACHE_HOME", longp, 1);
    ld_options_reread();
    CU_ASSERT_PTR_NOT_NULL(ld_env(LD_ENV_XDG_CACHE_HOME));
    free(longp);
    /* A relative HOME names no home: no cache directory (the caller's "no cache"). */
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "home", 1);
    ld_options_reread();
    CU_ASSERT_PTR_NULL(ld_env(LD_ENV_HOME));
    CU_ASSERT_EQUAL(ld_cache_dir(NULL, out, sizeof out), -1);
    setenv("XDG_CACHE_HOME", "rel", 1);
    ld_options_reread();
    CU_ASSERT_EQUAL(ld_cache_dir(NULL, out, sizeof out), -1);
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    ld_options_reread();
    CU_ASSERT_EQUAL(ld_cache_dir(NULL, out, sizeof out), -1);
    CU_ASSERT_EQUAL(ld_cache_dir("/a/long/path", out, 5), -1);
    for (int i = 0; i < 3; i++) {
        if (saved[i]) setenv(names[i], saved[i], 1); else unsetenv(names[i]);
        free(saved[i]);
    }
    ld_options_reread();
}

/* ---- part 3: ld_probe_device against a stub driver ------------------------------- */

/* The stub "runs" each probe kernel on the CPU: it decodes the launch arguments exactly as
 * probe.cu declares them and writes latencies shaped like the H200's. Handles are small
 * integers; device pointers are host pointers. */
enum { K_INIT_CHUNKS, K_INIT_LINES, K_CLEAR, K_FLUSH, K_ANCHORED, K_CLUSTERED, K_N };
static const char *const knames[K_N] = { "ldprobe_init_chunks", "ldprobe_init_lines", "ldprobe_clear",
                                         "ldprobe_flush", "ldprobe_anchored", "ldprobe_clustered" };
static struct {
    int nsms;
    CUresult load_rc;          /* what cuModuleLoadData returns                        */
    int separates;             /* anchored: localized memory shows near/far            */
    int structured;            /* clustered: lines have a home group                   */
    int miss_launches;         /* the next N chase launches put two CTAs on one SM      */
    uint8_t truth[LDSHIM_MAX_SMS];
    int live_allocs, live_streams, live_modules, loads, chase_launches, bad_launch;
    int retains, releases, loc_allocs, loc_frees;
    CUcontext current;
    CUstreamCaptureMode capture;
    CUdeviceptr loc[LDSHIM_MAX_DOMAINS];
    int loc_home[LDSHIM_MAX_DOMAINS];
} fk;

static CUresult f_attr(int *v, CUdevice_attribute a, CUdevice d) {
    (void)d;
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = fk.nsms; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 232448; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = 233472; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: *v = 1024; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}
static CUresult f_errname(CUresult r, const char **s) {
    *s = r == CUDA_ERROR_NO_BINARY_FOR_GPU ? "CUDA_ERROR_NO_BINARY_FOR_GPU"
       : r == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_UNKNOWN";
    return CUDA_SUCCESS;
}
static CUresult f_load(CUmodule *m, const void *img) {
    fk.loads++;
    uint32_t magic;
    if (!img) return CUDA_ERROR_INVALID_IMAGE;
    memcpy(&magic, img, sizeof magic);
    if (magic != 0xBA55ED50u) return CUDA_ERROR_INVALID_IMAGE;   /* the embedded fatbin */
    if (fk.load_rc != CUDA_SUCCESS) return fk.load_rc;
    *m = (CUmodule)(uintptr_t)0x1000;
    fk.live_modules++;
    return CUDA_SUCCESS;
}
static CUresult f_unload(CUmodule m) { (void)m; fk.live_modules--; return CUDA_SUCCESS; }
static CUresult f_getfn(CUfunction *f, CUmodule m, const char *name) {
    (void)m;
    for (int k = 0; k < K_N; k++)
        if (!strcmp(name, knames[k])) { *f = (CUfunction)(uintptr_t)(k + 1); return CUDA_SUCCESS; }
    return CUDA_ERROR_NOT_FOUND;
}
static CUresult f_setattr(CUfunction f, CUfunction_attribute a, int v) { (void)f; (void)a; (void)v; return CUDA_SUCCESS; }
static CUresult f_alloc(CUdeviceptr *p, size_t n) {
    void *m = malloc(n);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    *p = (CUdeviceptr)(uintptr_t)m;
    fk.live_allocs++;
    return CUDA_SUCCESS;
}
static CUresult f_free(CUdeviceptr p) { free((void *)(uintptr_t)p); fk.live_allocs--; return CUDA_SUCCESS; }
static CUresult f_dtoh(void *dst, CUdeviceptr src, size_t n) { memcpy(dst, (void *)(uintptr_t)src, n); return CUDA_SUCCESS; }
static CUresult f_stream_create(CUstream *s, unsigned flags) {
    if (flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
    *s = (CUstream)(uintptr_t)0x2000;
    fk.live_streams++;
    return CUDA_SUCCESS;
}
static CUresult f_stream_destroy(CUstream s) { (void)s; fk.live_streams--; return CUDA_SUCCESS; }
static CUresult f_sync_stream(CUstream s) { (void)s; return CUDA_SUCCESS; }
static CUresult f_sync(void) { return CUDA_SUCCESS; }
static CUresult f_uuid(CUuuid *u, CUdevice d) { (void)d; for (int i = 0; i < 16; i++) u->bytes[i] = (char)(0x10 + i); return CUDA_SUCCESS; }
static CUresult f_drv_version(int *v) { *v = 13000; return CUDA_SUCCESS; }
static CUresult f_ctx_get(CUcontext *c) { *c = fk.current; return CUDA_SUCCESS; }
static CUresult f_ctx_set(CUcontext c) { fk.current = c; return CUDA_SUCCESS; }
static CUresult f_ctx_dev(CUdevice *d) { if (!fk.current) return CUDA_ERROR_INVALID_CONTEXT; *d = 0; return CUDA_SUCCESS; }
static CUresult f_retain(CUcontext *c, CUdevice d) { (void)d; fk.retains++; *c = (CUcontext)(uintptr_t)0x3000; return CUDA_SUCCESS; }
static CUresult f_release(CUdevice d) { (void)d; fk.releases++; return CUDA_SUCCESS; }
static CUcontext pushed_from;
static CUresult f_push(CUcontext c) { pushed_from = fk.current; fk.current = c; return CUDA_SUCCESS; }
static CUresult f_pop(CUcontext *c) { *c = fk.current; fk.current = pushed_from; return CUDA_SUCCESS; }
static CUresult f_capture(CUstreamCaptureMode *m) { CUstreamCaptureMode old = fk.capture; fk.capture = *m; *m = old; return CUDA_SUCCESS; }

#define ARG(T, i) (*(T *)args[i])
static double noise(void) { return 4.0 * rng_gauss(); }

static CUresult f_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                         unsigned smem, CUstream st, void **args, void **extra) {
    (void)gy; (void)gz; (void)by; (void)bz; (void)extra;
    int k = (int)(uintptr_t)f - 1;
    if (k < 0 || k >= K_N || !st || !args) return CUDA_ERROR_INVALID_HANDLE;
    if (k == K_CLEAR) {
        uint32_t *p = (uint32_t *)(uintptr_t)ARG(CUdeviceptr, 0);
        memset(p, 0, ARG(uint32_t, 1) * sizeof *p);
    } else if (k == K_INIT_CHUNKS) {
        uint32_t *b = (uint32_t *)(uintptr_t)ARG(CUdeviceptr, 0);
        uint64_t lines = ARG(uint64_t, 1);
        for (uint64_t i = 0; i < lines; i++) b[i * 32] = ld_ring_next((uint32_t)(i % 32), 32) * 128;
    } else if (k == K_INIT_LINES) {
        uint32_t *region = (uint32_t *)(uintptr_t)ARG(CUdeviceptr, 0);
        uint32_t *idx = (uint32_t *)(uintptr_t)ARG(CUdeviceptr, 1);
        uint32_t nl = ARG(uint32_t, 2), seed = ARG(uint32_t, 3);
        for (uint32_t l = 0; l < nl; l++) {
            idx[l] = ld_probe_line(l, seed, nl);
            for (uint32_t w = 0; w < 32; w++) region[(size_t)idx[l] * 32 + w] = ld_ring_next(w, 32) * 4;
        }
    } else if (k == K_FLUSH) {
        char *b = (char *)(uintptr_t)ARG(CUdeviceptr, 0);
        uint64_t n16 = ARG(uint64_t, 1);
        memset(b, 1, 16);
        memset(b + (n16 - 1) * 16, 1, 16);
    } else {
        if ((int)gx != fk.nsms || bx != 32 || smem < 48 * 1024) { fk.bad_launch++; return CUDA_ERROR_INVALID_VALUE; }
        fk.chase_launches++;
        int collide = fk.miss_launches > 0;
        if (collide) fk.miss_launches--;
        int a0 = k == K_ANCHORED ? 3 : 3;   /* nsms is argument 3 in both kernels */
        uint32_t nsms = ARG(uint32_t, a0);
        float *out = (float *)(uintptr_t)ARG(CUdeviceptr, 4);
        uint32_t *seen = (uint32_t *)(uintptr_t)ARG(CUdeviceptr, 5);
        for (uint32_t cta = 0; cta < gx; cta++) {
            uint32_t sm = collide && cta == 5 ? 4 : cta;     /* CTA 5 waits and reruns on SM 4 */
            seen[sm < nsms ? sm : nsms]++;
            if (k == K_ANCHORED) {
                CUdeviceptr *bufs = (CUdeviceptr *)args[0];
                uint32_t nd = ARG(uint32_t, 1), chunks = ARG(uint32_t, 2);
                for (uint32_t d = 0; d < nd; d++) {
                    int home = -1;
                    for (uint32_t j = 0; j < nd; j++) if (fk.loc[j] == bufs[d]) home = fk.loc_home[j];
                    for (uint32_t c = 0; c < chunks; c++) {
                        double base = !fk.separates ? 710 : (int)fk.truth[sm] == home ? 600 : 900;
                        out[((size_t)d * nsms + sm) * chunks + c] = (float)(base + 10 * noise());
                    }
                }
            } else {
                uint32_t *idx = (uint32_t *)(uintptr_t)ARG(CUdeviceptr, 1);
                uint32_t nl = ARG(uint32_t, 2);
                for (uint32_t l = 0; l < nl; l++) {
                    uint32_t h = idx[l] * 2654435761u;
                    double base = 260 + (h >> 24) % 70;
                    int home = (h >> 7) & 1;
                    double v = base + (fk.structured ? (fk.truth[sm] == home ? -15 : 15) : 0) + noise();
                    out[(size_t)sm * nl + l] = (float)v;
                }
            }
        }
    }
    return CUDA_SUCCESS;
}

static CUresult loc_alloc(void *ctx, int domain, size_t bytes, CUdeviceptr *out) {
    (void)ctx;
    void *m = malloc(bytes);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    *out = (CUdeviceptr)(uintptr_t)m;
    fk.loc[domain] = *out;
    fk.loc_home[domain] = domain;
    fk.loc_allocs++;
    return CUDA_SUCCESS;
}
static void loc_free(void *ctx, CUdeviceptr p, size_t bytes) { (void)ctx; (void)bytes; free((void *)(uintptr_t)p); fk.loc_frees++; }

static ld_driver_t stub;

static void stub_reset(int nsms, uint32_t ntpc0) {
    memset(&fk, 0, sizeof fk);
    fk.nsms = nsms;
    fk.structured = 1;
    fk.separates = 1;
    fk.current = (CUcontext)(uintptr_t)0xC0;
    fk.capture = CU_STREAM_CAPTURE_MODE_GLOBAL;
    make_truth(fk.truth, (uint32_t)nsms, ntpc0, 99);
    rng_seed(1234);
    memset(&stub, 0, sizeof stub);
    stub.pfn_cuDeviceGetAttribute = f_attr;
    stub.pfn_cuGetErrorName = f_errname;
    stub.pfn_cuModuleLoadData = f_load;
    stub.pfn_cuModuleUnload = f_unload;
    stub.pfn_cuModuleGetFunction = f_getfn;
    stub.pfn_cuFuncSetAttribute = f_setattr;
    stub.pfn_cuMemAlloc_v2 = f_alloc;
    stub.pfn_cuMemFree_v2 = f_free;
    stub.pfn_cuMemcpyDtoH_v2 = f_dtoh;
    stub.pfn_cuStreamCreate = f_stream_create;
    stub.pfn_cuStreamDestroy_v2 = f_stream_destroy;
    stub.pfn_cuStreamSynchronize = f_sync_stream;
    stub.pfn_cuCtxSynchronize = f_sync;
    stub.pfn_cuDeviceGetUuid_v2 = f_uuid;
    stub.pfn_cuDriverGetVersion = f_drv_version;
    stub.pfn_cuCtxGetCurrent = f_ctx_get;
    stub.pfn_cuCtxSetCurrent = f_ctx_set;
    stub.pfn_cuCtxGetDevice = f_ctx_dev;
    stub.pfn_cuDevicePrimaryCtxRetain = f_retain;
    stub.pfn_cuDevicePrimaryCtxRelease_v2 = f_release;
    stub.pfn_cuCtxPushCurrent_v2 = f_push;
    stub.pfn_cuCtxPopCurrent_v2 = f_pop;
    stub.pfn_cuThreadExchangeStreamCaptureMode = f_capture;
    stub.pfn_cuLaunchKernel = f_launch;
    unsetenv("LDSHIM_PROBE_FORCE");
    ld_options_reread();
    ld_log_level = LD_LOG_WARN;
}

static ld_probe_opts_t opts_for(ld_probe_mode_t mode, int localized) {
    ld_probe_opts_t o;
    memset(&o, 0, sizeof o);
    o.mode = mode;
    o.map = LD_MAP_BALANCED;
    o.ndomains = 2;
    if (localized) { o.alloc_localized = loc_alloc; o.free_localized = loc_free; }
    return o;
}

/* Run the probe with stderr captured; returns the number of lines containing `needle`. */
static int probe_capture(const ld_probe_opts_t *o, ld_probe_result_t *r, const char *needle, int *rc) {
    char path[300];
    snprintf(path, sizeof path, "%s/stderr.txt", tmpdir);
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (saved < 0 || fd < 0) { *rc = ld_probe_device(&stub, 0, o, r); return -1; }
    dup2(fd, 2);
    close(fd);
    *rc = ld_probe_device(&stub, 0, o, r);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char buf[8192];
    int len = read_file(path, buf, sizeof buf), lines = 0;
    if (len < 0) return -1;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        lines += strstr(line, needle) != NULL;
        fprintf(stderr, "  [captured] %s\n", line);
    }
    return lines;
}

static void assert_clean(void) {
    CU_ASSERT_EQUAL(fk.live_allocs, 0);
    CU_ASSERT_EQUAL(fk.live_streams, 0);
    CU_ASSERT_EQUAL(fk.live_modules, 0);
    CU_ASSERT_EQUAL(fk.loc_allocs, fk.loc_frees);
    CU_ASSERT_EQUAL(fk.retains, fk.releases);
    CU_ASSERT_EQUAL(fk.bad_launch, 0);
    CU_ASSERT_PTR_EQUAL(fk.current, (CUcontext)(uintptr_t)0xC0);
    CU_ASSERT_EQUAL(fk.capture, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

static void test_drv_clustered(void) {
    stub_reset(132, 33);
    ld_probe_opts_t o = opts_for(LD_PROBE_CLUSTERED, 0);
    ld_probe_result_t r;
    setenv("LDSHIM_PROBE_DUMP", tmpdir, 1);
    ld_options_reread();
    int rc, warns = probe_capture(&o, &r, "ldshim:", &rc);
    unsetenv("LDSHIM_PROBE_DUMP");
    ld_options_reread();
    char path[400], line[8192];
    snprintf(path, sizeof path, "%s/clustered-dev0-attempt1.csv", tmpdir);
    FILE *f = fopen(path, "r");
    CU_ASSERT_PTR_NOT_NULL(f);
    int rows = 0, commas = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (rows++ == 0) for (char *c = line; *c; c++) commas += *c == ',';
    }
    if (f) fclose(f);
    CU_ASSERT_EQUAL(rows, 132);                        /* LDSHIM_PROBE_DUMP: a row per SM */
    CU_ASSERT_EQUAL(commas, LD_PROBE_LINES);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(warns, 0);
    CU_ASSERT_EQUAL(r.valid, 1);
    CU_ASSERT_EQUAL(r.mode_used, LD_PROBE_CLUSTERED);
    CU_ASSERT_EQUAL(r.attempts, 1);
    CU_ASSERT_EQUAL(memcmp(r.physical, fk.truth, 132), 0);
    CU_ASSERT_EQUAL(r.published.magic, LDSHIM_TOPOLOGY_MAGIC);
    CU_ASSERT_EQUAL(r.published.num_sms, 132);
    CU_ASSERT_EQUAL(r.published.num_domains, 2);
    CU_ASSERT_EQUAL(r.published.sms_per_domain[0], 66);
    CU_ASSERT_EQUAL(r.published.flags, LDSHIM_TOPO_VALID | LDSHIM_TOPO_BALANCED |
                                        (LDSHIM_SOURCE_CLUSTERED << LDSHIM_TOPO_SOURCE_SHIFT));
    CU_ASSERT(r.far_cycles - r.near_cycles > 20);
    CU_ASSERT_EQUAL(fk.chase_launches, 1);
    assert_clean();
}

/* LDSHIM_PROBE_DUMP into a hostile directory (issue 41, High 2 and 3): a link planted at a
 * dump name is never followed (the root-owned file it points at stays byte-identical), a FIFO
 * there is never waited on, a linked or world-writable dump directory is refused; the probe's
 * result is unharmed and the process says so once (one warning per process). */
static int file_is(const char *path, const char *want) {
    char buf[256];
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strcmp(buf, want) == 0;
}

static void test_drv_dump_hostile(void) {
    char dir[400], victim[400], name[480], other[400], ww[400];
    snprintf(dir, sizeof dir, "%s/dump-hostile", tmpdir);
    snprintf(victim, sizeof victim, "%s/victim", tmpdir);
    snprintf(name, sizeof name, "%s/clustered-dev0-attempt1.csv", dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0700), 0);
    FILE *v = fopen(victim, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    fputs("root's private file\n", v);
    fclose(v);
    chmod(victim, 0600);
    CU_ASSERT_EQUAL(symlink(victim, name), 0);
    stub_reset(132, 33);
    ld_probe_opts_t o = opts_for(LD_PROBE_CLUSTERED, 0);
    ld_probe_result_t r;
    setenv("LDSHIM_PROBE_DUMP", dir, 1);
    ld_options_reread();
    alarm(30);   /* a FIFO opened for writing would block: fail instead */
    int rc, warns = probe_capture(&o, &r, "LDSHIM_PROBE_DUMP", &rc);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(r.valid, 1);
    CU_ASSERT_EQUAL(warns, 1);
    CU_ASSERT(file_is(victim, "root's private file\n"));
    struct stat st;
    CU_ASSERT(lstat(name, &st) == 0 && S_ISLNK(st.st_mode));   /* refused, not replaced */
    /* A FIFO at the dump name: refused at once (the warning was said already). */
    CU_ASSERT_EQUAL(unlink(name), 0);
    CU_ASSERT_EQUAL(mkfifo(name, 0600), 0);
    stub_reset(132, 33);
    warns = probe_capture(&o, &r, "LDSHIM_PROBE_DUMP", &rc);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(r.valid, 1);
    CU_ASSERT(lstat(name, &st) == 0 && S_ISFIFO(st.st_mode));
    CU_ASSERT_EQUAL(unlink(name), 0);
    /* The dump directory a link to another directory, or writable by everyone: refused. */
    snprintf(other, sizeof other, "%s/dump-other", tmpdir);
    CU_ASSERT_EQUAL(mkdir(other, 0700), 0);
    snprintf(ww, sizeof ww, "%s/dump-link", tmpdir);
    CU_ASSERT_EQUAL(symlink(other, ww), 0);
    setenv("LDSHIM_PROBE_DUMP", ww, 1);
    ld_options_reread();
    stub_reset(132, 33);
    probe_capture(&o, &r, "LDSHIM_PROBE_DUMP", &rc);
    CU_ASSERT_EQUAL(r.valid, 1);
    char probe_name[480];
    snprintf(probe_name, sizeof probe_name, "%s/clustered-dev0-attempt1.csv", other);
    CU_ASSERT_NOT_EQUAL(access(probe_name, F_OK), 0);
    CU_ASSERT_EQUAL(chmod(dir, 0777), 0);
    setenv("LDSHIM_PROBE_DUMP", dir, 1);
    ld_options_reread();
    stub_reset(132, 33);
    probe_capture(&o, &r, "LDSHIM_PROBE_DUMP", &rc);
    CU_ASSERT_EQUAL(r.valid, 1);
    CU_ASSERT_NOT_EQUAL(access(name, F_OK), 0);
    alarm(0);
    unsetenv("LDSHIM_PROBE_DUMP");
    ld_options_reread();
    chmod(dir, 0700);
    rmdir(dir);
    unlink(ww);
    rmdir(other);
    unlink(victim);
    assert_clean();
}

static void test_drv_missed_sm_relaunch(void) {
    stub_reset(132, 33);
    fk.miss_launches = 2;
    ld_probe_opts_t o = opts_for(LD_PROBE_CLUSTERED, 0);
    ld_probe_result_t r;
    CU_ASSERT_EQUAL(ld_probe_device(&stub, 0, &o, &r), 0);
    CU_ASSERT_EQUAL(r.valid, 1);
    CU_ASSERT_EQUAL(fk.chase_launches, 3);
    CU_ASSERT_EQUAL(memcmp(r.physical, fk.truth, 132), 0);
    /* Always missing: the attempt fails, and so do the others; even map, clean. */
    stub_reset(132, 33);
    fk.miss_launches = 1000;
    int rc, warns = probe_capture(&o, &r, "even map", &rc);
    CU_ASSERT_EQUAL(r.valid, 0);
    CU_ASSERT_EQUAL(warns, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.verdict, "missed 1 SMs"));
    assert_clean();
}

static void test_drv_anchored(void) {
    stub_reset(140, 37);
    ld_probe_opts_t o = opts_for(LD_PROBE_ANCHORED, 1);
    ld_probe_result_t r;
    CU_ASSERT_EQUAL(ld_probe_device(&stub, 0, &o, &r), 0);
    CU_ASSERT_EQUAL(r.valid, 1);
    CU_ASSERT_EQUAL(r.mode_used, LD_PROBE_ANCHORED);
    CU_ASSERT_EQUAL(memcmp(r.physical, fk.truth, 140), 0);
    CU_ASSERT_EQUAL(r.tpcs_moved, 2);
    CU_ASSERT_EQUAL(r.published.sms_per_domain[0], 70);
    CU_ASSERT_EQUAL(r.published.sms_per_domain[1], 70);
    CU_ASSERT_EQUAL((r.published.flags & LDSHIM_TOPO_SOURCE_MASK) >> LDSHIM_TOPO_SOURCE_SHIFT, LDSHIM_SOURCE_ANCHORED);
    CU_ASSERT(r.near_cycles > 550 && r.near_cycles < 650 && r.far_cycles > 850);
    assert_clean();
    /* map = physical: the measured map is published, BALANCED clear. */
    stub_reset(140, 37);
    o.map = LD_MAP_PHYSICAL;
    CU_ASSERT_EQUAL(ld_probe_device(&stub, 0, &o, &r), 0);
    CU_ASSERT_EQUAL(memcmp(r.published.sm_domain, r.physical, 140), 0);
    CU_ASSERT_EQUAL(r.published.flags & LDSHIM_TOPO_BALANCED, 0);
    CU_ASSERT_EQUAL(r.published.sms_per_domain[0], 74);
}

static void test_drv_anchored_no_separation(void) {
    stub_reset(132, 33);
    fk.separates = 0;                     /* ordinary interleaved memory */
    ld_probe_opts_t o = opts_for(LD_PROBE_ANCHORED, 1);
    ld_probe_result_t r;
    int rc, warns = probe_capture(&o, &r, "even map", &rc);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(warns, 1);            /* one warning, not one per attempt */
    CU_ASSERT_EQUAL(r.valid, 0);
    CU_ASSERT_EQUAL(r.attempts, LD_PROBE_ATTEMPTS);
    CU_ASSERT_EQUAL(r.mode_used, LD_PROBE_EVEN);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.verdict, "no clear separation"));
    uint8_t even[132];
    ld_even_map(132, 2, even);
    CU_ASSERT_EQUAL(memcmp(r.published.sm_domain, even, 132), 0);
    CU_ASSERT_EQUAL(r.published.flags & LDSHIM_TOPO_VALID, 0);
    CU_ASSERT_EQUAL((r.published.flags & LDSHIM_TOPO_SOURCE_MASK) >> LDSHIM_TOPO_SOURCE_SHIFT, LDSHIM_SOURCE_EVEN);
    CU_ASSERT_EQUAL(r.published.magic, LDSHIM_TOPOLOGY_MAGIC);
    assert_clean();
    /* Anchored without localized memory: nothing to measure against. */
    stub_reset(132, 33);
    o = opts_for(LD_PROBE_ANCHORED, 0);
    CU_ASSERT_EQUAL(ld_probe_device(&stub, 0, &o, &r), 0);
    CU_ASSERT_EQUAL(r.valid, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.verdict, "no localized memory"));
    assert_clean();
}

static void test_drv_auto(void) {
    stub_reset(132, 33);
    ld_probe_opts_t o = opts_for(LD_PROBE_AUTO, 1);
    ld_probe_result_t r;
    CU_ASSERT_EQUAL(ld_probe_device(&stub, 0, &o, &r), 0);
    CU_ASSERT_EQUAL(r.mode_used, LD_PROBE_ANCHORED);
    o = opts_for(LD_PROBE_AUTO, 0);
    CU_ASSERT_EQUAL(ld_probe_device(&stub, 0, &o, &r), 0);
    CU_ASSERT_EQUAL(r.mode_used, LD_PROBE_CLUSTERED);
    /* Localized memory that does not separate: clustered, labelled by the anchored votes
     * (which here are noise, so either labelling is allowed, but TPCs must agree). */
    stub_reset(132, 33);
    fk.separates = 0;
    o = opts_for(LD_PROBE_AUTO, 1);
    CU_ASSERT_EQUAL(ld_probe_device(&stub, 0, &o, &r), 0);
    CU_ASSERT_EQUAL(r.valid, 1);
    CU_ASSERT_EQUAL(r.mode_used, LD_PROBE_CLUSTERED);
    CU_ASSERT_EQUAL(r.attempts, LD_PROBE_ATTEMPTS + 1);
    CU_ASSERT_EQUAL(ld_first_split_tpc(r.physical, 132), -1);
    assert_clean();
}

static void test_drv_no_binary(void) {
    stub_reset(132, 33);
    fk.load_rc = CUDA_ERROR_NO_BINARY_FOR_GPU;
    ld_probe_opts_t o = opts_for(LD_PROBE_AUTO, 0);
    ld_probe_result_t r;
    int rc, warns = probe_capture(&o, &r, "even map", &rc);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(warns, 1);
    CU_ASSERT_EQUAL(r.valid, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.verdict, "CUDA_ERROR_NO_BINARY_FOR_GPU"));
    CU_ASSERT_EQUAL(r.published.magic, LDSHIM_TOPOLOGY_MAGIC);
    assert_clean();
}

static void test_drv_modes_off_even_and_errors(void) {
    stub_reset(132, 33);
    ld_probe_opts_t o = opts_for(LD_PROBE_EVEN, 0);
    ld_probe_result_t r;
    CU_ASSERT_EQUAL(ld_probe_device(&stub, 0, &o, &r), 0);
    CU_ASSERT_EQUAL(fk.loads, 0);
    CU_ASSERT_EQUAL(r.mode_used, LD_PROBE_EVEN);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.verdict, "even map requested"));
    o.mode = LD_PROBE_OFF;
    CU_ASSERT_EQUAL(ld_probe_device(&stub, 0, &o, &r), 0);
    CU_ASSERT_EQUAL(fk.loads, 0);
    o = opts_for(LD_PROBE_CLUSTERED, 0);
    o.ndomains = 1;
    CU_ASSERT_EQUAL(ld_probe_device(&stub, 0, &o, &r), 0);
    CU_ASSERT_EQUAL(r.valid, 1);
    CU_ASSERT_EQUAL(r.published.sms_per_domain[0], 132);
    CU_ASSERT_EQUAL(fk.loads, 0);
    fk.nsms = 0;                                   /* device cannot be queried */
    CU_ASSERT_EQUAL(ld_probe_device(&stub, 0, &o, &r), -1);
    CU_ASSERT_EQUAL(ld_probe_device(NULL, 0, &o, &r), -1);
    /* No current context: the probe uses dev's primary context and leaves none current. */
    stub_reset(132, 33);
    fk.current = NULL;
    o = opts_for(LD_PROBE_CLUSTERED, 0);
    CU_ASSERT_EQUAL(ld_probe_device(&stub, 0, &o, &r), 0);
    CU_ASSERT_EQUAL(r.valid, 1);
    CU_ASSERT_PTR_NULL(fk.current);
    CU_ASSERT_EQUAL(fk.retains, 1);
    CU_ASSERT_EQUAL(fk.releases, 1);
}

static void test_drv_cache_and_force(void) {
    char dir[400], path[600], why[256];
    snprintf(dir, sizeof dir, "%s/drvcache", tmpdir);
    stub_reset(132, 33);
    ld_probe_opts_t o = opts_for(LD_PROBE_AUTO, 0);
    o.use_cache = 1;
    o.cache_dir = dir;
    ld_probe_result_t r, r2;
    /* A failed probe is not cached. */
    fk.load_rc = CUDA_ERROR_NO_BINARY_FOR_GPU;
    CU_ASSERT_EQUAL(ld_probe_device(&stub, 0, &o, &r), 0);
    ld_cache_key_t k;
    memset(&k, 0, sizeof k);
    snprintf(k.uuid, sizeof k.uuid, "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f");
    k.driver_version = 13000;
    ld_cache_path(dir, &k, path, sizeof path);
    CU_ASSERT_NOT_EQUAL(access(path, F_OK), 0);
    /* Cold: measured and cached. */
    fk.load_rc = CUDA_SUCCESS;
    CU_ASSERT_EQUAL(ld_probe_device(&stub, 0, &o, &r), 0);
    CU_ASSERT_EQUAL(r.from_cache, 0);
    CU_ASSERT_EQUAL(r.valid, 1);
    CU_ASSERT_EQUAL(access(path, F_OK), 0);
    /* Cached: no module load, same maps, source cache. */
    int loads = fk.loads;
    CU_ASSERT_EQUAL(ld_probe_device(&stub, 0, &o, &r2), 0);
    CU_ASSERT_EQUAL(fk.loads, loads);
    CU_ASSERT_EQUAL(r2.from_cache, 1);
    CU_ASSERT_EQUAL(r2.valid, 1);
    CU_ASSERT_EQUAL(r2.mode_used, LD_PROBE_CLUSTERED);
    CU_ASSERT_EQUAL(memcmp(r2.physical, r.physical, 132), 0);
    CU_ASSERT_EQUAL(memcmp(&r2.published.sm_domain, &r.published.sm_domain, 132), 0);
    CU_ASSERT_EQUAL((r2.published.flags & LDSHIM_TOPO_SOURCE_MASK) >> LDSHIM_TOPO_SOURCE_SHIFT, LDSHIM_SOURCE_CACHE);
    CU_ASSERT(r2.published.flags & LDSHIM_TOPO_VALID);
    /* A cached clustered result does not serve an explicit anchored request. */
    ld_probe_opts_t oa = o;
    oa.mode = LD_PROBE_ANCHORED;
    oa.alloc_localized = loc_alloc;
    oa.free_localized = loc_free;
    CU_ASSERT_EQUAL(ld_probe_device(&stub, 0, &oa, &r2), 0);
    CU_ASSERT_EQUAL(r2.from_cache, 0);
    CU_ASSERT_EQUAL(r2.mode_used, LD_PROBE_ANCHORED);
    /* opts.force: measured again and rewritten. */
    loads = fk.loads;
    o.force = 1;
    CU_ASSERT_EQUAL(ld_probe_device(&stub, 0, &o, &r2), 0);
    CU_ASSERT_EQUAL(r2.from_cache, 0);
    CU_ASSERT_EQUAL(fk.loads, loads + 1);
    o.force = 0;
    /* LDSHIM_PROBE_FORCE=1 does the same; =0 does not. */
    setenv("LDSHIM_PROBE_FORCE", "1", 1);
    ld_options_reread();
    CU_ASSERT_EQUAL(ld_probe_device(&stub, 0, &o, &r2), 0);
    CU_ASSERT_EQUAL(r2.from_cache, 0);
    setenv("LDSHIM_PROBE_FORCE", "0", 1);
    ld_options_reread();
    CU_ASSERT_EQUAL(ld_probe_device(&stub, 0, &o, &r2), 0);
    CU_ASSERT_EQUAL(r2.from_cache, 1);
    unsetenv("LDSHIM_PROBE_FORCE");
    ld_options_reread();
    /* Corrupted file: one warning, re-probe, rewritten. */
    FILE *f = fopen(path, "r+");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, 30, SEEK_SET);
    fputc('#', f);
    fclose(f);
    int rc, warns = probe_capture(&o, &r2, "ignoring topology cache", &rc);
    CU_ASSERT_EQUAL(warns, 1);
    CU_ASSERT_EQUAL(r2.from_cache, 0);
    CU_ASSERT_EQUAL(r2.valid, 1);
    ld_probe_result_t r3;
    k.num_sms = 132;
    k.num_domains = 2;
    FILE *kf = fopen("/sys/module/nvidia/version", "r");
    if (kf) { if (fgets(k.kmod, sizeof k.kmod, kf)) k.kmod[strcspn(k.kmod, " \n")] = 0; fclose(kf); }
    CU_ASSERT_EQUAL(ld_cache_load(dir, &k, &r3, why, sizeof why), LD_CACHE_HIT);
    assert_clean();
}

static void test_drv_json(void) {
    stub_reset(132, 33);
    ld_probe_opts_t o = opts_for(LD_PROBE_CLUSTERED, 0);
    ld_probe_result_t r;
    CU_ASSERT_EQUAL(ld_probe_device(&stub, 0, &o, &r), 0);
    snprintf(r.verdict, sizeof r.verdict, "a \"quoted\"\tverdict\\");
    char big[8192], small[16];
    int n = ld_probe_result_json(&r, big, sizeof big);
    CU_ASSERT(n > 0 && (size_t)n == strlen(big));
    CU_ASSERT_EQUAL(ld_probe_result_json(&r, small, sizeof small), n);
    CU_ASSERT_EQUAL(strlen(small), sizeof small - 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(big, "\"mode\":\"clustered\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(big, "\"valid\":true"));
    CU_ASSERT_PTR_NOT_NULL(strstr(big, "\"source\":\"clustered\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(big, "\"verdict\":\"a \\\"quoted\\\"\\tverdict\\\\\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(big, "\"sms_per_domain\":[66,66]"));
    CU_ASSERT_PTR_NOT_NULL(strstr(big, "\"physical\":["));
    CU_ASSERT_EQUAL(big[n - 1], '}');
    /* Escape codes and invalid UTF-8 (a cached verdict is text from a file) stay valid JSON. */
    snprintf(r.verdict, sizeof r.verdict, "esc\x1b[31m red \xff\xc3\xa9 \xe2\x82");
    ld_probe_result_json(&r, big, sizeof big);
    CU_ASSERT_PTR_NOT_NULL(strstr(big, "\"verdict\":\"esc\\u001b[31m red \\ufffd\xc3\xa9 \\ufffd\\ufffd\""));
}

static int cleanup_tmpdir(void) { rm_rf(tmpdir); return 0; }

static void register_driver_tests(void) {
    CU_pSuite s = CU_add_suite("probe_device (stub driver)", NULL, cleanup_tmpdir);
    CU_add_test(s, "clustered end to end, nothing leaked", test_drv_clustered);
    CU_add_test(s, "LDSHIM_PROBE_DUMP: planted link, FIFO, linked and world-writable directory", test_drv_dump_hostile);
    CU_add_test(s, "launch that missed an SM is relaunched", test_drv_missed_sm_relaunch);
    CU_add_test(s, "anchored with localized memory, balanced and physical maps", test_drv_anchored);
    CU_add_test(s, "anchored without separation: 5 attempts, one warning, even map", test_drv_anchored_no_separation);
    CU_add_test(s, "auto picks anchored or clustered", test_drv_auto);
    CU_add_test(s, "no binary for the GPU: even map with the reason", test_drv_no_binary);
    CU_add_test(s, "modes even/off, one domain, errors, no context", test_drv_modes_off_even_and_errors);
    CU_add_test(s, "cache reuse, force, LDSHIM_PROBE_FORCE, corruption", test_drv_cache_and_force);
    CU_add_test(s, "result JSON", test_drv_json);
}

static void register_tests(void) {
    ld_log_init();
    make_tmpdir();
    CU_pSuite s = CU_add_suite("probe_classify", NULL, NULL);
    CU_add_test(s, "stride-7 ring visits all 32 lines once", test_ring_visits_all);
    CU_add_test(s, "clustered line selection is distinct", test_probe_lines_distinct);
    CU_add_test(s, "even map", test_even_map);
    CU_add_test(s, "anchored clean 70/70 (140 SMs)", test_anchored_clean_70_70);
    CU_add_test(s, "anchored uneven 74/66 and balancing", test_anchored_uneven_74_66_balanced);
    CU_add_test(s, "anchored reference figures 295/488 ns", test_anchored_reference_figures);
    CU_add_test(s, "anchored 1.25 ratio threshold", test_anchored_ratio_threshold);
    CU_add_test(s, "anchored TPC disagreement rejected", test_anchored_tpc_disagreement);
    CU_add_test(s, "anchored odd SM count", test_anchored_odd_sm_count);
    CU_add_test(s, "balancer cases", test_balance_cases);
    CU_add_test(s, "one domain", test_one_domain);
    CU_add_test(s, "anchored bad input", test_anchored_bad_input);
    CU_add_test(s, "anchored on interleaved memory rejected", test_anchored_ordinary_memory);
    CU_add_test(s, "clustered H200-shaped data recovers 66/66", test_clustered_h200_shape);
    CU_add_test(s, "clustered uneven and anchored labels", test_clustered_uneven_and_labels);
    CU_add_test(s, "clustered with 1 % stalled samples", test_clustered_spikes);
    CU_add_test(s, "clustered no structure rejected", test_clustered_no_structure);
    CU_add_test(s, "clustered TPC split rejected", test_clustered_tpc_split);
    CU_add_test(s, "clustered three domains", test_clustered_three_domains);
    CU_add_test(s, "topology struct fill", test_topology_fill);
    s = CU_add_suite("probe_cache", NULL, NULL);
    CU_add_test(s, "write/read round trip, modes 0700/0600", test_cache_roundtrip);
    CU_add_test(s, "corrupted and truncated files", test_cache_corruption);
    CU_add_test(s, "foreign files", test_cache_foreign);
    CU_add_test(s, "forged maps re-validated on load", test_cache_forged_maps);
    CU_add_test(s, "planted FIFO and link, foreign owners, open modes", test_cache_untrusted);
    CU_add_test(s, "cache directory resolution", test_cache_dir_resolution);
    register_driver_tests();
}

#include "tests/unit/cunit_main.h"
