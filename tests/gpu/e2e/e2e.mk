# tests/gpu/e2e/e2e.mk — serve.py with libldmoe under the shim, every state (GPU only).
.PHONY: test-gpu-e2e
test-gpu-e2e: $(BUILD)/libldshim.so $(BUILD)/libldmoe.so | $(RESULTS)
	bash tests/gpu/e2e/run.sh $(RESULTS)/test-gpu-e2e
