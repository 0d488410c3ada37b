#!/bin/bash
# session 18, call f: the final tree's library (092d80c, sm_90a build): the whole product GPU suite
# (bf16 and FP8) and serve.py --dtype fp8 --check on both backends.
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/d90/libldmoe.so LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
D=/tmp/s18f; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
step all 300 python3 tests/gpu/moe/test_moe.py
grep -v "^PASS" $D/all.log | tail -3
step serve-torch 150 python3 bench/apps/serve.py --dtype fp8 --backend torch --check --no-busy
step serve-ldmoe 150 python3 bench/apps/serve.py --dtype fp8 --backend ldmoe --layout packed --check --no-busy
grep -hE "^(check|decode|generated|serve.py)" $D/serve-*.log
tar czf $OUT/s18f.tgz -C /tmp s18f
