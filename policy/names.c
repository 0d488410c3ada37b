/* names.c — spellings of the policy enums, both ways. Pure, thread-safe, no allocation. */
#include <stdio.h>
#include <string.h>
#include "policy/policy.h"
#include "policy/policy_internal.h"

const char *const ld_pol_state_words[LD_STATE_COUNT] = { "stock", "memory", "full", "mismatch", "memory-only",
                                                         "compute-only", "full-ld", "mismatch-ld", "sm-control" };
const char *const ld_pol_backend_words[5] = { "auto", "native", "mlopart", "emulated", "off" };
const char *const ld_pol_probe_words[5]   = { "auto", "anchored", "clustered", "even", "off" };
const char *const ld_pol_map_words[2]     = { "balanced", "physical" };
const char *const ld_pol_topology_source_words[2] = { "driver", "probe" };
const char *const ld_pol_api_words[LD_API_COUNT] = { "any", "runtime", "driver", "async", "vmm", "pitch", "managed" };
const char *const ld_pol_onoff_words[2]   = { "off", "on" };

int ld_pol_lookup(const char *const *words, int n, const char *s, size_t len) {
    for (int i = 0; i < n; i++)
        if (strlen(words[i]) == len && memcmp(words[i], s, len) == 0) return i;
    return -1;
}

void ld_pol_choices(const char *const *words, int n, char *buf, size_t size) {
    size_t used = 0;
    if (size == 0) return;
    buf[0] = '\0';
    for (int i = 0; i < n && used < size; i++) {
        const char *sep = i == 0 ? "" : (i == n - 1 ? " or " : ", ");
        int w = snprintf(buf + used, size - used, "%s%s", sep, words[i]);
        if (w < 0) break;
        used += (size_t)w;
    }
}

#define NAME_OF(table, v) \
    (((int)(v) >= 0 && (size_t)(v) < sizeof(table) / sizeof(table[0])) ? table[(int)(v)] : "unknown")

/* The *_name functions return static strings, never NULL ("unknown" for bad values). */
const char *ld_state_name(ld_state_t s)         { return NAME_OF(ld_pol_state_words, s); }
const char *ld_backend_name(ld_backend_kind_t b) { return NAME_OF(ld_pol_backend_words, b); }
const char *ld_probe_name(ld_probe_mode_t m)    { return NAME_OF(ld_pol_probe_words, m); }
const char *ld_map_name(ld_map_mode_t m)        { return NAME_OF(ld_pol_map_words, m); }
const char *ld_topology_source_name(ld_topology_source_t s) { return NAME_OF(ld_pol_topology_source_words, s); }
const char *ld_api_name(ld_api_t a)             { return NAME_OF(ld_pol_api_words, a); }

/* The spelling the file uses for `state`, exactly (case-sensitive, no blanks). */
int ld_state_parse(const char *s) {
    if (!s) return -1;
    return ld_pol_lookup(ld_pol_state_words, LD_STATE_COUNT, s, strlen(s));
}
