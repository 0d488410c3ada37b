/* topology.h — probe at first context creation, publication into modules.
 *
 * ld_topology_on_context() runs the probe once per device (first primary-context retain
 * or context creation), adjusts the map to the placement state (aware for `full`,
 * inverted for `mismatch` with LDSHIM_MISMATCH=map) and writes it into every recorded
 * module of that device that defines `ldshim_topology`. ld_topology_on_module() records a
 * newly loaded module or library whose image names the symbol and publishes into it at
 * once when its device's map is known.
 *
 * Thread-safety: all functions. The probe runs without any shim lock held; concurrent
 * context creations on the same device do not wait for it (their modules are published
 * when it finishes). */
#ifndef LDSHIM_TOPOLOGY_H_INTERNAL
#define LDSHIM_TOPOLOGY_H_INTERNAL

#include <stddef.h>
#include "shim/driver.h"
#include "shim/probe.h"
#include "shim/truth.h"

/* `is_primary`: ctx is dev's primary context (it gets the compute binding, compute.h). */
void ld_topology_on_context(const ld_driver_t *d, CUdevice dev, CUcontext ctx, int is_current, int is_primary);
/* The primary context of dev is being reset: the published map loses its bound set. */
void ld_topology_unbind(int dev);

enum { LD_MOD_MODULE = 0, LD_MOD_LIBRARY = 1 };
/* `image` may be NULL when `path` names the file the module was loaded from. */
void ld_topology_on_module(const ld_driver_t *d, int kind, void *handle, const void *image, const char *path);
/* The program unloads the module or library `handle` (`kind` as recorded). */
void ld_topology_forget_module(int kind, void *handle);

/* Copy the published map of `dev`; 0 if published, -1 otherwise. */
int ld_topology_get(int dev, ldshim_topology_t *out);
/* The probe result of `dev` for the report; 0 if the probe ran. */
int ld_topology_result(int dev, ld_probe_result_t *out);
/* The driver-truth check of dev's probe (truth.h), once published: 0 and *out, else -1. */
int ld_topology_truth(int dev, ld_truth_t *out);

/* Forked child: forget probe results and modules, after the fork lock was released. */
void ld_topology_reset(void);
void ld_topology_lock_for_fork(void);
void ld_topology_unlock_after_fork(void);

#endif
