#!/usr/bin/env python3
"""cupy_bind.py — an unmodified CuPy program for the compute-binding GPU suite: a RawKernel
%smid marker (eager and on a created stream) and the hash of a CuPy computation, printed as
"key=value" lines like torch_bind.py. With --jax, a JAX computation's hash too (JAX and CuPy in
one process, both on the device's primary context)."""
import argparse
import hashlib
import os
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# XLA picks GEMM kernels by timing them: on fewer SMs another kernel can win, with other
# rounding. Level 0 takes the heuristic's choice, the same bound and unbound.
os.environ.setdefault("XLA_FLAGS", "--xla_gpu_autotune_level=0")

import cupy as cp  # noqa: E402

MARKER = r'''
extern "C" __global__ void smid(unsigned *out, unsigned long long hold) {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < hold);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}
'''


def smset(ids):
    vals = set(int(x) for x in cp.asnumpy(ids).tolist())
    mask = 0
    for s in vals:
        mask |= 1 << s
    return len(vals), "%064x" % mask


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jax", action="store_true", help="also run a JAX computation in this process")
    a = ap.parse_args(argv)
    sms = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    print("device_sms=%d" % sms)
    k = cp.RawKernel(MARKER, "smid")
    grid = 8 * sms
    ids = cp.zeros(grid, dtype=cp.uint32)
    k((grid,), (32,), (ids, cp.uint64(20000)))
    cp.cuda.Device(0).synchronize()
    c, m = smset(ids)
    print("marker_eager_sms=%d\nmarker_eager_set=%s" % (c, m))
    s = cp.cuda.Stream(non_blocking=True)
    ids[:] = 0
    with s:
        k((grid,), (32,), (ids, cp.uint64(20000)))
    s.synchronize()
    c, m = smset(ids)
    print("marker_stream_sms=%d\nmarker_stream_set=%s" % (c, m))
    x = cp.arange(1 << 20, dtype=cp.float32) / 7
    # Row sums, not a scan: CUB's float scan adds its tiles in whatever order they finish, so
    # two runs on the same SMs already differ in the last bits.
    y = cp.sum((cp.sin(x) * 3 + x[::-1]).reshape(1024, 1024), axis=1)
    print("cupy_hash=%s" % hashlib.sha256(cp.asnumpy(y).tobytes()).hexdigest())
    if a.jax:
        import jax
        import jax.numpy as jnp
        import numpy as np
        key = jax.random.PRNGKey(3)
        p = jax.random.normal(key, (1024, 1024), dtype=jnp.float32)
        r = jax.jit(lambda t: jnp.tanh(t @ t.T) + 1)(p)
        print("jax_hash=%s" % hashlib.sha256(np.asarray(r).tobytes()).hexdigest())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
