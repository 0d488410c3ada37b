#!/bin/bash
# session 15, call a: correctness of the lagged promotion, A/B against the build without it, lab diagnostics
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/libldmoe.so LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so LDMOE_LAB_LIB=$PWD/build/d90/lab/diag/libldmoe_lab.so
D=/tmp/s15a; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -2 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem --format=csv > $D/env.txt; git log -1 --format=%H >> $D/env.txt
step fp8tests 150 python3 tests/gpu/moe/test_moe.py --fp8-only
grep -v "^PASS" $D/fp8tests.log | head -20
B="python3 bench/moe/bench_moe.py --fp8 --layout packed --shapes 0,1,2 --tokens 8,64"
step new1 150 $B --outdir $D/new1
step old1 150 env LDMOE_LIB=$PWD/build/nolag/libldmoe.so $B --outdir $D/old1
step new2 150 $B --outdir $D/new2
step old2 150 env LDMOE_LIB=$PWD/build/nolag/libldmoe.so $B --outdir $D/old2
for f in new1 old1 new2 old2; do echo "-- $f"; grep "^| [0-9]" $D/$f/*.md | head -6 | cut -d'|' -f2-12; done
step lab 200 python3 bench/moe/bench_moe.py --fp8 --lab --layout packed --shapes 0,2 --tokens 8,64 --outdir $D/lab \
  --fp8-variants rowwise:ws128x64c16fp8:0,rowwise:ws128x64c16fp8:0x40000000,rowwise:ws128x64c16fp8:0x20000000,rowwise:ws128x64c16fp8:0x60000000,block:ws256x64c16fp8:0,block:ws256x64c16fp8:0x40000000
tar czf $OUT/s15a.tgz -C /tmp s15a
