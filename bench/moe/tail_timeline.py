#!/usr/bin/env python3
"""tail_timeline.py — where an FP8 decode launch ends, per claim order (lab tune bits), from the lab build's
per-CTA timeline (8 slots: entry, setup done, first tile claimed, first stage landed, loads done,
exit, tiles, SM). Per call: the last exit, the median exit and the spread (last - median) from
the first entry; medians over calls, variants interleaved call by call. FP8 rowwise, AUTO tile,
packed, aware, idle GPU before each call. Usage: tail_timeline.py OUT.json TUNE[,TUNE...]"""
import json, os, statistics, sys
import torch
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..", "..")
sys.path[:0] = [os.path.join(root, "kernels", "moe"), os.path.join(root, "bench", "moe", "lab")]
import ldmoe_lab as ldmoe

CASES = [(8, 4096, 14336, 8), (8, 4096, 14336, 64), (32, 7168, 4096, 64), (128, 2048, 1536, 8), (128, 2048, 1536, 64)]
REPS, WARM, SETS = 25, 3, 2
tunes = [int(t, 0) for t in sys.argv[2].split(",")]
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
    rows = {t: [] for t in tunes}
    for i in range(WARM + REPS):
        for t in tunes:
            torch.cuda.synchronize()
            ldmoe.grouped_mm_fp8(x8, wl[i % SETS], offs, xs, wsl[i % SETS], out=y, trace=tr, tune=t)
            torch.cuda.synchronize()
            if i >= WARM:
                rows[t].append(tr.view(sms, 8).cpu().tolist())
    for t in tunes:
        st = []
        for r in rows[t]:
            t0 = min(c[0] for c in r)
            ex = sorted((c[5] - t0) / 1e3 for c in r)
            st.append([ex[-1], md(ex), ex[-1] - md(ex), ex[-1] - ex[len(ex) * 9 // 10], md((c[3] - t0) / 1e3 for c in r)])
        c = [md(col) for col in zip(*st)]
        line = "E=%d m=%d tune %#x | last exit %.1f | median exit %.1f | last - median %.1f | last - p90 %.1f | first stage %.2f" % (
            (E, m, t) + tuple(c))
        print(line, flush=True)
        out.append(dict(E=E, m=m, tune=t, medians=c))
    del wl, wsl, x8, y
    torch.cuda.empty_cache()
json.dump(dict(cases=out), open(sys.argv[1], "w"))
