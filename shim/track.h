/* track.h — the allocations the shim counts that are not its own ranges (registry.h):
 * pointers it placed through another api (stream-ordered from a shim pool, managed memory
 * given a preferred domain, and their emulated counterparts) and every VMM handle the
 * program created through the shim (placed or not), so that a free can tell a placed
 * allocation from an ordinary one, and releasing a handle the program imported (not an
 * allocation) is not counted as a free.
 *
 * An entry is keyed by (kind, value). The driver hands a value out again only after the
 * old object is gone, so adding a key that exists replaces the entry and reports the old
 * one, which the caller counts as freed.
 *
 * Thread-safety: every function (one mutex, never held across a driver call). Fork: the
 * child calls ld_track_reset after the fork lock was released. */
#ifndef LDSHIM_TRACK_H
#define LDSHIM_TRACK_H

#include <stddef.h>
#include <stdint.h>

enum { LD_OBJ_PTR = 0, LD_OBJ_HANDLE = 1, LD_OBJ_KINDS };

typedef struct { uint64_t key, ctx; int placed, device; } ld_track_entry_t;   /* ctx: current at allocation */

/* 0 added (*old -1, or the placed flag of the entry it replaced), -1 out of host memory. */
int ld_track_add(int kind, const ld_track_entry_t *e, int *old);
/* 0 and the entry (removed), -1 when the key is not tracked. */
int ld_track_take(int kind, uint64_t key, ld_track_entry_t *out);
/* Remove every entry of `kind` on `device`, then (no lock held) call fn on each. */
void ld_track_take_device(int kind, int device, void (*fn)(const ld_track_entry_t *, void *), void *arg);
/* 1 if any entry of `kind` exists (lock-free: frees skip the lock while none does). */
int ld_track_any(int kind);
/* The entries of `kind` that a placement made (the report's live allocations beyond ranges). */
size_t ld_track_placed(int kind);

void ld_track_reset(void);
void ld_track_lock_for_fork(void);
void ld_track_unlock_after_fork(void);

#endif
