#!/usr/bin/env bash
# selftest.sh RESULT_FILE — CPU checks of the two-GPU suite's own logic (part of `make test`):
# --help of every entry point, the one-GPU path says SKIP and checks nothing, the Python parses.
set -u
here=$(cd "$(dirname "$0")" && pwd)
res=$1
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT

bash "$here/run.sh" --help > "$t/help" 2>&1 && grep -q "two-GPU suite" "$t/help" && ok "run.sh --help" || bad "run.sh --help"
for p in multi_check nccl_check; do
  python3 "$here/$p.py" --help > "$t/$p.help" 2>&1 && grep -q "usage:" "$t/$p.help" && ok "$p.py --help" || bad "$p.py --help"
done
python3 -m py_compile "$here/multi_check.py" "$here/nccl_check.py" "$here/common.py" && ok "python compiles" || bad "python compiles"
# One GPU visible (a stand-in nvidia-smi lists one): SKIP, "0 0", exit 0.
mkdir -p "$t/bin"
printf '#!/bin/sh\necho "GPU 0: Stand-in (UUID: GPU-0)"\n' > "$t/bin/nvidia-smi"
chmod +x "$t/bin/nvidia-smi"
PATH="$t/bin:$PATH" OUT="$t/out" bash "$here/run.sh" "$t/result" > "$t/run.log" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "^SKIP test-gpu-multi: 1 GPU" "$t/run.log" && [ "$(cat "$t/result")" = "0 0" ] \
  && ok "one GPU: SKIP, nothing counted" || bad "one GPU: SKIP, nothing counted (rc=$rc: $(cat "$t/run.log"))"
# Two GPUs listed but the libraries missing: an error, counted as a failure, never a pass.
printf '#!/bin/sh\necho "GPU 0: A"\necho "GPU 1: B"\n' > "$t/bin/nvidia-smi"
PATH="$t/bin:$PATH" OUT="$t/out" LDMOE_LIB=/nonexistent/libldmoe.so bash "$here/run.sh" "$t/result2" > "$t/run2.log" 2>&1
rc=$?
[ $rc != 0 ] && [ "$(cat "$t/result2")" = "0 1" ] && ok "missing library: failure" || bad "missing library: failure (rc=$rc)"
echo "$pass $fail" > "$res"
[ "$fail" = 0 ]
