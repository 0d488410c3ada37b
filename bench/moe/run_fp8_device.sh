#!/bin/bash
# run_fp8_device.sh — the FP8 validation of issue 20 on an H200, in stages that each fit one
# device call (logs and results in $OUT, or build/moe-fp8-device). Usage:
#   bash bench/moe/run_fp8_device.sh build|test|sanitize|bench|serve|all [extra bench_moe.py args]
#   build     make libldmoe.so, the lab build and the floor peer (ptxas report of the FP8 kernels)
#   test      tests/gpu/moe/test_moe.py --fp8-only, then the whole product suite (bf16 + FP8)
#   sanitize  compute-sanitizer memcheck and synccheck over smoke.py --fp8
#   bench     bench_moe.py --fp8 --layout packed on the three shapes at 8, 64, 512, 2048 tokens
#   serve     serve.py --dtype fp8 --check, torch and ldmoe (packed) backends, and bf16 ldmoe
set -o pipefail   # a stage fails when its python fails, not when its log filter does
OUTD=${OUT:-build/moe-fp8-device}
export PYTHONUNBUFFERED=1
export LDMOE_LIB="$PWD/build/libldmoe.so" LDMOE_FLOOR_LIB="$PWD/build/moe/libstreamfloor.so"
stage=${1:-all}
[ $# -gt 0 ] && shift
case "$stage" in
  -h|--help) sed -n 2,9p "$0"; exit 0 ;;
  build|test|sanitize|bench|serve|all) ;;
  *) echo "run_fp8_device.sh: unknown stage '$stage' (build, test, sanitize, bench, serve, all)" >&2; exit 2 ;;
esac
mkdir -p "$OUTD"
rc=0
if [ "$stage" = build ] || [ "$stage" = all ]; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUTD/gpu.txt"
  make -j4 build/libldmoe.so build/lab/libldmoe_lab.so build/moe/libstreamfloor.so > "$OUTD/build.log" 2>&1 ||
    { tail -30 "$OUTD/build.log"; exit 1; }
  cp build/moe-ptxas.log "$OUTD/"
  grep -A2 "fp8_kernel.*sm_90a" build/moe-ptxas.log | grep -E "entry|spill|Used" | tee "$OUTD/fp8-ptxas.txt"
fi
if [ "$stage" = test ] || [ "$stage" = all ]; then
  python3 tests/gpu/moe/test_moe.py --fp8-only --result "$OUTD/test-fp8" > "$OUTD/test-fp8.log" 2>&1 || rc=1
  grep -v '^PASS' "$OUTD/test-fp8.log"; tail -1 "$OUTD/test-fp8.log"
  python3 tests/gpu/moe/test_moe.py --result "$OUTD/test-all" > "$OUTD/test-all.log" 2>&1 || rc=1
  grep -v '^PASS' "$OUTD/test-all.log"; tail -1 "$OUTD/test-all.log"
fi
if [ "$stage" = sanitize ] || [ "$stage" = all ]; then
  for tool in memcheck synccheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 python3 tests/gpu/moe/smoke.py --fp8 \
      > "$OUTD/sanitizer-$tool.log" 2>&1 || rc=1
    tail -4 "$OUTD/sanitizer-$tool.log"
  done
fi
if [ "$stage" = bench ] || [ "$stage" = all ]; then
  python3 bench/moe/bench_moe.py --fp8 --layout packed --shapes 0,1,2 --tokens 8,64,512,2048 --outdir "$OUTD" "$@" \
    2>&1 | tee "$OUTD/bench-fp8.log" | { grep -v "^|" || true; } || rc=1
fi
if [ "$stage" = serve ] || [ "$stage" = all ]; then
  for args in "--dtype fp8 --backend torch" "--dtype fp8 --backend ldmoe --layout packed" \
              "--backend ldmoe --moe grouped --layout packed"; do
    echo "== serve.py $args --check" | tee -a "$OUTD/serve.log"
    python3 bench/apps/serve.py $args --check --no-busy 2>&1 | tee -a "$OUTD/serve.log" |
      { grep -E "^(check|decode|generated|serve.py)" || true; } || rc=1
  done
fi
exit $rc
