/* t_stress.c — reliability programs run under the shim (tests/fake/cases_reliability.py):
 *
 *   stress THREADS ITERS TAGGED UNTAGGED  threads allocating (tagged and untagged sizes, each
 *                        a size or a comma list of sizes),
 *                        filling, querying ranges and pointer attributes, launching,
 *                        synchronizing, freeing their own and each other's memory; at the
 *                        end every handle and byte is accounted for
 *   workload TAGGED UNTAGGED  one fixed sequence of every call the shim wraps, each step's
 *                        result printed as s<NN>_<api>=<CUresult> (a careful program: a
 *                        failed free is retried once), for fault injection
 *   huge SIZE            one cuMemAlloc_v2 of SIZE (say 2^64 - 2^21): its result code
 *   chdir-alloc DIR SIZE chdir(DIR), then the first CUDA call: an allocation of SIZE
 *   before-cuda SIZE     print before=1 (flushed), then allocate SIZE, print after=1
 *   first-call THREADS SIZE  THREADS threads make their first shim call at the same moment
 *
 * The same source builds against the real driver for the GPU (-DT_REAL_CUDA,
 * tests/gpu/stress/stress.mk): the kernel is then PTX, checks of the fake's live objects
 * become a check of cuMemGetInfo. Every path frees what it allocated.
 */
#include "shim/cuda_compat.h"
#include "tests/fake/t_common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

static const char *usage =
    "usage: t_stress CASE [ARGS]   (sizes like 8MiB)\n"
    "  stress THREADS ITERS TAGGED UNTAGGED   (sizes: one or a comma list; ITERS: per thread, or Ns: seconds)\n"
    "  workload TAGGED UNTAGGED\n"
    "  huge SIZE\n"
    "  chdir-alloc DIR SIZE\n"
    "  before-cuda SIZE\n"
    "  first-call THREADS SIZE\n";

#ifdef T_REAL_CUDA
/* ld_stress_touch(const unsigned char *p, unsigned n): every thread reads bytes of p, writes
 * nothing (so a host-side pattern check stays valid); an unmapped p faults the context. */
static const char kImage[] =
    ".version 7.0\n.target sm_70\n.address_size 64\n"
    ".visible .entry ld_stress_touch(.param .u64 p, .param .u32 n)\n{\n"
    "  .reg .pred %p<2>; .reg .b32 %r<4>; .reg .b64 %rd<4>; .reg .b16 %rs<2>;\n"
    "  ld.param.u64 %rd1, [p]; ld.param.u32 %r1, [n]; mov.u32 %r2, %tid.x;\n"
    "  setp.ge.u32 %p1, %r2, %r1; @%p1 bra DONE;\n"
    "  cvta.to.global.u64 %rd2, %rd1; cvt.u64.u32 %rd3, %r2; add.s64 %rd2, %rd2, %rd3;\n"
    "  ld.global.volatile.u8 %rs1, [%rd2];\nDONE:\n  ret;\n}\n";
#define T_FUNC "ld_stress_touch"
#else
static const char kImage[] = "FAKEMOD v1 globals=stress_global:4096 functions=ld_stress_touch";
#define T_FUNC "ld_stress_touch"
#endif

/* ---- what the shim and the fake can tell (both optional) ---------------------------- */

typedef void (*stats_fn)(ldshim_stats_t *);
typedef uint64_t (*trim_fn)(void);
typedef void (*counts_fn)(int out[5]);

static void final_accounting(size_t free_before) {
    stats_fn stats = (stats_fn)dlsym(RTLD_DEFAULT, "ldshim_get_stats");
    trim_fn trim = (trim_fn)dlsym(RTLD_DEFAULT, "ldshim_pool_trim");
    if (stats) {
        ldshim_stats_t s;
        stats(&s);
        printf("shim_live_ranges=%llu\nshim_live_bytes=%llu\n", (unsigned long long)s.live_ranges,
               (unsigned long long)s.live_bytes);
        printf("shim_tagged_allocs=%llu\nshim_tagged_frees=%llu\n", (unsigned long long)s.tagged_allocs,
               (unsigned long long)s.tagged_frees);
        CHECK(s.live_ranges == 0 && s.live_bytes == 0);
        CHECK(s.tagged_allocs == s.tagged_frees);
        if (trim) trim();
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    counts_fn counts = h ? (counts_fn)dlsym(h, "fakecuda_counts") : NULL;
    if (counts) {
        int c[5];
        counts(c);
        printf("fake_live=%d,%d,%d,%d,%d\n", c[0], c[1], c[2], c[3], c[4]);
        CHECK(c[0] == 0 && c[1] == 0 && c[2] == 0 && c[3] == 0 && c[4] == 0);
    } else {
        size_t fr = 0, tot = 0;
        CHECK_RC(cuMemGetInfo_v2(&fr, &tot), CUDA_SUCCESS);
        long long lost = (long long)free_before - (long long)fr;
        printf("free_lost_mib=%lld\n", lost > 0 ? lost >> 20 : 0);
        CHECK(lost < (64ll << 20));   /* the driver's own bookkeeping moves by a few MiB */
    }
}

static CUcontext g_ctx;
static CUmodule g_mod;
static CUfunction g_fn;

static void setup(void) {
    CHECK_RC(cuInit(0), CUDA_SUCCESS);
    CUdevice d;
    CHECK_RC(cuDeviceGet(&d, 0), CUDA_SUCCESS);
    CHECK_RC(cuDevicePrimaryCtxRetain(&g_ctx, d), CUDA_SUCCESS);
    CHECK_RC(cuCtxSetCurrent(g_ctx), CUDA_SUCCESS);
}

static void teardown(void) {
    CHECK_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
}

/* ---- stress ------------------------------------------------------------------------- */

typedef struct { CUdeviceptr p; size_t size; unsigned char pat; } blk_t;

/* Allocations handed from one thread to another, which checks and frees them. */
static pthread_mutex_t g_orph_mu = PTHREAD_MUTEX_INITIALIZER;
static blk_t g_orph[256];
static int g_norph;

static size_t g_tagged[8], g_untagged[8];
static int g_ntagged, g_nuntagged;
static int g_iters;
static double g_deadline;      /* ITERS given as "<N>s": run for N seconds instead */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}
static pthread_barrier_t g_bar;
static atomic_long g_ops, g_allocs, g_frees, g_queries, g_launches, g_handoffs;
static atomic_int g_launch_codes[1024];   /* histogram of launch results (< 1024) */

static uint64_t rnd(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }

/* The pattern covers the first and the last kWindow bytes (the whole of a small block):
 * enough to catch memory that moved or was lost, cheap enough for thousands of blocks. */
enum { kWindow = 64 << 10 };

static void fill(const blk_t *b) {
    if (b->size <= 2 * kWindow) {
        CHECK_RC(cuMemsetD8_v2(b->p, b->pat, b->size), CUDA_SUCCESS);
        return;
    }
    CHECK_RC(cuMemsetD8_v2(b->p, b->pat, kWindow), CUDA_SUCCESS);
    CHECK_RC(cuMemsetD8_v2(b->p + b->size - kWindow, b->pat, kWindow), CUDA_SUCCESS);
}

static void check_pattern(const blk_t *b, uint64_t *seed) {
    unsigned char got[64];
    size_t win = b->size <= 2 * kWindow ? b->size : kWindow;
    size_t off = (size_t)(rnd(seed) % (win - sizeof got));
    if (b->size > 2 * kWindow && (rnd(seed) & 1)) off = b->size - win + off;
    CHECK_RC(cuMemcpyDtoH_v2(got, b->p + off, sizeof got), CUDA_SUCCESS);
    for (size_t i = 0; i < sizeof got; i++) CHECK(got[i] == b->pat);
}

static void free_blk(const blk_t *b, uint64_t *seed) {
    check_pattern(b, seed);
    CHECK_RC(cuMemFree_v2(b->p), CUDA_SUCCESS);
    atomic_fetch_add(&g_frees, 1);
}

static void *stress_thread(void *arg) {
    uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)((intptr_t)arg + 1);
    CHECK_RC(cuCtxSetCurrent(g_ctx), CUDA_SUCCESS);
    blk_t live[8];
    int n = 0;
    pthread_barrier_wait(&g_bar);
    for (int it = 0; g_deadline ? now_s() < g_deadline : it < g_iters; it++) {
        atomic_fetch_add(&g_ops, 1);
        unsigned op = (unsigned)(rnd(&seed) % 8);
        if (op <= 2 || n == 0) {
            if (n == 8) { free_blk(&live[0], &seed); live[0] = live[--n]; }
            blk_t b;
            b.size = rnd(&seed) & 1 ? g_tagged[rnd(&seed) % (uint64_t)g_ntagged]
                                    : g_untagged[rnd(&seed) % (uint64_t)g_nuntagged];
            b.pat = (unsigned char)(rnd(&seed) | 1);
            CHECK_RC(cuMemAlloc_v2(&b.p, b.size), CUDA_SUCCESS);
            fill(&b);
            live[n++] = b;
            atomic_fetch_add(&g_allocs, 1);
            continue;
        }
        blk_t *b = &live[rnd(&seed) % (uint64_t)n];
        CUdeviceptr inner = b->p + rnd(&seed) % b->size;
        if (op == 3) {
            CUdeviceptr base = 0;
            size_t sz = 0;
            CHECK_RC(cuMemGetAddressRange_v2(&base, &sz, inner), CUDA_SUCCESS);
            CHECK(base == b->p && sz == b->size);
            atomic_fetch_add(&g_queries, 1);
        } else if (op == 4) {
            CUdeviceptr start = 0;
            size_t sz = 0;
            CHECK_RC(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, inner), CUDA_SUCCESS);
            CHECK_RC(cuPointerGetAttribute(&sz, CU_POINTER_ATTRIBUTE_RANGE_SIZE, inner), CUDA_SUCCESS);
            CHECK(start == b->p && sz == b->size);
            CUpointer_attribute at[2] = { CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE };
            CUdeviceptr s2 = 0;
            size_t z2 = 0;
            void *data[2] = { &s2, &z2 };
            CHECK_RC(cuPointerGetAttributes(2, at, data, inner), CUDA_SUCCESS);
            CHECK(s2 == b->p && z2 == b->size);
            atomic_fetch_add(&g_queries, 1);
        } else if (op == 5) {
            unsigned len = 32;
            void *args[] = { &b->p, &len };
            CUresult r = g_fn ? cuLaunchKernel(g_fn, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL) : CUDA_ERROR_NOT_FOUND;
            atomic_fetch_add(&g_launch_codes[(unsigned)r < 1024 ? (unsigned)r : 1023], 1);
            CUresult s = cuStreamSynchronize(NULL);
            CHECK(s == CUDA_SUCCESS);
            atomic_fetch_add(&g_launches, 1);
        } else if (op == 6) {
            check_pattern(b, &seed);
        } else {
            pthread_mutex_lock(&g_orph_mu);
            int give = rnd(&seed) & 1 && g_norph < 256;
            blk_t got = {0, 0, 0};
            if (give) g_orph[g_norph++] = *b;
            else if (g_norph) got = g_orph[--g_norph];
            pthread_mutex_unlock(&g_orph_mu);
            if (give) { *b = live[--n]; atomic_fetch_add(&g_handoffs, 1); }
            else if (got.p) free_blk(&got, &seed);
        }
    }
    while (n) free_blk(&live[--n], &seed);
    return NULL;
}

/* "4MiB,8MiB,24MiB" -> sizes; each at least 128 bytes. */
static int size_list(const char *s, size_t *out, int max) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save)) {
        out[n] = t_size(t);
        CHECK(out[n] >= 128);
        n++;
    }
    CHECK(n > 0);
    return n;
}

static int case_stress(int threads, const char *iters, const char *tagged, const char *untagged) {
    char *end;
    long it = strtol(iters, &end, 10);
    CHECK(threads >= 1 && threads <= 256 && it >= 1 && (!*end || !strcmp(end, "s")));
    g_ntagged = size_list(tagged, g_tagged, 8);
    g_nuntagged = size_list(untagged, g_untagged, 8);
    setup();
    size_t fr = 0, tot = 0;
    CHECK_RC(cuMemGetInfo_v2(&fr, &tot), CUDA_SUCCESS);
    g_iters = (int)it;
    if (*end) g_deadline = now_s() + (double)it;
    CHECK_RC(cuModuleLoadData(&g_mod, kImage), CUDA_SUCCESS);
    if (cuModuleGetFunction(&g_fn, g_mod, T_FUNC) != CUDA_SUCCESS) g_fn = NULL;
    pthread_t th[256];
    CHECK(pthread_barrier_init(&g_bar, NULL, (unsigned)threads) == 0);
    for (int i = 0; i < threads; i++)
        CHECK(pthread_create(&th[i], NULL, stress_thread, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < threads; i++) CHECK(pthread_join(th[i], NULL) == 0);
    pthread_barrier_destroy(&g_bar);
    uint64_t seed = 7;
    while (g_norph) free_blk(&g_orph[--g_norph], &seed);
    CHECK_RC(cuCtxSynchronize(), CUDA_SUCCESS);
    CHECK_RC(cuModuleUnload(g_mod), CUDA_SUCCESS);
    CHECK(atomic_load(&g_allocs) == atomic_load(&g_frees));
    int codes = 0, top = -1;
    for (int c = 0; c < 1024; c++)
        if (atomic_load(&g_launch_codes[c])) { codes++; if (top < 0 || g_launch_codes[c] > g_launch_codes[top]) top = c; }
    printf("threads=%d\nops=%ld\nallocs=%ld\nfrees=%ld\nqueries=%ld\nlaunches=%ld\nhandoffs=%ld\n", threads,
           atomic_load(&g_ops), atomic_load(&g_allocs), atomic_load(&g_frees), atomic_load(&g_queries),
           atomic_load(&g_launches), atomic_load(&g_handoffs));
    printf("launch_rc=%d\nlaunch_codes=%d\n", top, codes);
    final_accounting(fr);
    teardown();
    return 0;
}

/* ---- workload (fault injection) ------------------------------------------------------ */

/* Each call site prints "<site>.<api>=<CUresult>" under a name fixed by its place in the
 * program, so the run with the shim and the run without it compare site by site however
 * an injected failure shifted the driver's call numbers. */
static int g_steps;
static CUresult step(const char *site, int buf, const char *api, CUresult r) {
    if (buf >= 0) printf("b%d_%s.%s=%d\n", buf, site, api, (int)r);
    else printf("%s.%s=%d\n", site, api, (int)r);
    g_steps++;
    return r;
}
#define STEP(site, buf, api, call) step(site, buf, #api, (call))

/* Free with one retry: what a program that handles errors does; nothing it owned leaks
 * unless the driver refuses twice. */
static void free_retry(int buf, CUdeviceptr p) {
    if (STEP("free", buf, cuMemFree_v2, cuMemFree_v2(p)) != CUDA_SUCCESS) STEP("free_again", buf, cuMemFree_v2, cuMemFree_v2(p));
}

static void one_buffer(int buf, size_t size, unsigned char pat, CUfunction fn, CUdeviceptr *keep) {
    CUdeviceptr p = 0;
    if (STEP("alloc", buf, cuMemAlloc_v2, cuMemAlloc_v2(&p, size)) != CUDA_SUCCESS) return;
    if (STEP("memset", buf, cuMemsetD8_v2, cuMemsetD8_v2(p, pat, size)) == CUDA_SUCCESS) {
        unsigned char b[256];
        int ok = 1, any = 0;
        size_t offs[3] = { 0, size / 2 - 128, size - sizeof b };
        static const char *const sites[3] = { "copy_first", "copy_middle", "copy_last" };
        for (int i = 0; i < 3; i++) {
            if (STEP(sites[i], buf, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2(b, p + offs[i], sizeof b)) != CUDA_SUCCESS) continue;
            any = 1;
            for (size_t k = 0; k < sizeof b; k++) ok &= b[k] == pat;
        }
        if (any) printf("b%d_data=%s\n", buf, ok ? "ok" : "bad");
    }
    CUdeviceptr base = 0;
    size_t sz = 0;
    if (STEP("range", buf, cuMemGetAddressRange_v2, cuMemGetAddressRange_v2(&base, &sz, p + size / 2 + 1)) == CUDA_SUCCESS)
        printf("b%d_range_ok=%d\n", buf, base == p && sz == size);
    if (STEP("attr", buf, cuPointerGetAttribute, cuPointerGetAttribute(&sz, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + size - 1)) ==
        CUDA_SUCCESS)
        printf("b%d_attr_ok=%d\n", buf, sz == size);
    if (fn) {
        unsigned len = 32;
        void *args[] = { &p, &len };
        STEP("launch", buf, cuLaunchKernel, cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
        STEP("sync", buf, cuStreamSynchronize, cuStreamSynchronize(NULL));
    }
    if (keep) *keep = p;
    else free_retry(buf, p);
}

static int case_workload(size_t tagged, size_t untagged) {
    int ctx_ok = 0;
    CUdevice d = 0;
    CUcontext ctx = NULL;
    if (STEP("init", -1, cuInit, cuInit(0)) == CUDA_SUCCESS && STEP("device", -1, cuDeviceGet, cuDeviceGet(&d, 0)) == CUDA_SUCCESS &&
        STEP("retain", -1, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain(&ctx, d)) == CUDA_SUCCESS)
        ctx_ok = STEP("set_current", -1, cuCtxSetCurrent, cuCtxSetCurrent(ctx)) == CUDA_SUCCESS ? 2 : 1;
    if (ctx_ok == 2) {
        CUmodule mod = NULL;
        CUfunction fn = NULL;
        if (STEP("module_load", -1, cuModuleLoadData, cuModuleLoadData(&mod, kImage)) != CUDA_SUCCESS) mod = NULL;
        else if (STEP("get_function", -1, cuModuleGetFunction, cuModuleGetFunction(&fn, mod, T_FUNC)) != CUDA_SUCCESS)
            fn = NULL;
        CUdeviceptr kept = 0;
        one_buffer(1, tagged, 0x5a, fn, NULL);
        one_buffer(2, untagged, 0x33, fn, NULL);
        one_buffer(3, tagged, 0x71, fn, NULL);          /* the pool's range again */
        one_buffer(4, tagged * 2, 0x0f, fn, &kept);     /* held across the next two */
        one_buffer(5, untagged * 3, 0x44, fn, NULL);
        one_buffer(6, tagged, 0x27, fn, NULL);
        if (kept) free_retry(4, kept);
        STEP("ctx_sync", -1, cuCtxSynchronize, cuCtxSynchronize());
        if (mod && STEP("module_unload", -1, cuModuleUnload, cuModuleUnload(mod)) != CUDA_SUCCESS)
            STEP("module_unload_again", -1, cuModuleUnload, cuModuleUnload(mod));
    }
    if (ctx_ok && STEP("release", -1, cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease_v2(d)) != CUDA_SUCCESS)
        STEP("release_again", -1, cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease_v2(d));
    printf("steps_done=1\n");
    return 0;
}

/* ---- the smaller cases --------------------------------------------------------------- */

static int case_huge(size_t size) {
    setup();
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc_v2(&p, size);
    printf("huge_rc=%d\n", (int)r);
    if (r == CUDA_SUCCESS) CHECK_RC(cuMemFree_v2(p), CUDA_SUCCESS);
    teardown();
    return 0;
}

static int alloc_describe(size_t size) {
    setup();
    CUdeviceptr p = 0;
    CHECK_RC(cuMemAlloc_v2(&p, size), CUDA_SUCCESS);
    printf("a_shim=%d\n", t_is_shim(p, NULL));
    CHECK_RC(cuMemFree_v2(p), CUDA_SUCCESS);
    teardown();
    return 0;
}

static int case_chdir_alloc(const char *dir, size_t size) {
    CHECK(chdir(dir) == 0);
    return alloc_describe(size);
}

static int case_before_cuda(size_t size) {
    printf("before=1\n");
    fflush(stdout);
    int rc = alloc_describe(size);
    printf("after=1\n");
    return rc;
}

static size_t g_first_size;
static void *first_thread(void *arg) {
    (void)arg;
    CUcontext ctx = NULL;
    CUdeviceptr p = 0;
    pthread_barrier_wait(&g_bar);
    CHECK_RC(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);   /* every thread's first shim call */
    CHECK_RC(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    CHECK_RC(cuMemAlloc_v2(&p, g_first_size), CUDA_SUCCESS);
    CHECK_RC(cuMemFree_v2(p), CUDA_SUCCESS);
    CHECK_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    return NULL;
}

/* cuInit is not one of the shim's entries: after it, the threads reach the shim for the
 * first time at the same moment (the policy must be read once, by one of them). */
static int case_first_call(int threads, size_t size) {
    CHECK(threads >= 1 && threads <= 256);
    CHECK_RC(cuInit(0), CUDA_SUCCESS);
    g_first_size = size;
    pthread_t th[256];
    CHECK(pthread_barrier_init(&g_bar, NULL, (unsigned)threads) == 0);
    for (int i = 0; i < threads; i++) CHECK(pthread_create(&th[i], NULL, first_thread, NULL) == 0);
    for (int i = 0; i < threads; i++) CHECK(pthread_join(th[i], NULL) == 0);
    pthread_barrier_destroy(&g_bar);
    printf("first_call_threads=%d\n", threads);
    return 0;
}

int main(int argc, char **argv) {
    t_prog = "t_stress";
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *c = argv[1];
    if (!strcmp(c, "stress") && argc == 6) return case_stress(atoi(argv[2]), argv[3], argv[4], argv[5]);
    if (!strcmp(c, "workload") && argc == 4) return case_workload(t_size(argv[2]), t_size(argv[3]));
    if (!strcmp(c, "huge") && argc == 3) {
        char *end;
        unsigned long long v = strtoull(argv[2], &end, 0);
        CHECK(*end == 0);
        return case_huge((size_t)v);
    }
    if (!strcmp(c, "chdir-alloc") && argc == 4) return case_chdir_alloc(argv[2], t_size(argv[3]));
    if (!strcmp(c, "before-cuda") && argc == 3) return case_before_cuda(t_size(argv[2]));
    if (!strcmp(c, "first-call") && argc == 4) return case_first_call(atoi(argv[2]), t_size(argv[3]));
    fputs(usage, stderr);
    return 2;
}
