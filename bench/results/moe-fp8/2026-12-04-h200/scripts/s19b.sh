#!/bin/bash
# session 19, call b: the same, 16 stamps (start-timeline16.patch on 542b7e8,
# lab build, sm_90a): start_timeline16.py over five decode cases, GPU idle before / a copy before.
export PYTHONUNBUFFERED=1
export LDMOE_LAB_LIB=$PWD/build/exp/libldmoe_lab16.so
D=/tmp/s19b; mkdir -p $D
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
timeout 300 python3 bench/results/moe-fp8/2026-12-04-h200/scripts/start_timeline16.py $D/start_timeline.json 2>&1 | tee $D/start_timeline.log
tar czf $OUT/s19b.tgz -C /tmp s19b
