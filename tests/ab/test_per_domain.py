"""CPU tests of bench/apps/per_domain.py (one process per locality domain) against
fake_instance.py, and of serve.py's barrier that lets the instances' timed phases overlap."""

import csv
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
from contextlib import redirect_stderr

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
TOOL = os.path.join(ROOT, "bench", "ab", "per_domain.py")
SERVE = os.path.join(ROOT, "bench", "apps", "serve.py")
FAKE = [sys.executable, "-S", os.path.join(HERE, "fake_instance.py")]
RATES = "stock:1=100;stock:2=50;full-ld:2=60;compute-only:2=55"


class Case(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="per-domain-test-")
        self.out = os.path.join(self.tmp, "out")
        self.log = os.path.join(self.tmp, "env.log")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_tool(self, *opts, env=None, cmd=None, shim=True):
        e = dict(os.environ, FAKE_RATE=RATES, FAKE_LOG=self.log)
        e.update(env or {})
        argv = [sys.executable, TOOL]
        if shim and os.environ.get("AB_TEST_SHIM"):
            argv += ["--shim", os.environ["AB_TEST_SHIM"]]
        else:
            argv += ["--no-preload"]
        argv += list(opts) + ["--"] + (cmd or FAKE)
        return subprocess.run(argv, env=e, capture_output=True, text=True, timeout=120)

    def rows(self):
        with open(os.path.join(self.out, "runs.csv")) as f:
            return list(csv.DictReader(f))

    def summary(self):
        with open(os.path.join(self.out, "summary.json")) as f:
            return {r["config"]: r for r in json.load(f)["rows"]}


class TestRuns(Case):
    def test_dry_run_alternates_the_order(self):
        r = self.run_tool("--dry-run", "--runs", "2", "--warmup", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        got = [ln.split()[:4] for ln in r.stdout.splitlines()]
        self.assertEqual(got, [
            ["1", "one", "warmup", "1"], ["2", "unbound", "warmup", "1"], ["3", "bound", "warmup", "1"],
            ["4", "bound", "run", "1"], ["5", "unbound", "run", "1"], ["6", "one", "run", "1"],
            ["7", "one", "run", "2"], ["8", "unbound", "run", "2"], ["9", "bound", "run", "2"]])
        self.assertFalse(os.path.exists(self.out))

    def test_bound_pair_against_unbound_and_one(self):
        r = self.run_tool("--runs", "4", "--warmup", "1", "--out", self.out)
        self.assertEqual(r.returncode, 0, r.stderr)
        s = self.summary()
        self.assertEqual(s["one"]["median"], 100.0)
        self.assertEqual(s["unbound"]["median"], 100.0)     # 2 x 50: the sum of the instances
        self.assertEqual(s["bound"]["median"], 120.0)
        self.assertEqual(s["bound"]["per_instance"], [60.0, 60.0])
        self.assertEqual(s["bound"]["sm_counts"], [66, 66])
        self.assertEqual(s["unbound"]["sm_counts"], [132, 132])
        self.assertEqual(s["bound"]["verdict"], "faster")
        self.assertAlmostEqual(s["bound"]["speedup"], 1.2)
        self.assertEqual(s["unbound"]["verdict"], "baseline")
        self.assertEqual(s["one"]["verdict"], "within noise")
        self.assertIn("splitting the work by domain pays here", r.stdout)
        self.assertIn("one instance already saturates the GPU", r.stdout)
        self.assertNotIn("warning", r.stdout)
        # one row per instance and run; warm-ups recorded but marked
        rows = self.rows()
        self.assertEqual(len(rows), (4 + 1) * (1 + 2 + 2))
        self.assertTrue(all(x["barrier_met"] == "1" for x in rows), rows)
        bound = [x for x in rows if x["config"] == "bound"]
        self.assertEqual(sorted({(x["instance"], x["state"], x["domain"]) for x in bound}),
                         [("0", "full-ld", "0"), ("1", "full-ld", "1")])
        self.assertTrue(all(x["bytes_per_domain"] == ("1073741824" if x["domain"] == "0"
                                                      else "0/1073741824") for x in bound), bound)
        self.assertTrue(all(x["state"] == "stock" and x["domain"] == ""
                            for x in rows if x["config"] != "bound"))

    def test_environment_of_each_instance(self):
        r = self.run_tool("--runs", "1", "--warmup", "0", "--out", self.out,
                          "--policy", os.path.join(ROOT, "policy", "examples", "serve.policy"))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.log) as f:
            lines = sorted(f.read().splitlines())
        shim = os.environ.get("AB_TEST_SHIM")
        want = ["full-ld 0 2", "full-ld 1 2", "stock None 1", "stock None 2", "stock None 2"]
        self.assertEqual([" ".join(ln.split()[:3]) for ln in lines], want)
        if shim:
            self.assertTrue(all(ln.split()[3].startswith(os.path.abspath(shim)) for ln in lines))

    def test_compute_only_bound_state(self):
        r = self.run_tool("--runs", "4", "--warmup", "0", "--out", self.out,
                          "--bound-state", "compute-only")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertAlmostEqual(self.summary()["bound"]["speedup"], 1.1)
        self.assertIn("bound = compute-only", r.stdout)

    def test_the_instances_run_at_once(self):
        # Each pair instance waits at the barrier until the other arrives: with a short
        # barrier timeout, instances started one after the other would miss it.
        r = self.run_tool("--runs", "1", "--warmup", "0", "--out", self.out,
                          "--barrier-timeout", "20")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(all(x["barrier_met"] == "1" for x in self.rows()))

    def test_program_that_ignores_the_barrier(self):
        r = self.run_tool("--runs", "1", "--warmup", "0", "--out", self.out,
                          env={"FAKE_NO_BARRIER": "1"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("did not all reach LDSHIM_AB_BARRIER", r.stdout)
        self.assertIn("(barrier not met)", r.stderr)

    def test_failed_instance_fails_its_run(self):
        r = self.run_tool("--runs", "4", "--warmup", "0", "--out", self.out,
                          env={"FAKE_FAIL": "1"})
        self.assertEqual(r.returncode, 1)
        s = self.summary()
        self.assertEqual(s["bound"]["ok"], 0)
        self.assertEqual(s["bound"]["verdict"], "no successful runs")
        self.assertEqual(s["one"]["ok"], 4)
        self.assertIn("instance 1: exit 3", r.stdout)
        self.assertIn("| fake_instance: injected failure", r.stdout)

    def test_timeout_kills_the_instances(self):
        r = self.run_tool("--runs", "1", "--warmup", "0", "--out", self.out, "--timeout", "2",
                          "--barrier-timeout", "60", cmd=FAKE, env={"FAKE_RATE": RATES})
        self.assertEqual(r.returncode, 0, r.stderr)    # they meet: nothing times out
        r = self.run_tool("--runs", "1", "--warmup", "0", "--out", self.out, "--force",
                          "--timeout", "1", cmd=[sys.executable, "-c", "import time; time.sleep(30)"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("timeout after 1s", r.stdout)


class TestUsage(Case):
    def bad(self, *opts, cmd=None, expect):
        r = self.run_tool(*opts, cmd=cmd)
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith("per_domain.py: "), lines[0])
        self.assertIn(expect, lines[0])
        self.assertFalse(os.path.exists(self.log))     # nothing ran

    def test_errors(self):
        self.bad("--instances", "1", expect="--instances must be at least 2")
        self.bad("--instances", "9", expect="at most 8 locality domains")
        self.bad("--runs", "0", expect="--runs must be at least 1")
        self.bad("--metric", "tok/s", expect="exactly one capture group")
        self.bad("--metric", "(", expect="bad --metric regex")
        self.bad("--policy", "/nonexistent.policy", expect="policy not found")
        self.bad("--env", "NOEQUALS", expect="--env expects K=V")
        self.bad(cmd=["/nonexistent/prog"], expect="command not found")
        r = self.run_tool("--dry-run")
        self.assertEqual(r.returncode, 0)

    def test_no_command(self):
        r = subprocess.run([sys.executable, TOOL, "--no-preload"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no command given", r.stderr)

    def test_out_with_results_needs_force(self):
        r = self.run_tool("--runs", "1", "--warmup", "0", "--out", self.out)
        self.assertEqual(r.returncode, 0, r.stderr)
        os.remove(self.log)
        self.bad("--out", self.out, expect="holds results of an earlier run")
        r = self.run_tool("--runs", "1", "--warmup", "0", "--out", self.out, "--force")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(self.rows()), 5)

    def test_force_deletes_only_its_own_files(self):
        r = self.run_tool("--runs", "1", "--warmup", "0", "--out", self.out)
        self.assertEqual(r.returncode, 0, r.stderr)
        mine = sorted(os.listdir(os.path.join(self.out, "logs")))
        self.assertEqual(len(mine), 10)                      # 5 instances x out, err
        for sub in ("logs", "reports"):
            with open(os.path.join(self.out, sub, "notes.txt"), "w") as f:
                f.write("the user's")
        # With a warm-up round every run has another name: none of the old files is rewritten.
        r = self.run_tool("--runs", "1", "--warmup", "1", "--out", self.out, "--force")
        self.assertEqual(r.returncode, 0, r.stderr)
        for sub in ("logs", "reports"):
            self.assertTrue(os.path.exists(os.path.join(self.out, sub, "notes.txt")), sub)
        logs = set(os.listdir(os.path.join(self.out, "logs")))
        self.assertFalse(logs & set(mine))                   # the old run's files are gone
        self.assertEqual(len(logs - {"notes.txt"}), 2 * 2 * (1 + 2 + 2))

    def test_sigterm_writes_what_finished_and_exits_143(self):
        e = dict(os.environ, FAKE_RATE=RATES, FAKE_LOG=self.log)
        argv = [sys.executable, TOOL, "--no-preload", "--runs", "50", "--warmup", "0",
                "--out", self.out, "--", sys.executable, "-c", "import time; time.sleep(0.3); "
                "print('decode: 1.0 ms/step  100.0 tok/s')"]
        p = subprocess.Popen(argv, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        import time
        time.sleep(2.5)
        p.terminate()
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 143, err)
        s = self.summary()
        self.assertGreater(s["one"]["runs"] + s["unbound"]["runs"] + s["bound"]["runs"], 0)
        self.assertIn("results: ", out)

    def test_sharing_note(self):
        r = self.run_tool("--runs", "1", "--warmup", "0", "--out", self.out,
                          env={"CUDA_MPS_PIPE_DIRECTORY": os.path.join(self.tmp, "no-mps")})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("note: no MPS daemon: the GPU time-slices", r.stdout)
        mps = os.path.join(self.tmp, "mps")
        os.makedirs(mps)
        open(os.path.join(mps, "control"), "w").close()
        r = self.run_tool("--runs", "1", "--warmup", "0", "--out", self.out, "--force",
                          env={"CUDA_MPS_PIPE_DIRECTORY": mps})
        self.assertIn("note: an MPS daemon is running", r.stdout)

    def test_help(self):
        r = subprocess.run([sys.executable, TOOL, "--help"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0)
        self.assertIn("LDSHIM_AB_BARRIER", r.stdout)


class TestServeBarrier(unittest.TestCase):
    """serve.py's side of the barrier, without torch (the function is plain Python)."""

    @classmethod
    def setUpClass(cls):
        spec = importlib.util.spec_from_file_location("serve_barrier", SERVE)
        cls.serve = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cls.serve)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="barrier-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_alone_passes_at_once(self):
        self.assertTrue(self.serve.meet_barrier("%s:1" % self.dir))
        self.assertEqual(os.listdir(self.dir), [str(os.getpid())])

    def test_waits_for_the_others(self):
        t = threading.Timer(0.2, lambda: open(os.path.join(self.dir, "other"), "w").close())
        t.start()
        try:
            self.assertTrue(self.serve.meet_barrier("%s:2:10" % self.dir))
        finally:
            t.join()

    def test_times_out_with_a_warning(self):
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertFalse(self.serve.meet_barrier("%s:2:0.05" % self.dir))
        self.assertIn("1 of 2 processes after 0.05s; going on", err.getvalue())

    def test_bad_spec(self):
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertFalse(self.serve.meet_barrier("nocount"))
            self.assertFalse(self.serve.meet_barrier("/nonexistent/dir:2"))
        self.assertIn("expected DIR:N[:SECONDS]", err.getvalue())
        self.assertIn("not waiting", err.getvalue())


if __name__ == "__main__":
    unittest.main()
