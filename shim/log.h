/* log.h — stderr logging: a level from LDSHIM_LOG (error|warn|info|debug, default warn) and a
 * subsystem filter from LDSHIM_LOG_SUBSYS (NCCL_DEBUG_SUBSYS's reading). Every line is
 *
 *     ldshim: <level>: <subsystem>: <message>
 *
 * the level one of error, warning, info, debug (so `grep 'ldshim: warning:'` finds the
 * warnings), the subsystem one of the names below (so `grep 'ldshim: info: probe:'` finds the
 * probe's lines). Never writes to stdout. Thread-safe: one write(2) per message. Control
 * characters and invalid UTF-8 in a message (a path or a cached verdict, say) are written as
 * '?', so nothing read from a file or the environment can drive the terminal.
 *
 * The filter is a variable of its own, not a suffix of LDSHIM_LOG (`debug:probe`): it is
 * NCCL's pair (NCCL_DEBUG, NCCL_DEBUG_SUBSYS) that users of GPU libraries already know,
 * LDSHIM_LOG keeps its one-word values, and each variable has one row in the options table.
 * LDSHIM_LOG_SUBSYS is a comma-separated list of subsystem names or `all` (the default),
 * case-insensitive; a leading `^` shows every subsystem but those listed (NCCL's `^`). It
 * filters info and debug lines only: errors and warnings are always written, whatever it
 * says (NCCL's rule; a user who narrows the chatter must not lose a problem). A value with
 * an unknown or empty name is refused whole: one warning names it and every subsystem is
 * shown (showing more than asked beats hiding a line the user wanted).
 *
 * Adding a subsystem: a row in LD_LOG_SUBSYSTEMS (at most 31); its name is what the line
 * shows and what LDSHIM_LOG_SUBSYS takes. */
#ifndef LDSHIM_LOG_H
#define LDSHIM_LOG_H

enum { LD_LOG_NONE = 0, LD_LOG_ERROR = 1, LD_LOG_WARN = 2, LD_LOG_INFO = 3, LD_LOG_DEBUG = 4 };

/* X(ID, name): one concern of the shim each, named in the line. */
#define LD_LOG_SUBSYSTEMS(X)                                                                  \
    X(CONFIG, config)         /* the environment (config.c), a variable's bad value         */ \
    X(POLICY, policy)         /* the policy file: its error, strict = on (config.c)         */ \
    X(DRIVER, driver)         /* loading libcuda (driver.c)                                 */ \
    X(INTERPOSE, interpose)   /* the exported hooks (interpose.c)                           */ \
    X(ALLOC, alloc)           /* tagged allocations and their fallbacks (alloc.c)           */ \
    X(VMM, vmm)               /* ranges, slices, read-back, peer access (vmm.c)             */ \
    X(POOL, pool)             /* the kept ranges (pool.c)                                   */ \
    X(PLACE, place)           /* stream-ordered and managed memory in a domain (place.c)    */ \
    X(BACKEND, backend)       /* which backend serves a device (device.c)                   */ \
    X(MLOPART, mlopart)       /* the MLOPart backend and its helper (backend_mlopart.c)     */ \
    X(PROBE, probe)           /* the topology probe and its cache (probe.c, topology.c)     */ \
    X(TOPO, topo)             /* publishing the map into modules; probe vs driver (truth.c) */ \
    X(COMPUTE, compute)       /* the compute binding, its SM groups and streams             */ \
    X(REPORT, report)         /* the JSON report at exit (init.c)                           */

enum {
#define LD_SUB_BIT_(id, name) LD_SUB_BIT_##id##_,
    LD_LOG_SUBSYSTEMS(LD_SUB_BIT_)
#undef LD_SUB_BIT_
    LD_SUB_COUNT_
};
enum {
#define LD_SUB_(id, name) LD_SUB_##id = 1u << LD_SUB_BIT_##id##_,
    LD_LOG_SUBSYSTEMS(LD_SUB_)
#undef LD_SUB_
    LD_SUB_ALL = (1u << LD_SUB_COUNT_) - 1
};

extern int ld_log_level;        /* from LDSHIM_LOG by ld_log_init()                          */
extern unsigned ld_log_subsys;  /* LD_SUB_* bits whose info and debug lines are written      */

/* Take LDSHIM_LOG and LDSHIM_LOG_SUBSYS. Prints nothing: a bad value is kept for
 * ld_log_report_env(), which the shim calls when the process first reaches for CUDA (a
 * process that never does stays silent). */
void ld_log_init(void);
void ld_log_report_env(void);

/* LDSHIM_LOG_SUBSYS's reading of s into *mask: 0, or -1 with the offending name (or "" for an
 * empty one) in bad[n] and *mask untouched. */
int ld_log_parse_subsys(const char *s, unsigned *mask, char *bad, unsigned n);

/* One line at `level` (LD_LOG_ERROR..LD_LOG_DEBUG) tagged with subsystem `sub` (one LD_SUB_*
 * bit), whatever ld_log_level and ld_log_subsys say: the macros below check those; a caller
 * that must always be heard calls this. */
void ld_log_write(int level, unsigned sub, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
const char *ld_log_level_word(int level);   /* "error", "warning", "info", "debug" */
const char *ld_log_subsys_name(unsigned sub);   /* "probe"; "?" for no single known bit */

/* Whether a line of `level` and subsystem `sub` is written: the level is within LDSHIM_LOG's,
 * and an info or debug line's subsystem is within LDSHIM_LOG_SUBSYS's. */
static inline int ld_log_on(int level, unsigned sub) {
    return ld_log_level >= level && (level <= LD_LOG_WARN || (ld_log_subsys & sub));
}

#define LD_LOG_AT_(level, sub, ...) do { if (ld_log_on((level), (sub))) ld_log_write((level), (sub), __VA_ARGS__); } while (0)
#define LD_ERROR(sub, ...) LD_LOG_AT_(LD_LOG_ERROR, LD_SUB_##sub, __VA_ARGS__)
#define LD_WARN(sub, ...)  LD_LOG_AT_(LD_LOG_WARN,  LD_SUB_##sub, __VA_ARGS__)
#define LD_INFO(sub, ...)  LD_LOG_AT_(LD_LOG_INFO,  LD_SUB_##sub, __VA_ARGS__)
#define LD_DEBUG(sub, ...) LD_LOG_AT_(LD_LOG_DEBUG, LD_SUB_##sub, __VA_ARGS__)

#endif
