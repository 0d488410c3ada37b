/* fake_module.c — modules and libraries of the fake driver.
 *
 * A fake image is a NUL-terminated string
 *     "FAKEMOD v1 globals=<name>:<bytes>,<name>:<bytes> functions=<name>,<name>"
 * (either list may be absent or empty). Globals are zeroed host buffers that count as device
 * memory of the loading context's device. A real CUDA image (fatbin, fatbin wrapper, cubin
 * ELF, PTX text) loaded as a module gives CUDA_ERROR_NO_BINARY_FOR_GPU, so the shim's probe
 * falls back as it would on a GPU without a matching architecture; anything else
 * CUDA_ERROR_INVALID_IMAGE. Loaded as a library (cuLibraryLoadData), a real image offers the
 * two kernels of the shim's probe image the fake can run: ldprobe_clear (zeroes n words) and
 * ldprobe_sm_marker (counts each block under the SM it "ran" on: blocks go round-robin over
 * the SMs of the launch's context — all of them, or a green context's).
 *
 * Launches of fake-module functions do nothing but record which SMs the launch's context has
 * (fakecuda_last_launch); a launch into a capturing stream is recorded into its graph and
 * runs, with the SMs of the stream it is launched into, when the graph is launched.
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
    int real;                  /* a real image loaded as a library: only fk_kernels */
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

static CUresult fk_ldid_kernel(CUfunction *f, const char *name);   /* below, with the kernels */

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

/* $FAKE_CUDA_PTX95=1: a driver that JIT-compiles PTX ISA 9.5 (CUDA 13.5). PTX text of that
 * version that reads %locality_domain_id loads as a module offering ldtruth_domain_id, which
 * writes 1 + the domain of the SM each block "ran" on ($FAKE_CUDA_LDID_SIDES: one digit per
 * SM, else the SM's side). Any other real image still gives NO_BINARY_FOR_GPU. */
static int fk_ptx95(const void *image) {
    const char *s = image, *e = memchr(image, 0, FK_MAX_IMAGE);
    const char *on = getenv("FAKE_CUDA_PTX95");
    return on && !strcmp(on, "1") && e && strstr(s, ".version 9.5") && strstr(s, "%locality_domain_id") &&
           strstr(s, ".entry ldtruth_domain_id");
}

static CUresult fk_load(CUmodule *mod, const void *image) {
    if (!mod || !image) return CUDA_ERROR_INVALID_VALUE;
    FK_CURRENT(c);
    if (fk_is_real_image(image) && fk_ptx95(image)) {
        fk_module_t *m = calloc(1, sizeof *m);
        if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
        m->magic = FK_MOD_MAGIC;
        m->device = c->device;
        m->real = 2;
        *mod = (CUmodule)m;
        return CUDA_SUCCESS;
    }
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
    if (m->real == 2) return fk_ldid_kernel(f, name);
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

/* ---- kernels of real images (libraries), launches, graphs ------------------------------------ */

typedef struct { uint32_t magic; int kind; char name[FK_NAME]; } fk_kernel_t;
#define FK_KERNEL_MAGIC 0x4E4E4E4Eu
enum { FK_K_CLEAR = 1, FK_K_MARKER = 2, FK_K_LDID = 3 };
static fk_kernel_t fk_kernels[] = {
    { FK_KERNEL_MAGIC, FK_K_CLEAR, "ldprobe_clear" },
    { FK_KERNEL_MAGIC, FK_K_MARKER, "ldprobe_sm_marker" },
};
static fk_kernel_t fk_ldid = { FK_KERNEL_MAGIC, FK_K_LDID, "ldtruth_domain_id" };

static CUresult fk_ldid_kernel(CUfunction *f, const char *name) {
    if (strcmp(name, fk_ldid.name)) return CUDA_ERROR_NOT_FOUND;
    *f = (CUfunction)&fk_ldid;
    return CUDA_SUCCESS;
}

static int fk_ldid_of(int sm) {
    const char *o = getenv("FAKE_CUDA_LDID_SIDES");
    if (o && (size_t)sm < strlen(o) && o[sm] >= '0' && o[sm] <= '7') return o[sm] - '0';
    return fk.side[sm];
}

static __thread uint64_t fk_last_sms[FK_MASK_WORDS];
static __thread int fk_last_valid;
static __thread unsigned fk_last_grid;

static int fk_callable(void *f) {
    fk_func_t *x = f;
    fk_kernel_t *k = f;
    return f && (x->magic == FK_FUNC_MAGIC || k->magic == FK_KERNEL_MAGIC);
}

CUresult fk_launch_now(const fk_launch_t *l, fk_ctx_t *ctx) {
    memcpy(fk_last_sms, ctx->sms, sizeof fk_last_sms);
    fk_last_valid = 1;
    fk_last_grid = l->grid;
    fk_kernel_t *k = l->func;
    if (k->magic != FK_KERNEL_MAGIC) return CUDA_SUCCESS;   /* a fake module's function: no code */
    uint32_t *p = (uint32_t *)(uintptr_t)l->a0;
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (k->kind == FK_K_CLEAR) {
        memset(p, 0, (size_t)l->a1 * sizeof *p);
        return CUDA_SUCCESS;
    }
    int sms[FK_MAX_SMS], n = 0;
    for (int s = 0; s < FK_MAX_SMS; s++)
        if ((ctx->sms[s >> 6] >> (s & 63)) & 1) sms[n++] = s;
    if (!n) return CUDA_ERROR_INVALID_CONTEXT;
    if (k->kind == FK_K_LDID) {
        for (unsigned b = 0; b < l->grid; b++)
            if ((uint32_t)sms[b % (unsigned)n] < l->a1) p[sms[b % (unsigned)n]] = (uint32_t)fk_ldid_of(sms[b % (unsigned)n]) + 1;
        return CUDA_SUCCESS;
    }
    for (unsigned b = 0; b < l->grid; b++) {
        uint32_t sm = (uint32_t)sms[b % (unsigned)n];
        p[sm < l->a1 ? sm : l->a1]++;
    }
    return CUDA_SUCCESS;
}

#define FK_GRAPH_MAGIC 0x62A9B000u
#define FK_EXEC_MAGIC 0x62A9E000u
struct fk_graph { uint32_t magic; int n, cap; fk_launch_t *l; int blocking; unsigned epoch; };
typedef struct { uint32_t magic; fk_graph_t g; } fk_exec_t;

CUresult fk_graph_record(fk_graph_t *g, const fk_launch_t *l) {
    if (g->n == g->cap) {
        int nc = g->cap ? g->cap * 2 : 8;
        fk_launch_t *nl = realloc(g->l, (size_t)nc * sizeof *nl);
        if (!nl) return CUDA_ERROR_OUT_OF_MEMORY;
        g->l = nl;
        g->cap = nc;
    }
    g->l[g->n++] = *l;
    return CUDA_SUCCESS;
}

static CUresult fk_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, CUstream s, void **params, int pt,
                          int cooperative) {
    if (!fk_callable(f)) return CUDA_ERROR_INVALID_HANDLE;
    fk_ctx_t *ctx;
    CUresult r = fk_stream_ctx(s, pt, &ctx);
    if (r != CUDA_SUCCESS) return r;
    fk_launch_t l = { f, gx * gy * gz, 0, 0, 0 };
    fk_kernel_t *k = (fk_kernel_t *)f;
    if (k->magic == FK_KERNEL_MAGIC) {
        if (!params || !params[0] || !params[1]) return CUDA_ERROR_INVALID_VALUE;
        memcpy(&l.a0, params[0], sizeof l.a0);
        memcpy(&l.a1, params[1], sizeof l.a1);
        if (k->kind == FK_K_MARKER && params[2]) memcpy(&l.a2, params[2], sizeof l.a2);
    }
    /* Every block of a cooperative grid must be resident at once: one per SM here. */
    if (cooperative) {
        int n = 0;
        for (int w = 0; w < FK_MASK_WORDS; w++) n += __builtin_popcountll(ctx->sms[w]);
        if (l.grid > (unsigned)n) return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
    }
    fk_stream_t *x = fk_stream(s);
    if (x && x->capture) return fk_graph_record(x->capture, &l);
    if (fk_is_legacy(s, pt) && (r = fk_legacy_work()) != CUDA_SUCCESS) return r;
    return fk_launch_now(&l, ctx);
}

FAKE_API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                                 void **extra) {
    (void)bx; (void)by; (void)bz; (void)shmem; (void)extra;
    FK_ENTER("cuLaunchKernel", CUDA_ERROR_LAUNCH_FAILED);
    return fk_launch(f, gx, gy, gz, s, params, 0, 0);
}
FAKE_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                      unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                                      void **extra) {
    (void)bx; (void)by; (void)bz; (void)shmem; (void)extra;
    FK_ENTER("cuLaunchKernel_ptsz", CUDA_ERROR_LAUNCH_FAILED);
    return fk_launch(f, gx, gy, gz, s, params, 1, 0);
}
FAKE_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                            unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params) {
    (void)bx; (void)by; (void)bz; (void)shmem;
    FK_ENTER("cuLaunchCooperativeKernel", CUDA_ERROR_LAUNCH_FAILED);
    return fk_launch(f, gx, gy, gz, s, params, 0, 1);
}
FAKE_API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                                 unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params) {
    (void)bx; (void)by; (void)bz; (void)shmem;
    FK_ENTER("cuLaunchCooperativeKernel_ptsz", CUDA_ERROR_LAUNCH_FAILED);
    return fk_launch(f, gx, gy, gz, s, params, 1, 1);
}

static CUresult fk_launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, int pt) {
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    int coop = 0;
    for (unsigned i = 0; i < c->numAttrs; i++)
        if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && c->attrs[i].value.cooperative) coop = 1;
    return fk_launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->hStream, params, pt, coop);
}
FAKE_API CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    (void)extra;
    FK_ENTER("cuLaunchKernelEx", CUDA_ERROR_LAUNCH_FAILED);
    return fk_launch_ex(c, f, params, 0);
}
FAKE_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    (void)extra;
    FK_ENTER("cuLaunchKernelEx_ptsz", CUDA_ERROR_LAUNCH_FAILED);
    return fk_launch_ex(c, f, params, 1);
}

FAKE_API CUresult cuLaunchGridAsync(CUfunction f, int gw, int gh, CUstream s) {
    FK_ENTER("cuLaunchGridAsync", CUDA_ERROR_LAUNCH_FAILED);
    if (gw <= 0 || gh <= 0) return CUDA_ERROR_INVALID_VALUE;
    return fk_launch(f, (unsigned)gw, (unsigned)gh, 1, s, NULL, 0, 0);
}

/* The clusters of a launch that fit at once: one per SM of the stream's context. */
FAKE_API CUresult cuOccupancyMaxActiveClusters(int *n, CUfunction f, const CUlaunchConfig *cfg) {
    FK_ENTER("cuOccupancyMaxActiveClusters", CUDA_ERROR_INVALID_VALUE);
    if (!n || !cfg || !fk_callable(f)) return CUDA_ERROR_INVALID_VALUE;
    fk_ctx_t *c;
    CUresult r = fk_stream_ctx(cfg->hStream, 0, &c);
    if (r != CUDA_SUCCESS) return r;
    int k = 0;
    for (int w = 0; w < FK_MASK_WORDS; w++) k += __builtin_popcountll(c->sms[w]);
    *n = k;
    return CUDA_SUCCESS;
}

/* Capture: only created streams (the real driver refuses the legacy stream; the per-thread
 * stream of a plain context it allows, which this fake does not model). */
static CUresult fk_begin_capture(CUstream s, int pt) {
    fk_ctx_t *c;
    CUresult r = fk_stream_ctx(s, pt, &c);
    if (r != CUDA_SUCCESS) return r;
    fk_stream_t *x = fk_stream(s);
    if (!x) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (x->capture) return CUDA_ERROR_ILLEGAL_STATE;
    fk_graph_t *g = calloc(1, sizeof *g);
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
    g->magic = FK_GRAPH_MAGIC;
    if (x->blocking) {
        g->blocking = 1;
        g->epoch = fk_blocking_capture_begin();
    }
    x->capture = g;
    return CUDA_SUCCESS;
}
FAKE_API CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
    (void)mode;
    FK_ENTER("cuStreamBeginCapture_v2", CUDA_ERROR_INVALID_VALUE);
    return fk_begin_capture(s, 0);
}
FAKE_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) {
    (void)mode;
    FK_ENTER("cuStreamBeginCapture_v2_ptsz", CUDA_ERROR_INVALID_VALUE);
    return fk_begin_capture(s, 1);
}

static CUresult fk_end_capture(CUstream s, CUgraph *out, int pt) {
    fk_ctx_t *c;
    CUresult r = fk_stream_ctx(s, pt, &c);
    if (r != CUDA_SUCCESS) return r;
    fk_stream_t *x = fk_stream(s);
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    if (!x || !x->capture) return CUDA_ERROR_ILLEGAL_STATE;
    fk_graph_t *g = x->capture;
    x->capture = NULL;
    if (g->blocking && fk_blocking_capture_end(g->epoch)) {
        free(g->l);
        g->magic = 0;
        free(g);
        *out = NULL;
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    *out = (CUgraph)g;
    return CUDA_SUCCESS;
}
FAKE_API CUresult cuStreamEndCapture(CUstream s, CUgraph *out) {
    FK_ENTER("cuStreamEndCapture", CUDA_ERROR_INVALID_VALUE);
    return fk_end_capture(s, out, 0);
}
FAKE_API CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *out) {
    FK_ENTER("cuStreamEndCapture_ptsz", CUDA_ERROR_INVALID_VALUE);
    return fk_end_capture(s, out, 1);
}

FAKE_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph graph, unsigned long long flags) {
    (void)flags;
    FK_ENTER("cuGraphInstantiateWithFlags", CUDA_ERROR_INVALID_VALUE);
    fk_graph_t *g = (fk_graph_t *)graph;
    if (!out || !g || g->magic != FK_GRAPH_MAGIC) return CUDA_ERROR_INVALID_VALUE;
    fk_exec_t *e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = FK_EXEC_MAGIC;
    e->g.n = g->n;
    if (g->n && !(e->g.l = malloc((size_t)g->n * sizeof *e->g.l))) { free(e); return CUDA_ERROR_OUT_OF_MEMORY; }
    if (g->n) memcpy(e->g.l, g->l, (size_t)g->n * sizeof *e->g.l);
    *out = (CUgraphExec)e;
    return CUDA_SUCCESS;
}

/* With CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD the graph is uploaded on params->hUploadStream. */
FAKE_API CUresult cuGraphInstantiateWithParams(CUgraphExec *out, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *p) {
    FK_ENTER("cuGraphInstantiateWithParams", CUDA_ERROR_INVALID_VALUE);
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) {
        fk_ctx_t *c;
        CUresult r = fk_stream_ctx(p->hUploadStream, 0, &c);
        if (r != CUDA_SUCCESS) { p->result_out = CUDA_GRAPH_INSTANTIATE_ERROR; return r; }
    }
    CUresult r = cuGraphInstantiateWithFlags(out, graph, 0);
    p->hErrNode_out = NULL;
    p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    return r;
}

static fk_exec_t *fk_exec(CUgraphExec h) {
    fk_exec_t *e = (fk_exec_t *)h;
    return e && e->magic == FK_EXEC_MAGIC ? e : NULL;
}

static CUresult fk_graph_launch(CUgraphExec h, CUstream s, int pt) {
    fk_exec_t *e = fk_exec(h);
    if (!e) return CUDA_ERROR_INVALID_VALUE;
    fk_ctx_t *c;
    CUresult r = fk_stream_ctx(s, pt, &c);
    if (r != CUDA_SUCCESS) return r;
    for (int i = 0; i < e->g.n && r == CUDA_SUCCESS; i++) r = fk_launch_now(&e->g.l[i], c);
    return r;
}
FAKE_API CUresult cuGraphLaunch(CUgraphExec h, CUstream s) {
    FK_ENTER("cuGraphLaunch", CUDA_ERROR_INVALID_VALUE);
    return fk_graph_launch(h, s, 0);
}
FAKE_API CUresult cuGraphLaunch_ptsz(CUgraphExec h, CUstream s) {
    FK_ENTER("cuGraphLaunch_ptsz", CUDA_ERROR_INVALID_VALUE);
    return fk_graph_launch(h, s, 1);
}
FAKE_API CUresult cuGraphExecDestroy(CUgraphExec h) {
    FK_ENTER("cuGraphExecDestroy", CUDA_ERROR_INVALID_VALUE);
    fk_exec_t *e = fk_exec(h);
    if (!e) return CUDA_ERROR_INVALID_VALUE;
    free(e->g.l);
    e->magic = 0;
    free(e);
    return CUDA_SUCCESS;
}
FAKE_API CUresult cuGraphDestroy(CUgraph graph) {
    FK_ENTER("cuGraphDestroy", CUDA_ERROR_INVALID_VALUE);
    fk_graph_t *g = (fk_graph_t *)graph;
    if (!g || g->magic != FK_GRAPH_MAGIC) return CUDA_ERROR_INVALID_VALUE;
    free(g->l);
    g->magic = 0;
    free(g);
    return CUDA_SUCCESS;
}

/* The SMs of this thread's last executed launch's context; returns their count, -1 if none. */
FAKE_API int fakecuda_last_launch(unsigned char out[256], unsigned *grid) {
    if (!fk_last_valid) return -1;
    int n = 0;
    for (int s = 0; s < FK_MAX_SMS; s++) {
        int on = (int)((fk_last_sms[s >> 6] >> (s & 63)) & 1);
        if (out) out[s] = (unsigned char)on;
        n += on;
    }
    if (grid) *grid = fk_last_grid;
    return n;
}

/* ---- libraries (CUDA 12.0+): one module each ------------------------------------------- */

FAKE_API CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, CUjit_option *jo, void **jv,
                                    unsigned int njo, CUlibraryOption *lo, void **lv, unsigned int nlo) {
    (void)jo; (void)jv; (void)njo; (void)lo; (void)lv; (void)nlo;
    FK_ENTER("cuLibraryLoadData", CUDA_ERROR_INVALID_IMAGE);
    if (!lib || !code) return CUDA_ERROR_INVALID_VALUE;
    fk_module_t *mod = NULL;
    if (fk_is_real_image(code)) {
        /* Context-independent: no context needed; the probe image's runnable kernels only. */
        mod = calloc(1, sizeof *mod);
        if (!mod) return CUDA_ERROR_OUT_OF_MEMORY;
        mod->magic = FK_MOD_MAGIC;
        mod->device = -1;
        mod->real = 1;
    } else {
        CUmodule m;
        CUresult r = fk_load(&m, code);
        if (r != CUDA_SUCCESS) return r;
        mod = fk_mod(m);
    }
    fk_library_t *l = malloc(sizeof *l);
    if (!l) { fk_module_free(mod); return CUDA_ERROR_OUT_OF_MEMORY; }
    *l = (fk_library_t){ FK_LIB_MAGIC, mod };
    *lib = (CUlibrary)l;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary h, const char *name) {
    FK_ENTER("cuLibraryGetKernel", CUDA_ERROR_NOT_FOUND);
    fk_library_t *l = (fk_library_t *)h;
    if (!k || !name) return CUDA_ERROR_INVALID_VALUE;
    if (!l || l->magic != FK_LIB_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
    if (l->mod->real) {
        for (size_t i = 0; i < sizeof fk_kernels / sizeof fk_kernels[0]; i++)
            if (!strcmp(fk_kernels[i].name, name)) { *k = (CUkernel)&fk_kernels[i]; return CUDA_SUCCESS; }
        return CUDA_ERROR_NOT_FOUND;
    }
    for (int i = 0; i < l->mod->nfuncs; i++)
        if (!strcmp(l->mod->funcs[i].name, name)) { *k = (CUkernel)&l->mod->funcs[i]; return CUDA_SUCCESS; }
    return CUDA_ERROR_NOT_FOUND;
}

FAKE_API CUresult cuKernelSetAttribute(CUfunction_attribute a, int v, CUkernel k, CUdevice dev) {
    (void)a; (void)v;
    FK_ENTER("cuKernelSetAttribute", CUDA_ERROR_INVALID_VALUE);
    if (!fk_callable((void *)k)) return CUDA_ERROR_INVALID_HANDLE;
    return fk_valid_device(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
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
