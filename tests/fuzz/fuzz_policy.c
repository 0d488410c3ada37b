/* fuzz_policy.c — libFuzzer target for the policy parser (make fuzz).
 *
 * Besides "no crash, no leak, no UB", every input checks invariants that must hold for any
 * text: a rejected file yields one "<file>:<line>:<col>: ..." line and an empty policy; an
 * accepted one has sorted, pairwise non-overlapping rules, and ld_policy_match agrees with a
 * brute-force scan at every rule edge. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "policy/policy.h"

static int brute_match(const ld_policy_t *p, uint64_t size, ld_api_t api) {
    for (int i = 0; i < p->n_rules; i++) {
        const ld_rule_t *r = &p->rules[i];
        int api_ok = r->api == LD_API_ANY || api == LD_API_ANY || r->api == api;
        if (api_ok && r->size_min <= size && size <= r->size_max) return i;
    }
    return -1;
}

static void check_point(const ld_policy_t *p, uint64_t size) {
    for (int a = 0; a < 3; a++) {
        int got = ld_policy_match(p, size, (ld_api_t)a);
        int want = brute_match(p, size, (ld_api_t)a);
        if ((got < 0) != (want < 0)) abort();
        if (got >= 0) {
            const ld_rule_t *r = &p->rules[got];
            if (size < r->size_min || size > r->size_max) abort();
            if (a != LD_API_ANY && r->api != LD_API_ANY && (int)r->api != a) abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    ld_policy_t p;
    // A copy without a terminator: the parser must never read past len.
    char *text = malloc(size ? size : 1);
    if (!text) return 0;
    if (size) memcpy(text, data, size);
    int rc = ld_policy_parse(text, size, "fuzz.policy", &p, err, sizeof err);
    if (rc != 0) {
        if (strncmp(err, "fuzz.policy:", 12) != 0 || strchr(err, '\n')) abort();
        if (p.n_rules != 0 || p.rules != NULL) abort();
    } else {
        if (p.n_rules < 0 || p.n_rules > LD_POLICY_MAX_RULES) abort();
        for (int i = 0; i < p.n_rules; i++) {
            const ld_rule_t *r = &p.rules[i];
            if (r->size_min > r->size_max || r->n_occ < 0 || r->n_occ > LD_MAX_OCC_RANGES) abort();
            if (memchr(r->name, '\0', LD_RULE_NAME_MAX) == NULL || r->name[0] == '\0') abort();
            if (i > 0 && (p.rules[i - 1].api > r->api ||
                          (p.rules[i - 1].api == r->api && p.rules[i - 1].size_min > r->size_min)))
                abort();
            for (int k = 0; k < r->n_occ; k++)
                if (r->occ[k].first == 0 || r->occ[k].first > r->occ[k].last) abort();
        }
        for (int i = 0; i < p.n_rules && i < 64; i++) {
            const ld_rule_t *r = &p.rules[i];
            check_point(&p, r->size_min);
            check_point(&p, r->size_max);
            if (r->size_min > 0) check_point(&p, r->size_min - 1);
            if (r->size_max < UINT64_MAX) check_point(&p, r->size_max + 1);
        }
        check_point(&p, 0);
        check_point(&p, UINT64_MAX);
    }
    ld_policy_free(&p);
    // The single-size entry point on the same bytes.
    uint64_t v;
    (void)ld_parse_size(text, size, &v);
    free(text);
    return 0;
}
