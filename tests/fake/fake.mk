# tests/fake/fake.mk — fake CUDA driver + runtime and the CPU integration suite `test-fake`.
#
#   build/fake/libcuda.so.1 (+ libcuda.so)      fake driver: device memory is host memory
#   build/fake/libcudart.so.13 (+ libcudart.so) fake runtime, reaches the driver like cudart
#   build/fake/libcudart_fake_static.a          the same runtime, for static linking
#   build/fake/t_*                              test programs (tests/fake/t_*.c)
#   make test-fake                              runs every case under build/libldshim.so
#
# The fake driver is linked -Bsymbolic so that its cuGetProcAddress table and its internal
# calls keep pointing at its own functions when a preloaded shim exports the same names.

FAKE_DIR      := $(BUILD)/fake
FAKE_DRV_SRCS := tests/fake/fake_core.c tests/fake/fake_mem.c tests/fake/fake_module.c tests/fake/fake_green.c \
                 tests/fake/fake_pool.c \
                 tests/fake/fake_proc.c
FAKE_DRV_OBJS := $(patsubst tests/fake/%.c,$(FAKE_DIR)/obj/%.o,$(FAKE_DRV_SRCS))
FAKE_HDRS     := $(wildcard tests/fake/*.h) shim/cuda_compat.h
FAKE_LIBCUDA  := $(FAKE_DIR)/libcuda.so.1
FAKE_CUDART   := $(FAKE_DIR)/libcudart.so.13
FAKE_CUDART_A := $(FAKE_DIR)/libcudart_fake_static.a
FAKE_PROGS    := $(FAKE_DIR)/t_driver $(FAKE_DIR)/t_vmm $(FAKE_DIR)/t_runtime $(FAKE_DIR)/t_runtime_static \
                 $(FAKE_DIR)/t_compute $(FAKE_DIR)/t_place $(FAKE_DIR)/t_stress
FAKE_POLICIES := $(wildcard tests/fake/policies/*.policy)
# Iterations of the thread stress case (scaled down under SAN=1).
FAKE_STRESS_ITERS ?= $(if $(filter 1,$(SAN)),1000,10000)

TEST_TARGETS += $(FAKE_LIBCUDA) $(FAKE_DIR)/libcuda.so $(FAKE_CUDART) $(FAKE_DIR)/libcudart.so \
               $(FAKE_CUDART_A) $(FAKE_PROGS)

$(FAKE_DIR)/obj/%.o: tests/fake/%.c $(FAKE_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(FAKE_LIBCUDA): $(FAKE_DRV_OBJS)
	$(CC) -shared -Wl,-soname,libcuda.so.1 -Wl,-Bsymbolic -Wl,--no-undefined $(LDFLAGS) \
	  -o $@ $^ -pthread -ldl

$(FAKE_DIR)/libcuda.so: $(FAKE_LIBCUDA)
	ln -sf libcuda.so.1 $@

$(FAKE_CUDART): $(FAKE_DIR)/obj/fake_cudart.o
	$(CC) -shared -Wl,-soname,libcudart.so.13 -Wl,--no-undefined $(LDFLAGS) -o $@ $^ -pthread -ldl

$(FAKE_DIR)/libcudart.so: $(FAKE_CUDART)
	ln -sf libcudart.so.13 $@

$(FAKE_CUDART_A): $(FAKE_DIR)/obj/fake_cudart.o
	rm -f $@
	ar rcs $@ $^

# Test programs. Never linked against the shim: it arrives through LD_PRELOAD.
$(FAKE_DIR)/t_driver: tests/fake/t_driver.c tests/fake/t_common.h $(FAKE_HDRS) $(FAKE_DIR)/libcuda.so
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) -L$(FAKE_DIR) -Wl,-rpath,'$$ORIGIN' -lcuda -pthread -ldl

# Reliability: thread stress, fault-injection workload, policy timing (cases_reliability.py).
$(FAKE_DIR)/t_stress: tests/fake/t_stress.c tests/fake/t_common.h $(FAKE_HDRS) $(FAKE_DIR)/libcuda.so
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) -L$(FAKE_DIR) -Wl,-rpath,'$$ORIGIN' -lcuda -pthread -ldl

$(FAKE_DIR)/t_vmm: tests/fake/t_vmm.c tests/fake/t_common.h $(FAKE_HDRS) $(FAKE_DIR)/libcuda.so
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) -L$(FAKE_DIR) -Wl,-rpath,'$$ORIGIN' -lcuda -pthread -ldl

$(FAKE_DIR)/t_compute: tests/fake/t_compute.c tests/fake/t_common.h $(FAKE_HDRS) $(FAKE_DIR)/libcuda.so
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) -L$(FAKE_DIR) -Wl,-rpath,'$$ORIGIN' -lcuda -pthread -ldl

$(FAKE_DIR)/t_place: tests/fake/t_place.c tests/fake/t_common.h $(FAKE_HDRS) $(FAKE_DIR)/libcuda.so
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) -L$(FAKE_DIR) -Wl,-rpath,'$$ORIGIN' -lcuda -pthread -ldl

$(FAKE_DIR)/t_runtime: tests/fake/t_runtime.c tests/fake/t_common.h $(FAKE_HDRS) $(FAKE_DIR)/libcudart.so
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) -L$(FAKE_DIR) -Wl,-rpath,'$$ORIGIN' -lcudart -pthread -ldl

$(FAKE_DIR)/t_runtime_static: tests/fake/t_runtime.c tests/fake/t_common.h $(FAKE_HDRS) $(FAKE_CUDART_A)
	$(CC) $(CFLAGS) -DFAKE_STATIC_CUDART $< -o $@ $(LDFLAGS) $(FAKE_CUDART_A) -pthread -ldl

#: fake-selftest   the fake CUDA driver and runtime alone, without the shim
.PHONY: test-fake fake-selftest
# The whole suite: needs build/libldshim.so (the shim core's target).
test-fake: $(FAKE_LIBCUDA) $(FAKE_DIR)/libcuda.so $(FAKE_CUDART) $(FAKE_DIR)/libcudart.so $(FAKE_PROGS) \
           $(BUILD)/libldshim.so $(BUILD)/bin/ldshim-probe | $(RESULTS)
	$(PYTHON) tests/fake/run_cases.py --build $(BUILD) --preload "$(PRELOAD_PREFIX)$(BUILD)/libldshim.so" \
	  --result $(RESULTS)/test-fake --stress-iters $(FAKE_STRESS_ITERS) $(if $(filter 1,$(SAN)),--san)

# The fakes alone, without the shim (what the suite's "noshim" cases check); handy while
# the shim is being written.
fake-selftest: $(FAKE_LIBCUDA) $(FAKE_DIR)/libcuda.so $(FAKE_CUDART) $(FAKE_DIR)/libcudart.so $(FAKE_PROGS) | $(RESULTS)
	$(PYTHON) tests/fake/run_cases.py --build $(BUILD) --preload "" --only-noshim \
	  --result $(RESULTS)/fake-selftest --stress-iters $(FAKE_STRESS_ITERS)

# ThreadSanitizer over the same cases (CI runs it after the ASan/UBSan suite; not part of
# `make test`): the shim, the fakes and the test programs built with -fsanitize=thread into
# build-tsan, libtsan preloaded ahead of the shim. A ThreadSanitizer report makes the process
# exit 66, so its case fails like any other check.
TSAN_BUILD ?= build-tsan
TSAN_TARGETS = $(TSAN_BUILD)/libldshim.so $(TSAN_BUILD)/fake/libcuda.so.1 $(TSAN_BUILD)/fake/libcuda.so \
               $(TSAN_BUILD)/fake/libcudart.so.13 $(TSAN_BUILD)/fake/libcudart.so $(TSAN_BUILD)/fake/t_driver \
               $(TSAN_BUILD)/fake/t_runtime $(TSAN_BUILD)/fake/t_runtime_static $(TSAN_BUILD)/fake/t_vmm \
               $(TSAN_BUILD)/fake/t_compute $(TSAN_BUILD)/fake/t_place $(TSAN_BUILD)/fake/t_stress \
               $(TSAN_BUILD)/bin/ldshim-probe
#: test-tsan       the fake-driver cases under ThreadSanitizer (build-tsan/)
.PHONY: test-tsan
test-tsan: | $(RESULTS)
	CFLAGS=-fsanitize=thread LDFLAGS=-fsanitize=thread $(MAKE) --no-print-directory SAN=0 BUILD=$(TSAN_BUILD) $(TSAN_TARGETS)
	TSAN_OPTIONS=report_signal_unsafe=0:exitcode=66 $(PYTHON) tests/fake/run_cases.py --build $(TSAN_BUILD) \
	  --preload "$$($(CC) -print-file-name=libtsan.so):$(TSAN_BUILD)/libldshim.so" --stress-iters 500 \
	  --result $(RESULTS)/test-tsan
	@sh tests/summarize.sh $(RESULTS) test-tsan
