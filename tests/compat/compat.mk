# tests/compat/compat.mk — `test-compat`: shim/cuda_compat.h against the real CUDA 13.5 cuda.h.
#
# The header comes from the PyPI wheel nvidia-cuda-runtime 13.5.* (nvidia/cu13/include/cuda.h),
# which .ci/run fetches into .ci/cache/; LDSHIM_CUDA135_INCLUDE names another include folder.
# Without it the suite prints one skip line and checks only the PTX. tests/compat/compat_check.c
# says what is checked; compat/shim-on-13.5 compiles every shim/ and tests/fake/ source against
# that header (its own names in use). Nothing here changes how the product is built.

CUDA135_INC ?= $(or $(LDSHIM_CUDA135_INCLUDE),.ci/cache/cuda-13.5/nvidia/cu13/include)
COMPAT_DIR  := $(BUILD)/compat

.PHONY: test-compat
# compat/ptx: shim/truth_ptx.h's PTX 9.5 marker, with its one 9.5 register swapped for %smid,
# assembles with the toolkit's ptxas (sm_100): the rest of the text the driver will JIT is sound.
test-compat: | $(RESULTS)
	@mkdir -p $(COMPAT_DIR); p=0; f=0; \
	if $(CC) $(CFLAGS) tests/compat/ptx_print.c -o $(COMPAT_DIR)/ptx_print && \
	   $(COMPAT_DIR)/ptx_print 9.0 > $(COMPAT_DIR)/marker.ptx && \
	   $(CUDA_HOME)/bin/ptxas -arch=sm_100 $(COMPAT_DIR)/marker.ptx -o $(COMPAT_DIR)/marker.cubin; then \
	  echo "ok compat/ptx"; p=1; else echo "FAIL compat/ptx"; f=1; fi; \
	if [ ! -r "$(CUDA135_INC)/cuda.h" ]; then \
	  echo "test-compat: skipped: no CUDA 13.5 cuda.h at $(CUDA135_INC) (.ci/run fetches it: pip download nvidia-cuda-runtime==13.5.*)"; \
	  echo "$$p $$f" > $(RESULTS)/test-compat; exit $$f; fi; \
	for v in own:-DLDSHIM_COMPAT_OWN:$(CUDA135_INC) header::$(CUDA135_INC) toolkit::$(CUDA_INC); do \
	  n=$${v%%:*}; r=$${v#*:}; def=$${r%%:*}; inc=$${r#*:}; \
	  if $(CC) -I$$inc $(CFLAGS) $$def tests/compat/compat_check.c -o $(COMPAT_DIR)/check_$$n \
	     && $(COMPAT_DIR)/check_$$n; then echo "ok compat/$$n"; p=$$((p + 1)); \
	  else echo "FAIL compat/$$n"; f=$$((f + 1)); fi; \
	done; \
	bad=""; for src in shim/*.c tests/fake/*.c; do \
	  $(CC) -I$(CUDA135_INC) $(CFLAGS) -fsyntax-only $$src 2>$(COMPAT_DIR)/syntax.err || bad="$$bad $$src"; done; \
	if [ -z "$$bad" ]; then echo "ok compat/shim-on-13.5"; p=$$((p + 1)); \
	else echo "FAIL compat/shim-on-13.5:$$bad"; f=$$((f + 1)); fi; \
	echo "$$p $$f" > $(RESULTS)/test-compat; [ $$f -eq 0 ]
