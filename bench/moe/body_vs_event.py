#!/usr/bin/env python3
"""body_vs_event.py — how much of an FP8 decode call's event-timed duration lies outside the kernel's
body (first CTA entry .. last CTA exit, from the lab build's per-CTA timeline)? Per case, each
call timed with CUDA events around it and traced, the GPU idle before each call (synchronized),
then the same calls back to back without synchronizing (events only), as bench_moe.py times
them. Usage: body_vs_event.py OUT.json"""
import json, os, statistics, sys
import torch
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..", "..")
sys.path[:0] = [os.path.join(root, "kernels", "moe"), os.path.join(root, "bench", "moe", "lab")]
import ldmoe_lab as ldmoe

CASES = [(8, 4096, 14336, 8), (8, 4096, 14336, 64), (128, 2048, 1536, 8), (128, 2048, 1536, 64)]
REPS, WARM, SETS = 30, 3, 2
sms = torch.cuda.get_device_properties(0).multi_processor_count
md = statistics.median
out = []
for E, K, N, m in CASES:
    w8 = [(torch.randn((E, N, K), device="cuda") * 64).clamp(-448, 448).to(torch.float8_e4m3fn) for _ in range(SETS)]
    wl = [ldmoe.pack(w, 2) for w in w8]
    wsl = [ldmoe.localize_scales(torch.rand((E, N), device="cuda") + 0.5, 2) for _ in range(SETS)]
    del w8
    x8 = (torch.randn((E * m, K), device="cuda") * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
    xs = torch.rand(E * m, device="cuda") + 0.5
    offs = torch.arange(1, E + 1, device="cuda", dtype=torch.int32) * m
    y = torch.empty((E * m, N), device="cuda", dtype=torch.bfloat16)
    tr = torch.zeros(8 * sms, device="cuda", dtype=torch.int64)
    ev, body, entry_spread, first_stage = [], [], [], []
    for i in range(WARM + REPS):
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        ldmoe.grouped_mm_fp8(x8, wl[i % SETS], offs, xs, wsl[i % SETS], out=y, trace=tr)
        e.record()
        torch.cuda.synchronize()
        if i >= WARM:
            r = tr.view(sms, 8).cpu().tolist()
            t0 = min(c[0] for c in r)
            ev.append(s.elapsed_time(e) * 1e3)
            body.append((max(c[5] for c in r) - t0) / 1e3)
            entry_spread.append((max(c[0] for c in r) - t0) / 1e3)
            first_stage.append(md((c[3] - t0) / 1e3 for c in r))
    # back to back, events only (no trace), as the benchmark times calls
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(REPS)]
    for i, (s, e) in enumerate(pairs):
        s.record()
        ldmoe.grouped_mm_fp8(x8, wl[i % SETS], offs, xs, wsl[i % SETS], out=y)
        e.record()
    torch.cuda.synchronize()
    b2b = md(s.elapsed_time(e) * 1e3 for s, e in pairs)
    row = dict(E=E, m=m, event_idle=md(ev), body=md(body), outside=md(a - b for a, b in zip(ev, body)),
               entry_spread=md(entry_spread), first_stage=md(first_stage), event_b2b=b2b)
    print("E=%d m=%d | event (idle GPU) %.1f | body %.1f | outside the body %.1f | entry spread %.2f | median first stage %.2f | back to back %.1f" % (
          E, m, row["event_idle"], row["body"], row["outside"], row["entry_spread"], row["first_stage"], b2b), flush=True)
    out.append(row)
    del wl, wsl, x8, y
    torch.cuda.empty_cache()
json.dump(dict(cases=out), open(sys.argv[1], "w"))
