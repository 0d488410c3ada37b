#!/usr/bin/env python3
"""torch_bind.py — an unmodified PyTorch program for the compute-binding GPU suite.

Prints "key=value" lines: a SHA-256 per result (bf16/fp32 matmul, SDPA, a Triton kernel, a CUDA
graph replay) and, for a Triton %smid marker run eagerly, on a side stream and inside a
replayed CUDA graph, the SMs its programs ran on (<tag>_sms, <tag>_set as in bind_check.cu).
tests/gpu/compute/run.sh compares the hashes with the unbound run and the SM sets with the
shim's report. Needs torch and triton (the marker lines are absent without triton)."""
import hashlib
import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402

try:
    import triton
    import triton.language as tl
except ImportError:  # the hashes still say something
    triton = None


def digest(t):
    return hashlib.sha256(t.detach().contiguous().cpu().view(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


def smset(ids):
    mask = 0
    for s in set(int(x) for x in ids.tolist()):
        mask |= 1 << s
    return len(set(int(x) for x in ids.tolist())), "%064x" % mask


if triton is not None:
    @triton.jit
    def smid_kernel(out_ptr, spin):
        pid = tl.program_id(0)
        z = tl.full([1], 0, tl.int32)
        sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [z], dtype=tl.int32, is_pure=False, pack=1)
        # Hold the SM a little so that the launch spreads over all SMs it may use.
        acc = z
        for i in range(spin):
            acc += i
        tl.store(out_ptr + pid + tl.arange(0, 1), sm + acc * 0)

    @triton.jit
    def axpy_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.5 + tl.load(y_ptr + offs, mask=m), mask=m)


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev)
    g.manual_seed(7)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print("device_sms=%d" % sms)
    a = torch.randn(2048, 2048, device=dev, generator=g)
    b = torch.randn(2048, 2048, device=dev, generator=g)
    print("matmul_fp32=%s" % digest(a @ b))
    print("matmul_bf16=%s" % digest(a.bfloat16() @ b.bfloat16()))
    q = torch.randn(4, 8, 512, 64, device=dev, generator=g, dtype=torch.bfloat16)
    k = torch.randn(4, 8, 512, 64, device=dev, generator=g, dtype=torch.bfloat16)
    v = torch.randn(4, 8, 512, 64, device=dev, generator=g, dtype=torch.bfloat16)
    print("sdpa=%s" % digest(torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)))
    if triton is not None:
        n = 1 << 20
        x = torch.randn(n, device=dev, generator=g)
        y = torch.randn(n, device=dev, generator=g)
        out = torch.empty_like(x)
        axpy_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        print("triton_axpy=%s" % digest(out))
        grid = 8 * sms
        ids = torch.zeros(grid, dtype=torch.int32, device=dev)
        smid_kernel[(grid,)](ids, 20000)
        torch.cuda.synchronize()
        c, m = smset(ids)
        print("marker_eager_sms=%d\nmarker_eager_set=%s" % (c, m))
        side = torch.cuda.Stream()
        ids.zero_()
        with torch.cuda.stream(side):
            smid_kernel[(grid,)](ids, 20000)
        torch.cuda.synchronize()
        c, m = smset(ids)
        print("marker_stream_sms=%d\nmarker_stream_set=%s" % (c, m))
        # A CUDA graph: the marker and a matmul captured once, replayed.
        static_a = a.clone()
        static_ids = torch.zeros(grid, dtype=torch.int32, device=dev)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            smid_kernel[(grid,)](static_ids, 20000)
            static_out = static_a @ b
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            smid_kernel[(grid,)](static_ids, 20000)
            static_out = static_a @ b
        static_ids.zero_()
        graph.replay()
        torch.cuda.synchronize()
        c, m = smset(static_ids)
        print("marker_graph_sms=%d\nmarker_graph_set=%s" % (c, m))
        print("graph_matmul=%s" % digest(static_out))
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
