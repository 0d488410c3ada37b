#!/usr/bin/env python3
"""check_report.py — assert facts about one LDSHIM_REPORT JSON file (GPU suite test-gpu-shim).

Prints one line per violated expectation and exits 1, prints "report ok" and exits 0, or
exits 2 when the file is missing or not JSON. Standard library only.
"""
import argparse
import json
import sys


def rules_by_name(rep):
    out = {}
    for r in rep.get("rules", []) or []:
        if isinstance(r, dict) and "name" in r:
            out[r["name"]] = r
    return out


def num(v, default=0):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def check(rep, a):
    errs = []
    if a.state is not None and rep.get("state") != a.state:
        errs.append(f"state is {rep.get('state')!r}, expected {a.state!r}")
    if a.backend is not None and rep.get("backend") != a.backend:
        errs.append(f"backend is {rep.get('backend')!r}, expected {a.backend!r}")
    rules = rules_by_name(rep)
    for spec in a.rule:
        name, op, count = parse_rule_spec(spec)
        r = rules.get(name)
        if r is None:
            errs.append(f"rule {name!r} missing from report (rules: {sorted(rules)})")
            continue
        got = num(r.get("allocations"), -1)
        ok = got == count if op == "=" else got >= count
        if not ok:
            errs.append(f"rule {name}: allocations {got}, expected {op}{count} (matched {r.get('matched')})")
        if got > 0:
            bpd = r.get("bytes_per_domain")
            if not isinstance(bpd, list) or len(bpd) < 2 or any(num(x) <= 0 for x in bpd):
                errs.append(f"rule {name}: bytes_per_domain {bpd!r}, expected >= 2 domains each > 0 (split)")
            elif num(r.get("bytes")) <= 0:
                errs.append(f"rule {name}: bytes {r.get('bytes')!r}, expected > 0")
        if a.no_fallbacks and num(r.get("fallbacks")) != 0:
            errs.append(f"rule {name}: {r.get('fallbacks')} fallbacks, expected 0")
    if a.nothing_tagged:
        for name, r in rules.items():
            if num(r.get("allocations")) != 0:
                errs.append(f"rule {name}: allocations {r.get('allocations')}, expected 0 (nothing tagged)")
    if a.no_fallbacks:
        for f in rep.get("fallbacks", []) or []:
            if isinstance(f, dict) and num(f.get("count")) != 0:
                errs.append(f"fallback {f.get('reason')!r} counted {f.get('count')}, expected none")
    if a.live_zero:
        live = rep.get("live")
        if not isinstance(live, dict):
            errs.append(f"live is {live!r}, expected an object with ranges and bytes")
        elif num(live.get("ranges"), -1) != 0 or num(live.get("bytes"), -1) != 0:
            errs.append(f"live ranges {live.get('ranges')} bytes {live.get('bytes')} at exit, expected 0")
    pool = rep.get("pool") if isinstance(rep.get("pool"), dict) else {}
    if a.pool_hits_max is not None and num(pool.get("hits"), -1) > a.pool_hits_max:
        errs.append(f"pool hits {pool.get('hits')}, expected <= {a.pool_hits_max}")
    if a.pool_hits_min is not None and num(pool.get("hits"), -1) < a.pool_hits_min:
        errs.append(f"pool hits {pool.get('hits')}, expected >= {a.pool_hits_min}")
    if a.pool_cap is not None and num(pool.get("cap"), -1) != a.pool_cap:
        errs.append(f"pool cap {pool.get('cap')}, expected {a.pool_cap}")
    hist = (rep.get("untagged") or {}).get("histogram") if isinstance(rep.get("untagged"), dict) else None
    for size in a.untagged_size:
        if not isinstance(hist, list) or not any(
                isinstance(h, dict) and num(h.get("size"), -1) == size and num(h.get("count")) > 0 for h in hist):
            errs.append(f"untagged histogram has no entry of size {size} (histogram: {str(hist)[:200]})")
    return errs


def parse_rule_spec(spec):
    for op in (">=", "="):
        if op in spec:
            name, _, count = spec.partition(op)
            return name, op, int(count)
    raise argparse.ArgumentTypeError(f"bad --rule {spec!r}: NAME=N or NAME>=N")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("report", help="path of the JSON report (LDSHIM_REPORT)")
    p.add_argument("--state", help="expected state")
    p.add_argument("--backend", help="expected backend")
    p.add_argument("--rule", action="append", default=[], metavar="NAME=N|NAME>=N",
                   help="rule NAME made exactly N (or at least N) allocations, split over >= 2 domains")
    p.add_argument("--nothing-tagged", action="store_true", help="every rule made 0 allocations")
    p.add_argument("--no-fallbacks", action="store_true", help="no fallback counted anywhere")
    p.add_argument("--live-zero", action="store_true", help="live ranges and bytes are 0 at exit")
    p.add_argument("--pool-hits-max", type=int)
    p.add_argument("--pool-hits-min", type=int)
    p.add_argument("--pool-cap", type=int, help="pool.cap in bytes")
    p.add_argument("--untagged-size", type=int, action="append", default=[],
                   help="this exact size appears in the untagged histogram")
    a = p.parse_args(argv)
    for spec in a.rule:
        try:
            parse_rule_spec(spec)
        except argparse.ArgumentTypeError as e:
            p.error(str(e))
    try:
        with open(a.report, encoding="utf-8") as f:
            rep = json.load(f)
    except OSError as e:
        print(f"report {a.report}: cannot read: {e.strerror}")
        return 2
    except ValueError as e:
        print(f"report {a.report}: not valid JSON: {e}")
        return 2
    if not isinstance(rep, dict):
        print(f"report {a.report}: top level is {type(rep).__name__}, expected an object")
        return 2
    errs = check(rep, a)
    for e in errs:
        print(f"report: {e}")
    if not errs:
        print("report ok")
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
