# tools/mlopart.mk — the MLOPart helper program and the objects its tests share.
#
#   build/ldshim-mlopart-helper   installed beside libldshim.so ($(LIBDIR)), which finds it
#                                 through dladdr (so it stays beside build/libldshim.so too,
#                                 not in build/bin: no one runs it by hand);
#                                 LDSHIM_MLOPART_HELPER overrides (tests)
#   build/mlopart/obj/*.o         private objects for the tests and the GPU programs (the
#                                 shim core compiles shim/*.c into libldshim.so on its own)

MLO_DIR      := $(BUILD)/mlopart
MLO_OBJ      := $(MLO_DIR)/obj
MLO_HELPER   := $(BUILD)/ldshim-mlopart-helper
MLO_HDRS     := shim/mlopart_proto.h shim/mlopart_prop.h tools/mlopart_mps.h shim/backend.h shim/driver.h \
                shim/log.h shim/options.h shim/cuda_compat.h policy/policy.h shim/file.h shim/dlcheck.h
# Backend + client + protocol, and the self-contained driver table and logger they call.
MLO_SHIM_OBJS := $(MLO_OBJ)/backend_mlopart.o $(MLO_OBJ)/mlopart_client.o \
                 $(MLO_OBJ)/mlopart_proto.o $(MLO_OBJ)/driver.o $(MLO_OBJ)/dlcheck.o $(MLO_OBJ)/log.o $(MLO_OBJ)/options.o \
                 $(MLO_OBJ)/file.o

ALL_TARGETS  += $(MLO_HELPER)
INSTALL_LIBS += $(MLO_HELPER)

$(MLO_OBJ)/%.o: shim/%.c $(MLO_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(MLO_OBJ)/mlopart_mps.o: tools/mlopart_mps.c $(MLO_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(MLO_OBJ)/helper_main.o: tools/ldshim-mlopart-helper.c $(MLO_HDRS) $(BUILD_INFO_H)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I$(dir $(BUILD_INFO_H)) -c $< -o $@

# Never linked against libcuda: it dlopens libcuda.so.1 once the MPS environment is set.
$(MLO_HELPER): $(MLO_OBJ)/helper_main.o $(MLO_OBJ)/mlopart_mps.o $(MLO_OBJ)/mlopart_proto.o $(MLO_OBJ)/options.o \
               $(MLO_OBJ)/file.o $(MLO_OBJ)/dlcheck.o
	$(CC) $(LDFLAGS) -o $@ $^ -ldl -pthread

# Bench (bench/mlopart/): per-request cost of the helper vs in-process cuMemCreate, beside the
# objects it links.
#   make bench-mlopart        on the GPU machine: table to stdout and $(OUT) when set
MLOB_BIN  := $(MLO_DIR)/mlopart_bench
MLOB_OBJS := $(addprefix $(MLO_OBJ)/,mlopart_client.o mlopart_proto.o driver.o dlcheck.o log.o options.o file.o)

BENCH_TARGETS += $(MLOB_BIN)

$(MLOB_BIN): bench/mlopart/mlopart_bench.c $(MLOB_OBJS) $(MLO_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(MLOB_OBJS) $(LDFLAGS) -ldl -pthread

#: bench-mlopart   GPU: per-request cost of the MLOPart helper vs in-process cuMemCreate
.PHONY: bench-mlopart
bench-mlopart: $(MLOB_BIN) $(MLO_HELPER)
	sh bench/mlopart/run.sh --bin $(MLOB_BIN) --helper $(MLO_HELPER)
