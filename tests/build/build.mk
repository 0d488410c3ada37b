# tests/build/build.mk — `test-build`: the build's own contract (tests/build/test_build.py): `make`
# builds the product only, every suite is registered once in tests/tests.mk, `make help` is
# complete. Runs make -n and make -p in a fresh build directory; builds nothing.

.PHONY: test-build
test-build: | $(RESULTS)
	@MAKE='$(MAKE)' $(PYTHON) tests/build/test_build.py $(RESULTS)/test-build
