/* place.h — single-domain placement for the allocation apis other than cuMemAlloc.
 *
 * A rule (or a study state) may place a request of any api in one locality domain
 * (policy `api = vmm | async | pitch | managed | any`, `placement = domain:N`, or the study
 * states' domain X). cuMemAlloc requests become shim ranges (alloc.c); these are placed the
 * way each api can express it:
 *
 *   cuMemCreate (the program's own VMM handle: PyTorch expandable segments, XLA)
 *       created with the locality-domain location (native backend)
 *   cuMemAllocAsync on the device's default pool (cudaMallocAsync)
 *       allocated from a pool of the shim located in the domain (native backend); the
 *       program's own pools (a current pool it set, cuMemAllocFromPoolAsync) are not moved
 *   cuMemAllocPitch
 *       a shim range (every backend), pitch rounded to 512 bytes
 *   cuMemAllocManaged
 *       preferred location set to the domain with cuMemAdvise (native backend)
 *
 * The emulated backend (Hopper) counts the request as placed with no physical effect (the
 * report's per-api "emulated" count); mlopart and no backend pass through with a fallback
 * reason. Split placement is cuMemAlloc's only: other apis pass through. A failure of the
 * placed call falls back to the program's own call, so the program gets what a stock run
 * would have given it.
 *
 * Thread-safety: every function; no shim lock is held across a driver call. */
#ifndef LDSHIM_PLACE_H
#define LDSHIM_PLACE_H

#include "shim/driver.h"

typedef CUresult (*ld_create_fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                                 unsigned long long);
typedef CUresult (*ld_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*ld_frompool_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef CUresult (*ld_pitch_fn)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
typedef CUresult (*ld_managed_fn)(CUdeviceptr *, size_t, unsigned int);

/* `real` is libcuda's entry of the same api (the variant the program called). `per_thread`:
 * the program called the _ptsz variant. */
CUresult ld_place_create(const ld_driver_t *d, ld_create_fn real, CUmemGenericAllocationHandle *h, size_t n,
                         const CUmemAllocationProp *p, unsigned long long flags);
CUresult ld_place_async(const ld_driver_t *d, ld_async_fn real, CUdeviceptr *dp, size_t n, CUstream s, int per_thread);
CUresult ld_place_from_pool(const ld_driver_t *d, ld_frompool_fn real, CUdeviceptr *dp, size_t n, CUmemoryPool pool,
                            CUstream s);
CUresult ld_place_pitch(const ld_driver_t *d, ld_pitch_fn real, CUdeviceptr *dp, size_t *pitch, size_t w, size_t h,
                        unsigned int esz);
CUresult ld_place_managed(const ld_driver_t *d, ld_managed_fn real, CUdeviceptr *dp, size_t n, unsigned int flags);

/* Forked child: forget the shim's pools (no driver call). */
void ld_place_reset(void);

#endif
