#!/bin/bash
# session 20, call g: the balanced call order (call_order.py) against the random one it replaced,
# same GPU, same everything else (--reps 200, --settle-ms 1000): four peers of one machine code at
# decode (row, row_same, the lab's AUTO with tune 0 and 0x400), three order seeds each.
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/d90/libldmoe.so LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
S=bench/results/moe-fp8/2026-12-04b-h200/scripts
D=/tmp/s20g; mkdir -p $D
trap 'tar czf $OUT/s20g.tgz -C /tmp s20g' EXIT
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
A="--fp8 --lab --fp8-variants rowwise:auto:0,rowwise:auto:0x400 --layout packed --shapes 0,1,2 --tokens 8,64"
for seed in 12345 7 1; do
  step bal-s$seed 120 python3 bench/moe/bench_moe.py $A --order-seed $seed --outdir $D/bal-s$seed
  step rnd-s$seed 120 python3 $S/bench_random_order.py $A --order-seed $seed --outdir $D/rnd-s$seed
done
for f in $D/bal-s* $D/rnd-s*; do
  [ -d $f ] || continue
  python3 - $f/moe-fp8.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    t = r["us"]; same = [t["row"], t["row_same"], t["v:rowwise:auto:0x0"], t["v:rowwise:auto:0x400"]]
    print("%-8s E=%3d m=%2d same-code %s spread %.1f %% | torch/row %.3f | MHz %s" % (sys.argv[1].split("/")[-2], r["E"], r["m"],
          " ".join("%.1f" % v for v in same), 100 * (max(same) / min(same) - 1), t["torch"] / t["row"],
          r["sm_clock"].get("median_mhz", "-")))
PY
done
