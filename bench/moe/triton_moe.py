"""triton_moe.py — a serving-engine style fused_experts pipeline in Triton, a peer for
bench_layer.py (written here; not a copy of any engine's code).

fused_experts(x [T, H] bf16, w13 [E, 2I, H], w2 [E, H, I], topk_ids [T, k], topk_weights
fp32 [T, k]) -> [T, H] bf16 in five launches, the way serving engines run an MoE layer:
  1. align: one program counts the tokens of every expert, pads each expert's share to a
     multiple of BLOCK_M, and writes the (token, slot) ids grouped by expert (pads = T*k) and
     the expert of every BLOCK_M block (-1 past the end) — fixed shapes, no host sync, so a
     CUDA graph captures it once for every routing
  2. GEMM over w13: each program takes a BLOCK_M block of one expert's rows, loads the tokens'
     rows of x directly (no gathered copy) and writes [T*k, 2I]
  3. SwiGLU: silu(gate) * up -> [T*k, I]
  4. GEMM over w2, the routing weight multiplied in the epilogue (fp32) -> [T*k, H]
  5. the sum over k -> [T, H] (fixed order)
BLOCK_M follows the mean rows per expert (16, 64 or 128); the other tile sizes are tuned by
triton.autotune per (BLOCK_M, N, K) on the GPU, over a short list (TILES). TRITON_INTERPRET=1 runs it on the CPU
(one fixed configuration) for tests.
"""

import os

import torch
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _align_kernel(ids_ptr, n, E, sorted_ptr, expert_ptr, npad_ptr, cursor_ptr,
                  max_blocks, BM: tl.constexpr, EP2: tl.constexpr, CHUNK: tl.constexpr):
    offs = tl.arange(0, CHUNK)
    hist = tl.zeros((EP2,), dtype=tl.int32)
    for start in range(0, n, CHUNK):
        m = start + offs < n
        e = tl.load(ids_ptr + start + offs, mask=m, other=0).to(tl.int32)
        e = tl.where(m, e, EP2)                       # masked lanes match no expert
        hist += tl.sum((e[:, None] == tl.arange(0, EP2)[None, :]).to(tl.int32), axis=0)
    padded = (hist + BM - 1) // BM * BM
    ends = tl.cumsum(padded, axis=0)
    starts = ends - padded
    total = tl.sum(padded, axis=0)
    eo = tl.arange(0, EP2)
    tl.store(cursor_ptr + eo, starts, mask=eo < E)
    tl.store(npad_ptr, total)
    # pads first (every slot of the padded range that no row takes reads as "no token")
    for start in range(0, max_blocks * BM, CHUNK):
        o = start + offs
        tl.store(sorted_ptr + o, tl.full((CHUNK,), 0, tl.int32) + n, mask=o < max_blocks * BM)
    bo = tl.arange(0, CHUNK)
    for start in range(0, max_blocks, CHUNK):
        b = start + bo
        ex = tl.sum((ends[None, :] <= (b * BM)[:, None]).to(tl.int32), axis=1)
        ex = tl.where(b * BM < total, ex, -1)
        tl.store(expert_ptr + b, ex, mask=b < max_blocks)
    tl.debug_barrier()
    for start in range(0, n, CHUNK):
        m = start + offs < n
        e = tl.load(ids_ptr + start + offs, mask=m, other=0).to(tl.int32)
        pos = tl.atomic_add(cursor_ptr + e, 1, mask=m)
        tl.store(sorted_ptr + pos, (start + offs).to(tl.int32), mask=m)


# (BN, BK, warps, stages) tried for each BLOCK_M: small tiles with deep k steps at decode,
# larger ones as rows per expert grow (a short list: every one is compiled and timed once per
# (N, K, BLOCK_M) on the GPU).
TILES = {16: [(64, 128, 4, 4), (128, 128, 4, 3), (64, 256, 4, 3), (32, 256, 4, 4)],
         64: [(64, 64, 4, 4), (128, 64, 4, 4), (128, 128, 8, 3), (64, 128, 4, 3)],
         128: [(128, 64, 8, 3), (256, 64, 8, 3), (128, 64, 4, 4), (64, 64, 4, 4)]}


def _gemm_configs():
    if INTERPRET:
        return [triton.Config({"BN": 32, "BK": 32}, num_warps=4, num_stages=1)]
    seen = sorted({t for ts in TILES.values() for t in ts})
    return [triton.Config({"BN": bn, "BK": bk}, num_warps=w, num_stages=st) for bn, bk, w, st in seen]


def _prune(configs, nargs, **kw):
    bm = kw.get("BM", nargs.get("BM", 64))
    want = set(TILES.get(bm, ()))
    out = [c for c in configs if (c.kwargs["BN"], c.kwargs["BK"], c.num_warps, c.num_stages) in want]
    return out or configs[:1]


def _bench_args():
    """Short timing runs per configuration where this Triton's autotune takes them."""
    import inspect
    ps = inspect.signature(triton.autotune).parameters
    return {"warmup": 5, "rep": 25} if "warmup" in ps and "rep" in ps else {}


@triton.autotune(configs=_gemm_configs(), key=["N", "K", "BM"],
                 prune_configs_by={"early_config_prune": _prune}, **_bench_args())
@triton.jit
def _moe_gemm_kernel(a_ptr, b_ptr, c_ptr, w_ptr, sorted_ptr, expert_ptr, npad_ptr,
                     N, K, n_rows, a_div, stride_am, stride_be, stride_bn, stride_cm,
                     max_blocks,
                     MUL_W: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C[r] = A[r // a_div] . B[e(r)]^T (times w[r] if MUL_W) for the rows r of each BM block."""
    pid = tl.program_id(0)
    nbn = tl.cdiv(N, BN)
    pid_m = pid // nbn
    pid_n = pid % nbn
    if pid_m * BM >= tl.load(npad_ptr):
        return
    ex = tl.load(expert_ptr + pid_m)
    if ex < 0:
        return
    rows = tl.load(sorted_ptr + pid_m * BM + tl.arange(0, BM))
    rmask = rows < n_rows
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + (rows // a_div)[:, None].to(tl.int64) * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + ex.to(tl.int64) * stride_be + offs_n[None, :].to(tl.int64) * stride_bn \
        + offs_k[:, None]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kmask = offs_k + k0 < K
        a = tl.load(a_ptrs, mask=rmask[:, None] & kmask[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=kmask[:, None] & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK
    if MUL_W:
        w = tl.load(w_ptr + rows, mask=rmask, other=0.0)
        acc = acc * w[:, None]
    c_ptrs = c_ptr + rows[:, None].to(tl.int64) * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=rmask[:, None] & (offs_n[None, :] < N))


@triton.jit
def _swiglu_kernel(g_ptr, o_ptr, I, stride_g, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    for s in range(0, I, BLOCK):
        o = s + tl.arange(0, BLOCK)
        m = o < I
        gate = tl.load(g_ptr + r.to(tl.int64) * stride_g + o, mask=m, other=0.0).to(tl.float32)
        up = tl.load(g_ptr + r.to(tl.int64) * stride_g + I + o, mask=m, other=0.0).to(tl.float32)
        act = gate / (1.0 + tl.exp(-gate)) * up
        tl.store(o_ptr + r.to(tl.int64) * I + o, act.to(o_ptr.dtype.element_ty), mask=m)


@triton.jit
def _sum_k_kernel(y_ptr, o_ptr, H, TOPK: tl.constexpr, BLOCK: tl.constexpr):
    t = tl.program_id(0)
    hb = tl.program_id(1)
    o = hb * BLOCK + tl.arange(0, BLOCK)
    m = o < H
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for j in range(TOPK):
        acc += tl.load(y_ptr + (t.to(tl.int64) * TOPK + j) * H + o, mask=m, other=0.0).to(tl.float32)
    tl.store(o_ptr + t.to(tl.int64) * H + o, acc.to(o_ptr.dtype.element_ty), mask=m)


def block_m(n_rows, E):
    per = n_rows / E
    return 16 if per <= 16 else 64 if per <= 96 else 128


def align(topk_ids, E, BM):
    """(sorted (token, slot) ids int32 [max_blocks*BM], expert of each block int32
    [max_blocks], padded row count int32 [1]); max_blocks fixed by T*k and E alone."""
    n = topk_ids.numel()
    max_blocks = triton.cdiv(n + E * (BM - 1), BM)
    dev = topk_ids.device
    sorted_ids = torch.empty(max_blocks * BM, dtype=torch.int32, device=dev)
    expert_ids = torch.empty(max_blocks, dtype=torch.int32, device=dev)
    npad = torch.empty(1, dtype=torch.int32, device=dev)
    cursor = torch.empty(E, dtype=torch.int32, device=dev)
    EP2 = triton.next_power_of_2(E)
    _align_kernel[(1,)](topk_ids.reshape(-1), n, E, sorted_ids, expert_ids, npad, cursor,
                        max_blocks, BM=BM, EP2=EP2, CHUNK=min(1024, max(16, 8192 // EP2)),
                        num_warps=4)
    return sorted_ids, expert_ids, npad, max_blocks


def _gemm(a, a_div, w, c, topw, sorted_ids, expert_ids, npad, max_blocks, BM, n_rows):
    E, N, K = w.shape
    assert a.stride(1) == 1 and w.stride(2) == 1 and c.stride(1) == 1
    grid = lambda meta: (max_blocks * triton.cdiv(N, meta["BN"]),)
    _moe_gemm_kernel[grid](a, w, c, topw if topw is not None else c, sorted_ids, expert_ids,
                           npad, N, K, n_rows, a_div, a.stride(0), w.stride(0), w.stride(1),
                           c.stride(0), max_blocks,
                           MUL_W=topw is not None, BM=BM)


def fused_experts(x, w13, w2, topk_ids, topk_weights):
    T, H = x.shape
    E, I2, _ = w13.shape
    I = I2 // 2
    k = topk_ids.shape[1]
    n = T * k
    BM = block_m(n, E)
    sorted_ids, expert_ids, npad, max_blocks = align(topk_ids, E, BM)
    g = torch.empty((n, I2), dtype=x.dtype, device=x.device)
    _gemm(x, k, w13, g, None, sorted_ids, expert_ids, npad, max_blocks, BM, n)
    act = torch.empty((n, I), dtype=x.dtype, device=x.device)
    _swiglu_kernel[(n,)](g, act, I, g.stride(0), BLOCK=min(1024, triton.next_power_of_2(I)))
    y = torch.empty((n, H), dtype=x.dtype, device=x.device)
    _gemm(act, 1, w2, y, topk_weights.reshape(-1).float().contiguous(), sorted_ids, expert_ids,
          npad, max_blocks, BM, n)
    out = torch.empty((T, H), dtype=x.dtype, device=x.device)
    BLOCK = min(1024, triton.next_power_of_2(H))
    _sum_k_kernel[(T, triton.cdiv(H, BLOCK))](y, out, H, TOPK=k, BLOCK=BLOCK)
    return out
