/* policy.h — the ldshim policy language: parse, validate, match. Pure C, no CUDA.
 *
 * File format (documented in doc/policy.md, example in policy/examples/):
 *
 *     # global options (before the first [rule]); every key optional
 *     state    = full              # stock | memory | full | mismatch (split family)
 *                                  # memory-only | compute-only | full-ld | mismatch-ld | sm-control
 *     domain   = 0                 # the study states' domain X
 *     backend  = auto              # auto | native | mlopart | emulated | off
 *     probe    = auto              # auto | anchored | clustered | even | off
 *     map      = balanced          # balanced | physical
 *     strict   = off               # on | off: a bad policy exits the program (status 3)
 *     pool     = 4GiB              # cap of released physical memory kept per device
 *     min_split = 4MiB             # tagged requests smaller than this pass through
 *     compute  = all               # all | domain:N | spread:K: which SMs the process runs on
 *     compute_split = aligned      # aligned | fine | backfill: how SM groups are carved
 *     compute_sms = 0              # at most this many SMs bound (0: every whole group)
 *
 *     [rule experts]               # a named rule; names are unique, [A-Za-z0-9_.-]{1,63}
 *     size       = 112MiB          # exact size, or a range: 64MiB..1GiB (inclusive)
 *     api        = any             # runtime | driver | async | vmm | pitch | managed | any
 *     occurrence = 1,3,5-8         # optional: which matching requests (1-based) it takes
 *     placement  = split           # split | domain:N | stock
 *
 * Units: B, KiB, MiB, GiB, TiB (powers of 1024) and plain integers (bytes).
 *
 * Thread-safety: parsing is reentrant; a parsed ld_policy_t is immutable and may be read
 * from any thread. ld_policy_match() only reads the policy; occurrence counting is the
 * caller's (see ld_policy_match). Ownership: ld_policy_t owns its rules array; release it
 * with ld_policy_free().
 */
#ifndef LDSHIM_POLICY_H
#define LDSHIM_POLICY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where a request comes from: cuMemAlloc through the runtime or the driver API, stream-ordered
 * allocation (cuMemAllocAsync, cuMemAllocFromPoolAsync), the program's own VMM handles
 * (cuMemCreate), pitched and managed allocations. `any` matches all of them. */
typedef enum { LD_API_ANY = 0, LD_API_RUNTIME = 1, LD_API_DRIVER = 2, LD_API_ASYNC = 3, LD_API_VMM = 4,
               LD_API_PITCH = 5, LD_API_MANAGED = 6, LD_API_COUNT } ld_api_t;
typedef enum { LD_PLACE_SPLIT = 0, LD_PLACE_DOMAIN = 1, LD_PLACE_STOCK = 2 } ld_place_t;
/* Placement states: presets of (memory placement, compute placement, map). The split family
 * (memory, full, mismatch) splits tagged cuMemAlloc ranges over the domains for kernels that
 * read the map; the study family places tagged memory in domain X (`domain`) and/or binds
 * compute to it, for any program (doc/policy.md has the table). */
typedef enum { LD_STATE_STOCK = 0, LD_STATE_MEMORY, LD_STATE_FULL, LD_STATE_MISMATCH, LD_STATE_MEMORY_ONLY,
               LD_STATE_COMPUTE_ONLY, LD_STATE_FULL_LD, LD_STATE_MISMATCH_LD, LD_STATE_SM_CONTROL,
               LD_STATE_COUNT } ld_state_t;
/* 1 for the study family's states. */
static inline int ld_state_is_study(ld_state_t s) { return s >= LD_STATE_MEMORY_ONLY && s < LD_STATE_COUNT; }
typedef enum { LD_BACKEND_AUTO = 0, LD_BACKEND_NATIVE, LD_BACKEND_MLOPART, LD_BACKEND_EMULATED,
               LD_BACKEND_OFF } ld_backend_kind_t;
typedef enum { LD_PROBE_AUTO = 0, LD_PROBE_ANCHORED, LD_PROBE_CLUSTERED, LD_PROBE_EVEN,
               LD_PROBE_OFF } ld_probe_mode_t;
typedef enum { LD_MAP_BALANCED = 0, LD_MAP_PHYSICAL } ld_map_mode_t;
/* Which SM -> domain map is published when the driver's own answer (a split by locality
 * domain, %locality_domain_id) and the probe's measurement disagree: the driver's (default;
 * the measurement is kept as the check) or the probe's. */
typedef enum { LD_TOPOLOGY_SOURCE_DRIVER = 0, LD_TOPOLOGY_SOURCE_PROBE } ld_topology_source_t;

/* Compute placement: every kernel of the process on all SMs, on the SMs of domain N, or on
 * K SMs taken evenly from every domain (the equal-SM-count control). */
typedef enum { LD_COMPUTE_ALL = 0, LD_COMPUTE_DOMAIN, LD_COMPUTE_SPREAD } ld_compute_kind_t;
typedef struct {
    ld_compute_kind_t kind;
    int               domain;          /* LD_COMPUTE_DOMAIN: 0..7                          */
    uint32_t          sms;             /* LD_COMPUTE_SPREAD: K, 1..LDSHIM_COMPUTE_MAX_SMS  */
} ld_compute_t;
#define LDSHIM_COMPUTE_MAX_SMS 256     /* = LDSHIM_MAX_SMS of kernels/ldshim_topology.h     */

/* How SM groups are carved out of the device (after NVIDIA CCCL's locality_domain_sm_split):
 * aligned: whole co-scheduled groups lying wholly in the domain (clusters allowed);
 * fine: the finest groups the driver gives (more SMs, clusters limited);
 * backfill: aligned groups topped up to an even share of the device from outside it. */
typedef enum { LD_SPLIT_ALIGNED = 0, LD_SPLIT_FINE, LD_SPLIT_BACKFILL } ld_split_t;

#define LD_RULE_NAME_MAX 64
#define LD_MAX_OCC_RANGES 16
#define LD_POLICY_MAX_BYTES (1 << 20)   /* a larger file is refused                        */
#define LD_POLICY_MAX_RULES 256         /* more [rule] sections are refused (shim stats cap) */

typedef struct { uint64_t first, last; } ld_occ_range_t;   /* inclusive, 1-based */

typedef struct {
    char       name[LD_RULE_NAME_MAX];
    uint64_t   size_min, size_max;     /* inclusive; exact size: min == max               */
    ld_api_t   api;
    int        n_occ;                  /* 0: every occurrence                             */
    ld_occ_range_t occ[LD_MAX_OCC_RANGES];
    ld_place_t placement;
    int        domain;                 /* for LD_PLACE_DOMAIN                             */
    int        line;                   /* line of the [rule] header, for messages         */
} ld_rule_t;

typedef struct {
    ld_state_t        state;           /* default LD_STATE_FULL when a policy is given    */
    int               state_set;       /* 1 if the file set `state`                       */
    ld_backend_kind_t backend;         /* default auto                                    */
    ld_probe_mode_t   probe;           /* default auto                                    */
    ld_map_mode_t     map;             /* default balanced                                */
    ld_topology_source_t topology_source; /* default driver                               */
    int               strict;          /* default 0                                       */
    uint64_t          pool_cap;        /* default 4 GiB                                   */
    uint64_t          min_split;       /* default 4 MiB                                   */
    ld_compute_t      compute;         /* default all                                     */
    ld_split_t        compute_split;   /* default aligned                                 */
    uint32_t          compute_sms;     /* default 0: no cap                               */
    int               domain;          /* the study states' domain X, default 0            */
    int               domain_set;      /* 1 if the file set `domain`                       */
    int               n_rules;
    ld_rule_t        *rules;           /* owned; sorted by (api, size_min), see below     */
} ld_policy_t;

/* Fill *p with the defaults above and no rules. */
void ld_policy_init(ld_policy_t *p);

/* Parse `len` bytes of policy text. `fname` is used in messages only.
 * Returns 0 and fills *out (which the caller releases with ld_policy_free) on success.
 * Returns -1 on a bad file: *out is left in the ld_policy_init state (no allocation to
 * free, but calling ld_policy_free is harmless) except `strict`, which is 1 when a valid
 * `strict = on` line stands in the file's global section (before or after the error), so a
 * caller honours strict for a file it cannot use without reading it twice; and `err` holds
 * exactly one line, without a trailing newline and without the "ldshim: " prefix:
 *     "<fname>:<line>:<col>: <what was expected>"
 * Lines and columns are 1-based. */
int ld_policy_parse(const char *text, size_t len, const char *fname, ld_policy_t *out,
                    char *err, size_t errlen);

/* Rules come out of ld_policy_parse sorted by (api, size_min) — the order ld_policy_match
 * searches — not in file order; ld_rule_t.line keeps the file position. Code that builds or
 * edits an ld_policy_t by hand calls ld_policy_sort() before matching. Not thread-safe
 * against concurrent readers of the same policy. */
void ld_policy_sort(ld_policy_t *p);

/* Read and parse a file. A missing or unreadable file is an error of the same form with
 * line and column 0 ("<path>:0:0: cannot open: <strerror>"; a directory gives EISDIR's
 * text; a read(2) failure after open gives "<path>:0:0: cannot read: <strerror>"). */
int ld_policy_load(const char *path, ld_policy_t *out, char *err, size_t errlen);

void ld_policy_free(ld_policy_t *p);

/* Index of the rule whose size range and api match a request, or -1. At most one rule can
 * match (overlapping rules are a parse error). Occurrence filtering is separate: the caller
 * keeps one counter per rule, increments it for every request that matched the rule's size
 * and api, and asks ld_rule_takes_occurrence(rule, counter_after_increment). */
/* Allocation-free, lock-free, O(log n). `api` is the request's origin, LD_API_RUNTIME or
 * LD_API_DRIVER; LD_API_ANY (origin unknown) matches rules of every api, the runtime one
 * first should a runtime and a driver rule both hold the size. */
int ld_policy_match(const ld_policy_t *p, uint64_t size, ld_api_t api);
int ld_rule_takes_occurrence(const ld_rule_t *r, uint64_t occurrence);

/* Names for messages and reports ("full", "emulated", ...). Never NULL. */
const char *ld_state_name(ld_state_t s);
const char *ld_backend_name(ld_backend_kind_t b);
const char *ld_probe_name(ld_probe_mode_t m);
const char *ld_map_name(ld_map_mode_t m);
const char *ld_topology_source_name(ld_topology_source_t s);
const char *ld_api_name(ld_api_t a);
/* Parse one enum word as the file does; -1 if unknown. Used for LDSHIM_STATE etc. */
int ld_state_parse(const char *s);

/* The one whole-number parser of the project's values: the policy file's numbers, the
 * LDSHIM_* variables and the tools' flags. `s` must be decimal digits only, all of it (no
 * sign, space or suffix; leading zeros are fine), within [lo, hi]. 0 and *out, or -1. */
int ld_parse_uint(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);

/* Parse a compute value (all | domain:N | spread:K) from s[0..len). 0 and *out, or -1 with
 * a one-line reason in why and the offending offset in *bad. */
int ld_compute_scan(const char *s, size_t len, ld_compute_t *out, size_t *bad, char *why, size_t n);
/* "all", "domain:1", "spread:56" into buf; returns buf. */
const char *ld_compute_format(const ld_compute_t *c, char *buf, size_t n);
const char *ld_split_name(ld_split_t m);
int ld_split_parse(const char *s);

/* Parse a size with optional unit ("64MiB", "4096"). Returns 0 on success, -1 on a bad
 * number, unknown unit or overflow. */
int ld_parse_size(const char *s, size_t len, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif /* LDSHIM_POLICY_H */
