"""CPU tests of bench/apps/serve.py and its policies. PyTorch is not needed: without it the
tests check the clear error (and ldshim-ab's report of those failed runs); with it
(SERVE_TEST_PYTHON=/path/to/python-with-torch, or torch importable by this python) they run
a tiny --device cpu config through ldshim-ab and check the figures it parsed."""

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
sys.path.insert(0, HERE)
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SERVE = os.path.join(ROOT, "bench", "apps", "serve.py")
TOOL = os.path.join(ROOT, "tools", "ldshim-ab")
POLICIES = [os.path.join(ROOT, "policy", "examples", "serve.policy"),
            os.path.join(ROOT, "bench", "ab", "serve-emulated.policy")]
MiB = 1 << 20
TINY = ["--device", "cpu", "--layers", "2", "--experts", "4", "--hidden", "64", "--ffn",
        "128", "--heads", "4", "--kv-heads", "2", "--vocab", "100", "--batch", "3",
        "--prefill-tokens", "5", "--steps", "3", "--warmup-steps", "1", "--backend", "loop"]


def load_serve():
    spec = importlib.util.spec_from_file_location("serve", SERVE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def torch_python():
    """A python that can import torch, or None."""
    cand = os.environ.get("SERVE_TEST_PYTHON") or sys.executable
    r = subprocess.run([cand, "-c", "import torch"], capture_output=True)
    return cand if r.returncode == 0 else None


def policy_sizes(path):
    """Sizes (bytes) of the [rule] sections of a policy file, read the way the doc says."""
    units = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    sizes = []
    with open(path) as f:
        for line in f:
            m = re.match(r"\s*size\s*=\s*(\d+)\s*([KMG]iB|B)?\s*(#.*)?$", line)
            if m:
                sizes.append(int(m.group(1)) * units[m.group(2) or ""])
    return sizes


def expert_sizes(*args):
    r = subprocess.run([sys.executable, SERVE, "--print-sizes"] + list(args),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return [int(m) for m in re.findall(r"^expert-size: (\d+)", r.stdout, re.M)], r.stdout


class TestServeNoGpu(unittest.TestCase):
    def test_compiles(self):
        with open(SERVE) as f:
            compile(f.read(), SERVE, "exec")

    def test_help(self):
        r = subprocess.run([sys.executable, SERVE, "--help"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0)
        for opt in ("--layers", "--experts", "--hidden", "--ffn", "--batch",
                    "--prefill-tokens", "--steps", "--backend", "--print-sizes"):
            self.assertIn(opt, r.stdout)

    def test_bad_option(self):
        r = subprocess.run([sys.executable, SERVE, "--topk", "9"], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--topk (9) cannot exceed --experts (8)", r.stderr)

    def test_allocator_rounding_rules(self):
        s = load_serve()
        self.assertEqual(s.torch_segment_bytes(1000), (2 * MiB, True))
        self.assertEqual(s.torch_segment_bytes(1 * MiB), (2 * MiB, True))
        self.assertEqual(s.torch_segment_bytes(5 * MiB), (20 * MiB, True))
        self.assertEqual(s.torch_segment_bytes(10 * MiB - 512), (20 * MiB, True))
        # requests are rounded to 512 B first: 10 MiB - 1 becomes 10 MiB, its own segment
        self.assertEqual(s.torch_segment_bytes(10 * MiB - 1), (10 * MiB, False))
        self.assertEqual(s.torch_segment_bytes(10 * MiB + 1), (12 * MiB, False))
        self.assertEqual(s.torch_segment_bytes(896 * MiB), (896 * MiB, False))

    def test_default_sizes_match_policies(self):
        sizes, text = expert_sizes()
        self.assertEqual(sizes, [939524096])
        self.assertEqual(sizes[0] % (2 * MiB), 0)
        self.assertEqual(len(re.findall(r"^  layer\d\.w[123] ", text, re.M)), 6)
        self.assertNotIn("warning", text)   # no other tensor has the expert size
        for pol in POLICIES:
            self.assertEqual(policy_sizes(pol), sizes, pol)
            with open(pol) as f:
                self.assertRegex(f.read(), r"(?m)^placement\s*=\s*split")
        with open(POLICIES[1]) as f:
            self.assertRegex(f.read(), r"(?m)^backend\s*=\s*emulated")

    def test_policies_parse_and_tag_exactly_the_expert_size(self):
        """With the project's own parser (build/bin/ldshim-policy, built by `make test-ab`)."""
        cli = os.environ.get("LDSHIM_POLICY_CLI") or os.path.join(ROOT, "build", "bin",
                                                                  "ldshim-policy")
        self.assertTrue(os.access(cli, os.X_OK), "%s missing: run make test-ab" % cli)
        sizes, text = expert_sizes()
        others = [int(m) for m in re.findall(r"^  (?!layer\d\.w[123] )\S+ +\S+ +\d+ +\S+ MiB"
                                             r"  (\d+) ", text, re.M)]
        self.assertGreater(len(others), 5)
        for pol in POLICIES:
            r = subprocess.run([cli, "check", pol], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            for size, want in [(sizes[0], "rule experts"), (sizes[0] - 2 * MiB, "untagged"),
                               (sizes[0] + 2 * MiB, "untagged")] + \
                    [(o, "untagged") for o in others]:
                r = subprocess.run([cli, "match", pol, str(size)], capture_output=True,
                                   text=True)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertTrue(r.stdout.startswith(want), (pol, size, r.stdout))

    def test_shrunk_config_prints_rounded_size(self):
        sizes, _ = expert_sizes("--experts", "6", "--hidden", "1000", "--ffn", "3000",
                                "--heads", "8", "--kv-heads", "4")
        # 6*3000*1000*2 = 36000000 B -> the allocator rounds to 2 MiB: 18 * 2 MiB
        self.assertEqual(sizes, [18 * 2 * MiB])
        sizes, _ = expert_sizes("--layout", "split")
        self.assertEqual(sizes, [939524096])   # same bytes in the split layout


    def test_packed_layout_sizes(self):
        """--layout packed: libldmoe's packed bytes (the plain bytes for the defaults, padded
        row and k blocks otherwise), and the formula is the library's own."""
        sizes, text = expert_sizes("--layout", "packed", "--backend", "ldmoe")
        self.assertEqual(sizes, [939524096])   # N/D multiple of 128, K of 256: no padding
        self.assertEqual(len(re.findall(r"^  layer\d\.w[123] +939524096 ", text, re.M)), 6)
        # 8 experts, N=1000, K=520, D=2: 4 row blocks of 128 per slice (500 rows), 12 k blocks
        # (3 x 256 k): 2*8*4*12 boxes of 16 KiB; w2 (N=520, K=1000) comes to the same.
        sizes, _ = expert_sizes("--layout", "packed", "--backend", "ldmoe", "--ffn", "1000",
                                "--hidden", "520", "--no-attention")
        self.assertEqual(sizes, [2 * 8 * 4 * 12 * 16384])
        s = load_serve()
        lib_path = os.environ.get("LDMOE_LIB") or os.path.join(ROOT, "build", "libldmoe.so")
        self.assertTrue(os.path.exists(lib_path), "%s missing: run make" % lib_path)
        import ctypes
        lib = ctypes.CDLL(lib_path)
        lib.ldmoe_packed_bytes.restype = ctypes.c_size_t
        lib.ldmoe_packed_bytes.argtypes = [ctypes.c_int] * 4
        for E, N, K, D in [(8, 14336, 4096, 2), (8, 4096, 14336, 2), (8, 1000, 520, 2),
                           (128, 1536, 2048, 2), (3, 64, 72, 1), (5, 384, 320, 4), (1, 8, 8, 8)]:
            self.assertEqual(s.packed_bytes(E, N, K, D), lib.ldmoe_packed_bytes(E, N, K, D),
                             (E, N, K, D))

    def test_print_sizes_into_a_closed_pipe(self):
        """`serve.py --print-sizes | head -1`: one line, exit 0, nothing on stderr."""
        r = subprocess.run("%s %s --print-sizes | head -1" % (sys.executable, SERVE), shell=True,
                           capture_output=True, text=True, executable="/bin/bash")
        self.assertEqual(r.stdout.count("\n"), 1, r.stdout)
        self.assertEqual(r.stderr, "")
        r = subprocess.run("set -o pipefail; %s %s --print-sizes | head -1 > /dev/null"
                           % (sys.executable, SERVE), shell=True, executable="/bin/bash")
        self.assertEqual(r.returncode, 0)

    def test_packed_layout_errors(self):
        for args, msg in [(["--layout", "packed"], "needs --backend ldmoe"),
                          (["--layout", "packed", "--backend", "ldmoe", "--dtype", "fp32"],
                           "needs bf16 weights on a CUDA device"),
                          (["--layout", "packed", "--backend", "ldmoe", "--device", "cpu"],
                           "needs bf16 weights on a CUDA device"),
                          (["--layout", "packed", "--backend", "ldmoe", "--domains", "3"],
                           "divisible by --domains")]:
            r = subprocess.run([sys.executable, SERVE, "--print-sizes"] + args,
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(msg, r.stderr, args)


class TestServeRun(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="serve-test-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_run_or_clear_error(self):
        py = torch_python()
        if py is None:
            r = subprocess.run([sys.executable, SERVE], capture_output=True, text=True)
            self.assertEqual(r.returncode, 2)
            self.assertIn("serve.py: PyTorch is not installed", r.stderr)
            return
        r = subprocess.run([py, SERVE, "--check"] + TINY, capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"(?m)^check: backend loop vs loop reference")
        self.assertRegex(r.stdout, r"(?m)^prefill: [0-9.]+ ms  [0-9.]+ tok/s")
        self.assertRegex(r.stdout, r"(?m)^decode: [0-9.]+ ms/step  [0-9.]+ tok/s")

    def test_ab_over_serve(self):
        """ldshim-ab over serve.py: real figures with torch, reported failures without."""
        from test_ab import shim_path
        py = torch_python() or sys.executable
        out = os.path.join(self.tmp, "out")
        r = subprocess.run([sys.executable, TOOL, "--shim", shim_path(), "--states",
                            "stock,full", "--runs", "2", "--warmup", "1", "--out", out,
                            "--metric", r"decode: ([0-9.]+) ms/step", "--lower-is-better",
                            "--unit", "ms/step", "--", py, SERVE] + TINY,
                           capture_output=True, text=True, timeout=600)
        with open(os.path.join(out, "summary.json")) as f:
            rows = {x["state"]: x for x in json.load(f)["rows"]}
        if torch_python() is None:
            self.assertEqual(r.returncode, 1)
            self.assertEqual(rows["full"]["verdict"], "no successful runs")
            self.assertIn("| serve.py: PyTorch is not installed", r.stdout)
            self.assertIn("exit 2", r.stdout)
        else:
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(rows["stock"]["ok"], 2)
            self.assertEqual(rows["full"]["ok"], 2)
            self.assertGreater(rows["full"]["median"], 0.0)
            self.assertEqual(rows["full"]["verdict"], "too few runs")   # 2 runs a side


if __name__ == "__main__":
    unittest.main()
