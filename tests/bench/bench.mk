# tests/bench/bench.mk — CPU checks of the benchmarks' host-only code (no GPU):
#
#   make test-bench-moe-tools   bench/moe/gpc_rates.py against its recorded output, and its
#                               bad-input errors (tests/bench/test_moe_tools.py)
#   make test-bench-nccl        the NCCL compute-binding benchmark (bench/nccl/: the launcher
#                               nccl_bench.py, sweep.py, run.sh; doc/ab.md "NCCL under compute
#                               binding"): options, rank environments, the NCCL log parser,
#                               sweep.py, run.sh's settings; with NCCL_TEST_PYTHON=/path/to/
#                               python-with-torch in the environment also 2 gloo ranks on the CPU
#                               (a tiny sweep, a spoiled result, run.sh CPU_DRY_RUN=1 through
#                               ldshim-ab); without it those tests check the no-torch error. About
#                               45 s with torch. Its run.sh test preloads the A/B suite's empty
#                               stand-in shim ($(AB_NULL_SO), tools/ab.mk).

.PHONY: test-bench-moe-tools test-bench-nccl
test-bench-moe-tools: | $(RESULTS)
	@$(PYTHON) tests/bench/test_moe_tools.py $(RESULTS)/test-bench-moe-tools

test-bench-nccl: $(AB_NULL_SO) $(POLICY_CLI) | $(RESULTS)
	@AB_TEST_SHIM=$(abspath $(AB_NULL_SO)) LDSHIM_POLICY_CLI=$(abspath $(POLICY_CLI)) \
	  $(PYTHON) tests/bench/test_nccl_bench.py $(RESULTS)/test-bench-nccl
