# tests/gpu/compute/compute_gpu.mk — compute binding on a real GPU, and its CPU self-test.
#
#   make test-gpu-compute            GPU (part of `make test-gpu`): tests/gpu/compute/run.sh
#   make test-gpu-compute-selftest   CPU (part of `make test`): the programs build, run.sh and
#                                    the Python programs parse, --help works
#
# bind_check is built three ways: dynamic cudart, static cudart, static with
# --default-stream per-thread (every kernel launch then goes through the _ptsz entry points);
# bind_driver is a driver-API program that retains and sets the primary context itself.

COMPGPU_DIR := tests/gpu/compute
COMPGPU_BIN := $(BUILD)/tests/gpu/compute
COMPGPU_NVFLAGS := -O2 -std=c++17 $(CUDA_GENCODE) -I. -Ikernels -Xcompiler -Wall,-Wextra,-Werror
COMPGPU_PROGS := $(COMPGPU_BIN)/bind_check_shared $(COMPGPU_BIN)/bind_check_static $(COMPGPU_BIN)/bind_check_per_thread \
                 $(COMPGPU_BIN)/bind_driver
COMPGPU_FATBIN := $(COMPGPU_BIN)/marker_module.fatbin

$(COMPGPU_BIN)/bind_check_shared: $(COMPGPU_DIR)/bind_check.cu $(COMPGPU_DIR)/marker_module.cu kernels/ldshim_topology.h
	@mkdir -p $(@D)
	$(NVCC) $(COMPGPU_NVFLAGS) -cudart shared -Xlinker -rpath,$(CUDA_HOME)/lib64 -o $@ $< -ldl -lpthread
$(COMPGPU_BIN)/bind_check_static: $(COMPGPU_DIR)/bind_check.cu $(COMPGPU_DIR)/marker_module.cu kernels/ldshim_topology.h
	@mkdir -p $(@D)
	$(NVCC) $(COMPGPU_NVFLAGS) -cudart static -o $@ $< -ldl -lpthread
$(COMPGPU_BIN)/bind_check_per_thread: $(COMPGPU_DIR)/bind_check.cu $(COMPGPU_DIR)/marker_module.cu kernels/ldshim_topology.h
	@mkdir -p $(@D)
	$(NVCC) $(COMPGPU_NVFLAGS) -cudart static --default-stream per-thread -o $@ $< -ldl -lpthread

# The driver-API program: linked with the toolkit's stub libcuda (the real one is loaded at
# run time), its kernels in a fatbin it loads itself.
$(COMPGPU_BIN)/bind_driver: $(COMPGPU_DIR)/bind_driver.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I$(CUDA_HOME)/include $< -o $@ -L$(CUDA_HOME)/lib64/stubs -lcuda -pthread
$(COMPGPU_FATBIN): $(COMPGPU_DIR)/marker_module.cu
	@mkdir -p $(@D)
	$(NVCC) -fatbin $(CUDA_GENCODE) -o $@ $<

.PHONY: test-gpu-compute test-gpu-compute-selftest
test-gpu-compute: $(COMPGPU_PROGS) $(COMPGPU_FATBIN) $(BUILD)/libldshim.so | $(RESULTS)
	@PYTHON='$(PYTHON)' bash $(COMPGPU_DIR)/run.sh --lib $(BUILD)/libldshim.so --bin $(COMPGPU_BIN) \
	  --results $(RESULTS)/test-gpu-compute

# bind_driver needs a libcuda.so.1 to start: the fake driver's stands in for --help.
test-gpu-compute-selftest: $(COMPGPU_PROGS) $(COMPGPU_FATBIN) $(BUILD)/fake/libcuda.so.1 | $(RESULTS)
	@ok=0; bad=0; \
	for p in $(filter-out %/bind_driver,$(COMPGPU_PROGS)); do if $$p --help | grep -q usage; then ok=$$((ok+1)); else echo "FAIL $$p --help"; bad=$$((bad+1)); fi; done; \
	if LD_LIBRARY_PATH=$(BUILD)/fake $(COMPGPU_BIN)/bind_driver --help | grep -q usage; then ok=$$((ok+1)); else echo "FAIL bind_driver --help"; bad=$$((bad+1)); fi; \
	if LD_LIBRARY_PATH=$(BUILD)/fake $(COMPGPU_BIN)/bind_driver > /dev/null 2>&1; then echo "FAIL bind_driver runs without a module"; bad=$$((bad+1)); else ok=$$((ok+1)); fi; \
	if bash -n $(COMPGPU_DIR)/run.sh && bash $(COMPGPU_DIR)/run.sh --help | grep -q -- --only; then ok=$$((ok+1)); else echo "FAIL run.sh"; bad=$$((bad+1)); fi; \
	if $(PYTHON) -c 'import sys; [compile(open(f).read(), f, "exec") for f in sys.argv[1:]]' $(COMPGPU_DIR)/torch_bind.py $(COMPGPU_DIR)/cupy_bind.py; \
	  then ok=$$((ok+1)); else echo "FAIL python syntax"; bad=$$((bad+1)); fi; \
	echo "$$ok $$bad" > $(RESULTS)/test-gpu-compute-selftest; echo "test-gpu-compute-selftest: $$ok passed, $$bad failed"; [ $$bad -eq 0 ]

TEST_TARGETS    += $(COMPGPU_PROGS) $(COMPGPU_FATBIN)
