/* image.c — does a module image name the ldshim_topology symbol? */
#include "shim/image.h"
#include "kernels/ldshim_topology.h"
#include "shim/file.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FATBIN_MAGIC 0xBA55ED50u
#define FATBIN_WRAPPER_MAGIC 0x466243B1u
#define IMAGE_MAX (1ull << 31)

static size_t image_length(const unsigned char *p) {
    uint32_t magic;
    memcpy(&magic, p, 4);
    if (magic == FATBIN_MAGIC) {
        uint16_t hsize;
        uint64_t fsize;
        memcpy(&hsize, p + 6, 2);
        memcpy(&fsize, p + 8, 8);
        uint64_t len = (uint64_t)hsize + fsize;
        return len < IMAGE_MAX ? (size_t)len : 0;
    }
    if (p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F' && p[4] == 2 /* 64-bit */) {
        uint64_t shoff;
        uint16_t shentsize, shnum;
        memcpy(&shoff, p + 0x28, 8);
        memcpy(&shentsize, p + 0x3A, 2);
        memcpy(&shnum, p + 0x3C, 2);
        uint64_t len = shoff + (uint64_t)shentsize * shnum;
        return len < IMAGE_MAX ? (size_t)len : 0;
    }
    return strlen((const char *)p);   /* PTX and other text images are NUL-terminated */
}

int ld_image_mentions_symbol(const void *image) {
    if (!image) return 0;
    const unsigned char *p = image;
    uint32_t magic;
    memcpy(&magic, p, 4);
    if (magic == FATBIN_WRAPPER_MAGIC) {
        const void *inner;
        memcpy(&inner, p + 8, sizeof inner);
        if (!inner) return 0;
        p = inner;
    }
    size_t len = image_length(p);
    return len && memmem(p, len, LDSHIM_TOPOLOGY_SYMBOL, sizeof LDSHIM_TOPOLOGY_SYMBOL - 1) != NULL;
}

/* Read in blocks, not mmap: a file another process truncates during the scan must end the
 * scan, not raise SIGBUS in the program. The last symbol length - 1 bytes of a block are kept
 * in front of the next, so a name across two blocks is found. */
#define SCAN_BLOCK (1u << 20)

int ld_file_mentions_symbol(const char *path) {
    off_t size = 0;
    int fd = ld_file_open_read(path, IMAGE_MAX, LD_FILE_NUL_OK, &size, NULL, 0);
    if (fd < 0) return 0;
    const size_t sym = sizeof LDSHIM_TOPOLOGY_SYMBOL - 1, keep = sym - 1;
    unsigned char *buf = malloc(SCAN_BLOCK + keep);
    int found = 0;
    size_t have = 0;
    uint64_t total = 0;
    while (buf && !found && total < IMAGE_MAX) {
        ssize_t r = read(fd, buf + have, SCAN_BLOCK);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        total += (uint64_t)r;
        size_t n = have + (size_t)r;
        found = memmem(buf, n, LDSHIM_TOPOLOGY_SYMBOL, sym) != NULL;
        have = n < keep ? n : keep;
        memmove(buf, buf + n - have, have);
    }
    free(buf);
    close(fd);
    return found;
}
