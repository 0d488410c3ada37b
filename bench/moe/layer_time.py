#!/usr/bin/env python3
"""layer_time.py — quick steering timer of ldmoe.moe (the fused layer) against its roofline floor.

For each shape and token count: the layer captured in a CUDA graph, NCALL calls per replay, each
on another copy of the weights (rotated over copies whose touched bytes exceed L2 several times),
median over REPS replays; floor = max(touched experts' weight bytes / copy bandwidth, layer
FLOPs / dense bf16 GEMM rate), both measured in the same run (copy: a 1 GiB device-to-device
copy, read + write bytes; GEMM: torch.matmul 8192^3 bf16). Prints one line per case:
time (us), byte floor (us), FLOP floor (us), time / floor. --gemm-peer adds the layer's two expert
GEMMs alone by torch._grouped_mm (tokens already sorted by expert, no routing, SwiGLU,
gather or combine) in the same graph set-up, and their time / floor: what the strongest grouped
GEMM we can run reaches at that routing. --bmm-peer adds the same two GEMMs by cuBLAS batched
GEMMs (torch.bmm) over the T*k pairs spread evenly on the E experts: the vendor GEMM on the same
FLOPs with no routing imbalance at all, a floor no routed layer is expected to pass. The full benchmark with peers is
bench/moe/bench_layer.py; this one only steers development.

Usage: layer_time.py [--shapes qwen3,dsv2lite,mixtral] [--tokens 1,4,16,64,256,1024] [--layouts packed,plain]
                     [--fp8]   (weight-only FP8: e4m3 weights with 128 x 128 block scales; bytes halve)
                     [--fp8-tokens]   (--fp8 with tokens="fp8": w8a8 on the wgmma tiles; adds the
                                       FLOP floor at the dense FP8 rate, torch._scaled_mm 8192^3)
                     [--fp8-x]   (--fp8-tokens with x given in e4m3 and its 1 x 128 scales, x_scale)
                     [--gemm-peer] [--bmm-peer]   (bf16 only)
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernels", "moe"))
import ldmoe  # noqa: E402

SHAPES = {  # E, k, H, I
    "qwen3": (128, 8, 2048, 768),
    "dsv2lite": (64, 6, 2048, 1408),
    "mixtral": (8, 2, 4096, 14336),
}


def med(v):
    v = sorted(v)
    return v[len(v) // 2]


def copy_bw():
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    ts = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); b.copy_(a); e.record(); e.synchronize()
        ts.append(s.elapsed_time(e) * 1e-3)
    del a, b
    return 2 * n / med(ts)


def gemm_rate():
    n = 8192
    a = torch.randn((n, n), device="cuda", dtype=torch.bfloat16)
    b = torch.randn((n, n), device="cuda", dtype=torch.bfloat16)
    a @ b
    ts = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); a @ b; e.record(); e.synchronize()
        ts.append(s.elapsed_time(e) * 1e-3)
    return 2 * n ** 3 / med(ts)


def fp8_rate():
    n = 8192
    a = torch.randn((n, n), device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn((n, n), device="cuda").to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    mm = lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
    mm()
    ts = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); mm(); e.record(); e.synchronize()
        ts.append(s.elapsed_time(e) * 1e-3)
    return 2 * n ** 3 / med(ts)


def quant_blocks(w):
    """[E, R, K] bf16 -> e4m3 and fp32 scales [E, R/128, K/128] (amax / 448 per 128 x 128 block)."""
    E, R, K = w.shape
    b = w.float().view(E, R // 128, 128, K // 128, 128)
    s = (b.abs().amax(dim=(2, 4)) / 448.0).clamp(min=1e-12)
    return (b / s[:, :, None, :, None]).to(torch.float8_e4m3fn).view(E, R, K), s.contiguous()


def routing(gen, T, E, k):
    # uneven: expert popularity ~ softmax of a random logit vector (seeded), top-k without replacement
    logits = torch.randn(E, generator=gen) * 1.0
    p = torch.softmax(logits, 0)
    ids = torch.stack([torch.multinomial(p, k, replacement=False, generator=gen) for _ in range(T)])
    w = torch.rand((T, k), generator=gen) + 0.05
    return ids.int().cuda(), (w / w.sum(1, keepdim=True)).float().cuda()


def gemm_peer(ids, E, H, I, w13s, w2s, ncall, reps, bmm=False):
    """Seconds per call of the layer's two expert GEMMs by torch._grouped_mm: the routed tokens
    sorted by expert (made once, outside the timing), [T*k, H] x w13ᵀ then [T*k, I] x w2ᵀ, each call on
    the next weight copy, captured like the layer. bmm: by torch.bmm over ceil(T*k / E) tokens
    per expert (even routing)."""
    n = ids.numel()
    counts = torch.bincount(ids.flatten().long(), minlength=E)
    offs = torch.cumsum(counts, 0).to(torch.int32)
    if bmm:
        m = (n + E - 1) // E
        xs = torch.randn((E, m, H), device="cuda").to(torch.bfloat16)
        hs = torch.randn((E, m, I), device="cuda").to(torch.bfloat16)
    else:
        xs = torch.randn((n, H), device="cuda").to(torch.bfloat16)
        hs = torch.randn((n, I), device="cuda").to(torch.bfloat16)

    def two(w13, w2):
        if bmm:
            torch.bmm(xs, w13.transpose(-2, -1))
            torch.bmm(hs, w2.transpose(-2, -1))
        else:
            torch._grouped_mm(xs, w13.transpose(-2, -1), offs=offs)
            torch._grouped_mm(hs, w2.transpose(-2, -1), offs=offs)
    ncopy = len(w13s)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(ncopy):
            two(w13s[i], w2s[i])
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for i in range(ncall):
                two(w13s[i % ncopy], w2s[i % ncopy])
    torch.cuda.current_stream().wait_stream(s)
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        st.record(); g.replay(); en.record(); en.synchronize()
        ts.append(st.elapsed_time(en) * 1e-3 / ncall)
    del g
    return med(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="qwen3,dsv2lite,mixtral")
    ap.add_argument("--tokens", default="1,4,16,64,256,1024")
    ap.add_argument("--layouts", default="packed")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--fp8", action="store_true", help="e4m3 weights with 128 x 128 block scales (packed only)")
    ap.add_argument("--fp8-tokens", action="store_true", help="--fp8 with FP8 tokens (w8a8 on the wgmma tiles)")
    ap.add_argument("--fp8-x", action="store_true", help="--fp8-tokens with x given in e4m3 with its 1 x 128 scales")
    ap.add_argument("--gemm-peer", action="store_true", help="also time the two expert GEMMs alone by torch._grouped_mm")
    ap.add_argument("--bmm-peer", action="store_true", help="also time them by torch.bmm (cuBLAS) over evenly routed pairs")
    a = ap.parse_args()
    if a.reps < 1 or a.reps > 1000:
        ap.error("--reps: 1..1000")
    a.fp8_tokens = a.fp8_tokens or a.fp8_x
    a.fp8 = a.fp8 or a.fp8_tokens
    if (a.gemm_peer or a.bmm_peer) and a.fp8:
        ap.error("--gemm-peer and --bmm-peer are bf16 only")
    bw, fl = copy_bw(), gemm_rate()
    fl8 = fp8_rate() if a.fp8_tokens else 0.0
    if fl8:
        print("# dense FP8 GEMM %.0f TFLOP/s (torch._scaled_mm 8192^3)" % (fl8 / 1e12))
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print("# %s: copy %.2f TB/s, bf16 GEMM %.0f TFLOP/s, L2 %d MB; %s" % (
        torch.cuda.get_device_name(), bw / 1e12, fl / 1e12, l2 >> 20, ldmoe.version()), flush=True)
    print("%-9s %-6s %5s %9s %9s %9s %7s%s" % ("shape", "layout", "T", "us", "byte_us", "flop_us", "x_floor",
                                            (" %9s %7s" % ("gemm_us", "gemm_x") if a.gemm_peer else "")
                                            + (" %9s %7s" % ("f8flop_us", "x_f8") if fl8 else "")
                                            + (" %9s %7s" % ("bmm_us", "bmm_x") if a.bmm_peer else "")))
    gen = torch.Generator().manual_seed(7)
    for name in a.shapes.split(","):
        E, k, H, I = SHAPES[name]
        per_expert = (2 * I * H + H * I) * (1 if a.fp8 else 2)
        free = torch.cuda.mem_get_info()[0]
        # bf16 copies are made first (FP8: quantized from them, 2 more bytes per weight alongside)
        ncopy = max(2, min(8, int(0.5 * free // ((2 * I * H + H * I) * (4 if a.fp8 else 2) * E))))
        w13s = [(torch.randn((E, 2 * I, H), device="cuda") * H ** -0.5).to(torch.bfloat16) for _ in range(ncopy)]
        w2s = [(torch.randn((E, H, I), device="cuda") * I ** -0.5).to(torch.bfloat16) for _ in range(ncopy)]
        for lay in a.layouts.split(","):
            sc = {}
            if lay == "packed" and a.fp8:
                Ws, SC = [], []
                for i in range(ncopy):
                    q13, s13 = quant_blocks(w13s[i])
                    q2, s2 = quant_blocks(w2s[i])
                    Ws.append((ldmoe.pack_moe(q13, q2, D=1), None))
                    SC.append({"w13_scale": s13, "w2_scale": s2, "tokens": "fp8" if a.fp8_tokens else "bf16"})
                    del q13, q2
            elif lay == "packed":
                Ws = [(ldmoe.pack_moe(w13s[i], w2s[i], D=1), None) for i in range(ncopy)]
            else:
                Ws = [(w13s[i], w2s[i]) for i in range(ncopy)]
            SC = SC if lay == "packed" and a.fp8 else [sc] * ncopy
            for T in [int(t) for t in a.tokens.split(",")]:
                x = torch.randn((T, H), device="cuda").to(torch.bfloat16)
                xkw = {}
                if a.fp8_x:   # x in e4m3, a scale per token and 128 k (amax / 448)
                    xb = x.float().view(T, H // 128, 128)
                    xs = (xb.abs().amax(dim=2) / 448.0).clamp(min=1e-12)
                    x = (xb / xs[:, :, None]).to(torch.float8_e4m3fn).view(T, H)
                    xkw = {"x_scale": xs.contiguous()}
                ids, wts = routing(gen, T, E, k)
                touched = len(set(ids.flatten().tolist()))
                bytes_ = touched * per_expert
                ncall = max(ncopy, min(64, ncopy * max(1, int(3 * l2 // max(bytes_ * ncopy, 1)) + 1)))
                out = torch.empty((T, H), device="cuda", dtype=torch.bfloat16)
                ldmoe.moe_reserve(T, E, H, I, k)
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    ldmoe.moe_reserve(T, E, H, I, k)
                    for i in range(ncopy):
                        ldmoe.moe(x, Ws[i][0], Ws[i][1], ids, wts, out=out, **SC[i], **xkw)
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g, stream=s):
                        for i in range(ncall):
                            ldmoe.moe(x, Ws[i % ncopy][0], Ws[i % ncopy][1], ids, wts, out=out, **SC[i % ncopy], **xkw)
                torch.cuda.current_stream().wait_stream(s)
                g.replay()
                torch.cuda.synchronize()
                ts = []
                for _ in range(a.reps):
                    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    st.record(); g.replay(); en.record(); en.synchronize()
                    ts.append(st.elapsed_time(en) * 1e-3 / ncall)
                t = med(ts)
                bf = bytes_ / bw
                ff = T * k * (2 * H * 2 * I + 2 * I * H) / fl
                extra = ""
                if fl8:   # the FLOP floor at the FP8 rate (the byte floor as before)
                    f8 = T * k * (2 * H * 2 * I + 2 * I * H) / fl8
                    extra = " %9.1f %7.2f" % (f8 * 1e6, t / max(bf, f8))
                if a.gemm_peer:
                    tg = gemm_peer(ids, E, H, I, w13s, w2s, ncall, a.reps)
                    extra = " %9.1f %7.2f" % (tg * 1e6, tg / max(bf, ff))
                if a.bmm_peer:
                    tb = gemm_peer(ids, E, H, I, w13s, w2s, ncall, a.reps, bmm=True)
                    extra += " %9.1f %7.2f" % (tb * 1e6, tb / max(bf, ff))
                print("%-9s %-6s %5d %9.1f %9.1f %9.1f %7.2f%s" % (name, lay, T, t * 1e6, bf * 1e6, ff * 1e6,
                                                                   t / max(bf, ff), extra), flush=True)
                del g
        del w13s, w2s, Ws
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
