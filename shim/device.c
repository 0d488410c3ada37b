/* device.c — per-device granularity, domain count and backend choice (device.h). */
#include "shim/device.h"
#include "shim/config.h"
#include "shim/log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ld_device_t devices[LD_MAX_DEVICES];
static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t init_cv = PTHREAD_COND_INITIALIZER;

static const ld_backend_ops_t *try_backend(const ld_backend_ops_t *b, const ld_driver_t *d, ld_device_t *dv,
                                           int ndomains, char *why, size_t n) {
    if (!b || !b->available) return NULL;
    if (b->available(d, dv->ordinal, ndomains, why, n) == 0) return b;
    return NULL;
}

static void choose_backend(const ld_driver_t *d, ld_device_t *dv) {
    char why[160] = "";
    int vmm = 0;
    d->pfn_cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dv->ordinal);
    int want = ld_cfg.backend;
    int native_n = dv->native_domains >= 2 ? dv->native_domains : 2;
    dv->backend = NULL;
    if (!vmm || !d->pfn_cuMemCreate || !d->pfn_cuMemMap || !d->pfn_cuMemAddressReserve) {
        snprintf(dv->backend_reason, sizeof dv->backend_reason, "device %d has no virtual memory management", dv->ordinal);
        return;
    }
    if (want == LD_BACKEND_OFF) {
        snprintf(dv->backend_reason, sizeof dv->backend_reason, "backend = off");
        return;
    }
    if (want == LD_BACKEND_AUTO || want == LD_BACKEND_NATIVE) {
        if (dv->native_domains >= 2 && (dv->backend = try_backend(&ld_backend_native, d, dv, native_n, why, sizeof why))) {
            dv->ndomains = native_n;
            snprintf(dv->backend_reason, sizeof dv->backend_reason, "driver reports %d locality domains", native_n);
            return;
        }
        if (dv->native_domains < 2)
            snprintf(why, sizeof why, "driver reports no locality domains (CUDA < 13.4 or one-die GPU)");
        if (want == LD_BACKEND_NATIVE) {
            snprintf(dv->backend_reason, sizeof dv->backend_reason, "native unavailable: %s", why);
            return;
        }
    }
    /* MLOPart only exists on multi-die parts (Blackwell, cc >= 10); auto does not start an
     * MPS daemon on a GPU that cannot have it. */
    if (want == LD_BACKEND_MLOPART || (want == LD_BACKEND_AUTO && dv->cc_major >= 10)) {
        char w2[160] = "";
        if ((dv->backend = try_backend(&ld_backend_mlopart, d, dv, 2, w2, sizeof w2))) {
            dv->ndomains = 2;
            snprintf(dv->backend_reason, sizeof dv->backend_reason, "MPS MLOPart helper serves 2 domains");
            return;
        }
        if (want == LD_BACKEND_MLOPART) {
            snprintf(dv->backend_reason, sizeof dv->backend_reason, "mlopart unavailable: %s", w2);
            return;
        }
        snprintf(why, sizeof why, "%s", w2);
    }
    if ((dv->backend = try_backend(&ld_backend_emulated, d, dv, 2, why, sizeof why))) {
        dv->ndomains = 2;
        snprintf(dv->backend_reason, sizeof dv->backend_reason,
                 "emulated: ordinary memory per slice, no physical locality%s%s", why[0] ? "; " : "", why);
        return;
    }
    snprintf(dv->backend_reason, sizeof dv->backend_reason, "no backend: %s", why);
}

static void init_device(const ld_driver_t *d, ld_device_t *dv) {
    dv->ndomains = 2;
    d->pfn_cuDeviceGetAttribute(&dv->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dv->ordinal);
    dv->native_domains = ld_native_domain_count(d, dv->ordinal);
    dv->gran = 2u << 20;
    if (d->pfn_cuMemGetAllocationGranularity) {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = dv->ordinal;
        size_t g = 0;
        if (d->pfn_cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) == CUDA_SUCCESS && g)
            dv->gran = g;
    }
    choose_backend(d, dv);
    if (dv->backend) LD_INFO(BACKEND, "device %d: backend %s (%s), %d domains, granularity %zu", dv->ordinal, dv->backend->name,
                                      dv->backend_reason, dv->ndomains, dv->gran);
    else LD_WARN(BACKEND, "device %d: tagged allocations pass through: %s", dv->ordinal, dv->backend_reason);
}

ld_device_t *ld_device_get(const ld_driver_t *d, CUdevice dev) {
    if (dev < 0 || dev >= LD_MAX_DEVICES) return NULL;
    ld_device_t *dv = &devices[dev];
    int st = atomic_load_explicit(&dv->state, memory_order_acquire);
    if (st == LD_DEV_READY) return dv;
    int expect = LD_DEV_UNTOUCHED;
    if (atomic_compare_exchange_strong(&dv->state, &expect, LD_DEV_INITIALIZING)) {
        dv->ordinal = dev;
        init_device(d, dv);                  /* driver calls, no lock held */
        pthread_mutex_lock(&init_mu);
        atomic_store_explicit(&dv->state, LD_DEV_READY, memory_order_release);
        pthread_cond_broadcast(&init_cv);
        pthread_mutex_unlock(&init_mu);
        return dv;
    }
    pthread_mutex_lock(&init_mu);
    while (atomic_load(&dv->state) != LD_DEV_READY) pthread_cond_wait(&init_cv, &init_mu);
    pthread_mutex_unlock(&init_mu);
    return dv;
}

ld_device_t *ld_device_peek(int dev) {
    if (dev < 0 || dev >= LD_MAX_DEVICES) return NULL;
    return atomic_load(&devices[dev].state) == LD_DEV_READY ? &devices[dev] : NULL;
}

unsigned long long ld_device_access_mask(int owner) {
    if (owner < 0 || owner >= LD_MAX_DEVICES) return 0;
    return atomic_load(&devices[owner].peers) | (1ull << owner);
}

int ld_device_add_peer(int owner, int accessor) {
    if (owner < 0 || owner >= LD_MAX_DEVICES || accessor < 0 || accessor >= LD_MAX_DEVICES || owner == accessor) return -1;
    atomic_fetch_or(&devices[owner].peers, 1ull << accessor);
    return 0;
}

void ld_device_reset(void) {
    memset(devices, 0, sizeof devices);
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;   /* no thread of the child waits on it */
    init_cv = c;
}

void ld_device_lock_for_fork(void) { pthread_mutex_lock(&init_mu); }
void ld_device_unlock_after_fork(void) { pthread_mutex_unlock(&init_mu); }
