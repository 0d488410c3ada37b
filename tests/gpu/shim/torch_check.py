#!/usr/bin/env python3
"""torch_check.py — an unmodified PyTorch program for the shim's GPU suite.

Deterministic matmuls and elementwise ops on tensors whose cudaMalloc sizes
tests/gpu/shim/torch.policy tags; prints one SHA-256 per result on stdout and nothing else.
The suite runs it without the shim and under stock/memory/mismatch and compares stdout.

  default caching allocator: 4096 x 4096 fp32 tensors -> cudaMalloc(64 MiB) segments
  PYTORCH_NO_CUDA_MEMORY_CACHING=1: 3000 x 3000 fp32 -> cudaMalloc(36000000) per tensor

Frees everything and calls torch.cuda.empty_cache() so the frees reach the shim.
"""
import argparse
import hashlib
import os
import sys

# Must be set before cuBLAS is initialized for deterministic algorithms.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def digest(t):
    return hashlib.sha256(t.detach().contiguous().cpu().view(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


def run(n, seed):
    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev)
    g.manual_seed(seed)
    a = torch.randn(n, n, device=dev, generator=g, dtype=torch.float32)
    b = torch.randn(n, n, device=dev, generator=g, dtype=torch.float32)
    results = {}
    c = a @ b                                  # fp32 GEMM
    results["matmul_fp32"] = digest(c)
    d = torch.relu(c) * 0.5 + a                # elementwise over the whole (split) range
    results["elementwise"] = digest(d)
    e = (a.to(torch.bfloat16) @ b.to(torch.bfloat16).t()).float()
    results["matmul_bf16"] = digest(e)
    f = torch.cat([d[n // 2:], d[: n // 2]])  # copy that moves rows across the middle seam
    f.mul_(1.0009765625).add_(e)
    results["shifted"] = digest(f)
    results["colsum"] = digest(f.sum(dim=0))
    results["rowmax"] = digest(torch.amax(f, dim=1))
    del a, b, c, d, e, f
    return results


def main(argv):
    p = argparse.ArgumentParser(description="Deterministic PyTorch workload; prints result hashes.")
    p.add_argument("--n", type=int, default=0,
                   help="matrix side (default 4096, or 3000 when PYTORCH_NO_CUDA_MEMORY_CACHING=1)")
    p.add_argument("--seed", type=int, default=1234)
    a = p.parse_args(argv)
    if a.n < 0:
        p.error("--n must be positive")
    global torch
    import torch
    if not torch.cuda.is_available():
        print("torch_check: no CUDA device visible to PyTorch", file=sys.stderr)
        return 2
    # fp32 matmuls stay IEEE fp32 (PyTorch's default); not set here because 2.9+ rejects mixing
    # the legacy allow_tf32 switch with the new fp32_precision one.
    torch.use_deterministic_algorithms(True)
    uncached = os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1"
    n = a.n or (3000 if uncached else 4096)
    res = run(n, a.seed)
    torch.cuda.synchronize()
    # cuBLAS keeps its workspaces (allocator blocks) until exit; give them back so that
    # empty_cache() can return every segment and the run ends with nothing live.
    if hasattr(torch._C, "_cuda_clearCublasWorkspaces"):
        torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.empty_cache()
    for k in sorted(res):
        print(f"{k:12s} n={n} sha256={res[k]}")
    sys.stdout.flush()
    st = torch.cuda.memory_stats()
    print(f"torch_check: n={n} uncached={uncached} segments_alloc={st.get('segment.all.allocated', 0)} "
          f"segments_freed={st.get('segment.all.freed', 0)} reserved_now={torch.cuda.memory_reserved()}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
