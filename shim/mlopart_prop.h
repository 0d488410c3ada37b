/* mlopart_prop.h — the allocation properties of MLOPart memory, written once for the three
 * places that create it: the helper (tools/ldshim-mlopart-helper.c, cuMemCreate), the
 * backend (shim/backend_mlopart.c, the granularity of what the helper will create) and the
 * benchmark (bench/mlopart/, the in-process baseline).
 *
 * Pinned device memory of `dev`, exportable as a POSIX file descriptor: the handle type the
 * protocol passes (mlopart_proto.h, ALLOC). Header-only and free of the shim's logger and
 * driver table, which the helper does not link. */
#ifndef LDSHIM_MLOPART_PROP_H
#define LDSHIM_MLOPART_PROP_H

#include <string.h>
#include <cuda.h>

static inline void ld_mlo_alloc_prop(CUmemAllocationProp *p, CUdevice dev) {
    memset(p, 0, sizeof *p);
    p->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p->location.id = dev;
    p->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

#endif
