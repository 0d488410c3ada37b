#!/usr/bin/env bash
# sanitize.sh — compute-sanitizer memcheck and racecheck over the GPU suites (make
# test-gpu-sanitize; issue 24). Every CUDA process a suite starts is checked
# (--target-processes all), the shim preloaded where the suite preloads it.
#
#   bash tests/gpu/stress/sanitize.sh --results FILE [--logs DIR] [--tools "memcheck racecheck"] SUITE...
#
# One case per (tool, suite): ok when every log the tool wrote ends in a clean summary
# ("ERROR SUMMARY: 0 errors", racecheck's "RACECHECK SUMMARY: 0 hazards"); a log without a
# summary (a process the tool did not finish) or a killed or timed-out run fails. The tool
# writes one log, with one summary, for a suite's whole process tree (not one per process);
# that the children are instrumented shows in the suites themselves (the probe suite's memory
# accounting sees the tool's device memory in its child process). CUDA
# API calls that fail are not errors here (--report-api-errors no): the shim and the probe
# ask for what this GPU may lack (the locality-domain attribute, a native cuMemCreate) and take
# the failure as the answer. The suite's own exit status is printed beside the verdict but does
# not decide it: the tool allocates device memory of its own, which the suites' accounting
# checks (cuMemGetInfo before/after) see; those checks are judged in the plain runs.
# FILE gets "<passed> <failed>".
set -u
results= logs=build/sanitize tools="memcheck racecheck" suites=
while [ $# -gt 0 ]; do
  case $1 in
    --help|-h) sed -n '2,10p' "$0"; exit 0 ;;
    --results) results=$2; shift 2 ;;
    --logs) logs=$2; shift 2 ;;
    --tools) tools=$2; shift 2 ;;
    -*) echo "sanitize.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    *) suites="$suites $1"; shift ;;
  esac
done
[ -n "$results" ] && [ -n "$suites" ] || { echo "sanitize.sh: --results and at least one suite are required" >&2; exit 2; }
for t in $tools; do case $t in memcheck|racecheck|initcheck|synccheck) ;; *) echo "sanitize.sh: unknown tool '$t'" >&2; exit 2 ;; esac; done
cs=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
[ -x "$cs" ] || { echo "sanitize.sh: compute-sanitizer not found (CUDA toolkit)" >&2; exit 2; }
mkdir -p "$logs"
pass=0 fail=0
for t in $tools; do
  for s in $suites; do
    d=$logs/$t-$s
    rm -rf "$d"; mkdir -p "$d"
    "$cs" --tool "$t" --target-processes all --report-api-errors no --log-file "$d/%p.log" \
      make --no-print-directory "$s" > "$d/make.out" 2>&1
    rc=$?
    # memcheck/synccheck/initcheck end with "ERROR SUMMARY: N errors", racecheck with
    # "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)".
    sums=$(cat "$d"/*.log 2>/dev/null | grep -hE "(ERROR|RACECHECK) SUMMARY")
    errs=$(printf '%s\n' "$sums" | grep -vE "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards|^$" | head -3)
    n=$(printf '%s\n' "$sums" | grep -cE "SUMMARY")
    # A log without a summary is a process the tool did not finish checking (it crashed or
    # was killed): that is a failure, not a process to leave out of the count.
    nosum=0
    for f in "$d"/*.log; do [ -f "$f" ] && ! grep -qE "(ERROR|RACECHECK) SUMMARY" "$f" && nosum=$((nosum + 1)); done
    suite=$(grep -hE "[0-9]+ passed, [0-9]+ failed" "$d/make.out" | tail -1)
    if [ -z "$errs" ] && [ "$n" -gt 0 ] && [ $nosum -eq 0 ] && [ $rc -lt 124 ]; then
      pass=$((pass + 1)); echo "ok   $t/$s ($n clean summary line(s); suite exit $rc${suite:+: $suite})"
    else
      fail=$((fail + 1))
      echo "FAIL $t/$s: $n summaries${errs:+, $errs}$( [ $nosum -gt 0 ] && echo ", $nosum log(s) without a summary"); suite exit $rc$( [ $rc -ge 124 ] && echo " (killed or timed out)") (see $d)"
    fi
  done
done
echo "$pass $fail" > "$results"
echo "test-gpu-sanitize: $pass passed, $fail failed"
[ $fail -eq 0 ]
