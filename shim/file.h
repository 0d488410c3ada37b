/* file.h — the one way the project's C code touches a file (the shim, the policy loader, the
 * tools). Nothing else calls open/fopen/openat/creat: tests/unit/test_file_layer.sh greps
 * shim/, policy/ and tools/ C files for them.
 *
 * Reading: O_RDONLY|O_NONBLOCK|O_NOCTTY|O_CLOEXEC, so a FIFO or a device never blocks the
 * open; fstat must say a regular file (a FIFO, device, directory or socket is refused by
 * name); the size is checked against the caller's cap before anything is read and again
 * while reading (a file that grows), and an optional line cap refuses any longer line. With
 * LD_FILE_TRUSTED the file and its directory must be the user's, writable by nobody else,
 * and the file no symbolic link (a cache that decides what the shim publishes).
 *
 * Writing: the parent directory is opened once; a new temporary name is created relative to
 * it with O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC (mode 0644 under the umask, or 0600 with
 * LD_FILE_PRIVATE), written, optionally fsync'd, then renamed over the target, and only
 * when the target is absent or a regular file the effective user owns. Nothing is ever
 * truncated in place and no link planted at the target is followed. With LD_FILE_STREAM an
 * existing FIFO or character device (or a link owned by the user or root that leads to one)
 * is written in place without blocking, and /dev/stdout, /dev/stderr, /dev/fd/N and
 * /proc/self/fd/N name the program's open descriptor N: a regular file or socket there is
 * written through N at its offset (`> log.json`: appended; nothing opened or truncated), a
 * closed N is an error. The report's documented exceptions.
 *
 * Directories the project writes into (the probe dump, caches, kept logs) are created new
 * (0700, or 0755 with LD_FILE_SHARED) or accepted when they exist, are no symbolic link, are
 * the user's, and are writable by nobody else; a new one is not made inside a directory
 * others may write without the sticky bit. A directory writable by everyone (or by a group,
 * when it is another user's) holds a file the project writes (a report in /tmp) only when its
 * sticky bit is set.
 *
 * Errors are values: -1 (or LD_FILE_ABSENT) and one line in `why`, without the path (the
 * caller names the file and says what it does next). errno is preserved for callers that
 * want it. Every function is reentrant and thread-safe, and calls no dlopen (the shim may
 * read a file while another thread holds the dynamic loader's lock). */
#ifndef LDSHIM_FILE_H
#define LDSHIM_FILE_H

#include <stddef.h>
#include <sys/types.h>

#define LD_FILE_TRUSTED  0x01u   /* read/write: file and directory ours, writable by no one else */
#define LD_FILE_PRIVATE  0x02u   /* write: mode 0600 (default 0644 under the umask)              */
#define LD_FILE_SYNC     0x04u   /* write: fsync the file before the rename                     */
#define LD_FILE_STREAM   0x08u   /* write: an existing FIFO/char device is written in place     */
#define LD_FILE_MKDIR    0x10u   /* write/dir: create missing directories (0700)                */
#define LD_FILE_SHARED   0x20u   /* dir: a new directory gets 0755 under the umask (not 0700)   */
#define LD_FILE_NUL_OK   0x40u   /* read: NUL bytes allowed (default: refused, text files)      */
#define LD_FILE_EXISTING 0x80u   /* dir: check an existing directory only; absent: -1, ENOENT   */

enum { LD_FILE_OK = 0, LD_FILE_ABSENT = 1, LD_FILE_ERR = -1 };

/* Read the whole regular file `path` (at most `cap` bytes; every line at most `line_cap`
 * bytes without its newline, 0: no line cap) into a new buffer of len + 1 bytes,
 * NUL-terminated, which the caller frees. LD_FILE_OK, LD_FILE_ABSENT (no such file; *buf
 * NULL) or LD_FILE_ERR with `why`. */
int ld_file_read(const char *path, size_t cap, size_t line_cap, unsigned flags, char **buf, size_t *len,
                 char *why, size_t wn);

/* The same into the caller's buffer of cap + 1 bytes. */
int ld_file_read_into(const char *path, char *buf, size_t cap, size_t line_cap, unsigned flags, size_t *len,
                      char *why, size_t wn);

/* Open `path` for reading after the checks above (regular file, size <= cap): a descriptor
 * the caller closes (mmap of a large image), and its size; -1 with `why`. */
int ld_file_open_read(const char *path, size_t cap, unsigned flags, off_t *size, char *why, size_t wn);

/* Read what is left of `fd` (from ld_file_open_read) into buf of cap + 1 bytes with the
 * same caps and checks as ld_file_read_into: 0, or -1 with why. */
int ld_file_read_fd(int fd, char *buf, size_t cap, size_t line_cap, unsigned flags, size_t *len, char *why,
                    size_t wn);

/* 0 if `path` is a regular file that could be read, -1 with why. */
int ld_file_check_regular(const char *path, char *why, size_t wn);

/* 1 if `path` (links followed) is still the file open as `fd` (the same st_dev and st_ino):
 * a file checked through a descriptor and then used by name, where no name reaches the
 * descriptor itself. 0 if it is another file, -1 if it cannot be told; why says which. */
int ld_file_same(const char *path, int fd, char *why, size_t wn);

/* The untranslated text of errno e: callers may run while another thread holds the dynamic
 * loader's lock, and a localized strerror may dlopen translation modules. Thread-safe. */
const char *ld_file_errtext(int e);

/* Write `len` bytes to `path` as described above. 0, or -1 with `why`. */
int ld_file_write(const char *path, const void *data, size_t len, unsigned flags, char *why, size_t wn);

/* The same for the entry `name` (no '/') of the directory open as `dfd`. */
int ld_file_write_at(int dfd, const char *name, const void *data, size_t len, unsigned flags, char *why,
                     size_t wn);

/* Open an output directory: create it when absent (LD_FILE_MKDIR creates its parents too,
 * 0700), refuse a link, a non-directory, one of another user or one others may write.
 * A descriptor (O_DIRECTORY|O_CLOEXEC) the caller closes, or -1 with `why`. */
int ld_file_open_dir(const char *path, unsigned flags, char *why, size_t wn);

/* Copy the regular file `name` of directory `sdfd` (at most `cap` bytes) to `dname` in
 * directory `ddfd` through ld_file_write_at: the kept-logs copy. 0 or -1 with why. */
int ld_file_copy_at(int sdfd, const char *name, int ddfd, const char *dname, size_t cap, unsigned flags,
                    char *why, size_t wn);

/* A new file `path` for streaming output (a daemon's log): created with
 * O_CREAT|O_EXCL|O_NOFOLLOW (an existing name, link or not, is refused), O_WRONLY, mode
 * 0600 with LD_FILE_PRIVATE else 0644 under the umask, close-on-exec. A descriptor, or -1
 * with why. */
int ld_file_create(const char *path, unsigned flags, char *why, size_t wn);

/* /dev/null opened for a spawned child's stdin (O_RDONLY) or output (O_WRONLY), close-on-exec
 * off so it survives exec; -1 on failure. A character device by construction: the one file
 * the layer opens without the regular-file check. */
int ld_file_devnull(int writable);

/* The kind of a file mode in words ("a FIFO", "a directory", ...), for messages. */
const char *ld_file_kind(mode_t m);

/* A copy of `s` for a message: non-printable bytes (escape codes, newlines) as \xNN, at most
 * n - 1 bytes, NUL-terminated; returns out. */
const char *ld_file_printable(const char *s, char *out, size_t n);

#endif
