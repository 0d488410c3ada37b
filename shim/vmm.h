/* vmm.h — build and tear down one localized range: one reserved VA range, one physical
 * handle per slice (from the pool or the device's backend), one access grant.
 *
 * Thread-safety: reentrant; touches only the pool (locked internally) and the driver. */
#ifndef LDSHIM_VMM_H
#define LDSHIM_VMM_H

#include "shim/device.h"
#include "shim/registry.h"

/* Lay out `size` bytes as `nslices` slices (rounded to the granularity) and create them.
 * slice i is homed in domain_of[i]. On success fills *r (base, sizes, handles) and returns
 * CUDA_SUCCESS; on failure everything created is undone and `why` says what failed. */
CUresult ld_vmm_create(const ld_driver_t *d, ld_device_t *dv, size_t size, int nslices,
                       const int *domain_of, ld_range_t *r, char *why, size_t n);

/* Unmap, return handles to the pool (or release), free the VA. */
void ld_vmm_destroy(const ld_driver_t *d, const ld_range_t *r);

#endif
