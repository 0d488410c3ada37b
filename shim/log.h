/* log.h — stderr logging, level from LDSHIM_LOG (error|warn|info|debug, default warn). Every
 * line is "ldshim: <level>: <message>", the level one of error, warning, info, debug (so
 * `grep 'ldshim: warning:'` finds the warnings). Never writes to stdout. Thread-safe: one
 * write(2) per message. Control characters and invalid UTF-8 in a message (a path or a
 * cached verdict, say) are written as '?', so nothing read from a file or the environment
 * can drive the terminal. */
#ifndef LDSHIM_LOG_H
#define LDSHIM_LOG_H

enum { LD_LOG_NONE = 0, LD_LOG_ERROR = 1, LD_LOG_WARN = 2, LD_LOG_INFO = 3, LD_LOG_DEBUG = 4 };

extern int ld_log_level;   /* from LDSHIM_LOG (the options table's copy) by ld_log_init() */

/* Take LDSHIM_LOG. Prints nothing: a bad value is kept for ld_log_report_env(), which the
 * shim calls when the process first reaches for CUDA (a process that never does stays
 * silent). */
void ld_log_init(void);
void ld_log_report_env(void);
/* One line at `level` (LD_LOG_ERROR..LD_LOG_DEBUG), whatever ld_log_level is: the macros
 * below check that; a caller that must always be heard calls this. */
void ld_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *ld_log_level_word(int level);   /* "error", "warning", "info", "debug" */

#define LD_ERROR(...) do { if (ld_log_level >= LD_LOG_ERROR) ld_log_write(LD_LOG_ERROR, __VA_ARGS__); } while (0)
#define LD_WARN(...)  do { if (ld_log_level >= LD_LOG_WARN)  ld_log_write(LD_LOG_WARN,  __VA_ARGS__); } while (0)
#define LD_INFO(...)  do { if (ld_log_level >= LD_LOG_INFO)  ld_log_write(LD_LOG_INFO,  __VA_ARGS__); } while (0)
#define LD_DEBUG(...) do { if (ld_log_level >= LD_LOG_DEBUG) ld_log_write(LD_LOG_DEBUG, __VA_ARGS__); } while (0)

#endif
