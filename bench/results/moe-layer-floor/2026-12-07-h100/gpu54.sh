# gpu54.sh — the weights' L2 policy: gw2 (main 7d02366) against pl (evict-last where experts average > 2 m-blocks)
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
mkdir -p $OUT/r; tar xzf .carry/v30.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu54.sh $OUT/r/
i=0; for v in gw2 pl gw2 pl; do i=$((i+1)); f=$OUT/r/lt-$i-$v.txt
  LDMOE_LIB=$V/$v.so timeout 60 python3 bench/moe/layer_time.py --tokens 256,1024,4096 --reps 5 > $f 2>&1
  echo "== $v rc=$? $(el)"; grep packed $f | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; done
cd $OUT && tar czf r.tgz r && rm -rf r
