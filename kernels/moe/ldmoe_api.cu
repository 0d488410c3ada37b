// ldmoe_api.cu — libldmoe.so: the tiles of ldmoe.h, their kernels as configured, launched with
// the tuned defaults. Everything but this policy is impl/library.cuh.
#include <stdint.h>

namespace ldmoe {
struct TileCfg;
struct Library {
    template <class C> using Kernel = C;
    static TileCfg extra_tile(int tile);
    static const char *version();
};
}  // namespace ldmoe

#include "kernels/moe/impl/library.cuh"

namespace ldmoe {
TileCfg Library::extra_tile(int) { return TileCfg{}; }
const char *Library::version() { return LDMOE_VERSION_TEXT; }
}  // namespace ldmoe
