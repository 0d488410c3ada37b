/* report.c — JSON report of state, backend, probe, rules, pool, fallbacks, histogram. */
#include "shim/report.h"
#include "shim/alloc.h"
#include "shim/compute.h"
#include "shim/config.h"
#include "shim/device.h"
#include "shim/file.h"
#include "shim/json.h"
#include "shim/ldshim.h"
#include "shim/options.h"
#include "shim/pool.h"
#include "shim/registry.h"
#include "shim/track.h"
#include "shim/topology.h"
#include "shim/vmm.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int cuda_used;

void ld_note_cuda_use(void) {
    if (!__atomic_load_n(&cuda_used, __ATOMIC_RELAXED)) __atomic_store_n(&cuda_used, 1, __ATOMIC_RELAXED);
}
int ld_cuda_used(void) { return __atomic_load_n(&cuda_used, __ATOMIC_RELAXED); }

typedef struct { char *p; size_t n, cap; int oom; } buf_t;

static void put(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf_t *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (m < 0) { b->oom = 1; return; }
        if ((size_t)m < b->cap - b->n) { b->n += (size_t)m; return; }
        size_t nc = (b->cap + (size_t)m + 1) * 2;
        char *np = realloc(b->p, nc);
        if (!np) { b->oom = 1; return; }
        b->p = np;
        b->cap = nc;
    }
}

static void put_str(buf_t *b, const char *s) {
    if (b->oom) return;
    for (;;) {
        size_t need = ld_json_str(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, s);
        if (b->p && need < b->cap - b->n) { b->n += need; return; }
        size_t nc = (b->cap + need + 1) * 2;
        char *np = realloc(b->p, nc);
        if (!np) { b->oom = 1; return; }
        b->p = np;
        b->cap = nc;
    }
}

static int cmp_hist(const void *a, const void *b) {
    const ld_hist_entry_t *x = a, *y = b;
    if (x->count != y->count) return x->count < y->count ? 1 : -1;
    return x->size < y->size ? -1 : x->size > y->size;
}

static void build(buf_t *b) {
    /* A process that never reached for CUDA never read its policy: it says so (and runs as
     * stock) rather than reading the file now. */
    int ready = ld_config_ready();
    ld_state_t state = ready ? ld_cfg.state : LD_STATE_STOCK;
    put(b, "{\n  \"ldshim\": \"%s\",\n  \"pid\": %d,\n  \"state\": \"%s\",\n", LDSHIM_VERSION_STRING, (int)getpid(),
        ld_state_name(state));
    put(b, "  \"policy\": ");
    put_str(b, ld_cfg.policy_path[0] ? ld_cfg.policy_path : NULL);
    put(b, ",\n  \"policy_error\": ");
    put_str(b, ld_cfg.policy_error[0] ? ld_cfg.policy_error : NULL);
    put(b, ",\n  \"policy_read\": %s", ready ? "true" : "false");
    put(b, ",\n  \"backend_setting\": \"%s\",\n", ld_backend_name(ld_cfg.backend));
    /* What the setting asks for; the placement each device got is its "compute.applied". */
    char comp[96];
    int equal = 0;
    if (ready) ld_compute_setting(comp, sizeof comp, &equal);
    else ld_compute_format(&ld_cfg.compute, comp, sizeof comp);
    put(b, "  \"compute_setting\": {\"compute\": \"%s\", \"split\": \"%s\", \"cap\": %u, \"equal_sm_count\": %s},\n",
        comp, ld_split_name(ld_cfg.compute_split), ld_cfg.compute_sms, equal ? "true" : "false");
    put(b, "  \"domain\": %d,\n  \"memory_setting\": \"%s\",\n", ld_cfg.domain,
        state == LD_STATE_STOCK ? "stock" : ld_cfg.mem_stock ? "stock (the state keeps tagged memory as stock)"
        : ld_cfg.mem_domain >= 0 ? "domain (the state places tagged memory in one domain)" : "rules");

    /* devices */
    const char *active_backend = "off", *active_reason = state != LD_STATE_STOCK ? "no tagged allocation reached a device" : "stock";
    put(b, "  \"devices\": [");
    int first = 1;
    for (int dev = 0; dev < LD_MAX_DEVICES; dev++) {
        ld_device_t *dv = ld_device_peek(dev);
        ld_probe_result_t pr;
        ld_compute_info_t ci;
        int probed = ld_topology_result(dev, &pr) == 0, computed = ld_compute_info(dev, &ci) == 0;
        if (!dv && !probed && !computed) continue;
        put(b, "%s\n    {\"device\": %d", first ? "" : ",", dev);
        first = 0;
        if (dv) {
            put(b, ", \"domains\": %d, \"granularity\": %zu, \"backend\": \"%s\", \"backend_reason\": ", dv->ndomains,
                dv->gran, dv->backend ? dv->backend->name : "off");
            put_str(b, dv->backend_reason);
            if (!strcmp(active_backend, "off")) {
                active_backend = dv->backend ? dv->backend->name : "off";
                active_reason = dv->backend_reason;
            }
        }
        if (probed) {
            char *pj = malloc(1 << 16);
            if (pj) {
                ld_probe_result_json(&pr, pj, 1 << 16);
                put(b, ", \"probe\": %s", pj);
                free(pj);
            }
            ldshim_topology_t t;
            if (ld_topology_get(dev, &t) == 0) {
                put(b, ", \"published\": {\"flags\": %u, \"aware\": %s, \"inverted\": %s, \"sm_domain\": [", t.flags,
                    t.flags & LDSHIM_TOPO_AWARE ? "true" : "false", t.flags & LDSHIM_TOPO_INVERTED ? "true" : "false");
                for (uint32_t i = 0; i < t.num_sms && i < LDSHIM_MAX_SMS; i++) put(b, "%s%u", i ? "," : "", t.sm_domain[i]);
                put(b, "]}");
            }
            /* Which of the driver's own sources existed, how the measured map agreed, which
             * map was published (truth.h). */
            ld_truth_t tr;
            if (ld_topology_truth(dev, &tr) == 0) {
                char tj[2048];
                ld_truth_json(&tr, tj, sizeof tj);
                put(b, ", \"truth\": %s", tj);
            }
        } else {
            put(b, ", \"probe\": null");
        }
        if (computed) {
            put(b, ", \"compute\": {\"requested\": ");
            put_str(b, ci.request);
            put(b, ", \"applied\": ");
            put_str(b, ci.applied ? ci.request : "all");
            put(b, ", \"sm_count\": %u, \"device_sms\": %u, \"sms\": [", ci.applied ? ci.plan.count : ci.device_sms,
                ci.device_sms);
            int k = 0;
            for (uint32_t s = 0; ci.applied && s < LDSHIM_MAX_SMS; s++)
                if (ld_smmask_has(&ci.plan.sms, s)) put(b, "%s%u", k++ ? "," : "", s);
            put(b, "], \"sms_per_domain\": [");
            for (int d = 0; d < 2 || (d < LDSHIM_MAX_DOMAINS && ci.plan.per_domain[d]); d++)
                put(b, "%s%u", d ? "," : "", ci.applied ? ci.plan.per_domain[d] : 0);
            put(b, "], \"outside_domain\": %u, \"split\": ", ci.applied ? ci.plan.outside : 0);
            put_str(b, ci.split);
            put(b, ", \"method\": ");
            put_str(b, ci.method[0] ? ci.method : NULL);
            put(b, ", \"groups\": %d, \"groups_from_cache\": %s, \"verified\": %s, \"contexts\": \"%s\", "
                   "\"unbound_contexts\": %d, \"elapsed_ms\": %.3f, \"groups_ms\": %.3f, \"context_ms\": %.3f, "
                   "\"verify_ms\": %.3f, \"reason\": ",
                ci.plan.ngroups, ci.groups_from_cache ? "true" : "false", ci.verified ? "true" : "false",
                ci.thread_contexts ? "thread" : "shared", ci.unbound_contexts, ci.elapsed_ms, ci.groups_ms,
                ci.context_ms, ci.verify_ms);
            put_str(b, ci.reason);
            put(b, "}");
        }
        put(b, "}");
    }
    put(b, "\n  ],\n  \"backend\": \"%s\",\n  \"backend_reason\": ", active_backend);
    put_str(b, active_reason);

    /* rules */
    put(b, ",\n  \"rules\": [");
    for (int i = 0; i < ld_cfg.policy.n_rules && i < LD_MAX_RULE_STATS; i++) {
        const ld_rule_t *r = &ld_cfg.policy.rules[i];
        ld_rule_stats_t s;
        ld_rule_stats(i, &s);
        put(b, "%s\n    {\"name\": ", i ? "," : "");
        put_str(b, r->name);
        put(b, ", \"matched\": %llu, \"allocations\": %llu, \"bytes\": %llu, \"passed_through\": %llu, "
               "\"fallbacks\": %llu, \"ipc_refused\": %llu, \"bytes_per_domain\": [",
            (unsigned long long)s.matched, (unsigned long long)s.allocations, (unsigned long long)s.bytes,
            (unsigned long long)s.passed, (unsigned long long)s.fallbacks, (unsigned long long)s.ipc_refused);
        int nd = 2;
        for (int k = 2; k < LD_MAX_SLICES; k++)
            if (s.bytes_per_domain[k]) nd = k + 1;
        for (int k = 0; k < nd; k++) put(b, "%s%llu", k ? ", " : "", (unsigned long long)s.bytes_per_domain[k]);
        put(b, "]}");
    }
    put(b, "\n  ],\n");

    ld_pool_stats_t ps;
    ld_pool_stats(&ps);
    put(b, "  \"pool\": {\"hits\": %llu, \"misses\": %llu, \"trims\": %llu, \"cached_bytes\": %llu, \"cap\": %llu},\n",
        (unsigned long long)ps.hits, (unsigned long long)ps.misses, (unsigned long long)ps.trims,
        (unsigned long long)ps.cached_bytes, (unsigned long long)ps.cap);

    /* The native backend's read-back of each fresh slice (vmm.c): pieces, and ranges
     * discarded (their requests fell back; the fallbacks below say why). */
    ld_readback_stats_t rb;
    ld_vmm_readback_stats(&rb);
    put(b, "  \"readback\": {\"right\": %llu, \"wrong_domain\": %llu, \"not_localized\": %llu, \"unverified\": %llu, "
           "\"discarded\": %llu},\n",
        (unsigned long long)rb.right, (unsigned long long)rb.wrong_domain, (unsigned long long)rb.not_localized,
        (unsigned long long)rb.unverified, (unsigned long long)rb.discarded);
    put(b, "  \"chunking\": {\"forced\": ");
    put_str(b, ld_opt(LD_OPT_CHUNK));
    put(b, ", \"ranges_created\": %llu, \"handles_created\": %llu},\n", (unsigned long long)rb.ranges_created,
        (unsigned long long)rb.handles_created);

    ld_fallback_t fb[32];
    size_t nfb = ld_fallbacks(fb, 32);
    put(b, "  \"fallbacks\": [");
    for (size_t i = 0; i < nfb && i < 32; i++) {
        put(b, "%s\n    {\"reason\": ", i ? "," : "");
        put_str(b, fb[i].reason);
        put(b, ", \"count\": %llu}", (unsigned long long)fb[i].count);
    }
    put(b, "%s],\n", nfb ? "\n  " : "");

    size_t cap = ld_untagged_histogram(NULL, 0) + 64;   /* room for sizes added meanwhile */
    ld_hist_entry_t *h = malloc(cap * sizeof *h);
    size_t nh = h ? ld_untagged_histogram(h, cap) : 0;
    if (nh > cap) nh = cap;
    if (h) qsort(h, nh, sizeof *h, cmp_hist);
    put(b, "  \"untagged\": {\"allocations\": %llu, \"histogram\": [", (unsigned long long)ld_untagged_total());
    for (size_t i = 0; i < nh; i++)
        put(b, "%s\n    {\"size\": %llu, \"api\": \"%s\", \"count\": %llu}", i ? "," : "", (unsigned long long)h[i].size,
            ld_api_name((ld_api_t)h[i].api), (unsigned long long)h[i].count);
    put(b, "%s]},\n", nh ? "\n  " : "");
    free(h);

    /* Every allocation api: what reached the shim and what it did (emulated: counted as
     * placed, with no physical locality). */
    put(b, "  \"apis\": {");
    for (int a = LD_API_RUNTIME; a < LD_API_COUNT; a++) {
        ld_api_stats_t as;
        ld_api_stats(a, &as);
        put(b, "%s\n    \"%s\": {\"requests\": %llu, \"placed\": %llu, \"emulated\": %llu, \"passed\": %llu, "
               "\"fallbacks\": %llu}", a > LD_API_RUNTIME ? "," : "", ld_api_name((ld_api_t)a),
            (unsigned long long)as.requests, (unsigned long long)as.placed, (unsigned long long)as.emulated,
            (unsigned long long)as.passed, (unsigned long long)as.fallbacks);
    }
    put(b, "\n  },\n");

    ld_alloc_counts_t c;
    ld_alloc_counts(&c);
    put(b, "  \"counts\": {\"tagged_allocs\": %llu, \"tagged_frees\": %llu, \"untagged_allocs\": %llu, "
           "\"untagged_frees\": %llu, \"fallbacks\": %llu},\n",
        (unsigned long long)c.tagged_allocs, (unsigned long long)c.tagged_frees, (unsigned long long)c.untagged_allocs,
        (unsigned long long)c.untagged_frees, (unsigned long long)c.fallbacks);
    /* Placed allocations that are not shim ranges (stream-ordered, managed, VMM handles):
     * ranges + placed_elsewhere = tagged_allocs - tagged_frees. */
    put(b, "  \"live\": {\"ranges\": %zu, \"bytes\": %llu, \"placed_elsewhere\": %zu}\n}\n", ld_registry_count(),
        (unsigned long long)ld_registry_bytes(), ld_track_placed(LD_OBJ_PTR) + ld_track_placed(LD_OBJ_HANDLE));
}

/* "%p" -> pid; the rest verbatim. -1 when the result does not fit (never a shorter path:
 * a truncated name would put the report somewhere else). */
static int expand(const char *in, char *out, size_t n) {
    size_t k = 0;
    for (; *in; in++) {
        if (in[0] == '%' && in[1] == 'p') {
            int w = snprintf(out + k, n - k, "%d", (int)getpid());
            if (w < 0 || (size_t)w >= n - k) return -1;
            k += (size_t)w;
            in++;
        } else {
            if (k + 1 >= n) return -1;
            out[k++] = *in;
        }
    }
    out[k] = 0;
    return 0;
}

#define WHY(...) do { snprintf(why, wn, __VA_ARGS__); } while (0)

/* Through the file layer (shim/file.h): a new or regular file of ours is replaced by a new
 * file (mode 0644 under the umask) renamed over it, so readers see the old report or the new
 * one and a link planted at the target is never followed; a FIFO or character device
 * (/dev/null, a tty) is written in place without blocking, and /dev/stdout, /dev/stderr or
 * /dev/fd/N through that descriptor, appended at its offset (LD_FILE_STREAM). */
int ld_report_write_why(const char *path, char *why, size_t wn) {
    if (!path || !*path) { WHY("no path"); errno = EINVAL; return -1; }
    char p[LD_PATH_MAX];
    if (expand(path, p, sizeof p) != 0) {
        WHY("the path is longer than %d bytes", LD_PATH_MAX - 1);
        errno = ENAMETOOLONG;
        return -1;
    }
    buf_t b = {0};
    build(&b);
    if (b.oom || !b.p) { free(b.p); WHY("out of memory"); errno = ENOMEM; return -1; }
    int rc = ld_file_write(p, b.p, b.n, LD_FILE_STREAM, why, wn);
    free(b.p);
    if (rc) errno = EIO;
    return rc;
}

int ld_report_write(const char *path) {
    char why[256];
    return ld_report_write_why(path, why, sizeof why);
}
