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
 * The shim's pools follow the device's default pool, whose settings are the program's: a
 * new pool copies its release threshold, reuse flags and other devices' access, and every
 * later cuMemPoolSetAccess / cuMemPoolSetAttribute on the default pool is applied to them
 * too (PyTorch's cudaMallocAsync backend grants peers access this way: without it a peer
 * would fault reading placed memory). cuMemPoolTrimTo of the default pool trims them with
 * what it left of the bytes to keep; cuMemPoolGetAttribute of the default pool's used and
 * reserved bytes (and their high watermarks) adds theirs, so the program sees the totals a
 * stock run would. A pool that loses the race to be a device's is destroyed; the pools are
 * destroyed at exit (an atexit handler registered with the first) and before the device is
 * reset (cuDevicePrimaryCtxReset); a forked child forgets them without a driver call.
 *
 * The emulated backend (Hopper) counts the request as placed with no physical effect (the
 * report's per-api "emulated" count); mlopart and no backend pass through with a fallback
 * reason. Split placement is cuMemAlloc's only: other apis pass through. A failure of the
 * placed call falls back to the program's own call (a pitched request its own
 * cuMemAllocPitch), so the program gets what a stock run would have given it. On
 * out-of-memory only the failing driver call is repeated, once, after the shim's range pool
 * was trimmed: a request is decided and counted once, whatever its retries.
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
typedef CUresult (*ld_pool_access_fn)(CUmemoryPool, const CUmemAccessDesc *, size_t);
typedef CUresult (*ld_pool_attr_fn)(CUmemoryPool, CUmemPool_attribute, void *);
typedef CUresult (*ld_pool_trim_fn)(CUmemoryPool, size_t);

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

/* The program's calls on a memory pool (`real`: libcuda's entry): when `pool` is a device's
 * default pool the shim's pools of that device follow it (see above). */
CUresult ld_place_pool_set_access(const ld_driver_t *d, ld_pool_access_fn real, CUmemoryPool pool,
                                  const CUmemAccessDesc *map, size_t count);
CUresult ld_place_pool_set_attribute(const ld_driver_t *d, ld_pool_attr_fn real, CUmemoryPool pool,
                                     CUmemPool_attribute attr, void *value);
CUresult ld_place_pool_get_attribute(const ld_driver_t *d, ld_pool_attr_fn real, CUmemoryPool pool,
                                     CUmemPool_attribute attr, void *value);
CUresult ld_place_pool_trim_to(const ld_driver_t *d, ld_pool_trim_fn real, CUmemoryPool pool, size_t keep);

/* Device `dev` is being reset: destroy the shim's pools of it. */
void ld_place_forget_device(const ld_driver_t *d, int dev);

/* Forked child: forget the shim's pools (no driver call). */
void ld_place_reset(void);

#endif
