/* leak_cycle.cu — leak check for the shim's tagged path and its pool (GPU suite, case "leak").
 *
 * Runs N cycles of cudaMalloc + cudaMemset + cudaFree over sizes that
 * tests/gpu/shim/leak_pool.policy / leak_nopool.policy tag, then checks with cudaMemGetInfo
 * that device memory is back to its baseline, net of exactly what the shim's pool says it
 * keeps (ldshim_get_stats().pool_bytes). With the pool on, ldshim_pool_trim() (what the shim
 * runs at exit) must then release exactly that and bring memory back to the baseline.
 * With --oom-trim it instead asks for an untagged buffer that only fits when the pool gives
 * its memory back (free + pool - margin): the pool must never cost the application memory.
 * After that buffer is freed, memory must be back at the baseline net of the pool.
 *
 * Prints FAIL lines on stderr; exit 0 pass, 1 a check failed, 2 usage/CUDA error.
 */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim/ldshim.h"

#define MiB ((uint64_t)1024 * 1024)
#define GiB ((uint64_t)1024 * MiB)

// NOTES: free memory is reported in 2 MiB pages; a leaked tagged range is >= 32 MiB.
static const uint64_t kDefaultTolerance = 6 * MiB;
// Head-room left when asking for "all free memory": the driver needs a little for itself.
// With a smaller pool the margin is half of what it holds, so the request still needs a trim.
static const uint64_t kOomMargin = 512 * MiB;
// The two sizes the loop alternates; leak_*.policy tags exactly these. Overridable at build
// time only for CPU experiments against the fake driver (tests/fake), whose memory is host RAM.
#ifndef LEAK_SIZE_SMALL
#define LEAK_SIZE_SMALL (64 * MiB)
#endif
#ifndef LEAK_SIZE_LARGE
#define LEAK_SIZE_LARGE (1 * GiB)
#endif

static int g_failures;

__attribute__((format(printf, 1, 2))) static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("leak_cycle: FAIL: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    g_failures++;
}

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "leak_cycle: CUDA error %s (%s) at %s:%d: %s\n", cudaGetErrorName(e_), \
            cudaGetErrorString(e_), __FILE__, __LINE__, #call); exit(2); } } while (0)

typedef int (*pinfo_fn)(uint64_t, ldshim_ptr_info_t *);
typedef void (*stats_fn)(ldshim_stats_t *);
typedef uint64_t (*trim_fn)(void);

static void usage(FILE *f) {
    fprintf(f,
        "usage: leak_cycle [--cycles N] [--expect none|pool|nopool] [--pool-cap-mib N]\n"
        "                  [--oom-trim] [--tolerance-mib N] [--help]\n"
        "Alternates cudaMalloc/cudaMemset/cudaFree of 64 MiB and 1 GiB (tagged by\n"
        "tests/gpu/shim/leak_*.policy) N times (default 200) and checks that cudaMemGetInfo is\n"
        "back to the baseline, net of the shim pool's cached bytes.\n"
        "  --expect none    no shim (or stock): nothing tagged, no pool\n"
        "  --expect pool    shim with the pool on: every buffer tagged, pool hits >= N - 2\n"
        "  --expect nopool  shim with pool = 0: every buffer tagged, no pool hits, nothing cached\n"
        "  --pool-cap-mib N the policy's pool cap (checked against pool_bytes)\n"
        "  --oom-trim       then allocate free + pool - 512 MiB untagged: needs the pool trimmed\n"
        "Exit: 0 pass, 1 a check failed (FAIL lines on stderr), 2 usage/CUDA error.\n");
}

static uint64_t free_mem(void) {
    size_t f = 0, t = 0;
    CK(cudaMemGetInfo(&f, &t));
    return f;
}

static void check_back(const char *when, uint64_t baseline, uint64_t now, uint64_t held, uint64_t tol) {
    // Expected: now == baseline - held (held = what the pool says it caches).
    int64_t diff = (int64_t)baseline - (int64_t)held - (int64_t)now;
    if (diff > (int64_t)tol || -diff > (int64_t)tol)
        fail("%s: free %" PRIu64 " MiB, baseline %" PRIu64 " MiB, pool holds %" PRIu64 " MiB: %+" PRId64
             " KiB unaccounted (tolerance %" PRIu64 " MiB)", when, now / MiB, baseline / MiB, held / MiB,
             diff / 1024, tol / MiB);
    fprintf(stderr, "leak_cycle: %s: free %" PRIu64 " MiB, baseline %" PRIu64 " MiB, pool %" PRIu64
            " MiB, unaccounted %+" PRId64 " KiB\n", when, now / MiB, baseline / MiB, held / MiB, diff / 1024);
}

int main(int argc, char **argv) {
    int cycles = 200, oom_trim = 0;
    const char *expect = "none";
    uint64_t tol = kDefaultTolerance, cap = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--cycles") && v) { cycles = atoi(v); i++; }
        else if (!strcmp(a, "--expect") && v) { expect = v; i++; }
        else if (!strcmp(a, "--pool-cap-mib") && v) { cap = strtoull(v, NULL, 0) * MiB; i++; }
        else if (!strcmp(a, "--tolerance-mib") && v) { tol = strtoull(v, NULL, 0) * MiB; i++; }
        else if (!strcmp(a, "--oom-trim")) oom_trim = 1;
        else { fprintf(stderr, "leak_cycle: unknown or incomplete argument '%s' (try --help)\n", a); return 2; }
    }
    int want_shim = !strcmp(expect, "pool") || !strcmp(expect, "nopool");
    int want_pool = !strcmp(expect, "pool");
    if (!want_shim && strcmp(expect, "none")) {
        fprintf(stderr, "leak_cycle: --expect takes none, pool or nopool, not '%s'\n", expect);
        return 2;
    }
    if (cycles < 2 || cycles > 100000) { fprintf(stderr, "leak_cycle: --cycles must be 2..100000\n"); return 2; }
    if (want_pool && cap == 0) { fprintf(stderr, "leak_cycle: --expect pool needs --pool-cap-mib\n"); return 2; }

    pinfo_fn pinfo = (pinfo_fn)dlsym(RTLD_DEFAULT, "ldshim_pointer_info");
    stats_fn stats = (stats_fn)dlsym(RTLD_DEFAULT, "ldshim_get_stats");
    if (want_shim && (!pinfo || !stats)) {
        fprintf(stderr, "leak_cycle: --expect %s but the shim's API is not loaded (LD_PRELOAD?)\n", expect);
        return 2;
    }

    cudaError_t e0 = cudaSetDevice(0);
    if (e0 == cudaSuccess) e0 = cudaFree(0);
    if (e0 != cudaSuccess) {
        fprintf(stderr, "leak_cycle: no usable CUDA device: %s (%s)\n", cudaGetErrorName(e0), cudaGetErrorString(e0));
        return 2;
    }
    {   // warm-up: memset path and a small allocation, before the baseline
        char *w = NULL;
        CK(cudaMalloc((void **)&w, 2 * MiB));
        CK(cudaMemset(w, 1, 2 * MiB));
        CK(cudaDeviceSynchronize());
        CK(cudaFree(w));
    }
    const uint64_t sizes[2] = {LEAK_SIZE_SMALL, LEAK_SIZE_LARGE};
    ldshim_stats_t s0, s1;
    memset(&s0, 0, sizeof s0);
    memset(&s1, 0, sizeof s1);
    if (stats) stats(&s0);
    const uint64_t baseline = free_mem();

    int tagged_seen = 0;
    for (int i = 0; i < cycles; i++) {
        uint64_t sz = sizes[i & 1];
        char *p = NULL;
        CK(cudaMalloc((void **)&p, sz));
        CK(cudaMemset(p, i & 0xff, sz));
        unsigned char last = 0;
        CK(cudaMemcpy(&last, p + sz - 1, 1, cudaMemcpyDeviceToHost));
        if (last != (unsigned char)(i & 0xff)) fail("cycle %d: last byte %u, expected %u", i, last, i & 0xff);
        ldshim_ptr_info_t info;
        if (pinfo && pinfo((uint64_t)(uintptr_t)p, &info) == 0) tagged_seen++;
        CK(cudaFree(p));
    }
    CK(cudaDeviceSynchronize());
    if (stats) stats(&s1);
    const uint64_t after = free_mem();

    if (want_shim && tagged_seen != cycles)
        fail("%d of %d buffers were the shim's, expected all (policy tags 64MiB and 1GiB)", tagged_seen, cycles);
    if (!want_shim && tagged_seen != 0)
        fail("%d of %d buffers were the shim's, expected none", tagged_seen, cycles);
    if (stats) {
        uint64_t allocs = s1.tagged_allocs - s0.tagged_allocs, frees = s1.tagged_frees - s0.tagged_frees;
        uint64_t hits = s1.pool_hits - s0.pool_hits;
        fprintf(stderr, "leak_cycle: stats: tagged allocs %" PRIu64 " frees %" PRIu64 " live %" PRIu64
                " | pool hits %" PRIu64 " misses %" PRIu64 " trims %" PRIu64 " bytes %" PRIu64 " MiB | fallbacks %" PRIu64 "\n",
                allocs, frees, s1.live_ranges, hits, s1.pool_misses - s0.pool_misses,
                s1.pool_trims - s0.pool_trims, s1.pool_bytes / MiB, s1.fallbacks - s0.fallbacks);
        if (want_shim && (allocs != (uint64_t)cycles || frees != (uint64_t)cycles))
            fail("stats: %" PRIu64 " tagged allocs / %" PRIu64 " frees, expected %d each", allocs, frees, cycles);
        if (s1.live_ranges != 0 || s1.live_bytes != 0)
            fail("stats: %" PRIu64 " live ranges (%" PRIu64 " B) after freeing everything", s1.live_ranges, s1.live_bytes);
        if (s1.fallbacks != s0.fallbacks)
            fail("stats: %" PRIu64 " fallbacks during the loop, expected 0", s1.fallbacks - s0.fallbacks);
        if (want_pool) {
            // The first allocation of each of the 2 sizes misses; every later one must hit.
            if (hits + 2 < (uint64_t)cycles)
                fail("pool: %" PRIu64 " hits in %d cycles of 2 sizes, expected >= %d", hits, cycles, cycles - 2);
            if (s1.pool_bytes == 0 || s1.pool_bytes > cap)
                fail("pool: caches %" PRIu64 " MiB, expected > 0 and <= cap %" PRIu64 " MiB", s1.pool_bytes / MiB, cap / MiB);
        } else if (hits != 0 || s1.pool_bytes != 0) {
            fail("pool: %" PRIu64 " hits, %" PRIu64 " MiB cached, expected none (pool = 0 or no tagging)",
                 hits, s1.pool_bytes / MiB);
        }
    }
    check_back("after the loop", baseline, after, s1.pool_bytes, tol);

    // What the shim does at exit (ldshim_pool_trim, exported beside shim/ldshim.h's API): after
    // it the pool holds nothing and memory is back at the baseline.
    trim_fn trim = (trim_fn)dlsym(RTLD_DEFAULT, "ldshim_pool_trim");
    if (want_pool && !oom_trim) {
        if (!trim) {
            fail("ldshim_pool_trim is not exported: cannot check the trimmed pool returns every byte");
        } else {
            uint64_t released = trim();
            ldshim_stats_t s2;
            memset(&s2, 0, sizeof s2);
            stats(&s2);
            if (released != s1.pool_bytes || s2.pool_bytes != 0)
                fail("ldshim_pool_trim released %" PRIu64 " MiB of %" PRIu64 " MiB cached; %" PRIu64 " MiB left",
                     released / MiB, s1.pool_bytes / MiB, s2.pool_bytes / MiB);
            check_back("after ldshim_pool_trim", baseline, free_mem(), s2.pool_bytes, tol);
        }
    }

    if (oom_trim) {
        // Without the pool's memory this request does not fit: the shim must trim and retry.
        uint64_t held = s1.pool_bytes;
        uint64_t margin = held == 0 || held >= 2 * kOomMargin ? kOomMargin : held / 2;
        if (after + held <= margin + 64 * MiB) {
            fprintf(stderr, "leak_cycle: --oom-trim needs more than %" PRIu64 " MiB free (free %" PRIu64
                    " MiB, pool %" PRIu64 " MiB)\n", (margin + 64 * MiB) / MiB, after / MiB, held / MiB);
            return 2;
        }
        uint64_t want = after + held - margin;
        if (want_pool && held == 0) fail("oom-trim: the pool holds nothing: no meaningful test");
        char *big = NULL;
        cudaError_t e = cudaMalloc((void **)&big, want);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            fail("oom-trim: cudaMalloc(%" PRIu64 " MiB) = free %" PRIu64 " + pool %" PRIu64 " - %" PRIu64
                 " MiB failed with %s: the pool did not give its memory back", want / MiB, after / MiB,
                 held / MiB, margin / MiB, cudaGetErrorName(e));
        } else {
            CK(cudaMemset(big, 0x77, want));
            CK(cudaDeviceSynchronize());
            CK(cudaFree(big));
        }
        ldshim_stats_t s2;
        memset(&s2, 0, sizeof s2);
        if (stats) stats(&s2);
        if (stats && want_pool && s2.pool_trims == s1.pool_trims)
            fail("oom-trim: pool trims %" PRIu64 " -> %" PRIu64 " (cached %" PRIu64 " MiB), expected a trim",
                 s1.pool_trims, s2.pool_trims, s2.pool_bytes / MiB);
        check_back("after the trim", baseline, free_mem(), s2.pool_bytes, tol);
    }
    fprintf(stderr, "leak_cycle: %d check(s) failed\n", g_failures);
    return g_failures ? 1 : 0;
}
