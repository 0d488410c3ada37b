"""ldmoe_lab.py — the lab build of libldmoe (ldmoe_lab.h) from Python, for benchmarks and tests.

    sys.path[:0] = ["bench/moe/lab", "kernels/moe"]
    import ldmoe_lab as ldmoe                         # everything of ldmoe, over the lab library
    y = ldmoe.grouped_mm(x, w, offs, tile="ws128x16", tune=0x1, debug_tiles=dbg, trace=tr)
    ldmoe.set_topology([0, 0, 1, 1, ...], 2)          # override the published map (None: restore)

Importing it makes kernels/moe/ldmoe.py load build/lab/libldmoe_lab.so ($LDMOE_LAB_LIB, else
../../../build/lab/ relative to this file) instead of libldmoe.so, on first use, so that
everything in the process runs one library: the lab exports the whole product API with the same
kernels. A call fails if ldmoe had already loaded another library. Importing needs neither the
library nor PyTorch. TILES: the product's and the lab's, read from kernels/moe/ldmoe.h and
ldmoe_lab.h (their LDMOE_TILE_LIST / LDMOE_LAB_TILE_LIST).
"""
import ctypes
import os
import re

import ldmoe
from ldmoe import *  # noqa: F401,F403  (the product API, over the lab library)
from ldmoe import LdmoeError, PackedWeights, _check, _fp8_params, _need, _params, torch  # noqa: F401

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.join(_HERE, "..", "..", "..")



def read_tune_bits(path):
    """{NAME: value} of the '#define LDMOE_TUNE_NAME 0x...u' lines of a C header."""
    with open(path) as f:
        bits = {n: int(v, 16) for n, v in re.findall(r"^#define\s+LDMOE_TUNE_(\w+)\s+(0x[0-9a-fA-F]+)u\b", f.read(), re.M)}
    if not bits:
        raise LdmoeError("%s: no LDMOE_TUNE_* bits" % path)
    return bits


# The kernels' variant bits, TUNE_<NAME> (TUNE_DIAG_* in the diagnostic build only), from their
# one definition.
TUNE_BITS = read_tune_bits(os.path.join(_ROOT, "kernels", "moe", "impl", "variants.h"))
globals().update({"TUNE_" + n: v for n, v in TUNE_BITS.items()})
MAX_SMS = ldmoe.MAX_SMS
MAX_DOMAINS = ldmoe.MAX_DOMAINS
TOPOLOGY_MAGIC = ldmoe.TOPOLOGY_MAGIC
TOPO_VALID, TOPO_BALANCED, TOPO_AWARE, TOPO_INVERTED, TOPO_BOUND = (ldmoe.TOPO_VALID, ldmoe.TOPO_BALANCED,
                                                                    ldmoe.TOPO_AWARE, ldmoe.TOPO_INVERTED, ldmoe.TOPO_BOUND)
DOMAIN_NONE = ldmoe.DOMAIN_NONE
Topology = ldmoe.Topology


def read_tile_list(path, macro):
    """{python name: (value, bm, bn)} of an X(value, NAME, bm, bn) list `macro` in a C header."""
    with open(path) as f:
        text = f.read()
    m = re.search(r"#define\s+%s\(X\)((?:[^\n]*\\\n)*[^\n]*)" % macro, text)
    if not m:
        raise LdmoeError("%s: no #define %s(X)" % (path, macro))
    out = {}
    for v, name, bm, bn in re.findall(r"X\(\s*(\d+)\s*,\s*(\w+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)", m.group(1)):
        out[name.lower().replace("_", "")] = (int(v), int(bm), int(bn))
    return out


PRODUCT_TILES = read_tile_list(os.path.join(_ROOT, "kernels", "moe", "ldmoe.h"), "LDMOE_TILE_LIST")
LAB_TILES = read_tile_list(os.path.join(_HERE, "ldmoe_lab.h"), "LDMOE_LAB_TILE_LIST")
TILES = dict([("auto", 0)] + sorted([(n, v[0]) for n, v in list(PRODUCT_TILES.items()) + list(LAB_TILES.items())],
                                    key=lambda t: t[1]))


class _LabParams(ctypes.Structure):
    _fields_ = [("base", ldmoe._Params), ("debug_tiles", ctypes.c_void_p), ("debug_cap", ctypes.c_int64),
                ("tune", ctypes.c_uint32), ("trace", ctypes.c_void_p)]


class _LabFp8Params(ctypes.Structure):
    _fields_ = [("fp8", ldmoe._Fp8Params), ("debug_tiles", ctypes.c_void_p), ("debug_cap", ctypes.c_int64),
                ("tune", ctypes.c_uint32), ("trace", ctypes.c_void_p)]


def lab_library_path():
    return os.environ.get("LDMOE_LAB_LIB") or os.path.join(_ROOT, "build", "lab", "libldmoe_lab.so")


def _load():
    """The lab library, bound for ldmoe's functions and this module's (loaded once)."""
    if ldmoe._lib is not None:
        if not hasattr(ldmoe._lib, "ldmoe_lab_grouped_mm"):
            raise LdmoeError("ldmoe already uses %s, not the lab build" % ldmoe.library_path())
        return ldmoe._lib
    path = lab_library_path()
    if not os.path.exists(path):
        raise LdmoeError("lab library %s not found (make lab-moe, or set LDMOE_LAB_LIB)" % path)
    lib = ldmoe._bind(ctypes.CDLL(path))
    lib.ldmoe_lab_grouped_mm.argtypes = [ctypes.POINTER(_LabParams)]
    lib.ldmoe_lab_grouped_mm_fp8.argtypes = [ctypes.POINTER(_LabFp8Params)]
    lib.ldmoe_lab_set_topology.argtypes = [ctypes.c_void_p]
    ldmoe._lib = lib
    return lib


ldmoe._load = _load   # ldmoe's own functions (pack, to_localized, ...) load the lab library too


def grouped_mm(x, w, offs, layout=None, mode="auto", out=None, steal_waves=0.0, tile="auto", debug_tiles=None,
               tune=0, trace=None):
    """ldmoe.grouped_mm with every tile of TILES and the lab's arguments (ldmoe_lab.h):
    debug_tiles: optional zeroed int32 tensor of 2*cap entries (per-tile counters);
    tune: LDMOE_TUNE_* bits (TUNE_* here; 0 = the tuned default);
    trace: optional int64 tensor of 8 entries per SM, filled with a timeline of the launch by the
    warp-specialized tiles."""
    lib = _load()
    base, out, dev = _params(x, w, offs, layout, mode, out, steal_waves, tile, TILES)
    p = _LabParams()
    p.base = base
    _lab_args(p, dev, debug_tiles, tune, trace)
    with torch.cuda.device(dev):
        p.base.stream = torch.cuda.current_stream(dev).cuda_stream
        _check(lib.ldmoe_lab_grouped_mm(ctypes.byref(p)))
    return out


def _lab_args(p, dev, debug_tiles, tune, trace):
    p.tune = int(tune)
    if debug_tiles is not None:
        _need(debug_tiles, "debug_tiles", torch.int32, dev, 1)
        p.debug_tiles = debug_tiles.data_ptr()
        p.debug_cap = debug_tiles.numel() // 2
    if trace is not None:
        _need(trace, "trace", torch.int64, dev, 1)
        sms = torch.cuda.get_device_properties(dev).multi_processor_count
        if trace.numel() < 8 * sms:
            raise ValueError("trace needs 8 entries per SM (%d), has %d" % (8 * sms, trace.numel()))
        p.trace = trace.data_ptr()


def grouped_mm_fp8(x, w, offs, x_scale, w_scale, scaling="rowwise", layout=None, mode="auto", out=None,
                   steal_waves=0.0, tile="auto", debug_tiles=None, tune=0, trace=None):
    """ldmoe.grouped_mm_fp8 with the lab's arguments (as grouped_mm here); x may be bf16 with
    x_scale None, as there."""
    lib = _load()
    f, out, dev, keep, pre = _fp8_params(x, w, offs, x_scale, w_scale, scaling, layout, mode, out, steal_waves, tile)
    p = _LabFp8Params()
    p.fp8 = f
    _lab_args(p, dev, debug_tiles, tune, trace)
    with torch.cuda.device(dev):
        p.fp8.base.stream = torch.cuda.current_stream(dev).cuda_stream
        if pre:
            pre()
        _check(lib.ldmoe_lab_grouped_mm_fp8(ctypes.byref(p)))
    del keep
    return out


def tile_info(T, E, N, K, layout="plain", num_domains=1, tile="auto"):
    """ldmoe.tile_info with every tile of TILES."""
    return ldmoe.tile_info(T, E, N, K, layout, num_domains, ldmoe._enum(TILES, tile, "tile"))


def set_topology(sm_domain=None, num_domains=2, flags=TOPO_VALID | TOPO_AWARE, magic=TOPOLOGY_MAGIC):
    """Override the published map on the current device; None restores it."""
    lib = _load()
    if sm_domain is None:
        _check(lib.ldmoe_lab_set_topology(None))
        return
    t = ldmoe.Topology()
    t.magic, t.version, t.num_sms, t.num_domains, t.flags = magic, 1, len(sm_domain), num_domains, flags
    for i, d in enumerate(sm_domain):
        t.sm_domain[i] = d
        t.sms_per_domain[d] += 1
    _check(lib.ldmoe_lab_set_topology(ctypes.byref(t)))
