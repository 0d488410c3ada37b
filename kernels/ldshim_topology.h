/* ldshim_topology.h — the SM→locality-domain map that libldshim publishes to kernels.
 *
 * A CUDA module that defines
 *
 *     LDSHIM_DEFINE_TOPOLOGY();        // expands to: __device__ ldshim_topology_t ldshim_topology;
 *
 * gets the symbol filled by libldshim (when preloaded) for the module's device when the
 * module is loaded, before any of its kernels can run. Without the shim the symbol stays
 * zero-initialized: magic == 0, and kernels must fall back to ldshim_even_domain().
 *
 * The struct is plain data, identical in C, C++ and CUDA, versioned by `version`.
 * Host code reads the same data through ldshim_get_topology() (see shim/ldshim.h).
 */
#ifndef LDSHIM_TOPOLOGY_H
#define LDSHIM_TOPOLOGY_H

#include <stddef.h>
#include <stdint.h>

#define LDSHIM_TOPOLOGY_MAGIC   0x4C445348u   /* "LDSH" */
#define LDSHIM_TOPOLOGY_VERSION 2u   /* 2: the bound SM set (sm_bound, bound_sms) */
#define LDSHIM_MAX_SMS          256           /* B300 has 148, H200 132 */
#define LDSHIM_MAX_DOMAINS      8
#define LDSHIM_TOPOLOGY_SYMBOL  "ldshim_topology"

/* flags */
#define LDSHIM_TOPO_VALID     (1u << 0)   /* the map came from a validated measurement        */
#define LDSHIM_TOPO_BALANCED  (1u << 1)   /* whole TPCs were moved so domains hold equal SMs   */
#define LDSHIM_TOPO_AWARE     (1u << 2)   /* kernels should schedule by domain (state `full`)  */
#define LDSHIM_TOPO_INVERTED  (1u << 3)   /* negative control (state `mismatch`)               */
#define LDSHIM_TOPO_BOUND     (1u << 4)   /* kernels run on a subset of the SMs: sm_bound[]    */
#define LDSHIM_TOPO_SOURCE_SHIFT 8        /* bits 8..11: enum ldshim_topology_source           */
#define LDSHIM_TOPO_SOURCE_MASK  (0xFu << LDSHIM_TOPO_SOURCE_SHIFT)

enum ldshim_topology_source {
    LDSHIM_SOURCE_NONE      = 0,
    LDSHIM_SOURCE_EVEN      = 1,   /* TPC t -> domain t mod D, no measurement            */
    LDSHIM_SOURCE_ANCHORED  = 2,   /* pointer chase against memory of known home          */
    LDSHIM_SOURCE_CLUSTERED = 3,   /* correlation clustering of per-line L2 latency       */
    LDSHIM_SOURCE_CACHE     = 4,   /* reused from the per-GPU cache (of one of the above) */
    LDSHIM_SOURCE_DRIVER    = 5    /* the driver's own answer (split by locality domain, or
                                    * %locality_domain_id), where it disagreed with a probe */
};

typedef struct ldshim_topology {
    uint32_t magic;        /* LDSHIM_TOPOLOGY_MAGIC once published, 0 before          */
    uint32_t version;      /* LDSHIM_TOPOLOGY_VERSION                                  */
    uint32_t num_sms;      /* entries of sm_domain that are meaningful                 */
    uint32_t num_domains;  /* >= 1                                                     */
    uint32_t flags;        /* LDSHIM_TOPO_*                                            */
    uint32_t sms_per_domain[LDSHIM_MAX_DOMAINS]; /* count of SMs mapped to each domain */
    uint8_t  sm_domain[LDSHIM_MAX_SMS];          /* indexed by %smid                   */
    /* version >= 2 */
    uint32_t bound_sms;    /* SMs this process's kernels run on (num_sms when unbound)   */
    uint32_t bound_domain; /* the domain they are bound to; LDSHIM_DOMAIN_NONE when the
                              process is unbound or bound to SMs of several domains      */
    uint8_t  sm_bound[LDSHIM_MAX_SMS];           /* 1: kernels may run on this SM      */
} ldshim_topology_t;

#define LDSHIM_DOMAIN_NONE 0xFFFFFFFFu
/* Bytes of a version-1 symbol (no bound set): the shim fills those too, as version 1. */
#define LDSHIM_TOPOLOGY_V1_BYTES offsetof(ldshim_topology_t, bound_sms)

/* Even map: TPC t (SMs 2t, 2t+1) -> domain t mod D. What a kernel uses without the shim. */
#if defined(__CUDACC__)
__host__ __device__
#endif
static inline uint32_t ldshim_even_domain(uint32_t smid, uint32_t num_domains) {
    return num_domains ? (smid >> 1) % num_domains : 0;
}

/* 1 if kernels of this process may run on SM `smid`: every SM unless the shim published a
 * bound set (compute binding). A persistent kernel counts these to size its grid. */
#if defined(__CUDACC__)
__host__ __device__
#endif
static inline int ldshim_sm_is_bound(const ldshim_topology_t *t, uint32_t smid) {
    if (t->magic != LDSHIM_TOPOLOGY_MAGIC || t->version < 2 || !(t->flags & LDSHIM_TOPO_BOUND)) return 1;
    return smid < LDSHIM_MAX_SMS && t->sm_bound[smid];
}

/* SMs the process's kernels run on: the bound count when the shim published one, else
 * `device_sms` (the device attribute). */
#if defined(__CUDACC__)
__host__ __device__
#endif
static inline uint32_t ldshim_bound_sms(const ldshim_topology_t *t, uint32_t device_sms) {
    if (t->magic != LDSHIM_TOPOLOGY_MAGIC || t->version < 2 || !(t->flags & LDSHIM_TOPO_BOUND) || !t->bound_sms)
        return device_sms;
    return t->bound_sms;
}

#if defined(__CUDACC__)
#define LDSHIM_DEFINE_TOPOLOGY() __device__ ldshim_topology_t ldshim_topology
/* Domain of the calling SM: the published entry when the shim filled the symbol, the even
 * map otherwise. `num_domains` is what the caller assumes when nothing is published. */
__device__ static inline uint32_t ldshim_sm_domain(const ldshim_topology_t *t, uint32_t fallback_domains) {
    uint32_t smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    if (t->magic == LDSHIM_TOPOLOGY_MAGIC && smid < t->num_sms && smid < LDSHIM_MAX_SMS)
        return t->sm_domain[smid];
    return ldshim_even_domain(smid, fallback_domains);
}
#endif

#endif /* LDSHIM_TOPOLOGY_H */
