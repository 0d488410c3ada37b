#!/usr/bin/env python3
"""fake_prog.py — a stand-in program for the ldshim-ab tests, driven by environment.

It learns its state from LDSHIM_STATE and its run name (e.g. "007-full-r2") from the
basename of LDSHIM_REPORT ("<name>.%p.json"), then behaves as FAKE_* variables say. The
per-state tables are looked up by the state in the run's name first (so "aa=..." addresses
the A/A copy of the baseline, which runs with the baseline's LDSHIM_STATE), then by
LDSHIM_STATE:

  FAKE_VALUES   "stock=10,11;full=8"  figure printed by measured run i (cycled by index)
  FAKE_NOISE    "stock=0.01"  relative standard deviation of Gaussian noise on the figure,
                drawn from a generator seeded by FAKE_SEED (default 1) and the run's name
  FAKE_WARMUP   figure printed by warm-up runs (default 1000: visible if not discarded)
  FAKE_SLEEP    "stock=0.02;full=0.3" seconds to sleep per state (wall-time metric tests)
  FAKE_FAIL     "full:r2:exit,memory:r1:timeout,stock:r3:nometric,mismatch:*:exit"
                (modes: exit = status 3, timeout = sleep 60 s, nometric, segv = SIGSEGV)
  FAKE_LOG      file to which one line per run is appended: "<state> <w|r><idx> <LD_PRELOAD>"
  FAKE_REPORT_STATE  "full=stock": state written into the fake report (default: the real one)
  FAKE_TAGGED   "full=6": counts.tagged_allocs in the report per state (default 0); a comma
                list is cycled by run index like FAKE_VALUES ("full=6,0")
  FAKE_COMPUTE  "full=domain:0:66;stock=all:132": devices[0].compute in the report per state
                (applied binding and SM count), as the shim's compute binding reports it
  FAKE_BYTES    "full-ld=1048576:0": a rule's bytes_per_domain in the report per state
  FAKE_FALLBACKS "full-ld=6": counts.fallbacks in the report per state (default 0)
  FAKE_BACKEND  "full-ld=emulated": the report's backend per state (default "fake")
  FAKE_NO_REPORT  if set, write no report (a program the shim never saw)
  FAKE_POLICY_ERROR  policy_error written into the report
  FAKE_HIST     "939524096x6,2097152x40": the report's untagged histogram (size x count)
  FAKE_SPAWN_CHILD  if set, first run a child copy that only writes its own report (as a
                wrapper process that also loaded the shim would), with the same FAKE_* values

It prints "decode: <figure> ms/step  <1000/figure> tok/s" on stdout, a little noise on
stderr, and writes a small JSON report where LDSHIM_REPORT points (%p = pid), as the shim would.
"""
import json
import os
import random
import subprocess
import sys
import time

KEYS = []          # lookup order of the per-state tables: the run name's state, LDSHIM_STATE


def table(var):
    out = {}
    for part in filter(None, os.environ.get(var, "").split(";")):
        k, _, v = part.partition("=")
        out[k.strip()] = v.strip()
    return out


def lookup(var, default=None):
    t = table(var)
    for k in KEYS:
        if k in t:
            return t[k]
    return default


def cycled(text, idx):
    vals = text.split(",")
    return vals[(idx - 1) % len(vals)]


def write_report(report, state, idx):
    if not report or os.environ.get("FAKE_NO_REPORT"):
        return
    rep = {"state": table("FAKE_REPORT_STATE").get(state, state),
           "backend": lookup("FAKE_BACKEND", "fake"),
           "domain": int(os.environ.get("LDSHIM_DOMAIN", "0")),
           "policy_error": os.environ.get("FAKE_POLICY_ERROR") or None,
           "counts": {"tagged_allocs": int(cycled(lookup("FAKE_TAGGED", "0"), idx)),
                      "untagged_allocs": 0, "fallbacks": int(lookup("FAKE_FALLBACKS", "0"))},
           "devices": [],
           "untagged": {"allocations": 0, "histogram": []}}
    per = lookup("FAKE_BYTES")
    if per:
        rep["rules"] = [{"name": "r", "bytes_per_domain": [int(x) for x in per.split(":")]}]
    comp = lookup("FAKE_COMPUTE")
    if comp:
        applied, _, n = comp.rpartition(":")
        rep["devices"].append({"device": 0, "compute": {
            "requested": applied, "applied": applied, "sm_count": int(n),
            "sms": list(range(int(n))), "method": "fake", "reason": None}})
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
    parts = name.split("-", 1)
    name_state = parts[1].rsplit("-", 1)[0] if len(parts) == 2 and "-" in parts[1] else None
    KEYS[:] = [k for k in (name_state, state) if k]
    if os.environ.get("FAKE_IS_CHILD"):
        write_report(report, state, idx)
        return 0
    if os.environ.get("FAKE_SPAWN_CHILD"):
        subprocess.check_call([sys.executable, "-S", __file__],
                              env=dict(os.environ, FAKE_IS_CHILD="1"))
    if os.environ.get("FAKE_LOG"):
        with open(os.environ["FAKE_LOG"], "a") as f:
            f.write("%s %s %s\n" % (state, kind_idx, os.environ.get("LD_PRELOAD", "")))
    print("fake: starting %s" % name, file=sys.stderr)

    sleep = lookup("FAKE_SLEEP")
    if sleep:
        time.sleep(float(sleep))

    mode = None
    for spec in filter(None, os.environ.get("FAKE_FAIL", "").split(",")):
        st, run, how = spec.split(":")
        if st in KEYS and (run == "*" or run == kind_idx):
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

    write_report(report, state, idx)
    if mode == "nometric":
        print("fake: nothing to report")
        return 0
    if kind == "w":
        fig = float(os.environ.get("FAKE_WARMUP", "1000"))
    else:
        fig = float(cycled(lookup("FAKE_VALUES", "10"), idx))
        noise = float(lookup("FAKE_NOISE", "0"))
        if noise:
            rng = random.Random("%s:%s" % (os.environ.get("FAKE_SEED", "1"), name))
            fig *= 1.0 + noise * rng.gauss(0.0, 1.0)
    print("prefill: 45.6 ms")
    print("decode: %.4f ms/step  %.1f tok/s" % (fig, 1000.0 / fig))
    return 0


if __name__ == "__main__":
    sys.exit(main())
