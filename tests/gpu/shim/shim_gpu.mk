# tests/gpu/shim/shim_gpu.mk — GPU suite of the shim core (issue 2) and its CPU self-test.
#
#   make test-gpu-shim            on the GPU machine (part of `make test-gpu`): see run.sh --help
#   make test-gpu-shim-selftest   CPU (part of `make test`): the report checker against fixtures,
#                                 the GPU programs build and parse their arguments, run.sh's logic
#   make test-gpu-shim-onfake     CPU (part of `make test`): leak_cycle against the fake driver
#                                 under the real shim, with negative controls
#
# The GPU programs are in TEST_TARGETS so a parallel `make test` builds them before the suites run.

SHIMGPU_DIR  := tests/gpu/shim
SHIMGPU_BIN  := $(BUILD)/tests/gpu/shim
SHIMGPU_HDRS := shim/ldshim.h kernels/ldshim_topology.h
# Host code with the project's warnings; the driver API straight from libcuda (the stub at link
# time, never as an rpath) so cuMemAlloc_v2/cuMemGetAddressRange_v2 go through the dynamic linker.
SHIMGPU_NVFLAGS := -O2 -std=c++17 $(CUDA_GENCODE) -I. -Ikernels -Xcompiler -Wall,-Wextra,-Werror
SHIMGPU_NVLIBS  := -L$(CUDA_HOME)/lib64/stubs -lcuda -ldl
SHIMGPU_PROGS   := $(SHIMGPU_BIN)/alloc_check_shared $(SHIMGPU_BIN)/alloc_check_static \
                   $(SHIMGPU_BIN)/leak_cycle

$(SHIMGPU_BIN):
	@mkdir -p $@

$(SHIMGPU_BIN)/alloc_check_shared: $(SHIMGPU_DIR)/alloc_check.cu $(SHIMGPU_HDRS) | $(SHIMGPU_BIN)
	$(NVCC) $(SHIMGPU_NVFLAGS) -cudart shared -Xlinker -rpath,$(CUDA_HOME)/lib64 -o $@ $< $(SHIMGPU_NVLIBS)

$(SHIMGPU_BIN)/alloc_check_static: $(SHIMGPU_DIR)/alloc_check.cu $(SHIMGPU_HDRS) | $(SHIMGPU_BIN)
	$(NVCC) $(SHIMGPU_NVFLAGS) -cudart static -o $@ $< $(SHIMGPU_NVLIBS)

$(SHIMGPU_BIN)/leak_cycle: $(SHIMGPU_DIR)/leak_cycle.cu $(SHIMGPU_HDRS) | $(SHIMGPU_BIN)
	$(NVCC) $(SHIMGPU_NVFLAGS) -cudart static -o $@ $< $(SHIMGPU_NVLIBS)

# leak_cycle built for the CPU (4 MiB / 16 MiB cycles) against the fake runtime of tests/fake,
# run under the real shim by test-gpu-shim-onfake.
SHIMGPU_FAKE_LEAK := $(SHIMGPU_BIN)/leak_cycle_fake
$(SHIMGPU_FAKE_LEAK): $(SHIMGPU_DIR)/leak_cycle.cu $(SHIMGPU_DIR)/fake_rt_extras.c $(SHIMGPU_HDRS) \
                      $(BUILD)/fake/libcudart.so | $(SHIMGPU_BIN)
	$(CXX) -std=c++17 -O2 -g -Wall -Wextra -Werror -I. -Ikernels -I$(CUDA_INC) $(SAN_FLAGS) \
	  -DLEAK_SIZE_SMALL='(4 * MiB)' -DLEAK_SIZE_LARGE='(16 * MiB)' -o $@ \
	  -x c++ $(SHIMGPU_DIR)/leak_cycle.cu $(SHIMGPU_DIR)/fake_rt_extras.c -L$(BUILD)/fake -lcudart -ldl

.PHONY: test-gpu-shim test-gpu-shim-selftest test-gpu-shim-onfake shimgpu-progs
shimgpu-progs: $(SHIMGPU_PROGS)

test-gpu-shim: $(SHIMGPU_PROGS) $(BUILD)/libldshim.so | $(RESULTS)
	@LDSHIM_PRELOAD_PREFIX='$(PRELOAD_PREFIX)' PYTHON='$(PYTHON)' bash $(SHIMGPU_DIR)/run.sh \
	  --lib $(BUILD)/libldshim.so --bin $(SHIMGPU_BIN) --results $(RESULTS)/test-gpu-shim

test-gpu-shim-selftest: $(SHIMGPU_PROGS) | $(RESULTS)
	@PYTHON='$(PYTHON)' CUDA_HOME='$(CUDA_HOME)' sh $(SHIMGPU_DIR)/selftest.sh $(SHIMGPU_BIN) \
	  $(RESULTS)/test-gpu-shim-selftest

test-gpu-shim-onfake: $(SHIMGPU_FAKE_LEAK) $(BUILD)/libldshim.so $(BUILD)/fake/libcuda.so.1 \
                      $(BUILD)/fake/libcudart.so.13 | $(RESULTS)
	@LDSHIM_PRELOAD_PREFIX='$(PRELOAD_PREFIX)' PYTHON='$(PYTHON)' sh $(SHIMGPU_DIR)/onfake.sh \
	  $(SHIMGPU_FAKE_LEAK) $(BUILD)/libldshim.so $(BUILD)/fake $(RESULTS)/test-gpu-shim-onfake

TEST_TARGETS    += $(SHIMGPU_PROGS)
