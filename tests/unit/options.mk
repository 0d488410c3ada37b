# tests/unit/options.mk — `test-options`: the LDSHIM_* options table (shim/options.h) against
# its accessors, doc/shim.md's generated "Options" table, the variables README.md and doc/*.md
# name, and the code (no getenv of LDSHIM_* outside shim/options.c). tests/unit/test_options.sh.
#
#   make options-table   print the Markdown table doc/shim.md holds (paste it between the
#                        `<!-- options: begin/end -->` markers after changing options.h)
OPTIONS_TABLE_BIN := $(BUILD)/tests/options_table

$(OPTIONS_TABLE_BIN): tests/unit/options_table.c shim/options.c shim/options.h shim/mlopart_proto.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ tests/unit/options_table.c shim/options.c $(LDFLAGS) -pthread

TEST_TARGETS += $(OPTIONS_TABLE_BIN)

#: options-table   print the Markdown options table doc/shim.md holds
.PHONY: test-options options-table
test-options: $(OPTIONS_TABLE_BIN) | $(RESULTS)
	@sh tests/unit/test_options.sh $(OPTIONS_TABLE_BIN) $(RESULTS)/test-options

options-table: $(OPTIONS_TABLE_BIN)
	@$(OPTIONS_TABLE_BIN) --markdown

