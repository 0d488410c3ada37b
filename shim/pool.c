/* pool.c — capped cache of released physical handles (pool.h). */
#include "shim/pool.h"
#include "shim/config.h"
#include "shim/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

typedef struct entry {
    struct entry *next;
    int dev, domain;
    size_t bytes;
    CUmemGenericAllocationHandle h;
} entry_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static entry_t *head;                     /* most recent first: reuse warm handles */
static uint64_t cached[64];               /* bytes per device */
static atomic_uint_fast64_t hits, misses, trims;

int ld_pool_get(int dev, int domain, size_t bytes, CUmemGenericAllocationHandle *out) {
    pthread_mutex_lock(&mu);
    for (entry_t **pp = &head; *pp; pp = &(*pp)->next) {
        entry_t *e = *pp;
        if (e->dev == dev && e->domain == domain && e->bytes == bytes) {
            *pp = e->next;
            if (dev >= 0 && dev < 64) cached[dev] -= bytes;
            pthread_mutex_unlock(&mu);
            *out = e->h;
            free(e);
            atomic_fetch_add(&hits, 1);
            return 0;
        }
    }
    pthread_mutex_unlock(&mu);
    atomic_fetch_add(&misses, 1);
    return -1;
}

int ld_pool_put(int dev, int domain, size_t bytes, CUmemGenericAllocationHandle h) {
    uint64_t cap = ld_cfg.policy.pool_cap;
    if (!cap || dev < 0 || dev >= 64 || bytes > cap) return -1;
    entry_t *e = malloc(sizeof *e);
    if (!e) return -1;
    e->dev = dev;
    e->domain = domain;
    e->bytes = bytes;
    e->h = h;
    pthread_mutex_lock(&mu);
    if (cached[dev] + bytes > cap) {
        pthread_mutex_unlock(&mu);
        free(e);
        return -1;
    }
    e->next = head;
    head = e;
    cached[dev] += bytes;
    pthread_mutex_unlock(&mu);
    return 0;
}

uint64_t ld_pool_trim(const ld_driver_t *d, int dev) {
    entry_t *take = NULL;
    pthread_mutex_lock(&mu);
    for (entry_t **pp = &head; *pp;) {
        entry_t *e = *pp;
        if (dev < 0 || e->dev == dev) {
            *pp = e->next;
            e->next = take;
            take = e;
            if (e->dev >= 0 && e->dev < 64) cached[e->dev] -= e->bytes;
        } else {
            pp = &e->next;
        }
    }
    pthread_mutex_unlock(&mu);
    uint64_t freed = 0;
    while (take) {
        entry_t *e = take;
        take = e->next;
        if (d && d->cuMemRelease) d->cuMemRelease(e->h);
        freed += e->bytes;
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
    for (int i = 0; i < 64; i++) c += cached[i];
    pthread_mutex_unlock(&mu);
    out->cached_bytes = c;
}

void ld_pool_reset(void) {
    while (head) {
        entry_t *e = head;
        head = e->next;
        free(e);
    }
    for (int i = 0; i < 64; i++) cached[i] = 0;
    atomic_store(&hits, 0);
    atomic_store(&misses, 0);
    atomic_store(&trims, 0);
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    mu = m;
}

void ld_pool_lock_for_fork(void) { pthread_mutex_lock(&mu); }
void ld_pool_unlock_after_fork(void) { pthread_mutex_unlock(&mu); }
