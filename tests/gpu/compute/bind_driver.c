/* bind_driver.c — an unmodified driver-API program for the compute-binding GPU suite
 * (tests/gpu/compute/run.sh): it retains the primary context and makes it current itself,
 * the three ways such programs do (cuCtxSetCurrent; cuCtxPushCurrent/PopCurrent on another
 * thread; a created stream), loads its kernels with cuModuleLoad and launches them with
 * cuLaunchKernel. It compares the current context with the one it retained, as programs that
 * check their context do. Output, one "key=value" per line, as bind_check's:
 * <path>_rc=<CUresult> <path>_sms=<count> <path>_set=<hex mask, SM 0 lowest> per path;
 * ctx_is_retained=<0|1>; checksum=<hex>; device_sms=<attribute>.
 *
 *   bind_driver MODULE.fatbin */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SMS 256
#define CHECK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *s_ = NULL; cuGetErrorName(r_, &s_); \
    fprintf(stderr, "bind_driver: %s: %s (line %d)\n", #x, s_ ? s_ : "?", __LINE__); exit(1); } } while (0)

static CUcontext g_ctx;
static CUfunction g_marker, g_work;
static CUdeviceptr g_seen;
static unsigned g_grid;

static CUresult launch_marker(CUstream s, unsigned grid) {
    unsigned long long hold = 2000;
    void *args[] = { &g_seen, &hold };
    return cuLaunchKernel(g_marker, grid, 1, 1, 32, 1, 1, 0, s, args, NULL);
}

static void report(const char *tag, CUresult rc) {
    printf("%s_rc=%d\n", tag, (int)rc);
    if (rc != CUDA_SUCCESS) return;
    unsigned h[MAX_SMS + 1];
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH(h, g_seen, sizeof h));
    CHECK(cuMemsetD8(g_seen, 0, sizeof h));
    CHECK(cuCtxSynchronize());
    uint64_t w[MAX_SMS / 64] = {0};
    int n = 0;
    for (int s = 0; s < MAX_SMS; s++)
        if (h[s]) { w[s / 64] |= 1ull << (s % 64); n++; }
    printf("%s_sms=%d\n%s_set=%016llx%016llx%016llx%016llx\n", tag, n, tag, (unsigned long long)w[3],
           (unsigned long long)w[2], (unsigned long long)w[1], (unsigned long long)w[0]);
}

/* Another thread pushes the retained context, launches, pops. */
static void *pusher(void *arg) {
    CUresult *rc = arg;
    *rc = cuCtxPushCurrent(g_ctx);
    if (*rc == CUDA_SUCCESS) {
        *rc = launch_marker(NULL, g_grid);
        if (*rc == CUDA_SUCCESS) *rc = cuCtxSynchronize();
        CUcontext popped = NULL;
        CUresult p = cuCtxPopCurrent(&popped);
        if (*rc == CUDA_SUCCESS) *rc = p;
        if (*rc == CUDA_SUCCESS && popped != g_ctx) *rc = CUDA_ERROR_INVALID_CONTEXT;
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        printf("usage: bind_driver MODULE.fatbin   (prints the SMs every launch path ran on; see the file's header)\n");
        return argc == 2 ? 0 : 2;
    }
    CUdevice dev;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    int sms = 0;
    CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    printf("device_sms=%d\n", sms);
    g_grid = (unsigned)(8 * sms);
    CHECK(cuDevicePrimaryCtxRetain(&g_ctx, dev));
    CHECK(cuCtxSetCurrent(g_ctx));
    CUcontext cur = NULL;
    CHECK(cuCtxGetCurrent(&cur));
    printf("ctx_is_retained=%d\n", cur == g_ctx);
    CUmodule mod;
    CHECK(cuModuleLoad(&mod, argv[1]));
    CHECK(cuModuleGetFunction(&g_marker, mod, "marker"));
    CHECK(cuModuleGetFunction(&g_work, mod, "work"));
    CHECK(cuMemAlloc(&g_seen, (MAX_SMS + 1) * sizeof(unsigned)));
    CHECK(cuMemsetD8(g_seen, 0, (MAX_SMS + 1) * sizeof(unsigned)));

    report("set_current", launch_marker(NULL, g_grid));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUresult rc = launch_marker(s, g_grid);
    if (rc == CUDA_SUCCESS) rc = cuStreamSynchronize(s);
    report("stream", rc);
    pthread_t t;
    rc = CUDA_SUCCESS;
    if (pthread_create(&t, NULL, pusher, &rc) != 0) { fprintf(stderr, "bind_driver: pthread_create failed\n"); return 1; }
    pthread_join(t, NULL);
    report("push", rc);

    /* A deterministic computation: results must equal the unbound run's. */
    int n = 1 << 22;
    float *h = malloc((size_t)n * sizeof *h);
    if (!h) return 1;
    for (int i = 0; i < n; i++) h[i] = (float)(i % 1000) * 0.25f;
    CUdeviceptr a, b;
    CHECK(cuMemAlloc(&a, (size_t)n * sizeof(float)));
    CHECK(cuMemAlloc(&b, (size_t)n * sizeof(float)));
    CHECK(cuMemcpyHtoD(a, h, (size_t)n * sizeof(float)));
    void *args[] = { &a, &b, &n };
    CHECK(cuLaunchKernel(g_work, g_grid, 1, 1, 256, 1, 1, 0, s, args, NULL));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(h, b, (size_t)n * sizeof(float)));
    uint64_t x = 1469598103934665603ull;
    for (int i = 0; i < n; i++) {
        uint32_t v;
        memcpy(&v, &h[i], sizeof v);
        x = (x ^ v) * 1099511628211ull;
    }
    printf("checksum=%016llx\n", (unsigned long long)x);
    free(h);
    CHECK(cuMemFree(a));
    CHECK(cuMemFree(b));
    CHECK(cuMemFree(g_seen));
    CHECK(cuStreamDestroy(s));
    CHECK(cuModuleUnload(mod));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
