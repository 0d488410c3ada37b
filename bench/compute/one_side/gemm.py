#!/usr/bin/env python3
"""gemm.py — bf16 torch.matmul rates for the one-side study (bench/compute/one_side/run.sh).

Square GEMMs (compute-bound: TFLOP/s) and decode-shaped ones (M tokens x a 14336 x 4096 weight,
weight-streaming: TFLOP/s and the weight bytes read per second), median of CUDA-event timings;
the decode shapes rotate over enough weights to defeat L2. Prints the lines of one_side:
"R\\t<config>\\tgemm_<shape>\\t<metric>\\t<value>"."""
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
