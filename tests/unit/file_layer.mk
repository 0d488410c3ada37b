# tests/unit/file_layer.mk — `test-file-layer`: no product code opens a file except through the
# file layer (shim/file.c, python/ldshim_ab/fileio.py). tests/unit/test_file_layer.sh.
.PHONY: test-file-layer
test-file-layer: | $(RESULTS)
	@sh tests/unit/test_file_layer.sh $(RESULTS)/test-file-layer

TEST_SUITES += test-file-layer
