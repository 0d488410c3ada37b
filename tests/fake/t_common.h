/* t_common.h — helpers shared by the test programs run under the shim (tests/fake/t_*.c).
 *
 * A program prints its observations as "key=value" lines on stdout (the runner
 * tests/fake/run_cases.py compares them) and checks its own invariants with CHECK, which
 * prints "<prog>: check failed at line N: <expr>" on stderr and exits 1.
 * The shim's API and the fake's hooks are resolved at run time (dlsym), so the same program
 * runs with and without the shim.
 */
#ifndef T_COMMON_H
#define T_COMMON_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "shim/ldshim.h"

static const char *t_prog = "t";

#define CHECK(e) do { if (!(e)) { \
        fprintf(stderr, "%s: check failed at line %d: %s\n", t_prog, __LINE__, #e); \
        exit(1); } } while (0)
#define CHECK_RC(call, want) do { long t_rc_ = (long)(call); if (t_rc_ != (long)(want)) { \
        fprintf(stderr, "%s: check failed at line %d: %s returned %ld, expected %ld\n", \
                t_prog, __LINE__, #call, t_rc_, (long)(want)); exit(1); } } while (0)

/* The shim's host API, NULL when no shim is loaded. */
typedef int (*t_ptrinfo_fn)(uint64_t, ldshim_ptr_info_t *);
static __attribute__((unused)) t_ptrinfo_fn t_ptrinfo(void) {
    static t_ptrinfo_fn fn;
    static int done;
    if (!done) { fn = (t_ptrinfo_fn)dlsym(RTLD_DEFAULT, "ldshim_pointer_info"); done = 1; }
    return fn;
}
/* 1 and *out filled when the shim owns ptr. */
static __attribute__((unused)) int t_is_shim(uint64_t ptr, ldshim_ptr_info_t *out) {
    ldshim_ptr_info_t tmp;
    t_ptrinfo_fn fn = t_ptrinfo();
    return fn && fn(ptr, out ? out : &tmp) == 0;
}

/* The fake driver's hooks (fake_api.h), found through libcuda.so.1 which must be loaded. */
typedef struct {
    int (*sync_count)(void);
    void (*counts)(int out[5]);
    int (*domain_of)(const void *);
    int (*device_of)(const void *);
    int (*access_of)(const void *, int);
} t_fake_t;
static t_fake_t t_fake;
static __attribute__((unused)) void t_fake_init(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h) h = dlopen("libcuda.so.1", RTLD_NOW);
    CHECK(h != NULL);
    t_fake.sync_count = (int (*)(void))dlsym(h, "fakecuda_sync_count");
    t_fake.counts = (void (*)(int *))dlsym(h, "fakecuda_counts");
    t_fake.domain_of = (int (*)(const void *))dlsym(h, "fakecuda_domain_of");
    t_fake.device_of = (int (*)(const void *))dlsym(h, "fakecuda_device_of");
    t_fake.access_of = (int (*)(const void *, int))dlsym(h, "fakecuda_access_of");
    CHECK(t_fake.sync_count && t_fake.counts && t_fake.domain_of && t_fake.device_of && t_fake.access_of);
}

/* Print what the shim and the fake know about an allocation of `size` at p:
 *   <tag>_shim=0|1  <tag>_slices=N  <tag>_domains=d0,d1,..  (fake's view per slice)
 *   <tag>_expect=e0,e1,..  (shim's domain_of[])  <tag>_device=D  <tag>_rule=NAME
 * For a plain pointer: <tag>_shim=0 <tag>_domains=<domain of base>. */
static __attribute__((unused)) void t_describe(const char *tag, uint64_t p, size_t size) {
    ldshim_ptr_info_t in;
    if (!t_is_shim(p, &in)) {
        printf("%s_shim=0\n%s_domains=%d\n%s_device=%d\n", tag, tag, t_fake.domain_of((void *)p), tag,
               t_fake.device_of((void *)p));
        return;
    }
    CHECK(in.base == p);
    CHECK(in.size == size);
    CHECK(in.num_domains >= 1 && in.num_domains <= 8);
    CHECK(in.slice > 0 && in.reserved >= in.size);
    printf("%s_shim=1\n%s_slices=%d\n%s_domains=", tag, tag, in.num_domains, tag);
    for (int d = 0; d < in.num_domains; d++)
        printf("%s%d", d ? "," : "", t_fake.domain_of((void *)(uintptr_t)(p + (uint64_t)d * in.slice)));
    printf("\n%s_expect=", tag);
    for (int d = 0; d < in.num_domains; d++) printf("%s%d", d ? "," : "", in.domain_of[d]);
    printf("\n%s_device=", tag);
    for (int d = 0; d < in.num_domains; d++)
        printf("%s%d", d ? "," : "", t_fake.device_of((void *)(uintptr_t)(p + (uint64_t)d * in.slice)));
    printf("\n%s_rule=%s\n%s_backend=%s\n", tag, in.rule, tag, in.backend);
}

/* Write a pattern over every byte of [p, p+n) and read it back. */
static __attribute__((unused)) void t_fill_check(uint64_t p, size_t n, unsigned seed) {
    unsigned char *b = (unsigned char *)(uintptr_t)p;
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(i * 131u + seed);
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)(i * 131u + seed)) {
            fprintf(stderr, "%s: byte %zu of %#llx reads %u\n", t_prog, i, (unsigned long long)p, b[i]);
            exit(1);
        }
}

/* Sizes given as "8MiB", "4096", "1KiB". */
static __attribute__((unused)) size_t t_size(const char *s) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (!strcmp(end, "KiB")) v <<= 10;
    else if (!strcmp(end, "MiB")) v <<= 20;
    else if (!strcmp(end, "GiB")) v <<= 30;
    else if (*end) { fprintf(stderr, "%s: bad size '%s'\n", t_prog, s); exit(2); }
    return (size_t)v;
}

#endif
