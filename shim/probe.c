/* probe.c — run the topology probe on one device (contract: shim/probe.h).
 *
 * Order: cache (unless forced) → load the embedded probe kernels with the real driver →
 * anchored and/or clustered measurement, up to LD_PROBE_ATTEMPTS each → classify
 * (probe_classify.c) → even map on failure, with one warning → balance → publish struct →
 * cache a validated result. Everything the probe allocates (module, stream, buffers) is
 * released before it returns; the caller's current context is left current.
 *
 * Thread-safety: ld_probe_device keeps no state between calls (everything lives on its
 * stack or is freed before it returns), so calls for different devices may run at once; the
 * caller runs it once per device. ld_probe_result_json only reads its argument.
 *
 * Env (shim/options.h): LDSHIM_PROBE_FORCE set (not 0|no|off|false) ignores (and, when the new
 *      result is valid, rewrites) the cache.
 *      LDSHIM_PROBE_DUMP=<dir> writes every attempt's raw latency matrix there as CSV (for
 *      tuning the classifier offline; off by default).
 */
#include "shim/probe.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shim/file.h"
#include "shim/json.h"
#include "shim/log.h"
#include "shim/options.h"
#include "shim/probe_cache.h"
#include "shim/probe_classify.h"

/* The fatbin from kernels/probe/probe.cu, embedded by kernels/kernels.mk. Weak, so a
 * program linked without it (a unit test) sees NULL and takes the even-map path. */
extern const unsigned char ld_probe_fatbin[] __attribute__((weak, visibility("hidden")));

#define LD_PROBE_LAUNCH_TRIES 3            /* relaunches of a chase that missed an SM       */
#define LD_PROBE_FLUSH_BYTES  (256u << 20) /* > L2 of every target GPU (H200 60 MiB)        */

typedef struct { CUdeviceptr p[LDSHIM_MAX_DOMAINS]; } probe_bufs_t;   /* = struct ldprobe_bufs */

typedef struct {
    const ld_driver_t *drv;
    CUdevice  dev;
    uint32_t  num_sms, nd;
    CUmodule  mod;
    CUfunction f_init_chunks, f_init_lines, f_clear, f_flush, f_anchored, f_clustered;
    CUstream  stream;
    unsigned  smem;          /* dynamic shared memory per chase CTA                       */
    CUdeviceptr seen;        /* num_sms + 1 counters                                      */
    char      err[128];      /* infrastructure failure (launch, allocation), one line      */
} probe_t;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static const char *cu_name(const ld_driver_t *drv, CUresult r) {
    const char *s = NULL;
    if (drv && drv->pfn_cuGetErrorName && drv->pfn_cuGetErrorName(r, &s) == CUDA_SUCCESS && s) return s;
    return "CUDA error";
}

static const char *mode_name(ld_probe_mode_t m) {
    switch (m) {
    case LD_PROBE_AUTO: return "auto";
    case LD_PROBE_ANCHORED: return "anchored";
    case LD_PROBE_CLUSTERED: return "clustered";
    case LD_PROBE_EVEN: return "even";
    case LD_PROBE_OFF: return "off";
    }
    return "unknown";
}

/* Record the first infrastructure failure; returns 0 when r is success. */
static int check(probe_t *p, CUresult r, const char *what) {
    if (r == CUDA_SUCCESS) return 0;
    if (!p->err[0]) snprintf(p->err, sizeof p->err, "%s: %s", what, cu_name(p->drv, r));
    return -1;
}

/* LDSHIM_PROBE_DUMP: one CSV per attempt, a row per SM ("sm,v0,v1,..."). Best effort,
 * through the file layer: the directory is created (0700) or must be ours and writable by
 * nobody else, and each file is a new one renamed into place, so a link or FIFO planted at
 * a dump name is replaced, never followed or waited on. One warning per process. */
static int dump_warned;

static void dump_matrix(const char *mode, const probe_t *p, uint32_t attempt, const float *lat, uint32_t rows_per_sm,
                        uint32_t cols) {
    const char *dir = ld_opt(LD_OPT_PROBE_DUMP);
    if (!dir) return;
    char name[96], why[320];
    snprintf(name, sizeof name, "%s-dev%d-attempt%u.csv", mode, (int)p->dev, attempt + 1);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return;
    /* anchored: rows_per_sm = domains, stored [d][sm][chunk]; clustered: 1, [sm][line] */
    for (uint32_t d = 0; d < rows_per_sm; d++)
        for (uint32_t s = 0; s < p->num_sms; s++) {
            fprintf(f, "%u", s);
            if (rows_per_sm > 1) fprintf(f, ",d%u", d);
            const float *row = lat + ((size_t)d * p->num_sms + s) * cols;
            for (uint32_t c = 0; c < cols; c++) fprintf(f, ",%.1f", (double)row[c]);
            fputc('\n', f);
        }
    int rc = fclose(f) != 0 || !text ? -1 : 0;
    int dfd = rc ? -1 : ld_file_open_dir(dir, 0, why, sizeof why);
    if (rc) snprintf(why, sizeof why, "out of memory");
    else if (dfd >= 0) {
        char w[200];
        rc = ld_file_write_at(dfd, name, text, len, 0, w, sizeof w);
        if (rc) snprintf(why, sizeof why, "%.96s: %.200s", name, w);
        close(dfd);
    } else rc = -1;
    free(text);
    if (rc && !__atomic_exchange_n(&dump_warned, 1, __ATOMIC_RELAXED))
        LD_WARN(PROBE, "LDSHIM_PROBE_DUMP=%s: %s; no dump written", dir, why);
}

/* ---- kernels ----------------------------------------------------------------------- */

static int load_kernels(probe_t *p) {
    const ld_driver_t *d = p->drv;
    if (!ld_probe_fatbin) { snprintf(p->err, sizeof p->err, "probe kernels not built into this binary"); return -1; }
    if (check(p, d->pfn_cuModuleLoadData(&p->mod, ld_probe_fatbin), "loading probe kernels")) { p->mod = NULL; return -1; }
    if (check(p, d->pfn_cuModuleGetFunction(&p->f_init_chunks, p->mod, "ldprobe_init_chunks"), "ldprobe_init_chunks") ||
        check(p, d->pfn_cuModuleGetFunction(&p->f_init_lines, p->mod, "ldprobe_init_lines"), "ldprobe_init_lines") ||
        check(p, d->pfn_cuModuleGetFunction(&p->f_clear, p->mod, "ldprobe_clear"), "ldprobe_clear") ||
        check(p, d->pfn_cuModuleGetFunction(&p->f_flush, p->mod, "ldprobe_flush"), "ldprobe_flush") ||
        check(p, d->pfn_cuModuleGetFunction(&p->f_anchored, p->mod, "ldprobe_anchored"), "ldprobe_anchored") ||
        check(p, d->pfn_cuModuleGetFunction(&p->f_clustered, p->mod, "ldprobe_clustered"), "ldprobe_clustered"))
        return -1;
    /* One CTA per SM: ask for the per-block maximum of shared memory, then confirm with
     * the occupancy calculator (when the driver exposes it) that only one fits. */
    int optin = 0, per_sm = 0, reserved = 0;
    d->pfn_cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, p->dev);
    d->pfn_cuDeviceGetAttribute(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, p->dev);
    d->pfn_cuDeviceGetAttribute(&reserved, CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, p->dev);
    if (optin <= 0) optin = 48 * 1024;
    p->smem = (unsigned)optin;
    CUfunction chase[2] = { p->f_anchored, p->f_clustered };
    for (int i = 0; i < 2; i++)
        if (check(p, d->pfn_cuFuncSetAttribute(chase[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin),
                  "setting probe shared memory"))
            return -1;
    int fit = -1;
    CUresult (*occ)(int *, CUfunction, int, size_t) = NULL;
    if (d->pfn_cuGetProcAddress_v2 &&
        d->pfn_cuGetProcAddress_v2("cuOccupancyMaxActiveBlocksPerMultiprocessor", (void **)&occ, CUDA_VERSION,
                               CU_GET_PROC_ADDRESS_DEFAULT, NULL) == CUDA_SUCCESS && occ) {
        if (occ(&fit, p->f_clustered, 32, p->smem) != CUDA_SUCCESS) fit = -1;
    }
    if (fit < 0 && per_sm > 0) fit = per_sm / (optin + (reserved > 0 ? reserved : 0));
    if (fit != 1)
        LD_INFO(PROBE, "%d probe CTAs fit per SM (want 1); SM coverage is checked per launch", fit);
    return 0;
}

/* Launch a chase kernel on num_sms CTAs and check every SM ran exactly one. Relaunches a
 * launch that missed an SM (another context busy on it, say). Returns 0 or -1 (p->err). */
static int launch_chase(probe_t *p, CUfunction f, void **args) {
    const ld_driver_t *d = p->drv;
    uint32_t *seen = malloc((p->num_sms + 1) * sizeof *seen);
    if (!seen) { snprintf(p->err, sizeof p->err, "out of host memory"); return -1; }
    int rc = -1;
    uint32_t nseen = p->num_sms + 1;
    void *cargs[] = { &p->seen, &nseen };
    for (int t = 0; t < LD_PROBE_LAUNCH_TRIES; t++) {
        if (check(p, d->pfn_cuLaunchKernel(p->f_clear, 1, 1, 1, 256, 1, 1, 0, p->stream, cargs, NULL), "clearing SM counters") ||
            check(p, d->pfn_cuLaunchKernel(f, p->num_sms, 1, 1, 32, 1, 1, p->smem, p->stream, args, NULL), "launching probe") ||
            check(p, d->pfn_cuStreamSynchronize(p->stream), "running probe") ||
            check(p, d->pfn_cuMemcpyDtoH_v2(seen, p->seen, (p->num_sms + 1) * sizeof *seen), "reading SM counters"))
            break;
        uint32_t missing = 0, doubled = 0;
        for (uint32_t s = 0; s < p->num_sms; s++) { missing += seen[s] == 0; doubled += seen[s] > 1; }
        if (!missing && !doubled && !seen[p->num_sms]) { rc = 0; break; }
        snprintf(p->err, sizeof p->err, "chase missed %u SMs, ran twice on %u, %u SM ids >= %u",
                 missing, doubled, seen[p->num_sms], p->num_sms);
        LD_DEBUG(PROBE, "launch %d: %s; relaunching", t + 1, p->err);
    }
    if (rc == 0) p->err[0] = 0;
    free(seen);
    return rc;
}

static int grid_for(uint64_t items) {
    uint64_t g = (items + 255) / 256;
    return (int)(g > 4096 ? 4096 : g ? g : 1);
}

/* ---- anchored ---------------------------------------------------------------------- */

typedef struct {
    probe_bufs_t bufs;
    size_t bytes;            /* per domain: num_sms x chunks x 4 KiB                        */
    CUdeviceptr flush, out;
    size_t flush_bytes;
} anchored_mem_t;

static void anchored_free(probe_t *p, const ld_probe_opts_t *o, anchored_mem_t *m) {
    if (p->stream) p->drv->pfn_cuStreamSynchronize(p->stream);   /* nothing may still use them */
    for (uint32_t d = 0; d < p->nd; d++)
        if (m->bufs.p[d]) o->free_localized(o->alloc_ctx, m->bufs.p[d], m->bytes);
    if (m->flush) p->drv->pfn_cuMemFree_v2(m->flush);
    if (m->out) p->drv->pfn_cuMemFree_v2(m->out);
    memset(m, 0, sizeof *m);
}

static int anchored_setup(probe_t *p, const ld_probe_opts_t *o, anchored_mem_t *m) {
    const ld_driver_t *d = p->drv;
    memset(m, 0, sizeof *m);
    m->bytes = (size_t)p->num_sms * LD_PROBE_CHUNKS * LD_PROBE_CHUNK_BYTES;
    for (uint32_t dom = 0; dom < p->nd; dom++) {
        CUdeviceptr b = 0;
        if (check(p, o->alloc_localized(o->alloc_ctx, (int)dom, m->bytes, &b), "allocating localized probe memory"))
            return -1;
        m->bufs.p[dom] = b;
        uint64_t lines = m->bytes / LD_PROBE_LINE_BYTES;
        void *args[] = { &b, &lines };
        if (check(p, d->pfn_cuLaunchKernel(p->f_init_chunks, grid_for(lines), 1, 1, 256, 1, 1, 0, p->stream, args, NULL),
                  "building chase rings"))
            return -1;
    }
    m->flush_bytes = LD_PROBE_FLUSH_BYTES;
    while (d->pfn_cuMemAlloc_v2(&m->flush, m->flush_bytes) != CUDA_SUCCESS) {
        m->flush = 0;
        if (m->flush_bytes <= (64u << 20)) { snprintf(p->err, sizeof p->err, "no device memory for the L2 flush"); return -1; }
        m->flush_bytes /= 2;
    }
    if (m->flush_bytes < LD_PROBE_FLUSH_BYTES) LD_INFO(PROBE, "L2 flush buffer reduced to %zu MiB", m->flush_bytes >> 20);
    return check(p, d->pfn_cuMemAlloc_v2(&m->out, (size_t)p->nd * p->num_sms * LD_PROBE_CHUNKS * sizeof(float)),
                 "allocating probe results");
}

/* One anchored measurement into lat[nd][num_sms][chunks]. */
static int anchored_measure(probe_t *p, anchored_mem_t *m, float *lat, uint32_t attempt) {
    const ld_driver_t *d = p->drv;
    uint64_t n16 = m->flush_bytes / 16;
    void *fargs[] = { &m->flush, &n16, &attempt };
    if (check(p, d->pfn_cuLaunchKernel(p->f_flush, 4 * p->num_sms, 1, 1, 512, 1, 1, 0, p->stream, fargs, NULL), "flushing L2"))
        return -1;
    uint32_t nd = p->nd, chunks = LD_PROBE_CHUNKS, nsms = p->num_sms;
    void *args[] = { &m->bufs, &nd, &chunks, &nsms, &m->out, &p->seen };
    if (launch_chase(p, p->f_anchored, args)) return -1;
    return check(p, d->pfn_cuMemcpyDtoH_v2(lat, m->out, (size_t)nd * nsms * chunks * sizeof(float)), "reading probe results");
}

/* ---- clustered --------------------------------------------------------------------- */

typedef struct { CUdeviceptr region, idx, out; } clustered_mem_t;

static void clustered_free(probe_t *p, clustered_mem_t *m) {
    if (p->stream) p->drv->pfn_cuStreamSynchronize(p->stream);
    if (m->region) p->drv->pfn_cuMemFree_v2(m->region);
    if (m->idx) p->drv->pfn_cuMemFree_v2(m->idx);
    if (m->out) p->drv->pfn_cuMemFree_v2(m->out);
    memset(m, 0, sizeof *m);
}

static int clustered_setup(probe_t *p, clustered_mem_t *m) {
    const ld_driver_t *d = p->drv;
    memset(m, 0, sizeof *m);
    if (check(p, d->pfn_cuMemAlloc_v2(&m->region, (size_t)LD_PROBE_REGION_LINES * LD_PROBE_LINE_BYTES), "allocating probe lines") ||
        check(p, d->pfn_cuMemAlloc_v2(&m->idx, LD_PROBE_LINES * sizeof(uint32_t)), "allocating probe lines") ||
        check(p, d->pfn_cuMemAlloc_v2(&m->out, (size_t)p->num_sms * LD_PROBE_LINES * sizeof(float)), "allocating probe results"))
        return -1;
    return 0;
}

static int clustered_measure(probe_t *p, clustered_mem_t *m, float *lat, uint32_t attempt) {
    const ld_driver_t *d = p->drv;
    uint32_t nl = LD_PROBE_LINES, nsms = p->num_sms;
    /* The init kernel picks the lines (ld_probe_line: distinct, the same for a given
     * attempt in every process), writes their rings, and leaves them in L2. */
    void *iargs[] = { &m->region, &m->idx, &nl, &attempt };
    if (check(p, d->pfn_cuLaunchKernel(p->f_init_lines, grid_for((uint64_t)nl * 32), 1, 1, 256, 1, 1, 0, p->stream, iargs, NULL),
              "building line rings"))
        return -1;
    void *args[] = { &m->region, &m->idx, &nl, &nsms, &m->out, &p->seen };
    if (launch_chase(p, p->f_clustered, args)) return -1;
    return check(p, d->pfn_cuMemcpyDtoH_v2(lat, m->out, (size_t)nsms * nl * sizeof(float)), "reading probe results");
}

/* ---- orchestration ----------------------------------------------------------------- */

/* Anchored attempts. Returns 1 accepted, 0 rejected every time, -1 infrastructure error.
 * pref (num_sms) gets the last measurement's nearest domain per SM (for labels). */
static int run_anchored(probe_t *p, const ld_probe_opts_t *o, ld_probe_result_t *r, uint8_t *pref, int *have_pref) {
    anchored_mem_t m;
    float *lat = malloc((size_t)p->nd * p->num_sms * LD_PROBE_CHUNKS * sizeof *lat);
    int rc = -1;
    if (!lat) { snprintf(p->err, sizeof p->err, "out of host memory"); return -1; }
    if (anchored_setup(p, o, &m) == 0) {
        rc = 0;
        for (uint32_t a = 0; a < LD_PROBE_ATTEMPTS; a++) {
            r->attempts++;
            if (anchored_measure(p, &m, lat, a)) { rc = -1; break; }
            dump_matrix("anchored", p, a, lat, p->nd, LD_PROBE_CHUNKS);
            ld_classify_t c;
            int k = ld_classify_anchored(lat, p->nd, p->num_sms, LD_PROBE_CHUNKS, r->physical, &c);
            memcpy(pref, r->physical, p->num_sms);
            *have_pref = k >= 0;
            r->near_cycles = c.near_cycles;
            r->far_cycles = c.far_cycles;
            r->separation = c.separation;
            snprintf(r->verdict, sizeof r->verdict, "anchored: %.140s", c.verdict);
            LD_INFO(PROBE, "anchored attempt %u: %s", a + 1, c.verdict);
            if (k == 0) { rc = 1; break; }
        }
    }
    anchored_free(p, o, &m);
    free(lat);
    return rc;
}

static int run_clustered(probe_t *p, ld_probe_result_t *r, const uint8_t *labels) {
    clustered_mem_t m;
    float *lat = malloc((size_t)p->num_sms * LD_PROBE_LINES * sizeof *lat);
    int rc = -1;
    if (!lat) { snprintf(p->err, sizeof p->err, "out of host memory"); return -1; }
    if (clustered_setup(p, &m) == 0) {
        rc = 0;
        for (uint32_t a = 0; a < LD_PROBE_ATTEMPTS; a++) {
            r->attempts++;
            if (clustered_measure(p, &m, lat, a)) { rc = -1; break; }
            dump_matrix("clustered", p, a, lat, 1, LD_PROBE_LINES);
            ld_classify_t c;
            int k = ld_classify_clustered(lat, p->num_sms, LD_PROBE_LINES, p->nd, labels, r->physical, &c);
            r->near_cycles = c.near_cycles;
            r->far_cycles = c.far_cycles;
            r->separation = c.separation;
            snprintf(r->verdict, sizeof r->verdict, "clustered: %.140s", c.verdict);
            LD_INFO(PROBE, "clustered attempt %u: %s", a + 1, c.verdict);
            if (k == 0) { rc = 1; break; }
        }
    }
    clustered_free(p, &m);
    free(lat);
    return rc;
}

/* Load kernels, measure per `mode`, release everything. Returns 1 when a measurement was
 * accepted (r->physical, mode_used, figures set), 0 otherwise (r->verdict says why). */
static int measure(probe_t *p, ld_probe_mode_t mode, const ld_probe_opts_t *o, ld_probe_result_t *r) {
    const ld_driver_t *d = p->drv;
    int ok = 0;
    int localized = o->alloc_localized && o->free_localized;
    int want_anchored = localized && (mode == LD_PROBE_ANCHORED || mode == LD_PROBE_AUTO);
    if (mode == LD_PROBE_ANCHORED && !localized) {
        snprintf(r->verdict, sizeof r->verdict, "anchored: no localized memory to measure against");
        return 0;
    }
    if (load_kernels(p) ||
        check(p, d->pfn_cuStreamCreate(&p->stream, CU_STREAM_NON_BLOCKING), "creating probe stream") ||
        check(p, d->pfn_cuMemAlloc_v2(&p->seen, (p->num_sms + 1) * sizeof(uint32_t)), "allocating SM counters")) {
        snprintf(r->verdict, sizeof r->verdict, "%s", p->err);
        goto out;
    }
    uint8_t pref[LDSHIM_MAX_SMS];
    int have_pref = 0;
    if (want_anchored) {
        int rc = run_anchored(p, o, r, pref, &have_pref);
        if (rc == 1) { r->mode_used = LD_PROBE_ANCHORED; ok = 1; goto out; }
        if (rc < 0) snprintf(r->verdict, sizeof r->verdict, "anchored: %.140s", p->err);
    }
    if (mode == LD_PROBE_CLUSTERED || mode == LD_PROBE_AUTO) {
        char prev[sizeof r->verdict];
        snprintf(prev, sizeof prev, "%s", r->verdict);
        p->err[0] = 0;
        int rc = run_clustered(p, r, have_pref ? pref : NULL);
        if (rc == 1) { r->mode_used = LD_PROBE_CLUSTERED; ok = 1; goto out; }
        if (rc < 0) snprintf(r->verdict, sizeof r->verdict, "clustered: %.140s", p->err);
        if (prev[0]) LD_INFO(PROBE, "before clustering, %s", prev);
    }
out:
    if (p->stream) d->pfn_cuStreamSynchronize(p->stream);
    if (p->seen) d->pfn_cuMemFree_v2(p->seen);
    if (p->stream) d->pfn_cuStreamDestroy_v2(p->stream);
    if (p->mod) d->pfn_cuModuleUnload(p->mod);
    p->seen = 0; p->stream = NULL; p->mod = NULL;
    return ok;
}

static void fill_key(const ld_driver_t *d, CUdevice dev, uint32_t nsms, uint32_t nd, ld_cache_key_t *k) {
    memset(k, 0, sizeof *k);
    CUuuid u;
    if (d->pfn_cuDeviceGetUuid_v2(&u, dev) == CUDA_SUCCESS) {
        const unsigned char *b = (const unsigned char *)u.bytes;
        snprintf(k->uuid, sizeof k->uuid,
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    }
    d->pfn_cuDriverGetVersion(&k->driver_version);
    char kv[4097];       /* sysfs says 4096 bytes for every attribute file */
    size_t klen;
    if (ld_file_read_into("/sys/module/nvidia/version", kv, sizeof kv - 1, 0, 0, &klen, NULL, 0) == LD_FILE_OK)
        snprintf(k->kmod, sizeof k->kmod, "%.*s", (int)strcspn(kv, " \n"), kv);
    k->num_sms = nsms;
    k->num_domains = nd;
}

/* Balanced map, published struct, elapsed time. */
static void finish(const ld_probe_opts_t *o, ld_probe_result_t *r, double t0) {
    if (!r->from_cache) r->tpcs_moved = ld_balance_map(r->physical, r->num_sms, r->num_domains, r->balanced);
    enum ldshim_topology_source src = r->from_cache ? LDSHIM_SOURCE_CACHE
                                    : !r->valid ? LDSHIM_SOURCE_EVEN
                                    : r->mode_used == LD_PROBE_ANCHORED ? LDSHIM_SOURCE_ANCHORED
                                    : r->mode_used == LD_PROBE_CLUSTERED ? LDSHIM_SOURCE_CLUSTERED
                                    : LDSHIM_SOURCE_EVEN;
    int balanced = o->map != LD_MAP_PHYSICAL;
    ld_topology_fill(&r->published, balanced ? r->balanced : r->physical, r->num_sms, r->num_domains,
                     r->valid, balanced, src);
    r->elapsed_ms = now_ms() - t0;
}

static void even_result(ld_probe_result_t *r) {
    ld_even_map(r->num_sms, r->num_domains, r->physical);
    r->valid = 0;
    r->mode_used = LD_PROBE_EVEN;
}

int ld_probe_device(const ld_driver_t *drv, CUdevice dev, const ld_probe_opts_t *opts, ld_probe_result_t *out) {
    double t0 = now_ms();
    static const ld_probe_opts_t defaults = { .mode = LD_PROBE_AUTO, .map = LD_MAP_BALANCED, .ndomains = 2 };
    const ld_probe_opts_t *o = opts ? opts : &defaults;
    if (!out) return -1;
    memset(out, 0, sizeof *out);
    if (!drv) { snprintf(out->verdict, sizeof out->verdict, "no CUDA driver"); return -1; }
    int nsms = 0;
    CUresult e = drv->pfn_cuDeviceGetAttribute(&nsms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    if (e != CUDA_SUCCESS || nsms <= 0) {
        snprintf(out->verdict, sizeof out->verdict, "cannot query device %d: %s", (int)dev, cu_name(drv, e));
        return -1;
    }
    int nd = o->ndomains > 0 ? o->ndomains : 2;
    if (nd > LDSHIM_MAX_DOMAINS) nd = LDSHIM_MAX_DOMAINS;
    if (nd > nsms) nd = nsms;
    out->num_sms = (uint32_t)(nsms > LDSHIM_MAX_SMS ? LDSHIM_MAX_SMS : nsms);
    out->num_domains = (uint32_t)nd;
    ld_probe_mode_t mode = o->mode;

    if (nsms > LDSHIM_MAX_SMS) {
        even_result(out);
        snprintf(out->verdict, sizeof out->verdict, "%d SMs exceed LDSHIM_MAX_SMS (%d): even map", nsms, LDSHIM_MAX_SMS);
        LD_WARN(PROBE, "device %d: %s", (int)dev, out->verdict);
        finish(o, out, t0);
        return 0;
    }
    if (mode == LD_PROBE_OFF || mode == LD_PROBE_EVEN) {
        even_result(out);
        snprintf(out->verdict, sizeof out->verdict, "%s: even map (TPC t -> domain t mod %d), nothing measured",
                 mode == LD_PROBE_OFF ? "probe off" : "even map requested", nd);
        finish(o, out, t0);
        return 0;
    }
    if (nd == 1) {
        memset(out->physical, 0, out->num_sms);
        out->valid = 1;
        out->mode_used = mode == LD_PROBE_AUTO ? LD_PROBE_EVEN : mode;
        snprintf(out->verdict, sizeof out->verdict, "one domain: every SM in domain 0, nothing measured");
        finish(o, out, t0);
        return 0;
    }

    int force = o->force || ld_opt_true(LD_OPT_PROBE_FORCE);
    char dir[4096], why[256];
    ld_cache_key_t key;
    int cache_ok = o->use_cache && ld_cache_dir(o->cache_dir, dir, sizeof dir) == 0;
    if (o->use_cache && !cache_ok) LD_INFO(PROBE, "no cache directory (set LDSHIM_CACHE_DIR, or an absolute XDG_CACHE_HOME or HOME)");
    if (cache_ok) fill_key(drv, dev, out->num_sms, out->num_domains, &key);
    if (cache_ok && !force) {
        ld_probe_result_t c = *out;
        int rc = ld_cache_load(dir, &key, &c, why, sizeof why);
        if (rc == LD_CACHE_HIT && c.valid && (mode == LD_PROBE_AUTO || mode == c.mode_used)) {
            *out = c;
            out->from_cache = 1;
            finish(o, out, t0);
            LD_DEBUG(PROBE, "device %d: topology from cache (%s)", (int)dev, mode_name(c.mode_used));
            return 0;
        }
        if (rc == LD_CACHE_BAD) LD_WARN(PROBE, "ignoring topology cache: %s", why);
        else if (rc == LD_CACHE_STALE) LD_INFO(PROBE, "re-probing: %s", why);
        else if (rc == LD_CACHE_HIT) LD_INFO(PROBE, "cached %s result does not serve mode %s; re-probing",
                                                    mode_name(c.mode_used), mode_name(mode));
    }

    /* The probe's own launches must not be captured into, or break, a capture running in
     * another thread: relax this thread's capture mode for the duration. */
    ld_own_calls_t oc;
    ld_own_calls_begin(&oc, drv);

    /* Run in dev's context: the caller's if it is current, else dev's primary context. */
    CUcontext caller = NULL, prim = NULL;
    CUdevice cur_dev = -1;
    int pushed = 0;
    drv->pfn_cuCtxGetCurrent(&caller);
    if (!caller || drv->pfn_cuCtxGetDevice(&cur_dev) != CUDA_SUCCESS || cur_dev != dev) {
        if (drv->pfn_cuDevicePrimaryCtxRetain(&prim, dev) == CUDA_SUCCESS) {
            if (ld_own_calls_push(&oc, prim) == 0) pushed = 1;
            else { drv->pfn_cuDevicePrimaryCtxRelease_v2(dev); prim = NULL; }
        }
    }
    probe_t p;
    memset(&p, 0, sizeof p);
    p.drv = drv;
    p.dev = dev;
    p.num_sms = out->num_sms;
    p.nd = out->num_domains;
    int ok = (pushed || (caller && cur_dev == dev)) ? measure(&p, mode, o, out)
           : (snprintf(out->verdict, sizeof out->verdict, "no context for device %d", (int)dev), 0);
    if (pushed) {
        ld_own_calls_pop(&oc);
        drv->pfn_cuDevicePrimaryCtxRelease_v2(dev);
    }
    CUcontext now = NULL;
    if (drv->pfn_cuCtxGetCurrent(&now) == CUDA_SUCCESS && now != caller) drv->pfn_cuCtxSetCurrent(caller);
    ld_own_calls_end(&oc);

    if (ok) {
        out->valid = 1;
        if (cache_ok) {
            finish(o, out, t0);
            if (ld_cache_store(dir, &key, out, why, sizeof why)) LD_INFO(PROBE, "not cached: %s", why);
        }
    } else {
        char reason[sizeof out->verdict];
        snprintf(reason, sizeof reason, "%s", out->verdict);
        even_result(out);
        snprintf(out->verdict, sizeof out->verdict, "%.120s; even map", reason);
        LD_WARN(PROBE, "device %d: %s; using the even map (TPC t -> domain t mod %d) after %d attempt%s",
                       (int)dev, reason, nd, out->attempts, out->attempts == 1 ? "" : "s");
    }
    finish(o, out, t0);
    return 0;
}

/* ---- JSON -------------------------------------------------------------------------- */

typedef struct { char *buf; size_t n; size_t len; } jbuf_t;

static void jput(jbuf_t *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jput(jbuf_t *j, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *dst = j->len < j->n ? j->buf + j->len : NULL;
    int w = vsnprintf(dst, dst ? j->n - j->len : 0, fmt, ap);
    va_end(ap);
    if (w > 0) j->len += (size_t)w;
}

static void jstr(jbuf_t *j, const char *s) {
    j->len += ld_json_str(j->len < j->n ? j->buf + j->len : NULL, j->len < j->n ? j->n - j->len : 0, s);
}

static void jmap(jbuf_t *j, const uint8_t *m, uint32_t n) {
    jput(j, "[");
    for (uint32_t s = 0; s < n; s++) jput(j, "%s%u", s ? "," : "", m[s]);
    jput(j, "]");
}

static double jnum(double v) { return isfinite(v) ? v : 0.0; }

int ld_probe_result_json(const ld_probe_result_t *r, char *buf, size_t n) {
    jbuf_t j = { buf, n, 0 };
    if (n) buf[0] = 0;
    uint32_t nsms = r->num_sms > LDSHIM_MAX_SMS ? LDSHIM_MAX_SMS : r->num_sms;
    uint32_t nd = r->num_domains > LDSHIM_MAX_DOMAINS ? LDSHIM_MAX_DOMAINS : r->num_domains;
    uint32_t src = (r->published.flags & LDSHIM_TOPO_SOURCE_MASK) >> LDSHIM_TOPO_SOURCE_SHIFT;
    static const char *const srcs[] = { "none", "even", "anchored", "clustered", "cache", "driver" };
    jput(&j, "{\"mode\":\"%s\",\"source\":\"%s\",\"from_cache\":%s,\"attempts\":%d,\"valid\":%s,\"verdict\":",
         mode_name(r->mode_used), src < 6 ? srcs[src] : "unknown", r->from_cache ? "true" : "false",
         r->attempts, r->valid ? "true" : "false");
    jstr(&j, r->verdict);
    jput(&j, ",\"num_sms\":%u,\"num_domains\":%u,\"near_cycles\":%.1f,\"far_cycles\":%.1f,"
             "\"separation\":%.4f,\"elapsed_ms\":%.3f,\"tpcs_moved\":%d,\"physical\":",
         nsms, nd, jnum(r->near_cycles), jnum(r->far_cycles), jnum(r->separation), jnum(r->elapsed_ms),
         r->tpcs_moved);
    jmap(&j, r->physical, nsms);
    jput(&j, ",\"balanced\":");
    jmap(&j, r->balanced, nsms);
    jput(&j, ",\"published\":{\"flags\":%u,\"sms_per_domain\":[", r->published.flags);
    for (uint32_t d = 0; d < nd; d++) jput(&j, "%s%u", d ? "," : "", r->published.sms_per_domain[d]);
    jput(&j, "],\"map\":");
    jmap(&j, r->published.sm_domain, nsms);
    jput(&j, "}}");
    return (int)j.len;
}
