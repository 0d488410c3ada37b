/* ptx_print.c — print shim/truth_ptx.h's marker with %locality_domain_id (PTX ISA 9.5) swapped
 * for %smid and .version 9.5 for the toolkit's own, so that the 13.0 ptxas checks the rest of
 * its text (tests/compat/compat.mk). */
#include <stdio.h>
#include <string.h>

#include "shim/truth_ptx.h"

int main(int argc, char **argv) {
    const char *version = argc > 1 ? argv[1] : "9.0";
    const char *p = ld_truth_ldid_ptx;
    for (;;) {
        const char *a = strstr(p, "%locality_domain_id"), *v = strstr(p, ".version 9.5");
        const char *next = a && (!v || a < v) ? a : v;
        if (!next) break;
        fwrite(p, 1, (size_t)(next - p), stdout);
        if (next == a) { fputs("%smid", stdout); p = a + strlen("%locality_domain_id"); }
        else { printf(".version %s", version); p = v + strlen(".version 9.5"); }
    }
    fputs(p, stdout);
    return 0;
}
