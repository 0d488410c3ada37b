#!/bin/bash
# session 20, call f: bench_moe.py with its new defaults (--reps 200, --settle-ms 1000, the
# same-code peer, the SM clock per row): the FP8 headline under two order seeds, once more
# without settling (the first ~100 ms after idle, as the records before this session), and the
# bf16 and --variants paths once each on one shape.
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/d90/libldmoe.so LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
D=/tmp/s20f; mkdir -p $D
trap 'tar czf $OUT/s20f.tgz -C /tmp s20f' EXIT
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
step fp8-s12345 200 python3 bench/moe/bench_moe.py --fp8 --layout packed --shapes 0,1,2 --tokens 8,64,512,2048 --outdir $D/fp8-s12345
step fp8-s7 200 python3 bench/moe/bench_moe.py --fp8 --layout packed --shapes 0,1,2 --tokens 8,64,512,2048 --order-seed 7 --outdir $D/fp8-s7
step fp8-nosettle 200 python3 bench/moe/bench_moe.py --fp8 --layout packed --shapes 0,1,2 --tokens 8,64,512,2048 --settle-ms 0 --outdir $D/fp8-nosettle
for r in fp8-s12345 fp8-s7 fp8-nosettle; do echo "-- $r"; grep "^| [0-9]" $D/$r/moe-fp8.md | head -12 | cut -d'|' -f2-3,5,6,10,11,13,17; done
step bf16 150 python3 bench/moe/bench_moe.py --shapes 2 --tokens 8,64 --outdir $D/bf16
grep -A3 "SM clock" $D/bf16/moe-bench.md | head -6
step variants 100 python3 bench/moe/bench_moe.py --lab --variants auto:0,ws128x64:0 --layout packed --shapes 2 --tokens 8,64 --outdir $D/variants
tail -6 $D/variants.log
