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

// NOTES: both searches are the branch-free "halve and keep the upper part if it still
// qualifies" form: random request sizes would mispredict a branchy binary search.

/* First index in [0, n) whose api is >= api. */
static int group_start(const ld_rule_t *r, int n, ld_api_t api) {
    if (n <= 0 || r[0].api >= api) return 0;
    const ld_rule_t *base = r;          /* invariant: base->api < api */
    for (int m = n; m > 1;) {
        int half = m / 2;
        base = base[half].api < api ? base + half : base;
        m -= half;
    }
    return (int)(base - r) + 1;
}

/* The rule of group [lo, hi) (disjoint ranges sorted by size_min) that holds size, or -1. */
static int search_group(const ld_rule_t *r, int lo, int hi, uint64_t size) {
    if (hi <= lo) return -1;
    const ld_rule_t *base = r + lo;     /* ends at the last rule with size_min <= size, if any */
    for (int m = hi - lo; m > 1;) {
        int half = m / 2;
        base = base[half].size_min <= size ? base + half : base;
        m -= half;
    }
    return base->size_min <= size && size <= base->size_max ? (int)(base - r) : -1;
}

/* See policy.h. A request whose api is LD_API_ANY (origin unknown) matches a rule of any
 * api, in the order of the api enum (runtime before driver, ...). Cost: binary searches for
 * the group bounds and within at most two groups (every group for LD_API_ANY). */
int ld_policy_match(const ld_policy_t *p, uint64_t size, ld_api_t api) {
    if (!p || !p->rules || p->n_rules <= 0) return -1;
    if ((int)api < 0 || api >= LD_API_COUNT) return -1;
    const ld_rule_t *r = p->rules;
    int n = p->n_rules;
    int i = search_group(r, 0, group_start(r, n, LD_API_RUNTIME), size);   /* the `any` rules */
    if (i >= 0) return i;
    if (api != LD_API_ANY)
        return search_group(r, group_start(r, n, api), group_start(r, n, (ld_api_t)(api + 1)), size);
    for (int a = LD_API_RUNTIME; a < LD_API_COUNT; a++)
        if ((i = search_group(r, group_start(r, n, (ld_api_t)a), group_start(r, n, (ld_api_t)(a + 1)), size)) >= 0)
            return i;
    return -1;
}

/* See policy.h. Pure; occurrence 0 is never taken by a rule with an occurrence list. */
int ld_rule_takes_occurrence(const ld_rule_t *r, uint64_t occurrence) {
    if (!r) return 0;
    if (r->n_occ <= 0) return 1;
    for (int i = 0; i < r->n_occ && i < LD_MAX_OCC_RANGES; i++)
        if (occurrence >= r->occ[i].first && occurrence <= r->occ[i].last) return 1;
    return 0;
}
