#!/bin/sh
# selftest.sh BIN_DIR RESULT_FILE — CPU self-test of the GPU suite's own tools (no GPU needed).
#
# - check_report.py accepts a well-formed report and rejects each kind of violation the GPU
#   suite relies on (exit 1), a missing or malformed file (exit 2);
# - run.sh parses and prints --help;
# - the GPU programs start, print --help, reject bad arguments, and fail cleanly (exit 2, one
#   message) when no GPU is usable: they are run against the CUDA stub libcuda.
# Writes "<passed> <failed>" to RESULT_FILE; exit 1 when a check failed.
bin=$1; result=$2
here=$(cd "$(dirname "$0")" && pwd)
SELFTEST_GREP=-G    # the patterns below are basic regular expressions: | and ( ) are literal
. "$here/../../selftest_lib.sh"    # expect, pass, flunk, ...
selftest_begin gpu

cat >"$tmp/good.json" <<'EOF'
{"state": "memory", "backend": "emulated",
 "rules": [
  {"name": "t64", "matched": 1, "allocations": 1, "bytes": 67108864,
   "bytes_per_domain": [33554432, 33554432], "fallbacks": 0},
  {"name": "drv40", "matched": 1, "allocations": 1, "bytes": 41943040,
   "bytes_per_domain": [20971520, 20971520], "fallbacks": 0}],
 "pool": {"hits": 0, "misses": 2, "trims": 0, "cached_bytes": 0, "cap": 0},
 "fallbacks": [{"reason": "backend create failed", "count": 0}],
 "untagged": {"allocations": 3, "histogram": [{"size": 50331655, "api": "runtime", "count": 1}]},
 "live": {"ranges": 0, "bytes": 0}}
EOF
# mutate NAME PYTHON-STATEMENT: good.json with `d` changed, written to $tmp/NAME.json
mutate() {
  "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); exec(sys.argv[2]); json.dump(d, open(sys.argv[3], "w"))' \
    "$tmp/good.json" "$2" "$tmp/$1.json"
}
CR="$PY $here/check_report.py"
ALL="--state memory --backend emulated --rule t64=1 --rule drv40>=1 --no-fallbacks --live-zero --pool-hits-max 0 --untagged-size 50331655"

expect report-good 0 "report ok" $CR "$tmp/good.json" $ALL
mutate state 'd["state"] = "stock"';                          expect report-state 1 "state is 'stock'" $CR "$tmp/state.json" $ALL
mutate backend 'd["backend"] = "off"';                        expect report-backend 1 "backend is 'off'" $CR "$tmp/backend.json" $ALL
mutate norule 'd["rules"] = d["rules"][1:]';                  expect report-rule-missing 1 "rule 't64' missing" $CR "$tmp/norule.json" $ALL
mutate count 'd["rules"][0]["allocations"] = 0';              expect report-rule-count 1 "rule t64: allocations 0" $CR "$tmp/count.json" $ALL
mutate atleast 'd["rules"][1]["allocations"] = 0';            expect report-rule-atleast 1 "rule drv40: allocations 0, expected >=1" $CR "$tmp/atleast.json" $ALL
mutate onedom 'd["rules"][0]["bytes_per_domain"] = [67108864, 0]'; expect report-split 1 "bytes_per_domain" $CR "$tmp/onedom.json" $ALL
mutate rulefb 'd["rules"][0]["fallbacks"] = 2';               expect report-rule-fallback 1 "rule t64: 2 fallbacks" $CR "$tmp/rulefb.json" $ALL
mutate fb 'd["fallbacks"][0]["count"] = 1';                   expect report-fallback 1 "counted 1" $CR "$tmp/fb.json" $ALL
mutate live 'd["live"] = {"ranges": 1, "bytes": 67108864}';  expect report-live 1 "live ranges 1" $CR "$tmp/live.json" $ALL
mutate nolive 'del d["live"]';                                expect report-live-missing 1 "live is None" $CR "$tmp/nolive.json" $ALL
mutate hits 'd["pool"]["hits"] = 3';                          expect report-pool-hits 1 "pool hits 3" $CR "$tmp/hits.json" $ALL
mutate hist 'd["untagged"]["histogram"] = []';                expect report-histogram 1 "no entry of size 50331655" $CR "$tmp/hist.json" $ALL
expect report-stock-tagged 1 "expected 0 (nothing tagged)" $CR "$tmp/good.json" --nothing-tagged
expect report-pool-min 1 "expected >= 198" $CR "$tmp/good.json" --pool-hits-min 198
expect report-pool-cap 1 "pool cap 0, expected 2147483648" $CR "$tmp/good.json" --pool-cap 2147483648
expect report-missing 2 "cannot read" $CR "$tmp/absent.json"
printf '{"state": ' >"$tmp/trunc.json"
expect report-bad-json 2 "not valid JSON" $CR "$tmp/trunc.json"
echo '[1, 2]' >"$tmp/list.json"
expect report-not-object 2 "expected an object" $CR "$tmp/list.json"
expect report-bad-spec 2 "NAME=N" $CR "$tmp/good.json" --rule t64

expect run-sh-syntax 0 "" bash -n "$here/run.sh"
expect run-sh-help 0 "alloc/<cudart>/<state>" bash "$here/run.sh" --help
expect torch_check-help 0 "Deterministic PyTorch workload" $PY "$here/torch_check.py" --help
expect run-sh-bad-arg 2 "unknown argument" bash "$here/run.sh" --bogus

# The programs need libcuda.so.1 to start; the toolkit's stub stands in (it fails cuInit).
selftest_stub_libcuda
for v in shared static; do
  a=$bin/alloc_check_$v
  expect "alloc_check_$v-help" 0 "usage: alloc_check" "$a" --help
  expect "alloc_check_$v-bad-arg" 2 "unknown or incomplete argument" "$a" --frobnicate
  expect "alloc_check_$v-bad-state" 2 "stock|memory|full|mismatch" "$a" --state weird
  expect "alloc_check_$v-no-shim" 2 "not loaded" "$a" --expect shim
  expect "alloc_check_$v-no-gpu" 2 "no usable CUDA device" "$a" --expect none
done
expect leak_cycle-help 0 "usage: leak_cycle" "$bin/leak_cycle" --help
expect leak_cycle-bad-expect 2 "none, pool or nopool" "$bin/leak_cycle" --expect maybe
expect leak_cycle-no-cap 2 "needs --pool-cap-mib" "$bin/leak_cycle" --expect pool
expect leak_cycle-no-gpu 2 "no usable CUDA device" "$bin/leak_cycle" --expect none

# run.sh's own logic against fake programs (shell scripts that print fixed checksums and write
# the report a correct shim would write), an empty preload library and a fake python.
fk=$tmp/fake; mkdir -p "$fk/bin"
selftest_empty_lib "$fk/libfake.so"
cat >"$fk/report.sh" <<'EOF2'
# report.sh RULE=N...: write the report a correct shim would write for state $LDSHIM_STATE
[ -n "${LDSHIM_REPORT:-}" ] && [ -e "${LD_PRELOAD:-/absent}" ] || exit 0
st=${LDSHIM_STATE:-memory}; rules=""; sep=""
for r in "$@"; do
  n=${r#*=}; [ "$st" = stock ] && n=0
  rules="$rules$sep{\"name\": \"${r%%=*}\", \"matched\": $n, \"allocations\": $n, \"bytes\": 8388608, \"bytes_per_domain\": [4194304, 4194304], \"fallbacks\": 0}"; sep=", "
done
hits=0; [ -n "${FAKE_HITS:-}" ] && hits=$FAKE_HITS
printf '{"state": "%s", "backend": "%s", "rules": [%s], "pool": {"hits": %s, "cap": 2147483648}, "fallbacks": [], "untagged": {"histogram": [{"size": 50331655, "api": "runtime", "count": 1}]}, "live": {"ranges": 0, "bytes": 0}}\n' \
  "$st" "$([ "$st" = stock ] && echo off || echo emulated)" "$rules" "$hits" >"$LDSHIM_REPORT"
EOF2
for v in shared static; do
  cat >"$fk/bin/alloc_check_$v" <<EOF2
#!/bin/sh
echo "t64 fnv 0123456789abcdef"
[ "\${LDSHIM_STATE:-none}" = "\${FAKE_BREAK:-}" ] && echo "t1g fnv changed"
sh "$fk/report.sh" t64=1 t96p1=1 t1g=1 drv40=1
exit 0
EOF2
done
cat >"$fk/bin/leak_cycle" <<EOF2
#!/bin/sh
case "\$LDSHIM_POLICY" in *nopool*) h=0 ;; *) h=198 ;; esac
FAKE_HITS=\$h sh "$fk/report.sh" small=100 large=100
exit 0
EOF2
cat >"$fk/python" <<EOF2
#!/bin/sh
case "\$1" in
  -c) exit 0 ;;
  *check_report.py) exec $PY "\$@" ;;
  *torch_check.py) echo "matmul sha256=\${PYTORCH_NO_CUDA_MEMORY_CACHING:-0}"
     [ "\${LDSHIM_STATE:-none}" = "\${FAKE_BREAK:-}" ] && echo "changed"
     sh "$fk/report.sh" torch64=2 torch36=3; exit 0 ;;
esac
exit 9
EOF2
chmod +x "$fk/bin/"* "$fk/python"
RUN="bash $here/run.sh --lib $fk/libfake.so --bin $fk/bin"
expect run-sh-fake-all-ok 0 "gpu-shim: 21 passed, 0 failed" env TMPDIR="$fk" PYTHON="$fk/python" OUT= $RUN --results "$fk/r1"
expect run-sh-fake-result 0 "^21 0$" cat "$fk/r1"
expect run-sh-fake-mismatch 1 "FAIL alloc/static/mismatch: stdout differs from alloc_shared_base.out" \
  env TMPDIR="$fk" PYTHON="$fk/python" FAKE_BREAK=mismatch OUT= $RUN --results "$fk/r2"
expect run-sh-fake-mismatch-count 0 "^18 3$" cat "$fk/r2"
expect run-sh-fake-torch 1 "FAIL torch/cached/mismatch: stdout differs" \
  env TMPDIR="$fk" PYTHON="$fk/python" FAKE_BREAK=mismatch OUT= $RUN --results "$fk/r2" --only torch
expect run-sh-fake-nolib 1 "FAIL alloc/shared/memory: not run: .*absent.so missing" \
  env TMPDIR="$fk" PYTHON="$fk/python" OUT= bash "$here/run.sh" --lib "$fk/absent.so" --bin "$fk/bin" --results "$fk/r3" --only alloc
mkdir -p "$fk/out"
expect run-sh-fake-out 0 "logs in .OUT/gpu-shim-logs.tar.gz" env TMPDIR="$fk" PYTHON="$fk/python" OUT="$fk/out" $RUN --results "$fk/r4" --only leak
expect run-sh-fake-out-files 0 "leak_pool.json" tar -tzf "$fk/out/gpu-shim-logs.tar.gz"

selftest_end test-gpu-shim-selftest "$result"
