/* config.c — environment (copied at start) and policy (read at the first CUDA call). */
#include "shim/config.h"
#include "shim/compute.h"
#include "shim/log.h"
#include "shim/mlopart_proto.h"
#include "shim/options.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

ld_config_t ld_cfg;
int ld_cfg_ready;

static pthread_mutex_t cfg_mu = PTHREAD_MUTEX_INITIALIZER;

/* The shim's variables as the process started (options.c copies them once, whole, paths
 * made absolute against the start directory; a value over its bound is refused there and
 * named here in one warning). The pointers are options.c's copies, alive for the process. */
static struct {
    int  policy_set;
    char policy_bad[LD_PATH_MAX + 160];   /* why LDSHIM_POLICY is unusable, "" when fine */
    const char *state, *backend, *domain;
    const char *compute, *compute_split, *compute_sms;
    const char *compute_contexts, *compute_current, *compute_smcount;
    int  strict, mismatch_map, probe_force;
} env;

static int parse_backend(const char *s) {
    static const ld_backend_kind_t all[] = {LD_BACKEND_AUTO, LD_BACKEND_NATIVE, LD_BACKEND_MLOPART,
                                            LD_BACKEND_EMULATED, LD_BACKEND_OFF};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (!strcmp(s, ld_backend_name(all[i]))) return (int)all[i];
    return -1;
}

/* The study states are presets of (memory placement, compute placement): doc/policy.md.
 *   memory-only  tagged memory in domain X, all SMs
 *   compute-only memory as stock, compute on domain X
 *   full-ld      both in domain X
 *   mismatch-ld  memory in X, compute on the next domain (the negative control)
 *   sm-control   memory as stock, compute on as many SMs as a domain:X binding gets, spread
 * Their compute placement replaces `compute`; the split family keeps it. */
static void resolve_state(void) {
    ld_cfg.mem_domain = -1;
    ld_cfg.mem_stock = 0;
    if (!ld_state_is_study(ld_cfg.state)) return;
    ld_state_t s = ld_cfg.state;
    if (s == LD_STATE_MEMORY_ONLY || s == LD_STATE_FULL_LD || s == LD_STATE_MISMATCH_LD) ld_cfg.mem_domain = ld_cfg.domain;
    else ld_cfg.mem_stock = 1;
    ld_compute_t c = { LD_COMPUTE_ALL, 0, 0 };
    if (s == LD_STATE_COMPUTE_ONLY || s == LD_STATE_FULL_LD || s == LD_STATE_MISMATCH_LD) {
        c.kind = LD_COMPUTE_DOMAIN;
        c.domain = ld_cfg.domain;   /* mismatch-ld: compute.c binds the domain after it */
    } else if (s == LD_STATE_SM_CONTROL) {
        c.kind = LD_COMPUTE_SPREAD;
        c.sms = 0;                  /* as many as the domain:X binding gets (compute.c) */
    }
    if (ld_cfg.compute.kind != LD_COMPUTE_ALL) {
        char a[32];
        LD_WARN(CONFIG, "state %s sets the compute placement itself; compute = %s is ignored", ld_state_name(s),
                        ld_compute_format(&ld_cfg.compute, a, sizeof a));
    }
    ld_cfg.compute = c;
}

void ld_config_init(void) {
    memset(&ld_cfg, 0, sizeof ld_cfg);
    memset(&env, 0, sizeof env);
    ld_policy_init(&ld_cfg.policy);
    ld_cfg.state = LD_STATE_STOCK;
    ld_cfg.backend = ld_cfg.policy.backend;
    __atomic_store_n(&ld_cfg_ready, 0, __ATOMIC_RELEASE);
    const char *s;
    if (ld_opt(LD_OPT_INSIDE_MLOPART_HELPER)) {
        /* The MLOPart helper (and the MPS processes it starts) must never run the shim. */
        __atomic_store_n(&ld_cfg_ready, 1, __ATOMIC_RELEASE);
        return;
    }
    if ((s = ld_opt(LD_OPT_REPORT))) memcpy(ld_cfg.report_path, s, strlen(s) + 1);   /* <= LD_OPT_PATH_MAX */
    if ((s = ld_opt(LD_OPT_POLICY))) {
        env.policy_set = 1;
        memcpy(ld_cfg.policy_path, s, strlen(s) + 1);
    } else if ((s = ld_opt_refused(LD_OPT_POLICY))) {
        env.policy_set = 1;
        snprintf(env.policy_bad, sizeof env.policy_bad, "LDSHIM_POLICY %s", s);
    }
    env.state = ld_opt(LD_OPT_STATE);
    env.backend = ld_opt(LD_OPT_BACKEND);
    env.domain = ld_opt(LD_OPT_DOMAIN);
    env.compute = ld_opt(LD_OPT_COMPUTE);
    env.compute_split = ld_opt(LD_OPT_COMPUTE_SPLIT);
    env.compute_sms = ld_opt(LD_OPT_COMPUTE_SMS);
    env.compute_contexts = ld_opt(LD_OPT_COMPUTE_CONTEXTS);
    env.compute_current = ld_opt(LD_OPT_COMPUTE_CURRENT);
    env.compute_smcount = ld_opt(LD_OPT_COMPUTE_SMCOUNT);
    env.probe_force = ld_opt_true(LD_OPT_PROBE_FORCE);
    env.strict = ld_opt_one(LD_OPT_STRICT);
    env.mismatch_map = (s = ld_opt(LD_OPT_MISMATCH)) && !strcmp(s, "map");
}

/* LDSHIM_LOG=debug: every variable of the table, its value and whether it was set, once,
 * at the first CUDA call (the lines come before any message about a value). */
static void log_options(void) {
    if (!ld_log_on(LD_LOG_DEBUG, LD_SUB_CONFIG)) return;
    for (int i = 0; i < LD_OPT_COUNT; i++) {
        const ld_option_t *o = ld_option((ld_opt_t)i);
        const char *v = ld_opt((ld_opt_t)i);
        if (v) ld_log_write(LD_LOG_DEBUG, LD_SUB_CONFIG, "option %s=%s (set)", o->name, v);
        else ld_log_write(LD_LOG_DEBUG, LD_SUB_CONFIG, "option %s unset (default: %s)", o->name, o->dflt);
    }
}

int ld_config_load(void) {
    ld_log_report_env();
    log_options();
    /* Values refused whole at the copy (options.c): one warning each, naming the variable.
     * LDSHIM_POLICY's is the policy error below. */
    for (int i = 0; i < LD_OPT_COUNT; i++) {
        const char *why = i == LD_OPT_POLICY ? NULL : ld_opt_refused((ld_opt_t)i);
        if (why) LD_WARN(CONFIG, "%s %s; ignored", ld_option((ld_opt_t)i)->name, why);
    }
    int strict_fail = env.strict;
    if (env.policy_set) {
        char err[sizeof ld_cfg.policy_error];
        ld_policy_t p;
        int rc = -1;
        if (env.policy_bad[0]) {
            ld_policy_init(&p);
            snprintf(err, sizeof err, "%s", env.policy_bad);
        } else {
            rc = ld_policy_load(ld_cfg.policy_path, &p, err, sizeof err);
        }
        if (rc == 0) {
            ld_cfg.policy = p;
            ld_cfg.state = p.state_set ? p.state : LD_STATE_FULL;
        } else {
            snprintf(ld_cfg.policy_error, sizeof ld_cfg.policy_error, "%s", err);
            ld_log_write(LD_LOG_ERROR, LD_SUB_POLICY, "%s", err);   /* always shown: the user asked for a policy */
            /* The parser says whether a valid `strict = on` stands in the file it refused. */
            if (p.strict) strict_fail = 1;
            ld_policy_free(&p);
            if (strict_fail) {
                ld_log_write(LD_LOG_ERROR, LD_SUB_POLICY, "strict = on: refusing to run with a bad policy (exit status 3)");
                return 3;
            }
            LD_INFO(POLICY, "running as stock because the policy is bad");
        }
    }
    ld_cfg.backend = ld_cfg.policy.backend;
    if (env.state && !ld_cfg.policy_error[0]) {
        int st = ld_state_parse(env.state);
        if (st < 0)
            LD_WARN(CONFIG, "LDSHIM_STATE=%s is not stock|memory|full|mismatch|memory-only|compute-only|full-ld|mismatch-ld|"
                            "sm-control; keeping %s", env.state, ld_state_name(ld_cfg.state));
        else ld_cfg.state = (ld_state_t)st;
    }
    ld_cfg.domain = ld_cfg.policy.domain;
    if (env.domain) {
        uint64_t v;
        if (ld_parse_uint(env.domain, 0, 7, &v) != 0)
            LD_WARN(CONFIG, "LDSHIM_DOMAIN=%s is not a domain number 0..7; keeping %d", env.domain, ld_cfg.domain);
        else ld_cfg.domain = (int)v;
    }
    if (env.backend) {
        int b = parse_backend(env.backend);
        if (b < 0) LD_WARN(CONFIG, "LDSHIM_BACKEND=%s is not auto|native|mlopart|emulated|off; keeping %s", env.backend,
                                   ld_backend_name(ld_cfg.backend));
        else ld_cfg.backend = (ld_backend_kind_t)b;
    }
    ld_cfg.compute = ld_cfg.policy.compute;
    ld_cfg.compute_split = ld_cfg.policy.compute_split;
    ld_cfg.compute_sms = ld_cfg.policy.compute_sms;
    if (env.compute) {
        ld_compute_t c;
        size_t bad;
        char why[160];
        if (ld_compute_scan(env.compute, strlen(env.compute), &c, &bad, why, sizeof why) != 0)
            LD_WARN(CONFIG, "LDSHIM_COMPUTE=%s: %s; keeping the policy's", env.compute, why);
        else ld_cfg.compute = c;
    }
    if (env.compute_split) {
        int m = ld_split_parse(env.compute_split);
        if (m < 0) LD_WARN(CONFIG, "LDSHIM_COMPUTE_SPLIT=%s is not aligned|fine|backfill; keeping %s", env.compute_split,
                                   ld_split_name(ld_cfg.compute_split));
        else ld_cfg.compute_split = (ld_split_t)m;
    }
    if (env.compute_sms) {
        uint64_t v;
        if (ld_parse_uint(env.compute_sms, 0, LDSHIM_COMPUTE_MAX_SMS, &v) != 0)
            LD_WARN(CONFIG, "LDSHIM_COMPUTE_SMS=%s is not an SM count 0..%d; keeping %u", env.compute_sms,
                            LDSHIM_COMPUTE_MAX_SMS, ld_cfg.compute_sms);
        else ld_cfg.compute_sms = (uint32_t)v;
    }
    if (env.compute_contexts) {
        if (!strcmp(env.compute_contexts, "thread")) ld_cfg.compute_thread_ctx = 1;
        else if (strcmp(env.compute_contexts, "shared"))
            LD_WARN(CONFIG, "LDSHIM_COMPUTE_CONTEXTS=%s is not shared|thread; using shared", env.compute_contexts);
    }
    if (env.compute_current) {
        if (!strcmp(env.compute_current, "green")) ld_cfg.compute_report_green = 1;
        else if (strcmp(env.compute_current, "primary"))
            LD_WARN(CONFIG, "LDSHIM_COMPUTE_CURRENT=%s is not primary|green; using primary", env.compute_current);
    }
    if (env.compute_smcount) {
        if (!strcmp(env.compute_smcount, "bound")) ld_cfg.compute_bound_sms = 1;
        else if (strcmp(env.compute_smcount, "device"))
            LD_WARN(CONFIG, "LDSHIM_COMPUTE_SMCOUNT=%s is not device|bound; using device", env.compute_smcount);
    }
    /* A compute placement of domain:N and no state named anywhere (LDSHIM_STATE, the policy's
     * `state =`) means "bind to domain N": compute-only there. A policy with rules keeps its
     * default, full (its rules ask for memory placement; full binds compute too), and a stock
     * that was asked for by name stays pure pass-through. */
    if (!env.state && !ld_cfg.policy.state_set && !ld_cfg.policy_error[0] && ld_cfg.policy.n_rules == 0 &&
        ld_cfg.compute.kind == LD_COMPUTE_DOMAIN) {
        ld_cfg.state = LD_STATE_COMPUTE_ONLY;
        ld_cfg.domain = (int)ld_cfg.compute.domain;
        ld_cfg.compute.kind = LD_COMPUTE_ALL;   /* compute-only sets the placement (resolve_state) */
    }
    resolve_state();
    /* Any other placement with no state (no policy: stock) binds nothing: say so. A stock that
     * was asked for by name (an A/B baseline) stays silent. */
    if (ld_cfg.state == LD_STATE_STOCK && !env.state && !env.policy_set && ld_cfg.compute.kind != LD_COMPUTE_ALL) {
        char a[32];
        LD_WARN(CONFIG, "compute = %s is ignored in state stock (no policy and no LDSHIM_STATE); set "
                        "LDSHIM_STATE=full (or sm-control, ...) to bind", ld_compute_format(&ld_cfg.compute, a, sizeof a));
    }
    ld_compute_opts_t co = { ld_cfg.state != LD_STATE_STOCK, ld_cfg.compute, ld_cfg.compute_split, ld_cfg.compute_sms,
                             ld_cfg.compute_thread_ctx, ld_cfg.compute_report_green, ld_cfg.compute_bound_sms,
                             env.probe_force, ld_state_is_study(ld_cfg.state),
                             ld_cfg.state == LD_STATE_MISMATCH_LD };
    ld_compute_configure(&co);
    ld_cfg.mismatch_map = env.mismatch_map;
    if (ld_cfg.backend == LD_BACKEND_OFF && ld_cfg.state != LD_STATE_STOCK)
        LD_INFO(CONFIG, "backend off: tagged requests pass through; the map is still published");
    char comp[32];
    LD_INFO(CONFIG, "state %s, backend %s, compute %s, %d rule(s)%s%s", ld_state_name(ld_cfg.state),
                    ld_backend_name(ld_cfg.backend), ld_compute_format(&ld_cfg.compute, comp, sizeof comp),
                    ld_cfg.policy.n_rules, env.policy_set ? ", policy " : "", env.policy_set ? ld_cfg.policy_path : "");
    return 0;
}

void ld_config_resolve(void) {
    pthread_mutex_lock(&cfg_mu);
    if (!__atomic_load_n(&ld_cfg_ready, __ATOMIC_ACQUIRE)) {
        if (ld_config_load() != 0) _exit(3);   /* strict = on with a bad policy */
        __atomic_store_n(&ld_cfg_ready, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&cfg_mu);
}

void ld_config_reset(void) {
    ld_policy_free(&ld_cfg.policy);
    ld_config_init();
}

void ld_config_lock_for_fork(void) { pthread_mutex_lock(&cfg_mu); }
void ld_config_unlock_after_fork(void) { pthread_mutex_unlock(&cfg_mu); }
