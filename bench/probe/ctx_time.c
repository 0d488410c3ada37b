/* ctx_time — time the first context creation of a fresh process (cuInit, then
 * cuDevicePrimaryCtxRetain + cuCtxSetCurrent + cuCtxSynchronize), through dlopen/dlsym
 * like an unmodified program, so LD_PRELOAD=libldshim.so includes the probe it runs there.
 * Prints one line: "init_ms=<x> ctx_ms=<y>". bench/probe/run.sh compares with and without
 * the shim, cold and cached.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "shim/cuda_compat.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: ctx_time   (prints init_ms=<x> ctx_ms=<y> for device 0)\n");
        return 0;
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { fprintf(stderr, "ctx_time: %s\n", dlerror()); return 3; }
    CUresult (*init)(unsigned) = (CUresult (*)(unsigned))dlsym(h, "cuInit");
    CUresult (*get)(CUdevice *, int) = (CUresult (*)(CUdevice *, int))dlsym(h, "cuDeviceGet");
    CUresult (*retain)(CUcontext *, CUdevice) = (CUresult (*)(CUcontext *, CUdevice))dlsym(h, "cuDevicePrimaryCtxRetain");
    CUresult (*setcur)(CUcontext) = (CUresult (*)(CUcontext))dlsym(h, "cuCtxSetCurrent");
    CUresult (*sync)(void) = (CUresult (*)(void))dlsym(h, "cuCtxSynchronize");
    if (!init || !get || !retain || !setcur || !sync) { fprintf(stderr, "ctx_time: missing driver entry points\n"); return 3; }
    double t0 = now_ms();
    if (init(0) != CUDA_SUCCESS) { fprintf(stderr, "ctx_time: cuInit failed\n"); return 3; }
    double t1 = now_ms();
    CUdevice dev;
    CUcontext ctx;
    if (get(&dev, 0) != CUDA_SUCCESS || retain(&ctx, dev) != CUDA_SUCCESS || setcur(ctx) != CUDA_SUCCESS ||
        sync() != CUDA_SUCCESS) {
        fprintf(stderr, "ctx_time: context creation failed\n");
        return 3;
    }
    double t2 = now_ms();
    printf("init_ms=%.2f ctx_ms=%.2f\n", t1 - t0, t2 - t1);
    return 0;
}
