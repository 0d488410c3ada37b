/* ldshim.h — the host API libldshim.so exports to programs that want to look inside.
 *
 * A program does not need this header to benefit from the shim. Programs that do use it
 * should resolve the functions with dlsym(RTLD_DEFAULT, "ldshim_...") so they also run
 * without the shim (the symbols are then absent).
 *
 * All functions are thread-safe and never initialize CUDA.
 */
#ifndef LDSHIM_H
#define LDSHIM_H

#include <stddef.h>
#include <stdint.h>
#include "ldshim_topology.h"   /* installed beside this header; kernels/ in the source tree */

#ifdef __cplusplus
extern "C" {
#endif

/* The project's VERSION file is the source: the build passes it, `make install` writes it here,
 * and this value (checked against VERSION by make test) serves includes from a checkout. */
#ifndef LDSHIM_VERSION_STRING
#define LDSHIM_VERSION_STRING "0.1.0"
#endif

/* Copy the published topology of CUDA device ordinal `device` into *out: its first `size`
 * bytes, at most sizeof(ldshim_topology_t) of this library (pass sizeof *out; a caller built
 * against an older, shorter struct gets what it has room for, never more).
 * Returns 0 when a map is published for it (probe done), -1 otherwise (the `size` bytes of
 * *out zeroed), and -1 without touching *out when `size` is smaller than the version-1
 * fields (LDSHIM_TOPOLOGY_V1_BYTES). */
int ldshim_get_topology(int device, ldshim_topology_t *out, size_t size);

typedef struct ldshim_ptr_info {
    uint64_t base;           /* start of the shim's range containing the pointer */
    uint64_t size;           /* bytes the caller asked for                         */
    uint64_t reserved;       /* bytes of VA reserved (granularity-rounded)         */
    uint64_t slice;          /* bytes per domain slice                             */
    int      device;
    int      num_domains;    /* slices in the range                                */
    int      domain_of[8];   /* domain each slice's memory is homed in (mismatch: 1-d) */
    char     rule[64];       /* policy rule that tagged it                        */
    char     backend[16];    /* backend that provided the memory                  */
} ldshim_ptr_info_t;

/* Describe the shim allocation containing `ptr` (interior pointers too).
 * Returns 0 and fills *out, or -1 if the pointer is not the shim's. */
int ldshim_pointer_info(uint64_t ptr, ldshim_ptr_info_t *out);

/* tagged_*: allocations the shim placed (every api) and their frees; untagged_*: every other
 * allocation that reached the shim and its frees (doc/policy.md, "Counts"). live_*: the
 * shim's own ranges (cudaMalloc and pitched memory it placed). */
typedef struct ldshim_stats {
    uint64_t tagged_allocs, tagged_frees, live_ranges, live_bytes;
    uint64_t untagged_allocs, untagged_frees;
    uint64_t pool_hits, pool_misses, pool_trims, pool_bytes;
    uint64_t fallbacks;
} ldshim_stats_t;

/* Snapshot of the counters. Always succeeds. */
void ldshim_get_stats(ldshim_stats_t *out);

/* Write the JSON report now (to LDSHIM_REPORT, or to `path` when not NULL).
 * Returns 0 on success, -1 (errno set) otherwise. The report is also written at exit. */
int ldshim_write_report(const char *path);

/* Release every freed range the shim keeps for reuse (the pool), returning its device
 * memory to the driver. Returns the bytes released. The pool is also trimmed
 * automatically when an allocation runs out of memory, and at exit. */
uint64_t ldshim_pool_trim(void);

/* libcuda's own entry point `name` (an exact ABI name such as "cuMemAlloc_v2"), bypassing
 * the shim; NULL when the driver or the name is absent. For benchmarks that compare the
 * shim's path with the driver's in one process, and for debugging. */
void *ldshim_real_driver_entry(const char *name);

/* "0.1.0 (state full, backend emulated)" — static storage, never NULL. */
const char *ldshim_version(void);

#ifdef __cplusplus
}
#endif
#endif
