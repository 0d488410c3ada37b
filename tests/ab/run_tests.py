#!/usr/bin/env python3
"""run_tests.py RESULT_FILE — run every tests/ab/test_*.py with unittest, write
"<passed> <failed>" to RESULT_FILE (tests/summarize.sh contract), exit non-zero on failure."""
import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
suite = unittest.defaultTestLoader.discover(here, pattern="test_*.py", top_level_dir=here)
res = unittest.TextTestRunner(verbosity=2).run(suite)
failed = len(res.failures) + len(res.errors) + len(res.unexpectedSuccesses)
passed = res.testsRun - failed - len(res.skipped)
# a skipped test is not a pass: count it as failed so nothing is silently skipped
failed += len(res.skipped)
if len(sys.argv) > 1:
    with open(sys.argv[1], "w") as f:
        f.write("%d %d\n" % (passed, failed))
print("test-ab: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed or res.testsRun == 0 else 0)
