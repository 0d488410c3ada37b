#!/usr/bin/env python3
"""overhead.py — where a decode launch of libldmoe loses time that is not weight streaming.

Experiments (one GPU, no shim, even map, weights in --layout: localized (default) or packed,
equal tokens per expert):

  --contexts   Times one call (CUDA events around it) after a different untimed call each time:
               nothing (ldmoe back to back), torch._grouped_mm on other weights, a 1 GiB copy,
               a 1 GiB read (sum), a 200 us sleep kernel. torch is timed the same way. Shows
               whether a number depends on what ran before it (L2 contents, TLB, clocks).
  --trace      Runs ldmoe with its debug timeline (ldmoe.h, ldmoe_params_t.trace) on the 128-expert
               shape: when CTAs start, finish their setup, claim and receive their first tile,
               issue their last load and store their last tile, against the call's event time.
  --layers     Times --nlayers consecutive calls on one stream (distinct weights each, as the MoE
               layers of a model), one event pair around all of them, torch and ldmoe (AUTO),
               back to back and with a small torch kernel between the layers (it rewrites the
               tokens the next layer reads): per-call time without per-call events.
  --fp8        --trace and --scaling on FP8 e4m3 rowwise weights and tokens (ldmoe.grouped_mm_fp8,
               torch._scaled_grouped_mm; --tiles then names FP8 tiles, default auto).
  --scaling    Times ldmoe and torch on K=2048 N=1536 (the 128-expert shape) with a growing
               number of experts and fits time = a + bytes / bandwidth: `a` is the fixed cost
               of a launch (setup, pipeline fill, tail), the slope the streaming rate.

    python3 bench/moe/overhead.py --contexts --trace --layers --scaling --out $OUT/overhead.md

Medians over --reps calls; each call reads one of --sets weight sets (no L2 carry-over).
"""
import argparse
import ctypes
import json
import os
import statistics
import sys

torch = ldmoe = None
LAYOUT = "localized"   # --layout
DEFAULT_TILES = "ws128x16,ws128x64"


def in_layout(w):
    return ldmoe.pack(w, 2) if LAYOUT == "packed" else ldmoe.to_localized(w, 2)


def load():
    global torch, ldmoe
    import torch as _t
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [os.path.join(here, "..", "..", "kernels", "moe"), os.path.join(here, "lab")]
    import ldmoe_lab as _l   # tune bits, the timeline and every tile: the lab build (bench/moe/lab)
    torch, ldmoe = _t, _l


def median_after(pre, fn, n_sets, warmup, reps):
    """Median CUDA-event time (us) of fn(i), each call preceded by untimed pre(i)."""
    for i in range(warmup):
        pre(i)
        fn(i % n_sets)
    torch.cuda.synchronize()
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for i, (a, b) in enumerate(evs):
        pre(i)
        a.record()
        fn(i % n_sets)
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) * 1e3 for a, b in evs)


def variant(spec):
    """'TILE[:TUNE[:MODE]]' (TUNE: LDMOE_TUNE_* bits; MODE default aware) -> (tile, tune, mode)."""
    f = spec.split(":")
    return f[0], int(f[1], 0) if len(f) > 1 and f[1] else 0, f[2] if len(f) > 2 else "aware"


def make_case(E, K, N, m, sets):
    ws = [torch.randn((E, N, K), device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(sets)]
    wls = [in_layout(w) for w in ws]
    x = torch.randn((E * m, K), device="cuda", dtype=torch.bfloat16)
    offs = torch.arange(1, E + 1, device="cuda", dtype=torch.int32) * m
    y = torch.empty((E * m, N), device="cuda", dtype=torch.bfloat16)
    return ws, wls, x, offs, y


def contexts(a, out):
    E, K, N = 128, 2048, 1536
    big = torch.empty(1 << 29, device="cuda", dtype=torch.bfloat16)   # 1 GiB
    big2 = torch.empty_like(big)
    big.normal_()
    out.append("## Contexts (E=%d K=%d N=%d): median us of the timed call after each untimed call" % (E, K, N))
    out.append("")
    for m in map(int, a.tokens.split(",")):
        ws, wls, x, offs, y = make_case(E, K, N, m, a.sets)
        n = a.sets
        torch_fn = lambda i: torch._grouped_mm(x, ws[i % n].transpose(-2, -1), offs=offs)
        pres = {
            "nothing": lambda i: None,
            "torch (other set)": lambda i: torch._grouped_mm(x, ws[(i + 1) % n].transpose(-2, -1), offs=offs),
            "ldmoe (other set)": lambda i: ldmoe.grouped_mm(x, wls[(i + 1) % n], offs, layout=LAYOUT,
                                                            mode="aware", tile="ws128x64", out=y),
            "1 GiB copy": lambda i: big2.copy_(big),
            "1 GiB read": lambda i: big.sum(),
            "200 us sleep": lambda i: torch.cuda._sleep(340000),
        }
        timed = [("torch", torch_fn)] + [
            ("ldmoe " + v, (lambda i, tt=variant(v): ldmoe.grouped_mm(x, wls[i % n], offs, layout=LAYOUT,
                                                                      mode=tt[2], tile=tt[0], tune=tt[1], out=y)))
            for v in a.tiles.split(",")]
        out.append("### m = %d tokens per expert" % m)
        out.append("")
        out.append("| timed \\ before | " + " | ".join(pres) + " |")
        out.append("|---|" + "---|" * len(pres))
        for name, fn in timed:
            cells = []
            for pname, pre in pres.items():
                cells.append("%.1f" % median_after(pre, fn, n, a.warmup, a.reps))
            out.append("| %s | %s |" % (name, " | ".join(cells)))
            print(out[-1], flush=True)
        out.append("")


def trace(a, out):
    E, K, N = 128, 2048, 1536
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out.append("## Timeline (E=%d K=%d N=%d%s): us from the first CTA's entry, medians over %d calls"
               % (E, K, N, ", FP8 e4m3 rowwise" if a.fp8 else "", a.reps))
    out.append("")
    out.append("| m | variant | event us | span us | entry spread | setup | claim | first data | last load "
               "(med / max) | exit (min / med / max) | idle at end | tiles/CTA |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    dumps = []
    for m in map(int, a.tokens.split(",")):
        if a.fp8:
            w8 = [(torch.randn((E, N, K), device="cuda") * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
                  for _ in range(a.sets)]
            wl8 = [in_layout(w) for w in w8]
            wsl = [ldmoe.localize_scales(torch.rand((E, N), device="cuda") + 0.5, 2) for _ in range(a.sets)]
            x8 = (torch.randn((E * m, K), device="cuda") * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
            xs = torch.rand(E * m, device="cuda") + 0.5
            offs = torch.arange(1, E + 1, device="cuda", dtype=torch.int32) * m
            y = torch.empty((E * m, N), device="cuda", dtype=torch.bfloat16)
        else:
            ws, wls, x, offs, y = make_case(E, K, N, m, a.sets)
        for v in (a.tiles if a.tiles != DEFAULT_TILES or not a.fp8 else "auto").split(","):
            tile, tune, mode = variant(v)
            rows = []
            for i in range(a.warmup + a.reps):
                tr = torch.zeros(8 * sms, device="cuda", dtype=torch.int64)
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                if a.fp8:
                    ldmoe.grouped_mm_fp8(x8, wl8[i % a.sets], offs, xs, wsl[i % a.sets], layout=LAYOUT, mode=mode,
                                         tile=tile, tune=tune, out=y, trace=tr)
                else:
                    ldmoe.grouped_mm(x, wls[i % a.sets], offs, layout=LAYOUT, mode=mode, tile=tile, tune=tune,
                                     out=y, trace=tr)
                e.record()
                torch.cuda.synchronize()
                if i >= a.warmup:
                    rows.append((s.elapsed_time(e) * 1e3, tr.view(sms, 8).cpu().tolist()))
            if a.dump:
                dumps.append({"E": E, "K": K, "N": N, "m": m, "variant": v,
                              "calls": [{"event_us": ev, "ctas": t} for ev, t in rows]})
            if not rows[0][1][0][0]:
                out.append("| %d | %s | (no timeline: not a warp-specialized tile) |" % (m, v))
                continue
            stats = []
            for ev, t in rows:
                t0 = min(r[0] for r in t)
                us = lambda r, k: (r[k] - t0) / 1e3
                md = statistics.median
                ex = [us(r, 5) for r in t]
                span = max(ex)
                stats.append([ev, span, max(us(r, 0) for r in t), md(us(r, 1) - us(r, 0) for r in t),
                              md(us(r, 2) - us(r, 1) for r in t), md(us(r, 3) - us(r, 2) for r in t),
                              md(us(r, 4) for r in t), max(us(r, 4) for r in t), min(ex), md(ex), span,
                              sum(span - x for x in ex) / (len(ex) * span),
                              min(r[6] for r in t), max(r[6] for r in t)])
            c = [statistics.median(col) for col in zip(*stats)]
            out.append("| %d | %s | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f | %.1f / %.1f | %.1f / %.1f / %.1f | "
                       "%.1f %% | %d-%d |" % (m, v, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9],
                                               c[10], 100 * c[11], c[12], c[13]))
            print(out[-1], flush=True)
    out.append("")
    if a.dump:
        with open(a.dump, "w") as f:
            json.dump({"slots": ["entry", "setup", "claimed", "first_data", "loads_done", "exit", "tiles", "smid"],
                       "cases": dumps}, f)
    out.append("entry spread: last CTA entry; setup, claim, first data: per-CTA durations (entry to setup done, "
               "to first tile claimed, to its first stage landed); idle at end: share of CTA-time after each "
               "CTA's last store until the last CTA's.")
    out.append("")


LAYER_SHAPES = [(8, 4096, 14336), (32, 7168, 4096), (128, 2048, 1536)]   # bench_moe.py's SHAPES


def layers(a, out):
    L = a.nlayers
    out.append("## Layers: %d consecutive calls, us per call (median of %d sequences, interleaved)" % (L, a.reps))
    out.append("")
    out.append("| E | K | N | m | between | torch | ldmoe | ldmoe vs torch |")
    out.append("|---|---|---|---|---|---|---|---|")
    for si in map(int, a.layer_shapes.split(",")):
        E, K, N = LAYER_SHAPES[si]
        ws = [torch.randn((E, N, K), device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(L)]
        wls = [in_layout(w) for w in ws]
        for m in map(int, a.tokens.split(",")):
            x = torch.randn((E * m, K), device="cuda", dtype=torch.bfloat16)
            offs = torch.arange(1, E + 1, device="cuda", dtype=torch.int32) * m
            y = torch.empty((E * m, N), device="cuda", dtype=torch.bfloat16)
            for between in (False, True):
                def seq(kind, between=between, x=x, offs=offs, y=y):
                    for l in range(L):
                        if between:
                            x.mul_(1.0)   # a small kernel writing what the next layer reads
                        if kind == "torch":
                            torch._grouped_mm(x, ws[l].transpose(-2, -1), offs=offs)
                        else:
                            ldmoe.grouped_mm(x, wls[l], offs, layout=LAYOUT, mode="aware", out=y)
                kinds = ["torch", "ldmoe"]
                for _ in range(a.warmup):
                    for k in kinds:
                        seq(k)
                torch.cuda.synchronize()
                evs = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in kinds]
                       for _ in range(a.reps)]
                for i in range(a.reps):
                    for k, (s0, s1) in zip(kinds, evs[i]):
                        s0.record()
                        seq(k)
                        s1.record()
                torch.cuda.synchronize()
                med = [statistics.median(evs[i][j][0].elapsed_time(evs[i][j][1]) * 1e3 / L for i in range(a.reps))
                       for j in range(len(kinds))]
                out.append("| %d | %d | %d | %d | %s | %.1f | %.1f | %.2fx |" % (
                    E, K, N, m, "mul_" if between else "-", med[0], med[1], med[0] / med[1]))
                print(out[-1], flush=True)
    out.append("")
    out.append("between: a torch elementwise kernel on the tokens before every layer (torch and ldmoe alike).")
    out.append("")


def fit(xs, ys):
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, slope


# The one-launch floor (bench/moe/stream_floor.cu): readers (name, kind, CTAs per SM) timed as
# more peers of --fp8 --scaling, so that the fixed cost fitted for ldmoe has a reference.
FLOOR_READERS = [("floor tma", 1, 1), ("floor ldg2", 0, 2)]


def floor_fns(wl, x, y):
    """[(name, fn(i))] of the floor readers moving weight set i's bytes, x's and y's; [] (with a
    note) when build/moe/libstreamfloor.so (or $LDMOE_FLOOR_LIB) is not there."""
    path = os.environ.get("LDMOE_FLOOR_LIB") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "moe", "libstreamfloor.so")
    if not os.path.exists(path):
        print("floor peers skipped: %s not built" % path, flush=True)
        return []
    f = ctypes.CDLL(path).ldmoe_floor_stream
    f.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                  ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    f.restype = ctypes.c_int
    nbytes = lambda t: t.numel() * t.element_size()

    def call(kind, cps, i):
        w = wl[i % len(wl)]
        w = getattr(w, "data", w)   # ldmoe.PackedWeights: its uint8 buffer
        rc = f(kind, w.data_ptr(), nbytes(w) // 16 * 16, x.data_ptr(), nbytes(x) // 16 * 16, y.data_ptr(),
               nbytes(y) // 16 * 16, cps, torch.cuda.current_stream().cuda_stream)
        if rc:
            raise RuntimeError("ldmoe_floor_stream(kind %d) -> cudaError %d" % (kind, rc))
    return [(name, lambda i, k=kind, c=cps: call(k, c, i)) for name, kind, cps in FLOOR_READERS]


def fp8_case_fns(E, K, N, m, sets, tiles, floor=False):
    """--fp8: torch._scaled_grouped_mm and ldmoe's rowwise FP8 GEMM (one fn per TILE[:TUNE[:MODE]])
    on random e4m3 weights and tokens with rowwise scales; with floor, the floor readers after
    them (floor_fns; absent when the floor library is not built)."""
    w8 = [(torch.randn((E, N, K), device="cuda") * 64).clamp(-448, 448).to(torch.float8_e4m3fn) for _ in range(sets)]
    wsc = [torch.rand((E, N), device="cuda") + 0.5 for _ in range(sets)]
    wl = [in_layout(w) for w in w8]
    wsl = [ldmoe.localize_scales(w, 2) for w in wsc]
    x8 = (torch.randn((E * m, K), device="cuda") * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
    xs = torch.rand(E * m, device="cuda") + 0.5
    offs = torch.arange(1, E + 1, device="cuda", dtype=torch.int32) * m
    y = torch.empty((E * m, N), device="cuda", dtype=torch.bfloat16)
    return [lambda i: torch._scaled_grouped_mm(x8, w8[i % sets].transpose(-2, -1), xs, wsc[i % sets], offs=offs,
                                               out_dtype=torch.bfloat16)] + [
        (lambda i, tt=variant(t): ldmoe.grouped_mm_fp8(x8, wl[i % sets], offs, xs, wsl[i % sets], layout=LAYOUT,
                                                       mode=tt[2], tile=tt[0], tune=tt[1], out=y)) for t in tiles] + \
        [fn for _, fn in (floor_fns(wl, x8, y) if floor else [])]


def scaling(a, out):
    K, N = 2048, 1536
    fp8 = a.fp8
    out.append("## Scaling (K=%d N=%d%s): time against weight bytes, ldmoe and torch interleaved call by call" % (
        K, N, ", FP8 e4m3 rowwise: torch._scaled_grouped_mm and ldmoe.grouped_mm_fp8" if fp8 else ""))
    out.append("")
    tiles = (a.tiles if a.tiles != DEFAULT_TILES or not fp8 else "auto").split(",")
    floors = [name for name, _, _ in FLOOR_READERS] if fp8 and not a.no_floor else []
    for m in map(int, a.tokens.split(",")):
        out.append("### m = %d tokens per expert" % m)
        out.append("")
        names = ["torch"] + tiles
        pts = {}
        for E in map(int, a.experts.split(",")):
            n = a.sets
            if fp8:
                fns = fp8_case_fns(E, K, N, m, n, tiles, floor=bool(floors))
                if not pts:   # the floor peers are there only when their library is
                    names += floors[:len(fns) - len(names)]
            else:
                ws, wls, x, offs, y = make_case(E, K, N, m, a.sets)
                fns = [lambda i: torch._grouped_mm(x, ws[i % n].transpose(-2, -1), offs=offs)] + [
                    (lambda i, tt=variant(t): ldmoe.grouped_mm(x, wls[i % n], offs, layout=LAYOUT, mode=tt[2],
                                                               tile=tt[0], tune=tt[1], out=y)) for t in tiles]
            # interleaved: call k of repetition i uses set (i + k) % n
            for i in range(a.warmup):
                for k, f in enumerate(fns):
                    f(i + k)
            torch.cuda.synchronize()
            evs = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in fns]
                   for _ in range(a.reps)]
            for i in range(a.reps):
                for k, (f, (s, e)) in enumerate(zip(fns, evs[i])):
                    s.record()
                    f(i + k)
                    e.record()
            torch.cuda.synchronize()
            meds = [statistics.median(evs[i][k][0].elapsed_time(evs[i][k][1]) * 1e3 for i in range(a.reps))
                    for k in range(len(fns))]
            mb = E * N * K * (1 if fp8 else 2) / 1e6
            if not pts:
                out.append("| E | weight MB | torch us | " + " | ".join(
                    ("%s us" % t) if t in floors else ("ldmoe %s us" % t) for t in names[1:]) + " |")
                out.append("|---|---|---|" + "---|" * (len(names) - 1))
            for name, t in zip(names, meds):
                pts.setdefault(name, []).append((mb, t))
            out.append("| %d | %.0f | %s |" % (E, mb, " | ".join("%.1f" % t for t in meds)))
            print(out[-1], flush=True)
        out.append("")
        for name, p in pts.items():
            if len(p) >= 2:
                a0, s = fit([q[0] for q in p], [q[1] for q in p])
                out.append("- %s: fixed %.1f us, streaming %.2f TB/s (weights only; slope in us per MB)" % (name, a0, 1.0 / s))
        out.append("")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contexts", action="store_true", help="run the context experiment")
    ap.add_argument("--trace", action="store_true", help="run the timeline experiment")
    ap.add_argument("--dump", help="with --trace: write every call's per-CTA rows (globaltimer ns) as JSON here")
    ap.add_argument("--layers", action="store_true", help="run the consecutive-layers experiment")
    ap.add_argument("--nlayers", type=int, default=8, help="calls per sequence for --layers")
    ap.add_argument("--layer-shapes", default="0,2", help="bench_moe.py shape indexes for --layers")
    ap.add_argument("--scaling", action="store_true", help="run the expert-count scaling experiment")
    ap.add_argument("--tokens", default="8,64", help="tokens per expert, comma-separated")
    ap.add_argument("--tiles", default=DEFAULT_TILES,
                    help="ldmoe variants TILE[:TUNE[:MODE]] (LDMOE_TUNE_* bits; mode aware by default), "
                         "comma-separated (with --fp8: FP8 tiles, default auto)")
    ap.add_argument("--fp8", action="store_true", help="--trace and --scaling on FP8 e4m3 rowwise (grouped_mm_fp8 "
                    "against torch._scaled_grouped_mm)")
    ap.add_argument("--experts", default="16,32,64,128,256", help="expert counts for --scaling")
    ap.add_argument("--no-floor", action="store_true", help="--fp8 --scaling: leave out the one-launch floor peers "
                    "(bench/moe/stream_floor.cu, timed when build/moe/libstreamfloor.so exists)")
    ap.add_argument("--layout", choices=("localized", "packed"), default="localized", help="ldmoe's weight layout")
    ap.add_argument("--sets", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", help="write the markdown tables here as well")
    a = ap.parse_args()
    global LAYOUT
    LAYOUT = a.layout
    if not (a.contexts or a.trace or a.layers or a.scaling):
        ap.error("nothing to do: give --contexts, --trace, --layers and/or --scaling")
    load()
    out = ["# libldmoe launch overheads", "",
           "GPU %s | torch %s | ldmoe %s" % (torch.cuda.get_device_name(), torch.__version__, ldmoe.version()), ""]
    if a.contexts:
        contexts(a, out)
    if a.trace:
        trace(a, out)
    if a.layers:
        layers(a, out)
    if a.scaling:
        scaling(a, out)
    text = "\n".join(out) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
