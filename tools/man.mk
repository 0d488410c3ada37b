# tools/man.mk — man pages of the tools, written at build time from their own --help
# (tools/mkman.py), so a page cannot disagree with its program; installed to $(MANDIR)/man1.
#
#   build/man/ldshim-ab.1  build/man/ldshim-policy.1  build/man/ldshim-probe.1

MAN_DIR   := $(BUILD)/man
MAN_PAGES := $(MAN_DIR)/ldshim-ab.1 $(MAN_DIR)/ldshim-policy.1 $(MAN_DIR)/ldshim-probe.1
MAN_TOOLS := ldshim-ab ldshim-policy ldshim-probe
man_empty :=
man_space := $(man_empty) $(man_empty)
man_see    = $(subst $(man_space),$(comma),$(filter-out $(1),$(MAN_TOOLS)))
comma     := ,

$(MAN_DIR)/ldshim-ab.1: MAN_SUMMARY := A/B benchmark an unmodified program across ldshim placement states
$(MAN_DIR)/ldshim-ab.1: MAN_DOC := doc/ab.md
$(MAN_DIR)/ldshim-policy.1: MAN_SUMMARY := check an ldshim policy file, or show which rule tags a size
$(MAN_DIR)/ldshim-policy.1: MAN_DOC := doc/policy.md
$(MAN_DIR)/ldshim-probe.1: MAN_SUMMARY := measure and show the SM to locality-domain map of every GPU
$(MAN_DIR)/ldshim-probe.1: MAN_DOC := doc/probe.md

# ldshim-ab runs through $(PYTHON), the C tools as they are.
$(MAN_DIR)/%.1: $(BUILD)/bin/% tools/mkman.py
	@mkdir -p $(@D)
	$(PYTHON) tools/mkman.py --summary '$(MAN_SUMMARY)' --see-also '$(call man_see,$*)' --doc '$(MAN_DOC)' \
	  --out $@ -- $(if $(filter ldshim-ab,$*),$(PYTHON)) $<

ALL_TARGETS  += $(MAN_PAGES)
INSTALL_MANS += $(MAN_PAGES)
