/* cuda_compat.h — include cuda.h with every versioned name visible, plus the CUDA 13.4
 * locality-domain names the 13.0 headers lack (detected at run time, never assumed). */
#ifndef LDSHIM_CUDA_COMPAT_H
#define LDSHIM_CUDA_COMPAT_H

/* With this defined cuda.h does not #define cuMemAlloc -> cuMemAlloc_v2 etc., so the shim
 * can name (and export) each ABI variant exactly. */
#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <cuda.h>

/* CUDA 13.4: CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_COUNT and the location type that places a
 * physical allocation in one locality domain (id = device | domain << 8). */
#define LD_CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_COUNT ((CUdevice_attribute)149)
#define LD_CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN ((CUmemLocationType)6)
#define LD_LOCALITY_LOCATION_ID(dev, domain) ((int)((dev) | ((domain) << 8)))

/* CUDA 13.1: cuDevSmResourceSplit takes one parameter block per group; 13.4 adds grouping
 * by locality domain (localityDomainId with CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_ID).
 * Layout of CU_DEV_SM_RESOURCE_GROUP_PARAMS: 16 words, zeroed where unused. */
typedef struct {
    unsigned int smCount;
    unsigned int coscheduledSmCount;
    unsigned int preferredCoscheduledSmCount;
    unsigned int flags;
    unsigned int localityDomainId;
    unsigned int reserved[11];
} ld_sm_group_params_t;
#define LD_CU_DEV_SM_RESOURCE_GROUP_BACKFILL 0x1u
#define LD_CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_ID 0x2u
typedef CUresult (*ld_cuDevSmResourceSplit_fn)(CUdevResource *result, unsigned int nbGroups, const CUdevResource *input,
                                               CUdevResource *remainder, unsigned int flags,
                                               ld_sm_group_params_t *groupParams);

#endif
