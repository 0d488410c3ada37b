/* json.h — the one JSON string writer of the shim and its tools (report.c, probe.c,
 * tools/ldshim-probe.c), so every string that leaves in JSON is valid JSON and valid UTF-8.
 *
 * Escapes '"', '\\', every control byte (< 0x20 and 0x7f) and replaces each byte that does
 * not start a valid UTF-8 sequence (overlong forms, surrogates, > U+10FFFF, truncated) with
 * \ufffd, so file names and free text from files (a policy path, a cached verdict) never
 * make the document unreadable. Pure C, reentrant, no allocation. */
#ifndef LDSHIM_JSON_H
#define LDSHIM_JSON_H

#include <stddef.h>

/* Write `s` as a quoted JSON string ("null" when s is NULL) into out[0..n), snprintf-style:
 * always NUL-terminated when n > 0, truncated at a whole escape, and returns the length the
 * whole string needs (excluding the NUL), so a caller can grow its buffer and call again. */
size_t ld_json_str(char *out, size_t n, const char *s);

/* Length of the valid UTF-8 sequence starting at s[0] (of at most `n` bytes), 1 for ASCII,
 * or 0 when s[0] does not start a valid sequence. Inline: log.c uses it without json.c. */
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
