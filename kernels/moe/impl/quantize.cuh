// impl/quantize.cuh — bf16 activations to e4m3 and their scales (ldmoe_quantize_fp8, ldmoe.h).
//
// Each token row gets 2^tpr_shift threads (whole warps, 32..256, sized on the host so that a
// thread has about four 16-byte chunks of the row), a CTA 256 / that many rows; one read of the
// row: each thread keeps its chunks in registers while the row's warps find its amax (rowwise;
// rows of more than 8192 k are read twice), or while its half-warp finds the amax of
// its 1x128 group (block). Few chunks per thread because decode has few rows (64 at 8 tokens x 8
// experts): the work must spread over the SMs; whole rows per CTA at small K, or the CTA count
// (one per row) would dominate the time.
// The arithmetic is ldmoe.py's quantize_rowwise / quantize_block(x, 1) in fp32: scale =
// amax * fp32(1/448) (1 for amax 0), then x / scale (IEEE division, as torch's tensor
// division), saturated and rounded to nearest even by the e4m3 conversion, so the two agree
// bit for bit (tests/gpu/moe).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>
#include "kernels/moe/ldmoe.h"

namespace ldmoe {

constexpr int kQuantThreads = 256;   // per CTA
constexpr int kQuantRegChunks = 4;   // 16-byte chunks a thread keeps (rows up to 8192 k in one read):
                                     // few registers, so that four CTAs fit an SM (launch bounds)

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

__device__ __forceinline__ float scale_of(float amax) { return amax > 0.f ? amax * (1.f / 448.f) : 1.f; }

// Threads per row for rows of `chunks` 16-byte chunks, as a shift (5..8).
inline int quant_tpr_shift(int chunks) {
    int sh = 5;
    while (sh < 8 && chunks > 4 << sh) ++sh;
    return sh;
}

template <int SCALING>
__global__ void __launch_bounds__(kQuantThreads, 4) quantize_fp8_kernel(const uint4 *__restrict__ x, int64_t T, int K,
                                                                      uint2 *__restrict__ x8, float *__restrict__ xs,
                                                                      int tpr_shift) {
    const int tpr = 1 << tpr_shift, tid = threadIdx.x, lane = tid & 31;
    const int lt = tid & (tpr - 1);   // thread within its row
    const int64_t row = (int64_t)blockIdx.x * (kQuantThreads >> tpr_shift) + (tid >> tpr_shift);
    const bool live = row < T;        // the last CTA's spare rows still take part in its barrier
    const int chunks = K / 8;         // 16-byte chunks of bf16 (K % 16 == 0)
    const uint4 *src = x + (live ? row : 0) * chunks;
    uint2 *dst = x8 + (live ? row : 0) * chunks;
    if constexpr (SCALING == LDMOE_FP8_ROWWISE) {
        __shared__ float red[kQuantThreads / 32];
        const bool in_regs = chunks <= tpr * kQuantRegChunks;
        uint4 v[kQuantRegChunks];
        float amax = 0.f;
        if (in_regs) {
            #pragma unroll
            for (int i = 0; i < kQuantRegChunks; ++i) {
                const int c = lt + i * tpr;
                v[i] = live && c < chunks ? __ldg(src + c) : make_uint4(0, 0, 0, 0);
                amax = fmaxf(amax, absmax8(v[i]));
            }
        } else if (live) {
            for (int c = lt; c < chunks; c += tpr) amax = fmaxf(amax, absmax8(__ldg(src + c)));
        }
        #pragma unroll
        for (int o = 16; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        if (lane == 0) red[tid >> 5] = amax;
        __syncthreads();
        const int w0 = (tid >> tpr_shift) << (tpr_shift - 5);   // the row's first warp
        for (int w = 0; w < tpr >> 5; ++w) amax = fmaxf(amax, red[w0 + w]);
        const float scale = scale_of(amax);
        if (!live) return;
        if (in_regs) {
            #pragma unroll
            for (int i = 0; i < kQuantRegChunks; ++i) {
                const int c = lt + i * tpr;
                if (c < chunks) dst[c] = to_e4m3x8(v[i], scale);
            }
        } else {
            for (int c = lt; c < chunks; c += tpr) dst[c] = to_e4m3x8(__ldg(src + c), scale);
        }
        if (lt == 0) xs[row] = scale;
    } else {
        // A group is 128 k = 16 chunks = 16 consecutive threads of the row (tpr is a multiple of
        // 16); every thread runs every iteration, so the shuffles always have their whole warp.
        const int KB = (K + 127) / 128, iters = (chunks + tpr - 1) / tpr;
        #pragma unroll 4
        for (int i = 0; i < iters; ++i) {
            const int c = lt + i * tpr;
            const bool in = live && c < chunks;
            const uint4 v = in ? __ldg(src + c) : make_uint4(0, 0, 0, 0);
            float amax = absmax8(v);
            #pragma unroll
            for (int o = 8; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            const float scale = scale_of(amax);
            if (in) dst[c] = to_e4m3x8(v, scale);
            if (live && (c & 15) == 0 && c / 16 < KB) xs[(int64_t)(c / 16) * T + row] = scale;
        }
    }
}

}  // namespace ldmoe
