#!/usr/bin/env python3
"""test_ldmoe_py.py — CPU tests of ldmoe.py's FP8 side and of tests/moe/ldmoe_ref.py (no GPU).

  python3 tests/moe/test_ldmoe_py.py [--result FILE]     (FILE gets "<passed> <failed>")

What it checks: the packed byte order of pack_reference against the layout's formula and its
size against the library's ldmoe_packed_bytes(_fp8); quantize/dequantize of both schemes;
localize_scales against the localized weights; every refusal of grouped_mm_fp8, pack and
PackedWeights that needs no GPU (types, dtypes, shapes, then the device); that grouped_mm refuses
e4m3 weights; and that check_fp8's bound accepts the reference's own rounding and rejects a
wrong scale, a missing K block and a wrong row. The library ($LDMOE_LIB, default
build/libldmoe.so) is loaded for its packed sizes only. Most of it needs PyTorch (the CPU build
is enough): when this python lacks it, the test re-runs itself under $LDMOE_TEST_PYTHON or
$SERVE_TEST_PYTHON; when none has it, it prints "NOT RUN" for the torch part and checks only the
packed sizes and the names, so the counts show what ran."""
import argparse
import os
import subprocess
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, os.path.join(ROOT, "kernels", "moe")]

PASSED = FAILED = 0


def check(ok, name, detail=""):
    global PASSED, FAILED
    if ok:
        PASSED += 1
    else:
        FAILED += 1
    print("%s %s%s" % ("PASS" if ok else "FAIL", name, (": " + detail) if detail and not ok else ""), flush=True)


def raises(fn, exc, text, name):
    try:
        fn()
    except exc as e:
        check(text in str(e), name, "message %r lacks %r" % (str(e), text))
        return
    except Exception as e:  # noqa: BLE001
        check(False, name, "raised %s: %s" % (type(e).__name__, e))
        return
    check(False, name, "did not raise")


def main_torch():
    import torch
    import ldmoe
    import ldmoe_ref as R

    f8 = torch.float8_e4m3fn
    g = torch.Generator().manual_seed(20)

    # ---- packed byte order ----
    for (E, N, K, D, dt) in [(2, 64, 144, 2, f8), (1, 260, 512, 1, f8), (2, 16, 1040, 2, f8), (3, 64, 72, 2, torch.bfloat16),
                             (1, 136, 264, 1, torch.bfloat16)]:
        if dt == f8:
            w = torch.randint(0, 256, (E, N, K), dtype=torch.uint8, generator=g).view(f8)
        else:
            w = torch.randint(-32768, 32767, (E, N, K), dtype=torch.int16, generator=g).view(torch.bfloat16)
        got = R.pack_reference(w, D)
        n = ldmoe.packed_bytes(E, N, K, D, dt)
        check(got.numel() == n, "pack_reference size = libldmoe's packed_bytes (%s %dx%dx%d D=%d)" % (dt, E, N, K, D),
              "%d vs %d" % (got.numel(), n))
        wb = w.contiguous().view(torch.uint8).reshape(E, N, -1)
        ND, RB = N // D, wb.shape[2]
        want = torch.zeros(n, dtype=torch.uint8)
        named = torch.zeros(n, dtype=torch.int32)
        # the formula element by element (vectorized over bytes of a row)
        byte = torch.arange(RB)
        for d in range(D):
            for e in range(E):
                for r in range(ND):
                    offs = torch.tensor([R.packed_offset(E, ND, RB, d, e, r, int(b)) for b in byte])
                    want[offs] = wb[e, d * ND + r]
                    named[offs] += 1
        check(torch.equal(got, want), "pack_reference is the formula's byte order (%s D=%d)" % (dt, D))
        check(int(named.max()) == 1 and int((named == 0).sum()) == n - E * N * RB,
              "the formula names every weight byte once (%s D=%d)" % (dt, D))
        check(bool((got[named == 0] == 0).all()), "padding is zero (%s D=%d)" % (dt, D))
        if D > 1:
            loc = w.reshape(E, D, ND, K).permute(1, 0, 2, 3).contiguous()
            check(torch.equal(R.pack_reference(loc, D), got), "localized input packs the same (%s)" % dt)
    check(ldmoe.packed_bytes(2, 64, 72, 1, f8) == 0 and ldmoe.packed_bytes(2, 64, 72, 1) > 0,
          "packed_bytes: e4m3 needs K % 16 == 0, bf16 does not")
    check(ldmoe.packed_bytes(2, 64, 64, 1, "fp8") == ldmoe.packed_bytes(2, 64, 32, 1),
          "the e4m3 packed layout is the bf16 one of the same bytes")

    # ---- quantization ----
    t = torch.randn(3, 200, 300, generator=g) * torch.logspace(-3, 3, 300)
    q, s = ldmoe.quantize_rowwise(t)
    check(q.dtype == f8 and tuple(s.shape) == (3, 200), "quantize_rowwise: e4m3 and one scale per row")
    back = ldmoe.dequantize(q, s, "rowwise")
    rel = ((back - t).abs() / (t.abs().amax(-1, keepdim=True))).max()
    check(float(rel) <= 2 ** -4, "rowwise round trip within e4m3's 2^-4 of the row's amax", "%.3g" % float(rel))
    check(float(q.float().abs().max()) <= 448 and float(q.float().abs().amax(-1).min()) >= 440,
          "rowwise: each row's amax maps to 448")
    qb, sb = ldmoe.quantize_block(t)
    check(tuple(sb.shape) == (3, 2, 3), "quantize_block: [E, ceil(N/128), ceil(K/128)] weight scales", str(tuple(sb.shape)))
    back = ldmoe.dequantize(qb, sb, "block")
    blk = sb.repeat_interleave(128, 1)[:, :200].repeat_interleave(128, 2)[:, :, :300] * 448
    check(float(((back - t).abs() / blk).max()) <= 2 ** -4, "block round trip within 2^-4 of the block's amax")
    x = torch.randn(37, 300, generator=g)
    qx, sx = ldmoe.quantize_block(x, 1)
    check(tuple(sx.shape) == (37, 3) and sx.t().is_contiguous(), "1x128 activation scales: [T, KB], token-contiguous")
    check(float(((ldmoe.dequantize(qx, sx, "block") - x).abs() / (sx.repeat_interleave(128, 1)[:, :300] * 448)).max())
          <= 2 ** -4, "1x128 round trip")
    z, sz = ldmoe.quantize_rowwise(torch.zeros(2, 32))
    check(bool((sz == 1).all()) and bool((z.float() == 0).all()), "an all-zero row gets scale 1 and zeros")

    # ---- localized scales ----
    E, N, K, D = 2, 512, 256, 2
    w = torch.randn(E, N, K, generator=g)
    w8, ws = ldmoe.quantize_rowwise(w)
    ls = ldmoe.localize_scales(ws, D)
    check(tuple(ls.shape) == (D, E, N // D) and torch.equal(ls[1, 0], ws[0, N // D:]), "localize_scales rowwise")
    w8b, wsb = ldmoe.quantize_block(w)
    lb = ldmoe.localize_scales(wsb, D, "block")
    loc = ldmoe.dequantize(w8b, wsb, "block").reshape(E, D, N // D, K).permute(1, 0, 2, 3)
    loc2 = ldmoe.dequantize(w8b.reshape(E, D, N // D, K).permute(1, 0, 2, 3).contiguous(), lb, "block")
    check(torch.equal(loc, loc2), "localize_scales block: localized weights dequantize alike")
    raises(lambda: ldmoe.localize_scales(wsb[:, :3], 2, "block"), ValueError, "multiple of 128", "block scales over D must split evenly")
    raises(lambda: ldmoe.localize_scales(ws, 3), ValueError, "multiple of D", "rowwise scales: N % D")
    raises(lambda: ldmoe.localize_scales(ws, 2, "columns"), ValueError, "rowwise' or 'block", "unknown scheme")

    # ---- grouped_mm_fp8 refusals (CPU tensors: everything up to the device check) ----
    T, E, N, K = 40, 4, 256, 256
    x8, xs = ldmoe.quantize_rowwise(torch.randn(T, K, generator=g))
    w8, ws = ldmoe.quantize_rowwise(torch.randn(E, N, K, generator=g))
    offs = torch.tensor([10, 10, 30, 40], dtype=torch.int32)
    xb8, xbs = ldmoe.quantize_block(torch.randn(T, K, generator=g), 1)
    wb8, wbs = ldmoe.quantize_block(torch.randn(E, N, K, generator=g))
    call = ldmoe.grouped_mm_fp8
    raises(lambda: call(x8, w8, offs, xs, ws), ValueError, "CUDA", "valid CPU arguments stop at the device check")
    raises(lambda: call(xb8, wb8, offs, xbs, wbs, scaling="block"), ValueError, "CUDA", "valid block arguments, the same")
    raises(lambda: call(x8.float(), w8, offs, xs, ws), TypeError, "x must be torch.float8_e4m3fn", "x dtype")
    raises(lambda: call(x8, w8.float(), offs, xs, ws), TypeError, "w must be torch.float8_e4m3fn", "w dtype")
    raises(lambda: call(x8, w8, offs.long(), xs, ws), TypeError, "offs must be torch.int32", "offs dtype")
    raises(lambda: call(x8, w8, offs, xs.double(), ws), TypeError, "x_scale must be a float32", "x_scale dtype")
    raises(lambda: call(x8, w8, offs, xs, ws.half()), TypeError, "w_scale must be a float32", "w_scale dtype")
    raises(lambda: call(x8, w8, offs, xs, None), TypeError, "w_scale", "w_scale missing")
    raises(lambda: call(x8[0], w8, offs, xs, ws), ValueError, "x must have 2 dims", "x rank")
    raises(lambda: call(x8, w8[0], offs, xs, ws), ValueError, "w must have 3 dims", "w rank for plain")
    raises(lambda: call(x8, w8, offs, xs, ws, layout="localized"), ValueError, "w must have 4 dims", "w rank for localized")
    raises(lambda: call(x8[:, :128], w8, offs, xs, ws), ValueError, "K mismatch", "K mismatch")
    raises(lambda: call(x8, w8, offs[:3], xs, ws), ValueError, "offs has 3 entries", "offs length")
    raises(lambda: call(x8, w8, offs, xs[:5], ws), ValueError, "x_scale for rowwise", "rowwise x_scale shape")
    raises(lambda: call(x8, w8, offs, xs, ws[:, :5]), ValueError, "w_scale for rowwise scaling of plain", "rowwise w_scale shape")
    raises(lambda: call(x8, w8, offs, xs, ws, scaling="block"), ValueError, "x_scale for block", "block needs 1x128 x_scale")
    raises(lambda: call(xb8, wb8, offs, xbs, ws, scaling="block"), ValueError, "w_scale for block", "block needs 128x128 w_scale")
    raises(lambda: call(x8, w8, offs, xs, ws, scaling="tensor"), ValueError, "scaling must be one of", "unknown scaling")
    raises(lambda: call(x8, w8, offs, xs, ws, mode="fast"), ValueError, "mode must be one of", "unknown mode")
    raises(lambda: call(x8, w8, offs, xs, ws, tile="ws128x64c16"), ValueError, "tile must be one of", "a bf16 tile name")
    raises(lambda: call(x8, w8, offs, xs, ws, layout="tiled"), ValueError, "layout must be one of", "unknown layout")
    raises(lambda: call(x8, w8, offs, xs, ws, out=torch.empty(T, N)), TypeError, "out must be torch.bfloat16", "out dtype")
    raises(lambda: call(x8, w8, offs, xs, ws, out=torch.empty(T, 8, dtype=torch.bfloat16)), ValueError, "out must be [40, 256]",
           "out shape")
    raises(lambda: call(x8, w8, offs, xs, ws, layout="packed"), TypeError, "PackedWeights", "packed needs PackedWeights")
    wl = w8.reshape(E, 2, N // 2, K).permute(1, 0, 2, 3).contiguous()
    raises(lambda: call(x8, wl, offs, xs, ws, layout="localized"), ValueError, "localize_scales", "localized w_scale order")
    raises(lambda: call(x8, wl, offs, xs, ldmoe.localize_scales(ws, 2), layout="localized"), ValueError, "CUDA",
           "localized with localized scales: the device check")
    data = torch.zeros(ldmoe.packed_bytes(E, N, K, 2, f8), dtype=torch.uint8)
    pw = ldmoe.PackedWeights(data, E, N, K, 2, f8)
    check(pw.dtype == f8 and "float8_e4m3fn" in repr(pw), "PackedWeights carries its dtype")
    raises(lambda: call(x8, pw, offs, xs, ldmoe.localize_scales(ws, 2)), ValueError, "CUDA", "packed e4m3: the device check")
    raises(lambda: call(x8, pw, offs, xs, ws), ValueError, "w_scale for rowwise scaling of packed", "packed w_scale order")
    raises(lambda: call(x8, pw, offs, xs, ldmoe.localize_scales(ws, 2), layout="plain"), TypeError, "PackedWeights but layout",
           "PackedWeights with layout plain")
    pb = ldmoe.PackedWeights(torch.zeros(ldmoe.packed_bytes(E, N, K, 2), dtype=torch.uint8), E, N, K, 2)
    raises(lambda: call(x8, pb, offs, xs, ldmoe.localize_scales(ws, 2)), TypeError, "bfloat16 weights", "bf16 PackedWeights refused")
    big = torch.zeros(ldmoe.packed_bytes(E, N, 1024, 2, f8), dtype=torch.uint8)
    check(ldmoe.PackedWeights(big, E, N, 1024, 2, f8).K == 1024, "an e4m3 buffer of K = 1024")
    raises(lambda: ldmoe.PackedWeights(big, E, N, 1024, 2), ValueError, "pack into", "bf16 size check on an e4m3 buffer")
    raises(lambda: ldmoe.PackedWeights(data, E, N, K, 2, torch.float16), TypeError, "dtype must be", "PackedWeights dtype")
    raises(lambda: call(x8, w8, offs, xs, ws.t().contiguous().t()), ValueError, "w_scale must be contiguous", "w_scale contiguity")
    raises(lambda: ldmoe.grouped_mm(x8, w8, offs), TypeError, "grouped_mm_fp8", "grouped_mm refuses e4m3 weights")
    raises(lambda: ldmoe.grouped_mm(x8, pw, offs), TypeError, "grouped_mm_fp8", "grouped_mm refuses e4m3 PackedWeights")
    raises(lambda: ldmoe.pack(w8, 2), ValueError, "CUDA", "pack: e4m3 on the CPU stops at the device check")
    check(ldmoe.FP8_TILES == {"auto": 0, "ws128x64c16fp8": 22, "ws128x128c16fp8": 23, "ws256x128fp8": 24,
                                  "ws256x64c16fp8": 25, "ws256x128c16fp8": 26}, "FP8_TILES")
    # bf16 activations: the library quantizes them (quantize_fp8); every check still precedes the launch
    xbf = torch.randn(T, K, generator=g).to(torch.bfloat16)
    raises(lambda: call(xbf, w8, offs, None, ws), ValueError, "CUDA", "bf16 x with x_scale None: stops at the device check")
    raises(lambda: call(xbf, wb8, offs, None, wbs, scaling="block"), ValueError, "CUDA", "bf16 x, block scaling: the same")
    raises(lambda: call(xbf, w8, offs, xs, ws), ValueError, "pass x_scale=None", "bf16 x with an x_scale")
    raises(lambda: call(x8, w8, offs, None, ws), TypeError, "x_scale must be a float32", "e4m3 x without x_scale")
    raises(lambda: call(xbf, w8, offs, None, ws[:, :5]), ValueError, "w_scale for rowwise", "bf16 x: w_scale shape still checked")
    raises(lambda: call(xbf[0], w8, offs, None, ws), ValueError, "x must have 2 dims", "bf16 x rank")
    raises(lambda: call(xbf[:, :24], w8, offs, None, ws), ValueError, "multiple of 16", "bf16 x: K % 16 before any device check")
    raises(lambda: call(xbf.half(), w8, offs, None, ws), TypeError, "x must be torch.float8_e4m3fn", "fp16 x refused")
    raises(lambda: call(xbf.t().contiguous().t(), w8, offs, None, ws), ValueError, "x must be contiguous", "bf16 x contiguity")
    qz = ldmoe.quantize_fp8
    raises(lambda: qz(xbf), ValueError, "CUDA", "quantize_fp8: valid CPU arguments stop at the device check")
    raises(lambda: qz(xbf, "block"), ValueError, "CUDA", "quantize_fp8 block: the same")
    raises(lambda: qz(xbf.float()), TypeError, "bfloat16", "quantize_fp8 dtype")
    raises(lambda: qz(xbf[0]), ValueError, "[T, K]", "quantize_fp8 rank")
    raises(lambda: qz(xbf[:, :24]), ValueError, "multiple of 16", "quantize_fp8 K % 16")
    raises(lambda: qz(xbf, "tensor"), ValueError, "scaling must be one of", "quantize_fp8 scaling")
    check("quantize_fp8" in ldmoe.__all__, "quantize_fp8 is public")

    # ---- the reference and its bound ----
    xd = ldmoe.dequantize(x8, xs, "rowwise").double()
    wd = ldmoe.dequantize(w8, ws, "rowwise").double()
    ref, absum = R.reference_fp8(x8, xs, w8, ws, offs, "rowwise")
    loop = torch.stack([xd[t] @ wd[0 if t < 10 else 2 if t < 30 else 3].t() for t in range(T)])
    check(torch.allclose(ref, loop), "reference_fp8 routes each row to its expert (expert 1 empty)")
    y = ref.to(torch.bfloat16)
    ok, why = R.check_fp8(y, ref, absum)
    check(ok, "the bound accepts bf16 rounding of the reference", why)
    bad = ref.clone()
    bad[10:30] *= 1.03   # one expert's weight scale 3 % off
    check(not R.check_fp8(bad.to(torch.bfloat16), ref, absum)[0], "the bound rejects a 3 % scale error on one expert")
    x_short = xd.clone()
    x_short[:, 128:] = 0   # a K block lost
    miss = torch.stack([x_short[t] @ wd[0 if t < 10 else 2 if t < 30 else 3].t() for t in range(T)])
    check(not R.check_fp8(miss.to(torch.bfloat16), ref, absum)[0], "the bound rejects a missing K block")
    swap = ref.clone()
    swap[[11, 12]] = swap[[12, 11]]
    check(not R.check_fp8(swap.to(torch.bfloat16), ref, absum)[0], "the bound rejects two swapped rows")
    refb, absb = R.reference_fp8(xb8, xbs, wb8, wbs, offs, "block")
    xdb, wdb = ldmoe.dequantize(xb8, xbs, "block").double(), ldmoe.dequantize(wb8, wbs, "block").double()
    check(torch.allclose(refb[10:30], xdb[10:30] @ wdb[2].t()), "block reference")
    check(R.check_fp8(refb.to(torch.bfloat16), refb, absb)[0], "the bound accepts the block reference's rounding")
    nan_rows = R.reference_fp8(x8, xs, w8, ws, torch.tensor([5, 5, 20, 25], dtype=torch.int32), "rowwise")[0]
    check(bool(torch.isnan(nan_rows[25:]).all()) and not bool(torch.isnan(nan_rows[:25]).any()),
          "rows past offs[-1] are outside the reference")


def main_no_torch():
    """What needs no torch: the e4m3 packed sizes through the library and the names."""
    import ldmoe
    for E, N, K, D in [(8, 14336, 4096, 2), (3, 64, 144, 2), (2, 520, 1040, 2), (1, 8, 16, 1)]:
        check(ldmoe.packed_bytes(E, N, K, D, "fp8") == ldmoe.packed_bytes(E, N, K // 2, D) > 0,
              "packed_bytes fp8 E=%d N=%d K=%d D=%d is the bf16 layout of K/2" % (E, N, K, D))
    check(ldmoe.packed_bytes(2, 64, 72, 1, "fp8") == 0, "packed_bytes fp8 refuses K % 16")
    check(ldmoe.FP8_TILES == {"auto": 0, "ws128x64c16fp8": 22, "ws128x128c16fp8": 23, "ws256x128fp8": 24,
                                  "ws256x64c16fp8": 25, "ws256x128c16fp8": 26}, "FP8_TILES")
    check(ldmoe.SCALINGS == {"rowwise": 1, "block": 2}, "SCALINGS = enum ldmoe_fp8_scaling")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--result", help="write '<passed> <failed>' here")
    a = ap.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        for cand in (os.environ.get("LDMOE_TEST_PYTHON"), os.environ.get("SERVE_TEST_PYTHON")):
            if cand and os.path.exists(cand) and subprocess.run([cand, "-c", "import torch"],
                                                                capture_output=True).returncode == 0:
                return subprocess.run([cand, os.path.abspath(__file__)] + sys.argv[1:]).returncode
        print("NOT RUN: the torch checks (quantization, scales, references, grouped_mm_fp8's refusals): no python "
              "with torch here; set LDMOE_TEST_PYTHON to one (the CPU build of torch is enough)", flush=True)
        if not os.environ.get("LDMOE_LIB"):
            os.environ["LDMOE_LIB"] = os.path.join(ROOT, "build", "libldmoe.so")
        main_no_torch()
    else:
        if not os.environ.get("LDMOE_LIB"):
            os.environ["LDMOE_LIB"] = os.path.join(ROOT, "build", "libldmoe.so")
        try:
            main_torch()
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            check(False, "the suite ran to its end")
    print("test-moe-py: %d passed, %d failed" % (PASSED, FAILED))
    if a.result:
        with open(a.result, "w") as f:
            f.write("%d %d\n" % (PASSED, FAILED))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
