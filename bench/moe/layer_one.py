#!/usr/bin/env python3
"""layer_one.py — run one layer case a few times (for ncu / compute-sanitizer): SHAPE T [LAYOUT] [REPS]."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernels", "moe"))
import ldmoe  # noqa: E402

SHAPES = {"qwen3": (128, 8, 2048, 768), "dsv2lite": (64, 6, 2048, 1408), "mixtral": (8, 2, 4096, 14336)}
E, k, H, I = SHAPES[sys.argv[1]]
T = int(sys.argv[2])
lay = sys.argv[3] if len(sys.argv) > 3 else "packed"
reps = int(sys.argv[4]) if len(sys.argv) > 4 else 3
g = torch.Generator().manual_seed(1)
w13 = (torch.randn((E, 2 * I, H), device="cuda") * H ** -0.5).to(torch.bfloat16)
w2 = (torch.randn((E, H, I), device="cuda") * I ** -0.5).to(torch.bfloat16)
W = (ldmoe.pack_moe(w13, w2), None) if lay == "packed" else (w13, w2)
x = torch.randn((T, H), device="cuda").to(torch.bfloat16)
ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).int().cuda()
wts = torch.full((T, k), 1.0 / k, device="cuda")
for _ in range(reps):
    out = ldmoe.moe(x, W[0], W[1], ids, wts)
torch.cuda.synchronize()
print("ok", out.float().abs().mean().item())
