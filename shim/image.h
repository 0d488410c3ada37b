/* image.h — cheap test of whether a module image defines ldshim_topology, so the shim
 * asks the driver for the symbol only in modules that have it (asking forces a lazily
 * loaded module to load). Compressed fatbin entries hide the name: such modules are not
 * published (build them with --compress-mode=none, as this project does). Thread-safe. */
#ifndef LDSHIM_IMAGE_H
#define LDSHIM_IMAGE_H

/* 1 if the image (fatbin, the runtime's fatbin wrapper, 64-bit ELF cubin, or
 * NUL-terminated PTX/text) contains the symbol name within its declared size. */
int ld_image_mentions_symbol(const void *image);

/* The same for a module file on disk. */
int ld_file_mentions_symbol(const char *path);

#endif
