/* pool.h — freed localized ranges kept whole (VA reserved, slices mapped, access granted)
 * for reuse by the next request of the same shape: (device, slice count, slice bytes, bytes
 * per handle, domain of each slice). A take is one hash lookup by shape (uthash, internal to pool.c)
 * and returns the most recently kept range of that shape.
 *
 * Creating localized memory is slow (10-13x an ordinary allocation above 32 MiB on B300)
 * and even re-mapping pooled handles costs a reserve, a map per slice and an access grant;
 * a kept range costs none of that, so a pooled re-allocation is a lookup. The pool holds at
 * most `pool` bytes (policy) per device; on out-of-memory the allocation path trims it and
 * retries, so it never costs the program memory it needs.
 *
 * The pool is a container: it makes no driver call. What it keeps is vmm.c's (the owner of
 * a range's life, vmm.h): vmm.c offers and takes ranges, and tears down what it drains.
 *
 * Thread-safety: all functions; the mutex is never held across a call out of pool.c. */
#ifndef LDSHIM_POOL_H
#define LDSHIM_POOL_H

#include <stddef.h>
#include <stdint.h>
#include "shim/registry.h"

/* Take a kept range of this shape. 0 and *out filled on a hit (out->size is stale: the
 * caller sets it), -1 on a miss. */
int ld_pool_take(int dev, int nslices, size_t slice, size_t chunk, const int *domain_of, ld_range_t *out);

/* Offer a freed range. 0 if the pool kept it (the caller must not tear it down), with
 * *first (if not NULL) 1 when it is the first range this process kept; -1 if the caller
 * must tear it down (cap reached, pool disabled, or no host memory for the entry). */
int ld_pool_keep(const ld_range_t *r, int *first);

/* 1 if `p` lies inside a kept (freed) range: such addresses are freed memory to the
 * program, although the driver still has them mapped. */
int ld_pool_contains(CUdeviceptr p);

/* Take every kept range of `dev` (-1: every device) out of the pool and hand each to
 * each(range, arg) (NULL: forget them, freeing their handle arrays) after the lock is released. Returns their reserved
 * bytes; a non-zero return counts as a trim. vmm.h's ld_vmm_trim tears them down. */
uint64_t ld_pool_drain(int dev, void (*each)(const ld_range_t *, void *), void *arg);

/* 1 while nothing is kept (no lock). */
int ld_pool_empty(void);

typedef struct { uint64_t hits, misses, trims, cached_bytes, cap; } ld_pool_stats_t;
void ld_pool_stats(ld_pool_stats_t *out);

/* Distinct shapes that have kept ranges; *entries (if not NULL): the table's entries, which
 * include shapes emptied lately and kept for reuse (for tests). */
size_t ld_pool_shape_count(size_t *entries);

/* Forked child: forget the parent's ranges without touching the driver. */
void ld_pool_reset(void);
void ld_pool_lock_for_fork(void);
void ld_pool_unlock_after_fork(void);

#endif
