/* compute_groups.h — a device's SM groups for compute binding: the split of its SMs into
 * co-scheduled groups (by count, or by locality domain with CUDA >= 13.4), which SMs each group
 * holds (measured by launching the probe image's marker kernel in a green context of that group
 * alone), and the per-GPU cache file of those measurements. Internal to the shim: compute.c
 * builds a binding from them.
 *
 * Thread-safety: the functions keep no state of their own; a caller owns the ld_marker_t and
 * ld_sm_split_t it passes, and runs driver calls of one device's build from one thread. Errors
 * are return values (0, or -1 with a reason in `why`, n bytes). */
#ifndef LDSHIM_COMPUTE_GROUPS_H
#define LDSHIM_COMPUTE_GROUPS_H

#include <stddef.h>
#include <stdint.h>
#include "shim/compute.h"
#include "shim/cuda_compat.h"
#include "shim/probe_cache.h"

/* The marker kernel, loaded once per build (ld_marker_open .. ld_marker_close). */
typedef struct {
    const ld_driver_t *d;
    CUdevice dev;
    CUlibrary lib;
    CUkernel clear, marker;
    CUdeviceptr seen;
    uint32_t nsms;
    unsigned smem;
} ld_marker_t;

/* One split of a device: its groups, the remainder, and the cache key part. */
typedef struct {
    CUdevResource all;
    CUdevResource res[LD_MAX_SM_GROUPS];
    CUdevResource rem;
    ld_sm_groups_t g;
    int native, fine;
    char desc[48];            /* cache key part: "bycount:8:0", "domain:aligned:0"          */
} ld_sm_split_t;

/* Load the marker kernel for `dev` with `nsms` SMs; 0, or -1 with why (nothing left open). */
int ld_marker_open(const ld_driver_t *d, CUdevice dev, uint32_t nsms, ld_marker_t *m, char *why, size_t n);
/* Unload it and free its counters (a closed or failed marker: nothing to do). */
void ld_marker_close(ld_marker_t *m);
/* Launch the marker in green context `g` (CUcontext gctx) and collect the SMs it ran on into
 * *out. `expect`: the SMs the group should have (0: unknown). 0, or -1 with why. */
int ld_marker_run(ld_marker_t *m, CUgreenCtx g, CUcontext gctx, uint32_t expect, ld_smmask_t *out, char *why,
                  size_t n);
/* Measure the SMs of one resource (a group, or the remainder) in a green context of its own. */
int ld_marker_measure(ld_marker_t *m, CUdevResource *res, ld_smmask_t *out, char *why, size_t n);

/* The driver's cuDevSmResourceSplit (CUDA >= 13.4), or NULL. */
ld_cuDevSmResourceSplit_fn ld_split_native_fn(const ld_driver_t *d);
/* sp->all split by cuDevSmResourceSplitByCount (aligned/backfill at the minimum partition; fine
 * with co-scheduling ignored, falling back to aligned when refused). */
int ld_split_bycount(const ld_driver_t *d, ld_split_t method, ld_sm_split_t *sp, char *why, size_t n);
/* sp->all split into `nd` groups, one per locality domain, by `fn` (CCCL's three methods). */
int ld_split_native(ld_cuDevSmResourceSplit_fn fn, int nd, const ld_compute_t *req, ld_split_t method, uint32_t cap,
                    ld_sm_split_t *sp, char *why, size_t n);

/* The cache key of `sp` on `dev` (GPU uuid, driver version, SM count, split); 0, or -1. */
int ld_groups_key(const ld_driver_t *d, CUdevice dev, const ld_sm_split_t *sp, ld_groups_key_t *k);
/* The cached groups of key `k` in `dir` into *g: 0; -1 none; -2 unreadable, bad or stale (warned). */
int ld_groups_load(const char *dir, const ld_groups_key_t *k, const ld_sm_split_t *sp, ld_sm_groups_t *g);
/* Write the groups of key `k` to `dir` (a failure is logged, never fatal). */
void ld_groups_store(const char *dir, const ld_groups_key_t *k, const ld_sm_groups_t *g);

#endif /* LDSHIM_COMPUTE_GROUPS_H */
