/* place.c — single-domain placement for the program's own VMM handles, stream-ordered,
 * pitched and managed allocations (contract: place.h). */
#include "shim/place.h"
#include "shim/alloc.h"
#include "shim/config.h"
#include "shim/device.h"
#include "shim/log.h"
#include "shim/vmm.h"
#include "shim/track.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PITCH_ALIGN 512u   /* what the driver's own cuMemAllocPitch rounds rows to */
#define MAX_DOMS 8

static int current_device(const ld_driver_t *d, CUdevice *dev) {
    CUcontext c = NULL;
    return d->pfn_cuCtxGetCurrent(&c) == CUDA_SUCCESS && c && d->pfn_cuCtxGetDevice(dev) == CUDA_SUCCESS ? 0 : -1;
}

/* The device record of `dev` if domain `dom` can be placed on it; else a reason in why. */
static ld_device_t *placeable(const ld_driver_t *d, CUdevice dev, int dom, char *why, size_t n) {
    ld_device_t *dv = ld_device_get(d, dev);
    if (!dv) { snprintf(why, n, "device ordinal %d out of range", (int)dev); return NULL; }
    if (!dv->backend) { snprintf(why, n, "%s", dv->backend_reason); return NULL; }
    if (dom < 0 || dom >= dv->ndomains) {
        snprintf(why, n, "domain %d does not exist (device %d has %d domains, 0..%d)", dom, (int)dev, dv->ndomains,
                 dv->ndomains - 1);
        return NULL;
    }
    return dv;
}

static int is_native(const ld_device_t *dv) { return dv->backend->kind == LD_BACKEND_NATIVE; }

static CUmemLocation domain_location(CUdevice dev, int dom) {
    CUmemLocation l;
    memset(&l, 0, sizeof l);
    l.type = LD_CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN;
    l.id = LD_LOCALITY_LOCATION_ID((int)dev, dom);
    return l;
}

/* ---- cuMemCreate --------------------------------------------------------------------------- */

/* The program's own call; a handle it returns is counted (and tracked for its release). */
static CUresult own_create(const ld_driver_t *d, ld_create_fn real, CUmemGenericAllocationHandle *h, size_t n,
                           const CUmemAllocationProp *p, unsigned long long flags) {
    CUresult r;
    LD_POOL_RETRY_OOM(d, r, real(h, n, p, flags));
    if (r == CUDA_SUCCESS && h) {
        ld_obj_t o = { LD_OBJ_HANDLE, (uint64_t)*h, p ? p->location.id : -1, NULL };
        ld_alloc_note_unplaced(&o);
    }
    return r;
}

CUresult ld_place_create(const ld_driver_t *d, ld_create_fn real, CUmemGenericAllocationHandle *h, size_t n,
                         const CUmemAllocationProp *p, unsigned long long flags) {
    ld_decision_t dc;
    if (!h || !p || p->type != CU_MEM_ALLOCATION_TYPE_PINNED || p->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        !ld_alloc_decide(n, LD_API_VMM, &dc) || dc.kind != LD_PLACE_DOMAIN)
        return own_create(d, real, h, n, p, flags);
    char why[200];
    ld_device_t *dv = placeable(d, p->location.id, dc.domain, why, sizeof why);
    if (!dv) {
        ld_alloc_note_fallback(&dc, LD_API_VMM, why);
        return own_create(d, real, h, n, p, flags);
    }
    CUresult r;
    if (!is_native(dv)) {
        if (dv->backend->kind != LD_BACKEND_EMULATED) {
            snprintf(why, sizeof why, "the program's own VMM handles are placed by the native backend only (%s)",
                     dv->backend->name);
            ld_alloc_note_fallback(&dc, LD_API_VMM, why);
            return own_create(d, real, h, n, p, flags);
        }
        LD_POOL_RETRY_OOM(d, r, real(h, n, p, flags));   /* ordinary memory, counted as placed */
        if (r == CUDA_SUCCESS) {
            ld_obj_t o = { LD_OBJ_HANDLE, (uint64_t)*h, p->location.id, NULL };
            ld_alloc_note_placed(&dc, LD_API_VMM, n, dc.domain, 1, &o);
        }
        return r;
    }
    CUmemAllocationProp q = *p;
    q.location = domain_location(p->location.id, dc.domain);
    LD_POOL_RETRY_OOM(d, r, real(h, n, &q, flags));
    if (r == CUDA_SUCCESS) {
        ld_obj_t o = { LD_OBJ_HANDLE, (uint64_t)*h, p->location.id, NULL };
        ld_alloc_note_placed(&dc, LD_API_VMM, n, dc.domain, 0, &o);
        return r;
    }
    snprintf(why, sizeof why, "cuMemCreate in domain %d: %s", dc.domain, ld_cu_errname(r));
    ld_alloc_note_fallback(&dc, LD_API_VMM, why);
    return own_create(d, real, h, n, p, flags);
}

/* ---- stream-ordered ------------------------------------------------------------------------ */

/* The shim's pools per device and domain, with the device's default pool they follow (the
 * program's settings of it: place.h). Created on first use, destroyed at exit and when the
 * device is reset; a forked child forgets them. */
static pthread_mutex_t pools_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { CUmemoryPool def, pool[MAX_DOMS]; } pools[LD_MAX_DEVICES];
static int pools_closed;                 /* the exit handler ran: no new pool */
static int pools_exit_registered;
/* Bumped after every change the program makes to a default pool that has followers: a pool
 * copying the default's settings while one changes copies them again. */
static atomic_uint pools_gen[LD_MAX_DEVICES];

static const CUmemPool_attribute followed_attrs[] = {
    CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES,
    CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
};

/* Copy what the program set on `def` to the new pool `p`: the attributes it can set and
 * other devices' access. */
static void follow(const ld_driver_t *d, CUdevice dev, CUmemoryPool def, CUmemoryPool p) {
    int ndev = 0;
    if (d->pfn_cuDeviceGetCount(&ndev) != CUDA_SUCCESS) ndev = 0;
    if (ndev > LD_MAX_DEVICES) ndev = LD_MAX_DEVICES;
    for (int pass = 0; pass < 8; pass++) {
        unsigned gen = atomic_load(&pools_gen[dev]);
        for (size_t i = 0; i < sizeof followed_attrs / sizeof followed_attrs[0]; i++) {
            cuuint64_t wide = 0;   /* the release threshold */
            int flag = 0;          /* the reuse flags */
            void *v = followed_attrs[i] == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD ? (void *)&wide : (void *)&flag;
            if (d->pfn_cuMemPoolGetAttribute(def, followed_attrs[i], v) == CUDA_SUCCESS)
                d->pfn_cuMemPoolSetAttribute(p, followed_attrs[i], v);
        }
        for (int a = 0; a < ndev; a++) {
            if (a == dev) continue;
            CUmemLocation loc = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = a };   /* 13.4+: id is in a union */
            CUmemAccess_flags f = CU_MEM_ACCESS_FLAGS_PROT_NONE;
            if (d->pfn_cuMemPoolGetAccess(&f, def, &loc) != CUDA_SUCCESS || (f == CU_MEM_ACCESS_FLAGS_PROT_NONE && !pass))
                continue;   /* a new pool grants no peer access */
            CUmemAccessDesc desc = { loc, f };
            CUresult r = d->pfn_cuMemPoolSetAccess(p, &desc, 1);
            if (r != CUDA_SUCCESS)
                LD_DEBUG(PLACE, "device %d: access of device %d to the shim's pool: %s", (int)dev, a, ld_cu_errname(r));
        }
        if (atomic_load(&pools_gen[dev]) == gen) return;
    }
}

/* Take the pools of `dev` (every device when dev < 0) out of the table; `close`: none is
 * created afterwards. */
static int take_pools(int dev, int close, CUmemoryPool *out) {
    int n = 0;
    pthread_mutex_lock(&pools_mu);
    if (close) pools_closed = 1;
    for (int v = dev < 0 ? 0 : dev; v < LD_MAX_DEVICES && (dev < 0 || v == dev); v++) {
        for (int k = 0; k < MAX_DOMS; k++)
            if (pools[v].pool[k]) {
                out[n++] = pools[v].pool[k];
                pools[v].pool[k] = NULL;
            }
        pools[v].def = NULL;
    }
    pthread_mutex_unlock(&pools_mu);
    return n;
}

static void destroy_pools(const ld_driver_t *d, CUmemoryPool *v, int n) {
    /* Allocations still outstanding keep their memory: the driver releases a destroyed
     * pool's resources when the last one is freed. */
    for (int i = 0; i < n; i++) {
        CUresult r = d->pfn_cuMemPoolDestroy(v[i]);
        if (r != CUDA_SUCCESS) LD_DEBUG(PLACE, "cuMemPoolDestroy: %s", ld_cu_errname(r));
    }
}

/* Registered when the first pool is made, i.e. after the program initialized CUDA, so it
 * runs before the runtime's exit handlers tear the driver state down. */
static void pools_at_exit(void) {
    CUmemoryPool v[LD_MAX_DEVICES * MAX_DOMS];
    int n = take_pools(-1, 1, v);
    const ld_driver_t *d = ld_driver();
    if (n && d) destroy_pools(d, v, n);
}

void ld_place_forget_device(const ld_driver_t *d, int dev) {
    if (dev < 0 || dev >= LD_MAX_DEVICES) return;
    CUmemoryPool v[MAX_DOMS];
    int n = take_pools(dev, 0, v);
    if (n) {
        destroy_pools(d, v, n);
        LD_INFO(PLACE, "device %d reset: destroyed the shim's %d memory pool(s)", dev, n);
    }
}

/* NULL with a reason in why, or (*closed) because the process is exiting. */
static CUmemoryPool domain_pool(const ld_driver_t *d, CUdevice dev, int dom, CUmemoryPool def, char *why, size_t n,
                                int *closed) {
    *closed = 0;
    if (dev < 0 || dev >= LD_MAX_DEVICES || dom < 0 || dom >= MAX_DOMS) { snprintf(why, n, "no pool slot"); return NULL; }
    pthread_mutex_lock(&pools_mu);
    CUmemoryPool p = pools[dev].pool[dom];
    *closed = pools_closed;
    pthread_mutex_unlock(&pools_mu);
    if (p || *closed) return p;
    if (!d->pfn_cuMemPoolCreate || !d->pfn_cuMemPoolDestroy || !d->pfn_cuMemPoolGetAttribute || !d->pfn_cuMemPoolSetAttribute ||
        !d->pfn_cuMemPoolGetAccess || !d->pfn_cuMemPoolSetAccess) {
        snprintf(why, n, "the driver has no memory pools");
        return NULL;
    }
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location = domain_location(dev, dom);
    CUresult r = d->pfn_cuMemPoolCreate(&p, &props);
    if (r != CUDA_SUCCESS) { snprintf(why, n, "cuMemPoolCreate in domain %d: %s", dom, ld_cu_errname(r)); return NULL; }
    pthread_mutex_lock(&pools_mu);
    CUmemoryPool keep = pools[dev].pool[dom];
    int lost = pools_closed || keep, first = 0;
    *closed = pools_closed;
    if (!lost) {
        pools[dev].pool[dom] = p;
        pools[dev].def = def;
        first = !pools_exit_registered;
        pools_exit_registered = 1;
    }
    pthread_mutex_unlock(&pools_mu);
    if (lost) {
        d->pfn_cuMemPoolDestroy(p);   /* another thread's pool won (ours holds nothing) */
        return keep;
    }
    if (first) atexit(pools_at_exit);
    /* Published first, then the settings: a change the program makes meanwhile reaches it
     * either way (follow reads the default after it, or the hook sees the new pool). */
    follow(d, dev, def, p);
    LD_INFO(PLACE, "device %d: stream-ordered allocations of tagged sizes come from a pool in domain %d", (int)dev, dom);
    return p;
}

/* The shim pools that follow `pool`, if it is a device's default pool; *dev is its device. */
static int followers(CUmemoryPool pool, int *dev, CUmemoryPool out[MAX_DOMS]) {
    int n = 0;
    if (!pool) return 0;
    pthread_mutex_lock(&pools_mu);
    for (int v = 0; v < LD_MAX_DEVICES && !n; v++) {
        if (pools[v].def != pool) continue;
        *dev = v;
        for (int k = 0; k < MAX_DOMS; k++)
            if (pools[v].pool[k]) out[n++] = pools[v].pool[k];
    }
    pthread_mutex_unlock(&pools_mu);
    return n;
}

CUresult ld_place_pool_set_access(const ld_driver_t *d, ld_pool_access_fn real, CUmemoryPool pool,
                                  const CUmemAccessDesc *map, size_t count) {
    CUresult r = real(pool, map, count);
    CUmemoryPool f[MAX_DOMS];
    int dev = -1, n = r == CUDA_SUCCESS ? followers(pool, &dev, f) : 0;
    for (int i = 0; i < n; i++) {
        CUresult m = d->pfn_cuMemPoolSetAccess(f[i], map, count);
        if (m != CUDA_SUCCESS) LD_DEBUG(PLACE, "device %d: access to the shim's pool: %s", dev, ld_cu_errname(m));
    }
    if (n) atomic_fetch_add(&pools_gen[dev], 1);
    return r;
}

CUresult ld_place_pool_set_attribute(const ld_driver_t *d, ld_pool_attr_fn real, CUmemoryPool pool,
                                     CUmemPool_attribute attr, void *value) {
    CUresult r = real(pool, attr, value);
    CUmemoryPool f[MAX_DOMS];
    int dev = -1, n = r == CUDA_SUCCESS ? followers(pool, &dev, f) : 0;
    for (int i = 0; i < n; i++) {
        CUresult m = d->pfn_cuMemPoolSetAttribute(f[i], attr, value);
        if (m != CUDA_SUCCESS) LD_DEBUG(PLACE, "device %d: attribute %d of the shim's pool: %s", dev, (int)attr,
                                               ld_cu_errname(m));
    }
    if (n) atomic_fetch_add(&pools_gen[dev], 1);
    return r;
}

/* The default pool's memory counters include the shim's pools of its device, as a stock run
 * (everything in the default pool) would show them. A high watermark is the sum of the
 * pools' watermarks: at least the true peak, and equal to it while the pools peak together. */
CUresult ld_place_pool_get_attribute(const ld_driver_t *d, ld_pool_attr_fn real, CUmemoryPool pool,
                                     CUmemPool_attribute attr, void *value) {
    CUresult r = real(pool, attr, value);
    if (r != CUDA_SUCCESS || !value ||
        (attr != CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT && attr != CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH &&
         attr != CU_MEMPOOL_ATTR_USED_MEM_CURRENT && attr != CU_MEMPOOL_ATTR_USED_MEM_HIGH))
        return r;
    CUmemoryPool f[MAX_DOMS];
    int dev = -1, n = followers(pool, &dev, f);
    for (int i = 0; i < n; i++) {
        cuuint64_t v = 0;
        if (d->pfn_cuMemPoolGetAttribute(f[i], attr, &v) == CUDA_SUCCESS) *(cuuint64_t *)value += v;
    }
    return r;
}

/* The program keeps `keep` bytes reserved for the device: the default pool is trimmed by
 * the program's call, the shim's pools share what it left of `keep` (0 for emptyCache-style
 * trims: every pool gives back all it does not use). */
CUresult ld_place_pool_trim_to(const ld_driver_t *d, ld_pool_trim_fn real, CUmemoryPool pool, size_t keep) {
    CUresult r = real(pool, keep);
    CUmemoryPool f[MAX_DOMS];
    int dev = -1, n = r == CUDA_SUCCESS && d->pfn_cuMemPoolTrimTo ? followers(pool, &dev, f) : 0;
    if (!n) return r;
    cuuint64_t left = keep, res = 0;
    if (d->pfn_cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res) == CUDA_SUCCESS)
        left = res < left ? left - res : 0;
    for (int i = 0; i < n; i++) {
        CUresult m = d->pfn_cuMemPoolTrimTo(f[i], (size_t)left);
        if (m != CUDA_SUCCESS) LD_DEBUG(PLACE, "device %d: trimming the shim's pool: %s", dev, ld_cu_errname(m));
        if (d->pfn_cuMemPoolGetAttribute(f[i], CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res) == CUDA_SUCCESS)
            left = res < left ? left - res : 0;
    }
    return r;
}

static CUresult own_async(const ld_driver_t *d, ld_async_fn real, CUdeviceptr *dp, size_t n, CUstream s) {
    CUresult r;
    LD_POOL_RETRY_OOM(d, r, real(dp, n, s));
    return ld_alloc_count_unplaced(r);
}

static void note_placed_ptr(const ld_driver_t *d, const ld_decision_t *dc, ld_api_t api, CUdeviceptr p, size_t n,
                            CUdevice dev, int emulated) {
    CUcontext cur = NULL;
    d->pfn_cuCtxGetCurrent(&cur);
    ld_obj_t o = { LD_OBJ_PTR, (uint64_t)p, (int)dev, cur };
    ld_alloc_note_placed(dc, api, n, dc->domain, emulated, &o);
}

CUresult ld_place_async(const ld_driver_t *d, ld_async_fn real, CUdeviceptr *dp, size_t n, CUstream s, int per_thread) {
    ld_decision_t dc;
    if (!dp || !ld_alloc_decide(n, LD_API_ASYNC, &dc) || dc.kind != LD_PLACE_DOMAIN) return own_async(d, real, dp, n, s);
    char why[200];
    CUdevice dev;
    if ((d->pfn_cuStreamGetDevice ? d->pfn_cuStreamGetDevice(s, &dev) : CUDA_ERROR_NOT_SUPPORTED) != CUDA_SUCCESS &&
        current_device(d, &dev) != 0)
        return own_async(d, real, dp, n, s);   /* no device to place on: the driver gives the stock answer */
    ld_device_t *dv = placeable(d, dev, dc.domain, why, sizeof why);
    if (!dv) {
        ld_alloc_note_fallback(&dc, LD_API_ASYNC, why);
        return own_async(d, real, dp, n, s);
    }
    CUresult r;
    if (!is_native(dv)) {
        if (dv->backend->kind != LD_BACKEND_EMULATED) {
            snprintf(why, sizeof why, "stream-ordered allocations are placed by the native backend only (%s)",
                     dv->backend->name);
            ld_alloc_note_fallback(&dc, LD_API_ASYNC, why);
            return own_async(d, real, dp, n, s);
        }
        LD_POOL_RETRY_OOM(d, r, real(dp, n, s));
        if (r == CUDA_SUCCESS) note_placed_ptr(d, &dc, LD_API_ASYNC, *dp, n, dev, 1);
        return r;
    }
    /* A pool the program made current is its own: its allocations stay there. */
    CUmemoryPool cur = NULL, def = NULL;
    if (!d->pfn_cuDeviceGetMemPool || !d->pfn_cuDeviceGetDefaultMemPool || !d->pfn_cuMemAllocFromPoolAsync ||
        d->pfn_cuDeviceGetMemPool(&cur, dev) != CUDA_SUCCESS || d->pfn_cuDeviceGetDefaultMemPool(&def, dev) != CUDA_SUCCESS) {
        ld_alloc_note_fallback(&dc, LD_API_ASYNC, "the driver cannot name the device's memory pools");
        return own_async(d, real, dp, n, s);
    }
    if (cur != def) {
        ld_alloc_note_fallback(&dc, LD_API_ASYNC, "the device's current memory pool is the program's own: not moved");
        return own_async(d, real, dp, n, s);
    }
    int closed;
    CUmemoryPool pool = domain_pool(d, dev, dc.domain, def, why, sizeof why, &closed);
    if (!pool) {
        /* After the exit handler the program's late allocations go where stock puts them. */
        if (closed) ld_alloc_note_passed(&dc, LD_API_ASYNC);
        else ld_alloc_note_fallback(&dc, LD_API_ASYNC, why);
        return own_async(d, real, dp, n, s);
    }
    /* The _ptsz variant's NULL stream is the per-thread default stream: say so explicitly
     * to the non-_ptsz entry the shim calls. */
    CUstream use = per_thread && s == NULL ? CU_STREAM_PER_THREAD : s;
    LD_POOL_RETRY_OOM(d, r, d->pfn_cuMemAllocFromPoolAsync(dp, n, pool, use));
    if (r == CUDA_SUCCESS) {
        note_placed_ptr(d, &dc, LD_API_ASYNC, *dp, n, dev, 0);
        return r;
    }
    snprintf(why, sizeof why, "cuMemAllocFromPoolAsync in domain %d: %s", dc.domain, ld_cu_errname(r));
    ld_alloc_note_fallback(&dc, LD_API_ASYNC, why);
    return own_async(d, real, dp, n, s);
}

CUresult ld_place_from_pool(const ld_driver_t *d, ld_frompool_fn real, CUdeviceptr *dp, size_t n, CUmemoryPool pool,
                            CUstream s) {
    ld_decision_t dc;
    if (dp && ld_alloc_decide(n, LD_API_ASYNC, &dc) && dc.kind == LD_PLACE_DOMAIN)
        ld_alloc_note_fallback(&dc, LD_API_ASYNC, "an allocation from a pool the program created: not moved");
    CUresult r;
    LD_POOL_RETRY_OOM(d, r, real(dp, n, pool, s));
    return ld_alloc_count_unplaced(r);
}

/* ---- pitched ------------------------------------------------------------------------------ */

static CUresult own_pitch(const ld_driver_t *d, ld_pitch_fn real, CUdeviceptr *dp, size_t *pitch, size_t w, size_t h,
                          unsigned int esz) {
    CUresult r;
    LD_POOL_RETRY_OOM(d, r, real(dp, pitch, w, h, esz));
    return ld_alloc_count_unplaced(r);
}

CUresult ld_place_pitch(const ld_driver_t *d, ld_pitch_fn real, CUdeviceptr *dp, size_t *pitch, size_t w, size_t h,
                        unsigned int esz) {
    if (!dp || !pitch || !w || !h || (esz != 4 && esz != 8 && esz != 16)) return own_pitch(d, real, dp, pitch, w, h, esz);
    size_t p = (w + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
    if (p < w || h > (size_t)-1 / p) return own_pitch(d, real, dp, pitch, w, h, esz);
    ld_decision_t dc;
    if (!ld_alloc_decide(p * h, LD_API_PITCH, &dc) || dc.kind != LD_PLACE_DOMAIN ||
        !ld_alloc_placed(d, dp, p * h, LD_API_PITCH, &dc))
        return own_pitch(d, real, dp, pitch, w, h, esz);   /* the program's own rows, not cuMemAlloc's */
    *pitch = p;
    return CUDA_SUCCESS;
}

/* ---- managed ------------------------------------------------------------------------------ */

CUresult ld_place_managed(const ld_driver_t *d, ld_managed_fn real, CUdeviceptr *dp, size_t n, unsigned int flags) {
    CUresult r;
    LD_POOL_RETRY_OOM(d, r, real(dp, n, flags));
    ld_decision_t dc;
    if (r != CUDA_SUCCESS || !dp) return r;
    if (!ld_alloc_decide(n, LD_API_MANAGED, &dc) || dc.kind != LD_PLACE_DOMAIN) return ld_alloc_count_unplaced(r);
    char why[200];
    CUdevice dev;
    if (current_device(d, &dev) != 0) return ld_alloc_count_unplaced(r);
    ld_device_t *dv = placeable(d, dev, dc.domain, why, sizeof why);
    if (!dv) {
        ld_alloc_note_fallback(&dc, LD_API_MANAGED, why);
        return ld_alloc_count_unplaced(r);
    }
    if (!is_native(dv)) {
        if (dv->backend->kind == LD_BACKEND_EMULATED) {
            note_placed_ptr(d, &dc, LD_API_MANAGED, *dp, n, dev, 1);
            return r;
        }
        snprintf(why, sizeof why, "managed memory is placed by the native backend only (%s)", dv->backend->name);
        ld_alloc_note_fallback(&dc, LD_API_MANAGED, why);
        return ld_alloc_count_unplaced(r);
    }
    /* The memory stays valid either way: only its preferred home changes. */
    CUresult a = d->pfn_cuMemAdvise_v2 ? d->pfn_cuMemAdvise_v2(*dp, n, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                                                       domain_location(dev, dc.domain))
                                   : CUDA_ERROR_NOT_SUPPORTED;
    if (a == CUDA_SUCCESS) {
        note_placed_ptr(d, &dc, LD_API_MANAGED, *dp, n, dev, 0);
        return r;
    }
    snprintf(why, sizeof why, "cuMemAdvise(preferred location: domain %d): %s", dc.domain, ld_cu_errname(a));
    ld_alloc_note_fallback(&dc, LD_API_MANAGED, why);
    return ld_alloc_count_unplaced(r);
}

/* Forked child: the parent's pools are not the child's (no driver call). */
void ld_place_reset(void) {
    memset(pools, 0, sizeof pools);
    pools_closed = 0;
    for (int i = 0; i < LD_MAX_DEVICES; i++) atomic_store(&pools_gen[i], 0);
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;   /* no thread of the child holds it */
    pools_mu = m;
}
