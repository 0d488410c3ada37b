// ldmoe_sched.cuh — persistent tile scheduler of the grouped GEMM (device side).
//
// One CTA per SM. Thread 0 of each CTA claims tiles; the others learn them through shared
// memory. Queues (aware mode): one per weight slice d, counter ctr[d]; unaware: one queue
// ctr[0] over the global order; static: tile blockIdx.x + i*gridDim.x, no atomics.
//
// NOTES: counters need no host reset. Each CTA, once it can claim nothing more, "retires" by
// incrementing ctr[kDoneSlot] (after a fence); the CTA that retires last drains every queue
// (stealing unconditionally, so tiles of a domain that got no CTA are still computed) and then
// zeroes all counters for the next launch on this workspace. No CTA ever waits for another, so
// a partially resident grid cannot deadlock.
#pragma once
#include <stdint.h>
#include "kernels/ldshim_topology.h"
#include "kernels/moe/ldmoe_tiles.h"

namespace ldmoe {

constexpr int kDoneSlot = LDMOE_MAX_DOMAINS;        // ctr[8]: retired-CTA count
constexpr int kCounterWords = LDMOE_MAX_DOMAINS + 8; // workspace words per stream (64 B)

enum { kModeAuto = 0, kModeAware = 1, kModeUnaware = 2, kModeStatic = 3 };

// Per-CTA scheduler state; meaningful in thread 0 only.
struct Claimer {
    unsigned *ctr;
    int64_t per_queue;     // tiles per domain queue (aware) or all tiles (unaware/static)
    int64_t total;
    int32_t D, my_dom, mode;
    int32_t cur;           // position in my queue order (0 = own domain)
    uint32_t empty_mask;   // queues seen empty
    uint32_t allow_mask;   // queues this CTA may take from (own always)
    bool retired, last, finished;
    int64_t static_next;

    // Queue at position i of this CTA's order: own domain first, then the next ones.
    __device__ int32_t queue_at(int32_t i) const { return (my_dom + i) % D; }
    __device__ int32_t nqueues() const { return mode == kModeAware ? D : 1; }

    // Ticket encoding: aware -> d*per_queue + q; unaware/static -> global id.
    __device__ int64_t slow_claim() {
        if (finished) return -1;
        if (mode == kModeStatic) {
            int64_t t = static_next;
            static_next += gridDim.x;
            if (t < total) return t;
            finished = true;
            return -1;
        }
        for (;;) {
            for (int32_t i = 0; i < nqueues(); ++i) {
                int32_t q = mode == kModeAware ? queue_at(i) : 0;
                if (empty_mask & (1u << q)) continue;
                if (!last && !(allow_mask & (1u << q))) continue;
                unsigned v = atomicAdd(&ctr[q], 1u);
                if ((int64_t)v < per_queue) { cur = i; return (int64_t)q * per_queue * (mode == kModeAware) + v; }
                empty_mask |= 1u << q;
            }
            if (last) {   // every queue drained and every other CTA retired: reset for next launch
                for (int32_t q = 0; q < LDMOE_MAX_DOMAINS; ++q) atomicExch(&ctr[q], 0u);
                atomicExch(&ctr[kDoneSlot], 0u);
                __threadfence();
                finished = true;
                return -1;
            }
            if (retired) { finished = true; return -1; }
            retired = true;
            __threadfence();   // my claims are ordered before my retirement
            unsigned prev = atomicAdd(&ctr[kDoneSlot], 1u);
            if (prev != gridDim.x - 1) { finished = true; return -1; }
            last = true;
            __threadfence();
            empty_mask = 0;    // re-check everything (queues I was not allowed to touch)
        }
    }

    // Split claim for the steady state: issue() starts the atomic on the current queue without
    // using its result; resolve() interprets it later (hiding the atomic's latency behind a
    // k-step of compute) and falls back to slow_claim() when that queue ran dry.
    __device__ unsigned issue(int32_t *q_out, bool *fast) {
        *fast = false;
        if (finished || mode == kModeStatic) return 0;
        int32_t q = mode == kModeAware ? queue_at(cur) : 0;
        if (empty_mask & (1u << q)) return 0;
        *q_out = q;
        *fast = true;
        return atomicAdd(&ctr[q], 1u);
    }
    __device__ int64_t resolve(unsigned v, int32_t q, bool fast) {
        if (fast) {
            if ((int64_t)v < per_queue) return (int64_t)q * per_queue * (mode == kModeAware) + v;
            empty_mask |= 1u << q;
        }
        return slow_claim();
    }
};

}  // namespace ldmoe
