#!/usr/bin/env python3
"""stream_hooks.py — the `test-stream-hooks` suite: every driver entry point of cuda.h that takes
a stream is hooked by the shim, or listed below with the reason it needs no hook.

Compute binding (shim/compute.c) makes a green context current in place of the primary, and
the driver's per-thread default stream fails in a green context: each entry point that can be
given CU_STREAM_PER_THREAD (or, as a _ptsz variant, the NULL stream), and each synchronous
_ptds entry point, must be hooked so the shim can run it on the thread's own stream of the
bound context. New toolkits add such entry points; this check reads them from the header, so
the shim's coverage cannot drift from it unnoticed.

What counts as taking a stream: a CUstream parameter, or a parameter of a struct type with a
CUstream member (CUlaunchConfig, CUDA_GRAPH_INSTANTIATE_PARAMS). The header is preprocessed
three ways, to see every ABI name a program can reach: as a program includes it, with
CUDA_API_PER_THREAD_DEFAULT_STREAM (the _ptsz/_ptds names), and with
__CUDA_API_VERSION_INTERNAL (the older versions libcuda still exports for older binaries).
"Hooked" means libldshim.so exports a function of that name: the shim's tables of hooks and
its exported wrappers come from the same lists (shim/interpose.c).

Usage: stream_hooks.py --lib build/libldshim.so [--cuda-include DIR] [--result FILE] [--verbose]
"""
import argparse
import re
import subprocess
import sys

# name -> why it needs no hook
NOT_NEEDED = {}
for _n in ("cuStreamDestroy", "cuStreamDestroy_v2"):
    NOT_NEEDED[_n] = ("destroys a stream: CU_STREAM_PER_THREAD and the legacy stream cannot be destroyed, "
                      "with or without the shim, and the shim's per-thread streams are never handed out")
for _n in ("cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpyDtoDAsync", "cuMemcpy2DAsync", "cuMemcpy3DAsync",
           "cuMemcpyHtoAAsync", "cuMemcpyAtoHAsync"):
    NOT_NEEDED[_n] = ("the 32-bit device-pointer ABI of CUDA < 3.2: no header a program can build with declares it "
                      "(CUDA_FORCE_API_VERSION is an error), and cudart never asks cuGetProcAddress for it")


def preprocess(include, defines):
    src = "#include <cuda.h>\n"
    p = subprocess.run(["cc", "-E", "-P", "-I", include] + defines + ["-x", "c", "-"], input=src.encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise SystemExit("stream_hooks: preprocessing cuda.h failed: " + p.stderr.decode()[-400:])
    return re.sub(r"\s+", " ", p.stdout.decode())


def stream_structs(text):
    names = set()
    for m in re.finditer(r"typedef struct (\w+) \{([^{}]*)\} (\w+);", text):
        if re.search(r"\bCUstream \w+;", m.group(2)):
            names.update((m.group(3), "struct " + m.group(1)))
    return names


def header_functions(include):
    """{name: why it counts} for every function taking a stream, and every _ptds function."""
    out = {}
    for defines in ([], ["-DCUDA_API_PER_THREAD_DEFAULT_STREAM"], ["-D__CUDA_API_VERSION_INTERNAL"]):
        text = preprocess(include, defines)
        structs = stream_structs(text)
        for m in re.finditer(r"\bCUresult (?:__attribute__\(\([^)]*\)\) )?(cu\w+) ?\(([^;{]*?)\) ?;", text):
            name, params = m.group(1), [p.strip() for p in m.group(2).split(",")]
            for p in params:
                core = re.sub(r"^const ", "", p)
                base = re.sub(r" ?\*.*$", "", core).strip()
                if re.match(r"^CUstream \w+$", core) or core == "CUstream":
                    out.setdefault(name, "a CUstream parameter")
                elif base in structs and "*" in core:
                    out.setdefault(name, "a %s parameter (it holds a stream)" % base)
            if name.endswith("_ptds"):
                out.setdefault(name, "a per-thread-stream (_ptds) entry point")
    return out


def exported(lib):
    p = subprocess.run(["nm", "-D", "--defined-only", lib], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise SystemExit("stream_hooks: nm %s failed: %s" % (lib, p.stderr.decode()[-300:]))
    syms = set()
    for line in p.stdout.decode().splitlines():
        f = line.split()
        if len(f) >= 3 and f[1] in ("T", "W", "i"):
            syms.add(f[2].split("@")[0])
    return syms


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", required=True, help="the shim (libldshim.so)")
    ap.add_argument("--cuda-include", default="/usr/local/cuda/include")
    ap.add_argument("--result", help="file to write '<passed> <failed>' to")
    ap.add_argument("--verbose", action="store_true", help="print every function, not only the failures")
    a = ap.parse_args()
    funcs = header_functions(a.cuda_include)
    syms = exported(a.lib)
    passed = failed = 0

    def result(ok, msg):
        nonlocal passed, failed
        if a.verbose or not ok:
            print(("ok " if ok else "FAIL ") + msg)
        passed, failed = passed + ok, failed + (not ok)

    if len(funcs) < 100:   # the parse itself could fail silently: cuda.h 13.0 has 187 of them
        result(False, "cuda.h: only %d functions taking a stream found; the parse is broken" % len(funcs))
    for name in sorted(funcs):
        if name in syms and name in NOT_NEEDED:
            result(False, "%s (%s): hooked, yet listed as not needing it" % (name, funcs[name]))
        elif name in syms:
            result(True, "%s: hooked" % name)
        elif name in NOT_NEEDED:
            result(True, "%s: not needed, because %s" % (name, NOT_NEEDED[name]))
        else:
            result(False, "%s (%s): neither hooked by %s nor listed as not needing it" % (name, funcs[name], a.lib))
    for name in sorted(set(NOT_NEEDED) - set(funcs)):
        result(False, "%s is listed as not needing a hook but cuda.h has no such function taking a stream" % name)
    print("test-stream-hooks: %d passed, %d failed (%d functions of cuda.h)" % (passed, failed, len(funcs)))
    if a.result:
        with open(a.result, "w") as f:
            f.write("%d %d\n" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
