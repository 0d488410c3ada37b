#!/usr/bin/env bash
# layer_device.sh — one call on the GPU machine for the fused MoE layer (ldmoe.moe): correctness
# (tests/gpu/moe/test_moe_layer.py, plainly and under the shim bound to domain 0 with the digests
# of both compared), the steering timer (bench/moe/layer_time.py), then optionally
# compute-sanitizer ($SAN_TOOLS, default memcheck racecheck synccheck) over test_moe_layer.py --tiny. Builds nothing: build/libldmoe.so (and build/libldshim.so for the
# bound run) come from the CPU machine.
#
#   bash bench/moe/layer_device.sh [--no-test] [--no-bound] [--sanitize] [--time "ARGS"]
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/layer-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 LDMOE_LIB=$PWD/build/libldmoe.so
test=1 bound=1 san=0 targs=""
while [ $# -gt 0 ]; do
  case $1 in
    --no-test) test=0; shift ;;
    --no-bound) bound=0; shift ;;
    --sanitize) san=1; shift ;;
    --time) targs=$2; shift 2 ;;
    *) echo "layer_device.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader
rm -f /tmp/layer.digest
summary=""
if [ $test = 1 ]; then
  timeout 300 python3 tests/gpu/moe/test_moe_layer.py --digest /tmp/layer.digest --result $OUT/r-plain > $OUT/test-plain.log 2>&1
  summary="$summary plain:$(cat $OUT/r-plain 2>/dev/null || echo died)"
  grep -E "^FAIL|passed" $OUT/test-plain.log | head -40
  if [ $bound = 1 ] && [ -f build/libldshim.so ]; then
    LD_PRELOAD=$PWD/build/libldshim.so LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0 timeout 300 \
      python3 tests/gpu/moe/test_moe_layer.py --digest /tmp/layer.digest --result $OUT/r-bound > $OUT/test-bound.log 2>&1
    summary="$summary bound:$(cat $OUT/r-bound 2>/dev/null || echo died)"
    grep -E "^FAIL|passed|digests" $OUT/test-bound.log | head -20
  fi
fi
if [ -n "$targs" ]; then
  timeout 400 python3 bench/moe/layer_time.py $targs 2>&1 | tee $OUT/time.log
fi
if [ $san = 1 ]; then
  for tool in ${SAN_TOOLS:-memcheck racecheck synccheck}; do
    timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 python3 tests/gpu/moe/test_moe_layer.py --tiny \
      --result $OUT/r-$tool > $OUT/san-$tool.log 2>&1
    rc=$?
    summary="$summary $tool:rc=$rc:$(cat $OUT/r-$tool 2>/dev/null || echo died)"
    grep -E "ERROR SUMMARY|^FAIL" $OUT/san-$tool.log | head -5
  done
fi
echo "SUMMARY$summary"
