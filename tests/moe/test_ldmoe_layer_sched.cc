// test_ldmoe_layer_sched.cc — the fused layer's tile numbering and queue rule
// (kernels/moe/impl/layer/layer_sched.h, the functions the kernel calls) on the CPU: every tile of
// a phase decodes to a distinct (expert, m-block, n-block) inside its slice, and CTAs claiming by
// the kernel's rule, in random interleavings, take every tile exactly once — with unequal domains,
// a domain without SMs, stealing on and off, and one queue (unaware); the tile a launch takes;
// and the wgmma tile's stage images are sized for every routing's m-blocks.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <set>
#include <tuple>
#include <vector>
#include "kernels/moe/impl/layer/layer_sched.h"
#include "tests/unit/cunit_main.h"

using ldmoe::layer::decode_tile;
using ldmoe::layer::expert_count;
using ldmoe::layer::img_blocks_cap;
using ldmoe::layer::img_blocks_max;
using ldmoe::layer::kDecodePairs;
using ldmoe::layer::kImgRows;
using ldmoe::layer::kTileDecode;
using ldmoe::layer::kTileMma;
using ldmoe::layer::kTileWg;
using ldmoe::layer::kTileWg256;
using ldmoe::layer::kTileDecodeF8;
using ldmoe::layer::kTileMmaF8;
using ldmoe::layer::kTileWgF8;
using ldmoe::layer::kTileWg256F8;
using ldmoe::layer::kWg256Pairs;
using ldmoe::layer::layer_tile;
using ldmoe::layer::layer_gather;
using ldmoe::layer::layer_tile_fp8;
using ldmoe::layer::kTileWgA8;
using ldmoe::layer::kGatherNB;
using ldmoe::layer::may_take;
using ldmoe::layer::steal_allowed;
using ldmoe::layer::sweep_after;
using ldmoe::layer::TilePos;
using ldmoe::layer::unaware_claim;

static uint64_t g_rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n) {   // xorshift64, deterministic
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng % n);
}

struct Routing {
    int E, BN;
    std::vector<int32_t> mbp;
    int64_t total() const { return mbp[E]; }
};

// Random per-expert token counts with empty experts and one popular expert, as m-block prefixes
// (*pairs: their sum).
static Routing make_routing(int E, int BN, int64_t *pairs = NULL) {
    Routing r{E, BN, std::vector<int32_t>(E + 1, 0)};
    const int hot = (int)rnd(E);
    int64_t sum = 0;
    for (int e = 0; e < E; ++e) {
        int c = rnd(3) == 0 ? 0 : (int)rnd(40);
        if (e == hot) c += (int)rnd(300);
        if (rnd(4) == 0) c = (int)(1 + rnd(3)) * BN + (int)rnd(2);   // whole blocks, and one row more
        r.mbp[e + 1] = r.mbp[e] + (c + BN - 1) / BN;
        sum += c;
    }
    if (pairs) *pairs = sum;
    return r;
}

// The host sizes the wgmma tile's stage images by img_blocks_max: every routing's m-blocks fit,
// including the worst case (every expert one row past whole blocks), and the bound is tight there.
static void test_image_bound(void) {
    int over = 0;
    for (int it = 0; it < 2000; ++it) {
        const int E = 1 + (int)rnd(256);
        int64_t pairs = 0;
        const Routing r = make_routing(E, kImgRows, &pairs);
        if (r.total() > img_blocks_max(pairs, E)) ++over;
    }
    CU_ASSERT_EQUAL(over, 0);
    for (int E = 1; E <= 256; E *= 2) {   // c_e = kImgRows * j + 1: j + 1 blocks each
        for (int j = 0; j < 3; ++j) {
            const int64_t pairs = (int64_t)E * (kImgRows * j + 1);
            CU_ASSERT(img_blocks_max(pairs, E) >= (int64_t)E * (j + 1));
            CU_ASSERT(img_blocks_max(pairs, E) <= (int64_t)E * (j + 1) + E);
        }
    }
    CU_ASSERT_EQUAL(img_blocks_max(0, 8), 0);
    // A workspace sized for (pairs, E) by img_blocks_cap holds every launch at or below those sizes
    // that takes the wgmma tile (more than 8 pairs per expert), with fewer experts than reserved too.
    int short_cap = 0, launches = 0;
    for (int it = 0; it < 4000; ++it) {
        const int cap_E = 1 + (int)rnd(256);
        const int64_t cap_pairs = 1 + (int64_t)rnd(40000);
        const int E = 1 + (int)rnd((uint32_t)cap_E);
        int64_t pairs = 0;
        const Routing r = make_routing(E, kImgRows, &pairs);
        if (pairs > cap_pairs || pairs <= 8LL * E) continue;   // not a launch this workspace serves with the tile
        ++launches;
        if (r.total() > img_blocks_cap(cap_pairs, cap_E, 8)) ++short_cap;
    }
    CU_ASSERT_EQUAL(short_cap, 0);
    CU_ASSERT(launches > 500);
    CU_ASSERT(img_blocks_cap(32, 128, 8) == 3);   // 32 pairs: at most 3 experts above 8 pairs each
}

static void test_numbering(void) {
    int bad_range = 0, bad_dup = 0, bad_count = 0, cases = 0;
    for (int it = 0; it < 300; ++it) {
        const int E = 1 + (int)rnd(256), BN = rnd(2) ? 16 : 64, D = 1 + (int)rnd(4), NBs = 1 + (int)rnd(12);
        Routing r = make_routing(E, BN);
        const int64_t per = r.total() * NBs;
        std::set<std::tuple<int, int, int>> seen;
        for (int64_t t = 0; t < per * D; ++t) {
            const TilePos p = decode_tile(r.mbp.data(), E, NBs, per, t);
            const int d = (int)(t / per);
            const int mbe = p.e >= 0 && p.e < E ? r.mbp[p.e + 1] - r.mbp[p.e] : 0;
            if (p.e < 0 || p.e >= E || mbe <= 0 || p.mb < 0 || p.mb >= mbe || p.nb / NBs != d || p.nb < 0) ++bad_range;
            if (!seen.insert(std::make_tuple(p.e, p.mb, p.nb)).second) ++bad_dup;
            if (t % 7 == 0) {   // the kernel's warp count finds the same expert
                const int64_t idx = t - (int64_t)d * per;
                int e = 0;
                for (int lane = 0; lane < 32; ++lane) e += expert_count<int64_t>(r.mbp.data(), E, NBs, idx, lane, 32);
                bad_count += e != p.e;
            }
        }
        // every (expert with tokens, m-block, n-block) is some tile
        int64_t want = 0;
        for (int e = 0; e < E; ++e) want += (int64_t)(r.mbp[e + 1] - r.mbp[e]) * NBs * D;
        CU_ASSERT_EQUAL((int64_t)seen.size(), want);
        ++cases;
    }
    CU_ASSERT_EQUAL(bad_range, 0);
    CU_ASSERT_EQUAL(bad_dup, 0);
    CU_ASSERT_EQUAL(bad_count, 0);
    CU_ASSERT_EQUAL(cases, 300);
}

// One phase claimed the kernel's way (claim() in layer.cuh, aware or unaware): CTAs in random
// order, each claim one step; returns the number of times each tile was taken.
static std::vector<int> simulate(int64_t per, int D, const std::vector<int> &cta_dom, const std::vector<int> &domcnt,
                                 float steal_waves, bool unaware, bool with_sweep = true) {
    const int G = (int)cta_dom.size();
    std::vector<int64_t> ctr(D, 0);
    std::vector<int> taken(per * D, 0), pos(G, 0), sweep(G, 0), first(G, 1);
    std::vector<int> active(G);
    uint32_t done = 0;   // the phase's dry-queue counter (kCtlDone1 / kCtlDone2)
    for (int i = 0; i < G; ++i) active[i] = i;
    while (!active.empty()) {
        const int k = (int)rnd((uint32_t)active.size()), c = active[k];
        int64_t got = -1;
        if (unaware) {
            const int64_t t = unaware_claim(first[c], (unsigned)c, (unsigned)G, first[c] ? 0u : (uint32_t)ctr[0]++);
            first[c] = 0;
            if (t < per * D) got = t;
        } else {
            const bool steal = steal_allowed(per * D, steal_waves, (unsigned)G);
            for (;;) {
                while (pos[c] < D) {
                    const int q = (cta_dom[c] + pos[c]) % D;
                    if (sweep[c] || may_take(pos[c], steal, domcnt[q])) {
                        const int64_t t = ctr[q]++;
                        if (t < per) { got = (int64_t)q * per + t; break; }
                    }
                    ++pos[c];
                }
                if (got >= 0 || sweep[c] || !with_sweep || !sweep_after(done++, (unsigned)G)) break;
                sweep[c] = 1;
                pos[c] = 0;
            }
        }
        if (got < 0) { active.erase(active.begin() + k); continue; }
        taken[got]++;
    }
    return taken;
}

static bool exactly_once(const std::vector<int> &taken) {
    for (int v : taken) if (v != 1) return false;
    return true;
}

static void test_claims(void) {
    int fails = 0, runs = 0;
    for (int it = 0; it < 200; ++it) {
        const int D = 1 + (int)rnd(3), G = 8 + (int)rnd(140);
        const int64_t per = 1 + rnd(600);
        // CTAs' domains: the map's counts (domcnt) match where the CTAs are, as the shim publishes
        // them; sometimes one domain has none (bound to the others)
        std::vector<int> cta_dom(G), domcnt(D, 0);
        const int empty_dom = D > 1 && rnd(3) == 0 ? (int)rnd(D) : -1;
        for (int i = 0; i < G; ++i) {
            int d = (int)rnd(D);
            if (d == empty_dom) d = (d + 1) % D;
            cta_dom[i] = d;
            domcnt[d]++;
        }
        const float waves[] = {2.0f, 1e-6f, 1000.0f};
        for (float w : waves) {
            fails += !exactly_once(simulate(per, D, cta_dom, domcnt, w, false));
            fails += !exactly_once(simulate(per, D, cta_dom, domcnt, w, true));
            runs += 2;
        }
    }
    CU_ASSERT_EQUAL(fails, 0);
    CU_ASSERT_EQUAL(runs, 1200);
}

// A map that does not describe the grid: it counts SMs for a domain on which no CTA runs (the
// process bound by other means than the shim's). Without stealing, that slice is only claimed by
// the sweep; every tile must still be taken exactly once, and without the sweep some would not.
static void test_sweep(void) {
    int fails = 0, runs = 0, unswept_missing = 0;
    for (int it = 0; it < 200; ++it) {
        const int D = 2 + (int)rnd(3), G = 4 + (int)rnd(140);
        const int64_t per = 1 + rnd(400);
        const int absent = (int)rnd(D);
        std::vector<int> cta_dom(G), domcnt(D, 0);
        for (int i = 0; i < G; ++i) {
            cta_dom[i] = (absent + 1 + (int)rnd(D - 1)) % D;
            domcnt[cta_dom[i]]++;
        }
        domcnt[absent] = 1 + (int)rnd(66);   // the map's count for the domain with no CTA
        fails += !exactly_once(simulate(per, D, cta_dom, domcnt, 1000.0f, false));   // no stealing
        fails += !exactly_once(simulate(per, D, cta_dom, domcnt, 1e-6f, false));     // stealing
        runs += 2;
        // the same claims without the sweep leave the absent domain's slice unclaimed
        const std::vector<int> unswept = simulate(per, D, cta_dom, domcnt, 1000.0f, false, false);
        int64_t missing = 0;
        for (int64_t t = 0; t < per; ++t) missing += unswept[(int64_t)absent * per + t] == 0;
        unswept_missing += missing == per;
    }
    CU_ASSERT_EQUAL(fails, 0);
    CU_ASSERT_EQUAL(runs, 400);
    CU_ASSERT_EQUAL(unswept_missing, 200);
}

static void test_rule(void) {
    CU_ASSERT_FALSE(steal_allowed(263, 2.0f, 132));      // below two waves: no stealing
    CU_ASSERT_TRUE(steal_allowed(264, 2.0f, 132));       // two waves: stealing
    CU_ASSERT_TRUE(steal_allowed(1, 1e-6f, 132));        // a tiny threshold: always
    CU_ASSERT_TRUE(may_take(0, false, 66));              // own queue: always
    CU_ASSERT_FALSE(may_take(1, false, 66));
    CU_ASSERT_TRUE(may_take(1, true, 66));
    CU_ASSERT_TRUE(may_take(1, false, 0));               // a slice whose domain has no SM: always
}

// The tile choice (moe_run): thresholds at their boundaries, the three model shapes, and for
// random shapes the rule's promises: the same tile packed for one domain or two (the tiles sum in
// different orders), whole 128- / 256-row blocks in every slice of a wgmma tile, FP8 (major 0)
// and non-Hopper never on wgmma, more pairs never a smaller tile.
static void test_tile_choice(void) {
    const int E = 128, H = 2048, I = 768;   // Qwen3-30B-A3B
    CU_ASSERT_EQUAL(layer_tile(kDecodePairs * E / 8, 8, E, H, I, 2, 9), kTileDecode);
    CU_ASSERT_EQUAL(layer_tile(kDecodePairs * E / 8 + 1, 8, E, H, I, 2, 9), kTileWg);
    CU_ASSERT_EQUAL(layer_tile(kWg256Pairs * E / 8 - 1, 8, E, H, I, 2, 9), kTileWg);
    CU_ASSERT_EQUAL(layer_tile(kWg256Pairs * E / 8, 8, E, H, I, 2, 9), kTileWg256);
    CU_ASSERT_EQUAL(layer_tile(4096, 6, 64, 2048, 1408, 2, 9), kTileWg);      // DeepSeek-V2-Lite: 2I = 2816
    CU_ASSERT_EQUAL(layer_tile(4096, 2, 8, 4096, 14336, 2, 9), kTileWg256);   // Mixtral
    CU_ASSERT_EQUAL(layer_tile(4096, 2, 8, 4096, 14336, 2, 10), kTileMma);    // not Hopper
    CU_ASSERT_EQUAL(layer_tile(4096, 2, 8, 4096, 14336, 2, 0), kTileMma);     // FP8 asks with major 0
    CU_ASSERT_EQUAL(layer_tile(4096, 8, 128, 640, 768, 1, 9), kTileMma);      // H % 256 != 0: no wgmma tile
    CU_ASSERT_EQUAL(layer_tile(0, 8, 128, 2048, 768, 2, 9), kTileDecode);     // T = 0
    int bad = 0, cases = 0;
    for (int it = 0; it < 20000; ++it) {
        const int Ex = 1 + (int)rnd(256), k = 1 + (int)rnd(16);
        const int Hx = 128 * (1 + (int)rnd(64)), Ix = 128 * (1 + (int)rnd(128));   // the API's alignment at D = 2
        const int64_t T = rnd(8) == 0 ? (int64_t)rnd(4) : (int64_t)rnd(60000);
        const int major = rnd(4) == 0 ? 8 + (int)rnd(3) : 9;
        const int t1 = layer_tile(T, k, Ex, Hx, Ix, 1, major), t2 = layer_tile(T, k, Ex, Hx, Ix, 2, major);
        bad += t1 != t2;
        for (int D = 1; D <= 2; ++D) {
            if (t2 == kTileWg) bad += (Hx / D) % 128 != 0 || (2 * Ix / D) % 128 != 0;
            if (t2 == kTileWg256) bad += (Hx / D) % 256 != 0 || (2 * Ix / D) % 256 != 0;
        }
        bad += (t2 == kTileWg || t2 == kTileWg256) && major != 9;
        bad += layer_tile(T, k, Ex, Hx, Ix, 2, 0) == kTileWg || layer_tile(T, k, Ex, Hx, Ix, 2, 0) == kTileWg256;
        const int tm = layer_tile(T + 1 + rnd(100000), k, Ex, Hx, Ix, 2, major);   // more pairs
        const auto rank = [](int t) { return t == kTileDecode ? 0 : t == kTileWg256 ? 2 : 1; };
        bad += rank(tm) < rank(t2);
        ++cases;
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(cases, 20000);
}

// The FP8 layer's tile (layer_tile_fp8): the bf16 rule's choice in its FP8 form (decode, the 128-
// or 256-row wgmma tile, else the mma.sync tile); one tile for D = 1 and 2; and the GPU suite's FP8
// cases (test_moe_layer.py test_fp8) cover all four, the wgmma ones gathered and from x's image.
static void test_tile_choice_fp8(void) {
    int bad = 0;
    for (int it = 0; it < 20000; ++it) {
        const int Ex = 1 + (int)rnd(256), k = 1 + (int)rnd(16);
        const int Hx = 128 * (1 + (int)rnd(64)), Ix = 128 * (1 + (int)rnd(128));
        const int64_t T = rnd(8) == 0 ? (int64_t)rnd(4) : (int64_t)rnd(60000);
        const int major = rnd(4) == 0 ? 8 + (int)rnd(3) : 9;
        const int t = layer_tile(T, k, Ex, Hx, Ix, 2, major), f = layer_tile_fp8(T, k, Ex, Hx, Ix, 2, major);
        bad += f != layer_tile_fp8(T, k, Ex, Hx, Ix, 1, major);
        bad += f != (t == kTileDecode ? kTileDecodeF8 : t == kTileWg ? kTileWgF8 : t == kTileWg256 ? kTileWg256F8 : kTileMmaF8);
        bad += (f == kTileWgF8 || f == kTileWg256F8) && (major != 9 || Hx % 256 != 0);
        bad += f == kTileWg256F8 && (Hx % 512 != 0 || (2 * Ix) % 512 != 0);
        // FP8 tokens: the 128-row e4m3 tile wherever a wgmma tile runs, the weight-only tile elsewhere; one for D = 1 and 2
        const int a = layer_tile_fp8(T, k, Ex, Hx, Ix, 2, major, true);
        bad += a != layer_tile_fp8(T, k, Ex, Hx, Ix, 1, major, true);
        bad += a != (f == kTileWgF8 || f == kTileWg256F8 ? kTileWgA8 : f);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(layer_tile_fp8(1024, 8, 128, 2048, 768, 2, 9), kTileWgF8);    // Qwen3-30B-A3B, 64 pairs an expert
    CU_ASSERT_EQUAL(layer_tile_fp8(4096, 8, 128, 2048, 768, 2, 9), kTileWg256F8); // 256
    CU_ASSERT_EQUAL(layer_tile_fp8(4096, 2, 8, 4096, 14336, 2, 9), kTileWg256F8); // Mixtral
    CU_ASSERT_EQUAL(layer_tile_fp8(64, 8, 128, 2048, 768, 2, 9), kTileDecodeF8);
    CU_ASSERT_EQUAL(layer_tile_fp8(4096, 2, 8, 4096, 14336, 2, 10), kTileMmaF8);  // not Hopper
    // the GPU suite's FP8 cases
    CU_ASSERT_EQUAL(layer_tile_fp8(1, 2, 8, 256, 128, 2, 9), kTileDecodeF8);
    CU_ASSERT_EQUAL(layer_tile_fp8(200, 2, 8, 384, 256, 2, 9), kTileMmaF8);       // H % 256 != 0
    CU_ASSERT_EQUAL(layer_tile_fp8(150, 2, 8, 256, 256, 2, 9), kTileWgF8);
    CU_ASSERT_TRUE(layer_gather(128, 256));
    CU_ASSERT_EQUAL(layer_tile_fp8(333, 2, 4, 512, 1024, 2, 9), kTileWgF8);       // x from its image
    CU_ASSERT_FALSE(layer_gather(128, 1024));
    CU_ASSERT_EQUAL(layer_tile_fp8(260, 6, 16, 512, 384, 2, 9), kTileWgF8);
    CU_ASSERT_EQUAL(layer_tile_fp8(800, 1, 4, 512, 256, 2, 9), kTileWg256F8);
    CU_ASSERT_TRUE(layer_gather(256, 256));
    CU_ASSERT_EQUAL(layer_tile_fp8(450, 1, 2, 1024, 512, 2, 9), kTileWg256F8);
    CU_ASSERT_EQUAL(layer_tile_fp8(400, 1, 2, 512, 1792, 2, 9), kTileWg256F8);
    CU_ASSERT_FALSE(layer_gather(256, 1792));
    // the GPU suite's FP8-token cases (test_fp8_tokens): the e4m3 tile from either weight-only wgmma
    // tile's shapes, and a decode and an mma.sync case that keep bf16 tokens
    CU_ASSERT_EQUAL(layer_tile_fp8(333, 2, 4, 512, 1024, 2, 9, true), kTileWgA8);
    CU_ASSERT_EQUAL(layer_tile_fp8(800, 1, 4, 512, 256, 2, 9, true), kTileWgA8);
    CU_ASSERT_EQUAL(layer_tile_fp8(600, 4, 8, 512, 256, 2, 9, true), kTileWgA8);
    CU_ASSERT_EQUAL(layer_tile_fp8(260, 6, 16, 512, 384, 2, 9, true), kTileWgA8);
    CU_ASSERT_EQUAL(layer_tile_fp8(5, 4, 16, 512, 256, 2, 9, true), kTileDecodeF8);
    CU_ASSERT_EQUAL(layer_tile_fp8(200, 2, 8, 384, 256, 2, 9, true), kTileMmaF8);
}

// Which wgmma tiles gather GEMM1's token rows from x (layer_gather): the model shapes on the tile
// each takes at T >= 1024 (moe-layer-floor/2026-12-07-h100/layer-time-gather.txt: gathering won on
// Qwen3 only), the boundary, and the GPU suite's cases (test_moe_layer.py) that must cover both.
static void test_gather_choice(void) {
    CU_ASSERT_TRUE(layer_gather(128, 768));      // Qwen3-30B-A3B, 128-row tile: 12 n-blocks
    CU_ASSERT_TRUE(layer_gather(256, 768));      // its 256-row tile: 6
    CU_ASSERT_FALSE(layer_gather(128, 1408));    // DeepSeek-V2-Lite: 22
    CU_ASSERT_FALSE(layer_gather(256, 14336));   // Mixtral: 112
    CU_ASSERT_TRUE(layer_gather(128, kGatherNB * 64));
    CU_ASSERT_FALSE(layer_gather(128, kGatherNB * 64 + 64));
    CU_ASSERT_TRUE(layer_gather(256, kGatherNB * 128));
    CU_ASSERT_FALSE(layer_gather(256, kGatherNB * 128 + 128));
    // the GPU suite's wgmma cases: (T, E, H, I, k) -> the tile they take, gathered or not
    CU_ASSERT_EQUAL(layer_tile(300, 8, 32, 512, 256, 2, 9), kTileWg);
    CU_ASSERT_TRUE(layer_gather(128, 256));
    CU_ASSERT_EQUAL(layer_tile(400, 4, 8, 512, 256, 2, 9), kTileWg256);
    CU_ASSERT_TRUE(layer_gather(256, 256));
    CU_ASSERT_EQUAL(layer_tile(300, 2, 8, 256, 896, 1, 9), kTileWg);
    CU_ASSERT_FALSE(layer_gather(128, 896));
    CU_ASSERT_EQUAL(layer_tile(700, 1, 2, 512, 1792, 1, 9), kTileWg256);
    CU_ASSERT_FALSE(layer_gather(256, 1792));
    CU_ASSERT_EQUAL(layer_tile(300, 2, 8, 256, 320, 1, 9), kTileWg);
    CU_ASSERT_TRUE(layer_gather(128, 320));
}

static void register_tests(void) {
    CU_pSuite s = CU_add_suite("ldmoe layer scheduling (host)", NULL, NULL);
    CU_add_test(s, "tile numbering: distinct, in range, complete (300 routings)", test_numbering);
    CU_add_test(s, "claims: every tile exactly once (200 x 6 interleavings)", test_claims);
    CU_add_test(s, "sweep: a map counting SMs where no CTA runs still has every tile taken once", test_sweep);
    CU_add_test(s, "steal rule", test_rule);
    CU_add_test(s, "stage images hold every routing's m-blocks (2000 routings, worst cases)", test_image_bound);
    CU_add_test(s, "tile choice: boundaries, model shapes, one tile for D = 1 and 2 (20000 shapes)", test_tile_choice);
    CU_add_test(s, "gather choice: model shapes, boundary, the GPU suite's cases", test_gather_choice);
    CU_add_test(s, "FP8 tile choice: the bf16 rule's tile in FP8 (four), one tile for D = 1 and 2, the GPU suite's cases", test_tile_choice_fp8);
}
