# gpu37.sh — layer-hyb (v/hyb.so, e7317f5; its test_moe_layer.py checked out) and layer-fcomb (v/fcomb.so: hyb + bf16 slots
# + the wgmma tiles' combine in one pass after a grid barrier) verified: suite plain+bound, memcheck/synccheck --tiny.
# layer_time T 256/1024/4096: main (62f3b1a), hyb, d1 (hyb without the wgmma tiles' GEMM2 arrivals+combine), d2 (also without
# slot stores), d3 (hyb without wgmmas) -- d1-d3 timing only, wrong outputs --, bfs (hyb + bf16 slots), fcomb; then decode T 1-64.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
. .carry/prep.sh
tar xzf .carry/v18.tgz -C .carry; V=$PWD/.carry/v
for v in hyb fcomb; do
  cp $V/$v.so build/libldmoe.so; touch build/libldmoe.so
  $M test-gpu-moe-layer > $OUT/r/test-gpu-moe-layer-$v.log 2>&1; echo "$v suite rc=$? $(grep -a -E 'passed|failed' $OUT/r/test-gpu-moe-layer-$v.log | tail -3 | tr '\n' ' ') $(el)"; save
  for t in memcheck synccheck; do
    LDMOE_LIB=$V/$v.so timeout 90 compute-sanitizer --tool $t --error-exitcode 9 python3 tests/gpu/moe/test_moe_layer.py --tiny > $OUT/r/san-$t-$v.log 2>&1
    echo "$v $t rc=$? $(tail -2 $OUT/r/san-$t-$v.log | tr '\n' ' ') $(el)"; save; done
done
i=0; for v in main hyb d1 d2 d3 bfs fcomb main hyb bfs fcomb; do i=$((i+1)); f=$OUT/r/lt-$i-$v.txt
  LDMOE_LIB=$V/$v.so timeout 60 python3 bench/moe/layer_time.py --tokens 256,1024,4096 --reps 5 > $f 2>&1
  echo "== $v $(el)"; grep packed $f | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; save; done
for v in hyb bfs hyb bfs; do i=$((i+1)); f=$OUT/r/lt-$i-$v-dec.txt
  LDMOE_LIB=$V/$v.so timeout 60 python3 bench/moe/layer_time.py --tokens 1,4,16,64 --reps 5 > $f 2>&1
  echo "== $v $(el)"; grep packed $f | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; save; done
cd $OUT && tar czf r.tgz r && rm -rf r
