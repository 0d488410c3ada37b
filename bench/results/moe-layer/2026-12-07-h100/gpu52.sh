# gpu52.sh — gw2 (main + x's stage image left out of the workspace where the wgmma tiles gather): its suite plain and
# bound, memcheck --tiny; then serve.py decode on the Qwen3-like config with --profile (torch.profiler, the layer's
# share of the step) and plainly, torch and ldmoe --moe fused, batch 1 and 32.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r; tar xzf .carry/v28.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu52.sh $OUT/r/
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
d=$(mktemp -d)
LDMOE_LIB=$V/gw2.so timeout 150 python3 tests/gpu/moe/test_moe_layer.py --digest $d/dg > $OUT/r/suite-plain.log 2>&1
echo "plain rc=$? $(tail -1 $OUT/r/suite-plain.log) $(el)"
LD_PRELOAD=$V/libldshim.so LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0 LDMOE_LIB=$V/gw2.so timeout 150 python3 tests/gpu/moe/test_moe_layer.py --digest $d/dg --bound > $OUT/r/suite-bound.log 2>&1
echo "bound rc=$? $(tail -1 $OUT/r/suite-bound.log) $(el)"; grep -a FAIL $OUT/r/suite-*.log | head -5 | cut -c1-300; save
LDMOE_LIB=$V/gw2.so timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 python3 tests/gpu/moe/test_moe_layer.py --tiny > $OUT/r/san-memcheck.log 2>&1
echo "memcheck rc=$? $(tail -2 $OUT/r/san-memcheck.log | tr '\n' ' ') $(el)"; save
q="--experts 128 --topk 8 --hidden 2048 --ffn 768 --heads 32 --kv-heads 4 --layers 4 --steps 64"
for b in 1 32; do for be in torch fused; do
  case $be in torch) args="--backend torch" ;; fused) args="--backend ldmoe --moe fused --layout packed" ;; esac
  f=$OUT/r/prof-$b-$be.txt
  LDMOE_LIB=$V/gw2.so timeout 120 python3 bench/apps/serve.py $args $q --batch $b --profile > $f 2>&1
  echo "== batch $b $be rc=$? $(el)"; grep -E "^(decode|busy):|moe_layer_kernel|cutlass" $f | head -4 | cut -c1-170
  LDMOE_LIB=$V/gw2.so timeout 120 python3 bench/apps/serve.py $args $q --batch $b --no-busy --check > $OUT/r/serve-$b-$be.txt 2>&1
  echo "   plain rc=$? $(grep -E '^(decode|generated):' $OUT/r/serve-$b-$be.txt | tr '\n' ' ' | cut -c1-220)"; save
done; done
cd $OUT && tar czf r.tgz r && rm -rf r
