#!/bin/bash
# session 23, call e (as passed to the device tool, on the same warm H100 as call d): compute-sanitizer
# memcheck over the compute-binding GPU suite.
D=/tmp/s23e; mkdir -p $D; trap 'tar czf $OUT/s23e.tgz -C /tmp s23e' EXIT; cp .devinc/uthash.h /usr/include/ 2>/dev/null; nvidia-smi --query-gpu=name,uuid --format=csv > $D/env.txt; t0=$(date +%s); timeout 420 bash tests/gpu/stress/sanitize.sh --tools memcheck --results $D/sanitize-result.txt --logs $D/sanitize test-gpu-compute 2>&1 | tee $D/sanitize.log; echo "rc=${PIPESTATUS[0]} $(( $(date +%s) - t0 )) s"; grep -E "^FAIL|passed, [0-9]+ failed" $D/sanitize/memcheck-test-gpu-compute/make.out | head -20
