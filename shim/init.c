/* init.c — library constructor/destructor and fork handlers.
 *
 * The constructor copies the environment and nothing else: no file is read, nothing is
 * printed, no CUDA call (a CUDA context must not exist before a fork-based program forks,
 * and a process that never touches CUDA must not notice the shim). The policy is read at the
 * first CUDA call (config.c). The destructor writes the report. Freed ranges the pool keeps
 * are released by an atexit handler that vmm.c registers when the pool first keeps one, so it runs
 * while the driver is still alive. */
#include "shim/alloc.h"
#include "shim/backend.h"
#include "shim/compute.h"
#include "shim/config.h"
#include "shim/device.h"
#include "shim/log.h"
#include "shim/options.h"
#include "shim/place.h"
#include "shim/pool.h"
#include "shim/registry.h"
#include "shim/report.h"
#include "shim/topology.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int in_child;

/* Every shim mutex is held across fork (none is ever held while another is taken, so the
 * order is free): the child's copies are consistent and unlocked by their owner. The
 * registry's rwlock is the exception (registry.c says why). */
static void before_fork(void) {
    ld_compute_lock_for_fork();
    ld_topology_lock_for_fork();
    ld_device_lock_for_fork();
    ld_alloc_lock_for_fork();
    ld_pool_lock_for_fork();
    ld_config_lock_for_fork();
}
static void unlock_all(void) {
    ld_config_unlock_after_fork();
    ld_pool_unlock_after_fork();
    ld_alloc_unlock_after_fork();
    ld_device_unlock_after_fork();
    ld_topology_unlock_after_fork();
    ld_compute_unlock_after_fork();
}
static void parent_after_fork(void) { unlock_all(); }
/* The child has no CUDA context and none of the parent's mappings are usable by it:
 * start clean. The report is written by the child only if its path contains %p. */
static void child_after_fork(void) {
    in_child = 1;
    unlock_all();
    ld_registry_reset_in_child();
    ld_pool_reset();
    ld_device_reset();
    ld_topology_reset();
    ld_compute_reset();
    ld_place_reset();
    ld_alloc_reset();
    if (ld_backend_mlopart.shutdown) ld_backend_mlopart.shutdown(1);
}

__attribute__((constructor)) static void ldshim_init(void) {
    ld_options_init();
    ld_log_init();
    ld_config_init();
    pthread_atfork(before_fork, parent_after_fork, child_after_fork);
}

__attribute__((destructor)) static void ldshim_fini(void) {
    /* The report is the program's: a process that never touched CUDA (sh, env, timeout in
     * front of the program, rm or mkfifo in its scripts) writes one only to a per-process
     * path (%p), never to the shared one, which it would replace or create before the
     * program could (a FIFO or device the script is about to make, say). */
    int pid_path = strstr(ld_cfg.report_path, "%p") != NULL;
    if (ld_cfg.report_path[0] && (!in_child || pid_path) && (ld_cuda_used() || pid_path)) {
        char why[320];
        if (ld_report_write_why(ld_cfg.report_path, why, sizeof why) != 0 && ld_cuda_used())
            LD_WARN(REPORT, "cannot write report %.*s%s: %s", 300, ld_cfg.report_path,
                            strlen(ld_cfg.report_path) > 300 ? "..." : "", why);
    }
    if (ld_backend_mlopart.shutdown) ld_backend_mlopart.shutdown(0);
}
