/* probe_cache.c — per-GPU topology cache: resolve the directory, write atomically, read
 * back with every field and the checksum checked. See probe_cache.h for the format. */
#include "shim/probe_cache.h"
#include "shim/file.h"
#include "shim/options.h"
#include "shim/probe_classify.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CACHE_MAGIC "ldshim-topology-cache"
#define CACHE_MAX_BYTES 8192   /* a full entry for 256 SMs is ~1.2 KB */

uint64_t ld_cache_checksum(const char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)p[i]; h *= 0x100000001b3ull; }
    return h;
}

int ld_cache_dir(const char *opt, char *out, size_t n) {
    const char *e;
    int len;
    if (opt && *opt) len = snprintf(out, n, "%s", opt);
    else if ((e = ld_opt(LD_OPT_CACHE_DIR))) len = snprintf(out, n, "%s", e);
    /* The start-time copies (options.h): a relative one reads as unset, so the cache never
     * lands wherever the program chdir'd to before its first context. */
    else if ((e = ld_env(LD_ENV_XDG_CACHE_HOME))) len = snprintf(out, n, "%s/ldshim", e);
    else if ((e = ld_env(LD_ENV_HOME))) len = snprintf(out, n, "%s/.cache/ldshim", e);
    else return -1;
    return (len < 0 || (size_t)len >= n) ? -1 : 0;
}

/* The UUID goes into a file name: keep [A-Za-z0-9-] only. */
int ld_cache_path(const char *dir, const ld_cache_key_t *key, char *out, size_t n) {
    char safe[sizeof key->uuid];
    size_t j = 0;
    for (size_t i = 0; key->uuid[i] && j + 1 < sizeof safe; i++) {
        char c = key->uuid[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
        safe[j++] = ok ? c : '_';
    }
    safe[j] = 0;
    int len = snprintf(out, n, "%s/topology-%s-%d.txt", dir, j ? safe : "unknown", key->driver_version);
    return (len < 0 || (size_t)len >= n) ? -1 : 0;
}

static const char *mode_word(ld_probe_mode_t m) {
    switch (m) {
    case LD_PROBE_ANCHORED: return "anchored";
    case LD_PROBE_CLUSTERED: return "clustered";
    case LD_PROBE_EVEN: return "even";
    default: return "other";
    }
}

static int map_chars(char *dst, const uint8_t *map, uint32_t n) {
    for (uint32_t s = 0; s < n; s++) {
        if (map[s] >= LDSHIM_MAX_DOMAINS) return -1;
        dst[s] = (char)('0' + map[s]);
    }
    dst[n] = 0;
    return 0;
}

int ld_cache_store(const char *dir, const ld_cache_key_t *key, const ld_probe_result_t *r,
                   char *why, size_t n) {
    char path[4096], phys[LDSHIM_MAX_SMS + 1], bal[LDSHIM_MAX_SMS + 1];
    char body[CACHE_MAX_BYTES];
    if (r->num_sms == 0 || r->num_sms > LDSHIM_MAX_SMS || map_chars(phys, r->physical, r->num_sms) ||
        map_chars(bal, r->balanced, r->num_sms)) {
        snprintf(why, n, "refusing to cache a result with %u SMs or a domain id >= %d", r->num_sms,
                 LDSHIM_MAX_DOMAINS);
        return -1;
    }
    if (ld_cache_path(dir, key, path, sizeof path)) { snprintf(why, n, "cache path too long"); return -1; }
    /* The verdict is free text on one line: drop newlines. */
    char verdict[sizeof r->verdict];
    snprintf(verdict, sizeof verdict, "%s", r->verdict);
    for (char *c = verdict; *c; c++) if (*c == '\n' || *c == '\r') *c = ' ';
    int len = snprintf(body, sizeof body,
                       CACHE_MAGIC " %d\nuuid %s\ndriver %d\nkmod %s\ntopology_version %u\n"
                       "num_sms %u\nnum_domains %u\nmode %s\nvalid %d\nattempts %d\n"
                       "near %.3f\nfar %.3f\nseparation %.5f\ntpcs_moved %d\n"
                       "physical %s\nbalanced %s\nverdict %s\n",
                       LD_CACHE_FORMAT, key->uuid, key->driver_version, key->kmod[0] ? key->kmod : "-",
                       LDSHIM_TOPOLOGY_VERSION, r->num_sms, r->num_domains, mode_word(r->mode_used),
                       r->valid, r->attempts, r->near_cycles, r->far_cycles, r->separation,
                       r->tpcs_moved, phys, bal, verdict);
    if (len < 0 || (size_t)len + 40 >= sizeof body) { snprintf(why, n, "cache entry too large"); return -1; }
    len += snprintf(body + len, sizeof body - (size_t)len, "checksum %016llx\n",
                    (unsigned long long)ld_cache_checksum(body, (size_t)len));
    return ld_cache_write_file(dir, path, body, (size_t)len, why, n);
}

/* ---- file I/O ---------------------------------------------------------------------- */

/* NOTES: a cache file decides what the shim publishes to kernels, so it is trusted only
 * when nobody else could have written it, the way ssh treats ~/.ssh: the directory must be
 * ours and writable by nobody else, the file a regular file of ours, writable by nobody
 * else, not a symbolic link (LD_FILE_TRUSTED of the file layer, shim/file.h). */

int ld_cache_write_file(const char *dir, const char *path, const char *data, size_t len, char *why, size_t n) {
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/') dl--;
    const char *rest = strncmp(path, dir, dl) == 0 ? path + dl : NULL;   /* path is at least dl long */
    while (rest && *rest == '/') rest++;
    if (!rest || rest == path + dl || !*rest || strchr(rest, '/')) {
        snprintf(why, n, "%s: not a file directly inside %s", path, dir);
        return -1;
    }
    char w[300];
    int dfd = ld_file_open_dir(dir, LD_FILE_MKDIR, w, sizeof w);
    if (dfd < 0) { snprintf(why, n, "%s: %s", dir, w); return -1; }
    int rc = ld_file_write_at(dfd, rest, data, len, LD_FILE_PRIVATE, w, sizeof w);
    close(dfd);
    if (rc) snprintf(why, n, "cannot write %s: %s", path, w);
    return rc;
}

/* ---- reading ----------------------------------------------------------------------- */

typedef struct { char *p, *end; int line; } cursor_t;

/* Next line's value for `key` ("key value\n"), NUL-terminated in place; NULL on mismatch. */
static char *field(cursor_t *c, const char *key) {
    size_t kl = strlen(key);
    if (c->p >= c->end) return NULL;
    char *nl = memchr(c->p, '\n', (size_t)(c->end - c->p));
    if (!nl) return NULL;
    c->line++;
    if ((size_t)(nl - c->p) < kl + 1 || memcmp(c->p, key, kl) || c->p[kl] != ' ') return NULL;
    char *v = c->p + kl + 1;
    *nl = 0;
    c->p = nl + 1;
    return v;
}

static int parse_u(const char *s, long lo, long hi, long *out) {
    char *e;
    errno = 0;
    long v = strtol(s, &e, 10);
    if (errno || e == s || *e || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_d(const char *s, double *out) {
    char *e;
    errno = 0;
    double v = strtod(s, &e);
    if (errno || e == s || *e || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static int parse_map(const char *s, uint32_t nsms, uint32_t nd, uint8_t *map) {
    if (strlen(s) != nsms) return -1;
    for (uint32_t i = 0; i < nsms; i++) {
        if (s[i] < '0' || (uint32_t)(s[i] - '0') >= nd) return -1;
        map[i] = (uint8_t)(s[i] - '0');
    }
    return 0;
}

#define BAD(...) do { snprintf(why, n, __VA_ARGS__); return LD_CACHE_BAD; } while (0)

static int parse_entry(char *buf, size_t len, const char *path, const ld_cache_key_t *key,
                       ld_probe_result_t *r, char *why, size_t n) {
    /* Checksum first: the last line covers every byte before it. */
    if (len < 2 || buf[len - 1] != '\n') BAD("%s: truncated (no final newline)", path);
    char *last = buf + len - 1;
    while (last > buf && last[-1] != '\n') last--;
    unsigned long long want;
    char tail[64];
    size_t tl = (size_t)(buf + len - last);
    if (tl >= sizeof tail) BAD("%s: truncated or corrupted (bad last line)", path);
    memcpy(tail, last, tl);
    tail[tl] = 0;
    if (sscanf(tail, "checksum %16llx\n", &want) != 1) BAD("%s: truncated (no checksum line)", path);
    if (ld_cache_checksum(buf, (size_t)(last - buf)) != want) BAD("%s: corrupted (checksum mismatch)", path);

    cursor_t c = { buf, last, 0 };
    char *v;
    long x;
    if (!(v = field(&c, CACHE_MAGIC))) BAD("%s: not an ldshim topology cache", path);
    if (parse_u(v, 0, 1 << 30, &x) || x != LD_CACHE_FORMAT)
        BAD("%s: foreign (cache format %s, this library reads %d)", path, v, LD_CACHE_FORMAT);
    if (!(v = field(&c, "uuid"))) BAD("%s:%d: expected uuid", path, c.line);
    if (strcmp(v, key->uuid)) BAD("%s: foreign (written for %s, this GPU is %s)", path, v, key->uuid);
    if (!(v = field(&c, "driver")) || parse_u(v, 0, 1L << 30, &x)) BAD("%s:%d: expected driver", path, c.line);
    if (x != key->driver_version)
        BAD("%s: foreign (written under driver %ld, this is %d)", path, x, key->driver_version);
    if (!(v = field(&c, "kmod"))) BAD("%s:%d: expected kmod", path, c.line);
    if (strcmp(v, key->kmod[0] ? key->kmod : "-"))
        BAD("%s: foreign (written under kernel module %s, this is %s)", path, v, key->kmod[0] ? key->kmod : "-");
    if (!(v = field(&c, "topology_version")) || parse_u(v, 0, 1L << 30, &x)) BAD("%s:%d: expected topology_version", path, c.line);
    if (x != LDSHIM_TOPOLOGY_VERSION) BAD("%s: foreign (topology version %ld)", path, x);
    long nsms, nd;
    if (!(v = field(&c, "num_sms")) || parse_u(v, 1, LDSHIM_MAX_SMS, &nsms)) BAD("%s:%d: expected num_sms", path, c.line);
    if (!(v = field(&c, "num_domains")) || parse_u(v, 1, LDSHIM_MAX_DOMAINS, &nd)) BAD("%s:%d: expected num_domains", path, c.line);
    ld_probe_result_t t;
    memset(&t, 0, sizeof t);
    t.num_sms = (uint32_t)nsms;
    t.num_domains = (uint32_t)nd;
    if (!(v = field(&c, "mode"))) BAD("%s:%d: expected mode", path, c.line);
    if (!strcmp(v, "anchored")) t.mode_used = LD_PROBE_ANCHORED;
    else if (!strcmp(v, "clustered")) t.mode_used = LD_PROBE_CLUSTERED;
    else if (!strcmp(v, "even")) t.mode_used = LD_PROBE_EVEN;
    else BAD("%s:%d: unknown mode '%s'", path, c.line, v);
    if (!(v = field(&c, "valid")) || parse_u(v, 0, 1, &x)) BAD("%s:%d: expected valid 0|1", path, c.line);
    t.valid = (int)x;
    if (!(v = field(&c, "attempts")) || parse_u(v, 0, 1000, &x)) BAD("%s:%d: expected attempts", path, c.line);
    t.attempts = (int)x;
    if (!(v = field(&c, "near")) || parse_d(v, &t.near_cycles)) BAD("%s:%d: expected near", path, c.line);
    if (!(v = field(&c, "far")) || parse_d(v, &t.far_cycles)) BAD("%s:%d: expected far", path, c.line);
    if (!(v = field(&c, "separation")) || parse_d(v, &t.separation)) BAD("%s:%d: expected separation", path, c.line);
    if (!(v = field(&c, "tpcs_moved")) || parse_u(v, 0, LDSHIM_MAX_SMS, &x)) BAD("%s:%d: expected tpcs_moved", path, c.line);
    t.tpcs_moved = (int)x;
    if (!(v = field(&c, "physical")) || parse_map(v, t.num_sms, t.num_domains, t.physical))
        BAD("%s:%d: expected physical map of %u digits < %u", path, c.line, t.num_sms, t.num_domains);
    if (!(v = field(&c, "balanced")) || parse_map(v, t.num_sms, t.num_domains, t.balanced))
        BAD("%s:%d: expected balanced map of %u digits < %u", path, c.line, t.num_sms, t.num_domains);
    if (!(v = field(&c, "verdict"))) BAD("%s:%d: expected verdict", path, c.line);
    snprintf(t.verdict, sizeof t.verdict, "%s", v);
    /* Free text that reaches logs and reports: no control characters. */
    for (char *q = t.verdict; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f) *q = '?';
    if (c.p != c.end) BAD("%s:%d: unexpected text before the checksum", path, c.line + 1);

    /* The checksum only says the file is whole, not that its maps make sense: check the
     * physical map as the probe's acceptance does and re-derive the balanced one from it. */
    if (t.valid) {
        int split = ld_first_split_tpc(t.physical, t.num_sms);
        if (split >= 0) BAD("%s: physical map splits TPC %d between domains", path, split);
        uint32_t counts[LDSHIM_MAX_DOMAINS];
        ld_count_domains(t.physical, t.num_sms, t.num_domains, counts);
        for (uint32_t d = 0; d < t.num_domains; d++)
            if (counts[d] == 0) BAD("%s: physical map puts no SM in domain %u", path, d);
    }
    uint8_t bal[LDSHIM_MAX_SMS];
    int moved = ld_balance_map(t.physical, t.num_sms, t.num_domains, bal);
    if (memcmp(bal, t.balanced, t.num_sms) != 0 || moved != t.tpcs_moved)
        BAD("%s: balanced map does not follow from the physical map", path);

    if (t.num_sms != key->num_sms || t.num_domains != key->num_domains) {
        snprintf(why, n, "%s: written for %u SMs / %u domains, now %u / %u", path, t.num_sms,
                 t.num_domains, key->num_sms, key->num_domains);
        return LD_CACHE_STALE;
    }
    r->mode_used = t.mode_used;
    r->valid = t.valid;
    r->attempts = t.attempts;
    memcpy(r->verdict, t.verdict, sizeof r->verdict);
    r->num_sms = t.num_sms;
    r->num_domains = t.num_domains;
    r->near_cycles = t.near_cycles;
    r->far_cycles = t.far_cycles;
    r->separation = t.separation;
    memcpy(r->physical, t.physical, sizeof r->physical);
    memcpy(r->balanced, t.balanced, sizeof r->balanced);
    r->tpcs_moved = t.tpcs_moved;
    return LD_CACHE_HIT;
}

int ld_cache_read_file(const char *path, char *buf, size_t cap, size_t *len, char *why, size_t n) {
    char w[300];
    int rc = ld_file_read_into(path, buf, cap, 0, LD_FILE_TRUSTED, len, w, sizeof w);
    if (rc == LD_FILE_ABSENT) { snprintf(why, n, "%s: no entry", path); return LD_CACHE_MISS; }
    if (rc != LD_FILE_OK) BAD("%s: %s", path, w);
    return LD_CACHE_HIT;
}

int ld_cache_load(const char *dir, const ld_cache_key_t *key, ld_probe_result_t *r,
                  char *why, size_t n) {
    char path[4096];
    if (ld_cache_path(dir, key, path, sizeof path)) { snprintf(why, n, "cache path too long"); return LD_CACHE_MISS; }
    char *buf = malloc(CACHE_MAX_BYTES + 1);
    if (!buf) BAD("%s: out of memory", path);
    size_t len = 0;
    int rc = ld_cache_read_file(path, buf, CACHE_MAX_BYTES, &len, why, n);
    if (rc == LD_CACHE_HIT) rc = parse_entry(buf, len, path, key, r, why, n);
    free(buf);
    return rc;
}
