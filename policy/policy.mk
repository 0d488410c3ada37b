# policy/policy.mk — the policy language: objects for the shim, the CUnit suite, the fuzzer.
#
#   POLICY_OBJS        -fPIC objects linked into build/libldshim.so by shim/shim.mk
#   build/bin/ldshim-policy  `check FILE...` / `match FILE SIZE [API]` (policy/cli.c)
#   make test-policy   CUnit suite (CPU), writes $(RESULTS)/test-policy
#   make test-policy-fuzz  short libFuzzer smoke (20000 runs + corpus replay), in `make test`
#   make fuzz          libFuzzer run of ld_policy_parse for $(FUZZ_SECONDS) s (default 60)

# policy/cli.c holds main() (the ldshim-policy tool): not part of the library objects.
POLICY_SRCS := $(filter-out policy/cli.c,$(sort $(wildcard policy/*.c)))
POLICY_OBJS := $(patsubst policy/%.c,$(BUILD)/policy/%.o,$(POLICY_SRCS))
POLICY_HDRS := policy/policy.h policy/policy_internal.h policy/utf8.h shim/file.h
# The loader reads through the file layer (shim/file.c): every program that links the policy
# objects links it too. ($^ of the shim's link names it once.)
POLICY_OBJS += $(BUILD)/shim/file.o
POLICY_SRCS += shim/file.c

$(BUILD)/policy/%.o: policy/%.c $(POLICY_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

POLICY_CLI := $(BUILD)/bin/ldshim-policy
# --version prints the build's version and git revision ($(BUILD_INFO_H), top Makefile).
$(BUILD)/policy/cli.o: $(BUILD_INFO_H)
$(BUILD)/policy/cli.o: CFLAGS += -I$(dir $(BUILD_INFO_H))
$(POLICY_CLI): $(BUILD)/policy/cli.o $(POLICY_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS)

POLICY_TEST_BIN := $(BUILD)/tests/test_policy
$(POLICY_TEST_BIN): tests/unit/test_policy.c tests/unit/cunit_main.h $(POLICY_OBJS) $(POLICY_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $< $(POLICY_OBJS) -o $@ $(LDFLAGS) -lcunit

# The suite also drives the ldshim-policy tool, found through LDSHIM_POLICY_CLI.
#: fuzz            libFuzzer run of the policy parser for FUZZ_SECONDS (60)
.PHONY: test-policy
test-policy: $(POLICY_TEST_BIN) $(POLICY_CLI) | $(RESULTS)
	LDSHIM_POLICY_CLI=$(POLICY_CLI) $(POLICY_TEST_BIN) $(RESULTS)/test-policy

# ---- libFuzzer ---------------------------------------------------------------------------
# Built with clang regardless of $(CC): gcc has no libFuzzer. The corpus is read-only seeds;
# new inputs found during `make fuzz` go to $(BUILD)/fuzz/corpus.
POLICY_FUZZ_CC     ?= clang
POLICY_FUZZ_FLAGS  := -std=gnu11 -D_GNU_SOURCE -g -O1 -I. -Wall -Wextra -Werror \
                      -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
POLICY_FUZZ_BIN    := $(BUILD)/fuzz/fuzz_policy
POLICY_FUZZ_SEEDS  := tests/fuzz/corpus
POLICY_FUZZ_DICT   := tests/fuzz/policy.dict
FUZZ_SECONDS       ?= 60

$(POLICY_FUZZ_BIN): tests/fuzz/fuzz_policy.c $(POLICY_SRCS) $(POLICY_HDRS)
	@mkdir -p $(@D)
	$(POLICY_FUZZ_CC) $(POLICY_FUZZ_FLAGS) tests/fuzz/fuzz_policy.c $(POLICY_SRCS) -o $@

fuzz: $(POLICY_FUZZ_BIN)
	@mkdir -p $(BUILD)/fuzz/corpus
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  $(POLICY_FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -timeout=10 \
	  -dict=$(POLICY_FUZZ_DICT) -print_final_stats=1 -artifact_prefix=$(BUILD)/fuzz/ \
	  $(BUILD)/fuzz/corpus $(POLICY_FUZZ_SEEDS)

# CI smoke: replay every seed, then 20000 mutated runs (about a second). Fresh corpus dir so
# the run never writes into the source tree.
.PHONY: test-policy-fuzz
test-policy-fuzz: $(POLICY_FUZZ_BIN) | $(RESULTS)
	@rm -rf $(BUILD)/fuzz/smoke && mkdir -p $(BUILD)/fuzz/smoke
	@if ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	    $(POLICY_FUZZ_BIN) -runs=20000 -seed=1 -max_len=4096 -timeout=10 \
	    -dict=$(POLICY_FUZZ_DICT) -artifact_prefix=$(BUILD)/fuzz/smoke/ \
	    $(BUILD)/fuzz/smoke $(POLICY_FUZZ_SEEDS) > $(BUILD)/fuzz/smoke.log 2>&1; then \
	  echo "1 0" > $(RESULTS)/test-policy-fuzz; echo "test-policy-fuzz: 20000 runs clean"; \
	else echo "0 1" > $(RESULTS)/test-policy-fuzz; tail -40 $(BUILD)/fuzz/smoke.log; exit 1; fi

ALL_TARGETS  += $(POLICY_OBJS) $(POLICY_CLI)
TEST_TARGETS += $(POLICY_TEST_BIN)
INSTALL_BINS += $(POLICY_CLI)
INSTALL_DATA += policy/examples/moe.policy
