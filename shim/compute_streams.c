/* compute_streams.c — per-thread streams and per-thread green contexts of compute binding, and
 * the green contexts retired at a reset (contract: compute_streams.h). */
#include "shim/compute_streams.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define TLS_SLOTS        8        /* devices one thread can hold per-thread streams on        */

static atomic_uint gen[LD_MAX_DEVICES];   /* bumped when a device's streams are destroyed   */

typedef struct tblock {
    ld_thread_slot_t slot[TLS_SLOTS];
    int n;
    struct tblock *prev, *next;
} tblock_t;

/* A per-thread green context whose thread exited. Streams, events and modules the thread
 * created in it may still be used by other threads, so it lives on until a reset (or the end
 * of the process), and the next thread that needs one takes it (so the number never exceeds
 * the threads alive at once). */
typedef struct idle_green { struct idle_green *next; int dev; unsigned gen; CUgreenCtx green; CUcontext gctx; } idle_t;

static pthread_mutex_t blocks_mu = PTHREAD_MUTEX_INITIALIZER;
static tblock_t *blocks;
static idle_t *idle;                 /* blocks_mu                                             */
static pthread_key_t block_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static int key_ok;
static __thread tblock_t *t_block;

/* ---- retired green contexts ------------------------------------------------------------ */

/* A green context destroyed at a reset (or the last release) may still be current on a
 * thread that never made the primary current again; what that thread is told stays the
 * primary. A handle the driver hands out again (a new context at the same address) leaves
 * the list. */
#define RETIRED_MAX 256
static pthread_mutex_t retired_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { CUcontext gctx, primary; } retired[RETIRED_MAX];
static int retired_next;
static atomic_int nretired;          /* entries in use                                       */

void ld_context_retire(CUcontext gctx, CUcontext primary) {
    if (!gctx || !primary) return;
    pthread_mutex_lock(&retired_mu);
    if (!retired[retired_next].gctx) atomic_fetch_add(&nretired, 1);
    retired[retired_next].gctx = gctx;
    retired[retired_next].primary = primary;
    retired_next = (retired_next + 1) % RETIRED_MAX;
    pthread_mutex_unlock(&retired_mu);
}

CUcontext ld_context_retired_primary(CUcontext c) {
    if (!atomic_load_explicit(&nretired, memory_order_relaxed)) return NULL;
    CUcontext p = NULL;
    pthread_mutex_lock(&retired_mu);
    for (int i = 0; i < RETIRED_MAX && !p; i++)
        if (retired[i].gctx == c) p = retired[i].primary;
    pthread_mutex_unlock(&retired_mu);
    return p;
}

void ld_compute_forget_handle(CUcontext c) {
    if (!c || !atomic_load(&nretired)) return;
    pthread_mutex_lock(&retired_mu);
    for (int i = 0; i < RETIRED_MAX; i++)
        if (retired[i].gctx == c) {
            retired[i].gctx = retired[i].primary = NULL;
            atomic_fetch_sub(&nretired, 1);
        }
    pthread_mutex_unlock(&retired_mu);
}

static void destroy_slot(const ld_driver_t *d, ld_thread_slot_t *s) {
    if (s->stream) d->pfn_cuStreamDestroy_v2(s->stream);
    if (s->gctx && s->dev >= 0) ld_context_retire(s->gctx, ld_compute_primary(s->dev));
    if (s->green && d->pfn_cuGreenCtxDestroy) d->pfn_cuGreenCtxDestroy(s->green);
    memset(s, 0, sizeof *s);
    s->dev = -1;
}

/* Thread exit: its streams go (a stream with work left is released by the driver when the
 * work is done), its green contexts wait for the next thread (idle_t), and its block leaves
 * the list. */
static void block_dtor(void *p) {
    tblock_t *b = p;
    const ld_driver_t *d = ld_driver();
    pthread_mutex_lock(&blocks_mu);
    if (b->prev) b->prev->next = b->next;
    else if (blocks == b) blocks = b->next;
    if (b->next) b->next->prev = b->prev;
    for (int i = 0; i < b->n; i++) {
        ld_thread_slot_t *s = &b->slot[i];
        if (!d || s->dev < 0 || s->gen != atomic_load(&gen[s->dev])) continue;
        idle_t *x = s->green ? malloc(sizeof *x) : NULL;
        if (x) {
            *x = (idle_t){ idle, s->dev, s->gen, s->green, s->gctx };
            idle = x;
            s->green = NULL;
            s->gctx = NULL;
        }
        destroy_slot(d, s);
    }
    pthread_mutex_unlock(&blocks_mu);
    free(b);
    t_block = NULL;
}

static void make_key(void) { key_ok = pthread_key_create(&block_key, block_dtor) == 0; }

static tblock_t *my_block(void) {
    if (t_block) return t_block;
    pthread_once(&key_once, make_key);
    if (!key_ok) return NULL;
    tblock_t *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    for (int i = 0; i < TLS_SLOTS; i++) b->slot[i].dev = -1;
    pthread_mutex_lock(&blocks_mu);
    b->next = blocks;
    if (blocks) blocks->prev = b;
    blocks = b;
    pthread_mutex_unlock(&blocks_mu);
    pthread_setspecific(block_key, b);
    t_block = b;
    return b;
}

/* This thread's slot for `dev` (current generation), creating it when `create`. */
ld_thread_slot_t *ld_thread_slot(int dev, int create) {
    tblock_t *b = t_block ? t_block : (create ? my_block() : NULL);
    if (!b) return NULL;
    unsigned g = atomic_load(&gen[dev]);
    ld_thread_slot_t *free_slot = NULL;
    for (int i = 0; i < b->n; i++) {
        ld_thread_slot_t *s = &b->slot[i];
        if (s->dev == dev && s->gen == g) return s;
        if (!free_slot && (s->dev < 0 || s->gen != atomic_load(&gen[s->dev]))) free_slot = s;
    }
    if (!create) return NULL;
    if (!free_slot) {
        if (b->n == TLS_SLOTS) return NULL;
        free_slot = &b->slot[b->n++];
    }
    pthread_mutex_lock(&blocks_mu);
    memset(free_slot, 0, sizeof *free_slot);
    free_slot->dev = dev;
    free_slot->gen = g;
    pthread_mutex_unlock(&blocks_mu);
    return free_slot;
}

/* Destroy every thread's streams/contexts of `dev` (-1: all devices) and invalidate them. */
void ld_thread_objects_destroy(const ld_driver_t *d, int dev) {
    pthread_mutex_lock(&blocks_mu);
    for (tblock_t *b = blocks; b; b = b->next)
        for (int i = 0; i < b->n; i++) {
            ld_thread_slot_t *s = &b->slot[i];
            if (s->dev < 0 || (dev >= 0 && s->dev != dev) || s->gen != atomic_load(&gen[s->dev])) continue;
            destroy_slot(d, s);
        }
    for (idle_t **pp = &idle; *pp;) {
        idle_t *x = *pp;
        if (dev >= 0 && x->dev != dev) { pp = &x->next; continue; }
        *pp = x->next;
        if (x->gen == atomic_load(&gen[x->dev])) {
            ld_context_retire(x->gctx, ld_compute_primary(x->dev));
            if (d->pfn_cuGreenCtxDestroy) d->pfn_cuGreenCtxDestroy(x->green);
        }
        free(x);
    }
    for (int k = 0; k < LD_MAX_DEVICES; k++)
        if (dev < 0 || k == dev) atomic_fetch_add(&gen[k], 1);
    pthread_mutex_unlock(&blocks_mu);
}

/* The device whose per-thread green context (of any thread, or idle) `c` is; -1 if none. */
int ld_thread_context_owner(CUcontext c) {
    int dev = -1;
    pthread_mutex_lock(&blocks_mu);
    for (tblock_t *b = blocks; b && dev < 0; b = b->next)
        for (int i = 0; i < b->n; i++) {
            const ld_thread_slot_t *s = &b->slot[i];
            if (s->dev >= 0 && s->gctx == c && s->gen == atomic_load(&gen[s->dev])) { dev = s->dev; break; }
        }
    for (const idle_t *x = idle; x && dev < 0; x = x->next)
        if (x->gctx == c && x->gen == atomic_load(&gen[x->dev])) dev = x->dev;
    pthread_mutex_unlock(&blocks_mu);
    return dev;
}

/* ---- what compute.c asks of them ----------------------------------------------------------- */

void ld_thread_slot_take_idle(ld_thread_slot_t *s) {
    pthread_mutex_lock(&blocks_mu);
    for (idle_t **pp = &idle; *pp; pp = &(*pp)->next) {
        idle_t *x = *pp;
        if (x->dev != s->dev || x->gen != s->gen) continue;
        *pp = x->next;
        s->green = x->green;
        s->gctx = x->gctx;
        free(x);
        break;
    }
    pthread_mutex_unlock(&blocks_mu);
}

void ld_thread_slot_set_context(ld_thread_slot_t *s, CUgreenCtx g, CUcontext c) {
    pthread_mutex_lock(&blocks_mu);
    s->green = g;
    s->gctx = c;
    pthread_mutex_unlock(&blocks_mu);
}

void ld_thread_slot_set_stream(ld_thread_slot_t *s, CUstream st) {
    pthread_mutex_lock(&blocks_mu);
    s->stream = st;
    pthread_mutex_unlock(&blocks_mu);
}

void ld_thread_objects_reset(void) {
    for (int dev = 0; dev < LD_MAX_DEVICES; dev++) atomic_fetch_add(&gen[dev], 1);
    memset(retired, 0, sizeof retired);
    while (idle) {
        idle_t *x = idle;
        idle = x->next;
        free(x);
    }
    retired_next = 0;
    atomic_store(&nretired, 0);
}

void ld_thread_objects_lock(void) {
    pthread_mutex_lock(&blocks_mu);
    pthread_mutex_lock(&retired_mu);
}

void ld_thread_objects_unlock(void) {
    pthread_mutex_unlock(&retired_mu);
    pthread_mutex_unlock(&blocks_mu);
}
