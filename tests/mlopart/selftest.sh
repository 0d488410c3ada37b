#!/bin/sh
# selftest.sh BUILD RESULT — CPU checks of the MLOPart GPU suite and bench (test-mlopart-selftest):
# the GPU program and scripts answer --help and reject bad arguments; the bench runs end to
# end on the fake driver and fake MPS control and leaves nothing behind. Writes "<p> <f>".
set -u
build=$1; result=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
pass=0; fail=0
check() { name=$1; shift; if "$@" >/dev/null 2>&1; then pass=$((pass + 1)); echo "ok   $name"; else fail=$((fail + 1)); echo "FAIL $name"; fi; }
not() { ! "$@"; }

check "mlopart_gpu --help" "$build/mlopart/mlopart_gpu" --help
check "mlopart_gpu rejects a bad mode" not "$build/mlopart/mlopart_gpu" bogus
check "gpu run.sh --help" bash "$root/tests/gpu/mlopart/run.sh" --help
check "bench --help" "$build/mlopart/mlopart_bench" --help
check "bench rejects odd sizes" not "$build/mlopart/mlopart_bench" --sizes 3
check "bench run.sh --help" sh "$root/bench/mlopart/run.sh" --help

tmp=$(mktemp -d /tmp/ldmlo-self-XXXXXX)
mkdir -p "$tmp/out" "$tmp/t"
TMPDIR=$tmp/t LD_LIBRARY_PATH=$build/fake LDSHIM_MPS_CONTROL=$root/tests/mlopart/fake-mps-control \
  FAKE_MPS_DEVICES=1 OUT=$tmp/out sh "$root/bench/mlopart/run.sh" --bin "$build/mlopart/mlopart_bench" \
  --helper "$build/ldshim-mlopart-helper" -- --sizes 2,4 --reps 5 > "$tmp/bench.txt" 2>&1
rc=$?
check "bench on the fake driver exits 0" test $rc -eq 0
check "bench csv has 11 rows" test "$(wc -l < "$tmp/out/mlopart_bench.csv" 2>/dev/null || echo 0)" -eq 12
sleep 0.5
check "bench leaves no private directory" test -z "$(ls -A "$tmp/t")"
[ $rc -eq 0 ] || cat "$tmp/bench.txt" "$tmp/out/mlopart_bench.err" 2>/dev/null
rm -rf "$tmp"
echo "$pass $fail" > "$result"
[ $fail -eq 0 ]
