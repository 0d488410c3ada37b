/* bench_probe — what the topology probe costs: wall time cold (empty cache) and cached,
 * and the device memory it leaves behind (cuMemGetInfo before/after).
 *
 *   bench_probe [--runs N] [--device N] [--mode auto|clustered|anchored|even] [--check]
 *
 * Links the probe statically (like ldshim-probe), so it measures ld_probe_device itself;
 * bench/probe/ctx_time measures what the preloaded shim adds to context creation.
 * --check: exit 1 unless every probe returned a map and no device memory is held after.
 * Exit 3: no GPU or driver.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shim/driver.h"
#include "shim/log.h"
#include "shim/probe.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n ? ((n & 1) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])) : 0;
}

int main(int argc, char **argv) {
    int runs = 5, device = 0, check = 0;
    ld_probe_mode_t mode = LD_PROBE_AUTO;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--check")) check = 1;
        else if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
            const char *m = argv[++i];
            mode = !strcmp(m, "clustered") ? LD_PROBE_CLUSTERED : !strcmp(m, "anchored") ? LD_PROBE_ANCHORED
                 : !strcmp(m, "even") ? LD_PROBE_EVEN : LD_PROBE_AUTO;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: bench_probe [--runs N] [--device N] [--mode auto|clustered|anchored|even] [--check]\n");
            return 0;
        } else { fprintf(stderr, "bench_probe: unknown argument %s (try --help)\n", argv[i]); return 2; }
    }
    if (runs < 1 || runs > 100) runs = 5;
    ld_log_init();
    const ld_driver_t *d = ld_driver();
    CUdevice dev;
    CUcontext ctx;
    if (!d || d->pfn_cuInit(0) != CUDA_SUCCESS || d->pfn_cuDeviceGet(&dev, device) != CUDA_SUCCESS) {
        fprintf(stderr, "bench_probe: no usable GPU %d\n", device);
        return 3;
    }
    double t = now_ms();
    if (d->pfn_cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || d->pfn_cuCtxPushCurrent_v2(ctx) != CUDA_SUCCESS) {
        fprintf(stderr, "bench_probe: cannot create a context on device %d\n", device);
        return 3;
    }
    d->pfn_cuCtxSynchronize();
    double ctx_ms = now_ms() - t;

    char base[] = "/tmp/ldshim-bench-probe-XXXXXX", dir[256];
    if (!mkdtemp(base)) { perror("mkdtemp"); return 3; }
    ld_probe_opts_t o;
    memset(&o, 0, sizeof o);
    o.mode = mode;
    o.map = LD_MAP_BALANCED;
    o.ndomains = 2;
    o.use_cache = 1;
    o.cache_dir = dir;
    static ld_probe_result_t r;
    double cold[100], cached[100];
    size_t free0, free1, free2, total;
    int failed = 0;
    d->pfn_cuMemGetInfo_v2(&free0, &total);
    for (int i = 0; i < runs; i++) {
        snprintf(dir, sizeof dir, "%s/cold%d", base, i);          /* empty cache every time */
        t = now_ms();
        failed |= ld_probe_device(d, dev, &o, &r) != 0;
        cold[i] = now_ms() - t;
        printf("cold %d: %.2f ms  mode %s valid %d attempts %d  %s\n", i + 1, cold[i],
               r.mode_used == LD_PROBE_CLUSTERED ? "clustered" : r.mode_used == LD_PROBE_ANCHORED ? "anchored" : "even",
               r.valid, r.attempts, r.verdict);
    }
    d->pfn_cuCtxSynchronize();
    d->pfn_cuMemGetInfo_v2(&free1, &total);
    double first_cold = cold[0];
    int cached_n = 20, cache_hits = 0;
    for (int i = 0; i < cached_n; i++) {                          /* the last cold run's cache */
        t = now_ms();
        failed |= ld_probe_device(d, dev, &o, &r) != 0;
        cached[i] = now_ms() - t;
        cache_hits += r.from_cache;
    }
    d->pfn_cuCtxSynchronize();
    d->pfn_cuMemGetInfo_v2(&free2, &total);
    long long held_cold = (long long)free0 - (long long)free1, held_cached = (long long)free0 - (long long)free2;
    double cold_med = median(cold, runs), cached_med = median(cached, cached_n);
    printf("context creation: %.1f ms (not part of the probe)\n", ctx_ms);
    printf("probe cold (empty cache): first %.2f ms, median of %d %.2f ms (target < 50 ms)\n", first_cold, runs, cold_med);
    printf("probe cached: median of %d %.3f ms, max %.3f ms, %d/%d from cache (target < 2 ms)\n", cached_n, cached_med,
           cached[cached_n - 1], cache_hits, cached_n);
    printf("device memory held after the probe: %lld bytes after cold runs, %lld after cached runs (target 0)\n",
           held_cold, held_cached);
    printf("{\"ctx_ms\":%.2f,\"cold_first_ms\":%.3f,\"cold_median_ms\":%.3f,\"cached_median_ms\":%.4f,"
           "\"held_bytes_cold\":%lld,\"held_bytes_cached\":%lld,\"cache_hits\":%d,\"runs\":%d}\n",
           ctx_ms, first_cold, cold_med, cached_med, held_cold, held_cached, cache_hits, runs);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    if (system(cmd) != 0) fprintf(stderr, "bench_probe: could not remove %s\n", base);
    CUcontext popped;
    d->pfn_cuCtxPopCurrent_v2(&popped);
    d->pfn_cuDevicePrimaryCtxRelease_v2(dev);
    if (cache_hits != cached_n)
        printf("note: %d/%d cached runs came from the cache (a probe that fell back is not cached)\n", cache_hits,
               cached_n);
    if (check && (failed || held_cold != 0 || held_cached != 0)) {
        printf("CHECK FAILED: %s%s\n", failed ? "a probe returned -1; " : "",
               held_cold || held_cached ? "device memory held after the probe" : "");
        return 1;
    }
    return 0;
}
