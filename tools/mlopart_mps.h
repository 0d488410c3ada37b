/* mlopart_mps.h — the helper's private MPS control daemon, owned by a supervisor process.
 *
 * The helper forks a supervisor before it touches CUDA. The supervisor creates a private
 * directory (mkdtemp, mode 0700, holding pipe/ and log/), starts `nvidia-cuda-mps-control -f`
 * bound to one GPU (CUDA_VISIBLE_DEVICES=GPU-<uuid>, parent-death signal SIGKILL), issues
 * `start_server -uid <uid> -mlopart` (or the MPS v3 `server create --uid=<uid>
 * --locality-domains=true` when the v2 form is refused), and reports "OK <dir>" or
 * "ERR <reason>" on an event pipe. It then waits until the helper's lifeline pipe reaches
 * EOF — the helper quit, crashed, or was killed — sends `quit` to the daemon, waits for it
 * (bounded, then SIGKILL), removes the directory and exits. It keeps a copy of the helper's
 * socket end open until then, so the shim sees EOF on its end only after cleanup is done.
 *
 * Single-threaded use only (the helper calls it before loading libcuda).
 */
#ifndef LDSHIM_MLOPART_MPS_H
#define LDSHIM_MLOPART_MPS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;        /* supervisor */
    int   lifeline;   /* write end, held by the helper; closing it starts the cleanup */
    int   events;     /* read end of the supervisor's report */
} ld_mps_sup_t;

/* Fork the supervisor for GPU `uuid` ("GPU-..."), with startup budget `timeout_ms`.
 * Returns 0, or -1 with a reason in err. */
int ld_mps_sup_start(ld_mps_sup_t *s, const char *uuid, int timeout_ms, char *err, size_t n);

/* Wait for the supervisor's report. 0: dir gets the private directory. -1: err gets the
 * reason (daemon failed, MLOPart refused, timeout, or `sock` reached EOF meanwhile). */
int ld_mps_sup_wait(ld_mps_sup_t *s, int sock, int64_t deadline, char *dir, size_t dn,
                    char *err, size_t n);

/* Remove a directory tree (no symlinks followed). 0 on success. */
int ld_mps_rmtree(const char *dir);

#endif
