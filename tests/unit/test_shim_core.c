/* test_shim_core.c — registry, pool and range layout of the shim core, against a mock
 * driver table (the driver is a struct of function pointers, so no library is needed). */
#include "shim/config.h"
#include "shim/device.h"
#include "shim/pool.h"
#include "shim/registry.h"
#include "shim/image.h"
#include "shim/topology.h"
#include "shim/vmm.h"

#include <CUnit/Basic.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
    ld_pool_trim(&mock, -1);
    live_handles = 0;
}

static int setup(void) {
    memset(&mock, 0, sizeof mock);
    mock.cuMemAddressReserve = m_reserve;
    mock.cuMemAddressFree = m_afree;
    mock.cuMemRelease = m_release;
    mock.cuMemMap = m_map;
    mock.cuMemUnmap = m_unmap;
    mock.cuMemSetAccess = m_access;
    mock.cuGetErrorName = m_errname;
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
    /* 96 MiB + 1 byte over 2 domains -> slices of 50 MiB (rounded to 2 MiB) */
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &dev0, 96 * MB + 1, 2, dom, &r, why, sizeof why), CUDA_SUCCESS);
    CU_ASSERT_EQUAL(r.slice, 50 * MB);
    CU_ASSERT_EQUAL(r.reserved, 100 * MB);
    CU_ASSERT_EQUAL(last_reserve, 100 * MB);
    CU_ASSERT_EQUAL(r.domain_of[0], 0);
    CU_ASSERT_EQUAL(r.domain_of[1], 1);
    CU_ASSERT_EQUAL(live_handles, 2);
    CU_ASSERT_EQUAL(live_maps, 2);
    CU_ASSERT_EQUAL(access_count, 1);
    ld_vmm_destroy(&mock, &r);
    CU_ASSERT_EQUAL(live_handles, 0);
    CU_ASSERT_EQUAL(live_maps, 0);
    CU_ASSERT_EQUAL(live_reserve, 0);
    /* exact multiple: 64 MiB -> 2 x 32 MiB, no waste */
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &dev0, 64 * MB, 2, dom, &r, why, sizeof why), CUDA_SUCCESS);
    CU_ASSERT_EQUAL(r.slice, 32 * MB);
    CU_ASSERT_EQUAL(r.reserved, 64 * MB);
    ld_vmm_destroy(&mock, &r);
    /* tiny request still gets one granule per slice */
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &dev0, 1, 2, dom, &r, why, sizeof why), CUDA_SUCCESS);
    CU_ASSERT_EQUAL(r.slice, 2 * MB);
    ld_vmm_destroy(&mock, &r);
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
    ld_vmm_destroy(&mock, &r);
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
            ld_vmm_destroy(&mock, &r);
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
    ld_vmm_destroy(&mock, &r);
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
    ld_vmm_destroy(&mock, &r2);
    /* other domain order (mismatch) is another shape: not reused */
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &dev0, 64 * MB, 2, swapped, &r2, why, sizeof why), CUDA_SUCCESS);
    CU_ASSERT_NOT_EQUAL(r2.base, r.base);
    CU_ASSERT_EQUAL(r2.domain_of[0], 1);
    ld_vmm_destroy(&mock, &r2);                /* over the cap (64 + 64 > 64): torn down */
    CU_ASSERT_EQUAL(live_reserve, 1);
    CU_ASSERT_EQUAL(ld_pool_trim(&mock, -1), 64 * MB);
    CU_ASSERT_EQUAL(live_handles + live_maps + live_reserve, 0);
    /* a range larger than the cap is never kept */
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &dev0, 96 * MB, 2, dom, &r, why, sizeof why), CUDA_SUCCESS);
    ld_vmm_destroy(&mock, &r);
    CU_ASSERT_EQUAL(live_handles + live_maps + live_reserve, 0);
    /* out of memory with a warm pool: trimmed and retried */
    reset_mock();
    ld_cfg.policy.pool_cap = 64 * MB;
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &dev0, 4 * MB, 2, dom, &r, why, sizeof why), CUDA_SUCCESS);
    ld_vmm_destroy(&mock, &r);                 /* pool holds a 4 MiB range */
    fail_create_at = creates + 1;              /* the next create fails once */
    CU_ASSERT_EQUAL(ld_vmm_create(&mock, &dev0, 8 * MB, 2, dom, &r, why, sizeof why), CUDA_SUCCESS);
    ld_pool_stats(&s);
    CU_ASSERT_EQUAL(s.cached_bytes, 0);
    CU_ASSERT(s.trims >= 1);
    ld_vmm_destroy(&mock, &r);
    ld_pool_trim(&mock, -1);
    CU_ASSERT_EQUAL(live_handles + live_maps + live_reserve, 0);
}

static void test_peer_mask(void) {
    CU_ASSERT_EQUAL(ld_device_access_mask(3), 1ull << 3);
    ld_device_grant_peer(&mock, 3, 5);         /* no live ranges: only remembered */
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
    ld_vmm_destroy(&mock, &r);
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
    CU_add_test(s, "device: peer grants reach new ranges", test_peer_mask);
    CU_add_test(s, "topology: image scan for the symbol", test_image_scan);
}

#include "tests/unit/cunit_main.h"
