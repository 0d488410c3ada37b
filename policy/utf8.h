/* utf8.h — the one UTF-8 validator: the policy parser refuses invalid bytes with it, the
 * shim's JSON writer and log lines replace them (shim/json.c, shim/log.c). Pure, inline, no
 * dependencies, so the parser (pure C, no shim) and the shim share it. */
#ifndef LDSHIM_POLICY_UTF8_H
#define LDSHIM_POLICY_UTF8_H

#include <stddef.h>

/* Length of the valid UTF-8 sequence starting at s[0] (of at most `n` bytes), 1 for ASCII,
 * or 0 when s[0] does not start a valid one (overlong, surrogate, beyond U+10FFFF,
 * truncated, a continuation byte). */
static inline size_t ld_utf8_len(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t need;
    unsigned min, cp;
    if (c >= 0xc2 && c <= 0xdf) { need = 1; cp = c & 0x1f; min = 0x80; }
    else if (c >= 0xe0 && c <= 0xef) { need = 2; cp = c & 0x0f; min = 0x800; }
    else if (c >= 0xf0 && c <= 0xf4) { need = 3; cp = c & 0x07; min = 0x10000; }
    else return 0;
    if (n < need + 1) return 0;
    for (size_t i = 1; i <= need; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return need + 1;
}

#endif
