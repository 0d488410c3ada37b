/* policy_internal.h — helpers shared by the policy/ files; not part of the public API.
 *
 * Everything here is pure and reentrant: no globals are written, nothing allocates. */
#ifndef LDSHIM_POLICY_INTERNAL_H
#define LDSHIM_POLICY_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "policy/policy.h"

/* Enum spellings, indexed by the enum value (policy/names.c). */
extern const char *const ld_pol_state_words[LD_STATE_COUNT];
extern const char *const ld_pol_backend_words[5];
extern const char *const ld_pol_probe_words[5];
extern const char *const ld_pol_map_words[2];
extern const char *const ld_pol_topology_source_words[2];
extern const char *const ld_pol_api_words[LD_API_COUNT];
extern const char *const ld_pol_onoff_words[2];     /* "off", "on" */
extern const char *const ld_pol_split_words[3];     /* policy/compute.c */

/* Index of the word equal to s[0..len) in words[0..n), or -1. */
int ld_pol_lookup(const char *const *words, int n, const char *s, size_t len);

/* Write "a, b, c or d" into buf (always NUL-terminated when n > 0). */
void ld_pol_choices(const char *const *words, int n, char *buf, size_t size);

/* Scan one size (digits, optional unit) in s[*pos..len). Stops before a ".." range marker
 * or any character that cannot continue the size. On success returns 0, stores the value
 * and leaves *pos after the size. On failure returns -1, leaves *pos at the offending
 * character and writes a one-line reason into why. (policy/size.c) */
int ld_pol_scan_size(const char *s, size_t len, size_t *pos, uint64_t *out,
                     char *why, size_t whylen);

/* Scan a plain decimal number (no unit) in s[*pos..len); same contract as above. */
int ld_pol_scan_uint(const char *s, size_t len, size_t *pos, uint64_t *out,
                     char *why, size_t whylen);

/* Format a byte count with the largest unit that divides it exactly ("112MiB", "4097"). */
void ld_pol_fmt_size(uint64_t v, char *buf, size_t size);

/* Format a rule's size as "A" or "A..B". */
void ld_pol_fmt_range(uint64_t lo, uint64_t hi, char *buf, size_t size);

#endif
