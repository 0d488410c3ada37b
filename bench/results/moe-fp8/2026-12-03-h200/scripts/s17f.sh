#!/bin/bash
# session 17, call f: FP8 block scales staged per warp (each warp copies the scales its lanes read;
# a __syncwarp instead of the warpgroup barrier per k-block): the product FP8 suite, synccheck and
# racecheck over smoke.py --fp8, then the benchmark alternating the new library and the previous one
# (HEAD, build/d90old), twice each.
export PYTHONUNBUFFERED=1
NEW=$PWD/build/d90/libldmoe.so OLD=$PWD/build/d90old/libldmoe.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
D=/tmp/s17f; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
step fp8 200 env LDMOE_LIB=$NEW python3 tests/gpu/moe/test_moe.py --fp8-only
grep -v "^PASS" $D/fp8.log | tail -4
Bn="python3 bench/moe/bench_moe.py --fp8 --layout packed --shapes 0,1,2 --tokens 8,32,64,512"
for r in 1 2; do
  step new$r 150 env LDMOE_LIB=$NEW $Bn --outdir $D/new$r
  step old$r 150 env LDMOE_LIB=$OLD $Bn --outdir $D/old$r
done
for f in new1 old1 new2 old2; do echo "-- $f"; grep "^| [0-9]" $D/$f/moe-fp8.md | head -12 | cut -d'|' -f2-6,10-12; done
for tool in synccheck racecheck; do
  step san-$tool 200 env LDMOE_LIB=$NEW compute-sanitizer --tool $tool --error-exitcode 9 python3 tests/gpu/moe/smoke.py --fp8
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|FAIL|hazard" $D/san-$tool.log | tail -3
done
tar czf $OUT/s17f.tgz -C /tmp s17f
