/* t_vmm.c — self-test of the fake driver's VMM, failure injection and limits, run without the
 * shim (the suite's "fake/..." cases). It checks that the fake behaves like the real driver
 * where FACTS.md says so, so that the shim's tests measure the shim and not the fake.
 * `t_vmm --help` lists the subcommands.
 */
#include "shim/cuda_compat.h"
#include "tests/fake/t_common.h"
#include "tests/fake/fake_api.h"

#include <sys/wait.h>

#define MiB ((size_t)1 << 20)

static const char *usage =
    "usage: t_vmm CASE\n"
    "  vmm        two handles in one range: access, seam, range, free/IPC refusal, teardown order\n"
    "  domains    type-6 locality-domain handles (needs FAKE_CUDA_DOMAINS=2)\n"
    "  share      export/import of POSIX fds, across a fork too\n"
    "  inject     FAKE_CUDA_FAIL=cuMemCreate:2,cuMemMap:1+:999 semantics\n"
    "  limit      FAKE_CUDA_MEM_LIMIT=8MiB caps plain + VMM memory\n"
    "  procaddr   cuGetProcAddress_v2 version table\n"
    "  init       calls before cuInit fail with CUDA_ERROR_NOT_INITIALIZED\n";

static CUmemAllocationProp prop_dev(int dev) {
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

static void counts_are(int a, int b, int c, int d) {
    int n[5];
    t_fake.counts(n);
    if (n[0] != a || n[1] != b || n[2] != c || n[3] != d) {
        fprintf(stderr, "t_vmm: counts %d,%d,%d,%d expected %d,%d,%d,%d\n", n[0], n[1], n[2], n[3], a, b, c, d);
        exit(1);
    }
}

static void setup(void) {
    CHECK_RC(cuInit(0), CUDA_SUCCESS);
    CUcontext c;
    CHECK_RC(cuDevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
    CHECK_RC(cuCtxSetCurrent(c), CUDA_SUCCESS);
    t_fake_init();
}

static int case_vmm(void) {
    CUmemAllocationProp p = prop_dev(0);
    size_t g = 0;
    CHECK_RC(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), CUDA_SUCCESS);
    CHECK(g == 2 * MiB);
    CUmemGenericAllocationHandle h[2];
    CHECK_RC(cuMemCreate(&h[0], 3 * MiB, &p, 0), CUDA_ERROR_INVALID_VALUE);   /* not a multiple */
    CHECK_RC(cuMemCreate(&h[0], 4 * MiB, &p, 0), CUDA_SUCCESS);
    CHECK_RC(cuMemCreate(&h[1], 4 * MiB, &p, 0), CUDA_SUCCESS);
    CUdeviceptr va = 0;
    CHECK_RC(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0), CUDA_SUCCESS);
    CHECK(va % (2 * MiB) == 0);
    counts_are(0, 2, 1, 0);
    CHECK_RC(cuMemMap(va, 2 * MiB, 0, h[0], 0), CUDA_ERROR_INVALID_VALUE);   /* size != handle */
    CHECK_RC(cuMemMap(va + 8 * MiB, 4 * MiB, 0, h[0], 0), CUDA_ERROR_INVALID_VALUE);   /* outside */
    CHECK_RC(cuMemMap(va, 4 * MiB, 0, h[0], 0), CUDA_SUCCESS);
    CHECK(cuMemMap(va + 2 * MiB, 4 * MiB, 0, h[1], 0) != CUDA_SUCCESS);   /* overlap */
    CUmemAccessDesc ad = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 }, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CHECK_RC(cuMemSetAccess(va, 8 * MiB, &ad, 1), CUDA_ERROR_INVALID_VALUE);   /* half unmapped */
    CHECK_RC(cuMemMap(va + 4 * MiB, 4 * MiB, 0, h[1], 0), CUDA_SUCCESS);
    counts_are(0, 2, 1, 2);
    CHECK(t_fake.access_of((void *)va, 0) == 0);
    CHECK_RC(cuMemsetD8_v2(va, 1, 16), CUDA_ERROR_INVALID_VALUE);   /* not accessible yet */
    CHECK_RC(cuMemSetAccess(va, 8 * MiB, &ad, 1), CUDA_SUCCESS);
    CHECK(t_fake.access_of((void *)va, 0) == 3 && t_fake.access_of((void *)(va + 8 * MiB - 1), 0) == 3);
    CHECK(t_fake.domain_of((void *)va) == -1 && t_fake.domain_of((void *)(va + 8 * MiB)) == -2);
    t_fill_check(va, 8 * MiB, 4);   /* across the seam */
    CHECK_RC(cuMemsetD8_v2(va + 4 * MiB - 8, 0x77, 16), CUDA_SUCCESS);
    /* FACTS.md: the range query answers only the sub-mapping; free and IPC refuse VMM memory. */
    CUdeviceptr base = 0;
    size_t sz = 0;
    CHECK_RC(cuMemGetAddressRange_v2(&base, &sz, va + 5 * MiB), CUDA_SUCCESS);
    CHECK(base == va + 4 * MiB && sz == 4 * MiB);
    CHECK_RC(cuMemFree_v2(va), CUDA_ERROR_INVALID_VALUE);
    CUipcMemHandle ih;
    CHECK_RC(cuIpcGetMemHandle(&ih, va), CUDA_ERROR_INVALID_VALUE);
    /* Teardown order rules. */
    CHECK_RC(cuMemRelease(h[0]), CUDA_SUCCESS);
    CHECK_RC(cuMemRelease(h[0]), CUDA_ERROR_INVALID_VALUE);
    counts_are(0, 2, 1, 2);   /* released but still mapped: memory stays */
    CHECK(((unsigned char *)va)[0] == (unsigned char)4);
    CHECK_RC(cuMemAddressFree(va, 8 * MiB), CUDA_ERROR_INVALID_VALUE);   /* still mapped */
    CHECK_RC(cuMemUnmap(va, 2 * MiB), CUDA_ERROR_INVALID_VALUE);          /* part of a mapping */
    CHECK_RC(cuMemUnmap(va, 8 * MiB), CUDA_SUCCESS);
    counts_are(0, 1, 1, 0);
    CHECK(t_fake.domain_of((void *)va) == -2);
    CHECK_RC(cuMemRelease(h[1]), CUDA_SUCCESS);
    CHECK_RC(cuMemAddressFree(va, 4 * MiB), CUDA_ERROR_INVALID_VALUE);   /* size mismatch */
    CHECK_RC(cuMemAddressFree(va, 8 * MiB), CUDA_SUCCESS);
    counts_are(0, 0, 0, 0);
    /* Plain memory: interior free refused, range answered for interior pointers. */
    CUdeviceptr q = 0;
    CHECK_RC(cuMemAlloc_v2(&q, 3 * MiB + 5), CUDA_SUCCESS);
    CHECK(q % 512 == 0);
    CHECK_RC(cuMemGetAddressRange_v2(&base, &sz, q + 3 * MiB), CUDA_SUCCESS);
    CHECK(base == q && sz == 3 * MiB + 5);
    CHECK_RC(cuIpcGetMemHandle(&ih, q), CUDA_SUCCESS);
    CHECK_RC(cuMemFree_v2(q + 512), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemFree_v2(q), CUDA_SUCCESS);
    CHECK_RC(cuMemGetAddressRange_v2(&base, &sz, q), CUDA_ERROR_NOT_FOUND);
    counts_are(0, 0, 0, 0);
    printf("vmm=ok\n");
    return 0;
}

static int case_domains(void) {
    CUmemAllocationProp p = prop_dev(0);
    int n = 0;
    CHECK_RC(cuDeviceGetAttribute(&n, (CUdevice_attribute)149, 0), CUDA_SUCCESS);
    CHECK(n == 2);
    CUmemGenericAllocationHandle h[2];
    CUdeviceptr va = 0;
    CHECK_RC(cuMemAddressReserve(&va, 4 * MiB, 0, 0, 0), CUDA_SUCCESS);
    for (int d = 0; d < 2; d++) {
        p.location.type = (CUmemLocationType)6;
        p.location.id = 0 | ((1 - d) << 8);   /* slice d in domain 1-d */
        CHECK_RC(cuMemCreate(&h[d], 2 * MiB, &p, 0), CUDA_SUCCESS);
        CHECK_RC(cuMemMap(va + (size_t)d * 2 * MiB, 2 * MiB, 0, h[d], 0), CUDA_SUCCESS);
    }
    p.location.id = 0 | (2 << 8);
    CUmemGenericAllocationHandle bad;
    CHECK_RC(cuMemCreate(&bad, 2 * MiB, &p, 0), CUDA_ERROR_INVALID_VALUE);   /* no domain 2 */
    printf("domains=%d,%d\n", t_fake.domain_of((void *)va), t_fake.domain_of((void *)(va + 2 * MiB)));
    CHECK_RC(cuMemUnmap(va, 4 * MiB), CUDA_SUCCESS);
    for (int d = 0; d < 2; d++) CHECK_RC(cuMemRelease(h[d]), CUDA_SUCCESS);
    CHECK_RC(cuMemAddressFree(va, 4 * MiB), CUDA_SUCCESS);
    return 0;
}

static int case_share(void) {
    CUmemAllocationProp p = prop_dev(0);
    CUmemGenericAllocationHandle h, h2;
    CHECK_RC(cuMemCreate(&h, 2 * MiB, &p, 0), CUDA_SUCCESS);
    int fd = -1;
    CHECK_RC(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
    CHECK(fd >= 0);
    int n[5];
    t_fake.counts(n);
    CHECK(n[4] == 1);
    CHECK_RC(cuMemImportFromShareableHandle(&h2, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
             CUDA_SUCCESS);
    close(fd);
    t_fake.counts(n);
    CHECK(n[1] == 2 && n[4] == 0);
    CUdeviceptr a = 0, b = 0;
    CUmemAccessDesc ad = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 }, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CHECK_RC(cuMemAddressReserve(&a, 2 * MiB, 0, 0, 0), CUDA_SUCCESS);
    CHECK_RC(cuMemAddressReserve(&b, 2 * MiB, 0, 0, 0), CUDA_SUCCESS);
    CHECK_RC(cuMemMap(a, 2 * MiB, 0, h, 0), CUDA_SUCCESS);
    CHECK_RC(cuMemMap(b, 2 * MiB, 0, h2, 0), CUDA_SUCCESS);
    CHECK_RC(cuMemSetAccess(a, 2 * MiB, &ad, 1), CUDA_SUCCESS);
    CHECK_RC(cuMemSetAccess(b, 2 * MiB, &ad, 1), CUDA_SUCCESS);
    strcpy((char *)a, "shared through a memfd");
    CHECK(strcmp((char *)b, "shared through a memfd") == 0);
    /* Across processes: a child writes through its own import of the exported fd. */
    CHECK_RC(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CUmemGenericAllocationHandle hc;
        CUdeviceptr c = 0;
        if (cuMemImportFromShareableHandle(&hc, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ||
            cuMemAddressReserve(&c, 2 * MiB, 0, 0, 0) || cuMemMap(c, 2 * MiB, 0, hc, 0) ||
            cuMemSetAccess(c, 2 * MiB, &ad, 1))
            _exit(3);
        strcpy((char *)c + 4096, "from the child");
        _exit(0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(strcmp((char *)b + 4096, "from the child") == 0);
    close(fd);
    /* Not exportable without the requested handle type. */
    CUmemAllocationProp q = prop_dev(0);
    q.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    CUmemGenericAllocationHandle h3;
    CHECK_RC(cuMemCreate(&h3, 2 * MiB, &q, 0), CUDA_SUCCESS);
    CHECK_RC(cuMemExportToShareableHandle(&fd, h3, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
             CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemRelease(h3), CUDA_SUCCESS);
    CHECK_RC(cuMemUnmap(a, 2 * MiB), CUDA_SUCCESS);
    CHECK_RC(cuMemUnmap(b, 2 * MiB), CUDA_SUCCESS);
    CHECK_RC(cuMemRelease(h), CUDA_SUCCESS);
    CHECK_RC(cuMemRelease(h2), CUDA_SUCCESS);
    CHECK_RC(cuMemAddressFree(a, 2 * MiB), CUDA_SUCCESS);
    CHECK_RC(cuMemAddressFree(b, 2 * MiB), CUDA_SUCCESS);
    counts_are(0, 0, 0, 0);
    printf("share=ok\n");
    return 0;
}

/* Expects FAKE_CUDA_FAIL=cuMemCreate:2,cuMemMap:1+:999 */
static int case_inject(void) {
    CUmemAllocationProp p = prop_dev(0);
    CUmemGenericAllocationHandle h[3];
    CHECK_RC(cuMemCreate(&h[0], 2 * MiB, &p, 0), CUDA_SUCCESS);
    CHECK_RC(cuMemCreate(&h[1], 2 * MiB, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_RC(cuMemCreate(&h[2], 2 * MiB, &p, 0), CUDA_SUCCESS);
    CUdeviceptr va = 0;
    CHECK_RC(cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0), CUDA_SUCCESS);
    CHECK_RC(cuMemMap(va, 2 * MiB, 0, h[0], 0), 999);
    CHECK_RC(cuMemMap(va, 2 * MiB, 0, h[0], 0), 999);
    CHECK_RC(cuMemRelease(h[0]), CUDA_SUCCESS);
    CHECK_RC(cuMemRelease(h[2]), CUDA_SUCCESS);
    CHECK_RC(cuMemAddressFree(va, 2 * MiB), CUDA_SUCCESS);
    counts_are(0, 0, 0, 0);
    printf("inject=ok\n");
    return 0;
}

/* Expects FAKE_CUDA_MEM_LIMIT=8388608 */
static int case_limit(void) {
    CUmemAllocationProp p = prop_dev(0);
    CUmemGenericAllocationHandle h;
    CUdeviceptr a = 0, b = 0;
    CHECK_RC(cuMemAlloc_v2(&a, 6 * MiB), CUDA_SUCCESS);
    CHECK_RC(cuMemCreate(&h, 4 * MiB, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_RC(cuMemCreate(&h, 2 * MiB, &p, 0), CUDA_SUCCESS);
    CHECK_RC(cuMemAlloc_v2(&b, 1), CUDA_ERROR_OUT_OF_MEMORY);
    size_t fr = 0, tot = 0;
    CHECK_RC(cuMemGetInfo_v2(&fr, &tot), CUDA_SUCCESS);
    CHECK(fr == 0 && tot == 8 * MiB);
    CHECK_RC(cuMemRelease(h), CUDA_SUCCESS);
    CHECK_RC(cuMemAlloc_v2(&b, 2 * MiB), CUDA_SUCCESS);
    CHECK_RC(cuMemFree_v2(a), CUDA_SUCCESS);
    CHECK_RC(cuMemFree_v2(b), CUDA_SUCCESS);
    printf("limit=ok\n");
    return 0;
}

static const char *symname(void *fn) {
    Dl_info di;
    return fn && dladdr(fn, &di) && di.dli_sname ? di.dli_sname : "?";
}

static int case_procaddr(void) {
    struct { const char *sym; int ver; cuuint64_t fl; const char *want; } t[] = {
        { "cuMemAlloc", 3020, 0, "cuMemAlloc_v2" },
        { "cuMemAlloc", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemAlloc_v2" },
        { "cuMemFree", 12000, 0, "cuMemFree_v2" },
        { "cuGetProcAddress", 11030, 0, "cuGetProcAddress" },
        { "cuGetProcAddress", 13000, 0, "cuGetProcAddress_v2" },
        { "cuMemcpyHtoD", 13000, 0, "cuMemcpyHtoD_v2" },
        { "cuMemcpyHtoD", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpyHtoD_v2_ptds" },
        { "cuCtxCreate", 12000, 0, "cuCtxCreate_v3" },
        { "cuCtxCreate", 12050, 0, "cuCtxCreate_v4" },
        { "cuDevicePrimaryCtxRelease", 13000, 0, "cuDevicePrimaryCtxRelease_v2" },
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult st;
        CHECK_RC(cuGetProcAddress_v2(t[i].sym, &fn, t[i].ver, t[i].fl, &st), CUDA_SUCCESS);
        if (strcmp(symname(fn), t[i].want) != 0) {
            fprintf(stderr, "t_vmm: %s@%d -> %s, expected %s\n", t[i].sym, t[i].ver, symname(fn), t[i].want);
            return 1;
        }
    }
    void *fn = (void *)1;
    CUdriverProcAddressQueryResult st;
    CHECK_RC(cuGetProcAddress_v2("cuMemCreate", &fn, 10000, 0, &st), CUDA_ERROR_NOT_FOUND);
    CHECK(st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT && fn == NULL);
    CHECK_RC(cuGetProcAddress_v2("cuBogus", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND);
    CHECK(st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    printf("procaddr=ok\n");
    return 0;
}

static int case_init(void) {
    int n = 0;
    CUdeviceptr p;
    CHECK_RC(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    CHECK_RC(cuMemAlloc_v2(&p, 4096), CUDA_ERROR_NOT_INITIALIZED);
    CHECK_RC(cuInit(0), CUDA_SUCCESS);
    CHECK_RC(cuMemAlloc_v2(&p, 4096), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuDeviceGetCount(&n), CUDA_SUCCESS);
    CUcontext c;
    CHECK_RC(cuCtxCreate_v4(&c, NULL, 0, 0), CUDA_SUCCESS);
    CUdevice d = -1;
    CHECK_RC(cuCtxGetDevice(&d), CUDA_SUCCESS);
    CHECK(d == 0);
    CHECK_RC(cuCtxDestroy_v2(c), CUDA_SUCCESS);
    CHECK_RC(cuCtxGetDevice(&d), CUDA_ERROR_INVALID_CONTEXT);
    int v = 0;
    CHECK_RC(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0), CUDA_SUCCESS);
    printf("devices=%d\nsms=%d\n", n, v);
    CHECK_RC(cuDeviceGetAttribute(&v, (CUdevice_attribute)149, 0), getenv("FAKE_CUDA_DOMAINS") ? 0 : 1);
    CUuuid u0, u1;
    CHECK_RC(cuDeviceGetUuid_v2(&u0, 0), CUDA_SUCCESS);
    if (n > 1) {
        CHECK_RC(cuDeviceGetUuid_v2(&u1, 1), CUDA_SUCCESS);
        CHECK(memcmp(u0.bytes, u1.bytes, 16) != 0);
    }
    return 0;
}

int main(int argc, char **argv) {
    t_prog = "t_vmm";
    if (argc != 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(usage, argc != 2 ? stderr : stdout);
        return argc != 2 ? 2 : 0;
    }
    const char *c = argv[1];
    if (!strcmp(c, "init")) { t_fake_init(); return case_init(); }
    setup();
    if (!strcmp(c, "vmm")) return case_vmm();
    if (!strcmp(c, "domains")) return case_domains();
    if (!strcmp(c, "share")) return case_share();
    if (!strcmp(c, "inject")) return case_inject();
    if (!strcmp(c, "limit")) return case_limit();
    if (!strcmp(c, "procaddr")) return case_procaddr();
    fprintf(stderr, "t_vmm: unknown case '%s'\n%s", c, usage);
    return 2;
}
