/* fake_core.c — the fake driver's environment, devices, contexts, streams, events, errors,
 * failure injection and the exit report.
 *
 * Environment (read once): FAKE_CUDA_DEVICES (1), $CUDA_MPS_PIPE_DIRECTORY/fakecuda-devices
 * (overrides the count: an MPS client seeing MLOPart-derived devices), FAKE_CUDA_SMS (132),
 * FAKE_CUDA_DOMAINS (unset: attribute 149 unsupported), FAKE_CUDA_READBACK (fake_internal.h), FAKE_CUDA_VERSION (13000),
 * FAKE_CUDA_FAIL, FAKE_CUDA_MEM_LIMIT, FAKE_CUDA_REPORT, FAKE_CUDA_UUID_DELAY (<ms>[@<device>]
 * [:<calls>]: cuDeviceGetUuid_v2 sleeps that long, on that device, in its first <calls> calls,
 * so a test can hold a thread inside the shim's probe or binding build). See doc/testing.md.
 */
#include "tests/fake/fake_internal.h"
#include "tests/fake/fake_api.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

fk_state_t fk = { .lock = PTHREAD_MUTEX_INITIALIZER };

static pthread_once_t fk_once = PTHREAD_ONCE_INIT;
static _Atomic int fk_syncs;
static _Atomic int fk_exiting;
static pid_t fk_load_pid;

/* ---- failure injection ---------------------------------------------------------------- */

#define FK_MAX_FAIL 32
typedef struct {
    char name[64];
    long nth;          /* 1-based call number that fails */
    int  onward;       /* "N+": that call and every later one */
    int  code;         /* 0: the function's default */
    _Atomic long calls;
} fk_fail_t;
static fk_fail_t fk_fail[FK_MAX_FAIL];
static int fk_nfail;

static void fk_parse_fail(const char *spec) {
    char *copy = strdup(spec), *save = NULL;
    if (!copy) return;
    for (char *tok = strtok_r(copy, ",", &save); tok && fk_nfail < FK_MAX_FAIL;
         tok = strtok_r(NULL, ",", &save)) {
        char *c1 = strchr(tok, ':');
        if (!c1 || c1 == tok || (size_t)(c1 - tok) >= sizeof fk_fail[0].name) {
            fprintf(stderr, "fakecuda: ignoring bad FAKE_CUDA_FAIL entry '%s'\n", tok);
            continue;
        }
        fk_fail_t *f = &fk_fail[fk_nfail];
        memcpy(f->name, tok, (size_t)(c1 - tok));
        f->name[c1 - tok] = 0;
        char *end;
        f->nth = strtol(c1 + 1, &end, 10);
        if (*end == '+') { f->onward = 1; end++; }
        if (*end == ':') f->code = (int)strtol(end + 1, &end, 10);
        if (*end != 0 || f->nth < 1) {
            fprintf(stderr, "fakecuda: ignoring bad FAKE_CUDA_FAIL entry '%s'\n", tok);
            continue;
        }
        fk_nfail++;
    }
    free(copy);
}

CUresult fk_inject(const char *name, CUresult dflt) {
    for (int i = 0; i < fk_nfail; i++) {
        fk_fail_t *f = &fk_fail[i];
        if (strcmp(f->name, name) != 0) continue;
        long n = atomic_fetch_add(&f->calls, 1) + 1;
        if (n == f->nth || (f->onward && n > f->nth))
            return f->code ? (CUresult)f->code : dflt;
    }
    return CUDA_SUCCESS;
}

/* ---- environment ----------------------------------------------------------------------- */

static int fk_env_int(const char *name, int dflt) {
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    char *end;
    long v = strtol(s, &end, 0);
    return (*end == 0 && v >= 0 && v < (1L << 30)) ? (int)v : dflt;
}

static void fk_atfork_prepare(void) { pthread_mutex_lock(&fk.lock); }
static void fk_atfork_parent(void) { pthread_mutex_unlock(&fk.lock); }
static void fk_atfork_child(void) { pthread_mutex_unlock(&fk.lock); }

static void fk_setup_once(void) {
    fk.ndevices = fk_env_int("FAKE_CUDA_DEVICES", 1);
    const char *mps = getenv("CUDA_MPS_PIPE_DIRECTORY");
    if (mps && *mps) {
        char path[4096];
        snprintf(path, sizeof path, "%s/fakecuda-devices", mps);
        FILE *f = fopen(path, "r");
        if (f) {
            int n;
            if (fscanf(f, "%d", &n) == 1 && n >= 0) { fk.ndevices = n; fk.mps_mode = 1; }
            fclose(f);
        }
    }
    if (fk.ndevices > FK_MAX_DEVICES) fk.ndevices = FK_MAX_DEVICES;
    fk.nsms = fk_env_int("FAKE_CUDA_SMS", 132);
    fk.ndomains = fk_env_int("FAKE_CUDA_DOMAINS", 0);
    fk.version = fk_env_int("FAKE_CUDA_VERSION", 13000);
    const char *lim = getenv("FAKE_CUDA_MEM_LIMIT");
    if (lim && *lim) fk.mem_limit = (size_t)strtoull(lim, NULL, 0);
    const char *fail = getenv("FAKE_CUDA_FAIL");
    if (fail && *fail) fk_parse_fail(fail);
    if (fk.nsms > FK_MAX_SMS) fk.nsms = FK_MAX_SMS;
    fk.nsides = fk.ndomains >= 2 ? fk.ndomains : 2;
    if (fk.nsides > 8) fk.nsides = 8;
    const char *sides = getenv("FAKE_CUDA_SM_SIDES");
    for (int sm = 0; sm < fk.nsms; sm++) {
        int v = (sm / 2) % fk.nsides;
        if (sides && sides[sm] >= '0' && sides[sm] < '0' + fk.nsides) v = sides[sm] - '0';
        fk.side[sm] = (uint8_t)v;
    }
    const char *caps = getenv("FAKE_CUDA_GROUPS_PER_SIDE");
    for (int i = 0; caps && *caps && i < 8; i++) {
        char *end;
        long v = strtol(caps, &end, 10);
        if (end == caps || v < 0) break;
        fk.groups_cap[i] = (int)v;
        caps = *end == ',' ? end + 1 : end;
    }
    const char *rb = getenv("FAKE_CUDA_READBACK");
    if (rb && *rb) {
        static const char *modes[] = {"", "wrong", "unlocalized", "unknown"};
        size_t len = strcspn(rb, "@");
        for (int m = 1; m < 4; m++)
            if (len == strlen(modes[m]) && !strncmp(rb, modes[m], len)) fk.readback_mode = m;
        if (!fk.readback_mode) fprintf(stderr, "fakecuda: ignoring bad FAKE_CUDA_READBACK '%s'\n", rb);
        if (rb[len] == '@') fk.readback_nth = (int)strtol(rb + len + 1, NULL, 10);
    }
    const char *split = getenv("FAKE_CUDA_SPLIT");
    fk.split_straddle = split && !strcmp(split, "straddle");
    fk.uuid_delay_dev = -1;
    const char *ud = getenv("FAKE_CUDA_UUID_DELAY");
    if (ud && *ud) {
        char *end;
        long ms = strtol(ud, &end, 10);
        if (ms > 0 && ms < 600000) fk.uuid_delay_ms = (int)ms;
        if (*end == '@') fk.uuid_delay_dev = (int)strtol(end + 1, &end, 10);
        if (*end == ':') fk.uuid_delay_calls = (int)strtol(end + 1, NULL, 10);
    }
    for (int d = 0; d < FK_MAX_DEVICES; d++) {
        fk.primary[d] = (fk_ctx_t){ .magic = FK_CTX_MAGIC, .device = d, .primary = 1 };
        fk_all_sms(fk.primary[d].sms);
    }
    pthread_atfork(fk_atfork_prepare, fk_atfork_parent, fk_atfork_child);
}

void fk_setup(void) { pthread_once(&fk_once, fk_setup_once); }
void fk_lock(void) { pthread_mutex_lock(&fk.lock); }
void fk_unlock(void) { pthread_mutex_unlock(&fk.lock); }

int fk_valid_device(int dev) { return dev >= 0 && dev < fk.ndevices; }

int fk_mem_charge(size_t bytes) {
    if (fk.mem_limit && (bytes > fk.mem_limit || fk.mem_used > fk.mem_limit - bytes)) return -1;
    fk.mem_used += bytes;
    return 0;
}
void fk_mem_uncharge(size_t bytes) { fk.mem_used -= bytes; }

/* ---- report ---------------------------------------------------------------------------- */

static void fk_write_report(void) {
    const char *path = getenv("FAKE_CUDA_REPORT");
    if (!path || !*path) return;
    char buf[4096];
    const char *p = strstr(path, "%p");
    if (p) {
        snprintf(buf, sizeof buf, "%.*s%d%s", (int)(p - path), path, (int)getpid(), p + 2);
        path = buf;
    } else if (getpid() != fk_load_pid) {
        return;   /* a forked child must not overwrite its parent's report */
    }
    int c[5];
    fakecuda_counts(c);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "plain=%d handles=%d reservations=%d mappings=%d fds=%d green=%d pools=%d\n",
            c[0], c[1], c[2], c[3], c[4], fk_green_live(), fk_pools_live());
    fclose(f);
}

void fk_report_if_exiting(void) {
    if (atomic_load(&fk_exiting)) fk_write_report();
}

__attribute__((constructor)) static void fk_ctor(void) { fk_load_pid = getpid(); }

/* The shim may release pooled memory in its own destructor, which can run after ours:
 * after this point every change of the counts rewrites the report. */
__attribute__((destructor)) static void fk_dtor(void) {
    atomic_store(&fk_exiting, 1);
    fk_write_report();
}

/* ---- exported test hooks --------------------------------------------------------------- */

FAKE_API int fakecuda_sync_count(void) { return atomic_load(&fk_syncs); }

/* What is really current on this thread (no shim can translate a call it never sees). */
FAKE_API void *fakecuda_current_ctx(void) { return fk_current(); }

/* ---- init, version, errors ------------------------------------------------------------- */

FAKE_API CUresult cuInit(unsigned int flags) {
    fk_setup();
    CUresult r = fk_inject("cuInit", CUDA_ERROR_NO_DEVICE);
    if (r != CUDA_SUCCESS) return r;
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    fk.initialized = 1;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDriverGetVersion(int *v) {
    fk_setup();
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = fk.version;
    return CUDA_SUCCESS;
}

static const struct { CUresult r; const char *name, *text; } fk_errors[] = {
    { CUDA_SUCCESS, "CUDA_SUCCESS", "no error" },
    { CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument" },
    { CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory" },
    { CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error" },
    { CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down" },
    { CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected" },
    { CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal" },
    { CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid" },
    { CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context" },
    { CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
      "no kernel image is available for execution on the device" },
    { CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle" },
    { CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed" },
    { CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found" },
    { CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
      "peer access is already enabled" },
    { CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported" },
    { CUDA_ERROR_ALREADY_MAPPED, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped" },
    { CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation is not permitted in the current state" },
    { CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure" },
    { CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
      "too many blocks in cooperative launch" },
    { CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
      "operation not permitted when stream is capturing" },
    { CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
      "operation failed due to a previous error during capture" },
    { CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
      "operation would make the legacy stream depend on a capturing blocking stream" },
    { CUDA_ERROR_INVALID_RESOURCE_TYPE, "CUDA_ERROR_INVALID_RESOURCE_TYPE", "invalid resource type" },
    { CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION",
      "invalid resource configuration" },
    { CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error" },
};

FAKE_API CUresult cuGetErrorString(CUresult r, const char **s) {
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof fk_errors / sizeof fk_errors[0]; i++)
        if (fk_errors[i].r == r) { *s = fk_errors[i].text; return CUDA_SUCCESS; }
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

FAKE_API CUresult cuGetErrorName(CUresult r, const char **s) {
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof fk_errors / sizeof fk_errors[0]; i++)
        if (fk_errors[i].r == r) { *s = fk_errors[i].name; return CUDA_SUCCESS; }
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

/* ---- devices --------------------------------------------------------------------------- */

FAKE_API CUresult cuDeviceGetCount(int *n) {
    FK_ENTER("cuDeviceGetCount", CUDA_ERROR_INVALID_VALUE);
    if (!n) return CUDA_ERROR_INVALID_VALUE;
    *n = fk.ndevices;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    FK_ENTER("cuDeviceGet", CUDA_ERROR_INVALID_DEVICE);
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    if (!fk_valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    FK_ENTER("cuDeviceGetName", CUDA_ERROR_INVALID_VALUE);
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (!fk_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "Fake NVIDIA H200 (fakecuda)");
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    FK_ENTER("cuDeviceTotalMem_v2", CUDA_ERROR_INVALID_VALUE);
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    if (!fk_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = fk.mem_limit ? fk.mem_limit : FK_DEFAULT_TOTAL;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice dev) {
    FK_ENTER("cuDeviceGetAttribute", CUDA_ERROR_INVALID_VALUE);
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    if (!fk_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    switch ((int)a) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = fk.nsms; break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 232448; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = 49152; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = 60 << 20; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = 1980000; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *v = 0x10 + dev; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: *v = CU_COMPUTEMODE_DEFAULT; break;
    case 149:  /* LD_CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_COUNT (CUDA 13.4) */
        if (fk.ndomains <= 0) return CUDA_ERROR_INVALID_VALUE;
        *v = fk.ndomains;
        break;
    case 157: {  /* LOCALITY_DOMAIN_MULTIPROCESSOR_COUNT: $FAKE_CUDA_LD_SMCOUNT, else the smallest side's */
        if (fk.ndomains <= 0) return CUDA_ERROR_INVALID_VALUE;
        int n = fk_env_int("FAKE_CUDA_LD_SMCOUNT", -1);
        if (n < 0) {
            int per[8] = {0};
            for (int s = 0; s < fk.nsms; s++) per[fk.side[s]]++;
            n = per[0];
            for (int d = 1; d < fk.ndomains && d < 8; d++) if (per[d] < n) n = per[d];
        }
        *v = n;
        break;
    }
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

static atomic_int fk_uuid_sleepers, fk_uuid_delayed;

/* Threads sleeping in cuDeviceGetUuid_v2 now ($FAKE_CUDA_UUID_DELAY). */
FAKE_API int fakecuda_uuid_sleepers(void) { return atomic_load(&fk_uuid_sleepers); }

FAKE_API CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice dev) {
    FK_ENTER("cuDeviceGetUuid_v2", CUDA_ERROR_INVALID_VALUE);
    if (!u) return CUDA_ERROR_INVALID_VALUE;
    if (!fk_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    if (fk.uuid_delay_ms && (fk.uuid_delay_dev < 0 || fk.uuid_delay_dev == dev) &&
        (!fk.uuid_delay_calls || atomic_fetch_add(&fk_uuid_delayed, 1) < fk.uuid_delay_calls)) {
        atomic_fetch_add(&fk_uuid_sleepers, 1);
        struct timespec ts = { fk.uuid_delay_ms / 1000, (long)(fk.uuid_delay_ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
        atomic_fetch_sub(&fk_uuid_sleepers, 1);
    }
    static const unsigned char base[16] = { 0xfa, 0x6e, 0xc0, 0xda, 0x13, 0x00, 0x49, 0x00,
                                            0x8a, 0x17, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00 };
    memcpy(u->bytes, base, 16);
    u->bytes[15] = (unsigned char)dev;
    u->bytes[14] = (unsigned char)(fk.mps_mode ? 0x4d : 0);   /* 'M': MPS-derived devices */
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer) {
    FK_ENTER("cuDeviceCanAccessPeer", CUDA_ERROR_INVALID_VALUE);
    if (!can) return CUDA_ERROR_INVALID_VALUE;
    if (!fk_valid_device(dev) || !fk_valid_device(peer)) return CUDA_ERROR_INVALID_DEVICE;
    *can = dev != peer;
    return CUDA_SUCCESS;
}

/* ---- contexts -------------------------------------------------------------------------- */

#define FK_STACK 16
static __thread fk_ctx_t *fk_stack[FK_STACK];   /* [0..depth-1]; top is current */
static __thread int fk_depth;

fk_ctx_t *fk_current(void) { return fk_depth ? fk_stack[fk_depth - 1] : NULL; }
int fk_valid_ctx(const fk_ctx_t *c) { return c && c->magic == FK_CTX_MAGIC; }

FAKE_API CUresult cuCtxGetCurrent(CUcontext *c) {
    FK_ENTER("cuCtxGetCurrent", CUDA_ERROR_INVALID_VALUE);
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    *c = (CUcontext)fk_current();
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxSetCurrent(CUcontext c) {
    FK_ENTER("cuCtxSetCurrent", CUDA_ERROR_INVALID_VALUE);
    fk_ctx_t *x = (fk_ctx_t *)c;
    if (x && x->magic == FK_CTX_DEAD) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (x && !fk_valid_ctx(x)) return CUDA_ERROR_INVALID_CONTEXT;
    if (!x) { if (fk_depth) fk_depth--; return CUDA_SUCCESS; }
    if (fk_depth) fk_stack[fk_depth - 1] = x;
    else fk_stack[fk_depth++] = x;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxPushCurrent_v2(CUcontext c) {
    FK_ENTER("cuCtxPushCurrent_v2", CUDA_ERROR_INVALID_VALUE);
    fk_ctx_t *x = (fk_ctx_t *)c;
    if (x && x->magic == FK_CTX_DEAD) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (!fk_valid_ctx(x)) return CUDA_ERROR_INVALID_CONTEXT;
    if (fk_depth == FK_STACK) return CUDA_ERROR_INVALID_VALUE;
    fk_stack[fk_depth++] = x;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxPopCurrent_v2(CUcontext *out) {
    FK_ENTER("cuCtxPopCurrent_v2", CUDA_ERROR_INVALID_VALUE);
    if (!fk_depth) return CUDA_ERROR_INVALID_CONTEXT;
    fk_ctx_t *x = fk_stack[--fk_depth];
    if (out) *out = (CUcontext)x;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxGetDevice(CUdevice *d) {
    FK_ENTER("cuCtxGetDevice", CUDA_ERROR_INVALID_VALUE);
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    FK_CURRENT(c);
    *d = c->device;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxSynchronize(void) {
    FK_ENTER("cuCtxSynchronize", CUDA_ERROR_INVALID_VALUE);
    FK_CURRENT(c_);
    (void)c_;
    atomic_fetch_add(&fk_syncs, 1);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice dev) {
    FK_ENTER("cuDevicePrimaryCtxRetain", CUDA_ERROR_INVALID_VALUE);
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    if (!fk_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    fk_lock();
    fk.primary[dev].refcount++;
    fk_unlock();
    *c = (CUcontext)&fk.primary[dev];
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    FK_ENTER("cuDevicePrimaryCtxRelease_v2", CUDA_ERROR_INVALID_VALUE);
    if (!fk_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    CUresult r = CUDA_SUCCESS;
    fk_lock();
    if (fk.primary[dev].refcount > 0) {
        if (--fk.primary[dev].refcount == 0) fk.primary[dev].teardowns++;
    } else {
        r = CUDA_ERROR_INVALID_CONTEXT;
    }
    fk_unlock();
    return r;
}

/* The retain count of `dev`'s primary context (green contexts hold one each) and how often
 * its last reference went: what stock's teardown of the primary would be. */
FAKE_API int fakecuda_primary_refs(int dev, int *teardowns) {
    if (!fk_valid_device(dev)) return -1;
    fk_lock();
    int n = fk.primary[dev].refcount;
    if (teardowns) *teardowns = fk.primary[dev].teardowns;
    fk_unlock();
    return n;
}

/* The real reset destroys what the primary context holds: here its plain memory (what a
 * context the program created allocated stays; VMM handles are nobody's context's). The
 * retain count is the program's own releases' to account for. */
FAKE_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
    FK_ENTER("cuDevicePrimaryCtxReset_v2", CUDA_ERROR_INVALID_VALUE);
    if (!fk_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    fk_plain_reset_device(dev);
    fk_report_if_exiting();
    return CUDA_SUCCESS;
}

static CUresult fk_ctx_create(CUcontext *pc, CUdevice dev) {
    if (!pc) return CUDA_ERROR_INVALID_VALUE;
    if (!fk_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    if (fk_depth == FK_STACK) return CUDA_ERROR_INVALID_VALUE;
    fk_ctx_t *c = calloc(1, sizeof *c);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    *c = (fk_ctx_t){ .magic = FK_CTX_MAGIC, .device = dev, .refcount = 1 };
    fk_all_sms(c->sms);
    fk_stack[fk_depth++] = c;
    *pc = (CUcontext)c;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxCreate_v2(CUcontext *pc, unsigned int flags, CUdevice dev) {
    (void)flags;
    FK_ENTER("cuCtxCreate_v2", CUDA_ERROR_INVALID_VALUE);
    return fk_ctx_create(pc, dev);
}

FAKE_API CUresult cuCtxCreate_v3(CUcontext *pc, CUexecAffinityParam *p, int n, unsigned int flags,
                                 CUdevice dev) {
    (void)p; (void)n; (void)flags;
    FK_ENTER("cuCtxCreate_v3", CUDA_ERROR_INVALID_VALUE);
    return fk_ctx_create(pc, dev);
}

FAKE_API CUresult cuCtxCreate_v4(CUcontext *pc, CUctxCreateParams *p, unsigned int flags,
                                 CUdevice dev) {
    (void)p; (void)flags;
    FK_ENTER("cuCtxCreate_v4", CUDA_ERROR_INVALID_VALUE);
    return fk_ctx_create(pc, dev);
}

FAKE_API CUresult cuCtxDestroy_v2(CUcontext c) {
    FK_ENTER("cuCtxDestroy_v2", CUDA_ERROR_INVALID_VALUE);
    fk_ctx_t *x = (fk_ctx_t *)c;
    if (!fk_valid_ctx(x) || x->primary) return CUDA_ERROR_INVALID_CONTEXT;
    /* Remove it from this thread's stack (other threads' stacks are their problem, as with
     * the real driver). */
    int n = 0;
    for (int i = 0; i < fk_depth; i++) if (fk_stack[i] != x) fk_stack[n++] = fk_stack[i];
    fk_depth = n;
    x->magic = 0;
    free(x);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
    FK_ENTER("cuCtxEnablePeerAccess", CUDA_ERROR_INVALID_VALUE);
    fk_ctx_t *c = fk_current(), *p = (fk_ctx_t *)peer;
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if (!fk_valid_ctx(p) || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (p->device == c->device) return CUDA_ERROR_INVALID_DEVICE;
    CUresult r = CUDA_SUCCESS;
    fk_lock();
    if (fk.peer[c->device][p->device]) r = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    else fk.peer[c->device][p->device] = 1;
    fk_unlock();
    return r;
}

/* ---- streams and events ---------------------------------------------------------------- */

typedef struct { uint32_t magic; int recorded; } fk_event_t;
#define FK_EVENT_MAGIC 0xE7E7E7E7u

fk_stream_t *fk_stream(CUstream s) {
    fk_stream_t *x = (fk_stream_t *)s;
    return (uintptr_t)s > 2 && x->magic == FK_STREAM_MAGIC ? x : NULL;
}

static int fk_valid_stream(CUstream s) {
    /* 0 (legacy), 1 (CU_STREAM_LEGACY) and 2 (CU_STREAM_PER_THREAD) are always valid. */
    return (uintptr_t)s <= 2 || fk_stream(s) != NULL;
}

CUresult fk_stream_ctx(CUstream s, int pt, fk_ctx_t **out) {
    fk_stream_t *x = fk_stream(s);
    if (x && x->ctx->magic == FK_CTX_DEAD) return CUDA_ERROR_CONTEXT_IS_DESTROYED;   /* its green context went */
    if (x) { *out = x->ctx; return CUDA_SUCCESS; }
    if ((uintptr_t)s > 2) return CUDA_ERROR_INVALID_HANDLE;
    FK_CURRENT(c);
    int per_thread = s == CU_STREAM_PER_THREAD || (pt && s == NULL);
    if (per_thread && c->green) return CUDA_ERROR_INVALID_HANDLE;
    *out = c;
    return CUDA_SUCCESS;
}

static CUresult fk_stream_new(CUstream *s, fk_ctx_t *c, int blocking) {
    fk_stream_t *x = calloc(1, sizeof *x);
    if (!x) return CUDA_ERROR_OUT_OF_MEMORY;
    *x = (fk_stream_t){ FK_STREAM_MAGIC, c->device, c, NULL, blocking };
    *s = (CUstream)x;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuStreamCreate(CUstream *s, unsigned int flags) {
    FK_ENTER("cuStreamCreate", CUDA_ERROR_INVALID_VALUE);
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    FK_CURRENT(c);
    return fk_stream_new(s, c, !(flags & CU_STREAM_NON_BLOCKING));
}

CUresult fk_stream_create_in(CUstream *s, fk_ctx_t *c) { return fk_stream_new(s, c, 0); }

static atomic_int fk_blocking_captures;   /* blocking streams being captured now */
static atomic_uint fk_legacy_epoch;       /* bumped by legacy work that invalidated them */

int fk_is_legacy(CUstream s, int pt) { return s == CU_STREAM_LEGACY || (s == NULL && !pt); }

CUresult fk_legacy_work(void) {
    if (!atomic_load(&fk_blocking_captures)) return CUDA_SUCCESS;
    atomic_fetch_add(&fk_legacy_epoch, 1);
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
}

unsigned fk_blocking_capture_begin(void) {
    atomic_fetch_add(&fk_blocking_captures, 1);
    return atomic_load(&fk_legacy_epoch);
}

int fk_blocking_capture_end(unsigned epoch) {
    atomic_fetch_sub(&fk_blocking_captures, 1);
    return atomic_load(&fk_legacy_epoch) != epoch;
}

FAKE_API CUresult cuStreamDestroy_v2(CUstream s) {
    FK_ENTER("cuStreamDestroy_v2", CUDA_ERROR_INVALID_VALUE);
    fk_stream_t *x = fk_stream(s);
    if (!x || x->capture) return CUDA_ERROR_INVALID_HANDLE;
    if (x->ctx->magic == FK_CTX_DEAD) return CUDA_ERROR_CONTEXT_IS_DESTROYED;   /* and it leaks, as documented */
    x->magic = 0;
    free(x);
    return CUDA_SUCCESS;
}

static CUresult fk_sync(CUstream s, int pt) {
    if (!fk_valid_stream(s)) return CUDA_ERROR_INVALID_HANDLE;
    fk_ctx_t *c;
    CUresult r = fk_stream_ctx(s, pt, &c);
    if (r != CUDA_SUCCESS) return r;
    atomic_fetch_add(&fk_syncs, 1);
    return CUDA_SUCCESS;
}
FAKE_API CUresult cuStreamSynchronize(CUstream s) {
    FK_ENTER("cuStreamSynchronize", CUDA_ERROR_INVALID_VALUE);
    return fk_sync(s, 0);
}
FAKE_API CUresult cuStreamSynchronize_ptsz(CUstream s) {
    FK_ENTER("cuStreamSynchronize_ptsz", CUDA_ERROR_INVALID_VALUE);
    return fk_sync(s, 1);
}

static CUresult fk_stream_get_ctx(CUstream s, int pt, CUcontext *pc, CUgreenCtx *pg, int v2) {
    if (!pc && !(v2 && pg)) return CUDA_ERROR_INVALID_VALUE;
    fk_ctx_t *c;
    CUresult r = fk_stream_ctx(s, pt, &c);
    if (r != CUDA_SUCCESS) return r;
    if (pc) *pc = (CUcontext)c;
    /* The green context of a green CUcontext is the object holding it (fake_green.c). */
    if (v2 && pg) *pg = c->green ? (CUgreenCtx)FK_GREEN_OF(c) : NULL;
    return CUDA_SUCCESS;
}
FAKE_API CUresult cuStreamGetCtx(CUstream s, CUcontext *pc) {
    FK_ENTER("cuStreamGetCtx", CUDA_ERROR_INVALID_VALUE);
    return fk_stream_get_ctx(s, 0, pc, NULL, 0);
}
FAKE_API CUresult cuStreamGetCtx_ptsz(CUstream s, CUcontext *pc) {
    FK_ENTER("cuStreamGetCtx_ptsz", CUDA_ERROR_INVALID_VALUE);
    return fk_stream_get_ctx(s, 1, pc, NULL, 0);
}
FAKE_API CUresult cuStreamGetCtx_v2(CUstream s, CUcontext *pc, CUgreenCtx *pg) {
    FK_ENTER("cuStreamGetCtx_v2", CUDA_ERROR_INVALID_VALUE);
    return fk_stream_get_ctx(s, 0, pc, pg, 1);
}
FAKE_API CUresult cuStreamGetCtx_v2_ptsz(CUstream s, CUcontext *pc, CUgreenCtx *pg) {
    FK_ENTER("cuStreamGetCtx_v2_ptsz", CUDA_ERROR_INVALID_VALUE);
    return fk_stream_get_ctx(s, 1, pc, pg, 1);
}

static CUresult fk_is_capturing(CUstream s, int pt, CUstreamCaptureStatus *st) {
    if (!st || !fk_valid_stream(s)) return CUDA_ERROR_INVALID_VALUE;
    fk_ctx_t *c;
    CUresult r = fk_stream_ctx(s, pt, &c);
    if (r != CUDA_SUCCESS) return r;
    fk_stream_t *x = fk_stream(s);
    *st = x && x->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
FAKE_API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st) {
    FK_ENTER("cuStreamIsCapturing", CUDA_ERROR_INVALID_VALUE);
    return fk_is_capturing(s, 0, st);
}
FAKE_API CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *st) {
    FK_ENTER("cuStreamIsCapturing_ptsz", CUDA_ERROR_INVALID_VALUE);
    return fk_is_capturing(s, 1, st);
}

static __thread CUstreamCaptureMode fk_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

FAKE_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *m) {
    FK_ENTER("cuThreadExchangeStreamCaptureMode", CUDA_ERROR_INVALID_VALUE);
    if (!m) return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = fk_capture_mode;
    fk_capture_mode = *m;
    *m = old;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuEventCreate(CUevent *e, unsigned int flags) {
    (void)flags;
    FK_ENTER("cuEventCreate", CUDA_ERROR_INVALID_VALUE);
    if (!e) return CUDA_ERROR_INVALID_VALUE;
    FK_CURRENT(c_);
    (void)c_;
    fk_event_t *x = malloc(sizeof *x);
    if (!x) return CUDA_ERROR_OUT_OF_MEMORY;
    *x = (fk_event_t){ FK_EVENT_MAGIC, 0 };
    *e = (CUevent)x;
    return CUDA_SUCCESS;
}

static fk_event_t *fk_event(CUevent e) {
    fk_event_t *x = (fk_event_t *)e;
    return x && x->magic == FK_EVENT_MAGIC ? x : NULL;
}

static CUresult fk_record(CUevent e, CUstream s, int pt) {
    fk_event_t *x = fk_event(e);
    if (!x || !fk_valid_stream(s)) return CUDA_ERROR_INVALID_HANDLE;
    fk_ctx_t *c;
    CUresult r = fk_stream_ctx(s, pt, &c);
    if (r != CUDA_SUCCESS) return r;
    x->recorded = 1;
    return CUDA_SUCCESS;
}
FAKE_API CUresult cuEventRecord(CUevent e, CUstream s) {
    FK_ENTER("cuEventRecord", CUDA_ERROR_INVALID_VALUE);
    return fk_record(e, s, 0);
}
FAKE_API CUresult cuEventRecord_ptsz(CUevent e, CUstream s) {
    FK_ENTER("cuEventRecord_ptsz", CUDA_ERROR_INVALID_VALUE);
    return fk_record(e, s, 1);
}

static CUresult fk_wait_event(CUstream s, CUevent e, int pt) {
    if (!fk_event(e) || !fk_valid_stream(s)) return CUDA_ERROR_INVALID_HANDLE;
    fk_ctx_t *c;
    return fk_stream_ctx(s, pt, &c);
}
FAKE_API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
    (void)flags;
    FK_ENTER("cuStreamWaitEvent", CUDA_ERROR_INVALID_VALUE);
    return fk_wait_event(s, e, 0);
}
FAKE_API CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int flags) {
    (void)flags;
    FK_ENTER("cuStreamWaitEvent_ptsz", CUDA_ERROR_INVALID_VALUE);
    return fk_wait_event(s, e, 1);
}

FAKE_API CUresult cuEventSynchronize(CUevent e) {
    FK_ENTER("cuEventSynchronize", CUDA_ERROR_INVALID_VALUE);
    return fk_event(e) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

FAKE_API CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b) {
    FK_ENTER("cuEventElapsedTime_v2", CUDA_ERROR_INVALID_VALUE);
    fk_event_t *x = fk_event(a), *y = fk_event(b);
    if (!ms) return CUDA_ERROR_INVALID_VALUE;
    if (!x || !y) return CUDA_ERROR_INVALID_HANDLE;
    if (!x->recorded || !y->recorded) return CUDA_ERROR_INVALID_HANDLE;
    *ms = 0.0f;   /* nothing runs on a fake device */
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuEventDestroy_v2(CUevent e) {
    FK_ENTER("cuEventDestroy_v2", CUDA_ERROR_INVALID_VALUE);
    fk_event_t *x = fk_event(e);
    if (!x) return CUDA_ERROR_INVALID_HANDLE;
    x->magic = 0;
    free(x);
    return CUDA_SUCCESS;
}
