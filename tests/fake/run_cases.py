#!/usr/bin/env python3
"""run_cases.py — the `test-fake` suite: test programs run under the shim with the fake
CUDA driver/runtime, one fresh process per case.

Each case runs
    LD_LIBRARY_PATH=build/fake LD_PRELOAD=<prefix>build/libldshim.so LDSHIM_POLICY=<policy> \
    LDSHIM_REPORT=<tmp>/report.json FAKE_CUDA_REPORT=<tmp>/fake.txt <program> <args>
and asserts on the exit status, the program's "key=value" stdout lines (its own CHECKs fail
the run), stderr, the LDSHIM_REPORT JSON and the fake driver's live counts at exit (all zero
unless the case says otherwise). Cases named "*/noshim" and "fake/*" run without the shim:
they pin down the fake's own behaviour (the baseline every shim case is compared with).

Case names say what they check: the first component is the area, the rest the program, size or
variant. Areas: resolve/ (every way an allocation reaches the driver), untagged/, pointers/
(interior pointers, ranges, attributes), free/ (free synchronizes), ipc/, failure/ (injected
failures, out of memory), stock/, memory/ (threads, fork, two devices), bad-policy/, report/,
publish/ (the topology symbol), compute/ (cases_compute.py), place/ (cases_place.py), rel/
(cases_reliability.py), fake/ (the fake alone).

Prints "ok <name>" or "FAIL <name>: <why>" per case; writes "<passed> <failed>" to --result.
See doc/testing.md for how to add a case.
"""
import argparse
import glob
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

MiB = 1 << 20


class Fail(Exception):
    pass


class Result:
    def __init__(self, rc, stdout, stderr, report, fake):
        self.rc, self.stdout, self.stderr, self.report, self.fake = rc, stdout, stderr, report, fake
        self.out = {}
        for line in stdout.splitlines():
            if "=" in line:
                k, v = line.split("=", 1)
                self.out[k.strip()] = v.strip()


class Case:
    def __init__(self, name, prog, args, policy=None, env=None, shim=True, expect=None, rc=0,
                 checks=(), zero_counts=True, quiet=False, timeout=120, wrap=(), green_at_exit=0):
        self.name, self.prog, self.args = name, prog, [str(a) for a in args]
        self.wrap = list(wrap)      # argv run in front of the program (e.g. a shell), shim loaded in both
        self.policy, self.env, self.shim = policy, dict(env or {}), shim
        self.expect, self.rc, self.checks = dict(expect or {}), rc, list(checks)
        self.zero_counts, self.quiet, self.timeout = zero_counts, quiet, timeout
        # Green contexts the shim's binding still holds at exit, by design: it tears nothing
        # down then (shim/compute.c, at_exit); the process's end frees them.
        self.green_at_exit = green_at_exit


class Runner:
    def __init__(self, build, preload, policies):
        self.build, self.preload, self.policies = build, preload, policies
        self.fake = os.path.join(build, "fake")

    def run(self, case):
        tmp = tempfile.mkdtemp(prefix="ldshim-fake-")
        try:
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("LDSHIM_", "FAKE_CUDA_", "CUDA_")) and k != "LD_PRELOAD"}
            env["LD_LIBRARY_PATH"] = os.path.abspath(self.fake)
            env["FAKE_CUDA_REPORT"] = os.path.join(tmp, "fake.txt")
            env["LDSHIM_REPORT"] = os.path.join(tmp, "report.json")
            env["LDSHIM_CACHE_DIR"] = os.path.join(tmp, "cache")
            env["XDG_CACHE_HOME"] = os.path.join(tmp, "xdg")
            if case.shim:
                env["LD_PRELOAD"] = self.preload
            if case.policy:
                env["LDSHIM_POLICY"] = (case.policy if "/" in case.policy
                                        else os.path.join(self.policies, case.policy))
            for k, v in case.env.items():
                if v is None:
                    env.pop(k, None)
                else:
                    env[k] = str(v)
            argv = case.wrap + [os.path.join(self.fake, case.prog)] + case.args
            try:
                p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   timeout=case.timeout)
            except subprocess.TimeoutExpired:
                raise Fail("timed out after %d s" % case.timeout)
            except OSError as e:
                raise Fail("cannot run %s: %s (is it built?)" % (argv[0], e.strerror))
            stdout = p.stdout.decode(errors="replace")
            stderr = p.stderr.decode(errors="replace")
            report = None
            rp = env["LDSHIM_REPORT"]
            if os.path.isfile(rp):
                # Bytes first: a report that is not UTF-8 is a failed check, not a crash.
                with open(rp, "rb") as f:
                    raw = f.read()
                try:
                    report = json.loads(raw.decode("utf-8"))
                except ValueError as e:
                    report = {"_invalid": "%s: %r" % (e, raw[:200])}
            fake = None
            if os.path.exists(env["FAKE_CUDA_REPORT"]):
                with open(env["FAKE_CUDA_REPORT"]) as f:
                    fake = dict(kv.split("=") for kv in f.read().split())
            return Result(p.returncode, stdout, stderr, report, fake)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def first_line(s):
    s = s.strip()
    return (s.splitlines() or [""])[-1][:300]


def verify(runner, case):
    res = runner.run(case)
    if case.rc is not None and res.rc != case.rc:   # None: compared by a check instead
        raise Fail("exit status %d, expected %d; stderr: %s" % (res.rc, case.rc, first_line(res.stderr)))
    for k, v in case.expect.items():
        got = res.out.get(k)
        if got != str(v):
            raise Fail("%s=%s, expected %s; stderr: %s" % (k, got, v, first_line(res.stderr)))
    if case.zero_counts:
        if res.fake is None:
            raise Fail("the fake driver wrote no FAKE_CUDA_REPORT")
        want = {"green": str(case.green_at_exit)}
        live = {k: v for k, v in res.fake.items() if v != want.get(k, "0")}
        if live:
            raise Fail("fake driver objects live at exit: %s" % " ".join("%s=%s" % kv for kv in live.items()))
    # Every report, whatever the case: the shim keeps track of each tagged allocation the
    # program still holds, as a range or as a placed pointer or handle.
    r = res.report
    if isinstance(r, dict) and "live" in r and "counts" in r:
        held = r["counts"]["tagged_allocs"] - r["counts"]["tagged_frees"]
        tracked = r["live"]["ranges"] + r["live"].get("placed_elsewhere", 0)
        if tracked != held:
            raise Fail("report: %d tagged allocations not freed, but %d live (%s)" % (held, tracked, r["live"]))
    if case.quiet and res.stderr.strip():
        raise Fail("unexpected stderr: %s" % first_line(res.stderr))
    for check in case.checks:
        check(runner, res)
    return res


# ---- reusable checks ------------------------------------------------------------------------

def out_at_least(key, n):
    def check(_, res):
        try:
            v = int(res.out.get(key, ""))
        except ValueError:
            raise Fail("%s missing from output" % key)
        if v < n:
            raise Fail("%s=%d, expected >= %d" % (key, v, n))
    return check


def stderr_matches(pattern, count=None):
    def check(_, res):
        lines = [l for l in res.stderr.splitlines() if re.search(pattern, l)]
        if not lines:
            raise Fail("stderr lacks /%s/; stderr: %s" % (pattern, first_line(res.stderr) or "(empty)"))
        if count is not None and len(lines) != count:
            raise Fail("%d stderr lines match /%s/, expected %d" % (len(lines), pattern, count))
    return check


def stderr_only(allowed):
    """stderr holds nothing but lines matching `allowed` (e.g. the probe's fallback warning,
    which the fake's NO_BINARY_FOR_GPU answer causes in every process that probes)."""
    def check(_, res):
        stray = [l for l in res.stderr.splitlines() if not re.search(allowed, l)]
        if stray:
            raise Fail("stray stderr: %s" % " | ".join(stray)[:300])
    return check


def ldshim_lines(n, pattern=r"^ldshim: (error|warning|info|debug): "):
    def check(_, res):
        lines = [l for l in res.stderr.splitlines() if re.search(pattern, l)]
        if len(lines) != n:
            raise Fail("%d stderr lines match /%s/, expected %d: %s" % (len(lines), pattern, n, " | ".join(lines)[:300]))
    return check


def same_as_noshim(runner, res, case_args):
    """Observable results equal to the same program run without the shim."""
    base = runner.run(case_args)
    if base.rc != res.rc:
        raise Fail("exit status %d, without the shim %d" % (res.rc, base.rc))
    if base.out != res.out:
        diff = ["%s: %s vs %s" % (k, res.out.get(k), base.out.get(k))
                for k in sorted(set(base.out) | set(res.out)) if base.out.get(k) != res.out.get(k)]
        raise Fail("differs from the run without the shim (shim vs stock): " + "; ".join(diff))


def no_stdout(_, res):
    if res.stdout:
        raise Fail("the program's main ran: " + res.stdout[:100])


def report_check(fn):
    def check(_, res):
        if res.report is None:
            raise Fail("no LDSHIM_REPORT written")
        if "_invalid" in res.report:
            raise Fail("LDSHIM_REPORT is not JSON: " + res.report["_invalid"])
        fn(res.report)
    return check


def need(obj, key, types, where):
    if not isinstance(obj, dict) or key not in obj:
        raise Fail("report: %s lacks \"%s\"" % (where, key))
    if not isinstance(obj[key], types):
        raise Fail("report: %s.%s has type %s" % (where, key, type(obj[key]).__name__))
    return obj[key]


def report_shape(r):
    for k in ("ldshim", "pid", "state", "policy", "policy_error", "backend", "backend_reason", "devices",
              "rules", "pool", "fallbacks", "untagged", "live"):
        if k not in r:
            raise Fail("report lacks \"%s\"" % k)
    for d in need(r, "devices", list, "top"):
        for k in ("device", "domains", "granularity", "probe"):
            need(d, k, (int, dict) if k == "probe" else int, "devices[]")
    for rule in need(r, "rules", list, "top"):
        need(rule, "name", str, "rules[]")
        for k in ("matched", "allocations", "bytes", "fallbacks", "ipc_refused"):
            need(rule, k, int, "rules[]")
        need(rule, "bytes_per_domain", list, "rules[]")
    pool = need(r, "pool", dict, "top")
    for k in ("hits", "misses", "trims", "cached_bytes", "cap"):
        need(pool, k, int, "pool")
    for f in need(r, "fallbacks", list, "top"):
        need(f, "reason", str, "fallbacks[]")
        need(f, "count", int, "fallbacks[]")
    u = need(r, "untagged", dict, "top")
    need(u, "allocations", int, "untagged")
    for h in need(u, "histogram", list, "untagged"):
        need(h, "size", int, "histogram[]")
        need(h, "api", str, "histogram[]")
        need(h, "count", int, "histogram[]")
    live = need(r, "live", dict, "top")
    need(live, "ranges", int, "live")
    need(live, "bytes", int, "live")
    need(live, "placed_elsewhere", int, "live")


def rule_of(r, name):
    for rule in r.get("rules", []):
        if rule.get("name") == name:
            return rule
    raise Fail("report has no rule \"%s\"" % name)


def check_reuse_report(r):
    report_shape(r)
    if r["state"] != "full" or r["backend"] != "emulated":
        raise Fail("report state/backend %s/%s, expected full/emulated" % (r["state"], r["backend"]))
    w = rule_of(r, "weights")
    if w["allocations"] != 3 or w["matched"] != 3 or w["bytes"] != 3 * 8 * MiB:
        raise Fail("rule weights: matched %d allocations %d bytes %d, expected 3 3 %d"
                   % (w["matched"], w["allocations"], w["bytes"], 3 * 8 * MiB))
    if len(w["bytes_per_domain"]) != 2 or sum(w["bytes_per_domain"]) != w["bytes"]:
        raise Fail("rule weights: bytes_per_domain %s does not split %d over 2 domains"
                   % (w["bytes_per_domain"], w["bytes"]))
    if r["pool"]["hits"] < 1:
        raise Fail("pool hits %d after allocate/free/allocate of one size" % r["pool"]["hits"])
    hist = {(h["size"], h["api"]): h["count"] for h in r["untagged"]["histogram"]}
    if hist.get((MiB, "driver")) != 3 or hist.get((3 * MiB, "driver")) != 1:
        raise Fail("untagged histogram %s lacks 1MiB x3 and 3MiB x1 (api driver)" % r["untagged"]["histogram"])
    if r["live"]["ranges"] != 0:
        raise Fail("report: live ranges %d at exit" % r["live"]["ranges"])
    if not r["devices"] or r["devices"][0]["device"] != 0:
        raise Fail("report: devices %s" % r["devices"])


def check_discover_report(r, api):
    report_shape(r)
    hist = [h for h in r["untagged"]["histogram"] if h["size"] == 8 * MiB]
    if len(hist) != 1 or hist[0]["api"] != api or hist[0]["count"] != 1:
        raise Fail("untagged histogram %s, expected one 8MiB %s request" % (r["untagged"]["histogram"], api))


def check_fallback_report(r):
    report_shape(r)
    total = sum(f["count"] for f in r["fallbacks"])
    if total < 1 or not all(f["reason"] for f in r["fallbacks"]):
        raise Fail("report counts no fallback with a reason: %s" % r["fallbacks"])
    if rule_of(r, "weights")["fallbacks"] < 1:
        raise Fail("rule weights counts no fallback")


def check_native_report(r):
    report_shape(r)
    if r["backend"] != "native":
        raise Fail("backend %s, expected native (reason: %s)" % (r["backend"], r.get("backend_reason")))
    if r["devices"][0]["domains"] != 2:
        raise Fail("device 0 domains %s, expected 2" % r["devices"][0]["domains"])


# ---- the cases ------------------------------------------------------------------------------

def cases(a):
    C = []
    native = {"FAKE_CUDA_DOMAINS": 2}
    split_emul = {"a_shim": 1, "a_slices": 2, "a_domains": "-1,-1"}
    split_native = {"a_shim": 1, "a_slices": 2, "a_domains": "0,1", "a_expect": "0,1"}

    # fake/*: the fake driver alone.
    for c in ("vmm", "share", "procaddr", "init"):
        C.append(Case("fake/" + c, "t_vmm", [c], shim=False))
    C.append(Case("fake/domains", "t_vmm", ["domains"], shim=False, env=native, expect={"domains": "1,0"}))
    C.append(Case("fake/inject", "t_vmm", ["inject"], shim=False,
                  env={"FAKE_CUDA_FAIL": "cuMemCreate:2,cuMemMap:1+:999"}))
    C.append(Case("fake/limit", "t_vmm", ["limit"], shim=False, env={"FAKE_CUDA_MEM_LIMIT": 8 * MiB}))
    C.append(Case("fake/mps-devices", "t_vmm", ["init"], shim=False, env={"CUDA_MPS_PIPE_DIRECTORY": "@MPS"},
                  expect={"devices": 3}))

    # resolve/: every resolution path reaches the shim for a tagged size.
    for how in ("link", "dlsym", "gpa12000", "gpa13000", "gpaptds", "gpaold"):
        C.append(Case("resolve/%s/noshim" % how, "t_driver", ["alloc", how, "8MiB"], shim=False,
                      expect={"a_shim": 0, "a_domains": -1}))
        C.append(Case("resolve/%s/emulated" % how, "t_driver", ["alloc", how, "8MiB"], "emulated.policy",
                      expect=dict(split_emul, plain_after_free=0)))
        C.append(Case("resolve/%s/native" % how, "t_driver", ["alloc", how, "8MiB"], "native.policy", env=native,
                      expect=split_native, checks=[report_check(check_native_report)]))
    C.append(Case("resolve/link/mismatch", "t_driver", ["alloc", "link", "8MiB"], "native.policy",
                  env=dict(native, LDSHIM_STATE="mismatch"),
                  expect={"a_shim": 1, "a_domains": "1,0", "a_expect": "1,0"}))
    C.append(Case("resolve/link/memory-state", "t_driver", ["alloc", "link", "8MiB"], "native.policy",
                  env=dict(native, LDSHIM_STATE="memory"), expect=split_native))
    # api = runtime | driver: cudart's requests are "runtime", direct driver calls "driver".
    C.append(Case("resolve/api/driver-vs-runtime-rule", "t_driver", ["alloc", "link", "8MiB"], "api.policy",
                  expect={"a_shim": 0}))
    C.append(Case("resolve/api/driver-rule", "t_driver", ["alloc", "link", "16MiB"], "api.policy",
                  expect={"a_shim": 1, "a_rule": "drv_only"}))
    # What cuGetProcAddress hands out counts as "runtime" (cudart's path; a program calling it
    # directly cannot be told apart from static cudart).
    C.append(Case("resolve/api/gpa-counts-as-runtime", "t_driver", ["alloc", "gpa13000", "8MiB"], "api.policy",
                  expect={"a_shim": 1, "a_rule": "rt_only"}))
    for prog in ("t_runtime", "t_runtime_static"):
        C.append(Case("resolve/api/%s-rule" % prog, prog, ["alloc", "8MiB"], "api.policy",
                      expect={"a_shim": 1, "a_rule": "rt_only"}))
        C.append(Case("resolve/api/%s-vs-driver-rule" % prog, prog, ["alloc", "16MiB"], "api.policy",
                      expect={"a_shim": 0}))
    C.append(Case("resolve/link/range-rule", "t_driver", ["alloc", "link", "32MiB"], "native.policy", env=native,
                  expect=split_native))
    for prog in ("t_runtime", "t_runtime_static"):
        C.append(Case("resolve/%s/noshim" % prog, prog, ["alloc", "8MiB"], shim=False,
                      expect={"a_shim": 0, "attr_type": 2, "attr_device": 0}))
        C.append(Case("resolve/%s/emulated" % prog, prog, ["alloc", "8MiB"], "emulated.policy",
                      expect=dict(split_emul, attr_type=2, attr_device=0)))
        C.append(Case("resolve/%s/native" % prog, prog, ["alloc", "8MiB"], "native.policy", env=native,
                      expect=split_native))
        for how in ("default", "byversion"):
            C.append(Case("resolve/%s/entry-%s" % (prog, how), prog, ["entry", how, "8MiB"], "native.policy",
                          env=native, expect=split_native))

    # Placement variants and occurrences (rules.policy).
    C.append(Case("resolve/rules/domain-pin", "t_driver", ["seq", "12MiB", 1], "rules.policy", env=native,
                  expect={"s1_shim": 1, "s1_domains": 1, "s1_expect": 1, "s1_rule": "pinned"}))
    C.append(Case("resolve/rules/domain-pin-mismatch", "t_driver", ["seq", "12MiB", 1], "rules.policy",
                  env=dict(native, LDSHIM_STATE="mismatch"), expect={"s1_shim": 1, "s1_domains": 0}))
    C.append(Case("resolve/rules/occurrence", "t_driver", ["seq", "10MiB", 4], "rules.policy", env=native,
                  expect={"s1_shim": 0, "s2_shim": 1, "s2_domains": "0,1", "s3_shim": 0, "s4_shim": 1,
                          "s4_rule": "occ"}))
    C.append(Case("resolve/rules/placement-stock", "t_driver", ["seq", "14MiB", 1], "rules.policy", env=native,
                  expect={"s1_shim": 0, "s1_domains": -1}))

    def below_min_split(r):
        t = rule_of(r, "tiny")
        if t["matched"] != 1 or t["allocations"] != 0:
            raise Fail("rule tiny: matched %d allocations %d, expected 1 0" % (t["matched"], t["allocations"]))
    C.append(Case("resolve/rules/below-min-split", "t_driver", ["seq", "2MiB", 1], "rules.policy", env=native,
                  expect={"s1_shim": 0, "s1_domains": -1}, checks=[report_check(below_min_split)]))

    # untagged/: untagged sizes and per-thread variants pass through untouched.
    pt = {"u_shim": 0, "u_domains": -1, "ptds_sym": "cuMemcpyHtoD_v2_ptds", "ptds_lib": "libcuda.so.1",
          "ptds_same_as_dlsym": 1, "ptds_dtoh_sym": "cuMemcpyDtoH_v2_ptds"}
    C.append(Case("untagged/passthru/noshim", "t_driver", ["passthru", "1MiB"], shim=False, expect=pt))
    C.append(Case("untagged/passthru", "t_driver", ["passthru", "1MiB"], "emulated.policy", expect=pt))
    C.append(Case("untagged/passthru-6MiB", "t_driver", ["passthru", "6MiB"], "emulated.policy", expect=pt))

    # pointers/: interior pointers, free of base / interior, the seam.
    rng = {"r_shim": 1, "free_interior": 1, "free_seam": 1, "free_base": 0, "range_after_free": 500}
    C.append(Case("pointers/range/noshim", "t_driver", ["range", "8MiB"], shim=False,
                  expect=dict(rng, r_shim=0)))
    C.append(Case("pointers/range/emulated", "t_driver", ["range", "8MiB"], "emulated.policy", expect=rng))
    C.append(Case("pointers/range/native-32MiB", "t_driver", ["range", "32MiB"], "native.policy", env=native, expect=rng))
    for prog in ("t_runtime", "t_runtime_static"):
        C.append(Case("pointers/%s/free" % prog, prog, ["free", "8MiB"], "emulated.policy",
                      expect={"f_shim": 1, "free_interior": 1, "free_base": 0}))

    # free/: a shim free synchronizes like cudaFree.
    C.append(Case("free/sync", "t_driver", ["sync", "8MiB"], "emulated.policy", expect={"shim": 1},
                  checks=[out_at_least("syncs", 1)]))
    C.append(Case("free/sync-cudaFree", "t_runtime", ["alloc", "8MiB"], "emulated.policy", expect={"a_shim": 1},
                  checks=[out_at_least("free_syncs", 1)]))

    # ipc/: legacy IPC refused on shim memory with a message naming the rule.
    ipc_rule = stderr_matches(r"^ldshim: warning: interpose: cuIpcGetMemHandle\(0x[0-9a-f]+\): memory placed by rule 'weights' ")
    C.append(Case("ipc/noshim", "t_driver", ["ipc", "8MiB", "1MiB"], shim=False,
                  expect={"t_shim": 0, "ipc_tagged": 0, "ipc_untagged": 0}))
    C.append(Case("ipc/driver", "t_driver", ["ipc", "8MiB", "1MiB"], "emulated.policy",
                  expect={"t_shim": 1, "ipc_tagged": 1, "ipc_untagged": 0}, checks=[ipc_rule]))
    for prog in ("t_runtime", "t_runtime_static"):
        C.append(Case("ipc/%s" % prog, prog, ["ipc", "8MiB", "1MiB"], "emulated.policy",
                      expect={"t_shim": 1, "ipc_tagged": 1, "ipc_untagged": 0}, checks=[ipc_rule]))

    # failure/: failure injection: the app still gets memory; OOM only when stock would see it.
    for fail in ("cuMemCreate:1", "cuMemCreate:2", "cuMemCreate:1+", "cuMemMap:1", "cuMemMap:2",
                 "cuMemSetAccess:1", "cuMemSetAccess:1+", "cuMemAddressReserve:1"):
        C.append(Case("failure/inject/" + fail, "t_driver", ["inject", "8MiB"], "nopool.policy",
                      env={"FAKE_CUDA_FAIL": fail},
                      expect={"rc": 0, "i_shim": 0, "i_domains": -1, "free": 0},
                      checks=[report_check(check_fallback_report)]))
    for prog, args in (("t_driver", ["oom", "8MiB"]), ("t_runtime", ["oom", "8MiB"])):
        lim = {"FAKE_CUDA_MEM_LIMIT": 6 * MiB}
        C.append(Case("failure/oom/%s/noshim" % prog, prog, args, shim=False, env=lim, expect={"rc": 2}))
        C.append(Case("failure/oom/%s" % prog, prog, args, "nopool.policy", env=lim, expect={"rc": 2}))

    # Pooled physical memory never costs the app memory: on OOM the pool is trimmed and the
    # request retried (an untagged request, and a tagged one of another slice size).
    def trimmed(r):
        report_shape(r)
        if r["pool"]["trims"] < 1:
            raise Fail("pool trims %d after an OOM with a full pool" % r["pool"]["trims"])
    for u in ("4MiB", "16MiB"):
        lim = {"FAKE_CUDA_MEM_LIMIT": 20 * MiB if u == "16MiB" else 10 * MiB}
        C.append(Case("failure/pool-trim/%s/noshim" % u, "t_driver", ["trim", "8MiB", u], shim=False, env=lim,
                      expect={"t_shim": 0, "rc": 0}))
        C.append(Case("failure/pool-trim/%s" % u, "t_driver", ["trim", "8MiB", u], "emulated.policy", env=lim,
                      expect={"t_shim": 1, "rc": 0}, checks=[report_check(trimmed)]))

    # The pool also gives way to allocation APIs the shim does not place (cuMemCreate here).
    lim = {"FAKE_CUDA_MEM_LIMIT": 12 * MiB}
    C.append(Case("failure/pool-trim/cuMemCreate/noshim", "t_driver", ["trimcreate", "8MiB", "8MiB"], shim=False,
                  env=lim, expect={"t_shim": 0, "rc": 0}))
    C.append(Case("failure/pool-trim/cuMemCreate", "t_driver", ["trimcreate", "8MiB", "8MiB"], "emulated.policy",
                  env=lim, expect={"t_shim": 1, "rc": 0}, checks=[report_check(trimmed)]))

    # Pointer attributes answer the whole range (the driver alone answers one slice).
    C.append(Case("pointers/ptrattr", "t_driver", ["ptrattr", "8MiB"], "emulated.policy",
                  expect={"attr_start_ok": 1, "attr_size_ok": 1, "attrs_ok": 1}))
    C.append(Case("pointers/ptrattr/untagged", "t_driver", ["ptrattr", "1MiB"], "emulated.policy",
                  expect={"attr_start_ok": 1, "attr_size_ok": 1, "attrs_ok": 1}))

    # A destroyed context takes its tagged ranges (live and pooled) with it.
    C.append(Case("pointers/ctxdestroy", "t_driver", ["ctxdestroy", "8MiB"], "emulated.policy",
                  expect={"live_shim": 1, "after_destroy_shim": 0, "after_destroy_handles": 0,
                          "after_destroy_mappings": 0}))

    # stock/: stock state: identical to no shim, silent.
    for prog in ("t_driver", "t_runtime", "t_runtime_static"):
        base = Case("stock/named/%s/noshim" % prog, prog, ["stock", "8MiB", "1MiB"], shim=False)
        C.append(Case("stock/named/%s" % prog, prog, ["stock", "8MiB", "1MiB"], "emulated.policy",
                      env={"LDSHIM_STATE": "stock"}, quiet=True,
                      checks=[lambda r, res, b=base: same_as_noshim(r, res, b)]))
    C.append(Case("stock/no-policy", "t_driver", ["stock", "8MiB", "1MiB"], None, quiet=True,
                  checks=[lambda r, res: same_as_noshim(
                      r, res, Case("", "t_driver", ["stock", "8MiB", "1MiB"], shim=False))]))

    # memory/threads: threads.
    C.append(Case("memory/threads", "t_driver", ["threads", 16, a.stress_iters, "4MiB", "1MiB"], "emulated.policy",
                  env={"T_EXPECT_TAGGED": 1}, expect={"cycles": 16 * a.stress_iters},
                  timeout=600 if a.san else 120))

    # memory/fork: fork after first use.
    C.append(Case("memory/fork", "t_driver", ["fork", "8MiB"], "emulated.policy",
                  expect={"parent_shim": 1, "child_shim": 1, "child_status": 0},
                  checks=[stderr_only(r"^ldshim: warning: probe: ")]))

    # bad-policy/: bad policies.
    C.append(Case("bad-policy/bad-syntax", "t_driver", ["alloc", "link", "8MiB"], "bad_syntax.policy",
                  expect={"a_shim": 0, "a_domains": -1},
                  checks=[ldshim_lines(1, r"^ldshim: error: policy: \S+:\d+:\d+: "),
                          stderr_matches(r"^ldshim: error: policy: \S*bad_syntax\.policy:5:1[34]: \S")]))
    C.append(Case("bad-policy/strict", "t_driver", ["alloc", "link", "8MiB"], "strict_bad.policy", rc=3,
                  zero_counts=False,
                  checks=[stderr_matches(r"^ldshim: error: policy: \S*strict_bad\.policy:6:\d+: \S"),
                          no_stdout]))
    C.append(Case("bad-policy/missing", "t_driver", ["alloc", "link", "8MiB"], "/nonexistent/ldshim-test.policy",
                  expect={"a_shim": 0, "a_domains": -1},
                  checks=[ldshim_lines(1, r"^ldshim: error: policy: \S+:\d+:\d+: "),
                          stderr_matches(r"^ldshim: error: policy: /nonexistent/ldshim-test\.policy:0:0: ")]))

    # report/: the report.
    C.append(Case("report/written", "t_driver", ["reuse", "8MiB", 3], "emulated.policy",
                  checks=[report_check(check_reuse_report)]))

    # A wrapper that never touches CUDA (here a shell that outlives the program) must not
    # replace the program's report with an empty one.
    C.append(Case("report/written/wrapper", "t_driver", ["reuse", "8MiB", 3], "emulated.policy",
                  wrap=["/bin/sh", "-c", '"$0" "$@"; status=$?; exit $status'],
                  checks=[report_check(check_reuse_report)]))

    for prog, args, api in (("t_driver", ["alloc", "link", "8MiB"], "driver"),
                            ("t_runtime", ["alloc", "8MiB"], "runtime"),
                            ("t_runtime_static", ["alloc", "8MiB"], "runtime")):
        C.append(Case("report/discover/%s" % prog, prog, args, "discover.policy", expect={"a_shim": 0},
                      checks=[report_check(lambda r, api=api: check_discover_report(r, api))]))

    # memory/twodev: two devices, peer access.
    two = {"FAKE_CUDA_DEVICES": 2}
    C.append(Case("memory/twodev/noshim", "t_driver", ["twodev", "8MiB"], shim=False, env=two,
                  expect={"d1_shim": 0, "d1_device": 1, "enable_peer": 0, "access_after_dev0": 3}))
    C.append(Case("memory/twodev", "t_driver", ["twodev", "8MiB"], "emulated.policy", env=two,
                  expect={"d1_shim": 1, "d1_device": "1,1", "info_device": 1, "access_before_dev1": 3,
                          "access_before_dev0": 0,
                          "enable_peer": 0, "access_after_dev0": 3, "access_after_dev0_last": 3}))
    C.append(Case("memory/twodev/native", "t_driver", ["twodev", "8MiB"], "native.policy",
                  env=dict(two, FAKE_CUDA_DOMAINS=2),
                  expect={"d1_shim": 1, "d1_device": "1,1", "d1_domains": "0,1", "info_device": 1,
                          "enable_peer": 0, "access_after_dev0": 3}))

    # Publication of the topology symbol into a loaded module (probe falls back on the fake).
    C.append(Case("publish/module/noshim", "t_driver", ["publish"], shim=False,
                  expect={"magic_ok": 0, "lib_magic_ok": 0, "bad_image": 200}))
    C.append(Case("publish/module", "t_driver", ["publish"], "emulated.policy",
                  expect={"magic_ok": 1, "lib_magic_ok": 1, "num_sms": 132, "bad_image": 200}))
    # 96 modules and 96 libraries, 32 of each unloaded, 32 libraries loaded again: the
    # shim's table of recorded modules (keyed by kind and handle) follows every unload, so
    # device 1's map reaches exactly the 96 libraries still loaded and no unloaded handle is
    # asked for the symbol (the debug log names each attempt).
    many = dict(two, LDSHIM_LOG="debug")
    C.append(Case("publish/many/noshim", "t_driver", ["publishmany", 96], shim=False, env=many,
                  expect={"published_at_load": 0, "libs_live": 96, "libs_mapped": 0, "mods_live": 64,
                          "mods_mapped": 0}))
    C.append(Case("publish/many", "t_driver", ["publishmany", 96], "emulated.policy", env=many,
                  expect={"published_at_load": 2 * 96 + 32, "libs_live": 96, "libs_mapped": 96, "mods_live": 64,
                          "mods_mapped": 0},
                  checks=[ldshim_lines(96, r"published device 1 map into library "),
                          ldshim_lines(0, r": no ldshim_topology ")]))
    return C + extra_cases(a)


def extra_cases(a):
    """Cases of the topic files beside this one (cases_<topic>.py), each of which defines
    cases(a) and builds them from this module's helpers (`from run_cases import ...`)."""
    here = os.path.dirname(os.path.abspath(__file__))
    # The topic files import this module by name: let them find the running one, so that
    # Case and Fail are the classes main() knows.
    sys.modules.setdefault("run_cases", sys.modules[__name__])
    if here not in sys.path:
        sys.path.insert(0, here)
    C = []
    for path in sorted(glob.glob(os.path.join(here, "cases_*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        C += importlib.import_module(name).cases(a)
    return C


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--preload", default="build/libldshim.so", help="LD_PRELOAD value for shim cases")
    ap.add_argument("--result", help="file to write '<passed> <failed>' to")
    ap.add_argument("--stress-iters", type=int, default=10000)
    ap.add_argument("--san", action="store_true", help="sanitizer build: longer timeouts")
    ap.add_argument("--only-noshim", action="store_true", help="only the cases without the shim")
    ap.add_argument("--filter", help="regex on case names")
    a = ap.parse_args()

    here = os.path.dirname(os.path.abspath(__file__))
    runner = Runner(a.build, a.preload, os.path.join(here, "policies"))
    mps = tempfile.mkdtemp(prefix="ldshim-fake-mps-")
    with open(os.path.join(mps, "fakecuda-devices"), "w") as f:
        f.write("3\n")
    passed = failed = 0
    t0 = time.time()
    try:
        all_cases = cases(a)
        # A name says what its case checks: an area, then the program or variant (see the
        # docstring); two cases never share one.
        names = [c.name for c in all_cases]
        dup = sorted({n for n in names if names.count(n) > 1})
        terse = sorted(n for n in names if len(n.split("/")[0]) < 3)
        if dup or terse:
            print("FAIL case names: %s" % "; ".join(["duplicated: " + ", ".join(dup)] * bool(dup) +
                                                 ["no area named: " + ", ".join(terse[:5])] * bool(terse)))
            failed += 1
        for c in all_cases:
            if a.only_noshim and c.shim:
                continue
            if a.filter and not re.search(a.filter, c.name):
                continue
            c.env = {k: (mps if v == "@MPS" else v) for k, v in c.env.items()}
            try:
                verify(runner, c)
                print("ok %s" % c.name)
                passed += 1
            except Fail as e:
                print("FAIL %s: %s" % (c.name, e))
                failed += 1
            sys.stdout.flush()
    finally:
        shutil.rmtree(mps, ignore_errors=True)
    print("test-fake: %d passed, %d failed (%.1f s)" % (passed, failed, time.time() - t0))
    if a.result:
        with open(a.result, "w") as f:
            f.write("%d %d\n" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
