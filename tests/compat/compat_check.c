/* compat_check.c — shim/cuda_compat.h against a real cuda.h (tests/compat/compat.mk).
 *
 * Built three ways: against the CUDA 13.5 header with LDSHIM_COMPAT_OWN (the shim's own
 * values, asserted equal to the header's names: the case of a 13.0 toolkit), against the 13.5
 * header as is (the shim then takes the header's names: they must still compile and mean the
 * same), and against the toolkit's header (the CUdevResource layout the shim reads through
 * ld_sm_resource_t is the one 13.5 has). Everything is a static assertion; the program also
 * checks the location id's byte order at run time and prints one line. */
#include "shim/cuda_compat.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define SAME_FIELD(A, B, f) \
    _Static_assert(offsetof(A, f) == offsetof(B, f) && sizeof(((A *)0)->f) == sizeof(((B *)0)->f), #f)

/* CUdevResource: 13.0 and 13.5 both 144 bytes with the SM view at byte 96 (13.5 moved the
 * union's tail into a nextResource pointer, keeping the size). */
_Static_assert(sizeof(CUdevResource) == 144, "CUdevResource size");
_Static_assert(offsetof(CUdevResource, sm) == 96, "CUdevResource.sm offset");
_Static_assert(sizeof(ld_sm_resource_t) <= sizeof(CUdevResource) - offsetof(CUdevResource, sm) - 8,
               "ld_sm_resource_t fits the SM view on every ABI");

#if CUDA_VERSION >= 13040
/* The header names, whether cuda_compat.h took them or its own. */
_Static_assert((int)LD_CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_COUNT == (int)CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_COUNT, "149");
_Static_assert((int)LD_CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_MULTIPROCESSOR_COUNT ==
               (int)CU_DEVICE_ATTRIBUTE_LOCALITY_DOMAIN_MULTIPROCESSOR_COUNT, "157");
_Static_assert((int)LD_CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN == (int)CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN, "6");
_Static_assert((int)LD_CU_POINTER_ATTRIBUTE_LOCALITY_DOMAIN_ORDINAL == (int)CU_POINTER_ATTRIBUTE_LOCALITY_DOMAIN_ORDINAL, "22");
_Static_assert((int)LD_CU_MEMPOOL_ATTR_LOCALITY_DOMAIN_ID == (int)CU_MEMPOOL_ATTR_LOCALITY_DOMAIN_ID, "mempool attr");
_Static_assert(LD_CU_DEV_SM_RESOURCE_GROUP_BACKFILL == (unsigned)CU_DEV_SM_RESOURCE_GROUP_BACKFILL, "backfill");
_Static_assert(LD_CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_ID == (unsigned)CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_ID, "ld id");

/* CU_DEV_SM_RESOURCE_GROUP_PARAMS: 5 words and 11 reserved, field by field. */
_Static_assert(sizeof(ld_sm_group_params_t) == sizeof(CU_DEV_SM_RESOURCE_GROUP_PARAMS), "group params size");
SAME_FIELD(ld_sm_group_params_t, CU_DEV_SM_RESOURCE_GROUP_PARAMS, smCount);
SAME_FIELD(ld_sm_group_params_t, CU_DEV_SM_RESOURCE_GROUP_PARAMS, coscheduledSmCount);
SAME_FIELD(ld_sm_group_params_t, CU_DEV_SM_RESOURCE_GROUP_PARAMS, preferredCoscheduledSmCount);
SAME_FIELD(ld_sm_group_params_t, CU_DEV_SM_RESOURCE_GROUP_PARAMS, flags);
SAME_FIELD(ld_sm_group_params_t, CU_DEV_SM_RESOURCE_GROUP_PARAMS, localityDomainId);
SAME_FIELD(ld_sm_group_params_t, CU_DEV_SM_RESOURCE_GROUP_PARAMS, reserved);

/* CUdevSmResource (13.4+) read through ld_sm_resource_t. */
_Static_assert(sizeof(ld_sm_resource_t) == sizeof(CUdevSmResource), "sm resource size");
SAME_FIELD(ld_sm_resource_t, CUdevSmResource, smCount);
SAME_FIELD(ld_sm_resource_t, CUdevSmResource, minSmPartitionSize);
SAME_FIELD(ld_sm_resource_t, CUdevSmResource, smCoscheduledAlignment);
SAME_FIELD(ld_sm_resource_t, CUdevSmResource, flags);
SAME_FIELD(ld_sm_resource_t, CUdevSmResource, localityDomainId);

/* The split's prototype, with the shim's parameter block in the header's place. */
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuDevSmResourceSplit),
                                            CUresult (*)(CUdevResource *, unsigned int, const CUdevResource *,
                                                         CUdevResource *, unsigned int,
                                                         CU_DEV_SM_RESOURCE_GROUP_PARAMS *)),
               "cuDevSmResourceSplit prototype");
_Static_assert(__builtin_types_compatible_p(ld_cuDevSmResourceSplit_fn,
                                            CUresult (*)(CUdevResource *, unsigned int, const CUdevResource *,
                                                         CUdevResource *, unsigned int, ld_sm_group_params_t *)),
               "ld_cuDevSmResourceSplit_fn");

/* The location id: {unsigned char deviceId; unsigned char localityDomainId;} over int id. */
_Static_assert(offsetof(CUmemLocation, localized.deviceId) == offsetof(CUmemLocation, id), "deviceId is id's byte 0");
_Static_assert(offsetof(CUmemLocation, localized.localityDomainId) == offsetof(CUmemLocation, id) + 1,
               "localityDomainId is id's byte 1");
#endif

#if CUDA_VERSION >= 13050
_Static_assert(LD_CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_SUPPLEMENTAL_SMS ==
               (unsigned)CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_SUPPLEMENTAL_SMS, "supplemental");
_Static_assert(LD_CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_ID_ANY == CU_DEV_SM_RESOURCE_GROUP_LOCALITY_DOMAIN_ID_ANY, "any");
#endif

int main(void) {
#if CUDA_VERSION >= 13040
    /* Byte order: what the shim writes as an int the driver reads as the two bytes. */
    CUmemLocation l;
    memset(&l, 0, sizeof l);
    l.id = LD_LOCALITY_LOCATION_ID(3, 1);
    if (l.localized.deviceId != 3 || l.localized.localityDomainId != 1) {
        printf("compat: LD_LOCALITY_LOCATION_ID(3, 1) reads as device %u domain %u\n", l.localized.deviceId,
               l.localized.localityDomainId);
        return 1;
    }
#endif
    printf("compat: cuda.h %d agrees with shim/cuda_compat.h%s\n", CUDA_VERSION,
#ifdef LDSHIM_COMPAT_OWN
           " (the shim's own values)"
#else
           ""
#endif
    );
    return 0;
}
