#!/usr/bin/env python3
"""Session 20: does a peer's time drift as a run goes on? torch._scaled_grouped_mm and
ldmoe.grouped_mm_fp8 (rowwise, AUTO, packed) alternating call by call for 1000 repetitions at 64
tokens per expert (8 and 32 experts), medians per block of 100 repetitions, with the SM clock and
power sampled by nvidia-smi beside it (scripts/s20d.sh). Usage: drift.py OUT.json"""
import json, os, statistics, sys, time
import torch
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..", "..", "..", "..", "..")
sys.path[:0] = [os.path.join(root, "kernels", "moe")]
import ldmoe

SETS, REPS, BLOCK = 3, 1000, 100
out = []
for E, K, N, m in ((8, 4096, 14336, 64), (32, 7168, 4096, 64)):
    w8 = [(torch.randn((E, N, K), device="cuda") * 64).clamp(-448, 448).to(torch.float8_e4m3fn) for _ in range(SETS)]
    ws = [torch.rand((E, N), device="cuda") + 0.5 for _ in range(SETS)]
    wl = [ldmoe.pack(w, 2) for w in w8]
    wsl = [ldmoe.localize_scales(s, 2) for s in ws]
    x8 = (torch.randn((E * m, K), device="cuda") * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
    xs = torch.rand(E * m, device="cuda") + 0.5
    offs = torch.arange(1, E + 1, device="cuda", dtype=torch.int32) * m
    y = torch.empty((E * m, N), device="cuda", dtype=torch.bfloat16)
    fns = {"torch": lambda i: torch._scaled_grouped_mm(x8, w8[i].transpose(-2, -1), xs, ws[i], offs=offs,
                                                       out_dtype=torch.bfloat16),
           "row": lambda i: ldmoe.grouped_mm_fp8(x8, wl[i], offs, xs, wsl[i], out=y)}
    for i in range(5):
        for f in fns.values():
            f(i % SETS)
    torch.cuda.synchronize()
    t_start = time.time()
    evs = [{k: (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for k in fns}
           for _ in range(REPS)]
    pos = 0
    for r in range(REPS):
        for k in (("torch", "row") if r % 2 == 0 else ("row", "torch")):
            a, b = evs[r][k]
            a.record()
            fns[k](pos % SETS)
            b.record()
            pos += 1
    torch.cuda.synchronize()
    t_end = time.time()
    ts = {k: [evs[r][k][0].elapsed_time(evs[r][k][1]) * 1e3 for r in range(REPS)] for k in fns}
    blocks = [{k: statistics.median(ts[k][j:j + BLOCK]) for k in fns} for j in range(0, REPS, BLOCK)]
    print("E=%d m=%d (%.2f s, unix %.2f-%.2f): " % (E, m, t_end - t_start, t_start, t_end) + " | ".join(
        "torch %.1f row %.1f (%.3f)" % (b["torch"], b["row"], b["torch"] / b["row"]) for b in blocks), flush=True)
    out.append(dict(E=E, m=m, t_start=t_start, t_end=t_end, times=ts))
    del w8, ws, wl, wsl, x8, y
    torch.cuda.empty_cache()
    time.sleep(2)
json.dump(out, open(sys.argv[1], "w"))
