#!/bin/bash
# session 19, call g: the final tree's one-batch setup (sm_90a builds): the whole product suite
# (bf16 and FP8), the lab suite, compute-sanitizer over the smoke tests (FP8 tiles: memcheck,
# synccheck, racecheck; bf16 tiles: memcheck).
export PYTHONUNBUFFERED=1
NEW=$PWD/build/d90/libldmoe.so OLD=$PWD/build/d90old/libldmoe.so
export LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
D=/tmp/s19g; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
step all 240 env LDMOE_LIB=$NEW python3 tests/gpu/moe/test_moe.py
grep -v "^PASS" $D/all.log | tail -3
step lab 240 env LDMOE_LIB=$NEW python3 tests/gpu/moe/test_moe.py --lab
grep -v "^PASS" $D/lab.log | tail -3
for tool in memcheck synccheck racecheck; do
  step san-fp8-$tool 120 env LDMOE_LIB=$NEW compute-sanitizer --tool $tool --error-exitcode 9 python3 tests/gpu/moe/smoke.py --fp8
  grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|passed\|FAIL" $D/san-fp8-$tool.log | tail -2
done
step san-bf16-memcheck 120 env LDMOE_LIB=$NEW compute-sanitizer --tool memcheck --error-exitcode 9 python3 tests/gpu/moe/smoke.py
grep -h "ERROR SUMMARY\|FAIL" $D/san-bf16-memcheck.log | tail -2
tar czf $OUT/s19g.tgz -C /tmp s19g
