#!/bin/bash
# session 18, call d: the final library (block scales loaded with each stage; AUTO for block scales
# takes the 128-row decode tile wherever the 256-row one fills the waves worse, now up to 64
# tokens per expert): the product FP8 suite, then the benchmark alternating it with the previous
# library (HEAD before this session, build/d90old), twice each, with the bf16 path beside.
export PYTHONUNBUFFERED=1
NEW=$PWD/build/d90/libldmoe.so OLD=$PWD/build/d90old/libldmoe.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
D=/tmp/s18d; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
step fp8 200 env LDMOE_LIB=$NEW python3 tests/gpu/moe/test_moe.py --fp8-only
grep -v "^PASS" $D/fp8.log | tail -3
Bn="python3 bench/moe/bench_moe.py --fp8 --layout packed --shapes 0,1,2 --tokens 8,32,64,512,2048"
for r in 1 2; do
  step new$r 150 env LDMOE_LIB=$NEW $Bn --outdir $D/new$r
  step old$r 150 env LDMOE_LIB=$OLD $Bn --outdir $D/old$r
done
for f in new1 old1 new2 old2; do echo "-- $f"; grep "^| [0-9]" $D/$f/moe-fp8.md | head -15 | cut -d'|' -f2-6,10-12; done
tar czf $OUT/s18d.tgz -C /tmp s18d
