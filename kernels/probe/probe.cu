// probe.cu — device side of the topology probe (host side: shim/probe.c).
//
// Built into a fatbin (sm_90, sm_100, compute_100 PTX), embedded in libldshim.so and
// loaded with cuModuleLoadData. Kernel names are extern "C" so cuModuleGetFunction finds
// them unmangled. Geometry comes from shim/probe_classify.h (shared with the host).
//
// Chase kernels run one CTA per SM: the host launches exactly num_sms CTAs of 32 threads
// with the per-block maximum of dynamic shared memory, so only one fits on an SM, and
// each CTA records under its %smid. `seen[smid]` counts CTAs per SM (slot num_sms counts
// ids out of range) so the host can reject a launch that did not land once on every SM.
#include <stdint.h>

#include "shim/probe_classify.h"

static constexpr uint32_t kLineBytes = LD_PROBE_LINE_BYTES;    // one L2 line
static constexpr uint32_t kChunkBytes = LD_PROBE_CHUNK_BYTES;  // anchored chase window
static constexpr uint32_t kRingLen = LD_PROBE_RING_LEN;        // lines per chunk / words per line;
                                                               // rings step by LD_PROBE_RING_STRIDE (7)
static constexpr uint32_t kMaxDomains = LDSHIM_MAX_DOMAINS;

struct ldprobe_bufs { const uint8_t *p[kMaxDomains]; };   // one buffer per domain

__device__ __forceinline__ uint32_t sm_id() {
    uint32_t id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}

__device__ __forceinline__ uint64_t cycles() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t) :: "memory");
    return t;
}

// L2-only load (bypasses L1), so every hop goes to the L2 slice that holds the line.
__device__ __forceinline__ uint32_t load_cg(const uint8_t *p) {
    uint32_t v;
    asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// NOTES: the store consumes the last hop's value, so the warp cannot read the end clock
// before that load has returned (in-order issue); without it the last hop is not timed.
__device__ __forceinline__ void sink(uint32_t *smem, uint32_t v) {
    asm volatile("st.volatile.shared.u32 [%0], %1;" :: "r"((uint32_t)__cvta_generic_to_shared(smem)), "r"(v) : "memory");
}

// Returns cycles/hop of kRingLen dependent hops starting at `base` + the offset stored at
// `base`. The untimed first load positions the chase (as the reference probe does).
__device__ __forceinline__ float chase(const uint8_t *base, uint32_t *smem) {
    uint32_t off = load_cg(base);
    sink(smem, off);                 // the positioning load is not timed: wait for it first
    uint64_t t0 = cycles();
#pragma unroll 1
    for (uint32_t h = 0; h < kRingLen; h++) off = load_cg(base + off);
    sink(smem, off);
    uint64_t t1 = cycles();
    return (float)(t1 - t0) / (float)kRingLen;
}

__device__ __forceinline__ bool claim_sm(uint32_t *seen, uint32_t num_sms, uint32_t *sm) {
    *sm = sm_id();
    atomicAdd(&seen[*sm < num_sms ? *sm : num_sms], 1u);
    return *sm < num_sms;
}

// Anchored rings: line i of every 4 KiB chunk holds, in its first word, the byte offset of
// line (i + 7) mod 32 inside the chunk. `nlines` = total lines of the buffer.
extern "C" __global__ void ldprobe_init_chunks(uint32_t *buf, uint64_t nlines) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < nlines;
         i += (uint64_t)gridDim.x * blockDim.x) {
        uint32_t line = (uint32_t)(i % kRingLen);
        buf[i * (kLineBytes / 4)] = ld_ring_next(line, kRingLen) * kLineBytes;
    }
}

// Clustered rings: picks line ld_probe_line(l, seed) of the region, records it
// in line_idx, and makes word w of the line hold the byte offset of word (w + 7) mod 32 of
// the same line, so a chase stays inside one line (one L2 slice).
extern "C" __global__ void ldprobe_init_lines(uint32_t *region, uint32_t *line_idx, uint32_t nlines,
                                              uint32_t seed) {
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < nlines * kRingLen;
         i += gridDim.x * blockDim.x) {
        uint32_t l = i / kRingLen, w = i % kRingLen;
        uint32_t line = ld_probe_line(l, seed, nlines);
        if (w == 0) line_idx[l] = line;
        region[(uint64_t)line * kRingLen + w] = ld_ring_next(w, kRingLen) * 4u;
    }
}

// Zero `n` counters (on the probe's own stream; a cuMemset would run on the legacy stream,
// which a non-blocking stream does not wait for).
extern "C" __global__ void ldprobe_clear(uint32_t *p, uint32_t n) {
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = 0;
}

// Evict L2: write `n16` 16-byte words.
extern "C" __global__ void ldprobe_flush(uint4 *buf, uint64_t n16, uint32_t salt) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n16;
         i += (uint64_t)gridDim.x * blockDim.x)
        buf[i] = make_uint4((uint32_t)i, salt, 0u, 0u);
}

// out[d][sm][c]: cycles/hop of SM `sm` chasing chunk c of domain d's buffer (chunks of SM
// `sm` are its private ones: buffer offset (sm * chunks + c) * 4 KiB). Domains alternate
// inside the chunk loop so a drift in clock speed hits all domains alike.
extern "C" __global__ void ldprobe_anchored(ldprobe_bufs bufs, uint32_t ndomains, uint32_t chunks,
                                            uint32_t num_sms, float *out, uint32_t *seen) {
    extern __shared__ uint32_t smem[];
    uint32_t sm;
    if (threadIdx.x != 0 || !claim_sm(seen, num_sms, &sm)) return;
    for (uint32_t c = 0; c < chunks; c++)
        for (uint32_t d = 0; d < ndomains && d < kMaxDomains; d++) {
            const uint8_t *chunk = bufs.p[d] + ((uint64_t)sm * chunks + c) * kChunkBytes;
            out[((uint64_t)d * num_sms + sm) * chunks + c] = chase(chunk, smem);
        }
}

// out[sm][l]: cycles/hop of SM `sm` around the ring inside line line_idx[l] (L2-resident:
// the init kernel just wrote it). SMs start at different lines so they do not all queue
// on one line at once.
extern "C" __global__ void ldprobe_clustered(const uint8_t *region, const uint32_t *line_idx,
                                             uint32_t nlines, uint32_t num_sms, float *out,
                                             uint32_t *seen) {
    extern __shared__ uint32_t smem[];
    uint32_t sm;
    if (threadIdx.x != 0 || !claim_sm(seen, num_sms, &sm)) return;
    uint32_t start = (uint32_t)(((uint64_t)sm * nlines) / num_sms);
    for (uint32_t i = 0; i < nlines; i++) {
        uint32_t l = start + i < nlines ? start + i : start + i - nlines;
        const uint8_t *line = region + (uint64_t)line_idx[l] * kLineBytes;
        out[(uint64_t)sm * nlines + l] = chase(line, smem);
    }
}

// Which SMs a context's kernels land on (compute binding, shim/compute.c): each CTA counts
// itself under its %smid (ids >= num_sms in slot num_sms) and then holds its SM for
// `hold_ns`, so that with one CTA per SM (the host asks for the per-block maximum of shared
// memory) the CTAs of a launch several times the group's size spread over all of its SMs.
extern "C" __global__ void ldprobe_sm_marker(uint32_t *seen, uint32_t num_sms, uint32_t hold_ns) {
    extern __shared__ uint32_t smem[];
    if (threadIdx.x != 0) return;
    uint32_t sm;
    claim_sm(seen, num_sms, &sm);
    smem[0] = sm;   // touch the reservation so the compiler keeps the dynamic shared memory
    uint64_t t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < hold_ns);
}
