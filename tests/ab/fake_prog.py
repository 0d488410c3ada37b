#!/usr/bin/env python3
"""fake_prog.py — a stand-in program for the ldshim-ab tests, driven by environment.

It learns its state from LDSHIM_STATE and its run name (e.g. "007-full-r2") from the
basename of LDSHIM_REPORT ("<name>.%p.json"), then behaves as FAKE_* variables say:

  FAKE_VALUES   "stock=10,11;full=8"  figure printed by measured run i (cycled by index)
  FAKE_WARMUP   figure printed by warm-up runs (default 1000: visible if not discarded)
  FAKE_SLEEP    "stock=0.02;full=0.3" seconds to sleep per state (wall-time metric tests)
  FAKE_FAIL     "full:r2:exit,memory:r1:timeout,stock:r3:nometric,mismatch:*:exit"
                (modes: exit = status 3, timeout = sleep 60 s, nometric, segv = SIGSEGV)
  FAKE_LOG      file to which one line per run is appended: "<state> <w|r><idx> <LD_PRELOAD>"
  FAKE_REPORT_STATE  "full=stock": state written into the fake report (default: the real one)
  FAKE_TAGGED   "full=6": counts.tagged_allocs in the report per state (default 0)
  FAKE_POLICY_ERROR  policy_error written into the report
  FAKE_HIST     "939524096x6,2097152x40": the report's untagged histogram (size x count)
  FAKE_SPAWN_CHILD  if set, first run a child copy that only writes its own report (as a
                wrapper process that also loaded the shim would), with the same FAKE_* values

It prints "decode: <figure> ms/step  <1000/figure> tok/s" on stdout, a little noise on
stderr, and writes a small JSON report where LDSHIM_REPORT points (%p = pid), as the shim would.
"""
import json
import os
import subprocess
import sys
import time


def table(var):
    out = {}
    for part in filter(None, os.environ.get(var, "").split(";")):
        k, _, v = part.partition("=")
        out[k.strip()] = v.strip()
    return out


def write_report(report, state):
    if not report:
        return
    rep = {"state": table("FAKE_REPORT_STATE").get(state, state), "backend": "fake",
           "policy_error": os.environ.get("FAKE_POLICY_ERROR") or None,
           "counts": {"tagged_allocs": int(table("FAKE_TAGGED").get(state, "0")),
                      "untagged_allocs": 0, "fallbacks": 0},
           "untagged": {"allocations": 0, "histogram": []}}
    for ent in filter(None, os.environ.get("FAKE_HIST", "").split(",")):
        size, count = ent.split("x")
        rep["untagged"]["histogram"].append({"size": int(size), "api": "runtime",
                                             "count": int(count)})
        rep["counts"]["untagged_allocs"] += int(count)
    with open(report, "w") as f:
        json.dump(rep, f)


def main():
    state = os.environ.get("LDSHIM_STATE", "none")
    report = os.environ.get("LDSHIM_REPORT", "").replace("%p", str(os.getpid()))
    name = os.path.basename(report).split(".")[0] if report.endswith(".json") else "0-none-r1"
    kind_idx = name.rsplit("-", 1)[-1]          # "r2", "w1"; "discover" for --discover
    kind, idx = kind_idx[0], int(kind_idx[1:]) if kind_idx[1:].isdigit() else 1
    if os.environ.get("FAKE_IS_CHILD"):
        write_report(report, state)
        return 0
    if os.environ.get("FAKE_SPAWN_CHILD"):
        subprocess.check_call([sys.executable, __file__], env=dict(os.environ, FAKE_IS_CHILD="1"))
    if os.environ.get("FAKE_LOG"):
        with open(os.environ["FAKE_LOG"], "a") as f:
            f.write("%s %s %s\n" % (state, kind_idx, os.environ.get("LD_PRELOAD", "")))
    print("fake: starting %s" % name, file=sys.stderr)

    sleep = table("FAKE_SLEEP").get(state)
    if sleep:
        time.sleep(float(sleep))

    mode = None
    for spec in filter(None, os.environ.get("FAKE_FAIL", "").split(",")):
        st, run, how = spec.split(":")
        if st == state and (run == "*" or run == kind_idx):
            mode = how
    if mode == "exit":
        print("fake: injected failure in %s" % name, file=sys.stderr)
        print("fake: last words of %s" % name, file=sys.stderr)
        return 3
    if mode == "segv":
        import signal
        os.kill(os.getpid(), signal.SIGSEGV)
    if mode == "timeout":
        time.sleep(60)
        return 0

    write_report(report, state)
    if mode == "nometric":
        print("fake: nothing to report")
        return 0
    if kind == "w":
        fig = float(os.environ.get("FAKE_WARMUP", "1000"))
    else:
        vals = [float(x) for x in table("FAKE_VALUES").get(state, "10").split(",")]
        fig = vals[(idx - 1) % len(vals)]
    print("prefill: 45.6 ms")
    print("decode: %.4f ms/step  %.1f tok/s" % (fig, 1000.0 / fig))
    return 0


if __name__ == "__main__":
    sys.exit(main())
