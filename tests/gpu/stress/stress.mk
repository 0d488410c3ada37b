# tests/gpu/stress/stress.mk — the reliability stress on a real GPU, and compute-sanitizer over
# the GPU suites (issue 24). Neither runs in `make test`.
#
#   build/tests/gpu/stress/t_stress_gpu   tests/fake/t_stress.c built with -DT_REAL_CUDA against
#                                the real driver API (PTX kernel, cuMemGetInfo accounting);
#                                linked with the toolkit's stub libcuda, so it builds anywhere
#   make test-gpu-stress         GPU: threads allocating/querying/launching/freeing for
#                                STRESS_SECONDS (120) per state under the shim; part of test-gpu
#   make test-gpu-sanitize       GPU: compute-sanitizer memcheck and racecheck over
#                                SANITIZE_SUITES, every CUDA process they start
#   make test-gpu-stress-selftest  CPU, in `make test`: the GPU program builds and parses its
#                                arguments; both scripts answer --help and refuse bad arguments

STRESS_GPU_DIR := $(BUILD)/tests/gpu/stress
STRESS_GPU_BIN := $(STRESS_GPU_DIR)/t_stress_gpu
STRESS_SECONDS ?= 120
SANITIZE_SUITES ?= test-gpu-shim test-gpu-probe test-gpu-stress test-gpu-mlopart test-gpu-moe

$(STRESS_GPU_BIN): tests/fake/t_stress.c tests/fake/t_common.h shim/cuda_compat.h shim/ldshim.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DT_REAL_CUDA $< -o $@ $(LDFLAGS) -L$(CUDA_HOME)/lib64/stubs -lcuda -pthread -ldl

#: test-gpu-sanitize  GPU: compute-sanitizer memcheck and racecheck over SANITIZE_SUITES
.PHONY: test-gpu-stress test-gpu-sanitize test-gpu-stress-selftest
test-gpu-stress: $(STRESS_GPU_BIN) $(BUILD)/libldshim.so | $(RESULTS)
	@LDSHIM_PRELOAD_PREFIX='$(PRELOAD_PREFIX)' bash tests/gpu/stress/run.sh --bin $(STRESS_GPU_BIN) \
	  --lib $(BUILD)/libldshim.so --seconds $(STRESS_SECONDS) --results $(RESULTS)/test-gpu-stress

test-gpu-sanitize: $(ALL_TARGETS) $(TEST_TARGETS) $(LAB_TEST_TARGETS) | $(RESULTS)
	@bash tests/gpu/stress/sanitize.sh --results $(RESULTS)/test-gpu-sanitize --logs $(BUILD)/sanitize \
	  $(SANITIZE_SUITES)

test-gpu-stress-selftest: $(STRESS_GPU_BIN) $(BUILD)/fake/libcuda.so.1 | $(RESULTS)
	@sh tests/gpu/stress/selftest.sh $(STRESS_GPU_BIN) $(BUILD)/fake $(RESULTS)/test-gpu-stress-selftest

TEST_TARGETS    += $(STRESS_GPU_BIN)
