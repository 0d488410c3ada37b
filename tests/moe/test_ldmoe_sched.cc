// test_ldmoe_sched.cc — the kernel's tile scheduler (kernels/moe/impl/scheduler.cuh), compiled for the
// host and driven by one thread per simulated CTA with real atomics, random yields between
// them, and launches where CTAs land where the map does not expect them, share an SM (the same
// rank twice), do not all fit at once (partial residency), or may not steal. Each launch must
// compute every tile exactly once and leave the workspace zeroed for the next launch; with one
// CTA per mapped SM, every rank's static tiles must run on the CTA that holds that rank.
#include <stdint.h>
#include <string.h>
#include <condition_variable>
#include <mutex>
#include <random>
#include <sched.h>
#include <thread>
#include <vector>
#include "kernels/moe/impl/scheduler.cuh"

extern "C" {
#include "tests/unit/cunit_main.h"
}

using namespace ldmoe;

static thread_local std::minstd_rand t_rng;

struct HostAtomics {
    static void jitter() {
        if ((t_rng() & 7u) == 0) sched_yield();
    }
    static unsigned add(unsigned *p, unsigned v) { jitter(); return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
    static unsigned exch(unsigned *p, unsigned v) { jitter(); return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
    static void store(unsigned *p, unsigned v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
    static void fence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
};

// One simulated launch.
struct Launch {
    int mode = kModeAware;
    int D = 2;
    int grid = 0;                    // CTAs
    int64_t per_queue = 0;           // tiles per queue (aware) or all tiles
    std::vector<int32_t> map_ranks;  // ranks per queue as the map counts them (aware: D entries; else 1)
    std::vector<int32_t> cta_dom;    // domain each CTA lands in
    std::vector<int32_t> cta_rank;   // rank it computes (-1: off the map)
    int resident = 0;                // CTAs running at once (0: all)
    float steal_waves = 2.f;
    bool dynamic_only = false;
    // Every CTA makes its early claim (if any), then takes its own rank, before any goes on (as on
    // the GPU, where all start within microseconds and a static run lasts W tiles); needs full
    // residency.
    bool start_together = false;
    // Tail claims made before init (ClaimerT::preclaimed), as the decode kernels do at entry:
    // 0 none; 1 every CTA on its own queue; 2 a random third of the CTAs on a random queue
    // (including ones they may not steal from). Not in static mode.
    int preclaim = 0;
    bool late_tail = false;          // TicketStream::late_tail (lab tune bit)

    int64_t total() const { return mode == kModeAware ? per_queue * D : per_queue; }
    int nq() const { return mode == kModeAware ? D : 1; }
    int64_t waves() const {
        if (dynamic_only || mode == kModeStatic) return 0;
        return ldmoe_static_waves(total(), grid, per_queue, map_ranks.data(), nq());
    }
};

struct Outcome {
    std::vector<unsigned> count;   // per ticket
    std::vector<int> owner;        // last CTA that computed the ticket
    bool reset_ok = true;
    bool out_of_range = false;     // a ticket past the last tile
    std::vector<int64_t> first;    // per CTA: its first ticket (-1: none)
    std::vector<int64_t> early;    // per CTA: the ticket its early claim names (-1: none or past the tail)
};

static Outcome run_launch(const Launch &L, unsigned *ctr, unsigned seed) {
    Outcome o;
    const int64_t total = L.total();
    o.count.assign((size_t)total, 0u);
    o.owner.assign((size_t)total, -1);
    o.first.assign((size_t)L.grid, -1);
    o.early.assign((size_t)L.grid, -1);
    int32_t ranks[LDMOE_MAX_DOMAINS] = {}, bases[LDMOE_MAX_DOMAINS] = {};
    for (int q = 0, b = 0; q < L.nq(); ++q) {
        ranks[q] = L.map_ranks[(size_t)q];
        bases[q] = b;
        b += ranks[q];
    }
    for (int q = L.nq(); q < LDMOE_MAX_DOMAINS; ++q)
        bases[q] = bases[L.nq() - 1] + ranks[L.nq() - 1];
    uint32_t allow = 0;
    if (L.mode == kModeAware)
        for (int d = 0; d < L.D; ++d)
            if (ldmoe_may_steal(total, L.grid, L.steal_waves, ranks[d])) allow |= 1u << d;
    const int64_t waves = L.waves();
    const int resident = L.resident > 0 ? L.resident : L.grid;
    std::mutex mu;
    std::condition_variable cv;
    int running = 0, next_start = 0, ready = 0, claimed_early = 0;
    auto cta = [&](int b) {
        {   // partial residency: start in blockIdx order, at most `resident` at once
            std::unique_lock<std::mutex> lk(mu);
            cv.wait(lk, [&] { return next_start == b && running < resident; });
            ++running;
            ++next_start;
        }
        cv.notify_all();
        t_rng.seed(seed * 7919u + (unsigned)b);
        ClaimerT<HostAtomics> in_shared{};  // the kernel's shared-memory variant (odd CTAs)
        TicketStream<HostAtomics, false> held{};
        TicketStream<HostAtomics, true> ptr{};
        ptr.shared = &in_shared;
        held.late_tail = ptr.late_tail = L.late_tail;
        auto &cl = b % 2 ? ptr.cl() : held.cl();
        int32_t pre_q = -1;
        unsigned pre_v = 0;
        if (L.preclaim && L.mode != kModeStatic) {
            const int32_t own = L.mode == kModeAware ? L.cta_dom[(size_t)b] : 0;
            if (L.preclaim == 1) pre_q = own;
            else if (t_rng() % 3 == 0) pre_q = (int32_t)(t_rng() % (unsigned)L.nq());
            if (pre_q >= 0) pre_v = HostAtomics::add(&ctr[pre_q], 1u);
        }
        cl.init(ctr, L.mode, L.D, L.cta_dom[(size_t)b], L.cta_rank[(size_t)b], L.grid, L.per_queue, total, ranks,
                   bases, allow, waves, b);
        if (pre_q >= 0) {
            cl.preclaimed(pre_q, pre_v);
            const int64_t idx = cl.prefix_len(pre_q) + pre_v;
            if (idx < L.per_queue) o.early[(size_t)b] = L.mode == kModeAware ? pre_q * L.per_queue + idx : idx;
        }
        if (L.start_together) {
            std::unique_lock<std::mutex> lk(mu);
            ++claimed_early;
            cv.notify_all();
            cv.wait(lk, [&] { return claimed_early == L.grid; });
        }
        auto first = [&] { return b % 2 ? ptr.first() : held.first(); };
        auto next = [&] { return b % 2 ? ptr.next() : held.next(); };
        int64_t t0 = first();
        o.first[(size_t)b] = t0;
        if (L.start_together) {
            std::unique_lock<std::mutex> lk(mu);
            ++ready;
            cv.notify_all();
            cv.wait(lk, [&] { return ready == L.grid; });
        }
        for (int64_t t = t0; t >= 0; t = next()) {
            if (t >= total) { __atomic_store_n(&o.out_of_range, true, __ATOMIC_SEQ_CST); break; }
            __atomic_fetch_add(&o.count[(size_t)t], 1u, __ATOMIC_SEQ_CST);
            __atomic_store_n(&o.owner[(size_t)t], b, __ATOMIC_SEQ_CST);
        }
        {
            std::lock_guard<std::mutex> lk(mu);
            --running;
        }
        cv.notify_all();
    };
    std::vector<std::thread> th;
    for (int b = 0; b < L.grid; ++b) th.emplace_back(cta, b);
    for (auto &t : th) t.join();
    for (int w = 0; w < kCounterWords; ++w)
        if (ctr[w] != 0) o.reset_ok = false;
    return o;
}

// Two launches on one workspace: exactly once each, workspace zero after each.
static bool check_twice(const Launch &L, unsigned seed, Outcome *first = nullptr) {
    std::vector<unsigned> ctr((size_t)kCounterWords, 0u);
    bool ok = true;
    for (int rep = 0; rep < 2; ++rep) {
        Outcome o = run_launch(L, ctr.data(), seed + (unsigned)rep);
        for (size_t t = 0; t < o.count.size(); ++t)
            if (o.count[t] != 1u) { ok = false; break; }
        ok = ok && o.reset_ok && !o.out_of_range;
        if (rep == 0 && first) *first = o;
    }
    return ok;
}

// CTAs landing exactly as the map says: ranks 0..n_q-1 in every domain.
static Launch mapped(int mode, int D, const std::vector<int32_t> &dom_sms, int64_t per_queue) {
    Launch L;
    L.mode = mode;
    L.D = D;
    L.per_queue = per_queue;
    int32_t all = 0;
    for (int d = 0; d < D; ++d) {
        for (int r = 0; r < dom_sms[(size_t)d]; ++r) {
            L.cta_dom.push_back(d);
            L.cta_rank.push_back(mode == kModeAware ? r : all + r);
        }
        all += dom_sms[(size_t)d];
    }
    L.grid = all;
    if (mode == kModeAware) L.map_ranks = dom_sms;
    else L.map_ranks = {all};
    return L;
}

static void test_static_waves_rule(void) {
    int32_t even[2] = {66, 66}, uneven[2] = {74, 66}, one_empty[2] = {132, 0};
    CU_ASSERT_EQUAL(ldmoe_static_waves(3072, 132, 1536, even, 2), 22);    // 23.27 waves: 22 static
    CU_ASSERT_EQUAL(ldmoe_static_waves(3072, 140, 1536, uneven, 2), 19);  // 1536 / 74 = 20 -> 19
    CU_ASSERT_EQUAL(ldmoe_static_waves(3072, 132, 1536, one_empty, 2), 10);  // 1536 / 132 = 11 -> 10
    CU_ASSERT_EQUAL(ldmoe_static_waves(200, 132, 100, even, 2), 0);       // below two waves: all dynamic
    CU_ASSERT_EQUAL(ldmoe_static_waves(264, 132, 132, even, 2), 1);
    CU_ASSERT_EQUAL(ldmoe_static_waves(1000, 0, 500, even, 2), 0);        // no grid
    int32_t all[1] = {132};
    CU_ASSERT_EQUAL(ldmoe_static_waves(1536, 132, 1536, all, 1), 10);
}

static void test_rank_tables(void) {
    const int32_t domcnt[3] = {70, 0, 62};
    int32_t r[LDMOE_MAX_DOMAINS], b[LDMOE_MAX_DOMAINS];
    ldmoe_rank_tables(domcnt, 3, 1, r, b, LDMOE_MAX_DOMAINS);
    CU_ASSERT(r[0] == 70 && r[1] == 0 && r[2] == 62 && r[3] == 0 && r[7] == 0);
    CU_ASSERT(b[0] == 0 && b[1] == 70 && b[2] == 70 && b[3] == 132 && b[7] == 132);
    ldmoe_rank_tables(domcnt, 3, 0, r, b, LDMOE_MAX_DOMAINS);   // one queue over every SM
    CU_ASSERT(r[0] == 132 && r[1] == 0 && r[2] == 0 && b[1] == 132 && b[7] == 132);
}

// Full residency, CTAs where the map says: exactly once, and rank r runs tiles r + i*n_q.
static void test_static_ranks_run_on_their_cta(void) {
    for (int mode : {(int)kModeAware, (int)kModeUnaware}) {
        Launch L = mapped(mode, 2, {12, 8}, 200);   // 400 tiles on 20 CTAs
        L.start_together = true;
        const int64_t W = L.waves();
        CU_ASSERT(W >= 8);
        Outcome o;
        CU_ASSERT(check_twice(L, 11u + (unsigned)mode, &o));
        int misplaced = 0;
        for (int b = 0; b < L.grid; ++b) {
            const int q = mode == kModeAware ? L.cta_dom[(size_t)b] : 0;
            const int32_t n = L.map_ranks[(size_t)q];
            for (int64_t i = 0; i < W; ++i) {
                const int64_t idx = L.cta_rank[(size_t)b] + i * n;
                const int64_t t = mode == kModeAware ? q * L.per_queue + idx : idx;
                if (o.owner[(size_t)t] != b) ++misplaced;
            }
        }
        CU_ASSERT_EQUAL(misplaced, 0);
    }
}

static void test_uneven_map_and_stealing(void) {
    CU_ASSERT(check_twice(mapped(kModeAware, 2, {10, 6}, 300), 21u));     // 74/66-like imbalance
    CU_ASSERT(check_twice(mapped(kModeAware, 2, {16, 0}, 300), 22u));     // a domain without SMs
    CU_ASSERT(check_twice(mapped(kModeAware, 4, {5, 3, 7, 1}, 90), 23u));
    Launch L = mapped(kModeAware, 2, {10, 6}, 300);
    L.steal_waves = 1e9f;   // no stealing: the other domain's tail waits for its own CTAs
    CU_ASSERT(check_twice(L, 24u));
}

// CTAs that land off the map's expectation: some ranks twice (two CTAs on one SM), some never,
// some CTAs in a domain the map gives fewer SMs, some off the map entirely.
static void test_ranks_wrong_or_missing(void) {
    Launch L = mapped(kModeAware, 2, {10, 10}, 250);
    L.cta_rank[3] = L.cta_rank[4];          // rank 4 of domain 0 twice, rank 3 never
    L.cta_dom[15] = 0; L.cta_rank[15] = 9;  // a second rank 9 in domain 0; domain 1 misses one
    L.cta_rank[17] = -1;                    // off the map
    CU_ASSERT(check_twice(L, 31u));
    L.steal_waves = 1e9f;
    CU_ASSERT(check_twice(L, 32u));
    Launch U = mapped(kModeUnaware, 1, {16}, 400);
    for (int b = 0; b < U.grid; ++b) U.cta_rank[(size_t)b] = b / 2;   // half the ranks twice, half never
    CU_ASSERT(check_twice(U, 33u));
}

static void test_partial_residency(void) {
    Launch L = mapped(kModeAware, 2, {12, 12}, 400);
    L.resident = 5;   // 5 SMs free: later CTAs start only when earlier ones retire
    CU_ASSERT(check_twice(L, 41u));
    L.resident = 1;   // one at a time: the first CTA's sweep runs every rank of its domain
    CU_ASSERT(check_twice(L, 42u));
    L.steal_waves = 1e9f;
    CU_ASSERT(check_twice(L, 43u));
}

static void test_other_modes(void) {
    Launch S = mapped(kModeStatic, 1, {9}, 100);
    CU_ASSERT(check_twice(S, 51u));
    Launch Dyn = mapped(kModeAware, 2, {8, 8}, 300);
    Dyn.dynamic_only = true;
    CU_ASSERT_EQUAL(Dyn.waves(), 0);
    CU_ASSERT(check_twice(Dyn, 52u));
    CU_ASSERT(check_twice(mapped(kModeAware, 2, {8, 8}, 5), 53u));     // fewer tiles than CTAs
    CU_ASSERT(check_twice(mapped(kModeAware, 2, {8, 8}, 0), 54u));     // no tiles at all
}

// Tail claims made before init (the decode kernels' first claim, issued at kernel entry): used
// first and never lost, whatever queue they name, with and without static waves.
static void test_preclaimed(void) {
    int bad = 0;
    unsigned seed = 300u;
    for (int pre : {1, 2}) {
        for (int mode : {(int)kModeAware, (int)kModeUnaware}) {
            for (bool dyn : {true, false}) {
                Launch L = mapped(mode, 2, {10, 6}, 300);   // uneven domains
                L.preclaim = pre;
                L.dynamic_only = dyn;
                if (!check_twice(L, seed++)) ++bad;
                L.steal_waves = 1e9f;                        // no stealing
                if (!check_twice(L, seed++)) ++bad;
                L.resident = 3;                              // partial residency
                if (!check_twice(L, seed++)) ++bad;
                Launch T = mapped(mode, 2, {8, 8}, 5);       // fewer tiles than CTAs
                T.preclaim = pre;
                T.dynamic_only = dyn;
                if (!check_twice(T, seed++)) ++bad;
            }
        }
    }
    Launch E = mapped(kModeAware, 2, {16, 0}, 100);   // a domain without SMs
    E.preclaim = 2;
    if (!check_twice(E, seed++)) ++bad;
    CU_ASSERT_EQUAL(bad, 0);
    // A CTA's first tile is its early claim (when that names a tile), with static waves or not.
    for (bool dyn : {true, false}) {
        Launch F = mapped(kModeAware, 2, {6, 6}, 120);
        F.preclaim = 2;
        F.dynamic_only = dyn;
        F.start_together = true;   // all early claims before any CTA goes on, as on the GPU
        Outcome o;
        CU_ASSERT(check_twice(F, seed++, &o));
        int early = 0, wrong = 0;
        for (int b = 0; b < F.grid; ++b)
            if (o.early[(size_t)b] >= 0) {
                ++early;
                if (o.first[(size_t)b] != o.early[(size_t)b]) ++wrong;
            }
        CU_ASSERT(early > 0);
        CU_ASSERT_EQUAL(wrong, 0);
    }
}

static void test_random_launches(void) {
    std::minstd_rand rng(20261129u);
    int bad = 0;
    for (int trial = 0; trial < 60; ++trial) {
        const int mode = (int)(rng() % 3) + 1;   // aware, unaware, static
        const int D = mode == kModeAware ? 1 + (int)(rng() % 4) : 1;
        std::vector<int32_t> sms((size_t)D);
        for (auto &v : sms) v = (int32_t)(rng() % 9);
        if (sms[0] == 0) sms[0] = 1;
        Launch L = mapped(mode, D, sms, (int64_t)(rng() % 160));
        for (int b = 0; b < L.grid; ++b) {
            if (rng() % 6 == 0) L.cta_rank[(size_t)b] = (int32_t)(rng() % 10) - 1;   // wrong or off the map
            if (mode == kModeAware && rng() % 8 == 0) L.cta_dom[(size_t)b] = (int32_t)(rng() % (unsigned)D);
        }
        L.resident = rng() % 3 == 0 ? 1 + (int)(rng() % (unsigned)L.grid) : 0;
        L.steal_waves = rng() % 3 == 0 ? 1e9f : 2.f;
        L.dynamic_only = rng() % 5 == 0;
        L.preclaim = (int)(rng() % 3);
        L.late_tail = trial % 2 == 1;
        if (!check_twice(L, 100u + (unsigned)trial)) ++bad;
    }
    CU_ASSERT_EQUAL(bad, 0);
}

static void register_tests(void) {
    CU_pSuite s = CU_add_suite("ldmoe_sched", NULL, NULL);
    CU_add_test(s, "static waves rule", test_static_waves_rule);
    CU_add_test(s, "rank tables", test_rank_tables);
    CU_add_test(s, "static ranks run on their CTA", test_static_ranks_run_on_their_cta);
    CU_add_test(s, "uneven maps, empty domain, no stealing", test_uneven_map_and_stealing);
    CU_add_test(s, "ranks twice, missing, off the map", test_ranks_wrong_or_missing);
    CU_add_test(s, "partial residency", test_partial_residency);
    CU_add_test(s, "static, dynamic-only, tiny launches", test_other_modes);
    CU_add_test(s, "claims made before init", test_preclaimed);
    CU_add_test(s, "60 random launches", test_random_launches);
}
