/* alloc.h — the allocation path: decide (policy), localize (vmm) or pass through, own the
 * free of what the shim created, and keep the counters the report prints.
 *
 * Every function is thread-safe and makes driver calls only with no shim lock held. */
#ifndef LDSHIM_ALLOC_H
#define LDSHIM_ALLOC_H

#include "policy/policy.h"
#include "shim/driver.h"
#include "shim/registry.h"
#include "shim/track.h"

/* cuMemAlloc_v2 semantics. `api` says how the caller reached the shim. */
CUresult ld_alloc(CUdeviceptr *dptr, size_t size, ld_api_t api);

/* Where a request of `size` bytes from `api` goes, counted once per request: 1 and *out (the
 * rule, LD_PLACE_SPLIT or LD_PLACE_DOMAIN with the domain) when the shim places it, 0 when it
 * passes through (untagged, stock rule, an occurrence not taken, a state that keeps memory as
 * stock, split asked of an api other than cuMemAlloc). The other allocation apis (place.c)
 * report what they did: ld_alloc_note_placed (with the object its free will name: a pointer
 * or a VMM handle, track.h), ld_alloc_note_passed, ld_alloc_note_fallback, and every
 * successful allocation they did not place with ld_alloc_note_unplaced (the object for a VMM
 * handle, NULL for a pointer) or ld_alloc_count_unplaced (which returns its argument). */
typedef struct { int rule; int kind; int domain; } ld_decision_t;
/* kind: LD_OBJ_PTR or LD_OBJ_HANDLE; ctx: the context current at the allocation (a reset of
 * the device's primary frees a pointer made in it or its bound green context). */
typedef struct { int kind; uint64_t key; int device; CUcontext ctx; } ld_obj_t;
int ld_alloc_decide(size_t size, ld_api_t api, ld_decision_t *out);
void ld_alloc_note_placed(const ld_decision_t *dc, ld_api_t api, size_t bytes, int domain, int emulated,
                          const ld_obj_t *obj);
void ld_alloc_note_passed(const ld_decision_t *dc, ld_api_t api);
void ld_alloc_note_fallback(const ld_decision_t *dc, ld_api_t api, const char *why);
void ld_alloc_note_unplaced(const ld_obj_t *obj);
CUresult ld_alloc_count_unplaced(CUresult r);

/* A decided request as a shim range (cuMemAlloc semantics; also the pitched path): 1 when
 * placed (*dptr set, counted); 0 when the caller must make the program's own call (the pass
 * or fallback is counted, the call's success is the caller's to count). */
int ld_alloc_placed(const ld_driver_t *d, CUdeviceptr *dptr, size_t size, ld_api_t api, const ld_decision_t *dc);

/* Per-api counts for the report. */
typedef struct { uint64_t requests, placed, emulated, passed, fallbacks; } ld_api_stats_t;
void ld_api_stats(int api, ld_api_stats_t *out);

/* The frees. What the counts call a free, per api: cuMemFree of a cuMemAlloc, pitched,
 * managed or stream-ordered pointer; cuMemFreeAsync of a stream-ordered one; the first
 * successful cuMemRelease of a handle cuMemCreate returned (its memory lives on while mapped,
 * as the driver says; a handle the program imported or retained is no allocation of its
 * own); the destruction or reset of the context that held the allocation.
 *
 * ld_free: cuMemFree_v2 semantics: shim ranges are synchronized, unmapped and released; an
 * interior pointer of a shim range gives CUDA_ERROR_INVALID_VALUE; anything else goes to
 * the driver. ld_free_async / ld_release: the driver's call `real`, counted. */
CUresult ld_free(CUdeviceptr p);
CUresult ld_free_async(CUdeviceptr p, CUstream s, CUresult (*real)(CUdeviceptr, CUstream));
CUresult ld_release(CUmemGenericAllocationHandle h, CUresult (*real)(CUmemGenericAllocationHandle));

/* The program is destroying `ctx` (or, with ctx NULL, resetting device `dev`'s primary
 * context): synchronize it (and the green contexts its ranges were made in), tear down the
 * shim ranges that belong to it and what the pool keeps for that device (a reset's caller
 * also destroys the shim's memory pools of the device: ld_place_forget_device, place.h).
 * What died with it is counted as freed. */
void ld_alloc_teardown_context(const ld_driver_t *d, CUcontext ctx, int dev);

/* Per-rule counters for the report. */
typedef struct {
    uint64_t matched, allocations, bytes, fallbacks, ipc_refused, passed;
    uint64_t bytes_per_domain[LD_MAX_SLICES];
} ld_rule_stats_t;

#define LD_MAX_RULE_STATS LD_POLICY_MAX_RULES
void ld_rule_stats(int rule, ld_rule_stats_t *out);
void ld_rule_note_ipc_refused(int rule);

/* Fallback reasons: (reason, count) pairs, at most `max`; returns how many exist. */
typedef struct { char reason[160]; uint64_t count; } ld_fallback_t;
size_t ld_fallbacks(ld_fallback_t *out, size_t max);

/* Untagged request sizes, for writing a policy from a discovery run. */
typedef struct { uint64_t size; int api; uint64_t count; } ld_hist_entry_t;
size_t ld_untagged_histogram(ld_hist_entry_t *out, size_t max);
uint64_t ld_untagged_total(void);

/* tagged_*: allocations the shim placed (every api, emulated ones too) and their frees;
 * untagged_*: every other successful allocation that reached the shim (no rule, passed,
 * fallen back) and its free. tagged_allocs - tagged_frees is what is live of the placed
 * ones, and untagged_frees never exceeds untagged_allocs (memory the shim never saw being
 * allocated is not counted when freed: an imported VMM handle). */
typedef struct {
    uint64_t tagged_allocs, tagged_frees, untagged_allocs, untagged_frees, fallbacks;
} ld_alloc_counts_t;
void ld_alloc_counts(ld_alloc_counts_t *out);

/* Forked child: zero the counters (after the fork lock was released). */
void ld_alloc_reset(void);
void ld_alloc_lock_for_fork(void);
void ld_alloc_unlock_after_fork(void);

#endif
