#!/usr/bin/env python3
"""throughput.py — what binding to fewer SMs does to a compute-bound and a memory-bound
kernel, for the compute-binding benchmark (bench/compute/run.sh runs it in each state).

Prints "key=value": sms (what the program sees), matmul_tflops (bf16 N^3, median of --reps
timed with CUDA events), copy_tbs (a device-to-device copy of --copy-mib MiB, bytes read +
written over time, median). Needs PyTorch with a GPU."""
import argparse
import statistics
import sys

import torch


def timed(fn, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end))
    return statistics.median(out)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=8192, help="matmul size (default 8192)")
    ap.add_argument("--copy-mib", type=int, default=2048, help="copy size in MiB (default 2048)")
    ap.add_argument("--reps", type=int, default=20, help="timed repetitions (default 20)")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("throughput.py: no GPU", file=sys.stderr)
        return 3
    print("sms=%d" % torch.cuda.get_device_properties(0).multi_processor_count)
    x = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        x @ y
    ms = timed(lambda: x @ y, a.reps)
    print("matmul_tflops=%.1f" % (2 * a.n ** 3 / ms / 1e9))
    src = torch.empty(a.copy_mib << 20, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    ms = timed(lambda: dst.copy_(src), a.reps)
    print("copy_tbs=%.3f" % (2 * src.numel() / ms / 1e9))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
