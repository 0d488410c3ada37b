#!/usr/bin/env python3
"""chunk_table.py ROWS.tsv [--simulated] — the chunking benchmark's table (markdown) from
chunk_run.sh's rows: per size the median over reps of each variant's per-process p50 (wall, or
with --simulated the fake driver's simulated cost), and 32 MiB handles / one handle. With
--simulated the study's Table 6 (B300, full cycle P50: ordinary and localized) stands beside it."""
import statistics
import sys

# Seed 001, Table 6: size MiB -> (ordinary us, localized us)
STUDY = {2: (123.1, 144.8), 32: (135.9, 158.3), 34: (134.9, 492.0), 64: (147.9, 814.0),
         512: (507.6, 5876.5), 1024: (877.7, 11543.4)}


def main():
    path = sys.argv[1]
    sim = "--simulated" in sys.argv
    col = 6 if sim else 5
    v = {}
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if not f or f[0] != "row":
            continue
        if len(f) > 8 and f[7].startswith("INVALID"):
            sys.exit("invalid row: %s" % line.strip())
        v.setdefault((int(f[3]), f[2]), []).append(float(f[col]))
    sizes = sorted({s for s, _ in v})
    what = "simulated us (fake driver, model of the study)" if sim else "wall us, P50"
    head = "| size | one handle (%s) | 32 MiB handles | handles | 32 MiB / one |" % what
    if sim:
        head += " study: ordinary | study: localized, one handle |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for s in sizes:
        one = statistics.median(v[(s, "slice")])
        ch = statistics.median(v[(s, "32MiB")])
        mib = s >> 20
        row = "| %d MiB | %.1f | %.1f | %d | %.2fx |" % (mib, one, ch, max(1, -(-s // (32 << 20))), ch / one)
        if sim:
            st = STUDY.get(mib)
            row += " %s | %s |" % (("%.1f" % st[0], "%.1f" % st[1]) if st else ("", ""))
        print(row)


if __name__ == "__main__":
    main()
