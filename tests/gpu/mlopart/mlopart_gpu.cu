// mlopart_gpu.cu — real-GPU check of the MLOPart backend (shim/backend_mlopart.c), driven
// directly through its ops table (no preload). Run by tests/gpu/mlopart/run.sh.
//
//   mlopart_gpu decline   plain MLOPart on this GPU: on a one-die GPU (H100/H200) MPS shows
//                         one device and available() must decline with a reason; on a GPU
//                         MLOPart really splits, it must accept and the cycle below runs
//   mlopart_gpu single    LDSHIM_MLOPART_TEST_SINGLE=1: one MPS device stands for both
//                         domains; the real cross-process path end to end
//   mlopart_gpu crash     test-single; the helper is SIGKILLed after one good slice: the next
//                         create() fails cleanly, the slice already imported stays usable,
//                         and the supervisor still removes the real daemon and server
//
// The cycle: available(); create() one slice per domain (helper cuMemCreate -> export ->
// SCM_RIGHTS -> import here); reserve, map, set access; a kernel writes every byte, cudaMemcpy
// reads them back; cudaMemcpy writes a second pattern, a kernel checks every byte; unmap,
// release, free; shutdown(); device memory back to the baseline. Exit 0 when all holds.
#include <cuda_runtime.h>

extern "C" {
#include "shim/backend.h"
#include "shim/log.h"
#include "shim/mlopart_proto.h"
}

#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <vector>

#define MiB ((size_t)1 << 20)

static int g_fail;
#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stdout, "FAIL: " __VA_ARGS__); fputc('\n', stdout); g_fail = 1; } } while (0)
#define RT(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL: %s: %s\n", #call, cudaGetErrorString(e_)); return 1; } } while (0)
#define CU(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { \
    printf("FAIL: %s: %s\n", #call, ld_cu_errname(r_)); return 1; } } while (0)

__host__ __device__ static inline uint32_t pattern(uint64_t i, uint32_t seed) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 29;
    return (uint32_t)(x * 0xBF58476D1CE4E5B9ull >> 32);
}

__global__ void fill(uint32_t *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = pattern(i, seed);
}

__global__ void verify(const uint32_t *p, size_t n, uint32_t seed, unsigned long long *bad) {
    unsigned long long b = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        b += p[i] != pattern(i, seed);
    if (b) atomicAdd(bad, b);
}

/* Our child running the helper (its supervisor is the helper's child, not ours). */
static int helper_pid(void) {
    DIR *d = opendir("/proc");
    int found = 0;
    for (struct dirent *e; d && !found && (e = readdir(d));) {
        int pid = atoi(e->d_name);
        if (pid <= 0) continue;
        char path[64], buf[512], comm[64] = "", state = 0;
        int ppid = 0;
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fgets(buf, sizeof buf, f)) sscanf(buf, "%*d (%63[^)]) %c %d", comm, &state, &ppid);
        fclose(f);
        if (ppid == getpid() && state != 'Z' && !strncmp(comm, "ldshim-mlopart", 14)) found = pid;
    }
    if (d) closedir(d);
    return found;
}

/* One good slice, kill the helper, then: create() fails fast, the good slice still works. */
static int crash(const ld_driver_t *drv, int dev, size_t slice) {
    char why[256] = "";
    CUmemGenericAllocationHandle h;
    CUresult r = ld_backend_mlopart.create(drv, dev, 0, slice, &h, why, sizeof why);
    if (r != CUDA_SUCCESS) { printf("FAIL: create before the crash: %s (%s)\n", ld_cu_errname(r), why); return 1; }
    int hp = helper_pid();
    if (hp <= 0) { printf("FAIL: cannot find the helper process\n"); return 1; }
    kill(hp, SIGKILL);
    usleep(100000);
    CUmemGenericAllocationHandle h2;
    r = ld_backend_mlopart.create(drv, dev, 1, slice, &h2, why, sizeof why);
    CHECK(r != CUDA_SUCCESS, "create() after the helper was killed succeeded");
    if (r != CUDA_SUCCESS) printf("PASS crash: create() after SIGKILL of helper %d fails: %s (%s)\n", hp, ld_cu_errname(r), why);
    else drv->pfn_cuMemRelease(h2);
    r = ld_backend_mlopart.create(drv, dev, 1, slice, &h2, why, sizeof why);
    CHECK(r != CUDA_SUCCESS, "the backend did not stay off after the crash");
    /* Memory imported before the crash belongs to this process now. */
    CUdeviceptr base = 0;
    CU(drv->pfn_cuMemAddressReserve(&base, slice, 0, 0, 0));
    CU(drv->pfn_cuMemMap(base, slice, 0, h, 0));
    CUmemAccessDesc a;
    memset(&a, 0, sizeof a);
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = dev;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU(drv->pfn_cuMemSetAccess(base, slice, &a, 1));
    uint32_t *p = (uint32_t *)(uintptr_t)base;
    fill<<<264, 256>>>(p, slice / 4, 77u);
    unsigned long long *dbad, kbad = 1;
    RT(cudaMalloc(&dbad, sizeof *dbad));
    RT(cudaMemset(dbad, 0, sizeof *dbad));
    verify<<<264, 256>>>(p, slice / 4, 77u, dbad);
    RT(cudaMemcpy(&kbad, dbad, sizeof kbad, cudaMemcpyDeviceToHost));
    RT(cudaFree(dbad));
    CHECK(kbad == 0, "slice imported before the crash reads back wrong: %llu words", kbad);
    if (!kbad) printf("PASS crash: the slice imported before the crash still works\n");
    CU(drv->pfn_cuMemUnmap(base, slice));
    CU(drv->pfn_cuMemAddressFree(base, slice));
    CU(drv->pfn_cuMemRelease(h));
    ld_backend_mlopart.shutdown(0);
    return 0;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: mlopart_gpu decline|single|crash [--slice-mib N] [--device D]\n"
            "  decline  MLOPart as the GPU offers it (declines on one-die GPUs)\n"
            "  single   LDSHIM_MLOPART_TEST_SINGLE=1: one device stands for every domain\n"
            "  crash    test-single; the helper is killed mid-run, the backend turns off\n"
            "Needs LDSHIM_MLOPART_HELPER=<build>/ldshim-mlopart-helper (no libldshim.so here).\n"
            "Prints 'PASS ...' or 'FAIL: ...' lines on stdout; exit 0 when all checks pass.\n");
}

/* free0: free device memory before the helper existed (its MPS server uses memory too). */
static int cycle(const ld_driver_t *drv, int dev, size_t slice, size_t free0) {
    const int nd = 2;
    size_t total = 0;
    char why[256] = "";
    std::vector<CUmemGenericAllocationHandle> h(nd);
    for (int d = 0; d < nd; d++) {
        CUresult r = ld_backend_mlopart.create(drv, dev, d, slice, &h[d], why, sizeof why);
        if (r != CUDA_SUCCESS) { printf("FAIL: create(domain %d, %zu MiB): %s (%s)\n", d, slice / MiB, ld_cu_errname(r), why); return 1; }
    }
    CUdeviceptr base = 0;
    size_t bytes = nd * slice;
    CU(drv->pfn_cuMemAddressReserve(&base, bytes, 0, 0, 0));
    for (int d = 0; d < nd; d++) CU(drv->pfn_cuMemMap(base + d * slice, slice, 0, h[d], 0));
    CUmemAccessDesc a;
    memset(&a, 0, sizeof a);
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = dev;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU(drv->pfn_cuMemSetAccess(base, bytes, &a, 1));

    uint32_t *p = (uint32_t *)(uintptr_t)base;
    size_t words = bytes / 4;
    fill<<<264, 256>>>(p, words, 0x1234u);
    RT(cudaDeviceSynchronize());
    std::vector<uint32_t> host(words);
    RT(cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t i = 0; i < words; i++) bad += host[i] != pattern(i, 0x1234u);
    CHECK(bad == 0, "kernel-written words read back wrong by cudaMemcpy: %zu of %zu", bad, words);
    for (size_t i = 0; i < words; i++) host[i] = pattern(i, 0xbeefu);
    RT(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice));
    unsigned long long *dbad;
    RT(cudaMalloc(&dbad, sizeof *dbad));
    RT(cudaMemset(dbad, 0, sizeof *dbad));
    verify<<<264, 256>>>(p, words, 0xbeefu, dbad);
    unsigned long long kbad = 1;
    RT(cudaMemcpy(&kbad, dbad, sizeof kbad, cudaMemcpyDeviceToHost));
    RT(cudaFree(dbad));
    CHECK(kbad == 0, "cudaMemcpy-written words seen wrong by a kernel: %llu of %zu", kbad, words);
    if (!bad && !kbad) printf("PASS bytes: %zu MiB over %d helper slices written/read by kernel and cudaMemcpy\n", bytes / MiB, nd);

    CU(drv->pfn_cuMemUnmap(base, bytes));
    CU(drv->pfn_cuMemAddressFree(base, bytes));
    for (int d = 0; d < nd; d++) CU(drv->pfn_cuMemRelease(h[d]));
    ld_backend_mlopart.shutdown(0);

    /* The helper's MPS server goes away asynchronously: poll for the baseline. */
    size_t free1 = 0;
    long long delta = 0;
    for (int i = 0; i < 100; i++) {
        RT(cudaMemGetInfo(&free1, &total));
        delta = (long long)free0 - (long long)free1;
        if (delta <= (long long)(2 * MiB)) break;
        usleep(50000);
    }
    CHECK(delta <= (long long)(2 * MiB), "device memory not back to baseline: %lld bytes still used", delta);
    if (delta <= (long long)(2 * MiB)) printf("PASS memory: back to baseline (delta %lld bytes)\n", delta);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = NULL;
    size_t slice = 64 * MiB;
    int dev = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        else if (!strcmp(argv[i], "--slice-mib") && i + 1 < argc) slice = (size_t)atol(argv[++i]) * MiB;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) dev = atoi(argv[++i]);
        else if (!mode && (!strcmp(argv[i], "decline") || !strcmp(argv[i], "single") || !strcmp(argv[i], "crash"))) mode = argv[i];
        else { fprintf(stderr, "mlopart_gpu: bad argument '%s'\n", argv[i]); usage(stderr); return 2; }
    }
    if (!mode || slice == 0 || slice % (2 * MiB)) { usage(stderr); return 2; }
    if (strcmp(mode, "decline") != 0) setenv("LDSHIM_MLOPART_TEST_SINGLE", "1", 1);
    else unsetenv("LDSHIM_MLOPART_TEST_SINGLE");
    ld_log_init();
    RT(cudaSetDevice(dev));
    RT(cudaFree(0));
    size_t free0 = 0, total = 0;
    RT(cudaMemGetInfo(&free0, &total));
    const ld_driver_t *drv = ld_driver();
    if (!drv) { printf("FAIL: cannot load libcuda.so.1\n"); return 1; }
    char why[256] = "";
    int ok = ld_backend_mlopart.available(drv, dev, 2, why, sizeof why);
    if (!strcmp(mode, "decline")) {
        if (ok != 0) {
            printf("PASS decline: %s\n", why);
            CHECK(strstr(why, "device(s)") != NULL, "declined, but not because of the device count: %s", why);
            ld_backend_mlopart.shutdown(0);
            return g_fail;
        }
        printf("NOTE: MLOPart splits this GPU (no decline): running the full cycle\n");
    } else if (ok != 0) {
        printf("FAIL: available() in test-single mode: %s\n", why);
        ld_backend_mlopart.shutdown(0);
        return 1;
    }
    if (!strcmp(mode, "crash")) {
        int rc = crash(drv, dev, slice);
        return rc ? rc : g_fail;
    }
    if (cycle(drv, dev, slice, free0)) { ld_backend_mlopart.shutdown(0); return 1; }
    return g_fail;
}
