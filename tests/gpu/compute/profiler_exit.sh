#!/usr/bin/env bash
# profiler_exit.sh — a bound process that used torch.profiler (CUPTI) exits cleanly: ROUNDS
# rounds of PAR bench/apps/serve.py processes at once (its busy line runs the profiler), in
# the bound study states, each must exit 0. Part of test-gpu-compute's regression checks
# (the shim once destroyed its green contexts at exit, after CUPTI had torn itself down).
#
#   bash tests/gpu/compute/profiler_exit.sh [--lib PATH] [--rounds N] [--par N]
set -u
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../../.." && pwd)
lib=$root/build/libldshim.so rounds=5 par=4
while [ $# -gt 0 ]; do
  case $1 in
    --help|-h) sed -n '2,7p' "$0"; exit 0 ;;
    --lib) lib=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --par) par=$2; shift 2 ;;
    *) echo "profiler_exit.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
case $rounds$par in *[!0-9]*|'') echo "profiler_exit.sh: --rounds and --par take whole numbers" >&2; exit 2 ;; esac
PY=${PYTHON:-python3}
logs=$(mktemp -d "${TMPDIR:-/tmp}/ldshim-profiler-exit.XXXXXX")
states=(compute-only full-ld sm-control mismatch-ld)
ok=0 bad=0
# The topology and the SM groups are measured once, on an idle GPU, before processes share it.
env LD_PRELOAD="$lib" LDSHIM_STATE=full-ld LDSHIM_CACHE_DIR="$logs/cache" \
  "$PY" -c 'import torch; torch.zeros(1, device="cuda"); torch.cuda.synchronize()' > "$logs/warm.out" 2>&1
for r in $(seq 1 "$rounds"); do
  pids=()
  for i in $(seq 1 "$par"); do
    st=${states[$(( (r + i) % ${#states[@]} ))]}
    env LD_PRELOAD="$lib" LDSHIM_STATE="$st" LDSHIM_CACHE_DIR="$logs/cache" \
      "$PY" "$root/bench/apps/serve.py" --steps 8 --warmup-steps 4 > "$logs/r$r-$i-$st.out" 2> "$logs/r$r-$i-$st.err" &
    pids+=("$!:$r-$i-$st")
  done
  for p in "${pids[@]}"; do
    wait "${p%%:*}"; rc=$?
    if [ $rc -eq 0 ] && grep -q '^busy: [0-9]' "$logs/r${p#*:}.out"; then ok=$((ok + 1))
    else bad=$((bad + 1)); echo "FAIL profiler-exit/${p#*:}: exit $rc: $(tail -1 "$logs/r${p#*:}.err")"; fi
  done
done
echo "profiler-exit: $ok exited cleanly, $bad did not (logs $logs)"
[ $bad -eq 0 ]
