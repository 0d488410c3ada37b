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

/* The locality-domain names, spelled LD_*: the toolkit's own where its cuda.h has them
 * (13.4: CUDA_VERSION 13040; 13.5 for the last two), else the values of the 13.4/13.5
 * headers, which tests/compat/ checks against the 13.5 header from PyPI. LDSHIM_COMPAT_OWN
 * forces the shim's own values (that test). */
#if CUDA_VERSION >= 13040 && !defined(LDSHIM_COMPAT_OWN)
#define LD_CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_COUNT CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_COUNT
#define LD_CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_MULTIPROCESSOR_COUNT CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_MULTIPROCESSOR_COUNT
#define LD_CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN
#define LD_CU_POINTER_ATTRIBUTE_LOCALITY_DOMAIN_ORDINAL CU_POINTER_ATTRIBUTE_LOCALITY_DOMAIN_ORDINAL
#define LD_CU_MEMPOOL_ATTR_LOCALITY_DOMAIN_ID CU_MEMPOOL_ATTR_LOCALITY_DOMAIN_ID
#define LD_CU_DEV_SM_RESOURCE_GROUP_BACKFILL ((unsigned)CU_DEV_SM_RESOURCE_GROUP_BACKFILL)
#define LD_CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_ID ((unsigned)CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_ID)
typedef CU_DEV_SM_RESOURCE_GROUP_PARAMS ld_sm_group_params_t;
#else
/* CUDA 13.4: the attribute of the domain count, the SMs of each domain, the location type
 * that places a physical allocation in one domain (id = device | domain << 8, i.e. the
 * header's {unsigned char deviceId, localityDomainId}), the pointer attribute that says
 * which domain a pointer's memory is homed in (-1: not localized), a pool's domain. */
#define LD_CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_COUNT ((CUdevice_attribute)149)
#define LD_CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_MULTIPROCESSOR_COUNT ((CUdevice_attribute)157)
#define LD_CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN ((CUmemLocationType)6)
#define LD_CU_POINTER_ATTRIBUTE_LOCALITY_DOMAIN_ORDINAL ((CUpointer_attribute)22)
#define LD_CU_MEMPOOL_ATTR_LOCALITY_DOMAIN_ID ((CUmemPool_attribute)15)
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
#endif
#define LD_LOCALITY_LOCATION_ID(dev, domain) ((int)((dev) | ((domain) << 8)))

/* CUDA 13.5: a domain group may take SMs beyond the domain's multiprocessor count; any
 * domain (localityDomainId) of the input. */
#if CUDA_VERSION >= 13050 && !defined(LDSHIM_COMPAT_OWN)
#define LD_CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_SUPPLEMENTAL_SMS ((unsigned)CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_SUPPLEMENTAL_SMS)
#define LD_CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_ID_ANY CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_ID_ANY
#else
#define LD_CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_SUPPLEMENTAL_SMS 0x4u
#define LD_CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_ID_ANY (~0u)
#endif

/* CUDA 13.4's CUdevSmResource grew two words (flags, localityDomainId) inside the same
 * CUdevResource union: read a split group's domain through this view of res->sm. */
typedef struct {
    unsigned int smCount;
    unsigned int minSmPartitionSize;
    unsigned int smCoscheduledAlignment;
    unsigned int flags;
    unsigned int localityDomainId;
} ld_sm_resource_t;

typedef CUresult (*ld_cuDevSmResourceSplit_fn)(CUdevResource *result, unsigned int nbGroups, const CUdevResource *input,
                                               CUdevResource *remainder, unsigned int flags,
                                               ld_sm_group_params_t *groupParams);

#endif
