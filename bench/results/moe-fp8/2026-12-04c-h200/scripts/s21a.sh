#!/bin/bash
# session 21, call a: the consumers take the tile the producer decoded (s_ring_tile) instead of
# decoding each ticket again (lab bit 0x1000 = the old way). The lab FP8 suite (every tile exactly
# once, with and without the bit), lab variants as interleaved peers in one process (two order
# seeds; decode and prefill), and the per-CTA exits under both.
export PYTHONUNBUFFERED=1
export LDMOE_LIB=$PWD/build/d90/libldmoe.so LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
S=bench/results/moe-fp8/2026-12-04b-h200/scripts
D=/tmp/s21a; mkdir -p $D
trap 'tar czf $OUT/s21a.tgz -C /tmp s21a' EXIT
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
step labfp8 170 python3 tests/gpu/moe/test_moe.py --lab --fp8-only
grep -v "^PASS" $D/labfp8.log | tail -3
V="rowwise:auto:0,rowwise:auto:0x1000,block:auto:0,block:auto:0x1000"
for s in 1 2; do
  step var$s 130 python3 bench/moe/bench_moe.py --fp8 --lab --fp8-variants $V --layout packed --shapes 0,1,2 --tokens 8,64,512 --order-seed $s --outdir $D/var$s
  python3 - $D/var$s/moe-fp8.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    t = r["us"]
    a, b = t["v:rowwise:auto:0x0"], t["v:rowwise:auto:0x1000"]
    c, d = t["v:block:auto:0x0"], t["v:block:auto:0x1000"]
    print("E=%3d m=%3d row %.1f same %.1f | rw new %.1f old %.1f new/old %.3f | blk new %.1f old %.1f new/old %.3f | same %.3f floor %.1f" % (
          r["E"], r["m"], t["row"], t["row_same"], a, b, a / b, c, d, c / d, t["row_same"] / t["row"], t.get("floor", 0)))
PY
done
step tail 120 python3 $S/tail_timeline.py $D/tail.json 0,0x1000
cat $D/tail.log
