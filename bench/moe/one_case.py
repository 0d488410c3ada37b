#!/usr/bin/env python3
"""one_case.py — run one libldmoe grouped GEMM a few times, for profilers (ncu, nsys).

    ncu --kernel-name regex:grouped_mm --launch-skip 2 --launch-count 1 \\
        python3 bench/moe/one_case.py --shape 2 --m 64 --tile ws128x64 --tune 0

--shape indexes bench_moe.py's SHAPES (0: 8 experts, 1: 32, 2: 128). Equal tokens per expert,
weights in --layout (default localized; or packed), --mode (default aware), no shim (even map). Prints the median CUDA-event time of the calls
(meaningless under a profiler's replay, useful without one).
"""
import argparse
import os
import statistics
import sys

SHAPES = [(8, 4096, 14336), (32, 7168, 4096), (128, 2048, 1536)]   # E, K, N (as bench_moe.py)


def equal_case(shape, m, sets, layout="localized", fp8=False):
    """Imports torch and ldmoe; returns (torch, ldmoe, (E, K, N), weight sets in `layout` for two
    domains, x, offs, y) for SHAPES[shape] with m tokens per expert (also used by sustained.py).
    fp8: e4m3 weights and tokens with rowwise scales instead; each weight set is then (weights,
    their scales in the layout's order) and x is (tokens, their scales)."""
    import torch
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [os.path.join(here, "..", "..", "kernels", "moe"), os.path.join(here, "lab")]
    import ldmoe_lab as ldmoe   # every tile and the tune bits: the lab build (bench/moe/lab)
    E, K, N = SHAPES[shape]
    T = E * m
    conv = ldmoe.pack if layout == "packed" else ldmoe.to_localized
    offs = torch.arange(1, E + 1, device="cuda", dtype=torch.int32) * m
    y = torch.empty((T, N), device="cuda", dtype=torch.bfloat16)
    if fp8:   # random e4m3 with the spread of real data (as bench_moe.py's rand_e4m3), scales in [0.5, 1.5)
        def e4m3(shape):
            return (torch.randn(shape, device="cuda") * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
        wls = [(conv(e4m3((E, N, K)), 2), ldmoe.localize_scales(torch.rand((E, N), device="cuda") + 0.5, 2))
               for _ in range(sets)]
        x = (e4m3((T, K)), torch.rand(T, device="cuda") + 0.5)
        return torch, ldmoe, (E, K, N), wls, x, offs, y
    wls = [conv(torch.randn((E, N, K), device="cuda", dtype=torch.bfloat16) * 0.02, 2) for _ in range(sets)]
    x = torch.randn((T, K), device="cuda", dtype=torch.bfloat16)
    return torch, ldmoe, (E, K, N), wls, x, offs, y


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", type=int, default=2, choices=range(len(SHAPES)))
    ap.add_argument("--m", type=int, default=64, help="tokens per expert")
    ap.add_argument("--tile", default="auto")
    ap.add_argument("--tune", type=lambda v: int(v, 0), default=0, help="LDMOE_TUNE_* bits")
    ap.add_argument("--mode", default="aware", choices=["auto", "aware", "unaware", "static"])
    ap.add_argument("--layout", default="localized", choices=["localized", "packed"])
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--sets", type=int, default=2, help="weight sets used in turn (no L2 carry-over)")
    a = ap.parse_args()
    torch, ldmoe, (E, K, N), wls, x, offs, y = equal_case(a.shape, a.m, a.sets, a.layout)
    ts = []
    for i in range(a.calls):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        ldmoe.grouped_mm(x, wls[i % a.sets], offs, layout=a.layout, mode=a.mode, tile=a.tile, out=y, tune=a.tune)
        e.record()
        ts.append((s, e))
    torch.cuda.synchronize()
    print("E=%d K=%d N=%d m=%d tile=%s tune=%#x mode=%s layout=%s: median %.1f us over %d calls" % (
        E, K, N, a.m, a.tile, a.tune, a.mode, a.layout, statistics.median(s.elapsed_time(e) * 1e3 for s, e in ts), a.calls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
