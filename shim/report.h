/* report.h — the JSON report (LDSHIM_REPORT): what the shim did in this process.
 * Thread-safe; reads counters without stopping the program. */
#ifndef LDSHIM_REPORT_H
#define LDSHIM_REPORT_H

#include <stddef.h>

/* Write the report to `path` ("%p" expands to the pid). 0 on success, -1 with errno (and,
 * for ld_report_write_why, the reason in one line). A new or regular file is written to a
 * temporary file created beside it (O_EXCL, mode 0644 less the umask) and renamed over it;
 * a FIFO or character device (/dev/null, a tty) is written in place, never replaced; a
 * directory, block device or socket is refused; a symbolic link is followed only when it
 * belongs to us or root and leads to a FIFO or character device. A path longer than
 * LD_PATH_MAX - 1 after expansion is refused, never shortened. */
int ld_report_write(const char *path);
int ld_report_write_why(const char *path, char *why, size_t n);

/* Remember that this process reached for the driver (a cu* lookup or call). At exit a
 * process that never did — a shell, `timeout`, `env` in front of the real program — does
 * not overwrite a report that already exists at the same path. */
void ld_note_cuda_use(void);
int ld_cuda_used(void);

#endif
