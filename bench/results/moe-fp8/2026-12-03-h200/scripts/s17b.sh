#!/bin/bash
# session 17, call b: the token L2 prefetch and the entry claim inside the setup (FP8 decode tiles):
# lab FP8 suite (exactly-once counters), A/B against the lab bits that turn each off (0x40 no
# prefetch, 0x80 claim before the setup, 0xC0 both = the previous kernels), twice; the timeline and
# the scaling fit with the floor peers.
export PYTHONUNBUFFERED=1
B=$PWD/build/d90
export LDMOE_LIB=$B/libldmoe.so LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so LDMOE_LAB_LIB=$B/lab/libldmoe_lab.so
D=/tmp/s17b; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
step labfp8 220 python3 tests/gpu/moe/test_moe.py --lab --fp8-only
grep -v "^PASS" $D/labfp8.log | tail -4
V=rowwise:auto:0,rowwise:auto:0x40,rowwise:auto:0x80,rowwise:auto:0xc0,block:auto:0,block:auto:0xc0,rowwise:auto:0:bf16x,rowwise:auto:0xc0:bf16x
Bn="python3 bench/moe/bench_moe.py --fp8 --lab --layout packed --shapes 0,1,2 --tokens 8,32,64 --fp8-variants $V"
step ab1 200 $Bn --outdir $D/ab1
step ab2 200 $Bn --outdir $D/ab2
for f in ab1 ab2; do echo "-- $f"; grep "^| [0-9]" $D/$f/moe-fp8.md | head -9 | cut -d'|' -f2-12; sed -n '/lab variants/,$p' $D/$f/moe-fp8.md | grep "^| [0-9]"; done
step ovh 200 python3 bench/moe/overhead.py --fp8 --trace --scaling --tokens 8,64 --layout packed --experts 32,64,128,256 \
  --tiles auto,auto:0xc0 --out $D/overhead.md
grep -E "^\| (8|64) \||fixed" $D/overhead.md
tar czf $OUT/s17b.tgz -C /tmp s17b
