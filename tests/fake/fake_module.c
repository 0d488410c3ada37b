/* fake_module.c — modules and libraries of the fake driver.
 *
 * A fake image is a NUL-terminated string
 *     "FAKEMOD v1 globals=<name>:<bytes>,<name>:<bytes> functions=<name>,<name>"
 * (either list may be absent or empty). Globals are zeroed host buffers that count as device
 * memory of the loading context's device. A real CUDA image (fatbin, fatbin wrapper, cubin
 * ELF, PTX text) gives CUDA_ERROR_NO_BINARY_FOR_GPU, so the shim's probe falls back as it
 * would on a GPU without a matching architecture; anything else CUDA_ERROR_INVALID_IMAGE.
 * Kernels cannot run: cuLaunchKernel returns CUDA_ERROR_NOT_SUPPORTED.
 */
#include "tests/fake/fake_internal.h"

#include <stdlib.h>
#include <string.h>

void fk_register_global(void *p, size_t n, int device);
void fk_unregister_global(void *p);

#define FK_NAME 64
typedef struct { char name[FK_NAME]; size_t bytes; void *mem; } fk_global_t;
typedef struct { uint32_t magic; char name[FK_NAME]; } fk_func_t;
typedef struct {
    uint32_t magic;
    int device;
    int nglobals, nfuncs;
    fk_global_t *globals;
    fk_func_t *funcs;
} fk_module_t;
typedef struct { uint32_t magic; fk_module_t *mod; } fk_library_t;
#define FK_MOD_MAGIC 0x40D0F00Du
#define FK_FUNC_MAGIC 0xF00CF00Cu
#define FK_LIB_MAGIC 0x11B0A11Bu
#define FK_MAX_IMAGE 65536

int fk_is_real_image(const void *image) {
    const unsigned char *b = image;
    uint32_t magic;
    memcpy(&magic, b, 4);
    if (magic == 0x466243b1u || magic == 0xBA55ED50u) return 1;   /* fatbin wrapper, fatbin */
    if (b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F') return 1;
    const char *s = image;
    return strncmp(s, "//", 2) == 0 || strncmp(s, ".version", 8) == 0;   /* PTX */
}

static void fk_module_free(fk_module_t *m) {
    if (!m) return;
    for (int i = 0; i < m->nglobals; i++) {
        if (!m->globals[i].mem) continue;
        fk_unregister_global(m->globals[i].mem);
        free(m->globals[i].mem);
    }
    free(m->globals);
    free(m->funcs);
    m->magic = 0;
    free(m);
}

/* Copy one ',' or ' ' terminated token of at most FK_NAME-1 chars; returns chars consumed
 * or -1. */
static int fk_token(const char *s, char *out, const char *stop) {
    int n = 0;
    while (s[n] && !strchr(stop, s[n])) {
        if (n == FK_NAME - 1) return -1;
        out[n] = s[n];
        n++;
    }
    out[n] = 0;
    return n;
}

static CUresult fk_parse(const char *s, int device, fk_module_t **out) {
    if (strncmp(s, "FAKEMOD v1", 10) != 0) return CUDA_ERROR_INVALID_IMAGE;
    fk_module_t *m = calloc(1, sizeof *m);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    m->magic = FK_MOD_MAGIC;
    m->device = device;
    s += 10;
    CUresult r = CUDA_SUCCESS;
    while (r == CUDA_SUCCESS && *s) {
        if (*s == ' ') { s++; continue; }
        int globals = strncmp(s, "globals=", 8) == 0;
        if (!globals && strncmp(s, "functions=", 10) != 0) { r = CUDA_ERROR_INVALID_IMAGE; break; }
        s += globals ? 8 : 10;
        while (r == CUDA_SUCCESS && *s && *s != ' ') {
            char name[FK_NAME];
            int n = fk_token(s, name, globals ? ":, " : ", ");
            if (n <= 0) { r = CUDA_ERROR_INVALID_IMAGE; break; }
            s += n;
            if (globals) {
                char *end;
                if (*s != ':') { r = CUDA_ERROR_INVALID_IMAGE; break; }
                unsigned long long bytes = strtoull(s + 1, &end, 10);
                if (end == s + 1 || bytes == 0 || bytes > (1ull << 30)) { r = CUDA_ERROR_INVALID_IMAGE; break; }
                s = end;
                fk_global_t *g = realloc(m->globals, (size_t)(m->nglobals + 1) * sizeof *g);
                if (!g) { r = CUDA_ERROR_OUT_OF_MEMORY; break; }
                m->globals = g;
                g = &m->globals[m->nglobals];
                memcpy(g->name, name, sizeof g->name);
                g->bytes = (size_t)bytes;
                g->mem = calloc(1, (size_t)bytes);
                if (!g->mem) { r = CUDA_ERROR_OUT_OF_MEMORY; break; }
                m->nglobals++;
                fk_register_global(g->mem, g->bytes, device);
            } else {
                fk_func_t *f = realloc(m->funcs, (size_t)(m->nfuncs + 1) * sizeof *f);
                if (!f) { r = CUDA_ERROR_OUT_OF_MEMORY; break; }
                m->funcs = f;
                m->funcs[m->nfuncs].magic = FK_FUNC_MAGIC;
                memcpy(m->funcs[m->nfuncs].name, name, FK_NAME);
                m->nfuncs++;
            }
            if (*s == ',') s++;
        }
    }
    if (r != CUDA_SUCCESS) { fk_module_free(m); return r; }
    *out = m;
    return CUDA_SUCCESS;
}

static CUresult fk_load(CUmodule *mod, const void *image) {
    if (!mod || !image) return CUDA_ERROR_INVALID_VALUE;
    fk_ctx_t *c = fk_current();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if (fk_is_real_image(image)) return CUDA_ERROR_NO_BINARY_FOR_GPU;
    if (!memchr(image, 0, FK_MAX_IMAGE)) return CUDA_ERROR_INVALID_IMAGE;
    fk_module_t *m;
    CUresult r = fk_parse(image, c->device, &m);
    if (r == CUDA_SUCCESS) *mod = (CUmodule)m;
    return r;
}

static fk_module_t *fk_mod(CUmodule h) {
    fk_module_t *m = (fk_module_t *)h;
    return m && m->magic == FK_MOD_MAGIC ? m : NULL;
}

FAKE_API CUresult cuModuleLoadData(CUmodule *mod, const void *image) {
    FK_ENTER("cuModuleLoadData", CUDA_ERROR_INVALID_IMAGE);
    return fk_load(mod, image);
}

FAKE_API CUresult cuModuleLoadDataEx(CUmodule *mod, const void *image, unsigned int n, CUjit_option *o,
                                     void **v) {
    (void)n; (void)o; (void)v;
    FK_ENTER("cuModuleLoadDataEx", CUDA_ERROR_INVALID_IMAGE);
    return fk_load(mod, image);
}

FAKE_API CUresult cuModuleLoadFatBinary(CUmodule *mod, const void *image) {
    FK_ENTER("cuModuleLoadFatBinary", CUDA_ERROR_INVALID_IMAGE);
    return fk_load(mod, image);
}

FAKE_API CUresult cuModuleUnload(CUmodule h) {
    FK_ENTER("cuModuleUnload", CUDA_ERROR_INVALID_VALUE);
    fk_module_t *m = fk_mod(h);
    if (!m) return CUDA_ERROR_INVALID_HANDLE;
    fk_module_free(m);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuModuleGetFunction(CUfunction *f, CUmodule h, const char *name) {
    FK_ENTER("cuModuleGetFunction", CUDA_ERROR_NOT_FOUND);
    fk_module_t *m = fk_mod(h);
    if (!f || !name) return CUDA_ERROR_INVALID_VALUE;
    if (!m) return CUDA_ERROR_INVALID_HANDLE;
    for (int i = 0; i < m->nfuncs; i++)
        if (strcmp(m->funcs[i].name, name) == 0) { *f = (CUfunction)&m->funcs[i]; return CUDA_SUCCESS; }
    return CUDA_ERROR_NOT_FOUND;
}

FAKE_API CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule h, const char *name) {
    FK_ENTER("cuModuleGetGlobal_v2", CUDA_ERROR_NOT_FOUND);
    fk_module_t *m = fk_mod(h);
    if (!name) return CUDA_ERROR_INVALID_VALUE;
    if (!m) return CUDA_ERROR_INVALID_HANDLE;
    for (int i = 0; i < m->nglobals; i++) {
        if (strcmp(m->globals[i].name, name) != 0) continue;
        if (dptr) *dptr = (CUdeviceptr)(uintptr_t)m->globals[i].mem;
        if (bytes) *bytes = m->globals[i].bytes;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_NOT_FOUND;
}

FAKE_API CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
    (void)a; (void)v;
    FK_ENTER("cuFuncSetAttribute", CUDA_ERROR_INVALID_VALUE);
    fk_func_t *x = (fk_func_t *)f;
    return x && x->magic == FK_FUNC_MAGIC ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

FAKE_API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                                 void **extra) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem; (void)s;
    (void)params; (void)extra;
    FK_ENTER("cuLaunchKernel", CUDA_ERROR_NOT_SUPPORTED);
    return CUDA_ERROR_NOT_SUPPORTED;   /* a fake device runs no code */
}

/* ---- libraries (CUDA 12.0+): one module each ------------------------------------------- */

FAKE_API CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, CUjit_option *jo, void **jv,
                                    unsigned int njo, CUlibraryOption *lo, void **lv, unsigned int nlo) {
    (void)jo; (void)jv; (void)njo; (void)lo; (void)lv; (void)nlo;
    FK_ENTER("cuLibraryLoadData", CUDA_ERROR_INVALID_IMAGE);
    if (!lib) return CUDA_ERROR_INVALID_VALUE;
    CUmodule m;
    CUresult r = fk_load(&m, code);
    if (r != CUDA_SUCCESS) return r;
    fk_library_t *l = malloc(sizeof *l);
    if (!l) { fk_module_free(fk_mod(m)); return CUDA_ERROR_OUT_OF_MEMORY; }
    *l = (fk_library_t){ FK_LIB_MAGIC, fk_mod(m) };
    *lib = (CUlibrary)l;
    return CUDA_SUCCESS;
}

static fk_library_t *fk_lib(CUlibrary h) {
    fk_library_t *l = (fk_library_t *)h;
    return l && l->magic == FK_LIB_MAGIC ? l : NULL;
}

FAKE_API CUresult cuLibraryUnload(CUlibrary h) {
    FK_ENTER("cuLibraryUnload", CUDA_ERROR_INVALID_VALUE);
    fk_library_t *l = fk_lib(h);
    if (!l) return CUDA_ERROR_INVALID_HANDLE;
    fk_module_free(l->mod);
    l->magic = 0;
    free(l);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuLibraryGetModule(CUmodule *mod, CUlibrary h) {
    FK_ENTER("cuLibraryGetModule", CUDA_ERROR_INVALID_VALUE);
    fk_library_t *l = fk_lib(h);
    if (!mod) return CUDA_ERROR_INVALID_VALUE;
    if (!l) return CUDA_ERROR_INVALID_HANDLE;
    *mod = (CUmodule)l->mod;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary h, const char *name) {
    FK_ENTER("cuLibraryGetGlobal", CUDA_ERROR_NOT_FOUND);
    fk_library_t *l = fk_lib(h);
    if (!l) return CUDA_ERROR_INVALID_HANDLE;
    return cuModuleGetGlobal_v2(dptr, bytes, (CUmodule)l->mod, name);
}
