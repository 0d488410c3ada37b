// one_side.cu — why 56 SMs of one Hopper L2 side run slower than 56 SMs spread over both
// (issue 43). Memory and latency microbenchmarks on the SMs a process may use, in two ways:
//
//   * under a compute binding (LD_PRELOAD=libldshim.so, LDSHIM_STATE=compute-only or
//     sm-control): config "bound", the kernels on whatever SMs the green context gives;
//   * unbound, with an SM mask (--map from a bound run): every kernel's CTAs on SMs outside
//     the mask exit at once and the rest take the work from a shared counter, so one process
//     compares SM sets chosen by L2 side and by GPC at the same SM count — the binding's own
//     effect (a green-context artefact) drops out.
//
//   one_side [--map DIGITS] [--n N] [--quick]
//     --map   the SM->side map (one digit per SM id, as a bound run prints on its "map" line);
//             without it the shim's published topology is used, and without that no masks.
//     --n     SMs per masked config (default: the bound count of a bound run, else 56).
//
// Prints one line per figure: "R\t<config>\t<case>\t<metric>\t<value>" (run.sh tabulates),
// plus "map", "sms", "setlist", "gpc" lines that describe the SM sets. GPCs are learned with thread-block
// clusters (a cluster's CTAs always share a GPC): union of the SMs of many cluster launches,
// some beside a blocker kernel that occupies a random half of the SMs so placements vary.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/ldshim_topology.h"

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "one_side: %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
    exit(1); } } while (0)

static const int kMaxSms = LDSHIM_MAX_SMS;
static const int kStreamThreads = 512;
static const int kStreamCtasPerSm = 4;   // 2048 threads: a full SM where registers allow
static const int kLineWords = 32;        // 128-byte L2 line of uint32
static const int kLatHops = 2048;        // per-hop latencies kept per SM (shared memory)

__device__ __forceinline__ unsigned smid() {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}
__device__ __forceinline__ unsigned long long gtimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// ---- streaming: read, write, copy over a buffer, work handed out in chunks by a counter ----
// clk[0..1]: clock64 and globaltimer spent by the CTA that took chunk 0 (it runs to about the
// end), for the SM clock under load.
template <int MODE>  // 0 read, 1 write, 2 copy
__global__ void __launch_bounds__(kStreamThreads)
stream_k(const uint4 *src, uint4 *dst, unsigned long long nchunks, unsigned chunk_vec,
         unsigned long long total, unsigned long long *counter, const unsigned char *mask,
         unsigned long long *clk, unsigned *sink) {
    if (!mask[smid()]) return;
    __shared__ unsigned long long s_c;
    unsigned long long c0 = 0, t0 = 0;
    bool first = false;
    uint32_t acc = 0;
    const uint4 fill = make_uint4(threadIdx.x, 1, 2, 3);
    for (;;) {
        if (threadIdx.x == 0) s_c = atomicAdd(counter, 1ull);
        __syncthreads();
        unsigned long long c = s_c;
        __syncthreads();
        if (c >= total) break;
        if (c == 0) { first = true; c0 = clock64(); t0 = gtimer(); }
        size_t base = (size_t)(c % nchunks) * chunk_vec;
        const uint4 *s = src + base;
        uint4 *d = dst + base;
        for (unsigned i = threadIdx.x; i < chunk_vec; i += 4 * kStreamThreads) {
            uint4 v[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                unsigned j = i + u * kStreamThreads;
                if (MODE != 1 && j < chunk_vec) v[u] = __ldcg(s + j);
                else v[u] = fill;
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                unsigned j = i + u * kStreamThreads;
                if (j >= chunk_vec) continue;
                if (MODE == 0) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
                else d[j] = v[u];
            }
        }
    }
    if (acc == 0x9e3779b9u) *sink = acc;  // keeps the reads
    if (first && threadIdx.x == 0) { clk[0] = clock64() - c0; clk[1] = gtimer() - t0; }
}

// ---- dependent pointer chase: one thread on each SM of the mask, one shared ring ----
// The ring is a random cyclic order of the buffer's 128-byte lines; word 0 of each line holds
// the next line's index. Loads bypass L1 (ld.global.cg): what is timed is L2 or HBM.
__device__ __forceinline__ uint32_t perm_hash(uint32_t x, uint32_t bits, uint32_t key) {
    uint32_t m = bits >= 32 ? 0xffffffffu : ((1u << bits) - 1);
    uint32_t h = bits / 2 + 1;
    x = (x * 0x9E3779B1u + key) & m;   // odd multiplier: a bijection mod 2^bits
    x ^= x >> h;
    x = (x * 0x85EBCA77u) & m;
    x ^= x >> h;
    x = (x * 0xC2B2AE3Du + (key >> 7)) & m;
    x ^= x >> h;
    return x;
}
__device__ __forceinline__ uint32_t perm(uint32_t j, uint32_t n, uint32_t bits, uint32_t key) {
    uint32_t x = j;
    do { x = perm_hash(x, bits, key); } while (x >= n);   // cycle walking: a bijection on [0, n)
    return x;
}
__global__ void ring_init(uint32_t *buf, uint32_t n, uint32_t bits, uint32_t key) {
    for (uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x)
        buf[(size_t)perm(j, n, bits, key) * kLineWords] = perm(j + 1 == n ? 0 : j + 1, n, bits, key);
}

// claim[sm] picks one CTA per SM; out[sm] = {ns, cycles} of `hops` hops; with lat != NULL the
// first kLatHops per-hop cycle counts of that SM too.
// Each chasing SM starts n/nactive positions after the previous one along the ring, so with
// n >= nactive * hops no SM walks into lines another SM has just fetched.
__global__ void chase_k(const uint32_t *buf, uint32_t n, uint32_t bits, uint32_t key, int hops,
                        const unsigned char *mask, unsigned *claim, unsigned long long *rank,
                        unsigned nactive, unsigned long long *out, unsigned short *lat) {
    __shared__ unsigned short s_lat[kLatHops];
    __shared__ volatile uint32_t s_dep[32];  // volatile: the store that waits stays
    unsigned sm = smid();
    if (threadIdx.x != 0 || !mask[sm] || atomicCAS(claim + sm, 0u, 1u) != 0u) return;
    unsigned long long r = atomicAdd(rank, 1ull) % nactive;
    uint32_t idx = perm((uint32_t)((r * n) / nactive), n, bits, key);
    unsigned long long c0 = clock64(), t0 = gtimer();
    if (lat) {
        for (int h = 0; h < hops; h++) {
            long long a = clock64();
            idx = __ldcg(buf + (size_t)idx * kLineWords);
            s_dep[h & 31] = idx;  // waits for the load before the second clock read
            long long b = clock64();
            if (h < kLatHops) s_lat[h] = (unsigned short)min(b - a, 65535ll);
        }
    } else {
        for (int h = 0; h < hops; h++) idx = __ldcg(buf + (size_t)idx * kLineWords);
    }
    unsigned long long c1 = clock64(), t1 = gtimer();
    out[2 * sm] = t1 - t0;
    out[2 * sm + 1] = c1 - c0 + (idx == 0xffffffffu);  // idx kept live
    if (lat)
        for (int h = 0; h < kLatHops && h < hops; h++) lat[(size_t)sm * kLatHops + h] = s_lat[h];
}

// ---- small kernels: a chain of tiny dependent launches in a CUDA graph ----
__global__ void tiny_k(const float4 *a, float4 *b, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float4 v = a[i]; b[i] = make_float4(v.x * 1.0001f + 1.f, v.y, v.z, v.w); }
}

// ---- SM census and GPCs ----
__global__ void where_k(unsigned *seen) { if (threadIdx.x == 0) atomicOr(seen + smid(), 1u); }
__global__ void blocker_k(const unsigned char *busy, unsigned long long ns) {
    extern __shared__ unsigned char pad[];
    if (threadIdx.x != 0 || !busy[smid()]) return;
    unsigned long long t0 = gtimer();
    while (gtimer() - t0 < ns) pad[0] = 1;
}
__global__ void cluster_k(unsigned *sm_of_cta) {
    extern __shared__ unsigned char pad[];
    if (threadIdx.x == 0) { pad[0] = 1; sm_of_cta[blockIdx.x] = smid(); }
}

// ---------------------------------------------------------------------------------------
struct Ctx {
    int dev_sms = 0;
    unsigned char *d_mask = nullptr;
    unsigned long long *d_counter = nullptr, *d_clk = nullptr;
    unsigned *d_sink = nullptr, *d_claim = nullptr;
    unsigned long long *d_out = nullptr;
    unsigned short *d_lat = nullptr;
    uint4 *big_a = nullptr, *big_b = nullptr;
    size_t big_bytes = 0;
    cudaEvent_t e0, e1;
    bool quick = false;
};

static double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    size_t k = v.size() / 2;
    return v.size() % 2 ? v[k] : 0.5 * (v[k - 1] + v[k]);
}

static void emit(const char *config, const char *cs, const char *metric, double v) {
    printf("R\t%s\t%s\t%s\t%.6g\n", config, cs, metric, v);
}

// One streaming measurement: bytes moved per second (median of reps) and the SM clock.
static void stream_case(Ctx &c, const char *config, const char *name, int mode, size_t bytes,
                        size_t moved_per_rep, size_t chunk_bytes, int reps) {
    unsigned long long nchunks = bytes / chunk_bytes;
    unsigned long long total = moved_per_rep / chunk_bytes;
    unsigned chunk_vec = (unsigned)(chunk_bytes / sizeof(uint4));
    uint4 *src = c.big_a, *dst = mode == 2 ? c.big_b : c.big_a;
    std::vector<double> gbs, mhz;
    for (int r = -1; r < reps; r++) {  // r = -1 warms (and fills L2 for resident sets)
        CHECK(cudaMemsetAsync(c.d_counter, 0, sizeof(unsigned long long)));
        CHECK(cudaEventRecord(c.e0));
        int grid = c.dev_sms * kStreamCtasPerSm;
        if (mode == 0) stream_k<0><<<grid, kStreamThreads>>>(src, dst, nchunks, chunk_vec, total, c.d_counter, c.d_mask, c.d_clk, c.d_sink);
        else if (mode == 1) stream_k<1><<<grid, kStreamThreads>>>(src, dst, nchunks, chunk_vec, total, c.d_counter, c.d_mask, c.d_clk, c.d_sink);
        else stream_k<2><<<grid, kStreamThreads>>>(src, dst, nchunks, chunk_vec, total, c.d_counter, c.d_mask, c.d_clk, c.d_sink);
        CHECK(cudaGetLastError());
        CHECK(cudaEventRecord(c.e1));
        CHECK(cudaEventSynchronize(c.e1));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, c.e0, c.e1));
        unsigned long long clk[2];
        CHECK(cudaMemcpy(clk, c.d_clk, sizeof clk, cudaMemcpyDeviceToHost));
        if (r < 0) continue;
        double moved = (double)total * chunk_bytes * (mode == 2 ? 2 : 1);
        gbs.push_back(moved / (ms * 1e-3) / 1e9);
        if (clk[1]) mhz.push_back((double)clk[0] / (double)clk[1] * 1e3);
    }
    emit(config, name, "GB/s", median(gbs));
    emit(config, name, "MHz", median(mhz));
}

// Chase over `bytes`: the ring built, warmed by a streaming read from the same SMs, then
// `hops` hops on every SM of the mask at once. Emits ns/hop (median over SMs, and per side).
static void chase_case(Ctx &c, const char *config, size_t bytes, int hops, bool lat,
                       const std::vector<int> &side, unsigned nactive) {
    uint32_t n = (uint32_t)(bytes / (kLineWords * 4));
    uint32_t bits = 1;
    while ((1ull << bits) < n) bits++;
    uint32_t key = 0x1234567u ^ (uint32_t)bytes;
    uint32_t *buf = (uint32_t *)c.big_b;
    ring_init<<<1024, 256>>>(buf, n, bits, key);
    CHECK(cudaGetLastError());
    // warm: read the ring's bytes twice from the masked SMs
    CHECK(cudaMemsetAsync(c.d_counter, 0, sizeof(unsigned long long)));
    size_t chunk = bytes >= (1u << 20) ? 16384 : 4096;
    stream_k<0><<<c.dev_sms * kStreamCtasPerSm, kStreamThreads>>>((const uint4 *)buf, nullptr, bytes / chunk,
        (unsigned)(chunk / 16), 2 * (bytes / chunk), c.d_counter, c.d_mask, c.d_clk, c.d_sink);
    CHECK(cudaGetLastError());
    CHECK(cudaMemsetAsync(c.d_claim, 0, kMaxSms * sizeof(unsigned)));
    CHECK(cudaMemsetAsync(c.d_out, 0, 2 * kMaxSms * sizeof(unsigned long long)));
    CHECK(cudaMemsetAsync(c.d_counter, 0, sizeof(unsigned long long)));
    chase_k<<<c.dev_sms * 4, 32>>>(buf, n, bits, key, hops, c.d_mask, c.d_claim, c.d_counter,
                                   nactive ? nactive : 1, c.d_out, lat ? c.d_lat : nullptr);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::vector<unsigned long long> out(2 * kMaxSms);
    CHECK(cudaMemcpy(out.data(), c.d_out, out.size() * sizeof out[0], cudaMemcpyDeviceToHost));
    std::vector<double> ns_all, ns_s[2], cyc;
    for (int s = 0; s < kMaxSms; s++) {
        if (!out[2 * s]) continue;
        double ns = (double)out[2 * s] / hops;
        ns_all.push_back(ns);
        cyc.push_back((double)out[2 * s + 1] / hops);
        if (s < (int)side.size() && side[s] >= 0 && side[s] < 2) ns_s[side[s]].push_back(ns);
    }
    char name[64];
    snprintf(name, sizeof name, "chase_%gMiB", bytes / 1048576.0);
    emit(config, name, "ns/hop", median(ns_all));
    emit(config, name, "cyc/hop", median(cyc));
    emit(config, name, "chasing_sms", (double)ns_all.size());
    if (!ns_s[0].empty()) emit(config, name, "ns/hop_side0", median(ns_s[0]));
    if (!ns_s[1].empty()) emit(config, name, "ns/hop_side1", median(ns_s[1]));
    if (!lat) return;
    // Per-hop cycles: each line is near or far for a given SM (about half each), so an SM's
    // 20th and 80th percentiles are its near and far L2 hit times.
    std::vector<unsigned short> l((size_t)kMaxSms * kLatHops);
    CHECK(cudaMemcpy(l.data(), c.d_lat, l.size() * sizeof l[0], cudaMemcpyDeviceToHost));
    std::vector<double> p20, p80;
    for (int s = 0; s < kMaxSms; s++) {
        if (!out[2 * s]) continue;
        size_t k = (size_t)std::min(hops, kLatHops);
        std::vector<unsigned short> v(l.begin() + (size_t)s * kLatHops, l.begin() + (size_t)s * kLatHops + k);
        std::sort(v.begin(), v.end());
        p20.push_back(v[v.size() / 5]);
        p80.push_back(v[v.size() * 4 / 5]);
    }
    emit(config, name, "near_cyc_p20", median(p20));
    emit(config, name, "far_cyc_p80", median(p80));
}

// A graph of `len` dependent tiny kernels of `grid` CTAs x 128 threads: us per kernel.
static void tiny_case(Ctx &c, const char *config, int grid, int len) {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned n = (unsigned)grid * 128;
    float4 *a = (float4 *)c.big_a, *b = (float4 *)c.big_b;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < len; i++) {
        if (i & 1) tiny_k<<<grid, 128, 0, s>>>(b, a, n);
        else tiny_k<<<grid, 128, 0, s>>>(a, b, n);
    }
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphInstantiate(&ge, g, 0));
    std::vector<double> us;
    for (int r = -2; r < (c.quick ? 3 : 15); r++) {
        CHECK(cudaEventRecord(c.e0, s));
        CHECK(cudaGraphLaunch(ge, s));
        CHECK(cudaEventRecord(c.e1, s));
        CHECK(cudaEventSynchronize(c.e1));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, c.e0, c.e1));
        if (r >= 0) us.push_back(ms * 1e3 / len);
    }
    char name[64];
    snprintf(name, sizeof name, "tiny_chain_grid%d", grid);
    emit(config, name, "us/kernel", median(us));
    CHECK(cudaGraphExecDestroy(ge));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaStreamDestroy(s));
}

// Which SMs this process's kernels reach.
static std::vector<int> census(Ctx &c) {
    unsigned *d;
    CHECK(cudaMalloc(&d, kMaxSms * sizeof(unsigned)));
    CHECK(cudaMemset(d, 0, kMaxSms * sizeof(unsigned)));
    for (int i = 0; i < 20; i++) where_k<<<c.dev_sms * 8, 64>>>(d);
    CHECK(cudaGetLastError());
    std::vector<unsigned> h(kMaxSms);
    CHECK(cudaMemcpy(h.data(), d, kMaxSms * sizeof(unsigned), cudaMemcpyDeviceToHost));
    CHECK(cudaFree(d));
    std::vector<int> sms;
    for (int s = 0; s < kMaxSms; s++) if (h[s]) sms.push_back(s);
    return sms;
}

static int uf_find(std::vector<int> &p, int x) { while (p[x] != x) x = p[x] = p[p[x]]; return x; }

// GPCs of the reachable SMs: components of "ran in one cluster". Returns gpc id per SM (-1:
// never seen). Errors (a driver without clusters) give an empty vector.
static std::vector<int> learn_gpcs(Ctx &c) {
    std::vector<int> parent(kMaxSms);
    for (int i = 0; i < kMaxSms; i++) parent[i] = i;
    std::vector<char> seen(kMaxSms, 0);
    const int smem = 120 * 1024;  // one CTA per SM
    // Clusters of 16 are beyond the portable 8; the driver refuses them where a GPC is smaller.
    if (cudaFuncSetAttribute(cluster_k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess)
        cudaGetLastError();
    if (cudaFuncSetAttribute(cluster_k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess ||
        cudaFuncSetAttribute(blocker_k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) {
        cudaGetLastError();
        return {};
    }
    unsigned *d_sm;
    unsigned char *d_busy;
    CHECK(cudaMalloc(&d_sm, 4096 * sizeof(unsigned)));
    CHECK(cudaMalloc(&d_busy, kMaxSms));
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    uint32_t rng = 12345;
    int ok = 0;
    for (int round = 0; round < 128; round++) {
        int cs = 2 << (round % 4);  // cluster sizes 2, 4, 8, 16
        int nclusters = std::max(1, c.dev_sms / cs - (round / 4) % 4);
        bool block = round % 2 == 1;
        if (block) {
            unsigned char busy[kMaxSms];
            for (int i = 0; i < kMaxSms; i++) { rng = rng * 1664525u + 1013904223u; busy[i] = (rng >> 16) & 1; }
            CHECK(cudaMemcpy(d_busy, busy, kMaxSms, cudaMemcpyHostToDevice));
            blocker_k<<<c.dev_sms, 32, smem, s1>>>(d_busy, 1000000ull);
            CHECK(cudaGetLastError());
            usleep(200);  // the blockers resident first: the clusters must go around them
        }
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = cs;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.gridDim = dim3(cs * nclusters);
        cfg.blockDim = dim3(32);
        cfg.dynamicSmemBytes = smem;
        cfg.stream = s2;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        if (cudaLaunchKernelEx(&cfg, cluster_k, d_sm) != cudaSuccess) { cudaGetLastError(); continue; }
        CHECK(cudaDeviceSynchronize());
        std::vector<unsigned> h(cs * nclusters);
        CHECK(cudaMemcpy(h.data(), d_sm, h.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
        for (int k = 0; k < nclusters; k++)
            for (int j = 0; j < cs; j++) {
                unsigned a = h[k * cs], b = h[k * cs + j];
                if (a >= (unsigned)kMaxSms || b >= (unsigned)kMaxSms) continue;
                seen[a] = seen[b] = 1;
                parent[uf_find(parent, a)] = uf_find(parent, b);
            }
        ok++;
    }
    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaStreamDestroy(s2));
    CHECK(cudaFree(d_sm));
    CHECK(cudaFree(d_busy));
    if (!ok) return {};
    std::vector<int> root_id(kMaxSms, -1), gpc(kMaxSms, -1);
    int next = 0;
    for (int s = 0; s < kMaxSms; s++) {
        if (!seen[s]) continue;
        int r = uf_find(parent, s);
        if (root_id[r] < 0) root_id[r] = next++;
        gpc[s] = root_id[r];
    }
    return gpc;
}

// N SMs of one side: "pack" fills the side's largest GPCs first, "spread" takes one SM from
// each of the side's GPCs in turn.
static std::vector<int> pick(const std::vector<int> &sms, const std::vector<int> &side,
                             const std::vector<int> &gpc, int want_side, int n, bool spread) {
    std::vector<std::vector<int>> by;  // SMs of each GPC on this side
    std::vector<int> ids;
    for (int s : sms) {
        if (side[s] != want_side) continue;
        int g = gpc.empty() ? 0 : gpc[s];
        if (g < 0) g = 1000 + s;  // an SM no cluster reached: a GPC of its own
        auto it = std::find(ids.begin(), ids.end(), g);
        if (it == ids.end()) { ids.push_back(g); by.push_back({s}); }
        else by[it - ids.begin()].push_back(s);
    }
    std::sort(by.begin(), by.end(), [](const std::vector<int> &a, const std::vector<int> &b) {
        return a.size() != b.size() ? a.size() > b.size() : a[0] < b[0]; });
    std::vector<int> out;
    if (!spread) {
        for (auto &g : by) for (int s : g) if ((int)out.size() < n) out.push_back(s);
    } else {
        for (size_t k = 0; (int)out.size() < n; k++) {
            bool any = false;
            for (auto &g : by) if (k < g.size() && (int)out.size() < n) { out.push_back(g[k]); any = true; }
            if (!any) break;
        }
    }
    return out;
}

static void describe(const char *config, const std::vector<int> &set, const std::vector<int> &side,
                     const std::vector<int> &gpc) {
    int ns[3] = {0, 0, 0};
    std::vector<int> gs;
    for (int s : set) {
        ns[side.empty() || side[s] < 0 ? 2 : side[s]]++;
        if (!gpc.empty() && gpc[s] >= 0 && std::find(gs.begin(), gs.end(), gpc[s]) == gs.end()) gs.push_back(gpc[s]);
    }
    printf("sms\t%s\t%zu SMs: side0 %d, side1 %d, unknown %d; GPCs %zu\n", config, set.size(), ns[0], ns[1], ns[2], gs.size());
    printf("setlist\t%s\t", config);
    for (size_t i = 0; i < set.size(); i++) printf(i ? ",%d" : "%d", set[i]);
    printf("\n");
    emit(config, "set", "sms", (double)set.size());
    emit(config, "set", "side0_sms", ns[0]);
    emit(config, "set", "side1_sms", ns[1]);
    emit(config, "set", "gpcs", (double)gs.size());
}

static void run_config(Ctx &c, const char *config, const std::vector<int> &set, const std::vector<int> &side,
                       const std::vector<int> &gpc, bool small_kernels) {
    unsigned char mask[kMaxSms] = {0};
    for (int s : set) mask[s] = 1;
    CHECK(cudaMemcpy(c.d_mask, mask, kMaxSms, cudaMemcpyHostToDevice));
    describe(config, set, side, gpc);
    const size_t MiB = 1u << 20;
    int reps = c.quick ? 2 : 5;
    size_t hbm = c.big_bytes;
    stream_case(c, config, "read_hbm", 0, hbm, hbm, 128 * 1024, reps);
    stream_case(c, config, "write_hbm", 1, hbm, hbm, 128 * 1024, reps);
    stream_case(c, config, "copy_hbm", 2, hbm / 2, hbm / 2, 128 * 1024, reps);
    const size_t l2sizes[] = {4, 8, 16, 20, 24, 28, 32, 40, 48, 64};
    for (size_t mb : l2sizes) {
        char name[32];
        snprintf(name, sizeof name, "read_%zuMiB", mb);
        size_t moved = std::max(mb * MiB * 4, (size_t)1024 * MiB);
        stream_case(c, config, name, 0, mb * MiB, moved, 32 * 1024, reps);
    }
    const size_t chsizes[] = {1, 4, 8, 16, 20, 24, 28, 32, 40, 48, 64, 256};
    for (size_t mb : chsizes) chase_case(c, config, mb * MiB, c.quick ? 512 : 2048, mb == 4, side, (unsigned)set.size());
    if (small_kernels) {
        for (int g : {1, 16, 56, 132, 528}) tiny_case(c, config, g, 200);
    }
}

int main(int argc, char **argv) {
    Ctx c;
    std::string map_arg;
    int n_arg = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--map") && i + 1 < argc) map_arg = argv[++i];
        else if (!strcmp(argv[i], "--n") && i + 1 < argc) n_arg = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) c.quick = true;
        else { fprintf(stderr, "usage: one_side [--map DIGITS] [--n N] [--quick]\n"); return 2; }
    }
    if (map_arg.size() > (size_t)kMaxSms || n_arg < 0 || n_arg > kMaxSms) { fprintf(stderr, "one_side: bad --map or --n\n"); return 2; }
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(0));
    cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, 0));
    c.dev_sms = p.multiProcessorCount;
    printf("device\t%s\t%d SMs\tL2 %d B\n", p.name, p.multiProcessorCount, p.l2CacheSize);

    // The side map and the bound set: the shim's published topology, else --map.
    std::vector<int> side(kMaxSms, -1);
    bool bound = false;
    typedef int (*get_topo_t)(int, ldshim_topology_t *, size_t);
    get_topo_t get_topo = (get_topo_t)dlsym(RTLD_DEFAULT, "ldshim_get_topology");
    ldshim_topology_t t;
    memset(&t, 0, sizeof t);
    if (get_topo && get_topo(0, &t, sizeof t) == 0 && t.magic == LDSHIM_TOPOLOGY_MAGIC) {
        for (uint32_t s = 0; s < t.num_sms && s < (uint32_t)kMaxSms; s++) side[s] = t.sm_domain[s];
        bound = t.version >= 2 && (t.flags & LDSHIM_TOPO_BOUND);
        printf("topology\tpublished: %u SMs, %u domains, bound %d (%u SMs)\n", t.num_sms, t.num_domains, bound, t.bound_sms);
    } else if (!map_arg.empty()) {
        for (size_t s = 0; s < map_arg.size(); s++) side[s] = map_arg[s] >= '0' && map_arg[s] <= '9' ? map_arg[s] - '0' : -1;
        printf("topology\tfrom --map\n");
    } else {
        printf("topology\tnone\n");
    }
    std::string m;
    for (int s = 0; s < c.dev_sms; s++) m += side[s] >= 0 && side[s] <= 9 ? (char)('0' + side[s]) : '.';
    printf("map\t%s\n", m.c_str());

    c.big_bytes = (size_t)1 << 30;
    CHECK(cudaMalloc(&c.big_a, c.big_bytes));
    CHECK(cudaMalloc(&c.big_b, c.big_bytes));
    CHECK(cudaMemset(c.big_a, 0x5a, c.big_bytes));
    CHECK(cudaMemset(c.big_b, 0xa5, c.big_bytes));
    CHECK(cudaMalloc(&c.d_mask, kMaxSms));
    CHECK(cudaMalloc(&c.d_counter, sizeof(unsigned long long)));
    CHECK(cudaMalloc(&c.d_clk, 2 * sizeof(unsigned long long)));
    CHECK(cudaMalloc(&c.d_sink, sizeof(unsigned)));
    CHECK(cudaMalloc(&c.d_claim, kMaxSms * sizeof(unsigned)));
    CHECK(cudaMalloc(&c.d_out, 2 * kMaxSms * sizeof(unsigned long long)));
    CHECK(cudaMalloc(&c.d_lat, (size_t)kMaxSms * kLatHops * sizeof(unsigned short)));
    CHECK(cudaEventCreate(&c.e0));
    CHECK(cudaEventCreate(&c.e1));

    std::vector<int> sms = census(c);
    std::vector<int> gpc = learn_gpcs(c);
    {
        int ngpc = 0;
        for (int s : sms) if (!gpc.empty() && gpc[s] >= 0) ngpc = std::max(ngpc, gpc[s] + 1);
        printf("gpc\t%d GPCs over the reachable SMs:", ngpc);
        for (int g = 0; g < ngpc; g++) {
            int n0 = 0, n1 = 0, nu = 0;
            for (int s : sms) if (gpc[s] == g) { if (side[s] == 0) n0++; else if (side[s] == 1) n1++; else nu++; }
            printf(" [%d: side0 %d side1 %d ?%d]", g, n0, n1, nu);
        }
        printf("\n");
    }
    if (bound || map_arg.empty()) {
        run_config(c, bound ? "bound" : "all", sms, side, gpc, true);
    } else {
        // Unbound with a map: the same SM counts chosen by side and GPC, in one process.
        int n = n_arg ? n_arg : 56;
        bool have_sides = false;
        for (int s : sms) if (side[s] == 1) have_sides = true;
        run_config(c, "all", sms, side, gpc, true);
        if (have_sides) {
            auto a = pick(sms, side, gpc, 0, n, false);
            run_config(c, "side0_pack", a, side, gpc, false);
            auto b = pick(sms, side, gpc, 1, n, false);
            run_config(c, "side1_pack", b, side, gpc, false);
            auto d0 = pick(sms, side, gpc, 0, n / 2, false), d1 = pick(sms, side, gpc, 1, n - n / 2, false);
            d0.insert(d0.end(), d1.begin(), d1.end());
            run_config(c, "both_pack", d0, side, gpc, false);
            auto e0 = pick(sms, side, gpc, 0, n / 2, true), e1 = pick(sms, side, gpc, 1, n - n / 2, true);
            e0.insert(e0.end(), e1.begin(), e1.end());
            run_config(c, "both_spread", e0, side, gpc, false);
        }
    }
    CHECK(cudaDeviceSynchronize());
    printf("done\n");
    return 0;
}
