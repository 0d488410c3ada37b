/* compute_plan.c — choose SM groups for a compute placement; the SM-group cache format
 * (contract: compute_plan.h). */
#include "shim/compute_plan.h"
#include "shim/probe_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GROUPS_MAGIC "ldshim-smgroups"
#define GROUPS_FORMAT 1

uint32_t ld_smmask_count(const ld_smmask_t *m) {
    uint32_t n = 0;
    for (size_t i = 0; i < sizeof m->w / sizeof m->w[0]; i++) n += (uint32_t)__builtin_popcountll(m->w[i]);
    return n;
}

const char *ld_smmask_format(const ld_smmask_t *m, char *buf, size_t n) {
    size_t k = 0;
    if (!n) return buf;
    buf[0] = 0;
    for (uint32_t s = 0; s < LDSHIM_MAX_SMS; s++) {
        if (!ld_smmask_has(m, s)) continue;
        uint32_t e = s;
        while (e + 1 < LDSHIM_MAX_SMS && ld_smmask_has(m, e + 1)) e++;
        int w = e == s ? snprintf(buf + k, n - k, "%s%u", k ? "," : "", s)
                       : snprintf(buf + k, n - k, "%s%u-%u", k ? "," : "", s, e);
        if (w < 0 || (size_t)w >= n - k) { buf[k] = 0; break; }
        k += (size_t)w;
        s = e;
    }
    return buf;
}

int ld_sm_group_domain(const ld_sm_groups_t *g, int i, const uint8_t *map, uint32_t num_sms) {
    if (g->domain[i] >= 0) return g->domain[i];
    int d = -1;
    for (uint32_t s = 0; s < num_sms; s++) {
        if (!ld_smmask_has(&g->sms[i], s)) continue;
        if (d < 0) d = map[s];
        else if (d != map[s]) return -1;
    }
    return d;
}

static void add_group(ld_compute_plan_t *p, const ld_sm_groups_t *g, int i, const uint8_t *map, uint32_t num_sms,
                      int want) {
    p->group[p->ngroups++] = i;
    for (size_t w = 0; w < sizeof p->sms.w / sizeof p->sms.w[0]; w++) p->sms.w[w] |= g->sms[i].w[w];
    p->count += g->count[i];
    /* A driver-labelled group counts as wholly in its domain, whatever the map says. */
    if (g->domain[i] >= 0) {
        p->per_domain[g->domain[i]] += g->count[i];
        if (want >= 0 && g->domain[i] != want) p->outside += g->count[i];
        return;
    }
    for (uint32_t s = 0; s < num_sms; s++) {
        if (!ld_smmask_has(&g->sms[i], s)) continue;
        if (map[s] < LDSHIM_MAX_DOMAINS) p->per_domain[map[s]]++;
        if (want >= 0 && map[s] != want) p->outside++;
    }
}

static int fail(ld_compute_plan_t *p, const char *fmt, const char *a, long x, long y) {
    p->ok = 0;
    snprintf(p->why, sizeof p->why, fmt, a, x, y);
    return -1;
}

/* SMs of group i that map to domain d (labelled groups: all or none). */
static uint32_t in_domain(const ld_sm_groups_t *g, int i, int d, const uint8_t *map, uint32_t num_sms) {
    if (g->domain[i] >= 0) return g->domain[i] == d ? g->count[i] : 0;
    uint32_t n = 0;
    for (uint32_t s = 0; s < num_sms; s++) n += ld_smmask_has(&g->sms[i], s) && map[s] == d;
    return n;
}

int ld_compute_plan(const ld_compute_t *req, ld_split_t method, uint32_t cap, const uint8_t *map,
                    uint32_t num_sms, uint32_t num_domains, const ld_sm_groups_t *g,
                    ld_compute_plan_t *out) {
    memset(out, 0, sizeof *out);
    char desc[32];
    ld_compute_format(req, desc, sizeof desc);
    if (req->kind == LD_COMPUTE_ALL) return fail(out, "%s: nothing to bind", desc, 0, 0);
    if (num_domains < 2 || num_domains > LDSHIM_MAX_DOMAINS)
        return fail(out, "%s: the GPU shows %ld locality domain(s)", desc, (long)num_domains, 0);
    if (g->ngroups <= 0) return fail(out, "%s: the SM split gave no group", desc, 0, 0);
    uint8_t used[LD_MAX_SM_GROUPS] = {0};

    if (req->kind == LD_COMPUTE_DOMAIN) {
        int want = req->domain;
        if (want < 0 || (uint32_t)want >= num_domains)
            return fail(out, "%s: no such domain (the GPU has %ld domains, 0..%ld)", desc, (long)num_domains,
                        (long)num_domains - 1);
        uint32_t limit = cap ? cap : 0;
        for (int i = 0; i < g->ngroups; i++) {
            if (ld_sm_group_domain(g, i, map, num_sms) != want) continue;
            if (limit && out->count + g->count[i] > limit) continue;
            add_group(out, g, i, map, num_sms, want);
            used[i] = 1;
        }
        if (method == LD_SPLIT_BACKFILL) {
            /* Top up to an even share (or the cap) with the groups holding most of domain N. */
            uint32_t target = cap ? cap : num_sms / num_domains;
            for (;;) {
                int best = -1;
                uint32_t best_in = 0;
                for (int i = 0; i < g->ngroups; i++) {
                    if (used[i] || out->count + g->count[i] > target) continue;
                    uint32_t k = in_domain(g, i, want, map, num_sms);
                    if (best < 0 || k * g->count[best] > best_in * g->count[i]) { best = i; best_in = k; }
                }
                if (best < 0) break;
                add_group(out, g, best, map, num_sms, want);
                used[best] = 1;
            }
        }
        if (!out->ngroups) {
            if (cap)
                return fail(out, "%s: no SM group of domain %ld fits compute_sms = %ld", desc, want, (long)cap);
            return fail(out, "%s: no SM group lies wholly in domain %ld (the split's groups straddle the domains)",
                        desc, want, 0);
        }
        out->ok = 1;
        snprintf(out->why, sizeof out->why, "%s: %d group(s), %u SMs%s", desc, out->ngroups, out->count,
                 out->outside ? " (backfilled from outside the domain)" : "");
        return 0;
    }

    /* spread:K */
    uint32_t K = req->sms;
    if (K > num_sms) return fail(out, "%s: the GPU has %ld SMs", desc, (long)num_sms, 0);
    for (int progress = 1; progress && out->count < K;) {
        progress = 0;
        for (uint32_t d = 0; d < num_domains && out->count < K; d++) {
            for (int i = 0; i < g->ngroups; i++) {
                if (used[i] || ld_sm_group_domain(g, i, map, num_sms) != (int)d) continue;
                if (out->count + g->count[i] > K) continue;
                add_group(out, g, i, map, num_sms, -1);
                used[i] = 1;
                progress = 1;
                break;
            }
        }
    }
    uint32_t domains_used = 0;
    for (uint32_t d = 0; d < num_domains; d++) domains_used += out->per_domain[d] > 0;
    if (!out->ngroups) return fail(out, "%s: no single-domain SM group fits %ld SMs", desc, (long)K, 0);
    if (domains_used < 2)
        return fail(out, "%s: only one domain has single-domain SM groups that fit (%ld SMs taken); a spread "
                    "needs several", desc, (long)out->count, 0);
    out->ok = 1;
    int w = snprintf(out->why, sizeof out->why, "%s: %d group(s), %u SMs (", desc, out->ngroups, out->count);
    for (uint32_t d = 0; d < num_domains && w > 0 && (size_t)w < sizeof out->why; d++)
        w += snprintf(out->why + w, sizeof out->why - (size_t)w, "%s%u in domain %u", d ? ", " : "",
                      out->per_domain[d], d);
    if (w > 0 && (size_t)w < sizeof out->why)
        snprintf(out->why + w, sizeof out->why - (size_t)w, ")%s", out->count < K ? "; fewer than asked" : "");
    return 0;
}

int ld_sm_groups_check(const ld_sm_groups_t *g, uint32_t num_sms, char *why, size_t n) {
    ld_smmask_t seen;
    memset(&seen, 0, sizeof seen);
    if (g->ngroups < 0 || g->ngroups > LD_MAX_SM_GROUPS) { snprintf(why, n, "%d groups", g->ngroups); return -1; }
    for (int i = 0; i <= g->ngroups; i++) {
        const ld_smmask_t *m = i < g->ngroups ? &g->sms[i] : &g->rem_sms;
        uint32_t want = i < g->ngroups ? g->count[i] : g->rem_count;
        if (i == g->ngroups && !g->has_remainder) break;
        if (ld_smmask_count(m) != want) {
            snprintf(why, n, "%s %d holds %u SMs, the driver says %u", i < g->ngroups ? "group" : "remainder", i,
                     ld_smmask_count(m), want);
            return -1;
        }
        for (uint32_t s = 0; s < LDSHIM_MAX_SMS; s++) {
            if (!ld_smmask_has(m, s)) continue;
            if (s >= num_sms) { snprintf(why, n, "SM %u beyond the %u SMs of the GPU", s, num_sms); return -1; }
            if (ld_smmask_has(&seen, s)) { snprintf(why, n, "SM %u in two groups", s); return -1; }
            ld_smmask_set(&seen, s);
        }
    }
    return 0;
}

/* ---- cache file -------------------------------------------------------------------------- */

static void safe_copy(char *dst, size_t n, const char *src) {
    size_t j = 0;
    for (size_t i = 0; src[i] && j + 1 < n; i++) {
        char c = src[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
        dst[j++] = ok ? c : '_';
    }
    dst[j] = 0;
}

int ld_groups_cache_name(const ld_groups_key_t *key, char *out, size_t n) {
    char uuid[sizeof key->uuid], split[sizeof key->split];
    safe_copy(uuid, sizeof uuid, key->uuid);
    safe_copy(split, sizeof split, key->split);
    int len = snprintf(out, n, "smgroups-%s-%d-%s.txt", uuid[0] ? uuid : "unknown", key->driver_version, split);
    return len < 0 || (size_t)len >= n ? -1 : 0;
}

static int put_mask(char *buf, size_t n, const ld_smmask_t *m) {
    int k = 0;
    for (int i = (int)(sizeof m->w / sizeof m->w[0]) - 1; i >= 0; i--) {
        int w = snprintf(buf + k, n - (size_t)k, "%016llx", (unsigned long long)m->w[i]);
        if (w < 0 || (size_t)w >= n - (size_t)k) return -1;
        k += w;
    }
    return k;
}

int ld_groups_cache_format(const ld_groups_key_t *key, const ld_sm_groups_t *g, char *buf, size_t n) {
    int k = snprintf(buf, n, GROUPS_MAGIC " %d\nuuid %s\ndriver %d\nnum_sms %u\nsplit %s\ngroups %d\n", GROUPS_FORMAT,
                     key->uuid, key->driver_version, key->num_sms, key->split, g->ngroups);
    if (k < 0 || (size_t)k >= n) return -1;
    for (int i = 0; i <= g->ngroups; i++) {
        if (i == g->ngroups && !g->has_remainder) break;
        int w = i < g->ngroups ? snprintf(buf + k, n - (size_t)k, "g %u %d ", g->count[i], g->domain[i])
                               : snprintf(buf + k, n - (size_t)k, "rem %u -1 ", g->rem_count);
        if (w < 0 || (size_t)w >= n - (size_t)k) return -1;
        k += w;
        if ((w = put_mask(buf + k, n - (size_t)k, i < g->ngroups ? &g->sms[i] : &g->rem_sms)) < 0) return -1;
        k += w;
        if ((size_t)k + 1 >= n) return -1;
        buf[k++] = '\n';
        buf[k] = 0;
    }
    int w = snprintf(buf + k, n - (size_t)k, "checksum %016llx\n", (unsigned long long)ld_cache_checksum(buf, (size_t)k));
    if (w < 0 || (size_t)w >= n - (size_t)k) return -1;
    return k + w;
}

static int parse_mask(const char *s, ld_smmask_t *m) {
    size_t words = sizeof m->w / sizeof m->w[0];
    if (strlen(s) != words * 16) return -1;
    for (size_t i = 0; i < words; i++) {
        char part[17];
        memcpy(part, s + i * 16, 16);
        part[16] = 0;
        char *end;
        unsigned long long v = strtoull(part, &end, 16);
        if (*end) return -1;
        m->w[words - 1 - i] = v;
    }
    return 0;
}

#define BAD(...) do { snprintf(why, n, __VA_ARGS__); return -1; } while (0)

int ld_groups_cache_parse(char *text, size_t len, const ld_groups_key_t *key, ld_sm_groups_t *g, char *why,
                          size_t n) {
    memset(g, 0, sizeof *g);
    if (len == 0 || text[len - 1] != '\n') BAD("truncated");
    char *ck = NULL;
    for (char *p = text + len - 1; p > text; p--)
        if (p[-1] == '\n') { ck = p; break; }
    if (!ck || strncmp(ck, "checksum ", 9)) BAD("no checksum line");
    unsigned long long want = strtoull(ck + 9, NULL, 16);
    if (want != (unsigned long long)ld_cache_checksum(text, (size_t)(ck - text))) BAD("corrupted (checksum mismatch)");
    *ck = 0;
    int fmt = 0, drv = 0, ng = -1, got = 0;
    unsigned nsms = 0;
    char uuid[64], split[64];
    char *save = NULL;
    char *line = strtok_r(text, "\n", &save);
    if (!line || sscanf(line, GROUPS_MAGIC " %d", &fmt) != 1 || fmt != GROUPS_FORMAT) BAD("foreign (format)");
    if (!(line = strtok_r(NULL, "\n", &save)) || sscanf(line, "uuid %63s", uuid) != 1 || strcmp(uuid, key->uuid))
        BAD("foreign (other GPU)");
    if (!(line = strtok_r(NULL, "\n", &save)) || sscanf(line, "driver %d", &drv) != 1 || drv != key->driver_version)
        BAD("foreign (other driver)");
    if (!(line = strtok_r(NULL, "\n", &save)) || sscanf(line, "num_sms %u", &nsms) != 1 || nsms != key->num_sms)
        BAD("stale (other SM count)");
    if (!(line = strtok_r(NULL, "\n", &save)) || sscanf(line, "split %63s", split) != 1 || strcmp(split, key->split))
        BAD("foreign (other split)");
    if (!(line = strtok_r(NULL, "\n", &save)) || sscanf(line, "groups %d", &ng) != 1 || ng < 1 ||
        ng > LD_MAX_SM_GROUPS)
        BAD("corrupted (group count)");
    g->ngroups = ng;
    while ((line = strtok_r(NULL, "\n", &save))) {
        char kind[8], mask[80];
        unsigned count;
        int dom;
        if (sscanf(line, "%7s %u %d %79s", kind, &count, &dom, mask) != 4 || dom < -1 || dom >= LDSHIM_MAX_DOMAINS)
            BAD("corrupted (line '%.40s')", line);
        if (!strcmp(kind, "g") && got < ng) {
            g->count[got] = count;
            g->domain[got] = (int8_t)dom;
            if (parse_mask(mask, &g->sms[got])) BAD("corrupted (mask of group %d)", got);
            got++;
        } else if (!strcmp(kind, "rem") && got == ng && !g->has_remainder) {
            g->has_remainder = 1;
            g->rem_count = count;
            if (parse_mask(mask, &g->rem_sms)) BAD("corrupted (mask of the remainder)");
        } else {
            BAD("corrupted (unexpected '%s' line)", kind);
        }
    }
    if (got != ng) BAD("truncated (%d of %d groups)", got, ng);
    char w2[160];
    if (ld_sm_groups_check(g, nsms, w2, sizeof w2)) BAD("inconsistent (%s)", w2);
    return 0;
}
