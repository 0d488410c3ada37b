#!/usr/bin/env python3
"""test_moe.py — GPU tests of libldmoe (needs an NVIDIA GPU, PyTorch).

Correctness against an fp32 reference on fresh random inputs per case (random routing with
empty experts and counts that are not tile multiples; the three weight layouts; all modes and tiles; the four
placement states via a fake published map), output poisoned with NaN before every run, and
scheduler tests: every tile computed exactly once (debug counters) under local-first, stealing,
unaware and static schedules, with unbalanced (74/66), single-domain and absent maps, with and
without the static waves of SM-ordered ranks (launches of two waves or more that share weight
blocks; the 74/66 map names more SMs than the GPU has, so some ranks are swept by other CTAs).

Two builds: without --lab, libldmoe.so ($LDMOE_LIB) with its tiles (the ones AUTO can pick) and
its public API; with --lab, the lab build (bench/moe/lab, $LDMOE_LAB_LIB) with every tile and the
parts that need the lab's debug interface (per-tile counters, timeline, tune bits, topology
override: the scheduler, states, tune and trace tests). `make test-gpu-moe` runs both.

FP8 (ldmoe.grouped_mm_fp8; doc/moe.md "FP8"; not yet run on a GPU when written): the e4m3 packer
and converters byte for byte against tests/moe/ldmoe_ref.py, and the GEMM for both scaling
schemes, every layout, mode and FP8 tile, on random e4m3 data with random scales per case
(2^-4..2^4) and random routing, outputs poisoned and checked fully written, against the fp64
product of the dequantized operands with doc/moe.md's bound (ldmoe_ref.check_fp8). --fp8-only
runs just those. Also: ldmoe.quantize_fp8 bit for bit against ldmoe.quantize_rowwise/_block, bf16
activations through grouped_mm_fp8, and (--lab) the FP8 tiles' exactly-once counters under every
mode and map.

Usage: test_moe.py [--lab] [--result FILE] [--quick] [--seed N] [--fp8-only]   (FILE gets "<passed> <failed>")
"""
import argparse
import itertools
import math
import os
import sys
import traceback

# torch and ldmoe are imported by main() after the arguments are parsed, so that --help works
# on a machine without them.
torch = ldmoe = None
LAB = False

PASSED, FAILED = 0, 0
TOL = 1e-2


def report(ok, name, detail=""):
    global PASSED, FAILED
    if ok:
        PASSED += 1
    else:
        FAILED += 1
    print("%s %s %s" % ("PASS" if ok else "FAIL", name, detail), flush=True)


def routing(gen, T, E, zero_frac=0.25):
    """Random counts summing to T with some experts empty; returns (offs int32 cuda, counts)."""
    alive = [e for e in range(E) if torch.rand((), generator=gen).item() >= zero_frac] or [0]
    cuts = sorted(torch.randint(0, T + 1, (len(alive) - 1,), generator=gen).tolist())
    parts = [b - a for a, b in zip([0] + cuts, cuts + [T])]
    counts = [0] * E
    for e, c in zip(alive, parts):
        counts[e] = c
    offs, run = [], 0
    for c in counts:
        run += c
        offs.append(run)
    return torch.tensor(offs, dtype=torch.int32, device="cuda"), counts


def reference(x, w, counts):
    out = torch.empty((x.shape[0], w.shape[1]), dtype=torch.float32, device=x.device)
    s = 0
    for e, c in enumerate(counts):
        if c:
            out[s:s + c] = x[s:s + c].float() @ w[e].float().t()
        s += c
    return out


def check_out(name, y, ref, T_used):
    body = y[:T_used].float()
    tail_ok = bool(torch.isnan(y[T_used:].float()).all()) if T_used < y.shape[0] else True
    finite = bool(torch.isfinite(body).all())
    err = (torch.linalg.norm(body - ref[:T_used]) / torch.linalg.norm(ref[:T_used]).clamp_min(1e-30)).item() \
        if T_used else 0.0
    ok = finite and tail_ok and err < TOL
    report(ok, name, "rel_err=%.2e finite=%s untouched_tail=%s" % (err, finite, tail_ok))
    return ok


def fake_map(num_sms, split, seed):
    """Map of num_sms SMs, whole TPCs, `split[d]` SMs in domain d, TPCs assigned at random."""
    g = torch.Generator().manual_seed(seed)
    tpcs = torch.randperm(num_sms // 2, generator=g).tolist()
    dom = [0] * num_sms
    k = 0
    for d, n in enumerate(split):
        for t in tpcs[k:k + n // 2]:
            dom[2 * t] = dom[2 * t + 1] = d
        k += n // 2
    return dom


def test_converter(gen):
    for (E, N, K, D) in [(3, 64, 72, 2), (8, 1536, 256, 2), (2, 96, 8, 4)]:
        w = torch.randn((E, N, K), generator=gen, device="cpu").to(torch.bfloat16).cuda()
        wl = ldmoe.to_localized(w, D)
        ref = w.view(E, D, N // D, K).permute(1, 0, 2, 3).contiguous()
        back = ldmoe.to_plain(wl)
        torch.cuda.synchronize()
        report(torch.equal(wl, ref) and torch.equal(back, w), "convert E=%d N=%d K=%d D=%d" % (E, N, K, D))


def in_layout(w, layout, D=2):
    """The [E, N, K] weights in `layout` (what grouped_mm takes for it)."""
    if layout == "localized":
        return ldmoe.to_localized(w, D)
    if layout == "packed":
        return ldmoe.pack(w, D)
    return w


def packed_reference(w, D):
    """The packed layout (ldmoe.h) built with torch ops, independently of the library's packer:
    zero-padded [D, E, rb*128, kb*64], boxes of 128 x 64 in [D, E, rb, kb] order, and in each box
    16-byte chunk c of row r stored at chunk position c ^ (r % 8)."""
    E, N, K = w.shape
    ND = N // D
    rb, kb = -(-ND // 128), -(-K // 256) * 4
    pad = torch.zeros((D, E, rb * 128, kb * 64), dtype=w.dtype, device=w.device)
    pad[:, :, :ND, :K] = w.view(E, D, ND, K).permute(1, 0, 2, 3)
    boxes = pad.view(D, E, rb, 128, kb, 8, 8).permute(0, 1, 2, 4, 3, 5, 6)   # [D, E, rb, kb, 128 rows, 8 chunks, 8]
    r = torch.arange(128, device=w.device).view(128, 1)
    src_chunk = torch.arange(8, device=w.device).view(1, 8) ^ (r % 8)      # position p holds chunk p ^ (r % 8)
    return boxes[:, :, :, :, r, src_chunk, :].contiguous().view(-1)


def test_pack(gen):
    for (E, N, K, D) in [(3, 64, 72, 2), (8, 1536, 256, 2), (2, 96, 8, 4), (5, 384, 320, 1), (4, 520, 1032, 2)]:
        w = torch.randn((E, N, K), generator=gen, device="cpu").to(torch.bfloat16).cuda()
        ref = packed_reference(w, D)
        for src in ("plain", "localized"):
            wp = ldmoe.pack(w if src == "plain" else ldmoe.to_localized(w, D), D if src == "plain" else None)
            torch.cuda.synchronize()
            got = wp.data.view(torch.bfloat16)
            ok = got.numel() == ref.numel() and torch.equal(got, ref) and \
                wp.data.numel() == ldmoe.packed_bytes(E, N, K, D) and (wp.E, wp.N, wp.K, wp.D) == (E, N, K, D)
            report(ok, "pack from %s E=%d N=%d K=%d D=%d" % (src, E, N, K, D),
                   "%d bytes, reference %d" % (got.numel() * 2, ref.numel() * 2))
        # Into a caller's buffer (poisoned first): the same bytes, in that very buffer.
        buf = torch.full((ldmoe.packed_bytes(E, N, K, D),), 0xA5, dtype=torch.uint8, device="cuda")
        wp = ldmoe.pack(w, D, out=buf)
        torch.cuda.synchronize()
        report(wp.data.data_ptr() == buf.data_ptr() and torch.equal(buf.view(torch.bfloat16), ref),
               "pack into out= E=%d N=%d K=%d D=%d" % (E, N, K, D), "bytes differ from the reference")
    w4 = torch.zeros((2, 3, 32, 64), dtype=torch.bfloat16, device="cuda")
    wp = ldmoe.pack(torch.zeros((1, 320, 64), dtype=torch.bfloat16, device="cuda"), 1)
    x4 = torch.zeros((4, 64), dtype=torch.bfloat16, device="cuda")
    o1 = torch.tensor([4], dtype=torch.int32, device="cuda")
    for what, fn, exc in [("D mismatch", lambda: ldmoe.pack(w4, 3), ValueError),
                          ("D out of range", lambda: ldmoe.pack(w4[0], 0), ValueError),
                          ("sizes not matching the buffer (D=2 on a D=1 pack)",
                           lambda: ldmoe.PackedWeights(wp.data, 1, 320, 64, 2), ValueError),
                          ("PackedWeights with layout localized",
                           lambda: ldmoe.grouped_mm(x4, wp, o1, layout="localized"), TypeError),
                          ("PackedWeights read-only", lambda: setattr(wp, "D", 2), AttributeError),
                          ("out of the wrong size", lambda: ldmoe.pack(w4, out=torch.empty(
                              wp.data.numel() + 16, dtype=torch.uint8, device="cuda")), ValueError),
                          ("out not uint8", lambda: ldmoe.pack(w4, out=torch.empty(
                              ldmoe.packed_bytes(3, 64, 64, 2) // 2, dtype=torch.bfloat16, device="cuda")), ValueError),
                          ("out on the CPU", lambda: ldmoe.pack(w4, out=torch.empty(
                              ldmoe.packed_bytes(3, 64, 64, 2), dtype=torch.uint8)), ValueError),
                          ("N % D", lambda: ldmoe.pack(torch.zeros((2, 30, 64), dtype=torch.bfloat16, device="cuda"), 4),
                           ValueError),
                          ("layout packed needs PackedWeights", lambda: ldmoe.grouped_mm(
                              torch.zeros((4, 64), dtype=torch.bfloat16, device="cuda"), w4,
                              torch.tensor([2, 4, 4], dtype=torch.int32, device="cuda"), layout="packed"), TypeError)]:
        try:
            fn()
            report(False, "pack error " + what, "no error raised")
        except exc as e:
            report(True, "pack error " + what, str(e))


def test_packed_domains(gen):
    """Packed weights for D = 1, 2 and 4 with a partial last 128-row block in every slice (N/D =
    544, 272, 136) and K not a multiple of 64, through tiles of 64, 128 and 256 weight rows,
    both bodies, against the fp32 reference."""
    T, E, N, K = 300, 4, 544, 200
    tiles = [t for t in ("auto", "ws128x64c16", "ws128x128c16", "ws128x16", "ws256x64", "ws256x128ew", "ws128x128",
                         "64x16k4", "64x64k4", "128x64k2", "128x128", "wg256x128k2") if t in ldmoe.TILES]
    modes = ["aware", "unaware", "static"]
    for D in (1, 2, 4):
        for ti, tile in enumerate(tiles):
            mode = modes[(D + ti) % 3]
            x = (torch.randn((T, K), generator=gen) * 0.5).to(torch.bfloat16).cuda()
            w = (torch.randn((E, N, K), generator=gen) / math.sqrt(K)).to(torch.bfloat16).cuda()
            offs, counts = routing(gen, T - 11, E)
            y = torch.full((T, N), float("nan"), dtype=torch.bfloat16, device="cuda")
            ldmoe.grouped_mm(x, ldmoe.pack(w, D), offs, mode=mode, tile=tile, out=y)
            torch.cuda.synchronize()
            check_out("packed D=%d N/D=%d tile=%s mode=%s" % (D, N // D, tile, mode), y, reference(x, w, counts),
                      sum(counts))


# ---- FP8 ---------------------------------------------------------------------------------------

def rand_e4m3(gen, shape):
    """Random float8_e4m3fn values spread over the format's range (no NaN), on the GPU."""
    v = torch.randn(shape, generator=gen) * 2.0 ** torch.randint(-6, 7, shape, generator=gen).float()
    return v.clamp(-448, 448).to(torch.float8_e4m3fn).cuda()


def rand_scales(gen, shape):
    """fp32 scales drawn per element from 2^-4 .. 2^4 (log-uniform), on the GPU."""
    return (2.0 ** (torch.rand(shape, generator=gen) * 8 - 4)).cuda()


def fp8_operands(gen, T, E, N, K, scaling):
    """(x8, xs, w8, ws): random e4m3 operands and scales in the plain layout's scale shapes."""
    x8, w8 = rand_e4m3(gen, (T, K)), rand_e4m3(gen, (E, N, K))
    KB = -(-K // 128)
    if scaling == "rowwise":
        return x8, rand_scales(gen, (T,)), w8, rand_scales(gen, (E, N))
    xs = rand_scales(gen, (KB, T)).t()   # [T, KB] view of token-contiguous memory, as the library reads it
    return x8, xs, w8, rand_scales(gen, (E, -(-N // 128), KB))


def test_fp8_layouts(gen):
    import ldmoe_ref
    for (E, N, K, D) in [(3, 64, 144, 2), (8, 1536, 512, 2), (2, 96, 16, 4), (5, 384, 640, 1), (4, 520, 1040, 2)]:
        w8 = rand_e4m3(gen, (E, N, K))
        ref = ldmoe_ref.pack_reference(w8.cpu(), D).cuda()
        for src in ("plain", "localized"):
            wp = ldmoe.pack(w8 if src == "plain" else ldmoe.to_localized(w8, D), D if src == "plain" else None)
            torch.cuda.synchronize()
            ok = wp.dtype == torch.float8_e4m3fn and wp.data.numel() == ldmoe.packed_bytes(E, N, K, D, "fp8") and \
                torch.equal(wp.data, ref)
            report(ok, "fp8 pack from %s E=%d N=%d K=%d D=%d" % (src, E, N, K, D))
        buf = torch.full((ref.numel(),), 0xA5, dtype=torch.uint8, device="cuda")
        ldmoe.pack(w8, D, out=buf)
        torch.cuda.synchronize()
        report(torch.equal(buf, ref), "fp8 pack into a poisoned out= E=%d N=%d K=%d D=%d" % (E, N, K, D))
        wl = ldmoe.to_localized(w8, D)
        back = ldmoe.to_plain(wl)
        torch.cuda.synchronize()
        want = w8.view(torch.uint8).view(E, D, N // D, K).permute(1, 0, 2, 3)
        report(torch.equal(wl.view(torch.uint8), want) and torch.equal(back.view(torch.uint8), w8.view(torch.uint8)),
               "fp8 convert E=%d N=%d K=%d D=%d" % (E, N, K, D))


def run_fp8(x8, xs, w8, ws, offs, scaling, layout, D, mode, tile, out):
    """One grouped_mm_fp8 with plain-layout operands (w8 [E, N, K], ws plain) in `layout`."""
    if layout == "plain":
        return ldmoe.grouped_mm_fp8(x8, w8, offs, xs, ws, scaling=scaling, mode=mode, tile=tile, out=out)
    wsl = ldmoe.localize_scales(ws, D, scaling)
    wl = ldmoe.to_localized(w8, D) if layout == "localized" else ldmoe.pack(w8, D)
    return ldmoe.grouped_mm_fp8(x8, wl, offs, xs, wsl, scaling=scaling, layout=layout, mode=mode, tile=tile, out=out)


def test_fp8_correctness(gen, quick):
    import ldmoe_ref
    # (T, E, N, K): decode with counts off tile multiples; K not a multiple of 128 or of a stage;
    # above 32 tokens per expert (the 128-token tile); N/D not a multiple of 128 (plain and D = 1 only
    # for block scales, which cannot be localized there).
    shapes = [(77, 8, 512, 256), (300, 6, 1024, 1040), (1000, 4, 768, 512), (45, 3, 272, 336)]
    if quick:
        shapes = shapes[:2]
    tiles = [t for t in ldmoe.FP8_TILES if t != "auto"]
    for (T, E, N, K) in shapes:
        for scaling in ("rowwise", "block"):
            x8, xs, w8, ws = fp8_operands(gen, T, E, N, K, scaling)
            offs, counts = routing(gen, T - 5, E)   # 5 rows past offs[-1] must stay untouched
            ref, absum = ldmoe_ref.reference_fp8(x8, xs, w8, ws, offs, scaling)
            used = sum(counts)
            layouts = [("plain", 1), ("localized", 2), ("packed", 1), ("packed", 2)]
            if scaling == "block" and (N // 2) % 128:
                layouts = [("plain", 1), ("packed", 1), ("localized", 1)]
            runs = [(lay, D, mode, "auto") for lay, D in layouts for mode in ("auto", "aware", "unaware", "static")]
            runs += [(lay, D, "aware", t) for lay, D in layouts for t in tiles]
            for lay, D, mode, tile in runs:
                y = torch.full((T, N), float("nan"), dtype=torch.bfloat16, device="cuda")
                run_fp8(x8, xs, w8, ws, offs, scaling, lay, D, mode, tile, y)
                torch.cuda.synchronize()
                ok, why = ldmoe_ref.check_fp8(y[:used], ref[:used], absum[:used])
                tail = bool(torch.isnan(y[used:].float()).all())
                report(ok and tail, "fp8 %s T=%d E=%d N=%d K=%d %s D=%d mode=%s tile=%s" % (
                    scaling, T, E, N, K, lay, D, mode, tile), "%s; rows past offs[-1] untouched: %s" % (why, tail))


def test_fp8_scale_offsets(gen):
    """Block scales that start 1-3 floats past a 16-byte boundary (views into larger buffers): the
    kernels read both tables through 1-D tensor maps from the aligned address below them, so the
    results must be bit-identical to those from aligned copies, on every FP8 tile, for T, K and N
    of no convenient multiple (T % 4, KB % 4 and N / 128 all odd)."""
    T, E, N, K = 45, 3, 384, 336   # KB = 3
    KB = -(-K // 128)
    x8, xs, w8, ws = fp8_operands(gen, T, E, N, K, "block")
    offs, _ = routing(gen, T, E)
    tiles = ["auto"] + [t for t in ldmoe.FP8_TILES if t != "auto"]
    for ox, ow in ((1, 3), (2, 1), (3, 2)):
        bx = torch.full((ox + KB * T + 5,), float("nan"), device="cuda")
        bx[ox:ox + KB * T].copy_(xs.t().reshape(-1))
        xs_v = bx[ox:ox + KB * T].view(KB, T).t()          # token-contiguous [T, KB] view, 4*ox bytes off
        bw = torch.full((ow + ws.numel() + 5,), float("nan"), device="cuda")
        bw[ow:ow + ws.numel()].copy_(ws.reshape(-1))
        ws_v = bw[ow:ow + ws.numel()].view(ws.shape)
        for lay in ("plain", "packed"):
            for tile in tiles:
                ya = torch.full((T, N), float("nan"), dtype=torch.bfloat16, device="cuda")
                yb = ya.clone()
                run_fp8(x8, xs, w8, ws, offs, "block", lay, 1, "aware", tile, ya)
                run_fp8(x8, xs_v, w8, ws_v, offs, "block", lay, 1, "aware", tile, yb)
                torch.cuda.synchronize()
                same = torch.equal(ya.view(torch.int16), yb.view(torch.int16))
                report(same and xs_v.data_ptr() % 16 == 4 * ox and ws_v.data_ptr() % 16 == 4 * ow,
                       "fp8 block scales %d / %d floats off 16-byte alignment, %s tile=%s: bit-identical" % (ox, ow, lay, tile))


def test_fp8_vs_torch(gen):
    """Rowwise against torch._scaled_grouped_mm on the same e4m3 operands, where torch has it (a
    cross-check of the reference's conventions; the bound is still checked against the reference)."""
    import ldmoe_ref
    if not hasattr(torch, "_scaled_grouped_mm"):
        report(True, "fp8 vs torch._scaled_grouped_mm", "this torch has none: not compared")
        return
    T, E, N, K = 512, 8, 1024, 512
    counts = [64] * E   # torch wants 16-aligned groups
    offs = torch.tensor(torch.tensor(counts).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    x8, xs, w8, ws = fp8_operands(gen, T, E, N, K, "rowwise")
    yt = torch._scaled_grouped_mm(x8, w8.transpose(-2, -1), xs, ws, offs=offs, out_dtype=torch.bfloat16)
    y = ldmoe.grouped_mm_fp8(x8, w8, offs, xs, ws)
    ref, absum = ldmoe_ref.reference_fp8(x8, xs, w8, ws, offs, "rowwise")
    torch.cuda.synchronize()
    ok_t, why_t = ldmoe_ref.check_fp8(yt, ref, absum)
    ok, why = ldmoe_ref.check_fp8(y, ref, absum)
    report(ok, "fp8 rowwise E=8 m=64 within the bound", why)
    report(True, "fp8 torch._scaled_grouped_mm on the same operands (information)", "torch: %s (%s)" % (why_t, ok_t))


def test_fp8_errors():
    x8 = torch.zeros((16, 128), dtype=torch.float8_e4m3fn, device="cuda")
    w8 = torch.zeros((2, 64, 128), dtype=torch.float8_e4m3fn, device="cuda")
    offs = torch.tensor([8, 16], dtype=torch.int32, device="cuda")
    xs, ws = torch.ones(16, device="cuda"), torch.ones((2, 64), device="cuda")
    for what, fn, exc, text in [
            ("w on the CPU", lambda: ldmoe.grouped_mm_fp8(x8, w8.cpu(), offs, xs, ws), ValueError, "is on cpu"),
            ("scales on the CPU", lambda: ldmoe.grouped_mm_fp8(x8, w8, offs, xs.cpu(), ws), ValueError, "x_scale is on"),
            ("K % 16 (library)", lambda: ldmoe.grouped_mm_fp8(x8[:, :120].contiguous(), w8[:, :, :120].contiguous(), offs, xs,
                                                              ws), ldmoe.LdmoeError, "multiple of 16"),
            ("bf16 tile by value", lambda: ldmoe.grouped_mm_fp8(x8, w8, offs, xs, ws, tile=20), ldmoe.LdmoeError, "bf16 tile"),
            ("quantize_fp8 of a CPU tensor", lambda: ldmoe.quantize_fp8(torch.zeros(4, 32, dtype=torch.bfloat16)), ValueError,
             "CUDA"),
            ("bf16 x with x_scale", lambda: ldmoe.grouped_mm_fp8(x8.to(torch.bfloat16), w8, offs, xs, ws), ValueError,
             "x_scale=None")]:
        try:
            fn()
            report(False, "fp8 error " + what, "no error raised")
        except exc as e:
            report(text in str(e), "fp8 error " + what, str(e))


def test_fp8_quantize(gen):
    """ldmoe.quantize_fp8 (the library's one-kernel quantization of bf16 activations) against
    ldmoe.quantize_rowwise / quantize_block(x, 1) bit for bit, with zero rows, outliers, K not a
    multiple of 128 and poisoned outputs; then grouped_mm_fp8 on bf16 x (quantized inside the
    call) against the same call on the quantized operands: identical outputs."""
    def quantize_poisoned(xb, scaling):
        # ldmoe_quantize_fp8 into outputs filled with NaN (0x7f is an e4m3 NaN), so that an
        # element or a scale it fails to write shows.
        T, K = xb.shape
        q8 = torch.full((T, K), 0x7F, dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
        qs = torch.full((T,) if scaling == "rowwise" else (-(-K // 128), T), float("nan"), device="cuda")
        ldmoe._check(ldmoe._load().ldmoe_quantize_fp8(xb.data_ptr(), T, K, ldmoe.SCALINGS[scaling], q8.data_ptr(),
                                                      qs.data_ptr(), torch.cuda.current_stream().cuda_stream))
        return q8, qs if scaling == "rowwise" else qs.t()

    # K > 8192: rowwise reads the row twice, block runs more than four passes; 16400 is no multiple of 128
    for T, K in [(1, 16), (7, 144), (300, 4096), (64, 7168), (513, 1040), (33, 2048), (5, 9216), (3, 16400)]:
        x = (torch.randn((T, K), generator=gen) * 2.0 ** torch.randint(-8, 9, (T, 1), generator=gen).float())
        x[T // 2] = 0                       # an all-zero row: scale 1
        x[0, K // 3] = 3.0e4                # an outlier
        if K > 128:
            x[-1, :128] = 0                 # an all-zero block (block scheme: scale 1 there)
        xb = x.to(torch.bfloat16).cuda()
        for scaling in ("rowwise", "block"):
            want8, wants = ldmoe.quantize_rowwise(xb) if scaling == "rowwise" else ldmoe.quantize_block(xb, 1)
            q8, qs = quantize_poisoned(xb, scaling)
            p8, ps = ldmoe.quantize_fp8(xb, scaling)   # the Python entry: the same bytes
            torch.cuda.synchronize()
            same8 = torch.equal(p8.view(torch.uint8), want8.view(torch.uint8)) and torch.equal(ps, wants)
            report(same8 and (ps.is_contiguous() if scaling == "rowwise" else ps.t().is_contiguous()),
                   "fp8 ldmoe.quantize_fp8 %s T=%d K=%d = ldmoe.quantize_%s" % (scaling, T, K, scaling))
            same8 = torch.equal(q8.view(torch.uint8), want8.view(torch.uint8))
            sames = torch.equal(qs, wants)
            layout_ok = qs.shape == wants.shape and (scaling == "rowwise" or qs.t().is_contiguous())
            bad = int((q8.view(torch.uint8) != want8.view(torch.uint8)).sum())
            report(same8 and sames and layout_ok, "fp8 ldmoe_quantize_fp8 %s T=%d K=%d into NaN = ldmoe.quantize_%s" % (
                scaling, T, K, scaling), "bytes differing %d, scales equal %s, shape %s" % (bad, sames, tuple(qs.shape)))
    # bf16 activations through grouped_mm_fp8: the same result as quantizing first
    T, E, N, K = 300, 6, 1024, 1040
    offs, counts = routing(gen, T - 5, E)
    xb = torch.randn((T, K), generator=gen).to(torch.bfloat16).cuda()
    for scaling in ("rowwise", "block"):
        _, _, w8, ws = fp8_operands(gen, T, E, N, K, scaling)
        x8, xs = ldmoe.quantize_rowwise(xb) if scaling == "rowwise" else ldmoe.quantize_block(xb, 1)
        for lay, D in (("plain", 1), ("packed", 2)) if scaling == "rowwise" else (("plain", 1), ("packed", 1)):
            y1 = torch.full((T, N), float("nan"), dtype=torch.bfloat16, device="cuda")
            y2 = y1.clone()
            run_fp8(x8, xs, w8, ws, offs, scaling, lay, D, "aware", "auto", y1)
            run_fp8(xb, None, w8, ws, offs, scaling, lay, D, "aware", "auto", y2)
            torch.cuda.synchronize()
            report(torch.equal(y1.view(torch.int16), y2.view(torch.int16)),
                   "fp8 grouped_mm_fp8 on bf16 x = on quantize_%s(x) (%s D=%d)" % (scaling, lay, D))


def test_fp8_dependent(gen):
    """The FP8 GEMM is a programmatic dependent launch (it may start while the stream's previous
    kernel runs): every input that kernel writes must
    be read only after it. Back to back, with no synchronization: fresh bf16 tokens quantized
    inside the call, e4m3 tokens and offsets each written by a torch kernel right before the
    GEMM, and the call replayed from a CUDA graph; each output must equal, bit for bit, the same
    GEMM run after a device synchronization. Every layout, aware and static modes, both schemes,
    the 128- and 256-row decode tiles; the lab also without the dependent launch."""
    E, N, K, iters = 8, 2048, 1024, 6
    for scaling in ("rowwise", "block"):
        w8 = rand_e4m3(gen, (E, N, K))
        ws = rand_scales(gen, (E, N)) if scaling == "rowwise" else rand_scales(gen, (E, N // 128, -(-K // 128)))
        for lay, D in (("plain", 1), ("localized", 2), ("packed", 2)):
            wsl = ldmoe.localize_scales(ws, D, scaling) if lay != "plain" else ws
            wl = w8 if lay == "plain" else ldmoe.to_localized(w8, D) if lay == "localized" else ldmoe.pack(w8, D)
            for mode in ("aware", "static"):
                for tile in ("ws128x64c16fp8", "ws256x64c16fp8"):
                    for tune in ((0, ldmoe.TUNE_NO_DEPENDENT) if LAB else (0,)):
                        kw = dict(scaling=scaling, layout=lay, mode=mode, tile=tile)
                        if tune:
                            kw["tune"] = tune
                        xbs = [torch.randn((E * 8, K), generator=gen).to(torch.bfloat16).cuda() for _ in range(iters)]
                        cnts = [torch.tensor(routing(gen, E * 8, E)[1], dtype=torch.int32) for _ in range(iters)]
                        x8s = [ldmoe.quantize_fp8(xb, scaling) for xb in xbs]
                        torch.cuda.synchronize()
                        x8buf = torch.empty_like(x8s[0][0])
                        offs_buf = torch.empty(E, dtype=torch.int32, device="cuda")
                        cnt_gpu = [c.cuda() for c in cnts]
                        ya, yb = [], []
                        for i in range(iters):   # no synchronization in this loop
                            y = torch.full((E * 8, N), float("nan"), dtype=torch.bfloat16, device="cuda")
                            torch.cumsum(cnt_gpu[i], 0, out=offs_buf)   # offsets written right before
                            ya.append(ldmoe.grouped_mm_fp8(xbs[i], wl, offs_buf.clone(), None, wsl, out=y, **kw))
                            torch.cumsum(cnt_gpu[i], 0, out=offs_buf)
                            x8buf.copy_(x8s[i][0])                      # tokens written right before
                            y = torch.full((E * 8, N), float("nan"), dtype=torch.bfloat16, device="cuda")
                            yb.append(ldmoe.grouped_mm_fp8(x8buf, wl, offs_buf, x8s[i][1], wsl, out=y, **kw))
                        torch.cuda.synchronize()
                        same_a = same_b = True
                        for i in range(iters):
                            offs_i = torch.cumsum(cnt_gpu[i], 0).to(torch.int32)
                            torch.cuda.synchronize()
                            y = torch.full((E * 8, N), float("nan"), dtype=torch.bfloat16, device="cuda")
                            ldmoe.grouped_mm_fp8(x8s[i][0], wl, offs_i, x8s[i][1], wsl, out=y, **kw)
                            torch.cuda.synchronize()
                            same_a &= torch.equal(ya[i].view(torch.int16), y.view(torch.int16))
                            same_b &= torch.equal(yb[i].view(torch.int16), y.view(torch.int16))
                        report(same_a and same_b, "fp8 dependent launch %s %s D=%d %s %s tune=%#x: quantized in the "
                               "call, tokens and offsets written right before = after a synchronization" % (
                                   scaling, lay, D, mode, tile, tune), "in-call %s, written-before %s" % (same_a, same_b))
    # A CUDA graph of the in-call quantization and the GEMM, replayed on new tokens.
    scaling, lay, D = "rowwise", "packed", 2
    w8, ws = rand_e4m3(gen, (E, N, K)), rand_scales(gen, (E, N))
    wp, wsl = ldmoe.pack(w8, D), ldmoe.localize_scales(ws, D, scaling)
    offs = torch.tensor(routing(gen, E * 8, E)[1], dtype=torch.int32).cumsum(0).to(torch.int32).cuda()
    xin = torch.randn((E * 8, K), generator=gen).to(torch.bfloat16).cuda()
    yg = torch.empty((E * 8, N), dtype=torch.bfloat16, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):   # warm up on the capture stream (its workspace, attributes)
        ldmoe.grouped_mm_fp8(xin, wp, offs, None, wsl, layout=lay, out=yg)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        ldmoe.grouped_mm_fp8(xin, wp, offs, None, wsl, layout=lay, out=yg)
    same = True
    for _ in range(4):
        xin.copy_(torch.randn((E * 8, K), generator=gen).to(torch.bfloat16).cuda())
        g.replay()
        torch.cuda.synchronize()
        y = torch.empty_like(yg)
        ldmoe.grouped_mm_fp8(xin, wp, offs, None, wsl, layout=lay, out=y)
        torch.cuda.synchronize()
        same &= torch.equal(y.view(torch.int16), yg.view(torch.int16))
    report(same, "fp8 dependent launch in a CUDA graph (quantized in the call, replayed on new tokens) = eager")


def test_errors():
    x = torch.zeros((16, 100), dtype=torch.bfloat16, device="cuda")
    w = torch.zeros((2, 64, 100), dtype=torch.bfloat16, device="cuda")
    offs = torch.tensor([8, 16], dtype=torch.int32, device="cuda")
    try:
        ldmoe.grouped_mm(x, w, offs)
        report(False, "error K%8", "no error raised")
    except ldmoe.LdmoeError as e:
        report("multiple of 8" in str(e), "error K%8", str(e))
    xk = torch.zeros((16, 64), dtype=torch.bfloat16, device="cuda")
    if LAB:
        try:
            ldmoe.grouped_mm(xk, w[:, :, :64].contiguous(), offs, tune=0x100)
            report(False, "error unknown tune bit", "no error raised")
        except ldmoe.LdmoeError as e:
            report("unknown bits" in str(e), "error unknown tune bit", str(e))
    else:
        try:   # a lab tile by value (12: ws128x64) is not in the product library
            ldmoe.grouped_mm(xk, w[:, :, :64].contiguous(), offs, tile=12)
            report(False, "error lab tile in the product library", "no error raised")
        except ldmoe.LdmoeError as e:
            report("not a tile of this library" in str(e), "error lab tile in the product library", str(e))
        try:
            ldmoe.grouped_mm(xk, w[:, :, :64].contiguous(), offs, tile="ws128x64")
            report(False, "error lab tile name in ldmoe.py", "no error raised")
        except ValueError as e:
            report(True, "error lab tile name in ldmoe.py", str(e))
    try:
        ldmoe.grouped_mm(x.float(), w, offs)
        report(False, "error dtype", "no error raised")
    except TypeError as e:
        report(True, "error dtype", str(e))


def test_bad_offs(gen):
    """Invalid offs (decreasing, negative, past T): the kernel clamps to [0, T] and takes the
    running maximum, so expert e owns rows max(0, ends before e) .. that maximum with its own
    end; every other row stays untouched (NaN), and no row is computed twice."""
    T, E, N, K = 300, 6, 256, 128
    x = torch.randn((T, K), generator=gen).to(torch.bfloat16).cuda()
    w = (torch.randn((E, N, K), generator=gen) / math.sqrt(K)).to(torch.bfloat16).cuda()
    for offs_list in ([50, 20, 120, 90, 400, 280], [-5, 40, 40, 10, 299, 100], [300, 0, 0, 0, 0, 0]):
        own = [None] * T
        run = 0
        for e, f in enumerate(offs_list):
            f = max(run, min(max(f, 0), T))
            for r in range(run, f):
                own[r] = e
            run = f
        ref = torch.full((T, N), float("nan"), dtype=torch.float32, device="cuda")
        for e in range(E):
            rows = [r for r in range(T) if own[r] == e]
            if rows:
                ref[rows] = x[rows].float() @ w[e].float().t()
        offs = torch.tensor(offs_list, dtype=torch.int32, device="cuda")
        for tile in [t for t in ("auto", "64x16k4", "ws128x64", "ws256x128", "ws128x64c16", "ws256x128ew")
                     if t in ldmoe.TILES]:
            y = torch.full((T, N), float("nan"), dtype=torch.bfloat16, device="cuda")
            ldmoe.grouped_mm(x, w, offs, tile=tile, out=y)
            torch.cuda.synchronize()
            owned = torch.tensor([o is not None for o in own], device="cuda")
            yo, ro = y[owned].float(), ref[owned]
            err = (torch.linalg.norm(yo - ro) / torch.linalg.norm(ro).clamp_min(1e-30)).item() if owned.any() else 0.0
            untouched = bool(torch.isnan(y[~owned].float()).all()) if (~owned).any() else True
            report(err < TOL and bool(torch.isfinite(yo).all()) and untouched,
                   "bad offs %s tile=%s" % (offs_list, tile), "rel_err=%.2e untouched=%s" % (err, untouched))


def test_correctness(gen, quick):
    shapes = [  # T, E, N, K
        (37, 4, 128, 64), (300, 8, 256, 200), (1000, 16, 768, 512), (64, 1, 192, 128),
        (2500, 8, 1024, 1024), (130, 128, 1536, 256), (4096, 4, 512, 2048), (8, 32, 256, 4096),
    ]
    if quick:
        shapes = shapes[:4]
    tiles = [t for t in ldmoe.TILES]   # every tile the library has
    modes = ["auto", "aware", "unaware", "static"]
    for si, (T, E, N, K) in enumerate(shapes):
        for layout in ["plain", "localized", "packed"]:
            for ti, tile in enumerate(tiles):
                mode = modes[(si + ti) % 4] if tile != "auto" else None
                for m in ([mode] if mode else modes):
                    # fresh inputs per case
                    x = (torch.randn((T, K), generator=gen) * 0.5).to(torch.bfloat16).cuda()
                    w = (torch.randn((E, N, K), generator=gen) / math.sqrt(K)).to(torch.bfloat16).cuda()
                    offs, counts = routing(gen, T - (T // 7 if si % 2 else 0), E)
                    used = sum(counts)
                    y = torch.full((T, N), float("nan"), dtype=torch.bfloat16, device="cuda")
                    wk = in_layout(w, layout)
                    ldmoe.grouped_mm(x, wk, offs, layout=layout, mode=m, tile=tile, out=y)
                    torch.cuda.synchronize()
                    ref = reference(x, w, counts)
                    check_out("mm T=%d E=%d N=%d K=%d %s tile=%s mode=%s" % (T, E, N, K, layout, tile, m),
                              y, ref, used)


def test_tune(gen):
    """Every epilogue and L2-hint variant (ldmoe.h LDMOE_TUNE_*) of the staged tiles, ragged counts."""
    for T, E, N, K in [(700, 16, 768, 512), (130, 128, 1536, 256), (45, 4, 2048, 1024), (3000, 6, 1280, 384)]:
        for tile in ("ws128x64", "ws128x16", "ws256x64", "ws128x64k1", "ws256x128ew", "ws128x64c16", "ws128x128c16"):
            for tune, layout in ((0, "localized"), (0x1, "localized"), (0x2 | 0x4, "localized"), (0x8, "localized"),
                                 (0xF, "localized"), (0, "packed"), (0x4, "packed"), (0x1, "packed")):
                x = (torch.randn((T, K), generator=gen) * 0.5).to(torch.bfloat16).cuda()
                w = (torch.randn((E, N, K), generator=gen) / math.sqrt(K)).to(torch.bfloat16).cuda()
                offs, counts = routing(gen, T - T // 5, E)
                y = torch.full((T, N), float("nan"), dtype=torch.bfloat16, device="cuda")
                ldmoe.grouped_mm(x, in_layout(w, layout), offs, layout=layout, tile=tile, out=y, tune=tune)
                torch.cuda.synchronize()
                check_out("tune=%#x T=%d E=%d N=%d K=%d tile=%s %s" % (tune, T, E, N, K, tile, layout), y,
                          reference(x, w, counts), sum(counts))


def test_token_classes(gen):
    """Chunked tiles (ws128x64c16, ws128x128c16) at every boundary of their token-column classes:
    experts with 1..16, 17..32, 33..64, 65..128 and more tokens (16-row boxes, half box, whole box,
    several m-blocks), next to empty experts; each expert's rows checked on their own, so one
    wrong small expert cannot hide in the total."""
    counts = [0, 1, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 96, 127, 128, 129, 200, 0, 7]
    E, N, K = len(counts), 256, 320   # K: 2.5 stages of 128 k (ws128x64c16), 5 of 64 k (ws128x128c16)
    T = sum(counts) + 5               # rows past the last expert stay untouched
    offs = torch.tensor(list(itertools.accumulate(counts)), dtype=torch.int32, device="cuda")
    for tile in ("ws128x64c16", "ws128x128c16"):
        for mode in ("aware", "unaware", "static"):
            for layout in ("plain", "localized", "packed"):
                x = (torch.randn((T, K), generator=gen) * 0.5).to(torch.bfloat16).cuda()
                w = (torch.randn((E, N, K), generator=gen) / math.sqrt(K)).to(torch.bfloat16).cuda()
                y = torch.full((T, N), float("nan"), dtype=torch.bfloat16, device="cuda")
                wk = in_layout(w, layout)
                ldmoe.grouped_mm(x, wk, offs, layout=layout, mode=mode, tile=tile, out=y)
                torch.cuda.synchronize()
                ref = reference(x, w, counts)
                worst, s = 0.0, 0
                for c in counts:
                    if c:
                        seg = y[s:s + c].float()
                        if not bool(torch.isfinite(seg).all()):
                            worst = float("inf")
                        else:
                            worst = max(worst, (torch.linalg.norm(seg - ref[s:s + c]) /
                                                torch.linalg.norm(ref[s:s + c]).clamp_min(1e-30)).item())
                    s += c
                tail_ok = bool(torch.isnan(y[s:].float()).all())
                report(worst < TOL and tail_ok, "token classes tile=%s mode=%s %s" % (tile, mode, layout),
                       "worst expert rel_err=%.2e untouched_tail=%s" % (worst, tail_ok))


def test_trace(gen, num_sms):
    """The debug timeline (ldmoe_params_t.trace) of the warp-specialized tiles: one row per CTA,
    each SM once, stamps in launch order, tiles per CTA summing to the launch's tiles; tiles
    without a timeline leave it untouched."""
    T, E, N, K = 2000, 32, 768, 512
    x = torch.randn((T, K), generator=gen).to(torch.bfloat16).cuda()
    w = (torch.randn((E, N, K), generator=gen) / math.sqrt(K)).to(torch.bfloat16).cuda()
    wl = ldmoe.to_localized(w, 2)
    offs, counts = routing(gen, T, E)
    for tile, mode in [("ws128x64", "aware"), ("ws128x16", "unaware"), ("ws256x128ew", "aware"), ("64x64k4", "aware")]:
        bm, bn, _ = ldmoe.tile_info(T, E, N, K, "localized", 2, tile)
        ntiles = len(expected_tiles(counts, N, 2, bm, bn))
        tr = torch.zeros(8 * num_sms, dtype=torch.int64, device="cuda")
        y = torch.full((T, N), float("nan"), dtype=torch.bfloat16, device="cuda")
        ldmoe.grouped_mm(x, wl, offs, layout="localized", mode=mode, tile=tile, out=y, trace=tr)
        torch.cuda.synchronize()
        rows = tr.view(num_sms, 8).cpu().tolist()
        name = "trace tile=%s mode=%s" % (tile, mode)
        if not tile.startswith("ws"):
            report(all(v == 0 for r in rows for v in r), name + " (no timeline: untouched)")
            continue
        order = all(r[0] <= r[1] <= r[2] <= r[5] and (r[6] == 0 or r[2] <= r[3] <= r[5]) and r[4] <= r[5] + 2000
                    for r in rows)
        # One CTA per SM the process may run on: every SM, or the bound set when the shim binds
        # the process to some of them (the grid is sized to it; the other rows stay zero).
        want = ldmoe.get_topology().bound_set() or list(range(num_sms))
        used = [r for r in rows if any(r)]
        sms = sorted(r[7] for r in used)
        order = order and len(used) == len(want)
        report(order and sms == want and sum(r[6] for r in rows) == ntiles, name,
               "in order=%s, SMs once=%s (%d CTAs on %d SMs), tiles %d of %d"
               % (order, sms == want, len(used), len(want), sum(r[6] for r in rows), ntiles))
        check_out(name + " output", y, reference(x, w, counts), sum(counts))


def test_states(gen, num_sms):
    """The four placement states as the shim would publish them, mode auto."""
    even = [(s >> 1) & 1 for s in range(num_sms)]
    states = {
        "stock": None,
        "memory": (even, ldmoe.TOPO_VALID),
        "full": (even, ldmoe.TOPO_VALID | ldmoe.TOPO_AWARE),
        "mismatch": ([1 - d for d in even], ldmoe.TOPO_VALID | ldmoe.TOPO_AWARE | ldmoe.TOPO_INVERTED),
    }
    T, E, N, K = 1500, 8, 1024, 768
    for name, st in states.items():
        if st is None:
            ldmoe.set_topology(None)
        else:
            ldmoe.set_topology(st[0], 2, st[1])
        for layout in ["plain", "localized", "packed"]:
            x = torch.randn((T, K), generator=gen).to(torch.bfloat16).cuda()
            w = (torch.randn((E, N, K), generator=gen) / math.sqrt(K)).to(torch.bfloat16).cuda()
            offs, counts = routing(gen, T, E)
            y = torch.full((T, N), float("nan"), dtype=torch.bfloat16, device="cuda")
            wk = in_layout(w, layout)
            ldmoe.grouped_mm(x, wk, offs, layout=layout, mode="auto", out=y)
            torch.cuda.synchronize()
            check_out("state=%s %s" % (name, layout), y, reference(x, w, counts), sum(counts))
    ldmoe.set_topology(None)


def expected_tiles(counts, N, D, bm, bn):
    nd = N // D
    nbs = -(-nd // bm)
    mb = [-(-c // bn) for c in counts]
    prefix = [0]
    for v in mb:
        prefix.append(prefix[-1] + v)
    slice_of = {}
    for e in range(len(counts)):
        for d in range(D):
            for b in range(nbs):
                for m in range(mb[e]):
                    slice_of[prefix[e] * D * nbs + (d * nbs + b) * mb[e] + m] = d
    return slice_of


def test_scheduler(gen, num_sms):
    T, E, N, K = 3000, 8, 2048, 256   # 64x64 tiles -> 32 n-blocks x ~47 m-blocks x ... many waves
    maps = {
        "74/66": (fake_map(140, [74, 66], 7), 2),
        "66/66": (fake_map(num_sms, [num_sms // 2, num_sms // 2], 3), 2),
        "single": ([0] * num_sms, 1),
        "none": None,
    }
    cases = [("aware", 0.0), ("aware", 1e-6), ("aware", 1e9), ("unaware", 0.0), ("static", 0.0)]
    for mname, mp in maps.items():
        if mp is None:
            ldmoe.set_topology(None)
        else:
            ldmoe.set_topology(mp[0], mp[1], ldmoe.TOPO_VALID | ldmoe.TOPO_AWARE)
        for tile, tt in [("64x64", T), ("128x128", 700), ("wg256x128", 1500), ("64x16k4", 400),
                         ("ws256x128", 1500), ("ws128x64", 900), ("ws128x16", 300), ("ws256x64", 900),
                         ("ws256x128ew", 1500), ("ws256x128ew", 8000),   # 8000: >= 2 waves, static ranks
                         ("ws128x64c16", 300), ("ws128x128c16", 900)]:
            for mode, waves in cases:
                x = torch.randn((tt, K), generator=gen).to(torch.bfloat16).cuda()
                w = (torch.randn((E, N, K), generator=gen) / math.sqrt(K)).to(torch.bfloat16).cuda()
                offs, counts = routing(gen, tt, E)
                wl = ldmoe.to_localized(w, 2)
                bm, bn, bound = ldmoe.tile_info(tt, E, N, K, "localized", 2, tile)
                exp = expected_tiles(counts, N, 2, bm, bn)
                dbg = torch.zeros(2 * bound, dtype=torch.int32, device="cuda")
                reps = 3   # counters must reset themselves between launches
                for _ in range(reps):
                    y = torch.full((tt, N), float("nan"), dtype=torch.bfloat16, device="cuda")
                    ldmoe.grouped_mm(x, wl, offs, layout="localized", mode=mode, steal_waves=waves,
                                     tile=tile, out=y, debug_tiles=dbg)
                torch.cuda.synchronize()
                cnt = dbg[:bound].cpu().tolist()
                dom = dbg[bound:].cpu().tolist()
                bad = [g for g in range(bound) if cnt[g] != (reps if g in exp else 0)]
                local = sum(1 for g, d in exp.items() if dom[g] == (1 << d))
                name = "sched map=%s tile=%s mode=%s waves=%g" % (mname, tile, mode, waves)
                ok = not bad
                detail = "tiles=%d wrong=%d local=%d" % (len(exp), len(bad), local)
                # local-first without stealing, both domains populated: every tile stays home
                if ok and mode == "aware" and waves >= 1e9 and mname in ("74/66", "66/66"):
                    ok = local == len(exp)
                    detail += " (all local expected)"
                report(ok, name, detail)
                if mode == "aware" and waves == 0.0:
                    check_out(name + " output", y, reference(x, w, counts), sum(counts))
    ldmoe.set_topology(None)


def test_fp8_lab(gen, num_sms):
    """Lab build: every FP8 tile computed exactly once (debug counters, three launches) for both
    schemes, every mode, with the tune bits that apply to them (dynamic claims only, late / early tail, streaming
    stores, scalar epilogue), under the 74/66, balanced and absent maps; outputs within the bound."""
    import ldmoe_ref
    maps = {"74/66": (fake_map(140, [74, 66], 7), 2), "66/66": (fake_map(num_sms, [num_sms // 2, num_sms // 2], 3), 2),
            "none": None}
    E, N, K = 8, 1024, 1040
    for mname, mp in maps.items():
        if mp is None:
            ldmoe.set_topology(None)
        else:
            ldmoe.set_topology(mp[0], mp[1], ldmoe.TOPO_VALID | ldmoe.TOPO_AWARE)
        for tile, tt in (("ws128x64c16fp8", 250), ("ws128x128c16fp8", 1500), ("ws256x128fp8", 3000),
                         ("ws256x64c16fp8", 250), ("ws256x128c16fp8", 3000)):
            for scaling in ("rowwise", "block"):
                x8, xs, w8, ws = fp8_operands(gen, tt, E, N, K, scaling)
                offs, counts = routing(gen, tt, E)
                ref, absum = ldmoe_ref.reference_fp8(x8, xs, w8, ws, offs, scaling)
                wp, wsl = ldmoe.pack(w8, 2), ldmoe.localize_scales(ws, 2, scaling)
                bm, bn, bound = ldmoe.tile_info(tt, E, N, K, "packed", 2, ldmoe.FP8_TILES[tile])
                exp = expected_tiles(counts, N, 2, bm, bn)
                for mode, waves, tune in (("aware", 0.0, 0), ("aware", 1e9, 0), ("unaware", 0.0, 0), ("static", 0.0, 0),
                                          ("aware", 0.0, ldmoe.TUNE_DYNAMIC_ONLY),
                                          ("aware", 0.0, ldmoe.TUNE_STREAM_STORES | ldmoe.TUNE_SCALAR_EPILOGUE),
                                          ("aware", 0.0, ldmoe.TUNE_LATE_TAIL), ("unaware", 0.0, ldmoe.TUNE_LATE_TAIL),
                                          ("aware", 0.0, ldmoe.TUNE_EARLY_TAIL)):
                    dbg = torch.zeros(2 * bound, dtype=torch.int32, device="cuda")
                    reps = 3
                    for _ in range(reps):
                        y = torch.full((tt, N), float("nan"), dtype=torch.bfloat16, device="cuda")
                        ldmoe.grouped_mm_fp8(x8, wp, offs, xs, wsl, scaling=scaling, mode=mode, steal_waves=waves,
                                             tile=tile, out=y, debug_tiles=dbg, tune=tune)
                    torch.cuda.synchronize()
                    cnt, dom = dbg[:bound].cpu().tolist(), dbg[bound:].cpu().tolist()
                    bad = [g for g in range(bound) if cnt[g] != (reps if g in exp else 0)]
                    local = sum(1 for g, d in exp.items() if dom[g] == (1 << d))
                    ok = not bad
                    detail = "tiles=%d wrong=%d local=%d" % (len(exp), len(bad), local)
                    if ok and mode == "aware" and waves >= 1e9 and mp is not None:
                        ok = local == len(exp)
                        detail += " (all local expected)"
                    good, why = ldmoe_ref.check_fp8(y, ref, absum)
                    report(ok and good, "fp8 lab sched map=%s tile=%s %s mode=%s waves=%g tune=%#x" % (
                        mname, tile, scaling, mode, waves, tune), "%s; %s" % (detail, why))
    ldmoe.set_topology(None)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--result", help="write '<passed> <failed>' here")
    ap.add_argument("--quick", action="store_true", help="fewer shapes")
    ap.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(4), "little"))
    ap.add_argument("--lab", action="store_true", help="test the lab build (all tiles, debug interface)")
    ap.add_argument("--fp8-only", action="store_true", help="only the FP8 tests")
    a = ap.parse_args()
    global torch, ldmoe, LAB
    import torch
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
    sys.path[:0] = [os.path.join(root, "kernels", "moe"), os.path.join(root, "bench", "moe", "lab"),
                    os.path.join(root, "tests", "moe")]
    LAB = a.lab
    if LAB:
        import ldmoe_lab as ldmoe
    else:
        import ldmoe
    print("seed %d, %s, %s, %s" % (a.seed, ldmoe.version(), ldmoe.library_path(), torch.cuda.get_device_name()),
          flush=True)
    report(("[lab build]" in ldmoe.version()) == LAB, "the %s library is loaded" % ("lab" if LAB else "product"),
           ldmoe.version())
    gen = torch.Generator().manual_seed(a.seed)
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    t = ldmoe.get_topology()
    print("published map: magic=%#x domains=%d flags=%#x" % (t.magic, t.num_domains, t.flags))
    tests = [lambda: test_converter(gen), lambda: test_pack(gen), lambda: test_packed_domains(gen), test_errors,
             lambda: test_bad_offs(gen), lambda: test_correctness(gen, a.quick), lambda: test_token_classes(gen)]
    fp8 = [lambda: test_fp8_layouts(gen), lambda: test_fp8_correctness(gen, a.quick),
           lambda: test_fp8_scale_offsets(gen), lambda: test_fp8_vs_torch(gen),
           test_fp8_errors, lambda: test_fp8_quantize(gen), lambda: test_fp8_dependent(gen)]
    if LAB:
        fp8.append(lambda: test_fp8_lab(gen, num_sms))
    if torch.cuda.get_device_capability() != (9, 0):
        print("FP8 tests need compute capability 9.0; this GPU is %s: FP8 NOT TESTED" % (torch.cuda.get_device_capability(),))
        fp8 = [lambda: test_fp8_layouts(gen)]
    tests = fp8 if a.fp8_only else tests + fp8
    if LAB and not a.fp8_only:   # these need the lab's counters, timeline, tune bits or topology override
        tests += [lambda: test_tune(gen), lambda: test_trace(gen, num_sms), lambda: test_states(gen, num_sms),
                  lambda: test_scheduler(gen, num_sms)]
    for fn in tests:
        try:
            fn()
        except Exception:
            traceback.print_exc()
            report(False, "exception")
    print("test-gpu-moe%s: %d passed, %d failed" % (" --lab" if LAB else "", PASSED, FAILED))
    if a.result:
        with open(a.result, "w") as f:
            f.write("%d %d\n" % (PASSED, FAILED))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
