// topo_check — does every SM see its own entry of the published map?
//
//   topo_check [--fatbin FILE] [--expect-shim | --expect-none] [--device N]
//
// Reads the map from the device through two modules: the program's own (loaded by the
// runtime, lazily) and FILE (loaded with cuModuleLoadData). Each CTA records what its SM
// read at sm_domain[%smid]. With --expect-shim every SM must read the entry the shim's host
// API (ldshim_get_topology, looked up with dlsym) reports for it; with --expect-none the
// symbol must still be zero (magic 0) and the helper must give the even map.
// Prints "map <module> <digits>" lines (for cross-run comparison) and "RESULT ok|FAIL".
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "tests/gpu/probe/topo_kernel.cuh"

typedef int (*get_topology_fn)(int, ldshim_topology_t *, size_t);
static int failures = 0;

#define FAIL(...) do { printf("FAIL: " __VA_ARGS__); printf("\n"); failures++; } while (0)

static bool read_file(const char *path, std::vector<char> &buf) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf.resize(n > 0 ? (size_t)n : 0);
    bool ok = n > 0 && fread(buf.data(), 1, (size_t)n, f) == (size_t)n;
    fclose(f);
    return ok;
}

// Launch until every SM has run the kernel at least once (or give up after 50 launches).
template <typename Launch>
static int cover(int nsms, topo_rec *dev_recs, std::vector<topo_rec> &recs, Launch launch) {
    int launches = 0;
    for (; launches < 50; launches++) {
        if (!launch()) return -1;
        if (cudaMemcpy(recs.data(), dev_recs, recs.size() * sizeof(topo_rec), cudaMemcpyDeviceToHost) != cudaSuccess)
            return -1;
        int missing = 0;
        for (int s = 0; s < nsms; s++) missing += recs[s].count == 0;
        if (!missing) return launches + 1;
    }
    return launches;
}

static void check(const char *what, int nsms, const std::vector<topo_rec> &recs, bool expect_shim,
                  const ldshim_topology_t *host) {
    int seen = 0, wrong = 0, first_wrong = -1;
    char digits[LDSHIM_MAX_SMS + 1] = {0};
    for (int s = 0; s < nsms && s < LDSHIM_MAX_SMS; s++) {
        const topo_rec &r = recs[s];
        if (!r.count) { digits[s] = '?'; continue; }
        seen++;
        digits[s] = (char)('0' + (r.entry < 10 ? r.entry : 9));
        bool ok;
        if (expect_shim)
            ok = r.magic == LDSHIM_TOPOLOGY_MAGIC && r.version == LDSHIM_TOPOLOGY_VERSION && (int)r.num_sms == nsms &&
                 r.entry == host->sm_domain[s] && r.helper == r.entry && r.flags == host->flags &&
                 r.num_domains == host->num_domains;
        else
            ok = r.magic == 0 && r.entry == 0 && r.helper == ldshim_even_domain((unsigned)s, 2);
        if (!ok) { wrong++; if (first_wrong < 0) first_wrong = s; }
    }
    printf("map %s %s\n", what, digits);
    printf("%s: %d/%d SMs reported, %d disagree%s\n", what, seen, nsms, wrong,
           expect_shim ? " with ldshim_get_topology" : " with 'no shim' (magic 0, even helper)");
    if (seen != nsms) FAIL("%s: %d SMs never ran the kernel", what, nsms - seen);
    if (wrong) {
        const topo_rec &r = recs[first_wrong];
        FAIL("%s: SM %d read magic 0x%x version %u num_sms %u domains %u flags 0x%x entry %u helper %u; host says entry %u flags 0x%x",
             what, first_wrong, r.magic, r.version, r.num_sms, r.num_domains, r.flags, r.entry, r.helper,
             host ? host->sm_domain[first_wrong] : 0, host ? host->flags : 0);
    }
}

int main(int argc, char **argv) {
    const char *fatbin = NULL;
    int expect = -1, device = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--fatbin") && i + 1 < argc) fatbin = argv[++i];
        else if (!strcmp(argv[i], "--expect-shim")) expect = 1;
        else if (!strcmp(argv[i], "--expect-none")) expect = 0;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: topo_check [--fatbin FILE] [--expect-shim | --expect-none] [--device N]\n");
            return 0;
        } else { fprintf(stderr, "topo_check: unknown argument %s (try --help)\n", argv[i]); return 2; }
    }
    if (expect < 0) { fprintf(stderr, "topo_check: give --expect-shim or --expect-none\n"); return 2; }
    if (cudaSetDevice(device) != cudaSuccess || cudaFree(0) != cudaSuccess) {
        printf("FAIL: no usable GPU %d: %s\nRESULT FAIL\n", device, cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    int nsms = 0, smem = 0;
    cudaDeviceGetAttribute(&nsms, cudaDevAttrMultiProcessorCount, device);
    cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);

    ldshim_topology_t host;
    memset(&host, 0, sizeof host);
    get_topology_fn get = (get_topology_fn)dlsym(RTLD_DEFAULT, "ldshim_get_topology");
    if (expect == 1) {
        if (!get) FAIL("ldshim_get_topology not found: is libldshim.so preloaded?");
        else if (get(device, &host, sizeof host) != 0) FAIL("ldshim_get_topology(%d) reports no published map", device);
        else
            printf("host: magic 0x%x num_sms %u domains %u flags 0x%x per-domain %u/%u\n", host.magic, host.num_sms,
                   host.num_domains, host.flags, host.sms_per_domain[0], host.sms_per_domain[1]);
    } else if (get) {
        printf("note: ldshim_get_topology is present although --expect-none was given\n");
    }

    topo_rec *recs_dev = NULL;
    std::vector<topo_rec> recs(nsms > 0 ? nsms : 1);
    cudaMalloc(&recs_dev, recs.size() * sizeof(topo_rec));

    // 1. The program's own module, loaded by the runtime (lazily, at the first launch).
    cudaMemset(recs_dev, 0, recs.size() * sizeof(topo_rec));
    cudaFuncSetAttribute(topo_read, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    int n = cover(nsms, recs_dev, recs, [&] {
        topo_read<<<nsms, 32, smem>>>(recs_dev, (unsigned)nsms);
        cudaError_t e = cudaDeviceSynchronize();
        if (e != cudaSuccess) FAIL("runtime launch: %s", cudaGetErrorString(e));
        return e == cudaSuccess;
    });
    if (n > 0) check("runtime-module", nsms, recs, expect == 1, &host);

    // 2. A fatbin loaded through the driver API.
    if (fatbin) {
        std::vector<char> img;
        CUmodule mod = NULL;
        CUfunction fn = NULL;
        CUresult r;
        if (!read_file(fatbin, img)) FAIL("cannot read %s", fatbin);
        else if ((r = cuModuleLoadData(&mod, img.data())) != CUDA_SUCCESS) FAIL("cuModuleLoadData(%s): error %d", fatbin, (int)r);
        else if ((r = cuModuleGetFunction(&fn, mod, "topo_read")) != CUDA_SUCCESS) FAIL("cuModuleGetFunction: error %d", (int)r);
        else if ((r = cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)) != CUDA_SUCCESS)
            FAIL("cuFuncSetAttribute: error %d", (int)r);
        else {
            cudaMemset(recs_dev, 0, recs.size() * sizeof(topo_rec));
            unsigned max = (unsigned)nsms;
            void *args[] = { &recs_dev, &max };
            n = cover(nsms, recs_dev, recs, [&] {
                CUresult lr = cuLaunchKernel(fn, nsms, 1, 1, 32, 1, 1, smem, NULL, args, NULL);
                if (lr == CUDA_SUCCESS) lr = cuCtxSynchronize();
                if (lr != CUDA_SUCCESS) FAIL("driver launch: error %d", (int)lr);
                return lr == CUDA_SUCCESS;
            });
            if (n > 0) check("driver-module", nsms, recs, expect == 1, &host);
        }
        if (mod) cuModuleUnload(mod);
    }
    cudaFree(recs_dev);
    printf("RESULT %s\n", failures ? "FAIL" : "ok");
    return failures ? 1 : 0;
}
