/* probe_classify.c — SM→domain classification, validation and balancing (pure C).
 *
 * Anchored: per (domain, SM) median of chunks; the SM belongs to its faster domain; accept
 * iff every SM has far >= 1.25 x near, both SMs of every TPC agree, and no domain is empty.
 * Clustered: residual = latency − the line's median over SMs; SMs whose residual rows
 * correlate belong together; groups come from seeded k-means on the correlation matrix;
 * accept iff the separation score clears LD_PROBE_MIN_SEPARATION and TPCs agree.
 */
#include "shim/probe_classify.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MEDIAN_STACK 4096

/* k-th smallest of v[0..n) (0-based); reorders v. Quickselect: O(n) expected, which keeps
 * the 512 per-line medians of the clustered mode cheap. */
static double select_kth(double *v, size_t n, size_t k) {
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        double pivot = v[lo + (hi - lo) / 2];
        size_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot) i++;
            while (v[j] > pivot) j--;
            if (i <= j) {
                double t = v[i]; v[i] = v[j]; v[j] = t;
                i++;
                if (j == 0) break;
                j--;
            }
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return v[k];
    }
    return v[k];
}

static double median_of_doubles(double *v, size_t n) {   /* reorders v */
    if (n == 0) return 0.0;
    double hi = select_kth(v, n, n / 2);
    if (n & 1) return hi;
    double lo = v[0];                                     /* max of the lower half */
    for (size_t i = 1; i < n / 2; i++) if (v[i] > lo) lo = v[i];
    return 0.5 * (lo + hi);
}

double ld_median(const float *v, size_t n) {
    double tmp[MEDIAN_STACK];
    if (n > MEDIAN_STACK) return NAN;
    for (size_t i = 0; i < n; i++) tmp[i] = v[i];
    return median_of_doubles(tmp, n);
}

void ld_even_map(uint32_t num_sms, uint32_t nd, uint8_t *map) {
    for (uint32_t s = 0; s < num_sms; s++) map[s] = (uint8_t)ldshim_even_domain(s, nd);
}

int ld_first_split_tpc(const uint8_t *map, uint32_t num_sms) {
    for (uint32_t s = 0; s + 1 < num_sms; s += 2)
        if (map[s] != map[s + 1]) return (int)(s / 2);
    return -1;
}

void ld_count_domains(const uint8_t *map, uint32_t num_sms, uint32_t nd, uint32_t *counts) {
    memset(counts, 0, nd * sizeof *counts);
    for (uint32_t s = 0; s < num_sms; s++)
        if (map[s] < nd) counts[map[s]]++;
}

static int sizes_ok(uint32_t num_sms, uint32_t nd, ld_classify_t *out) {
    if (num_sms == 0 || num_sms > LDSHIM_MAX_SMS || nd == 0 || nd > LDSHIM_MAX_DOMAINS) {
        snprintf(out->verdict, sizeof out->verdict,
                 "bad sizes: %u SMs (1..%d), %u domains (1..%d)", num_sms, LDSHIM_MAX_SMS, nd,
                 LDSHIM_MAX_DOMAINS);
        return 0;
    }
    return 1;
}

static void init_out(ld_classify_t *out) {
    memset(out, 0, sizeof *out);
    out->bad_tpc = -1;
}

/* One domain: nothing to measure, every SM is in domain 0. */
static int single_domain(uint32_t num_sms, uint8_t *map, ld_classify_t *out) {
    memset(map, 0, num_sms);
    out->valid = 1;
    snprintf(out->verdict, sizeof out->verdict, "one domain: all %u SMs in domain 0", num_sms);
    return 0;
}

/* ---- anchored ---------------------------------------------------------------------- */

int ld_classify_anchored(const float *lat, uint32_t nd, uint32_t num_sms, uint32_t chunks,
                         uint8_t *map, ld_classify_t *out) {
    init_out(out);
    if (!sizes_ok(num_sms, nd, out)) return -1;
    if (chunks == 0 || chunks > 64) {
        snprintf(out->verdict, sizeof out->verdict, "bad chunk count %u (1..64)", chunks);
        return -1;
    }
    if (nd == 1) return single_domain(num_sms, map, out);

    double nearv[LDSHIM_MAX_SMS], farv[LDSHIM_MAX_SMS];
    double min_ratio = INFINITY;
    int weakest = -1;
    for (uint32_t s = 0; s < num_sms; s++) {
        double best = INFINITY, second = INFINITY;
        int bestd = 0;
        for (uint32_t d = 0; d < nd; d++) {
            const float *row = lat + ((size_t)d * num_sms + s) * chunks;
            for (uint32_t c = 0; c < chunks; c++)
                if (!isfinite(row[c]) || row[c] <= 0.0f) {
                    snprintf(out->verdict, sizeof out->verdict,
                             "SM %u domain %u chunk %u: no valid latency (%g)", s, d, c, (double)row[c]);
                    ld_even_map(num_sms, nd, map);
                    return -1;
                }
            double m = ld_median(row, chunks);
            if (m < best) { second = best; best = m; bestd = (int)d; }
            else if (m < second) second = m;
        }
        map[s] = (uint8_t)bestd;
        nearv[s] = best;
        farv[s] = second;
        double ratio = second / best;
        if (ratio < min_ratio) { min_ratio = ratio; weakest = (int)s; }
    }
    double tmp[LDSHIM_MAX_SMS];
    memcpy(tmp, nearv, num_sms * sizeof *tmp);
    out->near_cycles = median_of_doubles(tmp, num_sms);
    memcpy(tmp, farv, num_sms * sizeof *tmp);
    out->far_cycles = median_of_doubles(tmp, num_sms);
    out->separation = min_ratio;

    /* far >= 1.25 x near, compared without dividing so "exactly 1.25" passes. */
    uint32_t below = 0;
    for (uint32_t s = 0; s < num_sms; s++)
        if (farv[s] < LD_PROBE_MIN_RATIO * nearv[s]) below++;
    if (below) {
        snprintf(out->verdict, sizeof out->verdict,
                 "no clear separation: %u of %u SMs have far < %.2f x near (weakest SM %d: %.0f vs %.0f cycles)",
                 below, num_sms, LD_PROBE_MIN_RATIO, weakest, farv[weakest], nearv[weakest]);
        return 1;
    }
    out->bad_tpc = ld_first_split_tpc(map, num_sms);
    if (out->bad_tpc >= 0) {
        snprintf(out->verdict, sizeof out->verdict, "TPC %d split: SM %d -> %u, SM %d -> %u",
                 out->bad_tpc, 2 * out->bad_tpc, map[2 * out->bad_tpc], 2 * out->bad_tpc + 1,
                 map[2 * out->bad_tpc + 1]);
        return 1;
    }
    uint32_t counts[LDSHIM_MAX_DOMAINS];
    ld_count_domains(map, num_sms, nd, counts);
    for (uint32_t d = 0; d < nd; d++)
        if (counts[d] == 0) {
            snprintf(out->verdict, sizeof out->verdict,
                     "domain %u has no near SM: every SM is nearest to the same memory", d);
            return 1;
        }
    out->valid = 1;
    snprintf(out->verdict, sizeof out->verdict,
             "accepted: near %.0f, far %.0f cycles/hop, every SM far/near >= %.2f (min %.2f), TPCs agree",
             out->near_cycles, out->far_cycles, LD_PROBE_MIN_RATIO, min_ratio);
    return 0;
}

/* ---- clustered --------------------------------------------------------------------- */

/* Mean correlation of SM s with the members of group g (itself excluded). */
static double mean_corr(const double *corr, uint32_t n, uint32_t s, const uint8_t *grp, uint8_t g) {
    double sum = 0.0;
    uint32_t cnt = 0;
    for (uint32_t t = 0; t < n; t++)
        if (t != s && grp[t] == g) { sum += corr[(size_t)s * n + t]; cnt++; }
    return cnt ? sum / cnt : -INFINITY;
}

/* Seeds: the most anti-correlated pair, then farthest-first (lowest max correlation to the
 * seeds so far). Deterministic: ties go to the lower SM id. */
static void pick_seeds(const double *corr, uint32_t n, uint32_t k, uint32_t *seeds) {
    double lo = INFINITY;
    seeds[0] = 0; seeds[1] = 1;
    for (uint32_t a = 0; a < n; a++)
        for (uint32_t b = a + 1; b < n; b++)
            if (corr[(size_t)a * n + b] < lo) { lo = corr[(size_t)a * n + b]; seeds[0] = a; seeds[1] = b; }
    for (uint32_t j = 2; j < k; j++) {
        double best = INFINITY;
        uint32_t arg = 0;
        for (uint32_t s = 0; s < n; s++) {
            double mx = -INFINITY;
            int is_seed = 0;
            for (uint32_t i = 0; i < j; i++) {
                if (seeds[i] == s) is_seed = 1;
                if (corr[(size_t)s * n + seeds[i]] > mx) mx = corr[(size_t)s * n + seeds[i]];
            }
            if (!is_seed && mx < best) { best = mx; arg = s; }
        }
        seeds[j] = arg;
    }
}

/* Residual rows (latency − the line's median over SMs), clipped, z-scored, then their
 * correlation matrix (n x n). Returns NULL on OOM.
 * NOTES: one hop stalled by an interrupt or a page walk reads thousands of cycles; left in,
 * 0.1 % such samples wreck Pearson correlation. Residuals are clipped to ±LD_PROBE_CLIP_MADS
 * x their median absolute value (~6 x the 15-cycle half split on an H200: the signal passes). */
#define LD_PROBE_CLIP_MADS 6.0
static double *correlation_matrix(const float *lat, uint32_t n, uint32_t nl) {
    size_t cells = (size_t)n * nl;
    double *z = malloc(cells * sizeof *z);
    double *tmp = malloc(cells * sizeof *tmp);
    double *corr = malloc((size_t)n * n * sizeof *corr);
    if (!z || !tmp || !corr) { free(z); free(tmp); free(corr); return NULL; }
    for (uint32_t l = 0; l < nl; l++) {
        double *col = tmp;
        for (uint32_t s = 0; s < n; s++) col[s] = lat[(size_t)s * nl + l];
        double med = median_of_doubles(col, n);
        for (uint32_t s = 0; s < n; s++) z[(size_t)s * nl + l] = lat[(size_t)s * nl + l] - med;
    }
    for (size_t i = 0; i < cells; i++) tmp[i] = fabs(z[i]);
    double clip = LD_PROBE_CLIP_MADS * median_of_doubles(tmp, cells);
    free(tmp);
    if (clip > 0.0)
        for (size_t i = 0; i < cells; i++) z[i] = z[i] > clip ? clip : z[i] < -clip ? -clip : z[i];
    for (uint32_t s = 0; s < n; s++) {
        double *row = z + (size_t)s * nl, mean = 0.0, ss = 0.0;
        for (uint32_t l = 0; l < nl; l++) mean += row[l];
        mean /= nl;
        for (uint32_t l = 0; l < nl; l++) { row[l] -= mean; ss += row[l] * row[l]; }
        double inv = ss > 0.0 ? 1.0 / sqrt(ss) : 0.0;   /* a flat row correlates with nothing */
        for (uint32_t l = 0; l < nl; l++) row[l] *= inv;
    }
    for (uint32_t s = 0; s < n; s++) {
        corr[(size_t)s * n + s] = 1.0;
        for (uint32_t t = s + 1; t < n; t++) {
            const double *a = z + (size_t)s * nl, *b = z + (size_t)t * nl;
            double acc[4] = { 0.0, 0.0, 0.0, 0.0 };   /* independent sums: 4x the throughput */
            uint32_t l = 0;
            for (; l + 4 <= nl; l += 4)
                for (int u = 0; u < 4; u++) acc[u] += a[l + u] * b[l + u];
            for (; l < nl; l++) acc[0] += a[l] * b[l];
            corr[(size_t)s * n + t] = corr[(size_t)t * n + s] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        }
    }
    free(z);
    return corr;
}

/* Group ids -> domain ids. With labels: majority vote per group, used when the votes name
 * distinct domains. Otherwise groups ordered by their lowest SM id. */
static int label_groups(const uint8_t *grp, uint32_t n, uint32_t k, const uint8_t *labels,
                        uint8_t *dom_of) {
    if (labels) {
        uint32_t votes[LDSHIM_MAX_DOMAINS][LDSHIM_MAX_DOMAINS] = {{0}};
        for (uint32_t s = 0; s < n; s++)
            if (labels[s] < k) votes[grp[s]][labels[s]]++;
        int used[LDSHIM_MAX_DOMAINS] = {0}, ok = 1;
        for (uint32_t g = 0; g < k; g++) {
            uint32_t best = 0;
            for (uint32_t d = 1; d < k; d++)
                if (votes[g][d] > votes[g][best]) best = d;
            if (votes[g][best] == 0 || used[best]) ok = 0;
            used[best] = 1;
            dom_of[g] = (uint8_t)best;
        }
        if (ok) return 1;
    }
    uint32_t next = 0;
    for (uint32_t g = 0; g < k; g++) dom_of[g] = 0xff;
    for (uint32_t s = 0; s < n; s++)
        if (dom_of[grp[s]] == 0xff) dom_of[grp[s]] = (uint8_t)next++;
    for (uint32_t g = 0; g < k; g++)
        if (dom_of[g] == 0xff) dom_of[g] = (uint8_t)next++;   /* empty group */
    return 0;
}

int ld_classify_clustered(const float *lat, uint32_t num_sms, uint32_t nlines, uint32_t nd,
                          const uint8_t *labels, uint8_t *map, ld_classify_t *out) {
    init_out(out);
    if (!sizes_ok(num_sms, nd, out)) return -1;
    if (nd == 1) return single_domain(num_sms, map, out);
    if (num_sms < 2 * nd || nlines < 8) {
        snprintf(out->verdict, sizeof out->verdict,
                 "too little data to cluster: %u SMs, %u lines, %u domains", num_sms, nlines, nd);
        ld_even_map(num_sms, nd, map);
        return -1;
    }
    for (size_t i = 0; i < (size_t)num_sms * nlines; i++)
        if (!isfinite(lat[i]) || lat[i] <= 0.0f) {
            snprintf(out->verdict, sizeof out->verdict, "SM %zu line %zu: no valid latency (%g)",
                     i / nlines, i % nlines, (double)lat[i]);
            ld_even_map(num_sms, nd, map);
            return -1;
        }
    double *corr = correlation_matrix(lat, num_sms, nlines);
    if (!corr) {
        snprintf(out->verdict, sizeof out->verdict, "out of host memory for %u x %u matrix", num_sms, nlines);
        ld_even_map(num_sms, nd, map);
        return -1;
    }
    const uint32_t n = num_sms, k = nd;
    uint8_t grp[LDSHIM_MAX_SMS];
    uint32_t seeds[LDSHIM_MAX_DOMAINS];
    pick_seeds(corr, n, k, seeds);
    for (uint32_t s = 0; s < n; s++) {
        uint32_t best = 0;
        for (uint32_t g = 1; g < k; g++)
            if (corr[(size_t)s * n + seeds[g]] > corr[(size_t)s * n + seeds[best]]) best = g;
        grp[s] = (uint8_t)best;
    }
    for (uint32_t g = 0; g < k; g++) grp[seeds[g]] = (uint8_t)g;
    /* k-means in correlation space: move each SM to the group it correlates with most,
     * in sweeps, until nothing moves. Each SM decides on the previous sweep's groups. */
    for (int it = 0; it < 100; it++) {
        uint8_t next[LDSHIM_MAX_SMS];
        int moved = 0;
        for (uint32_t s = 0; s < n; s++) {
            uint8_t best = grp[s];
            double bv = mean_corr(corr, n, s, grp, grp[s]);
            for (uint32_t g = 0; g < k; g++) {
                double v = mean_corr(corr, n, s, grp, (uint8_t)g);
                if (v > bv + 1e-12) { bv = v; best = (uint8_t)g; }
            }
            next[s] = best;
            moved += best != grp[s];
        }
        memcpy(grp, next, n);
        if (!moved) break;
    }
    /* Separation: mean within-group minus mean between-group correlation. */
    double win = 0.0, btw = 0.0;
    size_t nw = 0, nb = 0;
    for (uint32_t s = 0; s < n; s++)
        for (uint32_t t = s + 1; t < n; t++) {
            if (grp[s] == grp[t]) { win += corr[(size_t)s * n + t]; nw++; }
            else { btw += corr[(size_t)s * n + t]; nb++; }
        }
    free(corr);
    out->separation = (nw ? win / nw : 0.0) - (nb ? btw / nb : 0.0);

    uint8_t dom_of[LDSHIM_MAX_DOMAINS];
    int from_labels = label_groups(grp, n, k, labels, dom_of);
    for (uint32_t s = 0; s < n; s++) map[s] = dom_of[grp[s]];

    /* Near/far: per line, the mean latency of each group; median over lines of the lowest
     * and the highest group mean. */
    double *nearl = malloc(nlines * sizeof *nearl), *farl = malloc(nlines * sizeof *farl);
    if (nearl && farl) {
        for (uint32_t l = 0; l < nlines; l++) {
            double sum[LDSHIM_MAX_DOMAINS] = {0};
            uint32_t cnt[LDSHIM_MAX_DOMAINS] = {0};
            for (uint32_t s = 0; s < n; s++) { sum[map[s]] += lat[(size_t)s * nlines + l]; cnt[map[s]]++; }
            double lo = INFINITY, hi = -INFINITY;
            for (uint32_t d = 0; d < k; d++)
                if (cnt[d]) {
                    double m = sum[d] / cnt[d];
                    if (m < lo) lo = m;
                    if (m > hi) hi = m;
                }
            nearl[l] = lo;
            farl[l] = hi;
        }
        out->near_cycles = median_of_doubles(nearl, nlines);
        out->far_cycles = median_of_doubles(farl, nlines);
    }
    free(nearl);
    free(farl);

    uint32_t counts[LDSHIM_MAX_DOMAINS];
    ld_count_domains(map, n, k, counts);
    for (uint32_t d = 0; d < k; d++)
        if (counts[d] == 0) {
            snprintf(out->verdict, sizeof out->verdict, "clustering left domain %u empty (separation %.3f)",
                     d, out->separation);
            return 1;
        }
    if (!(out->separation >= LD_PROBE_MIN_SEPARATION)) {
        snprintf(out->verdict, sizeof out->verdict,
                 "no structure: separation %.3f < %.2f (groups of %u and %u SMs)", out->separation,
                 LD_PROBE_MIN_SEPARATION, counts[0], counts[1]);
        return 1;
    }
    out->bad_tpc = ld_first_split_tpc(map, n);
    if (out->bad_tpc >= 0) {
        snprintf(out->verdict, sizeof out->verdict,
                 "TPC %d split between groups (separation %.3f)", out->bad_tpc, out->separation);
        return 1;
    }
    out->valid = 1;
    int len = snprintf(out->verdict, sizeof out->verdict,
                       "accepted: separation %.3f >= %.2f, TPCs agree, groups", out->separation,
                       LD_PROBE_MIN_SEPARATION);
    for (uint32_t d = 0; d < k && len > 0 && (size_t)len < sizeof out->verdict; d++)
        len += snprintf(out->verdict + len, sizeof out->verdict - (size_t)len, "%s%u",
                        d ? "/" : " ", counts[d]);
    if (len > 0 && (size_t)len < sizeof out->verdict)
        snprintf(out->verdict + len, sizeof out->verdict - (size_t)len, ", labels %s",
                 from_labels ? "from anchored" : "by SM 0");
    return 0;
}

/* ---- balancing --------------------------------------------------------------------- */

int ld_balance_map(const uint8_t *physical, uint32_t num_sms, uint32_t nd, uint8_t *balanced) {
    if (num_sms > LDSHIM_MAX_SMS) num_sms = LDSHIM_MAX_SMS;   /* the callers' buffers */
    memcpy(balanced, physical, num_sms);
    if (nd < 2 || nd > LDSHIM_MAX_DOMAINS) return 0;          /* counts[] below holds 8 */
    uint32_t ntpc = (num_sms + 1) / 2;
    uint8_t moved[LDSHIM_MAX_SMS / 2 + 1] = {0};
    int nmoved = 0;
    for (;;) {
        uint32_t counts[LDSHIM_MAX_DOMAINS];
        ld_count_domains(balanced, num_sms, nd, counts);
        uint32_t big = 0, small = 0;
        for (uint32_t d = 1; d < nd; d++) {
            if (counts[d] > counts[big]) big = d;
            if (counts[d] < counts[small]) small = d;
        }
        uint32_t diff = counts[big] - counts[small];
        if (diff < 2) break;
        /* Candidate: a not-yet-moved TPC with 1 or 2 SMs in `big` (only those SMs move).
         * Pick the size that leaves the smallest |difference|; among equals the larger
         * size (fewer moves), then the highest TPC id (deterministic). */
        int best_t = -1;
        uint32_t best_sz = 0, best_res = diff;
        for (uint32_t t = ntpc; t-- > 0;) {
            if (moved[t]) continue;
            uint32_t sz = 0;
            for (uint32_t s = 2 * t; s < 2 * t + 2 && s < num_sms; s++) sz += balanced[s] == big;
            if (sz == 0) continue;
            uint32_t res = diff > 2 * sz ? diff - 2 * sz : 2 * sz - diff;
            if (res < best_res || (res == best_res && best_t >= 0 && sz > best_sz)) {
                best_res = res; best_sz = sz; best_t = (int)t;
            }
        }
        if (best_t < 0) break;   /* no move improves the balance */
        for (uint32_t s = 2 * (uint32_t)best_t; s < 2 * (uint32_t)best_t + 2 && s < num_sms; s++)
            if (balanced[s] == big) balanced[s] = (uint8_t)small;
        moved[best_t] = 1;
        nmoved++;
    }
    return nmoved;
}

void ld_topology_fill(ldshim_topology_t *t, const uint8_t *map, uint32_t num_sms, uint32_t nd,
                      int valid, int balanced, enum ldshim_topology_source source) {
    memset(t, 0, sizeof *t);
    if (num_sms > LDSHIM_MAX_SMS) num_sms = LDSHIM_MAX_SMS;
    if (nd > LDSHIM_MAX_DOMAINS) nd = LDSHIM_MAX_DOMAINS;
    t->magic = LDSHIM_TOPOLOGY_MAGIC;
    t->version = LDSHIM_TOPOLOGY_VERSION;
    t->num_sms = num_sms;
    t->num_domains = nd ? nd : 1;
    t->flags = (valid ? LDSHIM_TOPO_VALID : 0u) | (balanced ? LDSHIM_TOPO_BALANCED : 0u) |
               (((uint32_t)source << LDSHIM_TOPO_SOURCE_SHIFT) & LDSHIM_TOPO_SOURCE_MASK);
    memcpy(t->sm_domain, map, num_sms);
    ld_count_domains(map, num_sms, t->num_domains, t->sms_per_domain);
    /* Unbound until compute binding (shim/compute.c) says otherwise: every SM. */
    t->bound_sms = num_sms;
    t->bound_domain = LDSHIM_DOMAIN_NONE;
    memset(t->sm_bound, 1, num_sms);
}

/* ---- LDSHIM_PROBE_DUMP matrices ------------------------------------------------------ */

#define DUMP_MAX_VALUES ((size_t)LDSHIM_MAX_DOMAINS * LDSHIM_MAX_SMS * 512)

/* A whole unsigned decimal of at most 9 digits in [p, e), below `limit`. */
static int dump_uint(const char *p, const char *e, uint32_t limit, uint32_t *out) {
    if (p == e || e - p > 9) return -1;
    uint32_t v = 0;
    for (; p < e; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (uint32_t)(*p - '0');
    }
    if (v >= limit) return -1;
    *out = v;
    return 0;
}

/* A finite number parsed whole from [p, e) (copied: the text need not end in NUL). */
static int dump_float(const char *p, const char *e, float *out) {
    char tmp[48];
    size_t l = (size_t)(e - p);
    if (l == 0 || l >= sizeof tmp) return -1;
    memcpy(tmp, p, l);
    tmp[l] = 0;
    if (tmp[0] == ' ' || tmp[0] == '\t' || tmp[0] == '\n') return -1;
    char *end;
    double x = strtod(tmp, &end);
    if (end != tmp + l || !isfinite(x) || x > 1e30 || x < -1e30) return -1;
    *out = (float)x;
    return 0;
}

void ld_dump_free(ld_dump_t *d) {
    if (!d) return;
    free(d->v);
    memset(d, 0, sizeof *d);
}

#define DUMP_BAD(...) do { snprintf(why, n, __VA_ARGS__); ld_dump_free(out); return -1; } while (0)

int ld_dump_parse(const char *text, size_t len, ld_dump_t *out, char *why, size_t n) {
    memset(out, 0, sizeof *out);
    size_t cap = 0, nv = 0;
    uint32_t rows = 0, line = 0, cur_d = 0, cur_sm = 0, block = 0;
    int anchored = -1;
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        line++;
        const char *q = p;
        p = nl ? nl + 1 : end;
        if (le > q && le[-1] == '\r') le--;
        if (le == q) continue;                                   /* blank line */
        if ((size_t)(le - q) > LD_DUMP_MAX_LINE) DUMP_BAD("line %u: longer than %d bytes", line, LD_DUMP_MAX_LINE);
        const char *f = memchr(q, ',', (size_t)(le - q));
        uint32_t sm, d = 0;
        if (!f || dump_uint(q, f, LDSHIM_MAX_SMS, &sm))
            DUMP_BAD("line %u: expected an SM number 0..%d and a comma", line, LDSHIM_MAX_SMS - 1);
        q = f + 1;
        int has_d = q < le && *q == 'd';
        if (anchored < 0) anchored = has_d;
        if (has_d != anchored) DUMP_BAD("line %u: anchored and clustered rows mixed", line);
        if (has_d) {
            f = memchr(q, ',', (size_t)(le - q));
            if (!f || dump_uint(q + 1, f, LDSHIM_MAX_DOMAINS, &d))
                DUMP_BAD("line %u: expected a domain d0..d%d and a comma", line, LDSHIM_MAX_DOMAINS - 1);
            q = f + 1;
        }
        /* Order: clustered rows are SMs 0, 1, ...; anchored rows are blocks of SMs 0..n-1,
         * one per domain 0, 1, ..., every block as long as the first. */
        if (rows == 0) {
            if (sm != 0 || d != 0) DUMP_BAD("line %u: the first row must be SM 0%s", line, has_d ? " of domain d0" : "");
        } else if (has_d && d == cur_d + 1 && sm == 0) {
            if (cur_d == 0) block = cur_sm + 1;
            else if (cur_sm + 1 != block) DUMP_BAD("line %u: domain d%u has %u rows, d0 had %u", line, cur_d, cur_sm + 1, block);
        } else if (d != cur_d || sm != cur_sm + 1) {
            DUMP_BAD("line %u: expected %s%u, found SM %u%s", line, has_d ? "the next SM of the block or SM 0 of the next domain after SM " : "SM ",
                     has_d ? cur_sm : cur_sm + 1, sm, has_d ? "" : " (rows go in SM order)");
        }
        if (has_d && d > 0 && sm >= block) DUMP_BAD("line %u: domain d%u has more rows than d0 (%u)", line, d, block);
        cur_d = d;
        cur_sm = sm;
        uint32_t c = 0;
        while (q <= le) {
            const char *fe = memchr(q, ',', (size_t)(le - q));
            if (!fe) fe = le;
            float x;
            if (dump_float(q, fe, &x)) DUMP_BAD("line %u: value %u is not a finite number", line, c + 1);
            if (c >= LD_DUMP_MAX_COLS) DUMP_BAD("line %u: more than %d values", line, LD_DUMP_MAX_COLS);
            if (nv == cap) {
                size_t nc = cap ? cap * 2 : 4096;
                if (nc > DUMP_MAX_VALUES) nc = DUMP_MAX_VALUES;
                if (nv >= nc) DUMP_BAD("line %u: more than %zu values in all", line, (size_t)DUMP_MAX_VALUES);
                float *nvp = realloc(out->v, nc * sizeof *nvp);
                if (!nvp) DUMP_BAD("out of memory");
                out->v = nvp;
                cap = nc;
            }
            out->v[nv++] = x;
            c++;
            q = fe + 1;
        }
        if (rows && c != out->cols) DUMP_BAD("line %u: %u values, the first row had %u", line, c, out->cols);
        out->cols = c;
        rows++;
    }
    if (rows == 0) DUMP_BAD("no rows");
    if (anchored) {
        uint32_t nsms = cur_d == 0 ? cur_sm + 1 : block;
        if (cur_sm + 1 != nsms) DUMP_BAD("domain d%u has %u rows, d0 had %u", cur_d, cur_sm + 1, nsms);
        out->ndomains = cur_d + 1;
        out->nsms = nsms;
    } else {
        out->nsms = rows;
    }
    return 0;
}
