#!/usr/bin/env python3
"""gemm.py — bf16 GEMM rates for the one-side study (bench/compute/one_side/run.sh).

    gemm.py CONFIG [--quick] [--masks FILE]

Square torch.matmul (compute-bound: TFLOP/s), decode-shaped ones (M tokens x a 14336 x 4096
weight, weight-streaming: TFLOP/s and weight bytes read per second), and serve.py's decode MoE
step: the six torch._grouped_mm calls of its two Mixtral-like layers at batch 32 (8 experts,
top-2: 8 rows per expert; w1, w3 [8, 14336, 4096], w2 [8, 4096, 14336]), ms per step. Medians
of CUDA-event timings; weights rotated beyond L2. With --masks (lines "name<TAB>sm,sm,..."),
the MoE step is timed again on each SM set: libsmmask.so holds every other SM, so the GEMM's
CTAs run only there. Prints the lines of one_side: "R\\t<config>\\t<case>\\t<metric>\\t<value>"."""
import ctypes
import os
import statistics
import sys

import torch


def timed(fn, reps):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(reps):
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e))
    return statistics.median(out)


def main():
    config = sys.argv[1] if len(sys.argv) > 1 else "bound"
    quick = "--quick" in sys.argv
    reps = 3 if quick else 10
    torch.manual_seed(0)
    for n in (2048, 4096, 8192):
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            a @ b
        ms = timed(lambda: a @ b, reps)
        print("R\t%s\tgemm_%d^3\tTFLOP/s\t%.6g" % (config, n, 2 * n ** 3 / ms / 1e9))
        del a, b
    n_, k_ = 14336, 4096
    ws = [torch.randn(n_, k_, device="cuda", dtype=torch.bfloat16) for _ in range(4)]  # 470 MB
    for m in (1, 32):
        x = torch.randn(m, k_, device="cuda", dtype=torch.bfloat16)

        def run():
            for w in ws:
                x @ w.t()
        run()
        ms = timed(run, reps) / len(ws)
        print("R\t%s\tgemm_m%d_14336x4096\tTFLOP/s\t%.6g" % (config, m, 2 * m * n_ * k_ / ms / 1e9))
        print("R\t%s\tgemm_m%d_14336x4096\tweight_GB/s\t%.6g" % (config, m, n_ * k_ * 2 / ms / 1e6))
    del ws
    moe_step(config, reps, masks_arg(sys.argv))
    return 0


def masks_arg(argv):
    if "--masks" not in argv:
        return []
    out = []
    with open(argv[argv.index("--masks") + 1]) as f:
        for line in f:
            name, _, sms = line.strip().partition("\t")
            if name and sms:
                out.append((name, [int(x) for x in sms.split(",")]))
    return out


def moe_step(config, reps, masks):
    """serve.py's expert GEMMs of one decode step, alone; then under each SM mask."""
    E, H, F, rows = 8, 4096, 14336, 8
    layers = [(torch.randn(E, F, H, device="cuda", dtype=torch.bfloat16),
               torch.randn(E, F, H, device="cuda", dtype=torch.bfloat16),
               torch.randn(E, H, F, device="cuda", dtype=torch.bfloat16)) for _ in range(2)]
    x = torch.randn(E * rows, H, device="cuda", dtype=torch.bfloat16)
    offs = torch.arange(rows, E * rows + 1, rows, device="cuda", dtype=torch.int32)
    weight_bytes = sum(w.numel() * 2 for l in layers for w in l)

    def step():
        for w1, w3, w2 in layers:
            a = torch._grouped_mm(x, w1.transpose(-2, -1), offs=offs)
            b = torch._grouped_mm(x, w3.transpose(-2, -1), offs=offs)
            torch._grouped_mm(a * b, w2.transpose(-2, -1), offs=offs)

    def report(name):
        step()
        ms = timed(step, reps)
        print("R\t%s\tmoe_step_grouped_mm\tms\t%.6g" % (name, ms))
        print("R\t%s\tmoe_step_grouped_mm\tweight_GB/s\t%.6g" % (name, weight_bytes / ms / 1e6))
    report(config)
    if not masks:
        return
    lib = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../build/bench/compute/one_side/libsmmask.so"))
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    for name, sms in masks:
        keep = (ctypes.c_ubyte * nsm)(*[1 if s in sms else 0 for s in range(nsm)])
        torch.cuda.synchronize()
        blocked = lib.smmask_start(keep, nsm)
        if blocked < 0:
            print("gemm.py: mask %s failed" % name, file=sys.stderr)
            continue
        try:
            report(name)
        finally:
            lib.smmask_stop()
        print("R\t%s\tmoe_step_grouped_mm\tblocked_sms\t%d" % (name, blocked))


if __name__ == "__main__":
    sys.exit(main())
