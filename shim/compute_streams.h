/* compute_streams.h — what compute binding keeps per thread: a stream per device (the stream
 * that the per-thread default stream, and a NULL stream of a _ptsz entry point, map to) and,
 * with per-thread contexts, a green context per device; and the green contexts retired at a
 * reset, which threads that still have one current keep being told are the primary. Internal
 * to the shim (compute.c).
 *
 * Ownership and threads: a thread's slots are its own (a block freed at thread exit, when its
 * streams go and its green contexts wait for the next thread that needs one); the list of every
 * thread's blocks and the idle contexts is under one lock, taken around slot changes other
 * threads may read, never across a driver call except at thread exit, reset and exit
 * (ld_thread_objects_destroy), where nothing else waits on it. Each device's slots have a
 * generation: destroying a device's objects (a reset) or forking makes older slots stale. */
#ifndef LDSHIM_COMPUTE_STREAMS_H
#define LDSHIM_COMPUTE_STREAMS_H

#include "shim/compute.h"

/* One thread's objects on one device. */
typedef struct { int dev; unsigned gen; CUstream stream; CUgreenCtx green; CUcontext gctx; } ld_thread_slot_t;

/* This thread's slot for `dev` (current generation), creating it when `create`; NULL when none
 * (not created, or every slot of the thread in use). */
ld_thread_slot_t *ld_thread_slot(int dev, int create);
/* An idle green context of the slot's device and generation (a thread exited) into the slot. */
void ld_thread_slot_take_idle(ld_thread_slot_t *s);
/* Record the slot's new green context / stream (under the list's lock: other threads read). */
void ld_thread_slot_set_context(ld_thread_slot_t *s, CUgreenCtx g, CUcontext c);
void ld_thread_slot_set_stream(ld_thread_slot_t *s, CUstream st);
/* Destroy every thread's streams and contexts of `dev` (-1: all devices) and the idle ones, and
 * make the device's slots stale. */
void ld_thread_objects_destroy(const ld_driver_t *d, int dev);
/* The device whose per-thread green context (of any thread, or idle) `c` is; -1 if none. */
int ld_thread_context_owner(CUcontext c);

/* Remember that green context `gctx` of `primary` was destroyed (the last RETIRED_MAX). */
void ld_context_retire(CUcontext gctx, CUcontext primary);
/* The primary a retired green context answers, or NULL. */
CUcontext ld_context_retired_primary(CUcontext c);

/* Fork: the child's slots are stale and it has no contexts (no lock: one thread). */
void ld_thread_objects_reset(void);
/* The locks, taken around fork after compute.c's own (ld_compute_lock_for_fork). */
void ld_thread_objects_lock(void);
void ld_thread_objects_unlock(void);

/* Provided by compute.c: the primary context of `dev`'s binding (NULL when unbound). */
CUcontext ld_compute_primary(int dev);

#endif /* LDSHIM_COMPUTE_STREAMS_H */
