#!/usr/bin/env python3
"""run_tests.py SUITE RESULT_FILE — run tests/pkg/test_SUITE.py with unittest and write
"<passed> <failed>" to RESULT_FILE (the tests/summarize.sh contract); exit 1 on a failure.
A skipped test counts as failed: nothing here is allowed to pass by not running."""
import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
if len(sys.argv) != 3:
    sys.exit("usage: run_tests.py SUITE RESULT_FILE")
suite_name, result_file = sys.argv[1:]
suite = unittest.defaultTestLoader.loadTestsFromName("test_" + suite_name.replace("-", "_"))
res = unittest.TextTestRunner(verbosity=2).run(suite)
failed = len(res.failures) + len(res.errors) + len(res.unexpectedSuccesses) + len(res.skipped)
passed = res.testsRun - failed
with open(result_file, "w") as f:
    f.write("%d %d\n" % (passed, failed))
print("test-pkg-%s: %d passed, %d failed" % (suite_name, passed, failed))
sys.exit(1 if failed or res.testsRun == 0 else 0)
