#!/usr/bin/env python3
"""run.py — the study's placement states over unmodified programs on a real GPU, one program
per allocation api (make test-gpu-study).

Every program runs once without the shim (base) and then under the shim in each state
(stock memory full mismatch memory-only compute-only full-ld mismatch-ld sm-control), with a
policy that tags every allocation of 16 MiB or more (backend emulated unless --backend). Per
run it checks: exit 0; stdout (result hashes) equal to the base run; the report's `apis`:
the program's api placed in the states that place memory, except split placement of an api
other than runtime/driver, which must pass through, and nothing placed in stock,
compute-only and sm-control; compute bound and verified exactly in the bound states, one SM
count for all of them, mismatch-ld on SMs disjoint from full-ld's, sm-control on SMs of every
domain; the ranges live at exit exactly the tagged allocations the program did not free, and
none for a program that frees everything (CuPy's; PyTorch and JAX keep some until exit).
A run needs about 10 s (PyTorch) or 2 s (CuPy); --jobs 4 takes about 3 minutes on an H200. Prints "ok NAME" / "FAIL NAME: why", writes "<passed> <failed>"
to --results, logs into a folder (packed into $OUT when set).
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
STATES = ["stock", "memory", "full", "mismatch", "memory-only", "compute-only", "full-ld", "mismatch-ld",
          "sm-control"]
PLACES_MEMORY = {"memory", "full", "mismatch", "memory-only", "full-ld", "mismatch-ld"}
SPLIT = {"memory", "full", "mismatch"}
BOUND = {"compute-only", "full-ld", "mismatch-ld", "sm-control"}
TORCH = os.path.join(ROOT, "tests", "gpu", "shim", "torch_check.py")
APPS = os.path.join(HERE, "apps.py")


def programs(py):
    """(name, needs module, extra env, argv, apis the program's tagged memory comes through,
    whether the program frees all of its memory before it exits)."""
    return [
        # PyTorch keeps one cudaMalloc of its own (not its allocator's) until the process ends.
        ("torch-caching", "torch", {}, [py, TORCH], {"runtime", "driver"}, False),
        # XLA keeps its preallocated arena until the process ends: memory live at exit is its.
        ("jax", "jax", {"XLA_PYTHON_CLIENT_PREALLOCATE": "true", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.25"},
         [py, APPS, "jax"], {"vmm", "driver", "runtime"}, False),
        ("torch-expandable", "torch", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, [py, TORCH], {"vmm"},
         False),
        ("torch-async", "torch", {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}, [py, TORCH], {"async"}, False),
        ("cupy-async", "cupy", {}, [py, APPS, "cupy-async"], {"async"}, True),
        ("cupy-managed", "cupy", {}, [py, APPS, "cupy-managed"], {"managed"}, True),
    ]


def check(state, base_out, out, rep, apis, frees_all, bound_seen):
    errs = []
    if out != base_out:
        errs.append("stdout differs from the run without the shim")
    apis_rep = rep.get("apis", {})
    placed = {a: v.get("placed", 0) + v.get("emulated", 0) for a, v in apis_rep.items()}
    requests = {a: v.get("requests", 0) for a, v in apis_rep.items()}
    mine = sum(placed.get(a, 0) for a in apis)
    if state in PLACES_MEMORY:
        if state in SPLIT and not apis & {"runtime", "driver"}:
            if mine:
                errs.append("split placement placed %d %s requests (it passes them through)" % (mine, "/".join(sorted(apis))))
            if not sum(requests.get(a, 0) for a in apis):
                errs.append("no %s request reached the shim" % "/".join(sorted(apis)))
        elif not mine:
            errs.append("nothing placed on %s (apis: %s)" % ("/".join(sorted(apis)),
                        {a: v for a, v in apis_rep.items() if v.get("requests")}))
    elif any(placed.values()):
        errs.append("placed memory in %s: %s" % (state, {a: n for a, n in placed.items() if n}))
    devs = rep.get("devices") or [{}]
    c = devs[0].get("compute")
    if state in BOUND:
        if not c or c.get("applied") == "all" or not c.get("verified"):
            errs.append("compute not bound: %s" % (c.get("reason") if c else "no compute record"))
        else:
            bound_seen[state] = c
    elif c and c.get("applied") not in (None, "all"):
        errs.append("compute bound in %s: %s" % (state, c.get("applied")))
    live = rep.get("live", {})
    counts = rep.get("counts", {})
    held = counts.get("tagged_allocs", 0) - counts.get("tagged_frees", 0)
    if live.get("ranges", 0) + live.get("placed_elsewhere", 0) != held:
        errs.append("live at exit %s, but the program freed all but %d of its tagged allocations" % (live, held))
    elif held and frees_all:
        errs.append("live at exit: %s" % live)
    return errs


def cross_checks(bound_seen):
    errs = []
    counts = {s: c["sm_count"] for s, c in bound_seen.items()}
    if len(set(counts.values())) > 1:
        errs.append("bound states got different SM counts: %s" % counts)
    f, m = bound_seen.get("full-ld"), bound_seen.get("mismatch-ld")
    if f and m and set(f["sms"]) & set(m["sms"]):
        errs.append("mismatch-ld shares %d SMs with full-ld" % len(set(f["sms"]) & set(m["sms"])))
    sc = bound_seen.get("sm-control")
    if sc and not all(sc["sms_per_domain"]):
        errs.append("sm-control is not spread over every domain: %s" % sc["sms_per_domain"])
    return errs


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "libldshim.so"), help="the preload library")
    ap.add_argument("--results", default=os.path.join(ROOT, "build", "results", "test-gpu-study"),
                    help='file to write "<passed> <failed>" to')
    ap.add_argument("--only", default="", help="comma list of program names (default all whose module imports)")
    ap.add_argument("--states", default=",".join(STATES), help="comma list of states (default all nine)")
    ap.add_argument("--backend", default="emulated", help="policy backend (default emulated)")
    ap.add_argument("--domain", type=int, default=0, help="the study's domain X (default 0)")
    ap.add_argument("--timeout", type=float, default=180, help="seconds per run (default 180)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="programs run at once (default 1); after one warm-up run has measured the "
                         "topology, so no probe runs beside another program")
    a = ap.parse_args(argv)
    states = [s for s in a.states.split(",") if s]
    bad_states = [s for s in states if s not in STATES]
    if bad_states:
        ap.error("unknown state(s) %s; states are %s" % (",".join(bad_states), " ".join(STATES)))
    if a.jobs < 1:
        ap.error("--jobs must be at least 1")
    if not os.path.exists(a.lib):
        ap.error("%s is missing (run make)" % a.lib)
    py = sys.executable
    logs = tempfile.mkdtemp(prefix="ldshim-gpu-study.")
    cache = os.path.join(logs, "cache")
    os.makedirs(cache)
    policy = os.path.join(logs, "study.policy")
    with open(policy, "w") as f:
        f.write("backend = %s\n\n[rule large]\nsize = 16MiB..512GiB\n" % a.backend)
    only = set(x for x in a.only.split(",") if x)
    passed = failed = 0
    summary = open(os.path.join(logs, "summary.txt"), "w")
    lock = threading.Lock()

    def say(ok, name, why=""):
        nonlocal passed, failed
        line = ("ok   %s" % name) if ok else ("FAIL %s: %s" % (name, why))
        with lock:
            passed += ok
            failed += not ok
            print(line, flush=True)
            summary.write(line + "\n")

    def run(name, env_extra, argv_, shim_env):
        base = os.path.join(logs, name.replace("/", "_"))
        env = dict(os.environ, **env_extra)
        env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
        rep = base + ".json"
        if shim_env is not None:
            env.update(shim_env, LD_PRELOAD=a.lib, LDSHIM_POLICY=policy, LDSHIM_REPORT=rep, LDSHIM_CACHE_DIR=cache,
                       LDSHIM_DOMAIN=str(a.domain), LDSHIM_LOG="info")
        t0 = time.time()
        try:
            p = subprocess.run(argv_, env=env, capture_output=True, text=True, timeout=a.timeout)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            rc, out, err = "timeout", e.stdout or "", e.stderr or ""
            out = out.decode() if isinstance(out, bytes) else out
            err = err.decode() if isinstance(err, bytes) else err
        with open(base + ".out", "w") as f:
            f.write(out)
        with open(base + ".err", "w") as f:
            f.write(err)
        with lock:
            print("  %-32s rc=%s %.1f s" % (name, rc, time.time() - t0), flush=True)
        r = None
        if shim_env is not None and os.path.exists(rep):
            try:
                r = json.load(open(rep))
            except ValueError as e:
                r = {"_error": str(e)}
        return rc, out, err, r

    progs = []
    for name, mod, env_extra, argv_, apis, frees_all in programs(py):
        if only and name not in only:
            continue
        if subprocess.run([py, "-c", "import " + mod], capture_output=True).returncode != 0:
            print("skip %s: python module %s does not import" % (name, mod), flush=True)
            if only:
                say(False, name, "module %s does not import" % mod)
            continue
        progs.append((name, env_extra, argv_, apis, frees_all))
    def one_program(name, env_extra, argv_, apis, frees_all):
        rc, base_out, err, _ = run(name + "/base", env_extra, argv_, None)
        if rc != 0:
            say(False, name + "/base", "exit %s: %s" % (rc, err.strip().splitlines()[-1:] or ""))
            return
        say(True, name + "/base")
        bound_seen = {}
        for st in states:
            rc, out, err, rep = run("%s/%s" % (name, st), env_extra, argv_, {"LDSHIM_STATE": st})
            if rc != 0:
                say(False, "%s/%s" % (name, st), "exit %s: %s" % (rc, err.strip().splitlines()[-1:] or ""))
                continue
            if rep is None or "_error" in rep:
                say(False, "%s/%s" % (name, st), "no readable report (%s)" % (rep or {}).get("_error", "missing"))
                continue
            errs = check(st, base_out, out, rep, apis, frees_all, bound_seen)
            say(not errs, "%s/%s" % (name, st), "; ".join(errs))
        if len(bound_seen) > 1:
            errs = cross_checks(bound_seen)
            say(not errs, name + "/bound-states-agree", "; ".join(errs))

    if progs and a.jobs > 1:
        # The probe and the SM groups are measured once, on an otherwise idle GPU.
        name, env_extra, argv_ = progs[0][:3]
        run(name + "/warm-up", env_extra, argv_, {"LDSHIM_STATE": "full-ld"})
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        for f in [ex.submit(one_program, *p) for p in progs]:
            f.result()
    if not progs:
        say(False, "setup", "no program could run (torch, cupy, jax all missing)")
    summary.close()
    os.makedirs(os.path.dirname(a.results) or ".", exist_ok=True)
    with open(a.results, "w") as f:
        f.write("%d %d\n" % (passed, failed))
    print("test-gpu-study: %d passed, %d failed (logs %s)" % (passed, failed, logs))
    out = os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        with tarfile.open(os.path.join(out, "gpu-study-logs.tar.gz"), "w:gz") as t:
            t.add(logs, arcname="gpu-study")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
