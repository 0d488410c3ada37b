/* config.h — the shim's run-time configuration: the policy file and the LDSHIM_* variables
 * (their table, with defaults and descriptions, is shim/options.h) resolved into ld_cfg.
 *
 * Two steps. ld_config_init() (the library constructor) takes the environment's copy
 * (options.c) and makes the policy path absolute; it reads no file and prints nothing. The
 * policy file is read, and every message about the environment printed (with LDSHIM_LOG=debug
 * the whole options table first), once, when the process first reaches for CUDA: the first
 * wrapper, resolver or dlsym of a cu* name that asks ld_active() or ld_config(). A process
 * that never does (a shell, `env`, a pyenv wrapper in front of the program) reads nothing
 * and prints nothing.
 *
 * Thread-safety: the first resolution is serialized by a mutex (reading a file calls neither
 * dlopen nor dlsym, so a thread waiting on it while holding the dynamic loader's lock cannot
 * deadlock), published with a release store; ld_cfg is read-only afterwards. Fork: the mutex
 * is held across fork (init.c), so a child never inherits a half-read configuration. */
#ifndef LDSHIM_CONFIG_H
#define LDSHIM_CONFIG_H

#include "policy/policy.h"

#define LD_PATH_MAX 4096       /* longest LDSHIM_POLICY / LDSHIM_REPORT accepted, with the NUL */

typedef struct {
    ld_policy_t policy;        /* rules and options; empty when no valid file            */
    ld_state_t  state;
    ld_backend_kind_t backend;
    char        policy_path[LD_PATH_MAX];   /* absolute, "" when none                       */
    char        policy_error[LD_PATH_MAX + 512];  /* first error line, "" if none         */
    char        report_path[LD_PATH_MAX];   /* as given ("%p" unexpanded), "" when none     */
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
extern int ld_cfg_ready;       /* 0 until resolved; read with acquire semantics            */

/* Constructor step: copy the environment, resolve a relative policy path. No file is read,
 * nothing is printed, no CUDA call. Inside the MLOPart helper (LD_MLO_ENV_MARKER set) the
 * shim is inert: stock, no policy, no report, for good. */
void ld_config_init(void);

/* First-use step, slow path of ld_active()/ld_config(): read the policy and report bad
 * settings, exactly once per process. `strict = on` (or LDSHIM_STRICT=1) with a bad policy
 * ends the process here with status 3 (_exit: no exit handlers run, buffered stdio output of
 * the program is not flushed). */
void ld_config_resolve(void);

/* The work of ld_config_resolve without the once-guard and without exiting: 0, or 3 where
 * strict asks the process to end. For the tests and the fuzzer, which call ld_config_init
 * first and ld_config_reset after. */
int ld_config_load(void);
void ld_config_reset(void);

/* Fork handlers (init.c). */
void ld_config_lock_for_fork(void);
void ld_config_unlock_after_fork(void);

/* 1 once the configuration was resolved; never resolves it (the report of a process that
 * never touched CUDA says so instead of reading the policy at exit). */
static inline int ld_config_ready(void) { return __atomic_load_n(&ld_cfg_ready, __ATOMIC_ACQUIRE); }

/* The resolved configuration. */
static inline const ld_config_t *ld_config(void) {
    if (__builtin_expect(!ld_config_ready(), 0)) ld_config_resolve();
    return &ld_cfg;
}

/* 1 if the shim should alter anything at all (state != stock). On the resolver hot path:
 * after the first call, one acquire load and one compare. */
static inline int ld_active(void) {
    if (__builtin_expect(!ld_config_ready(), 0)) ld_config_resolve();
    return ld_cfg.state != LD_STATE_STOCK;
}

#endif
