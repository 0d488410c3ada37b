#!/bin/sh
# run_serve_ab.sh — A/B run of bench/apps/serve.py in one family of placement states on a GPU
# with the emulated backend (bench/ab/serve-emulated.policy). Builds nothing: needs
# build/libldshim.so (`make`) and PyTorch with CUDA. About 3-4 minutes on an H200.
#
#   sh bench/ab/run_serve_ab.sh            # results under $OUT, else bench/results/ab-serve/<backend>-<time>
#
# Environment: OUT (results folder), PYTHON (default python3), SHIM (default
# build/libldshim.so), RUNS (measured runs per state, default 4), STEPS (decode steps per run,
# default 64), BACKEND (serve.py --backend: torch, default, or ldmoe), SERVE_ARGS (extra
# serve.py options, e.g. "--layers 1"), CALIBRATE=1 (add the A/A state: ldshim-ab --calibrate),
# TARGET_CI (e.g. 1%: ldshim-ab --target-ci, RUNS the minimum) and MAX_RUNS (its cap, default 20),
# STATES (ldshim-ab --states: default split = stock,memory,full,mismatch; study for the study
# family) and DOMAIN (ldshim-ab --domain, study states only).
# Writes: env.txt, sizes.txt, discovery.txt + discovery.log + discovery/reports/ (a run with
# the shim and no policy: the histogram of untagged sizes), ab/ (ldshim-ab: runs.csv, runs.json,
# summary.json, plot.svg, plot.png when matplotlib is importable, reports/), ab.log, table.txt.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 2
PYTHON=${PYTHON:-python3}
SHIM=${SHIM:-$ROOT/build/libldshim.so}
RUNS=${RUNS:-4}
STEPS=${STEPS:-64}
BACKEND=${BACKEND:-torch}
SERVE_ARGS="--backend $BACKEND ${SERVE_ARGS:-}"
OUT=${OUT:-$ROOT/bench/results/ab-serve/$BACKEND-$(date -u +%Y%m%d-%H%M%S)}
AB_EXTRA=
[ "${CALIBRATE:-0}" = 1 ] && AB_EXTRA="--calibrate"
[ -n "${TARGET_CI:-}" ] && AB_EXTRA="$AB_EXTRA --target-ci $TARGET_CI --max-runs ${MAX_RUNS:-20}"
[ -n "${DOMAIN:-}" ] && AB_EXTRA="$AB_EXTRA --domain $DOMAIN"
STATES=${STATES:-split}
mkdir -p "$OUT" || exit 2

if [ ! -f "$SHIM" ]; then
  echo "run_serve_ab.sh: $SHIM not found: build it with make first" >&2; exit 2
fi
# CPU_DRY_RUN=1 skips the GPU check: a functional run of this script with
# SERVE_ARGS="--device cpu <tiny config>" and any shared object as SHIM.
if [ "${CPU_DRY_RUN:-0}" != 1 ] &&
   ! "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "run_serve_ab.sh: $PYTHON has no CUDA-enabled PyTorch" >&2; exit 2
fi

{
  date -u; uname -a
  nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,memory.total --format=csv 2>&1
  "$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  "$PYTHON" -c 'import matplotlib; print("matplotlib", matplotlib.__version__)' 2>&1 | tail -1
  echo "shim $SHIM"; echo "runs $RUNS steps $STEPS states $STATES serve_args $SERVE_ARGS ab_extra $AB_EXTRA"
  git log -1 --oneline 2>/dev/null
} > "$OUT/env.txt" 2>&1

# shellcheck disable=SC2086
"$PYTHON" bench/apps/serve.py --print-sizes $SERVE_ARGS > "$OUT/sizes.txt" 2>&1

# Discovery: the shim preloaded in state full, no policy; its report lists the untagged allocation
# sizes (every process writes <name>.<pid>.json; ldshim-ab merges them).
start=$(date +%s)
# shellcheck disable=SC2086
"$PYTHON" tools/ldshim-ab --shim "$SHIM" --discover --timeout 90 --env LDSHIM_LOG=info \
  --out "$OUT/discovery" -- "$PYTHON" bench/apps/serve.py --steps 8 --check $SERVE_ARGS \
  > "$OUT/discovery.txt" 2> "$OUT/discovery.log"
echo "discovery run: exit $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/discovery.log"

# The A/B run. --check makes every run compare its expert GEMMs with a reference, so a run
# whose weights were corrupted by the placement fails instead of timing garbage.
# shellcheck disable=SC2086
"$PYTHON" tools/ldshim-ab --shim "$SHIM" --policy bench/ab/serve-emulated.policy \
  --states "$STATES" --runs "$RUNS" --warmup 1 --order abba --seed 1 \
  --timeout 60 --metric 'decode: ([0-9.]+) ms/step' --lower-is-better --unit ms/step \
  $AB_EXTRA --out "$OUT/ab" -- "$PYTHON" bench/apps/serve.py --steps "$STEPS" --check $SERVE_ARGS \
  > "$OUT/table.txt" 2> "$OUT/ab.log"
rc=$?
cat "$OUT/table.txt"
echo "run_serve_ab.sh: ldshim-ab exit $rc; $(( $(date +%s) - start )) s; results in $OUT"
exit $rc
