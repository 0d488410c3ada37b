/* fake_green.c — green contexts of the fake driver: SM resources, splits, descriptors,
 * green contexts and their streams, and the test hooks that say which SMs a launch used.
 *
 * Each SM has a locality domain ("side"): $FAKE_CUDA_SM_SIDES (one digit per SM) or TPC t ->
 * t mod 2, the even map the shim's probe falls back to on the fake. cuDevSmResourceSplitByCount
 * forms groups of the requested size (rounded up to 8, the Hopper alignment, unless
 * co-scheduling is ignored: then 2) from the SMs of side 0 in id order, then side 1, ...
 * ($FAKE_CUDA_GROUPS_PER_SIDE="7,8" caps the groups per side, like the H200's 7 + 8 groups of
 * 8; FAKE_CUDA_SPLIT=straddle forms them in SM-id order across the sides instead, so that
 * none lies in one side); the SMs left over are the remainder. cuDevSmResourceSplit (CUDA
 * 13.1+, locality-domain groups of 13.4) is answered when FAKE_CUDA_DOMAINS >= 2.
 *
 * A resource carries its SM mask, device and split in the struct's internal bytes; a
 * descriptor is the union of its resources (all from one split). Green contexts retain the
 * primary context and count as live objects in the exit report. A destroyed green context
 * stays in memory (freed at exit) with FK_CTX_DEAD in its CUcontext, so a thread that still
 * has it current, or a stream created in it, gets CUDA_ERROR_CONTEXT_IS_DESTROYED instead
 * of the fake reading freed memory. */
#include "tests/fake/fake_internal.h"
#include "tests/fake/fake_api.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define FK_RES_MAGIC 0x5E50A7CEu
#define FK_DESC_MAGIC 0xDE5CDE5Cu

typedef struct {               /* lives in CUdevResource._internal_padding (92 bytes) */
    uint32_t magic;
    int32_t device;
    uint32_t split;            /* split instance; 0: the whole device (cuDeviceGetDevResource) */
    uint32_t coscheduled;      /* cluster size its SMs allow */
    uint64_t sms[FK_MASK_WORDS];
} fk_res_t;
_Static_assert(sizeof(fk_res_t) <= sizeof(((CUdevResource *)0)->_internal_padding), "fits");

typedef struct fk_desc {
    uint32_t magic;
    int device;
    uint32_t coscheduled;
    uint64_t sms[FK_MASK_WORDS];
    struct fk_desc *next;
} fk_desc_t;

static atomic_uint fk_split_seq;
static atomic_int fk_greens;
static fk_desc_t *fk_descs;    /* freed at exit (the real driver owns descriptors too) */
typedef struct fk_dead { struct fk_dead *next; fk_green_t *g; } fk_dead_t;
static fk_dead_t *fk_dead_greens;   /* destroyed green contexts, freed at exit */

int fk_green_live(void) { return atomic_load(&fk_greens); }

void fk_all_sms(uint64_t out[FK_MASK_WORDS]) {
    memset(out, 0, FK_MASK_WORDS * sizeof out[0]);
    for (int s = 0; s < fk.nsms && s < FK_MAX_SMS; s++) out[s >> 6] |= 1ull << (s & 63);
}

static int popcount(const uint64_t *m) {
    int n = 0;
    for (int i = 0; i < FK_MASK_WORDS; i++) n += __builtin_popcountll(m[i]);
    return n;
}

static void res_fill(CUdevResource *r, int dev, uint32_t split, uint32_t cos, const uint64_t *sms) {
    memset(r, 0, sizeof *r);
    r->type = CU_DEV_RESOURCE_TYPE_SM;
    fk_res_t x = { FK_RES_MAGIC, dev, split, cos, {0} };
    memcpy(x.sms, sms, sizeof x.sms);
    memcpy(r->_internal_padding, &x, sizeof x);
    r->sm.smCount = (unsigned)popcount(sms);
    r->sm.minSmPartitionSize = 8;
    r->sm.smCoscheduledAlignment = cos;
}

static int res_get(const CUdevResource *r, fk_res_t *out) {
    if (!r || r->type != CU_DEV_RESOURCE_TYPE_SM) return -1;
    memcpy(out, r->_internal_padding, sizeof *out);
    return out->magic == FK_RES_MAGIC ? 0 : -1;
}

FAKE_API CUresult cuDeviceGetDevResource(CUdevice dev, CUdevResource *res, CUdevResourceType type) {
    FK_ENTER("cuDeviceGetDevResource", CUDA_ERROR_INVALID_VALUE);
    if (!res) return CUDA_ERROR_INVALID_VALUE;
    if (!fk_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    uint64_t all[FK_MASK_WORDS];
    fk_all_sms(all);
    res_fill(res, dev, 0, 8, all);
    return CUDA_SUCCESS;
}

static CUresult ctx_resource(fk_ctx_t *c, CUdevResource *res, CUdevResourceType type) {
    if (!res) return CUDA_ERROR_INVALID_VALUE;
    if (!fk_valid_ctx(c)) return CUDA_ERROR_INVALID_CONTEXT;
    if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    res_fill(res, c->device, 0, 8, c->sms);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxGetDevResource(CUcontext ctx, CUdevResource *res, CUdevResourceType type) {
    FK_ENTER("cuCtxGetDevResource", CUDA_ERROR_INVALID_VALUE);
    return ctx_resource((fk_ctx_t *)ctx, res, type);
}

static fk_green_t *green_of(CUgreenCtx g) {
    fk_green_t *x = (fk_green_t *)g;
    return x && x->magic == FK_GREEN_MAGIC ? x : NULL;
}

FAKE_API CUresult cuGreenCtxGetDevResource(CUgreenCtx g, CUdevResource *res, CUdevResourceType type) {
    FK_ENTER("cuGreenCtxGetDevResource", CUDA_ERROR_INVALID_VALUE);
    fk_green_t *x = green_of(g);
    if (!x) return CUDA_ERROR_INVALID_CONTEXT;
    return ctx_resource(&x->ctx, res, type);
}

/* SMs of `input` in the order groups are formed from. */
static int split_order(const uint64_t *in, int *order) {
    int n = 0;
    if (fk.split_straddle) {
        for (int s = 0; s < fk.nsms; s++)
            if ((in[s >> 6] >> (s & 63)) & 1) order[n++] = s;
        return n;
    }
    for (int side = 0; side < fk.nsides; side++)
        for (int s = 0; s < fk.nsms; s++)
            if (((in[s >> 6] >> (s & 63)) & 1) && fk.side[s] == side) order[n++] = s;
    return n;
}

FAKE_API CUresult cuDevSmResourceSplitByCount(CUdevResource *result, unsigned int *nbGroups, const CUdevResource *input,
                                             CUdevResource *remaining, unsigned int useFlags, unsigned int minCount) {
    FK_ENTER("cuDevSmResourceSplitByCount", CUDA_ERROR_INVALID_VALUE);
    fk_res_t in;
    if (!nbGroups || res_get(input, &in) != 0) return CUDA_ERROR_INVALID_VALUE;
    if (useFlags & ~(unsigned)(CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING |
                               CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE))
        return CUDA_ERROR_INVALID_VALUE;
    int fine = (useFlags & CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING) != 0;
    unsigned align = fine ? 2u : 8u;
    int total = popcount(in.sms);
    if (minCount > (unsigned)total) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    unsigned size = minCount < align ? align : (minCount + align - 1) / align * align;
    int order[FK_MAX_SMS];
    int n = split_order(in.sms, order);
    uint64_t groups[FK_MAX_SMS][FK_MASK_WORDS];
    int ng = 0, per_side[8] = {0};
    uint64_t used[FK_MASK_WORDS] = {0};
    for (int i = 0; i + (int)size <= n;) {
        /* A group takes `size` consecutive SMs of the order; without straddling it may not
         * cross a side, so a side's leftovers go to the remainder. */
        int side = fk.side[order[i]], ok = 1;
        if (!fk.split_straddle)
            for (unsigned k = 0; k < size; k++) ok &= fk.side[order[i + (int)k]] == side;
        if (!ok) { while (i < n && fk.side[order[i]] == side) i++; continue; }
        if (!fk.split_straddle && fk.groups_cap[side] && per_side[side] >= fk.groups_cap[side]) { i++; continue; }
        memset(groups[ng], 0, sizeof groups[ng]);
        for (unsigned k = 0; k < size; k++) {
            int s = order[i + (int)k];
            groups[ng][s >> 6] |= 1ull << (s & 63);
            used[s >> 6] |= 1ull << (s & 63);
        }
        per_side[side]++;
        ng++;
        i += (int)size;
    }
    if (!result) { *nbGroups = (unsigned)ng; return CUDA_SUCCESS; }
    if (*nbGroups < (unsigned)ng) ng = (int)*nbGroups;
    uint32_t id = atomic_fetch_add(&fk_split_seq, 1) + 1;
    for (int g = 0; g < ng; g++) res_fill(&result[g], in.device, id, align, groups[g]);
    /* Groups not handed out (nbGroups too small) join the remainder. */
    memset(used, 0, sizeof used);
    for (int g = 0; g < ng; g++)
        for (int w = 0; w < FK_MASK_WORDS; w++) used[w] |= groups[g][w];
    if (remaining) {
        uint64_t rem[FK_MASK_WORDS];
        for (int w = 0; w < FK_MASK_WORDS; w++) rem[w] = in.sms[w] & ~used[w];
        res_fill(remaining, in.device, id, 1, rem);
        if (!popcount(rem)) remaining->type = CU_DEV_RESOURCE_TYPE_INVALID;
    }
    *nbGroups = (unsigned)ng;
    return CUDA_SUCCESS;
}

/* CUDA 13.1+ (parameters per group), answering locality-domain groups (13.4) only. */
FAKE_API CUresult cuDevSmResourceSplit(CUdevResource *result, unsigned int nbGroups, const CUdevResource *input,
                                      CUdevResource *remainder, unsigned int flags, fk_group_params_t *params) {
    FK_ENTER("cuDevSmResourceSplit", CUDA_ERROR_INVALID_VALUE);
    fk_res_t in;
    if (!result || !params || !nbGroups || flags || res_get(input, &in) != 0) return CUDA_ERROR_INVALID_VALUE;
    if (fk.ndomains < 2) return CUDA_ERROR_NOT_SUPPORTED;
    uint32_t id = atomic_fetch_add(&fk_split_seq, 1) + 1;
    uint64_t used[FK_MASK_WORDS] = {0};
    uint64_t gm[8][FK_MASK_WORDS];
    if (nbGroups > 8) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned g = 0; g < nbGroups; g++) {
        fk_group_params_t *p = &params[g];
        if (!(p->flags & 0x2u) || p->localityDomainId >= (unsigned)fk.ndomains) return CUDA_ERROR_INVALID_VALUE;
        unsigned cos = p->coscheduledSmCount ? p->coscheduledSmCount : 8u;
        if (cos % 2) return CUDA_ERROR_INVALID_VALUE;
        memset(gm[g], 0, sizeof gm[g]);
        int have = 0, avail = 0;
        for (int s = 0; s < fk.nsms; s++)
            avail += fk.side[s] == (int)p->localityDomainId && ((in.sms[s >> 6] >> (s & 63)) & 1) &&
                     !((used[s >> 6] >> (s & 63)) & 1);
        int want = p->smCount ? (int)p->smCount : avail - avail % (int)cos;
        if (p->smCount && !(p->flags & 0x1u) && want > avail) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
        /* The domain's SMs first, then (backfill) the others'. */
        for (int pass = 0; pass < 2 && have < want; pass++)
            for (int s = 0; s < fk.nsms && have < want; s++) {
                int mine = fk.side[s] == (int)p->localityDomainId;
                if ((pass == 0) != mine || !((in.sms[s >> 6] >> (s & 63)) & 1) || ((used[s >> 6] >> (s & 63)) & 1))
                    continue;
                if (pass == 1 && !(p->flags & 0x1u)) break;
                gm[g][s >> 6] |= 1ull << (s & 63);
                used[s >> 6] |= 1ull << (s & 63);
                have++;
            }
        res_fill(&result[g], in.device, id, cos, gm[g]);
    }
    if (remainder) {
        uint64_t rem[FK_MASK_WORDS];
        for (int w = 0; w < FK_MASK_WORDS; w++) rem[w] = in.sms[w] & ~used[w];
        res_fill(remainder, in.device, id, 1, rem);
        if (!popcount(rem)) remainder->type = CU_DEV_RESOURCE_TYPE_INVALID;
    }
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuDevResourceGenerateDesc(CUdevResourceDesc *desc, CUdevResource *res, unsigned int n) {
    FK_ENTER("cuDevResourceGenerateDesc", CUDA_ERROR_INVALID_VALUE);
    if (!desc || !res || !n) return CUDA_ERROR_INVALID_VALUE;
    fk_desc_t *d = calloc(1, sizeof *d);
    if (!d) return CUDA_ERROR_OUT_OF_MEMORY;
    d->magic = FK_DESC_MAGIC;
    fk_res_t first;
    for (unsigned i = 0; i < n; i++) {
        fk_res_t r;
        if (res_get(&res[i], &r) != 0) { free(d); return CUDA_ERROR_INVALID_RESOURCE_TYPE; }
        if (i == 0) first = r;
        if (r.device != first.device || (n > 1 && (r.split != first.split || !r.split))) {
            free(d);
            return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
        }
        for (int w = 0; w < FK_MASK_WORDS; w++) {
            if (d->sms[w] & r.sms[w]) { free(d); return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION; }
            d->sms[w] |= r.sms[w];
        }
        if (i == 0 || r.coscheduled < d->coscheduled) d->coscheduled = r.coscheduled;
    }
    d->device = first.device;
    fk_lock();
    d->next = fk_descs;
    fk_descs = d;
    fk_unlock();
    *desc = (CUdevResourceDesc)d;
    return CUDA_SUCCESS;
}

__attribute__((destructor)) static void fk_green_dtor(void) {
    while (fk_dead_greens) {
        fk_dead_t *x = fk_dead_greens;
        fk_dead_greens = x->next;
        free(x->g);
        free(x);
    }
    while (fk_descs) {
        fk_desc_t *d = fk_descs;
        fk_descs = d->next;
        d->magic = 0;
        free(d);
    }
}

FAKE_API CUresult cuGreenCtxCreate(CUgreenCtx *out, CUdevResourceDesc desc, CUdevice dev, unsigned int flags) {
    FK_ENTER("cuGreenCtxCreate", CUDA_ERROR_INVALID_VALUE);
    fk_desc_t *d = (fk_desc_t *)desc;
    if (!out || !d || d->magic != FK_DESC_MAGIC || !(flags & CU_GREEN_CTX_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    if (!fk_valid_device(dev) || d->device != dev) return CUDA_ERROR_INVALID_DEVICE;
    fk_green_t *g = calloc(1, sizeof *g);
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
    g->magic = FK_GREEN_MAGIC;
    g->ctx = (fk_ctx_t){ .magic = FK_CTX_MAGIC, .device = dev, .green = 1 };
    memcpy(g->ctx.sms, d->sms, sizeof g->ctx.sms);
    fk_lock();
    fk.primary[dev].refcount++;    /* a green context retains the primary context */
    fk_unlock();
    atomic_fetch_add(&fk_greens, 1);
    *out = (CUgreenCtx)g;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuGreenCtxDestroy(CUgreenCtx h) {
    FK_ENTER("cuGreenCtxDestroy", CUDA_ERROR_INVALID_VALUE);
    fk_green_t *g = green_of(h);
    if (!g) return CUDA_ERROR_INVALID_CONTEXT;
    fk_dead_t *grave = malloc(sizeof *grave);
    fk_lock();
    if (fk.primary[g->ctx.device].refcount > 0 && --fk.primary[g->ctx.device].refcount == 0)
        fk.primary[g->ctx.device].teardowns++;
    g->magic = 0;
    g->ctx.magic = FK_CTX_DEAD;
    if (grave) {
        grave->g = g;
        grave->next = fk_dead_greens;
        fk_dead_greens = grave;
    }
    fk_unlock();
    if (!grave) free(g);
    atomic_fetch_sub(&fk_greens, 1);
    fk_report_if_exiting();
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxFromGreenCtx(CUcontext *pc, CUgreenCtx h) {
    FK_ENTER("cuCtxFromGreenCtx", CUDA_ERROR_INVALID_VALUE);
    fk_green_t *g = green_of(h);
    if (!pc) return CUDA_ERROR_INVALID_VALUE;
    if (!g) return CUDA_ERROR_INVALID_CONTEXT;
    *pc = (CUcontext)&g->ctx;
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuGreenCtxStreamCreate(CUstream *s, CUgreenCtx h, unsigned int flags, int priority) {
    (void)priority;
    FK_ENTER("cuGreenCtxStreamCreate", CUDA_ERROR_INVALID_VALUE);
    fk_green_t *g = green_of(h);
    if (!s || !(flags & CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;   /* the driver requires it */
    if (!g) return CUDA_ERROR_INVALID_CONTEXT;
    return fk_stream_create_in(s, &g->ctx);
}

/* ---- test hooks ---------------------------------------------------------------------------- */

FAKE_API int fakecuda_green_count(void) { return atomic_load(&fk_greens); }

FAKE_API int fakecuda_ctx_sms(void *c, unsigned char out[256]) {
    fk_ctx_t *x = (fk_ctx_t *)c;
    if (!fk_valid_ctx(x)) return -1;
    for (int s = 0; s < FK_MAX_SMS && out; s++) out[s] = (unsigned char)((x->sms[s >> 6] >> (s & 63)) & 1);
    return popcount(x->sms);
}

FAKE_API int fakecuda_ctx_is_green(void *c) {
    fk_ctx_t *x = (fk_ctx_t *)c;
    return fk_valid_ctx(x) ? x->green : -1;
}

FAKE_API int fakecuda_sm_side(int sm) { return sm >= 0 && sm < fk.nsms ? fk.side[sm] : -1; }
