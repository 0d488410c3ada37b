/* dlcheck.h — load a shared library named by a user's path from the very file the file layer
 * checked (the shim's LDSHIM_LIBCUDA, the MLOPart helper's driver library). */
#ifndef LDSHIM_DLCHECK_H
#define LDSHIM_DLCHECK_H

#include <stddef.h>

/* dlopen(name, RTLD_NOW | RTLD_LOCAL), preferring a copy the process already loaded (RTLD_NOLOAD
 * first), so a caller never changes the program's symbol scope. */
void *ld_dlopen_loaded_first(const char *name);

/* `path` (containing a '/'): opened by the file layer (a regular file, without blocking; a FIFO,
 * device or directory is refused with `why`), then loaded through /proc/self/fd/./N, the
 * descriptor checked: a file swapped in under the name afterwards is never opened. Without
 * /proc, loaded by name only while the name still is the file checked. NULL with `why` set. The
 * library's link-map name is then /proc/self/fd/./N, not `path`. */
void *ld_dlopen_checked(const char *path, char *why, size_t wn);

#endif
