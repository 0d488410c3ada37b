#!/bin/bash
# run.sh — the command of this record (bench/results/moe-layer/2026-12-06-<gpu>/), run from the
# repository root on the GPU machine with libldmoe built (LDMOE_LIB may point at it):
#   bash bench/results/moe-layer/2026-12-06-<gpu>/run.sh [PIPELINES]
# 1. bench/moe/bench_layer.py over all shapes and token counts, the peers in one process;
# 2. serve.py decode on the Qwen3-like config (128 experts top-8, hidden 2048, ffn 768,
#    32/4 heads, 4 layers) at batch 1 and 32: torch and ldmoe --moe fused (packed weights),
#    each in its own process.
set -u
export PYTHONUNBUFFERED=1
o=${OUT:-/tmp/moe-layer}; mkdir -p "$o"
pipes=${1:-torch,fused,triton}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee "$o/gpu.txt"
timeout 300 python3 bench/moe/bench_layer.py --pipelines "$pipes" --reps ${REPS:-30} --out "$o/layer.json" > "$o/layer.txt" 2> "$o/layer.err"
echo "bench_layer rc=$?"; cat "$o/layer.txt"; grep -E "WRONG|failed|skipped" "$o/layer.err" | head -20
q="--experts 128 --topk 8 --hidden 2048 --ffn 768 --heads 32 --kv-heads 4 --layers 4 --steps 64 --no-busy --check"
for b in 1 32; do
  for be in torch fused; do
    case $be in
      torch) args="--backend torch" ;;
      fused) args="--backend ldmoe --moe fused --layout packed" ;;
    esac
    timeout 120 python3 bench/apps/serve.py $args $q --batch $b > /tmp/serve.out 2>&1
    rc=$?
    echo "serve batch $b $be rc=$rc: $(grep -E '^(decode|generated):' /tmp/serve.out | tr '\n' ' ') $(grep -E '^check:' /tmp/serve.out | sed 's/.*max relative error \([^ ]*\).*/err \1/' | tr '\n' ' ')"
    [ $rc = 0 ] || tail -3 /tmp/serve.out
  done
done | tee "$o/serve.txt"
