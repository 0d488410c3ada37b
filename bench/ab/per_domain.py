#!/usr/bin/env python3
"""per_domain.py — one process per locality domain: N instances of a program on one GPU,
each bound to its own domain, against the same N instances unbound and against one.

    python3 bench/ab/per_domain.py [options] -- command args...

The reference study's advice for a GPU whose SMs sit in two domains is to split the work by
domain: one process per die, its memory and its kernels in that die. This runs the recipe
and measures what it buys. Every round runs three configurations, in an order that
alternates between rounds (ABC, CBA, ...) so slow drift cancels:

  one      one instance under the shim in state stock (all SMs, nothing placed)
  unbound  N instances at once, all stock: the driver time-slices them over all SMs
  bound    N instances at once, instance i in state full-ld with LDSHIM_DOMAIN=i (its
           tagged memory and its kernels in domain i; --bound-state compute-only binds the
           kernels only)

Each instance prints its own throughput (--metric: a regex whose group is a rate, higher is
better; serve.py's decode tok/s by default); a configuration's figure is the sum over its
instances, the aggregate. The table gives per configuration the median aggregate, its IQR,
the per-instance rates and SM counts, and the aggregate's ratio to `unbound` with the exact
rank interval of ldshim-ab (tools/ldshim-ab, whose statistics this reuses).

The instances of a run meet at a barrier before their timed phase so that the phases
overlap: every instance gets LDSHIM_AB_BARRIER=DIR:N in its environment, and a program that
honours it (bench/apps/serve.py does) creates a file in DIR when it is ready and waits until
N files are there. A program that ignores it still runs; the tool then warns that the timed
phases may not have overlapped (their aggregate is then an upper bound).

Without MPS the GPU time-slices the contexts of separate processes: the bound instances do
not run side by side, each gets its own domain's SMs in its own time slice, and the tool says
so under the table. With MPS they could share the GPU at once, but MPS clients cannot create
green contexts, so the shim runs them unbound. The study's own advice for splitting work by
die is MIG or MLOPart (Blackwell); this tool measures what the recipe gives where neither is
available, and is ready for a GPU where the driver allows both.

Writes to --out: runs.csv (one row per instance and run), summary.json, logs/ (each
instance's stdout and stderr), reports/ (the shim's reports). Exit: 0 every run succeeded,
1 some failed (results still written), 2 bad usage, 130 (143) interrupted by SIGINT
(SIGTERM) after writing what had finished. Needs a GPU and the
shim for a real measurement; doc/ab.md ("One process per domain") has the recipe.
"""

import argparse
import csv
import importlib.machinery
import importlib.util
import io
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

PROG = "per_domain.py"
HERE = os.path.dirname(os.path.realpath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_METRIC = r"decode: [0-9.]+ ms/step +([0-9.]+) tok/s"
CONFIGS = ("one", "unbound", "bound")
BASELINE = "unbound"


class UsageError(Exception):
    pass


class Terminated(Exception):
    """SIGTERM, raised in the main thread so that what finished is still written."""


def mps_running():
    """Whether an MPS control daemon seems to serve this user (its pipe directory exists)."""
    d = os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps"
    return os.path.exists(os.path.join(d, "control"))


# What a run of separate processes on one GPU can and cannot show, printed under the table.
SHARING_NOTE = {
    False: "note: no MPS daemon: the GPU time-slices the instances' contexts, so the bound "
           "instances never run at the same time; each gets its own domain's SMs in its own "
           "slice. 'bound' against 'unbound' measures what binding costs or saves under "
           "time-slicing, not two dies working side by side (doc/ab.md section 8)",
    True: "note: an MPS daemon is running: MPS clients cannot create green contexts, so the "
          "'bound' instances probably ran unbound (see their SM counts and the reports' "
          "compute.reason)",
}

RESULT_NAME = re.compile(r"^\d{3,}-(%s)-[wr]\d+-i\d+\." % "|".join(CONFIGS))
RESULT_DIR = re.compile(r"^\d{3,}-(%s)-[wr]\d+$" % "|".join(CONFIGS))

def load_ab(path=None):
    """tools/ldshim-ab as a module (its statistics, report reading and shim lookup)."""
    cands = [path] if path else [os.environ.get("LDSHIM_AB"),
                                 os.path.join(ROOT, "tools", "ldshim-ab"),
                                 shutil.which("ldshim-ab")]
    for c in cands:
        if c and os.path.isfile(c):
            loader = importlib.machinery.SourceFileLoader("ldshim_ab_tool", c)
            spec = importlib.util.spec_from_loader("ldshim_ab_tool", loader)
            mod = importlib.util.module_from_spec(spec)
            loader.exec_module(mod)
            return mod
    raise UsageError("cannot find tools/ldshim-ab (set LDSHIM_AB to its path)")


def build_parser():
    p = argparse.ArgumentParser(
        prog=PROG, usage="%(prog)s [options] -- command args...",
        description="Run N instances of a program on one GPU, each bound to its own locality "
                    "domain (state full-ld, LDSHIM_DOMAIN=i), against the same N instances "
                    "unbound and against one instance, and compare aggregate throughput.",
        epilog="Each instance gets LD_PRELOAD=<shim>, LDSHIM_STATE, LDSHIM_DOMAIN (bound), "
               "LDSHIM_POLICY (with --policy), LDSHIM_REPORT and LDSHIM_AB_BARRIER=DIR:N. "
               "Guide: doc/ab.md, 'One process per domain'.")
    p.add_argument("--instances", type=int, default=2,
                   help="instances run at once in 'unbound' and 'bound' (default 2: one per "
                        "domain of a two-domain GPU); instance i is bound to domain i")
    p.add_argument("--runs", type=int, default=4, help="measured rounds (default 4)")
    p.add_argument("--warmup", type=int, default=1,
                   help="discarded warm-up rounds (default 1)")
    p.add_argument("--metric", default=DEFAULT_METRIC,
                   help="regex with one group: an instance's throughput (higher is better), "
                        "from the last match in its stdout, else stderr (default: serve.py's "
                        "decode tok/s)")
    p.add_argument("--policy", metavar="FILE",
                   help="policy file for every instance (LDSHIM_POLICY): the sizes 'bound' "
                        "places in each instance's domain")
    p.add_argument("--bound-state", choices=("full-ld", "compute-only"), default="full-ld",
                   help="state of the bound instances (default full-ld)")
    p.add_argument("--shim", metavar="FILE",
                   help="libldshim.so (default: the checkout's build/libldshim.so)")
    p.add_argument("--no-preload", action="store_true",
                   help="do not set LD_PRELOAD (tests; a program that loads the shim itself)")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds per run; its instances are killed past it")
    p.add_argument("--barrier-timeout", type=float, default=300.0,
                   help="seconds an instance waits at the barrier (passed on as the third "
                        "field of LDSHIM_AB_BARRIER; default 300)")
    p.add_argument("--env", action="append", default=[], metavar="K=V",
                   help="extra environment for every instance (repeatable)")
    p.add_argument("--alpha", type=float, default=0.05,
                   help="1 - confidence of the interval (default 0.05)")
    p.add_argument("--out", metavar="DIR",
                   help="output directory: created, or an existing one you own that group and "
                        "others cannot write (default ./per-domain-YYYYmmdd-HHMMSS-<random>); "
                        "one that holds results is refused unless --force")
    p.add_argument("--force", action="store_true", help="reuse an --out that holds results")
    p.add_argument("--dry-run", action="store_true", help="print the schedule and exit")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the program and its arguments")
    return p


def configure(args, ab):
    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("no command given (usage: %s [options] -- command args...)" % PROG)
    try:
        ab.check_command(cmd)
    except ab.UsageError as e:
        raise UsageError(str(e))
    if args.instances < 2:
        raise UsageError("--instances must be at least 2 (got %d): one is the 'one' "
                         "configuration" % args.instances)
    if args.instances > 8:
        raise UsageError("--instances %d: a GPU has at most 8 locality domains"
                         % args.instances)
    if args.runs < 1:
        raise UsageError("--runs must be at least 1 (got %d)" % args.runs)
    if args.warmup < 0:
        raise UsageError("--warmup must be 0 or more (got %d)" % args.warmup)
    if not 0.0 < args.alpha < 1.0:
        raise UsageError("--alpha must be between 0 and 1 (got %g)" % args.alpha)
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError("--timeout must be positive (got %g)" % args.timeout)
    if args.barrier_timeout <= 0:
        raise UsageError("--barrier-timeout must be positive (got %g)" % args.barrier_timeout)
    try:
        regex = re.compile(args.metric)
    except re.error as e:
        raise UsageError("bad --metric regex: %s" % e)
    if regex.groups != 1:
        raise UsageError("--metric needs exactly one capture group (has %d)" % regex.groups)
    extra = {}
    for kv in args.env:
        k, eq, v = kv.partition("=")
        if not eq or not k:
            raise UsageError("--env expects K=V (got '%s')" % kv)
        extra[k] = v
    shim = None
    if not args.no_preload:
        shim = args.shim or os.path.join(ROOT, "build", "libldshim.so")
        try:
            ab.fileio.check_regular(shim, ab.SHIM_MAX_BYTES, "shim")
        except ab.FileError as e:
            raise UsageError("shim not found: %s (build it with make, or --shim PATH)" % e)
        shim = os.path.abspath(shim)
    policy = None
    if args.policy is not None:
        try:
            ab.fileio.check_regular(args.policy, ab.POLICY_MAX_BYTES, "policy file")
        except ab.FileError as e:
            raise UsageError("policy not found: %s" % e)
        policy = os.path.abspath(args.policy)
    # a default name with a random part, which another user cannot create first
    out = os.path.abspath(args.out if args.out is not None
                          else ab.fileio.new_dir_name("per-domain"))
    dirs = {}
    if not args.dry_run:
        try:
            outdir = ab.fileio.OutDir.open(out, create=True)
            dirs["outdir"] = outdir
            if any(outdir.exists(f) for f in ("runs.csv", "summary.json", "logs")):
                if not args.force:
                    raise UsageError("%s holds results of an earlier run: pick another --out or "
                                     "add --force" % ab.printable(out))
                for f in ("runs.csv", "summary.json"):
                    outdir.unlink(f)
                remove_results(outdir)
            for d in ("logs", "reports", "barrier"):
                dirs[d] = outdir.subdir(d)
        except ab.FileError as e:
            for d in dirs.values():
                d.close()
            raise UsageError("cannot use --out: %s" % e)
    return dict(cmd=cmd, n=args.instances, runs=args.runs, warmup=args.warmup, regex=regex,
                metric=args.metric, policy=policy, bound_state=args.bound_state, shim=shim,
                timeout=args.timeout, barrier_timeout=args.barrier_timeout, extra_env=extra,
                alpha=args.alpha, out=out, dry_run=args.dry_run,
                quiet=args.quiet, **dirs)


def remove_results(outdir):
    """--force: delete the files and barrier folders this tool wrote under logs/, reports/ and
    barrier/ of the fileio.OutDir `outdir` (names it makes: <pos>-<config>-<r|w><round>-i<k>.*),
    nothing else; a link is removed, never followed."""
    for sub, pat, is_dir in (("logs", RESULT_NAME, False), ("reports", RESULT_NAME, False),
                             ("barrier", RESULT_DIR, True)):
        if outdir.lstat(sub) is None:
            continue
        with outdir.subdir(sub, create=False) as d:
            for n in d.listdir():
                if not pat.match(n):
                    continue
                if is_dir:
                    d.rmdir(n)
                else:
                    d.unlink(n)


def schedule(cfg):
    """[(round, warm-up?, config)]: the configurations forward in odd rounds, backward in
    even ones (ABC CBA ...), warm-up rounds first."""
    out = []
    total = cfg["warmup"] + cfg["runs"]
    for k in range(total):
        order = CONFIGS if k % 2 == 0 else tuple(reversed(CONFIGS))
        warm = k < cfg["warmup"]
        rnd = k + 1 if warm else k - cfg["warmup"] + 1
        for c in order:
            out.append((rnd, warm, c))
    return out


def instance_env(cfg, config, i, n, name, barrier):
    """The environment instance i of a run of `config` gets (delta, full)."""
    delta = dict(cfg["extra_env"])
    if cfg["shim"]:
        old = delta.get("LD_PRELOAD", os.environ.get("LD_PRELOAD", ""))
        delta["LD_PRELOAD"] = ":".join([cfg["shim"]] + ([old] if old else []))
    if config == "bound":
        delta["LDSHIM_STATE"] = cfg["bound_state"]
        delta["LDSHIM_DOMAIN"] = str(i)
    else:
        delta["LDSHIM_STATE"] = "stock"
    if cfg["policy"]:
        delta["LDSHIM_POLICY"] = cfg["policy"]
    delta["LDSHIM_REPORT"] = os.path.join(cfg["out"], "reports", "%s-i%d.%%p.json" % (name, i))
    delta["LDSHIM_AB_BARRIER"] = "%s:%d:%g" % (barrier, n, cfg["barrier_timeout"])
    env = dict(os.environ)
    env.update(delta)
    return delta, env


def run_config(cfg, ab, rnd, warm, config, pos):
    """Start the instances of one run together, wait for all; returns the run's record."""
    n = 1 if config == "one" else cfg["n"]
    name = "%03d-%s-%s%d" % (pos, config, "w" if warm else "r", rnd)
    bdir = cfg["barrier"].subdir(name)
    barrier = bdir.path
    procs, files = [], []
    t0 = time.perf_counter()
    try:
        for i in range(n):
            delta, env = instance_env(cfg, config, i, n, name, barrier)
            fo = cfg["logs"].create_file("%s-i%d.out" % (name, i), mode="w+b")
            fe = cfg["logs"].create_file("%s-i%d.err" % (name, i), mode="w+b")
            files.append((fo, fe))
            try:
                p = subprocess.Popen(cfg["cmd"], env=env, stdout=fo, stderr=fe,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
            except OSError as e:
                fe.write(("%s: %s\n" % (cfg["cmd"][0], e.strerror)).encode())
                fe.flush()
                p = None
            procs.append((p, delta))
        # Wait for all; past the timeout, or once one instance has failed (the others would
        # wait at the barrier for it, or run alone), stop the rest.
        codes = [127 if p is None else None for p, _ in procs]
        stopped = [False] * len(procs)
        deadline = None if cfg["timeout"] is None else t0 + cfg["timeout"]
        while True:
            for k, (p, _) in enumerate(procs):
                if p is not None and codes[k] is None:
                    codes[k] = p.poll()
            running = [k for k, c in enumerate(codes) if c is None]
            if not running:
                break
            late = deadline is not None and time.perf_counter() > deadline
            if late or any(c not in (None, 0) for c in codes):
                for k in running:
                    ab._kill_group(procs[k][0])
                    procs[k][0].wait()
                    stopped[k] = not late
                break
            time.sleep(0.02)
    except BaseException:
        # A second ^C or SIGTERM must not leave instances behind: ignore both while stopping.
        old = {sg: signal.signal(sg, signal.SIG_IGN) for sg in (signal.SIGINT, signal.SIGTERM)}
        try:
            for p, _ in procs:
                if p is not None and p.poll() is None:
                    ab._kill_group(p)
                    p.wait()
        finally:
            for sg, h in old.items():
                signal.signal(sg, h)
        raise
    finally:
        wall = time.perf_counter() - t0
    insts = []
    for i, ((fo, fe), (p, delta)) in enumerate(zip(files, procs)):
        code = codes[i]
        # the logs stay on disk whole; what is read back is bounded (ab.OutputScanner: the
        # metric line by line with a line cap, a fixed-size stderr tail)
        scans = []
        for f in (fo, fe):
            sc = ab.OutputScanner(cfg["regex"])
            f.seek(0)
            while True:
                chunk = f.read(1 << 16)
                if not chunk:
                    break
                sc.feed(chunk)
            f.close()
            scans.append(sc.finish())
        fig = ab.parse_figure(scans[0].match if scans[0].match is not None else scans[1].match)
        if stopped[i]:
            status = "stopped: another instance of the run failed"
        elif code is None:
            status = "timeout after %gs" % cfg["timeout"]
        elif code < 0:
            status = "killed by %s" % ab._signame(-code)
        elif code != 0:
            status = "exit %d" % code
        elif fig is None:
            status = "metric not found"
        else:
            status = "ok"
        reps = [r for _, r in ab.read_run_reports(cfg["reports"], "%s-i%d" % (name, i))]
        rep = ab.merge_reports(reps)
        facts = ab.report_facts(rep, delta["LDSHIM_STATE"]) if rep is not None else {}
        insts.append(dict(instance=i, status=status, ok=status == "ok", exit_code=code,
                          figure=fig, sm_count=facts.get("sm_count"),
                          applied=[c["applied"] for c in facts.get("compute", [])] or None,
                          domain=delta.get("LDSHIM_DOMAIN"), state=delta["LDSHIM_STATE"],
                          bytes_per_domain=facts.get("bytes_per_domain"),
                          stderr_tail=scans[1].tail))
    try:
        met = len(bdir.listdir())
    except ab.FileError:
        met = 0
    bdir.close()
    ok = all(x["ok"] for x in insts)
    return dict(position=pos, name=name, round=rnd, warmup=warm, config=config, instances=n,
                ok=ok, aggregate=sum(x["figure"] for x in insts) if ok else None,
                barrier_met=met >= n, barrier_arrivals=met, wall_s=wall, members=insts)


def summarize(cfg, ab, records):
    rows = {}
    for c in CONFIGS:
        meas = [r for r in records if r["config"] == c and not r["warmup"]]
        good = [r for r in meas if r["ok"]]
        xs = [r["aggregate"] for r in good]
        n = 1 if c == "one" else cfg["n"]
        per = [statistics.median([r["members"][i]["figure"] for r in good]) if good else None
               for i in range(n)]
        sms = [ab._mode([r["members"][i]["sm_count"] for r in good
                         if r["members"][i]["sm_count"] is not None]) for i in range(n)]
        rows[c] = dict(config=c, instances=n, runs=len(meas), ok=len(xs), figures=xs,
                       median=statistics.median(xs) if xs else None,
                       iqr=ab.iqr(xs) if xs else None, per_instance=per, sm_counts=sms,
                       barrier_missed=sum(1 for r in good if not r["barrier_met"]),
                       speedup=None, ci_low=None, ci_high=None, verdict=None)
    base = rows[BASELINE]["figures"]
    for c in CONFIGS:
        row = rows[c]
        if c == BASELINE:
            row.update(speedup=1.0 if base else None,
                       verdict="baseline" if base else "no successful runs")
            continue
        if not row["figures"] or not base:
            row["verdict"] = "no successful runs" if not row["figures"] else "no baseline runs"
            continue
        if min(base) <= 0 or min(row["figures"]) <= 0:
            row["verdict"] = "figures not positive"
            continue
        row["speedup"] = ab.speedup(statistics.median(base), row["median"], True)
        iv = ab.ratio_interval(base, row["figures"], True, cfg["alpha"])
        if iv is None:
            row["verdict"] = "too few runs"
        else:
            row["ci_low"], row["ci_high"] = iv[0], iv[1]
            row["verdict"] = ab.verdict(iv[0], iv[1])
    return [rows[c] for c in CONFIGS]


def fmt(x):
    return "-" if x is None else ("%.1f" % x if abs(x) >= 100 else "%.3f" % x)


def table(cfg, ab, rows):
    conf = int(round((1 - cfg["alpha"]) * 100))
    f = "%-8s %4s %-7s %12s %10s  %-21s %-9s %-28s %s"
    lines = ["%s: aggregate throughput of %d instances (sum of each instance's figure, higher "
             "is better); bound = %s on domain i" % (PROG, cfg["n"], cfg["bound_state"]),
             f % ("config", "inst", "ok/run", "median", "IQR", "per instance", "SMs",
                  "vs unbound [%d%% CI]" % conf, "verdict")]
    for r in rows:
        per = "/".join(fmt(x) for x in r["per_instance"])
        sms = "/".join(ab.fmt_sm(x) for x in r["sm_counts"])
        if r["speedup"] is None:
            sp = "-"
        elif r["ci_low"] is None:
            sp = "%.3f" % r["speedup"]
        else:
            sp = "%.3f [%.3f, %.3f]" % (r["speedup"], r["ci_low"], r["ci_high"])
        lines.append(f % (r["config"], r["instances"], "%d/%d" % (r["ok"], r["runs"]),
                          fmt(r["median"]), fmt(r["iqr"]), per, sms, sp, r["verdict"]))
    by = {r["config"]: r for r in rows}
    b, o = by["bound"], by["one"]
    if b["verdict"] == "faster":
        lines.append("reading: the instances bound one per domain beat the same instances "
                     "time-sliced over all SMs: splitting the work by domain pays here")
    elif b["verdict"] == "within noise":
        lines.append("reading: bound one per domain ~ time-sliced over all SMs: splitting by "
                     "domain neither gains nor costs aggregate throughput here")
    elif b["verdict"] == "slower":
        lines.append("reading: the instances bound one per domain lose to the same instances "
                     "time-sliced over all SMs: each gets fewer SMs than it can use")
    why = {"within noise": "one instance already saturates the GPU",
           "faster": "time-slicing several instances over all SMs costs throughput",
           "slower": "running several instances at once adds throughput"}
    if o["speedup"] is not None and o["verdict"] in why:
        lines.append("reading: one instance alone makes %.3fx the unbound instances' aggregate "
                     "(%s): %s" % (o["speedup"], o["verdict"], why[o["verdict"]]))
    for r in rows:
        if r["barrier_missed"]:
            lines.append("%s: warning: in %d good run(s) of '%s' the instances did not all reach "
                         "LDSHIM_AB_BARRIER: their timed phases may not have overlapped, so the "
                         "aggregate is an upper bound (does the program honour the barrier?)"
                         % (PROG, r["barrier_missed"], r["config"]))
    sms = [x for x in by["bound"]["sm_counts"] if x is not None]
    if len(set(map(str, sms))) > 1:
        lines.append("%s: warning: the bound instances ran on different SM counts (%s)"
                     % (PROG, "/".join(map(str, sms))))
    return lines


def write_csv(outdir, records):
    """runs.csv in the fileio.OutDir, replaced whole (it is small: one row per instance)."""
    fields = ["position", "name", "config", "warmup", "round", "instance", "state", "domain",
              "ok", "status", "exit_code", "figure", "aggregate", "sm_count", "compute_applied",
              "bytes_per_domain", "barrier_met", "wall_s"]
    f = io.StringIO()
    w = csv.writer(f)
    w.writerow(fields)
    for r in records:
        for m in r["members"]:
            w.writerow([r["position"], r["name"], r["config"], int(r["warmup"]), r["round"],
                        m["instance"], m["state"], m["domain"] or "", int(m["ok"]),
                        m["status"], "" if m["exit_code"] is None else m["exit_code"],
                        "" if m["figure"] is None else repr(m["figure"]),
                        "" if r["aggregate"] is None else repr(r["aggregate"]),
                        "" if m["sm_count"] is None else m["sm_count"],
                        "/".join(m["applied"] or []),
                        "/".join(map(str, m["bytes_per_domain"] or [])),
                        int(r["barrier_met"]), "%.6f" % r["wall_s"]])
    outdir.write("runs.csv", f.getvalue())


def main(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    try:
        ab = load_ab()
        cfg = configure(args, ab)
    except UsageError as e:
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return 2
    sched = schedule(cfg)
    if cfg["dry_run"]:
        for pos, (rnd, warm, c) in enumerate(sched, 1):
            print("%d %s %s %d x%d" % (pos, c, "warmup" if warm else "run", rnd,
                                       1 if c == "one" else cfg["n"]))
        return 0

    def log(msg):
        if not cfg["quiet"]:
            print(msg, file=sys.stderr, flush=True)

    def on_term(signum, frame):
        raise Terminated()
    signal.signal(signal.SIGTERM, on_term)
    records, interrupted = [], None
    started = ab.utc_now()
    try:
        for pos, (rnd, warm, c) in enumerate(sched, 1):
            rec = run_config(cfg, ab, rnd, warm, c, pos)
            records.append(rec)
            log("[%d/%d] %-7s %s %d: %s%s" % (
                pos, len(sched), c, "warm-up" if warm else "run", rnd,
                "aggregate %s" % fmt(rec["aggregate"]) if rec["ok"] else
                ", ".join("i%d %s" % (m["instance"], m["status"]) for m in rec["members"]
                          if not m["ok"]),
                "" if rec["barrier_met"] else " (barrier not met)"))
            write_csv(cfg["outdir"], records)
    except KeyboardInterrupt:
        interrupted = "SIGINT"
    except Terminated:
        interrupted = "SIGTERM"
    rows = summarize(cfg, ab, records)
    meta = ab.provenance()
    summary = dict(tool=PROG, command=cfg["cmd"], instances=cfg["n"], runs=cfg["runs"],
                   warmup=cfg["warmup"], metric=cfg["metric"], policy=cfg["policy"],
                   bound_state=cfg["bound_state"], shim=cfg["shim"], env=cfg["extra_env"],
                   alpha=cfg["alpha"], baseline=BASELINE, started=started,
                   finished=ab.utc_now(), interrupted=interrupted, rows=rows, **meta)
    try:
        write_csv(cfg["outdir"], records)
        cfg["outdir"].write("summary.json", json.dumps(summary, indent=1) + "\n")
    except ab.FileError as e:
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return 2
    print("\n".join(table(cfg, ab, rows) + [SHARING_NOTE[mps_running()]]))
    failed = [(r["name"], m) for r in records for m in r["members"]
              if not r["warmup"] and not m["ok"]]
    if failed:
        print("\nfailed instances (their runs are excluded):")
        for name, m in failed:
            print("  %s instance %d: %s" % (name, m["instance"], m["status"]))
            for ln in m["stderr_tail"]:
                print("      | " + ln)
    print("\nresults: %s" % ab.printable(cfg["out"]))
    if interrupted:
        return 130 if interrupted == "SIGINT" else 128 + signal.SIGTERM
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
