#!/usr/bin/env python3
"""make_table.py — turn bench_alloc rows (as collected by bench/alloc/run.sh) into markdown.

Input lines, tab-separated:
  cmd  <label> <command>
  <label> info <key> <value>
  <label> row <mode> <variant> <bytes> <n> <p50_us> <p90_us> <note>
Labels used: info, info-shim, stock-<k>, shim-<k>, malloc, vmm, cold, pool.
Prints the table on stdout; exit 1 if a row is marked INVALID or a needed row is missing.
"""
import argparse
import datetime
import sys

UNTAGGED_TARGET_US = 1.0
COLD_TARGET_RATIO = 1.15
POOL_TARGET_US = 5.0


def size_name(b):
    for unit, mult in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b % mult == 0:
            return f"{b // mult} {unit}"
    return f"{b} B"


def load(path):
    cmds, info, rows = [], {}, {}
    with open(path, encoding="utf-8") as f:
        for ln in f:
            parts = ln.rstrip("\n").split("\t")
            if parts[0] == "cmd" and len(parts) >= 3:
                cmds.append((parts[1], parts[2]))
            elif len(parts) >= 4 and parts[1] == "info":
                info[(parts[0], parts[2])] = parts[3]
            elif len(parts) >= 9 and parts[1] == "row":
                label, _, mode, variant, b, n, p50, p90, note = parts[:9]
                rows[(label, mode, variant, int(b))] = {
                    "n": int(n), "p50": float(p50), "p90": float(p90), "note": note}
    return cmds, info, rows


def fmt(r):
    return f"{r['p50']:.1f} / {r['p90']:.1f}" if r else "—"


def verdict(ok):
    return "yes" if ok else "**no**"


def main(argv):
    ap = argparse.ArgumentParser(description="markdown table from bench_alloc rows")
    ap.add_argument("raw", help="rows file written by bench/alloc/run.sh")
    ap.add_argument("--driver", default="unknown", help="driver version (nvidia-smi)")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--command", default="bench/alloc/run.sh")
    ap.add_argument("--date", default=None, help="override the date (tests)")
    a = ap.parse_args(argv)
    try:
        cmds, info, rows = load(a.raw)
    except (OSError, ValueError) as e:
        print(f"make_table: cannot read {a.raw}: {e}", file=sys.stderr)
        return 1
    problems = []
    date = a.date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    gpu = info.get(("info", "gpu"), "unknown GPU")
    out = []
    out.append(f"# Allocation benchmark — {date}")
    out.append("")
    out.append(f"- GPU: {gpu} ({info.get(('info', 'sms'), '?')} SMs, {info.get(('info', 'memory_mib'), '?')} MiB)")
    out.append(f"- Driver: {a.driver} (CUDA driver API {info.get(('info', 'cuda_driver_api'), '?')}), "
               f"runtime {info.get(('info', 'cuda_runtime'), '?')}")
    out.append(f"- libldshim: {info.get(('info-shim', 'shim'), 'unknown')}, commit {a.commit}, backend emulated")
    out.append(f"- Command: `{a.command}`")
    out.append("- Times: microseconds, P50 / P90, host wall clock around the API calls (cudaFree synchronizes).")
    out.append("")

    # (a) untagged
    out.append("## (a) Untagged cudaMalloc + cudaFree: cost the shim adds")
    out.append("")
    out.append("| size | n | stock P50 (run 1, run 2) | shim P50 (run 1, run 2) | added P50 | stock P90 | shim P90 | < 1 µs |")
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    sizes = sorted({k[3] for k in rows if k[1] == "untagged"})
    for b in sizes:
        st = [rows.get((f"stock-{i}", "untagged", "cycle", b)) for i in (1, 2)]
        sh = [rows.get((f"shim-{i}", "untagged", "cycle", b)) for i in (1, 2)]
        if not all(st) or not all(sh):
            problems.append(f"untagged {size_name(b)}: missing run")
            continue
        ms = sum(r["p50"] for r in st) / 2
        mh = sum(r["p50"] for r in sh) / 2
        added = mh - ms
        spread = abs(st[0]["p50"] - st[1]["p50"])
        out.append(f"| {size_name(b)} | {st[0]['n']} | {st[0]['p50']:.2f}, {st[1]['p50']:.2f} | "
                   f"{sh[0]['p50']:.2f}, {sh[1]['p50']:.2f} | {added:+.2f} (stock spread {spread:.2f}) | "
                   f"{max(r['p90'] for r in st):.2f} | {max(r['p90'] for r in sh):.2f} | "
                   f"{verdict(added < UNTAGGED_TARGET_US)} |")
        for r in st + sh:
            if r["note"].startswith("INVALID"):
                problems.append(f"untagged {size_name(b)}: {r['note']}")
    out.append("")

    # (b) cold
    out.append("## (b) Tagged cold cycle (pool = 0) vs the hand-made 7-call VMM cycle")
    out.append("")
    out.append("| size | cudaMalloc+Free (stock) | VMM, 1 handle | VMM, 2 handles | shim tagged cold | "
               "shim / 2 handles | shim / 1 handle | within 1.15× (2 handles) | note |")
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for b in sorted({k[3] for k in rows if k[1] in ("vmm", "tagged", "malloc")}):
        m = rows.get(("malloc", "malloc", "cycle", b))
        v1 = rows.get(("vmm", "vmm", "1handle", b))
        v2 = rows.get(("vmm", "vmm", "2handles", b))
        t = rows.get(("cold", "tagged", "cycle", b))
        r2 = f"{t['p50'] / v2['p50']:.2f}×" if t and v2 else "—"
        r1 = f"{t['p50'] / v1['p50']:.2f}×" if t and v1 else "—"
        ok = verdict(t["p50"] <= COLD_TARGET_RATIO * v2["p50"]) if t and v2 else "—"
        note = t["note"] if t else "missing"
        if not t or not v1 or not v2:
            problems.append(f"cold {size_name(b)}: missing row")
        elif t["note"].startswith("INVALID"):
            problems.append(f"cold {size_name(b)}: {t['note']}")
        out.append(f"| {size_name(b)} | {fmt(m)} | {fmt(v1)} | {fmt(v2)} | {fmt(t)} | {r2} | {r1} | {ok} | {note} |")
    out.append("")

    # (c) pool
    out.append("## (c) Tagged re-allocation served from the pool (pool on)")
    out.append("")
    out.append("| size | cudaMalloc (pool hit) | cudaFree (to pool) | cycle | malloc P50 < 5 µs | note |")
    out.append("| --- | --- | --- | --- | --- | --- |")
    for b in sorted({k[3] for k in rows if k[1] == "pool"}):
        pm = rows.get(("pool", "pool", "malloc", b))
        pf = rows.get(("pool", "pool", "free", b))
        pc = rows.get(("pool", "pool", "cycle", b))
        ok = verdict(pm["p50"] < POOL_TARGET_US) if pm else "—"
        note = pm["note"] if pm else "missing"
        if not pm or note.startswith("INVALID"):
            problems.append(f"pool {size_name(b)}: {note}")
        out.append(f"| {size_name(b)} | {fmt(pm)} | {fmt(pf)} | {fmt(pc)} | {ok} | {note} |")
    out.append("")

    out.append("## Commands")
    out.append("")
    for label, c in cmds:
        out.append(f"- `{label}`: `{c}`")
    if problems:
        out.append("")
        out.append("## Problems")
        out.append("")
        out.extend(f"- {p}" for p in problems)
    print("\n".join(out))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
