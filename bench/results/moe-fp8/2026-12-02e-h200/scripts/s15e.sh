#!/bin/bash
# session 15, call e: WS_256x128_FP8 vs WS_256x128_C16_FP8 (and the 128-row tile) under random and skewed routing
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/libldmoe.so LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
D=/tmp/s15e; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv > $D/env.txt
V=""
for sc in rowwise block; do for t in ws256x128fp8 ws256x128c16fp8 ws128x128c16fp8; do V="$V,$sc:$t:0"; done; done
V=${V#,}
B="python3 bench/moe/bench_moe.py --fp8 --lab --layout packed --shapes 0,1,2 --reps 20 --fp8-variants $V"
for r in random skewed; do
  step $r 280 $B --routing $r --tokens 96,256,512,2048 --outdir $D/$r
  grep -A40 "^## lab variants" $D/$r/moe-fp8.md | grep "^| [0-9E]" | cut -c1-200
done
step uniform 280 $B --tokens 96,512 --outdir $D/uniform
grep -A40 "^## lab variants" $D/uniform/moe-fp8.md | grep "^| [0-9E]" | cut -c1-200
tar czf $OUT/s15e.tgz -C /tmp s15e
