"""`make install` / `make uninstall`: the tree, pkg-config, a program built against the installed
files, the installed tools and Python module. Suite test-pkg-install."""
import json
import os
import re
import stat

from pkgtest import (BUILD, CC, PYTHON, ROOT, SOVERSION, VERSION, TmpDirCase, clean_env, make, run,
                     tree, version_line)

V, S = VERSION, SOVERSION


def expected_tree(prefix):
    """Everything `make install PREFIX=<prefix>` must create below the staging root: files,
    links (-> target) and directories. A new installed file belongs in this list."""
    p = prefix.strip("/")
    files = {
        "bin/ldshim-ab": "file", "bin/ldshim-policy": "file", "bin/ldshim-probe": "file",
        "include/ldshim/ldshim.h": "file", "include/ldshim/ldshim_topology.h": "file",
        "include/ldshim/ldmoe.h": "file", "include/ldshim/ldmoe_tiles.h": "file",
        "lib/libldshim.so.%s" % V: "file", "lib/libldshim.so.%s" % S: "-> libldshim.so.%s" % V,
        "lib/libldshim.so": "-> libldshim.so.%s" % V,
        "lib/libldmoe.so.%s" % V: "file", "lib/libldmoe.so.%s" % S: "-> libldmoe.so.%s" % V,
        "lib/libldmoe.so": "-> libldmoe.so.%s" % V,
        "lib/ldshim-mlopart-helper": "file",
        "lib/pkgconfig/libldshim.pc": "file", "lib/pkgconfig/libldmoe.pc": "file",
        "share/ldshim/ldmoe.py": "file", "share/ldshim/moe.policy": "file",
        "share/ldshim/serve.policy": "file", "share/ldshim/serve.py": "file",
        "share/man/man1/ldshim-ab.1": "file", "share/man/man1/ldshim-policy.1": "file",
        "share/man/man1/ldshim-probe.1": "file",
        "share/doc/ldshim/LICENSE": "file",
    }
    out = {}
    for rel, kind in files.items():
        full = os.path.join(p, rel)
        out[full] = kind
        d = os.path.dirname(full)
        while d:
            out[d] = "dir"
            d = os.path.dirname(d)
    return out


def pc_env(stage, prefix_lib):
    return clean_env(PKG_CONFIG_PATH=os.path.join(stage, prefix_lib, "pkgconfig"),
                     PKG_CONFIG_LIBDIR=os.path.join(stage, prefix_lib, "pkgconfig"),
                     PKG_CONFIG_SYSROOT_DIR=stage if stage else None)


class StagedInstall(TmpDirCase):
    """make install DESTDIR=<tmp>/stage PREFIX=/usr, as a distribution package build does."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.stage = os.path.join(cls.tmp, "stage")
        cls.out = make("install", "DESTDIR=" + cls.stage, "PREFIX=/usr").stdout

    def test_1_tree_is_exact(self):
        self.assertEqual(tree(self.stage), expected_tree("/usr"))

    def test_2_modes(self):
        for rel, kind in expected_tree("/usr").items():
            if kind != "file":
                continue
            mode = stat.S_IMODE(os.stat(os.path.join(self.stage, rel)).st_mode)
            want = 0o755 if rel.startswith(("usr/bin/", "usr/lib/lib", "usr/lib/ldshim-")) else 0o644
            self.assertEqual(mode, want, "%s: mode %o" % (rel, mode))

    def test_3_versions_in_headers_and_pc(self):
        inc = os.path.join(self.stage, "usr/include/ldshim")
        with open(os.path.join(inc, "ldshim.h")) as f:
            self.assertIn('#define LDSHIM_VERSION_STRING "%s"\n' % V, f.read())
        with open(os.path.join(inc, "ldmoe.h")) as f:
            self.assertIn('#define LDMOE_VERSION_STRING "%s"\n' % V, f.read())
        for pc in ("libldshim", "libldmoe"):
            r = run(["pkg-config", "--modversion", pc], env=pc_env(self.stage, "usr/lib"))
            self.assertEqual(r.stdout.strip(), V)
        with open(os.path.join(self.stage, "usr/share/ldshim/ldmoe.py")) as f:
            self.assertIn('\n_LIBDIR = "/usr/lib"\n', f.read())

    def test_4_installed_library_sonames(self):
        for lib in ("libldshim.so", "libldmoe.so"):
            r = run(["readelf", "-d", os.path.join(self.stage, "usr/lib", "%s.%s" % (lib, V))])
            self.assertIn("Library soname: [%s.%s]" % (lib, S), r.stdout)

    def test_5_pkg_config_flags(self):
        env = pc_env(self.stage, "usr/lib")
        r = run(["pkg-config", "--cflags", "--libs", "libldshim", "libldmoe"], env=env)
        inc = os.path.join(self.stage, "usr/include/ldshim")
        lib = os.path.join(self.stage, "usr/lib")
        self.assertEqual(r.stdout.split(), ["-I" + inc, "-L" + lib, "-lldshim", "-lldmoe"])
        for pc in ("libldshim", "libldmoe"):
            run(["pkg-config", "--exists", "--print-errors", pc], env=env)
        # What the libraries use inside (uthash, the shim's own headers) is no dependency of a
        # program built against them: no installed header includes it, no .pc requires anything.
        for h in sorted(os.listdir(inc)):
            with open(os.path.join(inc, h)) as f:
                names = re.findall(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', f.read(), re.M)
            for n in names:
                self.assertFalse(n == "uthash.h" or n.startswith(("shim/", "policy/")), "%s includes %s" % (h, n))
        for pc in ("libldshim", "libldmoe"):
            with open(os.path.join(lib, "pkgconfig", pc + ".pc")) as f:
                self.assertNotRegex(f.read(), r"(?m)^Requires", pc)

    def test_6_program_against_installed_files(self):
        env = pc_env(self.stage, "usr/lib")
        flags = run(["pkg-config", "--cflags", "--libs", "libldshim", "libldmoe"], env=env).stdout.split()
        exe = os.path.join(self.tmp, "installed_api")
        # -I. or the source tree must not be needed: compile from a directory of its own
        run([CC, "-std=c11", "-Wall", "-Wextra", "-Werror", os.path.join(ROOT, "tests/pkg/installed_api.c"),
             "-o", exe] + flags, cwd=self.tmp)
        r = run(["readelf", "-d", exe])
        self.assertIn("Shared library: [libldshim.so.%s]" % S, r.stdout)
        self.assertIn("Shared library: [libldmoe.so.%s]" % S, r.stdout)
        r = run([exe], cwd=self.tmp, env=clean_env(LD_LIBRARY_PATH=os.path.join(self.stage, "usr/lib")))
        self.assertEqual(r.stderr, "", "a program that never touches CUDA got output from the libraries")
        got = dict(ln.split("=", 1) for ln in r.stdout.splitlines())
        self.assertEqual(got["LDSHIM_VERSION_STRING"], V)
        self.assertEqual(got["LDMOE_VERSION_STRING"], V)
        self.assertTrue(got["ldshim_version"].startswith(V + " (state "), got["ldshim_version"])
        self.assertTrue(got["ldmoe_version"].startswith(V + " ("), got["ldmoe_version"])
        self.assertEqual(got["tagged_allocs"], "0")
        self.assertEqual(got["get_topology"], "-1")
        self.assertGreater(int(got["packed_bytes"]), 0)

    def test_7_installed_tools(self):
        for name in ("ldshim-ab", "ldshim-policy", "ldshim-probe"):
            exe = os.path.join(self.stage, "usr/bin", name)
            cmd = [PYTHON, exe] if name == "ldshim-ab" else [exe]
            self.assertEqual(run(cmd + ["--version"]).stdout, version_line(name) + "\n")

    def test_8_uninstall_leaves_nothing(self):
        make("uninstall", "DESTDIR=" + self.stage, "PREFIX=/usr")
        left = {rel: k for rel, k in tree(self.stage).items() if k != "dir"}
        self.assertEqual(left, {}, "make uninstall left these")
        for d in ("usr/include/ldshim", "usr/share/ldshim", "usr/share/doc/ldshim"):
            self.assertFalse(os.path.exists(os.path.join(self.stage, d)), d)


class SpacedDestdir(TmpDirCase):
    """make install DESTDIR="<tmp>/st age" (issue 41): every install path is quoted, so the
    tree lands whole under the spaced directory, nothing beside it or in the source tree, and
    make uninstall removes it again."""

    def test_install_and_uninstall(self):
        stage = os.path.join(self.tmp, "st age")
        before = set(os.listdir(self.tmp)), set(os.listdir(ROOT))
        make("install", "DESTDIR=" + stage, "PREFIX=/usr")
        self.assertEqual(tree(stage), expected_tree("/usr"))
        self.assertEqual((set(os.listdir(self.tmp)), set(os.listdir(ROOT))),
                         (before[0] | {"st age"}, before[1]), "install wrote beside the stage")
        make("uninstall", "DESTDIR=" + stage, "PREFIX=/usr")
        self.assertEqual({rel: k for rel, k in tree(stage).items() if k != "dir"}, {})


class PrefixInstall(TmpDirCase):
    """make install PREFIX=<tmp>/prefix: the installed pieces find each other with no
    environment (ldshim-ab its shim, ldmoe.py its library, pkg-config the prefix)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.prefix = os.path.join(cls.tmp, "prefix")
        make("install", "PREFIX=" + cls.prefix)

    def test_1_tree(self):
        self.assertEqual(tree(self.prefix), {k[len(self.prefix.strip("/")) + 1:]: v
                                             for k, v in expected_tree(self.prefix).items()
                                             if k.startswith(self.prefix.strip("/") + "/")})

    def test_2_ab_finds_the_installed_shim(self):
        out = os.path.join(self.tmp, "ab")
        run([os.path.join(self.prefix, "bin", "ldshim-ab"), "--states", "stock", "--runs", "1",
             "--warmup", "0", "--quiet", "--out", out, "--", "true"], cwd=self.tmp)
        with open(os.path.join(out, "summary.json")) as f:
            shim = json.load(f)["shim"]
        self.assertEqual(os.path.realpath(shim),
                         os.path.realpath(os.path.join(self.prefix, "lib", "libldshim.so.%s" % V)))

    def test_3_ldmoe_finds_the_installed_library(self):
        code = ("import sys; sys.path.insert(0, %r); import ldmoe; print(ldmoe.library_path()); "
                "print(ldmoe.version())" % os.path.join(self.prefix, "share", "ldshim"))
        # with bytecode written, as by default: uninstall must take it too (test_5)
        r = run([PYTHON, "-c", code], cwd=self.tmp, env=clean_env(PYTHONDONTWRITEBYTECODE=None))
        self.assertTrue(os.listdir(os.path.join(self.prefix, "share", "ldshim", "__pycache__")))
        path, ver = r.stdout.splitlines()
        self.assertEqual(path, os.path.realpath(os.path.join(self.prefix, "lib", "libldmoe.so.%s" % V)))
        self.assertTrue(ver.startswith(V + " "), ver)

    def test_4_pkg_config(self):
        r = run(["pkg-config", "--cflags", "--libs", "libldshim"], env=pc_env("", os.path.join(self.prefix, "lib")))
        self.assertEqual(r.stdout.split(), ["-I" + os.path.join(self.prefix, "include", "ldshim"),
                                            "-L" + os.path.join(self.prefix, "lib"), "-lldshim"])

    def test_5_uninstall_leaves_nothing(self):
        # test_3 imported the installed ldmoe.py, so its bytecode lies beside it: removed too
        make("uninstall", "PREFIX=" + self.prefix)
        left = {rel: k for rel, k in tree(self.prefix).items() if k != "dir"}
        self.assertEqual(left, {})


if __name__ == "__main__":
    import unittest
    unittest.main()
