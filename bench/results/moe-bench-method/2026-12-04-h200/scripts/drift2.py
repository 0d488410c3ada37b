#!/usr/bin/env python3
"""Session 20: call d saw torch's FP8 GEMM step from 344 to 368 µs (E=32 m=64) after the first
~100 alternating repetitions while ldmoe stayed flat. Here: 3 s of torch / ldmoe alternation per
shape, medians per 100 ms of wall time, then 1 s idle and 0.2 s more; the SM clock, power and
clock-event reasons sampled every 5 ms by NVML in a thread of this process. Usage: drift2.py OUT.json"""
import json, os, statistics, sys, threading, time
import torch
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..", "..", "..", "..", "..")
sys.path[:0] = [os.path.join(root, "kernels", "moe")]
import ldmoe
try:
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
except Exception as e:   # noqa: BLE001 - the timings are still worth having
    print("no NVML sampling: %s" % e, flush=True)
    h = None

samples = []
stop = threading.Event()


def sampler():
    while not stop.is_set():
        t = time.time()
        try:
            samples.append((t, pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                            pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                            reasons(h)))
        except Exception:   # noqa: BLE001
            pass
        time.sleep(0.005)


if h is not None:
    threading.Thread(target=sampler, daemon=True).start()
SETS = 3
out = []


def run(fns, seconds):
    """Alternate the peers for `seconds` of wall time; per-call (wall time of enqueue, µs) lists."""
    evs, t0, pos = [], time.time(), 0
    while time.time() - t0 < seconds:
        row = {}
        for k in fns:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); fns[k](pos % SETS); b.record(); pos += 1
            row[k] = (a, b)
        evs.append((time.time(), row))
        if len(evs) % 64 == 0:
            torch.cuda.synchronize()   # keep the host within a few ms of the GPU
    torch.cuda.synchronize()
    return [(t, {k: a.elapsed_time(b) * 1e3 for k, (a, b) in r.items()}) for t, r in evs]


for E, K, N, m in ((32, 7168, 4096, 64), (8, 4096, 14336, 64)):
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
    time.sleep(1.0)
    t_a = time.time()
    long = run(fns, 3.0)
    time.sleep(1.0)
    t_b = time.time()
    again = run(fns, 0.2)
    for name, res, tb in (("3 s", long, t_a), ("after 1 s idle", again, t_b)):
        bins = {}
        for t, r in res:
            bins.setdefault(int((t - tb) / 0.1), []).append(r)
        line = []
        for b in sorted(bins):
            rs = bins[b]
            med = {k: statistics.median(r[k] for r in rs) for k in fns}
            sm = [s for s in samples if tb + 0.1 * b <= s[0] < tb + 0.1 * (b + 1)]
            clk = statistics.median(s[1] for s in sm) if sm else 0
            pw = max(s[2] for s in sm) if sm else 0
            rsn = "|".join(sorted({"%#x" % s[3] for s in sm})) if sm else "-"
            line.append("%.1fs torch %.1f row %.1f clk %d pmax %.0f %s" % (0.1 * b, med["torch"], med["row"], clk, pw, rsn))
        print("E=%d m=%d %s:\n  " % (E, m, name) + "\n  ".join(line), flush=True)
    out.append(dict(E=E, m=m, long=long, again=again, t_long=t_a, t_again=t_b))
    del w8, ws, wl, wsl, x8, y
    torch.cuda.empty_cache()
stop.set()
json.dump(dict(runs=out, samples=samples), open(sys.argv[1], "w"))
