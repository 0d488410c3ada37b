#!/bin/bash
# session 22, call b (an H100: the lent machine of this session): the first GPU run of
# tests/gpu/stress/sanitize.sh in its current form (every child process checked, CUDA API
# failures not counted, racecheck's summary read, a killed run failing) over test-gpu-probe,
# memcheck and racecheck; then libldmoe's FP8 product suite (sm_90a build carried in carry/),
# never run on an H100 before.
export PYTHONUNBUFFERED=1
D=/tmp/s22b; mkdir -p $D
trap 'tar czf $OUT/s22b.tgz -C /tmp s22b' EXIT
cp .devinc/uthash.h /usr/include/ 2>/dev/null
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit --format=csv > $D/env.txt; cat $D/env.txt
t0=$(date +%s)
make -j16 build/libldshim.so build/bin/ldshim-probe > $D/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - t0 )) s"
timeout 330 bash tests/gpu/stress/sanitize.sh --results $D/sanitize-result.txt --logs $D/sanitize test-gpu-probe 2>&1 | tee $D/sanitize.log
echo "sanitize rc=${PIPESTATUS[0]} $(( $(date +%s) - t0 )) s"
LDMOE_LIB=$PWD/carry/libldmoe.so timeout 150 python3 tests/gpu/moe/test_moe.py --fp8-only --result $D/test-fp8 > $D/test-fp8.log 2>&1
echo "fp8 suite rc=$? $(( $(date +%s) - t0 )) s"; grep -v '^PASS' $D/test-fp8.log | tail -5
