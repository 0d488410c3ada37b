/* options.c — the LDSHIM_* table and the one copy of the environment (options.h). */
#include "shim/options.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const ld_option_t table[LD_OPT_COUNT] = {
#define LD_OPT_ROW_(id, kind, who, dflt, help) \
    [LD_OPT_##id] = { "LDSHIM_" #id, LD_OPT_##kind, LD_OPT_##who, dflt, help },
    LD_OPTIONS(LD_OPT_ROW_)
#undef LD_OPT_ROW_
};

/* Copies, not pointers into environ: the program may setenv or putenv over those. A copy
 * that cannot be made (no memory at start) reads as unset. */
static char *value[LD_OPT_COUNT];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void copy_all(void) {
    for (int i = 0; i < LD_OPT_COUNT; i++) {
        const char *s = getenv(table[i].name);
        value[i] = s && *s ? strdup(s) : NULL;
    }
}

void ld_options_init(void) { pthread_once(&once, copy_all); }

void ld_options_reread(void) {
    ld_options_init();
    for (int i = 0; i < LD_OPT_COUNT; i++) {
        free(value[i]);
        value[i] = NULL;
    }
    copy_all();
}

const char *ld_opt(ld_opt_t id) {
    if ((unsigned)id >= LD_OPT_COUNT) return NULL;
    ld_options_init();
    return value[id];
}

int ld_opt_true(ld_opt_t id) {
    const char *v = ld_opt(id);
    return v && strcmp(v, "0") && strcmp(v, "no") && strcmp(v, "off") && strcmp(v, "false");
}

int ld_opt_one(ld_opt_t id) {
    const char *v = ld_opt(id);
    return v && !strcmp(v, "1");
}

const ld_option_t *ld_option(ld_opt_t id) { return (unsigned)id < LD_OPT_COUNT ? &table[id] : NULL; }

const char *ld_opt_kind_name(ld_opt_kind_t k) {
    switch (k) {
    case LD_OPT_PATH: return "path";
    case LD_OPT_WORD: return "word";
    case LD_OPT_NUMBER: return "number";
    case LD_OPT_FLAG: return "flag";
    case LD_OPT_LIST: return "list";
    }
    return "?";
}

const char *ld_opt_audience_name(ld_opt_audience_t a) {
    switch (a) {
    case LD_OPT_USER: return "user";
    case LD_OPT_TEST: return "tests";
    case LD_OPT_INTERNAL: return "internal";
    }
    return "?";
}
