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
check "preload_check --help" "$build/mlopart/preload_check" --help
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

# The real preload library, policy `backend = mlopart`, helper found beside it by dladdr:
# slices come back homed in domains 0 and 1 (fake MLOPart), and nothing is left at exit.
mkdir -p "$tmp/t2"
tag="LDMLO_SELFTEST_TAG=$$"
env "$tag" TMPDIR="$tmp/t2" LD_LIBRARY_PATH="$build/fake" LD_PRELOAD="${PRELOAD_PREFIX:-}$build/libldshim.so" \
  LDSHIM_POLICY="$root/tests/mlopart/mlopart.policy" LDSHIM_LOG=info \
  LDSHIM_MPS_CONTROL="$root/tests/mlopart/fake-mps-control" \
  "$build/fake/t_driver" range 32MiB > "$tmp/shim.out" 2> "$tmp/shim.err"
rc=$?
check "t_driver under libldshim.so with backend = mlopart exits 0" test $rc -eq 0
check "slices from the mlopart backend" grep -qx 'r_backend=mlopart' "$tmp/shim.out"
check "slices homed in domains 0,1" grep -qx 'r_domains=0,1' "$tmp/shim.out"
check "helper started once, beside the library" test "$(grep -c 'mlopart: GPU-.*ready' "$tmp/shim.err")" -eq 1
left=1
for i in 1 2 3 4 5 6 7 8 9 10; do
  n=0
  for p in /proc/[0-9]*; do tr '\0' '\n' 2>/dev/null < "$p/environ" | grep -qx "$tag" && n=$((n + 1)); done
  if [ $n -eq 0 ] && [ -z "$(ls -A "$tmp/t2")" ]; then left=0; break; fi
  sleep 0.2
done
check "nothing left after the program exits" test $left -eq 0
[ $rc -eq 0 ] || cat "$tmp/shim.out" "$tmp/shim.err"
# A renamed copy of the shim (LD_PRELOAD names it by another file name) must not run inside
# the helper: found by dladdr identity and dropped from the helper's LD_PRELOAD, and inert
# there anyway through the environment marker. Before, every helper ran the shim, which
# started a helper of its own, without end.
mkdir -p "$tmp/t3" "$tmp/copy"
cp "$build/libldshim.so" "$tmp/copy/libsomething-else.so"
tag3="LDMLO_SELFTEST_TAG3=$$"
env "$tag3" TMPDIR="$tmp/t3" LD_LIBRARY_PATH="$build/fake" LD_PRELOAD="${PRELOAD_PREFIX:-}$tmp/copy/libsomething-else.so" \
  LDSHIM_POLICY="$root/tests/mlopart/mlopart.policy" LDSHIM_LOG=info LDSHIM_MLOPART_HELPER="$build/ldshim-mlopart-helper" \
  LDSHIM_MPS_CONTROL="$root/tests/mlopart/fake-mps-control" \
  timeout 60 "$build/fake/t_driver" range 32MiB > "$tmp/copy.out" 2> "$tmp/copy.err"
rc=$?
check "renamed copy of the shim: t_driver exits 0" test $rc -eq 0
check "renamed copy: slices from the mlopart backend" grep -qx 'r_backend=mlopart' "$tmp/copy.out"
check "renamed copy: exactly one helper started" test "$(grep -c 'mlopart: GPU-.*ready' "$tmp/copy.err")" -eq 1
check "renamed copy: no shim ran inside the helper" test "$(grep -c 'ldshim: info: config: state ' "$tmp/copy.err")" -eq 1
left=1
for i in 1 2 3 4 5 6 7 8 9 10; do
  n=0
  for p in /proc/[0-9]*; do tr '\0' '\n' 2>/dev/null < "$p/environ" | grep -qx "$tag3" && n=$((n + 1)); done
  if [ $n -eq 0 ] && [ -z "$(ls -A "$tmp/t3")" ]; then left=0; break; fi
  sleep 0.2
done
check "renamed copy: nothing left after the program exits" test $left -eq 0
[ $rc -eq 0 ] || cat "$tmp/copy.out" "$tmp/copy.err"
rm -rf "$tmp"
echo "$pass $fail" > "$result"
[ $fail -eq 0 ]
