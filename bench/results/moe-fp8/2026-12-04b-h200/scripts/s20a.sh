#!/bin/bash
# session 20, call a: the ring tail (lab bit 0x800: the late tail in every launch, the deferred
# claim issued a ring of stages before the tile ends). The lab FP8 suite (exactly-once counters
# with the bit), lab variants as interleaved peers in one process (exact counts twice, random
# routing once), the bf16 prefill tile with the bit, and the launch's end per claim order.
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/d90/libldmoe.so LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
S=bench/results/moe-fp8/2026-12-04b-h200/scripts
D=$OUT/s20a; mkdir -p $D   # under $OUT: what ran comes back even if the call is cut short
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
step labfp8 150 python3 tests/gpu/moe/test_moe.py --lab --fp8-only
grep -v "^PASS" $D/labfp8.log | tail -2
V="rowwise:auto:0,rowwise:auto:0x800,rowwise:auto:0x400,rowwise:auto:0x200,block:auto:0,block:auto:0x800"
for r in 1 2; do
  step var$r 150 python3 bench/moe/bench_moe.py --fp8 --lab --fp8-variants $V --layout packed --shapes 0,1,2 --tokens 8,64,512 --outdir $D/var$r
done
step tail 150 python3 $S/tail_timeline.py $D/tail.json 0,0x800,0x400
cat $D/tail.log
step bf16 120 python3 bench/moe/bench_moe.py --lab --variants ws256x128ew:0,ws256x128ew:0x800 --layout packed --shapes 0,1,2 --tokens 512,2048 --outdir $D/bf16
step varrand 150 python3 bench/moe/bench_moe.py --fp8 --lab --fp8-variants rowwise:auto:0,rowwise:auto:0x800,rowwise:auto:0x400 --layout packed --shapes 0,1,2 --tokens 96,256 --routing random --outdir $D/varrand
for r in var1 var2 varrand; do echo "-- $r"; sed -n '/lab variants/,$p' $D/$r/moe-fp8.md | grep "^| [0-9]"; done
echo "-- bf16"; grep -h "ws256x128ew" $D/bf16/*.md | head -12
