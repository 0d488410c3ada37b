/* log.c — "ldshim: <level>: " lines on stderr, one write(2) each so threads never interleave. */
#include "shim/log.h"
#include "shim/json.h"
#include "shim/options.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int ld_log_level = LD_LOG_WARN;
static char bad_value[64];   /* LDSHIM_LOG as given when it named no level ("" if fine) */

void ld_log_init(void) {
    bad_value[0] = '\0';
    const char *s = ld_opt(LD_OPT_LOG);
    if (!s) return;
    if (!strcasecmp(s, "none") || !strcasecmp(s, "off")) ld_log_level = LD_LOG_NONE;
    else if (!strcasecmp(s, "error")) ld_log_level = LD_LOG_ERROR;
    else if (!strcasecmp(s, "warn") || !strcasecmp(s, "warning")) ld_log_level = LD_LOG_WARN;
    else if (!strcasecmp(s, "info")) ld_log_level = LD_LOG_INFO;
    else if (!strcasecmp(s, "debug")) ld_log_level = LD_LOG_DEBUG;
    else {
        ld_log_level = LD_LOG_WARN;
        snprintf(bad_value, sizeof bad_value, "%s", s);
    }
}

void ld_log_report_env(void) {
    if (bad_value[0] && ld_log_level >= LD_LOG_WARN)
        ld_log_write(LD_LOG_WARN, "LDSHIM_LOG=%s is not one of error|warn|info|debug; using warn", bad_value);
    bad_value[0] = '\0';
}

/* '?' for control characters (C0, DEL, C1) and for bytes of invalid UTF-8. */
static void sanitize(char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = ld_utf8_len(u + i, n - i);
        int c1 = k == 2 && u[i] == 0xc2 && u[i + 1] < 0xa0;
        if (k == 0 || (k == 1 && (u[i] < 0x20 || u[i] == 0x7f)) || c1) {
            size_t w = c1 ? 2 : 1;
            memset(s + i, '?', w);
            i += w;
        } else {
            i += k;
        }
    }
}

const char *ld_log_level_word(int level) {
    switch (level) {
    case LD_LOG_ERROR: return "error";
    case LD_LOG_WARN: return "warning";
    case LD_LOG_INFO: return "info";
    case LD_LOG_DEBUG: return "debug";
    }
    return "?";
}

void ld_log_write(int level, const char *fmt, ...) {
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "ldshim: %s: ", ld_log_level_word(level));
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0) return;
    size_t len = (size_t)n + ((size_t)m < sizeof buf - (size_t)n - 1 ? (size_t)m : sizeof buf - (size_t)n - 2);
    sanitize(buf + n, len - (size_t)n);
    buf[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, len);
    (void)w;
}
