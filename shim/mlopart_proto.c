/* mlopart_proto.c — wire protocol and shared plumbing for the MLOPart helper (see
 * mlopart_proto.h). Linked into libldshim.so and into ldshim-mlopart-helper. */
#include "shim/mlopart_proto.h"
#include "shim/options.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *ld_mlo_io_str(int rc) {
    switch (rc) {
    case LD_MLO_IO_OK: return "ok";
    case LD_MLO_IO_TIMEOUT: return "timeout";
    case LD_MLO_IO_EOF: return "EOF (helper exited)";
    case LD_MLO_IO_ERROR: return "socket error";
    case LD_MLO_IO_GARBAGE: return "garbage on the socket";
    case LD_MLO_IO_NOFD: return "file descriptor not received";
    default: return "unknown I/O result";
    }
}

int64_t ld_mlo_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t ld_mlo_deadline(int ms) { return ms < 0 ? -1 : ld_mlo_now_ms() + ms; }

int ld_mlo_timeout_ms(int dflt) {
    const char *s = ld_opt(LD_OPT_MLOPART_TIMEOUT_MS);
    if (!s) return dflt;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v <= 0 || v > 24L * 3600 * 1000) return dflt;
    return (int)v;
}

int ld_mlo_hook(const char *word) {
    const char *s = ld_opt(LD_OPT_MLOPART_TEST_HOOK);
    size_t wl = strlen(word);
    while (s && *s) {
        const char *e = strchr(s, ',');
        size_t l = e ? (size_t)(e - s) : strlen(s);
        if (l == wl && memcmp(s, word, l) == 0) return 1;
        s = e ? e + 1 : NULL;
    }
    return 0;
}

/* Wait until `sock` is ready for `events` or the deadline passes. */
static int wait_ready(int sock, short events, int64_t deadline) {
    for (;;) {
        int ms = -1;
        if (deadline >= 0) {
            int64_t left = deadline - ld_mlo_now_ms();
            if (left <= 0) return LD_MLO_IO_TIMEOUT;
            ms = left > 1000000 ? 1000000 : (int)left;
        }
        struct pollfd p = { .fd = sock, .events = events };
        int r = poll(&p, 1, ms);
        if (r > 0) return LD_MLO_IO_OK;   /* readable, writable, HUP or ERR: the call tells */
        if (r == 0) continue;             /* re-check the deadline */
        if (errno != EINTR) return LD_MLO_IO_ERROR;
    }
}

int ld_mlo_write_all(int sock, const void *buf, size_t n, int pass_fd, size_t chunk,
                     int64_t deadline) {
    const char *p = buf;
    size_t done = 0;
    while (done < n) {
        int rc = wait_ready(sock, POLLOUT, deadline);
        if (rc) return rc;
        size_t len = n - done;
        if (chunk && len > chunk) len = chunk;
        struct iovec iov = { .iov_base = (void *)(p + done), .iov_len = len };
        struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
        union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } ctl;
        if (done == 0 && pass_fd >= 0) {
            memset(&ctl, 0, sizeof ctl);
            m.msg_control = ctl.buf;
            m.msg_controllen = sizeof ctl.buf;
            struct cmsghdr *c = CMSG_FIRSTHDR(&m);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
        }
        ssize_t w = sendmsg(sock, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            return (errno == EPIPE || errno == ECONNRESET) ? LD_MLO_IO_EOF : LD_MLO_IO_ERROR;
        }
        done += (size_t)w;
        /* Tests: let each piece travel as its own segment. */
        if (chunk && done < n) usleep(1000);
    }
    return LD_MLO_IO_OK;
}

/* Keep the first descriptor for the caller, close every other one. */
static void take_fds(struct msghdr *m, int *fd_out) {
    for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t cnt = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < cnt; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            if (fd_out && *fd_out < 0) *fd_out = fd;
            else close(fd);
        }
    }
}

int ld_mlo_read_all(int sock, void *buf, size_t n, int *fd_out, int64_t deadline) {
    char *p = buf;
    size_t done = 0;
    int rc = LD_MLO_IO_OK;
    while (done < n) {
        rc = wait_ready(sock, POLLIN, deadline);
        if (rc) break;
        struct iovec iov = { .iov_base = p + done, .iov_len = n - done };
        union { char buf[CMSG_SPACE(4 * sizeof(int))]; struct cmsghdr align; } ctl;
        struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                            .msg_controllen = sizeof ctl.buf };
        ssize_t r = recvmsg(sock, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            rc = errno == ECONNRESET ? LD_MLO_IO_EOF : LD_MLO_IO_ERROR;
            break;
        }
        if (m.msg_controllen > 0) take_fds(&m, fd_out);
        if (m.msg_flags & MSG_CTRUNC) { rc = LD_MLO_IO_GARBAGE; break; }
        if (r == 0) { rc = LD_MLO_IO_EOF; break; }
        done += (size_t)r;
    }
    if (rc && fd_out && *fd_out >= 0) { close(*fd_out); *fd_out = -1; }
    return rc;
}

void ld_mlo_req_init(ld_mlo_req_t *r, uint64_t id, ld_mlo_op_t op, int32_t domain,
                     uint64_t bytes) {
    memset(r, 0, sizeof *r);
    r->magic = LD_MLO_MAGIC;
    r->version = LD_MLO_VERSION;
    r->id = id;
    r->op = (uint32_t)op;
    r->domain = domain;
    r->bytes = bytes;
}

void ld_mlo_rep_init(ld_mlo_rep_t *r, const ld_mlo_req_t *for_req, int32_t status,
                     const char *msg) {
    memset(r, 0, sizeof *r);
    r->magic = LD_MLO_MAGIC;
    r->version = LD_MLO_VERSION;
    r->id = for_req ? for_req->id : 0;
    r->op = for_req ? for_req->op : 0;
    r->status = status;
    if (msg) {
        size_t l = strnlen(msg, LD_MLO_MSG_MAX - 1);
        memcpy(r->msg, msg, l);
    }
}

int ld_mlo_send_req(int sock, const ld_mlo_req_t *r, size_t chunk, int64_t deadline) {
    return ld_mlo_write_all(sock, r, sizeof *r, -1, chunk, deadline);
}

static int op_valid(uint32_t op) { return op >= LD_MLO_OP_START && op <= LD_MLO_OP_QUIT; }

int ld_mlo_recv_req(int sock, ld_mlo_req_t *r, int64_t deadline) {
    int rc = ld_mlo_read_all(sock, r, sizeof *r, NULL, deadline);
    if (rc) return rc;
    if (r->magic != LD_MLO_MAGIC || r->version != LD_MLO_VERSION || !op_valid(r->op))
        return LD_MLO_IO_GARBAGE;
    return LD_MLO_IO_OK;
}

int ld_mlo_send_rep(int sock, const ld_mlo_rep_t *r, int pass_fd, size_t chunk,
                    int64_t deadline) {
    return ld_mlo_write_all(sock, r, sizeof *r, pass_fd, chunk, deadline);
}

int ld_mlo_recv_rep(int sock, const ld_mlo_req_t *req, ld_mlo_rep_t *r, int *fd_out,
                    int64_t deadline) {
    int fd = -1;
    int rc = ld_mlo_read_all(sock, r, sizeof *r, &fd, deadline);
    if (rc) return rc;
    r->msg[LD_MLO_MSG_MAX - 1] = '\0';
    if (r->magic != LD_MLO_MAGIC || r->version != LD_MLO_VERSION || r->id != req->id ||
        r->op != req->op || r->has_fd > 1 || (r->has_fd && r->status != 0))
        rc = LD_MLO_IO_GARBAGE;
    else if (r->has_fd && fd < 0)
        rc = LD_MLO_IO_NOFD;
    else if (!r->has_fd && fd >= 0)
        rc = LD_MLO_IO_GARBAGE;              /* an fd nobody announced */
    else if (req->op == LD_MLO_OP_ALLOC && r->status == 0 && !r->has_fd)
        rc = LD_MLO_IO_NOFD;
    if (rc) {
        if (fd >= 0) close(fd);
        return rc;
    }
    if (fd_out) *fd_out = fd;
    else if (fd >= 0) close(fd);
    return LD_MLO_IO_OK;
}

/* 1 when the LD_PRELOAD entry `tok` names the shim object `self` (see mlopart_proto.h):
 * by identity, so a renamed copy of the shim is recognized and another library whose name
 * merely starts like ours is not. */
static int is_self(const char *tok, const char *self, const struct stat *self_st) {
    if (!self || !*self) return 0;
    if (!strcmp(tok, self)) return 1;
    if (!strchr(tok, '/')) {                 /* a bare name, found by the loader's search */
        const char *b = strrchr(self, '/');
        return !strcmp(tok, b ? b + 1 : self);
    }
    struct stat st;
    return self_st && stat(tok, &st) == 0 && st.st_dev == self_st->st_dev && st.st_ino == self_st->st_ino;
}

/* LD_PRELOAD without the entries that are `self`; NULL when nothing remains or on OOM
 * (*oom tells which). Entries are separated by ':' or spaces. */
static char *preload_without_shim(const char *val, const char *self, int *oom) {
    size_t n = strlen(val);
    char *out = malloc(n + 1), *tmp = strdup(val);
    if (!out || !tmp) { free(out); free(tmp); *oom = 1; return NULL; }
    struct stat self_st;
    int have_st = self && *self && stat(self, &self_st) == 0;
    size_t o = 0;
    char *save = NULL;
    for (char *tok = strtok_r(tmp, ": \t", &save); tok; tok = strtok_r(NULL, ": \t", &save)) {
        if (is_self(tok, self, have_st ? &self_st : NULL)) continue;
        if (o) out[o++] = ':';
        size_t l = strlen(tok);
        memcpy(out + o, tok, l);
        o += l;
    }
    out[o] = '\0';
    free(tmp);
    if (o == 0) { free(out); return NULL; }
    return out;
}

static int name_is(const char *entry, const char *name) {
    size_t l = strlen(name);
    return strncmp(entry, name, l) == 0 && entry[l] == '=';
}

static int name_in(const char *entry, const char *const *names, int add_form) {
    for (; names && *names; names++) {
        if (add_form) {
            const char *eq = strchr(*names, '=');
            size_t l = eq ? (size_t)(eq - *names) : strlen(*names);
            if (strncmp(entry, *names, l) == 0 && entry[l] == '=') return 1;
        } else if (name_is(entry, *names)) {
            return 1;
        }
    }
    return 0;
}

char **ld_mlo_env_build(char *const *src, const char *const *drop, const char *const *add,
                        const char *self) {
    size_t ns = 0, na = 0;
    while (src && src[ns]) ns++;
    while (add && add[na]) na++;
    char **env = calloc(ns + na + 1, sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < ns; i++) {
        const char *e = src[i];
        if (!strchr(e, '=') || name_in(e, drop, 0) || name_in(e, add, 1)) continue;
        if (name_is(e, "LD_PRELOAD")) {
            int oom = 0;
            char *rest = preload_without_shim(e + 11, self, &oom);
            if (oom) goto fail;
            if (!rest) continue;
            size_t l = strlen(rest);
            env[k] = malloc(11 + l + 1);
            if (!env[k]) { free(rest); goto fail; }
            memcpy(env[k], "LD_PRELOAD=", 11);
            memcpy(env[k] + 11, rest, l + 1);
            free(rest);
            k++;
            continue;
        }
        if (!(env[k] = strdup(e))) goto fail;
        k++;
    }
    for (size_t i = 0; i < na; i++)
        if (!(env[k++] = strdup(add[i]))) goto fail;
    return env;
fail:
    ld_mlo_env_free(env);
    return NULL;
}

void ld_mlo_env_free(char **env) {
    if (!env) return;
    for (char **e = env; *e; e++) free(*e);
    free(env);
}
