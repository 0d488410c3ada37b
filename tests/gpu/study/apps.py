#!/usr/bin/env python3
"""apps.py — small unmodified CuPy and JAX programs for the study-state GPU suite, one per
allocation api that the torch programs do not reach. Each prints "key=value" lines (hashes of
deterministic results) and nothing else on stdout.

  cupy-async    CuPy with MemoryAsyncPool: every array through cudaMallocAsync (api async)
  cupy-managed  CuPy with managed memory (cudaMallocManaged, api managed); 64 MiB at a time
  jax           JAX with XLA's preallocated arena (the suite sets 25 %; api vmm or driver)
"""
import argparse
import hashlib
import os
import sys

# XLA picks GEMM kernels by timing them: on fewer SMs another kernel can win, with other
# rounding. Level 0 takes the heuristic's choice, the same in every state.
os.environ.setdefault("XLA_FLAGS", "--xla_gpu_autotune_level=0")


def cupy_prog(kind):
    import cupy as cp
    if kind == "async":
        pool = cp.cuda.MemoryAsyncPool()
    else:
        pool = cp.cuda.MemoryPool(cp.cuda.malloc_managed)
    cp.cuda.set_allocator(pool.malloc)
    n = 4096                                   # 64 MiB fp32 arrays: what the rule tags
    rs = cp.random.RandomState(1234)
    a = rs.standard_normal((n, n), dtype=cp.float32)
    b = rs.standard_normal((n, n), dtype=cp.float32)
    c = a @ b
    d = cp.sum(cp.sin(c[:, :64]) * 3, axis=1)        # not a scan: CUB's float scan is not repeatable
    print("matmul_hash=%s" % hashlib.sha256(cp.asnumpy(c).tobytes()).hexdigest())
    print("scan_hash=%s" % hashlib.sha256(cp.asnumpy(d).tobytes()).hexdigest())
    del a, b, c, d
    cp.cuda.Device(0).synchronize()
    pool.free_all_blocks()          # the program frees all it allocated


def jax_prog():
    import jax
    import jax.numpy as jnp
    import numpy as np
    k = jax.random.PRNGKey(1234)
    ka, kb = jax.random.split(k)
    a = jax.random.normal(ka, (4096, 4096), dtype=jnp.float32)
    b = jax.random.normal(kb, (4096, 4096), dtype=jnp.float32)
    c = jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST)
    d = jnp.sum(jnp.sin(c[:, :64]) * 3, axis=1)
    print("matmul_hash=%s" % hashlib.sha256(np.asarray(c).tobytes()).hexdigest())
    print("scan_hash=%s" % hashlib.sha256(np.asarray(d).tobytes()).hexdigest())
    print("jax_backend=%s" % jax.default_backend())


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("prog", choices=["cupy-async", "cupy-managed", "jax"])
    a = ap.parse_args(argv)
    if a.prog == "jax":
        jax_prog()
    else:
        cupy_prog(a.prog.split("-")[1])
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
