/* compute.c — the `compute` placement value (all | domain:N | spread:K) and the names of the
 * compute options, for the policy parser and for LDSHIM_COMPUTE. Pure and reentrant. */
#include <stdio.h>
#include <string.h>
#include "policy/policy.h"
#include "policy/policy_internal.h"

const char *const ld_pol_split_words[3] = { "aligned", "fine", "backfill" };

static int digits(const char *s, size_t len, size_t p, uint64_t max, uint64_t *out, size_t *end) {
    uint64_t v = 0;
    size_t q = p;
    while (q < len && s[q] >= '0' && s[q] <= '9') {
        v = v * 10 + (uint64_t)(s[q] - '0');
        if (v > max) { *end = q; return -1; }
        q++;
    }
    *end = q;
    if (q == p) return -1;
    *out = v;
    return 0;
}

int ld_compute_scan(const char *s, size_t len, ld_compute_t *out, size_t *bad, char *why, size_t n) {
    size_t e = 0;
    while (e < len && s[e] != ':') e++;
    memset(out, 0, sizeof *out);
    *bad = 0;
    if (e == 3 && len == 3 && !memcmp(s, "all", 3)) { out->kind = LD_COMPUTE_ALL; return 0; }
    int dom = e == 6 && !memcmp(s, "domain", 6), spread = e == 6 && !memcmp(s, "spread", 6);
    if (!dom && !spread) {
        snprintf(why, n, "bad value '%.*s' for compute, expected all, domain:N (N in 0..7) or spread:K "
                 "(K SMs, 1..%d)", (int)(len < 32 ? len : 32), s, LDSHIM_COMPUTE_MAX_SMS);
        return -1;
    }
    if (e >= len) {
        *bad = e;
        snprintf(why, n, "expected ':%s' after '%s'", dom ? "N" : "K", dom ? "domain" : "spread");
        return -1;
    }
    uint64_t v = 0;
    size_t end = 0;
    int rc = digits(s, len, e + 1, dom ? 7 : LDSHIM_COMPUTE_MAX_SMS, &v, &end);
    if (rc != 0 || (spread && v == 0)) {
        *bad = rc != 0 && end > e + 1 ? e + 1 : (rc != 0 ? end : e + 1);
        if (dom) snprintf(why, n, "expected a domain number 0..7 after 'domain:'");
        else snprintf(why, n, "expected an SM count 1..%d after 'spread:'", LDSHIM_COMPUTE_MAX_SMS);
        return -1;
    }
    if (end < len) {
        *bad = end;
        snprintf(why, n, "unexpected '%c' after the %s", s[end], dom ? "domain number" : "SM count");
        return -1;
    }
    out->kind = dom ? LD_COMPUTE_DOMAIN : LD_COMPUTE_SPREAD;
    if (dom) out->domain = (int)v;
    else out->sms = (uint32_t)v;
    return 0;
}

const char *ld_compute_format(const ld_compute_t *c, char *buf, size_t n) {
    if (!c || c->kind == LD_COMPUTE_ALL) snprintf(buf, n, "all");
    else if (c->kind == LD_COMPUTE_DOMAIN) snprintf(buf, n, "domain:%d", c->domain);
    else snprintf(buf, n, "spread:%u", c->sms);
    return buf;
}

const char *ld_split_name(ld_split_t m) {
    return (int)m >= 0 && (int)m < 3 ? ld_pol_split_words[m] : "unknown";
}

int ld_split_parse(const char *s) {
    return s ? ld_pol_lookup(ld_pol_split_words, 3, s, strlen(s)) : -1;
}
