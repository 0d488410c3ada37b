/* topology.c — run the probe once per device and publish its map into modules. */
#include "shim/topology.h"
#include "shim/compute.h"
#include "shim/config.h"
#include "shim/device.h"
#include "shim/hash.h"
#include "shim/log.h"
#include "shim/image.h"
#include "shim/truth.h"
#include "shim/vmm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROBE_WAIT_MS 10000   /* longest a retain waits for another thread's probe */
enum { PROBE_NONE = 0, PROBE_RUNNING = 1, PROBE_PUBLISHED = 2 };
static atomic_int probe_state[LD_MAX_DEVICES];        /* PROBE_* */
static ld_probe_result_t results[LD_MAX_DEVICES];
static ldshim_topology_t published[LD_MAX_DEVICES];
static ld_truth_t truths[LD_MAX_DEVICES];             /* the driver's answer, after the probe */

/* Recorded modules and libraries, a uthash table keyed by (kind, handle): every unload the
 * program makes (most are of modules never recorded) is one lookup, not a walk of a list.
 * The kind is in the key because a CUmodule and a CUlibrary are handles of different
 * objects, which the driver does not promise to keep apart. */
typedef struct {
    void *handle;
    intptr_t kind;       /* LD_MOD_*; pointer-sized, so the key has no padding  */
} mod_key_t;
_Static_assert(sizeof(mod_key_t) == 2 * sizeof(void *), "mod_key_t must have no padding: its bytes are the hash key");

typedef struct mod {
    mod_key_t key;
    CUcontext ctx;       /* context current when loaded (modules belong to it)  */
    int dev;
    uint64_t done;       /* bit per device already published                    */
    UT_hash_handle hh;
} mod_t;
static pthread_mutex_t mods_mu = PTHREAD_MUTEX_INITIALIZER;
static mod_t *mods;

/* --- publication ------------------------------------------------------------------------ */

/* Write `topo` (dev's map) into one module in the current context. */
static int publish_one(const ld_driver_t *d, const mod_t *m, int dev, const ldshim_topology_t *topo) {
    CUdeviceptr p = 0;
    size_t bytes = 0;
    CUresult r;
    if (m->key.kind == LD_MOD_LIBRARY) {
        if (!d->pfn_cuLibraryGetGlobal) return -1;
        r = d->pfn_cuLibraryGetGlobal(&p, &bytes, (CUlibrary)m->key.handle, LDSHIM_TOPOLOGY_SYMBOL);
    } else {
        r = d->pfn_cuModuleGetGlobal_v2(&p, &bytes, (CUmodule)m->key.handle, LDSHIM_TOPOLOGY_SYMBOL);
    }
    if (r != CUDA_SUCCESS) {
        LD_DEBUG(TOPO, "module %p: no %s (%s)", m->key.handle, LDSHIM_TOPOLOGY_SYMBOL, ld_cu_errname(r));
        return -1;
    }
    /* A module built with the version-1 header gets the version-1 prefix (no bound set). */
    ldshim_topology_t t = *topo;
    if (bytes == LDSHIM_TOPOLOGY_V1_BYTES) {
        t.version = 1;
    } else if (bytes != sizeof(ldshim_topology_t)) {
        LD_WARN(TOPO, "module %p defines %s with %zu bytes, expected %zu or %zu (other ldshim_topology.h version): "
                      "not published", m->key.handle, LDSHIM_TOPOLOGY_SYMBOL, bytes, sizeof(ldshim_topology_t),
                      (size_t)LDSHIM_TOPOLOGY_V1_BYTES);
        return -1;
    }
    /* A private non-blocking stream: a synchronous copy would run on the legacy stream and
     * invalidate a capture that the program may be running on a blocking stream. */
    CUstream st = NULL;
    if (d->pfn_cuMemcpyHtoDAsync_v2 && d->pfn_cuStreamCreate(&st, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS) {
        r = d->pfn_cuMemcpyHtoDAsync_v2(p, &t, bytes, st);
        if (r == CUDA_SUCCESS) r = d->pfn_cuStreamSynchronize(st);
        d->pfn_cuStreamDestroy_v2(st);
    } else {
        r = d->pfn_cuMemcpyHtoD_v2(p, &t, bytes);
    }
    if (r != CUDA_SUCCESS) {
        LD_WARN(TOPO, "publishing the map into module %p: %s", m->key.handle, ld_cu_errname(r));
        return -1;
    }
    LD_DEBUG(TOPO, "published device %d map into %s %p", dev, m->key.kind == LD_MOD_LIBRARY ? "library" : "module",
                   m->key.handle);
    return 0;
}

/* Publish dev's map into every recorded module that belongs to it (libraries: into the
 * current context). Called with dev's context current. */
static void publish_pending(const ld_driver_t *d, int dev, CUcontext cur) {
    for (;;) {
        mod_t snapshot;
        ldshim_topology_t topo;
        int found = 0;
        pthread_mutex_lock(&mods_mu);
        topo = published[dev];
        for (mod_t *m = mods; m; m = m->hh.next) {
            if (m->done & (1ull << dev)) continue;
            if (m->key.kind == LD_MOD_MODULE && (m->dev != dev || m->ctx != cur)) continue;
            m->done |= 1ull << dev;          /* claim it; the write happens unlocked */
            snapshot = *m;
            found = 1;
            break;
        }
        pthread_mutex_unlock(&mods_mu);
        if (!found) return;
        publish_one(d, &snapshot, dev, &topo);
    }
}

/* --- probe ------------------------------------------------------------------------------ */

typedef struct { const ld_driver_t *d; ld_device_t *dv; } loc_ctx_t;

/* The probe's anchored allocations are shim ranges like the program's (rule -1), made and
 * freed by vmm.c, so the free path, the pool and a context's teardown know them. */
static CUresult alloc_localized(void *c, int domain, size_t bytes, CUdeviceptr *out) {
    loc_ctx_t *lc = c;
    ld_range_t r;
    char why[160];
    CUcontext ctx = NULL;
    lc->d->pfn_cuCtxGetCurrent(&ctx);
    CUresult res = ld_vmm_alloc(lc->d, lc->dv, ctx, -1, bytes, 1, &domain, &r, why, sizeof why);
    if (res != CUDA_SUCCESS) return res;   /* the probe reports it and takes another mode */
    *out = r.base;
    return CUDA_SUCCESS;
}

static void free_localized(void *c, CUdeviceptr p, size_t bytes) {
    loc_ctx_t *lc = c;
    (void)bytes;
    ld_vmm_free(lc->d, p);
}

static void apply_state(ldshim_topology_t *t) {
    if (ld_cfg.state == LD_STATE_FULL || ld_cfg.state == LD_STATE_MISMATCH) t->flags |= LDSHIM_TOPO_AWARE;
    if (ld_cfg.state == LD_STATE_MISMATCH && ld_cfg.mismatch_map && t->num_domains >= 2) {
        uint32_t D = t->num_domains;
        for (uint32_t i = 0; i < t->num_sms && i < LDSHIM_MAX_SMS; i++) t->sm_domain[i] = (uint8_t)(D - 1 - t->sm_domain[i]);
        for (uint32_t a = 0, b = D - 1; a < b; a++, b--) {
            uint32_t x = t->sms_per_domain[a];
            t->sms_per_domain[a] = t->sms_per_domain[b];
            t->sms_per_domain[b] = x;
        }
        t->flags |= LDSHIM_TOPO_INVERTED;
    }
}

/* Compute binding of dev's primary context, once (the probe ran on all SMs before it); a
 * new bound set goes into every module of the device, also those published already. */
static void bind_compute(const ld_driver_t *d, CUdevice dev, CUcontext ctx, int is_primary, int claimed,
                         const ld_probe_result_t *pr) {
    ld_compute_on_context(d, dev, ctx, is_primary, claimed, pr);
    if (!claimed) return;
    pthread_mutex_lock(&mods_mu);
    int changed = 0;
    if (published[dev].magic && !(published[dev].flags & LDSHIM_TOPO_BOUND)) {
        ld_compute_publish(dev, &published[dev]);
        changed = (published[dev].flags & LDSHIM_TOPO_BOUND) != 0;
    }
    if (changed)
        for (mod_t *m = mods; m; m = m->hh.next) m->done &= ~(1ull << dev);
    pthread_mutex_unlock(&mods_mu);
}

/* Wait (bounded) while another thread probes `dev`; returns the probe state then. */
static int wait_probe(int dev) {
    int st = PROBE_RUNNING;
    for (int i = 0; i < PROBE_WAIT_MS && (st = atomic_load(&probe_state[dev])) == PROBE_RUNNING; i++) {
        struct timespec ts = { 0, 1000000L };
        nanosleep(&ts, NULL);
    }
    return st;
}

void ld_topology_on_context(const ld_driver_t *d, CUdevice dev, CUcontext ctx, int is_current, int is_primary) {
    if (!ld_active() || dev < 0 || dev >= LD_MAX_DEVICES || !ctx) return;
    int probe_on = ld_cfg.policy.probe != LD_PROBE_OFF, bind = ld_compute_requested();
    /* The binding is claimed before the probe starts, so a thread that makes this primary
     * current while the probe runs waits for the binding instead of running unbound. */
    int claimed = bind && is_primary && ld_compute_claim(dev, ctx);
    int expect = PROBE_NONE;
    int mine = probe_on && atomic_compare_exchange_strong(&probe_state[dev], &expect, PROBE_RUNNING);
    if (!mine && expect == PROBE_RUNNING) {
        if (!claimed) return;   /* another thread probes; it publishes (and binds its primary) */
        /* It probes for a context of its own: this primary is bound once its map is there. */
        expect = wait_probe(dev);
        if (expect == PROBE_RUNNING) LD_WARN(PROBE, "device %d: the topology probe of another thread is still running; "
                                 "binding without its map", dev);
    }
    if (!mine && !bind && expect != PROBE_PUBLISHED) return;
    ld_own_calls_t oc;
    ld_own_calls_begin(&oc, d);
    if (!is_current) ld_own_calls_push(&oc, ctx);

    int probed = !mine && expect == PROBE_PUBLISHED;
    if (mine) {
        ld_device_t *dv = ld_device_get(d, dev);
        loc_ctx_t lc = {d, dv};
        ld_probe_opts_t o;
        memset(&o, 0, sizeof o);
        o.mode = ld_cfg.policy.probe;
        o.map = ld_cfg.policy.map;
        o.ndomains = dv && dv->ndomains ? dv->ndomains : 2;
        o.use_cache = 1;
        /* o.force stays 0: ld_probe_device honours LDSHIM_PROBE_FORCE itself */
        if (dv && dv->backend && dv->backend->localizes) {
            o.alloc_localized = alloc_localized;
            o.free_localized = free_localized;
            o.alloc_ctx = &lc;
        }
        ld_probe_result_t *res = &results[dev];
        if (ld_probe_device(d, dev, &o, res) != 0) {
            LD_WARN(PROBE, "device %d: topology probe could not query the device; no map published", dev);
            atomic_store(&probe_state[dev], PROBE_NONE);
        } else {
            /* The driver's own answer where it has one; by the policy it may replace the map. */
            ld_truth_check(d, dev, ld_cfg.policy.topology_source, ld_cfg.policy.map, res, &truths[dev]);
            ldshim_topology_t t = res->published;
            apply_state(&t);
            pthread_mutex_lock(&mods_mu);
            published[dev] = t;
            pthread_mutex_unlock(&mods_mu);
            LD_INFO(PROBE, "device %d: %s map, %u SMs in %u domains (%s)%s", dev, ld_probe_name(res->mode_used), res->num_sms,
                           res->num_domains, res->verdict, res->from_cache ? " [cache]" : "");
            probed = 1;
        }
    }
    if (bind) bind_compute(d, dev, ctx, is_primary, claimed, probed ? &results[dev] : NULL);
    if (mine && probed) atomic_store(&probe_state[dev], PROBE_PUBLISHED);
    if (probed) publish_pending(d, dev, ctx);
    ld_own_calls_pop(&oc);
    if (claimed) ld_compute_adopt_current(d, dev);
    ld_own_calls_end(&oc);
}

void ld_topology_unbind(int dev) {
    if (dev < 0 || dev >= LD_MAX_DEVICES) return;
    pthread_mutex_lock(&mods_mu);
    if (published[dev].flags & LDSHIM_TOPO_BOUND) {
        ldshim_topology_t *t = &published[dev];
        t->flags &= ~LDSHIM_TOPO_BOUND;
        t->bound_sms = t->num_sms;
        t->bound_domain = LDSHIM_DOMAIN_NONE;
        memset(t->sm_bound, 0, sizeof t->sm_bound);
        memset(t->sm_bound, 1, t->num_sms < LDSHIM_MAX_SMS ? t->num_sms : LDSHIM_MAX_SMS);
    }
    pthread_mutex_unlock(&mods_mu);
}

void ld_topology_on_module(const ld_driver_t *d, int kind, void *handle, const void *image, const char *path) {
    if (!ld_active() || !handle) return;
    int mentions = image ? ld_image_mentions_symbol(image) : (path ? ld_file_mentions_symbol(path) : 0);
    if (!mentions) return;
    mod_t *m = calloc(1, sizeof *m);
    if (!m) return;
    m->key.handle = handle;      /* calloc zeroed the whole key */
    m->key.kind = kind;
    m->dev = -1;
    CUdevice dev;
    if (d->pfn_cuCtxGetCurrent(&m->ctx) == CUDA_SUCCESS && m->ctx && d->pfn_cuCtxGetDevice(&dev) == CUDA_SUCCESS) m->dev = dev;
    /* A key already recorded belongs to a module that went without an unload the shim
     * saw (its context was destroyed, say) and whose handle the driver reuses: the new
     * record replaces it. */
    mod_t *stale = NULL;
    int added, mdev = m->dev;
    CUcontext mctx = m->ctx;     /* m is the table's once added: an unload may free it */
    pthread_mutex_lock(&mods_mu);
    LD_HASH_REPLACE(mods, key, sizeof m->key, m, stale, added);
    pthread_mutex_unlock(&mods_mu);
    free(stale);
    if (!added) {                /* no host memory for the table: the module goes unpublished */
        LD_DEBUG(TOPO, "%s %p not recorded: out of host memory", kind == LD_MOD_LIBRARY ? "library" : "module", handle);
        free(m);
        return;
    }
    LD_DEBUG(TOPO, "recorded %s %p that defines %s", kind == LD_MOD_LIBRARY ? "library" : "module", handle, LDSHIM_TOPOLOGY_SYMBOL);
    if (mdev >= 0 && mdev < LD_MAX_DEVICES && atomic_load(&probe_state[mdev]) == PROBE_PUBLISHED) {
        ld_own_calls_t oc;
        ld_own_calls_begin(&oc, d);
        publish_pending(d, mdev, mctx);
        ld_own_calls_end(&oc);
    }
}

void ld_topology_forget_module(int kind, void *handle) {
    mod_key_t key;
    memset(&key, 0, sizeof key);
    key.handle = handle;
    key.kind = kind;
    mod_t *m = NULL;
    pthread_mutex_lock(&mods_mu);
    HASH_FIND(hh, mods, &key, sizeof key, m);
    if (m) HASH_DEL(mods, m);
    pthread_mutex_unlock(&mods_mu);
    free(m);
}

int ld_topology_get(int dev, ldshim_topology_t *out) {
    if (dev < 0 || dev >= LD_MAX_DEVICES || atomic_load(&probe_state[dev]) != PROBE_PUBLISHED) {
        if (out) memset(out, 0, sizeof *out);
        return -1;
    }
    if (out) {
        pthread_mutex_lock(&mods_mu);
        *out = published[dev];
        pthread_mutex_unlock(&mods_mu);
    }
    return 0;
}

int ld_topology_truth(int dev, ld_truth_t *out) {
    if (dev < 0 || dev >= LD_MAX_DEVICES || atomic_load(&probe_state[dev]) != PROBE_PUBLISHED || !truths[dev].checked)
        return -1;
    *out = truths[dev];
    return 0;
}

int ld_topology_result(int dev, ld_probe_result_t *out) {
    if (dev < 0 || dev >= LD_MAX_DEVICES || atomic_load(&probe_state[dev]) != PROBE_PUBLISHED) return -1;
    *out = results[dev];
    return 0;
}

void ld_topology_reset(void) {
    for (int i = 0; i < LD_MAX_DEVICES; i++) atomic_store(&probe_state[i], PROBE_NONE);
    mod_t *m, *tmp;
    HASH_ITER(hh, mods, m, tmp) {       /* frees only: no allocation in a forked child */
        HASH_DEL(mods, m);
        free(m);
    }
}

void ld_topology_lock_for_fork(void) { pthread_mutex_lock(&mods_mu); }
void ld_topology_unlock_after_fork(void) { pthread_mutex_unlock(&mods_mu); }
