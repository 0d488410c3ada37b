/* compute.c — compute binding through green contexts (contract: compute.h).
 *
 * NOTES:
 * - The green context is substituted where the program makes the primary context current,
 *   not where it retains it: cudart makes the primary current itself before the retain
 *   returns to it, so a substituted retain result is never used.
 * - Which SMs a split group holds is not in the resource struct before CUDA 13.4: it is
 *   measured by launching the probe image's marker kernel in a green context made of that
 *   group alone, and cached per GPU, driver and split.
 * - The driver's per-thread default stream is not usable in a green context, so every
 *   entry point that takes a stream maps it (and a NULL stream of a _ptsz variant) to a
 *   blocking stream of the green context that belongs to the calling thread; blocking,
 *   because the per-thread default stream synchronizes with the legacy stream. The
 *   synchronous _ptds entry points run stream-ordered on that stream (shim/interpose.c).
 * - A primary's binding is claimed before its probe starts (ld_compute_claim), so a thread
 *   that makes it current meanwhile waits for it rather than running unbound.
 * - A green context goes only with the primary (reset, the program's last release before
 *   exit); the calling thread gets the primary current first, and the destroyed handles keep
 *   answering the primary (ld_context_retire) for threads that still have one current. At exit nothing
 *   is destroyed (at_exit).
 * - No shim lock is held across a driver call, except the per-thread stream list's lock
 *   around stream/context destruction at thread exit, reset and exit, where nothing else can
 *   wait on it. */
#include "shim/compute.h"
#include "shim/compute_groups.h"
#include "shim/compute_streams.h"
#include "shim/log.h"
#include "shim/probe_cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BIND_WAIT_MS     10000    /* longest a thread waits for another's binding build       */

enum { B_NONE = 0, B_BUILDING = 1, B_BOUND = 2, B_UNBOUND = 3 };

typedef struct {
    atomic_int state;
    _Atomic(CUcontext) primary;     /* known from the claim on (ld_compute_claim)            */
    CUgreenCtx green;               /* shared green context                                 */
    CUcontext gctx;                 /* its CUcontext                                        */
    CUdevResourceDesc desc;         /* for one green context per thread                     */
    atomic_int unbound_ctx;         /* program-created contexts seen                        */
    ld_compute_info_t info;         /* written by the claimer while B_BUILDING               */
    ld_compute_info_t last;         /* the last build's, for the report (wait_mu)           */
    int recorded;                   /* `last` holds one (wait_mu)                           */
} binding_t;

static binding_t B[LD_MAX_DEVICES];
static atomic_ullong bound_mask;     /* bit d: B[d] is B_BOUND                               */
static atomic_int building;          /* bindings being built                                 */
static pthread_mutex_t wait_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wait_cv = PTHREAD_COND_INITIALIZER;
static atomic_int launch_warned;
static atomic_int wait_warned[LD_MAX_DEVICES];   /* the bounded wait for a build ran out */
static atomic_int retains[LD_MAX_DEVICES];   /* the program's primary retains, less releases */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

CUcontext ld_compute_primary(int dev) { return atomic_load(&B[dev].primary); }

static ld_compute_opts_t opt;   /* written by ld_compute_configure before any CUDA call */

void ld_compute_configure(const ld_compute_opts_t *o) { opt = *o; }

int ld_compute_requested(void) { return opt.requested && opt.compute.kind != LD_COMPUTE_ALL; }

/* ---- building a binding ----------------------------------------------------------------- */

typedef struct {
    const ld_compute_t *req;
    ld_split_t method;
    uint32_t cap;
    const char *cache_dir;          /* NULL: the default                                      */
    int use_cache, force;
    int equalize, next_domain;      /* ld_compute_opts_t's                                    */
} build_opts_t;

/* The SM count every domain binding gets when they are equalized: the smallest domain's. */
static int equal_count(ld_split_t method, uint32_t cap, const uint8_t *map, uint32_t nsms, uint32_t nd,
                       const ld_sm_groups_t *g, uint32_t *k, char *why, size_t n) {
    *k = 0;
    for (uint32_t d = 0; d < nd; d++) {
        ld_compute_t req = { LD_COMPUTE_DOMAIN, (int)d, 0 };
        ld_compute_plan_t p;
        if (ld_compute_plan(&req, method, cap, map, nsms, nd, g, &p) != 0) {
            snprintf(why, n, "%s", p.why);
            return -1;
        }
        if (!*k || p.count < *k) *k = p.count;
    }
    return 0;
}

typedef struct {
    CUgreenCtx green;
    CUcontext gctx;
    CUdevResourceDesc desc;
} build_out_t;

/* The SM->domain map a fallback split is judged by: a measured one only. */
static const uint8_t *measured_map(const ld_probe_result_t *pr, char *why, size_t n) {
    if (!pr) { snprintf(why, n, "no SM->domain map (probe off or failed)"); return NULL; }
    if (!pr->valid || pr->mode_used == LD_PROBE_EVEN) {
        snprintf(why, n, "no measured SM->domain map (probe: %s)", pr->verdict[0] ? pr->verdict : "even map");
        return NULL;
    }
    return pr->physical;
}

static int build(const ld_driver_t *d, CUdevice dev, const build_opts_t *o, const ld_probe_result_t *pr,
                 ld_compute_info_t *info, build_out_t *out) {
    char why[400] = "";
    double t0 = now_ms(), t_phase = t0;   /* t_phase: start of the phase being timed */
    memset(out, 0, sizeof *out);
    ld_compute_format(o->req, info->request, sizeof info->request);
    snprintf(info->split, sizeof info->split, "%s", ld_split_name(o->method));
    info->requested = 1;
    if (!d->pfn_cuDeviceGetDevResource || !d->pfn_cuDevSmResourceSplitByCount || !d->pfn_cuDevResourceGenerateDesc ||
        !d->pfn_cuGreenCtxCreate || !d->pfn_cuGreenCtxDestroy || !d->pfn_cuCtxFromGreenCtx || !d->pfn_cuGreenCtxStreamCreate) {
        snprintf(info->reason, sizeof info->reason, "the driver has no green contexts (CUDA >= 12.4 needed)");
        return -1;
    }
    ld_sm_split_t *sp = calloc(1, sizeof *sp);
    ld_marker_t m;
    memset(&m, 0, sizeof m);
    int rc = -1, have_marker = 0;
    if (!sp) { snprintf(info->reason, sizeof info->reason, "out of host memory"); return -1; }
    CUresult r = d->pfn_cuDeviceGetDevResource(dev, &sp->all, CU_DEV_RESOURCE_TYPE_SM);
    if (r != CUDA_SUCCESS) { snprintf(why, sizeof why, "cuDeviceGetDevResource(SM): %s", ld_cu_errname(r)); goto done; }
    info->device_sms = sp->all.sm.smCount;
    uint32_t nsms = info->device_sms < LDSHIM_MAX_SMS ? info->device_sms : LDSHIM_MAX_SMS;
    int nd = ld_native_domain_count(d, dev);
    ld_cuDevSmResourceSplit_fn nfn = ld_split_native_fn(d);
    const uint8_t *map = NULL;
    uint8_t label_map[LDSHIM_MAX_SMS];
    ld_compute_t req = *o->req;
    uint32_t cap = o->cap;
    int auto_spread = req.kind == LD_COMPUTE_SPREAD && !req.sms;
    if (nd >= 2 && nfn) {
        if (o->next_domain && req.kind == LD_COMPUTE_DOMAIN) req.domain = (req.domain + 1) % nd;
        ld_compute_t whole = { LD_COMPUTE_DOMAIN, 0, 0 };
        if (ld_split_native(nfn, nd, auto_spread || o->equalize ? &whole : &req, o->method, cap, sp, why, sizeof why))
            goto done;
        if (auto_spread || o->equalize) {
            /* Equal SM counts: every domain's group sized like the smallest (one more split). */
            uint32_t k = 0;
            for (int i = 0; i < sp->g.ngroups; i++)
                if (!k || sp->g.count[i] < k) k = sp->g.count[i];
            if (!k) { snprintf(why, sizeof why, "the driver's split by locality domain left a domain without SMs"); goto done; }
            if (auto_spread) req.sms = k;
            if (!cap || k < cap) cap = k;
            if (ld_split_native(nfn, nd, &req, o->method, cap, sp, why, sizeof why)) goto done;
        }
        snprintf(info->method, sizeof info->method, "driver split by locality domain (%s)", ld_split_name(o->method));
    } else {
        if (!(map = measured_map(pr, why, sizeof why))) goto done;
        nd = (int)pr->num_domains;
        /* mismatch-ld binds the domain after X: shifted once here, not per attempt below. */
        if (o->next_domain && req.kind == LD_COMPUTE_DOMAIN && nd > 0) req.domain = (req.domain + 1) % nd;
        if (ld_split_bycount(d, o->method, sp, why, sizeof why)) goto done;
        snprintf(info->method, sizeof info->method, "cuDevSmResourceSplitByCount, %u-SM groups%s",
                 sp->g.ngroups ? sp->g.count[0] : 0, sp->fine ? ", co-scheduling ignored" : "");
    }

    /* Which SMs each group holds: the cache, else the marker. A cached answer that the
     * final check contradicts is measured again, once. */
    char dir[4096] = "";
    ld_groups_key_t key;
    int cached = 0, keyed = ld_groups_key(d, dev, sp, &key) == 0;
    if (o->use_cache && keyed && ld_cache_dir(o->cache_dir, dir, sizeof dir) == 0 && !o->force) {
        ld_sm_groups_t g;
        if (ld_groups_load(dir, &key, sp, &g) == 0) {
            for (int i = 0; i < g.ngroups; i++) sp->g.sms[i] = g.sms[i];
            cached = 1;
        }
    }
    if (ld_marker_open(d, dev, nsms, &m, why, sizeof why) == 0) have_marker = 1;
    for (int attempt = 0;; attempt++) {
        if (!cached) {
            if (!have_marker) goto done;
            /* The remainder is never bound, so it is not measured. */
            for (int i = 0; i < sp->g.ngroups; i++)
                if (ld_marker_measure(&m, &sp->res[i], &sp->g.sms[i], why, sizeof why)) goto done;
            char w2[160];
            if (ld_sm_groups_check(&sp->g, nsms, w2, sizeof w2)) { snprintf(why, sizeof why, "SM groups: %s", w2); goto done; }
            if (o->use_cache && keyed && dir[0]) ld_groups_store(dir, &key, &sp->g);
        }
        info->groups_from_cache = cached;
        if (sp->native) {
            /* The driver's labels decide; the map below only counts SMs per domain. */
            memset(label_map, 0, sizeof label_map);
            for (int i = 0; i < sp->g.ngroups; i++)
                for (uint32_t s = 0; s < nsms; s++)
                    if (ld_smmask_has(&sp->g.sms[i], s)) label_map[s] = (uint8_t)i;
            map = label_map;
        }

        /* The study states: every bound state gets the SM count of the smallest domain
         * binding (sm-control spreads as many). */
        if (!sp->native) {
            if (auto_spread || o->equalize) {
                uint32_t k = 0;
                char w3[200];
                if (equal_count(o->method, o->cap, map, nsms, (uint32_t)nd, &sp->g, &k, w3, sizeof w3) != 0) {
                    snprintf(why, sizeof why, "%s needs the SM count of every domain binding: %.150s",
                             auto_spread ? "sm-control" : "the study states' equal SM count", w3);
                    goto done;
                }
                if (auto_spread) req.sms = k;
                cap = o->cap && o->cap < k ? o->cap : k;
            }
        }
        ld_compute_format(&req, info->request, sizeof info->request);
        info->bound_domain = req.kind == LD_COMPUTE_DOMAIN ? req.domain : -1;

        /* Choose, create, verify. */
        double t_plan = now_ms();
        info->groups_ms += t_plan - t_phase;
        if (ld_compute_plan(&req, o->method, cap, map, nsms, (uint32_t)nd, &sp->g, &info->plan) != 0) {
            snprintf(why, sizeof why, "%s", info->plan.why);
            goto done;
        }
        CUdevResource chosen[LD_MAX_SM_GROUPS];
        for (int i = 0; i < info->plan.ngroups; i++) chosen[i] = sp->res[info->plan.group[i]];
        if ((r = d->pfn_cuDevResourceGenerateDesc(&out->desc, chosen, (unsigned)info->plan.ngroups)) != CUDA_SUCCESS) {
            snprintf(why, sizeof why, "cuDevResourceGenerateDesc: %s", ld_cu_errname(r));
            goto done;
        }
        if ((r = d->pfn_cuGreenCtxCreate(&out->green, out->desc, dev, CU_GREEN_CTX_DEFAULT_STREAM)) != CUDA_SUCCESS) {
            int mps = 0;
            d->pfn_cuDeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev);
            snprintf(why, sizeof why, "cuGreenCtxCreate: %s%s", ld_cu_errname(r), mps ? " (an MPS client)" : "");
            out->green = NULL;
            goto done;
        }
        if ((r = d->pfn_cuCtxFromGreenCtx(&out->gctx, out->green)) != CUDA_SUCCESS) {
            snprintf(why, sizeof why, "cuCtxFromGreenCtx: %s", ld_cu_errname(r));
            goto done;
        }
        double t_made = now_ms();
        info->context_ms += t_made - t_plan;
        if (!have_marker) {
            if (!sp->native) goto done;   /* groups from the cache cannot be trusted unchecked */
            LD_INFO(COMPUTE, "device %d: bound SMs not checked (%s)", (int)dev, why);
            break;
        }
        ld_smmask_t got;
        char w2[200];
        int mr = ld_marker_run(&m, out->green, out->gctx, info->plan.count, &got, w2, sizeof w2);
        t_phase = now_ms();
        info->verify_ms += t_phase - t_made;
        if (mr != 0) {
            snprintf(why, sizeof why, "checking the bound SMs: %s", w2);
            goto done;
        }
        if (!memcmp(&got, &info->plan.sms, sizeof got)) {
            info->verified = 1;
            break;
        }
        char a[160], b[160];
        snprintf(why, sizeof why, "the bound context ran on SMs %s, planned %s", ld_smmask_format(&got, a, sizeof a),
                 ld_smmask_format(&info->plan.sms, b, sizeof b));
        d->pfn_cuGreenCtxDestroy(out->green);
        out->green = NULL;
        out->gctx = NULL;
        if (!cached || attempt > 0) goto done;
        LD_WARN(COMPUTE, "device %d: the SM-group cache is stale (%s); measuring the groups again", (int)dev, why);
        cached = 0;
    }
    rc = 0;
    info->applied = 1;
    snprintf(info->reason, sizeof info->reason, "%s", info->plan.why);
done:
    if (rc != 0) {
        if (out->green) d->pfn_cuGreenCtxDestroy(out->green);
        memset(out, 0, sizeof *out);
        snprintf(info->reason, sizeof info->reason, "%s", why);
    }
    if (have_marker) ld_marker_close(&m);
    free(sp);
    info->elapsed_ms = now_ms() - t0;
    return rc;
}

/* ---- the shim's binding per device ----------------------------------------------------- */

/* 1 if `c` is a green context of `dev` this thread runs on (shared, or its own). */
static int mine_here(int dev, CUcontext c) {
    if (!c) return 0;
    if (B[dev].gctx == c) return 1;
    ld_thread_slot_t *s = opt.thread_contexts ? ld_thread_slot(dev, 0) : NULL;
    return s && s->gctx == c;
}

/* Exit: nothing is torn down. Destroying a context calls back into every library subscribed
 * to context events (a profiler's CUPTI, the runtime), and at exit some of them have already
 * torn themselves down: their handlers run in the reverse order of registration, so a library
 * loaded after the binding was made is gone before this runs. The green contexts stay valid
 * and current where they are, so exit handlers that still launch (the runtime's, the
 * program's) run bound, as the rest of the program did; the end of the process frees them
 * with the primary contexts. The records stay for the report. */
static atomic_int exiting;
static void at_exit(void) { atomic_store(&exiting, 1); }

static void set_state(binding_t *b, int st) {
    pthread_mutex_lock(&wait_mu);
    if (st == B_BOUND || st == B_UNBOUND) {
        /* What the report shows, also once a reset or the last release forgot the binding. */
        b->last = b->info;
        b->recorded = 1;
    }
    atomic_store(&b->state, st);
    pthread_cond_broadcast(&wait_cv);
    pthread_mutex_unlock(&wait_mu);
}

int ld_compute_claim(CUdevice dev, CUcontext primary) {
    if (!ld_compute_requested() || dev < 0 || dev >= LD_MAX_DEVICES || !primary) return 0;
    binding_t *b = &B[dev];
    int expect = B_NONE;
    if (!atomic_compare_exchange_strong(&b->state, &expect, B_BUILDING)) return 0;
    atomic_store(&b->primary, primary);
    atomic_fetch_add(&building, 1);
    return 1;
}

void ld_compute_on_context(const ld_driver_t *d, CUdevice dev, CUcontext ctx, int is_primary, int claimed,
                           const ld_probe_result_t *probe) {
    if (!ld_compute_requested() || dev < 0 || dev >= LD_MAX_DEVICES || !ctx) return;
    binding_t *b = &B[dev];
    if (!is_primary) {
        if (atomic_fetch_add(&b->unbound_ctx, 1) == 0)
            LD_WARN(COMPUTE, "device %d: a context the program created itself (cuCtxCreate) runs unbound; "
                             "only the primary context is bound to %s", (int)dev, b->info.request[0] ? b->info.request : "SMs");
        return;
    }
    if (!claimed) return;
    build_opts_t o = { &opt.compute, opt.split, opt.cap, NULL, 1, opt.force, opt.equalize, opt.next_domain };
    build_out_t out;
    memset(&b->info, 0, sizeof b->info);
    b->info.thread_contexts = opt.thread_contexts;
    int rc = build(d, dev, &o, probe, &b->info, &out);
    if (rc == 0) {
        static atomic_int exit_registered;
        if (!atomic_exchange(&exit_registered, 1)) atexit(at_exit);
        ld_compute_forget_handle(out.gctx);
        b->green = out.green;
        b->gctx = out.gctx;
        b->desc = out.desc;
        atomic_fetch_or(&bound_mask, 1ull << dev);
        char list[400];
        LD_INFO(COMPUTE, "device %d bound to %s: %u SMs (%s)%s, %.1f ms (groups %.1f, context %.1f, check %.1f)",
                         (int)dev, b->info.request, b->info.plan.count, ld_smmask_format(&b->info.plan.sms, list, sizeof list),
                         b->info.groups_from_cache ? " [cache]" : "", b->info.elapsed_ms, b->info.groups_ms,
                         b->info.context_ms, b->info.verify_ms);
        set_state(b, B_BOUND);
    } else {
        LD_WARN(COMPUTE, "device %d runs unbound (compute = %s): %s", (int)dev, b->info.request, b->info.reason);
        set_state(b, B_UNBOUND);
    }
    atomic_fetch_sub(&building, 1);
}

/* Wait (bounded) while `dev`'s binding is being built by another thread. */
static int settled_state(binding_t *b) {
    int st = atomic_load(&b->state);
    if (st != B_BUILDING) return st;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += BIND_WAIT_MS / 1000;
    pthread_mutex_lock(&wait_mu);
    while ((st = atomic_load(&b->state)) == B_BUILDING)
        if (pthread_cond_timedwait(&wait_cv, &wait_mu, &until) != 0) break;
    pthread_mutex_unlock(&wait_mu);
    return st;
}

/* The green context this thread runs `dev` on. */
static CUcontext thread_context(const ld_driver_t *d, int dev) {
    binding_t *b = &B[dev];
    if (!opt.thread_contexts) return b->gctx;
    ld_thread_slot_t *s = ld_thread_slot(dev, 1);
    if (!s) return b->gctx;
    if (!s->gctx) ld_thread_slot_take_idle(s);
    if (!s->gctx) {
        CUgreenCtx g = NULL;
        CUcontext c = NULL;
        if (d->pfn_cuGreenCtxCreate(&g, b->desc, dev, CU_GREEN_CTX_DEFAULT_STREAM) != CUDA_SUCCESS) return b->gctx;
        if (d->pfn_cuCtxFromGreenCtx(&c, g) != CUDA_SUCCESS) { d->pfn_cuGreenCtxDestroy(g); return b->gctx; }
        ld_compute_forget_handle(c);
        ld_thread_slot_set_context(s, g, c);
    }
    return s->gctx;
}

CUcontext ld_compute_bind(CUcontext c) {
    if (!c || (!atomic_load_explicit(&bound_mask, memory_order_acquire) && !atomic_load(&building))) return c;
    for (int dev = 0; dev < LD_MAX_DEVICES; dev++) {
        binding_t *b = &B[dev];
        int st = atomic_load_explicit(&b->state, memory_order_acquire);
        if (st == B_NONE || st == B_UNBOUND) continue;
        /* Only the device whose primary `c` is matters (its primary is known from the claim
         * on; in the instant before, it may be this one). */
        CUcontext p = atomic_load(&b->primary);
        if (p && p != c) continue;
        if (st == B_BUILDING && (st = settled_state(b)) == B_BUILDING) {
            if (!atomic_exchange(&wait_warned[dev], 1))
                LD_WARN(COMPUTE, "device %d: its binding is still being built after %d s; this thread runs unbound "
                                 "on it until it makes the primary context current again", dev, BIND_WAIT_MS / 1000);
            return c;
        }
        if (st == B_BOUND && atomic_load(&b->primary) == c && (atomic_load(&bound_mask) & (1ull << dev))) {
            const ld_driver_t *d = ld_driver();
            return d ? thread_context(d, dev) : c;
        }
    }
    return c;
}

CUcontext ld_compute_unbind(CUcontext c) {
    if (!c || opt.report_green) return c;
    unsigned long long mask = atomic_load_explicit(&bound_mask, memory_order_acquire);
    int maybe_other = 0;
    for (int dev = 0; dev < LD_MAX_DEVICES && (mask >> dev); dev++) {
        if (!((mask >> dev) & 1)) continue;
        CUcontext prim = atomic_load(&B[dev].primary);
        if (B[dev].gctx == c) return prim;
        if (opt.thread_contexts) {
            if (c == prim) return c;
            ld_thread_slot_t *s = ld_thread_slot(dev, 0);
            if (s && s->gctx == c) return prim;
            maybe_other = 1;
        }
    }
    /* A stream, or memory, made on another thread answers that thread's green context. */
    if (maybe_other) {
        int dev = ld_thread_context_owner(c);
        if (dev >= 0) return atomic_load(&B[dev].primary);
    }
    CUcontext p = ld_context_retired_primary(c);
    return p ? p : c;
}

int ld_compute_owns(int dev, CUcontext c) {
    if (dev < 0 || dev >= LD_MAX_DEVICES || !c || !(atomic_load(&bound_mask) & (1ull << dev))) return 0;
    if (B[dev].gctx == c) return 1;
    return opt.thread_contexts && ld_thread_context_owner(c) == dev;
}

CUstream ld_compute_stream(CUstream s, int per_thread_variant) {
    if (s != CU_STREAM_PER_THREAD && !(per_thread_variant && s == NULL)) return s;
    unsigned long long mask = atomic_load_explicit(&bound_mask, memory_order_acquire);
    if (!mask) return s;
    const ld_driver_t *d = ld_driver();
    CUcontext cur = NULL;
    if (!d || d->pfn_cuCtxGetCurrent(&cur) != CUDA_SUCCESS || !cur) return s;
    for (int dev = 0; mask; dev++, mask >>= 1) {
        if (!(mask & 1)) continue;
        binding_t *b = &B[dev];
        ld_thread_slot_t *sl = NULL;
        if (b->gctx != cur && !(opt.thread_contexts && (sl = ld_thread_slot(dev, 0)) && sl->gctx == cur)) continue;
        if (!sl) sl = ld_thread_slot(dev, 1);
        if (!sl) {
            LD_DEBUG(COMPUTE, "no per-thread stream slot left on this thread; using the legacy stream");
            return CU_STREAM_LEGACY;
        }
        if (!sl->stream) {
            CUstream ns = NULL;
            /* Blocking, like the per-thread default stream (it synchronizes with the legacy
             * stream); created with the bound context current, so it belongs to it. */
            if (d->pfn_cuStreamCreate(&ns, CU_STREAM_DEFAULT) != CUDA_SUCCESS) return CU_STREAM_LEGACY;
            ld_thread_slot_set_stream(sl, ns);
        }
        return sl->stream;
    }
    return s;
}

int ld_compute_sm_count(int dev, int *out) {
    if (dev < 0 || dev >= LD_MAX_DEVICES || !opt.bound_sms || !(atomic_load(&bound_mask) & (1ull << dev)))
        return 0;
    *out = (int)B[dev].info.plan.count;
    return 1;
}

void ld_compute_note_launch_error(CUresult r, const char *what, unsigned blocks) {
    if (!atomic_load(&bound_mask) || (r != CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE && r != CUDA_ERROR_INVALID_VALUE &&
                                      r != CUDA_ERROR_NOT_SUPPORTED))
        return;
    /* The placement applied on the device whose bound context is current (a study state's
     * differs from the configured one: mismatch-ld's next domain, sm-control's count). */
    const ld_driver_t *d = ld_driver();
    CUcontext cur = NULL;
    int dev = -1;
    if (d && d->pfn_cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur)
        for (int k = 0; k < LD_MAX_DEVICES && dev < 0; k++)
            if ((atomic_load(&bound_mask) & (1ull << k)) && (B[k].gctx == cur || (opt.thread_contexts && ld_compute_owns(k, cur))))
                dev = k;
    if (dev < 0) return;   /* not a launch in a bound context */
    if (atomic_exchange(&launch_warned, 1)) return;
    LD_WARN(COMPUTE, "%s of %u blocks failed (%s) in a context bound to %s (%u SMs); a cooperative grid or cluster "
                     "must fit the bound SMs (the SM-count attribute answers their number)", what, blocks, ld_cu_errname(r),
                     B[dev].info.request, B[dev].info.plan.count);
}

const char *ld_compute_setting(char *buf, size_t n, int *equal_count) {
    char c[32];
    ld_compute_format(&opt.compute, c, sizeof c);
    int bind = opt.requested && opt.compute.kind != LD_COMPUTE_ALL;
    if (opt.compute.kind == LD_COMPUTE_ALL) snprintf(buf, n, "all");
    else if (!opt.requested) snprintf(buf, n, "%s (ignored in state stock)", c);
    else if (opt.compute.kind == LD_COMPUTE_DOMAIN && opt.next_domain)
        snprintf(buf, n, "the domain after %d", opt.compute.domain);
    else if (opt.compute.kind == LD_COMPUTE_SPREAD && !opt.compute.sms)
        snprintf(buf, n, "spread over as many SMs as a domain binding gets");
    else snprintf(buf, n, "%s", c);
    if (equal_count) *equal_count = bind && opt.equalize;
    return buf;
}

void ld_compute_publish(int dev, ldshim_topology_t *t) {
    if (dev < 0 || dev >= LD_MAX_DEVICES || !(atomic_load(&bound_mask) & (1ull << dev))) return;
    const ld_compute_plan_t *p = &B[dev].info.plan;
    t->flags |= LDSHIM_TOPO_BOUND;
    t->bound_sms = p->count;
    memset(t->sm_bound, 0, sizeof t->sm_bound);
    for (uint32_t s = 0; s < LDSHIM_MAX_SMS; s++) t->sm_bound[s] = (uint8_t)ld_smmask_has(&p->sms, s);
    t->bound_domain = B[dev].info.bound_domain >= 0 ? (uint32_t)B[dev].info.bound_domain : LDSHIM_DOMAIN_NONE;
}

void ld_compute_forget_device(const ld_driver_t *d, int dev) {
    if (dev < 0 || dev >= LD_MAX_DEVICES) return;
    binding_t *b = &B[dev];
    if (atomic_load(&b->state) != B_BOUND || !(atomic_load(&bound_mask) & (1ull << dev))) return;
    CUcontext prim = atomic_load(&b->primary), cur = NULL;
    /* This thread runs on the green context: it has the primary current again, as it would
     * without the shim, before that context goes (other threads' stay; they are told the
     * primary, see ld_context_retire). */
    if (d->pfn_cuCtxGetCurrent(&cur) == CUDA_SUCCESS && mine_here(dev, cur)) d->pfn_cuCtxSetCurrent(prim);
    atomic_fetch_and(&bound_mask, ~(1ull << dev));
    ld_thread_objects_destroy(d, dev);
    ld_context_retire(b->gctx, prim);
    if (b->green) d->pfn_cuGreenCtxDestroy(b->green);
    b->green = NULL;
    b->gctx = NULL;
    atomic_store(&b->primary, NULL);
    set_state(b, B_NONE);
    LD_INFO(COMPUTE, "device %d: the primary context is reset or released; bound again at the next retain", dev);
}

void ld_compute_note_retain(int dev) {
    if (ld_compute_requested() && dev >= 0 && dev < LD_MAX_DEVICES) atomic_fetch_add(&retains[dev], 1);
}

int ld_compute_note_release(int dev) {
    /* The runtime's own release at exit: the binding stays (at_exit). */
    if (!ld_compute_requested() || dev < 0 || dev >= LD_MAX_DEVICES || atomic_load(&exiting)) return 0;
    int n = atomic_load(&retains[dev]);
    while (n > 0 && !atomic_compare_exchange_weak(&retains[dev], &n, n - 1)) {}
    return n == 1;
}

void ld_compute_adopt_current(const ld_driver_t *d, int dev) {
    if (dev < 0 || dev >= LD_MAX_DEVICES || !(atomic_load(&bound_mask) & (1ull << dev))) return;
    CUcontext cur = NULL;
    if (d->pfn_cuCtxGetCurrent(&cur) != CUDA_SUCCESS || !cur || cur != atomic_load(&B[dev].primary)) return;
    CUcontext g = thread_context(d, dev);
    if (g && g != cur) d->pfn_cuCtxSetCurrent(g);
}

int ld_compute_info(int dev, ld_compute_info_t *out) {
    if (dev < 0 || dev >= LD_MAX_DEVICES) return -1;
    int unbound = atomic_load(&B[dev].unbound_ctx);
    pthread_mutex_lock(&wait_mu);
    int recorded = B[dev].recorded;
    if (recorded) *out = B[dev].last;
    pthread_mutex_unlock(&wait_mu);
    if (!recorded && !unbound) return -1;
    if (!recorded) { memset(out, 0, sizeof *out); ld_compute_format(&opt.compute, out->request, sizeof out->request); }
    out->unbound_contexts = unbound;
    return 0;
}

int ld_compute_build_standalone(const ld_driver_t *d, CUdevice dev, const ld_compute_t *req, ld_split_t method,
                                uint32_t cap, const ld_probe_result_t *probe, const char *cache_dir, int use_cache,
                                ld_compute_info_t *out) {
    build_opts_t o = { req, method, cap, cache_dir, use_cache, 0, 0, 0 };
    build_out_t bo;
    memset(out, 0, sizeof *out);
    int rc = build(d, dev, &o, probe, out, &bo);
    if (rc == 0 && bo.green) d->pfn_cuGreenCtxDestroy(bo.green);
    return rc;
}

void ld_compute_reset(void) {
    atomic_store(&bound_mask, 0);
    atomic_store(&building, 0);
    for (int dev = 0; dev < LD_MAX_DEVICES; dev++) {
        memset(&B[dev].info, 0, sizeof B[dev].info);
        memset(&B[dev].last, 0, sizeof B[dev].last);
        B[dev].recorded = 0;
        B[dev].green = NULL;
        B[dev].gctx = NULL;
        atomic_store(&B[dev].primary, NULL);
        atomic_store(&B[dev].state, B_NONE);
    }
    for (int dev = 0; dev < LD_MAX_DEVICES; dev++) {
        atomic_store(&B[dev].unbound_ctx, 0);
        atomic_store(&retains[dev], 0);   /* the child retains its primaries anew */
    }
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;   /* no thread of the child waits on it */
    wait_cv = c;
    ld_thread_objects_reset();   /* this thread's slots are the parent's: stale; no contexts */
    atomic_store(&launch_warned, 0);
    for (int dev = 0; dev < LD_MAX_DEVICES; dev++) atomic_store(&wait_warned[dev], 0);
}

void ld_compute_lock_for_fork(void) {
    pthread_mutex_lock(&wait_mu);
    ld_thread_objects_lock();
}
void ld_compute_unlock_after_fork(void) {
    ld_thread_objects_unlock();
    pthread_mutex_unlock(&wait_mu);
}
