#!/bin/bash
# session 17, call c: what block scales cost at decode (diagnostic lab: 0x04000000 no staging of the
# next k-block's scales and no barrier for them, 0x02000000 no scale math, both), against rowwise.
export PYTHONUNBUFFERED=1
B=$PWD/build/d90
export LDMOE_LIB=$B/libldmoe.so LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so LDMOE_LAB_LIB=$B/lab/diag/libldmoe_lab.so
D=/tmp/s17c; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
V=block:auto:0,block:auto:0x04000000,block:auto:0x02000000,block:auto:0x06000000,rowwise:auto:0,block:ws128x64c16fp8:0,block:ws128x64c16fp8:0x06000000,rowwise:ws256x64c16fp8:0
step diag 240 python3 bench/moe/bench_moe.py --fp8 --lab --layout packed --shapes 0,1,2 --tokens 8,64 --fp8-variants $V --outdir $D/diag
sed -n '/lab variants/,$p' $D/diag/moe-fp8.md | grep -E "^\| (E|[0-9])"
tar czf $OUT/s17c.tgz -C /tmp s17c
