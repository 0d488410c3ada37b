/* config.c — environment (copied at start) and policy (read at the first CUDA call). */
#include "shim/config.h"
#include "shim/log.h"
#include "shim/mlopart_proto.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

ld_config_t ld_cfg;
int ld_cfg_ready;

static pthread_mutex_t cfg_mu = PTHREAD_MUTEX_INITIALIZER;

/* The environment as the process started: the program may change its own later, from any
 * thread, and getenv is not safe against that. Values too long for a field keep a prefix
 * (for the message) and a flag. */
static struct {
    int  policy_set;
    char policy_bad[LD_PATH_MAX + 160];   /* why LDSHIM_POLICY is unusable, "" when fine */
    char report_bad[200];                 /* why LDSHIM_REPORT is refused, "" when fine  */
    char state[64], backend[64];
    int  strict, mismatch_map;
} env;

static int parse_backend(const char *s) {
    static const ld_backend_kind_t all[] = {LD_BACKEND_AUTO, LD_BACKEND_NATIVE, LD_BACKEND_MLOPART,
                                            LD_BACKEND_EMULATED, LD_BACKEND_OFF};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (!strcmp(s, ld_backend_name(all[i]))) return (int)all[i];
    return -1;
}

/* LDSHIM_POLICY made absolute against the starting directory, once: a child that chdir'd
 * and never touches CUDA never reads it; one that does reads what the user named. */
static void policy_from_env(const char *path) {
    size_t len = strlen(path);
    if (path[0] == '/') {
        if (len >= sizeof ld_cfg.policy_path) {
            snprintf(env.policy_bad, sizeof env.policy_bad, "LDSHIM_POLICY is %zu bytes long (the limit is %d)",
                     len, LD_PATH_MAX - 1);
            return;
        }
        memcpy(ld_cfg.policy_path, path, len + 1);
        return;
    }
    char cwd[LD_PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) {
        snprintf(env.policy_bad, sizeof env.policy_bad,
                 "LDSHIM_POLICY=%.*s is relative and the working directory cannot be read (errno %d)",
                 LD_PATH_MAX - 1, path, errno);
        return;
    }
    size_t cl = strlen(cwd);
    const char *rel = path[0] == '.' && path[1] == '/' ? path + 2 : path;
    if (cl + 1 + strlen(rel) >= sizeof ld_cfg.policy_path) {
        snprintf(env.policy_bad, sizeof env.policy_bad,
                 "LDSHIM_POLICY=%.200s in %.200s makes a path longer than %d bytes", path, cwd, LD_PATH_MAX - 1);
        return;
    }
    size_t rl = strlen(rel), k = cl;
    memcpy(ld_cfg.policy_path, cwd, cl);
    if (cl > 1) ld_cfg.policy_path[k++] = '/';         /* "/" itself needs no separator */
    memcpy(ld_cfg.policy_path + k, rel, rl + 1);
}

void ld_config_init(void) {
    memset(&ld_cfg, 0, sizeof ld_cfg);
    memset(&env, 0, sizeof env);
    ld_policy_init(&ld_cfg.policy);
    ld_cfg.state = LD_STATE_STOCK;
    ld_cfg.backend = ld_cfg.policy.backend;
    __atomic_store_n(&ld_cfg_ready, 0, __ATOMIC_RELEASE);
    const char *s;
    if ((s = getenv(LD_MLO_ENV_MARKER)) && *s) {
        /* The MLOPart helper (and the MPS processes it starts) must never run the shim. */
        __atomic_store_n(&ld_cfg_ready, 1, __ATOMIC_RELEASE);
        return;
    }
    if ((s = getenv("LDSHIM_REPORT")) && *s) {
        size_t len = strlen(s);
        if (len < sizeof ld_cfg.report_path) memcpy(ld_cfg.report_path, s, len + 1);
        else snprintf(env.report_bad, sizeof env.report_bad,
                      "LDSHIM_REPORT is %zu bytes long (the limit is %d): no report is written", len,
                      LD_PATH_MAX - 1);
    }
    if ((s = getenv("LDSHIM_POLICY")) && *s) {
        env.policy_set = 1;
        policy_from_env(s);
    }
    if ((s = getenv("LDSHIM_STATE")) && *s) snprintf(env.state, sizeof env.state, "%s", s);
    if ((s = getenv("LDSHIM_BACKEND")) && *s) snprintf(env.backend, sizeof env.backend, "%s", s);
    env.strict = (s = getenv("LDSHIM_STRICT")) && !strcmp(s, "1");
    env.mismatch_map = (s = getenv("LDSHIM_MISMATCH")) && !strcmp(s, "map");
}

int ld_config_load(void) {
    ld_log_report_env();
    if (env.report_bad[0]) LD_WARN("%s", env.report_bad);
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
            ld_log_write(LD_LOG_ERROR, "%s", err);   /* always shown: the user asked for a policy */
            /* The parser says whether a valid `strict = on` stands in the file it refused. */
            if (p.strict) strict_fail = 1;
            ld_policy_free(&p);
            if (strict_fail) {
                ld_log_write(LD_LOG_ERROR, "strict = on: refusing to run with a bad policy (exit status 3)");
                return 3;
            }
            LD_INFO("running as stock because the policy is bad");
        }
    }
    ld_cfg.backend = ld_cfg.policy.backend;
    if (env.state[0] && !ld_cfg.policy_error[0]) {
        int st = ld_state_parse(env.state);
        if (st < 0) LD_WARN("LDSHIM_STATE=%s is not stock|memory|full|mismatch; keeping %s", env.state, ld_state_name(ld_cfg.state));
        else ld_cfg.state = (ld_state_t)st;
    }
    if (env.backend[0]) {
        int b = parse_backend(env.backend);
        if (b < 0) LD_WARN("LDSHIM_BACKEND=%s is not auto|native|mlopart|emulated|off; keeping %s", env.backend,
                           ld_backend_name(ld_cfg.backend));
        else ld_cfg.backend = (ld_backend_kind_t)b;
    }
    ld_cfg.mismatch_map = env.mismatch_map;
    if (ld_cfg.backend == LD_BACKEND_OFF && ld_cfg.state != LD_STATE_STOCK)
        LD_INFO("backend off: tagged requests pass through; the map is still published");
    LD_INFO("state %s, backend %s, %d rule(s)%s%s", ld_state_name(ld_cfg.state), ld_backend_name(ld_cfg.backend),
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
