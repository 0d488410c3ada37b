/* mlopart_client.c — start, talk to, and stop one ldshim-mlopart-helper process (the
 * client side declared in mlopart_proto.h). No locks here: the backend serializes. */
#include "shim/mlopart_proto.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int ld_mlo_helper_path(char *out, size_t n, char *why, size_t wn) {
    const char *o = getenv("LDSHIM_MLOPART_HELPER");
    if (o && *o) {
        snprintf(out, n, "%s", o);
    } else {
        Dl_info info;
        if (!dladdr((void *)&ld_mlo_helper_path, &info) || !info.dli_fname) {
            snprintf(why, wn, "cannot locate libldshim.so (dladdr failed)");
            return -1;
        }
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash)
            snprintf(out, n, "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname,
                     LD_MLO_HELPER_NAME);
        else
            snprintf(out, n, "./%s", LD_MLO_HELPER_NAME);
    }
    if (access(out, X_OK) != 0) {
        snprintf(why, wn, "helper %s: %s", out, strerror(errno));
        return -1;
    }
    return 0;
}

/* Reap `pid` within ms; 1 when gone (or reaped by someone else), 0 otherwise. */
static int reap(int pid, int ms) {
    int64_t end = ld_mlo_now_ms() + ms;
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD)) return 1;
        if (ld_mlo_now_ms() >= end) return 0;
        usleep(2000);
    }
}

/* Drain the socket until EOF (every copy of the helper's end closed) or the deadline. */
static void wait_eof(int sock, int ms) {
    int64_t end = ld_mlo_now_ms() + ms;
    for (;;) {
        int64_t left = end - ld_mlo_now_ms();
        if (left <= 0) return;
        struct pollfd p = { .fd = sock, .events = POLLIN };
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return;
        char b[256];
        int fd = -1;
        struct iovec iov = { b, sizeof b };
        union { char buf[CMSG_SPACE(4 * sizeof(int))]; struct cmsghdr a; } ctl;
        struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                            .msg_controllen = sizeof ctl.buf };
        ssize_t k = recvmsg(sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (k > 0 && m.msg_controllen) {
            for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
                for (size_t i = 0; c->cmsg_type == SCM_RIGHTS &&
                                   i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
                    memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
                    close(fd);
                }
        }
        if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN)) return;
    }
}

static void drop(ld_mlo_helper_t *h) {
    if (h->sock >= 0) close(h->sock);
    h->sock = -1;
    h->pid = 0;
}

void ld_mlo_helper_kill(ld_mlo_helper_t *h, int timeout_ms) {
    if (h->pid > 0) kill(h->pid, SIGKILL);
    if (h->sock >= 0) wait_eof(h->sock, timeout_ms);
    if (h->pid > 0) reap(h->pid, 1000);
    drop(h);
}

void ld_mlo_helper_quit(ld_mlo_helper_t *h, int timeout_ms) {
    if (h->sock < 0) { drop(h); return; }
    int64_t deadline = ld_mlo_deadline(timeout_ms);
    ld_mlo_req_t q;
    ld_mlo_req_init(&q, h->next_id++, LD_MLO_OP_QUIT, 0, 0);
    if (ld_mlo_send_req(h->sock, &q, 0, deadline) == LD_MLO_IO_OK) {
        int64_t left = deadline - ld_mlo_now_ms();
        wait_eof(h->sock, left > 0 ? (int)left : 0);
    }
    if (h->pid > 0 && !reap(h->pid, 200)) {
        kill(h->pid, SIGKILL);
        reap(h->pid, 1000);
    }
    drop(h);
}

void ld_mlo_helper_forget(ld_mlo_helper_t *h) {
    drop(h);
}

int ld_mlo_helper_call(ld_mlo_helper_t *h, ld_mlo_op_t op, int domain, uint64_t bytes,
                       int timeout_ms, ld_mlo_rep_t *rep, int *fd_out) {
    if (h->sock < 0) return LD_MLO_IO_EOF;
    int64_t deadline = ld_mlo_deadline(timeout_ms);
    ld_mlo_req_t q;
    ld_mlo_req_init(&q, h->next_id++, op, domain, bytes);
    size_t chunk = ld_mlo_hook("partial-request") ? 1 : 0;
    int rc = ld_mlo_send_req(h->sock, &q, chunk, deadline);
    if (rc) return rc;
    return ld_mlo_recv_rep(h->sock, &q, rep, fd_out, deadline);
}

int ld_mlo_helper_spawn(ld_mlo_helper_t *h, const char *path, const char *uuid, int ndomains,
                        int timeout_ms, int *ndev, char *why, size_t n) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf(why, n, "socketpair: %s", strerror(errno));
        return -1;
    }
    /* dup2(3, 3) would keep close-on-exec set: move the child's end off that number. */
    if (sv[1] == LD_MLO_HELPER_FD) {
        int moved = fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
        close(sv[1]);
        sv[1] = moved;
        if (moved < 0) {
            snprintf(why, n, "fcntl: %s", strerror(errno));
            close(sv[0]);
            return -1;
        }
    }
    const char *drop_vars[] = { "CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY",
                                "CUDA_MPS_LOG_DIRECTORY", NULL };
    char **env = ld_mlo_env_build(environ, drop_vars, NULL);
    char fdarg[16], pidarg[24], uuidarg[64];
    snprintf(fdarg, sizeof fdarg, "%d", LD_MLO_HELPER_FD);
    snprintf(pidarg, sizeof pidarg, "%d", (int)getpid());
    snprintf(uuidarg, sizeof uuidarg, "%s", uuid);
    /* NOTES: the parent-death signal fires when the spawning *thread* exits, so it is only
     * asked for from the main thread; otherwise the helper notices our death through the
     * socket's EOF and its --parent check. */
    int main_thread = gettid() == getpid();
    char *argv[] = { (char *)LD_MLO_HELPER_NAME, "--fd", fdarg, "--uuid", uuidarg, "--parent",
                     pidarg, main_thread ? "--pdeathsig" : NULL, NULL };
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    int err = 0;
    pid_t pid = 0;
    if (!env) { snprintf(why, n, "out of memory"); goto out_sock; }
    if ((err = posix_spawn_file_actions_init(&fa))) goto out_env;
    if ((err = posix_spawnattr_init(&at))) { posix_spawn_file_actions_destroy(&fa); goto out_env; }
    if (!(err = posix_spawn_file_actions_adddup2(&fa, sv[1], LD_MLO_HELPER_FD)) &&
        !(err = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0)) &&
        !(err = posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0)) &&
        !(err = posix_spawn_file_actions_addclosefrom_np(&fa, LD_MLO_HELPER_FD + 1)) &&
        !(err = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                                  POSIX_SPAWN_SETSIGDEF)) &&
        !(err = posix_spawnattr_setsigmask(&at, &none)) &&
        !(err = posix_spawnattr_setsigdefault(&at, &all)))
        err = posix_spawn(&pid, path, &fa, &at, argv, env);
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
out_env:
    if (err) snprintf(why, n, "cannot start %s: %s", path, strerror(err));
    ld_mlo_env_free(env);
out_sock:
    close(sv[1]);
    if (!pid) { close(sv[0]); return -1; }
    h->pid = pid;
    h->sock = sv[0];
    h->next_id = 1;

    ld_mlo_rep_t rep;
    int io = ld_mlo_helper_call(h, LD_MLO_OP_START, ndomains, 0, timeout_ms, &rep, NULL);
    if (io != LD_MLO_IO_OK) {
        snprintf(why, n, "helper did not start: %s", ld_mlo_io_str(io));
        ld_mlo_helper_kill(h, timeout_ms);
        return -1;
    }
    if (rep.status != 0) {
        snprintf(why, n, "%s", rep.msg);
        /* It exits by itself; its supervisor stops the daemon and removes the directory. */
        wait_eof(h->sock, timeout_ms);
        if (!reap(h->pid, 1000)) { kill(h->pid, SIGKILL); reap(h->pid, 1000); }
        drop(h);
        return -1;
    }
    if (ndev) *ndev = rep.value;
    return 0;
}
