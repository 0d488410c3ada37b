/* size.c — sizes in policy files: "4096", "112MiB", with units B KiB MiB GiB TiB.
 *
 * Integers only: "1.5GiB" is refused with a hint, because a fractional byte count would
 * silently round. Every function here is pure and reentrant. */
#include <stdio.h>
#include <string.h>
#include "policy/policy.h"
#include "policy/policy_internal.h"

/* Units, powers of 1024. One spelling each: the case matters ("kib" is not a unit). */
static const struct { const char *name; unsigned shift; } kUnits[] = {
    { "B", 0 }, { "KiB", 10 }, { "MiB", 20 }, { "GiB", 30 }, { "TiB", 40 },
};
#define N_UNITS (sizeof kUnits / sizeof kUnits[0])

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

int ld_pol_scan_uint(const char *s, size_t len, size_t *pos, uint64_t *out,
                     char *why, size_t whylen) {
    size_t p = *pos;
    if (p >= len || !is_digit(s[p])) {
        snprintf(why, whylen, "bad number: expected a decimal digit");
        return -1;
    }
    uint64_t v = 0;
    for (; p < len && is_digit(s[p]); p++) {
        unsigned d = (unsigned)(s[p] - '0');
        if (v > (UINT64_MAX - d) / 10) {
            snprintf(why, whylen, "number overflows 64 bits (largest is 18446744073709551615)");
            return -1;   /* *pos stays at the number's first digit */
        }
        v = v * 10 + d;
    }
    *pos = p;
    *out = v;
    return 0;
}

int ld_parse_uint(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    if (!s) return -1;
    size_t len = strlen(s), pos = 0;
    uint64_t v;
    char why[96];
    if (ld_pol_scan_uint(s, len, &pos, &v, why, sizeof why) != 0 || pos != len || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int ld_pol_scan_size(const char *s, size_t len, size_t *pos, uint64_t *out,
                     char *why, size_t whylen) {
    size_t start = *pos, p = start;
    uint64_t v;
    if (ld_pol_scan_uint(s, len, &p, &v, why, whylen) != 0) {
        *pos = p;
        return -1;
    }
    // NOTES: '.' is either the start of a ".." range (stop here) or a fraction (refuse).
    if (p < len && s[p] == '.' && !(p + 1 < len && s[p + 1] == '.')) {
        snprintf(why, whylen, "bad number: sizes are whole numbers, use a smaller unit "
                              "(e.g. 1536MiB, not 1.5GiB)");
        *pos = p;
        return -1;
    }
    if (p < len && is_alpha(s[p])) {
        size_t u = p;
        while (p < len && is_alpha(s[p])) p++;
        size_t ulen = p - u;
        unsigned k;
        for (k = 0; k < N_UNITS; k++)
            if (strlen(kUnits[k].name) == ulen && memcmp(kUnits[k].name, s + u, ulen) == 0) break;
        if (k == N_UNITS) {
            snprintf(why, whylen, "bad unit '%.*s', expected B, KiB, MiB, GiB or TiB",
                     (int)(ulen > 16 ? 16 : ulen), s + u);
            *pos = u;
            return -1;
        }
        unsigned sh = kUnits[k].shift;
        if (sh && v > (UINT64_MAX >> sh)) {
            snprintf(why, whylen, "size overflows 64 bits (largest is 16777215TiB)");
            *pos = start;
            return -1;
        }
        v <<= sh;
    }
    *pos = p;
    *out = v;
    return 0;
}

/* Public: a whole string must be one size. Thread-safe, no allocation. */
int ld_parse_size(const char *s, size_t len, uint64_t *out) {
    char why[128];
    size_t pos = 0;
    uint64_t v;
    if (!s || !out) return -1;
    if (ld_pol_scan_size(s, len, &pos, &v, why, sizeof why) != 0 || pos != len) return -1;
    *out = v;
    return 0;
}

void ld_pol_fmt_size(uint64_t v, char *buf, size_t size) {
    for (int k = (int)N_UNITS - 1; k > 0; k--) {
        unsigned sh = kUnits[k].shift;
        if (v != 0 && (v & ((UINT64_C(1) << sh) - 1)) == 0) {
            snprintf(buf, size, "%llu%s", (unsigned long long)(v >> sh), kUnits[k].name);
            return;
        }
    }
    snprintf(buf, size, "%llu", (unsigned long long)v);
}

void ld_pol_fmt_range(uint64_t lo, uint64_t hi, char *buf, size_t size) {
    char a[32], b[32];
    ld_pol_fmt_size(lo, a, sizeof a);
    if (lo == hi) {
        snprintf(buf, size, "%s", a);
        return;
    }
    ld_pol_fmt_size(hi, b, sizeof b);
    snprintf(buf, size, "%s..%s", a, b);
}
