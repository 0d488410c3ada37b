# bench/moe/lab/lab.mk — the lab build of libldmoe (ldmoe_lab.h): the product's kernel and host
# templates (kernels/moe/impl/library.cuh) instantiated with the lab's policy (ldmoe_lab.cu: more
# tiles, per-tile counters, a launch timeline, variant bits, a topology override). Never built by
# `make`, never installed; its soname is its own, so it never stands in for libldmoe.so.0.
#
#   make lab-moe                 build/lab/libldmoe_lab.so
#   make lab-moe-diag            build/lab/diag/libldmoe_lab.so: every kernel also compiles the
#                                LDMOE_TUNE_DIAG_* bits (kernels/moe/impl/variants.h), which remove
#                                the math, the stores or the token loads, to time a launch without
#                                them (bench_moe.py --lab --variants auto:0,auto:0x60000000 with
#                                LDMOE_LAB_LIB pointing here). Its results are wrong by design and
#                                ptxas serializes its wgmmas (C7520): compare its variants with each
#                                other only.
#   make sass-identity           every kernel of both libraries against the SASS digests recorded in
#                                bench/moe/sass/baseline.txt (bench/moe/sass_identity.py)
#   make test-moe-lab            CPU suite of the lab library (its tiles and arguments)
#   make test-moe-tiles          the tile lists of ldmoe.h, ldmoe_lab.h, ldmoe.py and both libraries
#                                agree; the product library exports only the public API
#   make test-gpu-moe            GPU suite: the product tiles through libldmoe.so, then every tile
#                                (exactly-once counters, tune bits, timeline) through the lab
#   make test-gpu-moe-bound      the same in a process bound to domain 0 (compute binding)

LDMOE_LAB_DIR   := bench/moe/lab
LDMOE_LAB_LIB   := $(BUILD)/lab/libldmoe_lab.so
LDMOE_LAB_PTXAS := $(BUILD)/lab/moe-lab-ptxas.log
LDMOE_LAB_DEPS  := $(LDMOE_DEPS) $(LDMOE_LAB_DIR)/ldmoe_lab.h $(wildcard VERSION)
LDMOE_LAB_LINK   = $(NVCC) -shared -cudart static $(LDMOE_GENCODE) -o $@ $< -Xlinker -soname=libldmoe_lab.so \
                   -Xlinker --version-script=$(LDMOE_LAB_DIR)/ldmoe_lab.map -Xlinker --no-undefined -lpthread -ldl -lrt

$(BUILD)/lab/ldmoe_lab.o: $(LDMOE_LAB_DIR)/ldmoe_lab.cu $(LDMOE_LAB_DEPS)
	$(call ldmoe_compile,$<,$@,$(LDMOE_LAB_PTXAS))

$(LDMOE_LAB_LIB): $(BUILD)/lab/ldmoe_lab.o $(LDMOE_LAB_DIR)/ldmoe_lab.map
	$(LDMOE_LAB_LINK)

# The diagnostic build: the same source with the lab policy's diagnostic kernels (LDMOE_LAB_DIAG).
LDMOE_LAB_DIAG_LIB := $(BUILD)/lab/diag/libldmoe_lab.so
$(BUILD)/lab/diag/ldmoe_lab.o: $(LDMOE_LAB_DIR)/ldmoe_lab.cu $(LDMOE_LAB_DEPS)
	@mkdir -p $(dir $@)
	$(NVCC) $(LDMOE_NVFLAGS) -DLDMOE_LAB_DIAG -c $< -o $@
$(LDMOE_LAB_DIAG_LIB): $(BUILD)/lab/diag/ldmoe_lab.o $(LDMOE_LAB_DIR)/ldmoe_lab.map
	$(LDMOE_LAB_LINK)

#: lab-moe         build/lab/libldmoe_lab.so: libldmoe with every tile, counters, timeline, tune bits
#: lab-moe-diag    build/lab/diag/libldmoe_lab.so: the lab with the diagnostic bits compiled in
#: sass-identity   both libraries' kernels against bench/moe/sass/baseline.txt (needs a cuobjdump)
.PHONY: lab-moe lab-moe-diag sass-identity
lab-moe: $(LDMOE_LAB_LIB)
lab-moe-diag: $(LDMOE_LAB_DIAG_LIB)

# Every kernel of both libraries must be byte-identical in SASS (and equal in resource usage) to
# its counterpart in the recorded digests, and each kernel AUTO can launch must be among them: a
# restructuring that should not change the machine code shows that it did not. A change that
# does change it (measured on a GPU) records new digests (sass_identity.py digest of both
# libraries, one file; its header says at which commit and why). Needs a cuobjdump
# (bench/moe/sass_identity.py says where it looks).
sass-identity: $(LDMOE_LIB) $(LDMOE_LAB_LIB)
	$(PYTHON) bench/moe/sass_identity.py compare bench/moe/sass/baseline.txt $(LDMOE_LIB) $(LDMOE_LAB_LIB) \
	  --require-file bench/moe/sass/auto-kernels.txt --new-ok '_ZN5ldmoe5layer'

# ---- tests ----
LDMOE_LAB_CPU_TEST := $(BUILD)/tests/moe/test_ldmoe_lab_cpu
$(LDMOE_LAB_CPU_TEST): tests/moe/test_ldmoe_lab_cpu.c $(LDMOE_HEADERS) $(LDMOE_LAB_DIR)/ldmoe_lab.h $(LDMOE_LAB_LIB) \
                       tests/unit/cunit_main.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -L$(BUILD)/lab -lldmoe_lab -Wl,-rpath,'$$ORIGIN/../../lab' -lcunit

LAB_TEST_TARGETS += $(LDMOE_LAB_LIB) $(LDMOE_LAB_CPU_TEST)

.PHONY: test-moe-lab test-moe-tiles test-gpu-moe test-gpu-moe-bound
test-moe-lab: $(LDMOE_LAB_CPU_TEST) | $(RESULTS)
	$(LDMOE_LAB_CPU_TEST) $(RESULTS)/test-moe-lab

test-moe-tiles: $(LDMOE_LIB) $(LDMOE_LAB_LIB) | $(RESULTS)
	LDMOE_LIB=$(abspath $(LDMOE_LIB)) LDMOE_LAB_LIB=$(abspath $(LDMOE_LAB_LIB)) \
	  $(PYTHON) tests/moe/test_tile_list.py $(RESULTS)/test-moe-tiles

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

test-gpu-moe: $(LDMOE_LIB) $(LDMOE_LAB_LIB) | $(RESULTS)
	@rm -f $(RESULTS)/test-gpu-moe-product $(RESULTS)/test-gpu-moe-lab
	$(call ldmoe_gpu_runs,$(RESULTS)/test-gpu-moe,,)

# The same tests in a process bound to domain 0's SMs (compute binding): the persistent grid
# is sized to the bound set and only bound SMs are ranked, and every tile must still be
# computed exactly once — which the lab run checks (its per-tile counters and timeline).
test-gpu-moe-bound: $(LDMOE_LIB) $(LDMOE_LAB_LIB) $(SHIM_LIB) | $(RESULTS)
	@rm -f $(RESULTS)/test-gpu-moe-bound-product $(RESULTS)/test-gpu-moe-bound-lab
	$(call ldmoe_gpu_runs,$(RESULTS)/test-gpu-moe-bound,LD_PRELOAD=$(abspath $(SHIM_LIB)) LDSHIM_STATE=compute-only LDSHIM_DOMAIN=0,--quick)


