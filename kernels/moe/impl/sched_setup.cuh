// impl/sched_setup.cuh — the block-wide setup every kernel body runs at entry, before any tile:
// the per-launch tables (expert token starts, m-blocks per expert and their prefix), SMs per
// domain in the map the kernels see, this SM's static rank, and the resolved scheduling mode.
// The claimer that then hands out tiles is in scheduler.cuh.
#pragma once
#include <stdint.h>
#include "kernels/ldshim_topology.h"
#include "kernels/moe/impl/params.cuh"

namespace ldmoe {

// Block-wide setup: the expert token starts (tstart, see kTStart), m-blocks per expert and their
// exclusive prefix (prefix[E] = total), SMs per domain in the map the kernels see, and the
// resolved mode. All threads call it; it ends with a barrier.
struct SchedShared {
    int32_t warp_max[32];
    int32_t warp_sum[32];
    int32_t domcnt[LDMOE_MAX_DOMAINS];
    int32_t mode;
    int32_t rank;   // this SM's rank among the SMs of its domain (unaware: of all), by g_sm_key; -1: off the map
    int32_t qranks[LDMOE_MAX_DOMAINS];   // scheduler rank tables (ldmoe_rank_tables)
    int32_t qbase[LDMOE_MAX_DOMAINS];
};

// SM order key: the position at which the hardware handed each SM a CTA in a one-CTA-per-SM probe
// launch (ldmoe_api.cu writes it once per device, on the first launch's stream). Ranks follow
// (key, smid); all zeros (not probed yet) means plain SM-id order. Only ever a performance hint:
// the scheduler stays exactly-once whatever the keys say. (Defined here; one translation unit.)
__device__ uint16_t g_sm_key[LDSHIM_MAX_SMS];

// The scheduling mode a launch runs in: AUTO is aware unless the published map says the
// placement is not (LDSHIM_TOPO_AWARE clear); one slice is one queue.
__device__ __forceinline__ int resolve_mode(int mode, bool published, uint32_t flags, int D) {
    if (mode == kModeAuto) mode = (published && !(flags & LDSHIM_TOPO_AWARE)) ? kModeUnaware : kModeAware;
    if (D == 1 && mode == kModeAware) mode = kModeUnaware;
    return mode;
}

template <int THREADS, int BN>
__device__ __forceinline__ void sched_setup(const KParams &p, const ldshim_topology_t *topo, int32_t *prefix,
                                            SchedShared &sh) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int E = p.E, D = p.D;
    const int chunk = (E + THREADS - 1) / THREADS;
    const int lo = tid * chunk, hi = min(E, lo + chunk);
    int32_t *tstart = prefix + kTStart;
    // The map's loads are issued first, before any barrier, so that their latencies overlap each
    // other's and pass 1's (offs): the header, the entry and SM key of each of this thread's SM
    // slots, and those of this CTA's SM. Used after pass 2.
    const uint32_t t_magic = topo->magic, t_num = topo->num_sms, t_flags = topo->flags, t_version = topo->version;
    constexpr int SLOTS = (LDSHIM_MAX_SMS + THREADS - 1) / THREADS;
    uint32_t slot_dom[SLOTS], slot_key[SLOTS], slot_bound[SLOTS];
    #pragma unroll
    for (int i = 0; i < SLOTS; ++i) {
        const int sl = tid + i * THREADS;
        slot_dom[i] = sl < LDSHIM_MAX_SMS ? topo->sm_domain[sl] : 0u;
        slot_key[i] = sl < LDSHIM_MAX_SMS ? g_sm_key[sl] : 0u;
        slot_bound[i] = sl < LDSHIM_MAX_SMS ? topo->sm_bound[sl] : 1u;
    }
    uint32_t me;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(me));
    const uint32_t me_slot = me < LDSHIM_MAX_SMS ? me : 0u;
    const uint32_t me_dom = topo->sm_domain[me_slot], me_key = g_sm_key[me_slot];
    // Pass 1: expert ends offs[e] clamped to [0, T] and made monotone by a running maximum (a
    // block-wide max-scan): expert e owns rows tstart[e] = max(0, ends before e) up to
    // tstart[e+1]. Valid offs are unchanged by this; with decreasing (invalid) offs every row
    // still belongs to at most one expert, so the m-block total stays <= T/BN + E (no int32
    // wrap, no row written twice).
    auto end_of = [&](int e) {
        int64_t f = __ldg(p.offs + e);
        return (int32_t)(f < 0 ? 0 : (f > p.T ? p.T : f));   // T < 2^31 (checked on the host)
    };
    int32_t cmax = 0;
    for (int e = lo; e < hi; ++e) cmax = max(cmax, end_of(e));
    int32_t imax = cmax;
    #pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int32_t v = __shfl_up_sync(0xffffffffu, imax, o);
        if (lane >= o) imax = max(imax, v);
    }
    const int32_t lane_before = __shfl_up_sync(0xffffffffu, imax, 1);
    if (lane == 31) sh.warp_max[warp] = imax;
    if (tid < LDMOE_MAX_DOMAINS) sh.domcnt[tid] = 0;
    __syncthreads();
    int32_t run_max = lane >= 1 ? lane_before : 0;   // max of the ends before this thread's chunk
    for (int w2 = 0; w2 < warp; ++w2) run_max = max(run_max, sh.warp_max[w2]);
    // Pass 2: m-blocks per expert, then their exclusive prefix (block-wide sum-scan).
    int32_t sum = 0;
    for (int e = lo; e < hi; ++e) {
        const int32_t s = run_max, f = max(s, end_of(e));
        tstart[e] = s;
        if (e == E - 1) tstart[E] = f;
        const int32_t mb = (int32_t)(((int64_t)f - s + BN - 1) / BN);
        prefix[e] = mb;   // temporarily the count
        sum += mb;
        run_max = f;
    }
    int32_t incl = sum;
    #pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int32_t v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
    }
    if (lane == 31) sh.warp_sum[warp] = incl;
    __syncthreads();
    int32_t base = 0;
    for (int w2 = 0; w2 < warp; ++w2) base += sh.warp_sum[w2];
    int32_t run = base + incl - sum;
    for (int e = lo; e < hi; ++e) { int32_t mb = prefix[e]; prefix[e] = run; run += mb; }
    if (tid == THREADS - 1) prefix[E] = run;   // last thread's running sum is the total

    const bool published = t_magic == LDSHIM_TOPOLOGY_MAGIC;
    const uint32_t nsm = min(published ? t_num : gridDim.x, (uint32_t)LDSHIM_MAX_SMS);
    // Compute binding: only the SMs the process is bound to hold ranks (a domain with none of
    // them is stolen from by everyone, ldmoe_may_steal).
    const bool bound_set = published && t_version >= 2 && (t_flags & LDSHIM_TOPO_BOUND);
    auto dom_of = [&](uint32_t s, uint32_t entry) { return (published ? entry : ldshim_even_domain(s, D)) % D; };
    // The mode decides whether ranks count per domain (aware) or over all SMs; resolve it first.
    const int m = resolve_mode(p.mode, published, t_flags, D);
    const bool on_map = me < nsm && (!bound_set || topo->sm_bound[me_slot]);
    const uint32_t my_d = on_map ? dom_of(me, me_dom) : 0u;
    const uint32_t my_key = on_map ? me_key : 0u;
    if (tid == 0) sh.rank = on_map ? 0 : -1;
    __syncthreads();
    int32_t before = 0;   // SMs of my rank group ordered before me
    #pragma unroll
    for (int i = 0; i < SLOTS; ++i) {
        const uint32_t sl = tid + i * THREADS;
        if (sl >= nsm || (bound_set && !slot_bound[i])) continue;
        const uint32_t d = dom_of(sl, slot_dom[i]);
        atomicAdd(&sh.domcnt[d], 1);
        const uint32_t k = slot_key[i];
        if (on_map && (m != kModeAware || d == my_d) && (k < my_key || (k == my_key && sl < me))) ++before;
    }
    if (on_map && before) atomicAdd(&sh.rank, before);
    __syncthreads();
    if (tid == 0) {
        sh.mode = m;
        ldmoe_rank_tables(sh.domcnt, D, m == kModeAware, sh.qranks, sh.qbase, LDMOE_MAX_DOMAINS);
    }
    __syncthreads();
}

}  // namespace ldmoe
