/* probe_cache.h — the per-GPU topology cache. Pure C (no CUDA calls, no logging): the
 * caller (shim/probe.c) logs the reasons these functions return.
 *
 * One text file per GPU UUID and driver version, `<dir>/topology-<uuid>-<driver>.txt`:
 * a magic line with the format version, key=value lines (the key again, the maps, the
 * figures), and a final "checksum <FNV-1a 64 of every byte before that line>". It is
 * written to a temporary file (mode 0600) in the directory (created mode 0700) and renamed
 * over the old one, so a reader sees the old file or the new one, never a torn write.
 *
 * Thread-safety: reentrant; concurrent writers of the same file are safe (last rename
 * wins, both files complete). No function keeps a pointer to its arguments.
 */
#ifndef LDSHIM_PROBE_CACHE_H
#define LDSHIM_PROBE_CACHE_H

#include <stddef.h>
#include "shim/probe.h"

#define LD_CACHE_FORMAT 1

typedef struct {
    char     uuid[48];        /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"                */
    int      driver_version;  /* cuDriverGetVersion                                        */
    char     kmod[32];        /* kernel module version ("580.159.04") or ""                */
    uint32_t num_sms, num_domains;
} ld_cache_key_t;

enum { LD_CACHE_HIT = 0, LD_CACHE_MISS = 1, LD_CACHE_STALE = 2, LD_CACHE_BAD = -1 };

/* Directory to use: `opt` if non-NULL and non-empty, else $LDSHIM_CACHE_DIR, else
 * $XDG_CACHE_HOME/ldshim, else $HOME/.cache/ldshim, the variables as the process started
 * with them (ld_opt, ld_env), a relative XDG_CACHE_HOME or HOME counting as unset. Returns
 * 0, or -1 when none can be formed (no absolute HOME, or longer than n). */
int ld_cache_dir(const char *opt, char *out, size_t n);

/* Path of the file for `key` under `dir`. Returns 0, or -1 when it does not fit in n. */
int ld_cache_path(const char *dir, const ld_cache_key_t *key, char *out, size_t n);

/* Read the entry for `key`. On LD_CACHE_HIT fills the map/figure fields of *r (mode_used,
 * attempts, valid, verdict, num_sms, num_domains, near/far, separation, physical,
 * balanced, tpcs_moved) and leaves the rest alone. LD_CACHE_MISS: no file (silent).
 * LD_CACHE_STALE: a sound file for another SM/domain count (re-probe, no warning).
 * LD_CACHE_BAD: corrupted, truncated or foreign (other UUID, driver or format); `why`
 * says which, in one line. */
int ld_cache_load(const char *dir, const ld_cache_key_t *key, ld_probe_result_t *r,
                  char *why, size_t n);

/* Write the entry for `key` atomically. Returns 0, or -1 with `why` set. */
int ld_cache_store(const char *dir, const ld_cache_key_t *key, const ld_probe_result_t *r,
                   char *why, size_t n);

/* The file I/O under both, also used for other per-GPU cache files (shim/compute_groups.c):
 * read a whole file of at most `cap` bytes into buf (cap + 1 bytes, NUL-terminated):
 * LD_CACHE_HIT and *len, LD_CACHE_MISS when absent, LD_CACHE_BAD with `why`; write `len`
 * bytes to `path` (inside `dir`, created mode 0700 if needed) atomically (temporary file of
 * mode 0600, then rename): 0, or -1 with `why`. */
int ld_cache_read_file(const char *path, char *buf, size_t cap, size_t *len, char *why, size_t n);
int ld_cache_write_file(const char *dir, const char *path, const char *data, size_t len, char *why, size_t n);

/* FNV-1a 64 of n bytes: the files' "checksum" line. */
uint64_t ld_cache_checksum(const char *p, size_t n);

#endif
