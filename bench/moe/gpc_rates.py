#!/usr/bin/env python3
"""gpc_rates.py — per-GPC tile rates and exit times from an overhead.py --trace --dump file.

    python3 bench/moe/gpc_rates.py bench/results/moe-launch-timeline/trace-dump.json.gz

GPC membership of the H200's SMs as the placement probe found it
(bench/results/moe-scheduler-cost/sm-layout-h200.txt: 8/16/16/16/16/16/18/18/8 SMs)."""
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


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) == 2 else 2
    opener = gzip.open if sys.argv[1].endswith(".gz") else open
    with opener(sys.argv[1], "rt") as f:
        d = json.load(f)
    gpc = {s: i for i, g in enumerate(GPCS) for s in g}
    for c in d["cases"]:
        print("E=%d m=%d %s" % (c["E"], c["m"], c["variant"]))
        agg = collections.defaultdict(lambda: {"tiles": [], "rate": [], "exit": []})
        last = collections.Counter()
        for call in c["calls"]:
            t = call["ctas"]
            t0 = min(r[0] for r in t)
            for r in t:
                a = agg[gpc[r[7]]]
                a["tiles"].append(r[6])
                a["exit"].append((r[5] - t0) / 1e3)
                if r[5] > r[3] and r[6]:
                    a["rate"].append(r[6] / ((r[5] - r[3]) / 1e3) * 100)
            last.update(gpc[r[7]] for r in sorted(t, key=lambda r: r[5])[-10:])
        print("| GPC | SMs | tiles per CTA | tiles per 100 us per SM | mean exit us | of the last 10 exits |")
        print("|---|---|---|---|---|---|")
        for g in range(len(GPCS)):
            a = agg[g]
            print("| %d | %d | %.2f | %.3f | %.1f | %d |" % (g, len(GPCS[g]), st.fmean(a["tiles"]), st.fmean(a["rate"]),
                                                         st.fmean(a["exit"]), last[g]))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
