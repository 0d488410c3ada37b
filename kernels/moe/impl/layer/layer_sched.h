// impl/layer/layer_sched.h — the fused layer's tile numbering and queue rule, host-compilable
// (tests/moe/test_ldmoe_layer_sched.cc drives them on the CPU; layer.cuh uses them on the GPU).
//
// A phase's tiles are numbered per domain slice d (D slices; unaware mode reads the numbers as
// one queue): tile t = d * per + idx, idx over the slice's (expert e, n-block nbl, m-block mb) in
// that order (consecutive tiles share an expert's weight block: its m-blocks run together and
// read it from L2), per = total m-blocks * NBs n-blocks per slice.
#pragma once
#include <stdint.h>

#if defined(__CUDACC__)
#define LDMOE_LAYER_FN __host__ __device__ __forceinline__
#else
#define LDMOE_LAYER_FN inline
#endif

namespace ldmoe {
namespace layer {

struct TilePos {
    int e, mb, nb;   // expert, m-block of its tokens, n-block over all slices (d * NBs + nbl)
    int d, nbl;      // the slice and the n-block within it
};

// A tile of slice d: index idx within the slice, over (expert e, n-block nbl, m-block mb) in that
// order. e is the last expert with mbp[e] * NBs <= idx (never an empty one): decode_tile finds it
// by bisection, the kernel by counting across a warp (expert_count); tile_in_expert does the rest.
// Ix: the index type, 32 bits in the kernel (its host refuses 2^31 tiles a phase), 64 in the host tests.
template <typename Ix> LDMOE_LAYER_FN TilePos tile_in_expert(const int32_t *mbp, int e, int NBs, int d, Ix idx) {
    const int mbe = mbp[e + 1] - mbp[e];
    const Ix rem = idx - (Ix)mbp[e] * (Ix)NBs;
    const int nbl = mbe == 1 ? (int)rem : (int)(rem / (Ix)mbe), mb = (int)(rem - (Ix)nbl * (Ix)mbe);
    return TilePos{e, mb, d * NBs + nbl, d, nbl};
}

// The kernel's search: lane `lane` of `lanes` counts the e in 1..E-1 (1 + lane, 1 + lane + lanes,
// ...) with mbp[e] * NBs <= idx; summed over the lanes, that is the tile's expert (mbp never
// decreases, so those e are exactly 1..expert).
template <typename Ix> LDMOE_LAYER_FN int expert_count(const int32_t *mbp, int E, int NBs, Ix idx, int lane, int lanes) {
    int c = 0;
    for (int e = 1 + lane; e < E; e += lanes) c += (Ix)mbp[e] * (Ix)NBs <= idx;
    return c;
}

// mbp: exclusive prefix of m-blocks per expert (E + 1 entries, mbp[E] = total); 0 <= t < per * D.
template <typename Ix> LDMOE_LAYER_FN TilePos decode_tile(const int32_t *mbp, int E, int NBs, Ix per, Ix t) {
    const int d = (int)(t / per);
    const Ix idx = t - (Ix)d * per;
    int lo = 0, hi = E - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if ((Ix)mbp[mid] * (Ix)NBs <= idx) lo = mid; else hi = mid - 1;
    }
    return tile_in_expert<Ix>(mbp, lo, NBs, d, idx);
}

// Tiles a phase has at most, with the smallest tile (16 tokens x 32 weight rows; an expert's
// partial m-block costs one more): the host refuses a launch where this reaches 2^31.
LDMOE_LAYER_FN int64_t phase_tiles_max(int64_t pairs, int E, int H, int I) {
    const int64_t rows = 2 * (int64_t)I > H ? 2 * (int64_t)I : H;
    return (pairs + 16 * (int64_t)E) / 16 * (rows / 32);
}

// Unaware mode: a CTA's first claim of a phase is tile blockIdx (every CTA of the cooperative
// launch exists, so tiles 0 .. grid-1 are each taken once), its later ones the shared counter's
// value + grid. The first tiles then cost no atomic: a launch's CTAs, all claiming at once on one
// counter, waited microseconds for it (~4 us at T = 1 on an H100).
LDMOE_LAYER_FN uint32_t unaware_claim(bool first, unsigned cta, unsigned grid, uint32_t counter) {
    return first ? cta : counter + grid;
}

// Aware mode: a CTA takes from its own slice's queue (position 0), and from slice q's only when
// stealing is allowed — the phase holds steal_waves waves of tiles for the grid — or q's domain
// has no SM.
LDMOE_LAYER_FN bool steal_allowed(int64_t phase_tiles, float steal_waves, unsigned grid) {
    return (float)phase_tiles >= steal_waves * (float)grid;
}
LDMOE_LAYER_FN bool may_take(int pos, bool steal, int domain_sms) { return pos == 0 || steal || domain_sms == 0; }
// The sweep: a CTA whose queues (by may_take) ran dry counts itself on the phase's counter; the
// one that completes the count (`before`: the counter's value it saw, `grid` CTAs) then claims from
// every queue. Every CTA has emptied its own domain's queue by then, so what it finds is only the
// slices of domains no CTA runs on (usually nothing).
LDMOE_LAYER_FN bool sweep_after(uint32_t before, unsigned grid) { return before + 1 == grid; }

// The tile of a launch (api.cuh's moe_run), by pairs per expert on average (no host sync: the
// routing is on the device): kTileDecode up to kDecodePairs (from 8 tokens per expert the decode
// tile's 16-token tiles would stream a popular expert's weights once per 16 tokens); above it on
// Hopper (major 9) the wgmma tile of kWgBM weight rows (128 rather than 64 halve the token bytes
// a stage moves per weight byte), of 256 rows where experts average >= kWg256Pairs (a token box
// then feeds twice the weight rows: 43 multiply-adds per L2 byte against 32), elsewhere the
// mma.sync 64 x 64 tile (doc/moe.md, "The fused MoE layer"). The tiles sum k in different orders,
// so the choice must not depend on D: a program packed for one domain (no map, stock) and for two
// (the aware states) gets the same tile and bit-identical outputs. A wgmma tile needs whole
// 128- (256-)row blocks in every slice; asking for them at D = 2 whenever D <= 2 makes the rule
// one for both. (D > 2 — no GPU has more than two domains today — may still change the tile.)
constexpr int kDecodePairs = 8;
constexpr int kWgBM = 128;
constexpr int kWg256Pairs = 192;
enum { kTileDecode = 0, kTileMma = 1, kTileWg = 2, kTileDecodeF8 = 3, kTileMmaF8 = 4, kTileWg256 = 5, kTileWgF8 = 6, kTileWg256F8 = 7,
       kTileWgA8 = 8 };   // moe_run's config index
LDMOE_LAYER_FN int layer_tile(int64_t T, int k, int E, int H, int I, int D, int major) {
    if (T * k <= (int64_t)kDecodePairs * E) return kTileDecode;
    if (major != 9) return kTileMma;
    const int dd = D > 2 ? D : 2;
    if (T * k >= (int64_t)kWg256Pairs * E && H % (256 * dd) == 0 && (2 * I) % (256 * dd) == 0) return kTileWg256;
    return H % (kWgBM * dd) == 0 ? kTileWg : kTileMma;
}

// The FP8 layer's tile: layer_tile's choice in its FP8 form: the FP8 decode tile, the FP8 wgmma
// tiles of 128 or 256 weight rows (e4m3 stages dequantized to bf16 in shared memory) or the 64 x 64
// mma.sync tile widening in registers. With FP8 tokens (a8), both wgmma choices take the 128-row
// e4m3 x e4m3 tile (kTileWgA8: its fp32 promotion needs a second accumulator, which 256 rows
// leave no registers for); the decode and mma.sync tiles keep bf16 tokens. Like layer_tile,
// independent of D <= 2.
LDMOE_LAYER_FN int layer_tile_fp8(int64_t T, int k, int E, int H, int I, int D, int major, bool a8 = false) {
    const int t = layer_tile(T, k, E, H, I, D, major);
    if (a8 && (t == kTileWg || t == kTileWg256)) return kTileWgA8;
    return t == kTileDecode ? kTileDecodeF8 : t == kTileWg ? kTileWgF8 : t == kTileWg256 ? kTileWg256F8 : kTileMmaF8;
}

// The wgmma tile's GEMM1 token rows: gathered from x by warps 9-10 (cp.async, 16 bytes a lane) where
// an m-block feeds at most kGatherNB n-blocks of 2I, from the routed x's stage image (one bulk copy
// a box, after a copy pass and a grid barrier) otherwise. The image costs a write and a read of
// every routed row once; a gather costs a row's 16-byte pieces once per n-block, from L2 when the
// m-block's n-blocks run together: few n-blocks (Qwen3-30B-A3B's 12 or 6) make the gather the
// cheaper, many (DeepSeek-V2-Lite's 22, Mixtral's 112) the image (moe-layer-floor/2026-12-07-h100/
// layer-time-gather.txt: DRAM reads grew by half at Mixtral T = 1024 gathered). BM: the tile's
// weight rows (128 or 256).
constexpr int kGatherNB = 12;
LDMOE_LAYER_FN bool layer_gather(int BM, int I) { return 2 * I / BM <= kGatherNB; }

// The wgmma tile's stage images (layer.cuh, img_off) hold m-blocks of kImgRows token rows; an
// expert's partial block costs at most one more, so a launch of `pairs` valid pairs over E experts
// has at most pairs / kImgRows + E of them (the host sizes the images by this).
constexpr int kImgRows = 128;
LDMOE_LAYER_FN int64_t img_blocks_max(int64_t pairs, int E) { return pairs > 0 ? pairs / kImgRows + E : 0; }
// A workspace for launches of up to `pairs` pairs and E experts: a launch takes the wgmma tile only
// with more than decode_pairs pairs per expert, so with fewer than pairs / decode_pairs experts.
LDMOE_LAYER_FN int64_t img_blocks_cap(int64_t pairs, int E, int decode_pairs) {
    const int64_t e_max = pairs > 0 ? (pairs - 1) / decode_pairs : 0;
    return img_blocks_max(pairs, (int)(E < e_max ? E : e_max));
}

}  // namespace layer
}  // namespace ldmoe
