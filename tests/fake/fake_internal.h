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

typedef struct fk_ctx {
    uint32_t magic;            /* FK_CTX_MAGIC while alive */
    int device;
    int primary;               /* 1: the device's primary context */
    int refcount;              /* primary: retain count */
} fk_ctx_t;
#define FK_CTX_MAGIC 0xC0C7C0C7u

typedef struct {
    int  initialized;          /* cuInit succeeded */
    int  ndevices, nsms, ndomains, version;   /* ndomains 0: attribute 149 unsupported */
    int  mps_mode;             /* device count came from $CUDA_MPS_PIPE_DIRECTORY file */
    size_t mem_limit;          /* 0: unlimited */
    size_t mem_used;           /* live plain + VMM bytes */
    fk_ctx_t primary[FK_MAX_DEVICES];
    unsigned char peer[FK_MAX_DEVICES][FK_MAX_DEVICES];   /* peer[a][b]: a may access b */
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

#endif
