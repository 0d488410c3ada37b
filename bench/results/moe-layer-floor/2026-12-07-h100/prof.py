# prof.py SHAPE T — four ldmoe.moe calls of one case (packed D = 1, layer_time.py's router) for ncu; run from the repository root.
import os, sys, torch
sys.path.insert(0, "kernels/moe"); sys.path.insert(0, "bench/moe")
import ldmoe
from layer_time import SHAPES, routing
E, k, H, I = SHAPES[sys.argv[1]]; T = int(sys.argv[2])
gen = torch.Generator().manual_seed(7)
w13 = (torch.randn((E, 2 * I, H), device="cuda") * H ** -0.5).to(torch.bfloat16)
w2 = (torch.randn((E, H, I), device="cuda") * I ** -0.5).to(torch.bfloat16)
W = ldmoe.pack_moe(w13, w2, D=1)
x = torch.randn((T, H), device="cuda").to(torch.bfloat16)
ids, wts = routing(gen, T, E, k)
out = torch.empty((T, H), device="cuda", dtype=torch.bfloat16)
for _ in range(4):
    ldmoe.moe(x, W, None, ids, wts, out=out)
torch.cuda.synchronize()
print("ok", sys.argv[1], T)
