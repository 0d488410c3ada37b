/* place.c — single-domain placement for the program's own VMM handles, stream-ordered,
 * pitched and managed allocations (contract: place.h). */
#include "shim/place.h"
#include "shim/alloc.h"
#include "shim/config.h"
#include "shim/device.h"
#include "shim/log.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define PITCH_ALIGN 512u   /* what the driver's own cuMemAllocPitch rounds rows to */

static int current_device(const ld_driver_t *d, CUdevice *dev) {
    CUcontext c = NULL;
    return d->cuCtxGetCurrent(&c) == CUDA_SUCCESS && c && d->cuCtxGetDevice(dev) == CUDA_SUCCESS ? 0 : -1;
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

CUresult ld_place_create(const ld_driver_t *d, ld_create_fn real, CUmemGenericAllocationHandle *h, size_t n,
                         const CUmemAllocationProp *p, unsigned long long flags) {
    ld_decision_t dc;
    if (!p || p->type != CU_MEM_ALLOCATION_TYPE_PINNED || p->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        !ld_alloc_decide(n, LD_API_VMM, &dc) || dc.kind != LD_PLACE_DOMAIN)
        return real(h, n, p, flags);
    char why[200];
    ld_device_t *dv = placeable(d, p->location.id, dc.domain, why, sizeof why);
    if (!dv) {
        ld_alloc_note_fallback(&dc, LD_API_VMM, why);
        return real(h, n, p, flags);
    }
    if (!is_native(dv)) {
        if (dv->backend->kind == LD_BACKEND_EMULATED) {
            ld_alloc_note_placed(&dc, LD_API_VMM, n, dc.domain, 1);   /* ordinary memory, counted */
        } else {
            snprintf(why, sizeof why, "the program's own VMM handles are placed by the native backend only (%s)",
                     dv->backend->name);
            ld_alloc_note_fallback(&dc, LD_API_VMM, why);
        }
        return real(h, n, p, flags);
    }
    CUmemAllocationProp q = *p;
    q.location = domain_location(p->location.id, dc.domain);
    CUresult r = real(h, n, &q, flags);
    if (r == CUDA_SUCCESS) {
        ld_alloc_note_placed(&dc, LD_API_VMM, n, dc.domain, 0);
        return r;
    }
    snprintf(why, sizeof why, "cuMemCreate in domain %d: %s", dc.domain, ld_cu_errname(r));
    ld_alloc_note_fallback(&dc, LD_API_VMM, why);
    return real(h, n, p, flags);
}

/* ---- stream-ordered ------------------------------------------------------------------------ */

/* The shim's pool per device and domain, created on first use with the default pool's
 * release threshold, so the program's own tuning of its default pool carries over. */
static pthread_mutex_t pools_mu = PTHREAD_MUTEX_INITIALIZER;
static CUmemoryPool pools[LD_MAX_DEVICES][8];

static CUmemoryPool domain_pool(const ld_driver_t *d, CUdevice dev, int dom, CUmemoryPool def, char *why, size_t n) {
    if (dev < 0 || dev >= LD_MAX_DEVICES || dom < 0 || dom >= 8) { snprintf(why, n, "no pool slot"); return NULL; }
    pthread_mutex_lock(&pools_mu);
    CUmemoryPool p = pools[dev][dom];
    pthread_mutex_unlock(&pools_mu);
    if (p) return p;
    if (!d->cuMemPoolCreate) { snprintf(why, n, "the driver has no memory pools"); return NULL; }
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location = domain_location(dev, dom);
    CUresult r = d->cuMemPoolCreate(&p, &props);
    if (r != CUDA_SUCCESS) { snprintf(why, n, "cuMemPoolCreate in domain %d: %s", dom, ld_cu_errname(r)); return NULL; }
    cuuint64_t thr = 0;
    if (def && d->cuMemPoolGetAttribute && d->cuMemPoolSetAttribute &&
        d->cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr) == CUDA_SUCCESS)
        d->cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr);
    pthread_mutex_lock(&pools_mu);
    if (pools[dev][dom]) {
        CUmemoryPool keep = pools[dev][dom];
        pthread_mutex_unlock(&pools_mu);
        /* Lost a race to another thread: its pool stays (ours held nothing). Pools are never
         * destroyed while the process runs, so this one is simply not used. */
        return keep;
    }
    pools[dev][dom] = p;
    pthread_mutex_unlock(&pools_mu);
    LD_INFO("place: device %d: stream-ordered allocations of tagged sizes come from a pool in domain %d", (int)dev, dom);
    return p;
}

CUresult ld_place_async(const ld_driver_t *d, ld_async_fn real, CUdeviceptr *dp, size_t n, CUstream s, int per_thread) {
    ld_decision_t dc;
    if (!dp || !ld_alloc_decide(n, LD_API_ASYNC, &dc) || dc.kind != LD_PLACE_DOMAIN) return real(dp, n, s);
    char why[200];
    CUdevice dev;
    if ((d->cuStreamGetDevice ? d->cuStreamGetDevice(s, &dev) : CUDA_ERROR_NOT_SUPPORTED) != CUDA_SUCCESS &&
        current_device(d, &dev) != 0)
        return real(dp, n, s);   /* no device to place on: the driver gives the stock answer */
    ld_device_t *dv = placeable(d, dev, dc.domain, why, sizeof why);
    if (!dv) {
        ld_alloc_note_fallback(&dc, LD_API_ASYNC, why);
        return real(dp, n, s);
    }
    if (!is_native(dv)) {
        if (dv->backend->kind == LD_BACKEND_EMULATED) {
            ld_alloc_note_placed(&dc, LD_API_ASYNC, n, dc.domain, 1);
        } else {
            snprintf(why, sizeof why, "stream-ordered allocations are placed by the native backend only (%s)",
                     dv->backend->name);
            ld_alloc_note_fallback(&dc, LD_API_ASYNC, why);
        }
        return real(dp, n, s);
    }
    /* A pool the program made current is its own: its allocations stay there. */
    CUmemoryPool cur = NULL, def = NULL;
    if (!d->cuDeviceGetMemPool || !d->cuDeviceGetDefaultMemPool || !d->cuMemAllocFromPoolAsync ||
        d->cuDeviceGetMemPool(&cur, dev) != CUDA_SUCCESS || d->cuDeviceGetDefaultMemPool(&def, dev) != CUDA_SUCCESS) {
        ld_alloc_note_fallback(&dc, LD_API_ASYNC, "the driver cannot name the device's memory pools");
        return real(dp, n, s);
    }
    if (cur != def) {
        ld_alloc_note_fallback(&dc, LD_API_ASYNC, "the device's current memory pool is the program's own: not moved");
        return real(dp, n, s);
    }
    CUmemoryPool pool = domain_pool(d, dev, dc.domain, def, why, sizeof why);
    if (!pool) {
        ld_alloc_note_fallback(&dc, LD_API_ASYNC, why);
        return real(dp, n, s);
    }
    /* The _ptsz variant's NULL stream is the per-thread default stream: say so explicitly
     * to the non-_ptsz entry the shim calls. */
    CUstream use = per_thread && s == NULL ? CU_STREAM_PER_THREAD : s;
    CUresult r = d->cuMemAllocFromPoolAsync(dp, n, pool, use);
    if (r == CUDA_SUCCESS) {
        ld_alloc_note_placed(&dc, LD_API_ASYNC, n, dc.domain, 0);
        return r;
    }
    snprintf(why, sizeof why, "cuMemAllocFromPoolAsync in domain %d: %s", dc.domain, ld_cu_errname(r));
    ld_alloc_note_fallback(&dc, LD_API_ASYNC, why);
    return real(dp, n, s);
}

CUresult ld_place_from_pool(const ld_driver_t *d, ld_frompool_fn real, CUdeviceptr *dp, size_t n, CUmemoryPool pool,
                            CUstream s) {
    (void)d;
    ld_decision_t dc;
    if (dp && ld_alloc_decide(n, LD_API_ASYNC, &dc) && dc.kind == LD_PLACE_DOMAIN)
        ld_alloc_note_fallback(&dc, LD_API_ASYNC, "an allocation from a pool the program created: not moved");
    return real(dp, n, pool, s);
}

/* ---- pitched ------------------------------------------------------------------------------ */

CUresult ld_place_pitch(const ld_driver_t *d, ld_pitch_fn real, CUdeviceptr *dp, size_t *pitch, size_t w, size_t h,
                        unsigned int esz) {
    if (!dp || !pitch || !w || !h || (esz != 4 && esz != 8 && esz != 16)) return real(dp, pitch, w, h, esz);
    size_t p = (w + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
    if (p < w || h > (size_t)-1 / p) return real(dp, pitch, w, h, esz);
    ld_decision_t dc;
    if (!ld_alloc_decide(p * h, LD_API_PITCH, &dc) || dc.kind != LD_PLACE_DOMAIN) return real(dp, pitch, w, h, esz);
    CUresult r = ld_alloc_placed(d, dp, p * h, LD_API_PITCH, &dc);
    if (r == CUDA_SUCCESS) *pitch = p;
    return r;
}

/* ---- managed ------------------------------------------------------------------------------ */

CUresult ld_place_managed(const ld_driver_t *d, ld_managed_fn real, CUdeviceptr *dp, size_t n, unsigned int flags) {
    CUresult r = real(dp, n, flags);
    ld_decision_t dc;
    if (r != CUDA_SUCCESS || !dp || !ld_alloc_decide(n, LD_API_MANAGED, &dc) || dc.kind != LD_PLACE_DOMAIN) return r;
    char why[200];
    CUdevice dev;
    if (current_device(d, &dev) != 0) return r;
    ld_device_t *dv = placeable(d, dev, dc.domain, why, sizeof why);
    if (!dv) {
        ld_alloc_note_fallback(&dc, LD_API_MANAGED, why);
        return r;
    }
    if (!is_native(dv)) {
        if (dv->backend->kind == LD_BACKEND_EMULATED) {
            ld_alloc_note_placed(&dc, LD_API_MANAGED, n, dc.domain, 1);
        } else {
            snprintf(why, sizeof why, "managed memory is placed by the native backend only (%s)", dv->backend->name);
            ld_alloc_note_fallback(&dc, LD_API_MANAGED, why);
        }
        return r;
    }
    /* The memory stays valid either way: only its preferred home changes. */
    CUresult a = d->cuMemAdvise_v2 ? d->cuMemAdvise_v2(*dp, n, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                                                       domain_location(dev, dc.domain))
                                   : CUDA_ERROR_NOT_SUPPORTED;
    if (a == CUDA_SUCCESS) {
        ld_alloc_note_placed(&dc, LD_API_MANAGED, n, dc.domain, 0);
    } else {
        snprintf(why, sizeof why, "cuMemAdvise(preferred location: domain %d): %s", dc.domain, ld_cu_errname(a));
        ld_alloc_note_fallback(&dc, LD_API_MANAGED, why);
    }
    return r;
}

void ld_place_reset(void) {
    memset(pools, 0, sizeof pools);
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;   /* no thread of the child holds it */
    pools_mu = m;
}
