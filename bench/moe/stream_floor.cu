// stream_floor.cu — the speed of light of one launch that moves a grouped GEMM's DRAM bytes.
//
// A peer for bench_moe.py: one kernel launch that reads two buffers (the weights and the tokens
// a grouped GEMM reads) and writes a third (its output), doing nothing else. Its time is what
// any single launch moving those bytes needs on this GPU, launch and drain included; a grouped
// GEMM cannot beat it by more than what it avoids reading (nothing, in bench_moe's cases), so
// "ldmoe µs / floor µs" says how much of a launch is left to win.
//
// Two readers, both persistent:
//   kind 0 (LDG): every thread streams 16-byte `ld.global.nc.L1::no_allocate` loads, four in
//                 flight, over a grid-stride walk; `ctas_per_sm` CTAs of 512 threads per SM.
//   kind 1 (TMA): one CTA per SM; one thread issues 1-D bulk copies (cp.async.bulk) of 16 KiB
//                 chunks into a ring of 12 shared-memory stages (192 KiB in flight per SM, as
//                 much as libldmoe's decode tiles hold), chunk c going to CTA c mod grid; the
//                 other warps write the output share of the CTA meanwhile.
// Both write the output with 16-byte stores. The loaded data is folded into a value written
// only if it equals an impossible sentinel, so the loads cannot be dropped.
//
//   nvcc -O3 -arch=sm_90a -shared -Xcompiler -fPIC -o build/moe/libstreamfloor.so bench/moe/stream_floor.cu
//   (make build/moe/libstreamfloor.so; bench_moe.py loads it with ctypes if it exists)
//
// C API: int ldmoe_floor_stream(int kind, const void *a, size_t abytes, const void *b,
//        size_t bbytes, void *out, size_t obytes, int ctas_per_sm, void *stream)
// returns a cudaError_t value (0 = success); sizes and pointers must be multiples of 16.
#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kLdgThreads = 512;
constexpr int kTmaThreads = 256;
constexpr int kTmaStages = 12;
constexpr unsigned kTmaChunk = 16384;
constexpr unsigned kSentinel = 0x9e3779b9u;

__device__ unsigned g_sink;

__device__ __forceinline__ uint4 ld_stream(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

__device__ __forceinline__ unsigned fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

__device__ __forceinline__ unsigned read_span(const uint4 *p, size_t n, size_t first, size_t stride) {
    unsigned acc = 0;
    size_t i = first;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 v0 = ld_stream(p + i), v1 = ld_stream(p + i + stride);
        uint4 v2 = ld_stream(p + i + 2 * stride), v3 = ld_stream(p + i + 3 * stride);
        acc ^= fold(v0) ^ fold(v1) ^ fold(v2) ^ fold(v3);
    }
    for (; i < n; i += stride) acc ^= fold(ld_stream(p + i));
    return acc;
}

__device__ __forceinline__ void write_span(uint4 *p, size_t n, size_t first, size_t stride, unsigned v) {
    const uint4 w = make_uint4(v, v, v, v);
    for (size_t i = first; i < n; i += stride) p[i] = w;
}

__global__ void __launch_bounds__(kLdgThreads) ldg_stream(const uint4 *a, size_t na, const uint4 *b, size_t nb,
                                                          uint4 *out, size_t nout) {
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    unsigned acc = read_span(a, na, tid, stride) ^ read_span(b, nb, tid, stride);
    write_span(out, nout, tid, stride, 0u);
    if (acc == kSentinel) g_sink = acc;
}

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void bar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}

__global__ void __launch_bounds__(kTmaThreads, 1) tma_stream(const char *a, size_t na, const char *b, size_t nb,
                                                             uint4 *out, size_t nout) {
    extern __shared__ __align__(128) unsigned char ring[];
    __shared__ __align__(8) uint64_t bars[kTmaStages];
    if (threadIdx.x == 0) {
        for (int s = 0; s < kTmaStages; ++s)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bars[s])) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        const size_t ca = (na + kTmaChunk - 1) / kTmaChunk, cb = (nb + kTmaChunk - 1) / kTmaChunk;
        unsigned k = 0;
        for (size_t c = blockIdx.x; c < ca + cb; c += gridDim.x, ++k) {
            const unsigned s = k % kTmaStages;
            const uint32_t bar = smem_addr(&bars[s]);
            if (k >= (unsigned)kTmaStages) bar_wait(bar, (k / kTmaStages - 1) & 1);
            const char *src = c < ca ? a + c * kTmaChunk : b + (c - ca) * kTmaChunk;
            const size_t left = c < ca ? na - c * kTmaChunk : nb - (c - ca) * kTmaChunk;
            const unsigned bytes = left < kTmaChunk ? (unsigned)left : kTmaChunk;
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         ::"r"(smem_addr(ring + s * kTmaChunk)), "l"(src), "r"(bytes), "r"(bar) : "memory");
        }
        // Wait for the copies still in flight: stage s last used by copy k - 1 - j.
        for (unsigned j = 0; j < (unsigned)kTmaStages && j < k; ++j) {
            const unsigned kk = k - 1 - j;
            bar_wait(smem_addr(&bars[kk % kTmaStages]), (kk / kTmaStages) & 1);
        }
        unsigned acc = 0;
        for (int i = 0; i < kTmaStages * (int)(kTmaChunk / 4); i += 4099) acc ^= ((const unsigned *)ring)[i];
        if (acc == kSentinel) g_sink = acc;
    } else if (threadIdx.x >= 32) {
        const size_t writers = (size_t)gridDim.x * (kTmaThreads - 32);
        write_span(out, nout, (size_t)blockIdx.x * (kTmaThreads - 32) + (threadIdx.x - 32), writers, 0u);
    }
}

int g_sms[64];

}  // namespace

extern "C" __attribute__((visibility("default"))) int ldmoe_floor_stream(
        int kind, const void *a, size_t abytes, const void *b, size_t bbytes, void *out, size_t obytes,
        int ctas_per_sm, void *stream) {
    if (((uintptr_t)a | (uintptr_t)b | (uintptr_t)out | abytes | bbytes | obytes) & 15) return cudaErrorInvalidValue;
    if (kind != 0 && kind != 1) return cudaErrorInvalidValue;
    int dev;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    if (dev < 0 || dev >= 64) return cudaErrorInvalidDevice;
    if (!g_sms[dev]) {   // once per device (a benchmark tool: one thread calls it)
        int sms = 0;
        e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        if (e != cudaSuccess) return e;
        const int ring = kTmaStages * (int)kTmaChunk;
        e = cudaFuncSetAttribute(tma_stream, cudaFuncAttributeMaxDynamicSharedMemorySize, ring);
        if (e != cudaSuccess) return e;
        g_sms[dev] = sms;
    }
    cudaStream_t st = (cudaStream_t)stream;
    if (kind == 0) {
        if (ctas_per_sm < 1 || ctas_per_sm > 4) return cudaErrorInvalidValue;
        ldg_stream<<<g_sms[dev] * ctas_per_sm, kLdgThreads, 0, st>>>(
            (const uint4 *)a, abytes / 16, (const uint4 *)b, bbytes / 16, (uint4 *)out, obytes / 16);
    } else {
        tma_stream<<<g_sms[dev], kTmaThreads, kTmaStages * kTmaChunk, st>>>(
            (const char *)a, abytes, (const char *)b, bbytes, (uint4 *)out, obytes / 16);
    }
    return cudaGetLastError();
}
