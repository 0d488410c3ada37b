/* config.c — environment and policy, read once before main(). */
#include "shim/config.h"
#include "shim/compute.h"
#include "shim/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ld_config_t ld_cfg;

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
        LD_WARN("state %s sets the compute placement itself; compute = %s is ignored", ld_state_name(s),
                ld_compute_format(&ld_cfg.compute, a, sizeof a));
    }
    ld_cfg.compute = c;
}

int ld_config_init(void) {
    memset(&ld_cfg, 0, sizeof ld_cfg);
    ld_policy_init(&ld_cfg.policy);
    ld_cfg.state = LD_STATE_STOCK;

    const char *rep = getenv("LDSHIM_REPORT");
    if (rep && *rep) snprintf(ld_cfg.report_path, sizeof ld_cfg.report_path, "%s", rep);

    const char *path = getenv("LDSHIM_POLICY");
    int strict_fail = 0;
    const char *sx = getenv("LDSHIM_STRICT");
    if (sx && !strcmp(sx, "1")) strict_fail = 1;
    if (path && *path) {
        snprintf(ld_cfg.policy_path, sizeof ld_cfg.policy_path, "%s", path);
        char err[512];
        ld_policy_t p;
        if (ld_policy_load(path, &p, err, sizeof err) == 0) {
            ld_cfg.policy = p;
            ld_cfg.state = p.state_set ? p.state : LD_STATE_FULL;
        } else {
            snprintf(ld_cfg.policy_error, sizeof ld_cfg.policy_error, "%s", err);
            ld_log_write(LD_LOG_ERROR, "%s", err);   /* always shown: the user asked for a policy */
            /* `strict = on` may be in the file we could not parse: look for it by text. */
            FILE *f = fopen(path, "r");
            if (f) {
                char line[256];
                while (fgets(line, sizeof line, f)) {
                    char k[32], v[32];
                    if (sscanf(line, " %31[a-z_] = %31[a-z]", k, v) == 2 && !strcmp(k, "strict") && !strcmp(v, "on"))
                        strict_fail = 1;
                }
                fclose(f);
            }
            if (strict_fail) {
                ld_log_write(LD_LOG_ERROR, "strict = on: refusing to run with a bad policy (exit status 3)");
                return 3;
            }
            LD_INFO("running as stock because the policy is bad");
            ld_policy_free(&p);
            ld_policy_init(&ld_cfg.policy);
        }
    }
    ld_cfg.backend = ld_cfg.policy.backend;

    const char *st = getenv("LDSHIM_STATE");
    if (st && *st && !ld_cfg.policy_error[0]) {
        int s = ld_state_parse(st);
        if (s < 0)
            LD_WARN("LDSHIM_STATE=%s is not stock|memory|full|mismatch|memory-only|compute-only|full-ld|mismatch-ld|"
                    "sm-control; keeping %s", st, ld_state_name(ld_cfg.state));
        else ld_cfg.state = (ld_state_t)s;
    }
    ld_cfg.domain = ld_cfg.policy.domain;
    const char *dm = getenv("LDSHIM_DOMAIN");
    if (dm && *dm) {
        char *end;
        long v = strtol(dm, &end, 10);
        if (*end || end == dm || v < 0 || v > 7) LD_WARN("LDSHIM_DOMAIN=%s is not a domain number 0..7; keeping %d", dm, ld_cfg.domain);
        else ld_cfg.domain = (int)v;
    }
    const char *be = getenv("LDSHIM_BACKEND");
    if (be && *be) {
        int b = parse_backend(be);
        if (b < 0) LD_WARN("LDSHIM_BACKEND=%s is not auto|native|mlopart|emulated|off; keeping %s", be, ld_backend_name(ld_cfg.backend));
        else ld_cfg.backend = (ld_backend_kind_t)b;
    }
    ld_cfg.compute = ld_cfg.policy.compute;
    ld_cfg.compute_split = ld_cfg.policy.compute_split;
    ld_cfg.compute_sms = ld_cfg.policy.compute_sms;
    const char *cv = getenv("LDSHIM_COMPUTE");
    if (cv && *cv) {
        ld_compute_t c;
        size_t bad;
        char why[160];
        if (ld_compute_scan(cv, strlen(cv), &c, &bad, why, sizeof why) != 0) LD_WARN("LDSHIM_COMPUTE=%s: %s; keeping the policy's", cv, why);
        else ld_cfg.compute = c;
    }
    const char *cs = getenv("LDSHIM_COMPUTE_SPLIT");
    if (cs && *cs) {
        int m = ld_split_parse(cs);
        if (m < 0) LD_WARN("LDSHIM_COMPUTE_SPLIT=%s is not aligned|fine|backfill; keeping %s", cs, ld_split_name(ld_cfg.compute_split));
        else ld_cfg.compute_split = (ld_split_t)m;
    }
    const char *cn = getenv("LDSHIM_COMPUTE_SMS");
    if (cn && *cn) {
        char *end;
        unsigned long v = strtoul(cn, &end, 10);
        if (*end || end == cn || v > LDSHIM_COMPUTE_MAX_SMS) LD_WARN("LDSHIM_COMPUTE_SMS=%s is not an SM count 0..%d; keeping %u", cn, LDSHIM_COMPUTE_MAX_SMS, ld_cfg.compute_sms);
        else ld_cfg.compute_sms = (uint32_t)v;
    }
    const char *cc = getenv("LDSHIM_COMPUTE_CONTEXTS");
    if (cc && *cc) {
        if (!strcmp(cc, "thread")) ld_cfg.compute_thread_ctx = 1;
        else if (strcmp(cc, "shared")) LD_WARN("LDSHIM_COMPUTE_CONTEXTS=%s is not shared|thread; using shared", cc);
    }
    const char *cu = getenv("LDSHIM_COMPUTE_CURRENT");
    if (cu && *cu) {
        if (!strcmp(cu, "green")) ld_cfg.compute_report_green = 1;
        else if (strcmp(cu, "primary")) LD_WARN("LDSHIM_COMPUTE_CURRENT=%s is not primary|green; using primary", cu);
    }
    const char *ck = getenv("LDSHIM_COMPUTE_SMCOUNT");
    if (ck && *ck) {
        if (!strcmp(ck, "bound")) ld_cfg.compute_bound_sms = 1;
        else if (strcmp(ck, "device")) LD_WARN("LDSHIM_COMPUTE_SMCOUNT=%s is not device|bound; using device", ck);
    }
    resolve_state();
    const char *pf = getenv("LDSHIM_PROBE_FORCE");
    ld_compute_opts_t co = { ld_cfg.state != LD_STATE_STOCK, ld_cfg.compute, ld_cfg.compute_split, ld_cfg.compute_sms,
                             ld_cfg.compute_thread_ctx, ld_cfg.compute_report_green, ld_cfg.compute_bound_sms,
                             pf && !strcmp(pf, "1"), ld_state_is_study(ld_cfg.state),
                             ld_cfg.state == LD_STATE_MISMATCH_LD };
    ld_compute_configure(&co);
    const char *mm = getenv("LDSHIM_MISMATCH");
    if (mm && !strcmp(mm, "map")) ld_cfg.mismatch_map = 1;
    if (ld_cfg.backend == LD_BACKEND_OFF && ld_cfg.state != LD_STATE_STOCK)
        LD_INFO("backend off: tagged requests pass through; the map is still published");
    char comp[32];
    LD_INFO("state %s, backend %s, compute %s, %d rule(s)%s%s", ld_state_name(ld_cfg.state),
            ld_backend_name(ld_cfg.backend), ld_compute_format(&ld_cfg.compute, comp, sizeof comp),
            ld_cfg.policy.n_rules, path ? ", policy " : "", path ? path : "");
    return 0;
}
