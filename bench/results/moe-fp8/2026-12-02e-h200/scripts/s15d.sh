#!/bin/bash
# session 15, call d: the chunked prefill tile WS_256x128_C16_FP8: correctness, sanitizers, tiles per scheme 72-2048 tokens
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/libldmoe.so LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
D=/tmp/s15d; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv > $D/env.txt
step fp8tests 150 python3 tests/gpu/moe/test_moe.py --fp8-only
grep -v "^PASS" $D/fp8tests.log | tail -5
step labtests 150 python3 tests/gpu/moe/test_moe.py --lab --fp8-only
grep -v "^PASS" $D/labtests.log | tail -5
for tool in memcheck synccheck racecheck; do
  step san-$tool 200 compute-sanitizer --tool $tool --error-exitcode 9 python3 tests/gpu/moe/smoke.py --fp8 --tiles ws256x128c16fp8
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard" $D/san-$tool.log | tail -2
done
V=""
for sc in rowwise block; do for t in ws256x128fp8 ws256x128c16fp8 ws256x64c16fp8 ws128x128c16fp8; do V="$V,$sc:$t:0"; done; done
V=${V#,}
B="python3 bench/moe/bench_moe.py --fp8 --lab --layout packed --shapes 0,1,2 --reps 20 --fp8-variants $V"
step mid 280 $B --tokens 72,96,160,192,256 --outdir $D/mid
grep -A14 "^## lab variants" $D/mid/moe-fp8.md | grep "^| [0-9E]" | cut -c1-330
step pre 280 $B --tokens 512,2048 --outdir $D/pre
grep -A14 "^## lab variants" $D/pre/moe-fp8.md | grep "^| [0-9E]" | cut -c1-330
tar czf $OUT/s15d.tgz -C /tmp s15d
