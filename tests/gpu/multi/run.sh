#!/usr/bin/env bash
# run.sh [RESULT_FILE] — the shim's two-GPU suite (issue 7), on a machine with two GPUs.
#
#   multi_check.py  one process driving both GPUs: tagged ranges on each device, the map each
#                   device's libldmoe module sees, peer copies and a cross-device copy kernel
#   nccl_check.py   two processes (one GPU each): NCCL all-reduce / all-gather over tagged
#                   tensors, NCCL_NVLS_ENABLE=0
#
# Each program runs without the shim (the reference), then under the shim in every state;
# a state passes when the program exits 0 (its own CHECK lines hold) and its stdout equals the
# reference byte for byte. Logs in $OUT (default build/gpu-multi); RESULT_FILE gets
# "<passed> <failed>". With fewer than two GPUs nothing is checked and the suite says so.
set -u
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
case "${1:-}" in -h|--help) sed -n '2,13p' "$self"; exit 0 ;; esac
cd "$(dirname "$self")/../../.."
res=${1:-build/results/test-gpu-multi}
out=${OUT:-build/gpu-multi}
mkdir -p "$out" "$(dirname "$res")"
shim=$PWD/build/libldshim.so
export LDMOE_LIB=${LDMOE_LIB:-$PWD/build/libldmoe.so}
export NCCL_NVLS_ENABLE=0
pass=0 fail=0
report() {  # report OK NAME [DETAIL]
  if [ "$1" = 1 ]; then pass=$((pass + 1)); echo "PASS $2 ${3:-}"; else fail=$((fail + 1)); echo "FAIL $2 ${3:-}"; fi
}
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$ngpu" -lt 2 ]; then
  echo "SKIP test-gpu-multi: $ngpu GPU(s) visible, needs 2 — nothing was checked"
  echo "0 0" > "$res"
  exit 0
fi
for f in "$shim" "$LDMOE_LIB"; do [ -f "$f" ] || { echo "run.sh: $f missing (make it first)" >&2; echo "0 1" > "$res"; exit 1; }; done
for prog in multi_check nccl_check; do
  timeout 240 python3 "tests/gpu/multi/$prog.py" > "$out/$prog.none.out" 2> "$out/$prog.none.err"
  rc=$?
  report $([ $rc = 0 ] && echo 1 || echo 0) "$prog without the shim" "rc=$rc"
  [ $rc = 0 ] || { tail -5 "$out/$prog.none.err"; continue; }
  for st in stock memory full mismatch; do
    LD_PRELOAD=$shim LDSHIM_POLICY=tests/gpu/multi/multi.policy LDSHIM_STATE=$st \
      timeout 240 python3 "tests/gpu/multi/$prog.py" > "$out/$prog.$st.out" 2> "$out/$prog.$st.err"
    rc=$?
    report $([ $rc = 0 ] && echo 1 || echo 0) "$prog $st: exit and checks" \
      "rc=$rc, $(grep -c '^CHECK ok' "$out/$prog.$st.err") checks ok, $(grep -c '^CHECK FAIL' "$out/$prog.$st.err") failed"
    [ $rc = 0 ] || grep -E 'CHECK FAIL|rror' "$out/$prog.$st.err" | head -5
    if cmp -s "$out/$prog.none.out" "$out/$prog.$st.out" && [ -s "$out/$prog.none.out" ]; then
      report 1 "$prog $st: results equal to the run without the shim" "$(wc -l < "$out/$prog.$st.out") digests"
    else
      report 0 "$prog $st: results equal to the run without the shim"
      diff "$out/$prog.none.out" "$out/$prog.$st.out" | head -6
    fi
  done
done
echo "$pass $fail" > "$res"
echo "test-gpu-multi: $pass passed, $fail failed"
[ "$fail" = 0 ]
