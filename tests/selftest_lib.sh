# selftest_lib.sh — the harness of the CPU self-tests of GPU suites and benchmarks
# (tests/gpu/shim/selftest.sh, bench/alloc/selftest.sh), sourced by them (POSIX sh).
#
#   selftest_begin NAME      temporary directory $tmp (removed at exit), counters at 0
#   expect NAME STATUS PATTERN CMD...
#                            CMD exits STATUS and its output matches PATTERN (grep
#                            $SELFTEST_GREP, -E unless the script sets it; an empty PATTERN
#                            matches anything)
#   selftest_stub_libcuda    libcuda.so.1 is the toolkit's stub (it fails cuInit) for what
#                            runs from here on, so GPU programs start and fail cleanly
#   selftest_empty_lib FILE  an empty shared library at FILE (a stand-in for libldshim.so)
#   selftest_end SUITE RESULT_FILE
#                            prints "SUITE: P passed, F failed", writes "P F" to RESULT_FILE,
#                            returns non-zero when a check failed
#
# Uses $PYTHON (python3), $CUDA_HOME (/usr/local/cuda), $CC (cc), $TMPDIR (/tmp).
PY=${PYTHON:-python3}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
SELFTEST_GREP=${SELFTEST_GREP:--E}

selftest_begin() {
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/ldshim-$1-selftest.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  p=0; f=0
}
pass() { p=$((p + 1)); echo "ok   $1"; }
flunk() { f=$((f + 1)); echo "FAIL $1: $2"; }

expect() {
  name=$1; want=$2; pat=$3; shift 3
  "$@" >"$tmp/o" 2>&1
  got=$?
  if [ "$got" -ne "$want" ]; then flunk "$name" "exit $got, expected $want: $(head -c 300 "$tmp/o" | tr '\n' '|')"
  elif [ -n "$pat" ] && ! grep $SELFTEST_GREP -q -- "$pat" "$tmp/o"; then
    flunk "$name" "output lacks /$pat/: $(head -c 400 "$tmp/o" | tr '\n' '|')"
  else pass "$name"; fi
}

selftest_stub_libcuda() {
  mkdir -p "$tmp/lib"
  ln -sf "$CUDA_HOME/lib64/stubs/libcuda.so" "$tmp/lib/libcuda.so.1"
  LD_LIBRARY_PATH="$tmp/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LD_LIBRARY_PATH
}

selftest_empty_lib() {
  echo 'int ldshim_selftest_empty;' >"$tmp/empty.c"
  ${CC:-cc} -shared -fPIC -o "$1" "$tmp/empty.c"
}

selftest_end() {
  echo "$1: $p passed, $f failed"
  echo "$p $f" >"$2"
  [ "$f" -eq 0 ]
}
