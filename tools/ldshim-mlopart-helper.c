/* ldshim-mlopart-helper — serves locality-domain memory to libldshim.so from a private
 * MPS server running in MLOPart mode, where each locality domain is its own CUDA device.
 *
 * Started by the shim (shim/mlopart_client.c), never by hand, with its end of an anonymous
 * socketpair at a fixed descriptor. Life: read START, fork the MPS supervisor
 * (tools/mlopart_mps.c), become an MPS client of that private server, count devices, reply,
 * then serve ALLOC/PING/QUIT until QUIT, EOF, or the parent's death. It links no CUDA
 * library: libcuda.so.1 is dlopened after the MPS environment is in place.
 *
 * Test-only switches (doc/mlopart.md): LDSHIM_MLOPART_TEST_SINGLE=1 lets one device stand
 * for every domain; LDSHIM_MLOPART_TEST_HOOK=word[,word] injects faults.
 */
#include "ldshim_build.h"   /* generated: LDSHIM_BUILD_VERSION, LDSHIM_BUILD_REVISION */
#include "shim/mlopart_prop.h"
#include "shim/dlcheck.h"
#include "shim/file.h"
#include "shim/mlopart_proto.h"
#include "shim/options.h"
#include "tools/mlopart_mps.h"

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

enum {
    kParentCheckMs = 500,   /* how often an idle helper checks that its parent lives */
    kMpsRetryMs = 100,      /* between client attempts while the MPS server starts     */
    kMaxDevices = 16,
};

typedef struct {
    CUresult (*pfn_cuInit)(unsigned);
    CUresult (*pfn_cuDeviceGetCount)(int *);
    CUresult (*pfn_cuDeviceGet)(CUdevice *, int);
    CUresult (*pfn_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*pfn_cuCtxSetCurrent)(CUcontext);
    CUresult (*pfn_cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                                unsigned long long);
    CUresult (*pfn_cuMemExportToShareableHandle)(void *, CUmemGenericAllocationHandle,
                                                 CUmemAllocationHandleType, unsigned long long);
    CUresult (*pfn_cuMemRelease)(CUmemGenericAllocationHandle);
    CUresult (*pfn_cuGetErrorName)(CUresult, const char **);
} cu_t;

typedef struct {
    int sock;
    pid_t parent;
    int ndomains, ndevices, single;
    cu_t cu;
    CUcontext ctx[kMaxDevices];
    char uuid[64];
} helper_t;

static void usage(FILE *f) {
    fprintf(f,
        "usage: " LD_MLO_HELPER_NAME " --fd N --uuid GPU-<uuid> [--parent PID] [--pdeathsig]\n"
        "       " LD_MLO_HELPER_NAME " --help | --version\n"
        "\n"
        "Started by libldshim.so (MLOPart backend), not by hand. Runs a private MPS control\n"
        "daemon in MLOPart mode for one GPU and serves per-domain memory as POSIX file\n"
        "descriptors over the socketpair end N.\n"
        "  --fd N        inherited AF_UNIX socket to serve (the shim uses %d)\n"
        "  --uuid GPU-x  the physical GPU (becomes CUDA_VISIBLE_DEVICES of the daemon)\n"
        "  --parent PID  exit when this process is no longer the parent\n"
        "  --pdeathsig   die with SIGKILL when the spawning thread exits\n"
        "Environment: LDSHIM_MPS_CONTROL (test: control binary), LDSHIM_LIBCUDA,\n"
        "LDSHIM_MLOPART_TIMEOUT_MS, LDSHIM_MLOPART_TEST_SINGLE, LDSHIM_MLOPART_TEST_HOOK,\n"
        "LDSHIM_MLOPART_CLIENT_CVD=1 (keep CUDA_VISIBLE_DEVICES=<uuid> in the MPS client),\n"
        "LDSHIM_MLOPART_DEBUG_LOGS=dir (keep the MPS logs).\n",
        LD_MLO_HELPER_FD);
}

static const char *cu_name(const helper_t *h, CUresult r) {
    const char *s = NULL;
    if (h->cu.pfn_cuGetErrorName && h->cu.pfn_cuGetErrorName(r, &s) == CUDA_SUCCESS && s) return s;
    static char buf[32];   /* the helper is single-threaded */
    snprintf(buf, sizeof buf, "CUresult %d", (int)r);
    return buf;
}

static int reply(helper_t *h, const ld_mlo_req_t *q, int32_t status, int32_t value, int fd,
                 const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static int reply(helper_t *h, const ld_mlo_req_t *q, int32_t status, int32_t value, int fd,
                 const char *fmt, ...) {
    char msg[LD_MLO_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ld_mlo_rep_t r;
    ld_mlo_rep_init(&r, q, status, msg);
    r.value = value;
    r.has_fd = fd >= 0;
    size_t chunk = ld_mlo_hook("partial-reply") ? 1 : 0;
    return ld_mlo_send_rep(h->sock, &r, fd, chunk,
                           ld_mlo_deadline(ld_mlo_timeout_ms(LD_MLO_REQUEST_TIMEOUT_MS)));
}

/* A handle is released once more when the first release fails: the helper runs for the
 * program's whole life and must not collect leaked memory. */
static void release(helper_t *h, CUmemGenericAllocationHandle mh) {
    if (h->cu.pfn_cuMemRelease(mh) != CUDA_SUCCESS) h->cu.pfn_cuMemRelease(mh);
}

static int load_cuda(helper_t *h, char *err, size_t n) {
    const char *lib = ld_opt(LD_OPT_LIBCUDA);
    if (!lib) lib = "libcuda.so.1";
    /* As the shim does (shim/driver.c): a path is loaded from the very file checked to be a
     * regular file (shim/dlcheck.c), so a FIFO never hangs dlopen's open, not even one swapped
     * in after the check. */
    char why[200];
    void *so = strchr(lib, '/') ? ld_dlopen_checked(lib, why, sizeof why) : dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!so && strcmp(lib, "libcuda.so.1")) {   /* as the shim does: a bad override falls back */
        lib = "libcuda.so.1";
        so = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    }
    if (!so) { snprintf(err, n, "cannot load %s: %s", lib, dlerror()); return -1; }
#define LOAD(f) \
    if (!(*(void **)&h->cu.pfn_##f = dlsym(so, #f))) { snprintf(err, n, "%s lacks %s", lib, #f); return -1; }
    LOAD(cuInit) LOAD(cuDeviceGetCount) LOAD(cuDeviceGet) LOAD(cuDevicePrimaryCtxRetain)
    LOAD(cuCtxSetCurrent) LOAD(cuMemCreate) LOAD(cuMemExportToShareableHandle) LOAD(cuMemRelease)
    LOAD(cuGetErrorName)
#undef LOAD
    return 0;   /* the library stays loaded for the helper's life */
}

/* Become an MPS client of the private server and count what it shows us. */
/* An MPS server still initializing (or restarting) refuses clients for a moment. */
static int mps_not_ready(CUresult r) {
    return r == CUDA_ERROR_MPS_SERVER_NOT_READY || r == CUDA_ERROR_MPS_CONNECTION_FAILED;
}

static int start_cuda(helper_t *h, const char *dir, int budget_ms, char *err, size_t n) {
    char pipe_dir[4200], log_dir[4200];
    snprintf(pipe_dir, sizeof pipe_dir, "%s/pipe", dir);
    snprintf(log_dir, sizeof log_dir, "%s/log", dir);
    setenv("CUDA_MPS_PIPE_DIRECTORY", pipe_dir, 1);
    setenv("CUDA_MPS_LOG_DIRECTORY", log_dir, 1);
    /* NOTES: the daemon was started with CUDA_VISIBLE_DEVICES=GPU-<uuid>; MPS remaps its
     * devices for clients and documents that clients must not set it. The derived MLOPart
     * devices carry their own UUIDs, which the physical one would filter out.
     * LDSHIM_MLOPART_CLIENT_CVD=1 sets it anyway (for a driver that wants it). */
    if (ld_opt_one(LD_OPT_MLOPART_CLIENT_CVD)) setenv("CUDA_VISIBLE_DEVICES", h->uuid, 1);
    else unsetenv("CUDA_VISIBLE_DEVICES");
    if (load_cuda(h, err, n)) return -1;
    CUresult r;
    int64_t until = ld_mlo_now_ms() + budget_ms;
    while ((r = h->cu.pfn_cuInit(0)) != CUDA_SUCCESS && mps_not_ready(r) && ld_mlo_now_ms() < until)
        usleep(kMpsRetryMs * 1000);
    if (r != CUDA_SUCCESS) {
        snprintf(err, n, "cuInit as MPS client failed: %s", cu_name(h, r));
        return -(int)r;
    }
    r = h->cu.pfn_cuDeviceGetCount(&h->ndevices);
    if (r != CUDA_SUCCESS) {
        snprintf(err, n, "cuDeviceGetCount failed: %s", cu_name(h, r));
        return -(int)r;
    }
    return 0;
}

static CUresult use_device(helper_t *h, int ord, CUdevice *dev) {
    CUresult r = h->cu.pfn_cuDeviceGet(dev, ord);
    if (r != CUDA_SUCCESS) return r;
    if (!h->ctx[ord]) {
        r = h->cu.pfn_cuDevicePrimaryCtxRetain(&h->ctx[ord], *dev);
        if (r != CUDA_SUCCESS) return r;
    }
    return h->cu.pfn_cuCtxSetCurrent(h->ctx[ord]);
}

/* Test hooks fire from the ALLOC after the first `after=N` ones (the shim's start-up probe
 * allocations are ALLOCs too). */
static int hooks_armed(void) {
    static int served;
    const char *s = ld_opt(LD_OPT_MLOPART_TEST_HOOK), *a = s ? strstr(s, "after=") : NULL;
    int after = a ? atoi(a + 6) : 0;
    return served++ >= after;
}

static int serve_alloc(helper_t *h, const ld_mlo_req_t *q) {
    static int failed_once;
    int hooks_armed_now = hooks_armed();
    if (!hooks_armed_now) goto real;
    if (ld_mlo_hook("hang-alloc")) for (;;) pause();
    if (ld_mlo_hook("crash-alloc")) _exit(3);
    if (ld_mlo_hook("slow-alloc")) sleep(1);
    if (ld_mlo_hook("garbage-reply")) {
        static const char junk[sizeof(ld_mlo_rep_t)] = "this is not a reply";
        return ld_mlo_write_all(h->sock, junk, sizeof junk, -1, 0, ld_mlo_deadline(1000));
    }
    if (ld_mlo_hook("short-reply")) {
        ld_mlo_rep_t r;
        ld_mlo_rep_init(&r, q, 0, "");
        ld_mlo_write_all(h->sock, &r, sizeof r / 2, -1, 0, ld_mlo_deadline(1000));
        _exit(4);
    }
    if (ld_mlo_hook("fail-alloc-once") && !failed_once) {
        failed_once = 1;
        return reply(h, q, CUDA_ERROR_OUT_OF_MEMORY, 0, -1, "test hook: out of memory");
    }
real:
    if (q->domain < 0 || q->domain >= h->ndomains || q->bytes == 0)
        return reply(h, q, CUDA_ERROR_INVALID_VALUE, 0, -1,
                     "bad request: domain %d of %d, %llu bytes", (int)q->domain, h->ndomains,
                     (unsigned long long)q->bytes);
    int ord = h->single ? 0 : q->domain;
    CUdevice dev;
    CUresult r = use_device(h, ord, &dev);
    if (r != CUDA_SUCCESS)
        return reply(h, q, r, 0, -1, "device %d (domain %d): %s", ord, (int)q->domain, cu_name(h, r));
    CUmemAllocationProp prop;
    ld_mlo_alloc_prop(&prop, dev);
    CUmemGenericAllocationHandle mh;
    r = h->cu.pfn_cuMemCreate(&mh, (size_t)q->bytes, &prop, 0);
    if (r != CUDA_SUCCESS)
        return reply(h, q, r, 0, -1, "cuMemCreate(%llu B, device %d): %s",
                     (unsigned long long)q->bytes, ord, cu_name(h, r));
    int fd = -1;
    r = h->cu.pfn_cuMemExportToShareableHandle(&fd, mh, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS || fd < 0) {
        release(h, mh);
        return reply(h, q, r ? r : CUDA_ERROR_UNKNOWN, 0, -1, "cuMemExportToShareableHandle: %s",
                     cu_name(h, r));
    }
    int rc;
    if (ld_mlo_hook("nofd-reply") && hooks_armed_now) {
        ld_mlo_rep_t rep;
        ld_mlo_rep_init(&rep, q, 0, "");
        rep.has_fd = 1;
        rc = ld_mlo_send_rep(h->sock, &rep, -1, 0, ld_mlo_deadline(1000));
    } else {
        rc = reply(h, q, CUDA_SUCCESS, 0, fd, "ok");
    }
    /* The importer's handle keeps the memory alive; ours goes now. */
    close(fd);
    release(h, mh);
    return rc;
}

/* Wait for the next request; 0 = got one, -1 = time to go. */
static int next_request(helper_t *h, ld_mlo_req_t *q) {
    for (;;) {
        struct pollfd p = { .fd = h->sock, .events = POLLIN };
        int r = poll(&p, 1, kParentCheckMs);
        if (r < 0 && errno != EINTR) return -1;
        if (h->parent > 0 && getppid() != h->parent) return -1;   /* orphaned */
        if (r > 0) break;
    }
    int rc = ld_mlo_recv_req(h->sock, q,
                             ld_mlo_deadline(ld_mlo_timeout_ms(LD_MLO_REQUEST_TIMEOUT_MS)));
    return rc == LD_MLO_IO_OK ? 0 : -1;   /* EOF, garbage, or a stalled peer: leave */
}

static int parse_args(int argc, char **argv, helper_t *h, int *pdeathsig) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); exit(0); }
        if (!strcmp(a, "--version")) {
            printf(LD_MLO_HELPER_NAME " %s (git %s)\n", LDSHIM_BUILD_VERSION, LDSHIM_BUILD_REVISION);
            exit(0);
        }
        if (!strcmp(a, "--pdeathsig")) { *pdeathsig = 1; continue; }
        if (i + 1 >= argc) { fprintf(stderr, LD_MLO_HELPER_NAME ": %s needs a value\n", a); return -1; }
        const char *v = argv[++i];
        char *end;
        if (!strcmp(a, "--fd")) {
            long x = strtol(v, &end, 10);
            if (*end || x < 0 || x > 1 << 20) { fprintf(stderr, LD_MLO_HELPER_NAME ": bad --fd '%s'\n", v); return -1; }
            h->sock = (int)x;
        } else if (!strcmp(a, "--parent")) {
            long x = strtol(v, &end, 10);
            if (*end || x <= 0) { fprintf(stderr, LD_MLO_HELPER_NAME ": bad --parent '%s'\n", v); return -1; }
            h->parent = (pid_t)x;
        } else if (!strcmp(a, "--uuid")) {
            if (strncmp(v, "GPU-", 4) != 0 || strlen(v) >= sizeof h->uuid || strpbrk(v, ", \t\n")) {
                fprintf(stderr, LD_MLO_HELPER_NAME ": bad --uuid '%s' (want GPU-<uuid>)\n", v);
                return -1;
            }
            snprintf(h->uuid, sizeof h->uuid, "%s", v);
        } else {
            fprintf(stderr, LD_MLO_HELPER_NAME ": unknown option '%s' (see --help)\n", a);
            return -1;
        }
    }
    if (h->sock < 0 || !h->uuid[0]) {
        fprintf(stderr, LD_MLO_HELPER_NAME ": --fd and --uuid are required (see --help)\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    helper_t h = { .sock = -1 };
    int pdeathsig = 0;
    ld_options_init();   /* the environment as we were started, before we set the marker */
    if (parse_args(argc, argv, &h, &pdeathsig)) return 2;
    /* The helper never runs the shim: a copy preloaded without the shim's marker (someone
     * started us by hand under LD_PRELOAD) would serve CUDA calls here, so refuse; and the
     * marker goes to everything we start. */
    if (!ld_opt(LD_OPT_INSIDE_MLOPART_HELPER) && dlsym(RTLD_DEFAULT, "ldshim_version")) {
        fprintf(stderr, LD_MLO_HELPER_NAME ": libldshim is loaded into this process (LD_PRELOAD?); refusing to "
                        "run it here\n");
        return 2;
    }
    setenv(LD_MLO_ENV_MARKER, "1", 1);
    if (pdeathsig) prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (h.parent > 0 && getppid() != h.parent) return 0;        /* parent already gone */
    if (getuid() != geteuid()) {
        fprintf(stderr, LD_MLO_HELPER_NAME ": refusing to run set-uid\n");
        return 2;
    }
    int type = 0, dom = 0;
    socklen_t tl = sizeof type, dl = sizeof dom;
    if (getsockopt(h.sock, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 ||
        getsockopt(h.sock, SOL_SOCKET, SO_DOMAIN, &dom, &dl) != 0 || dom != AF_UNIX ||
        type != SOCK_STREAM) {
        fprintf(stderr, LD_MLO_HELPER_NAME ": --fd %d is not a unix stream socket\n", h.sock);
        return 2;
    }
    fcntl(h.sock, F_SETFD, FD_CLOEXEC);
    signal(SIGPIPE, SIG_IGN);
    h.single = ld_opt_one(LD_OPT_MLOPART_TEST_SINGLE);

    int start_ms = ld_mlo_timeout_ms(LD_MLO_START_TIMEOUT_MS);
    ld_mlo_req_t q;
    if (ld_mlo_recv_req(h.sock, &q, ld_mlo_deadline(start_ms)) || q.op != LD_MLO_OP_START)
        return 1;
    if (ld_mlo_hook("hang-start")) for (;;) pause();
    h.ndomains = q.domain;
    if (h.ndomains < 1 || h.ndomains > kMaxDevices) {
        reply(&h, &q, CUDA_ERROR_INVALID_VALUE, 0, -1, "bad domain count %d", h.ndomains);
        return 1;
    }
    char err[LD_MLO_MSG_MAX], dir[4096];
    ld_mps_sup_t sup;
    if (ld_mps_sup_start(&sup, h.uuid, start_ms, err, sizeof err) ||
        ld_mps_sup_wait(&sup, h.sock, ld_mlo_deadline(start_ms), dir, sizeof dir, err, sizeof err)) {
        reply(&h, &q, CUDA_ERROR_NOT_SUPPORTED, 0, -1, "%s", err);
        return 1;   /* our exit closes the lifeline: the supervisor cleans up */
    }
    int rc = start_cuda(&h, dir, start_ms / 2, err, sizeof err);
    if (rc) {
        reply(&h, &q, rc < 0 ? -rc : CUDA_ERROR_NOT_SUPPORTED, 0, -1, "%s", err);
        return 1;
    }
    int want = h.single ? 1 : h.ndomains;
    if (h.ndevices != want) {
        reply(&h, &q, CUDA_ERROR_NOT_SUPPORTED, h.ndevices, -1,
              "MLOPart shows %d device(s) for %s, expected %d (one per locality domain)%s",
              h.ndevices, h.uuid, want, h.ndevices == 1 ? ": this GPU is not split" : "");
        return 1;
    }
    /* Create the contexts now, so that a server still starting is waited for here and not
     * in the first request. */
    int64_t until = ld_mlo_now_ms() + start_ms / 2;
    for (int d = 0; d < h.ndevices; d++) {
        CUdevice dev;
        CUresult r;
        while ((r = use_device(&h, d, &dev)) != CUDA_SUCCESS && mps_not_ready(r) &&
               ld_mlo_now_ms() < until)
            usleep(kMpsRetryMs * 1000);
        if (r != CUDA_SUCCESS) {
            reply(&h, &q, r, h.ndevices, -1, "context on MPS device %d: %s", d, cu_name(&h, r));
            return 1;
        }
    }
    if (reply(&h, &q, CUDA_SUCCESS, h.ndevices, -1, "ready")) return 1;

    while (next_request(&h, &q) == 0) {
        int r = 0;
        if (q.op == LD_MLO_OP_ALLOC) r = serve_alloc(&h, &q);
        else if (q.op == LD_MLO_OP_PING) r = reply(&h, &q, CUDA_SUCCESS, h.ndevices, -1, "pong");
        else if (q.op == LD_MLO_OP_QUIT) { reply(&h, &q, CUDA_SUCCESS, 0, -1, "bye"); break; }
        else r = reply(&h, &q, CUDA_ERROR_INVALID_VALUE, 0, -1, "unexpected op %u", q.op);
        if (r) break;
    }
    /* Leaving closes the MPS client connection and the lifeline; the supervisor quits the
     * daemon and removes the directory, then drops its copy of the socket. */
    return 0;
}
