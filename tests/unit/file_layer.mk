# tests/unit/file_layer.mk — the file layer (shim/file.c):
#   test-file         CUnit tests of the layer itself (tests/unit/test_file.c)
#   test-file-layer   no product code opens a file except through the layer (shim/file.c,
#                     python/ldshim_ab/fileio.py): tests/unit/test_file_layer.sh
FILE_TEST_BIN := $(BUILD)/tests/test_file

$(FILE_TEST_BIN): tests/unit/test_file.c tests/unit/cunit_main.h shim/file.c shim/file.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ tests/unit/test_file.c shim/file.c $(LDFLAGS) -lcunit

.PHONY: test-file test-file-layer
test-file: $(FILE_TEST_BIN) | $(RESULTS)
	$(FILE_TEST_BIN) $(RESULTS)/test-file

test-file-layer: | $(RESULTS)
	@sh tests/unit/test_file_layer.sh $(RESULTS)/test-file-layer

