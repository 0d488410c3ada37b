#!/usr/bin/env bash
# run.sh — the cost and the sanity of compute binding on a GPU: bound vs unbound, interleaved.
#
#   bash bench/compute/run.sh [--reps R] [--out DIR]
#
# For each repetition, in a fresh process per state (unbound = no shim; domain:0; domain:1;
# spread:K with K = domain:0's SM count), in an order rotated every repetition:
#   throughput.py      bf16 matmul TFLOP/s (compute-bound: expect ~ bound/132 of unbound) and
#                      device-to-device copy TB/s (memory-bound: expect a smaller loss)
#   launch_latency     host us per launch on the NULL and the per-thread stream, GPU us per
#                      launch (target: no measurable difference, < 0.5 us)
#   ctx_time           first context creation, cold (fresh cache: probe and SM groups measured)
#                      and cached (target < 20 ms cold, < 2 ms cached over unbound)
# Writes raw.tsv (one row per run) and summary.md (medians per state) into --out (default
# bench/results/compute-binding/<date>-<gpu>), with the command, date and GPU.
set -u
cd "$(dirname "$0")/../.."
reps=5
out=""
argv="$*"
while [ $# -gt 0 ]; do
  case $1 in
    --help|-h) sed -n '2,16p' "$0"; exit 0 ;;
    --reps) reps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-python3}
lib=$PWD/build/libldshim.so
ll=$PWD/build/bench/compute/launch_latency
ct=$PWD/build/probe/gpu/ctx_time
for f in "$lib" "$ll" "$ct"; do [ -x "$f" ] || [ -r "$f" ] || { echo "run.sh: $f missing (make; make probe-gpu-build)" >&2; exit 2; }; done
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' '-' | tr -cd 'A-Za-z0-9-')
[ -n "$out" ] || out=bench/results/compute-binding/$(date -u +%Y-%m-%d)-${gpu:-gpu}
mkdir -p "$out"
w=$(mktemp -d /tmp/ldshim-bench-compute.XXXXXX)
printf 'state = full\nbackend = emulated\n' > "$w/p.policy"
warm=$w/cache
mkdir -p "$warm"
raw=$out/raw.tsv
printf 'rep\tstate\tmetric\tvalue\n' > "$raw"

# one STATE CACHE CMD... : run with the shim bound to STATE (or without it for "unbound")
one() {
  local st=$1 cache=$2; shift 2
  if [ "$st" = unbound ]; then "$@"; else
    env LD_PRELOAD="$lib" LDSHIM_POLICY="$w/p.policy" LDSHIM_COMPUTE="$st" LDSHIM_CACHE_DIR="$cache" "$@"; fi
}
record() {  # record REP STATE < key=value lines
  while IFS='=' read -r k v; do [ -n "$v" ] && printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$k" "$v" >> "$raw"; done
}

# The SM count of domain:0 (the spread control uses as many).
one domain:0 "$warm" "$ll" 200 > /dev/null 2>&1
k=$(env LD_PRELOAD="$lib" LDSHIM_POLICY="$w/p.policy" LDSHIM_COMPUTE=domain:0 LDSHIM_CACHE_DIR="$warm" \
    LDSHIM_REPORT="$w/r.json" "$ll" 200 > /dev/null 2>&1; "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["devices"][0]["compute"]["sm_count"])' "$w/r.json")
states=(unbound domain:0 domain:1 "spread:$k")
echo "bench/compute: states ${states[*]}, $reps repetitions"
for r in $(seq 1 "$reps"); do
  n=${#states[@]}
  for i in $(seq 0 $((n - 1))); do
    st=${states[$(( (i + r) % n ))]}
    echo "  rep $r/$reps $st"
    rm -f "$w/last.json"
    LDSHIM_REPORT=$w/last.json one "$st" "$warm" "$PY" bench/compute/throughput.py --reps 10 2>>"$w/err.log" | record "$r" "$st"
    # The SM count the binding gave (throughput.py's sms= is what the program is told: the device's).
    [ "$st" = unbound ] || "$PY" -c 'import json,sys; print("bound_sms=%d" % json.load(open(sys.argv[1]))["devices"][0]["compute"]["sm_count"])' \
      "$w/last.json" 2>>"$w/err.log" | record "$r" "$st"
    one "$st" "$warm" "$ll" 20000 2>>"$w/err.log" | record "$r" "$st"
    cold=$w/cold-$r-$i; mkdir -p "$cold"
    one "$st" "$cold" "$ct" 2>>"$w/err.log" | tr ' ' '\n' | sed 's/^/cold_/' | record "$r" "$st"
    one "$st" "$warm" "$ct" 2>>"$w/err.log" | tr ' ' '\n' | sed 's/^/cached_/' | record "$r" "$st"
  done
done
"$PY" - "$raw" "$out/summary.md" "$argv" <<'PY'
import collections, statistics, subprocess, sys, time
raw, md, args = sys.argv[1:4]
rows = [l.rstrip("\n").split("\t") for l in open(raw)][1:]
by = collections.defaultdict(list)
for rep, st, k, v in rows:
    try: by[(st, k)].append(float(v))
    except ValueError: pass
states = list(dict.fromkeys(r[1] for r in rows))
metrics = list(dict.fromkeys(r[2] for r in rows))
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
with open(md, "w") as f:
    f.write("# Compute binding: cost and sanity\n\n%s, GPU %s, command `bash bench/compute/run.sh %s`\n\n" % (time.strftime("%Y-%m-%d", time.gmtime()), gpu, args))
    f.write("Medians over repetitions, each state in a fresh process, order rotated every repetition.\n\n")
    f.write("| metric | " + " | ".join(states) + " |\n|---|" + "---|" * len(states) + "\n")
    for m in metrics:
        f.write("| %s | " % m + " | ".join("%.4g" % statistics.median(by[(s, m)]) if by[(s, m)] else "-" for s in states) + " |\n")
print(open(md).read())
PY
echo "bench/compute: wrote $out (logs $w)"
