/* load.c — read a policy file and parse it.
 *
 * The file is opened without blocking (a FIFO or a device never stalls the program), must
 * be a regular file, and is refused by its size before anything is read, so /dev/zero, a
 * FIFO or a sparse 4 GiB file costs one open and one fstat. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "policy/policy.h"

/* The message for errno e. NOTES: the shim reads the policy at a program's first CUDA call,
 * possibly while another thread holds the dynamic loader's lock and waits for us; the
 * localized strerror may load translation and conversion modules (dlopen), so prefer the
 * untranslated text where glibc has it. */
static const char *err_text(int e) {
#if defined(__GLIBC__) && defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 32)
    const char *s = strerrordesc_np(e);
    if (s) return s;
#endif
#endif
    return strerror(e);
}

static int io_fail(const char *path, const char *what, int e, char *err, size_t errlen) {
    if (err && errlen) snprintf(err, errlen, "%s:0:0: %s: %s", path, what, err_text(e));
    return -1;
}

static const char *kind_of(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

/* See policy.h. Reentrant; the buffer read is freed on every path. */
int ld_policy_load(const char *path, ld_policy_t *out, char *err, size_t errlen) {
    if (out) ld_policy_init(out);
    if (!path) return io_fail("<policy>", "cannot open", EINVAL, err, errlen);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return io_fail(path, "cannot open", errno, err, errlen);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return io_fail(path, "cannot open", e, err, errlen);
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return io_fail(path, "cannot open", EISDIR, err, errlen);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        if (err && errlen)
            snprintf(err, errlen, "%s:0:0: cannot open: %s, not a regular file", path, kind_of(st.st_mode));
        return -1;
    }
    if (st.st_size > LD_POLICY_MAX_BYTES) {
        close(fd);
        if (err && errlen)
            snprintf(err, errlen, "%s:0:0: file larger than 1 MiB (%lld bytes; the limit is %d bytes)", path,
                     (long long)st.st_size, LD_POLICY_MAX_BYTES);
        return -1;
    }
    // NOTES: one byte past the limit is enough for the parser to report "too large" (the
    // file may grow between fstat and read).
    size_t cap = (size_t)LD_POLICY_MAX_BYTES + 1, len = 0;
    char *buf = malloc(cap);
    if (!buf) {
        close(fd);
        return io_fail(path, "cannot read", ENOMEM, err, errlen);
    }
    while (len < cap) {
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return io_fail(path, "cannot read", e, err, errlen);
        }
        if (n == 0) break;
        len += (size_t)n;
    }
    close(fd);
    int rc = ld_policy_parse(buf, len, path, out, err, errlen);
    free(buf);
    return rc;
}
