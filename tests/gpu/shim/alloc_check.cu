/* alloc_check.cu — a real CUDA program that the GPU suite runs with and without libldshim.
 *
 * It allocates buffers of sizes that tests/gpu/shim/alloc.policy tags (and some it does not),
 * fills them from a seeded RNG, runs kernels and copies that cross slice seams, and prints one
 * checksum line per buffer on stdout. stdout depends only on the seed: the suite compares it
 * byte for byte between the run without the shim and the runs under every state, which also
 * proves the shim writes nothing on stdout.
 *
 * Everything else (pointer ownership, address ranges, IPC, memory baseline) is checked here and
 * reported on stderr as "alloc_check: FAIL: ..." lines; the exit status is 1 when any check
 * failed, 2 on a usage or CUDA error, 0 otherwise. Built twice (-cudart shared / static) and
 * linked with -lcuda so cuMemAlloc_v2 and cuMemGetAddressRange_v2 go through the dynamic linker.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim/ldshim.h"

#define KiB ((uint64_t)1024)
#define MiB ((uint64_t)1024 * 1024)
#define GiB ((uint64_t)1024 * MiB)

// NOTES: the driver reports free memory in 2 MiB pages and may grow an internal heap by a
// page or so after the warm-up; every leak this program looks for is a whole slice (>= 20 MiB).
static const uint64_t kDefaultTolerance = 6 * MiB;
static const uint64_t kGranularity = 2 * MiB;   // VMM granularity on H100/H200 (FACTS.md)
static const int kThreads = 256;

typedef struct {
    const char *name;
    uint64_t size;
    int driver_api;      // 1: cuMemAlloc_v2, 0: cudaMalloc
    const char *rule;    // policy rule expected to tag it, NULL when untagged
    char *p;
} buffer_t;

// Sizes and rules must match tests/gpu/shim/alloc.policy.
static buffer_t g_bufs[] = {
    {"t64",    64 * MiB,        0, "t64",   NULL},
    {"t96p1",  96 * MiB + 1,    0, "t96p1", NULL},
    {"t1g",    1 * GiB,         0, "t1g",   NULL},
    {"d40",    40 * MiB,        1, "drv40", NULL},   // tagged by an api = driver rule
    {"u40",    40 * MiB,        0, NULL,    NULL},   // same size through the runtime: untagged
    {"u48p7",  48 * MiB + 7,    0, NULL,    NULL},
    {"u1m",    1 * MiB,         0, NULL,    NULL},
    {"u64p4k", 64 * MiB + 4096, 0, NULL,    NULL},
};
enum { T64, T96P1, T1G, D40, U40, U48P7, U1M, U64P4K, NBUF };

static int g_failures;

__attribute__((format(printf, 1, 2))) static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("alloc_check: FAIL: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    g_failures++;
}

__attribute__((format(printf, 1, 2))) static void note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("alloc_check: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "alloc_check: CUDA error %s (%s) at %s:%d: %s\n", cudaGetErrorName(e_), \
            cudaGetErrorString(e_), __FILE__, __LINE__, #call); exit(2); } } while (0)
#define CKD(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { const char *n_ = "?"; \
    cuGetErrorName(r_, &n_); fprintf(stderr, "alloc_check: driver error %s at %s:%d: %s\n", \
            n_, __FILE__, __LINE__, #call); exit(2); } } while (0)

__host__ __device__ static inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

__device__ static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// Word i of buffer `id` is splitmix64(seed ^ id << 56 ^ i); the odd tail bytes too.
__global__ void fill_kernel(uint8_t *p, uint64_t size, uint64_t seed, uint64_t id) {
    uint64_t words = size / 8, stride = (uint64_t)gridDim.x * blockDim.x;
    uint64_t key = seed ^ (id << 56);
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < words; i += stride)
        ((uint64_t *)p)[i] = splitmix64(key ^ i);
    if (blockIdx.x == 0 && threadIdx.x == 0)
        for (uint64_t b = words * 8; b < size; b++) p[b] = (uint8_t)splitmix64(key ^ (b << 3));
}

// out[0] += sum of words (+ tail bytes), out[1] ^= xor of words (+ tail bytes). Integer
// addition and xor are associative, so the result does not depend on scheduling.
__global__ void reduce_kernel(const uint8_t *p, uint64_t size, unsigned long long *out) {
    uint64_t words = size / 8, stride = (uint64_t)gridDim.x * blockDim.x;
    unsigned long long s = 0, x = 0;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < words; i += stride) {
        uint64_t w = ((const uint64_t *)p)[i];
        s += w;
        x ^= rotl64(w, (int)(i & 63) | 1);
    }
    if (blockIdx.x == 0 && threadIdx.x == 0)
        for (uint64_t b = words * 8; b < size; b++) { s += p[b]; x ^= (uint64_t)p[b] << (b & 56); }
    for (int o = 16; o > 0; o >>= 1) {
        s += __shfl_xor_sync(0xffffffffu, s, o);
        x ^= __shfl_xor_sync(0xffffffffu, x, o);
    }
    if ((threadIdx.x & 31) == 0) { atomicAdd(&out[0], s); atomicXor(&out[1], x); }
}

// dst[i] = dst[i] * K + rotl(src[i], 13) ^ i over `words` words.
__global__ void mix_kernel(uint64_t *dst, const uint64_t *src, uint64_t words) {
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < words; i += stride)
        dst[i] = (dst[i] * 0x2545F4914F6CDD1Dull + rotl64(src[i], 13)) ^ i;
}

// In place: x = (x ^ x >> 29) * K + i.
__global__ void scramble_kernel(uint64_t *p, uint64_t words) {
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < words; i += stride) {
        uint64_t x = p[i];
        p[i] = (x ^ (x >> 29)) * 0xD6E8FEB86659FD93ull + i;
    }
}

// Byte-wise over every byte, odd tail included: b = b * 31 + 7 + (i & 3).
__global__ void bytes_kernel(uint8_t *p, uint64_t size) {
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < size; i += stride)
        p[i] = (uint8_t)(p[i] * 31u + 7u + (unsigned)(i & 3));
}

typedef int (*pinfo_fn)(uint64_t, ldshim_ptr_info_t *);
typedef void (*stats_fn)(ldshim_stats_t *);

static int g_blocks;

static void usage(FILE *f) {
    fprintf(f,
        "usage: alloc_check [--expect none|shim] [--state stock|memory|full|mismatch]\n"
        "                   [--seed N] [--tolerance-mib N] [--help]\n"
        "Allocates tagged and untagged buffers (sizes of tests/gpu/shim/alloc.policy), runs\n"
        "seeded fills, reductions, elementwise kernels, D2D memcpy, memset and memcpy2D across\n"
        "slice seams, and prints one checksum line per buffer on stdout.\n"
        "  --expect none   no buffer may be the shim's (no shim, or LDSHIM_STATE=stock)\n"
        "  --expect shim   exactly the tagged buffers are the shim's (memory/full/mismatch)\n"
        "  --state S       the state the shim runs in; checks each slice's home domain\n"
        "  --seed N        RNG seed (default 12345)\n"
        "  --tolerance-mib cudaMemGetInfo slack after the frees (default 6)\n"
        "Exit: 0 all checks passed, 1 a check failed (FAIL lines on stderr), 2 usage/CUDA error.\n");
}

static uint64_t free_mem(void) {
    size_t f = 0, t = 0;
    CK(cudaMemGetInfo(&f, &t));
    return f;
}

static void launch_reduce(const buffer_t *b, unsigned long long *out) {
    reduce_kernel<<<g_blocks, kThreads>>>((const uint8_t *)b->p, b->size, out);
    CK(cudaGetLastError());
}

// FNV-1a over 64-bit words (bytes for the tail), read back through a pinned staging buffer.
static uint64_t host_hash(const buffer_t *b, uint8_t *stage, uint64_t stage_bytes) {
    uint64_t h = 0xCBF29CE484222325ull;
    const uint64_t prime = 0x100000001B3ull;
    for (uint64_t off = 0; off < b->size; off += stage_bytes) {
        uint64_t n = b->size - off < stage_bytes ? b->size - off : stage_bytes;
        CK(cudaMemcpy(stage, b->p + off, n, cudaMemcpyDeviceToHost));
        uint64_t w = n / 8;
        for (uint64_t i = 0; i < w; i++) {
            uint64_t v;
            memcpy(&v, stage + i * 8, 8);
            h = (h ^ v) * prime;
        }
        for (uint64_t i = w * 8; i < n; i++) h = (h ^ stage[i]) * prime;
    }
    return h;
}

static uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Checks on one buffer's interior pointer that hold with and without the shim, plus the
// ownership checks that depend on --expect/--state.
static void check_pointer(const buffer_t *b, pinfo_fn pinfo, int expect_shim, const char *state) {
    uint64_t base = (uint64_t)(uintptr_t)b->p;
    uint64_t interior = base + b->size / 2 + 12345;
    ldshim_ptr_info_t info;
    memset(&info, 0, sizeof info);
    int mine = pinfo ? pinfo(interior, &info) == 0 : 0;
    int want = expect_shim && b->rule != NULL;

    if (mine != want) {
        fail("%s (%" PRIu64 " B, %s, rule %s): ldshim_pointer_info says %s, expected %s", b->name,
             b->size, b->driver_api ? "cuMemAlloc" : "cudaMalloc", b->rule ? b->rule : "none",
             mine ? "the shim's" : "not the shim's", want ? "the shim's" : "not the shim's");
    } else if (mine) {
        if (info.base != base || info.size != b->size)
            fail("%s: pointer_info base/size 0x%" PRIx64 "/%" PRIu64 ", expected 0x%" PRIx64 "/%" PRIu64,
                 b->name, info.base, info.size, base, b->size);
        if (strcmp(info.rule, b->rule) != 0)
            fail("%s: pointer_info rule '%s', expected '%s'", b->name, info.rule, b->rule);
        if (strcmp(info.backend, "emulated") != 0)
            fail("%s: pointer_info backend '%s', expected 'emulated'", b->name, info.backend);
        if (info.num_domains < 2 || info.num_domains > 8)
            fail("%s: pointer_info num_domains %d, expected 2..8 (split placement)", b->name, info.num_domains);
        else {
            if (info.slice == 0 || info.slice % kGranularity != 0 ||
                info.reserved != info.slice * (uint64_t)info.num_domains || info.reserved < b->size)
                fail("%s: pointer_info reserved %" PRIu64 " / slice %" PRIu64 " x %d inconsistent with size %" PRIu64,
                     b->name, info.reserved, info.slice, info.num_domains, b->size);
            for (int d = 0; d < info.num_domains; d++) {
                int expect_dom = d;
                if (state && strcmp(state, "mismatch") == 0 && info.num_domains == 2) expect_dom = 1 - d;
                if (info.domain_of[d] != expect_dom)
                    fail("%s: slice %d homed in domain %d, expected %d (state %s)", b->name, d,
                         info.domain_of[d], expect_dom, state ? state : "?");
            }
        }
        note("%s: shim range base 0x%" PRIx64 " reserved %" PRIu64 " slice %" PRIu64 " x %d domains [%d,%d] rule %s backend %s",
             b->name, info.base, info.reserved, info.slice, info.num_domains, info.domain_of[0],
             info.domain_of[1], info.rule, info.backend);
    }

    // cuMemGetAddressRange on the interior pointer must give the whole buffer.
    CUdeviceptr rb = 0;
    size_t rs = 0;
    CUresult r = cuMemGetAddressRange_v2(&rb, &rs, (CUdeviceptr)interior);
    uint64_t limit = round_up(b->size, kGranularity);
    if (mine && info.reserved > limit) limit = info.reserved;
    if (r != CUDA_SUCCESS) {
        const char *n = "?";
        cuGetErrorName(r, &n);
        fail("%s: cuMemGetAddressRange(interior) returned %s", b->name, n);
    } else if ((uint64_t)rb != base || rs < b->size || rs > limit) {
        fail("%s: cuMemGetAddressRange(interior) = [0x%llx, +%zu), expected base 0x%" PRIx64
             " and size %" PRIu64 "..%" PRIu64, b->name, (unsigned long long)rb, rs, base, b->size, limit);
    }

    // Range through cuPointerGetAttribute: not in the shim's contract; reported, not asserted.
    CUdeviceptr start = 0;
    size_t rsize = 0;
    if (cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)interior) == CUDA_SUCCESS &&
        cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, (CUdeviceptr)interior) == CUDA_SUCCESS &&
        ((uint64_t)start != base || rsize < b->size))
        note("%s: note: cuPointerGetAttribute(RANGE_START_ADDR/RANGE_SIZE) = [0x%llx, +%zu), not the whole buffer",
             b->name, (unsigned long long)start, rsize);

    cudaPointerAttributes a;
    memset(&a, 0, sizeof a);
    cudaError_t e = cudaPointerGetAttributes(&a, (const void *)(uintptr_t)interior);
    if (e != cudaSuccess)
        fail("%s: cudaPointerGetAttributes(interior) returned %s", b->name, cudaGetErrorName(e));
    else if (a.type != cudaMemoryTypeDevice || a.device != 0 || (uint64_t)(uintptr_t)a.devicePointer != interior)
        fail("%s: cudaPointerGetAttributes(interior): type %d device %d devicePointer %p, expected device memory on 0 at %p",
             b->name, (int)a.type, a.device, a.devicePointer, (void *)(uintptr_t)interior);
    (void)cudaGetLastError();

    // Legacy IPC must be refused (an error, not a crash) on the shim's VMM ranges. On ordinary
    // memory the result is whatever the driver says (a VM may not support IPC): for untagged
    // buffers it goes on stdout, so every run must agree with the run without the shim.
    if (!b->driver_api) {
        cudaIpcMemHandle_t h;
        e = cudaIpcGetMemHandle(&h, b->p);
        (void)cudaGetLastError();
        if (mine && e == cudaSuccess)
            fail("%s: cudaIpcGetMemHandle succeeded on a shim range (expected an error)", b->name);
        if (!mine)
            note("%s: cudaIpcGetMemHandle on ordinary memory: %s", b->name, cudaGetErrorName(e));
        if (!b->rule) printf("ipc     %-7s %s\n", b->name, cudaGetErrorName(e));
    }
}

int main(int argc, char **argv) {
    int expect_shim = 0;
    const char *state = NULL;
    uint64_t seed = 12345, tolerance = kDefaultTolerance;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--expect") && v) {
            if (!strcmp(v, "shim")) expect_shim = 1;
            else if (!strcmp(v, "none")) expect_shim = 0;
            else { fprintf(stderr, "alloc_check: --expect takes none or shim, not '%s'\n", v); return 2; }
            i++;
        } else if (!strcmp(a, "--state") && v) {
            if (strcmp(v, "stock") && strcmp(v, "memory") && strcmp(v, "full") && strcmp(v, "mismatch")) {
                fprintf(stderr, "alloc_check: --state takes stock|memory|full|mismatch, not '%s'\n", v);
                return 2;
            }
            state = v; i++;
        } else if (!strcmp(a, "--seed") && v) { seed = strtoull(v, NULL, 0); i++; }
        else if (!strcmp(a, "--tolerance-mib") && v) { tolerance = strtoull(v, NULL, 0) * MiB; i++; }
        else { fprintf(stderr, "alloc_check: unknown or incomplete argument '%s' (try --help)\n", a); return 2; }
    }

    pinfo_fn pinfo = (pinfo_fn)dlsym(RTLD_DEFAULT, "ldshim_pointer_info");
    if (expect_shim && !pinfo) {
        fprintf(stderr, "alloc_check: --expect shim but ldshim_pointer_info is not loaded (LD_PRELOAD?)\n");
        return 2;
    }
    note("shim %s, expect %s, state %s", pinfo ? "loaded" : "absent", expect_shim ? "shim" : "none",
         state ? state : "-");

    cudaError_t e0 = cudaSetDevice(0);
    if (e0 == cudaSuccess) e0 = cudaFree(0);
    if (e0 != cudaSuccess) {
        fprintf(stderr, "alloc_check: no usable CUDA device: %s (%s)\n", cudaGetErrorName(e0), cudaGetErrorString(e0));
        return 2;
    }
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    g_blocks = sms * 8;

    const uint64_t stage_bytes = 32 * MiB;
    uint8_t *stage = NULL;
    CK(cudaMallocHost((void **)&stage, stage_bytes));
    unsigned long long *res = NULL;   // 4 KiB: below every rule, untagged
    CK(cudaMalloc((void **)&res, 4 * KiB));

    // Warm-up: every kind of operation once, so modules, internal kernels and driver heaps are
    // loaded before the baseline is read.
    {
        char *w1 = NULL, *w2 = NULL;
        CK(cudaMalloc((void **)&w1, 2 * MiB));
        CK(cudaMalloc((void **)&w2, 2 * MiB));
        fill_kernel<<<g_blocks, kThreads>>>((uint8_t *)w1, 2 * MiB, seed, 99);
        CK(cudaGetLastError());
        reduce_kernel<<<g_blocks, kThreads>>>((const uint8_t *)w1, 2 * MiB, res);
        mix_kernel<<<g_blocks, kThreads>>>((uint64_t *)w2, (const uint64_t *)w1, 2 * MiB / 8);
        scramble_kernel<<<g_blocks, kThreads>>>((uint64_t *)w2, 2 * MiB / 8);
        bytes_kernel<<<g_blocks, kThreads>>>((uint8_t *)w2, 2 * MiB);
        CK(cudaGetLastError());
        CK(cudaMemcpy(w2 + 1, w1 + 3, MiB, cudaMemcpyDeviceToDevice));
        CK(cudaMemset(w1 + 5, 0x11, MiB));
        CKD(cuMemsetD8_v2((CUdeviceptr)(uintptr_t)(w2 + 9), 0x22, MiB));
        CK(cudaMemcpy2D(w2, 4099, w1 + 7, 5003, 1001, 100, cudaMemcpyDeviceToDevice));
        CK(cudaMemcpy(stage, w2, MiB, cudaMemcpyDeviceToHost));
        CK(cudaDeviceSynchronize());
        CK(cudaFree(w1));
        CK(cudaFree(w2));
    }
    const uint64_t baseline = free_mem();

    for (int i = 0; i < NBUF; i++) {
        buffer_t *b = &g_bufs[i];
        if (b->driver_api) {
            CUdeviceptr dp = 0;
            CKD(cuMemAlloc_v2(&dp, b->size));
            b->p = (char *)(uintptr_t)dp;
        } else {
            CK(cudaMalloc((void **)&b->p, b->size));
        }
    }
    uint64_t total = 0;
    for (int i = 0; i < NBUF; i++) total += g_bufs[i].size;
    const uint64_t during = free_mem();
    if (baseline < during || baseline - during + tolerance < total)
        fail("free memory fell by %" PRIu64 " MiB after allocating %" PRIu64 " MiB: memory not really allocated?",
             (baseline - during) / MiB, total / MiB);

    for (int i = 0; i < NBUF; i++)
        fill_kernel<<<g_blocks, kThreads>>>((uint8_t *)g_bufs[i].p, g_bufs[i].size, seed, (uint64_t)i + 1);
    CK(cudaGetLastError());

    // Pass 1: reductions over every whole buffer (each crosses its seams).
    CK(cudaMemset(res, 0, 4 * KiB));
    for (int i = 0; i < NBUF; i++) launch_reduce(&g_bufs[i], res + 2 * i);

    // Elementwise ops over whole ranges.
    mix_kernel<<<g_blocks, kThreads>>>((uint64_t *)g_bufs[T64].p, (const uint64_t *)g_bufs[U64P4K].p, 64 * MiB / 8);
    mix_kernel<<<g_blocks, kThreads>>>((uint64_t *)g_bufs[D40].p, (const uint64_t *)g_bufs[U40].p, 40 * MiB / 8);
    scramble_kernel<<<g_blocks, kThreads>>>((uint64_t *)g_bufs[T1G].p, GiB / 8);
    bytes_kernel<<<g_blocks, kThreads>>>((uint8_t *)g_bufs[T96P1].p, g_bufs[T96P1].size);
    CK(cudaGetLastError());

    // D2D copies across seams: tagged -> untagged, untagged -> tagged, tagged -> tagged.
    CK(cudaMemcpy(g_bufs[U48P7].p, g_bufs[T96P1].p + 24 * MiB + 3, 48 * MiB + 7, cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy(g_bufs[T64].p + MiB + 1, g_bufs[U64P4K].p + 5, 62 * MiB, cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy(g_bufs[T1G].p + 511 * MiB + 9, g_bufs[T96P1].p + 40 * MiB + 1, 20 * MiB, cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy(g_bufs[U1M].p, g_bufs[D40].p + 20 * MiB - 512 * KiB, MiB, cudaMemcpyDeviceToDevice));

    // Memsets across seams and up to the odd last byte.
    CK(cudaMemset(g_bufs[T1G].p + 509 * MiB + 5, 0xA5, 6 * MiB + 11));
    CK(cudaMemset(g_bufs[T96P1].p + 93 * MiB, 0x5A, 3 * MiB + 1));
    CKD(cuMemsetD8_v2((CUdeviceptr)(uintptr_t)(g_bufs[D40].p + 19 * MiB + 3), 0x3C, 2 * MiB + 1));

    // 2D copy: 600 rows of 4099 B, source rows 1 MiB + 17 apart in t1g (300 MiB..900 MiB,
    // across the 512 MiB seam), destination rows 100003 B apart in t64 (across 32 MiB).
    CK(cudaMemcpy2D(g_bufs[T64].p + 3, 100003, g_bufs[T1G].p + 300 * MiB, MiB + 17, 4099, 600,
                    cudaMemcpyDeviceToDevice));

    // Pass 2: reductions again, after every op.
    for (int i = 0; i < NBUF; i++) launch_reduce(&g_bufs[i], res + 2 * (NBUF + i));
    CK(cudaDeviceSynchronize());
    unsigned long long sums[4 * NBUF];
    CK(cudaMemcpy(sums, res, sizeof sums, cudaMemcpyDeviceToHost));

    for (int i = 0; i < NBUF; i++) {
        const buffer_t *b = &g_bufs[i];
        uint64_t h = host_hash(b, stage, stage_bytes);
        printf("%-7s size %11" PRIu64 "  fnv1a %016" PRIx64 "  pass1 %016llx %016llx  pass2 %016llx %016llx\n",
               b->name, b->size, h, sums[2 * i], sums[2 * i + 1], sums[2 * (NBUF + i)], sums[2 * (NBUF + i) + 1]);
    }
    fflush(stdout);

    for (int i = 0; i < NBUF; i++) check_pointer(&g_bufs[i], pinfo, expect_shim, state);

    for (int i = 0; i < NBUF; i++) {
        buffer_t *b = &g_bufs[i];
        if (b->driver_api) {
            CUresult r = cuMemFree_v2((CUdeviceptr)(uintptr_t)b->p);
            if (r != CUDA_SUCCESS) fail("%s: cuMemFree returned %d", b->name, (int)r);
        } else {
            cudaError_t e = cudaFree(b->p);
            if (e != cudaSuccess) fail("%s: cudaFree returned %s", b->name, cudaGetErrorName(e));
        }
        b->p = NULL;
    }
    CK(cudaDeviceSynchronize());
    const uint64_t after = free_mem();
    int64_t diff = (int64_t)baseline - (int64_t)after;   // > 0: less free than at baseline
    if (diff > (int64_t)tolerance || -diff > (int64_t)tolerance)
        fail("cudaMemGetInfo free %" PRIu64 " MiB after the frees vs baseline %" PRIu64 " MiB (diff %+" PRId64
             " KiB, tolerance %" PRIu64 " MiB)", after / MiB, baseline / MiB, diff / 1024, tolerance / MiB);
    note("memory: baseline free %" PRIu64 " MiB, during %" PRIu64 " MiB, after %" PRIu64 " MiB (diff %+" PRId64 " KiB)",
         baseline / MiB, during / MiB, after / MiB, diff / 1024);

    stats_fn stats = (stats_fn)dlsym(RTLD_DEFAULT, "ldshim_get_stats");
    if (stats) {
        ldshim_stats_t s;
        memset(&s, 0, sizeof s);
        stats(&s);
        if (s.live_ranges != 0 || s.live_bytes != 0)
            fail("ldshim_get_stats after the frees: live_ranges %" PRIu64 " live_bytes %" PRIu64 ", expected 0",
                 s.live_ranges, s.live_bytes);
        if (expect_shim && s.tagged_allocs != s.tagged_frees)
            fail("ldshim_get_stats: tagged_allocs %" PRIu64 " != tagged_frees %" PRIu64, s.tagged_allocs, s.tagged_frees);
    }

    CK(cudaFree(res));
    CK(cudaFreeHost(stage));
    note("%d check(s) failed", g_failures);
    return g_failures ? 1 : 0;
}
