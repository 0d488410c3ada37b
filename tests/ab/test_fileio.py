"""The Python file layer (python/ldshim_ab/fileio.py) and the rule that the project's Python
tools touch files only through it.

TestOnlyTheLayer reads every Python tool a user runs (PRODUCT below) and fails on any call that
opens, creates, replaces or removes a file by name outside the layer: open(), os.open,
Path.open / write_text / write_bytes, os.replace / rename / unlink / makedirs, shutil.rmtree,
tempfile, savefig(path), ... A new tool belongs in PRODUCT. python/ldshim_build.py is left out:
it is the PEP 517 backend, run by pip inside pip's own build directories, not by a user on
their files.

The other classes test the layer's promises directly: planted links, FIFOs, devices, size and
line caps, directory ownership and modes, modes of what it writes."""
import ast
import glob
import os
import stat
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
from ldshim_ab import fileio  # noqa: E402

PRODUCT = sorted(set(
    [os.path.join(ROOT, "tools", "ldshim-ab")]
    + glob.glob(os.path.join(ROOT, "tools", "*.py"))
    + glob.glob(os.path.join(ROOT, "bench", "ab", "*.py"))
    + [p for p in glob.glob(os.path.join(ROOT, "python", "ldshim_ab", "*.py"))
       if os.path.basename(p) != "fileio.py"]))

# Calls (dotted names as written) that touch a file by name.
FORBIDDEN = {
    "open", "io.open", "os.open", "os.fdopen", "codecs.open", "gzip.open", "bz2.open",
    "lzma.open", "tarfile.open", "zipfile.ZipFile", "os.replace", "os.rename", "os.renames",
    "os.mkdir", "os.makedirs", "os.unlink", "os.remove", "os.rmdir", "os.removedirs",
    "os.truncate", "os.mkfifo", "os.mknod", "os.symlink", "os.link", "os.chmod", "os.chown",
    "os.lchown", "shutil.rmtree", "shutil.copy", "shutil.copy2", "shutil.copyfile",
    "shutil.copytree", "shutil.move", "tempfile.mkstemp", "tempfile.mkdtemp",
    "tempfile.NamedTemporaryFile", "tempfile.TemporaryFile", "tempfile.TemporaryDirectory",
    "tempfile.SpooledTemporaryFile",
}
# Methods that touch a file by name whatever they are called on (pathlib-like objects; pathlib
# itself may not be imported, and str.replace is no file access, so rename/replace/unlink are
# left to the dotted names above).
FORBIDDEN_METHODS = {"write_text", "write_bytes", "touch", "symlink_to", "hardlink_to",
                     "link_to", "mkdir", "chmod", "lchmod"}
# The layer's own entry point that shares a method name with the above.
ALLOWED = {"fileio.OutDir.open", "ab.fileio.OutDir.open", "OutDir.open"}


def dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    elif isinstance(node, ast.Subscript):          # cfg["outdir"].write(...)
        parts.append(dotted(node.value) + "[]")
    else:
        parts.append("?")
    return ".".join(reversed(parts))


def violations(source, filename="<src>"):
    """[(line, text)] of file access outside the layer in Python `source`."""
    tree = ast.parse(source, filename)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(m == "pathlib" or m.startswith("pathlib.") for m in mods):
                out.append((node.lineno, "import pathlib"))
            continue
        if not isinstance(node, ast.Call):
            continue
        name = dotted(node.func)
        if name in ALLOWED:
            continue
        last = name.rsplit(".", 1)[-1]
        if name in FORBIDDEN:
            out.append((node.lineno, name + "()"))
        elif isinstance(node.func, ast.Attribute) and last == "open":
            out.append((node.lineno, name + "()"))
        elif isinstance(node.func, ast.Attribute) and last in FORBIDDEN_METHODS:
            out.append((node.lineno, name + "()"))
        elif last == "savefig" and not (node.args and isinstance(node.args[0], ast.Name)):
            out.append((node.lineno, "savefig(path)"))
    return sorted(out)


class TestOnlyTheLayer(unittest.TestCase):
    def test_checker_finds_what_it_must(self):
        src = ("import os, shutil\nfrom pathlib import Path\nopen('x')\nos.open('x', 0)\n"
               "Path('x').write_text('')\nPath('x').open()\nos.replace('a', 'b')\n"
               "shutil.rmtree('d')\nfig.savefig('p.png')\nos.makedirs('d')\n")
        got = [t for _, t in violations(src)]
        self.assertEqual(got, ["import pathlib", "open()", "os.open()", "?.write_text()",
                               "?.open()", "os.replace()", "shutil.rmtree()",
                               "savefig(path)", "os.makedirs()"])
        self.assertEqual(violations("fileio.OutDir.open(p)\noutdir.unlink('x')\n"
                                    "fig.savefig(buf)\nrdir.read_bytes('x', 1)\n"), [])

    def test_product_files_use_only_the_layer(self):
        self.assertIn(os.path.join(ROOT, "tools", "ldshim-ab"), PRODUCT)
        self.assertIn(os.path.join(ROOT, "bench", "ab", "per_domain.py"), PRODUCT)
        self.assertGreaterEqual(len(PRODUCT), 4)
        bad = []
        for path in PRODUCT:
            with open(path, encoding="utf-8") as f:       # the test's own read, not product code
                src = f.read()
            bad += ["%s:%d: %s" % (os.path.relpath(path, ROOT), ln, t)
                    for ln, t in violations(src, path)]
        self.assertEqual(bad, [], "file access outside python/ldshim_ab/fileio.py:\n"
                         + "\n".join(bad))


class LayerCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="fileio-test-")
        os.chmod(self.tmp, 0o755)
        self.victim = os.path.join(self.tmp, "victim")
        with open(self.victim, "wb") as f:
            f.write(b"precious\n")
        os.chmod(self.victim, 0o600)

    def tearDown(self):
        subprocess.run(["rm", "-rf", self.tmp])

    def victim_intact(self):
        with open(self.victim, "rb") as f:
            self.assertEqual(f.read(), b"precious\n")
        self.assertEqual(stat.S_IMODE(os.stat(self.victim).st_mode), 0o600)


class TestWrites(LayerCase):
    def test_write_creates_0644_and_replaces_own_file(self):
        old = os.umask(0o022)
        try:
            with fileio.OutDir.open(os.path.join(self.tmp, "o")) as d:
                d.write("a.txt", "one")
                d.write("a.txt", "two")
                d.write("p.txt", "secret", private=True)
                self.assertEqual(sorted(d.listdir()), ["a.txt", "p.txt"])   # no temporaries left
        finally:
            os.umask(old)
        o = os.path.join(self.tmp, "o")
        with open(os.path.join(o, "a.txt")) as f:
            self.assertEqual(f.read(), "two")
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(o, "a.txt")).st_mode), 0o644)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(o, "p.txt")).st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(o).st_mode), 0o755)

    def test_planted_link_is_refused_not_followed(self):
        o = os.path.join(self.tmp, "o")
        os.mkdir(o, 0o755)
        os.symlink(self.victim, os.path.join(o, "a.txt"))
        os.symlink(os.path.join(self.tmp, "new"), os.path.join(o, "dangling"))
        with fileio.OutDir.open(o) as d:
            with self.assertRaisesRegex(fileio.FileError, "refusing to replace .*a.txt: it is a symbolic link"):
                d.write("a.txt", "x")
            with self.assertRaisesRegex(fileio.FileError, "is a symbolic link"):
                d.write("dangling", "x")
            with self.assertRaisesRegex(fileio.FileError, "already there"):
                d.create("a.txt")
            with self.assertRaisesRegex(fileio.FileError, "symbolic link; refused"):
                d.read_bytes("a.txt", 100)
        self.victim_intact()
        self.assertFalse(os.path.lexists(os.path.join(self.tmp, "new")))

    def test_directory_in_the_way(self):
        o = os.path.join(self.tmp, "o")
        os.makedirs(os.path.join(o, "a.txt"), 0o755)
        with fileio.OutDir.open(o) as d:
            with self.assertRaisesRegex(fileio.FileError, "it is a directory"):
                d.write("a.txt", "x")

    def test_other_users_file_is_not_replaced(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to chown")     # counted as failed by run_tests.py
        o = os.path.join(self.tmp, "o")
        os.mkdir(o, 0o755)
        p = os.path.join(o, "a.txt")
        with open(p, "w") as f:
            f.write("theirs")
        os.chown(p, 65534, 65534)
        with fileio.OutDir.open(o) as d:
            with self.assertRaisesRegex(fileio.FileError, "belongs to uid 65534"):
                d.write("a.txt", "x")
        with open(p) as f:
            self.assertEqual(f.read(), "theirs")


class TestDirectories(LayerCase):
    def test_world_writable_and_group_writable_refused(self):
        for mode in (0o777, 0o1777, 0o775, 0o757):
            o = os.path.join(self.tmp, "w%o" % mode)
            os.mkdir(o)
            os.chmod(o, mode)
            with self.assertRaisesRegex(fileio.FileError, "writable by"):
                fileio.OutDir.open(o)
            self.assertEqual(os.listdir(o), [])

    def test_link_to_directory_refused(self):
        real = os.path.join(self.tmp, "real")
        os.mkdir(real, 0o755)
        os.symlink(real, os.path.join(self.tmp, "ln"))
        with self.assertRaisesRegex(fileio.FileError, "symbolic link"):
            fileio.OutDir.open(os.path.join(self.tmp, "ln"))

    def test_other_users_directory_refused(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to chown")
        o = os.path.join(self.tmp, "theirs")
        os.mkdir(o, 0o755)
        os.chown(o, 65534, 65534)
        with self.assertRaisesRegex(fileio.FileError, "belongs to uid 65534"):
            fileio.OutDir.open(o)

    def test_unwritable_directory(self):
        o = os.path.join(self.tmp, "ro")
        os.mkdir(o, 0o555)
        if os.geteuid() == 0:
            # root writes anyway; the layer's promise is then only not to follow links
            with fileio.OutDir.open(o) as d:
                d.write("x", "y")
            return
        with fileio.OutDir.open(o) as d:
            with self.assertRaisesRegex(fileio.FileError, "Permission denied"):
                d.write("x", "y")

    def test_default_names_differ(self):
        a, b = fileio.new_dir_name("t"), fileio.new_dir_name("t")
        self.assertNotEqual(a, b)
        self.assertRegex(a, r"^t-\d{8}-\d{6}-[0-9a-f]{16}$")

    def test_long_path(self):
        with self.assertRaisesRegex(fileio.FileError, "path longer than 4095 bytes"):
            fileio.OutDir.open(os.path.join(self.tmp, "x" * 5000))
        with self.assertRaisesRegex(fileio.FileError, "path longer than 4095 bytes"):
            fileio.read_bytes("/" + "a/" * 2100, 10)


class TestReads(LayerCase):
    def test_regular_file_within_caps(self):
        self.assertEqual(fileio.read_bytes(self.victim, 9), b"precious\n")
        with self.assertRaisesRegex(fileio.FileError, "is 9 bytes, more than the 8"):
            fileio.read_bytes(self.victim, 8)
        with self.assertRaisesRegex(fileio.FileError, "line longer than 4 bytes"):
            fileio.read_bytes(self.victim, 100, line_cap=4)

    def test_special_files_refused_without_blocking(self):
        fifo = os.path.join(self.tmp, "fifo")
        os.mkfifo(fifo)
        sparse = os.path.join(self.tmp, "sparse")
        with open(sparse, "wb") as f:
            f.truncate(10 << 30)
        for path, why in ((fifo, "is a FIFO"), ("/dev/zero", "is a character device"),
                          (self.tmp, "is a directory"), (sparse, "is 10737418240 bytes"),
                          (os.path.join(self.tmp, "none"), "No such file")):
            with self.assertRaisesRegex(fileio.FileError, why):
                fileio.read_bytes(path, 1 << 20)
            with self.assertRaisesRegex(fileio.FileError, why):
                fileio.check_regular(path, 1 << 20)

    def test_printable_escapes_control_codes(self):
        self.assertEqual(fileio.printable("a\x1b[31mb\x07\n\x9bc"), "a\\x1b[31mb\\x07\\x0a\\x9bc")
        self.assertEqual(fileio.printable("x" * 10, 4), "xxxx...")
        self.assertEqual(fileio.printable("a\u202eb\\c"), "a\\u202eb\\c")


if __name__ == "__main__":
    unittest.main()
