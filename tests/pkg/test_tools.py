"""The build tree's tools and libraries: --version, names and sonames, man pages, the
ldshim-policy command line. Suite test-pkg-tools (also under SAN=1)."""
import os
import re
import shutil
import subprocess
import unittest

from pkgtest import BUILD, PYTHON, ROOT, SOVERSION, VERSION, clean_env, git_revision, run, version_line

BIN = os.path.join(BUILD, "bin")
TOOLS = ("ldshim-ab", "ldshim-policy", "ldshim-probe")
POLICY = os.path.join(BIN, "ldshim-policy")
MOE_POLICY = os.path.join(ROOT, "policy", "examples", "moe.policy")


def tool_cmd(name):
    path = os.path.join(BIN, name)
    return [PYTHON, path] if name == "ldshim-ab" else [path]


class Versions(unittest.TestCase):
    def test_revision_is_this_checkout(self):
        rev = git_revision()
        self.assertRegex(rev, r"^([0-9a-f]{12}(-dirty)?|unknown)$")
        with open(os.path.join(BUILD, "gen", "ldshim_build.h")) as f:
            gen = f.read()
        self.assertIn('#define LDSHIM_BUILD_VERSION "%s"' % VERSION, gen)
        self.assertIn('#define LDSHIM_BUILD_REVISION "%s"' % rev, gen)

    def test_every_tool(self):
        for name in TOOLS:
            with self.subTest(tool=name):
                r = run(tool_cmd(name) + ["--version"])
                self.assertEqual(r.stdout, version_line(name) + "\n")
                self.assertEqual(r.stderr, "")

    def test_mlopart_helper(self):
        r = run([os.path.join(BUILD, "ldshim-mlopart-helper"), "--version"])
        self.assertEqual(r.stdout, version_line("ldshim-mlopart-helper") + "\n")

    def test_ab_from_the_checkout(self):
        # tools/ldshim-ab run as a plain script reads VERSION and git itself
        r = run([PYTHON, os.path.join(ROOT, "tools", "ldshim-ab"), "--version"])
        self.assertEqual(r.stdout, version_line("ldshim-ab") + "\n")

    def test_ab_outside_a_checkout(self):
        # a copy of the unstamped script in a directory that is no git checkout
        import tempfile
        with tempfile.TemporaryDirectory() as t:
            os.mkdir(os.path.join(t, "tools"))
            shutil.copy(os.path.join(ROOT, "tools", "ldshim-ab"), os.path.join(t, "tools"))
            # the script's file layer, which a checkout has beside tools/
            shutil.copytree(os.path.join(ROOT, "python", "ldshim_ab"),
                            os.path.join(t, "python", "ldshim_ab"))
            r = run([PYTHON, os.path.join(t, "tools", "ldshim-ab"), "--version"], cwd=t)
            self.assertEqual(r.stdout, "ldshim-ab unknown (git unknown)\n")
            with open(os.path.join(t, "VERSION"), "w") as f:
                f.write(VERSION + "\n")
            r = run([PYTHON, os.path.join(t, "tools", "ldshim-ab"), "--version"], cwd=t)
            self.assertEqual(r.stdout, "ldshim-ab %s (git unknown)\n" % VERSION)

    def test_header_fallbacks_match_version(self):
        # The headers' own values serve only includes from a checkout; they must still agree.
        for path, macro in (("shim/ldshim.h", "LDSHIM_VERSION_STRING"),
                            ("kernels/moe/ldmoe.h", "LDMOE_VERSION_STRING")):
            with self.subTest(header=path):
                with open(os.path.join(ROOT, path)) as f:
                    m = re.search(r'(?m)^#define %s "([^"]*)"$' % macro, f.read())
                self.assertIsNotNone(m, "%s: no '#define %s \"...\"' line" % (path, macro))
                self.assertEqual(m.group(1), VERSION,
                                 "VERSION says %s but %s's fallback says %s: update it"
                                 % (VERSION, path, m.group(1)))


class Layout(unittest.TestCase):
    def test_tools_in_bin(self):
        for name in TOOLS:
            p = os.path.join(BIN, name)
            self.assertTrue(os.path.isfile(p) and os.access(p, os.X_OK), p)
        self.assertFalse(os.path.exists(os.path.join(BUILD, "ldshim-probe")),
                         "a stale build/ldshim-probe: the tool lives in build/bin now")

    def test_sonames_and_links(self):
        for lib in ("libldshim.so", "libldmoe.so"):
            with self.subTest(lib=lib):
                r = run(["readelf", "-d", os.path.join(BUILD, lib)])
                self.assertRegex(r.stdout, r"\(SONAME\)\s+Library soname: \[%s\.%s\]"
                                 % (re.escape(lib), SOVERSION))
                link = os.path.join(BUILD, "%s.%s" % (lib, SOVERSION))
                self.assertTrue(os.path.islink(link), link)
                self.assertEqual(os.readlink(link), lib)
                self.assertFalse(os.path.islink(os.path.join(BUILD, lib)),
                                 "build/%s must stay a file: it is preloaded and copied" % lib)


class ManPages(unittest.TestCase):
    def test_pages(self):
        for name in TOOLS:
            with self.subTest(tool=name):
                with open(os.path.join(BUILD, "man", name + ".1")) as f:
                    page = f.read()
                self.assertRegex(page, r'(?m)^\.TH "%s" "1" "" "ldshim %s" "User Commands"$'
                                 % (name.upper(), re.escape(VERSION)))
                self.assertRegex(page, r"(?m)^\.SH NAME\n%s \\- \S" % re.escape(name.replace("-", "\\-")))
                for sec in ("SYNOPSIS", "DESCRIPTION", "SEE ALSO"):
                    self.assertRegex(page, r"(?m)^\.SH %s$" % sec)
                # every line of --help is in the page (roff-escaped): the page is the help
                env = clean_env(COLUMNS="80")
                help_lines = run(tool_cmd(name) + ["--help"], env=env).stdout.splitlines()
                for ln in help_lines:
                    if ln.lower().startswith("usage:"):
                        ln = ln[len("usage:"):].strip()
                    esc = ln.strip().replace("\\", "\\e")
                    if esc:
                        self.assertIn(esc, page, "help line missing from %s.1: %r" % (name, ln))
                if shutil.which("groff"):
                    r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z",
                                        os.path.join(BUILD, "man", name + ".1")],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       universal_newlines=True)
                    self.assertEqual((r.returncode, r.stderr), (0, ""))


class PolicyCommandLine(unittest.TestCase):
    def policy(self, *args):
        return run([POLICY] + list(args), check=False)

    def test_unknown_command(self):
        r = self.policy("bogus")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.stderr, "ldshim-policy: unknown command 'bogus' (see ldshim-policy --help)\n")

    def test_unknown_option_is_not_a_file(self):
        r = self.policy("check", "--json", MOE_POLICY)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stdout, "", "no file may be checked after a usage error")
        self.assertIn("unknown option '--json'", r.stderr)
        self.assertNotIn("cannot open", r.stderr)
        r = self.policy("match", MOE_POLICY, "1MiB", "-x")
        self.assertEqual((r.returncode, r.stdout), (2, ""))
        self.assertIn("unknown option '-x'", r.stderr)

    def test_double_dash_ends_options(self):
        r = self.policy("check", "--", MOE_POLICY)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("moe.policy: ok, 4 rules", r.stdout)
        r = self.policy("check", "--", "--json")       # now a file name
        self.assertEqual(r.returncode, 1)
        self.assertIn("--json", r.stderr)

    def test_operand_counts(self):
        r = self.policy("check")
        self.assertEqual(r.returncode, 2)
        self.assertIn("check needs at least one FILE", r.stderr)
        for args in (("match", MOE_POLICY), ("match", MOE_POLICY, "1MiB", "any", "extra")):
            r = self.policy(*args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn("match takes FILE SIZE", r.stderr)
        r = self.policy()
        self.assertEqual(r.returncode, 2)
        self.assertTrue(r.stderr.startswith("usage: ldshim-policy check FILE..."))

    def test_help_and_version_anywhere(self):
        for args in (("--help",), ("-h",), ("check", MOE_POLICY, "--help")):
            r = self.policy(*args)
            self.assertEqual(r.returncode, 0, args)
            self.assertTrue(r.stdout.startswith("usage: ldshim-policy"), args)
        r = self.policy("match", MOE_POLICY, "--version")
        self.assertEqual((r.returncode, r.stdout), (0, version_line("ldshim-policy") + "\n"))


class ProbeCommandLine(unittest.TestCase):
    def test_help_lists_version(self):
        r = run([os.path.join(BIN, "ldshim-probe"), "--help"])
        self.assertIn("--version", r.stdout)


if __name__ == "__main__":
    unittest.main()
