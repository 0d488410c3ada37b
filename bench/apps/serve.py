#!/usr/bin/env python3
"""serve.py — a PyTorch MoE serving loop (Mixtral-like) for A/B runs under ldshim.

Random, seeded weights; per layer RMSNorm + grouped-query attention with a KV cache + a
top-k softmax router whose tokens are grouped by expert and run through two grouped GEMMs
(w13: [E, 2*ffn, hidden], gate rows 0..ffn-1 then up rows ffn..2*ffn-1 of every expert, as
serving engines fuse them; w2: [E, hidden, ffn]) with SwiGLU (silu(gate) * up) between
them; each token's expert outputs are multiplied by its routing weights in fp32 and summed
in fp32 (moe_grouped). With --backend ldmoe --moe fused the whole expert part is one call
of libldmoe's fused layer, ldmoe.moe (moe_fused). One prefill step over
batch x prefill-tokens, then batched greedy decode steps. Prints, for ldshim-ab:

    prefill: 45.600 ms  179650.1 tok/s  (...)
    decode: 2.012 ms/step  15904.6 tok/s  (...)
    busy: 96.8 % of the decode step (...)

Decode is shaped the way serving engines keep it GPU-bound: attention reads the whole
preallocated KV cache (maximum length) under a mask built from per-sequence lengths held
in a device tensor, so every step has the same shapes and nothing is re-planned; the step
(model, next-token choice, cache and length updates) is captured once as a CUDA graph and
replayed (--no-graphs: run it eagerly). --attention dynamic keeps the older eager path
(SDPA over the cache so far, a new shape every step). Prefill is eager.

decode ms/step is the median of per-step times: CUDA events around each step on a GPU,
the wall clock on the CPU. busy is the share of the timed median step the GPU spent in
kernels, their time taken from torch.profiler over a few extra steps after the timed ones
(the profiled steps' own span is longer, since tracing widens the gaps between a graph's
kernels; the line gives that share too; on the CPU, the operators' share of that span). --profile also prints a
per-kernel breakdown of one step. generated: is a crc32 of every token the timed steps
chose, to compare runs.

LDSHIM_AB_BARRIER=DIR:N[:SECONDS] (set by bench/ab/per_domain.py, which runs several
instances at once): after its warm-up each instance creates a file in DIR and waits until N
are there (at most SECONDS, default 300), so that the instances' timed passes overlap.

Expert weights are one tensor per layer per matrix, allocated before anything else, so
each is one cudaMalloc of a distinctive size a policy can tag (--print-sizes lists them;
the default sizes are multiples of 2 MiB, so PyTorch's caching allocator asks cudaMalloc
for exactly these sizes). Not modelled: rotary embeddings, sampling other than greedy.

Backends for the expert GEMMs: torch (torch._grouped_mm, default), ldmoe (the project's
kernels/moe/ldmoe.py over libldmoe.so; --moe fused, the default where it runs: ldmoe.moe, one
call from the routing to the combined output; --moe grouped, the default with split or fp8
weights: its grouped GEMM in the same layer as the torch backend), loop (one matmul per expert; reference, CPU). The router (GEMM, softmax,
top-k, renormalized weights) is the same code in every backend.
Weight layouts: plain [E, N, K], split [D, E, N/D, K], or packed (libldmoe's own, ldmoe.pack;
--backend ldmoe only; with --moe fused the fused layer's own, ldmoe.pack_moe, which keeps the
plain shapes and bytes). split and packed keep slice d in the d-th 1/D of each weight tensor,
which is what a split placement homes in domain d. --moe fused takes plain or packed bf16
weights, or packed fp8 (not split).

--dtype fp8: the expert weights in float8 e4m3 with a scale per output channel (rowwise),
quantized once at load; before every expert GEMM the tokens are quantized the same way, one
scale per token; everything else stays bf16 (fp32 on the CPU). The torch backend runs
torch._scaled_grouped_mm on tokens quantized by torch's eager ops; ldmoe hands the bf16 tokens
to ldmoe.grouped_mm_fp8, which quantizes them in one kernel and runs libldmoe's FP8 tiles
(compute capability 9.0); --moe fused (--layout packed) hands them to ldmoe.moe with
tokens="fp8", which quantizes x and h per token and 64 k where its w8a8 tiles run and keeps
bf16 tokens in its decode tiles; loop the dequantized reference (x8*sx) @ (w8*sw)^T per
expert, which is also the CPU path.
"""

import argparse
import inspect
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import zlib

MiB = 1 << 20
PROG = "serve.py"


def meet_barrier(spec):
    """LDSHIM_AB_BARRIER=DIR:N[:SECONDS]: announce this process in DIR and wait until N
    processes have (or the timeout passes: then say so and go on). Returns whether all met."""
    parts = spec.split(":")
    try:
        d, n = parts[0], int(parts[1])
        limit = float(parts[2]) if len(parts) > 2 else 300.0
    except (IndexError, ValueError):
        sys.stderr.write("%s: warning: ignoring LDSHIM_AB_BARRIER=%r (expected DIR:N[:SECONDS])\n"
                         % (PROG, spec))
        return False
    try:
        with open(os.path.join(d, "%d" % os.getpid()), "w"):
            pass
    except OSError as e:
        sys.stderr.write("%s: warning: barrier %s: %s; not waiting\n" % (PROG, d, e.strerror))
        return False
    t_end = time.monotonic() + limit
    while True:
        try:
            if len(os.listdir(d)) >= n:
                return True
        except OSError:
            return False
        if time.monotonic() > t_end:
            sys.stderr.write("%s: warning: barrier %s: %d of %d processes after %gs; going on\n"
                             % (PROG, d, len(os.listdir(d)), n, limit))
            return False
        time.sleep(0.005)


def fail(msg, code=2):
    sys.stderr.write("%s: %s\n" % (PROG, msg))
    sys.exit(code)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog=PROG,
        description="MoE serving loop (prefill + batched decode) for ldshim A/B runs. "
                    "Defaults: Mixtral-like layers (hidden 4096, ffn 14336, 8 experts, top-2, "
                    "32 heads, 8 KV heads), 2 layers (~6 GiB).",
        epilog="Example: ldshim-ab --policy policy/examples/serve.policy --metric "
               "'decode: ([0-9.]+) ms/step' --lower-is-better -- python3 bench/apps/serve.py")
    p.add_argument("--layers", type=int, default=2, help="transformer layers (default 2)")
    p.add_argument("--experts", type=int, default=8, help="experts per layer (default 8)")
    p.add_argument("--topk", type=int, default=2, help="experts per token (default 2)")
    p.add_argument("--hidden", type=int, default=4096, help="model width (default 4096)")
    p.add_argument("--ffn", type=int, default=14336, help="expert FFN width (default 14336)")
    p.add_argument("--heads", type=int, default=32, help="attention heads (default 32)")
    p.add_argument("--kv-heads", type=int, default=8, help="KV heads (default 8)")
    p.add_argument("--vocab", type=int, default=32000, help="vocabulary (default 32000)")
    p.add_argument("--no-attention", action="store_true",
                   help="MoE layers only (no attention, no KV cache)")
    p.add_argument("--batch", type=int, default=32, help="sequences decoded together (32)")
    p.add_argument("--prefill-tokens", type=int, default=256,
                   help="prompt tokens per sequence (default 256)")
    p.add_argument("--steps", type=int, default=32, help="timed decode steps (default 32)")
    p.add_argument("--warmup-steps", type=int, default=4,
                   help="untimed decode steps after an untimed prefill (default 4)")
    p.add_argument("--backend", choices=("torch", "ldmoe", "loop"), default="torch",
                   help="expert GEMMs: torch._grouped_mm (default), ldmoe, or a per-expert loop")
    p.add_argument("--layout", choices=("plain", "split", "packed"), default="plain",
                   help="expert weight layout: plain [E, N, K] (default), split "
                        "[D, E, N/D, K] (slice d = the half of every expert's rows homed in "
                        "domain d under a split placement; same bytes as plain), or packed "
                        "(libldmoe's layout, its fastest at decode; --backend ldmoe only; "
                        "slices as in split; the same bytes as plain when N/D is a multiple "
                        "of 128 and K of 256, as with the defaults)")
    p.add_argument("--domains", type=int, default=2,
                   help="D of --layout split or packed (default 2)")
    p.add_argument("--moe", choices=("grouped", "fused"), default=None,
                   help="MoE layer of --backend ldmoe: fused (ldmoe.moe: the routed experts in "
                        "one library call; bf16 with --layout plain or packed, fp8 with packed; "
                        "the default but with split or fp8) or grouped (sort, gather, the "
                        "grouped GEMMs over w13 and w2, SwiGLU, combine, as the torch backend; "
                        "the default with --layout split or --dtype fp8)")
    p.add_argument("--ldmoe-mode", choices=("auto", "aware", "unaware", "static"),
                   default="auto", help="scheduling mode of --backend ldmoe (default auto: "
                   "what the shim publishes for the state)")
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu "
                   "(tiny functional runs; float32 unless --dtype)")
    p.add_argument("--dtype", choices=("bf16", "fp32", "fp8"), default=None,
                   help="weights/activations (default bf16 on CUDA, fp32 on CPU); fp8: expert "
                        "weights float8 e4m3 with rowwise scales, quantized once at load, tokens "
                        "quantized per token before each expert GEMM, the rest bf16 (fp32 on CPU)")
    p.add_argument("--seed", type=int, default=0, help="weight and prompt seed (default 0)")
    p.add_argument("--check", action="store_true",
                   help="before timing, compare the backend against the loop reference on "
                        "layer 0 and fail on a mismatch")
    p.add_argument("--attention", choices=("static", "dynamic"), default=None,
                   help="decode attention: static (default; the whole KV cache of the maximum "
                        "length under a mask from per-sequence lengths held on the device: the "
                        "same shapes every step) or dynamic (SDPA over the cache so far: a new "
                        "shape every step, eager only; the older path, for comparison)")
    p.add_argument("--graphs", dest="graphs", action="store_true", default=None,
                   help="capture the decode step once as a CUDA graph and replay it (default "
                        "on a CUDA device with static attention and --backend torch or ldmoe)")
    p.add_argument("--no-graphs", dest="graphs", action="store_false",
                   help="run the decode step eagerly (the default on the CPU, with "
                        "--attention dynamic and with --backend loop)")
    p.add_argument("--profile", action="store_true",
                   help="also print a per-kernel breakdown of one decode step (torch.profiler; "
                        "on the CPU: per operator)")
    p.add_argument("--no-busy", action="store_true",
                   help="skip the profiled steps that measure the busy fraction (no busy line; "
                        "for a PyTorch without a working profiler)")
    p.add_argument("--print-sizes", action="store_true",
                   help="print the allocation sizes (expert weights first) and what "
                        "cudaMalloc sees for each, then exit; needs no GPU or torch")
    a = p.parse_args(argv)
    for name in ("layers", "experts", "topk", "hidden", "ffn", "heads", "kv_heads", "vocab",
                 "batch", "prefill_tokens", "steps", "domains"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    if a.warmup_steps < 0:
        p.error("--warmup-steps must be 0 or more")
    if a.topk > a.experts:
        p.error("--topk (%d) cannot exceed --experts (%d)" % (a.topk, a.experts))
    if not a.no_attention and (a.hidden % a.heads or a.heads % a.kv_heads):
        p.error("--hidden must be a multiple of --heads, and --heads of --kv-heads")
    if a.layout != "plain" and (a.ffn % a.domains or a.hidden % a.domains):
        p.error("--layout %s needs --ffn and --hidden divisible by --domains" % a.layout)
    on_cpu = a.device.split(":")[0] == "cpu"
    if a.attention is not None and a.no_attention:
        p.error("--attention has no effect with --no-attention")
    a.attention = a.attention or "static"
    if a.graphs:
        # Refused rather than quietly turned off: a run asked for graphs must time graphs.
        if on_cpu:
            p.error("--graphs needs a CUDA device (a CUDA graph records GPU work); on the CPU "
                    "the decode step runs eagerly, as with --no-graphs")
        if a.attention == "dynamic" and not a.no_attention:
            p.error("--graphs needs --attention static: dynamic attention changes shape every "
                    "step, so one captured graph cannot replay it")
        if a.backend == "loop":
            p.error("--backend loop reads the expert offsets on the host in every GEMM, which a "
                    "CUDA graph cannot capture: use --no-graphs")
    elif a.graphs is None:
        a.graphs = not on_cpu and a.backend != "loop" and (a.no_attention or
                                                           a.attention == "static")
    if a.dtype == "fp8":
        if on_cpu and a.backend != "loop":
            p.error("--dtype fp8 on the CPU runs the dequantized reference: use --backend loop "
                    "(torch._scaled_grouped_mm and libldmoe's FP8 tiles need a CUDA GPU)")
        if a.hidden % 16 or a.ffn % 16:
            p.error("--dtype fp8 needs --hidden and --ffn divisible by 16 (e4m3 rows of 16-byte chunks)")
    if a.moe is not None and a.backend != "ldmoe":
        p.error("--moe %s is a choice of --backend ldmoe" % a.moe)
    if a.backend == "ldmoe" and a.moe is None:
        # the fused layer where it runs (bf16, plain or packed weights), else the grouped GEMM
        a.moe = "fused" if a.layout != "split" and a.dtype not in ("fp8", "fp32") and not on_cpu else "grouped"
    if a.moe == "fused":
        if a.layout == "split":
            p.error("--moe fused takes --layout plain or packed (libldmoe's fused layer reads "
                    "plain weights or its own packed layout, not split ones)")
        if a.dtype == "fp32":
            p.error("--moe fused runs bf16 or fp8 weights (use --moe grouped for --dtype fp32)")
        if a.dtype == "fp8" and a.layout != "packed":
            p.error("--moe fused --dtype fp8 needs --layout packed (the fused layer reads e4m3 "
                    "weights in its packed layout only)")
        if a.dtype == "fp8" and (a.hidden % 128 or a.ffn % 128):
            p.error("--moe fused --dtype fp8 needs --hidden and --ffn divisible by 128 (the "
                    "fused layer's FP8 tiles)")
    if a.layout == "packed":
        if a.backend != "ldmoe":
            p.error("--layout packed is libldmoe's layout: it needs --backend ldmoe")
        if a.dtype == "fp32" or a.device == "cpu":
            p.error("--layout packed needs bf16 or fp8 weights on a CUDA device")
        if a.domains > 8:
            p.error("--layout packed takes at most 8 --domains")
    return a


# ----------------------------------------------------------------------------- sizes

def torch_segment_bytes(nbytes):
    """What PyTorch's CUDA caching allocator asks cudaMalloc for when a request of `nbytes`
    finds no cached block (c10/cuda/CUDACachingAllocator.cpp, expandable_segments off):
    requests are rounded up to 512 B; <= 1 MiB come from a shared 2 MiB segment, < 10 MiB
    from a shared 20 MiB segment, larger ones get their own segment rounded up to 2 MiB.
    Returns (segment bytes, shared?)."""
    rounded = max(512, (nbytes + 511) // 512 * 512)
    if rounded <= 1 * MiB:
        return 2 * MiB, True
    if rounded < 10 * MiB:
        return 20 * MiB, True
    return (rounded + 2 * MiB - 1) // (2 * MiB) * (2 * MiB), False


def packed_bytes(E, N, K, D, fp8=False):
    """Bytes of libldmoe's packed layout (ldmoe_packed_bytes, ldmoe_tiles.h): boxes of 128 rows
    x 64 k of bf16, ceil(N/D/128) row blocks per slice and expert, k blocks padded to a multiple
    of 4; e4m3 weights (ldmoe_packed_bytes_fp8) pack as the bf16 layout of the same bytes (K/2).
    Here so that --print-sizes needs no GPU; Model checks it against the library."""
    if fp8:
        K //= 2
    return D * E * -(-(N // D) // 128) * (-(-K // 256) * 4) * 16384


def model_elem(a):
    """Bytes per element of the non-expert tensors (and of the expert weights but with fp8)."""
    return 4 if (a.dtype == "fp32" or (a.dtype in (None, "fp8") and a.device.split(":")[0] == "cpu")) else 2


def expert_weight_shape(a, n, k):
    """(shape, bytes) of one expert weight tensor [E, n, k] in --layout (packed: uint8 bytes)."""
    E, D = a.experts, a.domains
    fp8 = a.dtype == "fp8"
    elem = 1 if fp8 else model_elem(a)
    if a.layout == "packed" and a.moe == "fused":   # ldmoe.pack_moe: plain shapes, bf16 or e4m3
        return [E, n, k], E * n * k * (1 if fp8 else 2)
    if a.layout == "packed":
        nbytes = packed_bytes(E, n, k, D, fp8)
        return [nbytes], nbytes
    return ([E, n, k] if a.layout == "plain" else [D, E, n // D, k]), E * n * k * elem


def expert_weights(F, H):
    """(name, N, K) of a layer's expert weights [E, N, K], in allocation order: w13 (gate and
    up fused: rows 0..F-1 gate, F..2F-1 up) and w2."""
    return (("w13", 2 * F, H), ("w2", H, F))


EXPERT_NAMES = ("w13", "w2")


def allocation_plan(a):
    """[(name, shape, bytes)] of the persistent tensors in allocation order."""
    elem = model_elem(a)
    E, H, F = a.experts, a.hidden, a.ffn
    plan = []
    for w, n, k in expert_weights(F, H):   # as Model allocates them
        for layer in range(a.layers):
            shape, nbytes = expert_weight_shape(a, n, k)
            plan.append(("layer%d.%s" % (layer, w), shape, nbytes))
    if a.dtype == "fp8":   # fp32 scales per output channel, in the weights' row order
        for w, n, _ in expert_weights(F, H):
            for layer in range(a.layers):
                # a scale per weight row: [E, n] plain and for the fused layer, else by slice
                shape = [E, n] if a.layout == "plain" or a.moe == "fused" else [a.domains, E, n // a.domains]
                plan.append(("layer%d.%s_scale" % (layer, w), shape, E * n * 4))
    plan.append(("embed", [a.vocab, H], a.vocab * H * elem))
    plan.append(("lm_head", [a.vocab, H], a.vocab * H * elem))
    if not a.no_attention:
        hd = H // a.heads
        maxlen = a.prefill_tokens + max(a.steps, a.warmup_steps)
        for layer in range(a.layers):
            plan.append(("layer%d.wq" % layer, [H, H], H * H * elem))
            plan.append(("layer%d.wk" % layer, [a.kv_heads * hd, H], a.kv_heads * hd * H * elem))
            plan.append(("layer%d.wv" % layer, [a.kv_heads * hd, H], a.kv_heads * hd * H * elem))
            plan.append(("layer%d.wo" % layer, [H, H], H * H * elem))
            kv = a.batch * a.kv_heads * maxlen * hd * elem
            plan.append(("layer%d.k_cache" % layer, [a.batch, a.kv_heads, maxlen, hd], kv))
            plan.append(("layer%d.v_cache" % layer, [a.batch, a.kv_heads, maxlen, hd], kv))
    return plan


def fmt_bytes(n):
    return "%d MiB" % (n // MiB) if n % MiB == 0 else "%.2f MiB" % (n / MiB)


def print_sizes(a):
    plan = allocation_plan(a)
    print("# allocation sizes, in allocation order (expert weights first)")
    print("# %-16s %-24s %14s %12s  %s" % ("tensor", "shape", "bytes", "", "cudaMalloc sees"))
    expert_sizes = []
    for name, shape, nbytes in plan:
        seg, shared = torch_segment_bytes(nbytes)
        sees = ("part of a shared %s segment" % fmt_bytes(seg)) if shared else \
            ("%d (%s)" % (seg, fmt_bytes(seg)))
        print("  %-16s %-24s %14d %12s  %s" % (name, "x".join(map(str, shape)), nbytes,
                                               fmt_bytes(nbytes), sees))
        if ".w" in name and name.split(".")[1] in EXPERT_NAMES:
            expert_sizes.append(seg)
    print("# expert weights: %d tensors; policy sizes (what cudaMalloc sees):"
          % len(expert_sizes))
    for s in sorted(set(expert_sizes)):
        print("expert-size: %d  # %s" % (s, fmt_bytes(s)))
    others = {torch_segment_bytes(n)[0] for nm, _, n in plan if nm.split(".")[-1]
              not in EXPERT_NAMES}
    clash = sorted(set(expert_sizes) & others)
    if clash:
        print("# warning: other tensors share the expert size(s) %s; a size rule would tag "
              "them too (use occurrence = ...)" % ", ".join(fmt_bytes(c) for c in clash))


# ----------------------------------------------------------------------------- model

def import_torch():
    """torch, imported late so --help and --print-sizes work without it."""
    try:
        import torch
    except ImportError as e:
        fail("PyTorch is not installed (%s); install it (pip install torch) to run the "
             "serving loop (--print-sizes and --help work without it)" % e)
    return torch


def load_ldmoe():
    here = os.path.dirname(os.path.abspath(__file__))
    moe_dir = os.path.normpath(os.path.join(here, "..", "..", "kernels", "moe"))
    if os.path.isdir(moe_dir) and moe_dir not in sys.path:
        sys.path.insert(0, moe_dir)
    try:
        import ldmoe
    except Exception as e:  # noqa: BLE001 - ImportError, OSError from a missing .so, ...
        fail("--backend ldmoe is unavailable: cannot import ldmoe (%s: %s); build "
             "libldmoe.so with `make` and run from the checkout (kernels/moe/ldmoe.py), or "
             "use --backend torch" % (type(e).__name__, e))
    if not hasattr(ldmoe, "grouped_mm"):
        fail("--backend ldmoe: the ldmoe module has no grouped_mm()")
    return ldmoe


class Gemm:
    """Expert GEMM y[t] = x[t] . W[e(t)]^T over tokens grouped by expert.

    `w` is [E, N, K] (plain), [D, E, N/D, K] (split) or ldmoe.PackedWeights (packed); `offs`
    int32 cumulative end offsets of each expert's rows in x (as torch._grouped_mm takes them)."""

    def __init__(self, torch, backend, layout, ldmoe_mode="auto", moe=None):
        self.torch, self.backend, self.layout = torch, backend, layout
        self.ldmoe = load_ldmoe() if backend == "ldmoe" else None
        self.ldmoe_mode = ldmoe_mode
        self.moe = moe if backend == "ldmoe" else None
        if self.moe == "fused" and not hasattr(self.ldmoe, "moe"):
            fail("--moe fused: this ldmoe (%s) has no moe(), libldmoe's fused layer; use --moe "
                 "grouped" % getattr(self.ldmoe, "__file__", "?"))

    def fused(self, h, topv, topi, w13, w2):
        """The routed experts in one call of libldmoe's fused layer (--moe fused): routing
        weights applied in its GEMM2 epilogue, the k rows of a token summed in a fixed order."""
        kw = {}
        if isinstance(w13, tuple):   # --dtype fp8: (packed e4m3, scales per weight row); w8a8
            (w13, kw["w13_scale"]), (w2, kw["w2_scale"]) = w13, w2
            kw["tokens"] = "fp8"
        return self.ldmoe.moe(h.contiguous(), w13, w2, topi.to(self.torch.int32).contiguous(),
                              topv.contiguous(), mode=self.ldmoe_mode, **kw)

    def __call__(self, x, w, offs):
        t = self.torch
        if isinstance(w, tuple):   # --dtype fp8: (e4m3 weights, their rowwise scales)
            return self.fp8(x, w[0], w[1], offs)
        if self.backend == "ldmoe":
            # mode auto: the kernel follows the map the shim published (aware in state full).
            layout = {"plain": "plain", "split": "localized", "packed": "packed"}[self.layout]
            return self.ldmoe.grouped_mm(x, w, offs, mode=self.ldmoe_mode, layout=layout)
        if self.layout == "split":
            # One GEMM per domain slice; slice d produces columns [d*N/D, (d+1)*N/D).
            return t.cat([self._plain(x, w[d], offs) for d in range(w.shape[0])], dim=1)
        return self._plain(x, w, offs)

    def _plain(self, x, w, offs):
        if self.backend == "torch":
            return self.torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
        return loop_grouped_mm(self.torch, x, w, offs)

    def fp8(self, x, w8, ws, offs):
        """Expert GEMM with e4m3 weights w8 (in --layout) and rowwise scales ws (same row
        order): the tokens are quantized per token (by libldmoe inside the call on the ldmoe
        backend, ldmoe.quantize_fp8; by torch's eager ops otherwise), the output is x's dtype."""
        t = self.torch
        if self.backend == "ldmoe":
            layout = {"plain": "plain", "split": "localized", "packed": "packed"}[self.layout]
            y = self.ldmoe.grouped_mm_fp8(x.to(t.bfloat16).contiguous(), w8, offs, None, ws, scaling="rowwise",
                                          mode=self.ldmoe_mode, layout=layout)
            return y.to(x.dtype)
        x8, xs = quantize_rowwise(t, x)
        if self.layout == "split":
            y = t.cat([self._plain_fp8(x8, xs, w8[d], ws[d], offs) for d in range(w8.shape[0])], dim=1)
        else:
            y = self._plain_fp8(x8, xs, w8, ws, offs)
        return y.to(x.dtype)

    def _plain_fp8(self, x8, xs, w8, ws, offs):
        if self.backend == "torch":
            return self.torch._scaled_grouped_mm(x8, w8.transpose(-2, -1), xs, ws, offs=offs,
                                                 out_dtype=self.torch.bfloat16)
        # The dequantized reference: exact e4m3 values times their scales, in fp32 (by
        # blocks of rows: no whole expert weight in fp32, see rows_fp32).
        xd = x8.float() * xs.unsqueeze(1)
        ends = offs.tolist()
        out = xd.new_empty((xd.shape[0], w8.shape[-2]))
        start = 0
        for e, end in enumerate(ends):
            if end > start:
                out[start:end] = matmul_rows(self.torch, xd[start:end], w8[e], ws[e])
            start = end
        return out


def quantize_rowwise(torch, t):
    """(float8_e4m3fn q, fp32 scale) of t [..., K]: one scale per row, the row's amax -> 448
    (an all-zero row gets scale 1). As ldmoe.quantize_rowwise, without needing ldmoe."""
    tf = t.float()
    amax = tf.abs().amax(dim=-1)
    scale = torch.where(amax > 0, amax * (1.0 / 448.0), torch.ones_like(amax))
    return (tf / scale.unsqueeze(-1)).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), scale


def untagged(torch, shape, dtype, dev):
    """An empty tensor of `shape` that is a view of a buffer 2 MiB larger: a temporary of a weight's
    size that no size rule of a policy tags (and whose cached block PyTorch cannot hand to a
    weight of that size while it is held)."""
    n = math.prod(shape) * torch.tensor([], dtype=dtype).element_size()
    return torch.empty(n + 2 * MiB, device=dev, dtype=torch.uint8)[:n].view(dtype).view(shape)


def quantize_rowwise_into(torch, t, q):
    """quantize_rowwise of t [..., K] into q (float8_e4m3fn, t's shape), the same values, with no
    temporary of t's size: rows go through fp32 about 512 KiB at a time (a row at a time where
    one is larger). Returns the fp32 scales."""
    amax = torch.maximum(t.amax(dim=-1), -t.amin(dim=-1)).float()
    scale = torch.where(amax > 0, amax * (1.0 / 448.0), torch.ones_like(amax))
    K = t.shape[-1]
    t2, q2, s1 = t.reshape(-1, K), q.view(-1, K), scale.reshape(-1)
    step = max(1, (512 * 1024) // (4 * K))
    for r in range(0, t2.shape[0], step):
        q2[r:r + step].copy_((t2[r:r + step].float() / s1[r:r + step, None]).clamp(-448.0, 448.0))
    return scale


def loop_grouped_mm(torch, x, w, offs):
    """Reference: one matmul per expert (syncs on offs; for checks and the CPU)."""
    ends = offs.tolist()
    out = x.new_empty((x.shape[0], w.shape[-2]))
    start = 0
    for e, end in enumerate(ends):
        if end > start:
            out[start:end] = x[start:end] @ w[e].transpose(0, 1)
        start = end
    return out


class Model:
    def __init__(self, torch, a, dev, dtype):
        self.t, self.a, self.dev, self.dtype = torch, a, dev, dtype
        g = torch.Generator(device=dev)
        g.manual_seed(a.seed)
        E, H, F = a.experts, a.hidden, a.ffn
        # Expert weights first, all allocated before any is initialized: each is then a
        # fresh cudaMalloc of its exact size (no temporary can be cached and split for it).
        packed = a.layout == "packed"
        fp8 = a.dtype == "fp8"
        wdtype = torch.uint8 if packed else torch.float8_e4m3fn if fp8 else dtype

        def alloc(n, k):
            shape, _ = expert_weight_shape(a, n, k)
            return torch.empty(shape, device=dev, dtype=wdtype)
        # --moe fused --layout packed: ldmoe.pack_moe allocates the packed tensors itself; they
        # are made below, layer by layer, before anything but the temporaries they are drawn in.
        fused_packed = packed and a.moe == "fused"
        self.w13 = [None if fused_packed else alloc(2 * F, H) for _ in range(a.layers)]
        self.w2 = [None if fused_packed else alloc(H, F) for _ in range(a.layers)]
        # packed (and fp8): layer 0's weights as drawn, plain [E, N, K] (fp8: (e4m3, scales)),
        # for the reference of --check.
        self.ref_w13 = self.ref_w2 = None
        # Each expert weight is drawn from a generator of its own (seed, name, layer): the same
        # values whatever the layout, the backend or the order in which they are drawn.
        self.wgen = lambda name, layer: torch.Generator(device=dev).manual_seed(
            zlib.crc32(("%d:%s:%d" % (a.seed, name, layer)).encode()))
        if fp8:
            self.init_fp8(torch, a, dev, dtype)
        elif packed:
            # Drawn as plain [E, n, k] in a temporary, then packed (into the buffer allocated
            # above; --moe fused: by ldmoe.pack_moe into tensors of its own). The temporaries
            # are untagged().
            ldmoe = load_ldmoe()
            for name, n, k in expert_weights(F, H):
                if not fused_packed and \
                        ldmoe.packed_bytes(E, n, k, a.domains) != getattr(self, name)[0].numel():
                    fail("packed size mismatch with libldmoe for E=%d N=%d K=%d D=%d"
                         % (E, n, k, a.domains), 1)
            for layer in range(a.layers):
                plain = {}
                for name, n, k in expert_weights(F, H):
                    plain[name] = untagged(torch, (E, n, k), dtype, dev)
                    plain[name].normal_(0.0, 1.0 / math.sqrt(k), generator=self.wgen(name, layer))
                    if not fused_packed:
                        getattr(self, name)[layer] = ldmoe.pack(plain[name], a.domains,
                                                                out=getattr(self, name)[layer])
                if fused_packed:
                    self.w13[layer], self.w2[layer] = pack_fused(ldmoe, plain["w13"], plain["w2"],
                                                                 a.domains)
                    for name, n, k in expert_weights(F, H):
                        w = getattr(self, name)[layer]
                        w = getattr(w, name, w)        # the tensor a MoePacked holds
                        if w.numel() * w.element_size() != expert_weight_shape(a, n, k)[1]:
                            fail("ldmoe.pack_moe made %s of %d bytes, not the %d that "
                                 "--print-sizes lists" % (name, w.numel() * w.element_size(),
                                                          expert_weight_shape(a, n, k)[1]), 1)
                if layer == 0 and a.check:
                    self.ref_w13, self.ref_w2 = plain["w13"], plain["w2"]
                del plain
        else:
            for name, _, k in expert_weights(F, H):
                for layer, w in enumerate(getattr(self, name)):
                    w.normal_(0.0, 1.0 / math.sqrt(k), generator=self.wgen(name, layer))
        self.embed = torch.empty((a.vocab, H), device=dev, dtype=dtype).normal_(0, 1, generator=g)
        self.lm_head = torch.empty((a.vocab, H), device=dev, dtype=dtype).normal_(
            0, 1.0 / math.sqrt(H), generator=g)
        self.gate = [torch.empty((E, H), device=dev, dtype=dtype).normal_(
            0, 1.0 / math.sqrt(H), generator=g) for _ in range(a.layers)]
        self.attn = []
        # Positions a decode pass can reach: every pass (warm-up, timed, profiled) starts
        # again from a fresh prefill and runs at most this many steps.
        self.maxlen = a.prefill_tokens + max(a.steps, a.warmup_steps)
        if not a.no_attention:
            hd = H // a.heads
            self.hd = hd
            for _ in range(a.layers):
                def lin(n, k):
                    return torch.empty((n, k), device=dev, dtype=dtype).normal_(
                        0, 1.0 / math.sqrt(k), generator=g)
                kv = (a.batch, a.kv_heads, self.maxlen, hd)
                self.attn.append(dict(
                    wq=lin(H, H), wk=lin(a.kv_heads * hd, H), wv=lin(a.kv_heads * hd, H),
                    wo=lin(H, H), k=torch.zeros(kv, device=dev, dtype=dtype),
                    v=torch.zeros(kv, device=dev, dtype=dtype)))
        self.positions = torch.arange(self.maxlen, device=dev)
        self.gen = g

    def init_fp8(self, torch, a, dev, dtype):
        """--dtype fp8: the scales after the weight buffers (allocation_plan's order), then each
        weight drawn in an untagged() temporary of the model dtype, quantized rowwise and stored in
        its buffer in --layout; self.wX[layer] becomes (e4m3 weights, scales in the same row order).
        --moe fused: init_fp8_fused."""
        E, H, F, D = a.experts, a.hidden, a.ffn, a.domains
        if a.moe == "fused":
            return self.init_fp8_fused(torch, a, dev, dtype)
        sshape = (lambda n: (E, n)) if a.layout == "plain" else (lambda n: (D, E, n // D))
        scales = {name: [torch.empty(sshape(n), device=dev, dtype=torch.float32) for _ in range(a.layers)]
                  for name, n, _ in expert_weights(F, H)}
        ldmoe = load_ldmoe() if a.layout == "packed" else None
        for name, n, k in expert_weights(F, H):
            ws, ref = getattr(self, name), "ref_" + name
            if ldmoe is not None and ldmoe.packed_bytes(E, n, k, D, torch.float8_e4m3fn) != ws[0].numel():
                fail("packed size mismatch with libldmoe for e4m3 E=%d N=%d K=%d D=%d" % (E, n, k, D), 1)
            for layer in range(a.layers):
                tmp = untagged(torch, (E, n, k), dtype, dev)
                tmp.normal_(0.0, 1.0 / math.sqrt(k), generator=self.wgen(name, layer))
                q = untagged(torch, (E, n, k), torch.float8_e4m3fn, dev)
                sc = quantize_rowwise_into(torch, tmp, q)
                del tmp
                s = scales[name][layer]
                if a.layout == "plain":
                    ws[layer].copy_(q)
                    s.copy_(sc)
                else:
                    s.copy_(sc.view(E, D, n // D).permute(1, 0, 2))
                    if a.layout == "split":
                        ws[layer].copy_(q.view(E, D, n // D, k).permute(1, 0, 2, 3))
                    else:
                        ws[layer] = ldmoe.pack(q, D, out=ws[layer])
                if layer == 0 and a.check and a.layout == "packed":
                    setattr(self, ref, (q, sc))
                ws[layer] = (ws[layer], s)
                del q, sc

    def init_fp8_fused(self, torch, a, dev, dtype):
        """--dtype fp8 --moe fused (--layout packed): layer by layer, w13 and w2 drawn as
        init_fp8 draws them, quantized rowwise into e4m3 temporaries, packed by
        ldmoe.pack_moe into tensors of its own; self.wX[layer] = (packed, scales [E, n]). As in
        the bf16 fused path, the temporaries are untagged() and all of a layer's are held while
        pack_moe allocates (so PyTorch's cache has no block to hand a weight)."""
        E, H, F = a.experts, a.hidden, a.ffn
        ldmoe = load_ldmoe()
        for layer in range(a.layers):
            q, sc = {}, {}
            for name, n, k in expert_weights(F, H):
                sc[name] = torch.empty((E, n), device=dev, dtype=torch.float32)
                tmp = untagged(torch, (E, n, k), dtype, dev)
                tmp.normal_(0.0, 1.0 / math.sqrt(k), generator=self.wgen(name, layer))
                q[name] = untagged(torch, (E, n, k), torch.float8_e4m3fn, dev)
                sc[name].copy_(quantize_rowwise_into(torch, tmp, q[name]))
                q[name + ".tmp"] = tmp
            self.w13[layer], self.w2[layer] = pack_fused(ldmoe, q["w13"], q["w2"], a.domains)
            for name, n, k in expert_weights(F, H):
                w = getattr(self, name)[layer]
                w = getattr(w, name, w)        # the tensor a MoePacked holds
                if w.numel() * w.element_size() != expert_weight_shape(a, n, k)[1]:
                    fail("ldmoe.pack_moe made %s of %d bytes, not the %d that --print-sizes "
                         "lists" % (name, w.numel() * w.element_size(), expert_weight_shape(a, n, k)[1]), 1)
                getattr(self, name)[layer] = (getattr(self, name)[layer], sc[name])
            if layer == 0 and a.check:
                self.ref_w13, self.ref_w2 = (q["w13"], sc["w13"]), (q["w2"], sc["w2"])
            del q

    @staticmethod
    def rms(t, x):
        xf = x.float()
        return (xf * t.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype)

    def attention(self, layer, h, pos, ntok):
        """h: [B*ntok, H] at positions pos..pos+ntok-1 of every sequence."""
        t, a, at = self.t, self.a, self.attn[layer]
        B, hd = a.batch, self.hd
        q = (h @ at["wq"].T).view(B, ntok, a.heads, hd).transpose(1, 2)
        k = (h @ at["wk"].T).view(B, ntok, a.kv_heads, hd).transpose(1, 2)
        v = (h @ at["wv"].T).view(B, ntok, a.kv_heads, hd).transpose(1, 2)
        at["k"][:, :, pos:pos + ntok] = k
        at["v"][:, :, pos:pos + ntok] = v
        kk, vv = at["k"][:, :, :pos + ntok], at["v"][:, :, :pos + ntok]
        rep = a.heads // a.kv_heads
        if rep > 1:
            kk = kk.repeat_interleave(rep, dim=1)
            vv = vv.repeat_interleave(rep, dim=1)
        o = t.nn.functional.scaled_dot_product_attention(q, kk, vv, is_causal=(ntok > 1))
        return o.transpose(1, 2).reshape(B * ntok, a.heads * hd) @ at["wo"].T

    def attention_static(self, layer, h, lens):
        """One decode token per sequence, h: [B, H]; lens: [B] int64 on the device, the
        position each sequence's token takes. Reads the whole cache (maxlen positions) and
        masks what lies past each length, so the shapes never change and no host value is
        read: the same kernels every step, which one CUDA graph can replay. Numerics as in
        the usual eager attention: scores and values in the model dtype, softmax in fp32."""
        t, a, at = self.t, self.a, self.attn[layer]
        B, hd, kvh = a.batch, self.hd, a.kv_heads
        rep = a.heads // kvh
        q = (h @ at["wq"].T).view(B, kvh, rep, hd)      # query head g*rep+r reads KV head g
        k = (h @ at["wk"].T).view(B, kvh, 1, hd)
        v = (h @ at["wv"].T).view(B, kvh, 1, hd)
        at_pos = lens.view(B, 1, 1, 1).expand(B, kvh, 1, hd)
        at["k"].scatter_(2, at_pos, k)
        at["v"].scatter_(2, at_pos, v)
        s = (q @ at["k"].transpose(-2, -1)).float() * (1.0 / math.sqrt(hd))   # [B, kvh, rep, L]
        past = self.positions.view(1, -1) > lens.view(B, 1)                   # [B, L]
        s = s.masked_fill(past.view(B, 1, 1, -1), float("-inf"))
        o = t.softmax(s, dim=-1).to(h.dtype) @ at["v"]                        # [B, kvh, rep, hd]
        return o.reshape(B, a.heads * hd) @ at["wo"].T

    def decode_step(self, st, gemm):
        """One greedy decode step on the device-resident state `st` (DecodeState): reads the
        tokens and lengths from it and writes the next tokens, the sequences and the lengths
        back, so a replay of this step needs nothing from the host."""
        t, a = self.t, self.a
        x = self.embed.index_select(0, st.ids)
        for layer in range(a.layers):
            if self.attn:
                x = x + self.attention_static(layer, self.rms(t, x), st.lens)
            x = x + self.moe(layer, self.rms(t, x), gemm)
        nxt = t.argmax(self.rms(t, x) @ self.lm_head.T, dim=-1)
        st.seq.scatter_(1, (st.lens + 1).view(-1, 1), nxt.view(-1, 1))
        st.ids.copy_(nxt)
        st.lens.add_(1)

    def moe(self, layer, h, gemm):
        topv, topi = route(self.t, h, self.gate[layer], self.a.topk)
        return moe_layer(self.t, h, topv, topi, self.w13[layer], self.w2[layer], gemm)

    def forward(self, ids, pos, ntok, gemm):
        """ids: [B*ntok] token ids; returns next ids [B] (greedy, from each last token)."""
        t, a = self.t, self.a
        x = self.embed.index_select(0, ids)
        for layer in range(a.layers):
            if self.attn:
                x = x + self.attention(layer, self.rms(t, x), pos, ntok)
            x = x + self.moe(layer, self.rms(t, x), gemm)
        last = self.rms(t, x.view(a.batch, ntok, a.hidden)[:, -1])
        return t.argmax(last @ self.lm_head.T, dim=-1)


def route(torch, h, gate, topk):
    """The router, the same code in every backend: logits h @ gate^T, softmax in fp32, the
    top-k experts of each token and their probabilities renormalized to sum to 1. Returns
    (weights fp32 [T, k], expert ids int64 [T, k])."""
    probs = torch.softmax((h @ gate.T).float(), dim=-1)
    topv, topi = torch.topk(probs, topk, dim=-1)
    return topv / topv.sum(-1, keepdim=True), topi


def moe_layer(torch, h, topv, topi, w13, w2, gemm):
    """The routed experts of one MoE layer: out[t] = sum_j topv[t, j] * FFN_{topi[t, j]}(h[t]),
    FFN_e(x) = w2[e] . (silu(gate_e . x) * (up_e . x)), with w13[e] = [gate_e; up_e]. Through
    libldmoe's fused layer when `gemm` is an ldmoe Gemm with moe "fused", else moe_grouped."""
    if getattr(gemm, "moe", None) == "fused":
        return gemm.fused(h, topv, topi, w13, w2)
    return moe_grouped(torch, h, topv, topi, w13, w2, gemm)


def moe_grouped(torch, h, topv, topi, w13, w2, gemm):
    """The layer as a PyTorch server runs it over a grouped GEMM (`gemm`, any backend): the
    T*k (token, expert) pairs sorted by expert, the tokens gathered, one grouped GEMM over w13,
    SwiGLU, one over w2, each row times its routing weight in fp32, the rows put back in
    (token, slot) order and each token's k rows summed in fp32. The sum has a fixed order (no
    atomics): the same inputs give the same bits every run."""
    t = torch
    T, k = topi.shape
    w = w13[0] if isinstance(w13, tuple) else w13     # --dtype fp8: (weights, scales)
    E = w.E if hasattr(w, "E") else w.shape[-3]       # PackedWeights; [E, N, K]; [D, E, N/D, K]
    flat_e = topi.reshape(-1)
    _, order = t.sort(flat_e, stable=True)
    xs = h.index_select(0, order // k)
    # Per-expert counts without a host sync (bincount would sync to size its output).
    counts = t.zeros(E, device=h.device, dtype=t.int64)
    counts.scatter_add_(0, flat_e, t.ones_like(flat_e))
    offs = t.cumsum(counts, 0).to(t.int32)
    g = gemm(xs, w13, offs)
    F = g.shape[1] // 2
    y = gemm(t.nn.functional.silu(g[:, :F]) * g[:, F:], w2, offs)
    y = y.float() * topv.reshape(-1).index_select(0, order).unsqueeze(1)
    rows = t.empty_like(y)
    rows.index_copy_(0, order, y)                     # back to (token, slot) order
    return rows.view(T, k, -1).sum(1).to(h.dtype)


def pack_fused(ldmoe, w13, w2, D):
    """w13 [E, 2F, H] and w2 [E, H, F] (plain) in the fused layer's packed layout
    (ldmoe.pack_moe). Returns what ldmoe.moe takes as (w13, w2): the packed object and the w2
    it holds."""
    fn = getattr(ldmoe, "pack_moe", None)
    if fn is None:
        fail("--moe fused --layout packed: this ldmoe has no pack_moe(); use --layout plain", 1)
    packed = fn(w13, w2, D=D)
    if isinstance(packed, tuple):
        return packed
    return packed, getattr(packed, "w2", None)


# ----------------------------------------------------------------------------- decode

class DecodeState:
    """What a decode step reads and writes, in device tensors that live for the whole run
    (a captured graph keeps their addresses): ids [B], the token each sequence feeds next;
    lens [B], the position it takes; seq [B, maxlen + 1], every sequence's tokens."""

    def __init__(self, torch, model):
        a, dev = model.a, model.dev
        self.P = a.prefill_tokens
        self.ids = torch.zeros(a.batch, device=dev, dtype=torch.int64)
        self.lens = torch.full((a.batch,), self.P, device=dev, dtype=torch.int64)
        self.seq = torch.zeros((a.batch, model.maxlen + 1), device=dev, dtype=torch.int64)

    def start(self, prompt, ids):
        """After a prefill of `prompt` ([B*P]) that chose `ids` ([B]), in place."""
        B = self.ids.shape[0]
        self.seq[:, :self.P].copy_(prompt.view(B, self.P))
        self.seq[:, self.P].copy_(ids)
        self.ids.copy_(ids)
        self.lens.fill_(self.P)


class Decoder:
    """Prefill (eager) and decode steps in one of three ways: a CUDA graph of the static
    step ("graph"), the same step eagerly ("static"), or the older eager step with dynamic
    attention ("dynamic")."""

    def __init__(self, torch, model, gemm):
        a = model.a
        self.t, self.model, self.gemm, self.a = torch, model, gemm, a
        self.mode = "dynamic" if a.attention == "dynamic" and not a.no_attention else \
            ("graph" if a.graphs else "static")
        self.state = DecodeState(torch, model) if self.mode != "dynamic" else None
        self.graph = None
        self.ids, self.gen = None, []
        if self.mode == "graph":
            self.capture()

    def capture(self):
        """Capture one decode step (torch.cuda.graph, after warm-up steps on the capture
        stream). The warm-up makes every lazy first-call setup happen outside the capture:
        cuBLAS handles and workspaces for that stream, libldmoe's per-stream tile counters
        (a cudaMalloc, which a capture refuses), kernel attributes. Each warm-up step starts
        from length P again, so it writes only position P, which every pass rewrites."""
        t, st, dev = self.t, self.state, self.model.dev
        side = t.cuda.Stream(device=dev)
        side.wait_stream(t.cuda.current_stream(dev))
        with t.cuda.stream(side):
            for _ in range(2):
                st.lens.fill_(st.P)
                self.model.decode_step(st, self.gemm)
            st.lens.fill_(st.P)
        t.cuda.current_stream(dev).wait_stream(side)
        g = t.cuda.CUDAGraph()
        try:
            with t.cuda.graph(g, stream=side):
                self.model.decode_step(st, self.gemm)
        except Exception as e:  # noqa: BLE001 - torch raises RuntimeError, backends others
            fail("capturing the decode step as a CUDA graph failed (%s: %s); run with "
                 "--no-graphs" % (type(e).__name__, e), 1)
        self.graph = g

    def prefill(self, prompt):
        return self.model.forward(prompt, 0, self.a.prefill_tokens, self.gemm)

    def start(self, prompt, ids):
        if self.state is not None:
            self.state.start(prompt, ids)
        else:
            self.ids, self.gen = ids, [ids]

    def step(self, i):
        """Decode step i (0-based) of the pass started last."""
        if self.graph is not None:
            self.graph.replay()
        elif self.state is not None:
            self.model.decode_step(self.state, self.gemm)
        else:
            self.ids = self.model.forward(self.ids, self.a.prefill_tokens + i, 1, self.gemm)
            self.gen.append(self.ids)

    def generated(self, n):
        """[B, 1 + n]: the token the prefill chose and those of n decode steps."""
        if self.state is not None:
            P = self.a.prefill_tokens
            return self.state.seq[:, P:P + 1 + n]
        return self.t.stack(self.gen[:1 + n], dim=1)


# ----------------------------------------------------------------------------- timing

class Timer:
    """CUDA events on a GPU (GPU time between two points of the stream), perf_counter
    (after the work, which is synchronous) on the CPU."""

    def __init__(self, torch, dev):
        self.t, self.cuda = torch, dev.type == "cuda"

    def start(self):
        if self.cuda:
            e = self.t.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def stop(self, s):
        """Returns a callable giving elapsed ms (resolved later, so steps do not sync)."""
        if self.cuda:
            e = self.t.cuda.Event(enable_timing=True)
            e.record()
            return lambda: s.elapsed_time(e)
        ms = (time.perf_counter() - s) * 1e3
        return lambda: ms


GPU_TRACE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def trace_activity(events, gpu):
    """What ran, from torch.profiler's Chrome-trace events (times in us).

    gpu: the device activity (kernels, memcpys, memsets); busy = the union of their
    intervals. CPU: PyTorch operators (cpu_op), each name charged its self time (its time
    minus the operators nested in it); busy = the union of the outermost operators.
    Returns (busy_us, [(name, us, count)] largest first)."""
    rows, spans = {}, []

    def charge(name, us):
        r = rows.setdefault(name, [0.0, 0])
        r[0] += us
        r[1] += 1
    xs = [e for e in events if e.get("ph") == "X" and "dur" in e and "ts" in e]
    if gpu:
        for e in xs:
            if str(e.get("cat", "")).lower() in GPU_TRACE_CATS:
                charge(e.get("name", "?"), float(e["dur"]))
                spans.append((float(e["ts"]), float(e["ts"]) + float(e["dur"])))
    else:
        ops = [e for e in xs if str(e.get("cat", "")).lower() == "cpu_op"
               and not str(e.get("name", "")).startswith("ProfilerStep#")]
        by_thread = {}
        for e in ops:
            by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
        for evs in by_thread.values():
            evs.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
            stack = []          # [end, name, dur, nested dur]
            for e in evs:
                ts, dur = float(e["ts"]), float(e["dur"])
                while stack and stack[-1][0] <= ts:
                    end, name, d, inner = stack.pop()
                    charge(name, max(0.0, d - inner))
                if stack:
                    stack[-1][3] += dur
                else:
                    spans.append((ts, ts + dur))
                stack.append([ts + dur, e.get("name", "?"), dur, 0.0])
            while stack:
                end, name, d, inner = stack.pop()
                charge(name, max(0.0, d - inner))
    busy, cur = 0.0, None
    for lo, hi in sorted(spans):
        if cur is None or lo > cur[1]:
            if cur is not None:
                busy += cur[1] - cur[0]
            cur = [lo, hi]
        else:
            cur[1] = max(cur[1], hi)
    if cur is not None:
        busy += cur[1] - cur[0]
    return busy, sorted(((n, us, c) for n, (us, c) in rows.items()), key=lambda r: -r[1])


def profile_steps(torch, dec, prompt, dev, nwarm, nsteps):
    """A fresh pass (prefill, `nwarm` untimed steps, so the profiler starts on a warm
    step), then `nsteps` decode steps under torch.profiler. Returns the Chrome-trace
    events and the steps' time in ms (GPU time from CUDA events, or the wall clock), or
    raises."""
    from torch.profiler import ProfilerActivity, profile
    cuda = dev.type == "cuda"
    ids = dec.prefill(prompt)
    dec.start(prompt, ids)
    for i in range(nwarm):
        dec.step(i)
    if cuda:
        torch.cuda.synchronize(dev)
    timer = Timer(torch, dev)
    # acc_events: keep the one cycle's events (and no warning on stderr that they are cleared).
    kw = {"acc_events": True} if "acc_events" in inspect.signature(profile).parameters else {}
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU], **kw) as prof:
        s = timer.start()
        for i in range(nwarm, nwarm + nsteps):
            dec.step(i)
        span = timer.stop(s)
        if cuda:
            torch.cuda.synchronize(dev)
    tmp = tempfile.mkdtemp(prefix="serve-profile-")
    try:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return (trace.get("traceEvents", []) if isinstance(trace, dict) else trace), span()


def report_profile(a, events, nsteps, span_ms, gpu, timed_ms):
    """The busy line. On a GPU: the device's active time per profiled step (the union of
    its kernels) as a share of the timed pass's median step (timed_ms), which the profiler
    did not slow down; the share of the profiled steps' own span (span_ms, all of them;
    tracing widens the gaps between a graph's kernels) follows in the parentheses. On the
    CPU: the operators' share of the profiled span. With --profile, a per-kernel breakdown of one step (the profiled steps'
    totals divided by their number: every static step runs the same kernels)."""
    busy_us, rows = trace_activity(events, gpu)
    what = "GPU kernels" if gpu else "PyTorch operators"
    if not rows or span_ms <= 0 or timed_ms <= 0:
        print("busy: not measured (torch.profiler recorded no %s%s)"
              % (what, "; is CUPTI available?" if gpu else ""))
        return
    per_step = busy_us / nsteps / 1e3
    if gpu:
        print("busy: %.1f %% of the decode step (%s %.3f ms/step of the timed %.3f ms/step; "
              "%.1f %% of the %.3f ms/step of %d steps under torch.profiler)"
              % (min(100.0, 100.0 * per_step / timed_ms), what, per_step, timed_ms,
                 100.0 * busy_us / 1e3 / span_ms, span_ms / nsteps, nsteps))
    else:
        # Operators on the CPU run slower under the profiler too: only its own span compares.
        print("busy: %.1f %% of the decode step (%s %.3f of %.3f ms/step, %d steps under "
              "torch.profiler)" % (100.0 * busy_us / 1e3 / span_ms, what, per_step, span_ms / nsteps, nsteps))
    if not a.profile:
        return
    total = sum(us for _, us, _ in rows)
    print("profile: one decode step, %s by %s time (totals of %d profiled steps / %d):"
          % ("kernels" if gpu else "operators", "GPU" if gpu else "self", nsteps, nsteps))
    print("profile: %6s %9s %6s  %s" % ("share", "ms", "count", "kernel" if gpu else "operator"))
    top, rest = rows[:12], rows[12:]

    def line(share, us, count, name):
        c = count / nsteps
        print("profile: %5.1f%% %9.4f %6s  %s" % (share, us / nsteps / 1e3,
                                                   ("%d" % c) if c == int(c) else ("%.1f" % c),
                                                   name if len(name) <= 90 else name[:87] + "..."))
    for name, us, count in top:
        line(100.0 * us / total, us, count, name)
    if rest:
        us = sum(r[1] for r in rest)
        line(100.0 * us / total, us, sum(r[2] for r in rest), "(%d others)" % len(rest))
    print("profile: total %.4f ms/step in %s %s" % (total / nsteps / 1e3,
                                                   "%g" % (sum(r[2] for r in rows) / nsteps),
                                                   "kernels" if gpu else "operator calls"))


def rows_fp32(w, scale=None, chunk=1024):
    """w [N, K] (bf16, fp32 or e4m3) as fp32 blocks of `chunk` rows (times scale [N], one per
    row). A reference never holds a whole expert weight in fp32: such a temporary could have
    the size of a weight tensor of another config, which a policy's size rule would tag."""
    for n0 in range(0, w.shape[0], chunk):
        r = w[n0:n0 + chunk].float()
        yield r if scale is None else r * scale[n0:n0 + chunk].float().unsqueeze(1)


def matmul_rows(torch, x, w, scale=None):
    """x [M, K] fp32 times (w [N, K] * scale)^T in fp32, block by block of w's rows."""
    return torch.cat([x @ r.T for r in rows_fp32(w, scale)], dim=1)


def expert_blocks(w, e):
    """Expert e's rows of an expert weight, as (rows [n, K], their scales or None) in row
    order: plain [E, N, K] or split [D, E, N/D, K]; --dtype fp8: (e4m3 weights, scales)."""
    q, sc = w if isinstance(w, tuple) else (w, None)
    if q.dim() == 4:
        return [(q[d, e], None if sc is None else sc[d, e]) for d in range(q.shape[0])]
    return [(q[e], None if sc is None else sc[e])]


def reference_layer(torch, h, topv, topi, w13, w2, fp8=False):
    """The MoE layer written out plainly in fp32, token by expert, for --check: no sort, no
    grouped GEMM, no combine kernel. fp8: the tokens and the SwiGLU output quantized rowwise
    (and dequantized) as the FP8 backends do before each GEMM."""
    def q(t):
        if not fp8:
            return t
        t8, sc = quantize_rowwise(torch, t)
        return t8.float() * sc.unsqueeze(1)

    def ffn(x, w, e):
        return torch.cat([matmul_rows(torch, x, blk, sc) for blk, sc in expert_blocks(w, e)], dim=1)
    x = q(h.float())
    out = None
    for e in topi.unique().tolist():
        rows, slots = (topi == e).nonzero(as_tuple=True)
        g = ffn(x[rows], w13, e)
        F = g.shape[1] // 2
        y = ffn(q(torch.nn.functional.silu(g[:, :F]) * g[:, F:]), w2, e)
        if out is None:
            out = torch.zeros((h.shape[0], y.shape[1]), device=h.device, dtype=torch.float32)
        out.index_add_(0, rows, y * topv[rows, slots].unsqueeze(1))
    return out


def run_check(torch, model, gemm, dev, dtype):
    """The backend against the loop reference on layer 0 (weights as drawn, plain where the
    backend reads them packed): each grouped GEMM alone on random rows and a random expert
    split (--moe grouped and the torch backend), then the whole MoE layer (router, experts,
    combine) on 64 random tokens routed by the layer's own router."""
    a = model.a
    T = 64
    g = torch.Generator(device=dev)
    g.manual_seed(a.seed + 1)
    packed = a.layout == "packed"
    ref = Gemm(torch, "loop", "plain" if packed else a.layout)
    w13r, w2r = (model.ref_w13, model.ref_w2) if packed else (model.w13[0], model.w2[0])
    tol = 2e-2 if dtype != torch.float32 else 1e-4
    fused = getattr(gemm, "moe", None) == "fused"
    if a.dtype == "fp8":   # both sides read the same e4m3 values; bf16 output rounding, fp32 sums
        tol = 3e-2 if a.backend != "loop" else 1e-4
        if fused:   # tokens kept (decode tiles) or per 64 k (w8a8 tiles), the reference's unquantized
            tol = 1e-1

    def rel(y, r):
        y, r = y.float(), r.float()
        if not bool(torch.isfinite(y).all()):
            return float("inf")
        return ((y - r).abs().max() / r.abs().max().clamp_min(1e-6)).item()
    worst = 0.0
    if not fused:
        counts = torch.bincount(torch.randint(0, a.experts, (T * a.topk,), device=dev, generator=g),
                                minlength=a.experts)
        offs = torch.cumsum(counts, 0).to(torch.int32)
        for w, wr, k in ((model.w13[0], w13r, a.hidden), (model.w2[0], w2r, a.ffn)):
            xin = torch.randn((T * a.topk, k), device=dev, dtype=dtype, generator=g)
            worst = max(worst, rel(gemm(xin, w, offs), ref(xin, wr, offs)))
        print("check: backend %s vs loop reference: max relative error %.2e (tolerance %.0e; "
              "grouped GEMMs over w13 and w2)" % (a.backend, worst, tol))
    h = torch.randn((T, a.hidden), device=dev, dtype=dtype, generator=g)
    topv, topi = route(torch, h, model.gate[0], a.topk)
    y = moe_layer(torch, h, topv, topi, model.w13[0], model.w2[0], gemm)
    r = reference_layer(torch, h, topv, topi, w13r, w2r, a.dtype == "fp8" and not fused)
    err = rel(y, r)
    worst = max(worst, err)
    what = "ldmoe %s" % gemm.moe if a.backend == "ldmoe" else a.backend
    print("check: backend %s vs loop reference: max relative error %.2e (tolerance %.0e; MoE "
          "layer, %d tokens, top-%d of %d experts)" % (what, err, tol, T, a.topk, a.experts))
    if not worst <= tol:
        fail("check failed: backend %s disagrees with the reference" % a.backend, 1)


def main(argv=None):
    a = parse_args(argv)
    if a.print_sizes:
        try:
            print_sizes(a)
            sys.stdout.flush()
        except BrokenPipeError:
            # The reader left early (`| head`): not an error. Point stdout at /dev/null so
            # that the interpreter's own flush at exit does not fail again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if a.graphs:
        # Kineto's CUPTI teardown and lazy re-initialisation are what break profiling
        # around CUDA graphs (pytorch#75504); PyTorch's own graph users turn both off.
        os.environ.setdefault("TEARDOWN_CUPTI", "0")
        os.environ.setdefault("DISABLE_CUPTI_LAZY_REINIT", "1")
    torch = import_torch()
    try:
        dev = torch.device(a.device)
    except RuntimeError as e:
        fail("bad --device '%s': %s" % (a.device, e))
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            fail("no CUDA GPU is visible to PyTorch (torch.cuda.is_available() is False); "
                 "use --device cpu with a tiny config for a functional run")
        if "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
            sys.stderr.write("%s: warning: expandable_segments maps memory with cuMemCreate, "
                             "not cudaMalloc; a size policy will not see the weights\n" % PROG)
        if dev.index is None:      # torch.cuda.set_device wants an index ("cuda" has none)
            dev = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(dev)
    elif dev.type != "cpu":
        fail("unsupported --device '%s' (cuda, cuda:N or cpu)" % a.device)
    # --dtype fp8 keeps everything but the expert GEMMs' operands in bf16 (fp32 on the CPU).
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[
        (a.dtype if a.dtype != "fp8" else None) or ("bf16" if dev.type == "cuda" else "fp32")]
    if a.dtype == "fp8" and not hasattr(torch, "float8_e4m3fn"):
        fail("this PyTorch (%s) has no torch.float8_e4m3fn for --dtype fp8" % torch.__version__)
    if a.dtype == "fp8" and a.backend == "torch" and not hasattr(torch, "_scaled_grouped_mm"):
        fail("this PyTorch (%s) has no torch._scaled_grouped_mm; use --backend ldmoe or loop" % torch.__version__)
    if a.backend == "torch" and not hasattr(torch, "_grouped_mm"):
        fail("this PyTorch (%s) has no torch._grouped_mm; use --backend loop or ldmoe"
             % torch.__version__)

    need = sum(n for _, _, n in allocation_plan(a))
    if a.layout == "packed":   # the plain temporaries a layer's weights are drawn in (Model)
        need += (2 if a.check else 1) * 3 * a.experts * a.ffn * a.hidden * 2
    if dev.type == "cuda":
        free, total = torch.cuda.mem_get_info(dev)
        if need * 1.3 > free:
            fail("this config needs about %.1f GiB of weights and caches but only %.1f GiB "
                 "is free; shrink --layers/--experts/--ffn/--batch" % (need / 2**30, free / 2**30))
    if a.backend == "ldmoe" and dev.type != "cuda":
        fail("--backend ldmoe needs a CUDA device")
    gemm = Gemm(torch, a.backend, a.layout, a.ldmoe_mode, a.moe)
    with torch.inference_mode():
        model = Model(torch, a, dev, dtype)
        name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
        print("serve: %s, torch %s, backend %s, layout %s, %d layers, %d experts top-%d, "
              "hidden %d, ffn %d, %s, batch %d, prefill %d, steps %d, %.2f GiB"
              % (name, torch.__version__, a.backend, a.layout, a.layers, a.experts, a.topk,
                 a.hidden, a.ffn, "no attention" if a.no_attention else
                 "%d/%d heads" % (a.heads, a.kv_heads), a.batch, a.prefill_tokens, a.steps,
                 need / 2**30))
        sys.stdout.flush()
        if a.check:
            run_check(torch, model, gemm, dev, dtype)
        prompt = torch.randint(0, a.vocab, (a.batch * a.prefill_tokens,), device=dev,
                               generator=model.gen)
        dec = Decoder(torch, model, gemm)
        attn = "no attention" if a.no_attention else (
            "dynamic attention (SDPA over the cache so far, a new shape every step)"
            if dec.mode == "dynamic" else
            "static attention (KV cache of %d positions, masked by length)" % model.maxlen)
        print("serve: decode: %s, %s; prefill eager"
              % (attn, "CUDA graph captured once, replayed every step" if dec.mode == "graph"
                 else "eager steps"))
        sys.stdout.flush()
        timer = Timer(torch, dev)

        def serve(nsteps):
            s = timer.start()
            ids = dec.prefill(prompt)
            pre = timer.stop(s)
            dec.start(prompt, ids)
            steps = []
            for i in range(nsteps):
                s = timer.start()
                dec.step(i)
                steps.append(timer.stop(s))
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            return pre(), [f() for f in steps], dec.generated(nsteps).cpu()

        serve(a.warmup_steps)          # compile/tune paths, fill caches, clocks up
        if os.environ.get("LDSHIM_AB_BARRIER"):
            meet_barrier(os.environ["LDSHIM_AB_BARRIER"])
        pre_ms, step_ms, gen = serve(a.steps)
        med = statistics.median(step_ms)
        p90 = sorted(step_ms)[min(len(step_ms) - 1, int(math.ceil(0.9 * len(step_ms))) - 1)]
        ntok = a.batch * a.prefill_tokens
        # Everything the timed pass measured is out before the profiler runs.
        print("prefill: %.3f ms  %.1f tok/s  (%d sequences x %d tokens)"
              % (pre_ms, ntok / (pre_ms / 1e3), a.batch, a.prefill_tokens))
        print("decode: %.3f ms/step  %.1f tok/s  (batch %d, median of %d steps, %s; mean "
              "%.3f, p90 %.3f ms)" % (med, a.batch / (med / 1e3), a.batch, len(step_ms),
                                      "GPU time per step from CUDA events" if dev.type == "cuda"
                                      else "wall time per step", statistics.mean(step_ms), p90))
        print("tokens: %s" % " ".join(str(int(x)) for x in gen[:8, -1].tolist()))
        flat = " ".join(str(int(x)) for x in gen.flatten().tolist())
        print("generated: %d x %d tokens, crc32 %08x" % (gen.shape[0], gen.shape[1],
                                                         zlib.crc32(flat.encode())))
        sys.stdout.flush()
        if a.profile or not a.no_busy:
            # Steps beyond the timed ones (the profiler slows the host); they fit in the
            # cache: a pass may take max(steps, warmup-steps) of them.
            nmax = max(a.steps, a.warmup_steps)
            nwarm = 1 if nmax > 1 else 0
            nprof = min(4, nmax - nwarm)
            try:
                events, span_ms = profile_steps(torch, dec, prompt, dev, nwarm, nprof)
            except Exception as e:  # noqa: BLE001 - whatever the profiler raises
                print("busy: not measured (torch.profiler failed: %s: %s)"
                      % (type(e).__name__, e))
            else:
                report_profile(a, events, nprof, span_ms, dev.type == "cuda", med)
    return 0


if __name__ == "__main__":
    sys.exit(main())
