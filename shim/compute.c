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
 *   answering the primary (retire) for threads that still have one current. At exit nothing
 *   is destroyed (at_exit).
 * - No shim lock is held across a driver call, except the per-thread stream list's lock
 *   around stream/context destruction at thread exit, reset and exit, where nothing else can
 *   wait on it. */
#include "shim/compute.h"
#include "shim/log.h"
#include "shim/probe_cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern const unsigned char ld_probe_fatbin[] __attribute__((weak, visibility("hidden")));

#define MARKER_HOLD_NS   20000u   /* each marker CTA holds its SM this long: spreads a launch */
#define MARKER_WAVES     4u       /* marker CTAs per SM of the group                          */
#define MARKER_TRIES     3        /* relaunches of a marker that missed SMs                   */
#define BIND_WAIT_MS     10000    /* longest a thread waits for another's binding build       */
#define GROUPS_FILE_MAX  (LD_MAX_SM_GROUPS * 96 + 512)
#define TLS_SLOTS        8        /* devices one thread can hold per-thread streams on        */

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
static atomic_uint gen[LD_MAX_DEVICES];   /* bumped when a device's streams are destroyed   */
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

static ld_compute_opts_t opt;   /* written by ld_compute_configure before any CUDA call */

void ld_compute_configure(const ld_compute_opts_t *o) { opt = *o; }

int ld_compute_requested(void) { return opt.requested && opt.compute.kind != LD_COMPUTE_ALL; }

/* ---- per-thread streams (and per-thread green contexts) -------------------------------- */

typedef struct { int dev; unsigned gen; CUstream stream; CUgreenCtx green; CUcontext gctx; } slot_t;
typedef struct tblock {
    slot_t slot[TLS_SLOTS];
    int n;
    struct tblock *prev, *next;
} tblock_t;

/* A per-thread green context whose thread exited. Streams, events and modules the thread
 * created in it may still be used by other threads, so it lives on until a reset (or the end
 * of the process), and the next thread that needs one takes it (so the number never exceeds
 * the threads alive at once). */
typedef struct idle_green { struct idle_green *next; int dev; unsigned gen; CUgreenCtx green; CUcontext gctx; } idle_t;

static pthread_mutex_t blocks_mu = PTHREAD_MUTEX_INITIALIZER;
static tblock_t *blocks;
static idle_t *idle;                 /* blocks_mu                                             */
static pthread_key_t block_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static int key_ok;
static __thread tblock_t *t_block;

/* ---- retired green contexts ------------------------------------------------------------ */

/* A green context destroyed at a reset (or the last release) may still be current on a
 * thread that never made the primary current again; what that thread is told stays the
 * primary. A handle the driver hands out again (a new context at the same address) leaves
 * the list. */
#define RETIRED_MAX 256
static pthread_mutex_t retired_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { CUcontext gctx, primary; } retired[RETIRED_MAX];
static int retired_next;
static atomic_int nretired;          /* entries in use                                       */

static void retire(CUcontext gctx, CUcontext primary) {
    if (!gctx || !primary) return;
    pthread_mutex_lock(&retired_mu);
    if (!retired[retired_next].gctx) atomic_fetch_add(&nretired, 1);
    retired[retired_next].gctx = gctx;
    retired[retired_next].primary = primary;
    retired_next = (retired_next + 1) % RETIRED_MAX;
    pthread_mutex_unlock(&retired_mu);
}

static CUcontext retired_primary(CUcontext c) {
    CUcontext p = NULL;
    pthread_mutex_lock(&retired_mu);
    for (int i = 0; i < RETIRED_MAX && !p; i++)
        if (retired[i].gctx == c) p = retired[i].primary;
    pthread_mutex_unlock(&retired_mu);
    return p;
}

void ld_compute_forget_handle(CUcontext c) {
    if (!c || !atomic_load(&nretired)) return;
    pthread_mutex_lock(&retired_mu);
    for (int i = 0; i < RETIRED_MAX; i++)
        if (retired[i].gctx == c) {
            retired[i].gctx = retired[i].primary = NULL;
            atomic_fetch_sub(&nretired, 1);
        }
    pthread_mutex_unlock(&retired_mu);
}

static void destroy_slot(const ld_driver_t *d, slot_t *s) {
    if (s->stream) d->cuStreamDestroy_v2(s->stream);
    if (s->gctx && s->dev >= 0) retire(s->gctx, atomic_load(&B[s->dev].primary));
    if (s->green && d->cuGreenCtxDestroy) d->cuGreenCtxDestroy(s->green);
    memset(s, 0, sizeof *s);
    s->dev = -1;
}

/* Thread exit: its streams go (a stream with work left is released by the driver when the
 * work is done), its green contexts wait for the next thread (idle_t), and its block leaves
 * the list. */
static void block_dtor(void *p) {
    tblock_t *b = p;
    const ld_driver_t *d = ld_driver();
    pthread_mutex_lock(&blocks_mu);
    if (b->prev) b->prev->next = b->next;
    else if (blocks == b) blocks = b->next;
    if (b->next) b->next->prev = b->prev;
    for (int i = 0; i < b->n; i++) {
        slot_t *s = &b->slot[i];
        if (!d || s->dev < 0 || s->gen != atomic_load(&gen[s->dev])) continue;
        idle_t *x = s->green ? malloc(sizeof *x) : NULL;
        if (x) {
            *x = (idle_t){ idle, s->dev, s->gen, s->green, s->gctx };
            idle = x;
            s->green = NULL;
            s->gctx = NULL;
        }
        destroy_slot(d, s);
    }
    pthread_mutex_unlock(&blocks_mu);
    free(b);
    t_block = NULL;
}

static void make_key(void) { key_ok = pthread_key_create(&block_key, block_dtor) == 0; }

static tblock_t *my_block(void) {
    if (t_block) return t_block;
    pthread_once(&key_once, make_key);
    if (!key_ok) return NULL;
    tblock_t *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    for (int i = 0; i < TLS_SLOTS; i++) b->slot[i].dev = -1;
    pthread_mutex_lock(&blocks_mu);
    b->next = blocks;
    if (blocks) blocks->prev = b;
    blocks = b;
    pthread_mutex_unlock(&blocks_mu);
    pthread_setspecific(block_key, b);
    t_block = b;
    return b;
}

/* This thread's slot for `dev` (current generation), creating it when `create`. */
static slot_t *my_slot(int dev, int create) {
    tblock_t *b = t_block ? t_block : (create ? my_block() : NULL);
    if (!b) return NULL;
    unsigned g = atomic_load(&gen[dev]);
    slot_t *free_slot = NULL;
    for (int i = 0; i < b->n; i++) {
        slot_t *s = &b->slot[i];
        if (s->dev == dev && s->gen == g) return s;
        if (!free_slot && (s->dev < 0 || s->gen != atomic_load(&gen[s->dev]))) free_slot = s;
    }
    if (!create) return NULL;
    if (!free_slot) {
        if (b->n == TLS_SLOTS) return NULL;
        free_slot = &b->slot[b->n++];
    }
    pthread_mutex_lock(&blocks_mu);
    memset(free_slot, 0, sizeof *free_slot);
    free_slot->dev = dev;
    free_slot->gen = g;
    pthread_mutex_unlock(&blocks_mu);
    return free_slot;
}

/* Destroy every thread's streams/contexts of `dev` (-1: all devices) and invalidate them. */
static void destroy_thread_objects(const ld_driver_t *d, int dev) {
    pthread_mutex_lock(&blocks_mu);
    for (tblock_t *b = blocks; b; b = b->next)
        for (int i = 0; i < b->n; i++) {
            slot_t *s = &b->slot[i];
            if (s->dev < 0 || (dev >= 0 && s->dev != dev) || s->gen != atomic_load(&gen[s->dev])) continue;
            destroy_slot(d, s);
        }
    for (idle_t **pp = &idle; *pp;) {
        idle_t *x = *pp;
        if (dev >= 0 && x->dev != dev) { pp = &x->next; continue; }
        *pp = x->next;
        if (x->gen == atomic_load(&gen[x->dev])) {
            retire(x->gctx, atomic_load(&B[x->dev].primary));
            if (d->cuGreenCtxDestroy) d->cuGreenCtxDestroy(x->green);
        }
        free(x);
    }
    for (int k = 0; k < LD_MAX_DEVICES; k++)
        if (dev < 0 || k == dev) atomic_fetch_add(&gen[k], 1);
    pthread_mutex_unlock(&blocks_mu);
}

/* The device whose per-thread green context (of any thread, or idle) `c` is; -1 if none. */
static int thread_owner(CUcontext c) {
    int dev = -1;
    pthread_mutex_lock(&blocks_mu);
    for (tblock_t *b = blocks; b && dev < 0; b = b->next)
        for (int i = 0; i < b->n; i++) {
            const slot_t *s = &b->slot[i];
            if (s->dev >= 0 && s->gctx == c && s->gen == atomic_load(&gen[s->dev])) { dev = s->dev; break; }
        }
    for (const idle_t *x = idle; x && dev < 0; x = x->next)
        if (x->gctx == c && x->gen == atomic_load(&gen[x->dev])) dev = x->dev;
    pthread_mutex_unlock(&blocks_mu);
    return dev;
}

/* ---- the marker kernel ------------------------------------------------------------------ */

typedef struct {
    const ld_driver_t *d;
    CUdevice dev;
    CUlibrary lib;
    CUkernel clear, marker;
    CUdeviceptr seen;
    uint32_t nsms;
    unsigned smem;
} marker_t;

static void marker_close(marker_t *m) {
    /* Retried once: a transient failure must not leave the counters allocated. */
    if (m->seen && m->d->cuMemFree_v2(m->seen) != CUDA_SUCCESS) m->d->cuMemFree_v2(m->seen);
    if (m->lib) m->d->cuLibraryUnload(m->lib);
    memset(m, 0, sizeof *m);
}

static int marker_open(const ld_driver_t *d, CUdevice dev, uint32_t nsms, marker_t *m, char *why, size_t n) {
    memset(m, 0, sizeof *m);
    m->d = d;
    m->dev = dev;
    m->nsms = nsms;
    if (!ld_probe_fatbin) { snprintf(why, n, "the marker kernel is not built into this library"); return -1; }
    if (!d->cuLibraryLoadData || !d->cuLibraryGetKernel || !d->cuLibraryUnload) {
        snprintf(why, n, "the driver lacks context-independent loading (cuLibraryLoadData, CUDA >= 12.0)");
        return -1;
    }
    CUresult r = d->cuLibraryLoadData(&m->lib, ld_probe_fatbin, NULL, NULL, 0, NULL, NULL, 0);
    if (r != CUDA_SUCCESS) { m->lib = NULL; snprintf(why, n, "loading the marker kernel: %s", ld_cu_errname(r)); return -1; }
    if ((r = d->cuLibraryGetKernel(&m->clear, m->lib, "ldprobe_clear")) != CUDA_SUCCESS ||
        (r = d->cuLibraryGetKernel(&m->marker, m->lib, "ldprobe_sm_marker")) != CUDA_SUCCESS) {
        snprintf(why, n, "finding the marker kernel: %s", ld_cu_errname(r));
        marker_close(m);
        return -1;
    }
    int optin = 0;
    d->cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev);
    m->smem = optin > 0 ? (unsigned)optin : 48u * 1024u;
    if (d->cuKernelSetAttribute &&
        d->cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)m->smem, m->marker, dev) != CUDA_SUCCESS)
        m->smem = 48u * 1024u;   /* more CTAs per SM then; the relaunches still cover the group */
    if ((r = d->cuMemAlloc_v2(&m->seen, (nsms + 1) * sizeof(uint32_t))) != CUDA_SUCCESS) {
        m->seen = 0;
        snprintf(why, n, "marker counters: %s", ld_cu_errname(r));
        marker_close(m);
        return -1;
    }
    return 0;
}

/* Launch the marker in green context `g` (CUcontext gctx) and collect the SMs it ran on.
 * `expect`: the SMs the group should have (0: unknown). Returns 0, or -1 with why. */
static int marker_run(marker_t *m, CUgreenCtx g, CUcontext gctx, uint32_t expect, ld_smmask_t *out, char *why, size_t n) {
    const ld_driver_t *d = m->d;
    memset(out, 0, sizeof *out);
    uint32_t *seen = malloc((m->nsms + 1) * sizeof *seen);
    if (!seen) { snprintf(why, n, "out of host memory"); return -1; }
    CUstream st = NULL;
    CUresult r = d->cuGreenCtxStreamCreate(&st, g, CU_STREAM_NON_BLOCKING, 0);
    if (r != CUDA_SUCCESS) { free(seen); snprintf(why, n, "cuGreenCtxStreamCreate: %s", ld_cu_errname(r)); return -1; }
    int pushed = d->cuCtxPushCurrent_v2(gctx) == CUDA_SUCCESS;
    int rc = -1;
    uint32_t nseen = m->nsms + 1, hold = MARKER_HOLD_NS;
    unsigned grid = MARKER_WAVES * (expect ? expect : m->nsms);
    for (int t = 0; t < MARKER_TRIES; t++) {
        void *cargs[] = { &m->seen, &nseen };
        void *margs[] = { &m->seen, &m->nsms, &hold };
        if ((r = d->cuLaunchKernel((CUfunction)m->clear, 1, 1, 1, 256, 1, 1, 0, st, cargs, NULL)) != CUDA_SUCCESS ||
            (r = d->cuLaunchKernel((CUfunction)m->marker, grid, 1, 1, 32, 1, 1, m->smem, st, margs, NULL)) != CUDA_SUCCESS ||
            (r = d->cuStreamSynchronize(st)) != CUDA_SUCCESS ||
            (r = d->cuMemcpyDtoH_v2(seen, m->seen, nseen * sizeof *seen)) != CUDA_SUCCESS) {
            snprintf(why, n, "running the marker kernel: %s", ld_cu_errname(r));
            break;
        }
        for (uint32_t s = 0; s < m->nsms; s++)
            if (seen[s]) ld_smmask_set(out, s);
        if (seen[m->nsms]) { snprintf(why, n, "the marker saw %u SM ids beyond %u", seen[m->nsms], m->nsms); break; }
        if (!expect || ld_smmask_count(out) >= expect) { rc = 0; break; }
        snprintf(why, n, "the marker reached %u of the group's %u SMs", ld_smmask_count(out), expect);
    }
    if (pushed) { CUcontext x; d->cuCtxPopCurrent_v2(&x); }
    if (d->cuStreamDestroy_v2(st) != CUDA_SUCCESS) d->cuStreamDestroy_v2(st);   /* once more: never leak it */
    free(seen);
    return rc;
}

/* Measure the SMs of one resource (a group, or the remainder). */
static int measure_one(marker_t *m, CUdevResource *res, ld_smmask_t *out, char *why, size_t n) {
    const ld_driver_t *d = m->d;
    CUdevResourceDesc desc;
    CUgreenCtx g = NULL;
    CUcontext gc = NULL;
    CUresult r = d->cuDevResourceGenerateDesc(&desc, res, 1);
    if (r == CUDA_SUCCESS) r = d->cuGreenCtxCreate(&g, desc, m->dev, CU_GREEN_CTX_DEFAULT_STREAM);
    if (r != CUDA_SUCCESS) { snprintf(why, n, "green context for one SM group: %s", ld_cu_errname(r)); return -1; }
    int rc = -1;
    if ((r = d->cuCtxFromGreenCtx(&gc, g)) != CUDA_SUCCESS) snprintf(why, n, "cuCtxFromGreenCtx: %s", ld_cu_errname(r));
    else rc = marker_run(m, g, gc, res->sm.smCount, out, why, n);
    if (d->cuGreenCtxDestroy(g) != CUDA_SUCCESS) d->cuGreenCtxDestroy(g);   /* once more: never leak it */
    return rc;
}

/* ---- splits ------------------------------------------------------------------------------ */

typedef struct {
    CUdevResource all;
    CUdevResource res[LD_MAX_SM_GROUPS];
    CUdevResource rem;
    ld_sm_groups_t g;
    int native, fine;
    char desc[48];            /* cache key part: "bycount:8:0", "domain:aligned:0"          */
} split_t;

static ld_cuDevSmResourceSplit_fn native_split_fn(const ld_driver_t *d) {
    return d->handle ? (ld_cuDevSmResourceSplit_fn)ld_real_dlsym(d->handle, "cuDevSmResourceSplit") : NULL;
}

/* Groups of cuDevSmResourceSplitByCount: aligned/backfill at the minimum partition, fine with
 * co-scheduling ignored (smaller groups, no large clusters). */
static int split_bycount(const ld_driver_t *d, ld_split_t method, split_t *sp, char *why, size_t n) {
    unsigned flags = method == LD_SPLIT_FINE ? CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING : 0u;
    unsigned minc = method == LD_SPLIT_FINE ? 2u : sp->all.sm.minSmPartitionSize;
    if (!minc) minc = 2;
    unsigned ng = sp->all.sm.smCount / minc;
    if (ng > LD_MAX_SM_GROUPS) ng = LD_MAX_SM_GROUPS;
    memset(sp->res, 0, sizeof sp->res);
    memset(&sp->rem, 0, sizeof sp->rem);
    CUresult r = d->cuDevSmResourceSplitByCount(sp->res, &ng, &sp->all, &sp->rem, flags, minc);
    if (r != CUDA_SUCCESS && method == LD_SPLIT_FINE) {
        LD_INFO("compute: fine split (%u SMs, co-scheduling ignored) refused: %s; using the aligned split", minc,
                ld_cu_errname(r));
        return split_bycount(d, LD_SPLIT_ALIGNED, sp, why, n);
    }
    if (r != CUDA_SUCCESS) { snprintf(why, n, "cuDevSmResourceSplitByCount(%u): %s", minc, ld_cu_errname(r)); return -1; }
    memset(&sp->g, 0, sizeof sp->g);
    sp->g.ngroups = (int)ng;
    for (unsigned i = 0; i < ng; i++) { sp->g.count[i] = sp->res[i].sm.smCount; sp->g.domain[i] = -1; }
    snprintf(sp->desc, sizeof sp->desc, "bycount:%u:%u", minc, flags);
    sp->fine = flags != 0;
    return 0;
}

/* CUDA >= 13.4: one group per locality domain, told by the driver (CCCL's three methods). */
static int split_native(ld_cuDevSmResourceSplit_fn fn, int nd, const ld_compute_t *req,
                        ld_split_t method, uint32_t cap, split_t *sp, char *why, size_t n) {
    ld_sm_group_params_t p[LDSHIM_MAX_DOMAINS];
    memset(p, 0, sizeof p);
    uint32_t total = sp->all.sm.smCount;
    for (int i = 0; i < nd; i++) {
        p[i].flags = LD_CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_ID;
        p[i].localityDomainId = (unsigned)i;
        uint32_t want = 0;
        if (req->kind == LD_COMPUTE_SPREAD) want = req->sms / (uint32_t)nd;
        else if (cap) want = cap;
        if (method == LD_SPLIT_FINE || method == LD_SPLIT_BACKFILL) p[i].coscheduledSmCount = 2;
        if (method == LD_SPLIT_BACKFILL) {
            p[i].flags |= LD_CU_DEV_SM_RESOURCE_GROUP_BACKFILL;
            if (!want) want = total / (uint32_t)nd;
        }
        unsigned align = p[i].coscheduledSmCount ? p[i].coscheduledSmCount : sp->all.sm.smCoscheduledAlignment;
        if (want && align) want -= want % align;
        p[i].smCount = want;
    }
    memset(sp->res, 0, sizeof sp->res);
    memset(&sp->rem, 0, sizeof sp->rem);
    CUresult r = fn(sp->res, (unsigned)nd, &sp->all, &sp->rem, 0, p);
    if (r != CUDA_SUCCESS) { snprintf(why, n, "cuDevSmResourceSplit by locality domain: %s", ld_cu_errname(r)); return -1; }
    memset(&sp->g, 0, sizeof sp->g);
    sp->g.ngroups = nd;
    for (int i = 0; i < nd; i++) { sp->g.count[i] = sp->res[i].sm.smCount; sp->g.domain[i] = (int8_t)i; }
    sp->native = 1;
    snprintf(sp->desc, sizeof sp->desc, "domain:%s:%u", ld_split_name(method), p[0].smCount);
    return 0;
}

/* ---- the driver's own SM sets, for the probe's check (shim/truth.c) ----------------------- */

int ld_compute_domain_sms(const ld_driver_t *d, CUdevice dev, int nd, uint32_t nsms, uint8_t *map, char *why, size_t n) {
    memset(map, 0xff, nsms);
    ld_cuDevSmResourceSplit_fn fn = native_split_fn(d);
    if (!fn || !d->cuDeviceGetDevResource || !d->cuGreenCtxCreate) {
        snprintf(why, n, "the driver has no cuDevSmResourceSplit (CUDA < 13.1) or no green contexts");
        return -1;
    }
    if (nd < 2 || nd > LDSHIM_MAX_DOMAINS) { snprintf(why, n, "%d locality domains", nd); return -1; }
    split_t *sp = calloc(1, sizeof *sp);
    if (!sp) { snprintf(why, n, "out of host memory"); return -1; }
    int rc = -1;
    CUresult r = d->cuDeviceGetDevResource(dev, &sp->all, CU_DEV_RESOURCE_TYPE_SM);
    if (r != CUDA_SUCCESS) { snprintf(why, n, "cuDeviceGetDevResource: %s", ld_cu_errname(r)); goto out; }
    /* One group per domain holding all its SMs: pairs (the finest co-scheduling), and with
     * 13.5's supplemental SMs, those beyond the domain's multiprocessor count too; a driver
     * that refuses that flag is asked without it. */
    ld_sm_group_params_t p[LDSHIM_MAX_DOMAINS];
    for (int pass = 0; pass < 2; pass++) {
        memset(p, 0, sizeof p);
        for (int i = 0; i < nd; i++) {
            p[i].flags = LD_CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_ID |
                         (pass == 0 ? LD_CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_SUPPLEMENTAL_SMS : 0u);
            p[i].localityDomainId = (unsigned)i;
            p[i].coscheduledSmCount = 2;
        }
        memset(sp->res, 0, sizeof sp->res);
        if ((r = fn(sp->res, (unsigned)nd, &sp->all, &sp->rem, 0, p)) == CUDA_SUCCESS) break;
    }
    if (r != CUDA_SUCCESS) { snprintf(why, n, "cuDevSmResourceSplit by locality domain: %s", ld_cu_errname(r)); goto out; }
    marker_t m;
    if (marker_open(d, dev, nsms, &m, why, n) != 0) goto out;
    rc = 0;
    for (int i = 0; i < nd && rc == 0; i++) {
        ld_smmask_t got;
        if (measure_one(&m, &sp->res[i], &got, why, n) != 0) { rc = -1; break; }
        for (uint32_t sm = 0; sm < nsms; sm++) {
            if (!ld_smmask_has(&got, sm)) continue;
            if (map[sm] != 0xff) { snprintf(why, n, "SM %u is in the groups of domains %u and %d", sm, map[sm], i); rc = -1; break; }
            map[sm] = (uint8_t)i;
        }
    }
    marker_close(&m);
out:
    free(sp);
    return rc;
}

/* ---- groups cache ----------------------------------------------------------------------- */

static int groups_key(const ld_driver_t *d, CUdevice dev, const split_t *sp, ld_groups_key_t *k) {
    memset(k, 0, sizeof *k);
    CUuuid u;
    if (d->cuDeviceGetUuid_v2(&u, dev) != CUDA_SUCCESS) return -1;
    const unsigned char *b = (const unsigned char *)u.bytes;
    snprintf(k->uuid, sizeof k->uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    d->cuDriverGetVersion(&k->driver_version);
    k->num_sms = sp->all.sm.smCount;
    snprintf(k->split, sizeof k->split, "%s", sp->desc);
    return 0;
}

static int groups_load(const char *dir, const ld_groups_key_t *k, const split_t *sp, ld_sm_groups_t *g) {
    char name[256], path[4096], why[512];
    if (ld_groups_cache_name(k, name, sizeof name) || snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return -1;
    char *buf = malloc(GROUPS_FILE_MAX + 1);
    if (!buf) return -1;
    size_t len = 0;
    int rc = ld_cache_read_file(path, buf, GROUPS_FILE_MAX, &len, why, sizeof why);
    if (rc == LD_CACHE_HIT) rc = ld_groups_cache_parse(buf, len, k, g, why, sizeof why) == 0 ? 0 : -2;
    else rc = rc == LD_CACHE_MISS ? -1 : -2;
    free(buf);
    if (rc == 0 && g->ngroups != sp->g.ngroups) { snprintf(why, sizeof why, "%.300s: stale (group count)", path); rc = -2; }
    for (int i = 0; rc == 0 && i < g->ngroups; i++)
        if (g->count[i] != sp->g.count[i]) { snprintf(why, sizeof why, "%.300s: stale (group %d size)", path, i); rc = -2; }
    if (rc == -2) LD_WARN("compute: ignoring SM-group cache: %s", why);
    return rc;
}

static void groups_store(const char *dir, const ld_groups_key_t *k, const ld_sm_groups_t *g) {
    char name[256], path[4096], why[200];
    if (ld_groups_cache_name(k, name, sizeof name) || snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return;
    char *buf = malloc(GROUPS_FILE_MAX);
    if (!buf) return;
    int len = ld_groups_cache_format(k, g, buf, GROUPS_FILE_MAX);
    if (len > 0 && ld_cache_write_file(dir, path, buf, (size_t)len, why, sizeof why) != 0)
        LD_INFO("compute: SM-group cache not written: %s", why);
    free(buf);
}

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
    if (!d->cuDeviceGetDevResource || !d->cuDevSmResourceSplitByCount || !d->cuDevResourceGenerateDesc ||
        !d->cuGreenCtxCreate || !d->cuGreenCtxDestroy || !d->cuCtxFromGreenCtx || !d->cuGreenCtxStreamCreate) {
        snprintf(info->reason, sizeof info->reason, "the driver has no green contexts (CUDA >= 12.4 needed)");
        return -1;
    }
    split_t *sp = calloc(1, sizeof *sp);
    marker_t m;
    memset(&m, 0, sizeof m);
    int rc = -1, have_marker = 0;
    if (!sp) { snprintf(info->reason, sizeof info->reason, "out of host memory"); return -1; }
    CUresult r = d->cuDeviceGetDevResource(dev, &sp->all, CU_DEV_RESOURCE_TYPE_SM);
    if (r != CUDA_SUCCESS) { snprintf(why, sizeof why, "cuDeviceGetDevResource(SM): %s", ld_cu_errname(r)); goto done; }
    info->device_sms = sp->all.sm.smCount;
    uint32_t nsms = info->device_sms < LDSHIM_MAX_SMS ? info->device_sms : LDSHIM_MAX_SMS;
    int nd = ld_native_domain_count(d, dev);
    ld_cuDevSmResourceSplit_fn nfn = native_split_fn(d);
    const uint8_t *map = NULL;
    uint8_t label_map[LDSHIM_MAX_SMS];
    ld_compute_t req = *o->req;
    uint32_t cap = o->cap;
    int auto_spread = req.kind == LD_COMPUTE_SPREAD && !req.sms;
    if (nd >= 2 && nfn) {
        if (o->next_domain && req.kind == LD_COMPUTE_DOMAIN) req.domain = (req.domain + 1) % nd;
        ld_compute_t whole = { LD_COMPUTE_DOMAIN, 0, 0 };
        if (split_native(nfn, nd, auto_spread || o->equalize ? &whole : &req, o->method, cap, sp, why, sizeof why))
            goto done;
        if (auto_spread || o->equalize) {
            /* Equal SM counts: every domain's group sized like the smallest (one more split). */
            uint32_t k = 0;
            for (int i = 0; i < sp->g.ngroups; i++)
                if (!k || sp->g.count[i] < k) k = sp->g.count[i];
            if (!k) { snprintf(why, sizeof why, "the driver's split by locality domain left a domain without SMs"); goto done; }
            if (auto_spread) req.sms = k;
            if (!cap || k < cap) cap = k;
            if (split_native(nfn, nd, &req, o->method, cap, sp, why, sizeof why)) goto done;
        }
        snprintf(info->method, sizeof info->method, "driver split by locality domain (%s)", ld_split_name(o->method));
    } else {
        if (!(map = measured_map(pr, why, sizeof why))) goto done;
        nd = (int)pr->num_domains;
        /* mismatch-ld binds the domain after X: shifted once here, not per attempt below. */
        if (o->next_domain && req.kind == LD_COMPUTE_DOMAIN && nd > 0) req.domain = (req.domain + 1) % nd;
        if (split_bycount(d, o->method, sp, why, sizeof why)) goto done;
        snprintf(info->method, sizeof info->method, "cuDevSmResourceSplitByCount, %u-SM groups%s",
                 sp->g.ngroups ? sp->g.count[0] : 0, sp->fine ? ", co-scheduling ignored" : "");
    }

    /* Which SMs each group holds: the cache, else the marker. A cached answer that the
     * final check contradicts is measured again, once. */
    char dir[4096] = "";
    ld_groups_key_t key;
    int cached = 0, keyed = groups_key(d, dev, sp, &key) == 0;
    if (o->use_cache && keyed && ld_cache_dir(o->cache_dir, dir, sizeof dir) == 0 && !o->force) {
        ld_sm_groups_t g;
        if (groups_load(dir, &key, sp, &g) == 0) {
            for (int i = 0; i < g.ngroups; i++) sp->g.sms[i] = g.sms[i];
            cached = 1;
        }
    }
    if (marker_open(d, dev, nsms, &m, why, sizeof why) == 0) have_marker = 1;
    for (int attempt = 0;; attempt++) {
        if (!cached) {
            if (!have_marker) goto done;
            /* The remainder is never bound, so it is not measured. */
            for (int i = 0; i < sp->g.ngroups; i++)
                if (measure_one(&m, &sp->res[i], &sp->g.sms[i], why, sizeof why)) goto done;
            char w2[160];
            if (ld_sm_groups_check(&sp->g, nsms, w2, sizeof w2)) { snprintf(why, sizeof why, "SM groups: %s", w2); goto done; }
            if (o->use_cache && keyed && dir[0]) groups_store(dir, &key, &sp->g);
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
        if ((r = d->cuDevResourceGenerateDesc(&out->desc, chosen, (unsigned)info->plan.ngroups)) != CUDA_SUCCESS) {
            snprintf(why, sizeof why, "cuDevResourceGenerateDesc: %s", ld_cu_errname(r));
            goto done;
        }
        if ((r = d->cuGreenCtxCreate(&out->green, out->desc, dev, CU_GREEN_CTX_DEFAULT_STREAM)) != CUDA_SUCCESS) {
            int mps = 0;
            d->cuDeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev);
            snprintf(why, sizeof why, "cuGreenCtxCreate: %s%s", ld_cu_errname(r), mps ? " (an MPS client)" : "");
            out->green = NULL;
            goto done;
        }
        if ((r = d->cuCtxFromGreenCtx(&out->gctx, out->green)) != CUDA_SUCCESS) {
            snprintf(why, sizeof why, "cuCtxFromGreenCtx: %s", ld_cu_errname(r));
            goto done;
        }
        double t_made = now_ms();
        info->context_ms += t_made - t_plan;
        if (!have_marker) {
            if (!sp->native) goto done;   /* groups from the cache cannot be trusted unchecked */
            LD_INFO("compute: device %d: bound SMs not checked (%s)", (int)dev, why);
            break;
        }
        ld_smmask_t got;
        char w2[200];
        int mr = marker_run(&m, out->green, out->gctx, info->plan.count, &got, w2, sizeof w2);
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
        d->cuGreenCtxDestroy(out->green);
        out->green = NULL;
        out->gctx = NULL;
        if (!cached || attempt > 0) goto done;
        LD_WARN("compute: device %d: the SM-group cache is stale (%s); measuring the groups again", (int)dev, why);
        cached = 0;
    }
    rc = 0;
    info->applied = 1;
    snprintf(info->reason, sizeof info->reason, "%s", info->plan.why);
done:
    if (rc != 0) {
        if (out->green) d->cuGreenCtxDestroy(out->green);
        memset(out, 0, sizeof *out);
        snprintf(info->reason, sizeof info->reason, "%s", why);
    }
    if (have_marker) marker_close(&m);
    free(sp);
    info->elapsed_ms = now_ms() - t0;
    return rc;
}

/* ---- the shim's binding per device ----------------------------------------------------- */

/* 1 if `c` is a green context of `dev` this thread runs on (shared, or its own). */
static int mine_here(int dev, CUcontext c) {
    if (!c) return 0;
    if (B[dev].gctx == c) return 1;
    slot_t *s = opt.thread_contexts ? my_slot(dev, 0) : NULL;
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
            LD_WARN("compute: device %d: a context the program created itself (cuCtxCreate) runs unbound; "
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
        LD_INFO("compute: device %d bound to %s: %u SMs (%s)%s, %.1f ms (groups %.1f, context %.1f, check %.1f)",
                (int)dev, b->info.request, b->info.plan.count, ld_smmask_format(&b->info.plan.sms, list, sizeof list),
                b->info.groups_from_cache ? " [cache]" : "", b->info.elapsed_ms, b->info.groups_ms,
                b->info.context_ms, b->info.verify_ms);
        set_state(b, B_BOUND);
    } else {
        LD_WARN("compute: device %d runs unbound (compute = %s): %s", (int)dev, b->info.request, b->info.reason);
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
    slot_t *s = my_slot(dev, 1);
    if (!s) return b->gctx;
    if (!s->gctx) {
        pthread_mutex_lock(&blocks_mu);
        for (idle_t **pp = &idle; *pp; pp = &(*pp)->next) {
            idle_t *x = *pp;
            if (x->dev != dev || x->gen != s->gen) continue;
            *pp = x->next;
            s->green = x->green;
            s->gctx = x->gctx;
            free(x);
            break;
        }
        pthread_mutex_unlock(&blocks_mu);
    }
    if (!s->gctx) {
        CUgreenCtx g = NULL;
        CUcontext c = NULL;
        if (d->cuGreenCtxCreate(&g, b->desc, dev, CU_GREEN_CTX_DEFAULT_STREAM) != CUDA_SUCCESS) return b->gctx;
        if (d->cuCtxFromGreenCtx(&c, g) != CUDA_SUCCESS) { d->cuGreenCtxDestroy(g); return b->gctx; }
        ld_compute_forget_handle(c);
        pthread_mutex_lock(&blocks_mu);
        s->green = g;
        s->gctx = c;
        pthread_mutex_unlock(&blocks_mu);
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
                LD_WARN("compute: device %d: its binding is still being built after %d s; this thread runs unbound "
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
            slot_t *s = my_slot(dev, 0);
            if (s && s->gctx == c) return prim;
            maybe_other = 1;
        }
    }
    /* A stream, or memory, made on another thread answers that thread's green context. */
    if (maybe_other) {
        int dev = thread_owner(c);
        if (dev >= 0) return atomic_load(&B[dev].primary);
    }
    if (atomic_load_explicit(&nretired, memory_order_relaxed)) {
        CUcontext p = retired_primary(c);
        if (p) return p;
    }
    return c;
}

int ld_compute_owns(int dev, CUcontext c) {
    if (dev < 0 || dev >= LD_MAX_DEVICES || !c || !(atomic_load(&bound_mask) & (1ull << dev))) return 0;
    if (B[dev].gctx == c) return 1;
    return opt.thread_contexts && thread_owner(c) == dev;
}

CUstream ld_compute_stream(CUstream s, int per_thread_variant) {
    if (s != CU_STREAM_PER_THREAD && !(per_thread_variant && s == NULL)) return s;
    unsigned long long mask = atomic_load_explicit(&bound_mask, memory_order_acquire);
    if (!mask) return s;
    const ld_driver_t *d = ld_driver();
    CUcontext cur = NULL;
    if (!d || d->cuCtxGetCurrent(&cur) != CUDA_SUCCESS || !cur) return s;
    for (int dev = 0; mask; dev++, mask >>= 1) {
        if (!(mask & 1)) continue;
        binding_t *b = &B[dev];
        slot_t *sl = NULL;
        if (b->gctx != cur && !(opt.thread_contexts && (sl = my_slot(dev, 0)) && sl->gctx == cur)) continue;
        if (!sl) sl = my_slot(dev, 1);
        if (!sl) {
            LD_DEBUG("compute: no per-thread stream slot left on this thread; using the legacy stream");
            return CU_STREAM_LEGACY;
        }
        if (!sl->stream) {
            CUstream ns = NULL;
            /* Blocking, like the per-thread default stream (it synchronizes with the legacy
             * stream); created with the bound context current, so it belongs to it. */
            if (d->cuStreamCreate(&ns, CU_STREAM_DEFAULT) != CUDA_SUCCESS) return CU_STREAM_LEGACY;
            pthread_mutex_lock(&blocks_mu);
            sl->stream = ns;
            pthread_mutex_unlock(&blocks_mu);
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
    if (d && d->cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur)
        for (int k = 0; k < LD_MAX_DEVICES && dev < 0; k++)
            if ((atomic_load(&bound_mask) & (1ull << k)) && (B[k].gctx == cur || (opt.thread_contexts && ld_compute_owns(k, cur))))
                dev = k;
    if (dev < 0) return;   /* not a launch in a bound context */
    if (atomic_exchange(&launch_warned, 1)) return;
    LD_WARN("compute: %s of %u blocks failed (%s) in a context bound to %s (%u SMs); a cooperative grid or cluster "
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
     * primary, see retire). */
    if (d->cuCtxGetCurrent(&cur) == CUDA_SUCCESS && mine_here(dev, cur)) d->cuCtxSetCurrent(prim);
    atomic_fetch_and(&bound_mask, ~(1ull << dev));
    destroy_thread_objects(d, dev);
    retire(b->gctx, prim);
    if (b->green) d->cuGreenCtxDestroy(b->green);
    b->green = NULL;
    b->gctx = NULL;
    atomic_store(&b->primary, NULL);
    set_state(b, B_NONE);
    LD_INFO("compute: device %d: the primary context is reset or released; bound again at the next retain", dev);
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
    if (d->cuCtxGetCurrent(&cur) != CUDA_SUCCESS || !cur || cur != atomic_load(&B[dev].primary)) return;
    CUcontext g = thread_context(d, dev);
    if (g && g != cur) d->cuCtxSetCurrent(g);
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
    if (rc == 0 && bo.green) d->cuGreenCtxDestroy(bo.green);
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
        atomic_fetch_add(&gen[dev], 1);   /* this thread's slots are the parent's: stale */
    }
    for (int dev = 0; dev < LD_MAX_DEVICES; dev++) {
        atomic_store(&B[dev].unbound_ctx, 0);
        atomic_store(&retains[dev], 0);   /* the child retains its primaries anew */
    }
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;   /* no thread of the child waits on it */
    wait_cv = c;
    memset(retired, 0, sizeof retired);             /* the child has no contexts */
    while (idle) {
        idle_t *x = idle;
        idle = x->next;
        free(x);
    }
    retired_next = 0;
    atomic_store(&nretired, 0);
    atomic_store(&launch_warned, 0);
    for (int dev = 0; dev < LD_MAX_DEVICES; dev++) atomic_store(&wait_warned[dev], 0);
}

void ld_compute_lock_for_fork(void) {
    pthread_mutex_lock(&wait_mu);
    pthread_mutex_lock(&blocks_mu);
    pthread_mutex_lock(&retired_mu);
}
void ld_compute_unlock_after_fork(void) {
    pthread_mutex_unlock(&retired_mu);
    pthread_mutex_unlock(&blocks_mu);
    pthread_mutex_unlock(&wait_mu);
}
