#!/usr/bin/env python3
"""gemm.py — bf16 GEMM rates for the one-side study (bench/compute/one_side/run.sh).

    gemm.py CONFIG [--quick]

Square torch.matmul (compute-bound: TFLOP/s), decode-shaped ones (M tokens x a 14336 x 4096
weight, weight-streaming: TFLOP/s and weight bytes read per second), and serve.py's decode MoE
step: the six torch._grouped_mm calls of its two Mixtral-like layers at batch 32 (8 experts,
top-2: 8 rows per expert; w1, w3 [8, 14336, 4096], w2 [8, 4096, 14336]), ms per step. Medians
of CUDA-event timings; weights rotated beyond L2. Prints the lines of one_side:
"R\\t<config>\\t<case>\\t<metric>\\t<value>".

NOTES: timing the MoE step on chosen SM sets of an unbound process, the other SMs held by a
resident blocker kernel (one CTA per SM with all its shared memory, polling a host-mapped flag),
slowed the GEMM 20-40x on an H100 (2026-12-06), so it measured the blocker, not the SM set;
that method was dropped (git history: commit 1f40639)."""
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
    moe_step(config, reps)
    return 0


def moe_step(config, reps):
    """serve.py's expert GEMMs of one decode step, alone."""
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


if __name__ == "__main__":
    sys.exit(main())
