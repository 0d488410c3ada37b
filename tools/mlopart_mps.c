/* mlopart_mps.c — supervisor of the helper's private MPS control daemon (see mlopart_mps.h). */
#include "tools/mlopart_mps.h"
#include "shim/file.h"
#include "shim/mlopart_proto.h"
#include "shim/options.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

enum {
    kCommandMs = 10000,     /* one control-client command (start_server, quit)         */
    kQuitWaitMs = 5000,     /* daemon exit after `quit`, before SIGTERM then SIGKILL    */
    kPollStepMs = 10,       /* while waiting for the control pipe to appear            */
};

static void say(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

int ld_mps_rmtree(const char *dir) {
    return nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

/* Path of the control binary: $LDSHIM_MPS_CONTROL (tests) or a search of $PATH. */
static int find_control(char *out, size_t n) {
    const char *o = ld_opt(LD_OPT_MPS_CONTROL);
    if (o) {
        snprintf(out, n, "%s", o);
        return access(out, X_OK) == 0 ? 0 : -1;
    }
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *e = strchr(path, ':');
        size_t l = e ? (size_t)(e - path) : strlen(path);
        if (l > 0 && (size_t)snprintf(out, n, "%.*s/nvidia-cuda-mps-control", (int)l, path) < n &&
            access(out, X_OK) == 0)
            return 0;
        path += l + (e ? 1 : 0);
    }
    return -1;
}

/* Wait for `pid` up to `ms`; 1 when reaped (status in *st), 0 when still running. */
static int wait_bounded(pid_t pid, int ms, int *st) {
    int64_t end = ld_mlo_now_ms() + ms;
    for (;;) {
        pid_t r = waitpid(pid, st, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD)) return 1;
        if (ld_mlo_now_ms() >= end) return 0;
        usleep(5000);
    }
}

static void kill_and_reap(pid_t pid) {
    int st;
    kill(pid, SIGTERM);
    if (!wait_bounded(pid, 1000, &st)) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
}

typedef struct {
    char control[PATH_MAX];
    char dir[PATH_MAX];
    char **env;               /* for the daemon and its clients */
    pid_t daemon;
} mps_t;

/* In a freshly forked child: die with the supervisor, no inherited descriptors beyond
 * 0..2, then exec. Only async-signal-safe calls. */
static void exec_child(const mps_t *m, char *const argv[], int in_fd, int out_fd) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (in_fd != 0) dup2(in_fd, 0);
    dup2(out_fd, 1);
    dup2(out_fd, 2);
    closefrom(3);
    execve(m->control, argv, m->env);
    _exit(127);
}

/* Run the control client once: `stdin_text` on its stdin (or /dev/null when NULL), argv
 * after the program name in `args`. Output (stdout+stderr, trimmed) into out. Returns the
 * exit status, 124 on timeout, -1 when it could not run. */
static int run_control(const mps_t *m, const char *stdin_text, char *const args[], char *out,
                       size_t on) {
    int inp[2] = { -1, -1 }, outp[2];
    out[0] = '\0';
    if (pipe2(outp, O_CLOEXEC) != 0) return -1;
    if (pipe2(inp, O_CLOEXEC) != 0) { close(outp[0]); close(outp[1]); return -1; }
    char *argv[8] = { "nvidia-cuda-mps-control" };
    for (int i = 0; args && args[i] && i < 6; i++) argv[i + 1] = args[i];
    pid_t pid = fork();
    if (pid < 0) {
        close(inp[0]); close(inp[1]); close(outp[0]); close(outp[1]);
        return -1;
    }
    if (pid == 0) {
        if (!stdin_text) { close(inp[0]); inp[0] = ld_file_devnull(0); }
        exec_child(m, argv, inp[0], outp[1]);
    }
    close(inp[0]);
    close(outp[1]);
    if (stdin_text) {
        /* A short command fits the pipe buffer: this write does not block. */
        ssize_t w = write(inp[1], stdin_text, strlen(stdin_text));
        (void)w;
    }
    close(inp[1]);
    size_t got = 0;
    int64_t end = ld_mlo_now_ms() + ld_mlo_timeout_ms(kCommandMs);
    int timed_out = 0;
    for (;;) {
        int64_t left = end - ld_mlo_now_ms();
        if (left <= 0) { timed_out = 1; break; }
        struct pollfd p = { .fd = outp[0], .events = POLLIN };
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) { timed_out = r == 0; break; }
        char tmp[256];
        ssize_t k = read(outp[0], tmp, sizeof tmp);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        size_t c = (size_t)k < on - 1 - got ? (size_t)k : on - 1 - got;
        memcpy(out + got, tmp, c);
        got += c;
    }
    close(outp[0]);
    out[got] = '\0';
    for (char *p = out; *p; p++) if (*p == '\n' || *p == '\r') *p = ' ';
    while (got && isspace((unsigned char)out[got - 1])) out[--got] = '\0';
    int st = 0;
    if (timed_out || !wait_bounded(pid, 1000, &st)) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        return 124;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* Does the control client's answer look like a refusal? It prints nothing on success. */
static int looks_refused(int status, const char *out) {
    static const char *const bad[] = { "unrecogni", "unknown", "invalid", "error", "usage",
                                       "not supported", "fail", "denied", NULL };
    if (status != 0) return 1;
    char low[512];
    size_t i = 0;
    for (; out[i] && i < sizeof low - 1; i++) low[i] = (char)tolower((unsigned char)out[i]);
    low[i] = '\0';
    for (int k = 0; bad[k]; k++)
        if (strstr(low, bad[k])) return 1;
    return 0;
}

/* Last line-ish of the daemon's output file, for error messages. */
static void daemon_tail(const mps_t *m, char *out, size_t n) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/log/daemon.out", m->dir);
    out[0] = '\0';
    off_t sz = 0;
    int fd = ld_file_open_read(path, (size_t)1 << 40, LD_FILE_NUL_OK, &sz, NULL, 0);
    if (fd < 0) return;
    off_t from = sz > (off_t)(n - 1) ? sz - (off_t)(n - 1) : 0;
    ssize_t k = pread(fd, out, n - 1, from);
    close(fd);
    if (k < 0) k = 0;
    out[k] = '\0';
    for (char *p = out; *p; p++) if (*p == '\n' || *p == '\r') *p = ' ';
    while (k && isspace((unsigned char)out[k - 1])) out[--k] = '\0';
}

static void report(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(int fd, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int l = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (l < 0) return;
    if ((size_t)l > sizeof line - 2) l = (int)sizeof line - 2;
    line[l++] = '\n';
    for (int off = 0; off < l;) {
        ssize_t w = write(fd, line + off, (size_t)(l - off));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        off += (int)w;
    }
}

/* LDSHIM_MLOPART_DEBUG_LOGS=dir (diagnosis): keep copies of the daemon's log files. */
static void keep_logs(const mps_t *m) {
    const char *dest = ld_opt(LD_OPT_MLOPART_DEBUG_LOGS);
    if (!dest) return;
    char why[256];
    int ddfd = ld_file_open_dir(dest, 0, why, sizeof why);
    if (ddfd < 0) return;
    char src_dir[PATH_MAX + 8];
    snprintf(src_dir, sizeof src_dir, "%s/log", m->dir);
    int sdfd = ld_file_open_dir(src_dir, 0, why, sizeof why);
    int lfd = sdfd >= 0 ? dup(sdfd) : -1;
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    if (!d && lfd >= 0) close(lfd);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        /* A log larger than 64 MiB is not kept: the copy is for diagnosis. */
        ld_file_copy_at(sdfd, e->d_name, ddfd, e->d_name, (size_t)64 << 20, LD_FILE_PRIVATE, why, sizeof why);
    }
    if (d) closedir(d);
    if (sdfd >= 0) close(sdfd);
    close(ddfd);
}

/* Stop the daemon politely, then firmly. */
static void stop_daemon(mps_t *m) {
    if (m->daemon <= 0) return;
    int st;
    if (!wait_bounded(m->daemon, 0, &st)) {
        char out[256];
        char *quit_args[] = { NULL };
        run_control(m, "quit\n", quit_args, out, sizeof out);
        if (!wait_bounded(m->daemon, kQuitWaitMs, &st)) kill_and_reap(m->daemon);
    }
    m->daemon = 0;
}

/* The supervisor's life; never returns. */
static void supervise(const char *uuid, int timeout_ms, int lifeline, int events) {
    mps_t m = { .daemon = 0 };
    prctl(PR_SET_NAME, "ldshim-mlo-sup");
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    umask(077);
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp || strlen(tmp) > 64) tmp = "/tmp";
    snprintf(m.dir, sizeof m.dir, "%s/ldshim-mlo-XXXXXX", tmp);
    if (!mkdtemp(m.dir)) {
        report(events, "ERR cannot create a private directory under %s: %s", tmp, strerror(errno));
        _exit(1);
    }
    char pipe_dir[PATH_MAX + 8], log_dir[PATH_MAX + 8], out_path[PATH_MAX + 32];
    snprintf(pipe_dir, sizeof pipe_dir, "%s/pipe", m.dir);
    snprintf(log_dir, sizeof log_dir, "%s/log", m.dir);
    snprintf(out_path, sizeof out_path, "%s/daemon.out", log_dir);
    char e_pipe[PATH_MAX + 40], e_log[PATH_MAX + 40], e_cvd[128];
    snprintf(e_pipe, sizeof e_pipe, "CUDA_MPS_PIPE_DIRECTORY=%s", pipe_dir);
    snprintf(e_log, sizeof e_log, "CUDA_MPS_LOG_DIRECTORY=%s", log_dir);
    snprintf(e_cvd, sizeof e_cvd, "CUDA_VISIBLE_DEVICES=%s", uuid);
    const char *drop[] = { "CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY",
                           "CUDA_MPS_LOG_DIRECTORY", NULL };
    const char *add[] = { e_pipe, e_log, e_cvd, NULL };
    int ok = 0;
    char why[768] = "";
    char dwhy[256];
    int pfd = ld_file_open_dir(pipe_dir, 0, dwhy, sizeof dwhy), lfd = pfd < 0 ? -1 : ld_file_open_dir(log_dir, 0, dwhy, sizeof dwhy);
    if (pfd >= 0) close(pfd);
    if (lfd >= 0) close(lfd);
    if (pfd < 0 || lfd < 0) {
        say(why, sizeof why, "cannot create %s/{pipe,log}: %s", m.dir, dwhy);
    } else if (find_control(m.control, sizeof m.control) != 0) {
        say(why, sizeof why, "%s not found or not executable (install the NVIDIA MPS binaries)",
            ld_opt(LD_OPT_MPS_CONTROL) ? ld_opt(LD_OPT_MPS_CONTROL) : "nvidia-cuda-mps-control in PATH");
    } else if (!(m.env = ld_mlo_env_build(environ, drop, add, NULL))) {
        /* (The helper's environment has no shim in LD_PRELOAD and carries LD_MLO_ENV_MARKER,
         * which the daemon inherits: nothing of the shim runs there.) */
        say(why, sizeof why, "out of memory");
    } else {
        ok = 1;
    }
    if (ok) {
        if (ld_mlo_hook("daemon-out-exists")) {   /* a name taken before the daemon's file */
            int fd = ld_file_create(out_path, LD_FILE_PRIVATE, dwhy, sizeof dwhy);
            if (fd >= 0) close(fd);
        }
        int out_fd = ld_file_create(out_path, LD_FILE_PRIVATE, dwhy, sizeof dwhy);
        pid_t pid = out_fd < 0 ? -1 : fork();
        int fork_errno = errno;   /* close() below may change errno */
        if (pid == 0) {
            char *argv[] = { "nvidia-cuda-mps-control", "-f", NULL };
            int devnull = ld_file_devnull(0);
            exec_child(&m, argv, devnull < 0 ? 0 : devnull, out_fd);
        }
        if (out_fd >= 0) close(out_fd);
        if (out_fd < 0) {
            /* The file layer's reason (a planted link, an existing name, ...), not errno. */
            say(why, sizeof why, "cannot create %s: %s", out_path, dwhy);
            ok = 0;
        } else if (pid < 0) {
            say(why, sizeof why, "cannot start nvidia-cuda-mps-control: %s", strerror(fork_errno));
            ok = 0;
        } else {
            m.daemon = pid;
        }
    }
    /* Wait for the daemon's control socket to appear. */
    if (ok) {
        char ctl[PATH_MAX + 16];
        snprintf(ctl, sizeof ctl, "%s/control", pipe_dir);
        int64_t end = ld_mlo_now_ms() + timeout_ms;
        for (;;) {
            struct stat sb;
            int st;
            if (stat(ctl, &sb) == 0) break;
            if (wait_bounded(m.daemon, 0, &st)) {
                char tail[300];
                daemon_tail(&m, tail, sizeof tail);
                say(why, sizeof why, "nvidia-cuda-mps-control -f (%s) exited with %s %d%s%s",
                    m.control, WIFEXITED(st) ? "status" : "signal",
                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), *tail ? ": " : "", tail);
                m.daemon = 0;
                ok = 0;
                break;
            }
            struct pollfd p = { .fd = lifeline, .events = POLLIN };
            if (poll(&p, 1, 0) > 0) { ok = 0; say(why, sizeof why, "helper went away"); break; }
            if (ld_mlo_now_ms() >= end) {
                say(why, sizeof why, "MPS control daemon did not create %s within %d ms", ctl,
                    timeout_ms);
                ok = 0;
                break;
            }
            usleep(kPollStepMs * 1000);
        }
    }
    /* Ask for an MLOPart server: MPS v2 form first, then the v3 "locality domains" form. */
    if (ok) {
        char cmd[64], uidarg[48], out2[256], out3[256];
        snprintf(cmd, sizeof cmd, "start_server -uid %u -mlopart\n", (unsigned)getuid());
        snprintf(uidarg, sizeof uidarg, "--uid=%u", (unsigned)getuid());
        char *no_args[] = { NULL };
        int s2 = run_control(&m, cmd, no_args, out2, sizeof out2);
        if (looks_refused(s2, out2)) {
            char *v3[] = { "server", "create", uidarg, "--locality-domains=true", NULL };
            int s3 = run_control(&m, NULL, v3, out3, sizeof out3);
            if (looks_refused(s3, out3)) {
                say(why, sizeof why,
                    "MLOPart refused: 'start_server -mlopart' gave status %d '%s'; "
                    "'server create --locality-domains=true' gave status %d '%s'",
                    s2, out2, s3, out3);
                ok = 0;
            }
        }
    }
    if (ok) report(events, "OK %s", m.dir);
    else report(events, "ERR %s", why);

    /* Wait for the helper to go (lifeline EOF), however it goes. */
    for (;;) {
        struct pollfd p = { .fd = lifeline, .events = POLLIN };
        int r = poll(&p, 1, -1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) break;
        char b[64];
        ssize_t k = read(lifeline, b, sizeof b);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
    }
    stop_daemon(&m);
    keep_logs(&m);
    ld_mps_rmtree(m.dir);
    ld_mlo_env_free(m.env);
    _exit(0);   /* closes our copy of the helper's socket: the shim now sees EOF */
}

int ld_mps_sup_start(ld_mps_sup_t *s, const char *uuid, int timeout_ms, char *err, size_t n) {
    int life[2], ev[2];
    if (pipe2(life, O_CLOEXEC) != 0) { say(err, n, "pipe: %s", strerror(errno)); return -1; }
    if (pipe2(ev, O_CLOEXEC) != 0) {
        say(err, n, "pipe: %s", strerror(errno));
        close(life[0]); close(life[1]);
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        say(err, n, "fork: %s", strerror(errno));
        close(life[0]); close(life[1]); close(ev[0]); close(ev[1]);
        return -1;
    }
    if (pid == 0) {
        close(life[1]);
        close(ev[0]);
        supervise(uuid, timeout_ms, life[0], ev[1]);
    }
    close(life[0]);
    close(ev[1]);
    s->pid = pid;
    s->lifeline = life[1];
    s->events = ev[0];
    return 0;
}

int ld_mps_sup_wait(ld_mps_sup_t *s, int sock, int64_t deadline, char *dir, size_t dn,
                    char *err, size_t n) {
    char line[1100];
    size_t got = 0;
    for (;;) {
        int64_t left = deadline - ld_mlo_now_ms();
        if (left <= 0) { say(err, n, "MPS supervisor gave no answer in time"); return -1; }
        struct pollfd p[2] = { { .fd = s->events, .events = POLLIN },
                               { .fd = sock, .events = POLLRDHUP } };
        int r = poll(p, 2, (int)left);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { say(err, n, "poll: %s", strerror(errno)); return -1; }
        if (p[1].revents & (POLLRDHUP | POLLHUP)) { say(err, n, "caller went away"); return -1; }
        if (!(p[0].revents & (POLLIN | POLLHUP))) continue;
        ssize_t k = read(s->events, line + got, sizeof line - 1 - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) { say(err, n, "MPS supervisor exited without an answer"); return -1; }
        got += (size_t)k;
        line[got] = '\0';
        char *nl = strchr(line, '\n');
        if (!nl && got < sizeof line - 1) continue;
        if (nl) *nl = '\0';
        if (strncmp(line, "OK ", 3) == 0) { snprintf(dir, dn, "%s", line + 3); return 0; }
        say(err, n, "%s", strncmp(line, "ERR ", 4) == 0 ? line + 4 : line);
        return -1;
    }
}
