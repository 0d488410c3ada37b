#!/bin/bash
# session 16, call a: the dependent launch + L2 prefetch and the wave-aware block AUTO: suites, sanitizers, A/B bench, serve
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/d90/libldmoe.so LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
D=/tmp/s16a; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $D/env.txt; cat $D/env.txt
step fp8 150 python3 tests/gpu/moe/test_moe.py --fp8-only
grep -v "^PASS" $D/fp8.log | tail -5
step labfp8 200 python3 tests/gpu/moe/test_moe.py --lab --fp8-only
grep -v "^PASS" $D/labfp8.log | tail -5
for tool in memcheck synccheck; do
  step san-$tool 150 compute-sanitizer --tool $tool --error-exitcode 9 python3 tests/gpu/moe/smoke.py --fp8
  grep -E "ERROR SUMMARY|FAIL" $D/san-$tool.log | tail -2
done
V=rowwise:auto:0:bf16x,rowwise:auto:0x20:bf16x,rowwise:auto:0x40:bf16x,rowwise:auto:0x20,block:auto:0x20,block:ws128x64c16fp8:0,block:ws256x64c16fp8:0
B="python3 bench/moe/bench_moe.py --fp8 --lab --layout packed --shapes 0,1,2 --tokens 8,16,32,64 --fp8-variants $V"
step bench1 200 $B --outdir $D/bench1
step bench2 200 $B --outdir $D/bench2
for f in bench1 bench2; do echo "-- $f"; grep "^| [0-9]" $D/$f/moe-fp8.md | cut -d'|' -f2-12 | head -12; sed -n '/lab variants/,$p' $D/$f/moe-fp8.md; done
for args in "--dtype fp8 --backend torch" "--dtype fp8 --backend ldmoe --layout packed"; do
  echo "== serve.py $args" >> $D/serve.log
  timeout 120 python3 bench/apps/serve.py $args --check --no-busy >> $D/serve.log 2>&1; echo "rc=$?" >> $D/serve.log
done
grep -E "^(==|check|decode|rc=)" $D/serve.log
tar czf $OUT/s16a.tgz -C /tmp s16a
