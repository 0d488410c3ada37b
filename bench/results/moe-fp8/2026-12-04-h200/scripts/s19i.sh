#!/bin/bash
# session 19, call i: V4 = V3 with the map loaded before griddepcontrol.wait (as V1 did; call e
# put V1's first stage 0.13-0.26 µs before V2's). The product FP8 suite and compute-sanitizer
# memcheck/racecheck over the FP8 smoke test on V4, then the lab timeline of V3 and V4 in turn,
# twice each (the FP8 kernels alone change: the bf16 ones do not wait on a previous kernel).
export PYTHONUNBUFFERED=1
V4=$PWD/build/d90/libldmoe.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
S=bench/results/moe-fp8/2026-12-04-h200/scripts
D=/tmp/s19i; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
step fp8 200 env LDMOE_LIB=$V4 python3 tests/gpu/moe/test_moe.py --fp8-only
grep -v "^PASS" $D/fp8.log | tail -2
for tool in memcheck racecheck; do
  step san-fp8-$tool 120 env LDMOE_LIB=$V4 compute-sanitizer --tool $tool --error-exitcode 9 python3 tests/gpu/moe/smoke.py --fp8
  grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" $D/san-fp8-$tool.log | tail -1
done
for r in 1 2; do
  step tl-v4-$r 100 env LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so python3 $S/start_timeline_std.py $D/tl-v4-$r.json
  step tl-v3-$r 100 env LDMOE_LAB_LIB=$PWD/build/v3/lab/libldmoe_lab.so python3 $S/start_timeline_std.py $D/tl-v3-$r.json
done
for f in tl-v4-1 tl-v3-1 tl-v4-2 tl-v3-2; do echo "-- $f"; grep -h "^E=" $D/$f.log | cut -d'|' -f1-5; done
tar czf $OUT/s19i.tgz -C /tmp s19i
