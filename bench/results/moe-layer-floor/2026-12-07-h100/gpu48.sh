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
