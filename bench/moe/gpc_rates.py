#!/usr/bin/env python3
"""gpc_rates.py — per-GPC tile rates and exit times from an overhead.py --trace --dump file.

    python3 bench/moe/overhead.py --trace --dump trace.json --out $OUT/overhead.md   # on the GPU
    python3 bench/moe/gpc_rates.py trace.json          # anywhere; .json or .json.gz

For every case of the dump (E, m, variant) one markdown table: per GPC its SM count, the mean
tiles per CTA, tiles per 100 µs per SM (from each CTA's first stage to its exit), the mean exit
time after the launch's first CTA entry, and how many of each call's last 10 CTAs to exit ran
there. Output goes to stdout. The recorded run: bench/results/moe-launch-timeline/2026-11-29-h200/gpc-rates.md
from trace-dump.json.gz beside it.

The GPC membership is the H200's (132 SMs) as the placement probe found it
(bench/moe/sm_layout.cu; bench/results/moe-scheduler-cost/2026-11-29-h200/sm-layout-h200.txt:
8/16/16/16/16/16/18/18/8 SMs). A dump from a GPU with other SM ids is refused."""
import argparse
import collections
import gzip
import json
import statistics as st
import sys

GPCS = [[0, 1, 16, 17, 32, 33, 48, 49],
        [2, 3, 18, 19, 34, 35, 50, 51, 64, 65, 78, 79, 92, 93, 106, 107],
        [4, 5, 20, 21, 36, 37, 52, 53, 66, 67, 80, 81, 94, 95, 108, 109],
        [6, 7, 22, 23, 38, 39, 54, 55, 68, 69, 82, 83, 96, 97, 110, 111],
        [8, 9, 24, 25, 40, 41, 56, 57, 70, 71, 84, 85, 98, 99, 112, 113],
        [10, 11, 26, 27, 42, 43, 58, 59, 72, 73, 86, 87, 100, 101, 114, 115],
        [12, 13, 28, 29, 44, 45, 60, 61, 74, 75, 88, 89, 102, 103, 116, 117, 120, 121],
        [14, 15, 30, 31, 46, 47, 62, 63, 76, 77, 90, 91, 104, 105, 118, 119, 122, 123],
        [124, 125, 126, 127, 128, 129, 130, 131]]

# Slots of one CTA row in the dump (overhead.py writes their names under "slots").
ENTRY, FIRST_DATA, EXIT, TILES, SMID = 0, 3, 5, 6, 7


class DumpError(Exception):
    pass


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt") as f:
            d = json.load(f)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DumpError("cannot read %s: %s" % (path, e))
    if not isinstance(d, dict) or not isinstance(d.get("cases"), list):
        raise DumpError("%s: not an overhead.py --dump file (no \"cases\" list)" % path)
    return d


def report(d, out):
    gpc = {s: i for i, g in enumerate(GPCS) for s in g}
    for c in d["cases"]:
        try:
            calls = [call["ctas"] for call in c["calls"]]
            head = "E=%d m=%d %s" % (c["E"], c["m"], c["variant"])
        except (KeyError, TypeError) as e:
            raise DumpError("a case lacks %s" % e)
        if not calls or not all(calls) or any(len(r) <= SMID for t in calls for r in t):
            raise DumpError("%s: a call without CTA rows of %d slots (not a warp-specialized tile?)"
                            % (head, SMID + 1))
        for t in calls:
            for r in t:
                if r[SMID] not in gpc:
                    raise DumpError("%s: SM %s is not in the H200's GPC table; this dump is from another GPU"
                                    % (head, r[SMID]))
        print(head, file=out)
        agg = collections.defaultdict(lambda: {"tiles": [], "rate": [], "exit": []})
        last = collections.Counter()
        for t in calls:
            t0 = min(r[ENTRY] for r in t)
            for r in t:
                a = agg[gpc[r[SMID]]]
                a["tiles"].append(r[TILES])
                a["exit"].append((r[EXIT] - t0) / 1e3)
                if r[EXIT] > r[FIRST_DATA] and r[TILES]:
                    a["rate"].append(r[TILES] / ((r[EXIT] - r[FIRST_DATA]) / 1e3) * 100)
            last.update(gpc[r[SMID]] for r in sorted(t, key=lambda r: r[EXIT])[-10:])
        print("| GPC | SMs | tiles per CTA | tiles per 100 us per SM | mean exit us | of the last 10 exits |",
              file=out)
        print("|---|---|---|---|---|---|", file=out)
        for g in range(len(GPCS)):
            a = agg[g]
            if not a["tiles"] or not a["rate"]:
                raise DumpError("%s: no CTA of GPC %d computed a tile (a partial dump?)" % (head, g))
            print("| %d | %d | %.2f | %.3f | %.1f | %d |" % (g, len(GPCS[g]), st.fmean(a["tiles"]),
                                                         st.fmean(a["rate"]), st.fmean(a["exit"]), last[g]),
                  file=out)
        print(file=out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="gpc_rates.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dump", help="the JSON file overhead.py --trace --dump wrote (may be gzipped)")
    a = ap.parse_args(argv)
    try:
        report(load(a.dump), sys.stdout)
    except DumpError as e:
        print("gpc_rates.py: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
