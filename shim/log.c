/* log.c — "ldshim: " lines on stderr, one write(2) each so threads never interleave. */
#include "shim/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int ld_log_level = LD_LOG_WARN;

void ld_log_init(void) {
    const char *s = getenv("LDSHIM_LOG");
    if (!s || !*s) return;
    if (!strcasecmp(s, "none") || !strcasecmp(s, "off")) ld_log_level = LD_LOG_NONE;
    else if (!strcasecmp(s, "error")) ld_log_level = LD_LOG_ERROR;
    else if (!strcasecmp(s, "warn") || !strcasecmp(s, "warning")) ld_log_level = LD_LOG_WARN;
    else if (!strcasecmp(s, "info")) ld_log_level = LD_LOG_INFO;
    else if (!strcasecmp(s, "debug")) ld_log_level = LD_LOG_DEBUG;
    else {
        ld_log_level = LD_LOG_WARN;
        ld_log_write(LD_LOG_WARN, "LDSHIM_LOG=%s is not one of error|warn|info|debug; using warn", s);
    }
}

void ld_log_write(int level, const char *fmt, ...) {
    (void)level;
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "ldshim: ");
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0) return;
    size_t len = (size_t)n + ((size_t)m < sizeof buf - (size_t)n - 1 ? (size_t)m : sizeof buf - (size_t)n - 2);
    buf[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, len);
    (void)w;
}
