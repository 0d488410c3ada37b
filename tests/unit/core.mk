# tests/unit/core.mk — CUnit tests of the shim core (registry, pool, range layout, image scan),
# and `make bench-pool`, the pool table's CPU micro-benchmark.
CORE_TEST_BIN := $(BUILD)/tests/test_shim_core
CORE_TEST_OBJS := $(addprefix $(BUILD)/shim/,registry.o pool.o vmm.o device.o log.o config.o driver.o dlcheck.o image.o \
                    compute.o compute_groups.o compute_streams.o compute_plan.o probe_cache.o probe_classify.o json.o options.o)

# --wrap: the objects' malloc and calloc calls reach the test's __wrap_*, which can fail one on
# request (the pool's out-of-memory test); the shim itself is linked without it.
TEST_TARGETS += $(CORE_TEST_BIN)
$(CORE_TEST_BIN): tests/unit/test_shim_core.c tests/unit/cunit_main.h $(CORE_TEST_OBJS) $(POLICY_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(CORE_TEST_OBJS) $(POLICY_OBJS) $(LDFLAGS) -Wl,--wrap=malloc,--wrap=calloc -lcunit -ldl -lpthread -lm

# CPU micro-benchmark of the pool's table (built by `make bench`, run only on request).
# The backends are real here (the CUnit test brings mock ones).
POOL_BENCH_BIN := $(BUILD)/bench/bench_pool
POOL_BENCH_OBJS := $(CORE_TEST_OBJS) $(addprefix $(BUILD)/shim/,backend.o backend_mlopart.o mlopart_client.o mlopart_proto.o)
$(POOL_BENCH_BIN): tests/unit/bench_pool.c $(POOL_BENCH_OBJS) $(POLICY_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(POOL_BENCH_OBJS) $(POLICY_OBJS) $(LDFLAGS) -ldl -lpthread -lm
BENCH_TARGETS += $(POOL_BENCH_BIN)

#: bench-pool      CPU: micro-benchmark of the pool's table
.PHONY: bench-pool
bench-pool: $(POOL_BENCH_BIN)
	$(POOL_BENCH_BIN)

.PHONY: test-shim-core
test-shim-core: $(CORE_TEST_BIN) | $(RESULTS)
	$(CORE_TEST_BIN) $(RESULTS)/test-shim-core

