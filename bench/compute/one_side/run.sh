#!/usr/bin/env bash
# run.sh — issue 43, Hopper's one-side penalty: every case in every binding, one table.
#
#   bash bench/compute/one_side/run.sh [--quick] [--no-serve] [--out DIR]
#
# Bindings, each a fresh process per program: compute-only (LDSHIM_STATE=compute-only
# LDSHIM_DOMAIN=0: the 56 SMs of one L2 side), sm-control (56 SMs spread over both sides),
# stock (no shim, all SMs); the bound ones with the study A/B's policy
# (bench/ab/serve-emulated.policy). Programs: one_side (streaming read/write/copy, L2 read
# sweep, pointer chase 1-256 MiB with near/far L2 hit cycles, chains of tiny kernels in a CUDA
# graph; unbound it also runs SM-masked sets: one side vs both sides at the same SM count, few
# GPCs vs all GPCs), gemm.py (bf16 torch.matmul; serve.py's grouped-GEMM MoE step), and
# serve.py's decode (the study A/B's configuration with --profile; the Qwen3-like one at
# batch 1). Writes raw.tsv, table.md, log.txt and smi.csv (clocks, power) into --out (default
# bench/results/one-side-penalty/<date>-<gpu>) and prints the table.
#
# Build first (on a machine with nvcc; carry build/ to the GPU):
#   make build/libldshim.so
#   nvcc -O2 -std=c++17 -gencode=arch=compute_90,code=sm_90 -I. -Xcompiler -Wall,-Wextra,-Werror \
#        -o build/bench/compute/one_side/one_side bench/compute/one_side/one_side.cu -ldl
set -u
cd "$(dirname "$0")/../../.."
quick=""; serve=1; out=""; argv="$*"
while [ $# -gt 0 ]; do
  case $1 in
    --help|-h) sed -n '2,20p' "$0"; exit 0 ;;
    --quick) quick=--quick; shift ;;
    --no-serve) serve=0; shift ;;
    --out) out=$2; shift 2 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-python3}
lib=$PWD/build/libldshim.so
bin=$PWD/build/bench/compute/one_side/one_side
for f in "$lib" "$bin"; do [ -r "$f" ] || { echo "run.sh: $f missing (build it: see the header of $0)" >&2; exit 2; }; done
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' '-' | tr -cd 'A-Za-z0-9-')
[ -n "$out" ] || out=bench/results/one-side-penalty/$(date -u +%Y-%m-%d)-${gpu:-gpu}
mkdir -p "$out"
w=$(mktemp -d /tmp/one-side.XXXXXX)
raw=$out/raw.tsv; log=$out/log.txt
printf 'binding\tconfig\tcase\tmetric\tvalue\n' > "$raw"
{ echo "command: bash bench/compute/one_side/run.sh $argv"; date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; } > "$log"

# bind_run BINDING CMD...: run CMD bound as BINDING (or without the shim for "stock")
bind_run() {
  local b=$1; shift
  case $b in
    stock) "$@" ;;
    *) env LD_PRELOAD="$lib" LDSHIM_POLICY=bench/ab/serve-emulated.policy LDSHIM_STATE="$b" LDSHIM_DOMAIN=0 LDSHIM_CACHE_DIR="$w/cache" \
         LDSHIM_REPORT="$w/report-$b.json" "$@" ;;
  esac
}
keep() {  # keep BINDING < program output: R lines to raw.tsv, everything to the log
  local b=$1
  while IFS= read -r line; do
    echo "[$b] $line" >> "$log"
    case $line in R$'\t'*) printf '%s\t%s\n' "$b" "${line#R$'\t'}" >> "$raw" ;; esac
  done
}
step() { echo "== $(date -u +%T) $*"; }

mkdir -p "$w/cache"
# SM clock, power and throttle reasons every 250 ms beside the steps' times (hypothesis: clocks)
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv -lms 250 > "$out/smi.csv" 2>/dev/null &
smi=$!
map=""; nb=""
for b in compute-only sm-control stock; do
  step "one_side $b"
  extra=()
  [ "$b" = stock ] && [ -n "$map" ] && extra=(--map "$map" --n "${nb:-56}")
  bind_run "$b" timeout 120 "$bin" $quick "${extra[@]}" > "$w/os-$b.txt" 2>&1; echo "rc=$?" >> "$w/os-$b.txt"
  keep "$b" < "$w/os-$b.txt"
  grep -E '^(device|topology|gpc|sms|rc=)' "$w/os-$b.txt" | sed "s/^/  [$b] /"
  if [ "$b" = compute-only ]; then
    map=$(awk -F'\t' '$1 == "map" {print $2}' "$w/os-$b.txt")
    nb=$(awk -F'\t' '$1 == "R" && $2 == "bound" && $3 == "set" && $4 == "sms" {print $5}' "$w/os-$b.txt")
  fi
  [ -r "$w/report-$b.json" ] && "$PY" -c 'import json,sys; c=json.load(open(sys.argv[1]))["devices"][0]["compute"]; print("  [%s] shim: applied %s, %s SMs, per domain %s" % (sys.argv[2], c.get("applied"), c.get("sm_count"), c.get("sms_per_domain")))' "$w/report-$b.json" "$b" 2>&1 | tee -a "$log"
done
for b in compute-only sm-control stock; do
  step "gemm $b"
  bind_run "$b" timeout 150 "$PY" bench/compute/one_side/gemm.py "$([ $b = stock ] && echo all || echo bound)" $quick 2>&1 | keep "$b"
done
if [ $serve = 1 ]; then
  for b in compute-only sm-control stock; do
    step "serve.py (study A/B config, --profile) $b"
    bind_run "$b" timeout 120 "$PY" bench/apps/serve.py --steps 16 --profile > "$w/serve-$b.txt" 2>&1
    sed "s/^/[$b serve-ab] /" "$w/serve-$b.txt" >> "$log"
    ms=$(sed -n 's/^decode: \([0-9.]*\) ms\/step.*/\1/p' "$w/serve-$b.txt")
    [ -n "$ms" ] && printf '%s\t%s\tserve_ab_decode\tms/step\t%s\n' "$b" "$([ $b = stock ] && echo all || echo bound)" "$ms" >> "$raw"
    grep -E '^(decode|busy|profile)' "$w/serve-$b.txt" | sed "s/^/  [$b] /"
  done
  for b in compute-only sm-control stock; do
    step "serve.py (Qwen3-like, batch 1) $b"
    bind_run "$b" timeout 90 "$PY" bench/apps/serve.py --experts 128 --topk 8 --hidden 2048 --ffn 768 --heads 32 \
      --kv-heads 4 --layers 4 --batch 1 --steps 32 --no-busy > "$w/qwen-$b.txt" 2>&1
    sed "s/^/[$b serve-qwen-b1] /" "$w/qwen-$b.txt" >> "$log"
    ms=$(sed -n 's/^decode: \([0-9.]*\) ms\/step.*/\1/p' "$w/qwen-$b.txt")
    [ -n "$ms" ] && printf '%s\t%s\tserve_qwen_b1_decode\tms/step\t%s\n' "$b" "$([ $b = stock ] && echo all || echo bound)" "$ms" >> "$raw"
    grep -E '^decode' "$w/qwen-$b.txt" | sed "s/^/  [$b] /"
  done
fi
kill "$smi" 2>/dev/null
step "table"
"$PY" - "$raw" "$out/table.md" "$argv" "$gpu" <<'PY'
import collections, sys
raw, md, args, gpu = sys.argv[1:5]
rows = [l.rstrip("\n").split("\t") for l in open(raw)][1:]
val = {}
order = []
for b, cfg, case, metric, v in rows:
    col = cfg if b == "stock" else b
    key = (case, metric)
    if key not in order:
        order.append(key)
    try:
        val[(col, key)] = float(v)
    except ValueError:
        pass
cols = ["compute-only", "sm-control", "all", "side0_pack", "side1_pack", "both_pack", "both_spread"]
cols = [c for c in cols if any(k[0] == c for k in val)]
def f(x):
    return "-" if x is None else ("%.4g" % x)
with open(md, "w") as o:
    o.write("# One L2 side vs both: microbenchmarks (%s)\n\ncommand: `bash bench/compute/one_side/run.sh %s`\n\n" % (gpu, args))
    o.write("compute-only / sm-control: bound by the shim (LDSHIM_STATE, LDSHIM_DOMAIN=0). all, side0_pack ...: "
            "one unbound process, kernels' CTAs masked to an SM set (pack = fewest GPCs, spread = all GPCs of the side).\n\n")
    o.write("| case | metric | " + " | ".join(cols) + " | co/sm |\n|---|---|" + "---|" * (len(cols) + 1) + "\n")
    for key in order:
        co, sm = val.get(("compute-only", key)), val.get(("sm-control", key))
        r = "%.3f" % (co / sm) if co and sm else "-"
        o.write("| %s | %s | " % key + " | ".join(f(val.get((c, key))) for c in cols) + " | %s |\n" % r)
print(open(md).read())
PY
echo "run.sh: wrote $out (work files $w)"
