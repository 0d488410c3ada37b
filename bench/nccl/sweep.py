#!/usr/bin/env python3
"""sweep.py — every (collective, size) of an ldshim-ab run over nccl_bench.py, per state.

    python3 bench/nccl/sweep.py --ab AB_DIR --logs LOG_DIR [--json FILE]

ldshim-ab compares the states on one figure (--metric). nccl_bench.py measures the whole
sweep in every run and, with --log-dir, leaves each run's result.json; this joins those results
to ldshim-ab's runs (by the LDSHIM_REPORT each run was given) and prints, for every case and
state, the median over the measured runs, the speedup against the baseline with the same exact
rank interval ldshim-ab uses (loaded from tools/ldshim-ab), the verdict (marked 'below floor'
under the A/A state's reach when --calibrate ran), NCCL's channel choice, then per state the
channels of each rank's communicator and each rank's compute binding from the shim's reports
(the report whose pid is the rank's). Standard library only. Exit: 0, 1 nothing to join,
2 bad usage.
"""

import argparse
import collections
import importlib.machinery
import importlib.util
import json
import os
import statistics
import sys

PROG = "sweep.py"
HERE = os.path.dirname(os.path.abspath(__file__))


def load_tool(path=None):
    """tools/ldshim-ab as a module (its interval and verdict functions)."""
    path = path or os.environ.get("LDSHIM_AB") or os.path.join(HERE, "..", "..", "tools",
                                                                 "ldshim-ab")
    loader = importlib.machinery.SourceFileLoader("ldshim_ab_for_sweep", path)
    spec = importlib.util.spec_from_loader("ldshim_ab_for_sweep", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def load_results(logs):
    """{LDSHIM_REPORT value: result.json} for every run directory under `logs`."""
    out = {}
    try:
        names = sorted(os.listdir(logs))
    except OSError:
        return out
    for name in names:
        res = read_json(os.path.join(logs, name, "result.json"))
        if isinstance(res, dict):
            key = (res.get("env") or {}).get("LDSHIM_REPORT")
            if key:
                out[key] = res
    return out


def mode(values):
    c = collections.Counter(values)
    return c.most_common(1)[0][0] if c else None


def fmt_size(n):
    for unit, b in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= b and n % b == 0:
            return "%d %s" % (n // b, unit)
    return "%d B" % n


def report_for(record, pid, ab):
    """The shim report of process `pid` among a run's reports (paths as ldshim-ab wrote
    them, else the same names under AB_DIR/reports: a moved results folder)."""
    for path in record.get("reports") or []:
        rep = read_json(path)
        if rep is None:
            rep = read_json(os.path.join(ab, "reports", os.path.basename(path)))
        if isinstance(rep, dict) and rep.get("pid") == pid:
            return rep
    return None


def binding_text(rep, rank):
    """'device 0 domain:0 56/132 SMs, domain X 0' from a rank's report; the device with the
    rank's index first (rank i runs on cuda:i), else the first device with a binding."""
    if rep is None:
        return "no report"
    devs = [d for d in rep.get("devices") or [] if isinstance(d, dict)
            and isinstance(d.get("compute"), dict)]
    if not devs:
        return "no compute entry (state %s)" % rep.get("state")
    dev = next((d for d in devs if d.get("device") == rank), devs[0])
    c = dev["compute"]
    txt = "device %s %s %s/%s SMs" % (dev.get("device"), c.get("applied"), c.get("sm_count"),
                                      c.get("device_sms"))
    if isinstance(rep.get("domain"), int):
        txt += ", domain X %d" % rep["domain"]
    if c.get("reason"):
        txt += " (%s)" % c["reason"]
    return txt


def analyse(tool, ab, logs, alpha):
    runs = read_json(os.path.join(ab, "runs.json"))
    if not isinstance(runs, list):
        raise SystemExit("%s: no runs.json in %s (is it an ldshim-ab --out folder?)" % (PROG, ab))
    results = load_results(logs)
    states, per_state, missing = [], collections.OrderedDict(), 0
    for rec in runs:
        st = rec.get("state")
        if st not in states:
            states.append(st)
        if rec.get("warmup") or not rec.get("ok"):
            continue
        res = results.get((rec.get("env") or {}).get("LDSHIM_REPORT"))
        if res is None or not res.get("ok"):
            missing += 1
            continue
        per_state.setdefault(st, []).append((rec, res))
    if not per_state:
        return None
    baseline = "stock" if "stock" in per_state else next(iter(per_state))
    cases = []
    for _, res in per_state[baseline]:
        for c in res.get("cases") or []:
            key = (c["collective"], c["bytes"])
            if key not in cases:
                cases.append(key)

    def figs(st, key):
        out = []
        for _, res in per_state.get(st, []):
            for c in res.get("cases") or []:
                if (c["collective"], c["bytes"]) == key:
                    out.append(c["us"])
        return out

    def choice(st, key):
        vals = []
        for _, res in per_state.get(st, []):
            for c in res.get("cases") or []:
                if (c["collective"], c["bytes"]) == key and c.get("nccl"):
                    n = c["nccl"]
                    vals.append("%s %s/%s" % ("?" if n.get("channels") is None
                                              else n["channels"], n["algo"], n["proto"]))
        return mode(vals)

    rows = []
    for key in cases:
        base = figs(baseline, key)
        floor = None
        if "aa" in per_state:
            iv = tool.ratio_interval(base, figs("aa", key), False, alpha)
            if iv is not None:
                floor = tool.aa_floor(iv[0], iv[1])
        for st in [s for s in states if s in per_state]:
            xs = figs(st, key)
            if not xs:
                continue
            med = statistics.median(xs)
            row = dict(collective=key[0], bytes=key[1], state=st, runs=len(xs), median_us=med,
                       figures=xs, nccl=choice(st, key), floor=floor)
            if st == baseline:
                row.update(speedup=1.0, ci=None, verdict="baseline")
            else:
                sp = tool.speedup(statistics.median(base), med, False)
                iv = tool.ratio_interval(base, xs, False, alpha)
                if iv is None:
                    verdict = "too few runs"
                elif st == "aa":
                    verdict = "A/A " + ("within noise" if iv[0] <= 1.0 <= iv[1] else "differs")
                else:
                    verdict = tool.verdict(iv[0], iv[1])
                    if verdict != "within noise" and floor is not None and abs(sp - 1.0) < floor:
                        verdict += ", below floor"
                row.update(speedup=sp, ci=None if iv is None else [iv[0], iv[1]],
                           verdict=verdict)
            rows.append(row)

    channels, binding = collections.OrderedDict(), collections.OrderedDict()
    for st, pairs in per_state.items():
        per_rank_ch, per_rank_bind = collections.defaultdict(list), collections.defaultdict(list)
        for rec, res in pairs:
            for r, n in enumerate(res.get("nccl") or []):
                tr = ",".join(sorted((n.get("transports") or {}).keys())) or "?"
                per_rank_ch[r].append("%s (%s)" % ("?" if n.get("channels") is None
                                                   else n["channels"], tr))
            for r, rr in enumerate(res.get("rank_results") or []):
                pid = rr.get("pid") if isinstance(rr, dict) else None
                dom = (rr.get("env") or {}).get("LDSHIM_DOMAIN") if isinstance(rr, dict) else None
                txt = binding_text(report_for(rec, pid, ab), r)
                if dom is not None:
                    txt += ", LDSHIM_DOMAIN=%s" % dom
                per_rank_bind[r].append(txt)
        channels[st] = ["rank %d %s" % (r, mode(v)) for r, v in sorted(per_rank_ch.items())]
        binding[st] = ["rank %d: %s" % (r, mode(v)) for r, v in sorted(per_rank_bind.items())]
    return dict(ab=os.path.abspath(ab), logs=os.path.abspath(logs), baseline=baseline,
                states=[s for s in states if s in per_state], alpha=alpha, rows=rows,
                runs_without_result=missing, channels=channels, binding=binding)


def format_text(a):
    out = ["sweep: %d cases x %d states (%s); figure: each run's slowest-rank median, us, "
           "lower is better; speedup vs %s with its exact %d %% rank interval (as ldshim-ab)"
           % (len({(r["collective"], r["bytes"]) for r in a["rows"]}), len(a["states"]),
              ", ".join(a["states"]), a["baseline"], round(100 * (1 - a["alpha"])))]
    hdr = "%-20s %-13s %4s %11s  %-26s %-26s %s" % ("case", "state", "runs", "median us",
                                                    "speedup [95% CI]", "verdict", "nccl")
    out.append(hdr)
    prev = None
    for r in a["rows"]:
        case = "%s %s" % (r["collective"], fmt_size(r["bytes"]))
        if prev is not None and case != prev:
            out.append("")
        prev = case
        sp = "%.3f" % r["speedup"]
        if r["ci"]:
            sp += " [%.3f, %.3f]" % tuple(r["ci"])
        out.append("%-20s %-13s %4d %11.2f  %-26s %-26s %s" % (
            case, r["state"], r["runs"], r["median_us"], sp, r["verdict"], r["nccl"] or "-"))
    if a["runs_without_result"]:
        out.append("%d measured run(s) of ldshim-ab left no result.json under %s"
                   % (a["runs_without_result"], a["logs"]))
    out.append("")
    out.append("channels (NCCL's communicator per rank, transport; most common over the "
               "state's runs):")
    for st, items in a["channels"].items():
        out.append("  %-13s %s" % (st, "; ".join(items) or "-"))
    out.append("binding (each rank's own shim report: device, compute applied, SMs, domain X):")
    for st, items in a["binding"].items():
        out.append("  %-13s %s" % (st, "; ".join(items) or "-"))
    return "\n".join(out) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog=PROG, description="Per-(collective, size) A/B table of an "
                                "ldshim-ab run over bench/nccl/nccl_bench.py --log-dir.")
    p.add_argument("--ab", required=True, help="ldshim-ab's --out folder (runs.json)")
    p.add_argument("--logs", required=True, help="nccl_bench.py's --log-dir of those runs")
    p.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    p.add_argument("--alpha", type=float, default=0.05, help="1 - interval level (0.05)")
    p.add_argument("--tool", help="path of ldshim-ab (default: tools/ldshim-ab of this "
                                  "checkout, or $LDSHIM_AB)")
    args = p.parse_args(argv)
    if not 0.0 < args.alpha < 1.0:
        p.error("--alpha must be between 0 and 1")
    try:
        tool = load_tool(args.tool)
    except (OSError, SyntaxError) as e:
        p.error("cannot load ldshim-ab: %s" % e)
    a = analyse(tool, args.ab, args.logs, args.alpha)
    if a is None:
        sys.stderr.write("%s: no measured run of %s has a result under %s\n"
                         % (PROG, args.ab, args.logs))
        return 1
    sys.stdout.write(format_text(a))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(a, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
