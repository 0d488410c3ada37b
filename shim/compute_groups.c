/* compute_groups.c — a device's SM groups for compute binding: splits, their measurement by the
 * marker kernel, and their cache file (contract: compute_groups.h). */
#include "shim/compute_groups.h"
#include "shim/compute.h"
#include "shim/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const unsigned char ld_probe_fatbin[] __attribute__((weak, visibility("hidden")));

#define MARKER_HOLD_NS   20000u   /* each marker CTA holds its SM this long: spreads a launch */
#define MARKER_WAVES     4u       /* marker CTAs per SM of the group                          */
#define MARKER_TRIES     3        /* relaunches of a marker that missed SMs                   */
#define GROUPS_FILE_MAX  (LD_MAX_SM_GROUPS * 96 + 512)

/* ---- the marker kernel ------------------------------------------------------------------ */

void ld_marker_close(ld_marker_t *m) {
    /* Retried once: a transient failure must not leave the counters allocated. */
    if (m->seen && m->d->pfn_cuMemFree_v2(m->seen) != CUDA_SUCCESS) m->d->pfn_cuMemFree_v2(m->seen);
    if (m->lib) m->d->pfn_cuLibraryUnload(m->lib);
    memset(m, 0, sizeof *m);
}

int ld_marker_open(const ld_driver_t *d, CUdevice dev, uint32_t nsms, ld_marker_t *m, char *why, size_t n) {
    memset(m, 0, sizeof *m);
    m->d = d;
    m->dev = dev;
    m->nsms = nsms;
    if (!ld_probe_fatbin) { snprintf(why, n, "the marker kernel is not built into this library"); return -1; }
    if (!d->pfn_cuLibraryLoadData || !d->pfn_cuLibraryGetKernel || !d->pfn_cuLibraryUnload) {
        snprintf(why, n, "the driver lacks context-independent loading (cuLibraryLoadData, CUDA >= 12.0)");
        return -1;
    }
    CUresult r = d->pfn_cuLibraryLoadData(&m->lib, ld_probe_fatbin, NULL, NULL, 0, NULL, NULL, 0);
    if (r != CUDA_SUCCESS) { m->lib = NULL; snprintf(why, n, "loading the marker kernel: %s", ld_cu_errname(r)); return -1; }
    if ((r = d->pfn_cuLibraryGetKernel(&m->clear, m->lib, "ldprobe_clear")) != CUDA_SUCCESS ||
        (r = d->pfn_cuLibraryGetKernel(&m->marker, m->lib, "ldprobe_sm_marker")) != CUDA_SUCCESS) {
        snprintf(why, n, "finding the marker kernel: %s", ld_cu_errname(r));
        ld_marker_close(m);
        return -1;
    }
    int optin = 0;
    d->pfn_cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev);
    m->smem = optin > 0 ? (unsigned)optin : 48u * 1024u;
    if (d->pfn_cuKernelSetAttribute &&
        d->pfn_cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)m->smem, m->marker, dev) != CUDA_SUCCESS)
        m->smem = 48u * 1024u;   /* more CTAs per SM then; the relaunches still cover the group */
    if ((r = d->pfn_cuMemAlloc_v2(&m->seen, (nsms + 1) * sizeof(uint32_t))) != CUDA_SUCCESS) {
        m->seen = 0;
        snprintf(why, n, "marker counters: %s", ld_cu_errname(r));
        ld_marker_close(m);
        return -1;
    }
    return 0;
}

/* Launch the marker in green context `g` (CUcontext gctx) and collect the SMs it ran on.
 * `expect`: the SMs the group should have (0: unknown). Returns 0, or -1 with why. */
int ld_marker_run(ld_marker_t *m, CUgreenCtx g, CUcontext gctx, uint32_t expect, ld_smmask_t *out, char *why, size_t n) {
    const ld_driver_t *d = m->d;
    memset(out, 0, sizeof *out);
    uint32_t *seen = malloc((m->nsms + 1) * sizeof *seen);
    if (!seen) { snprintf(why, n, "out of host memory"); return -1; }
    CUstream st = NULL;
    CUresult r = d->pfn_cuGreenCtxStreamCreate(&st, g, CU_STREAM_NON_BLOCKING, 0);
    if (r != CUDA_SUCCESS) { free(seen); snprintf(why, n, "cuGreenCtxStreamCreate: %s", ld_cu_errname(r)); return -1; }
    int pushed = d->pfn_cuCtxPushCurrent_v2(gctx) == CUDA_SUCCESS;
    int rc = -1;
    uint32_t nseen = m->nsms + 1, hold = MARKER_HOLD_NS;
    unsigned grid = MARKER_WAVES * (expect ? expect : m->nsms);
    for (int t = 0; t < MARKER_TRIES; t++) {
        void *cargs[] = { &m->seen, &nseen };
        void *margs[] = { &m->seen, &m->nsms, &hold };
        if ((r = d->pfn_cuLaunchKernel((CUfunction)m->clear, 1, 1, 1, 256, 1, 1, 0, st, cargs, NULL)) != CUDA_SUCCESS ||
            (r = d->pfn_cuLaunchKernel((CUfunction)m->marker, grid, 1, 1, 32, 1, 1, m->smem, st, margs, NULL)) != CUDA_SUCCESS ||
            (r = d->pfn_cuStreamSynchronize(st)) != CUDA_SUCCESS ||
            (r = d->pfn_cuMemcpyDtoH_v2(seen, m->seen, nseen * sizeof *seen)) != CUDA_SUCCESS) {
            snprintf(why, n, "running the marker kernel: %s", ld_cu_errname(r));
            break;
        }
        for (uint32_t s = 0; s < m->nsms; s++)
            if (seen[s]) ld_smmask_set(out, s);
        if (seen[m->nsms]) { snprintf(why, n, "the marker saw %u SM ids beyond %u", seen[m->nsms], m->nsms); break; }
        if (!expect || ld_smmask_count(out) >= expect) { rc = 0; break; }
        snprintf(why, n, "the marker reached %u of the group's %u SMs", ld_smmask_count(out), expect);
    }
    if (pushed) { CUcontext x; d->pfn_cuCtxPopCurrent_v2(&x); }
    if (d->pfn_cuStreamDestroy_v2(st) != CUDA_SUCCESS) d->pfn_cuStreamDestroy_v2(st);   /* once more: never leak it */
    free(seen);
    return rc;
}

/* Measure the SMs of one resource (a group, or the remainder). */
int ld_marker_measure(ld_marker_t *m, CUdevResource *res, ld_smmask_t *out, char *why, size_t n) {
    const ld_driver_t *d = m->d;
    CUdevResourceDesc desc;
    CUgreenCtx g = NULL;
    CUcontext gc = NULL;
    CUresult r = d->pfn_cuDevResourceGenerateDesc(&desc, res, 1);
    if (r == CUDA_SUCCESS) r = d->pfn_cuGreenCtxCreate(&g, desc, m->dev, CU_GREEN_CTX_DEFAULT_STREAM);
    if (r != CUDA_SUCCESS) { snprintf(why, n, "green context for one SM group: %s", ld_cu_errname(r)); return -1; }
    int rc = -1;
    if ((r = d->pfn_cuCtxFromGreenCtx(&gc, g)) != CUDA_SUCCESS) snprintf(why, n, "cuCtxFromGreenCtx: %s", ld_cu_errname(r));
    else rc = ld_marker_run(m, g, gc, res->sm.smCount, out, why, n);
    if (d->pfn_cuGreenCtxDestroy(g) != CUDA_SUCCESS) d->pfn_cuGreenCtxDestroy(g);   /* once more: never leak it */
    return rc;
}

/* ---- splits ------------------------------------------------------------------------------ */

ld_cuDevSmResourceSplit_fn ld_split_native_fn(const ld_driver_t *d) {
    return d->handle ? (ld_cuDevSmResourceSplit_fn)ld_real_dlsym(d->handle, "cuDevSmResourceSplit") : NULL;
}

/* Groups of cuDevSmResourceSplitByCount: aligned/backfill at the minimum partition, fine with
 * co-scheduling ignored (smaller groups, no large clusters). */
int ld_split_bycount(const ld_driver_t *d, ld_split_t method, ld_sm_split_t *sp, char *why, size_t n) {
    unsigned flags = method == LD_SPLIT_FINE ? CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING : 0u;
    unsigned minc = method == LD_SPLIT_FINE ? 2u : sp->all.sm.minSmPartitionSize;
    if (!minc) minc = 2;
    unsigned ng = sp->all.sm.smCount / minc;
    if (ng > LD_MAX_SM_GROUPS) ng = LD_MAX_SM_GROUPS;
    memset(sp->res, 0, sizeof sp->res);
    memset(&sp->rem, 0, sizeof sp->rem);
    CUresult r = d->pfn_cuDevSmResourceSplitByCount(sp->res, &ng, &sp->all, &sp->rem, flags, minc);
    if (r != CUDA_SUCCESS && method == LD_SPLIT_FINE) {
        LD_INFO(COMPUTE, "fine split (%u SMs, co-scheduling ignored) refused: %s; using the aligned split", minc,
                         ld_cu_errname(r));
        return ld_split_bycount(d, LD_SPLIT_ALIGNED, sp, why, n);
    }
    if (r != CUDA_SUCCESS) { snprintf(why, n, "cuDevSmResourceSplitByCount(%u): %s", minc, ld_cu_errname(r)); return -1; }
    memset(&sp->g, 0, sizeof sp->g);
    sp->g.ngroups = (int)ng;
    for (unsigned i = 0; i < ng; i++) { sp->g.count[i] = sp->res[i].sm.smCount; sp->g.domain[i] = -1; }
    snprintf(sp->desc, sizeof sp->desc, "bycount:%u:%u", minc, flags);
    sp->fine = flags != 0;
    return 0;
}

/* CUDA >= 13.4: one group per locality domain, told by the driver (CCCL's three methods). */
int ld_split_native(ld_cuDevSmResourceSplit_fn fn, int nd, const ld_compute_t *req,
                        ld_split_t method, uint32_t cap, ld_sm_split_t *sp, char *why, size_t n) {
    ld_sm_group_params_t p[LDSHIM_MAX_DOMAINS];
    memset(p, 0, sizeof p);
    uint32_t total = sp->all.sm.smCount;
    for (int i = 0; i < nd; i++) {
        p[i].flags = LD_CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_ID;
        p[i].localityDomainId = (unsigned)i;
        uint32_t want = 0;
        if (req->kind == LD_COMPUTE_SPREAD) want = req->sms / (uint32_t)nd;
        else if (cap) want = cap;
        if (method == LD_SPLIT_FINE || method == LD_SPLIT_BACKFILL) p[i].coscheduledSmCount = 2;
        if (method == LD_SPLIT_BACKFILL) {
            p[i].flags |= LD_CU_DEV_SM_RESOURCE_GROUP_BACKFILL;
            if (!want) want = total / (uint32_t)nd;
        }
        unsigned align = p[i].coscheduledSmCount ? p[i].coscheduledSmCount : sp->all.sm.smCoscheduledAlignment;
        if (want && align) want -= want % align;
        p[i].smCount = want;
    }
    memset(sp->res, 0, sizeof sp->res);
    memset(&sp->rem, 0, sizeof sp->rem);
    CUresult r = fn(sp->res, (unsigned)nd, &sp->all, &sp->rem, 0, p);
    if (r != CUDA_SUCCESS) { snprintf(why, n, "cuDevSmResourceSplit by locality domain: %s", ld_cu_errname(r)); return -1; }
    memset(&sp->g, 0, sizeof sp->g);
    sp->g.ngroups = nd;
    for (int i = 0; i < nd; i++) { sp->g.count[i] = sp->res[i].sm.smCount; sp->g.domain[i] = (int8_t)i; }
    sp->native = 1;
    snprintf(sp->desc, sizeof sp->desc, "domain:%s:%u", ld_split_name(method), p[0].smCount);
    return 0;
}

/* ---- the driver's own SM sets, for the probe's check (shim/truth.c) ----------------------- */

int ld_compute_domain_sms(const ld_driver_t *d, CUdevice dev, int nd, uint32_t nsms, uint8_t *map, char *why, size_t n) {
    memset(map, 0xff, nsms);
    ld_cuDevSmResourceSplit_fn fn = ld_split_native_fn(d);
    if (!fn || !d->pfn_cuDeviceGetDevResource || !d->pfn_cuGreenCtxCreate) {
        snprintf(why, n, "the driver has no cuDevSmResourceSplit (CUDA < 13.1) or no green contexts");
        return -1;
    }
    if (nd < 2 || nd > LDSHIM_MAX_DOMAINS) { snprintf(why, n, "%d locality domains", nd); return -1; }
    ld_sm_split_t *sp = calloc(1, sizeof *sp);
    if (!sp) { snprintf(why, n, "out of host memory"); return -1; }
    int rc = -1;
    CUresult r = d->pfn_cuDeviceGetDevResource(dev, &sp->all, CU_DEV_RESOURCE_TYPE_SM);
    if (r != CUDA_SUCCESS) { snprintf(why, n, "cuDeviceGetDevResource: %s", ld_cu_errname(r)); goto out; }
    /* One group per domain holding all its SMs: pairs (the finest co-scheduling), and with
     * 13.5's supplemental SMs, those beyond the domain's multiprocessor count too; a driver
     * that refuses that flag is asked without it. */
    ld_sm_group_params_t p[LDSHIM_MAX_DOMAINS];
    for (int pass = 0; pass < 2; pass++) {
        memset(p, 0, sizeof p);
        for (int i = 0; i < nd; i++) {
            p[i].flags = LD_CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_ID |
                         (pass == 0 ? LD_CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_SUPPLEMENTAL_SMS : 0u);
            p[i].localityDomainId = (unsigned)i;
            p[i].coscheduledSmCount = 2;
        }
        memset(sp->res, 0, sizeof sp->res);
        if ((r = fn(sp->res, (unsigned)nd, &sp->all, &sp->rem, 0, p)) == CUDA_SUCCESS) break;
    }
    if (r != CUDA_SUCCESS) { snprintf(why, n, "cuDevSmResourceSplit by locality domain: %s", ld_cu_errname(r)); goto out; }
    ld_marker_t m;
    if (ld_marker_open(d, dev, nsms, &m, why, n) != 0) goto out;
    rc = 0;
    for (int i = 0; i < nd && rc == 0; i++) {
        ld_smmask_t got;
        if (ld_marker_measure(&m, &sp->res[i], &got, why, n) != 0) { rc = -1; break; }
        for (uint32_t sm = 0; sm < nsms; sm++) {
            if (!ld_smmask_has(&got, sm)) continue;
            if (map[sm] != 0xff) { snprintf(why, n, "SM %u is in the groups of domains %u and %d", sm, map[sm], i); rc = -1; break; }
            map[sm] = (uint8_t)i;
        }
    }
    ld_marker_close(&m);
out:
    free(sp);
    return rc;
}

/* ---- groups cache ----------------------------------------------------------------------- */

int ld_groups_key(const ld_driver_t *d, CUdevice dev, const ld_sm_split_t *sp, ld_groups_key_t *k) {
    memset(k, 0, sizeof *k);
    CUuuid u;
    if (d->pfn_cuDeviceGetUuid_v2(&u, dev) != CUDA_SUCCESS) return -1;
    const unsigned char *b = (const unsigned char *)u.bytes;
    snprintf(k->uuid, sizeof k->uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    d->pfn_cuDriverGetVersion(&k->driver_version);
    k->num_sms = sp->all.sm.smCount;
    snprintf(k->split, sizeof k->split, "%s", sp->desc);
    return 0;
}

int ld_groups_load(const char *dir, const ld_groups_key_t *k, const ld_sm_split_t *sp, ld_sm_groups_t *g) {
    char name[256], path[4096], why[512];
    if (ld_groups_cache_name(k, name, sizeof name) || snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return -1;
    char *buf = malloc(GROUPS_FILE_MAX + 1);
    if (!buf) return -1;
    size_t len = 0;
    int rc = ld_cache_read_file(path, buf, GROUPS_FILE_MAX, &len, why, sizeof why);
    if (rc == LD_CACHE_HIT) rc = ld_groups_cache_parse(buf, len, k, g, why, sizeof why) == 0 ? 0 : -2;
    else rc = rc == LD_CACHE_MISS ? -1 : -2;
    free(buf);
    if (rc == 0 && g->ngroups != sp->g.ngroups) { snprintf(why, sizeof why, "%.300s: stale (group count)", path); rc = -2; }
    for (int i = 0; rc == 0 && i < g->ngroups; i++)
        if (g->count[i] != sp->g.count[i]) { snprintf(why, sizeof why, "%.300s: stale (group %d size)", path, i); rc = -2; }
    if (rc == -2) LD_WARN(COMPUTE, "ignoring SM-group cache: %s", why);
    return rc;
}

void ld_groups_store(const char *dir, const ld_groups_key_t *k, const ld_sm_groups_t *g) {
    char name[256], path[4096], why[200];
    if (ld_groups_cache_name(k, name, sizeof name) || snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return;
    char *buf = malloc(GROUPS_FILE_MAX);
    if (!buf) return;
    int len = ld_groups_cache_format(k, g, buf, GROUPS_FILE_MAX);
    if (len > 0 && ld_cache_write_file(dir, path, buf, (size_t)len, why, sizeof why) != 0)
        LD_INFO(COMPUTE, "SM-group cache not written: %s", why);
    free(buf);
}
