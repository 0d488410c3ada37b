#!/bin/bash
# session 23, call c: the shim core's GPU suite plainly, then under compute-sanitizer memcheck
# (tests/gpu/stress/sanitize.sh; the first sanitizer run over a suite other than test-gpu-probe).
export PYTHONUNBUFFERED=1
D=/tmp/s23c; mkdir -p $D
trap 'tar czf $OUT/s23c.tgz -C /tmp s23c' EXIT
cp .devinc/uthash.h /usr/include/ 2>/dev/null
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit --format=csv > $D/env.txt; cat $D/env.txt
t0=$(date +%s)
timeout 200 make -j16 test-gpu-shim > $D/plain.log 2>&1; echo "plain test-gpu-shim rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^FAIL|passed, [0-9]+ failed" $D/plain.log | tail -8
timeout 340 bash tests/gpu/stress/sanitize.sh --tools memcheck --results $D/sanitize-result.txt --logs $D/sanitize test-gpu-shim 2>&1 | tee $D/sanitize.log
echo "sanitize rc=${PIPESTATUS[0]} $(( $(date +%s) - t0 )) s; result $(cat $D/sanitize-result.txt 2>/dev/null)"
grep -E "^FAIL" $D/sanitize/memcheck-test-gpu-shim/make.out | head -20
