#!/usr/bin/env python3
"""run_matrix.py — the hostile-path matrix (issue 41): every path-taking input of the project
crossed with hostile targets, each cell a fresh process.

Inputs, enumerated so that a new one cannot be missed:
  * every variable of kind "path" in the shim's options table (build/tests/options_table
    --kinds, linked with shim/options.c), and the two other variables the shim copies at start
    for its cache directory (XDG_CACHE_HOME, HOME: --kinds lists them too): each must have an
    exercise in SHIM_EXERCISES below, or the matrix fails;
  * every row of tools/path_flags.tsv, and every tool's --help is scanned for path inputs
    (metavar FILE, DIR or PATH): one the registry lacks fails the matrix.

Targets: a link planted to a victim file (ours; another user's file; a link `nobody` plants
with setpriv in a sticky world-writable directory, to our private file), a dangling
link, a FIFO, /dev/zero, a directory, a 10 GiB sparse file, a path inside an unwritable
directory, one inside a world-writable directory without the sticky bit (another user's), a
path longer than 4 KiB; for XDG_CACHE_HOME and HOME (shim and registry rows) also a relative
path, which must be ignored: nothing is created under it in the working directory.

Every cell asserts: it finishes within its timeout; the victim is byte-identical (content,
mode, owner); nothing was created outside where the input may write; one clear message: a
refused input gives the shim's program its own exit status and one ldshim line (it runs as
stock for that input), a tool its refusal status and one line; an accepted input gives no
message. Cells needing another user use `nobody` (files chowned to it as root) and print a
skip line otherwise.

  run_matrix.py --build build --result build/results/test-hostile [--figures FILE] [--san]
"""
import argparse
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NOBODY = 65534
# The fake driver has no probe kernels: every process that probes says so once. Not a line
# about the input under test.
FAKE_PROBE_LINE = re.compile(r"^ldshim: warning: probe: device \d+: loading probe kernels: CUDA_ERROR_NO_BINARY_FOR_GPU")
LDSHIM_LINE = re.compile(r"^ldshim: (error|warning|info|debug): ")

# How each path variable of the shim is exercised: the program (a fake test program under the
# preloaded shim), its extra environment, and the direction of the input. A path variable of
# the options table missing here fails the matrix.
SHIM_EXERCISES = {
    "LDSHIM_POLICY": ("read", {}),
    "LDSHIM_REPORT": ("write", {"LDSHIM_POLICY": "@emulated"}),
    "LDSHIM_PROBE_DUMP": ("dir", {"LDSHIM_POLICY": "@emulated", "LDSHIM_PROBE_FORCE": "1"}),
    "LDSHIM_CACHE_DIR": ("dir", {"LDSHIM_POLICY": "@emulated", "LDSHIM_STATE": "full"}),
    # The cache directory's defaults: $XDG_CACHE_HOME/ldshim, else $HOME/.cache/ldshim (with
    # LDSHIM_CACHE_DIR unset, and for HOME XDG_CACHE_HOME unset too).
    "XDG_CACHE_HOME": ("dir", {"LDSHIM_POLICY": "@emulated", "LDSHIM_STATE": "full", "LDSHIM_CACHE_DIR": None}),
    "HOME": ("dir", {"LDSHIM_POLICY": "@emulated", "LDSHIM_STATE": "full", "LDSHIM_CACHE_DIR": None,
                     "XDG_CACHE_HOME": None}),
    "LDSHIM_LIBCUDA": ("read", {"LDSHIM_POLICY": "@emulated", "LDSHIM_STATE": "full"}),
    "LDSHIM_MLOPART_HELPER": ("read", {"LDSHIM_POLICY": "@emulated", "LDSHIM_BACKEND": "mlopart"}),
    "LDSHIM_MPS_CONTROL": ("read", {"LDSHIM_POLICY": "@emulated", "LDSHIM_BACKEND": "mlopart"}),
    "LDSHIM_MLOPART_DEBUG_LOGS": ("dir", {"LDSHIM_POLICY": "@emulated", "LDSHIM_BACKEND": "mlopart",
                                          "LDSHIM_MPS_CONTROL": "@fake-mps-control"}),
}
# Inputs whose effect the fake driver cannot reach (said in the summary, asserted as safety
# only: no hang, victim intact, nothing created): the probe never measures on the fake, so
# nothing is dumped (the dump itself: tests/unit/test_probe.c and the GPU record).
SAFETY_ONLY = {"LDSHIM_PROBE_DUMP"}
# On the fake the probe's result (the even map) is never cached, so the cache directory is
# only looked up: a lookup that finds nothing usable is a silent miss, one that finds another
# user's directory says so. 0 or 1 line.
MAY_BE_SILENT = {"LDSHIM_CACHE_DIR", "XDG_CACHE_HOME", "HOME"}
# Variables of other programs' conventions that the shim copies at start (ld_env, options.h):
# a relative value is ignored, so they get the extra target "relative-path". The registry's
# rows of these names (ldshim-probe's default cache directory) are lookups on the fake too.
START_ENV = {"XDG_CACHE_HOME", "HOME"}

# A refused input's exit status: 2 (usage), except where a tool documents another.
REFUSE_STATUS = {"ldshim-policy": 1}

TARGETS = ["link-victim", "link-victim-other-user", "link-planted-by-nobody", "dangling-link", "fifo", "dev-zero", "directory",
           "sparse-10GiB", "in-unwritable-dir", "in-world-writable-dir", "path-4KiB"]
START_ENV_TARGETS = ["relative-path"]
RELATIVE = "rel.d"   # the relative target, taken from the cell's working directory (aux/)

# What an input does with each target: "refuse" (one message, refusal status), "accept" (no
# message, success) or "either" (root may write where others may not; both are safe).
EXPECT = {
    "read": {"link-victim": "either", "link-victim-other-user": "either", "link-planted-by-nobody": "either",
             "dangling-link": "refuse",
             "fifo": "refuse", "dev-zero": "refuse", "directory": "refuse", "sparse-10GiB": "refuse",
             "in-unwritable-dir": "refuse", "in-world-writable-dir": "refuse", "path-4KiB": "refuse"},
    "write": {"link-victim": "refuse", "link-victim-other-user": "refuse", "link-planted-by-nobody": "refuse",
              "dangling-link": "refuse",
              "fifo": "refuse", "dev-zero": "accept", "directory": "refuse", "sparse-10GiB": "accept",
              "in-unwritable-dir": "either", "in-world-writable-dir": "refuse", "path-4KiB": "refuse"},
    "dir": {"link-victim": "refuse", "link-victim-other-user": "refuse", "link-planted-by-nobody": "refuse",
            "dangling-link": "refuse",
            "fifo": "refuse", "dev-zero": "refuse", "directory": "accept", "sparse-10GiB": "refuse",
            "in-unwritable-dir": "either", "in-world-writable-dir": "refuse", "path-4KiB": "refuse",
            "relative-path": "accept"},
}


def digest(path):
    st = os.lstat(path)
    if stat.S_ISREG(st.st_mode) and st.st_size < (1 << 20):
        with open(path, "rb") as f:
            return ("f", hashlib.sha256(f.read()).hexdigest(), st.st_mode, st.st_uid)
    if stat.S_ISLNK(st.st_mode):
        return ("l", os.readlink(path), st.st_uid)
    return ("o", stat.S_IFMT(st.st_mode), st.st_size, st.st_mode, st.st_uid)


def snapshot(root):
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            try:
                out[p] = digest(p)
            except OSError:
                pass
    return out


class Cell:
    def __init__(self, name, direction, expect, command, env, refuse_rc, shim, targets=TARGETS):
        self.name, self.direction, self.expect = name, direction, expect
        self.command, self.env, self.refuse_rc, self.shim = command, env, refuse_rc, shim
        self.targets = targets


class Matrix:
    def __init__(self, a):
        self.a = a
        self.build = os.path.abspath(a.build)
        self.bin = os.path.abspath(a.bin) if a.bin else os.path.join(self.build, "bin")
        self.fake = os.path.join(self.build, "fake")
        self.root_user = os.geteuid() == 0
        self.passed = self.failed = self.skipped = 0
        self.timeout = 120 if a.san else 30

    def say_fail(self, name, why):
        self.failed += 1
        print("FAIL %s: %s" % (name, why))

    # ---- the inputs -------------------------------------------------------------------------
    def path_vars(self):
        out = subprocess.run([os.path.join(self.build, "tests", "options_table"), "--kinds"],
                             stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
        return [l.split()[0] for l in out.splitlines() if len(l.split()) >= 2 and l.split()[1] == "path"]

    def registry(self):
        """Rows (tool, flag, direction, template) of tools/path_flags.tsv (or --registry)."""
        rows = []
        with open(self.a.registry) as f:
            lines = f.read().splitlines()
        if not lines or lines[0].split("\t") != ["tool", "flag", "direction", "template"]:
            self.say_fail("registry", "%s: the first line must be the header tool, flag, direction, template"
                          % self.a.registry)
            return rows
        for n, line in enumerate(lines[1:], 2):
            if not line.strip() or line.startswith("#"):
                continue
            cols = line.split("\t")
            if len(cols) != 4 or cols[2] not in EXPECT or "{PATH}" not in cols[3] or \
                    self.command_word(cols[3]) != cols[0]:
                self.say_fail("registry", "%s:%d: expected tool, flag, read|write|dir, and a command that "
                              "starts with the tool and holds {PATH}" % (self.a.registry, n))
                continue
            rows.append(cols)
        return rows

    @staticmethod
    def command_word(template):
        """The command's first word after any VAR=value assignments."""
        for w in template.split():
            if "=" not in w:
                return w
        return ""

    def help_path_inputs(self, tool):
        """(flag) of every path input a tool's --help shows: `--flag FILE|DIR|PATH` or a
        subcommand `word FILE...` on a usage line."""
        exe = os.path.join(self.bin, tool)
        p = subprocess.run([exe, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, timeout=30)
        found = set()
        for m in re.finditer(r"(--[a-z][a-z0-9-]*)[ =]\[?([A-Z_]*(?:FILE|DIR|PATH)S?)\b", p.stdout):
            found.add(m.group(1))
        for m in re.finditer(r"^(?:usage:)?\s+%s\s+([a-z][a-z-]*)\s+\[?[A-Z_]*(?:FILE|DIR|PATH)\b" % re.escape(tool),
                             p.stdout, re.M):
            found.add(m.group(1))
        return found

    # ---- targets ------------------------------------------------------------------------------
    def plant(self, cell_dir, target, direction):
        """Create the hostile target in cell_dir; returns (path, victim dir, allowed-new dirs,
        paths that must not appear) or None with a skip reason."""
        victim_dir = os.path.join(cell_dir, "victim")
        os.makedirs(victim_dir)
        victim = os.path.join(victim_dir, "secret")
        with open(victim, "w") as f:
            f.write("victim: must stay byte-identical\n" * 8)
        os.chmod(victim, 0o600)
        inside = os.path.join(cell_dir, "inside")
        os.makedirs(inside)
        os.makedirs(os.path.join(cell_dir, "aux"))     # the cell's own report, not the input
        name = "target.csv" if direction != "dir" else "target.d"
        path = os.path.join(inside, name)
        must_not = []
        if target in ("link-victim", "link-victim-other-user"):
            os.symlink(victim_dir if direction == "dir" else victim, path)
            if target == "link-victim-other-user":
                if not self.root_user:
                    return None, "needs root to give the victim and the link to nobody"
                os.chown(victim, NOBODY, NOBODY)
                os.chown(victim_dir, NOBODY, NOBODY)
                os.lchown(path, NOBODY, NOBODY)
        elif target == "link-planted-by-nobody":
            # The attack of a shared /tmp: another user plants the link in a sticky, world-
            # writable directory, pointing at this user's private file.
            if not self.root_user or not shutil.which("setpriv"):
                return None, "needs root and setpriv to plant the link as nobody"
            os.chmod(inside, 0o1777)
            for d in (cell_dir, ):
                os.chmod(d, 0o755)
            p = subprocess.run(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups", "ln", "-s",
                                victim_dir if direction == "dir" else victim, path],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
            if p.returncode != 0 or os.lstat(path).st_uid != NOBODY:
                return None, "setpriv could not plant the link as nobody: %s" % p.stdout.strip()
        elif target == "dangling-link":
            ghost = os.path.join(victim_dir, "created-through-link")
            os.symlink(ghost, path)
            must_not.append(ghost)
        elif target == "fifo":
            os.mkfifo(path)
        elif target == "dev-zero":
            path = "/dev/zero"
        elif target == "directory":
            os.makedirs(path, mode=0o700)
        elif target == "sparse-10GiB":
            with open(path, "wb") as f:
                f.truncate(10 << 30)
        elif target == "in-unwritable-dir":
            ro = os.path.join(inside, "ro")
            os.makedirs(ro)
            path = os.path.join(ro, name)
            os.chmod(ro, 0o500)
        elif target == "in-world-writable-dir":
            ww = os.path.join(inside, "ww")
            os.makedirs(ww)
            os.chmod(ww, 0o777)
            if self.root_user:
                os.chown(ww, NOBODY, NOBODY)
            path = os.path.join(ww, name)
        elif target == "path-4KiB":
            path = os.path.join(inside, "/".join(["d" * 200] * 21), name)
            must_not.append(os.path.join(inside, "d" * 200))
        elif target == "relative-path":
            # Taken as relative (from the working directory), the cache directory would be
            # rel.d/ldshim (XDG_CACHE_HOME) or rel.d/.cache/ldshim (HOME): both are planted
            # world-writable, so a lookup there says "not trusted". Ignored, it is silent.
            path = RELATIVE
            for d in ("ldshim", ".cache/ldshim"):
                planted = os.path.join(cell_dir, "aux", RELATIVE, d)
                os.makedirs(planted)
                os.chmod(planted, 0o777)
        return (path, victim_dir, inside, must_not), None

    # ---- one cell -------------------------------------------------------------------------
    def run_cell(self, cell, target):
        name = "%s x %s" % (cell.name, target)
        # A relative XDG_CACHE_HOME or HOME is ignored: silent, nothing created (all inputs).
        expect = EXPECT[cell.direction][target] if cell.expect is None or target in START_ENV_TARGETS \
            else cell.expect
        tmp = tempfile.mkdtemp(prefix="ldshim-hostile-")
        os.chmod(tmp, 0o755)
        try:
            planted, skip = self.plant(tmp, target, cell.direction)
            if planted is None:
                self.skipped += 1
                print("skip %s: %s" % (name, skip))
                return
            path, victim_dir, inside, must_not = planted
            before = snapshot(tmp)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("LDSHIM_", "FAKE_CUDA_")) and k != "LD_PRELOAD"}
            for k, v in cell.env(path, tmp).items():   # None: unset
                if v is None:
                    env.pop(k, None)
                else:
                    env[k] = v
            cmd = cell.command(path)
            t0 = time.time()
            try:
                # The cell runs in aux/, where a tool's own products (ldshim-ab's default output
                # directory) may go: only the hostile input is under test.
                p = subprocess.run(cmd, shell=isinstance(cmd, str), env=env, cwd=os.path.join(tmp, "aux"),
                                   stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, timeout=self.timeout, start_new_session=True)
            except subprocess.TimeoutExpired:
                self.say_fail(name, "did not finish within %d s" % self.timeout)
                return
            took = time.time() - t0
            err = p.stderr.decode(errors="replace")
            after = snapshot(tmp)
            # The victim, and everything planted, unchanged; new files only where allowed.
            for f, d in before.items():
                if f.startswith(victim_dir) and after.get(f) != d:
                    return self.say_fail(name, "the victim %s changed" % f)
            for f in must_not:
                if os.path.lexists(f):
                    return self.say_fail(name, "%s was created" % f)
            allowed = ((os.path.dirname(path), path) if cell.direction != "read" and os.path.isabs(path) else ()) + \
                tuple(os.path.join(tmp, d) for d in ("aux", "cache", "xdg"))
            for f in after:
                if f in before:
                    continue
                if not any(f == a or f.startswith(a + "/") for a in allowed) or f.startswith(victim_dir):
                    return self.say_fail(name, "created %s" % f)
            if cell.shim:
                lines = [l for l in err.splitlines() if not FAKE_PROBE_LINE.search(l)]
                stray = [l for l in lines if not LDSHIM_LINE.search(l)]
                msgs = [l for l in lines if LDSHIM_LINE.search(l)]
                if p.returncode != 0:
                    return self.say_fail(name, "the program exited %d (the shim must not cost it its run); %s"
                                         % (p.returncode, " | ".join(lines)[:300]))
                if stray:
                    return self.say_fail(name, "stray stderr: %s" % " | ".join(stray)[:300])
                # "any": an input of the MLOPart backend, whose refusal is said by the fallback
                # lines (the device's and each rule's): at most three.
                n_ok = {"refuse": (1,), "accept": (0,), "either": (0, 1), "any": (0, 1, 2, 3)}[expect]
                if len(msgs) not in n_ok:
                    return self.say_fail(name, "%d ldshim lines, expected %s: %s" % (len(msgs), " or ".join(map(str, n_ok)),
                                                                                    " | ".join(msgs)[:400]))
                if "\x1b" in err:
                    return self.say_fail(name, "an escape character reached stderr")
            else:
                lines = [l for l in err.splitlines() if l.strip() and not FAKE_PROBE_LINE.search(l)]
                refused = p.returncode == cell.refuse_rc
                if expect == "refuse" and (not refused or len(lines) != 1):
                    return self.say_fail(name, "exit %d and %d stderr lines, expected %d and one line: %s"
                                         % (p.returncode, len(lines), cell.refuse_rc, " | ".join(lines)[:300]))
                if expect == "accept" and (p.returncode not in (0, 1) or refused):
                    return self.say_fail(name, "exit %d: %s" % (p.returncode, " | ".join(lines)[:300]))
                if target in START_ENV_TARGETS and any(LDSHIM_LINE.search(l) for l in lines):
                    return self.say_fail(name, "a relative value must be ignored, silently: %s" % " | ".join(lines)[:300])
                if p.returncode < 0 or p.returncode > 3:
                    return self.say_fail(name, "exit %d: %s" % (p.returncode, " | ".join(lines)[:300]))
                if refused and len(lines) != 1:
                    return self.say_fail(name, "refused with %d stderr lines, expected one: %s"
                                         % (len(lines), " | ".join(lines)[:300]))
            self.passed += 1
            if self.a.verbose:
                print("ok %s (%.2f s)" % (name, took))
        finally:
            subprocess.run(["chmod", "-R", "u+rwx", tmp], stderr=subprocess.DEVNULL)
            shutil.rmtree(tmp, ignore_errors=True)

    # ---- the cells --------------------------------------------------------------------------
    def shim_cell(self, var, direction, extra):
        policies = os.path.join(ROOT, "tests", "fake", "policies")
        prog = os.path.join(self.fake, "t_runtime")

        def env(path, tmp):
            e = {"LD_LIBRARY_PATH": self.fake, "LD_PRELOAD": self.a.preload, "HOME": os.path.join(tmp, "aux"),
                 "LDSHIM_CACHE_DIR": os.path.join(tmp, "cache"), "XDG_CACHE_HOME": os.path.join(tmp, "xdg")}
            if var != "LDSHIM_REPORT":
                e["LDSHIM_REPORT"] = os.path.join(tmp, "aux", "r.json")
            for k, v in extra.items():
                if v is None:          # unset: the default the variable under test feeds
                    e[k] = None
                    continue
                if v == "@emulated":
                    v = os.path.join(policies, "emulated.policy")
                elif v == "@fake-mps-control":
                    v = os.path.join(ROOT, "tests", "mlopart", "fake-mps-control")
                e[k] = v
            if extra.get("LDSHIM_BACKEND") == "mlopart":
                e.setdefault("LDSHIM_MLOPART_HELPER", os.path.join(self.build, "ldshim-mlopart-helper"))
                e.setdefault("LDSHIM_MPS_CONTROL", os.path.join(ROOT, "tests", "mlopart", "fake-mps-control"))
            e[var] = path
            return e
        expect = "any" if var in SAFETY_ONLY else None
        if var in MAY_BE_SILENT:
            expect = "either"
        # Test-audience inputs of the MLOPart backend: a refused helper or control program
        # falls back (one line); one the backend never reaches is silent.
        if var in ("LDSHIM_MLOPART_HELPER", "LDSHIM_MPS_CONTROL", "LDSHIM_MLOPART_DEBUG_LOGS"):
            expect = "any"
        return Cell("shim %s (%s)" % (var, direction), direction, expect, lambda path: [prog, "alloc", "8MiB"],
                    env, 0, True, TARGETS + (START_ENV_TARGETS if var in START_ENV else []))

    def tool_cell(self, row):
        tool, flag, direction, template = row
        exe = os.path.join(self.bin, tool)

        def command(path):
            q = "'" + path.replace("'", "'\\''") + "'"
            words, out, done = template.split(" "), [], False
            for w in words:          # the tool word becomes the build's copy
                if not done and "=" not in w:
                    w, done = "'" + exe + "'", True
                out.append(w)
            return " ".join(out).replace("{PATH}", q)

        def env(path, tmp):
            # The fake driver for tools that look for a GPU (ldshim-probe --cache-dir).
            return {"XDG_CACHE_HOME": os.path.join(tmp, "xdg"), "HOME": tmp, "LD_LIBRARY_PATH": self.fake}
        start_env = flag in START_ENV
        return Cell("%s %s (%s)" % (tool, flag, direction), direction, "either" if start_env else None, command, env,
                    REFUSE_STATUS.get(tool, 2), False, TARGETS + (START_ENV_TARGETS if start_env else []))

    def main(self):
        cells = []
        # (a) the options table's path variables
        for var in self.path_vars():
            if var not in SHIM_EXERCISES:
                self.say_fail("coverage", "%s is a path variable of the options table without an exercise in "
                              "tests/hostile/run_matrix.py (SHIM_EXERCISES)" % var)
                continue
            direction, extra = SHIM_EXERCISES[var]
            cells.append(self.shim_cell(var, direction, extra))
        # (b) the registry, and every tool's --help against it
        rows = self.registry()
        registered = {(r[0], r[1]) for r in rows}
        tools = sorted(f for f in os.listdir(self.bin) if os.access(os.path.join(self.bin, f), os.X_OK)
                       and not f.startswith("."))
        for tool in tools:
            for flag in sorted(self.help_path_inputs(tool)):
                if (tool, flag) not in registered:
                    self.say_fail("coverage", "%s --help shows the path input %s, which tools/path_flags.tsv lacks"
                                  % (tool, flag))
        for r in rows:
            if r[0] not in tools:
                self.say_fail("coverage", "tools/path_flags.tsv names %s, which is not in %s" % (r[0], self.bin))
                continue
            cells.append(self.tool_cell(r))
        n = 0
        for c in cells:
            for t in c.targets:
                n += 1
                self.run_cell(c, t)
        print("test-hostile: %d inputs (%d path variables, %d registry rows) x %d targets (+1 for XDG_CACHE_HOME, HOME) = %d cells: "
              "%d passed, %d failed, %d skipped%s" % (len(cells), len(cells) - len(rows), len(rows), len(TARGETS), n,
                                                      self.passed, self.failed, self.skipped,
                                                      "" if self.root_user else " (not root: other-user cells skipped)"))
        print("test-hostile: safety only on the fake driver (it never measures, so nothing is dumped): %s"
              % ", ".join(sorted(SAFETY_ONLY)))
        if self.a.result:
            with open(self.a.result, "w") as f:
                f.write("%d %d\n" % (self.passed, self.failed))
        if self.a.figures:
            import json
            with open(self.a.figures, "w") as f:
                json.dump({"hostile_cells": n, "hostile_inputs": len(cells), "hostile_targets": len(TARGETS),
                           "hostile_passed": self.passed, "hostile_failed": self.failed,
                           "hostile_skipped": self.skipped}, f)
        return 0 if self.failed == 0 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--preload", help="LD_PRELOAD value for the shim cells (default BUILD/libldshim.so)")
    ap.add_argument("--result")
    ap.add_argument("--registry", default=os.path.join(ROOT, "tools", "path_flags.tsv"))
    ap.add_argument("--bin", help="the tools' directory (default BUILD/bin)")
    ap.add_argument("--figures", help="write the cell counts as JSON here")
    ap.add_argument("--san", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    if not a.preload:
        a.preload = os.path.join(os.path.abspath(a.build), "libldshim.so")
    return Matrix(a).main()


if __name__ == "__main__":
    sys.exit(main())
