// impl/quantize.cuh — bf16 activations to e4m3 and their scales (ldmoe_quantize_fp8, ldmoe.h).
//
// One warp per token row and one pass over the row that produces both outputs: rowwise reads
// the row twice (the amax, then the conversion; the second read hits L1/L2, the row is at most
// a few KiB), the block scheme once (a half-warp holds a whole 1x128 group in registers).
// The arithmetic is ldmoe.py's quantize_rowwise / quantize_block(x, 1) in fp32: scale =
// amax / 448 (1 for amax 0), then x / scale (IEEE division, as torch's), saturated and rounded
// to nearest even by the e4m3 conversion, so the two agree bit for bit (tests/gpu/moe).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>
#include "kernels/moe/ldmoe.h"

namespace ldmoe {

constexpr int kQuantWarps = 8;   // token rows per CTA

__device__ __forceinline__ float absmax8(const uint4 &v) {
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&v);
    float m = 0.f;
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(h[i]);
        m = fmaxf(m, fmaxf(fabsf(f.x), fabsf(f.y)));
    }
    return m;
}

// Eight bf16 divided by `scale`, as eight e4m3 bytes.
__device__ __forceinline__ uint2 to_e4m3x8(const uint4 &v, float scale) {
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&v);
    uint32_t out[2];
    #pragma unroll
    for (int i = 0; i < 2; ++i) {
        const float2 a = __bfloat1622float2(h[2 * i]), b = __bfloat1622float2(h[2 * i + 1]);
        const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a.x / scale, a.y / scale), __NV_SATFINITE, __NV_E4M3);
        const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(b.x / scale, b.y / scale), __NV_SATFINITE, __NV_E4M3);
        out[i] = lo | (hi << 16);
    }
    return make_uint2(out[0], out[1]);
}

__device__ __forceinline__ float scale_of(float amax) { return amax > 0.f ? amax / 448.f : 1.f; }

template <int SCALING>
__global__ void __launch_bounds__(32 * kQuantWarps) quantize_fp8_kernel(const uint4 *__restrict__ x, int64_t T, int K,
                                                                         uint2 *__restrict__ x8, float *__restrict__ xs) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * kQuantWarps + (threadIdx.x >> 5);
    if (row >= T) return;   // whole warps: every shuffle below has its 32 lanes
    const int chunks = K / 8;   // 16-byte chunks of bf16 (K % 16 == 0)
    const uint4 *src = x + row * chunks;
    uint2 *dst = x8 + row * chunks;
    if constexpr (SCALING == LDMOE_FP8_ROWWISE) {
        float amax = 0.f;
        for (int c = lane; c < chunks; c += 32) amax = fmaxf(amax, absmax8(__ldg(src + c)));
        #pragma unroll
        for (int o = 16; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float scale = scale_of(amax);
        for (int c = lane; c < chunks; c += 32) dst[c] = to_e4m3x8(__ldg(src + c), scale);
        if (lane == 0) xs[row] = scale;
    } else {
        // A group is 128 k = 16 chunks: lanes 0-15 take the even groups, 16-31 the odd ones, and
        // both halves run the same number of iterations (the shuffles need the whole warp).
        const int half = lane >> 4, hl = lane & 15;
        const int KB = (K + 127) / 128, KB2 = (KB + 1) & ~1;
        for (int g = half; g < KB2; g += 2) {
            const int c = g * 16 + hl;
            const bool in = g < KB && c < chunks;
            const uint4 v = in ? __ldg(src + c) : make_uint4(0, 0, 0, 0);
            float amax = absmax8(v);
            #pragma unroll
            for (int o = 8; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            const float scale = scale_of(amax);
            if (in) dst[c] = to_e4m3x8(v, scale);
            if (g < KB && hl == 0) xs[(int64_t)g * T + row] = scale;
        }
    }
}

}  // namespace ldmoe
