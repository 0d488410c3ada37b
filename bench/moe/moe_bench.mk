# bench/moe/moe_bench.mk — the MoE benchmark (bench/moe/bench_moe.py over the lab library,
# bench/moe/lab/lab.mk) and its GPU programs (its host-only tools' CPU checks: tests/bench/bench.mk).
#
#   make bench-moe                  benchmark vs torch._grouped_mm and cuBLAS (needs the GPU)
#   make build/moe/libstreamfloor.so   the benchmark's one-launch streaming floor peer
#   make build/moe/pattern_probe    weight streaming by access pattern (bench/moe/pattern_probe.cu)

# The benchmark's floor peer (bench/moe/stream_floor.cu): sm_90a only (it uses bulk copies).
LDMOE_FLOOR_LIB := $(LDMOE_BUILD)/libstreamfloor.so
$(LDMOE_FLOOR_LIB): bench/moe/stream_floor.cu
	@mkdir -p $(dir $@)
	$(NVCC) --compress-mode=none -std=c++17 -O3 -arch=sm_90a -shared -Xcompiler -fPIC,-Wall,-Wextra,-Werror \
	  -Werror all-warnings -o $@ $<

# Diagnostic: how fast one launch streams a weight matrix as 2-D row-piece boxes vs contiguous boxes.
LDMOE_PATTERN_PROBE := $(LDMOE_BUILD)/pattern_probe
$(LDMOE_PATTERN_PROBE): bench/moe/pattern_probe.cu
	@mkdir -p $(dir $@)
	$(NVCC) --compress-mode=none -std=c++17 -O3 -arch=sm_90a -Xcompiler -Wall,-Wextra,-Werror -Werror all-warnings \
	  -o $@ $<

# The tile sweeps need the lab's tiles: the lab library runs them all, AUTO's included (the same
# kernels as libldmoe.so, make sass-identity).
#: bench-moe       GPU: libldmoe vs torch._grouped_mm and cuBLAS (bench/moe/bench_moe.py)
.PHONY: bench-moe
bench-moe: $(LDMOE_LAB_LIB) $(LDMOE_FLOOR_LIB)
	LDMOE_LAB_LIB=$(abspath $(LDMOE_LAB_LIB)) LDMOE_FLOOR_LIB=$(abspath $(LDMOE_FLOOR_LIB)) $(PYTHON) bench/moe/bench_moe.py --lab

BENCH_TARGETS += $(LDMOE_FLOOR_LIB) $(LDMOE_PATTERN_PROBE)
