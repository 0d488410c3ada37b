"""CPU tests of tools/ldshim-ab against tests/ab/fake_prog.py (deterministic figures per
state, injected failures and timeouts). Needs AB_TEST_SHIM: any real shared object to
preload (the suite builds an empty one); without it the tests build one with $CC/cc."""

import csv
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
TOOL = os.path.join(ROOT, "tools", "ldshim-ab")
FAKE = os.path.join(HERE, "fake_prog.py")
STATES = ["stock", "memory", "full", "mismatch"]


def load_tool():
    loader = importlib.machinery.SourceFileLoader("ldshim_ab", TOOL)
    spec = importlib.util.spec_from_loader("ldshim_ab", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


ab = load_tool()
_SHIM = None


def shim_path():
    """A real, empty shared object to preload."""
    global _SHIM
    if _SHIM is None:
        _SHIM = os.environ.get("AB_TEST_SHIM")
        if not _SHIM or not os.path.isfile(_SHIM):
            d = tempfile.mkdtemp(prefix="ab-null-")
            _SHIM = os.path.join(d, "libabnull.so")
            cc = os.environ.get("CC", "cc")
            subprocess.check_call([cc, "-shared", "-fPIC", "-o", _SHIM,
                                   os.path.join(HERE, "null.c")])
    return _SHIM


class ToolCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ab-test-")
        self.out = os.path.join(self.tmp, "out")
        self.log = os.path.join(self.tmp, "runs.log")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def ab(self, *opts, env=None, cmd=None, shim=True, timeout=120):
        """Run the tool; returns CompletedProcess with text output."""
        args = [sys.executable, TOOL]
        if shim:
            args += ["--shim", shim_path()]
        args += list(opts) + ["--"] + (cmd if cmd is not None else [FAKE])
        e = dict(os.environ)
        e["FAKE_LOG"] = self.log
        for k in [k for k in e if k.startswith("FAKE_") and k != "FAKE_LOG"]:
            del e[k]
        e.update(env or {})
        return subprocess.run(args, env=e, capture_output=True, text=True, timeout=timeout)

    def ab_metric(self, *opts, env=None, **kw):
        return self.ab("--out", self.out, "--metric", r"decode: ([0-9.]+) ms/step",
                       "--lower-is-better", "--unit", "ms/step", *opts, env=env, **kw)

    def logged(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return [ln.split(" ", 2) for ln in f.read().splitlines()]

    def summary(self):
        with open(os.path.join(self.out, "summary.json")) as f:
            s = json.load(f)
        return s, {r["state"]: r for r in s["rows"]}


class TestStatistics(unittest.TestCase):
    """The statistics functions on their own."""

    def test_quantile_and_iqr(self):
        self.assertEqual(ab.quantile([1, 2, 3, 4, 5], 0.5), 3)
        self.assertAlmostEqual(ab.quantile([1, 2, 3, 4], 0.25), 1.75)
        self.assertAlmostEqual(ab.iqr([1, 2, 3, 4, 5]), 2.0)
        self.assertEqual(ab.iqr([7.0]), 0.0)

    def test_speedup_orientation(self):
        self.assertAlmostEqual(ab.speedup(10.0, 8.0, higher_is_better=False), 1.25)
        self.assertAlmostEqual(ab.speedup(100.0, 125.0, higher_is_better=True), 1.25)
        self.assertAlmostEqual(ab.speedup(10.0, 12.5, higher_is_better=False), 0.8)

    def test_bootstrap_deterministic_data_contains_true_ratio(self):
        import random
        lo, hi = ab.bootstrap_ratio_ci([10.0] * 5, [8.0] * 5, False, 500, 0.05,
                                       random.Random(3))
        self.assertLessEqual(lo, 1.25 + 1e-12)
        self.assertGreaterEqual(hi, 1.25 - 1e-12)

    def test_bootstrap_noisy_interval_brackets_ratio(self):
        import random
        base = [10.0, 10.4, 9.6, 10.2, 9.8, 10.1, 9.9]
        fast = [x * 0.8 for x in base]
        lo, hi = ab.bootstrap_ratio_ci(base, fast, False, 2000, 0.05, random.Random(1))
        self.assertTrue(lo <= 1.25 <= hi, (lo, hi))
        self.assertGreater(lo, 1.0)

    def test_verdict(self):
        self.assertEqual(ab.verdict(1.01, 1.2), "faster")
        self.assertEqual(ab.verdict(0.8, 0.99), "slower")
        self.assertEqual(ab.verdict(0.98, 1.02), "within noise")
        self.assertEqual(ab.verdict(1.0, 1.0), "within noise")

    def test_schedule_abba_two_states(self):
        s = ab.make_schedule(["a", "b"], 3, 1, "abba", 1)
        self.assertEqual([(x["state"], x["warmup"]) for x in s],
                         [("a", True), ("b", True), ("a", False), ("b", False),
                          ("b", False), ("a", False), ("a", False), ("b", False)])

    def test_schedule_random_is_seeded_permutation_per_round(self):
        s1 = ab.make_schedule(STATES, 6, 0, "random", 42)
        s2 = ab.make_schedule(STATES, 6, 0, "random", 42)
        s3 = ab.make_schedule(STATES, 6, 0, "random", 43)
        self.assertEqual(s1, s2)
        self.assertNotEqual(s1, s3)
        for r in range(6):
            self.assertEqual(sorted(x["state"] for x in s1[4 * r:4 * r + 4]), sorted(STATES))


class TestOrdering(ToolCase):
    def test_abba_exact_with_warmups(self):
        r = self.ab_metric("--runs", "3", "--warmup", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        got = [(s, k) for s, k, _ in self.logged()]
        A, B, C, D = STATES
        want = [(A, "w1"), (B, "w1"), (C, "w1"), (D, "w1"),
                (A, "r1"), (B, "r1"), (C, "r1"), (D, "r1"),
                (D, "r2"), (C, "r2"), (B, "r2"), (A, "r2"),
                (A, "r3"), (B, "r3"), (C, "r3"), (D, "r3")]
        self.assertEqual(got, want)
        # progress lines: one per run, in the documented form
        prog = [ln for ln in r.stderr.splitlines() if ln.startswith("[")]
        self.assertEqual(len(prog), 16)
        self.assertRegex(prog[9], r"^\[10/16\] full     run 2/3 +10\.000 ms/step  \(exit 0\)$")

    def test_blocked(self):
        r = self.ab_metric("--runs", "2", "--warmup", "1", "--order", "blocked",
                           "--states", "stock,full")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([(s, k) for s, k, _ in self.logged()],
                         [("stock", "w1"), ("stock", "r1"), ("stock", "r2"),
                          ("full", "w1"), ("full", "r1"), ("full", "r2")])

    def test_random_order_deterministic_given_seed(self):
        orders = []
        for i in range(2):
            os.path.exists(self.log) and os.unlink(self.log)
            r = self.ab("--out", os.path.join(self.tmp, "o%d" % i), "--runs", "3",
                        "--warmup", "0", "--order", "random", "--seed", "7")
            self.assertEqual(r.returncode, 0, r.stderr)
            orders.append([(s, k) for s, k, _ in self.logged()])
        self.assertEqual(orders[0], orders[1])
        self.assertEqual(len(orders[0]), 12)


class TestVerdicts(ToolCase):
    DESIGN = {"FAKE_VALUES": "stock=10,10.4,9.6,10.2,9.8;memory=10.1,9.7,10.3,9.9,10.0;"
                             "full=8.0,8.3,7.8,8.1,7.9;mismatch=12.5,12.5,12.5,12.5,12.5"}

    def test_designed_inputs(self):
        r = self.ab_metric("--runs", "5", env=self.DESIGN)
        self.assertEqual(r.returncode, 0, r.stderr)
        s, rows = self.summary()
        self.assertEqual(rows["stock"]["verdict"], "baseline")
        self.assertEqual(rows["memory"]["verdict"], "within noise")
        self.assertEqual(rows["full"]["verdict"], "faster")
        self.assertEqual(rows["mismatch"]["verdict"], "slower")
        self.assertAlmostEqual(rows["stock"]["median"], 10.0)
        self.assertAlmostEqual(rows["full"]["median"], 8.0)
        self.assertAlmostEqual(rows["full"]["speedup"], 1.25)
        self.assertAlmostEqual(rows["mismatch"]["speedup"], 0.8)
        # spread is the IQR of the five figures
        self.assertAlmostEqual(rows["stock"]["iqr"], 10.2 - 9.8)
        self.assertEqual(s["spread"], "iqr")
        # the interval contains the true (median) ratio
        for st in ("memory", "full", "mismatch"):
            self.assertLessEqual(rows[st]["ci_low"], rows[st]["speedup"] + 1e-12)
            self.assertGreaterEqual(rows[st]["ci_high"], rows[st]["speedup"] - 1e-12)
        self.assertLess(rows["mismatch"]["ci_high"], 1.0)
        self.assertGreater(rows["full"]["ci_low"], 1.0)
        self.assertTrue(rows["memory"]["ci_low"] <= 1.0 <= rows["memory"]["ci_high"])
        # the printed table says the same
        table = {ln.split()[0]: ln for ln in r.stdout.splitlines() if ln.split()
                 and ln.split()[0] in STATES}
        self.assertIn("within noise", table["memory"])
        self.assertIn("faster", table["full"])
        self.assertIn("slower", table["mismatch"])
        self.assertIn("1.250", table["full"])

    def test_higher_is_better(self):
        r = self.ab("--out", self.out, "--states", "stock,full", "--runs", "3",
                    "--metric", r"([0-9.]+) tok/s", "--higher-is-better",
                    env={"FAKE_VALUES": "stock=10;full=8"})
        self.assertEqual(r.returncode, 0, r.stderr)
        _, rows = self.summary()
        self.assertAlmostEqual(rows["stock"]["median"], 100.0)
        self.assertAlmostEqual(rows["full"]["speedup"], 1.25)
        # deterministic data on both sides: a degenerate interval at the true ratio
        self.assertAlmostEqual(rows["full"]["ci_low"], 1.25)
        self.assertAlmostEqual(rows["full"]["ci_high"], 1.25)
        self.assertEqual(rows["full"]["verdict"], "faster")

    def test_wall_time_default_metric(self):
        r = self.ab("--out", self.out, "--states", "stock,full", "--runs", "3",
                    env={"FAKE_SLEEP": "stock=0.01;full=1.0"})
        self.assertEqual(r.returncode, 0, r.stderr)
        s, rows = self.summary()
        self.assertEqual(s["metric"], "wall_s")
        self.assertFalse(s["higher_is_better"])
        self.assertGreater(rows["full"]["median"], 1.0)
        self.assertLess(rows["full"]["speedup"], 1.0)
        self.assertEqual(rows["full"]["verdict"], "slower")

    def test_warmups_discarded(self):
        r = self.ab_metric("--runs", "3", "--warmup", "2", "--states", "stock,full",
                           env={"FAKE_VALUES": "stock=10;full=8", "FAKE_WARMUP": "1000"})
        self.assertEqual(r.returncode, 0, r.stderr)
        _, rows = self.summary()
        self.assertEqual(rows["stock"]["figures"], [10.0, 10.0, 10.0])
        self.assertEqual(rows["full"]["figures"], [8.0, 8.0, 8.0])
        with open(os.path.join(self.out, "runs.json")) as f:
            runs = json.load(f)
        warm = [x for x in runs if x["warmup"]]
        self.assertEqual(len(warm), 4)
        self.assertTrue(all(x["figure"] == 1000.0 for x in warm))
        self.assertEqual(len(self.logged()), 10)

    def test_too_few_runs_gives_no_verdict(self):
        r = self.ab_metric("--runs", "2", "--states", "stock,full",
                           env={"FAKE_VALUES": "stock=10;full=5"})
        self.assertEqual(r.returncode, 0, r.stderr)
        _, rows = self.summary()
        self.assertAlmostEqual(rows["full"]["speedup"], 2.0)
        self.assertEqual(rows["full"]["verdict"], "too few runs")
        self.assertIsNone(rows["full"]["ci_low"])

    def test_seed_makes_results_identical(self):
        env = dict(self.DESIGN)
        outs = []
        for i in range(2):
            r = self.ab("--out", os.path.join(self.tmp, "o%d" % i), "--runs", "5",
                        "--order", "random", "--seed", "11", "--metric",
                        r"decode: ([0-9.]+)", "--lower-is-better", env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(self.tmp, "o%d" % i, "summary.json")) as f:
                outs.append(json.load(f)["rows"])
        self.assertEqual(outs[0], outs[1])


class TestFailures(ToolCase):
    def test_failures_excluded_and_reported(self):
        env = {"FAKE_VALUES": "stock=10;memory=10;full=8;mismatch=12",
               "FAKE_FAIL": "full:r2:exit,memory:r1:timeout,stock:r3:nometric,"
                            "mismatch:r4:segv"}
        r = self.ab_metric("--runs", "4", "--timeout", "4", env=env)
        self.assertEqual(r.returncode, 1, r.stderr)
        s, rows = self.summary()
        self.assertEqual((rows["full"]["ok"], rows["full"]["failed"]), (3, 1))
        self.assertEqual((rows["memory"]["ok"], rows["memory"]["failed"]), (3, 1))
        self.assertEqual((rows["stock"]["ok"], rows["stock"]["failed"]), (3, 1))
        self.assertEqual((rows["mismatch"]["ok"], rows["mismatch"]["failed"]), (3, 1))
        self.assertEqual(rows["full"]["figures"], [8.0, 8.0, 8.0])
        self.assertEqual(rows["full"]["verdict"], "faster")
        with open(os.path.join(self.out, "runs.json")) as f:
            runs = {x["name"].split("-", 1)[1]: x for x in json.load(f)}
        self.assertEqual(runs["full-r2"]["exit_code"], 3)
        self.assertEqual(runs["mismatch-r1"]["exit_code"], 0)
        self.assertEqual(runs["mismatch-r4"]["exit_code"], -11)
        self.assertEqual(runs["mismatch-r4"]["status"], "killed by SIGSEGV")
        self.assertEqual(runs["full-r2"]["status"], "exit 3")
        self.assertIn("fake: injected failure in", runs["full-r2"]["stderr_tail"][-2])
        self.assertIsNone(runs["memory-r1"]["exit_code"])
        self.assertTrue(runs["memory-r1"]["status"].startswith("timeout"))
        self.assertEqual(runs["stock-r3"]["status"], "metric not found")
        self.assertEqual(runs["stock-r3"]["exit_code"], 0)
        # every run happened despite the failures (1 warm-up + 4 runs) x 4 states
        self.assertEqual(len(self.logged()), 20)
        # reported on stderr while running and in the closing list on stdout
        self.assertRegex(r.stderr, r"full +run 2/4 +FAILED  \(exit 3\)")
        self.assertIn("| fake: last words of", r.stderr)
        self.assertIn("failed runs (excluded from the statistics)", r.stdout)
        self.assertRegex(r.stdout, r"-full-r2: exit 3\n +\| fake: starting")
        self.assertRegex(r.stdout, r"-memory-r1: timeout after 4s")

    def test_state_with_no_good_runs(self):
        r = self.ab_metric("--runs", "3", env={"FAKE_FAIL": "mismatch:*:exit"})
        self.assertEqual(r.returncode, 1)
        _, rows = self.summary()
        self.assertEqual(rows["mismatch"]["ok"], 0)
        self.assertEqual(rows["mismatch"]["verdict"], "no successful runs")
        self.assertRegex(r.stdout, r"mismatch +0/3 .*no successful runs")
        self.assertEqual(rows["full"]["verdict"], "within noise")

    def test_metric_never_matches(self):
        r = self.ab("--out", self.out, "--runs", "2", "--states", "stock,full",
                    "--metric", r"throughput: ([0-9.]+)", "--higher-is-better")
        self.assertEqual(r.returncode, 1)
        self.assertIn("matched in none of the 6 runs", r.stdout)
        _, rows = self.summary()
        self.assertEqual(rows["full"]["verdict"], "no successful runs")

    def test_report_state_mismatch_warned(self):
        r = self.ab_metric("--runs", "1", "--warmup", "0", "--states", "stock,full",
                           env={"FAKE_REPORT_STATE": "full=stock"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("runs asked for state 'full' but the shim reported 'stock'", r.stdout)


class TestReports(ToolCase):
    HIST = {"FAKE_HIST": "2097152x40,939524096x6,262144000x2,33554432x4,512x900"}

    def test_discover(self):
        r = self.ab("--out", self.out, "--discover", env=self.HIST)
        self.assertEqual(r.returncode, 0, r.stderr)
        # state full: the shim's stock state passes through and fills no histogram
        self.assertEqual([(s, k) for s, k, _ in self.logged()], [("full", "discover")])
        lines = r.stdout.splitlines()
        rows = [ln.split() for ln in lines if ln.strip() and ln.split()[0].isdigit()]
        # largest total bytes first: 896 MiB x 6, 250 MiB x 2, 32 MiB x 4, 2 MiB x 40, 512 B
        self.assertEqual([int(x[0]) for x in rows],
                         [939524096, 262144000, 33554432, 2097152, 512])
        self.assertIn("size      = 896MiB      # 6 allocation(s)", r.stdout)
        self.assertIn("placement = split", r.stdout)
        self.assertNotIn("size      = 512", r.stdout)   # below min_split: not suggested
        reps = os.listdir(os.path.join(self.out, "reports"))
        self.assertEqual(len(reps), 1)
        self.assertRegex(reps[0], r"^discover\.\d+\.json$")

    def test_reports_of_wrapper_processes_are_merged(self):
        """A child process that also loaded the shim writes its own <run>.<pid>.json."""
        env = dict(self.HIST, FAKE_SPAWN_CHILD="1", FAKE_TAGGED="full=6")
        r = self.ab_metric("--runs", "1", "--warmup", "0", "--states", "stock,full",
                           env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.out, "runs.json")) as f:
            runs = {x["state"]: x for x in json.load(f)}
        self.assertEqual(len(runs["full"]["reports"]), 2)
        self.assertEqual(runs["full"]["tagged_allocs"], 12)
        r = self.ab("--out", os.path.join(self.tmp, "d"), "--discover", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("2 process report(s)", r.stdout)
        self.assertIn("size      = 896MiB      # 12 allocation(s)", r.stdout)

    def test_histogram_of_existing_report(self):
        rep = os.path.join(self.tmp, "r.json")
        with open(rep, "w") as f:
            json.dump({"untagged": {"histogram": [{"size": 939524096, "api": "runtime",
                                                   "count": 6}]}}, f)
        r = subprocess.run([sys.executable, TOOL, "--histogram", rep], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("896MiB", r.stdout)
        r = subprocess.run([sys.executable, TOOL, "--histogram", self.log], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot read a JSON report", r.stderr)

    def test_policy_that_tags_nothing_is_flagged(self):
        pol = os.path.join(self.tmp, "p.policy")
        with open(pol, "w") as f:
            f.write("[rule x]\nsize = 1GiB\n")
        r = self.ab_metric("--runs", "1", "--warmup", "0", "--policy", pol,
                           env={"FAKE_TAGGED": "full=6"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("in state 'memory' the policy tagged no allocation", r.stdout)
        self.assertIn("in state 'mismatch' the policy tagged no allocation", r.stdout)
        self.assertNotIn("in state 'full' the policy", r.stdout)
        self.assertNotIn("in state 'stock' the policy", r.stdout)
        self.assertIn("full: backend fake, 6 tagged", r.stdout)
        _, rows = self.summary()
        self.assertEqual(rows["full"]["tagged_allocs"], 6)
        self.assertEqual(rows["memory"]["tagged_allocs"], 0)
        self.assertEqual(rows["full"]["backends"], ["fake"])

    def test_policy_error_reported(self):
        r = self.ab_metric("--runs", "1", "--warmup", "0", "--states", "stock,full",
                           env={"FAKE_POLICY_ERROR": "p.policy:3:1: expected a key",
                                "FAKE_REPORT_STATE": "full=stock"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("the shim rejected the policy: p.policy:3:1: expected a key", r.stdout)
        self.assertIn("! policy error: p.policy:3:1", r.stderr)


class TestRealShim(ToolCase):
    """The real build/libldshim.so over the project's fake CUDA (tests/fake): the report
    format, tagged counts per state and the per-process merge, end to end."""

    def setUp(self):
        super().setUp()
        build = os.path.join(ROOT, "build")
        self.shim = os.environ.get("AB_REAL_SHIM") or os.path.join(build, "libldshim.so")
        self.fake = os.environ.get("AB_FAKE_DIR") or os.path.join(build, "fake")
        self.prog = os.path.join(self.fake, "t_runtime")
        for f in (self.shim, self.prog, os.path.join(self.fake, "libcuda.so.1")):
            self.assertTrue(os.path.isfile(f), "%s missing: run make test-ab" % f)
        # A SAN=1 shim needs the sanitizer runtimes first in LD_PRELOAD.
        self.common = ["--shim", self.shim, "--env", "LD_LIBRARY_PATH=" + self.fake,
                       "--preload-prefix", os.environ.get("AB_PRELOAD_PREFIX", ""),
                       "--env", "LDSHIM_CACHE_DIR=" + os.path.join(self.tmp, "cache")]

    def test_tagged_counts_per_state(self):
        pol = os.path.join(self.tmp, "e.policy")
        with open(pol, "w") as f:
            f.write("backend = emulated\n[rule w]\nsize = 8MiB\nplacement = split\n")
        r = self.ab("--out", self.out, "--runs", "1", "--warmup", "0", "--policy", pol,
                    *self.common, shim=False, cmd=[self.prog, "alloc", "8MiB"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        _, rows = self.summary()
        self.assertEqual(rows["stock"]["tagged_allocs"], 0)
        self.assertEqual(rows["stock"]["backends"], ["off"])
        for st in ("memory", "full", "mismatch"):
            self.assertEqual(rows[st]["tagged_allocs"], 1, st)
            self.assertEqual(rows[st]["backends"], ["emulated"], st)
        self.assertNotIn("warning", r.stdout)

    def test_discover_histogram_across_processes(self):
        script = "%s alloc 8MiB && %s alloc 12MiB && %s alloc 12MiB" % ((self.prog,) * 3)
        r = self.ab("--out", self.out, "--discover", *self.common, shim=False,
                    cmd=["/bin/sh", "-c", script])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        rows = [ln.split() for ln in r.stdout.splitlines() if ln.split()
                and ln.split()[0].isdigit()]
        self.assertEqual([(int(x[0]), int(x[2])) for x in rows],
                         [(12582912, 2), (8388608, 1)])
        self.assertIn("size      = 12MiB      # 2 allocation(s)", r.stdout)


class TestFilesAndEnv(ToolCase):
    def test_files_written_and_parseable(self):
        r = self.ab_metric("--runs", "2", env={"FAKE_VALUES": "stock=10;full=8"})
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.out, "runs.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual(len(rows), 12)
        for col in ("state", "run", "position", "env", "exit_code", "figure", "wall_s",
                    "command", "stderr_tail", "warmup"):
            self.assertIn(col, rows[0])
        self.assertEqual([int(x["position"]) for x in rows], list(range(1, 13)))
        self.assertEqual(rows[4]["state"], "stock")
        self.assertEqual(float(rows[4]["figure"]), 10.0)
        self.assertEqual(json.loads(rows[4]["env"])["LDSHIM_STATE"], "stock")
        self.assertIn("fake_prog.py", rows[0]["command"])
        with open(os.path.join(self.out, "runs.json")) as f:
            runs = json.load(f)
        self.assertEqual(len(runs), 12)
        s, srows = self.summary()
        self.assertEqual(s["states"], STATES)
        self.assertEqual(s["baseline"], "stock")
        ET.parse(os.path.join(self.out, "plot.svg"))
        png = os.path.join(self.out, "plot.png")
        try:
            import matplotlib  # noqa: F401
            with open(png, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        except ImportError:
            self.assertFalse(os.path.exists(png))
            self.assertIn("plot.png skipped (matplotlib not importable)", r.stderr)
        # one report per run, where LDSHIM_REPORT pointed
        self.assertEqual(len(os.listdir(os.path.join(self.out, "reports"))), 12)

    def test_environment_of_each_run(self):
        pol = os.path.join(self.tmp, "p.policy")
        with open(pol, "w") as f:
            f.write("backend = emulated\n")
        env = {"LD_PRELOAD": shim_path()}   # an existing preload stays, after the shim
        r = self.ab_metric("--runs", "1", "--warmup", "0", "--states", "full",
                           "--policy", pol, "--env", "FOO=bar=baz", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.out, "runs.json")) as f:
            run = json.load(f)[0]
        delta = run["env"]
        self.assertEqual(delta["LD_PRELOAD"], shim_path() + ":" + shim_path())
        self.assertEqual(delta["LDSHIM_STATE"], "full")
        self.assertEqual(delta["LDSHIM_POLICY"], os.path.abspath(pol))
        self.assertEqual(delta["FOO"], "bar=baz")
        self.assertEqual(os.path.dirname(delta["LDSHIM_REPORT"]),
                         os.path.join(self.out, "reports"))
        self.assertEqual(self.logged()[0][2], shim_path() + ":" + shim_path())

    def test_quiet_and_command_options_after_dashdash(self):
        r = self.ab("--out", self.out, "--runs", "1", "--warmup", "0", "--states", "stock",
                    "--quiet", cmd=[FAKE, "--runs", "7"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotRegex(r.stderr, r"(?m)^\[")
        with open(os.path.join(self.out, "runs.json")) as f:
            self.assertEqual(json.load(f)[0]["command"], [FAKE, "--runs", "7"])

    def test_no_preload(self):
        r = self.ab_metric("--runs", "1", "--warmup", "0", "--states", "stock",
                           "--no-preload", shim=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.logged()[0][2] if len(self.logged()[0]) > 2 else "", "")


class TestUsageErrors(ToolCase):
    def bad(self, *opts, cmd=None, shim=True, expect):
        r = self.ab(*opts, cmd=cmd, shim=shim)
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith("ldshim-ab: "), lines[0])
        self.assertIn(expect, lines[0])
        self.assertEqual(self.logged(), [])   # nothing ran
        return lines[0]

    def test_help(self):
        r = subprocess.run([sys.executable, TOOL, "--help"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0)
        for opt in ("--states", "--runs", "--warmup", "--policy", "--shim", "--metric",
                    "--higher-is-better", "--order", "--seed", "--out", "--timeout",
                    "--env", "--bootstrap", "--alpha", "--quiet"):
            self.assertIn(opt, r.stdout)

    def test_no_command(self):
        self.bad("--out", self.out, cmd=[], expect="no command given")

    def test_command_not_found(self):
        self.bad("--out", self.out, cmd=["no-such-program-xyz"],
                 expect="command not found in PATH: no-such-program-xyz")
        self.bad("--out", self.out, cmd=["./nope/prog"], expect="command not found: ./nope/prog")

    def test_command_not_executable(self):
        p = os.path.join(self.tmp, "plain.txt")
        open(p, "w").close()
        os.chmod(p, 0o644)
        self.bad("--out", self.out, cmd=[p], expect="command is not executable")

    def test_bad_regex(self):
        self.bad("--out", self.out, "--metric", "([0-9", "--lower-is-better",
                 expect="bad --metric regex")

    def test_regex_without_group(self):
        self.bad("--out", self.out, "--metric", "decode: [0-9.]+", "--lower-is-better",
                 expect="exactly one capture group (it has 0)")
        self.bad("--out", self.out, "--metric", "(a)(b)", "--lower-is-better",
                 expect="(it has 2)")

    def test_regex_needs_direction(self):
        self.bad("--out", self.out, "--metric", "x ([0-9]+)",
                 expect="--higher-is-better or --lower-is-better")

    def test_zero_runs(self):
        self.bad("--out", self.out, "--runs", "0", expect="--runs must be at least 1")

    def test_unknown_state(self):
        self.bad("--out", self.out, "--states", "stock,fast", expect="unknown state 'fast'")

    def test_unwritable_out(self):
        f = os.path.join(self.tmp, "afile")
        open(f, "w").close()
        self.bad("--out", os.path.join(f, "sub"), expect="cannot write to output directory")

    def test_missing_shim_and_policy(self):
        self.bad("--out", self.out, "--shim", os.path.join(self.tmp, "none.so"), shim=False,
                 expect="shim not found")
        self.bad("--out", self.out, "--policy", os.path.join(self.tmp, "none.policy"),
                 expect="cannot read policy file")

    def test_out_dir_with_old_results(self):
        r = self.ab_metric("--runs", "1", "--warmup", "0", "--states", "stock")
        self.assertEqual(r.returncode, 0, r.stderr)
        os.unlink(self.log)
        self.bad("--out", self.out, expect="already holds results")

    def test_bad_env(self):
        self.bad("--out", self.out, "--env", "NOEQUALS", expect="bad --env 'NOEQUALS'")


if __name__ == "__main__":
    unittest.main()
