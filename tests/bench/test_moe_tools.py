#!/usr/bin/env python3
"""test_moe_tools.py RESULT_FILE — CPU checks of the MoE benchmark's host-only tools (no GPU).

gpc_rates.py must turn the recorded dump (bench/results/moe-launch-timeline/2026-11-29-h200/trace-dump.json.gz)
into exactly the recorded tables (gpc-rates.md beside it), and must refuse bad input with a
message and a non-zero exit instead of a traceback. Writes "<passed> <failed>" to RESULT_FILE;
exit 1 when a check failed."""
import gzip
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOOL = os.path.join(ROOT, "bench", "moe", "gpc_rates.py")
RECORD = os.path.join(ROOT, "bench", "results", "moe-launch-timeline", "2026-11-29-h200")


def run(*args):
    p = subprocess.run([sys.executable, TOOL] + list(args), capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) == 2 else 2
    passed = failed = 0

    def check(name, ok, detail=""):
        nonlocal passed, failed
        if ok:
            passed += 1
            print("ok   " + name)
        else:
            failed += 1
            print("FAIL %s: %s" % (name, detail[:400].replace("\n", "|")))

    dump = os.path.join(RECORD, "trace-dump.json.gz")
    with open(os.path.join(RECORD, "gpc-rates.md")) as f:
        want = f.read()
    rc, out, err = run(dump)
    check("gpc-rates-recorded", rc == 0 and out == want and not err,
          "exit %d, stderr %r, %s" % (rc, err, "output equal" if out == want else "output differs"))

    rc, out, err = run("--help")
    check("gpc-rates-help", rc == 0 and "usage: gpc_rates.py" in out and "--dump" in out, out)
    rc, out, err = run()
    check("gpc-rates-no-arg", rc == 2 and "required" in err, err)

    with tempfile.TemporaryDirectory() as tmp:
        def case(name, text, want_err):
            path = os.path.join(tmp, name + ".json")
            with open(path, "w") as f:
                f.write(text)
            rc, out, err = run(path)
            check("gpc-rates-" + name, rc == 1 and want_err in err and "Traceback" not in err,
                  "exit %d, stderr %r" % (rc, err))

        rc, out, err = run(os.path.join(tmp, "absent.json"))
        check("gpc-rates-missing-file", rc == 1 and "cannot read" in err and "Traceback" not in err, err)
        case("not-json", "{ no", "cannot read")
        case("not-a-dump", json.dumps({"slots": []}), "not an overhead.py --dump file")
        with gzip.open(dump, "rt") as f:
            d = json.load(f)
        one = {"E": 128, "m": 8, "variant": "ws128x64", "calls": [d["cases"][0]["calls"][0]]}
        foreign = json.loads(json.dumps(one))
        foreign["calls"][0]["ctas"][0][7] = 140
        case("foreign-sm", json.dumps({"cases": [foreign]}), "SM 140 is not in the H200's GPC table")
        short = json.loads(json.dumps(one))
        short["calls"][0]["ctas"][0] = short["calls"][0]["ctas"][0][:5]
        case("short-row", json.dumps({"cases": [short]}), "without CTA rows of 8 slots")
        nocalls = {"E": 128, "m": 8, "variant": "64x16k4", "calls": []}
        case("no-calls", json.dumps({"cases": [nocalls]}), "without CTA rows")
        case("no-field", json.dumps({"cases": [{"E": 1}]}), "a case lacks")
        partial = json.loads(json.dumps(one))
        partial["calls"][0]["ctas"] = [r for r in partial["calls"][0]["ctas"] if r[7] not in range(124, 132)]
        case("partial", json.dumps({"cases": [partial]}), "no CTA of GPC 8 computed a tile")

    print("test-bench-moe-tools: %d passed, %d failed" % (passed, failed))
    with open(sys.argv[1], "w") as f:
        f.write("%d %d\n" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
