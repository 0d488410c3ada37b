// impl/scheduler.cuh — persistent tile scheduler of the grouped GEMM (the claimer).
//
// One CTA per SM. Thread 0 of each CTA claims tiles; the others learn them through shared
// memory. Queues (aware mode): one per weight slice d; unaware: one queue over the global order;
// static: tile blockIdx.x + i*gridDim.x, no atomics.
//
// Each queue q has a static prefix and a dynamic tail:
//   - prefix: the first n_q * W tiles, n_q = SMs of domain q in the map (unaware: all), W waves.
//     "Rank" r of queue q owns tiles r, r + n_q, r + 2 n_q, ... (W of them). A CTA computes its
//     rank from its SM's position in the SM order key (the order in which the hardware hands out
//     the CTAs of a launch: GPC by GPC, see impl/library.cuh) among the SMs of its domain, so that
//     consecutive tiles (the m-blocks of one weight block) run at the same time on SMs of one GPC
//     and share its L2 traffic; where the GPU is power-capped, L2 traffic costs SM clock (doc/moe.md
//     has the sector counts). The Loader turns the static waves off where each expert has one
//     m-block (decode): no neighbour shares its weight block, so there is nothing to gain.
//   - tail: the rest, claimed one tile at a time from the queue's counter, so that unequal domains,
//     SMs busy with other work and stealing still balance.
// A rank is owned by whoever flips its flag first (take()), and every CTA that runs out of its
// own work sweeps the ranks of the queues it may take from before their tails, so each rank runs
// exactly once even when CTAs land on SMs other than the map expects, or two CTAs share an SM.
//
// NOTES: counters need no host reset. Each CTA, once it can claim nothing more, "retires" by
// incrementing the retired count (after a fence); the CTA that retires last drains every queue
// (ranks and tails, stealing unconditionally, so tiles of a domain that got no CTA are still
// computed) and then zeroes the whole workspace for the next launch on it. No CTA ever waits for
// another, so a partially resident grid cannot deadlock.
//
// The claimer is host-compilable with an atomics policy (the CPU tests drive it from threads).
#pragma once
#include <stdint.h>
#include "kernels/ldshim_topology.h"
#include "kernels/moe/ldmoe.h"
#include "kernels/moe/ldmoe_tiles.h"

#if defined(__CUDACC__)
#define LDMOE_SCHED_FN __device__ __forceinline__
#else
#define LDMOE_SCHED_FN inline
#endif

namespace ldmoe {

// Workspace words (per device and stream): [0, 8) tail counters of the queues; [8] retired CTAs;
// [16, 24) sweep counters of the queues; [32, 32 + LDSHIM_MAX_SMS) rank flags, rank r of queue
// q at kTakenBase + (ranks of queues before q) + r.
constexpr int kDoneSlot = LDMOE_MAX_DOMAINS;
constexpr int kSweepBase = 16;
constexpr int kTakenBase = 32;
constexpr int kCounterWords = kTakenBase + LDSHIM_MAX_SMS;

enum { kModeAuto = 0, kModeAware = 1, kModeUnaware = 2, kModeStatic = 3 };

#if defined(__CUDACC__)
struct DeviceAtomics {
    __device__ static unsigned add(unsigned *p, unsigned v) { return atomicAdd(p, v); }
    __device__ static unsigned exch(unsigned *p, unsigned v) { return atomicExch(p, v); }
    __device__ static void store(unsigned *p, unsigned v) { *reinterpret_cast<volatile unsigned *>(p) = v; }
    __device__ static void fence() { __threadfence(); }
};
#endif

// Per-CTA scheduler state; meaningful in the claiming thread only.
template <class A>
struct ClaimerT {
    unsigned *ctr;
    int64_t per_queue;     // tiles per queue (aware: per slice; otherwise all)
    int64_t total;
    int64_t waves;         // W: static tiles per rank (0: every tile from the tail counter)
    int32_t D, my_dom, mode, grid, nq;
    // Per-queue tables, LDMOE_MAX_DOMAINS entries each, owned by the caller (the kernel keeps
    // them in shared memory: arrays here would put the whole claimer in local memory).
    const int32_t *n;      // ranks of queue q (0 past the last queue)
    const int32_t *base;   // first flag of queue q (after kTakenBase); base[q] + n[q] <= LDSHIM_MAX_SMS
    int32_t my_rank;       // rank of this CTA in its own queue; -1: none
    int32_t cur;           // position in my queue order (0 = own domain) of the last tail claim
    int32_t sq;            // queue of the static run in progress (-1: none)
    int64_t sidx;          // its next index in the queue
    uint32_t empty_mask;   // tails seen empty
    uint32_t swept_mask;   // queues whose ranks are all owned
    uint32_t allow_mask;   // queues this CTA may take from (own always)
    bool own_tried, retired, last, finished;
    int64_t static_next;
    int32_t pre_q;         // queue of a tail claim made before init (preclaimed); -1: none
    unsigned pre_v;        // its counter value

    // ranks: ranks per queue (aware: SMs per domain in the map; otherwise [0] = all SMs; 0 past
    // the last queue), bases: their exclusive prefix sum (ldmoe_rank_tables). allow: queues besides
    // my own I may take from before the drain. w: static waves W.
    LDMOE_SCHED_FN void init(unsigned *c, int m, int32_t d_count, int32_t dom, int32_t rank, int32_t grid_size,
                             int64_t pq, int64_t tot, const int32_t *ranks, const int32_t *bases, uint32_t allow,
                             int64_t w, int32_t first_static) {
        ctr = c; mode = m; D = d_count; my_dom = dom; my_rank = rank; grid = grid_size;
        per_queue = pq; total = tot; waves = w;
        nq = m == kModeAware ? d_count : 1;
        n = ranks; base = bases;
        cur = 0; sq = -1; sidx = 0;
        empty_mask = swept_mask = 0;
        allow_mask = (m == kModeAware ? 1u << dom : 1u) | allow;
        own_tried = retired = last = finished = false;
        static_next = first_static;
        pre_q = -1;
        pre_v = 0;
    }

    // A tail claim on queue q (counter value v) that the caller made before init: the decode
    // kernels make their own queue's at entry, so that the atomic's latency overlaps the
    // per-launch setup instead of following it. The next slow_claim uses it before anything else
    // (so it is never lost, whichever queue it names). Not in static mode (no counters there).
    LDMOE_SCHED_FN void preclaimed(int32_t q, unsigned v) { pre_q = q; pre_v = v; }

    LDMOE_SCHED_FN int32_t queue_at(int32_t i) const { return mode == kModeAware ? (my_dom + i) % D : 0; }
    LDMOE_SCHED_FN int32_t own_queue() const { return mode == kModeAware ? my_dom : 0; }
    LDMOE_SCHED_FN int64_t prefix_len(int32_t q) const { return (int64_t)n[q] * waves; }
    LDMOE_SCHED_FN int64_t ticket(int32_t q, int64_t idx) const { return mode == kModeAware ? q * per_queue + idx : idx; }
    LDMOE_SCHED_FN bool take(int32_t q, int32_t r) { return A::exch(&ctr[kTakenBase + base[q] + r], 1u) == 0u; }
    LDMOE_SCHED_FN void run_rank(int32_t q, int32_t r) { sq = q; sidx = r; }

    LDMOE_SCHED_FN int64_t slow_claim() {
        if (finished) return -1;
        if (mode == kModeStatic) {
            int64_t t = static_next;
            static_next += grid;
            if (t < total) return t;
            finished = true;
            return -1;
        }
        if (pre_q >= 0) {
            const int32_t q = pre_q;
            pre_q = -1;
            if (waves == 0) own_tried = true;   // no rank to take: the next claims may be split (issue)
            if ((int64_t)pre_v < per_queue - prefix_len(q)) {
                cur = mode == kModeAware ? (q - my_dom + D) % D : 0;
                return ticket(q, prefix_len(q) + pre_v);
            }
            empty_mask |= 1u << q;
        }
        for (;;) {
            if (sq >= 0) {   // a static run in progress
                if (sidx < prefix_len(sq)) {
                    int64_t t = ticket(sq, sidx);
                    sidx += n[sq];
                    return t;
                }
                sq = -1;
            }
            if (!own_tried) {
                own_tried = true;
                if (waves > 0 && my_rank >= 0 && my_rank < n[own_queue()] && take(own_queue(), my_rank)) {
                    run_rank(own_queue(), my_rank);
                    continue;
                }
            }
            bool found = false;
            for (int32_t i = 0; i < nq && !found; ++i) {
                const int32_t q = queue_at(i);
                const uint32_t bit = 1u << q;
                if (!last && !(allow_mask & bit)) continue;
                while (waves > 0 && !(swept_mask & bit)) {   // ranks nobody owns yet
                    unsigned c = A::add(&ctr[kSweepBase + q], 1u);
                    if ((int64_t)c >= n[q]) { swept_mask |= bit; break; }
                    if (take(q, (int32_t)c)) { run_rank(q, (int32_t)c); found = true; break; }
                }
                if (found) break;
                if (!(empty_mask & bit)) {
                    unsigned v = A::add(&ctr[q], 1u);
                    if ((int64_t)v < per_queue - prefix_len(q)) { cur = i; return ticket(q, prefix_len(q) + v); }
                    empty_mask |= bit;
                }
            }
            if (found) continue;
            if (last) {   // every queue drained and every other CTA retired: reset for the next launch
                // Plain stores: nobody else touches the workspace again in this launch, and the
                // next launch on it is stream-ordered after this one. (Serial atomics here cost
                // tens of microseconds at the end of every launch.)
                const int32_t flags = waves > 0 ? base[LDMOE_MAX_DOMAINS - 1] + n[LDMOE_MAX_DOMAINS - 1] : 0;
                for (int32_t w = 0; w < kTakenBase + flags; ++w) A::store(&ctr[w], 0u);
                A::fence();
                finished = true;
                return -1;
            }
            if (retired) { finished = true; return -1; }
            retired = true;
            A::fence();   // my claims are ordered before my retirement
            unsigned prev = A::add(&ctr[kDoneSlot], 1u);
            if ((int64_t)prev != (int64_t)grid - 1) { finished = true; return -1; }
            last = true;
            A::fence();
            empty_mask = swept_mask = 0;   // re-check everything (queues I was not allowed to touch)
        }
    }

    // Split claim for the tail: issue() starts the atomic on the current queue's tail counter
    // without using its result; resolve() interprets it later (hiding the atomic's latency behind
    // a tile of compute) and falls back to slow_claim() when that queue ran dry. Static runs and
    // sweeps need no early atomic: issue() leaves them to slow_claim().
    LDMOE_SCHED_FN unsigned issue(int32_t *q_out, bool *fast) {
        *fast = false;
        if (finished || mode == kModeStatic || sq >= 0 || !own_tried) return 0;
        const int32_t q = queue_at(cur);
        const uint32_t bit = 1u << q;
        if ((empty_mask & bit) || (waves > 0 && !(swept_mask & bit))) return 0;
        *q_out = q;
        *fast = true;
        return A::add(&ctr[q], 1u);
    }
    // Whether ticket t (a tail ticket of this launch) is among the last n[q] of its queue: fewer
    // tiles are left after it than the queue has ranks, so whoever asks first should get them.
    LDMOE_SCHED_FN bool in_last_wave(int64_t t) const {
        if (mode == kModeStatic) return false;
        const int32_t q = mode == kModeAware ? (int32_t)(t / per_queue) : 0;
        return t - (int64_t)q * per_queue + n[q] >= per_queue;
    }
    LDMOE_SCHED_FN int64_t resolve(unsigned v, int32_t q, bool fast) {
        if (fast) {
            if ((int64_t)v < per_queue - prefix_len(q)) return ticket(q, prefix_len(q) + v);
            empty_mask |= 1u << q;
        }
        return slow_claim();
    }
};

// Tickets in claim order. The claim of the tile after the current one is issued when the
// current one starts (issue) and resolved when it is done (resolve), so the atomic's latency
// hides behind a tile of loads; only the launch's first claim is waited for. The claimer is
// held here (registers), or, with SMEM, behind a pointer to shared memory (for a thread that
// has few registers; its state is touched once per tile). Either way the in-flight atomic's
// result stays here, in a register, so the thread does not wait for it until it resolves it.
template <class A, bool SMEM = false>
struct TicketStream {
    ClaimerT<A> held;      // !SMEM
    ClaimerT<A> *shared;   // SMEM
    // Late tail: in a queue's last wave the next claim is made when the current tile is done,
    // not when it starts, so that the last tiles go to the CTAs that free up first rather than
    // to the ones that asked a tile earlier (Loader::start says where).
    bool late_tail;
    bool pend, pend_fast;
    int32_t pend_q;
    unsigned pend_v;

    LDMOE_SCHED_FN ClaimerT<A> &cl() {
        if constexpr (SMEM) return *shared;
        else return held;
    }
    LDMOE_SCHED_FN int64_t first() {
        const int64_t t = cl().slow_claim();
        arm(t);
        return t;
    }
    LDMOE_SCHED_FN int64_t next() {
        const int64_t t = pend ? cl().resolve(pend_v, pend_q, pend_fast) : -1;
        arm(t);
        return t;
    }
    LDMOE_SCHED_FN void arm(int64_t t) {
        pend = t >= 0;
        if (!pend) return;
        if (late_tail && cl().in_last_wave(t)) pend_fast = false;   // resolve() claims then
        else pend_v = cl().issue(&pend_q, &pend_fast);
    }
};

}  // namespace ldmoe
