/* probe_classify.h — turn the probe's latency matrices into an SM→domain map, validate it,
 * balance it. Pure C (no CUDA, no logging, no global state): every function here is
 * reentrant and thread-safe, takes caller-owned buffers, and keeps no pointer to them.
 *
 * Two measurements feed it (see doc/probe.md):
 *   anchored  — lat[d][s][c]: cycles/hop of SM s chasing chunk c of memory homed in domain d;
 *   clustered — lat[s][l]:    cycles/hop of SM s chasing the ring inside L2-resident line l.
 * A TPC is the SM pair (2t, 2t+1); with an odd SM count the last TPC has one SM.
 */
#ifndef LDSHIM_PROBE_CLASSIFY_H
#define LDSHIM_PROBE_CLASSIFY_H

#include <stddef.h>
#include <stdint.h>
#include "kernels/ldshim_topology.h"

/* Geometry shared with kernels/probe/probe.cu. */
#define LD_PROBE_LINE_BYTES     128   /* one L2 line                                        */
#define LD_PROBE_CHUNK_BYTES    4096  /* anchored chase window: 32 lines                    */
#define LD_PROBE_RING_LEN       32    /* lines per chunk, and 4-byte words per line          */
#define LD_PROBE_RING_STRIDE    7     /* coprime with LD_PROBE_RING_LEN: the ring visits all */
#define LD_PROBE_CHUNKS         8     /* anchored samples per (domain, SM); median of them   */
#define LD_PROBE_LINES          512   /* clustered: random L2-resident lines per attempt     */
#define LD_PROBE_ATTEMPTS       5     /* measurements before falling back to the even map    */

/* Acceptance thresholds. */
#define LD_PROBE_MIN_RATIO      1.25  /* anchored: every SM far >= 1.25 x near               */
/* Clustered: mean correlation of residual rows within groups minus between groups. Pure
 * noise over 512 lines gives ~0.02; the H200's halves (30-cycle split, noise of a few
 * cycles) give > 1. 0.25 still needs a signal the size of the noise. */
#define LD_PROBE_MIN_SEPARATION 0.25

typedef struct {
    int    valid;            /* 1: accepted                                               */
    double near_cycles;      /* anchored: median over SMs of the near domain's median     */
    double far_cycles;       /* clustered: median over lines of the nearest/farthest group */
    double separation;       /* anchored: min over SMs of far/near; clustered: score above */
    int    bad_tpc;          /* first TPC whose SMs disagree, or -1                       */
    char   verdict[160];     /* one line: why accepted or rejected                        */
} ld_classify_t;

#if defined(__CUDACC__)
#define LD_PROBE_HD __host__ __device__
#else
#define LD_PROBE_HD
#endif

#define LD_PROBE_REGION_LINES   (1u << 16)  /* clustered: lines drawn from an 8 MiB region */

/* Clustered: the line measured as entry l in attempt `seed`. A 16-bit bijective mixer
 * (xorshift and odd multiplies are each invertible mod 2^16), so the lines of one attempt
 * are distinct, spread over the region, and the same in every process. */
LD_PROBE_HD static inline uint32_t ld_probe_line(uint32_t l, uint32_t seed, uint32_t nlines) {
    uint32_t x = (l + seed * nlines) & 0xffffu;
    x ^= x >> 7;  x = (x * 0x2c1bu) & 0xffffu;
    x ^= x >> 9;  x = (x * 0x9e35u) & 0xffffu;
    x ^= x >> 8;
    return x;
}

/* Next index of the stride-7 ring of `n` entries (lines of a chunk, words of a line). */
LD_PROBE_HD static inline uint32_t ld_ring_next(uint32_t i, uint32_t n) {
    return (i + LD_PROBE_RING_STRIDE) % n;
}

#ifdef __cplusplus
extern "C" {
#endif

/* Even map: TPC t -> domain t mod nd (ldshim_even_domain). */
void ld_even_map(uint32_t num_sms, uint32_t nd, uint8_t *map);

/* Median of n values (copies; does not reorder the input). n == 0 gives 0. Allocation
 * failure of large inputs is avoided: n <= 4096 uses the stack, larger returns NAN. */
double ld_median(const float *v, size_t n);

/* First TPC whose present SMs map to different domains, or -1 if all agree. */
int ld_first_split_tpc(const uint8_t *map, uint32_t num_sms);

/* counts[d] = SMs mapped to d, for d < nd (counts has nd entries). */
void ld_count_domains(const uint8_t *map, uint32_t num_sms, uint32_t nd, uint32_t *counts);

/* Anchored classification. lat is [nd][num_sms][chunks]. Fills map (num_sms entries) with
 * each SM's faster domain (always, even when rejected) and *out. Returns 0 accepted,
 * 1 rejected (measurement disagrees with the rules), -1 bad input (non-finite or
 * non-positive latency, sizes out of range). */
int ld_classify_anchored(const float *lat, uint32_t nd, uint32_t num_sms, uint32_t chunks,
                         uint8_t *map, ld_classify_t *out);

/* Clustered classification. lat is [num_sms][nlines]. Splits the SMs into nd groups by the
 * correlation of their per-line residuals. Labels: when `labels` is non-NULL (per-SM
 * preferred domain from an anchored measurement, even one that failed validation), each
 * group takes the domain most of its SMs prefer, provided that gives distinct domains;
 * otherwise groups are numbered by their lowest SM id (the group of SM 0 is domain 0).
 * Returns 0 accepted, 1 rejected, -1 bad input or out of memory (verdict says which). */
int ld_classify_clustered(const float *lat, uint32_t num_sms, uint32_t nlines, uint32_t nd,
                          const uint8_t *labels, uint8_t *map, ld_classify_t *out);

/* Balanced map: starting from `physical`, move the fewest whole TPCs from the largest
 * domain to the smallest until the counts are as equal as whole TPCs allow (a one-SM TPC,
 * whose partner is disabled, moves alone). Returns the number of TPCs moved. */
int ld_balance_map(const uint8_t *physical, uint32_t num_sms, uint32_t nd, uint8_t *balanced);

/* Fill a topology struct from `map`: magic, version, counts, flags = (valid ? VALID : 0) |
 * (balanced ? BALANCED : 0) | source << LDSHIM_TOPO_SOURCE_SHIFT. */
void ld_topology_fill(ldshim_topology_t *t, const uint8_t *map, uint32_t num_sms, uint32_t nd,
                      int valid, int balanced, enum ldshim_topology_source source);

/* A matrix written by LDSHIM_PROBE_DUMP (shim/probe.c), read back by `ldshim-probe
 * --classify`: rows "sm,v0,v1,..." (clustered, [sm][line]) or "sm,dD,v0,..." (anchored,
 * [d][sm][chunk], domain blocks in order, SMs 0..n-1 in each). Every bound is checked: SM
 * and domain ids, row and column counts, the rows' order, numbers parsed whole and finite. */
#define LD_DUMP_MAX_BYTES  (64u << 20)   /* the file                                       */
#define LD_DUMP_MAX_LINE   65536         /* one row (512 lines of a clustered attempt: 4 KB) */
#define LD_DUMP_MAX_COLS   4096          /* values per row (ld_median's stack bound)        */

typedef struct {
    uint32_t nsms, cols;
    uint32_t ndomains;        /* anchored: domain blocks; 0: clustered                     */
    float   *v;               /* malloc'd, nsms * cols (clustered) or ndomains * nsms * cols */
} ld_dump_t;

/* Parse `len` bytes (need not be NUL-terminated). 0 and *out (free with ld_dump_free), or
 * -1 with a one-line reason naming the line. Reentrant. */
int ld_dump_parse(const char *text, size_t len, ld_dump_t *out, char *why, size_t n);
void ld_dump_free(ld_dump_t *d);

#ifdef __cplusplus
}
#endif

#endif
