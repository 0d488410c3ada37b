// What compute-sanitizer racecheck follows: hand-overs through shared memory in the patterns the
// fused layer uses, each in its own kernel (the report names the kernel and line). A two-slot ring,
// 8 rounds, so both read-after-write (full) and write-after-read (empty) are exercised.
//   A  all lanes write, __syncwarp, lane 0 arrives (count 1); reader lanes wait, read, __syncwarp, lane 0 arrives
//   B  the same, every lane arrives (count 32) on both barriers
//   C  st.release.cta / ld.acquire.cta on a shared counter both ways (the scheduler/producer words)
//   D  64 threads write, bar.sync among them, thread 0 arrives (count 1); readers: every lane arrives on empty
//   E  chain: writer lanes arrive mb1 (32); a middle warp waits mb1, arrives mb2 (32), no data; reader waits mb2
//   F  lane 0 reads, shuffles to the warp, lane 0 arrives (the grouped GEMM's ticket), writer as B
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cuda_runtime.h>

__device__ __forceinline__ uint32_t su(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void init(uint64_t *b, uint32_t c) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(su(b)), "r"(c) : "memory"); }
__device__ __forceinline__ void arrive(uint64_t *b) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(su(b)) : "memory"); }
__device__ __forceinline__ void wait(uint64_t *b, uint32_t par) {
    uint32_t ok = 0;
    while (!ok)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(ok) : "r"(su(b)), "r"(par) : "memory");
}
__device__ __forceinline__ void st_rel(int *p, int v) { asm volatile("st.release.cta.shared::cta.b32 [%0], %1;" ::"r"(su(p)), "r"(v) : "memory"); }
__device__ __forceinline__ int ld_acq(const int *p) { int v; asm volatile("ld.acquire.cta.shared::cta.b32 %0, [%1];" : "=r"(v) : "r"(su(p)) : "memory"); return v; }

constexpr int R = 8, S = 2;
struct Sh { int data[S][64]; uint64_t full[S], empty[S], mb2[S], e2[S]; int wr, rd; };

template <int P>
__global__ void probe(int *out) {
    __shared__ Sh sh;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t cf = (P == 0 || P == 3) ? 1 : 32;   // full's count
    const uint32_t ce = (P == 0 || P == 5) ? 1 : 32;   // empty's count
    if (tid == 0) {
        for (int s = 0; s < S; ++s) { init(&sh.full[s], cf); init(&sh.empty[s], ce); init(&sh.mb2[s], 32); init(&sh.e2[s], 32); }
        sh.wr = 0; sh.rd = 0;
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    int acc = 0;
    const int writers = P == 3 ? 2 : 1;   // D: warps 0-1 write
    const int reader = P == 4 ? 2 : writers;   // E: warp 1 relays, warp 2 reads
    for (int r = 0; r < R; ++r) {
        const int s = r % S;
        const uint32_t par = (uint32_t)(r / S) & 1u;
        if (warp < writers) {
            if (P == 2) { while (ld_acq(&sh.rd) < r - S + 1) {} }
            else if (P == 4) wait(&sh.empty[s], par ^ 1u);
            else wait(&sh.empty[s], par ^ 1u);
            sh.data[s][tid] = r * 100 + tid;
            if (P == 0) { __syncwarp(); if (lane == 0) arrive(&sh.full[s]); }
            else if (P == 2) { __syncwarp(); if (lane == 0) st_rel(&sh.wr, r + 1); }
            else if (P == 3) { asm volatile("bar.sync 1, 64;" ::: "memory"); if (tid == 0) arrive(&sh.full[s]); }
            else arrive(&sh.full[s]);
        } else if (P == 4 && warp == 1) {   // the relay: no data
            wait(&sh.full[s], par);
            arrive(&sh.mb2[s]);
            wait(&sh.e2[s], par);
            arrive(&sh.empty[s]);
        } else if (warp == reader) {
            if (P == 2) { while (ld_acq(&sh.wr) < r + 1) {} }
            else if (P == 4) wait(&sh.mb2[s], par);
            else wait(&sh.full[s], par);
            int v;
            if (P == 5) { int x = 0; if (lane == 0) x = sh.data[s][7]; v = __shfl_sync(0xffffffffu, x, 0); }
            else v = sh.data[s][(lane * 7 + r) % (32 * writers)];
            acc += v;
            if (P == 0 || P == 5) { __syncwarp(); if (lane == 0) arrive(&sh.empty[s]); }
            else if (P == 2) { __syncwarp(); if (lane == 0) st_rel(&sh.rd, r + 1); }
            else if (P == 4) arrive(&sh.e2[s]);
            else arrive(&sh.empty[s]);
        }
    }
    if (acc == -1) out[tid] = acc;
}

int main(int argc, char **argv) {
    const int only = argc > 1 ? atoi(argv[1]) : -1;
    int *d;
    cudaMalloc(&d, 1024);
    const char *names[] = {"A lane0-arrive", "B all-arrive", "C release/acquire", "D bar.sync+one-arrive", "E chain", "F lane0-reads"};
    for (int p = 0; p < 6; ++p) {
        if (only >= 0 && p != only) continue;
        printf("== pattern %s\n", names[p]);
        fflush(stdout);
        switch (p) {
        case 0: probe<0><<<1, 64>>>(d); break;
        case 1: probe<1><<<1, 64>>>(d); break;
        case 2: probe<2><<<1, 64>>>(d); break;
        case 3: probe<3><<<1, 96>>>(d); break;
        case 4: probe<4><<<1, 96>>>(d); break;
        case 5: probe<5><<<1, 64>>>(d); break;
        }
        const cudaError_t e = cudaDeviceSynchronize();
        printf("   %s\n", cudaGetErrorString(e));
        fflush(stdout);
    }
    return 0;
}
