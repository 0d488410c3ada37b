// impl/sched_setup.cuh — the block-wide setup every kernel body runs at entry, before any tile:
// the per-launch tables (expert token starts, m-blocks per expert and their prefix), SMs per
// domain in the map the kernels see, this SM's static rank, and the resolved scheduling mode.
// The claimer that then hands out tiles is in scheduler.cuh.
#pragma once
#include <stdint.h>
#include "kernels/ldshim_topology.h"
#include "kernels/moe/impl/params.cuh"
#include "kernels/moe/impl/scheduler.cuh"

namespace ldmoe {

// Block-wide setup: the expert token starts (tstart, see kTStart), m-blocks per expert and their
// exclusive prefix (prefix[E] = total), SMs per domain in the map the kernels see, this SM's rank,
// its domain, and the resolved mode. All threads call it; it ends with a barrier.
//
// It is on the critical path of every launch (nothing streams before the producer has its first
// tile), so every global load is issued in one batch per thread and each value is read once:
// the map (a launch constant, written only by host copies) before waiting for the previous
// kernel, the offsets and SM keys (which an earlier kernel may have written) right after, each
// thread's expert ends kept in registers for both passes, and the per-domain SM counts and ranks
// reduced per warp: the loads' latencies overlap one another, nothing is loaded from global memory
// after the first barrier, and three barriers suffice.
constexpr int kSetupMaxWarps = 12;   // THREADS <= 384
struct SchedShared {
    int32_t warp_max[kSetupMaxWarps];
    int32_t warp_sum[kSetupMaxWarps];
    uint64_t warp_dom[kSetupMaxWarps];   // per warp: SMs of its slots in domain d, 8 bits at 8d
    int32_t warp_before[kSetupMaxWarps]; // per warp: SMs of my rank group its slots order before me
    int32_t domcnt[LDMOE_MAX_DOMAINS];
    int32_t mode;
    int32_t rank;   // this SM's rank among the SMs of its domain (unaware: of all), by g_sm_key; -1: off the map
    int32_t qranks[LDMOE_MAX_DOMAINS];   // scheduler rank tables (ldmoe_rank_tables)
    int32_t qbase[LDMOE_MAX_DOMAINS];
    int32_t my_dom;   // this SM's domain as ldshim_sm_domain() gives it, modulo D
    // EARLY_CLAIM (thread 0's): the queue of the tail claim made in the setup (-1: none), its
    // counter value (ClaimerT::preclaimed). Read at use, like my_dom, so that no register holds
    // them across the setmaxnreg split.
    int32_t early_q;
    uint32_t early_v;
};

// SM order key: the position at which the hardware handed each SM a CTA in a one-CTA-per-SM probe
// launch (impl/library.cuh writes it once per device, on the first launch's stream). Ranks follow
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

// DEPENDENT: the kernel is a programmatic dependent launch; the setup waits for the previous
// kernel (griddep_wait) after the map's loads and before anything else. EARLY_CLAIM: thread 0
// makes a tail claim on its own queue as soon as the map is known, unless the mode is static
// (ClaimerT::preclaimed), recorded in sh.early_q / early_v (otherwise early_q = -1).
template <int THREADS, int BN, bool DEPENDENT = false, bool EARLY_CLAIM = false>
__device__ __forceinline__ void sched_setup(const KParams &p, const ldshim_topology_t *topo, int32_t *prefix,
                                            SchedShared &sh) {
    static_assert(THREADS % 32 == 0 && THREADS / 32 <= kSetupMaxWarps, "setup: warps per block");
    static_assert(LDMOE_MAX_DOMAINS <= 8, "setup: per-warp domain counts are 8 fields of 8 bits");
    constexpr int SLOTS = (LDSHIM_MAX_SMS + THREADS - 1) / THREADS;
    static_assert(32 * SLOTS < 256, "setup: a warp's count per domain fits 8 bits");
    constexpr int CH = (LDMOE_MAX_EXPERTS + THREADS - 1) / THREADS;   // experts per thread, at most
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int E = p.E, D = p.D;
    const int chunk = (E + THREADS - 1) / THREADS;
    const int lo = tid * chunk, hi = min(E, lo + chunk);
    int32_t *tstart = prefix + kTStart;

    // The map: header, this thread's SM slots and this CTA's SM. No kernel writes it (the shim
    // publishes it with a host copy that completes before the shim returns), so it is loaded
    // before waiting for the previous kernel: under a programmatic launch, while that one ends.
    const uint32_t t_magic = topo->magic, t_num = topo->num_sms, t_flags = topo->flags, t_version = topo->version;
    uint32_t slot_dom[SLOTS], slot_bound[SLOTS], slot_key[SLOTS];
    #pragma unroll
    for (int i = 0; i < SLOTS; ++i) {
        const int sl = tid + i * THREADS;
        slot_dom[i] = sl < LDSHIM_MAX_SMS ? topo->sm_domain[sl] : 0u;
        slot_bound[i] = sl < LDSHIM_MAX_SMS ? topo->sm_bound[sl] : 1u;
    }
    uint32_t me;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(me));
    const uint32_t me_slot = me < LDSHIM_MAX_SMS ? me : 0u;
    const uint32_t me_dom = topo->sm_domain[me_slot], me_bound = topo->sm_bound[me_slot];
    if constexpr (DEPENDENT) griddep_wait();
    // What an earlier kernel may have written: the SM keys (the order probe's launch) and offs.
    #pragma unroll
    for (int i = 0; i < SLOTS; ++i) {
        const int sl = tid + i * THREADS;
        slot_key[i] = sl < LDSHIM_MAX_SMS ? g_sm_key[sl] : 0u;
    }
    const uint32_t me_key = g_sm_key[me_slot];
    // Expert ends offs[e] clamped to [0, T] (T < 2^31, checked on the host), this thread's chunk.
    int32_t ends[CH];
    #pragma unroll
    for (int i = 0; i < CH; ++i) {
        int64_t f = 0;
        if (lo + i < hi) f = __ldg(p.offs + lo + i);
        ends[i] = (int32_t)(f < 0 ? 0 : (f > p.T ? p.T : f));
    }

    const bool published = t_magic == LDSHIM_TOPOLOGY_MAGIC;
    const int m = resolve_mode(p.mode, published, t_flags, D);
    const int32_t sm_dom = (int32_t)((published && me < t_num && me < LDSHIM_MAX_SMS ? me_dom : ldshim_even_domain(me, D)) % D);
    // The atomic's latency (contended: every CTA makes one now) passes under the rest; its value
    // is stored at the end, when it is back.
    const int32_t early_q = EARLY_CLAIM && m != kModeStatic ? (m == kModeAware ? sm_dom : 0) : -1;
    uint32_t early_v = 0;
    if (tid == 0 && early_q >= 0) early_v = atomicAdd(&p.ctr[early_q], 1u);

    // Ranks. Only the SMs the process is bound to hold ranks (compute binding; a domain with none
    // of them is stolen from by everyone, ldmoe_may_steal). Per warp: SMs per domain of its slots,
    // and how many of them order before this CTA's SM in its rank group (aware: its domain).
    const uint32_t nsm = min(published ? t_num : gridDim.x, (uint32_t)LDSHIM_MAX_SMS);
    const bool bound_set = published && t_version >= 2 && (t_flags & LDSHIM_TOPO_BOUND);
    auto dom_of = [&](uint32_t s, uint32_t entry) { return (published ? entry : ldshim_even_domain(s, D)) % D; };
    const bool on_map = me < nsm && (!bound_set || me_bound);
    const uint32_t my_d = on_map ? dom_of(me, me_dom) : 0u;
    const uint32_t my_key = on_map ? me_key : 0u;
    uint64_t wdom = 0;
    int32_t before = 0;
    #pragma unroll
    for (int i = 0; i < SLOTS; ++i) {
        const uint32_t sl = tid + i * THREADS;
        const bool valid = sl < nsm && (!bound_set || slot_bound[i]);
        const uint32_t d = valid ? dom_of(sl, slot_dom[i]) : 0u;
        for (int q = 0; q < D; ++q)
            wdom += (uint64_t)__popc(__ballot_sync(0xffffffffu, valid && d == (uint32_t)q)) << (8 * q);
        const uint32_t k = slot_key[i];
        if (valid && on_map && (m != kModeAware || d == my_d) && (k < my_key || (k == my_key && sl < me))) ++before;
    }
    before = __reduce_add_sync(0xffffffffu, before);
    // Pass 1: a block-wide max-scan of the ends (made monotone by a running maximum): expert e
    // owns rows tstart[e] = max(0, ends before e) up to tstart[e+1]. Valid offs are unchanged by
    // this; with decreasing (invalid) offs every row still belongs to at most one expert, so the
    // m-block total stays <= T/BN + E (no int32 wrap, no row written twice).
    int32_t cmax = 0;
    #pragma unroll
    for (int i = 0; i < CH; ++i) cmax = max(cmax, ends[i]);   // 0 past the chunk
    int32_t imax = cmax;
    #pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int32_t v = __shfl_up_sync(0xffffffffu, imax, o);
        if (lane >= o) imax = max(imax, v);
    }
    const int32_t lane_before = __shfl_up_sync(0xffffffffu, imax, 1);
    if (lane == 31) sh.warp_max[warp] = imax;
    if (lane == 0) {
        sh.warp_dom[warp] = wdom;
        sh.warp_before[warp] = before;
    }
    __syncthreads();
    // Thread 0: SMs per domain, the rank, the mode and the rank tables; everyone: pass 2, the
    // m-blocks per expert and their block-wide sum-scan.
    if (tid == 0) {   // in registers: read-modify-writes of shared memory here would each wait a round trip
        int32_t rank = 0, cnt[LDMOE_MAX_DOMAINS] = {};
        #pragma unroll
        for (int w = 0; w < THREADS / 32; ++w) {
            const uint64_t v = sh.warp_dom[w];   // fields past D are zero
            rank += sh.warp_before[w];
            #pragma unroll
            for (int q = 0; q < LDMOE_MAX_DOMAINS; ++q) cnt[q] += (int32_t)((v >> (8 * q)) & 0xffu);
        }
        #pragma unroll
        for (int q = 0; q < LDMOE_MAX_DOMAINS; ++q) sh.domcnt[q] = cnt[q];
        sh.rank = on_map ? rank : -1;
        sh.mode = m;
        sh.my_dom = sm_dom;
        ldmoe_rank_tables(cnt, D, m == kModeAware, sh.qranks, sh.qbase, LDMOE_MAX_DOMAINS);
    }
    int32_t run_max = lane >= 1 ? lane_before : 0;   // max of the ends before this thread's chunk
    #pragma unroll
    for (int w2 = 0; w2 < THREADS / 32; ++w2)   // a fixed count: the loads issue together
        if (w2 < warp) run_max = max(run_max, sh.warp_max[w2]);
    int32_t sum = 0;
    #pragma unroll
    for (int i = 0; i < CH; ++i) {
        const int e = lo + i;
        if (e < hi) {
            const int32_t s = run_max, f = max(s, ends[i]);
            tstart[e] = s;
            if (e == E - 1) tstart[E] = f;
            const int32_t mb = (int32_t)(((int64_t)f - s + BN - 1) / BN);
            ends[i] = mb;   // from here: the count
            sum += mb;
            run_max = f;
        }
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
    #pragma unroll
    for (int w2 = 0; w2 < THREADS / 32; ++w2)
        if (w2 < warp) base += sh.warp_sum[w2];
    int32_t run = base + incl - sum;
    #pragma unroll
    for (int i = 0; i < CH; ++i)
        if (lo + i < hi) { prefix[lo + i] = run; run += ends[i]; }
    if (tid == THREADS - 1) prefix[E] = run;   // last thread's running sum is the total
    if (tid == 0) {   // read by thread 0 only (after the barrier: the atomic's value is back by then)
        sh.early_q = early_q;
        sh.early_v = early_v;
    }
    __syncthreads();
}

}  // namespace ldmoe
