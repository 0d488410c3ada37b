#!/bin/bash
# session 19, call k: the late tail as the default where experts have several m-blocks (prefill),
# LDMOE_TUNE_EARLY_TAIL (0x80) for the previous claim order, LDMOE_TUNE_LATE_TAIL (0x40) for the
# late tail everywhere. The product and lab suites, sanitizers over the FP8 smoke test, then lab
# variants as interleaved peers in one process: FP8 (exact counts, twice; random routing once)
# and the bf16 prefill tile.
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/d90/libldmoe.so LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
D=/tmp/s19k; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
step all 240 python3 tests/gpu/moe/test_moe.py
grep -v "^PASS" $D/all.log | tail -2
step lab 240 python3 tests/gpu/moe/test_moe.py --lab
grep -v "^PASS" $D/lab.log | tail -2
for tool in memcheck racecheck; do
  step san-fp8-$tool 120 compute-sanitizer --tool $tool --error-exitcode 9 python3 tests/gpu/moe/smoke.py --fp8
  grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" $D/san-fp8-$tool.log | tail -1
done
V="rowwise:auto:0,rowwise:auto:0x80,block:auto:0,block:auto:0x80,rowwise:auto:0x40"
for r in 1 2; do
  step var$r 200 python3 bench/moe/bench_moe.py --fp8 --lab --fp8-variants $V --layout packed --shapes 0,1,2 --tokens 8,64,512,2048 --outdir $D/var$r
done
step varrand 200 python3 bench/moe/bench_moe.py --fp8 --lab --fp8-variants $V --layout packed --shapes 0,1,2 --tokens 96,256,512 --routing random --outdir $D/varrand
step bf16 200 python3 bench/moe/bench_moe.py --lab --variants ws256x128ew:0,ws256x128ew:0x80 --layout packed --shapes 0,1,2 --tokens 512,2048 --outdir $D/bf16
for r in var1 var2 varrand; do echo "-- $r"; sed -n '/lab variants/,$p' $D/$r/moe-fp8.md | grep "^| [0-9]"; done
echo "-- bf16"; grep -h "ws256x128ew" $D/bf16/*.md | head -12
tar czf $OUT/s19k.tgz -C /tmp s19k
