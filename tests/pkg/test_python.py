"""pip install . into a fresh virtual environment, offline (--no-index): the ldshim-ab
console script and the ldmoe module, with and without the built libraries, editable, from a
source archive; and the build backend's pyproject reader. Suite test-pkg-python."""
import json
import os
import sys
import tarfile
import zipfile

from pkgtest import BUILD, PYTHON, ROOT, VERSION, TmpDirCase, clean_env, run, version_line

sys.path.insert(0, os.path.join(ROOT, "python"))
import ldshim_build  # noqa: E402  (the backend, for its pyproject reader and sdist)


class Venv(TmpDirCase):
    """One venv; the tests install into it in order (unittest runs them sorted by name)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.venv = os.path.join(cls.tmp, "venv")
        run([PYTHON, "-m", "venv", cls.venv])
        cls.py = os.path.join(cls.venv, "bin", "python")
        cls.site = run([cls.py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
        cls.work = os.path.join(cls.tmp, "work")     # outside the checkout: nothing found by cwd
        os.mkdir(cls.work)

    def pip(self, *args, env=None):
        return run([self.py, "-m", "pip", "--disable-pip-version-check", "--no-input"] + list(args),
                   cwd=self.work, env=env, timeout=300)

    def install(self, *args, env=None):
        self.pip("install", "--no-index", "--no-cache-dir", "--force-reinstall", *args, env=env)

    def py_out(self, code, env=None):
        return run([self.py, "-c", code], cwd=self.work, env=env).stdout

    def ab(self, out):
        """ldshim-ab over `true`, stock only; returns the shim path it preloaded."""
        run([os.path.join(self.venv, "bin", "ldshim-ab"), "--states", "stock", "--runs", "1",
             "--warmup", "0", "--quiet", "--out", out, "--", "true"], cwd=self.work)
        with open(os.path.join(out, "summary.json")) as f:
            return json.load(f)["shim"]

    # --- the regular wheel, built after `make`: it carries the libraries
    def test_1_install_with_libraries(self):
        self.install(ROOT)
        with open(os.path.join(BUILD, "libldshim.so"), "rb") as a, \
                open(os.path.join(self.venv, "lib", "libldshim.so"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        self.assertTrue(os.access(os.path.join(self.venv, "lib", "ldshim-mlopart-helper"), os.X_OK))
        self.assertTrue(os.path.isfile(os.path.join(self.site, "ldmoe", "libldmoe.so")))
        r = run([os.path.join(self.venv, "bin", "ldshim-ab"), "--version"], cwd=self.work)
        self.assertEqual(r.stdout, version_line("ldshim-ab") + "\n")

    def test_2_ldmoe_beside_itself(self):
        out = self.py_out("import ldmoe; print(ldmoe.__file__); print(ldmoe.library_path()); "
                          "print(ldmoe.version()); print(ldmoe.packed_bytes(8, 4096, 2048, 2)); "
                          "print(ldmoe.packed_bytes(8, 4095, 2048, 2)); print(ldmoe.torch)")
        f, lib, ver, pb, bad, torch = out.splitlines()
        self.assertEqual(os.path.dirname(f), os.path.join(self.site, "ldmoe"))
        self.assertEqual(lib, os.path.realpath(os.path.join(self.site, "ldmoe", "libldmoe.so")))
        self.assertTrue(ver.startswith(VERSION + " ("), ver)
        self.assertGreater(int(pb), 0)
        self.assertEqual(bad, "0")        # N not a multiple of D: no packed layout
        self.assertEqual(torch, "None")   # a fresh venv has no PyTorch: import still works

    def test_3_ldmoe_without_torch_says_so(self):
        out = self.py_out("import ldmoe\ntry:\n    ldmoe.grouped_mm(None, None, None)\n"
                          "except ldmoe.LdmoeError as e:\n    print(e)")
        self.assertIn("grouped_mm needs PyTorch", out)

    def test_4_ldmoe_lib_variable_wins(self):
        lib = os.path.join(BUILD, "libldmoe.so")
        out = self.py_out("import ldmoe; print(ldmoe.library_path())", env=clean_env(LDMOE_LIB=lib))
        self.assertEqual(out.strip(), os.path.realpath(lib))

    def test_5_ab_uses_the_installed_shim(self):
        shim = self.ab(os.path.join(self.tmp, "ab1"))
        self.assertEqual(shim, os.path.join(self.venv, "lib", "libldshim.so"))

    # --- a wheel without the libraries: ldmoe goes to the system loader
    def test_6_install_without_libraries(self):
        self.install(ROOT, env=clean_env(LDSHIM_WHEEL_BUILD=""))
        self.assertFalse(os.path.exists(os.path.join(self.venv, "lib", "libldshim.so")),
                         "a reinstall without the libraries must remove the old ones")
        self.assertFalse(os.path.exists(os.path.join(self.site, "ldmoe", "libldmoe.so")))
        code = "import ldmoe; print(ldmoe.library_path())"
        out = self.py_out(code, env=clean_env(LD_LIBRARY_PATH=BUILD))
        self.assertEqual(out.strip(), os.path.realpath(os.path.join(BUILD, "libldmoe.so")))
        r = run([self.py, "-c", code], cwd=self.work, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("libldmoe.so not found (set LDMOE_LIB", r.stderr)

    # --- editable: the checkout's own files
    def test_7_editable(self):
        self.install("-e", ROOT)
        out = self.py_out("import ldmoe; print(ldmoe.__file__); print(ldmoe.library_path())")
        f, lib = out.splitlines()
        self.assertEqual(f, os.path.join(ROOT, "kernels", "moe", "ldmoe.py"))
        self.assertEqual(lib, os.path.realpath(os.path.join(ROOT, "build", "libldmoe.so")))
        r = run([os.path.join(self.venv, "bin", "ldshim-ab"), "--version"], cwd=self.work)
        self.assertEqual(r.stdout, version_line("ldshim-ab") + "\n")
        shim = self.ab(os.path.join(self.tmp, "ab2"))
        self.assertEqual(os.path.realpath(shim), os.path.realpath(os.path.join(ROOT, "build", "libldshim.so")))

    # --- from a source archive: no checkout, so no revision
    def test_8_sdist(self):
        name = ldshim_build.build_sdist(self.tmp)
        sdist = os.path.join(self.tmp, name)
        self.assertEqual(name, "ldshim-%s.tar.gz" % VERSION)
        with tarfile.open(sdist) as t:
            names = t.getnames()
        top = "ldshim-%s/" % VERSION
        for f in ("PKG-INFO", "VERSION", "LICENSE", "pyproject.toml", "python/ldshim_build.py",
                  "python/ldshim_ab/__init__.py", "tools/ldshim-ab", "kernels/moe/ldmoe.py", "Makefile"):
            self.assertIn(top + f, names)
        self.assertFalse([n for n in names if n.startswith(top + "build/")])
        self.install(sdist)
        r = run([os.path.join(self.venv, "bin", "ldshim-ab"), "--version"], cwd=self.work)
        self.assertEqual(r.stdout, "ldshim-ab %s (git unknown)\n" % VERSION)

    def test_9_uninstall(self):
        self.install(ROOT)
        self.pip("uninstall", "-y", "ldshim")
        for p in (os.path.join(self.venv, "lib", "libldshim.so"), os.path.join(self.venv, "bin", "ldshim-ab"),
                  os.path.join(self.site, "ldmoe"), os.path.join(self.site, "ldshim_ab")):
            self.assertFalse(os.path.exists(p), p)


class Wheel(TmpDirCase):
    def test_contents_and_tag(self):
        name = ldshim_build.build_wheel(self.tmp)
        self.assertRegex(name, r"^ldshim-%s-py3-none-linux_[a-z0-9_]+\.whl$" % VERSION)
        with zipfile.ZipFile(os.path.join(self.tmp, name)) as z:
            names = set(z.namelist())
            info = "ldshim-%s.dist-info/" % VERSION
            want = {"ldmoe/__init__.py", "ldmoe/libldmoe.so", "ldshim_ab/__init__.py", "ldshim_ab/_tool.py",
                    "ldshim_ab/fileio.py",
                    "ldshim-%s.data/data/lib/libldshim.so" % VERSION,
                    "ldshim-%s.data/data/lib/ldshim-mlopart-helper" % VERSION,
                    info + "METADATA", info + "WHEEL", info + "RECORD", info + "entry_points.txt",
                    info + "LICENSE"}
            self.assertEqual(names, want)
            self.assertIn("ldshim-ab = ldshim_ab:main", z.read(info + "entry_points.txt").decode())
            meta = z.read(info + "METADATA").decode()
            self.assertIn("\nVersion: %s\n" % VERSION, meta)
            self.assertIn("\nLicense: MIT\n", meta)
            tool = z.read("ldshim_ab/_tool.py").decode()
            self.assertIn('\nBUILD_VERSION = "%s (git ' % VERSION, tool)

    def test_pure_without_libraries(self):
        os.environ["LDSHIM_WHEEL_BUILD"] = ""
        try:
            name = ldshim_build.build_wheel(self.tmp)
        finally:
            del os.environ["LDSHIM_WHEEL_BUILD"]
        self.assertEqual(name, "ldshim-%s-py3-none-any.whl" % VERSION)


class Pyproject(TmpDirCase):
    def test_both_readers_agree(self):
        sub = ldshim_build.read_pyproject(use_tomllib=False)
        self.assertEqual(sub["project"]["name"], "ldshim")
        self.assertEqual(sub["project"]["scripts"], {"ldshim-ab": "ldshim_ab:main"})
        try:
            import tomllib  # noqa: F401
        except ImportError:
            return          # Python < 3.11: the subset reader is the one in use
        self.assertEqual(sub, ldshim_build.read_pyproject())

    def test_subset_reader_refuses_the_unknown(self):
        p = os.path.join(self.tmp, "pyproject.toml")
        with open(p, "w") as f:
            f.write('[project]\nname = "x"\nauthors = [{name = "y"}]\n')
        with self.assertRaisesRegex(ValueError, "pyproject.toml:3: outside the TOML subset"):
            ldshim_build.read_pyproject(p, use_tomllib=False)


if __name__ == "__main__":
    import unittest
    unittest.main()
