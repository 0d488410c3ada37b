#!/usr/bin/env python3
"""test_layout.py RESULT_FILE — libldmoe's sources keep the product apart from the lab:
  - no file includes a .cu file of libldmoe (a build is one translation unit that includes
    headers: kernels/moe/ldmoe_api.cu the product's, bench/moe/lab/ldmoe_lab.cu the lab's);
  - the product's sources (kernels/moe) have no preprocessor condition on a LAB or DIAG macro,
    include nothing under bench/, and name none of the lab's identifiers outside comments;
  - every variant bit (LDMOE_TUNE_*) has one definition, in kernels/moe/impl/variants.h: no
    other C/C++ file defines one and no Python file assigns a TUNE_* constant a number;
  - the dependency of impl/ headers points one way: params.cuh does not include the scheduler.
No GPU, no build. Writes "<passed> <failed>" to RESULT_FILE; exit 1 when a check failed."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PRODUCT = os.path.join(ROOT, "kernels", "moe")
SKIP = {".git", "build", "build-san", "build-tsan", "results", "__pycache__"}
C_EXT = (".c", ".cc", ".h", ".cu", ".cuh")
PASSED = FAILED = 0


def check(ok, name, detail=""):
    global PASSED, FAILED
    PASSED, FAILED = PASSED + bool(ok), FAILED + (not ok)
    print("%s %s%s" % ("PASS" if ok else "FAIL", name, (": " + detail) if detail and not ok else ""), flush=True)


def files(top, exts):
    for d, dirs, names in os.walk(top):
        dirs[:] = sorted(x for x in dirs if x not in SKIP and not x.startswith("."))
        for n in sorted(names):
            if n.endswith(exts):
                yield os.path.join(d, n)


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def code_only(text):
    """C/C++ text without comments and string literals."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


def rel(p):
    return os.path.relpath(p, ROOT)


# 1. no source includes one of libldmoe's .cu files
bad = ["%s: %s" % (rel(p), m.group(1)) for p in files(ROOT, C_EXT)
       for m in re.finditer(r'^\s*#\s*include\s*["<]([^">]*\.cu)[">]', read(p), re.M)
       if m.group(1).startswith(("kernels/", "bench/moe/"))]
check(not bad, "no source includes a .cu file of libldmoe", ", ".join(bad))

# 2. the product knows nothing of the lab
product = list(files(PRODUCT, C_EXT))
check(len(product) > 10, "the product's sources are found (%d)" % len(product))
bad = []
for p in product:
    for m in re.finditer(r"^\s*#\s*(?:if|ifdef|ifndef|elif)\b[^\n]*", read(p), re.M):
        if re.search(r"LAB|DIAG", m.group(0)):
            bad.append("%s: %s" % (rel(p), m.group(0).strip()))
check(not bad, "no #if on a LAB or DIAG macro in kernels/moe", "; ".join(bad))
bad = [rel(p) for p in product if re.search(r'^\s*#\s*include\s*"bench/', read(p), re.M)]
check(not bad, "kernels/moe includes nothing under bench/", ", ".join(bad))
bad = ["%s: %s" % (rel(p), m.group(0)) for p in product
       for m in re.finditer(r"\b(?:ldmoe_lab\w*|LabShape\w*|LabArgs|LDMOE_LAB_\w+|LDMOE_DIAG)\b", code_only(read(p)))]
check(not bad, "kernels/moe names none of the lab's identifiers", "; ".join(bad[:5]))
check(not re.search(r"\bLab\w*|\blab\b", code_only(read(os.path.join(PRODUCT, "ldmoe_api.cu")))),
      "ldmoe_api.cu (the product's policy) has no lab code")

# 3. every variant bit is defined once
VARIANTS = os.path.join(PRODUCT, "impl", "variants.h")
defs = {}
for p in files(ROOT, C_EXT):
    for name in re.findall(r"^\s*#\s*define\s+(LDMOE_TUNE_\w+)\s+0x", read(p), re.M):
        defs.setdefault(name, []).append(rel(p))
check(len(defs) >= 8, "variants.h defines the variant bits (%d)" % len(defs))
bad = ["%s: %s" % (n, ", ".join(w)) for n, w in sorted(defs.items()) if w != [rel(VARIANTS)]]
check(not bad, "each LDMOE_TUNE_* bit is defined once, in kernels/moe/impl/variants.h", "; ".join(bad))
bad = [rel(p) for p in files(ROOT, C_EXT) if re.search(r"constexpr\s+uint32_t\s+k(?:Tune|Diag)\w*\s*=", read(p))]
check(not bad, "no kTune*/kDiag* constants besides them", ", ".join(bad))
bad = ["%s: %s" % (rel(p), m.group(0)) for p in files(ROOT, (".py",))
       for m in re.finditer(r"^\s*TUNE_\w+(?:\s*,\s*TUNE_\w+)*\s*=\s*(?:\(?\s*)0x[0-9a-fA-F]+", read(p), re.M)]
check(not bad, "no Python file assigns a TUNE_* bit a number", "; ".join(bad))
vals = [int(v, 16) for v in re.findall(r"^#define\s+LDMOE_TUNE_\w+\s+(0x[0-9a-fA-F]+)u", read(VARIANTS), re.M)]
check(len(vals) == len(set(vals)) and all(v and not v & (v - 1) for v in vals),
      "the variant bits are distinct single bits", str([hex(v) for v in vals]))

# 4. impl/ dependencies point one way
params = read(os.path.join(PRODUCT, "impl", "params.cuh"))
incs = re.findall(r'^\s*#\s*include\s*"([^"]+)"', params, re.M)
check("kernels/moe/impl/scheduler.cuh" not in incs and "kernels/moe/impl/tile.cuh" not in incs,
      "impl/params.cuh includes neither the scheduler nor the tile decoder")

with open(sys.argv[1], "w") if len(sys.argv) > 1 else open(os.devnull, "w") as f:
    f.write("%d %d\n" % (PASSED, FAILED))
print("test-moe-layout: %d passed, %d failed" % (PASSED, FAILED))
sys.exit(1 if FAILED else 0)
