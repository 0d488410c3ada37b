/* compute.h — compute binding: run every kernel of the process on the SMs a compute
 * placement names (`compute = domain:N | spread:K`), through a green context that the shim
 * makes current wherever the program makes the device's primary context current.
 *
 * Flow: the first primary-context retain of a device (shim/topology.c) claims the binding
 * (ld_compute_claim) and, after the probe ran on all SMs, calls ld_compute_on_context(),
 * which splits the SMs into groups, learns which
 * SMs each group holds (the driver's locality-domain split, or a %smid marker kernel per
 * group, cached per GPU), picks the groups (compute_plan.h), creates the green context and
 * checks with the marker where its kernels land. From then on:
 *
 *   ld_compute_bind(c)      the context to make current instead of c (cuCtxSetCurrent,
 *                           cuCtxPushCurrent): the green context when c is a bound primary
 *   ld_compute_unbind(c)    what the program is told is current (cuCtxGetCurrent,
 *                           cuCtxPopCurrent, cuStreamGetCtx, pointer attributes): the primary
 *                           when c is one of our green contexts, so programs that compare
 *                           contexts still see their own
 *   ld_compute_stream(s,pt) the stream to use for `s`: the per-thread default stream (and a
 *                           NULL stream of a _ptsz/_ptds entry point, pt = 1) becomes this
 *                           thread's own blocking stream of the green context, because the
 *                           driver's per-thread default stream fails in a green context
 *
 * Fallbacks (each logs one line, runs unbound, and the report says why): no green-context
 * API, no measured SM->domain map, a split with no group inside the domain, green-context
 * creation failing (MPS clients), the marker seeing other SMs than planned, contexts the
 * program creates itself (cuCtxCreate). The stock state and `compute = all` substitute
 * nothing.
 *
 * Thread-safety: every function. Binding is built once per device with no shim lock held
 * during driver calls; a thread making a primary current while another thread probes or
 * builds that device waits for it (bounded, 10 s). A reset or the program's last release of
 * the primary forgets the binding (ld_compute_forget_device); the next retain builds it
 * again. Fork: the child forgets every binding (ld_compute_reset). */
#ifndef LDSHIM_COMPUTE_H
#define LDSHIM_COMPUTE_H

#include "shim/compute_plan.h"
#include "shim/device.h"
#include "shim/driver.h"
#include "shim/probe.h"


/* The configuration (shim/config.c calls this once, before the first CUDA call). */
typedef struct {
    int          requested;        /* a non-stock state: binding applies                  */
    ld_compute_t compute;
    ld_split_t   split;
    uint32_t     cap;              /* compute_sms; 0: no cap                              */
    int          thread_contexts;  /* LDSHIM_COMPUTE_CONTEXTS=thread                      */
    int          report_green;     /* LDSHIM_COMPUTE_CURRENT=green                        */
    int          bound_sms;        /* LDSHIM_COMPUTE_SMCOUNT=bound                        */
    int          force;            /* LDSHIM_PROBE_FORCE=1: measure the SM groups again   */
    int          equalize;         /* study states: every domain binding gets the SM count
                                      of the smallest, so states differ only in placement;
                                      spread with sms 0 takes that count                    */
    int          next_domain;      /* mismatch-ld: bind the domain after compute.domain    */
} ld_compute_opts_t;
void ld_compute_configure(const ld_compute_opts_t *o);

/* Before the probe of `dev`'s primary context starts: claim the building of its binding.
 * 1: the caller builds it (it must call ld_compute_on_context with claimed = 1); 0: it is
 * built, being built, or not asked for. From the claim on, a thread making `primary` current
 * waits (bounded) for the binding instead of running unbound. */
int ld_compute_claim(CUdevice dev, CUcontext primary);

/* After the probe, with `ctx` current or pushed: build the binding of `dev` when `ctx` is its
 * primary context (is_primary) and the caller claimed it; note an unbound program-created
 * context otherwise. `probe` is the device's probe result, NULL if the probe did not run. */
void ld_compute_on_context(const ld_driver_t *d, CUdevice dev, CUcontext ctx, int is_primary, int claimed,
                           const ld_probe_result_t *probe);

/* 1 if the configuration asks for binding (the hooks below are then installed). */
int ld_compute_requested(void);

CUcontext ld_compute_bind(CUcontext c);
CUcontext ld_compute_unbind(CUcontext c);
CUstream ld_compute_stream(CUstream s, int per_thread_variant);

/* The SM count to answer for CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT of a bound device with
 * LDSHIM_COMPUTE_SMCOUNT=bound: 1 and *out; 0 when the real answer stands (the default). */
int ld_compute_sm_count(int dev, int *out);

/* 1 if `c` is one of the shim's green contexts of `dev`. */
int ld_compute_owns(int dev, CUcontext c);

/* The compute setting in words, for the report: what the configuration asks for, a study
 * state's rule where it derives the placement per device ("the domain after 0" for
 * mismatch-ld, sm-control's spread); *equal_count: 1 where every domain binding gets the SM
 * count of the smallest (the study states). */
const char *ld_compute_setting(char *buf, size_t n, int *equal_count);

/* A launch failed with `r`: if it ran in a bound context, say once (with the placement
 * applied there) why it may not fit the bound SMs. */
void ld_compute_note_launch_error(CUresult r, const char *what, unsigned blocks);

/* Fill the bound set of `dev` into a published topology (unbound: left as filled). */
void ld_compute_publish(int dev, ldshim_topology_t *t);

/* The program is resetting `dev`'s primary context (or released its last reference): destroy
 * the green context(s) and the per-thread streams first (they hold the primary), with the
 * primary made current again on the calling thread where a green context of ours was; the
 * next retain binds again. Destroyed green handles keep answering the primary to
 * ld_compute_unbind (another thread may still have one current). */
void ld_compute_forget_device(const ld_driver_t *d, int dev);

/* The program retained / is releasing `dev`'s primary context (counted when binding is asked
 * for). ld_compute_note_release returns 1 when that release is the program's last: the green
 * context, which holds a reference of its own, must go first (ld_compute_forget_device), or
 * the primary would outlive the program's use as it does not without the shim. */
void ld_compute_note_retain(int dev);
int ld_compute_note_release(int dev);

/* After `dev` was bound: if the calling thread has the primary current (it was current before
 * the binding existed, e.g. after a reset), make its green context current instead. */
void ld_compute_adopt_current(const ld_driver_t *d, int dev);

/* A new context handle (cuCtxCreate, cuCtxFromGreenCtx): it is no destroyed green context. */
void ld_compute_forget_handle(CUcontext c);

/* For the report and ldshim-probe. */
typedef struct {
    int      requested;             /* binding asked for on this device               */
    int      applied;               /* 1: kernels run on `sms`                        */
    char     request[32];           /* "domain:0", "spread:56"                        */
    char     method[96];            /* how the groups were made                       */
    char     split[16];             /* aligned | fine | backfill                      */
    char     reason[240];           /* why not applied, or what was applied           */
    ld_compute_plan_t plan;
    uint32_t device_sms;
    int      groups_from_cache;
    int      verified;              /* the marker saw exactly the planned SMs         */
    int      thread_contexts;       /* one green context per thread                   */
    double   elapsed_ms;            /* extra time at the first context creation       */
    /* Where elapsed_ms went: splitting and learning which SMs each group holds (the cache or
     * the marker), creating the green context, checking its SMs with the marker. */
    double   groups_ms, context_ms, verify_ms;
    int      unbound_contexts;      /* program-created contexts seen (they run unbound) */
    int      bound_domain;          /* the domain bound, -1 for a spread                */
} ld_compute_info_t;
int ld_compute_info(int dev, ld_compute_info_t *out);   /* 0 if anything was recorded */

/* Build a binding outside the shim (ldshim-probe), with the device's primary context current:
 * fills *out; `keep` 0 destroys what was created before returning. Returns 0 if applied. */
int ld_compute_build_standalone(const ld_driver_t *d, CUdevice dev, const ld_compute_t *req, ld_split_t method,
                                uint32_t cap, const ld_probe_result_t *probe, const char *cache_dir,
                                int use_cache, ld_compute_info_t *out);

/* The driver's own answer to "which SMs are in which locality domain" (shim/truth.c): split
 * the device's SMs with cuDevSmResourceSplit, one group per domain, and learn each group's
 * SMs with the marker kernel. map[s] = domain, 0xff for an SM in no group. Needs dev's
 * context current. 0, or -1 with `why` (no such split, the driver refused, no marker). */
int ld_compute_domain_sms(const ld_driver_t *d, CUdevice dev, int nd, uint32_t nsms, uint8_t *map, char *why, size_t n);

/* Forked child: forget everything (no driver call), after the fork lock was released. */
void ld_compute_reset(void);
void ld_compute_lock_for_fork(void);
void ld_compute_unlock_after_fork(void);

#endif
