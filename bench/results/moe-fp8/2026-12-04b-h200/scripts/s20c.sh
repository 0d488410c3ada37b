#!/bin/bash
# session 20, call c: how precise one bench_moe run is. Four peers run the same machine code at
# decode (the product's rowwise call, the same call again as "row_same", the lab's AUTO with tune
# 0 and with 0x400, the default's order at decode); their spread per row, with --reps 30 (the
# default) under two order seeds and with --reps 200 under three; and the --variants mode's own
# same-code control once.
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/d90/libldmoe.so LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
D=/tmp/s20c; mkdir -p $D
trap 'tar czf $OUT/s20c.tgz -C /tmp s20c' EXIT
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
V=rowwise:auto:0,rowwise:auto:0x400
for rs in 30:1 30:2 200:1 200:2 200:3; do
  r=${rs%:*}; s=${rs#*:}
  step r${r}s$s 150 python3 bench/moe/bench_moe.py --fp8 --lab --fp8-variants $V --layout packed --shapes 0,1,2 --tokens 8,64 --reps $r --order-seed $s --outdir $D/r${r}s$s
  python3 - $D/r${r}s$s/moe-fp8.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    t = r["us"]; same = [t["row"], t["row_same"], t["v:rowwise:auto:0x0"], t["v:rowwise:auto:0x400"]]
    print("E=%d m=%d same-code peers %s spread %.1f %% | torch/row %.3f" % (r["E"], r["m"], " ".join("%.1f" % v for v in same),
          100 * (max(same) / min(same) - 1), t["torch"] / t["row"]))
PY
done
step variants 120 python3 bench/moe/bench_moe.py --lab --variants auto:0,ws128x64:0 --layout packed --shapes 0,2 --tokens 8,64 --reps 100 --outdir $D/variants
tail -8 $D/variants.log
