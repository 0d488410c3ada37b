#!/bin/bash
# session 19, call m: the final tree (the late-tail bits renumbered 0x200 / 0x400): the product
# suite and the lab FP8 suite (both bits' exactly-once counters).
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/d90/libldmoe.so LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
D=/tmp/s19m; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
step all 150 python3 tests/gpu/moe/test_moe.py
grep -v "^PASS" $D/all.log | tail -2
step labfp8 100 python3 tests/gpu/moe/test_moe.py --lab --fp8-only
grep -v "^PASS" $D/labfp8.log | tail -2
tar czf $OUT/s19m.tgz -C /tmp s19m
