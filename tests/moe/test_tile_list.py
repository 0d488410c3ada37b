#!/usr/bin/env python3
"""test_tile_list.py [--product] RESULT_FILE — the tile lists and the exports of libldmoe agree (no GPU).

One list is the source of the tiles (kernels/moe/ldmoe.h LDMOE_TILE_LIST, bench/moe/lab/ldmoe_lab.h
LDMOE_LAB_TILE_LIST); this checks every reader of it: ldmoe.py's TILES (a copy, since the pip
package has no header), ldmoe_lab.py's TILES, the two libraries' tile tables (through
ldmoe_tile_info, which answers without a GPU), and the libraries' exports against ldmoe.h's and
ldmoe_lab.h's declarations (nm). $LDMOE_LIB and $LDMOE_LAB_LIB name the libraries (default:
build/libldmoe.so, build/lab/libldmoe_lab.so). --product: only what needs no lab library (make
test, which does not build the lab: test-moe-exports). Writes "<passed> <failed>" to RESULT_FILE;
exit 1 when a check failed."""
import ctypes
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "kernels", "moe"), os.path.join(ROOT, "bench", "moe", "lab")]

PASSED = FAILED = 0


def check(ok, name, detail=""):
    global PASSED, FAILED
    if ok:
        PASSED += 1
    else:
        FAILED += 1
    print("%s %s%s" % ("PASS" if ok else "FAIL", name, (": " + detail) if detail and not ok else ""), flush=True)


def declared(header):
    """Names of the functions a header declares (prototypes at the start of a line)."""
    with open(header) as f:
        text = f.read()
    return set(re.findall(r"^(?:const\s+)?(?:int|size_t|char|void)\s*\*?\s*(ldmoe_\w+)\s*\(", text, re.M))


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True, text=True).stdout
    return {l.split()[-1] for l in out.splitlines() if l.split() and l.split()[-2] in "TtWDdBbRrVvi" and
            not l.split()[-1].startswith("_")}


def tile_geometry(lib, value):
    bm, bn, bound = ctypes.c_int(), ctypes.c_int(), ctypes.c_int64()
    rc = lib.ldmoe_tile_info(ctypes.c_int64(1000), 8, 4096, 4096, 1, 2, value, ctypes.byref(bm), ctypes.byref(bn),
                             ctypes.byref(bound))
    return (bm.value, bn.value) if rc == 0 else None


def main():
    product_only = sys.argv[1:2] == ["--product"]
    if product_only:
        del sys.argv[1]
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) == 2 else 2
    product_lib = os.environ.get("LDMOE_LIB") or os.path.join(ROOT, "build", "libldmoe.so")
    lab_lib = os.environ.get("LDMOE_LAB_LIB") or os.path.join(ROOT, "build", "lab", "libldmoe_lab.so")
    os.environ["LDMOE_LAB_LIB"] = lab_lib
    import ldmoe_lab   # reads both headers; binds ldmoe to the lab library
    import ldmoe
    product = ldmoe_lab.PRODUCT_TILES
    lab = ldmoe_lab.LAB_TILES
    fp8 = ldmoe_lab.read_tile_list(os.path.join(ROOT, "kernels", "moe", "ldmoe.h"), "LDMOE_FP8_TILE_LIST")

    check(len(product) == 7 and len(lab) == 14, "lists: 7 product tiles, 14 lab tiles",
          "%d and %d" % (len(product), len(lab)))
    check(ldmoe.TILES == dict([("auto", 0)] + [(n, v[0]) for n, v in product.items()]),
          "ldmoe.py TILES is ldmoe.h's LDMOE_TILE_LIST", "%s vs %s" % (ldmoe.TILES, product))
    check(len(fp8) == 5 and ldmoe.FP8_TILES == dict([("auto", 0)] + [(n, v[0]) for n, v in fp8.items()]),
          "ldmoe.py FP8_TILES is ldmoe.h's LDMOE_FP8_TILE_LIST", "%s vs %s" % (ldmoe.FP8_TILES, fp8))
    values = [v[0] for v in product.values()] + [v[0] for v in lab.values()] + [v[0] for v in fp8.values()]
    check(len(set(values)) == len(values) and not (set(product) & set(lab) or set(fp8) & (set(product) | set(lab))),
          "values and names unique across the three lists")
    check(all(0 < v < 32 for v in values), "values in 1..31 (impl/library.cuh keeps a 32-bit mask per device)")
    check(ldmoe_lab.TILES == dict([("auto", 0)] + [(n, v[0]) for n, v in list(product.items()) + list(lab.items())]),
          "ldmoe_lab.py TILES is both lists")

    plib = ctypes.CDLL(product_lib)
    plib.ldmoe_tile_info.argtypes = [ctypes.c_int64] + [ctypes.c_int] * 6 + [ctypes.c_void_p] * 3
    if product_only:
        return product_checks(plib, product_lib, product, lab, fp8, values)
    llib = ldmoe_lab._load()
    for name, (v, bm, bn) in sorted(product.items(), key=lambda t: t[1][0]):
        check(tile_geometry(plib, v) == (bm, bn), "product library has %s (%d): %dx%d" % (name, v, bm, bn),
              str(tile_geometry(plib, v)))
        check(ldmoe_lab.tile_info(1000, 8, 4096, 4096, "localized", 2, name)[:2] == (bm, bn),
              "lab library has %s too" % name)
    for name, (v, bm, bn) in sorted(lab.items(), key=lambda t: t[1][0]):
        check(tile_geometry(plib, v) is None, "product library refuses lab tile %s (%d)" % (name, v))
        check(ldmoe_lab.tile_info(1000, 8, 4096, 4096, "localized", 2, name)[:2] == (bm, bn),
              "lab library has %s (%d): %dx%d" % (name, v, bm, bn))
    for name, (v, bm, bn) in sorted(fp8.items(), key=lambda t: t[1][0]):
        check(tile_geometry(plib, v) == (bm, bn) and tile_geometry(llib, v) == (bm, bn),
              "both libraries have FP8 tile %s (%d): %dx%d" % (name, v, bm, bn), str(tile_geometry(plib, v)))
    others = [t for t in range(-2, 40) if t != 0 and t not in values]
    check(all(tile_geometry(plib, t) is None and tile_geometry(llib, t) is None for t in others),
          "neither library takes a value outside the lists")
    check(ldmoe_lab.tile_info(64 * 8, 8, 4096, 4096, "plain", 1, "auto")[:2] == ldmoe.tile_info(
        64 * 8, 8, 4096, 4096, "plain", 1, "auto")[:2], "AUTO resolves the same in the lab")

    api = declared(os.path.join(ROOT, "kernels", "moe", "ldmoe.h"))
    lab_api = declared(os.path.join(ROOT, "bench", "moe", "lab", "ldmoe_lab.h"))
    check(len(api) == 21 and lab_api == {"ldmoe_lab_grouped_mm", "ldmoe_lab_grouped_mm_fp8", "ldmoe_lab_set_topology"},
          "declarations found", "%s / %s" % (sorted(api), sorted(lab_api)))
    got = exported(product_lib)
    check(got == api, "libldmoe.so exports exactly ldmoe.h's functions",
          "extra %s, missing %s" % (sorted(got - api), sorted(api - got)))
    got = exported(lab_lib)
    check(got == api | lab_api, "libldmoe_lab.so exports ldmoe.h's and ldmoe_lab.h's functions",
          "extra %s, missing %s" % (sorted(got - api - lab_api), sorted((api | lab_api) - got)))
    with open(os.path.join(ROOT, "kernels", "moe", "ldmoe.map")) as f:
        mapped = set(re.findall(r"^\s*(ldmoe_\w+);", f.read(), re.M))
    check(mapped == api, "ldmoe.map names exactly ldmoe.h's functions")
    # ldmoe_lab re-exports ldmoe through `from ldmoe import *`: a public name missing from
    # ldmoe.__all__ is missing from the lab module (the GPU tests call ldmoe_lab.version()).
    public = {n for n in dir(ldmoe) if not n.startswith("_") and callable(getattr(ldmoe, n)) and
              getattr(getattr(ldmoe, n), "__module__", None) == "ldmoe"}
    check(public <= set(ldmoe.__all__), "ldmoe.__all__ names every public function and class of ldmoe.py",
          "missing %s" % sorted(public - set(ldmoe.__all__)))
    check(all(hasattr(ldmoe_lab, n) for n in ldmoe.__all__), "ldmoe_lab has every name of ldmoe.__all__",
          "missing %s" % [n for n in ldmoe.__all__ if not hasattr(ldmoe_lab, n)])

    return finish("test-moe-tiles")


def product_checks(plib, product_lib, product, lab, fp8, values):
    """The product library alone: its tile table, its refusals, its exports."""
    for name, (v, bm, bn) in sorted(product.items(), key=lambda t: t[1][0]):
        check(tile_geometry(plib, v) == (bm, bn), "product library has %s (%d): %dx%d" % (name, v, bm, bn),
              str(tile_geometry(plib, v)))
    for name, (v, bm, bn) in sorted(lab.items(), key=lambda t: t[1][0]):
        check(tile_geometry(plib, v) is None, "product library refuses lab tile %s (%d)" % (name, v))
    for name, (v, bm, bn) in sorted(fp8.items(), key=lambda t: t[1][0]):
        check(tile_geometry(plib, v) == (bm, bn), "product library has FP8 tile %s (%d): %dx%d" % (name, v, bm, bn),
              str(tile_geometry(plib, v)))
    others = [t for t in range(-2, 40) if t != 0 and t not in values]
    check(all(tile_geometry(plib, t) is None for t in others), "the product library takes no value outside the lists")
    api = declared(os.path.join(ROOT, "kernels", "moe", "ldmoe.h"))
    got = exported(product_lib)
    check(len(api) == 23 and got == api, "libldmoe.so exports exactly ldmoe.h's functions",
          "extra %s, missing %s" % (sorted(got - api), sorted(api - got)))
    with open(os.path.join(ROOT, "kernels", "moe", "ldmoe.map")) as f:
        mapped = set(re.findall(r"^\s*(ldmoe_\w+);", f.read(), re.M))
    check(mapped == api, "ldmoe.map names exactly ldmoe.h's functions")
    return finish("test-moe-exports")


def finish(suite):
    print("%s: %d passed, %d failed" % (suite, PASSED, FAILED))
    with open(sys.argv[1], "w") as f:
        f.write("%d %d\n" % (PASSED, FAILED))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
