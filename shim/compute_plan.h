/* compute_plan.h — which SM groups a compute placement binds, and the per-GPU cache of what
 * each group holds. Pure C: no CUDA call, no logging, no global state, so the shim
 * (shim/compute.c), ldshim-probe and the unit tests share it.
 *
 * The driver carves the SMs into groups (cuDevSmResourceSplitByCount, or cuDevSmResourceSplit
 * by locality domain on CUDA >= 13.4) and a green context is made from whole groups; which
 * SMs a group holds is measured once (a %smid marker kernel per group) or told by the
 * driver. ld_compute_plan() picks the groups for a request:
 *
 *   domain:N   groups lying wholly in domain N (by the driver's label, else by the measured
 *              SM->domain map); compute_sms caps the count, taking whole groups in index order.
 *              backfill tops an aligned choice up to an even share of the device (or the cap)
 *              with the groups that hold most SMs of domain N, and counts the SMs outside it.
 *   spread:K   K SMs as evenly from every domain as whole single-domain groups allow: groups
 *              are taken round-robin over the domains while the total stays <= K.
 *
 * Thread-safety: reentrant. */
#ifndef LDSHIM_COMPUTE_PLAN_H
#define LDSHIM_COMPUTE_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include "kernels/ldshim_topology.h"
#include "policy/policy.h"

#define LD_MAX_SM_GROUPS 128              /* 256 SMs in groups of at least 2 */

typedef struct { uint64_t w[LDSHIM_MAX_SMS / 64]; } ld_smmask_t;

static inline void ld_smmask_set(ld_smmask_t *m, uint32_t s) {
    if (s < LDSHIM_MAX_SMS) m->w[s >> 6] |= 1ull << (s & 63);
}
static inline int ld_smmask_has(const ld_smmask_t *m, uint32_t s) {
    return s < LDSHIM_MAX_SMS && ((m->w[s >> 6] >> (s & 63)) & 1u);
}
uint32_t ld_smmask_count(const ld_smmask_t *m);
/* "0-3,6,8-9" style list into buf (always terminated); returns buf. */
const char *ld_smmask_format(const ld_smmask_t *m, char *buf, size_t n);

/* The groups of one split and what each holds. */
typedef struct {
    int         ngroups;                       /* groups of the split (remainder not counted) */
    uint32_t    count[LD_MAX_SM_GROUPS];       /* SMs the driver says each group has          */
    ld_smmask_t sms[LD_MAX_SM_GROUPS];         /* which SMs (measured, or from the driver)    */
    int8_t      domain[LD_MAX_SM_GROUPS];      /* driver's domain label, -1: derive from map  */
    int         has_remainder;
    uint32_t    rem_count;
    ld_smmask_t rem_sms;
} ld_sm_groups_t;

typedef struct {
    int         ok;                            /* 0: nothing to bind, `why` says why          */
    char        why[200];
    int         ngroups;                       /* chosen groups, indices into ld_sm_groups_t  */
    int         group[LD_MAX_SM_GROUPS];
    ld_smmask_t sms;                           /* their union                                 */
    uint32_t    count;
    uint32_t    per_domain[LDSHIM_MAX_DOMAINS];/* chosen SMs per domain of the map            */
    uint32_t    outside;                       /* domain:N: chosen SMs not in domain N        */
} ld_compute_plan_t;

/* Choose the groups for `req` (not LD_COMPUTE_ALL). `map` is the measured SM->domain map of
 * `num_sms` SMs in `num_domains` domains (a group with a driver label uses the label).
 * `cap` 0: no cap. Returns 0 with out->ok = 1, or -1 with out->ok = 0 and the reason. */
int ld_compute_plan(const ld_compute_t *req, ld_split_t method, uint32_t cap, const uint8_t *map,
                    uint32_t num_sms, uint32_t num_domains, const ld_sm_groups_t *g,
                    ld_compute_plan_t *out);

/* Domain of group i: its driver label, or the one domain all its SMs map to, or -1 when its
 * SMs map to several (the group straddles domains). */
int ld_sm_group_domain(const ld_sm_groups_t *g, int i, const uint8_t *map, uint32_t num_sms);

/* Sanity of measured groups: every mask holds exactly `count` SMs below num_sms and no two
 * groups (remainder included) share an SM. 0, or -1 with the reason. */
int ld_sm_groups_check(const ld_sm_groups_t *g, uint32_t num_sms, char *why, size_t n);

/* ---- cache file: one per GPU, driver and split, beside the topology cache ---------------- */

typedef struct {
    char     uuid[48];
    int      driver_version;
    uint32_t num_sms;
    char     split[48];       /* how the groups were made, e.g. "bycount:8:0" */
} ld_groups_key_t;

/* File name (no directory) for `key`; 0, or -1 when it does not fit. */
int ld_groups_cache_name(const ld_groups_key_t *key, char *out, size_t n);
/* Text of the entry (with its checksum line) into buf; returns its length, or -1. */
int ld_groups_cache_format(const ld_groups_key_t *key, const ld_sm_groups_t *g, char *buf, size_t n);
/* Parse text written by ld_groups_cache_format for `key`. 0 and *g, or -1 with the reason
 * (corrupted, foreign key, groups that fail ld_sm_groups_check). `text` is modified. */
int ld_groups_cache_parse(char *text, size_t len, const ld_groups_key_t *key, ld_sm_groups_t *g, char *why,
                          size_t n);

#endif
