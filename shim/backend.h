/* backend.h — who provides physical memory homed in locality domain d.
 *
 * The mapping code (shim/vmm.c) reserves one VA range per tagged request and asks the
 * active backend for one physical handle per domain slice. Backends only *create* handles;
 * mapping, access, release and pooling are uniform (cuMemRelease on the handle).
 *
 * Thread-safety: create() may be called from many threads at once; a backend serializes
 * what it must internally. No backend call is made while the caller holds a shim lock.
 */
#ifndef LDSHIM_BACKEND_H
#define LDSHIM_BACKEND_H

#include <stddef.h>
#include "shim/driver.h"
#include "policy/policy.h"

typedef struct ld_backend_ops {
    ld_backend_kind_t kind;
    const char *name;                     /* "native", "mlopart", "emulated" */
    /* Can this backend localize memory on `dev` with `ndomains` domains? 0 = yes; else -1
     * and a one-line reason in `why`. May start helpers; called once per device. */
    int (*available)(const ld_driver_t *drv, CUdevice dev, int ndomains, char *why, size_t n);
    /* Create a physical allocation of `bytes` (a multiple of the granularity) homed in
     * `domain` of `dev`. On failure returns the driver's error and leaves *out untouched;
     * `why` gets a short reason. */
    CUresult (*create)(const ld_driver_t *drv, CUdevice dev, int domain, size_t bytes,
                       CUmemGenericAllocationHandle *out, char *why, size_t n);
    /* 1 if memory from this backend is physically localized (native, mlopart). */
    int localizes;
    /* 1 if each slice's home is read back (CU_POINTER_ATTRIBUTE_LOCALITY_DOMAIN_ORDINAL) and
     * a slice homed elsewhere discarded: native only. The 13.5 header documents the ordinal
     * for memory localized with the locality-domain location type; for MLOPart's derived
     * devices (one domain each, as the shim sees them) it says nothing (doc/shim.md). */
    int verifies_home;
    /* Release whatever the backend holds (helper processes); called at exit and in a
     * forked child (where it must only forget, not signal, the parent's helpers). */
    void (*shutdown)(int in_child);
} ld_backend_ops_t;

extern const ld_backend_ops_t ld_backend_native;
extern const ld_backend_ops_t ld_backend_emulated;
extern const ld_backend_ops_t ld_backend_mlopart;   /* shim/backend_mlopart.c */

/* ld_native_domain_count (the driver's locality-domain count) lives in shim/driver.h. */

#endif
