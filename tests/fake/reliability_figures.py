#!/usr/bin/env python3
"""reliability_figures.py — write bench/results/reliability.json from runs made now (issue 24):
the reliability cases of the fake-driver suite (tests/fake/cases_reliability.py) in the
normal build and, when build-tsan exists, the thread stress under ThreadSanitizer; the
fuzzers' fixed-budget runs (make test-fuzz-files, make test-policy-fuzz logs of the build).

    python3 tests/fake/reliability_figures.py [--build build] [--tsan-build build-tsan]
                                              [--out bench/results/reliability.json]

Run it after `make test` (and `make test-tsan`): it reruns the cases itself and reads the
fuzz logs those targets left. Exit status 1 when any case failed (the figures are still
written, with "passed": false).
"""
import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run_cases(build, preload, extra, filt):
    fd, figs = tempfile.mkstemp(prefix="ldshim-rel-fig-", suffix=".json")
    os.close(fd)
    env = dict(os.environ, LDSHIM_REL_FIGURES=figs)
    cmd = [sys.executable, os.path.join(HERE, "run_cases.py"), "--build", build, "--preload", preload,
           "--filter", filt] + extra
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    m = re.search(r"test-fake: (\d+) passed, (\d+) failed", p.stdout)
    with open(figs) as f:
        fig = json.load(f)
    os.unlink(figs)
    fails = [l for l in p.stdout.splitlines() if l.startswith("FAIL ")]
    skips = [l for l in p.stdout.splitlines() if l.startswith("skip ")]
    return fig, (int(m.group(1)) if m else 0), (int(m.group(2)) if m else 1), fails, skips


def fuzz_units(path):
    """Inputs a libFuzzer run executed, from its log (stat::number_of_executed_units)."""
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    m = re.findall(r"stat::number_of_executed_units: (\d+)", text)
    if m:
        return int(m[-1])
    m = re.findall(r"Done (\d+) runs", text)
    return int(m[-1]) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--tsan-build", default="build-tsan")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "reliability.json"))
    a = ap.parse_args()
    os.chdir(ROOT)
    fig, passed, failed, fails, skips = run_cases(a.build, os.path.join(a.build, "libldshim.so"), [], "^rel/")
    stress = [dict(s, build="normal (-O2)") for s in fig["stress"]]
    tsan = None
    if os.path.exists(os.path.join(a.tsan_build, "libldshim.so")) and os.path.exists(
            os.path.join(a.tsan_build, "fake", "t_stress")):
        libtsan = subprocess.run(["gcc", "-print-file-name=libtsan.so"], stdout=subprocess.PIPE, text=True).stdout.strip()
        os.environ["TSAN_OPTIONS"] = "report_signal_unsafe=0:exitcode=66"
        tfig, tp, tf, tfails, _ = run_cases(a.tsan_build, libtsan + ":" + os.path.join(a.tsan_build, "libldshim.so"),
                                            ["--stress-iters", "500"], "^rel/stress/")
        stress += [dict(s, build="ThreadSanitizer") for s in tfig["stress"]]
        tsan = {"passed": tp, "failed": tf}
        failed += tf
        fails += tfails
    fuzz = {
        "policy_parser": fuzz_units(os.path.join(a.build, "fuzz", "smoke.log")),
        "policy_file_and_config": fuzz_units(os.path.join(a.build, "fuzz", "files", "load.log")),
        "topology_cache": fuzz_units(os.path.join(a.build, "fuzz", "files", "cache.log")),
        "probe_dump_classify": fuzz_units(os.path.join(a.build, "fuzz", "files", "classify.log")),
    }
    # The hostile-path matrix (issue 41), run now: its cell count grows with every path input.
    fd, hfig = tempfile.mkstemp(prefix="ldshim-hostile-fig-", suffix=".json")
    os.close(fd)
    hp = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "hostile", "run_matrix.py"), "--build", a.build,
                         "--figures", hfig], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with open(hfig) as f:
            hostile = json.load(f)
    except ValueError:
        hostile = {"error": hp.stdout[-500:]}
    os.unlink(hfig)
    if hp.returncode != 0:
        failed += 1
        fails += [l for l in hp.stdout.splitlines() if l.startswith("FAIL ")]
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE, text=True).stdout.strip()
    out = {
        "what": "issue 24: the shim must never be the reason a program fails, hangs, or a file is lost",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git": rev, "host": platform.node(), "cpus": os.cpu_count(), "gpu": None,
        "passed": failed == 0,
        "reliability_cases": {"passed": passed, "failed": failed, "failures": fails, "skipped": skips},
        "stress": stress,
        "stress_operations": sum(s["ops"] for s in stress),
        "stress_max_threads": max((s["threads"] for s in stress), default=0),
        "tsan_stress": tsan,
        "faults_injected": {"cases": fig["fault_cases"], "calls": fig["fault_calls"],
                            "distinct_calls": len(fig["fault_calls"])},
        "inputs_tried": {"fuzz_runs": fuzz, "fuzz_runs_total": sum(v or 0 for v in fuzz.values()),
                         "hostile_environment_values": fig["env_values"], "report_cases": fig["report_cases"],
                         "cache_cases": fig["cache_cases"], "lazy_policy_cases": fig["lazy_cases"]},
        "hostile_path_matrix": hostile,
        "bytes_lost": sum(s["shim_live_bytes"] for s in stress),
        "live_driver_objects_at_exit": sum(s["fake_live_objects"] for s in stress),
        "not_run": ["make test-gpu-stress (H200: minutes of the stress per state)",
                    "make test-gpu-sanitize (H200: compute-sanitizer memcheck + racecheck over the GPU suites)"],
    }
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote %s: %d cases passed, %d failed; %d stress operations; %d fault cases over %d calls; "
          "%d fuzz inputs; bytes lost %d" % (a.out, passed, failed, out["stress_operations"],
                                             fig["fault_cases"], len(fig["fault_calls"]),
                                             out["inputs_tried"]["fuzz_runs_total"], out["bytes_lost"]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
