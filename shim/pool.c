/* pool.c — capped cache of whole freed ranges (pool.h). */
#include "shim/pool.h"
#include "shim/config.h"
#include "shim/log.h"
#include "shim/vmm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    struct entry *next;
    ld_range_t r;
} entry_t;

#define POOL_DEVICES 64
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
/* Most recent first: reuse warm ranges. Read without the lock (atomically) to skip the lock
 * while the pool is empty, so every store to it is atomic too, under the lock. */
static entry_t *head;
static uint64_t cached[POOL_DEVICES];     /* reserved bytes kept per device */
static atomic_uint_fast64_t hits, misses, trims;
int ld_exiting;

/* Registered at the first kept range, i.e. after the program initialized CUDA, so it runs
 * before the runtime's own exit handlers tear the driver state down. */
static void pool_at_exit(void) {
    __atomic_store_n(&ld_exiting, 1, __ATOMIC_RELAXED);
    if (__atomic_load_n(&head, __ATOMIC_RELAXED)) ld_pool_trim(ld_driver(), -1);
}
static int exit_registered;

static int same_shape(const ld_range_t *r, int dev, int nslices, size_t slice, const int *dom) {
    if (r->device != dev || r->nslices != nslices || r->slice != slice) return 0;
    for (int i = 0; i < nslices; i++)
        if (r->domain_of[i] != dom[i]) return 0;
    return 1;
}

int ld_pool_take(int dev, int nslices, size_t slice, const int *domain_of, ld_range_t *out) {
    pthread_mutex_lock(&mu);
    for (entry_t **pp = &head; *pp; pp = &(*pp)->next) {
        entry_t *e = *pp;
        if (same_shape(&e->r, dev, nslices, slice, domain_of)) {
            __atomic_store_n(pp, e->next, __ATOMIC_RELAXED);
            cached[dev] -= e->r.reserved;
            pthread_mutex_unlock(&mu);
            *out = e->r;
            free(e);
            atomic_fetch_add_explicit(&hits, 1, memory_order_relaxed);
            return 0;
        }
    }
    pthread_mutex_unlock(&mu);
    atomic_fetch_add_explicit(&misses, 1, memory_order_relaxed);
    return -1;
}

int ld_pool_keep(const ld_range_t *r) {
    uint64_t cap = ld_cfg.policy.pool_cap;
    int dev = r->device;
    if (!cap || dev < 0 || dev >= POOL_DEVICES || r->reserved > cap) return -1;
    entry_t *e = malloc(sizeof *e);
    if (!e) return -1;
    e->r = *r;
    pthread_mutex_lock(&mu);
    if (cached[dev] + r->reserved > cap) {
        pthread_mutex_unlock(&mu);
        free(e);
        return -1;
    }
    e->next = head;
    __atomic_store_n(&head, e, __ATOMIC_RELAXED);
    cached[dev] += r->reserved;
    int first = !exit_registered;
    exit_registered = 1;
    pthread_mutex_unlock(&mu);
    if (first) atexit(pool_at_exit);
    return 0;
}

int ld_pool_contains(CUdeviceptr p) {
    if (!__atomic_load_n(&head, __ATOMIC_RELAXED)) return 0;   /* empty pool: no lock */
    int found = 0;
    pthread_mutex_lock(&mu);
    for (entry_t *e = head; e && !found; e = e->next) found = p >= e->r.base && p < e->r.base + e->r.reserved;
    pthread_mutex_unlock(&mu);
    return found;
}

uint64_t ld_pool_trim(const ld_driver_t *d, int dev) {
    entry_t *take = NULL;
    pthread_mutex_lock(&mu);
    for (entry_t **pp = &head; *pp;) {
        entry_t *e = *pp;
        if (dev < 0 || e->r.device == dev) {
            __atomic_store_n(pp, e->next, __ATOMIC_RELAXED);
            e->next = take;
            take = e;
            cached[e->r.device] -= e->r.reserved;
        } else {
            pp = &e->next;
        }
    }
    pthread_mutex_unlock(&mu);
    uint64_t freed = 0;
    while (take) {
        entry_t *e = take;
        take = e->next;
        if (d) ld_vmm_teardown(d, &e->r);
        freed += e->r.reserved;
        free(e);
    }
    if (freed) {
        atomic_fetch_add(&trims, 1);
        LD_DEBUG("pool: released %llu bytes", (unsigned long long)freed);
    }
    return freed;
}

void ld_pool_stats(ld_pool_stats_t *out) {
    out->hits = atomic_load(&hits);
    out->misses = atomic_load(&misses);
    out->trims = atomic_load(&trims);
    out->cap = ld_cfg.policy.pool_cap;
    uint64_t c = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < POOL_DEVICES; i++) c += cached[i];
    pthread_mutex_unlock(&mu);
    out->cached_bytes = c;
}

void ld_pool_reset(void) {
    while (head) {
        entry_t *e = head;
        __atomic_store_n(&head, e->next, __ATOMIC_RELAXED);
        free(e);
    }
    memset(cached, 0, sizeof cached);
    exit_registered = 0;     /* the child's handler list is the parent's: registering again is harmless */
    atomic_store(&hits, 0);
    atomic_store(&misses, 0);
    atomic_store(&trims, 0);
}

void ld_pool_lock_for_fork(void) { pthread_mutex_lock(&mu); }
void ld_pool_unlock_after_fork(void) { pthread_mutex_unlock(&mu); }
