#!/bin/sh
# tests/gpu/probe/run.sh RESULT_FILE — the topology probe on a real GPU (suite test-gpu-probe).
#
#   make test-gpu-probe            (builds everything, then runs this)
#
# Checks, each counted as one test in RESULT_FILE ("<passed> <failed>"):
#   clustered    ldshim-probe --mode clustered: valid, TPC-consistent, 66/66 on a 132-SM H200
#   repeat20     20 fresh processes (--force --mode clustered): the same map in >= 19
#   anchored     --mode anchored on ordinary memory: no separation, even map, ONE warning
#                (with native per-domain memory, e.g. B300 + CUDA 13.4: must validate instead)
#   cache        a cached run returns the forced run's map; a corrupted file gives one warning
#   memory       device memory held after the probe: 0 bytes (bench_probe --check)
#   no-shim      topo_check without the shim: every SM reads magic 0 (both modules)
#   publish      topo_check under LD_PRELOAD=libldshim.so: every SM reads its own entry of the
#                map ldshim_get_topology reports, through a runtime-loaded module and a
#                cuModuleLoadData-loaded fatbin
#   mismatch     LDSHIM_STATE=mismatch LDSHIM_MISMATCH=map: every SM reads the inverted entry
# Logs go to $OUT/probe-gpu when OUT is set, else $BUILD/probe/gpu-logs. Each failure prints
# what was expected and where the log is. Runs in well under 90 s on an H200.
set -u
case "${1:-}" in -h|--help) echo "usage: tests/gpu/probe/run.sh [RESULT_FILE]   (or: make test-gpu-probe); see the header of this file"; exit 0;; esac
res=${1:-}
B=${BUILD:-build}
PP=${PRELOAD_PREFIX:-}
LOG=${OUT:+$OUT/probe-gpu}
LOG=${LOG:-$B/probe/gpu-logs}
mkdir -p "$LOG"
TMP=$(mktemp -d /tmp/ldshim-gpu-probe.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
TOOL=$B/bin/ldshim-probe
pass=0; fail=0
ok()  { pass=$((pass + 1)); echo "PASS $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1: $2 (logs: $LOG)"; }
T() { timeout "$@"; }

# "physical":[0,1,...] -> 0101...
field_map() { sed -n "s/.*\"$1\":\[\([0-9,]*\)\].*/\1/p" | head -n 1 | tr -d ','; }
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" | head -n 1 | tr -d '"'; }
# TPC consistency and counts of a digit string: prints "split=<n> d0=<n> d1=<n>"
map_stats() { awk '{ s=0; a=0; b=0; n=length($0);
    for (i = 1; i <= n; i++) { c = substr($0, i, 1); if (c == "0") a++; else if (c == "1") b++; }
    for (i = 1; i + 1 <= n; i += 2) if (substr($0, i, 1) != substr($0, i + 1, 1)) s++;
    print "split=" s " d0=" a " d1=" b }'; }

echo "== GPU probe suite; logs in $LOG"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L > "$LOG/nvidia-smi.txt" 2>&1
T 60 "$TOOL" --mode clustered --force --no-cache --device 0 > "$LOG/picture.txt" 2> "$LOG/picture.err"
rc=$?
cat "$LOG/picture.txt"
if [ $rc -eq 3 ]; then
    bad setup "ldshim-probe finds no GPU or driver: $(cat "$LOG/picture.err")"
    [ -n "$res" ] && echo "$pass $((fail + 7))" > "$res"
    exit 1
fi

# --- clustered ---------------------------------------------------------------------------
mkdir -p "$LOG/dump"   # raw latency matrices of this run and the anchored one (LDSHIM_PROBE_DUMP)
LDSHIM_PROBE_DUMP="$LOG/dump" LDSHIM_LOG=info T 60 "$TOOL" --json --force --mode clustered --device 0 --cache-dir "$TMP/cache" > "$LOG/clustered.json" 2> "$LOG/clustered.err"
cat "$LOG/clustered.err"
rc=$?
J=$(cat "$LOG/clustered.json")
phys=$(echo "$J" | field_map physical)
stats=$(echo "$phys" | map_stats)
nsms=$(echo "$J" | field num_sms)
echo "clustered: rc=$rc num_sms=$nsms $stats valid=$(echo "$J" | field valid) verdict: $(echo "$J" | field verdict)"
if [ $rc -ne 0 ] || ! echo "$J" | grep -q '"valid":true'; then
    bad clustered "not validated: $(echo "$J" | sed -n 's/.*"verdict":"\([^"]*\)".*/\1/p') $(cat "$LOG/clustered.err")"
elif ! echo "$stats" | grep -q '^split=0 '; then
    bad clustered "TPCs split between domains ($stats)"
elif [ "$nsms" = 132 ] && ! echo "$stats" | awk '{ split($2, a, "="); split($3, b, "=");
        exit !(a[2] + b[2] == 132 && a[2] >= 60 && a[2] <= 72 && b[2] >= 60 && b[2] <= 72) }'; then
    # A full GH100 has 72 SMs per L2 half; a 132-SM part disables 12 of the 144, not always six
    # per half (66/66 on most lent H200s, 64/68 on one), so each half holds 60..72 SMs.
    bad clustered "expected two domains of 60..72 SMs each on a 132-SM H200, got $stats"
elif echo "$stats" | grep -q 'd0=0 \|d1=0$'; then
    bad clustered "one domain is empty ($stats)"
else ok "clustered ($stats)"; fi

# --- repeat20 ----------------------------------------------------------------------------
: > "$LOG/repeat.maps"
i=0
while [ $i -lt 20 ]; do
    T 30 "$TOOL" --json --force --no-cache --mode clustered --device 0 > "$TMP/r.json" 2>> "$LOG/repeat.err"
    m=$(field_map physical < "$TMP/r.json")
    v=$(field valid < "$TMP/r.json")
    e=$(field elapsed_ms < "$TMP/r.json")
    echo "${m:-none} valid=$v elapsed_ms=$e" >> "$LOG/repeat.maps"
    i=$((i + 1))
done
best=$(cut -d' ' -f1 "$LOG/repeat.maps" | grep -v '^none$' | sort | uniq -c | sort -rn | head -n 1)
same=$(echo "$best" | awk '{print $1+0}')
ref=$(echo "$best" | awk '{print $2}')
valid20=$(grep -c 'valid=true' "$LOG/repeat.maps")
echo "repeat20: most common map in $same/20 runs, $valid20/20 valid; same as first clustered run: $([ "$ref" = "$phys" ] && echo yes || echo no)"
awk '{print $3}' "$LOG/repeat.maps" | tr '\n' ' '; echo
if [ "${same:-0}" -ge 19 ] && [ "$valid20" -ge 19 ]; then ok "repeat20 ($same/20 identical)"
else bad repeat20 "only ${same:-0}/20 identical maps, $valid20/20 valid (see repeat.maps)"; fi

# --- anchored on ordinary memory ---------------------------------------------------------
LDSHIM_PROBE_DUMP="$LOG/dump" T 60 "$TOOL" --json --force --no-cache --mode anchored --device 0 > "$LOG/anchored.json" 2> "$LOG/anchored.err"
J=$(cat "$LOG/anchored.json")
warns=$(grep -c 'even map' "$LOG/anchored.err")
mem=$(echo "$J" | field memory)
echo "anchored: memory=$mem valid=$(echo "$J" | field valid) source=$(echo "$J" | field source) attempts=$(echo "$J" | field attempts) near=$(echo "$J" | field near_cycles) far=$(echo "$J" | field far_cycles) warnings=$warns"
cat "$LOG/anchored.err"
if [ "$mem" = native ]; then
    if echo "$J" | grep -q '"valid":true'; then ok "anchored (native per-domain memory: validated)"
    else bad anchored "native per-domain memory did not validate"; fi
elif echo "$J" | grep -q '"valid":false' && echo "$J" | grep -q '"source":"even"' && [ "$warns" -eq 1 ]; then
    ok "anchored (no separation on interleaved memory, even map, one warning)"
else bad anchored "expected valid=false, source even and exactly one warning; got $(echo "$J" | field valid)/$(echo "$J" | field source)/$warns warnings"; fi

# --- cache -------------------------------------------------------------------------------
T 60 "$TOOL" --json --mode clustered --device 0 --cache-dir "$TMP/cache" > "$LOG/cached.json" 2> "$LOG/cached.err"
J=$(cat "$LOG/cached.json")
cm=$(echo "$J" | field_map physical)
f=$(ls "$TMP"/cache/topology-*.txt 2>/dev/null | head -n 1)
cp "$f" "$LOG/cache-file.txt" 2>/dev/null
cok=0
if echo "$J" | grep -q '"from_cache":true' && [ "$cm" = "$phys" ] && [ -n "$f" ]; then cok=1; fi
echo "cache: from_cache=$(echo "$J" | field from_cache) elapsed_ms=$(echo "$J" | field elapsed_ms) file=$f"
if [ -n "$f" ]; then
    printf 'garbage' | dd of="$f" bs=1 seek=40 conv=notrunc 2>/dev/null
    T 60 "$TOOL" --json --mode clustered --device 0 --cache-dir "$TMP/cache" > "$LOG/recached.json" 2> "$LOG/recached.err"
    w=$(grep -c 'ignoring topology cache' "$LOG/recached.err")
    cat "$LOG/recached.err"
    if [ "$w" -ne 1 ] || ! grep -q '"valid":true' "$LOG/recached.json" || grep -q '"from_cache":true' "$LOG/recached.json"; then cok=0; fi
fi
if [ $cok -eq 1 ]; then ok cache; else bad cache "cached run did not return the forced map, or corruption was not reported once"; fi

# --- memory held -------------------------------------------------------------------------
T 60 "$B/probe/bench_probe" --check --runs 3 > "$LOG/memory.txt" 2>&1
rc=$?
cat "$LOG/memory.txt"
if [ $rc -eq 0 ]; then ok "memory (nothing held after the probe)"; else bad memory "bench_probe --check failed (rc $rc)"; fi

# --- publication -------------------------------------------------------------------------
CHK=$B/probe/gpu/topo_check
FB=$B/probe/gpu/topo_module.fatbin
T 60 "$CHK" --expect-none --fatbin "$FB" > "$LOG/noshim.txt" 2>&1
if grep -q '^RESULT ok' "$LOG/noshim.txt"; then ok "no-shim (magic 0 everywhere)"; else cat "$LOG/noshim.txt"; bad no-shim "see noshim.txt"; fi
if [ ! -f "$B/libldshim.so" ]; then
    bad publish "$B/libldshim.so not built"; bad mismatch "$B/libldshim.so not built"
else
    export LDSHIM_POLICY=tests/gpu/probe/probe.policy LDSHIM_CACHE_DIR="$TMP/shimcache"
    LD_PRELOAD="$PP$B/libldshim.so" LDSHIM_LOG=info T 60 "$CHK" --expect-shim --fatbin "$FB" > "$LOG/publish.txt" 2> "$LOG/publish.err"
    cat "$LOG/publish.txt"
    if grep -q '^RESULT ok' "$LOG/publish.txt" && grep -q '^driver-module:' "$LOG/publish.txt"; then ok "publish (runtime and driver modules)"
    else tail -n 20 "$LOG/publish.err"; bad publish "see publish.txt / publish.err"; fi
    LD_PRELOAD="$PP$B/libldshim.so" LDSHIM_STATE=mismatch LDSHIM_MISMATCH=map T 60 "$CHK" --expect-shim --fatbin "$FB" > "$LOG/mismatch.txt" 2> "$LOG/mismatch.err"
    full=$(sed -n 's/^map runtime-module //p' "$LOG/publish.txt")
    inv=$(sed -n 's/^map runtime-module //p' "$LOG/mismatch.txt" | tr '01' '10')
    if grep -q '^RESULT ok' "$LOG/mismatch.txt" && [ -n "$full" ] && [ "$full" = "$inv" ]; then ok "mismatch (inverted map)"
    else cat "$LOG/mismatch.txt"; bad mismatch "device map in state mismatch is not the inverse of state full"; fi
    unset LDSHIM_POLICY LDSHIM_CACHE_DIR
fi

echo "== GPU probe suite: $pass passed, $fail failed"
[ -n "$res" ] && echo "$pass $fail" > "$res"
[ $fail -eq 0 ]
