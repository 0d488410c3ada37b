#!/bin/sh
# run_device.sh — one command for the GPU machine: build libldmoe and its lab build, run the GPU
# tests on both, run the benchmark (over the lab: every tile). Logs go to $OUT (or build/moe-device). Usage: sh bench/moe/run_device.sh [--no-bench]
#   [--quick] [extra bench_moe.py args...]
OUTD=${OUT:-build/moe-device}
mkdir -p "$OUTD"
export PYTHONUNBUFFERED=1
BENCH=1; QUICK=
while [ $# -gt 0 ]; do
  case "$1" in
    --no-bench) BENCH=0; shift ;;
    --quick) QUICK=--quick; shift ;;
    -h|--help) sed -n 2,4p "$0"; exit 0 ;;
    *) break ;;
  esac
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUTD/gpu.txt"
# Build through the top Makefile; if another fragment is broken, fall back to moe.mk alone.
if ! make build/libldmoe.so build/lab/libldmoe_lab.so > "$OUTD/build.log" 2>&1; then
  echo "top-level make failed, building with moe.mk alone" | tee -a "$OUTD/build.log"
  make -f /dev/stdin -f kernels/moe/moe.mk build/libldmoe.so build/lab/libldmoe_lab.so >> "$OUTD/build.log" 2>&1 <<'MK' || { tail -30 "$OUTD/build.log"; exit 1; }
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
BUILD := build
RESULTS := build/results
MK
fi
# The benchmark's floor peer (bench_moe.py skips it, with a note, if this fails).
make build/moe/libstreamfloor.so >> "$OUTD/build.log" 2>&1 || echo "floor peer not built (see build.log)"
cp build/moe-ptxas.log build/lab/moe-lab-ptxas.log "$OUTD/" 2>/dev/null
grep -E "registers|spill" build/moe-ptxas.log | sort | uniq -c | head -12
rc=0
LDMOE_LIB=$PWD/build/libldmoe.so python3 tests/gpu/moe/test_moe.py $QUICK --result "$OUTD/test-gpu-moe" > "$OUTD/test.log" 2>&1 || rc=1
grep -v '^PASS' "$OUTD/test.log"
LDMOE_LAB_LIB=$PWD/build/lab/libldmoe_lab.so python3 tests/gpu/moe/test_moe.py --lab $QUICK --result "$OUTD/test-gpu-moe-lab" \
  > "$OUTD/test-lab.log" 2>&1 || rc=1
grep -v '^PASS' "$OUTD/test-lab.log"
[ "$BENCH" = 1 ] && LDMOE_LAB_LIB=$PWD/build/lab/libldmoe_lab.so LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so python3 bench/moe/bench_moe.py --lab --outdir "$OUTD" "$@" 2>&1 | tee "$OUTD/bench.log" | grep -v '^|'
exit $rc
