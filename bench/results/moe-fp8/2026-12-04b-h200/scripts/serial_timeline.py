#!/usr/bin/env python3
"""Session 20: thread 0's serial path from the setup's end to the first TMA, stamped
(scripts/serial-stamps.patch: 16 trace slots per CTA; the first tile's decode run twice, the
second time warm). Per-CTA differences, medians over CTAs, then over calls. FP8 rowwise, AUTO
tile, packed, aware, idle GPU before each call. Usage: serial_timeline.py OUT.json"""
import json, os, statistics, sys
import torch
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..", "..", "..", "..", "..")
sys.path[:0] = [os.path.join(root, "kernels", "moe"), os.path.join(root, "bench", "moe", "lab")]
import ldmoe_lab as ldmoe

CASES = [(8, 4096, 14336, 8), (8, 4096, 14336, 64), (128, 2048, 1536, 8)]
REPS, WARM, SETS = 25, 3, 2
# (label, from slot, to slot); slots: 0 entry, 1 producer after the setup, 8 Loader::start before
# the claimer's init, 9 after it, 10 after the policies, 11 after the first claim, 12 after the
# first decode, 13 after the same decode again (warm), 2 start returned, 7 first fill issued,
# 3 first stage landed (consumer), 14/15 around the second tile's claim and decode, 5 exit.
SPANS = [("setup->start", 1, 8), ("init", 8, 9), ("policies", 9, 10), ("first claim", 10, 11),
         ("decode cold", 11, 12), ("decode warm", 12, 13), ("return", 13, 2), ("first fill", 2, 7),
         ("first data", 7, 3), ("2nd claim+decode", 14, 15)]
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
    tr = torch.zeros(16 * sms, device="cuda", dtype=torch.int64)
    st = []
    for i in range(WARM + REPS):
        torch.cuda.synchronize()
        tr.zero_()
        ldmoe.grouped_mm_fp8(x8, wl[i % SETS], offs, xs, wsl[i % SETS], out=y, trace=tr)
        torch.cuda.synchronize()
        if i < WARM:
            continue
        r = tr.view(sms, 16).cpu().tolist()
        t0 = min(c[0] for c in r)
        row = [md((c[b] - c[a]) / 1e3 for c in r if c[a] and c[b]) for _, a, b in SPANS]
        row.append(md((c[3] - t0) / 1e3 for c in r))
        st.append(row)
    c = [md(col) for col in zip(*st)]
    line = "E=%d m=%d | " % (E, m) + " | ".join("%s %.2f" % (n, v) for (n, _, _), v in zip(SPANS, c)) + \
        " | first stage at %.2f" % c[-1]
    print(line, flush=True)
    out.append(dict(E=E, m=m, spans=[s[0] for s in SPANS] + ["first stage at"], medians=c))
    del wl, wsl, x8, y
    torch.cuda.empty_cache()
json.dump(dict(cases=out), open(sys.argv[1], "w"))
