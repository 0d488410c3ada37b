#!/bin/bash
# session 20, call j: bench_moe.py's final form on every path once (bf16 headline with its
# same-code peer, tile sweep and --sched-best; --fp8 with the same-code peer writing the
# product call's own output; --variants; --settle-ms 0), one shape.
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/d90/libldmoe.so LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
D=/tmp/s20j; mkdir -p $D
trap 'tar czf $OUT/s20j.tgz -C /tmp s20j' EXIT
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
step bf16 150 python3 bench/moe/bench_moe.py --layout packed --shapes 2 --tokens 8,64 --sched-best --outdir $D/bf16
grep "same code\|SM clock" $D/bf16.log | head; sed -n '/^| E | K/,/^$/p' $D/bf16/moe-bench.md | cut -d'|' -f2,5,10,13,20,21
step fp8 120 python3 bench/moe/bench_moe.py --fp8 --layout packed --shapes 2 --tokens 8,512 --outdir $D/fp8
grep "^| [0-9]" $D/fp8/moe-fp8.md | head -2
step variants 100 python3 bench/moe/bench_moe.py --lab --variants auto:0,ws128x64:0 --layout packed --shapes 2 --tokens 8 --outdir $D/variants
tail -4 $D/variants.log
step nosettle 100 python3 bench/moe/bench_moe.py --fp8 --layout packed --shapes 2 --tokens 8 --settle-ms 0 --reps 30 --outdir $D/nosettle
grep "^| [0-9]" $D/nosettle/moe-fp8.md | head -1
grep -l Traceback $D/*.log || echo "no tracebacks"
