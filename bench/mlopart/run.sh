#!/bin/sh
# run.sh — MLOPart helper per-request cost on the GPU (make bench-mlopart). < 60 s on an H200 (killed after 100 s).
# Writes the table to stdout and, when OUT is set, $OUT/mlopart_bench.{txt,csv} plus the
# stderr log; copy the txt to bench/results/mlopart/<date>-<gpu>/ to record it.
set -u
bin=build/mlopart/mlopart_bench
helper=build/ldshim-mlopart-helper
args=""
while [ $# -gt 0 ]; do
  case $1 in
    --help|-h) echo "usage: bench/mlopart/run.sh [--bin PROGRAM] [--helper PATH] [-- BENCH-ARGS...]"
               echo "  runs mlopart_bench (see its --help) with the helper in test-single mode"; exit 0 ;;
    --bin) bin=$2; shift 2 ;;
    --helper) helper=$2; shift 2 ;;
    --) shift; args="$*"; break ;;
    *) echo "run.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] && [ -x "$helper" ] || { echo "run.sh: build first (make bench-mlopart)" >&2; exit 1; }
err=${OUT:+$OUT/mlopart_bench.err}
err=${err:-/dev/stderr}
# shellcheck disable=SC2086
LDSHIM_MLOPART_HELPER=$helper LDSHIM_LOG=info timeout -k 5 100 "$bin" $args 2> "$err"
rc=$?
[ $rc -eq 0 ] || { echo "mlopart_bench failed (exit $rc)"; [ "$err" != /dev/stderr ] && cat "$err"; }
exit $rc
