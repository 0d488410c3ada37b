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
#include "kernels/moe/impl/div_rn.h"
#include "kernels/moe/impl/ptx.cuh"

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

// A row's (or group's) divisor: the scale and, where the three-operation division applies
// (impl/div_rn.h), its reciprocal; elsewhere (an all-but-zero or infinite amax) rcp = 0 and
// the IEEE division is used.
struct Divisor {
    float scale, rcp;
};
__device__ __forceinline__ Divisor divisor_of(float scale) {
    const bool fast = scale >= LDMOE_DIV_MIN_SCALE && scale <= LDMOE_DIV_MAX_SCALE;
    return {scale, fast ? 1.f / scale : 0.f};
}
__device__ __forceinline__ float divide(float x, const Divisor &d) {
    return d.rcp != 0.f ? ldmoe_div_by(x, d.scale, d.rcp) : x / d.scale;
}

// Eight bf16 divided by the scale (as `x / scale` rounds), as eight e4m3 bytes.
__device__ __forceinline__ uint2 to_e4m3x8(const uint4 &v, const Divisor &d) {
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&v);
    uint32_t out[2];
    #pragma unroll
    for (int i = 0; i < 2; ++i) {
        const float2 a = __bfloat1622float2(h[2 * i]), b = __bfloat1622float2(h[2 * i + 1]);
        const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(divide(a.x, d), divide(a.y, d)), __NV_SATFINITE, __NV_E4M3);
        const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(divide(b.x, d), divide(b.y, d)), __NV_SATFINITE, __NV_E4M3);
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

// Rowwise rows are visited grid-stride (the host caps the grid at what is resident): while a
// row's amax is reduced and its bytes converted, each thread's loads of its next row are
// already in flight, so the stream does not stop at every row's barrier; at decode the grid
// covers the rows and the loop runs once.
template <int SCALING>
__global__ void __launch_bounds__(kQuantThreads, 4) quantize_fp8_kernel(const uint4 *__restrict__ x, int64_t T, int K,
                                                                      uint2 *__restrict__ x8, float *__restrict__ xs,
                                                                      int tpr_shift) {
    // The grouped GEMM that follows is a programmatic dependent launch: its CTAs may take the SMs
    // this grid leaves free and set up while it runs (they wait for its completion before
    // reading what it writes). Every CTA of this grid is resident by the time all have
    // run this, so the early start takes no SM it needs.
    griddep_launch_dependents();
    const int tpr = 1 << tpr_shift, tid = threadIdx.x, lane = tid & 31;
    const int lt = tid & (tpr - 1);   // thread within its row
    const int rows_per_cta = kQuantThreads >> tpr_shift;
    const int chunks = K / 8;         // 16-byte chunks of bf16 (K % 16 == 0)
    if constexpr (SCALING == LDMOE_FP8_ROWWISE) {
        __shared__ float red[2][kQuantThreads / 32];   // by iteration parity: one barrier per row
        const bool in_regs = chunks <= tpr * kQuantRegChunks;
        const int64_t stride = (int64_t)gridDim.x * rows_per_cta;
        const int w0 = (tid >> tpr_shift) << (tpr_shift - 5);   // the row's first warp
        uint4 v[kQuantRegChunks];
        auto load = [&](int64_t row) {   // this thread's chunks of `row` (zeros past T)
            const uint4 *src = x + (row < T ? row : 0) * chunks;
            #pragma unroll
            for (int i = 0; i < kQuantRegChunks; ++i) {
                const int c = lt + i * tpr;
                v[i] = row < T && c < chunks ? __ldg(src + c) : make_uint4(0, 0, 0, 0);
            }
        };
        int64_t row = (int64_t)blockIdx.x * rows_per_cta + (tid >> tpr_shift);
        if (in_regs) load(row);
        // Every thread runs every iteration (the barrier): the CTA goes on while its first row
        // is below T; rows past T take part in the barrier without loading or storing.
        for (int it = 0; row - (tid >> tpr_shift) < T; ++it, row += stride) {
            const bool live = row < T;
            const uint4 *src = x + (live ? row : 0) * chunks;
            uint2 *dst = x8 + (live ? row : 0) * chunks;
            float amax = 0.f;
            uint4 cur[kQuantRegChunks];
            if (in_regs) {
                #pragma unroll
                for (int i = 0; i < kQuantRegChunks; ++i) {
                    cur[i] = v[i];
                    amax = fmaxf(amax, absmax8(cur[i]));
                }
                load(row + stride);   // the next row's loads overlap this row's reduction and stores
            } else if (live) {
                for (int c = lt; c < chunks; c += tpr) amax = fmaxf(amax, absmax8(__ldg(src + c)));
            }
            #pragma unroll
            for (int o = 16; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            if (lane == 0) red[it & 1][tid >> 5] = amax;
            __syncthreads();
            for (int w = 0; w < tpr >> 5; ++w) amax = fmaxf(amax, red[it & 1][w0 + w]);
            const float scale = scale_of(amax);
            const Divisor d = divisor_of(scale);
            if (!live) continue;
            if (in_regs) {
                #pragma unroll
                for (int i = 0; i < kQuantRegChunks; ++i) {
                    const int c = lt + i * tpr;
                    if (c < chunks) dst[c] = to_e4m3x8(cur[i], d);
                }
            } else {
                for (int c = lt; c < chunks; c += tpr) dst[c] = to_e4m3x8(__ldg(src + c), d);
            }
            if (lt == 0) xs[row] = scale;
        }
    } else {
        // A group is 128 k = 16 chunks = 16 consecutive threads of the row (tpr is a multiple of
        // 16); every thread runs every iteration, so the shuffles always have their whole warp.
        // One row per thread group and CTA (the host launches one CTA per rows_per_cta rows).
        const int64_t row = (int64_t)blockIdx.x * rows_per_cta + (tid >> tpr_shift);
        const bool live = row < T;
        const uint4 *src = x + (live ? row : 0) * chunks;
        uint2 *dst = x8 + (live ? row : 0) * chunks;
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
            if (in) dst[c] = to_e4m3x8(v, divisor_of(scale));
            if (live && (c & 15) == 0 && c / 16 < KB) xs[(int64_t)(c / 16) * T + row] = scale;
        }
    }
}

}  // namespace ldmoe
