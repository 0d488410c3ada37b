# bench/alloc/alloc.mk — allocation micro-benchmark of libldshim (issue 2, "Benchmark").
#
#   make build/bench/alloc/bench_alloc     the program (gcc, CUDA runtime + driver)
#   make bench-alloc                       run it on the GPU: bench/alloc/run.sh (OUT=... for logs)
#   make test-bench-alloc-selftest         CPU: the program's arguments and the table generator
#   make test-bench-alloc-onfake           CPU: every mode against the fake driver under the shim

BENCHALLOC_DIR := bench/alloc
BENCHALLOC_BIN := $(BUILD)/bench/alloc/bench_alloc
# libcudart from the toolkit (rpath), libcuda from the stub at link time only (the real one at
# run time), so the benchmark calls the same exported driver symbols an application does.
BENCHALLOC_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart \
                   -L$(CUDA_HOME)/lib64/stubs -lcuda -ldl

$(BENCHALLOC_BIN): $(BENCHALLOC_DIR)/bench_alloc.c shim/ldshim.h kernels/ldshim_topology.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) $(BENCHALLOC_LIBS)

BENCH_TARGETS += $(BENCHALLOC_BIN)
TEST_TARGETS  += $(BENCHALLOC_BIN)

#: bench-alloc     GPU: the allocation micro-benchmark under libldshim (bench/alloc/run.sh)
# chunk_cycle: the create-to-free cycle by bytes per physical handle (issue 43). Driver API only.
CHUNKCYCLE_BIN := $(BUILD)/bench/alloc/chunk_cycle
$(CHUNKCYCLE_BIN): $(BENCHALLOC_DIR)/chunk_cycle.c shim/ldshim.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -L$(CUDA_HOME)/lib64/stubs -lcuda -ldl
BENCH_TARGETS += $(CHUNKCYCLE_BIN)

.PHONY: bench-alloc test-bench-alloc-selftest test-bench-alloc-onfake
bench-alloc: $(BENCHALLOC_BIN) $(BUILD)/libldshim.so
	LDSHIM_PRELOAD_PREFIX='$(PRELOAD_PREFIX)' PYTHON='$(PYTHON)' bash $(BENCHALLOC_DIR)/run.sh \
	  --lib $(BUILD)/libldshim.so --bin $(BENCHALLOC_BIN)

test-bench-alloc-selftest: $(BENCHALLOC_BIN) | $(RESULTS)
	@PYTHON='$(PYTHON)' CUDA_HOME='$(CUDA_HOME)' sh $(BENCHALLOC_DIR)/selftest.sh $(BENCHALLOC_BIN) \
	  $(RESULTS)/test-bench-alloc-selftest

# bench_alloc against the fake driver (tests/fake) under the real shim: modes and validity checks.
test-bench-alloc-onfake: $(BENCHALLOC_BIN) $(CHUNKCYCLE_BIN) $(BUILD)/libldshim.so $(BUILD)/fake/libcuda.so.1 \
                         $(BUILD)/fake/libcudart.so.13 | $(RESULTS)
	@LDSHIM_PRELOAD_PREFIX='$(PRELOAD_PREFIX)' sh $(BENCHALLOC_DIR)/onfake.sh $(BENCHALLOC_BIN) \
	  $(BUILD)/libldshim.so $(BUILD)/fake $(RESULTS)/test-bench-alloc-onfake

