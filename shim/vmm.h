/* vmm.h — the owner of a localized range's life (doc/shim.md, "The life of a range"): one
 * reserved VA range, physical handles of at most a chunk (ld_vmm_chunk) per slice from the
 * device's backend, mapped back to back, one access
 * grant; its registration, free, peer grants, keeping in the pool (pool.h, which hands it
 * out again without any driver call), trimming, teardown with its context and at exit.
 *
 * Thread-safety: reentrant; touches only the pool and the registry (each locked
 * internally) and the driver. */
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

/* ld_vmm_create, then register the range (registry.h) as allocated in `ctx` for policy
 * rule `rule` (-1: the shim's own, the probe's), and grant the peers enabled meanwhile.
 * Everything the shim hands out as a localized range comes from here. On failure nothing
 * is left behind and `why` says what failed. */
CUresult ld_vmm_alloc(const ld_driver_t *d, ld_device_t *dv, CUcontext ctx, int rule, size_t size, int nslices,
                      const int *domain_of, ld_range_t *r, char *why, size_t n);

/* The free of a range ld_vmm_alloc made: unregister the range starting at `base`, wait for
 * its context's work (pushing it when it is not current), then ld_vmm_release. 0, or -1
 * when no registered range starts at `base` (nothing done). */
int ld_vmm_free(const ld_driver_t *d, CUdeviceptr base);

/* A context is going away: unregister every range for which pred(range, arg) holds, wait
 * for `first` (if not NULL) and for each other context those ranges were made in, and tear
 * them down (not into the pool: their context dies). Returns how many there were. */
size_t ld_vmm_teardown_if(const ld_driver_t *d, int (*pred)(const ld_range_t *, void *), void *arg,
                          CUcontext first);

/* Bytes per physical handle of a `slice`-byte slice on dv: LDSHIM_CHUNK, else 32 MiB where
 * memory is localized (native, mlopart) and the whole slice on the emulated backend. */
size_t ld_vmm_chunk(const ld_device_t *dv, size_t slice);

/* Give a freed range to the pool, or tear it down when the pool does not keep it. */
void ld_vmm_release(const ld_driver_t *d, const ld_range_t *r);

/* cuCtxEnablePeerAccess: `accessor` may now access `owner`'s ranges. Remembered for new
 * ranges (device.h), and granted to every live one, one cuMemSetAccess each. */
void ld_vmm_grant_peer(const ld_driver_t *d, int owner, int accessor);

/* Give the devices of `mask` (bit d: device d) read-write access to the range, one driver
 * call for those it lacks; on success they join r->access_mask. */
CUresult ld_vmm_grant(const ld_driver_t *d, ld_range_t *r, unsigned long long mask);

/* Unmap, release the handles, free the VA. */
void ld_vmm_teardown(const ld_driver_t *d, const ld_range_t *r);

/* Tear down what the pool keeps for `dev` (-1: every device); d NULL: forget it without a
 * driver call (tests). Returns the bytes released. */
uint64_t ld_vmm_trim(const ld_driver_t *d, int dev);

/* The read-back of fresh slices (native backend): pieces homed as asked, homed in another
 * domain, not localized (-1), not verifiable (the driver lacks the attribute: trusted), and
 * ranges discarded for it (each such request fell back). */
typedef struct {
    uint64_t right, wrong_domain, not_localized, unverified, discarded;
    uint64_t ranges_created, handles_created;   /* fresh ranges (not pool hits), their handles */
} ld_readback_stats_t;
void ld_vmm_readback_stats(ld_readback_stats_t *out);
void ld_vmm_readback_reset(void);

/* Make a driver allocation call (an expression assigned to `r`); on out-of-memory give back
 * what the pool keeps and make it once more, so kept ranges never cost the program memory.
 * Only the call is repeated: whatever decided and counted the request did so once. */
#define LD_POOL_RETRY_OOM(d, r, call) \
    do { \
        (r) = (call); \
        if ((r) == CUDA_ERROR_OUT_OF_MEMORY && ld_vmm_trim((d), -1)) (r) = (call); \
    } while (0)

#endif
