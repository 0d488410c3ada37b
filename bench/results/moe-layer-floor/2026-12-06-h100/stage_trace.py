"""stage_trace.py SHAPE T [--fp8] [--raw=FILE] — run one case of layer_time.py's shapes (weights packed D = 1, seeded
router, L2 flushed before each of 4 calls) under a library built with stage-trace.patch, and summarize the
per-step timeline its decode tile prints for CTAs 0-7 of the last call (per ring step: when the producer saw
the slot free, issued the weights and the token rows, and finished its entry maker; when consumer warp 0 saw
the weights and the rows land and released the slot). Prints medians by GEMM and first / later stage of a
tile (the legend says which interval is which) and the first 40 steps of two CTAs.
Run from the repository root on the GPU machine:
  LDMOE_LIB=<traced lib> python3 bench/results/moe-layer-floor/2026-12-06-h100/stage_trace.py qwen3 1
(the four calls are one_case.py's; --raw: the ST/SW lines to FILE)
"""
import os, statistics, subprocess, sys

name, T = sys.argv[1], sys.argv[2]
fp8 = "--fp8" in sys.argv
one = os.path.join(os.path.dirname(os.path.abspath(__file__)), "one_case.py")   # the four calls
r = subprocess.run([sys.executable, one, name, T] + (["--fp8"] if fp8 else []), capture_output=True, text=True)
if r.returncode:
    sys.exit("child failed: %s" % r.stderr[-2000:])
last = r.stdout.split("CALL 3")[-1]
rows = [l.split() for l in last.splitlines() if l.startswith("ST ")]
if len(sys.argv) > 3 and sys.argv[-1].startswith("--raw="):
    open(sys.argv[-1][6:], "w").write("\n".join(l for l in last.splitlines() if l.startswith(("ST ", "SW "))) + "\n")
by = {}
for _, cta, sm, step, tag, iss, free, la, land, rel in rows:
    by.setdefault(int(cta), []).append((int(step), int(tag), int(iss), int(free), int(la), int(land), int(rel)))
STAGES = 4   # the decode tile's ring (Cfg::STAGES)
keys = ["trip_a", "trip_b", "work", "lag", "issue"]
st = {(ph, kd, k): [] for ph in (1, 2) for kd in ("first", "later") for k in keys}
for cta, v in by.items():
    d = {x[0]: x for x in v}
    for step, tag, iss, free, la, land, rel in v:
        ph, kd = tag // 100000, "first" if (tag // 1000) % 100 == 0 else "later"
        if la > 0: st[ph, kd, "trip_a"].append((la - iss) / 1e3)
        if land > 0: st[ph, kd, "trip_b"].append((land - la) / 1e3)
        if land > 0 and rel > 0: st[ph, kd, "work"].append((rel - land) / 1e3)
        st[ph, kd, "issue"].append((iss - free) / 1e3)
        prev = d.get(step - STAGES)
        if prev and prev[6] > 0: st[ph, kd, "lag"].append((free - prev[6]) / 1e3)
med = lambda v: "%6.2f [%5.2f %6.2f] n%d" % (statistics.median(v), sorted(v)[len(v) // 10], sorted(v)[9 * len(v) // 10], len(v)) if v else "-"
print("%s T=%s %s: %d CTAs, %d steps. us, median [p10 p90]" % (name, T, "fp8" if fp8 else "bf16", len(by), len(rows)))
print("  trip_a: weights landed - issued; trip_b: tokens landed after weights; work: consumer w0 release - land;")
print("  lag: producer saw the slot free - w0 released it STAGES steps before; issue: producer issued - saw free")
for ph in (1, 2):
    for kd in ("first", "later"):
        print("  GEMM%d %-5s " % (ph, kd) + "  ".join("%s %s" % (k, med(st[ph, kd, k])) for k in keys))
for cta in sorted(by)[:2]:
    print("  CTA %d (step tag issue free landA land release, us from CTA start):" % cta)
    for step, tag, iss, free, la, land, rel in sorted(by[cta])[:40]:
        print("    %3d %6d %8.2f %8.2f %8.2f %8.2f %8.2f" % (step, tag, iss / 1e3, free / 1e3, la / 1e3, land / 1e3, rel / 1e3))
