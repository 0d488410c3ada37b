/* config.h — the shim's run-time configuration, read once from the environment and the
 * policy file by ld_config_init() (called from the library constructor; no CUDA calls).
 *
 *   LDSHIM_POLICY   policy file (policy/policy.h); none: nothing is tagged
 *   LDSHIM_STATE    a state (stock|memory|full|mismatch|memory-only|compute-only|full-ld|
 *                   mismatch-ld|sm-control), overrides the file; default: the file's state, or
 *                   stock without a policy
 *   LDSHIM_DOMAIN   the study states' domain X, overrides the file's `domain` (default 0)
 *   LDSHIM_BACKEND  auto|native|mlopart|emulated|off, overrides the file
 *   LDSHIM_LOG      error|warn|info|debug (shim/log.h)
 *   LDSHIM_REPORT   JSON report path written at exit ("%p" expands to the pid)
 *   LDSHIM_COMPUTE  all|domain:N|spread:K, overrides the file's `compute`;
 *                   LDSHIM_COMPUTE_SPLIT (aligned|fine|backfill), LDSHIM_COMPUTE_SMS (cap) too
 *   LDSHIM_COMPUTE_CONTEXTS shared (default) | thread: one green context per thread
 *   LDSHIM_COMPUTE_CURRENT  primary (default) | green: what cuCtxGetCurrent answers while
 *                   the bound context is current
 *   LDSHIM_COMPUTE_SMCOUNT  device (default) | bound: the SM-count attribute of a bound device
 *
 * Thread-safety: ld_cfg is written only before main() (and in a forked child before it
 * returns from fork); everything else reads it. */
#ifndef LDSHIM_CONFIG_H
#define LDSHIM_CONFIG_H

#include "policy/policy.h"

typedef struct {
    ld_policy_t policy;        /* rules and options; empty when no valid file            */
    ld_state_t  state;
    ld_backend_kind_t backend;
    char        policy_path[512];
    char        policy_error[600];  /* first error line, "" if none                       */
    char        report_path[512];
    int         mismatch_map;  /* mismatch inverts the published map instead of the memory */
    ld_compute_t compute;      /* the policy's `compute`, or LDSHIM_COMPUTE                */
    ld_split_t  compute_split;
    uint32_t    compute_sms;   /* 0: no cap                                                */
    int         compute_thread_ctx;    /* LDSHIM_COMPUTE_CONTEXTS=thread                   */
    int         compute_report_green;  /* LDSHIM_COMPUTE_CURRENT=green                     */
    int         compute_bound_sms;     /* LDSHIM_COMPUTE_SMCOUNT=bound                     */
    /* What the state makes of the placement (resolved once from state, domain, compute): */
    int         domain;        /* X of the study states                                    */
    int         mem_domain;    /* >= 0: every tagged request goes to this domain (study)   */
    int         mem_stock;     /* 1: tagged requests pass through (compute-only, sm-control)*/
} ld_config_t;

extern ld_config_t ld_cfg;

/* Parse env + policy. Returns 0, or 3 when `strict = on` and the policy is bad (the
 * constructor then exits with that status before the program's main runs). */
int ld_config_init(void);

/* 1 if the shim should alter anything at all (state != stock). */
static inline int ld_active(void) { return ld_cfg.state != LD_STATE_STOCK; }

#endif
