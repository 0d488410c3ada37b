#!/bin/bash
# session 23, call d (s23c did not get a machine): on whichever card comes, first the FP8 decode
# decomposition of call a (diagnostic lab variants as interleaved peers of torch and the floor,
# one order seed), then the shim core's GPU suite plainly and under compute-sanitizer memcheck.
export PYTHONUNBUFFERED=1
B=$PWD/carry
D=/tmp/s23d; mkdir -p $D
trap 'tar czf $OUT/s23d.tgz -C /tmp s23d' EXIT
cp .devinc/uthash.h /usr/include/ 2>/dev/null
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit --format=csv > $D/env.txt; cat $D/env.txt
t0=$(date +%s)
FV=rowwise:auto:0,rowwise:auto:0x40000000,rowwise:auto:0x20000000,rowwise:auto:0x60000000,rowwise:auto:0x70000000
LDMOE_LIB=$B/libldmoe.so LDMOE_FLOOR_LIB=$B/moe/libstreamfloor.so LDMOE_LAB_LIB=$B/lab/diag/libldmoe_lab.so timeout 120 \
  python3 bench/moe/bench_moe.py --fp8 --lab --fp8-variants $FV --layout packed --shapes 0,1,2 --tokens 8,64 --order-seed 1 --outdir $D/var1 > $D/var1.log 2>&1
echo "var1 rc=$? $(( $(date +%s) - t0 )) s"
python3 - $D/var1/moe-fp8.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    t = r["us"]; wb = r["weight_bytes"]
    v = [t[k] for k in ("v:rowwise:auto:0x0", "v:rowwise:auto:0x40000000", "v:rowwise:auto:0x20000000",
                        "v:rowwise:auto:0x60000000", "v:rowwise:auto:0x70000000")]
    print("E=%3d m=%2d row %.1f same %.1f floor %.1f torch %.1f | lab full %.1f nomma %.1f nostore %.1f neither %.1f skeleton %.1f | clk %s" % (
          r["E"], r["m"], t["row"], t["row_same"], t.get("floor", 0), t["torch"], v[0], v[1], v[2], v[3], v[4], r.get("sm_clock")))
PY
timeout 200 make -j16 test-gpu-shim > $D/plain.log 2>&1; echo "plain test-gpu-shim rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^FAIL|passed, [0-9]+ failed" $D/plain.log | tail -8
timeout 330 bash tests/gpu/stress/sanitize.sh --tools memcheck --results $D/sanitize-result.txt --logs $D/sanitize test-gpu-shim 2>&1 | tee $D/sanitize.log
echo "sanitize rc=${PIPESTATUS[0]} $(( $(date +%s) - t0 )) s; result $(cat $D/sanitize-result.txt 2>/dev/null)"
grep -E "^FAIL" $D/sanitize/memcheck-test-gpu-shim/make.out | head -20
