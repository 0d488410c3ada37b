#!/bin/bash
# session 18, call a: FP8 block scales loaded by the producer with each stage (1-D TMA boxes of
# x_scale and w_scale counted in the stage's bytes; consumers only read them). The product and lab
# FP8 suites, memcheck / synccheck / racecheck over smoke.py --fp8, the bf16 kernels' SASS against
# the previous library, then the benchmark alternating the new library and the previous one (HEAD
# before the change, build/d90old), twice each.
export PYTHONUNBUFFERED=1
NEW=$PWD/build/d90/libldmoe.so OLD=$PWD/build/d90old/libldmoe.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
D=/tmp/s18a; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
step fp8 200 env LDMOE_LIB=$NEW python3 tests/gpu/moe/test_moe.py --fp8-only
grep -v "^PASS" $D/fp8.log | tail -6
step fp8lab 200 env LDMOE_LIB=$NEW python3 tests/gpu/moe/test_moe.py --lab --fp8-only
grep -v "^PASS" $D/fp8lab.log | tail -4
step sass 120 python3 bench/moe/sass_identity.py compare $OLD $NEW
grep -v "^  *ok\|^ok" $D/sass.log | tail -25
Bn="python3 bench/moe/bench_moe.py --fp8 --layout packed --shapes 0,1,2 --tokens 8,32,64,512,2048"
for r in 1 2; do
  step new$r 150 env LDMOE_LIB=$NEW $Bn --outdir $D/new$r
  step old$r 150 env LDMOE_LIB=$OLD $Bn --outdir $D/old$r
done
for f in new1 old1 new2 old2; do echo "-- $f"; grep "^| [0-9]" $D/$f/moe-fp8.md | head -15 | cut -d'|' -f2-6,10-12; done
for tool in memcheck synccheck racecheck; do
  step san-$tool 200 env LDMOE_LIB=$NEW compute-sanitizer --tool $tool --error-exitcode 9 python3 tests/gpu/moe/smoke.py --fp8
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|FAIL|hazard" $D/san-$tool.log | tail -3
done
tar czf $OUT/s18a.tgz -C /tmp s18a
