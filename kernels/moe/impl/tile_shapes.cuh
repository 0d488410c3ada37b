// impl/tile_shapes.cuh — the kernel shape behind every tile of ldmoe.h's LDMOE_TILE_LIST, named
// Shape_<NAME> after it (impl/library.cuh builds its tile table from the list and these names).
//
// Cfg<BM weight rows, BN tokens, warps along M, warps along N, stages, wgmma, k-blocks per stage>
// (all_warps.cuh); WsCfg<BM, BN, stages, k-blocks per stage, weights on the MMA's M side,
// epilogue warps, token box rows> (warp_specialized.cuh). A k-block is 64 k, 128 contiguous
// bytes of each weight row. The all-warps body keeps STAGES - 1 stages loading, the
// warp-specialized one all of them.
#pragma once
#include "kernels/moe/impl/all_warps.cuh"
#include "kernels/moe/impl/warp_specialized.cuh"

namespace ldmoe {

using Shape_64x16_K4 = Cfg<64, 16, 4, 1, 4, false, 4>;   // 4 x 1 warps, 4 stages of 256 k: 96 KiB of weights in flight
using Shape_64x64_K4 = Cfg<64, 64, 2, 2, 3, false, 4>;   // 2 x 2 warps, 3 stages of 256 k: 64 KiB in flight
using Shape_128x128 = Cfg<128, 128, 2, 4, 4>;            // 2 x 4 warps, 4 stages of 64 k
using Shape_128x256 = Cfg<128, 256, 2, 4, 3>;            // 2 x 4 warps, 3 stages of 64 k
// Producer warpgroup + two consumer warpgroups.
using Shape_WS_128x64_C16 = WsCfg<128, 64, 4, 2, true, false, 16>;    // 4 stages of 128 k: 128 KiB in flight
using Shape_WS_128x128_C16 = WsCfg<128, 128, 6, 1, true, false, 16>;  // 6 stages of 64 k: 96 KiB in flight
using Shape_WS_256x128_EW = WsCfg<256, 128, 3, 1, false, true>;       // 3 stages of 64 k; the copy for the
                                                                      // epilogue warps takes a fourth's room
// The FP8 tiles (LDMOE_FP8_TILE_LIST), one kernel per scaling scheme S (enum ldmoe_fp8_scaling):
// the bf16 decode shapes with e4m3 operands, so the same bytes per stage hold twice the k
// (WS_128x64_C16_FP8: 4 stages of 256 k, 128 KiB of weights in flight; WS_128x128_C16_FP8: 6 of 128 k).
template <int S> using Shape_WS_128x64_C16_FP8 = Fp8Cfg<Shape_WS_128x64_C16, S>;
template <int S> using Shape_WS_128x128_C16_FP8 = Fp8Cfg<Shape_WS_128x128_C16, S>;
// Decode, 256 weight rows x 64 tokens (token boxes of 16 rows, as WS_128x64_C16_FP8), four
// stages of 128 k (40 KiB each: 128 KiB of weights in flight): each token box feeds twice the
// weight rows, so at 64 tokens the bytes read from L2 drop from 1.5x to 1.25x the weights', and
// each consumer warpgroup issues eight wgmmas per promotion instead of four.
template <int S> using Shape_WS_256x64_C16_FP8 = Fp8Cfg<WsCfg<256, 64, 4, 1, true, false, 16>, S>;
// Prefill: 256 weight rows (two m64 blocks per consumer warpgroup, promoted one after the other)
// x 128 tokens, 3 stages of 128 k (48 KiB each) and the staged epilogue. Twice the weight rows
// per token box of WS_128x128_C16_FP8 halve the bytes each FLOP reads from L2.
template <int S> using Shape_WS_256x128_FP8 = Fp8Cfg<WsCfg<256, 128, 3, 1, true>, S>;
// The same with 16-row token boxes: a tile of an expert's last tokens loads and multiplies only
// 32 or 64 token columns when it has no more (an expert of 160 tokens is a full tile and one of
// 32), where WS_256x128_FP8 pays for 128.
template <int S> using Shape_WS_256x128_C16_FP8 = Fp8Cfg<WsCfg<256, 128, 3, 1, true, false, 16>, S>;

}  // namespace ldmoe
