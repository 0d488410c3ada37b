#!/bin/bash
# session 23, call a: what stands between the FP8 decode rows and 90 % of copy? (The plan of the
# twenty-second session's s22a, whose results were lost with that session, extended.) The
# diagnostic lab build removes work from the full kernel: its wgmmas (0x40000000), its output
# stores (0x20000000), both (0x60000000), and both plus the token boxes (0x70000000: the bare
# skeleton of claims, ring and weight stream).
#  1. sustained.py: seconds-long blocks of one variant, nvidia-smi's SM clock and board power
#     sampled meanwhile (does the math's power slow E=8 m=64 through the clock?);
#  2. bench_moe.py: the same variants as interleaved peers of torch and the floor, two order seeds;
#  3. tail_timeline.py: per-CTA first stage and exit stamps under each variant (start, tail).
# Libraries built on the CPU machine (sm_90a) and carried in carry/ (make BUILD=build/d90 LDMOE_GENCODE=-gencode=arch=compute_90a,code=sm_90a ...).
export PYTHONUNBUFFERED=1
B=$PWD/carry
export LDMOE_LIB=$B/libldmoe.so LDMOE_FLOOR_LIB=$B/moe/libstreamfloor.so LDMOE_LAB_LIB=$B/lab/diag/libldmoe_lab.so
D=/tmp/s23a; mkdir -p $D
trap 'tar czf $OUT/s23a.tgz -C /tmp s23a' EXIT
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
V=auto:aware:0,auto:aware:0x40000000,auto:aware:0x20000000,auto:aware:0x60000000,auto:aware:0x70000000
step sus-e8-m64 80 python3 bench/moe/sustained.py --fp8 --layout packed --shape 0 --m 64 --variants $V --seconds 1.2 --rounds 2
step sus-e8-m8 80 python3 bench/moe/sustained.py --fp8 --layout packed --shape 0 --m 8 --variants $V --seconds 1.2 --rounds 2
step sus-e128-m8 80 python3 bench/moe/sustained.py --fp8 --layout packed --shape 2 --m 8 --variants $V --seconds 1.2 --rounds 2
for f in $D/sus-*.log; do echo "-- $f"; grep -E "^E=|^\| [0-9]|Error|error" $f; done
FV=rowwise:auto:0,rowwise:auto:0x40000000,rowwise:auto:0x20000000,rowwise:auto:0x60000000,rowwise:auto:0x70000000
for s in 1 2; do
  step var$s 150 python3 bench/moe/bench_moe.py --fp8 --lab --fp8-variants $FV --layout packed --shapes 0,1,2 --tokens 8,64 --order-seed $s --outdir $D/var$s
  python3 - $D/var$s/moe-fp8.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    t = r["us"]; wb = r["weight_bytes"]
    pc = lambda us: 100 * wb / (us * 1e-6) / 4.25e12
    v = [t[k] for k in ("v:rowwise:auto:0x0", "v:rowwise:auto:0x40000000", "v:rowwise:auto:0x20000000",
                        "v:rowwise:auto:0x60000000", "v:rowwise:auto:0x70000000")]
    print("E=%3d m=%2d row %.1f (%.1f%%) same %.1f floor %.1f | lab full %.1f nomma %.1f nostore %.1f neither %.1f (%.1f%%) skeleton %.1f (%.1f%%) | clk %s" % (
          r["E"], r["m"], t["row"], pc(t["row"]), t["row_same"], t.get("floor", 0), v[0], v[1], v[2], v[3], pc(v[3]), v[4], pc(v[4]),
          r.get("sm_clock")))
PY
done
step tail 120 python3 bench/moe/tail_timeline.py $D/tail.json 0,0x40000000,0x60000000,0x70000000
cat $D/tail.log
