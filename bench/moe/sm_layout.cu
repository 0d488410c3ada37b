// sm_layout.cu — where a persistent launch puts its CTAs, and which SMs share a GPC.
//
//   nvcc -arch=sm_90a -o build/sm_layout bench/moe/sm_layout.cu && build/sm_layout
//
// Prints (1) the SM (%smid) of each CTA of a one-CTA-per-SM launch, in blockIdx order, for a few
// launches; (2) the GPC groups found by launching clusters (a cluster never spans GPCs): SMs that
// ever share a cluster are joined (union-find), over many launches of the largest cluster size
// the device accepts (SMs of GPCs too small for it stay alone). Diagnostic for libldmoe's
// tile-to-SM placement (doc/moe.md); results: bench/results/moe-scheduler-cost/.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

__device__ unsigned smid() { unsigned s; asm volatile("mov.u32 %0, %%smid;" : "=r"(s)); return s; }

__global__ void where(unsigned *out) {
    extern __shared__ unsigned char pad[];   // sized so that only one CTA fits per SM
    if (threadIdx.x == 0) { pad[0] = 1; out[blockIdx.x] = smid(); }
    __nanosleep(20000);
}

__global__ void cluster_where(unsigned *out) {
    if (threadIdx.x == 0) out[blockIdx.x] = smid();
    __nanosleep(5000);
}

static int find(std::vector<int> &p, int x) { while (p[x] != x) x = p[x] = p[p[x]]; return x; }

int main(int argc, char **argv) {
    if (argc > 1) {
        const bool help = argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"));
        fprintf(help ? stdout : stderr, "usage: sm_layout   (no arguments; needs an sm_90 or newer GPU)\n");
        return help ? 0 : 2;
    }
    int dev = 0, sms = 0, smem = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    CK(cudaFuncSetAttribute(where, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    unsigned *d = nullptr;
    CK(cudaMalloc(&d, 4096 * sizeof(unsigned)));
    std::vector<unsigned> h(4096);
    for (int rep = 0; rep < 3; ++rep) {
        where<<<sms, 128, smem>>>(d);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(h.data(), d, sms * sizeof(unsigned), cudaMemcpyDeviceToHost));
        printf("launch %d, smid by blockIdx:", rep);
        for (int b = 0; b < sms; ++b) printf(" %u", h[b]);
        printf("\n");
    }
    // GPC groups from clusters
    CK(cudaFuncSetAttribute(cluster_where, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    int csize = 16;
    for (; csize >= 2; csize /= 2) {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = csize; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
        cfg.gridDim = dim3(csize * 64); cfg.blockDim = dim3(64); cfg.attrs = at; cfg.numAttrs = 1;
        int n = 0;
        if (cudaOccupancyMaxActiveClusters(&n, cluster_where, &cfg) == cudaSuccess && n > 0) break;
        cudaGetLastError();
    }
    printf("cluster size %d\n", csize);
    std::vector<int> par(1024);
    for (int i = 0; i < 1024; ++i) par[i] = i;
    for (int rep = 0; rep < 200; ++rep) {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = csize; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
        cfg.gridDim = dim3(csize * 64); cfg.blockDim = dim3(64); cfg.attrs = at; cfg.numAttrs = 1;
        CK(cudaLaunchKernelEx(&cfg, cluster_where, d));
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(h.data(), d, csize * 64 * sizeof(unsigned), cudaMemcpyDeviceToHost));
        for (int c = 0; c < 64; ++c)
            for (int i = 1; i < csize; ++i) {
                int a = find(par, (int)h[c * csize]), b = find(par, (int)h[c * csize + i]);
                if (a != b) par[a] = b;
            }
    }
    std::vector<std::vector<int>> groups(1024);
    for (int s = 0; s < sms; ++s) groups[find(par, s)].push_back(s);
    int g = 0;
    for (auto &v : groups) {
        if (v.empty()) continue;
        printf("group %d (%zu SMs):", g++, v.size());
        for (int s : v) printf(" %d", s);
        printf("\n");
    }
    CK(cudaFree(d));
    return 0;
}
