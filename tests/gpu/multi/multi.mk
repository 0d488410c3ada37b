# tests/gpu/multi/multi.mk — the shim on two GPUs (issue 7): one process driving both, and two
# processes with NCCL. Needs a two-GPU machine; with one GPU it says so and checks nothing.
.PHONY: test-gpu-multi
test-gpu-multi: $(BUILD)/libldshim.so $(BUILD)/libldmoe.so | $(RESULTS)
	bash tests/gpu/multi/run.sh $(RESULTS)/test-gpu-multi
GPU_TEST_SUITES += test-gpu-multi
