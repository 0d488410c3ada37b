/* pool.c — capped cache of whole freed ranges (pool.h).
 *
 * A uthash table keyed by the shape (device, slice count, slice bytes, domain of each slice)
 * holds one bucket per shape; each bucket is a most-recent-first list, so a take is one hash
 * lookup and reuses the warmest range of its shape. A bucket whose last range was taken stays
 * in the table, so a program that frees and allocates one size in a loop costs no table
 * allocation per cycle; empty buckets are swept once they outnumber both the buckets in use
 * and POOL_SPARE_BUCKETS, so there are never more of them than max(POOL_SPARE_BUCKETS, in use). */
#include "shim/pool.h"
#include "shim/config.h"
#include "shim/device.h"
#include "shim/hash.h"
#include "shim/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The key: fixed size, zeroed before it is filled (domain_of past nslices stays 0), so
 * uthash's memcmp over its bytes compares only what the shape says. */
typedef struct {
    int device;
    int nslices;
    uint64_t slice;
    uint64_t chunk;             /* bytes per handle: a range is reused with its handles */
    int domain_of[LD_MAX_SLICES];
} shape_t;
_Static_assert(sizeof(shape_t) == 2 * sizeof(int) + 2 * sizeof(uint64_t) + LD_MAX_SLICES * sizeof(int),
               "shape_t must have no padding: its bytes are the hash key");

typedef struct kept {
    struct kept *next;
    ld_range_t r;
} kept_t;

typedef struct {
    shape_t key;
    kept_t *ranges;             /* most recent first: reuse warm ranges */
    UT_hash_handle hh;
} bucket_t;

#define POOL_SPARE_BUCKETS 64     /* empty buckets always worth keeping for reuse */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static bucket_t *table;                    /* under mu */
static size_t nempty;                      /* buckets in the table with no range, under mu */
/* Ranges kept, written under mu and read without it (atomically) to skip the lock while
 * the pool is empty. */
static atomic_size_t nkept;
static int ever_kept;                      /* under mu: ld_pool_keep's *first */
static uint64_t cached[LD_MAX_DEVICES];     /* reserved bytes kept per device */
static atomic_uint_fast64_t hits, misses, trims;

static void shape_of(shape_t *k, int dev, int nslices, size_t slice, size_t chunk, const int *domain_of) {
    memset(k, 0, sizeof *k);
    k->device = dev;
    k->nslices = nslices;
    k->slice = slice;
    k->chunk = chunk && chunk < slice ? chunk : 0;   /* one handle per slice, however said */
    for (int i = 0; i < nslices && i < LD_MAX_SLICES; i++) k->domain_of[i] = domain_of[i];
}

/* The shape's hash, from its fields (uthash's default hashes the key a byte at a time, which
 * would cost a take more than the rest of it): splitmix64's finalizer, so that slice sizes,
 * all multiples of the granularity, still spread over the low bits uthash indexes with. */
static uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
static unsigned shape_hash(const shape_t *k) {
    uint64_t h = mix(k->slice ^ ((uint64_t)(uint32_t)k->device << 32 | (uint32_t)k->nslices));
    h = mix(h ^ k->chunk);
    for (int i = 0; i < k->nslices && i < LD_MAX_SLICES; i++) h = mix(h ^ (uint32_t)k->domain_of[i]);
    return (unsigned)h;
}

static void set_count(size_t n) { atomic_store_explicit(&nkept, n, memory_order_relaxed); }

/* Under mu: drop every empty bucket into *out (a list through hh.next) for freeing after the
 * lock is released. */
static void sweep_empty(bucket_t **out) {
    bucket_t *b, *tmp;
    HASH_ITER(hh, table, b, tmp) {
        if (b->ranges) continue;
        HASH_DEL(table, b);
        b->hh.next = *out;
        *out = b;
    }
    nempty = 0;
}

static void free_buckets(bucket_t *b) {
    while (b) {
        bucket_t *next = b->hh.next;
        free(b);
        b = next;
    }
}

int ld_pool_take(int dev, int nslices, size_t slice, size_t chunk, const int *domain_of, ld_range_t *out) {
    shape_t key;
    shape_of(&key, dev, nslices, slice, chunk, domain_of);
    unsigned hv = shape_hash(&key);
    bucket_t *b = NULL;
    pthread_mutex_lock(&mu);
    HASH_FIND_BYHASHVALUE(hh, table, &key, sizeof key, hv, b);
    if (!b || !b->ranges) {                /* an emptied shape kept for reuse is a miss too */
        pthread_mutex_unlock(&mu);
        atomic_fetch_add_explicit(&misses, 1, memory_order_relaxed);
        return -1;
    }
    kept_t *k = b->ranges;
    b->ranges = k->next;
    bucket_t *swept = NULL;
    if (!b->ranges && ++nempty > POOL_SPARE_BUCKETS && nempty > HASH_COUNT(table) - nempty) sweep_empty(&swept);
    cached[dev] -= k->r.reserved;
    set_count(atomic_load_explicit(&nkept, memory_order_relaxed) - 1);
    pthread_mutex_unlock(&mu);
    *out = k->r;
    free(k);
    free_buckets(swept);
    atomic_fetch_add_explicit(&hits, 1, memory_order_relaxed);
    return 0;
}

int ld_pool_keep(const ld_range_t *r, int *first) {
    uint64_t cap = ld_cfg.policy.pool_cap;
    int dev = r->device;
    if (!cap || dev < 0 || dev >= LD_MAX_DEVICES || r->reserved > cap) return -1;
    kept_t *k = malloc(sizeof *k);
    if (!k) return -1;
    k->r = *r;
    shape_t key;
    shape_of(&key, dev, r->nslices, r->slice, r->chunk, r->domain_of);
    unsigned hv = shape_hash(&key);
    bucket_t *b = NULL;
    pthread_mutex_lock(&mu);
    if (cached[dev] + r->reserved > cap) goto refuse;
    HASH_FIND_BYHASHVALUE(hh, table, &key, sizeof key, hv, b);
    if (!b) {
        /* Under mu, like the table's own bucket-array growth: no other lock is ever held
         * with mu, so malloc cannot deadlock against the shim here. */
        b = calloc(1, sizeof *b);
        if (!b) goto refuse;
        b->key = key;
        int added;
        LD_HASH_ADD_BYHASHVALUE(table, key, sizeof b->key, hv, b, added);
        if (!added) {                      /* no memory for the table: refuse, never exit */
            free(b);
            goto refuse;
        }
    } else if (!b->ranges) {
        nempty--;
    }
    k->next = b->ranges;
    b->ranges = k;
    cached[dev] += r->reserved;
    set_count(atomic_load_explicit(&nkept, memory_order_relaxed) + 1);
    if (first) *first = !ever_kept;
    ever_kept = 1;
    pthread_mutex_unlock(&mu);
    return 0;

refuse:
    pthread_mutex_unlock(&mu);
    free(k);
    return -1;
}

int ld_pool_contains(CUdeviceptr p) {
    if (!atomic_load_explicit(&nkept, memory_order_relaxed)) return 0;   /* empty pool: no lock */
    int found = 0;
    pthread_mutex_lock(&mu);
    /* An interval question, not a key: every kept range is looked at (at most cap/granularity). */
    for (bucket_t *b = table; b && !found; b = b->hh.next)
        for (kept_t *k = b->ranges; k && !found; k = k->next) found = p >= k->r.base && p < k->r.base + k->r.reserved;
    pthread_mutex_unlock(&mu);
    return found;
}

int ld_pool_empty(void) { return atomic_load_explicit(&nkept, memory_order_relaxed) == 0; }

uint64_t ld_pool_drain(int dev, void (*each)(const ld_range_t *, void *), void *arg) {
    kept_t *take = NULL;
    bucket_t *b, *tmp;
    pthread_mutex_lock(&mu);
    size_t n = atomic_load_explicit(&nkept, memory_order_relaxed);
    HASH_ITER(hh, table, b, tmp) {
        if (dev >= 0 && b->key.device != dev) continue;
        if (!b->ranges) nempty--;
        while (b->ranges) {
            kept_t *k = b->ranges;
            b->ranges = k->next;
            k->next = take;
            take = k;
            cached[b->key.device] -= k->r.reserved;
            n--;
        }
        HASH_DEL(table, b);
        free(b);
    }
    set_count(n);
    pthread_mutex_unlock(&mu);
    uint64_t freed = 0;
    while (take) {
        kept_t *k = take;
        take = k->next;
        /* The kept range owns its handle array: handed on to `each` (vmm.c's teardown frees
         * it), or freed here when the ranges are only forgotten. */
        if (each) each(&k->r, arg);
        else free(k->r.handles);
        freed += k->r.reserved;
        free(k);
    }
    if (freed) {
        atomic_fetch_add(&trims, 1);
        LD_DEBUG(POOL, "released %llu bytes", (unsigned long long)freed);
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
    for (int i = 0; i < LD_MAX_DEVICES; i++) c += cached[i];
    pthread_mutex_unlock(&mu);
    out->cached_bytes = c;
}

size_t ld_pool_shape_count(size_t *entries) {
    pthread_mutex_lock(&mu);
    size_t all = HASH_COUNT(table), n = all - nempty;
    pthread_mutex_unlock(&mu);
    if (entries) *entries = all;
    return n;
}

/* No driver call and no allocation: frees only (the child is single-threaded, the lock was
 * held across fork, so the table is consistent). */
void ld_pool_reset(void) {
    bucket_t *b, *tmp;
    HASH_ITER(hh, table, b, tmp) {
        while (b->ranges) {
            kept_t *k = b->ranges;
            b->ranges = k->next;
            free(k->r.handles);
            free(k);
        }
        HASH_DEL(table, b);
        free(b);
    }
    set_count(0);
    nempty = 0;
    memset(cached, 0, sizeof cached);
    ever_kept = 0;           /* the child's exit handlers are the parent's: registering again is harmless */
    atomic_store(&hits, 0);
    atomic_store(&misses, 0);
    atomic_store(&trims, 0);
}

void ld_pool_lock_for_fork(void) { pthread_mutex_lock(&mu); }
void ld_pool_unlock_after_fork(void) { pthread_mutex_unlock(&mu); }
