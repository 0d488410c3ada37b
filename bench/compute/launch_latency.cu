// launch_latency.cu — the cost of a kernel launch, for the compute-binding benchmark
// (bench/compute/run.sh runs it bound and unbound, interleaved, in fresh processes).
//
//   launch_latency [N]   N back-to-back launches of an empty kernel on the NULL stream and on
//                        the per-thread default stream (every call goes through the shim's
//                        stream mapping when bound); prints host_us_per_launch_null=,
//                        host_us_per_launch_pts= (host time / N, after a warm-up) and
//                        gpu_us_per_launch= (event time of N launches / N).
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__global__ void empty() {}

static double now_us() {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "launch_latency: %s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: launch_latency [N]   (empty-kernel launch cost; see the file's header)\n");
        return 0;
    }
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    if (n < 100) { fprintf(stderr, "launch_latency: N must be >= 100\n"); return 2; }
    CHECK(cudaSetDevice(0));
    for (int i = 0; i < 1000; i++) empty<<<1, 32>>>();
    CHECK(cudaDeviceSynchronize());
    cudaStream_t streams[2] = { 0, cudaStreamPerThread };
    const char *names[2] = { "null", "pts" };
    for (int k = 0; k < 2; k++) {
        double t0 = now_us();
        for (int i = 0; i < n; i++) empty<<<1, 32, 0, streams[k]>>>();
        double t1 = now_us();
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        printf("host_us_per_launch_%s=%.4f\n", names[k], (t1 - t0) / n);
    }
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    CHECK(cudaEventRecord(a, 0));
    for (int i = 0; i < n; i++) empty<<<1, 32>>>();
    CHECK(cudaEventRecord(b, 0));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    printf("gpu_us_per_launch=%.4f\n", ms * 1e3 / n);
    return 0;
}
