// impl/tile.cuh — one tile: a claimed ticket (impl/scheduler.cuh) decoded into its token rows,
// weight rows and output columns.
#pragma once
#include <stdint.h>
#include "kernels/moe/impl/params.cuh"
#include "kernels/moe/impl/scheduler.cuh"

namespace ldmoe {

// Everything a thread needs about one tile.
struct Tile {
    int64_t gid;        // global id (debug counters)
    int64_t tok0;       // first token row
    int32_t rows;       // valid tokens (<= BN)
    int32_t nrows;      // valid weight rows (<= BM)
    int32_t n0;         // first output column
    int32_t wrow_idx;   // first weight row of the tile, as a row of the [E*N, K] weight matrix
    int32_t wse;        // d*E + e: the tile's slice of its expert (packed layout)
    int32_t r0;         // first weight row of the tile within that slice
};

__device__ __forceinline__ Tile make_tile(const KParams &p, const int32_t *prefix, int BM, int BN,
                                          int mode, int64_t per_queue, int64_t tk) {
    ldmoe_tile_pos_t pos;
    if (mode == kModeAware) {
        int32_t d = (int32_t)(tk / per_queue);
        pos = ldmoe_decode_queue(prefix, p.E, p.nbs, d, tk - (int64_t)d * per_queue);
    } else {
        pos = ldmoe_decode_global(prefix, p.E, p.D, p.nbs, tk);
    }
    Tile t;
    t.gid = ldmoe_global_id(prefix, p.D, p.nbs, pos);
    const int32_t *tstart = prefix + kTStart;   // shared memory: no global load on this path
    const int64_t start = tstart[pos.e];
    const int64_t end = max(tstart[pos.e], tstart[pos.e + 1]);
    t.tok0 = start + (int64_t)pos.m * BN;
    int64_t left = end - t.tok0;
    t.rows = (int32_t)(left < BN ? left : BN);
    int32_t r0 = pos.b * BM;
    t.nrows = p.ND - r0 < BM ? p.ND - r0 : BM;
    t.n0 = pos.d * p.ND + r0;
    t.wrow_idx = (int32_t)(((int64_t)pos.d * p.E + pos.e) * p.ND + r0);
    t.wse = pos.d * p.E + pos.e;
    t.r0 = r0;
    return t;
}

}  // namespace ldmoe
