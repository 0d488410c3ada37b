# tests/fuzz/fuzz.mk — libFuzzer targets beyond the parser (policy/policy.mk has that one):
#
#   build/fuzz/fuzz_load    policy files on the file system and the shim's configuration:
#                           shim/config.c + policy/load.c (special files, size caps, env)
#   build/fuzz/fuzz_cache   the topology cache reader, shim/probe_cache.c (forged maps,
#                           modes, the shared capped reader)
#   build/fuzz/fuzz_classify  the `ldshim-probe --classify` input: LDSHIM_PROBE_DUMP matrices
#                           (shim/probe_classify.c ld_dump_parse, then classify and balance)
#   make fuzz-load / make fuzz-cache / make fuzz-classify   FUZZ_SECONDS (60) of each
#   make fuzz-ab / test-fuzz-ab        ldshim-ab's report reader (Python loop: see the end)
#   make test-fuzz-files    in `make test`: every seed, then a fixed number of runs each
#                           (FUZZ_FILE_RUNS, 20000: a few seconds), writes "<passed> <failed>"
#
# Built with clang like the parser's fuzzer ($(POLICY_FUZZ_CC), $(POLICY_FUZZ_FLAGS)).

FUZZ_LOAD_BIN   := $(BUILD)/fuzz/fuzz_load
FUZZ_CACHE_BIN  := $(BUILD)/fuzz/fuzz_cache
FUZZ_CLASSIFY_BIN := $(BUILD)/fuzz/fuzz_classify
FUZZ_FILE_RUNS  ?= 20000
FUZZ_FILE_FLAGS  = $(POLICY_FUZZ_FLAGS) -I$(CUDA_INC) -pthread

$(FUZZ_LOAD_BIN): tests/fuzz/fuzz_load.c shim/config.c shim/log.c shim/options.c $(POLICY_SRCS) $(POLICY_HDRS) shim/config.h \
                  shim/log.h shim/json.h shim/options.h shim/mlopart_proto.h shim/compute.h
	@mkdir -p $(@D)
	$(POLICY_FUZZ_CC) $(FUZZ_FILE_FLAGS) tests/fuzz/fuzz_load.c shim/config.c shim/log.c shim/options.c $(POLICY_SRCS) -o $@

$(FUZZ_CACHE_BIN): tests/fuzz/fuzz_cache.c shim/probe_cache.c shim/probe_classify.c shim/options.c shim/file.c shim/probe_cache.h \
                   shim/probe_classify.h shim/probe.h shim/file.h
	@mkdir -p $(@D)
	$(POLICY_FUZZ_CC) $(FUZZ_FILE_FLAGS) tests/fuzz/fuzz_cache.c shim/probe_cache.c shim/probe_classify.c shim/options.c shim/file.c -o $@ -lm

$(FUZZ_CLASSIFY_BIN): tests/fuzz/fuzz_classify.c shim/probe_classify.c shim/probe_classify.h
	@mkdir -p $(@D)
	$(POLICY_FUZZ_CC) $(FUZZ_FILE_FLAGS) tests/fuzz/fuzz_classify.c shim/probe_classify.c -o $@ -lm

TEST_TARGETS += $(FUZZ_LOAD_BIN) $(FUZZ_CACHE_BIN) $(FUZZ_CLASSIFY_BIN)

# `make fuzz` runs the --classify input's fuzzer too (issue 41), before the policy parser's.
fuzz: fuzz-classify

#: fuzz-load       libFuzzer run over policy files and the configuration, FUZZ_SECONDS (60)
#: fuzz-cache      libFuzzer run over the topology cache reader, FUZZ_SECONDS (60)
#: fuzz-classify   libFuzzer run over the ldshim-probe --classify input, FUZZ_SECONDS (60)
.PHONY: fuzz-load fuzz-cache fuzz-classify test-fuzz-files
fuzz-classify: $(FUZZ_CLASSIFY_BIN)
	@mkdir -p $(BUILD)/fuzz/classify
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  $(FUZZ_CLASSIFY_BIN) -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=10 -print_final_stats=1 \
	  -artifact_prefix=$(BUILD)/fuzz/ $(BUILD)/fuzz/classify tests/fuzz/classify_corpus

fuzz-load: $(FUZZ_LOAD_BIN)
	@mkdir -p $(BUILD)/fuzz/load
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  $(FUZZ_LOAD_BIN) -max_total_time=$(FUZZ_SECONDS) -max_len=8192 -timeout=10 -dict=$(POLICY_FUZZ_DICT) \
	  -print_final_stats=1 -artifact_prefix=$(BUILD)/fuzz/ $(BUILD)/fuzz/load tests/fuzz/load_corpus

fuzz-cache: $(FUZZ_CACHE_BIN)
	@mkdir -p $(BUILD)/fuzz/cache
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  $(FUZZ_CACHE_BIN) -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -timeout=10 -print_final_stats=1 \
	  -artifact_prefix=$(BUILD)/fuzz/ $(BUILD)/fuzz/cache tests/fuzz/cache_corpus

# A timeout of 10 s per input turns a hang (a FIFO opened blocking, /dev/zero read to the
# end) into a failure. Fresh corpus directories: the run never writes into the source tree.
test-fuzz-files: $(FUZZ_LOAD_BIN) $(FUZZ_CACHE_BIN) $(FUZZ_CLASSIFY_BIN) | $(RESULTS)
	@rm -rf $(BUILD)/fuzz/files && mkdir -p $(BUILD)/fuzz/files/load $(BUILD)/fuzz/files/cache $(BUILD)/fuzz/files/classify
	@p=0; f=0; \
	for t in load cache classify; do \
	  bin=$(BUILD)/fuzz/fuzz_$$t; seeds=tests/fuzz/$${t}_corpus; \
	  if ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	      $$bin -runs=$(FUZZ_FILE_RUNS) -seed=1 -max_len=8192 -timeout=10 -print_final_stats=1 \
	      $$( [ $$t = load ] && echo -dict=$(POLICY_FUZZ_DICT) ) -artifact_prefix=$(BUILD)/fuzz/files/ \
	      $(BUILD)/fuzz/files/$$t $$seeds > $(BUILD)/fuzz/files/$$t.log 2>&1; then \
	    p=$$((p + 1)); echo "test-fuzz-files: fuzz_$$t $$(grep -o 'stat::number_of_executed_units: [0-9]*' \
	      $(BUILD)/fuzz/files/$$t.log | grep -o '[0-9]*$$') runs clean"; \
	  else f=$$((f + 1)); echo "test-fuzz-files: fuzz_$$t FAILED"; tail -40 $(BUILD)/fuzz/files/$$t.log; fi; \
	done; echo "$$p $$f" > $(RESULTS)/test-fuzz-files; [ $$f -eq 0 ]

# ldshim-ab's report/histogram reader (tests/fuzz/fuzz_ab_report.py). Python has no libFuzzer
# here (atheris is not installed), so it is a seeded mutational loop, bounded by time or count:
#   make fuzz-ab        FUZZ_SECONDS (60) with a fresh seed (printed); also part of `make fuzz`
#   make test-fuzz-ab   in `make test`: FUZZ_AB_RUNS (20000: a few seconds) inputs, seed 1
FUZZ_AB_RUNS ?= 20000

#: fuzz-ab         seeded mutational fuzz of ldshim-ab's report/histogram reader, FUZZ_SECONDS (60)
.PHONY: fuzz-ab test-fuzz-ab
fuzz: fuzz-ab
fuzz-ab:
	$(PYTHON) tests/fuzz/fuzz_ab_report.py --seconds $(FUZZ_SECONDS) --seed $$(od -An -N4 -tu4 /dev/urandom | tr -d ' ') \
	  --out $(BUILD)/fuzz/ab

test-fuzz-ab: | $(RESULTS)
	@if $(PYTHON) tests/fuzz/fuzz_ab_report.py --runs $(FUZZ_AB_RUNS) --seed 1 --out $(BUILD)/fuzz/ab; then \
	  echo "1 0" > $(RESULTS)/test-fuzz-ab; else echo "0 1" > $(RESULTS)/test-fuzz-ab; exit 1; fi

