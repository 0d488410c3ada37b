/* report.h — the JSON report (LDSHIM_REPORT): what the shim did in this process.
 * Thread-safe; reads counters without stopping the program. */
#ifndef LDSHIM_REPORT_H
#define LDSHIM_REPORT_H

/* Write the report to `path` ("%p" expands to the pid). 0 on success, -1 with errno. */
int ld_report_write(const char *path);

/* Remember that this process reached for the driver (a cu* lookup or call). At exit a
 * process that never did — a shell, `timeout`, `env` in front of the real program — does
 * not overwrite a report that already exists at the same path. */
void ld_note_cuda_use(void);
int ld_cuda_used(void);

#endif
