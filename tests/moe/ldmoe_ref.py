"""ldmoe_ref.py — CPU references for libldmoe's FP8 path, shared by the CPU tests
(tests/moe/test_ldmoe_py.py) and the GPU tests (tests/gpu/moe/test_moe.py, bench/moe/bench_moe.py).

    pack_reference(w, D)          the packed layout's bytes (ldmoe.h), bf16 or float8_e4m3fn weights
    reference_fp8(...)            fp64 Y of the dequantized operands, and Σ|x̂·ŵ| per output element
    check_fp8(y, ref, absum)      the error bound of doc/moe.md ("FP8"): (ok, detail)

Written with whole-tensor torch operations only (no per-element Python loops), so that the GPU
test can run them at its sizes; they do not call libldmoe.
"""
import torch

import ldmoe

PACK_ROWS, PACK_ROW_BYTES, PACK_KALIGN = 128, 128, 4   # ldmoe_tiles.h: box rows, bytes per box row, k-block alignment

# doc/moe.md "FP8": |y - ref| <= REL * |ref| + ABS * sum_k |x^ w^| per element, and
# ||y - ref||_F <= FROB * ||ref||_F.
REL, ABS, FROB = 2.0 ** -8, 2.0 ** -9, 2.0 ** -7


def _row_bytes(w):
    """w's rows as uint8 [..., rows, row bytes] (bf16: 2 bytes per element, e4m3: 1)."""
    return w.contiguous().view(torch.uint8)


def pack_reference(w, D=None):
    """uint8 [bytes] of the packed layout of w: [E, N, K] (plain; D domains, default 1) or
    [D, E, N/D, K] (localized), dtype bfloat16 or float8_e4m3fn, on any device.

    The layout (ldmoe.h): [D][E][row block of 128][k block of 128 bytes], each box 128 rows x 128
    bytes with 16-byte chunk c of box row r at byte 128 r + 16 (c ^ (r % 8)); k blocks per row
    block a multiple of 4; rows and bytes past the weights zero."""
    if w.dim() == 3:
        D = 1 if D is None else D
        E, N, K = w.shape
        if N % D:
            raise ValueError("N = %d is not a multiple of D = %d" % (N, D))
        loc = w.reshape(E, D, N // D, K).permute(1, 0, 2, 3)
    elif w.dim() == 4:
        if D is not None and D != w.shape[0]:
            raise ValueError("w is localized over %d domains, D = %d given" % (w.shape[0], D))
        D, E, _, K = w.shape
        loc = w
    else:
        raise ValueError("w must be [E, N, K] or [D, E, N/D, K]")
    b = _row_bytes(loc)                                      # [D, E, ND, K * esize]
    ND, RB = b.shape[2], b.shape[3]
    pnb = -(-ND // PACK_ROWS)
    pkb = -(-RB // (PACK_ROW_BYTES * PACK_KALIGN)) * PACK_KALIGN
    pad = torch.zeros((D, E, pnb * PACK_ROWS, pkb * PACK_ROW_BYTES), dtype=torch.uint8, device=w.device)
    pad[:, :, :ND, :RB] = b
    # [D, E, rb, r, kb, c, 16] -> [D, E, rb, kb, r, c, 16]
    boxes = pad.reshape(D, E, pnb, PACK_ROWS, pkb, 8, 16).permute(0, 1, 2, 4, 3, 5, 6)
    r = torch.arange(PACK_ROWS, device=w.device).view(PACK_ROWS, 1)
    c = torch.arange(8, device=w.device).view(1, 8)
    src_chunk = (c ^ (r % 8)).expand(PACK_ROWS, 8)           # stored chunk p of row r holds logical chunk p ^ (r % 8)
    idx = src_chunk.view(1, 1, 1, 1, PACK_ROWS, 8, 1).expand(D, E, pnb, pkb, PACK_ROWS, 8, 16)
    return torch.gather(boxes, 5, idx).contiguous().reshape(-1)


def packed_offset(E, ND, row_bytes, d, e, r, byte):
    """Byte offset of byte `byte` of row r of slice d of expert e: the formula of ldmoe_tiles.h
    (ldmoe_packed_offset over bytes), element-wise in plain Python, for checking pack_reference."""
    pnb = -(-ND // PACK_ROWS)
    pkb = -(-row_bytes // (PACK_ROW_BYTES * PACK_KALIGN)) * PACK_KALIGN
    box = (((d * E + e) * pnb + r // PACK_ROWS) * pkb + byte // PACK_ROW_BYTES)
    rr, ch = r % PACK_ROWS, (byte % PACK_ROW_BYTES) // 16
    return box * PACK_ROWS * PACK_ROW_BYTES + rr * PACK_ROW_BYTES + (ch ^ (rr % 8)) * 16 + byte % 16


def reference_fp8(x8, x_scale, w8, w_scale, offs, scaling):
    """(ref, absum): fp64 [T, N] Y of the dequantized operands of a plain-layout FP8 grouped GEMM
    and Σ_k |x̂ ŵ| per element; rows at or past offs[-1] are NaN (never written by the kernel).
    x8 [T, K], w8 [E, N, K] float8_e4m3fn; scales as ldmoe.grouped_mm_fp8 takes them for plain
    weights (scaling "rowwise" or "block")."""
    T = x8.shape[0]
    xd = ldmoe.dequantize(x8, x_scale, scaling).double()
    wd = ldmoe.dequantize(w8, w_scale, scaling).double()
    N = w8.shape[1]
    ref = torch.full((T, N), float("nan"), dtype=torch.float64, device=x8.device)
    absum = torch.zeros((T, N), dtype=torch.float64, device=x8.device)
    o = [0] + [int(v) for v in offs.tolist()]
    for e in range(w8.shape[0]):
        a, b = max(0, min(o[e], T)), max(0, min(o[e + 1], T))
        a = max(a, max(min(v, T) for v in o[:e + 1]))   # the kernel's running maximum of offs
        if b <= a:
            continue
        ref[a:b] = xd[a:b] @ wd[e].t()
        absum[a:b] = xd[a:b].abs() @ wd[e].abs().t()
    return ref, absum


def check_fp8(y, ref, absum):
    """(ok, detail): bf16 y [T, N] against reference_fp8's (ref, absum) with doc/moe.md's bound,
    on the rows the kernel owns (ref not NaN)."""
    rows = ~torch.isnan(ref[:, 0]) if ref.shape[1] else torch.zeros(ref.shape[0], dtype=torch.bool)
    yd, rd, ad = y.double()[rows], ref[rows], absum[rows]
    if yd.numel() == 0:
        return True, "no rows"
    if not torch.isfinite(yd).all():
        return False, "%d non-finite outputs" % int((~torch.isfinite(yd)).sum())
    err = (yd - rd).abs()
    tol = REL * rd.abs() + ABS * ad
    worst = float((err / tol.clamp_min(1e-300)).max())
    frob = float(err.norm() / rd.norm().clamp_min(1e-300))
    ok = worst <= 1.0 and frob <= FROB
    return ok, "worst element at %.3f of its bound, relative Frobenius error %.2e (bound %.2e)" % (worst, frob, FROB)
