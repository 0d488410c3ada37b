/* fake_pool.c — stream-ordered and managed memory of the fake driver: memory pools (the
 * device's default pool, pools the program creates, with a location: the device, or one of
 * its locality domains when FAKE_CUDA_DOMAINS >= 2), cuMemAllocAsync / cuMemAllocFromPoolAsync
 * / cuMemFreeAsync (and _ptsz), cuMemAllocManaged and the preferred location of cuMemAdvise_v2.
 * The memory is plain fake memory (fake_mem.c) that remembers its pool's domain, so
 * fakecuda_domain_of says where each allocation landed. Nothing here is asynchronous. */
#include "tests/fake/fake_internal.h"

#include <stdlib.h>
#include <string.h>

#define FK_POOL_MAGIC 0x900190A1u
typedef struct {
    uint32_t magic;
    int device, domain;          /* domain -1: the device as a whole */
    cuuint64_t threshold;
} fk_pool_t;

static fk_pool_t fk_default_pool[FK_MAX_DEVICES];
static fk_pool_t *fk_current_pool[FK_MAX_DEVICES];

static fk_pool_t *pool_of(CUmemoryPool p) {
    fk_pool_t *x = (fk_pool_t *)p;
    return x && x->magic == FK_POOL_MAGIC ? x : NULL;
}

static fk_pool_t *default_pool(int dev) {
    fk_lock();
    if (!fk_default_pool[dev].magic) fk_default_pool[dev] = (fk_pool_t){ FK_POOL_MAGIC, dev, -1, 0 };
    fk_pool_t *p = fk_current_pool[dev] ? fk_current_pool[dev] : &fk_default_pool[dev];
    fk_unlock();
    return p;
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
    fk_pool_t *p = calloc(1, sizeof *p);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    *p = (fk_pool_t){ FK_POOL_MAGIC, dev, dom, 0 };
    *out = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    FK_ENTER("cuMemPoolDestroy", CUDA_ERROR_INVALID_VALUE);
    fk_pool_t *p = pool_of(pool);
    if (!p || p == &fk_default_pool[p->device]) return CUDA_ERROR_INVALID_VALUE;
    fk_lock();
    if (fk_current_pool[p->device] == p) fk_current_pool[p->device] = NULL;
    fk_unlock();
    p->magic = 0;
    free(p);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    FK_ENTER("cuMemPoolGetAttribute", CUDA_ERROR_INVALID_VALUE);
    fk_pool_t *p = pool_of(pool);
    if (!p || !value || attr != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) return CUDA_ERROR_INVALID_VALUE;
    *(cuuint64_t *)value = p->threshold;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    FK_ENTER("cuMemPoolSetAttribute", CUDA_ERROR_INVALID_VALUE);
    fk_pool_t *p = pool_of(pool);
    if (!p || !value || attr != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) return CUDA_ERROR_INVALID_VALUE;
    p->threshold = *(cuuint64_t *)value;
    return CUDA_SUCCESS;
}

static CUresult alloc_from(CUdeviceptr *dp, size_t n, fk_pool_t *p, CUstream s, int pt) {
    if (!dp || !n || !p) return CUDA_ERROR_INVALID_VALUE;
    fk_ctx_t *c;
    CUresult r = fk_stream_ctx(s, pt, &c);
    if (r != CUDA_SUCCESS) return r;
    if (c->device != p->device) return CUDA_ERROR_INVALID_VALUE;
    return fk_plain_alloc(dp, n, p->device, 1, p->domain);
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
