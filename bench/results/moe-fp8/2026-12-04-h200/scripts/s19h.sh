#!/bin/bash
# session 19, call h: the one-batch setup against 542b7e8 (build/d90old) where call f did not look:
# the bf16 decode benchmark (the bf16 kernels run the same setup) and the FP8 prefill rows,
# alternating new / old.
export PYTHONUNBUFFERED=1
NEW=$PWD/build/d90/libldmoe.so OLD=$PWD/build/d90old/libldmoe.so
export LDMOE_LAB_LIB=$PWD/build/d90/lab/libldmoe_lab.so
export LDMOE_FLOOR_LIB=$PWD/build/moe/libstreamfloor.so
D=/tmp/s19h; mkdir -p $D
step() { n=$1; t=$2; shift 2; echo "== $n $(date +%T)"; timeout $t "$@" > $D/$n.log 2>&1; echo "rc=$?" >> $D/$n.log; tail -1 $D/$n.log; }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $D/env.txt; cat $D/env.txt
Bb="python3 bench/moe/bench_moe.py --layout packed --shapes 0,1,2 --tokens 8,64"
Bf="python3 bench/moe/bench_moe.py --fp8 --layout packed --shapes 0,1,2 --tokens 512,2048"
for r in 1 2; do
  step bf16-new$r 150 env LDMOE_LIB=$NEW $Bb --outdir $D/bf16-new$r
  step bf16-old$r 150 env LDMOE_LIB=$OLD $Bb --outdir $D/bf16-old$r
done
for r in 1 2 3; do
  step pf-new$r 120 env LDMOE_LIB=$NEW $Bf --outdir $D/pf-new$r
  step pf-old$r 120 env LDMOE_LIB=$OLD $Bf --outdir $D/pf-old$r
done
for f in bf16-new1 bf16-old1 bf16-new2 bf16-old2; do echo "-- $f"; grep "^| [0-9]" $D/$f/*.md | head -6 | cut -d'|' -f2-6,10-11,14; done
for f in pf-new1 pf-old1 pf-new2 pf-old2 pf-new3 pf-old3; do echo "-- $f"; grep "^| [0-9]" $D/$f/moe-fp8.md | head -6 | cut -d'|' -f2-5,10-12; done
tar czf $OUT/s19h.tgz -C /tmp s19h
