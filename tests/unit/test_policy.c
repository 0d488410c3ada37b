/* test_policy.c — CUnit tests for policy/: every error class with its exact line:col, units,
 * boundaries, ranges, occurrences, enums, defaults, overlap detection, matching, loading,
 * and random input. Run: make test-policy (SAN=1 for ASan/UBSan). */
#include <CUnit/Basic.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "policy/policy.h"

#define F "t.policy"

static char g_err[1024];
static ld_policy_t g_pol;

/* Parse text of explicit length; returns the parser's status and keeps the policy in g_pol. */
static int parse_n(const char *text, size_t len) {
    ld_policy_free(&g_pol);
    return ld_policy_parse(text, len, F, &g_pol, g_err, sizeof g_err);
}
static int parse(const char *text) { return parse_n(text, strlen(text)); }

/* 1 if parsing fails with exactly "t.policy:<line>:<col>: " followed by a message that
 * contains `what`. Prints the difference otherwise. */
static int err_n(const char *text, size_t len, int line, int col, const char *what) {
    char prefix[64];
    if (parse_n(text, len) == 0) {
        fprintf(stderr, "\n  expected an error %d:%d '%s', parse succeeded\n", line, col, what);
        return 0;
    }
    snprintf(prefix, sizeof prefix, F ":%d:%d: ", line, col);
    if (strncmp(g_err, prefix, strlen(prefix)) != 0 || !strstr(g_err + strlen(prefix), what) ||
        strchr(g_err, '\n')) {
        fprintf(stderr, "\n  expected '%s...%s'\n  got      '%s'\n", prefix, what, g_err);
        return 0;
    }
    if (g_pol.n_rules != 0 || g_pol.rules != NULL) {
        fprintf(stderr, "\n  policy not reset after error\n");
        return 0;
    }
    return 1;
}
static int err_at(const char *text, int line, int col, const char *what) {
    return err_n(text, strlen(text), line, col, what);
}
#define EXPECT_ERR(text, line, col, what) CU_ASSERT_TRUE(err_at(text, line, col, what))
#define EXPECT_OK(text) do { int rc_ = parse(text); if (rc_) fprintf(stderr, "\n  %s\n", g_err); \
                             CU_ASSERT_EQUAL(rc_, 0); } while (0)

static const ld_rule_t *rule_named(const char *name) {
    for (int i = 0; i < g_pol.n_rules; i++)
        if (strcmp(g_pol.rules[i].name, name) == 0) return &g_pol.rules[i];
    return NULL;
}

/* ---- defaults and globals ---------------------------------------------------------------- */

static void test_defaults(void) {
    ld_policy_t p;
    memset(&p, 0xab, sizeof p);
    ld_policy_init(&p);
    CU_ASSERT_EQUAL(p.state, LD_STATE_FULL);
    CU_ASSERT_EQUAL(p.state_set, 0);
    CU_ASSERT_EQUAL(p.backend, LD_BACKEND_AUTO);
    CU_ASSERT_EQUAL(p.probe, LD_PROBE_AUTO);
    CU_ASSERT_EQUAL(p.map, LD_MAP_BALANCED);
    CU_ASSERT_EQUAL(p.topology_source, LD_TOPOLOGY_SOURCE_DRIVER);
    CU_ASSERT_EQUAL(p.strict, 0);
    CU_ASSERT_EQUAL(p.pool_cap, 4ull << 30);
    CU_ASSERT_EQUAL(p.min_split, 4ull << 20);
    CU_ASSERT_EQUAL(p.n_rules, 0);
    CU_ASSERT_PTR_NULL(p.rules);
    ld_policy_free(&p);
    ld_policy_free(&p);          /* twice is harmless */
    ld_policy_free(NULL);

    EXPECT_OK("");               /* empty file is valid */
    CU_ASSERT_EQUAL(g_pol.n_rules, 0);
    CU_ASSERT_EQUAL(g_pol.state_set, 0);
    CU_ASSERT_EQUAL(g_pol.state, LD_STATE_FULL);
    CU_ASSERT_EQUAL(g_pol.pool_cap, 4ull << 30);
    EXPECT_OK("\n\n   \n\t\n# only a comment\n   # indented comment");
    CU_ASSERT_EQUAL(g_pol.n_rules, 0);
    EXPECT_OK("[rule a]\nsize = 1MiB");     /* no trailing newline */
    const ld_rule_t *r = rule_named("a");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->api, LD_API_ANY);
    CU_ASSERT_EQUAL(r->placement, LD_PLACE_SPLIT);
    CU_ASSERT_EQUAL(r->n_occ, 0);
    CU_ASSERT_EQUAL(r->line, 1);
    CU_ASSERT_EQUAL(r->size_min, 1u << 20);
    CU_ASSERT_EQUAL(r->size_max, 1u << 20);
    /* A NULL text of length 0 is an empty file; NULL out/err are handled. */
    ld_policy_free(&g_pol);
    CU_ASSERT_EQUAL(ld_policy_parse(NULL, 0, F, &g_pol, g_err, sizeof g_err), 0);
    CU_ASSERT_EQUAL(ld_policy_parse("x", 1, F, NULL, g_err, sizeof g_err), -1);
    CU_ASSERT_EQUAL(ld_policy_parse("x = 1", 5, NULL, &g_pol, g_err, sizeof g_err), -1);
    CU_ASSERT_NSTRING_EQUAL(g_err, "<policy>:1:1: unknown key 'x'", 29);
    CU_ASSERT_EQUAL(ld_policy_parse("x = 1", 5, F, &g_pol, NULL, 0), -1);
    char tiny[8];
    CU_ASSERT_EQUAL(ld_policy_parse("x = 1", 5, F, &g_pol, tiny, sizeof tiny), -1);
    CU_ASSERT_STRING_EQUAL(tiny, "t.polic");
}

static void test_globals(void) {
    EXPECT_OK("state=mismatch\nbackend =emulated\nprobe= clustered\n  map\t=\tphysical  \n"
              "strict = on # stop on a bad file\npool = 0\nmin_split = 2MiB#no blank needed\n");
    CU_ASSERT_EQUAL(g_pol.state, LD_STATE_MISMATCH);
    CU_ASSERT_EQUAL(g_pol.state_set, 1);
    CU_ASSERT_EQUAL(g_pol.backend, LD_BACKEND_EMULATED);
    CU_ASSERT_EQUAL(g_pol.probe, LD_PROBE_CLUSTERED);
    CU_ASSERT_EQUAL(g_pol.map, LD_MAP_PHYSICAL);
    CU_ASSERT_EQUAL(g_pol.strict, 1);
    CU_ASSERT_EQUAL(g_pol.pool_cap, 0);
    CU_ASSERT_EQUAL(g_pol.min_split, 2u << 20);
    CU_ASSERT_EQUAL(g_pol.topology_source, LD_TOPOLOGY_SOURCE_DRIVER);
    EXPECT_OK("topology_source = probe\n");
    CU_ASSERT_EQUAL(g_pol.topology_source, LD_TOPOLOGY_SOURCE_PROBE);
    EXPECT_OK("topology_source = driver\n");
    CU_ASSERT_EQUAL(g_pol.topology_source, LD_TOPOLOGY_SOURCE_DRIVER);
    const char *states[] = { "stock", "memory", "full", "mismatch" };
    for (int i = 0; i < 4; i++) {
        char t[64];
        snprintf(t, sizeof t, "state = %s\n", states[i]);
        EXPECT_OK(t);
        CU_ASSERT_EQUAL(g_pol.state, (ld_state_t)i);
    }
    const char *backends[] = { "auto", "native", "mlopart", "emulated", "off" };
    for (int i = 0; i < 5; i++) {
        char t[64];
        snprintf(t, sizeof t, "backend = %s\n", backends[i]);
        EXPECT_OK(t);
        CU_ASSERT_EQUAL(g_pol.backend, (ld_backend_kind_t)i);
    }
    const char *probes[] = { "auto", "anchored", "clustered", "even", "off" };
    for (int i = 0; i < 5; i++) {
        char t[64];
        snprintf(t, sizeof t, "probe = %s\n", probes[i]);
        EXPECT_OK(t);
        CU_ASSERT_EQUAL(g_pol.probe, (ld_probe_mode_t)i);
    }
    EXPECT_OK("map = balanced\nstrict = off\n");
    CU_ASSERT_EQUAL(g_pol.map, LD_MAP_BALANCED);
    CU_ASSERT_EQUAL(g_pol.strict, 0);
}

/* ---- sizes --------------------------------------------------------------------------------- */

static int psize(const char *s, uint64_t *v) { return ld_parse_size(s, strlen(s), v); }

static void test_units(void) {
    uint64_t v = 0;
    CU_ASSERT_EQUAL(psize("4096", &v), 0);   CU_ASSERT_EQUAL(v, 4096);
    CU_ASSERT_EQUAL(psize("7B", &v), 0);     CU_ASSERT_EQUAL(v, 7);
    CU_ASSERT_EQUAL(psize("3KiB", &v), 0);   CU_ASSERT_EQUAL(v, 3ull << 10);
    CU_ASSERT_EQUAL(psize("112MiB", &v), 0); CU_ASSERT_EQUAL(v, 112ull << 20);
    CU_ASSERT_EQUAL(psize("5GiB", &v), 0);   CU_ASSERT_EQUAL(v, 5ull << 30);
    CU_ASSERT_EQUAL(psize("2TiB", &v), 0);   CU_ASSERT_EQUAL(v, 2ull << 40);
    CU_ASSERT_EQUAL(psize("007", &v), 0);    CU_ASSERT_EQUAL(v, 7);
    const char *bad[] = { "", "KiB", "1KB", "1kib", "1K", "1M", "1G", "1mib", "1 MiB", " 1",
                          "1 ", "1.5GiB", "1.", "-1", "+1", "0x10", "1MiBs", "1..2", "1MiB2" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = 99;
        CU_ASSERT_EQUAL(psize(bad[i], &v), -1);
        CU_ASSERT_EQUAL(v, 99);             /* untouched on failure */
    }
    CU_ASSERT_EQUAL(ld_parse_size(NULL, 0, &v), -1);
    CU_ASSERT_EQUAL(ld_parse_size("1", 1, NULL), -1);
    CU_ASSERT_EQUAL(ld_parse_size("12", 1, &v), 0);   /* only len bytes are read */
    CU_ASSERT_EQUAL(v, 1);

    /* Every unit in a file, and its error for the near misses. */
    EXPECT_OK("[rule a]\nsize = 1B\n[rule b]\nsize = 1KiB\n[rule c]\nsize = 1MiB\n"
              "[rule d]\nsize = 1GiB\n[rule e]\nsize = 1TiB\n[rule f]\nsize = 3\n");
    CU_ASSERT_EQUAL(rule_named("a")->size_min, 1);
    CU_ASSERT_EQUAL(rule_named("b")->size_min, 1024);
    CU_ASSERT_EQUAL(rule_named("c")->size_min, 1ull << 20);
    CU_ASSERT_EQUAL(rule_named("d")->size_min, 1ull << 30);
    CU_ASSERT_EQUAL(rule_named("e")->size_min, 1ull << 40);
    CU_ASSERT_EQUAL(rule_named("f")->size_min, 3);
    EXPECT_ERR("[rule a]\nsize = 64MB\n", 2, 10, "bad unit 'MB', expected B, KiB, MiB, GiB or TiB");
    EXPECT_ERR("[rule a]\nsize = 64mib\n", 2, 10, "bad unit 'mib'");
    EXPECT_ERR("[rule a]\nsize = 64K\n", 2, 10, "bad unit 'K'");
    EXPECT_ERR("pool = 4gb\n", 1, 9, "bad unit 'gb'");
    EXPECT_ERR("min_split = 4 MiB\n", 1, 15, "unexpected 'M' after the size");
}

static void test_size_boundaries(void) {
    uint64_t v;
    CU_ASSERT_EQUAL(psize("0", &v), 0);                       CU_ASSERT_EQUAL(v, 0);
    CU_ASSERT_EQUAL(psize("0TiB", &v), 0);                    CU_ASSERT_EQUAL(v, 0);
    CU_ASSERT_EQUAL(psize("18446744073709551615", &v), 0);    CU_ASSERT_EQUAL(v, UINT64_MAX);
    CU_ASSERT_EQUAL(psize("18446744073709551616", &v), -1);   /* max + 1 */
    CU_ASSERT_EQUAL(psize("99999999999999999999", &v), -1);
    CU_ASSERT_EQUAL(psize("18446744073709551615B", &v), 0);   CU_ASSERT_EQUAL(v, UINT64_MAX);
    CU_ASSERT_EQUAL(psize("16777215TiB", &v), 0);             CU_ASSERT_EQUAL(v, 16777215ull << 40);
    CU_ASSERT_EQUAL(psize("16777216TiB", &v), -1);            /* exactly 2^64 */
    CU_ASSERT_EQUAL(psize("17179869183GiB", &v), 0);          CU_ASSERT_EQUAL(v, 17179869183ull << 30);
    CU_ASSERT_EQUAL(psize("17179869184GiB", &v), -1);
    CU_ASSERT_EQUAL(psize("17592186044415MiB", &v), 0);
    CU_ASSERT_EQUAL(psize("17592186044416MiB", &v), -1);
    CU_ASSERT_EQUAL(psize("18014398509481983KiB", &v), 0);
    CU_ASSERT_EQUAL(psize("18014398509481984KiB", &v), -1);

    EXPECT_OK("[rule zero]\nsize = 0\n[rule all]\nsize = 1..18446744073709551615\n");
    CU_ASSERT_EQUAL(rule_named("zero")->size_max, 0);
    CU_ASSERT_EQUAL(rule_named("all")->size_max, UINT64_MAX);
    EXPECT_ERR("[rule a]\nsize = 18446744073709551616\n", 2, 8, "overflows 64 bits");
    EXPECT_ERR("[rule a]\nsize = 16777216TiB\n", 2, 8, "overflows 64 bits");
    EXPECT_ERR("[rule a]\nsize = 1MiB..16777216TiB\n", 2, 14, "overflows 64 bits");
    EXPECT_ERR("pool = 18446744073709551616\n", 1, 8, "overflows 64 bits");
    EXPECT_ERR("[rule a]\noccurrence = 18446744073709551616\n", 2, 14, "overflows 64 bits");
}

static void test_size_errors(void) {
    EXPECT_ERR("[rule a]\nsize = 1.5GiB\n", 2, 9, "sizes are whole numbers");
    EXPECT_ERR("[rule a]\nsize = abc\n", 2, 8, "bad number");
    EXPECT_ERR("[rule a]\nsize = -1\n", 2, 8, "bad number");
    EXPECT_ERR("[rule a]\nsize = ..1MiB\n", 2, 8, "bad number");
    EXPECT_ERR("[rule a]\nsize = 1MiB..\n", 2, 14, "bad number");
    EXPECT_ERR("[rule a]\nsize = 1MiB...2MiB\n", 2, 14, "bad number");
    EXPECT_ERR("[rule a]\nsize = 1MiB.2MiB\n", 2, 12, "expected '..'");
    EXPECT_ERR("[rule a]\nsize = 1MiB .. 2MiB\n", 2, 13, "unexpected '.' after the size");
    EXPECT_ERR("[rule a]\nsize = 2MiB..1MiB\n", 2, 14, "range end 1MiB is smaller than its start 2MiB");
    EXPECT_ERR("[rule a]\nsize = 1MiB 2MiB\n", 2, 13, "unexpected '2' after the size");
    EXPECT_ERR("[rule a]\nsize =\n", 2, 7, "expected a size such as 112MiB");
    EXPECT_ERR("[rule a]\nsize =   # nothing\n", 2, 10, "expected a size");
    EXPECT_ERR("pool = 1GiB..2GiB\n", 1, 12, "a range is not allowed here");
    EXPECT_ERR("min_split = 1..2\n", 1, 14, "a range is not allowed here");
}

static void test_ranges(void) {
    EXPECT_OK("[rule a]\nsize = 64MiB..1GiB\n[rule b]\nsize = 5..5\n[rule c]\nsize=0..0\n"
              "[rule d]\nsize = 2GiB..2049MiB # inclusive\n");
    CU_ASSERT_EQUAL(rule_named("a")->size_min, 64ull << 20);
    CU_ASSERT_EQUAL(rule_named("a")->size_max, 1ull << 30);
    CU_ASSERT_EQUAL(rule_named("b")->size_min, 5);
    CU_ASSERT_EQUAL(rule_named("b")->size_max, 5);
    CU_ASSERT_EQUAL(rule_named("c")->size_max, 0);
    CU_ASSERT_EQUAL(rule_named("d")->size_max, 2049ull << 20);
    EXPECT_OK("[rule a]\nsize = 1023..1KiB\n");          /* mixed units, A < B */
    CU_ASSERT_EQUAL(rule_named("a")->size_min, 1023);
    CU_ASSERT_EQUAL(rule_named("a")->size_max, 1024);
    EXPECT_ERR("[rule a]\nsize = 1025..1KiB\n", 2, 14, "range end 1KiB is smaller than its start 1025");
}

/* ---- occurrences --------------------------------------------------------------------------- */

static void test_occurrence(void) {
    EXPECT_OK("[rule a]\nsize = 1MiB\noccurrence = 1,3,5-8\n");
    const ld_rule_t *r = rule_named("a");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->n_occ, 3);
    CU_ASSERT_EQUAL(r->occ[0].first, 1); CU_ASSERT_EQUAL(r->occ[0].last, 1);
    CU_ASSERT_EQUAL(r->occ[1].first, 3); CU_ASSERT_EQUAL(r->occ[1].last, 3);
    CU_ASSERT_EQUAL(r->occ[2].first, 5); CU_ASSERT_EQUAL(r->occ[2].last, 8);
    uint64_t takes[] = { 1, 3, 5, 6, 7, 8 }, skips[] = { 0, 2, 4, 9, 100, UINT64_MAX };
    for (int i = 0; i < 6; i++) {
        CU_ASSERT_TRUE(ld_rule_takes_occurrence(r, takes[i]));
        CU_ASSERT_FALSE(ld_rule_takes_occurrence(r, skips[i]));
    }
    EXPECT_OK("[rule a]\nsize = 1MiB\noccurrence = 2 , 4 ,\t9-9 # blanks around commas\n");
    CU_ASSERT_EQUAL(rule_named("a")->n_occ, 3);
    CU_ASSERT_EQUAL(rule_named("a")->occ[2].first, 9);
    EXPECT_OK("[rule a]\nsize = 1MiB\noccurrence = 1-18446744073709551615\n");
    CU_ASSERT_TRUE(ld_rule_takes_occurrence(rule_named("a"), UINT64_MAX));
    /* Every occurrence without the key; NULL rule takes nothing. */
    EXPECT_OK("[rule a]\nsize = 1MiB\n");
    CU_ASSERT_TRUE(ld_rule_takes_occurrence(rule_named("a"), 1));
    CU_ASSERT_TRUE(ld_rule_takes_occurrence(rule_named("a"), 123456));
    CU_ASSERT_FALSE(ld_rule_takes_occurrence(NULL, 1));
    /* Exactly LD_MAX_OCC_RANGES items are fine, one more is refused at the extra item. */
    char t[256] = "[rule a]\nsize = 1\noccurrence = ";
    for (int i = 1; i <= LD_MAX_OCC_RANGES; i++) {
        char item[8];
        snprintf(item, sizeof item, i == 1 ? "%d" : ",%d", i);
        strcat(t, item);
    }
    EXPECT_OK(t);
    CU_ASSERT_EQUAL(rule_named("a")->n_occ, LD_MAX_OCC_RANGES);
    CU_ASSERT_TRUE(ld_rule_takes_occurrence(rule_named("a"), 16));
    CU_ASSERT_FALSE(ld_rule_takes_occurrence(rule_named("a"), 17));
    strcat(t, ",17\n");
    /* "occurrence = " is 13 bytes; 9 one-digit items + 7 two-digit + 15 commas = 38 bytes. */
    EXPECT_ERR(t, 3, 13 + 38 + 2, "too many occurrence items (at most 16)");
    EXPECT_ERR("[rule a]\nsize = 1\noccurrence = 0\n", 3, 14, "occurrences count from 1");
    EXPECT_ERR("[rule a]\nsize = 1\noccurrence = 3,0-2\n", 3, 16, "occurrences count from 1");
    EXPECT_ERR("[rule a]\nsize = 1\noccurrence = 5-3\n", 3, 16, "range end 3 is smaller than its start 5");
    EXPECT_ERR("[rule a]\nsize = 1\noccurrence = 1,,2\n", 3, 16, "expected an occurrence number");
    EXPECT_ERR("[rule a]\nsize = 1\noccurrence = 1,\n", 3, 16, "expected an occurrence number");
    EXPECT_ERR("[rule a]\nsize = 1\noccurrence = 1-\n", 3, 16, "bad number");
    EXPECT_ERR("[rule a]\nsize = 1\noccurrence = first\n", 3, 14, "expected an occurrence number");
    EXPECT_ERR("[rule a]\nsize = 1\noccurrence = 1;2\n", 3, 15, "unexpected ';' in occurrence list");
    EXPECT_ERR("[rule a]\nsize = 1\noccurrence = 1 2\n", 3, 16, "unexpected '2' in occurrence list");
    EXPECT_ERR("[rule a]\nsize = 1\noccurrence = 1MiB\n", 3, 15, "unexpected 'M'");
}

/* ---- enums ----------------------------------------------------------------------------------- */

static void test_enum_choices(void) {
    EXPECT_ERR("state = Full\n", 1, 9, "bad value 'Full' for state, expected stock, memory, full, mismatch, memory-only, compute-only, full-ld, mismatch-ld or sm-control");
    EXPECT_ERR("backend = cuda\n", 1, 11, "bad value 'cuda' for backend, expected auto, native, mlopart, emulated or off");
    EXPECT_ERR("probe = fast\n", 1, 9, "bad value 'fast' for probe, expected auto, anchored, clustered, even or off");
    EXPECT_ERR("map = even\n", 1, 7, "bad value 'even' for map, expected balanced or physical");
    EXPECT_ERR("topology_source = both\n", 1, 19, "bad value 'both' for topology_source, expected driver or probe");
    EXPECT_ERR("strict = yes\n", 1, 10, "bad value 'yes' for strict, expected off or on");
    EXPECT_ERR("strict = 1\n", 1, 10, "expected off or on");
    EXPECT_ERR("state = full stock\n", 1, 14, "unexpected 's' after the value");
    /* Long values are quoted to 32 bytes, never cutting a UTF-8 character in half. */
    char t[128] = "state = x";
    for (int i = 0; i < 20; i++) strcat(t, "\xc3\xa9");          /* 1 + 40 bytes */
    strcat(t, "\n");
    char want[64] = "bad value 'x";
    for (int i = 0; i < 15; i++) strcat(want, "\xc3\xa9");      /* 31 bytes: 32 would split */
    strcat(want, "' for state");
    EXPECT_ERR(t, 1, 9, want);
    EXPECT_ERR("[rule a]\nsize = 1\napi = both\n", 3, 7, "bad value 'both' for api, expected any, runtime, driver, async, vmm, pitch or managed");
    EXPECT_ERR("[rule a]\nsize = 1\napi = Runtime\n", 3, 7, "bad value 'Runtime' for api");

    EXPECT_OK("[rule a]\nsize = 1\napi = runtime\n[rule b]\nsize = 1\napi = driver\n"
              "[rule c]\nsize = 2\napi = any\n");
    CU_ASSERT_EQUAL(rule_named("a")->api, LD_API_RUNTIME);
    CU_ASSERT_EQUAL(rule_named("b")->api, LD_API_DRIVER);
    CU_ASSERT_EQUAL(rule_named("c")->api, LD_API_ANY);

    for (int d = 0; d <= 7; d++) {
        char t[96];
        snprintf(t, sizeof t, "[rule a]\nsize = 1\nplacement = domain:%d\n", d);
        EXPECT_OK(t);
        CU_ASSERT_EQUAL(rule_named("a")->placement, LD_PLACE_DOMAIN);
        CU_ASSERT_EQUAL(rule_named("a")->domain, d);
    }
    EXPECT_OK("[rule a]\nsize = 1\nplacement = stock\n[rule b]\nsize = 2\nplacement = split\n");
    CU_ASSERT_EQUAL(rule_named("a")->placement, LD_PLACE_STOCK);
    CU_ASSERT_EQUAL(rule_named("b")->placement, LD_PLACE_SPLIT);
    EXPECT_ERR("[rule a]\nsize = 1\nplacement = domain:8\n", 3, 20, "domain number out of range, expected 0..7");
    EXPECT_ERR("[rule a]\nsize = 1\nplacement = domain:10\n", 3, 20, "out of range");
    EXPECT_ERR("[rule a]\nsize = 1\nplacement = domain:\n", 3, 20, "expected a domain number 0..7");
    EXPECT_ERR("[rule a]\nsize = 1\nplacement = domain:x\n", 3, 20, "expected a domain number 0..7");
    EXPECT_ERR("[rule a]\nsize = 1\nplacement = domain\n", 3, 19, "expected ':N' after 'domain'");
    EXPECT_ERR("[rule a]\nsize = 1\nplacement = domain 1\n", 3, 19, "expected ':N' after 'domain'");
    EXPECT_ERR("[rule a]\nsize = 1\nplacement = local\n", 3, 13,
               "bad value 'local' for placement, expected split, domain:N (N in 0..7) or stock");
    EXPECT_ERR("[rule a]\nsize = 1\nplacement = Split\n", 3, 13, "bad value 'Split'");
    EXPECT_ERR("[rule a]\nsize = 1\nplacement = split:1\n", 3, 18, "unexpected ':' after the value");
    EXPECT_ERR("[rule a]\nsize = 1\nplacement = split now\n", 3, 19, "unexpected 'n' after the value");
    EXPECT_ERR("[rule a]\nsize = 1\nplacement = domain:1x\n", 3, 21, "unexpected 'x' after the value");
}

static void test_names(void) {
    CU_ASSERT_STRING_EQUAL(ld_state_name(LD_STATE_STOCK), "stock");
    CU_ASSERT_STRING_EQUAL(ld_state_name(LD_STATE_MEMORY), "memory");
    CU_ASSERT_STRING_EQUAL(ld_state_name(LD_STATE_FULL), "full");
    CU_ASSERT_STRING_EQUAL(ld_state_name(LD_STATE_MISMATCH), "mismatch");
    CU_ASSERT_STRING_EQUAL(ld_state_name((ld_state_t)9), "unknown");
    CU_ASSERT_STRING_EQUAL(ld_state_name((ld_state_t)-1), "unknown");
    CU_ASSERT_STRING_EQUAL(ld_backend_name(LD_BACKEND_AUTO), "auto");
    CU_ASSERT_STRING_EQUAL(ld_backend_name(LD_BACKEND_NATIVE), "native");
    CU_ASSERT_STRING_EQUAL(ld_backend_name(LD_BACKEND_MLOPART), "mlopart");
    CU_ASSERT_STRING_EQUAL(ld_backend_name(LD_BACKEND_EMULATED), "emulated");
    CU_ASSERT_STRING_EQUAL(ld_backend_name(LD_BACKEND_OFF), "off");
    CU_ASSERT_STRING_EQUAL(ld_backend_name((ld_backend_kind_t)5), "unknown");
    CU_ASSERT_STRING_EQUAL(ld_probe_name(LD_PROBE_AUTO), "auto");
    CU_ASSERT_STRING_EQUAL(ld_probe_name(LD_PROBE_ANCHORED), "anchored");
    CU_ASSERT_STRING_EQUAL(ld_probe_name(LD_PROBE_CLUSTERED), "clustered");
    CU_ASSERT_STRING_EQUAL(ld_probe_name(LD_PROBE_EVEN), "even");
    CU_ASSERT_STRING_EQUAL(ld_probe_name(LD_PROBE_OFF), "off");
    CU_ASSERT_STRING_EQUAL(ld_probe_name((ld_probe_mode_t)77), "unknown");
    CU_ASSERT_STRING_EQUAL(ld_map_name(LD_MAP_BALANCED), "balanced");
    CU_ASSERT_STRING_EQUAL(ld_map_name(LD_MAP_PHYSICAL), "physical");
    CU_ASSERT_STRING_EQUAL(ld_map_name((ld_map_mode_t)2), "unknown");
    CU_ASSERT_STRING_EQUAL(ld_api_name(LD_API_ANY), "any");
    CU_ASSERT_STRING_EQUAL(ld_api_name(LD_API_RUNTIME), "runtime");
    CU_ASSERT_STRING_EQUAL(ld_api_name(LD_API_DRIVER), "driver");
    CU_ASSERT_STRING_EQUAL(ld_api_name(LD_API_ASYNC), "async");
    CU_ASSERT_STRING_EQUAL(ld_api_name(LD_API_VMM), "vmm");
    CU_ASSERT_STRING_EQUAL(ld_api_name(LD_API_PITCH), "pitch");
    CU_ASSERT_STRING_EQUAL(ld_api_name(LD_API_MANAGED), "managed");
    CU_ASSERT_STRING_EQUAL(ld_api_name(LD_API_COUNT), "unknown");
    CU_ASSERT_EQUAL(ld_state_parse("stock"), LD_STATE_STOCK);
    CU_ASSERT_EQUAL(ld_state_parse("memory"), LD_STATE_MEMORY);
    CU_ASSERT_EQUAL(ld_state_parse("full"), LD_STATE_FULL);
    CU_ASSERT_EQUAL(ld_state_parse("mismatch"), LD_STATE_MISMATCH);
    CU_ASSERT_EQUAL(ld_state_parse("memory-only"), LD_STATE_MEMORY_ONLY);
    CU_ASSERT_EQUAL(ld_state_parse("compute-only"), LD_STATE_COMPUTE_ONLY);
    CU_ASSERT_EQUAL(ld_state_parse("full-ld"), LD_STATE_FULL_LD);
    CU_ASSERT_EQUAL(ld_state_parse("mismatch-ld"), LD_STATE_MISMATCH_LD);
    CU_ASSERT_EQUAL(ld_state_parse("sm-control"), LD_STATE_SM_CONTROL);
    CU_ASSERT_EQUAL(ld_state_parse("full_ld"), -1);
    CU_ASSERT_STRING_EQUAL(ld_state_name(LD_STATE_SM_CONTROL), "sm-control");
    CU_ASSERT_TRUE(ld_state_is_study(LD_STATE_FULL_LD));
    CU_ASSERT_FALSE(ld_state_is_study(LD_STATE_FULL));
    CU_ASSERT_EQUAL(ld_state_parse("Full"), -1);
    CU_ASSERT_EQUAL(ld_state_parse(" full"), -1);
    CU_ASSERT_EQUAL(ld_state_parse("ful"), -1);
    CU_ASSERT_EQUAL(ld_state_parse(""), -1);
    CU_ASSERT_EQUAL(ld_state_parse(NULL), -1);
}

/* ---- keys and lines ------------------------------------------------------------------------ */

static void test_keys(void) {
    EXPECT_ERR("colour = blue\n", 1, 1, "unknown key 'colour', expected one of: state, backend, "
               "probe, map, strict, pool, min_split");
    EXPECT_ERR("# c\n  State = full\n", 2, 3, "unknown key 'State'");
    EXPECT_ERR("min-split = 4MiB\n", 1, 1, "unknown key 'min-split'");
    EXPECT_ERR("[rule a]\nsize = 1\n\tbytes = 4\n", 3, 2,
               "unknown key 'bytes' in [rule a], expected one of: size, api, occurrence, placement");
    EXPECT_ERR("[rule a]\nSIZE = 1\n", 2, 1, "unknown key 'SIZE'");
    EXPECT_ERR("size = 1MiB\n", 1, 1, "'size' belongs in a [rule NAME] section");
    EXPECT_ERR("placement = split\n", 1, 1, "'placement' belongs in a [rule NAME] section");
    EXPECT_ERR("[rule a]\nsize = 1\n  state = full\n", 3, 3, "'state' is a global option");
    EXPECT_ERR("[rule a]\nsize = 1\npool = 1\n", 3, 1, "'pool' is a global option");
    EXPECT_ERR("state = full\nprobe = even\nstate = stock\n", 3, 1,
               "duplicate key 'state' (already set on line 1)");
    EXPECT_ERR("[rule a]\nsize = 1\napi = any\n# x\n api = runtime\n", 5, 2,
               "duplicate key 'api' (already set on line 3)");
    EXPECT_ERR("[rule a]\nsize = 1\nsize = 2\n", 3, 1, "duplicate key 'size' (already set on line 2)");
    /* The same key in two different rules is fine. */
    EXPECT_OK("[rule a]\nsize = 1\napi = driver\n[rule b]\nsize = 2\napi = driver\n");
    /* Missing '='. */
    EXPECT_ERR("state full\n", 1, 7, "expected '=' after 'state', found 'f'");
    EXPECT_ERR("state\n", 1, 6, "expected '=' after 'state'");
    EXPECT_ERR("state   \n", 1, 9, "expected '=' after 'state'");
    EXPECT_ERR("state # = full\n", 1, 7, "expected '=' after 'state'");
    EXPECT_ERR("[rule a]\nsize: 1MiB\n", 2, 5, "expected '=' after 'size', found ':'");
    EXPECT_ERR("= full\n", 1, 1, "unexpected '='; expected a key, a [rule NAME] header or '#'");
    EXPECT_ERR("  *\n", 1, 3, "unexpected '*'");
    EXPECT_ERR("state = \n", 1, 9, "expected stock, memory, full, mismatch, memory-only, compute-only, full-ld, mismatch-ld or sm-control after 'state ='");
    EXPECT_ERR("[rule a]\napi=\n", 2, 5, "expected any, runtime, driver, async, vmm, pitch or managed after 'api ='");
    /* '#' anywhere outside a value starts a comment. */
    EXPECT_OK("state = stock# comment\n[rule a] # c\nsize = 1#c\n#[rule b]\n");
    CU_ASSERT_EQUAL(g_pol.n_rules, 1);
    CU_ASSERT_EQUAL(g_pol.state, LD_STATE_STOCK);
}

static void test_sections(void) {
    EXPECT_ERR("[rules a]\n", 1, 2, "unknown section 'rules', expected [rule NAME]");
    EXPECT_ERR("state = full\n  [global]\n", 2, 4, "unknown section 'global'");
    EXPECT_ERR("[Rule a]\n", 1, 2, "unknown section 'Rule'");
    EXPECT_ERR("[]\n", 1, 2, "expected a section name");
    EXPECT_ERR("[rule]\n", 1, 6, "expected a rule name after 'rule'");
    EXPECT_ERR("[rule   ]\n", 1, 9, "expected a rule name after 'rule'");
    EXPECT_ERR("[rule\n", 1, 6, "expected a rule name after 'rule'");
    EXPECT_ERR("[rule a\n", 1, 8, "expected ']' after the rule name");
    EXPECT_ERR("[rule a b]\n", 1, 9, "expected ']' after the rule name");
    EXPECT_ERR("[rule a@b]\n", 1, 8, "invalid character '@' in a rule name");
    EXPECT_ERR("[rule @]\n", 1, 7, "invalid character '@' in a rule name");
    EXPECT_ERR("[rule a] x\n", 1, 10, "unexpected 'x' after ']'");
    EXPECT_ERR("[rule:a]\n", 1, 6, "unexpected ':'; expected a blank and a name after 'rule'");
    EXPECT_OK("[ rule a.b-c_D9 ]\nsize = 1\n");
    CU_ASSERT_PTR_NOT_NULL(rule_named("a.b-c_D9"));
    /* 63 characters are fine; the 64th is flagged. */
    char t[160], name[80];
    memset(name, 'n', 63);
    name[63] = '\0';
    snprintf(t, sizeof t, "[rule %s]\nsize = 1\n", name);
    EXPECT_OK(t);
    CU_ASSERT_PTR_NOT_NULL(rule_named(name));
    snprintf(t, sizeof t, "[rule %sX]\nsize = 1\n", name);
    EXPECT_ERR(t, 1, 7 + 63, "rule name longer than 63 characters");
    /* Duplicate rule names, at the second name. */
    EXPECT_ERR("[rule a]\nsize = 1\n\n[rule b]\nsize = 2\n[rule a]\nsize = 3\n", 6, 7,
               "duplicate rule name 'a' (first defined on line 1)");
}

static void test_empty_rule(void) {
    EXPECT_ERR("[rule a]\n", 1, 7, "empty rule 'a'");
    EXPECT_ERR("[rule a]\n# just a comment\n\n", 1, 7, "empty rule 'a'");
    EXPECT_ERR("[rule a]\nsize = 1\n  [rule   b]  \n[rule c]\nsize = 2\n", 3, 11, "empty rule 'b'");
    EXPECT_ERR("[rule a]\napi = runtime\nplacement = stock\n", 1, 7,
               "rule 'a' has no size: expected 'size = ...'");
    EXPECT_ERR("[rule a]\nsize=1\n[rule b]\noccurrence = 1\n[rule c]\nsize = 3\n", 3, 7,
               "rule 'b' has no size");
    /* The empty rule comes before an error on a later line. */
    EXPECT_ERR("[rule a]\n[rule b]\nbogus = 1\n", 1, 7, "empty rule 'a'");
    /* An error inside the rule comes first. */
    EXPECT_ERR("[rule a]\nbogus = 1\n", 2, 1, "unknown key 'bogus'");
}

static void test_too_many_rules(void) {
    size_t cap = (LD_POLICY_MAX_RULES + 2) * 40;
    char *t = malloc(cap);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    size_t n = 0;
    for (int i = 0; i < LD_POLICY_MAX_RULES; i++)
        n += (size_t)snprintf(t + n, cap - n, "[rule r%d]\nsize = %d\n", i, i);
    CU_ASSERT_EQUAL(parse_n(t, n), 0);
    CU_ASSERT_EQUAL(g_pol.n_rules, LD_POLICY_MAX_RULES);
    for (int i = 0; i < LD_POLICY_MAX_RULES; i += 97) {
        int k = ld_policy_match(&g_pol, (uint64_t)i, LD_API_RUNTIME);
        CU_ASSERT_TRUE_FATAL(k >= 0);
        CU_ASSERT_EQUAL(g_pol.rules[k].size_min, (uint64_t)i);
    }
    n += (size_t)snprintf(t + n, cap - n, "[rule extra]\nsize = 99999\n");
    CU_ASSERT_TRUE(err_n(t, n, 2 * LD_POLICY_MAX_RULES + 1, 7, "too many rules (at most 256)"));
    free(t);
}

/* ---- overlap ---------------------------------------------------------------------------------- */

static void test_overlap(void) {
    /* The example from the brief: exact size at the edge of a range. */
    EXPECT_ERR("[rule a]\nsize = 1MiB..2MiB\n\n[rule b]\nsize = 2MiB\n", 4, 7,
               "rule 'b' overlaps rule 'a' (line 1): sizes 2MiB and 1MiB..2MiB, apis any and any");
    EXPECT_ERR("[rule a]\nsize = 1MiB\n[rule b]\nsize = 1MiB\n", 3, 7, "rule 'b' overlaps rule 'a'");
    EXPECT_ERR("[rule a]\nsize = 4MiB\n[rule b]\nsize = 1MiB..1GiB\n", 3, 7,
               "sizes 1MiB..1GiB and 4MiB");
    EXPECT_ERR("[rule a]\nsize = 10..20\n[rule b]\nsize = 15..30\n", 3, 7, "sizes 15..30 and 10..20");
    EXPECT_ERR("[rule a]\nsize = 10..20\n[rule b]\nsize = 0..10\n", 3, 7, "overlaps");
    EXPECT_ERR("[rule a]\nsize = 0..100\n[rule b]\nsize = 50\n", 3, 7, "overlaps");
    /* Touching but disjoint ranges are fine. */
    EXPECT_OK("[rule a]\nsize = 10..20\n[rule b]\nsize = 21..30\n[rule c]\nsize = 0..9\n");
    /* api: any overlaps both runtime and driver; runtime and driver do not overlap. */
    EXPECT_ERR("[rule a]\nsize = 1MiB\napi = runtime\n[rule b]\nsize = 1MiB\n", 4, 7,
               "apis any and runtime");
    EXPECT_ERR("[rule a]\nsize = 1MiB\n[rule b]\nsize = 1MiB\napi = driver\n", 3, 7,
               "apis driver and any");
    EXPECT_ERR("[rule a]\nsize = 1MiB..8MiB\napi = driver\n[rule b]\nsize = 2MiB\napi = driver\n",
               4, 7, "apis driver and driver");
    EXPECT_OK("[rule a]\nsize = 1MiB..8MiB\napi = runtime\n[rule b]\nsize = 2MiB\napi = driver\n");
    CU_ASSERT_EQUAL(g_pol.n_rules, 2);
    /* Reported at the later rule, against the first rule it overlaps. */
    EXPECT_ERR("[rule a]\nsize = 1\n[rule b]\nsize = 2\n[rule c]\nsize = 3\n[rule d]\nsize = 2..3\n",
               7, 7, "rule 'd' overlaps rule 'b' (line 3)");
    /* Overlap is checked before a later error. */
    EXPECT_ERR("[rule a]\nsize = 1\n[rule b]\nsize = 1\n[rule c]\nnope = 1\n", 3, 7, "overlaps");
}

/* ---- bytes: binary, CR, size limit ------------------------------------------------------------- */

static void test_binary(void) {
    CU_ASSERT_TRUE(err_n("state = f\0ll\n", 13, 1, 10, "binary data (NUL byte)"));
    CU_ASSERT_TRUE(err_n("# ok\n\0", 6, 2, 1, "binary data"));
    CU_ASSERT_TRUE(err_n("# a NUL in a comment is binary too \0\n", 37, 1, 36, "binary data"));
    EXPECT_ERR("state = full\n\x01\x02\x03", 2, 1, "binary data (control byte 0x01)");
    EXPECT_ERR("#\x1b[31m colour\n", 1, 2, "binary data (control byte 0x1b)");
    EXPECT_ERR("\x7f" "ELF\x02\x01", 1, 1, "binary data (control byte 0x7f)");
    EXPECT_ERR("# \xff\xfe\n", 1, 3, "binary data (invalid UTF-8 byte 0xff)");
    EXPECT_ERR("# \xc0\x80 overlong NUL\n", 1, 3, "invalid UTF-8 byte 0xc0");
    EXPECT_ERR("# \xed\xa0\x80 surrogate\n", 1, 3, "invalid UTF-8 byte 0xed");
    EXPECT_ERR("# \xf4\x90\x80\x80 beyond U+10FFFF\n", 1, 3, "invalid UTF-8 byte 0xf4");
    EXPECT_ERR("# truncated \xe2\x82", 1, 13, "invalid UTF-8 byte 0xe2");
    EXPECT_ERR("# truncated \xe2\x82\n", 1, 13, "invalid UTF-8 byte 0xe2");
    EXPECT_ERR("# stray \x80\n", 1, 9, "invalid UTF-8 byte 0x80");
    /* Valid UTF-8 in comments is text. */
    EXPECT_OK("# Größe der Experten — 専門家 🙂\n[rule a] # ü\nsize = 1 # µs\n");
    /* Non-ASCII outside a comment is a syntax error at that byte. */
    EXPECT_ERR("[rule a]\nsize = 1\u00b5\n", 2, 9, "unexpected byte 0xc2 after the size");
    EXPECT_ERR("[rule \xc3\xa9]\n", 1, 7, "invalid character byte 0xc3 in a rule name");
    /* Tabs are blanks. */
    EXPECT_OK("\tstate\t=\tfull\t# tab\n");
}

static void test_crlf(void) {
    EXPECT_ERR("state = full\r\nprobe = even\r\n", 1, 13, "expected LF line endings, found CR");
    EXPECT_ERR("state = full\n\r\n", 2, 1, "expected LF line endings, found CR");
    EXPECT_ERR("# comment\r\n", 1, 10, "found CR");
    EXPECT_ERR("state = full\rprobe = even\r", 1, 13, "found CR");   /* old Mac */
    EXPECT_ERR("[rule a]\nsize = 1MiB\r\n", 2, 12, "found CR");
}

static void test_size_limit(void) {
    size_t max = LD_POLICY_MAX_BYTES;
    char *t = malloc(max + 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    /* Exactly 1 MiB of comment lines (63 '#' + '\n' each; 1 MiB / 64 lines) is accepted. */
    for (size_t i = 0; i < max; i++) t[i] = (i % 64 == 63) ? '\n' : '#';
    CU_ASSERT_EQUAL(parse_n(t, max), 0);
    /* One byte more is refused, pointing at that byte: line 16385, column 1. */
    t[max] = '#';
    CU_ASSERT_TRUE(err_n(t, max + 1, (int)(max / 64) + 1, 1, "file larger than 1 MiB"));
    /* The limit wins over an error further into the file. */
    t[max + 1] = '\0';
    t[max - 10] = '\0';
    CU_ASSERT_TRUE(err_n(t, max + 2, (int)(max / 64) + 1, 1, "file larger than 1 MiB"));
    free(t);
}

/* ---- loading ------------------------------------------------------------------------------------ */

static char g_dir[64];

static void write_file(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fwrite(data, 1, len, f), len);
    fclose(f);
}

static void test_load(void) {
    char path[160], want[320];
    ld_policy_t p;
    snprintf(g_dir, sizeof g_dir, "/tmp/ldshim_test_policy.XXXXXX");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(g_dir));

    snprintf(path, sizeof path, "%s/missing.policy", g_dir);
    CU_ASSERT_EQUAL(ld_policy_load(path, &p, g_err, sizeof g_err), -1);
    snprintf(want, sizeof want, "%s:0:0: cannot open: %s", path, strerror(ENOENT));
    CU_ASSERT_STRING_EQUAL(g_err, want);
    CU_ASSERT_EQUAL(p.n_rules, 0);
    CU_ASSERT_PTR_NULL(p.rules);
    ld_policy_free(&p);

    CU_ASSERT_EQUAL(ld_policy_load(g_dir, &p, g_err, sizeof g_err), -1);   /* a directory */
    snprintf(want, sizeof want, "%s:0:0: cannot open: a directory, not a regular file", g_dir);
    CU_ASSERT_STRING_EQUAL(g_err, want);

    /* open() succeeds, read() fails: /proc/self/mem at offset 0 is unmapped (EIO). */
    CU_ASSERT_EQUAL(ld_policy_load("/proc/self/mem", &p, g_err, sizeof g_err), -1);
    snprintf(want, sizeof want, "/proc/self/mem:0:0: cannot read: %s", strerror(EIO));
    CU_ASSERT_STRING_EQUAL(g_err, want);

    snprintf(path, sizeof path, "%s/good.policy", g_dir);
    const char *good = "state = memory\n[rule w]\nsize = 64MiB..128MiB\napi = runtime\n";
    write_file(path, good, strlen(good));
    CU_ASSERT_EQUAL_FATAL(ld_policy_load(path, &p, g_err, sizeof g_err), 0);
    CU_ASSERT_EQUAL(p.state, LD_STATE_MEMORY);
    CU_ASSERT_EQUAL(p.n_rules, 1);
    CU_ASSERT_EQUAL(ld_policy_match(&p, 100u << 20, LD_API_RUNTIME), 0);
    ld_policy_free(&p);

    /* Unreadable: permissions only bind a non-root user; as root the file must load. */
    CU_ASSERT_EQUAL(chmod(path, 0), 0);
    int rc = ld_policy_load(path, &p, g_err, sizeof g_err);
    if (geteuid() != 0) {
        CU_ASSERT_EQUAL(rc, -1);
        snprintf(want, sizeof want, "%s:0:0: cannot open: %s", path, strerror(EACCES));
        CU_ASSERT_STRING_EQUAL(g_err, want);
    } else {
        CU_ASSERT_EQUAL(rc, 0);
    }
    ld_policy_free(&p);

    /* Errors inside a loaded file name the path. */
    snprintf(path, sizeof path, "%s/bad.policy", g_dir);
    write_file(path, "state = full\r\n", 14);
    CU_ASSERT_EQUAL(ld_policy_load(path, &p, g_err, sizeof g_err), -1);
    snprintf(want, sizeof want, "%s:1:13: expected LF line endings, found CR", path);
    CU_ASSERT_STRING_EQUAL(g_err, want);

    snprintf(path, sizeof path, "%s/big.policy", g_dir);
    size_t big = (size_t)LD_POLICY_MAX_BYTES * 2;
    char *b = malloc(big);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    memset(b, '\n', big);
    write_file(path, b, big);
    free(b);
    CU_ASSERT_EQUAL(ld_policy_load(path, &p, g_err, sizeof g_err), -1);
    /* Refused by its size before a byte is read. */
    snprintf(want, sizeof want, "%s:0:0: file larger than 1 MiB (%zu bytes", path, big);
    CU_ASSERT_NSTRING_EQUAL(g_err, want, strlen(want));

    snprintf(path, sizeof path, "%s/empty.policy", g_dir);
    write_file(path, "", 0);
    CU_ASSERT_EQUAL(ld_policy_load(path, &p, g_err, sizeof g_err), 0);
    CU_ASSERT_EQUAL(p.n_rules, 0);
    CU_ASSERT_EQUAL(ld_policy_load(NULL, &p, g_err, sizeof g_err), -1);
    CU_ASSERT_EQUAL(ld_policy_load("policy/examples/moe.policy", &p, g_err, sizeof g_err), 0);
    if (p.n_rules == 0) fprintf(stderr, "\n  moe.policy: %s\n", g_err);
    CU_ASSERT_EQUAL(p.n_rules, 4);
    ld_policy_free(&p);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    CU_ASSERT_EQUAL(system(cmd), 0);
}

/* Special files: nothing blocks, nothing is read that is not a regular file, and a huge
 * file costs one fstat. A hang fails the test through alarm(). */
static void test_load_special(void) {
    char dir[] = "/tmp/ldshim_test_special.XXXXXX", path[160], want[320];
    ld_policy_t p;
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    alarm(20);
    snprintf(path, sizeof path, "%s/fifo", dir);
    CU_ASSERT_EQUAL_FATAL(mkfifo(path, 0600), 0);
    CU_ASSERT_EQUAL(ld_policy_load(path, &p, g_err, sizeof g_err), -1);   /* no writer: would block */
    snprintf(want, sizeof want, "%s:0:0: cannot open: a FIFO, not a regular file", path);
    CU_ASSERT_STRING_EQUAL(g_err, want);
    CU_ASSERT_EQUAL(p.strict, 0);

    CU_ASSERT_EQUAL(ld_policy_load("/dev/zero", &p, g_err, sizeof g_err), -1);   /* endless */
    CU_ASSERT_STRING_EQUAL(g_err, "/dev/zero:0:0: cannot open: a character device, not a regular file");
    snprintf(path, sizeof path, "%s/zero-link", dir);
    CU_ASSERT_EQUAL(symlink("/dev/zero", path), 0);
    CU_ASSERT_EQUAL(ld_policy_load(path, &p, g_err, sizeof g_err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(g_err, "a character device, not a regular file"));

    /* A sparse 4 GiB file: refused by its size, in far less time than reading it. */
    snprintf(path, sizeof path, "%s/sparse", dir);
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL(ftruncate(fd, (off_t)4 << 30), 0);
    close(fd);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CU_ASSERT_EQUAL(ld_policy_load(path, &p, g_err, sizeof g_err), -1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    CU_ASSERT(ms < 50.0);
    CU_ASSERT_PTR_NOT_NULL(strstr(g_err, "file larger than 1 MiB (4294967296 bytes; the limit is 1048576 bytes)"));
    alarm(0);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CU_ASSERT_EQUAL(system(cmd), 0);
}

/* `strict` of a file that fails to parse comes from the parser: a valid `strict = on` line
 * of the global section, before or after the error, and nothing else. */
static int strict_of(const char *text) {
    ld_policy_t p;
    char err[512];
    int rc = ld_policy_parse(text, strlen(text), F, &p, err, sizeof err);
    int s = p.strict;
    ld_policy_free(&p);
    return rc == 0 ? -1 : s;   /* -1: it parsed (not what these cases are about) */
}

static void test_strict_of_bad_file(void) {
    CU_ASSERT_EQUAL(strict_of("strict = on\nstate = bogus\n"), 1);             /* before the error */
    CU_ASSERT_EQUAL(strict_of("state = bogus\nstrict = on\n"), 1);             /* after it */
    CU_ASSERT_EQUAL(strict_of("colour = blue\n  strict\t=  on   # yes\n"), 1);
    CU_ASSERT_EQUAL(strict_of("strict = on\n[rule a]\nsize = 1\nbogus = 1\n"), 1);   /* error in a rule */
    CU_ASSERT_EQUAL(strict_of("strict = off\nstate = bogus\n"), 0);
    CU_ASSERT_EQUAL(strict_of("state = bogus\n"), 0);
    CU_ASSERT_EQUAL(strict_of("strict = on_purpose\n"), 0);                     /* not the word on */
    CU_ASSERT_EQUAL(strict_of("strict = on purpose\n"), 0);
    CU_ASSERT_EQUAL(strict_of("bogus\nstrict = on_purpose\n"), 0);
    CU_ASSERT_EQUAL(strict_of("bogus\n#strict = on\n"), 0);
    CU_ASSERT_EQUAL(strict_of("bogus\nstrict = on # strict = on\n"), 1);
    /* A comment longer than any fixed-size chunk still is one comment. */
    char t[600];
    snprintf(t, sizeof t, "# %0253d strict = on\nbogus\n", 0);
    CU_ASSERT_EQUAL(strict_of(t), 0);
    snprintf(t, sizeof t, "bogus\n# %0400d\nstrict = on\n", 0);
    CU_ASSERT_EQUAL(strict_of(t), 1);
    /* Only the global section sets strict; a header ends it. */
    CU_ASSERT_EQUAL(strict_of("bogus\n[rule a]\nsize = 1\nstrict = on\n"), 0);
    CU_ASSERT_EQUAL(strict_of("[rule a]\nsize = 1\nstrict = on\n"), 0);
    CU_ASSERT_EQUAL(strict_of("[rule a!]\nstrict = on\n"), 0);
    /* A duplicate is an error in a good file, so it does not count here either. */
    CU_ASSERT_EQUAL(strict_of("strict = off\nbogus\nstrict = on\n"), 0);
    CU_ASSERT_EQUAL(strict_of("bogus\nstrict = on\nstrict = off\n"), 1);
    /* Bad bytes on a later line do not hide a good one. */
    CU_ASSERT_EQUAL(strict_of("bogus\nx\r\nstrict = on\n"), 1);
    /* The error message is the first error's, untouched by the read-on. */
    ld_policy_t p;
    char err[512];
    CU_ASSERT_EQUAL(ld_policy_parse("state = bogus\ncolour = x\nstrict = on\n", 38, F, &p, err, sizeof err), -1);
    CU_ASSERT_NSTRING_EQUAL(err, F ":1:9: bad value 'bogus'", 23);
    CU_ASSERT_EQUAL(p.strict, 1);
    CU_ASSERT_EQUAL(p.n_rules, 0);
    CU_ASSERT_PTR_NULL(p.rules);
}

/* ---- matching -------------------------------------------------------------------------------------- */

static void test_match(void) {
    EXPECT_OK("[rule exact]\nsize = 112MiB\n"
              "[rule rng]\nsize = 1GiB..2GiB\napi = runtime\n"
              "[rule drv]\nsize = 1GiB..4GiB\napi = driver\n"
              "[rule zero]\nsize = 0\napi = driver\n"
              "[rule top]\nsize = 18446744073709551615\n");
    int ex = ld_policy_match(&g_pol, 112u << 20, LD_API_RUNTIME);
    CU_ASSERT_TRUE_FATAL(ex >= 0);
    CU_ASSERT_STRING_EQUAL(g_pol.rules[ex].name, "exact");
    CU_ASSERT_EQUAL(ld_policy_match(&g_pol, 112u << 20, LD_API_DRIVER), ex);
    CU_ASSERT_EQUAL(ld_policy_match(&g_pol, 112u << 20, LD_API_ANY), ex);
    CU_ASSERT_EQUAL(ld_policy_match(&g_pol, (112u << 20) - 1, LD_API_RUNTIME), -1);
    CU_ASSERT_EQUAL(ld_policy_match(&g_pol, (112u << 20) + 1, LD_API_RUNTIME), -1);

    int rg = ld_policy_match(&g_pol, 1ull << 30, LD_API_RUNTIME);
    CU_ASSERT_TRUE_FATAL(rg >= 0);
    CU_ASSERT_STRING_EQUAL(g_pol.rules[rg].name, "rng");
    CU_ASSERT_EQUAL(ld_policy_match(&g_pol, 2ull << 30, LD_API_RUNTIME), rg);
    CU_ASSERT_EQUAL(ld_policy_match(&g_pol, (2ull << 30) + 1, LD_API_RUNTIME), -1);
    CU_ASSERT_EQUAL(ld_policy_match(&g_pol, (1ull << 30) - 1, LD_API_RUNTIME), -1);
    int dv = ld_policy_match(&g_pol, 1ull << 30, LD_API_DRIVER);
    CU_ASSERT_TRUE_FATAL(dv >= 0);
    CU_ASSERT_STRING_EQUAL(g_pol.rules[dv].name, "drv");
    CU_ASSERT_EQUAL(ld_policy_match(&g_pol, 3ull << 30, LD_API_DRIVER), dv);
    CU_ASSERT_EQUAL(ld_policy_match(&g_pol, 3ull << 30, LD_API_RUNTIME), -1);
    /* Origin unknown: runtime wins where both hold the size, driver elsewhere. */
    CU_ASSERT_EQUAL(ld_policy_match(&g_pol, 1ull << 30, LD_API_ANY), rg);
    CU_ASSERT_EQUAL(ld_policy_match(&g_pol, 3ull << 30, LD_API_ANY), dv);

    int z = ld_policy_match(&g_pol, 0, LD_API_DRIVER);
    CU_ASSERT_TRUE_FATAL(z >= 0);
    CU_ASSERT_STRING_EQUAL(g_pol.rules[z].name, "zero");
    CU_ASSERT_EQUAL(ld_policy_match(&g_pol, 0, LD_API_RUNTIME), -1);
    int tp = ld_policy_match(&g_pol, UINT64_MAX, LD_API_RUNTIME);
    CU_ASSERT_TRUE_FATAL(tp >= 0);
    CU_ASSERT_STRING_EQUAL(g_pol.rules[tp].name, "top");
    CU_ASSERT_EQUAL(ld_policy_match(&g_pol, UINT64_MAX - 1, LD_API_RUNTIME), -1);
    /* Bad arguments. */
    CU_ASSERT_EQUAL(ld_policy_match(&g_pol, 112u << 20, LD_API_COUNT), -1);
    CU_ASSERT_EQUAL(ld_policy_match(&g_pol, 112u << 20, (ld_api_t)-1), -1);
    CU_ASSERT_EQUAL(ld_policy_match(NULL, 1, LD_API_ANY), -1);
    /* Rules are sorted by (api, size_min); line keeps the file position. */
    for (int i = 1; i < g_pol.n_rules; i++) {
        const ld_rule_t *a = &g_pol.rules[i - 1], *b = &g_pol.rules[i];
        CU_ASSERT_TRUE(a->api < b->api || (a->api == b->api && a->size_min < b->size_min));
    }
    CU_ASSERT_EQUAL(rule_named("exact")->line, 1);
    CU_ASSERT_EQUAL(rule_named("top")->line, 12);
    /* An empty policy matches nothing. */
    EXPECT_OK("");
    CU_ASSERT_EQUAL(ld_policy_match(&g_pol, 0, LD_API_ANY), -1);
    CU_ASSERT_EQUAL(ld_policy_match(&g_pol, 1u << 20, LD_API_RUNTIME), -1);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {       /* xorshift64*: deterministic across runs */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

static int brute(const ld_policy_t *p, uint64_t size, ld_api_t api) {
    for (int i = 0; i < p->n_rules; i++) {
        const ld_rule_t *r = &p->rules[i];
        if ((r->api == LD_API_ANY || r->api == api) && r->size_min <= size && size <= r->size_max)
            return i;
    }
    return -1;
}

/* Many generated rules: binary search agrees with a scan at every edge. */
static void test_match_many(void) {
    for (int round = 0; round < 20; round++) {
        size_t cap = 64 * 1024, n = 0;
        char *t = malloc(cap);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        uint64_t next[3] = { 0, 0, 0 };   /* per api: any, runtime, driver */
        int nr = 0;
        for (int i = 0; i < LD_POLICY_MAX_RULES; i++) {
            int api = (int)(rnd() % 3);
            /* any rules must avoid both other groups: keep them in their own band. */
            uint64_t base = api == 0 ? (1ull << 40) : 0;
            uint64_t lo = base + next[api] + rnd() % 5000;
            uint64_t hi = lo + (rnd() % 3 ? rnd() % 4000 : 0);
            next[api] = hi + 1 - base;
            n += (size_t)snprintf(t + n, cap - n, "[rule r%d]\nsize = %llu..%llu\napi = %s\n", i,
                                  (unsigned long long)lo, (unsigned long long)hi,
                                  ld_api_name((ld_api_t)api));
            nr++;
        }
        int rc = parse_n(t, n);
        if (rc) fprintf(stderr, "\n  %s\n", g_err);
        CU_ASSERT_EQUAL_FATAL(rc, 0);
        CU_ASSERT_EQUAL(g_pol.n_rules, nr);
        int bad = 0;
        for (int i = 0; i < g_pol.n_rules; i++) {
            const ld_rule_t *r = &g_pol.rules[i];
            uint64_t pts[4] = { r->size_min, r->size_max, r->size_min - 1, r->size_max + 1 };
            for (int k = 0; k < 4; k++)
                for (int a = 1; a <= 2; a++)
                    if (ld_policy_match(&g_pol, pts[k], (ld_api_t)a) != brute(&g_pol, pts[k], (ld_api_t)a))
                        bad++;
        }
        for (int k = 0; k < 2000; k++) {
            uint64_t s = rnd() % 3 ? rnd() % 2000000 : (1ull << 40) + rnd() % 2000000;
            for (int a = 1; a <= 2; a++)
                if (ld_policy_match(&g_pol, s, (ld_api_t)a) != brute(&g_pol, s, (ld_api_t)a)) bad++;
        }
        CU_ASSERT_EQUAL(bad, 0);
        free(t);
    }
}

/* A hand-built policy matches correctly after ld_policy_sort. */
static void test_sort_hand_built(void) {
    ld_policy_t p;
    ld_policy_init(&p);
    p.rules = calloc(3, sizeof *p.rules);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p.rules);
    p.n_rules = 3;
    const uint64_t lo[3] = { 300, 100, 200 };
    const ld_api_t api[3] = { LD_API_RUNTIME, LD_API_RUNTIME, LD_API_ANY };
    for (int i = 0; i < 3; i++) {
        snprintf(p.rules[i].name, sizeof p.rules[i].name, "h%d", i);
        p.rules[i].size_min = lo[i];
        p.rules[i].size_max = lo[i] + 50;
        p.rules[i].api = api[i];
    }
    ld_policy_sort(&p);
    CU_ASSERT_STRING_EQUAL(p.rules[0].name, "h2");
    CU_ASSERT_STRING_EQUAL(p.rules[1].name, "h1");
    CU_ASSERT_STRING_EQUAL(p.rules[2].name, "h0");
    CU_ASSERT_EQUAL(ld_policy_match(&p, 120, LD_API_RUNTIME), 1);
    CU_ASSERT_EQUAL(ld_policy_match(&p, 350, LD_API_RUNTIME), 2);
    CU_ASSERT_EQUAL(ld_policy_match(&p, 250, LD_API_DRIVER), 0);
    CU_ASSERT_EQUAL(ld_policy_match(&p, 120, LD_API_DRIVER), -1);
    ld_policy_sort(NULL);
    ld_policy_free(&p);
    CU_ASSERT_PTR_NULL(p.rules);
}

/* ---- random input ------------------------------------------------------------------------------------ */

/* Every random input either parses or yields one well-formed message; never crashes. */
static int check_random(const char *t, size_t n) {
    int rc = parse_n(t, n);
    if (rc == 0) return 1;
    return strncmp(g_err, F ":", strlen(F ":")) == 0 && !strchr(g_err, '\n') &&
           g_pol.n_rules == 0 && g_pol.rules == NULL;
}

static void test_random_garbage(void) {
    static const char alpha[] = "[]=#.,-: \t\nrulesizapocntdmB0123456789KMGTi";
    static const char *frags[] = { "[rule ", "]", "\n", "size", "api", " = ", "..", "MiB",
                                   "occurrence", "placement", "domain:", "1", "18446744073709551616",
                                   "state", "full", "#", ",", "-", "\r", "any", "split", "x" };
    char buf[512];
    int bad = 0;
    for (int i = 0; i < 20000; i++) {
        size_t n = rnd() % sizeof buf;
        int mode = i % 3;
        for (size_t k = 0; k < n;) {
            if (mode == 0) buf[k++] = (char)(rnd() & 0xff);
            else if (mode == 1) buf[k++] = alpha[rnd() % (sizeof alpha - 1)];
            else {
                const char *f = frags[rnd() % (sizeof frags / sizeof frags[0])];
                size_t fl = strlen(f);
                for (size_t j = 0; j < fl && k < n; j++) buf[k++] = f[j];
            }
        }
        if (!check_random(buf, n)) bad++;
    }
    /* Single-byte mutations of a valid policy. */
    const char *good = "state = full\npool = 4GiB\n[rule a]\nsize = 1MiB..2MiB\napi = runtime\n"
                       "occurrence = 1,3-4\nplacement = domain:1\n[rule b]\nsize = 8MiB\n";
    size_t gl = strlen(good);
    for (int i = 0; i < 20000; i++) {
        memcpy(buf, good, gl);
        buf[rnd() % gl] = (char)(rnd() & 0xff);
        if (!check_random(buf, gl)) bad++;
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* ---- the ldshim-policy tool ------------------------------------------------------------------ */

/* Run the tool with `args` (shell words) under `timeout 20`, so a tool that blocks fails the
 * check with 124; capture stdout+stderr into out; return the exit status. */
static int run_cli(const char *args, char *out, size_t n) {
    const char *cli = getenv("LDSHIM_POLICY_CLI");
    char cmd[900];
    out[0] = '\0';
    if (!cli) {
        fprintf(stderr, "\n  LDSHIM_POLICY_CLI is not set (run through make test-policy)\n");
        return -1;
    }
    snprintf(cmd, sizeof cmd, "timeout 20 '%s' %s 2>&1", cli, args);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t used = fread(out, 1, n - 1, f);
    out[used] = '\0';
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}


/* ---- compute placement ------------------------------------------------------------------- */

static void test_compute(void) {
    EXPECT_OK("state = full\n");
    CU_ASSERT_EQUAL(g_pol.compute.kind, LD_COMPUTE_ALL);
    CU_ASSERT_EQUAL(g_pol.compute_split, LD_SPLIT_ALIGNED);
    CU_ASSERT_EQUAL(g_pol.compute_sms, 0);
    EXPECT_OK("compute = domain:1\ncompute_split = fine\ncompute_sms = 56\n");
    CU_ASSERT_EQUAL(g_pol.compute.kind, LD_COMPUTE_DOMAIN);
    CU_ASSERT_EQUAL(g_pol.compute.domain, 1);
    CU_ASSERT_EQUAL(g_pol.compute_split, LD_SPLIT_FINE);
    CU_ASSERT_EQUAL(g_pol.compute_sms, 56);
    EXPECT_OK("compute = spread:64   # the SM-count control\ncompute_split = backfill\n");
    CU_ASSERT_EQUAL(g_pol.compute.kind, LD_COMPUTE_SPREAD);
    CU_ASSERT_EQUAL(g_pol.compute.sms, 64);
    CU_ASSERT_EQUAL(g_pol.compute_split, LD_SPLIT_BACKFILL);
    EXPECT_OK("compute = all\ncompute_sms = 0\n");
    CU_ASSERT_EQUAL(g_pol.compute.kind, LD_COMPUTE_ALL);
    EXPECT_OK("compute = spread:256\n");
    CU_ASSERT_EQUAL(g_pol.compute.sms, 256);

    EXPECT_ERR("compute = domain:8\n", 1, 18, "expected a domain number 0..7 after 'domain:'");
    EXPECT_ERR("compute = domain\n", 1, 17, "expected ':N' after 'domain'");
    EXPECT_ERR("compute = domain:\n", 1, 18, "expected a domain number 0..7");
    EXPECT_ERR("compute = domain:1x\n", 1, 19, "unexpected 'x' after the domain number");
    EXPECT_ERR("compute = spread:0\n", 1, 18, "expected an SM count 1..256 after 'spread:'");
    EXPECT_ERR("compute = spread:257\n", 1, 18, "expected an SM count 1..256");
    EXPECT_ERR("compute = cores:4\n", 1, 11, "bad value 'cores:4' for compute, expected all, domain:N");
    EXPECT_ERR("compute = Domain:0\n", 1, 11, "bad value 'Domain:0' for compute");
    EXPECT_ERR("compute = domain:0 spread:4\n", 1, 20, "unexpected 's' after the value");
    EXPECT_ERR("compute =\n", 1, 10, "expected all, domain:N or spread:K after 'compute ='");
    EXPECT_ERR("compute_split = coarse\n", 1, 17, "bad value 'coarse' for compute_split, expected aligned, fine or backfill");
    EXPECT_ERR("compute_sms = 257\n", 1, 15, "compute_sms 257 is more SMs than any GPU has");
    EXPECT_ERR("compute_sms = 5x\n", 1, 16, "unexpected 'x' after the SM count");
    EXPECT_ERR("compute = all\ncompute = all\n", 2, 1, "duplicate key 'compute' (already set on line 1)");
    EXPECT_ERR("[rule a]\nsize = 1MiB\ncompute = all\n", 3, 1, "'compute' is a global option");

    /* The value parser LDSHIM_COMPUTE uses, and its formatter. */
    ld_compute_t c;
    size_t bad = 0;
    char why[160], buf[32];
    CU_ASSERT_EQUAL(ld_compute_scan("domain:3", 8, &c, &bad, why, sizeof why), 0);
    CU_ASSERT_STRING_EQUAL(ld_compute_format(&c, buf, sizeof buf), "domain:3");
    CU_ASSERT_EQUAL(ld_compute_scan("spread:12", 9, &c, &bad, why, sizeof why), 0);
    CU_ASSERT_STRING_EQUAL(ld_compute_format(&c, buf, sizeof buf), "spread:12");
    CU_ASSERT_EQUAL(ld_compute_scan("all", 3, &c, &bad, why, sizeof why), 0);
    CU_ASSERT_STRING_EQUAL(ld_compute_format(&c, buf, sizeof buf), "all");
    CU_ASSERT_EQUAL(ld_compute_scan("allx", 4, &c, &bad, why, sizeof why), -1);
    CU_ASSERT_EQUAL(ld_compute_scan("", 0, &c, &bad, why, sizeof why), -1);
    CU_ASSERT_EQUAL(ld_split_parse("backfill"), LD_SPLIT_BACKFILL);
    CU_ASSERT_EQUAL(ld_split_parse("Fine"), -1);
    CU_ASSERT_STRING_EQUAL(ld_split_name(LD_SPLIT_FINE), "fine");
}


/* ---- study states, `domain`, the allocation apis ------------------------------------------ */

static void test_study(void) {
    EXPECT_OK("state = full-ld\ndomain = 1\n");
    CU_ASSERT_EQUAL(g_pol.state, LD_STATE_FULL_LD);
    CU_ASSERT_EQUAL(g_pol.domain, 1);
    CU_ASSERT_TRUE(g_pol.domain_set);
    EXPECT_OK("state = sm-control\n");
    CU_ASSERT_EQUAL(g_pol.domain, 0);
    CU_ASSERT_FALSE(g_pol.domain_set);
    EXPECT_ERR("domain = 8\n", 1, 10, "domain 8 out of range, expected 0..7");
    EXPECT_ERR("domain = x\n", 1, 10, "bad number");
    EXPECT_ERR("domain = 1 2\n", 1, 12, "unexpected '2' after the domain number");
    EXPECT_ERR("[rule a]\nsize = 1\ndomain = 0\n", 3, 1, "'domain' is a global option");
    /* Rules per allocation api: `any` matches every api; one api's rule matches only it. */
    EXPECT_OK("[rule v]\nsize = 2MiB..1GiB\napi = vmm\nplacement = domain:1\n"
              "[rule a]\nsize = 2MiB..1GiB\napi = async\n"
              "[rule m]\nsize = 1MiB\napi = managed\n"
              "[rule p]\nsize = 1MiB\napi = pitch\n"
              "[rule all]\nsize = 4GiB..8GiB\n");
    int v = ld_policy_match(&g_pol, 64u << 20, LD_API_VMM), a = ld_policy_match(&g_pol, 64u << 20, LD_API_ASYNC);
    CU_ASSERT_TRUE_FATAL(v >= 0 && a >= 0);
    CU_ASSERT_STRING_EQUAL(g_pol.rules[v].name, "v");
    CU_ASSERT_EQUAL(g_pol.rules[v].placement, LD_PLACE_DOMAIN);
    CU_ASSERT_STRING_EQUAL(g_pol.rules[a].name, "a");
    CU_ASSERT_EQUAL(ld_policy_match(&g_pol, 64u << 20, LD_API_RUNTIME), -1);
    CU_ASSERT_EQUAL(ld_policy_match(&g_pol, 64u << 20, LD_API_DRIVER), -1);
    int m = ld_policy_match(&g_pol, 1u << 20, LD_API_MANAGED), p = ld_policy_match(&g_pol, 1u << 20, LD_API_PITCH);
    CU_ASSERT_TRUE_FATAL(m >= 0 && p >= 0);
    CU_ASSERT_STRING_EQUAL(g_pol.rules[m].name, "m");
    CU_ASSERT_STRING_EQUAL(g_pol.rules[p].name, "p");
    for (int api = LD_API_RUNTIME; api < LD_API_COUNT; api++) {
        int x = ld_policy_match(&g_pol, 5ull << 30, (ld_api_t)api);
        CU_ASSERT_TRUE_FATAL(x >= 0);
        CU_ASSERT_STRING_EQUAL(g_pol.rules[x].name, "all");
    }
    /* Origin unknown: the api groups in enum order. */
    int u = ld_policy_match(&g_pol, 1u << 20, LD_API_ANY);
    CU_ASSERT_TRUE_FATAL(u >= 0);
    CU_ASSERT_STRING_EQUAL(g_pol.rules[u].name, "p");
    /* `any` overlaps a rule of any api; two apis do not overlap each other. */
    EXPECT_ERR("[rule v]\nsize = 1MiB\napi = vmm\n[rule x]\nsize = 1MiB\n", 4, 7, "overlaps rule 'v'");
    EXPECT_OK("[rule v]\nsize = 1MiB\napi = vmm\n[rule x]\nsize = 1MiB\napi = async\n");
}

static void test_cli(void) {
    char out[4096];
    CU_ASSERT_EQUAL(run_cli("--help", out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "usage: ldshim-policy check FILE..."));
    /* The message format --help shows is the one `check` prints (issue 41). */
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "'ldshim: error: policy: FILE:LINE:COL: what was expected'"));
    {
        /* A file name with an escape sequence and a newline: shown as \xNN, never raw. */
        char dir[] = "/tmp/ldshim_cli_esc.XXXXXX", path[128], args[300];
        CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
        snprintf(path, sizeof path, "%s/a\033[31mred\nx.policy", dir);
        FILE *f = fopen(path, "w");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        fputs("bogus = 1\n", f);
        fclose(f);
        snprintf(args, sizeof args, "check '%s'", path);
        CU_ASSERT_EQUAL(run_cli(args, out, sizeof out), 1);
        CU_ASSERT_PTR_NULL(strchr(out, '\033'));
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "a\\x1b[31mred\\x0ax.policy:1:1: unknown key 'bogus'"));
        CU_ASSERT_EQUAL(unlink(path), 0);
        CU_ASSERT_EQUAL(rmdir(dir), 0);
    }
    CU_ASSERT_EQUAL(run_cli("", out, sizeof out), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "usage:"));
    CU_ASSERT_EQUAL(run_cli("frobnicate x", out, sizeof out), 2);

    CU_ASSERT_EQUAL(run_cli("check policy/examples/moe.policy", out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "policy/examples/moe.policy: ok, 4 rules\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "state full, backend auto, probe auto, map balanced, "
                                       "strict off, pool 4GiB, min_split 4MiB"));
    /* File order, whatever order the matcher keeps. */
    const char *a = strstr(out, "rule experts_up (line 22): size 896MiB, api any, occurrence all, "
                                "placement split");
    const char *b = strstr(out, "rule experts_down (line 29): size 448MiB, api runtime, "
                                "occurrence 1-32, placement split");
    const char *c = strstr(out, "rule router (line 36): size 16MiB..17MiB, api runtime, "
                                "occurrence all, placement domain:0");
    CU_ASSERT_TRUE(a && b && c && a < b && b < c);

    char dir[] = "/tmp/ldshim_cli.XXXXXX", path[128], args[256], want[256];
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/crlf.policy", dir);
    write_file(path, "state = full\r\n", 14);
    snprintf(args, sizeof args, "check policy/examples/moe.policy '%s'", path);
    CU_ASSERT_EQUAL(run_cli(args, out, sizeof out), 1);
    snprintf(want, sizeof want, "ldshim: error: policy: %s:1:13: expected LF line endings, found CR\n", path);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "moe.policy: ok"));   /* the good file is still checked */
    snprintf(path, sizeof path, "%s/none.policy", dir);
    snprintf(args, sizeof args, "match '%s' 1MiB", path);
    CU_ASSERT_EQUAL(run_cli(args, out, sizeof out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "cannot open"));
    /* A FIFO is refused at once, never waited on (timeout's 124 would fail this). */
    snprintf(path, sizeof path, "%s/fifo.policy", dir);
    CU_ASSERT_EQUAL_FATAL(mkfifo(path, 0600), 0);
    snprintf(args, sizeof args, "check '%s'", path);
    CU_ASSERT_EQUAL(run_cli(args, out, sizeof out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "a FIFO, not a regular file"));
    CU_ASSERT_EQUAL(unlink(path), 0);
    snprintf(path, sizeof path, "%s/crlf.policy", dir);
    CU_ASSERT_EQUAL(unlink(path), 0);
    CU_ASSERT_EQUAL(rmdir(dir), 0);

    CU_ASSERT_EQUAL(run_cli("match policy/examples/moe.policy 16MiB runtime", out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "rule router (line 36)\n");
    CU_ASSERT_EQUAL(run_cli("match policy/examples/moe.policy 16MiB driver", out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "rule driver_workspace (line 42)\n");
    CU_ASSERT_EQUAL(run_cli("match policy/examples/moe.policy 458752KiB", out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "rule experts_down (line 29)\n");
    CU_ASSERT_EQUAL(run_cli("match policy/examples/moe.policy 448MiB driver", out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "untagged\n");
    CU_ASSERT_EQUAL(run_cli("match policy/examples/moe.policy 1.5GiB", out, sizeof out), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "bad size '1.5GiB'"));
    CU_ASSERT_EQUAL(run_cli("match policy/examples/moe.policy 1MiB cuda", out, sizeof out), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "bad api 'cuda': expected runtime, driver or any"));
}

static void cleanup_globals(void) { ld_policy_free(&g_pol); }
static int suite_clean(void) { cleanup_globals(); return 0; }

static void register_tests(void) {
    CU_pSuite s = CU_add_suite("policy", NULL, suite_clean);
    CU_add_test(s, "defaults and empty files", test_defaults);
    CU_add_test(s, "global options", test_globals);
    CU_add_test(s, "units", test_units);
    CU_add_test(s, "size boundaries and overflow", test_size_boundaries);
    CU_add_test(s, "size errors", test_size_errors);
    CU_add_test(s, "ranges", test_ranges);
    CU_add_test(s, "occurrences", test_occurrence);
    CU_add_test(s, "enum choices", test_enum_choices);
    CU_add_test(s, "enum names", test_names);
    CU_add_test(s, "keys, '=' and comments", test_keys);
    CU_add_test(s, "sections and rule names", test_sections);
    CU_add_test(s, "empty rule and missing size", test_empty_rule);
    CU_add_test(s, "too many rules", test_too_many_rules);
    CU_add_test(s, "overlapping rules", test_overlap);
    CU_add_test(s, "binary data", test_binary);
    CU_add_test(s, "CRLF", test_crlf);
    CU_add_test(s, "1 MiB limit", test_size_limit);
    CU_add_test(s, "ld_policy_load", test_load);
    CU_add_test(s, "ld_policy_load: FIFO, devices, links, sparse files", test_load_special);
    CU_add_test(s, "strict of a file that fails to parse", test_strict_of_bad_file);
    CU_add_test(s, "matching", test_match);
    CU_add_test(s, "matching vs brute force", test_match_many);
    CU_add_test(s, "hand-built policy and ld_policy_sort", test_sort_hand_built);
    CU_add_test(s, "random garbage", test_random_garbage);
    CU_add_test(s, "compute placement", test_compute);
    CU_add_test(s, "study states, domain, allocation apis", test_study);
    CU_add_test(s, "ldshim-policy tool", test_cli);
}

#include "tests/unit/cunit_main.h"
