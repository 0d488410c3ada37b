#!/bin/bash
# session 21, call b: the tree with the consumers taking the producer's tile (no bit any more) and
# an L1 prefetch of the rowwise scales of wide tiles at the tile's start (lab bit 0x2000 = none).
# The lab and product FP8 suites, memcheck / synccheck / racecheck over smoke.py --fp8, and the
# prefetch against no prefetch as lab variants in one process (prefill, exact and random routing).
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/d90/libldmoe.so LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
D=/tmp/s21b; mkdir -p $D
trap 'tar czf $OUT/s21b.tgz -C /tmp s21b' EXIT
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -2 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
step labfp8 120 python3 tests/gpu/moe/test_moe.py --lab --fp8-only
grep -v "^PASS" $D/labfp8.log | tail -3
step fp8 150 python3 tests/gpu/moe/test_moe.py --fp8-only
grep -v "^PASS" $D/fp8.log | tail -3
V="rowwise:auto:0,rowwise:auto:0x2000"
for s in 1 2; do
  step var$s 100 python3 bench/moe/bench_moe.py --fp8 --lab --fp8-variants $V --layout packed --shapes 0,1,2 --tokens 512,2048 --order-seed $s --outdir $D/var$s
  grep "^| [0-9]" $D/var$s/moe-fp8.md | tail -6
done
step varrand 100 python3 bench/moe/bench_moe.py --fp8 --lab --fp8-variants $V --layout packed --shapes 0,1,2 --tokens 96,256 --routing random --outdir $D/varrand
grep "^| [0-9]" $D/varrand/moe-fp8.md | tail -6
for tool in memcheck synccheck racecheck; do
  step san-$tool 100 compute-sanitizer --tool $tool --error-exitcode 9 python3 tests/gpu/moe/smoke.py --fp8
done
