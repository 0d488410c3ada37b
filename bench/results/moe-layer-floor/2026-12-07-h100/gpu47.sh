# gpu47.sh — gw (v/gw.so = main 5afa04c: GEMM1 rows gathered where 2I/BM <= 12, 16-byte combine) and mc (v/mc.so:
# gw + clusters of two CTAs for the wgmma tiles, layer-mc) beside main (v/main.so = 1ab283f), one call:
# suites (gw plain+bound; mc --tiny first, then plain+bound with its test file), layer_time T 256/1024/4096
# main/gw/mc x2, sanitizers --tiny, decode T 1-64, peers (torch._grouped_mm, cuBLAS bmm).
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
save() { (cd $OUT && tar czf r.tgz r); }
mkdir -p $OUT/r; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/r/gpu.txt
tar xzf .carry/v26.tgz -C .carry; V=$PWD/.carry/v
cp .carry/gpu47.sh $OUT/r/; cp $V/test_moe_layer_mc.py tests/gpu/moe/test_moe_layer_mc.py
suite() {  # lib testfile tag
  local d=$(mktemp -d)
  LDMOE_LIB=$V/$1.so timeout 150 python3 tests/gpu/moe/$2 --digest $d/dg > $OUT/r/suite-plain-$3.log 2>&1
  echo "$3 plain rc=$? $(tail -1 $OUT/r/suite-plain-$3.log) $(el)"
  LD_PRELOAD=$V/libldshim.so LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0 LDMOE_LIB=$V/$1.so timeout 150 python3 tests/gpu/moe/$2 --digest $d/dg --bound > $OUT/r/suite-bound-$3.log 2>&1
  echo "$3 bound rc=$? $(tail -1 $OUT/r/suite-bound-$3.log) $(el)"; grep -a FAIL $OUT/r/suite-*-$3.log | head -8 | cut -c1-300; save
}
suite gw test_moe_layer.py gw
LDMOE_LIB=$V/mc.so timeout 60 python3 tests/gpu/moe/test_moe_layer_mc.py --tiny > $OUT/r/tiny-mc.log 2>&1; rc=$?
echo "mc tiny rc=$rc $(tail -1 $OUT/r/tiny-mc.log) $(el)"; grep -a FAIL $OUT/r/tiny-mc.log | head -5 | cut -c1-300; save
MC=""; [ $rc = 0 ] && MC=mc
[ -n "$MC" ] && suite mc test_moe_layer_mc.py mc
i=0; for v in main gw $MC main gw $MC; do i=$((i+1)); f=$OUT/r/lt-$i-$v.txt
  LDMOE_LIB=$V/$v.so timeout 75 python3 bench/moe/layer_time.py --tokens 256,1024,4096 --reps 5 > $f 2>&1
  echo "== $v rc=$? $(el)"; grep packed $f | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; save; done
for v in gw $MC; do for t in memcheck synccheck; do
  tf=test_moe_layer.py; [ $v = mc ] && tf=test_moe_layer_mc.py
  LDMOE_LIB=$V/$v.so timeout 100 compute-sanitizer --tool $t --error-exitcode 9 python3 tests/gpu/moe/$tf --tiny > $OUT/r/san-$t-$v.log 2>&1
  echo "$v $t rc=$? $(tail -2 $OUT/r/san-$t-$v.log | tr '\n' ' ') $(el)"; save; done; done
for v in main gw; do i=$((i+1)); f=$OUT/r/lt-$i-$v-dec.txt
  LDMOE_LIB=$V/$v.so timeout 50 python3 bench/moe/layer_time.py --tokens 1,4,16,64 --reps 5 > $f 2>&1
  echo "== $v $(el)"; grep packed $f | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; save; done
f=$OUT/r/lt-peers.txt; LDMOE_LIB=$V/gw.so timeout 120 python3 bench/moe/layer_time.py --tokens 1024,4096 --reps 5 --gemm-peer --bmm-peer > $f 2>&1
echo "== peers $(el)"; cat $f
cd $OUT && tar czf r.tgz r && rm -rf r
