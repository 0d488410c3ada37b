# tools/mlopart.mk — the MLOPart helper program and the objects its tests share.
#
#   build/ldshim-mlopart-helper   installed beside libldshim.so ($(PREFIX)/lib), which finds
#                                 it through dladdr; LDSHIM_MLOPART_HELPER overrides (tests)
#   build/mlopart/obj/*.o         private objects for the tests and the GPU programs (the
#                                 shim core compiles shim/*.c into libldshim.so on its own)

MLO_DIR      := $(BUILD)/mlopart
MLO_OBJ      := $(MLO_DIR)/obj
MLO_HELPER   := $(BUILD)/ldshim-mlopart-helper
MLO_HDRS     := shim/mlopart_proto.h tools/mlopart_mps.h shim/backend.h shim/driver.h \
                shim/log.h shim/cuda_compat.h policy/policy.h
# Backend + client + protocol, and the self-contained driver table and logger they call.
MLO_SHIM_OBJS := $(MLO_OBJ)/backend_mlopart.o $(MLO_OBJ)/mlopart_client.o \
                 $(MLO_OBJ)/mlopart_proto.o $(MLO_OBJ)/driver.o $(MLO_OBJ)/log.o

ALL_TARGETS  += $(MLO_HELPER)
INSTALL_LIBS += $(MLO_HELPER)

$(MLO_OBJ)/%.o: shim/%.c $(MLO_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(MLO_OBJ)/mlopart_mps.o: tools/mlopart_mps.c $(MLO_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(MLO_OBJ)/helper_main.o: tools/ldshim-mlopart-helper.c $(MLO_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

# Never linked against libcuda: it dlopens libcuda.so.1 once the MPS environment is set.
$(MLO_HELPER): $(MLO_OBJ)/helper_main.o $(MLO_OBJ)/mlopart_mps.o $(MLO_OBJ)/mlopart_proto.o
	$(CC) $(LDFLAGS) -o $@ $^ -ldl -pthread
