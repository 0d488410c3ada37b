/* pool.h — released physical handles kept for reuse, per (device, domain, bytes).
 *
 * Creating localized memory is slow (10-13x an ordinary allocation above 32 MiB on
 * B300), so freed slices are kept up to a byte cap per device (policy `pool`) and handed
 * to the next request of the same shape. On out-of-memory the allocation path trims the
 * pool and retries, so the pool never costs the program memory it needs.
 *
 * Thread-safety: all functions; the mutex is never held across a driver call. */
#ifndef LDSHIM_POOL_H
#define LDSHIM_POOL_H

#include <stddef.h>
#include <stdint.h>
#include "shim/driver.h"

/* Take a cached handle. Returns 0 and sets *out on a hit, -1 on a miss. */
int ld_pool_get(int dev, int domain, size_t bytes, CUmemGenericAllocationHandle *out);

/* Offer a released handle. Returns 0 if the pool kept it; -1 if the caller must release
 * it (cap reached or pool disabled). */
int ld_pool_put(int dev, int domain, size_t bytes, CUmemGenericAllocationHandle h);

/* Release cached handles of `dev` (-1: every device). Returns bytes released. */
uint64_t ld_pool_trim(const ld_driver_t *d, int dev);

typedef struct { uint64_t hits, misses, trims, cached_bytes, cap; } ld_pool_stats_t;
void ld_pool_stats(ld_pool_stats_t *out);

/* Forked child: forget the parent's handles without releasing them. */
void ld_pool_reset(void);
void ld_pool_lock_for_fork(void);
void ld_pool_unlock_after_fork(void);

#endif
