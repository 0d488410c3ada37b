#!/bin/bash
# session 20, call h: the benchmark as committed (balanced call orders, --reps 200, --settle-ms
# 1000, same-code peers, the SM clock per row): the FP8 headline under two order seeds and the
# bf16 headline (fresh process per shape, tile sweep) once.
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/d90/libldmoe.so LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
D=/tmp/s20h; mkdir -p $D
trap 'tar czf $OUT/s20h.tgz -C /tmp s20h' EXIT
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
for s in 12345 7; do
  step fp8-s$s 200 python3 bench/moe/bench_moe.py --fp8 --layout packed --shapes 0,1,2 --tokens 8,64,512,2048 --order-seed $s --outdir $D/fp8-s$s
  grep "^| [0-9]" $D/fp8-s$s/moe-fp8.md | head -12 | cut -d'|' -f2-3,4,5,6,10,11,12,13,17
done
step bf16 330 python3 bench/moe/bench_moe.py --layout packed --outdir $D/bf16
sed -n '/^| E | K/,/^$/p' $D/bf16/moe-bench.md | cut -d'|' -f2,5,6,8,10,13,14 | head -16
