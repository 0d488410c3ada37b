#!/bin/sh
# onfake.sh BENCH SHIMLIB FAKEDIR RESULT — CPU suite test-bench-alloc-onfake.
#
# bench_alloc against the fake driver and runtime of tests/fake under the real libldshim: every
# mode that needs no GPU properties runs and its rows are valid with the benchmark's policies,
# and each validity check fires (INVALID rows, exit 1) when the policy does not fit the mode.
# Timings here mean nothing. Writes "<passed> <failed>" to RESULT; exit 1 when a case failed.
bench=$1; lib=$2; fake=$3; result=$4
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ldshim-bench-onfake.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
p=0; f=0
LD_LIBRARY_PATH="$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
LDSHIM_LIBCUDA=$fake/libcuda.so.1
export LD_LIBRARY_PATH LDSHIM_LIBCUDA
unset LDSHIM_STATE LDSHIM_BACKEND LDSHIM_MISMATCH LDSHIM_STRICT LD_PRELOAD

# case NAME STATUS ROWS PATTERN POLICY|- ARGS...: exit STATUS, ROWS "row" lines, PATTERN in output.
case_() {
  name=$1; want=$2; rows=$3; pat=$4; pol=$5; shift 5
  if [ "$pol" = - ]; then "$bench" "$@" >"$tmp/o" 2>"$tmp/e"
  else env LD_PRELOAD="${LDSHIM_PRELOAD_PREFIX:-}$lib" LDSHIM_POLICY="$here/$pol" "$bench" "$@" >"$tmp/o" 2>"$tmp/e"; fi
  got=$?
  n=$(grep -c '^row' "$tmp/o")
  why=""
  if [ "$got" -ne "$want" ]; then why="exit $got, expected $want: $(grep -v 'version information' "$tmp/e" | tail -2 | tr '\n' '|')"
  elif [ "$n" -ne "$rows" ]; then why="$n rows, expected $rows"
  elif [ -n "$pat" ] && ! grep -Eq -- "$pat" "$tmp/o"; then why="rows lack /$pat/: $(head -3 "$tmp/o" | tr '\n' '|')"
  fi
  if [ -z "$why" ]; then p=$((p + 1)); echo "ok   $name"; else f=$((f + 1)); echo "FAIL $name: $why"; fi
}

S=2M,32M,64M,512M,1G
case_ vmm 0 10 "2handles	1073741824	30	.*handle=536870912" - --mode vmm --iters 30 --sizes $S
case_ malloc 0 5 "malloc	cycle	1073741824	30" - --mode malloc --iters 30 --sizes $S
case_ untagged-stock 0 3 "untagged	cycle	67108864	50" - --mode untagged --iters 50
case_ untagged-shim 0 3 "untagged	cycle	67108864	50	.*	-$" untagged.policy --mode untagged --iters 50
case_ tagged-cold 0 5 "tagged	cycle	1073741824	30	.*	slices=2$" cold.policy --mode tagged --iters 30 --sizes $S
case_ pool 0 15 "pool	malloc	1073741824	30	.*	hits=" pool.policy --mode pool --iters 30 --sizes $S
case_ neg/tagged-untagged 1 1 "INVALID:not-tagged" untagged.policy --mode tagged --iters 30 --sizes 2M
case_ neg/pool-off 1 3 "INVALID:pool-misses" cold.policy --mode pool --iters 30 --sizes 2M
case_ neg/untagged-tagged 1 3 "67108864	50	.*INVALID:tagged" cold.policy --mode untagged --iters 50
case_ neg/pool-no-shim 2 0 "" - --mode pool --iters 30
grep -q "needs libldshim.so preloaded" "$tmp/e" || { f=$((f + 1)); echo "FAIL neg/pool-no-shim: no message"; }

# chunk_cycle (bench/alloc/chunk_run.sh) on the fake's simulated cost: 1 GiB in 32 MiB handles
# (32 of them) is cheaper than one handle, and the one-handle cycle is the study's (within 5%).
cbin=$(dirname "$bench")/chunk_cycle
if FAKE_CUDA_DOMAINS=2 LDSHIM_BACKEND=native LDSHIM_PRELOAD_PREFIX="${LDSHIM_PRELOAD_PREFIX:-}" \
     bash "$here/chunk_run.sh" "$lib" "$cbin" 1 3 >"$tmp/c" 2>"$tmp/e" &&
   awk -F'\t' '$1 == "row" && $4 == 1073741824 { s[$3] = $7; h[$3] = $8 }
                END { exit !(h["32MiB"] == 32 && s["32MiB"] < 0.5 * s["slice"] &&
                             s["slice"] > 0.95 * 11543.4 && s["slice"] < 1.05 * 11543.4) }' "$tmp/c"; then
  p=$((p + 1)); echo "ok   chunk-cycle-simulated"
else
  f=$((f + 1)); echo "FAIL chunk-cycle-simulated: $(grep 1073741824 "$tmp/c" | tr '\n' '|') $(tail -2 "$tmp/e" | tr '\n' '|')"
fi

echo "test-bench-alloc-onfake: $p passed, $f failed"
echo "$p $f" >"$result"
[ "$f" -eq 0 ]
