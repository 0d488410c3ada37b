/* options.h — every LDSHIM_* environment variable, in one table (mimalloc's options table,
 * NCCL's NCCL_PARAM): its name, kind, default and a one-line description. No file reads one
 * with getenv; each asks ld_opt().
 *
 * The environment is copied once, the first time anything asks (the shim's constructor asks
 * first; a tool or a test that links these objects without the constructor asks at its first
 * ld_opt or ld_options_init): the program may change its own environment later, from any
 * thread, and getenv is not safe against that. Copying prints nothing and reads no file.
 * `LDSHIM_LOG=debug` prints the table (value, and whether set or default) at the shim's
 * first CUDA call (config.c), never earlier, so a process that never touches CUDA stays
 * silent.
 *
 * An empty value counts as unset, for every variable. The table depends on libc only: the
 * MLOPart helper links it without the shim's logger. doc/shim.md's "Options" table is this
 * table (tests/unit/test_options.sh checks the two, and the README, against each other). */
#ifndef LDSHIM_OPTIONS_H
#define LDSHIM_OPTIONS_H

#include <stddef.h>

typedef enum {
    LD_OPT_PATH,     /* a file or directory                                           */
    LD_OPT_WORD,     /* one of a few words                                            */
    LD_OPT_NUMBER,   /* a decimal number                                              */
    LD_OPT_FLAG,     /* 1 (or the word the description names) turns it on             */
    LD_OPT_LIST,     /* comma-separated words                                         */
} ld_opt_kind_t;

/* Who sets it: the user, the tests only, or the shim itself for its own helper. */
typedef enum { LD_OPT_USER, LD_OPT_TEST, LD_OPT_INTERNAL } ld_opt_audience_t;

/* X(ID, kind, audience, default, description). The name is "LDSHIM_" #ID. The default is
 * what the shim does when the variable is unset, in words. */
#define LD_OPTIONS(X)                                                                                            \
    X(POLICY, PATH, USER, "none: nothing is tagged",                                                             \
      "policy file (doc/policy.md); a relative path is taken from the directory the process started in")         \
    X(STATE, WORD, USER, "the policy's state; without one: compute-only for compute domain:N, else stock",      \
      "stock|memory|full|mismatch|memory-only|compute-only|full-ld|mismatch-ld|sm-control; overrides the policy") \
    X(DOMAIN, NUMBER, USER, "the policy's domain (0)",                                                           \
      "domain X of the study states, 0..7")                                                                      \
    X(BACKEND, WORD, USER, "the policy's backend (auto)",                                                        \
      "auto|native|mlopart|emulated|off; overrides the policy")                                                  \
    X(STRICT, FLAG, USER, "off",                                                                                 \
      "1: a bad or missing policy ends the program (status 3), like strict = on")                                \
    X(MISMATCH, WORD, USER, "mismatch swaps memory slices",                                                      \
      "map: the mismatch state inverts the published map instead")                                               \
    X(LOG, WORD, USER, "warn",                                                                                   \
      "error|warn|info|debug: which lines the shim writes to stderr")                                            \
    X(LOG_SUBSYS, LIST, USER, "all",                                                                             \
      "subsystems whose info and debug lines are written, e.g. probe,compute; ^ excludes (shim/log.h)")          \
    X(REPORT, PATH, USER, "none",                                                                                \
      "JSON report written at exit; %p expands to the pid; /dev/stdout: appended to fd 1")                       \
    X(COMPUTE, WORD, USER, "the policy's compute (all)",                                                         \
      "all|domain:N|spread:K; overrides the policy's compute; domain:N with no state named: compute-only in N") \
    X(COMPUTE_SPLIT, WORD, USER, "the policy's compute_split (aligned)",                                         \
      "aligned|fine|backfill: how SM groups are carved")                                                         \
    X(COMPUTE_SMS, NUMBER, USER, "the policy's compute_sms (0: no cap)",                                         \
      "cap on the SMs of a compute binding")                                                                     \
    X(COMPUTE_CONTEXTS, WORD, USER, "shared",                                                                    \
      "shared|thread: one green context per device or per thread")                                               \
    X(COMPUTE_CURRENT, WORD, USER, "primary",                                                                    \
      "primary|green: what cuCtxGetCurrent answers while bound")                                                 \
    X(COMPUTE_SMCOUNT, WORD, USER, "device",                                                                     \
      "device|bound: the SM-count attribute of a bound device")                                                  \
    X(CHUNK, WORD, USER, "32MiB on native and mlopart, slice on emulated",                                       \
      "bytes per physical handle of a localized slice (a size, or slice: one handle per slice)")               \
    X(PROBE_FORCE, FLAG, USER, "off",                                                                            \
      "set (not 0|no|off|false): re-probe instead of using the topology cache")                                  \
    X(PROBE_DUMP, PATH, USER, "none",                                                                            \
      "directory for every probe attempt's raw latency matrix (CSV)")                                            \
    X(CACHE_DIR, PATH, USER, "$XDG_CACHE_HOME/ldshim, else ~/.cache/ldshim",                                     \
      "topology cache directory")                                                                                \
    X(LIBCUDA, PATH, USER, "libcuda.so.1",                                                                       \
      "the driver library to use instead (the tests' fake driver)")                                              \
    X(MLOPART_HELPER, PATH, TEST, "ldshim-mlopart-helper beside libldshim.so",                                   \
      "the MLOPart helper program")                                                                              \
    X(MLOPART_TIMEOUT_MS, NUMBER, TEST, "10000 a request, 30000 a start",                                        \
      "MLOPart helper time limit, 1..86400000 ms")                                                               \
    X(MLOPART_DEBUG_LOGS, PATH, TEST, "none",                                                                    \
      "directory that keeps copies of the MPS daemon's log files")                                               \
    X(MLOPART_CLIENT_CVD, FLAG, TEST, "off",                                                                     \
      "1: the MLOPart helper sets CUDA_VISIBLE_DEVICES to the GPU's UUID")                                       \
    X(MPS_CONTROL, PATH, TEST, "nvidia-cuda-mps-control in PATH",                                                \
      "the MPS control program (a fake in tests)")                                                               \
    X(MLOPART_TEST_HOOK, LIST, TEST, "none",                                                                     \
      "faults the MLOPart tests inject (tests/mlopart)")                                                         \
    X(MLOPART_TEST_SINGLE, FLAG, TEST, "off",                                                                    \
      "1: the MLOPart helper serves one device (tests, bench)")                                                  \
    X(INSIDE_MLOPART_HELPER, FLAG, INTERNAL, "unset",                                                            \
      "set by the shim for its helper and the MPS processes: the shim stays inert there")

typedef enum {
#define LD_OPT_ENUM_(id, kind, who, dflt, help) LD_OPT_##id,
    LD_OPTIONS(LD_OPT_ENUM_)
#undef LD_OPT_ENUM_
    LD_OPT_COUNT
} ld_opt_t;

typedef struct {
    const char       *name;      /* "LDSHIM_..." */
    ld_opt_kind_t     kind;
    ld_opt_audience_t audience;
    const char       *dflt;
    const char       *help;
} ld_option_t;

/* Bounds of a value: a path at most 4095 bytes, a word or number 255, a list 1023. A value
 * over its bound is refused whole (ld_opt answers NULL, ld_opt_refused says why), never cut. A
 * relative path is made absolute against the directory the process started in, at the copy
 * (a bare name of LDSHIM_LIBCUDA, LDSHIM_MPS_CONTROL, LDSHIM_MLOPART_HELPER is searched for
 * and stays as it is). */
#define LD_OPT_PATH_MAX 4095
#define LD_OPT_WORD_MAX 255
size_t ld_opt_max_len(ld_opt_t id);

/* Why the variable's value was refused (too long; a relative path too long to make absolute),
 * or NULL when it was taken or is unset. The caller names the variable in one warning. */
const char *ld_opt_refused(ld_opt_t id);

/* Copy the environment, once per process (later calls return at once). Thread-safe. */
void ld_options_init(void);

/* The value as copied, or NULL when unset or empty. */
const char *ld_opt(ld_opt_t id);

/* 1 if the variable is set and not 0|no|off|false (LDSHIM_PROBE_FORCE's reading). */
int ld_opt_true(ld_opt_t id);

/* 1 if the variable is exactly "1" (LDSHIM_STRICT, LDSHIM_MLOPART_CLIENT_CVD, ...). */
int ld_opt_one(ld_opt_t id);

/* The table's entry (NULL for an id out of range), and kind and audience as words. */
const ld_option_t *ld_option(ld_opt_t id);
const char *ld_opt_kind_name(ld_opt_kind_t k);
const char *ld_opt_audience_name(ld_opt_audience_t a);

/* Two variables of the XDG/POSIX conventions, read for the cache directory's default
 * (shim/probe_cache.c). Copied at the same start as the table, for the same reason (the
 * program may setenv later), with the same bound; kept out of the table because they are not
 * the shim's variables (no LDSHIM_ name, default or doc row) and their rule differs: a
 * relative value is ignored, not made absolute (the XDG Base Directory spec says a relative
 * XDG_CACHE_HOME is invalid; a relative HOME names no home), and an overlong one too. */
typedef enum { LD_ENV_XDG_CACHE_HOME, LD_ENV_HOME, LD_ENV_COUNT } ld_env_t;

/* The copy (an absolute path of at most LD_OPT_PATH_MAX bytes), or NULL when unset, empty,
 * relative or too long. */
const char *ld_env(ld_env_t id);

/* "XDG_CACHE_HOME", "HOME"; NULL out of range. */
const char *ld_env_name(ld_env_t id);

/* Tests only: copy the environment again after setenv/unsetenv. Not thread-safe against
 * readers; the constructor never calls it. */
void ld_options_reread(void);

#endif
