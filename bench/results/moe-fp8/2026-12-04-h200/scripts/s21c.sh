#!/bin/bash
# session 21, call c: the final tree (the consumers take the producer's decoded tile; fe99b33's
# kernels). The product and lab FP8 suites, memcheck / synccheck / racecheck over smoke.py --fp8,
# then the committed benchmark in alternating processes against the library before the change
# (1eca8da's kernels): new, old, new, old, order seeds 12345 and 7.
export PYTHONUNBUFFERED=1
export LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
NEW=$PWD/build/d90/libldmoe.so OLD=$PWD/build/d90old/libldmoe.so
D=/tmp/s21c; mkdir -p $D
trap 'tar czf $OUT/s21c.tgz -C /tmp s21c' EXIT
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -2 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
export LDMOE_LIB=$NEW
step fp8 100 python3 tests/gpu/moe/test_moe.py --fp8-only
step labfp8 100 python3 tests/gpu/moe/test_moe.py --lab --fp8-only
for tool in memcheck synccheck racecheck; do
  step san-$tool 80 compute-sanitizer --tool $tool --error-exitcode 9 python3 tests/gpu/moe/smoke.py --fp8
done
for s in 12345 7; do
  for lib in new old; do
    if [ $lib = new ]; then export LDMOE_LIB=$NEW; else export LDMOE_LIB=$OLD; fi
    step $lib-s$s 110 python3 bench/moe/bench_moe.py --fp8 --layout packed --shapes 0,1,2 --tokens 8,64,512,2048 --order-seed $s --outdir $D/$lib-s$s
  done
done
python3 - $D <<'PY'
import json, sys, os
d = sys.argv[1]
def load(n):
    f = os.path.join(d, n, "moe-fp8.json")
    return {(r["E"], r["m"]): r["us"] for r in json.load(open(f))["rows"]} if os.path.exists(f) else {}
for s in ("12345", "7"):
    a, b = load("new-s" + s), load("old-s" + s)
    for k in sorted(a):
        if k not in b: continue
        x, y = a[k], b[k]
        print("s%-5s E=%3d m=%4d | new %.1f old %.1f new/old %.3f | block new/old %.3f | torch/new %.3f torch/old %.3f | same new %.3f old %.3f" % (
              s, k[0], k[1], x["row"], y["row"], x["row"] / y["row"], x["block"] / y["block"], x["torch"] / x["row"], y["torch"] / y["row"],
              x["row_same"] / x["row"], y["row_same"] / y["row"]))
PY
