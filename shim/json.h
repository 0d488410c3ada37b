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

#include "policy/utf8.h"   /* ld_utf8_len: log.c uses it without json.c */

/* Write `s` as a quoted JSON string ("null" when s is NULL) into out[0..n), snprintf-style:
 * always NUL-terminated when n > 0, truncated at a whole escape, and returns the length the
 * whole string needs (excluding the NUL), so a caller can grow its buffer and call again. */
size_t ld_json_str(char *out, size_t n, const char *s);

#endif
