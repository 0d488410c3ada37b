/* test_mlopart.c — CPU tests of the MLOPart backend (shim/backend_mlopart.c), its client
 * (shim/mlopart_client.c), protocol (shim/mlopart_proto.c) and helper program, against the
 * fake driver (build/fake/libcuda.so.1 via LD_LIBRARY_PATH) and tests/mlopart/fake-mps-control
 * (via LDSHIM_MPS_CONTROL); `make test-mlopart` sets both plus LDSHIM_MLOPART_HELPER.
 *
 * Every backend case runs with a private TMPDIR and a marker variable in the environment,
 * which the helper, its supervisor and the fake daemon inherit; after the case the test
 * waits (bounded) until no process carries the marker and TMPDIR is empty. This process is
 * a child subreaper so orphaned supervisors are reaped here, not left as zombies.
 */
#include "shim/backend.h"
#include "shim/log.h"
#include "shim/options.h"
#include "shim/mlopart_proto.h"

#include <CUnit/CUnit.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define SLICE (2 * MiB)

static const ld_driver_t *drv;
static void (*fake_counts)(int out[5]);
static int (*fake_domain_of)(const void *);
static char g_tmp[256], g_tag[64], g_log[256], g_err[256];
static int g_saved_stderr = -1, g_case;

/* ---- harness ------------------------------------------------------------------------- */

static int count_fds(void) {
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Processes other than us whose environment holds the case marker. */
static int marked_procs(char *first, size_t n) {
    int found = 0;
    DIR *d = opendir("/proc");
    if (!d) return -1;
    size_t tl = strlen(g_tag);
    for (struct dirent *e; (e = readdir(d));) {
        int pid = atoi(e->d_name);
        if (pid <= 0 || pid == getpid()) continue;
        char path[64], buf[65536];
        snprintf(path, sizeof path, "/proc/%d/environ", pid);
        int fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        ssize_t k = read(fd, buf, sizeof buf);
        close(fd);
        for (ssize_t i = 0; k > 0 && i + (ssize_t)tl <= k; i++) {
            if (memcmp(buf + i, g_tag, tl) == 0 && buf[i + tl] == '\0') {
                if (!found && first) {
                    char cpath[64], cmd[128] = "";
                    snprintf(cpath, sizeof cpath, "/proc/%d/cmdline", pid);
                    int c = open(cpath, O_RDONLY);
                    if (c >= 0) { ssize_t r = read(c, cmd, sizeof cmd - 1); if (r > 0) cmd[r] = 0; close(c); }
                    snprintf(first, n, "pid %d (%s)", pid, cmd);
                }
                found++;
                break;
            }
        }
    }
    closedir(d);
    return found;
}

static int dir_entries(const char *dir, char *first, size_t n) {
    int c = 0;
    DIR *d = opendir(dir);
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
        if (!c && first) snprintf(first, n, "%s", e->d_name);
        c++;
    }
    closedir(d);
    return c;
}

/* Wait (bounded) for no marked process and an empty TMPDIR; CU_ASSERT both. */
static void assert_clean(void) {
    char who[256] = "", what[256] = "";
    int procs = 0, ents = 0, i;
    for (i = 0; i < 800; i++) {           /* up to 8 s (the hang-quit case needs ~6) */
        while (waitpid(-1, NULL, WNOHANG) > 0) {}
        procs = marked_procs(who, sizeof who);
        ents = dir_entries(g_tmp, what, sizeof what);
        if (procs == 0 && ents == 0) break;
        usleep(10000);
    }
    if (getenv("LDMLO_TEST_VERBOSE")) fprintf(stderr, "  (clean after %d polls)\n", i);
    if (procs) fprintf(stderr, "\n  leftover process: %s\n", who);
    if (ents) fprintf(stderr, "\n  leftover in %s: %s\n", g_tmp, what);
    CU_ASSERT_EQUAL(procs, 0);
    CU_ASSERT_EQUAL(ents, 0);
}

static void begin(const char *hooks, int timeout_ms) {
    g_case++;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/ldmlo-test-XXXXXX");
    if (!mkdtemp(g_tmp)) { perror("mkdtemp"); abort(); }
    setenv("TMPDIR", g_tmp, 1);
    snprintf(g_tag, sizeof g_tag, "LDMLO_TEST_TAG=%d-%d", (int)getpid(), g_case);
    putenv(g_tag);
    if (hooks) setenv("LDSHIM_MLOPART_TEST_HOOK", hooks, 1);
    else unsetenv("LDSHIM_MLOPART_TEST_HOOK");
    char t[32];
    snprintf(t, sizeof t, "%d", timeout_ms);
    setenv("LDSHIM_MLOPART_TIMEOUT_MS", t, 1);
    unsetenv("FAKE_MPS_MODE");
    unsetenv("FAKE_MPS_DEVICES");
    unsetenv("LDSHIM_MLOPART_TEST_SINGLE");
    ld_options_reread();   /* the shim's variables are copied once; each case sets its own */
    snprintf(g_log, sizeof g_log, "/tmp/ldmlo-log-%d-%d", (int)getpid(), g_case);
    unlink(g_log);
    setenv("FAKE_MPS_LOG", g_log, 1);
    /* Capture our stderr to count the backend's log lines. */
    snprintf(g_err, sizeof g_err, "/tmp/ldmlo-err-%d-%d", (int)getpid(), g_case);
    fflush(stderr);
    g_saved_stderr = dup(2);
    int fd = open(g_err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
}

/* Lines of our captured stderr containing `needle`. */
static int err_lines(const char *needle) {
    FILE *f = fopen(g_err, "r");
    if (!f) return -1;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f)) n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

static int file_has(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f)) n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

static void end(void) {
    ld_backend_mlopart.shutdown(0);
    assert_clean();
    fflush(stderr);
    if (g_saved_stderr >= 0) {
        /* Echo what the case logged, indented, for whoever reads the test output. */
        dup2(g_saved_stderr, 2);
        close(g_saved_stderr);
        g_saved_stderr = -1;
        FILE *f = fopen(g_err, "r");
        char line[2048];
        while (f && fgets(line, sizeof line, f)) fprintf(stderr, "    | %s", line);
        if (f) fclose(f);
    }
    unlink(g_err);
    unlink(g_log);
    rmdir(g_tmp);
    unsetenv("LDSHIM_MLOPART_TEST_HOOK");
    ld_options_reread();
}

/* Helper process: our child whose command is the helper. */
static int helper_pid(void) {
    DIR *d = opendir("/proc");
    int found = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        int pid = atoi(e->d_name);
        if (pid <= 0) continue;
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        int ppid = 0;
        char comm[64] = "", state = 0;
        if (fgets(buf, sizeof buf, f)) sscanf(buf, "%*d (%63[^)]) %c %d", comm, &state, &ppid);
        fclose(f);
        if (ppid == getpid() && state != 'Z' && strncmp(comm, "ldshim-mlopart", 14) == 0) {
            found = pid;
            break;
        }
    }
    if (d) closedir(d);
    return found;
}

/* Map `n` handles side by side, as the shim's vmm does. */
static CUdeviceptr map_handles(CUmemGenericAllocationHandle *h, int n) {
    CUdeviceptr base = 0;
    if (drv->pfn_cuMemAddressReserve(&base, n * SLICE, 0, 0, 0) != CUDA_SUCCESS) return 0;
    for (int i = 0; i < n; i++)
        if (drv->pfn_cuMemMap(base + i * SLICE, SLICE, 0, h[i], 0) != CUDA_SUCCESS) return 0;
    CUmemAccessDesc a = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
                          .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    if (drv->pfn_cuMemSetAccess(base, n * SLICE, &a, 1) != CUDA_SUCCESS) return 0;
    return base;
}

static void unmap_handles(CUdeviceptr base, CUmemGenericAllocationHandle *h, int n) {
    drv->pfn_cuMemUnmap(base, n * SLICE);
    drv->pfn_cuMemAddressFree(base, n * SLICE);
    for (int i = 0; i < n; i++) drv->pfn_cuMemRelease(h[i]);
}

static void assert_fake_empty(void) {
    int c[5];
    fake_counts(c);
    CU_ASSERT_EQUAL(c[1], 0);   /* physical handles */
    CU_ASSERT_EQUAL(c[2], 0);   /* reservations     */
    CU_ASSERT_EQUAL(c[3], 0);   /* mappings         */
}

/* ---- protocol ------------------------------------------------------------------------ */

static void test_proto_roundtrip(void) {
    int sv[2];
    CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    ld_mlo_req_t q, q2;
    ld_mlo_req_init(&q, 7, LD_MLO_OP_ALLOC, 1, 4 * MiB);
    CU_ASSERT_EQUAL(ld_mlo_send_req(sv[0], &q, 0, ld_mlo_deadline(1000)), LD_MLO_IO_OK);
    CU_ASSERT_EQUAL(ld_mlo_recv_req(sv[1], &q2, ld_mlo_deadline(1000)), LD_MLO_IO_OK);
    CU_ASSERT(q2.id == 7 && q2.op == LD_MLO_OP_ALLOC && q2.domain == 1 && q2.bytes == 4 * MiB);
    int mfd = memfd_create("t", MFD_CLOEXEC);
    CU_ASSERT_FATAL(mfd >= 0);
    ld_mlo_rep_t r, r2;
    ld_mlo_rep_init(&r, &q2, 0, "ok");
    r.has_fd = 1;
    CU_ASSERT_EQUAL(ld_mlo_send_rep(sv[1], &r, mfd, 0, ld_mlo_deadline(1000)), LD_MLO_IO_OK);
    int got = -1;
    CU_ASSERT_EQUAL(ld_mlo_recv_rep(sv[0], &q, &r2, &got, ld_mlo_deadline(1000)), LD_MLO_IO_OK);
    struct stat a, b;
    CU_ASSERT(got >= 0 && got != mfd);
    CU_ASSERT(fstat(mfd, &a) == 0 && fstat(got, &b) == 0 && a.st_ino == b.st_ino);
    CU_ASSERT_STRING_EQUAL(r2.msg, "ok");
    if (got >= 0) close(got);
    close(mfd);
    close(sv[0]);
    close(sv[1]);
}

typedef struct { int sock, fd; ld_mlo_rep_t rep; } writer_t;
static void *slow_writer(void *arg) {
    writer_t *w = arg;
    ld_mlo_send_rep(w->sock, &w->rep, w->fd, 1, ld_mlo_deadline(5000));
    return NULL;
}

static void test_proto_partial(void) {
    int sv[2];
    CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    ld_mlo_req_t q;
    ld_mlo_req_init(&q, 9, LD_MLO_OP_ALLOC, 0, SLICE);
    writer_t w = { .sock = sv[1], .fd = memfd_create("p", MFD_CLOEXEC) };
    ld_mlo_rep_init(&w.rep, &q, 0, "byte by byte");
    w.rep.has_fd = 1;
    pthread_t t;
    pthread_create(&t, NULL, slow_writer, &w);
    ld_mlo_rep_t r;
    int got = -1;
    CU_ASSERT_EQUAL(ld_mlo_recv_rep(sv[0], &q, &r, &got, ld_mlo_deadline(5000)), LD_MLO_IO_OK);
    pthread_join(t, NULL);
    CU_ASSERT(got >= 0);
    CU_ASSERT_STRING_EQUAL(r.msg, "byte by byte");
    if (got >= 0) close(got);
    close(w.fd);
    close(sv[0]);
    close(sv[1]);
}

static void test_proto_bad_replies(void) {
    int sv[2], fds0 = count_fds();
    CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    ld_mlo_req_t q;
    ld_mlo_req_init(&q, 3, LD_MLO_OP_ALLOC, 0, SLICE);
    ld_mlo_rep_t r, in;
    int got = -1;
    /* junk */
    char junk[sizeof r];
    memset(junk, 'x', sizeof junk);
    ld_mlo_write_all(sv[1], junk, sizeof junk, -1, 0, ld_mlo_deadline(1000));
    CU_ASSERT_EQUAL(ld_mlo_recv_rep(sv[0], &q, &in, &got, ld_mlo_deadline(1000)), LD_MLO_IO_GARBAGE);
    /* wrong id */
    ld_mlo_rep_init(&r, &q, 0, "");
    r.id = 4;
    ld_mlo_send_rep(sv[1], &r, -1, 0, ld_mlo_deadline(1000));
    CU_ASSERT_EQUAL(ld_mlo_recv_rep(sv[0], &q, &in, &got, ld_mlo_deadline(1000)), LD_MLO_IO_GARBAGE);
    /* promised fd missing; success without fd */
    ld_mlo_rep_init(&r, &q, 0, "");
    r.has_fd = 1;
    ld_mlo_send_rep(sv[1], &r, -1, 0, ld_mlo_deadline(1000));
    CU_ASSERT_EQUAL(ld_mlo_recv_rep(sv[0], &q, &in, &got, ld_mlo_deadline(1000)), LD_MLO_IO_NOFD);
    r.has_fd = 0;
    ld_mlo_send_rep(sv[1], &r, -1, 0, ld_mlo_deadline(1000));
    CU_ASSERT_EQUAL(ld_mlo_recv_rep(sv[0], &q, &in, &got, ld_mlo_deadline(1000)), LD_MLO_IO_NOFD);
    /* an fd nobody announced (error reply) is garbage and gets closed */
    int mfd = memfd_create("u", MFD_CLOEXEC);
    ld_mlo_rep_init(&r, &q, 2, "out of memory");
    ld_mlo_send_rep(sv[1], &r, mfd, 0, ld_mlo_deadline(1000));
    close(mfd);
    CU_ASSERT_EQUAL(ld_mlo_recv_rep(sv[0], &q, &in, &got, ld_mlo_deadline(1000)), LD_MLO_IO_GARBAGE);
    CU_ASSERT_EQUAL(got, -1);
    /* a plain error reply is fine */
    ld_mlo_send_rep(sv[1], &r, -1, 0, ld_mlo_deadline(1000));
    CU_ASSERT_EQUAL(ld_mlo_recv_rep(sv[0], &q, &in, &got, ld_mlo_deadline(1000)), LD_MLO_IO_OK);
    CU_ASSERT_EQUAL(in.status, 2);
    /* timeout, then EOF mid-message */
    int64_t t0 = ld_mlo_now_ms();
    CU_ASSERT_EQUAL(ld_mlo_recv_rep(sv[0], &q, &in, &got, ld_mlo_deadline(150)), LD_MLO_IO_TIMEOUT);
    CU_ASSERT(ld_mlo_now_ms() - t0 >= 140 && ld_mlo_now_ms() - t0 < 2000);
    ld_mlo_write_all(sv[1], &r, 10, -1, 0, ld_mlo_deadline(1000));
    close(sv[1]);
    CU_ASSERT_EQUAL(ld_mlo_recv_rep(sv[0], &q, &in, &got, ld_mlo_deadline(1000)), LD_MLO_IO_EOF);
    /* writing to a closed peer is EOF, not SIGPIPE */
    CU_ASSERT_EQUAL(ld_mlo_send_req(sv[0], &q, 0, ld_mlo_deadline(1000)), LD_MLO_IO_EOF);
    close(sv[0]);
    CU_ASSERT_EQUAL(count_fds(), fds0);
    /* request validation */
    CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    ld_mlo_req_t bad;
    ld_mlo_req_init(&bad, 1, LD_MLO_OP_PING, 0, 0);
    bad.op = 99;
    ld_mlo_send_req(sv[0], &bad, 0, ld_mlo_deadline(1000));
    CU_ASSERT_EQUAL(ld_mlo_recv_req(sv[1], &q, ld_mlo_deadline(1000)), LD_MLO_IO_GARBAGE);
    close(sv[0]);
    close(sv[1]);
}

static void test_env_build(void) {
    char *src[] = { "A=1", "LD_PRELOAD=/x/libasan.so:/opt/lib/libldshim.so", "CUDA_VISIBLE_DEVICES=0",
                    "CUDA_MPS_PIPE_DIRECTORY=/p", "B=2", "noequals", NULL };
    const char *drop[] = { "CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY", NULL };
    const char *add[] = { "B=3", NULL };
    char **e = ld_mlo_env_build(src, drop, add, "/opt/lib/libldshim.so");
    CU_ASSERT_FATAL(e != NULL);
    int n = 0;
    for (; e[n]; n++) {}
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT_STRING_EQUAL(e[0], "A=1");
    CU_ASSERT_STRING_EQUAL(e[1], "LD_PRELOAD=/x/libasan.so");
    CU_ASSERT_STRING_EQUAL(e[2], "B=3");
    ld_mlo_env_free(e);
    char *only[] = { "LD_PRELOAD=libldshim.so", NULL };
    e = ld_mlo_env_build(only, NULL, NULL, "/usr/lib/libldshim.so");   /* a bare name: the loader's search */
    CU_ASSERT_FATAL(e != NULL);
    CU_ASSERT_PTR_NULL(e[0]);
    ld_mlo_env_free(e);

    /* Identity, not the name: a renamed copy that is the loaded shim goes (by path, and by
     * device and inode through another name), a library merely named libldshim* stays. */
    char dir[] = "/tmp/ldmlo-env-XXXXXX", self[128], other[128], alias[128], pre[512];
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    snprintf(self, sizeof self, "%s/libnotashim.so", dir);
    snprintf(other, sizeof other, "%s/libldshim-plugin.so", dir);
    snprintf(alias, sizeof alias, "%s/alias.so", dir);
    FILE *f = fopen(self, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("x", f);
    fclose(f);
    f = fopen(other, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("y", f);
    fclose(f);
    CU_ASSERT_EQUAL(link(self, alias), 0);
    snprintf(pre, sizeof pre, "LD_PRELOAD=%s %s:%s", self, other, alias);
    char *src2[] = { pre, NULL };
    const char *mark[] = { LD_MLO_ENV_MARKER "=1", NULL };
    e = ld_mlo_env_build(src2, NULL, mark, self);
    CU_ASSERT_FATAL(e != NULL);
    char want[256];
    snprintf(want, sizeof want, "LD_PRELOAD=%s", other);
    CU_ASSERT_STRING_EQUAL(e[0], want);
    CU_ASSERT_STRING_EQUAL(e[1], LD_MLO_ENV_MARKER "=1");
    CU_ASSERT_PTR_NULL(e[2]);
    ld_mlo_env_free(e);
    unlink(self);
    unlink(other);
    unlink(alias);
    rmdir(dir);
}

static int run_helper(const char *args, char *out, size_t n) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", getenv("LDSHIM_MLOPART_HELPER"), args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t got = fread(out, 1, n - 1, p);
    out[got] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_helper_cli(void) {
    char out[4096];
    CU_ASSERT_EQUAL(run_helper("--help", out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "usage:"));
    CU_ASSERT_EQUAL(run_helper("--fd 3", out, sizeof out), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "required"));
    CU_ASSERT_EQUAL(run_helper("--fd 0 --uuid GPU-1234", out, sizeof out), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "not a unix stream socket"));
    CU_ASSERT_EQUAL(run_helper("--uuid nope --fd 3", out, sizeof out), 2);
    CU_ASSERT_EQUAL(run_helper("--bogus", out, sizeof out), 2);
}

/* ---- backend --------------------------------------------------------------------------- */

static char why[256];

static int avail(void) { why[0] = 0; return ld_backend_mlopart.available(drv, 0, 2, why, sizeof why); }
static CUresult create(int domain, CUmemGenericAllocationHandle *h) {
    why[0] = 0;
    return ld_backend_mlopart.create(drv, 0, domain, SLICE, h, why, sizeof why);
}

/* Must run before any other case imports: FAKE_CUDA_FAIL fails this process's 1st and 4th
 * import. The 1st is available()'s probe: decline. Then a new start probes with imports 2
 * and 3, and create()'s import (the 4th) fails: the backend turns off. */
static void test_import_failure(void) {
    begin(NULL, 5000);
    CU_ASSERT_NOT_EQUAL(avail(), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "probe import"));
    CU_ASSERT_EQUAL(err_lines("declined: probe import"), 0);   /* info level: not shown */
    end();
    begin(NULL, 5000);
    CU_ASSERT_EQUAL_FATAL(avail(), 0);
    CUmemGenericAllocationHandle h = 0;
    CU_ASSERT_NOT_EQUAL(create(0, &h), CUDA_SUCCESS);
    CU_ASSERT_EQUAL(h, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "cuMemImportFromShareableHandle"));
    CU_ASSERT_NOT_EQUAL(create(1, &h), CUDA_SUCCESS);   /* backend off for the GPU now */
    CU_ASSERT_EQUAL(err_lines("backend off"), 1);
    int c[5];
    fake_counts(c);
    CU_ASSERT_EQUAL(c[1], 0);
    CU_ASSERT_EQUAL(c[4], 0);
    end();
}

static void test_happy_path(void) {
    begin(NULL, 5000);
    int fds0 = count_fds();
    CU_ASSERT_EQUAL_FATAL(avail(), 0);
    CU_ASSERT_EQUAL(avail(), 0);          /* once per GPU: no second helper */
    int hp = helper_pid();
    CU_ASSERT(hp > 0);
    /* The helper runs as we do, and its private directory is 0700 with pipe/ and log/. */
    char path[600], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", hp);
    FILE *f = fopen(path, "r");
    int uid = -1;
    while (f && fgets(line, sizeof line, f)) if (!strncmp(line, "Uid:", 4)) uid = atoi(line + 4);
    if (f) fclose(f);
    CU_ASSERT_EQUAL(uid, (int)getuid());
    char ent[256] = "";
    CU_ASSERT_EQUAL(dir_entries(g_tmp, ent, sizeof ent), 1);
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", g_tmp, ent);
    CU_ASSERT(stat(path, &st) == 0 && (st.st_mode & 0777) == 0700);
    snprintf(path, sizeof path, "%s/%s/pipe/fakecuda-devices", g_tmp, ent);
    CU_ASSERT(access(path, R_OK) == 0);
    /* The daemon got the GPU's UUID, the v2 MLOPart command got our uid. */
    CU_ASSERT(file_has(g_log, "daemon start CUDA_VISIBLE_DEVICES=GPU-") == 1);
    char want[64];
    snprintf(want, sizeof want, "client: start_server -uid %u -mlopart", (unsigned)getuid());
    CU_ASSERT(file_has(g_log, want) == 1);

    CUmemGenericAllocationHandle h[2] = { 0, 0 };
    CU_ASSERT_EQUAL_FATAL(create(0, &h[0]), CUDA_SUCCESS);
    CU_ASSERT_EQUAL_FATAL(create(1, &h[1]), CUDA_SUCCESS);
    CUdeviceptr base = map_handles(h, 2);
    CU_ASSERT_FATAL(base != 0);
    unsigned char *p = (unsigned char *)(uintptr_t)base;
    for (size_t i = 0; i < 2 * SLICE; i++) p[i] = (unsigned char)(i * 31 + 7);
    size_t bad = 0;
    for (size_t i = 0; i < 2 * SLICE; i++) bad += p[i] != (unsigned char)(i * 31 + 7);
    CU_ASSERT_EQUAL(bad, 0);
    /* Memory of derived device d is homed in domain d (the fake's MLOPart model). */
    CU_ASSERT_EQUAL(fake_domain_of(p), 0);
    CU_ASSERT_EQUAL(fake_domain_of(p + SLICE), 1);
    unmap_handles(base, h, 2);
    assert_fake_empty();
    CU_ASSERT_EQUAL(count_fds(), fds0 + 2);   /* our end of the helper socket, its pidfd */
    ld_backend_mlopart.shutdown(0);
    CU_ASSERT(file_has(g_log, "client: quit") == 1);
    CU_ASSERT(file_has(g_log, "daemon quit") == 1);
    CU_ASSERT_EQUAL(count_fds(), fds0);
    CU_ASSERT_EQUAL(err_lines("ldshim:"), 0);   /* nothing to warn about */
    end();
}

/* Bytes written by one process through an fd the helper created are seen by another. */
static void test_cross_process(void) {
    begin(NULL, 5000);
    char path[4096], e[256];
    CU_ASSERT_FATAL(ld_mlo_helper_path(path, sizeof path, e, sizeof e) == 0);
    ld_mlo_helper_t h = LD_MLO_HELPER_INIT;
    int ndev = 0;
    CU_ASSERT_EQUAL_FATAL(ld_mlo_helper_spawn(&h, path, "GPU-00000000-0000-0000-0000-000000000000",
                                              2, 5000, &ndev, e, sizeof e), 0);
    CU_ASSERT_EQUAL(ndev, 2);
    ld_mlo_rep_t rep;
    int fd = -1;
    CU_ASSERT_EQUAL(ld_mlo_helper_call(&h, LD_MLO_OP_PING, 0, 0, 1000, &rep, NULL), LD_MLO_IO_OK);
    CU_ASSERT_EQUAL(ld_mlo_helper_call(&h, LD_MLO_OP_ALLOC, 1, SLICE, 1000, &rep, &fd), LD_MLO_IO_OK);
    CU_ASSERT_FATAL(fd >= 0);
    /* per-request error: the helper stays */
    int fd2 = -1;
    CU_ASSERT_EQUAL(ld_mlo_helper_call(&h, LD_MLO_OP_ALLOC, 5, SLICE, 1000, &rep, &fd2), LD_MLO_IO_OK);
    CU_ASSERT_EQUAL(rep.status, CUDA_ERROR_INVALID_VALUE);
    CU_ASSERT_EQUAL(fd2, -1);
    pid_t c = fork();
    if (c == 0) {
        unsigned char *m = mmap(NULL, SLICE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) _exit(1);
        for (size_t i = 0; i < SLICE; i++) m[i] = (unsigned char)(i ^ 0x5a);
        _exit(0);
    }
    int st = -1;
    waitpid(c, &st, 0);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CUmemGenericAllocationHandle mh = 0;
    CU_ASSERT_EQUAL_FATAL(drv->pfn_cuMemImportFromShareableHandle(&mh, (void *)(intptr_t)fd,
                                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), CUDA_SUCCESS);
    close(fd);
    CUdeviceptr base = map_handles(&mh, 1);
    CU_ASSERT_FATAL(base != 0);
    const unsigned char *p = (const unsigned char *)(uintptr_t)base;
    size_t bad = 0;
    for (size_t i = 0; i < SLICE; i++) bad += p[i] != (unsigned char)(i ^ 0x5a);
    CU_ASSERT_EQUAL(bad, 0);
    unmap_handles(base, &mh, 1);
    assert_fake_empty();
    ld_mlo_helper_quit(&h, 5000);
    CU_ASSERT_EQUAL(h.pid, 0);
    CU_ASSERT_EQUAL(h.sock, -1);
    end();
}

/* The program reaps the helper behind the shim's back and the number goes to another
 * process (`h.pid = victim` is what the reuse looks like inside the struct): killing the
 * helper must not touch that process, through the pidfd and through the waitid proof
 * (hook no-pidfd). The victim is the child of a keeper process, not ours. */
static void pid_reuse_case(const char *hooks) {
    begin(hooks, 5000);
    char path[512], e[256];
    snprintf(path, sizeof path, "%s", getenv("LDSHIM_MLOPART_HELPER"));
    ld_mlo_helper_t h = LD_MLO_HELPER_INIT;
    int ndev = 0;
    CU_ASSERT_EQUAL_FATAL(ld_mlo_helper_spawn(&h, path, "GPU-00000000-0000-0000-0000-000000000000",
                                              2, 5000, &ndev, e, sizeof e), 0);
    CU_ASSERT_EQUAL(h.pidfd >= 0, hooks == NULL);
    int helper = h.pid, st;
    CU_ASSERT_EQUAL(kill(helper, SIGKILL), 0);
    CU_ASSERT_EQUAL(waitpid(helper, &st, 0), helper);          /* reaped by "the program" */
    int pfd[2];
    CU_ASSERT_FATAL(pipe(pfd) == 0);
    pid_t keeper = fork();
    if (keeper == 0) {
        pid_t v = fork();
        if (v == 0) { for (;;) pause(); }
        if (write(pfd[1], &v, sizeof v) != sizeof v) _exit(1);
        for (;;) pause();
    }
    pid_t victim = 0;
    CU_ASSERT_EQUAL(read(pfd[0], &victim, sizeof victim), (ssize_t)sizeof victim);
    close(pfd[0]);
    close(pfd[1]);
    h.pid = victim;
    ld_mlo_helper_kill(&h, 1000);
    usleep(100000);
    char stat_path[64], buf[256] = "";
    snprintf(stat_path, sizeof stat_path, "/proc/%d/stat", (int)victim);
    FILE *f = fopen(stat_path, "r");
    if (f) { if (!fgets(buf, sizeof buf, f)) buf[0] = 0; fclose(f); }
    char state = 0;
    sscanf(buf, "%*d (%*[^)]) %c", &state);
    CU_ASSERT(state == 'S' || state == 'R');                   /* alive, not killed */
    CU_ASSERT_EQUAL(h.pid, 0);
    kill(victim, SIGKILL);
    kill(keeper, SIGKILL);
    waitpid(keeper, &st, 0);
    end();
}
static void test_pid_reuse(void) { pid_reuse_case(NULL); }
static void test_pid_reuse_nopidfd(void) { pid_reuse_case("no-pidfd"); }

/* Inside the helper's environment the client starts nothing. */
static void test_no_helper_inside_helper(void) {
    begin(NULL, 5000);
    setenv(LD_MLO_ENV_MARKER, "1", 1);
    ld_options_reread();
    char path[512], e[256];
    snprintf(path, sizeof path, "%s", getenv("LDSHIM_MLOPART_HELPER"));
    ld_mlo_helper_t h = LD_MLO_HELPER_INIT;
    int ndev = 0;
    CU_ASSERT_EQUAL(ld_mlo_helper_spawn(&h, path, "GPU-00000000-0000-0000-0000-000000000000", 2, 5000, &ndev, e,
                                        sizeof e), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e, LD_MLO_ENV_MARKER));
    CU_ASSERT_EQUAL(h.pid, 0);
    unsetenv(LD_MLO_ENV_MARKER);
    ld_options_reread();
    end();
}

typedef struct { int ok, fail; } tally_t;
static void *hammer(void *arg) {
    tally_t *t = arg;
    for (int i = 0; i < 12; i++) {
        CUmemGenericAllocationHandle h;
        char w[128];
        if (ld_backend_mlopart.create(drv, 0, i & 1, SLICE, &h, w, sizeof w) == CUDA_SUCCESS) {
            t->ok++;
            drv->pfn_cuMemRelease(h);
        } else {
            t->fail++;
        }
    }
    return NULL;
}

static void test_threads(void) {
    begin(NULL, 10000);
    /* No available() first: create() starts the helper lazily, once. */
    pthread_t t[6];
    tally_t r[6] = { { 0, 0 } };
    for (int i = 0; i < 6; i++) pthread_create(&t[i], NULL, hammer, &r[i]);
    int ok = 0, fail = 0;
    for (int i = 0; i < 6; i++) { pthread_join(t[i], NULL); ok += r[i].ok; fail += r[i].fail; }
    CU_ASSERT_EQUAL(ok, 72);
    CU_ASSERT_EQUAL(fail, 0);
    assert_fake_empty();
    CU_ASSERT_EQUAL(marked_procs(NULL, 0) >= 3, 1);   /* one helper + supervisor + daemon */
    end();
}

/* Messages written byte by byte on both sides (1 ms apart) still make one request each. */
static void test_partial_messages(void) {
    begin("partial-reply,partial-request", 10000);
    CU_ASSERT_EQUAL_FATAL(avail(), 0);
    CUmemGenericAllocationHandle h[2];
    CU_ASSERT_EQUAL_FATAL(create(0, &h[0]), CUDA_SUCCESS);
    CU_ASSERT_EQUAL_FATAL(create(1, &h[1]), CUDA_SUCCESS);
    CUdeviceptr base = map_handles(h, 2);
    CU_ASSERT_FATAL(base != 0);
    CU_ASSERT_EQUAL(fake_domain_of((void *)(uintptr_t)(base + SLICE)), 1);
    unmap_handles(base, h, 2);
    assert_fake_empty();
    end();
}

static void test_transient_error(void) {
    begin("after=2,fail-alloc-once", 5000);   /* after the 2 start-up probe ALLOCs */
    CU_ASSERT_EQUAL_FATAL(avail(), 0);
    CUmemGenericAllocationHandle h = 0;
    CU_ASSERT_EQUAL(create(0, &h), CUDA_ERROR_OUT_OF_MEMORY);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "out of memory"));
    CU_ASSERT_EQUAL(create(0, &h), CUDA_SUCCESS);
    drv->pfn_cuMemRelease(h);
    CU_ASSERT_EQUAL(err_lines("failed: test hook"), 1);
    CU_ASSERT_EQUAL(err_lines("backend off"), 0);
    end();
}

/* A broken helper: the request fails, the backend is off for the GPU, one warning that
 * names the cause, no fd leaked, nothing left running. */
static void broken_case(const char *hooks, int timeout_ms, int kill_it, const char *cause,
                        int max_ms) {
    begin(hooks, timeout_ms);
    int fds0 = count_fds();
    CU_ASSERT_EQUAL_FATAL(avail(), 0);
    if (kill_it) {
        int hp = helper_pid();
        CU_ASSERT_FATAL(hp > 0);
        kill(hp, SIGKILL);
        usleep(50000);
    }
    CUmemGenericAllocationHandle h = 0;
    int64_t t0 = ld_mlo_now_ms();
    CU_ASSERT_NOT_EQUAL(create(0, &h), CUDA_SUCCESS);
    CU_ASSERT(ld_mlo_now_ms() - t0 < max_ms);
    CU_ASSERT_EQUAL(h, 0);
    t0 = ld_mlo_now_ms();
    CU_ASSERT_NOT_EQUAL(create(1, &h), CUDA_SUCCESS);     /* fails fast from now on */
    CU_ASSERT(ld_mlo_now_ms() - t0 < 100);
    CU_ASSERT_NOT_EQUAL(avail(), 0);
    CU_ASSERT_EQUAL(err_lines("backend off"), 1);
    CU_ASSERT_EQUAL(err_lines(cause), 1);
    CU_ASSERT_EQUAL(helper_pid(), 0);
    CU_ASSERT_EQUAL(count_fds(), fds0);
    int c[5];
    fake_counts(c);
    CU_ASSERT_EQUAL(c[1], 0);
    end();
}

static void test_helper_killed(void) { broken_case(NULL, 5000, 1, "EOF", 3000); }
static void test_helper_crash_mid_request(void) { broken_case("after=2,crash-alloc", 5000, 0, "EOF", 3000); }
static void test_helper_hang(void) { broken_case("after=2,hang-alloc", 1200, 0, "timeout", 4000); }
static void test_garbage_reply(void) { broken_case("after=2,garbage-reply", 5000, 0, "garbage", 3000); }
static void test_short_reply(void) { broken_case("after=2,short-reply", 5000, 0, "EOF", 3000); }
static void test_fd_not_sent(void) { broken_case("after=2,nofd-reply", 5000, 0, "file descriptor not received", 3000); }

/* Start-up failures: available() says why, nothing is left, the why reaches the caller. */
static void start_fails(const char *mode, const char *devices, const char *control,
                        const char *hooks, int timeout_ms, const char *expect) {
    begin(hooks, timeout_ms);
    if (mode) setenv("FAKE_MPS_MODE", mode, 1);
    if (devices) setenv("FAKE_MPS_DEVICES", devices, 1);
    char *saved = getenv("LDSHIM_MPS_CONTROL") ? strdup(getenv("LDSHIM_MPS_CONTROL")) : NULL;
    if (control) setenv("LDSHIM_MPS_CONTROL", control, 1);
    int64_t t0 = ld_mlo_now_ms();
    CU_ASSERT_NOT_EQUAL(avail(), 0);
    CU_ASSERT(ld_mlo_now_ms() - t0 < timeout_ms + 3000);
    if (!strstr(why, expect)) fprintf(stderr, "why = '%s', expected '%s'\n", why, expect);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, expect));
    CUmemGenericAllocationHandle h = 0;
    CU_ASSERT_NOT_EQUAL(create(0, &h), CUDA_SUCCESS);   /* no retry storm: declined stays */
    CU_ASSERT_EQUAL(h, 0);
    if (saved) { setenv("LDSHIM_MPS_CONTROL", saved, 1); free(saved); }
    end();
}

static void test_no_mps_binary(void) {
    start_fails(NULL, NULL, "/nonexistent/nvidia-cuda-mps-control", NULL, 5000, "not found");
}
static void test_daemon_fails(void) {
    start_fails("nostart", NULL, NULL, NULL, 5000, "exited with status 1: fake-mps-control: cannot open the GPU");
}
static void test_mlopart_refused(void) { start_fails("refuse", NULL, NULL, NULL, 5000, "MLOPart refused"); }
static void test_wrong_count(void) {
    start_fails(NULL, "1", NULL, NULL, 5000, "shows 1 device(s)");
}
static void test_hang_start(void) {
    start_fails(NULL, NULL, NULL, "hang-start", 1000, "did not start: timeout");
}

/* The daemon's output file cannot be created: the file layer's reason, not errno's. */
static void test_daemon_out_taken(void) {
    start_fails(NULL, NULL, NULL, "daemon-out-exists", 5000, "daemon.out: it exists already");
}

static void test_v3_form(void) {
    begin(NULL, 5000);
    setenv("FAKE_MPS_MODE", "v3only", 1);
    char keep[300], out[400];
    snprintf(keep, sizeof keep, "%s-keep", g_tmp);
    setenv("LDSHIM_MLOPART_DEBUG_LOGS", keep, 1);
    CU_ASSERT_EQUAL(avail(), 0);
    CU_ASSERT_EQUAL(file_has(g_log, "client: server create --uid="), 1);
    CU_ASSERT_EQUAL(file_has(g_log, "--locality-domains=true"), 1);
    end();
    unsetenv("LDSHIM_MLOPART_DEBUG_LOGS");
    /* The daemon's output was kept for diagnosis before the directory went. */
    snprintf(out, sizeof out, "%s/daemon.out", keep);
    CU_ASSERT(access(out, R_OK) == 0);
    unlink(out);
    rmdir(keep);
}

static void test_single_mode(void) {
    begin(NULL, 5000);
    setenv("FAKE_MPS_DEVICES", "1", 1);
    setenv("LDSHIM_MLOPART_TEST_SINGLE", "1", 1);
    CU_ASSERT_EQUAL_FATAL(avail(), 0);
    CUmemGenericAllocationHandle h[2];
    CU_ASSERT_EQUAL_FATAL(create(0, &h[0]), CUDA_SUCCESS);
    CU_ASSERT_EQUAL_FATAL(create(1, &h[1]), CUDA_SUCCESS);
    CUdeviceptr base = map_handles(h, 2);
    CU_ASSERT_FATAL(base != 0);
    unsigned char *p = (unsigned char *)(uintptr_t)base;
    memset(p, 0xab, 2 * SLICE);
    CU_ASSERT_EQUAL(p[2 * SLICE - 1], 0xab);
    unmap_handles(base, h, 2);
    end();
}

/* The MPS server refuses its first clients while it starts: the helper retries cuInit and
 * the context creation instead of declining. (The fake reads FAKE_CUDA_FAIL in the helper;
 * this process read its own copy at start.) */
static void test_server_not_ready(void) {
    begin(NULL, 5000);
    char *saved = strdup(getenv("FAKE_CUDA_FAIL"));
    setenv("FAKE_CUDA_FAIL", "cuInit:1:807,cuDevicePrimaryCtxRetain:1:807", 1);
    CU_ASSERT_EQUAL(avail(), 0);
    setenv("FAKE_CUDA_FAIL", saved, 1);
    free(saved);
    CUmemGenericAllocationHandle h;
    CU_ASSERT_EQUAL(create(1, &h), CUDA_SUCCESS);
    drv->pfn_cuMemRelease(h);
    end();
}

static void test_hang_quit(void) {
    /* A daemon that ignores `quit` is terminated after the bounded wait. */
    begin(NULL, 5000);
    setenv("FAKE_MPS_MODE", "hangquit", 1);
    CU_ASSERT_EQUAL(avail(), 0);
    end();
}

/* A forked child forgets the parent's helper without disturbing it. */
static void test_fork_child_forgets(void) {
    begin(NULL, 5000);
    CU_ASSERT_EQUAL_FATAL(avail(), 0);
    pid_t c = fork();
    if (c == 0) {
        ld_backend_mlopart.shutdown(1);
        _exit(0);
    }
    int st;
    waitpid(c, &st, 0);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CUmemGenericAllocationHandle h;
    CU_ASSERT_EQUAL(create(0, &h), CUDA_SUCCESS);
    drv->pfn_cuMemRelease(h);
    CU_ASSERT(file_has(g_log, "client: quit") == 0);
    end();
}

static void *avail_thread(void *arg) { (void)arg; return (void *)(intptr_t)avail(); }

/* The program dies by SIGKILL while a request is in flight: helper, supervisor and daemon
 * go, the directory is removed. `from_thread`: the helper was spawned by a thread that
 * has exited (no parent-death signal then: EOF and the parent check do it). */
static void program_killed(const char *hooks, int from_thread) {
    begin(hooks, 10000);
    int pfd[2];
    CU_ASSERT_FATAL(pipe(pfd) == 0);
    pid_t c = fork();
    if (c == 0) {
        close(pfd[0]);
        int ok;
        if (from_thread) {
            pthread_t t;
            void *res;
            pthread_create(&t, NULL, avail_thread, NULL);
            pthread_join(t, &res);
            ok = (int)(intptr_t)res == 0;
        } else {
            ok = avail() == 0;
        }
        if (!ok) _exit(3);
        if (write(pfd[1], "x", 1) != 1) _exit(4);
        CUmemGenericAllocationHandle h;
        create(0, &h);           /* hangs or is slow; we are killed meanwhile */
        _exit(5);
    }
    close(pfd[1]);
    char b;
    CU_ASSERT_EQUAL(read(pfd[0], &b, 1), 1);
    close(pfd[0]);
    usleep(300000);
    char who[256];
    int np = marked_procs(who, sizeof who);
    /* helper, supervisor, daemon (the forked program shows our exec-time environ) */
    if (np < 3) fprintf(stderr, "marked processes: %d, first %s\n", np, who);
    CU_ASSERT(np >= 3);   /* program, helper, supervisor, daemon */
    kill(c, SIGKILL);
    int st;
    waitpid(c, &st, 0);
    CU_ASSERT(WIFSIGNALED(st));
    end();
}

static void test_program_killed(void) { program_killed("after=2,hang-alloc", 0); }
static void test_program_killed_thread(void) { program_killed("after=2,slow-alloc", 1); }

static void register_tests(void) {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    signal(SIGPIPE, SIG_IGN);
    /* Read once by the fake at its first call: the first import in this process fails. */
    /* (The second entry counts only the calls the first let through: 3 + 1 = the 4th.) */
    setenv("FAKE_CUDA_FAIL", "cuMemImportFromShareableHandle:1:1,cuMemImportFromShareableHandle:3:1", 1);
    ld_log_init();
    drv = ld_driver();
    if (!drv || drv->pfn_cuInit(0) != CUDA_SUCCESS || !getenv("LDSHIM_MLOPART_HELPER")) {
        fprintf(stderr, "test_mlopart: needs the fake driver on LD_LIBRARY_PATH and "
                        "LDSHIM_MLOPART_HELPER / LDSHIM_MPS_CONTROL (run `make test-mlopart`)\n");
        exit(2);
    }
    void *fk = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    *(void **)&fake_counts = fk ? dlsym(fk, "fakecuda_counts") : NULL;
    *(void **)&fake_domain_of = fk ? dlsym(fk, "fakecuda_domain_of") : NULL;
    if (!fake_counts || !fake_domain_of) { fprintf(stderr, "test_mlopart: not the fake driver\n"); exit(2); }

    CU_pSuite p = CU_add_suite("mlopart_protocol", NULL, NULL);
    CU_add_test(p, "request/reply round trip with an fd", test_proto_roundtrip);
    CU_add_test(p, "reply written byte by byte", test_proto_partial);
    CU_add_test(p, "garbage, wrong id, missing fd, timeout, EOF", test_proto_bad_replies);
    CU_add_test(p, "helper environment", test_env_build);
    CU_add_test(p, "helper command line", test_helper_cli);
    CU_pSuite b = CU_add_suite("mlopart_backend", NULL, NULL);
    CU_add_test(b, "import failure turns the backend off", test_import_failure);
    CU_add_test(b, "happy path: two domains mapped, bytes read back", test_happy_path);
    CU_add_test(b, "cross-process bytes through the helper's fd", test_cross_process);
    CU_add_test(b, "a reaped helper's reused pid is never signalled (pidfd)", test_pid_reuse);
    CU_add_test(b, "a reaped helper's reused pid is never signalled (waitid proof)", test_pid_reuse_nopidfd);
    CU_add_test(b, "no helper started inside the helper's environment", test_no_helper_inside_helper);
    CU_add_test(b, "6 threads, lazy start", test_threads);
    CU_add_test(b, "partial writes and reads on both sides", test_partial_messages);
    CU_add_test(b, "per-request error is transient", test_transient_error);
    CU_add_test(b, "helper killed between requests", test_helper_killed);
    CU_add_test(b, "helper crashes mid-request", test_helper_crash_mid_request);
    CU_add_test(b, "helper hangs: timeout", test_helper_hang);
    CU_add_test(b, "garbage reply", test_garbage_reply);
    CU_add_test(b, "short reply then exit", test_short_reply);
    CU_add_test(b, "fd not sent", test_fd_not_sent);
    CU_add_test(b, "no MPS binary", test_no_mps_binary);
    CU_add_test(b, "MPS daemon fails to start", test_daemon_fails);
    CU_add_test(b, "MLOPart refused", test_mlopart_refused);
    CU_add_test(b, "wrong device count", test_wrong_count);
    CU_add_test(b, "helper hangs at start", test_hang_start);
    CU_add_test(b, "daemon output file name taken: the file layer's reason", test_daemon_out_taken);
    CU_add_test(b, "MPS v3 locality-domains form", test_v3_form);
    CU_add_test(b, "test-single mode", test_single_mode);
    CU_add_test(b, "MPS server not ready at first", test_server_not_ready);
    CU_add_test(b, "daemon ignores quit", test_hang_quit);
    CU_add_test(b, "forked child forgets the helper", test_fork_child_forgets);
    CU_add_test(b, "program SIGKILLed mid-request", test_program_killed);
    CU_add_test(b, "program SIGKILLed, helper from an exited thread", test_program_killed_thread);
}

#include "tests/unit/cunit_main.h"
