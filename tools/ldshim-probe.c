/* ldshim-probe — run the topology probe on every visible GPU and show the SM→domain map.
 *
 * Links the probe statically (shim/probe*.c, driver.c, log.c, the embedded kernels), so it
 * runs without LD_PRELOAD. Exit status: 0 every probed device has a map (measured, cached
 * or the even fallback), 1 a device could not be probed, 2 bad usage, 3 no driver or GPU.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ldshim_build.h"   /* generated: LDSHIM_BUILD_VERSION, LDSHIM_BUILD_REVISION */
#include "shim/compute.h"
#include "shim/driver.h"
#include "shim/file.h"
#include "shim/json.h"
#include "shim/log.h"
#include "shim/options.h"
#include "shim/probe.h"
#include "shim/probe_classify.h"

static void usage(FILE *f) {
    fputs("usage: ldshim-probe [options]\n"
          "Measure which locality domain each SM of every visible GPU is near, validate the\n"
          "result, and print the SM->domain map (see doc/probe.md).\n\n"
          "  --mode M        auto (default) | anchored | clustered | even\n"
          "                  auto: anchored where the driver can place memory per domain\n"
          "                  (CUDA >= 13.4), else clustered. anchored without such memory\n"
          "                  measures ordinary (interleaved) memory: expect no separation.\n"
          "  --map M         balanced (default) | physical: which map is published\n"
          "  --device N      probe only CUDA device N\n"
          "  --domains N     expected domain count (default: the driver's, else 2)\n"
          "  --force         ignore the cache (a valid result rewrites it); also\n"
          "                  LDSHIM_PROBE_FORCE=1\n"
          "  --no-cache      neither read nor write the cache\n"
          "  --cache-dir DIR cache directory (default $LDSHIM_CACHE_DIR, $XDG_CACHE_HOME/ldshim,\n"
          "                  ~/.cache/ldshim)\n"
          "  --compute P     also build the compute binding P (domain:N | spread:K) the shim would\n"
          "                  apply, and draw its SMs; --compute-split aligned|fine|backfill and\n"
          "                  --compute-sms K as the policy's compute_split / compute_sms\n"
          "  --json          one JSON object per device and line, for machines\n"
          "  --classify FILE re-run the classifier on a matrix dumped with LDSHIM_PROBE_DUMP\n"
          "                  (clustered-*.csv or anchored-*.csv); needs no GPU\n"
          "  -h, --help      this text\n"
          "  --version       the version and git revision of this build\n"
          "Log level: LDSHIM_LOG=error|warn|info|debug (stderr).\n", f);
}

/* A command-line value for a message: escape codes and other control bytes as \xNN. */
static const char *shown(const char *s) {
    static char buf[200];
    return ld_file_printable(s, buf, sizeof buf);
}

/* ---- memory for the anchored mode -------------------------------------------------- */

typedef struct {
    const ld_driver_t *drv;
    CUdevice dev;
    int native;                   /* 1: VMM memory placed per locality domain            */
    size_t gran;
    CUmemGenericAllocationHandle h[LDSHIM_MAX_DOMAINS];
    CUdeviceptr va[LDSHIM_MAX_DOMAINS];
} tool_mem_t;

/* Native placement (CUDA 13.4 location type, id = device | domain << 8) when the driver
 * accepts it; checked once per device by allocating and releasing one granule. */
static int native_probe(tool_mem_t *m) {
    const ld_driver_t *d = m->drv;
    if (!d->pfn_cuMemCreate || !d->pfn_cuMemRelease || !d->pfn_cuMemAddressReserve || !d->pfn_cuMemMap ||
        !d->pfn_cuMemSetAccess || !d->pfn_cuMemGetAllocationGranularity)
        return 0;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = LD_CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN;
    prop.location.id = LD_LOCALITY_LOCATION_ID(m->dev, 0);
    if (d->pfn_cuMemGetAllocationGranularity(&m->gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || !m->gran)
        return 0;
    CUmemGenericAllocationHandle h;
    if (d->pfn_cuMemCreate(&h, m->gran, &prop, 0) != CUDA_SUCCESS) return 0;
    d->pfn_cuMemRelease(h);
    return 1;
}

static CUresult mem_alloc(void *ctx, int domain, size_t bytes, CUdeviceptr *out) {
    tool_mem_t *m = ctx;
    const ld_driver_t *d = m->drv;
    if (!m->native) return d->pfn_cuMemAlloc_v2(out, bytes);
    size_t sz = (bytes + m->gran - 1) / m->gran * m->gran;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = LD_CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN;
    prop.location.id = LD_LOCALITY_LOCATION_ID(m->dev, domain);
    CUmemGenericAllocationHandle h;
    CUdeviceptr va = 0;
    CUresult r = d->pfn_cuMemCreate(&h, sz, &prop, 0);
    if (r != CUDA_SUCCESS) return r;
    if ((r = d->pfn_cuMemAddressReserve(&va, sz, m->gran, 0, 0)) != CUDA_SUCCESS) { d->pfn_cuMemRelease(h); return r; }
    CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, m->dev }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    if ((r = d->pfn_cuMemMap(va, sz, 0, h, 0)) != CUDA_SUCCESS ||
        (r = d->pfn_cuMemSetAccess(va, sz, &acc, 1)) != CUDA_SUCCESS) {
        d->pfn_cuMemUnmap(va, sz);
        d->pfn_cuMemAddressFree(va, sz);
        d->pfn_cuMemRelease(h);
        return r;
    }
    m->h[domain] = h;
    m->va[domain] = va;
    *out = va;
    return CUDA_SUCCESS;
}

static void mem_free(void *ctx, CUdeviceptr p, size_t bytes) {
    tool_mem_t *m = ctx;
    const ld_driver_t *d = m->drv;
    if (!m->native) { d->pfn_cuMemFree_v2(p); return; }
    size_t sz = (bytes + m->gran - 1) / m->gran * m->gran;
    d->pfn_cuMemUnmap(p, sz);
    d->pfn_cuMemAddressFree(p, sz);
    for (int i = 0; i < LDSHIM_MAX_DOMAINS; i++)
        if (m->va[i] == p && m->h[i]) { d->pfn_cuMemRelease(m->h[i]); m->h[i] = 0; m->va[i] = 0; break; }
}

/* ---- picture ----------------------------------------------------------------------- */

static const char *source_name(uint32_t flags) {
    static const char *const n[] = { "none", "even map", "anchored", "clustered", "cache" };
    uint32_t s = (flags & LDSHIM_TOPO_SOURCE_MASK) >> LDSHIM_TOPO_SOURCE_SHIFT;
    return s < 5 ? n[s] : "unknown";
}

static const char *mode_word(ld_probe_mode_t m) {
    return m == LD_PROBE_ANCHORED ? "anchored" : m == LD_PROBE_CLUSTERED ? "clustered" : "even";
}

static void print_picture(int dev, const char *name, const char *uuid, const ld_probe_result_t *r, int physical) {
    uint32_t n = r->num_sms, nd = r->num_domains, pc[LDSHIM_MAX_DOMAINS], bc[LDSHIM_MAX_DOMAINS];
    ld_count_domains(r->physical, n, nd, pc);
    ld_count_domains(r->balanced, n, nd, bc);
    printf("GPU %d  %s  %s  %u SMs, %u domains\n", dev, name, uuid, n, nd);
    if (r->from_cache)
        printf("  source   cache (of a %s probe, %d attempt%s)\n", mode_word(r->mode_used), r->attempts,
               r->attempts == 1 ? "" : "s");
    else
        printf("  source   %s, measured now: %d attempt%s, %.1f ms\n",
               r->valid ? mode_word(r->mode_used) : "even map (fallback)", r->attempts,
               r->attempts == 1 ? "" : "s", r->elapsed_ms);
    printf("  verdict  %s%s\n", r->valid ? "VALID  " : "NOT VALIDATED  ", r->verdict);
    if (r->near_cycles > 0)
        printf("  latency  near %.0f / far %.0f cycles per hop (far/near %.3f)%s\n", r->near_cycles, r->far_cycles,
               r->far_cycles / r->near_cycles, r->valid ? "" : "  [last attempt]");
    printf("  domains  physical");
    for (uint32_t d = 0; d < nd; d++) printf("%s%u", d ? " / " : " ", pc[d]);
    printf("   balanced");
    for (uint32_t d = 0; d < nd; d++) printf("%s%u", d ? " / " : " ", bc[d]);
    printf("   TPCs moved: %d\n", r->tpcs_moved);
    printf("  map      %s, published with source '%s' flags 0x%x; a cell is one TPC (SMs 2t, 2t+1):\n"
           "           its SMs' domains, * = moved by balancing\n",
           physical ? "physical" : "balanced", source_name(r->published.flags), r->published.flags);
    const uint8_t *map = physical ? r->physical : r->balanced;
    uint32_t ntpc = (n + 1) / 2;
    printf("           TPC ");
    for (uint32_t c = 0; c < 16 && c < ntpc; c++) printf("%4u", c);
    printf("\n");
    for (uint32_t row = 0; row * 16 < ntpc; row++) {
        uint32_t first = row * 32, last = (row + 1) * 32 - 1 < n - 1 ? (row + 1) * 32 - 1 : n - 1;
        printf("     SM %3u-%-3u", first, last);
        for (uint32_t t = row * 16; t < (row + 1) * 16 && t < ntpc; t++) {
            char cell[4] = "   ";
            uint32_t s = 2 * t;
            cell[0] = (char)('0' + map[s]);
            cell[1] = s + 1 < n ? (char)('0' + map[s + 1]) : '-';
            int moved = r->physical[s] != r->balanced[s] || (s + 1 < n && r->physical[s + 1] != r->balanced[s + 1]);
            cell[2] = moved && !physical ? '*' : ' ';
            printf(" %s", cell);
        }
        printf("\n");
    }
    for (uint32_t d = 0; d < nd; d++) {
        printf("  domain %u TPCs:", d);
        for (uint32_t t = 0; t < ntpc; t++)
            if (map[2 * t] == d) printf(" %u", t);
        printf("\n");
    }
}

/* The bound SMs of a compute binding on the same grid: '#' bound, '.' not. */
static void print_compute(const ld_probe_result_t *r, const ld_compute_info_t *ci) {
    if (!ci->applied) {
        printf("  compute  %s: not bound: %s\n", ci->request, ci->reason);
        return;
    }
    printf("  compute  %s: %u of %u SMs in %d group(s) (%s); %s%s, %.1f ms\n", ci->request, ci->plan.count,
           ci->device_sms, ci->plan.ngroups, ci->method, ci->verified ? "checked with the marker" : "not checked",
           ci->groups_from_cache ? ", groups from the cache" : "", ci->elapsed_ms);
    printf("           per domain");
    for (uint32_t d = 0; d < r->num_domains; d++) printf("%s%u", d ? " / " : " ", ci->plan.per_domain[d]);
    if (ci->plan.outside) printf("   (%u outside the domain)", ci->plan.outside);
    printf("; a cell is one TPC, # = bound SM:\n");
    uint32_t n = r->num_sms, ntpc = (n + 1) / 2;
    for (uint32_t row = 0; row * 16 < ntpc; row++) {
        uint32_t first = row * 32, last = (row + 1) * 32 - 1 < n - 1 ? (row + 1) * 32 - 1 : n - 1;
        printf("     SM %3u-%-3u", first, last);
        for (uint32_t t = row * 16; t < (row + 1) * 16 && t < ntpc; t++) {
            uint32_t s0 = 2 * t;
            printf(" %c%c ", ld_smmask_has(&ci->plan.sms, s0) ? '#' : '.',
                   s0 + 1 < n ? (ld_smmask_has(&ci->plan.sms, s0 + 1) ? '#' : '.') : '-');
        }
        printf("\n");
    }
}

/* ---- offline classification of a LDSHIM_PROBE_DUMP file ---------------------------- */

/* Rows "sm,v0,v1,..." (clustered) or "sm,dD,v0,..." (anchored, [d][sm][chunk] order), read
 * through the file layer (a regular file of at most LD_DUMP_MAX_BYTES, lines of at most
 * LD_DUMP_MAX_LINE bytes) and parsed with every bound checked (ld_dump_parse). */
static int classify_file(const char *path, int nd, int json) {
    char why[320], shown[256];
    char *text = NULL;
    size_t len = 0;
    if (ld_file_read(path, LD_DUMP_MAX_BYTES, LD_DUMP_MAX_LINE, 0, &text, &len, why, sizeof why) != LD_FILE_OK) {
        fprintf(stderr, "ldshim-probe: --classify %s: %s\n", ld_file_printable(path, shown, sizeof shown), why);
        return 2;
    }
    ld_dump_t m;
    int prc = ld_dump_parse(text, len, &m, why, sizeof why);
    free(text);
    if (prc != 0) {
        fprintf(stderr, "ldshim-probe: --classify %s: not a LDSHIM_PROBE_DUMP matrix: %s\n",
                ld_file_printable(path, shown, sizeof shown), why);
        return 2;
    }
    uint32_t doms = m.ndomains, nsms = m.nsms, cols = m.cols;
    float *v = m.v;
    ld_probe_result_t r;
    memset(&r, 0, sizeof r);
    ld_classify_t c;
    int rc = doms ? ld_classify_anchored(v, doms, nsms, cols, r.physical, &c)
                  : ld_classify_clustered(v, nsms, cols, (uint32_t)nd, NULL, r.physical, &c);
    free(v);
    r.mode_used = doms ? LD_PROBE_ANCHORED : LD_PROBE_CLUSTERED;
    r.valid = rc == 0;
    r.attempts = 1;
    r.num_sms = nsms;
    r.num_domains = doms ? doms : (uint32_t)nd;
    r.near_cycles = c.near_cycles;
    r.far_cycles = c.far_cycles;
    r.separation = c.separation;
    snprintf(r.verdict, sizeof r.verdict, "%s", c.verdict);
    r.tpcs_moved = ld_balance_map(r.physical, nsms, r.num_domains, r.balanced);
    ld_topology_fill(&r.published, r.balanced, nsms, r.num_domains, r.valid, 1,
                     doms ? LDSHIM_SOURCE_ANCHORED : LDSHIM_SOURCE_CLUSTERED);
    if (json) {
        static char buf[16384];
        ld_probe_result_json(&r, buf, sizeof buf);
        size_t fl = ld_json_str(NULL, 0, path) + 1;
        char *file = malloc(fl);
        if (!file) { fprintf(stderr, "ldshim-probe: out of memory\n"); return 1; }
        ld_json_str(file, fl, path);
        printf("{\"file\":%s,\"probe\":%s}\n", file, buf);
        free(file);
    } else {
        print_picture(-1, "(offline)", path, &r, 0);
    }
    return rc < 0 ? 1 : 0;
}

/* ---- main -------------------------------------------------------------------------- */

static int parse_mode(const char *s, ld_probe_mode_t *m) {
    if (!strcmp(s, "auto")) *m = LD_PROBE_AUTO;
    else if (!strcmp(s, "anchored")) *m = LD_PROBE_ANCHORED;
    else if (!strcmp(s, "clustered")) *m = LD_PROBE_CLUSTERED;
    else if (!strcmp(s, "even")) *m = LD_PROBE_EVEN;
    else return -1;
    return 0;
}

typedef struct { int on; ld_compute_t req; ld_split_t split; uint32_t cap; } compute_req_t;

static int probe_one(const ld_driver_t *d, int ordinal, const ld_probe_opts_t *base, int json, int physical,
                     const compute_req_t *creq) {
    CUdevice dev;
    CUresult r = d->pfn_cuDeviceGet(&dev, ordinal);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "ldshim-probe: device %d: %s\n", ordinal, ld_cu_errname(r));
        return 1;
    }
    char name[256] = "unknown GPU";
    CUresult (*get_name)(char *, int, CUdevice) = NULL;
    if (d->pfn_cuGetProcAddress_v2 &&
        d->pfn_cuGetProcAddress_v2("cuDeviceGetName", (void **)&get_name, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT,
                               NULL) == CUDA_SUCCESS && get_name)
        get_name(name, sizeof name, dev);
    char uuid[48] = "GPU-?";
    CUuuid u;
    if (d->pfn_cuDeviceGetUuid_v2(&u, dev) == CUDA_SUCCESS) {
        const unsigned char *b = (const unsigned char *)u.bytes;
        snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                 b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    }
    CUcontext ctx;
    if ((r = d->pfn_cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS || (r = d->pfn_cuCtxPushCurrent_v2(ctx)) != CUDA_SUCCESS) {
        fprintf(stderr, "ldshim-probe: device %d: cannot create a context: %s\n", ordinal, ld_cu_errname(r));
        return 1;
    }
    ld_probe_opts_t o = *base;
    tool_mem_t mem;
    memset(&mem, 0, sizeof mem);
    mem.drv = d;
    mem.dev = dev;
    if (o.ndomains <= 0) {
        int nd = 0;
        if (d->pfn_cuDeviceGetAttribute(&nd, LD_CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_COUNT, dev) == CUDA_SUCCESS && nd >= 1)
            o.ndomains = nd;
        else
            o.ndomains = 2;
    }
    mem.native = native_probe(&mem);
    if (mem.native || o.mode == LD_PROBE_ANCHORED) {
        o.alloc_localized = mem_alloc;
        o.free_localized = mem_free;
        o.alloc_ctx = &mem;
    }
    if (o.mode == LD_PROBE_ANCHORED && !mem.native)
        LD_INFO(PROBE, "device %d: no per-domain memory placement; anchored mode measures ordinary memory", ordinal);
    ld_probe_result_t res;
    int rc = ld_probe_device(d, dev, &o, &res);
    ld_compute_info_t ci;
    memset(&ci, 0, sizeof ci);
    if (rc == 0 && creq->on)
        ld_compute_build_standalone(d, dev, &creq->req, creq->split, creq->cap, &res, o.cache_dir, o.use_cache, &ci);
    CUcontext popped;
    d->pfn_cuCtxPopCurrent_v2(&popped);
    d->pfn_cuDevicePrimaryCtxRelease_v2(dev);
    if (rc != 0) {
        fprintf(stderr, "ldshim-probe: device %d: %s\n", ordinal, res.verdict);
        return 1;
    }
    if (json) {
        static char buf[16384];
        ld_probe_result_json(&res, buf, sizeof buf);
        char jname[sizeof name * 6 + 3];
        ld_json_str(jname, sizeof jname, name);
        printf("{\"device\":%d,\"name\":%s,\"uuid\":\"%s\",\"memory\":\"%s\",\"probe\":%s", ordinal, jname, uuid,
               mem.native ? "native" : o.alloc_localized ? "ordinary" : "none", buf);
        if (creq->on) {
            printf(",\"compute\":{\"requested\":\"%s\",\"applied\":%s,\"sm_count\":%u,\"sms\":[", ci.request,
                   ci.applied ? "true" : "false", ci.applied ? ci.plan.count : 0);
            int k = 0;
            for (uint32_t sm = 0; ci.applied && sm < LDSHIM_MAX_SMS; sm++)
                if (ld_smmask_has(&ci.plan.sms, sm)) printf("%s%u", k++ ? "," : "", sm);
            char jreason[sizeof ci.reason * 6 + 3];
            ld_json_str(jreason, sizeof jreason, ci.reason);
            printf("],\"verified\":%s,\"reason\":%s}", ci.verified ? "true" : "false", jreason);
        }
        printf("}\n");
    } else {
        print_picture(ordinal, name, uuid, &res, physical);
        if (creq->on) print_compute(&res, &ci);
        if (o.alloc_localized && !mem.native)
            printf("  note     anchored mode measured ordinary (interleaved) memory: no separation is expected\n");
    }
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    static const struct option longopts[] = {
        { "mode", required_argument, NULL, 'm' }, { "map", required_argument, NULL, 'p' },
        { "device", required_argument, NULL, 'd' }, { "domains", required_argument, NULL, 'n' },
        { "force", no_argument, NULL, 'f' }, { "no-cache", no_argument, NULL, 'N' },
        { "cache-dir", required_argument, NULL, 'c' }, { "json", no_argument, NULL, 'j' },
        { "classify", required_argument, NULL, 'C' }, { "help", no_argument, NULL, 'h' },
        { "compute", required_argument, NULL, 'K' }, { "compute-split", required_argument, NULL, 'S' },
        { "compute-sms", required_argument, NULL, 'Q' }, { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 } };
    ld_probe_opts_t o;
    memset(&o, 0, sizeof o);
    o.mode = LD_PROBE_AUTO;
    o.map = LD_MAP_BALANCED;
    o.use_cache = 1;
    int json = 0, only = -1, c;
    compute_req_t creq;
    memset(&creq, 0, sizeof creq);
    const char *classify = NULL;
    uint64_t num;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (parse_mode(optarg, &o.mode)) {
                fprintf(stderr, "ldshim-probe: --mode %s: expected auto, anchored, clustered or even\n", shown(optarg));
                return 2;
            }
            break;
        case 'p':
            if (!strcmp(optarg, "balanced")) o.map = LD_MAP_BALANCED;
            else if (!strcmp(optarg, "physical")) o.map = LD_MAP_PHYSICAL;
            else { fprintf(stderr, "ldshim-probe: --map %s: expected balanced or physical\n", shown(optarg)); return 2; }
            break;
        case 'd':
            if (ld_parse_uint(optarg, 0, 65535, &num) != 0) {
                fprintf(stderr, "ldshim-probe: --device %s: expected a device number 0..65535\n", shown(optarg));
                return 2;
            }
            only = (int)num;
            break;
        case 'n':
            if (ld_parse_uint(optarg, 1, LDSHIM_MAX_DOMAINS, &num) != 0) {
                fprintf(stderr, "ldshim-probe: --domains %s: expected 1..%d\n", shown(optarg), LDSHIM_MAX_DOMAINS);
                return 2;
            }
            o.ndomains = (int)num;
            break;
        case 'f': o.force = 1; break;
        case 'N': o.use_cache = 0; break;
        case 'c':
            if (!*optarg || strlen(optarg) > LD_OPT_PATH_MAX) {
                fprintf(stderr, "ldshim-probe: --cache-dir: expected a directory path of 1..%d bytes\n", LD_OPT_PATH_MAX);
                return 2;
            }
            o.cache_dir = optarg;
            /* An existing cache directory must be ours and writable by nobody else (a link,
             * a FIFO, a file or another user's directory is refused now, not at the write);
             * an absent one is created 0700 when a result is stored. */
            {
                char why[300];
                int dfd = ld_file_open_dir(optarg, LD_FILE_EXISTING, why, sizeof why);
                if (dfd < 0 && errno != ENOENT) {
                    fprintf(stderr, "ldshim-probe: --cache-dir %s: %s\n", shown(optarg), why);
                    return 2;
                }
                if (dfd >= 0) close(dfd);
            }
            break;
        case 'j': json = 1; break;
        case 'C':
            if (!*optarg || strlen(optarg) > LD_OPT_PATH_MAX) {
                fprintf(stderr, "ldshim-probe: --classify: expected a file path of 1..%d bytes\n", LD_OPT_PATH_MAX);
                return 2;
            }
            classify = optarg;
            break;
        case 'K': {
            size_t bad;
            char why[160];
            if (ld_compute_scan(optarg, strlen(optarg), &creq.req, &bad, why, sizeof why) != 0 ||
                creq.req.kind == LD_COMPUTE_ALL) {
                fprintf(stderr, "ldshim-probe: --compute %s: %s\n", shown(optarg),
                        creq.req.kind == LD_COMPUTE_ALL ? "expected domain:N or spread:K" : why);
                return 2;
            }
            creq.on = 1;
            break;
        }
        case 'S': {
            int m = ld_split_parse(optarg);
            if (m < 0) { fprintf(stderr, "ldshim-probe: --compute-split %s: expected aligned, fine or backfill\n", shown(optarg)); return 2; }
            creq.split = (ld_split_t)m;
            break;
        }
        case 'Q':
            if (ld_parse_uint(optarg, 0, LDSHIM_COMPUTE_MAX_SMS, &num) != 0) {
                fprintf(stderr, "ldshim-probe: --compute-sms %s: expected 0..%d\n", shown(optarg), LDSHIM_COMPUTE_MAX_SMS);
                return 2;
            }
            creq.cap = (uint32_t)num;
            break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("ldshim-probe %s (git %s)\n", LDSHIM_BUILD_VERSION, LDSHIM_BUILD_REVISION); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) { fprintf(stderr, "ldshim-probe: unexpected argument '%s'\n", argv[optind]); usage(stderr); return 2; }
    ld_log_init();
    for (int i = 0; i < LD_OPT_COUNT; i++)   /* values options.c refused whole: one line each */
        if (ld_opt_refused((ld_opt_t)i)) LD_WARN(CONFIG, "%s %s; ignored", ld_option((ld_opt_t)i)->name, ld_opt_refused((ld_opt_t)i));
    if (classify) return classify_file(classify, o.ndomains > 0 ? o.ndomains : 2, json);
    const ld_driver_t *d = ld_driver();
    if (!d) {
        fprintf(stderr, "ldshim-probe: cannot load the NVIDIA driver library (libcuda.so.1); is a driver installed?\n");
        return 3;
    }
    CUresult r = d->pfn_cuInit(0);
    int count = 0;
    if (r == CUDA_SUCCESS) r = d->pfn_cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS || count == 0) {
        fprintf(stderr, "ldshim-probe: no usable GPU: %s\n", r != CUDA_SUCCESS ? ld_cu_errname(r) : "no CUDA devices");
        return 3;
    }
    if (only >= count) { fprintf(stderr, "ldshim-probe: --device %d: only %d device%s visible\n", only, count, count == 1 ? "" : "s"); return 2; }
    int failed = 0;
    for (int i = 0; i < count; i++)
        if (only < 0 || i == only) {
            failed |= probe_one(d, i, &o, json, o.map == LD_MAP_PHYSICAL, &creq);
            if (!json && only < 0 && i + 1 < count) printf("\n");
        }
    return failed ? 1 : 0;
}
