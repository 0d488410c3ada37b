/* mlopart_proto.h — the wire protocol between libldshim.so and ldshim-mlopart-helper, plus
 * the small process plumbing both sides share (deadline I/O, fd passing, environments).
 *
 * Transport: one anonymous AF_UNIX SOCK_STREAM socketpair per helper. Messages are
 * fixed-size little structs (same host, same ABI: both ends are built from this header).
 * Every request gets exactly one reply with the same id and op. A successful ALLOC reply
 * carries exactly one file descriptor (SCM_RIGHTS) attached to its first byte.
 *
 *   START  domain = expected domain count     -> value = device count the helper sees
 *   ALLOC  bytes, domain                      -> status 0 + fd (POSIX-fd shareable handle)
 *   PING                                      -> status 0
 *   QUIT                                      -> status 0, then the helper exits
 *
 * A non-zero status is a CUresult with a message: a per-request failure, the helper stays.
 * Anything else (bad magic/version/id/op, EOF, timeout, missing fd) is a broken helper.
 *
 * Thread-safety: every function here is reentrant; callers serialize use of one socket.
 * Ownership: functions never close the socket they are given; an fd received into *fd_out
 * belongs to the caller; on any error no fd is returned (received ones are closed).
 */
#ifndef LDSHIM_MLOPART_PROTO_H
#define LDSHIM_MLOPART_PROTO_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define LD_MLO_MAGIC    0x4f4c444cu   /* "LDLO" */
#define LD_MLO_VERSION  1u
#define LD_MLO_MSG_MAX  192           /* reply message, NUL-terminated */
#define LD_MLO_HELPER_FD 3            /* the helper's end of the socketpair */
#define LD_MLO_HELPER_NAME "ldshim-mlopart-helper"
/* Set in the helper's environment (inherited by the MPS processes it starts): a shim that
 * finds it in its constructor stays inert, so the helper never runs the shim, whatever
 * LD_PRELOAD still names. */
#define LD_MLO_ENV_MARKER  "LDSHIM_INSIDE_MLOPART_HELPER"

/* Defaults (ms); LDSHIM_MLOPART_TIMEOUT_MS overrides both. */
#define LD_MLO_REQUEST_TIMEOUT_MS 10000
#define LD_MLO_START_TIMEOUT_MS   30000

typedef enum { LD_MLO_OP_START = 1, LD_MLO_OP_ALLOC = 2, LD_MLO_OP_PING = 3, LD_MLO_OP_QUIT = 4 }
    ld_mlo_op_t;

typedef struct {
    uint32_t magic, version;
    uint64_t id;
    uint32_t op;
    int32_t  domain;        /* ALLOC: domain; START: expected domain count */
    uint64_t bytes;         /* ALLOC: size (a multiple of the granularity)  */
    uint64_t reserved;      /* 0 */
} ld_mlo_req_t;

typedef struct {
    uint32_t magic, version;
    uint64_t id;
    uint32_t op;
    int32_t  status;        /* CUresult, 0 = success */
    int32_t  value;         /* START: device count   */
    uint32_t has_fd;        /* 1: one fd rides on this reply */
    char     msg[LD_MLO_MSG_MAX];
} ld_mlo_rep_t;

/* I/O results: 0 or one of these. */
enum {
    LD_MLO_IO_OK = 0,
    LD_MLO_IO_TIMEOUT = -1,   /* deadline passed                                    */
    LD_MLO_IO_EOF = -2,       /* peer closed (possibly mid-message)                 */
    LD_MLO_IO_ERROR = -3,     /* socket error (errno-level)                         */
    LD_MLO_IO_GARBAGE = -4,   /* bytes that are not a valid message                 */
    LD_MLO_IO_NOFD = -5,      /* a reply promised an fd that did not arrive         */
};

/* Fixed words for messages ("timeout", "EOF", ...). Never NULL. */
const char *ld_mlo_io_str(int rc);

/* Monotonic clock in ms, and a deadline `ms` from now (ms < 0: none, returns -1). */
int64_t ld_mlo_now_ms(void);
int64_t ld_mlo_deadline(int ms);

/* `dflt`, or LDSHIM_MLOPART_TIMEOUT_MS when it holds a positive integer. */
int ld_mlo_timeout_ms(int dflt);

/* 1 when the comma-separated test-hook list LDSHIM_MLOPART_TEST_HOOK contains `word`.
 * Test-only behaviour switches; documented in doc/mlopart.md. */
int ld_mlo_hook(const char *word);

/* Write all `n` bytes (looping over partial writes and EINTR; MSG_NOSIGNAL), optionally
 * attaching `pass_fd` (>= 0) to the first byte, in pieces of at most `chunk` bytes when
 * chunk > 0 (tests). Returns LD_MLO_IO_*. */
int ld_mlo_write_all(int sock, const void *buf, size_t n, int pass_fd, size_t chunk,
                     int64_t deadline);

/* Read exactly `n` bytes. When fd_out is not NULL, the first descriptor that arrives with
 * the bytes is stored there (it must be -1 on entry; extra ones are closed); with fd_out
 * NULL any arriving descriptor is closed. On failure a received fd is closed and *fd_out
 * reset to -1. EOF before the first byte and EOF mid-message are both LD_MLO_IO_EOF. */
int ld_mlo_read_all(int sock, void *buf, size_t n, int *fd_out, int64_t deadline);

/* Requests and replies: fill magic/version, validate on receipt. */
void ld_mlo_req_init(ld_mlo_req_t *r, uint64_t id, ld_mlo_op_t op, int32_t domain,
                     uint64_t bytes);
void ld_mlo_rep_init(ld_mlo_rep_t *r, const ld_mlo_req_t *for_req, int32_t status,
                     const char *msg);
int ld_mlo_send_req(int sock, const ld_mlo_req_t *r, size_t chunk, int64_t deadline);
int ld_mlo_recv_req(int sock, ld_mlo_req_t *r, int64_t deadline);
int ld_mlo_send_rep(int sock, const ld_mlo_rep_t *r, int pass_fd, size_t chunk,
                    int64_t deadline);
/* Receives a reply and checks it answers `req` (id, op); status 0 ALLOC replies must carry
 * an fd (*fd_out, caller closes). r->msg is always NUL-terminated afterwards. */
int ld_mlo_recv_rep(int sock, const ld_mlo_req_t *req, ld_mlo_rep_t *r, int *fd_out,
                    int64_t deadline);

/* A new NULL-terminated environment: `src` minus variables named in `drop` (NULL-ended
 * list of names), minus the LD_PRELOAD entries that are the shim object `self` (the path
 * dladdr gives for the loaded shim: an entry naming the same file, by path or by device and
 * inode, or a bare name equal to its file name; the variable is dropped when nothing
 * remains; NULL self drops nothing), plus `add` ("NAME=value" strings, NULL-ended,
 * replacing same names). Returns NULL on out-of-memory. Free with ld_mlo_env_free. */
char **ld_mlo_env_build(char *const *src, const char *const *drop, const char *const *add,
                        const char *self);
void ld_mlo_env_free(char **env);

/* --- Client side (shim/mlopart_client.c): one helper process seen from the shim. ------
 *
 * Thread-safety: the backend holds one mutex per helper around every call except
 * ld_mlo_helper_signal, which may run from another thread (a program exiting while a request
 * is stuck); `pmu` orders it against reaping and closing.
 * Ownership: the struct owns the socket and the child process until kill/quit/forget.
 *
 * NOTES: the helper is signalled only while it is provably our unreaped child. Its pidfd
 * (opened right after the spawn and checked with waitid(WNOWAIT) to be our child) names that
 * process and no other, even after the program reaped it and the pid was reused. Where the
 * kernel has no pidfd (< 5.3) the pid is signalled only while waitid(WNOHANG|WNOWAIT) shows
 * it as our child still running: a reaped helper's pid is never signalled. */
typedef struct {
    int      pid;        /* helper process (messages), 0 when none */
    int      pidfd;      /* -1 when none                                               */
    int      nopidfd;    /* 1: the kernel has no pidfd; prove ownership by waitid      */
    int      sock;       /* the shim's end, -1 when none */
    uint64_t next_id;
    pthread_mutex_t pmu; /* guards pid/pidfd/nopidfd between signal, reap and close    */
} ld_mlo_helper_t;

#define LD_MLO_HELPER_INIT { 0, -1, 0, -1, 1, PTHREAD_MUTEX_INITIALIZER }

/* Where the helper binary is: $LDSHIM_MLOPART_HELPER (test setting), else the directory of
 * the object holding this code (libldshim.so) + "/ldshim-mlopart-helper". 0 or -1 + why. */
int ld_mlo_helper_path(char *out, size_t n, char *why, size_t wn);

/* Spawn the helper for GPU `uuid` and run START with `ndomains`. 0: ready, *ndev = devices
 * it sees. -1: why holds the reason and nothing is left running (a helper that declined is
 * given `timeout_ms` to clean up its daemon and directory, then killed). Uses posix_spawn:
 * safe from any thread of a multi-threaded program. */
int ld_mlo_helper_spawn(ld_mlo_helper_t *h, const char *path, const char *uuid, int ndomains,
                        int timeout_ms, int *ndev, char *why, size_t n);

/* One request/reply. LD_MLO_IO_OK: *rep is valid (rep->status may be a per-request CUDA
 * error) and *fd_out holds the fd of a successful ALLOC (caller closes). Any other value:
 * the helper is broken; the caller should ld_mlo_helper_kill() it. */
int ld_mlo_helper_call(ld_mlo_helper_t *h, ld_mlo_op_t op, int domain, uint64_t bytes,
                       int timeout_ms, ld_mlo_rep_t *rep, int *fd_out);

/* Polite stop: QUIT, wait (up to timeout_ms) for the socket's EOF, which comes only after
 * the helper's supervisor removed the daemon and directory; then reap. Kills on timeout. */
void ld_mlo_helper_quit(ld_mlo_helper_t *h, int timeout_ms);

/* Broken helper: SIGKILL it, wait up to timeout_ms for its cleanup (EOF), reap. */
void ld_mlo_helper_kill(ld_mlo_helper_t *h, int timeout_ms);

/* In a forked child: close this process's copy of the socket, signal nothing. */
void ld_mlo_helper_forget(ld_mlo_helper_t *h);

/* Send `sig` to the helper only while it is provably our unreaped child (see NOTES). Safe
 * from a thread other than the one using the helper. */
void ld_mlo_helper_signal(ld_mlo_helper_t *h, int sig);

#endif /* LDSHIM_MLOPART_PROTO_H */
