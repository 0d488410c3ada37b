# shim/shim.mk — build/libldshim.so from every shim/*.c, the policy objects and the
# embedded probe fatbin ($(SHIM_EXTRA_OBJS), kernels/kernels.mk). No link-time dependency
# on libcuda or libcudart: both are resolved at run time (shim/driver.c).

SHIM_SRCS := $(wildcard shim/*.c)
SHIM_OBJS := $(patsubst shim/%.c,$(BUILD)/shim/%.o,$(SHIM_SRCS))
SHIM_LIB  := $(BUILD)/libldshim.so

$(BUILD)/shim/%.o: shim/%.c $(wildcard shim/*.h policy/*.h kernels/*.h) | $(BUILD)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# Soname libldshim.so.$(SOVERSION) (top Makefile); LD_PRELOAD takes build/libldshim.so itself.
$(SHIM_LIB): $(SHIM_OBJS) $(POLICY_OBJS) $(SHIM_EXTRA_OBJS) VERSION
	$(CC) -shared -Wl,-soname,libldshim.so.$(SOVERSION) -Wl,--no-undefined -Wl,-z,defs -o $@ $(filter %.o,$^) $(LDFLAGS) -ldl -lpthread -lm

ALL_TARGETS += $(SHIM_LIB)
INSTALL_SOLIBS += $(SHIM_LIB)
INSTALL_HEADERS += shim/ldshim.h kernels/ldshim_topology.h
INSTALL_PCS += pkgconfig/libldshim.pc.in
