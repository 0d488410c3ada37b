// pattern_probe.cu — how fast one launch streams a weight matrix, by access pattern.
//
// libldmoe's decode tiles read a [rows, K] bf16 weight matrix in TMA boxes of 64 k x 128 rows:
// 128 pieces of 128 bytes, K*2 bytes apart. The floor peer of bench_moe.py reads contiguous 16 KiB
// chunks. This program times, in one process and interleaved call by call, launches that read the
// same bytes (one CTA per SM, one thread issuing copies into a ring of shared-memory stages):
//
//   chunk S        16 KiB chunk c to CTA c mod grid, S stages (the floor's reader)
//   tile2d KS S    tiles of 128 rows x K claimed from an atomic counter (the next claim made when
//                  a tile starts), each tile read k-step by k-step from a Fibonacci-hashed first
//                  k-step (as libldmoe), KS 2-D boxes (64 k x 128 rows) per stage, S stages
//   tilepk KS S    the same tiles, claims and order, but each k-step one contiguous KS x 16 KiB
//                  copy (as if the weights were stored box by box: a packed layout)
//
// tile2d against tilepk is the cost of the row-piece pattern alone; chunk against tilepk the cost
// of tile granularity (the tail) and of claiming.
//
//   nvcc -O3 -arch=sm_90a -o build/moe/pattern_probe bench/moe/pattern_probe.cu
//   build/moe/pattern_probe [--mb MB] [--k 2048,4096,7168] [--reps N] [--hint first|normal]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "pattern_probe: %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

namespace {

constexpr unsigned kBox = 16384;   // 64 k x 128 rows of bf16
constexpr int kRows = 128;
constexpr int kMaxStages = 12;
enum { kChunk = 0, kTile2d = 1, kTilePk = 2 };

struct Args {
    CUtensorMap tm;
    const char *base;
    size_t bytes;
    long long rows;
    int K, mode, ksub, stages;
    unsigned *ctr;
    unsigned long long policy_first;   // 1: evict-first L2 hint
};

__device__ __forceinline__ uint32_t saddr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void wait_parity(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}

__device__ __forceinline__ int first_kstep(unsigned blk, int nk) {
    return (int)(((unsigned long long)(blk * 2654435769u) * (unsigned)nk) >> 32);
}

__global__ void __launch_bounds__(32, 1) probe(const __grid_constant__ Args a) {
    extern __shared__ __align__(1024) unsigned char ring[];
    __shared__ __align__(8) unsigned long long bars[kMaxStages];
    if (threadIdx.x != 0) return;
    for (int s = 0; s < a.stages; ++s)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(saddr(&bars[s])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    unsigned long long pol;
    if (a.policy_first) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    else asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(pol));
    const unsigned stage_bytes = kBox * (a.mode == kChunk ? 1 : a.ksub);
    unsigned k = 0;   // copies issued (stage k % stages)
    auto slot = [&](unsigned &bar) {
        const unsigned s = k % a.stages;
        bar = saddr(&bars[s]);
        if (k >= (unsigned)a.stages) wait_parity(bar, (k / a.stages - 1) & 1);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(stage_bytes) : "memory");
        return saddr(ring + (size_t)s * stage_bytes);
    };
    if (a.mode == kChunk) {
        const size_t chunks = a.bytes / kBox;
        for (size_t c = blockIdx.x; c < chunks; c += gridDim.x, ++k) {
            unsigned bar;
            const uint32_t dst = slot(bar);
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
                         ::"r"(dst), "l"(a.base + c * kBox), "r"(kBox), "r"(bar), "l"(pol) : "memory");
        }
    } else {
        const long long tiles = a.rows / kRows;
        const int kblocks = a.K / 64, nk = kblocks / a.ksub;
        long long t = atomicAdd(a.ctr, 1u);
        while (t < tiles) {
            const long long next = atomicAdd(a.ctr, 1u);   // resolved a tile later
            const int rot = first_kstep((unsigned)t, nk);
            for (int i = 0; i < nk; ++i, ++k) {
                int kb = i + rot;
                kb = kb >= nk ? kb - nk : kb;
                unsigned bar;
                const uint32_t dst = slot(bar);
                if (a.mode == kTile2d) {
                    for (int sub = 0; sub < a.ksub; ++sub)
                        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
                                     " [%0], [%1, {%2, %3}], [%4], %5;"
                                     ::"r"(dst + sub * kBox), "l"((unsigned long long)&a.tm), "r"((kb * a.ksub + sub) * 64),
                                       "r"((int)(t * kRows)), "r"(bar), "l"(pol) : "memory");
                } else {
                    const char *src = a.base + ((size_t)t * kblocks + (size_t)kb * a.ksub) * kBox;
                    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
                                 ::"r"(dst), "l"(src), "r"(stage_bytes), "r"(bar), "l"(pol) : "memory");
                }
            }
            t = next;
        }
    }
    for (unsigned j = 0; j < (unsigned)a.stages && j < k; ++j) {
        const unsigned kk = k - 1 - j;
        wait_parity(saddr(&bars[kk % a.stages]), (kk / a.stages) & 1);
    }
}

typedef CUresult (*encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                              const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                              CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

struct Variant { int mode, ksub, stages; std::string name; };

void usage(FILE *f) {
    fprintf(f, "usage: pattern_probe [--mb MB] [--k K1,K2,..] [--reps N] [--hint first|normal]\n"
               "Times one-CTA-per-SM launches reading a [rows, K] bf16 matrix of MB megabytes (two copies,\n"
               "alternated, so reads come from HBM) as contiguous chunks, as libldmoe's 2-D row-piece boxes,\n"
               "and as the same tiles stored box by box; interleaved call by call, median of N (default 30).\n"
               "Defaults: --mb 805 (the 128-expert shape's weights), --k 2048,4096,7168, --hint first.\n");
}

}  // namespace

int main(int argc, char **argv) {
    double mb = 805;
    int reps = 30;
    bool hint_first = true;
    std::vector<int> ks = {2048, 4096, 7168};
    for (int i = 1; i < argc; ++i) {
        const std::string o = argv[i];
        if (o == "-h" || o == "--help") { usage(stdout); return 0; }
        if (i + 1 >= argc) { usage(stderr); return 2; }
        const char *v = argv[++i];
        if (o == "--mb") mb = atof(v);
        else if (o == "--reps") reps = atoi(v);
        else if (o == "--hint") hint_first = !strcmp(v, "first");
        else if (o == "--k") {
            ks.clear();
            for (const char *p = v; *p;) { ks.push_back(atoi(p)); p = strchr(p, ','); if (!p) break; ++p; }
        } else { usage(stderr); return 2; }
    }
    if (mb < 64 || reps < 1) { usage(stderr); return 2; }
    for (int K : ks) if (K < 512 || K % 512) { fprintf(stderr, "pattern_probe: K must be a multiple of 512\n"); return 2; }

    int dev = 0, sms = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    if (!fn || q != cudaDriverEntryPointSuccess) { fprintf(stderr, "pattern_probe: no cuTensorMapEncodeTiled\n"); return 1; }
    encode_fn enc = (encode_fn)fn;
    CK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));

    const std::vector<Variant> vars = {
        {kChunk, 1, 12, "chunk 12"}, {kChunk, 1, 8, "chunk 8"}, {kChunk, 1, 6, "chunk 6"},
        {kTilePk, 1, 12, "tilepk 1x12"}, {kTile2d, 1, 12, "tile2d 1x12"},
        {kTilePk, 1, 8, "tilepk 1x8"}, {kTile2d, 1, 8, "tile2d 1x8"}, {kTile2d, 2, 4, "tile2d 2x4"},
        {kTilePk, 1, 6, "tilepk 1x6"}, {kTile2d, 1, 6, "tile2d 1x6"}, {kTile2d, 2, 3, "tile2d 2x3"},
        {kTile2d, 4, 2, "tile2d 4x2"}};
    printf("# pattern_probe: %s, %d SMs, %.0f MB per copy, median of %d, L2 hint %s\n\n", prop.name, sms, mb, reps,
           hint_first ? "evict-first" : "evict-normal");
    printf("| K | rows | MB |");
    for (auto &v : vars) printf(" %s (KiB in flight) |", v.name.c_str());
    printf("\n|---|---|---|");
    for (size_t i = 0; i < vars.size(); ++i) printf("---|");
    printf("\n");
    unsigned *ctr;
    CK(cudaMalloc(&ctr, sizeof(unsigned)));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int K : ks) {
        const long long rows = (long long)(mb * 1e6 / (K * 2.0)) / kRows * kRows;
        const size_t bytes = (size_t)rows * K * 2;
        char *buf[2];
        Args args[2];
        for (int s = 0; s < 2; ++s) {
            CK(cudaMalloc(&buf[s], bytes));
            CK(cudaMemset(buf[s], 0x3c, bytes));
            Args &a = args[s];
            memset(&a, 0, sizeof a);
            cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)rows};
            cuuint64_t strides[1] = {(cuuint64_t)K * 2};
            cuuint32_t box[2] = {64, (cuuint32_t)kRows};
            cuuint32_t estr[2] = {1, 1};
            if (enc(&a.tm, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, buf[s], dims, strides, box, estr,
                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
                fprintf(stderr, "pattern_probe: tensor map encode failed\n");
                return 1;
            }
            a.base = buf[s];
            a.bytes = bytes;
            a.rows = rows;
            a.K = K;
            a.ctr = ctr;
            a.policy_first = hint_first;
        }
        std::vector<std::vector<float>> t(vars.size());
        for (int r = -3; r < reps; ++r) {
            for (size_t vi = 0; vi < vars.size(); ++vi) {
                const size_t v = (vi + (size_t)(r < 0 ? 0 : r)) % vars.size();   // rotate who goes first
                Args a = args[(r + 3 + (int)v) & 1];
                a.mode = vars[v].mode;
                a.ksub = vars[v].ksub;
                a.stages = vars[v].stages;
                CK(cudaMemsetAsync(ctr, 0, sizeof(unsigned)));
                CK(cudaEventRecord(e0));
                probe<<<sms, 32, (size_t)kBox * a.ksub * a.stages>>>(a);
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                CK(cudaGetLastError());
                float ms;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (r >= 0) t[v].push_back(ms * 1000.f);
            }
        }
        printf("| %d | %lld | %.0f |", K, rows, bytes / 1e6);
        for (size_t v = 0; v < vars.size(); ++v) {
            std::sort(t[v].begin(), t[v].end());
            const float us = t[v][t[v].size() / 2];
            printf(" %.1f µs %.2f TB/s (%u) |", us, bytes / (us * 1e-6) / 1e12,
                   (unsigned)(kBox * (vars[v].mode == kChunk ? 1 : vars[v].ksub) * vars[v].stages / 1024));
        }
        printf("\n");
        fflush(stdout);
        for (int s = 0; s < 2; ++s) CK(cudaFree(buf[s]));
    }
    CK(cudaFree(ctr));
    return 0;
}
