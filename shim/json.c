/* json.c — JSON string escaping (json.h). */
#include "shim/json.h"

#include <stdio.h>
#include <string.h>

/* Append the piece p[0..k) when it fits whole (with room for the NUL); count it either way. */
static void piece(char *out, size_t n, size_t *len, int *full, const char *p, size_t k) {
    if (!*full && *len + k < n) memcpy(out + *len, p, k);
    else *full = 1;
    *len += k;
}

size_t ld_json_str(char *out, size_t n, const char *s) {
    size_t len = 0, kept = 0;
    int full = n == 0;
    if (!s) {
        piece(out, n, &len, &full, "null", 4);
    } else {
        const unsigned char *u = (const unsigned char *)s;
        size_t rest = strlen(s);
        piece(out, n, &len, &full, "\"", 1);
        while (rest) {
            char esc[8];
            size_t k = ld_utf8_len(u, rest);
            if (k == 1 && *u >= 0x20 && *u != 0x7f && *u != '"' && *u != '\\') {
                piece(out, n, &len, &full, (const char *)u, 1);
            } else if (k == 1) {
                if (*u == '"' || *u == '\\') { esc[0] = '\\'; esc[1] = (char)*u; piece(out, n, &len, &full, esc, 2); }
                else if (*u == '\n') piece(out, n, &len, &full, "\\n", 2);
                else if (*u == '\t') piece(out, n, &len, &full, "\\t", 2);
                else if (*u == '\r') piece(out, n, &len, &full, "\\r", 2);
                else { snprintf(esc, sizeof esc, "\\u%04x", *u); piece(out, n, &len, &full, esc, 6); }
            } else if (k > 1) {
                piece(out, n, &len, &full, (const char *)u, k);
            } else {
                piece(out, n, &len, &full, "\\ufffd", 6);   /* one replacement per bad byte */
                k = 1;
            }
            u += k;
            rest -= k;
            if (!full) kept = len;
        }
        piece(out, n, &len, &full, "\"", 1);
    }
    if (!full) kept = len;
    if (n) out[kept < n ? kept : n - 1] = '\0';
    return len;
}
