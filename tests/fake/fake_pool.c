/* fake_pool.c — stream-ordered and managed memory of the fake driver: memory pools (the
 * device's default pool, pools the program creates, with a location: the device, or one of
 * its locality domains when FAKE_CUDA_DOMAINS >= 2), cuMemAllocAsync / cuMemAllocFromPoolAsync
 * / cuMemFreeAsync (and _ptsz), cuMemAllocManaged and the preferred location of cuMemAdvise_v2;
 * a pool's attributes (release threshold, reuse flags, used/reserved bytes and their high
 * watermarks), its access from other devices (cuMemPoolSetAccess/GetAccess) and
 * cuMemPoolTrimTo. The memory is plain fake memory (fake_mem.c) that remembers its pool, so
 * fakecuda_domain_of says where each allocation landed, fakecuda_access_of whether another
 * device may read it (the pool's access, as on the driver: peer access of the contexts does
 * not reach pool memory) and CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE which pool it came from.
 * Pools the program created count as live objects at exit ("pools=" in the report).
 * Nothing here is asynchronous. */
#include "tests/fake/fake_internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FK_POOL_MAGIC 0x900190A1u
/* A pool's bytes: `used` by live allocations, `reserved` = used + what freed allocations left
 * behind (kept up to the release threshold, given back by cuMemPoolTrimTo). The fake frees
 * the memory itself at once; only the numbers model the pool. */
typedef struct {
    uint32_t magic;
    int device, domain;          /* domain -1: the device as a whole */
    int created;                 /* 1: cuMemPoolCreate's (0: a device's default pool) */
    int destroyed;               /* destroyed with allocations outstanding: freed with the last */
    cuuint64_t threshold;
    int reuse[3];                /* CU_MEMPOOL_ATTR_REUSE_* (1..3), default enabled */
    cuuint64_t used, reserved, used_high, reserved_high;
    size_t outstanding;          /* live allocations */
    unsigned char access[FK_MAX_DEVICES];   /* CUmemAccess_flags of other devices */
} fk_pool_t;

static fk_pool_t fk_default_pool[FK_MAX_DEVICES];
static fk_pool_t *fk_current_pool[FK_MAX_DEVICES];
static _Atomic int fk_pools;     /* created, not destroyed */
static _Atomic int fk_pools_made;   /* created in all */

static void pool_init(fk_pool_t *p, int dev, int dom, int created) {
    memset(p, 0, sizeof *p);
    p->magic = FK_POOL_MAGIC;
    p->device = dev;
    p->domain = dom;
    p->created = created;
    p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
}

static fk_pool_t *pool_of(CUmemoryPool p) {
    fk_pool_t *x = (fk_pool_t *)p;
    return x && x->magic == FK_POOL_MAGIC ? x : NULL;
}

static fk_pool_t *default_pool(int dev) {
    fk_lock();
    if (!fk_default_pool[dev].magic) pool_init(&fk_default_pool[dev], dev, -1, 0);
    fk_pool_t *p = fk_current_pool[dev] ? fk_current_pool[dev] : &fk_default_pool[dev];
    fk_unlock();
    return p;
}

/* Give reserved bytes back down to `keep` (never below what is used). */
static void pool_release(fk_pool_t *p, cuuint64_t keep) {
    if (p->reserved > keep) p->reserved = p->used > keep ? p->used : keep;
}

void fk_pool_charge(void *pool, size_t bytes) {
    fk_pool_t *p = pool;
    p->outstanding++;
    p->used += bytes;
    if (p->reserved < p->used) p->reserved = p->used;   /* reuse what is reserved, else grow */
    if (p->used > p->used_high) p->used_high = p->used;
    if (p->reserved > p->reserved_high) p->reserved_high = p->reserved;
}

void fk_pool_discharge(void *pool, size_t bytes) {
    fk_pool_t *p = pool;
    p->used -= bytes;
    pool_release(p, p->threshold);
    if (--p->outstanding == 0 && p->destroyed) free(p);
}

int fk_pool_access(void *pool, int device) {
    fk_pool_t *p = pool;
    return p && device >= 0 && device < FK_MAX_DEVICES ? p->access[device] : 0;
}

int fk_pools_live(void) { return atomic_load(&fk_pools); }

FAKE_API void fakecuda_pool_counts(int out[2]) {
    out[0] = atomic_load(&fk_pools);
    out[1] = atomic_load(&fk_pools_made);
}

/* The locality domain a location names, -1 for the device itself, -2 when invalid. */
static int location_domain(const CUmemLocation *loc, int *dev) {
    if (loc->type == CU_MEM_LOCATION_TYPE_DEVICE) { *dev = loc->id; return fk_valid_device(*dev) ? -1 : -2; }
    if ((int)loc->type == 6 && fk.ndomains >= 2) {   /* CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN (13.4) */
        *dev = loc->id & 0xff;
        int d = loc->id >> 8;
        return fk_valid_device(*dev) && d >= 0 && d < fk.ndomains ? d : -2;
    }
    return -2;
}

FAKE_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *out, CUdevice dev) {
    FK_ENTER("cuDeviceGetDefaultMemPool", CUDA_ERROR_INVALID_VALUE);
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    if (!fk_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    default_pool(dev);
    *out = (CUmemoryPool)&fk_default_pool[dev];
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetMemPool(CUmemoryPool *out, CUdevice dev) {
    FK_ENTER("cuDeviceGetMemPool", CUDA_ERROR_INVALID_VALUE);
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    if (!fk_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    *out = (CUmemoryPool)default_pool(dev);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
    FK_ENTER("cuDeviceSetMemPool", CUDA_ERROR_INVALID_VALUE);
    fk_pool_t *p = pool_of(pool);
    if (!fk_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    if (!p || p->device != dev) return CUDA_ERROR_INVALID_VALUE;
    fk_lock();
    fk_current_pool[dev] = p == &fk_default_pool[dev] ? NULL : p;
    fk_unlock();
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemPoolCreate(CUmemoryPool *out, const CUmemPoolProps *props) {
    FK_ENTER("cuMemPoolCreate", CUDA_ERROR_INVALID_VALUE);
    if (!out || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
    int dev = -1, dom = location_domain(&props->location, &dev);
    if (dom == -2) return CUDA_ERROR_INVALID_VALUE;
    /* FAKE_CUDA_POOL_CREATE_DELAY_MS: a slow creation, so that threads racing to create a
     * pool all get to create one. */
    const char *delay = getenv("FAKE_CUDA_POOL_CREATE_DELAY_MS");
    if (delay && *delay) usleep((useconds_t)strtoul(delay, NULL, 10) * 1000u);
    fk_pool_t *p = malloc(sizeof *p);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    pool_init(p, dev, dom, 1);
    atomic_fetch_add(&fk_pools, 1);
    atomic_fetch_add(&fk_pools_made, 1);
    *out = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

/* As the driver: a pool destroyed with allocations outstanding goes when the last is freed. */
FAKE_API CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    FK_ENTER("cuMemPoolDestroy", CUDA_ERROR_INVALID_VALUE);
    fk_pool_t *p = pool_of(pool);
    if (!p || !p->created) return CUDA_ERROR_INVALID_VALUE;
    fk_lock();
    if (fk_current_pool[p->device] == p) fk_current_pool[p->device] = NULL;
    p->magic = 0;
    if (p->outstanding) p->destroyed = 1;
    else free(p);
    fk_unlock();
    atomic_fetch_sub(&fk_pools, 1);
    fk_report_if_exiting();
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    FK_ENTER("cuMemPoolGetAttribute", CUDA_ERROR_INVALID_VALUE);
    fk_pool_t *p = pool_of(pool);
    if (!p || !value) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    fk_lock();
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: *(int *)value = p->reuse[attr - 1]; break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = p->threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = p->reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = p->reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = p->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = p->used_high; break;
    default: r = CUDA_ERROR_INVALID_VALUE;
    }
    fk_unlock();
    return r;
}

FAKE_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    FK_ENTER("cuMemPoolSetAttribute", CUDA_ERROR_INVALID_VALUE);
    fk_pool_t *p = pool_of(pool);
    if (!p || !value) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    fk_lock();
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: p->reuse[attr - 1] = *(int *)value != 0; break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: p->threshold = *(cuuint64_t *)value; break;
    /* The high watermarks can only be reset, to the current value. */
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        if (*(cuuint64_t *)value) r = CUDA_ERROR_INVALID_VALUE;
        else p->reserved_high = p->reserved;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (*(cuuint64_t *)value) r = CUDA_ERROR_INVALID_VALUE;
        else p->used_high = p->used;
        break;
    default: r = CUDA_ERROR_INVALID_VALUE;
    }
    fk_unlock();
    return r;
}

/* Other devices' access to the pool's memory; the owning device always has read-write. */
FAKE_API CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count) {
    FK_ENTER("cuMemPoolSetAccess", CUDA_ERROR_INVALID_VALUE);
    fk_pool_t *p = pool_of(pool);
    if (!p || (count && !map)) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !fk_valid_device(map[i].location.id) ||
            (map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
             map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) ||
            (map[i].location.id == p->device && map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
            return CUDA_ERROR_INVALID_VALUE;
    }
    fk_lock();
    for (size_t i = 0; i < count; i++)
        if (map[i].location.id != p->device) p->access[map[i].location.id] = (unsigned char)map[i].flags;
    fk_unlock();
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool pool, CUmemLocation *loc) {
    FK_ENTER("cuMemPoolGetAccess", CUDA_ERROR_INVALID_VALUE);
    fk_pool_t *p = pool_of(pool);
    if (!p || !flags || !loc || loc->type != CU_MEM_LOCATION_TYPE_DEVICE || !fk_valid_device(loc->id))
        return CUDA_ERROR_INVALID_VALUE;
    fk_lock();
    *flags = loc->id == p->device ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : (CUmemAccess_flags)p->access[loc->id];
    fk_unlock();
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
    FK_ENTER("cuMemPoolTrimTo", CUDA_ERROR_INVALID_VALUE);
    fk_pool_t *p = pool_of(pool);
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    fk_lock();
    pool_release(p, keep);
    fk_unlock();
    return CUDA_SUCCESS;
}

static CUresult alloc_from(CUdeviceptr *dp, size_t n, fk_pool_t *p, CUstream s, int pt) {
    if (!dp || !n || !p) return CUDA_ERROR_INVALID_VALUE;
    fk_ctx_t *c;
    CUresult r = fk_stream_ctx(s, pt, &c);
    if (r != CUDA_SUCCESS) return r;
    if (c->device != p->device) return CUDA_ERROR_INVALID_VALUE;
    return fk_plain_alloc_in(dp, n, p->device, 1, p->domain, p);
}

FAKE_API CUresult cuMemAllocAsync(CUdeviceptr *dp, size_t n, CUstream s) {
    FK_ENTER("cuMemAllocAsync", CUDA_ERROR_OUT_OF_MEMORY);
    fk_ctx_t *c;
    CUresult r = fk_stream_ctx(s, 0, &c);
    return r ? r : alloc_from(dp, n, default_pool(c->device), s, 0);
}
FAKE_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dp, size_t n, CUstream s) {
    FK_ENTER("cuMemAllocAsync_ptsz", CUDA_ERROR_OUT_OF_MEMORY);
    fk_ctx_t *c;
    CUresult r = fk_stream_ctx(s, 1, &c);
    return r ? r : alloc_from(dp, n, default_pool(c->device), s, 1);
}
FAKE_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dp, size_t n, CUmemoryPool pool, CUstream s) {
    FK_ENTER("cuMemAllocFromPoolAsync", CUDA_ERROR_OUT_OF_MEMORY);
    return alloc_from(dp, n, pool_of(pool), s, 0);
}
FAKE_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dp, size_t n, CUmemoryPool pool, CUstream s) {
    FK_ENTER("cuMemAllocFromPoolAsync_ptsz", CUDA_ERROR_OUT_OF_MEMORY);
    return alloc_from(dp, n, pool_of(pool), s, 1);
}

static CUresult free_async(CUdeviceptr p, CUstream s, int pt) {
    fk_ctx_t *c;
    CUresult r = fk_stream_ctx(s, pt, &c);
    return r ? r : fk_plain_free(p, 1);
}
FAKE_API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) {
    FK_ENTER("cuMemFreeAsync", CUDA_ERROR_INVALID_VALUE);
    return free_async(p, s, 0);
}
FAKE_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) {
    FK_ENTER("cuMemFreeAsync_ptsz", CUDA_ERROR_INVALID_VALUE);
    return free_async(p, s, 1);
}

FAKE_API CUresult cuMemAllocManaged(CUdeviceptr *dp, size_t n, unsigned int flags) {
    FK_ENTER("cuMemAllocManaged", CUDA_ERROR_OUT_OF_MEMORY);
    if (!dp || !n || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)) return CUDA_ERROR_INVALID_VALUE;
    FK_CURRENT(c);
    return fk_plain_alloc(dp, n, c->device, 2, -1);
}

/* Only the preferred location is modelled: a locality domain of the device, or the device. */
FAKE_API CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation loc) {
    FK_ENTER("cuMemAdvise_v2", CUDA_ERROR_INVALID_VALUE);
    if (advice != CU_MEM_ADVISE_SET_PREFERRED_LOCATION && advice != CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION)
        return CUDA_SUCCESS;
    int dev = -1, dom = -1;
    if (advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION && (dom = location_domain(&loc, &dev)) == -2)
        return CUDA_ERROR_INVALID_VALUE;
    return fk_plain_set_domain(p, n, dom) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Older and less common stream-ordered entry points: the fake has nothing to prefetch, copy
 * between peers or report about a capture, so each only checks its stream (the per-thread
 * stream fails in a green context) and succeeds. */
FAKE_API CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice dev, CUstream s) {
    (void)p; (void)n; (void)dev;
    FK_ENTER("cuMemPrefetchAsync", CUDA_ERROR_INVALID_VALUE);
    fk_ctx_t *c;
    return fk_stream_ctx(s, 0, &c);
}
FAKE_API CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t n, CUdevice dev, CUstream s) {
    (void)p; (void)n; (void)dev;
    FK_ENTER("cuMemPrefetchAsync_ptsz", CUDA_ERROR_INVALID_VALUE);
    fk_ctx_t *c;
    return fk_stream_ctx(s, 1, &c);
}
FAKE_API CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *cp, CUstream s) {
    FK_ENTER("cuMemcpy3DPeerAsync", CUDA_ERROR_INVALID_VALUE);
    fk_ctx_t *c;
    return cp ? fk_stream_ctx(s, 0, &c) : CUDA_ERROR_INVALID_VALUE;
}
FAKE_API CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                                            const CUgraphNode **deps, size_t *nd) {
    FK_ENTER("cuStreamGetCaptureInfo_v2", CUDA_ERROR_INVALID_VALUE);
    fk_ctx_t *c;
    CUresult r = fk_stream_ctx(s, 0, &c);
    if (r != CUDA_SUCCESS) return r;
    if (!st) return CUDA_ERROR_INVALID_VALUE;
    fk_stream_t *x = fk_stream(s);
    *st = x && x->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    if (id) *id = 0;
    if (g) *g = x ? (CUgraph)x->capture : NULL;
    if (deps) *deps = NULL;
    if (nd) *nd = 0;
    return CUDA_SUCCESS;
}
/* The green context of a stream: its context's, or for the legacy stream the current one's. */
FAKE_API CUresult cuStreamGetGreenCtx(CUstream s, CUgreenCtx *pg) {
    FK_ENTER("cuStreamGetGreenCtx", CUDA_ERROR_INVALID_VALUE);
    fk_ctx_t *c;
    if (!pg) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fk_stream_ctx(s, 0, &c);
    if (r == CUDA_SUCCESS) *pg = c->green ? (CUgreenCtx)FK_GREEN_OF(c) : NULL;
    return r;
}

FAKE_API CUresult cuStreamGetDevice(CUstream s, CUdevice *dev) {
    FK_ENTER("cuStreamGetDevice", CUDA_ERROR_INVALID_VALUE);
    fk_ctx_t *c;
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fk_stream_ctx(s, 0, &c);
    if (r == CUDA_SUCCESS) *dev = c->device;
    return r;
}
