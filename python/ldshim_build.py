"""ldshim_build — the PEP 517 build backend of `pip install .` (pyproject.toml).

Standard library only and no build requirements, so `pip install .` works with and without
build isolation and with no network at all. It writes the wheel itself: the project is two
files of Python from elsewhere in the tree plus, when `make` has built them, three binaries,
which is more than a generic backend expresses without a custom setup.py anyway.

The wheel holds
    ldmoe/__init__.py            kernels/moe/ldmoe.py
    ldmoe/libldmoe.so            build/libldmoe.so, when built (ldmoe finds it beside itself)
    ldshim_ab/__init__.py        python/ldshim_ab/__init__.py: the `ldshim-ab` entry point
    ldshim_ab/fileio.py          python/ldshim_ab/fileio.py: the file layer the tool imports
    ldshim_ab/_tool.py           tools/ldshim-ab, its BUILD_VERSION line stamped
    <data>/lib/libldshim.so      build/libldshim.so and build/ldshim-mlopart-helper, when built:
    <data>/lib/ldshim-mlopart-helper   installed to <prefix>/lib, where <prefix>/bin/ldshim-ab
                                 looks for the shim (../lib) and the shim for its helper
With a binary in it the wheel is tagged for this platform, else py3-none-any.
LDSHIM_WHEEL_BUILD=DIR takes the binaries from DIR instead of build/ ("" leaves them out).

An editable install (pip install -e .) puts kernels/moe and python/ on sys.path instead.
Metadata comes from pyproject.toml's [project] table, the version from VERSION, the git
revision (for ldshim-ab --version) from this checkout, else "unknown".
"""
import base64
import hashlib
import io
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "ldshim"


# ----------------------------------------------------------------------------- metadata

def _parse_toml_subset(text):
    """The part of TOML pyproject.toml uses, for Pythons without tomllib (< 3.11): [tables],
    key = "string" and key = ["string", ...] on one line, comments. Anything else raises, so
    an edit of pyproject.toml beyond this subset fails loudly instead of being misread."""
    data, table = {}, None
    string = r'"(?:[^"\\]|\\.)*"'
    for n, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^\[([A-Za-z0-9_.-]+)\]\s*(#.*)?$", line)
        if m:
            table = data
            for part in m.group(1).split("."):
                table = table.setdefault(part, {})
            continue
        m = re.match(r'^([A-Za-z0-9_-]+|%s)\s*=\s*(%s|\[\s*(?:%s\s*,\s*)*(?:%s)?\s*,?\s*\])\s*(#.*)?$'
                     % (string, string, string, string), line)
        if not m or table is None:
            raise ValueError("pyproject.toml:%d: outside the TOML subset ldshim_build reads "
                             "without tomllib: %s" % (n, raw))
        key = m.group(1).strip('"')
        val = m.group(2)
        if val.startswith("["):
            table[key] = [_unquote(s) for s in re.findall(string, val)]
        else:
            table[key] = _unquote(val)
    return data


def _unquote(s):
    return s[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")


def read_pyproject(path=None, use_tomllib=True):
    path = path or os.path.join(ROOT, "pyproject.toml")
    with open(path, "rb") as f:
        raw = f.read()
    if use_tomllib:
        try:
            import tomllib
            return tomllib.loads(raw.decode("utf-8"))
        except ImportError:
            pass
    return _parse_toml_subset(raw.decode("utf-8"))


def version(root=ROOT):
    with open(os.path.join(root, "VERSION")) as f:
        v = f.read().strip()
    if not re.match(r"^[0-9]+\.[0-9]+\.[0-9]+$", v):
        raise ValueError("VERSION must hold MAJOR.MINOR.PATCH, found %r" % v)
    return v


def git_revision(root=ROOT):
    """This checkout's revision as the Makefile computes it, or 'unknown'."""
    def git(*a):
        try:
            r = subprocess.run(["git", "-C", root] + list(a), stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, universal_newlines=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return ""
        return r.stdout.strip() if r.returncode == 0 else ""
    top = git("rev-parse", "--show-toplevel")
    if not top or os.path.realpath(top) != os.path.realpath(root):
        return "unknown"
    return git("describe", "--always", "--dirty", "--abbrev=12", "--exclude=*") or "unknown"


def metadata_text():
    proj = read_pyproject()["project"]
    lines = ["Metadata-Version: 2.1", "Name: %s" % proj["name"], "Version: %s" % version()]
    if "description" in proj:
        lines.append("Summary: %s" % proj["description"])
    if "license" in proj:
        lines.append("License: %s" % proj["license"])
    if "requires-python" in proj:
        lines.append("Requires-Python: %s" % proj["requires-python"])
    for c in proj.get("classifiers", []):
        lines.append("Classifier: %s" % c)
    for extra, reqs in sorted(proj.get("optional-dependencies", {}).items()):
        lines.append("Provides-Extra: %s" % extra)
        lines += ['Requires-Dist: %s; extra == "%s"' % (r, extra) for r in reqs]
    body = ""
    if "readme" in proj:
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(ROOT, proj["readme"]), encoding="utf-8") as f:
            body = "\n" + f.read()
    return "\n".join(lines) + "\n" + body


def entry_points_text():
    scripts = read_pyproject()["project"].get("scripts", {})
    return "[console_scripts]\n" + "".join("%s = %s\n" % kv for kv in sorted(scripts.items()))


# ----------------------------------------------------------------------------- wheel

def _read(rel):
    with open(os.path.join(ROOT, rel), "rb") as f:
        return f.read()


def stamped_tool():
    """tools/ldshim-ab with BUILD_VERSION = "VERSION (git REVISION)" (as tools/ab.mk does)."""
    src = _read("tools/ldshim-ab").decode("utf-8")
    stamp = 'BUILD_VERSION = "%s (git %s)"' % (version(), git_revision())
    out, n = re.subn(r"(?m)^BUILD_VERSION = None$", stamp, src)
    if n != 1:
        raise RuntimeError("tools/ldshim-ab: expected one 'BUILD_VERSION = None' line, found %d" % n)
    return out.encode("utf-8")


FILEIO_BLOCK = re.compile(r"(?ms)^# BEGIN fileio:[^\n]*\n.*?^# END fileio\n")


def inline_fileio(tool_text, fileio_text=None):
    """tools/ldshim-ab with its fileio import block replaced by python/ldshim_ab/fileio.py
    itself, run as a module of its own: the copy that `make` builds into build/bin and `make
    install` installs has no package beside it, and must run the same file layer."""
    if fileio_text is None:
        fileio_text = _read("python/ldshim_ab/fileio.py").decode("utf-8")
    block = ("# BEGIN fileio: python/ldshim_ab/fileio.py, inlined by ldshim_build.inline_fileio\n"
             "import types as _types\n"
             "fileio = _types.ModuleType(\"ldshim_ab_fileio\")\n"
             "exec(compile(%r, \"ldshim_ab/fileio.py\", \"exec\"), fileio.__dict__)\n"
             "# END fileio\n" % fileio_text)
    out, n = FILEIO_BLOCK.subn(lambda m: block, tool_text)
    if n != 1:
        raise RuntimeError("tools/ldshim-ab: expected one '# BEGIN fileio' ... '# END fileio' "
                           "block, found %d" % n)
    return out


def binaries_dir():
    d = os.environ.get("LDSHIM_WHEEL_BUILD", os.path.join(ROOT, "build"))
    return os.path.abspath(d) if d else None


def wheel_files(data_dir):
    """[(name in the wheel, bytes, mode)] of the regular wheel."""
    files = [("ldmoe/__init__.py", _read("kernels/moe/ldmoe.py"), 0o644),
             ("ldshim_ab/__init__.py", _read("python/ldshim_ab/__init__.py"), 0o644),
             ("ldshim_ab/fileio.py", _read("python/ldshim_ab/fileio.py"), 0o644),
             ("ldshim_ab/_tool.py", stamped_tool(), 0o644)]
    bdir = binaries_dir()
    missing = []
    for src, dst in (("libldmoe.so", "ldmoe/libldmoe.so"),
                     ("libldshim.so", data_dir + "/data/lib/libldshim.so"),
                     ("ldshim-mlopart-helper", data_dir + "/data/lib/ldshim-mlopart-helper")):
        p = os.path.join(bdir, src) if bdir else None
        if p and os.path.isfile(p):
            with open(p, "rb") as f:
                files.append((dst, f.read(), 0o755))
        else:
            missing.append(src)
    if missing:
        sys.stderr.write("ldshim_build: not in the wheel (run `make` first to include them): %s\n"
                         % ", ".join(missing))
    return files


def editable_files():
    paths = [os.path.join(ROOT, "python"), os.path.join(ROOT, "kernels", "moe")]
    return [("__editable__.ldshim.pth", "".join(p + "\n" for p in paths).encode(), 0o644)]


def _tag(files):
    binary = any(name.endswith(".so") or name.endswith("-helper") for name, _, _ in files)
    if not binary:
        return "py3-none-any", True
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return "py3-none-%s" % plat, False


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def _write_wheel(wheel_directory, files):
    ver = version()
    dist = "%s-%s" % (NAME, ver)
    tag, purelib = _tag(files)
    info = dist + ".dist-info"
    files = list(files) + [
        (info + "/METADATA", metadata_text().encode("utf-8"), 0o644),
        (info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: ldshim_build %s\nRoot-Is-Purelib: %s\n"
                           "Tag: %s\n" % (ver, "true" if purelib else "false", tag)).encode(), 0o644),
        (info + "/entry_points.txt", entry_points_text().encode(), 0o644),
        (info + "/LICENSE", _read("LICENSE"), 0o644),
    ]
    record = [_record_line(n, d) for n, d, _ in files] + [info + "/RECORD,,"]
    files.append((info + "/RECORD", ("\n".join(record) + "\n").encode(), 0o644))
    name = "%s-%s.whl" % (dist, tag)
    path = os.path.join(wheel_directory, name)
    # SOURCE_DATE_EPOCH (reproducible builds) or a fixed date: the same inputs, the same bytes
    stamp = time.gmtime(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")))[:6]
    with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_DEFLATED) as z:
        for n, d, mode in files:
            zi = zipfile.ZipInfo(n, date_time=stamp)
            zi.external_attr = (0o100000 | mode) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, d)
    os.replace(path + ".tmp", path)
    return name


# ----------------------------------------------------------------------------- PEP 517 / 660

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    """The dist-info pip reads before it builds (so it need not build twice)."""
    info = "%s-%s.dist-info" % (NAME, version())
    d = os.path.join(metadata_directory, info)
    os.makedirs(d, exist_ok=True)
    for name, text in (("METADATA", metadata_text()), ("entry_points.txt", entry_points_text())):
        with open(os.path.join(d, name), "w", encoding="utf-8") as f:
            f.write(text)
    return info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, wheel_files("%s-%s.data" % (NAME, version())))


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, editable_files())


def _source_files():
    """What a source archive holds: the checkout's tracked and unignored files, or, outside a
    checkout (an unpacked archive), every file but build outputs."""
    try:
        r = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, timeout=60)
        if r.returncode == 0 and git_revision() != "unknown":
            return sorted(f for f in r.stdout.decode().split("\0")
                          if f and os.path.isfile(os.path.join(ROOT, f)))
    except (OSError, subprocess.SubprocessError):
        pass
    out = []
    for d, dirs, names in os.walk(ROOT):
        rel = os.path.relpath(d, ROOT)
        dirs[:] = [x for x in dirs if not (rel == "." and (x.startswith("build") or x == ".git"))
                   and x != "__pycache__"]
        out += [os.path.normpath(os.path.join(rel, n)) for n in names if not n.endswith(".pyc")]
    return sorted(out)


def build_sdist(sdist_directory, config_settings=None):
    dist = "%s-%s" % (NAME, version())
    name = dist + ".tar.gz"
    path = os.path.join(sdist_directory, name)
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
    with tarfile.open(path + ".tmp", "w:gz", format=tarfile.PAX_FORMAT) as t:
        def add(arcname, data, mode=0o644):
            ti = tarfile.TarInfo(dist + "/" + arcname)
            ti.size, ti.mode, ti.mtime = len(data), mode, mtime
            t.addfile(ti, io.BytesIO(data))
        for f in _source_files():
            full = os.path.join(ROOT, f)
            add(f, _read(f), 0o755 if os.access(full, os.X_OK) else 0o644)
        add("PKG-INFO", metadata_text().encode("utf-8"))
    os.replace(path + ".tmp", path)
    return name


if __name__ == "__main__":
    # `python3 python/ldshim_build.py inline-fileio < tool > copy` (tools/ab.mk): the built copy
    if sys.argv[1:] != ["inline-fileio"]:
        sys.exit("usage: ldshim_build.py inline-fileio < tools/ldshim-ab > copy")
    sys.stdout.write(inline_fileio(sys.stdin.read()))
