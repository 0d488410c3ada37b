#!/usr/bin/env python3
"""test_ldmoe_abi.py — the ctypes mirrors of libldmoe's C structs in ldmoe.py (and of the lab
build's in bench/moe/lab/ldmoe_lab.py) have the C layout.

ldmoe.py hands ctypes structures to the library (ldmoe_params_t by pointer, the
ldshim_topology_t that ldmoe_get_topology fills). A field missing on the Python side is not a
type error anywhere: the library reads or writes past the end of the Python object and the
interpreter dies later, far from the cause (get_topology now passes its size, but
ldmoe_params_t and the lab's struct have no such guard). This compiles a
C program that prints sizeof and the offset of every field the Python side names, with the
same headers the library is built from, and compares.

  python3 tests/moe/test_ldmoe_abi.py [--result FILE] [--cc CC]   (FILE gets "<passed> <failed>")
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "kernels", "moe"), os.path.join(ROOT, "bench", "moe", "lab")]
import ldmoe  # noqa: E402  (needs no torch and no library to import)
import ldmoe_lab  # noqa: E402  (neither does the lab's wrapper)
sys.path.insert(0, os.path.join(ROOT, "tests", "gpu", "multi"))
import common as multi_common  # noqa: E402  (torch only inside digest())

# (Python structure, C type, header)
STRUCTS = [(ldmoe.Topology, "ldshim_topology_t", "kernels/ldshim_topology.h"),
           (ldmoe._Params, "ldmoe_params_t", "kernels/moe/ldmoe.h"),
           (ldmoe._Fp8Params, "ldmoe_fp8_params_t", "kernels/moe/ldmoe.h"),
           (ldmoe._MoeParams, "ldmoe_moe_params_t", "kernels/moe/ldmoe.h"),
           (ldmoe._MoeFp8Params, "ldmoe_moe_fp8_params_t", "kernels/moe/ldmoe.h"),
           (ldmoe_lab._LabParams, "ldmoe_lab_params_t", "bench/moe/lab/ldmoe_lab.h"),
           (ldmoe_lab._LabFp8Params, "ldmoe_lab_fp8_params_t", "bench/moe/lab/ldmoe_lab.h"),
           # the two-GPU check's mirror of libldshim's pointer-info struct
           (multi_common.PtrInfo, "ldshim_ptr_info_t", "shim/ldshim.h")]


def c_layout(cc):
    src = ["#include <stddef.h>", "#include <stdio.h>"]
    src += ['#include "%s"' % h for h in sorted({h for _, _, h in STRUCTS})]
    src.append("int main(void) {")
    for py, ct, _ in STRUCTS:
        src.append('    printf("%s sizeof %%zu\\n", sizeof(%s));' % (ct, ct))
        for name, _ in py._fields_:
            src.append('    printf("%s %s %%zu\\n", offsetof(%s, %s));' % (ct, name, ct, name))
    src += ["    return 0;", "}"]
    with tempfile.TemporaryDirectory() as d:
        c, exe = os.path.join(d, "abi.c"), os.path.join(d, "abi")
        with open(c, "w") as f:
            f.write("\n".join(src) + "\n")
        subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", ROOT, "-I", os.path.join(ROOT, "kernels"), c, "-o", exe], check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    return {tuple(line.split()[:2]): int(line.split()[2]) for line in out.splitlines()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--result", help="write '<passed> <failed>' here")
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"), help="C compiler (default $CC or cc)")
    a = ap.parse_args()
    passed = failed = 0
    try:
        c = c_layout(a.cc)
    except (OSError, subprocess.CalledProcessError) as e:
        print("FAIL compile the C layout program: %s" % e)
        c, failed = None, 1
    for py, ct, _ in STRUCTS if c else []:
        bad = []
        if ctypes.sizeof(py) != c[(ct, "sizeof")]:
            bad.append("sizeof: Python %d, C %d" % (ctypes.sizeof(py), c[(ct, "sizeof")]))
        for name, _ in py._fields_:
            po, co = getattr(py, name).offset, c[(ct, name)]
            if po != co:
                bad.append("%s at %d in Python, %d in C" % (name, po, co))
        if bad:
            failed += 1
            print("FAIL %s mirrors %s: %s" % (py.__name__, ct, "; ".join(bad)))
        else:
            passed += 1
            print("ok   %s mirrors %s (%d bytes, %d fields)" % (py.__name__, ct, ctypes.sizeof(py), len(py._fields_)))
    print("test-moe-abi: %d passed, %d failed" % (passed, failed))
    if a.result:
        with open(a.result, "w") as f:
            f.write("%d %d\n" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
