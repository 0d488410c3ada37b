/* options.c — the LDSHIM_* table and the one copy of the environment (options.h). */
#include "shim/options.h"

#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const ld_option_t table[LD_OPT_COUNT] = {
#define LD_OPT_ROW_(id, kind, who, dflt, help) \
    [LD_OPT_##id] = { "LDSHIM_" #id, LD_OPT_##kind, LD_OPT_##who, dflt, help },
    LD_OPTIONS(LD_OPT_ROW_)
#undef LD_OPT_ROW_
};

/* Copies, not pointers into environ: the program may setenv or putenv over those. A copy
 * that cannot be made (no memory at start) reads as unset. A value over its length limit,
 * or a relative path that cannot be made absolute, reads as unset too and keeps the reason
 * (ld_opt_refused): never a shortened value. */
static char *value[LD_OPT_COUNT];
static char refused[LD_OPT_COUNT][200];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Path variables whose bare name (no '/') is searched for, not a file here: the dynamic
 * loader finds LDSHIM_LIBCUDA=libcuda.so.1, PATH finds the MPS control program. */
static int searched(int i) {
    return i == LD_OPT_LIBCUDA || i == LD_OPT_MPS_CONTROL || i == LD_OPT_MLOPART_HELPER;
}

/* A relative path made absolute against the directory the process started in, once: a
 * program that chdir's later still reads and writes what the user named. */
static char *absolute(int i, const char *s) {
    if (s[0] == '/' || (searched(i) && !strchr(s, '/'))) return strdup(s);
    char cwd[LD_OPT_PATH_MAX + 1];
    if (!getcwd(cwd, sizeof cwd)) {
        snprintf(refused[i], sizeof refused[i], "is relative and the start directory cannot be read");
        return NULL;
    }
    const char *rel = s[0] == '.' && s[1] == '/' ? s + 2 : s;
    size_t cl = strlen(cwd), rl = strlen(rel), sep = cl > 1;
    if (cl + sep + rl > LD_OPT_PATH_MAX) {
        snprintf(refused[i], sizeof refused[i], "is relative, and in the start directory it makes a path of %zu bytes "
                 "(the limit is %d)", cl + sep + rl, LD_OPT_PATH_MAX);
        return NULL;
    }
    char *out = malloc(cl + sep + rl + 1);
    if (!out) return NULL;
    memcpy(out, cwd, cl);
    if (sep) out[cl] = '/';
    memcpy(out + cl + sep, rel, rl + 1);
    return out;
}

static const char *const env_name[LD_ENV_COUNT] = { [LD_ENV_XDG_CACHE_HOME] = "XDG_CACHE_HOME",
                                                      [LD_ENV_HOME] = "HOME" };
static char *env_value[LD_ENV_COUNT];

static void copy_all(void) {
    for (int i = 0; i < LD_ENV_COUNT; i++) {
        const char *s = getenv(env_name[i]);
        env_value[i] = s && s[0] == '/' && strlen(s) <= LD_OPT_PATH_MAX ? strdup(s) : NULL;
    }
    for (int i = 0; i < LD_OPT_COUNT; i++) {
        const char *s = getenv(table[i].name);
        refused[i][0] = 0;
        value[i] = NULL;
        if (!s || !*s) continue;
        size_t len = strlen(s), max = ld_opt_max_len((ld_opt_t)i);
        if (len > max) {
            snprintf(refused[i], sizeof refused[i], "is %zu bytes long (the limit is %zu)", len, max);
            continue;
        }
        value[i] = table[i].kind == LD_OPT_PATH ? absolute(i, s) : strdup(s);
    }
}

size_t ld_opt_max_len(ld_opt_t id) {
    if ((unsigned)id >= LD_OPT_COUNT) return 0;
    return table[id].kind == LD_OPT_PATH ? LD_OPT_PATH_MAX : table[id].kind == LD_OPT_LIST ? 1023 : LD_OPT_WORD_MAX;
}

const char *ld_opt_refused(ld_opt_t id) {
    if ((unsigned)id >= LD_OPT_COUNT) return NULL;
    ld_options_init();
    return refused[id][0] ? refused[id] : NULL;
}

void ld_options_init(void) { pthread_once(&once, copy_all); }

void ld_options_reread(void) {
    ld_options_init();
    for (int i = 0; i < LD_OPT_COUNT; i++) {
        free(value[i]);
        value[i] = NULL;
    }
    for (int i = 0; i < LD_ENV_COUNT; i++) {
        free(env_value[i]);
        env_value[i] = NULL;
    }
    copy_all();
}

const char *ld_opt(ld_opt_t id) {
    if ((unsigned)id >= LD_OPT_COUNT) return NULL;
    ld_options_init();
    return value[id];
}

const char *ld_env(ld_env_t id) {
    if ((unsigned)id >= LD_ENV_COUNT) return NULL;
    ld_options_init();
    return env_value[id];
}

const char *ld_env_name(ld_env_t id) { return (unsigned)id < LD_ENV_COUNT ? env_name[id] : NULL; }

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
