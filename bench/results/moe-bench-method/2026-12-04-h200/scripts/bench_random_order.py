#!/usr/bin/env python3
"""Session 20: bench_moe.py with the call orders it had before the balanced design (a fresh
seeded random permutation each repetition), everything else as now; for comparing the two
designs' same-code spread in one call. Arguments: bench_moe.py's."""
import os
import random
import sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "..", "..", "moe"))
sys.argv[0] = os.path.join(here, "..", "..", "..", "..", "moe", "bench_moe.py")
import bench_moe  # noqa: E402


def random_orders(n, reps, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(reps):
        ks = list(range(n))
        rng.shuffle(ks)
        out.append(ks)
    return out


bench_moe.call_order.call_orders = random_orders
sys.exit(bench_moe.main())
