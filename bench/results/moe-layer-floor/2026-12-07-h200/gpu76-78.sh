# ==== gpu76.sh ====
# gpu76.sh — sw (fp8x + silu_mul, the branch head) : the suite plain and bound (digests), memcheck, synccheck over --tiny;
# then sw against fx (fp8x, IEEE division in SwiGLU) at T 1..4096, bf16 and FP8 tokens, alternated twice.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r build; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v46.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu76.sh $OUT/r/
LDMOE_LIB=$V/sw.so timeout 100 python3 tests/gpu/moe/test_moe_layer.py --digest $OUT/r/dig-sw.txt > $OUT/r/suite-sw.log 2>&1
echo "plain rc=$? $(tail -1 $OUT/r/suite-sw.log) $(el)"; grep -a FAIL $OUT/r/suite-sw.log | head -5
LD_PRELOAD=$V/libldshim.so LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0 LDMOE_LIB=$V/sw.so timeout 100 python3 tests/gpu/moe/test_moe_layer.py --digest $OUT/r/dig-sw.txt --bound > $OUT/r/suite-sw-bound.log 2>&1
echo "bound rc=$? $(tail -1 $OUT/r/suite-sw-bound.log) $(el)"; grep -a -E "FAIL|digests|bound:" $OUT/r/suite-sw-bound.log | head -5; save
for t in memcheck synccheck; do
  LDMOE_LIB=$V/sw.so timeout 120 compute-sanitizer --tool $t --error-exitcode 9 python3 tests/gpu/moe/test_moe_layer.py --tiny > $OUT/r/san-$t.log 2>&1
  echo "$t rc=$? $(grep -a -E 'ERROR SUMMARY|passed' $OUT/r/san-$t.log | tail -2 | tr '\n' ' ') $(el)"; grep -a FAIL $OUT/r/san-$t.log | head -3; save
done
run() { f=$OUT/r/lt-$1-$2.txt; LDMOE_LIB=$V/$2.so timeout 80 python3 bench/moe/layer_time.py $3 --tokens 1,4,64,256,1024,4096 --reps 3 >> $f 2>&1
  echo "== $1 $2 rc=$? $(el)"; grep -a packed $f | tail -18 | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; grep -a -i "error\|Trace" $f | head -3; }
for l in fx sw fx sw; do run bf16 $l; run a8 $l --fp8-tokens; done; save
cd $OUT && tar czf r.tgz r && rm -rf r

# ==== gpu78.sh (gpu77.sh, the same on an H100, found none) ====
# gpu78.sh — weight-only FP8 of main (nb: efacbd4's kernel) against sw (the fp8x branch: x given in e4m3, silu_mul),
# alternated twice; sw with x given in e4m3 (--fp8-x) against bf16 x quantized inside (--fp8-tokens), alternated twice;
# then test-gpu-e2e on sw. (nb against sw in bf16 and FP8 tokens: gpu76.sh, the same kind of GPU.)
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r build; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v47.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu78.sh $OUT/r/
run() { f=$OUT/r/lt-$1-$2.txt; LDMOE_LIB=$V/$2.so timeout 80 python3 bench/moe/layer_time.py $3 --tokens 1,4,16,64,256,1024,4096 --reps 5 >> $f 2>&1
  echo "== $1 $2 rc=$? $(el)"; grep -a packed $f | tail -21 | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; grep -a -i "error\|Trace" $f | head -3; }
for l in nb sw nb sw; do run f8 $l --fp8; done; save
for i in 1 2; do run a8 sw --fp8-tokens; run x8 sw --fp8-x; done; save
cp $V/sw.so build/libldmoe.so; cp $V/libldshim.so build/libldshim.so
timeout 330 bash tests/gpu/e2e/run.sh $OUT/r/e2e > $OUT/r/test-gpu-e2e.log 2>&1; echo "e2e rc=$? $(tail -1 $OUT/r/test-gpu-e2e.log) $(el)"; grep -a -E "^FAIL|^not ok|bad" $OUT/r/test-gpu-e2e.log | head -5
cd $OUT && tar czf r.tgz r && rm -rf r
