/* ldmoe.h — libldmoe: a persistent, locality-domain-aware bf16 grouped GEMM for MoE layers.
 *
 *   Y[t, :] = X[t, :] · W[e(t)]ᵀ      X [T, K] bf16 row-major, Y [T, N] bf16, fp32 accumulation
 *
 * Tokens are grouped by expert: expert e owns rows offs[e-1] .. offs[e]-1 of X and Y (offs[-1]
 * = 0), exactly as torch._grouped_mm takes its `offs` (int32 cumulative end offsets, length E,
 * in device memory). Rows at or beyond offs[E-1] are neither read nor written.
 *
 * Weights come in one of three layouts:
 *   LDMOE_LAYOUT_PLAIN      [E, N, K]
 *   LDMOE_LAYOUT_LOCALIZED  [D, E, N/D, K]: slice d holds rows d*N/D .. (d+1)*N/D-1 of every
 *                           expert, so that it can live in one locality domain's memory.
 *   LDMOE_LAYOUT_PACKED     the localized order stored box by box, as the kernel's shared memory
 *                           holds it: [D, E, ceil(N/D / 128), KB, 128, 64] with KB = 4*ceil(K/256),
 *                           each 128-row x 64-k box 16 KiB with the 128-byte swizzle (16-byte chunk
 *                           c of box row r at byte 128 r + 16 (c ^ (r % 8))), rows past N/D and k
 *                           past K zero. Built once with ldmoe_pack_weights (size:
 *                           ldmoe_packed_bytes). Every weight read is then a contiguous copy of
 *                           8-64 KiB instead of 64-256 rows of 128 bytes K*2 apart, which streams
 *                           faster from HBM (doc/moe.md); slice d is still one contiguous range.
 *                           num_domains must be the D the weights were packed with, and w must
 *                           hold ldmoe_packed_bytes(E, N, K, D) bytes (the library cannot check
 *                           either: a mismatch reads wrong rows or past the buffer).
 *
 * Scheduling (see doc/moe.md): one CTA per SM; each CTA reads the SM->domain map that libldshim
 * publishes into this library's `ldshim_topology` device symbol, takes tiles of its own
 * domain's slice first, and steals other slices only when the launch holds at least
 * `steal_waves` waves of tiles (or when a slice's domain has no SM). Where several m-blocks of
 * an expert share a weight block, most waves are assigned statically first, in the order the
 * hardware places CTAs on SMs (one probe kernel per device, queued on the first launch's
 * stream), and only the last waves are claimed tile by tile. Tile counters live in a
 * per-(device, stream) workspace and are reset by the last CTA of each launch, so no host reset
 * is needed between launches.
 *
 * Errors are values: every function returns LDMOE_OK (0) or an LDMOE_ERR_* code, and the
 * calling thread's last-error message (ldmoe_last_error) says what was wrong. The library
 * prints nothing.
 */
#ifndef LDMOE_H
#define LDMOE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The project's VERSION file is the source: the build passes it, `make install` writes it here,
 * and this value (checked against VERSION by make test) serves includes from a checkout. */
#ifndef LDMOE_VERSION_STRING
#define LDMOE_VERSION_STRING "0.1.0"
#endif
#define LDMOE_MAX_EXPERTS    1024   /* per-launch expert count bound (prefix sums live in smem) */
#define LDMOE_MAX_DOMAINS    8

enum ldmoe_status {
    LDMOE_OK = 0,
    LDMOE_ERR_INVALID_ARG = 1,   /* null pointer, negative or inconsistent size, bad enum     */
    LDMOE_ERR_ALIGNMENT = 2,     /* pointer not 16-byte aligned, K or N/D not a multiple of 8 */
    LDMOE_ERR_UNSUPPORTED = 3,   /* no usable device, too many experts/domains               */
    LDMOE_ERR_CUDA = 4,          /* a CUDA runtime call or the launch failed                 */
    LDMOE_ERR_NO_MEMORY = 5      /* workspace allocation failed                              */
};

enum ldmoe_layout {
    LDMOE_LAYOUT_PLAIN = 0,
    LDMOE_LAYOUT_LOCALIZED = 1,
    LDMOE_LAYOUT_PACKED = 2
};

enum ldmoe_mode {
    LDMOE_MODE_AUTO = 0,      /* aware when the published map says so (or nothing is published,
                                 then the even map), unaware when the map lacks LDSHIM_TOPO_AWARE */
    LDMOE_MODE_AWARE = 1,     /* per-domain queues, local first, threshold stealing            */
    LDMOE_MODE_UNAWARE = 2,   /* one shared queue over all tiles (placement state `memory`)    */
    LDMOE_MODE_STATIC = 3     /* tile i -> CTA i mod grid, no atomics (scheduler-cost baseline) */
};

/* The tiles of this library, one line each: X(value, NAME, weight rows, tokens). This list is the
 * one source of enum ldmoe_tile below, of the library's tile table (impl/library.cuh) and of
 * ldmoe.py's TILES (name = NAME in lower case without underscores; tests/moe/test_tile_list.py
 * fails when they disagree). The library ships exactly the tiles that AUTO can pick
 * (ldmoe_heuristics.h); the others, kept for experiments, are in the lab build
 * (bench/moe/lab/ldmoe_lab.h), whose values never collide with these. A value is never reused.
 *   mma.sync, all warps compute (any GPU with TMA):
 *     64x16_K4       64 weight rows x 16 tokens, 256 k per stage: decode
 *     64x64_K4       64 x 64, 256 k per stage: decode
 *     128x128        128 x 128: prefill
 *     128x256        128 x 256: prefill, large token counts
 *   warp-specialized wgmma (compute capability 9.0 only):
 *     WS_128x64_C16  128 weight rows x 64 tokens, loading only the tokens a tile has: up to 16 in
 *                    one 16-row box, up to 32 in one 32-row box, else the whole 64-row box
 *     WS_128x128_C16 128 weight rows x 128 tokens, the same way (16-row boxes up to 32 tokens, one
 *                    64-row box up to 64, else the whole box): one weight pass for up to 128 tokens
 *     WS_256x128_EW  128 tokens x 256 weight rows, output stored by epilogue warps from shared
 *                    memory while the consumers go on: prefill */
#define LDMOE_TILE_LIST(X)              \
    X(3, 128x128, 128, 128)            \
    X(4, 128x256, 128, 256)            \
    X(7, 64x16_K4, 64, 16)             \
    X(8, 64x64_K4, 64, 64)             \
    X(19, WS_256x128_EW, 256, 128)     \
    X(20, WS_128x64_C16, 128, 64)      \
    X(21, WS_128x128_C16, 128, 128)

/* The FP8 tiles (ldmoe_grouped_mm_fp8 only), X(value, NAME, weight rows, tokens) as above:
 * warp-specialized tiles with e4m3 x e4m3 -> fp32 wgmma (k = 32 per instruction, a k-block of
 * 128 bytes is 128 k), weights on the MMA's M side: three decode tiles and two prefill tiles
 * (C16: 16-row token boxes, so a tile of an expert's last few tokens loads and multiplies only
 * those). Each is built once per scaling scheme (enum ldmoe_fp8_scaling); AUTO takes, below
 * LDMOE_FP8_PREFILL_MIN (65) tokens per expert on average, WS_128x64_C16_FP8 for rowwise and
 * WS_256x64_C16_FP8 for block scales (the 128-row tile up to 32 tokens where 256-row tiles fill
 * the SMs' waves markedly worse), then WS_256x128_FP8 for rowwise and WS_256x128_C16_FP8
 * for block scales (ldmoe_heuristics.h); WS_128x128_C16_FP8 is there to be named.
 * Compute capability 9.0 only. Values never collide with the bf16 tiles'
 * (tests/moe/test_tile_list.py); the bf16 entry points refuse them and vice versa. */
#define LDMOE_FP8_TILE_LIST(X)          \
    X(22, WS_128x64_C16_FP8, 128, 64)  \
    X(23, WS_128x128_C16_FP8, 128, 128) \
    X(24, WS_256x128_FP8, 256, 128)     \
    X(25, WS_256x64_C16_FP8, 256, 64)  \
    X(26, WS_256x128_C16_FP8, 256, 128)

enum ldmoe_tile {
    LDMOE_TILE_AUTO = 0,      /* chosen from the tokens per expert (ldmoe_heuristics.h): compute
                                 capability 9.0 WS_128x64_C16, WS_128x128_C16 or WS_256x128_EW;
                                 elsewhere 64x16_K4, 64x64_K4, 128x128 or 128x256           */
#define LDMOE_TILE_ENUM_(value, name, bm, bn) LDMOE_TILE_##name = value,
    LDMOE_TILE_LIST(LDMOE_TILE_ENUM_)
    LDMOE_FP8_TILE_LIST(LDMOE_TILE_ENUM_)
#undef LDMOE_TILE_ENUM_
};

#define LDMOE_DEFAULT_STEAL_WAVES 2.0f

/* All arguments of one grouped GEMM. Zero-initialize, then fill; fields added later keep zero
 * meaning "default". Pointers are device pointers of the current device. */
typedef struct ldmoe_params {
    const void    *x;          /* [T, K] bf16, 16-byte aligned                               */
    const void    *w;          /* bf16 weights in `layout` (see above), 16-byte aligned       */
    const int32_t *offs;       /* [E] int32 cumulative end offsets, device memory            */
    void          *y;          /* [T, N] bf16, 16-byte aligned                                */
    int64_t        T;          /* rows of X and Y (>= 0)                                      */
    int32_t        E, N, K;    /* experts (1..LDMOE_MAX_EXPERTS), output cols, reduction dim  */
    int32_t        layout;     /* enum ldmoe_layout                                            */
    int32_t        num_domains;/* D of the localized or packed layout (1..8); ignored for PLAIN */
    int32_t        mode;       /* enum ldmoe_mode                                              */
    float          steal_waves;/* <= 0: LDMOE_DEFAULT_STEAL_WAVES; use a tiny value (1e-6) to
                                  always allow stealing                                        */
    void          *stream;     /* cudaStream_t (NULL: legacy default stream)                   */
    int32_t        tile;       /* enum ldmoe_tile                                              */
} ldmoe_params_t;

/* Run Y = X·Wᵀ per expert on `p->stream`. Asynchronous: returns after the launch.
 * Thread-safe (the per-stream workspace table is locked); calls on different streams run
 * concurrently. The caller owns all buffers; the library keeps only its small per-(device,
 * stream) counter workspace (freed by ldmoe_release). */
int ldmoe_grouped_mm_ex(const ldmoe_params_t *p);

/* Convenience form of ldmoe_grouped_mm_ex with tile = AUTO.
 * steal_waves <= 0 selects the default (2 waves). Thread-safe. */
int ldmoe_grouped_mm(const void *x, const void *w, const int32_t *offs, void *y,
                     int64_t T, int E, int N, int K, int layout, int num_domains,
                     int mode, float steal_waves, void *stream);

/* Convert weights between layouts on `stream` (src and dst must not overlap):
 * to_localized != 0: [E, N, K] -> [D, E, N/D, K]; else the reverse. N % D == 0, K % 8 == 0,
 * 16-byte aligned pointers. Asynchronous, thread-safe. */
int ldmoe_convert_layout(const void *src, void *dst, int E, int N, int K, int D,
                         int to_localized, void *stream);

/* Bytes of the packed layout (LDMOE_LAYOUT_PACKED) for these sizes; 0 if they are invalid
 * (E, N, K, D >= 1, D <= LDMOE_MAX_DOMAINS, N % D == 0, E*N <= 2^31-1). Thread-safe, no GPU
 * needed. */
size_t ldmoe_packed_bytes(int E, int N, int K, int D);

/* Write the packed layout of `src` (LDMOE_LAYOUT_PLAIN [E, N, K], or LDMOE_LAYOUT_LOCALIZED
 * [D, E, N/D, K] with the same D) to dst, which holds ldmoe_packed_bytes(E, N, K, D) bytes
 * (padding included: every byte of dst is written). Same constraints as ldmoe_convert_layout,
 * and E*N <= 2^31-1; src and dst must not overlap. Asynchronous on `stream`, thread-safe. */
int ldmoe_pack_weights(const void *src, int src_layout, void *dst, int E, int N, int K, int D,
                       void *stream);

/* Tile geometry the kernel will use for these sizes (tile = AUTO resolves as a bf16 launch would;
 * an FP8 tile answers its geometry, K counted in elements):
 * *bm weight rows and *bn tokens per tile, and *bound an upper bound on the number of tiles
 * (global tile ids are < *bound). Any out pointer may be NULL. Host computation; for AUTO it
 * asks the current device's compute capability (no GPU: answers as for a non-Hopper one).
 * Thread-safe. */
int ldmoe_tile_info(int64_t T, int E, int N, int K, int layout, int num_domains, int tile,
                    int *bm, int *bn, int64_t *bound);

/* ---- FP8 e4m3 weights and activations (doc/moe.md, "FP8") ------------------------------------
 *
 *   Y[t, n] = bf16( Σ_k  sx · sw · X8[t, k] · W8[e(t)][n, k] )      fp32 accumulation
 *
 * X8 [T, K] and W8 are float8 e4m3 (torch.float8_e4m3fn: 1 byte, bias 7, no infinities), in the
 * same three layouts as the bf16 weights (a row is K bytes instead of 2K). The scales are fp32:
 *   LDMOE_FP8_ROWWISE  sx = x_scale[t] (one per token), sw = w_scale[row] (one per output channel),
 *                      as torch._scaled_grouped_mm takes them. w_scale is in the weights' row
 *                      order: [E, N] for PLAIN, [D, E, N/D] for LOCALIZED and PACKED.
 *   LDMOE_FP8_BLOCK    the DeepSeek-V3 scheme: sx = x_scale for (token t, K block k/128), sw =
 *                      w_scale for (128-row block, K block). x_scale is [KB, T] with KB =
 *                      ceil(K/128) (token-contiguous per K block: the transpose of a [T, KB]
 *                      tensor, as torch and DeepGEMM keep 1x128 activation scales); w_scale is
 *                      [D, E, ceil(N/D / 128), KB] (D = 1 for PLAIN: DeepSeek-V3's [E, N/128, K/128]).
 * The scales are not part of the packed buffer: they are separate, small (1/K or 1/16384 of the
 * weight bytes); block scales are loaded into each shared-memory stage beside its weight boxes,
 * read as flat fp32 arrays (any T and K; KB*T and w_scale's element count below 2^31 - 512, else
 * LDMOE_ERR_UNSUPPORTED).
 * The packed FP8 layout is the bf16 packed layout of the same bytes: a box is 128 rows x 128 k
 * (128 bytes per row, 16 KiB, 128-byte swizzle), KB = 4*ceil(K/512) boxes per row block; byte k
 * of a row sits where bf16 element k/2 would, plus k % 2 (ldmoe_packed_offset_fp8 in
 * ldmoe_tiles.h). Requirements on top of the bf16 ones: K % 16 == 0 (16-byte rows), 4-byte
 * aligned non-NULL x_scale and w_scale when T > 0. Accumulation: the wgmma fp32 accumulators
 * are added into a separate fp32 sum after every 128-K block (promotion, both schemes), where
 * the block scheme also applies that block's scales. */
enum ldmoe_fp8_scaling {
    LDMOE_FP8_ROWWISE = 1,
    LDMOE_FP8_BLOCK = 2
};

typedef struct ldmoe_fp8_params {
    ldmoe_params_t base;       /* x: [T, K] e4m3; w: e4m3 weights in base.layout (packed: from
                                  ldmoe_pack_weights_fp8); y: [T, N] bf16; tile: AUTO or one of
                                  LDMOE_FP8_TILE_LIST; everything else as for bf16             */
    int32_t        scaling;    /* enum ldmoe_fp8_scaling (0 is refused: the caller must say)   */
    const float   *x_scale;    /* fp32 activation scales (see above), device memory            */
    const float   *w_scale;    /* fp32 weight scales (see above), device memory                */
} ldmoe_fp8_params_t;

/* Run the FP8 grouped GEMM on `p->base.stream`. Asynchronous, thread-safe; errors as for
 * ldmoe_grouped_mm_ex (all argument errors are found before any CUDA call). Needs compute
 * capability 9.0 (LDMOE_ERR_UNSUPPORTED elsewhere). */
int ldmoe_grouped_mm_fp8(const ldmoe_fp8_params_t *p);

/* The converters of the bf16 weights for e4m3 ones (rows of K bytes): same contracts as
 * ldmoe_convert_layout, ldmoe_packed_bytes and ldmoe_pack_weights, with K % 16 == 0 required
 * (ldmoe_packed_bytes_fp8 answers 0 otherwise). */
int ldmoe_convert_layout_fp8(const void *src, void *dst, int E, int N, int K, int D, int to_localized,
                             void *stream);
size_t ldmoe_packed_bytes_fp8(int E, int N, int K, int D);
int ldmoe_pack_weights_fp8(const void *src, int src_layout, void *dst, int E, int N, int K, int D, void *stream);

/* Quantize bf16 activations for ldmoe_grouped_mm_fp8, in one kernel on `stream` (asynchronous):
 * x [T, K] row-major bf16 -> x8 [T, K] e4m3 and x_scale, per row of K (LDMOE_FP8_ROWWISE:
 * x_scale [T]) or per 1x128 group along K (LDMOE_FP8_BLOCK: x_scale as [KB, T] memory, KB =
 * ceil(K/128), the order ldmoe_grouped_mm_fp8 reads). scale = amax * fp32(1/448) (1 where amax is 0),
 * x8 = e4m3(x / scale), rounded to nearest and saturated: the numerics of ldmoe.py's
 * quantize_rowwise and quantize_block(x, 1), bit for bit. NaN inputs give unspecified results.
 * K % 16 == 0, x and x8 16-byte aligned, x_scale 4-byte aligned; T = 0 does nothing. Runs on
 * every GPU the library runs on; argument errors are found before any CUDA call. */
int ldmoe_quantize_fp8(const void *x, int64_t T, int K, int scaling, void *x8, float *x_scale, void *stream);

/* ---- The fused MoE layer (doc/moe.md, "The fused MoE layer") ---------------------------------
 *
 *   out[t] = Σ_j w[t,j] · ( silu(x[t]·gate_eᵀ) ⊙ (x[t]·up_eᵀ) ) · w2_eᵀ,   e = topk_ids[t, j]
 *
 * in ONE persistent launch: routing on the device (per-expert counts, offsets and lists: no host
 * synchronization, fixed launch shape), GEMM1 over tokens gathered from x with SwiGLU in its
 * epilogue (h = bf16(silu(g)·u), g and u accumulated in fp32), GEMM2 with the routing weight in
 * its epilogue (a bf16 slot per (token, j)), and a combine that sums a token's slots in fp32 in j
 * order (no float atomics): out is bit-identical run to run, whatever the grid size, SM binding
 * or placement state. GEMM2 tiles of an (expert, token block) start once that block's GEMM1
 * tiles are done (per-expert readiness, no grid barrier between the GEMMs).
 *
 *   x        [T, H] bf16 row-major
 *   w13      [E, 2I, H] bf16: rows 0..I-1 of each expert are gate, I..2I-1 up (PLAIN), or the
 *            layer's packed layout from ldmoe_pack_moe_weights (PACKED)
 *   w2       [E, H, I] bf16 (PLAIN), or packed
 *   topk_ids [T, k] int32; topk_weights [T, k] fp32 (applied as given: normalize beforehand if
 *            the model does); out [T, H] bf16
 * The packed layout (LDMOE_LAYOUT_PACKED, num_domains = D): each weight is [D][E][R/D/16][Kd/64]
 * [16][64] bf16 (R rows of Kd elements: 2I x H for w13, H x I for w2): slice d holds the rows of
 * domain d (w13: h channels d*I/D .. (d+1)*I/D-1, gate and up; w2: rows d*H/D ..), in groups of 16
 * rows stored as 16x64 boxes of 2 KiB (16-byte chunk c of box row r at byte 128 r + 16 (c ^ (r % 8)),
 * the 128-byte swizzle), so each stage of a tile is a few contiguous 8 KiB bulk copies.
 * w13's groups are 8 gate rows followed by the 8 up rows of the same channels. The packed
 * buffers are exactly as large as the plain ones (ldmoe_moe_packed_bytes).
 *
 * Requirements: 1 <= E <= LDMOE_MOE_MAX_EXPERTS, 1 <= k <= LDMOE_MOE_MAX_TOPK, H and I multiples
 * of 64 * D (D = 1 for PLAIN; the tiles read k in 64-element boxes and cut each domain's slice
 * into whole 32-row blocks), T * k * E < 2^31 and (T*k/16 + E) * max(2I, H)/32 < 2^31 (tiles a phase),
 * 16-byte aligned x, w13, w2, out; 4-byte aligned
 * topk_ids and topk_weights; compute capability 9.0 or newer (bulk copies and mbarrier
 * transactions; the launch is cooperative, one CTA per SM of the bound set). T = 0 returns at once and touches nothing.
 *
 * Out-of-range ids (< 0 or >= E) are rejected on the device: that (token, j) contributes
 * nothing (a token with no valid id gets a zero row), nothing is read or written out of bounds,
 * and the stream's error flag is set; ldmoe_moe_errors() reads and clears it.
 *
 * Workspace: per (device, stream), as for the grouped GEMM, sized for the largest T*k, T, E, H,
 * I seen (about T*k * (2H + 2I + 4E) bytes; at prefill on Hopper, more than 8 pairs per expert,
 * also the stage images: about (T*k + 128 (E + 1)) * 2 (H + I) bytes, or * 2 I where the tile
 * gathers its token rows from x: 2I / 128 <= 12). It grows only outside a stream capture: make one
 * call at the largest size (or ldmoe_moe_reserve) before capturing; a captured call then
 * allocates nothing and never synchronizes, and each replay runs the routing it finds in
 * topk_ids. All counters the launch uses are left at zero by its last CTA, so replays need no
 * host reset. Calls on one stream are serialized by the stream; ldmoe_release frees them. */
#define LDMOE_MOE_MAX_EXPERTS 256
#define LDMOE_MOE_MAX_TOPK    16
#define LDMOE_MOE_ERR_BAD_ID  1u    /* ldmoe_moe_errors: a topk id was outside [0, E) */

typedef struct ldmoe_moe_params {
    const void    *x;            /* [T, H] bf16 (e4m3: ldmoe_moe_fp8, LDMOE_FP8_TOKENS_E4M3_X)  */
    const void    *w13;          /* [E, 2I, H] bf16 (PLAIN) or packed                        */
    const void    *w2;           /* [E, H, I] bf16 (PLAIN) or packed                         */
    const int32_t *topk_ids;     /* [T, k] int32                                             */
    const float   *topk_weights; /* [T, k] fp32                                              */
    void          *out;          /* [T, H] bf16                                              */
    int64_t        T;            /* tokens (>= 0)                                            */
    int32_t        E, H, I, k;   /* experts, hidden size, expert inner size, experts per token */
    int32_t        layout;       /* LDMOE_LAYOUT_PLAIN or LDMOE_LAYOUT_PACKED                */
    int32_t        num_domains;  /* D of the packed layout (1..8); ignored for PLAIN         */
    int32_t        mode;         /* enum ldmoe_mode, as for the grouped GEMM                 */
    float          steal_waves;  /* as for the grouped GEMM (<= 0: the default)             */
    void          *stream;       /* cudaStream_t (NULL: legacy default stream)               */
} ldmoe_moe_params_t;

/* Run the layer on p->stream. Asynchronous, thread-safe; every argument error is found before
 * any CUDA call. See above for the workspace and graph capture. */
int ldmoe_moe(const ldmoe_moe_params_t *p);

/* The layer with FP8 weights: w13 and w2 e4m3, packed by ldmoe_pack_moe_weights_fp8 (base.layout
 * must be LDMOE_LAYOUT_PACKED), with DeepSeek's 128 x 128 block scales (scaling LDMOE_FP8_BLOCK):
 * w13_scale [E, 2I/128, H/128] over the plain w13's rows (gate 0..I-1, up I..2I-1), w2_scale
 * [E, H/128, I/128]; or a scale per weight row (LDMOE_FP8_ROWWISE): w13_scale [E, 2I], w2_scale
 * [E, H]; fp32, 4-byte aligned; x, out bf16 as for ldmoe_moe. bf16 tokens and bf16 MMAs: the
 * decode and mma.sync prefill tiles widen e4m3 in registers and scale each 128-k block's partial
 * sum in fp32; Hopper's prefill (where ldmoe_moe takes a wgmma tile) dequantizes each weight stage
 * into shared memory, w * scale rounded once to bf16. tokens LDMOE_FP8_TOKENS_E4M3 (w8a8): where
 * a wgmma tile runs, the routed x and h are quantized to e4m3 inside the launch, a scale per token
 * and 128 k of x (DeepSeek's 1 x 128) and per token and 64 k of h (amax / 448), and both GEMMs run
 * e4m3 x e4m3 wgmmas (128 weight rows) whose partial sums over a token scale's k are promoted in
 * fp32 times both scales; the decode and mma.sync tiles keep bf16 tokens. H and I multiples of 128 (and of 64 * D).
 * tokens LDMOE_FP8_TOKENS_E4M3_X: the same with x already e4m3 ([T, H], 16-byte aligned) and its
 * scales in x_scale ([T, H/128] fp32, 4-byte aligned, one per token and 128 k: DeepSeek's 1 x 128;
 * x[t, c] stands for x_e4m3[t, c] * x_scale[t, c / 128]): the wgmma tile takes x as it is, the
 * decode and mma.sync tiles x * x_scale rounded once to bf16 (written into the workspace inside the
 * launch; on the decode tile one more grid barrier). x_scale is read only with this value. Everything else as ldmoe_moe. */
#define LDMOE_FP8_TOKENS_BF16   0   /* weight-only FP8: bf16 tokens, bf16 MMAs                 */
#define LDMOE_FP8_TOKENS_E4M3   1   /* w8a8 where a wgmma tile runs (below)                    */
#define LDMOE_FP8_TOKENS_E4M3_X 2   /* as E4M3, x given in e4m3 with x_scale                   */
typedef struct ldmoe_moe_fp8_params {
    ldmoe_moe_params_t base;
    int32_t        scaling;      /* LDMOE_FP8_BLOCK or LDMOE_FP8_ROWWISE                      */
    const float   *w13_scale;
    const float   *w2_scale;
    int32_t        tokens;       /* LDMOE_FP8_TOKENS_BF16 (0), _E4M3 (1) or _E4M3_X (2)      */
    const float   *x_scale;      /* tokens _E4M3_X: [T, H/128] fp32 (read only then)          */
} ldmoe_moe_fp8_params_t;
int ldmoe_moe_fp8(const ldmoe_moe_fp8_params_t *p);
/* e4m3 w13 [E, 2I, H] and w2 [E, H, I] -> the FP8 packed layout (the bf16 one over half as many
 * 2-byte units: a 2 KiB box is 16 rows x 128 k). Packed sizes: E*2I*H and E*H*I bytes. */
int ldmoe_pack_moe_weights_fp8(const void *w13, const void *w2, void *w13_packed, void *w2_packed, int E, int H,
                               int I, int D, void *stream);

/* Size the (device, stream) layer workspace for calls up to these sizes now (outside a
 * capture), so that calls up to them inside a capture allocate nothing. Synchronous when it grows. */
int ldmoe_moe_reserve(int64_t T, int E, int H, int I, int k, void *stream);

/* Read and clear the error flags of the layer calls on `stream` of the current device
 * (LDMOE_MOE_ERR_BAD_ID); synchronizes the stream. *flags = 0 when no call ran on it. */
int ldmoe_moe_errors(void *stream, uint32_t *flags);

/* Bytes of the packed w13 and w2 (the plain sizes: E*2I*H*2 and E*H*I*2), or an error when the
 * sizes cannot be packed for D domains. Either out pointer may be NULL. No GPU needed. */
int ldmoe_moe_packed_bytes(int E, int H, int I, int D, size_t *w13_bytes, size_t *w2_bytes);

/* Plain w13 [E, 2I, H] and w2 [E, H, I] -> the layer's packed layout for D domains, on `stream`
 * (asynchronous). No buffer may overlap another. Thread-safe. */
int ldmoe_pack_moe_weights(const void *w13, const void *w2, void *w13_packed, void *w2_packed, int E, int H, int I,
                           int D, void *stream);

struct ldshim_topology;
/* Read back the device symbol as the kernels see it (current device): the first `size` bytes
 * of it, at most sizeof(struct ldshim_topology) of this library (pass sizeof *out: a caller
 * built against an older, shorter struct gets only what it has room for). `size` must hold
 * at least the version-1 fields (LDSHIM_TOPOLOGY_V1_BYTES). Synchronous. */
int ldmoe_get_topology(struct ldshim_topology *out, size_t size);

/* Free the per-stream workspaces of the current device (synchronizes the device first).
 * Call only when no ldmoe work is in flight. Thread-safe. */
int ldmoe_release(void);

/* Static string for a status code, never NULL. Thread-safe. */
const char *ldmoe_error_string(int status);

/* The calling thread's message for its last failing call ("" if none). Thread-local storage
 * owned by the library; valid until the thread's next ldmoe call. */
const char *ldmoe_last_error(void);

/* Version and kernel paths, e.g. "0.1.0 (decode: mma.sync ...)", static storage. */
const char *ldmoe_version(void);

#ifdef __cplusplus
}
#endif
#endif /* LDMOE_H */
