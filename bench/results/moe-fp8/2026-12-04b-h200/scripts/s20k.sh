#!/bin/bash
# session 20, call k: are tile boundaries what the 128-expert decode loses against the floor
# (11.6 tiles per CTA there, 6.8 on 8 experts)? The 256-row rowwise tile (half the tiles, twice
# as long) against AUTO's 128-row one, lab variants in one process, two order seeds.
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/d90/libldmoe.so LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
D=/tmp/s20k; mkdir -p $D
trap 'tar czf $OUT/s20k.tgz -C /tmp s20k' EXIT
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
for s in 1 2; do
  step v-s$s 150 python3 bench/moe/bench_moe.py --fp8 --lab --fp8-variants rowwise:ws128x64c16fp8:0,rowwise:ws256x64c16fp8:0 --layout packed --shapes 0,1,2 --tokens 8,64 --order-seed $s --outdir $D/v-s$s
  python3 - $D/v-s$s/moe-fp8.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    t = r["us"]
    print("E=%3d m=%2d row %.1f row_same %.1f 128x64 %.1f 256x64 %.1f floor %.1f | 256/128 %.3f same %.3f" % (r["E"], r["m"], t["row"], t["row_same"],
          t["v:rowwise:ws128x64c16fp8:0x0"], t["v:rowwise:ws256x64c16fp8:0x0"], t.get("floor", 0),
          t["v:rowwise:ws256x64c16fp8:0x0"] / t["v:rowwise:ws128x64c16fp8:0x0"], t["row_same"] / t["row"]))
PY
done
