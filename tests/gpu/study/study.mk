# tests/gpu/study/study.mk — the study's placement states over unmodified programs, one per
# allocation api (PyTorch's caching, expandable-segments and cudaMallocAsync allocators, CuPy's
# async pool and managed memory, JAX), on a real GPU; and its CPU self-test.
#
#   make test-gpu-study            GPU (part of `make test-gpu`): tests/gpu/study/run.py
#   make test-gpu-study-selftest   CPU (part of `make test`): the programs parse, --help works,
#                                  bad arguments are refused

STUDYGPU_DIR := tests/gpu/study

.PHONY: test-gpu-study test-gpu-study-selftest
test-gpu-study: $(BUILD)/libldshim.so | $(RESULTS)
	@$(PYTHON) $(STUDYGPU_DIR)/run.py --lib $(BUILD)/libldshim.so --jobs $${STUDY_JOBS:-1} --results $(RESULTS)/test-gpu-study

test-gpu-study-selftest: $(BUILD)/libldshim.so | $(RESULTS)
	@ok=0; bad=0; \
	if $(PYTHON) -c 'import sys; [compile(open(f).read(), f, "exec") for f in sys.argv[1:]]' $(STUDYGPU_DIR)/run.py $(STUDYGPU_DIR)/apps.py; \
	  then ok=$$((ok+1)); else echo "FAIL python syntax"; bad=$$((bad+1)); fi; \
	if $(PYTHON) $(STUDYGPU_DIR)/run.py --help | grep -q -- --states; then ok=$$((ok+1)); else echo "FAIL run.py --help"; bad=$$((bad+1)); fi; \
	if $(PYTHON) $(STUDYGPU_DIR)/apps.py --help | grep -q cupy-async; then ok=$$((ok+1)); else echo "FAIL apps.py --help"; bad=$$((bad+1)); fi; \
	if $(PYTHON) $(STUDYGPU_DIR)/run.py --lib $(BUILD)/libldshim.so --states stock,bogus 2>&1 | grep -q "unknown state"; \
	  then ok=$$((ok+1)); else echo "FAIL run.py accepts an unknown state"; bad=$$((bad+1)); fi; \
	echo "$$ok $$bad" > $(RESULTS)/test-gpu-study-selftest; echo "test-gpu-study-selftest: $$ok passed, $$bad failed"; [ $$bad -eq 0 ]

