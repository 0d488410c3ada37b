#!/bin/bash
# session 20, call b: (1) thread 0's serial path from the setup to the first TMA, stamped
# (serial-stamps.patch, built as build/d90s); (2) whether the same code timed 2-3 % apart under
# one --order-seed (call a: 0x400 is the default's code at decode) follows the call order: the
# same pair under four seeds.
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/d90/libldmoe.so LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
S=bench/results/moe-fp8/2026-12-04b-h200/scripts
D=/tmp/s20b; mkdir -p $D
trap 'tar czf $OUT/s20b.tgz -C /tmp s20b' EXIT
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
for r in 1 2; do
  LDMOE_LAB_LIB=$PWD/build/d90s/lab/libldmoe_lab.so step serial$r 120 python3 $S/serial_timeline.py $D/serial$r.json
  cat $D/serial$r.log
done
for seed in 12345 1 2 3; do
  step seed$seed 120 python3 bench/moe/bench_moe.py --fp8 --lab --fp8-variants rowwise:auto:0,rowwise:auto:0x400 --layout packed --shapes 0,1,2 --tokens 8,64 --order-seed $seed --outdir $D/seed$seed
  grep "^E=" $D/seed$seed.log | sed 's/ row_bf16x.*v:rowwise/ v:rowwise/; s/ floor.*//'
done
