# bench/compute/compute.mk — the compute-binding benchmark's programs (bench/compute/run.sh).
BENCH_COMPUTE_LL := $(BUILD)/bench/compute/launch_latency
$(BENCH_COMPUTE_LL): bench/compute/launch_latency.cu
	@mkdir -p $(@D)
	$(NVCC) -O2 -std=c++17 $(CUDA_GENCODE) -Xcompiler -Wall,-Wextra,-Werror -o $@ $<
BENCH_TARGETS += $(BENCH_COMPUTE_LL)
