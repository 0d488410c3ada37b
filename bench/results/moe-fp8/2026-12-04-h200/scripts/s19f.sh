#!/bin/bash
# session 19, call f: V3, the one-batch setup whose thread 0 sums the per-warp counts in registers
# (working tree; 542b7e8 as build/d90old): the product FP8 suite; thread 0's stamps inside the
# setup (start-timeline16v3.patch); the lab timeline; the FP8 benchmark alternating V3 / 542b7e8
# three times.
export PYTHONUNBUFFERED=1
NEW=$PWD/build/d90/libldmoe.so OLD=$PWD/build/d90old/libldmoe.so
NEWLAB=$PWD/build/d90/lab/libldmoe_lab.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
S=bench/results/moe-fp8/2026-12-04-h200/scripts
D=/tmp/s19f; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
step fp8 200 env LDMOE_LIB=$NEW python3 tests/gpu/moe/test_moe.py --fp8-only
grep -v "^PASS" $D/fp8.log | tail -3
step t16-v3 100 env LDMOE_LAB_LIB=$PWD/build/exp/libldmoe_lab16v3.so python3 $S/start_timeline16new.py $D/t16-v3.json
grep -h "idle" $D/t16-v3.log
step tl-new 100 env LDMOE_LAB_LIB=$NEWLAB python3 $S/start_timeline_std.py $D/tl-new.json
grep -h "^E=" $D/tl-new.log
Bn="python3 bench/moe/bench_moe.py --fp8 --layout packed --shapes 0,1,2 --tokens 8,64,512"
for r in 1 2 3; do
  step new$r 120 env LDMOE_LIB=$NEW $Bn --outdir $D/new$r
  step old$r 120 env LDMOE_LIB=$OLD $Bn --outdir $D/old$r
done
for f in new1 old1 new2 old2 new3 old3; do echo "-- $f"; grep "^| [0-9]" $D/$f/moe-fp8.md | head -9 | cut -d'|' -f2-5,10-12; done
tar czf $OUT/s19f.tgz -C /tmp s19f
