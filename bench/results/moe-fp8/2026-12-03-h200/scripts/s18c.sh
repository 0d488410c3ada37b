#!/bin/bash
# session 18, call c: with the block scales loaded by the producer (s18b), which decode tile should
# AUTO take for block scales? block on the 128-row and the 256-row tile beside rowwise AUTO, lab
# variants in one process, twice.
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/d90/libldmoe.so LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
D=/tmp/s18c; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
V=block:ws128x64c16fp8:0,block:ws256x64c16fp8:0,rowwise:auto:0
for r in 1 2; do
  step tiles$r 200 python3 bench/moe/bench_moe.py --fp8 --lab --layout packed --shapes 0,1,2 --tokens 8,16,32,48,64 --fp8-variants $V --outdir $D/tiles$r
  sed -n '/lab variants/,$p' $D/tiles$r/moe-fp8.md | grep -E "^\| (E|[0-9])"
done
tar czf $OUT/s18c.tgz -C /tmp s18c
