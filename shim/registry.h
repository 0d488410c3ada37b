/* registry.h — the shim's live ranges, looked up by any address inside them.
 *
 * A sorted array of non-overlapping [base, base+reserved) intervals under a rwlock:
 * lookups (every free, every address-range query, IPC, peer grant) take the read lock and
 * binary-search; insert/remove take the write lock. No driver call is ever made while the
 * lock is held: lookups copy the record out. An empty registry answers without locking.
 *
 * Records are owned by the registry from insert until remove, which hands the record back
 * to the caller (who then tears down the mapping). */
#ifndef LDSHIM_REGISTRY_H
#define LDSHIM_REGISTRY_H

#include <stddef.h>
#include <stdint.h>
#include "shim/cuda_compat.h"

#define LD_MAX_SLICES 8

typedef struct ld_range {
    CUdeviceptr base;
    size_t      size;          /* requested bytes                                        */
    size_t      reserved;      /* VA bytes (slices * slice)                             */
    size_t      slice;         /* bytes per slice                                        */
    int         nslices;
    int         device;
    CUcontext   ctx;           /* context current at allocation (for the free's sync)   */
    int         rule;          /* policy rule index                                      */
    int         backend;       /* ld_backend_kind_t that created the handles             */
    int         domain_of[LD_MAX_SLICES];          /* physical domain of each slice      */
    unsigned long long access_mask;                /* devices granted access (bit per device) */
    /* Physical handles: each slice is `per_slice` handles of `chunk` bytes (the last one the
     * remainder), mapped back to back. One per slice: handle[i]; more: handles[i * per_slice
     * + j], a heap array owned by the range (freed at its teardown; copies share it). */
    size_t      chunk;
    int         per_slice;
    CUmemGenericAllocationHandle handle[LD_MAX_SLICES];
    CUmemGenericAllocationHandle *handles;
} ld_range_t;

/* Insert a copy of *r. Returns 0, or -1 if it overlaps a live range or memory is short. */
int ld_registry_insert(const ld_range_t *r);

/* Copy out the range containing `p` (any interior address). 0 if found, else -1. */
int ld_registry_find(CUdeviceptr p, ld_range_t *out);

/* Remove the range whose base is exactly `base`, copying it to *out. 0 if removed; -1 if
 * no range starts there (1 is returned, nothing removed, when `base` is interior). */
int ld_registry_remove(CUdeviceptr base, ld_range_t *out);

/* Remove every range for which pred(range, arg) is true; returns them in a malloc'd array
 * (*out, caller frees) and their count (0: *out is NULL). */
size_t ld_registry_take_if(int (*pred)(const ld_range_t *, void *), void *arg, ld_range_t **out);

/* Copy up to `max` live ranges of `device` (-1: all) into out; returns how many exist. */
size_t ld_registry_snapshot(int device, ld_range_t *out, size_t max);

size_t ld_registry_count(void);
uint64_t ld_registry_bytes(void);

/* Forget everything without touching the driver. Call only when no other thread uses the
 * registry (tests). */
void ld_registry_reset(void);
/* The same in a forked child (atfork handler): the parent's array is abandoned, not freed. */
void ld_registry_reset_in_child(void);

#endif
