/* api.c — the exported host API (shim/ldshim.h). */
#include "shim/ldshim.h"
#include "shim/alloc.h"
#include "shim/backend.h"
#include "shim/config.h"
#include "shim/device.h"
#include "shim/driver.h"
#include "shim/pool.h"
#include "shim/vmm.h"
#include "shim/registry.h"
#include "shim/report.h"
#include "shim/topology.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

EXPORT int ldshim_get_topology(int device, ldshim_topology_t *out, size_t size) {
    if (size < LDSHIM_TOPOLOGY_V1_BYTES) return -1;
    ldshim_topology_t t;
    int rc = ld_topology_get(device, &t);
    if (out) memcpy(out, &t, size < sizeof t ? size : sizeof t);
    return rc;
}

EXPORT int ldshim_pointer_info(uint64_t ptr, ldshim_ptr_info_t *out) {
    ld_range_t r;
    if (ld_registry_find((CUdeviceptr)ptr, &r) != 0) return -1;
    if (!out) return 0;
    memset(out, 0, sizeof *out);
    out->base = r.base;
    out->size = r.size;
    out->reserved = r.reserved;
    out->slice = r.slice;
    out->device = r.device;
    out->num_domains = r.nslices;
    for (int i = 0; i < r.nslices && i < 8; i++) out->domain_of[i] = r.domain_of[i];
    const ld_config_t *c = ld_config();
    if (r.rule >= 0 && r.rule < c->policy.n_rules) snprintf(out->rule, sizeof out->rule, "%s", c->policy.rules[r.rule].name);
    else snprintf(out->rule, sizeof out->rule, "(probe)");
    snprintf(out->backend, sizeof out->backend, "%s", ld_backend_name((ld_backend_kind_t)r.backend));
    return 0;
}

EXPORT void ldshim_get_stats(ldshim_stats_t *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    ld_alloc_counts_t c;
    ld_alloc_counts(&c);
    ld_pool_stats_t p;
    ld_pool_stats(&p);
    o->tagged_allocs = c.tagged_allocs;
    o->tagged_frees = c.tagged_frees;
    o->untagged_allocs = c.untagged_allocs;
    o->untagged_frees = c.untagged_frees;
    o->fallbacks = c.fallbacks;
    o->live_ranges = ld_registry_count();
    o->live_bytes = ld_registry_bytes();
    o->pool_hits = p.hits;
    o->pool_misses = p.misses;
    o->pool_trims = p.trims;
    o->pool_bytes = p.cached_bytes;
}

EXPORT int ldshim_write_report(const char *path) {
    (void)ld_config();           /* a program asking for a report is using the shim: read the policy */
    if (!path) path = ld_cfg.report_path;
    if (!path[0]) { errno = EINVAL; return -1; }
    return ld_report_write(path);
}

EXPORT uint64_t ldshim_pool_trim(void) { return ld_vmm_trim(ld_driver(), -1); }

EXPORT void *ldshim_real_driver_entry(const char *name) {
    const ld_driver_t *d = ld_driver();
    return d && name ? ld_real_dlsym(d->handle, name) : NULL;
}

EXPORT const char *ldshim_version(void) {
    static char buf[96];
    const ld_config_t *c = ld_config();
    snprintf(buf, sizeof buf, "%s (state %s, backend %s)", LDSHIM_VERSION_STRING, ld_state_name(c->state),
             ld_backend_name(c->backend));
    return buf;
}
