/* hash.h — <uthash.h> as the shim uses it. uthash (uthash-dev) is a build dependency of
 * libldshim only: no installed header includes this one, so programs built against ldshim.h
 * never need it.
 *
 * uthash's default on a failed allocation is exit(-1), and the shim must never end the program
 * it lives in. With HASH_NONFATAL_OOM, uthash undoes an add it cannot allocate for and leaves
 * the table as it was; the element's hh.tbl is then NULL (set here too, so the contract does
 * not rest on uthash's internals) and the LD_HASH_* macros below say 0, so the caller refuses
 * what it was adding. Allocation is uthash's default malloc/free: only an add allocates (the
 * table at the first add, the bucket array when it grows), always under the caller's own
 * mutex and never with another shim lock held; delete, find and iteration never allocate, so
 * a forked child may clear a table.
 *
 * Tables that use this header name their handle `hh`. */
#ifndef LDSHIM_HASH_H
#define LDSHIM_HASH_H

#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(elt) ((elt)->hh.tbl = NULL)
#include <uthash.h>

/* HASH_ADD_BYHASHVALUE (the caller computed the hash); `ok` is 1 when `add` is in the table,
 * 0 when memory was short (table unchanged). */
#define LD_HASH_ADD_BYHASHVALUE(head, field, len, hashv, add, ok) \
    do {                                                        \
        HASH_ADD_BYHASHVALUE(hh, head, field, len, hashv, add); \
        (ok) = (add)->hh.tbl != NULL;                           \
    } while (0)

/* HASH_REPLACE (the element with the same key leaves the table and comes back in `old`, or
 * NULL); `ok` as above (on 0, `old` has left the table all the same). */
#define LD_HASH_REPLACE(head, field, len, add, old, ok) \
    do {                                                \
        HASH_REPLACE(hh, head, field, len, add, old);   \
        (ok) = (add)->hh.tbl != NULL;                   \
    } while (0)

#endif
