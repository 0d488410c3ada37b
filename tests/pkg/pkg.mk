# tests/pkg/pkg.mk — packaging, tools and documentation checks (CPU, part of `make test`).
#
#   make test-pkg-tools     build tree: every tool's --version, sonames and links, man pages,
#                           the ldshim-policy command line (also under SAN=1)
#   make test-pkg-install   make install DESTDIR=... PREFIX=/usr: the exact tree, modes,
#                           pkg-config, a C program built against the installed files; a
#                           PREFIX install whose pieces find each other; make uninstall
#   make test-pkg-python    pip install . into fresh venvs, offline: ldshim-ab, import ldmoe
#   make test-pkg-gpu-skip  make test-gpu skips without a GPU, runs with one (stand-in driver)
#   make test-docs          every shell command in README.md and doc/*.md code blocks that can
#                           run on the CPU runs (tests/pkg/check_docs.py; exceptions in
#                           tests/pkg/doc_exceptions.txt)
# The install, Python and docs suites look at the regular build (build/), which is what gets
# installed and documented: under SAN=1 only test-pkg-tools runs.

PKG_TEST_ENV = PKG_BUILD=$(abspath $(BUILD)) PKG_MAKE='$(MAKE)' PKG_PYTHON='$(PYTHON)' PKG_CC='$(CC)' \
               PKG_GIT_REVISION='$(GIT_REVISION)' CUDA_HOME='$(CUDA_HOME)'
PKG_ONEGPU   := $(BUILD)/tests/pkg/libonegpu.so
# (the suites that need the whole product get it through NEEDS_ALL, which the top Makefile
# expands last)
PKG_TOOLS    := $(BUILD)/bin/ldshim-ab $(BUILD)/bin/ldshim-policy $(BUILD)/bin/ldshim-probe \
                $(BUILD)/ldshim-mlopart-helper $(BUILD_INFO_H) \
                $(addprefix $(BUILD)/man/,ldshim-ab.1 ldshim-policy.1 ldshim-probe.1) \
                $(BUILD)/libldshim.so $(BUILD)/libldmoe.so \
                $(BUILD)/libldshim.so.$(SOVERSION) $(BUILD)/libldmoe.so.$(SOVERSION)
NEEDS_ALL    += test-pkg-install test-pkg-python test-docs

# Loaded by the test's Python: never built with the sanitizer flags.
$(PKG_ONEGPU): tests/pkg/onegpu.c
	@mkdir -p $(@D)
	$(CC) $(filter-out $(SAN_FLAGS),$(CFLAGS)) -shared -o $@ $<

.PHONY: test-pkg-tools test-pkg-install test-pkg-python test-pkg-gpu-skip test-docs \
        test-pkg-gpu-standin test-pkg-gpu-standin-fails
test-pkg-tools: $(PKG_TOOLS) | $(RESULTS)
	@$(PKG_TEST_ENV) $(PYTHON) tests/pkg/run_tests.py tools $(RESULTS)/test-pkg-tools

test-pkg-install: | $(RESULTS)
	@$(PKG_TEST_ENV) $(PYTHON) tests/pkg/run_tests.py install $(RESULTS)/test-pkg-install

test-pkg-python: | $(RESULTS)
	@$(PKG_TEST_ENV) $(PYTHON) tests/pkg/run_tests.py python $(RESULTS)/test-pkg-python

test-pkg-gpu-skip: $(PKG_ONEGPU) $(BUILD)/fake/libcuda.so.1 | $(RESULTS)
	@$(PKG_TEST_ENV) $(PYTHON) tests/pkg/run_tests.py gpu-skip $(RESULTS)/test-pkg-gpu-skip

test-docs: | $(RESULTS)
	@$(PKG_TEST_ENV) $(PYTHON) tests/pkg/check_docs.py --result $(RESULTS)/test-docs

# Stand-ins for a GPU suite, run by test-pkg-gpu-skip through `make test-gpu GPU_TEST_SUITES=...`.
test-pkg-gpu-standin: | $(RESULTS)
	@echo "1 0" > $(RESULTS)/$@
test-pkg-gpu-standin-fails: | $(RESULTS)
	@echo "0 1" > $(RESULTS)/$@; exit 1

TEST_TARGETS += $(PKG_ONEGPU)
