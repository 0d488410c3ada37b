#!/usr/bin/env python3
"""check_budget.py — the documents and the records stay what a newcomer can read (suite
test-doc-budget).

    python3 tests/docs/check_budget.py [--root DIR] [--result FILE] [--no-selftest]

Checks, each one line "ok NAME" or "FAIL NAME: why":
  size        README.md <= 12 KiB; doc/*.md together <= 120 KiB; doc/moe.md <= 30 KiB
  records     bench/results/ <= 3 MiB and <= 300 files; every folder in it is
              <question>/<YYYY-MM-DD>-<gpu>/ (files only at the top: README.md, reliability.json),
              and no folder inside a record is named for a step (`f-v3/`, `4-final/`)
  history     README.md and doc/*.md describe the design, not how the work went: no line
              matches a history marker (MARKERS below; file names and paths are ignored)
  cited       every bench/results/... path README.md and doc/*.md name exists (a path written
              after a commit, `HASH:bench/results/...`, names git history and is not checked;
              templates holding < > * are skipped), and every record the index
              (bench/results/README.md) names in backquotes exists
Unless --no-selftest, the checks also run over small synthetic trees that must fail (an
oversized README, a narrative line, a missing record, a loose folder) and one that must pass
(design text that uses the same words innocently), so a check that cannot fail fails.
Result: "<passed> <failed>" to --result.
"""
import argparse
import glob
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KIB = 1024
LIMITS = {"README.md": 12 * KIB, "doc": 120 * KIB, "doc/moe.md": 30 * KIB}
RECORDS_BYTES, RECORDS_FILES = 3 * KIB * KIB, 300
TOP_FILES = {"README.md", "reliability.json"}
DATED = re.compile(r"^\d{4}-\d{2}-\d{2}-[a-z0-9]+$")
# A folder named for the step of a run (`f-v3/`, `4-final/`, `k-late-tail-default/`), not its content.
STEP = re.compile(r"^(?:[a-z]|\d+)-")

ORD = (r"first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
       r"thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|"
       r"twenty-\w+|thirtieth|previous|next|last|earlier|later|this|that|same|each|every|one")
# A line that narrates the work's history. Unix sessions (setsid), "per call" and the like pass.
MARKERS = [
    ("a session named by order", re.compile(r"\b(?:%s)\s+sessions?\b" % ORD, re.I)),
    ("a numbered session", re.compile(r"\bsessions?\s+(?:\d+|[ivx]+)\b", re.I)),
    ("a device call by number", re.compile(r"\b(?:device\s+)?calls?\s+\d+\b(?!\s*(?:µs|us|ms|times|bytes|%))", re.I)),
    ("a run narrated by letter", re.compile(r"\b(?:device\s+)?call\s+[a-k]\b(?=\s*[),;:(]|\s+(?:of|on|in|got|ran|found|showed))", re.I)),
    ("'we' narrating work", re.compile(r"\bwe\s+(?:tried|found|measured|then|did|saw|decided|added|changed|had|ran|noticed|fixed)\b", re.I)),
    ("'then we'", re.compile(r"\bthen\s+we\b", re.I)),
    ("'until now' / 'so far'", re.compile(r"\buntil now\b|\bnothing tried so far\b|\bso far\b", re.I)),
    ("an issue's ending", re.compile(r"\bissue\s+\d+\s+(?:ended|was (?:closed|blocked|resolved))\b", re.I)),
    ("a code history", re.compile(r"\b(?:as first written|an earlier version|the old code|used to (?:be|read|take))\b", re.I)),
]
# Paths and file names are names, not narrative (trace-packed-call4.md, ...).
PATHLIKE = re.compile(r"\S*/\S*|\S+\.(?:md|txt|log|json|tsv|csv|py|sh|gz)\b")
CITED = re.compile(r"(?<![0-9a-fA-F]:)\bbench/results/[^\s`'\")\]|,;]*")
INDEX_RECORD = re.compile(r"`([a-z0-9-]+/\d{4}-\d{2}-\d{2}-[a-z0-9]+/[^`\s]*)`")


def docs(root):
    return ["README.md"] + sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "doc", "*.md")))


def size_checks(root):
    out = []
    readme = os.path.join(root, "README.md")
    n = os.path.getsize(readme) if os.path.exists(readme) else 0
    out.append(("size/README.md", n <= LIMITS["README.md"], "%d bytes, limit %d" % (n, LIMITS["README.md"])))
    total = sum(os.path.getsize(p) for p in glob.glob(os.path.join(root, "doc", "*.md")))
    out.append(("size/doc", total <= LIMITS["doc"], "doc/*.md %d bytes, limit %d" % (total, LIMITS["doc"])))
    moe = os.path.join(root, "doc", "moe.md")
    n = os.path.getsize(moe) if os.path.exists(moe) else 0
    out.append(("size/doc-moe", n <= LIMITS["doc/moe.md"], "%d bytes, limit %d" % (n, LIMITS["doc/moe.md"])))
    return out


def record_checks(root):
    res = os.path.join(root, "bench", "results")
    nbytes = nfiles = 0
    loose = []
    for d, dirs, files in os.walk(res):
        rel = os.path.relpath(d, res)
        depth = 0 if rel == "." else rel.count(os.sep) + 1
        for f in files:
            nbytes += os.path.getsize(os.path.join(d, f))
            nfiles += 1
            if depth == 0 and f not in TOP_FILES:
                loose.append(f)
            if depth == 1:
                loose.append(os.path.join(rel, f))
        if depth == 1:
            loose.extend(os.path.join(rel, x) + "/" for x in dirs if not DATED.match(x))
        if depth >= 2:
            loose.extend(os.path.join(rel, x) + "/ (a step folder)" for x in dirs if STEP.match(x))
    return [("records/bytes", nbytes <= RECORDS_BYTES, "%d bytes, limit %d" % (nbytes, RECORDS_BYTES)),
            ("records/files", nfiles <= RECORDS_FILES, "%d files, limit %d" % (nfiles, RECORDS_FILES)),
            ("records/layout", not loose,
             "not <question>/<YYYY-MM-DD>-<gpu>/: " + ", ".join(sorted(loose)[:8]))]


def history_hits(text):
    hits = []
    in_code = False
    for n, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith(("```", "~~~")):
            in_code = not in_code
            continue
        if in_code:
            continue
        plain = PATHLIKE.sub(" ", line)
        for what, rx in MARKERS:
            m = rx.search(plain)
            if m:
                hits.append("%d: %s (%r)" % (n, what, m.group(0)))
                break
    return hits


def history_checks(root):
    out = []
    for doc in docs(root):
        path = os.path.join(root, doc)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            hits = history_hits(f.read())
        out.append(("history/" + doc, not hits, "; ".join(hits[:5])))
    return out


def cited_checks(root):
    out = []
    for doc in docs(root):
        path = os.path.join(root, doc)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        missing = []
        for m in CITED.finditer(text):
            p = m.group(0).rstrip(".:")
            if any(c in p for c in "<>*"):
                continue
            if not os.path.exists(os.path.join(root, p)):
                missing.append(p)
        out.append(("cited/" + doc, not missing, "missing: " + ", ".join(sorted(set(missing))[:8])))
    index = os.path.join(root, "bench", "results", "README.md")
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            text = f.read()
        text = text.split("## Removed records")[0]
        missing = [p for p in INDEX_RECORD.findall(text)
                   if not os.path.exists(os.path.join(root, "bench", "results", p))]
        out.append(("cited/bench/results/README.md", not missing, "missing: " + ", ".join(sorted(set(missing))[:8])))
    return out


def run_all(root):
    return size_checks(root) + record_checks(root) + history_checks(root) + cited_checks(root)


def make_tree(readme="# x\n", moe="# moe\n", other="", records=("q/2026-01-01-h200/a.md",)):
    d = tempfile.mkdtemp(prefix="ldshim-budget.")
    os.makedirs(os.path.join(d, "doc"))
    os.makedirs(os.path.join(d, "bench", "results"))
    with open(os.path.join(d, "README.md"), "w") as f:
        f.write(readme)
    with open(os.path.join(d, "doc", "moe.md"), "w") as f:
        f.write(moe)
    with open(os.path.join(d, "doc", "other.md"), "w") as f:
        f.write(other)
    for r in records:
        p = os.path.join(d, "bench", "results", r)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write("x\n")
    return d


def selftests():
    """(name, ok, why) for each synthetic tree: the named check must fail, or all must pass."""
    good = ("The helper runs in a new session, so Ctrl-C reaches only the application. Each call\n"
            "returns at once; a call per tile; 3 calls. See bench/results/q/2026-01-01-h200/a.md\n"
            "and trace-packed-call4.md; `git show 9f24ceab70b4:bench/results/gone/` names history.\n")
    cases = [
        ("passes: design text using the words innocently", dict(other=good), None),
        ("fails: README over 12 KiB", dict(readme="x" * (12 * KIB + 1)), "size/README.md"),
        ("fails: doc/moe.md over 30 KiB", dict(moe="x" * (30 * KIB + 1)), "size/doc-moe"),
        ("fails: doc/ over 120 KiB", dict(other="y\n" * (61 * KIB)), "size/doc"),
        ("fails: an ordinal session", dict(other="In the twentieth session the tail was cut.\n"), "history/doc/other.md"),
        ("fails: 'we tried'", dict(readme="# x\nWe tried clusters first.\n"), "history/README.md"),
        ("fails: a device call by number", dict(other="On call 5 the board ran hot.\n"), "history/doc/other.md"),
        ("fails: a missing cited record", dict(other="See bench/results/q/2026-01-02-h200/b.md.\n"), "cited/doc/other.md"),
        ("fails: a loose folder", dict(records=("q/2026-01-01-h200/a.md", "q/f-v3/x.md")), "records/layout"),
        ("fails: a step folder", dict(records=("q/2026-01-01-h200/k-late-tail/x.md",)), "records/layout"),
        ("fails: too many record files", dict(records=tuple("q/2026-01-01-h200/%d" % i for i in range(301))), "records/files"),
    ]
    out = []
    for name, kw, must_fail in cases:
        d = make_tree(**kw)
        try:
            results = run_all(d)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        failed = [r[0] for r in results if not r[1]]
        if must_fail is None:
            out.append(("selftest/" + name, not failed, "failed: %s" % failed))
        else:
            out.append(("selftest/" + name, must_fail in failed,
                        "%s did not fail (failed: %s)" % (must_fail, failed)))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="check_budget.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=ROOT, help="checkout to check (default: this one)")
    ap.add_argument("--result", help='write "<passed> <failed>" here')
    ap.add_argument("--no-selftest", action="store_true", help="skip the synthetic trees")
    a = ap.parse_args(argv)
    results = run_all(a.root) + ([] if a.no_selftest else selftests())
    passed = failed = 0
    for name, ok, why in results:
        if ok:
            passed += 1
            print("ok   " + name)
        else:
            failed += 1
            print("FAIL %s: %s" % (name, why))
    print("test-doc-budget: %d passed, %d failed" % (passed, failed))
    if a.result:
        with open(a.result, "w") as f:
            f.write("%d %d\n" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
