/* mlopart_client.c — start, talk to, and stop one ldshim-mlopart-helper process (the
 * client side declared in mlopart_proto.h). No locks here: the backend serializes. */
#include "shim/mlopart_proto.h"
#include "shim/options.h"

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
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int ld_mlo_helper_path(char *out, size_t n, char *why, size_t wn) {
    const char *o = ld_opt(LD_OPT_MLOPART_HELPER);
    if (o) {
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

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434            /* the same number on every architecture (Linux 5.3) */
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

/* A pidfd for our child `pid`, proven to be our child (waitid on it, not waiting), or -1
 * with *unsupported set when the kernel has none. Called right after the spawn. */
static int open_pidfd(int pid, int *unsupported) {
    *unsupported = 0;
    int fd = ld_mlo_hook("no-pidfd") ? (errno = ENOSYS, -1) : (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0) {
        *unsupported = errno == ENOSYS;
        return -1;
    }
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid((idtype_t)P_PIDFD, (id_t)fd, &si, WEXITED | WNOHANG | WNOWAIT) == 0) return fd;
    if (errno == EINVAL) {           /* waitid(P_PIDFD) is 5.4: ask by pid, at once */
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0) return fd;
    }
    close(fd);                        /* not our child (already reaped by someone else) */
    return -1;
}

/* With pmu held: 1 while `pid` is our child and has not exited (so it is not reaped and
 * the number cannot have been reused). */
static int running_child(int pid) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    return pid > 0 && waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == 0;
}

void ld_mlo_helper_signal(ld_mlo_helper_t *h, int sig) {
    pthread_mutex_lock(&h->pmu);
    if (h->pidfd >= 0) syscall(SYS_pidfd_send_signal, h->pidfd, sig, NULL, 0);
    else if (h->nopidfd && running_child(h->pid)) kill(h->pid, sig);
    pthread_mutex_unlock(&h->pmu);
}

/* With pmu held: reap the helper if it exited. 1 when it is gone (reaped now, or by
 * someone else before), 0 while it runs. Never reaps another process of the program. */
static int try_reap(ld_mlo_helper_t *h) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (h->pidfd >= 0) {
        if (waitid((idtype_t)P_PIDFD, (id_t)h->pidfd, &si, WEXITED | WNOHANG) == 0) return si.si_pid != 0;
        return errno == ECHILD || errno == EINVAL;
    }
    if (h->nopidfd && h->pid > 0) {
        if (!running_child(h->pid)) {
            if (waitid(P_PID, (id_t)h->pid, &si, WEXITED | WNOHANG) != 0 || si.si_pid != 0) return 1;
            return 0;
        }
        return 0;
    }
    return 1;                         /* nothing of ours to wait for */
}

/* Reap the helper within ms; 1 when gone. */
static int reap(ld_mlo_helper_t *h, int ms) {
    int64_t end = ld_mlo_now_ms() + ms;
    for (;;) {
        pthread_mutex_lock(&h->pmu);
        int gone = try_reap(h);
        pthread_mutex_unlock(&h->pmu);
        if (gone) return 1;
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
    pthread_mutex_lock(&h->pmu);
    if (h->pidfd >= 0) close(h->pidfd);
    h->pidfd = -1;
    h->nopidfd = 0;
    h->pid = 0;
    pthread_mutex_unlock(&h->pmu);
}

void ld_mlo_helper_kill(ld_mlo_helper_t *h, int timeout_ms) {
    ld_mlo_helper_signal(h, SIGKILL);
    if (h->sock >= 0) wait_eof(h->sock, timeout_ms);
    reap(h, 1000);
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
    if (!reap(h, 200)) {
        ld_mlo_helper_signal(h, SIGKILL);
        reap(h, 1000);
    }
    drop(h);
}

void ld_mlo_helper_forget(ld_mlo_helper_t *h) {
    /* The lock may have been held by a thread that does not exist in this child; the
     * parent's helper is not our child: close our copies, signal nothing. */
    pthread_mutex_init(&h->pmu, NULL);
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
    if (ld_opt(LD_OPT_INSIDE_MLOPART_HELPER)) {
        snprintf(why, n, "this process is the MLOPart helper's (%s is set): no helper of its own", LD_MLO_ENV_MARKER);
        return -1;
    }
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
    /* Never run the shim in the helper: drop this very shim object from LD_PRELOAD (found by
     * dladdr, so a renamed copy is recognized too) and mark the environment, which any copy
     * that still loads reads in its constructor and then stays inert. */
    Dl_info self;
    const char *self_path = dladdr((void *)&ld_mlo_helper_spawn, &self) && self.dli_fname ? self.dli_fname : NULL;
    const char *add_vars[] = { LD_MLO_ENV_MARKER "=1", NULL };
    char **env = ld_mlo_env_build(environ, drop_vars, add_vars, self_path);
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
    int unsupported = 0;
    int pfd = open_pidfd(pid, &unsupported);
    pthread_mutex_lock(&h->pmu);
    h->pid = pid;
    h->pidfd = pfd;
    h->nopidfd = unsupported;
    pthread_mutex_unlock(&h->pmu);
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
        if (!reap(h, 1000)) { ld_mlo_helper_signal(h, SIGKILL); reap(h, 1000); }
        drop(h);
        return -1;
    }
    if (ndev) *ndev = rep.value;
    return 0;
}
