/* t_driver.c — driver-API test program, linked against the fake libcuda (-lcuda), run under
 * the shim by tests/fake/run_cases.py. `t_driver --help` lists the subcommands.
 */
#include "shim/cuda_compat.h"
#include "tests/fake/t_common.h"
#include "tests/fake/fake_api.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*gpa_v2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa_v1_fn)(const char *, void **, int, cuuint64_t);
CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);

static const char *usage =
    "usage: t_driver CASE [ARGS]   (sizes like 8MiB)\n"
    "  alloc HOW SIZE        HOW: link | dlsym | gpa12000 | gpa13000 | gpaptds | gpaold\n"
    "  passthru SIZE         untagged size; per-thread memcpy resolves to the real driver\n"
    "  range SIZE            interior pointers: address range, free, seam access\n"
    "  sync SIZE             free of a shim pointer synchronizes\n"
    "  ipc TAGGED UNTAGGED   legacy IPC on tagged / untagged memory\n"
    "  inject SIZE           allocation under FAKE_CUDA_FAIL still yields usable memory\n"
    "  oom SIZE              prints the return code of one allocation\n"
    "  stock T U             a fixed sequence whose observable results are printed\n"
    "  threads N ITERS T U   N threads x ITERS tagged+untagged alloc/free cycles\n"
    "  fork SIZE             allocate, fork, child allocates/frees its own, parent frees\n"
    "  reuse SIZE N          allocate/free the same tagged size N times\n"
    "  twodev SIZE           tagged allocation on device 1, peer access from device 0\n"
    "  trim T U              allocate+free T, then allocate U (pooled memory must not cost U)\n"
    "  seq SIZE N            N allocations of SIZE kept live, each described, then freed\n"
    "  publish               load a FAKEMOD module defining ldshim_topology, print magic\n"
    "  publishmany N         N modules and N libraries on device 0, a third unloaded and as many\n"
    "                        libraries loaded again; then device 1's context: which got its map\n"
    "  trimcreate T U        pooled tagged range, then cuMemCreate of U under a memory limit\n"
    "  ctxdestroy T          destroy a context holding a live and a pooled tagged range\n"
    "  ptrattr SIZE          RANGE_START_ADDR/RANGE_SIZE of a pointer in the last slice\n"
    "  chunks SIZE           a tagged range's live handles and maps, every 2 MiB page's domain\n";

static CUcontext ctx0;

static void setup(int dev) {
    CHECK_RC(cuInit(0), CUDA_SUCCESS);
    CUdevice d;
    CHECK_RC(cuDeviceGet(&d, dev), CUDA_SUCCESS);
    CHECK_RC(cuDevicePrimaryCtxRetain(&ctx0, d), CUDA_SUCCESS);
    CHECK_RC(cuCtxSetCurrent(ctx0), CUDA_SUCCESS);
    t_fake_init();
}
static void teardown(void) {
    CUdevice d;
    CHECK_RC(cuCtxGetDevice(&d), CUDA_SUCCESS);
    CHECK_RC(cuDevicePrimaryCtxRelease_v2(d), CUDA_SUCCESS);
}

static alloc_fn resolve_alloc(const char *how) {
    void *fn = NULL;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (!strcmp(how, "link")) return cuMemAlloc_v2;
    if (!strcmp(how, "dlsym")) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        CHECK(h != NULL);
        fn = dlsym(h, "cuMemAlloc_v2");
    } else if (!strcmp(how, "gpa12000") || !strcmp(how, "gpa13000") || !strcmp(how, "gpaptds")) {
        int ver = !strcmp(how, "gpa12000") ? 12000 : 13000;
        cuuint64_t fl = !strcmp(how, "gpaptds") ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                                 : CU_GET_PROC_ADDRESS_DEFAULT;
        CHECK_RC(cuGetProcAddress_v2("cuMemAlloc", &fn, ver, fl, &st), CUDA_SUCCESS);
        CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS);
    } else if (!strcmp(how, "gpaold")) {
        CHECK_RC(cuGetProcAddress("cuMemAlloc", &fn, 11030, CU_GET_PROC_ADDRESS_DEFAULT), CUDA_SUCCESS);
    } else {
        fprintf(stderr, "t_driver: unknown HOW '%s'\n%s", how, usage);
        exit(2);
    }
    CHECK(fn != NULL);
    return (alloc_fn)fn;
}

static int case_alloc(const char *how, size_t size) {
    alloc_fn a = resolve_alloc(how);
    CUdeviceptr p = 0;
    CHECK_RC(a(&p, size), CUDA_SUCCESS);
    CHECK(p != 0 && p % 512 == 0);
    t_describe("a", p, size);
    t_fill_check(p, size, 7);
    CHECK_RC(cuMemFree_v2(p), CUDA_SUCCESS);
    int c[5];
    t_fake.counts(c);
    printf("plain_after_free=%d\n", c[0]);
    return 0;
}

static int case_passthru(size_t size) {
    CUdeviceptr p = 0;
    CHECK_RC(cuMemAlloc_v2(&p, size), CUDA_SUCCESS);
    t_describe("u", p, size);
    CHECK(!t_is_shim(p, NULL));
    CUdeviceptr base = 0;
    size_t sz = 0;
    CHECK_RC(cuMemGetAddressRange_v2(&base, &sz, p + size - 1), CUDA_SUCCESS);
    CHECK(base == p && sz == size);
    /* Per-thread variants resolve to the real driver's own function, untouched. */
    void *fn = NULL, *real = dlsym(dlopen("libcuda.so.1", RTLD_NOW), "cuMemcpyHtoD_v2_ptds");
    CHECK_RC(cuGetProcAddress_v2("cuMemcpyHtoD", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                                 NULL), CUDA_SUCCESS);
    Dl_info di;
    CHECK(dladdr(fn, &di) && di.dli_sname && di.dli_fname);
    printf("ptds_sym=%s\nptds_lib=%s\nptds_same_as_dlsym=%d\n", di.dli_sname,
           strrchr(di.dli_fname, '/') ? strrchr(di.dli_fname, '/') + 1 : di.dli_fname, fn == real);
    char buf[64] = "through the per-thread copy";
    CHECK_RC(((CUresult (*)(CUdeviceptr, const void *, size_t))fn)(p, buf, sizeof buf), CUDA_SUCCESS);
    CHECK(memcmp((void *)(uintptr_t)p, buf, sizeof buf) == 0);
    void *dfn = NULL;
    CHECK_RC(cuGetProcAddress_v2("cuMemcpyDtoH", &dfn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                                 NULL), CUDA_SUCCESS);
    CHECK(dladdr(dfn, &di) && di.dli_sname);
    printf("ptds_dtoh_sym=%s\n", di.dli_sname);
    /* Unknown names fail as the driver says. */
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
    CHECK_RC(cuGetProcAddress_v2("cuNoSuchFunction", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND);
    CHECK(st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND && fn == NULL);
    CHECK_RC(cuMemFree_v2(p), CUDA_SUCCESS);
    return 0;
}

static int case_range(size_t size) {
    CUdeviceptr p = 0;
    CHECK_RC(cuMemAlloc_v2(&p, size), CUDA_SUCCESS);
    t_describe("r", p, size);
    ldshim_ptr_info_t in;
    size_t seam = t_is_shim(p, &in) ? in.slice : size / 2;
    CUdeviceptr probes[] = { p, p + 1, p + size - 1, p + seam - 1, p + seam, p + seam + 1 };
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        CUdeviceptr base = 0;
        size_t sz = 0;
        CHECK_RC(cuMemGetAddressRange_v2(&base, &sz, probes[i]), CUDA_SUCCESS);
        if (base != p || sz != size) {
            fprintf(stderr, "t_driver: range of base+%llu = (base+%lld, %zu), expected (base, %zu)\n",
                    (unsigned long long)(probes[i] - p), (long long)(base - p), sz, size);
            exit(1);
        }
        CHECK_RC(cuMemGetAddressRange_v2(NULL, &sz, probes[i]), CUDA_SUCCESS);
        CHECK(sz == size);
    }
    t_fill_check(p, size, 3);
    /* A copy straddling the seam, through the driver. */
    unsigned char buf[8192], back[8192];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i ^ 0x5a);
    CUdeviceptr at = p + seam - sizeof buf / 2;
    CHECK_RC(cuMemcpyHtoD_v2(at, buf, sizeof buf), CUDA_SUCCESS);
    CHECK_RC(cuMemcpyDtoH_v2(back, at, sizeof back), CUDA_SUCCESS);
    CHECK(memcmp(buf, back, sizeof buf) == 0);
    CHECK_RC(cuMemsetD8_v2(p, 0xab, size), CUDA_SUCCESS);
    CHECK(((unsigned char *)(uintptr_t)p)[size - 1] == 0xab);
    printf("free_interior=%d\n", (int)cuMemFree_v2(p + 1));
    printf("free_seam=%d\n", (int)cuMemFree_v2(p + seam));
    printf("free_base=%d\n", (int)cuMemFree_v2(p));
    printf("range_after_free=%d\n", (int)cuMemGetAddressRange_v2(NULL, NULL, p));
    return 0;
}

static int case_sync(size_t size) {
    CUdeviceptr p = 0;
    CHECK_RC(cuMemAlloc_v2(&p, size), CUDA_SUCCESS);
    printf("shim=%d\n", t_is_shim(p, NULL));
    int before = t_fake.sync_count();
    CHECK_RC(cuMemFree_v2(p), CUDA_SUCCESS);
    printf("syncs=%d\n", t_fake.sync_count() - before);
    return 0;
}

static int case_ipc(size_t tagged, size_t untagged) {
    CUdeviceptr t = 0, u = 0;
    CHECK_RC(cuMemAlloc_v2(&t, tagged), CUDA_SUCCESS);
    CHECK_RC(cuMemAlloc_v2(&u, untagged), CUDA_SUCCESS);
    CUipcMemHandle h;
    printf("t_shim=%d\n", t_is_shim(t, NULL));
    printf("ipc_tagged=%d\n", (int)cuIpcGetMemHandle(&h, t));
    printf("ipc_untagged=%d\n", (int)cuIpcGetMemHandle(&h, u));
    CHECK_RC(cuMemFree_v2(t), CUDA_SUCCESS);
    CHECK_RC(cuMemFree_v2(u), CUDA_SUCCESS);
    return 0;
}

static int case_inject(size_t size) {
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc_v2(&p, size);
    printf("rc=%d\n", (int)r);
    if (r != CUDA_SUCCESS) return 0;
    t_describe("i", p, size);
    t_fill_check(p, size, 11);
    CUdeviceptr base = 0;
    size_t sz = 0;
    CHECK_RC(cuMemGetAddressRange_v2(&base, &sz, p + size - 1), CUDA_SUCCESS);
    CHECK(base == p && sz == size);
    printf("free=%d\n", (int)cuMemFree_v2(p));
    return 0;
}

static int case_oom(size_t size) {
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc_v2(&p, size);
    printf("rc=%d\n", (int)r);
    if (r == CUDA_SUCCESS) {
        t_fill_check(p, size, 1);
        CHECK_RC(cuMemFree_v2(p), CUDA_SUCCESS);
    }
    return 0;
}

/* A fixed sequence; prints only things that must be equal with and without a stock shim. */
static int case_stock(size_t tagged, size_t untagged) {
    CUdeviceptr t = 0, u = 0, base = 0;
    size_t sz = 0;
    int c[5];
    printf("alloc_t=%d\n", (int)cuMemAlloc_v2(&t, tagged));
    printf("alloc_u=%d\n", (int)cuMemAlloc_v2(&u, untagged));
    printf("t_shim=%d\nt_domain=%d\nu_domain=%d\n", t_is_shim(t, NULL), t_fake.domain_of((void *)t),
           t_fake.domain_of((void *)u));
    printf("range_t=%d\n", (int)cuMemGetAddressRange_v2(&base, &sz, t + tagged / 2 + 1));
    printf("range_t_ok=%d\n", base == t && sz == tagged);
    t_fake.counts(c);
    printf("counts=%d,%d,%d,%d,%d\n", c[0], c[1], c[2], c[3], c[4]);
    CUipcMemHandle h;
    printf("ipc_t=%d\n", (int)cuIpcGetMemHandle(&h, t));
    printf("free_interior=%d\n", (int)cuMemFree_v2(t + 4096));
    int s0 = t_fake.sync_count();
    printf("free_t=%d\n", (int)cuMemFree_v2(t));
    printf("free_u=%d\n", (int)cuMemFree_v2(u));
    printf("syncs=%d\n", t_fake.sync_count() - s0);
    printf("free_again=%d\n", (int)cuMemFree_v2(t));
    t_fake.counts(c);
    printf("counts_end=%d,%d,%d,%d,%d\n", c[0], c[1], c[2], c[3], c[4]);
    return 0;
}

typedef struct { int id, iters; size_t tagged, untagged; int shim; } thr_arg_t;

static void *thr_main(void *arg) {
    thr_arg_t *a = arg;
    CHECK_RC(cuCtxSetCurrent(ctx0), CUDA_SUCCESS);
    for (int i = 0; i < a->iters; i++) {
        CUdeviceptr t = 0, u = 0;
        CHECK_RC(cuMemAlloc_v2(&t, a->tagged), CUDA_SUCCESS);
        CHECK_RC(cuMemAlloc_v2(&u, a->untagged), CUDA_SUCCESS);
        uint64_t sig = ((uint64_t)a->id << 32) | (uint64_t)i;
        uint64_t *tb = (uint64_t *)(uintptr_t)t, *tl = (uint64_t *)(uintptr_t)(t + a->tagged - 8);
        uint64_t *tm = (uint64_t *)(uintptr_t)(t + a->tagged / 2);   /* the seam of 2 slices */
        uint64_t *ub = (uint64_t *)(uintptr_t)u;
        *tb = sig; *tl = ~sig; *tm = sig ^ 0x55; *ub = sig + 1;
        if (a->shim) {
            ldshim_ptr_info_t in;
            CHECK(t_is_shim(t, &in) && in.base == t && in.size == a->tagged);
            CHECK(t_is_shim(t + a->tagged - 1, NULL));
            CHECK(!t_is_shim(u, NULL));
        }
        CHECK(*tb == sig && *tl == ~sig && *tm == (sig ^ 0x55) && *ub == sig + 1);
        CHECK_RC(cuMemFree_v2(t), CUDA_SUCCESS);
        CHECK_RC(cuMemFree_v2(u), CUDA_SUCCESS);
    }
    return NULL;
}

static int case_threads(int n, int iters, size_t tagged, size_t untagged) {
    pthread_t th[64];
    thr_arg_t args[64];
    CHECK(n >= 1 && n <= 64);
    int shim = t_ptrinfo() != NULL && getenv("T_EXPECT_TAGGED") != NULL;
    for (int i = 0; i < n; i++) {
        args[i] = (thr_arg_t){ i, iters, tagged, untagged, shim };
        CHECK(pthread_create(&th[i], NULL, thr_main, &args[i]) == 0);
    }
    for (int i = 0; i < n; i++) CHECK(pthread_join(th[i], NULL) == 0);
    printf("cycles=%d\n", n * iters);
    return 0;
}

static int case_fork(size_t size) {
    CUdeviceptr p = 0;
    CHECK_RC(cuMemAlloc_v2(&p, size), CUDA_SUCCESS);
    printf("parent_shim=%d\n", t_is_shim(p, NULL));
    fflush(stdout);
    t_fill_check(p, size, 21);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        t_prog = "t_driver(child)";
        alarm(30);
        CUcontext c;
        CHECK_RC(cuDevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
        CHECK_RC(cuCtxSetCurrent(c), CUDA_SUCCESS);
        CUdeviceptr q = 0;
        CHECK_RC(cuMemAlloc_v2(&q, size), CUDA_SUCCESS);
        CHECK(q != p);
        printf("child_shim=%d\n", t_is_shim(q, NULL));
        t_fill_check(q, size, 22);
        CHECK_RC(cuMemFree_v2(q), CUDA_SUCCESS);
        CHECK_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
        fflush(stdout);
        exit(0);
    }
    int st = 0;
    for (int waited = 0;; waited++) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        CHECK(w >= 0);
        if (w == pid) break;
        if (waited > 600) { kill(pid, SIGKILL); fprintf(stderr, "t_driver: child hung\n"); exit(1); }
        usleep(50000);
    }
    printf("child_status=%d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    unsigned char *b = (unsigned char *)(uintptr_t)p;
    for (size_t i = 0; i < size; i++) CHECK(b[i] == (unsigned char)(i * 131u + 21));
    CHECK_RC(cuMemFree_v2(p), CUDA_SUCCESS);
    return 0;
}

static int case_reuse(size_t size, int n) {
    for (int i = 0; i < n; i++) {
        CUdeviceptr p = 0;
        CHECK_RC(cuMemAlloc_v2(&p, size), CUDA_SUCCESS);
        t_fill_check(p, 1 << 16, (unsigned)i);
        CHECK_RC(cuMemFree_v2(p), CUDA_SUCCESS);
    }
    /* A few untagged sizes for the report's histogram: 3 x 1 MiB, 1 x 3 MiB. */
    CUdeviceptr u[4];
    size_t us[4] = { 1 << 20, 1 << 20, 1 << 20, 3 << 20 };
    for (int i = 0; i < 4; i++) CHECK_RC(cuMemAlloc_v2(&u[i], us[i]), CUDA_SUCCESS);
    for (int i = 0; i < 4; i++) CHECK_RC(cuMemFree_v2(u[i]), CUDA_SUCCESS);
    printf("done=1\n");
    return 0;
}

/* A chunked range (LDSHIM_CHUNK): handles and mappings live while it is, every 2 MiB page
 * homed in its slice's domain, the whole range usable and answered as one. */
static int case_chunks(size_t size) {
    int c0[5], c[5];
    t_fake.counts(c0);
    CUdeviceptr p = 0;
    CHECK_RC(cuMemAlloc_v2(&p, size), CUDA_SUCCESS);
    ldshim_ptr_info_t in;
    CHECK(t_is_shim(p, &in));
    t_fake.counts(c);
    printf("handles=%d\nmaps=%d\n", c[1] - c0[1], c[3] - c0[3]);
    int ok = 1;
    for (uint64_t off = 0; off < in.reserved; off += 2u << 20) {
        int want = in.domain_of[off / in.slice], got = t_fake.domain_of((void *)(uintptr_t)(p + off));
        if (got != want) { fprintf(stderr, "t_driver: page at +%llu in domain %d, slice says %d\n",
                                   (unsigned long long)off, got, want); ok = 0; }
    }
    printf("pages_ok=%d\n", ok);
    t_fill_check(p, size, 5);
    CUdeviceptr base = 0;
    size_t sz = 0;
    CHECK_RC(cuMemGetAddressRange_v2(&base, &sz, p + size - 1), CUDA_SUCCESS);
    CHECK(base == p && sz == size);
    printf("free_interior=%d\n", (int)cuMemFree_v2(p + (2u << 20)));
    CHECK_RC(cuMemFree_v2(p), CUDA_SUCCESS);
    t_fake.counts(c);
    printf("handles_after=%d\n", c[1] - c0[1]);
    return 0;
}

static int case_twodev(size_t size) {
    int n = 0;
    CHECK_RC(cuDeviceGetCount(&n), CUDA_SUCCESS);
    CHECK(n == 2);
    CUcontext c1;
    CHECK_RC(cuDevicePrimaryCtxRetain(&c1, 1), CUDA_SUCCESS);
    CHECK_RC(cuCtxSetCurrent(c1), CUDA_SUCCESS);
    CUdeviceptr p = 0;
    CHECK_RC(cuMemAlloc_v2(&p, size), CUDA_SUCCESS);
    t_describe("d1", p, size);
    ldshim_ptr_info_t in;
    int shim = t_is_shim(p, &in);
    if (shim) printf("info_device=%d\n", in.device);
    printf("access_before_dev0=%d\naccess_before_dev1=%d\n", t_fake.access_of((void *)p, 0),
           t_fake.access_of((void *)p, 1));
    CHECK_RC(cuCtxSetCurrent(ctx0), CUDA_SUCCESS);
    printf("enable_peer=%d\n", (int)cuCtxEnablePeerAccess(c1, 0));
    printf("access_after_dev0=%d\n", t_fake.access_of((void *)p, 0));
    printf("access_after_dev0_last=%d\n", t_fake.access_of((void *)(uintptr_t)(p + size - 1), 0));
    CHECK_RC(cuCtxSetCurrent(c1), CUDA_SUCCESS);
    CHECK_RC(cuMemFree_v2(p), CUDA_SUCCESS);
    CHECK_RC(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
    CHECK_RC(cuCtxSetCurrent(ctx0), CUDA_SUCCESS);
    return 0;
}

static int case_trim(size_t t, size_t u) {
    CUdeviceptr p = 0, q = 0;
    CHECK_RC(cuMemAlloc_v2(&p, t), CUDA_SUCCESS);
    printf("t_shim=%d\n", t_is_shim(p, NULL));
    CHECK_RC(cuMemFree_v2(p), CUDA_SUCCESS);
    CUresult r = cuMemAlloc_v2(&q, u);
    printf("rc=%d\n", (int)r);
    if (r == CUDA_SUCCESS) {
        t_fill_check(q, u, 8);
        CHECK_RC(cuMemFree_v2(q), CUDA_SUCCESS);
    }
    return 0;
}

/* The pool keeps a freed tagged range; an allocation API the shim does not place
 * (cuMemCreate) then runs out of memory unless the shim trims the pool and retries. */
static int case_trimcreate(size_t t, size_t u) {
    CUdeviceptr p = 0;
    CHECK_RC(cuMemAlloc_v2(&p, t), CUDA_SUCCESS);
    printf("t_shim=%d\n", t_is_shim(p, NULL));
    CHECK_RC(cuMemFree_v2(p), CUDA_SUCCESS);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h;
    CUresult r = cuMemCreate(&h, u, &prop, 0);
    printf("rc=%d\n", (int)r);
    if (r == CUDA_SUCCESS) CHECK_RC(cuMemRelease(h), CUDA_SUCCESS);
    return 0;
}

/* A context destroyed with a tagged allocation still live (and another kept by the pool):
 * the shim must release both before the context goes. */
static int case_ctxdestroy(size_t t) {
    CUcontext c;
    CUdevice d;
    CHECK_RC(cuDeviceGet(&d, 0), CUDA_SUCCESS);
    CHECK_RC(cuCtxCreate_v2(&c, 0, d), CUDA_SUCCESS);
    CUdeviceptr live = 0, freed = 0;
    CHECK_RC(cuMemAlloc_v2(&freed, t), CUDA_SUCCESS);
    CHECK_RC(cuMemFree_v2(freed), CUDA_SUCCESS);            /* kept by the pool */
    CHECK_RC(cuMemAlloc_v2(&live, 2 * t), CUDA_SUCCESS);    /* other shape: a new range */
    printf("live_shim=%d\n", t_is_shim(live, NULL));
    CHECK_RC(cuCtxDestroy_v2(c), CUDA_SUCCESS);
    printf("after_destroy_shim=%d\n", t_is_shim(live, NULL));
    int cnt[5];
    t_fake.counts(cnt);
    printf("after_destroy_handles=%d\nafter_destroy_mappings=%d\n", cnt[1], cnt[3]);
    CHECK_RC(cuCtxSetCurrent(ctx0), CUDA_SUCCESS);
    return 0;
}

/* Pointer attributes of an interior pointer past the slice seam: the whole range. */
static int case_ptrattr(size_t size) {
    CUdeviceptr p = 0, start = 0;
    size_t len = 0;
    CHECK_RC(cuMemAlloc_v2(&p, size), CUDA_SUCCESS);
    CUdeviceptr in = p + size - 1;                 /* last byte: in the last slice */
    CHECK_RC(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, in), CUDA_SUCCESS);
    CHECK_RC(cuPointerGetAttribute(&len, CU_POINTER_ATTRIBUTE_RANGE_SIZE, in), CUDA_SUCCESS);
    printf("attr_start_ok=%d\nattr_size_ok=%d\n", start == p, len == size);
    CUpointer_attribute as[2] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    start = 0; len = 0;
    void *ds[2] = {&start, &len};
    CHECK_RC(cuPointerGetAttributes(2, as, ds, in), CUDA_SUCCESS);
    printf("attrs_ok=%d\n", start == p && len == size);
    CHECK_RC(cuMemFree_v2(p), CUDA_SUCCESS);
    return 0;
}

static int case_seq(size_t size, int n) {
    CUdeviceptr p[16];
    CHECK(n >= 1 && n <= 16);
    for (int i = 0; i < n; i++) {
        char tag[16];
        CHECK_RC(cuMemAlloc_v2(&p[i], size), CUDA_SUCCESS);
        snprintf(tag, sizeof tag, "s%d", i + 1);
        t_describe(tag, p[i], size);
        t_fill_check(p[i], size, (unsigned)i);
    }
    for (int i = 0; i < n; i++) CHECK_RC(cuMemFree_v2(p[i]), CUDA_SUCCESS);
    return 0;
}

static int case_publish(void) {
    char image[128];
    snprintf(image, sizeof image, "FAKEMOD v1 globals=%s:%zu,other:64 functions=k", LDSHIM_TOPOLOGY_SYMBOL,
             sizeof(ldshim_topology_t));
    CUmodule m;
    CHECK_RC(cuModuleLoadData(&m, image), CUDA_SUCCESS);
    CUdeviceptr g = 0;
    size_t gs = 0;
    CHECK_RC(cuModuleGetGlobal_v2(&g, &gs, m, LDSHIM_TOPOLOGY_SYMBOL), CUDA_SUCCESS);
    CHECK(gs == sizeof(ldshim_topology_t));
    ldshim_topology_t t;
    CHECK_RC(cuMemcpyDtoH_v2(&t, g, sizeof t), CUDA_SUCCESS);
    printf("magic_ok=%d\nnum_sms=%u\nnum_domains=%u\n", t.magic == LDSHIM_TOPOLOGY_MAGIC, t.num_sms,
           t.num_domains);
    CHECK_RC(cuModuleUnload(m), CUDA_SUCCESS);
    /* A library too. */
    CUlibrary lib;
    CHECK_RC(cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0), CUDA_SUCCESS);
    CHECK_RC(cuLibraryGetGlobal(&g, &gs, lib, LDSHIM_TOPOLOGY_SYMBOL), CUDA_SUCCESS);
    CHECK_RC(cuMemcpyDtoH_v2(&t, g, sizeof t), CUDA_SUCCESS);
    printf("lib_magic_ok=%d\n", t.magic == LDSHIM_TOPOLOGY_MAGIC);
    CHECK_RC(cuLibraryUnload(lib), CUDA_SUCCESS);
    printf("bad_image=%d\n", (int)cuModuleLoadData(&m, "not an image"));
    return 0;
}

static int topo_magic(CUdeviceptr g) {
    ldshim_topology_t t;
    CHECK_RC(cuMemcpyDtoH_v2(&t, g, sizeof t), CUDA_SUCCESS);
    return t.magic == LDSHIM_TOPOLOGY_MAGIC;
}
static void topo_clear(CUdeviceptr g) {
    static const ldshim_topology_t zero;
    CHECK_RC(cuMemcpyHtoD_v2(g, &zero, sizeof zero), CUDA_SUCCESS);
}

/* The shim's record of loaded modules over loads and unloads (freed handles come back as new
 * ones): each is published at load on device 0; when device 1's primary context arrives, every
 * library still loaded, and nothing else, gets device 1's map (modules belong to device 0's
 * context). */
static int case_publishmany(int n) {
    int ndev = 0;
    CHECK_RC(cuDeviceGetCount(&ndev), CUDA_SUCCESS);
    CHECK(ndev == 2 && n >= 3 && n <= 512);
    char image[128];
    snprintf(image, sizeof image, "FAKEMOD v1 globals=%s:%zu functions=k", LDSHIM_TOPOLOGY_SYMBOL,
             sizeof(ldshim_topology_t));
    int nl = n + n / 3;
    CUlibrary *lib = calloc((size_t)nl, sizeof *lib);
    CUmodule *mod = calloc((size_t)n, sizeof *mod);
    CUdeviceptr *lg = calloc((size_t)nl, sizeof *lg), *mg = calloc((size_t)n, sizeof *mg);
    CHECK(lib && mod && lg && mg);
    size_t gs;
    int at_load = 0;
    for (int i = 0; i < n; i++) {
        CHECK_RC(cuLibraryLoadData(&lib[i], image, NULL, NULL, 0, NULL, NULL, 0), CUDA_SUCCESS);
        CHECK_RC(cuModuleLoadData(&mod[i], image), CUDA_SUCCESS);
        CHECK_RC(cuLibraryGetGlobal(&lg[i], &gs, lib[i], LDSHIM_TOPOLOGY_SYMBOL), CUDA_SUCCESS);
        CHECK_RC(cuModuleGetGlobal_v2(&mg[i], &gs, mod[i], LDSHIM_TOPOLOGY_SYMBOL), CUDA_SUCCESS);
        at_load += topo_magic(lg[i]) + topo_magic(mg[i]);
    }
    for (int i = 0; i < n; i += 3) {
        CHECK_RC(cuLibraryUnload(lib[i]), CUDA_SUCCESS);
        CHECK_RC(cuModuleUnload(mod[i]), CUDA_SUCCESS);
        lib[i] = NULL;
        mod[i] = NULL;
    }
    for (int i = n; i < nl; i++) {
        CHECK_RC(cuLibraryLoadData(&lib[i], image, NULL, NULL, 0, NULL, NULL, 0), CUDA_SUCCESS);
        CHECK_RC(cuLibraryGetGlobal(&lg[i], &gs, lib[i], LDSHIM_TOPOLOGY_SYMBOL), CUDA_SUCCESS);
        at_load += topo_magic(lg[i]);
    }
    int libs_live = 0, mods_live = 0;
    for (int i = 0; i < nl; i++)
        if (lib[i]) { libs_live++; topo_clear(lg[i]); }
    for (int i = 0; i < n; i++)
        if (mod[i]) { mods_live++; topo_clear(mg[i]); }
    CUcontext c1;
    CHECK_RC(cuDevicePrimaryCtxRetain(&c1, 1), CUDA_SUCCESS);
    int libs_mapped = 0, mods_mapped = 0;
    for (int i = 0; i < nl; i++) if (lib[i]) libs_mapped += topo_magic(lg[i]);
    for (int i = 0; i < n; i++) if (mod[i]) mods_mapped += topo_magic(mg[i]);
    printf("published_at_load=%d\nlibs_live=%d\nlibs_mapped=%d\nmods_live=%d\nmods_mapped=%d\n", at_load, libs_live,
           libs_mapped, mods_live, mods_mapped);
    for (int i = 0; i < nl; i++) if (lib[i]) CHECK_RC(cuLibraryUnload(lib[i]), CUDA_SUCCESS);
    for (int i = 0; i < n; i++) if (mod[i]) CHECK_RC(cuModuleUnload(mod[i]), CUDA_SUCCESS);
    CHECK_RC(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
    free(lib); free(mod); free(lg); free(mg);
    return 0;
}

int main(int argc, char **argv) {
    t_prog = "t_driver";
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *c = argv[1];
    int dev = 0, rc;
    setup(dev);
#define ARGS(n) do { if (argc != (n) + 2) { fprintf(stderr, "t_driver: %s needs %d arguments\n%s", c, n, usage); return 2; } } while (0)
    if (!strcmp(c, "alloc")) { ARGS(2); rc = case_alloc(argv[2], t_size(argv[3])); }
    else if (!strcmp(c, "passthru")) { ARGS(1); rc = case_passthru(t_size(argv[2])); }
    else if (!strcmp(c, "range")) { ARGS(1); rc = case_range(t_size(argv[2])); }
    else if (!strcmp(c, "sync")) { ARGS(1); rc = case_sync(t_size(argv[2])); }
    else if (!strcmp(c, "ipc")) { ARGS(2); rc = case_ipc(t_size(argv[2]), t_size(argv[3])); }
    else if (!strcmp(c, "inject")) { ARGS(1); rc = case_inject(t_size(argv[2])); }
    else if (!strcmp(c, "chunks")) { ARGS(1); rc = case_chunks(t_size(argv[2])); }
    else if (!strcmp(c, "oom")) { ARGS(1); rc = case_oom(t_size(argv[2])); }
    else if (!strcmp(c, "stock")) { ARGS(2); rc = case_stock(t_size(argv[2]), t_size(argv[3])); }
    else if (!strcmp(c, "threads")) {
        ARGS(4);
        rc = case_threads(atoi(argv[2]), atoi(argv[3]), t_size(argv[4]), t_size(argv[5]));
    }
    else if (!strcmp(c, "fork")) { ARGS(1); rc = case_fork(t_size(argv[2])); }
    else if (!strcmp(c, "reuse")) { ARGS(2); rc = case_reuse(t_size(argv[2]), atoi(argv[3])); }
    else if (!strcmp(c, "twodev")) { ARGS(1); rc = case_twodev(t_size(argv[2])); }
    else if (!strcmp(c, "trim")) { ARGS(2); rc = case_trim(t_size(argv[2]), t_size(argv[3])); }
    else if (!strcmp(c, "trimcreate")) { ARGS(2); rc = case_trimcreate(t_size(argv[2]), t_size(argv[3])); }
    else if (!strcmp(c, "ctxdestroy")) { ARGS(1); rc = case_ctxdestroy(t_size(argv[2])); }
    else if (!strcmp(c, "ptrattr")) { ARGS(1); rc = case_ptrattr(t_size(argv[2])); }
    else if (!strcmp(c, "seq")) { ARGS(2); rc = case_seq(t_size(argv[2]), atoi(argv[3])); }
    else if (!strcmp(c, "publish")) { ARGS(0); rc = case_publish(); }
    else if (!strcmp(c, "publishmany")) { ARGS(1); rc = case_publishmany(atoi(argv[2])); }
    else { fprintf(stderr, "t_driver: unknown case '%s'\n%s", c, usage); return 2; }
    teardown();
    return rc;
}
