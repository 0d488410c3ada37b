#!/usr/bin/env bash
# run.sh — the reliability stress on a GPU (make test-gpu-stress; issue 24).
#
#   bash tests/gpu/stress/run.sh --bin T_STRESS_GPU --lib LIBLDSHIM --results FILE
#                                [--seconds N] [--threads N]
#
# Cases (each prints "ok NAME" or "FAIL NAME: why"; FILE gets "<passed> <failed>"):
#   stress/noshim          the program alone: exits 0, every launch succeeds, memory back
#   stress/<state>         under the shim in stock, memory, full, mismatch: exits 0, the same
#                          launch result as without the shim, no live shim range or byte at
#                          the end, tagged allocations made and freed, the report's live = 0
# The program checks every byte pattern, range and pointer attribute itself (t_stress.c).
set -u
bin= lib= results= seconds=120 threads=32
while [ $# -gt 0 ]; do
  case $1 in
    --help|-h) sed -n '2,13p' "$0"; exit 0 ;;
    --bin) bin=$2; shift 2 ;;
    --lib) lib=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$bin" ] && [ -n "$lib" ] && [ -n "$results" ] || { echo "run.sh: --bin, --lib and --results are required" >&2; exit 2; }
case $seconds$threads in *[!0-9]*) echo "run.sh: --seconds and --threads take whole numbers" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
log=$(mktemp -d /tmp/ldshim-gpu-stress.XXXXXX)
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1: $2"; }
val() { sed -n "s/^$1=//p" "$2" | tail -1; }
args="stress $threads ${seconds}s 64MiB,96MiB,256MiB 1MiB,16MiB"

timeout $((seconds + 120)) "$bin" $args > "$log/noshim.out" 2> "$log/noshim.err"
rc=$?
base_launch=$(val launch_rc "$log/noshim.out")
if [ $rc -ne 0 ]; then bad stress/noshim "exit $rc: $(tail -1 "$log/noshim.err")"
elif [ "$base_launch" != 0 ] || [ "$(val launch_codes "$log/noshim.out")" != 1 ]; then bad stress/noshim "launches: rc $base_launch"
else ok "stress/noshim ($(val ops "$log/noshim.out") operations)"; fi

for st in stock memory full mismatch; do
  out=$log/$st.out err=$log/$st.err rep=$log/$st.json
  LD_PRELOAD="${LDSHIM_PRELOAD_PREFIX:-}$lib" LDSHIM_POLICY="$here/stress.policy" LDSHIM_STATE=$st LDSHIM_REPORT=$rep \
    timeout $((seconds + 120)) "$bin" $args > "$out" 2> "$err"
  rc=$?
  why=
  [ $rc -eq 0 ] || why="exit $rc: $(grep -v '^ldshim: ' "$err" | tail -1)"
  [ -z "$why" ] && [ "$(val launch_rc "$out")" != "$base_launch" ] && why="launch rc $(val launch_rc "$out"), without the shim $base_launch"
  [ -z "$why" ] && [ "$(val shim_live_ranges "$out")" != 0 ] && why="live ranges $(val shim_live_ranges "$out")"
  [ -z "$why" ] && [ "$(val shim_live_bytes "$out")" != 0 ] && why="live bytes $(val shim_live_bytes "$out")"
  [ -z "$why" ] && [ "$(val shim_tagged_allocs "$out")" != "$(val shim_tagged_frees "$out")" ] && why="tagged allocs != frees"
  if [ -z "$why" ] && [ $st != stock ] && [ "$(val shim_tagged_allocs "$out")" = 0 ]; then why="nothing was tagged"; fi
  if [ -z "$why" ]; then
    python3 - "$rep" <<'PY' || why="report: $(cat "$log/py.err" 2>/dev/null)"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["live"]["ranges"] == 0 and r["live"]["bytes"] == 0, r["live"]
PY
  fi
  if [ -z "$why" ]; then ok "stress/$st ($(val ops "$out") operations, $(val shim_tagged_allocs "$out") tagged)"
  else bad "stress/$st" "$why (logs in $log)"; fi
done
echo "$pass $fail" > "$results"
echo "test-gpu-stress: $pass passed, $fail failed (logs in $log)"
[ $fail -eq 0 ]
