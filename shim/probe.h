/* probe.h — topology probe: measure which domain each SM is near, validate, balance.
 *
 * Called by the shim core (shim/topology.c) once per device, inside the first context
 * creation, with that device's context current; also by the ldshim-probe tool. The probe
 * uses only the real driver table, a private stream, and frees everything it allocated
 * before returning. It relaxes this thread's capture mode for its own calls (ld_own_calls_t,
 * driver.h) and restores it; that does not make it safe beside a capture on another thread:
 * the anchored mode's frees synchronize the context, which waits on (or breaks) such a
 * capture. The shim runs it at a device's first context creation, before the program can
 * have begun one.
 */
#ifndef LDSHIM_PROBE_H
#define LDSHIM_PROBE_H

#include <stdint.h>
#include "shim/driver.h"
#include "policy/policy.h"
#include "kernels/ldshim_topology.h"

typedef struct {
    ld_probe_mode_t mode;          /* auto | anchored | clustered | even | off            */
    ld_map_mode_t   map;           /* which map becomes `published`                       */
    int             ndomains;      /* expected domain count (2 unless the driver says)    */
    int             force;         /* ignore the cache                                   */
    int             use_cache;     /* read/write the cache (off in tests)                */
    const char     *cache_dir;     /* NULL: $LDSHIM_CACHE_DIR, $XDG_CACHE_HOME/ldshim, ~/.cache/ldshim */
    /* Anchored mode needs memory homed in a known domain: a callback that returns a device
     * buffer of `bytes` homed in `domain` (and frees it with release). NULL: no anchored. */
    CUresult (*alloc_localized)(void *ctx, int domain, size_t bytes, CUdeviceptr *out);
    void     (*free_localized)(void *ctx, CUdeviceptr p, size_t bytes);
    void     *alloc_ctx;
} ld_probe_opts_t;

typedef struct {
    ld_probe_mode_t mode_used;     /* anchored | clustered | even                         */
    int      from_cache;
    int      attempts;
    int      valid;                /* validation passed                                   */
    char     verdict[160];         /* one line: why accepted / why fell back             */
    uint32_t num_sms, num_domains;
    double   near_cycles, far_cycles;   /* medians over SMs (anchored) or groups (clustered) */
    double   separation;           /* clustered: separation score; anchored: far/near     */
    double   elapsed_ms;
    uint8_t  physical[LDSHIM_MAX_SMS];  /* measured SM -> domain                          */
    uint8_t  balanced[LDSHIM_MAX_SMS];  /* after moving the fewest whole TPCs             */
    int      tpcs_moved;
    ldshim_topology_t published;   /* filled per opts.map; magic set; flags VALID/BALANCED/SOURCE */
} ld_probe_result_t;

/* Run (or load from cache) the probe for `dev`, whose context must be current.
 * Returns 0 and fills *out, always with a usable map (the even map on any failure, with
 * the reason in verdict). Returns -1 only when the device cannot be queried at all. */
int ld_probe_device(const ld_driver_t *drv, CUdevice dev, const ld_probe_opts_t *opts,
                    ld_probe_result_t *out);

/* JSON object (no trailing newline) describing the result, for the report and the tool.
 * Returns bytes written (snprintf semantics). */
int ld_probe_result_json(const ld_probe_result_t *r, char *buf, size_t n);

#endif
