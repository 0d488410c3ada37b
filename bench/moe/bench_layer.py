#!/usr/bin/env python3
"""bench_layer.py — the whole MoE layer (router to combined output, bf16) against its floors.

Shapes: Mixtral-8x7B (E 8, top-2, H 4096, I 14336), Qwen3-30B-A3B (E 128, top-8, H 2048,
I 768), DeepSeek-V2-Lite routed experts (E 64, top-6, H 2048, I 1408; shared experts left out),
at T = 1, 4, 16, 64, 256, 1024, 4096 tokens. Every pipeline runs the same router (serve.py's
route: x @ Wr^T, softmax in fp32, top-k, renormalized weights) inside its own timed graph.
The router weights are seeded random rows of log-normal norms (sigma --skew), so routing is
uneven: some experts get several times the mean load, some none.

Peers, in one process on the same inputs:
  torch    serve.py's layer on the torch backend: sort, gather, torch._grouped_mm over w13
           [E, 2I, H] (gate and up fused), SwiGLU, torch._grouped_mm over w2 [E, H, I],
           routing weight and a fixed-order sum over k in fp32
  grouped  the same layer on libldmoe's grouped GEMM (serve.py --backend ldmoe --moe grouped),
           weights in --grouped-layout (default packed, its fastest at decode)
  fused    libldmoe's fused layer, ldmoe.moe (serve.py --moe fused), weights packed by
           ldmoe.pack_moe where the library has it (plain otherwise); skipped, with a note,
           when the ldmoe imported has no moe()
  triton   a serving-engine style fused_experts pipeline written here in Triton (token
           alignment, one grouped GEMM over w13, SwiGLU, one over w2 with the routing weight,
           a sum over k); skipped, with a note, without Triton
Floors, measured in the same run: bytes = the weights of the experts this routing touches
(3*I*H*2 B each) over the device-to-device copy bandwidth (read + write counted); FLOPs = the
layer's 2*T*(E*H + k*3*I*H) over the bf16 rate of torch.matmul on a 8192^3 square; the floor
is the larger.

Method: every pipeline is captured once per weight set as a CUDA graph; there are S copies of
all weights (S chosen so that the weights touched by S-1 replays exceed 3x the L2), and every
replay in the run takes the next set, so each reads its weights from HBM. Replays of the peers
are interleaved (the order rotates every round); each figure is the median of --reps replays,
timed one by one with CUDA events. Before timing, each pipeline's first replay is compared with
the torch pipeline's output (max |y - ref| / max |ref|): above --tol the pipeline is flagged
WRONG and never counted as a win. The fused layer's output buffer is poisoned (NaN) first.

Usage: bench_layer.py [--shapes mixtral,qwen3,dsv2lite] [--tokens 1,4,16,64,256,1024,4096]
                      [--reps 100] [--quick] [--pipelines torch,grouped,fused,triton]
                      [--out PATH.json] (also PATH.csv) [--seed 0]
"""

import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
PROG = "bench_layer.py"

SHAPES = {   # name: (label, E, top-k, H, I)
    "mixtral": ("Mixtral-8x7B", 8, 2, 4096, 14336),
    "qwen3": ("Qwen3-30B-A3B", 128, 8, 2048, 768),
    "dsv2lite": ("DeepSeek-V2-Lite routed", 64, 6, 2048, 1408),
}
TOKENS = (1, 4, 16, 64, 256, 1024, 4096)
PIPELINES = ("torch", "grouped", "fused", "triton")


def log(msg):
    sys.stderr.write("%s: %s\n" % (PROG, msg))
    sys.stderr.flush()


def int_list(text, what, lo, hi):
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("%s: a comma-separated list of integers" % what)
    if not vals or any(not lo <= v <= hi for v in vals):
        raise argparse.ArgumentTypeError("%s: each in %d..%d" % (what, lo, hi))
    return vals


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                epilog="See the module docstring (head -40 %s) for the method."
                                % __file__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="mixtral,qwen3,dsv2lite",
                   help="comma-separated of %s (default all)" % ", ".join(SHAPES))
    p.add_argument("--tokens", type=lambda s: int_list(s, "--tokens", 1, 65536), default=None,
                   help="token counts T (default 1,4,16,64,256,1024,4096)")
    p.add_argument("--reps", type=int, default=None,
                   help="timed replays per pipeline and case (default 100; --quick 25)")
    p.add_argument("--quick", action="store_true",
                   help="T = 1, 64, 1024 and 25 replays: a check that everything runs")
    p.add_argument("--pipelines", default=",".join(PIPELINES),
                   help="comma-separated of %s (default all; torch always runs: it is the "
                        "reference)" % ", ".join(PIPELINES))
    p.add_argument("--grouped-layout", choices=("packed", "plain"), default="packed",
                   help="weight layout of the grouped peer (default packed)")
    p.add_argument("--domains", type=int, default=2,
                   help="D of the packed layouts (default 2, as serve.py)")
    p.add_argument("--mode", choices=("auto", "aware", "unaware", "static"), default="auto",
                   help="libldmoe scheduling mode (default auto)")
    p.add_argument("--skew", type=float, default=0.5,
                   help="sigma of the log-normal router row norms (default 0.5; 0: even)")
    p.add_argument("--tol", type=float, default=2e-2,
                   help="largest max-relative error against the torch pipeline (default 2e-2)")
    p.add_argument("--seed", type=int, default=0, help="seed of weights, router and tokens")
    p.add_argument("--mem-gib", type=float, default=None,
                   help="GPU memory the weight sets may take (default: 60%% of what is free)")
    p.add_argument("--out", default=None, metavar="PATH",
                   help="write the results as JSON to this path and as CSV next to it "
                        "(.csv); default: print only")
    a = p.parse_args(argv)
    a.shapes = [s.strip() for s in a.shapes.split(",") if s.strip()]
    for s in a.shapes:
        if s not in SHAPES:
            p.error("unknown shape %r (choose from %s)" % (s, ", ".join(SHAPES)))
    a.pipelines = [s.strip() for s in a.pipelines.split(",") if s.strip()]
    for s in a.pipelines:
        if s not in PIPELINES:
            p.error("unknown pipeline %r (choose from %s)" % (s, ", ".join(PIPELINES)))
    if "torch" not in a.pipelines:
        a.pipelines.insert(0, "torch")
    if a.tokens is None:
        a.tokens = [1, 64, 1024] if a.quick else list(TOKENS)
    if a.reps is None:
        a.reps = 25 if a.quick else 100
    if not 3 <= a.reps <= 100000:
        p.error("--reps must be in 3..100000")
    if not 1 <= a.domains <= 8:
        p.error("--domains must be in 1..8")
    if not 0.0 <= a.skew <= 3.0:
        p.error("--skew must be in 0..3")
    if a.out is not None and not a.out:
        p.error("--out needs a path")
    return a


def load_serve():
    path = os.path.join(ROOT, "bench", "apps", "serve.py")
    spec = importlib.util.spec_from_file_location("serve", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_ldmoe():
    """(module or None, why not)."""
    moe_dir = os.path.join(ROOT, "kernels", "moe")
    if moe_dir not in sys.path:
        sys.path.insert(0, moe_dir)
    try:
        import ldmoe
        ldmoe.library_path()
    except Exception as e:  # noqa: BLE001 - ImportError, OSError, LdmoeError
        return None, "%s: %s" % (type(e).__name__, e)
    return ldmoe, None


# ----------------------------------------------------------------------------- ceilings

def time_events(torch, fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        ts.append((s, e))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in ts) * 1e3   # us


def copy_bandwidth(torch):
    """Device-to-device copy of 1 GiB: bytes read + written per second (median of 20)."""
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    us = time_events(torch, lambda: dst.copy_(src), 20)
    del src, dst
    return 2.0 * n / (us * 1e-6)


def matmul_rate(torch):
    """bf16 FLOP/s of torch.matmul on a 8192^3 square of random data (median of 20)."""
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    us = time_events(torch, lambda: torch.matmul(a, b, out=c), 20)
    del a, b, c
    return 2.0 * n ** 3 / (us * 1e-6)


# ----------------------------------------------------------------------------- pipelines

class Case:
    """One shape's weights (S sets), router and the peers' per-set weight views."""

    def __init__(self, torch, a, name, serve, ldmoe, triton_moe, l2_bytes, free_bytes):
        self.t, self.a, self.name = torch, a, name
        self.label, E, k, H, I = SHAPES[name]
        self.E, self.k, self.H, self.I = E, k, H, I
        self.serve, self.ldmoe, self.tri = serve, ldmoe, triton_moe
        self.expert_bytes = 3 * I * H * 2
        set_bytes = E * self.expert_bytes
        copies = 1 + ("grouped" in a.pipelines and a.grouped_layout == "packed") + \
            ("fused" in a.pipelines and hasattr(ldmoe, "pack_moe"))
        touched_min = k * self.expert_bytes                # T = 1 touches k experts
        want = max(2, math.ceil(3 * l2_bytes / touched_min) + 1)
        budget = (a.mem_gib * 2 ** 30) if a.mem_gib else 0.6 * free_bytes
        fit = int(budget // (set_bytes * copies))
        if fit < 2:
            raise MemoryError("%s: %d weight sets of %.2f GiB (x%d layouts) do not fit in %.1f GiB"
                              % (name, 2, set_bytes / 2 ** 30, copies, budget / 2 ** 30))
        self.S = min(want, fit, 16)
        if self.S < want:
            log("%s: %d weight sets fit, %d wanted for cold weights at T=1" % (name, self.S, want))
        g = torch.Generator(device="cuda")
        g.manual_seed(a.seed * 1000 + list(SHAPES).index(name))
        self.gen = g
        scale = torch.exp(torch.randn(E, 1, device="cuda", generator=g) * a.skew)
        self.router = (torch.randn(E, H, device="cuda", generator=g) * scale / math.sqrt(H)).to(
            torch.bfloat16)
        self.w13, self.w2 = [], []
        for _ in range(self.S):
            self.w13.append(torch.randn(E, 2 * I, H, device="cuda", dtype=torch.bfloat16,
                                        generator=g).mul_(1.0 / math.sqrt(H)))
            self.w2.append(torch.randn(E, H, I, device="cuda", dtype=torch.bfloat16,
                                       generator=g).mul_(1.0 / math.sqrt(I)))
        self.notes = []
        self.views = {"torch": [(self.w13[s], self.w2[s]) for s in range(self.S)]}
        self.fns = {"torch": self.torch_layer}
        if "grouped" in a.pipelines:
            if ldmoe is None:
                self.notes.append("grouped: skipped (ldmoe not importable)")
            else:
                lay = a.grouped_layout
                self.ggemm = serve.Gemm(torch, "ldmoe", lay, a.mode)
                if lay == "packed":
                    self.views["grouped"] = [(ldmoe.pack(self.w13[s], a.domains),
                                              ldmoe.pack(self.w2[s], a.domains))
                                             for s in range(self.S)]
                else:
                    self.views["grouped"] = self.views["torch"]
                self.fns["grouped"] = self.grouped_layer
        if "fused" in a.pipelines:
            if ldmoe is None:
                self.notes.append("fused: skipped (ldmoe not importable)")
            elif not hasattr(ldmoe, "moe"):
                self.notes.append("fused: skipped (the ldmoe imported, %s, has no moe(): "
                                  "libldmoe's fused layer is not in this build)" % ldmoe.__file__)
            else:
                if hasattr(ldmoe, "pack_moe"):
                    self.views["fused"] = [serve.pack_fused(ldmoe, self.w13[s], self.w2[s],
                                                            a.domains)
                                           for s in range(self.S)]
                    self.fused_layout = "packed (pack_moe, D=%d)" % a.domains
                else:
                    self.views["fused"] = self.views["torch"]
                    self.fused_layout = "plain"
                self.fns["fused"] = self.fused_layer
        if "triton" in a.pipelines:
            if triton_moe is None:
                self.notes.append("triton: skipped (Triton not importable)")
            else:
                self.views["triton"] = self.views["torch"]
                self.fns["triton"] = self.triton_layer
        torch.cuda.synchronize()

    def route(self, x):
        return self.serve.route(self.t, x, self.router, self.k)

    def torch_layer(self, x, w, out):
        topv, topi = self.route(x)
        return self.serve.moe_grouped(self.t, x, topv, topi, w[0], w[1], self.tgemm)

    def grouped_layer(self, x, w, out):
        topv, topi = self.route(x)
        return self.serve.moe_grouped(self.t, x, topv, topi, w[0], w[1], self.ggemm)

    def fused_layer(self, x, w, out):
        topv, topi = self.route(x)
        return self.ldmoe.moe(x, w[0], w[1], topi.to(self.t.int32), topv, out=out,
                              mode=self.a.mode)

    def triton_layer(self, x, w, out):
        topv, topi = self.route(x)
        return self.tri.fused_experts(x, w[0], w[1], topi, topv)

    @property
    def tgemm(self):
        if not hasattr(self, "_tgemm"):
            self._tgemm = self.serve.Gemm(self.t, "torch", "plain")
        return self._tgemm


def capture(torch, fn, x, w, out, stream):
    """fn(x, w, out) as a CUDA graph: two warm-up calls on the capture stream (lazy setup:
    cuBLAS workspaces, libldmoe's per-stream counters, Triton compiles), then the capture.
    Returns (graph, the output tensor the graph writes)."""
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn(x, w, out)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        y = fn(x, w, out)
    return g, y


def rel_err(torch, y, ref):
    y, ref = y.float(), ref.float()
    if not bool(torch.isfinite(y).all()):
        return float("inf")
    return ((y - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def run_case(torch, a, case, T, bw, rate):
    t = torch
    g = t.Generator(device="cuda")
    g.manual_seed(a.seed * 7919 + T)
    x = t.randn(T, case.H, device="cuda", dtype=t.bfloat16, generator=g)
    topv, topi = case.route(x)
    counts = t.bincount(topi.reshape(-1), minlength=case.E).cpu()
    touched = int((counts > 0).sum())
    load = counts.max().item() / (T * case.k / case.E)
    wbytes = touched * case.expert_bytes
    flops = 2.0 * T * (case.E * case.H + case.k * 3 * case.I * case.H)
    floor_b, floor_f = wbytes / bw * 1e6, flops / rate * 1e6
    row = dict(shape=case.name, label=case.label, T=T, E=case.E, k=case.k, H=case.H, I=case.I,
               touched_experts=touched, max_load_over_mean=round(load, 3),
               weight_bytes=wbytes, flops=flops, floor_bytes_us=floor_b, floor_flops_us=floor_f,
               floor_us=max(floor_b, floor_f), sets=case.S, pipelines={})
    out = t.empty(T, case.H, device="cuda", dtype=t.bfloat16)
    stream = t.cuda.Stream()
    graphs, outs = {}, {}
    for p, fn in case.fns.items():
        try:
            gs = []
            for s in range(case.S):
                gs.append(capture(t, fn, x, case.views[p][s], out, stream))
            graphs[p] = [gr for gr, _ in gs]
            outs[p] = gs[0][1]
        except Exception as e:  # noqa: BLE001 - whatever a backend raises
            row["pipelines"][p] = dict(error="%s: %s" % (type(e).__name__, e))
            log("%s T=%d %s: failed: %s: %s" % (case.name, T, p, type(e).__name__, e))
    # Correctness: every pipeline's first replay (set 0) against the torch pipeline's.
    ref = None
    for p in graphs:
        if p == "fused":
            out.fill_(float("nan"))
        graphs[p][0].replay()
        t.cuda.synchronize()
        y = outs[p].clone()
        if p == "torch":
            ref = y
        err = rel_err(t, y, ref) if ref is not None else float("nan")   # no reference: not ok
        row["pipelines"][p] = dict(err=err, ok=err <= a.tol)
        if not err <= a.tol:
            log("%s T=%d %s: WRONG: max relative error %.3g against torch (tolerance %g)"
                % (case.name, T, p, err, a.tol))
    # Timing: rounds of one replay per pipeline, the order rotating; every replay takes the
    # next weight set, so none finds its weights in L2.
    names = list(graphs)
    ev = {p: [] for p in names}
    nset = 0
    for r in range(a.reps + 2):
        order = names[r % len(names):] + names[:r % len(names)]
        for p in order:
            s_, e_ = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            s_.record()
            graphs[p][nset % case.S].replay()
            e_.record()
            nset += 1
            if r >= 2:                       # two untimed rounds first
                ev[p].append((s_, e_))
    t.cuda.synchronize()
    for p in names:
        us = sorted(s_.elapsed_time(e_) * 1e3 for s_, e_ in ev[p])
        d = row["pipelines"][p]
        d.update(us=statistics.median(us), p10=us[len(us) // 10], p90=us[(9 * len(us)) // 10],
                 n=len(us), over_floor=statistics.median(us) / row["floor_us"])
    del graphs, outs
    t.cuda.synchronize()
    t.cuda.empty_cache()
    return row


# ----------------------------------------------------------------------------- report

def fmt_row(row, pipes):
    P = row["pipelines"]
    cells = ["%-9s" % row["shape"], "%5d" % row["T"], "%4d" % row["touched_experts"],
             "%5.2f" % row["max_load_over_mean"], "%9.1f" % row["floor_us"],
             "%5s" % ("bytes" if row["floor_bytes_us"] >= row["floor_flops_us"] else "flops")]
    for p in pipes:
        d = P.get(p)
        if d is None:
            cells.append("%16s" % "-")
        elif "us" not in d:
            cells.append("%16s" % "error")
        else:
            cells.append("%9.1f %5.2fx%s" % (d["us"], d["over_floor"], "" if d["ok"] else "!"))
    tu = P.get("torch", {}).get("us")
    for p in ("grouped", "fused", "triton"):
        if p in pipes:
            d = P.get(p, {})
            if tu and d.get("us") and d.get("ok"):
                cells.append("%7.2fx" % (tu / d["us"]))
            else:
                cells.append("%8s" % ("WRONG" if d and not d.get("ok", True) else "-"))
    return " ".join(cells)


def print_table(rows, pipes):
    head = ["%-9s" % "shape", "%5s" % "T", "%4s" % "exp", "%5s" % "load", "%9s" % "floor us",
            "%5s" % "bound"] + ["%16s" % ("%s us xfloor" % p) for p in pipes] + \
        ["%8s" % ("%s/t" % p[:1]) for p in ("grouped", "fused", "triton") if p in pipes]
    print(" ".join(head))
    for row in rows:
        print(fmt_row(row, pipes))
    print("(exp: experts touched; load: busiest expert's tokens over the mean; xfloor: median "
          "over the roofline floor; !: output disagrees with torch's, not a result; g/t, f/t, "
          "t/t: torch time over that peer's = speedup over torch)")


def file_writer():
    """(write(path, text), what): the project's Python file layer (python/ldshim_ab/fileio.py,
    write_file) where this checkout has it, else a plain write."""
    sys.path.insert(0, os.path.join(ROOT, "python"))
    try:
        from ldshim_ab import fileio
        return (lambda path, text: fileio.write_file(path, text, what="--out file")), "fileio"
    except (ImportError, AttributeError):
        pass
    finally:
        sys.path.pop(0)

    def plain(path, text):
        with open(path, "w") as f:
            f.write(text)
    return plain, "plain"


def write_outputs(path, meta, rows):
    """JSON at path (.json added unless there) and CSV beside it (.csv)."""
    base = path[:-5] if path.endswith(".json") else path
    csv = ["shape,T,E,k,H,I,touched_experts,max_load_over_mean,weight_bytes,flops,floor_bytes_us,"
           "floor_flops_us,floor_us,pipeline,us,p10,p90,n,over_floor,rel_err_vs_torch,ok"]
    for r in rows:
        for p, d in r["pipelines"].items():
            csv.append("%s,%d,%d,%d,%d,%d,%d,%.3f,%d,%.0f,%.3f,%.3f,%.3f,%s,%s,%s,%s,%s,%s,%s,%s"
                       % (r["shape"], r["T"], r["E"], r["k"], r["H"], r["I"], r["touched_experts"],
                          r["max_load_over_mean"], r["weight_bytes"], r["flops"],
                          r["floor_bytes_us"], r["floor_flops_us"], r["floor_us"], p,
                          *("%.3f" % d[x] if x in d else "" for x in ("us", "p10", "p90")),
                          d.get("n", ""), "%.4f" % d["over_floor"] if "over_floor" in d else "",
                          "%.3g" % d["err"] if "err" in d else "", d.get("ok", "")))
    write, how = file_writer()
    meta["written_by"] = how
    write(base + ".json", json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")
    write(base + ".csv", "\n".join(csv) + "\n")
    return base + ".json", base + ".csv"


def main(argv=None):
    a = parse_args(argv)
    try:
        import torch
    except ImportError as e:
        log("PyTorch is not installed (%s)" % e)
        return 2
    if not torch.cuda.is_available():
        log("no CUDA GPU visible to PyTorch")
        return 2
    serve = load_serve()
    ldmoe, why = load_ldmoe()
    if ldmoe is None:
        log("ldmoe not importable (%s): grouped and fused are skipped" % why)
    tri, twhy = None, None
    if "triton" in a.pipelines:
        try:
            sys.path.insert(0, HERE)
            import triton_moe as tri
        except Exception as e:  # noqa: BLE001
            tri, twhy = None, "%s: %s" % (type(e).__name__, e)
            log("triton peer unavailable (%s)" % twhy)
    dev = torch.cuda.get_device_properties(0)
    l2 = getattr(dev, "L2_cache_size", 50 * 10 ** 6) or 50 * 10 ** 6
    torch.backends.cuda.matmul.allow_tf32 = False
    t0 = time.time()
    bw, rate = copy_bandwidth(torch), matmul_rate(torch)
    meta = dict(device=dev.name, sms=dev.multi_processor_count, l2_bytes=l2,
                torch=torch.__version__, copy_bytes_per_s=bw, bf16_flops_per_s=rate,
                ldmoe=getattr(ldmoe, "__file__", None),
                ldmoe_library=(ldmoe.library_path() if ldmoe else None), ldmoe_missing=why,
                triton_missing=twhy, reps=a.reps, seed=a.seed, skew=a.skew,
                grouped_layout=a.grouped_layout, domains=a.domains, mode=a.mode, tol=a.tol,
                argv=sys.argv[1:], notes={})
    log("%s (%d SMs, L2 %.0f MiB), torch %s: copy %.0f GB/s (read+write), bf16 matmul %.0f "
        "TFLOP/s" % (dev.name, dev.multi_processor_count, l2 / 2 ** 20, torch.__version__,
                     bw / 1e9, rate / 1e12))
    rows = []
    pipes = [p for p in a.pipelines]
    with torch.inference_mode():
        for name in a.shapes:
            free, _ = torch.cuda.mem_get_info()
            case = Case(torch, a, name, serve, ldmoe, tri, l2, free)
            meta["notes"][name] = case.notes + ["%d weight sets" % case.S] + \
                (["fused weights: %s" % case.fused_layout] if hasattr(case, "fused_layout") else [])
            for n in case.notes:
                log("%s: %s" % (name, n))
            for T in a.tokens:
                row = run_case(torch, a, case, T, bw, rate)
                rows.append(row)
                log("%s T=%d: %s (%.0f s)" % (name, T, ", ".join(
                    "%s %.1f us" % (p, d["us"]) for p, d in row["pipelines"].items() if "us" in d),
                    time.time() - t0))
            del case
            torch.cuda.empty_cache()
    print("# bench_layer: %s, torch %s; copy %.0f GB/s, bf16 %.0f TFLOP/s; medians of %d graph "
          "replays, weights cold" % (dev.name, torch.__version__, bw / 1e9, rate / 1e12, a.reps))
    print_table(rows, pipes)
    for name, notes in meta["notes"].items():
        print("# %s: %s" % (name, "; ".join(notes)))
    if a.out:
        try:
            j, c = write_outputs(a.out, meta, rows)
        except Exception as e:  # noqa: BLE001 - OSError, or the file layer's FileError
            log("cannot write --out %s: %s" % (a.out, e))
            return 2
        log("wrote %s and %s" % (j, c))
    bad = [(r["shape"], r["T"], p) for r in rows for p, d in r["pipelines"].items()
           if not d.get("ok", False)]
    if bad:
        log("%d pipeline/case results are wrong or failed: %s" % (len(bad), bad[:8]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
