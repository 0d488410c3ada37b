#!/usr/bin/env python3
"""fake_instance.py — a stand-in for one instance of a program run by bench/ab/per_domain.py.

It meets LDSHIM_AB_BARRIER=DIR:N[:SECONDS] the way bench/apps/serve.py does (unless
FAKE_NO_BARRIER is set), prints "decode: <ms> ms/step  <rate> tok/s", and writes a report
where LDSHIM_REPORT points, as the shim would, with the state, domain and compute binding:

  FAKE_RATE   "stock:1=100;stock:2=50;full-ld:2=60": this instance's rate by state and the
              number of instances N (default 100/N)
  FAKE_SMS    SM count of a bound instance's binding (default 66; stock: all 132)
  FAKE_BYTES  bytes a bound instance places in its domain (default 1 GiB)
  FAKE_FAIL   "1": the instance with LDSHIM_DOMAIN=1 exits 3; "stock": every stock instance
  FAKE_LOG    file to which "<state> <domain> <N> <LD_PRELOAD>" is appended
"""
import json
import os
import sys
import time


def table(var):
    out = {}
    for part in filter(None, os.environ.get(var, "").split(";")):
        k, _, v = part.partition("=")
        out[k.strip()] = v.strip()
    return out


def main():
    state = os.environ.get("LDSHIM_STATE", "stock")
    dom = os.environ.get("LDSHIM_DOMAIN")
    spec = os.environ.get("LDSHIM_AB_BARRIER", "")
    parts = spec.split(":")
    n = int(parts[1]) if len(parts) > 1 else 1
    if os.environ.get("FAKE_LOG"):
        with open(os.environ["FAKE_LOG"], "a") as f:
            f.write("%s %s %d %s\n" % (state, dom, n, os.environ.get("LD_PRELOAD", "")))
    fail = os.environ.get("FAKE_FAIL")
    if fail and (fail == dom or fail == state):
        print("fake_instance: injected failure", file=sys.stderr)
        return 3
    if spec and not os.environ.get("FAKE_NO_BARRIER"):
        with open(os.path.join(parts[0], str(os.getpid())), "w"):
            pass
        t_end = time.monotonic() + (float(parts[2]) if len(parts) > 2 else 300.0)
        while len(os.listdir(parts[0])) < n and time.monotonic() < t_end:
            time.sleep(0.002)
    rate = float(table("FAKE_RATE").get("%s:%d" % (state, n), 100.0 / n))
    print("decode: %.3f ms/step  %.1f tok/s  (fake)" % (32e3 / rate, rate))
    rep_path = os.environ.get("LDSHIM_REPORT", "").replace("%p", str(os.getpid()))
    if rep_path:
        bound = state != "stock"
        sms = int(os.environ.get("FAKE_SMS", "66"))
        d = int(dom or 0)
        per = [0] * (d + 1)
        per[d] = int(os.environ.get("FAKE_BYTES", str(1 << 30))) if state == "full-ld" else 0
        rep = {"state": state, "domain": d, "backend": "fake",
               "counts": {"tagged_allocs": 1 if state == "full-ld" else 0, "fallbacks": 0},
               "rules": [{"name": "w", "bytes_per_domain": per}],
               "devices": [{"device": 0, "compute": {
                   "requested": "domain:%d" % d if bound else "all",
                   "applied": "domain:%d" % d if bound else "all",
                   "sm_count": sms if bound else 132}}]}
        with open(rep_path, "w") as f:
            json.dump(rep, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
