#!/usr/bin/env python3
"""nccl_bench.py — all-reduce and all-gather times of PyTorch distributed, N ranks, one command.

    python3 bench/nccl/nccl_bench.py [options]

The command is the launcher: it starts one process per rank (rank i on cuda:i), waits for
all of them, and prints one line per (collective, size), e.g.

    allreduce 1048576 B: 23.40 us  busbw 89.54 GB/s  channels 16 (RING/LL128)  [...]

and a closing `summary: allreduce 1048576 B: 23.40 us` line (--summary) for an A/B tool's
--metric. Each rank times every iteration with a pair of CUDA events (the GPU is kept busy
ahead of the host, so the interval is the collective's, not the host's launch cost); a size's
figure is the median over the iterations, the slowest rank's. Every result is checked against
the values it must hold (all-reduce: the exact sum of known integers; all-gather: every rank's
block), once before and once after timing; a wrong result ends the run with exit status 1.

NCCL's own choices are recorded: the launcher sets NCCL_DEBUG=INFO and
NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING (unless set), captures each rank's output and prints the
channels NCCL set up per rank and the channels/algorithm it picked per (collective, size).
NCCL_NVLS_ENABLE=0 unless set: NVLink SHARP multicast reaches the switches other tenants use.

The program knows nothing about ldshim except one option, --rank-domains, which gives each
rank its own LDSHIM_DOMAIN before it starts (doc/ab.md, "NCCL under compute binding").
`--backend gloo --device cpu` runs everything on a CPU (the CPU tests use it).

Exit status: 0 every rank finished and every result was right; 1 a wrong result, a rank that
failed or timed out; 2 bad usage or PyTorch missing (one message on stderr).
"""

import argparse
import collections
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

PROG = "nccl_bench.py"
COLLECTIVES = ("allreduce", "allgather")
UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
ELEMENT_BYTES = 4            # float32
# The pattern's values are integers 1..PATTERN_MOD: a sum over any rank count this tool
# accepts is exact in float32 whatever order NCCL adds in, so results compare bit for bit.
PATTERN_MOD = 1021
MAX_RANKS = 64
# What the launcher puts in every rank's environment unless it is set already (NCCL only).
NCCL_ENV_DEFAULTS = (("NCCL_NVLS_ENABLE", "0"), ("NCCL_DEBUG", "INFO"),
                     ("NCCL_DEBUG_SUBSYS", "INIT,ENV,TUNING"))
# Environment recorded in the JSON result (what a run was given, for joining with the tool
# that started it); nothing here changes what the program does.
RECORD_ENV_PREFIXES = ("NCCL_", "CUDA_", "TORCH_", "PYTORCH_", "LDSHIM_", "LD_PRELOAD")
DOMAIN_VAR = "LDSHIM_DOMAIN"
# Test hooks: CORRUPT=RANK:COLLECTIVE:BYTES makes that rank change one element of that result
# after the first check's collective (a wrong result the check must catch); LOG=FILE makes
# every rank print FILE ("{rank}" replaced) as if NCCL had logged it (the parser, end to end).
TEST_CORRUPT_ENV = "NCCLBENCH_TEST_CORRUPT"
TEST_LOG_ENV = "NCCLBENCH_TEST_LOG"
KILL_GRACE_S = 5.0


class UsageError(Exception):
    pass


# ------------------------------------------------------------------------------ sizes

def parse_size(text):
    """'64KiB', '1MiB', '1048576', '512B' -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*(B|KiB|MiB|GiB)?\s*", text)
    if not m:
        raise UsageError("bad size '%s' (a whole number with an optional unit B, KiB, MiB or "
                         "GiB, e.g. 64KiB)" % text)
    return int(m.group(1)) * UNITS[m.group(2) or ""]


def parse_sizes(spec, factor):
    """'A..B' (A, A*factor, ... up to B) or a comma list of sizes -> sorted unique bytes."""
    if ".." in spec:
        lo_s, _, hi_s = spec.partition("..")
        lo, hi = parse_size(lo_s), parse_size(hi_s)
        if lo < 1 or hi < lo:
            raise UsageError("--sizes %s: the range must run from a positive size up" % spec)
        if factor < 2:
            raise UsageError("--factor must be 2 or more (got %d)" % factor)
        sizes, s = [], lo
        while s <= hi:
            sizes.append(s)
            s *= factor
    else:
        sizes = [parse_size(x) for x in spec.split(",") if x.strip()]
    if not sizes:
        raise UsageError("--sizes %s holds no size" % spec)
    for s in sizes:
        if s < ELEMENT_BYTES or s % ELEMENT_BYTES:
            raise UsageError("size %d B is not a positive multiple of %d B (float32 elements)"
                             % (s, ELEMENT_BYTES))
    return sorted(set(sizes))


def fmt_size(n):
    for unit in ("GiB", "MiB", "KiB"):
        if n >= UNITS[unit] and n % UNITS[unit] == 0:
            return "%d %s" % (n // UNITS[unit], unit)
    return "%d B" % n


def parse_summary(spec, collectives, sizes):
    coll, sep, size = spec.partition(":")
    if not sep or coll not in COLLECTIVES:
        raise UsageError("--summary %s: expected COLLECTIVE:SIZE with COLLECTIVE one of %s "
                         "(e.g. allreduce:1MiB)" % (spec, ", ".join(COLLECTIVES)))
    nbytes = parse_size(size)
    if coll not in collectives or nbytes not in sizes:
        raise UsageError("--summary %s: %s %d B is not measured (--collectives %s, --sizes "
                         "%s)" % (spec, coll, nbytes, ",".join(collectives),
                                  ",".join(str(s) for s in sizes)))
    return coll, nbytes


# ------------------------------------------------------------------------------ ranks

def rank_domains(spec, ranks, inherited):
    """The LDSHIM_DOMAIN of every rank, or None to leave the environment as it is.
    same: None (every rank inherits the launcher's); alternate: rank i gets (X + i) mod 2,
    X = the inherited value (else 0); 'A,B,...': one domain per rank."""
    if spec == "same":
        return None
    if spec == "alternate":
        base = 0
        if inherited not in (None, ""):
            if not re.fullmatch(r"[0-7]", inherited):
                raise UsageError("--rank-domains alternate: %s=%s in the environment is not a "
                                 "domain number 0..7" % (DOMAIN_VAR, inherited))
            base = int(inherited)
        return [(base + i) % 2 for i in range(ranks)]
    items = [x.strip() for x in spec.split(",")]
    if not all(re.fullmatch(r"[0-7]", x) for x in items):
        raise UsageError("--rank-domains %s: expected same, alternate or a comma list of "
                         "domain numbers 0..7, one per rank" % spec)
    if len(items) != ranks:
        raise UsageError("--rank-domains %s names %d domains for %d ranks"
                         % (spec, len(items), ranks))
    return [int(x) for x in items]


def rank_env(base, rank, cfg):
    """The environment rank `rank` starts with: the launcher's, NCCL's defaults where unset,
    the torch.distributed rank variables and, with --rank-domains, its LDSHIM_DOMAIN. The
    domain must be in the environment the process starts with: the shim copies its
    environment when it loads, before any Python code could change it."""
    env = dict(base)
    if cfg["backend"] == "nccl":
        for k, v in NCCL_ENV_DEFAULTS:
            if not env.get(k):
                env[k] = v
    env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(cfg["ranks"]),
               LOCAL_WORLD_SIZE=str(cfg["ranks"]))
    if cfg["domains"] is not None:
        env[DOMAIN_VAR] = str(cfg["domains"][rank])
    return env


def recorded_env(env):
    return {k: v for k, v in sorted(env.items()) if k.startswith(RECORD_ENV_PREFIXES)}


# ------------------------------------------------------------------------------ NCCL log

_INFO = re.compile(r"(?:\[(\d+)\] )?NCCL INFO (.*)$")
_VERSION = re.compile(r"NCCL version (\S+)")
_CHANNEL_COUNTS = re.compile(r"(\d+) (coll|collnet|nvls|p2p) channels( per peer)?")
_RING = re.compile(r"^Channel (\d+)/(\d+) :((?:\s+\d+)+)\s*$")
_TRANSPORT = re.compile(r"^Channel (\d+)(?:/\d+)? : (\d+)\[[^\]]*\] -> (\d+)\[[^\]]*\]"
                        r"(?: \[(send|receive)\])? via (\S+)")
_TUNING = re.compile(r"^(\w+):\s+(\d+) Bytes -> Algo (\S+)\s+proto (\S+)"
                     r"(?:\s+channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\})?")
_TUNING_OLD = re.compile(r"^(\d+) Bytes -> Algo (\d+) proto (\d+) time")
_INIT_DONE = re.compile(r"\brank (\d+) nranks (\d+) cudaDev (\d+)\b.*Init COMPLETE")
_ENV_SET = re.compile(r"^(NCCL_\w+) set by environment to (.*?)\.?\s*$")
FUNC_NAMES = {"AllReduce": "allreduce", "AllGather": "allgather"}


def parse_nccl_log(text):
    """What NCCL's INFO lines in one rank's output say (the formats of NCCL 2.19-2.30's
    INIT/ENV/TUNING messages; a line in another format is ignored, never an error):
    version, cuda device, the communicator's channel counts (coll/collnet/nvls/p2p, "p2p per
    peer"), the number of rings ("Channel 00/16 :" lines, rank 0 only), the transports of the
    channel connections, the NCCL_* settings it read from the environment, and per (function,
    bytes) the algorithm, protocol and channel span it chose for each operation (TUNING,
    rank 0 only; NCCL before 2.19 printed no channels there)."""
    res = dict(version=None, info_lines=0, device=None, comm_rank=None, nranks=None,
               counts={}, rings=None, transports={}, env={}, tuning={})
    for line in text.splitlines():
        v = _VERSION.search(line)
        if v and res["version"] is None:
            res["version"] = v.group(1)
        m = _INFO.search(line)
        if not m:
            continue
        res["info_lines"] += 1
        if m.group(1) is not None and res["device"] is None:
            res["device"] = int(m.group(1))
        msg = m.group(2).strip()
        if "coll channels" in msg:
            for n, kind, per_peer in _CHANNEL_COUNTS.findall(msg):
                res["counts"][kind + ("_per_peer" if per_peer else "")] = int(n)
            continue
        t = _TUNING.match(msg)
        if t:
            func = FUNC_NAMES.get(t.group(1), t.group(1).lower())
            nch = int(t.group(6)) - int(t.group(5)) + 1 if t.group(5) is not None else None
            key = (func, int(t.group(2)))
            choice = (t.group(3), t.group(4), nch)
            res["tuning"].setdefault(key, collections.Counter())[choice] += 1
            continue
        t = _TUNING_OLD.match(msg)
        if t:
            key = ("?", int(t.group(1)))
            res["tuning"].setdefault(key, collections.Counter())[(t.group(2), t.group(3),
                                                                  None)] += 1
            continue
        r = _RING.match(msg)
        if r:
            res["rings"] = int(r.group(2))
            continue
        c = _TRANSPORT.match(msg)
        if c:
            res["transports"][c.group(5)] = res["transports"].get(c.group(5), 0) + 1
            continue
        d = _INIT_DONE.search(msg)
        if d:
            res["comm_rank"], res["nranks"] = int(d.group(1)), int(d.group(2))
            continue
        e = _ENV_SET.match(msg)
        if e:
            res["env"][e.group(1)] = e.group(2)
    return res


def channels_of(parsed):
    """The communicator's channel count: 'coll channels' when logged, else the ring count."""
    if "coll" in parsed["counts"]:
        return parsed["counts"]["coll"]
    return parsed["rings"]


def tuning_choice(parsed, coll, nbytes):
    """(algo, proto, channels, ops, other_choices) NCCL logged most often for this operation,
    or None. An all-gather's TUNING bytes are each rank's contribution, as here."""
    cnt = parsed["tuning"].get((coll, nbytes))
    if not cnt:
        return None
    (algo, proto, nch), n = cnt.most_common(1)[0]
    return algo, proto, nch, sum(cnt.values()), len(cnt) - 1


def nccl_json(parsed):
    """parse_nccl_log's answer with JSON keys."""
    out = {k: v for k, v in parsed.items() if k != "tuning"}
    out["channels"] = channels_of(parsed)
    out["tuning"] = [dict(collective=k[0], bytes=k[1], algo=c[0], proto=c[1], channels=c[2],
                          ops=n) for k, cnt in sorted(parsed["tuning"].items())
                     for c, n in cnt.most_common()]
    return out


def split_log(text):
    """(kept, tuning): the rank's output without NCCL's per-operation TUNING lines (kept
    verbatim), and those lines counted by message (they repeat once per operation)."""
    kept, tuning = [], collections.Counter()
    for line in text.splitlines():
        m = _INFO.search(line)
        if m and (_TUNING.match(m.group(2).strip()) or _TUNING_OLD.match(m.group(2).strip())):
            tuning[re.sub(r"\s+", " ", m.group(2).strip())] += 1
        else:
            kept.append(line)
    return kept, tuning


# ------------------------------------------------------------------------------ options

def build_parser():
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Time all-reduce and all-gather with PyTorch distributed: one command "
                    "starts --ranks processes (rank i on cuda:i), prints one line per "
                    "(collective, size) with the median per-iteration time (CUDA events), "
                    "bus bandwidth and NCCL's channel choice, and a summary line. Results "
                    "are checked exactly; a wrong one fails the run (exit 1).",
        epilog="Every rank gets NCCL_NVLS_ENABLE=0, NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS="
               "INIT,ENV,TUNING unless they are set (backend nccl). Sizes: a range A..B "
               "stepped by --factor, or a list; an all-gather's size is each rank's input "
               "(the output is --ranks times larger). Exit: 0 ok, 1 wrong result or a rank "
               "failed, 2 bad usage or no PyTorch. Guide: doc/ab.md, 'NCCL under compute "
               "binding'.")
    p.add_argument("--ranks", type=int, default=2,
                   help="processes to start, one per GPU (default 2)")
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl",
                   help="torch.distributed backend (default nccl; gloo with --device cpu "
                        "runs on a CPU)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="where the tensors live (default cuda; rank i uses cuda:i)")
    p.add_argument("--collectives", default=",".join(COLLECTIVES),
                   help="comma list of %s (default: both)" % ", ".join(COLLECTIVES))
    p.add_argument("--sizes", default="64KiB..64MiB",
                   help="message sizes: A..B stepped by --factor, or a comma list "
                        "(default 64KiB..64MiB)")
    p.add_argument("--factor", type=int, default=2,
                   help="step of a --sizes range (default 2; 4 for fewer sizes)")
    p.add_argument("--warmup", type=int, default=20,
                   help="untimed iterations per size (default 20)")
    p.add_argument("--iters", type=int, default=100,
                   help="timed iterations per size (default 100)")
    p.add_argument("--summary", default="allreduce:1MiB", metavar="COLL:SIZE",
                   help="the case of the closing 'summary:' line (default allreduce:1MiB)")
    p.add_argument("--rank-domains", default="same", metavar="SPEC",
                   help="LDSHIM_DOMAIN per rank: same (default: every rank inherits the "
                        "launcher's environment), alternate (rank i: (X+i) mod 2, X the "
                        "inherited LDSHIM_DOMAIN or 0) or a list such as 1,0")
    p.add_argument("--log-dir", metavar="DIR",
                   help="keep each run under DIR/<time>-<pid>/: result.json, every rank's "
                        "output (rank<i>.log, NCCL's per-operation TUNING lines counted in "
                        "rank<i>.tuning.txt)")
    p.add_argument("--json", metavar="FILE", help="write the result as JSON to FILE")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds for the whole run; past it every rank is killed (default "
                        "600)")
    p.add_argument("--dry-run", action="store_true",
                   help="print what each rank would get (device, environment) and exit")
    # Internal: how the launcher starts a rank.
    p.add_argument("--worker-rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-dir", default=None, help=argparse.SUPPRESS)
    return p


def validate(args):
    if not 1 <= args.ranks <= MAX_RANKS:
        raise UsageError("--ranks must be 1..%d (got %d)" % (MAX_RANKS, args.ranks))
    if args.backend == "nccl" and args.device != "cuda":
        raise UsageError("--backend nccl needs --device cuda (use --backend gloo --device cpu "
                         "on a CPU)")
    colls = [c.strip() for c in args.collectives.split(",") if c.strip()]
    bad = [c for c in colls if c not in COLLECTIVES]
    if bad or not colls:
        raise UsageError("--collectives %s: expected a comma list of %s"
                         % (args.collectives, ", ".join(COLLECTIVES)))
    colls = [c for c in COLLECTIVES if c in colls]
    sizes = parse_sizes(args.sizes, args.factor)
    if args.warmup < 0:
        raise UsageError("--warmup must be 0 or more (got %d)" % args.warmup)
    if args.iters < 1:
        raise UsageError("--iters must be at least 1 (got %d)" % args.iters)
    if not args.timeout > 0:
        raise UsageError("--timeout must be positive (got %g)" % args.timeout)
    summary = parse_summary(args.summary, colls, sizes)
    domains = rank_domains(args.rank_domains, args.ranks, os.environ.get(DOMAIN_VAR))
    return dict(ranks=args.ranks, backend=args.backend, device=args.device, collectives=colls,
                sizes=sizes, warmup=args.warmup, iters=args.iters, summary=summary,
                rank_domains=args.rank_domains, domains=domains, log_dir=args.log_dir,
                json=args.json, timeout=args.timeout)


# ------------------------------------------------------------------------------ worker

def corrupt_target(rank):
    """(collective, bytes) whose first check this rank must spoil (TEST_CORRUPT_ENV)."""
    spec = os.environ.get(TEST_CORRUPT_ENV, "")
    parts = spec.split(":")
    if len(parts) != 3 or parts[0] != str(rank):
        return None
    try:
        return parts[1], parse_size(parts[2])
    except UsageError:
        return None


def worker(cfg, rank, workdir):
    """One rank: initialize the process group, then for every collective and size check,
    warm up, time, check again. Writes workdir/rank<rank>.json; exit 1 on a wrong result."""
    try:
        import datetime
        import torch
        import torch.distributed as dist
    except ImportError as e:
        sys.stderr.write("%s: PyTorch is not installed for %s (%s); the ranks need it\n"
                         % (PROG, sys.executable, e))
        return 2
    log_file = os.environ.get(TEST_LOG_ENV)
    if log_file:
        with open(log_file) as f:
            sys.stdout.write(f.read().replace("{rank}", str(rank)))
        sys.stdout.flush()
    world = cfg["ranks"]
    cuda = cfg["device"] == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            sys.stderr.write("%s: rank %d: no CUDA device (torch.cuda.is_available() is "
                             "False); --backend gloo --device cpu runs on a CPU\n"
                             % (PROG, rank))
            return 2
        if torch.cuda.device_count() < world:
            sys.stderr.write("%s: %d ranks need %d GPUs, this process sees %d\n"
                             % (PROG, world, world, torch.cuda.device_count()))
            return 2
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
    else:
        dev = torch.device("cpu")
    kw = dict(backend=cfg["backend"], init_method="file://" + os.path.join(workdir, "store"),
              rank=rank, world_size=world, timeout=datetime.timedelta(seconds=cfg["timeout"]))
    if cuda:
        kw["device_id"] = dev           # eager NCCL init: the communicator is made here
    dist.init_process_group(**kw)

    def pattern(r, n, seed):
        i = torch.arange(n, dtype=torch.int64, device=dev)
        return ((i * 40503 + r * 7919 + seed * 104729) % PATTERN_MOD + 1).to(torch.float32)

    spoil = corrupt_target(rank)

    def check(coll, nbytes, seed, run, bufs):
        n = nbytes // ELEMENT_BYTES
        if coll == "allreduce":
            buf = bufs[0]
            buf.copy_(pattern(rank, n, seed))
            run()
            got = buf
            want = pattern(0, n, seed)
            for r in range(1, world):
                want += pattern(r, n, seed)
        else:
            inp, out = bufs
            inp.copy_(pattern(rank, n, seed))
            out.fill_(-1.0)
            run()
            got = out
            want = torch.cat([pattern(r, n, seed) for r in range(world)])
        if spoil == (coll, nbytes) and seed == 1:
            got[got.numel() // 2] += 1.0
        if torch.equal(got, want):
            return None
        bad = (got != want).nonzero()
        k = int(bad[0])
        return ("%s %d B: wrong result on rank %d (%s check): %d of %d elements differ, the "
                "first at index %d: got %r, expected %r"
                % (coll, nbytes, rank, "first" if seed == 1 else "second", bad.numel(),
                   got.numel(), k, float(got[k]), float(want[k])))

    spin = spin_rate(torch) if cuda else None

    cases = []
    for coll in cfg["collectives"]:
        for nbytes in cfg["sizes"]:
            n = nbytes // ELEMENT_BYTES
            if coll == "allreduce":
                bufs = (torch.empty(n, dtype=torch.float32, device=dev),)
                run = (lambda b=bufs[0]: dist.all_reduce(b))
            else:
                bufs = (torch.empty(n, dtype=torch.float32, device=dev),
                        torch.empty(n * world, dtype=torch.float32, device=dev))
                run = (lambda i=bufs[0], o=bufs[1]: dist.all_gather_into_tensor(o, i))
            err = check(coll, nbytes, 1, run, bufs)
            if err is None:
                # Timed on zeros (all-reduce) so that repeated sums stay finite.
                bufs[0].zero_()
                for _ in range(cfg["warmup"]):
                    run()
                times = time_iterations(torch, dist, cuda, spin, run, cfg["iters"])
                err = check(coll, nbytes, 2, run, bufs)
            if err is not None:
                sys.stderr.write("%s: %s\n" % (PROG, err))
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(1)       # the other ranks wait in a collective: the launcher ends them
            s = sorted(times)
            cases.append(dict(collective=coll, bytes=nbytes, median_us=statistics.median(s),
                              p10_us=quantile(s, 0.1), p90_us=quantile(s, 0.9), min_us=s[0],
                              mean_us=sum(s) / len(s), iters=len(s)))
            del bufs
    dist.barrier()
    dist.destroy_process_group()
    res = dict(rank=rank, pid=os.getpid(), device=str(dev), env=recorded_env(os.environ),
               torch=torch.__version__, cases=cases, checks=2 * len(cases),
               spin_cycles_per_us=spin,
               nccl_version=(".".join(str(x) for x in torch.cuda.nccl.version())
                             if cuda else None))
    path = os.path.join(workdir, "rank%d.json" % rank)
    with open(path + ".tmp", "w") as f:
        json.dump(res, f)
    os.replace(path + ".tmp", path)
    return 0


def spin_rate(torch):
    """Cycles of torch.cuda._sleep per microsecond on the current device, measured once, or
    None without _sleep (then the iterations are timed without a head start)."""
    if not hasattr(torch.cuda, "_sleep"):
        return None
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    a.record()
    torch.cuda._sleep(1000000)
    b.record()
    torch.cuda.synchronize()
    return 1e6 / max(a.elapsed_time(b) * 1e3, 1e-3)


def time_iterations(torch, dist, cuda, spin, run, iters):
    """Per-iteration times in microseconds. On a GPU: one CUDA event pair per iteration, all
    queued behind a spin kernel long enough for the host to queue every iteration first, so
    each interval is the collective on a busy GPU, not the host's launch time."""
    dist.barrier()
    if not cuda:
        out = []
        for _ in range(iters):
            t0 = time.perf_counter()
            run()
            out.append((time.perf_counter() - t0) * 1e6)
        return out
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    if spin:
        # 50 us of host time per iteration, capped at 0.5 s.
        torch.cuda._sleep(int(spin * min(1000.0 + 50.0 * iters, 5e5)))
    for i in range(iters):
        starts[i].record()
        run()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]


def quantile(s, q):
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


# ------------------------------------------------------------------------------ launcher

def busbw_gbs(coll, nbytes, us, ranks):
    """nccl-tests' bus bandwidth: all-reduce bytes * 2(n-1)/n, all-gather (n * bytes) *
    (n-1)/n, over the time; GB/s (1e9 B/s)."""
    if us <= 0:
        return 0.0
    f = 2.0 * (ranks - 1) / ranks if coll == "allreduce" else float(ranks - 1)
    return nbytes * f / (us * 1e-6) / 1e9


def describe_ranks(cfg):
    parts = []
    for r in range(cfg["ranks"]):
        d = "cuda:%d" % r if cfg["device"] == "cuda" else "cpu"
        if cfg["domains"] is not None:
            d += " %s=%d" % (DOMAIN_VAR, cfg["domains"][r])
        parts.append("rank %d %s" % (r, d))
    if cfg["domains"] is not None:
        how = "--rank-domains %s" % cfg["rank_domains"]
    else:
        inh = os.environ.get(DOMAIN_VAR)
        how = "--rank-domains same: %s" % ("%s=%s inherited by every rank" % (DOMAIN_VAR, inh)
                                           if inh else "%s not set" % DOMAIN_VAR)
    return "ranks: %s (%s)" % (", ".join(parts), how)


def env_line(cfg):
    env = rank_env(os.environ, 0, cfg)
    keys = [k for k, _ in NCCL_ENV_DEFAULTS] + sorted(
        k for k in env if k.startswith("NCCL_") and k not in dict(NCCL_ENV_DEFAULTS))
    shown = ["%s=%s" % (k, env[k]) for k in keys if k in env]
    return "env: " + (" ".join(shown) if shown else "no NCCL_* variables")


def stop(procs):
    """SIGTERM every rank still running, SIGKILL after KILL_GRACE_S."""
    for p in procs:
        if p.poll() is None:
            try:
                p.terminate()
            except OSError:
                pass
    end = time.monotonic() + KILL_GRACE_S
    for p in procs:
        while p.poll() is None and time.monotonic() < end:
            time.sleep(0.02)
        if p.poll() is None:
            try:
                p.kill()
            except OSError:
                pass
            p.wait()


class Interrupted(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


def launch(cfg, argv):
    """Start the ranks, wait, print. Returns the exit status."""
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        sys.stderr.write("%s: PyTorch is not installed for %s; the ranks need it (pip install "
                         "torch, or run this with a python that has it)\n"
                         % (PROG, sys.executable))
        return 2
    workdir = tempfile.mkdtemp(prefix="nccl_bench-")
    rundir = None
    if cfg["log_dir"]:
        rundir = os.path.join(cfg["log_dir"], "%s-%d" % (time.strftime("%Y%m%d-%H%M%S"),
                                                         os.getpid()))
        try:
            os.makedirs(rundir)
        except OSError as e:
            sys.stderr.write("%s: cannot create %s: %s\n" % (PROG, rundir, e.strerror))
            shutil.rmtree(workdir, ignore_errors=True)
            return 2
    here = os.path.abspath(__file__)
    procs, logs = [], []
    old = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGTERM, signal.SIGINT)}
    failed, timed_out, interrupted = None, False, None
    t0 = time.monotonic()
    try:
        for r in range(cfg["ranks"]):
            lp = os.path.join(workdir, "rank%d.out" % r)
            logs.append(lp)
            with open(lp, "wb") as lf:
                procs.append(subprocess.Popen(
                    [sys.executable, here] + argv + ["--worker-rank", str(r), "--worker-dir",
                                                     workdir],
                    env=rank_env(os.environ, r, cfg), stdin=subprocess.DEVNULL, stdout=lf,
                    stderr=subprocess.STDOUT))
        while True:
            codes = [p.poll() for p in procs]
            bad = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                failed = bad[0]
                break
            if all(c == 0 for c in codes):
                break
            if time.monotonic() - t0 > cfg["timeout"]:
                timed_out = True
                break
            time.sleep(0.02)
    except Interrupted as e:
        interrupted = e.signum
    finally:
        stop(procs)
        for s, h in old.items():
            signal.signal(s, h)
    wall = time.monotonic() - t0
    try:
        return report(cfg, procs, logs, workdir, rundir, failed, timed_out, interrupted, wall)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def exit_text(code):
    if code is None:
        return "still running"
    if code < 0:
        try:
            return "killed by %s" % signal.Signals(-code).name
        except ValueError:
            return "killed by signal %d" % -code
    return "exit status %d" % code


def report(cfg, procs, logs, workdir, rundir, failed, timed_out, interrupted, wall):
    texts = []
    for lp in logs:
        try:
            with open(lp, "rb") as f:
                texts.append(f.read().decode("utf-8", "replace"))
        except OSError:
            texts.append("")
    parsed = [parse_nccl_log(t) for t in texts]
    # Everything a rank printed that is not NCCL's INFO chatter goes to stderr, marked.
    for r, t in enumerate(texts):
        for line in t.splitlines():
            if line.strip() and not _INFO.search(line) and not _VERSION.search(line):
                sys.stderr.write("[rank %d] %s\n" % (r, line))
    if rundir:
        for r, t in enumerate(texts):
            kept, tuning = split_log(t)
            with open(os.path.join(rundir, "rank%d.log" % r), "w") as f:
                f.write("\n".join(kept) + ("\n" if kept else ""))
            if tuning:
                with open(os.path.join(rundir, "rank%d.tuning.txt" % r), "w") as f:
                    for msg, n in sorted(tuning.items()):
                        f.write("%6d  %s\n" % (n, msg))
    results = []
    for r in range(cfg["ranks"]):
        try:
            with open(os.path.join(workdir, "rank%d.json" % r)) as f:
                results.append(json.load(f))
        except (OSError, ValueError):
            results.append(None)

    status = 0
    if interrupted is not None:
        sys.stderr.write("%s: interrupted (%s): every rank stopped\n"
                         % (PROG, signal.Signals(interrupted).name))
        status = 128 + interrupted
    elif timed_out:
        sys.stderr.write("%s: the run took longer than --timeout %gs: every rank killed\n"
                         % (PROG, cfg["timeout"]))
        status = 1
    elif failed is not None:
        code = procs[failed].returncode
        sys.stderr.write("%s: rank %d ended with %s; the other ranks were stopped\n"
                         % (PROG, failed, exit_text(code)))
        status = code if code in (1, 2) else 1
    elif any(x is None for x in results):
        missing = [r for r, x in enumerate(results) if x is None]
        sys.stderr.write("%s: rank(s) %s exited 0 but left no result\n"
                         % (PROG, ",".join(map(str, missing))))
        status = 1

    out = []
    out.append("nccl_bench: %d ranks, backend %s on %s, float32; allreduce in place, "
               "allgather out of place (size = each rank's input); %d timed iterations after "
               "%d warm-up per size, %s" % (
                   cfg["ranks"], cfg["backend"], cfg["device"], cfg["iters"], cfg["warmup"],
                   "CUDA events per iteration" if cfg["device"] == "cuda"
                   else "host clock per iteration"))
    out.append(describe_ranks(cfg))
    out.append(env_line(cfg))
    version = next((p["version"] for p in parsed if p["version"]), None)
    if version is None and results and results[0] and results[0].get("nccl_version"):
        version = results[0]["nccl_version"]
    if not any(p["info_lines"] for p in parsed):
        if cfg["backend"] == "nccl":
            out.append("nccl: version %s; no INFO lines in the ranks' output (NCCL_DEBUG=%s), "
                       "channels not known" % (version or "?",
                                               rank_env(os.environ, 0, cfg).get("NCCL_DEBUG")))
        else:
            out.append("nccl: not used (backend %s)" % cfg["backend"])
    else:
        out.append("nccl: version %s" % (version or "?"))
        for r, p in enumerate(parsed):
            ch = channels_of(p)
            c = p["counts"]
            extra = ", ".join("%s %d" % (k.replace("_", " "), c[k])
                              for k in ("nvls", "p2p", "p2p_per_peer") if k in c)
            tr = ", ".join(sorted(p["transports"])) or "?"
            out.append("nccl: rank %d channels %s%s; transport %s" % (
                r, "?" if ch is None else ch, " (%s)" % extra if extra else "", tr))
    ok = status == 0
    cases = {}
    if ok:
        for res in results:
            for c in res["cases"]:
                cases.setdefault((c["collective"], c["bytes"]), []).append(c)
        for coll in cfg["collectives"]:
            for nbytes in cfg["sizes"]:
                per = cases[(coll, nbytes)]
                slow = max(per, key=lambda c: c["median_us"])
                us = slow["median_us"]
                line = "%s %d B: %.2f us  busbw %.2f GB/s" % (
                    coll, nbytes, us, busbw_gbs(coll, nbytes, us, cfg["ranks"]))
                tc = tuning_choice(parsed[0], coll, nbytes)
                if tc is not None:
                    algo, proto, nch, ops, others = tc
                    line += "  channels %s (%s/%s%s)" % (
                        "?" if nch is None else nch, algo, proto,
                        ", %d other choice%s" % (others, "s" if others > 1 else "")
                        if others else "")
                line += "  [median of %d, slowest of %d ranks; p10-p90 %.2f-%.2f us]" % (
                    slow["iters"], len(per), slow["p10_us"], slow["p90_us"])
                out.append(line)
        out.append("check: every result of every rank equal to the expected values (%d "
                   "cases, before and after timing)" % len(cases))
        sc, sb = cfg["summary"]
        out.append("summary: %s %d B: %.2f us" % (
            sc, sb, max(c["median_us"] for c in cases[(sc, sb)])))
    sys.stdout.write("\n".join(out) + "\n")
    sys.stdout.flush()

    doc = dict(ok=ok, status=status, wall_s=wall, ranks=cfg["ranks"], backend=cfg["backend"],
               device=cfg["device"], collectives=cfg["collectives"], sizes=cfg["sizes"],
               warmup=cfg["warmup"], iters=cfg["iters"], rank_domains=cfg["rank_domains"],
               domains=cfg["domains"], env=recorded_env(os.environ),
               nccl_version=version, summary=dict(collective=cfg["summary"][0],
                                                  bytes=cfg["summary"][1]),
               rank_results=[None if x is None else {k: v for k, v in x.items()}
                             for x in results],
               nccl=[nccl_json(p) for p in parsed],
               exit=[p.returncode for p in procs])
    if ok:
        doc["cases"] = []
        for coll in cfg["collectives"]:
            for nbytes in cfg["sizes"]:
                per = cases[(coll, nbytes)]
                us = max(c["median_us"] for c in per)
                tc = tuning_choice(parsed[0], coll, nbytes)
                doc["cases"].append(dict(
                    collective=coll, bytes=nbytes, us=us,
                    busbw_gbs=busbw_gbs(coll, nbytes, us, cfg["ranks"]),
                    per_rank_us=[c["median_us"] for c in per],
                    nccl=None if tc is None else dict(algo=tc[0], proto=tc[1], channels=tc[2],
                                                      ops=tc[3], other_choices=tc[4])))
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    for path in ([os.path.join(rundir, "result.json")] if rundir else []) + \
            ([cfg["json"]] if cfg["json"] else []):
        try:
            with open(path, "w") as f:
                f.write(text)
        except OSError as e:
            sys.stderr.write("%s: cannot write %s: %s\n" % (PROG, path, e.strerror))
            status = status or 1
    return status


def launcher_argv(argv):
    """The options a rank is started with: the launcher's own, minus its output options."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in ("--log-dir", "--json"):
            skip = True
            continue
        if a.startswith(("--log-dir=", "--json=")) or a == "--dry-run":
            continue
        out.append(a)
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = build_parser()
    args = p.parse_args(argv)
    try:
        cfg = validate(args)
    except UsageError as e:
        p.error(str(e))
    if args.worker_rank is not None:
        if not args.worker_dir or not 0 <= args.worker_rank < cfg["ranks"]:
            p.error("--worker-rank is internal: the launcher starts the ranks")
        return worker(cfg, args.worker_rank, args.worker_dir)
    if args.dry_run:
        print(describe_ranks(cfg))
        print(env_line(cfg))
        for r in range(cfg["ranks"]):
            env = rank_env(os.environ, r, cfg)
            print("rank %d: RANK=%s WORLD_SIZE=%s %s=%s" % (
                r, env["RANK"], env["WORLD_SIZE"], DOMAIN_VAR, env.get(DOMAIN_VAR, "(unset)")))
        print("cases: %s x %s" % (",".join(cfg["collectives"]),
                                  ",".join(fmt_size(s).replace(" ", "") for s in cfg["sizes"])))
        print("summary: %s %d B" % cfg["summary"])
        return 0
    return launch(cfg, launcher_argv(argv))


if __name__ == "__main__":
    sys.exit(main())
