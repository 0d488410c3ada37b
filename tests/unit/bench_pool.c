/* bench_pool.c — CPU micro-benchmark of the pool's table (shim/pool.c), no driver involved:
 * N shapes kept on one device, then take + keep of a random one, timed per pair. This is the
 * host-side cost of a pooled re-allocation only; what a GPU run costs is bench/alloc's.
 *
 *   build/bench/bench_pool [SHAPES...]     (default: 1 16 256 2048)   make bench-pool */
#include "shim/config.h"
#include "shim/pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int run(int nshapes) {
    enum { PAIRS = 200000 };
    int dom[2] = {0, 1};
    for (int i = 0; i < nshapes; i++) {
        ld_range_t r;
        memset(&r, 0, sizeof r);
        r.base = 0x100000000ull * (CUdeviceptr)(i + 1);
        r.nslices = 2;
        r.slice = (size_t)(i + 1) << 21;        /* one shape per slice size */
        r.reserved = 2 * r.slice;
        memcpy(r.domain_of, dom, sizeof dom);
        if (ld_pool_keep(&r, NULL) != 0) return -1;
    }
    unsigned x = 1;
    double t0 = now_ns();
    for (int k = 0; k < PAIRS; k++) {
        x = x * 1103515245u + 12345u;
        int i = (int)((x >> 8) % (unsigned)nshapes);
        ld_range_t out;
        if (ld_pool_take(0, 2, (size_t)(i + 1) << 21, 0, dom, &out) != 0 || ld_pool_keep(&out, NULL) != 0) return -1;
    }
    printf("%5d shapes: %6.0f ns per take + keep\n", nshapes, (now_ns() - t0) / PAIRS);
    ld_pool_drain(-1, NULL, NULL);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        puts("usage: bench_pool [SHAPES...]   time take + keep among SHAPES kept shapes (default 1 16 256 2048)");
        return 0;
    }
    ld_policy_init(&ld_cfg.policy);
    ld_cfg.policy.pool_cap = 1ull << 62;
    static const int dflt[] = {1, 16, 256, 2048};
    int n = argc > 1 ? argc - 1 : 4;
    for (int i = 0; i < n; i++) {
        int s = argc > 1 ? atoi(argv[i + 1]) : dflt[i];
        if (s < 1 || s > 1000000) {
            fprintf(stderr, "bench_pool: '%s' is not a shape count (1..1000000)\n", argv[i + 1]);
            return 2;
        }
        if (run(s) != 0) {
            fprintf(stderr, "bench_pool: the pool refused or missed a range\n");
            return 1;
        }
    }
    return 0;
}
