# one_case.py SHAPE T [--fp8] — four ldmoe.moe calls of one case (layer_time.py's shapes, weights packed D = 1,
# seeded router; --fp8: e4m3 weights with 128 x 128 block scales), L2 flushed before each, "CALL i" printed
# before call i: what ncu-prefill.txt and decode-producer.txt profile and stage_trace.py traces. Run from the
# repository root on the GPU machine.
import sys, torch
sys.path.insert(0, "kernels/moe"); sys.path.insert(0, "bench/moe")
import ldmoe
from layer_time import SHAPES, routing, quant_blocks
E, k, H, I = SHAPES[sys.argv[1]]; T = int(sys.argv[2])
gen = torch.Generator().manual_seed(7)
w13 = (torch.randn((E, 2 * I, H), device="cuda") * H ** -0.5).to(torch.bfloat16)
w2 = (torch.randn((E, H, I), device="cuda") * I ** -0.5).to(torch.bfloat16)
kw = {}
if "--fp8" in sys.argv:
    q13, s13 = quant_blocks(w13)
    q2, s2 = quant_blocks(w2)
    W = ldmoe.pack_moe(q13, q2, D=1)
    kw = {"w13_scale": s13, "w2_scale": s2}
else:
    W = ldmoe.pack_moe(w13, w2, D=1)
big = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
x = torch.randn((T, H), device="cuda").to(torch.bfloat16)
ids, wts = routing(gen, T, E, k)
out = torch.empty((T, H), device="cuda", dtype=torch.bfloat16)
for i in range(4):
    big.zero_()   # evict the weights from L2 between calls
    torch.cuda.synchronize()
    print("CALL %d" % i, flush=True)
    ldmoe.moe(x, W, None, ids, wts, out=out, **kw)
    torch.cuda.synchronize()
