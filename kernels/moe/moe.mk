# kernels/moe/moe.mk — libldmoe.so (persistent domain-aware MoE grouped GEMM), its lab build
# (bench/moe/lab), their CPU tests (tests/moe) and GPU tests (tests/gpu/moe).
#
#   make build/libldmoe.so       the library (the tiles AUTO can pick); ptxas register/spill
#                                report in build/moe-ptxas.log
#   make lab-moe                 build/lab/libldmoe_lab.so: the same plus every experimental tile,
#                                per-tile counters, timeline, tune bits, topology override
#                                (bench/moe/lab/ldmoe_lab.h); not built by `make`, built by `make test`
#   make lab-moe-diag            build/lab/diag/libldmoe_lab.so: the lab with -DLDMOE_DIAG
#   make sass-identity           every kernel of both libraries against the SASS digests recorded
#                                in bench/moe/sass/baseline.txt (bench/moe/sass_identity.py)
#   make test-moe                CPU suite (tile numbering, steal rule, AUTO's choice, argument
#                                validation through the library)
#   make test-moe-lab            CPU suite of the lab library (its tiles and arguments)
#   make test-moe-tiles          the tile lists of ldmoe.h, ldmoe_lab.h, ldmoe.py and both libraries
#                                agree; the product library exports only the public API
#   make test-moe-layer          CPU suite of the fused layer's API (argument validation, packed sizes)
#   make test-moe-layer-sched    the layer's tile numbering and queue rule on the host (layer_sched.h)
#   make test-gpu-moe-layer      GPU suite of the fused layer (tests/gpu/moe/test_moe_layer.py), plainly
#                                and bound to domain 0 (bit-identical outputs with the smaller grid)
#   make test-moe-sched          the device scheduler on the host, one thread per simulated CTA
#   make test-moe-abi            ldmoe.py's and ldmoe_lab.py's ctypes structs have the C headers' layout
#   make test-moe-py             ldmoe.py's FP8 side and tests/moe/ldmoe_ref.py on the CPU (needs a python
#                                with torch: this one, or $LDMOE_TEST_PYTHON / $SERVE_TEST_PYTHON)
#   make test-moe-order          bench_moe.py's call orders are balanced (bench/moe/call_order.py)
#   make test-gpu-moe            GPU suite: the product tiles through libldmoe.so, then every tile
#                                (exactly-once counters, tune bits, timeline) through the lab
#   make bench-moe               benchmark vs torch._grouped_mm and cuBLAS (needs the GPU)
#   make build/moe/libstreamfloor.so   the benchmark's one-launch streaming floor peer
#   make build/moe/pattern_probe       weight streaming by access pattern (bench/moe/pattern_probe.cu)

LDMOE_DIR      := kernels/moe
LDMOE_BUILD    := $(BUILD)/moe
LDMOE_LIB      := $(BUILD)/libldmoe.so
LDMOE_PTXAS    := $(BUILD)/moe-ptxas.log
LDMOE_HEADERS  := $(LDMOE_DIR)/ldmoe.h $(LDMOE_DIR)/ldmoe_tiles.h
LDMOE_DEPS     := $(LDMOE_HEADERS) $(LDMOE_DIR)/ldmoe_heuristics.h $(wildcard $(LDMOE_DIR)/impl/*.cuh) $(LDMOE_DIR)/impl/div_rn.h \
                  kernels/ldshim_topology.h $(LDMOE_DIR)/ldmoe_layer.cu $(wildcard $(LDMOE_DIR)/impl/layer/*.cuh)
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

# ---- lab build (bench/moe/lab) ----
# The same host and kernel sources with the lab's tiles and entry points; never installed. Its
# soname is its own, so it never stands in for libldmoe.so.0 by accident.
LDMOE_LAB_DIR   := bench/moe/lab
LDMOE_LAB_LIB   := $(BUILD)/lab/libldmoe_lab.so
LDMOE_LAB_PTXAS := $(BUILD)/lab/moe-lab-ptxas.log
LDMOE_LAB_DEPS  := $(LDMOE_DIR)/ldmoe_api.cu $(LDMOE_DEPS) $(LDMOE_LAB_DIR)/ldmoe_lab.h $(wildcard VERSION)

$(BUILD)/lab/ldmoe_lab.o: $(LDMOE_LAB_DIR)/ldmoe_lab.cu $(LDMOE_LAB_DEPS)
	$(call ldmoe_compile,$<,$@,$(LDMOE_LAB_PTXAS))

$(LDMOE_LAB_LIB): $(BUILD)/lab/ldmoe_lab.o $(LDMOE_LAB_DIR)/ldmoe_lab.map
	$(NVCC) -shared -cudart static $(LDMOE_GENCODE) -o $@ $< -Xlinker -soname=libldmoe_lab.so \
	  -Xlinker --version-script=$(LDMOE_LAB_DIR)/ldmoe_lab.map -Xlinker --no-undefined -lpthread -ldl -lrt

# Diagnostic lab build: -DLDMOE_DIAG adds the tune bits LDMOE_TUNE_DIAG_NO_MMA (0x40000000) and
# LDMOE_TUNE_DIAG_NO_STORE (0x20000000), to time a launch without its math or its stores
# (bench_moe.py --lab --variants auto:0,auto:0x60000000 with LDMOE_LIB pointing here). Its results
# are wrong by design, and ptxas serializes its wgmmas (C7520), so compare its variants with each
# other, not with the other libraries.
LDMOE_LAB_DIAG_LIB := $(BUILD)/lab/diag/libldmoe_lab.so
$(BUILD)/lab/diag/ldmoe_lab.o: $(LDMOE_LAB_DIR)/ldmoe_lab.cu $(LDMOE_LAB_DEPS)
	@mkdir -p $(dir $@)
	$(NVCC) $(LDMOE_NVFLAGS) -DLDMOE_DIAG -c $< -o $@
$(LDMOE_LAB_DIAG_LIB): $(BUILD)/lab/diag/ldmoe_lab.o $(LDMOE_LAB_DIR)/ldmoe_lab.map
	$(NVCC) -shared -cudart static $(LDMOE_GENCODE) -o $@ $< -Xlinker -soname=libldmoe_lab.so \
	  -Xlinker --version-script=$(LDMOE_LAB_DIR)/ldmoe_lab.map -Xlinker --no-undefined -lpthread -ldl -lrt

.PHONY: lab-moe lab-moe-diag sass-identity
lab-moe: $(LDMOE_LAB_LIB)
lab-moe-diag: $(LDMOE_LAB_DIAG_LIB)

# Every kernel of both libraries must be byte-identical in SASS (and equal in resource usage) to
# its counterpart in the recorded digests (the fused layer's kernels, ldmoe::layer, are newer than
# the digests and listed without comparison), and each kernel AUTO can launch must be among them: a
# restructuring that should not change the machine code shows that it did not. A change that
# does change it (measured on a GPU) records new digests (sass_identity.py digest of both
# libraries, one file; its header says at which commit and why). Needs a cuobjdump
# (bench/moe/sass_identity.py says where it looks).
sass-identity: $(LDMOE_LIB) $(LDMOE_LAB_LIB)
	$(PYTHON) bench/moe/sass_identity.py compare bench/moe/sass/baseline.txt $(LDMOE_LIB) $(LDMOE_LAB_LIB) \
	  --require-file bench/moe/sass/auto-kernels.txt --new-ok '_ZN5ldmoe5layer'

# ---- lab CPU tests ----
LDMOE_LAB_CPU_TEST := $(BUILD)/tests/moe/test_ldmoe_lab_cpu
$(LDMOE_LAB_CPU_TEST): tests/moe/test_ldmoe_lab_cpu.c $(LDMOE_HEADERS) $(LDMOE_LAB_DIR)/ldmoe_lab.h $(LDMOE_LAB_LIB) \
                       tests/unit/cunit_main.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -L$(BUILD)/lab -lldmoe_lab -Wl,-rpath,'$$ORIGIN/../../lab' -lcunit

.PHONY: test-moe-layer test-moe-layer-sched test-gpu-moe-layer
test-moe-layer: $(LDMOE_LAYER_CPU_TEST) | $(RESULTS)
	$(LDMOE_LAYER_CPU_TEST) $(RESULTS)/test-moe-layer

test-moe-layer-sched: $(LDMOE_LAYER_SCHED_TEST) | $(RESULTS)
	$(LDMOE_LAYER_SCHED_TEST) $(RESULTS)/test-moe-layer-sched

# The fused layer on the GPU (tests/gpu/moe/test_moe_layer.py): plainly, then in a process bound
# to domain 0's SMs (a smaller grid), whose outputs must equal the first run's bit for bit.
test-gpu-moe-layer: $(LDMOE_LIB) $(SHIM_LIB) | $(RESULTS)
	@rm -f $(RESULTS)/test-gpu-moe-layer-*; d=$$(mktemp -d); rc=0; \
	LDMOE_LIB=$(abspath $(LDMOE_LIB)) $(PYTHON) tests/gpu/moe/test_moe_layer.py --digest $$d/digest \
	  --result $(RESULTS)/test-gpu-moe-layer-plain || rc=1; \
	LD_PRELOAD=$(abspath $(SHIM_LIB)) LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0 LDMOE_LIB=$(abspath $(LDMOE_LIB)) \
	  $(PYTHON) tests/gpu/moe/test_moe_layer.py --digest $$d/digest --result $(RESULTS)/test-gpu-moe-layer-bound || rc=1; \
	rm -rf $$d; for r in plain bound; do [ -s $(RESULTS)/test-gpu-moe-layer-$$r ] || echo "0 1" > $(RESULTS)/test-gpu-moe-layer-$$r; done; \
	cat $(RESULTS)/test-gpu-moe-layer-plain $(RESULTS)/test-gpu-moe-layer-bound | awk '{ p += $$1; f += $$2 } END { print p, f }' \
	  > $(RESULTS)/test-gpu-moe-layer; exit $$rc

.PHONY: test-moe test-moe-lab test-moe-tiles test-moe-sched test-moe-abi test-moe-py test-moe-order test-gpu-moe test-gpu-moe-bound bench-moe
test-moe: $(LDMOE_CPU_TEST) | $(RESULTS)
	$(LDMOE_CPU_TEST) $(RESULTS)/test-moe

test-moe-lab: $(LDMOE_LAB_CPU_TEST) | $(RESULTS)
	$(LDMOE_LAB_CPU_TEST) $(RESULTS)/test-moe-lab

test-moe-tiles: $(LDMOE_LIB) $(LDMOE_LAB_LIB) | $(RESULTS)
	LDMOE_LIB=$(abspath $(LDMOE_LIB)) LDMOE_LAB_LIB=$(abspath $(LDMOE_LAB_LIB)) \
	  $(PYTHON) tests/moe/test_tile_list.py $(RESULTS)/test-moe-tiles

test-moe-sched: $(LDMOE_SCHED_TEST) | $(RESULTS)
	$(LDMOE_SCHED_TEST) $(RESULTS)/test-moe-sched

# ldmoe.py's and ldmoe_lab.py's ctypes structs against the C headers (no library, no torch needed).
test-moe-abi: | $(RESULTS)
	$(PYTHON) tests/moe/test_ldmoe_abi.py --cc $(CC) --result $(RESULTS)/test-moe-abi

# Both runs always run; a run that died without writing its result counts as one failure.
# $(call ldmoe_gpu_runs,RESULT,PREFIX-ENV,ARGS) runs the product and the lab test and sums them.
define ldmoe_gpu_runs
	@rc=0; \
	$(2) LDMOE_LIB=$(abspath $(LDMOE_LIB)) $(PYTHON) tests/gpu/moe/test_moe.py $(3) --result $(1)-product || rc=1; \
	$(2) LDMOE_LAB_LIB=$(abspath $(LDMOE_LAB_LIB)) $(PYTHON) tests/gpu/moe/test_moe.py --lab $(3) --result $(1)-lab || rc=1; \
	for r in $(1)-product $(1)-lab; do [ -s $$r ] || echo "0 1" > $$r; done; \
	cat $(1)-product $(1)-lab | awk '{ p += $$1; f += $$2 } END { print p, f }' > $(1); \
	exit $$rc
endef

# bench_moe.py's call orders (bench/moe/call_order.py): every cycle balanced (no GPU, no torch).
test-moe-order: | $(RESULTS)
	$(PYTHON) tests/moe/test_call_order.py $(RESULTS)/test-moe-order

# ldmoe.py's FP8 argument checks, quantization and scale layouts, and the CPU references the GPU
# tests use (tests/moe/ldmoe_ref.py); libldmoe.so only for its packed sizes.
test-moe-py: $(LDMOE_LIB) | $(RESULTS)
	LDMOE_LIB=$(abspath $(LDMOE_LIB)) $(PYTHON) tests/moe/test_ldmoe_py.py --result $(RESULTS)/test-moe-py

test-gpu-moe: $(LDMOE_LIB) $(LDMOE_LAB_LIB) | $(RESULTS)
	@rm -f $(RESULTS)/test-gpu-moe-product $(RESULTS)/test-gpu-moe-lab
	$(call ldmoe_gpu_runs,$(RESULTS)/test-gpu-moe,,)

# The same tests in a process bound to domain 0's SMs (compute binding): the persistent grid
# is sized to the bound set and only bound SMs are ranked, and every tile must still be
# computed exactly once — which the lab run checks (its per-tile counters and timeline).
test-gpu-moe-bound: $(LDMOE_LIB) $(LDMOE_LAB_LIB) $(SHIM_LIB) | $(RESULTS)
	@rm -f $(RESULTS)/test-gpu-moe-bound-product $(RESULTS)/test-gpu-moe-bound-lab
	$(call ldmoe_gpu_runs,$(RESULTS)/test-gpu-moe-bound,LD_PRELOAD=$(abspath $(SHIM_LIB)) LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0,--quick)

# The tile sweeps need the lab's tiles: the lab library runs them all, AUTO's included (the same
# kernels as libldmoe.so, make sass-identity).
bench-moe: $(LDMOE_LAB_LIB) $(LDMOE_FLOOR_LIB)
	LDMOE_LAB_LIB=$(abspath $(LDMOE_LAB_LIB)) LDMOE_FLOOR_LIB=$(abspath $(LDMOE_FLOOR_LIB)) $(PYTHON) bench/moe/bench_moe.py --lab

ALL_TARGETS     += $(LDMOE_LIB) $(LDMOE_FLOOR_LIB) $(LDMOE_PATTERN_PROBE)
TEST_SUITES     += test-moe-layer test-moe-layer-sched test-moe test-moe-lab test-moe-tiles test-moe-sched test-moe-abi test-moe-py test-moe-order
GPU_TEST_SUITES += test-gpu-moe test-gpu-moe-bound test-gpu-moe-layer
INSTALL_SOLIBS  += $(LDMOE_LIB)
INSTALL_HEADERS += $(LDMOE_HEADERS)
INSTALL_PYMODS  += $(LDMOE_DIR)/ldmoe.py
INSTALL_PCS     += pkgconfig/libldmoe.pc.in
