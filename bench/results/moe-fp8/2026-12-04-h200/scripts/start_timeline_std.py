#!/usr/bin/env python3
"""Session 19: a decode launch's start with the lab build's own timeline (8 slots: entry, setup
done, first tile claimed, first stage landed, loads done, exit), for comparing two libraries
(LDMOE_LAB_LIB). Per-CTA durations, medians over CTAs, then medians over calls. Two situations: 'idle' (the GPU idle before the call) and
'after-copy' (a 64 MiB device copy queued just before, so the launch overlaps its end as a
programmatic dependent). FP8 rowwise, AUTO tile, packed, aware."""
import json, os, statistics, sys
import torch
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..", "..", "..", "..", "..")
sys.path[:0] = [os.path.join(root, "kernels", "moe"), os.path.join(root, "bench", "moe", "lab")]
import ldmoe_lab as ldmoe

CASES = [(8, 4096, 14336, 8), (8, 4096, 14336, 64), (32, 7168, 4096, 64), (128, 2048, 1536, 8), (128, 2048, 1536, 64)]
REPS, WARM, SETS = 25, 5, 2
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
    a = torch.empty(64 << 20, device="cuda", dtype=torch.uint8); b = torch.empty_like(a)
    for sit in ("idle", "after-copy"):
        trs = [torch.zeros(8 * sms, device="cuda", dtype=torch.int64) for _ in range(WARM + REPS)]
        torch.cuda.synchronize()
        rows = []
        for i in range(WARM + REPS):
            torch.cuda.synchronize()
            if sit == "after-copy":
                b.copy_(a)
            ldmoe.grouped_mm_fp8(x8, wl[i % SETS], offs, xs, wsl[i % SETS], out=y, trace=trs[i])
            torch.cuda.synchronize()
            if i >= WARM:
                rows.append(trs[i].view(sms, 8).cpu().tolist())
        st = []
        for t in rows:
            t0 = min(r[0] for r in t)
            us = lambda v: (v - t0) / 1e3
            st.append([md(us(r[1]) - us(r[0]) for r in t),   # entry -> setup done (producer)
                       md(us(r[2]) - us(r[1]) for r in t),   # -> first tile claimed and decoded
                       md(us(r[3]) - us(r[2]) for r in t),   # -> first stage landed
                       md(us(r[3]) for r in t),              # first stage, from the first entry
                       max(us(r[0]) for r in t),             # entry spread
                       min(us(r[5]) for r in t), md(us(r[5]) for r in t), max(us(r[5]) for r in t)])
        c = [md(col) for col in zip(*st)]
        line = ("E=%d m=%d %-10s | setup %.2f | claim %.2f | first data %.2f | first stage at %.2f | entry spread %.2f | "
                "exit min/med/max %.1f/%.1f/%.1f" % ((E, m, sit) + tuple(c)))
        print(line, flush=True)
        out.append(dict(E=E, m=m, situation=sit, medians=c, calls=rows))
    del wl, wsl, x8, y, a, b
    torch.cuda.empty_cache()
json.dump(dict(slots=["entry", "setup", "claimed", "first_data", "loads_done", "exit", "tiles", "smid"],
               cases=out), open(sys.argv[1] if len(sys.argv) > 1 else "/tmp/start_timeline.json", "w"))
