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

# sanitize.sh's verdict against a stand-in compute-sanitizer that writes the logs a scenario
# names (the "suite" argument) instead of running make: the tools' summaries decide, a log
# without a summary or a killed run fails, the suite's own exit does not.
tmp=$(mktemp -d)
mkdir -p "$tmp/bin"
cat > "$tmp/bin/compute-sanitizer" <<'FAKE'
#!/bin/sh
tool= log=
while [ $# -gt 0 ]; do
  case $1 in --tool) tool=$2; shift 2 ;; --log-file) log=$2; shift 2 ;; --*) shift ;; make) shift; break ;; *) shift ;; esac
done
suite=$2
f=$(echo "$log" | sed "s/%p/$$/")
if [ "$tool" = racecheck ]; then ok="========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"; bad="========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)"
else ok="========= ERROR SUMMARY: 0 errors"; bad="========= ERROR SUMMARY: 3 errors"; fi
case $suite in
  clean) echo "$ok" > "$f"; echo "x: 7 passed, 1 failed"; exit 2 ;;
  errors) echo "$bad" > "$f"; exit 0 ;;
  nosummary) echo "$ok" > "$f"; echo "========= COMPUTE-SANITIZER" > "$(dirname "$f")/999999.log"; exit 0 ;;
  killed) echo "$ok" > "$f"; exit 137 ;;
  nolog) exit 0 ;;
esac
FAKE
chmod +x "$tmp/bin/compute-sanitizer"
san() { PATH="$tmp/bin:$PATH" bash "$here/sanitize.sh" --results "$tmp/r" --logs "$tmp/logs" --tools "$1" "$2"; }
for t in memcheck racecheck; do
  check "sanitize.sh $t: clean summaries pass whatever the suite's exit" san $t clean
  check "sanitize.sh $t: errors in a summary fail" not san $t errors
  check "sanitize.sh $t: a log without a summary fails" not san $t nosummary
  check "sanitize.sh $t: a killed run fails" not san $t killed
  check "sanitize.sh $t: no log at all fails" not san $t nolog
done
rm -rf "$tmp"
echo "$pass $fail" > "$result"
[ $fail -eq 0 ]
