#!/bin/sh
# run.sh — NCCL all-reduce and all-gather on two GPUs under the study's compute-binding states:
# ldshim-ab (tools/ldshim-ab) over bench/nccl/nccl_bench.py, once with every rank bound to the
# same domain index and once with rank i on domain (X+i) mod 2. Builds nothing: needs
# build/libldshim.so (`make`), PyTorch with CUDA and NCCL, and RANKS GPUs (nvidia-h200-x2).
# `sh bench/nccl/run.sh --help` lists the settings.
usage() {
  cat <<'EOF'
usage: sh bench/nccl/run.sh [--help]

For each rank-domain mode in MODES and each figure in METRICS, one ldshim-ab run:
  ldshim-ab --states STATES --domain DOMAIN --calibrate --runs RUNS --policy POLICY
            --metric 'summary: ...' -- PYTHON bench/nccl/nccl_bench.py --ranks RANKS
            --rank-domains MODE --summary METRIC --log-dir .../runs BENCH_ARGS
then bench/nccl/sweep.py: every (collective, size) of the same runs per state (median, speedup
against stock with the exact rank interval, NCCL's channels), the channels of every rank's
communicator and every rank's binding from its own shim report.

Settings (environment):
  OUT         results folder (default bench/results/nccl-binding/<UTC time>)
  PYTHON      python with torch (default python3)       SHIM    default build/libldshim.so
  POLICY      default bench/nccl/nccl.policy             RANKS   default 2
  STATES      default stock,compute-only,sm-control,full-ld,mismatch-ld
  MODES       default "same alternate" (each: same, alternate or a list such as 1,0)
  DOMAIN      domain X of the study states (default 0)
  METRICS     ldshim-ab figures, COLL:SIZE each (default allreduce:1MiB; every other size is
              in sweep.txt from the same runs); two or more run ldshim-ab once per figure
  RUNS        measured runs per state (default 5)        WARMUP  warm-up runs per state (1)
  CALIBRATE   1 (default): the A/A state; 0: none        TIMEOUT seconds per run (240)
  BENCH_ARGS  extra nccl_bench.py options (e.g. "--sizes 64KiB..64MiB --factor 4")
  CPU_DRY_RUN 1: no GPU checks, the benchmark on gloo/CPU with a tiny sweep (RUNS 1, WARMUP
              0 unless set); SHIM may be any shared object. Exercises this script end to end.
Writes OUT/env.txt and, per mode (OUT/<mode>, or OUT/<mode>-<coll>-<size> with several
METRICS): ab/ (ldshim-ab: runs.csv, runs.json, summary.json, plot.svg, reports/), ab.log,
table.txt, runs/<time>-<pid>/ (per run: result.json, rank<i>.log with NCCL's INFO lines,
rank<i>.tuning.txt), sweep.txt, sweep.json. Exit: 0, 1 some run or step failed, 2 bad setting.
About 8 s per run on an H200 pair: the defaults take ~5 min per mode (one mode per command
fits a 10-minute limit: MODES=same, then MODES=alternate).
EOF
}
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  "") ;;
  *) echo "run.sh: unknown argument '$1' (settings are environment variables; see --help)" >&2
     exit 2 ;;
esac

set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 2
PYTHON=${PYTHON:-python3}
SHIM=${SHIM:-$ROOT/build/libldshim.so}
POLICY=${POLICY:-$ROOT/bench/nccl/nccl.policy}
RANKS=${RANKS:-2}
STATES=${STATES:-stock,compute-only,sm-control,full-ld,mismatch-ld}
MODES=${MODES:-same alternate}
DOMAIN=${DOMAIN:-0}
METRICS=${METRICS:-}
CALIBRATE=${CALIBRATE:-1}
TIMEOUT=${TIMEOUT:-240}
BENCH_ARGS=${BENCH_ARGS:-}
if [ "${CPU_DRY_RUN:-0}" = 1 ]; then
  RUNS=${RUNS:-1}; WARMUP=${WARMUP:-0}
  METRICS=${METRICS:-allreduce:64KiB}
  BENCH_ARGS="--backend gloo --device cpu --sizes 64KiB..256KiB --factor 4 --warmup 1 --iters 3 $BENCH_ARGS"
else
  RUNS=${RUNS:-5}; WARMUP=${WARMUP:-1}
  METRICS=${METRICS:-allreduce:1MiB}
fi
OUT=${OUT:-$ROOT/bench/results/nccl-binding/$(date -u +%Y%m%d-%H%M%S)}

bad() { echo "run.sh: $*" >&2; exit 2; }
for m in $MODES; do
  echo "$m" | grep -Eq '^(same|alternate|[0-7](,[0-7])*)$' ||
    bad "MODES: '$m' is not same, alternate or a list of domains such as 1,0"
done
[ -n "$MODES" ] || bad "MODES is empty"
for m in $METRICS; do
  echo "$m" | grep -Eq '^(allreduce|allgather):[0-9]+(B|KiB|MiB|GiB)?$' ||
    bad "METRICS: '$m' is not COLL:SIZE (allreduce or allgather, e.g. allreduce:1MiB)"
done
whole() { echo "$2" | grep -Eq '^[0-9]+$' || bad "$1 must be a whole number (got '$2')"; }
whole RUNS "$RUNS"; whole WARMUP "$WARMUP"; whole RANKS "$RANKS"; whole DOMAIN "$DOMAIN"
whole TIMEOUT "$TIMEOUT"
[ "$CALIBRATE" = 0 ] || [ "$CALIBRATE" = 1 ] || bad "CALIBRATE must be 0 or 1"
[ -f "$SHIM" ] || bad "$SHIM not found: build it with make first (or set SHIM)"
[ -f "$POLICY" ] || bad "policy $POLICY not found"
if [ "${CPU_DRY_RUN:-0}" != 1 ]; then
  "$PYTHON" -c 'import sys, torch
sys.exit(0 if torch.cuda.is_available() and torch.cuda.device_count() >= int(sys.argv[1]) else 1)' "$RANKS" 2>/dev/null ||
    bad "$PYTHON has no CUDA-enabled PyTorch with $RANKS GPUs (CPU_DRY_RUN=1 runs on a CPU)"
fi
mkdir -p "$OUT" || exit 2

AB_EXTRA=
[ "$CALIBRATE" = 1 ] && AB_EXTRA="--calibrate"
# --domain only means something to the study states (ldshim-ab refuses it otherwise).
if echo ",$STATES," | grep -Eq ',(study|memory-only|compute-only|full-ld|mismatch-ld|sm-control),'; then
  AB_EXTRA="$AB_EXTRA --domain $DOMAIN"
fi
# shellcheck disable=SC2086
set -- $METRICS
nmetrics=$#

{
  date -u; uname -a
  git log -1 --oneline 2>/dev/null
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,uuid,driver_version,clocks.max.sm,memory.total --format=csv 2>&1
    nvidia-smi topo -m 2>&1
  else
    echo "nvidia-smi: not found"
  fi
  "$PYTHON" -c 'import torch
print("torch", torch.__version__, "cuda", torch.version.cuda)
try:
    print("nccl", ".".join(map(str, torch.cuda.nccl.version())))
except Exception as e:
    print("nccl: unknown (%s)" % e)' 2>&1
  echo "shim $SHIM"; echo "policy $POLICY"
  echo "states $STATES domain $DOMAIN modes $MODES metrics $METRICS runs $RUNS warmup $WARMUP calibrate $CALIBRATE ranks $RANKS"
  echo "bench_args $BENCH_ARGS"
  env | grep -E '^(NCCL_|CUDA_VISIBLE_DEVICES|LDSHIM_)' | sort
} > "$OUT/env.txt" 2>&1

rc=0
start=$(date +%s)
for mode in $MODES; do
  for metric in $METRICS; do
    coll=${metric%%:*}; size=${metric#*:}
    name=$(echo "$mode" | tr ',' '-')
    [ "$nmetrics" -gt 1 ] && name="$name-$coll-$size"
    d="$OUT/$name"
    mkdir -p "$d" || exit 2
    echo "run.sh: $name: ldshim-ab over nccl_bench.py --rank-domains $mode, figure $metric" >&2
    # shellcheck disable=SC2086
    "$PYTHON" tools/ldshim-ab --shim "$SHIM" --policy "$POLICY" --states "$STATES" $AB_EXTRA \
      --runs "$RUNS" --warmup "$WARMUP" --order abba --seed 1 --timeout "$TIMEOUT" \
      --metric "^summary: $coll [0-9]+ B: ([0-9.]+) us" --lower-is-better --unit us \
      --metric-name "$coll $size" --out "$d/ab" -- \
      "$PYTHON" bench/nccl/nccl_bench.py --ranks "$RANKS" --rank-domains "$mode" \
      --summary "$metric" --log-dir "$d/runs" $BENCH_ARGS > "$d/table.txt" 2> "$d/ab.log"
    r=$?
    [ "$r" -eq 0 ] || { echo "run.sh: $name: ldshim-ab exit $r (see $d/ab.log)" >&2; rc=1; }
    cat "$d/table.txt"
    if "$PYTHON" bench/nccl/sweep.py --ab "$d/ab" --logs "$d/runs" --json "$d/sweep.json" \
         > "$d/sweep.txt" 2>> "$d/ab.log"; then
      cat "$d/sweep.txt"
    else
      echo "run.sh: $name: sweep.py found no result to tabulate (see $d/ab.log)" >&2; rc=1
    fi
  done
done
echo "run.sh: exit $rc; $(( $(date +%s) - start )) s; results in $OUT"
exit $rc
