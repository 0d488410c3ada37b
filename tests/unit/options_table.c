/* options_table — the options table (shim/options.h) for tests/unit/test_options.sh.
 *
 *   options_table --markdown   the table as doc/shim.md's "Options" section holds it
 *   options_table --names      one name a line
 *   options_table --kinds      "NAME KIND AUDIENCE" a line (the hostile-path matrix), then
 *                              XDG_CACHE_HOME and HOME (ld_env) as "NAME path start-copy"
 *   options_table --check      the accessors' reading of the environment; prints one
 *                              "ok <what>" or "FAIL <what>" line per check, exits 1 on a failure */
#include "shim/mlopart_proto.h"
#include "shim/options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed;

static void check(int ok, const char *what) {
    printf("%s %s\n", ok ? "ok" : "FAIL", what);
    if (!ok) failed = 1;
}

/* One line of printable ASCII (a table row). */
static int printable(const char *s) {
    for (; *s; s++)
        if (*s < 0x20 || *s > 0x7e) return 0;
    return 1;
}

static int same(const char *a, const char *b) { return a && b && !strcmp(a, b); }

static int run_checks(void) {
    /* What the process started with: the first ask copies it. */
    check(same(ld_opt(LD_OPT_STATE), "full"), "the environment at start is copied (LDSHIM_STATE=full)");
    setenv("LDSHIM_STATE", "memory", 1);
    check(same(ld_opt(LD_OPT_STATE), "full"), "a later setenv does not change the copy");
    ld_options_reread();
    check(same(ld_opt(LD_OPT_STATE), "memory"), "ld_options_reread copies again");
    setenv("LDSHIM_REPORT", "", 1);
    unsetenv("LDSHIM_POLICY");
    ld_options_reread();
    check(ld_opt(LD_OPT_REPORT) == NULL, "an empty value reads as unset");
    check(ld_opt(LD_OPT_POLICY) == NULL, "an unset variable reads as NULL");
    check(ld_opt(LD_OPT_COUNT) == NULL && ld_option(LD_OPT_COUNT) == NULL, "an id out of range has no value and no entry");
    static const char *const yes[] = { "1", "yes", "on", "true", "2" }, *const no[] = { "0", "no", "off", "false", "" };
    int t = 1, f = 1;
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
        setenv("LDSHIM_PROBE_FORCE", yes[i], 1);
        ld_options_reread();
        t &= ld_opt_true(LD_OPT_PROBE_FORCE);
    }
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
        setenv("LDSHIM_PROBE_FORCE", no[i], 1);
        ld_options_reread();
        f &= !ld_opt_true(LD_OPT_PROBE_FORCE);
    }
    check(t, "LDSHIM_PROBE_FORCE: 1, yes, on, true, 2 force");
    check(f, "LDSHIM_PROBE_FORCE: 0, no, off, false, empty do not");
    setenv("LDSHIM_STRICT", "yes", 1);
    ld_options_reread();
    int one_yes = ld_opt_one(LD_OPT_STRICT);
    setenv("LDSHIM_STRICT", "1", 1);
    ld_options_reread();
    check(!one_yes && ld_opt_one(LD_OPT_STRICT), "ld_opt_one: only \"1\"");
    check(!strcmp(ld_option(LD_OPT_INSIDE_MLOPART_HELPER)->name, LD_MLO_ENV_MARKER),
          "the helper's marker (LD_MLO_ENV_MARKER) is the table's LDSHIM_INSIDE_MLOPART_HELPER");
    int named = 1;
    for (int i = 0; i < LD_OPT_COUNT; i++) {
        const ld_option_t *o = ld_option((ld_opt_t)i);
        named &= o && !strncmp(o->name, "LDSHIM_", 7) && o->dflt && *o->dflt && o->help && *o->help &&
                 printable(o->dflt) && printable(o->help);
        for (int j = 0; j < i; j++) named &= strcmp(ld_option((ld_opt_t)j)->name, o->name) != 0;
    }
    check(named, "every entry has a distinct LDSHIM_ name, a default and a one-line description");
    return failed;
}

/* '|' inside a cell would end it: written as \| (which GitHub shows as |). */
static void cell(const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputs("\\|", stdout);
        else putchar(*s);
    }
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "--check")) return run_checks();
    if (!strcmp(mode, "--names")) {
        for (int i = 0; i < LD_OPT_COUNT; i++) printf("%s\n", ld_option((ld_opt_t)i)->name);
        return 0;
    }
    if (!strcmp(mode, "--kinds")) {   /* tests/hostile/run_matrix.py: the path variables */
        for (int i = 0; i < LD_OPT_COUNT; i++)
            printf("%s %s %s\n", ld_option((ld_opt_t)i)->name, ld_opt_kind_name(ld_option((ld_opt_t)i)->kind),
                   ld_opt_audience_name(ld_option((ld_opt_t)i)->audience));
        /* The other programs' path variables copied at start (ld_env): path inputs too. */
        for (int i = 0; i < LD_ENV_COUNT; i++) printf("%s path start-copy\n", ld_env_name((ld_env_t)i));
        return 0;
    }
    if (!strcmp(mode, "--audience")) {
        for (int i = 0; i < LD_OPT_COUNT; i++)
            printf("%s %s\n", ld_option((ld_opt_t)i)->name, ld_opt_audience_name(ld_option((ld_opt_t)i)->audience));
        return 0;
    }
    if (!strcmp(mode, "--markdown")) {
        puts("| variable | kind | for | unset | what it does |");
        puts("| --- | --- | --- | --- | --- |");
        for (int i = 0; i < LD_OPT_COUNT; i++) {
            const ld_option_t *o = ld_option((ld_opt_t)i);
            printf("| `%s` | %s | %s | ", o->name, ld_opt_kind_name(o->kind), ld_opt_audience_name(o->audience));
            cell(o->dflt);
            fputs(" | ", stdout);
            cell(o->help);
            puts(" |");
        }
        return 0;
    }
    fprintf(stderr, "usage: options_table --markdown | --names | --kinds | --audience | --check\n");
    return 2;
}
