/* registry.c — sorted interval array of live shim ranges (see registry.h). */
#include "shim/registry.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static ld_range_t *ranges;        /* sorted by base */
static size_t n, cap;
static atomic_size_t live_count;
static atomic_uint_fast64_t live_bytes;

/* First index whose range ends after p (i.e. the only candidate that may contain p). */
static size_t lower(CUdeviceptr p) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ranges[mid].base + ranges[mid].reserved <= p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

int ld_registry_insert(const ld_range_t *r) {
    if (!r->reserved) return -1;
    pthread_rwlock_wrlock(&lock);
    int rc = -1;
    size_t i = lower(r->base);
    if (i < n && ranges[i].base < r->base + r->reserved) goto out;   /* overlap */
    if (n == cap) {
        size_t ncap = cap ? cap * 2 : 64;
        ld_range_t *nr = realloc(ranges, ncap * sizeof *nr);
        if (!nr) goto out;
        ranges = nr;
        cap = ncap;
    }
    memmove(&ranges[i + 1], &ranges[i], (n - i) * sizeof *ranges);
    ranges[i] = *r;
    n++;
    atomic_fetch_add(&live_count, 1);
    atomic_fetch_add(&live_bytes, r->size);
    rc = 0;
out:
    pthread_rwlock_unlock(&lock);
    return rc;
}

int ld_registry_find(CUdeviceptr p, ld_range_t *out) {
    if (atomic_load_explicit(&live_count, memory_order_relaxed) == 0) return -1;
    int rc = -1;
    pthread_rwlock_rdlock(&lock);
    size_t i = lower(p);
    if (i < n && ranges[i].base <= p) {
        if (out) *out = ranges[i];
        rc = 0;
    }
    pthread_rwlock_unlock(&lock);
    return rc;
}

int ld_registry_remove(CUdeviceptr base, ld_range_t *out) {
    if (atomic_load_explicit(&live_count, memory_order_relaxed) == 0) return -1;
    int rc = -1;
    pthread_rwlock_wrlock(&lock);
    size_t i = lower(base);
    if (i < n && ranges[i].base <= base) {
        if (ranges[i].base != base) {
            rc = 1;
        } else {
            if (out) *out = ranges[i];
            atomic_fetch_sub(&live_bytes, ranges[i].size);
            memmove(&ranges[i], &ranges[i + 1], (n - i - 1) * sizeof *ranges);
            n--;
            atomic_fetch_sub(&live_count, 1);
            rc = 0;
        }
    }
    pthread_rwlock_unlock(&lock);
    return rc;
}

size_t ld_registry_take_if(int (*pred)(const ld_range_t *, void *), void *arg, ld_range_t **out) {
    *out = NULL;
    if (atomic_load(&live_count) == 0) return 0;
    pthread_rwlock_wrlock(&lock);
    size_t k = 0, j = 0;
    ld_range_t *v = NULL;
    for (size_t i = 0; i < n; i++)
        if (pred(&ranges[i], arg)) k++;
    if (k && (v = malloc(k * sizeof *v))) {
        k = 0;
        for (size_t i = 0; i < n; i++) {
            if (pred(&ranges[i], arg)) {
                v[k++] = ranges[i];
                atomic_fetch_sub(&live_bytes, ranges[i].size);
                atomic_fetch_sub(&live_count, 1);
            } else {
                ranges[j++] = ranges[i];
            }
        }
        n = j;
    } else {
        k = 0;
    }
    pthread_rwlock_unlock(&lock);
    *out = v;
    return k;
}

size_t ld_registry_snapshot(int device, ld_range_t *out, size_t max) {
    size_t k = 0;
    pthread_rwlock_rdlock(&lock);
    for (size_t i = 0; i < n; i++) {
        if (device >= 0 && ranges[i].device != device) continue;
        if (k < max) out[k] = ranges[i];
        k++;
    }
    pthread_rwlock_unlock(&lock);
    return k;
}

size_t ld_registry_count(void) { return atomic_load(&live_count); }
uint64_t ld_registry_bytes(void) { return atomic_load(&live_bytes); }

static void reset(int abandon) {
    /* In a forked child the array is abandoned, not freed: another thread of the parent may
     * have been between a realloc of it and the store of the new pointer at the fork. It
     * stays reachable so leak checkers do not count it. */
    static ld_range_t *volatile abandoned;
    if (abandon) {
        abandoned = ranges;
        (void)abandoned;
    } else {
        free(ranges);
    }
    ranges = NULL;
    n = cap = 0;
    atomic_store(&live_count, 0);
    atomic_store(&live_bytes, 0);
    /* A glibc rwlock cannot be unlocked by the child (it records the writer's thread id),
     * so it is never held across fork and is simply re-initialized. */
    pthread_rwlock_t fresh = PTHREAD_RWLOCK_INITIALIZER;
    lock = fresh;
}

void ld_registry_reset(void) { reset(0); }
void ld_registry_reset_in_child(void) { reset(1); }

