// sm_mask.cu — libsmmask.so: keep a library's kernels off chosen SMs of an unbound process, so
// that a kernel we cannot edit (torch._grouped_mm) runs on an SM set picked by L2 side and GPC.
//
//   smmask_start(keep, n): one blocker CTA (1024 threads, all the opt-in shared memory) lands
//   on every SM; those on SMs with keep[sm] == 0 stay resident until smmask_stop(), so no CTA
//   that needs shared memory (a GEMM tile) fits there; the rest exit at once. Returns the
//   number of SMs blocked, or -1. Launched on a stream of its own that does not synchronize
//   with the legacy stream. Not thread-safe; one mask at a time.
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const int kMaxSms = 256;

__global__ void block_k(const unsigned char *keep, volatile unsigned *flag, volatile unsigned *ready) {
    extern __shared__ unsigned char pad[];
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    if (keep[sm] || threadIdx.x != 0) return;
    ready[sm] = 1;
    while (*flag == 0) { pad[0] = 1; __nanosleep(2000); }
}

static cudaStream_t g_stream;
static unsigned *g_flag, *g_ready;           // mapped host memory
static unsigned char *g_keep;

#define SOFT(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "smmask: %s: %s\n", #x, cudaGetErrorString(e_)); return -1; } } while (0)

extern "C" int smmask_start(const unsigned char *keep, int n) {
    int dev, sms, smem;
    if (n <= 0 || n > kMaxSms) return -1;
    SOFT(cudaGetDevice(&dev));
    SOFT(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    SOFT(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (!g_stream) {
        SOFT(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
        SOFT(cudaHostAlloc((void **)&g_flag, sizeof(unsigned), cudaHostAllocMapped));
        SOFT(cudaHostAlloc((void **)&g_ready, kMaxSms * sizeof(unsigned), cudaHostAllocMapped));
        SOFT(cudaMalloc(&g_keep, kMaxSms));
        SOFT(cudaFuncSetAttribute(block_k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    }
    unsigned char k[kMaxSms];
    memset(k, 1, sizeof k);
    memcpy(k, keep, n);
    int want = 0;
    for (int s = 0; s < sms; s++) want += !k[s];
    *(volatile unsigned *)g_flag = 0;
    memset((void *)g_ready, 0, kMaxSms * sizeof(unsigned));
    SOFT(cudaMemcpyAsync(g_keep, k, kMaxSms, cudaMemcpyHostToDevice, g_stream));
    SOFT(cudaStreamSynchronize(g_stream));
    unsigned *dflag, *dready;
    SOFT(cudaHostGetDevicePointer((void **)&dflag, g_flag, 0));
    SOFT(cudaHostGetDevicePointer((void **)&dready, g_ready, 0));
    block_k<<<sms, 1024, smem, g_stream>>>(g_keep, dflag, dready);
    SOFT(cudaGetLastError());
    // Wait until every blocked SM holds its CTA (at most 2 s).
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int got = 0;
        for (int s = 0; s < sms; s++) got += ((volatile unsigned *)g_ready)[s] != 0;
        if (got == want) return want;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > 2000000000L) {
            fprintf(stderr, "smmask: only %d of %d SMs blocked\n", got, want);
            *(volatile unsigned *)g_flag = 1;
            cudaStreamSynchronize(g_stream);
            return -1;
        }
    }
}

extern "C" int smmask_stop(void) {
    if (!g_stream) return -1;
    *(volatile unsigned *)g_flag = 1;
    SOFT(cudaStreamSynchronize(g_stream));
    return 0;
}
