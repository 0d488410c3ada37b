#!/bin/bash
# session 20, call d: torch's FP8 GEMM at 64 tokens per expert timed 8-10 % slower in 200-rep runs
# than in 30-rep ones (call c), ldmoe not: the two alternating for 1000 repetitions, medians per
# block of 100, SM clock / power / temperature sampled every 100 ms beside them.
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/d90/libldmoe.so
S=bench/results/moe-fp8/2026-12-04b-h200/scripts
D=/tmp/s20d; mkdir -p $D
trap 'tar czf $OUT/s20d.tgz -C /tmp s20d' EXIT
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 100 > $D/smi.csv 2>&1 &
SMI=$!
sleep 1
timeout 200 python3 $S/drift.py $D/drift.json > $D/drift.log 2>&1; echo "rc=$?" >> $D/drift.log
kill $SMI
cat $D/drift.log
date +%s.%N
awk -F', ' 'NR>1 && NR%10==2 {print $1, $2, $4, $5, $6}' $D/smi.csv | head -60
