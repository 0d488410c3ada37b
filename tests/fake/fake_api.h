/* fake_api.h — test hooks exported by the fake driver (build/fake/libcuda.so.1).
 *
 * Test programs linked with -lcuda may call these directly; programs that only reach the
 * driver through a runtime resolve them with dlsym on dlopen("libcuda.so.1").
 * All of them are thread-safe and never change the fake's state.
 */
#ifndef FAKECUDA_API_H
#define FAKECUDA_API_H

#ifdef __cplusplus
extern "C" {
#endif

/* Calls of cuCtxSynchronize + cuStreamSynchronize so far in this process. */
int fakecuda_sync_count(void);

/* Live objects: out[0] plain cuMemAlloc allocations, out[1] VMM physical handles (created or
 * imported, not yet destroyed: released handles still mapped count), out[2] VA reservations,
 * out[3] mappings, out[4] exported POSIX fds the caller still holds open. */
void fakecuda_counts(int out[5]);

/* Domain of the physical memory mapped at ptr: the domain of a LOCALITY_DOMAIN (type 6)
 * handle; -1 for a type-DEVICE handle, plain cuMemAlloc memory or a module global; -2 when
 * nothing is mapped there. In MPS mode (fakecuda-devices file) a type-DEVICE handle of
 * derived device d counts as domain d, like MLOPart. */
int fakecuda_domain_of(const void *ptr);

/* Device owning the memory at ptr (handle's device for VMM), or -2 when nothing is there. */
int fakecuda_device_of(const void *ptr);

/* Access flags `device` has on the memory at ptr: for VMM the CUmemAccess_flags last set by
 * cuMemSetAccess for that device (0 none, 1 read, 3 read-write); for plain memory 3 on its
 * own device, for stream-ordered memory on another device what cuMemPoolSetAccess gave that
 * device on its pool, for other plain memory 3 on a peer with access enabled, else 0; -2
 * when nothing is mapped there. */
int fakecuda_access_of(const void *ptr, int device);

/* Which call made the memory at ptr: 0 cuMemAlloc, 1 stream-ordered (a pool), 2
 * cuMemAllocManaged, 3 cuMemAllocPitch, 4 a VMM mapping; -2 when nothing is there. */
int fakecuda_alloc_kind(const void *ptr);

/* Memory pools the program created: out[0] live (not destroyed), out[1] created in all. */
void fakecuda_pool_counts(int out[2]);

/* Green contexts (fake_green.c). Live green contexts; the SMs of a context (out[s] = 1 for
 * each SM it has; returns their count, -1 for a bad context); 1 if a CUcontext is a green
 * context's, 0 if not, -1 if invalid; the locality domain ("side") of an SM, -1 beyond the GPU. */
int fakecuda_green_count(void);
void *fakecuda_current_ctx(void);   /* the context really current on this thread */
int fakecuda_ctx_sms(void *ctx, unsigned char out[256]);
int fakecuda_ctx_is_green(void *ctx);
int fakecuda_sm_side(int sm);

/* The SMs this thread's last executed launch ran on (its context's), like out[] above, and
 * its block count; returns the SM count, -1 if the thread launched nothing yet. */
int fakecuda_last_launch(unsigned char out[256], unsigned *grid);

/* The retain count of a device's primary context (each green context holds one) and, in
 * *teardowns, how often its last reference went; -1 for a bad device. */
int fakecuda_primary_refs(int dev, int *teardowns);

/* Simulated nanoseconds the VMM calls have cost so far (fake_mem.c's model of the study's
 * Tables 6 and 7: fixed per call, per 2 MiB page of a localized handle above 32 MiB). */
unsigned long long fakecuda_sim_ns(void);

/* Threads sleeping inside cuDeviceGetUuid_v2 now (FAKE_CUDA_UUID_DELAY). */
int fakecuda_uuid_sleepers(void);

#ifdef __cplusplus
}
#endif
#endif
