# tests/unit/core.mk — CUnit tests of the shim core (registry, pool, range layout, image scan).
CORE_TEST_BIN := $(BUILD)/tests/test_shim_core
CORE_TEST_OBJS := $(addprefix $(BUILD)/shim/,registry.o pool.o vmm.o device.o log.o config.o driver.o image.o \
                    compute.o compute_plan.o probe_cache.o probe_classify.o json.o)

$(CORE_TEST_BIN): tests/unit/test_shim_core.c tests/unit/cunit_main.h $(CORE_TEST_OBJS) $(POLICY_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(CORE_TEST_OBJS) $(POLICY_OBJS) $(LDFLAGS) -lcunit -ldl -lpthread -lm

.PHONY: test-shim-core
test-shim-core: $(CORE_TEST_BIN) | $(RESULTS)
	$(CORE_TEST_BIN) $(RESULTS)/test-shim-core

TEST_SUITES += test-shim-core
