/* t_place.c — every allocation api once, and where the fake driver says its memory landed
 * (tests/fake/cases_place.py). Driver API, linked with -lcuda; runs with and without the shim.
 *
 *   t_place all SIZE      cuMemAlloc, cuMemCreate (mapped), cuMemAllocAsync on the default
 *                         pool, cuMemAllocFromPoolAsync on a pool of the program's own,
 *                         cuMemAllocPitch (rows of 4096 bytes), cuMemAllocManaged; each written,
 *                         read back and freed
 *
 * Output: <api>_domain=<the fake's domain of the memory: -1 the device as a whole, or the
 * domains of a split range joined by ','>, <api>_shim=<1 if the shim owns the range>.
 */
#include "tests/fake/t_common.h"
#include "tests/fake/fake_api.h"
#include "shim/cuda_compat.h"

static void show(const char *tag, CUdeviceptr p, size_t size) {
    ldshim_ptr_info_t in;
    if (t_is_shim(p, &in)) {
        printf("%s_shim=1\n%s_domain=", tag, tag);
        for (int d = 0; d < in.num_domains; d++)
            printf("%s%d", d ? "," : "", t_fake.domain_of((void *)(uintptr_t)(p + (uint64_t)d * in.slice)));
        printf("\n");
    } else {
        printf("%s_shim=0\n%s_domain=%d\n", tag, tag, t_fake.domain_of((void *)(uintptr_t)p));
    }
    t_fill_check(p, size, 3);
}

static int case_all(size_t size) {
    CHECK_RC(cuInit(0), CUDA_SUCCESS);
    CUcontext ctx;
    CHECK_RC(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    CHECK_RC(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    t_fake_init();

    CUdeviceptr a;
    CHECK_RC(cuMemAlloc_v2(&a, size), CUDA_SUCCESS);
    show("alloc", a, size);
    CHECK_RC(cuMemFree_v2(a), CUDA_SUCCESS);

    /* The program's own VMM handle, mapped and made accessible. */
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h;
    CHECK_RC(cuMemCreate(&h, size, &prop, 0), CUDA_SUCCESS);
    CUdeviceptr v;
    CHECK_RC(cuMemAddressReserve(&v, size, 0, 0, 0), CUDA_SUCCESS);
    CHECK_RC(cuMemMap(v, size, 0, h, 0), CUDA_SUCCESS);
    CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CHECK_RC(cuMemSetAccess(v, size, &acc, 1), CUDA_SUCCESS);
    show("vmm", v, size);
    CHECK_RC(cuMemUnmap(v, size), CUDA_SUCCESS);
    CHECK_RC(cuMemRelease(h), CUDA_SUCCESS);
    CHECK_RC(cuMemAddressFree(v, size), CUDA_SUCCESS);

    /* Stream-ordered: the default pool, then a pool of the program's own. */
    CUstream s;
    CHECK_RC(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUdeviceptr q;
    CHECK_RC(cuMemAllocAsync(&q, size, s), CUDA_SUCCESS);
    CHECK_RC(cuStreamSynchronize(s), CUDA_SUCCESS);
    show("async", q, size);
    CHECK_RC(cuMemFreeAsync(q, s), CUDA_SUCCESS);
    CUmemPoolProps pp;
    memset(&pp, 0, sizeof pp);
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pp.location.id = 0;
    CUmemoryPool pool;
    CHECK_RC(cuMemPoolCreate(&pool, &pp), CUDA_SUCCESS);
    CHECK_RC(cuMemAllocFromPoolAsync(&q, size, pool, s), CUDA_SUCCESS);
    CHECK_RC(cuStreamSynchronize(s), CUDA_SUCCESS);
    show("pool", q, size);
    CHECK_RC(cuMemFreeAsync(q, s), CUDA_SUCCESS);
    CHECK_RC(cuMemPoolDestroy(pool), CUDA_SUCCESS);
    CHECK_RC(cuStreamDestroy_v2(s), CUDA_SUCCESS);

    /* Pitched: rows of 4096 bytes, as many as make `size`. */
    CUdeviceptr pt;
    size_t pitch = 0;
    CHECK_RC(cuMemAllocPitch_v2(&pt, &pitch, 4096, size / 4096, 4), CUDA_SUCCESS);
    CHECK(pitch >= 4096 && pitch % 512 == 0);
    printf("pitch=%zu\n", pitch);
    show("pitch", pt, pitch * (size / 4096));
    CHECK_RC(cuMemFree_v2(pt), CUDA_SUCCESS);

    CUdeviceptr m;
    CHECK_RC(cuMemAllocManaged(&m, size, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    show("managed", m, size);
    CHECK_RC(cuMemFree_v2(m), CUDA_SUCCESS);

    CHECK_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    return 0;
}

int main(int argc, char **argv) {
    t_prog = "t_place";
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && !strcmp(argv[1], "all")) return case_all(t_size(argv[2]));
    fprintf(stderr, "usage: t_place all SIZE\n");
    return 2;
}
