#!/usr/bin/env bash
# run.sh — GPU suite of the MLOPart backend (make test-gpu-mlopart). Needs an NVIDIA GPU, the
# MPS binaries on PATH, and permission to start a private MPS daemon (root on the lent H200).
#
# Cases (each prints "ok   NAME" or "FAIL NAME: reason"):
#   decline   a real private MPS daemon in MLOPart mode; on a one-die GPU the client sees one
#             device and the backend declines with exactly one log line; nothing left behind
#   single    LDSHIM_MLOPART_TEST_SINGLE=1: helper allocates, exports, passes the fd, the
#             program imports, maps, writes/reads every byte by kernel and cudaMemcpy, frees;
#             device memory back to baseline; nothing left behind
#   single-cvd  the same with LDSHIM_MLOPART_CLIENT_CVD=1 (the client keeps the UUID filter)
#   crash     test-single; the helper is SIGKILLed after one good slice: create() then fails,
#             one warning, the earlier slice still works, the supervisor cleans up the daemon
#   preload   preload_check (an unmodified CUDA program) under libldshim.so with
#             `backend = mlopart` and test-single: bytes right, report names the backend, the
#             helper found beside the library, cleanup at exit
#   leftovers after each: no process carrying the run's marker variable (helper, supervisor,
#             daemon, server), no new nvidia-cuda-mps-* process, the private TMPDIR empty
# Logs go to $OUT/gpu-mlopart/ when OUT is set (else build/mlopart/gpu-logs/).
set -u

usage() {
  cat <<'USAGE'
usage: tests/gpu/mlopart/run.sh [--bin PROGRAM] [--helper PATH] [--lib PATH] [--results FILE] [--help]
  --bin PROGRAM   mlopart_gpu (default build/mlopart/mlopart_gpu); preload_check beside it
  --lib PATH      libldshim.so for the preload case (default build/libldshim.so; the
                  helper must sit beside it, as `make` builds and installs them)
  --helper PATH   ldshim-mlopart-helper (default build/ldshim-mlopart-helper)
  --results FILE  write "<passed> <failed>" there (default build/results/test-gpu-mlopart)
Environment: OUT (log destination), MLOGPU_TIMEOUT (seconds per run, default 60),
LDSHIM_PRELOAD_PREFIX (sanitizer runtimes to preload before the library).
USAGE
}

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
bin=$root/build/mlopart/mlopart_gpu
helper=$root/build/ldshim-mlopart-helper
lib=$root/build/libldshim.so
results=$root/build/results/test-gpu-mlopart
while [ $# -gt 0 ]; do
  case $1 in
    --help|-h) usage; exit 0 ;;
    --bin) bin=$2; shift 2 ;;
    --helper) helper=$2; shift 2 ;;
    --lib) lib=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
logs=${OUT:+$OUT/gpu-mlopart}
logs=${logs:-$root/build/mlopart/gpu-logs}
mkdir -p "$logs" "$(dirname "$results")"
tmo=${MLOGPU_TIMEOUT:-60}
pass=0; fail=0
ok()   { echo "ok   $1"; pass=$((pass + 1)); }
bad()  { echo "FAIL $1: $2"; fail=$((fail + 1)); }

{
  echo "== $(date -u +%FT%TZ) $(hostname)"
  nvidia-smi --query-gpu=name,uuid,driver_version,compute_mode --format=csv,noheader 2>&1
  command -v nvidia-cuda-mps-control || echo "nvidia-cuda-mps-control: not on PATH"
} > "$logs/env.txt"
for f in "$bin" "$helper"; do
  [ -x "$f" ] || { echo "FAIL setup: $f missing (make test-gpu-mlopart builds it)"; echo "0 1" > "$results"; exit 1; }
done

mps_count() { local n; n=$(pgrep -c -f 'nvidia-cuda-mps-(control|server)' 2>/dev/null); echo "${n:-0}"; }

# Processes whose environment carries $1 (readable for our own uid, and for root all).
marked() {
  local n=0 p
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" = "$$" ] && continue
    tr '\0' '\n' 2>/dev/null < "$p/environ" | grep -qx "$1" && { n=$((n + 1)); echo "  $(tr '\0' ' ' < "$p/cmdline" 2>/dev/null)" >&2; }
  done
  echo $n
}

run_case() {
  local name=$1 mode=$2 extra=${3:-MLOGPU_NOTHING=1} prog=${4:-$bin}
  shift 4 2>/dev/null || shift $#
  local more=("$@")
  local tag="LDMLO_GPU_TAG=$$-$name" tmp
  tmp=$(mktemp -d /tmp/ldmlo-gpu-XXXXXX)
  local before; before=$(mps_count)
  local t0=$SECONDS
  local helper_env="LDSHIM_MLOPART_HELPER=$helper"
  [ "$name" = preload ] && helper_env="MLOGPU_NOTHING=2"    # found beside the library
  # Extra assignments (the preload ones) go after `timeout`, onto the program alone.
  env "$tag" "$extra" TMPDIR="$tmp" LDSHIM_LOG=info "$helper_env" \
    LDSHIM_MLOPART_DEBUG_LOGS="$logs/$name-mps-logs" \
    timeout -k 5 "$tmo" env ${more[@]+"${more[@]}"} "$prog" $mode > "$logs/$name.out" 2> "$logs/$name.err"
  local rc=$?
  local secs=$((SECONDS - t0))
  # Leftovers: wait up to 10 s for the supervisor's cleanup.
  local left=1 procs=0 ents=0 after=0 i
  for i in $(seq 1 50); do
    procs=$(marked "$tag" 2>>"$logs/$name.leftovers")
    ents=$(find "$tmp" -mindepth 1 2>/dev/null | wc -l)
    after=$(mps_count)
    if [ "$procs" -eq 0 ] && [ "$ents" -eq 0 ] && [ "$after" -le "$before" ]; then left=0; break; fi
    sleep 0.2
  done
  find "$tmp" -mindepth 1 >> "$logs/$name.leftovers" 2>/dev/null
  rm -rf "$tmp"
  sed 's/^/    /' "$logs/$name.out"
  grep -q . "$logs/$name.err" && sed 's/^/    stderr: /' "$logs/$name.err"
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then bad "$name" "timed out after ${tmo}s"
  elif [ $rc -ne 0 ]; then bad "$name" "exit $rc ($(grep -m1 FAIL "$logs/$name.out" || echo 'see log'))"
  else ok "$name (${secs}s)"; fi
  if [ $left -ne 0 ]; then
    bad "$name-leftovers" "$procs marked process(es), $ents entries in TMPDIR, mps processes $before -> $after"
  else
    ok "$name-leftovers"
  fi
}

run_case decline decline
# Exactly one backend line when declining (info level), and no warning.
n=$(grep -c 'ldshim: info: mlopart:' "$logs/decline.err" 2>/dev/null); n=${n:-0}
if grep -q '^PASS decline' "$logs/decline.out"; then
  [ "$n" -eq 1 ] && ok "decline-one-log-line" || bad "decline-one-log-line" "$n 'ldshim: info: mlopart:' lines"
fi
run_case single single
if grep -q '^PASS bytes' "$logs/single.out"; then
  if grep -q 'ldshim:.*\(warn\|backend off\|failed\)' "$logs/single.err"; then bad "single-no-warning" "$(grep -m1 ldshim: "$logs/single.err")"; else ok "single-no-warning"; fi
fi

# The same with CUDA_VISIBLE_DEVICES=GPU-<uuid> kept in the helper's client environment.
run_case single-cvd single LDSHIM_MLOPART_CLIENT_CVD=1
# The helper SIGKILLed mid-run: one warning, the backend off, the real daemon still cleaned up.
run_case crash crash
if grep -q '^PASS crash: create' "$logs/crash.out"; then
  n=$(grep -c 'backend off' "$logs/crash.err" 2>/dev/null); n=${n:-0}
  [ "$n" -eq 1 ] && ok "crash-one-warning" || bad "crash-one-warning" "$n 'backend off' lines"
fi

# The real preload library, `backend = mlopart`, an unmodified program; the helper is found
# beside the library (no LDSHIM_MLOPART_HELPER for this one), cleanup happens at exit.
pre=$(dirname "$bin")/preload_check
if [ -x "$pre" ] && [ -f "$lib" ]; then
  run_case preload "" MLOGPU_NOTHING=1 "$pre" "LD_PRELOAD=${LDSHIM_PRELOAD_PREFIX:-}$lib" \
    LDSHIM_POLICY="$here/preload.policy" LDSHIM_MLOPART_TEST_SINGLE=1 LDSHIM_REPORT="$logs/preload.json"
  if grep -q '"backend": "mlopart"' "$logs/preload.json" 2>/dev/null; then ok "preload-backend-mlopart"
  else bad "preload-backend-mlopart" "report does not name backend mlopart (see $logs/preload.json, preload.err)"; fi
else
  bad "preload" "$pre or $lib missing"
fi

echo "$pass $fail" > "$results"
echo "test-gpu-mlopart: $pass passed, $fail failed (logs in $logs)"
[ $fail -eq 0 ]
