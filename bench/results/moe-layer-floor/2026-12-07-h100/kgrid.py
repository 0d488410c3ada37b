# kgrid.py SHAPE T — one ldmoe.moe launch under torch.profiler: the layer kernel's name, grid, block, cluster and time.
import json, os, sys, tempfile, torch
sys.path.insert(0, "kernels/moe"); sys.path.insert(0, "bench/moe")
import ldmoe
from layer_time import SHAPES, routing
from torch.profiler import profile, ProfilerActivity
E, k, H, I = SHAPES[sys.argv[1]]; T = int(sys.argv[2])
gen = torch.Generator().manual_seed(7)
w13 = (torch.randn((E, 2 * I, H), device="cuda") * H ** -0.5).to(torch.bfloat16)
w2 = (torch.randn((E, H, I), device="cuda") * I ** -0.5).to(torch.bfloat16)
W = ldmoe.pack_moe(w13, w2, D=1)
x = torch.randn((T, H), device="cuda").to(torch.bfloat16)
ids, wts = routing(gen, T, E, k)
out = torch.empty((T, H), device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    ldmoe.moe(x, W, None, ids, wts, out=out)
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(3):
        ldmoe.moe(x, W, None, ids, wts, out=out)
    torch.cuda.synchronize()
f = tempfile.mktemp(suffix=".json"); prof.export_chrome_trace(f)
for ev in json.load(open(f))["traceEvents"]:
    if "moe_layer_kernel" in ev.get("name", "") and ev.get("cat") == "kernel":
        a = ev.get("args", {})
        print(sys.argv[1], T, ev["name"][:60], "grid", a.get("grid"), "block", a.get("block"), "cluster", a.get("cluster"),
              "smem", a.get("shared memory"), "us %.1f" % ev["dur"])
