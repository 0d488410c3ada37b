# tests/compat/compat.mk — `test-compat`: shim/cuda_compat.h against the real CUDA 13.5 cuda.h.
#
# The header comes from the PyPI wheel nvidia-cuda-runtime 13.5.* (nvidia/cu13/include/cuda.h),
# which .ci/run fetches into .ci/cache/; LDSHIM_CUDA135_INCLUDE names another include folder.
# Without it the suite prints one skip line and counts nothing. tests/compat/compat_check.c
# says what is checked; nothing here changes how the product is built.

CUDA135_INC ?= $(or $(LDSHIM_CUDA135_INCLUDE),.ci/cache/cuda-13.5/nvidia/cu13/include)
COMPAT_DIR  := $(BUILD)/compat
TEST_SUITES += test-compat

.PHONY: test-compat
test-compat: | $(RESULTS)
	@if [ ! -r "$(CUDA135_INC)/cuda.h" ]; then \
	  echo "test-compat: skipped: no CUDA 13.5 cuda.h at $(CUDA135_INC) (.ci/run fetches it: pip download nvidia-cuda-runtime==13.5.*)"; \
	  echo "0 0" > $(RESULTS)/test-compat; exit 0; fi; \
	mkdir -p $(COMPAT_DIR); p=0; f=0; \
	for v in own:-DLDSHIM_COMPAT_OWN:$(CUDA135_INC) header::$(CUDA135_INC) toolkit::$(CUDA_INC); do \
	  n=$${v%%:*}; r=$${v#*:}; def=$${r%%:*}; inc=$${r#*:}; \
	  if $(CC) -I$$inc $(CFLAGS) $$def tests/compat/compat_check.c -o $(COMPAT_DIR)/check_$$n \
	     && $(COMPAT_DIR)/check_$$n; then echo "ok compat/$$n"; p=$$((p + 1)); \
	  else echo "FAIL compat/$$n"; f=$$((f + 1)); fi; \
	done; echo "$$p $$f" > $(RESULTS)/test-compat; [ $$f -eq 0 ]
