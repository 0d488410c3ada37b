/* fuzz_cache.c — libFuzzer target for the topology cache reader (shim/probe_cache.c).
 *
 * Input: byte 0, bit 0 set: the harness appends a correct "checksum" line (so the mutations
 * reach the field parser and the map checks, not only the checksum); bit 1: the file is
 * made group-writable (must be refused). The rest is the file's text, written where
 * ld_cache_load looks for the fixed key below. Checks: a hit has maps within the domain
 * count, keeps TPCs whole and gives every domain an SM when it says valid, its balanced
 * map is what ld_balance_map derives, its verdict holds no control character; any other
 * answer comes with a one-line reason; nothing is read past the cap. Seeds:
 * tests/fuzz/cache_corpus (an intact entry without its checksum line). */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shim/probe_cache.h"
#include "shim/probe_classify.h"

static char g_dir[64], g_path[256];
static ld_cache_key_t g_key;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    snprintf(g_dir, sizeof g_dir, "/tmp/ldshim-fuzz-cache-XXXXXX");
    if (!mkdtemp(g_dir)) abort();
    memset(&g_key, 0, sizeof g_key);
    snprintf(g_key.uuid, sizeof g_key.uuid, "GPU-fa6ec0da-1300-4900-8a17-000000000000");
    g_key.driver_version = 13000;
    g_key.num_sms = 132;
    g_key.num_domains = 2;
    if (ld_cache_path(g_dir, &g_key, g_path, sizeof g_path)) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int add_sum = data[0] & 1, open_mode = data[0] & 2;
    const char *body = (const char *)data + 1;
    size_t n = size - 1;
    int fd = open(g_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) abort();
    if (n && write(fd, body, n) != (ssize_t)n) abort();
    if (add_sum) {
        char line[40];
        int k = snprintf(line, sizeof line, "checksum %016llx\n", (unsigned long long)ld_cache_checksum(body, n));
        if (write(fd, line, (size_t)k) != k) abort();
    }
    close(fd);
    chmod(g_path, open_mode ? 0660 : 0600);

    ld_probe_result_t r;
    memset(&r, 0, sizeof r);
    char why[256] = "";
    int rc = ld_cache_load(g_dir, &g_key, &r, why, sizeof why);
    if (rc == LD_CACHE_HIT) {
        if (open_mode) abort();                                 /* writable by others: never trusted */
        if (r.num_sms != g_key.num_sms || r.num_domains != g_key.num_domains) abort();
        for (uint32_t s = 0; s < r.num_sms; s++)
            if (r.physical[s] >= r.num_domains || r.balanced[s] >= r.num_domains) abort();
        if (r.valid) {
            if (ld_first_split_tpc(r.physical, r.num_sms) >= 0) abort();
            uint32_t counts[LDSHIM_MAX_DOMAINS];
            ld_count_domains(r.physical, r.num_sms, r.num_domains, counts);
            for (uint32_t d = 0; d < r.num_domains; d++)
                if (!counts[d]) abort();
        }
        uint8_t bal[LDSHIM_MAX_SMS];
        int moved = ld_balance_map(r.physical, r.num_sms, r.num_domains, bal);
        if (memcmp(bal, r.balanced, r.num_sms) != 0 || moved != r.tpcs_moved) abort();
        if (!memchr(r.verdict, 0, sizeof r.verdict)) abort();
        for (const char *c = r.verdict; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f) abort();
    } else {
        if (rc != LD_CACHE_BAD && rc != LD_CACHE_STALE && rc != LD_CACHE_MISS) abort();
        if (!why[0] || strchr(why, '\n')) abort();
    }
    /* The shared reader alone, with the cap the lead's SM-group cache uses too. */
    char buf[4097];
    size_t len = 9999;
    rc = ld_cache_read_file(g_path, buf, 4096, &len, why, sizeof why);
    if (rc == LD_CACHE_HIT && (len > 4096 || buf[len] != 0 || open_mode)) abort();
    return 0;
}
