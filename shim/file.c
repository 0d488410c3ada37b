/* file.c — the file layer (file.h). The only file in shim/, policy/ and tools/ that calls
 * open, openat or mkdir. */
#include "shim/file.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RD_FLAGS (O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
#define STREAM_WAIT_MS 5000      /* a FIFO whose reader stalls: give up after this long */

/* Untranslated error text: the shim may get here while another thread holds the dynamic
 * loader's lock, and a localized strerror may load translation modules (dlopen). */
const char *ld_file_errtext(int e) {
#if defined(__GLIBC__) && defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 32)
    const char *s = strerrordesc_np(e);
    if (s) return s;
#endif
#endif
    return strerror(e);
}

#define WHY(...) do { if (why && wn) snprintf(why, wn, __VA_ARGS__); } while (0)

const char *ld_file_kind(mode_t m) {
    if (S_ISREG(m)) return "a regular file";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISLNK(m)) return "a symbolic link";
    return "not a regular file";
}

const char *ld_file_printable(const char *s, char *out, size_t n) {
    size_t j = 0;
    if (!n) return out;
    for (; s && *s && j + 1 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c != 0x7f && c != '\\') { out[j++] = (char)c; continue; }
        if (j + 5 >= n) break;
        j += (size_t)snprintf(out + j, n - j, "\\x%02x", c);
    }
    out[j] = 0;
    return out;
}

/* ---- directories ------------------------------------------------------------------- */

static int dir_is_ours(int dfd, char *why, size_t wn) {
    struct stat st;
    if (fstat(dfd, &st) != 0) { WHY("%s", ld_file_errtext(errno)); return -1; }
    if (!S_ISDIR(st.st_mode)) { WHY("not a directory"); errno = ENOTDIR; return -1; }
    if (st.st_uid != geteuid()) {
        WHY("the directory is owned by uid %u, not by this user (uid %u); not trusted", (unsigned)st.st_uid,
            (unsigned)geteuid());
        errno = EPERM;
        return -1;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        WHY("the directory is writable by %s (mode %04o); not trusted", st.st_mode & S_IWOTH ? "everyone" : "its group",
            (unsigned)(st.st_mode & 07777));
        errno = EPERM;
        return -1;
    }
    return 0;
}

/* A directory others may write is a parent only with the sticky bit: without it anyone can
 * replace what we put there. */
static int dir_is_parent(int dfd, unsigned flags, char *why, size_t wn) {
    if (flags & LD_FILE_TRUSTED) return dir_is_ours(dfd, why, wn);
    struct stat st;
    if (fstat(dfd, &st) != 0) { WHY("%s", ld_file_errtext(errno)); return -1; }
    int others = (st.st_mode & S_IWOTH) || ((st.st_mode & S_IWGRP) && st.st_uid != geteuid());
    if (others && !(st.st_mode & S_ISVTX)) {
        WHY("the directory is writable by %s without the sticky bit (mode %04o); not written there",
            st.st_mode & S_IWOTH ? "everyone" : "its group", (unsigned)(st.st_mode & 07777));
        errno = EPERM;
        return -1;
    }
    return 0;
}

/* mkdir -p, 0700 for what it creates. */
static int make_parents(const char *dir) {
    char tmp[4096];
    size_t len = strlen(dir);
    if (len == 0 || len >= sizeof tmp) { errno = ENAMETOOLONG; return -1; }
    memcpy(tmp, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (tmp[i] != '/' && tmp[i] != 0) continue;
        char c = tmp[i];
        tmp[i] = 0;
        if (mkdir(tmp, 0700) != 0 && errno != EEXIST) return -1;
        tmp[i] = c;
    }
    return 0;
}

static int open_parent(const char *path, unsigned flags, const char **base, int *absent, char *why, size_t wn);

int ld_file_open_dir(const char *path, unsigned flags, char *why, size_t wn) {
    if (!path || !*path) { WHY("no directory named"); errno = EINVAL; return -1; }
    if (strlen(path) >= 4096) { WHY("the path is longer than 4095 bytes"); errno = ENAMETOOLONG; return -1; }
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0 && errno == ENOENT) {
        /* A new directory only where nobody else can replace it: not in a directory others
         * may write without the sticky bit. */
        const char *base;
        int absent, pfd = open_parent(path, 0, &base, &absent, NULL, 0);
        if (pfd >= 0) {
            int bad = dir_is_parent(pfd, 0, why, wn);
            close(pfd);
            if (bad) { errno = EPERM; return -1; }
        }
        errno = ENOENT;
    }
    if (dfd < 0 && errno == ENOENT && (flags & LD_FILE_EXISTING)) { WHY("%s", ld_file_errtext(ENOENT)); return -1; }
    if (dfd < 0 && errno == ENOENT) {
        if (flags & LD_FILE_MKDIR) {
            if (make_parents(path) != 0 && errno != EEXIST) { WHY("cannot create it: %s", ld_file_errtext(errno)); return -1; }
        } else if (mkdir(path, (flags & LD_FILE_SHARED) ? 0755 : 0700) != 0 && errno != EEXIST) {
            WHY("cannot create it: %s", ld_file_errtext(errno));
            return -1;
        }
        dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (dfd < 0) {
        int e = errno;
        struct stat st;
        if ((e == ELOOP || e == ENOTDIR) && lstat(path, &st) == 0)
            WHY("it is %s, not a directory; not followed", ld_file_kind(st.st_mode));
        else WHY("%s", ld_file_errtext(e));
        errno = e;
        return -1;
    }
    if (dir_is_ours(dfd, why, wn) != 0) {
        int e = errno;
        close(dfd);
        errno = e;
        return -1;
    }
    return dfd;
}

/* The directory of `path`, opened (links in it are the user's own path and followed), and
 * the final name. -1 with why; *absent says the directory does not exist. */
static int open_parent(const char *path, unsigned flags, const char **base, int *absent, char *why, size_t wn) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    *absent = 0;
    if (slash) {
        size_t dl = slash == path ? 1 : (size_t)(slash - path);
        if (dl >= sizeof dir) { WHY("the path is longer than 4095 bytes"); errno = ENAMETOOLONG; return -1; }
        memcpy(dir, path, dl);
        dir[dl] = 0;
        *base = slash + 1;
    } else {
        memcpy(dir, ".", 2);
        *base = path;
    }
    if (!**base) { WHY("no file name (the path ends in '/')"); errno = EISDIR; return -1; }
    if (strlen(*base) > 255) { WHY("the file name is longer than 255 bytes"); errno = ENAMETOOLONG; return -1; }
    if ((flags & LD_FILE_MKDIR) && make_parents(dir) != 0 && errno != EEXIST) {
        WHY("cannot create its directory: %s", ld_file_errtext(errno));
        return -1;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        int e = errno;
        *absent = e == ENOENT || e == ENOTDIR;
        WHY("its directory: %s", ld_file_errtext(e));
        errno = e;
        return -1;
    }
    return dfd;
}

/* ---- reading ----------------------------------------------------------------------- */

static int check_opened(int fd, size_t cap, unsigned flags, off_t *size, char *why, size_t wn) {
    struct stat st;
    if (fstat(fd, &st) != 0) { WHY("%s", ld_file_errtext(errno)); return -1; }
    if (!S_ISREG(st.st_mode)) {
        WHY("%s, not a regular file", ld_file_kind(st.st_mode));
        errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
        return -1;
    }
    if (flags & LD_FILE_TRUSTED) {
        const char *bad = st.st_uid != geteuid() ? "owned by another user"
                        : st.st_mode & (S_IWGRP | S_IWOTH) ? "writable by others" : NULL;
        if (bad) { WHY("%s; not trusted", bad); errno = EPERM; return -1; }
    }
    if (st.st_size < 0 || (unsigned long long)st.st_size > cap) {
        WHY("larger than the limit of %zu bytes (%lld bytes)", cap, (long long)st.st_size);
        errno = EFBIG;
        return -1;
    }
    if (size) *size = st.st_size;
    return 0;
}

static int open_read(const char *path, size_t cap, unsigned flags, off_t *size, int *absent, char *why, size_t wn) {
    *absent = 0;
    if (!path || !*path) { WHY("no file named"); errno = EINVAL; return -1; }
    if (strlen(path) >= 4096) { WHY("the path is longer than 4095 bytes"); errno = ENAMETOOLONG; return -1; }
    int fd;
    if (flags & LD_FILE_TRUSTED) {
        const char *base;
        int dfd = open_parent(path, 0, &base, absent, why, wn);
        if (dfd < 0) return -1;
        if (dir_is_ours(dfd, why, wn) != 0) { int e = errno; close(dfd); errno = e; return -1; }
        fd = openat(dfd, base, RD_FLAGS | O_NOFOLLOW);
        int e = errno;
        close(dfd);
        errno = e;
    } else {
        fd = open(path, RD_FLAGS);
    }
    if (fd < 0) {
        int e = errno;
        *absent = e == ENOENT;
        if (e == ELOOP && (flags & LD_FILE_TRUSTED)) WHY("a symbolic link; not trusted");
        else if (e == ENXIO) WHY("a socket or a device without a driver, not a regular file");
        else WHY("%s", ld_file_errtext(e));
        errno = e;
        return -1;
    }
    if (check_opened(fd, cap, flags, size, why, wn) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int ld_file_open_read(const char *path, size_t cap, unsigned flags, off_t *size, char *why, size_t wn) {
    int absent;
    return open_read(path, cap, flags, size, &absent, why, wn);
}

int ld_file_check_regular(const char *path, char *why, size_t wn) {
    int absent;
    int fd = open_read(path, SIZE_MAX / 2, 0, NULL, &absent, why, wn);
    if (fd < 0) return -1;
    close(fd);
    return 0;
}

int ld_file_same(const char *path, int fd, char *why, size_t wn) {
    struct stat a, b;
    if (fstat(fd, &a) != 0 || stat(path, &b) != 0) { WHY("%s", ld_file_errtext(errno)); return -1; }
    if (a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
        WHY("it was replaced after it was checked");
        errno = ESTALE;
        return 0;
    }
    return 1;
}

int ld_file_read_fd(int fd, char *buf, size_t cap, size_t line_cap, unsigned flags, size_t *len, char *why,
                    size_t wn) {
    size_t got = 0;
    for (;;) {
        ssize_t k = read(fd, buf + got, cap + 1 - got);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) { WHY("%s", ld_file_errtext(errno)); return -1; }
        if (k == 0) break;
        got += (size_t)k;
        if (got > cap) { WHY("it grew past the limit of %zu bytes while it was read", cap); errno = EFBIG; return -1; }
    }
    buf[got] = 0;
    if (!(flags & LD_FILE_NUL_OK) && memchr(buf, 0, got)) { WHY("it holds a NUL byte; not a text file"); errno = EINVAL; return -1; }
    if (line_cap) {
        size_t start = 0, line = 1;
        for (size_t i = 0; i <= got; i++) {
            if (i < got && buf[i] != '\n') continue;
            if (i - start > line_cap) {
                WHY("line %zu is longer than the limit of %zu bytes", line, line_cap);
                errno = EFBIG;
                return -1;
            }
            start = i + 1;
            line++;
        }
    }
    *len = got;
    return 0;
}

int ld_file_read_into(const char *path, char *buf, size_t cap, size_t line_cap, unsigned flags, size_t *len,
                      char *why, size_t wn) {
    *len = 0;
    buf[0] = 0;
    int absent;
    int fd = open_read(path, cap, flags, NULL, &absent, why, wn);
    if (fd < 0) return absent ? LD_FILE_ABSENT : LD_FILE_ERR;
    int rc = ld_file_read_fd(fd, buf, cap, line_cap, flags, len, why, wn);
    int e = errno;
    close(fd);
    errno = e;
    if (rc) { *len = 0; buf[0] = 0; }
    return rc ? LD_FILE_ERR : LD_FILE_OK;
}

int ld_file_read(const char *path, size_t cap, size_t line_cap, unsigned flags, char **out, size_t *len,
                 char *why, size_t wn) {
    *out = NULL;
    *len = 0;
    int absent;
    off_t size = 0;
    int fd = open_read(path, cap, flags, &size, &absent, why, wn);
    if (fd < 0) return absent ? LD_FILE_ABSENT : LD_FILE_ERR;
    /* The size fstat gave plus room to notice growth; files of /proc and /sys say 0 or a
     * page, so they get the cap (small for those). */
    size_t room = (size_t)size < cap ? (size_t)size + 1 : cap;
    if (size == 0 || room < 4096) room = cap < 4096 ? cap : 4096;
    char *buf = NULL;
    size_t got = 0;
    int rc = 0;
    for (;;) {
        char *nb = realloc(buf, room + 1);
        if (!nb) { WHY("out of memory"); errno = ENOMEM; rc = -1; break; }
        buf = nb;
        ssize_t k = read(fd, buf + got, room - got);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) { WHY("%s", ld_file_errtext(errno)); rc = -1; break; }
        if (k == 0) break;
        got += (size_t)k;
        if (got == room) {
            if (room > cap) break;
            room = room > cap / 2 ? cap + 1 : room * 2;
        }
    }
    int e = errno;
    close(fd);
    if (!rc && got > cap) { WHY("it grew past the limit of %zu bytes while it was read", cap); e = EFBIG; rc = -1; }
    if (!rc) {
        /* Re-check the text with the same rules as read_into (NUL bytes, line cap). */
        buf[got] = 0;
        if (!(flags & LD_FILE_NUL_OK) && memchr(buf, 0, got)) { WHY("it holds a NUL byte; not a text file"); e = EINVAL; rc = -1; }
        size_t start = 0, line = 1;
        for (size_t i = 0; !rc && line_cap && i <= got; i++) {
            if (i < got && buf[i] != '\n') continue;
            if (i - start > line_cap) {
                WHY("line %zu is longer than the limit of %zu bytes", line, line_cap);
                e = EFBIG;
                rc = -1;
            }
            start = i + 1;
            line++;
        }
    }
    if (rc) { free(buf); errno = e; return LD_FILE_ERR; }
    *out = buf;
    *len = got;
    return LD_FILE_OK;
}

/* ---- writing ----------------------------------------------------------------------- */

static long ms_until(const struct timespec *end) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long)(end->tv_sec - now.tv_sec) * 1000L + (end->tv_nsec - now.tv_nsec) / 1000000L;
}

/* SIGPIPE is blocked in the calling thread while it writes: a reader that goes away (a report
 * sent to `| head`, from the exit handler) must cost the report, never the program's life or
 * its exit status. A SIGPIPE this write raised is taken back; one the program had pending
 * already stays. One deadline for the whole write, so a reader that takes a little at a time
 * cannot stretch it past STREAM_WAIT_MS. A socket (`sock`) is written with send(MSG_DONTWAIT):
 * it is the program's own descriptor (a report to /dev/stdout under systemd), blocking, and its
 * O_NONBLOCK would be shared with whoever else holds it, so each call does not wait instead. */
static int write_all(int fd, const char *data, size_t n, int sock) {
    sigset_t pipe_set, old, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigemptyset(&pending);
    sigpending(&pending);
    int was_pending = sigismember(&pending, SIGPIPE) == 1;
    int masked = pthread_sigmask(SIG_BLOCK, &pipe_set, &old) == 0;
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += STREAM_WAIT_MS / 1000;
    end.tv_nsec += (long)(STREAM_WAIT_MS % 1000) * 1000000L;
    if (end.tv_nsec >= 1000000000L) { end.tv_sec++; end.tv_nsec -= 1000000000L; }
    int rc = 0, e = 0;
    size_t off = 0;
    while (off < n) {
        ssize_t w = sock ? send(fd, data + off, n - off, MSG_DONTWAIT | MSG_NOSIGNAL) : write(fd, data + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {   /* a FIFO or socket whose reader is slow */
            long left = ms_until(&end);
            struct pollfd pf = { .fd = fd, .events = POLLOUT };
            if (left <= 0 || poll(&pf, 1, (int)left) <= 0) { e = EAGAIN; rc = -1; break; }
            continue;
        }
        if (w <= 0) { e = w == 0 ? EIO : errno; rc = -1; break; }
        off += (size_t)w;
    }
    if (masked) {
        if (rc && e == EPIPE && !was_pending) {
            struct timespec zero = { 0, 0 };
            sigtimedwait(&pipe_set, NULL, &zero);
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    errno = e;
    return rc;
}

/* An existing FIFO or character device, written in place: never replaced, opened without
 * blocking (a FIFO without a reader is refused), and checked after the open to be the same
 * kind of file (a regular file swapped in meanwhile is never written in place). */
static int write_stream(int dfd, const char *name, const struct stat *want, const char *data, size_t n, char *why,
                        size_t wn) {
    int fd = openat(dfd, name, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ENXIO) WHY("it is a FIFO without a reader; not written");
        else WHY("%s", ld_file_errtext(e));
        errno = e;
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) ||
        (st.st_mode & S_IFMT) != (want->st_mode & S_IFMT) || st.st_rdev != want->st_rdev || st.st_ino != want->st_ino) {
        close(fd);
        WHY("the file changed while it was opened; not written");
        errno = EAGAIN;
        return -1;
    }
    int rc = write_all(fd, data, n, 0);
    int e = errno;
    close(fd);
    if (rc) WHY("%s", ld_file_errtext(e));
    errno = e;
    return rc;
}

/* ---- a descriptor named as a path: /dev/stdout ----------------------------------------- */

/* N of `prefix`N: decimal digits only, no leading zero (/proc/self/fd has no "01"), at most 9
 * digits; -1 for anything else. */
static int fd_suffix(const char *path, const char *prefix) {
    size_t pl = strlen(prefix);
    if (strncmp(path, prefix, pl) != 0) return -1;
    const char *d = path + pl;
    size_t n = strlen(d);
    if (n == 0 || n > 9 || (d[0] == '0' && n > 1)) return -1;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (d[i] < '0' || d[i] > '9') return -1;
        v = v * 10 + (d[i] - '0');
    }
    return v;
}

/* The target of the link `path` into buf (n bytes), when it is a link owned by this user or
 * root (the rule for any link followed to a stream); -1 otherwise. */
static int read_dev_link(const char *path, char *buf, size_t n) {
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISLNK(st.st_mode) || (st.st_uid != 0 && st.st_uid != geteuid())) return -1;
    ssize_t k = readlink(path, buf, n);
    if (k <= 0 || (size_t)k >= n) return -1;
    buf[k] = 0;
    return 0;
}

/* The descriptor `path` names, by name and by as many links as it takes (at most 4, each
 * short): /proc/self/fd/N itself; /dev/fd/N when /dev/fd is a link to /proc/self/fd;
 * /dev/stdout and /dev/stderr when they are links to one of those (/proc/self/fd/1, or fd/1
 * relative to /dev). -1 for any other path, written as a file with every refusal of one: a
 * link of the user's to /proc/self/fd/N, or /dev/stdout when it is no link, is no exception. */
static int named_fd(const char *path) {
    char cur[64], tgt[48];
    if (strlen(path) >= sizeof cur) return -1;
    memcpy(cur, path, strlen(path) + 1);
    for (int hop = 0; hop < 4; hop++) {
        int n = fd_suffix(cur, "/proc/self/fd/");
        if (n >= 0) return n;
        if ((n = fd_suffix(cur, "/dev/fd/")) >= 0) {
            if (read_dev_link("/dev/fd", tgt, sizeof tgt) != 0 || strcmp(tgt, "/proc/self/fd") != 0) return -1;
            return n;
        }
        if (strcmp(cur, "/dev/stdout") != 0 && strcmp(cur, "/dev/stderr") != 0) return -1;
        if (read_dev_link(cur, tgt, sizeof tgt) != 0) return -1;
        snprintf(cur, sizeof cur, "%s%s", tgt[0] == '/' ? "" : "/dev/", tgt);
    }
    return -1;
}

/* The program's descriptor `fd`, named as /dev/stdout or /dev/fd/N. A regular file or a socket
 * is written through fd itself, at its offset: an append to what the user redirected (`> log`),
 * nothing opened, renamed or truncated. 1 for a FIFO or character device: the caller reopens
 * it by its path without blocking, as any stream (fd itself may block, and setting O_NONBLOCK
 * on it would change it for everyone who shares it). 0, or -1 with why (a closed descriptor). */
static int write_fd(int fd, const char *data, size_t n, char *why, size_t wn) {
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        if (e == EBADF) WHY("descriptor %d is not open; not written", fd);
        else WHY("descriptor %d: %s", fd, ld_file_errtext(e));
        errno = e;
        return -1;
    }
    if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) return 1;
    if (!S_ISREG(st.st_mode) && !S_ISSOCK(st.st_mode)) {
        WHY("descriptor %d is %s; not written", fd, ld_file_kind(st.st_mode));
        errno = EINVAL;
        return -1;
    }
    if (write_all(fd, data, n, S_ISSOCK(st.st_mode)) != 0) {
        int e = errno;
        WHY("descriptor %d: %s", fd, ld_file_errtext(e));
        errno = e;
        return -1;
    }
    return 0;
}

int ld_file_write_at(int dfd, const char *name, const void *data, size_t len, unsigned flags, char *why,
                     size_t wn) {
    if (!name || !*name || strchr(name, '/')) { WHY("not a plain file name"); errno = EINVAL; return -1; }
    if (strlen(name) > 255) { WHY("the file name is longer than 255 bytes"); errno = ENAMETOOLONG; return -1; }
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISLNK(st.st_mode) && (flags & LD_FILE_STREAM)) {
            /* Follow a link only when it is ours or root's (as fs.protected_symlinks does in
             * sticky directories) and it leads to a device or FIFO: /dev/stdout, say. */
            struct stat tgt;
            if ((st.st_uid == geteuid() || st.st_uid == 0) && fstatat(dfd, name, &tgt, 0) == 0 &&
                (S_ISCHR(tgt.st_mode) || S_ISFIFO(tgt.st_mode)))
                return write_stream(dfd, name, &tgt, data, len, why, wn);
            if (st.st_uid == geteuid() || st.st_uid == 0) WHY("it is a symbolic link; give the path of the file itself");
            else WHY("it is a symbolic link owned by uid %u; not followed", (unsigned)st.st_uid);
            errno = ELOOP;
            return -1;
        }
        if ((S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) && (flags & LD_FILE_STREAM))
            return write_stream(dfd, name, &st, data, len, why, wn);
        if (!S_ISREG(st.st_mode)) {
            WHY("it is %s; %s", ld_file_kind(st.st_mode),
                S_ISLNK(st.st_mode) ? "not followed" : "only a regular file is replaced");
            errno = S_ISLNK(st.st_mode) ? ELOOP : S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
            return -1;
        }
        if (st.st_uid != geteuid()) {
            WHY("it belongs to uid %u, not to this user (uid %u); not replaced", (unsigned)st.st_uid,
                (unsigned)geteuid());
            errno = EPERM;
            return -1;
        }
    } else if (errno != ENOENT) {
        WHY("%s", ld_file_errtext(errno));
        return -1;
    }
    /* A temporary of our own (O_EXCL: a name planted meanwhile is never opened), then rename. */
    static unsigned seq;
    char tmp[320];
    int fd = -1;
    for (int attempt = 0; attempt < 64 && fd < 0; attempt++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned r = (unsigned)ts.tv_nsec ^ ((unsigned)getpid() << 12) ^
                     __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED) * 2654435761u;
        snprintf(tmp, sizeof tmp, ".%.200s.%08x.tmp", name, r);
        fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    (flags & LD_FILE_PRIVATE) ? 0600 : 0644);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) { WHY("cannot create a temporary file beside it: %s", ld_file_errtext(errno)); return -1; }
    int e = write_all(fd, data, len, 0) ? errno : 0;
    if (!e && (flags & LD_FILE_SYNC) && fsync(fd) != 0) e = errno;
    if (close(fd) != 0 && !e) e = errno;
    if (!e && renameat(dfd, tmp, dfd, name) != 0) e = errno;
    if (e) {
        unlinkat(dfd, tmp, 0);
        WHY("%s", ld_file_errtext(e));
        errno = e;
        return -1;
    }
    return 0;
}

int ld_file_write(const char *path, const void *data, size_t len, unsigned flags, char *why, size_t wn) {
    if (!path || !*path) { WHY("no file named"); errno = EINVAL; return -1; }
    if (strlen(path) >= 4096) { WHY("the path is longer than 4095 bytes"); errno = ENAMETOOLONG; return -1; }
    int fd = (flags & LD_FILE_STREAM) ? named_fd(path) : -1;
    if (fd >= 0) {
        int r = write_fd(fd, data, len, why, wn);
        if (r <= 0) return r;
    }
    const char *base;
    int absent;
    int dfd = open_parent(path, flags, &base, &absent, why, wn);
    if (dfd < 0) return -1;
    int rc = dir_is_parent(dfd, flags, why, wn);
    if (rc == 0) rc = ld_file_write_at(dfd, base, data, len, flags, why, wn);
    int e = errno;
    close(dfd);
    errno = e;
    return rc;
}

int ld_file_copy_at(int sdfd, const char *name, int ddfd, const char *dname, size_t cap, unsigned flags,
                    char *why, size_t wn) {
    int fd = openat(sdfd, name, RD_FLAGS | O_NOFOLLOW);
    if (fd < 0) { WHY("%s", ld_file_errtext(errno)); return -1; }
    if (check_opened(fd, cap, 0, NULL, why, wn) != 0) { close(fd); return -1; }
    char *buf = malloc(cap + 1);
    size_t len = 0;
    int rc = buf ? ld_file_read_fd(fd, buf, cap, 0, LD_FILE_NUL_OK, &len, why, wn) : -1;
    if (!buf) WHY("out of memory");
    close(fd);
    if (rc == 0) rc = ld_file_write_at(ddfd, dname, buf, len, flags, why, wn);
    free(buf);
    return rc;
}

int ld_file_create(const char *path, unsigned flags, char *why, size_t wn) {
    if (!path || !*path) { WHY("no file named"); errno = EINVAL; return -1; }
    const char *base;
    int absent;
    int dfd = open_parent(path, 0, &base, &absent, why, wn);
    if (dfd < 0) return -1;
    int fd = dir_is_parent(dfd, flags, why, wn) != 0 ? -1
           : openat(dfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC,
                    (flags & LD_FILE_PRIVATE) ? 0600 : 0644);
    int e = errno;
    if (fd < 0 && e == EEXIST) WHY("it exists already; a new file was expected");
    else if (fd < 0 && e != EPERM) WHY("%s", ld_file_errtext(e));
    close(dfd);
    errno = e;
    return fd;
}

int ld_file_devnull(int writable) {
    return open("/dev/null", writable ? O_WRONLY : O_RDONLY);
}
