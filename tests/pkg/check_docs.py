#!/usr/bin/env python3
"""check_docs.py — run the shell commands of README.md and doc/*.md (suite test-docs).

    python3 tests/pkg/check_docs.py [--result FILE] [--list] [--only REGEX] [FILE.md ...]

Commands are found in the files when the check runs, so it follows whatever the documents
say today:
  ```sh / ```bash / ```shell   every line is a command ('\\' continues it; '#' lines are
                               comments); an `export`, `cd` or VAR=value line also applies to
                               the commands after it in the same block
  ```console                   lines starting with '$ ' are commands; the lines after one are
                               its expected stdout, a '...' line standing for any lines
  ``` (no language)            must not look like commands: such a block fails the check
                               until it is marked ```sh (or ```text for output)
  other languages              (ini, c, python, text, ...) are not run
Each command runs with bash from the top of a scratch copy of the checkout (its entries
linked, so `make` builds into the real build/ and files a command writes stay out of the
tree), with no LDSHIM_* variable and a PATH that holds none of the project's tools: a
document that uses a bare `ldshim-ab` must show the PATH step. It must exit 0.

A command that cannot run here is listed in tests/pkg/doc_exceptions.txt with its reason
(a GPU, a package install, a step the reader does first, ...): printed as "skip", never run.
Result: "<passed> <failed>" (one per command run, one per document for its untyped blocks).
"""
import argparse
import fnmatch
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXCEPTIONS = os.path.join(HERE, "doc_exceptions.txt")
SHELL_LANGS = {"sh", "bash", "shell"}
CONSOLE_LANGS = {"console", "shell-session", "sh-session"}
TOOLS = ("ldshim-ab", "ldshim-policy", "ldshim-probe")
TIMEOUT = int(os.environ.get("DOC_CHECK_TIMEOUT", "600"))
# The first word of a line that reads as a shell command (for untyped blocks).
COMMANDISH = re.compile(r"^(\$ |make\b|python3?\b|pip3?\b|sh\b|bash\b|cd\b|export\b|apt-get\b|sudo\b|git\b|"
                        r"ldshim-[a-z]+\b|(build|tools|tests|bench|\.)/\S|[A-Z_][A-Z0-9_]*=\S*\s)")
STATE = re.compile(r"^(export\s|cd(\s|$)|set\s|[A-Za-z_][A-Za-z0-9_]*=\S*$)")


class Command:
    def __init__(self, doc, line, text, kind, expected=None, prelude=()):
        self.doc, self.line, self.text, self.kind = doc, line, text, kind
        self.expected = expected          # console: expected stdout lines, or None
        self.prelude = list(prelude)      # earlier export/cd lines of the block

    def where(self):
        return "%s:%d" % (self.doc, self.line)


def blocks(path):
    """(language, first line number, [lines]) of every fenced code block."""
    out, cur = [], None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = re.match(r"^\s*(```|~~~)\s*([A-Za-z0-9_+-]*)", line)
            if m and cur is None:
                cur = (m.group(1), m.group(2).lower(), n + 1, [])
            elif cur is not None and line.strip().startswith(cur[0]):
                out.append(cur[1:])
                cur = None
            elif cur is not None:
                cur[3].append(line.rstrip("\n"))
    return out


def logical_lines(first, lines):
    """(line number, text) with backslash continuations joined; a line that continues nothing
    keeps its indentation (console output is compared as printed)."""
    out, buf, start = [], [], None
    for i, ln in enumerate(lines):
        if start is None:
            start = first + i
        if ln.rstrip().endswith("\\"):
            buf.append(ln.rstrip()[:-1].strip())
            continue
        if buf:
            out.append((start, " ".join(buf + [ln.strip()])))
        else:
            out.append((start, ln.rstrip()))
        buf, start = [], None
    if buf:
        out.append((start, " ".join(buf)))
    return out


def commands(doc, path):
    """The commands of one document, and the problems of its untyped blocks."""
    cmds, problems = [], []
    for lang, first, lines in blocks(path):
        if lang in SHELL_LANGS:
            prelude = []
            for n, text in logical_lines(first, lines):
                text = text.strip()
                if not text or text.startswith("#"):
                    continue
                cmds.append(Command(doc, n, text, "sh", prelude=prelude))
                if STATE.match(text):
                    prelude = prelude + [text]
        elif lang in CONSOLE_LANGS:
            cur = None
            for n, text in logical_lines(first, lines):
                if text.startswith("$ "):
                    cur = Command(doc, n, text[2:].strip(), "console", expected=[])
                    cmds.append(cur)
                elif cur is not None:
                    cur.expected.append(text)
        elif lang == "":
            for n, text in logical_lines(first, lines):
                if COMMANDISH.match(text.strip()):
                    problems.append("%s:%d: a code block without a language holds what looks like a "
                                    "command (%r): mark it ```sh to have it checked, or ```text if it "
                                    "is output" % (doc, n, text.strip()[:60]))
                    break
    return cmds, problems


def load_exceptions(path=EXCEPTIONS):
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            parts = line.split(None, 2)
            if len(parts) != 3:
                raise SystemExit("%s:%d: expected KIND FILE-GLOB REGEX" % (path, n))
            kind, pattern, regex = parts
            try:
                out.append({"kind": kind, "glob": pattern, "re": re.compile(regex), "line": n, "used": 0})
            except re.error as e:
                raise SystemExit("%s:%d: bad regex: %s" % (path, n, e))
    return out


def exception_for(cmd, excs):
    for e in excs:
        if fnmatch.fnmatch(cmd.doc, e["glob"]) and e["re"].search(cmd.text):
            e["used"] += 1
            return e
    return None


def scratch_tree():
    """A directory whose entries link to the checkout's top-level entries."""
    d = tempfile.mkdtemp(prefix="ldshim-docs.")
    for name in os.listdir(ROOT):
        os.symlink(os.path.join(ROOT, name), os.path.join(d, name))
    return d


def clean_path(path):
    """PATH without any directory that holds one of the project's tools."""
    keep = [p for p in path.split(os.pathsep)
            if p and not any(os.path.exists(os.path.join(p, t)) for t in TOOLS)]
    return os.pathsep.join(keep)


def command_env(scratch):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LDSHIM_", "MAKE", "PKG_")) and k not in ("MFLAGS", "LD_PRELOAD", "LDMOE_LIB")}
    env["PATH"] = clean_path(env.get("PATH", "/usr/bin:/bin"))
    env["PWD"] = scratch
    # the scratch tree is no git checkout: make would embed "unknown" into the tools
    if os.environ.get("PKG_GIT_REVISION"):
        env["GIT_REVISION"] = os.environ["PKG_GIT_REVISION"]
    return env


def matches(expected, got):
    """Do the console block's expected lines match the output ('...' = any lines)?"""
    def rec(i, j):
        if i == len(expected):
            return j == len(got)
        if expected[i].strip() == "...":
            return any(rec(i + 1, k) for k in range(j, len(got) + 1))
        return j < len(got) and expected[i].rstrip() == got[j].rstrip() and rec(i + 1, j + 1)
    return rec(0, 0)


def run_command(cmd, scratch, env):
    script = "\n".join(cmd.prelude + [cmd.text]) + "\n"
    try:
        r = subprocess.run(["bash", "-c", script], cwd=scratch, env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                           timeout=TIMEOUT, start_new_session=True)
    except subprocess.TimeoutExpired:
        return "timed out after %d s" % TIMEOUT, "", ""
    if r.returncode != 0:
        return "exit status %d" % r.returncode, r.stdout, r.stderr
    if cmd.expected:
        got = r.stdout.rstrip("\n").split("\n") if r.stdout else []
        if not matches(cmd.expected, got):
            return "stdout differs from the document", r.stdout, r.stderr
    return None, r.stdout, r.stderr


def main(argv=None):
    ap = argparse.ArgumentParser(prog="check_docs.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--result", help='write "<passed> <failed>" here')
    ap.add_argument("--list", action="store_true", help="list the commands and what would happen")
    ap.add_argument("--only", help="run only commands matching this regex")
    ap.add_argument("docs", nargs="*", help="documents (default README.md doc/*.md)")
    a = ap.parse_args(argv)
    docs = a.docs or ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "doc", "*.md")))
    excs = load_exceptions()
    passed = failed = skipped = 0
    scratch = scratch_tree()
    env = command_env(scratch)
    try:
        for doc in docs:
            cmds, problems = commands(doc, os.path.join(ROOT, doc))
            if problems:
                failed += 1
                for p in problems:
                    print("FAIL " + p)
            else:
                passed += 1
            for cmd in cmds:
                if a.only and not re.search(a.only, cmd.text):
                    continue
                e = exception_for(cmd, excs)
                if e:
                    skipped += 1
                    print("skip %s [%s] %s" % (cmd.where(), e["kind"], cmd.text[:100]))
                    continue
                if a.list:
                    print("run  %s %s" % (cmd.where(), cmd.text[:100]))
                    continue
                why, out, err = run_command(cmd, scratch, env)
                if why is None:
                    passed += 1
                    print("ok   %s %s" % (cmd.where(), cmd.text[:100]))
                else:
                    failed += 1
                    print("FAIL %s %s: %s" % (cmd.where(), cmd.text[:100], why))
                    if cmd.expected is not None and why.startswith("stdout"):
                        print("     expected:\n" + "".join("       | %s\n" % x for x in cmd.expected), end="")
                    for name, text in (("stdout", out), ("stderr", err)):
                        tail = [ln for ln in text.splitlines() if ln.strip()][-12:]
                        if tail:
                            print("     %s:\n" % name + "".join("       | %s\n" % x for x in tail), end="")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if not a.only and not a.docs:
        for e in excs:
            if not e["used"]:
                print("note: %s:%d matches no command any more (%s %s %s): remove it"
                      % (os.path.relpath(EXCEPTIONS, ROOT), e["line"], e["kind"], e["glob"], e["re"].pattern))
    print("test-docs: %d passed, %d failed (%d commands excepted: %s)"
          % (passed, failed, skipped, os.path.relpath(EXCEPTIONS, ROOT)))
    if a.result:
        with open(a.result, "w") as f:
            f.write("%d %d\n" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
