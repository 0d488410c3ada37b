#!/bin/sh
# selftest.sh BIN FAKEDIR RESULT — CPU checks of the GPU stress suite (test-gpu-stress-selftest):
# the real-driver build of t_stress answers --help and refuses bad arguments (run against the
# fake driver only for that), and both scripts answer --help and refuse bad arguments.
set -u
bin=$1; fake=$2; result=$3
here=$(cd "$(dirname "$0")" && pwd)
pass=0; fail=0
check() { name=$1; shift; if "$@" >/dev/null 2>&1; then pass=$((pass + 1)); echo "ok   $name"; else fail=$((fail + 1)); echo "FAIL $name"; fi; }
not() { ! "$@"; }
check "t_stress_gpu --help" env LD_LIBRARY_PATH="$fake" "$bin" --help
check "t_stress_gpu refuses a bad case" not env LD_LIBRARY_PATH="$fake" "$bin" bogus
check "t_stress_gpu links the driver, not the fake" sh -c "readelf -d '$bin' | grep -q 'NEEDED.*libcuda.so.1'"
check "t_stress_gpu embeds its PTX kernel" grep -q "ld_stress_touch" "$bin"
check "run.sh --help" bash "$here/run.sh" --help
check "run.sh refuses a bad argument" not bash "$here/run.sh" --bogus
check "run.sh needs --bin" not bash "$here/run.sh" --lib x --results /dev/null
check "sanitize.sh --help" bash "$here/sanitize.sh" --help
check "sanitize.sh refuses a bad tool" not bash "$here/sanitize.sh" --results /dev/null --tools nope test-gpu-shim
check "sanitize.sh needs a suite" not bash "$here/sanitize.sh" --results /dev/null
echo "$pass $fail" > "$result"
[ $fail -eq 0 ]
