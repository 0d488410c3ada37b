/* onegpu.c — a stand-in libcuda.so.1 for the test of tests/gpu/gpu_present.py: cuInit returns
 * $ONEGPU_INIT_RC (default 0) and cuDeviceGetCount reports $ONEGPU_COUNT devices (default 1),
 * so the "GPU present" answer can be checked on a machine without one. */
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

EXPORT int cuInit(unsigned flags) {
    (void)flags;
    const char *e = getenv("ONEGPU_INIT_RC");
    return e ? atoi(e) : 0;
}

EXPORT int cuDeviceGetCount(int *count) {
    const char *e = getenv("ONEGPU_COUNT");
    *count = e ? atoi(e) : 1;
    return 0;
}
