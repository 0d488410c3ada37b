/* vmm.c — one localized range = reserve + per-slice create/map + one access grant. */
#include "shim/vmm.h"
#include "shim/log.h"
#include "shim/options.h"
#include "shim/pool.h"
#include "shim/registry.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* slice = ceil(size / n) rounded up to the granularity, reserved = n x slice; -1 when
 * either overflows (3 domains and 2^64 - 2^21 bytes would wrap the reservation to 2 MiB). */
static int layout(size_t size, int n, size_t gran, size_t *slice, size_t *reserved) {
    if (gran == 0) return -1;
    size_t per = size / (size_t)n + (size % (size_t)n != 0);
    if (per > SIZE_MAX - (gran - 1)) return -1;
    size_t sl = (per + gran - 1) / gran * gran;
    if (sl > SIZE_MAX / (size_t)n) return -1;
    *slice = sl;
    *reserved = sl * (size_t)n;
    return 0;
}

/* Teardown calls, each retried once: a transient failure must not leak a mapping, a handle
 * or the address range (nothing else would ever release them). */
static CUresult unmap(const ld_driver_t *d, CUdeviceptr p, size_t n) {
    CUresult rc = d->pfn_cuMemUnmap(p, n);
    return rc == CUDA_SUCCESS ? rc : d->pfn_cuMemUnmap(p, n);
}
static CUresult release(const ld_driver_t *d, CUmemGenericAllocationHandle h) {
    CUresult rc = d->pfn_cuMemRelease(h);
    return rc == CUDA_SUCCESS ? rc : d->pfn_cuMemRelease(h);
}
static CUresult address_free(const ld_driver_t *d, CUdeviceptr p, size_t n) {
    CUresult rc = d->pfn_cuMemAddressFree(p, n);
    return rc == CUDA_SUCCESS ? rc : d->pfn_cuMemAddressFree(p, n);
}
/* Set while the process exits: the driver may already be shutting down, so teardown
 * failures are expected and not worth a warning. */
static int exiting_flag;
static int exiting(void) { return __atomic_load_n(&exiting_flag, __ATOMIC_RELAXED); }

/* Registered when the pool first keeps a range, i.e. after the program initialized CUDA, so
 * it runs before the runtime's own exit handlers tear the driver state down. */
static void at_exit(void) {
    __atomic_store_n(&exiting_flag, 1, __ATOMIC_RELAXED);
    if (!ld_pool_empty()) ld_vmm_trim(ld_driver(), -1);
}

/* --- chunking: a slice of at most `chunk` bytes per physical handle ------------------------
 * Localized memory beyond the driver's 32 MiB contiguity stride (the study's
 * PMA_LOCALIZED_MEMORY_ALLOC_STRIDE) is created one 2 MiB page at a time, 5.7 ms for 1 GiB on
 * B300 against 26 us at 32 MiB: handles of at most 32 MiB, mapped back to back, keep every
 * cuMemCreate on the fast side of it. Emulated memory has no stride: one handle per slice.
 * LDSHIM_CHUNK forces a size (or `slice`). */
#define kLocalizedChunk ((size_t)32 << 20)   /* the study's stride */
#define kChunkMax       ((uint64_t)1 << 40)  /* bound on LDSHIM_CHUNK */
#define kMaxPieces      4096                 /* handles per slice: beyond, the chunk grows */

/* 0: the backend's default; SIZE_MAX: one per slice; else the forced bytes. */
static size_t forced_chunk(void) {
    static atomic_int state;                  /* 0 unread, 1 read */
    static atomic_size_t value;
    if (atomic_load_explicit(&state, memory_order_acquire)) return atomic_load_explicit(&value, memory_order_relaxed);
    const char *s = ld_opt(LD_OPT_CHUNK);
    size_t v = 0;
    uint64_t b;
    if (s && (!strcmp(s, "slice") || !strcmp(s, "0"))) v = SIZE_MAX;
    else if (s && ld_parse_size(s, strlen(s), &b) == 0 && b > 0 && b <= kChunkMax) v = (size_t)b;
    else if (s) LD_WARN(CONFIG, "LDSHIM_CHUNK=%s is not a size 1..1TiB or slice; using the backend's default", s);
    atomic_store_explicit(&value, v, memory_order_relaxed);   /* every thread computes the same value */
    atomic_store_explicit(&state, 1, memory_order_release);
    return v;
}

/* Bytes per handle of a `slice`-byte slice on dv (a multiple of the granularity). */
static size_t chunk_for(const ld_device_t *dv, size_t slice) {
    size_t c = forced_chunk();
    if (!c) c = dv->backend->localizes ? kLocalizedChunk : SIZE_MAX;
    if (c >= slice) return slice;
    if (c < slice / kMaxPieces) c = slice / kMaxPieces + 1;
    c = (c + dv->gran - 1) / dv->gran * dv->gran;
    return c < slice ? c : slice;
}

static CUmemGenericAllocationHandle *piece_handle(ld_range_t *r, int k) {
    return r->handles ? &r->handles[k] : &r->handle[k];
}
static CUdeviceptr piece_base(const ld_range_t *r, int k) {
    return r->base + (CUdeviceptr)(k / r->per_slice) * r->slice + (CUdeviceptr)(k % r->per_slice) * r->chunk;
}
static size_t piece_bytes(const ld_range_t *r, int k) {
    size_t off = (size_t)(k % r->per_slice) * r->chunk;
    return r->slice - off < r->chunk ? r->slice - off : r->chunk;
}

size_t ld_vmm_chunk(const ld_device_t *dv, size_t slice) { return chunk_for(dv, slice); }

/* Physical handle for one slice (the pool gives back what it keeps on out-of-memory). */
static CUresult get_handle(const ld_driver_t *d, ld_device_t *dv, int domain, size_t bytes,
                           CUmemGenericAllocationHandle *h, char *why, size_t n) {
    CUresult r;
    LD_POOL_RETRY_OOM(d, r, dv->backend->create(d, dv->ordinal, domain, bytes, h, why, n));
    return r;
}

/* --- read-back: is each slice homed where it was asked? ------------------------------------
 * The reference study's discard rule: the driver's own answer
 * (CU_POINTER_ATTRIBUTE_LOCALITY_DOMAIN_ORDINAL, 13.4+) for every piece of a fresh range; a
 * piece homed elsewhere, or not localized (-1), discards the range and the request falls
 * back. A driver that does not know the attribute is trusted and counted "unverified". */
static atomic_uint_fast64_t rb_right, rb_wrong, rb_unlocalized, rb_unverified, rb_discarded;
static atomic_uint_fast64_t n_created, n_handles;   /* fresh ranges and their handles */

void ld_vmm_readback_stats(ld_readback_stats_t *o) {
    o->right = atomic_load(&rb_right);
    o->wrong_domain = atomic_load(&rb_wrong);
    o->not_localized = atomic_load(&rb_unlocalized);
    o->unverified = atomic_load(&rb_unverified);
    o->discarded = atomic_load(&rb_discarded);
    o->ranges_created = atomic_load(&n_created);
    o->handles_created = atomic_load(&n_handles);
}

void ld_vmm_readback_reset(void) {
    atomic_store(&rb_right, 0);
    atomic_store(&rb_wrong, 0);
    atomic_store(&rb_unlocalized, 0);
    atomic_store(&rb_unverified, 0);
    atomic_store(&rb_discarded, 0);
    atomic_store(&n_created, 0);
    atomic_store(&n_handles, 0);
}

/* 0: homed in `domain` (or unverifiable); -1: not, with `why` a stable reason (the report
 * counts fallbacks by reason) and the detail logged. */
static int read_back(const ld_driver_t *d, CUdeviceptr p, int domain, char *why, size_t n) {
    int got = -2;
    CUresult rc = d->pfn_cuPointerGetAttribute ? d->pfn_cuPointerGetAttribute(&got, LD_CU_POINTER_ATTRIBUTE_LOCALITY_DOMAIN_ORDINAL, p)
                                           : CUDA_ERROR_NOT_SUPPORTED;
    if (rc != CUDA_SUCCESS) {
        atomic_fetch_add(&rb_unverified, 1);
        return 0;
    }
    if (got == domain) {
        atomic_fetch_add(&rb_right, 1);
        return 0;
    }
    if (got < 0) {
        atomic_fetch_add(&rb_unlocalized, 1);
        snprintf(why, n, "read-back: a slice is not localized (ordinal %d); discarded", got);
    } else {
        atomic_fetch_add(&rb_wrong, 1);
        snprintf(why, n, "read-back: a slice is homed in another domain than asked; discarded");
    }
    LD_INFO(VMM, "read-back of 0x%llx: domain %d asked, the driver says %d", (unsigned long long)p, domain, got);
    return -1;
}

/* Grant access to `mask`'s devices other than those in r->access_mask. */
CUresult ld_vmm_grant(const ld_driver_t *d, ld_range_t *r, unsigned long long mask) {
    CUmemAccessDesc acc[LD_MAX_DEVICES];
    int k = 0;
    for (int a = 0; a < LD_MAX_DEVICES; a++) {
        if (!(mask & (1ull << a)) || (r->access_mask & (1ull << a))) continue;
        acc[k].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        acc[k].location.id = a;
        acc[k].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        k++;
    }
    if (!k) return CUDA_SUCCESS;
    CUresult rc = d->pfn_cuMemSetAccess(r->base, r->reserved, acc, (size_t)k);
    if (rc == CUDA_SUCCESS) r->access_mask |= mask;
    return rc;
}

CUresult ld_vmm_create(const ld_driver_t *d, ld_device_t *dv, size_t size, int nslices,
                       const int *domain_of, ld_range_t *r, char *why, size_t n) {
    if (nslices < 1 || nslices > LD_MAX_SLICES) {
        snprintf(why, n, "bad slice count %d", nslices);
        return CUDA_ERROR_INVALID_VALUE;
    }
    size_t slice, reserved;
    if (layout(size, nslices, dv->gran, &slice, &reserved) != 0) {
        snprintf(why, n, "%zu bytes in %d slices of %zu-byte granules overflow the address space", size, nslices,
                 dv->gran);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    unsigned long long mask = ld_device_access_mask(dv->ordinal);
    if (ld_pool_take(dv->ordinal, nslices, slice, chunk_for(dv, slice), domain_of, r) == 0) {
        r->size = size;
        if (ld_vmm_grant(d, r, mask) == CUDA_SUCCESS) return CUDA_SUCCESS;
        ld_vmm_teardown(d, r);                /* a peer grant failed: build a fresh one */
    }
    memset(r, 0, sizeof *r);
    r->size = size;
    r->nslices = nslices;
    r->device = dv->ordinal;
    r->slice = slice;
    r->reserved = reserved;
    r->backend = dv->backend->kind;
    r->chunk = chunk_for(dv, slice);
    r->per_slice = (int)((slice + r->chunk - 1) / r->chunk);
    int npieces = nslices * r->per_slice;
    if (r->per_slice > 1 && !(r->handles = calloc((size_t)npieces, sizeof *r->handles))) {
        snprintf(why, n, "no host memory for %d handles", npieces);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }

    CUresult rc;
    LD_POOL_RETRY_OOM(d, rc, d->pfn_cuMemAddressReserve(&r->base, r->reserved, dv->gran, 0, 0));
    if (rc != CUDA_SUCCESS) {
        snprintf(why, n, "cuMemAddressReserve: %s", ld_cu_errname(rc));
        free(r->handles);
        r->handles = NULL;
        return rc;
    }
    for (int i = 0; i < nslices; i++) r->domain_of[i] = domain_of[i];
    int created = 0, mapped = 0;
    for (int k = 0; k < npieces; k++, created++) {
        rc = get_handle(d, dv, domain_of[k / r->per_slice], piece_bytes(r, k), piece_handle(r, k), why, n);
        if (rc != CUDA_SUCCESS) goto undo;
    }
    for (int k = 0; k < npieces; k++, mapped++) {
        rc = d->pfn_cuMemMap(piece_base(r, k), piece_bytes(r, k), 0, *piece_handle(r, k), 0);
        if (rc != CUDA_SUCCESS) {
            if (r->per_slice == 1) snprintf(why, n, "cuMemMap(slice %d): %s", k, ld_cu_errname(rc));
            else snprintf(why, n, "cuMemMap(slice %d, piece %d): %s", k / r->per_slice, k % r->per_slice, ld_cu_errname(rc));
            goto undo;
        }
    }
    rc = ld_vmm_grant(d, r, mask);
    if (rc != CUDA_SUCCESS) {
        snprintf(why, n, "cuMemSetAccess: %s", ld_cu_errname(rc));
        goto undo;
    }
    if (dv->backend->verifies_home)
        for (int k = 0; k < npieces; k++)
            if (read_back(d, piece_base(r, k), domain_of[k / r->per_slice], why, n) != 0) {
                atomic_fetch_add(&rb_discarded, 1);
                rc = CUDA_ERROR_INVALID_VALUE;
                goto undo;
            }
    atomic_fetch_add(&n_created, 1);
    atomic_fetch_add(&n_handles, (uint64_t)npieces);
    return CUDA_SUCCESS;

undo:
    for (int k = 0; k < mapped; k++) unmap(d, piece_base(r, k), piece_bytes(r, k));
    for (int k = 0; k < created; k++) release(d, *piece_handle(r, k));
    address_free(d, r->base, r->reserved);
    free(r->handles);
    r->handles = NULL;
    r->base = 0;
    return rc;
}

void ld_vmm_teardown(const ld_driver_t *d, const ld_range_t *r) {
    ld_range_t x = *r;                       /* piece_handle wants a writable record */
    int npieces = x.nslices * (x.per_slice > 0 ? x.per_slice : 1);
    if (x.per_slice <= 0) x.per_slice = 1, x.chunk = x.slice;
    for (int k = 0; k < npieces; k++) {
        CUresult rc = unmap(d, piece_base(&x, k), piece_bytes(&x, k));
        if (rc != CUDA_SUCCESS && !exiting())
            LD_WARN(VMM, "cuMemUnmap(0x%llx, piece %d): %s", (unsigned long long)x.base, k, ld_cu_errname(rc));
    }
    for (int k = 0; k < npieces; k++) {
        CUresult rc = release(d, *piece_handle(&x, k));
        if (rc != CUDA_SUCCESS && !exiting())
            LD_WARN(VMM, "cuMemRelease(piece %d of 0x%llx): %s", k, (unsigned long long)x.base, ld_cu_errname(rc));
    }
    CUresult rc = address_free(d, x.base, x.reserved);
    if (rc != CUDA_SUCCESS && !exiting()) LD_WARN(VMM, "cuMemAddressFree(0x%llx): %s", (unsigned long long)x.base, ld_cu_errname(rc));
    free(x.handles);
}

void ld_vmm_release(const ld_driver_t *d, const ld_range_t *r) {
    int first = 0;
    if (ld_pool_keep(r, &first) != 0) ld_vmm_teardown(d, r);
    else if (first) atexit(at_exit);
}

size_t ld_vmm_teardown_if(const ld_driver_t *d, int (*pred)(const ld_range_t *, void *), void *arg,
                          CUcontext first) {
    ld_range_t *v;
    size_t n = ld_registry_take_if(pred, arg, &v);
    CUcontext x;
    if (n && first && d->pfn_cuCtxPushCurrent_v2(first) == CUDA_SUCCESS) {
        d->pfn_cuCtxSynchronize();
        d->pfn_cuCtxPopCurrent_v2(&x);
    }
    /* Ranges allocated while a bound (green) context was current: wait for that context too. */
    for (size_t i = 0; i < n; i++) {
        int seen = v[i].ctx == first;
        for (size_t j = 0; j < i && !seen; j++) seen = v[j].ctx == v[i].ctx;
        if (!seen && v[i].ctx && d->pfn_cuCtxPushCurrent_v2(v[i].ctx) == CUDA_SUCCESS) {
            d->pfn_cuCtxSynchronize();
            d->pfn_cuCtxPopCurrent_v2(&x);
        }
    }
    for (size_t i = 0; i < n; i++) ld_vmm_teardown(d, &v[i]);
    free(v);
    return n;
}

void ld_vmm_grant_peer(const ld_driver_t *d, int owner, int accessor) {
    if (ld_device_add_peer(owner, accessor) != 0) return;
    if (!d->pfn_cuMemSetAccess) return;
    size_t total = ld_registry_snapshot(owner, NULL, 0), got = 0;
    ld_range_t *buf = total ? malloc((total + 16) * sizeof *buf) : NULL;
    if (buf) got = ld_registry_snapshot(owner, buf, total + 16);
    if (got > total + 16) got = total + 16;   /* ranges added meanwhile get the grant at creation */
    for (size_t i = 0; i < got; i++) {
        CUmemAccessDesc a;
        a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        a.location.id = accessor;
        a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        CUresult r = d->pfn_cuMemSetAccess(buf[i].base, buf[i].reserved, &a, 1);
        if (r != CUDA_SUCCESS)
            LD_WARN(VMM, "peer grant of range 0x%llx to device %d failed: %s", (unsigned long long)buf[i].base, accessor,
                         ld_cu_errname(r));
    }
    free(buf);
    LD_INFO(VMM, "device %d may now access %zu shim range(s) of device %d", accessor, got, owner);
}

static void teardown_drained(const ld_range_t *r, void *d) { ld_vmm_teardown(d, r); }

uint64_t ld_vmm_trim(const ld_driver_t *d, int dev) {
    return ld_pool_drain(dev, d ? teardown_drained : NULL, (void *)d);
}

CUresult ld_vmm_alloc(const ld_driver_t *d, ld_device_t *dv, CUcontext ctx, int rule, size_t size, int nslices,
                      const int *domain_of, ld_range_t *r, char *why, size_t n) {
    CUresult rc = ld_vmm_create(d, dv, size, nslices, domain_of, r, why, n);
    if (rc != CUDA_SUCCESS) return rc;
    r->ctx = ctx;
    r->rule = rule;
    if (ld_registry_insert(r) != 0) {
        ld_vmm_teardown(d, r);   /* never handed out: nothing left behind, not even in the pool */
        snprintf(why, n, "registry insert failed (out of host memory)");
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* A peer enabled between the range's access grant and its registration missed the
     * registry snapshot of ld_vmm_grant_peer: grant what the device's mask says now. */
    ld_vmm_grant(d, r, ld_device_access_mask(dv->ordinal));
    return CUDA_SUCCESS;
}

int ld_vmm_free(const ld_driver_t *d, CUdeviceptr base) {
    ld_range_t r;
    if (ld_registry_remove(base, &r) != 0) return -1;
    /* cudaFree/cuMemFree semantics: wait for work that may still use the memory, in the
     * context the range was allocated in. */
    CUcontext cur = NULL;
    d->pfn_cuCtxGetCurrent(&cur);
    int pushed = r.ctx && r.ctx != cur && d->pfn_cuCtxPushCurrent_v2(r.ctx) == CUDA_SUCCESS;
    CUresult s = d->pfn_cuCtxSynchronize();
    if (s != CUDA_SUCCESS) LD_DEBUG(VMM, "free 0x%llx: synchronize: %s", (unsigned long long)base, ld_cu_errname(s));
    ld_vmm_release(d, &r);
    if (pushed) {
        CUcontext dummy;
        d->pfn_cuCtxPopCurrent_v2(&dummy);
    }
    return 0;
}
