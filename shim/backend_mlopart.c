/* backend_mlopart.c — the `mlopart` backend: memory homed in one locality domain, created
 * by a helper process that is an MPS client of a private MLOPart server (one derived CUDA
 * device per domain) and passed back as a POSIX file descriptor.
 *
 * One helper per physical GPU (keyed by UUID, so two ordinals of one GPU share it), started
 * by available() or lazily by create(). A broken helper (EOF, timeout, garbage, missing fd,
 * failed import) turns the backend off for that GPU for the rest of the run, with one
 * warning; a per-request CUDA error from the helper only fails that request.
 *
 * Thread-safety: a table mutex guards the GPU table (never held across I/O); one mutex per
 * helper keeps one request in flight per socket. Imports run outside both.
 */
#include "shim/backend.h"
#include "shim/device.h"
#include "shim/log.h"
#include "shim/mlopart_prop.h"
#include "shim/mlopart_proto.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
    kTransientWarnings = 3,    /* per GPU; later per-request failures log at debug */
    kShutdownLockMs = 2000,    /* at exit, how long to wait for a request in flight */
};

typedef enum { GPU_NEW = 0, GPU_READY, GPU_DEAD } gpu_state_t;

typedef struct {
    char uuid[48];
    gpu_state_t state;
    int ndomains, ndevices;
    int transient;             /* per-request failures so far */
    ld_mlo_helper_t h;
    pthread_mutex_t mu;
    char why[LD_MLO_MSG_MAX];
} gpu_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static gpu_t g_gpus[LD_MAX_DEVICES];
static int g_ngpus;
static gpu_t *g_by_dev[LD_MAX_DEVICES];

static void uuid_str(const CUuuid *u, char *out, size_t n) {
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, n, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
             b[13], b[14], b[15]);
}

/* The table entry for `dev` (created on first sight), or NULL with why. */
static gpu_t *gpu_for(const ld_driver_t *drv, CUdevice dev, char *why, size_t n) {
    if (dev < 0 || dev >= LD_MAX_DEVICES) {
        snprintf(why, n, "device ordinal %d out of range", (int)dev);
        return NULL;
    }
    pthread_mutex_lock(&g_mu);
    gpu_t *g = g_by_dev[dev];
    pthread_mutex_unlock(&g_mu);
    if (g) return g;
    CUuuid u;
    CUresult r = drv->pfn_cuDeviceGetUuid_v2(&u, dev);
    if (r != CUDA_SUCCESS) {
        snprintf(why, n, "cuDeviceGetUuid_v2(%d): %s", (int)dev, ld_cu_errname(r));
        return NULL;
    }
    char id[48];
    uuid_str(&u, id, sizeof id);
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_ngpus && !g; i++)
        if (!strcmp(g_gpus[i].uuid, id)) g = &g_gpus[i];
    if (!g && g_ngpus < LD_MAX_DEVICES) {
        g = &g_gpus[g_ngpus++];
        memset(g, 0, sizeof *g);
        snprintf(g->uuid, sizeof g->uuid, "%s", id);
        g->h = (ld_mlo_helper_t)LD_MLO_HELPER_INIT;
        pthread_mutex_init(&g->mu, NULL);
    }
    if (g) g_by_dev[dev] = g;
    pthread_mutex_unlock(&g_mu);
    if (!g) snprintf(why, n, "more than %d GPUs", LD_MAX_DEVICES);
    return g;
}

/* With g->mu held: turn the backend off for this GPU, once, with one warning. */
static void mark_dead(gpu_t *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void mark_dead(gpu_t *g, const char *fmt, ...) {
    if (g->state == GPU_DEAD) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->why, sizeof g->why, fmt, ap);
    va_end(ap);
    g->state = GPU_DEAD;
    LD_WARN(MLOPART, "%s: %s; backend off for this GPU, tagged allocations fall back", g->uuid,
                     g->why);
    ld_mlo_helper_kill(&g->h, ld_mlo_timeout_ms(LD_MLO_REQUEST_TIMEOUT_MS));
}

/* Prove the whole path once per domain before saying yes: one granule created by the
 * helper, exported, passed, imported here, released. 0, or -1 with err (helper stopped). */
static int probe_path(const ld_driver_t *drv, CUdevice dev, gpu_t *g, char *err, size_t n) {
    size_t gran = 2u << 20;
    CUmemAllocationProp prop;
    ld_mlo_alloc_prop(&prop, dev);
    size_t q = 0;
    if (drv->pfn_cuMemGetAllocationGranularity &&
        drv->pfn_cuMemGetAllocationGranularity(&q, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS && q)
        gran = q;
    int timeout = ld_mlo_timeout_ms(LD_MLO_REQUEST_TIMEOUT_MS);
    for (int d = 0; d < g->ndomains; d++) {
        ld_mlo_rep_t rep;
        int fd = -1;
        int io = ld_mlo_helper_call(&g->h, LD_MLO_OP_ALLOC, d, gran, timeout, &rep, &fd);
        if (io != LD_MLO_IO_OK) {
            snprintf(err, n, "probe allocation in domain %d: helper %s", d, ld_mlo_io_str(io));
            ld_mlo_helper_kill(&g->h, timeout);
            return -1;
        }
        if (rep.status != CUDA_SUCCESS) {
            snprintf(err, n, "probe allocation in domain %d: %.150s", d, rep.msg);
            ld_mlo_helper_quit(&g->h, timeout);
            return -1;
        }
        CUmemGenericAllocationHandle h;
        CUresult r = drv->pfn_cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        close(fd);
        if (r != CUDA_SUCCESS) {
            snprintf(err, n, "probe import of the helper's fd (domain %d): "
                     "cuMemImportFromShareableHandle: %s", d, ld_cu_errname(r));
            ld_mlo_helper_quit(&g->h, timeout);
            return -1;
        }
        if (drv->pfn_cuMemRelease(h) != CUDA_SUCCESS) drv->pfn_cuMemRelease(h);   /* once more: never leak it */
    }
    return 0;
}

/* With g->mu held: start the helper unless done. 0 when ready. */
static int ensure_started(const ld_driver_t *drv, CUdevice dev, gpu_t *g, int ndomains,
                          char *why, size_t n) {
    if (g->state == GPU_READY) return 0;
    if (g->state == GPU_DEAD) {
        snprintf(why, n, "%s", g->why);
        return -1;
    }
    char path[PATH_MAX], err[LD_MLO_MSG_MAX];
    int ndev = 0;
    if (ndomains < 2) {
        snprintf(err, sizeof err, "needs at least 2 locality domains, asked for %d", ndomains);
    } else if (ld_mlo_helper_path(path, sizeof path, err, sizeof err) == 0 &&
               ld_mlo_helper_spawn(&g->h, path, g->uuid, ndomains,
                                   ld_mlo_timeout_ms(LD_MLO_START_TIMEOUT_MS), &ndev, err,
                                   sizeof err) == 0) {
        g->ndomains = ndomains;
        g->ndevices = ndev;
        if (probe_path(drv, dev, g, err, sizeof err) == 0) {
            g->state = GPU_READY;
            LD_INFO(MLOPART, "%s: helper pid %d ready, %d MPS device(s) for %d domains",
                             g->uuid, g->h.pid, ndev, ndomains);
            return 0;
        }
    }
    /* Declining at start is not a surprise (most GPUs have no MLOPart): info level, the
     * core reports the backend it picked instead. */
    g->state = GPU_DEAD;
    snprintf(g->why, sizeof g->why, "%s", err);
    LD_INFO(MLOPART, "%s: declined: %s", g->uuid, err);
    snprintf(why, n, "%s", err);
    return -1;
}

static int mlopart_available(const ld_driver_t *drv, CUdevice dev, int ndomains, char *why,
                             size_t n) {
    if (!drv->pfn_cuMemImportFromShareableHandle) {
        snprintf(why, n, "driver lacks cuMemImportFromShareableHandle");
        return -1;
    }
    gpu_t *g = gpu_for(drv, dev, why, n);
    if (!g) return -1;
    pthread_mutex_lock(&g->mu);
    int rc = ensure_started(drv, dev, g, ndomains, why, n);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

static CUresult mlopart_create(const ld_driver_t *drv, CUdevice dev, int domain, size_t bytes,
                               CUmemGenericAllocationHandle *out, char *why, size_t n) {
    if (!drv->pfn_cuMemImportFromShareableHandle) {
        snprintf(why, n, "driver lacks cuMemImportFromShareableHandle");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    gpu_t *g = gpu_for(drv, dev, why, n);
    if (!g) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g->mu);
    if (g->state == GPU_NEW && ensure_started(drv, dev, g, 2, why, n) != 0) {
        pthread_mutex_unlock(&g->mu);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (g->state != GPU_READY) {
        snprintf(why, n, "mlopart off for %s: %s", g->uuid, g->why);
        pthread_mutex_unlock(&g->mu);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (domain < 0 || domain >= g->ndomains) {
        snprintf(why, n, "domain %d out of range (0..%d)", domain, g->ndomains - 1);
        pthread_mutex_unlock(&g->mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    ld_mlo_rep_t rep;
    int fd = -1;
    int io = ld_mlo_helper_call(&g->h, LD_MLO_OP_ALLOC, domain, bytes,
                                ld_mlo_timeout_ms(LD_MLO_REQUEST_TIMEOUT_MS), &rep, &fd);
    if (io != LD_MLO_IO_OK) {
        mark_dead(g, "helper pid %d: %s during a %zu-byte request for domain %d", g->h.pid,
                  ld_mlo_io_str(io), bytes, domain);
        snprintf(why, n, "mlopart helper: %s", ld_mlo_io_str(io));
        pthread_mutex_unlock(&g->mu);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (rep.status != CUDA_SUCCESS) {
        int count = ++g->transient;
        pthread_mutex_unlock(&g->mu);
        snprintf(why, n, "mlopart helper: %s", rep.msg);
        if (count <= kTransientWarnings)
            LD_WARN(MLOPART, "%s: request for %zu bytes in domain %d failed: %s%s", g->uuid,
                             bytes, domain, rep.msg,
                             count == kTransientWarnings ? " (further ones at debug level)" : "");
        else LD_DEBUG(MLOPART, "%s: request failed: %s", g->uuid, rep.msg);
        return (CUresult)rep.status;
    }
    pthread_mutex_unlock(&g->mu);

    CUmemGenericAllocationHandle hnd;
    CUresult r = drv->pfn_cuMemImportFromShareableHandle(&hnd, (void *)(intptr_t)fd,
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);   /* the imported handle keeps the memory; the fd is no longer needed */
    if (r != CUDA_SUCCESS) {
        snprintf(why, n, "cuMemImportFromShareableHandle: %s", ld_cu_errname(r));
        if (r == CUDA_ERROR_OUT_OF_MEMORY) {
            LD_DEBUG(MLOPART, "%s: import failed: out of memory", g->uuid);
            return r;
        }
        pthread_mutex_lock(&g->mu);
        mark_dead(g, "cuMemImportFromShareableHandle failed: %s", ld_cu_errname(r));
        pthread_mutex_unlock(&g->mu);
        return r;
    }
    *out = hnd;
    return CUDA_SUCCESS;
}

static int lock_bounded(pthread_mutex_t *mu, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    return pthread_mutex_timedlock(mu, &ts);
}

static void mlopart_shutdown(int in_child) {
    if (in_child) {
        /* The parent's helpers are not ours: drop our copies of their sockets, send
         * nothing, and start from scratch should this process want its own. Locks may
         * have been held by threads that do not exist here. */
        pthread_mutex_init(&g_mu, NULL);
        for (int i = 0; i < g_ngpus; i++) {
            ld_mlo_helper_forget(&g_gpus[i].h);
            pthread_mutex_init(&g_gpus[i].mu, NULL);
        }
    } else {
        pthread_mutex_lock(&g_mu);
        int ngpus = g_ngpus;
        pthread_mutex_unlock(&g_mu);
        for (int i = 0; i < ngpus; i++) {
            gpu_t *g = &g_gpus[i];
            if (lock_bounded(&g->mu, kShutdownLockMs) == 0) {
                if (g->h.pid > 0) ld_mlo_helper_quit(&g->h, ld_mlo_timeout_ms(LD_MLO_REQUEST_TIMEOUT_MS));
                pthread_mutex_unlock(&g->mu);
            } else {
                /* A request is stuck in flight: its supervisor still cleans up. Signalled
                 * through the pidfd, so only if it is still our child. */
                ld_mlo_helper_signal(&g->h, SIGKILL);
            }
        }
    }
    pthread_mutex_lock(&g_mu);
    g_ngpus = 0;
    memset(g_by_dev, 0, sizeof g_by_dev);
    pthread_mutex_unlock(&g_mu);
}

const ld_backend_ops_t ld_backend_mlopart = {
    .kind = LD_BACKEND_MLOPART,
    .name = "mlopart",
    .available = mlopart_available,
    .create = mlopart_create,
    .localizes = 1,
    .shutdown = mlopart_shutdown,
};
