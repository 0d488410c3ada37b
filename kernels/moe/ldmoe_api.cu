// ldmoe_api.cu — libldmoe.so: the tiles of ldmoe.h, their kernels as configured, launched with
// the tuned defaults, and the fused MoE layer (ldmoe_moe). Everything but this policy is
// impl/library.cuh (the grouped GEMM's host side, shared with the lab) and impl/layer/api.cuh
// (the layer's host side, product only).
#include <stdint.h>

namespace ldmoe {
struct TileCfg;
struct Library {
    template <class C> using Kernel = C;
    static TileCfg extra_tile(int tile);
    static const char *version();
    static void release_device(int dev);   // ldmoe_release: what else the build holds per device
};
}  // namespace ldmoe

#include "kernels/moe/impl/library.cuh"
// In this translation unit: the layer's kernel sees the same `ldshim_topology` symbol the shim
// fills for this module, and shares the library's error message, lock and SM count.
#include "kernels/moe/impl/layer/api.cuh"

namespace ldmoe {
TileCfg Library::extra_tile(int) { return TileCfg{}; }
const char *Library::version() { return LDMOE_VERSION_TEXT; }
void Library::release_device(int dev) { layer_release_device(dev); }
}  // namespace ldmoe
