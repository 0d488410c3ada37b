/* report.h — the JSON report (LDSHIM_REPORT): what the shim did in this process.
 * Thread-safe; reads counters without stopping the program. */
#ifndef LDSHIM_REPORT_H
#define LDSHIM_REPORT_H

/* Write the report to `path` ("%p" expands to the pid). 0 on success, -1 with errno. */
int ld_report_write(const char *path);

#endif
