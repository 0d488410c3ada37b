#!/bin/bash
# session 20, call e: torch's FP8 GEMM slows after the first ~100 ms of a run (call d); over 3 s,
# with the SM clock and power sampled every 5 ms in the process (drift2.py).
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/d90/libldmoe.so
S=bench/results/moe-fp8/2026-12-04b-h200/scripts
D=/tmp/s20e; mkdir -p $D
trap 'tar czf $OUT/s20e.tgz -C /tmp s20e' EXIT
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
timeout 200 python3 $S/drift2.py $D/drift2.json > $D/drift2.log 2>&1; echo "rc=$?" >> $D/drift2.log
cat $D/drift2.log
