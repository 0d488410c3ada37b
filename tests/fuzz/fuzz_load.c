/* fuzz_load.c — libFuzzer target for reading a policy from the file system and for the
 * shim's configuration (policy/load.c, shim/config.c), not only the parser.
 *
 * Input: byte 0 picks what LDSHIM_POLICY names (a regular file holding the rest of the input,
 * a sparse file of a size taken from the input, a FIFO, a directory, /dev/zero, a link to
 * one of those, a path too long, a relative path, a missing file); byte 1 picks hostile
 * environment values (LDSHIM_STATE, LDSHIM_BACKEND, LDSHIM_STRICT, LDSHIM_REPORT, LDSHIM_COMPUTE,
 * LDSHIM_DOMAIN). Checks:
 * nothing blocks or reads past the cap (a FIFO or /dev/zero would hang or exhaust memory),
 * a regular file loads exactly as the parser parses its bytes (result, message, strict),
 * every failure is one "<path>:<line>:<col>: ..." line, and ld_config_load returns 3 only
 * when strict was asked for and the policy is bad, else leaves a valid state and hands the
 * compute binding options it implies on once (to a stand-in for shim/compute.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policy/policy.h"
#include "shim/compute.h"
#include "shim/config.h"
#include "shim/log.h"
#include "shim/options.h"

/* Stands in for shim/compute.c, which ld_config_load hands the compute options to: records
 * them so that every input can be checked against the state it resolved to. */
static ld_compute_opts_t g_opts;
static int g_opts_calls;
void ld_compute_configure(const ld_compute_opts_t *o) {
    g_opts = *o;
    g_opts_calls++;
}

static char g_dir[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    snprintf(g_dir, sizeof g_dir, "/tmp/ldshim-fuzz-load-XXXXXX");
    if (!mkdtemp(g_dir)) abort();
    char p[128];
    snprintf(p, sizeof p, "%s/fifo", g_dir);
    if (mkfifo(p, 0600) != 0) abort();
    snprintf(p, sizeof p, "%s/dir", g_dir);
    if (mkdir(p, 0700) != 0) abort();
    snprintf(p, sizeof p, "%s/zero-link", g_dir);
    if (symlink("/dev/zero", p) != 0) abort();
    snprintf(p, sizeof p, "%s/fifo-link", g_dir);
    if (symlink("fifo", p) != 0) abort();
    ld_log_level = LD_LOG_NONE;   /* the error lines the shim always prints still come out */
    return 0;
}

static void write_file(const char *path, const uint8_t *d, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) abort();
    if (n && write(fd, d, n) != (ssize_t)n) abort();
    close(fd);
}

static int one_line(const char *err, const char *path) {
    size_t pl = strlen(path);
    return strncmp(err, path, pl) == 0 && err[pl] == ':' && !strchr(err, '\n');
}

/* ld_policy_load must give what ld_policy_parse gives for the same bytes. */
static void check_regular(const char *path, const uint8_t *d, size_t n) {
    char e1[512], e2[512];
    ld_policy_t a, b;
    int r1 = ld_policy_load(path, &a, e1, sizeof e1);
    int r2 = ld_policy_parse((const char *)d, n, path, &b, e2, sizeof e2);
    if (r1 != r2) abort();
    if (r1 != 0 && (strcmp(e1, e2) != 0 || a.strict != b.strict || !one_line(e1, path))) abort();
    if (r1 == 0 && (a.n_rules != b.n_rules || a.state != b.state || a.strict != b.strict)) abort();
    ld_policy_free(&a);
    ld_policy_free(&b);
}

static const char *const kStates[] = { NULL, "full", "stock", "bogus", "", "mismatch\x1b[0m", "full-ld", "sm-control" };
static const char *const kBackends[] = { NULL, "native", "off", "x" };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    unsigned kind = data[0] % 10, envsel = data[1];
    const uint8_t *body = data + 2;
    size_t n = size - 2;
    char path[8192];
    snprintf(path, sizeof path, "%s/p.policy", g_dir);
    unlink(path);
    switch (kind) {
    case 0: case 1: case 2:
        write_file(path, body, n);
        check_regular(path, body, n);
        break;
    case 3: {                                   /* sparse: size from the input, up to 8 GiB */
        uint64_t len = 0;
        for (size_t i = 0; i < n && i < 5; i++) len = len << 8 | body[i];
        len %= (8ull << 30);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || ftruncate(fd, (off_t)len) != 0) abort();
        close(fd);
        break;
    }
    case 4: snprintf(path, sizeof path, "%s/fifo", g_dir); break;
    case 5: snprintf(path, sizeof path, "%s/dir", g_dir); break;
    case 6: snprintf(path, sizeof path, "%s/%s", g_dir, envsel & 1 ? "zero-link" : "fifo-link"); break;
    case 7: snprintf(path, sizeof path, "/dev/zero"); break;
    case 8: {                                   /* a path longer than the shim keeps */
        size_t k = snprintf(path, sizeof path, "%s/", g_dir);
        size_t want = 4000 + (n % 200);
        while (k < want && k + 1 < sizeof path) path[k++] = 'a';
        path[k] = 0;
        break;
    }
    default: snprintf(path, sizeof path, "%s/missing.policy", g_dir); break;
    }
    if (kind >= 3) {                            /* never a success, never a hang */
        char e[sizeof path + 512];
        ld_policy_t p;
        int rc = ld_policy_load(path, &p, e, sizeof e);
        if (rc == 0 && kind != 3) abort();             /* a small sparse file may be empty: valid */
        if (rc != 0 && (!one_line(e, path) || p.n_rules || p.rules)) abort();
        ld_policy_free(&p);
    }

    /* The configuration over the same file, with environment values from the input. */
    setenv("LDSHIM_POLICY", path, 1);
    const char *st = kStates[envsel % 8], *be = kBackends[(envsel >> 3) % 4];
    if (st) setenv("LDSHIM_STATE", st, 1); else unsetenv("LDSHIM_STATE");
    if (be) setenv("LDSHIM_BACKEND", be, 1); else unsetenv("LDSHIM_BACKEND");
    int strict_env = (envsel >> 5) & 1;
    if (strict_env) setenv("LDSHIM_STRICT", "1", 1); else unsetenv("LDSHIM_STRICT");
    if (envsel >> 6 & 1) setenv("LDSHIM_REPORT", "/dev/null", 1); else unsetenv("LDSHIM_REPORT");
    static const char *const kCompute[] = { NULL, "domain:1", "spread:56", "domain:9", "spread:0", "all", "cores" };
    static const char *const kDomain[] = { NULL, "1", "7", "8", "-1", "x" };
    const char *cv = envsel >> 7 & 1 ? kCompute[n % 7] : NULL, *dv = envsel >> 7 & 1 ? kDomain[(n / 7) % 6] : NULL;
    if (cv) setenv("LDSHIM_COMPUTE", cv, 1); else unsetenv("LDSHIM_COMPUTE");
    if (dv) setenv("LDSHIM_DOMAIN", dv, 1); else unsetenv("LDSHIM_DOMAIN");
    ld_options_reread();   /* the shim copies its variables once; each input sets its own */
    ld_config_init();
    g_opts_calls = 0;
    int rc = ld_config_load();
    if (rc != 0 && rc != 3) abort();
    if (rc == 3 && !ld_cfg.policy_error[0]) abort();            /* strict only for a bad policy */
    if (rc == 3 && !strict_env) {
        /* then the file itself said strict = on, and parsing it says so too */
        char e[512];
        ld_policy_t p;
        if (ld_policy_load(path, &p, e, sizeof e) == 0 || !p.strict) abort();
        ld_policy_free(&p);
    }
    if (rc == 0 && (unsigned)ld_cfg.state >= LD_STATE_COUNT) abort();
    if (rc == 0) {
        /* The compute options are handed on once, and always describe a placement the
         * binding can build: a domain 0..7, a spread of 1..256 SMs (0 only as the study
         * states' "as many as the domain binding"), the study flags only for study states. */
        int study = ld_state_is_study(ld_cfg.state);
        const ld_compute_t *c = &g_opts.compute;
        if (g_opts_calls != 1 || g_opts.requested != (ld_cfg.state != LD_STATE_STOCK)) abort();
        if (c->kind == LD_COMPUTE_DOMAIN && c->domain > 7) abort();
        if (c->kind == LD_COMPUTE_SPREAD && (c->sms > LDSHIM_COMPUTE_MAX_SMS || (c->sms == 0 && !study))) abort();
        if (g_opts.equalize != study || g_opts.next_domain != (ld_cfg.state == LD_STATE_MISMATCH_LD)) abort();
        if (ld_cfg.domain < 0 || ld_cfg.domain > 7) abort();
        if (study && (ld_cfg.mem_domain >= 0) == ld_cfg.mem_stock) abort();   /* one or the other */
        if (!study && (ld_cfg.mem_domain >= 0 || ld_cfg.mem_stock)) abort();
    }
    if (rc == 0 && ld_cfg.policy_error[0] && ld_cfg.policy.n_rules) abort();   /* a bad file tags nothing */
    ld_config_reset();
    unsetenv("LDSHIM_POLICY");
    unsetenv("LDSHIM_COMPUTE");
    unsetenv("LDSHIM_DOMAIN");
    return 0;
}
