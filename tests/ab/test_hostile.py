"""ldshim-ab against a hostile local user: the reproductions of issue 41 (High 1, 5, 6; Medium
1, 2; Low) as regression tests, and every path flag of the tool (tools/path_flags.tsv, checked
against --help) crossed with hostile targets: a link planted to a victim file (planted by
`nobody` where runuser works, which the test says when it does not), a dangling link, a FIFO,
/dev/zero, a directory, a 10 GiB sparse file, an unwritable directory, a world-writable
directory without the sticky bit, a path of more than 4 KiB. Every cell asserts that the tool
finishes within its timeout, the victim is byte-identical, nothing was created where it should
not be, and a refusal is one clear line on stderr with exit 2.

The tool under test is tools/ldshim-ab; with AB_BUILT_TOOL (tools/ab.mk sets it) the built
copy, which carries the file layer inlined, gets the same cells."""
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
TOOL = os.path.join(ROOT, "tools", "ldshim-ab")
REGISTRY = os.path.join(ROOT, "tools", "path_flags.tsv")
CELL_TIMEOUT = 60
COMMON = ["--no-preload", "--states", "stock", "--runs", "1", "--warmup", "0"]


def tools():
    t = [("checkout", TOOL)]
    built = os.environ.get("AB_BUILT_TOOL")
    if built:
        t.append(("built", built))
    return t


def run_tool(tool, args, cwd=None, timeout=CELL_TIMEOUT, env=None):
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, tool] + list(args), capture_output=True, cwd=cwd,
                       timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    r.elapsed = time.monotonic() - t0
    return r


def as_nobody(argv):
    """argv run as user nobody when this process may switch users, else None."""
    if os.geteuid() != 0 or not shutil.which("runuser"):
        return None
    r = subprocess.run(["runuser", "-u", "nobody", "--"] + argv, capture_output=True)
    return r.returncode == 0


class HostileCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ab-hostile-")
        os.chmod(self.tmp, 0o755)
        self.victim = os.path.join(self.tmp, "victim")
        with open(self.victim, "wb") as f:
            f.write(b"root's secret\n")
        os.chmod(self.victim, 0o600)
        self.pids = []

    def tearDown(self):
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        subprocess.run(["rm", "-rf", self.tmp])

    def victim_intact(self):
        with open(self.victim, "rb") as f:
            self.assertEqual(f.read(), b"root's secret\n")
        self.assertEqual(os.stat(self.victim).st_mode & 0o7777, 0o600)

    def refused(self, r, *expect):
        """exit 2, one line on stderr starting 'ldshim-ab: ', holding each of `expect`, no
        raw control character, nothing on stdout."""
        err = r.stderr.decode("utf-8", "replace")
        self.assertEqual(r.returncode, 2, err)
        lines = err.splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertTrue(lines[0].startswith("ldshim-ab: "), lines[0])
        for e in expect:
            self.assertIn(e, lines[0])
        self.assertNotRegex(err, r"[\x00-\x08\x0b-\x1f\x7f]")
        self.assertEqual(r.stdout, b"")
        return lines[0]

    def tree(self, d):
        out = []
        for base, dirs, files in os.walk(d):
            out += [os.path.relpath(os.path.join(base, x), d) for x in dirs + files]
        return sorted(out)


# ----------------------------------------------------------------------------- High 1

class TestOutDir(HostileCase):
    """High 1: --out DIR follows links planted in DIR; the default name is predictable."""

    def plant(self, d):
        """The issue's links in `d`, planted by nobody when possible. Returns who planted."""
        links = {".ldshim-ab-write-test": self.victim,
                 "runs.csv": os.path.join(self.tmp, "new"),
                 "runs.json.tmp.%d" % 12345: self.victim,
                 "plot.svg": os.path.join(self.tmp, "new-svg")}
        who = "nobody"
        for name, target in links.items():
            ok = as_nobody(["ln", "-s", target, os.path.join(d, name)])
            if not ok:
                who = "root (runuser unavailable: the links are planted by this user)"
                if not os.path.lexists(os.path.join(d, name)):
                    os.symlink(target, os.path.join(d, name))
        return who

    def test_world_writable_out_with_planted_links_is_refused(self):
        for label, tool in tools():
            with self.subTest(tool=label):
                d = os.path.join(self.tmp, "sh-" + label)
                os.mkdir(d)
                os.chmod(d, 0o777)
                who = self.plant(d)
                before = self.tree(d)
                r = run_tool(tool, COMMON + ["--out", d, "--", "true"])
                self.refused(r, "writable by group and others", d)
                self.victim_intact()
                self.assertEqual(self.tree(d), before, who)
                self.assertFalse(os.path.lexists(os.path.join(self.tmp, "new")))
                self.assertFalse(os.path.lexists(os.path.join(self.tmp, "new-svg")))

    def test_sticky_tmp_like_dir_and_group_writable_refused(self):
        for mode, why in ((0o1777, "writable by group and others"), (0o775, "writable by group")):
            d = os.path.join(self.tmp, "m%o" % mode)
            os.mkdir(d)
            os.chmod(d, mode)
            r = run_tool(TOOL, COMMON + ["--out", d, "--", "true"])
            self.refused(r, why)
            self.assertEqual(os.listdir(d), [])

    def test_directory_of_another_user_refused(self):
        if os.geteuid() != 0:
            sys.stderr.write("test_directory_of_another_user_refused: not root, so no directory "
                             "of another user can be made; the owner check is not exercised\n")
            return
        d = os.path.join(self.tmp, "theirs")
        os.mkdir(d, 0o755)
        os.chown(d, 65534, 65534)
        r = run_tool(TOOL, COMMON + ["--out", d, "--", "true"])
        self.refused(r, "belongs to uid 65534")
        self.assertEqual(os.listdir(d), [])

    def test_own_dir_with_links_at_result_names(self):
        """In the user's own directory a link at a result name counts as an earlier result
        (refused); --force removes the link itself, never its target; results are 0644."""
        d = os.path.join(self.tmp, "mine")
        os.mkdir(d, 0o755)
        os.symlink(self.victim, os.path.join(d, "runs.csv"))
        os.symlink(os.path.join(self.tmp, "new"), os.path.join(d, "plot.svg"))
        os.symlink(self.victim, os.path.join(d, "runs.json.tmp.%d" % 4242))
        r = run_tool(TOOL, COMMON + ["--out", d, "--", "true"])
        self.refused(r, "already holds results")
        r = run_tool(TOOL, COMMON + ["--out", d, "--force", "--", "true"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.victim_intact()
        self.assertFalse(os.path.lexists(os.path.join(self.tmp, "new")))
        for f in ("runs.csv", "runs.jsonl", "runs.json", "summary.json", "plot.svg"):
            st = os.lstat(os.path.join(d, f))
            self.assertTrue(os.path.isfile(os.path.join(d, f)) and not os.path.islink(os.path.join(d, f)), f)
            self.assertEqual(st.st_mode & 0o777, 0o644 & ~_umask(), f)
        # not ours: a stray link under an unrelated name stays, untouched
        self.assertTrue(os.path.islink(os.path.join(d, "runs.json.tmp.4242")))

    def test_link_as_out_itself_refused(self):
        real = os.path.join(self.tmp, "real")
        os.mkdir(real, 0o755)
        ln = os.path.join(self.tmp, "ln")
        os.symlink(real, ln)
        r = run_tool(TOOL, COMMON + ["--out", ln, "--", "true"])
        self.refused(r, "symbolic link")
        self.assertEqual(os.listdir(real), [])

    def test_default_name_is_not_predictable(self):
        cwd = os.path.join(self.tmp, "cwd")
        os.mkdir(cwd, 0o755)
        # what an attacker would pre-create under the old scheme, for this second and the next
        for dt in range(0, 4):
            os.mkdir(os.path.join(cwd, time.strftime("ldshim-ab-%Y%m%d-%H%M%S",
                                                     time.localtime(time.time() + dt))))
        pre = set(os.listdir(cwd))
        r = run_tool(TOOL, COMMON + ["--", "true"], cwd=cwd)
        self.assertEqual(r.returncode, 0, r.stderr)
        new = sorted(set(os.listdir(cwd)) - pre)
        self.assertEqual(len(new), 1, new)
        self.assertRegex(new[0], r"^ldshim-ab-\d{8}-\d{6}-[0-9a-f]{16}$")
        for p in pre:
            self.assertEqual(os.listdir(os.path.join(cwd, p)), [])
        self.assertIn(b"results: " + os.path.join(cwd, new[0]).encode(), r.stdout)


def _umask():
    m = os.umask(0)
    os.umask(m)
    return m


# ----------------------------------------------------------------------------- High 5, Medium 2

class TestTimeouts(HostileCase):
    def test_grandchild_in_its_own_session_does_not_stall(self):
        """High 5: `--timeout 2 -- sh -c 'setsid sleep 777 & echo hi'` must end."""
        pidf = os.path.join(self.tmp, "pid")
        out = os.path.join(self.tmp, "o")
        cmd = ["sh", "-c", "setsid sleep 777 & echo $! > %s; echo hi" % pidf]
        r = run_tool(TOOL, COMMON + ["--timeout", "2", "--out", out, "--"] + cmd, timeout=30)
        with open(pidf) as f:
            self.pids.append(int(f.read()))
        self.assertLess(r.elapsed, 15)
        self.assertIn(r.returncode, (0, 1), r.stderr)
        with open(os.path.join(out, "runs.json")) as f:
            rec = json.load(f)[0]
        self.assertTrue(rec["status"] == "timeout after 2s" or "note" in rec, rec)

    def test_leftover_holding_the_pipe_without_timeout(self):
        """Even with --timeout 0 (none) a leftover that holds the pipe cannot stall the tool:
        the pipes are closed a grace period after the program exited, and the run says so."""
        pidf = os.path.join(self.tmp, "pid")
        out = os.path.join(self.tmp, "o")
        cmd = ["sh", "-c", "setsid sleep 777 & echo $! > %s; echo hi" % pidf]
        r = run_tool(TOOL, COMMON + ["--timeout", "0", "--out", out, "--"] + cmd, timeout=30)
        with open(pidf) as f:
            self.pids.append(int(f.read()))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertLess(r.elapsed, 15)
        with open(os.path.join(out, "runs.json")) as f:
            rec = json.load(f)[0]
        self.assertEqual(rec["status"], "ok")
        self.assertIn("held its output open", rec["note"])
        self.assertLess(rec["wall_s"], 1.5)          # the program's time, not the grace
        self.assertIn(b"held its output open", r.stdout)

    def test_hung_runs_time_out_group_killed_and_the_next_goes_on(self):
        out = os.path.join(self.tmp, "o")
        pidf = os.path.join(self.tmp, "pids")
        cmd = ["sh", "-c", "sleep 1000 & echo $! >> %s; sleep 1000" % pidf]
        r = run_tool(TOOL, ["--no-preload", "--states", "stock", "--runs", "2", "--warmup", "0",
                            "--timeout", "1", "--out", out, "--"] + cmd, timeout=30)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertLess(r.elapsed, 15)
        with open(os.path.join(out, "runs.json")) as f:
            recs = json.load(f)
        self.assertEqual([x["status"] for x in recs], ["timeout after 1s"] * 2)
        self.assertEqual([x["exit_code"] for x in recs], [None, None])
        with open(pidf) as f:
            pids = [int(x) for x in f.read().split()]
        self.pids += pids
        self.assertEqual(len(pids), 2)
        time.sleep(0.2)
        for pid in pids:                       # the background sleep of each run's group is gone
            self.assertFalse(_alive(pid), pid)

    def test_default_timeout_is_stated_and_bounded(self):
        """Medium 2: without --timeout a run is bounded (DEFAULT_TIMEOUT), --help says what
        happens to a program that never ends, and --timeout 0 means none."""
        r = run_tool(TOOL, ["--help"])
        text = " ".join(r.stdout.decode().split())
        self.assertIn("--timeout SECONDS seconds per run (default 3600): a run past it is "
                      "killed with its whole process group", text)
        self.assertIn("0: no limit, so a program that never ends keeps ldshim-ab waiting "
                      "until Ctrl-C", text)
        import importlib.machinery
        import importlib.util
        loader = importlib.machinery.SourceFileLoader("ab_hostile_tool", TOOL)
        spec = importlib.util.spec_from_loader("ab_hostile_tool", loader)
        ab = importlib.util.module_from_spec(spec)
        loader.exec_module(ab)
        p = ab.build_parser()
        base = ["--dry-run", "--no-preload", "--", "true"]
        self.assertEqual(ab.validate(p.parse_args(base))["timeout"], ab.DEFAULT_TIMEOUT)
        self.assertEqual(ab.DEFAULT_TIMEOUT, 3600.0)
        self.assertIsNone(ab.validate(p.parse_args(["--timeout", "0"] + base))["timeout"])
        for bad in ("-1", "nan", "inf"):
            with self.assertRaises(ab.UsageError):
                ab.validate(p.parse_args(["--timeout", bad] + base))


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(") ")[-1].split()[0] != "Z"
    except OSError:
        return False


# ----------------------------------------------------------------------------- High 6

class TestHistogramInput(HostileCase):
    """High 6: --histogram reads /dev/zero until killed, hangs on a FIFO, reads a 10 GiB
    sparse file whole."""

    def test_special_and_huge_files_refused_fast(self):
        fifo = os.path.join(self.tmp, "fifo")
        os.mkfifo(fifo)
        sparse = os.path.join(self.tmp, "sparse")
        with open(sparse, "wb") as f:
            f.truncate(10 << 30)
        longline = os.path.join(self.tmp, "longline.json")
        with open(longline, "wb") as f:
            f.write(b'{"x": "' + b"a" * (2 << 20) + b'"}\n')
        dangling = os.path.join(self.tmp, "dangling")
        os.symlink(os.path.join(self.tmp, "nowhere"), dangling)
        cases = [(fifo, "is a FIFO"), ("/dev/zero", "is a character device"),
                 (sparse, "is 10737418240 bytes, more than the 67108864"),
                 (self.tmp, "is a directory"), (dangling, "No such file"),
                 (longline, "line longer than 1048576 bytes"),
                 (os.path.join(self.tmp, "d" * 4200), "path longer than 4095 bytes")]
        for label, tool in tools():
            for path, why in cases:
                with self.subTest(tool=label, path=path[:80]):
                    r = run_tool(tool, ["--histogram", path], timeout=20)
                    self.assertLess(r.elapsed, 10)
                    self.refused(r, why)
        self.assertFalse(os.path.lexists(os.path.join(self.tmp, "nowhere")))

    def test_link_to_a_report_is_read(self):
        """A read follows a link the user names (the target must still be a bounded regular
        file); reading never changes it."""
        rep = os.path.join(self.tmp, "r.json")
        with open(rep, "w") as f:
            json.dump({"untagged": {"histogram": [{"size": 1 << 20, "count": 2,
                                                   "api": "runtime"}]}}, f)
        os.symlink(rep, os.path.join(self.tmp, "ln.json"))
        r = run_tool(TOOL, ["--histogram", os.path.join(self.tmp, "ln.json")])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b"1048576", r.stdout)


# ----------------------------------------------------------------------------- Medium 1

class TestBoundedOutput(HostileCase):
    def test_one_gib_line(self):
        """Medium 1: a 1 GiB output line drove the tool to 4.2 GB RSS and a 1 GiB runs.json.
        Now: RSS stays small, runs.json stays small, and the metric on the next line is
        still found."""
        out = os.path.join(self.tmp, "o")
        prog = ("head -c 1073741824 /dev/zero | tr '\\0' x; echo; "
                "echo 'decode: 5.5 ms/step'; head -c 1073741824 /dev/zero | tr '\\0' y >&2")
        wrapper = ("import resource, subprocess, sys\n"
                   "r = subprocess.run(sys.argv[1:])\n"
                   "print('MAXRSS_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
                   "sys.exit(r.returncode)\n")
        r = subprocess.run([sys.executable, "-c", wrapper, sys.executable, TOOL] + COMMON
                           + ["--metric", r"decode: ([0-9.]+) ms/step", "--lower-is-better",
                              "--out", out, "--", "sh", "-c", prog],
                           capture_output=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        rss = int(re.search(rb"MAXRSS_KB (\d+)", r.stdout).group(1))
        self.assertLess(rss, 200 * 1024, "ldshim-ab peaked at %d KiB" % rss)
        for f in ("runs.json", "runs.jsonl", "runs.csv", "summary.json"):
            self.assertLess(os.path.getsize(os.path.join(out, f)), 64 << 10, f)
        with open(os.path.join(out, "runs.json")) as f:
            rec = json.load(f)[0]
        self.assertEqual(rec["figure"], 5.5)
        self.assertEqual(rec["output_bytes"], [(1 << 30) + 1 + 20, 1 << 30])
        self.assertEqual(rec["long_lines"], 2)
        self.assertTrue(rec["stdout_tail"][0].endswith("[line cut]"))
        self.assertLessEqual(len(rec["stdout_tail"][0]), 1100)

    def test_runs_are_appended_not_rewritten(self):
        """runs.jsonl grows one line per run in place (same inode), runs.json is written once
        at the end, and a SIGKILLed tool leaves every finished run readable."""
        out = os.path.join(self.tmp, "o")
        p = subprocess.Popen([sys.executable, TOOL, "--no-preload", "--states", "stock",
                              "--runs", "50", "--warmup", "0", "--out", out, "--",
                              "sleep", "0.1"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        try:
            jl = os.path.join(out, "runs.jsonl")
            seen = {}
            deadline = time.time() + 60
            while time.time() < deadline and len(seen) < 2:
                try:
                    with open(jl, "rb") as f:
                        n = f.read().count(b"\n")
                    if n in (2, 5) and n not in seen:
                        seen[n] = os.stat(jl).st_ino
                        self.assertFalse(os.path.exists(os.path.join(out, "runs.json")))
                except FileNotFoundError:
                    pass
                time.sleep(0.01)
            self.assertEqual(sorted(seen), [2, 5])
            self.assertEqual(seen[2], seen[5])
        finally:
            p.kill()
            p.wait()
        with open(jl) as f:
            recs = [json.loads(x) for x in f]
        self.assertGreaterEqual(len(recs), 5)
        self.assertEqual([x["position"] for x in recs], list(range(1, len(recs) + 1)))
        with open(os.path.join(out, "runs.csv")) as f:
            self.assertGreaterEqual(len(list(csv.reader(f))), len(recs) + 1)


# ----------------------------------------------------------------------------- Low

class TestEscapes(HostileCase):
    ESC = "\x1b]0;owned\x07\x1b[2J\x1b[31m"

    def test_failed_runs_stderr_and_file_names_are_escaped(self):
        out = os.path.join(self.tmp, "o" + self.ESC)
        cmd = ["sh", "-c", "printf 'bad \\033]0;owned\\007\\033[31mred\\n' >&2; exit 3"]
        r = run_tool(TOOL, COMMON + ["--out", out, "--"] + cmd)
        self.assertEqual(r.returncode, 1, r.stderr)
        for stream in (r.stdout, r.stderr):
            self.assertNotIn(b"\x1b", stream)
            self.assertNotIn(b"\x07", stream)
        self.assertIn(b"| bad \\x1b]0;owned\\x07\\x1b[31mred", r.stdout)
        self.assertIn(b"results: " + os.path.join(self.tmp, "o").encode() + b"\\x1b]0;owned",
                      r.stdout)
        r = run_tool(TOOL, ["--histogram", os.path.join(self.tmp, "r" + self.ESC)])
        self.refused(r, "\\x1b[2J")
        r = run_tool(TOOL, COMMON + ["--out", os.path.join(self.tmp, "o2"), "--",
                                     "./no" + self.ESC + "\u202eprog"])
        self.refused(r, "command not found: ./no\\x1b]0;owned\\x07\\x1b[2J\\x1b[31m\\u202eprog")


# ----------------------------------------------------------------------------- the matrix

def registry_rows():
    """(flag, direction, template) of ldshim-ab in tools/path_flags.tsv."""
    with open(REGISTRY) as f:
        lines = f.read().splitlines()
    assert lines[0].split("\t") == ["tool", "flag", "direction", "template"], lines[0]
    rows = []
    for ln in lines[1:]:
        if not ln.strip() or ln.startswith("#"):
            continue
        tool, flag, direction, template = ln.split("\t")
        if tool == "ldshim-ab":
            rows.append((flag, direction, template))
    return rows


class TestPathMatrix(HostileCase):
    """Each path flag of ldshim-ab crossed with the hostile targets."""

    def test_registry_lists_every_path_flag_of_help(self):
        r = run_tool(TOOL, ["--help"])
        text = r.stdout.decode()
        in_help = set(re.findall(r"^\s+(--[a-z-]+) (?:FILE|DIR)\b", text, re.M))
        self.assertEqual(in_help, {"--out", "--policy", "--shim", "--histogram",
                                   "--preload-prefix"})
        self.assertEqual({f for f, _, _ in registry_rows()}, in_help)

    TARGETS = ("planted link to victim", "dangling link", "FIFO", "/dev/zero", "directory",
               "10 GiB sparse file", "unwritable directory",
               "world-writable dir, no sticky bit", "4 KiB+ path")

    def make_targets(self, t):
        """name -> path of each hostile target, made fresh under `t`."""
        os.mkdir(t, 0o755)
        fifo = os.path.join(t, "fifo")
        os.mkfifo(fifo)
        sparse = os.path.join(t, "sparse")
        with open(sparse, "wb") as f:
            f.truncate(10 << 30)
        link = os.path.join(t, "link")
        os.symlink(self.victim, link)
        dangling = os.path.join(t, "dangling")
        os.symlink(os.path.join(self.tmp, "created-by-tool"), dangling)
        adir = os.path.join(t, "adir")
        os.mkdir(adir, 0o755)
        ro = os.path.join(t, "ro")
        os.mkdir(ro, 0o555)
        ww = os.path.join(t, "ww")
        os.mkdir(ww)
        os.chmod(ww, 0o777)
        paths = [link, dangling, fifo, "/dev/zero", adir, sparse, os.path.join(ro, "x"),
                 os.path.join(ww, "x"), os.path.join(t, *(["d" * 200] * 21))]
        return dict(zip(self.TARGETS, paths))

    @staticmethod
    def expected(flag, direction, target):
        """'ok' where the tool may go on: an --out that names an empty directory of the user's
        own (or one root can create in a 0555 directory), a --policy that names a readable
        regular file through a link (the shim reads it; the victim stays as it is). Everything
        else is refused."""
        if direction == "dir":
            if target == "directory" or (target == "unwritable directory" and os.geteuid() == 0):
                return "ok"
            return "refused"
        if flag == "--policy" and target == "planted link to victim":
            return "ok"
        return "refused"

    def test_matrix(self):
        rows = registry_rows()
        cells = 0
        for label, tool in tools():
            for flag, direction, template in rows:
                for name in self.TARGETS:
                    with self.subTest(tool=label, flag=flag, target=name):
                        t = os.path.join(self.tmp, "t")
                        path = self.make_targets(t)[name]
                        cell_out = os.path.join(self.tmp, "cell-out")
                        argv = [a.replace("{PATH}", path) for a in template.split()][1:]
                        if flag not in ("--out", "--histogram"):
                            argv = ["--out", cell_out] + argv
                        before = self.tree(self.tmp)
                        r = run_tool(tool, argv, timeout=CELL_TIMEOUT)
                        cells += 1
                        self.assertLess(r.elapsed, CELL_TIMEOUT)
                        self.victim_intact()
                        new = [x for x in self.tree(self.tmp) if x not in before]
                        if self.expected(flag, direction, name) == "ok":
                            self.assertEqual(r.returncode, 0, r.stderr)
                            where = os.path.relpath(path if flag == "--out" else cell_out,
                                                    self.tmp)
                            stray = [x for x in new if x != where and not x.startswith(where + "/")]
                            self.assertEqual(stray, [])
                            self.assertTrue(os.path.isfile(os.path.join(self.tmp, where,
                                                                        "summary.json")))
                        else:
                            self.refused(r)
                            self.assertEqual(new, [])
                        subprocess.run(["rm", "-rf", t, cell_out])
        sys.stderr.write("ldshim-ab path matrix: %d cells (%d flags x %d targets x %d tools)\n"
                         % (cells, len(rows), len(self.TARGETS), len(tools())))
        self.assertEqual(cells, len(rows) * len(self.TARGETS) * len(tools()))
        self.assertGreaterEqual(cells, 45)


if __name__ == "__main__":
    unittest.main()
