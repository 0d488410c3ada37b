#!/bin/sh
# gpu_probe_dump.sh OUTDIR — issue 41's High 2 and 3 with the real probe on a GPU: a link
# planted at a LDSHIM_PROBE_DUMP name (pointing at a private 0600 file) and a FIFO there,
# for `ldshim-probe --force --no-cache` and for a CUDA program under the shim in a placing
# state (tests/gpu/probe/topo_check, state full, probe forced). Each case must finish within
# its timeout, leave the victim byte-identical and the planted object in place, say one
# warning, and still probe (the positive control writes a real dump). Needs build/bin/
# ldshim-probe, build/libldshim.so, build/probe/gpu/topo_check and topo_module.fatbin.
set -u
out=${1:?usage: gpu_probe_dump.sh OUTDIR}
B=${BUILD:-build}
mkdir -p "$out"
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1: $2"; }
T=$(mktemp -d /tmp/ldshim-gpudump.XXXXXX)
victim=$T/victim
printf 'private file: must stay byte-identical\n' > "$victim"; chmod 600 "$victim"
want=$(sha256sum < "$victim")
D=$T/dump; mkdir -m 700 "$D"
name=$D/clustered-dev0-attempt1.csv

check() {   # case-name log rc kind(link|fifo)
    c=$1; log=$2; rc=$3; kind=$4
    if [ "$rc" = 124 ]; then bad "$c" "did not finish within its timeout"; return; fi
    [ "$(sha256sum < "$victim")" = "$want" ] || { bad "$c" "the victim changed"; return; }
    if [ "$kind" = link ]; then [ -L "$name" ] || { bad "$c" "the planted link is gone"; return; }
    else [ -p "$name" ] || { bad "$c" "the planted FIFO is gone"; return; }; fi
    n=$(grep -c '^ldshim: .*LDSHIM_PROBE_DUMP' "$log")
    [ "$n" = 1 ] || { bad "$c" "$n LDSHIM_PROBE_DUMP lines, expected 1"; return; }
    ok "$c (rc $rc; $(grep '^ldshim: .*LDSHIM_PROBE_DUMP' "$log" | head -1))"
}

for kind in link fifo; do
    rm -f "$name"
    if [ $kind = link ]; then ln -s "$victim" "$name"; else mkfifo "$name"; fi
    log=$out/probe-$kind.log
    echo "\$ LDSHIM_PROBE_DUMP=$D timeout 180 $B/bin/ldshim-probe --force --no-cache --mode clustered" > "$log"
    LDSHIM_PROBE_DUMP=$D timeout 180 "$B/bin/ldshim-probe" --force --no-cache --mode clustered >> "$log" 2>&1
    check "ldshim-probe, $kind at the dump name" "$log" $? $kind
    log=$out/program-$kind.log
    echo "\$ LD_PRELOAD=$B/libldshim.so LDSHIM_POLICY=tests/gpu/probe/probe.policy LDSHIM_PROBE_FORCE=1 LDSHIM_CACHE_DIR=$T/cache LDSHIM_PROBE_DUMP=$D timeout 180 $B/probe/gpu/topo_check --expect-shim --fatbin $B/probe/gpu/topo_module.fatbin" > "$log"
    LD_PRELOAD=$PWD/$B/libldshim.so LDSHIM_POLICY=tests/gpu/probe/probe.policy LDSHIM_PROBE_FORCE=1 \
      LDSHIM_CACHE_DIR=$T/cache LDSHIM_PROBE_DUMP=$D timeout 180 "$B/probe/gpu/topo_check" --expect-shim \
      --fatbin "$B/probe/gpu/topo_module.fatbin" >> "$log" 2>&1
    rc=$?
    check "CUDA program under the shim (state full), $kind at the dump name" "$log" $rc $kind
    grep -q '^RESULT ok' "$log" && ok "  ... and the program's result is unharmed (RESULT ok)" || bad "program result" "no RESULT ok in $log"
done
# Positive control: an empty dump directory gets the real matrix, one row per SM.
rm -f "$name"
log=$out/probe-control.log
LDSHIM_PROBE_DUMP=$D timeout 180 "$B/bin/ldshim-probe" --force --no-cache --mode clustered > "$log" 2>&1
if [ -f "$name" ] && [ ! -L "$name" ]; then ok "control: dump written ($(wc -l < "$name") rows, mode $(stat -c %a "$name"))"
else bad control "no dump at $name"; fi
echo "== GPU probe-dump cases: $pass passed, $fail failed"
echo "$pass $fail" > "$out/result"
rm -rf "$T"
[ $fail -eq 0 ]
