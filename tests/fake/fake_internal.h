/* fake_internal.h — state shared by the files of the fake CUDA driver (build/fake/libcuda.so.1).
 *
 * The fake's "device memory" is host memory: plain allocations are anonymous mmaps, VMM
 * physical handles are memfds, reservations are PROT_NONE mmaps, mappings are MAP_SHARED
 * mmaps of the memfd. One process-wide mutex (fk.lock) guards every table; it is a fake, so
 * simplicity beats scalability. Nothing here is exported: only FAKE_API functions are.
 */
#ifndef FAKECUDA_INTERNAL_H
#define FAKECUDA_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "shim/cuda_compat.h"

#define FAKE_API __attribute__((visibility("default")))

#define FK_MAX_DEVICES 16
#define FK_GRANULARITY ((size_t)2 << 20)          /* 2 MiB, as on H200 (FACTS.md)          */
#define FK_DEFAULT_TOTAL ((size_t)141 << 30)      /* reported total memory per device     */

#define FK_MAX_SMS 256
#define FK_MASK_WORDS (FK_MAX_SMS / 64)

typedef struct fk_ctx {
    uint32_t magic;            /* FK_CTX_MAGIC while alive */
    int device;
    int primary;               /* 1: the device's primary context */
    int refcount;              /* primary: retain count (green contexts hold one each) */
    int teardowns;             /* primary: times its last reference went (the driver destroys it) */
    int green;                 /* 1: the CUcontext of a green context (fake_green.c) */
    uint64_t sms[FK_MASK_WORDS];   /* SMs its kernels run on */
} fk_ctx_t;

/* A green context (fake_green.c): its CUcontext is `ctx`. */
typedef struct fk_green {
    uint32_t magic;            /* FK_GREEN_MAGIC while alive */
    int pad;
    fk_ctx_t ctx;
} fk_green_t;
#define FK_GREEN_MAGIC 0x62EE4C70u
#define FK_GREEN_OF(c) ((fk_green_t *)((char *)(c) - offsetof(fk_green_t, ctx)))

/* A stream: its context decides which SMs its launches use. */
typedef struct fk_graph fk_graph_t;
typedef struct {
    uint32_t magic;
    int device;
    fk_ctx_t *ctx;
    fk_graph_t *capture;       /* non-NULL while a capture records into it */
    int blocking;              /* created without CU_STREAM_NON_BLOCKING: synchronizes with the legacy stream */
} fk_stream_t;
#define FK_STREAM_MAGIC 0x5743A311u
#define FK_CTX_MAGIC 0xC0C7C0C7u
#define FK_CTX_DEAD 0xDEADC7C7u   /* a destroyed green context's CUcontext (kept until exit) */

typedef struct {
    int  initialized;          /* cuInit succeeded */
    int  ndevices, nsms, ndomains, version;   /* ndomains 0: attribute 149 unsupported */
    int  mps_mode;             /* device count came from $CUDA_MPS_PIPE_DIRECTORY file */
    size_t mem_limit;          /* 0: unlimited */
    size_t mem_used;           /* live plain + VMM bytes */
    fk_ctx_t primary[FK_MAX_DEVICES];
    uint8_t side[FK_MAX_SMS];  /* locality domain of each SM ($FAKE_CUDA_SM_SIDES, else TPC t -> t mod 2) */
    int nsides;                /* domains the sides span (2 unless FAKE_CUDA_DOMAINS says more) */
    int groups_cap[8];         /* $FAKE_CUDA_GROUPS_PER_SIDE: most split groups per side (0: no cap) */
    int split_straddle;        /* $FAKE_CUDA_SPLIT=straddle: groups in SM-id order, ignoring sides */
    int uuid_delay_ms;         /* $FAKE_CUDA_UUID_DELAY=<ms>[@<device>][:<calls>]: cuDeviceGetUuid_v2 */
    int uuid_delay_dev;        /*   sleeps that long (on that device only; -1: every device), */
    int uuid_delay_calls;      /*   in its first <calls> calls there (0: every call)          */
    unsigned char peer[FK_MAX_DEVICES][FK_MAX_DEVICES];   /* peer[a][b]: a may access b */
    /* $FAKE_CUDA_READBACK=MODE[@N]: how localized (type-6) handles larger than one granule
     * (not the backend's one-page availability check) are homed and read back. MODE wrong:
     * homed in the next domain; unlocalized: not localized (ordinal -1); unknown: the
     * pointer attribute LOCALITY_DOMAIN_ORDINAL is not known (it is known iff
     * FAKE_CUDA_DOMAINS is set). @N: only the Nth such handle (1-based); else every one. */
    int readback_mode, readback_nth, readback_seen;
    pthread_mutex_t lock;
} fk_state_t;

extern fk_state_t fk;

/* Lock/unlock the fake's tables. Not reentrant. */
void fk_lock(void);
void fk_unlock(void);

/* Read the environment once (idempotent, thread-safe). */
void fk_setup(void);

/* Failure injection: returns CUDA_SUCCESS, or the error the Nth call of `name` must fail
 * with (FAKE_CUDA_FAIL). `dflt` is the code when the spec gives none. Counts the call. */
CUresult fk_inject(const char *name, CUresult dflt);

/* Common prologue: setup, injection, cuInit check. */
#define FK_ENTER(name, dflt) do { \
        fk_setup(); \
        CUresult fk_r_ = fk_inject(name, dflt); \
        if (fk_r_ != CUDA_SUCCESS) return fk_r_; \
        if (!fk.initialized) return CUDA_ERROR_NOT_INITIALIZED; \
    } while (0)

/* Current context of this thread (NULL if none). */
fk_ctx_t *fk_current(void);
/* The current context into a new variable `c`, or return from the caller: INVALID_CONTEXT
 * when there is none, CONTEXT_IS_DESTROYED when it is a destroyed green context (the driver
 * leaves a destroyed context current on threads other than the destroying one). */
#define FK_CURRENT(c) \
    fk_ctx_t *c = fk_current(); \
    do { \
        if (!c) return CUDA_ERROR_INVALID_CONTEXT; \
        if (c->magic == FK_CTX_DEAD) return CUDA_ERROR_CONTEXT_IS_DESTROYED; \
    } while (0)
int fk_valid_ctx(const fk_ctx_t *c);
int fk_valid_device(int dev);

/* Memory accounting against FAKE_CUDA_MEM_LIMIT; call under fk_lock. 0 ok, -1 over limit. */
int  fk_mem_charge(size_t bytes);
void fk_mem_uncharge(size_t bytes);

/* Counters for fakecuda_counts (fake_mem.c), called under fk_lock. */
void fk_mem_counts(int out[5]);

/* Rewrite FAKE_CUDA_REPORT if the process is already exiting (see fake_core.c). Call after
 * any change to the live counts, without the lock held. */
void fk_report_if_exiting(void);

/* Module images (fake_module.c): 1 if `image` is a real CUDA image (fatbin, ELF, PTX). */
int fk_is_real_image(const void *image);

/* The context a stream's work runs in (fake_core.c): a created stream's own, the thread's
 * current one for the legacy/NULL streams. The per-thread default stream (CU_STREAM_PER_THREAD,
 * or NULL through a _ptsz/_ptds entry point, pt = 1) fails with CUDA_ERROR_INVALID_HANDLE in a
 * green context, as on the real driver. */
CUresult fk_stream_ctx(CUstream s, int pt, fk_ctx_t **out);

/* Work on the legacy stream (NULL without pt, or CU_STREAM_LEGACY; a synchronous copy or
 * memset): it would have to wait for every blocking stream, so while a blocking stream is
 * being captured (any thread) it fails with CUDA_ERROR_STREAM_CAPTURE_IMPLICIT and that
 * capture ends with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, as on the real driver. */
CUresult fk_legacy_work(void);
int fk_is_legacy(CUstream s, int pt);
/* Captures of blocking streams (fake_module.c): begin/end bookkeeping for fk_legacy_work. */
unsigned fk_blocking_capture_begin(void);
int fk_blocking_capture_end(unsigned epoch);   /* 1 if legacy work invalidated it */
fk_stream_t *fk_stream(CUstream s);    /* a created stream, or NULL */
CUresult fk_stream_create_in(CUstream *s, fk_ctx_t *c);

/* Every SM of a device (fake_green.c). */
void fk_all_sms(uint64_t out[FK_MASK_WORDS]);

/* A launch (fake_module.c): runs the kernel now, or records it into the stream's capture. */
typedef struct {
    void *func;                /* fk_func_t* (a fake module's) or fk_kernel_t* (a library's) */
    unsigned grid;             /* blocks */
    uint64_t a0;               /* the first argument (a pointer), copied at launch         */
    uint32_t a1, a2;           /* the second and third (32-bit)                           */
} fk_launch_t;
CUresult fk_launch_now(const fk_launch_t *l, fk_ctx_t *ctx);
CUresult fk_graph_record(fk_graph_t *g, const fk_launch_t *l);

/* CUDA 13.1's cuDevSmResourceSplit (absent from the 13.0 headers), for fake_proc.c. */
typedef ld_sm_group_params_t fk_group_params_t;   /* the toolkit's own from CUDA 13.4 (cuda_compat.h) */
CUresult cuDevSmResourceSplit(CUdevResource *result, unsigned int nbGroups, const CUdevResource *input,
                              CUdevResource *remainder, unsigned int flags, fk_group_params_t *params);

/* Plain memory (fake_mem.c): kind 0 cuMemAlloc, 1 stream-ordered, 2 managed; `domain` as
 * fakecuda_domain_of answers it. fk_plain_free checks the kind (cuMemFreeAsync of memory that
 * is not stream-ordered is refused). Call without the lock held. */
CUresult fk_plain_alloc(CUdeviceptr *dptr, size_t size, int device, int kind, int domain);
CUresult fk_plain_alloc_in(CUdeviceptr *dptr, size_t size, int device, int kind, int domain, void *pool);
CUresult fk_plain_free(CUdeviceptr dptr, int kind);
int fk_plain_set_domain(CUdeviceptr dptr, size_t size, int domain);   /* managed only; 0 or -1 */
/* A primary context reset: the device's plain memory goes, but for what was made in a
 * context the program created (as the driver: that context keeps its allocations). */
void fk_plain_reset_device(int dev);

/* Live green contexts (fake_green.c), for the exit report. */
int fk_green_live(void);

/* Memory pools (fake_pool.c), called under fk_lock: a stream-ordered allocation of `bytes`
 * from `pool` made or freed (the pool's used and reserved bytes); the access flags `device`
 * has on the pool's memory. Pools the program created and has not destroyed (exit report). */
void fk_pool_charge(void *pool, size_t bytes);
void fk_pool_discharge(void *pool, size_t bytes);
int fk_pool_access(void *pool, int device);
int fk_pools_live(void);

#endif
