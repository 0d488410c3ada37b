# ldshim — top-level build.
#
# Each component keeps its rules in its own fragment (policy/policy.mk, shim/shim.mk,
# kernels/*.mk, kernels/moe/moe.mk, tools/*.mk; bench/*/*.mk; tests/*/*.mk), read in that order:
# the product's, then the benchmarks' and the lab's, then the tests'. A fragment appends to:
#   ALL_TARGETS        the product: what `make` builds (the two libraries, the tools, the
#                      MLOPart helper, the man pages) and `make install` installs from
#   TEST_TARGETS       programs the test suites need, built by `make test` / `make test-gpu`
#                      before the suites run; LAB_TEST_TARGETS: the same for the lab's suites
#   BENCH_TARGETS      benchmark programs, built by `make bench`
#   NEEDS_ALL          targets that need the whole product first (install tests, docs)
# Test suites are registered in one place, tests/tests.mk (TEST_SUITES, LAB_TEST_SUITES,
# GPU_TEST_SUITES; it says how to add one). `make help` lists the public targets: the lines
# "#: TARGET  what it does" of the Makefile and the fragments, and the suites of tests/tests.mk.
#   INSTALL_SOLIBS     shared libraries build/libX.so, installed as versioned objects
#                      (libX.so.$(VERSION), soname libX.so.$(SOVERSION), and the two links)
#   INSTALL_LIBS       other files for $(LIBDIR) (programs the libraries start)
#   INSTALL_BINS       the user's tools, all in $(BUILD)/bin, installed to $(BINDIR)
#   INSTALL_HEADERS / INSTALL_DATA / INSTALL_PYMODS / INSTALL_MANS / INSTALL_PCS
#                      headers, data, Python modules (share/ldshim), man pages, pkg-config
#                      templates: what `make install` copies and `make uninstall` removes
#
# Options: SAN=1 builds the CPU code with ASan+UBSan; NVCC=... CUDA_HOME=... V=1.
# Install: PREFIX (/usr/local), DESTDIR (staging root), BINDIR LIBDIR INCLUDEDIR DATADIR
# MANDIR PKGCONFIGDIR DOCDIR (derived from PREFIX).

CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CC        ?= gcc
PYTHON    ?= python3
PREFIX    ?= /usr/local
SAN       ?= 0
# The sanitizer build lives apart, so `make test` and `make test SAN=1` never mix objects.
ifeq ($(SAN),1)
BUILD     ?= build-san
else
BUILD     ?= build
endif
RESULTS   := $(BUILD)/results

# ---- version ------------------------------------------------------------------------------
# VERSION (MAJOR.MINOR.PATCH) is the one source of the project version: C code gets it as
# LDSHIM_VERSION_STRING / LDMOE_VERSION_STRING (the headers' own values only serve code that
# includes them from a checkout without these flags; tests/pkg checks that they agree), the
# tools print it with the git revision, the shared objects are named after it, and the
# pip package (python/ldshim_build.py) reads the same file. The soname follows the major
# version: a release that breaks the ABI of ldshim.h or ldmoe.h raises it.
VERSION   := $(shell cat VERSION 2>/dev/null)
ifeq ($(shell printf '%s' '$(VERSION)' | grep -Ex '[0-9]+\.[0-9]+\.[0-9]+'),)
  $(error VERSION must hold MAJOR.MINOR.PATCH, found '$(VERSION)')
endif
SOVERSION := $(word 1,$(subst ., ,$(VERSION)))
# The revision of this checkout (12 hex digits, "-dirty" with uncommitted changes to tracked
# files), or "unknown" outside one: a source tree that merely lies inside some other git
# repository does not take that repository's revision. GIT_REVISION=... overrides it (a
# packager building from an archive).
ifeq ($(origin GIT_REVISION),undefined)
GIT_REVISION := $(shell top=$$(git -C . rev-parse --show-toplevel 2>/dev/null) && \
                  [ "$$(cd "$$top" && pwd -P)" = "$$(pwd -P)" ] && \
                  git describe --always --dirty --abbrev=12 --exclude='*' 2>/dev/null || echo unknown)
endif

CUDA_INC  := $(CUDA_HOME)/include
WARN      := -Wall -Wextra -Werror
BASE_CFLAGS := -std=gnu11 -D_GNU_SOURCE $(WARN) -O2 -g -fPIC -pthread -I. -Ikernels -I$(CUDA_INC) \
               -fvisibility=hidden -DLDSHIM_VERSION_STRING='"$(VERSION)"'
ifeq ($(SAN),1)
  SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  BASE_CFLAGS += $(SAN_FLAGS)
  LDFLAGS_SAN := $(SAN_FLAGS)
  # An ASan-built preload library must be preceded by the ASan runtime in LD_PRELOAD.
  ASAN_RT := $(shell $(CC) -print-file-name=libasan.so)
  UBSAN_RT := $(shell $(CC) -print-file-name=libubsan.so)
  PRELOAD_PREFIX := $(ASAN_RT):$(UBSAN_RT):
  export ASAN_OPTIONS ?= detect_leaks=1:abort_on_error=0:halt_on_error=1
  export UBSAN_OPTIONS ?= print_stacktrace=1:halt_on_error=1
else
  PRELOAD_PREFIX :=
endif
CFLAGS    ?=
CFLAGS    += $(BASE_CFLAGS)
LDFLAGS   += $(LDFLAGS_SAN)

# sm_90 machine code for Hopper, sm_100 for Blackwell, PTX for everything newer.
CUDA_GENCODE ?= -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_100,code=sm_100 \
                -gencode=arch=compute_100,code=compute_100

ALL_TARGETS :=
TEST_TARGETS :=
LAB_TEST_TARGETS :=
BENCH_TARGETS :=
LAB_TEST_SUITES :=
NEEDS_ALL :=
TEST_SUITES :=
GPU_TEST_SUITES :=
INSTALL_SOLIBS :=
INSTALL_LIBS :=
INSTALL_BINS :=
INSTALL_HEADERS :=
INSTALL_DATA :=
INSTALL_PYMODS :=
INSTALL_MANS :=
INSTALL_PCS :=

#: all             the product: libldshim.so, libldmoe.so, the tools, the MLOPart helper, man pages
#: test            every CPU suite of tests/tests.mk, then one summary line (SAN=1: ASan+UBSan, in build-san/)
#: test-lab        the CPU suites of the lab build of libldmoe (compiles it: a few minutes)
#: test-gpu        every GPU suite (skipped, exit 0, without a usable NVIDIA GPU)
#: bench           every benchmark program (running them needs the GPU: the bench-* targets)
#: install         PREFIX=/usr/local [DESTDIR=staging]; `make uninstall` takes the same arguments
#: uninstall       remove what `make install` put there
#: clean           remove $(BUILD)
#: help            this list
.PHONY: all test test-lab test-gpu test-gpu-run bench install uninstall clean fuzz help FORCE
all: real-all

# $(BUILD)/gen/ldshim_build.h: LDSHIM_BUILD_VERSION and LDSHIM_BUILD_REVISION for the tools'
# --version. Rewritten only when its text changes, so a new commit relinks the tools and
# nothing else.
BUILD_INFO_H := $(BUILD)/gen/ldshim_build.h
$(BUILD_INFO_H): FORCE
	@mkdir -p $(@D)
	@printf '/* Generated by the Makefile from VERSION and git; do not edit. */\n#define LDSHIM_BUILD_VERSION "%s"\n#define LDSHIM_BUILD_REVISION "%s"\n' \
	  '$(VERSION)' '$(GIT_REVISION)' > $@.$$$$.tmp && \
	  if cmp -s $@.$$$$.tmp $@; then rm -f $@.$$$$.tmp; else mv -f $@.$$$$.tmp $@; fi
FORCE:

# Component fragments. shim/shim.mk links every shim/*.c plus $(SHIM_EXTRA_OBJS) (the
# embedded probe fatbin from kernels/kernels.mk) into build/libldshim.so.
# The product's fragments first, then the benchmarks' and the tests', so that those may name the
# product's variables in their prerequisites.
include $(sort $(wildcard policy/*.mk kernels/*.mk kernels/*/*.mk shim/*.mk tools/*.mk))
include $(sort $(wildcard bench/*.mk bench/*/*.mk bench/*/*/*.mk))
include $(sort $(wildcard tests/*.mk tests/*/*.mk tests/*/*/*.mk))

real-all: $(ALL_TARGETS)

# Objects that print the version are rebuilt when it changes.
$(SHIM_OBJS) $(POLICY_OBJS): VERSION

# A program links against build/libX.so and records the soname libX.so.$(SOVERSION): the link
# beside it lets that program run from the build tree.
SOLIB_LINKS := $(addsuffix .$(SOVERSION),$(INSTALL_SOLIBS))
ALL_TARGETS += $(SOLIB_LINKS)
real-all: $(SOLIB_LINKS)
$(SOLIB_LINKS): %.$(SOVERSION): %
	ln -sf $(notdir $<) $@

# Targets (suites) that need the whole build: fragments are read in name order, so
# $(ALL_TARGETS) is complete only here.
$(NEEDS_ALL): $(ALL_TARGETS)

$(BUILD) $(RESULTS):
	@mkdir -p $@

# The suites: $(RESULTS)/<suite> holds "<passed> <failed>" (tests/tests.mk).
# `make test`: every CPU suite, then one summary line. -k semantics: a failing suite does
# not stop the others; the summary fails if any suite failed or wrote no result.
test: $(ALL_TARGETS) $(TEST_TARGETS)
	@rm -rf $(RESULTS); mkdir -p $(RESULTS)
	@rc=0; for s in $(TEST_SUITES); do $(MAKE) --no-print-directory $$s || rc=1; done; \
	  sh tests/summarize.sh $(RESULTS) $(TEST_SUITES) || rc=1; exit $$rc

# `make test-gpu`: every GPU suite when a GPU is usable, else one "skipped: no GPU" line and
# exit 0 (nothing is built). tests/gpu/gpu_present.py decides (cuInit and the device count
# through libcuda.so.1, never the project's fake driver); LDSHIM_GPU=1 runs the suites
# anyway, LDSHIM_GPU=0 skips them, LDSHIM_GPU_LIBCUDA=PATH checks another driver library.
test-gpu:
	@if $(PYTHON) tests/gpu/gpu_present.py --for test-gpu; then \
	  $(MAKE) --no-print-directory test-gpu-run; \
	else echo "test-gpu: skipped: no GPU ($(words $(GPU_TEST_SUITES)) suites not run; LDSHIM_GPU=1 runs them anyway)"; fi

test-gpu-run: $(ALL_TARGETS) $(TEST_TARGETS)
	@rm -rf $(RESULTS); mkdir -p $(RESULTS)
	@rc=0; for s in $(GPU_TEST_SUITES); do $(MAKE) --no-print-directory $$s || rc=1; done; \
	  sh tests/summarize.sh $(RESULTS) $(GPU_TEST_SUITES) || rc=1; exit $$rc

# `make test-lab`: the CPU suites that need the lab build of libldmoe (bench/moe/lab), which
# `make test` does not compile (it would compile every product kernel a second time).
test-lab: $(ALL_TARGETS) $(LAB_TEST_TARGETS)
	@rm -rf $(RESULTS); mkdir -p $(RESULTS)
	@rc=0; for s in $(LAB_TEST_SUITES); do $(MAKE) --no-print-directory $$s || rc=1; done; \
	  sh tests/summarize.sh $(RESULTS) $(LAB_TEST_SUITES) || rc=1; exit $$rc

bench: $(BENCH_TARGETS)

# ---- install / uninstall ------------------------------------------------------------------
BINDIR       ?= $(PREFIX)/bin
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
DATADIR      ?= $(PREFIX)/share
MANDIR       ?= $(DATADIR)/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
DOCDIR       ?= $(DATADIR)/doc/ldshim
PKGINCDIR    := $(INCLUDEDIR)/ldshim
PKGDATADIR   := $(DATADIR)/ldshim
# ldconfig after a real install into the system prefixes, so the loader finds the sonames.
LDCONFIG     ?= $(if $(DESTDIR),,$(if $(filter /usr /usr/local,$(PREFIX)),ldconfig))

# Every path `make install` creates (the package's own directories aside), so that
# `make uninstall` removes exactly these.
INSTALLED_FILES = \
  $(foreach l,$(notdir $(INSTALL_SOLIBS)),$(LIBDIR)/$(l).$(VERSION) $(LIBDIR)/$(l).$(SOVERSION) $(LIBDIR)/$(l)) \
  $(addprefix $(LIBDIR)/,$(notdir $(INSTALL_LIBS))) \
  $(addprefix $(BINDIR)/,$(notdir $(INSTALL_BINS))) \
  $(addprefix $(PKGINCDIR)/,$(notdir $(INSTALL_HEADERS))) \
  $(addprefix $(PKGDATADIR)/,$(notdir $(INSTALL_DATA) $(INSTALL_PYMODS))) \
  $(addprefix $(MANDIR)/man1/,$(notdir $(INSTALL_MANS))) \
  $(addprefix $(PKGCONFIGDIR)/,$(notdir $(INSTALL_PCS:.pc.in=.pc))) \
  $(DOCDIR)/LICENSE

# pkg-config files keep ${prefix} in their paths where the directory lies under PREFIX, so
# `pkg-config --define-prefix` and PKG_CONFIG_SYSROOT_DIR work on them.
pc_rel = $(patsubst $(PREFIX)/%,$${prefix}/%,$(1))

install: $(ALL_TARGETS)
	install -d "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(LIBDIR)" "$(DESTDIR)$(PKGINCDIR)" "$(DESTDIR)$(PKGDATADIR)" \
	  "$(DESTDIR)$(MANDIR)/man1" "$(DESTDIR)$(PKGCONFIGDIR)" "$(DESTDIR)$(DOCDIR)"
	@set -e; for l in $(INSTALL_SOLIBS); do n=$$(basename $$l); \
	  echo "install $$l -> $(DESTDIR)$(LIBDIR)/$$n.$(VERSION) (+ $$n.$(SOVERSION), $$n)"; \
	  install -m 0755 $$l "$(DESTDIR)$(LIBDIR)/$$n.$(VERSION)"; \
	  ln -sf $$n.$(VERSION) "$(DESTDIR)$(LIBDIR)/$$n.$(SOVERSION)"; \
	  ln -sf $$n.$(VERSION) "$(DESTDIR)$(LIBDIR)/$$n"; done
	$(if $(INSTALL_LIBS),install -m 0755 $(INSTALL_LIBS) "$(DESTDIR)$(LIBDIR)/")
	$(if $(INSTALL_BINS),install -m 0755 $(INSTALL_BINS) "$(DESTDIR)$(BINDIR)/")
	@# the installed headers carry VERSION whatever their fallback says
	@set -e; for h in $(INSTALL_HEADERS); do \
	  sed -e 's/^#define LDSHIM_VERSION_STRING ".*"/#define LDSHIM_VERSION_STRING "$(VERSION)"/' \
	      -e 's/^#define LDMOE_VERSION_STRING ".*"/#define LDMOE_VERSION_STRING "$(VERSION)"/' $$h \
	      > "$(DESTDIR)$(PKGINCDIR)/$$(basename $$h)"; \
	  chmod 0644 "$(DESTDIR)$(PKGINCDIR)/$$(basename $$h)"; done
	$(if $(INSTALL_DATA),install -m 0644 $(INSTALL_DATA) "$(DESTDIR)$(PKGDATADIR)/")
	@# Python modules learn where the libraries went (ldmoe.py: _LIBDIR)
	@set -e; for m in $(INSTALL_PYMODS); do \
	  sed 's|^_LIBDIR = None$$|_LIBDIR = "$(LIBDIR)"|' $$m > "$(DESTDIR)$(PKGDATADIR)/$$(basename $$m)"; \
	  chmod 0644 "$(DESTDIR)$(PKGDATADIR)/$$(basename $$m)"; done
	$(if $(INSTALL_MANS),install -m 0644 $(INSTALL_MANS) "$(DESTDIR)$(MANDIR)/man1/")
	@set -e; for p in $(INSTALL_PCS); do \
	  sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(call pc_rel,$(LIBDIR))|g' \
	      -e 's|@INCLUDEDIR@|$(call pc_rel,$(INCLUDEDIR))|g' -e 's|@VERSION@|$(VERSION)|g' $$p \
	      > "$(DESTDIR)$(PKGCONFIGDIR)/$$(basename $$p .in)"; \
	  chmod 0644 "$(DESTDIR)$(PKGCONFIGDIR)/$$(basename $$p .in)"; done
	install -m 0644 LICENSE "$(DESTDIR)$(DOCDIR)/LICENSE"
	$(if $(LDCONFIG),-$(LDCONFIG))

# Removes what `install` put there (and the bytecode Python leaves beside an imported module),
# then the package's own directories if they are empty; shared ones (bin, lib, man1) stay.
uninstall:
	rm -f $(foreach f,$(INSTALLED_FILES),"$(DESTDIR)$(f)")
	rm -f $(foreach m,$(notdir $(INSTALL_PYMODS:.py=)),"$(DESTDIR)$(PKGDATADIR)/__pycache__/$(m)".*.pyc)
	@for d in "$(DESTDIR)$(PKGDATADIR)/__pycache__" "$(DESTDIR)$(PKGINCDIR)" "$(DESTDIR)$(PKGDATADIR)" \
	          "$(DESTDIR)$(DOCDIR)"; do [ ! -d "$$d" ] || rmdir "$$d" 2>/dev/null || echo "uninstall: kept $$d (not empty)"; done
	$(if $(LDCONFIG),-$(LDCONFIG))

clean:
	rm -rf $(BUILD)

# `make help`: the "#: " lines of the Makefile and the fragments (the build's own targets first),
# then every registered suite with its comment in tests/tests.mk.
HELP_FILES := Makefile $(sort $(wildcard policy/*.mk kernels/*.mk kernels/*/*.mk shim/*.mk tools/*.mk \
                bench/*.mk bench/*/*.mk bench/*/*/*.mk tests/*/*.mk tests/*/*/*.mk))
help:
	@echo "Targets (make help; options: SAN=1 BUILD=dir PREFIX=dir DESTDIR=dir NVCC=... CUDA_HOME=... PYTHON=...):"
	@sed -n 's/^#: \([^ ]*\)  */  \1|/p' $(HELP_FILES) | awk -F'|' '{ printf "  %-28s %s\n", substr($$1, 3), $$2 }'
	@echo "Test suites (tests/tests.mk; each also runs alone as make NAME):"
	@sed -n 's/^\(LAB_\|GPU_\)\{0,1\}TEST_SUITES *+= *\([^ ]*\) *# *\(.*\)/\1|\2|\3/p' tests/tests.mk | \
	  awk -F'|' '{ k = $$1 == "GPU_" ? "gpu" : $$1 == "LAB_" ? "lab" : "cpu"; printf "  %-28s [%s] %s\n", $$2, k, $$3 }'
	@echo "pip install .   ldshim-ab and the ldmoe module (with the libraries, after make)"
