#!/usr/bin/env python3
"""fuzz_ab_report.py — a seeded mutational fuzzer for ldshim-ab's report reader.

atheris (libFuzzer for Python) is not installed here, so this is a plain loop: it takes the
seeds in tests/fuzz/ab_corpus, mutates them (bytes flipped, inserted, removed, chunks
duplicated and spliced between seeds, JSON tokens and extreme values dropped in, and, on
parsed seeds, values replaced by values of other JSON types, deep nesting and huge numbers)
and feeds each input through everything ldshim-ab does with a shim report:

    the bounded file read (fileio.read_bytes, through a real file, every 50th input)
    parse_report -> merge_reports (with itself and a seed) -> report_facts -> histogram_lines
    and the table cells built from the facts (fmt_sm, fmt_domain_bytes)

A reader may refuse an input only with FileError or ValueError (parse_report's refusals); every
later step must take whatever JSON object parsed. Any other exception, or an input that takes
more than 10 s, is a crash: its bytes are written to OUT/crash-<sha1>.json and the run fails.

    fuzz_ab_report.py [--seconds S | --runs N] [--seed K] [--out DIR]

Ends after S seconds (default 60) or N inputs, whichever is given; the same --seed and --runs
give the same inputs. Exit 0 clean, 1 crash. Prints one summary line.
"""
import argparse
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import random
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

TOKENS = [b"{", b"}", b"[", b"]", b",", b":", b'"', b"null", b"true", b"false", b"-1", b"0",
          b"1e309", b"-1e309", b"NaN", b"Infinity", b"-Infinity", b"9" * 400, b"1.5",
          b'"size"', b'"count"', b'"api"', b'"histogram"', b'"untagged"', b'"counts"',
          b'"devices"', b'"compute"', b'"rules"', b'"bytes_per_domain"', b'"sm_count"',
          b'"applied"', b'"device"', b'"tagged_allocs"', b'"placed_bytes_per_domain"',
          b'"compute_by_device"', b'"policy_error"', b'"state"', b"\x00", b"\xff\xfe",
          b"\\u0000", b"\\ud800", b"\x1b[31m", b"\n", b" " * 64, b"[" * 200]
KEYS = ["size", "count", "api", "histogram", "untagged", "counts", "devices", "compute",
        "rules", "bytes_per_domain", "sm_count", "applied", "requested", "device",
        "tagged_allocs", "fallbacks", "placed_bytes_per_domain", "compute_by_device",
        "policy_error", "state", "backend", "domain"]


def load_tool(path):
    loader = importlib.machinery.SourceFileLoader("ldshim_ab_fuzzed", path)
    spec = importlib.util.spec_from_loader("ldshim_ab_fuzzed", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def rand_value(rng, depth=0):
    k = rng.randrange(12 if depth < 4 else 8)
    if k == 0:
        return None
    if k == 1:
        return rng.choice([True, False])
    if k == 2:
        return rng.choice([0, -1, 1, 2 ** 31, 2 ** 63, -(2 ** 63), 10 ** 300, 10 ** 400,
                           rng.randrange(-10 ** 6, 10 ** 12)])
    if k == 3:
        return rng.choice([0.0, -0.0, 1.5, 1e308, -1e308, float("inf"), float("-inf"),
                           float("nan")])
    if k == 4:
        return rng.choice(["", "all", "domain:1", "spread:2", "\x1b[2J", "a" * 5000,
                           "\ud800"[:0] + "x", "runtime"])
    if k in (5, 6, 7):
        return rng.choice(KEYS)
    if k in (8, 9):
        return [rand_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(KEYS): rand_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def mutate_tree(rng, obj, depth=0):
    """A copy of `obj` with some values replaced, removed or added."""
    if isinstance(obj, dict):
        out = {}
        for key, v in obj.items():
            r = rng.random()
            if r < 0.08:
                continue
            out[key] = rand_value(rng) if r < 0.2 else mutate_tree(rng, v, depth + 1)
        if rng.random() < 0.2:
            out[rng.choice(KEYS)] = rand_value(rng)
        return out
    if isinstance(obj, list):
        out = [rand_value(rng) if rng.random() < 0.1 else mutate_tree(rng, v, depth + 1)
               for v in obj if rng.random() > 0.05]
        if rng.random() < 0.1:
            out.append(rand_value(rng))
        return out
    return rand_value(rng) if rng.random() < 0.1 else obj


def mutate_bytes(rng, data, seeds):
    data = bytearray(data)
    for _ in range(rng.randrange(1, 8)):
        op = rng.randrange(7)
        pos = rng.randrange(len(data) + 1)
        if op == 0 and data:
            data[min(pos, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[pos:pos] = rng.choice(TOKENS)
        elif op == 2 and data:
            del data[pos:pos + rng.randrange(1, 64)]
        elif op == 3 and data:
            a = rng.randrange(len(data))
            data[pos:pos] = data[a:a + rng.randrange(1, 256)]
        elif op == 4:
            other = rng.choice(seeds)
            a = rng.randrange(len(other) + 1)
            data[pos:] = other[a:]
        elif op == 5:
            data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
        else:
            n = rng.randrange(1, 3000)
            data[pos:pos] = b"[" * n + b"]" * n if rng.random() < 0.5 else b'{"a":' * n + b"1" + b"}" * n
    return bytes(data)


def make_input(rng, seeds, parsed):
    r = rng.random()
    if r < 0.45 and parsed:
        obj = mutate_tree(rng, rng.choice(parsed))
        return json.dumps(obj, allow_nan=True).encode("utf-8", "surrogatepass")
    if r < 0.55:
        return json.dumps(rand_value(rng)).encode("utf-8", "surrogatepass")
    return mutate_bytes(rng, rng.choice(seeds), seeds)


class Timeout(Exception):
    pass


def exercise(ab, data, seed_rep, path_dir, use_file):
    """Everything ldshim-ab does with a report's bytes."""
    if use_file:
        with ab.fileio.OutDir.open(path_dir, create=False) as d:
            d.write("r.json", data)
            try:
                data = d.read_bytes("r.json", ab.REPORT_MAX_BYTES, "shim report",
                                    ab.REPORT_MAX_LINE)
            except ab.FileError:
                return "refused"
    try:
        rep = ab.parse_report(data)
    except ValueError:
        return "refused"
    if rep is None:
        return "not an object"
    for reps in ([rep], [rep, rep], [seed_rep, rep]):
        merged = ab.merge_reports(reps)
        facts = ab.report_facts(merged, "full")
        ab.fmt_sm(facts.get("sm_count"))
        ab.fmt_domain_bytes(facts.get("bytes_per_domain"))
        json.dumps(facts)
        "\n".join(ab.histogram_lines(merged))
    "\n".join(ab.histogram_lines(rep))
    return "parsed"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=None)
    p.add_argument("--runs", type=int, default=None)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default=os.path.join(ROOT, "build", "fuzz", "ab"))
    p.add_argument("--tool", default=os.environ.get("AB_TOOL",
                                                    os.path.join(ROOT, "tools", "ldshim-ab")))
    p.add_argument("--corpus", default=os.path.join(HERE, "ab_corpus"))
    a = p.parse_args()
    seconds = a.seconds if a.seconds is not None or a.runs is not None else 60.0
    ab = load_tool(a.tool)
    seeds = []
    for name in sorted(os.listdir(a.corpus)):
        seeds.append(ab.fileio.read_bytes(os.path.join(a.corpus, name), 1 << 20, "seed"))
    parsed = [ab.parse_report(s) for s in seeds]
    parsed = [x for x in parsed if x is not None]
    rng = random.Random(a.seed)
    counts = {}
    tmp = tempfile.mkdtemp(prefix="fuzz-ab-")

    def on_alarm(signum, frame):
        raise Timeout()
    signal.signal(signal.SIGALRM, on_alarm)
    t0 = time.monotonic()
    n, crash = 0, None
    try:
        while True:
            if a.runs is not None and n >= a.runs:
                break
            if seconds is not None and time.monotonic() - t0 >= seconds:
                break
            data = make_input(rng, seeds, parsed)
            n += 1
            signal.alarm(10)
            try:
                what = exercise(ab, data, parsed[0], tmp, n % 50 == 0)
            except BaseException as e:          # noqa: BLE001 - every escape is a crash
                if isinstance(e, KeyboardInterrupt):
                    raise
                crash = (data, "%s: %s" % (type(e).__name__, str(e)[:300]))
                break
            finally:
                signal.alarm(0)
            counts[what] = counts.get(what, 0) + 1
    finally:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    took = time.monotonic() - t0
    if crash:
        with ab.fileio.OutDir.open(a.out) as d:
            name = "crash-%s.json" % hashlib.sha1(crash[0]).hexdigest()[:16]
            d.write(name, crash[0])
        print("fuzz_ab_report: CRASH after %d inputs (seed %d): %s; input in %s"
              % (n, a.seed, crash[1], os.path.join(a.out, name)))
        return 1
    print("fuzz_ab_report: %d inputs in %.1f s clean (seed %d; %s)"
          % (n, took, a.seed, ", ".join("%s %d" % kv for kv in sorted(counts.items()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
