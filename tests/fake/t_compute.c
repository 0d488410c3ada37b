/* t_compute.c — compute binding seen from a driver-API program (linked with -lcuda), run with
 * and without the shim on the fake driver (tests/fake/cases_compute.py).
 *
 *   t_compute paths          every launch path once: NULL/legacy stream, created streams
 *                            (blocking, non-blocking), the per-thread default stream and the
 *                            _ptsz/_ptds entry points, events across streams, a captured and
 *                            replayed graph, cooperative launches that fit and that do not,
 *                            what the program is told about contexts, the SM-count attribute,
 *                            the published topology
 *   t_compute more-streams   the per-thread default stream given to the less common entry points
 *                            (older ABI versions, launch configurations, instantiate parameters)
 *   t_compute ptds-capture [legacy]  a thread captures a blocking stream while this one makes
 *                            a synchronous copy on the per-thread default stream (_ptds; legacy:
 *                            on the legacy stream, which invalidates the capture)
 *   t_compute threads N K    N threads make the primary current and launch K times each on
 *                            their own stream, the NULL stream and the per-thread stream
 *   t_compute reset          bound, cuDevicePrimaryCtxReset, bound again
 *   t_compute reset-current  bound and current on this thread and on another, reset (the program
 *                            keeps its retain); what each thread is told is current; a launch
 *                            before and after the next retain, without any cuCtxSetCurrent
 *   t_compute release        bound, the program releases its only reference to the primary (the
 *                            driver would tear it down), retains it again: bound again
 *   t_compute xthread        a thread makes a stream and memory, another asks for their context
 *                            while the first lives, and launches on the stream after it exited
 *   t_compute exit           bound; an exit handler registered before the first CUDA call (so
 *                            it runs after the shim's) still launches, then releases the primary
 *   t_compute ownctx         a context the program creates itself (runs unbound)
 *   t_compute fork           bound in the parent, then a child binds on its own
 *   t_compute selfgreen      the program makes a green context of 8 SMs current itself and
 *                            launches on the per-thread default stream (the driver refuses)
 *   t_compute race [own]     (FAKE_CUDA_UUID_DELAY) thread A retains the primary (own: creates
 *                            a context of its own) and sits in the shim's probe; meanwhile the
 *                            main thread retains the primary, makes it current and launches:
 *                            it must run bound, on the binding built after A's probe
 *   t_compute twodev-race    (FAKE_CUDA_DEVICES=2, FAKE_CUDA_UUID_DELAY=..@0) device 1 bound; while
 *                            another thread binds device 0, this one makes device 1's primary
 *                            current: it must not wait for device 0
 *   t_compute twodev         (FAKE_CUDA_DEVICES=2) each device's primary made current in turn,
 *                            a launch on each, then device 0 again: every device runs on its
 *                            own binding, as a process driving two GPUs (or NCCL) would
 *
 * Output: "key=value" lines. For a launch, <tag>_sms is the SM count of the launch's context
 * (fakecuda_last_launch) and <tag>_side the one locality domain they all lie in, or "mixed".
 */
#include <pthread.h>
#include <sys/wait.h>
#include "tests/fake/t_common.h"
#include "tests/fake/fake_api.h"
#include "shim/cuda_compat.h"

static int (*last_launch)(unsigned char *, unsigned *);
static int (*sm_side)(int);
static int (*ctx_is_green)(void *);
static int (*green_count)(void);
static void *(*current_ctx)(void);
static CUfunction g_fn;

static void hooks(void) {
    t_fake_init();
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(h);
    last_launch = (int (*)(unsigned char *, unsigned *))dlsym(h, "fakecuda_last_launch");
    sm_side = (int (*)(int))dlsym(h, "fakecuda_sm_side");
    ctx_is_green = (int (*)(void *))dlsym(h, "fakecuda_ctx_is_green");
    green_count = (int (*)(void))dlsym(h, "fakecuda_green_count");
    /* What is really current (the shim translates cuCtxGetCurrent, and dlsym of it too). */
    current_ctx = (void *(*)(void))dlsym(h, "fakecuda_current_ctx");
    CHECK(last_launch && sm_side && ctx_is_green && green_count && current_ctx);
}

/* SM count and side of the last launch: "<n> <side or -1 mixed>". */
static int launched(int *side) {
    unsigned char sms[256];
    int n = last_launch(sms, NULL);
    int s = -2;
    for (int i = 0; i < 256; i++) {
        if (!sms[i]) continue;
        int d = sm_side(i);
        s = s == -2 ? d : (s == d ? s : -1);
    }
    *side = s;
    return n;
}

static void report_launch(const char *tag) {
    int side;
    int n = launched(&side);
    printf("%s_sms=%d\n", tag, n);
    if (side == -1) printf("%s_side=mixed\n", tag);
    else printf("%s_side=%d\n", tag, side);
}

static CUresult launch(CUstream s) {
    void *kp[] = { NULL };
    return cuLaunchKernel(g_fn, 8, 1, 1, 32, 1, 1, 0, s, kp, NULL);
}

static CUcontext setup(CUmodule *mod) {
    CHECK_RC(cuInit(0), CUDA_SUCCESS);
    CUdevice dev;
    CHECK_RC(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    CUcontext prim = NULL;
    CHECK_RC(cuDevicePrimaryCtxRetain(&prim, dev), CUDA_SUCCESS);
    CHECK_RC(cuCtxSetCurrent(prim), CUDA_SUCCESS);
    char image[160];
    snprintf(image, sizeof image, "FAKEMOD v1 globals=ldshim_topology:%zu functions=k", sizeof(ldshim_topology_t));
    CHECK_RC(cuModuleLoadData(mod, image), CUDA_SUCCESS);
    CHECK_RC(cuModuleGetFunction(&g_fn, *mod, "k"), CUDA_SUCCESS);
    return prim;
}

static void teardown(CUmodule mod) {
    CHECK_RC(cuModuleUnload(mod), CUDA_SUCCESS);
    CHECK_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
}

static int case_paths(void) {
    hooks();
    CUmodule mod;
    CUcontext prim = setup(&mod);
    CUcontext cur = NULL, real = current_ctx();
    CHECK_RC(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    printf("cur_is_primary=%d\nreal_is_green=%d\n", cur == prim, ctx_is_green(real));
    int attr = 0;
    CHECK_RC(cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0), CUDA_SUCCESS);
    printf("attr_sms=%d\n", attr);

    CHECK_RC(launch(NULL), CUDA_SUCCESS);
    report_launch("null");
    CHECK_RC(launch(CU_STREAM_LEGACY), CUDA_SUCCESS);
    report_launch("legacy");
    CUstream bs, nbs;
    CHECK_RC(cuStreamCreate(&bs, CU_STREAM_DEFAULT), CUDA_SUCCESS);
    CHECK_RC(cuStreamCreate(&nbs, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CHECK_RC(launch(bs), CUDA_SUCCESS);
    report_launch("stream");
    CHECK_RC(launch(nbs), CUDA_SUCCESS);
    report_launch("nbstream");

    /* The per-thread default stream, three ways. */
    CUresult r = launch(CU_STREAM_PER_THREAD);
    printf("pts_rc=%d\n", (int)r);
    if (r == CUDA_SUCCESS) report_launch("pts");
    void *fn = NULL;
    CHECK_RC(cuGetProcAddress_v2("cuLaunchKernel", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL),
             CUDA_SUCCESS);
    void *kp[] = { NULL };
    r = ((CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **))fn)(g_fn, 4, 1, 1, 32, 1, 1, 0, NULL, kp, NULL);
    printf("ptsz_rc=%d\n", (int)r);
    if (r == CUDA_SUCCESS) report_launch("ptsz");
    CUdeviceptr p;
    CHECK_RC(cuMemAlloc_v2(&p, 4096), CUDA_SUCCESS);
    void *cp = NULL;
    CHECK_RC(cuGetProcAddress_v2("cuMemcpyHtoD", &cp, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL),
             CUDA_SUCCESS);
    char buf[64] = "per-thread copy";
    printf("ptds_copy_rc=%d\n", (int)((CUresult (*)(CUdeviceptr, const void *, size_t))cp)(p, buf, sizeof buf));
    printf("pts_sync_rc=%d\n", (int)cuStreamSynchronize(CU_STREAM_PER_THREAD));

    /* Events across streams, synchronization. */
    CUevent ev;
    CHECK_RC(cuEventCreate(&ev, 0), CUDA_SUCCESS);
    printf("event_rc=%d\n", (int)cuEventRecord(ev, bs));
    printf("wait_rc=%d\n", (int)cuStreamWaitEvent(nbs, ev, 0));
    printf("event_pts_rc=%d\n", (int)cuEventRecord(ev, CU_STREAM_PER_THREAD));
    CHECK_RC(cuCtxSynchronize(), CUDA_SUCCESS);

    /* A graph captured on a created stream, replayed on another. */
    CHECK_RC(cuStreamBeginCapture_v2(bs, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CHECK_RC(cuLaunchKernel(g_fn, 6, 1, 1, 32, 1, 1, 0, bs, kp, NULL), CUDA_SUCCESS);
    CUgraph g;
    CHECK_RC(cuStreamEndCapture(bs, &g), CUDA_SUCCESS);
    CUgraphExec ge;
    CHECK_RC(cuGraphInstantiateWithFlags(&ge, g, 0), CUDA_SUCCESS);
    CHECK_RC(cuGraphLaunch(ge, nbs), CUDA_SUCCESS);
    report_launch("graph");
    printf("graph_pts_rc=%d\n", (int)cuGraphLaunch(ge, CU_STREAM_PER_THREAD));
    CHECK_RC(cuGraphExecDestroy(ge), CUDA_SUCCESS);
    CHECK_RC(cuGraphDestroy(g), CUDA_SUCCESS);

    /* Cooperative grids sized by the attribute fit; one block more does not. */
    printf("coop_fit_rc=%d\n",
           (int)cuLaunchCooperativeKernel(g_fn, (unsigned)attr, 1, 1, 32, 1, 1, 0, nbs, kp));
    printf("coop_big_rc=%d\n",
           (int)cuLaunchCooperativeKernel(g_fn, (unsigned)attr + 1, 1, 1, 32, 1, 1, 0, nbs, kp));

    /* What the program is told about contexts. */
    CUcontext sc = NULL;
    CHECK_RC(cuStreamGetCtx(bs, &sc), CUDA_SUCCESS);
    printf("stream_ctx_primary=%d\n", sc == prim);
    CUcontext pc = NULL;
    CHECK_RC(cuPointerGetAttribute(&pc, CU_POINTER_ATTRIBUTE_CONTEXT, p), CUDA_SUCCESS);
    printf("ptr_ctx_primary=%d\n", pc == prim);
    CHECK_RC(cuCtxPushCurrent_v2(prim), CUDA_SUCCESS);
    CUcontext popped = NULL;
    CHECK_RC(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
    printf("pop_primary=%d\n", popped == prim);

    /* The published topology. */
    CUdeviceptr tp;
    size_t tb;
    CHECK_RC(cuModuleGetGlobal_v2(&tp, &tb, mod, "ldshim_topology"), CUDA_SUCCESS);
    ldshim_topology_t t;
    CHECK_RC(cuMemcpyDtoH_v2(&t, tp, sizeof t), CUDA_SUCCESS);
    int nb = 0;
    for (int i = 0; i < LDSHIM_MAX_SMS; i++) nb += t.sm_bound[i] != 0;
    printf("topo_magic=%d\ntopo_version=%u\ntopo_bound=%d\ntopo_bound_sms=%u\ntopo_sm_bound=%d\ntopo_domain=%d\n",
           t.magic == LDSHIM_TOPOLOGY_MAGIC, t.version, (t.flags & LDSHIM_TOPO_BOUND) != 0, t.bound_sms, nb,
           (int)t.bound_domain);
    /* The same map through the host API, which copies no more than the caller's size (printed
     * only where a map is published: stock must look like no shim). */
    typedef int (*get_topo_fn)(int, ldshim_topology_t *, size_t);
    get_topo_fn gt = (get_topo_fn)dlsym(RTLD_DEFAULT, "ldshim_get_topology");
    ldshim_topology_t probe_h;
    if (gt && gt(0, &probe_h, sizeof probe_h) == 0) {
        ldshim_topology_t h;
        memset(&h, 0xAB, sizeof h);
        int small = gt(0, &h, 8), untouched = 1;
        for (size_t i = 0; i < sizeof h; i++) untouched &= ((unsigned char *)&h)[i] == 0xAB;
        int v1 = gt(0, &h, LDSHIM_TOPOLOGY_V1_BYTES), tail = 1;
        for (size_t i = LDSHIM_TOPOLOGY_V1_BYTES; i < sizeof h; i++) tail &= ((unsigned char *)&h)[i] == 0xAB;
        int full = gt(0, &h, sizeof h);
        printf("host_topo_small_rc=%d\nhost_topo_small_untouched=%d\nhost_topo_v1_rc=%d\nhost_topo_v1_tail_untouched=%d\n"
               "host_topo_rc=%d\nhost_topo_same=%d\n", small, untouched, v1, tail, full,
               full == 0 && h.magic == t.magic && h.bound_sms == t.bound_sms && !memcmp(h.sm_bound, t.sm_bound, sizeof h.sm_bound));
    }
    printf("green_live=%d\n", green_count());

    CHECK_RC(cuEventDestroy_v2(ev), CUDA_SUCCESS);
    CHECK_RC(cuStreamDestroy_v2(bs), CUDA_SUCCESS);
    CHECK_RC(cuStreamDestroy_v2(nbs), CUDA_SUCCESS);
    CHECK_RC(cuMemFree_v2(p), CUDA_SUCCESS);
    teardown(mod);
    return 0;
}

static int case_more_streams(void) {
    hooks();
    CUmodule mod;
    setup(&mod);
    CUdeviceptr p;
    CHECK_RC(cuMemAlloc_v2(&p, 4096), CUDA_SUCCESS);
    printf("prefetch_v1_rc=%d\n", (int)cuMemPrefetchAsync(p, 4096, 0, CU_STREAM_PER_THREAD));
    printf("prefetch_v1_ptsz_rc=%d\n", (int)cuMemPrefetchAsync_ptsz(p, 4096, 0, NULL));
    CUDA_MEMCPY3D_PEER cp;
    memset(&cp, 0, sizeof cp);
    printf("copy3dpeer_rc=%d\n", (int)cuMemcpy3DPeerAsync(&cp, CU_STREAM_PER_THREAD));
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    printf("capinfo_v2_rc=%d\n", (int)cuStreamGetCaptureInfo_v2(CU_STREAM_PER_THREAD, &st, NULL, NULL, NULL, NULL));
    printf("capinfo_v2_none=%d\n", st == CU_STREAM_CAPTURE_STATUS_NONE);
    CUresult r = cuLaunchGridAsync(g_fn, 4, 2, CU_STREAM_PER_THREAD);
    printf("grid_async_rc=%d\n", (int)r);
    if (r == CUDA_SUCCESS) report_launch("grid_async");
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = cfg.blockDimX = 1;
    cfg.hStream = CU_STREAM_PER_THREAD;
    int clusters = -1;
    printf("occupancy_rc=%d\n", (int)cuOccupancyMaxActiveClusters(&clusters, g_fn, &cfg));
    printf("occupancy_clusters=%d\n", clusters);
    /* A captured graph, instantiated with an upload on the per-thread stream. */
    CUstream bs;
    CHECK_RC(cuStreamCreate(&bs, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CHECK_RC(cuStreamBeginCapture_v2(bs, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    void *kp[] = { NULL };
    CHECK_RC(cuLaunchKernel(g_fn, 2, 1, 1, 32, 1, 1, 0, bs, kp, NULL), CUDA_SUCCESS);
    CUgraph g;
    CHECK_RC(cuStreamEndCapture(bs, &g), CUDA_SUCCESS);
    CUDA_GRAPH_INSTANTIATE_PARAMS ip;
    memset(&ip, 0, sizeof ip);
    ip.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
    ip.hUploadStream = CU_STREAM_PER_THREAD;
    ip.result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
    CUgraphExec ge = NULL;
    r = cuGraphInstantiateWithParams(&ge, g, &ip);
    printf("instantiate_upload_rc=%d\ninstantiate_result=%d\n", (int)r, (int)ip.result_out);
    if (r == CUDA_SUCCESS) CHECK_RC(cuGraphExecDestroy(ge), CUDA_SUCCESS);
    CHECK_RC(cuGraphDestroy(g), CUDA_SUCCESS);
    /* The green context of a stream: none, as far as the program can tell. */
    CUgreenCtx gs = (CUgreenCtx)1, gn = (CUgreenCtx)1;
    printf("stream_green_rc=%d\n", (int)cuStreamGetGreenCtx(bs, &gs));
    printf("null_green_rc=%d\n", (int)cuStreamGetGreenCtx(NULL, &gn));
    printf("stream_green_none=%d\nnull_green_none=%d\n", gs == NULL, gn == NULL);
    CHECK_RC(cuStreamDestroy_v2(bs), CUDA_SUCCESS);
    CHECK_RC(cuMemFree_v2(p), CUDA_SUCCESS);
    teardown(mod);
    return 0;
}

typedef struct { CUcontext prim; CUresult end_rc; } capturer_t;
static pthread_barrier_t g_cap_bar;
static void *capturer(void *arg) {
    capturer_t *c = arg;
    CHECK_RC(cuCtxSetCurrent(c->prim), CUDA_SUCCESS);
    CUstream bs;
    CHECK_RC(cuStreamCreate(&bs, CU_STREAM_DEFAULT), CUDA_SUCCESS);
    CHECK_RC(cuStreamBeginCapture_v2(bs, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    pthread_barrier_wait(&g_cap_bar);   /* capturing */
    pthread_barrier_wait(&g_cap_bar);   /* the other thread copied */
    void *kp[] = { NULL };
    CHECK_RC(cuLaunchKernel(g_fn, 2, 1, 1, 32, 1, 1, 0, bs, kp, NULL), CUDA_SUCCESS);
    CUgraph g = NULL;
    c->end_rc = cuStreamEndCapture(bs, &g);
    if (g) CHECK_RC(cuGraphDestroy(g), CUDA_SUCCESS);
    CHECK_RC(cuStreamDestroy_v2(bs), CUDA_SUCCESS);
    return NULL;
}

static int case_ptds_capture(int legacy) {
    hooks();
    CUmodule mod;
    CUcontext prim = setup(&mod);
    CUdeviceptr p;
    CHECK_RC(cuMemAlloc_v2(&p, 64), CUDA_SUCCESS);
    void *cp = NULL;
    CHECK_RC(cuGetProcAddress_v2("cuMemcpyHtoD", &cp, 13000,
                                 legacy ? CU_GET_PROC_ADDRESS_LEGACY_STREAM : CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                                 NULL), CUDA_SUCCESS);
    CHECK(pthread_barrier_init(&g_cap_bar, NULL, 2) == 0);
    capturer_t c = { prim, CUDA_ERROR_UNKNOWN };
    pthread_t th;
    CHECK(pthread_create(&th, NULL, capturer, &c) == 0);
    pthread_barrier_wait(&g_cap_bar);
    char buf[64] = "copied on the per-thread stream", back[64] = "";
    printf("ptds_copy_rc=%d\n", (int)((CUresult (*)(CUdeviceptr, const void *, size_t))cp)(p, buf, sizeof buf));
    pthread_barrier_wait(&g_cap_bar);
    pthread_join(th, NULL);
    pthread_barrier_destroy(&g_cap_bar);
    printf("capture_end_rc=%d\n", (int)c.end_rc);
    CHECK_RC(cuMemcpyDtoH_v2(back, p, sizeof back), CUDA_SUCCESS);
    printf("copy_ok=%d\n", !memcmp(buf, back, sizeof buf));
    /* While this thread's per-thread stream captures, a synchronous copy on it is refused. */
    CUresult r = cuStreamBeginCapture_v2(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_GLOBAL);
    printf("pts_capture_rc=%d\n", (int)r);
    if (r == CUDA_SUCCESS) {
        printf("ptds_in_capture_rc=%d\n", (int)((CUresult (*)(CUdeviceptr, const void *, size_t))cp)(p, buf, 8));
        CUgraph g = NULL;
        printf("pts_end_rc=%d\n", (int)cuStreamEndCapture(CU_STREAM_PER_THREAD, &g));
        if (g) CHECK_RC(cuGraphDestroy(g), CUDA_SUCCESS);
    }
    CHECK_RC(cuMemFree_v2(p), CUDA_SUCCESS);
    teardown(mod);
    return 0;
}

typedef struct { CUcontext prim; int iters, expect, ok; CUcontext real; } worker_t;
static pthread_barrier_t g_all_alive;

static void *worker(void *arg) {
    worker_t *w = arg;
    w->ok = 1;
    if (cuCtxSetCurrent(w->prim) != CUDA_SUCCESS) { w->ok = 0; return NULL; }
    CUstream s;
    if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) { w->ok = 0; return NULL; }
    w->real = current_ctx();
    for (int i = 0; i < w->iters && w->ok; i++) {
        CUstream ss[3] = { s, NULL, CU_STREAM_PER_THREAD };
        for (int k = 0; k < 3; k++) {
            int side;
            if (launch(ss[k]) != CUDA_SUCCESS || launched(&side) != w->expect) { w->ok = 0; break; }
        }
        if (cuStreamSynchronize(CU_STREAM_PER_THREAD) != CUDA_SUCCESS) w->ok = 0;
    }
    cuStreamDestroy_v2(s);
    pthread_barrier_wait(&g_all_alive);   /* every thread's context is alive when compared */
    return NULL;
}

static int case_threads(int n, int iters) {
    hooks();
    CUmodule mod;
    CUcontext prim = setup(&mod);
    int side;
    CHECK_RC(launch(NULL), CUDA_SUCCESS);
    int expect = launched(&side);
    worker_t w[64];
    pthread_t th[64];
    CHECK(n > 0 && n <= 64);
    CHECK(pthread_barrier_init(&g_all_alive, NULL, (unsigned)n) == 0);
    for (int i = 0; i < n; i++) {
        w[i] = (worker_t){ prim, iters, expect, 0, NULL };
        CHECK(pthread_create(&th[i], NULL, worker, &w[i]) == 0);
    }
    int ok = 1, distinct = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        ok &= w[i].ok;
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= w[j].real == w[i].real;
        distinct += !seen;
    }
    pthread_barrier_destroy(&g_all_alive);
    printf("threads_ok=%d\nthread_sms=%d\ndistinct_ctx=%d\n", ok, expect, distinct);
    teardown(mod);
    return 0;
}

static int case_reset(void) {
    hooks();
    CUmodule mod;
    CUcontext prim = setup(&mod);
    CHECK_RC(launch(NULL), CUDA_SUCCESS);
    report_launch("before");
    CHECK_RC(cuModuleUnload(mod), CUDA_SUCCESS);
    CHECK_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    CHECK_RC(cuDevicePrimaryCtxReset_v2(0), CUDA_SUCCESS);
    printf("green_after_reset=%d\n", green_count());
    CUcontext again = NULL;
    CHECK_RC(cuDevicePrimaryCtxRetain(&again, 0), CUDA_SUCCESS);
    CHECK_RC(cuCtxSetCurrent(again), CUDA_SUCCESS);
    printf("same_primary=%d\n", again == prim);
    char image[160];
    snprintf(image, sizeof image, "FAKEMOD v1 functions=k");
    CHECK_RC(cuModuleLoadData(&mod, image), CUDA_SUCCESS);
    CHECK_RC(cuModuleGetFunction(&g_fn, mod, "k"), CUDA_SUCCESS);
    CHECK_RC(launch(NULL), CUDA_SUCCESS);
    report_launch("after");
    printf("green_live=%d\n", green_count());
    teardown(mod);
    return 0;
}

static pthread_barrier_t g_reset_bar;
typedef struct { CUcontext prim; int cur_is_primary; } other_t;
static void *reset_other(void *arg) {
    other_t *o = arg;
    CHECK_RC(cuCtxSetCurrent(o->prim), CUDA_SUCCESS);
    pthread_barrier_wait(&g_reset_bar);   /* bound and current here */
    pthread_barrier_wait(&g_reset_bar);   /* the main thread reset the primary */
    CUcontext cur = NULL;
    CHECK_RC(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    o->cur_is_primary = cur == o->prim;
    return NULL;
}

static int case_reset_current(void) {
    hooks();
    CUmodule mod;
    CUcontext prim = setup(&mod);
    CHECK_RC(launch(NULL), CUDA_SUCCESS);
    report_launch("before");
    CHECK(pthread_barrier_init(&g_reset_bar, NULL, 2) == 0);
    other_t o = { prim, -1 };
    pthread_t th;
    CHECK(pthread_create(&th, NULL, reset_other, &o) == 0);
    pthread_barrier_wait(&g_reset_bar);
    CHECK_RC(cuModuleUnload(mod), CUDA_SUCCESS);
    CHECK_RC(cuDevicePrimaryCtxReset_v2(0), CUDA_SUCCESS);
    pthread_barrier_wait(&g_reset_bar);
    pthread_join(th, NULL);
    pthread_barrier_destroy(&g_reset_bar);
    printf("other_cur_is_primary=%d\n", o.cur_is_primary);
    printf("green_after_reset=%d\n", green_count());
    CUcontext cur = NULL;
    CHECK_RC(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    printf("reset_cur_is_primary=%d\nreset_real_is_green=%d\n", cur == prim, ctx_is_green(current_ctx()));
    CHECK_RC(cuModuleLoadData(&mod, "FAKEMOD v1 functions=k"), CUDA_SUCCESS);
    CHECK_RC(cuModuleGetFunction(&g_fn, mod, "k"), CUDA_SUCCESS);
    CUresult r = launch(NULL);
    printf("reset_launch_rc=%d\n", (int)r);
    if (r == CUDA_SUCCESS) report_launch("reset");
    CHECK_RC(cuModuleUnload(mod), CUDA_SUCCESS);
    /* The next retain binds again; this thread, which has the primary current, runs bound. */
    CUcontext again = NULL;
    CHECK_RC(cuDevicePrimaryCtxRetain(&again, 0), CUDA_SUCCESS);
    CHECK_RC(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    printf("retain_cur_is_primary=%d\nretain_real_is_green=%d\n", cur == prim, ctx_is_green(current_ctx()));
    CHECK_RC(cuModuleLoadData(&mod, "FAKEMOD v1 functions=k"), CUDA_SUCCESS);
    CHECK_RC(cuModuleGetFunction(&g_fn, mod, "k"), CUDA_SUCCESS);
    CHECK_RC(launch(NULL), CUDA_SUCCESS);
    report_launch("after");
    printf("green_live=%d\n", green_count());
    CHECK_RC(cuModuleUnload(mod), CUDA_SUCCESS);
    CHECK_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    CHECK_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    return 0;
}

static int case_release(void) {
    hooks();
    int (*primary_refs)(int, int *) =
        (int (*)(int, int *))dlsym(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), "fakecuda_primary_refs");
    CHECK(primary_refs);
    CUmodule mod;
    setup(&mod);
    CHECK_RC(launch(NULL), CUDA_SUCCESS);
    report_launch("before");
    CHECK_RC(cuModuleUnload(mod), CUDA_SUCCESS);
    CHECK_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    int teardowns = -1, refs = primary_refs(0, &teardowns);
    printf("released_refs=%d\nreleased_teardowns=%d\ngreen_after_release=%d\n", refs, teardowns, green_count());
    CUcontext cur = NULL;
    CHECK_RC(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    printf("released_real_is_green=%d\n", ctx_is_green(current_ctx()));
    CUcontext again;
    CHECK_RC(cuDevicePrimaryCtxRetain(&again, 0), CUDA_SUCCESS);
    CHECK_RC(cuCtxSetCurrent(again), CUDA_SUCCESS);
    CHECK_RC(cuModuleLoadData(&mod, "FAKEMOD v1 functions=k"), CUDA_SUCCESS);
    CHECK_RC(cuModuleGetFunction(&g_fn, mod, "k"), CUDA_SUCCESS);
    CHECK_RC(launch(NULL), CUDA_SUCCESS);
    report_launch("after");
    printf("green_live=%d\n", green_count());
    teardown(mod);
    return 0;
}

typedef struct { CUcontext prim; CUstream s; CUdeviceptr p; } maker_t;
static pthread_barrier_t g_x_bar;
static void *maker(void *arg) {
    maker_t *m = arg;
    CHECK_RC(cuCtxSetCurrent(m->prim), CUDA_SUCCESS);
    CHECK_RC(cuStreamCreate(&m->s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CHECK_RC(cuMemAlloc_v2(&m->p, 4096), CUDA_SUCCESS);
    pthread_barrier_wait(&g_x_bar);   /* made */
    pthread_barrier_wait(&g_x_bar);   /* asked about */
    return NULL;
}

static int case_xthread(void) {
    hooks();
    CUmodule mod;
    CUcontext prim = setup(&mod);
    CHECK(pthread_barrier_init(&g_x_bar, NULL, 2) == 0);
    maker_t m = { prim, NULL, 0 };
    pthread_t th;
    CHECK(pthread_create(&th, NULL, maker, &m) == 0);
    pthread_barrier_wait(&g_x_bar);
    CUcontext sc = NULL, pc = NULL;
    CHECK_RC(cuStreamGetCtx(m.s, &sc), CUDA_SUCCESS);
    CHECK_RC(cuPointerGetAttribute(&pc, CU_POINTER_ATTRIBUTE_CONTEXT, m.p), CUDA_SUCCESS);
    printf("other_stream_ctx_primary=%d\nother_ptr_ctx_primary=%d\n", sc == prim, pc == prim);
    pthread_barrier_wait(&g_x_bar);
    pthread_join(th, NULL);
    pthread_barrier_destroy(&g_x_bar);
    CUresult r = launch(m.s);
    printf("exited_stream_rc=%d\n", (int)r);
    if (r == CUDA_SUCCESS) report_launch("exited_stream");
    printf("exited_stream_destroy_rc=%d\n", (int)cuStreamDestroy_v2(m.s));
    CHECK_RC(cuMemFree_v2(m.p), CUDA_SUCCESS);
    teardown(mod);
    return 0;
}

static CUcontext g_exit_prim;
static CUmodule g_exit_mod;
static void late_exit_handler(void) {
    CUresult r = launch(NULL);
    printf("exit_launch_rc=%d\n", (int)r);
    if (r == CUDA_SUCCESS) report_launch("exit");
    CUcontext cur = NULL;
    CHECK_RC(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    printf("exit_cur_is_primary=%d\n", cur == g_exit_prim);
    cuModuleUnload(g_exit_mod);
    cuDevicePrimaryCtxRelease_v2(0);
}

static int case_exit(void) {
    CHECK(atexit(late_exit_handler) == 0);
    hooks();
    g_exit_prim = setup(&g_exit_mod);
    CHECK_RC(launch(NULL), CUDA_SUCCESS);
    report_launch("main");
    return 0;
}

static int case_ownctx(void) {
    hooks();
    CHECK_RC(cuInit(0), CUDA_SUCCESS);
    CUcontext c;
    CHECK_RC(cuCtxCreate_v2(&c, 0, 0), CUDA_SUCCESS);
    CUmodule mod;
    CHECK_RC(cuModuleLoadData(&mod, "FAKEMOD v1 functions=k"), CUDA_SUCCESS);
    CHECK_RC(cuModuleGetFunction(&g_fn, mod, "k"), CUDA_SUCCESS);
    CHECK_RC(launch(NULL), CUDA_SUCCESS);
    report_launch("own");
    CHECK_RC(cuModuleUnload(mod), CUDA_SUCCESS);
    CHECK_RC(cuCtxDestroy_v2(c), CUDA_SUCCESS);
    return 0;
}

static int case_fork(void) {
    hooks();
    CUmodule mod;
    setup(&mod);
    CHECK_RC(launch(NULL), CUDA_SUCCESS);
    report_launch("parent");
    fflush(stdout);
    int fd[2];
    CHECK(pipe(fd) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        CUcontext c;
        int n = -1, side = -2;
        if (cuDevicePrimaryCtxRetain(&c, 0) == CUDA_SUCCESS && cuCtxSetCurrent(c) == CUDA_SUCCESS &&
            cuModuleLoadData(&mod, "FAKEMOD v1 functions=k") == CUDA_SUCCESS &&
            cuModuleGetFunction(&g_fn, mod, "k") == CUDA_SUCCESS && launch(NULL) == CUDA_SUCCESS)
            n = launched(&side);
        char out[64];
        int len = snprintf(out, sizeof out, "%d %d", n, side);
        if (write(fd[1], out, (size_t)len) != len) _exit(3);
        _exit(0);
    }
    close(fd[1]);
    char in[64] = "";
    ssize_t got = read(fd[0], in, sizeof in - 1);
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(got > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int n, side;
    CHECK(sscanf(in, "%d %d", &n, &side) == 2);
    printf("child_sms=%d\nchild_side=%d\n", n, side);
    teardown(mod);
    return 0;
}

static int case_selfgreen(void) {
    hooks();
    CUmodule mod;
    CUcontext prim = setup(&mod);
    CUdevResource all, groups[32], rem;
    CHECK_RC(cuDeviceGetDevResource(0, &all, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS);
    unsigned n = 32;
    CHECK_RC(cuDevSmResourceSplitByCount(groups, &n, &all, &rem, 0, 8), CUDA_SUCCESS);
    CUdevResourceDesc desc;
    CHECK_RC(cuDevResourceGenerateDesc(&desc, groups, 1), CUDA_SUCCESS);
    CUgreenCtx g;
    CHECK_RC(cuGreenCtxCreate(&g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_SUCCESS);
    CUcontext gc;
    CHECK_RC(cuCtxFromGreenCtx(&gc, g), CUDA_SUCCESS);
    CHECK_RC(cuCtxSetCurrent(gc), CUDA_SUCCESS);
    CHECK_RC(launch(NULL), CUDA_SUCCESS);
    report_launch("green_null");
    printf("green_pts_rc=%d\n", (int)launch(CU_STREAM_PER_THREAD));
    CHECK_RC(cuCtxSetCurrent(prim), CUDA_SUCCESS);
    CHECK_RC(cuGreenCtxDestroy(g), CUDA_SUCCESS);
    teardown(mod);
    return 0;
}

/* Wait (bounded) until some thread sleeps in the fake's cuDeviceGetUuid_v2. */
static int (*uuid_sleepers)(void);
static void wait_for_sleeper(void) {
    for (int i = 0; i < 20000 && uuid_sleepers() == 0; i++) usleep(500);
    CHECK(uuid_sleepers() > 0);
}

static void *retain_dev(void *arg) {
    CUcontext c;
    CHECK_RC(cuDevicePrimaryCtxRetain(&c, (CUdevice)(intptr_t)arg), CUDA_SUCCESS);
    return NULL;
}
static void *create_ctx(void *arg) {
    CHECK_RC(cuCtxCreate_v2((CUcontext *)arg, 0, 0), CUDA_SUCCESS);
    return NULL;
}

static int case_race(int own) {
    hooks();
    uuid_sleepers = (int (*)(void))dlsym(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), "fakecuda_uuid_sleepers");
    CHECK(uuid_sleepers);
    CHECK_RC(cuInit(0), CUDA_SUCCESS);
    pthread_t a;
    CUcontext actx = NULL;
    CHECK(pthread_create(&a, NULL, own ? create_ctx : retain_dev, own ? (void *)&actx : (void *)(intptr_t)0) == 0);
    wait_for_sleeper();   /* A is inside the shim's probe of device 0 */
    CUcontext prim;
    CHECK_RC(cuDevicePrimaryCtxRetain(&prim, 0), CUDA_SUCCESS);
    CHECK_RC(cuCtxSetCurrent(prim), CUDA_SUCCESS);
    printf("b_waited=%d\n", uuid_sleepers() == 0);
    CUmodule mod;
    CHECK_RC(cuModuleLoadData(&mod, "FAKEMOD v1 functions=k"), CUDA_SUCCESS);
    CHECK_RC(cuModuleGetFunction(&g_fn, mod, "k"), CUDA_SUCCESS);
    CHECK_RC(launch(NULL), CUDA_SUCCESS);
    report_launch("b");
    printf("b_green=%d\n", ctx_is_green(current_ctx()));
    pthread_join(a, NULL);
    CHECK_RC(cuModuleUnload(mod), CUDA_SUCCESS);
    if (own) CHECK_RC(cuCtxDestroy_v2(actx), CUDA_SUCCESS);
    else CHECK_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    CHECK_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    return 0;
}

static int case_twodev_race(void) {
    hooks();
    uuid_sleepers = (int (*)(void))dlsym(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), "fakecuda_uuid_sleepers");
    CHECK(uuid_sleepers);
    CHECK_RC(cuInit(0), CUDA_SUCCESS);
    CUcontext p1, p0;
    CHECK_RC(cuDevicePrimaryCtxRetain(&p1, 1), CUDA_SUCCESS);
    pthread_t a;
    CHECK(pthread_create(&a, NULL, retain_dev, (void *)(intptr_t)0) == 0);
    wait_for_sleeper();   /* device 0 is being probed and bound by A */
    CHECK_RC(cuCtxSetCurrent(p1), CUDA_SUCCESS);
    printf("dev1_waited=%d\n", uuid_sleepers() == 0);
    CUmodule mod;
    CHECK_RC(cuModuleLoadData(&mod, "FAKEMOD v1 functions=k"), CUDA_SUCCESS);
    CHECK_RC(cuModuleGetFunction(&g_fn, mod, "k"), CUDA_SUCCESS);
    CHECK_RC(launch(NULL), CUDA_SUCCESS);
    report_launch("dev1");
    CHECK_RC(cuModuleUnload(mod), CUDA_SUCCESS);
    pthread_join(a, NULL);
    CHECK_RC(cuDevicePrimaryCtxRetain(&p0, 0), CUDA_SUCCESS);
    CHECK_RC(cuCtxSetCurrent(p0), CUDA_SUCCESS);
    CHECK_RC(cuModuleLoadData(&mod, "FAKEMOD v1 functions=k"), CUDA_SUCCESS);
    CHECK_RC(cuModuleGetFunction(&g_fn, mod, "k"), CUDA_SUCCESS);
    CHECK_RC(launch(NULL), CUDA_SUCCESS);
    report_launch("dev0");
    CHECK_RC(cuModuleUnload(mod), CUDA_SUCCESS);
    for (int i = 0; i < 2; i++) CHECK_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    CHECK_RC(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
    return 0;
}

static int case_twodev(void) {
    hooks();
    CHECK_RC(cuInit(0), CUDA_SUCCESS);
    int ndev = 0;
    CHECK_RC(cuDeviceGetCount(&ndev), CUDA_SUCCESS);
    CHECK(ndev == 2);
    CUcontext prim[2];
    CUmodule mod[2];
    CUfunction fn[2];
    char image[160];
    snprintf(image, sizeof image, "FAKEMOD v1 globals=ldshim_topology:%zu functions=k", sizeof(ldshim_topology_t));
    for (int d = 0; d < 2; d++) {
        CHECK_RC(cuDevicePrimaryCtxRetain(&prim[d], d), CUDA_SUCCESS);
        CHECK_RC(cuCtxSetCurrent(prim[d]), CUDA_SUCCESS);
        CHECK_RC(cuModuleLoadData(&mod[d], image), CUDA_SUCCESS);
        CHECK_RC(cuModuleGetFunction(&fn[d], mod[d], "k"), CUDA_SUCCESS);
    }
    for (int pass = 0; pass < 2; pass++)
        for (int d = 0; d < 2; d++) {
            CHECK_RC(cuCtxSetCurrent(prim[d]), CUDA_SUCCESS);
            CUcontext cur = NULL;
            CHECK_RC(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
            g_fn = fn[d];
            CHECK_RC(launch(NULL), CUDA_SUCCESS);
            char tag[32];
            snprintf(tag, sizeof tag, "dev%d_pass%d", d, pass);
            report_launch(tag);
            printf("%s_green=%d\n%s_cur_is_primary=%d\n", tag, ctx_is_green(current_ctx()), tag, cur == prim[d]);
        }
    printf("green_live=%d\n", green_count());
    for (int d = 0; d < 2; d++) {
        CHECK_RC(cuCtxSetCurrent(prim[d]), CUDA_SUCCESS);
        CHECK_RC(cuModuleUnload(mod[d]), CUDA_SUCCESS);
        CHECK_RC(cuDevicePrimaryCtxRelease_v2(d), CUDA_SUCCESS);
    }
    return 0;
}

int main(int argc, char **argv) {
    t_prog = "t_compute";
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && !strcmp(argv[1], "paths")) return case_paths();
    if (argc >= 2 && !strcmp(argv[1], "more-streams")) return case_more_streams();
    if (argc >= 2 && !strcmp(argv[1], "ptds-capture")) return case_ptds_capture(argc >= 3 && !strcmp(argv[2], "legacy"));
    if (argc >= 4 && !strcmp(argv[1], "threads")) return case_threads(atoi(argv[2]), atoi(argv[3]));
    if (argc >= 2 && !strcmp(argv[1], "reset")) return case_reset();
    if (argc >= 2 && !strcmp(argv[1], "reset-current")) return case_reset_current();
    if (argc >= 2 && !strcmp(argv[1], "ownctx")) return case_ownctx();
    if (argc >= 2 && !strcmp(argv[1], "exit")) return case_exit();
    if (argc >= 2 && !strcmp(argv[1], "xthread")) return case_xthread();
    if (argc >= 2 && !strcmp(argv[1], "release")) return case_release();
    if (argc >= 2 && !strcmp(argv[1], "fork")) return case_fork();
    if (argc >= 2 && !strcmp(argv[1], "selfgreen")) return case_selfgreen();
    if (argc >= 2 && !strcmp(argv[1], "twodev")) return case_twodev();
    if (argc >= 2 && !strcmp(argv[1], "twodev-race")) return case_twodev_race();
    if (argc >= 2 && !strcmp(argv[1], "race")) return case_race(argc >= 3 && !strcmp(argv[2], "own"));
    fprintf(stderr, "usage: t_compute paths | threads N K | reset | ownctx | fork | selfgreen | twodev | race\n");
    return 2;
}
