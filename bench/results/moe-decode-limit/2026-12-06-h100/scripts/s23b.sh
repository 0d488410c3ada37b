#!/bin/bash
# session 23, call b (the twenty-second session's unrun s22b, extended): the first GPU run of
# tests/gpu/stress/sanitize.sh in its current form (every child process checked, CUDA API
# failures not counted, racecheck's summary read, a killed run failing) over test-gpu-probe,
# memcheck and racecheck; libldmoe's FP8 product suite on this card (sm_90a build carried in
# carry/); then how much of an FP8 decode call lies outside the kernel's body (body_vs_event.py).
export PYTHONUNBUFFERED=1
D=/tmp/s23b; mkdir -p $D
trap 'tar czf $OUT/s23b.tgz -C /tmp s23b' EXIT
cp .devinc/uthash.h /usr/include/ 2>/dev/null
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit --format=csv > $D/env.txt; cat $D/env.txt
t0=$(date +%s)
make -j16 build/libldshim.so build/bin/ldshim-probe probe-gpu-build > $D/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - t0 )) s"
timeout 300 bash tests/gpu/stress/sanitize.sh --results $D/sanitize-result.txt --logs $D/sanitize test-gpu-probe 2>&1 | tee $D/sanitize.log
echo "sanitize rc=${PIPESTATUS[0]} $(( $(date +%s) - t0 )) s; result $(cat $D/sanitize-result.txt 2>/dev/null)"
LDMOE_LIB=$PWD/carry/libldmoe.so timeout 150 python3 tests/gpu/moe/test_moe.py --fp8-only --result $D/test-fp8 > $D/test-fp8.log 2>&1
echo "fp8 suite rc=$? $(( $(date +%s) - t0 )) s"; grep -v '^PASS' $D/test-fp8.log | tail -4
LDMOE_LAB_LIB=$PWD/carry/lab/libldmoe_lab.so timeout 100 python3 bench/moe/body_vs_event.py $D/body.json 2>&1 | tee $D/body.log
echo "done $(( $(date +%s) - t0 )) s"
