#!/bin/bash
# session 16, call b: block scales read before the wgmma wait (d90) against after (d90a, -DLDMOE_FP8_SCALES_AFTER_WAIT),
# alternating processes; the L2 prefetch (0x40) and the dependent launch (0x20) on their own, e4m3 and bf16 tokens
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/d90/libldmoe.so LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
D=/tmp/s16b; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $D/env.txt; cat $D/env.txt
export LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
step labfp8 200 python3 tests/gpu/moe/test_moe.py --lab --fp8-only
grep -v "^PASS" $D/labfp8.log | tail -3
step san-racecheck 200 compute-sanitizer --tool racecheck --error-exitcode 9 python3 tests/gpu/moe/smoke.py --fp8 --lab
grep -E "RACECHECK SUMMARY|ERROR SUMMARY|FAIL" $D/san-racecheck.log | tail -2
VB=block:ws256x64c16fp8:0,block:ws128x64c16fp8:0,block:ws256x128c16fp8:0
for i in 1 2; do
  for b in d90 d90a; do
    LDMOE_LAB_LIB=$PWD/build/$b/lab/libldmoe_lab.so step ab-$b-$i 120 python3 bench/moe/bench_moe.py --fp8 --lab --layout packed \
      --shapes 0,1,2 --tokens 8,32,64 --no-floor --fp8-variants $VB --outdir $D/ab-$b-$i
  done
done
for f in $D/ab-*/moe-fp8.md; do echo "-- $f"; grep "^| [0-9]" $f | head -9 | cut -d'|' -f2-7,11-12; sed -n '/lab variants/,$p' $f | grep "^| [0-9]"; done
V=rowwise:auto:0x40,rowwise:auto:0x20,block:auto:0x40,block:auto:0x20,rowwise:auto:0x40:bf16x,rowwise:auto:0x20:bf16x,block:auto:0:bf16x,block:auto:0x40:bf16x,block:auto:0x20:bf16x
B="python3 bench/moe/bench_moe.py --fp8 --lab --layout packed --shapes 0,1,2 --tokens 8,64 --no-floor --fp8-variants $V"
step pf1 200 $B --outdir $D/pf1
step pf2 200 $B --outdir $D/pf2
for f in pf1 pf2; do echo "-- $f"; sed -n '/lab variants/,$p' $D/$f/moe-fp8.md | cut -c1-600; done
tar czf $OUT/s16b.tgz -C /tmp s16b
