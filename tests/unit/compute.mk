# tests/unit/compute.mk — CUnit tests of the compute-binding plan and its SM-group cache format,
# and the check of the shim's stream hooks against cuda.h (test-stream-hooks).
COMPUTE_TEST_BIN := $(BUILD)/tests/test_compute
COMPUTE_TEST_OBJS := $(addprefix $(BUILD)/shim/,compute_plan.o probe_cache.o probe_classify.o options.o)

TEST_TARGETS += $(COMPUTE_TEST_BIN)
$(COMPUTE_TEST_BIN): tests/unit/test_compute.c tests/unit/cunit_main.h $(COMPUTE_TEST_OBJS) $(POLICY_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(COMPUTE_TEST_OBJS) $(POLICY_OBJS) $(LDFLAGS) -lcunit -lm

.PHONY: test-compute
test-compute: $(COMPUTE_TEST_BIN) | $(RESULTS)
	$(COMPUTE_TEST_BIN) $(RESULTS)/test-compute


# Every entry point of cuda.h that takes a stream is hooked or listed as not needing it.
.PHONY: test-stream-hooks
test-stream-hooks: $(BUILD)/libldshim.so | $(RESULTS)
	$(PYTHON) tests/unit/stream_hooks.py --lib $(BUILD)/libldshim.so --cuda-include $(CUDA_INC) \
	  --result $(RESULTS)/test-stream-hooks

