/* alloc.c — tagged requests become localized ranges; everything else is untouched. */
#include "shim/alloc.h"
#include "shim/compute.h"
#include "shim/config.h"
#include "shim/device.h"
#include "shim/log.h"
#include "shim/track.h"
#include "shim/vmm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- counters ------------------------------------------------------------------------ */

typedef struct {
    atomic_uint_fast64_t occurrences;      /* requests that matched size + api */
    atomic_uint_fast64_t matched, allocations, bytes, fallbacks, ipc_refused, passed;
    atomic_uint_fast64_t bytes_per_domain[LD_MAX_SLICES];
} rule_ctr_t;

static rule_ctr_t rules[LD_MAX_RULE_STATS];
/* n_tagged / n_tagged_free: allocations the shim placed and their frees; n_unplaced /
 * n_untagged_free: every other successful allocation and its free (alloc.h says what a free
 * is per api); n_untagged: requests that matched no rule (the histogram's total). */
static atomic_uint_fast64_t n_tagged, n_tagged_free, n_untagged, n_unplaced, n_untagged_free, n_fallback;

#define HIST_SLOTS 4096   /* open addressing on (size, api); full table -> counted as overflow */
static struct { atomic_uint_fast64_t key; atomic_uint_fast64_t count; } hist[HIST_SLOTS];
static atomic_uint_fast64_t hist_overflow;

static pthread_mutex_t fb_mu = PTHREAD_MUTEX_INITIALIZER;
#define MAX_FB 32
static ld_fallback_t fb[MAX_FB];
static size_t n_fb;

/* Per allocation api: requests seen, placed by the shim, passed through, fallbacks. */
static struct { atomic_uint_fast64_t requests, placed, emulated, passed, fallbacks; } apis[LD_API_COUNT];

#define HIST_API_SHIFT 61   /* key = (size + 1) | api << 61: sizes are < 2^61 in practice */

static void hist_add(uint64_t size, ld_api_t api) {
    /* key 0 means empty, so store size + 1. */
    uint64_t key = ((size + 1) & ((1ull << HIST_API_SHIFT) - 1)) | ((uint64_t)api << HIST_API_SHIFT);
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    for (unsigned i = 0; i < 64; i++) {
        unsigned s = (unsigned)((h >> 40) + i) % HIST_SLOTS;
        uint64_t cur = atomic_load_explicit(&hist[s].key, memory_order_acquire);
        if (cur == key || (cur == 0 && (atomic_compare_exchange_strong(&hist[s].key, &cur, key) || cur == key))) {
            atomic_fetch_add_explicit(&hist[s].count, 1, memory_order_relaxed);
            return;
        }
    }
    atomic_fetch_add(&hist_overflow, 1);
}

static void note_fallback(int rule, const char *why) {
    atomic_fetch_add(&n_fallback, 1);
    if (rule >= 0 && rule < LD_MAX_RULE_STATS) atomic_fetch_add(&rules[rule].fallbacks, 1);
    pthread_mutex_lock(&fb_mu);
    size_t i;
    for (i = 0; i < n_fb; i++)
        if (!strcmp(fb[i].reason, why)) break;
    if (i == n_fb && n_fb < MAX_FB) snprintf(fb[n_fb++].reason, sizeof fb[0].reason, "%s", why);
    int first = i < MAX_FB && fb[i].count == 0;
    if (i < MAX_FB) fb[i].count++;
    pthread_mutex_unlock(&fb_mu);
    /* One warning per distinct reason; the report has the counts. */
    if (first) LD_WARN(ALLOC, "rule '%s': falling back to an ordinary allocation: %s",
                              rule >= 0 && rule < ld_cfg.policy.n_rules ? ld_cfg.policy.rules[rule].name : "?", why);
}

/* --- the path ------------------------------------------------------------------------ */

/* The real allocation, with the pool trimmed and one retry on out-of-memory. */
static CUresult real_alloc(const ld_driver_t *d, CUdeviceptr *dptr, size_t size) {
    CUresult r;
    LD_POOL_RETRY_OOM(d, r, d->pfn_cuMemAlloc_v2(dptr, size));
    return r;
}

static int mirror(int dom, int ndomains, int mismatch) {
    return mismatch ? ndomains - 1 - dom : dom;
}

/* Split placement only exists for cuMemAlloc: one reserved range holding a slice per domain. */
static int splittable(ld_api_t api) { return api == LD_API_RUNTIME || api == LD_API_DRIVER || api == LD_API_ANY; }

int ld_alloc_decide(size_t size, ld_api_t api, ld_decision_t *out) {
    out->rule = -1;
    out->kind = LD_PLACE_STOCK;
    out->domain = -1;
    if ((int)api >= 0 && api < LD_API_COUNT) atomic_fetch_add_explicit(&apis[api].requests, 1, memory_order_relaxed);
    int ri = size && ld_active() && ld_cfg.policy.n_rules ? ld_policy_match(&ld_cfg.policy, size, api) : -1;
    if (ri < 0 || ri >= LD_MAX_RULE_STATS) {
        hist_add(size, api);
        atomic_fetch_add_explicit(&n_untagged, 1, memory_order_relaxed);
        return 0;
    }
    const ld_rule_t *rule = &ld_cfg.policy.rules[ri];
    rule_ctr_t *rc = &rules[ri];
    out->rule = ri;
    uint64_t occ = atomic_fetch_add(&rc->occurrences, 1) + 1;
    /* The state decides where tagged memory goes: kept as stock (compute-only, sm-control),
     * all in domain X (memory-only, full-ld, mismatch-ld), or as the rule says (split family). */
    int pass = !ld_rule_takes_occurrence(rule, occ) || rule->placement == LD_PLACE_STOCK || ld_cfg.mem_stock;
    if (!pass && ld_cfg.mem_domain < 0 && rule->placement == LD_PLACE_SPLIT && !splittable(api)) {
        pass = 1;
        note_fallback(ri, "split placement applies to cuMemAlloc only; this request passes through");
    }
    if (pass) {
        atomic_fetch_add(&rc->passed, 1);
        if ((int)api >= 0 && api < LD_API_COUNT) atomic_fetch_add(&apis[api].passed, 1);
        return 0;
    }
    atomic_fetch_add(&rc->matched, 1);
    if (ld_cfg.mem_domain >= 0) {
        out->kind = LD_PLACE_DOMAIN;
        out->domain = ld_cfg.mem_domain;
    } else {
        out->kind = rule->placement;
        out->domain = rule->placement == LD_PLACE_DOMAIN ? rule->domain : -1;
    }
    return 1;
}

/* A freed (or implicitly gone) allocation of the given class. */
static void count_free(int placed) {
    atomic_fetch_add_explicit(placed ? &n_tagged_free : &n_untagged_free, 1, memory_order_relaxed);
}

/* Track what the shim will have to recognise at its free; an entry a reissued value
 * replaced was freed behind the shim's back (with its context, say). */
static int track(const ld_obj_t *o, int placed) {
    ld_track_entry_t e = { o->key, (uint64_t)(uintptr_t)o->ctx, placed, o->device };
    int old;
    if (ld_track_add(o->kind, &e, &old) != 0) return -1;
    if (old >= 0) count_free(old);
    return 0;
}

void ld_alloc_note_placed(const ld_decision_t *dc, ld_api_t api, size_t bytes, int domain, int emulated,
                          const ld_obj_t *obj) {
    if ((int)api >= 0 && api < LD_API_COUNT) {
        atomic_fetch_add(&apis[api].placed, 1);
        if (emulated) atomic_fetch_add(&apis[api].emulated, 1);
    }
    /* Out of host memory for the entry: its free could not be recognised, so it is counted
     * with the ordinary allocations and the totals still reconcile. */
    if (obj && track(obj, 1) != 0) {
        atomic_fetch_add(&n_unplaced, 1);
    } else {
        atomic_fetch_add(&n_tagged, 1);
    }
    if (dc->rule < 0 || dc->rule >= LD_MAX_RULE_STATS) return;
    rule_ctr_t *rc = &rules[dc->rule];
    atomic_fetch_add(&rc->allocations, 1);
    atomic_fetch_add(&rc->bytes, bytes);
    if (domain >= 0 && domain < LD_MAX_SLICES) atomic_fetch_add(&rc->bytes_per_domain[domain], bytes);
}

void ld_alloc_note_unplaced(const ld_obj_t *obj) {
    /* A handle is tracked so that its release counts (and an imported one's does not). */
    if (obj && obj->kind == LD_OBJ_HANDLE && track(obj, 0) != 0) return;
    atomic_fetch_add_explicit(&n_unplaced, 1, memory_order_relaxed);
}

void ld_alloc_note_passed(const ld_decision_t *dc, ld_api_t api) {
    if (dc->rule >= 0 && dc->rule < LD_MAX_RULE_STATS) atomic_fetch_add(&rules[dc->rule].passed, 1);
    if ((int)api >= 0 && api < LD_API_COUNT) atomic_fetch_add(&apis[api].passed, 1);
}

void ld_alloc_note_fallback(const ld_decision_t *dc, ld_api_t api, const char *why) {
    if ((int)api >= 0 && api < LD_API_COUNT) atomic_fetch_add(&apis[api].fallbacks, 1);
    note_fallback(dc->rule, why);
}

void ld_api_stats(int api, ld_api_stats_t *o) {
    memset(o, 0, sizeof *o);
    if (api < 0 || api >= LD_API_COUNT) return;
    o->requests = atomic_load(&apis[api].requests);
    o->placed = atomic_load(&apis[api].placed);
    o->emulated = atomic_load(&apis[api].emulated);
    o->passed = atomic_load(&apis[api].passed);
    o->fallbacks = atomic_load(&apis[api].fallbacks);
}

CUresult ld_alloc_count_unplaced(CUresult r) {
    if (r == CUDA_SUCCESS) atomic_fetch_add_explicit(&n_unplaced, 1, memory_order_relaxed);
    return r;
}

CUresult ld_alloc(CUdeviceptr *dptr, size_t size, ld_api_t api) {
    const ld_driver_t *d = ld_driver();
    if (!d) return CUDA_ERROR_NOT_INITIALIZED;
    ld_decision_t dc;
    if (dptr && ld_alloc_decide(size, api, &dc) && ld_alloc_placed(d, dptr, size, api, &dc)) return CUDA_SUCCESS;
    return ld_alloc_count_unplaced(real_alloc(d, dptr, size));
}

int ld_alloc_placed(const ld_driver_t *d, CUdeviceptr *dptr, size_t size, ld_api_t api, const ld_decision_t *dc) {
    int ri = dc->rule;
    rule_ctr_t *rc = &rules[ri];
    const ld_rule_t *rule = &ld_cfg.policy.rules[ri];
    CUdevice dev;
    CUcontext ctx = NULL;
    if (d->pfn_cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx || d->pfn_cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return 0;                               /* no context: the program's call gives the stock error */
    ld_device_t *dv = ld_device_get(d, dev);
    if (!dv || !dv->backend) {
        ld_alloc_note_fallback(dc, api, dv ? dv->backend_reason : "device ordinal out of range");
        return 0;
    }
    if (size < ld_cfg.policy.min_split || size < dv->gran) {
        ld_alloc_note_passed(dc, api);
        return 0;
    }

    int mismatch = ld_cfg.state == LD_STATE_MISMATCH && !ld_cfg.mismatch_map;
    int nslices, dom[LD_MAX_SLICES];
    if (dc->kind == LD_PLACE_DOMAIN) {
        if (dc->domain >= dv->ndomains) {
            char why[160];
            snprintf(why, sizeof why, "domain %d does not exist (device %d has %d domains, 0..%d)", dc->domain,
                     (int)dev, dv->ndomains, dv->ndomains - 1);
            ld_alloc_note_fallback(dc, api, why);
            return 0;
        }
        nslices = 1;
        dom[0] = ld_cfg.mem_domain >= 0 ? dc->domain : mirror(dc->domain, dv->ndomains, mismatch);
    } else {
        nslices = dv->ndomains < LD_MAX_SLICES ? dv->ndomains : LD_MAX_SLICES;
        for (int i = 0; i < nslices; i++) dom[i] = mirror(i, nslices, mismatch);
    }
    ld_range_t r;
    char why[160] = "";
    if (ld_vmm_alloc(d, dv, ctx, ri, size, nslices, dom, &r, why, sizeof why) != CUDA_SUCCESS) {
        ld_alloc_note_fallback(dc, api, why);
        return 0;
    }
    atomic_fetch_add(&rc->allocations, 1);
    atomic_fetch_add(&rc->bytes, size);
    for (int i = 0; i < nslices; i++)
        if (dom[i] >= 0 && dom[i] < LD_MAX_SLICES) atomic_fetch_add(&rc->bytes_per_domain[dom[i]], r.slice);
    atomic_fetch_add(&n_tagged, 1);
    atomic_fetch_add(&apis[api].placed, 1);
    if (!dv->backend->localizes) atomic_fetch_add(&apis[api].emulated, 1);
    LD_DEBUG(ALLOC, "rule '%s': %zu bytes at 0x%llx as %d slice(s) of %zu (%s)", rule->name, size,
                    (unsigned long long)r.base, nslices, r.slice, dv->backend->name);
    *dptr = r.base;
    return 1;
}

/* A free the driver makes of memory that is not a shim range: a placed pointer (track.h)
 * is taken out first, so an address the driver hands out again right after the free is
 * never mistaken for it, and put back if the free fails. */
static CUresult free_plain(const ld_driver_t *d, CUdeviceptr p, CUresult (*real)(CUdeviceptr, CUstream), CUstream s) {
    ld_track_entry_t e;
    int old, tracked = p && ld_track_any(LD_OBJ_PTR) && ld_track_take(LD_OBJ_PTR, p, &e) == 0;
    CUresult res = real ? real(p, s) : d->pfn_cuMemFree_v2(p);
    if (res == CUDA_SUCCESS && p) count_free(tracked && e.placed);
    else if (res != CUDA_SUCCESS && tracked) ld_track_add(LD_OBJ_PTR, &e, &old);
    return res;
}

CUresult ld_free_async(CUdeviceptr p, CUstream s, CUresult (*real)(CUdeviceptr, CUstream)) {
    return free_plain(NULL, p, real, s);
}

CUresult ld_release(CUmemGenericAllocationHandle h, CUresult (*real)(CUmemGenericAllocationHandle)) {
    ld_track_entry_t e;
    int old, tracked = ld_track_any(LD_OBJ_HANDLE) && ld_track_take(LD_OBJ_HANDLE, h, &e) == 0;
    CUresult res = real(h);
    if (res == CUDA_SUCCESS && tracked) count_free(e.placed);
    else if (res != CUDA_SUCCESS && tracked) ld_track_add(LD_OBJ_HANDLE, &e, &old);
    return res;
}

CUresult ld_free(CUdeviceptr p) {
    const ld_driver_t *d = ld_driver();
    if (!d) return CUDA_ERROR_NOT_INITIALIZED;
    ld_range_t r;
    /* Read-locked lookup first: untagged frees never take the registry's write lock. */
    if (ld_registry_find(p, &r) != 0) return free_plain(d, p, NULL, NULL);
    if (r.base != p) return CUDA_ERROR_INVALID_VALUE;      /* interior pointer, as the driver says */
    if (ld_vmm_free(d, p) != 0) return CUDA_ERROR_INVALID_VALUE;   /* freed meanwhile */
    atomic_fetch_add(&n_tagged_free, 1);
    return CUDA_SUCCESS;
}

typedef struct { CUcontext ctx; int dev; CUcontext primary; } forget_key_t;

static int belongs_to(const forget_key_t *k, int device, CUcontext c) {
    if (k->ctx) return c == k->ctx;
    /* The primary's allocations include those made in its bound green context(s). */
    return device == k->dev && (!k->primary || c == k->primary || ld_compute_owns(k->dev, c));
}

static int belongs(const ld_range_t *r, void *arg) { return belongs_to(arg, r->device, r->ctx); }

/* A tracked pointer of a device being reset: freed with it if its context was the primary
 * (or its green context), else kept (a context the program created keeps its memory). */
static void forget_ptr(const ld_track_entry_t *e, void *arg) {
    int old;
    if (belongs_to(arg, e->device, (CUcontext)(uintptr_t)e->ctx)) count_free(e->placed);
    else if (ld_track_add(LD_OBJ_PTR, e, &old) != 0) count_free(e->placed);   /* cannot keep it: counted gone */
}

void ld_alloc_teardown_context(const ld_driver_t *d, CUcontext ctx, int dev) {
    forget_key_t k = {ctx, dev, NULL};
    CUcontext pushed = NULL;
    if (!ctx) {
        /* The primary context of dev, if active: only its ranges go (a context created with
         * cuCtxCreate on the same device keeps its own). */
        unsigned flags;
        int active = 0;
        if (d->pfn_cuDevicePrimaryCtxGetState && d->pfn_cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS &&
            active && d->pfn_cuDevicePrimaryCtxRetain(&k.primary, dev) == CUDA_SUCCESS)
            d->pfn_cuDevicePrimaryCtxRelease_v2(dev);
        pushed = k.primary;
    } else {
        pushed = ctx;
    }
    size_t n = ld_vmm_teardown_if(d, belongs, &k, pushed);
    /* The context takes its allocations with it: each is freed, as the program's free
     * would have, so tagged_allocs - tagged_frees stays what is live. */
    atomic_fetch_add(&n_tagged_free, n);
    if (!ctx && dev >= 0) {
        /* A reset frees the primary's stream-ordered and managed memory too (the shim's
         * pools of the device are place.c's: the reset hook destroys them next). */
        ld_track_take_device(LD_OBJ_PTR, dev, forget_ptr, &k);
    }
    if (dev >= 0) ld_vmm_trim(d, dev);
    if (n) LD_INFO(ALLOC, "context of device %d destroyed or reset: released %zu shim range(s) it still held", dev, n);
}

/* --- report accessors ------------------------------------------------------------------ */

void ld_rule_stats(int i, ld_rule_stats_t *o) {
    memset(o, 0, sizeof *o);
    if (i < 0 || i >= LD_MAX_RULE_STATS) return;
    o->matched = atomic_load(&rules[i].matched);
    o->allocations = atomic_load(&rules[i].allocations);
    o->bytes = atomic_load(&rules[i].bytes);
    o->fallbacks = atomic_load(&rules[i].fallbacks);
    o->ipc_refused = atomic_load(&rules[i].ipc_refused);
    o->passed = atomic_load(&rules[i].passed);
    for (int k = 0; k < LD_MAX_SLICES; k++) o->bytes_per_domain[k] = atomic_load(&rules[i].bytes_per_domain[k]);
}

void ld_rule_note_ipc_refused(int i) {
    if (i >= 0 && i < LD_MAX_RULE_STATS) atomic_fetch_add(&rules[i].ipc_refused, 1);
}

size_t ld_fallbacks(ld_fallback_t *out, size_t max) {
    pthread_mutex_lock(&fb_mu);
    size_t n = n_fb;
    for (size_t i = 0; i < n && i < max; i++) out[i] = fb[i];
    pthread_mutex_unlock(&fb_mu);
    return n;
}

size_t ld_untagged_histogram(ld_hist_entry_t *out, size_t max) {
    size_t k = 0;
    for (unsigned s = 0; s < HIST_SLOTS; s++) {
        uint64_t key = atomic_load(&hist[s].key), c = atomic_load(&hist[s].count);
        if (!key || !c) continue;
        if (k < max) {
            out[k].size = (key & ((1ull << HIST_API_SHIFT) - 1)) - 1;
            out[k].api = (int)(key >> HIST_API_SHIFT);
            out[k].count = c;
        }
        k++;
    }
    return k;
}

uint64_t ld_untagged_total(void) { return atomic_load(&n_untagged); }

void ld_alloc_counts(ld_alloc_counts_t *o) {
    o->tagged_allocs = atomic_load(&n_tagged);
    o->tagged_frees = atomic_load(&n_tagged_free);
    o->untagged_allocs = atomic_load(&n_unplaced);
    o->untagged_frees = atomic_load(&n_untagged_free);
    o->fallbacks = atomic_load(&n_fallback);
}

void ld_alloc_reset(void) {
    memset(rules, 0, sizeof rules);
    memset(apis, 0, sizeof apis);
    memset(hist, 0, sizeof hist);
    atomic_store(&hist_overflow, 0);
    atomic_store(&n_tagged, 0);
    atomic_store(&n_tagged_free, 0);
    atomic_store(&n_untagged, 0);
    atomic_store(&n_unplaced, 0);
    atomic_store(&n_untagged_free, 0);
    atomic_store(&n_fallback, 0);
    memset(fb, 0, sizeof fb);
    n_fb = 0;
    ld_vmm_readback_reset();
    ld_track_reset();
}

void ld_alloc_lock_for_fork(void) {
    pthread_mutex_lock(&fb_mu);
    ld_track_lock_for_fork();
}
void ld_alloc_unlock_after_fork(void) {
    ld_track_unlock_after_fork();
    pthread_mutex_unlock(&fb_mu);
}
