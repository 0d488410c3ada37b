#!/bin/bash
# session 15, call c: FP8 tiles per scheme between decode and prefill (65-256 tokens per expert), main's kernels
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/libldmoe.so LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
D=/tmp/s15c; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv > $D/env.txt
V=""
for sc in rowwise block; do for t in ws128x64c16fp8 ws256x64c16fp8 ws128x128c16fp8 ws256x128fp8; do V="$V,$sc:$t:0"; done; done
V=${V#,}
B="python3 bench/moe/bench_moe.py --fp8 --lab --layout packed --shapes 0,1,2 --reps 20 --fp8-variants $V"
step mid1 280 $B --tokens 72,96,120 --outdir $D/mid1
grep -A14 "^## lab variants" $D/mid1/moe-fp8.md | grep "^| [0-9E]" | cut -c1-330
step mid2 280 $B --tokens 128,160,256 --outdir $D/mid2
grep -A14 "^## lab variants" $D/mid2/moe-fp8.md | grep "^| [0-9E]" | cut -c1-330
tar czf $OUT/s15c.tgz -C /tmp s15c
