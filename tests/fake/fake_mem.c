/* fake_mem.c — the fake driver's memory: plain cuMemAlloc (anonymous mmap), VMM (memfd
 * handles, PROT_NONE reservations, MAP_SHARED mappings), copies, IPC, pointer attributes,
 * accounting and the test hooks of fake_api.h.
 *
 * Semantics follow the real driver where FACTS.md records them: cuMemGetAddressRange on VMM
 * memory answers only the mapping holding the pointer; cuMemFree and cuIpcGetMemHandle on
 * VMM memory fail with CUDA_ERROR_INVALID_VALUE. Every table is guarded by fk_lock.
 */
#include "tests/fake/fake_internal.h"
#include "tests/fake/fake_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* kind: 0 cuMemAlloc, 1 stream-ordered (fake_pool.c), 2 managed, 3 cuMemAllocPitch; domain:
 * the pool's or the managed memory's preferred locality domain, -1 none; pool: the memory
 * pool a stream-ordered allocation came from; own: 1 if made while a context the program
 * created (cuCtxCreate) was current, which a primary context reset leaves alone. */
typedef struct { uintptr_t base; size_t size, mapped; int device, kind, domain; void *pool; int own; } fk_plain_t;
typedef struct {
    int used, fd, device, domain, released, refs, exportable, imported;
    size_t size;
} fk_handle_t;
typedef struct { uintptr_t base; size_t size; } fk_resv_t;
typedef struct {
    uintptr_t base; size_t size, offset; int handle;          /* handle: table index */
    unsigned char access[FK_MAX_DEVICES];
} fk_map_t;
typedef struct { int fd; dev_t dev; ino_t ino; } fk_export_t;
typedef struct { uintptr_t base; size_t size; int device; } fk_global_t;

/* Growable arrays; removal swaps in the last element (order does not matter). */
#define FK_VEC(T, name) static T *name; static int name##_n, name##_cap
FK_VEC(fk_plain_t, plains);
FK_VEC(fk_handle_t, handles);   /* index + 1 is the CUmemGenericAllocationHandle */
FK_VEC(fk_resv_t, resvs);
FK_VEC(fk_map_t, maps);
FK_VEC(fk_export_t, exports);
FK_VEC(fk_global_t, globals);

static int fk_grow(void **v, int *cap, int n, size_t elem) {
    if (n < *cap) return 0;
    int nc = *cap ? *cap * 2 : 16;
    void *p = realloc(*v, (size_t)nc * elem);
    if (!p) return -1;
    *v = p;
    *cap = nc;
    return 0;
}
#define FK_PUSH(name, val) \
    (fk_grow((void **)&name, &name##_cap, name##_n, sizeof *name) ? -1 : (name[name##_n++] = (val), 0))
#define FK_DEL(name, i) (name[i] = name[--name##_n])

static int fk_in(uintptr_t p, uintptr_t base, size_t size) { return p >= base && p - base < size; }

static int fk_find_plain(uintptr_t p) {
    for (int i = 0; i < plains_n; i++) if (fk_in(p, plains[i].base, plains[i].size)) return i;
    return -1;
}
static int fk_find_map(uintptr_t p) {
    for (int i = 0; i < maps_n; i++) if (fk_in(p, maps[i].base, maps[i].size)) return i;
    return -1;
}
static int fk_find_global(uintptr_t p) {
    for (int i = 0; i < globals_n; i++) if (fk_in(p, globals[i].base, globals[i].size)) return i;
    return -1;
}
static int fk_find_resv(uintptr_t p) {
    for (int i = 0; i < resvs_n; i++) if (fk_in(p, resvs[i].base, resvs[i].size)) return i;
    return -1;
}
static fk_handle_t *fk_handle(CUmemGenericAllocationHandle h) {
    if (h == 0 || h > (CUmemGenericAllocationHandle)handles_n) return NULL;
    fk_handle_t *x = &handles[h - 1];
    return x->used ? x : NULL;
}

/* End of the accessible device region holding p, or 0 if p is not device memory.
 * need_access: VMM mappings count only once cuMemSetAccess made them accessible. */
static uintptr_t fk_region_end(uintptr_t p, int need_access) {
    int i;
    if ((i = fk_find_plain(p)) >= 0) return plains[i].base + plains[i].size;
    if ((i = fk_find_global(p)) >= 0) return globals[i].base + globals[i].size;
    if ((i = fk_find_map(p)) >= 0) {
        if (need_access) {
            int any = 0;
            for (int d = 0; d < FK_MAX_DEVICES; d++) any |= maps[i].access[d];
            if (!any) return 0;
        }
        return maps[i].base + maps[i].size;
    }
    return 0;
}

/* 1 if [p, p+n) is device memory throughout (may span several mappings: a seam). */
static int fk_covered(uintptr_t p, size_t n, int need_access) {
    uintptr_t end = p + n;
    if (end < p) return 0;
    while (p < end) {
        uintptr_t e = fk_region_end(p, need_access);
        if (!e) return 0;
        p = e;
    }
    return 1;
}

static void fk_handle_destroy(int idx) {
    fk_handle_t *h = &handles[idx];
    close(h->fd);
    if (!h->imported) fk_mem_uncharge(h->size);
    memset(h, 0, sizeof *h);
    while (handles_n && !handles[handles_n - 1].used) handles_n--;
}

void fk_register_global(void *p, size_t n, int device);
void fk_unregister_global(void *p);

void fk_register_global(void *p, size_t n, int device) {
    fk_lock();
    (void)FK_PUSH(globals, ((fk_global_t){ (uintptr_t)p, n, device }));
    fk_unlock();
}
void fk_unregister_global(void *p) {
    fk_lock();
    int i = fk_find_global((uintptr_t)p);
    if (i >= 0) FK_DEL(globals, i);
    fk_unlock();
}

/* ---- plain memory ---------------------------------------------------------------------- */

CUresult fk_plain_alloc(CUdeviceptr *dptr, size_t size, int device, int kind, int domain) {
    return fk_plain_alloc_in(dptr, size, device, kind, domain, NULL);
}

CUresult fk_plain_alloc_in(CUdeviceptr *dptr, size_t size, int device, int kind, int domain, void *pool) {
    fk_ctx_t *cur = fk_current();
    int own = cur && !cur->primary && !cur->green;
    size_t mapped = (size + 4095) & ~(size_t)4095;
    if (mapped < size) return CUDA_ERROR_OUT_OF_MEMORY;
    fk_lock();
    int over = fk_mem_charge(size);
    fk_unlock();
    if (over) return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    fk_lock();
    if (p == MAP_FAILED ||
        FK_PUSH(plains, ((fk_plain_t){ (uintptr_t)p, size, mapped, device, kind, domain, pool, own }))) {
        fk_mem_uncharge(size);
        fk_unlock();
        if (p != MAP_FAILED) munmap(p, mapped);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (pool) fk_pool_charge(pool, size);
    fk_unlock();
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) {
    FK_ENTER("cuMemAlloc_v2", CUDA_ERROR_INVALID_VALUE);
    if (!dptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    FK_CURRENT(c);
    return fk_plain_alloc(dptr, size, c->device, 0, -1);
}

CUresult fk_plain_free(CUdeviceptr dptr, int kind) {
    uintptr_t p = (uintptr_t)dptr;
    fk_lock();
    int i = fk_find_plain(p);
    if (i < 0 || plains[i].base != p || plains[i].kind != kind) {
        fk_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    fk_plain_t a = plains[i];
    FK_DEL(plains, i);
    fk_mem_uncharge(a.size);
    if (a.pool) fk_pool_discharge(a.pool, a.size);
    munmap((void *)a.base, a.mapped);
    fk_unlock();
    fk_report_if_exiting();
    return CUDA_SUCCESS;
}

void fk_plain_reset_device(int dev) {
    fk_lock();
    for (int i = plains_n - 1; i >= 0; i--) {
        if (plains[i].device != dev || plains[i].own) continue;
        fk_plain_t a = plains[i];
        FK_DEL(plains, i);
        fk_mem_uncharge(a.size);
        if (a.pool) fk_pool_discharge(a.pool, a.size);
        munmap((void *)a.base, a.mapped);
    }
    fk_unlock();
}

int fk_plain_set_domain(CUdeviceptr dptr, size_t size, int domain) {
    fk_lock();
    int i = fk_find_plain((uintptr_t)dptr), ok = i >= 0 && plains[i].kind == 2 && size <= plains[i].size;
    if (ok) plains[i].domain = domain;
    fk_unlock();
    return ok ? 0 : -1;
}

/* Rows rounded to 512 bytes; remembered as pitched memory (fakecuda_alloc_kind). */
FAKE_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                     unsigned int elem) {
    fk_setup();
    if (!fk.initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!dptr || !pitch || width == 0 || height == 0 || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    fk_ctx_t *c = fk_current();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    size_t p = (width + 511) & ~(size_t)511;
    if (p < width || height > (size_t)-1 / p) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = fk_plain_alloc(dptr, p * height, c->device, 3, -1);
    if (r == CUDA_SUCCESS) *pitch = p;
    return r;
}

FAKE_API CUresult cuMemFree_v2(CUdeviceptr dptr) {
    FK_ENTER("cuMemFree_v2", CUDA_ERROR_INVALID_VALUE);
    if (dptr == 0) return CUDA_SUCCESS;
    uintptr_t p = (uintptr_t)dptr;
    fk_lock();
    int i = fk_find_plain(p);
    if (i < 0 || plains[i].base != p) {   /* VMM, interior, or unknown: as the real driver */
        fk_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    fk_plain_t a = plains[i];
    FK_DEL(plains, i);
    fk_mem_uncharge(a.size);
    if (a.pool) fk_pool_discharge(a.pool, a.size);
    munmap((void *)a.base, a.mapped);
    fk_unlock();
    fk_report_if_exiting();
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
    FK_ENTER("cuMemGetAddressRange_v2", CUDA_ERROR_INVALID_VALUE);
    uintptr_t p = (uintptr_t)dptr, base = 0;
    size_t size = 0;
    int i;
    fk_lock();
    if ((i = fk_find_plain(p)) >= 0) { base = plains[i].base; size = plains[i].size; }
    else if ((i = fk_find_map(p)) >= 0) { base = maps[i].base; size = maps[i].size; }
    else if ((i = fk_find_global(p)) >= 0) { base = globals[i].base; size = globals[i].size; }
    fk_unlock();
    if (!size) return CUDA_ERROR_NOT_FOUND;
    if (pbase) *pbase = (CUdeviceptr)base;
    if (psize) *psize = size;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemGetInfo_v2(size_t *freeb, size_t *total) {
    FK_ENTER("cuMemGetInfo_v2", CUDA_ERROR_INVALID_VALUE);
    FK_CURRENT(c_);
    (void)c_;
    size_t t = fk.mem_limit ? fk.mem_limit : FK_DEFAULT_TOTAL;
    fk_lock();
    size_t used = fk.mem_used;
    fk_unlock();
    if (freeb) *freeb = used < t ? t - used : 0;
    if (total) *total = t;
    return CUDA_SUCCESS;
}

/* ---- copies ---------------------------------------------------------------------------- */

static CUresult fk_copy(void *dst, const void *src, size_t n, int dst_dev, int src_dev) {
    if (n == 0) return CUDA_SUCCESS;
    fk_lock();
    int ok = (!dst_dev || fk_covered((uintptr_t)dst, n, 1)) &&
             (!src_dev || fk_covered((uintptr_t)src, n, 1));
    fk_unlock();
    if (!ok) return CUDA_ERROR_INVALID_VALUE;
    memmove(dst, src, n);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    FK_ENTER("cuMemcpyHtoD_v2", CUDA_ERROR_INVALID_VALUE);
    CUresult r = fk_legacy_work();
    return r ? r : fk_copy((void *)(uintptr_t)dst, src, n, 1, 0);
}
/* Stream-ordered copy: the fake has no asynchrony, so it completes at once. */
static CUresult fk_copy_async(CUdeviceptr dst, const void *src, size_t n, CUstream s, int pt) {
    fk_ctx_t *c;
    CUresult r = fk_stream_ctx(s, pt, &c);
    if (r == CUDA_SUCCESS && fk_is_legacy(s, pt)) r = fk_legacy_work();
    if (r != CUDA_SUCCESS) return r;
    return fk_copy((void *)(uintptr_t)dst, src, n, 1, 0);
}
FAKE_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    FK_ENTER("cuMemcpyHtoDAsync_v2", CUDA_ERROR_INVALID_VALUE);
    return fk_copy_async(dst, src, n, s, 0);
}
FAKE_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    FK_ENTER("cuMemcpyHtoDAsync_v2_ptsz", CUDA_ERROR_INVALID_VALUE);
    return fk_copy_async(dst, src, n, s, 1);
}
FAKE_API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    FK_ENTER("cuMemcpyDtoH_v2", CUDA_ERROR_INVALID_VALUE);
    CUresult r = fk_legacy_work();
    return r ? r : fk_copy(dst, (const void *)(uintptr_t)src, n, 0, 1);
}
/* The per-thread default stream is not usable in a green context (fk_stream_ctx). */
static CUresult fk_ptds_ok(void) {
    fk_ctx_t *c = fk_current();
    return c && c->green ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}
FAKE_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n) {
    FK_ENTER("cuMemcpyHtoD_v2_ptds", CUDA_ERROR_INVALID_VALUE);
    CUresult r = fk_ptds_ok();
    return r ? r : fk_copy((void *)(uintptr_t)dst, src, n, 1, 0);
}
FAKE_API CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n) {
    FK_ENTER("cuMemcpyDtoH_v2_ptds", CUDA_ERROR_INVALID_VALUE);
    CUresult r = fk_ptds_ok();
    return r ? r : fk_copy(dst, (const void *)(uintptr_t)src, n, 0, 1);
}
/* Unified addressing: either side may be host or device memory; a plain memmove. */
FAKE_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    FK_ENTER("cuMemcpy", CUDA_ERROR_INVALID_VALUE);
    if (n && (!dst || !src)) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fk_legacy_work();
    if (r != CUDA_SUCCESS) return r;
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
    FK_ENTER("cuMemsetD8_v2", CUDA_ERROR_INVALID_VALUE);
    CUresult r = fk_legacy_work();
    if (r != CUDA_SUCCESS) return r;
    fk_lock();
    int ok = n == 0 || fk_covered((uintptr_t)dst, n, 1);
    fk_unlock();
    if (!ok) return CUDA_ERROR_INVALID_VALUE;
    memset((void *)(uintptr_t)dst, v, n);
    return CUDA_SUCCESS;
}

/* ---- IPC and pointer attributes -------------------------------------------------------- */

FAKE_API CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr dptr) {
    FK_ENTER("cuIpcGetMemHandle", CUDA_ERROR_INVALID_VALUE);
    if (!h) return CUDA_ERROR_INVALID_VALUE;
    fk_lock();
    int i = fk_find_plain((uintptr_t)dptr);
    fk_plain_t a = i >= 0 ? plains[i] : (fk_plain_t){ 0, 0, 0, 0, 0, -1, NULL, 0 };
    fk_unlock();
    if (i < 0) return CUDA_ERROR_INVALID_VALUE;   /* VMM memory or unknown: as the real driver */
    memset(h->reserved, 0, sizeof h->reserved);
    snprintf(h->reserved, 16, "FAKEIPC%d", (int)getpid());
    memcpy(h->reserved + 16, &a.base, sizeof a.base);
    memcpy(h->reserved + 24, &a.size, sizeof a.size);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr dptr);

/* Several attributes at once; like the driver, an unsupported one leaves its slot alone. */
FAKE_API CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data, CUdeviceptr dptr) {
    FK_ENTER("cuPointerGetAttributes", CUDA_ERROR_INVALID_VALUE);
    if (!attrs || !data) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < n; i++) {
        CUresult r = cuPointerGetAttribute(data[i], attrs[i], dptr);
        if (r != CUDA_SUCCESS && r != CUDA_ERROR_INVALID_VALUE) return r;
        if (r == CUDA_ERROR_INVALID_VALUE && i == 0) return r;
    }
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr dptr) {
    FK_ENTER("cuPointerGetAttribute", CUDA_ERROR_INVALID_VALUE);
    if (!data) return CUDA_ERROR_INVALID_VALUE;
    uintptr_t p = (uintptr_t)dptr, base = 0;
    size_t size = 0;
    int dev = -1, i, vmm = 0, home = -1;
    void *pool = NULL;
    fk_lock();
    if ((i = fk_find_plain(p)) >= 0) {
        base = plains[i].base; size = plains[i].size; dev = plains[i].device; pool = plains[i].pool;
        if (plains[i].kind == 1) home = plains[i].domain;     /* a localized pool's memory */
    }
    else if ((i = fk_find_map(p)) >= 0) {
        base = maps[i].base; size = maps[i].size; dev = handles[maps[i].handle].device; vmm = 1;
        home = handles[maps[i].handle].domain;
    } else if ((i = fk_find_global(p)) >= 0) {
        base = globals[i].base; size = globals[i].size; dev = globals[i].device;
    }
    fk_unlock();
    if (dev < 0) return CUDA_ERROR_INVALID_VALUE;
    if (dev >= fk.ndevices) dev = 0;   /* imported from an MPS-derived device */
    switch ((int)attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = (CUcontext)&fk.primary[dev]; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned int *)data = CU_MEMORYTYPE_DEVICE; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = dptr; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = dev; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = (CUdeviceptr)base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = size; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned int *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *(unsigned int *)data = 1; break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: *(unsigned int *)data = !vmm; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = (unsigned long long)base; break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *(CUmemoryPool *)data = (CUmemoryPool)pool; break;
    case 22:   /* LOCALITY_DOMAIN_ORDINAL (13.4): a driver that knows domains knows it */
        if (fk.ndomains <= 0 || fk.readback_mode == 3) return CUDA_ERROR_INVALID_VALUE;
        *(int *)data = home;
        break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* ---- VMM ------------------------------------------------------------------------------- */

/* Validate an allocation property; on success *dev and *domain say where it lives. */
static CUresult fk_check_prop(const CUmemAllocationProp *prop, int *dev, int *domain) {
    if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
    int id = prop->location.id;
    if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        if (!fk_valid_device(id)) return CUDA_ERROR_INVALID_DEVICE;
        *dev = id;
        *domain = fk.mps_mode ? id : -1;   /* MLOPart: derived device d = domain d */
        return CUDA_SUCCESS;
    }
    if ((int)prop->location.type == 6 && fk.ndomains > 0) {   /* LOCALITY_DOMAIN (13.4) */
        int d = id & 0xff, dom = id >> 8;
        if (!fk_valid_device(d) || dom < 0 || dom >= fk.ndomains) return CUDA_ERROR_INVALID_VALUE;
        *dev = d;
        *domain = dom;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

FAKE_API CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
                                                CUmemAllocationGranularity_flags flags) {
    FK_ENTER("cuMemGetAllocationGranularity", CUDA_ERROR_INVALID_VALUE);
    int dev, dom;
    if (!g || (flags != CU_MEM_ALLOC_GRANULARITY_MINIMUM && flags != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fk_check_prop(prop, &dev, &dom);
    if (r != CUDA_SUCCESS) return r;
    *g = FK_GRANULARITY;
    return CUDA_SUCCESS;
}

/* memfd name carries the home so an importing process (MLOPart helper -> shim) knows it. */
static int fk_memfd(size_t size, int dev, int domain) {
    char name[64];
    snprintf(name, sizeof name, "fakecuda:dev=%d:dom=%d", dev, domain);
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) return -1;
    if (ftruncate(fd, (off_t)size) != 0) { close(fd); return -1; }
    return fd;
}

static CUresult fk_add_handle(fk_handle_t h, CUmemGenericAllocationHandle *out) {
    int idx = -1;
    for (int i = 0; i < handles_n; i++) if (!handles[i].used) { idx = i; break; }
    if (idx < 0) {
        if (FK_PUSH(handles, h)) return CUDA_ERROR_OUT_OF_MEMORY;
        idx = handles_n - 1;
    } else {
        handles[idx] = h;
    }
    *out = (CUmemGenericAllocationHandle)idx + 1;
    return CUDA_SUCCESS;
}

/* ---- simulated cost of the VMM calls ------------------------------------------------------
 * A model of the reference study's B300/B200 figures (seed 001, Tables 6 and 7), in simulated
 * nanoseconds added per successful call (fakecuda_sim_ns): a fixed cost per call plus a small
 * per-MiB term, and for a localized (type-6) handle larger than the driver's 32 MiB
 * contiguity stride (PMA_LOCALIZED_MEMORY_ALLOC_STRIDE) a cost per 2 MiB page of the whole
 * handle in cuMemCreate and in cuMemRelease, the page-at-a-time mapping loop the study traced.
 * It reproduces Table 7's cuMemCreate (20.4 us at 2 MiB, 26 us at 32 MiB, ~5.75 ms at 1 GiB)
 * and Table 6's cycle (ordinary ~123 us at 2 MiB and ~0.87 ms at 1 GiB; localized ~3.6x at
 * 34 MiB, ~13x at 1 GiB) within a few percent. No call sleeps: only the counter moves. */
#define kSimStride   ((size_t)32 << 20)
#define kSimPageNs   10800u      /* cuMemCreate, per 2 MiB page above the stride */
#define kSimRelPage  10400u      /* cuMemRelease, the same */
static _Atomic unsigned long long fk_sim;
static void fk_sim_add(unsigned long long ns) { fk_sim += ns; }
static unsigned long long fk_sim_mib(size_t bytes, unsigned ns_per_mib) { return (bytes >> 20) * ns_per_mib; }
FAKE_API unsigned long long fakecuda_sim_ns(void) { return fk_sim; }

FAKE_API CUresult cuMemCreate(CUmemGenericAllocationHandle *out, size_t size,
                              const CUmemAllocationProp *prop, unsigned long long flags) {
    FK_ENTER("cuMemCreate", CUDA_ERROR_OUT_OF_MEMORY);
    int dev, domain;
    if (!out || flags != 0 || size == 0 || size % FK_GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fk_check_prop(prop, &dev, &domain);
    if (r != CUDA_SUCCESS) return r;
    fk_lock();
    int over = fk_mem_charge(size);
    fk_unlock();
    if (over) return CUDA_ERROR_OUT_OF_MEMORY;
    int fd = fk_memfd(size, dev, domain);
    fk_lock();
    /* FAKE_CUDA_READBACK: home a localized handle elsewhere, or nowhere. */
    if ((int)prop->location.type == 6 && size > FK_GRANULARITY && fk.readback_mode &&
        fk.readback_mode != 3 && (++fk.readback_seen == fk.readback_nth || !fk.readback_nth))
        domain = fk.readback_mode == 1 ? (domain + 1) % fk.ndomains : -1;
    if (fd < 0) r = CUDA_ERROR_OUT_OF_MEMORY;
    else r = fk_add_handle((fk_handle_t){ .used = 1, .fd = fd, .device = dev, .domain = domain,
                                          .size = size,
                                          .exportable = !!(prop->requestedHandleTypes &
                                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) },
                           out);
    if (r != CUDA_SUCCESS) {
        fk_mem_uncharge(size);
        if (fd >= 0) close(fd);
    }
    fk_unlock();
    if (r == CUDA_SUCCESS) {
        int loc = (int)prop->location.type == 6;
        fk_sim_add(loc ? 20000 + fk_sim_mib(size, 200) : 9000 + fk_sim_mib(size, 130));
        if (loc && size > kSimStride) fk_sim_add((unsigned long long)(size / FK_GRANULARITY) * kSimPageNs);
    }
    return r;
}

FAKE_API CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
    FK_ENTER("cuMemRelease", CUDA_ERROR_INVALID_VALUE);
    fk_lock();
    fk_handle_t *x = fk_handle(h);
    if (!x || x->released) { fk_unlock(); return CUDA_ERROR_INVALID_VALUE; }
    x->released = 1;
    int loc = x->device >= 0 && x->domain >= 0 && !fk.mps_mode, big = x->size > kSimStride;
    size_t bytes = x->size;
    if (x->refs == 0) fk_handle_destroy((int)h - 1);
    fk_unlock();
    fk_sim_add(20000 + fk_sim_mib(bytes, 440) + (loc ? 10000 : 0));
    if (loc && big) fk_sim_add((unsigned long long)(bytes / FK_GRANULARITY) * kSimRelPage);
    fk_report_if_exiting();
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                                      unsigned long long flags) {
    FK_ENTER("cuMemAddressReserve", CUDA_ERROR_OUT_OF_MEMORY);
    (void)addr;   /* a hint only */
    if (!ptr || size == 0 || size % FK_GRANULARITY || flags != 0 || (align & (align - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    if (align < FK_GRANULARITY) align = FK_GRANULARITY;
    size_t total = size + align;
    char *p = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t a = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
    if (a > (uintptr_t)p) munmap(p, a - (uintptr_t)p);
    if ((uintptr_t)p + total > a + size) munmap((void *)(a + size), (uintptr_t)p + total - (a + size));
    fk_lock();
    int bad = FK_PUSH(resvs, ((fk_resv_t){ a, size }));
    fk_unlock();
    if (bad) { munmap((void *)a, size); return CUDA_ERROR_OUT_OF_MEMORY; }
    *ptr = (CUdeviceptr)a;
    fk_sim_add(10000);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    FK_ENTER("cuMemAddressFree", CUDA_ERROR_INVALID_VALUE);
    uintptr_t p = (uintptr_t)ptr;
    fk_lock();
    int i = fk_find_resv(p);
    CUresult r = CUDA_SUCCESS;
    if (i < 0 || resvs[i].base != p || resvs[i].size != size) r = CUDA_ERROR_INVALID_VALUE;
    for (int m = 0; r == CUDA_SUCCESS && m < maps_n; m++)
        if (fk_in(maps[m].base, p, size)) r = CUDA_ERROR_INVALID_VALUE;   /* still mapped */
    if (r == CUDA_SUCCESS) {
        munmap((void *)p, size);
        FK_DEL(resvs, i);
    }
    fk_unlock();
    fk_report_if_exiting();
    if (r == CUDA_SUCCESS) fk_sim_add(13000);
    return r;
}

FAKE_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                           unsigned long long flags) {
    FK_ENTER("cuMemMap", CUDA_ERROR_INVALID_VALUE);
    uintptr_t p = (uintptr_t)ptr;
    if (flags != 0 || size == 0 || p % FK_GRANULARITY || offset % FK_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    fk_lock();
    fk_handle_t *x = fk_handle(h);
    int ri = fk_find_resv(p);
    if (!x || x->released || offset >= x->size || size != x->size - offset) r = CUDA_ERROR_INVALID_VALUE;
    else if (ri < 0 || p + size < p || p + size > resvs[ri].base + resvs[ri].size) r = CUDA_ERROR_INVALID_VALUE;
    for (int m = 0; r == CUDA_SUCCESS && m < maps_n; m++)
        if (maps[m].base < p + size && p < maps[m].base + maps[m].size) r = CUDA_ERROR_ALREADY_MAPPED;
    if (r == CUDA_SUCCESS) {
        void *q = mmap((void *)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, x->fd, (off_t)offset);
        if (q == MAP_FAILED) r = CUDA_ERROR_OUT_OF_MEMORY;
        else if (FK_PUSH(maps, ((fk_map_t){ .base = p, .size = size, .offset = offset,
                                             .handle = (int)h - 1 }))) {
            mmap((void *)p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            x->refs++;
        }
    }
    fk_unlock();
    if (r == CUDA_SUCCESS) fk_sim_add(15000 + fk_sim_mib(size, 30));
    return r;
}

FAKE_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    FK_ENTER("cuMemUnmap", CUDA_ERROR_INVALID_VALUE);
    uintptr_t p = (uintptr_t)ptr;
    CUresult r = CUDA_SUCCESS;
    fk_lock();
    if (size == 0 || !fk_covered(p, size, 0)) r = CUDA_ERROR_INVALID_VALUE;
    for (int m = 0; r == CUDA_SUCCESS && m < maps_n; m++)   /* no partial unmap of a mapping */
        if (maps[m].base < p + size && p < maps[m].base + maps[m].size &&
            (maps[m].base < p || maps[m].base + maps[m].size > p + size))
            r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (fk_find_plain(p) >= 0 || fk_find_global(p) >= 0)) r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        for (int m = maps_n - 1; m >= 0; m--) {
            if (!fk_in(maps[m].base, p, size)) continue;
            mmap((void *)maps[m].base, maps[m].size, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
            int hi = maps[m].handle;
            FK_DEL(maps, m);
            if (--handles[hi].refs == 0 && handles[hi].released) fk_handle_destroy(hi);
        }
    }
    fk_unlock();
    fk_report_if_exiting();
    if (r == CUDA_SUCCESS) fk_sim_add(15000 + fk_sim_mib(size, 30));
    return r;
}

FAKE_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
    FK_ENTER("cuMemSetAccess", CUDA_ERROR_INVALID_VALUE);
    uintptr_t p = (uintptr_t)ptr;
    if (!desc || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
    for (size_t k = 0; k < count; k++) {
        if (desc[k].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !fk_valid_device(desc[k].location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        if (desc[k].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc[k].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            desc[k].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult r = CUDA_SUCCESS;
    fk_lock();
    /* Every byte must be VMM-mapped (plain memory inside the range is an error too). */
    for (uintptr_t q = p; r == CUDA_SUCCESS && q < p + size;) {
        int m = fk_find_map(q);
        if (m < 0) r = CUDA_ERROR_INVALID_VALUE;
        else q = maps[m].base + maps[m].size;
    }
    if (r == CUDA_SUCCESS) {
        for (int m = 0; m < maps_n; m++) {
            if (!(maps[m].base < p + size && p < maps[m].base + maps[m].size)) continue;
            for (size_t k = 0; k < count; k++)
                maps[m].access[desc[k].location.id] = (unsigned char)desc[k].flags;
            int any = 0;
            for (int d = 0; d < FK_MAX_DEVICES; d++) any |= maps[m].access[d];
            mprotect((void *)maps[m].base, maps[m].size, any ? PROT_READ | PROT_WRITE : PROT_NONE);
        }
    }
    fk_unlock();
    if (r == CUDA_SUCCESS) fk_sim_add(40000 + fk_sim_mib(size, 100));
    return r;
}

FAKE_API CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *loc, CUdeviceptr ptr) {
    FK_ENTER("cuMemGetAccess", CUDA_ERROR_INVALID_VALUE);
    if (!flags || !loc || loc->type != CU_MEM_LOCATION_TYPE_DEVICE || !fk_valid_device(loc->id))
        return CUDA_ERROR_INVALID_VALUE;
    fk_lock();
    int m = fk_find_map((uintptr_t)ptr);
    if (m >= 0) *flags = maps[m].access[loc->id];
    fk_unlock();
    return m >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FAKE_API CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h,
                                               CUmemAllocationHandleType type, unsigned long long flags) {
    FK_ENTER("cuMemExportToShareableHandle", CUDA_ERROR_INVALID_VALUE);
    if (!out || flags != 0 || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    fk_lock();
    fk_handle_t *x = fk_handle(h);
    struct stat st;
    int fd = -1;
    if (!x || !x->exportable) r = CUDA_ERROR_INVALID_VALUE;
    else if ((fd = fcntl(x->fd, F_DUPFD_CLOEXEC, 0)) < 0 || fstat(fd, &st) != 0) r = CUDA_ERROR_OUT_OF_MEMORY;
    else if (FK_PUSH(exports, ((fk_export_t){ fd, st.st_dev, st.st_ino }))) r = CUDA_ERROR_OUT_OF_MEMORY;
    fk_unlock();
    if (r != CUDA_SUCCESS) {
        if (fd >= 0) close(fd);
        return r;
    }
    *(int *)out = fd;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *out, void *os,
                                                 CUmemAllocationHandleType type) {
    FK_ENTER("cuMemImportFromShareableHandle", CUDA_ERROR_INVALID_VALUE);
    if (!out || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
    int src = (int)(intptr_t)os;
    struct stat st;
    if (fstat(src, &st) != 0 || st.st_size <= 0 || st.st_size % (off_t)FK_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    char link[64], name[256];
    snprintf(link, sizeof link, "/proc/self/fd/%d", src);
    ssize_t n = readlink(link, name, sizeof name - 1);
    int dev = 0, dom = -1;
    if (n > 0) {
        name[n] = 0;
        const char *s = strstr(name, "fakecuda:");
        if (!s || sscanf(s, "fakecuda:dev=%d:dom=%d", &dev, &dom) != 2) return CUDA_ERROR_INVALID_VALUE;
    }
    int fd = fcntl(src, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    fk_lock();
    CUresult r = fk_add_handle((fk_handle_t){ .used = 1, .fd = fd, .device = dev, .domain = dom,
                                              .size = (size_t)st.st_size, .exportable = 1,
                                              .imported = 1 }, out);
    fk_unlock();
    if (r != CUDA_SUCCESS) close(fd);
    return r;
}

/* ---- test hooks ------------------------------------------------------------------------ */

FAKE_API void fakecuda_counts(int out[5]) {
    fk_lock();
    int live = 0;
    for (int i = 0; i < handles_n; i++) live += handles[i].used;
    out[0] = plains_n;
    out[1] = live;
    out[2] = resvs_n;
    out[3] = maps_n;
    /* An exported fd is live while the same descriptor still names the same memfd. */
    for (int i = exports_n - 1; i >= 0; i--) {
        struct stat st;
        if (fstat(exports[i].fd, &st) != 0 || st.st_dev != exports[i].dev || st.st_ino != exports[i].ino)
            FK_DEL(exports, i);
    }
    out[4] = exports_n;
    fk_unlock();
}

FAKE_API int fakecuda_domain_of(const void *ptr) {
    uintptr_t p = (uintptr_t)ptr;
    int r = -2, i;
    fk_lock();
    if ((i = fk_find_map(p)) >= 0) r = handles[maps[i].handle].domain;
    else if ((i = fk_find_plain(p)) >= 0) r = plains[i].domain;
    else if (fk_find_global(p) >= 0) r = -1;
    fk_unlock();
    return r;
}

FAKE_API int fakecuda_device_of(const void *ptr) {
    uintptr_t p = (uintptr_t)ptr;
    int r = -2, i;
    fk_lock();
    if ((i = fk_find_map(p)) >= 0) r = handles[maps[i].handle].device;
    else if ((i = fk_find_plain(p)) >= 0) r = plains[i].device;
    else if ((i = fk_find_global(p)) >= 0) r = globals[i].device;
    fk_unlock();
    return r;
}

FAKE_API int fakecuda_access_of(const void *ptr, int device) {
    uintptr_t p = (uintptr_t)ptr;
    int r = -2, i;
    if (device < 0 || device >= FK_MAX_DEVICES) return -2;
    fk_lock();
    if ((i = fk_find_map(p)) >= 0) r = maps[i].access[device];
    else if ((i = fk_find_plain(p)) >= 0) {
        int owner = plains[i].device;
        if (device == owner) r = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        else if (plains[i].kind == 1) r = fk_pool_access(plains[i].pool, device);   /* the pool's, not the peer's */
        else r = fk.peer[device][owner] ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : 0;
    }
    fk_unlock();
    return r;
}

FAKE_API int fakecuda_alloc_kind(const void *ptr) {
    uintptr_t p = (uintptr_t)ptr;
    int r = -2, i;
    fk_lock();
    if ((i = fk_find_plain(p)) >= 0) r = plains[i].kind;
    else if (fk_find_map(p) >= 0) r = 4;
    fk_unlock();
    return r;
}
