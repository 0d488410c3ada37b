#!/usr/bin/env python3
"""Session 19 (second form, 16 slots per CTA: start-timeline16.patch adds stamps inside the setup
and the first claim; thread 0's view): where a decode launch's start goes, with the experiment build's extra stamps
(start-timeline.patch: slot 4 = after griddepcontrol.wait, 7 = pass 1's barrier of the setup,
6 = the entry claim's value in hand, read right after the setup). Per-CTA durations, medians
over CTAs, then medians over calls. Two situations: 'idle' (the GPU idle before the call) and
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
        trs = [torch.zeros(16 * sms, device="cuda", dtype=torch.int64) for _ in range(WARM + REPS)]
        torch.cuda.synchronize()
        rows = []
        for i in range(WARM + REPS):
            torch.cuda.synchronize()
            if sit == "after-copy":
                b.copy_(a)
            ldmoe.grouped_mm_fp8(x8, wl[i % SETS], offs, xs, wsl[i % SETS], out=y, trace=trs[i])
            torch.cuda.synchronize()
            if i >= WARM:
                rows.append(trs[i].view(sms, 16).cpu().tolist())
        st = []
        seq = [0, 4, 7, 8, 9, 10, 11, 12, 1, 13, 14, 2, 3]   # in program order (thread 0; 3 = tid 128)
        for t in rows:
            t0 = min(r[0] for r in t)
            st.append([md((r[b] - r[a]) / 1e3 for r in t) for a, b in zip(seq, seq[1:])] +
                      [md((r[3] - t0) / 1e3 for r in t), max((r[5] - t0) / 1e3 for r in t)])
        c = [md(col) for col in zip(*st)]
        names = ["griddep", "pass1+bar1", "pass2", "scan+bar2", "ranks", "bar3", "tables+bar4", "->producer",
                 "start", "first()", "set_tile", "first data", "first stage at", "last exit"]
        line = "E=%d m=%d %-10s | " % (E, m, sit) + " | ".join("%s %.2f" % nv for nv in zip(names, c))
        print(line, flush=True)
        out.append(dict(E=E, m=m, situation=sit, medians=c, calls=rows))
    del wl, wsl, x8, y, a, b
    torch.cuda.empty_cache()
json.dump(dict(slots=["entry", "setup", "claimed", "first_data", "griddep", "exit", "claim_value", "barrier1", "pass2", "barrier2", "ranks", "barrier3", "barrier4", "start", "first", "-"],
               cases=out), open(sys.argv[1] if len(sys.argv) > 1 else "/tmp/start_timeline.json", "w"))
