#!/bin/bash
# session 20, call i: a shorter serial start (commit 96d7cfc, reverted in 12d7cc2; built as build/d90x): the first
# tile's next claim issued after the first stage's loads instead of before, no proxy fence in
# the ring's first lap, no division by one m-block per expert. Against HEAD (build/d90): the lab
# FP8 suite on the new build, the launch's first stage and end per build (tail_timeline.py,
# alternating processes), the FP8 decode bench (alternating processes, two runs each).
export PYTHONUNBUFFERED=1
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
S=bench/results/moe-fp8/2026-12-04b-h200/scripts
D=/tmp/s20i; mkdir -p $D
trap 'tar czf $OUT/s20i.tgz -C /tmp s20i' EXIT
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
LDMOE_LAB_LIB=$PWD/build/d90x/lab/libldmoe_lab.so step labfp8-new 150 python3 tests/gpu/moe/test_moe.py --lab --fp8-only
grep -v "^PASS" $D/labfp8-new.log | tail -2
for r in 1 2; do
  for b in d90 d90x; do
    LDMOE_LAB_LIB=$PWD/build/$b/lab/libldmoe_lab.so step tl-$b-$r 100 python3 $S/tail_timeline.py $D/tl-$b-$r.json 0
    sed 's/^/'$b' /' $D/tl-$b-$r.log | grep "^$b E="
  done
done
for r in 1 2; do
  for b in d90 d90x; do
    LDMOE_LIB=$PWD/build/$b/libldmoe.so step bench-$b-$r 150 python3 bench/moe/bench_moe.py --fp8 --layout packed --shapes 0,1,2 --tokens 8,64 --order-seed $r --outdir $D/bench-$b-$r
    grep "^| [0-9]" $D/bench-$b-$r/moe-fp8.md | head -6 | cut -d'|' -f2-5,10,11,13 | sed 's/^/'$b' /'
  done
done
