#!/bin/sh
# onfake.sh BIN SHIMLIB FAKEDIR RESULT — CPU suite test-gpu-shim-onfake.
#
# leak_cycle.cu, built for the CPU (BIN = its fake build: 4 MiB / 16 MiB cycles), runs against
# the fake driver and runtime of tests/fake under the real libldshim: the same cases as the GPU
# suite's leak group (so its checks are proven against the real shim before a GPU run), and
# negative controls that must FAIL: a leaked release, a fallback, a wrong expectation.
# Writes "<passed> <failed>" to RESULT; exit 1 when a case failed.
bin=$1; lib=$2; fake=$3; result=$4
here=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ldshim-gpu-onfake.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
p=0; f=0
LD_LIBRARY_PATH="$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
LDSHIM_LIBCUDA=$fake/libcuda.so.1
# The fake's device memory is host memory: cap it (the GPU's 141 GiB would be allocated and
# memset for real by the --oom-trim request).
FAKE_CUDA_MEM_LIMIT=1073741824
export LD_LIBRARY_PATH LDSHIM_LIBCUDA FAKE_CUDA_MEM_LIMIT
unset LDSHIM_STATE LDSHIM_BACKEND LDSHIM_MISMATCH LDSHIM_STRICT LD_PRELOAD

# case NAME WANT_STATUS PATTERN POLICY|- [VAR=VALUE...] -- ARGS... ; then optional report args
# after "--report".
case_() {
  name=$1; want=$2; pat=$3; pol=$4; shift 4
  envs=""
  while [ "$1" != "--" ]; do envs="$envs $1"; shift; done; shift
  args=""; rargs=""; inrep=0
  for a in "$@"; do
    if [ "$a" = "--report" ]; then inrep=1; elif [ $inrep = 1 ]; then rargs="$rargs $a"; else args="$args $a"; fi
  done
  rm -f "$tmp/r.json"
  if [ "$pol" = - ]; then
    env $envs "$bin" $args >"$tmp/o" 2>&1
  else
    env $envs LD_PRELOAD="${LDSHIM_PRELOAD_PREFIX:-}$lib" LDSHIM_POLICY="$here/$pol" LDSHIM_STATE=memory \
      LDSHIM_REPORT="$tmp/r.json" "$bin" $args >"$tmp/o" 2>&1
  fi
  got=$?
  why=""
  if [ "$got" -ne "$want" ]; then why="exit $got, expected $want"
  elif [ -n "$pat" ] && ! grep -q -- "$pat" "$tmp/o"; then why="output lacks '$pat'"
  elif [ -n "$rargs" ] && ! "$PY" "$here/check_report.py" "$tmp/r.json" $rargs >"$tmp/rep" 2>&1; then
    why="$(tr '\n' '|' <"$tmp/rep")"
  fi
  if [ -z "$why" ]; then p=$((p + 1)); echo "ok   $name"
  else f=$((f + 1)); echo "FAIL $name: $why: $(grep -E 'FAIL|error' "$tmp/o" | head -3 | tr '\n' '|')"; fi
}

case_ leak/base 0 "0 check(s) failed" - -- --expect none --oom-trim
case_ leak/nopool 0 "0 check(s) failed" fake_leak_nopool.policy -- --expect nopool \
  --report --rule small=100 --rule large=100 --pool-hits-max 0 --live-zero --no-fallbacks
case_ leak/pool 0 "after ldshim_pool_trim" fake_leak_pool.policy -- --expect pool --pool-cap-mib 2048 \
  --report --rule small=100 --rule large=100 --pool-hits-min 198 --pool-cap 2147483648 --live-zero --no-fallbacks
# A device limit of 256 MiB makes "free + pool - margin" a real out-of-memory without the trim.
case_ leak/pool-oom-trim 0 "after the trim" fake_leak_pool.policy FAKE_CUDA_MEM_LIMIT=268435456 -- \
  --expect pool --pool-cap-mib 2048 --oom-trim --report --live-zero
# Negative controls: the checks must catch these. (The shim retries a failed release once, so
# the leak needs the 7th release and its retry to fail: the second entry counts only the calls
# the first one let through.)
case_ neg/leaked-release 1 "unaccounted" fake_leak_nopool.policy FAKE_CUDA_FAIL=cuMemRelease:7,cuMemRelease:7 -- \
  --expect nopool
case_ neg/fallback 1 "199 of 200 buffers were the shim's" fake_leak_nopool.policy FAKE_CUDA_FAIL=cuMemCreate:5 -- \
  --expect nopool
case_ neg/pool-expected 1 "pool: 0 hits" fake_leak_nopool.policy -- --expect pool --pool-cap-mib 2048
case_ neg/no-pool-expected 1 "expected none" fake_leak_pool.policy -- --expect nopool
case_ neg/shim-expected 2 "not loaded" - -- --expect pool --pool-cap-mib 2048
case_ neg/cap-exceeded 1 "expected > 0 and <= cap 16 MiB" fake_leak_pool.policy -- --expect pool --pool-cap-mib 16

echo "test-gpu-shim-onfake: $p passed, $f failed"
echo "$p $f" >"$result"
[ "$f" -eq 0 ]
