/* dlcheck.c — a user-named shared library loaded from the file that was checked (dlcheck.h).
 *
 * dlopen by name opens the name again after any check of it: a FIFO swapped in between would
 * block that open (and with it the program's first CUDA call, or the MLOPart helper) forever.
 * The loader can open the checked descriptor itself through /proc/self/fd/N, which names the
 * same inode whatever the path names by then. */
#include "shim/dlcheck.h"
#include "shim/file.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void *ld_dlopen_loaded_first(const char *name) {
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    return h ? h : dlopen(name, RTLD_NOW | RTLD_LOCAL);
}

void *ld_dlopen_checked(const char *path, char *why, size_t wn) {
    int fd = ld_file_open_read(path, SIZE_MAX / 2, 0, NULL, why, wn);
    if (fd < 0) return NULL;
    /* Spelt with "./": the loader answers a later dlopen of the same string with this library,
     * and a program that loads a file of its own as /proc/self/fd/N (a memfd, say) once N is
     * closed and reused must get that file. */
    char self[40];
    snprintf(self, sizeof self, "/proc/self/fd/./%d", fd);
    void *h = ld_dlopen_loaded_first(self);
    if (!h) {
        const char *e = dlerror();
        size_t sl = strlen(self);
        if (e && !strncmp(e, self, sl) && e[sl] == ':') e += sl + (e[sl + 1] == ' ' ? 2 : 1);
        snprintf(why, wn, "%s", e ? e : "dlopen failed");
        struct stat st;
        /* No /proc (a bare chroot or container): no name reaches the descriptor. Load by name
         * only while the name still is the file checked (st_dev, st_ino): that detects a swap
         * made so far, and leaves only the window of dlopen's own open, which no check by name
         * can close. */
        if (stat(self, &st) != 0 && errno == ENOENT && ld_file_same(path, fd, why, wn) == 1 &&
            !(h = ld_dlopen_loaded_first(path))) {
            e = dlerror();
            snprintf(why, wn, "%s", e ? e : "dlopen failed");
        }
    }
    close(fd);
    return h;
}
