/* ldmoe_heuristics.h — AUTO's tile choice: the tile (ldmoe.h, LDMOE_TILE_LIST) a launch with
 * tile = LDMOE_TILE_AUTO runs. Pure host C, so the CPU tests check it for both kinds of GPU
 * (tests/moe/test_ldmoe_cpu.c), and so that every tile it can return is one the library ships.
 *
 * By the average tokens per expert, T / E:
 *   compute capability 9.0 (wgmma): the warp-specialized tiles. The decode tiles are sized for the
 *     busiest expert rather than the average one: an expert with more tokens than a tile holds
 *     streams its weights once per m-block, and real routing is never even. The chunked tiles
 *     (_C16) load and multiply only the tokens a tile has, so sizing up costs the quieter experts
 *     neither traffic nor tensor work. Up to 32 tokens per expert on average one weight pass
 *     serves up to 64 tokens (WS_128x64_C16), up to 96 one pass serves up to 128
 *     (WS_128x128_C16, fewer weight bytes in flight than WS_128x64's ring but no second pass for
 *     the busy experts); above that, prefill, 128 tokens x 256 weight rows with epilogue warps
 *     (WS_256x128_EW).
 *   elsewhere (mma.sync): 64 weight rows x 16 or 64 tokens for decode, 128 x 128, and 128 x 256
 *     once the expert segments are long enough to fill its m-blocks.
 * The thresholds come from tile sweeps on the H200 (bench/moe/bench_moe.py over the lab build's
 * tiles); the figures are in doc/moe.md and bench/results/. */
#ifndef LDMOE_HEURISTICS_H
#define LDMOE_HEURISTICS_H

#include <stdint.h>
#include "kernels/moe/ldmoe.h"

/* T tokens over E experts (E >= 1; E <= 0 counts as one expert); wgmma: the device runs the
 * sm_90a kernels (compute capability exactly 9.0). */
static inline int ldmoe_auto_tile(int64_t T, int E, int wgmma) {
    const int64_t avg = E > 0 ? T / E : T;
    if (wgmma) {
        if (avg <= 32) return LDMOE_TILE_WS_128x64_C16;
        if (avg <= 96) return LDMOE_TILE_WS_128x128_C16;
        return LDMOE_TILE_WS_256x128_EW;
    }
    if (avg <= 16) return LDMOE_TILE_64x16_K4;
    if (avg <= 96) return LDMOE_TILE_64x64_K4;
    if (avg <= 1024) return LDMOE_TILE_128x128;
    return LDMOE_TILE_128x256;
}

/* AUTO for ldmoe_grouped_mm_fp8 (compute capability 9.0 only), by average tokens per expert and
 * scaling scheme (enum ldmoe_fp8_scaling). Up to 64: WS_128x64_C16_FP8 for rowwise scales and
 * WS_256x64_C16_FP8 for block scales (eight wgmmas per promotion instead of four: 1-3 % faster
 * for block scales where the waves allow, below; 1-9 % slower for rowwise). From
 * LDMOE_FP8_PREFILL_MIN on, the 256-row prefill tiles, which from 65 tokens on beat the 128-row
 * WS_128x128_C16_FP8 by up to 13 %: WS_256x128_FP8 for rowwise scales, and for block scales its
 * chunked twin WS_256x128_C16_FP8, whose tiles of an expert's last few tokens multiply only those
 * (2-16 % faster under random and skewed routing; 1-2 % slower only where every expert holds a
 * multiple of 128 tokens). Rowwise scales gain less from the chunks (up to 7 % at random routing,
 * 1-3 % lost at multiples of 128, 3-7 % at 96 tokens on 8 experts) and keep the plain tile.
 * Measured on the H200: doc/moe.md "FP8". */
#define LDMOE_FP8_PREFILL_MIN 65

/* The fraction of the launch's waves its tiles fill: `tiles` spread over `sms` persistent CTAs
 * take ceil(tiles / sms) rounds, and the last one may run part-empty. */
static inline double ldmoe_wave_fill(int64_t tiles, int sms) {
    if (sms < 1) sms = 1;
    if (tiles < 1) return 1.0;
    const int64_t waves = (tiles + sms - 1) / sms;
    return (double)tiles / (double)(waves * sms);
}

/* Block scales' decode tile (up to LDMOE_FP8_PREFILL_MIN - 1 tokens per expert on average): the
 * 256-row tile is 1-3 % faster where both fill the SMs' waves alike, so where its tiles fill the
 * waves markedly worse (below LDMOE_FP8_WAVE_RATIO of the 128-row tiles' fill) the 128-row tile
 * runs. The case it was measured on: 8 experts x 14336 rows on 2 domains and 132 SMs, 448 tiles
 * of 256 rows fill 0.85 of 4 waves, 896 of 128 rows 0.97 of 7, and the 128-row tile is 4-6 %
 * faster at 8-64 tokens per expert (with the block scales loaded with each stage; when the
 * consumers staged them per k-block, the 256-row tile's fewer stagings won above 32 tokens). */
#define LDMOE_FP8_WAVE_RATIO 0.9

/* T tokens over E experts (E <= 0 counts as one), N output channels in D slices (the rows of a
 * weight matrix; D = 1 for the plain layout), on `sms` SMs (the bound set's; < 1 counts as 1). */
static inline int ldmoe_auto_tile_fp8(int64_t T, int E, int N, int D, int sms, int scaling) {
    const int64_t avg = E > 0 ? T / E : T;
    if (avg >= LDMOE_FP8_PREFILL_MIN)
        return scaling == LDMOE_FP8_BLOCK ? LDMOE_TILE_WS_256x128_C16_FP8 : LDMOE_TILE_WS_256x128_FP8;
    if (scaling != LDMOE_FP8_BLOCK) return LDMOE_TILE_WS_128x64_C16_FP8;
    if (D >= 1 && N >= D) {
        /* One m-block per expert: at these averages a 64-token tile holds an expert. */
        const int64_t slices = (int64_t)(E > 0 ? E : 1) * D, nd = N / D;
        const double fill256 = ldmoe_wave_fill(slices * ((nd + 255) / 256), sms);
        const double fill128 = ldmoe_wave_fill(slices * ((nd + 127) / 128), sms);
        if (fill256 < LDMOE_FP8_WAVE_RATIO * fill128) return LDMOE_TILE_WS_128x64_C16_FP8;
    }
    return LDMOE_TILE_WS_256x64_C16_FP8;
}

#endif /* LDMOE_HEURISTICS_H */
