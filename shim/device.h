/* device.h — per-device facts the allocation path needs, computed once per device the
 * first time a tagged request reaches it: allocation granularity, domain count, and the
 * backend chosen for it. Initialization makes driver calls without holding any lock;
 * concurrent first users wait on a condition variable until it is done.
 *
 * Also tracks peer access (which devices may read a device's shim ranges). */
#ifndef LDSHIM_DEVICE_H
#define LDSHIM_DEVICE_H

#include <stdatomic.h>
#include <stddef.h>
#include "shim/backend.h"
#include "shim/driver.h"

/* The one bound on device ordinals: every per-device array of the shim has this many
 * entries, and every set of devices (peers, a range's access, a module's published devices,
 * the bound devices) is a 64-bit mask. */
#define LD_MAX_DEVICES 64
_Static_assert(LD_MAX_DEVICES <= 64, "device sets are 64-bit masks");

enum { LD_DEV_UNTOUCHED = 0, LD_DEV_INITIALIZING = 1, LD_DEV_READY = 2 };

typedef struct ld_device {
    atomic_int state;                 /* LD_DEV_UNTOUCHED, LD_DEV_INITIALIZING, LD_DEV_READY */
    int ordinal;
    int ndomains;                     /* slices per split range                          */
    int native_domains;               /* what the driver reports (0: attribute unknown)  */
    int cc_major;
    size_t gran;                      /* allocation granularity (bytes)                  */
    const ld_backend_ops_t *backend;  /* NULL: tagged requests pass through               */
    char backend_reason[200];         /* why this backend (or why none)                  */
    atomic_ullong peers;              /* bit a: device a may access this device's ranges */
} ld_device_t;

/* The ready device record for ordinal `dev` (initializing it if needed), or NULL when
 * dev is out of range. Thread-safe. */
ld_device_t *ld_device_get(const ld_driver_t *d, CUdevice dev);

/* The record if already initialized, else NULL; never initializes. */
ld_device_t *ld_device_peek(int dev);

/* Remember that `accessor` may access `owner`'s ranges (ranges made from now on are granted
 * it; vmm.h's ld_vmm_grant_peer also grants the live ones). 0, or -1 for a bad pair. */
int ld_device_add_peer(int owner, int accessor);

/* Bit per device that may access `owner`'s ranges, owner's own bit included. */
unsigned long long ld_device_access_mask(int owner);

/* Forked child: forget everything (the child has no CUDA state), after the fork lock
 * was released. */
void ld_device_reset(void);
void ld_device_lock_for_fork(void);
void ld_device_unlock_after_fork(void);

#endif
