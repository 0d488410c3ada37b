/* load.c — read a policy file and parse it.
 *
 * Through the file layer (shim/file.h): opened without blocking (a FIFO or a device never
 * stalls the program), a regular file only, refused by its size before anything is read, so
 * /dev/zero, a FIFO or a sparse 4 GiB file costs one open and one fstat. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "policy/policy.h"
#include "shim/file.h"

static int io_fail(const char *path, const char *what, int e, char *err, size_t errlen) {
    if (err && errlen) snprintf(err, errlen, "%s:0:0: %s: %s", path, what, ld_file_errtext(e));
    return -1;
}

/* See policy.h. Reentrant; the buffer read is freed on every path. */
int ld_policy_load(const char *path, ld_policy_t *out, char *err, size_t errlen) {
    if (out) ld_policy_init(out);
    if (!path) return io_fail("<policy>", "cannot open", EINVAL, err, errlen);
    char why[256];
    off_t size = 0;
    int fd = ld_file_open_read(path, (size_t)-1 / 2, LD_FILE_NUL_OK, &size, why, sizeof why);
    if (fd < 0) {
        if (err && errlen) snprintf(err, errlen, "%s:0:0: cannot open: %s", path, why);
        return -1;
    }
    if (size > LD_POLICY_MAX_BYTES) {
        close(fd);
        if (err && errlen)
            snprintf(err, errlen, "%s:0:0: file larger than 1 MiB (%lld bytes; the limit is %d bytes)", path,
                     (long long)size, LD_POLICY_MAX_BYTES);
        return -1;
    }
    // NOTES: one byte past the limit is enough for the parser to report "too large" (the
    // file may grow between fstat and read); NUL bytes are the parser's to report, with
    // their line and column.
    size_t cap = (size_t)LD_POLICY_MAX_BYTES + 1, len = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        close(fd);
        return io_fail(path, "cannot read", ENOMEM, err, errlen);
    }
    int rc = ld_file_read_fd(fd, buf, cap, 0, LD_FILE_NUL_OK, &len, why, sizeof why);
    close(fd);
    if (rc != 0) {
        free(buf);
        if (err && errlen) snprintf(err, errlen, "%s:0:0: cannot read: %s", path, why);
        return -1;
    }
    rc = ld_policy_parse(buf, len, path, out, err, errlen);
    free(buf);
    return rc;
}
