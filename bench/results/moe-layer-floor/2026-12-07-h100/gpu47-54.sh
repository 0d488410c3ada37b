# ==== gpu47.sh ====
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

# ==== gpu48.sh ====
# gpu48.sh — why the clustered tiles (mc) are slower: ncu LaunchStats + SpeedOfLight + DRAM/L2 bytes of one launch,
# gw and mc, Mixtral T=1024 and Qwen3 T=4096 (prof.py: packed D=1, layer_time's router).
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
mkdir -p $OUT/r; tar xzf .carry/v26.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu48.sh $OUT/r/
for c in "mixtral 1024" "qwen3 4096"; do for v in gw mc; do f=$OUT/r/ncu-$v-${c// /-}.txt
  LDMOE_LIB=$V/$v.so timeout 120 ncu -k regex:moe_layer_kernel --launch-skip 2 --launch-count 1 --section LaunchStats --section SpeedOfLight --section Occupancy \
    --metrics dram__bytes_read.sum,lts__t_bytes.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed python3 .carry/prof.py $c > $f 2>&1
  echo "== $v $c rc=$? $(el)"; grep -E "Duration|Grid Size|Cluster|Block Limit|dram__bytes|lts__t_bytes|hit_rate|hmma|Compute \(SM\) Thr|Memory Thr|L2 Cache Thr|Waves" $f | sed 's/  */ /g'
done; done
cd $OUT && tar czf r.tgz r && rm -rf r

# ==== gpu49.sh ====
# gpu49.sh — the clustered launch's grid (torch.profiler), gw vs mc, Mixtral T=1024 and Qwen3 T=4096.
export PYTHONUNBUFFERED=1
mkdir -p $OUT/r; tar xzf .carry/v26.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu49.sh .carry/kgrid.py $OUT/r/
for c in "mixtral 1024" "qwen3 4096"; do for v in gw mc; do
  LDMOE_LIB=$V/$v.so timeout 60 python3 .carry/kgrid.py $c 2>&1 | tail -3 | tee -a $OUT/r/kgrid.txt; done; done
cd $OUT && tar czf r.tgz r && rm -rf r

# ==== gpu50.sh ====
# gpu50.sh — mc2 (mc with the remote empty arrival at the default .cta release and a nanosleep in rank 1's claim wait)
# beside gw and mc: layer_time T 1024/4096, alternated.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
mkdir -p $OUT/r; tar xzf .carry/v27.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu50.sh $OUT/r/
i=0; for v in gw mc mc2 gw mc2; do i=$((i+1)); f=$OUT/r/lt-$i-$v.txt
  LDMOE_LIB=$V/$v.so timeout 60 python3 bench/moe/layer_time.py --tokens 1024,4096 --reps 5 > $f 2>&1
  echo "== $v rc=$? $(el)"; grep packed $f | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; done
cd $OUT && tar czf r.tgz r && rm -rf r

# ==== gpu53.sh ====
# gpu53.sh — the weights' L2 policy of the wgmma tiles: gw2 (main 7d02366: evict-first where experts average <= 2
# m-blocks, else evict-normal), p3 (evict-first to 3 m-blocks), pf (evict-first always); layer_time T 256/1024/4096 x2.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
mkdir -p $OUT/r; tar xzf .carry/v29.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu53.sh $OUT/r/
i=0; for v in gw2 p3 pf gw2 p3 pf; do i=$((i+1)); f=$OUT/r/lt-$i-$v.txt
  LDMOE_LIB=$V/$v.so timeout 60 python3 bench/moe/layer_time.py --tokens 256,1024,4096 --reps 5 > $f 2>&1
  echo "== $v rc=$? $(el)"; grep packed $f | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; done
cd $OUT && tar czf r.tgz r && rm -rf r

# ==== gpu54.sh ====
# gpu54.sh — the weights' L2 policy: gw2 (main 7d02366) against pl (evict-last where experts average > 2 m-blocks)
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
mkdir -p $OUT/r; tar xzf .carry/v30.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu54.sh $OUT/r/
i=0; for v in gw2 pl gw2 pl; do i=$((i+1)); f=$OUT/r/lt-$i-$v.txt
  LDMOE_LIB=$V/$v.so timeout 60 python3 bench/moe/layer_time.py --tokens 256,1024,4096 --reps 5 > $f 2>&1
  echo "== $v rc=$? $(el)"; grep packed $f | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; done
cd $OUT && tar czf r.tgz r && rm -rf r

# ==== kgrid.py ====
# kgrid.py SHAPE T — one ldmoe.moe launch under torch.profiler: the layer kernel's name, grid, block, cluster and time.
import json, os, sys, tempfile, torch
sys.path.insert(0, "kernels/moe"); sys.path.insert(0, "bench/moe")
import ldmoe
from layer_time import SHAPES, routing
from torch.profiler import profile, ProfilerActivity
E, k, H, I = SHAPES[sys.argv[1]]; T = int(sys.argv[2])
gen = torch.Generator().manual_seed(7)
w13 = (torch.randn((E, 2 * I, H), device="cuda") * H ** -0.5).to(torch.bfloat16)
w2 = (torch.randn((E, H, I), device="cuda") * I ** -0.5).to(torch.bfloat16)
W = ldmoe.pack_moe(w13, w2, D=1)
x = torch.randn((T, H), device="cuda").to(torch.bfloat16)
ids, wts = routing(gen, T, E, k)
out = torch.empty((T, H), device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    ldmoe.moe(x, W, None, ids, wts, out=out)
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(3):
        ldmoe.moe(x, W, None, ids, wts, out=out)
    torch.cuda.synchronize()
f = tempfile.mktemp(suffix=".json"); prof.export_chrome_trace(f)
for ev in json.load(open(f))["traceEvents"]:
    if "moe_layer_kernel" in ev.get("name", "") and ev.get("cat") == "kernel":
        a = ev.get("args", {})
        print(sys.argv[1], T, ev["name"][:60], "grid", a.get("grid"), "block", a.get("block"), "cluster", a.get("cluster"),
              "smem", a.get("shared memory"), "us %.1f" % ev["dur"])

# ==== prof.py ====
# prof.py SHAPE T — four ldmoe.moe calls of one case (packed D = 1, layer_time.py's router) for ncu; run from the repository root.
import os, sys, torch
sys.path.insert(0, "kernels/moe"); sys.path.insert(0, "bench/moe")
import ldmoe
from layer_time import SHAPES, routing
E, k, H, I = SHAPES[sys.argv[1]]; T = int(sys.argv[2])
gen = torch.Generator().manual_seed(7)
w13 = (torch.randn((E, 2 * I, H), device="cuda") * H ** -0.5).to(torch.bfloat16)
w2 = (torch.randn((E, H, I), device="cuda") * I ** -0.5).to(torch.bfloat16)
W = ldmoe.pack_moe(w13, w2, D=1)
x = torch.randn((T, H), device="cuda").to(torch.bfloat16)
ids, wts = routing(gen, T, E, k)
out = torch.empty((T, H), device="cuda", dtype=torch.bfloat16)
for _ in range(4):
    ldmoe.moe(x, W, None, ids, wts, out=out)
torch.cuda.synchronize()
print("ok", sys.argv[1], T)

