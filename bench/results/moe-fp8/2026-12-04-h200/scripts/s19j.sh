#!/bin/bash
# session 19, call j: the late tail (lab tune bit 0x40, LDMOE_TUNE_LATE_TAIL: in a queue's last
# wave the next claim is made when the current tile ends, not when it starts). The lab FP8 suite
# (exactly-once with the bit, aware and unaware), then lab variants with and without it as
# interleaved peers in one process, twice.
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/d90/libldmoe.so LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
D=/tmp/s19j; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
step labfp8 200 python3 tests/gpu/moe/test_moe.py --lab --fp8-only
grep -v "^PASS" $D/labfp8.log | tail -3
V="rowwise:auto:0,rowwise:auto:0x40,block:auto:0,block:auto:0x40"
for r in 1 2; do
  step var$r 200 python3 bench/moe/bench_moe.py --fp8 --lab --fp8-variants $V --layout packed --shapes 0,1,2 --tokens 8,32,64,512 --outdir $D/var$r
done
for r in 1 2; do echo "-- var$r"; sed -n '/variants/,$p' $D/var$r/*.md | grep "^|" | head -16; done
tar czf $OUT/s19j.tgz -C /tmp s19j
