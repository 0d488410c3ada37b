# bench/nccl/nccl.mk — CPU suite of the NCCL compute-binding benchmark (bench/nccl/: the
# launcher nccl_bench.py, sweep.py, run.sh; doc/ab.md "NCCL under compute binding").
#
#   make test-bench-nccl   options, rank environments, the NCCL log parser, sweep.py, run.sh's
#                          settings; with NCCL_TEST_PYTHON=/path/to/python-with-torch in the
#                          environment also 2 gloo ranks on the CPU (a tiny sweep, a spoiled
#                          result, run.sh CPU_DRY_RUN=1 through ldshim-ab); without it those
#                          tests check the no-torch error. About 45 s with torch.
#
# The run.sh test preloads the A/B suite's empty stand-in shim (its rule is in tools/ab.mk,
# read after this file: hence the path, not $(AB_NULL_SO)).

.PHONY: test-bench-nccl
test-bench-nccl: $(BUILD)/tests/ab/libabnull.so $(BUILD)/bin/ldshim-policy | $(RESULTS)
	@AB_TEST_SHIM=$(abspath $(BUILD)/tests/ab/libabnull.so) LDSHIM_POLICY_CLI=$(abspath $(BUILD)/bin/ldshim-policy) \
	  $(PYTHON) bench/nccl/test_nccl_bench.py $(RESULTS)/test-bench-nccl

TEST_SUITES += test-bench-nccl
