/* match.c — which rule tags a request: the shim's hot path for every allocation.
 *
 * Rules are kept sorted by (api, size_min). Within one api group the size ranges are
 * disjoint (overlap is a parse error), so a request is a binary search in at most three
 * groups: `any`, then the request's own api. No allocation, no lock, no write. */
#include <stdlib.h>
#include "policy/policy.h"

static int rule_cmp(const void *a, const void *b) {
    const ld_rule_t *x = a, *y = b;
    if (x->api != y->api) return x->api < y->api ? -1 : 1;
    if (x->size_min != y->size_min) return x->size_min < y->size_min ? -1 : 1;
    return (x->line > y->line) - (x->line < y->line);
}

/* Sorts p->rules in place into the order ld_policy_match needs. ld_policy_parse calls it;
 * code that builds an ld_policy_t by hand must call it before matching. Not thread-safe
 * with concurrent readers of the same policy. */
void ld_policy_sort(ld_policy_t *p) {
    if (p && p->rules && p->n_rules > 1)
        qsort(p->rules, (size_t)p->n_rules, sizeof p->rules[0], rule_cmp);
}

/* First index in [0, n) whose api is >= api. */
static int group_start(const ld_rule_t *r, int n, ld_api_t api) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (r[mid].api < api) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* The rule of group [lo, hi) (disjoint ranges sorted by size_min) that holds size, or -1. */
static int search_group(const ld_rule_t *r, int lo, int hi, uint64_t size) {
    int a = lo, b = hi;
    while (a < b) {
        int mid = a + (b - a) / 2;
        if (r[mid].size_min <= size) a = mid + 1; else b = mid;
    }
    if (a == lo) return -1;
    return r[a - 1].size_max >= size ? a - 1 : -1;
}

/* See policy.h. A request whose api is LD_API_ANY (origin unknown) matches a rule of any
 * api; should both a runtime and a driver rule hold its size, the runtime one is returned.
 * Cost: two binary searches for the group bounds, at most three within groups. */
int ld_policy_match(const ld_policy_t *p, uint64_t size, ld_api_t api) {
    if (!p || !p->rules || p->n_rules <= 0) return -1;
    if (api != LD_API_ANY && api != LD_API_RUNTIME && api != LD_API_DRIVER) return -1;
    const ld_rule_t *r = p->rules;
    int n = p->n_rules;
    int g_rt = group_start(r, n, LD_API_RUNTIME);   /* any: [0, g_rt)        */
    int g_dr = group_start(r, n, LD_API_DRIVER);    /* runtime: [g_rt, g_dr) */
    int i = search_group(r, 0, g_rt, size);         /* driver: [g_dr, n)     */
    if (i >= 0) return i;
    if (api != LD_API_DRIVER) {
        i = search_group(r, g_rt, g_dr, size);
        if (i >= 0 || api == LD_API_RUNTIME) return i;
    }
    return search_group(r, g_dr, n, size);
}

/* See policy.h. Pure; occurrence 0 is never taken by a rule with an occurrence list. */
int ld_rule_takes_occurrence(const ld_rule_t *r, uint64_t occurrence) {
    if (!r) return 0;
    if (r->n_occ <= 0) return 1;
    for (int i = 0; i < r->n_occ && i < LD_MAX_OCC_RANGES; i++)
        if (occurrence >= r->occ[i].first && occurrence <= r->occ[i].last) return 1;
    return 0;
}
