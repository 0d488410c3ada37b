# bench/moe/moe_bench.mk — CPU checks of the MoE benchmark's host-only tools (the GPU parts of
# bench/moe/ are built by kernels/moe/moe.mk).
#
#   make test-bench-moe-tools   gpc_rates.py against its recorded output, and its bad-input errors

.PHONY: test-bench-moe-tools
test-bench-moe-tools: | $(RESULTS)
	@$(PYTHON) bench/moe/test_tools.py $(RESULTS)/test-bench-moe-tools

TEST_SUITES += test-bench-moe-tools
