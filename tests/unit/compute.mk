# tests/unit/compute.mk — CUnit tests of the compute-binding plan and its SM-group cache format.
COMPUTE_TEST_BIN := $(BUILD)/tests/test_compute
COMPUTE_TEST_OBJS := $(addprefix $(BUILD)/shim/,compute_plan.o probe_cache.o probe_classify.o)

$(COMPUTE_TEST_BIN): tests/unit/test_compute.c tests/unit/cunit_main.h $(COMPUTE_TEST_OBJS) $(POLICY_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(COMPUTE_TEST_OBJS) $(POLICY_OBJS) $(LDFLAGS) -lcunit -lm

.PHONY: test-compute
test-compute: $(COMPUTE_TEST_BIN) | $(RESULTS)
	$(COMPUTE_TEST_BIN) $(RESULTS)/test-compute

TEST_SUITES += test-compute
