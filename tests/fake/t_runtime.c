/* t_runtime.c — runtime-API test program. Built twice: against the fake dynamic cudart
 * (build/fake/t_runtime) and with the fake static cudart linked in (t_runtime_static,
 * -DFAKE_STATIC_CUDART). Run under the shim by tests/fake/run_cases.py; `--help` lists cases.
 */
#include "tests/fake/fake_cudart.h"
#include "tests/fake/t_common.h"

#include <fcntl.h>
#include <link.h>

#ifdef FAKE_STATIC_CUDART
#define PROG "t_runtime_static"
#else
#define PROG "t_runtime"
#endif

typedef int (*drv_alloc_fn)(unsigned long long *, size_t);
typedef int (*drv_free_fn)(unsigned long long);

static const char *usage =
    "usage: " PROG " CASE [ARGS]   (sizes like 8MiB)\n"
    "  alloc SIZE            cudaMalloc, describe, fill, cudaFree\n"
    "  entry HOW SIZE        HOW: default | byversion: cuMemAlloc via cudaGetDriverEntryPoint*\n"
    "  free SIZE             interior cudaFree fails, base cudaFree works\n"
    "  ipc TAGGED UNTAGGED   cudaIpcGetMemHandle on tagged / untagged memory\n"
    "  stock T U             a fixed sequence whose observable results are printed\n"
    "  oom SIZE              prints the return code of one cudaMalloc\n"
    "  launch SIZE           cudaMalloc, then a kernel on the NULL stream, a created stream and\n"
    "                        cudaStreamPerThread: the SMs each ran on (compute binding)\n"
    "  shim-first            cuCtxGetCurrent through the shim before any runtime call (it loads\n"
    "                        LDSHIM_LIBCUDA itself), then dlsym(libcuda.so.1, cuMemAlloc_v2):\n"
    "                        the file that entry lies in\n";

static void ready(void) {
    int n = 0;
    CHECK_RC(cudaGetDeviceCount(&n), cudaSuccess);
    CHECK(n >= 1);
    CHECK_RC(cudaSetDevice(0), cudaSuccess);
    t_fake_init();   /* libcuda.so.1 is loaded by now */
}

static int case_alloc(size_t size) {
    void *p = NULL;
    CHECK_RC(cudaMalloc(&p, size), cudaSuccess);
    CHECK(p != NULL && (uintptr_t)p % 512 == 0);
    t_describe("a", (uint64_t)(uintptr_t)p, size);
    t_fill_check((uint64_t)(uintptr_t)p, size, 5);
    CHECK_RC(cudaMemset(p, 0x11, size), cudaSuccess);
    struct cudaPointerAttributes at;
    CHECK_RC(cudaPointerGetAttributes(&at, (char *)p + size - 1), cudaSuccess);
    printf("attr_type=%d\nattr_device=%d\n", (int)at.type, at.device);
    int before = t_fake.sync_count();
    CHECK_RC(cudaFree(p), cudaSuccess);
    printf("free_syncs=%d\n", t_fake.sync_count() - before);
    return 0;
}

static int case_entry(const char *how, size_t size) {
    void *fa = NULL, *ff = NULL;
    cudaDriverEntryPointQueryResult st = cudaDriverEntryPointSymbolNotFound;
    if (!strcmp(how, "default")) {
        CHECK_RC(cudaGetDriverEntryPoint("cuMemAlloc", &fa, cudaEnableDefault, &st), cudaSuccess);
        CHECK_RC(cudaGetDriverEntryPoint("cuMemFree", &ff, cudaEnableDefault, NULL), cudaSuccess);
    } else if (!strcmp(how, "byversion")) {
        CHECK_RC(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fa, 12000, cudaEnableDefault, &st), cudaSuccess);
        CHECK_RC(cudaGetDriverEntryPointByVersion("cuMemFree", &ff, 12000, cudaEnableDefault, NULL), cudaSuccess);
    } else {
        fprintf(stderr, PROG ": unknown HOW '%s'\n%s", how, usage);
        exit(2);
    }
    CHECK(st == cudaDriverEntryPointSuccess && fa && ff);
    unsigned long long p = 0;
    CHECK_RC(((drv_alloc_fn)fa)(&p, size), 0);
    t_describe("a", p, size);
    t_fill_check(p, size, 9);
    CHECK_RC(((drv_free_fn)ff)(p), 0);
    return 0;
}

static int case_free(size_t size) {
    void *p = NULL;
    CHECK_RC(cudaMalloc(&p, size), cudaSuccess);
    t_describe("f", (uint64_t)(uintptr_t)p, size);
    t_fill_check((uint64_t)(uintptr_t)p, size, 2);
    printf("free_interior=%d\n", (int)cudaFree((char *)p + 4096));
    printf("free_base=%d\n", (int)cudaFree(p));
    return 0;
}

static int case_ipc(size_t tagged, size_t untagged) {
    void *t = NULL, *u = NULL;
    CHECK_RC(cudaMalloc(&t, tagged), cudaSuccess);
    CHECK_RC(cudaMalloc(&u, untagged), cudaSuccess);
    cudaIpcMemHandle_t h;
    printf("t_shim=%d\n", t_is_shim((uint64_t)(uintptr_t)t, NULL));
    printf("ipc_tagged=%d\n", (int)cudaIpcGetMemHandle(&h, t));
    printf("ipc_untagged=%d\n", (int)cudaIpcGetMemHandle(&h, u));
    CHECK_RC(cudaFree(t), cudaSuccess);
    CHECK_RC(cudaFree(u), cudaSuccess);
    return 0;
}

static int case_stock(size_t tagged, size_t untagged) {
    void *t = NULL, *u = NULL;
    size_t fr0 = 0, fr1 = 0, tot = 0;
    int c[5];
    CHECK_RC(cudaMemGetInfo(&fr0, &tot), cudaSuccess);
    printf("alloc_t=%d\n", (int)cudaMalloc(&t, tagged));
    printf("alloc_u=%d\n", (int)cudaMalloc(&u, untagged));
    CHECK_RC(cudaMemGetInfo(&fr1, &tot), cudaSuccess);
    printf("used=%zu\n", fr0 - fr1);
    printf("t_shim=%d\nt_domain=%d\n", t_is_shim((uint64_t)(uintptr_t)t, NULL), t_fake.domain_of(t));
    t_fake.counts(c);
    printf("counts=%d,%d,%d,%d,%d\n", c[0], c[1], c[2], c[3], c[4]);
    cudaIpcMemHandle_t h;
    printf("ipc_t=%d\n", (int)cudaIpcGetMemHandle(&h, t));
    printf("free_interior=%d\n", (int)cudaFree((char *)t + 4096));
    printf("free_t=%d\n", (int)cudaFree(t));
    printf("free_u=%d\n", (int)cudaFree(u));
    printf("free_null=%d\n", (int)cudaFree(NULL));
    t_fake.counts(c);
    printf("counts_end=%d,%d,%d,%d,%d\n", c[0], c[1], c[2], c[3], c[4]);
    return 0;
}

static int case_oom(size_t size) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, size);
    printf("rc=%d\n", (int)e);
    if (e == cudaSuccess) CHECK_RC(cudaFree(p), cudaSuccess);
    return 0;
}

static void launched(const char *tag) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(h);
    int (*last)(unsigned char *, unsigned *) = (int (*)(unsigned char *, unsigned *))dlsym(h, "fakecuda_last_launch");
    int (*side)(int) = (int (*)(int))dlsym(h, "fakecuda_sm_side");
    CHECK(last && side);
    unsigned char sms[256];
    int n = last(sms, NULL), s = -2;
    for (int i = 0; i < 256; i++)
        if (sms[i]) s = s == -2 ? side(i) : (s == side(i) ? s : -1);
    printf("%s_sms=%d\n", tag, n);
    if (s == -1) printf("%s_side=mixed\n", tag);
    else printf("%s_side=%d\n", tag, s);
}

static int case_launch(size_t size) {
    void *p = NULL;
    CHECK_RC(cudaMalloc(&p, size), cudaSuccess);
    CHECK_RC(fakert_launch(8, NULL), cudaSuccess);
    launched("null");
    cudaStream_t s;
    CHECK_RC(cudaStreamCreate(&s), cudaSuccess);
    CHECK_RC(fakert_launch(8, s), cudaSuccess);
    launched("stream");
    cudaError_t e = fakert_launch(8, cudaStreamPerThread);
    printf("pts_rc=%d\n", (int)e);
    if (e == cudaSuccess) launched("pts");
    printf("pts_sync_rc=%d\n", (int)cudaStreamSynchronize(cudaStreamPerThread));
    CHECK_RC(cudaStreamSynchronize(s), cudaSuccess);
    CHECK_RC(cudaStreamDestroy(s), cudaSuccess);
    CHECK_RC(cudaDeviceSynchronize(), cudaSuccess);
    CHECK_RC(cudaFree(p), cudaSuccess);
    return 0;
}

/* The shim loads the driver first (LDSHIM_LIBCUDA names a path: it is loaded as
 * /proc/self/fd/N); the program then reaches the same library by its soname, and a hooked
 * entry it looks up must still be the shim's wrapper. */
static int case_shim_first(void) {
    int (*current)(void **) = (int (*)(void **))dlsym(RTLD_DEFAULT, "cuCtxGetCurrent");   /* the shim's */
    void *ctx = NULL;
    CHECK(current);
    printf("current_rc=%d\n", current(&ctx));
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(h);
    void *p = dlsym(h, "cuMemAlloc_v2");
    Dl_info info;
    CHECK(p && dladdr(p, &info) && info.dli_fname);
    const char *base = strrchr(info.dli_fname, '/');
    printf("entry_in=%s\n", base ? base + 1 : info.dli_fname);
    /* The descriptor the shim loaded it through is closed: a file of the program's own that
     * gets the number next, loaded as /proc/self/fd/N, must be that file, not libcuda by name. */
    struct link_map *lm = NULL;
    CHECK(dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name);
    const char *slash = strrchr(lm->l_name, '/');
    int n = slash && !strncmp(lm->l_name, "/proc/self/fd/", 14) ? atoi(slash + 1) : -1;
    Dl_info rt;
    CHECK(dladdr((void *)cudaMalloc, &rt) && rt.dli_fname);
    int fd = open(rt.dli_fname, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    char name[40];
    snprintf(name, sizeof name, "/proc/self/fd/%d", fd);
    void *again = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
    printf("fd_reused=%d\n", fd == n);
    printf("fd_name_gives_libcuda=%d\n", again == h);
    close(fd);
    return 0;
}

int main(int argc, char **argv) {
    t_prog = PROG;
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *c = argv[1];
#define ARGS(n) do { if (argc != (n) + 2) { fprintf(stderr, PROG ": %s needs %d arguments\n%s", c, n, usage); return 2; } } while (0)
    if (!strcmp(c, "shim-first")) { ARGS(0); return case_shim_first(); }
    ready();
    if (!strcmp(c, "alloc")) { ARGS(1); return case_alloc(t_size(argv[2])); }
    if (!strcmp(c, "entry")) { ARGS(2); return case_entry(argv[2], t_size(argv[3])); }
    if (!strcmp(c, "free")) { ARGS(1); return case_free(t_size(argv[2])); }
    if (!strcmp(c, "ipc")) { ARGS(2); return case_ipc(t_size(argv[2]), t_size(argv[3])); }
    if (!strcmp(c, "stock")) { ARGS(2); return case_stock(t_size(argv[2]), t_size(argv[3])); }
    if (!strcmp(c, "oom")) { ARGS(1); return case_oom(t_size(argv[2])); }
    if (!strcmp(c, "launch")) { ARGS(1); return case_launch(t_size(argv[2])); }
    fprintf(stderr, PROG ": unknown case '%s'\n%s", c, usage);
    return 2;
}
