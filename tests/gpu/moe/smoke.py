#!/usr/bin/env python3
"""smoke.py — one small grouped GEMM per tile against an fp32 reference; small enough to run
under compute-sanitizer (memcheck, synccheck) in seconds:

    compute-sanitizer --tool memcheck python3 tests/gpu/moe/smoke.py [--lab] [--tiles a,b,...] [--fp8]

Without --lab the tiles of libldmoe.so ($LDMOE_LIB); with it every tile, through the lab build
(bench/moe/lab, $LDMOE_LAB_LIB).

--fp8: the FP8 tiles instead, each with both scaling schemes on packed weights (D = 2), against
tests/moe/ldmoe_ref.py's bound, then the library's quantization and every tile again on bf16
tokens quantized inside the call, back to back (the dependent launches). Prints one PASS/FAIL
line per case; exits 1 on any failure.
"""
import argparse
import os
import sys

# torch and ldmoe are imported by main() after the arguments are parsed, so that --help works
# on a machine without them.
torch = ldmoe = None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiles", default="", help="comma-separated tile names (default: every tile)")
    ap.add_argument("--lab", action="store_true", help="the lab build: every tile")
    ap.add_argument("--fp8", action="store_true", help="the FP8 tiles (ldmoe.grouped_mm_fp8), both scaling schemes")
    a = ap.parse_args()
    global torch, ldmoe
    import torch
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
    sys.path[:0] = [os.path.join(root, "kernels", "moe"), os.path.join(root, "bench", "moe", "lab"),
                    os.path.join(root, "tests", "moe")]
    if a.lab:
        import ldmoe_lab as ldmoe
    else:
        import ldmoe
    if a.fp8:
        return smoke_fp8(a.tiles.split(",") if a.tiles else [t for t in ldmoe.FP8_TILES if t != "auto"])
    tiles = a.tiles.split(",") if a.tiles else list(ldmoe.TILES)
    g = torch.Generator().manual_seed(7)
    T, E, N, K = 333, 6, 512, 320   # counts not tile multiples, one empty expert, K not a stage multiple
    counts = [70, 0, 129, 5, 64, 65]
    offs = torch.tensor(torch.tensor(counts).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    x = torch.randn((T, K), generator=g).to(torch.bfloat16).cuda()
    w = (torch.randn((E, N, K), generator=g) / K ** 0.5).to(torch.bfloat16).cuda()
    ref = torch.cat([x[s:s + c].float() @ w[e].float().t() for e, (s, c) in
                     enumerate(zip([0] + torch.tensor(counts).cumsum(0).tolist()[:-1], counts))])
    wl = ldmoe.to_localized(w, 2)
    bad = 0
    for tile in tiles:
        y = torch.full((T, N), float("nan"), dtype=torch.bfloat16, device="cuda")
        ldmoe.grouped_mm(x, wl, offs, layout="localized", mode="aware", tile=tile, out=y)
        torch.cuda.synchronize()
        err = (torch.linalg.norm(y.float() - ref) / torch.linalg.norm(ref)).item()
        ok = bool(torch.isfinite(y.float()).all()) and err < 1e-2
        bad += not ok
        print("%s smoke tile=%s rel_err=%.2e" % ("PASS" if ok else "FAIL", tile, err), flush=True)
    return 1 if bad else 0


def smoke_fp8(tiles):
    import ldmoe_ref
    g = torch.Generator().manual_seed(7)
    T, E, N, K = 333, 6, 512, 336   # counts not tile multiples, one empty expert, K not a multiple of 128
    counts = [70, 0, 129, 5, 64, 60]   # 328: five rows past offs[-1]
    offs = torch.tensor(torch.tensor(counts).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    x8 = (torch.randn((T, K), generator=g) * 16).to(torch.float8_e4m3fn).cuda()
    w8 = (torch.randn((E, N, K), generator=g) * 16).to(torch.float8_e4m3fn).cuda()
    wp = ldmoe.pack(w8, 2)
    KB = -(-K // 128)
    scales = {"rowwise": ((torch.rand(T, generator=g) + 0.5).cuda(), (torch.rand((E, N), generator=g) + 0.5).cuda()),
              "block": ((torch.rand((KB, T), generator=g) + 0.5).cuda().t(),
                        (torch.rand((E, N // 128, KB), generator=g) + 0.5).cuda())}
    bad = 0
    for scaling, (xs, ws) in scales.items():
        ref, absum = ldmoe_ref.reference_fp8(x8, xs, w8, ws, offs, scaling)
        for tile in tiles:
            y = torch.full((T, N), float("nan"), dtype=torch.bfloat16, device="cuda")
            ldmoe.grouped_mm_fp8(x8, wp, offs, xs, ldmoe.localize_scales(ws, 2, scaling), scaling=scaling, mode="aware",
                                 tile=tile, out=y)
            torch.cuda.synchronize()
            ok, why = ldmoe_ref.check_fp8(y[:328], ref[:328], absum[:328])
            ok = ok and bool(torch.isnan(y[328:].float()).all())
            bad += not ok
            print("%s smoke fp8 %s tile=%s %s" % ("PASS" if ok else "FAIL", scaling, tile, why), flush=True)
    xb = (torch.randn((T, K), generator=g) * 4).to(torch.bfloat16).cuda()   # the library's quantization too
    for scaling in ("rowwise", "block"):
        q8, qs = ldmoe.quantize_fp8(xb, scaling)
        w8_, ws_ = ldmoe.quantize_rowwise(xb) if scaling == "rowwise" else ldmoe.quantize_block(xb, 1)
        torch.cuda.synchronize()
        ok = torch.equal(q8.view(torch.uint8), w8_.view(torch.uint8)) and torch.equal(qs, ws_)
        bad += not ok
        print("%s smoke fp8 quantize_fp8 %s" % ("PASS" if ok else "FAIL", scaling), flush=True)
        # bf16 tokens quantized inside the call, the GEMMs back to back without a synchronization:
        # each GEMM is a programmatic dependent of the kernel before it (the quantizer, or the
        # previous GEMM), so the sanitizers see its early start.
        ref, absum = ldmoe_ref.reference_fp8(q8, qs, w8, scales[scaling][1], offs, scaling)
        ys = []
        for tile in tiles:
            ys.append(torch.full((T, N), float("nan"), dtype=torch.bfloat16, device="cuda"))
            ldmoe.grouped_mm_fp8(xb, wp, offs, None, ldmoe.localize_scales(scales[scaling][1], 2, scaling),
                                 scaling=scaling, mode="aware", tile=tile, out=ys[-1])
        torch.cuda.synchronize()
        for tile, y in zip(tiles, ys):
            ok, why = ldmoe_ref.check_fp8(y[:328], ref[:328], absum[:328])
            ok = ok and bool(torch.isnan(y[328:].float()).all())
            bad += not ok
            print("%s smoke fp8 %s tile=%s on bf16 x, back to back %s" % ("PASS" if ok else "FAIL", scaling, tile, why),
                  flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
