#!/usr/bin/env python3
"""sass_identity.py — show that libldmoe's kernels compile to the same machine code as before.

A restructuring of the kernel sources (file splits, renames, moving tiles between the product
library and the lab one) must not change what runs on the GPU. This tool reduces a library to
one digest per (architecture, kernel): SHA-256 of its SASS text (instructions and their
encodings; the address column dropped) plus its resource usage (registers, shared memory,
stack, ...), and compares two such reductions.

    sass_identity.py digest LIB [-o FILE]        one line per kernel: arch name sha256 instrs resources
    sass_identity.py compare OLD NEW [NEW2 ...] [--map FILE] [--require NAME ...] [--new-ok REGEX]
        OLD, NEW: digest files or libraries. Every kernel of each NEW must have a counterpart in
        OLD (after renaming with --map: lines "old-mangled-name new-mangled-name") whose digest
        is identical; kernels of OLD that no NEW has are listed (moved out or dropped). Exit 0
        when every kernel of every NEW matches, 1 otherwise. --require NAME: a (mangled, as in
        OLD) kernel that some NEW must have, e.g. every kernel AUTO can pick. --new-ok REGEX:
        kernels of NEW without a counterpart whose name matches are listed but not counted
        (kernels added after OLD was recorded, e.g. the FP8 ones).

cuobjdump is looked for in $CUOBJDUMP, then PATH, then CUDA's bin directory, then the copy that
a Triton wheel or NVIDIA's cuobjdump wheel (pip install nvidia-cuda-cuobjdump: the toolkits of the
CPU machines lack it) on sys.path (or in /work/venv*) ships; any recent one reads sm_90a and
sm_100 cubins, and the digests do not depend on its version (13.0 and 13.5 agree).

Typical use (bench/moe/moe_bench.mk: make sass-identity):
    python3 bench/moe/sass_identity.py compare bench/moe/sass/baseline.txt build/libldmoe.so \\
        build/lab/libldmoe_lab.so --require-file bench/moe/sass/auto-kernels.txt
"""
import argparse
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys


def cuobjdump():
    for c in (os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"):
        if c and os.path.exists(c):
            return c
    for d in sys.path + [os.path.join(v, "lib", "python3*", "site-packages") for v in glob.glob("/work/venv*")]:
        for pat in (("triton", "backends", "nvidia", "bin", "cuobjdump"), ("nvidia", "cu1*", "bin", "cuobjdump")):
            for c in sorted(glob.glob(os.path.join(d, *pat))):
                return c
    sys.exit("sass_identity: no cuobjdump (set CUOBJDUMP)")


_FUNC = re.compile(r"^\s*Function : (\S+)")
_ARCH = re.compile(r"^arch = (\S+)")
_ADDR = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/")
_RES = re.compile(r"^\s*Function (\S+):\s*$")


def _sass(lib):
    """{(arch, name): [normalized lines]} from cuobjdump -sass."""
    out = subprocess.run([cuobjdump(), "-sass", lib], check=True, capture_output=True, text=True).stdout
    funcs, arch, cur = {}, None, None
    for line in out.splitlines():
        m = _ARCH.match(line)
        if m:
            arch, cur = m.group(1), None
            continue
        m = _FUNC.match(line)
        if m:
            cur = funcs.setdefault((arch, m.group(1)), [])
            continue
        if cur is None or not line.strip() or line.lstrip().startswith(".headerflags"):
            continue
        if line.startswith("Fatbin") or line.startswith("====="):
            cur = None
            continue
        # drop the address column: it is implied by the order; keep instruction and encoding
        cur.append(" ".join(_ADDR.sub("", line).split()))
    return funcs


def _res(lib):
    """{(arch, name): 'REG:.. STACK:.. SHARED:.. ...'} from cuobjdump -res-usage."""
    out = subprocess.run([cuobjdump(), "-res-usage", lib], check=True, capture_output=True, text=True).stdout
    res, arch, name = {}, None, None
    for line in out.splitlines():
        m = _ARCH.match(line)
        if m:
            arch = m.group(1)
            continue
        m = _RES.match(line)
        if m:
            name = m.group(1)
            continue
        if name and line.strip().startswith("REG:"):
            res[(arch, name)] = " ".join(line.split())
            name = None
    return res


def digest_lib(lib):
    sass, res = _sass(lib), _res(lib)
    rows = {}
    for key, lines in sass.items():
        h = hashlib.sha256("\n".join(lines).encode()).hexdigest()
        instrs = sum(1 for l in lines if not l.startswith("/* 0x"))
        rows[key] = (h, instrs, res.get(key, "-").replace(" ", ","))
    return rows


def load(path):
    if path.endswith(".txt"):
        rows = {}
        with open(path) as f:
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                arch, name, h, n, r = line.split()
                rows[(arch, name)] = (h, int(n), r)
        return rows
    return digest_lib(path)


def write(rows, f):
    for (arch, name), (h, n, r) in sorted(rows.items()):
        f.write("%s %s %s %d %s\n" % (arch, name, h, n, r))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("digest", help="write the per-kernel digests of a library")
    d.add_argument("lib")
    d.add_argument("-o", "--output")
    c = sub.add_parser("compare", help="every kernel of NEW has an identical counterpart in OLD")
    c.add_argument("old")
    c.add_argument("new", nargs="+")
    c.add_argument("--map", help='file of "old-name new-name" lines (kernels renamed on purpose)')
    c.add_argument("--require", action="append", default=[], help="a kernel of OLD some NEW must have")
    c.add_argument("--require-file", help="file of such names, one a line (# comments)")
    c.add_argument("--new-ok", help="regex: kernels of NEW absent from OLD that may be (not counted)")
    a = ap.parse_args()

    if a.cmd == "digest":
        rows = digest_lib(a.lib)
        if a.output:
            with open(a.output, "w") as f:
                f.write("# sass_identity.py digest %s: arch kernel sha256(sass) instructions resources\n"
                        % os.path.basename(a.lib))
                write(rows, f)
        else:
            write(rows, sys.stdout)
        return 0

    old = load(a.old)
    rename = {}
    if a.map:
        with open(a.map) as f:
            for line in f:
                if line.strip() and not line.startswith("#"):
                    o, n = line.split()
                    rename[n] = o
    required = list(a.require)
    if a.require_file:
        with open(a.require_file) as f:
            required += [l.split()[0] for l in f if l.strip() and not l.startswith("#")]
    bad, seen = 0, set()
    for path in a.new:
        new = load(path)
        same = 0
        for (arch, name), (h, n, r) in sorted(new.items()):
            oname = rename.get(name, name)
            ref = old.get((arch, oname))
            if ref is None and a.new_ok and re.search(a.new_ok, name):
                print("new ok  %s %s %s (added after %s; not compared)" % (os.path.basename(path), arch, name, a.old))
            elif ref is None:
                print("NEW     %s %s %s (no counterpart in %s)" % (os.path.basename(path), arch, name, a.old))
                bad += 1
            elif ref != (h, n, r):
                print("DIFFERS %s %s %s: %d instrs %s vs %d instrs %s" % (os.path.basename(path), arch, name,
                                                                       ref[1], ref[2], n, r))
                bad += 1
            else:
                same += 1
                seen.add((arch, oname))
        print("%s: %d of %d kernels identical to %s" % (path, same, len(new), a.old))
    for arch, name in sorted(set(old) - seen):
        print("absent  %s %s (in %s, in none of the new libraries)" % (arch, name, a.old))
    for name in required:
        archs = [k for k in old if k[1] == name]
        if not archs:
            print("REQUIRED %s is not a kernel of %s" % (name, a.old))
            bad += 1
        for k in archs:
            if k not in seen:
                print("REQUIRED %s %s has no identical kernel in the new libraries" % k)
                bad += 1
    print("sass-identity: %s" % ("OK" if bad == 0 else "%d differences" % bad))
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
