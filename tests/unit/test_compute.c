/* test_compute.c — CUnit tests of the compute-binding plan (shim/compute_plan.c): which SM
 * groups each placement takes, caps, backfill, spread, straddling and labelled groups, the
 * SM-group cache format and its corruption, and the topology header's bound-set helpers.
 * Run: make test-compute (SAN=1 for ASan/UBSan). */
#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim/compute_plan.h"

#define NSMS 132

/* The H200's picture: TPC t -> side t mod 2; groups of 8 SMs formed within each side. */
static uint8_t g_map[LDSHIM_MAX_SMS];

static void side_map(void) {
    for (int s = 0; s < LDSHIM_MAX_SMS; s++) g_map[s] = (uint8_t)((s / 2) % 2);
}

/* Groups of `size` SMs from each side in id order; at most cap[side] per side (0: no cap). */
static void side_groups(ld_sm_groups_t *g, int size, int cap0, int cap1, int straddle) {
    memset(g, 0, sizeof *g);
    int order[NSMS], n = 0;
    if (straddle) {
        for (int s = 0; s < NSMS; s++) order[n++] = s;
    } else {
        for (int side = 0; side < 2; side++)
            for (int s = 0; s < NSMS; s++)
                if (g_map[s] == side) order[n++] = s;
    }
    int per[2] = {0, 0};
    for (int i = 0; i + size <= n;) {
        int side = g_map[order[i]], ok = 1;
        for (int k = 0; k < size && !straddle; k++) ok &= g_map[order[i + k]] == side;
        if (!ok) { i++; continue; }
        int cap = side ? cap1 : cap0;
        if (!straddle && cap && per[side] >= cap) { i++; continue; }
        g->count[g->ngroups] = (uint32_t)size;
        g->domain[g->ngroups] = -1;
        for (int k = 0; k < size; k++) ld_smmask_set(&g->sms[g->ngroups], (uint32_t)order[i + k]);
        g->ngroups++;
        per[side]++;
        i += size;
    }
}

static int plan(const char *req, ld_split_t m, uint32_t cap, const ld_sm_groups_t *g, ld_compute_plan_t *p) {
    ld_compute_t c;
    size_t bad;
    char why[160];
    CU_ASSERT_EQUAL_FATAL(ld_compute_scan(req, strlen(req), &c, &bad, why, sizeof why), 0);
    return ld_compute_plan(&c, m, cap, g_map, NSMS, 2, g, p);
}

/* Every chosen SM is in `dom` (or -1: any), the union matches count and per_domain. */
static void check_plan(const ld_compute_plan_t *p, int dom) {
    CU_ASSERT_EQUAL(ld_smmask_count(&p->sms), p->count);
    uint32_t per[2] = {0, 0};
    for (uint32_t s = 0; s < NSMS; s++)
        if (ld_smmask_has(&p->sms, s)) {
            per[g_map[s]]++;
            if (dom >= 0) CU_ASSERT_EQUAL(g_map[s], dom);
        }
    CU_ASSERT_EQUAL(per[0], p->per_domain[0]);
    CU_ASSERT_EQUAL(per[1], p->per_domain[1]);
}

static void test_domain(void) {
    side_map();
    ld_sm_groups_t g;
    ld_compute_plan_t p;
    side_groups(&g, 8, 7, 8, 0);   /* the H200: 7 + 8 groups */
    CU_ASSERT_EQUAL(g.ngroups, 15);
    CU_ASSERT_EQUAL(plan("domain:0", LD_SPLIT_ALIGNED, 0, &g, &p), 0);
    CU_ASSERT_TRUE(p.ok);
    CU_ASSERT_EQUAL(p.count, 56);
    CU_ASSERT_EQUAL(p.ngroups, 7);
    CU_ASSERT_EQUAL(p.outside, 0);
    check_plan(&p, 0);
    CU_ASSERT_EQUAL(plan("domain:1", LD_SPLIT_ALIGNED, 0, &g, &p), 0);
    CU_ASSERT_EQUAL(p.count, 64);
    check_plan(&p, 1);
    /* The cap takes whole groups in order: the same 56 SMs as domain 0 has. */
    CU_ASSERT_EQUAL(plan("domain:1", LD_SPLIT_ALIGNED, 56, &g, &p), 0);
    CU_ASSERT_EQUAL(p.count, 56);
    check_plan(&p, 1);
    CU_ASSERT_EQUAL(plan("domain:1", LD_SPLIT_ALIGNED, 60, &g, &p), 0);
    CU_ASSERT_EQUAL(p.count, 56);
    CU_ASSERT_EQUAL(plan("domain:1", LD_SPLIT_ALIGNED, 7, &g, &p), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.why, "no SM group of domain 1 fits compute_sms = 7"));
    /* No such domain. */
    CU_ASSERT_EQUAL(plan("domain:2", LD_SPLIT_ALIGNED, 0, &g, &p), -1);
    CU_ASSERT_FALSE(p.ok);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.why, "no such domain (the GPU has 2 domains, 0..1)"));
    /* Straddling groups: nothing lies in a domain. */
    side_groups(&g, 16, 0, 0, 1);
    CU_ASSERT_EQUAL(plan("domain:0", LD_SPLIT_ALIGNED, 0, &g, &p), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.why, "no SM group lies wholly in domain 0"));
    /* An empty split. */
    memset(&g, 0, sizeof g);
    CU_ASSERT_EQUAL(plan("domain:0", LD_SPLIT_ALIGNED, 0, &g, &p), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.why, "the SM split gave no group"));
}

static void test_backfill(void) {
    side_map();
    ld_sm_groups_t g;
    ld_compute_plan_t p;
    side_groups(&g, 8, 7, 8, 0);
    /* 56 of domain 0, topped up towards 66 with whole groups: one of domain 1 (64). */
    CU_ASSERT_EQUAL(plan("domain:0", LD_SPLIT_BACKFILL, 0, &g, &p), 0);
    CU_ASSERT_EQUAL(p.count, 64);
    CU_ASSERT_EQUAL(p.outside, 8);
    CU_ASSERT_EQUAL(p.per_domain[0], 56);
    CU_ASSERT_EQUAL(p.per_domain[1], 8);
    check_plan(&p, -1);
    /* With straddling 16-SM groups backfill still finds SMs, preferring the most in-domain. */
    side_groups(&g, 16, 0, 0, 1);
    CU_ASSERT_EQUAL(plan("domain:0", LD_SPLIT_BACKFILL, 64, &g, &p), 0);
    CU_ASSERT_EQUAL(p.count, 64);
    CU_ASSERT_EQUAL(p.per_domain[0] + p.per_domain[1], 64);
    CU_ASSERT_EQUAL(p.outside, p.per_domain[1]);
}

static void test_spread(void) {
    side_map();
    ld_sm_groups_t g;
    ld_compute_plan_t p;
    side_groups(&g, 8, 7, 8, 0);
    CU_ASSERT_EQUAL(plan("spread:56", LD_SPLIT_ALIGNED, 0, &g, &p), 0);
    CU_ASSERT_EQUAL(p.count, 56);
    CU_ASSERT_EQUAL(p.per_domain[0], 32);
    CU_ASSERT_EQUAL(p.per_domain[1], 24);
    check_plan(&p, -1);
    CU_ASSERT_EQUAL(plan("spread:64", LD_SPLIT_ALIGNED, 0, &g, &p), 0);
    CU_ASSERT_EQUAL(p.per_domain[0], 32);
    CU_ASSERT_EQUAL(p.per_domain[1], 32);
    /* 2-SM groups give every count exactly and evenly. */
    side_groups(&g, 2, 0, 0, 0);
    CU_ASSERT_EQUAL(plan("spread:56", LD_SPLIT_FINE, 0, &g, &p), 0);
    CU_ASSERT_EQUAL(p.per_domain[0], 28);
    CU_ASSERT_EQUAL(p.per_domain[1], 28);
    CU_ASSERT_EQUAL(plan("spread:66", LD_SPLIT_FINE, 0, &g, &p), 0);
    CU_ASSERT_EQUAL(p.count, 66);
    /* A count no group fits, more SMs than the GPU, one domain only. */
    side_groups(&g, 8, 0, 0, 0);
    CU_ASSERT_EQUAL(plan("spread:4", LD_SPLIT_ALIGNED, 0, &g, &p), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.why, "no single-domain SM group fits 4 SMs"));
    CU_ASSERT_EQUAL(plan("spread:200", LD_SPLIT_ALIGNED, 0, &g, &p), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.why, "the GPU has 132 SMs"));
    CU_ASSERT_EQUAL(plan("spread:8", LD_SPLIT_ALIGNED, 0, &g, &p), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.why, "only one domain"));
}

static void test_labels(void) {
    /* The driver's split by locality domain labels its groups: labels win over the map. */
    side_map();
    ld_sm_groups_t g;
    memset(&g, 0, sizeof g);
    g.ngroups = 2;
    for (int i = 0; i < 2; i++) {
        g.domain[i] = (int8_t)i;
        g.count[i] = 60;
        for (uint32_t s = (uint32_t)i * 60; s < (uint32_t)i * 60 + 60; s++) ld_smmask_set(&g.sms[i], s);
    }
    ld_compute_plan_t p;
    CU_ASSERT_EQUAL(plan("domain:1", LD_SPLIT_ALIGNED, 0, &g, &p), 0);
    CU_ASSERT_EQUAL(p.count, 60);
    CU_ASSERT_EQUAL(p.ngroups, 1);
    CU_ASSERT_EQUAL(p.group[0], 1);
    CU_ASSERT_EQUAL(p.per_domain[1], 60);
    CU_ASSERT_EQUAL(p.outside, 0);
    CU_ASSERT_EQUAL(ld_sm_group_domain(&g, 0, g_map, NSMS), 0);
    g.domain[0] = -1;
    CU_ASSERT_EQUAL(ld_sm_group_domain(&g, 0, g_map, NSMS), -1);   /* SMs 0..59 straddle the sides */
}

static void test_masks(void) {
    ld_smmask_t m;
    memset(&m, 0, sizeof m);
    char buf[64];
    CU_ASSERT_STRING_EQUAL(ld_smmask_format(&m, buf, sizeof buf), "");
    ld_smmask_set(&m, 0);
    ld_smmask_set(&m, 1);
    ld_smmask_set(&m, 2);
    ld_smmask_set(&m, 7);
    ld_smmask_set(&m, 255);
    ld_smmask_set(&m, 256);   /* out of range: ignored */
    CU_ASSERT_EQUAL(ld_smmask_count(&m), 5);
    CU_ASSERT_STRING_EQUAL(ld_smmask_format(&m, buf, sizeof buf), "0-2,7,255");
    char tiny[4];
    ld_smmask_format(&m, tiny, sizeof tiny);
    CU_ASSERT_STRING_EQUAL(tiny, "0-2");
}

static void test_groups_check(void) {
    side_map();
    ld_sm_groups_t g;
    char why[160];
    side_groups(&g, 8, 0, 0, 0);
    CU_ASSERT_EQUAL(ld_sm_groups_check(&g, NSMS, why, sizeof why), 0);
    ld_smmask_set(&g.sms[1], 0);   /* SM 0 is in group 0 too */
    g.count[1]++;
    CU_ASSERT_EQUAL(ld_sm_groups_check(&g, NSMS, why, sizeof why), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "SM 0 in two groups"));
    side_groups(&g, 8, 0, 0, 0);
    g.count[3] = 7;
    CU_ASSERT_EQUAL(ld_sm_groups_check(&g, NSMS, why, sizeof why), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "group 3 holds 8 SMs, the driver says 7"));
    side_groups(&g, 8, 0, 0, 0);
    CU_ASSERT_EQUAL(ld_sm_groups_check(&g, 100, why, sizeof why), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "beyond the 100 SMs"));
}

static void test_cache_format(void) {
    side_map();
    ld_sm_groups_t g, back;
    side_groups(&g, 8, 7, 8, 0);
    ld_groups_key_t k = { "GPU-0123abcd-0000-0000-0000-000000000001", 13000, NSMS, "bycount:8:0" };
    char name[256], text[16384], why[200];
    CU_ASSERT_EQUAL(ld_groups_cache_name(&k, name, sizeof name), 0);
    CU_ASSERT_STRING_EQUAL(name, "smgroups-GPU-0123abcd-0000-0000-0000-000000000001-13000-bycount_8_0.txt");
    int len = ld_groups_cache_format(&k, &g, text, sizeof text);
    CU_ASSERT_TRUE_FATAL(len > 0);
    char copy[16384];
    memcpy(copy, text, (size_t)len + 1);
    CU_ASSERT_EQUAL(ld_groups_cache_parse(copy, (size_t)len, &k, &back, why, sizeof why), 0);
    CU_ASSERT_EQUAL(back.ngroups, g.ngroups);
    for (int i = 0; i < g.ngroups; i++) {
        CU_ASSERT_EQUAL(back.count[i], g.count[i]);
        CU_ASSERT_EQUAL(memcmp(&back.sms[i], &g.sms[i], sizeof g.sms[i]), 0);
        CU_ASSERT_EQUAL(back.domain[i], -1);
    }
    /* Every flipped byte of the body is caught (checksum, or a field check). */
    int caught = 0;
    for (int i = 0; i < len - 1; i++) {
        memcpy(copy, text, (size_t)len + 1);
        copy[i] = copy[i] == 'x' ? 'y' : 'x';
        caught += ld_groups_cache_parse(copy, (size_t)len, &k, &back, why, sizeof why) != 0;
    }
    CU_ASSERT_EQUAL(caught, len - 1);
    /* Truncated; another GPU, driver, SM count or split. */
    memcpy(copy, text, (size_t)len + 1);
    CU_ASSERT_EQUAL(ld_groups_cache_parse(copy, (size_t)len - 5, &k, &back, why, sizeof why), -1);
    const char *what[] = { "other GPU", "other driver", "other SM count", "other split" };
    for (int v = 0; v < 4; v++) {
        ld_groups_key_t o = k;
        if (v == 0) o.uuid[5] = 'f';
        if (v == 1) o.driver_version = 13010;
        if (v == 2) o.num_sms = 148;
        if (v == 3) snprintf(o.split, sizeof o.split, "bycount:2:1");
        memcpy(copy, text, (size_t)len + 1);
        CU_ASSERT_EQUAL(ld_groups_cache_parse(copy, (size_t)len, &o, &back, why, sizeof why), -1);
        CU_ASSERT_PTR_NOT_NULL(strstr(why, what[v]));
    }
    /* Groups that overlap are refused even under a valid checksum. */
    ld_sm_groups_t bad = g;
    ld_smmask_set(&bad.sms[2], 0);
    bad.count[2]++;
    len = ld_groups_cache_format(&k, &bad, text, sizeof text);
    CU_ASSERT_TRUE_FATAL(len > 0);
    CU_ASSERT_EQUAL(ld_groups_cache_parse(text, (size_t)len, &k, &back, why, sizeof why), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "inconsistent"));
    /* The buffer too small for the entry. */
    CU_ASSERT_EQUAL(ld_groups_cache_format(&k, &g, text, 100), -1);
}

static void test_topology_helpers(void) {
    ldshim_topology_t t;
    memset(&t, 0, sizeof t);
    CU_ASSERT_EQUAL(ldshim_bound_sms(&t, 132), 132);   /* nothing published */
    CU_ASSERT_EQUAL(ldshim_sm_is_bound(&t, 5), 1);
    t.magic = LDSHIM_TOPOLOGY_MAGIC;
    t.version = 2;
    t.num_sms = 132;
    t.bound_sms = 132;
    CU_ASSERT_EQUAL(ldshim_bound_sms(&t, 132), 132);   /* published, not bound */
    t.flags = LDSHIM_TOPO_BOUND;
    t.bound_sms = 56;
    t.sm_bound[4] = 1;
    CU_ASSERT_EQUAL(ldshim_bound_sms(&t, 132), 56);
    CU_ASSERT_EQUAL(ldshim_sm_is_bound(&t, 4), 1);
    CU_ASSERT_EQUAL(ldshim_sm_is_bound(&t, 5), 0);
    CU_ASSERT_EQUAL(ldshim_sm_is_bound(&t, 300), 0);
    t.version = 1;   /* a version-1 symbol has no bound set */
    CU_ASSERT_EQUAL(ldshim_bound_sms(&t, 132), 132);
    CU_ASSERT_EQUAL(ldshim_sm_is_bound(&t, 5), 1);
    CU_ASSERT_EQUAL(LDSHIM_TOPOLOGY_V1_BYTES, 5 * 4 + LDSHIM_MAX_DOMAINS * 4 + LDSHIM_MAX_SMS);
}

static void register_tests(void) {
    CU_pSuite s = CU_add_suite("compute binding plan", NULL, NULL);
    CU_add_test(s, "domain:N, caps, missing and straddling groups", test_domain);
    CU_add_test(s, "backfill", test_backfill);
    CU_add_test(s, "spread:K", test_spread);
    CU_add_test(s, "driver-labelled groups", test_labels);
    CU_add_test(s, "SM masks", test_masks);
    CU_add_test(s, "measured groups' sanity", test_groups_check);
    CU_add_test(s, "SM-group cache format", test_cache_format);
    CU_add_test(s, "topology header's bound set", test_topology_helpers);
}

#include "tests/unit/cunit_main.h"
