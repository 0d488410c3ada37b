/* installed_api.c — a program built against the *installed* headers and libraries only
 * (include <ldshim.h>, link through pkg-config; tests/pkg/test_install.py). It never
 * touches CUDA: loading either library must print nothing and initialize nothing. */
#include <ldmoe.h>
#include <ldshim.h>
#include <stdio.h>

int main(void) {
    ldshim_stats_t st;
    ldshim_topology_t topo;
    ldshim_get_stats(&st);
    printf("LDSHIM_VERSION_STRING=%s\n", LDSHIM_VERSION_STRING);
    printf("LDMOE_VERSION_STRING=%s\n", LDMOE_VERSION_STRING);
    printf("ldshim_version=%s\n", ldshim_version());
    printf("ldmoe_version=%s\n", ldmoe_version());
    printf("tagged_allocs=%llu\n", (unsigned long long)st.tagged_allocs);
    printf("get_topology=%d\n", ldshim_get_topology(0, &topo, sizeof topo));
    printf("packed_bytes=%zu\n", ldmoe_packed_bytes(8, 4096, 2048, 2));
    return 0;
}
