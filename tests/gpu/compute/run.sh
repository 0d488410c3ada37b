#!/usr/bin/env bash
# run.sh — compute binding on a real GPU (make test-gpu-compute). Needs an NVIDIA GPU with
# green contexts (driver >= 12.4) and a valid measured topology (the probe runs on first use).
#
# Every program runs once without the shim (base) and under the shim with compute = domain:0,
# domain:1 and spread:K (K = the SM count domain:0 got), state full, no rules. Per run: exit 0;
# the shim's report says the binding was applied and checked; every launch path's blocks ran
# on exactly the bound SMs (the program's own %smid marker vs the report's list); results
# (hashes) equal to the base run; nothing left live at exit. Prints "ok NAME" / "FAIL NAME:
# why", writes "<passed> <failed>" to --results, logs to a folder (packed into $OUT when set).
set -u

usage() {
  cat <<'USAGE'
usage: tests/gpu/compute/run.sh [--lib PATH] [--bin DIR] [--results FILE] [--only LIST] [--help]
  --lib PATH      the preload library (default build/libldshim.so)
  --bin DIR       where bind_check_{shared,static,per_thread} are (default build/tests/gpu/compute)
  --results FILE  "<passed> <failed>" (default build/results/test-gpu-compute)
  --only LIST     comma list of: cudart,driver,torch,cupy,jax (default all; python ones need the module)
Environment: OUT (log destination), PYTHON (default python3), COMPUTE_TIMEOUT (s per run, 120).
USAGE
}

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
lib=$root/build/libldshim.so
bin=$root/build/tests/gpu/compute
results=$root/build/results/test-gpu-compute
only=cudart,driver,torch,cupy,jax
while [ $# -gt 0 ]; do
  case $1 in
    --help|-h) usage; exit 0 ;;
    --lib) lib=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) echo "run.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
case $lib in /*) ;; *) lib=$PWD/$lib ;; esac
PY=${PYTHON:-python3}
TMO=${COMPUTE_TIMEOUT:-120}
logs=$(mktemp -d "${TMPDIR:-/tmp}/ldshim-gpu-compute.XXXXXX")
cache=$logs/cache
mkdir -p "$cache" "$(dirname "$results")"
policy=$logs/compute.policy
printf 'state = full\nbackend = emulated\n' > "$policy"
passed=0; failed=0
ok() { passed=$((passed + 1)); echo "ok   $1" | tee -a "$logs/summary.txt"; }
bad() { failed=$((failed + 1)); echo "FAIL $1: $2" | tee -a "$logs/summary.txt"; }

# run NAME PLACEMENT(base|domain:N|spread:K) CMD... -> $logs/NAME.{out,err,json}; sets rc
run() {
  local name=$1 place=$2; shift 2
  local f=$logs/${name//[\/:]/_}
  rm -f "$f.json"
  if [ "$place" = base ]; then
    timeout -k 5 "$TMO" "$@" > "$f.out" 2> "$f.err"
  else
    timeout -k 5 "$TMO" env LD_PRELOAD="$lib" LDSHIM_POLICY="$policy" LDSHIM_COMPUTE="$place" LDSHIM_LOG=info \
      LDSHIM_REPORT="$f.json" LDSHIM_CACHE_DIR="$cache" "$@" > "$f.out" 2> "$f.err"
  fi
  rc=$?
  out=$f.out; rep=$f.json
}

# check NAME BASE_OUT RUN_OUT REPORT: binding applied and checked, marker sets == bound set,
# every hash and checksum equal to the base run.
check() {
  "$PY" - "$@" <<'PY'
import json, sys
name, base, run, rep = sys.argv[1:5]
def kv(p):
    d = {}
    for line in open(p):
        if "=" in line:
            k, v = line.rstrip("\n").split("=", 1)
            d[k] = v
    return d
b, r = kv(base), kv(run)
c = json.load(open(rep))["devices"][0]["compute"]
errs = []
if c["applied"] == "all" or not c["verified"]:
    errs.append("not bound: %s" % c.get("reason"))
mask = 0
for s in c["sms"]:
    mask |= 1 << s
want = "%064x" % mask
for k, v in r.items():
    if k.endswith("_set") and not k.startswith("topo"):
        tag = k[:-4]
        if r.get(tag + "_rc", "0") not in ("0",):
            continue
        if v != want:
            errs.append("%s ran on %s, bound %s" % (tag, v, want))
    if k.endswith("_rc") and v != "0" and not (k == "cooperative_rc" and v == "720"):
        errs.append("%s=%s" % (k, v))
    # Results must match the unbound run; the SM sets and counts of the markers must not.
    if (k in ("checksum",) or k.endswith("_hash") or k.startswith(("matmul", "sdpa", "triton", "graph_"))) \
            and not k.endswith(("_sms", "_set", "_rc")) and b.get(k) != v:
        errs.append("%s differs from the unbound run" % k)
if r.get("ctx_is_retained") == "0":
    errs.append("cuCtxGetCurrent did not answer the context the program retained")
if r.get("topo_bound") == "0" and "topo_bound" in r:
    errs.append("the published topology says unbound")
live = json.load(open(rep)).get("live", {})
if live.get("ranges"):
    errs.append("live ranges at exit: %s" % live)
print("; ".join(errs))
sys.exit(1 if errs else 0)
PY
}

progs=()
case ",$only," in *,cudart,*)
  for v in shared static per_thread; do progs+=("cudart/$v:$bin/bind_check_$v"); done ;; esac
case ",$only," in *,driver,*) progs+=("driver:$bin/bind_driver $bin/marker_module.fatbin") ;; esac
case ",$only," in *,torch,*) "$PY" -c 'import torch' 2>/dev/null && progs+=("torch:$PY $here/torch_bind.py") ;; esac
case ",$only," in *,cupy,*) "$PY" -c 'import cupy' 2>/dev/null && progs+=("cupy:$PY $here/cupy_bind.py") ;; esac
case ",$only," in *,jax,*) "$PY" -c 'import cupy, jax' 2>/dev/null && progs+=("jax:$PY $here/cupy_bind.py --jax") ;; esac

k=""
for p in "${progs[@]}"; do
  tag=${p%%:*}; cmd=${p#*:}
  run "$tag/base" base $cmd
  if [ $rc -ne 0 ]; then bad "$tag/base" "exit $rc: $(tail -1 "$logs/${tag//\//_}_base.err")"; continue; fi
  base_out=$out
  ok "$tag/base"
  places="domain:0 domain:1"
  [ -n "$k" ] && places="$places spread:$k"
  for place in $places; do
    run "$tag/$place" "$place" $cmd
    if [ $rc -ne 0 ]; then bad "$tag/$place" "exit $rc: $(tail -1 "${out%.out}.err")"; continue; fi
    if why=$(check "$tag/$place" "$base_out" "$out" "$rep"); then ok "$tag/$place"; else bad "$tag/$place" "$why"; fi
    if [ -z "$k" ] && [ "$place" = domain:0 ]; then
      # The SM-count control of every later program: as many SMs as domain:0 got.
      k=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["devices"][0]["compute"]["sm_count"])' "$rep" 2>/dev/null)
      [ -n "$k" ] && { run "$tag/spread:$k" "spread:$k" $cmd
        if [ $rc -ne 0 ]; then bad "$tag/spread:$k" "exit $rc"; 
        elif why=$(check "$tag/spread:$k" "$base_out" "$out" "$rep"); then ok "$tag/spread:$k"; else bad "$tag/spread:$k" "$why"; fi; }
    fi
  done
done
# A bound process that used torch.profiler (CUPTI) exits cleanly.
case ",$only," in *,torch,*)
  if "$PY" -c 'import torch' 2>/dev/null; then
    if why=$(PYTHON="$PY" timeout -k 5 300 bash "$here/profiler_exit.sh" --lib "$lib" --rounds 3 --par 4 2>&1); then
      ok "torch/profiler-exit"; else bad "torch/profiler-exit" "$(echo "$why" | grep -m1 FAIL)"; fi
  fi ;; esac
[ ${#progs[@]} -gt 0 ] || bad setup "no program to run (build bind_check first)"
echo "$passed $failed" > "$results"
echo "test-gpu-compute: $passed passed, $failed failed (logs $logs)"
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && tar -C "$logs" -czf "$OUT/gpu-compute-logs.tar.gz" . && cp "$logs/summary.txt" "$OUT/gpu-compute-summary.txt"; fi
[ $failed -eq 0 ]
