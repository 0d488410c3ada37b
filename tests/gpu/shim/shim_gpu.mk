# tests/gpu/shim/shim_gpu.mk — GPU suite of the shim core (issue 2) and its CPU self-test.
#
#   make test-gpu-shim            on the GPU machine (part of `make test-gpu`): see run.sh --help
#   make test-gpu-shim-selftest   CPU (part of `make test`): the report checker against fixtures,
#                                 the GPU programs build and parse their arguments
#
# The programs are not in ALL_TARGETS: they are test binaries, built on demand.

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

.PHONY: test-gpu-shim test-gpu-shim-selftest shimgpu-progs
shimgpu-progs: $(SHIMGPU_PROGS)

test-gpu-shim: $(SHIMGPU_PROGS) $(BUILD)/libldshim.so | $(RESULTS)
	@LDSHIM_PRELOAD_PREFIX='$(PRELOAD_PREFIX)' PYTHON='$(PYTHON)' bash $(SHIMGPU_DIR)/run.sh \
	  --lib $(BUILD)/libldshim.so --bin $(SHIMGPU_BIN) --results $(RESULTS)/test-gpu-shim

test-gpu-shim-selftest: $(SHIMGPU_PROGS) | $(RESULTS)
	@PYTHON='$(PYTHON)' CUDA_HOME='$(CUDA_HOME)' sh $(SHIMGPU_DIR)/selftest.sh $(SHIMGPU_BIN) \
	  $(RESULTS)/test-gpu-shim-selftest

GPU_TEST_SUITES += test-gpu-shim
TEST_SUITES     += test-gpu-shim-selftest
