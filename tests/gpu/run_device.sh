#!/usr/bin/env bash
# run_device.sh — one call on the GPU machine: build, every GPU suite, every benchmark.
#
#   bash tests/gpu/run_device.sh [--skip-build | --build "target ..."] [--only "suite ..."]
#                                [--bench "alloc probe mlopart ab compute serve ab-study per-domain"]
#
# --skip-build builds the shim, the probe tool and the MLOPart helper (each suite's make target
# builds its own programs); --build builds the named targets. Every suite gets SUITE_TIMEOUT
# seconds (default 300); AB_TIMEOUT bounds the ab and ab-study benches (300, 360). Benches: compute = bench/compute/run.sh --reps COMPUTE_REPS (3);
# serve = bench/apps/serve.py once without and once under the shim (stock), its decode time
# and busy share; ab-study = ldshim-ab --states study --calibrate over serve.py; per-domain =
# bench/ab/per_domain.py over serve.py.
#
# Logs go to a work folder; at the end everything is packed into $OUT/logs.tgz (the device
# tool returns at most 8 files) and a one-line-per-step summary is printed and written to
# $OUT/summary.txt. Each step has its own timeout so one hang cannot eat the whole call.
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/build/device-out}
W=$(mktemp -d /tmp/ldshim-device.XXXXXX)
mkdir -p "$OUT"
suites="test-gpu-shim test-gpu-probe test-gpu-mlopart test-gpu-moe"
benches="alloc probe mlopart ab"
build=1
while [ $# -gt 0 ]; do
  case $1 in
    --help|-h) sed -n '2,10p' "$0"; exit 0 ;;
    --skip-build) build=0; shift ;;
    --build) build=2; targets=$2; shift 2 ;;
    --only) suites=$2; shift 2 ;;
    --bench) benches=$2; shift 2 ;;
    *) echo "run_device.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
summary=$W/summary.txt
step() {  # step NAME TIMEOUT CMD...
  local name=$1 t=$2; shift 2
  local t0=$(date +%s%N)
  timeout "$t" "$@" > "$W/$name.log" 2>&1
  local rc=$?
  printf '%-28s rc=%-3s %6d ms\n' "$name" "$rc" $(( ($(date +%s%N) - t0) / 1000000 )) | tee -a "$summary"
  return $rc
}
# The device image has no uthash-dev: a copy of the header carried in .devinc/ (ignored by git:
# `mkdir -p .devinc && cp /usr/include/uthash.h .devinc/`, then carry ".devinc") stands in.
if ! echo '#include <uthash.h>' | ${CC:-cc} -E - > /dev/null 2>&1; then
  if [ -f .devinc/uthash.h ]; then cp .devinc/uthash.h /usr/include/ 2>/dev/null || export CPATH=$ROOT/.devinc${CPATH:+:$CPATH}
  else echo "run_device.sh: uthash.h is missing here; carry a copy in .devinc/ (see this script)" | tee -a "$summary"; fi
fi
{ date -u; nvidia-smi; nvcc --version | tail -1; python3 -c 'import torch; print("torch", torch.__version__)'; } > "$W/env.txt" 2>&1
if [ $build = 2 ]; then
  # shellcheck disable=SC2086
  step build-targets 300 make -j"$(nproc)" $targets || { tail -40 "$W/build-targets.log"; }
elif [ $build = 1 ]; then
  step build 420 make -j"$(nproc)" all || { tail -40 "$W/build.log"; }
else
  step build-core 300 make -j"$(nproc)" build/libldshim.so build/bin/ldshim-probe build/ldshim-mlopart-helper \
    || { tail -40 "$W/build-core.log"; }
fi
export OUT_ROOT=$W
for s in $suites; do
  mkdir -p "$W/$s"
  OUT=$W/$s step "$s" "${SUITE_TIMEOUT:-300}" make --no-print-directory "$s"
done
for b in $benches; do
  mkdir -p "$W/bench-$b"
  case $b in
    alloc)   OUT=$W/bench-alloc step bench-alloc 240 make --no-print-directory bench-alloc ;;
    probe)   OUT=$W/bench-probe step bench-probe 180 make --no-print-directory probe-bench ;;
    mlopart) OUT=$W/bench-mlopart step bench-mlopart 120 make --no-print-directory bench-mlopart ;;
    ab)      OUT=$W/bench-ab step bench-ab "${AB_TIMEOUT:-300}" sh bench/ab/run_serve_ab.sh ;;
    compute) step bench-compute 300 bash bench/compute/run.sh --reps "${COMPUTE_REPS:-3}" --out "$W/bench-compute" ;;
    serve)   step serve-noshim 150 python3 bench/apps/serve.py
             step serve-shim 150 env LD_PRELOAD="$ROOT/build/libldshim.so" LDSHIM_REPORT="$W/bench-serve/report.json" \
               python3 bench/apps/serve.py ;;
    ab-study) OUT=$W/bench-ab-study STATES=study CALIBRATE=1 step bench-ab-study "${AB_TIMEOUT:-360}" sh bench/ab/run_serve_ab.sh ;;
    per-domain) step bench-per-domain 300 python3 bench/ab/per_domain.py --out "$W/bench-per-domain" --runs 3 \
               --shim "$ROOT/build/libldshim.so" -- python3 bench/apps/serve.py ;;
    *) echo "run_device.sh: unknown bench $b" | tee -a "$summary" ;;
  esac
done
cp -r "$ROOT/build/results" "$W/results" 2>/dev/null
tar -C "$W" -czf "$OUT/logs.tgz" . 2>/dev/null
cp "$summary" "$OUT/summary.txt"
echo "== summary"; cat "$summary"
for f in "$W"/*.log; do
  if grep -qE "FAIL|Error|error:" "$f"; then echo "== tail of $(basename "$f")"; grep -E "FAIL|rror" "$f" | tail -8; fi
done
