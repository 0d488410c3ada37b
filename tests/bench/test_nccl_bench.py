#!/usr/bin/env python3
"""CPU tests of bench/nccl/: nccl_bench.py (options, rank environments, the NCCL log parser,
result checks), sweep.py and run.sh.

    python3 tests/bench/test_nccl_bench.py [RESULT_FILE]

PyTorch is not needed: without it the tests that start ranks check that they get as far as
the clear "PyTorch is not installed" error (and ldshim-ab's record of those failed runs). With
it (NCCL_TEST_PYTHON=/path/to/python-with-torch, else SERVE_TEST_PYTHON, else this python if it
imports torch) they run 2 gloo ranks on the CPU: a tiny sweep with NCCL's log lines injected
from testdata/ (the parser end to end), a result spoiled on purpose (the run must fail), and
run.sh's CPU_DRY_RUN through ldshim-ab with the suite's empty stand-in shim (AB_TEST_SHIM,
built by `make test-ab`). Writes "<passed> <failed>" to RESULT_FILE (a skipped test counts
as failed)."""

import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
NCCL = os.path.join(ROOT, "bench", "nccl")
BENCH = os.path.join(NCCL, "nccl_bench.py")
SWEEP = os.path.join(NCCL, "sweep.py")
RUN_SH = os.path.join(NCCL, "run.sh")
POLICY = os.path.join(NCCL, "nccl.policy")
SAMPLE = os.path.join(HERE, "testdata", "nccl-info-sample.txt")
TINY = ["--backend", "gloo", "--device", "cpu", "--sizes", "64KiB..256KiB", "--factor", "4",
        "--warmup", "1", "--iters", "3", "--summary", "allreduce:64KiB"]


def load_bench():
    spec = importlib.util.spec_from_file_location("nccl_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


B = load_bench()


def clean_env(**extra):
    """This environment without what would change the runs (a domain, NCCL settings, the
    test hooks), plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NCCL", "LDSHIM_")) and k != "LD_PRELOAD"}
    env.update(extra)
    return env


_TORCH = {}


def torch_python():
    """A python that can import torch, or None (looked up once)."""
    if "py" not in _TORCH:
        _TORCH["py"] = None
        for cand in (os.environ.get("NCCL_TEST_PYTHON"), os.environ.get("SERVE_TEST_PYTHON"),
                     sys.executable):
            if cand and subprocess.run([cand, "-c", "import torch"], capture_output=True,
                                       cwd="/").returncode == 0:
                _TORCH["py"] = cand
                break
        sys.stderr.write("test-bench-nccl: %s\n" % (
            "ranks run with %s" % _TORCH["py"] if _TORCH["py"] else
            "no python with torch (set NCCL_TEST_PYTHON): the rank tests check the "
            "no-torch error instead"))
    return _TORCH["py"]


def run_bench(args, env=None, py=None, timeout=240):
    return subprocess.run([py or sys.executable, BENCH] + list(args), capture_output=True,
                          text=True, env=env or clean_env(), timeout=timeout, cwd=ROOT)


class TestOptions(unittest.TestCase):
    def test_help(self):
        r = run_bench(["--help"])
        self.assertEqual(r.returncode, 0, r.stderr)
        for opt in ("--ranks", "--backend", "--device", "--collectives", "--sizes", "--factor",
                    "--warmup", "--iters", "--summary", "--rank-domains", "--log-dir", "--json",
                    "--timeout", "--dry-run"):
            self.assertIn(opt, r.stdout)
        self.assertNotIn("--worker-rank", r.stdout)

    def test_argument_errors(self):
        cases = [
            (["--ranks", "0"], "--ranks must be 1..64 (got 0)"),
            (["--device", "cpu"], "--backend nccl needs --device cuda"),
            (["--collectives", "allreduce,broadcast"], "--collectives allreduce,broadcast: "
                                                       "expected a comma list of allreduce, "
                                                       "allgather"),
            (["--sizes", "1MiB..64KiB"], "the range must run from a positive size up"),
            (["--sizes", "64KiB..1MiB", "--factor", "1"], "--factor must be 2 or more"),
            (["--sizes", "6"], "size 6 B is not a positive multiple of 4 B"),
            (["--sizes", "1MB"], "bad size '1MB'"),
            (["--iters", "0"], "--iters must be at least 1"),
            (["--warmup", "-1"], "--warmup must be 0 or more"),
            (["--timeout", "0"], "--timeout must be positive"),
            (["--summary", "allreduce:3MiB"], "--summary allreduce:3MiB: allreduce 3145728 B "
                                              "is not measured"),
            (["--summary", "broadcast:1MiB"], "expected COLLECTIVE:SIZE"),
            (["--collectives", "allgather"], "--summary allreduce:1MiB: allreduce 1048576 B is "
                                             "not measured"),
            (["--rank-domains", "0"], "--rank-domains 0 names 1 domains for 2 ranks"),
            (["--rank-domains", "9,0"], "expected same, alternate or a comma list of domain "
                                        "numbers 0..7"),
            (["--rank-domains", "sometimes"], "expected same, alternate"),
            (["--worker-rank", "5", "--worker-dir", "/tmp"], "--worker-rank is internal"),
        ]
        for args, msg in cases:
            r = run_bench(args)
            self.assertEqual(r.returncode, 2, (args, r.stdout, r.stderr))
            self.assertIn(msg, r.stderr, args)
            self.assertEqual(r.stdout, "", args)
        r = run_bench(["--rank-domains", "alternate"], env=clean_env(LDSHIM_DOMAIN="x"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("--rank-domains alternate: LDSHIM_DOMAIN=x in the environment is not a "
                      "domain number 0..7", r.stderr)

    def test_sizes(self):
        self.assertEqual(B.parse_sizes("64KiB..64MiB", 2),
                         [65536 << k for k in range(11)])
        self.assertEqual(B.parse_sizes("64KiB..64MiB", 4),
                         [65536, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20])
        self.assertEqual(B.parse_sizes("64KiB..100KiB", 2), [65536])     # B need not be hit
        self.assertEqual(B.parse_sizes("1MiB,64KiB,1048576", 2), [65536, 1 << 20])
        self.assertEqual(B.parse_size("512B"), 512)
        self.assertEqual(B.parse_size("2GiB"), 2 << 30)
        self.assertEqual(B.fmt_size(1 << 20), "1 MiB")
        self.assertEqual(B.fmt_size(1536), "1536 B")

    def test_busbw(self):
        # nccl-tests' factors: all-reduce 2(n-1)/n, all-gather (n-1) on each rank's bytes
        self.assertAlmostEqual(B.busbw_gbs("allreduce", 1 << 20, 10.0, 2), (1 << 20) / 10e-6 / 1e9)
        self.assertAlmostEqual(B.busbw_gbs("allreduce", 1000, 1.0, 4), 1000 * 1.5 / 1e-6 / 1e9)
        self.assertAlmostEqual(B.busbw_gbs("allgather", 1000, 1.0, 4), 3000 / 1e-6 / 1e9)
        self.assertEqual(B.busbw_gbs("allgather", 1000, 0.0, 4), 0.0)


class FakeGpu:
    """A stand-in for torch.cuda and torch.distributed with one stream: what is queued runs in
    order on a fake device clock. _sleep(c) takes c / 2000 us (2 GHz); a collective 7 us;
    events read the clock when the stream reaches them; the host's queueing takes no device
    time. The journal lists what was queued."""

    def __init__(self, op_us=7.0):
        self.clock_us, self.op_us, self.journal = 0.0, op_us, []
        gpu = self

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing
                self.t = None

            def record(self):
                self.t = gpu.clock_us
                gpu.journal.append("event")

            def elapsed_time(self, other):
                return (other.t - self.t) / 1e3          # ms, as torch answers

        class Cuda:
            pass
        self.cuda = Cuda()
        self.cuda.Event = Event
        self.cuda._sleep = self.sleep
        self.cuda.synchronize = lambda: self.journal.append("sync")
        self.barrier = lambda: self.journal.append("barrier")

    def sleep(self, cycles):
        self.journal.append("spin %d" % cycles)
        self.clock_us += cycles / 2000.0

    def op(self):
        self.journal.append("op")
        self.clock_us += self.op_us


class TestCudaTiming(unittest.TestCase):
    def test_spin_rate(self):
        g = FakeGpu()
        self.assertAlmostEqual(B.spin_rate(g), 2000.0)
        del g.cuda._sleep
        self.assertIsNone(B.spin_rate(g))

    def test_event_pair_per_iteration_behind_one_spin(self):
        g = FakeGpu()
        times = B.time_iterations(g, g, True, 2000.0, g.op, 5)
        self.assertEqual(times, [7.0] * 5)      # the op alone, not the spin
        # a barrier, a sync, one spin of 1000 + 50 us per iteration at 2000 cycles/us, then
        # start event, op, end event per iteration, then one sync
        self.assertEqual(g.journal, ["barrier", "sync", "spin %d" % (2000 * 1250)]
                         + ["event", "op", "event"] * 5 + ["sync"])
        g = FakeGpu()
        B.time_iterations(g, g, True, 2000.0, g.op, 100000)
        self.assertEqual(g.journal[2], "spin %d" % (2000 * 500000))     # capped at 0.5 s
        g = FakeGpu()
        self.assertEqual(B.time_iterations(g, g, True, None, g.op, 2), [7.0, 7.0])
        self.assertNotIn("spin", " ".join(g.journal))                    # no _sleep: no spin

    def test_cpu_timing(self):
        g = FakeGpu()
        times = B.time_iterations(None, g, False, None, g.op, 3)
        self.assertEqual(len(times), 3)
        self.assertEqual(g.journal, ["barrier", "op", "op", "op"])
        self.assertTrue(all(t >= 0.0 for t in times))


class TestRankEnvironment(unittest.TestCase):
    def cfg(self, **kw):
        c = dict(ranks=2, backend="nccl", domains=None)
        c.update(kw)
        return c

    def test_rank_domains(self):
        self.assertIsNone(B.rank_domains("same", 2, "1"))
        self.assertEqual(B.rank_domains("alternate", 2, None), [0, 1])
        self.assertEqual(B.rank_domains("alternate", 2, ""), [0, 1])
        self.assertEqual(B.rank_domains("alternate", 2, "1"), [1, 0])
        self.assertEqual(B.rank_domains("alternate", 4, "0"), [0, 1, 0, 1])
        self.assertEqual(B.rank_domains("1,1", 2, "0"), [1, 1])
        self.assertEqual(B.rank_domains("3", 1, None), [3])

    def test_rank_env(self):
        base = {"PATH": "/bin", "NCCL_DEBUG": "WARN", "LDSHIM_DOMAIN": "1"}
        e = B.rank_env(base, 1, self.cfg(domains=[0, 0]))
        self.assertEqual((e["RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"]), ("1", "1", "2"))
        self.assertEqual(e["NCCL_NVLS_ENABLE"], "0")
        self.assertEqual(e["NCCL_DEBUG"], "WARN")                 # the user's setting stays
        self.assertEqual(e["NCCL_DEBUG_SUBSYS"], "INIT,ENV,TUNING")
        self.assertEqual(e["LDSHIM_DOMAIN"], "0")                 # --rank-domains overrides
        self.assertEqual(base["LDSHIM_DOMAIN"], "1")              # the launcher's is untouched
        e = B.rank_env(dict(base, NCCL_NVLS_ENABLE="1"), 0, self.cfg())
        self.assertEqual(e["NCCL_NVLS_ENABLE"], "1")
        self.assertEqual(e["LDSHIM_DOMAIN"], "1")                 # same: inherited
        e = B.rank_env({"PATH": "/bin"}, 0, self.cfg(backend="gloo"))
        self.assertFalse([k for k in e if k.startswith("NCCL_")])
        self.assertNotIn("LDSHIM_DOMAIN", e)

    def test_dry_run_shows_each_rank(self):
        r = run_bench(["--dry-run", "--rank-domains", "alternate", "--ranks", "4"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ranks: rank 0 cuda:0 LDSHIM_DOMAIN=0, rank 1 cuda:1 LDSHIM_DOMAIN=1, "
                      "rank 2 cuda:2 LDSHIM_DOMAIN=0, rank 3 cuda:3 LDSHIM_DOMAIN=1 "
                      "(--rank-domains alternate)", r.stdout)
        self.assertRegex(r.stdout, r"(?m)^rank 3: RANK=3 WORLD_SIZE=4 LDSHIM_DOMAIN=1$")
        self.assertIn("env: NCCL_NVLS_ENABLE=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,"
                      "TUNING", r.stdout)
        r = run_bench(["--dry-run"], env=clean_env(LDSHIM_DOMAIN="1", NCCL_NVLS_ENABLE="1",
                                                   NCCL_ALGO="Ring"))
        self.assertIn("(--rank-domains same: LDSHIM_DOMAIN=1 inherited by every rank)", r.stdout)
        self.assertRegex(r.stdout, r"(?m)^rank 1: RANK=1 WORLD_SIZE=2 LDSHIM_DOMAIN=1$")
        self.assertIn("env: NCCL_NVLS_ENABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING "
                      "NCCL_ALGO=Ring", r.stdout)
        r = run_bench(["--dry-run", "--rank-domains", "alternate"],
                      env=clean_env(LDSHIM_DOMAIN="1"))
        self.assertRegex(r.stdout, r"(?m)^rank 0: RANK=0 WORLD_SIZE=2 LDSHIM_DOMAIN=1$")
        self.assertRegex(r.stdout, r"(?m)^rank 1: RANK=1 WORLD_SIZE=2 LDSHIM_DOMAIN=0$")
        r = run_bench(["--dry-run"])
        self.assertIn("LDSHIM_DOMAIN not set", r.stdout)
        self.assertRegex(r.stdout, r"(?m)^rank 0: RANK=0 WORLD_SIZE=2 LDSHIM_DOMAIN=\(unset\)$")

    def test_worker_argv(self):
        self.assertEqual(B.launcher_argv(["--log-dir", "d", "--ranks", "2", "--json=x",
                                          "--dry-run", "--json", "y", "--log-dir=e"]),
                         ["--ranks", "2"])


class TestNcclLog(unittest.TestCase):
    def sample(self, rank=0):
        with open(SAMPLE) as f:
            return f.read().replace("{rank}", str(rank))

    def test_sample(self):
        p = B.parse_nccl_log(self.sample(1))
        self.assertEqual(p["version"], "2.30.7+cuda13.2")
        self.assertEqual(p["device"], 1)
        self.assertEqual((p["comm_rank"], p["nranks"]), (1, 2))
        self.assertEqual(p["counts"], {"coll": 24, "collnet": 24, "nvls": 0, "p2p": 32,
                                       "p2p_per_peer": 32})
        self.assertEqual(p["rings"], 24)
        self.assertEqual(B.channels_of(p), 24)
        self.assertEqual(p["transports"], {"P2P/CUMEM/read": 2})   # the timestamped one too
        self.assertEqual(p["env"], {"NCCL_NVLS_ENABLE": "0"})
        self.assertEqual(B.tuning_choice(p, "allreduce", 65536), ("RING", "LL", 2, 3, 1))
        self.assertEqual(B.tuning_choice(p, "allreduce", 262144), ("RING", "LL128", 8, 1, 0))
        self.assertEqual(B.tuning_choice(p, "allgather", 65536), ("RING", "LL", 4, 1, 0))
        self.assertEqual(B.tuning_choice(p, "allgather", 262144), ("RING", "SIMPLE", 16, 1, 0))
        self.assertIsNone(B.tuning_choice(p, "allgather", 1 << 20))
        self.assertEqual(p["info_lines"], 22)     # the WARN line and comments are not INFO

    def test_formats_and_noise(self):
        text = "\n".join([
            "garbage NCCL INFO",
            "x:1:2 [0] NCCL INFO Channel 00/02 :    0   1   2   3",
            "x:1:2 [0] NCCL INFO Channel 01/02 :    0   1   2   3",
            "x:1:2 [0] NCCL INFO Channel 00/0 : 1[1] -> 2[2] [send] via NET/Socket/0",
            "x:1:2 [0] NCCL INFO Channel 00 : 2[6] -> 3[7] via SHM/direct/direct",
            "x:1:2 [0] NCCL INFO 1048576 Bytes -> Algo 1 proto 2 time 12.5",
            "x:1:2 [0] NCCL INFO ReduceScatter: 4096 Bytes -> Algo RING proto SIMPLE",
            "x:1:2 [0] NCCL INFO Channel 0x/02 :    0   1",
            "Python traceback: NCCL version of nothing",
        ])
        p = B.parse_nccl_log(text)
        self.assertEqual(p["rings"], 2)
        self.assertEqual(B.channels_of(p), 2)       # no counts line: the ring count
        self.assertEqual(p["counts"], {})
        # a counts line in another shape: what can be read is kept, nothing fails
        q = B.parse_nccl_log("x:1:2 [0] NCCL INFO 12 coll channels, 3 p2p channels, nonsense")
        self.assertEqual((q["counts"], B.channels_of(q)), ({"coll": 12, "p2p": 3}, 12))
        self.assertEqual(p["transports"], {"NET/Socket/0": 1, "SHM/direct/direct": 1})
        self.assertEqual(B.tuning_choice(p, "?", 1 << 20), ("1", "2", None, 1, 0))
        self.assertEqual(B.tuning_choice(p, "reducescatter", 4096), ("RING", "SIMPLE", None, 1,
                                                                      0))
        self.assertEqual(p["version"], "of")        # the first "NCCL version X" wins
        empty = B.parse_nccl_log("")
        self.assertEqual((empty["info_lines"], B.channels_of(empty)), (0, None))

    def test_split_log(self):
        kept, tuning = B.split_log(self.sample())
        self.assertFalse([ln for ln in kept if "Bytes -> Algo" in ln])
        self.assertIn("host-a:4242:4301 [0] NCCL INFO 24 coll channels, 24 collnet channels, "
                      "0 nvls channels, 32 p2p channels, 32 p2p channels per peer", kept)
        self.assertEqual(tuning["AllReduce: 65536 Bytes -> Algo RING proto LL "
                                "channel{Lo..Hi}={0..1}"], 2)
        self.assertEqual(tuning["AllGather: 65536 Bytes -> Algo RING proto LL "
                                "channel{Lo..Hi}={0..3}"], 1)
        self.assertEqual(sum(tuning.values()), 6)


class TestPolicyAndScript(unittest.TestCase):
    def test_policy_parses_and_tags_pytorch_segments(self):
        cli = os.environ.get("LDSHIM_POLICY_CLI") or os.path.join(ROOT, "build", "bin",
                                                                  "ldshim-policy")
        self.assertTrue(os.access(cli, os.X_OK), "%s missing: run make" % cli)
        r = subprocess.run([cli, "check", POLICY], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for size, api, want in [(2 << 20, "runtime", "rule tensors"),
                                (20 << 20, "runtime", "rule tensors"),
                                (128 << 20, "runtime", "rule tensors"),
                                (1 << 20, "runtime", "untagged"),
                                (2 << 30, "runtime", "untagged"),
                                (4 << 20, "driver", "untagged")]:
            r = subprocess.run([cli, "match", POLICY, str(size), api], capture_output=True,
                               text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(r.stdout.startswith(want), (size, api, r.stdout))
        with open(POLICY) as f:
            self.assertNotRegex(f.read(), r"(?m)^state\s*=")

    def run_sh(self, env, args=()):
        return subprocess.run(["sh", RUN_SH] + list(args), capture_output=True, text=True,
                              env=env, timeout=300)

    def test_run_sh_help_and_bad_settings(self):
        r = self.run_sh(clean_env(), ["--help"])
        self.assertEqual(r.returncode, 0, r.stderr)
        for word in ("MODES", "STATES", "METRICS", "CPU_DRY_RUN", "BENCH_ARGS", "CALIBRATE",
                     "sweep.txt", "env.txt"):
            self.assertIn(word, r.stdout)
        r = self.run_sh(clean_env(), ["--go"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown argument '--go'", r.stderr)
        shim = os.path.join(ROOT, "bench", "nccl", "nccl.policy")     # any existing file
        tmp = tempfile.mkdtemp(prefix="nccl-sh-")
        try:
            for extra, msg in [({"MODES": "both"}, "MODES: 'both' is not same, alternate"),
                               ({"METRICS": "allreduce:1MB"}, "METRICS: 'allreduce:1MB' is "
                                                              "not COLL:SIZE"),
                               ({"RUNS": "five"}, "RUNS must be a whole number"),
                               ({"CALIBRATE": "yes"}, "CALIBRATE must be 0 or 1"),
                               ({"SHIM": "/nonexistent.so"}, "/nonexistent.so not found")]:
                env = clean_env(SHIM=shim, OUT=os.path.join(tmp, "o"), CPU_DRY_RUN="1")
                env.update(extra)
                r = self.run_sh(env)
                self.assertEqual(r.returncode, 2, (extra, r.stderr))
                self.assertIn(msg, r.stderr, extra)
                self.assertFalse(os.path.exists(os.path.join(tmp, "o")), extra)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f)


class TestSweep(unittest.TestCase):
    """sweep.py on a synthetic ldshim-ab folder: runs.json, result.json files joined by
    LDSHIM_REPORT, shim reports found by the ranks' pids."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="nccl-sweep-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def make(self):
        ab, logs = os.path.join(self.tmp, "ab"), os.path.join(self.tmp, "runs")
        figs = {"stock": [10.0, 10.1, 9.9, 10.05, 10.2], "compute-only": [5.0, 5.1, 4.9, 5.05,
                                                                          5.2],
                "aa": [10.0, 10.1, 9.95, 10.05, 10.15]}
        runs, pid = [], 1000
        for k in range(5):
            for st in ("stock", "compute-only", "aa"):
                name = "%03d-%s-r%d" % (len(runs) + 1, st, k + 1)
                rep = os.path.join(ab, "reports", name + ".%p.json")
                reports = []
                rank_results = []
                for r in range(2):
                    pid += 1
                    bound = st == "compute-only"
                    rpath = os.path.join(ab, "reports", "%s.%d.json" % (name, pid))
                    write_json(rpath, {"pid": pid, "state": st, "domain": r if bound else 0,
                                       "devices": [{"device": r, "compute": {
                                           "applied": "domain:%d" % r if bound else "all",
                                           "sm_count": 56 if bound else 132,
                                           "device_sms": 132, "reason": None}}]})
                    reports.append(rpath)
                    rank_results.append({"pid": pid, "env": {"LDSHIM_DOMAIN": str(r)}})
                # the launcher's own report: no CUDA, no devices
                lpath = os.path.join(ab, "reports", "%s.%d.json" % (name, pid + 500))
                write_json(lpath, {"pid": pid + 500, "state": "stock", "devices": []})
                reports.append(lpath)
                us = figs[st][k]
                res = {"ok": True, "env": {"LDSHIM_REPORT": rep},
                       "rank_results": rank_results,
                       "nccl": [{"channels": 24, "transports": {"P2P/CUMEM/read": 2}},
                                {"channels": 24 if st == "stock" else 16,
                                 "transports": {"P2P/CUMEM/read": 2}}],
                       "cases": [{"collective": "allreduce", "bytes": 1 << 20, "us": us,
                                  "nccl": {"algo": "RING", "proto": "LL128", "channels": 16}},
                                 {"collective": "allgather", "bytes": 1 << 20, "us": 2 * us,
                                  "nccl": None}]}
                write_json(os.path.join(logs, "run-%s" % name, "result.json"), res)
                runs.append({"name": name, "state": st, "warmup": False, "ok": True,
                             "env": {"LDSHIM_REPORT": rep}, "reports": reports})
        # a warm-up and a failed run: neither counts
        runs.append({"name": "900-stock-w1", "state": "stock", "warmup": True, "ok": True,
                     "env": {"LDSHIM_REPORT": "none"}, "reports": []})
        runs.append({"name": "901-stock-r6", "state": "stock", "warmup": False, "ok": False,
                     "env": {"LDSHIM_REPORT": "none"}, "reports": []})
        write_json(os.path.join(ab, "runs.json"), runs)
        return ab, logs

    def test_table(self):
        ab, logs = self.make()
        js = os.path.join(self.tmp, "sweep.json")
        r = subprocess.run([sys.executable, SWEEP, "--ab", ab, "--logs", logs, "--json", js],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout
        self.assertIn("sweep: 2 cases x 3 states (stock, compute-only, aa)", out)
        m = re.search(r"(?m)^allreduce 1 MiB +compute-only +5 +5\.05 +([0-9.]+) \[([0-9.]+), "
                      r"([0-9.]+)\] +faster +16 RING/LL128$", out)
        self.assertTrue(m, out)
        self.assertAlmostEqual(float(m.group(1)), 10.05 / 5.05, places=3)
        self.assertLess(float(m.group(3)), 2.1)
        self.assertRegex(out, r"(?m)^allreduce 1 MiB +stock +5 +10\.05 +1\.000 +baseline")
        self.assertRegex(out, r"(?m)^allreduce 1 MiB +aa +5 +10\.05 .*A/A within noise")
        self.assertRegex(out, r"(?m)^allgather 1 MiB +compute-only +5 +10\.10 .* faster +-$")
        self.assertIn("  stock         rank 0 24 (P2P/CUMEM/read); rank 1 24 (P2P/CUMEM/read)",
                      out)
        self.assertIn("  compute-only  rank 0 24 (P2P/CUMEM/read); rank 1 16 (P2P/CUMEM/read)",
                      out)
        self.assertIn("  compute-only  rank 0: device 0 domain:0 56/132 SMs, domain X 0, "
                      "LDSHIM_DOMAIN=0; rank 1: device 1 domain:1 56/132 SMs, domain X 1, "
                      "LDSHIM_DOMAIN=1", out)
        self.assertIn("  stock         rank 0: device 0 all 132/132 SMs, domain X 0", out)
        self.assertNotIn("left no result", out)       # the failed run is not "measured ok"
        with open(js) as f:
            doc = json.load(f)
        row = [x for x in doc["rows"] if x["state"] == "compute-only"
               and x["collective"] == "allreduce"][0]
        self.assertEqual(row["figures"], [5.0, 5.1, 4.9, 5.05, 5.2])
        self.assertIsNotNone(row["floor"])

    def test_reports_moved_and_missing_results(self):
        ab, logs = self.make()
        moved = os.path.join(self.tmp, "moved")
        shutil.move(ab, moved)       # absolute report paths in runs.json now point nowhere
        shutil.rmtree(glob.glob(os.path.join(logs, "run-001-*"))[0])
        r = subprocess.run([sys.executable, SWEEP, "--ab", moved, "--logs", logs],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("rank 1: device 1 domain:1 56/132 SMs", r.stdout)
        self.assertIn("1 measured run(s) of ldshim-ab left no result.json", r.stdout)
        self.assertRegex(r.stdout, r"(?m)^allreduce 1 MiB +stock +4 ")
        r = subprocess.run([sys.executable, SWEEP, "--ab", moved, "--logs", self.tmp + "/none"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no measured run", r.stderr)
        r = subprocess.run([sys.executable, SWEEP, "--ab", self.tmp, "--logs", logs],
                           capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no runs.json", r.stderr)


class TestRanks(unittest.TestCase):
    """Real ranks (gloo on the CPU) when a python with torch is known; else the clear error."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="nccl-ranks-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def assert_no_torch(self, r):
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("nccl_bench.py: PyTorch is not installed", r.stderr)

    def test_no_torch_error(self):
        """A python without torch: the launcher says so before starting a rank. A torch that
        fails to import in the ranks (a package that raises ImportError, on PYTHONPATH): the
        rank says so, the launcher stops the others and exits 2."""
        fake = os.path.join(self.tmp, "fake")
        os.makedirs(os.path.join(fake, "torch"))
        with open(os.path.join(fake, "torch", "__init__.py"), "w") as f:
            f.write("raise ImportError('stand-in torch that cannot be imported')\n")
        r = run_bench(TINY, env=clean_env(PYTHONPATH=fake))
        self.assert_no_torch(r)
        self.assertIn("stand-in torch that cannot be imported", r.stderr)
        self.assertRegex(r.stderr, r"rank \d ended with exit status 2")
        self.assertNotIn("summary:", r.stdout)
        py = torch_python()
        if py != sys.executable:      # this python has no torch: the launcher's own check
            r = run_bench(TINY)
            self.assert_no_torch(r)
            self.assertIn("the ranks need it", r.stderr)

    def test_tiny_sweep(self):
        py = torch_python()
        logs = os.path.join(self.tmp, "logs")
        js = os.path.join(self.tmp, "r.json")
        args = TINY + ["--rank-domains", "alternate", "--log-dir", logs, "--json", js]
        env = clean_env(NCCLBENCH_TEST_LOG=SAMPLE, LDSHIM_DOMAIN="1")
        if py is None:
            self.assert_no_torch(run_bench(args, env=env))
            return
        r = run_bench(args, env=env, py=py)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        out = r.stdout
        self.assertIn("nccl_bench: 2 ranks, backend gloo on cpu, float32", out)
        self.assertIn("ranks: rank 0 cpu LDSHIM_DOMAIN=1, rank 1 cpu LDSHIM_DOMAIN=0 "
                      "(--rank-domains alternate)", out)
        self.assertIn("nccl: version 2.30.7+cuda13.2", out)
        self.assertIn("nccl: rank 1 channels 24 (nvls 0, p2p 32, p2p per peer 32); transport "
                      "P2P/CUMEM/read", out)
        for coll, size, ch in [("allreduce", 65536, "2 (RING/LL, 1 other choice)"),
                               ("allreduce", 262144, "8 (RING/LL128)"),
                               ("allgather", 65536, "4 (RING/LL)"),
                               ("allgather", 262144, "16 (RING/SIMPLE)")]:
            m = re.search(r"(?m)^%s %d B: ([0-9.]+) us  busbw ([0-9.]+) GB/s  channels %s  "
                          r"\[median of 3, slowest of 2 ranks; p10-p90 ([0-9.]+)-([0-9.]+) us\]$"
                          % (coll, size, re.escape(ch)), out)
            self.assertTrue(m, (coll, size, out))
            us, bw, p10, p90 = map(float, m.groups())
            self.assertGreater(us, 0.0)
            self.assertLessEqual(p10, us)
            self.assertGreaterEqual(p90, us)
            self.assertAlmostEqual(bw, B.busbw_gbs(coll, size, us, 2), delta=0.006 + 0.01 * bw)
        self.assertIn("check: every result of every rank equal to the expected values (4 cases, "
                      "before and after timing)", out)
        m = re.search(r"(?m)^summary: allreduce 65536 B: ([0-9.]+) us$", out)
        self.assertTrue(m, out)
        self.assertEqual(out.splitlines()[-1], m.group(0))        # the last line
        self.assertIn("[rank 0] host-a:4242:4242 [0] NCCL WARN a sample warning line", r.stderr)
        self.assertNotIn("NCCL INFO", r.stderr)
        with open(js) as f:
            doc = json.load(f)
        self.assertTrue(doc["ok"])
        self.assertEqual(doc["domains"], [1, 0])
        # what reached each rank's process: its own LDSHIM_DOMAIN, the launcher's unchanged
        self.assertEqual([x["env"].get("LDSHIM_DOMAIN") for x in doc["rank_results"]],
                         ["1", "0"])
        self.assertEqual(doc["env"]["LDSHIM_DOMAIN"], "1")
        self.assertEqual(len({x["pid"] for x in doc["rank_results"]}), 2)
        self.assertEqual(len(doc["cases"]), 4)
        self.assertEqual(doc["cases"][0]["nccl"], {"algo": "RING", "proto": "LL", "channels": 2,
                                                   "ops": 3, "other_choices": 1})
        self.assertAlmostEqual(float(m.group(1)), doc["cases"][0]["us"], delta=0.006)
        runs = glob.glob(os.path.join(logs, "*", "result.json"))
        self.assertEqual(len(runs), 1)
        d = os.path.dirname(runs[0])
        with open(os.path.join(d, "rank0.log")) as f:
            log = f.read()
        self.assertIn("24 coll channels", log)
        self.assertNotIn("Bytes -> Algo", log)
        with open(os.path.join(d, "rank0.tuning.txt")) as f:
            self.assertRegex(f.read(), r"(?m)^ +2  AllReduce: 65536 Bytes -> Algo RING proto LL "
                                       r"channel\{Lo\.\.Hi\}=\{0\.\.1\}$")
        with open(runs[0]) as f:
            self.assertEqual(json.load(f), doc)

    def test_no_gpu_clear_error(self):
        """The default (NCCL on cuda) on a machine without a GPU: one clear message, exit 2."""
        py = torch_python()
        args = ["--ranks", "1", "--sizes", "64KiB", "--summary", "allreduce:64KiB"]
        if py is None:
            self.assert_no_torch(run_bench(args))
            return
        r = run_bench(args, py=py, env=clean_env(CUDA_VISIBLE_DEVICES=""))
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("no CUDA device (torch.cuda.is_available() is False); --backend gloo "
                      "--device cpu runs on a CPU", r.stderr)
        self.assertIn("nccl: version ?; no INFO lines in the ranks' output (NCCL_DEBUG=INFO)",
                      r.stdout)

    def test_wrong_result_fails_the_run(self):
        py = torch_python()
        for spec, msg in [("1:allgather:64KiB",
                           "allgather 65536 B: wrong result on rank 1 (first check): 1 of "
                           "32768 elements differ, the first at index 16384"),
                          ("0:allreduce:262144",
                           "allreduce 262144 B: wrong result on rank 0 (first check): 1 of "
                           "65536 elements differ, the first at index 32768")]:
            env = clean_env(NCCLBENCH_TEST_CORRUPT=spec)
            if py is None:
                self.assert_no_torch(run_bench(TINY, env=env))
                continue
            r = run_bench(TINY, env=env, py=py)
            self.assertEqual(r.returncode, 1, (spec, r.stdout, r.stderr))
            self.assertIn(msg, r.stderr, spec)
            self.assertRegex(r.stderr, r"rank %s ended with exit status 1; the other ranks were "
                                       r"stopped" % spec[0])
            self.assertNotIn("summary:", r.stdout)
            self.assertNotIn("check:", r.stdout)


class TestRunShDry(unittest.TestCase):
    """run.sh CPU_DRY_RUN=1 through ldshim-ab with the suite's stand-in shim: both rank-domain
    modes, a study state (so --domain is passed), sweep.py at the end."""

    def test_dry_run(self):
        shim = os.environ.get("AB_TEST_SHIM") or os.path.join(ROOT, "build", "tests", "ab",
                                                              "libabnull.so")
        self.assertTrue(os.path.exists(shim), "%s missing: run make test-ab" % shim)
        py = torch_python()
        tmp = tempfile.mkdtemp(prefix="nccl-dry-")
        try:
            out = os.path.join(tmp, "out")
            env = clean_env(CPU_DRY_RUN="1", SHIM=shim, OUT=out, PYTHON=py or sys.executable,
                            STATES="compute-only", MODES="same alternate", CALIBRATE="0",
                            NCCLBENCH_TEST_LOG=SAMPLE)
            r = subprocess.run(["sh", RUN_SH], capture_output=True, text=True, env=env,
                               timeout=300)
            with open(os.path.join(out, "env.txt")) as f:
                envtxt = f.read()
            self.assertIn("states compute-only domain 0 modes same alternate metrics "
                          "allreduce:64KiB runs 1 warmup 0 calibrate 0 ranks 2", envtxt)
            for mode, doms in (("same", ["0", "0"]), ("alternate", ["0", "1"])):
                d = os.path.join(out, mode)
                with open(os.path.join(d, "ab", "runs.json")) as f:
                    runs = json.load(f)
                self.assertEqual([x["state"] for x in runs], ["compute-only"])
                self.assertEqual(runs[0]["env"]["LDSHIM_DOMAIN"], "0")   # ldshim-ab --domain
                self.assertIn("--rank-domains %s" % mode, " ".join(runs[0]["command"]))
                if py is None:
                    self.assertFalse(runs[0]["ok"])
                    self.assertIn("PyTorch is not installed", "\n".join(runs[0]["stderr_tail"]))
                    continue
                self.assertTrue(runs[0]["ok"], runs[0])
                self.assertGreater(runs[0]["figure"], 0.0)
                with open(os.path.join(d, "table.txt")) as f:
                    self.assertRegex(f.read(), r"(?m)^compute-only +1/1 ")
                res = glob.glob(os.path.join(d, "runs", "*", "result.json"))
                self.assertEqual(len(res), 1)
                with open(res[0]) as f:
                    doc = json.load(f)
                self.assertEqual([x["env"].get("LDSHIM_DOMAIN") for x in doc["rank_results"]],
                                 doms)
                with open(os.path.join(d, "sweep.txt")) as f:
                    sw = f.read()
                self.assertRegex(sw, r"(?m)^allreduce 64 KiB +compute-only +1 +[0-9.]+ +1\.000 "
                                     r"+baseline +2 RING/LL$")
                self.assertIn("rank 1: no report, LDSHIM_DOMAIN=%s" % doms[1], sw)
                self.assertTrue(os.path.exists(os.path.join(d, "sweep.json")))
            if py is None:
                self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
                self.assertIn("ldshim-ab exit 1", r.stderr)
            else:
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertRegex(r.stdout, r"run.sh: exit 0; \d+ s; results in ")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    res = unittest.TextTestRunner(verbosity=2).run(suite)
    failed = len(res.failures) + len(res.errors) + len(res.unexpectedSuccesses)
    passed = res.testsRun - failed - len(res.skipped)
    failed += len(res.skipped)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            f.write("%d %d\n" % (passed, failed))
    print("test-bench-nccl: %d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed or res.testsRun == 0 else 0)
