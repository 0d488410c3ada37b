# prof8.py SHAPE T — four FP8 ldmoe.moe calls of one case (e4m3 weights, 128 x 128 block scales, packed D = 1,
# layer_time.py's router) for ncu; run from the repository root.
import sys, torch
sys.path.insert(0, "kernels/moe"); sys.path.insert(0, "bench/moe")
import ldmoe
from layer_time import SHAPES, routing
E, k, H, I = SHAPES[sys.argv[1]]; T = int(sys.argv[2])
gen = torch.Generator().manual_seed(7)
q13 = (torch.randn((E, 2 * I, H), device="cuda") * 64).to(torch.float8_e4m3fn)
q2 = (torch.randn((E, H, I), device="cuda") * 64).to(torch.float8_e4m3fn)
s13 = torch.full((E, 2 * I // 128, H // 128), H ** -0.5 / 64, device="cuda")
s2 = torch.full((E, H // 128, I // 128), I ** -0.5 / 64, device="cuda")
W = ldmoe.pack_moe(q13, q2, D=1)
x = torch.randn((T, H), device="cuda").to(torch.bfloat16)
ids, wts = routing(gen, T, E, k)
out = torch.empty((T, H), device="cuda", dtype=torch.bfloat16)
for _ in range(4):
    ldmoe.moe(x, W, None, ids, wts, out=out, w13_scale=s13, w2_scale=s2)
torch.cuda.synchronize()
print("ok", sys.argv[1], T, out.float().abs().mean().item())
