// marker_module.cu — the kernels of bind_driver.c, built as a fatbin that it loads with
// cuModuleLoad (a driver-API program has no cudart to register them).
#define MAX_SMS 256

extern "C" __global__ void marker(unsigned *seen, unsigned long long hold_ns) {
    if (threadIdx.x != 0) return;
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    atomicAdd(&seen[sm < MAX_SMS ? sm : MAX_SMS], 1u);
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < hold_ns);
}

extern "C" __global__ void work(const float *a, float *b, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        b[i] = a[i] * 1.5f + (float)(i % 7);
}
