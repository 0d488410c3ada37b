# ==== gpu56.sh ====
# gpu56.sh — the FP8 wgmma prefill tile (new.so: main + kTileWgF8, e4m3 stages dequantized to bf16 in shared
# memory) beside main (base.so = cd9a089: FP8 prefill on the 64 x 64 mma.sync tile), one call: --tiny first,
# the suite plain + bound, layer_time --fp8 T 256/1024/4096 base/new x2, bf16 T 256/1024/4096 new (reference),
# memcheck/synccheck --tiny, FP8 decode T 1-64 base/new.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v31.tgz -C .carry; V=$PWD/.carry/v
cp $V/gpu56.sh $OUT/r/
LDMOE_LIB=$V/new.so timeout 90 python3 tests/gpu/moe/test_moe_layer.py --tiny > $OUT/r/tiny-new.log 2>&1; rc=$?
echo "new tiny rc=$rc $(tail -1 $OUT/r/tiny-new.log) $(el)"; grep -a FAIL $OUT/r/tiny-new.log | head -8 | cut -c1-300; save
d=$(mktemp -d)
LDMOE_LIB=$V/new.so timeout 200 python3 tests/gpu/moe/test_moe_layer.py --digest $d/dg > $OUT/r/suite-plain.log 2>&1
echo "plain rc=$? $(tail -1 $OUT/r/suite-plain.log) $(el)"
LD_PRELOAD=$V/libldshim.so LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0 LDMOE_LIB=$V/new.so timeout 200 python3 tests/gpu/moe/test_moe_layer.py --digest $d/dg --bound > $OUT/r/suite-bound.log 2>&1
echo "bound rc=$? $(tail -1 $OUT/r/suite-bound.log) $(el)"; grep -a FAIL $OUT/r/suite-*.log | head -8 | cut -c1-300; save
i=0; for v in base new base new; do i=$((i+1)); f=$OUT/r/lt8-$i-$v.txt
  LDMOE_LIB=$V/$v.so timeout 150 python3 bench/moe/layer_time.py --fp8 --tokens 256,1024,4096 --reps 5 > $f 2>&1
  echo "== fp8 $v rc=$? $(el)"; grep packed $f | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; save; done
f=$OUT/r/lt-bf16-new.txt; LDMOE_LIB=$V/new.so timeout 100 python3 bench/moe/layer_time.py --tokens 256,1024,4096 --reps 5 > $f 2>&1
echo "== bf16 new rc=$? $(el)"; grep packed $f | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; save
for t in memcheck synccheck; do
  LDMOE_LIB=$V/new.so timeout 120 compute-sanitizer --tool $t --error-exitcode 9 python3 tests/gpu/moe/test_moe_layer.py --tiny > $OUT/r/san-$t.log 2>&1
  echo "$t rc=$? $(tail -2 $OUT/r/san-$t.log | tr '\n' ' ') $(el)"; save; done
for v in base new; do f=$OUT/r/lt8-dec-$v.txt
  LDMOE_LIB=$V/$v.so timeout 60 python3 bench/moe/layer_time.py --fp8 --tokens 1,4,16,64 --reps 5 > $f 2>&1
  echo "== fp8 dec $v $(el)"; grep packed $f | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; save; done
cd $OUT && tar czf r.tgz r && rm -rf r

# ==== gpu57.sh ====
# gpu57.sh — what bounds the FP8 wgmma tile: new.so (34cabb3) beside d1 (no dequantization; fence and barrier kept)
# and d2 (no dequantization, fence or barrier) -- diag-f8.patch, wrong outputs, timing only -- layer_time --fp8
# T 256/1024/4096 alternated x2; ncu warp states of new at Qwen3 T 256 / 4096 (prof8.py); the suite with the
# refusal test fixed (plain).
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v32.tgz -C .carry; V=$PWD/.carry/v
cp $V/gpu57.sh $V/prof8.py $V/diag-f8.patch $OUT/r/
LDMOE_LIB=$V/new.so timeout 200 python3 tests/gpu/moe/test_moe_layer.py > $OUT/r/suite-plain.log 2>&1
echo "plain rc=$? $(tail -1 $OUT/r/suite-plain.log) $(el)"; grep -a FAIL $OUT/r/suite-*.log | head -8 | cut -c1-300; save
i=0; for v in new d1 d2 new d1 d2; do i=$((i+1)); f=$OUT/r/lt8-$i-$v.txt
  LDMOE_LIB=$V/$v.so timeout 100 python3 bench/moe/layer_time.py --fp8 --tokens 256,1024,4096 --reps 5 > $f 2>&1
  echo "== fp8 $v rc=$? $(el)"; grep packed $f | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; save; done
for c in "qwen3 256" "qwen3 4096"; do f=$OUT/r/ncu-new-${c// /-}.txt
  LDMOE_LIB=$V/new.so timeout 120 ncu -k regex:moe_layer_kernel --launch-skip 2 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --metrics smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum python3 $V/prof8.py $c > $f 2>&1
  echo "== ncu $c rc=$? $(el)"; grep -E "Duration|Stall|Warp Cycles|Issued|Eligible|inst_executed|hmma|dram__bytes|Throughput" $f | sed 's/  */ /g' | head -30; save
done
cd $OUT && tar czf r.tgz r && rm -rf r

# ==== gpu58.sh ====
# gpu58.sh — the FP8 wgmma tile with its dequantization on a fourth warpgroup (cv.so = 8f40781) beside the
# consumers converting (new.so = 34cabb3), one call: cv --tiny, cv suite plain + bound (digests equal), layer_time
# --fp8 T 256/1024/4096 new/cv x2, FP8 decode T 1-64 cv, bf16 T 256-4096 cv (unchanged tiles), memcheck/synccheck/
# racecheck --tiny on cv.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v33.tgz -C .carry; V=$PWD/.carry/v
cp $V/gpu58.sh $OUT/r/
LDMOE_LIB=$V/cv.so timeout 90 python3 tests/gpu/moe/test_moe_layer.py --tiny > $OUT/r/tiny-cv.log 2>&1; rc=$?
echo "cv tiny rc=$rc $(tail -1 $OUT/r/tiny-cv.log) $(el)"; grep -a FAIL $OUT/r/tiny-cv.log | head -8 | cut -c1-300; save
[ $rc = 0 ] || exit 1
d=$(mktemp -d)
LDMOE_LIB=$V/cv.so timeout 200 python3 tests/gpu/moe/test_moe_layer.py --digest $d/dg > $OUT/r/suite-plain.log 2>&1
echo "plain rc=$? $(tail -1 $OUT/r/suite-plain.log) $(el)"
LD_PRELOAD=$V/libldshim.so LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0 LDMOE_LIB=$V/cv.so timeout 200 python3 tests/gpu/moe/test_moe_layer.py --digest $d/dg --bound > $OUT/r/suite-bound.log 2>&1
echo "bound rc=$? $(tail -1 $OUT/r/suite-bound.log) $(el)"; grep -a -E "FAIL|digest" $OUT/r/suite-*.log | head -8 | cut -c1-300; save
i=0; for v in new cv new cv; do i=$((i+1)); f=$OUT/r/lt8-$i-$v.txt
  LDMOE_LIB=$V/$v.so timeout 100 python3 bench/moe/layer_time.py --fp8 --tokens 256,1024,4096 --reps 5 > $f 2>&1
  echo "== fp8 $v rc=$? $(el)"; grep packed $f | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; save; done
f=$OUT/r/lt8-dec-cv.txt; LDMOE_LIB=$V/cv.so timeout 60 python3 bench/moe/layer_time.py --fp8 --tokens 1,4,16,64 --reps 5 > $f 2>&1
echo "== fp8 dec cv $(el)"; grep packed $f | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; save
f=$OUT/r/lt-bf16-cv.txt; LDMOE_LIB=$V/cv.so timeout 100 python3 bench/moe/layer_time.py --tokens 256,1024,4096 --reps 5 > $f 2>&1
echo "== bf16 cv rc=$? $(el)"; grep packed $f | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; save
for t in memcheck synccheck racecheck; do
  LDMOE_LIB=$V/cv.so timeout 150 compute-sanitizer --tool $t --error-exitcode 9 python3 tests/gpu/moe/test_moe_layer.py --tiny > $OUT/r/san-$t.log 2>&1
  echo "$t rc=$? $(tail -2 $OUT/r/san-$t.log | tr '\n' ' ' | cut -c1-200) $(el)"; save; done
cd $OUT && tar czf r.tgz r && rm -rf r

# ==== gpu59.sh ====
# gpu59.sh — the landed FP8 wgmma tile (main.so = bc91430: 34cabb3's kernel, 171366e's test): suite plain + bound
# (digests equal), memcheck / synccheck --tiny; then the grouped GEMM's bf16 prefill against torch._grouped_mm
# (bench_moe.py m = 512, 2048, --sched-best) on this H100.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v34.tgz -C .carry; V=$PWD/.carry/v
cp $V/gpu59.sh $OUT/r/
d=$(mktemp -d)
LDMOE_LIB=$V/main.so timeout 200 python3 tests/gpu/moe/test_moe_layer.py --digest $d/dg > $OUT/r/test-gpu-moe-layer.log 2>&1
echo "plain rc=$? $(tail -1 $OUT/r/test-gpu-moe-layer.log) $(el)"
echo "---- bound to domain 0 (LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0), --bound --digest" >> $OUT/r/test-gpu-moe-layer.log
LD_PRELOAD=$V/libldshim.so LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0 LDMOE_LIB=$V/main.so timeout 200 python3 tests/gpu/moe/test_moe_layer.py --digest $d/dg --bound >> $OUT/r/test-gpu-moe-layer.log 2>&1
echo "bound rc=$? $(tail -1 $OUT/r/test-gpu-moe-layer.log) $(el)"; grep -a -E "FAIL|digest" $OUT/r/test-gpu-moe-layer.log | head -8 | cut -c1-300; save
for t in memcheck synccheck; do
  LDMOE_LIB=$V/main.so timeout 150 compute-sanitizer --tool $t --error-exitcode 9 python3 tests/gpu/moe/test_moe_layer.py --tiny > $OUT/r/san-$t.log 2>&1
  echo "$t rc=$? $(tail -2 $OUT/r/san-$t.log | tr '\n' ' ' | cut -c1-200) $(el)"; save; done
LDMOE_LIB=$V/main.so OUT=$OUT/r/bench timeout 300 python3 bench/moe/bench_moe.py --tokens 512,2048 --reps 40 --settle-ms 300 --sched-best --no-floor > $OUT/r/bench-moe.txt 2>&1
echo "bench rc=$? $(el)"; grep -E "^ *[0-9]|E=|vs torch|x torch" $OUT/r/bench-moe.txt | head -40; save
cd $OUT && tar czf r.tgz r && rm -rf r

# ==== gpu60.sh ====
# gpu60.sh — the FP8 256-row wgmma tile (f256.so = feca4ff) beside the 128-row one alone (prev.so = bc91430), one
# call: f256 --tiny, suite plain + bound (digests equal), layer_time --fp8 T 256/1024/4096 prev/f256 x2, memcheck /
# synccheck --tiny on f256.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v35.tgz -C .carry; V=$PWD/.carry/v
cp $V/gpu60.sh $OUT/r/
LDMOE_LIB=$V/f256.so timeout 90 python3 tests/gpu/moe/test_moe_layer.py --tiny > $OUT/r/tiny.log 2>&1; rc=$?
echo "f256 tiny rc=$rc $(tail -1 $OUT/r/tiny.log) $(el)"; grep -a FAIL $OUT/r/tiny.log | head -8 | cut -c1-300; save
[ $rc = 0 ] || exit 1
d=$(mktemp -d)
LDMOE_LIB=$V/f256.so timeout 200 python3 tests/gpu/moe/test_moe_layer.py --digest $d/dg > $OUT/r/test-gpu-moe-layer.log 2>&1
echo "plain rc=$? $(tail -1 $OUT/r/test-gpu-moe-layer.log) $(el)"
echo "---- bound to domain 0 (LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0), --bound --digest" >> $OUT/r/test-gpu-moe-layer.log
LD_PRELOAD=$V/libldshim.so LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0 LDMOE_LIB=$V/f256.so timeout 200 python3 tests/gpu/moe/test_moe_layer.py --digest $d/dg --bound >> $OUT/r/test-gpu-moe-layer.log 2>&1
echo "bound rc=$? $(tail -1 $OUT/r/test-gpu-moe-layer.log) $(el)"; grep -a -E "FAIL|digest" $OUT/r/test-gpu-moe-layer.log | head -8 | cut -c1-300; save
i=0; for v in prev f256 prev f256; do i=$((i+1)); f=$OUT/r/lt8-$i-$v.txt
  LDMOE_LIB=$V/$v.so timeout 100 python3 bench/moe/layer_time.py --fp8 --tokens 256,1024,4096 --reps 5 > $f 2>&1
  echo "== fp8 $v rc=$? $(el)"; grep packed $f | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; save; done
for t in memcheck synccheck; do
  LDMOE_LIB=$V/f256.so timeout 150 compute-sanitizer --tool $t --error-exitcode 9 python3 tests/gpu/moe/test_moe_layer.py --tiny > $OUT/r/san-$t.log 2>&1
  echo "$t rc=$? $(tail -2 $OUT/r/san-$t.log | tr '\n' ' ' | cut -c1-200) $(el)"; save; done
cd $OUT && tar czf r.tgz r && rm -rf r

# ==== gpu61.sh ====
# gpu61.sh — the FP8 wgmma tiles: fa (b630511: the 128-row tile unrolled again, the 256-row tile a row at a time)
# and fb (fa with the 256-row tile unrolled too: fb.patch, 84 bytes spilled) beside prev (bc91430: the 128-row tile
# alone), one call: layer_time --fp8 T 256/1024/4096 prev/fa/fb x2; fa --tiny.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v36.tgz -C .carry; V=$PWD/.carry/v
cp $V/gpu61.sh $OUT/r/
LDMOE_LIB=$V/fa.so timeout 90 python3 tests/gpu/moe/test_moe_layer.py --tiny > $OUT/r/tiny-fa.log 2>&1; rc=$?
echo "fa tiny rc=$rc $(tail -1 $OUT/r/tiny-fa.log) $(el)"; grep -a FAIL $OUT/r/tiny-fa.log | head -8 | cut -c1-300; save
i=0; for v in prev fa fb prev fa fb; do i=$((i+1)); f=$OUT/r/lt8-$i-$v.txt
  LDMOE_LIB=$V/$v.so timeout 100 python3 bench/moe/layer_time.py --fp8 --tokens 256,1024,4096 --reps 5 > $f 2>&1
  echo "== fp8 $v rc=$? $(el)"; grep packed $f | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; save; done
cd $OUT && tar czf r.tgz r && rm -rf r

# ==== gpu62.sh ====
# gpu62.sh — the landed FP8 wgmma tiles (final.so = the tree after gpu61: 128- and 256-row tiles, both unrolled): the
# suite plain + bound (digests equal), memcheck / synccheck --tiny, layer_time --fp8 T 1-4096 once.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v37.tgz -C .carry; V=$PWD/.carry/v
cp $V/gpu62.sh $OUT/r/
d=$(mktemp -d)
LDMOE_LIB=$V/final.so timeout 200 python3 tests/gpu/moe/test_moe_layer.py --digest $d/dg > $OUT/r/test-gpu-moe-layer.log 2>&1
echo "plain rc=$? $(tail -1 $OUT/r/test-gpu-moe-layer.log) $(el)"
echo "---- bound to domain 0 (LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0), --bound --digest" >> $OUT/r/test-gpu-moe-layer.log
LD_PRELOAD=$V/libldshim.so LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0 LDMOE_LIB=$V/final.so timeout 200 python3 tests/gpu/moe/test_moe_layer.py --digest $d/dg --bound >> $OUT/r/test-gpu-moe-layer.log 2>&1
echo "bound rc=$? $(tail -1 $OUT/r/test-gpu-moe-layer.log) $(el)"; grep -a -E "FAIL|digest" $OUT/r/test-gpu-moe-layer.log | head -8 | cut -c1-300; save
for t in memcheck synccheck; do
  LDMOE_LIB=$V/final.so timeout 150 compute-sanitizer --tool $t --error-exitcode 9 python3 tests/gpu/moe/test_moe_layer.py --tiny > $OUT/r/san-$t.log 2>&1
  echo "$t rc=$? $(tail -2 $OUT/r/san-$t.log | tr '\n' ' ' | cut -c1-200) $(el)"; save; done
f=$OUT/r/lt8-final.txt; LDMOE_LIB=$V/final.so timeout 100 python3 bench/moe/layer_time.py --fp8 --tokens 1,4,16,64,256,1024,4096 --reps 5 > $f 2>&1
echo "== fp8 final rc=$? $(el)"; grep packed $f | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'
cd $OUT && tar czf r.tgz r && rm -rf r

# ==== gpu63.sh ====
# gpu63.sh — serve.py end to end on the landed tree (final.so = f82d897's kernel): `E2E_LAYOUTS=fused` of
# test-gpu-e2e (serve.py --moe fused under the shim in every placement state, graphs and eager).
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
mkdir -p $OUT/r build; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v37.tgz -C .carry; V=$PWD/.carry/v
cp $V/final.so build/libldmoe.so; cp $V/libldshim.so build/libldshim.so; cp .carry/gpu63.sh $OUT/r/
E2E_LAYOUTS=fused timeout 400 bash tests/gpu/e2e/run.sh $OUT/r/e2e > $OUT/r/test-gpu-e2e-fused.log 2>&1
echo "e2e fused rc=$? $(tail -2 $OUT/r/test-gpu-e2e-fused.log | tr '\n' ' ') $(el)"; grep -a -E "FAIL" $OUT/r/test-gpu-e2e-fused.log | head -5
cd $OUT && tar czf r.tgz r && rm -rf r

# ==== gpu64.sh (2026-12-07 ~11:33 UTC, H100; v38.tgz held a8.so = 54f4fe9's libldmoe.so) ====
# gpu64.sh — FP8 tokens (w8a8 wgmma tile) first run: test_fp8_tokens alone, then layer_time --fp8 vs --fp8-tokens T 256-4096.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
mkdir -p $OUT/r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v38.tgz -C .carry; V=$PWD/.carry/v
cp .carry/gpu64.sh $OUT/r/
LDMOE_LIB=$V/a8.so timeout 120 python3 .carry/a8t.py > $OUT/r/a8t.log 2>&1
echo "a8t rc=$? $(tail -1 $OUT/r/a8t.log) $(el)"; grep -a -E "FAIL|Error|error" $OUT/r/a8t.log | head -12 | cut -c1-250
grep -a "PASS" $OUT/r/a8t.log | head -30 | cut -c1-160
for m in fp8 fp8-tokens fp8 fp8-tokens; do
  f=$OUT/r/lt-$m.txt; LDMOE_LIB=$V/a8.so timeout 100 python3 bench/moe/layer_time.py --$m --tokens 256,1024,4096 --reps 5 >> $f 2>&1
  echo "== $m rc=$? $(el)"; grep -a packed $f | tail -9 | awk '{printf "%s/%s %s %s %s; ", $1, $3, $4, $7, $9} END {print ""}'; grep -a -i "error\|Trace" $f | head -3
done
cd $OUT && tar czf r.tgz r && rm -rf r

# ==== a8t.py (run by gpu64.sh as .carry/a8t.py) ====
# # a8t.py — run test_moe_layer.py's test_fp8_tokens alone (LDMOE_LIB picks the library)
# import os, sys
# sys.path.insert(0, "tests/gpu/moe"); sys.path.insert(0, "kernels/moe")
# import torch, ldmoe
# import test_moe_layer as t
# t.torch, t.ldmoe = torch, ldmoe
# gen = torch.Generator().manual_seed(int(os.environ.get("SEED", "1234")))
# print("ldmoe %s from %s on %s" % (ldmoe.version(), ldmoe.library_path(), torch.cuda.get_device_name()), flush=True)
# t.test_fp8_tokens(gen)
# print("%d passed, %d failed" % (t.PASSED, t.FAILED))
# sys.exit(1 if t.FAILED else 0)

# ==== gpu69a.sh, gpu69b.sh and a third command, 2026-12-07 ~14:41-14:50 UTC, one warm H100 ====
# .carry/v40.tgz: libldshim.so, a8.so (d1c994c), a8c.so (d1c994c + git revert c259525 = 5fba591's kernel) and
# a8c/test_moe_layer.py (that tree's test); a8t.py now takes A8T_DIR (the test's folder). The serve.py of 3c52811.
# gpu69a.sh — (1) the 1 x 128 x-scale variant (a8c: git revert c259525) correct? (2) a8 (main) vs a8c timing,
# alternated twice, bf16 peer; (3) serve.py --moe fused --dtype fp8 on the Qwen3-like config, batch 1 and 32,
# beside torch bf16/fp8, ldmoe fused bf16, ldmoe grouped fp8 (--check each); (4) test-gpu-e2e's fused8 layout.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r build; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v40.tgz -C .carry; V=$PWD/.carry/v
cp $V/a8.so build/libldmoe.so; cp $V/libldshim.so build/libldshim.so; cp .carry/gpu69a.sh .carry/a8t.py $OUT/r/
A8T_DIR=$V/a8c LDMOE_LIB=$V/a8c.so timeout 90 python3 .carry/a8t.py > $OUT/r/a8t-a8c.log 2>&1
echo "a8t a8c rc=$? $(tail -1 $OUT/r/a8t-a8c.log) $(el)"; grep -a -E "FAIL|Error|error" $OUT/r/a8t-a8c.log | head -6 | cut -c1-250
run() { f=$OUT/r/lt-$1-$2.txt; LDMOE_LIB=$V/$2.so timeout 60 python3 bench/moe/layer_time.py $3 --tokens 256,1024,4096 --reps 5 >> $f 2>&1
  echo "== $1 $2 rc=$? $(el)"; grep -a packed $f | tail -9 | awk '{printf "%s/%s %s %s %s; ", $1, $3, $4, $7, $9} END {print ""}'; grep -a -i "error\|Trace" $f | head -3; }
run a8 a8 --fp8-tokens; run a8 a8c --fp8-tokens; run a8 a8 --fp8-tokens; run a8 a8c --fp8-tokens; run bf16 a8
save
Q="--experts 128 --topk 8 --hidden 2048 --ffn 768 --heads 32 --kv-heads 4 --layers 4 --steps 64 --no-busy --check"
f=$OUT/r/serve-fp8.txt
for b in 1 32; do
 for be in "ldmoe --moe fused --layout packed --dtype fp8" "torch" "ldmoe --moe fused --layout packed" "torch --dtype fp8" "ldmoe --moe grouped --layout packed --dtype fp8"; do
  echo "== batch $b: --backend $be" >> $f
  LDMOE_LIB=$PWD/build/libldmoe.so timeout 90 python3 bench/apps/serve.py --backend $be $Q --batch $b >> $f 2>&1
  echo "b$b [$be] rc=$? $(grep -a -E '^decode|check.*MoE' $f | tail -2 | cut -c1-100 | tr '\n' ' ') $(el)"
 done; save; done
E2E_LAYOUTS=fused8 timeout 240 bash tests/gpu/e2e/run.sh $OUT/r/e2e > $OUT/r/test-gpu-e2e-fused8.log 2>&1
echo "e2e fused8 rc=$? $(tail -2 $OUT/r/test-gpu-e2e-fused8.log | tr '\n' ' ') $(el)"; grep -a -E "FAIL" $OUT/r/test-gpu-e2e-fused8.log | head -5
cd $OUT && tar czf r.tgz r && rm -rf r

# (run as `B=a8c bash .carry/gpu69b.sh`: on a8c, with a8c's test file)
# gpu69b.sh — main's (a8 = d1c994c's kernel) whole GPU layer suite plain + bound (digests equal); FP8 tokens over
# T 1-4096; compute-sanitizer memcheck / synccheck --tiny.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v40.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu69b.sh $OUT/r/
B=${B:-a8}; d=$(mktemp -d); [ -f $V/$B/test_moe_layer.py ] && cp $V/$B/test_moe_layer.py tests/gpu/moe/test_moe_layer.py
LDMOE_LIB=$V/$B.so timeout 170 python3 tests/gpu/moe/test_moe_layer.py --digest $d/dg > $OUT/r/test-gpu-moe-layer.log 2>&1
echo "plain rc=$? $(tail -1 $OUT/r/test-gpu-moe-layer.log) $(el)"; grep -a FAIL $OUT/r/test-gpu-moe-layer.log | head -5 | cut -c1-250; save
echo "---- bound to domain 0 (LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0), --bound --digest" >> $OUT/r/test-gpu-moe-layer.log
LD_PRELOAD=$V/libldshim.so LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0 LDMOE_LIB=$V/$B.so timeout 170 python3 tests/gpu/moe/test_moe_layer.py --digest $d/dg --bound >> $OUT/r/test-gpu-moe-layer.log 2>&1
echo "bound rc=$? $(tail -1 $OUT/r/test-gpu-moe-layer.log) $(el)"; grep -a -E "FAIL|digest" $OUT/r/test-gpu-moe-layer.log | head -8 | cut -c1-300; save
f=$OUT/r/lt-all-fp8-tokens.txt; LDMOE_LIB=$V/$B.so timeout 60 python3 bench/moe/layer_time.py --fp8-tokens --tokens 1,4,16,64,256,1024,4096 --reps 5 > $f 2>&1
echo "== all fp8-tokens rc=$? $(el)"; grep -a packed $f | awk '{printf "%s/%s %s %s %s; ", $1, $3, $4, $7, $9} END {print ""}'; save
for t in memcheck synccheck; do
  LDMOE_LIB=$V/$B.so timeout 110 compute-sanitizer --tool $t --error-exitcode 9 python3 tests/gpu/moe/test_moe_layer.py --tiny > $OUT/r/san-$t.log 2>&1
  echo "$t rc=$? $(tail -2 $OUT/r/san-$t.log | tr '\n' ' ' | cut -c1-200) $(el)"; save; done
cd $OUT && tar czf r.tgz r && rm -rf r

# gpu69c (inline): the whole test-gpu-e2e on 5fba591's kernel and 3c52811's serve.py -- 65 passed, 0 failed
export PYTHONUNBUFFERED=1; mkdir -p $OUT/r build; tar xzf .carry/v40.tgz -C .carry; cp .carry/v/a8c.so build/libldmoe.so; cp .carry/v/libldshim.so build/libldshim.so; timeout 420 bash tests/gpu/e2e/run.sh $OUT/r/e2e > $OUT/r/test-gpu-e2e.log 2>&1

# ==== prof8.py (run by gpu57.sh and gpu58.sh as $V/prof8.py) ====
# prof8.py SHAPE T — four FP8 ldmoe.moe calls of one case (e4m3 weights, 128 x 128 block scales, packed D = 1,
# layer_time.py's router) for ncu; run from the repository root.
import sys, torch
sys.path.insert(0, "kernels/moe"); sys.path.insert(0, "bench/moe")
import ldmoe
from layer_time import SHAPES, routing
E, k, H, I = SHAPES[sys.argv[1]]; T = int(sys.argv[2])
gen = torch.Generator().manual_seed(7)
q13 = (torch.randn((E, 2 * I, H), device="cuda") * 64).to(torch.float8_e4m3fn)
q2 = (torch.randn((E, H, I), device="cuda") * 64).to(torch.float8_e4m3fn)
s13 = torch.full((E, 2 * I // 128, H // 128), H ** -0.5 / 64, device="cuda")
s2 = torch.full((E, H // 128, I // 128), I ** -0.5 / 64, device="cuda")
W = ldmoe.pack_moe(q13, q2, D=1)
x = torch.randn((T, H), device="cuda").to(torch.bfloat16)
ids, wts = routing(gen, T, E, k)
out = torch.empty((T, H), device="cuda", dtype=torch.bfloat16)
for _ in range(4):
    ldmoe.moe(x, W, None, ids, wts, out=out, w13_scale=s13, w2_scale=s2)
torch.cuda.synchronize()
print("ok", sys.argv[1], T, out.float().abs().mean().item())

# ==== gpu70.sh, gpu71.sh, gpu72.sh, gpu73.sh, 2026-12-07 ~15:46-16:22 UTC, H100s (v41.tgz: a8.so = 5fba591's libldmoe.so; v42/v43: opt.so = 8ce01f9's, nb.so = 5a14167's, libldshim.so) ====
# ---- gpu70.sh ----
# gpu70.sh — ncu of 5fba591's fused layer: what bounds the FP8-token (w8a8, 128-row) tile against the bf16 256-row tile
# (SpeedOfLight, warp states, L2 and DRAM bytes, pipe use) at Qwen3 T 1024 / 4096 and Mixtral T 1024.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r build; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v41.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu70.sh .carry/profm.py $OUT/r/
ncu --query-metrics 2>/dev/null | grep -E "^sm__pipe_tensor_op_(g|h)mma_cycles_active |^sm__inst_executed_pipe_tensor" | cut -c1-90 > $OUT/r/metrics.txt
M=dram__bytes_read.sum,lts__t_bytes.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed
grep -q gmma $OUT/r/metrics.txt && M=$M,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed
for c in "qwen3 4096 a8" "qwen3 4096 bf16" "mixtral 1024 a8" "qwen3 1024 a8" "mixtral 1024 bf16"; do f=$OUT/r/ncu-${c// /-}.txt
  LDMOE_LIB=$V/a8.so timeout 150 ncu -k regex:moe_layer_kernel --launch-skip 2 --launch-count 1 --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --metrics $M python3 .carry/profm.py $c > $f 2>&1
  echo "== ncu $c rc=$? $(el)"; grep -E "Duration|Stall|Warp Cycles Per Issued|Eligible Warps|Issued Warp|dram__bytes|lts__t|mma_cycles|L2 Cache Throughput|DRAM Throughput|Compute \(SM\)|Memory Throughput|Executed Ipc A" $f | sed 's/  */ /g' | head -28; save
done
cd $OUT && tar czf r.tgz r && rm -rf r
# ---- gpu71.sh ----
# gpu71.sh — where the FP8-token (128-row w8a8) layer kernel's warps stall: ncu source-level warp-state sampling
# (SASS with line info) at Qwen3 T 4096, plus per-reason stall ratios; 5fba591's kernel.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
mkdir -p $OUT/r build; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v41.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu71.sh $OUT/r/
ncu --version | tail -1
for c in "qwen3 4096 a8"; do f=$OUT/r/src-${c// /-}
  LDMOE_LIB=$V/a8.so timeout 200 ncu -k regex:moe_layer_kernel --launch-skip 2 --launch-count 1 --section WarpStateStats --section SourceCounters \
    -o $f python3 .carry/profm.py $c > $f.log 2>&1
  echo "== ncu $c rc=$? $(el)"; tail -3 $f.log
  timeout 120 ncu -i $f.ncu-rep --page source --csv --print-source sass > $f-sass.csv 2> $f-sass.err; echo "source rc=$? $(wc -c < $f-sass.csv) $(el)"; head -c 600 $f-sass.csv; head -3 $f-sass.err
  timeout 60 ncu -i $f.ncu-rep --page details --print-details all > $f-details.txt 2>&1; grep -i "stall" $f-details.txt | head -30
  gzip $f-sass.csv
done
rm -f $OUT/r/*.ncu-rep
cd $OUT && tar czf r.tgz r && rm -rf r
# ---- gpu72.sh ----
# gpu72.sh — the layer's prefill passes (prefill-passes branch) against 5fba591 (a8): opt (8ce01f9: the routed-x image
# pass batched, the final combine two items a thread, A8 block-scale rows once a tile), nb (+ no barrier between the
# consumer warpgroups at a tile's end); layer_time FP8 tokens and bf16, alternated twice; the suite on nb.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r build; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v42.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu72.sh $OUT/r/
run() { f=$OUT/r/lt-$1-$2.txt; LDMOE_LIB=$V/$2.so timeout 80 python3 bench/moe/layer_time.py $3 --tokens 256,1024,4096 --reps 3 >> $f 2>&1
  echo "== $1 $2 rc=$? $(el)"; grep -a packed $f | tail -9 | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; grep -a -i "error\|Trace" $f | head -3; }
LDMOE_LIB=$V/nb.so timeout 200 python3 tests/gpu/moe/test_moe_layer.py --digest $OUT/r/dig-nb.txt > $OUT/r/suite-nb.log 2>&1
echo "suite nb rc=$? $(tail -1 $OUT/r/suite-nb.log) $(el)"; grep -a -E "FAIL" $OUT/r/suite-nb.log | head -5; save
for l in a8 opt nb; do run a8 $l --fp8-tokens; done; for l in a8 opt nb; do run bf16 $l; done; save
for l in a8 nb; do run a8 $l --fp8-tokens; done; for l in a8 nb; do run bf16 $l; done; save
cd $OUT && tar czf r.tgz r && rm -rf r
# ---- gpu73.sh ----
# gpu73.sh — nb (prefill-passes 2bc branch head): the suite bound to domain 0 (digests against gpu72's plain run), memcheck, synccheck, racecheck over --tiny
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r build; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v43.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu73.sh $OUT/r/
LD_PRELOAD=$V/libldshim.so LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0 LDMOE_LIB=$V/nb.so timeout 150 python3 tests/gpu/moe/test_moe_layer.py --digest $OUT/r/dig-nb-bound.txt --bound > $OUT/r/suite-nb-bound.log 2>&1
echo "bound rc=$? $(tail -1 $OUT/r/suite-nb-bound.log) $(el)"; grep -a FAIL $OUT/r/suite-nb-bound.log | head -3; save
for t in memcheck synccheck racecheck; do
  LDMOE_LIB=$V/nb.so timeout 150 compute-sanitizer --tool $t --error-exitcode 9 python3 tests/gpu/moe/test_moe_layer.py --tiny > $OUT/r/san-$t.log 2>&1
  echo "$t rc=$? $(grep -a -E 'ERROR SUMMARY|passed' $OUT/r/san-$t.log | tail -2 | tr '\n' ' ') $(el)"; save
done
cd $OUT && tar czf r.tgz r && rm -rf r

# ==== profm.py (run by gpu70.sh and gpu71.sh as .carry/profm.py) ====
# profm.py SHAPE T MODE — four ldmoe.moe calls of one case for ncu (MODE bf16 | a8: e4m3 block-scaled weights, tokens="fp8"); repo root.
import sys, torch
sys.path.insert(0, "kernels/moe"); sys.path.insert(0, "bench/moe")
import ldmoe
from layer_time import SHAPES, routing, quant_blocks
E, k, H, I = SHAPES[sys.argv[1]]; T = int(sys.argv[2]); mode = sys.argv[3]
gen = torch.Generator().manual_seed(7)
w13 = (torch.randn((E, 2 * I, H), device="cuda") * H ** -0.5).to(torch.bfloat16)
w2 = (torch.randn((E, H, I), device="cuda") * I ** -0.5).to(torch.bfloat16)
kw = {}
if mode == "a8":
    q13, s13 = quant_blocks(w13); q2, s2 = quant_blocks(w2)
    W = ldmoe.pack_moe(q13, q2, D=1); kw = {"w13_scale": s13, "w2_scale": s2, "tokens": "fp8"}
else:
    W = ldmoe.pack_moe(w13, w2, D=1)
x = torch.randn((T, H), device="cuda").to(torch.bfloat16)
ids, wts = routing(gen, T, E, k)
out = torch.empty((T, H), device="cuda", dtype=torch.bfloat16)
for _ in range(4):
    ldmoe.moe(x, W, None, ids, wts, out=out, **kw)
torch.cuda.synchronize()
print("ok", sys.argv[1:], out.float().abs().mean().item())

# ==== attr.py (on this machine: nvdisasm -gi -c of the same build's ldmoe_api.sm_90a.cubin, then python3 attr.py DIS CSV.gz KERNEL layer.cuh@5fba591 REGIONS) ====
# attr.py DIS CSV.gz KERNEL_MANGLED LAYER_CUH_COPY — ncu source-page stall samples per layer.cuh region
import re, csv, gzip, collections, sys
dis, csvf, kern, src = sys.argv[1:5]
lines = open(dis).read().split('\n')
start = next(i for i, l in enumerate(lines) if l.startswith('.text.' + kern + ':'))
cur = None; off2 = {}; grp = []
for l in lines[start + 1:]:
    if l.startswith('.text.') or l.startswith('.section'): break
    if '//## File' in l:
        grp += re.findall(r'"([^"]+)", line (\d+)', l)
        continue
    m = re.search(r'/\*([0-9a-f]{4,})\*/\s+(.*?);', l)
    if m:
        if grp:
            lay = [int(n) for f, n in grp if f.endswith('layer.cuh')]
            cur = lay[0] if lay else ('other', grp[0][0].split('/')[-1], grp[0][1])
            grp = []
        off2[int(m.group(1), 16)] = cur
rows = list(csv.reader(gzip.open(csvf, 'rt'))); hdr = rows[1]; data = rows[2:]
ia = hdr.index("Address"); iall = hdr.index("Warp Stall Sampling (All Samples)")
reasons = [h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
base = int(data[0][ia], 16)
src_lines = open(src).read().split('\n')
# regions: from markers in the source
def find(pat, after=0):
    for i in range(after, len(src_lines)):
        if pat in src_lines[i]: return i + 1
    raise SystemExit('marker not found: ' + pat)
body = find('__device__ void moe_layer_body(')
sched = find('// -- scheduler (warp kSched', body)
prod = find('if (warp == kProd) {', sched)
cons = find('} else if (warp < kProd) {', prod)
epi = find('// -- epilogue: reduce the k-split warps', cons)
schedw = find('} else if (warp == kSched) {', epi)
after = find('cp_wait<0>();', schedw)
gb = find('__device__ __forceinline__ void grid_barrier', 0)
def region(ln):
    if not isinstance(ln, int): return 'helper:' + ln[1]
    if gb <= ln < gb + 20: return 'grid_barrier'
    if ln < body: return 'helpers(layer.cuh)'
    if ln < sched: return 'routing+images'
    if ln < prod: return 'scheduler(claims)'
    if ln < cons: return 'producer'
    if ln < epi: return 'consumer loop'
    if ln < schedw: return 'consumer epilogue'
    if ln < after: return 'sched/gather/comb warps'
    return 'final combine'
reg = collections.defaultdict(collections.Counter); tot = 0
for r in data:
    s = int(r[iall] or 0); tot += s
    g = region(off2.get(int(r[ia], 16) - base))
    reg[g]['all'] += s
    for rr in reasons: reg[g][rr] += int(r[hdr.index(rr)] or 0)
print('total samples', tot)
for g, c in sorted(reg.items(), key=lambda x: -x[1]['all']):
    top = ', '.join('%s %d' % (k[6:], v) for k, v in c.most_common(6) if k != 'all')
    print('%-26s %5.1f%%  %s' % (g, 100 * c['all'] / tot, top))
if len(sys.argv) > 5:
    want = sys.argv[5].split(',')
    byl = collections.defaultdict(collections.Counter)
    for r in data:
        s = int(r[iall] or 0)
        ln = off2.get(int(r[ia], 16) - base)
        if region(ln) in want:
            byl[ln]['all'] += s
            for rr in reasons: byl[ln][rr] += int(r[hdr.index(rr)] or 0)
    for ln, c in sorted(byl.items(), key=lambda x: -x[1]['all'])[:30]:
        txt = src_lines[ln - 1].strip()[:70] if isinstance(ln, int) else str(ln)
        print('%5s %5.1f%% %-40s | %s' % (ln if isinstance(ln, int) else '-', 100 * c['all'] / tot,
              ', '.join('%s %d' % (k[6:], v) for k, v in c.most_common(4) if k != 'all'), txt))

# ==== gpu75a.sh, gpu75b.sh, gpu75c.sh, 2026-12-07 ~17:43-17:47 UTC, one warm H100 (v45.tgz: fx.so = e5bb371's libldmoe.so, nb.so = 5a14167's, c4.so = branch comb4's, libldshim.so). gpu74.sh (written last session) did not run: gpu75b.sh and gpu75c.sh are it, split. gpu75a.sh's graph case failed (the test sized another stream's workspace; fixed by 3e39de6): its results are not used. ====
# ---- gpu75a.sh ----
# gpu75a.sh — fx (x given in e4m3, LDMOE_FP8_TOKENS_E4M3_X; work tree over efacbd4): the suite plain (digests) and bound to
# domain 0 (digests compared), then memcheck and synccheck over --tiny.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r build; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v45.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu75a.sh $OUT/r/
LDMOE_LIB=$V/fx.so timeout 200 python3 tests/gpu/moe/test_moe_layer.py --digest $OUT/r/dig-fx.txt > $OUT/r/suite-fx.log 2>&1
echo "plain rc=$? $(tail -1 $OUT/r/suite-fx.log) $(el)"; grep -a -E "FAIL|fp8 x" $OUT/r/suite-fx.log | head -40; save
LD_PRELOAD=$V/libldshim.so LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0 LDMOE_LIB=$V/fx.so timeout 200 python3 tests/gpu/moe/test_moe_layer.py --digest $OUT/r/dig-fx.txt --bound > $OUT/r/suite-fx-bound.log 2>&1
echo "bound rc=$? $(tail -1 $OUT/r/suite-fx-bound.log) $(el)"; grep -a FAIL $OUT/r/suite-fx-bound.log | head -5; grep -a digests $OUT/r/suite-fx-bound.log; save
for t in memcheck synccheck; do
  LDMOE_LIB=$V/fx.so timeout 150 compute-sanitizer --tool $t --error-exitcode 9 python3 tests/gpu/moe/test_moe_layer.py --tiny > $OUT/r/san-$t.log 2>&1
  echo "$t rc=$? $(grep -a -E 'ERROR SUMMARY|passed' $OUT/r/san-$t.log | tail -2 | tr '\n' ' ') $(el)"; grep -a FAIL $OUT/r/san-$t.log | head -3; save
done
cd $OUT && tar czf r.tgz r && rm -rf r
# ---- gpu75b.sh ----
# gpu75b.sh — nb (5a14167, main), fx (FP8 x; its bf16-x paths should time as nb) against c4 (the final combine four items a thread): layer_time FP8 tokens and bf16 at
# T 1024 / 4096, alternated; ncu source-level warp sampling of nb at Qwen3 T 4096 (FP8 tokens) and Mixtral T 1024 (bf16).
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r build; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v45.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu75b.sh $OUT/r/
LDMOE_LIB=$V/fx.so timeout 100 python3 tests/gpu/moe/test_moe_layer.py --digest $OUT/r/dig-fx.txt > $OUT/r/suite-fx.log 2>&1; echo "plain rc=$? $(tail -1 $OUT/r/suite-fx.log) $(el)"; grep -a FAIL $OUT/r/suite-fx.log | head; grep -a "graph replay" $OUT/r/suite-fx.log
run() { f=$OUT/r/lt-$1-$2.txt; LDMOE_LIB=$V/$2.so timeout 80 python3 bench/moe/layer_time.py $3 --tokens 1024,4096 --reps 3 >> $f 2>&1
  echo "== $1 $2 rc=$? $(el)"; grep -a packed $f | tail -6 | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; grep -a -i "error\|Trace" $f | head -3; }
for l in nb c4 fx nb c4; do run a8 $l --fp8-tokens; done; save
for l in fx; do f=$OUT/r/lt-x8.txt; LDMOE_LIB=$V/fx.so timeout 120 python3 bench/moe/layer_time.py --fp8-tokens --tokens 1,4,64,256,1024,4096 --reps 3 >> $f 2>&1
  LDMOE_LIB=$V/fx.so timeout 120 python3 bench/moe/layer_time.py --fp8-x --tokens 1,4,64,256,1024,4096 --reps 3 >> $f 2>&1
  echo "== x8 rc=$? $(el)"; grep -a packed $f | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; grep -a -i "error\|Trace" $f | head -3; done; save
cd $OUT && tar czf r.tgz r && rm -rf r
# ---- gpu75c.sh ----
# gpu75c.sh — nb against c4 at bf16 T 1024 / 4096; ncu source-level warp sampling of nb at Qwen3 T 4096 (FP8 tokens) and Mixtral T 1024 (bf16).
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r build; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v45.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu75c.sh $OUT/r/
run() { f=$OUT/r/lt-$1-$2.txt; LDMOE_LIB=$V/$2.so timeout 80 python3 bench/moe/layer_time.py $3 --tokens 1024,4096 --reps 3 >> $f 2>&1
  echo "== $1 $2 rc=$? $(el)"; grep -a packed $f | tail -6 | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; grep -a -i "error\|Trace" $f | head -3; }
for l in nb c4; do run bf16 $l; done; save
for c in "qwen3 4096 a8" "mixtral 1024 bf16"; do f=$OUT/r/src-${c// /-}
  LDMOE_LIB=$V/nb.so timeout 100 ncu -k regex:moe_layer_kernel --launch-skip 2 --launch-count 1 --section WarpStateStats --section SourceCounters \
    --section SpeedOfLight -o $f python3 .carry/profm.py $c > $f.log 2>&1
  timeout 60 ncu -i $f.ncu-rep --page source --csv --print-source sass > $f-sass.csv 2>/dev/null
  timeout 60 ncu -i $f.ncu-rep --page details > $f-details.txt 2>&1
  echo "ncu $c $(wc -c < $f-sass.csv) $(grep -E 'Duration|L2 Cache Throughput' $f-details.txt | tr -s ' ' | tr '\n' ' ') $(el)"; gzip $f-sass.csv; rm -f $f.ncu-rep; save
done
cd $OUT && tar czf r.tgz r && rm -rf r

# ==== gpu80.sh-gpu83.sh, 2026-12-07 19:21-19:53 UTC: gpu80, gpu81 on one H100 (v48/v49.tgz: sw.so = dba7f7e's libldmoe.so, co.so = branch comb-ovl 4b037d5's, tlsw.so / tlco.so = the same with diag-tl.patch, libldshim.so); gpu82, gpu83 on another (v50.tgz: sw.so, cb.so = cf05098's, tlcb.so = cf05098 + diag-tl.patch). tl.py is diag-tl.patch's bench/moe/tl_diag.py ====
# ---- gpu80.sh ----
# gpu80.sh — co (branch comb-ovl 4b037d5: the wgmma tiles combine a token a warp once its GEMM2 counts are full, no
# last grid barrier) against sw (main dba7f7e's kernel): digests of sw's suite, then co's suite compared with them
# (the combine's sum order is unchanged: the same bits), co bound, memcheck and synccheck over --tiny; then
# layer_time bf16 and FP8 tokens at T 256..4096, sw / co alternated twice.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r build; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v49.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu80.sh $OUT/r/
LDMOE_LIB=$V/sw.so timeout 100 python3 tests/gpu/moe/test_moe_layer.py --digest $OUT/r/dig.txt > $OUT/r/suite-sw.log 2>&1; echo "sw rc=$? $(tail -1 $OUT/r/suite-sw.log) $(el)"
LDMOE_LIB=$V/co.so timeout 100 python3 tests/gpu/moe/test_moe_layer.py --digest $OUT/r/dig.txt > $OUT/r/suite-co.log 2>&1; echo "co rc=$? $(tail -1 $OUT/r/suite-co.log) $(el)"; grep -a -E "FAIL|digests" $OUT/r/suite-co.log | head -5
LD_PRELOAD=$V/libldshim.so LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0 LDMOE_LIB=$V/co.so timeout 100 python3 tests/gpu/moe/test_moe_layer.py --digest $OUT/r/dig.txt --bound > $OUT/r/suite-co-bound.log 2>&1
echo "bound rc=$? $(tail -1 $OUT/r/suite-co-bound.log) $(el)"; grep -a -E "FAIL|digests" $OUT/r/suite-co-bound.log | head -5; save
for t in memcheck synccheck; do
  LDMOE_LIB=$V/co.so timeout 120 compute-sanitizer --tool $t --error-exitcode 9 python3 tests/gpu/moe/test_moe_layer.py --tiny > $OUT/r/san-$t.log 2>&1
  echo "$t rc=$? $(grep -a -E 'ERROR SUMMARY|passed' $OUT/r/san-$t.log | tail -2 | tr '\n' ' ') $(el)"; save
done
run() { f=$OUT/r/lt-$1-$2.txt; LDMOE_LIB=$V/$2.so timeout 80 python3 bench/moe/layer_time.py $3 --tokens 256,1024,4096 --reps 5 >> $f 2>&1
  echo "== $1 $2 rc=$? $(el)"; grep -a packed $f | tail -9 | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; grep -a -i "error\|Trace" $f | head -3; }
for l in sw co sw co; do run bf16 $l; run a8 $l --fp8-tokens; done; save
for l in sw co; do run f8 $l --fp8; done; save
# decode (the decode tile's code is the same in both): the table's T 1..64 of sw
dec() { f=$OUT/r/dec-$1.txt; LDMOE_LIB=$V/sw.so timeout 80 python3 bench/moe/layer_time.py $2 --tokens 1,4,16,64 --reps 5 >> $f 2>&1
  echo "== dec $1 rc=$? $(el)"; grep -a packed $f | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; }
dec bf16; dec f8 --fp8; dec a8 --fp8-tokens; save
cd $OUT && tar czf r.tgz r && rm -rf r
# ---- gpu81.sh ----
# gpu81.sh — DIAGNOSTIC phase stamps (branch tl: tlsw = main + stamps, tlco = comb-ovl + stamps; LDMOE_TL=1, eager
# calls, weights over 3 copies): per launch, min-max over CTAs of the time (us from the first CTA's start) at which
# the routing's barrier, the image pass's barrier, the first GEMM2 tile, the last tile and the CTA's end are passed.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
mkdir -p $OUT/r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v49.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu81.sh .carry/tl.py $OUT/r/
for l in tlsw tlco; do for m in bf16 a8; do
  LDMOE_TL=1 LDMOE_LIB=$V/$l.so timeout 120 python3 .carry/tl.py $m qwen3,dsv2lite,mixtral 256,1024,4096 > $OUT/r/tl-$l-$m.txt 2>&1
  echo "$l $m rc=$? $(grep -c '^TL' $OUT/r/tl-$l-$m.txt) lines $(el)"; grep -a -i "error\|Trace" $OUT/r/tl-$l-$m.txt | head -3
done; done
cd $OUT && tar czf r.tgz r && rm -rf r
# ---- gpu82.sh ----
# gpu82.sh — cb (branch comb-batch: the combines' slot loads batched, 8 in flight; the image pass 8 chunks a lane)
# against sw (main dba7f7e): sw's digests, cb's suite compared (same sum order: the same bits), cb bound, memcheck and
# synccheck --tiny; layer_time bf16 / FP8 tokens T 256..4096 and decode T 1..64, sw / cb alternated twice; weight-only
# FP8 once each; phase stamps of tlcb (cb + the tl stamps) beside gpu81's.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r build; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v50.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu82.sh $OUT/r/
LDMOE_LIB=$V/sw.so timeout 100 python3 tests/gpu/moe/test_moe_layer.py --digest $OUT/r/dig.txt > $OUT/r/suite-sw.log 2>&1; echo "sw rc=$? $(tail -1 $OUT/r/suite-sw.log) $(el)"
LDMOE_LIB=$V/cb.so timeout 100 python3 tests/gpu/moe/test_moe_layer.py --digest $OUT/r/dig.txt > $OUT/r/suite-cb.log 2>&1; echo "cb rc=$? $(tail -1 $OUT/r/suite-cb.log) $(el)"; grep -a -E "FAIL|digests" $OUT/r/suite-cb.log | head -5
LD_PRELOAD=$V/libldshim.so LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0 LDMOE_LIB=$V/cb.so timeout 100 python3 tests/gpu/moe/test_moe_layer.py --digest $OUT/r/dig.txt --bound > $OUT/r/suite-cb-bound.log 2>&1
echo "bound rc=$? $(tail -1 $OUT/r/suite-cb-bound.log) $(el)"; grep -a -E "FAIL|digests" $OUT/r/suite-cb-bound.log | head -5; save
for t in memcheck synccheck; do
  LDMOE_LIB=$V/cb.so timeout 120 compute-sanitizer --tool $t --error-exitcode 9 python3 tests/gpu/moe/test_moe_layer.py --tiny > $OUT/r/san-$t.log 2>&1
  echo "$t rc=$? $(grep -a -E 'ERROR SUMMARY|passed' $OUT/r/san-$t.log | tail -2 | tr '\n' ' ') $(el)"; save
done
run() { f=$OUT/r/lt-$1-$2.txt; LDMOE_LIB=$V/$2.so timeout 80 python3 bench/moe/layer_time.py $4 --tokens $3 --reps 5 >> $f 2>&1
  echo "== $1 $2 rc=$? $(el)"; grep -a packed $f | tail -9 | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; grep -a -i "error\|Trace" $f | head -3; }
for l in sw cb sw cb; do run bf16 $l 256,1024,4096; run a8 $l 256,1024,4096 --fp8-tokens; run dec $l 1,4,16,64; done; save
for l in sw cb; do run f8 $l 256,1024,4096 --fp8; done; save
LDMOE_TL=1 LDMOE_LIB=$V/tlcb.so timeout 120 python3 .carry/tl.py bf16 qwen3,dsv2lite,mixtral 256,1024,4096 > $OUT/r/tl-tlcb-bf16.txt 2>&1; echo "tl bf16 rc=$? $(el)"
LDMOE_TL=1 LDMOE_LIB=$V/tlcb.so timeout 120 python3 .carry/tl.py a8 qwen3,dsv2lite,mixtral 256,1024,4096 > $OUT/r/tl-tlcb-a8.txt 2>&1; echo "tl a8 rc=$? $(el)"
cd $OUT && tar czf r.tgz r && rm -rf r
# ---- gpu83.sh ----
# gpu83.sh — test-gpu-e2e (serve.py in every state, fused bf16 and FP8) on cb (branch comb-batch's libldmoe)
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
mkdir -p $OUT/r build; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v50.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu83.sh $OUT/r/
cp $V/cb.so build/libldmoe.so; cp $V/libldshim.so build/libldshim.so
timeout 420 bash tests/gpu/e2e/run.sh $OUT/r/e2e > $OUT/r/test-gpu-e2e.log 2>&1; echo "e2e rc=$? $(tail -1 $OUT/r/test-gpu-e2e.log) $(el)"; grep -a -E "^FAIL|^not ok|bad" $OUT/r/test-gpu-e2e.log | head -5
cd $OUT && tar czf r.tgz r && rm -rf r
