/* ldmoe_lab.h — the lab build of libldmoe: build/lab/libldmoe_lab.so (`make lab-moe`), never
 * installed, not a stable interface.
 *
 * It is the product library (kernels/moe/ldmoe.h, whose whole API it exports too, compiled from
 * the same sources with the same flags, so the tiles both have run the same machine code) plus
 * what only experiments and tests use:
 *   - the tiles AUTO never picks (LDMOE_LAB_TILE_LIST), accepted wherever a tile is taken;
 *   - per-tile counters, a launch timeline and variant bits (ldmoe_lab_grouped_mm);
 *   - an override of the published SM->domain map (ldmoe_lab_set_topology).
 * The diagnostic build (build/lab/diag/libldmoe_lab.so, `make lab-moe-diag`) compiles every kernel
 * with the LDMOE_TUNE_DIAG_* bits (kernels/moe/impl/variants.h), which remove the math, the
 * stores or the token loads; its results are wrong by design, and ptxas serializes its wgmmas, so
 * compare its variants with each other only.
 */
#ifndef LDMOE_LAB_H
#define LDMOE_LAB_H

#include "kernels/moe/ldmoe.h"
#include "kernels/moe/impl/variants.h"   /* LDMOE_TUNE_*: the kernels' variant bits */

#ifdef __cplusplus
extern "C" {
#endif

/* Tiles kept for experiments, X(value, NAME, weight rows, tokens) as in LDMOE_TILE_LIST; values
 * never collide with the product's (tests/moe/test_tile_list.py). Python names: NAME in lower
 * case without underscores (bench/moe/lab/ldmoe_lab.py reads this list).
 *   mma.sync, all warps:  64x16 and 64x64 (128 k per stage), 64x8_K4, 128x64_K2
 *   wgmma, all warps (compute capability 9.0): WG_256x128, WG_128x128 (64 k per stage), and
 *                         their _K2 forms (128 k per stage)
 *   warp-specialized wgmma (compute capability 9.0): WS_256x128 and WS_128x128 (prefill,
 *                         tokens on the MMA's M side), WS_128x64, WS_128x16, WS_256x64 (decode,
 *                         weights on M), WS_128x64_K1 (WS_128x64 with nine 64-k stages) */
#define LDMOE_LAB_TILE_LIST(X)          \
    X(1, 64x16, 64, 16)                \
    X(2, 64x64, 64, 64)                \
    X(5, WG_256x128, 256, 128)         \
    X(6, WG_128x128, 128, 128)         \
    X(9, WG_256x128_K2, 256, 128)      \
    X(10, WG_128x128_K2, 128, 128)     \
    X(11, WS_256x128, 256, 128)        \
    X(12, WS_128x64, 128, 64)          \
    X(13, WS_128x16, 128, 16)          \
    X(14, 128x64_K2, 128, 64)          \
    X(15, WS_128x128, 128, 128)        \
    X(16, 64x8_K4, 64, 8)              \
    X(17, WS_256x64, 256, 64)          \
    X(18, WS_128x64_K1, 128, 64)

enum ldmoe_lab_tile {
#define LDMOE_LAB_TILE_ENUM_(value, name, bm, bn) LDMOE_LAB_TILE_##name = value,
    LDMOE_LAB_TILE_LIST(LDMOE_LAB_TILE_ENUM_)
#undef LDMOE_LAB_TILE_ENUM_
};

/* ldmoe_grouped_mm_ex's arguments and the lab's. */
typedef struct ldmoe_lab_params {
    ldmoe_params_t base;       /* base.tile: enum ldmoe_tile or enum ldmoe_lab_tile */
    /* When non-NULL, a device array of 2*debug_cap uint32: entry g counts how often global tile
     * g was computed, entry debug_cap+g ORs (1 << domain) of the CTAs that computed it. Costs two
     * atomics per tile. */
    uint32_t      *debug_tiles;
    int64_t        debug_cap;
    /* LDMOE_TUNE_* bits (kernels/moe/impl/variants.h): kernel variants for same-process A/B runs;
     * 0 is the tuned default. LDMOE_TUNE_DIAG_* only in the diagnostic build. */
    uint32_t       tune;
    /* When non-NULL, a device array of 8 uint64 per CTA (grid = SM count) that the
     * warp-specialized tiles fill with a timeline of the launch, %globaltimer nanoseconds:
     * [0] CTA entry, [1] per-launch setup done, [2] first tile claimed, [3] its first stage
     * landed, [4] the last load issued, [5] the last tile stored; [6] tiles computed, [7] %smid.
     * Other tiles leave it untouched. See bench/moe/overhead.py --trace. */
    uint64_t      *trace;
} ldmoe_lab_params_t;

/* ldmoe_grouped_mm_ex with the lab's arguments. Errors as there, and LDMOE_ERR_INVALID_ARG for
 * tune bits this build does not know or debug_tiles with debug_cap <= 0. */
int ldmoe_lab_grouped_mm(const ldmoe_lab_params_t *p);

/* ldmoe_grouped_mm_fp8's arguments and the lab's (as in ldmoe_lab_params_t). */
typedef struct ldmoe_lab_fp8_params {
    ldmoe_fp8_params_t fp8;    /* fp8.base.tile: AUTO or LDMOE_FP8_TILE_LIST */
    uint32_t      *debug_tiles;
    int64_t        debug_cap;
    uint32_t       tune;
    uint64_t      *trace;
} ldmoe_lab_fp8_params_t;

/* ldmoe_grouped_mm_fp8 with the lab's arguments; errors as ldmoe_lab_grouped_mm's. */
int ldmoe_lab_grouped_mm_fp8(const ldmoe_lab_fp8_params_t *p);

/* Overwrite this library's `ldshim_topology` device symbol on the current device with *topo (as
 * if libldshim had published it); NULL restores what was there before the first override.
 * Synchronous. Not for concurrent use with running kernels of this library. */
int ldmoe_lab_set_topology(const struct ldshim_topology *topo);

#ifdef __cplusplus
}
#endif
#endif /* LDMOE_LAB_H */
