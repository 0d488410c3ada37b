/* t_place.c — every allocation api, where the fake driver says its memory landed, and what
 * the shim counted (tests/fake/cases_place.py). Driver API, linked with -lcuda; runs with
 * and without the shim.
 *
 *   t_place all SIZE      cuMemAlloc, cuMemCreate (mapped), cuMemAllocAsync on the default
 *                         pool, cuMemAllocFromPoolAsync on a pool of the program's own,
 *                         cuMemAllocPitch (rows of 4096 bytes), cuMemAllocManaged; each written,
 *                         read back and freed
 *   t_place pools SIZE    the default pool's settings, before the first tagged stream-ordered
 *                         allocation and after it: peer access of device 1 (needs
 *                         FAKE_CUDA_DEVICES=2), release threshold, a reuse flag, the used and
 *                         reserved bytes the default pool reports, cuMemPoolTrimTo, resetting
 *                         a high watermark
 *   t_place race N SIZE   N threads make their first stream-ordered allocation of SIZE at once
 *   t_place reset SIZE    stream-ordered allocations across cuDevicePrimaryCtxReset
 *   t_place fork SIZE     a stream-ordered allocation in the parent, then in a forked child
 *   t_place oom SIZE      a cuMemAlloc of SIZE freed (a range the shim keeps), then two
 *                         cuMemCreate of SIZE; the first may fail (FAKE_CUDA_FAIL)
 *   t_place keep SIZE     cuMemAlloc, cuMemAllocAsync (default pool) and cuMemAllocManaged of
 *                         SIZE, none freed: what the report says is live at exit
 *
 * Output: <api>_domain=<the fake's domain of the memory: -1 the device as a whole, or the
 * domains of a split range joined by ','>, <api>_shim=<1 if the shim owns the range>,
 * <api>_kind=<the call that made it: fakecuda_alloc_kind>, <api>_tagged=<1 if the shim
 * counted it as placed>; counts=<ldshim_get_stats at the end: tagged allocs, tagged frees,
 * untagged allocs, untagged frees> (with the shim). With T_COUNTS=1 every allocation must be
 * counted once, as placed or not, and its free in the same class (checked at each step: what
 * tagged_allocs - tagged_frees says is live is what the program holds).
 */
#include "tests/fake/t_common.h"
#include "tests/fake/fake_api.h"
#include "shim/cuda_compat.h"

#include <pthread.h>
#include <sys/wait.h>

/* ---- the shim's counts ------------------------------------------------------------------ */

typedef void (*stats_fn)(ldshim_stats_t *);
static stats_fn t_stats_fn(void) {
    static stats_fn fn;
    static int done;
    if (!done) { fn = (stats_fn)dlsym(RTLD_DEFAULT, "ldshim_get_stats"); done = 1; }
    return fn;
}

typedef struct { long long ta, tf, ua, uf; } counts_t;
static counts_t counts(void) {
    counts_t c = { 0, 0, 0, 0 };
    ldshim_stats_t s;
    if (!t_stats_fn()) return c;
    t_stats_fn()(&s);
    c.ta = (long long)s.tagged_allocs;
    c.tf = (long long)s.tagged_frees;
    c.ua = (long long)s.untagged_allocs;
    c.uf = (long long)s.untagged_frees;
    CHECK(c.uf <= c.ua && c.tf <= c.ta);
    return c;
}

/* T_COUNTS=1: the case expects the shim to count (not stock, not without the shim). */
static int checking(void) {
    const char *e = getenv("T_COUNTS");
    return t_stats_fn() && e && !strcmp(e, "1");
}

/* One allocation happened since `before`: it is counted exactly once, placed or not, and
 * nothing was freed. Prints <tag>_tagged; returns 1 if it was counted as placed. */
static int counted_alloc(const char *tag, counts_t before) {
    if (!checking()) return 0;
    counts_t c = counts();
    CHECK(c.tf == before.tf && c.uf == before.uf);
    CHECK((c.ta - before.ta) + (c.ua - before.ua) == 1);
    printf("%s_tagged=%lld\n", tag, c.ta - before.ta);
    return c.ta != before.ta;
}

/* One free since `before`, of an allocation counted as `tagged`. */
static void counted_free(counts_t before, int tagged) {
    if (!checking()) return;
    counts_t c = counts();
    CHECK(c.ta == before.ta && c.ua == before.ua);
    CHECK(c.tf - before.tf == (tagged ? 1 : 0) && c.uf - before.uf == (tagged ? 0 : 1));
}

static void print_counts(void) {
    if (!t_stats_fn()) return;
    counts_t c = counts();
    printf("counts=%lld,%lld,%lld,%lld\n", c.ta, c.tf, c.ua, c.uf);
}

/* ---- the fake's view -------------------------------------------------------------------- */

static int (*alloc_kind)(const void *);
static void (*pool_counts)(int out[2]);
static void place_hooks(void) {
    t_fake_init();
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(h != NULL);
    alloc_kind = (int (*)(const void *))dlsym(h, "fakecuda_alloc_kind");
    pool_counts = (void (*)(int *))dlsym(h, "fakecuda_pool_counts");
    CHECK(alloc_kind && pool_counts);
}
static int pools_live(void) {
    int c[2];
    pool_counts(c);
    return c[0];
}

static void show(const char *tag, CUdeviceptr p, size_t size) {
    ldshim_ptr_info_t in;
    if (t_is_shim(p, &in)) {
        printf("%s_shim=1\n%s_domain=", tag, tag);
        for (int d = 0; d < in.num_domains; d++)
            printf("%s%d", d ? "," : "", t_fake.domain_of((void *)(uintptr_t)(p + (uint64_t)d * in.slice)));
        printf("\n");
    } else {
        printf("%s_shim=0\n%s_domain=%d\n", tag, tag, t_fake.domain_of((void *)(uintptr_t)p));
    }
    printf("%s_kind=%d\n", tag, alloc_kind((void *)(uintptr_t)p));
    t_fill_check(p, size, 3);
}

static CUcontext start(void) {
    CHECK_RC(cuInit(0), CUDA_SUCCESS);
    CUcontext ctx;
    CHECK_RC(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    CHECK_RC(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    place_hooks();
    return ctx;
}

static CUmemoryPool pool_of(CUdeviceptr p) {
    CUmemoryPool pool = NULL;
    CHECK_RC(cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p), CUDA_SUCCESS);
    return pool;
}

/* ---- all -------------------------------------------------------------------------------- */

static int case_all(size_t size) {
    start();
    counts_t c0;
    int tg;

    CUdeviceptr a;
    c0 = counts();
    CHECK_RC(cuMemAlloc_v2(&a, size), CUDA_SUCCESS);
    tg = counted_alloc("alloc", c0);
    show("alloc", a, size);
    c0 = counts();
    CHECK_RC(cuMemFree_v2(a), CUDA_SUCCESS);
    counted_free(c0, tg);

    /* The program's own VMM handle, mapped and made accessible; its free is its release
     * (the memory lives on while mapped). */
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h;
    c0 = counts();
    CHECK_RC(cuMemCreate(&h, size, &prop, 0), CUDA_SUCCESS);
    tg = counted_alloc("vmm", c0);
    CUdeviceptr v;
    CHECK_RC(cuMemAddressReserve(&v, size, 0, 0, 0), CUDA_SUCCESS);
    CHECK_RC(cuMemMap(v, size, 0, h, 0), CUDA_SUCCESS);
    CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 }, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CHECK_RC(cuMemSetAccess(v, size, &acc, 1), CUDA_SUCCESS);
    show("vmm", v, size);
    CHECK_RC(cuMemUnmap(v, size), CUDA_SUCCESS);
    c0 = counts();
    CHECK_RC(cuMemRelease(h), CUDA_SUCCESS);
    counted_free(c0, tg);
    c0 = counts();
    CHECK_RC(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);   /* released: no second free */
    CHECK(!checking() || (counts().tf == c0.tf && counts().uf == c0.uf));
    CHECK_RC(cuMemAddressFree(v, size), CUDA_SUCCESS);

    /* Stream-ordered: the default pool (freed with cuMemFreeAsync), again (freed with
     * cuMemFree), then a pool of the program's own. */
    CUstream s;
    CHECK_RC(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUdeviceptr q;
    c0 = counts();
    CHECK_RC(cuMemAllocAsync(&q, size, s), CUDA_SUCCESS);
    tg = counted_alloc("async", c0);
    CHECK_RC(cuStreamSynchronize(s), CUDA_SUCCESS);
    show("async", q, size);
    c0 = counts();
    CHECK_RC(cuMemFreeAsync(q, s), CUDA_SUCCESS);
    counted_free(c0, tg);
    c0 = counts();
    CHECK_RC(cuMemAllocAsync(&q, size, s), CUDA_SUCCESS);
    tg = counted_alloc("async2", c0);
    CHECK_RC(cuStreamSynchronize(s), CUDA_SUCCESS);
    c0 = counts();
    CHECK_RC(cuMemFree_v2(q), CUDA_SUCCESS);
    counted_free(c0, tg);
    CUmemPoolProps pp;
    memset(&pp, 0, sizeof pp);
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pp.location.id = 0;
    CUmemoryPool pool;
    CHECK_RC(cuMemPoolCreate(&pool, &pp), CUDA_SUCCESS);
    c0 = counts();
    CHECK_RC(cuMemAllocFromPoolAsync(&q, size, pool, s), CUDA_SUCCESS);
    tg = counted_alloc("pool", c0);
    CHECK_RC(cuStreamSynchronize(s), CUDA_SUCCESS);
    show("pool", q, size);
    c0 = counts();
    CHECK_RC(cuMemFreeAsync(q, s), CUDA_SUCCESS);
    counted_free(c0, tg);
    CHECK_RC(cuMemPoolDestroy(pool), CUDA_SUCCESS);
    CHECK_RC(cuStreamDestroy_v2(s), CUDA_SUCCESS);

    /* Pitched: rows of 4096 bytes, as many as make `size`. */
    CUdeviceptr pt;
    size_t pitch = 0;
    c0 = counts();
    CHECK_RC(cuMemAllocPitch_v2(&pt, &pitch, 4096, size / 4096, 4), CUDA_SUCCESS);
    tg = counted_alloc("pitch", c0);
    CHECK(pitch >= 4096 && pitch % 512 == 0);
    printf("pitch=%zu\n", pitch);
    show("pitch", pt, pitch * (size / 4096));
    c0 = counts();
    CHECK_RC(cuMemFree_v2(pt), CUDA_SUCCESS);
    counted_free(c0, tg);

    CUdeviceptr m;
    c0 = counts();
    CHECK_RC(cuMemAllocManaged(&m, size, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    tg = counted_alloc("managed", c0);
    show("managed", m, size);
    c0 = counts();
    CHECK_RC(cuMemFree_v2(m), CUDA_SUCCESS);
    counted_free(c0, tg);

    CHECK_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    print_counts();
    return 0;
}

/* ---- pools: the shim's pool follows the default pool ------------------------------------ */

static cuuint64_t attr64(CUmemoryPool p, CUmemPool_attribute a) {
    cuuint64_t v = 0;
    CHECK_RC(cuMemPoolGetAttribute(p, a, &v), CUDA_SUCCESS);
    return v;
}
static int attr_int(CUmemoryPool p, CUmemPool_attribute a) {
    int v = -1;
    CHECK_RC(cuMemPoolGetAttribute(p, a, &v), CUDA_SUCCESS);
    return v;
}
static void set64(CUmemoryPool p, CUmemPool_attribute a, cuuint64_t v) {
    CHECK_RC(cuMemPoolSetAttribute(p, a, &v), CUDA_SUCCESS);
}
static void set_int(CUmemoryPool p, CUmemPool_attribute a, int v) {
    CHECK_RC(cuMemPoolSetAttribute(p, a, &v), CUDA_SUCCESS);
}
static void peer_access(CUmemoryPool p, CUmemAccess_flags f) {
    CUmemAccessDesc d = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1 }, .flags = f };
    CHECK_RC(cuMemPoolSetAccess(p, &d, 1), CUDA_SUCCESS);
}

static int case_pools(size_t size) {
    start();
    CUmemoryPool def;
    CHECK_RC(cuDeviceGetDefaultMemPool(&def, 0), CUDA_SUCCESS);
    CUstream s;
    CHECK_RC(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);

    /* Before the first allocation, as PyTorch's cudaMallocAsync backend sets it up. */
    set64(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, ~(cuuint64_t)0);
    set_int(def, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, 0);
    peer_access(def, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

    CUdeviceptr q;
    CHECK_RC(cuMemAllocAsync(&q, size, s), CUDA_SUCCESS);
    show("async", q, size);
    CUmemoryPool p = pool_of(q);
    printf("own_pool=%d\n", p != def);   /* 1: the memory came from a pool of the shim */
    printf("peer_before=%d\n", t_fake.access_of((void *)(uintptr_t)q, 1));
    printf("threshold_max=%d\n", attr64(p, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) == ~(cuuint64_t)0);
    printf("opportunistic=%d\n", attr_int(p, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC));

    /* After it: every change reaches the pool the memory came from. */
    peer_access(def, CU_MEM_ACCESS_FLAGS_PROT_NONE);
    printf("peer_revoked=%d\n", t_fake.access_of((void *)(uintptr_t)q, 1));
    peer_access(def, CU_MEM_ACCESS_FLAGS_PROT_READ);
    printf("peer_read=%d\n", t_fake.access_of((void *)(uintptr_t)q, 1));
    set64(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 12345);
    printf("threshold_later=%llu\n", (unsigned long long)attr64(p, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD));
    set_int(def, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, 1);
    printf("opportunistic_later=%d\n", attr_int(p, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC));
    set64(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, ~(cuuint64_t)0);

    /* What the program reads of its default pool is what a stock run shows. */
    printf("def_used=%llu\n", (unsigned long long)attr64(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT));
    CHECK_RC(cuMemFreeAsync(q, s), CUDA_SUCCESS);
    CHECK_RC(cuStreamSynchronize(s), CUDA_SUCCESS);
    printf("def_used_freed=%llu\n", (unsigned long long)attr64(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT));
    printf("def_reserved_kept=%llu\n", (unsigned long long)attr64(def, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
    printf("def_used_high=%llu\n", (unsigned long long)attr64(def, CU_MEMPOOL_ATTR_USED_MEM_HIGH));
    set64(def, CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0);
    printf("def_used_high_reset=%llu\n", (unsigned long long)attr64(def, CU_MEMPOOL_ATTR_USED_MEM_HIGH));
    CHECK_RC(cuMemPoolTrimTo(def, 0), CUDA_SUCCESS);
    printf("def_reserved_trimmed=%llu\n", (unsigned long long)attr64(def, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));

    CHECK_RC(cuStreamDestroy_v2(s), CUDA_SUCCESS);
    CHECK_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    print_counts();
    return 0;
}

/* ---- race: threads creating the shim's pool at once ------------------------------------- */

static CUcontext g_ctx;
static size_t g_size;
static pthread_barrier_t g_go;
static CUmemoryPool g_pool[64];

static void *race_main(void *arg) {
    int i = (int)(intptr_t)arg;
    CHECK_RC(cuCtxSetCurrent(g_ctx), CUDA_SUCCESS);
    CUstream s;
    CHECK_RC(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    pthread_barrier_wait(&g_go);
    CUdeviceptr q;
    CHECK_RC(cuMemAllocAsync(&q, g_size, s), CUDA_SUCCESS);
    CHECK_RC(cuStreamSynchronize(s), CUDA_SUCCESS);
    g_pool[i] = pool_of(q);
    t_fill_check(q, g_size, (unsigned)i);
    pthread_barrier_wait(&g_go);          /* all allocated before any frees */
    CHECK_RC(cuMemFreeAsync(q, s), CUDA_SUCCESS);
    CHECK_RC(cuStreamDestroy_v2(s), CUDA_SUCCESS);
    return NULL;
}

static int case_race(int n, size_t size) {
    CHECK(n >= 2 && n <= 64);
    g_ctx = start();
    g_size = size;
    CHECK(pthread_barrier_init(&g_go, NULL, (unsigned)n) == 0);
    pthread_t th[64];
    for (int i = 0; i < n; i++) CHECK(pthread_create(&th[i], NULL, race_main, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < n; i++) CHECK(pthread_join(th[i], NULL) == 0);
    pthread_barrier_destroy(&g_go);
    int same = 1;
    for (int i = 1; i < n; i++) same &= g_pool[i] == g_pool[0];
    int c[2];
    pool_counts(c);
    printf("same_pool=%d\npools_created=%d\npools_live=%d\n", same, c[1], c[0]);
    CHECK_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    print_counts();
    return 0;
}

/* ---- reset: the shim's pools go with the device's state ---------------------------------- */

static int case_reset(size_t size) {
    start();
    CUdeviceptr q, kept;
    counts_t c0 = counts();
    CHECK_RC(cuMemAllocAsync(&q, size, NULL), CUDA_SUCCESS);
    int tg = counted_alloc("before", c0);
    show("before", q, size);
    CHECK_RC(cuMemAllocAsync(&kept, size, NULL), CUDA_SUCCESS);   /* still live at the reset */
    c0 = counts();
    CHECK_RC(cuMemFreeAsync(q, NULL), CUDA_SUCCESS);
    counted_free(c0, tg);
    printf("pools_before_reset=%d\n", pools_live());
    CHECK_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    CHECK_RC(cuDevicePrimaryCtxReset_v2(0), CUDA_SUCCESS);
    printf("pools_after_reset=%d\n", pools_live());
    if (checking()) {
        counts_t c = counts();
        printf("live_tagged_after_reset=%lld\n", c.ta - c.tf);   /* `kept` went with the reset */
    }
    CUcontext again;
    CHECK_RC(cuDevicePrimaryCtxRetain(&again, 0), CUDA_SUCCESS);
    CHECK_RC(cuCtxSetCurrent(again), CUDA_SUCCESS);
    c0 = counts();
    CHECK_RC(cuMemAllocAsync(&q, size, NULL), CUDA_SUCCESS);
    tg = counted_alloc("after", c0);
    show("after", q, size);
    c0 = counts();
    CHECK_RC(cuMemFreeAsync(q, NULL), CUDA_SUCCESS);
    counted_free(c0, tg);
    CHECK_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    print_counts();
    return 0;
}

/* ---- fork: a child forgets the parent's pools ------------------------------------------- */

static const char *g_who = "parent";
/* Registered before CUDA is touched, so it runs after the shim's exit handlers. */
static void report_pools_at_exit(void) {
    if (!pool_counts) return;
    printf("%s_pools_at_exit=%d\n", g_who, pools_live());
    fflush(stdout);
}

static int case_fork(size_t size) {
    atexit(report_pools_at_exit);
    start();
    CUdeviceptr q;
    CHECK_RC(cuMemAllocAsync(&q, size, NULL), CUDA_SUCCESS);
    show("parent", q, size);
    CUmemoryPool parent_pool = pool_of(q);
    CHECK_RC(cuMemFreeAsync(q, NULL), CUDA_SUCCESS);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        t_prog = "t_place(child)";
        g_who = "child";
        alarm(30);
        CUcontext c;
        CHECK_RC(cuDevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
        CHECK_RC(cuCtxSetCurrent(c), CUDA_SUCCESS);
        CHECK_RC(cuMemAllocAsync(&q, size, NULL), CUDA_SUCCESS);
        show("child", q, size);
        printf("child_own_pool=%d\n", pool_of(q) != parent_pool);
        CHECK_RC(cuMemFreeAsync(q, NULL), CUDA_SUCCESS);
        CHECK_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
        exit(0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    printf("child_status=%d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    CHECK_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    return 0;
}

/* ---- oom: a retry on out-of-memory repeats the call, not the request ---------------------- */

static int case_oom(size_t size) {
    start();
    CUdeviceptr a;
    CHECK_RC(cuMemAlloc_v2(&a, size), CUDA_SUCCESS);
    printf("alloc_shim=%d\n", t_is_shim(a, NULL));
    CHECK_RC(cuMemFree_v2(a), CUDA_SUCCESS);   /* kept for reuse by the shim's pool */
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    for (int i = 1; i <= 2; i++) {
        CUmemGenericAllocationHandle h;
        CUresult r = cuMemCreate(&h, size, &prop, 0);
        printf("vmm%d_rc=%d\n", i, (int)r);
        if (r != CUDA_SUCCESS) continue;
        CUdeviceptr v;
        CHECK_RC(cuMemAddressReserve(&v, size, 0, 0, 0), CUDA_SUCCESS);
        CHECK_RC(cuMemMap(v, size, 0, h, 0), CUDA_SUCCESS);
        printf("vmm%d_domain=%d\n", i, t_fake.domain_of((void *)(uintptr_t)v));
        CHECK_RC(cuMemUnmap(v, size), CUDA_SUCCESS);
        CHECK_RC(cuMemAddressFree(v, size), CUDA_SUCCESS);
        CHECK_RC(cuMemRelease(h), CUDA_SUCCESS);
    }
    CHECK_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    print_counts();
    return 0;
}

/* A program that exits holding its memory, as many do. */
static int case_keep(size_t size) {
    start();
    CUdeviceptr a, q, m;
    CHECK_RC(cuMemAlloc_v2(&a, size), CUDA_SUCCESS);
    CHECK_RC(cuMemAllocAsync(&q, size, NULL), CUDA_SUCCESS);
    CHECK_RC(cuStreamSynchronize(NULL), CUDA_SUCCESS);
    CHECK_RC(cuMemAllocManaged(&m, size, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    print_counts();
    return 0;
}

int main(int argc, char **argv) {
    t_prog = "t_place";
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && !strcmp(argv[1], "all")) return case_all(t_size(argv[2]));
    if (argc == 3 && !strcmp(argv[1], "pools")) return case_pools(t_size(argv[2]));
    if (argc == 4 && !strcmp(argv[1], "race")) return case_race(atoi(argv[2]), t_size(argv[3]));
    if (argc == 3 && !strcmp(argv[1], "reset")) return case_reset(t_size(argv[2]));
    if (argc == 3 && !strcmp(argv[1], "fork")) return case_fork(t_size(argv[2]));
    if (argc == 3 && !strcmp(argv[1], "oom")) return case_oom(t_size(argv[2]));
    if (argc == 3 && !strcmp(argv[1], "keep")) return case_keep(t_size(argv[2]));
    fprintf(stderr, "usage: t_place all|pools|reset|fork|oom SIZE | race N SIZE\n");
    return 2;
}
