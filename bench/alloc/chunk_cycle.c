/* chunk_cycle.c — the create-to-free cycle of one localized slice, by bytes per physical handle.
 *
 * Run under libldshim with bench/alloc/chunk.policy (every size tagged, one slice in domain 0,
 * no pool) and LDSHIM_CHUNK=slice (one handle per slice) or a size (handles of that size,
 * mapped back to back): each cycle is cuMemAlloc_v2 + cuMemFree_v2, which the shim turns into
 * reserve, create x N, map x N, set access, unmap x N, release x N, free VA. Per size, one row:
 *   row chunk <LDSHIM_CHUNK> <bytes> <iters> <wall_p50_us> <sim_p50_us|-> <handles>
 * wall: host CLOCK_MONOTONIC around the two calls. sim: on the fake driver (tests/fake), the
 * simulated cost its model of the study's Tables 6-7 charged the cycle ("-" on a real driver).
 * Exit 0; 1 when an allocation was not the shim's; 2 on a usage or CUDA error. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shim/ldshim.h"

#define MiB ((uint64_t)1 << 20)
enum { kMaxIters = 10000, kWarmup = 2 };

static const uint64_t kSizes[] = {2 * MiB, 4 * MiB, 16 * MiB, 32 * MiB, 34 * MiB, 64 * MiB, 128 * MiB,
                                  256 * MiB, 512 * MiB, 1024 * MiB};

#define CKD(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { \
    fprintf(stderr, "chunk_cycle: driver error %d at line %d: %s\n", (int)r_, __LINE__, #call); exit(2); } } while (0)

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 20;
    uint64_t max = argc > 2 ? strtoull(argv[2], NULL, 10) * MiB : 1024 * MiB;
    if (iters < 1 || iters > kMaxIters || max < 2 * MiB) {
        fprintf(stderr, "usage: chunk_cycle [ITERS 1..%d] [MAX_MIB >= 2]\n", kMaxIters);
        return 2;
    }
    typedef int (*pinfo_fn)(uint64_t, ldshim_ptr_info_t *);
    pinfo_fn pinfo = (pinfo_fn)dlsym(RTLD_DEFAULT, "ldshim_pointer_info");
    if (!pinfo) { fprintf(stderr, "chunk_cycle: needs libldshim.so preloaded\n"); return 2; }
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    unsigned long long (*sim)(void) = cuda ? (unsigned long long (*)(void))dlsym(cuda, "fakecuda_sim_ns") : NULL;
    const char *chunk = getenv("LDSHIM_CHUNK");
    uint64_t cb = 0;
    if (chunk && strcmp(chunk, "slice")) cb = strtoull(chunk, NULL, 10) * (strstr(chunk, "MiB") ? MiB : 1);

    CUcontext ctx;
    CKD(cuInit(0));
    CKD(cuDevicePrimaryCtxRetain(&ctx, 0));
    CKD(cuCtxSetCurrent(ctx));
    static double wall[kMaxIters], simv[kMaxIters];
    int bad = 0;
    for (size_t s = 0; s < sizeof kSizes / sizeof *kSizes && kSizes[s] <= max; s++) {
        uint64_t bytes = kSizes[s];
        for (int i = -kWarmup; i < iters; i++) {
            CUdeviceptr p = 0;
            unsigned long long s0 = sim ? sim() : 0;
            double t0 = now_us();
            CKD(cuMemAlloc_v2(&p, bytes));
            ldshim_ptr_info_t in;
            int mine = pinfo(p, &in) == 0;
            CKD(cuMemFree_v2(p));
            double t1 = now_us();
            if (!mine) bad = 1;
            if (i >= 0) {
                wall[i] = t1 - t0;
                simv[i] = sim ? (double)(sim() - s0) / 1e3 : 0;
            }
        }
        unsigned long long handles = cb && cb < bytes ? (bytes + cb - 1) / cb : 1;
        printf("row\tchunk\t%s\t%llu\t%d\t%.1f\t", chunk ? chunk : "default", (unsigned long long)bytes, iters,
               median(wall, iters));
        if (sim) printf("%.1f", median(simv, iters));
        else printf("-");
        printf("\t%llu%s\n", handles, bad ? "\tINVALID:not-tagged" : "");
        fflush(stdout);
    }
    CKD(cuDevicePrimaryCtxRelease_v2(0));
    return bad;
}
