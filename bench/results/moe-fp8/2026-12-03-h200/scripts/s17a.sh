#!/bin/bash
# session 17, call a: what the token boxes' L2 reads cost at decode (diagnostic lab: no token loads /
# token loads on even k-steps only, i.e. what a CTA pair sharing its token boxes would save), and the
# fixed cost of an FP8 launch against the one-launch floor (scaling fit with floor peers, timeline).
export PYTHONUNBUFFERED=1
B=$PWD/build/d90
export LDMOE_LIB=$B/libldmoe.so LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
D=/tmp/s17a; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
git log -1 --format=%H >> $D/env.txt 2>/dev/null
R=rowwise:ws128x64c16fp8; W=rowwise:ws256x64c16fp8
V=$R:0,$R:0x10000000,$R:0x08000000,$R:0x60000000,$R:0x70000000,$W:0,$W:0x10000000
step diag 330 env LDMOE_LAB_LIB=$B/lab/diag/libldmoe_lab.so python3 bench/moe/bench_moe.py --fp8 --lab --layout packed \
  --shapes 0,1,2 --tokens 8,64 --fp8-variants $V --outdir $D/diag
sed -n '/lab variants/,$p' $D/diag/moe-fp8.md
step ovh 200 env LDMOE_LAB_LIB=$B/lab/libldmoe_lab.so python3 bench/moe/overhead.py --fp8 --trace --scaling \
  --tokens 8,64 --layout packed --experts 32,64,128,256 --out $D/overhead.md
grep -E "^\| (8|64) \||fixed" $D/overhead.md
tar czf $OUT/s17a.tgz -C /tmp s17a
