/* test_file.c — CUnit tests of the file layer (shim/file.c) on its own: the caps and checks of
 * every read, the refusals and the atomic replacement of every write, the rules for output
 * directories, and that nothing it refuses leaves a trace. A blocking open would hang a test:
 * alarm() turns that into a failure. Cases needing another user run as root (chown to nobody)
 * and say when they are skipped. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include "shim/file.h"

static char g_dir[64];
static char g_why[512];

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", g_dir, name); }

static void put(const char *path, const char *text, mode_t mode) {
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
}

static int same(const char *path, const char *text) {
    char buf[4096];
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strcmp(buf, text) == 0;
}

/* Entries of g_dir (a refused write leaves no temporary behind). */
static int entries(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", g_dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p) { if (fscanf(p, "%d", &n) != 1) n = -1; pclose(p); }
    return n;
}

static void test_read_caps(void) {
    char p[128], *buf;
    size_t len;
    path_of(p, sizeof p, "text");
    put(p, "one\ntwo\n", 0644);
    CU_ASSERT_EQUAL(ld_file_read(p, 64, 16, 0, &buf, &len, g_why, sizeof g_why), LD_FILE_OK);
    CU_ASSERT_EQUAL(len, 8);
    CU_ASSERT_STRING_EQUAL(buf, "one\ntwo\n");
    free(buf);
    /* Over the size cap: refused before anything is read. */
    CU_ASSERT_EQUAL(ld_file_read(p, 7, 0, 0, &buf, &len, g_why, sizeof g_why), LD_FILE_ERR);
    CU_ASSERT_PTR_NULL(buf);
    CU_ASSERT_PTR_NOT_NULL(strstr(g_why, "larger than the limit of 7 bytes (8 bytes)"));
    /* A line over the line cap. */
    CU_ASSERT_EQUAL(ld_file_read(p, 64, 2, 0, &buf, &len, g_why, sizeof g_why), LD_FILE_ERR);
    CU_ASSERT_PTR_NOT_NULL(strstr(g_why, "line 1 is longer than the limit of 2 bytes"));
    /* NUL bytes: refused for text, allowed on request. */
    FILE *f = fopen(p, "w");
    fwrite("a\0b", 1, 3, f);
    fclose(f);
    CU_ASSERT_EQUAL(ld_file_read(p, 64, 0, 0, &buf, &len, g_why, sizeof g_why), LD_FILE_ERR);
    CU_ASSERT_PTR_NOT_NULL(strstr(g_why, "NUL byte"));
    CU_ASSERT_EQUAL(ld_file_read(p, 64, 0, LD_FILE_NUL_OK, &buf, &len, g_why, sizeof g_why), LD_FILE_OK);
    CU_ASSERT_EQUAL(len, 3);
    free(buf);
    /* Absent is its own answer; into a caller's buffer the same checks hold. */
    path_of(p, sizeof p, "absent");
    CU_ASSERT_EQUAL(ld_file_read(p, 64, 0, 0, &buf, &len, g_why, sizeof g_why), LD_FILE_ABSENT);
    char small[9];
    path_of(p, sizeof p, "text");
    put(p, "12345678", 0644);
    CU_ASSERT_EQUAL(ld_file_read_into(p, small, 8, 0, 0, &len, g_why, sizeof g_why), LD_FILE_OK);
    CU_ASSERT_STRING_EQUAL(small, "12345678");
    CU_ASSERT_EQUAL(ld_file_read_into(p, small, 4, 0, 0, &len, g_why, sizeof g_why), LD_FILE_ERR);
    CU_ASSERT_EQUAL(small[0], 0);
    /* /proc says size 0: read to its end under the cap. */
    CU_ASSERT_EQUAL(ld_file_read("/proc/self/status", 1 << 16, 0, 0, &buf, &len, g_why, sizeof g_why), LD_FILE_OK);
    CU_ASSERT_PTR_NOT_NULL(buf && strstr(buf, "Umask:"));
    free(buf);
    unlink(p);
}

static void test_read_special(void) {
    char p[128], *buf;
    size_t len;
    alarm(20);
    path_of(p, sizeof p, "fifo");
    CU_ASSERT_EQUAL_FATAL(mkfifo(p, 0600), 0);
    CU_ASSERT_EQUAL(ld_file_read(p, 64, 0, 0, &buf, &len, g_why, sizeof g_why), LD_FILE_ERR);
    CU_ASSERT_STRING_EQUAL(g_why, "a FIFO, not a regular file");
    CU_ASSERT_EQUAL(ld_file_check_regular(p, g_why, sizeof g_why), -1);
    unlink(p);
    CU_ASSERT_EQUAL(ld_file_read("/dev/zero", 64, 0, 0, &buf, &len, g_why, sizeof g_why), LD_FILE_ERR);
    CU_ASSERT_STRING_EQUAL(g_why, "a character device, not a regular file");
    CU_ASSERT_EQUAL(ld_file_read(g_dir, 64, 0, 0, &buf, &len, g_why, sizeof g_why), LD_FILE_ERR);
    CU_ASSERT_STRING_EQUAL(g_why, "a directory, not a regular file");
    /* 10 GiB sparse: refused by its size, not read. */
    path_of(p, sizeof p, "sparse");
    int fd = open(p, O_CREAT | O_WRONLY, 0600);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL(ftruncate(fd, (off_t)10 << 30), 0);
    close(fd);
    CU_ASSERT_EQUAL(ld_file_read(p, 1 << 20, 0, 0, &buf, &len, g_why, sizeof g_why), LD_FILE_ERR);
    CU_ASSERT_PTR_NOT_NULL(strstr(g_why, "(10737418240 bytes)"));
    CU_ASSERT_EQUAL(ld_file_check_regular(p, g_why, sizeof g_why), 0);
    unlink(p);
    alarm(0);
}

/* A file checked through a descriptor, then named again (LDSHIM_LIBCUDA without /proc): the
 * name is the descriptor's file until something else is put in its place. */
static void test_same(void) {
    char p[128], q[128];
    path_of(p, sizeof p, "lib.so");
    path_of(q, sizeof q, "other.so");
    put(p, "one\n", 0644);
    put(q, "two\n", 0644);
    int fd = ld_file_open_read(p, 64, 0, NULL, g_why, sizeof g_why);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL(ld_file_same(p, fd, g_why, sizeof g_why), 1);
    CU_ASSERT_EQUAL(rename(q, p), 0);                           /* swapped */
    CU_ASSERT_EQUAL(ld_file_same(p, fd, g_why, sizeof g_why), 0);
    CU_ASSERT_STRING_EQUAL(g_why, "it was replaced after it was checked");
    unlink(p);
    CU_ASSERT_EQUAL(ld_file_same(p, fd, g_why, sizeof g_why), -1);   /* gone */
    close(fd);
}

static void test_read_trusted(void) {
    char p[128], real[128], *buf;
    size_t len;
    path_of(p, sizeof p, "trusted");
    put(p, "x\n", 0600);
    CU_ASSERT_EQUAL(ld_file_read(p, 64, 0, LD_FILE_TRUSTED, &buf, &len, g_why, sizeof g_why), LD_FILE_OK);
    free(buf);
    chmod(p, 0620);
    CU_ASSERT_EQUAL(ld_file_read(p, 64, 0, LD_FILE_TRUSTED, &buf, &len, g_why, sizeof g_why), LD_FILE_ERR);
    CU_ASSERT_STRING_EQUAL(g_why, "writable by others; not trusted");
    chmod(p, 0600);
    path_of(real, sizeof real, "trusted.real");
    CU_ASSERT_EQUAL(rename(p, real), 0);
    CU_ASSERT_EQUAL(symlink(real, p), 0);
    CU_ASSERT_EQUAL(ld_file_read(p, 64, 0, LD_FILE_TRUSTED, &buf, &len, g_why, sizeof g_why), LD_FILE_ERR);
    CU_ASSERT_STRING_EQUAL(g_why, "a symbolic link; not trusted");
    /* Without TRUSTED a link to a regular file is read (the user named it). */
    CU_ASSERT_EQUAL(ld_file_read(p, 64, 0, 0, &buf, &len, g_why, sizeof g_why), LD_FILE_OK);
    free(buf);
    unlink(p);
    unlink(real);
}

static void test_write_replace(void) {
    char p[128];
    path_of(p, sizeof p, "out.json");
    int before = entries();
    CU_ASSERT_EQUAL(ld_file_write(p, "new\n", 4, 0, g_why, sizeof g_why), 0);
    CU_ASSERT(same(p, "new\n"));
    struct stat st;
    CU_ASSERT_EQUAL(stat(p, &st), 0);
    mode_t um = umask(0);
    umask(um);
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0644 & ~um);
    ino_t ino = st.st_ino;
    /* Replaced by a new file (a reader holding the old one keeps it whole). */
    CU_ASSERT_EQUAL(ld_file_write(p, "newer\n", 6, LD_FILE_PRIVATE | LD_FILE_SYNC, g_why, sizeof g_why), 0);
    CU_ASSERT(same(p, "newer\n"));
    CU_ASSERT_EQUAL(stat(p, &st), 0);
    CU_ASSERT_NOT_EQUAL(st.st_ino, ino);
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0600);
    CU_ASSERT_EQUAL(entries(), before + 1);   /* no temporary left */
    unlink(p);
}

static void test_write_refusals(void) {
    char p[128], victim[128], ghost[128];
    alarm(20);
    path_of(victim, sizeof victim, "victim");
    put(victim, "private\n", 0600);
    path_of(p, sizeof p, "target");
    int before = entries();
    /* A link of ours to a regular file, a dangling link: never followed, nothing created. */
    CU_ASSERT_EQUAL(symlink(victim, p), 0);
    CU_ASSERT_EQUAL(ld_file_write(p, "x", 1, LD_FILE_STREAM, g_why, sizeof g_why), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(g_why, "symbolic link"));
    CU_ASSERT(same(victim, "private\n"));
    unlink(p);
    path_of(ghost, sizeof ghost, "ghost");
    CU_ASSERT_EQUAL(symlink(ghost, p), 0);
    CU_ASSERT_EQUAL(ld_file_write(p, "x", 1, 0, g_why, sizeof g_why), -1);
    CU_ASSERT_NOT_EQUAL(access(ghost, F_OK), 0);
    unlink(p);
    /* A FIFO: refused without LD_FILE_STREAM; with it, refused without a reader, at once. */
    CU_ASSERT_EQUAL(mkfifo(p, 0600), 0);
    CU_ASSERT_EQUAL(ld_file_write(p, "x", 1, 0, g_why, sizeof g_why), -1);
    CU_ASSERT_STRING_EQUAL(g_why, "it is a FIFO; only a regular file is replaced");
    CU_ASSERT_EQUAL(ld_file_write(p, "x", 1, LD_FILE_STREAM, g_why, sizeof g_why), -1);
    CU_ASSERT_STRING_EQUAL(g_why, "it is a FIFO without a reader; not written");
    unlink(p);
    /* A directory, a path too long, a name ending in '/'. */
    CU_ASSERT_EQUAL(mkdir(p, 0700), 0);
    CU_ASSERT_EQUAL(ld_file_write(p, "x", 1, 0, g_why, sizeof g_why), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(g_why, "a directory"));
    rmdir(p);
    char longp[5000];
    memset(longp, 'a', sizeof longp - 1);
    longp[0] = '/';
    longp[sizeof longp - 1] = 0;
    CU_ASSERT_EQUAL(ld_file_write(longp, "x", 1, 0, g_why, sizeof g_why), -1);
    CU_ASSERT_STRING_EQUAL(g_why, "the path is longer than 4095 bytes");
    /* /dev/null is a character device: written in place with LD_FILE_STREAM. */
    CU_ASSERT_EQUAL(ld_file_write("/dev/null", "x", 1, LD_FILE_STREAM, g_why, sizeof g_why), 0);
    CU_ASSERT_EQUAL(ld_file_write("/dev/null", "x", 1, 0, g_why, sizeof g_why), -1);
    CU_ASSERT_EQUAL(entries(), before);
    /* Another user's file, another user's link: only root can set these up. */
    if (geteuid() == 0) {
        put(p, "theirs\n", 0644);
        CU_ASSERT_EQUAL(chown(p, 65534, 65534), 0);
        CU_ASSERT_EQUAL(ld_file_write(p, "x", 1, 0, g_why, sizeof g_why), -1);
        CU_ASSERT_PTR_NOT_NULL(strstr(g_why, "belongs to uid 65534"));
        CU_ASSERT(same(p, "theirs\n"));
        unlink(p);
        CU_ASSERT_EQUAL(symlink("/dev/null", p), 0);
        CU_ASSERT_EQUAL(lchown(p, 65534, 65534), 0);
        CU_ASSERT_EQUAL(ld_file_write(p, "x", 1, LD_FILE_STREAM, g_why, sizeof g_why), -1);
        CU_ASSERT_PTR_NOT_NULL(strstr(g_why, "symbolic link owned by uid 65534"));
        unlink(p);
    } else {
        fprintf(stderr, "\n  (skipped: another user's file and link need root)\n");
    }
    unlink(victim);
    alarm(0);
}

/* A reader that takes a little and goes away while a stream is written (a report sent to
 * `| head` at exit): the write fails, and the process neither dies of SIGPIPE (its default
 * action, which would end this test program) nor keeps one pending. */
static void *read_some_then_close(void *arg) {
    int fd = *(int *)arg;
    char buf[4096];
    usleep(100 * 1000);
    (void)!read(fd, buf, sizeof buf);
    close(fd);
    return NULL;
}

static void test_write_reader_gone(void) {
    char p[128];
    alarm(20);
    path_of(p, sizeof p, "fifo-gone");
    CU_ASSERT_EQUAL_FATAL(mkfifo(p, 0600), 0);
    int rd = open(p, O_RDONLY | O_NONBLOCK);
    CU_ASSERT_FATAL(rd >= 0);
    pthread_t t;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, read_some_then_close, &rd), 0);
    size_t n = 1u << 20;
    char *data = malloc(n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(data);
    memset(data, 'x', n);
    CU_ASSERT_EQUAL(ld_file_write(p, data, n, LD_FILE_STREAM, g_why, sizeof g_why), -1);
    pthread_join(t, NULL);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    CU_ASSERT_FALSE(sigismember(&pending, SIGPIPE));
    free(data);
    unlink(p);
    alarm(0);
}

/* /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N name the program's own descriptor: a
 * regular file or a socket is written through it at its offset (`./app > log.json`: an
 * append, the same inode, nothing truncated); a pipe is still reopened without blocking; a
 * closed descriptor is an error value. Any other link to a descriptor stays refused. */
static void test_write_descriptor(void) {
    char p[128], name[64], l[128];
    struct stat st, st2;
    alarm(20);
    path_of(p, sizeof p, "redirected.json");
    int f = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CU_ASSERT_FATAL(f >= 0);
    CU_ASSERT_EQUAL(write(f, "before\n", 7), 7);
    CU_ASSERT_EQUAL(fstat(f, &st), 0);
    /* fd 1 a regular file (stdout redirected): the report follows what the program wrote. */
    int pp[2];
    CU_ASSERT_FATAL(pipe2(pp, O_NONBLOCK) == 0);   /* a read never waits */
    fflush(stdout);
    int saved = dup(1);
    CU_ASSERT_FATAL(saved >= 0);
    CU_ASSERT_EQUAL(dup2(f, 1), 1);
    int rc = ld_file_write("/dev/stdout", "report\n", 7, LD_FILE_STREAM, g_why, sizeof g_why);
    CU_ASSERT_EQUAL(write(1, "after\n", 6), 6);
    /* fd 1 closed: an error value, nothing else. */
    close(1);
    errno = 0;
    int rc_closed = ld_file_write("/dev/stdout", "x", 1, LD_FILE_STREAM, g_why, sizeof g_why);
    int e_closed = errno;
    char why_closed[sizeof g_why];
    snprintf(why_closed, sizeof why_closed, "%s", g_why);
    /* fd 1 a pipe: still written (reopened without blocking, as before). */
    CU_ASSERT_EQUAL(dup2(pp[1], 1), 1);
    int rc_pipe = ld_file_write("/dev/stdout", "piped\n", 6, LD_FILE_STREAM, g_why, sizeof g_why);
    CU_ASSERT_EQUAL(dup2(saved, 1), 1);
    close(saved);
    close(pp[1]);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(same(p, "before\nreport\nafter\n"));
    CU_ASSERT(stat(p, &st2) == 0 && st2.st_ino == st.st_ino);   /* written in place, no rename */
    CU_ASSERT_EQUAL(rc_closed, -1);
    CU_ASSERT_EQUAL(e_closed, EBADF);
    CU_ASSERT_STRING_EQUAL(why_closed, "descriptor 1 is not open; not written");
    CU_ASSERT_EQUAL(rc_pipe, 0);
    char buf[16] = "";
    CU_ASSERT_EQUAL(read(pp[0], buf, sizeof buf - 1), 6);
    CU_ASSERT_STRING_EQUAL(buf, "piped\n");
    close(pp[0]);

    /* /dev/fd/N and /proc/self/fd/N of a file the program opened: appended at its offset. */
    snprintf(name, sizeof name, "/dev/fd/%d", f);
    CU_ASSERT_EQUAL(ld_file_write(name, "fd\n", 3, LD_FILE_STREAM, g_why, sizeof g_why), 0);
    snprintf(name, sizeof name, "/proc/self/fd/%d", f);
    CU_ASSERT_EQUAL(ld_file_write(name, "proc\n", 5, LD_FILE_STREAM, g_why, sizeof g_why), 0);
    CU_ASSERT(same(p, "before\nreport\nafter\nfd\nproc\n"));
    CU_ASSERT_EQUAL(lseek(f, 0, SEEK_CUR), 28);
    /* Without LD_FILE_STREAM the name is a file like any other: refused (a link). */
    CU_ASSERT_EQUAL(ld_file_write(name, "x", 1, 0, g_why, sizeof g_why), -1);
    /* A link of the user's to the descriptor, and a leading zero: not a descriptor's name,
     * refused as the link to a regular file elsewhere they are. */
    path_of(l, sizeof l, "to-fd");
    CU_ASSERT_EQUAL(symlink(name, l), 0);
    CU_ASSERT_EQUAL(ld_file_write(l, "x", 1, LD_FILE_STREAM, g_why, sizeof g_why), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(g_why, "symbolic link"));
    unlink(l);
    snprintf(name, sizeof name, "/dev/fd/0%d", f);
    CU_ASSERT_EQUAL(ld_file_write(name, "x", 1, LD_FILE_STREAM, g_why, sizeof g_why), -1);
    CU_ASSERT(same(p, "before\nreport\nafter\nfd\nproc\n"));
    /* A closed descriptor by number. */
    int gone = dup(f);
    CU_ASSERT_FATAL(gone >= 0);
    close(gone);
    snprintf(name, sizeof name, "/dev/fd/%d", gone);
    errno = 0;
    CU_ASSERT_EQUAL(ld_file_write(name, "x", 1, LD_FILE_STREAM, g_why, sizeof g_why), -1);
    CU_ASSERT_EQUAL(errno, EBADF);
    CU_ASSERT_PTR_NOT_NULL(strstr(g_why, "is not open"));
    /* A read-only descriptor: the write's own error. */
    int ro = open(p, O_RDONLY);
    snprintf(name, sizeof name, "/dev/fd/%d", ro);
    CU_ASSERT_EQUAL(ld_file_write(name, "x", 1, LD_FILE_STREAM, g_why, sizeof g_why), -1);
    close(ro);
    close(f);
    CU_ASSERT(same(p, "before\nreport\nafter\nfd\nproc\n"));
    /* A socket (stdout under systemd): sent whole. A directory: refused. */
    int sv[2];
    CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    snprintf(name, sizeof name, "/dev/fd/%d", sv[0]);
    CU_ASSERT_EQUAL(ld_file_write(name, "sock\n", 5, LD_FILE_STREAM, g_why, sizeof g_why), 0);
    memset(buf, 0, sizeof buf);
    CU_ASSERT_EQUAL(recv(sv[1], buf, sizeof buf - 1, MSG_DONTWAIT), 5);
    CU_ASSERT_STRING_EQUAL(buf, "sock\n");
    close(sv[0]);
    close(sv[1]);
    int dfd = open(g_dir, O_RDONLY | O_DIRECTORY);
    snprintf(name, sizeof name, "/proc/self/fd/%d", dfd);
    CU_ASSERT_EQUAL(ld_file_write(name, "x", 1, LD_FILE_STREAM, g_why, sizeof g_why), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(g_why, "is a directory; not written"));
    close(dfd);
    unlink(p);
    alarm(0);
}

static void test_write_shared_dirs(void) {
    char ww[128], p[160];
    path_of(ww, sizeof ww, "ww");
    CU_ASSERT_EQUAL(mkdir(ww, 0700), 0);
    chmod(ww, 0777);
    snprintf(p, sizeof p, "%s/r.json", ww);
    CU_ASSERT_EQUAL(ld_file_write(p, "x", 1, 0, g_why, sizeof g_why), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(g_why, "without the sticky bit"));
    CU_ASSERT_NOT_EQUAL(access(p, F_OK), 0);
    chmod(ww, 01777);                                  /* /tmp-like: a parent, fine */
    CU_ASSERT_EQUAL(ld_file_write(p, "x", 1, 0, g_why, sizeof g_why), 0);
    unlink(p);
    /* An output directory is never made inside it without the sticky bit, nor accepted when
     * others may write it. */
    chmod(ww, 0777);
    snprintf(p, sizeof p, "%s/out", ww);
    CU_ASSERT_EQUAL(ld_file_open_dir(p, 0, g_why, sizeof g_why), -1);
    CU_ASSERT_NOT_EQUAL(access(p, F_OK), 0);
    CU_ASSERT_EQUAL(ld_file_open_dir(ww, 0, g_why, sizeof g_why), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(g_why, "writable by everyone"));
    chmod(ww, 0700);
    int dfd = ld_file_open_dir(p, 0, g_why, sizeof g_why);   /* created 0700 */
    CU_ASSERT(dfd >= 0);
    struct stat st;
    CU_ASSERT(dfd >= 0 && fstat(dfd, &st) == 0 && (st.st_mode & 0777) == 0700);
    CU_ASSERT_EQUAL(ld_file_write_at(dfd, "a.csv", "1\n", 2, 0, g_why, sizeof g_why), 0);
    CU_ASSERT_EQUAL(ld_file_write_at(dfd, "../escape", "1\n", 2, 0, g_why, sizeof g_why), -1);
    if (dfd >= 0) close(dfd);
    /* A link as the directory: not followed. LD_FILE_EXISTING: absent is ENOENT, made never. */
    char l[160], q[200];
    snprintf(l, sizeof l, "%s/link", ww);
    CU_ASSERT_EQUAL(symlink(p, l), 0);
    CU_ASSERT_EQUAL(ld_file_open_dir(l, 0, g_why, sizeof g_why), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(g_why, "not followed"));
    snprintf(q, sizeof q, "%s/none", ww);
    errno = 0;
    CU_ASSERT_EQUAL(ld_file_open_dir(q, LD_FILE_EXISTING, g_why, sizeof g_why), -1);
    CU_ASSERT_EQUAL(errno, ENOENT);
    CU_ASSERT_NOT_EQUAL(access(q, F_OK), 0);
    snprintf(q, sizeof q, "%s/a.csv", p);
    unlink(q);
    unlink(l);
    rmdir(p);
    rmdir(ww);
}

static void test_printable(void) {
    char out[64];
    CU_ASSERT_STRING_EQUAL(ld_file_printable("a\033[31mb\nc\\", out, sizeof out), "a\\x1b[31mb\\x0ac\\x5c");
    CU_ASSERT_STRING_EQUAL(ld_file_printable("\033\033\033", out, 9), "\\x1b");   /* never a cut escape */
    CU_ASSERT_STRING_EQUAL(ld_file_printable("caf\xc3\xa9", out, sizeof out), "caf\xc3\xa9");
}

static int setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/ldshim-test-file-XXXXXX");
    return mkdtemp(g_dir) ? 0 : 1;
}

static int teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : 1;
}

static void register_tests(void) {
    CU_pSuite s = CU_add_suite("file layer (shim/file.c)", setup, teardown);
    CU_add_test(s, "reads: size and line caps, NUL bytes, absent, /proc", test_read_caps);
    CU_add_test(s, "reads: FIFO, /dev/zero, directory, 10 GiB sparse file", test_read_special);
    CU_add_test(s, "reads: trusted files (mode, link)", test_read_trusted);
    CU_add_test(s, "a checked descriptor's file, named again (swapped, gone)", test_same);
    CU_add_test(s, "writes: new file renamed over the old, mode, no temporary left", test_write_replace);
    CU_add_test(s, "writes: links, FIFO, directory, long path, devices, other users", test_write_refusals);
    CU_add_test(s, "writes: a FIFO reader that goes away mid-write (no SIGPIPE death)", test_write_reader_gone);
    CU_add_test(s, "writes: /dev/stdout, /dev/fd/N of a file, pipe, socket, closed descriptor", test_write_descriptor);
    CU_add_test(s, "shared and output directories", test_write_shared_dirs);
    CU_add_test(s, "printable copies for messages", test_printable);
}

#include "tests/unit/cunit_main.h"
