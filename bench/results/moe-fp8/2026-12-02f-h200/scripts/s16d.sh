#!/bin/bash
# session 16, call c: final tree (dependent launch without prefetch, wave-aware block AUTO): suites, sanitizers,
# sass-identity, benchmark (uniform x2, random), the dependent launch A/B, serve
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/libldmoe.so LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
D=/tmp/s16d; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $D/env.txt; cat $D/env.txt
step product 150 python3 tests/gpu/moe/test_moe.py
grep -v "^PASS" $D/product.log | tail -3


for tool in memcheck synccheck racecheck; do
  step san-$tool 200 compute-sanitizer --tool $tool --error-exitcode 9 python3 tests/gpu/moe/smoke.py --fp8
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|FAIL" $D/san-$tool.log | tail -2
done
step sass 120 python3 bench/moe/sass_identity.py compare bench/moe/sass/baseline.txt build/libldmoe.so \
  --require-file bench/moe/sass/auto-kernels.txt --new-ok '^_ZN5ldmoe(24grouped_mm_ws_fp8_kernel|19quantize_fp8_kernel)'
tail -3 $D/sass.log
B="python3 bench/moe/bench_moe.py --fp8 --layout packed --shapes 0,1,2"
step bench1 200 $B --tokens 8,64,512,2048 --outdir $D/bench1

step random 200 $B --routing random --tokens 96,256,512,2048 --outdir $D/random


for f in bench1 random; do echo "-- $f"; grep "^| [0-9]" $D/$f/moe-fp8.md | head -12 | cut -d'|' -f2-12; done

for args in "--dtype fp8 --backend torch" "--dtype fp8 --backend ldmoe --layout packed" "--backend ldmoe --layout packed"; do
  echo "== serve.py $args" >> $D/serve.log
  timeout 120 python3 bench/apps/serve.py $args --check --no-busy >> $D/serve.log 2>&1; echo "rc=$?" >> $D/serve.log
done
grep -E "^(==|check|decode|rc=)" $D/serve.log
tar czf $OUT/s16d.tgz -C /tmp s16d
