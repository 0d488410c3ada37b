/* fake_cudart.h — the API of the fake CUDA runtime (build/fake/libcudart.so.13 and
 * build/fake/libcudart_fake_static.a). A small subset of cuda_runtime_api.h with the same
 * names, ABI and error numbers; test programs include this instead of the real header.
 *
 * Like the real cudart, the library reaches the driver only through cuGetProcAddress_v2,
 * which it obtains with dlopen("libcuda.so.1") + dlsym. Thread-safety: every function may be
 * called from any thread; the current device is per thread (default 0).
 */
#ifndef FAKE_CUDART_H
#define FAKE_CUDART_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Numerically equal to the CUresult of the same meaning (and to the real cudaError_t). */
typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorCudartUnloading = 4,
    cudaErrorInvalidDevice = 101,
    cudaErrorNoDevice = 100,
    cudaErrorDeviceUninitialized = 201,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorSymbolNotFound = 500,
    cudaErrorPeerAccessAlreadyEnabled = 704,
    cudaErrorNotSupported = 801,
    cudaErrorUnknown = 999
} cudaError_t;

enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1,
                      cudaMemoryTypeDevice = 2, cudaMemoryTypeManaged = 3 };

struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
};

typedef struct cudaIpcMemHandle_st { char reserved[64]; } cudaIpcMemHandle_t;

typedef enum cudaDriverEntryPointQueryResult {
    cudaDriverEntryPointSuccess = 0,
    cudaDriverEntryPointSymbolNotFound = 1,
    cudaDriverEntryPointVersionNotSufficent = 2
} cudaDriverEntryPointQueryResult;

enum { cudaEnableDefault = 0, cudaEnableLegacyStream = 1, cudaEnablePerThreadDefaultStream = 2 };
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
                      cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };

#define FAKE_CUDART_VERSION 13000

cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemset(void *devPtr, int value, size_t count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMemGetInfo(size_t *free, size_t *total);
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr);
cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags);
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *ptr);
cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult *status);
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult *status);
const char *cudaGetErrorString(cudaError_t err);

/* Streams and a kernel launch, resolved like the rest (cuGetProcAddress_v2). With
 * FAKERT_PER_THREAD=1 in the environment the runtime behaves as one built with
 * --default-stream per-thread: it resolves the per-thread (_ptsz) entry points, so a NULL
 * stream means the per-thread default stream. fakert_launch launches a no-op kernel of a fake
 * module (loaded on first use) with `grid` blocks. */
typedef struct CUstream_st *cudaStream_t;
#define cudaStreamPerThread ((cudaStream_t)0x2)
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t fakert_launch(unsigned grid, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
