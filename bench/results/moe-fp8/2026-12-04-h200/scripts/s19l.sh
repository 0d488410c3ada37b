#!/bin/bash
# session 19, call l: the final tree (the late tail the default for the FP8 kernels' prefill only;
# the bf16 kernels keep the claim one tile ahead): product and lab suites, memcheck over both
# smoke tests, racecheck over the FP8 one, and the bf16 prefill tile with and without
# LDMOE_TUNE_EARLY_TAIL (now alike by construction).
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/d90/libldmoe.so LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
D=/tmp/s19l; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
step all 240 python3 tests/gpu/moe/test_moe.py
grep -v "^PASS" $D/all.log | tail -2
step lab 240 python3 tests/gpu/moe/test_moe.py --lab
grep -v "^PASS" $D/lab.log | tail -2
step san-fp8-memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 9 python3 tests/gpu/moe/smoke.py --fp8
step san-fp8-racecheck 120 compute-sanitizer --tool racecheck --error-exitcode 9 python3 tests/gpu/moe/smoke.py --fp8
step san-bf16-memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 9 python3 tests/gpu/moe/smoke.py
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" $D/san-*.log
step bf16 200 python3 bench/moe/bench_moe.py --lab --variants ws256x128ew:0,ws256x128ew:0x80 --layout packed --shapes 0,1 --tokens 512 --outdir $D/bf16
grep -h -A5 "ws256x128ew:0x0:aware:packed |" $D/bf16/*.md | head -6
tar czf $OUT/s19l.tgz -C /tmp s19l
