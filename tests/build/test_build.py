#!/usr/bin/env python3
"""test_build.py RESULT_FILE — the build's own contract (Makefile, tests/tests.mk), checked with
`make -n` and make's database, building nothing:
  - `make` (the default target) builds the product — both libraries, the tools, the MLOPart
    helper, the man pages — and no program of TEST_TARGETS, LAB_TEST_TARGETS or BENCH_TARGETS,
    nothing under tests/ or bench/;
  - every suite is registered in tests/tests.mk and nowhere else, once, with a description and
    a rule;
  - `make help` names every public phony target (every one but the few internal ones below).
$MAKE names make (default: make). Writes "<passed> <failed>" to RESULT_FILE; exit 1 when a check
failed."""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAKE = os.environ.get("MAKE") or "make"
# Phony targets that are steps of others, not commands for people.
INTERNAL = {"FORCE", "real-all", "test-gpu-run", "shimgpu-progs", "probe-gpu-build", "test-pkg-gpu-standin",
            "test-pkg-gpu-standin-fails"}
PRODUCT = ["libldshim.so", "libldmoe.so", "bin/ldshim-policy", "bin/ldshim-probe", "bin/ldshim-ab",
           "ldshim-mlopart-helper", "man/ldshim-ab.1", "man/ldshim-policy.1", "man/ldshim-probe.1"]
PASSED = FAILED = 0


def check(ok, name, detail=""):
    global PASSED, FAILED
    PASSED, FAILED = PASSED + bool(ok), FAILED + (not ok)
    print("%s %s%s" % ("PASS" if ok else "FAIL", name, (": " + detail) if detail and not ok else ""), flush=True)


def make(*args):
    env = dict(os.environ)
    for k in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        env.pop(k, None)
    return subprocess.run([MAKE, "--no-print-directory", "-C", ROOT] + list(args), capture_output=True, text=True,
                          env=env, timeout=300)


build = tempfile.mkdtemp(prefix="ldshim-test-build-")
try:
    # The database of a fresh build directory: variables as make sees them after every fragment.
    db = make("-pn", "BUILD=" + build, "help").stdout
    var = {}
    for m in re.finditer(r"^(\w+) :?= ?(.*)$", db, re.M):
        var[m.group(1)] = m.group(2).split()
    phony = set()
    for m in re.finditer(r"^\.PHONY: (.*)$", db, re.M):
        phony.update(m.group(1).split())
    rules = set(re.findall(r"^([A-Za-z0-9_./-]+):(?!=)", db, re.M))

    # 1. `make` builds the product and nothing else
    r = make("-n", "BUILD=" + build)
    check(r.returncode == 0, "make -n (default target) succeeds", r.stderr[-300:])
    cmds = r.stdout
    for p in PRODUCT:
        check(os.path.join(build, p) in cmds, "make builds %s" % p)
    others = [t for k in ("TEST_TARGETS", "LAB_TEST_TARGETS", "BENCH_TARGETS") for t in var.get(k, [])]
    check(len(others) > 20, "TEST_TARGETS, LAB_TEST_TARGETS and BENCH_TARGETS are known (%d)" % len(others))
    built = [t for t in others if re.search(r"(?:-o|>)\s*%s(?:\.\S*)?(?:\s|$)" % re.escape(t), cmds)]
    check(not built, "make builds no test, lab or bench program", ", ".join(built[:5]))
    srcs = sorted(set(re.findall(r"(?<![\w/])((?:tests|bench)/[\w./-]+)", cmds)))
    check(not srcs, "make reads nothing under tests/ or bench/", ", ".join(srcs[:5]))
    check(not set(var.get("ALL_TARGETS", [])) & set(others), "no program is both product and test or bench",
          ", ".join(sorted(set(var.get("ALL_TARGETS", [])) & set(others))[:5]))

    # 2. suites: registered in tests/tests.mk only, once, described, with a rule
    reg = {}
    for d, dirs, names in os.walk(ROOT):
        dirs[:] = [x for x in dirs if not x.startswith((".", "build")) and x != "results"]
        for n in names:
            if n.endswith(".mk") or n == "Makefile":
                p = os.path.join(d, n)
                with open(p) as f:
                    for m in re.finditer(r"^\s*((?:LAB_|GPU_)?TEST_SUITES)\s*\+?=\s*(.*)$", f.read(), re.M):
                        reg.setdefault(os.path.relpath(p, ROOT), []).append(m.group(0))
    elsewhere = sorted(p for p in reg if p != "tests/tests.mk")
    check(not elsewhere, "suites are registered in tests/tests.mk only",
          "move the lines of %s there" % ", ".join(elsewhere))
    lines = reg.get("tests/tests.mk", [])
    names = [re.match(r"\s*\w+\s*\+=\s*(\S+)", l).group(1) for l in lines if "+=" in l]
    check(len(names) >= 40, "tests/tests.mk registers the suites (%d)" % len(names))
    dup = sorted({n for n in names if names.count(n) > 1})
    check(not dup, "each suite is registered once", ", ".join(dup))
    bare = [l.strip() for l in lines if "+=" in l and not re.search(r"#\s*\S", l)]
    check(not bare, "each registered suite has a description", "; ".join(bare[:3]))
    norule = [n for n in names if n not in rules]
    check(not norule, "each registered suite has a rule", ", ".join(norule))
    notphony = [n for n in names if n not in phony]
    check(not notphony, "each registered suite is phony", ", ".join(notphony))
    known = set(var.get("TEST_SUITES", []) + var.get("LAB_TEST_SUITES", []) + var.get("GPU_TEST_SUITES", []))
    check(set(names) >= known and known >= set(names) - {"test-pkg-install", "test-pkg-python", "test-pkg-gpu-skip",
                                                            "test-docs"},
          "make sees the suites tests/tests.mk registers", str(sorted(set(names) ^ known)))

    # 3. make help names every public target
    h = make("help", "BUILD=" + build)
    check(h.returncode == 0, "make help succeeds", h.stderr[-300:])
    listed = set(re.findall(r"^  (\S+)", h.stdout, re.M))
    missing = sorted(phony - INTERNAL - listed)
    check(not missing, "make help lists every public phony target",
          "add a '#: TARGET  what it does' line for " + ", ".join(missing))
    stale = sorted(listed - phony)
    check(not stale, "make help lists only targets that exist", ", ".join(stale))
    long_lines = [l for l in h.stdout.splitlines() if len(l) > 140]
    check(not long_lines, "make help's lines are one line each, under 140 columns", long_lines[0] if long_lines else "")
finally:
    subprocess.run(["rm", "-rf", build])

with open(sys.argv[1], "w") if len(sys.argv) > 1 else open(os.devnull, "w") as f:
    f.write("%d %d\n" % (PASSED, FAILED))
print("test-build: %d passed, %d failed" % (PASSED, FAILED))
sys.exit(1 if FAILED else 0)
