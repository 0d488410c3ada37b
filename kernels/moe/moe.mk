# kernels/moe/moe.mk — libldmoe.so (persistent domain-aware MoE grouped GEMM), its CPU tests
# (tests/moe) and GPU tests (tests/gpu/moe).
#
#   make build/libldmoe.so       the library; ptxas register/spill report in build/moe-ptxas.log
#   make test-moe                CPU suite (tile numbering, steal rule, argument validation
#                                through the library)
#   make test-moe-sched          the device scheduler on the host, one thread per simulated CTA
#   make test-moe-abi            ldmoe.py's ctypes structs have the C headers' layout
#   make test-gpu-moe            GPU suite (correctness vs fp32 reference, exactly-once tiles)
#   make bench-moe               benchmark vs torch._grouped_mm and cuBLAS (needs the GPU)
#   make build/moe/libstreamfloor.so   the benchmark's one-launch streaming floor peer
#   make build/moe/pattern_probe       weight streaming by access pattern (bench/moe/pattern_probe.cu)
#   make build/diag/libldmoe.so        diagnostic library: tune bits that skip the math or the stores

LDMOE_DIR      := kernels/moe
LDMOE_BUILD    := $(BUILD)/moe
LDMOE_LIB      := $(BUILD)/libldmoe.so
LDMOE_PTXAS    := $(BUILD)/moe-ptxas.log
LDMOE_HEADERS  := $(LDMOE_DIR)/ldmoe.h $(LDMOE_DIR)/ldmoe_tiles.h
LDMOE_DEPS     := $(LDMOE_HEADERS) $(LDMOE_DIR)/ldmoe_gemm.cuh $(LDMOE_DIR)/ldmoe_sched.cuh \
                  $(LDMOE_DIR)/ldmoe_wgmma_ops.cuh $(LDMOE_DIR)/ldmoe_ws.cuh \
                  kernels/ldshim_topology.h
# sm_90a machine code for Hopper (the wgmma tiles need it; no plain sm_90 cubin, so H100/H200
# always load this one), sm_100 for Blackwell, compute_100 PTX for newer GPUs. The wgmma kernels
# are trap stubs outside sm_90a and the host selects them only on compute capability 9.0.
LDMOE_GENCODE  ?= -gencode=arch=compute_90a,code=sm_90a \
                  -gencode=arch=compute_100,code=sm_100 -gencode=arch=compute_100,code=compute_100
LDMOE_NVFLAGS  := --compress-mode=none -std=c++17 -O3 --threads 0 -I. -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra,-Werror \
                  -Werror all-warnings -lineinfo $(LDMOE_GENCODE)
# The version and the soname's major number come from the top Makefile's VERSION (empty when
# this file is used alone: the header's own version, an unversioned soname).
LDMOE_NVFLAGS  += $(if $(VERSION),-DLDMOE_VERSION_STRING='"$(VERSION)"')
LDMOE_SONAME   := libldmoe.so$(if $(SOVERSION),.$(SOVERSION))

$(LDMOE_BUILD)/ldmoe_api.o: $(LDMOE_DIR)/ldmoe_api.cu $(LDMOE_DEPS) $(wildcard VERSION)
	@mkdir -p $(dir $@)
	@# private temp names: concurrent makes in a shared tree must not trample each other
	$(NVCC) $(LDMOE_NVFLAGS) -Xptxas -v -c $< -o $@.$$$$.tmp 2> $(LDMOE_PTXAS).$$$$.tmp && mv -f $@.$$$$.tmp $@ && \
	  mv -f $(LDMOE_PTXAS).$$$$.tmp $(LDMOE_PTXAS) || { cat $(LDMOE_PTXAS).$$$$.tmp >&2; rm -f $@.$$$$.tmp $(LDMOE_PTXAS).$$$$.tmp; exit 1; }
	@if grep -q "spill stores" $(LDMOE_PTXAS) && grep "spill stores" $(LDMOE_PTXAS) | grep -qv " 0 bytes spill stores"; then \
	  echo "moe: WARNING: register spills, see $(LDMOE_PTXAS)" >&2; fi
	@# The setmaxnreg split of the prefill warp-specialized kernels (WsCfg<BM, BN, STAGES, KSUB, WA = false, ...>)
	@# assumes the launch holds 168 registers per thread; with fewer, setmaxnreg.inc would wait forever.
	@awk '/Compiling entry function .*grouped_mm_ws_kernel.*WsCfgILi[0-9]+ELi[0-9]+ELi[0-9]+ELi[0-9]+ELb0E.*sm_90a/ { want = 1; next } \
	  want && /Used [0-9]+ registers/ { n++; if ($$5 != 168) { print "moe: " $$0 " in a prefill WS kernel; ldmoe_ws.cuh assumes 168"; bad = 1 } want = 0 } \
	  END { if (n == 0) { print "moe: no prefill WS kernel found in $(LDMOE_PTXAS)"; bad = 1 } exit bad }' $(LDMOE_PTXAS) >&2 || { rm -f $@; exit 1; }

$(LDMOE_LIB): $(LDMOE_BUILD)/ldmoe_api.o $(LDMOE_DIR)/ldmoe.map $(wildcard VERSION)
	$(NVCC) -shared -cudart static $(LDMOE_GENCODE) -o $@ $< -Xlinker -soname=$(LDMOE_SONAME) \
	  -Xlinker --version-script=$(LDMOE_DIR)/ldmoe.map -Xlinker --no-undefined -lpthread -ldl -lrt

# ---- CPU tests ----
LDMOE_CPU_TEST := $(BUILD)/tests/moe/test_ldmoe_cpu
# Linked against build/libldmoe.so, it loads $(LDMOE_SONAME): the link beside the library.
$(LDMOE_CPU_TEST): tests/moe/test_ldmoe_cpu.c $(LDMOE_HEADERS) $(LDMOE_LIB) $(BUILD)/$(LDMOE_SONAME) tests/unit/cunit_main.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -L$(BUILD) -lldmoe -Wl,-rpath,'$$ORIGIN/../..' -lcunit

# The device scheduler (ldmoe_sched.cuh) compiled for the host, one thread per simulated CTA.
LDMOE_SCHED_TEST := $(BUILD)/tests/moe/test_ldmoe_sched
CXX ?= g++
$(LDMOE_SCHED_TEST): tests/moe/test_ldmoe_sched.cc $(LDMOE_DIR)/ldmoe_sched.cuh $(LDMOE_HEADERS) \
                     kernels/ldshim_topology.h tests/unit/cunit_main.h
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -x c++ $(WARN) -O2 -g -pthread -I. $(SAN_FLAGS) -o $@ $< $(LDFLAGS) -lcunit

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

# Diagnostic build of the library (not built by `make`, never installed): -DLDMOE_DIAG adds the
# tune bits 0x40000000 (no wgmma) and 0x20000000 (no output stores) of ldmoe_gemm.cuh, to time a
# launch without its math or its stores (bench_moe.py --variants auto:0,auto:0x60000000 with
# LDMOE_LIB pointing here). Its results are wrong by design, and ptxas serializes its wgmmas
# (C7520), so compare its variants with each other, not with build/libldmoe.so.
LDMOE_DIAG_LIB := $(BUILD)/diag/libldmoe.so
$(LDMOE_DIAG_LIB): $(LDMOE_DIR)/ldmoe_api.cu $(LDMOE_DEPS) $(LDMOE_DIR)/ldmoe.map
	@mkdir -p $(dir $@)
	$(NVCC) $(LDMOE_NVFLAGS) -DLDMOE_DIAG -c $< -o $(dir $@)ldmoe_api.o
	$(NVCC) -shared -cudart static $(LDMOE_GENCODE) -o $@ $(dir $@)ldmoe_api.o \
	  -Xlinker --version-script=$(LDMOE_DIR)/ldmoe.map -Xlinker --no-undefined -lpthread -ldl -lrt

.PHONY: test-moe test-moe-sched test-moe-abi test-gpu-moe test-gpu-moe-bound bench-moe
test-moe: $(LDMOE_CPU_TEST) | $(RESULTS)
	$(LDMOE_CPU_TEST) $(RESULTS)/test-moe

test-moe-sched: $(LDMOE_SCHED_TEST) | $(RESULTS)
	$(LDMOE_SCHED_TEST) $(RESULTS)/test-moe-sched

# ldmoe.py's ctypes structs against the C headers (no library, no torch needed).
test-moe-abi: | $(RESULTS)
	$(PYTHON) tests/moe/test_ldmoe_abi.py --cc $(CC) --result $(RESULTS)/test-moe-abi

test-gpu-moe: $(LDMOE_LIB) | $(RESULTS)
	LDMOE_LIB=$(abspath $(LDMOE_LIB)) $(PYTHON) tests/gpu/moe/test_moe.py --result $(RESULTS)/test-gpu-moe

# The same tests in a process bound to domain 0's SMs (compute binding): the persistent grid
# is sized to the bound set and only bound SMs are ranked, and every tile must still be
# computed exactly once.
test-gpu-moe-bound: $(LDMOE_LIB) $(SHIM_LIB) | $(RESULTS)
	LD_PRELOAD=$(abspath $(SHIM_LIB)) LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0 LDMOE_LIB=$(abspath $(LDMOE_LIB)) \
	  $(PYTHON) tests/gpu/moe/test_moe.py --quick --result $(RESULTS)/test-gpu-moe-bound

bench-moe: $(LDMOE_LIB) $(LDMOE_FLOOR_LIB)
	LDMOE_LIB=$(abspath $(LDMOE_LIB)) LDMOE_FLOOR_LIB=$(abspath $(LDMOE_FLOOR_LIB)) $(PYTHON) bench/moe/bench_moe.py

ALL_TARGETS     += $(LDMOE_LIB) $(LDMOE_FLOOR_LIB) $(LDMOE_PATTERN_PROBE)
TEST_SUITES     += test-moe test-moe-sched test-moe-abi
GPU_TEST_SUITES += test-gpu-moe test-gpu-moe-bound
INSTALL_SOLIBS  += $(LDMOE_LIB)
INSTALL_HEADERS += $(LDMOE_HEADERS)
INSTALL_PYMODS  += $(LDMOE_DIR)/ldmoe.py
INSTALL_PCS     += pkgconfig/libldmoe.pc.in
