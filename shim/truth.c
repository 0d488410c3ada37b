/* truth.c — the probe's map against the driver's own answer (truth.h). */
#include "shim/truth.h"
#include "shim/compute.h"
#include "shim/log.h"
#include "shim/probe_classify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define kLdidHoldNs  20000u   /* each block holds its SM this long: spreads a launch over all */
#define kLdidWaves   4u       /* blocks per SM                                                */
#define kLdidTries   3        /* relaunches while some SM was not reached                     */

#include "shim/truth_ptx.h"

/* %locality_domain_id per SM: map[s] = domain, 0xff where no block ran. */
static int ldid_map(const ld_driver_t *d, CUdevice dev, uint32_t nsms, uint8_t *map, char *why, size_t n) {
    memset(map, 0xff, nsms);
    CUmodule mod = NULL;
    CUfunction f;
    CUdeviceptr out = 0;
    CUstream st = NULL;
    uint32_t *host = calloc(nsms, sizeof *host);
    int rc = -1;
    CUresult r;
    if (!host) { snprintf(why, n, "out of host memory"); return -1; }
    if ((r = d->pfn_cuModuleLoadData(&mod, ld_truth_ldid_ptx)) != CUDA_SUCCESS) {
        mod = NULL;
        snprintf(why, n, "the driver did not take the PTX 9.5 marker (%s)", ld_cu_errname(r));
        goto done;
    }
    if ((r = d->pfn_cuModuleGetFunction(&f, mod, "ldtruth_domain_id")) != CUDA_SUCCESS) {
        snprintf(why, n, "the PTX 9.5 marker has no kernel: %s", ld_cu_errname(r));
        goto done;
    }
    /* One block per SM at a time: the most shared memory a block may have. */
    int optin = 0;
    unsigned smem = 0;
    if (d->pfn_cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev) == CUDA_SUCCESS &&
        optin > 0 && d->pfn_cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin) == CUDA_SUCCESS)
        smem = (unsigned)optin;
    if ((r = d->pfn_cuMemAlloc_v2(&out, nsms * sizeof *host)) != CUDA_SUCCESS) {
        out = 0;
        snprintf(why, n, "marker buffer: %s", ld_cu_errname(r));
        goto done;
    }
    if ((r = d->pfn_cuStreamCreate(&st, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
        st = NULL;
        snprintf(why, n, "marker stream: %s", ld_cu_errname(r));
        goto done;
    }
    uint32_t hold = kLdidHoldNs, reached = 0;
    for (int t = 0; t < kLdidTries && reached < nsms; t++) {
        void *args[] = { &out, &nsms, &hold };
        memset(host, 0, nsms * sizeof *host);
        if ((r = d->pfn_cuMemcpyHtoD_v2(out, host, nsms * sizeof *host)) != CUDA_SUCCESS ||
            (r = d->pfn_cuLaunchKernel(f, kLdidWaves * nsms, 1, 1, 32, 1, 1, smem, st, args, NULL)) != CUDA_SUCCESS ||
            (r = d->pfn_cuStreamSynchronize(st)) != CUDA_SUCCESS ||
            (r = d->pfn_cuMemcpyDtoH_v2(host, out, nsms * sizeof *host)) != CUDA_SUCCESS) {
            snprintf(why, n, "running the PTX 9.5 marker: %s", ld_cu_errname(r));
            goto done;
        }
        reached = 0;
        for (uint32_t s = 0; s < nsms; s++)
            if (host[s] >= 1 && host[s] <= LDSHIM_MAX_DOMAINS) { map[s] = (uint8_t)(host[s] - 1); reached++; }
    }
    snprintf(why, n, "%%locality_domain_id read on %u of %u SMs", reached, nsms);
    rc = reached ? 0 : -1;
done:
    if (st && d->pfn_cuStreamDestroy_v2(st) != CUDA_SUCCESS) d->pfn_cuStreamDestroy_v2(st);
    if (out && d->pfn_cuMemFree_v2(out) != CUDA_SUCCESS) d->pfn_cuMemFree_v2(out);   /* once more: never leak it */
    if (mod && d->pfn_cuModuleUnload(mod) != CUDA_SUCCESS) d->pfn_cuModuleUnload(mod);
    free(host);
    return rc;
}

/* Per-SM agreement of a source's map with the measured one. */
static void compare(ld_truth_source_t *s, const uint8_t *measured, uint32_t nsms) {
    s->compared = s->agree = 0;
    for (uint32_t i = 0; i < nsms; i++) {
        if (s->map[i] == 0xff) continue;
        s->compared++;
        s->agree += s->map[i] == measured[i];
    }
}

/* The driver's map: the source's answer, and the measurement for SMs it did not place. */
static void adopt(ld_probe_result_t *r, const ld_truth_source_t *s, ld_map_mode_t map) {
    for (uint32_t i = 0; i < r->num_sms; i++)
        if (s->map[i] != 0xff && s->map[i] < r->num_domains) r->physical[i] = s->map[i];
    r->tpcs_moved = ld_balance_map(r->physical, r->num_sms, r->num_domains, r->balanced);
    int balanced = map != LD_MAP_PHYSICAL;
    ld_topology_fill(&r->published, balanced ? r->balanced : r->physical, r->num_sms, r->num_domains, 1, balanced,
                     LDSHIM_SOURCE_DRIVER);
}

void ld_truth_check(const ld_driver_t *d, CUdevice dev, ld_topology_source_t policy, ld_map_mode_t map,
                    ld_probe_result_t *r, ld_truth_t *t) {
    memset(t, 0, sizeof *t);
    t->checked = 1;
    t->policy = policy;
    t->published_from = "probe";
    uint32_t nsms = r->num_sms > LDSHIM_MAX_SMS ? LDSHIM_MAX_SMS : r->num_sms;
    uint32_t nd = r->num_domains > LDSHIM_MAX_DOMAINS ? LDSHIM_MAX_DOMAINS : r->num_domains;
    for (uint32_t i = 0; i < nsms; i++)
        if (r->physical[i] < LDSHIM_MAX_DOMAINS) t->measured_per_domain[r->physical[i]]++;
    t->driver_domains = ld_native_domain_count(d, dev);
    if (t->driver_domains < 2) {
        const char *none = t->driver_domains == 1 ? "the driver reports one locality domain"
                                                  : "the driver reports no locality domains (attribute 149 unknown)";
        snprintf(t->split.why, sizeof t->split.why, "%s", none);
        snprintf(t->count.why, sizeof t->count.why, "%s", none);
        snprintf(t->ldid.why, sizeof t->ldid.why, "%s", none);
        return;
    }
    /* count: one number per domain; a domain measured with fewer SMs disagrees (the
     * supplemental SMs beyond it may lie in either). */
    int v = 0;
    if (d->pfn_cuDeviceGetAttribute(&v, LD_CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_MULTIPROCESSOR_COUNT, dev) == CUDA_SUCCESS &&
        v > 0) {
        t->count.state = LD_TRUTH_OK;
        t->count_per_domain = v;
        t->count.compared = nd;
        for (uint32_t k = 0; k < nd; k++) t->count.agree += t->measured_per_domain[k] >= (uint32_t)v;
        snprintf(t->count.why, sizeof t->count.why, "%d SMs in each locality domain", v);
    } else {
        snprintf(t->count.why, sizeof t->count.why, "the driver does not know attribute 157 (CUDA < 13.4)");
    }
    ld_truth_source_t *s = &t->split;
    if (ld_compute_domain_sms(d, dev, (int)nd, nsms, s->map, s->why, sizeof s->why) == 0) {
        s->state = LD_TRUTH_OK;
        compare(s, r->physical, nsms);
        snprintf(s->why, sizeof s->why, "one group per locality domain, its SMs marked");
    } else {
        s->state = LD_TRUTH_FAILED;
    }
    s = &t->ldid;
    s->state = ldid_map(d, dev, nsms, s->map, s->why, sizeof s->why) == 0 ? LD_TRUTH_OK : LD_TRUTH_FAILED;
    if (s->state == LD_TRUTH_OK) compare(s, r->physical, nsms);

    /* The driver's map: the split (whole groups), else %locality_domain_id. */
    const ld_truth_source_t *drv = t->split.state == LD_TRUTH_OK && t->split.compared ? &t->split
                                 : t->ldid.state == LD_TRUTH_OK && t->ldid.compared ? &t->ldid : NULL;
    t->disagree = (t->split.state == LD_TRUTH_OK && t->split.agree != t->split.compared) ||
                  (t->ldid.state == LD_TRUTH_OK && t->ldid.agree != t->ldid.compared);
    if (drv && (t->disagree || !r->valid) && (policy == LD_TOPOLOGY_SOURCE_DRIVER || !r->valid)) {
        adopt(r, drv, map);
        t->published_driver = 1;
        t->published_from = drv == &t->split ? "split" : "ldid";
        if (r->valid)
            LD_WARN(TOPO, "device %d: the probe's map disagrees with the driver's (%s: %u of %u SMs alike); publishing "
                          "the driver's (topology_source = driver)", (int)dev, t->published_from, drv->agree, drv->compared);
        else
            LD_INFO(TOPO, "device %d: no measured map (%s); publishing the driver's (%s)", (int)dev, r->verdict,
                          t->published_from);
    } else if (t->disagree) {
        LD_WARN(TOPO, "device %d: the probe's map disagrees with the driver's (split %u/%u, ldid %u/%u SMs alike); "
                      "publishing the probe's (topology_source = probe)", (int)dev, t->split.agree, t->split.compared,
                      t->ldid.agree, t->ldid.compared);
    }
}

static const char *state_name(int s) { return s == LD_TRUTH_OK ? "ok" : s == LD_TRUTH_FAILED ? "failed" : "absent"; }

static int put_source(char *buf, size_t n, const char *name, const ld_truth_source_t *s) {
    char why[2 * sizeof s->why];
    size_t k = 0;
    for (const char *c = s->why; *c && k + 2 < sizeof why; c++) {   /* JSON string: escape " and \ */
        if (*c == '"' || *c == '\\') why[k++] = '\\';
        why[k++] = (unsigned char)*c < 0x20 ? ' ' : *c;
    }
    why[k] = 0;
    return snprintf(buf, n, "\"%s\":{\"state\":\"%s\",\"why\":\"%s\",\"compared\":%u,\"agree\":%u}", name,
                    state_name(s->state), why, s->compared, s->agree);
}

int ld_truth_json(const ld_truth_t *t, char *buf, size_t n) {
    size_t k = 0;
#define ADV(x) do { int w_ = (x); if (w_ > 0) k += (size_t)w_; } while (0)
#define REST (k < n ? buf + k : NULL), (k < n ? n - k : 0)
    ADV(snprintf(REST, "{\"checked\":%s,\"driver_domains\":%d,\"sources\":{", t->checked ? "true" : "false",
                 t->driver_domains));
    ADV(put_source(REST, "split", &t->split));
    ADV(snprintf(REST, ","));
    ADV(put_source(REST, "count", &t->count));
    ADV(snprintf(REST, ","));
    ADV(put_source(REST, "ldid", &t->ldid));
    ADV(snprintf(REST, "},\"count_per_domain\":%d,\"measured_per_domain\":[", t->count_per_domain));
    for (int d = 0; d < LDSHIM_MAX_DOMAINS && (d < 2 || t->measured_per_domain[d]); d++)
        ADV(snprintf(REST, "%s%u", d ? "," : "", t->measured_per_domain[d]));
    ADV(snprintf(REST, "],\"disagree\":%s,\"policy\":\"%s\",\"published\":\"%s\"}", t->disagree ? "true" : "false",
                 ld_topology_source_name(t->policy), t->published_from ? t->published_from : "probe"));
#undef REST
#undef ADV
    return (int)k;
}
