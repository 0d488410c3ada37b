# tools/probe.mk — the topology probe's command, tests and benchmark.
#
#   build/bin/ldshim-probe      run the probe on every visible GPU (INSTALL_BINS)
#   test-probe                  CPU suite: classifier, balancer, cache, probe orchestration
#                               against a stub driver (tests/unit/test_probe.c)
#   test-gpu-probe              GPU suite: tests/gpu/probe/run.sh (needs an NVIDIA GPU)
#   probe-bench                 bench/probe/run.sh: probe cost at context creation
#
# The probe objects come from the shim core's rule (build/shim/%.o, shim/shim.mk); the
# embedded kernels from kernels/kernels.mk ($(PROBE_KERN_OBJ)).

PROBE_HOST_OBJS := $(BUILD)/shim/probe.o $(BUILD)/shim/probe_classify.o $(BUILD)/shim/probe_cache.o \
                   $(BUILD)/shim/driver.o $(BUILD)/shim/dlcheck.o $(BUILD)/shim/log.o $(BUILD)/shim/json.o $(BUILD)/shim/compute.o $(BUILD)/shim/compute_groups.o $(BUILD)/shim/compute_streams.o \
                   $(BUILD)/shim/compute_plan.o $(BUILD)/shim/options.o
PROBE_TOOL      := $(BUILD)/bin/ldshim-probe
PROBE_UNIT      := $(BUILD)/probe/test_probe
PROBE_GPU_DIR   := $(BUILD)/probe/gpu
PROBE_BENCH     := $(BUILD)/probe/bench_probe

ALL_TARGETS  += $(PROBE_TOOL)
TEST_TARGETS += $(PROBE_UNIT)
INSTALL_BINS += $(PROBE_TOOL)

$(PROBE_TOOL): tools/ldshim-probe.c $(PROBE_HOST_OBJS) $(POLICY_OBJS) $(SHIM_EXTRA_OBJS) $(BUILD_INFO_H)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I$(dir $(BUILD_INFO_H)) -o $@ $< $(PROBE_HOST_OBJS) $(POLICY_OBJS) $(SHIM_EXTRA_OBJS) $(LDFLAGS) -ldl -lm -pthread
	@# it used to be built as $(BUILD)/ldshim-probe: a copy left there would go stale unnoticed
	@rm -f $(BUILD)/ldshim-probe

# The unit test compiles the probe sources itself (no dependence on the shim core's
# rules) and links the real embedded fatbin, which its stub driver checks for.
PROBE_UNIT_SRCS := tests/unit/test_probe.c shim/probe.c shim/probe_classify.c shim/probe_cache.c shim/log.c \
                   shim/json.c shim/options.c shim/file.c
$(PROBE_UNIT): $(PROBE_UNIT_SRCS) shim/json.h shim/options.h shim/probe.h shim/probe_classify.h shim/probe_cache.h tests/unit/cunit_main.h $(PROBE_KERN_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $(PROBE_UNIT_SRCS) $(PROBE_KERN_OBJ) $(LDFLAGS) -lcunit -lm

#: probe-bench     GPU: the probe's cost at context creation (bench/probe/run.sh)
.PHONY: test-probe test-gpu-probe probe-gpu-build probe-bench
test-probe: $(PROBE_UNIT) | $(RESULTS)
	@$(PROBE_UNIT) $(RESULTS)/test-probe

# GPU programs (built here with nvcc; run only on the GPU machine).
PROBE_GPU_BINS := $(PROBE_GPU_DIR)/topo_check $(PROBE_GPU_DIR)/topo_module.fatbin $(PROBE_BENCH) \
                  $(PROBE_GPU_DIR)/ctx_time
probe-gpu-build: $(PROBE_TOOL) $(PROBE_GPU_BINS) $(SHIM_LIB)

$(PROBE_GPU_DIR)/topo_check: tests/gpu/probe/topo_check.cu kernels/ldshim_topology.h shim/ldshim.h
	@mkdir -p $(@D)
	$(NVCC) -O2 -std=c++17 -I. -Ikernels $(CUDA_GENCODE) -o $@ $< -lcuda -ldl

$(PROBE_GPU_DIR)/topo_module.fatbin: tests/gpu/probe/topo_module.cu kernels/ldshim_topology.h
	@mkdir -p $(@D)
	$(NVCC) -fatbin -O2 -std=c++17 -I. -Ikernels $(CUDA_GENCODE) -o $@ $<

$(PROBE_GPU_DIR)/ctx_time: bench/probe/ctx_time.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -ldl

$(PROBE_BENCH): bench/probe/bench_probe.c $(PROBE_HOST_OBJS) $(POLICY_OBJS) $(SHIM_EXTRA_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(PROBE_HOST_OBJS) $(POLICY_OBJS) $(SHIM_EXTRA_OBJS) $(LDFLAGS) -ldl -lm -pthread

test-gpu-probe: probe-gpu-build | $(RESULTS)
	@BUILD=$(BUILD) PRELOAD_PREFIX='$(PRELOAD_PREFIX)' sh tests/gpu/probe/run.sh $(RESULTS)/test-gpu-probe

probe-bench: probe-gpu-build
	@BUILD=$(BUILD) PRELOAD_PREFIX='$(PRELOAD_PREFIX)' sh bench/probe/run.sh
