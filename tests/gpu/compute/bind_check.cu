// bind_check.cu — an unmodified CUDA runtime program for the compute-binding GPU suite
// (tests/gpu/compute/run.sh). Built three ways: dynamic cudart, static cudart, and static
// with --default-stream per-thread. It knows nothing about the shim: every launch path records
// the %smid of each block, and the program prints, per path, the SMs its blocks ran on, plus a
// hash of a deterministic computation. run.sh compares these with the published bound set
// (ldshim_get_topology, resolved at run time so the program also runs without the shim) and
// with the unbound run.
//
// Output, one "key=value" per line: <path>_sms=<count> <path>_set=<hex mask, SM 0 lowest>
// <path>_rc=<cudaError_t> for every path; checksum=<hex>; device_sms=<attribute>;
// topo_bound=<0|1> topo_bound_sms=<n> topo_set=<hex>.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ldshim_topology.h"

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "bind_check: %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)

// marker() and work(): the kernels bind_driver loads from a fatbin, compiled in here.
#include "tests/gpu/compute/marker_module.cu"

static const int kMaxSms = MAX_SMS;
static unsigned *g_seen;   // [kMaxSms + 1] block counts per SM (device)

static void report(const char *tag, cudaError_t rc) {
    printf("%s_rc=%d\n", tag, (int)rc);
    if (rc != cudaSuccess) { (void)cudaGetLastError(); return; }
    CHECK(cudaDeviceSynchronize());
    unsigned h[kMaxSms + 1];
    CHECK(cudaMemcpy(h, g_seen, sizeof h, cudaMemcpyDeviceToHost));
    CHECK(cudaMemset(g_seen, 0, sizeof h));
    CHECK(cudaDeviceSynchronize());
    uint64_t w[kMaxSms / 64] = {0};
    int n = 0;
    for (int s = 0; s < kMaxSms; s++)
        if (h[s]) { w[s / 64] |= 1ull << (s % 64); n++; }
    printf("%s_sms=%d\n%s_set=%016llx%016llx%016llx%016llx\n", tag, n, tag, (unsigned long long)w[3],
           (unsigned long long)w[2], (unsigned long long)w[1], (unsigned long long)w[0]);
}

static int g_grid;   // blocks per marker launch: several per SM of the whole device

static void *thread_main(void *arg) {
    cudaStream_t s;
    cudaError_t *rc = (cudaError_t *)arg;
    *rc = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    for (int i = 0; i < 20 && *rc == cudaSuccess; i++) {
        marker<<<g_grid / 4, 32, 0, s>>>(g_seen, 2000);
        marker<<<g_grid / 4, 32, 0, cudaStreamPerThread>>>(g_seen, 2000);
        *rc = cudaGetLastError();
    }
    if (*rc == cudaSuccess) *rc = cudaStreamSynchronize(s);
    if (*rc == cudaSuccess) *rc = cudaStreamSynchronize(cudaStreamPerThread);
    cudaStreamDestroy(s);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: bind_check   (prints the SMs every launch path ran on; see the file's header)\n");
        return 0;
    }
    int dev_sms = 0;
    CHECK(cudaSetDevice(0));
    CHECK(cudaDeviceGetAttribute(&dev_sms, cudaDevAttrMultiProcessorCount, 0));
    printf("device_sms=%d\n", dev_sms);
    g_grid = 8 * dev_sms;
    CHECK(cudaMalloc(&g_seen, (kMaxSms + 1) * sizeof(unsigned)));
    CHECK(cudaMemset(g_seen, 0, (kMaxSms + 1) * sizeof(unsigned)));
    CHECK(cudaDeviceSynchronize());

    // What the shim published, if it is there.
    typedef int (*get_topo_t)(int, ldshim_topology_t *, size_t);
    get_topo_t get_topo = (get_topo_t)dlsym(RTLD_DEFAULT, "ldshim_get_topology");
    ldshim_topology_t t;
    memset(&t, 0, sizeof t);
    if (get_topo) get_topo(0, &t, sizeof t);
    uint64_t tw[4] = {0};
    for (int s = 0; s < kMaxSms; s++)
        if (ldshim_sm_is_bound(&t, (uint32_t)s) && (t.magic != LDSHIM_TOPOLOGY_MAGIC || s < (int)t.num_sms))
            tw[s / 64] |= 1ull << (s % 64);
    printf("topo_bound=%d\ntopo_bound_sms=%u\ntopo_set=%016llx%016llx%016llx%016llx\n",
           t.magic == LDSHIM_TOPOLOGY_MAGIC && (t.flags & LDSHIM_TOPO_BOUND) ? 1 : 0, t.bound_sms,
           (unsigned long long)tw[3], (unsigned long long)tw[2], (unsigned long long)tw[1], (unsigned long long)tw[0]);

    // Launch paths.
    marker<<<g_grid, 32>>>(g_seen, 20000);
    report("null", cudaGetLastError());
    cudaStream_t bs, nbs, prio;
    CHECK(cudaStreamCreate(&bs));
    CHECK(cudaStreamCreateWithFlags(&nbs, cudaStreamNonBlocking));
    int lo, hi;
    CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    CHECK(cudaStreamCreateWithPriority(&prio, cudaStreamNonBlocking, hi));
    marker<<<g_grid, 32, 0, bs>>>(g_seen, 20000);
    report("stream", cudaGetLastError());
    marker<<<g_grid, 32, 0, nbs>>>(g_seen, 20000);
    report("nbstream", cudaGetLastError());
    marker<<<g_grid, 32, 0, prio>>>(g_seen, 20000);
    report("priority", cudaGetLastError());
    marker<<<g_grid, 32, 0, cudaStreamPerThread>>>(g_seen, 20000);
    report("per_thread", cudaGetLastError());

    // Events and waits across streams.
    cudaEvent_t ev;
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    marker<<<g_grid, 32, 0, bs>>>(g_seen, 20000);
    cudaError_t rc = cudaEventRecord(ev, bs);
    if (rc == cudaSuccess) rc = cudaStreamWaitEvent(nbs, ev, 0);
    if (rc == cudaSuccess) marker<<<g_grid, 32, 0, nbs>>>(g_seen, 20000), rc = cudaGetLastError();
    report("events", rc);

    // A CUDA graph captured on a created stream, replayed three times.
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    rc = cudaStreamBeginCapture(nbs, cudaStreamCaptureModeThreadLocal);
    if (rc == cudaSuccess) {
        marker<<<g_grid, 32, 0, nbs>>>(g_seen, 20000);
        rc = cudaStreamEndCapture(nbs, &graph);
    }
    if (rc == cudaSuccess) rc = cudaGraphInstantiate(&exec, graph, 0);
    for (int i = 0; i < 3 && rc == cudaSuccess; i++) rc = cudaGraphLaunch(exec, nbs);
    report("graph", rc);
    // The same on the per-thread default stream.
    rc = cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal);
    cudaGraph_t g2;
    cudaGraphExec_t e2;
    if (rc == cudaSuccess) {
        marker<<<g_grid, 32, 0, cudaStreamPerThread>>>(g_seen, 20000);
        rc = cudaStreamEndCapture(cudaStreamPerThread, &g2);
    }
    if (rc == cudaSuccess) rc = cudaGraphInstantiate(&e2, g2, 0);
    if (rc == cudaSuccess) rc = cudaGraphLaunch(e2, cudaStreamPerThread);
    report("graph_per_thread", rc);

    // A cooperative launch sized by the SM-count attribute (one block per SM); a cluster launch.
    void *cargs[] = { &g_seen, NULL };
    unsigned long long hold = 20000;
    cargs[1] = &hold;
    rc = cudaLaunchCooperativeKernel((void *)marker, dim3(dev_sms), dim3(32), cargs, 0, nbs);
    report("cooperative", rc);
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = 2;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(g_grid);
    cfg.blockDim = dim3(32);
    cfg.stream = nbs;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    rc = cudaLaunchKernelEx(&cfg, marker, g_seen, hold);
    report("cluster2", rc);

    // Threads: each launches on its own stream and on its per-thread default stream.
    pthread_t th[8];
    cudaError_t trc[8];
    for (int i = 0; i < 8; i++) pthread_create(&th[i], NULL, thread_main, &trc[i]);
    rc = cudaSuccess;
    for (int i = 0; i < 8; i++) { pthread_join(th[i], NULL); if (trc[i] != cudaSuccess) rc = trc[i]; }
    report("threads", rc);

    // A deterministic computation whose result must not depend on the binding.
    const int n = 1 << 22;
    float *a, *b;
    CHECK(cudaMalloc(&a, n * sizeof(float)));
    CHECK(cudaMalloc(&b, n * sizeof(float)));
    float *h = (float *)malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) h[i] = (float)((i * 2654435761u) % 1000) / 7.0f;
    CHECK(cudaMemcpy(a, h, n * sizeof(float), cudaMemcpyHostToDevice));
    work<<<dev_sms * 4, 256>>>(a, b, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(h, b, n * sizeof(float), cudaMemcpyDeviceToHost));
    uint64_t hash = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)h;
    for (size_t i = 0; i < n * sizeof(float); i++) { hash ^= p[i]; hash *= 1099511628211ull; }
    printf("checksum=%016llx\n", (unsigned long long)hash);

    free(h);
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaEventDestroy(ev));
    CHECK(cudaStreamDestroy(bs));
    CHECK(cudaStreamDestroy(nbs));
    CHECK(cudaStreamDestroy(prio));
    CHECK(cudaFree(g_seen));
    return 0;
}
