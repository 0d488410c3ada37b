# tools/ab.mk — ldshim-ab (A/B runner for unmodified programs), its CPU suite, serve.py.
#
#   make build/bin/ldshim-ab      copy of the tool beside the build (finds ../libldshim.so),
#                                 its BUILD_VERSION line stamped with the version and revision
#   make test-ab                  CPU tests: tests/ab/*.py against fake programs, the file
#                                 layer's rules, the hostile-path cells of ldshim-ab's path flags
#                                 (tools/path_flags.tsv) for this file and the built copy
#
# The suite preloads an empty shared object in place of libldshim.so, built without the
# SAN flags: an ASan-instrumented object would need the ASan runtime preloaded first.

AB_TOOL     := tools/ldshim-ab
AB_BIN      := $(BUILD)/bin/ldshim-ab
AB_NULL_SO  := $(BUILD)/tests/ab/libabnull.so
AB_CFLAGS   := $(filter-out $(SAN_FLAGS),$(CFLAGS))

ALL_TARGETS   += $(AB_BIN)
TEST_TARGETS  += $(AB_NULL_SO)
INSTALL_BINS  += $(AB_BIN)
INSTALL_DATA  += policy/examples/serve.policy bench/apps/serve.py

# The tool run from a checkout reads VERSION and git itself; the copy carries them.
# It carries the file layer (python/ldshim_ab/fileio.py) inlined: an installed copy has no
# package beside it.
$(AB_BIN): $(AB_TOOL) python/ldshim_ab/fileio.py python/ldshim_build.py $(BUILD_INFO_H)
	@mkdir -p $(dir $@)
	sed 's/^BUILD_VERSION = None$$/BUILD_VERSION = "$(VERSION) (git $(GIT_REVISION))"/' $< | \
	  $(PYTHON) python/ldshim_build.py inline-fileio > $@.$$$$.tmp && \
	  { grep -q '^BUILD_VERSION = "' $@.$$$$.tmp || { echo "$<: no 'BUILD_VERSION = None' line to stamp" >&2; \
	    rm -f $@.$$$$.tmp; exit 1; }; } && chmod 0755 $@.$$$$.tmp && mv -f $@.$$$$.tmp $@

$(AB_NULL_SO): tests/ab/null.c
	@mkdir -p $(dir $@)
	$(CC) $(AB_CFLAGS) -shared -o $@ $<

.PHONY: test-ab
# The suite also runs the real shim over the fake CUDA of tests/fake (end to end).
AB_REAL_DEPS := $(BUILD)/libldshim.so $(BUILD)/fake/libcuda.so.1 $(BUILD)/fake/libcudart.so.13 \
                $(BUILD)/fake/t_runtime

test-ab: $(AB_NULL_SO) $(AB_BIN) $(BUILD)/bin/ldshim-policy $(AB_REAL_DEPS) $(BUILD)/libldmoe.so   # serve.py's packed sizes
	@mkdir -p $(RESULTS)
	$(PYTHON) -c 'import sys; [compile(open(f).read(), f, "exec") for f in sys.argv[1:]]' $(AB_TOOL) bench/apps/serve.py bench/ab/per_domain.py
	LDMOE_LIB=$(abspath $(BUILD)/libldmoe.so) AB_TEST_SHIM=$(abspath $(AB_NULL_SO)) AB_REAL_SHIM=$(abspath $(BUILD)/libldshim.so) \
	  AB_BUILT_TOOL=$(abspath $(AB_BIN)) \
	  AB_FAKE_DIR=$(abspath $(BUILD)/fake) AB_PRELOAD_PREFIX='$(PRELOAD_PREFIX)' \
	  LDSHIM_POLICY_CLI=$(abspath $(BUILD)/bin/ldshim-policy) $(PYTHON) tests/ab/run_tests.py $(RESULTS)/test-ab
