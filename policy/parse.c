/* parse.c — the policy file parser: text in, validated ld_policy_t out, or exactly one
 * "<file>:<line>:<col>: <what was expected>" message.
 *
 * The text is read line by line, top to bottom; the first problem ends the parse. A line's
 * bytes are checked first (binary data, CR), then its syntax, then its value. Rule-level
 * checks (empty rule, missing size, overlap with an earlier rule) run when the rule's section
 * ends and point at the rule's header. Columns count bytes, 1-based. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "policy/policy.h"
#include "policy/policy_internal.h"
#include "policy/utf8.h"


enum { K_STATE, K_BACKEND, K_PROBE, K_MAP, K_STRICT, K_POOL, K_MIN_SPLIT,
       K_COMPUTE, K_COMPUTE_SPLIT, K_COMPUTE_SMS, K_DOMAIN, K_TOPOLOGY_SOURCE, K_SIZE, K_API, K_OCCURRENCE, K_PLACEMENT, K_COUNT };

static const struct { const char *name; int rule; } kKeys[K_COUNT] = {
    [K_STATE] = { "state", 0 },   [K_BACKEND] = { "backend", 0 }, [K_PROBE] = { "probe", 0 },
    [K_MAP] = { "map", 0 },       [K_STRICT] = { "strict", 0 },   [K_POOL] = { "pool", 0 },
    [K_MIN_SPLIT] = { "min_split", 0 }, [K_COMPUTE] = { "compute", 0 },
    [K_COMPUTE_SPLIT] = { "compute_split", 0 }, [K_COMPUTE_SMS] = { "compute_sms", 0 },
    [K_DOMAIN] = { "domain", 0 }, [K_TOPOLOGY_SOURCE] = { "topology_source", 0 },
    [K_SIZE] = { "size", 1 },     [K_API] = { "api", 1 },  [K_OCCURRENCE] = { "occurrence", 1 },
    [K_PLACEMENT] = { "placement", 1 },
};
static const char kGlobalKeys[] = "state, backend, probe, map, strict, pool, min_split, compute, "
                                  "compute_split, compute_sms, domain, topology_source";
static const char kRuleKeys[]   = "size, api, occurrence, placement";

typedef struct {
    const char *fname;
    char *err;
    size_t errlen;
    const char *text;
    size_t len;
    int line;                 /* current line, 1-based          */
    size_t ls, le;            /* current line's bytes [ls, le)  */
    ld_policy_t pol;
    int cap;
    int in_rule;              /* 0: global section             */
    ld_rule_t cur;
    int cur_col;              /* column of the rule's name      */
    int cur_nkeys;
    int key_line[K_COUNT];    /* line a key was set on in this section, 0 if not yet */
} parser_t;

static int fail_at(parser_t *P, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail_at(parser_t *P, int line, int col, const char *fmt, ...) {
    if (P->err && P->errlen) {
        int w = snprintf(P->err, P->errlen, "%s:%d:%d: ", P->fname, line, col);
        if (w >= 0 && (size_t)w < P->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(P->err + w, P->errlen - (size_t)w, fmt, ap);
            va_end(ap);
        }
    }
    return -1;
}

/* Error at byte offset `off` of the current line. */
#define FAIL(P, off, ...) fail_at((P), (P)->line, (int)((off) - (P)->ls) + 1, __VA_ARGS__)

static int is_ws(char c) { return c == ' ' || c == '\t'; }
static int is_keych(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-' || c == '.';
}
#define is_namech is_keych   /* rule names: [A-Za-z0-9_.-] */

static size_t skip_ws(const parser_t *P, size_t p) {
    while (p < P->le && is_ws(P->text[p])) p++;
    return p;
}

/* How many bytes of s[0..n) to quote in a message: at most 32, never half a UTF-8 sequence. */
static int qlen(const char *s, size_t n) {
    if (n <= 32) return (int)n;
    n = 32;
    while (n > 0 && (((unsigned char)s[n]) & 0xc0) == 0x80) n--;
    return (int)n;
}

/* Quote a byte for a message: 'x' when printable ASCII, else 0xNN. */
static void fmt_byte(unsigned char c, char *buf, size_t n) {
    if (c > 0x20 && c < 0x7f) snprintf(buf, n, "'%c'", c);
    else snprintf(buf, n, "byte 0x%02x", c);
}

/* Refuse a line holding CR, control bytes, NUL or invalid UTF-8. */
static int check_bytes(parser_t *P) {
    const unsigned char *t = (const unsigned char *)P->text;
    for (size_t p = P->ls; p < P->le;) {
        unsigned c = t[p];
        if (c == '\r') return FAIL(P, p, "expected LF line endings, found CR");
        if (c == 0) return FAIL(P, p, "binary data (NUL byte); a policy file is UTF-8 text");
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return FAIL(P, p, "binary data (control byte 0x%02x); a policy file is UTF-8 text", c);
        if (c < 0x80) { p++; continue; }
        size_t n = ld_utf8_len(t + p, P->le - p);
        if (!n) return FAIL(P, p, "binary data (invalid UTF-8 byte 0x%02x); a policy file is "
                                  "UTF-8 text", c);
        p += n;
    }
    return 0;
}

/* ---- values ------------------------------------------------------------------------- */

/* Value text is [vs, ve): from the first non-blank after '=' to before '#' or the line's end,
 * trailing blanks removed. */

static int expect_end(parser_t *P, size_t p, size_t ve, const char *what) {
    if (p < ve) {
        char b[16];
        fmt_byte((unsigned char)P->text[p], b, sizeof b);
        return FAIL(P, p, "unexpected %s after %s; expected end of line or '#'", b, what);
    }
    return 0;
}

static int parse_enum(parser_t *P, int key, size_t vs, size_t ve, const char *const *words,
                      int n, int *out) {
    size_t e = vs;
    while (e < ve && !is_ws(P->text[e])) e++;
    int v = ld_pol_lookup(words, n, P->text + vs, e - vs);
    if (v < 0) {
        char choices[128];
        ld_pol_choices(words, n, choices, sizeof choices);
        return FAIL(P, vs, "bad value '%.*s' for %s, expected %s",
                    qlen(P->text + vs, e - vs), P->text + vs, kKeys[key].name, choices);
    }
    if (expect_end(P, skip_ws(P, e), ve, "the value") != 0) return -1;
    *out = v;
    return 0;
}

static int parse_size_value(parser_t *P, size_t vs, size_t ve, int allow_range,
                            uint64_t *lo, uint64_t *hi) {
    char why[160];
    size_t p = vs;
    uint64_t a, b;
    if (ld_pol_scan_size(P->text, ve, &p, &a, why, sizeof why) != 0) return FAIL(P, p, "%s", why);
    b = a;
    if (p + 1 < ve && P->text[p] == '.' && P->text[p + 1] == '.') {
        if (!allow_range)
            return FAIL(P, p, "a range is not allowed here; expected one size (e.g. 4MiB)");
        size_t bs = p + 2;
        p = bs;
        if (ld_pol_scan_size(P->text, ve, &p, &b, why, sizeof why) != 0)
            return FAIL(P, p, "%s", why);
        if (b < a) {
            char sa[32], sb[32];
            ld_pol_fmt_size(a, sa, sizeof sa);
            ld_pol_fmt_size(b, sb, sizeof sb);
            return FAIL(P, bs, "range end %s is smaller than its start %s", sb, sa);
        }
    } else if (p < ve && P->text[p] == '.') {
        return FAIL(P, p, "expected '..' between the ends of a size range");
    }
    if (expect_end(P, skip_ws(P, p), ve, "the size") != 0) return -1;
    *lo = a;
    *hi = b;
    return 0;
}

static int parse_occurrence(parser_t *P, size_t vs, size_t ve, ld_rule_t *r) {
    char why[160];
    size_t p = vs;
    int n = 0;
    for (;;) {
        p = skip_ws(P, p);
        if (p >= ve || !(P->text[p] >= '0' && P->text[p] <= '9'))
            return FAIL(P, p, "expected an occurrence number (1, 2, ...) or a range N-M");
        if (n == LD_MAX_OCC_RANGES)
            return FAIL(P, p, "too many occurrence items (at most %d)", LD_MAX_OCC_RANGES);
        size_t fs = p;
        uint64_t first, last;
        if (ld_pol_scan_uint(P->text, ve, &p, &first, why, sizeof why) != 0)
            return FAIL(P, p, "%s", why);
        if (first == 0) return FAIL(P, fs, "occurrences count from 1");
        last = first;
        if (p < ve && P->text[p] == '-') {
            size_t ls = ++p;
            if (ld_pol_scan_uint(P->text, ve, &p, &last, why, sizeof why) != 0)
                return FAIL(P, p, "%s", why);
            if (last < first)
                return FAIL(P, ls, "range end %llu is smaller than its start %llu",
                            (unsigned long long)last, (unsigned long long)first);
        }
        r->occ[n].first = first;
        r->occ[n].last = last;
        n++;
        p = skip_ws(P, p);
        if (p < ve && P->text[p] == ',') { p++; continue; }
        if (p < ve) {
            char b[16];
            fmt_byte((unsigned char)P->text[p], b, sizeof b);
            return FAIL(P, p, "unexpected %s in occurrence list; expected ',' between items "
                              "like 1,3,5-8", b);
        }
        break;
    }
    r->n_occ = n;
    return 0;
}

static int parse_placement(parser_t *P, size_t vs, size_t ve, ld_rule_t *r) {
    static const char kChoices[] = "split, domain:N (N in 0..7) or stock";
    const char *t = P->text;
    size_t e = vs;
    while (e < ve && !is_ws(t[e]) && t[e] != ':') e++;
    size_t wl = e - vs;
    if (wl == 5 && memcmp(t + vs, "split", 5) == 0) r->placement = LD_PLACE_SPLIT;
    else if (wl == 5 && memcmp(t + vs, "stock", 5) == 0) r->placement = LD_PLACE_STOCK;
    else if (wl == 6 && memcmp(t + vs, "domain", 6) == 0) {
        if (e >= ve || t[e] != ':') return FAIL(P, e, "expected ':N' after 'domain' (N in 0..7)");
        size_t d = e + 1;
        if (d >= ve || t[d] < '0' || t[d] > '9')
            return FAIL(P, d, "expected a domain number 0..7 after 'domain:'");
        if (t[d] > '7' || (d + 1 < ve && t[d + 1] >= '0' && t[d + 1] <= '9'))
            return FAIL(P, d, "domain number out of range, expected 0..7");
        r->placement = LD_PLACE_DOMAIN;
        r->domain = t[d] - '0';
        e = d + 1;
    } else {
        while (e < ve && !is_ws(t[e])) e++;
        return FAIL(P, vs, "bad value '%.*s' for placement, expected %s",
                    qlen(t + vs, e - vs), t + vs, kChoices);
    }
    return expect_end(P, skip_ws(P, e), ve, "the value");
}

static int parse_compute(parser_t *P, size_t vs, size_t ve, ld_compute_t *c) {
    size_t e = vs;
    while (e < ve && !is_ws(P->text[e])) e++;
    char why[160];
    size_t bad = 0;
    if (ld_compute_scan(P->text + vs, e - vs, c, &bad, why, sizeof why) != 0) return FAIL(P, vs + bad, "%s", why);
    return expect_end(P, skip_ws(P, e), ve, "the value");
}

static int parse_value(parser_t *P, int key, size_t vs, size_t ve) {
    ld_policy_t *g = &P->pol;
    ld_rule_t *r = &P->cur;
    uint64_t lo, hi;
    int v = 0;
    switch (key) {
    case K_STATE:
        if (parse_enum(P, key, vs, ve, ld_pol_state_words, LD_STATE_COUNT, &v) != 0) return -1;
        g->state = (ld_state_t)v;
        g->state_set = 1;
        return 0;
    case K_BACKEND:
        if (parse_enum(P, key, vs, ve, ld_pol_backend_words, 5, &v) != 0) return -1;
        g->backend = (ld_backend_kind_t)v;
        return 0;
    case K_PROBE:
        if (parse_enum(P, key, vs, ve, ld_pol_probe_words, 5, &v) != 0) return -1;
        g->probe = (ld_probe_mode_t)v;
        return 0;
    case K_MAP:
        if (parse_enum(P, key, vs, ve, ld_pol_map_words, 2, &v) != 0) return -1;
        g->map = (ld_map_mode_t)v;
        return 0;
    case K_TOPOLOGY_SOURCE:
        if (parse_enum(P, key, vs, ve, ld_pol_topology_source_words, 2, &v) != 0) return -1;
        g->topology_source = (ld_topology_source_t)v;
        return 0;
    case K_STRICT:
        if (parse_enum(P, key, vs, ve, ld_pol_onoff_words, 2, &v) != 0) return -1;
        g->strict = v;
        return 0;
    case K_POOL:
        if (parse_size_value(P, vs, ve, 0, &lo, &hi) != 0) return -1;
        g->pool_cap = lo;
        return 0;
    case K_MIN_SPLIT:
        if (parse_size_value(P, vs, ve, 0, &lo, &hi) != 0) return -1;
        g->min_split = lo;
        return 0;
    case K_COMPUTE:
        return parse_compute(P, vs, ve, &g->compute);
    case K_COMPUTE_SPLIT:
        if (parse_enum(P, key, vs, ve, ld_pol_split_words, 3, &v) != 0) return -1;
        g->compute_split = (ld_split_t)v;
        return 0;
    case K_COMPUTE_SMS: {
        char why[160];
        size_t p = vs;
        uint64_t k;
        if (ld_pol_scan_uint(P->text, ve, &p, &k, why, sizeof why) != 0) return FAIL(P, p, "%s", why);
        if (k > LDSHIM_COMPUTE_MAX_SMS)
            return FAIL(P, vs, "compute_sms %llu is more SMs than any GPU has (at most %d; 0: no cap)",
                        (unsigned long long)k, LDSHIM_COMPUTE_MAX_SMS);
        if (expect_end(P, skip_ws(P, p), ve, "the SM count") != 0) return -1;
        g->compute_sms = (uint32_t)k;
        return 0;
    }
    case K_DOMAIN: {
        char why[160];
        size_t p = vs;
        uint64_t d;
        if (ld_pol_scan_uint(P->text, ve, &p, &d, why, sizeof why) != 0) return FAIL(P, p, "%s", why);
        if (d > 7) return FAIL(P, vs, "domain %llu out of range, expected 0..7", (unsigned long long)d);
        if (expect_end(P, skip_ws(P, p), ve, "the domain number") != 0) return -1;
        g->domain = (int)d;
        g->domain_set = 1;
        return 0;
    }
    case K_SIZE:
        return parse_size_value(P, vs, ve, 1, &r->size_min, &r->size_max);
    case K_API:
        if (parse_enum(P, key, vs, ve, ld_pol_api_words, LD_API_COUNT, &v) != 0) return -1;
        r->api = (ld_api_t)v;
        return 0;
    case K_OCCURRENCE:
        return parse_occurrence(P, vs, ve, r);
    case K_PLACEMENT:
        return parse_placement(P, vs, ve, r);
    }
    return -1;
}

static const char *value_hint(int key) {
    switch (key) {
    case K_SIZE: return "a size such as 112MiB or 64MiB..1GiB";
    case K_POOL: case K_MIN_SPLIT: return "a size such as 4GiB";
    case K_OCCURRENCE: return "occurrence numbers such as 1,3,5-8";
    case K_PLACEMENT: return "split, domain:N (N in 0..7) or stock";
    case K_STATE: return "stock, memory, full, mismatch, memory-only, compute-only, full-ld, mismatch-ld or sm-control";
    case K_DOMAIN: return "a domain number 0..7";
    case K_BACKEND: return "auto, native, mlopart, emulated or off";
    case K_PROBE: return "auto, anchored, clustered, even or off";
    case K_MAP: return "balanced or physical";
    case K_TOPOLOGY_SOURCE: return "driver or probe";
    case K_STRICT: return "on or off";
    case K_COMPUTE: return "all, domain:N or spread:K";
    case K_COMPUTE_SPLIT: return "aligned, fine or backfill";
    case K_COMPUTE_SMS: return "an SM count such as 56 (0: no cap)";
    default: return "any, runtime, driver, async, vmm, pitch or managed";
    }
}

/* ---- lines ---------------------------------------------------------------------------- */

static int key_value_line(parser_t *P, size_t p) {
    const char *t = P->text;
    size_t ks = p;
    while (p < P->le && is_keych(t[p])) p++;
    if (p == ks) {
        char b[16];
        fmt_byte((unsigned char)t[ks], b, sizeof b);
        return FAIL(P, ks, "unexpected %s; expected a key, a [rule NAME] header or '#'", b);
    }
    size_t kl = p - ks;
    int key = -1;
    for (int k = 0; k < K_COUNT; k++)
        if (strlen(kKeys[k].name) == kl && memcmp(kKeys[k].name, t + ks, kl) == 0) key = k;
    int ql = qlen(t + ks, kl);
    if (key < 0) {
        if (P->in_rule)
            return FAIL(P, ks, "unknown key '%.*s' in [rule %s], expected one of: %s", ql,
                        t + ks, P->cur.name, kRuleKeys);
        return FAIL(P, ks, "unknown key '%.*s', expected one of: %s (or a [rule NAME] "
                           "section)", ql, t + ks, kGlobalKeys);
    }
    if (P->in_rule && !kKeys[key].rule)
        return FAIL(P, ks, "'%s' is a global option: set it before the first [rule]; "
                           "rule keys are: %s", kKeys[key].name, kRuleKeys);
    if (!P->in_rule && kKeys[key].rule)
        return FAIL(P, ks, "'%s' belongs in a [rule NAME] section; global keys are: %s",
                    kKeys[key].name, kGlobalKeys);
    if (P->key_line[key])
        return FAIL(P, ks, "duplicate key '%s' (already set on line %d)", kKeys[key].name,
                    P->key_line[key]);
    p = skip_ws(P, p);
    if (p >= P->le || t[p] != '=') {
        if (p >= P->le || t[p] == '#')
            return FAIL(P, p, "expected '=' after '%s'", kKeys[key].name);
        char b[16];
        fmt_byte((unsigned char)t[p], b, sizeof b);
        return FAIL(P, p, "expected '=' after '%s', found %s", kKeys[key].name, b);
    }
    size_t vs = skip_ws(P, p + 1);
    size_t ve = vs;
    while (ve < P->le && t[ve] != '#') ve++;
    while (ve > vs && is_ws(t[ve - 1])) ve--;
    if (vs == ve) return FAIL(P, vs, "expected %s after '%s ='", value_hint(key), kKeys[key].name);
    if (parse_value(P, key, vs, ve) != 0) return -1;
    P->key_line[key] = P->line;
    P->cur_nkeys++;
    return 0;
}

static int overlaps(const ld_rule_t *a, const ld_rule_t *b) {
    int api = a->api == LD_API_ANY || b->api == LD_API_ANY || a->api == b->api;
    return api && a->size_min <= b->size_max && b->size_min <= a->size_max;
}

/* End of a [rule] section: check it and append it to the policy. */
static int finish_rule(parser_t *P) {
    if (!P->in_rule) return 0;
    ld_rule_t *r = &P->cur;
    if (P->cur_nkeys == 0)
        return fail_at(P, r->line, P->cur_col, "empty rule '%s': expected 'size = ...' and "
                       "optionally api, occurrence, placement", r->name);
    if (!P->key_line[K_SIZE])
        return fail_at(P, r->line, P->cur_col, "rule '%s' has no size: expected 'size = ...'",
                       r->name);
    for (int i = 0; i < P->pol.n_rules; i++) {
        const ld_rule_t *o = &P->pol.rules[i];
        if (!overlaps(r, o)) continue;
        char sr[80], so[80];
        ld_pol_fmt_range(r->size_min, r->size_max, sr, sizeof sr);
        ld_pol_fmt_range(o->size_min, o->size_max, so, sizeof so);
        return fail_at(P, r->line, P->cur_col, "rule '%s' overlaps rule '%s' (line %d): sizes "
                       "%s and %s, apis %s and %s", r->name, o->name, o->line, sr, so,
                       ld_api_name(r->api), ld_api_name(o->api));
    }
    if (P->pol.n_rules == P->cap) {
        int ncap = P->cap ? P->cap * 2 : 8;
        ld_rule_t *nr = realloc(P->pol.rules, (size_t)ncap * sizeof *nr);
        if (!nr) return fail_at(P, r->line, P->cur_col, "out of memory reading the rules");
        P->pol.rules = nr;
        P->cap = ncap;
    }
    P->pol.rules[P->pol.n_rules++] = *r;
    P->in_rule = 0;
    return 0;
}

static int header_line(parser_t *P, size_t p) {
    const char *t = P->text;
    if (finish_rule(P) != 0) return -1;
    p = skip_ws(P, p + 1);
    size_t ws = p;
    while (p < P->le && is_keych(t[p])) p++;
    if (p == ws) return FAIL(P, ws, "expected a section name: [rule NAME]");
    if (p - ws != 4 || memcmp(t + ws, "rule", 4) != 0)
        return FAIL(P, ws, "unknown section '%.*s', expected [rule NAME]",
                    qlen(t + ws, p - ws), t + ws);
    size_t after = p;
    p = skip_ws(P, p);
    if (p == after && p < P->le && t[p] != ']') {
        char b[16];
        fmt_byte((unsigned char)t[p], b, sizeof b);
        return FAIL(P, p, "unexpected %s; expected a blank and a name after 'rule'", b);
    }
    size_t ns = p;
    while (p < P->le && is_namech(t[p])) p++;
    size_t nl = p - ns;
    if (nl == 0) {
        if (p < P->le && t[p] != ']') {
            char b[16];
            fmt_byte((unsigned char)t[p], b, sizeof b);
            return FAIL(P, p, "invalid character %s in a rule name; names use A-Z a-z 0-9 "
                              "_ . - (1 to %d characters)", b, LD_RULE_NAME_MAX - 1);
        }
        return FAIL(P, p, "expected a rule name after 'rule'");
    }
    if (nl > LD_RULE_NAME_MAX - 1)
        return FAIL(P, ns + LD_RULE_NAME_MAX - 1, "rule name longer than %d characters",
                    LD_RULE_NAME_MAX - 1);
    if (p < P->le && !is_ws(t[p]) && t[p] != ']') {
        char b[16];
        fmt_byte((unsigned char)t[p], b, sizeof b);
        return FAIL(P, p, "invalid character %s in a rule name; names use A-Z a-z 0-9 _ . -",
                    b);
    }
    p = skip_ws(P, p);
    if (p >= P->le || t[p] != ']') return FAIL(P, p, "expected ']' after the rule name");
    p = skip_ws(P, p + 1);
    if (p < P->le && t[p] != '#') {
        char b[16];
        fmt_byte((unsigned char)t[p], b, sizeof b);
        return FAIL(P, p, "unexpected %s after ']'; expected end of line or '#'", b);
    }
    for (int i = 0; i < P->pol.n_rules; i++)
        if (strlen(P->pol.rules[i].name) == nl && memcmp(P->pol.rules[i].name, t + ns, nl) == 0)
            return FAIL(P, ns, "duplicate rule name '%.*s' (first defined on line %d)", (int)nl,
                        t + ns, P->pol.rules[i].line);
    if (P->pol.n_rules >= LD_POLICY_MAX_RULES)
        return FAIL(P, ns, "too many rules (at most %d)", LD_POLICY_MAX_RULES);
    memset(&P->cur, 0, sizeof P->cur);
    memcpy(P->cur.name, t + ns, nl);
    P->cur.api = LD_API_ANY;
    P->cur.placement = LD_PLACE_SPLIT;
    P->cur.line = P->line;
    P->cur_col = (int)(ns - P->ls) + 1;
    P->cur_nkeys = 0;
    memset(P->key_line, 0, sizeof P->key_line);
    P->in_rule = 1;
    return 0;
}

static int parse_line(parser_t *P) {
    if (check_bytes(P) != 0) return -1;
    size_t p = skip_ws(P, P->ls);
    if (p >= P->le || P->text[p] == '#') return 0;
    if (P->text[p] == '[') return header_line(P, p);
    return key_value_line(P, p);
}

/* Line and column of byte `off`, for the size-limit message. */
static void locate(const char *t, size_t off, int *line, int *col) {
    int l = 1;
    size_t ls = 0;
    for (size_t i = 0; i < off; i++)
        if (t[i] == '\n') { l++; ls = i + 1; }
    *line = l;
    *col = (int)(off - ls) + 1;
}

/* After an error: is `strict = on` set by a valid line of the global section? The lines
 * before the error were read already (P->pol.strict); read on through the rest of the global
 * section (up to the first [rule] header), checking each line as a good file's would be, so
 * that `# ... strict = on` or `strict = on_purpose` never counts. Messages are discarded. */
static int recover_strict(parser_t *P, size_t pos) {
    size_t el = P->ls;
    while (el < P->len && is_ws(P->text[el])) el++;
    int stop = P->in_rule || (el < P->len && P->text[el] == '[');   /* the error ended the section */
    P->err = NULL;
    P->errlen = 0;
    while (!stop && pos < P->len) {
        P->line++;
        P->ls = pos;
        const char *nl = memchr(P->text + pos, '\n', P->len - pos);
        P->le = nl ? (size_t)(nl - P->text) : P->len;
        pos = P->le + 1;
        if (check_bytes(P) != 0) continue;
        size_t p = skip_ws(P, P->ls);
        if (p >= P->le || P->text[p] == '#') continue;
        if (P->text[p] == '[') break;
        (void)key_value_line(P, p);
    }
    return P->pol.strict;
}

void ld_policy_init(ld_policy_t *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->state = LD_STATE_FULL;
    p->backend = LD_BACKEND_AUTO;
    p->probe = LD_PROBE_AUTO;
    p->map = LD_MAP_BALANCED;
    p->topology_source = LD_TOPOLOGY_SOURCE_DRIVER;
    p->strict = 0;
    p->pool_cap = UINT64_C(4) << 30;
    p->min_split = UINT64_C(4) << 20;
}

void ld_policy_free(ld_policy_t *p) {
    if (!p) return;
    free(p->rules);
    ld_policy_init(p);
}

int ld_policy_parse(const char *text, size_t len, const char *fname, ld_policy_t *out,
                    char *err, size_t errlen) {
    parser_t P;
    memset(&P, 0, sizeof P);
    P.fname = fname ? fname : "<policy>";
    P.err = err;
    P.errlen = errlen;
    P.text = text ? text : "";
    P.len = text ? len : 0;
    if (err && errlen) err[0] = '\0';
    if (out) ld_policy_init(out);
    ld_policy_init(&P.pol);
    if (!out) return fail_at(&P, 0, 0, "internal error: no output policy");
    if (P.len > LD_POLICY_MAX_BYTES) {
        int l, c;
        locate(P.text, LD_POLICY_MAX_BYTES, &l, &c);
        return fail_at(&P, l, c, "file larger than 1 MiB (the limit is %d bytes)",
                       LD_POLICY_MAX_BYTES);   /* nothing was read: strict stays off */
    }
    int rc = 0;
    size_t pos = 0;
    P.line = 0;
    while (rc == 0 && pos < P.len) {
        P.line++;
        P.ls = pos;
        const char *nl = memchr(P.text + pos, '\n', P.len - pos);
        P.le = nl ? (size_t)(nl - P.text) : P.len;
        rc = parse_line(&P);
        pos = P.le + 1;
    }
    if (rc == 0) rc = finish_rule(&P);
    if (rc != 0) {
        int strict = recover_strict(&P, pos);
        free(P.pol.rules);
        out->strict = strict;
        return -1;
    }
    ld_policy_sort(&P.pol);
    *out = P.pol;
    return 0;
}
