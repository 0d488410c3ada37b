/* load.c — read a policy file (at most LD_POLICY_MAX_BYTES + 1 bytes) and parse it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "policy/policy.h"

static int io_fail(const char *path, const char *what, int e, char *err, size_t errlen) {
    if (err && errlen) snprintf(err, errlen, "%s:0:0: %s: %s", path, what, strerror(e));
    return -1;
}

/* See policy.h. Reentrant; the buffer read is freed on every path. */
int ld_policy_load(const char *path, ld_policy_t *out, char *err, size_t errlen) {
    if (out) ld_policy_init(out);
    if (!path) return io_fail("<policy>", "cannot open", EINVAL, err, errlen);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
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
    // NOTES: one byte past the limit is enough for the parser to report "too large".
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
