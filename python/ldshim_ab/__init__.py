"""ldshim-ab as an installed console script (pip install .; the `ldshim-ab` entry point).

The tool is one file, tools/ldshim-ab, which also runs as a plain script from a checkout. The
wheel carries a copy of it as ldshim_ab/_tool.py; main() runs that file as the __main__ module,
as `python3 tools/ldshim-ab` would (its own __main__ block: signals, exit status), so the two
cannot differ. sys.argv[0] stays <prefix>/bin/ldshim-ab, where the tool looks for the shim
(../lib/libldshim.so, which the wheel installs). An editable install (pip install -e .) has no
copy and runs the checkout's file, with argv[0] set to it so that the tool finds the
checkout's build/libldshim.so as it does there.
"""
import builtins
import os
import sys
import types


def tool_path():
    """(path of the tool's source, True when it is a checkout's tools/ldshim-ab)."""
    here = os.path.dirname(os.path.abspath(__file__))
    packaged = os.path.join(here, "_tool.py")
    if os.path.isfile(packaged):
        return packaged, False
    checkout = os.path.normpath(os.path.join(here, "..", "..", "tools", "ldshim-ab"))
    if os.path.isfile(checkout):
        return checkout, True
    raise RuntimeError("ldshim_ab: neither %s nor %s exists; reinstall the package"
                       % (packaged, checkout))


def run_as_main(path):
    """Execute the file at `path` as the __main__ module (runpy.run_path would also set
    sys.argv[0] to `path`, which moves where the tool looks for the shim)."""
    from . import fileio
    code = compile(fileio.read_bytes(path, 16 << 20, "ldshim-ab source"), path, "exec")
    mod = types.ModuleType("__main__")
    mod.__file__ = path
    mod.__builtins__ = builtins
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = mod
    try:
        exec(code, mod.__dict__)
    finally:
        sys.modules["__main__"] = saved


def main():
    path, checkout = tool_path()
    if checkout:
        sys.argv[0] = path
    run_as_main(path)
    return 0   # the tool's __main__ block exits itself; reached only if it did not
