# gpu50.sh — mc2 (mc with the remote empty arrival at the default .cta release and a nanosleep in rank 1's claim wait)
# beside gw and mc: layer_time T 1024/4096, alternated.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s]"; }
mkdir -p $OUT/r; tar xzf .carry/v27.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu50.sh $OUT/r/
i=0; for v in gw mc mc2 gw mc2; do i=$((i+1)); f=$OUT/r/lt-$i-$v.txt
  LDMOE_LIB=$V/$v.so timeout 60 python3 bench/moe/layer_time.py --tokens 1024,4096 --reps 5 > $f 2>&1
  echo "== $v rc=$? $(el)"; grep packed $f | awk '{printf "%s/%s %s %s; ", $1, $3, $4, $7} END {print ""}'; done
cd $OUT && tar czf r.tgz r && rm -rf r
