#!/bin/bash
# session 17, call g: which part of the block scales' staging costs (diagnostic lab): 0x01000000
# only the copy left out, 0x00800000 only the barrier left out, 0x04000000 both, on the block AUTO
# tile and on the 128-row tile; rowwise AUTO beside them; twice.
export PYTHONUNBUFFERED=1
B=$PWD/build/d90
export LDMOE_LIB=$B/libldmoe.so LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so LDMOE_LAB_LIB=$B/lab/diag/libldmoe_lab.so
D=/tmp/s17g; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
T=block:ws128x64c16fp8
V=block:auto:0,block:auto:0x01000000,block:auto:0x00800000,block:auto:0x04000000,$T:0,$T:0x01000000,$T:0x00800000,$T:0x04000000,rowwise:auto:0
for r in 1 2; do
  step diag$r 200 python3 bench/moe/bench_moe.py --fp8 --lab --layout packed --shapes 0,1,2 --tokens 8,64 --fp8-variants $V --outdir $D/diag$r
  sed -n '/lab variants/,$p' $D/diag$r/moe-fp8.md | grep -E "^\| (E|[0-9])"
done
tar czf $OUT/s17g.tgz -C /tmp s17g
