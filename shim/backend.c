/* backend.c — the two in-process backends: native (CUDA 13.4 locality-domain location
 * type) and emulated (ordinary device memory per slice). MLOPart lives in
 * backend_mlopart.c. */
#include "shim/backend.h"

#include <stdio.h>
#include <string.h>

static void fill_prop(CUmemAllocationProp *p, CUmemLocationType type, int id) {
    memset(p, 0, sizeof *p);
    p->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p->location.type = type;
    p->location.id = id;
}

/* --- native ------------------------------------------------------------------------ */

static CUresult native_create(const ld_driver_t *d, CUdevice dev, int domain, size_t bytes,
                              CUmemGenericAllocationHandle *out, char *why, size_t n) {
    CUmemAllocationProp p;
    fill_prop(&p, LD_CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN, LD_LOCALITY_LOCATION_ID(dev, domain));
    CUmemGenericAllocationHandle h;
    CUresult r = d->pfn_cuMemCreate(&h, bytes, &p, 0);
    if (r != CUDA_SUCCESS) {
        snprintf(why, n, "cuMemCreate(locality domain %d): %s", domain, ld_cu_errname(r));
        return r;
    }
    *out = h;
    return CUDA_SUCCESS;
}

static int native_available(const ld_driver_t *d, CUdevice dev, int ndomains, char *why, size_t n) {
    if (ld_native_domain_count(d, dev) < 2) {
        snprintf(why, n, "driver reports fewer than 2 locality domains");
        return -1;
    }
    /* The attribute alone does not prove the location type works: create one page in
     * every domain and release it. */
    size_t gran = 2u << 20;
    CUmemAllocationProp p;
    fill_prop(&p, CU_MEM_LOCATION_TYPE_DEVICE, dev);
    if (d->pfn_cuMemGetAllocationGranularity) d->pfn_cuMemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    for (int dom = 0; dom < ndomains; dom++) {
        CUmemGenericAllocationHandle h;
        if (native_create(d, dev, dom, gran, &h, why, n) != CUDA_SUCCESS) return -1;
        if (d->pfn_cuMemRelease(h) != CUDA_SUCCESS) d->pfn_cuMemRelease(h);   /* once more: never leak it */
    }
    return 0;
}

const ld_backend_ops_t ld_backend_native = {
    .kind = LD_BACKEND_NATIVE, .name = "native", .available = native_available,
    .create = native_create, .localizes = 1, .verifies_home = 1, .shutdown = NULL,
};

/* --- emulated ------------------------------------------------------------------------ */

static CUresult emulated_create(const ld_driver_t *d, CUdevice dev, int domain, size_t bytes,
                                CUmemGenericAllocationHandle *out, char *why, size_t n) {
    (void)domain;
    CUmemAllocationProp p;
    fill_prop(&p, CU_MEM_LOCATION_TYPE_DEVICE, dev);
    CUmemGenericAllocationHandle h;
    CUresult r = d->pfn_cuMemCreate(&h, bytes, &p, 0);
    if (r != CUDA_SUCCESS) {
        snprintf(why, n, "cuMemCreate: %s", ld_cu_errname(r));
        return r;
    }
    *out = h;
    return CUDA_SUCCESS;
}

static int emulated_available(const ld_driver_t *d, CUdevice dev, int ndomains, char *why, size_t n) {
    (void)ndomains;
    int vmm = 0;
    if (d->pfn_cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) != CUDA_SUCCESS || !vmm) {
        snprintf(why, n, "no virtual memory management on device %d", dev);
        return -1;
    }
    return 0;
}

const ld_backend_ops_t ld_backend_emulated = {
    .kind = LD_BACKEND_EMULATED, .name = "emulated", .available = emulated_available,
    .create = emulated_create, .localizes = 0, .shutdown = NULL,
};
