/* track.c — keyed set of the allocations the shim counts beyond its ranges (track.h):
 * a fixed array of hash buckets with chained entries, one mutex. */
#include "shim/track.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

typedef struct node {
    struct node *next;
    int kind;
    ld_track_entry_t e;
} node_t;

#define BUCKETS 4096u   /* chains stay short for the few thousand handles an allocator keeps */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static node_t *bucket[BUCKETS];
static atomic_size_t count[LD_OBJ_KINDS];

static unsigned slot(int kind, uint64_t key) {
    uint64_t h = (key ^ ((uint64_t)kind << 63)) * 0x9E3779B97F4A7C15ull;
    return (unsigned)(h >> 40) % BUCKETS;
}

int ld_track_add(int kind, const ld_track_entry_t *e, int *old) {
    *old = -1;
    node_t *n = malloc(sizeof *n);
    if (!n) return -1;
    n->kind = kind;
    n->e = *e;
    unsigned s = slot(kind, e->key);
    pthread_mutex_lock(&mu);
    for (node_t *x = bucket[s]; x; x = x->next)
        if (x->kind == kind && x->e.key == e->key) {
            *old = x->e.placed;
            x->e = *e;
            pthread_mutex_unlock(&mu);
            free(n);
            return 0;
        }
    n->next = bucket[s];
    bucket[s] = n;
    atomic_fetch_add(&count[kind], 1);
    pthread_mutex_unlock(&mu);
    return 0;
}

int ld_track_take(int kind, uint64_t key, ld_track_entry_t *out) {
    unsigned s = slot(kind, key);
    pthread_mutex_lock(&mu);
    for (node_t **pp = &bucket[s]; *pp; pp = &(*pp)->next) {
        node_t *x = *pp;
        if (x->kind != kind || x->e.key != key) continue;
        *pp = x->next;
        atomic_fetch_sub(&count[kind], 1);
        pthread_mutex_unlock(&mu);
        if (out) *out = x->e;
        free(x);
        return 0;
    }
    pthread_mutex_unlock(&mu);
    return -1;
}

void ld_track_take_device(int kind, int device, void (*fn)(const ld_track_entry_t *, void *), void *arg) {
    node_t *gone = NULL;
    pthread_mutex_lock(&mu);
    for (unsigned s = 0; s < BUCKETS && atomic_load(&count[kind]); s++)
        for (node_t **pp = &bucket[s]; *pp;) {
            node_t *x = *pp;
            if (x->kind != kind || x->e.device != device) {
                pp = &x->next;
                continue;
            }
            *pp = x->next;
            atomic_fetch_sub(&count[kind], 1);
            x->next = gone;
            gone = x;
        }
    pthread_mutex_unlock(&mu);
    while (gone) {
        node_t *x = gone;
        gone = x->next;
        fn(&x->e, arg);
        free(x);
    }
}

int ld_track_any(int kind) { return atomic_load_explicit(&count[kind], memory_order_relaxed) != 0; }

void ld_track_reset(void) {
    for (unsigned s = 0; s < BUCKETS; s++)
        while (bucket[s]) {
            node_t *e = bucket[s];
            bucket[s] = e->next;
            free(e);
        }
    for (int k = 0; k < LD_OBJ_KINDS; k++) atomic_store(&count[k], 0);
}

void ld_track_lock_for_fork(void) { pthread_mutex_lock(&mu); }
void ld_track_unlock_after_fork(void) { pthread_mutex_unlock(&mu); }

size_t ld_track_placed(int kind) {
    size_t n = 0;
    pthread_mutex_lock(&mu);
    for (unsigned s = 0; s < BUCKETS && atomic_load(&count[kind]); s++)
        for (const node_t *x = bucket[s]; x; x = x->next)
            if (x->kind == kind && x->e.placed) n++;
    pthread_mutex_unlock(&mu);
    return n;
}
