"""pkgtest.py — what the tests/pkg suites share: paths, the version, subprocess helpers.

The suites get their setting from tests/pkg/pkg.mk through the environment: PKG_BUILD (the
build directory, absolute), PKG_MAKE, PKG_PYTHON, PKG_CC, PKG_GIT_REVISION (the revision
the Makefile embedded), CUDA_HOME.
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("PKG_BUILD") or os.path.join(ROOT, "build")
MAKE = os.environ.get("PKG_MAKE") or "make"
PYTHON = os.environ.get("PKG_PYTHON") or sys.executable
CC = os.environ.get("PKG_CC") or "cc"
CUDA_HOME = os.environ.get("CUDA_HOME") or "/usr/local/cuda"

with open(os.path.join(ROOT, "VERSION")) as _f:
    VERSION = _f.read().strip()
SOVERSION = VERSION.split(".")[0]


def git_revision():
    """The revision the Makefile embeds, as it computes it (for a test run outside make)."""
    rev = os.environ.get("PKG_GIT_REVISION")
    if rev:
        return rev
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--show-toplevel"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, universal_newlines=True)
    if r.returncode != 0 or os.path.realpath(r.stdout.strip()) != os.path.realpath(ROOT):
        return "unknown"
    return subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty", "--abbrev=12",
                           "--exclude=*"], stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()


def version_line(tool, rev=None):
    return "%s %s (git %s)" % (tool, VERSION, rev or git_revision())


def clean_env(**extra):
    """The environment without what a parent make passes down (a nested make must not join
    its jobserver or take its command-line variables) or what would steer the shim."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "MAKE_TERMOUT",
                        "MAKE_TERMERR", "LD_PRELOAD", "LDMOE_LIB", "PYTHONPATH")
           and not k.startswith("LDSHIM_")}
    env.update({k: v for k, v in extra.items() if v is not None})
    for k in [k for k, v in extra.items() if v is None]:
        env.pop(k, None)
    return env


def run(cmd, cwd=None, env=None, timeout=600, check=True, input=None):
    """Run cmd (a list); return CompletedProcess with text stdout/stderr. check=True raises
    an AssertionError that shows both streams when the exit status is not 0."""
    r = subprocess.run(cmd, cwd=cwd, env=env if env is not None else clean_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                       timeout=timeout, input=input)
    if check and r.returncode != 0:
        raise AssertionError("%s exited %d\n--- stdout\n%s\n--- stderr\n%s"
                             % (" ".join(cmd), r.returncode, r.stdout[-4000:], r.stderr[-4000:]))
    return r


def make(*args, check=True, env=None, timeout=600):
    """make in the repository root with the suite's BUILD, nothing inherited from the parent."""
    return run([MAKE, "--no-print-directory", "-C", ROOT, "BUILD=" + BUILD] + list(args),
               env=env if env is not None else clean_env(), check=check, timeout=timeout)


def tree(top):
    """{relative path: link target or 'file' or 'dir'} of everything under top."""
    out = {}
    for d, dirs, files in os.walk(top):
        for n in dirs + files:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, top)
            if os.path.islink(p):
                out[rel] = "-> " + os.readlink(p)
            elif os.path.isdir(p):
                out[rel] = "dir"
            else:
                out[rel] = "file"
    return out


class TmpDirCase(unittest.TestCase):
    """A test class with one temporary directory for all its tests (self.tmp)."""

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="ldshim-pkg.")
        cls.tmp = cls._tmp.name

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()
