/* bench_alloc.c — allocation micro-benchmark for libldshim (bench/alloc/run.sh drives it).
 *
 * One mode per process, because the shim is either preloaded or not:
 *   info      GPU name, driver and runtime versions, shim version (if preloaded)
 *   untagged  cudaMalloc+cudaFree at sizes no rule tags (run with and without the shim)
 *   malloc    cudaMalloc+cudaFree at the tagged sizes, without the shim (stock reference)
 *   vmm       the plain 7-call VMM cycle by hand (reserve, create, map, set access, unmap,
 *             release, free VA) with 1 handle, and with 2 handles of half size as the shim makes
 *   tagged    cudaMalloc+cudaFree under the shim, policy tags the size, pool = 0 (cold cycle)
 *   pool      same with the pool on: after one warm-up cycle every cudaMalloc is a pool hit
 *   inproc    untagged cuMemAlloc_v2+cuMemFree_v2 in ONE process under the shim: libcuda's own
 *             entry points (ldshim_real_driver_entry) against the shim's, in alternating
 *             batches, so process-to-process noise cancels; rows real, shim and the median of
 *             the paired differences (shim batch minus the real batch beside it)
 * Each measured row is one tab-separated line on stdout:
 *   row <mode> <variant> <bytes> <n> <p50_us> <p90_us> <note>
 * Times are host wall-clock (CLOCK_MONOTONIC) around the API calls; cudaFree synchronizes.
 * Exit 0, 1 when a row is invalid (e.g. a "tagged" buffer was not the shim's), 2 usage/CUDA error.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shim/ldshim.h"

#define KiB ((uint64_t)1024)
#define MiB (KiB * 1024)
#define GiB (MiB * 1024)

enum { kMaxSizes = 16, kWarmup = 3 };

static const uint64_t kUntaggedSizes[] = {4 * KiB, 1 * MiB, 64 * MiB};
static const uint64_t kTaggedSizes[] = {2 * MiB, 32 * MiB, 64 * MiB, 512 * MiB, 1 * GiB};

typedef int (*pinfo_fn)(uint64_t, ldshim_ptr_info_t *);
typedef void (*stats_fn)(ldshim_stats_t *);
typedef const char *(*version_fn)(void);

static int g_invalid;

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "bench_alloc: CUDA error %s (%s) at line %d: %s\n", cudaGetErrorName(e_), \
            cudaGetErrorString(e_), __LINE__, #call); exit(2); } } while (0)
#define CKD(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { const char *n_ = "?"; \
    cuGetErrorName(r_, &n_); fprintf(stderr, "bench_alloc: driver error %s at line %d: %s\n", \
            n_, __LINE__, #call); exit(2); } } while (0)

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// Nearest-rank percentile of n samples (sorts in place).
static double percentile(double *v, int n, double q) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int k = (int)(q * n + 0.999999) - 1;
    if (k < 0) k = 0;
    if (k >= n) k = n - 1;
    return v[k];
}

static void emit(const char *mode, const char *variant, uint64_t bytes, double *v, int n, const char *note) {
    double p50 = percentile(v, n, 0.5), p90 = percentile(v, n, 0.9);
    printf("row\t%s\t%s\t%" PRIu64 "\t%d\t%.2f\t%.2f\t%s\n", mode, variant, bytes, n, p50, p90,
           note && *note ? note : "-");
    fflush(stdout);
}

static void usage(FILE *f) {
    fprintf(f,
        "usage: bench_alloc --mode info|untagged|malloc|vmm|tagged|pool|inproc [--iters N] [--sizes LIST]\n"
        "Allocation micro-benchmark for libldshim; bench/alloc/run.sh runs every mode and\n"
        "writes the table. Rows on stdout: row MODE VARIANT BYTES N P50_US P90_US NOTE.\n"
        "  --iters N     measured iterations per size after %d warm-up ones (default 50;\n"
        "                untagged default 1000, 300 at 64 MiB)\n"
        "  --sizes LIST  comma list of sizes with K/M/G suffix (default: untagged 4K,1M,64M;\n"
        "                others 2M,32M,64M,512M,1G)\n"
        "Modes tagged and pool need LD_PRELOAD=libldshim.so and a policy tagging the sizes\n"
        "(bench/alloc/cold.policy, bench/alloc/pool.policy); untagged needs one that does not.\n",
        kWarmup);
}

static int parse_sizes(const char *s, uint64_t *out) {
    int n = 0;
    while (*s) {
        char *end;
        unsigned long long v = strtoull(s, &end, 10);
        if (end == s || n == kMaxSizes) return -1;
        uint64_t m = 1;
        if (*end == 'K' || *end == 'k') { m = KiB; end++; }
        else if (*end == 'M' || *end == 'm') { m = MiB; end++; }
        else if (*end == 'G' || *end == 'g') { m = GiB; end++; }
        if (v == 0 || v > (uint64_t)64 * GiB / m) return -1;
        out[n++] = v * m;
        if (*end == ',') end++;
        else if (*end) return -1;
        s = end;
    }
    return n;
}

static void size_name(uint64_t b, char *buf, size_t n) {
    if (b % GiB == 0) snprintf(buf, n, "%" PRIu64 " GiB", b / GiB);
    else if (b % MiB == 0) snprintf(buf, n, "%" PRIu64 " MiB", b / MiB);
    else if (b % KiB == 0) snprintf(buf, n, "%" PRIu64 " KiB", b / KiB);
    else snprintf(buf, n, "%" PRIu64 " B", b);
}

// cudaMalloc + cudaFree pairs. `expect`: 0 = must not be the shim's, 1 = must be, -1 = don't care.
static void bench_malloc(const char *mode, uint64_t size, int iters, pinfo_fn pinfo, int expect) {
    double *t = calloc((size_t)iters, sizeof *t);
    if (!t) { fprintf(stderr, "bench_alloc: out of host memory\n"); exit(2); }
    char note[96] = "";
    int wrong = 0, slices = 0;
    for (int i = -kWarmup; i < iters; i++) {
        void *p = NULL;
        double t0 = now_us();
        CK(cudaMalloc(&p, size));
        CK(cudaFree(p));
        double t1 = now_us();
        if (i >= 0) t[i] = t1 - t0;
        if (i == -kWarmup && pinfo && expect >= 0) {
            // ownership checked on a separate allocation so the lookup is not in a timed cycle
            CK(cudaMalloc(&p, size));
            ldshim_ptr_info_t info;
            int mine = pinfo((uint64_t)(uintptr_t)p, &info) == 0;
            if (mine) slices = info.num_domains;
            wrong = mine != expect;
            CK(cudaFree(p));
        }
    }
    if (wrong) {
        snprintf(note, sizeof note, "INVALID:%s", expect ? "not-tagged" : "tagged");
        g_invalid = 1;
    } else if (slices) {
        snprintf(note, sizeof note, "slices=%d", slices);
    }
    emit(mode, "cycle", size, t, iters, note);
    free(t);
}

// The plain VMM cycle by hand, with `handles` physical handles of round_up(size/handles, gran).
static void bench_vmm(uint64_t size, int handles, int iters) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t gran = 0;
    CKD(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    uint64_t part = (size / (uint64_t)handles + gran - 1) / gran * gran;
    uint64_t total = part * (uint64_t)handles;
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof acc);
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    double *t = calloc((size_t)iters, sizeof *t);
    if (!t) { fprintf(stderr, "bench_alloc: out of host memory\n"); exit(2); }
    for (int i = -kWarmup; i < iters; i++) {
        CUdeviceptr va = 0;
        CUmemGenericAllocationHandle h[2] = {0, 0};
        double t0 = now_us();
        CKD(cuMemAddressReserve(&va, total, gran, 0, 0));
        for (int k = 0; k < handles; k++) {
            CKD(cuMemCreate(&h[k], part, &prop, 0));
            CKD(cuMemMap(va + part * (uint64_t)k, part, 0, h[k], 0));
        }
        CKD(cuMemSetAccess(va, total, &acc, 1));
        CKD(cuMemUnmap(va, total));
        for (int k = 0; k < handles; k++) CKD(cuMemRelease(h[k]));
        CKD(cuMemAddressFree(va, total));
        double t1 = now_us();
        if (i >= 0) t[i] = t1 - t0;
    }
    char note[64];
    snprintf(note, sizeof note, "handle=%" PRIu64, part);
    emit("vmm", handles == 1 ? "1handle" : "2handles", size, t, iters, note);
    free(t);
}

// Pool re-allocation: one warm-up cycle fills the pool, then malloc and free are timed apart.
static void bench_pool(uint64_t size, int iters, pinfo_fn pinfo, stats_fn stats) {
    double *tm = calloc((size_t)iters, sizeof *tm), *tf = calloc((size_t)iters, sizeof *tf),
           *tc = calloc((size_t)iters, sizeof *tc);
    if (!tm || !tf || !tc) { fprintf(stderr, "bench_alloc: out of host memory\n"); exit(2); }
    ldshim_stats_t s0, s1;
    memset(&s0, 0, sizeof s0);
    memset(&s1, 0, sizeof s1);
    int tagged = 1;
    for (int i = -kWarmup; i < iters; i++) {
        void *p = NULL;
        if (i == 0) stats(&s0);
        double t0 = now_us();
        CK(cudaMalloc(&p, size));
        double t1 = now_us();
        CK(cudaFree(p));
        double t2 = now_us();
        if (i >= 0) { tm[i] = t1 - t0; tf[i] = t2 - t1; tc[i] = t2 - t0; }
        if (i == -1) {
            ldshim_ptr_info_t info;
            CK(cudaMalloc(&p, size));
            tagged = pinfo((uint64_t)(uintptr_t)p, &info) == 0;
            CK(cudaFree(p));
        }
    }
    stats(&s1);
    uint64_t hits = s1.pool_hits - s0.pool_hits;
    char note[96];
    if (!tagged || hits < (uint64_t)iters) {
        snprintf(note, sizeof note, "INVALID:%s,hits=%" PRIu64, tagged ? "pool-misses" : "not-tagged", hits);
        g_invalid = 1;
    } else {
        snprintf(note, sizeof note, "hits=%" PRIu64, hits);
    }
    emit("pool", "malloc", size, tm, iters, note);
    emit("pool", "free", size, tf, iters, note);
    emit("pool", "cycle", size, tc, iters, note);
    free(tm);
    free(tf);
    free(tc);
}

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef void *(*real_fn)(const char *);

/* Median time of one alloc+free pair over a batch of `b`. */
static double batch_us(alloc_fn a, free_fn f, uint64_t size, int b) {
    double *t = malloc((size_t)b * sizeof *t);
    if (!t) exit(2);
    for (int i = 0; i < b; i++) {
        CUdeviceptr p;
        double t0 = now_us();
        CKD(a(&p, size));
        CKD(f(p));
        t[i] = now_us() - t0;
    }
    double m = percentile(t, b, 0.5);
    free(t);
    return m;
}

static void bench_inproc(uint64_t size, int rounds, real_fn real) {
    if (rounds < 1 || rounds > 100000) rounds = 200;
    alloc_fn ra = (alloc_fn)real("cuMemAlloc_v2"), sa = (alloc_fn)dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
    free_fn rf = (free_fn)real("cuMemFree_v2"), sf = (free_fn)dlsym(RTLD_DEFAULT, "cuMemFree_v2");
    if (!ra || !rf || !sa || !sf || ra == sa) {
        fprintf(stderr, "bench_alloc: inproc: cannot resolve both the driver's and the shim's entry points\n");
        exit(2);
    }
    enum { kBatch = 25 };
    double *r = malloc((size_t)rounds * sizeof *r), *s = malloc((size_t)rounds * sizeof *s),
           *d = malloc((size_t)rounds * sizeof *d);
    if (!r || !s || !d) exit(2);
    batch_us(ra, rf, size, kBatch);      /* warm both paths */
    batch_us(sa, sf, size, kBatch);
    for (int k = 0; k < rounds; k++) {   /* ABBA: cancels drift inside the process */
        if (k % 2 == 0) { r[k] = batch_us(ra, rf, size, kBatch); s[k] = batch_us(sa, sf, size, kBatch); }
        else { s[k] = batch_us(sa, sf, size, kBatch); r[k] = batch_us(ra, rf, size, kBatch); }
        d[k] = s[k] - r[k];
    }
    emit("inproc", "real", size, r, rounds, "driver entry, batch medians");
    emit("inproc", "shim", size, s, rounds, "shim entry, batch medians");
    double *dd = malloc((size_t)rounds * sizeof *dd);
    if (!dd) exit(2);
    for (int k = 0; k < rounds; k++) dd[k] = d[k];
    double p50 = percentile(dd, rounds, 0.5), p10 = percentile(dd, rounds, 0.1), p90 = percentile(dd, rounds, 0.9);
    printf("row\tinproc\tadded\t%" PRIu64 "\t%d\t%.2f\t%.2f\tpaired shim-real; p10 %.2f\n", size, rounds, p50, p90, p10);
    free(r); free(s); free(d); free(dd);
}

int main(int argc, char **argv) {
    const char *mode = NULL;
    int iters = 0, nsizes = 0;
    uint64_t sizes[kMaxSizes];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--mode") && v) { mode = v; i++; }
        else if (!strcmp(a, "--iters") && v) {
            iters = atoi(v); i++;
            if (iters < 1 || iters > 1000000) { fprintf(stderr, "bench_alloc: --iters must be 1..1000000\n"); return 2; }
        } else if (!strcmp(a, "--sizes") && v) {
            nsizes = parse_sizes(v, sizes); i++;
            if (nsizes <= 0) {
                fprintf(stderr, "bench_alloc: bad --sizes '%s' (e.g. 4K,1M,64M; at most %d, each <= 64G)\n", v, kMaxSizes);
                return 2;
            }
        } else { fprintf(stderr, "bench_alloc: unknown or incomplete argument '%s' (try --help)\n", a); return 2; }
    }
    static const char *const modes[] = {"info", "untagged", "malloc", "vmm", "tagged", "pool", "inproc"};
    int known = 0;
    for (size_t k = 0; mode && k < sizeof modes / sizeof *modes; k++) known |= !strcmp(mode, modes[k]);
    if (!known) { fprintf(stderr, "bench_alloc: --mode is required: info|untagged|malloc|vmm|tagged|pool|inproc\n"); return 2; }

    pinfo_fn pinfo = (pinfo_fn)dlsym(RTLD_DEFAULT, "ldshim_pointer_info");
    stats_fn stats = (stats_fn)dlsym(RTLD_DEFAULT, "ldshim_get_stats");
    version_fn version = (version_fn)dlsym(RTLD_DEFAULT, "ldshim_version");
    int need_shim = !strcmp(mode, "tagged") || !strcmp(mode, "pool") || !strcmp(mode, "inproc");
    if (need_shim && (!pinfo || !stats)) {
        fprintf(stderr, "bench_alloc: --mode %s needs libldshim.so preloaded (LD_PRELOAD)\n", mode);
        return 2;
    }
    if ((!strcmp(mode, "malloc") || !strcmp(mode, "vmm")) && pinfo)
        fprintf(stderr, "bench_alloc: note: --mode %s is meant to run without the shim\n", mode);

    cudaError_t e0 = cudaSetDevice(0);
    if (e0 == cudaSuccess) e0 = cudaFree(0);
    if (e0 != cudaSuccess) {
        fprintf(stderr, "bench_alloc: no usable CUDA device: %s (%s)\n", cudaGetErrorName(e0), cudaGetErrorString(e0));
        return 2;
    }

    if (!strcmp(mode, "info")) {
        struct cudaDeviceProp prop;
        int drv = 0, rt = 0;
        CK(cudaGetDeviceProperties(&prop, 0));
        CK(cudaDriverGetVersion(&drv));
        CK(cudaRuntimeGetVersion(&rt));
        printf("info\tgpu\t%s\n", prop.name);
        printf("info\tsms\t%d\n", prop.multiProcessorCount);
        printf("info\tmemory_mib\t%zu\n", prop.totalGlobalMem / (size_t)MiB);
        printf("info\tcuda_driver_api\t%d.%d\n", drv / 1000, drv % 1000 / 10);
        printf("info\tcuda_runtime\t%d.%d\n", rt / 1000, rt % 1000 / 10);
        printf("info\tshim\t%s\n", version ? version() : "not loaded");
        return 0;
    }

    int untagged = !strcmp(mode, "untagged") || !strcmp(mode, "inproc");
    if (nsizes == 0) {
        const uint64_t *d = untagged ? kUntaggedSizes : kTaggedSizes;
        nsizes = untagged ? 3 : 5;
        memcpy(sizes, d, (size_t)nsizes * sizeof *d);
    }
    for (int s = 0; s < nsizes; s++) {
        char name[32];
        size_name(sizes[s], name, sizeof name);
        int n = iters ? iters : untagged ? (sizes[s] >= 64 * MiB ? 300 : 1000) : 50;
        fprintf(stderr, "bench_alloc: %s %s x %d\n", mode, name, n);
        if (!strcmp(mode, "inproc")) {
            real_fn real = (real_fn)dlsym(RTLD_DEFAULT, "ldshim_real_driver_entry");
            if (!real) { fprintf(stderr, "bench_alloc: inproc needs ldshim_real_driver_entry\n"); return 2; }
            bench_inproc(sizes[s], iters ? iters : 200, real);
        } else if (untagged) bench_malloc("untagged", sizes[s], n, pinfo, 0);
        else if (!strcmp(mode, "malloc")) bench_malloc("malloc", sizes[s], n, NULL, -1);
        else if (!strcmp(mode, "tagged")) bench_malloc("tagged", sizes[s], n, pinfo, 1);
        else if (!strcmp(mode, "pool")) bench_pool(sizes[s], n, pinfo, stats);
        else { bench_vmm(sizes[s], 1, n); bench_vmm(sizes[s], 2, n); }
    }
    return g_invalid ? 1 : 0;
}
