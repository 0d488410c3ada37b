// preload_check.cu — an ordinary CUDA program for the `preload` case of tests/gpu/mlopart/run.sh:
// run under libldshim.so with `backend = mlopart` (test-single on one-die GPUs), its 64 MiB
// cudaMalloc is tagged and built from helper slices. It writes every word by kernel, reads
// them back with cudaMemcpy, and frees. Knows nothing about the shim. Exit 0 when the bytes
// are right.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <vector>

__global__ void fill(uint32_t *p, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = (uint32_t)(i * 2654435761u) ^ 0xa5a5a5a5u;
}

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: preload_check   (64 MiB cudaMalloc, kernel write, cudaMemcpy check, free)\n");
        return 0;
    }
    const size_t bytes = 64u << 20, n = bytes / 4;
    uint32_t *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) { printf("FAIL: cudaMalloc: %s\n", cudaGetErrorString(e)); return 1; }
    fill<<<264, 256>>>(p, n);
    std::vector<uint32_t> h(n);
    e = cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) { printf("FAIL: cudaMemcpy: %s\n", cudaGetErrorString(e)); return 1; }
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != ((uint32_t)(i * 2654435761u) ^ 0xa5a5a5a5u);
    e = cudaFree(p);
    if (bad || e != cudaSuccess) { printf("FAIL: %zu bad words, cudaFree: %s\n", bad, cudaGetErrorString(e)); return 1; }
    printf("PASS preload: 64 MiB written by kernel, read back by cudaMemcpy, freed\n");
    return 0;
}
