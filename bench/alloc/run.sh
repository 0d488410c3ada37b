#!/usr/bin/env bash
# run.sh — allocation benchmark of libldshim: runs bench_alloc without and with the shim and
# writes a markdown table (date, GPU, driver, commands) to $OUT/alloc-<date>.md (or
# build/bench/alloc/ without OUT), the raw rows and stderr beside it (.tsv), and prints the table.
set -u

usage() {
  cat <<'EOF'
usage: bench/alloc/run.sh [--lib PATH] [--bin PATH] [--iters N] [--help]
  --lib PATH   preload library (default build/libldshim.so)
  --bin PATH   bench_alloc binary (default build/bench/alloc/bench_alloc)
  --iters N    iterations per size for the VMM/tagged/pool rows (default 50, at least 30)
Measures (P50 and P90, microseconds, host wall clock around the API calls):
  (a) untagged cudaMalloc+cudaFree at 4 KiB, 1 MiB, 64 MiB, without and with the shim,
      alternating runs (A B A B); target: < 1 us added
  (b) tagged cold cycle (pool = 0) vs the hand-made 7-call VMM cycle with 1 handle and with
      2 half-size handles, at 2 MiB..1 GiB; target: within 1.15x
  (c) tagged re-allocation served from the pool; target: < 5 us
Environment: OUT (destination), PYTHON (default python3), LDSHIM_PRELOAD_PREFIX.
EOF
}

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
lib=$root/build/libldshim.so
bin=$root/build/bench/alloc/bench_alloc
iters=50
while [ $# -gt 0 ]; do
  case $1 in
    --help|-h) usage; exit 0 ;;
    --lib) lib=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    *) echo "run.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
case $iters in ''|*[!0-9]*) echo "run.sh: --iters takes a number" >&2; exit 2 ;; esac
[ "$iters" -ge 30 ] || { echo "run.sh: --iters must be at least 30" >&2; exit 2; }
case $lib in /*) ;; *) lib=$PWD/$lib ;; esac
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
[ -x "$bin" ] || { echo "run.sh: $bin not built (make build/bench/alloc/bench_alloc)" >&2; exit 2; }
[ -r "$lib" ] || { echo "run.sh: $lib not built (make build/libldshim.so)" >&2; exit 2; }
PY=${PYTHON:-python3}
prefix=${LDSHIM_PRELOAD_PREFIX:-}
day=$(date -u +%Y-%m-%d)
dest=${OUT:-$root/build/bench/alloc}
mkdir -p "$dest"
raw=$dest/alloc-$day.tsv      # rows, then the programs' stderr as "log" lines (2 files in all)
md=$dest/alloc-$day.md
errlog=$(mktemp "${TMPDIR:-/tmp}/ldshim-bench-alloc.XXXXXX")
trap 'rm -f "$errlog"' EXIT
: >"$raw"
status=0

# step LABEL shim|base POLICY ARGS...: appends "cmd"/"row"/"info" lines tagged with LABEL.
step() {
  local label=$1 mode=$2 policy=$3; shift 3
  local shown="bench_alloc $*"
  if [ "$mode" = shim ]; then
    shown="LD_PRELOAD=libldshim.so LDSHIM_POLICY=bench/alloc/$(basename "$policy") $shown"
    printf 'cmd\t%s\t%s\n' "$label" "$shown" >>"$raw"
    env LD_PRELOAD="$prefix$lib" LDSHIM_POLICY="$policy" LDSHIM_LOG=warn "$bin" "$@" 2>>"$errlog" |
      sed "s/^/$label\t/" >>"$raw"
  else
    printf 'cmd\t%s\t%s\n' "$label" "$shown" >>"$raw"
    env -u LD_PRELOAD "$bin" "$@" 2>>"$errlog" | sed "s/^/$label\t/" >>"$raw"
  fi
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ]; then
    echo "run.sh: step $label ($shown) exited $rc; its stderr is in $(basename "$raw") (log lines)" >&2
    tail -3 "$errlog" >&2
    status=1
  fi
}

step info base - --mode info
step info-shim shim "$here/untagged.policy" --mode info
step stock-1 base - --mode untagged
step shim-1 shim "$here/untagged.policy" --mode untagged
step stock-2 base - --mode untagged
step shim-2 shim "$here/untagged.policy" --mode untagged
step malloc base - --mode malloc --iters "$iters"
step vmm base - --mode vmm --iters "$iters"
step cold shim "$here/cold.policy" --mode tagged --iters "$iters"
step pool shim "$here/pool.policy" --mode pool --iters "$iters"

drvver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
"$PY" "$here/make_table.py" "$raw" --driver "${drvver:-unknown}" --commit "$commit" \
  --command "bench/alloc/run.sh --iters $iters" >"$md" || status=1
sed 's/^/log\t/' "$errlog" >>"$raw"
cat "$md"
echo
echo "run.sh: table $md, raw rows and stderr $raw"
exit $status
