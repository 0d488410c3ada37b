# ldshim — top-level build.
#
# Each component keeps its rules in its own fragment (policy/policy.mk, shim/shim.mk,
# kernels/*.mk, tests/*.mk, bench/bench.mk, tools/tools.mk). A fragment appends to:
#   ALL_TARGETS        files `make` builds
#   TEST_SUITES        phony targets run by `make test` (CPU only); each writes
#                      $(RESULTS)/<suite> holding "<passed> <failed>"
#   GPU_TEST_SUITES    phony targets run by `make test-gpu` (needs a GPU), same contract
#   INSTALL_LIBS / INSTALL_BINS / INSTALL_HEADERS / INSTALL_DATA   what `make install` copies
#
# Options: SAN=1 builds the CPU code with ASan+UBSan; NVCC=... CUDA_HOME=... V=1.

CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CC        ?= gcc
PYTHON    ?= python3
PREFIX    ?= /usr/local
SAN       ?= 0
# The sanitizer build lives apart, so `make test` and `make test SAN=1` never mix objects.
ifeq ($(SAN),1)
BUILD     ?= build-san
else
BUILD     ?= build
endif
RESULTS   := $(BUILD)/results

CUDA_INC  := $(CUDA_HOME)/include
WARN      := -Wall -Wextra -Werror
BASE_CFLAGS := -std=gnu11 -D_GNU_SOURCE $(WARN) -O2 -g -fPIC -pthread -I. -Ikernels -I$(CUDA_INC) \
               -fvisibility=hidden
ifeq ($(SAN),1)
  SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  BASE_CFLAGS += $(SAN_FLAGS)
  LDFLAGS_SAN := $(SAN_FLAGS)
  # An ASan-built preload library must be preceded by the ASan runtime in LD_PRELOAD.
  ASAN_RT := $(shell $(CC) -print-file-name=libasan.so)
  UBSAN_RT := $(shell $(CC) -print-file-name=libubsan.so)
  PRELOAD_PREFIX := $(ASAN_RT):$(UBSAN_RT):
  export ASAN_OPTIONS ?= detect_leaks=1:abort_on_error=0:halt_on_error=1
  export UBSAN_OPTIONS ?= print_stacktrace=1:halt_on_error=1
else
  PRELOAD_PREFIX :=
endif
CFLAGS    ?=
CFLAGS    += $(BASE_CFLAGS)
LDFLAGS   += $(LDFLAGS_SAN)

# sm_90 machine code for Hopper, sm_100 for Blackwell, PTX for everything newer.
CUDA_GENCODE ?= -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_100,code=sm_100 \
                -gencode=arch=compute_100,code=compute_100

ALL_TARGETS :=
TEST_SUITES :=
GPU_TEST_SUITES :=
INSTALL_LIBS :=
INSTALL_BINS :=
INSTALL_HEADERS :=
INSTALL_DATA :=

.PHONY: all test test-gpu install clean fuzz help
all: real-all

# Component fragments. shim/shim.mk links every shim/*.c plus $(SHIM_EXTRA_OBJS) (the
# embedded probe fatbin from kernels/kernels.mk) into build/libldshim.so.
include $(sort $(wildcard policy/*.mk kernels/*.mk kernels/*/*.mk shim/*.mk tools/*.mk tests/*.mk tests/*/*.mk \
                         tests/*/*/*.mk bench/*.mk bench/*/*.mk))

real-all: $(ALL_TARGETS)

$(BUILD) $(RESULTS):
	@mkdir -p $@

# `make test`: every CPU suite, then one summary line. -k semantics: a failing suite does
# not stop the others; the summary fails if any suite failed or wrote no result.
test: $(ALL_TARGETS)
	@rm -rf $(RESULTS); mkdir -p $(RESULTS)
	@rc=0; for s in $(TEST_SUITES); do $(MAKE) --no-print-directory $$s || rc=1; done; \
	  sh tests/summarize.sh $(RESULTS) $(TEST_SUITES) || rc=1; exit $$rc

test-gpu: $(ALL_TARGETS)
	@rm -rf $(RESULTS); mkdir -p $(RESULTS)
	@rc=0; for s in $(GPU_TEST_SUITES); do $(MAKE) --no-print-directory $$s || rc=1; done; \
	  sh tests/summarize.sh $(RESULTS) $(GPU_TEST_SUITES) || rc=1; exit $$rc

install: $(ALL_TARGETS)
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/include/ldshim \
	  $(DESTDIR)$(PREFIX)/share/ldshim
	$(if $(INSTALL_LIBS),install -m 0755 $(INSTALL_LIBS) $(DESTDIR)$(PREFIX)/lib/)
	$(if $(INSTALL_BINS),install -m 0755 $(INSTALL_BINS) $(DESTDIR)$(PREFIX)/bin/)
	$(if $(INSTALL_HEADERS),install -m 0644 $(INSTALL_HEADERS) $(DESTDIR)$(PREFIX)/include/ldshim/)
	$(if $(INSTALL_DATA),install -m 0644 $(INSTALL_DATA) $(DESTDIR)$(PREFIX)/share/ldshim/)

clean:
	rm -rf $(BUILD)

help:
	@echo "make            build libldshim.so, libldmoe.so, tools"
	@echo "make test       CPU test suites (SAN=1 for ASan/UBSan)"
	@echo "make test-gpu   GPU test suites (needs an NVIDIA GPU)"
	@echo "make fuzz       libFuzzer run of the policy parser"
	@echo "make install PREFIX=/usr/local"
