// ldmoe_lab.cu — the lab build of libldmoe (ldmoe_lab.h): the product's kernels and host side
// (kernels/moe/impl/library.cuh) instantiated with the lab's policy: more tiles, the KParams'
// per-tile counters, timeline and variant bits set from the lab's entry points, and, in the
// diagnostic build (-DLDMOE_LAB_DIAG, bench/moe/lab/lab.mk), every kernel compiled with the
// diagnostic bits' code (impl/variants.h LDMOE_TUNE_DIAG_*).
#include <stdint.h>
#include "bench/moe/lab/ldmoe_lab.h"
#include "kernels/moe/impl/variants.h"

namespace ldmoe {

// A tile shape whose kernel also compiles the diagnostic bits' code (impl/params.cuh diag_of).
template <class C> struct Diag : C { static constexpr bool DIAG = true; };

struct TileCfg;
struct Library {
#ifdef LDMOE_LAB_DIAG
    template <class C> using Kernel = Diag<C>;
    static constexpr uint32_t kKnownBits = LDMOE_TUNE_ALL | LDMOE_TUNE_DIAG_ALL;
#else
    template <class C> using Kernel = C;
    static constexpr uint32_t kKnownBits = LDMOE_TUNE_ALL;
#endif
    static TileCfg extra_tile(int tile);
    static const char *version();
    static void release_device(int) {}   // the lab holds nothing else per device
};

}  // namespace ldmoe

#include "kernels/moe/impl/library.cuh"

namespace ldmoe {

// The kernel shape of every tile of LDMOE_LAB_TILE_LIST (the template arguments as in
// impl/tile_shapes.cuh).

// The kernel shape of every tile of LDMOE_LAB_TILE_LIST (the template arguments as in
// impl/tile_shapes.cuh).
using LabShape_64x16 = Cfg<64, 16, 4, 1, 8, false, 2>;         // 8 stages of 128 k: 112 KiB of weights in flight
using LabShape_64x64 = Cfg<64, 64, 2, 2, 6, false, 2>;         // 6 stages of 128 k: 80 KiB in flight
using LabShape_WG_256x128 = Cfg<256, 128, 2, 4, 4, true>;      // wgmma, 4 stages of 64 k
using LabShape_WG_128x128 = Cfg<128, 128, 2, 4, 6, true>;      // wgmma, 6 stages of 64 k
using LabShape_WG_256x128_K2 = Cfg<256, 128, 2, 4, 2, true, 2>;   // half the barriers and waits per FLOP
using LabShape_WG_128x128_K2 = Cfg<128, 128, 2, 4, 3, true, 2>;
using LabShape_128x64_K2 = Cfg<128, 64, 4, 2, 4, false, 2>;    // more weight rows per token row: 96 KiB in flight
using LabShape_64x8_K4 = Cfg<64, 8, 4, 1, 5, false, 4>;        // m16n8 with n = 8 tokens: 128 KiB in flight
using LabShape_WS_256x128 = WsCfg<256, 128, 4, 1, false>;      // prefill, 4 stages of 48 KiB
using LabShape_WS_128x128 = WsCfg<128, 128, 6, 1, false>;      // prefill
using LabShape_WS_128x64 = WsCfg<128, 64, 4, 2, true>;         // decode, 128 KiB of weights in flight
using LabShape_WS_128x16 = WsCfg<128, 16, 5, 2, true>;         // decode, 160 KiB in flight; 5 stages leave room
                                                               //   for the staged epilogue
using LabShape_WS_256x64 = WsCfg<256, 64, 5, 1, true>;         // decode, 160 KiB in flight
using LabShape_WS_128x64_K1 = WsCfg<128, 64, 9, 1, true>;      // decode, nine 64-k stages: 144 KiB in flight


TileCfg Library::extra_tile(int tile) {
    switch (tile) {
#define LDMOE_LAB_TILE_CASE_(value, name, bm, bn) \
    case LDMOE_LAB_TILE_##name: return describe<Kernel<LabShape_##name>, bm, bn>();
        LDMOE_LAB_TILE_LIST(LDMOE_LAB_TILE_CASE_)
#undef LDMOE_LAB_TILE_CASE_
    default: return TileCfg{};
    }
}

#ifdef LDMOE_LAB_DIAG
const char *Library::version() { return LDMOE_VERSION_TEXT " [lab build, diagnostic]"; }
#else
const char *Library::version() { return LDMOE_VERSION_TEXT " [lab build]"; }
#endif

}  // namespace ldmoe

static int check_extras(uint32_t tune, const uint32_t *debug_tiles, int64_t debug_cap) {
    if (tune & ~Library::kKnownBits) return fail(LDMOE_ERR_INVALID_ARG, "tune 0x%x has unknown bits", tune);
    if (debug_tiles && debug_cap <= 0) return fail(LDMOE_ERR_INVALID_ARG, "debug_tiles given with debug_cap <= 0");
    return LDMOE_OK;
}

LDMOE_API int ldmoe_lab_grouped_mm(const ldmoe_lab_params_t *p) {
    if (!p) return fail(LDMOE_ERR_INVALID_ARG, "params is NULL");
    int rc = check_extras(p->tune, p->debug_tiles, p->debug_cap);
    return rc ? rc : grouped_mm(&p->base, LaunchExtras{p->debug_tiles, p->debug_cap, p->tune, p->trace});
}

LDMOE_API int ldmoe_lab_grouped_mm_fp8(const ldmoe_lab_fp8_params_t *p) {
    if (!p) return fail(LDMOE_ERR_INVALID_ARG, "params is NULL");
    int rc = check_extras(p->tune, p->debug_tiles, p->debug_cap);
    return rc ? rc : grouped_mm_fp8(&p->fp8, LaunchExtras{p->debug_tiles, p->debug_cap, p->tune, p->trace});
}

static ldshim_topology_t g_saved[LDMOE_MAX_DEVICES];
static bool g_saved_valid[LDMOE_MAX_DEVICES];

LDMOE_API int ldmoe_lab_set_topology(const struct ldshim_topology *topo) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return cuda_fail(e, "cudaGetDevice");
    if (dev < 0 || dev >= LDMOE_MAX_DEVICES) return fail(LDMOE_ERR_UNSUPPORTED, "device %d", dev);
    pthread_mutex_lock(&g_lock);
    int rc = LDMOE_OK;
    if (!g_saved_valid[dev]) {
        e = cudaMemcpyFromSymbol(&g_saved[dev], ldshim_topology, sizeof(ldshim_topology_t));
        if (e != cudaSuccess) rc = cuda_fail(e, "cudaMemcpyFromSymbol(ldshim_topology)");
        else g_saved_valid[dev] = true;
    }
    if (!rc) {
        const ldshim_topology_t *src = topo ? topo : &g_saved[dev];
        e = cudaMemcpyToSymbol(ldshim_topology, src, sizeof(ldshim_topology_t));
        if (e != cudaSuccess) rc = cuda_fail(e, "cudaMemcpyToSymbol(ldshim_topology)");
        else if (!topo) g_saved_valid[dev] = false;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}
