#!/bin/sh
# selftest.sh BENCH_BIN RESULT_FILE — CPU self-test of the allocation benchmark (no GPU needed):
# bench_alloc's argument handling and its clean failure without a GPU (against the CUDA stub
# libcuda), run.sh's argument handling, and make_table.py's arithmetic and verdicts on fixed rows.
# Writes "<passed> <failed>" to RESULT_FILE; exit 1 when a check failed.
bench=$1; result=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../tests/selftest_lib.sh"    # expect (grep -E patterns), pass, flunk, ...
selftest_begin bench
selftest_stub_libcuda
expect bench-help 0 "usage: bench_alloc" "$bench" --help
expect bench-no-mode 2 "--mode is required" "$bench"
expect bench-bad-mode 2 "--mode is required" "$bench" --mode fast
expect bench-bad-sizes 2 "bad --sizes" "$bench" --mode vmm --sizes 4X
expect bench-zero-size 2 "bad --sizes" "$bench" --mode vmm --sizes 0
expect bench-bad-iters 2 "--iters must be" "$bench" --mode vmm --iters 0
expect bench-needs-shim 2 "needs libldshim.so preloaded" "$bench" --mode pool
expect bench-no-gpu 2 "no usable CUDA device" "$bench" --mode info
expect run-sh-syntax 0 "" bash -n "$here/run.sh"
expect run-sh-help 0 "within 1.15x" bash "$here/run.sh" --help
expect run-sh-few-iters 2 "at least 30" bash "$here/run.sh" --iters 10
expect run-sh-bad-arg 2 "unknown argument" bash "$here/run.sh" --fast

# Rows as run.sh collects them (label, then bench_alloc's line).
T=$(printf '\t')
row() { printf '%s\trow\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@"; }
{
  printf 'cmd\tstock-1\tbench_alloc --mode untagged\n'
  printf 'info\tinfo\tgpu\tNVIDIA H200\n'
  printf 'info-shim\tinfo\tshim\t0.1.0 (state memory, backend emulated)\n'
  row stock-1 untagged cycle 4096 1000 10.00 12.00 -
  row stock-2 untagged cycle 4096 1000 10.40 12.50 -
  row shim-1 untagged cycle 4096 1000 10.60 13.00 -
  row shim-2 untagged cycle 4096 1000 10.80 13.20 -
  row stock-1 untagged cycle 1048576 1000 20.00 22.00 -
  row stock-2 untagged cycle 1048576 1000 20.00 22.00 -
  row shim-1 untagged cycle 1048576 1000 21.50 23.00 -
  row shim-2 untagged cycle 1048576 1000 21.50 23.00 -
  row malloc malloc cycle 2097152 50 58.0 60.0 -
  row vmm vmm 1handle 2097152 50 52.0 55.0 handle=2097152
  row vmm vmm 2handles 2097152 50 80.0 85.0 handle=2097152
  row cold tagged cycle 2097152 50 88.0 90.0 slices=2
  row vmm vmm 1handle 1073741824 50 412.0 420.0 handle=1073741824
  row vmm vmm 2handles 1073741824 50 400.0 410.0 handle=536870912
  row cold tagged cycle 1073741824 50 520.0 530.0 slices=2
  row pool pool malloc 2097152 50 2.0 3.0 hits=53
  row pool pool free 2097152 50 9.0 10.0 hits=53
  row pool pool cycle 2097152 50 11.0 13.0 hits=53
  row pool pool malloc 1073741824 50 7.5 9.0 hits=53
  row pool pool free 1073741824 50 30.0 33.0 hits=53
  row pool pool cycle 1073741824 50 37.5 42.0 hits=53
} >"$tmp/good.tsv"
MT="$PY $here/make_table.py"
expect table-header 0 "^# Allocation benchmark — 2026-01-01" $MT "$tmp/good.tsv" --date 2026-01-01 --driver 580.1
expect table-gpu 0 "GPU: NVIDIA H200" $MT "$tmp/good.tsv"
expect table-driver 0 "Driver: 580.159.04" $MT "$tmp/good.tsv" --driver 580.159.04
expect table-untagged-ok 0 "^\| 4 KiB \| 1000 \| 10.00, 10.40 \| 10.60, 10.80 \| \+0.50 \(stock spread 0.40\).*\| yes \|$" $MT "$tmp/good.tsv"
expect table-untagged-slow 0 "^\| 1 MiB .*\+1.50 .*\*\*no\*\* \|$" $MT "$tmp/good.tsv"
expect table-cold-ok 0 "^\| 2 MiB \| 58.0 / 60.0 \| 52.0 / 55.0 \| 80.0 / 85.0 \| 88.0 / 90.0 \| 1.10× \| 1.69× \| yes \| slices=2 \|$" $MT "$tmp/good.tsv"
expect table-cold-slow 0 "^\| 1 GiB .*\| 1.30× \| 1.26× \| \*\*no\*\* \|" $MT "$tmp/good.tsv"
expect table-pool-ok 0 "^\| 2 MiB \| 2.0 / 3.0 \| 9.0 / 10.0 \| 11.0 / 13.0 \| yes \| hits=53 \|$" $MT "$tmp/good.tsv"
expect table-pool-slow 0 "^\| 1 GiB \| 7.5 / 9.0 .*\*\*no\*\*" $MT "$tmp/good.tsv"
expect table-commands 0 "stock-1.*bench_alloc --mode untagged" $MT "$tmp/good.tsv"
sed "s/${T}slices=2\$/${T}INVALID:not-tagged/" "$tmp/good.tsv" >"$tmp/invalid.tsv"
expect table-invalid 1 "cold 2 MiB: INVALID:not-tagged" $MT "$tmp/invalid.tsv"
grep -v "^shim-2" "$tmp/good.tsv" >"$tmp/missing.tsv"
expect table-missing-run 1 "untagged 4 KiB: missing run" $MT "$tmp/missing.tsv"
expect table-no-file 1 "cannot read" $MT "$tmp/absent.tsv"

# run.sh end to end against a fake bench_alloc (prints fixed rows per mode) and an empty library.
fk=$tmp/fake; mkdir -p "$fk/out"
selftest_empty_lib "$fk/libfake.so"
cat >"$fk/bench_alloc" <<'EOF2'
#!/bin/sh
mode=$2; sizes="2097152 33554432 67108864 536870912 1073741824"
case $mode in
  info) printf 'info\tgpu\tFake GPU\n'; [ -n "${LD_PRELOAD:-}" ] && printf 'info\tshim\t0.1.0 (fake)\n'; exit 0 ;;
  untagged) for b in 4096 1048576 67108864; do printf 'row\tuntagged\tcycle\t%s\t1000\t10.00\t12.00\t-\n' $b; done ;;
  malloc) for b in $sizes; do printf 'row\tmalloc\tcycle\t%s\t50\t60.0\t70.0\t-\n' $b; done ;;
  vmm) for b in $sizes; do printf 'row\tvmm\t1handle\t%s\t50\t50.0\t55.0\t-\n' $b; printf 'row\tvmm\t2handles\t%s\t50\t80.0\t90.0\t-\n' $b; done ;;
  tagged) for b in $sizes; do printf 'row\ttagged\tcycle\t%s\t50\t84.0\t95.0\tslices=2\n' $b; done ;;
  pool) for b in $sizes; do for v in malloc free cycle; do printf 'row\tpool\t%s\t%s\t50\t2.0\t3.0\thits=106\n' $v $b; done; done ;;
esac
[ "$mode" = "${FAKE_FAIL:-}" ] && { echo "fake failure" >&2; exit 1; }
exit 0
EOF2
chmod +x "$fk/bench_alloc"
expect run-sh-fake-table 0 "^\| 1 GiB \| 60.0 / 70.0 \| 50.0 / 55.0 \| 80.0 / 90.0 \| 84.0 / 95.0 \| 1.05× \| 1.68× \| yes \| slices=2 \|$" \
  env OUT="$fk/out" bash "$here/run.sh" --lib "$fk/libfake.so" --bin "$fk/bench_alloc" --iters 30
expect run-sh-fake-files 0 "alloc-.*\.md" ls "$fk/out"
expect run-sh-fake-shim-version 0 "libldshim: 0.1.0 \(fake\)" cat "$fk/out"/alloc-*.md
expect run-sh-fake-command 0 "cold.*LD_PRELOAD=libldshim.so LDSHIM_POLICY=bench/alloc/cold.policy bench_alloc --mode tagged --iters 30" cat "$fk/out"/alloc-*.md
expect run-sh-fake-step-fails 1 "step pool .* exited 1" env OUT="$fk/out" FAKE_FAIL=pool bash "$here/run.sh" --lib "$fk/libfake.so" --bin "$fk/bench_alloc"
expect run-sh-no-lib 2 "not built" bash "$here/run.sh" --lib "$fk/absent.so" --bin "$fk/bench_alloc"

selftest_end test-bench-alloc-selftest "$result"
