/* log.c — "ldshim: <level>: <subsystem>: " lines on stderr, one write(2) each so threads
 * never interleave; the level and subsystem filters (log.h). */
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
unsigned ld_log_subsys = LD_SUB_ALL;
static char bad_value[64];    /* LDSHIM_LOG as given when it named no level ("" if fine)     */
static char bad_subsys[160];  /* the warning LDSHIM_LOG_SUBSYS earned ("" if fine)           */

_Static_assert(LD_SUB_COUNT_ <= 31, "a subsystem is one bit of an unsigned mask beside LD_SUB_ALL");

static const char *const subsys_names[LD_SUB_COUNT_] = {
#define LD_SUB_NAME_(id, name) [LD_SUB_BIT_##id##_] = #name,
    LD_LOG_SUBSYSTEMS(LD_SUB_NAME_)
#undef LD_SUB_NAME_
};

const char *ld_log_subsys_name(unsigned sub) {
    if (sub == 0 || (sub & (sub - 1)) || !(sub & LD_SUB_ALL)) return "?";
    return subsys_names[__builtin_ctz(sub)];
}

int ld_log_parse_subsys(const char *s, unsigned *mask, char *bad, unsigned n) {
    int invert = s[0] == '^';
    unsigned m = 0;
    const char *p = s + invert;
    for (;;) {
        size_t len = strcspn(p, ",");
        unsigned bit = 0;
        if (len == 3 && !strncasecmp(p, "all", 3)) bit = LD_SUB_ALL;
        for (int i = 0; i < LD_SUB_COUNT_ && !bit; i++)
            if (strlen(subsys_names[i]) == len && !strncasecmp(p, subsys_names[i], len)) bit = 1u << i;
        if (!bit) {
            if (n) snprintf(bad, n, "%.*s", (int)(len < 64 ? len : 64), p);
            return -1;
        }
        m |= bit;
        if (!p[len]) break;
        p += len + 1;
    }
    *mask = invert ? LD_SUB_ALL & ~m : m;
    return 0;
}

/* A variable left unset leaves its setting as it is (a test may have set ld_log_level). */
void ld_log_init(void) {
    bad_value[0] = bad_subsys[0] = '\0';
    const char *s = ld_opt(LD_OPT_LOG);
    if (s) {
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
    if ((s = ld_opt(LD_OPT_LOG_SUBSYS))) {
        char name[80];
        if (ld_log_parse_subsys(s, &ld_log_subsys, name, sizeof name) != 0) {
            ld_log_subsys = LD_SUB_ALL;
            /* The value may be long (1023 bytes): the warning names what is wrong in it. */
            if (name[0]) snprintf(bad_subsys, sizeof bad_subsys, "names no subsystem '%s'", name);
            else snprintf(bad_subsys, sizeof bad_subsys, "has an empty name");
        }
    }
}

void ld_log_report_env(void) {
    if (bad_value[0] && ld_log_level >= LD_LOG_WARN)
        ld_log_write(LD_LOG_WARN, LD_SUB_CONFIG, "LDSHIM_LOG=%s is not one of error|warn|info|debug; using warn",
                     bad_value);
    if (bad_subsys[0] && ld_log_level >= LD_LOG_WARN) {
        char list[256];
        size_t k = 0;
        for (int i = 0; i < LD_SUB_COUNT_ && k < sizeof list; i++)
            k += (size_t)snprintf(list + k, sizeof list - k, "%s,", subsys_names[i]);
        ld_log_write(LD_LOG_WARN, LD_SUB_CONFIG, "LDSHIM_LOG_SUBSYS %s (it takes %sall, ^ to exclude); showing every "
                     "subsystem", bad_subsys, list);
    }
    bad_value[0] = bad_subsys[0] = '\0';
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

void ld_log_write(int level, unsigned sub, const char *fmt, ...) {
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "ldshim: %s: %s: ", ld_log_level_word(level), ld_log_subsys_name(sub));
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
