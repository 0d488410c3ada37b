// topo_kernel.cuh — the kernel that reads %smid and the published map, shared by the
// runtime-loaded program (topo_check.cu) and the driver-loaded fatbin (topo_module.cu).
// Each translation unit defines its own `ldshim_topology` symbol, as a user module would.
#pragma once
#include <stdint.h>
#include "kernels/ldshim_topology.h"

LDSHIM_DEFINE_TOPOLOGY();

struct topo_rec {
    unsigned count;      // CTAs that ran on this SM (over all launches)
    unsigned entry;      // ldshim_topology.sm_domain[smid] as the SM read it
    unsigned helper;     // ldshim_sm_domain(): the entry, or the even map without the shim
    unsigned magic, version, num_sms, num_domains, flags;
};

// One CTA per SM (the host gives each CTA the per-block maximum of shared memory).
extern "C" __global__ void topo_read(topo_rec *out, unsigned max_sms) {
    extern __shared__ unsigned char smem[];
    if (threadIdx.x != 0) return;
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    if (smid >= max_sms) return;
    smem[0] = 1;
    topo_rec *r = &out[smid];
    atomicAdd(&r->count, 1u);
    r->entry = smid < LDSHIM_MAX_SMS ? ldshim_topology.sm_domain[smid] : 255u;
    r->helper = ldshim_sm_domain(&ldshim_topology, 2);
    r->magic = ldshim_topology.magic;
    r->version = ldshim_topology.version;
    r->num_sms = ldshim_topology.num_sms;
    r->num_domains = ldshim_topology.num_domains;
    r->flags = ldshim_topology.flags;
}
