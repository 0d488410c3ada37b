#!/usr/bin/env bash
# run.sh — the shim core's GPU suite (make test-gpu-shim). Needs an NVIDIA GPU with VMM.
#
# Runs real programs without libldshim and under it in every placement state, prints one line
# per case ("ok   NAME" or "FAIL NAME: reason"), writes "<passed> <failed>" to --results and
# exits 1 when a case failed. Logs (stdout, stderr, JSON report of every run) go to a log
# folder, packed as $OUT/gpu-shim-logs.tar.gz when OUT is set (plus $OUT/gpu-shim-summary.txt).
set -u

usage() {
  cat <<'EOF'
usage: tests/gpu/shim/run.sh [--lib PATH] [--bin DIR] [--results FILE] [--only LIST] [--help]
  --lib PATH      the preload library (default build/libldshim.so)
  --bin DIR       where alloc_check_{shared,static} and leak_cycle are (default build/tests/gpu/shim)
  --results FILE  write "<passed> <failed>" there (default build/results/test-gpu-shim)
  --only LIST     comma list of groups to run: alloc,torch,leak (default all)
Environment: OUT (log destination), PYTHON (default python3, must import torch for the torch
group), LDSHIM_PRELOAD_PREFIX (sanitizer runtimes to preload first), SHIMGPU_TIMEOUT (s per run).
Cases:
  alloc/<cudart>/<state>  alloc_check.cu, dynamic and static cudart; without the shim (base) and
                          under stock/memory/full/mismatch (backend emulated): exit 0, its own
                          checks (ownership, address range, IPC, memory baseline), stdout equal
                          to the base run, report (rules, live ranges 0, no fallbacks)
  torch/...               torch_check.py, caching allocator and PYTORCH_NO_CUDA_MEMORY_CACHING=1:
                          hashes equal to the base run, rule matched, nothing tagged in stock
  leak/...                leak_cycle.cu: 200 tagged cycles, memory back to baseline net of the
                          pool, pool off and on; pool yields its memory on out-of-memory
EOF
}

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
lib=$root/build/libldshim.so
bin=$root/build/tests/gpu/shim
results=$root/build/results/test-gpu-shim
only=alloc,torch,leak
while [ $# -gt 0 ]; do
  case $1 in
    --help|-h) usage; exit 0 ;;
    --lib) lib=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) echo "run.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
case $lib in /*) ;; *) lib=$PWD/$lib ;; esac
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
PY=${PYTHON:-python3}
TMO=${SHIMGPU_TIMEOUT:-60}   # per run; a normal run takes 2-10 s
prefix=${LDSHIM_PRELOAD_PREFIX:-}

[ -z "${OUT:-}" ] || mkdir -p "$OUT" || { echo "run.sh: cannot create OUT=$OUT" >&2; exit 2; }
logs=$(mktemp -d "${TMPDIR:-/tmp}/ldshim-gpu-shim.XXXXXX")
cache=$logs/probe-cache
mkdir -p "$cache"
passed=0; failed=0
summary=$logs/summary.txt

line() { echo "$*" | tee -a "$summary"; }
ok() { passed=$((passed + 1)); line "ok   $1"; }
bad() { failed=$((failed + 1)); line "FAIL $1: $2"; }

# run NAME MODE(base|shim) POLICY STATE -- CMD...   -> $logs/NAME.{out,err,json}, sets $rc
run() {
  local name=$1 mode=$2 policy=$3 state=$4; shift 5
  local f=$logs/${name//\//_}
  rm -f "$f.json"
  out=$f.out; err=$f.err; rep=$f.json
  if [ "$mode" = shim ] && [ ! -r "$lib" ]; then
    : >"$out"; echo "run.sh: $lib missing" >"$err"; rc=99; return
  fi
  # The preload is set by `env`, which execs the program: `timeout` itself must not carry the
  # shim (its copy would write the report again when it exits).
  if [ "$mode" = shim ]; then
    timeout -k 5 "$TMO" env -u LDSHIM_MISMATCH -u LDSHIM_BACKEND -u LDSHIM_STRICT LD_PRELOAD="$prefix$lib" LDSHIM_POLICY="$policy" LDSHIM_STATE="$state" \
        LDSHIM_LOG=info LDSHIM_REPORT="$f.json" LDSHIM_CACHE_DIR="$cache" \
        ${prefix:+ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0} \
        "$@" >"$f.out" 2>"$f.err"
  else
    timeout -k 5 "$TMO" env -u LD_PRELOAD -u LDSHIM_POLICY -u LDSHIM_STATE -u LDSHIM_REPORT \
        "$@" >"$f.out" 2>"$f.err"
  fi
  rc=$?
}

# Why a run failed, in one line: exit status plus the first FAIL/error lines of stderr.
why_rc() {
  [ "$rc" -eq 99 ] && { echo "not run: $lib missing"; return; }
  local r="exit $rc"
  [ "$rc" -gt 128 ] && r="killed by signal $((rc - 128))"
  [ "$rc" -eq 124 ] && r="timed out after ${TMO}s"
  [ "$rc" -eq 137 ] && r="killed (SIGKILL: timed out after ${TMO}s, or out of host memory)"
  local msg
  msg=$(grep -E 'FAIL|error|Error|Traceback|ldshim: .*(error|fatal)' "$err" | head -3 | tr '\n' '|' | cut -c1-400)
  [ -n "$msg" ] || msg=$(tail -2 "$err" | tr '\n' '|' | cut -c1-300)
  echo "$r${msg:+: $msg}"
}

# same_stdout REF: empty when $out equals REF, else a one-line reason.
same_stdout() {
  if [ -z "$1" ]; then echo "no successful base run to compare stdout with"; return; fi
  if grep -q 'ldshim' "$out"; then echo "stdout has ldshim output: $(grep -m1 ldshim "$out" | cut -c1-120)"; return; fi
  cmp -s "$1" "$out" && return
  echo "stdout differs from $(basename "$1"): $(diff "$1" "$out" | grep '^[<>]' | head -2 | tr '\n' '|' | cut -c1-300)"
}

report_check() {   # report_check ARGS... -> empty or reason
  [ -s "$rep" ] || { echo "no report written to LDSHIM_REPORT ($(basename "$rep"))"; return; }
  local r
  r=$("$PY" "$here/check_report.py" "$rep" "$@" 2>&1) && return
  echo "$r" | tr '\n' '|' | cut -c1-400
}

# finish NAME REASONS...: ok when every reason is empty.
finish() {
  local name=$1; shift
  local all="" x
  for x in "$@"; do [ -n "$x" ] && all="$all${all:+; }$x"; done
  if [ -z "$all" ]; then ok "$name"; else bad "$name" "$all"; fi
}

want() { case ",$only," in *",$1,"*) return 0 ;; esac; return 1; }

echo "gpu-shim: lib $lib, logs $logs" | tee -a "$summary"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-shim: warning: nvidia-smi cannot list a GPU; runs will likely fail" | tee -a "$summary"
else
  nvidia-smi -L | head -1 | tee -a "$summary"
fi
[ -r "$lib" ] || echo "gpu-shim: warning: $lib missing: every shim case will fail (make build/libldshim.so)" | tee -a "$summary"

# --- alloc: the CUDA C program, dynamic and static cudart ----------------------------------
if want alloc; then
  pol=$here/alloc.policy
  ref=""
  for cudart in shared static; do
    exe=$bin/alloc_check_$cudart
    if [ ! -x "$exe" ]; then
      for s in base stock memory full mismatch; do bad "alloc/$cudart/$s" "$exe not built"; done
      continue
    fi
    run "alloc/$cudart/base" base - - -- "$exe" --expect none
    if [ "$rc" -ne 0 ]; then bad "alloc/$cudart/base" "$(why_rc)"
    elif [ -z "$ref" ]; then ref=$out; ok "alloc/$cudart/base"
    else finish "alloc/$cudart/base" "$(same_stdout "$ref")"; fi
    run "alloc/$cudart/stock" shim "$pol" stock -- "$exe" --expect none --state stock
    if [ "$rc" -ne 0 ]; then bad "alloc/$cudart/stock" "$(why_rc)"
    else finish "alloc/$cudart/stock" "$(same_stdout "$ref")" \
        "$(report_check --state stock --nothing-tagged --live-zero)"; fi
    for s in memory full mismatch; do
      run "alloc/$cudart/$s" shim "$pol" "$s" -- "$exe" --expect shim --state "$s"
      if [ "$rc" -ne 0 ]; then bad "alloc/$cudart/$s" "$(why_rc)"
      else finish "alloc/$cudart/$s" "$(same_stdout "$ref")" \
          "$(report_check --state "$s" --backend emulated --rule t64=1 --rule t96p1=1 --rule t1g=1 \
             --rule drv40=1 --no-fallbacks --live-zero --pool-hits-max 0 --untagged-size 50331655)"; fi
    done
  done
fi

# --- torch: an unmodified PyTorch program -----------------------------------------------------
if want torch; then
  # The shim sees PyTorch's cudaMalloc segments only with expandable segments off (the default
  # in 2.x; pinned here so a changed default cannot silently bypass the rule).
  export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False
  pol=$here/torch.policy
  prog=$here/torch_check.py
  if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
    bad "torch" "$PY cannot import torch (set PYTHON=...)"
  else
    run "torch/cached/base" base - - -- "$PY" "$prog"
    if [ "$rc" -ne 0 ]; then bad "torch/cached/base" "$(why_rc)"; else
      tref=$out; ok "torch/cached/base"
      run "torch/cached/base-again" base - - -- "$PY" "$prog"
      if [ "$rc" -ne 0 ]; then bad "torch/cached/base-again" "$(why_rc)"
      else finish "torch/cached/base-again" "$(same_stdout "$tref" | sed 's/^./program not deterministic: &/')"; fi
      run "torch/cached/stock" shim "$pol" stock -- "$PY" "$prog"
      if [ "$rc" -ne 0 ]; then bad "torch/cached/stock" "$(why_rc)"
      else finish "torch/cached/stock" "$(same_stdout "$tref")" "$(report_check --state stock --nothing-tagged)"; fi
      for s in memory mismatch; do
        run "torch/cached/$s" shim "$pol" "$s" -- "$PY" "$prog"
        if [ "$rc" -ne 0 ]; then bad "torch/cached/$s" "$(why_rc)"
        else finish "torch/cached/$s" "$(same_stdout "$tref")" \
            "$(report_check --state "$s" --backend emulated --rule 'torch64>=1' --no-fallbacks --live-zero)"; fi
      done
    fi
    export PYTORCH_NO_CUDA_MEMORY_CACHING=1
    run "torch/uncached/base" base - - -- "$PY" "$prog"
    if [ "$rc" -ne 0 ]; then bad "torch/uncached/base" "$(why_rc)"; else
      tref=$out; ok "torch/uncached/base"
      run "torch/uncached/memory" shim "$pol" memory -- "$PY" "$prog"
      if [ "$rc" -ne 0 ]; then bad "torch/uncached/memory" "$(why_rc)"
      else finish "torch/uncached/memory" "$(same_stdout "$tref")" \
          "$(report_check --state memory --backend emulated --rule 'torch36>=1' --no-fallbacks --live-zero)"; fi
    fi
    unset PYTORCH_NO_CUDA_MEMORY_CACHING
  fi
fi

# --- leak: 200 tagged cycles, pool off and on ---------------------------------------------------
if want leak; then
  exe=$bin/leak_cycle
  if [ ! -x "$exe" ]; then bad "leak" "$exe not built"; else
    run "leak/base" base - - -- "$exe" --expect none --oom-trim
    if [ "$rc" -ne 0 ]; then bad "leak/base" "$(why_rc)"; else ok "leak/base"; fi
    run "leak/nopool" shim "$here/leak_nopool.policy" memory -- "$exe" --expect nopool
    if [ "$rc" -ne 0 ]; then bad "leak/nopool" "$(why_rc)"
    else finish "leak/nopool" "$(report_check --rule small=100 --rule large=100 --pool-hits-max 0 --live-zero --no-fallbacks)"; fi
    run "leak/pool" shim "$here/leak_pool.policy" memory -- "$exe" --expect pool --pool-cap-mib 2048
    if [ "$rc" -ne 0 ]; then bad "leak/pool" "$(why_rc)"
    else finish "leak/pool" "$(report_check --rule small=100 --rule large=100 --pool-hits-min 198 \
        --pool-cap 2147483648 --live-zero --no-fallbacks)"; fi
    run "leak/pool-oom-trim" shim "$here/leak_pool.policy" memory -- "$exe" --expect pool --pool-cap-mib 2048 --oom-trim
    if [ "$rc" -ne 0 ]; then bad "leak/pool-oom-trim" "$(why_rc)"
    else finish "leak/pool-oom-trim" "$(report_check --live-zero)"; fi
  fi
fi

line "gpu-shim: $passed passed, $failed failed"
mkdir -p "$(dirname "$results")"
echo "$passed $failed" > "$results"
if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
  cp "$summary" "$OUT/gpu-shim-summary.txt"
  if tar -C "$logs" -czf "$OUT/gpu-shim-logs.tar.gz" --exclude probe-cache . 2>/dev/null; then
    rm -rf "$logs"
    echo "gpu-shim: logs in \$OUT/gpu-shim-logs.tar.gz"
  else
    echo "gpu-shim: could not pack the logs into \$OUT; they stay in $logs"
  fi
else
  echo "gpu-shim: logs in $logs"
fi
[ "$failed" -eq 0 ]
