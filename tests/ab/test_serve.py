"""CPU tests of bench/apps/serve.py and its policies. PyTorch is not needed: without it the
run tests check that their options get as far as the clear error (and ldshim-ab's report of
those failed runs); with it (SERVE_TEST_PYTHON=/path/to/python-with-torch, or torch
importable by this python) they run a tiny --device cpu config: its output lines, the static
decode against the dynamic one, the CUDA-graph path against stand-in stream and graph APIs
(serve_fake_graph.py), --profile, and a run through ldshim-ab. The decode-mode argument
errors and the profile arithmetic (on synthetic trace events) need no torch."""

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
                    "--prefill-tokens", "--steps", "--backend", "--print-sizes", "--attention",
                    "--graphs", "--no-graphs", "--profile", "--no-busy"):
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
        self.assertEqual(sizes, [939524096, 1879048192])     # w2, w13 (gate and up fused)
        self.assertTrue(all(x % (2 * MiB) == 0 for x in sizes))
        self.assertEqual(len(re.findall(r"^  layer\d\.w13 +8x28672x4096 +1879048192 ", text, re.M)), 2)
        self.assertEqual(len(re.findall(r"^  layer\d\.w2 +8x4096x14336 +939524096 ", text, re.M)), 2)
        self.assertNotIn("warning", text)   # no other tensor has an expert size
        fp8, text8 = expert_sizes("--dtype", "fp8")   # one byte per weight: half the size
        self.assertEqual(fp8, [x // 2 for x in sizes])
        self.assertNotIn("warning", text8)
        for pol in POLICIES:   # rule experts-w13, experts, experts-fp8: every size once
            self.assertEqual(policy_sizes(pol), sorted(set(sizes + fp8), reverse=True), pol)
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
        fp8, text8 = expert_sizes("--dtype", "fp8")
        others = [int(m) for t in (text, text8)
                  for m in re.findall(r"^  (?!layer\d\.w(?:13|2) )\S+ +\S+ +\d+ +\S+ MiB"
                                      r"  (\d+) ", t, re.M)]
        self.assertGreater(len(others), 5)
        rule = {sizes[1]: "rule experts-w13", sizes[0]: "rule experts", fp8[1]: "rule experts",
                fp8[0]: "rule experts-fp8"}
        self.assertEqual(sorted(rule), [448 * MiB, 896 * MiB, 1792 * MiB])
        for pol in POLICIES:
            r = subprocess.run([cli, "check", pol], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            for size, want in [(x, w) for x, w in rule.items()] + \
                    [(x + d, "untagged") for x in rule for d in (-2 * MiB, 2 * MiB)] + \
                    [(o, "untagged") for o in others]:
                r = subprocess.run([cli, "match", pol, str(size)], capture_output=True,
                                   text=True)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertTrue(r.stdout.startswith(want), (pol, size, r.stdout))

    def test_shrunk_config_prints_rounded_size(self):
        sizes, _ = expert_sizes("--experts", "6", "--hidden", "1000", "--ffn", "3000",
                                "--heads", "8", "--kv-heads", "4")
        # w2: 6*1000*3000*2 = 36000000 B -> the allocator rounds to 2 MiB: 18 * 2 MiB;
        # w13: 72000000 B -> 35 * 2 MiB
        self.assertEqual(sizes, [18 * 2 * MiB, 35 * 2 * MiB])
        sizes, _ = expert_sizes("--layout", "split")
        self.assertEqual(sizes, [939524096, 1879048192])   # same bytes in the split layout


    def test_packed_layout_sizes(self):
        """--layout packed: libldmoe's packed bytes (the plain bytes for the defaults, padded
        row and k blocks otherwise), and the formula is the library's own."""
        for moe in ("grouped", "fused"):
            sizes, text = expert_sizes("--layout", "packed", "--backend", "ldmoe", "--moe", moe)
            self.assertEqual(sizes, [939524096, 1879048192])   # N/D multiple of 128, K of 256: no padding
            self.assertEqual(len(re.findall(r"^  layer\d\.w13 +\S+ +1879048192 ", text, re.M)), 2)
            self.assertEqual(len(re.findall(r"^  layer\d\.w2 +\S+ +939524096 ", text, re.M)), 2)
        # 8 experts, ffn 1000, hidden 520, D=2: w13 (N=2000, K=520) 8 row blocks of 128 per
        # slice (1000 rows), 12 k blocks (3 x 256 k): 2*8*8*12 boxes of 16 KiB; w2 (N=520,
        # K=1000): 3 row blocks (260 rows), 16 k blocks: 2*8*3*16.
        sizes, _ = expert_sizes("--layout", "packed", "--backend", "ldmoe", "--moe", "grouped",
                                "--ffn", "1000", "--hidden", "520", "--no-attention")
        self.assertEqual(sizes, [2 * 8 * 3 * 16 * 16384, 2 * 8 * 8 * 12 * 16384])
        # --moe fused: ldmoe.pack_moe keeps the plain shapes and bytes (bf16), padding or not
        # (H = 640: the grouped GEMM's packed w13 pads k to 768)
        sizes, text = expert_sizes("--layout", "packed", "--backend", "ldmoe", "--moe", "fused",
                                   "--ffn", "2048", "--hidden", "640", "--no-attention")
        self.assertEqual(sizes, [8 * 640 * 2048 * 2, 8 * 4096 * 640 * 2])
        self.assertRegex(text, r"(?m)^  layer0\.w13 +8x4096x640 +41943040 ")
        sizes, _ = expert_sizes("--layout", "packed", "--backend", "ldmoe", "--moe", "grouped",
                                "--ffn", "2048", "--hidden", "640", "--no-attention")
        self.assertEqual(sizes[1], 2 * 8 * 16 * 12 * 16384)
        # --moe fused --dtype fp8: pack_moe of e4m3 keeps the plain shapes, one byte a weight,
        # and the layer takes a scale per weight row, [E, n] (not by slice)
        sizes, text = expert_sizes("--layout", "packed", "--backend", "ldmoe", "--moe", "fused",
                                   "--dtype", "fp8")
        self.assertEqual(sizes, [939524096 // 2, 1879048192 // 2])
        self.assertRegex(text, r"(?m)^  layer0\.w13 +8x28672x4096 +939524096 ")
        self.assertRegex(text, r"(?m)^  layer1\.w2_scale +8x4096 +131072 ")
        s = load_serve()
        lib_path = os.environ.get("LDMOE_LIB") or os.path.join(ROOT, "build", "libldmoe.so")
        self.assertTrue(os.path.exists(lib_path), "%s missing: run make" % lib_path)
        import ctypes
        lib = ctypes.CDLL(lib_path)
        lib.ldmoe_packed_bytes.restype = ctypes.c_size_t
        lib.ldmoe_packed_bytes.argtypes = [ctypes.c_int] * 4
        for E, N, K, D in [(8, 28672, 4096, 2), (8, 4096, 14336, 2), (8, 2000, 520, 2), (8, 520, 1000, 2),
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

    def test_decode_mode_errors(self):
        """--graphs where a graph cannot be captured is refused (exit 2), not turned off."""
        for args, msg in [(["--graphs", "--device", "cpu"], "--graphs needs a CUDA device"),
                          (["--graphs", "--device", "cpu:0"], "--graphs needs a CUDA device"),
                          (["--graphs", "--attention", "dynamic"],
                           "--graphs needs --attention static"),
                          (["--graphs", "--backend", "loop"],
                           "--backend loop reads the expert offsets on the host"),
                          (["--attention", "dynamic", "--no-attention"],
                           "--attention has no effect with --no-attention"),
                          (["--attention", "paged"], "invalid choice")]:
            r = subprocess.run([sys.executable, SERVE, "--print-sizes"] + args,
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(msg, r.stderr, args)
        # what is accepted: graphs with --no-attention, --no-graphs anywhere
        for args in (["--graphs", "--no-attention"], ["--no-graphs", "--device", "cpu"],
                     ["--no-graphs", "--attention", "dynamic", "--backend", "loop"]):
            r = subprocess.run([sys.executable, SERVE, "--print-sizes"] + args,
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, (args, r.stderr))

    def test_decode_mode_defaults(self):
        s = load_serve()
        for args, graphs, attention in [([], True, "static"),
                                        (["--device", "cpu"], False, "static"),
                                        (["--device", "cuda:1"], True, "static"),
                                        (["--attention", "dynamic"], False, "dynamic"),
                                        (["--backend", "loop"], False, "static"),
                                        (["--no-attention"], True, "static"),
                                        (["--no-graphs"], False, "static")]:
            a = s.parse_args(args)
            self.assertEqual((a.graphs, a.attention), (graphs, attention), args)

    def test_trace_activity_gpu(self):
        """Device activity from a Chrome trace: kernels, memcpy and memset count, host
        events do not; busy is the union of the intervals (overlap counted once)."""
        s = load_serve()
        ev = [{"ph": "X", "cat": "kernel", "name": "gemm", "ts": 100.0, "dur": 10.0},
              {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 112.0, "dur": 10.0},
              {"ph": "X", "cat": "kernel", "name": "softmax", "ts": 118.0, "dur": 6.0},
              {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 130.0,
               "dur": 1.0},
              {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD", "ts": 140.0, "dur": 2.0},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 90.0,
               "dur": 50.0},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 90.0, "dur": 5.0},
              {"ph": "s", "cat": "ac2g", "name": "flow", "ts": 90.0},
              {"ph": "M", "name": "process_name"}]
        busy, rows = s.trace_activity(ev, True)
        self.assertAlmostEqual(busy, 10 + 12 + 1 + 2)      # [112, 124) holds softmax
        self.assertEqual(rows, [("gemm", 20.0, 2), ("softmax", 6.0, 1),
                                ("Memcpy DtoD", 2.0, 1), ("Memset (Device)", 1.0, 1)])
        self.assertEqual(s.trace_activity([], True), (0.0, []))

    def test_trace_activity_cpu(self):
        """CPU operators: self time (nested operators subtracted), per thread; busy is the
        outermost operators; the profiler's step markers are not operators."""
        s = load_serve()
        ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": 0.0, "dur": 10.0,
               "pid": 1, "tid": 1},
              {"ph": "X", "cat": "cpu_op", "name": "aten::matmul", "ts": 1.0, "dur": 8.0,
               "pid": 1, "tid": 1},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 2.0, "dur": 5.0,
               "pid": 1, "tid": 1},
              {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 10.0, "dur": 2.0,
               "pid": 1, "tid": 1},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 3.0, "dur": 4.0,
               "pid": 1, "tid": 2},
              {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0.0,
               "dur": 50.0, "pid": 1, "tid": 1},
              {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#2", "ts": 0.0, "dur": 50.0,
               "pid": 1, "tid": 1}]
        busy, rows = s.trace_activity(ev, False)
        self.assertAlmostEqual(busy, 12.0)    # [0, 12) on thread 1 holds thread 2's [3, 7)
        self.assertEqual(dict((n, (us, c)) for n, us, c in rows),
                         {"aten::mm": (9.0, 2), "aten::matmul": (3.0, 1),
                          "aten::linear": (2.0, 1), "aten::add": (2.0, 1)})

    def test_report_profile_lines(self):
        import contextlib
        import io
        s = load_serve()
        a = s.parse_args(["--device", "cpu", "--profile"])
        ev = [{"ph": "X", "cat": "kernel", "name": "k%02d" % i, "ts": 100.0 * i, "dur": 1.0 + i}
              for i in range(14)] + \
             [{"ph": "X", "cat": "kernel", "name": "k13", "ts": 2000.0, "dur": 14.0}]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            # 2 profiled steps in 0.5 ms; the timed pass's median step 0.2 ms
            s.report_profile(a, ev, 2, 0.5, True, 0.2)
        text = out.getvalue()
        busy_us = sum(1.0 + i for i in range(14)) + 14.0
        m = re.search(r"(?m)^busy: ([0-9.]+) % of the decode step \(GPU kernels ([0-9.]+) ms/step of the "
                      r"timed ([0-9.]+) ms/step; ([0-9.]+) % of the ([0-9.]+) ms/step of 2 steps under "
                      r"torch.profiler\)$", text)
        self.assertTrue(m, text)
        self.assertAlmostEqual(float(m.group(1)), 100 * busy_us / 2 / 1e3 / 0.2, delta=0.06)
        self.assertAlmostEqual(float(m.group(2)), busy_us / 2 / 1e3, delta=0.0006)
        self.assertEqual(m.group(3), "0.200")
        self.assertAlmostEqual(float(m.group(4)), 100 * busy_us / 1e3 / 0.5, delta=0.06)
        self.assertEqual(m.group(5), "0.250")
        rows = re.findall(r"(?m)^profile: +([0-9.]+)% +([0-9.]+) +([0-9.]+)  (.*)$", text)
        self.assertEqual(len(rows), 13, text)                 # 12 kernels + "(2 others)"
        self.assertEqual(rows[0][2:], ("1", "k13"))           # 2 launches over 2 steps
        self.assertEqual(rows[1][2:], ("0.5", "k12"))         # 1 launch over 2 steps
        self.assertEqual(rows[-1][3], "(2 others)")
        self.assertAlmostEqual(sum(float(r[0]) for r in rows), 100.0, delta=0.5)
        self.assertRegex(text, r"(?m)^profile: total [0-9.]+ ms/step in 7.5 kernels$")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            s.report_profile(a, [], 2, 0.5, True, 0.2)
        self.assertEqual(out.getvalue(), "busy: not measured (torch.profiler recorded no GPU "
                                         "kernels; is CUPTI available?)\n")

    def test_moe_option(self):
        """--moe: fused by default with --backend ldmoe where the fused layer runs, grouped
        where it does not (split or fp8 weights), nothing for the other backends; fused asked
        for where it cannot run is refused, with the reason."""
        s = load_serve()
        for args, moe in [([], None), (["--backend", "ldmoe"], "fused"),
                          (["--backend", "ldmoe", "--layout", "packed"], "fused"),
                          (["--backend", "ldmoe", "--layout", "split"], "grouped"),
                          (["--backend", "ldmoe", "--dtype", "fp8"], "grouped"),
                          (["--backend", "ldmoe", "--moe", "grouped", "--layout", "packed"], "grouped"),
                          (["--backend", "ldmoe", "--moe", "fused"], "fused"),
                          (["--backend", "ldmoe", "--moe", "fused", "--layout", "packed"], "fused"),
                          (["--backend", "ldmoe", "--moe", "fused", "--layout", "packed", "--dtype", "fp8"],
                           "fused")]:
            self.assertEqual(s.parse_args(args).moe, moe, args)
        for args, msg in [(["--moe", "fused"], "--moe fused is a choice of --backend ldmoe"),
                          (["--moe", "grouped", "--backend", "loop"], "is a choice of --backend ldmoe"),
                          (["--backend", "ldmoe", "--moe", "fused", "--layout", "split"],
                           "--moe fused takes --layout plain or packed"),
                          (["--backend", "ldmoe", "--moe", "fused", "--dtype", "fp8"],
                           "--moe fused --dtype fp8 needs --layout packed"),
                          (["--backend", "ldmoe", "--moe", "fused", "--dtype", "fp32"],
                           "--moe fused runs bf16 or fp8 weights"),
                          (["--backend", "ldmoe", "--moe", "fused", "--layout", "packed", "--dtype",
                            "fp8", "--hidden", "4160", "--heads", "26", "--kv-heads", "13"],
                           "--hidden and --ffn divisible by 128"),
                          (["--backend", "ldmoe", "--moe", "sparse"], "invalid choice")]:
            r = subprocess.run([sys.executable, SERVE, "--print-sizes"] + args,
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(msg, r.stderr, args)

    def test_packed_layout_errors(self):
        for args, msg in [(["--layout", "packed"], "needs --backend ldmoe"),
                          (["--layout", "packed", "--backend", "ldmoe", "--dtype", "fp32"],
                           "needs bf16 or fp8 weights on a CUDA device"),
                          (["--layout", "packed", "--backend", "ldmoe", "--device", "cpu"],
                           "needs bf16 or fp8 weights on a CUDA device"),
                          (["--layout", "packed", "--backend", "ldmoe", "--domains", "3"],
                           "divisible by --domains")]:
            r = subprocess.run([sys.executable, SERVE, "--print-sizes"] + args,
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(msg, r.stderr, args)


    def test_fp8_sizes_and_errors(self):
        """--dtype fp8: e4m3 expert weights (half the bf16 bytes), their scales listed after
        them, packed sizes as libldmoe's ldmoe_packed_bytes_fp8; the refusals that need no GPU."""
        sizes, text = expert_sizes("--dtype", "fp8")
        self.assertEqual(sizes, [469762048, 939524096])   # 8 x 4096 x 14336, 8 x 28672 x 4096 bytes
        self.assertEqual(len(re.findall(r"^  layer\d\.w13_scale +8x28672 ", text, re.M)), 2)
        self.assertEqual(len(re.findall(r"^  layer\d\.w2_scale +8x4096 ", text, re.M)), 2)
        self.assertLess(text.index("layer1.w2 "), text.index("layer0.w13_scale"))   # weights first
        sizes, _ = expert_sizes("--dtype", "fp8", "--layout", "packed", "--backend", "ldmoe")
        self.assertEqual(sizes, [469762048, 939524096])
        s = load_serve()
        lib_path = os.environ.get("LDMOE_LIB") or os.path.join(ROOT, "build", "libldmoe.so")
        import ctypes
        lib = ctypes.CDLL(lib_path)
        lib.ldmoe_packed_bytes_fp8.restype = ctypes.c_size_t
        lib.ldmoe_packed_bytes_fp8.argtypes = [ctypes.c_int] * 4
        for E, N, K, D in [(8, 28672, 4096, 2), (8, 4096, 14336, 2), (8, 1008, 528, 2), (3, 64, 80, 1), (1, 8, 16, 8)]:
            self.assertEqual(s.packed_bytes(E, N, K, D, fp8=True), lib.ldmoe_packed_bytes_fp8(E, N, K, D), (E, N, K, D))
        for args, msg in [(["--dtype", "fp8", "--device", "cpu", "--backend", "torch"], "use --backend loop"),
                          (["--dtype", "fp8", "--device", "cpu", "--backend", "ldmoe"], "use --backend loop"),
                          (["--dtype", "fp8", "--hidden", "72", "--heads", "8", "--kv-heads", "8"], "divisible by 16"),
                          (["--dtype", "fp8", "--layout", "packed", "--backend", "ldmoe", "--device", "cpu"],
                           "use --backend loop")]:
            r = subprocess.run([sys.executable, SERVE, "--print-sizes"] + args, capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(msg, r.stderr, args)


class TestServeRun(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="serve-test-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_tiny(self, *args):
        """serve.py on TINY + args with torch (the CompletedProcess, exit 0 asserted), or,
        without torch, the check that those options get as far as the clear error (None)."""
        py = torch_python()
        if py is None:
            r = subprocess.run([sys.executable, SERVE] + TINY + list(args), capture_output=True,
                               text=True)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("serve.py: PyTorch is not installed", r.stderr)
            return None
        r = subprocess.run([py, SERVE] + TINY + list(args), capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r

    def test_run_or_clear_error(self):
        r = self.run_tiny("--check", "--no-graphs")
        if r is None:
            return
        out = r.stdout
        self.assertRegex(out, r"(?m)^check: backend loop vs loop reference")
        self.assertRegex(out, r"(?m)^serve: decode: static attention \(KV cache of 8 positions, "
                              r"masked by length\), eager steps; prefill eager$")
        self.assertRegex(out, r"(?m)^prefill: [0-9.]+ ms  [0-9.]+ tok/s")
        m = re.search(r"(?m)^decode: ([0-9.]+) ms/step  ([0-9.]+) tok/s  \(batch 3, median of 3 "
                      r"steps, wall time per step; mean ([0-9.]+), p90 ([0-9.]+) ms\)$", out)
        self.assertTrue(m, out)
        med, tps, p90 = float(m.group(1)), float(m.group(2)), float(m.group(4))
        self.assertGreater(med, 0.0)
        self.assertAlmostEqual(tps, 3 / (med / 1e3), delta=0.05 * tps)
        self.assertGreaterEqual(p90, med)
        m = re.search(r"(?m)^busy: ([0-9.]+) % of the decode step \(PyTorch operators ([0-9.]+) "
                      r"of ([0-9.]+) ms/step, 2 steps under torch.profiler\)$", out)
        self.assertTrue(m, out)
        busy, ops, step = map(float, m.groups())
        self.assertGreater(busy, 0.0)
        self.assertLessEqual(busy, 100.5)        # operators lie inside the profiled steps
        self.assertLessEqual(ops, step * 1.005)
        self.assertNotIn("profile:", out)        # only with --profile
        self.assertRegex(out, r"(?m)^tokens: \d+ \d+ \d+$")
        self.assertRegex(out, r"(?m)^generated: 3 x 4 tokens, crc32 [0-9a-f]{8}$")

    def test_static_decode_matches_dynamic(self):
        """The static-shape decode (whole cache, length mask, device-side state) chooses the
        same tokens as the older dynamic attention (SDPA over the cache so far), step by
        step: same seed, fp32 on the CPU, every generated token compared through the crc."""
        outs = {}
        for mode in ("static", "dynamic"):
            r = self.run_tiny("--attention", mode, "--no-graphs", "--no-busy", "--steps", "6",
                              "--prefill-tokens", "7", "--batch", "4")
            if r is None:
                return
            self.assertNotIn("busy:", r.stdout)      # --no-busy
            outs[mode] = [ln for ln in r.stdout.splitlines()
                          if ln.startswith(("tokens:", "generated:"))]
            self.assertEqual(len(outs[mode]), 2, r.stdout)
            self.assertRegex(outs[mode][1], r"^generated: 4 x 7 tokens, crc32 ")
        self.assertEqual(outs["static"], outs["dynamic"])
        # and the crc does tell sequences apart: another prompt seed, other tokens
        r = self.run_tiny("--no-graphs", "--no-busy", "--steps", "6", "--prefill-tokens", "7",
                          "--batch", "4", "--seed", "1")
        self.assertNotEqual([ln for ln in r.stdout.splitlines() if ln.startswith("generated:")],
                            outs["static"][1:])

    def test_fp8_cpu(self):
        """--dtype fp8 on the CPU: weights quantized once at load, the dequantized reference
        as the expert GEMM (--backend loop); the split layout (scales localized with the
        weights) chooses the same tokens as the plain one."""
        outs = {}
        for layout in ("plain", "split"):
            r = self.run_tiny("--dtype", "fp8", "--layout", layout, "--check", "--no-graphs", "--no-busy")
            if r is None:
                return
            self.assertRegex(r.stdout, r"(?m)^check: backend loop vs loop reference: max relative error "
                                       r"[0-9.e+-]+ \(tolerance 1e-04; grouped GEMMs over w13 and w2\)$")
            self.assertRegex(r.stdout, r"(?m)^check: backend loop vs loop reference: max relative error "
                                       r"[0-9.e+-]+ \(tolerance 1e-04; MoE layer, 64 tokens, top-2 of 4 experts\)$")
            outs[layout] = [ln for ln in r.stdout.splitlines() if ln.startswith("generated:")]
            self.assertEqual(len(outs[layout]), 1, r.stdout)
        self.assertEqual(outs["plain"], outs["split"])

    def test_graph_path_with_stand_in_cuda(self):
        """The CUDA-graph decode path of serve.py run on the CPU with torch.cuda's stream and
        graph API replaced (serve_fake_graph.py): warm-up on the capture stream, one capture,
        every timed and profiled step a replay, and the tokens of the eager static path."""
        py = torch_python()
        args = ["--steps", "6", "--prefill-tokens", "7", "--batch", "4", "--warmup-steps", "2"]
        if py is None:       # the driver needs torch; the options themselves must parse
            self.run_tiny(*args)
            return
        r = subprocess.run([py, os.path.join(HERE, "serve_fake_graph.py")] + TINY + args,
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"(?m)^serve: decode: static attention \(KV cache of 13 "
                                   r"positions, masked by length\), CUDA graph captured once, "
                                   r"replayed every step; prefill eager$")
        # replays: 2 warm-up + 6 timed + 1 + 4 profiled (the profile pass: 1 untimed step,
        # then min(4, 6 - 1) under the profiler)
        self.assertRegex(r.stdout, r"(?m)^fake-graph: captures=1 eager_steps=0 replays=13 "
                                   r"warmup_on_side=2$")
        self.assertRegex(r.stdout, r"(?m)^busy: [0-9.]+ % of the decode step \(PyTorch "
                                   r"operators [0-9.]+ of [0-9.]+ ms/step, 4 steps under")
        eager = self.run_tiny("--no-graphs", "--no-busy", *args)
        pick = lambda out: [ln for ln in out.splitlines() if ln.startswith(("tokens:",
                                                                            "generated:"))]
        self.assertEqual(len(pick(r.stdout)), 2)
        self.assertEqual(pick(r.stdout), pick(eager.stdout))

    def test_profile_breakdown_cpu(self):
        r = self.run_tiny("--profile", "--no-graphs")
        if r is None:
            return
        out = r.stdout
        self.assertRegex(out, r"(?m)^busy: [0-9.]+ % of the decode step")
        self.assertRegex(out, r"(?m)^profile: one decode step, operators by self time \(totals "
                              r"of 2 profiled steps / 2\):$")
        rows = re.findall(r"(?m)^profile: +([0-9.]+)% +([0-9.]+) +([0-9.]+)  (.*)$", out)
        self.assertGreaterEqual(len(rows), 5, out)
        names = [x[3] for x in rows]
        self.assertIn("aten::mm", names)           # the projections and the loop's GEMMs
        self.assertAlmostEqual(sum(float(x[0]) for x in rows), 100.0, delta=1.0)
        shares = [float(x[0]) for x in rows if not x[3].endswith(" others)")]
        self.assertEqual(shares, sorted(shares, reverse=True))
        self.assertRegex(out, r"(?m)^profile: total [0-9.]+ ms/step in [0-9.]+ operator calls$")
        # the profile comes after the timed steps: the metric line is still the last decode:
        self.assertEqual(len(re.findall(r"decode: [0-9.]+ ms/step", out)), 1)

    def test_ab_over_serve(self):
        """ldshim-ab over serve.py: real figures with torch, reported failures without."""
        from test_ab import shim_path
        py = torch_python() or sys.executable
        out = os.path.join(self.tmp, "out")
        r = subprocess.run([sys.executable, TOOL, "--shim", shim_path(), "--states",
                            "stock,full", "--runs", "2", "--warmup", "1", "--out", out,
                            "--metric", r"decode: ([0-9.]+) ms/step", "--lower-is-better",
                            "--unit", "ms/step", "--", py, SERVE, "--no-busy"] + TINY,
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


class TestBenchLayer(unittest.TestCase):
    """bench/moe/bench_layer.py (the MoE layer benchmark, which runs serve.py's layer): its
    options without a GPU, and its Triton peer (bench/moe/triton_moe.py) on the CPU under
    Triton's interpreter where a python with torch and Triton is at hand (fp32: the
    interpreter's bf16 dot is not exact)."""
    BENCH = os.path.join(ROOT, "bench", "moe", "bench_layer.py")

    def test_help_and_bad_options(self):
        r = subprocess.run([sys.executable, self.BENCH, "--help"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        for opt in ("--shapes", "--tokens", "--reps", "--quick", "--out", "--pipelines"):
            self.assertIn(opt, r.stdout)
        for args, msg in [(["--shapes", "llama"], "unknown shape 'llama'"),
                          (["--tokens", "0"], "each in 1..65536"),
                          (["--tokens", "1,x"], "comma-separated list of integers"),
                          (["--pipelines", "vllm"], "unknown pipeline 'vllm'"),
                          (["--reps", "2"], "--reps must be in 3..100000")]:
            r = subprocess.run([sys.executable, self.BENCH] + args, capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(msg, r.stderr, args)

    def test_triton_peer_interpreted(self):
        py = torch_python()
        if py is None or subprocess.run([py, "-c", "import triton"], capture_output=True).returncode:
            # Without them (CI): the benchmark itself refuses clearly, and nothing is skipped.
            r = subprocess.run([py or sys.executable, self.BENCH, "--quick"], capture_output=True,
                               text=True, timeout=300)
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertRegex(r.stderr, r"bench_layer.py: (PyTorch is not installed|no CUDA GPU visible)")
            return
        code = r"""
import math, sys, torch
sys.path.insert(0, sys.argv[1])
import triton_moe as tm
torch.manual_seed(0)
for T, E, k, H, I in [(1, 8, 2, 64, 32), (37, 8, 2, 96, 64), (20, 128, 8, 64, 32)]:
    x = torch.randn(T, H)
    w13 = torch.randn(E, 2 * I, H) / math.sqrt(H)
    w2 = torch.randn(E, H, I) / math.sqrt(I)
    p = (torch.randn(T, E) * torch.exp(torch.randn(E))).softmax(-1)
    tv, ti = p.topk(k, -1)
    tv = tv / tv.sum(-1, keepdim=True)
    out = tm.fused_experts(x, w13, w2, ti, tv)
    ref = torch.zeros(T, H)
    for t in range(T):
        for j in range(k):
            g = w13[ti[t, j]] @ x[t]
            ref[t] += tv[t, j] * (w2[ti[t, j]] @ (torch.nn.functional.silu(g[:I]) * g[I:]))
    err = ((out - ref).abs().max() / ref.abs().max()).item()
    BM = tm.block_m(T * k, E)
    sid, eid, npad, nb = tm.align(ti, E, BM)
    rows = [v for v in sid.tolist() if v < T * k]
    assert sorted(rows) == list(range(T * k)), "align: every (token, slot) once"
    flat = ti.reshape(-1).tolist()
    assert all(eid[i // BM].item() == flat[v] for i, v in enumerate(sid.tolist()) if v < T * k)
    assert all(eid[b].item() == -1 for b in range(int(npad) // BM, nb))
    print("case", T, E, k, "err %.3g" % err)
    assert err < 1e-5, err
"""
        env = dict(os.environ, TRITON_INTERPRET="1")
        r = subprocess.run([py, "-c", code, os.path.join(ROOT, "bench", "moe")], capture_output=True,
                           text=True, env=env, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.count("case "), 3, r.stdout)


if __name__ == "__main__":
    unittest.main()
