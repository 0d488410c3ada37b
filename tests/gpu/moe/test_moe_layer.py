#!/usr/bin/env python3
"""test_moe_layer.py — GPU tests of the fused MoE layer, ldmoe.moe / ldmoe_moe (needs an NVIDIA
GPU of compute capability 9.0+, PyTorch).

Against an fp32 reference of the same layer on fresh random inputs per case:
    out[t] = sum_j w[t,j] * ( bf16(silu(x g_e^T) * (x u_e^T)) ) w2_e^T      (e = ids[t, j])
with x, the weights and h = the bf16-rounded SwiGLU output as the kernel has them, everything
else in fp32, the sum over j in fp32, out rounded to bf16 once. Tolerance: |out - ref| <=
TOL_REL * max|ref| + TOL_REL * |ref| (TOL_REL = 2e-2): the kernel and the reference accumulate
in different orders, so an h value can round to the neighbouring bf16 (2^-8 relative), which
GEMM2 carries into out; the bound is a few such steps.

Cases: random shapes (decode and prefill tiles), k = 1..8 and 16, T not a tile multiple, experts
with no tokens, all tokens on one expert, duplicate ids in a token, the plain and packed layouts
(D = 1, 2), every mode; outputs poisoned with NaN and checked fully written; bit-identical
repeats and identical results across modes (different claim orders); T = 0; out-of-range ids
(contribute nothing, flag set and cleared by moe_errors); CUDA graph capture and replay with a
changing routing; argument errors.

--digest FILE writes (or, when FILE exists, compares against) a digest of every deterministic
case's output: run once plainly and once under the shim bound to one domain (fewer SMs, a
different grid), the two must agree bit for bit; --bound makes the second run fail unless the
shim did bind it.

Usage: test_moe_layer.py [--result FILE] [--quick] [--seed N] [--digest FILE] [--bound] [--tiny]
"""
import argparse
import hashlib
import os
import sys
import traceback

torch = ldmoe = None
PASSED, FAILED = 0, 0
TOL_REL = 2e-2


def report(ok, name, detail=""):
    global PASSED, FAILED
    if ok:
        PASSED += 1
    else:
        FAILED += 1
    print("%s %s %s" % ("PASS" if ok else "FAIL", name, detail), flush=True)


def make_weights(gen, E, H, I):
    w13 = (torch.randn((E, 2 * I, H), generator=gen) * H ** -0.5).to(torch.bfloat16).cuda()
    w2 = (torch.randn((E, H, I), generator=gen) * I ** -0.5).to(torch.bfloat16).cuda()
    return w13, w2


def make_routing(gen, T, E, k, kind="random"):
    if kind == "one":   # every token's first choice is expert 0
        ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)]) if T else torch.zeros((0, k), dtype=torch.int64)
        if T:
            ids[:, 0] = 0
            for t in range(T):   # keep the others distinct from 0
                row = [e for e in ids[t, 1:].tolist() if e != 0]
                pool = [e for e in range(1, E) if e not in row]
                while len(row) < k - 1:
                    row.append(pool.pop())
                ids[t, 1:] = torch.tensor(row[:k - 1])
    elif kind == "dup":   # duplicates inside a token
        ids = torch.randint(0, E, (T, k), generator=gen)
    elif kind == "sparse":   # only a quarter of the experts get tokens
        live = torch.randperm(E, generator=gen)[:max(k, E // 4)]
        ids = torch.stack([live[torch.randperm(len(live), generator=gen)[:k]] for _ in range(T)]) if T else torch.zeros((0, k), dtype=torch.int64)
    else:
        ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)]) if T else torch.zeros((0, k), dtype=torch.int64)
    w = torch.rand((T, k), generator=gen) + 0.05
    w = w / w.sum(dim=1, keepdim=True)
    return ids.to(torch.int32).cuda(), w.float().cuda()


def reference(x, w13, w2, ids, wts, quant=None):
    """fp32 reference; h rounded to bf16 as the kernel stores it; invalid ids contribute nothing.
    quant (the FP8-token layer's, quant_tokens): x (by 128 k) and h (by 64) pass through it instead,
    fp32 and unrounded."""
    T, H = x.shape
    E, I2, _ = w13.shape
    I = I2 // 2
    k = ids.shape[1]
    xf = x.float() if quant is None else quant(x.float(), 128)
    flat = ids.reshape(-1).long()
    tok = torch.arange(T, device=x.device).repeat_interleave(k)
    wflat = wts.reshape(-1)
    slots = torch.zeros((T * k, H), dtype=torch.float32, device=x.device)
    for e in range(E):
        sel = (flat == e).nonzero().flatten()
        if sel.numel() == 0:
            continue
        xe = xf[tok[sel]]
        g = xe @ w13[e, :I].float().T
        u = xe @ w13[e, I:].float().T
        h = g * torch.sigmoid(g) * u
        h = h.to(torch.bfloat16).float() if quant is None else quant(h, 64)
        slots[sel] = (h @ w2[e].float().T) * wflat[sel, None]
    return slots.view(T, k, H).sum(dim=1)   # j order; invalid slots stay zero


def check(name, out, ref, detail=""):
    if out.shape != ref.shape:
        report(False, name, "shape %s vs %s" % (tuple(out.shape), tuple(ref.shape)))
        return False
    o = out.float()
    if not torch.isfinite(o).all():
        report(False, name, "non-finite output (NaN poison left or overflow) %s" % detail)
        return False
    if ref.numel() == 0:
        report(True, name, detail)
        return True
    scale = ref.abs().max().item()
    err = (o - ref).abs()
    bound = TOL_REL * scale + TOL_REL * ref.abs()
    ok = bool((err <= bound).all())
    report(ok, name, "%s max err %.3g (scale %.3g)" % (detail, err.max().item(), scale))
    return ok


DIGESTS = []


def run_case(gen, T, E, H, I, k, kind="random", layouts=("plain", "packed1", "packed2"), modes=("auto",)):
    x = torch.randn((T, H), generator=gen).to(torch.bfloat16).cuda()
    w13, w2 = make_weights(gen, E, H, I)
    ids, wts = make_routing(gen, T, E, k, kind)
    ref = reference(x, w13, w2, ids, wts)
    base = None
    tag = "T%d E%d H%d I%d k%d %s" % (T, E, H, I, k, kind)
    for lay in layouts:
        if lay.startswith("packed"):
            D = int(lay[-1])
            if H % (64 * D) or I % (64 * D):
                continue
            W = (ldmoe.pack_moe(w13, w2, D=D), None)
        else:
            W = (w13, w2)
        for mode in modes:
            out = torch.full((T, H), float("nan"), dtype=torch.bfloat16, device="cuda")
            ldmoe.moe(x, W[0], W[1], ids, wts, out=out, mode=mode)
            torch.cuda.synchronize()
            if not check("layer %s %s %s" % (tag, lay, mode), out, ref):
                continue
            if base is None:
                base = out.clone()
                DIGESTS.append("%s %s" % (tag, hashlib.sha256(out.view(torch.int16).cpu().numpy().tobytes()).hexdigest()))
            else:
                same = torch.equal(out.view(torch.int16), base.view(torch.int16))
                report(same, "bit-identical %s %s %s vs first" % (tag, lay, mode))
    return x, w13, w2, ids, wts, ref


def test_repeat(gen):
    T, E, H, I, k = 33, 32, 512, 256, 4
    x = torch.randn((T, H), generator=gen).to(torch.bfloat16).cuda()
    w13, w2 = make_weights(gen, E, H, I)
    ids, wts = make_routing(gen, T, E, k)
    first = ldmoe.moe(x, w13, w2, ids, wts)
    same = True
    for _ in range(20):
        same &= torch.equal(ldmoe.moe(x, w13, w2, ids, wts).view(torch.int16), first.view(torch.int16))
    report(same, "20 repeats bit-identical")


def test_t0():
    x = torch.empty((0, 256), dtype=torch.bfloat16, device="cuda")
    w13 = torch.zeros((4, 128, 256), dtype=torch.bfloat16, device="cuda")
    w2 = torch.zeros((4, 256, 64), dtype=torch.bfloat16, device="cuda")
    ids = torch.empty((0, 2), dtype=torch.int32, device="cuda")
    wts = torch.empty((0, 2), dtype=torch.float32, device="cuda")
    out = ldmoe.moe(x, w13, w2, ids, wts)
    report(tuple(out.shape) == (0, 256), "T = 0 returns an empty output")


def test_bad_ids(gen):
    # the decode tile (its combine warps), then the wgmma tile (its one combine pass at the end)
    for T, E, H, I, k, D in ((20, 16, 256, 128, 4, 0), (300, 4, 256, 128, 2, 2)):
        x = torch.randn((T, H), generator=gen).to(torch.bfloat16).cuda()
        w13, w2 = make_weights(gen, E, H, I)
        W = (ldmoe.pack_moe(w13, w2, D=D), None) if D else (w13, w2)
        ids, wts = make_routing(gen, T, E, k)
        tag = "T%d E%d k%d" % (T, E, k)
        ldmoe.moe_errors()
        report(ldmoe.moe_errors() == 0, "%s: error flag clear after a read" % tag)
        ids[3, 1] = -1
        ids[7, 0] = E
        ids[7, k - 1] = 1 << 30
        ids[11, :] = -5        # a token with no valid id: zero row
        ids[13::17, 0] = -1    # more tokens with part of their ids invalid
        ref = reference(x, w13, w2, ids, wts)
        out = torch.full((T, H), float("nan"), dtype=torch.bfloat16, device="cuda")
        ldmoe.moe(x, W[0], W[1], ids, wts, out=out)
        check("%s: out-of-range ids contribute nothing" % tag, out, ref)
        report(bool((out[11] == 0).all()), "%s: token with no valid id gets a zero row" % tag)
        report(ldmoe.moe_errors() == ldmoe.MOE_ERR_BAD_ID, "%s: error flag set by out-of-range ids" % tag)
        report(ldmoe.moe_errors() == 0, "%s: error flag cleared by moe_errors" % tag)
        ids2, _ = make_routing(gen, T, E, k)
        ldmoe.moe(x, W[0], W[1], ids2, wts)
        report(ldmoe.moe_errors() == 0, "%s: no flag from valid ids" % tag)


def test_all_invalid(gen):
    """No valid id in the whole launch (expert parallelism marks other ranks' experts -1): no tile
    at all, zero rows, the flag, and the next launch on the same workspace still right."""
    for T, E, H, I, k, D in ((5, 16, 256, 128, 4, 0), (300, 4, 256, 128, 2, 2)):
        x = torch.randn((T, H), generator=gen).to(torch.bfloat16).cuda()
        w13, w2 = make_weights(gen, E, H, I)
        W = (ldmoe.pack_moe(w13, w2, D=D), None) if D else (w13, w2)
        ids, wts = make_routing(gen, T, E, k)
        bad = torch.full_like(ids, -1)
        ldmoe.moe_errors()
        out = torch.full((T, H), float("nan"), dtype=torch.bfloat16, device="cuda")
        ldmoe.moe(x, W[0], W[1], bad, wts, out=out)
        torch.cuda.synchronize()
        tag = "T%d E%d all ids -1" % (T, E)
        report(bool((out == 0).all()), "%s: every row zero" % tag)
        report(ldmoe.moe_errors() == ldmoe.MOE_ERR_BAD_ID, "%s: error flag set" % tag)
        out = torch.full((T, H), float("nan"), dtype=torch.bfloat16, device="cuda")
        ldmoe.moe(x, W[0], W[1], ids, wts, out=out)
        check("%s: the next launch with valid ids" % tag, out, reference(x, w13, w2, ids, wts))


def quant_blocks(w):
    """[E, R, K] -> e4m3 [E, R, K], fp32 scales [E, R/128, K/128] (amax / 448 per 128 x 128 block),
    and the dequantized fp32 weights the kernel multiplies by."""
    E, R, K = w.shape
    b = w.float().view(E, R // 128, 128, K // 128, 128)
    s = (b.abs().amax(dim=(2, 4)) / 448.0).clamp(min=1e-12)
    q = (b / s[:, :, None, :, None]).to(torch.float8_e4m3fn)
    deq = (q.float() * s[:, :, None, :, None]).view(E, R, K)
    return q.view(E, R, K), s.contiguous(), deq


def quant_rowwise(w):
    """[E, R, K] -> e4m3, fp32 scales [E, R] (amax / 448 per weight row), the dequantized weights."""
    s = (w.float().abs().amax(dim=2) / 448.0).clamp(min=1e-12)
    q = (w.float() / s[:, :, None]).to(torch.float8_e4m3fn)
    return q, s.contiguous(), q.float() * s[:, :, None]


def test_fp8(gen):
    """Weight-only FP8 (ldmoe_moe_fp8): e4m3 weights with 128 x 128 block or per-row scales against the fp32
    reference of the dequantized weights; the decode tile, the mma.sync prefill tile (H % 256 != 0) and the
    128- and 256-row wgmma tiles (gathered and from x's image), D = 1 and 2; the argument checks."""
    for T, E, H, I, k, sc in ((1, 8, 256, 128, 2, "block"), (5, 16, 512, 256, 4, "block"), (200, 8, 384, 256, 2, "block"),
                              (3, 16, 256, 128, 4, "row"), (150, 8, 256, 256, 2, "row"), (333, 4, 512, 1024, 2, "block"),
                              (260, 16, 512, 384, 6, "row"), (800, 4, 512, 256, 1, "block"), (450, 2, 1024, 512, 1, "row"),
                              (400, 2, 512, 1792, 1, "block"), (300, 8, 256, 256, 2, "block")):
        x = torch.randn((T, H), generator=gen).to(torch.bfloat16).cuda()
        w13, w2 = make_weights(gen, E, H, I)
        if sc == "row":   # rows 8x apart at most, so a row read with another row's scale is far off
            w13 = (w13.float() * 2.0 ** torch.randint(-3, 1, (E, 2 * I, 1), generator=gen).cuda()).to(torch.bfloat16)
            w2 = (w2.float() * 2.0 ** torch.randint(-3, 1, (E, H, 1), generator=gen).cuda()).to(torch.bfloat16)
        qf = quant_blocks if sc == "block" else quant_rowwise
        q13, s13, d13 = qf(w13)
        q2, s2, d2 = qf(w2)
        ids, wts = make_routing(gen, T, E, k)
        ref = reference(x, d13, d2, ids, wts)
        base = None
        for D in (1, 2):
            if H % (64 * D) or I % (64 * D):   # the library's rule; a slice may split a scale block
                continue
            pk = ldmoe.pack_moe(q13, q2, D=D)
            out = torch.full((T, H), float("nan"), dtype=torch.bfloat16, device="cuda")
            ldmoe.moe(x, pk, None, ids, wts, out=out, w13_scale=s13, w2_scale=s2)
            tag = "fp8 %s T%d E%d H%d I%d k%d D%d" % (sc, T, E, H, I, k, D)
            if check(tag, out, ref) and base is not None:
                report(torch.equal(out.view(torch.int16), base.view(torch.int16)), "%s bit-identical to D = 1" % tag)
            base = out.clone() if base is None else base
    pk = ldmoe.pack_moe(q13, q2)
    _, b13, _ = quant_blocks(w13)   # the last case's weights with block and with row scales, for the refusals
    _, b2, _ = quant_blocks(w2)
    _, s13, _ = quant_rowwise(w13)
    _, s2, _ = quant_rowwise(w2)
    for kw, what in (({}, "no scales"), ({"w13_scale": b13}, "no w2_scale"),
                     ({"w13_scale": b13[:, :1].contiguous(), "w2_scale": b2}, "block w13_scale of the wrong shape"),
                     ({"w13_scale": s13[:, :1].contiguous(), "w2_scale": s2}, "rowwise w13_scale of the wrong shape"),
                     ({"w13_scale": s13, "w2_scale": b2}, "rowwise w13_scale with a block w2_scale")):
        try:
            ldmoe.moe(x, pk, None, ids, wts, **kw)
            report(False, "fp8 with %s refused" % what)
        except ValueError:
            report(True, "fp8 with %s refused" % what)


def quant_tokens(v, blk):
    """[R, K] fp32 -> the values the FP8-token tile computes with: e4m3 of v * (448 / amax) per row and
    blk k, times amax / 448 (the kernel's quantization of the routed x, blk 128, and of h, blk 64)."""
    R, K = v.shape
    b = v.float().view(R, K // blk, blk)
    amax = b.abs().amax(dim=2, keepdim=True)
    inv = torch.where(amax > 0, 448.0 / amax, torch.zeros_like(amax))
    q = (b * inv).to(torch.float8_e4m3fn).float()
    return (q * (amax / 448.0)).view(R, K)


def test_fp8_tokens(gen):
    """FP8 tokens (tokens="fp8", LDMOE_FP8_TOKENS_E4M3): where a wgmma tile runs, the 128-row e4m3 x e4m3
    tile against reference(quant=quant_tokens) (x and h quantized per 128 and 64 k as the kernel does; a rounding flip of an h
    value moves out by one e4m3 step of that term, so TOL_A8 = 3e-2) and, looser (1e-1), against the
    unquantized reference: a wrong scale or block would be far off both. Cases from both weight-only
    wgmma tiles' shapes, block and row scales, k = 1..6, all tokens on one expert, D = 1 and 2 bit for
    bit, repeats bit for bit; a decode and an mma.sync case keep bf16 tokens (weight-only reference);
    the refusals."""
    TOL_A8 = 3e-2
    for T, E, H, I, k, sc, kind in ((333, 4, 512, 1024, 2, "block", "random"), (800, 4, 512, 256, 1, "block", "random"),
                                    (600, 8, 512, 256, 4, "row", "one"), (260, 16, 512, 384, 6, "row", "random"),
                                    (5, 16, 512, 256, 4, "block", "random"), (200, 8, 384, 256, 2, "block", "random")):
        wgmma = T * k > 8 * E and H % 256 == 0   # layer_tile's wgmma rule at D <= 2 (test-moe-layer-sched)
        x = torch.randn((T, H), generator=gen).to(torch.bfloat16).cuda()
        w13, w2 = make_weights(gen, E, H, I)
        if sc == "row":
            w13 = (w13.float() * 2.0 ** torch.randint(-3, 1, (E, 2 * I, 1), generator=gen).cuda()).to(torch.bfloat16)
            w2 = (w2.float() * 2.0 ** torch.randint(-3, 1, (E, H, 1), generator=gen).cuda()).to(torch.bfloat16)
        qf = quant_blocks if sc == "block" else quant_rowwise
        q13, s13, d13 = qf(w13)
        q2, s2, d2 = qf(w2)
        ids, wts = make_routing(gen, T, E, k, kind)
        ref8 = reference(x, d13, d2, ids, wts, quant_tokens if wgmma else None)
        tag = "fp8 tokens %s T%d E%d H%d I%d k%d %s%s" % (sc, T, E, H, I, k, kind, "" if wgmma else " (bf16 tokens: not a wgmma tile)")
        base = None
        for D in (1, 2):
            pk = ldmoe.pack_moe(q13, q2, D=D)
            out = torch.full((T, H), float("nan"), dtype=torch.bfloat16, device="cuda")
            ldmoe.moe(x, pk, None, ids, wts, out=out, w13_scale=s13, w2_scale=s2, tokens="fp8")
            t = "%s D%d" % (tag, D)
            global TOL_REL
            saved, TOL_REL = TOL_REL, TOL_A8 if wgmma else TOL_REL
            try:
                ok = check(t, out, ref8)
            finally:
                TOL_REL = saved
            if ok and wgmma:
                ref = reference(x, d13, d2, ids, wts)
                err = (out.float() - ref).abs().max().item()
                report(err <= 1e-1 * ref.abs().max().item(), "%s near the unquantized reference" % t, "max err %.3g" % err)
            if ok:
                again = torch.full_like(out, float("nan"))
                ldmoe.moe(x, pk, None, ids, wts, out=again, w13_scale=s13, w2_scale=s2, tokens="fp8")
                report(torch.equal(out.view(torch.int16), again.view(torch.int16)), "%s repeat bit-identical" % t)
            if ok and base is not None:
                report(torch.equal(out.view(torch.int16), base.view(torch.int16)), "%s bit-identical to D = 1" % t)
            if ok:
                DIGESTS.append("%s %s" % (t, hashlib.sha256(out.view(torch.int16).cpu().numpy().tobytes()).hexdigest()))
            base = out.clone() if base is None else base
    for kw, what in (({"tokens": "int8", "w13_scale": s13, "w2_scale": s2}, "tokens='int8'"),):
        try:
            ldmoe.moe(x, ldmoe.pack_moe(q13, q2), None, ids, wts, **kw)
            report(False, "fp8 with %s refused" % what)
        except ValueError:
            report(True, "fp8 with %s refused" % what)
    try:
        ldmoe.moe(x, ldmoe.pack_moe(w13, w2), None, ids, wts, tokens="fp8")
        report(False, "tokens='fp8' with bf16 weights refused")
    except ValueError:
        report(True, "tokens='fp8' with bf16 weights refused")


def test_fp8_x(gen):
    """x given in e4m3 with its 1 x 128 scales (LDMOE_FP8_TOKENS_E4M3_X). Exact cases: each 128-k block of x
    holds +-448 and a power-of-two scale, so x * s is exact in bf16 and the kernel's own quantization of that
    bf16 x gives back the same e4m3 and scales: out must equal the bf16-x call's (tokens="fp8") bit for bit on
    every tile (the FP8-token tile copies x as it is; decode and mma.sync read it dequantized). Random scales:
    against the reference of x8 * s (h through quant_tokens on the FP8-token tile: TOL_A8), repeats bit for bit. A CUDA graph
    replay and the refusals."""
    f8 = torch.float8_e4m3fn

    def make_x(T, H, exact):
        q = (torch.randn((T, H), generator=gen) * 120).clamp(-448, 448)
        if exact:   # one element of each 128-k block at +-448: the block's amax
            q.view(T, H // 128, 128)[:, :, 0] = 448.0 * torch.sign(torch.randn((T, H // 128), generator=gen) + 1e-3)
            s = 2.0 ** torch.randint(-9, -3, (T, H // 128), generator=gen).float()
        else:
            s = torch.rand((T, H // 128), generator=gen) * 0.01 + 1e-3
        q8 = q.to(f8).cuda()
        s = s.cuda().contiguous()
        xb = (q8.float() * s.repeat_interleave(128, dim=1)).to(torch.bfloat16)
        return q8, s, xb

    TOL_A8 = 3e-2
    for T, E, H, I, k, sc in ((333, 4, 512, 1024, 2, "block"), (600, 8, 512, 256, 4, "row"), (1, 8, 256, 128, 2, "block"),
                              (5, 16, 512, 256, 4, "block"), (200, 8, 384, 256, 2, "block")):
        wgmma = T * k > 8 * E and H % 256 == 0
        w13, w2 = make_weights(gen, E, H, I)
        qf = quant_blocks if sc == "block" else quant_rowwise
        q13, s13, d13 = qf(w13)
        q2, s2, d2 = qf(w2)
        ids, wts = make_routing(gen, T, E, k)
        tag = "fp8 x %s T%d E%d H%d I%d k%d (%s)" % (sc, T, E, H, I, k, "the FP8-token tile" if wgmma else "bf16 tokens")
        for D in (1, 2):
            pk = ldmoe.pack_moe(q13, q2, D=D)
            q8, s, xb = make_x(T, H, True)
            out = torch.full((T, H), float("nan"), dtype=torch.bfloat16, device="cuda")
            ldmoe.moe(q8, pk, None, ids, wts, out=out, w13_scale=s13, w2_scale=s2, x_scale=s)
            want = torch.full_like(out, float("nan"))
            ldmoe.moe(xb, pk, None, ids, wts, out=want, w13_scale=s13, w2_scale=s2, tokens="fp8")
            ok = bool(torch.isfinite(out.float()).all()) and torch.equal(out.view(torch.int16), want.view(torch.int16))
            report(ok, "%s D%d exact: bit-identical to bf16 x = x8 * s" % (tag, D),
                   "" if ok else "max diff %.3g" % (out.float() - want.float()).abs().max().item())
            q8, s, xb = make_x(T, H, False)
            ldmoe.moe(q8, pk, None, ids, wts, out=out, w13_scale=s13, w2_scale=s2, x_scale=s)
            # the FP8-token tile computes with x8 * s unrounded (and h quantized as quant_tokens), the others with xb
            xq = (q8.float() * s.repeat_interleave(128, dim=1)) if wgmma else xb
            ref = reference(xq, d13, d2, ids, wts, (lambda v, blk: v if blk == 128 else quant_tokens(v, blk)) if wgmma else None)
            global TOL_REL
            saved, TOL_REL = TOL_REL, TOL_A8 if wgmma else TOL_REL
            try:
                ok = check("%s D%d random scales" % (tag, D), out, ref)
            finally:
                TOL_REL = saved
            if ok:
                again = torch.full_like(out, float("nan"))
                ldmoe.moe(q8, pk, None, ids, wts, out=again, w13_scale=s13, w2_scale=s2, tokens="fp8", x_scale=s)
                report(torch.equal(out.view(torch.int16), again.view(torch.int16)), "%s D%d repeat bit-identical" % (tag, D))
                DIGESTS.append("%s D%d %s" % (tag, D, hashlib.sha256(out.view(torch.int16).cpu().numpy().tobytes()).hexdigest()))
    # a graph captured once replays new x and scales (the decode tile: its extra grid barrier and the workspace)
    T, E, H, I, k = 5, 16, 512, 256, 4
    w13, w2 = make_weights(gen, E, H, I)
    q13, s13, _ = quant_blocks(w13)
    q2, s2, _ = quant_blocks(w2)
    pk = ldmoe.pack_moe(q13, q2)
    ids, wts = make_routing(gen, T, E, k)
    q8, s, _ = make_x(T, H, False)
    out = torch.empty((T, H), dtype=torch.bfloat16, device="cuda")
    st = torch.cuda.Stream()   # the workspace is per stream: sized on the capturing one
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):
        ldmoe.moe(q8, pk, None, ids, wts, out=out, w13_scale=s13, w2_scale=s2, x_scale=s)
    st.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=st):
        ldmoe.moe(q8, pk, None, ids, wts, out=out, w13_scale=s13, w2_scale=s2, x_scale=s)
    n8, ns, _ = make_x(T, H, False)
    q8.copy_(n8)
    s.copy_(ns)
    g.replay()
    want = torch.empty_like(out)
    ldmoe.moe(q8, pk, None, ids, wts, out=want, w13_scale=s13, w2_scale=s2, x_scale=s)
    torch.cuda.synchronize()
    report(torch.equal(out.view(torch.int16), want.view(torch.int16)), "fp8 x graph replay of new x and scales bit-identical")
    xb = q8.float().to(torch.bfloat16)
    for args, kw, what in (((q8,), {"w13_scale": s13, "w2_scale": s2}, "e4m3 x without x_scale"),
                           ((xb,), {"w13_scale": s13, "w2_scale": s2, "x_scale": s, "tokens": "fp8"}, "x_scale with bf16 x"),
                           ((q8,), {"w13_scale": s13, "w2_scale": s2, "x_scale": s, "tokens": "bf16"}, "e4m3 x with tokens='bf16'"),
                           ((q8,), {"w13_scale": s13, "w2_scale": s2, "x_scale": s[:, :1].contiguous()}, "x_scale of the wrong shape"),
                           ((q8,), {"w13_scale": s13, "w2_scale": s2, "x_scale": s.double()}, "x_scale not fp32"),
                           ((q8,), {"x_scale": s}, "e4m3 x with bf16 weights")):
        try:
            ldmoe.moe(args[0], pk if "w13_scale" in kw else ldmoe.pack_moe(w13, w2), None, ids, wts, **kw)
            report(False, "fp8 x: %s refused" % what)
        except (ValueError, TypeError):
            report(True, "fp8 x: %s refused" % what)


def test_graph(gen, decode):
    E, H, I, k = (64, 512, 256, 6) if decode else (8, 256, 384, 2)
    T = 3 if decode else 200
    x = torch.randn((T, H), generator=gen).to(torch.bfloat16).cuda()
    w13, w2 = make_weights(gen, E, H, I)
    pk = ldmoe.pack_moe(w13, w2, D=2)
    ids, wts = make_routing(gen, T, E, k)
    out = torch.empty((T, H), dtype=torch.bfloat16, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    ok = True
    with torch.cuda.stream(s):
        ldmoe.moe_reserve(T, E, H, I, k)
        ldmoe.moe(x, pk, None, ids, wts, out=out)   # warm-up on the capture stream
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            ldmoe.moe(x, pk, None, ids, wts, out=out)
    torch.cuda.current_stream().wait_stream(s)
    for rep in range(4):
        nx = torch.randn((T, H), generator=gen).to(torch.bfloat16).cuda()
        nids, nwts = make_routing(gen, T, E, k, ["random", "one", "sparse", "dup"][rep])
        x.copy_(nx); ids.copy_(nids); wts.copy_(nwts)
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        ok &= check("graph replay %d (%s) new routing" % (rep, "decode" if decode else "prefill"),
                    out, reference(x, w13, w2, ids, wts))
    return ok


def test_errors():
    dev = "cuda"
    x = torch.zeros((4, 256), dtype=torch.bfloat16, device=dev)
    w13 = torch.zeros((8, 256, 256), dtype=torch.bfloat16, device=dev)
    w2 = torch.zeros((8, 256, 128), dtype=torch.bfloat16, device=dev)
    ids = torch.zeros((4, 2), dtype=torch.int32, device=dev)
    wts = torch.zeros((4, 2), dtype=torch.float32, device=dev)
    cases = [
        ("x float32", (x.float(), w13, w2, ids, wts), TypeError),
        ("ids int64", (x, w13, w2, ids.long(), wts), TypeError),
        ("weights fp16", (x, w13, w2, ids, wts.half()), TypeError),
        ("x non-contiguous", (torch.zeros((256, 4), dtype=torch.bfloat16, device=dev).T, w13, w2, ids, wts), ValueError),
        ("H mismatch", (torch.zeros((4, 128), dtype=torch.bfloat16, device=dev), w13, w2, ids, wts), ValueError),
        ("w2 shape", (x, w13, w2[:, :, :64], ids, wts), ValueError),
        ("ids/weights shapes", (x, w13, w2, ids, wts[:, :1]), ValueError),
        ("k = 17", (x, w13, w2, torch.zeros((4, 17), dtype=torch.int32, device=dev),
                    torch.zeros((4, 17), dtype=torch.float32, device=dev)), ValueError),
        ("E = 257", (x, torch.zeros((257, 128, 256), dtype=torch.bfloat16, device=dev),
                     torch.zeros((257, 256, 64), dtype=torch.bfloat16, device=dev), ids, wts), ValueError),
        ("I not a multiple of 64", (x, torch.zeros((8, 96, 256), dtype=torch.bfloat16, device=dev),
                                    torch.zeros((8, 256, 48), dtype=torch.bfloat16, device=dev), ids, wts), ValueError),
        ("x on the CPU", (x.cpu(), w13, w2, ids, wts), ValueError),
    ]
    for name, args, exc in cases:
        try:
            ldmoe.moe(*args)
            report(False, "argument check: %s" % name, "no error")
        except exc as e:
            report(True, "argument check: %s" % name, str(e)[:80])
        except Exception as e:   # noqa: BLE001
            report(False, "argument check: %s" % name, "wrong exception %r" % e)
    try:
        ldmoe.moe(x, w13, w2, ids, wts, mode="nope")
        report(False, "argument check: mode", "no error")
    except ValueError:
        report(True, "argument check: mode")
    try:
        ldmoe.pack_moe(w13, w2, D=3)
        report(False, "argument check: pack D=3 (I not a multiple of 192)", "no error")
    except ldmoe.LdmoeError as e:
        report(True, "argument check: pack D=3", str(e)[:80])


def main():
    global torch, ldmoe
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--result")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--digest")
    ap.add_argument("--bound", action="store_true",
                    help="fail unless the shim bound this process to a subset of the SMs (the bound run of the digest pair)")
    ap.add_argument("--tiny", action="store_true", help="small cases, the bad-id tests and FP8 (for compute-sanitizer)")
    a = ap.parse_args()
    import torch as _t
    torch = _t
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "kernels", "moe"))
    import ldmoe as _l
    ldmoe = _l
    gen = torch.Generator().manual_seed(a.seed)
    print("ldmoe %s from %s on %s" % (ldmoe.version(), ldmoe.library_path(), torch.cuda.get_device_name()), flush=True)
    if a.bound:   # without it, the digest comparison would compare two unbound runs and pass
        torch.zeros(1, device="cuda")   # the first context: the shim publishes the map and the bound set
        t = ldmoe.get_topology()
        ok = (t.magic == ldmoe.TOPOLOGY_MAGIC and t.version >= 2 and bool(t.flags & ldmoe.TOPO_BOUND)
              and 0 < t.bound_sms < t.num_sms)
        report(ok, "bound: the shim published a bound set smaller than the GPU",
               "magic %#x version %d flags %#x bound_sms %d of %d" % (t.magic, t.version, t.flags, t.bound_sms, t.num_sms))
    cases = [
        # (T, E, H, I, k, kind)
        (1, 8, 256, 128, 2, "random"),
        (1, 128, 2048, 768, 8, "random"),
        (5, 16, 512, 192, 4, "random"),
        (37, 64, 256, 320, 6, "sparse"),
        (100, 4, 128, 64, 1, "random"),
        (17, 16, 256, 128, 3, "one"),
        (9, 8, 256, 128, 4, "dup"),
        (300, 32, 512, 256, 8, "random"),   # prefill tiles (T*k > 16 E)
        (129, 8, 256, 384, 2, "one"),       # prefill, one expert gets every token
        (400, 8, 512, 256, 4, "random"),    # prefill of >= 192 pairs per expert, H and 2I multiples of 512: the 256-row tile
        # the wgmma tiles above gather GEMM1's token rows from x (2I / rows <= 12 n-blocks, layer_gather);
        # these two read them from the routed x's image (14 n-blocks): the 128-row tile, the 256-row tile
        (300, 8, 256, 896, 2, "random"),
        (700, 2, 512, 1792, 1, "random"),
        (200, 8, 384, 128, 2, "random"),    # prefill: H % 256 != 0 takes the mma.sync 64 x 64 tile at every D
        (50, 32, 256, 128, 16, "random"),
        (7, 256, 256, 128, 8, "random"),
    ]
    if a.quick:
        cases = cases[:3] + cases[7:8]
    steps = [lambda c=c: run_case(gen, *c[:5], kind=c[5], modes=("auto", "aware", "unaware", "static")) for c in cases]
    # gathered, I % 128 = 64: GEMM2's last stage half full (h's zero box written without the x image)
    steps += [lambda: run_case(gen, 300, 8, 256, 320, 2, layouts=("plain", "packed1"), modes=("auto", "unaware"))]
    steps += [lambda: test_repeat(gen), test_t0, lambda: test_bad_ids(gen), lambda: test_all_invalid(gen),
              lambda: test_fp8(gen), lambda: test_fp8_tokens(gen), lambda: test_fp8_x(gen), lambda: test_graph(gen, True),
              lambda: test_graph(gen, False),
              test_errors]
    if a.tiny:   # a local-routing decode case, global-routing prefill cases (each prefill tile), the bad ids
        steps = [lambda: run_case(gen, 5, 16, 512, 192, 4, layouts=("plain", "packed1")),
                 lambda: run_case(gen, 100, 4, 128, 64, 1, kind="one", layouts=("plain", "packed1")),
                 lambda: run_case(gen, 100, 4, 256, 128, 1, layouts=("packed1", "packed2")),
                 lambda: run_case(gen, 400, 8, 512, 256, 4, layouts=("packed1", "packed2")),
                 lambda: run_case(gen, 300, 8, 256, 320, 2, layouts=("plain", "packed1")),
                 lambda: run_case(gen, 300, 8, 256, 896, 2, layouts=("packed1",)),
                 lambda: run_case(gen, 700, 2, 512, 1792, 1, layouts=("packed1",)),
                 lambda: test_bad_ids(gen), lambda: test_all_invalid(gen), lambda: test_fp8(gen), lambda: test_fp8_tokens(gen),
                 lambda: test_fp8_x(gen)]
    for st in steps:
        try:
            st()
        except Exception:   # noqa: BLE001
            report(False, "exception", traceback.format_exc().replace("\n", " | "))
    if a.digest:
        text = "\n".join(DIGESTS) + "\n"
        if os.path.exists(a.digest):
            with open(a.digest) as f:   # test-only file, written by this same script
                want = f.read()
            report(want == text, "digests equal to %s (other grid / binding)" % a.digest)
        else:
            with open(a.digest, "w") as f:
                f.write(text)
    print("%d passed, %d failed" % (PASSED, FAILED), flush=True)
    if a.result:
        with open(a.result, "w") as f:
            f.write("%d %d\n" % (PASSED, FAILED))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
