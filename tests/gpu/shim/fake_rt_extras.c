/* fake_rt_extras.c — the two runtime calls leak_cycle.cu uses that the fake runtime
 * (tests/fake/fake_cudart.c) lacks, so that leak_cycle can also be built for the CPU and run
 * against the fake driver under the real shim (onfake.sh). Not used by the GPU builds. */
#include <cuda_runtime_api.h>
#include <stdio.h>

/* "cudaError<N>": enough for messages. Static buffer: single-threaded test program only. */
const char *cudaGetErrorName(cudaError_t e) {
    static char buf[32];
    snprintf(buf, sizeof buf, "cudaError%d", (int)e);
    return buf;
}

/* The fake runtime keeps no sticky error state: nothing to report. */
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
