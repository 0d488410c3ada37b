#!/bin/bash
# session 15, call b: lagged promotion on the 128x128 rowwise tile: correctness, prefill A/B (lab builds with and without it)
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/libldmoe.so LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
LAG=$PWD/build/d90/lab/libldmoe_lab.so NOLAG=$PWD/build/nolag/lab/libldmoe_lab.so
D=/tmp/s15b; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -2 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv > $D/env.txt
step fp8tests 150 python3 tests/gpu/moe/test_moe.py --fp8-only
grep -v "^PASS" $D/fp8tests.log | head -20
step labtests 150 env LDMOE_LAB_LIB=$LAG python3 tests/gpu/moe/test_moe.py --lab --fp8-only
grep -v "^PASS" $D/labtests.log | head -10
V="--fp8-variants rowwise:ws128x128c16fp8:0,rowwise:ws256x128fp8:0"
B="python3 bench/moe/bench_moe.py --fp8 --lab --layout packed --shapes 0,1,2 --tokens 96,512,2048 --reps 20 $V"
step lag1 240 env LDMOE_LAB_LIB=$LAG $B --outdir $D/lag1
step nolag1 240 env LDMOE_LAB_LIB=$NOLAG $B --outdir $D/nolag1
for f in lag1 nolag1; do echo "-- $f"; grep -A12 "^## lab variants" $D/$f/moe-fp8.md | grep "^| [0-9]"; done
step lag2 240 env LDMOE_LAB_LIB=$LAG $B --outdir $D/lag2
for f in lag2; do echo "-- $f"; grep -A12 "^## lab variants" $D/$f/moe-fp8.md | grep "^| [0-9]"; done
tar czf $OUT/s15b.tgz -C /tmp s15b
