/* cli.c — ldshim-policy: check a policy file, or ask which rule tags a request.
 *
 *   ldshim-policy check FILE...             validate, print options and rules
 *   ldshim-policy match FILE SIZE [API]     which rule tags SIZE bytes from API
 *
 * Not part of POLICY_OBJS (it has main); built as build/bin/ldshim-policy by policy.mk.
 * Exit status: 0 success (match: tagged or not, see output), 1 a bad policy file,
 * 2 bad usage. Results go to stdout, errors to stderr. */
#include <stdio.h>
#include <string.h>
#include "ldshim_build.h"   /* generated: LDSHIM_BUILD_VERSION, LDSHIM_BUILD_REVISION */
#include "policy/policy.h"
#include "policy/policy_internal.h"
#include "shim/file.h"

static void usage(FILE *f) {
    fputs("usage: ldshim-policy check FILE...\n"
          "       ldshim-policy match FILE SIZE [runtime|driver|any]\n"
          "       ldshim-policy --help | --version\n"
          "\n"
          "check  parse each policy file; print its options and rules, or the first error as\n"
          "       'ldshim: error: policy: FILE:LINE:COL: what was expected'. Exit 1 if any file is bad.\n"
          "match  print the rule that tags a request of SIZE bytes (units B KiB MiB GiB TiB)\n"
          "       made through API (default any: origin unknown), or 'untagged'.\n"
          "\n"
          "Options are --help and --version; '--' ends them, for a FILE whose name starts\n"
          "with '-'. Control characters of file names are shown as \\xNN. A FILE must be a\n"
          "regular file of at most 1 MiB. The language is described in doc/policy.md.\n", f);
}

/* File names and messages that quote them reach a terminal: control bytes (escape codes,
 * newlines) as \xNN. */
static const char *shown(const char *s, char *buf, size_t n) { return ld_file_printable(s, buf, n); }

/* One line for a usage error, then a pointer to --help: exit status 2. */
static int bad_usage(const char *what, const char *arg_raw) {
    char b[200];
    const char *arg = arg_raw ? shown(arg_raw, b, sizeof b) : NULL;
    fprintf(stderr, "ldshim-policy: %s%s%s%s (see ldshim-policy --help)\n", what,
            arg ? " '" : "", arg ? arg : "", arg ? "'" : "");
    return 2;
}

static void print_policy(const char *path_raw, const ld_policy_t *p) {
    char path[1024];
    shown(path_raw, path, sizeof path);
    char pool[32], split[32];
    ld_pol_fmt_size(p->pool_cap, pool, sizeof pool);
    ld_pol_fmt_size(p->min_split, split, sizeof split);
    printf("%s: ok, %d rule%s\n", path, p->n_rules, p->n_rules == 1 ? "" : "s");
    printf("  state %s%s, backend %s, probe %s, map %s, strict %s, pool %s, min_split %s\n",
           ld_state_name(p->state), p->state_set ? "" : " (default)", ld_backend_name(p->backend),
           ld_probe_name(p->probe), ld_map_name(p->map), p->strict ? "on" : "off", pool, split);
    char comp[32];
    printf("  compute %s, compute_split %s, compute_sms %u%s\n", ld_compute_format(&p->compute, comp, sizeof comp),
           ld_split_name(p->compute_split), p->compute_sms, p->compute_sms ? "" : " (no cap)");
    // NOTES: the policy holds rules sorted for matching; print them in file order.
    int last_line = 0;
    for (int k = 0; k < p->n_rules; k++) {
        int i = -1;
        for (int j = 0; j < p->n_rules; j++)
            if (p->rules[j].line > last_line && (i < 0 || p->rules[j].line < p->rules[i].line)) i = j;
        if (i < 0) break;
        last_line = p->rules[i].line;
        const ld_rule_t *r = &p->rules[i];
        char size[80], occ[LD_MAX_OCC_RANGES * 44 + 8] = "all", place[16];
        ld_pol_fmt_range(r->size_min, r->size_max, size, sizeof size);
        if (r->n_occ > 0) {
            size_t u = 0;
            for (int k = 0; k < r->n_occ && u < sizeof occ; k++) {
                int w = r->occ[k].first == r->occ[k].last
                    ? snprintf(occ + u, sizeof occ - u, "%s%llu", k ? "," : "",
                               (unsigned long long)r->occ[k].first)
                    : snprintf(occ + u, sizeof occ - u, "%s%llu-%llu", k ? "," : "",
                               (unsigned long long)r->occ[k].first,
                               (unsigned long long)r->occ[k].last);
                if (w < 0) break;
                u += (size_t)w;
            }
        }
        if (r->placement == LD_PLACE_DOMAIN) snprintf(place, sizeof place, "domain:%d", r->domain);
        else snprintf(place, sizeof place, "%s", r->placement == LD_PLACE_STOCK ? "stock" : "split");
        printf("  rule %s (line %d): size %s, api %s, occurrence %s, placement %s\n", r->name,
               r->line, size, ld_api_name(r->api), occ, place);
    }
}

static int cmd_check(int n, char **files) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        char err[512];
        ld_policy_t p;
        if (ld_policy_load(files[i], &p, err, sizeof err) != 0) {
            char line[2048];
            fprintf(stderr, "ldshim: error: policy: %s\n", shown(err, line, sizeof line));   /* as the shim writes it */
            bad = 1;
            continue;
        }
        print_policy(files[i], &p);
        ld_policy_free(&p);
    }
    return bad;
}

static int cmd_match(const char *file, const char *size_s, const char *api_s) {
    uint64_t size;
    int api = LD_API_ANY;
    if (ld_parse_size(size_s, strlen(size_s), &size) != 0) {
        char b[200];
        fprintf(stderr, "ldshim-policy: bad size '%s': expected a whole number with an optional "
                        "unit B, KiB, MiB, GiB or TiB\n", shown(size_s, b, sizeof b));
        return 2;
    }
    if (api_s && (api = ld_pol_lookup(ld_pol_api_words, LD_API_COUNT, api_s, strlen(api_s))) < 0) {
        char b[200];
        fprintf(stderr, "ldshim-policy: bad api '%s': expected runtime, driver or any\n", shown(api_s, b, sizeof b));
        return 2;
    }
    char err[512];
    ld_policy_t p;
    if (ld_policy_load(file, &p, err, sizeof err) != 0) {
        char line[2048];
        fprintf(stderr, "ldshim: error: policy: %s\n", shown(err, line, sizeof line));   /* as the shim writes it */
        return 1;
    }
    int i = ld_policy_match(&p, size, (ld_api_t)api);
    if (i < 0) printf("untagged\n");
    else printf("rule %s (line %d)\n", p.rules[i].name, p.rules[i].line);
    ld_policy_free(&p);
    return 0;
}

int main(int argc, char **argv) {
    /* Options first (anywhere before "--"), so that "check --json F" is an unknown option,
     * not a file named --json. The operands are gathered in place at the front of argv. */
    char **args = argv;
    int n = 0, opts = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (opts && !strcmp(a, "--")) { opts = 0; continue; }
        if (opts && (!strcmp(a, "--help") || !strcmp(a, "-h"))) {
            usage(stdout);
            return 0;
        }
        if (opts && !strcmp(a, "--version")) {
            printf("ldshim-policy %s (git %s)\n", LDSHIM_BUILD_VERSION, LDSHIM_BUILD_REVISION);
            return 0;
        }
        if (opts && a[0] == '-' && a[1] != '\0') return bad_usage("unknown option", a);
        args[n++] = argv[i];
    }
    if (n == 0) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(args[0], "check")) {
        if (n < 2) return bad_usage("check needs at least one FILE", NULL);
        return cmd_check(n - 1, args + 1);
    }
    if (!strcmp(args[0], "match")) {
        if (n < 3 || n > 4) return bad_usage("match takes FILE SIZE [runtime|driver|any]", NULL);
        return cmd_match(args[1], args[2], n == 4 ? args[3] : NULL);
    }
    return bad_usage("unknown command", args[0]);
}
