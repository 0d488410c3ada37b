# tests/mlopart/mlopart.mk — CPU suite `test-mlopart`: the MLOPart backend, its helper and
# protocol, against the fake driver (build/fake/libcuda.so.1) and the fake MPS control
# script tests/mlopart/fake-mps-control. Each case checks that no helper, supervisor or
# daemon process and no private directory is left behind.

# (The objects are tools/mlopart.mk's; named here as that file names them.)
MLO_T_OBJS   := $(addprefix $(BUILD)/mlopart/obj/,backend_mlopart.o mlopart_client.o \
                  mlopart_proto.o driver.o dlcheck.o log.o options.o file.o)
MLO_T_HELPER := $(BUILD)/ldshim-mlopart-helper
MLO_TEST     := $(BUILD)/mlopart/test_mlopart

$(MLO_TEST): tests/mlopart/test_mlopart.c tests/unit/cunit_main.h $(MLO_T_OBJS) shim/mlopart_proto.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(MLO_T_OBJS) $(LDFLAGS) -lcunit -ldl -pthread

TEST_TARGETS += $(MLO_TEST)

.PHONY: test-mlopart
test-mlopart: $(MLO_TEST) $(MLO_T_HELPER) $(BUILD)/fake/libcuda.so.1 | $(RESULTS)
	LD_LIBRARY_PATH=$(BUILD)/fake LDSHIM_MLOPART_HELPER=$(MLO_T_HELPER) \
	  LDSHIM_MPS_CONTROL=$(CURDIR)/tests/mlopart/fake-mps-control \
	  $(MLO_TEST) $(RESULTS)/test-mlopart


# ---- GPU suite (tests/gpu/mlopart/) ---------------------------------------------------------
#   make test-gpu-mlopart        on the GPU machine, part of `make test-gpu` (run.sh --help)
#   make test-mlopart-selftest   CPU, part of `make test`: the GPU program builds and parses
#                                its arguments; the bench runs on the fake driver; a fake
#                                test program runs under build/libldshim.so with
#                                `backend = mlopart` (helper found beside the library)
MLOGPU_BIN     := $(BUILD)/mlopart/mlopart_gpu
MLOGPU_NVFLAGS := -O2 -std=c++17 $(CUDA_GENCODE) -I. -Ikernels -Xcompiler -Wall,-Wextra,-Werror \
                  $(if $(filter 1,$(SAN)),-Xcompiler -fsanitize=address -Xcompiler -fsanitize=undefined)

$(MLOGPU_BIN): tests/gpu/mlopart/mlopart_gpu.cu $(MLO_T_OBJS) shim/mlopart_proto.h shim/backend.h
	@mkdir -p $(@D)
	$(NVCC) $(MLOGPU_NVFLAGS) -o $@ $< $(MLO_T_OBJS) -ldl -lpthread

# An unmodified CUDA program for the `preload` case (dynamic cudart, like most programs).
MLOGPU_PRE := $(BUILD)/mlopart/preload_check
$(MLOGPU_PRE): tests/gpu/mlopart/preload_check.cu
	@mkdir -p $(@D)
	$(NVCC) -O2 -std=c++17 $(CUDA_GENCODE) -Xcompiler -Wall,-Wextra,-Werror -cudart shared \
	  -Xlinker -rpath,$(CUDA_HOME)/lib64 -o $@ $<

.PHONY: test-gpu-mlopart test-mlopart-selftest
test-gpu-mlopart: $(MLOGPU_BIN) $(MLOGPU_PRE) $(MLO_T_HELPER) $(BUILD)/libldshim.so | $(RESULTS)
	@LDSHIM_PRELOAD_PREFIX='$(PRELOAD_PREFIX)' bash tests/gpu/mlopart/run.sh --bin $(MLOGPU_BIN) \
	  --helper $(MLO_T_HELPER) --lib $(BUILD)/libldshim.so --results $(RESULTS)/test-gpu-mlopart

test-mlopart-selftest: $(MLOGPU_BIN) $(MLOGPU_PRE) $(MLO_T_HELPER) $(BUILD)/mlopart/mlopart_bench \
                       $(BUILD)/fake/libcuda.so.1 $(BUILD)/fake/t_driver $(BUILD)/libldshim.so | $(RESULTS)
	@PRELOAD_PREFIX='$(PRELOAD_PREFIX)' sh tests/mlopart/selftest.sh $(BUILD) $(RESULTS)/test-mlopart-selftest

