#!/bin/bash
# session 18, call e (attempt): WS_128x64_C16_FP8 with eight stages of one k-block (128 k, 24 KiB)
# instead of four of two: the same 192 KiB of ring, but a stage goes back to the producer after
# one k-block, so more of the ring is in flight. The product FP8 suite, then the benchmark
# alternating it with 8667e71's library (build/d90old), twice each.
export PYTHONUNBUFFERED=1
NEW=$PWD/build/d90/libldmoe.so OLD=$PWD/build/d90old/libldmoe.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
D=/tmp/s18e; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
step fp8 200 env LDMOE_LIB=$NEW python3 tests/gpu/moe/test_moe.py --fp8-only
grep -v "^PASS" $D/fp8.log | tail -3
Bn="python3 bench/moe/bench_moe.py --fp8 --layout packed --shapes 0,1,2 --tokens 8,32,64"
for r in 1 2; do
  step new$r 150 env LDMOE_LIB=$NEW $Bn --outdir $D/new$r
  step old$r 150 env LDMOE_LIB=$OLD $Bn --outdir $D/old$r
done
for f in new1 old1 new2 old2; do echo "-- $f"; grep "^| [0-9]" $D/$f/moe-fp8.md | head -9 | cut -d'|' -f2-6,10-12; done
tar czf $OUT/s18e.tgz -C /tmp s18e
