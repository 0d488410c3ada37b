# gpu49.sh — the clustered launch's grid (torch.profiler), gw vs mc, Mixtral T=1024 and Qwen3 T=4096.
export PYTHONUNBUFFERED=1
mkdir -p $OUT/r; tar xzf .carry/v26.tgz -C .carry; V=$PWD/.carry/v; cp .carry/gpu49.sh .carry/kgrid.py $OUT/r/
for c in "mixtral 1024" "qwen3 4096"; do for v in gw mc; do
  LDMOE_LIB=$V/$v.so timeout 60 python3 .carry/kgrid.py $c 2>&1 | tail -3 | tee -a $OUT/r/kgrid.txt; done; done
cd $OUT && tar czf r.tgz r && rm -rf r
