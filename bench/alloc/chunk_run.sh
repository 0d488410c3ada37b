#!/usr/bin/env bash
# chunk_run.sh LIB BIN [REPS] [ITERS] — chunk_cycle (bench/alloc/chunk_cycle.c) under LIB with
# bench/alloc/chunk.policy on whatever libcuda.so.1 is found: one handle per slice
# (LDSHIM_CHUNK=slice) against 32 MiB handles, REPS (3) alternating process pairs of ITERS (20)
# cycles per size. Prints chunk_cycle's rows with the rep appended. Extra environment (e.g.
# LD_LIBRARY_PATH to the fake driver, LDSHIM_BACKEND=native) passes through.
set -eu
lib=$1; bin=$2; reps=${3:-3}; iters=${4:-20}
here=$(cd "$(dirname "$0")" && pwd)
for r in $(seq 1 "$reps"); do
  for c in slice 32MiB; do
    LD_PRELOAD="${LDSHIM_PRELOAD_PREFIX:-}$lib" LDSHIM_POLICY="$here/chunk.policy" LDSHIM_CHUNK=$c \
      "$bin" "$iters" | sed "s/\$/\trep=$r/"
  done
done
