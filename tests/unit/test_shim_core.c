/* test_shim_core.c — registry, pool and range layout of the shim core, against a mock
 * driver table (the driver is a struct of function pointers, so no library is needed). */
#include "shim/config.h"
#include "shim/device.h"
#include "shim/pool.h"
#include "shim/registry.h"
#include "shim/image.h"
#include "shim/log.h"
#include "shim/topology.h"
#include "shim/vmm.h"

#include <CUnit/Basic.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* --- mock driver ---------------------------------------------------------------------- */

#define MB (1024ull * 1024ull)
static int live_handles, live_reserve, live_maps, fail_create_at, fail_map_at, fail_access, creates, maps;
static int fail_unmap_at, unmaps, fail_release_at, releases, fail_afree_at, afrees, reserves;
static size_t last_reserve;
static int access_count;
static CUdeviceptr next_va = 0x100000000ull;

static CUresult m_reserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr, unsigned long long f) {
    (void)align; (void)addr; (void)f;
    *p = next_va;
    next_va += size + 64 * MB;
    last_reserve = size;
    live_reserve++;
    reserves++;
    return CUDA_SUCCESS;
}
static CUresult m_afree(CUdeviceptr p, size_t s) {
    (void)p; (void)s;
    if (++afrees == fail_afree_at) return CUDA_ERROR_INVALID_VALUE;
    live_reserve--;
    return CUDA_SUCCESS;
}
static CUresult m_release(CUmemGenericAllocationHandle h) {
    (void)h;
    if (++releases == fail_release_at) return CUDA_ERROR_INVALID_VALUE;
    live_handles--;
    return CUDA_SUCCESS;
}
static CUresult m_map(CUdeviceptr p, size_t s, size_t o, CUmemGenericAllocationHandle h, unsigned long long f) {
    (void)p; (void)s; (void)o; (void)h; (void)f;
    if (++maps == fail_map_at) return CUDA_ERROR_INVALID_VALUE;
    live_maps++;
    return CUDA_SUCCESS;
}
static CUresult m_unmap(CUdeviceptr p, size_t s) {
    (void)p; (void)s;
    if (++unmaps == fail_unmap_at) return CUDA_ERROR_INVALID_VALUE;
    live_maps--;
    return CUDA_SUCCESS;
}
static CUresult m_access(CUdeviceptr p, size_t s, const CUmemAccessDesc *d, size_t n) {
    (void)p; (void)s; (void)d;
    access_count = (int)n;
    return fail_access ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
static CUresult m_errname(CUresult r, const char **s) { (void)r; *s = "MOCK_ERROR"; return CUDA_SUCCESS; }

static ld_driver_t mock;
static const ld_driver_t *ld_driver_mock(void) { return &mock; }

/* The real driver.c is linked; its ld_cu_errname asks ld_driver(), which finds no libcuda
 * in this process and returns a numeric name — fine for messages. */

static CUresult mock_create(const ld_driver_t *d, CUdevice dev, int domain, size_t bytes,
                            CUmemGenericAllocationHandle *out, char *why, size_t n) {
    (void)d; (void)dev; (void)domain; (void)bytes; (void)why; (void)n;
    if (++creates == fail_create_at) return CUDA_ERROR_OUT_OF_MEMORY;
    live_handles++;
    *out = (CUmemGenericAllocationHandle)(0x1000 + creates);
    return CUDA_SUCCESS;
}
static int mock_avail(const ld_driver_t *d, CUdevice dev, int nd, char *why, size_t n) {
    (void)d; (void)dev; (void)nd; (void)why; (void)n;
    return 0;
}
const ld_backend_ops_t ld_backend_native = {.kind = LD_BACKEND_NATIVE, .name = "native", .available = mock_avail,
                                            .create = mock_create, .localizes = 1};
const ld_backend_ops_t ld_backend_emulated = {.kind = LD_BACKEND_EMULATED, .name = "emulated",
                                              .available = mock_avail, .create = mock_create};
const ld_backend_ops_t ld_backend_mlopart = {.kind = LD_BACKEND_MLOPART, .name = "mlopart",
                                             .available = mock_avail, .create = mock_create, .localizes = 1};

static ld_device_t dev0;

static void reset_mock(void) {
    live_handles = live_reserve = live_maps = creates = maps = 0;
    fail_create_at = fail_map_at = fail_access = 0;
    fail_unmap_at = unmaps = fail_release_at = releases = fail_afree_at = afrees = reserves = 0;
    ld_vmm_trim(&mock, -1);
    live_handles = 0;
}

static int setup(void) {
    memset(&mock, 0, sizeof mock);
    mock.pfn_cuMemAddressReserve = m_reserve;
    mock.pfn_cuMemAddressFree = m_afree;
    mock.pfn_cuMemRelease = m_release;
    mock.pfn_cuMemMap = m_map;
    mock.pfn_cuMemUnmap = m_unmap;
    mock.pfn_cuMemSetAccess = m_access;
    mock.pfn_cuGetErrorName = m_errname;
    (void)ld_driver_mock;
    ld_policy_init(&ld_cfg.policy);
    memset(&dev0, 0, sizeof dev0);
    dev0.ordinal = 0;
    dev0.ndomains = 2;
    dev0.gran = 2 * MB;
    dev0.backend = &ld_backend_native;
    return 0;
}

/* --- registry ------------------------------------------------------------------------- */

static ld_range_t mk(CUdeviceptr base, size_t reserved) {
    ld_range_t r;
    memset(&r, 0, sizeof r);
    r.base = base;
    r.reserved = reserved;
    r.size = reserved - 1;
    return r;
}

static void test_registry_interior(void) {
    ld_registry_reset();
    ld_range_t a = mk(0x10000000, 4 * MB), b = mk(0x20000000, 8 * MB), out;
    CU_ASSERT_EQUAL(ld_registry_insert(&b), 0);
    CU_ASSERT_EQUAL(ld_registry_insert(&a), 0);
    CU_ASSERT_EQUAL(ld_registry_count(), 2);
    CU_ASSERT_EQUAL(ld_registry_find(0x10000000, &out), 0);
    CU_ASSERT_EQUAL(out.base, 0x10000000);
    CU_ASSERT_EQUAL(ld_registry_find(0x10000000 + 4 * MB - 1, &out), 0);    /* last byte */
    CU_ASSERT_EQUAL(out.base, 0x10000000);
    CU_ASSERT_EQUAL(ld_registry_find(0x10000000 + 4 * MB, &out), -1);       /* one past */
    CU_ASSERT_EQUAL(ld_registry_find(0x0fffffff, &out), -1);
    CU_ASSERT_EQUAL(ld_registry_find(0x20000000 + 3 * MB, &out), 0);
    CU_ASSERT_EQUAL(out.base, 0x20000000);
    /* interior remove is refused and removes nothing */
    CU_ASSERT_EQUAL(ld_registry_remove(0x20000000 + 1, &out), 1);
    CU_ASSERT_EQUAL(ld_registry_count(), 2);
    CU_ASSERT_EQUAL(ld_registry_remove(0x20000000, &out), 0);
    CU_ASSERT_EQUAL(ld_registry_count(), 1);
    CU_ASSERT_EQUAL(ld_registry_remove(0x20000000, &out), -1);
    CU_ASSERT_EQUAL(ld_registry_bytes(), 4 * MB - 1);
    ld_registry_reset();
}

static void test_registry_overlap(void) {
    ld_registry_reset();
    ld_range_t a = mk(0x10000000, 4 * MB);
    CU_ASSERT_EQUAL(ld_registry_insert(&a), 0);
    ld_range_t o1 = mk(0x10000000 + 2 * MB, 4 * MB), o2 = mk(0x10000000 - 2 * MB, 4 * MB), ok = mk(0x10000000 + 4 * MB, MB);
    CU_ASSERT_EQUAL(ld_registry_insert(&o1), -1);
    CU_ASSERT_EQUAL(ld_registry_insert(&o2), -1);
    CU_ASSERT_EQUAL(ld_registry_insert(&ok), 0);    /* adjacent is fine */
    CU_ASSERT_EQUAL(ld_registry_count(), 2);
    ld_registry_reset();
}

static void test_registry_random(void) {
    ld_registry_reset();
    enum { N = 2000 };
    static CUdeviceptr bases[N];
    static int live[N];
    srand(7);
    for (int i = 0; i < N; i++) {
        bases[i] = 0x1000000000ull + (CUdeviceptr)i * 16 * MB;
        ld_range_t r = mk(bases[i], (size_t)(1 + rand() % 7) * 2 * MB);
        r.rule = i;
        live[i] = ld_registry_insert(&r) == 0;
        CU_ASSERT(live[i]);
    }
    for (int k = 0; k < 20000; k++) {
        int i = rand() % N;
        ld_range_t out;
        CUdeviceptr p = bases[i] + (CUdeviceptr)(rand() % (int)(2 * MB));
        int f = ld_registry_find(p, &out);
        if (live[i]) { CU_ASSERT_EQUAL(f, 0); CU_ASSERT_EQUAL(out.rule, i); }
        else CU_ASSERT_EQUAL(f, -1);
        if (rand() % 4 == 0 && live[i]) { CU_ASSERT_EQUAL(ld_registry_remove(bases[i], NULL), 0); live[i] = 0; }
    }
    size_t n = 0;
    for (int i = 0; i < N; i++) n += (size_t)live[i];
    CU_ASSERT_EQUAL(ld_registry_count(), n);
    CU_ASSERT_EQUAL(ld_registry_snapshot(-1, NULL, 0), n);
    ld_registry_reset();
}

static void *reg_thread(void *arg) {
    long t = (long)arg;
    for (int k = 0; k < 5000; k++) {
        ld_range_t r = mk(0x2000000000ull + (CUdeviceptr)(t * 10000 + k) * 4 * MB, 2 * MB);
        if (ld_registry_insert(&r) != 0) return (void *)1;
        ld_range_t out;
        if (ld_registry_find(r.base + MB, &out) != 0 || out.base != r.base) return (void *)2;
        if (ld_registry_remove(r.base, NULL) != 0) return (void *)3;
    }
    return NULL;
}

static void test_registry_threads(void) {
    ld_registry_reset();
    pthread_t th[8];
    for (long i = 0; i < 8; i++) pthread_create(&th[i], NULL, reg_thread, (void *)i);
    for (int i = 0; i < 8; i++) {
        void *rv;
        pthread_join(th[i], &rv);
        CU_ASSERT_PTR_NULL(rv);
    }
    CU_ASSERT_EQUAL(ld_registry_count(), 0);
}

/* --- layout and undo ---------------------------------------------------------------------- */

static void test_vmm_layout(void) {
    reset_mock();
    ld_cfg.policy.pool_cap = 0;
    ld_range_t r;
    char why[160];
    int dom[2] = {0, 1};
    /* 96 MiB + 1 byte over 2 domains -> slices of 50 MiB (rounded to 2 MiB), each of a 32 MiB
     * and an 18 MiB handle (localized memory: 32 MiB chunks) */
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &dev0, 96 * MB + 1, 2, dom, &r, why, sizeof why), CUDA_SUCCESS);
    CU_ASSERT_EQUAL(r.slice, 50 * MB);
    CU_ASSERT_EQUAL(r.reserved, 100 * MB);
    CU_ASSERT_EQUAL(last_reserve, 100 * MB);
    CU_ASSERT_EQUAL(r.domain_of[0], 0);
    CU_ASSERT_EQUAL(r.domain_of[1], 1);
    CU_ASSERT_EQUAL(r.chunk, 32 * MB);
    CU_ASSERT_EQUAL(r.per_slice, 2);
    CU_ASSERT_EQUAL(live_handles, 4);
    CU_ASSERT_EQUAL(live_maps, 4);
    CU_ASSERT_EQUAL(access_count, 1);
    ld_vmm_release(&mock, &r);
    CU_ASSERT_EQUAL(live_handles, 0);
    CU_ASSERT_EQUAL(live_maps, 0);
    CU_ASSERT_EQUAL(live_reserve, 0);
    /* exact multiple: 64 MiB -> 2 x 32 MiB, no waste */
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &dev0, 64 * MB, 2, dom, &r, why, sizeof why), CUDA_SUCCESS);
    CU_ASSERT_EQUAL(r.slice, 32 * MB);
    CU_ASSERT_EQUAL(r.reserved, 64 * MB);
    ld_vmm_release(&mock, &r);
    /* tiny request still gets one granule per slice */
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &dev0, 1, 2, dom, &r, why, sizeof why), CUDA_SUCCESS);
    CU_ASSERT_EQUAL(r.slice, 2 * MB);
    ld_vmm_release(&mock, &r);
    CU_ASSERT_EQUAL(live_handles + live_maps + live_reserve, 0);
}

static void test_vmm_undo(void) {
    ld_range_t r;
    char why[160];
    int dom[2] = {1, 0};
    ld_cfg.policy.pool_cap = 0;
    reset_mock(); fail_create_at = 2;          /* second slice's create fails */
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &dev0, 8 * MB, 2, dom, &r, why, sizeof why), CUDA_ERROR_OUT_OF_MEMORY);
    CU_ASSERT_EQUAL(live_handles + live_maps + live_reserve, 0);
    reset_mock(); fail_map_at = 2;             /* second map fails */
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &dev0, 8 * MB, 2, dom, &r, why, sizeof why), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT(strstr(why, "cuMemMap(slice 1)") != NULL);
    CU_ASSERT_EQUAL(live_handles + live_maps + live_reserve, 0);
    reset_mock(); fail_access = 1;
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &dev0, 8 * MB, 2, dom, &r, why, sizeof why), CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT(strstr(why, "cuMemSetAccess") != NULL);
    CU_ASSERT_EQUAL(live_handles + live_maps + live_reserve, 0);
}

/* slice x nslices must not wrap: 2^64 - 2^21 bytes over 3 (or 2) domains is refused before
 * any driver call, so the allocation falls back to the driver, which answers as stock. */
static void test_vmm_overflow(void) {
    ld_range_t r;
    char why[160];
    int dom[3] = {0, 1, 2};
    ld_cfg.policy.pool_cap = 0;
    ld_device_t d3 = dev0;
    d3.ndomains = 3;
    size_t sizes[] = { SIZE_MAX - 2 * MB + 1, SIZE_MAX, SIZE_MAX - 2 * MB - 1 };
    reset_mock();
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &dev0, SIZE_MAX, 1, dom, &r, why, sizeof why), CUDA_ERROR_OUT_OF_MEMORY);
    CU_ASSERT_EQUAL(reserves, 0);             /* one slice: the rounding itself overflows */
    for (int ns = 2; ns <= 3; ns++)
        for (unsigned i = 0; i < sizeof sizes / sizeof *sizes; i++) {
            reset_mock();
            why[0] = 0;
            CU_ASSERT_EQUAL(ld_vmm_create(&mock, ns == 3 ? &d3 : &dev0, sizes[i], ns, dom, &r, why, sizeof why),
                            CUDA_ERROR_OUT_OF_MEMORY);
            CU_ASSERT_EQUAL(reserves, 0);
            CU_ASSERT(strstr(why, "overflow") != NULL);
        }
    /* The largest size that fits still lays out. */
    reset_mock();
    size_t big = (SIZE_MAX / 3) / (2 * MB) * (2 * MB);
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &d3, big, 3, dom, &r, why, sizeof why), CUDA_SUCCESS);
    CU_ASSERT(r.reserved >= big && r.reserved / 3 == r.slice);
    ld_vmm_release(&mock, &r);
    CU_ASSERT_EQUAL(live_handles + live_maps + live_reserve, 0);
}

/* One failed unmap, release or address free during teardown is retried: nothing leaks. */
static void test_vmm_teardown_retry(void) {
    ld_range_t r;
    char why[160];
    int dom[2] = {0, 1};
    ld_cfg.policy.pool_cap = 0;
    for (int which = 0; which < 3; which++)
        for (int at = 1; at <= 2; at++) {
            reset_mock();
            CU_ASSERT_EQUAL_FATAL(ld_vmm_create(&mock, &dev0, 8 * MB, 2, dom, &r, why, sizeof why), CUDA_SUCCESS);
            if (which == 0) fail_unmap_at = at;
            else if (which == 1) fail_release_at = at;
            else fail_afree_at = at == 2 ? 1 : at;
            ld_vmm_release(&mock, &r);
            CU_ASSERT_EQUAL(live_handles + live_maps + live_reserve, 0);
        }
    /* The undo path of a failed create too. */
    reset_mock();
    fail_map_at = 2;
    fail_unmap_at = 1;
    fail_release_at = 1;
    fail_afree_at = 1;
    CU_ASSERT_NOT_EQUAL(ld_vmm_create(&mock, &dev0, 8 * MB, 2, dom, &r, why, sizeof why), CUDA_SUCCESS);
    CU_ASSERT_EQUAL(live_handles + live_maps + live_reserve, 0);
}

static void test_pool(void) {
    reset_mock();
    ld_cfg.policy.pool_cap = 64 * MB;
    ld_range_t r, r2;
    char why[160];
    int dom[2] = {0, 1}, swapped[2] = {1, 0};
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &dev0, 64 * MB, 2, dom, &r, why, sizeof why), CUDA_SUCCESS);
    ld_vmm_release(&mock, &r);
    CU_ASSERT_EQUAL(live_handles, 2);          /* kept whole by the pool: still mapped */
    CU_ASSERT_EQUAL(live_maps, 2);
    CU_ASSERT_EQUAL(live_reserve, 1);
    ld_pool_stats_t s;
    ld_pool_stats(&s);
    CU_ASSERT_EQUAL(s.cached_bytes, 64 * MB);
    int c0 = creates, m0 = maps;
    /* same shape, other size within the same slices: served without any driver call */
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &dev0, 63 * MB, 2, dom, &r2, why, sizeof why), CUDA_SUCCESS);
    CU_ASSERT_EQUAL(creates, c0);
    CU_ASSERT_EQUAL(maps, m0);
    CU_ASSERT_EQUAL(r2.base, r.base);
    CU_ASSERT_EQUAL(r2.size, 63 * MB);
    ld_pool_stats(&s);
    CU_ASSERT_EQUAL(s.cached_bytes, 0);
    ld_vmm_release(&mock, &r2);
    /* other domain order (mismatch) is another shape: not reused */
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &dev0, 64 * MB, 2, swapped, &r2, why, sizeof why), CUDA_SUCCESS);
    CU_ASSERT_NOT_EQUAL(r2.base, r.base);
    CU_ASSERT_EQUAL(r2.domain_of[0], 1);
    ld_vmm_release(&mock, &r2);                /* over the cap (64 + 64 > 64): torn down */
    CU_ASSERT_EQUAL(live_reserve, 1);
    CU_ASSERT_EQUAL(ld_vmm_trim(&mock, -1), 64 * MB);
    CU_ASSERT_EQUAL(live_handles + live_maps + live_reserve, 0);
    /* a range larger than the cap is never kept */
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &dev0, 96 * MB, 2, dom, &r, why, sizeof why), CUDA_SUCCESS);
    ld_vmm_release(&mock, &r);
    CU_ASSERT_EQUAL(live_handles + live_maps + live_reserve, 0);
    /* out of memory with a warm pool: trimmed and retried */
    reset_mock();
    ld_cfg.policy.pool_cap = 64 * MB;
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &dev0, 4 * MB, 2, dom, &r, why, sizeof why), CUDA_SUCCESS);
    ld_vmm_release(&mock, &r);                 /* pool holds a 4 MiB range */
    fail_create_at = creates + 1;              /* the next create fails once */
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &dev0, 8 * MB, 2, dom, &r, why, sizeof why), CUDA_SUCCESS);
    ld_pool_stats(&s);
    CU_ASSERT_EQUAL(s.cached_bytes, 0);
    CU_ASSERT(s.trims >= 1);
    ld_vmm_release(&mock, &r);
    ld_vmm_trim(&mock, -1);
    CU_ASSERT_EQUAL(live_handles + live_maps + live_reserve, 0);
}

/* --- pool table: shapes as keys ------------------------------------------------------- */

/* pool.c's allocations (its own and uthash's) go through here (-Wl,--wrap=malloc,--wrap=calloc,
 * core.mk; the compiler may turn malloc + memset into calloc), so a test can make the n-th
 * allocation after arm_malloc_failure(n) fail. */
void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
static int malloc_fail_at, malloc_calls;
void *__wrap_malloc(size_t n) {
    if (malloc_fail_at && ++malloc_calls == malloc_fail_at) return NULL;
    return __real_malloc(n);
}
void *__wrap_calloc(size_t k, size_t n) {
    if (malloc_fail_at && ++malloc_calls == malloc_fail_at) return NULL;
    return __real_calloc(k, n);
}
static void arm_malloc_failure(int at) { malloc_calls = 0; malloc_fail_at = at; }
static void disarm_malloc_failure(void) { malloc_fail_at = 0; }

static CUdeviceptr pool_va = 0x4000000000ull;

/* A freed range of the given shape as vmm.c hands it to the pool: a fresh VA each time, with
 * a 64 MiB gap after it; domain_of past nslices holds junk, which is no part of the shape. */
static ld_range_t shaped(int dev, int nslices, size_t slice, const int *dom) {
    ld_range_t r;
    memset(&r, 0, sizeof r);
    r.base = pool_va;
    r.device = dev;
    r.nslices = nslices;
    r.slice = slice;
    r.reserved = (size_t)nslices * slice;
    r.size = r.reserved - 1;
    for (int i = 0; i < LD_MAX_SLICES; i++) r.domain_of[i] = i < nslices ? dom[i] : 0x55 + i;
    pool_va += r.reserved + 64 * MB;
    return r;
}

static int same_shape(const ld_range_t *a, int dev, int nslices, size_t slice, const int *dom) {
    if (a->device != dev || a->nslices != nslices || a->slice != slice) return 0;
    for (int i = 0; i < nslices; i++)
        if (a->domain_of[i] != dom[i]) return 0;
    return 1;
}

static void pool_empty(void) {
    ld_vmm_trim(NULL, -1);
    ld_cfg.policy.pool_cap = 1ull << 40;
}

/* A trim without a driver (ld_vmm_trim(NULL, ...), the tests' and ld_pool_drain's "forget")
 * frees what the pool owns of each range, its handle array too: under ASan (make SAN=1
 * test-shim-core) a leak here fails the run. */
static void test_pool_forget_frees_handles(void) {
    pool_empty();
    int d01[2] = {0, 1};
    uint64_t total = 0;
    for (int i = 0; i < 3; i++) {
        ld_range_t r = shaped(i % 2, 2, 4 * MB, d01);
        r.chunk = MB;
        r.per_slice = 4;
        r.handles = calloc(8, sizeof *r.handles);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r.handles);
        CU_ASSERT_EQUAL_FATAL(ld_pool_keep(&r, NULL), 0);
        total += r.reserved;
    }
    CU_ASSERT_EQUAL(ld_vmm_trim(NULL, 1), 8 * MB);
    CU_ASSERT_EQUAL(ld_vmm_trim(NULL, -1), total - 8 * MB);
    CU_ASSERT_TRUE(ld_pool_empty());
}

/* 36 shapes: devices 0-2 x 1-3 slices x 2 or 4 MiB x two domain orders. */
enum { NSHAPES = 36, PER_SHAPE = 3 };
typedef struct { int dev, ns; size_t slice; int dom[LD_MAX_SLICES]; } tshape_t;
static void make_shapes(tshape_t *sh) {
    int k = 0;
    for (int dev = 0; dev < 3; dev++)
        for (int ns = 1; ns <= 3; ns++)
            for (int sl = 0; sl < 2; sl++)
                for (int v = 0; v < 2; v++, k++) {
                    memset(&sh[k], 0, sizeof sh[k]);
                    sh[k].dev = dev;
                    sh[k].ns = ns;
                    sh[k].slice = (size_t)(sl + 1) * 2 * MB;
                    for (int i = 0; i < ns; i++) sh[k].dom[i] = v ? (ns == 1 ? 1 : ns - 1 - i) : i;
                }
}

static void shuffle(int *a, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = rand() % (i + 1), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* Many shapes kept interleaved: a take returns a range of exactly the shape asked for, the
 * most recently kept first, and misses once the shape has none left. */
static void test_pool_shapes(void) {
    pool_empty();
    tshape_t sh[NSHAPES];
    make_shapes(sh);
    CUdeviceptr base[NSHAPES][PER_SHAPE];
    int order[NSHAPES];
    for (int i = 0; i < NSHAPES; i++) order[i] = i;
    srand(11);
    uint64_t total = 0;
    for (int k = 0; k < PER_SHAPE; k++) {
        shuffle(order, NSHAPES);
        for (int i = 0; i < NSHAPES; i++) {
            tshape_t *s = &sh[order[i]];
            ld_range_t r = shaped(s->dev, s->ns, s->slice, s->dom);
            CU_ASSERT_EQUAL_FATAL(ld_pool_keep(&r, NULL), 0);
            base[order[i]][k] = r.base;
            total += r.reserved;
        }
    }
    CU_ASSERT_EQUAL(ld_pool_shape_count(NULL), NSHAPES);
    ld_pool_stats_t st;
    ld_pool_stats(&st);
    CU_ASSERT_EQUAL(st.cached_bytes, total);
    uint64_t hits0 = st.hits, misses0 = st.misses;
    /* Junk past nslices in the caller's array (alloc.c leaves it uninitialized) must not
     * matter, nor may near misses match: other domain order, slice, device. */
    for (int k = PER_SHAPE - 1; k >= 0; k--) {
        shuffle(order, NSHAPES);
        for (int i = 0; i < NSHAPES; i++) {
            tshape_t *s = &sh[order[i]];
            int dom[LD_MAX_SLICES];
            for (int j = 0; j < LD_MAX_SLICES; j++) dom[j] = j < s->ns ? s->dom[j] : 1000 + rand() % 7;
            ld_range_t out;
            memset(&out, 0, sizeof out);
            CU_ASSERT_EQUAL_FATAL(ld_pool_take(s->dev, s->ns, s->slice, 0, dom, &out), 0);
            CU_ASSERT(same_shape(&out, s->dev, s->ns, s->slice, s->dom));
            CU_ASSERT_EQUAL(out.base, base[order[i]][k]);        /* most recent first */
            CU_ASSERT_EQUAL(out.reserved, (size_t)s->ns * s->slice);
            total -= out.reserved;
        }
        ld_pool_stats(&st);
        CU_ASSERT_EQUAL(st.cached_bytes, total);
        CU_ASSERT_EQUAL(ld_pool_shape_count(NULL), k ? NSHAPES : 0);  /* a shape leaves with its last range */
    }
    ld_pool_stats(&st);
    CU_ASSERT_EQUAL(st.hits - hits0, NSHAPES * PER_SHAPE);
    CU_ASSERT_EQUAL(st.misses, misses0);
    ld_range_t out;
    for (int i = 0; i < NSHAPES; i++) CU_ASSERT_EQUAL(ld_pool_take(sh[i].dev, sh[i].ns, sh[i].slice, 0, sh[i].dom, &out), -1);
    ld_pool_stats(&st);
    CU_ASSERT_EQUAL(st.misses - misses0, NSHAPES);
    /* A shape that differs from a kept one in one field only is another shape. */
    int d01[2] = {0, 1}, d10[2] = {1, 0};
    ld_range_t r = shaped(1, 2, 4 * MB, d01);
    CU_ASSERT_EQUAL(ld_pool_keep(&r, NULL), 0);
    CU_ASSERT_EQUAL(ld_pool_take(1, 2, 4 * MB, 0, d10, &out), -1);
    CU_ASSERT_EQUAL(ld_pool_take(1, 2, 2 * MB, 0, d01, &out), -1);
    CU_ASSERT_EQUAL(ld_pool_take(0, 2, 4 * MB, 0, d01, &out), -1);
    CU_ASSERT_EQUAL(ld_pool_take(1, 1, 4 * MB, 0, d01, &out), -1);
    CU_ASSERT_EQUAL(ld_pool_take(1, 2, 4 * MB, 0, d01, &out), 0);
    CU_ASSERT_EQUAL(out.base, r.base);
    CU_ASSERT_EQUAL(ld_pool_shape_count(NULL), 0);
}

/* The cap is per device: bytes kept on one device never refuse another's, a take makes room
 * on its own device only, a trim of one device frees only its bytes; a refused keep changes
 * nothing. */
static void test_pool_accounting(void) {
    pool_empty();
    ld_cfg.policy.pool_cap = 8 * MB;
    int d01[2] = {0, 1}, d10[2] = {1, 0}, d0[1] = {0}, d1[1] = {1};
    ld_range_t a = shaped(0, 2, 2 * MB, d01), b = shaped(0, 2, 2 * MB, d10), c = shaped(0, 1, 2 * MB, d0);
    ld_range_t d = shaped(1, 2, 4 * MB, d01), e = shaped(0, 1, 2 * MB, d1), f = shaped(0, 1, 2 * MB, d0);
    ld_pool_stats_t st;
    CU_ASSERT_EQUAL(ld_pool_keep(&a, NULL), 0);          /* dev 0: 4 MiB */
    CU_ASSERT_EQUAL(ld_pool_keep(&b, NULL), 0);          /* dev 0: 8 MiB, the cap */
    CU_ASSERT_EQUAL(ld_pool_keep(&c, NULL), -1);         /* 10 > 8 */
    CU_ASSERT_EQUAL(ld_pool_shape_count(NULL), 2);     /* the refused shape did not stay */
    CU_ASSERT_EQUAL(ld_pool_contains(c.base), 0);
    CU_ASSERT_EQUAL(ld_pool_keep(&d, NULL), 0);          /* dev 1 has its own 8 MiB */
    ld_pool_stats(&st);
    CU_ASSERT_EQUAL(st.cached_bytes, 16 * MB);
    ld_range_t out;
    CU_ASSERT_EQUAL(ld_pool_take(0, 2, 2 * MB, 0, d10, &out), 0);   /* b: dev 0 back to 4 MiB */
    CU_ASSERT_EQUAL(out.base, b.base);
    CU_ASSERT_EQUAL(ld_pool_keep(&c, NULL), 0);          /* 6 */
    CU_ASSERT_EQUAL(ld_pool_keep(&e, NULL), 0);          /* 8 */
    CU_ASSERT_EQUAL(ld_pool_keep(&f, NULL), -1);         /* 10 > 8: refused although f's shape has a bucket */
    CU_ASSERT_EQUAL(ld_pool_contains(f.base), 0);
    ld_pool_stats(&st);
    CU_ASSERT_EQUAL(st.cached_bytes, 16 * MB);
    CU_ASSERT_EQUAL(ld_vmm_trim(NULL, 1), 8 * MB);
    ld_pool_stats(&st);
    CU_ASSERT_EQUAL(st.cached_bytes, 8 * MB);
    CU_ASSERT_EQUAL(ld_pool_keep(&d, NULL), 0);          /* dev 1 is empty again */
    CU_ASSERT_EQUAL(ld_pool_keep(&f, NULL), -1);         /* dev 0 still full */
    CU_ASSERT_EQUAL(ld_vmm_trim(NULL, 0), 8 * MB);
    CU_ASSERT_EQUAL(ld_pool_keep(&f, NULL), 0);
    ld_pool_stats(&st);
    CU_ASSERT_EQUAL(st.cached_bytes, 8 * MB + 2 * MB);
    /* cap refusals: a range larger than the cap, a device out of range, the pool off */
    ld_range_t big = shaped(2, 1, 16 * MB, d0), far = shaped(64, 1, 2 * MB, d0), neg = shaped(-1, 1, 2 * MB, d0);
    CU_ASSERT_EQUAL(ld_pool_keep(&big, NULL), -1);
    CU_ASSERT_EQUAL(ld_pool_keep(&far, NULL), -1);
    CU_ASSERT_EQUAL(ld_pool_keep(&neg, NULL), -1);
    ld_cfg.policy.pool_cap = 0;
    ld_range_t g = shaped(2, 1, 2 * MB, d0);
    CU_ASSERT_EQUAL(ld_pool_keep(&g, NULL), -1);
    ld_pool_stats(&st);
    CU_ASSERT_EQUAL(st.cached_bytes, 10 * MB);
    CU_ASSERT_EQUAL(ld_pool_shape_count(NULL), 2);     /* f on device 0, d on device 1 */
    CU_ASSERT_EQUAL(ld_vmm_trim(NULL, -1), 10 * MB);
    ld_pool_stats(&st);
    CU_ASSERT_EQUAL(st.cached_bytes, 0);
    CU_ASSERT_EQUAL(ld_pool_shape_count(NULL), 0);
}

/* Trimming one device tears down exactly its ranges (through the driver) and leaves every
 * other device's ranges kept, contained and takeable. */
static void test_pool_trim_device(void) {
    pool_empty();
    reset_mock();
    tshape_t sh[NSHAPES];
    make_shapes(sh);
    ld_range_t r[NSHAPES][2];
    uint64_t dev1_bytes = 0;
    int dev1_ranges = 0, dev1_slices = 0, dev1_shapes = 0;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < NSHAPES; i++) {
            r[i][k] = shaped(sh[i].dev, sh[i].ns, sh[i].slice, sh[i].dom);
            CU_ASSERT_EQUAL_FATAL(ld_pool_keep(&r[i][k], NULL), 0);
            if (sh[i].dev == 1) {
                dev1_bytes += r[i][k].reserved;
                dev1_ranges++;
                dev1_slices += sh[i].ns;
                dev1_shapes += k == 0;
            }
        }
    int af0 = afrees, um0 = unmaps, rel0 = releases;
    ld_pool_stats_t st0, st;
    ld_pool_stats(&st0);
    CU_ASSERT_EQUAL(ld_vmm_trim(&mock, 1), dev1_bytes);
    CU_ASSERT_EQUAL(afrees - af0, dev1_ranges);
    CU_ASSERT_EQUAL(unmaps - um0, dev1_slices);
    CU_ASSERT_EQUAL(releases - rel0, dev1_slices);
    ld_pool_stats(&st);
    CU_ASSERT_EQUAL(st.cached_bytes, st0.cached_bytes - dev1_bytes);
    CU_ASSERT_EQUAL(st.trims, st0.trims + 1);
    CU_ASSERT_EQUAL(ld_pool_shape_count(NULL), NSHAPES - dev1_shapes);
    for (int i = 0; i < NSHAPES; i++)
        for (int k = 0; k < 2; k++)
            CU_ASSERT_EQUAL(ld_pool_contains(r[i][k].base + 1), sh[i].dev != 1);
    /* nothing left on device 1, or on a device that never kept anything */
    CU_ASSERT_EQUAL(ld_vmm_trim(&mock, 1), 0);
    CU_ASSERT_EQUAL(ld_vmm_trim(&mock, 7), 0);
    ld_pool_stats(&st);
    CU_ASSERT_EQUAL(st.trims, st0.trims + 1);
    CU_ASSERT_EQUAL(afrees - af0, dev1_ranges);
    for (int i = 0; i < NSHAPES; i++) {
        ld_range_t out;
        int rc = ld_pool_take(sh[i].dev, sh[i].ns, sh[i].slice, 0, sh[i].dom, &out);
        CU_ASSERT_EQUAL(rc, sh[i].dev == 1 ? -1 : 0);
        if (rc == 0) {
            CU_ASSERT_EQUAL(out.base, r[i][1].base);
            CU_ASSERT_EQUAL(ld_pool_keep(&out, NULL), 0);
        }
    }
    ld_vmm_trim(NULL, -1);
    CU_ASSERT_EQUAL(ld_pool_shape_count(NULL), 0);
}

/* contains() answers for an address inside any kept range of any shape, not for the gaps
 * between them, and no longer for a range once taken or trimmed. */
static void test_pool_contains(void) {
    pool_empty();
    tshape_t sh[NSHAPES];
    make_shapes(sh);
    ld_range_t r[NSHAPES];
    CU_ASSERT_EQUAL(ld_pool_contains(pool_va), 0);
    for (int i = 0; i < NSHAPES; i++) {
        r[i] = shaped(sh[i].dev, sh[i].ns, sh[i].slice, sh[i].dom);
        CU_ASSERT_EQUAL_FATAL(ld_pool_keep(&r[i], NULL), 0);
    }
    for (int i = 0; i < NSHAPES; i++) {
        CU_ASSERT_EQUAL(ld_pool_contains(r[i].base), 1);
        CU_ASSERT_EQUAL(ld_pool_contains(r[i].base + r[i].reserved / 2), 1);
        CU_ASSERT_EQUAL(ld_pool_contains(r[i].base + r[i].reserved - 1), 1);
        CU_ASSERT_EQUAL(ld_pool_contains(r[i].base + r[i].reserved), 0);
        CU_ASSERT_EQUAL(ld_pool_contains(r[i].base - 1), 0);
    }
    ld_range_t out;
    CU_ASSERT_EQUAL(ld_pool_take(sh[5].dev, sh[5].ns, sh[5].slice, 0, sh[5].dom, &out), 0);
    CU_ASSERT_EQUAL(ld_pool_contains(r[5].base), 0);
    CU_ASSERT_EQUAL(ld_pool_contains(r[6].base), 1);
    ld_vmm_trim(NULL, -1);
    for (int i = 0; i < NSHAPES; i++) CU_ASSERT_EQUAL(ld_pool_contains(r[i].base), 0);
}

/* A forked child forgets the parent's ranges without a driver call (fork handlers as
 * init.c installs them), starts from zero counters and can keep its own; the parent keeps
 * all of its ranges. */
static void test_pool_fork(void) {
    pool_empty();
    reset_mock();
    tshape_t sh[NSHAPES];
    make_shapes(sh);
    ld_range_t r[NSHAPES];
    for (int i = 0; i < NSHAPES; i++) {
        r[i] = shaped(sh[i].dev, sh[i].ns, sh[i].slice, sh[i].dom);
        CU_ASSERT_EQUAL_FATAL(ld_pool_keep(&r[i], NULL), 0);
    }
    ld_range_t out;
    CU_ASSERT_EQUAL(ld_pool_take(9, 1, 2 * MB, 0, sh[0].dom, &out), -1);    /* a miss the child forgets */
    ld_pool_stats_t before;
    ld_pool_stats(&before);
    fflush(stdout);
    ld_pool_lock_for_fork();
    pid_t pid = fork();
    ld_pool_unlock_after_fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        int calls = afrees + unmaps + releases, bad = 0;
        ld_pool_reset();
        ld_pool_stats_t st;
        ld_pool_stats(&st);
        if (st.cached_bytes || st.hits || st.misses || st.trims) bad |= 1;
        if (ld_pool_shape_count(NULL) != 0) bad |= 2;
        for (int i = 0; i < NSHAPES; i++)
            if (ld_pool_contains(r[i].base)) bad |= 4;
        if (afrees + unmaps + releases != calls) bad |= 8;           /* no driver call */
        if (ld_pool_take(sh[0].dev, sh[0].ns, sh[0].slice, 0, sh[0].dom, &out) != -1) bad |= 16;
        ld_range_t mine = shaped(sh[0].dev, sh[0].ns, sh[0].slice, sh[0].dom);
        if (ld_pool_keep(&mine, NULL) != 0) bad |= 32;
        if (ld_pool_take(sh[0].dev, sh[0].ns, sh[0].slice, 0, sh[0].dom, &out) != 0 || out.base != mine.base) bad |= 64;
        if (ld_vmm_trim(NULL, -1) != 0 || afrees + unmaps + releases != calls) bad |= 128;
        _exit(bad);
    }
    int status = -1;
    CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
    CU_ASSERT(WIFEXITED(status));
    CU_ASSERT_EQUAL(WEXITSTATUS(status), 0);
    ld_pool_stats_t after;
    ld_pool_stats(&after);
    CU_ASSERT_EQUAL(after.cached_bytes, before.cached_bytes);
    CU_ASSERT_EQUAL(after.misses, before.misses);
    CU_ASSERT_EQUAL(ld_pool_shape_count(NULL), NSHAPES);
    for (int i = 0; i < NSHAPES; i++) CU_ASSERT_EQUAL(ld_pool_contains(r[i].base), 1);
    ld_vmm_trim(NULL, -1);
}

/* No host memory for the table: keep refuses the range (the caller tears it down) at each
 * allocation the table makes, never exits, and leaves the table as it was. */
static void test_pool_out_of_memory(void) {
    pool_empty();
    int d0[1] = {0};
    ld_pool_stats_t st;
    /* 1: the range's entry, 2: its shape's bucket, 3 and 4: the table (first shape only) */
    for (int at = 1; at <= 4; at++) {
        ld_range_t r = shaped(0, 1, 2 * MB, d0);
        arm_malloc_failure(at);
        int rc = ld_pool_keep(&r, NULL);
        int calls = malloc_calls;
        disarm_malloc_failure();
        CU_ASSERT_EQUAL(calls, at);
        CU_ASSERT_EQUAL(rc, -1);
        CU_ASSERT_EQUAL(ld_pool_shape_count(NULL), 0);
        CU_ASSERT_EQUAL(ld_pool_contains(r.base), 0);
        ld_pool_stats(&st);
        CU_ASSERT_EQUAL(st.cached_bytes, 0);
    }
    /* and the table works afterwards */
    ld_range_t first = shaped(0, 1, 2 * MB, d0), out;
    CU_ASSERT_EQUAL(ld_pool_keep(&first, NULL), 0);
    CU_ASSERT_EQUAL(ld_pool_take(0, 1, 2 * MB, 0, d0, &out), 0);
    CU_ASSERT_EQUAL(out.base, first.base);
    /* Growth of the bucket array: new shapes are added with their third allocation (only the
     * growth makes one) failing, until one growth fails; that shape is refused, every shape
     * before it stays, and the same keep succeeds once memory is back. */
    enum { MAXS = 4000 };
    static CUdeviceptr bases[MAXS];
    int n = 0, grew = 0;
    uint64_t total = 0;
    for (; n < MAXS && !grew; n++) {
        ld_range_t r = shaped(n % 3, 1, (size_t)(n + 1) * 2 * MB, d0);
        arm_malloc_failure(3);
        int rc = ld_pool_keep(&r, NULL);
        int calls = malloc_calls;
        disarm_malloc_failure();
        if (calls >= 3) {
            grew = 1;
            CU_ASSERT_EQUAL(rc, -1);
            CU_ASSERT_EQUAL(ld_pool_shape_count(NULL), (size_t)n);
            CU_ASSERT_EQUAL(ld_pool_contains(r.base), 0);
            ld_pool_stats(&st);
            CU_ASSERT_EQUAL(st.cached_bytes, total);
            rc = ld_pool_keep(&r, NULL);
        }
        CU_ASSERT_EQUAL_FATAL(rc, 0);
        bases[n] = r.base;
        total += r.reserved;
    }
    CU_ASSERT(grew);
    CU_ASSERT_EQUAL(ld_pool_shape_count(NULL), (size_t)n);
    for (int i = 0; i < n; i++) {
        CU_ASSERT_EQUAL(ld_pool_take(i % 3, 1, (size_t)(i + 1) * 2 * MB, 0, d0, &out), 0);
        CU_ASSERT_EQUAL(out.base, bases[i]);
    }
    CU_ASSERT_EQUAL(ld_pool_shape_count(NULL), 0);
    ld_pool_stats(&st);
    CU_ASSERT_EQUAL(st.cached_bytes, 0);
}

/* A program freeing and allocating one size in a loop makes the table allocate nothing per
 * cycle (the emptied shape stays for reuse; only the range's own entry is allocated), and the
 * shapes emptied this way stay bounded. */
static void test_pool_cycle_allocates_nothing(void) {
    pool_empty();
    int d01[2] = {0, 1};
    ld_range_t r = shaped(0, 2, 2 * MB, d01), out;
    CU_ASSERT_EQUAL(ld_pool_keep(&r, NULL), 0);
    CU_ASSERT_EQUAL(ld_pool_take(0, 2, 2 * MB, 0, d01, &out), 0);
    arm_malloc_failure(1 << 30);               /* count, never fail */
    for (int i = 0; i < 1000; i++) {
        CU_ASSERT_EQUAL(ld_pool_keep(&out, NULL), 0);
        CU_ASSERT_EQUAL(ld_pool_take(0, 2, 2 * MB, 0, d01, &out), 0);
    }
    int calls = malloc_calls;
    disarm_malloc_failure();
    CU_ASSERT_EQUAL(calls, 1000);
    CU_ASSERT_EQUAL(out.base, r.base);
    size_t entries = 0;
    CU_ASSERT_EQUAL(ld_pool_shape_count(&entries), 0);
    CU_ASSERT_EQUAL(entries, 1);
    ld_vmm_trim(NULL, -1);
    CU_ASSERT_EQUAL(ld_pool_shape_count(&entries), 0);
    CU_ASSERT_EQUAL(entries, 0);
    /* 200 shapes kept, then taken one by one: emptied shapes are swept once they outnumber
     * both 64 and the shapes still in use (after the 101st and the 166th take), so 34 remain. */
    enum { NS = 200 };
    static CUdeviceptr b200[NS];
    for (int i = 0; i < NS; i++) {
        ld_range_t x = shaped(i % 2, 1, (size_t)(i + 1) * 2 * MB, d01);
        CU_ASSERT_EQUAL_FATAL(ld_pool_keep(&x, NULL), 0);
        b200[i] = x.base;
    }
    for (int i = 0; i < NS; i++) {
        CU_ASSERT_EQUAL_FATAL(ld_pool_take(i % 2, 1, (size_t)(i + 1) * 2 * MB, 0, d01, &out), 0);
        CU_ASSERT_EQUAL(out.base, b200[i]);
        size_t live = ld_pool_shape_count(&entries);
        CU_ASSERT_EQUAL(live, (size_t)(NS - 1 - i));
        CU_ASSERT(entries - live <= (live > 64 ? live : 64));
    }
    CU_ASSERT_EQUAL(ld_pool_shape_count(&entries), 0);
    CU_ASSERT_EQUAL(entries, 34);
    ld_vmm_trim(NULL, -1);
    CU_ASSERT_EQUAL(ld_pool_shape_count(&entries), 0);
    CU_ASSERT_EQUAL(entries, 0);
}

/* Random keeps, takes, trims and contains() over 300 shapes on 4 devices, against a model:
 * every take returns the model's most recent range of that shape, bytes and shapes agree,
 * and the table never holds more than its shapes in use plus max(64, that many) emptied ones. */
static void test_pool_random_model(void) {
    pool_empty();
    enum { S = 300, DEPTH = 8, OPS = 30000 };
    static tshape_t sh[S];
    static CUdeviceptr stack[S][DEPTH];
    static size_t reserved[S][DEPTH];
    static int depth[S];
    memset(depth, 0, sizeof depth);
    srand(23);
    for (int i = 0; i < S; i++) {
        memset(&sh[i], 0, sizeof sh[i]);
        sh[i].dev = i % 4;
        sh[i].ns = 1 + (i / 4) % 3;
        sh[i].slice = (size_t)(1 + i / 12) * 2 * MB;
        for (int j = 0; j < sh[i].ns; j++) sh[i].dom[j] = (j + i) % sh[i].ns;
    }
    uint64_t bytes = 0;
    for (int op = 0; op < OPS; op++) {
        int i = rand() % S, what = rand() % 100;
        tshape_t *t = &sh[i];
        if (what < 50 && depth[i] < DEPTH) {
            ld_range_t r = shaped(t->dev, t->ns, t->slice, t->dom);
            CU_ASSERT_EQUAL_FATAL(ld_pool_keep(&r, NULL), 0);
            stack[i][depth[i]] = r.base;
            reserved[i][depth[i]++] = r.reserved;
            bytes += r.reserved;
        } else if (what < 98) {
            ld_range_t out;
            int rc = ld_pool_take(t->dev, t->ns, t->slice, 0, t->dom, &out);
            CU_ASSERT_EQUAL_FATAL(rc, depth[i] ? 0 : -1);
            if (rc == 0) {
                CU_ASSERT_EQUAL_FATAL(out.base, stack[i][--depth[i]]);
                bytes -= reserved[i][depth[i]];
            }
        } else if (what < 99) {
            int dev = rand() % 5 - 1;              /* -1: every device */
            uint64_t want = 0;
            for (int j = 0; j < S; j++)
                if (dev < 0 || sh[j].dev == dev) {
                    while (depth[j]) want += reserved[j][--depth[j]];
                }
            CU_ASSERT_EQUAL_FATAL(ld_vmm_trim(NULL, dev), want);
            bytes -= want;
        } else {
            int j = rand() % S;
            if (depth[j]) CU_ASSERT_EQUAL(ld_pool_contains(stack[j][0] + 1), 1);
        }
        size_t live = 0, entries = 0;
        for (int j = 0; j < S; j++) live += depth[j] > 0;
        CU_ASSERT_EQUAL_FATAL(ld_pool_shape_count(&entries), live);
        CU_ASSERT_FATAL(entries <= live + (live > 64 ? live : 64));
        if (op % 1000 == 0) {
            ld_pool_stats_t st;
            ld_pool_stats(&st);
            CU_ASSERT_EQUAL_FATAL(st.cached_bytes, bytes);
        }
    }
    /* Drained by takes (no trim), the table keeps at most 64 emptied shapes. */
    for (int i = 0; i < S; i++)
        while (depth[i]) {
            ld_range_t out;
            CU_ASSERT_EQUAL_FATAL(ld_pool_take(sh[i].dev, sh[i].ns, sh[i].slice, 0, sh[i].dom, &out), 0);
            CU_ASSERT_EQUAL_FATAL(out.base, stack[i][--depth[i]]);
        }
    size_t entries = 0;
    CU_ASSERT_EQUAL(ld_pool_shape_count(&entries), 0);
    CU_ASSERT(entries <= 64);
    ld_pool_stats_t st;
    ld_pool_stats(&st);
    CU_ASSERT_EQUAL(st.cached_bytes, 0);
    ld_vmm_trim(NULL, -1);
}

/* Threads keep and take ranges of their own and of one shared shape while others ask
 * contains(): every take is of the shape asked for, and the accounting ends at zero. */
enum { POOL_THREADS = 8, POOL_ITERS = 2000 };
static void *pool_thread(void *arg) {
    long t = (long)arg;
    int mine[2] = {(int)t % 2, 1 - (int)t % 2}, shared[2] = {0, 1};
    for (int k = 0; k < POOL_ITERS; k++) {
        ld_range_t r, s, out;
        memset(&r, 0, sizeof r);
        r.base = 0x8000000000ull + ((CUdeviceptr)t * POOL_ITERS + (CUdeviceptr)k) * 64 * MB;
        r.device = (int)t;
        r.nslices = 2;
        r.slice = 2 * MB;
        r.reserved = 4 * MB;
        memcpy(r.domain_of, mine, sizeof mine);
        s = r;
        s.base += 32 * MB;
        s.device = 63;
        memcpy(s.domain_of, shared, sizeof shared);
        if (ld_pool_keep(&r, NULL) != 0 || ld_pool_keep(&s, NULL) != 0) return (void *)1;
        if (!ld_pool_contains(r.base + MB)) return (void *)2;
        if (ld_pool_take((int)t, 2, 2 * MB, 0, mine, &out) != 0 || out.base != r.base) return (void *)3;
        if (ld_pool_take(63, 2, 2 * MB, 0, shared, &out) != 0 || out.device != 63 || out.domain_of[0] != 0)
            return (void *)4;
    }
    return NULL;
}

static void test_pool_threads(void) {
    pool_empty();
    ld_pool_stats_t st0, st;
    ld_pool_stats(&st0);
    pthread_t th[POOL_THREADS];
    for (long i = 0; i < POOL_THREADS; i++) pthread_create(&th[i], NULL, pool_thread, (void *)i);
    for (int i = 0; i < POOL_THREADS; i++) {
        void *rv;
        pthread_join(th[i], &rv);
        CU_ASSERT_PTR_NULL(rv);
    }
    ld_pool_stats(&st);
    CU_ASSERT_EQUAL(st.cached_bytes, 0);
    CU_ASSERT_EQUAL(st.hits - st0.hits, 2ull * POOL_THREADS * POOL_ITERS);
    CU_ASSERT_EQUAL(ld_pool_shape_count(NULL), 0);
}

static void test_peer_mask(void) {
    CU_ASSERT_EQUAL(ld_device_access_mask(3), 1ull << 3);
    ld_vmm_grant_peer(&mock, 3, 5);         /* no live ranges: only remembered */
    CU_ASSERT_EQUAL(ld_device_access_mask(3), (1ull << 3) | (1ull << 5));
    ld_range_t r;
    char why[160];
    int dom[2] = {0, 1};
    ld_device_t d3 = dev0;
    d3.ordinal = 3;
    reset_mock();
    ld_cfg.policy.pool_cap = 0;
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &d3, 4 * MB, 2, dom, &r, why, sizeof why), CUDA_SUCCESS);
    CU_ASSERT_EQUAL(access_count, 2);          /* owner and the peer */
    ld_vmm_release(&mock, &r);
    CU_ASSERT_EQUAL(live_handles + live_maps + live_reserve, 0);
    ld_device_reset();
}

static void test_image_scan(void) {
    const char *ptx = "//\n.version 8.0\n.global .align 4 .b8 ldshim_topology[304];\n";
    CU_ASSERT_EQUAL(ld_image_mentions_symbol(ptx), 1);
    CU_ASSERT_EQUAL(ld_image_mentions_symbol("FAKEMOD v1 globals=other:4"), 0);
    /* a fatbin header whose payload names the symbol, followed by bytes that also do but
     * lie beyond the declared size */
    unsigned char fb[256];
    memset(fb, 0, sizeof fb);
    uint32_t magic = 0xBA55ED50u;
    uint16_t ver = 1, hs = 16;
    uint64_t fs = 64;
    memcpy(fb, &magic, 4); memcpy(fb + 4, &ver, 2); memcpy(fb + 6, &hs, 2); memcpy(fb + 8, &fs, 8);
    memcpy(fb + 100, "ldshim_topology", 15);
    CU_ASSERT_EQUAL(ld_image_mentions_symbol(fb), 0);
    memcpy(fb + 40, "ldshim_topology", 15);
    CU_ASSERT_EQUAL(ld_image_mentions_symbol(fb), 1);
    /* the runtime's wrapper struct pointing at it */
    struct { uint32_t magic, version; const void *data; void *name; } w = {0x466243B1u, 1, fb, NULL};
    CU_ASSERT_EQUAL(ld_image_mentions_symbol(&w), 1);
    /* module files, scanned in 1 MiB blocks: the name across a block boundary, at the very end,
     * absent, and a file that is not there */
    char dir[] = "/tmp/ldshim-image-XXXXXX", path[64];
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/mod.bin", dir);
    size_t n = (1u << 20) + 4096;
    unsigned char *big = calloc(1, n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(big);
    const size_t at[] = { (1u << 20) - 7, n - 15 };
    for (int i = 0; i < 3; i++) {
        memset(big, 'a', n);
        if (i < 2) memcpy(big + at[i], "ldshim_topology", 15);
        FILE *f = fopen(path, "wb");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        CU_ASSERT_EQUAL(fwrite(big, 1, n, f), n);
        fclose(f);
        CU_ASSERT_EQUAL(ld_file_mentions_symbol(path), i < 2);
    }
    unlink(path);
    CU_ASSERT_EQUAL(ld_file_mentions_symbol(path), 0);
    rmdir(dir);
    free(big);
}

/* --- the range's owner: registered create and free, a dying context; own calls ---------- */

static CUcontext cur_ctx, ctx_stack[8];
static int depth, pushes, pops, syncs, exchanges, fail_exchange;
static CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
static CUresult m_getcur(CUcontext *c) { *c = cur_ctx; return CUDA_SUCCESS; }
static CUresult m_push(CUcontext c) {
    if (depth == 8) return CUDA_ERROR_INVALID_VALUE;
    pushes++;
    ctx_stack[depth++] = cur_ctx;
    cur_ctx = c;
    return CUDA_SUCCESS;
}
static CUresult m_pop(CUcontext *c) {
    if (!depth) return CUDA_ERROR_INVALID_CONTEXT;
    pops++;
    *c = cur_ctx;
    cur_ctx = ctx_stack[--depth];
    return CUDA_SUCCESS;
}
static CUresult m_sync(void) { syncs++; return CUDA_SUCCESS; }
static CUresult m_exchange(CUstreamCaptureMode *m) {
    exchanges++;
    if (fail_exchange) return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = thread_mode;
    thread_mode = *m;
    *m = old;
    return CUDA_SUCCESS;
}
static void ctx_mock(int on) {
    mock.pfn_cuCtxGetCurrent = on ? m_getcur : NULL;
    mock.pfn_cuCtxPushCurrent_v2 = on ? m_push : NULL;
    mock.pfn_cuCtxPopCurrent_v2 = on ? m_pop : NULL;
    mock.pfn_cuCtxSynchronize = on ? m_sync : NULL;
    mock.pfn_cuThreadExchangeStreamCaptureMode = on ? m_exchange : NULL;
    cur_ctx = NULL;
    depth = pushes = pops = syncs = exchanges = fail_exchange = 0;
    thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
}
static int any_range(const ld_range_t *r, void *arg) { (void)r; (void)arg; return 1; }

static void test_vmm_alloc_free(void) {
    CUcontext A = (CUcontext)0xA0, B = (CUcontext)0xB0, C = (CUcontext)0xC0;
    ld_range_t r, f;
    char why[160];
    int dom[2] = {0, 1};
    reset_mock();
    ctx_mock(1);
    ld_cfg.policy.pool_cap = 0;                 /* every free tears down */
    cur_ctx = B;
    CU_ASSERT_EQUAL_FATAL(ld_vmm_alloc(&mock, &dev0, A, 7, 8 * MB, 2, dom, &r, why, sizeof why), CUDA_SUCCESS);
    CU_ASSERT_EQUAL(ld_registry_find(r.base + 1, &f), 0);
    CU_ASSERT_EQUAL(f.base, r.base);
    CU_ASSERT_EQUAL(f.rule, 7);
    CU_ASSERT_PTR_EQUAL(f.ctx, A);
    CU_ASSERT_EQUAL(ld_vmm_free(&mock, r.base + 1), -1);   /* interior: nothing done */
    CU_ASSERT_EQUAL(ld_registry_count(), 1);
    CU_ASSERT_EQUAL(syncs, 0);
    CU_ASSERT_EQUAL(ld_vmm_free(&mock, r.base), 0);
    CU_ASSERT_EQUAL(pushes, 1);                /* A was not current: pushed for the sync */
    CU_ASSERT_EQUAL(syncs, 1);
    CU_ASSERT_EQUAL(pops, 1);
    CU_ASSERT_PTR_EQUAL(cur_ctx, B);
    CU_ASSERT_EQUAL(ld_registry_find(r.base, &f), -1);
    CU_ASSERT_EQUAL(live_handles + live_maps + live_reserve, 0);
    CU_ASSERT_EQUAL(ld_vmm_free(&mock, r.base), -1);       /* freed already */

    /* Made and freed in the current context: no push. */
    cur_ctx = A;
    CU_ASSERT_EQUAL_FATAL(ld_vmm_alloc(&mock, &dev0, A, -1, 2 * MB, 1, dom, &r, why, sizeof why), CUDA_SUCCESS);
    CU_ASSERT_EQUAL(ld_vmm_free(&mock, r.base), 0);
    CU_ASSERT_EQUAL(pushes, 1);
    CU_ASSERT_EQUAL(syncs, 2);

    /* The registry refuses the range (a record already covers its addresses): nothing is
     * left behind and the reason says why. */
    ld_range_t block = mk(next_va, 256 * MB);
    CU_ASSERT_EQUAL_FATAL(ld_registry_insert(&block), 0);
    CU_ASSERT_EQUAL(ld_vmm_alloc(&mock, &dev0, A, 0, 8 * MB, 2, dom, &r, why, sizeof why), CUDA_ERROR_OUT_OF_MEMORY);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "registry insert failed"));
    CU_ASSERT_EQUAL(live_handles + live_maps + live_reserve, 0);
    CU_ASSERT_EQUAL(ld_registry_remove(block.base, NULL), 0);

    /* A dying context: every range goes, each context they were made in is synchronized once. */
    ld_range_t a1, a2, c1;
    CU_ASSERT_EQUAL_FATAL(ld_vmm_alloc(&mock, &dev0, A, 0, 4 * MB, 2, dom, &a1, why, sizeof why), CUDA_SUCCESS);
    CU_ASSERT_EQUAL_FATAL(ld_vmm_alloc(&mock, &dev0, A, 0, 4 * MB, 2, dom, &a2, why, sizeof why), CUDA_SUCCESS);
    CU_ASSERT_EQUAL_FATAL(ld_vmm_alloc(&mock, &dev0, C, 0, 4 * MB, 2, dom, &c1, why, sizeof why), CUDA_SUCCESS);
    syncs = pushes = 0;
    CU_ASSERT_EQUAL(ld_vmm_teardown_if(&mock, any_range, NULL, A), 3);
    CU_ASSERT_EQUAL(syncs, 2);                 /* A first, then C */
    CU_ASSERT_EQUAL(pushes, 2);
    CU_ASSERT_EQUAL(ld_registry_count(), 0);
    CU_ASSERT_EQUAL(live_handles + live_maps + live_reserve, 0);
    CU_ASSERT_EQUAL(ld_vmm_teardown_if(&mock, any_range, NULL, A), 0);
    CU_ASSERT_EQUAL(syncs, 2);                 /* nothing to wait for */
    ctx_mock(0);
}

static void test_own_calls(void) {
    CUcontext A = (CUcontext)0xA0, B = (CUcontext)0xB0;
    ld_own_calls_t oc;
    ctx_mock(1);
    cur_ctx = B;
    ld_own_calls_begin(&oc, &mock);
    CU_ASSERT_EQUAL(thread_mode, CU_STREAM_CAPTURE_MODE_RELAXED);
    CU_ASSERT_EQUAL(ld_own_calls_push(&oc, A), 0);
    CU_ASSERT_PTR_EQUAL(cur_ctx, A);
    CU_ASSERT_EQUAL(ld_own_calls_push(&oc, B), -1);    /* one push per scope */
    ld_own_calls_pop(&oc);
    CU_ASSERT_PTR_EQUAL(cur_ctx, B);
    ld_own_calls_pop(&oc);                              /* nothing left to pop */
    CU_ASSERT_EQUAL(pops, 1);
    ld_own_calls_end(&oc);
    CU_ASSERT_EQUAL(thread_mode, CU_STREAM_CAPTURE_MODE_GLOBAL);
    CU_ASSERT_EQUAL(exchanges, 2);

    /* end pops what is still pushed */
    ld_own_calls_begin(&oc, &mock);
    ld_own_calls_push(&oc, A);
    ld_own_calls_end(&oc);
    CU_ASSERT_PTR_EQUAL(cur_ctx, B);
    CU_ASSERT_EQUAL(depth, 0);
    CU_ASSERT_EQUAL(thread_mode, CU_STREAM_CAPTURE_MODE_GLOBAL);

    /* an exchange that failed is not undone: the program's mode stays as it was */
    fail_exchange = 1;
    exchanges = 0;
    ld_own_calls_begin(&oc, &mock);
    fail_exchange = 0;
    ld_own_calls_end(&oc);
    CU_ASSERT_EQUAL(exchanges, 1);
    CU_ASSERT_EQUAL(thread_mode, CU_STREAM_CAPTURE_MODE_GLOBAL);

    /* a driver without the entry: nothing to relax, nothing called */
    mock.pfn_cuThreadExchangeStreamCaptureMode = NULL;
    ld_own_calls_begin(&oc, &mock);
    CU_ASSERT_EQUAL(ld_own_calls_push(&oc, A), 0);
    ld_own_calls_end(&oc);
    CU_ASSERT_PTR_EQUAL(cur_ctx, B);
    ctx_mock(0);
}

/* LDSHIM_LOG_SUBSYS's reading: names and `all`, any case, `^` inverts; an unknown or empty
 * name refuses the whole value and leaves the mask as it was. */
static void test_log_subsys(void) {
    unsigned m = 0;
    char bad[80];
    CU_ASSERT_EQUAL(ld_log_parse_subsys("probe", &m, bad, sizeof bad), 0);
    CU_ASSERT_EQUAL(m, LD_SUB_PROBE);
    CU_ASSERT_EQUAL(ld_log_parse_subsys("Probe,ALLOC,topo", &m, bad, sizeof bad), 0);
    CU_ASSERT_EQUAL(m, LD_SUB_PROBE | LD_SUB_ALLOC | LD_SUB_TOPO);
    CU_ASSERT_EQUAL(ld_log_parse_subsys("all", &m, bad, sizeof bad), 0);
    CU_ASSERT_EQUAL(m, LD_SUB_ALL);
    CU_ASSERT_EQUAL(ld_log_parse_subsys("^config,policy", &m, bad, sizeof bad), 0);
    CU_ASSERT_EQUAL(m, LD_SUB_ALL & ~(LD_SUB_CONFIG | LD_SUB_POLICY));
    CU_ASSERT_EQUAL(ld_log_parse_subsys("^all", &m, bad, sizeof bad), 0);
    CU_ASSERT_EQUAL(m, 0);
    static const struct { const char *s, *bad; } refused[] = {
        {"bogus", "bogus"}, {"probe,bogus", "bogus"}, {"probe,,alloc", ""}, {"alloc,", ""}, {",alloc", ""},
        {"^", ""}, {"^^probe", "^probe"}, {"probe ", "probe "}, {"prob", "prob"}, {"probes", "probes"},
        {"al", "al"}, {"^^", "^"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        m = 12345;
        strcpy(bad, "unset");
        CU_ASSERT_EQUAL(ld_log_parse_subsys(refused[i].s, &m, bad, sizeof bad), -1);
        CU_ASSERT_EQUAL(m, 12345);
        CU_ASSERT_STRING_EQUAL(bad, refused[i].bad);
    }
    /* Every subsystem has its own name, and a line's tag is that name. */
    for (unsigned b = 1; b & LD_SUB_ALL; b <<= 1) {
        CU_ASSERT_EQUAL(ld_log_parse_subsys(ld_log_subsys_name(b), &m, bad, sizeof bad), 0);
        CU_ASSERT_EQUAL(m, b);
    }
    CU_ASSERT_STRING_EQUAL(ld_log_subsys_name(LD_SUB_PROBE | LD_SUB_ALLOC), "?");
    CU_ASSERT_STRING_EQUAL(ld_log_subsys_name(0), "?");
    /* The filter: info and debug lines by subsystem, errors and warnings always. */
    int level = ld_log_level;
    unsigned subsys = ld_log_subsys;
    ld_log_level = LD_LOG_DEBUG;
    ld_log_subsys = LD_SUB_PROBE;
    CU_ASSERT_TRUE(ld_log_on(LD_LOG_DEBUG, LD_SUB_PROBE));
    CU_ASSERT_FALSE(ld_log_on(LD_LOG_INFO, LD_SUB_ALLOC));
    CU_ASSERT_FALSE(ld_log_on(LD_LOG_DEBUG, LD_SUB_ALLOC));
    CU_ASSERT_TRUE(ld_log_on(LD_LOG_WARN, LD_SUB_ALLOC));
    CU_ASSERT_TRUE(ld_log_on(LD_LOG_ERROR, LD_SUB_ALLOC));
    ld_log_level = LD_LOG_WARN;
    CU_ASSERT_FALSE(ld_log_on(LD_LOG_INFO, LD_SUB_PROBE));
    ld_log_level = level;
    ld_log_subsys = subsys;
}

static void register_tests(void) {
    CU_pSuite s = CU_add_suite("shim_core", setup, NULL);
    CU_add_test(s, "registry: interior lookup and exact remove", test_registry_interior);
    CU_add_test(s, "registry: overlap refused", test_registry_overlap);
    CU_add_test(s, "registry: random against a model", test_registry_random);
    CU_add_test(s, "registry: 8 threads", test_registry_threads);
    CU_add_test(s, "vmm: slice layout rounded to granularity", test_vmm_layout);
    CU_add_test(s, "vmm: failures undo everything", test_vmm_undo);
    CU_add_test(s, "vmm: slice x slices overflow refused", test_vmm_overflow);
    CU_add_test(s, "vmm: teardown retries a failed call once", test_vmm_teardown_retry);
    CU_add_test(s, "pool: whole ranges reused, cap, trim, out-of-memory retry", test_pool);
    CU_add_test(s, "pool: 36 shapes interleaved, exact shape, most recent first", test_pool_shapes);
    CU_add_test(s, "pool: per-device bytes under keep, take, trim; cap refusals", test_pool_accounting);
    CU_add_test(s, "pool: trim of one device leaves the others", test_pool_trim_device);
    CU_add_test(s, "pool: a trim without a driver frees the handle arrays", test_pool_forget_frees_handles);
    CU_add_test(s, "pool: contains over every shape", test_pool_contains);
    CU_add_test(s, "pool: forked child resets without the driver", test_pool_fork);
    CU_add_test(s, "pool: no host memory for the table refuses, never exits", test_pool_out_of_memory);
    CU_add_test(s, "pool: a free/allocate loop allocates no table memory; emptied shapes bounded", test_pool_cycle_allocates_nothing);
    CU_add_test(s, "pool: random keep/take/trim against a model, table bounded", test_pool_random_model);
    CU_add_test(s, "pool: 8 threads keep, take, contains", test_pool_threads);
    CU_add_test(s, "device: peer grants reach new ranges", test_peer_mask);
    CU_add_test(s, "vmm: registered create and free, refusal, a dying context's ranges", test_vmm_alloc_free);
    CU_add_test(s, "driver: own calls relax the capture mode and push a context, then undo both", test_own_calls);
    CU_add_test(s, "topology: image scan for the symbol", test_image_scan);
    CU_add_test(s, "log: LDSHIM_LOG_SUBSYS parsed whole; filters info and debug only", test_log_subsys);
}

#include "tests/unit/cunit_main.h"
