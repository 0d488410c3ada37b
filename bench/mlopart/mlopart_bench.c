/* mlopart_bench.c — what one MLOPart backend request costs, next to making the same memory
 * in-process. Driver API only (the project's driver table), so it also runs on the fake
 * driver (a CPU smoke run) — only GPU numbers mean anything.
 *
 * Rows per size (µs per cycle; median, p10, p90 of --reps cycles after 3 warm-up cycles):
 *   local create+release          cuMemCreate + cuMemRelease in this process
 *   local create+export+release   same with a POSIX-fd handle exported and closed
 *   local +import                 ... and imported back (the full path minus the helper)
 *   helper alloc (fd only)        ALLOC round trip to the helper; fd closed unused
 *   helper alloc+import+release   what the backend's create() plus the later release cost
 * and once: helper ping (the bare socket round trip).
 *
 * On a one-die GPU run it with the helper's test-single mode (the default here).
 */
#include "shim/driver.h"
#include "shim/log.h"
#include "shim/mlopart_prop.h"
#include "shim/mlopart_proto.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
enum { kWarmup = 3, kMaxReps = 10000, kMaxSizes = 16 };

static const ld_driver_t *drv;
static CUdevice g_dev;
static ld_mlo_helper_t g_h = LD_MLO_HELPER_INIT;

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct { double p50, p10, p90; int ok; } stat_t;

typedef int (*cycle_fn)(size_t bytes);

static stat_t measure(cycle_fn f, size_t bytes, int reps) {
    static double t[kMaxReps];
    stat_t s = { 0, 0, 0, 0 };
    for (int i = 0; i < kWarmup; i++)
        if (f(bytes)) return s;
    for (int i = 0; i < reps; i++) {
        double t0 = now_us();
        if (f(bytes)) return s;
        t[i] = now_us() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_d);
    s.p50 = t[reps / 2];
    s.p10 = t[reps / 10];
    s.p90 = t[(reps * 9) / 10 < reps ? (reps * 9) / 10 : reps - 1];
    s.ok = 1;
    return s;
}

/* What the helper creates (exportable), or the same memory as a plain in-process
 * allocation would have it. */
static void prop_for(CUmemAllocationProp *p, int exportable) {
    ld_mlo_alloc_prop(p, g_dev);
    if (!exportable) p->requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
}

static int fail(const char *what, CUresult r) {
    fprintf(stderr, "mlopart_bench: %s: %s\n", what, ld_cu_errname(r));
    return 1;
}

static int local_plain(size_t bytes) {
    CUmemAllocationProp p;
    prop_for(&p, 0);
    CUmemGenericAllocationHandle h;
    CUresult r = drv->pfn_cuMemCreate(&h, bytes, &p, 0);
    if (r) return fail("cuMemCreate", r);
    return drv->pfn_cuMemRelease(h) ? 1 : 0;
}

static int local_export_common(size_t bytes, int import) {
    CUmemAllocationProp p;
    prop_for(&p, 1);
    CUmemGenericAllocationHandle h, h2;
    CUresult r = drv->pfn_cuMemCreate(&h, bytes, &p, 0);
    if (r) return fail("cuMemCreate(POSIX fd)", r);
    int fd = -1;
    r = drv->pfn_cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r) { drv->pfn_cuMemRelease(h); return fail("cuMemExportToShareableHandle", r); }
    if (import) {
        r = drv->pfn_cuMemImportFromShareableHandle(&h2, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (r) { close(fd); drv->pfn_cuMemRelease(h); return fail("cuMemImportFromShareableHandle", r); }
        drv->pfn_cuMemRelease(h2);
    }
    close(fd);
    drv->pfn_cuMemRelease(h);
    return 0;
}
static int local_export(size_t bytes) { return local_export_common(bytes, 0); }
static int local_import(size_t bytes) { return local_export_common(bytes, 1); }

static int helper_common(size_t bytes, int import) {
    ld_mlo_rep_t rep;
    int fd = -1;
    int io = ld_mlo_helper_call(&g_h, LD_MLO_OP_ALLOC, 0, bytes, 10000, &rep, &fd);
    if (io) { fprintf(stderr, "mlopart_bench: helper: %s\n", ld_mlo_io_str(io)); return 1; }
    if (rep.status) { fprintf(stderr, "mlopart_bench: helper: %s\n", rep.msg); return 1; }
    if (import) {
        CUmemGenericAllocationHandle h;
        CUresult r = drv->pfn_cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        close(fd);
        if (r) return fail("cuMemImportFromShareableHandle(helper fd)", r);
        return drv->pfn_cuMemRelease(h) ? 1 : 0;
    }
    close(fd);
    return 0;
}
static int helper_alloc(size_t bytes) { return helper_common(bytes, 0); }
static int helper_full(size_t bytes) { return helper_common(bytes, 1); }
static int helper_ping(size_t bytes) {
    (void)bytes;
    ld_mlo_rep_t rep;
    return ld_mlo_helper_call(&g_h, LD_MLO_OP_PING, 0, 0, 10000, &rep, NULL) ? 1 : 0;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: mlopart_bench [--sizes MIB,MIB,...] [--reps N] [--device D] [--no-single]\n"
            "  Per-request cost of the MLOPart helper vs in-process cuMemCreate (+export/import).\n"
            "  --sizes      slice sizes in MiB, multiples of 2 (default 2,32,512)\n"
            "  --reps       timed cycles per row (default 30; median, p10, p90 reported)\n"
            "  --no-single  do not set LDSHIM_MLOPART_TEST_SINGLE=1 (a GPU MLOPart really splits)\n"
            "Needs LDSHIM_MLOPART_HELPER. Writes the table to stdout and, when OUT is set, to\n"
            "$OUT/mlopart_bench.txt and $OUT/mlopart_bench.csv.\n");
}

int main(int argc, char **argv) {
    size_t sizes[kMaxSizes] = { 2, 32, 512 };
    int nsizes = 3, reps = 30, devord = 0, single = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        if (!strcmp(argv[i], "--no-single")) { single = 0; continue; }
        if (i + 1 >= argc) { usage(stderr); return 2; }
        if (!strcmp(argv[i], "--reps")) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device")) devord = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sizes")) {
            nsizes = 0;
            char *s = argv[++i], *save = NULL;
            for (char *t = strtok_r(s, ",", &save); t && nsizes < kMaxSizes; t = strtok_r(NULL, ",", &save)) {
                long v = atol(t);
                if (v <= 0 || v % 2) { fprintf(stderr, "mlopart_bench: bad size '%s' (MiB, even)\n", t); return 2; }
                sizes[nsizes++] = (size_t)v;
            }
        } else { fprintf(stderr, "mlopart_bench: unknown option '%s'\n", argv[i]); usage(stderr); return 2; }
    }
    if (reps < 5 || reps > kMaxReps || nsizes == 0) { usage(stderr); return 2; }
    if (single) setenv("LDSHIM_MLOPART_TEST_SINGLE", "1", 1);
    ld_log_init();
    if (!(drv = ld_driver())) { fprintf(stderr, "mlopart_bench: cannot load libcuda.so.1\n"); return 1; }
    CUcontext ctx;
    CUuuid u;
    CUresult r;
    if ((r = drv->pfn_cuInit(0)) || (r = drv->pfn_cuDeviceGet(&g_dev, devord)) ||
        (r = drv->pfn_cuDevicePrimaryCtxRetain(&ctx, g_dev)) || (r = drv->pfn_cuCtxSetCurrent(ctx)) ||
        (r = drv->pfn_cuDeviceGetUuid_v2(&u, g_dev)))
        return fail("device setup", r);
    if (!drv->pfn_cuMemCreate || !drv->pfn_cuMemExportToShareableHandle || !drv->pfn_cuMemImportFromShareableHandle) {
        fprintf(stderr, "mlopart_bench: driver lacks VMM export/import\n");
        return 1;
    }
    const unsigned char *b = (const unsigned char *)u.bytes;
    char uuid[64], path[4096], why[256];
    snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    int ndev = 0;
    double t0 = now_us();
    if (ld_mlo_helper_path(path, sizeof path, why, sizeof why) ||
        ld_mlo_helper_spawn(&g_h, path, uuid, 2, 60000, &ndev, why, sizeof why)) {
        fprintf(stderr, "mlopart_bench: helper: %s\n", why);
        return 1;
    }
    double start_ms = (now_us() - t0) / 1e3;

    char table[8192];
    size_t tl = 0;
    char csv[8192];
    size_t cl = 0;
#define T(...) (tl += (size_t)snprintf(table + tl, sizeof table - tl, __VA_ARGS__))
#define C(...) (cl += (size_t)snprintf(csv + cl, sizeof csv - cl, __VA_ARGS__))
    T("MLOPart helper request cost, %s, %d MPS device(s)%s, %d reps (+%d warm-up), us per cycle\n",
      uuid, ndev, single ? " (test-single)" : "", reps, kWarmup);
    T("helper start (spawn + private MPS daemon + server + client init): %.1f ms\n", start_ms);
    stat_t ping = measure(helper_ping, 0, reps);
    T("helper ping round trip: p50 %.1f  p10 %.1f  p90 %.1f\n", ping.p50, ping.p10, ping.p90);
    T("%-8s %-30s %10s %10s %10s\n", "size", "cycle", "p50", "p10", "p90");
    C("size_mib,cycle,p50_us,p10_us,p90_us\n");
    C("0,helper_ping,%.1f,%.1f,%.1f\n", ping.p50, ping.p10, ping.p90);
    static const struct { const char *name; cycle_fn f; } rows[] = {
        { "local create+release", local_plain },
        { "local create+export+release", local_export },
        { "local +import", local_import },
        { "helper alloc (fd only)", helper_alloc },
        { "helper alloc+import+release", helper_full },
    };
    int rc = 0;
    for (int s = 0; s < nsizes; s++) {
        for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
            stat_t st = measure(rows[k].f, sizes[s] * MiB, reps);
            if (!st.ok) { T("%-8zu %-30s %10s\n", sizes[s], rows[k].name, "FAILED"); rc = 1; continue; }
            T("%-8zu %-30s %10.1f %10.1f %10.1f\n", sizes[s], rows[k].name, st.p50, st.p10, st.p90);
            C("%zu,%s,%.1f,%.1f,%.1f\n", sizes[s], rows[k].name, st.p50, st.p10, st.p90);
        }
    }
    ld_mlo_helper_quit(&g_h, 30000);
    drv->pfn_cuDevicePrimaryCtxRelease_v2(g_dev);
    fputs(table, stdout);
    const char *out = getenv("OUT");
    if (out && *out) {
        char p[4096];
        snprintf(p, sizeof p, "%s/mlopart_bench.txt", out);
        FILE *f = fopen(p, "w");
        if (f) { fputs(table, f); fclose(f); }
        snprintf(p, sizeof p, "%s/mlopart_bench.csv", out);
        f = fopen(p, "w");
        if (f) { fputs(csv, f); fclose(f); }
    }
    return rc;
}
