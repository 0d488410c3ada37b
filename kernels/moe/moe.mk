# kernels/moe/moe.mk — libldmoe.so (persistent domain-aware MoE grouped GEMM) and its CPU tests
# (tests/moe). The lab build of the same kernels, the GPU suites and the SASS check are
# bench/moe/lab/lab.mk; the benchmark's programs bench/moe/moe_bench.mk.
#
#   make build/libldmoe.so       the library (the tiles AUTO can pick); ptxas register/spill
#                                report in build/moe-ptxas.log
#   make test-moe                CPU suite (tile numbering, steal rule, AUTO's choice, argument
#                                validation through the library)
#   make test-moe-layer          CPU suite of the fused layer's API (argument validation, packed sizes)
#   make test-moe-layer-sched    the layer's tile numbering and queue rule on the host (layer_sched.h)
#   make test-gpu-moe-layer      GPU suite of the fused layer (tests/gpu/moe/test_moe_layer.py), plainly
#                                and bound to domain 0 (bit-identical outputs with the smaller grid)
#   make test-moe-sched          the device scheduler on the host, one thread per simulated CTA
#   make test-moe-abi            ldmoe.py's and ldmoe_lab.py's ctypes structs have the C headers' layout
#   make test-moe-py             ldmoe.py's FP8 side and tests/moe/ldmoe_ref.py on the CPU (needs a python
#                                with torch: this one, or $LDMOE_TEST_PYTHON / $SERVE_TEST_PYTHON)
#   make test-moe-order          bench_moe.py's call orders are balanced (bench/moe/call_order.py)
#   make test-moe-layout         the product's sources know nothing of the lab; one definition per tune bit
#   make test-moe-exports        libldmoe.so's tile table and exports agree with ldmoe.h, ldmoe.py, ldmoe.map

LDMOE_DIR      := kernels/moe
LDMOE_BUILD    := $(BUILD)/moe
LDMOE_LIB      := $(BUILD)/libldmoe.so
LDMOE_PTXAS    := $(BUILD)/moe-ptxas.log
LDMOE_HEADERS  := $(LDMOE_DIR)/ldmoe.h $(LDMOE_DIR)/ldmoe_tiles.h
LDMOE_DEPS     := $(LDMOE_HEADERS) $(LDMOE_DIR)/ldmoe_heuristics.h $(wildcard $(LDMOE_DIR)/impl/*.cuh $(LDMOE_DIR)/impl/*.h) \
                  kernels/ldshim_topology.h $(wildcard $(LDMOE_DIR)/impl/layer/*.cuh $(LDMOE_DIR)/impl/layer/*.h)
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

# $(call ldmoe_compile,source,object,ptxas log,extra flags): compile with the ptxas report kept,
# warn on register spills, fail when ptxas serialized a kernel's wgmmas (C75xx), and check the register budget that the warp-specialized prefill
# kernels' setmaxnreg split (WsCfg<BM, BN, STAGES, KSUB, WA = false, ...>, and the block-scaled
# FP8 tiles, Fp8Cfg in warp_specialized.cuh) assumes: with fewer
# than 168 registers per thread at launch, setmaxnreg.inc would wait forever.
define ldmoe_compile
	@mkdir -p $(dir $(2)) $(dir $(3))
	@# private temp names: concurrent makes in a shared tree must not trample each other
	$(NVCC) $(LDMOE_NVFLAGS) $(4) -Xptxas -v -c $(1) -o $(2).$$$$.tmp 2> $(3).$$$$.tmp && mv -f $(2).$$$$.tmp $(2) && \
	  mv -f $(3).$$$$.tmp $(3) || { cat $(3).$$$$.tmp >&2; rm -f $(2).$$$$.tmp $(3).$$$$.tmp; exit 1; }
	@if grep -q "spill stores" $(3) && grep "spill stores" $(3) | grep -qv " 0 bytes spill stores"; then \
	  echo "moe: WARNING: register spills, see $(3)" >&2; fi
	@if grep -q "wgmma.mma_async instructions are serialized" $(3); then \
	  grep "instructions are serialized" $(3) >&2; \
	  echo "moe: ptxas serialized the wgmmas of a kernel (above): every tile's speed rests on their overlap" >&2; \
	  rm -f $(2); exit 1; fi
	@awk '/Compiling entry function .*(grouped_mm_ws_kernel.*WsCfgILi[0-9]+ELi[0-9]+ELi[0-9]+ELi[0-9]+ELb0E|grouped_mm_ws_fp8_kernel.*(ELi2EEEE|WsCfgILi256E)).*sm_90a/ { want = 1; next } \
	  want && /Used [0-9]+ registers/ { n++; if ($$5 != 168) { print "moe: " $$0 " in a prefill WS kernel; warp_specialized.cuh assumes 168"; bad = 1 } want = 0 } \
	  END { if (n == 0) { print "moe: no prefill WS kernel found in $(3)"; bad = 1 } exit bad }' $(3) >&2 || { rm -f $(2); exit 1; }
endef

$(LDMOE_BUILD)/ldmoe_api.o: $(LDMOE_DIR)/ldmoe_api.cu $(LDMOE_DEPS) $(wildcard VERSION)
	$(call ldmoe_compile,$<,$@,$(LDMOE_PTXAS))

$(LDMOE_LIB): $(LDMOE_BUILD)/ldmoe_api.o $(LDMOE_DIR)/ldmoe.map $(wildcard VERSION)
	$(NVCC) -shared -cudart static $(LDMOE_GENCODE) -o $@ $< -Xlinker -soname=$(LDMOE_SONAME) \
	  -Xlinker --version-script=$(LDMOE_DIR)/ldmoe.map -Xlinker --no-undefined -lpthread -ldl -lrt

# ---- CPU tests ----
LDMOE_CPU_TEST := $(BUILD)/tests/moe/test_ldmoe_cpu
# Linked against build/libldmoe.so, it loads $(LDMOE_SONAME): the link beside the library.
$(LDMOE_CPU_TEST): tests/moe/test_ldmoe_cpu.c $(LDMOE_HEADERS) $(LDMOE_LIB) $(BUILD)/$(LDMOE_SONAME) tests/unit/cunit_main.h $(LDMOE_DIR)/impl/div_rn.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -L$(BUILD) -lldmoe -Wl,-rpath,'$$ORIGIN/../..' -lcunit -lm

# The fused layer's API (ldmoe_moe): argument validation through the library, no GPU.
LDMOE_LAYER_CPU_TEST := $(BUILD)/tests/moe/test_ldmoe_layer_cpu
$(LDMOE_LAYER_CPU_TEST): tests/moe/test_ldmoe_layer_cpu.c $(LDMOE_HEADERS) $(LDMOE_LIB) $(BUILD)/$(LDMOE_SONAME) tests/unit/cunit_main.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -L$(BUILD) -lldmoe -Wl,-rpath,'$$ORIGIN/../..' -lcunit -lm

# The fused layer's tile numbering and queue rule (impl/layer/layer_sched.h) on the host.
LDMOE_LAYER_SCHED_TEST := $(BUILD)/tests/moe/test_ldmoe_layer_sched
$(LDMOE_LAYER_SCHED_TEST): tests/moe/test_ldmoe_layer_sched.cc $(LDMOE_DIR)/impl/layer/layer_sched.h tests/unit/cunit_main.h
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -x c++ $(WARN) -O2 -g -I. $(SAN_FLAGS) -o $@ $< $(LDFLAGS) -lcunit

# The device scheduler (impl/scheduler.cuh) compiled for the host, one thread per simulated CTA.
LDMOE_SCHED_TEST := $(BUILD)/tests/moe/test_ldmoe_sched
CXX ?= g++
$(LDMOE_SCHED_TEST): tests/moe/test_ldmoe_sched.cc $(LDMOE_DIR)/impl/scheduler.cuh $(LDMOE_HEADERS) \
                     kernels/ldshim_topology.h tests/unit/cunit_main.h
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -x c++ $(WARN) -O2 -g -pthread -I. $(SAN_FLAGS) -o $@ $< $(LDFLAGS) -lcunit

.PHONY: test-moe-layer test-moe-layer-sched test-gpu-moe-layer
test-moe-layer: $(LDMOE_LAYER_CPU_TEST) | $(RESULTS)
	$(LDMOE_LAYER_CPU_TEST) $(RESULTS)/test-moe-layer

test-moe-layer-sched: $(LDMOE_LAYER_SCHED_TEST) | $(RESULTS)
	$(LDMOE_LAYER_SCHED_TEST) $(RESULTS)/test-moe-layer-sched

# The fused layer on the GPU (tests/gpu/moe/test_moe_layer.py): plainly, then in a process bound
# to domain 0's SMs (a smaller grid), whose outputs must equal the first run's bit for bit, and
# which fails unless the shim did bind it. The shim by its path: shim/shim.mk is included after
# this file, so $(SHIM_LIB) is still empty where this rule's prerequisites are read.
test-gpu-moe-layer: $(LDMOE_LIB) $(BUILD)/libldshim.so | $(RESULTS)
	@rm -f $(RESULTS)/test-gpu-moe-layer-*; d=$$(mktemp -d); rc=0; \
	LDMOE_LIB=$(abspath $(LDMOE_LIB)) $(PYTHON) tests/gpu/moe/test_moe_layer.py --digest $$d/digest \
	  --result $(RESULTS)/test-gpu-moe-layer-plain || rc=1; \
	LD_PRELOAD=$(abspath $(BUILD)/libldshim.so) LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0 LDMOE_LIB=$(abspath $(LDMOE_LIB)) \
	  $(PYTHON) tests/gpu/moe/test_moe_layer.py --digest $$d/digest --bound --result $(RESULTS)/test-gpu-moe-layer-bound || rc=1; \
	rm -rf $$d; for r in plain bound; do [ -s $(RESULTS)/test-gpu-moe-layer-$$r ] || echo "0 1" > $(RESULTS)/test-gpu-moe-layer-$$r; done; \
	cat $(RESULTS)/test-gpu-moe-layer-plain $(RESULTS)/test-gpu-moe-layer-bound | awk '{ p += $$1; f += $$2 } END { print p, f }' \
	  > $(RESULTS)/test-gpu-moe-layer; exit $$rc

.PHONY: test-moe test-moe-sched test-moe-abi test-moe-py test-moe-order test-moe-layout test-moe-exports
test-moe: $(LDMOE_CPU_TEST) | $(RESULTS)
	$(LDMOE_CPU_TEST) $(RESULTS)/test-moe

test-moe-sched: $(LDMOE_SCHED_TEST) | $(RESULTS)
	$(LDMOE_SCHED_TEST) $(RESULTS)/test-moe-sched

# ldmoe.py's and ldmoe_lab.py's ctypes structs against the C headers (no library, no torch needed).
test-moe-abi: | $(RESULTS)
	$(PYTHON) tests/moe/test_ldmoe_abi.py --cc $(CC) --result $(RESULTS)/test-moe-abi

# bench_moe.py's call orders (bench/moe/call_order.py): every cycle balanced (no GPU, no torch).
test-moe-order: | $(RESULTS)
	$(PYTHON) tests/moe/test_call_order.py $(RESULTS)/test-moe-order

# libldmoe.so's tile table and exports against ldmoe.h, ldmoe.py and ldmoe.map (the lab's part:
# test-moe-tiles, bench/moe/lab/lab.mk).
test-moe-exports: $(LDMOE_LIB) | $(RESULTS)
	LDMOE_LIB=$(abspath $(LDMOE_LIB)) $(PYTHON) tests/moe/test_tile_list.py --product $(RESULTS)/test-moe-exports

# The product's sources know nothing of the lab; each variant bit is defined once (tests/moe/test_layout.py).
test-moe-layout: | $(RESULTS)
	$(PYTHON) tests/moe/test_layout.py $(RESULTS)/test-moe-layout

# ldmoe.py's FP8 argument checks, quantization and scale layouts, and the CPU references the GPU
# tests use (tests/moe/ldmoe_ref.py); libldmoe.so only for its packed sizes.
test-moe-py: $(LDMOE_LIB) | $(RESULTS)
	LDMOE_LIB=$(abspath $(LDMOE_LIB)) $(PYTHON) tests/moe/test_ldmoe_py.py --result $(RESULTS)/test-moe-py

ALL_TARGETS     += $(LDMOE_LIB)
TEST_TARGETS    += $(LDMOE_CPU_TEST) $(LDMOE_SCHED_TEST) $(LDMOE_LAYER_CPU_TEST) $(LDMOE_LAYER_SCHED_TEST)
INSTALL_SOLIBS  += $(LDMOE_LIB)
INSTALL_HEADERS += $(LDMOE_HEADERS)
INSTALL_PYMODS  += $(LDMOE_DIR)/ldmoe.py
INSTALL_PCS     += pkgconfig/libldmoe.pc.in
