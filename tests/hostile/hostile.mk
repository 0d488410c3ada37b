# tests/hostile/hostile.mk — `test-hostile`, the hostile-path matrix (issue 41): every path
# variable of the options table and every row of tools/path_flags.tsv crossed with planted
# links, special files, huge files, unsafe directories and overlong paths
# (tests/hostile/run_matrix.py). Writes "<passed> <failed>" and the cell counts
# ($(RESULTS)/test-hostile.json, read by tests/fake/reliability_figures.py).
.PHONY: test-hostile
test-hostile: $(BUILD)/libldshim.so $(BUILD)/bin/ldshim-probe $(BUILD)/bin/ldshim-policy $(BUILD)/bin/ldshim-ab \
              $(BUILD)/tests/options_table $(BUILD)/ldshim-mlopart-helper $(BUILD)/fake/libcuda.so.1 \
              $(BUILD)/fake/libcudart.so.13 $(BUILD)/fake/t_runtime | $(RESULTS)
	@$(PYTHON) tests/hostile/run_matrix.py --build $(BUILD) --preload "$(PRELOAD_PREFIX)$(abspath $(BUILD))/libldshim.so" \
	  --result $(RESULTS)/test-hostile --figures $(RESULTS)/test-hostile.json $(if $(filter 1,$(SAN)),--san)

