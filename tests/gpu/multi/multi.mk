# tests/gpu/multi/multi.mk — the shim on two GPUs (issue 7): one process driving both, and two
# processes with NCCL. Needs a two-GPU machine; with one GPU it says so and checks nothing.
.PHONY: test-gpu-multi
test-gpu-multi: $(BUILD)/libldshim.so $(BUILD)/libldmoe.so | $(RESULTS)
	bash tests/gpu/multi/run.sh $(RESULTS)/test-gpu-multi

# CPU self-test of the suite's logic (part of `make test`).
.PHONY: test-gpu-multi-selftest
test-gpu-multi-selftest: | $(RESULTS)
	bash tests/gpu/multi/selftest.sh $(RESULTS)/test-gpu-multi-selftest
