# tests/docs/docs.mk — `test-doc-budget` (CPU, part of `make test`): README.md and doc/*.md stay
# within their size budgets and describe the design rather than the work's history, every
# bench/results path they cite exists, and bench/results keeps to its size and layout
# (tests/docs/check_budget.py; its synthetic trees prove each check can fail).

.PHONY: test-doc-budget
test-doc-budget: | $(RESULTS)
	@$(PYTHON) tests/docs/check_budget.py --result $(RESULTS)/test-doc-budget

