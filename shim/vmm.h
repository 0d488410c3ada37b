/* vmm.h — build and tear down one localized range: one reserved VA range, one physical
 * handle per slice (from the device's backend), one access grant. Freed ranges are kept
 * whole by the pool (pool.h) and handed out again without any driver call.
 *
 * Thread-safety: reentrant; touches only the pool (locked internally) and the driver. */
#ifndef LDSHIM_VMM_H
#define LDSHIM_VMM_H

#include "shim/device.h"
#include "shim/registry.h"

/* Lay out `size` bytes as `nslices` slices (rounded to the granularity) and create them,
 * or take a kept range of the same shape from the pool. slice i is homed in domain_of[i].
 * On success fills *r and returns CUDA_SUCCESS; on failure everything created is undone
 * and `why` says what failed. */
CUresult ld_vmm_create(const ld_driver_t *d, ld_device_t *dv, size_t size, int nslices,
                       const int *domain_of, ld_range_t *r, char *why, size_t n);

/* Give a freed range to the pool, or tear it down when the pool does not keep it. */
void ld_vmm_release(const ld_driver_t *d, const ld_range_t *r);

/* Give the devices of `mask` (bit d: device d) read-write access to the range, one driver
 * call for those it lacks; on success they join r->access_mask. */
CUresult ld_vmm_grant(const ld_driver_t *d, ld_range_t *r, unsigned long long mask);

/* Unmap, release the handles, free the VA. */
void ld_vmm_teardown(const ld_driver_t *d, const ld_range_t *r);

#endif
