/* fuzz_classify.c — libFuzzer target for the `ldshim-probe --classify` input: the parser of
 * LDSHIM_PROBE_DUMP matrices (ld_dump_parse, shim/probe_classify.c) and what the tool does
 * with an accepted matrix (classify, balance, count).
 *
 * Checks: an accepted matrix has 1..LDSHIM_MAX_SMS SMs, at most LDSHIM_MAX_DOMAINS domains,
 * 1..LD_DUMP_MAX_COLS values a row, all finite; the classifiers and the balancer never write
 * past their buffers (ASan) whatever they say; a refusal comes with a one-line reason. The
 * input is not NUL-terminated (the parser must not read past it). Seeds: tests/fuzz/
 * classify_corpus (a clustered and an anchored dump, and the issue 41 reproductions). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shim/probe_classify.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size ? size : 1);   /* exactly size bytes: no NUL after them */
    if (!text) return 0;
    memcpy(text, data, size);
    ld_dump_t m;
    char why[200];
    int rc = ld_dump_parse(text, size, &m, why, sizeof why);
    free(text);
    if (rc != 0) {
        if (!why[0] || strchr(why, '\n')) abort();
        return 0;
    }
    if (m.nsms == 0 || m.nsms > LDSHIM_MAX_SMS || m.ndomains > LDSHIM_MAX_DOMAINS || m.cols == 0 ||
        m.cols > LD_DUMP_MAX_COLS)
        abort();
    size_t n = (size_t)(m.ndomains ? m.ndomains : 1) * m.nsms * m.cols;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(m.v[i])) abort();
    uint8_t map[LDSHIM_MAX_SMS] = {0}, bal[LDSHIM_MAX_SMS];
    ld_classify_t c;
    uint32_t nd = m.ndomains ? m.ndomains : 2;
    if (m.ndomains) ld_classify_anchored(m.v, m.ndomains, m.nsms, m.cols, map, &c);
    else ld_classify_clustered(m.v, m.nsms, m.cols, nd, NULL, map, &c);
    for (uint32_t s = 0; s < m.nsms; s++)
        if (map[s] >= nd) map[s] = 0;   /* a rejected map may be partial: as the tool, count it anyway */
    ld_balance_map(map, m.nsms, nd, bal);
    uint32_t counts[LDSHIM_MAX_DOMAINS];
    ld_count_domains(bal, m.nsms, nd, counts);
    ld_dump_free(&m);
    return 0;
}
