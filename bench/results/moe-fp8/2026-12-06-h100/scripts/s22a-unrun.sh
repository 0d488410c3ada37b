#!/bin/bash
# session 22, call a: what stands between the FP8 decode rows and 90 % of copy? The diagnostic
# lab build without the wgmmas (0x40000000) and without wgmmas and stores (0x60000000) against
# the full kernel: (1) sustained blocks of one variant at a time, with nvidia-smi's SM clock and
# board power sampled meanwhile (is the math's power what slows E=8 m=64?), plus the schedule
# modes at E=128 m=8; (2) the same variants interleaved with torch and the floor (bench_moe.py,
# two order seeds). Libraries built on the CPU machine (sm_90a) and carried in carry/.
export PYTHONUNBUFFERED=1
C=$PWD/carry
export LDMOE_LIB=$C/libldmoe.so LDMOE_FLOOR_LIB=$C/moe/libstreamfloor.so
DIAG=$C/lab/diag/libldmoe_lab.so
D=/tmp/s22a; mkdir -p $D
trap 'tar czf $OUT/s22a.tgz -C /tmp s22a' EXIT
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
V3=auto:aware:0,auto:aware:0x40000000,auto:aware:0x60000000
export LDMOE_LAB_LIB=$DIAG
step sus-e8-m64 90 python3 bench/moe/sustained.py --fp8 --layout packed --shape 0 --m 64 --variants $V3 --seconds 1.5 --rounds 2
step sus-e8-m8 90 python3 bench/moe/sustained.py --fp8 --layout packed --shape 0 --m 8 --variants $V3 --seconds 1.5 --rounds 2
step sus-e128-m8 90 python3 bench/moe/sustained.py --fp8 --layout packed --shape 2 --m 8 --variants $V3,auto:unaware:0,auto:static:0 --seconds 1.5 --rounds 2
step sus-e128-m64 90 python3 bench/moe/sustained.py --fp8 --layout packed --shape 2 --m 64 --variants $V3 --seconds 1.5 --rounds 2
for f in $D/sus-*.log; do echo "-- $f"; grep -E "^E=|^\| [0-9]" $f; done
V=rowwise:auto:0,rowwise:auto:0x40000000,rowwise:auto:0x60000000
for s in 1 2; do
  step var$s 150 python3 bench/moe/bench_moe.py --fp8 --lab --fp8-variants $V --layout packed --shapes 0,1,2 --tokens 8,64 --order-seed $s --outdir $D/var$s
  python3 - $D/var$s/moe-fp8.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    t = r["us"]; wb = r["weight_bytes"]
    a, b, c = t["v:rowwise:auto:0x0"], t["v:rowwise:auto:0x40000000"], t["v:rowwise:auto:0x60000000"]
    pc = lambda us: 100 * wb / (us * 1e-6) / 4.25e12
    print("E=%3d m=%2d row %.1f same %.1f | full %.1f (%.0f%%) nomma %.1f (%.0f%%) nomma+nostore %.1f (%.0f%%) floor %.1f | clk %s" % (
          r["E"], r["m"], t["row"], t["row_same"], a, pc(a), b, pc(b), c, pc(c), t.get("floor", 0), r.get("sm_clock")))
PY
done
