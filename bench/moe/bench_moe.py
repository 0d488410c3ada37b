#!/usr/bin/env python3
"""bench_moe.py — libldmoe against torch._grouped_mm and cuBLAS cublasGemmGroupedBatchedEx.

Shapes (FACTS.md): 8 experts K 4096 N 14336; 32 experts K 7168 N 4096; 128 experts K 2048 N 1536,
at 8, 64, 512 and 2048 tokens per expert. All peers of a shape run in one process on the same inputs.
Each timing is the median of --reps single-call CUDA-event timings after --warmup calls (and, for
the interleaved peers, --settle-ms of untimed calls); every
call uses the next of --sets weight sets (each far larger than L2), so weights stream from HBM.
torch, cuBLAS, the floor and ldmoe's AUTO tile are timed interleaved call by call, in balanced
orders (call_order.py; the ratios between them are the headline); the other tiles are timed one
after another, the schedules (--sched-best) interleaved. A default run takes about a minute
(bf16, all shapes) or 40 s (--fp8): 200 repetitions and 1 s of settling per case.
Also: device-to-device copy bandwidth (the streaming ceiling), aware vs static and aware vs
unaware schedules, and each ldmoe variant's error against torch._grouped_mm.

How precise a run is (doc/moe.md, "How precise a run is"): the headline times ldmoe's AUTO call
twice as two peers (--fp8: the rowwise call; --variants: the first variant), and the ratio of
the two medians ("same code") is printed with every row: one sample of the run's noise, so a
difference of that size is not resolved; repeat the run with other --order-seed values. One
code timed up to 3-5 % apart in one run with 30 repetitions and up to ~3 % with 200, hence
--reps 200 by default. The orders follow a balanced design (call_order.py: every peer right
after every other equally often, rounded up to whole cycles); it measured no better than random
orders, and is kept because no seed can then give one peer an unlucky set of predecessors.
--order-seed relabels the peers and shuffles the design's rows. The board's power limiter lowers
the SM clock after ~100 ms of load; compute-bound peers slow with it (torch's FP8 GEMM at 64
tokens per expert: 5-7 % at 32 experts, 1-3 % at 8) and streaming ones hardly do, so timing
starts after --settle-ms (default 1000) of untimed interleaved calls, the state of a server that
never pauses, and every row reports the SM clock it was timed at (NVML).

The floor peer (build/moe/libstreamfloor.so, bench/moe/stream_floor.cu; skipped with a note if
absent): one launch that only reads the same weight and token bytes and writes the output's,
timed in the same interleaved loop — the speed of light of a single launch moving those bytes.
The fastest of its readers (LDG with 1, 2 or 4 CTAs per SM, TMA ring) is picked per case.

--routing sets how the E*m tokens are spread over the experts: uniform (m each, the default),
random (each token to a uniformly random expert: counts vary, some experts may get none) or
skewed (expert popularity log-normal, sigma 0.5, then random: max/mean ~2-3). Seeded, so every
peer and every run sees the same counts. Weight bytes count only experts that got tokens.

ldmoe reads its weights in --layout (default packed: ldmoe_pack_weights, built once; localized:
[D, E, N/D, K]); the headline times both layouts, the tile sweep and the schedules use --layout.

--fp8 (issue 20; written before any GPU run, numbers from it are the first): FP8 e4m3 instead,
in this one process over the chosen shapes: torch._scaled_grouped_mm (rowwise scales, plain
weights), ldmoe.grouped_mm_fp8 rowwise and block (--layout, D = 2), libldmoe's bf16 AUTO on
the same shapes, and the floor for the FP8 weight bytes, interleaved call by call on random
e4m3 data and scales; each case's ldmoe outputs are checked against the bound of doc/moe.md
(tests/moe/ldmoe_ref.py) at m <= 64 and compared with torch's; writes moe-fp8.md/.json.
At m <= 64 also bf16 activations: ldmoe.grouped_mm_fp8 on bf16 x (the library's one-kernel
quantization, then the GEMM), torch's eager quantize_rowwise then ldmoe's GEMM, and the
quantization kernel alone (does quantizing inside the call pay at decode?).
--fp8 --lab --fp8-variants SCHEME:TILE:TUNE[:bf16x],... adds lab variants (e.g. rowwise:ws128x64c16fp8:0x8,
LDMOE_TUNE_* bits; bf16x: on the bf16 tokens, quantized inside the call) as more interleaved
peers, reported in a table of their own.

Usage: bench_moe.py [--lab] [--reps N] [--warmup N] [--sets N] [--order-seed N] [--settle-ms MS]
                    [--shapes 0,1,2] [--tokens 8,64,512,2048] [--routing uniform|random|skewed]
                    [--layout packed|localized] [--no-cublas] [--no-floor] [--sched-best]
                    [--same-process] [--outdir DIR]
       bench_moe.py --fp8 [--lab --fp8-variants SCHEME:TILE:TUNE[:bf16x],...] [the options above]
       bench_moe.py --variants TILE:TUNE[:MODE[:LAYOUT]],... [--shapes ..] [--tokens ..] [--reps N] [--sets N]
Writes moe-bench.md and moe-bench.json to $OUT (or --outdir, default build/bench-moe). Each shape
is measured in a fresh process (its buffers' allocation history otherwise slows later shapes);
--same-process measures them all in this one.
--lab runs everything over the lab build (bench/moe/lab: every tile, tune bits; the kernels AUTO
picks are the same machine code as in libldmoe.so); without it, libldmoe.so and its own tiles.
--variants times only torch and the listed ldmoe variants (tile name or auto, LDMOE_TUNE_* bits
of bench/moe/lab/ldmoe_lab.h (needs --lab), mode: aware by default, layout: --layout by default), interleaved call by call, and writes moe-variants.md/.json
instead.
"""
import argparse
import ctypes
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

import call_order   # beside this file

# torch and ldmoe are imported by main() after the arguments are parsed, so that --help works
# on a machine without them.
torch = ldmoe = None

SHAPES = [(8, 4096, 14336), (32, 7168, 4096), (128, 2048, 1536)]   # E, K, N
TOKENS = [8, 64, 512, 2048]
# Tiles swept per regime (TILES names; without --lab only those of libldmoe.so); AUTO's choice is
# timed as well.
DECODE_TILES = ["64x16k4", "64x64k4", "128x64k2", "ws128x16", "ws128x64", "ws256x64", "ws128x64k1", "ws128x64c16",
                "ws128x128c16"]
PREFILL_TILES = ["wg256x128k2", "ws256x128", "ws128x128", "ws256x128ew"]


def median_time_us(fn, n_sets, warmup, reps):
    for i in range(warmup):
        fn(i % n_sets)
    torch.cuda.synchronize()
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for i, (a, b) in enumerate(evs):
        a.record()
        fn(i % n_sets)
        b.record()
    torch.cuda.synchronize()
    ts = [a.elapsed_time(b) * 1e3 for a, b in evs]
    return statistics.median(ts), min(ts), max(ts)


class ClockSampler:
    """The SM clock while a timed section runs, sampled every 20 ms from a thread through
    torch.cuda.clock_rate (NVML; no samples without pynvml). The board's power limiter lowers
    the clock after about 100 ms of load, and a compute-bound peer slows with it while a
    streaming one hardly does, so a ratio between them depends on the clock it was timed at."""

    def __init__(self):
        import threading
        self.samples, self.why_not, self._stop = [], None, threading.Event()
        self._dev = torch.cuda.current_device()   # the caller's device, not the thread's default
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                self.samples.append(torch.cuda.clock_rate(self._dev))
            except Exception as e:   # noqa: BLE001 - no NVML here: no samples, the timings stand
                self.why_not = "%s: %s" % (type(e).__name__, e)
                return
            self._stop.wait(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def summary(self):
        """{median_mhz, min_mhz, n} of the samples, or {why_not} when there are none."""
        if not self.samples:
            return dict(why_not=self.why_not or "no sample taken")
        return dict(median_mhz=int(round(statistics.median(self.samples))), min_mhz=min(self.samples),
                    n=len(self.samples))


def settle(fns, n_sets, seconds):
    """Call the peers in turn for `seconds` of wall time (the GPU kept busy, the host at most a
    few rounds ahead), so that timing starts where the power limiter has settled, as it has in a
    server that runs without pause, rather than in the first ~100 ms after idle when the clock is
    at its maximum (doc/moe.md, "How precise a run is")."""
    import time
    t0, pos, rounds = time.monotonic(), 0, 0
    while time.monotonic() - t0 < seconds:
        for fn in fns:
            fn(pos % n_sets)   # as in the timed loop: consecutive calls never share a weight set
            pos += 1
        rounds += 1
        if rounds % 4 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()


def median_times_interleaved(fns, n_sets, warmup, reps, seed, settle_s=0.0, info=None):
    """Median single-call times of several functions, called in turn within each repetition.
    The orders follow a Williams design (call_order.py): over each cycle every function runs
    right after every other one equally often and in every position equally often (what ran
    just before moves a call by a few percent: bench/results/moe-launch-timeline,
    moe-fp8/2026-12-04b-h200). reps rounds up to whole cycles. Calls take the weight sets in
    turn by their position in the whole sequence, so two consecutive calls never read the same
    weights (no L2 carry-over between peers) when there are two sets or more. seed
    (--order-seed) relabels the functions and shuffles the rows of each cycle. settle_s:
    settle() before timing. info: a dict that gets the repetitions timed ("reps") and, in
    "sm_clock", ClockSampler's summary of the timed calls."""
    n = len(fns)
    for i in range(warmup):
        for k, fn in enumerate(fns):
            fn((i * n + k) % n_sets)
    torch.cuda.synchronize()
    if settle_s > 0:
        settle(fns, n_sets, settle_s)
    orders = call_order.call_orders(n, reps, seed)
    reps = len(orders)
    evs = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in fns]
           for _ in range(reps)]
    pos = 0
    with ClockSampler() as cs:
        for i, ks in enumerate(orders):
            for k in ks:
                a, b = evs[i][k]
                a.record()
                fns[k](pos % n_sets)
                b.record()
                pos += 1
        torch.cuda.synchronize()
    if info is not None:
        info["reps"] = reps
        info["sm_clock"] = cs.summary()
    return [statistics.median(evs[i][k][0].elapsed_time(evs[i][k][1]) * 1e3 for i in range(reps))
            for k in range(len(fns))]


def clock_text(clk):
    """The SM clock line of a case (ClockSampler's summary)."""
    if not clk or "median_mhz" not in clk:
        return "SM clock: not sampled (%s)" % ((clk or {}).get("why_not") or "no NVML")
    return "SM clock while timed: median %d MHz, min %d (%d samples)" % (clk["median_mhz"], clk["min_mhz"], clk["n"])


def clock_cell(clk):
    return "%d / %d" % (clk["median_mhz"], clk["min_mhz"]) if clk and "median_mhz" in clk else "-"


def routing_counts(routing, E, m, seed):
    """Tokens per expert (a list of E ints summing to E*m) for --routing, from a fixed seed."""
    T = E * m
    if routing == "uniform":
        return [m] * E
    g = torch.Generator().manual_seed(seed)
    if routing == "random":
        p = torch.full((E,), 1.0 / E)
    else:   # skewed: log-normal expert popularity
        p = torch.softmax(0.5 * torch.randn(E, generator=g), 0)
    idx = torch.multinomial(p, T, replacement=True, generator=g)
    return torch.bincount(idx, minlength=E).tolist()


def cases(a, layouts=("localized", "packed")):
    """Every --shapes x --tokens case: (E, K, N, m, weight sets by layout {"plain": [E, N, K] sets,
    and of `layouts`, "localized": the same for two domains, "packed": the same packed for two domains}, tokens x
    [E*m, K], offs (cumulative tokens per expert, --routing), counts). Each shape's weights are
    freed before the next shape's are made."""
    for si in map(int, a.shapes.split(",")):
        E, K, N = SHAPES[si]
        ws = [(torch.randn((E, N, K), device="cuda", dtype=torch.bfloat16) * 0.02) for _ in range(a.sets)]
        wsets = {"plain": ws}
        if "localized" in layouts:
            wsets["localized"] = [ldmoe.to_localized(w, 2) for w in ws]
        if "packed" in layouts:
            wsets["packed"] = [ldmoe.pack(w, 2) for w in ws]
        for m in map(int, a.tokens.split(",")):
            counts = routing_counts(a.routing, E, m, 1000 * si + m)
            x = torch.randn((E * m, K), device="cuda", dtype=torch.bfloat16)
            offs = torch.tensor(counts, dtype=torch.int64).cumsum(0).to(device="cuda", dtype=torch.int32)
            yield E, K, N, m, wsets, x, offs, counts
            del x, offs
        del ws, wsets
        torch.cuda.empty_cache()


def copy_bandwidth():
    n = 1 << 30   # 2 GiB of bf16 per buffer
    a = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    b = torch.empty_like(a)
    med, _, _ = median_time_us(lambda i: b.copy_(a), 1, 3, 20)
    return 2 * a.numel() * 2 / (med * 1e-6) / 1e12


class Cublas:
    """cublasGemmGroupedBatchedEx through ctypes (column-major view: C[N x m] = W[K x N]^T *
    X[K x m]): one group of E equal GEMMs, or with uneven counts one group per expert that has
    tokens."""

    def __init__(self):
        torch.ones(8, 8, device="cuda") @ torch.ones(8, 8, device="cuda")   # loads torch's cuBLAS
        torch.cuda.synchronize()
        self.lib = None
        for name in ("libcublas.so.13", "libcublas.so"):
            try:
                self.lib = ctypes.CDLL(name)
                break
            except OSError:
                pass
        if self.lib is None:
            raise RuntimeError("libcublas not found")
        self.h = ctypes.c_void_p()
        rc = self.lib.cublasCreate_v2(ctypes.byref(self.h))
        if rc:
            raise RuntimeError("cublasCreate_v2 -> %d" % rc)
        self.fn = self.lib.cublasGemmGroupedBatchedEx

    def prepare(self, x, ws, y, counts, N, K):
        """Equal counts: one group of E GEMMs. Otherwise one group per expert that has tokens
        (cuBLAS takes per-group sizes), in expert order."""
        I = ctypes.c_int
        E = len(counts)
        starts = [sum(counts[:e]) for e in range(E)]
        if len(set(counts)) == 1:
            experts, sizes, ms = list(range(E)), [E], [counts[0]]
        else:
            experts = [e for e in range(E) if counts[e]]
            sizes, ms = [1] * len(experts), [counts[e] for e in experts]
        G = len(sizes)
        arr = lambda t, v: (t * G)(*([v] * G))   # noqa: E731
        self.ta, self.tb = arr(I, 1), arr(I, 0)
        self.ma, self.na, self.ka = arr(I, N), (I * G)(*ms), arr(I, K)
        self.lda, self.ldb, self.ldc = arr(I, K), arr(I, K), arr(I, N)
        self.alpha, self.beta = arr(ctypes.c_float, 1.0), arr(ctypes.c_float, 0.0)
        self.gs, self.G = (I * G)(*sizes), G
        self.ptrs = []
        for w in ws:
            pa = torch.tensor([w.data_ptr() + e * N * K * 2 for e in experts], dtype=torch.int64, device="cuda")
            pb = torch.tensor([x.data_ptr() + starts[e] * K * 2 for e in experts], dtype=torch.int64, device="cuda")
            pc = torch.tensor([y.data_ptr() + starts[e] * N * 2 for e in experts], dtype=torch.int64, device="cuda")
            self.ptrs.append((pa, pb, pc))

    def run(self, i):
        pa, pb, pc = self.ptrs[i]
        self.lib.cublasSetStream_v2(self.h, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        vp = ctypes.c_void_p
        rc = self.fn(self.h, self.ta, self.tb, self.ma, self.na, self.ka, self.alpha,
                     vp(pa.data_ptr()), 14, self.lda, vp(pb.data_ptr()), 14, self.ldb, self.beta,
                     vp(pc.data_ptr()), 14, self.ldc, self.G, self.gs, 68)
        if rc:
            raise RuntimeError("cublasGemmGroupedBatchedEx -> %d" % rc)


class Floor:
    """The one-launch speed of light (bench/moe/stream_floor.cu) through ctypes: a launch that
    reads the weight and token bytes of a case and writes its output bytes, nothing else."""

    READERS = [("ldg1", 0, 1), ("ldg2", 0, 2), ("ldg4", 0, 4), ("tma", 1, 1)]   # name, kind, CTAs/SM

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.fn = self.lib.ldmoe_floor_stream
        self.fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                            ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        self.fn.restype = ctypes.c_int

    def caller(self, kind, cps, ws, wbytes, x, out):
        """fn(i) for median_time_us: weight set i's first wbytes, all of x, all of out."""
        def fn(i):
            rc = self.fn(kind, ws[i].data_ptr(), wbytes, x.data_ptr(), x.numel() * x.element_size(),
                         out.data_ptr(), out.numel() * out.element_size(), cps, torch.cuda.current_stream().cuda_stream)
            if rc:
                raise RuntimeError("ldmoe_floor_stream(kind %d) -> cudaError %d" % (kind, rc))
        return fn

    def fastest(self, ws, wbytes, x, out, n_sets, warmup, reps):
        """(name, fn, {name: µs}) of the fastest reader on this case."""
        times = {name: median_time_us(self.caller(kind, cps, ws, wbytes, x, out), n_sets, warmup, reps)[0]
                 for name, kind, cps in self.READERS}
        name = min(times, key=times.get)
        kind, cps = next((k, c) for n, k, c in self.READERS if n == name)
        return name, self.caller(kind, cps, ws, wbytes, x, out), times


def load_floor(a):
    """Floor, or None (with a note) when --no-floor or the library is not built."""
    if a.no_floor:
        return None
    path = os.environ.get("LDMOE_FLOOR_LIB") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "moe", "libstreamfloor.so")
    if not os.path.exists(path):
        print("floor peer skipped: %s not built (make build/moe/libstreamfloor.so)" % path, flush=True)
        return None
    return Floor(path)


def rel_err(a, b):
    return (torch.linalg.norm(a.float() - b.float()) / torch.linalg.norm(b.float())).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=200,
                    help="timed calls per peer (default 200: with 30 one code timed up to ~3-5 %% apart)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--sets", type=int, default=3)
    ap.add_argument("--order-seed", type=int, default=12345,
                    help="relabels the peers in the balanced call order and shuffles its rows (default 12345); "
                         "repeat an A/B with other seeds to tell an effect of the code from one of the order")
    ap.add_argument("--settle-ms", type=int, default=1000,
                    help="call the interleaved peers for this long before timing them (default 1000: the power "
                         "limiter settles, as in a server that never pauses; 0: time the first ~100 ms after idle, "
                         "at the maximum clock, where compute-bound peers look faster)")
    ap.add_argument("--shapes", default="0,1,2")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--no-cublas", action="store_true")
    ap.add_argument("--tiles", help="comma-separated tiles to sweep (default: the decode or prefill list by m)")
    ap.add_argument("--no-floor", action="store_true", help="skip the one-launch streaming floor peer")
    ap.add_argument("--routing", choices=("uniform", "random", "skewed"), default="uniform",
                    help="how tokens spread over experts (default: uniform, m each)")
    ap.add_argument("--sched-best", action="store_true",
                    help="also time aware/static/unaware schedules of the fastest tile of each case")
    ap.add_argument("--layout", choices=("packed", "localized"), default="packed",
                    help="weights of ldmoe's headline, tile sweep and schedules (default packed; the other is "
                         "timed in the headline too)")
    ap.add_argument("--variants", help="TILE:TUNE[:MODE[:LAYOUT]],... (e.g. ws128x64:0,ws128x64:1:static:localized): "
                                       "A/B mode, see above")
    ap.add_argument("--outdir", default=os.environ.get("OUT") or "build/bench-moe")
    ap.add_argument("--same-process", action="store_true",
                    help="measure every shape in this process (default: one fresh process per shape)")
    ap.add_argument("--lab", action="store_true",
                    help="run over the lab build ($LDMOE_LAB_LIB, bench/moe/lab): every tile and the tune bits; "
                         "without it, libldmoe.so and its tiles only")
    ap.add_argument("--fp8", action="store_true", help="FP8 e4m3: vs torch._scaled_grouped_mm (rowwise), both "
                    "scaling schemes, libldmoe's bf16 AUTO, the FP8 floor; writes moe-fp8.md/.json")
    ap.add_argument("--fp8-variants", help="with --fp8 --lab: SCHEME:TILE:TUNE[:bf16x],... lab variants as more "
                    "peers (SCHEME rowwise|block, TILE an FP8 tile name or auto, TUNE an integer; bf16x: on bf16 "
                    "tokens, quantized inside the call)")
    ap.add_argument("--rows-out", help=argparse.SUPPRESS)   # internal: a shape's rows as JSON, no report
    a = ap.parse_args()
    for name, v, lo in (("--reps", a.reps, 1), ("--sets", a.sets, 1), ("--warmup", a.warmup, 0),
                        ("--settle-ms", a.settle_ms, 0)):
        if v < lo:
            ap.error("%s must be >= %d, got %d" % (name, lo, v))
    variants = []
    if a.variants:
        for v in a.variants.split(","):
            tile, _, rest = v.partition(":")
            tune, _, rest = rest.partition(":")
            mode, _, lay = rest.partition(":")
            try:
                variants.append((tile, int(tune or "0", 0), mode or "aware", lay or a.layout))
            except ValueError:
                ap.error("--variants: %r is not TILE:TUNE[:MODE[:LAYOUT]] (TUNE an integer, e.g. 0x3)" % v)
            if variants[-1][2] not in ("auto", "aware", "unaware", "static"):
                ap.error("--variants: mode %r is not auto, aware, unaware or static" % variants[-1][2])
            if variants[-1][3] not in ("plain", "localized", "packed"):
                ap.error("--variants: layout %r is not plain, localized or packed" % variants[-1][3])
    fp8_variants = []
    for v in (a.fp8_variants.split(",") if a.fp8_variants else []):
        parts = v.split(":")
        try:
            assert len(parts) in (3, 4) and parts[0] in ("rowwise", "block") and parts[3:] in ([], ["bf16x"])
            fp8_variants.append((parts[0], parts[1], int(parts[2], 0), len(parts) == 4))
        except (AssertionError, ValueError):
            ap.error("--fp8-variants: %r is not SCHEME:TILE:TUNE[:bf16x] (rowwise|block, a tile, an integer)" % v)
    if fp8_variants and not (a.fp8 and a.lab):
        ap.error("--fp8-variants needs --fp8 --lab")
    a.fp8_variant_list = fp8_variants
    global torch, ldmoe
    import torch
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [os.path.join(here, "..", "..", "kernels", "moe"), os.path.join(here, "lab")]
    if a.lab:
        import ldmoe_lab as ldmoe
    else:
        import ldmoe
        if a.variants and any(v[1] for v in variants):
            ap.error("--variants: tune bits need the lab build (--lab)")
        unknown = [t for t in (a.tiles.split(",") if a.tiles else []) + [v[0] for v in variants] if t not in ldmoe.TILES]
        if unknown:
            ap.error("tiles %s are in the lab build only (--lab)" % ",".join(unknown))
    os.makedirs(a.outdir, exist_ok=True)
    torch.manual_seed(1234)
    props = torch.cuda.get_device_properties(0)
    try:
        drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
    except OSError:
        drv = "?"
    head = "date %s UTC | GPU %s (%d SMs) | driver %s | torch %s | %s | args: %s" % (
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"), props.name, props.multi_processor_count,
        drv, torch.__version__, ldmoe.version(), " ".join(sys.argv[1:]) or "(defaults)")
    print(head, flush=True)
    bw = copy_bandwidth()
    print("device-to-device copy: %.2f TB/s (read + write)" % bw, flush=True)
    if variants:
        return run_variants(a, variants, head, bw)
    if a.fp8:
        return run_fp8(a, head, bw)
    shapes = a.shapes.split(",")
    if len(shapes) > 1 and not a.same_process:
        # One fresh process per shape: in one process the 128-expert rows measured 2-8 % slower
        # for ldmoe and 5-10 % for torch after the larger shapes' buffers had come and gone
        # (bench/results/moe-launch-timeline), which is the allocation history, not the kernels.
        rows = []
        for sh in shapes:
            with tempfile.TemporaryDirectory() as td:
                rows_file = os.path.join(td, "rows.json")
                cmd = [sys.executable, os.path.abspath(__file__), "--shapes", sh, "--rows-out", rows_file,
                       "--reps", str(a.reps), "--warmup", str(a.warmup), "--sets", str(a.sets), "--tokens", a.tokens,
                       "--order-seed", str(a.order_seed), "--settle-ms", str(a.settle_ms),
                       "--outdir", td, "--routing", a.routing, "--layout", a.layout] + (["--no-cublas"] if a.no_cublas else []) + \
                    (["--no-floor"] if a.no_floor else []) + (["--tiles", a.tiles] if a.tiles else []) + \
                    (["--sched-best"] if a.sched_best else []) + (["--lab"] if a.lab else [])
                print("shape %s in a fresh process" % sh, flush=True)
                rc = subprocess.run(cmd).returncode
                if rc:
                    print("shape %s: exit status %d" % (sh, rc), file=sys.stderr)
                    return rc
                with open(rows_file) as f:
                    rows += json.load(f)
        write_report(a, rows, head, bw)
        return 0
    cub = None
    if not a.no_cublas:
        try:
            cub = Cublas()
        except Exception as e:   # noqa: BLE001
            print("cuBLAS peer unavailable: %s" % e)

    flo = load_floor(a)
    rows = []
    lay = a.layout
    other = "localized" if lay == "packed" else "packed"
    for E, K, N, m, wsets, x, offs, counts in cases(a):
        ws, wl = wsets["plain"], wsets[lay]
        T = E * m
        used = sum(1 for c in counts if c)
        wbytes = used * N * K * 2   # experts without tokens need not be read
        flops = 2.0 * T * N * K
        r = {"E": E, "K": K, "N": N, "m": m, "routing": a.routing, "layout": lay, "count_max": max(counts),
             "experts_idle": E - used, "bytes_total": wbytes + T * K * 2 + T * N * 2}
        yt = torch._grouped_mm(x, ws[0].transpose(-2, -1), offs=offs)
        y = torch.empty((T, N), device="cuda", dtype=torch.bfloat16)
        # Headline: torch, cuBLAS, the floor and ldmoe (AUTO tile, aware, --layout; and the other
        # of the localized / packed layouts) interleaved call by call, so clock and thermal drift
        # hit all of them alike.
        peers = [("torch", lambda i: torch._grouped_mm(x, ws[i].transpose(-2, -1), offs=offs))]
        if cub:
            yc = torch.empty((T, N), device="cuda", dtype=torch.bfloat16)
            cub.prepare(x, ws, yc, counts, N, K)
            cub.run(0)
            torch.cuda.synchronize()
            r["cublas_err"] = rel_err(yc, yt)
            peers.append(("cublas", cub.run))
        if flo:
            yf = torch.empty_like(y)
            r["floor_reader"], ffn, r["floor_readers"] = flo.fastest(ws, wbytes, x, yf, a.sets, a.warmup, 10)
            peers.append(("floor", ffn))
        peers.append(("ldmoe_aware_%s_auto" % lay, lambda i: ldmoe.grouped_mm(x, wl[i], offs, layout=lay, mode="aware", out=y)))
        # The same call again as its own peer: one sample of how far apart this run times one code.
        peers.append(("ldmoe_same", lambda i: ldmoe.grouped_mm(x, wl[i], offs, layout=lay, mode="aware", out=y)))
        peers.append(("ldmoe_aware_%s_auto" % other,
                      lambda i: ldmoe.grouped_mm(x, wsets[other][i], offs, layout=other, mode="aware", out=y)))
        tinfo = {}
        for (name, _), med in zip(peers, median_times_interleaved([f for _, f in peers], a.sets, a.warmup, a.reps,
                                                                  a.order_seed, a.settle_ms / 1e3, tinfo)):
            r[name] = med
        r["same_code"] = r.pop("ldmoe_same") / r["ldmoe_aware_%s_auto" % lay]
        r["sm_clock"], r["reps_timed"] = tinfo["sm_clock"], tinfo["reps"]
        tiles = a.tiles.split(",") if a.tiles else [t for t in (DECODE_TILES if m <= 96 else PREFILL_TILES)
                                                     if t in ldmoe.TILES]
        r["tiles"] = tiles
        variants = [("aware", lay, "auto"), ("aware", other, "auto")] + [("aware", lay, t) for t in tiles] + [
            ("unaware", lay, "auto"), ("static", lay, "auto"), ("auto", "plain", "auto")]
        for mode, layout, tile in variants:
            key = "ldmoe_%s_%s_%s" % (mode, layout, tile)
            wset = wsets[layout]
            y.fill_(float("nan"))
            ldmoe.grouped_mm(x, wset[0], offs, layout=layout, mode=mode, tile=tile, out=y)
            torch.cuda.synchronize()
            r[key + "_err"] = rel_err(y, yt)
            if key in r:   # the headline variant was timed with the peers
                continue
            r[key] = median_time_us(
                lambda i: ldmoe.grouped_mm(x, wset[i], offs, layout=layout, mode=mode, tile=tile, out=y),
                a.sets, a.warmup, a.reps)[0]
        if a.sched_best:
            # Scheduler cost on the fastest tile: aware, static and unaware calls interleaved
            # call by call (drift and clock changes hit all three alike), medians compared.
            bt = min(tiles, key=lambda t: r["ldmoe_aware_%s_%s" % (lay, t)])
            r["sched_tile"] = bt
            fns = [lambda i, md=md: ldmoe.grouped_mm(x, wl[i], offs, layout=lay, mode=md, tile=bt, out=y)
                   for md in ("aware", "static", "unaware")]
            meds = median_times_interleaved(fns, a.sets, a.warmup, 3 * a.reps, a.order_seed)   # right after the settled headline
            r["sched_aware"], r["sched_static"], r["sched_unaware"] = meds
        best_key = min((k for k in r if k.startswith("ldmoe_aware_%s_" % lay) and not k.endswith("_err")),
                       key=lambda k: r[k])
        r["best"] = best_key
        for k in [k for k in r if k in ("torch", "cublas", "floor") or (k.startswith("ldmoe_") and not k.endswith("_err"))]:
            r[k + "_tbs"] = wbytes / (r[k] * 1e-6) / 1e12
            r[k + "_tflops"] = flops / (r[k] * 1e-6) / 1e12
        rows.append(r)
        hk = "ldmoe_aware_%s_auto" % lay
        aw = r[hk]
        ok = "ldmoe_aware_%s_auto" % other
        print("E=%3d K=%5d N=%5d m=%4d | torch %8.1f us %5.2f TB/s %6.1f TF | cublas %8s | ldmoe aware %s %8.1f us "
              "%5.2f TB/s %6.1f TF (x%.2f vs torch, err %.1e; %s %.1f us x%.2f) | best %s %.1f | static %+.1f%% "
              "unaware %+.1f%%" % (
                  E, K, N, m, r["torch"], r["torch_tbs"], r["torch_tflops"],
                  "%.1f" % r["cublas"] if "cublas" in r else "-", lay, aw, r[hk + "_tbs"],
                  r[hk + "_tflops"], r["torch"] / aw, r[hk + "_err"], other, r[ok], r["torch"] / r[ok],
                  best_key[len("ldmoe_aware_%s_" % lay):], r[best_key],
                  100 * (r["ldmoe_static_%s_auto" % lay] / aw - 1), 100 * (r["ldmoe_unaware_%s_auto" % lay] / aw - 1)),
              flush=True)
        print("    same code %.3f; %s" % (r["same_code"], clock_text(r["sm_clock"])), flush=True)
        if "floor" in r:
            print("    floor (one launch moving the same %.0f MB, %s): %.1f us = %.2f TB/s; ldmoe takes %.3fx, "
                  "torch %.3fx the floor" % (r["bytes_total"] / 1e6, r["floor_reader"], r["floor"],
                                             r["bytes_total"] / (r["floor"] * 1e-6) / 1e12, aw / r["floor"],
                                             r["torch"] / r["floor"]), flush=True)
        if a.routing != "uniform":
            print("    routing %s: max %d tokens per expert (mean %d), %d experts without tokens" % (
                a.routing, r["count_max"], m, r["experts_idle"]), flush=True)
        print("    tiles (%s): " % lay + "  ".join("%s %.1f" % (t, r["ldmoe_aware_%s_%s" % (lay, t)]) for t in tiles),
              flush=True)
        if "sched_tile" in r:
            print("    sched on %s: aware %.1f static %.1f unaware %.1f us (aware vs static %+.1f%%)" % (
                r["sched_tile"], r["sched_aware"], r["sched_static"], r["sched_unaware"],
                100 * (r["sched_aware"] / r["sched_static"] - 1)), flush=True)

    if a.rows_out:
        with open(a.rows_out, "w") as f:
            json.dump(rows, f)
        return 0
    write_report(a, rows, head, bw)
    return 0


def write_report(a, rows, head, bw):
    """moe-bench.json and moe-bench.md in --outdir (and the tables on stdout)."""
    with open(os.path.join(a.outdir, "moe-bench.json"), "w") as f:
        json.dump({"header": head, "copy_tbs": bw, "rows": rows}, f, indent=1)
    lines = ["# libldmoe benchmark", "", head, "", "copy bandwidth %.2f TB/s (read+write)" % bw, "",
             "ldmoe: aware, AUTO tile, weights in the layout named (the other layout's time in the next column); "
             "all of them, torch, cuBLAS and the floor interleaved call by call: medians of at least %d calls each "
             "(whole cycles of a balanced order, order seed %d), after %d ms of them untimed; same code: ldmoe's call "
             "timed again as another peer, / the first (one sample of this run's noise: a difference of that size is "
             "not resolved)" % (a.reps, a.order_seed, a.settle_ms), "",
             "| E | K | N | m/expert | torch µs | cuBLAS µs | floor µs | ldmoe layout | ldmoe µs | ldmoe TB/s | "
             "ldmoe TFLOP/s | vs torch | % of copy BW | ldmoe / floor | other layout µs (vs torch) | best tile µs | "
             "static vs aware | unaware vs aware | err | same code |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lay = r.get("layout", "localized")
        other = "localized" if lay == "packed" else "packed"
        hk, ok = "ldmoe_aware_%s_auto" % lay, "ldmoe_aware_%s_auto" % other
        aw = r[hk]
        lines.append("| %d | %d | %d | %d | %.1f | %s | %s | %s | %.1f | %.2f | %.1f | %.2fx | %.0f %% | %s | %s | %s %.1f | "
                     "%+.1f %% | %+.1f %% | %.1e | %s |" % (
                         r["E"], r["K"], r["N"], r["m"], r["torch"], "%.1f" % r["cublas"] if "cublas" in r else "-",
                         "%.1f" % r["floor"] if "floor" in r else "-", lay, aw,
                         r[hk + "_tbs"], r[hk + "_tflops"], r["torch"] / aw, 100 * r[hk + "_tbs"] / bw,
                         "%.3fx" % (aw / r["floor"]) if "floor" in r else "-",
                         "%s %.1f (%.2fx)" % (other, r[ok], r["torch"] / r[ok]) if ok in r else "-",
                         r["best"][len("ldmoe_aware_%s_" % lay):], r[r["best"]],
                         100 * (r["ldmoe_static_%s_auto" % lay] / aw - 1),
                         100 * (r["ldmoe_unaware_%s_auto" % lay] / aw - 1), r[hk + "_err"],
                         "%.3f" % r["same_code"] if "same_code" in r else "-"))
    if any("floor" in r for r in rows):
        lines += ["", "Floor: one launch that only reads the case's weight bytes (experts with tokens) and token "
                  "bytes and writes its output bytes (bench/moe/stream_floor.cu), fastest reader per case, "
                  "interleaved with the peers above.", "",
                  "| E | m | MB moved | floor reader | floor µs | floor TB/s | readers µs (alone) | torch / floor | "
                  "ldmoe / floor | floor x 1.3 vs torch |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            if "floor" in r:
                lines.append("| %d | %d | %.0f | %s | %.1f | %.2f | %s | %.3fx | %.3fx | %.3fx |" % (
                    r["E"], r["m"], r["bytes_total"] / 1e6, r["floor_reader"], r["floor"],
                    r["bytes_total"] / (r["floor"] * 1e-6) / 1e12,
                    " ".join("%s %.1f" % kv for kv in r["floor_readers"].items()), r["torch"] / r["floor"],
                    r["ldmoe_aware_%s_auto" % r.get("layout", "localized")] / r["floor"], 1.3 * r["floor"] / r["torch"]))
    if any("median_mhz" in (r.get("sm_clock") or {}) for r in rows):
        lines += ["", "SM clock while the interleaved peers were timed (NVML, every 20 ms)", "",
                  "| E | m | SM MHz median / min |", "|---|---|---|"]
        for r in rows:
            lines.append("| %d | %d | %s |" % (r["E"], r["m"], clock_cell(r.get("sm_clock"))))
    if any(r.get("routing", "uniform") != "uniform" for r in rows):
        lines += ["", "Routing (--routing %s): tokens per expert" % rows[0]["routing"], "",
                  "| E | m (mean) | max | experts without tokens |", "|---|---|---|---|"]
        for r in rows:
            lines.append("| %d | %d | %d | %d |" % (r["E"], r["m"], r["count_max"], r["experts_idle"]))
    lines += ["", "## Every tile (aware, %s), µs" % rows[0].get("layout", "localized")]
    groups = {}   # one table per list of swept tiles
    for r in rows:
        groups.setdefault(tuple(r["tiles"]), []).append(r)
    for tiles, grp in groups.items():
        lines += ["", "| E | m | " + " | ".join(tiles) + " |", "|---|---|" + "---|" * len(tiles)]
        for r in grp:
            lines.append("| %d | %d | " % (r["E"], r["m"]) + " | ".join(
                "%.1f" % r["ldmoe_aware_%s_%s" % (r.get("layout", "localized"), t)] for t in tiles) + " |")
    if any("sched_tile" in r for r in rows):
        lines += ["", "## Scheduler cost on the fastest tile (aware, static, unaware interleaved call by call)", "",
                  "| E | m | tile | aware µs | static µs | unaware µs | aware vs static | aware vs unaware |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            if "sched_tile" in r:
                lines.append("| %d | %d | %s | %.1f | %.1f | %.1f | %+.1f %% | %+.1f %% |" % (
                    r["E"], r["m"], r["sched_tile"], r["sched_aware"], r["sched_static"], r["sched_unaware"],
                    100 * (r["sched_aware"] / r["sched_static"] - 1), 100 * (r["sched_aware"] / r["sched_unaware"] - 1)))
    with open(os.path.join(a.outdir, "moe-bench.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def rand_e4m3(shape):
    """Random e4m3 weights or tokens with the spread of real ones (no NaN), on the GPU."""
    return (torch.randn(shape, device="cuda") * 64).clamp(-448, 448).to(torch.float8_e4m3fn)


def run_fp8(a, head, bw):
    """--fp8: every --shapes x --tokens case in this process (see the module doc)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "moe"))
    import ldmoe_ref
    floor = load_floor(a)
    D = 2
    rows = []
    for si in map(int, a.shapes.split(",")):
        E, K, N = SHAPES[si]
        KB = -(-K // 128)
        w8 = [rand_e4m3((E, N, K)) for _ in range(a.sets)]
        wsr = [torch.rand((E, N), device="cuda") + 0.5 for _ in range(a.sets)]
        wsb = [torch.rand((E, N // 128, KB), device="cuda") + 0.5 for _ in range(a.sets)]
        if a.layout == "packed":
            wl = [ldmoe.pack(w, D) for w in w8]
            wb16 = [ldmoe.pack((torch.randn((E, N, K), device="cuda") * 0.02).to(torch.bfloat16), D) for _ in range(a.sets)]
        else:
            wl = [ldmoe.to_localized(w, D) for w in w8]
            wb16 = [ldmoe.to_localized((torch.randn((E, N, K), device="cuda") * 0.02).to(torch.bfloat16), D)
                    for _ in range(a.sets)]
        wsr_l = [ldmoe.localize_scales(s, D) for s in wsr]
        wsb_l = [ldmoe.localize_scales(s, D, "block") for s in wsb]
        for m in map(int, a.tokens.split(",")):
            counts = routing_counts(a.routing, E, m, 1000 * si + m)
            T = E * m
            offs = torch.tensor(counts, dtype=torch.int64).cumsum(0).to(device="cuda", dtype=torch.int32)
            x8 = rand_e4m3((T, K))
            xsr = torch.rand(T, device="cuda") + 0.5
            xsb = (torch.rand((KB, T), device="cuda") + 0.5).t()
            xb16 = torch.randn((T, K), device="cuda", dtype=torch.bfloat16)
            outs = {k: torch.empty((T, N), device="cuda", dtype=torch.bfloat16) for k in ("torch", "row", "block", "bf16")}
            peers = {
                "torch": lambda i: torch._scaled_grouped_mm(x8, w8[i].transpose(-2, -1), xsr, wsr[i], offs=offs,
                                                            out_dtype=torch.bfloat16),
                "row": lambda i: ldmoe.grouped_mm_fp8(x8, wl[i], offs, xsr, wsr_l[i], layout=a.layout, mode="aware",
                                                      out=outs["row"]),
                # The same call again as its own peer: how far apart this run times one code (the
                # resolution of every ratio in the row; doc/moe.md "How precise a run is").
                "row_same": lambda i: ldmoe.grouped_mm_fp8(x8, wl[i], offs, xsr, wsr_l[i], layout=a.layout,
                                                           mode="aware", out=outs["row"]),
                "block": lambda i: ldmoe.grouped_mm_fp8(x8, wl[i], offs, xsb, wsb_l[i], scaling="block", layout=a.layout,
                                                        mode="aware", out=outs["block"]),
                "bf16": lambda i: ldmoe.grouped_mm(xb16, wb16[i], offs, layout=a.layout, mode="aware", out=outs["bf16"]),
            }
            if m <= 64:   # bf16 activations, quantized inside the call / by torch's eager ops / alone
                peers["row_bf16x"] = lambda i: ldmoe.grouped_mm_fp8(xb16, wl[i], offs, None, wsr_l[i], layout=a.layout,
                                                                    mode="aware", out=outs["row"])

                def torch_quant_then_ldmoe(i):
                    xq, sq = ldmoe.quantize_rowwise(xb16)
                    return ldmoe.grouped_mm_fp8(xq, wl[i], offs, sq, wsr_l[i], layout=a.layout, mode="aware", out=outs["row"])
                peers["row_torchq"] = torch_quant_then_ldmoe
                peers["quant"] = lambda i: ldmoe.quantize_fp8(xb16)
            for sch, vt, tune, bx in a.fp8_variant_list:
                peers["v:%s:%s:%#x%s" % (sch, vt, tune, ":bf16x" if bx else "")] = (
                    lambda i, sch=sch, vt=vt, tune=tune, bx=bx: ldmoe.grouped_mm_fp8(
                        xb16 if bx else x8, wl[i], offs, None if bx else xsr if sch == "rowwise" else xsb,
                        wsr_l[i] if sch == "rowwise" else wsb_l[i],
                        scaling=sch, layout=a.layout, mode="aware", tile=vt, tune=tune, out=outs["v"]))
            outs["v"] = torch.empty((T, N), device="cuda", dtype=torch.bfloat16)
            busy = sum(1 for c in counts if c)
            wbytes = busy * N * K   # e4m3: one byte per weight, only experts that got tokens
            if floor is not None:
                fname, ffn, _ = floor.fastest(w8, wbytes, x8, outs["bf16"], a.sets, a.warmup, a.reps)
                peers["floor"] = ffn
            names = list(peers)
            tinfo = {}
            times = dict(zip(names, median_times_interleaved([peers[n] for n in names], a.sets, a.warmup, a.reps,
                                                             a.order_seed, a.settle_ms / 1e3, tinfo)))
            clk = tinfo["sm_clock"]
            # correctness on set 0
            yt = peers["torch"](0)
            peers["row"](0)
            peers["block"](0)
            torch.cuda.synchronize()
            row = dict(E=E, K=K, N=N, m=m, routing=a.routing, layout=a.layout, us=times, weight_bytes=wbytes,
                       err_row_vs_torch=rel_err(outs["row"], yt), sm_clock=clk, reps_timed=tinfo["reps"])
            for name in [n for n in peers if n.startswith("v:")]:   # every variant's output within the bound
                sch = name.split(":")[1]
                peers[name](0)
                torch.cuda.synchronize()
                if m <= 64:
                    xv, xsv = (x8, xsr if sch == "rowwise" else xsb)
                    if name.endswith(":bf16x"):   # the tokens as the call quantized them
                        xv, xsv = ldmoe.quantize_fp8(xb16, sch)
                    ref, absum = ldmoe_ref.reference_fp8(xv, xsv, w8[0], wsr[0] if sch == "rowwise" else wsb[0], offs,
                                                         sch)
                    row.setdefault("bound_variants", {})[name] = ldmoe_ref.check_fp8(outs["v"], ref, absum)[0]
                    del ref, absum
                elif not name.endswith(":bf16x"):
                    ref_out = outs["row"] if sch == "rowwise" else outs["block"]
                    row.setdefault("err_variants", {})[name] = rel_err(outs["v"], ref_out)
                else:   # compared with torch's GEMM of the same quantized tokens
                    xq, sq = ldmoe.quantize_fp8(xb16, "rowwise")
                    yq = torch._scaled_grouped_mm(xq, w8[0].transpose(-2, -1), sq, wsr[0], offs=offs,
                                                  out_dtype=torch.bfloat16) if sch == "rowwise" else outs["v"]
                    row.setdefault("err_variants", {})[name] = rel_err(outs["v"], yq)
            if m <= 64:
                ref, absum = ldmoe_ref.reference_fp8(x8, xsr, w8[0], wsr[0], offs, "rowwise")
                row["bound_row"] = ldmoe_ref.check_fp8(outs["row"], ref, absum)
                row["bound_torch"] = ldmoe_ref.check_fp8(yt, ref, absum)
                ref, absum = ldmoe_ref.reference_fp8(x8, xsb, w8[0], wsb[0], offs, "block")
                row["bound_block"] = ldmoe_ref.check_fp8(outs["block"], ref, absum)
                del ref, absum
            row["tbps_row"] = wbytes / (times["row"] * 1e-6) / 1e12
            row["tflops_row"] = 2.0 * T * N * K / (times["row"] * 1e-6) / 1e12
            row["tflops_torch"] = 2.0 * T * N * K / (times["torch"] * 1e-6) / 1e12
            rows.append(row)
            print("E=%d m=%d: %s | ldmoe fp8 rowwise %.2f TB/s of weights (%.0f %% of copy), %.2fx torch; block/rowwise "
                  "%.3f; same code %.3f; err vs torch %.1e%s" % (
                      E, m, " ".join("%s %.1f" % (k, v) for k, v in times.items()), row["tbps_row"],
                      100 * row["tbps_row"] / bw, times["torch"] / times["row"], times["block"] / times["row"],
                      times["row_same"] / times["row"],
                      row["err_row_vs_torch"], "; bounds row %s block %s" % (row["bound_row"][0], row["bound_block"][0])
                      if m <= 64 else ""), flush=True)
            print("    %s" % clock_text(clk), flush=True)
            del x8, xsr, xsb, xb16, outs, peers
        del w8, wsr, wsb, wl, wb16, wsr_l, wsb_l
        torch.cuda.empty_cache()
    with open(os.path.join(a.outdir, "moe-fp8.json"), "w") as f:
        json.dump(dict(head=head, copy_tbps=bw, rows=rows), f, indent=1)
    with open(os.path.join(a.outdir, "moe-fp8.md"), "w") as f:
        f.write("# FP8 e4m3 grouped GEMM (bench_moe.py --fp8)\n\n%s\n\ncopy bandwidth %.2f TB/s (read + write); "
                "µs are medians of at least %d interleaved single calls (whole cycles of a balanced order, order seed %d, "
                "after %d ms of them untimed); TB/s = FP8 weight bytes / time; "
                "same code: the rowwise call timed again as another peer, / the first (one sample of this run's "
                "noise: a difference of that size is not resolved)\n\n" % (head, bw, a.reps, a.order_seed, a.settle_ms))
        f.write("| E | m | torch µs | ldmoe rowwise µs | block µs | bf16 AUTO µs | floor µs | TB/s | % copy | vs torch | "
                "block/row | same code | TFLOP/s ldmoe / torch | bound row / block | err vs torch | SM MHz median / min |\n|" +
                "---|" * 16 + "\n")
        for r in rows:
            t = r["us"]
            f.write("| %d | %d | %.1f | %.1f | %.1f | %.1f | %s | %.2f | %.0f | %.2fx | %.3f | %.3f | %.0f / %.0f | %s | %.1e | %s |\n" % (
                r["E"], r["m"], t["torch"], t["row"], t["block"], t["bf16"],
                "%.1f" % t["floor"] if "floor" in t else "-", r["tbps_row"], 100 * r["tbps_row"] / bw,
                t["torch"] / t["row"], t["block"] / t["row"], t["row_same"] / t["row"], r["tflops_row"], r["tflops_torch"],
                "%s / %s" % (r["bound_row"][0], r["bound_block"][0]) if "bound_row" in r else "-", r["err_row_vs_torch"],
                clock_cell(r.get("sm_clock"))))
        qrows = [r for r in rows if "row_bf16x" in r["us"]]
        if qrows:
            f.write("\n## bf16 activations at decode (rowwise)\n\nrow_bf16x: grouped_mm_fp8 on bf16 x (the library "
                    "quantizes, one kernel, then the GEMM); row_torchq: ldmoe.quantize_rowwise (torch eager ops) then "
                    "the GEMM; quant: the quantization kernel alone; bf16: libldmoe's bf16 GEMM on the same tokens\n\n"
                    "| E | m | e4m3 x µs | bf16 x, quantized in the call µs | torch quantize + GEMM µs | quant kernel µs | "
                    "bf16 GEMM µs | in-call / bf16 GEMM | in-call / torch quantize |\n|" + "---|" * 9 + "\n")
            for r in qrows:
                t = r["us"]
                f.write("| %d | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f |\n" % (
                    r["E"], r["m"], t["row"], t["row_bf16x"], t["row_torchq"], t["quant"], t["bf16"],
                    t["row_bf16x"] / t["bf16"], t["row_bf16x"] / t["row_torchq"]))
        vnames = sorted({n for r in rows for n in r["us"] if n.startswith("v:")})
        if vnames:
            f.write("\n## lab variants (µs; in brackets: / the product's AUTO of the same scheme, for rowwise "
                    ":bf16x variants / the product's call on the same bf16 tokens where timed)\n\n| E | m | " +
                    " | ".join(vnames) + " | outputs |\n|" + "---|" * (len(vnames) + 3) + "\n")
            for r in rows:
                t = r["us"]
                def base(n):
                    if n.split(":")[1] != "rowwise":
                        return t["block"]
                    return t["row_bf16x"] if n.endswith(":bf16x") and "row_bf16x" in t else t["row"]
                cells = ["%.1f (%.3f)" % (t[n], t[n] / base(n)) for n in vnames]
                chk = r.get("bound_variants") or {k: "%.1e" % v for k, v in r.get("err_variants", {}).items()}
                f.write("| %d | %d | %s | %s |\n" % (r["E"], r["m"], " | ".join(cells),
                                                     " ".join(str(chk[n]) for n in vnames)))
    print("wrote %s/moe-fp8.md" % a.outdir, flush=True)
    return 0


def vkey(v):
    return "%s:%#x:%s:%s" % v


def run_variants(a, variants, head, bw):
    """torch and each ldmoe (tile, tune) variant interleaved call by call, per shape and m."""
    rows = []
    for E, K, N, m, wsets, x, offs, counts in cases(a, {v[3] for v in variants}):
        ws = wsets["plain"]
        T = E * m
        yt = torch._grouped_mm(x, ws[0].transpose(-2, -1), offs=offs)
        y = torch.empty((T, N), device="cuda", dtype=torch.bfloat16)
        fns = [lambda i: torch._grouped_mm(x, ws[i].transpose(-2, -1), offs=offs)]
        r = {"E": E, "K": K, "N": N, "m": m, "errs": {}, "used": sum(1 for c in counts if c)}
        for v in variants:
            tile, tune, mode, lay = v
            y.fill_(float("nan"))
            # The product wrapper has no tune argument (the guard above refused bits without
            # --lab): pass it to the lab's only.
            kw = {"tune": tune} if a.lab else {}
            ldmoe.grouped_mm(x, wsets[lay][0], offs, layout=lay, mode=mode, tile=tile, out=y, **kw)
            torch.cuda.synchronize()
            r["errs"][vkey(v)] = rel_err(y, yt)
            fns.append(lambda i, tile=tile, kw=kw, mode=mode, lay=lay: ldmoe.grouped_mm(
                x, wsets[lay][i], offs, layout=lay, mode=mode, tile=tile, out=y, **kw))
        fns.append(fns[1])   # the first variant again: how far apart this run times one code
        tinfo = {}
        meds = median_times_interleaved(fns, a.sets, a.warmup, a.reps, a.order_seed, a.settle_ms / 1e3, tinfo)
        clk = r["sm_clock"] = tinfo["sm_clock"]
        r["reps_timed"] = tinfo["reps"]
        r["torch"] = meds[0]
        r["variants"] = {vkey(v): t for v, t in zip(variants, meds[1:-1])}
        r["same_code"] = meds[-1] / meds[1]
        rows.append(r)
        wbytes = r["used"] * N * K * 2
        print("E=%3d m=%4d torch %7.1f | " % (E, m, meds[0]) + " | ".join(
            "%s %7.1f (%3.0f%% BW, x%.2f, err %.0e)" % (k, t, 100 * wbytes / (t * 1e-6) / 1e12 / bw, meds[0] / t,
                                                   r["errs"][k])
            for k, t in r["variants"].items()) + " | same code %.3f | %s" % (r["same_code"], clock_text(clk)), flush=True)
    with open(os.path.join(a.outdir, "moe-variants.json"), "w") as f:
        json.dump({"header": head, "copy_tbs": bw, "variants": a.variants, "rows": rows}, f, indent=1)
    keys = [vkey(v) for v in variants]
    lines = ["# libldmoe variants, interleaved with torch._grouped_mm call by call", "", head, "",
             "copy bandwidth %.2f TB/s; medians of at least %d calls (balanced order, seed %d, after %d ms untimed); µs (%% of copy bandwidth in weight bytes); "
             "same code: the first variant timed again as another peer, / the first (one sample of this run's "
             "noise: a difference of that size is not resolved)" % (bw, a.reps, a.order_seed, a.settle_ms), "",
             "| E | m | torch | " + " | ".join(keys) + " | same code | SM MHz median / min |",
             "|---|---|---|" + "---|" * (len(keys) + 2)]
    for r in rows:
        wbytes = r["used"] * r["N"] * r["K"] * 2
        lines.append("| %d | %d | %.1f | " % (r["E"], r["m"], r["torch"]) + " | ".join(
            "%.1f (%.0f %%)" % (r["variants"][k], 100 * wbytes / (r["variants"][k] * 1e-6) / 1e12 / bw) for k in keys) +
            " | %.3f | %s |" % (r["same_code"], clock_cell(r["sm_clock"])))
    with open(os.path.join(a.outdir, "moe-variants.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
