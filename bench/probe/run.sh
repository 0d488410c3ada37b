#!/bin/sh
# bench/probe/run.sh — what the topology probe costs (make probe-bench).
#
#  1. bench_probe: ld_probe_device itself, cold (empty cache, 5 runs) and cached (20 runs),
#     and the device memory held afterwards (cuMemGetInfo before/after; target 0).
#  2. ctx_time in fresh processes (7 each): first context creation without the shim, with
#     the shim and an empty cache (cold; target: < 50 ms added), with a warm cache (cached;
#     target: < 2 ms added). Medians.
# Results go to $OUT/probe-bench when OUT is set, else $BUILD/probe/bench; results.txt holds
# the summary to copy under bench/results/probe/.
set -u
case "${1:-}" in -h|--help) echo 'usage: bench/probe/run.sh   (or: make probe-bench); results under $OUT/probe-bench or $BUILD/probe/bench'; exit 0;; esac
B=${BUILD:-build}
PP=${PRELOAD_PREFIX:-}
D=${OUT:+$OUT/probe-bench}
D=${D:-$B/probe/bench}
mkdir -p "$D"
TMP=$(mktemp -d /tmp/ldshim-probe-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
S=$D/results.txt
{
    echo "# ldshim topology probe cost — $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "# GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
    echo "# commands: bench/probe/run.sh (bench_probe --runs 5; ctx_time x7 per variant)"
} > "$S"

echo "== bench_probe (clustered/auto, statically linked probe)"
timeout 120 "$B/probe/bench_probe" --runs 5 > "$D/bench_probe.txt" 2>&1
cat "$D/bench_probe.txt"
grep -E '^(context|probe|device memory)' "$D/bench_probe.txt" >> "$S"

med() { sort -n | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
ctx_runs() {   # $1 label, rest: env assignments; 7 fresh processes
    label=$1; shift
    : > "$TMP/$label"
    i=0
    while [ $i -lt 7 ]; do
        [ "$label" = shim-cold ] && rm -rf "$TMP/cache"
        env "$@" timeout 60 "$B/probe/gpu/ctx_time" >> "$TMP/$label.raw" 2>> "$D/ctx_time.err"
        i=$((i + 1))
    done
    sed -n 's/.*ctx_ms=\([0-9.]*\).*/\1/p' "$TMP/$label.raw" > "$TMP/$label"
    echo "$label: ctx_ms $(tr '\n' ' ' < "$TMP/$label")" >> "$D/ctx_time.txt"
    med < "$TMP/$label"
}
: > "$D/ctx_time.txt"
if [ -f "$B/libldshim.so" ]; then
    POL=tests/gpu/probe/probe.policy
    stock=$(ctx_runs stock LDSHIM_STATE=stock)
    cold=$(ctx_runs shim-cold LD_PRELOAD="$PP$B/libldshim.so" LDSHIM_POLICY=$POL LDSHIM_CACHE_DIR="$TMP/cache")
    env LD_PRELOAD="$PP$B/libldshim.so" LDSHIM_POLICY=$POL LDSHIM_CACHE_DIR="$TMP/cache" "$B/probe/gpu/ctx_time" > /dev/null 2>&1
    cached=$(ctx_runs shim-cached LD_PRELOAD="$PP$B/libldshim.so" LDSHIM_POLICY=$POL LDSHIM_CACHE_DIR="$TMP/cache")
    cat "$D/ctx_time.txt"
    {
        echo "first context creation, median of 7 fresh processes (ms): stock $stock, shim+empty cache $cold, shim+cache $cached"
        awk -v s="$stock" -v c="$cold" -v k="$cached" 'BEGIN {
            printf "probe adds: cold %.1f ms (target < 50), cached %.2f ms (target < 2)\n", c - s, k - s }'
    } | tee -a "$S"
else
    echo "ctx_time: $B/libldshim.so not built; skipped" | tee -a "$S"
fi
echo "== summary ($S)"
cat "$S"
