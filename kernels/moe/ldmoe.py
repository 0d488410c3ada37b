"""ldmoe.py — thin ctypes wrapper of libldmoe.so for PyTorch tensors.

    import ldmoe
    y = ldmoe.grouped_mm(x, w, offs)                    # w [E, N, K], like torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
    wl = ldmoe.to_localized(w, 2)                       # [2, E, N/2, K]
    y = ldmoe.grouped_mm(x, wl, offs, layout="localized", mode="aware")
    wp = ldmoe.pack(w, 2)                               # packed layout (PackedWeights), built once
    y = ldmoe.grouped_mm(x, wp, offs, mode="aware")     # same result, faster weight streaming

The library is found through $LDMOE_LIB, then next to this file (the pip package), then
../../build/ relative to it (the source tree), then the directory `make install` put it in,
then the dynamic linker's search path (libldmoe.so.0); library_path() tells which one loaded.
Calls run on torch.cuda.current_stream() of the tensors' device and are asynchronous like any
CUDA op. Importing needs neither PyTorch nor a GPU: packed_bytes, tile_info, version and
library_path work without them; the tensor functions need PyTorch.

The lab build's tiles, counters, timeline and tune bits are in bench/moe/lab/ldmoe_lab.py, which
uses this module over build/lab/libldmoe_lab.so.
"""
import ctypes
import os

try:
    import torch
except ImportError as _torch_error:   # see _need_torch
    torch = None
    _TORCH_ERROR = str(_torch_error)

# `make install` writes its LIBDIR here, in the installed copy of this file.
_LIBDIR = None

__all__ = ["library_path", "grouped_mm", "to_localized", "to_plain", "pack", "packed_bytes", "PackedWeights", "tile_info",
           "get_topology", "LdmoeError", "LAYOUTS", "MODES", "TILES"]

LAYOUTS = {"plain": 0, "localized": 1, "packed": 2}
MODES = {"auto": 0, "aware": 1, "unaware": 2, "static": 3}
# ldmoe.h's LDMOE_TILE_LIST, names in lower case without underscores (tests/moe/test_tile_list.py
# checks that the two agree; the pip package carries no header to read it from).
TILES = {"auto": 0, "128x128": 3, "128x256": 4, "64x16k4": 7, "64x64k4": 8, "ws256x128ew": 19, "ws128x64c16": 20,
         "ws128x128c16": 21}
MAX_SMS = 256
MAX_DOMAINS = 8
TOPOLOGY_MAGIC = 0x4C445348
TOPO_VALID, TOPO_BALANCED, TOPO_AWARE, TOPO_INVERTED, TOPO_BOUND = 1, 2, 4, 8, 16
DOMAIN_NONE = 0xFFFFFFFF


class LdmoeError(RuntimeError):
    pass


class PackedWeights:
    """Weights in libldmoe's packed layout (ldmoe.h, LDMOE_LAYOUT_PACKED), made by pack().

    data: a uint8 CUDA tensor of ldmoe_packed_bytes(E, N, K, D) bytes whose slice d (a contiguous
    1/D of it) holds rows d*N/D .. (d+1)*N/D - 1 of every expert; E, N, K, D: the sizes it was
    packed for (read-only). Built from a saved buffer, the sizes are checked against it."""
    __slots__ = ("_data", "_E", "_N", "_K", "_D")

    def __init__(self, data, E, N, K, D):
        _need_torch("PackedWeights")
        if not isinstance(data, torch.Tensor) or data.dtype != torch.uint8 or data.dim() != 1:
            raise TypeError("PackedWeights data must be a 1-D uint8 tensor (what pack() returns)")
        n = packed_bytes(E, N, K, D)
        if n == 0 or data.numel() != n:
            raise ValueError("PackedWeights: %d bytes, but E=%d N=%d K=%d D=%d pack into %d" % (
                data.numel(), E, N, K, D, n))
        self._data, self._E, self._N, self._K, self._D = data, E, N, K, D

    data = property(lambda self: self._data)
    E = property(lambda self: self._E)
    N = property(lambda self: self._N)
    K = property(lambda self: self._K)
    D = property(lambda self: self._D)

    @property
    def device(self):
        return self._data.device

    def __repr__(self):
        return "PackedWeights(E=%d, N=%d, K=%d, D=%d, %d bytes on %s)" % (
            self.E, self.N, self.K, self.D, self.data.numel(), self.data.device)


class _Params(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("w", ctypes.c_void_p), ("offs", ctypes.c_void_p),
                ("y", ctypes.c_void_p), ("T", ctypes.c_int64), ("E", ctypes.c_int32),
                ("N", ctypes.c_int32), ("K", ctypes.c_int32), ("layout", ctypes.c_int32),
                ("num_domains", ctypes.c_int32), ("mode", ctypes.c_int32),
                ("steal_waves", ctypes.c_float), ("stream", ctypes.c_void_p),
                ("tile", ctypes.c_int32)]


class Topology(ctypes.Structure):
    _fields_ = [("magic", ctypes.c_uint32), ("version", ctypes.c_uint32),
                ("num_sms", ctypes.c_uint32), ("num_domains", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("sms_per_domain", ctypes.c_uint32 * MAX_DOMAINS),
                ("sm_domain", ctypes.c_uint8 * MAX_SMS),
                # version >= 2 (kernels/ldshim_topology.h): the library copies the whole struct,
                # so these must be here even when only the version-1 fields are read.
                ("bound_sms", ctypes.c_uint32), ("bound_domain", ctypes.c_uint32),
                ("sm_bound", ctypes.c_uint8 * MAX_SMS)]

    def bound_set(self):
        """The SM ids kernels of this process may run on: the published bound set when the
        shim bound the process (TOPO_BOUND), else every SM of the map."""
        if self.magic == TOPOLOGY_MAGIC and self.version >= 2 and self.flags & TOPO_BOUND:
            return [i for i in range(self.num_sms) if self.sm_bound[i]]
        return list(range(self.num_sms))


_lib = None


def _need_torch(what):
    if torch is None:
        raise LdmoeError("ldmoe.%s needs PyTorch, which is not importable here (%s)" % (what, _TORCH_ERROR))


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.environ.get("LDMOE_LIB"), os.path.join(here, "libldmoe.so"),
            os.path.join(here, "..", "..", "build", "libldmoe.so"),
            os.path.join(_LIBDIR, "libldmoe.so.0") if _LIBDIR else None, "libldmoe.so.0", "libldmoe.so"]


def _load():
    global _lib
    if _lib is not None:
        return _lib
    cands = _candidates()
    err = None
    for c in cands:
        if not c or (os.sep in c and not os.path.exists(c)):
            continue
        try:
            lib = ctypes.CDLL(c)
            break
        except OSError as e:
            err = e
    else:
        raise LdmoeError("libldmoe.so not found (set LDMOE_LIB; looked for %s); last error: %s" % (
            ", ".join(c for c in cands if c), err))
    _lib = _bind(lib)
    return _lib


def _bind(lib):
    """Declare the C signatures on a loaded library (libldmoe.so, or the lab build: ldmoe_lab.py)."""
    lib.ldmoe_grouped_mm_ex.argtypes = [ctypes.POINTER(_Params)]
    lib.ldmoe_convert_layout.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_int] * 5 + [ctypes.c_void_p]
    lib.ldmoe_packed_bytes.argtypes = [ctypes.c_int] * 4
    lib.ldmoe_packed_bytes.restype = ctypes.c_size_t
    lib.ldmoe_pack_weights.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p] + [ctypes.c_int] * 4 + [
        ctypes.c_void_p]
    lib.ldmoe_tile_info.argtypes = [ctypes.c_int64] + [ctypes.c_int] * 6 + [
        ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int64)]
    lib.ldmoe_get_topology.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.ldmoe_error_string.restype = ctypes.c_char_p
    lib.ldmoe_last_error.restype = ctypes.c_char_p
    lib.ldmoe_version.restype = ctypes.c_char_p
    return lib


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def library_path():
    """Absolute path of the libldmoe.so this module loaded (loading it if needed)."""
    lib = _load()
    info = _DlInfo()
    dladdr = ctypes.CDLL(None).dladdr
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    if dladdr(ctypes.cast(lib.ldmoe_version, ctypes.c_void_p), ctypes.byref(info)) and info.dli_fname:
        return os.path.realpath(info.dli_fname.decode())
    return lib._name


def _check(rc):
    if rc != 0:
        lib = _load()
        raise LdmoeError("ldmoe: %s: %s" % (lib.ldmoe_error_string(rc).decode(),
                                            lib.ldmoe_last_error().decode()))


def _enum(table, v, what):
    if isinstance(v, int):
        return v
    if v not in table:
        raise ValueError("%s must be one of %s, got %r" % (what, sorted(table), v))
    return table[v]


def _need(t, name, dtype, dev, ndim=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError("%s must be a torch.Tensor" % name)
    if t.dtype != dtype:
        raise TypeError("%s must be %s, got %s" % (name, dtype, t.dtype))
    if t.device != dev:
        raise ValueError("%s is on %s, expected %s" % (name, t.device, dev))
    if not t.is_contiguous():
        raise ValueError("%s must be contiguous" % name)
    if ndim is not None and t.dim() != ndim:
        raise ValueError("%s must have %d dims, got shape %s" % (name, ndim, tuple(t.shape)))


def grouped_mm(x, w, offs, layout=None, mode="auto", out=None, steal_waves=0.0, tile="auto"):
    """Y[t] = X[t] @ W[e(t)].T for tokens grouped by expert (offs: int32 cumulative end offsets).

    x [T, K] bf16; w [E, N, K] (plain) or [D, E, N/D, K] (localized) bf16, or a PackedWeights
    (pack()); layout: "plain", "localized" or "packed" (None: packed for a PackedWeights, else
    plain); offs [E] int32;
    out [T, N] bf16 (allocated when None; rows past offs[-1] are left as they were).
    mode: auto | aware | unaware | static. steal_waves <= 0: library default (2 waves).
    tile: "auto" or a name of TILES (or an enum ldmoe_tile value)."""
    p, out, dev = _params(x, w, offs, layout, mode, out, steal_waves, tile, TILES)
    with torch.cuda.device(dev):
        p.stream = torch.cuda.current_stream(dev).cuda_stream
        _check(_load().ldmoe_grouped_mm_ex(ctypes.byref(p)))
    return out


def _params(x, w, offs, layout, mode, out, steal_waves, tile, tiles):
    """Checked arguments of a grouped_mm as (_Params without its stream, out, device)."""
    _need_torch("grouped_mm")
    if layout is None:
        layout = "packed" if isinstance(w, PackedWeights) else "plain"
    lay = _enum(LAYOUTS, layout, "layout")
    if isinstance(w, PackedWeights) and lay != LAYOUTS["packed"]:
        raise TypeError("w is a PackedWeights but layout is %r" % (layout,))
    if not isinstance(x, torch.Tensor) or not x.is_cuda:
        raise ValueError("x must be a CUDA tensor")
    dev = x.device
    _need(x, "x", torch.bfloat16, dev, 2)
    if lay == LAYOUTS["packed"]:
        if not isinstance(w, PackedWeights):
            raise TypeError("layout 'packed' takes the PackedWeights that pack() returns")
        _need(w.data, "w.data", torch.uint8, dev, 1)
    else:
        _need(w, "w", torch.bfloat16, dev, 3 if lay == 0 else 4)
    _need(offs, "offs", torch.int32, dev, 1)
    T, K = x.shape
    if lay == LAYOUTS["packed"]:
        E, N, Kw, D = w.E, w.N, w.K, w.D
    elif lay == 0:
        E, N, Kw = w.shape
        D = 1
    else:
        D, E, ND, Kw = w.shape
        N = ND * D
    if Kw != K:
        raise ValueError("K mismatch: x has %d, w has %d" % (K, Kw))
    if offs.shape[0] != E:
        raise ValueError("offs has %d entries, w has %d experts" % (offs.shape[0], E))
    if out is None:
        out = torch.empty((T, N), dtype=torch.bfloat16, device=dev)
    else:
        _need(out, "out", torch.bfloat16, dev, 2)
        if tuple(out.shape) != (T, N):
            raise ValueError("out must be [%d, %d], got %s" % (T, N, tuple(out.shape)))
    p = _Params()
    wt = w.data if lay == LAYOUTS["packed"] else w
    p.x, p.w, p.offs, p.y = x.data_ptr(), wt.data_ptr(), offs.data_ptr(), out.data_ptr()
    p.T, p.E, p.N, p.K = T, E, N, K
    p.layout, p.num_domains = lay, D
    p.mode = _enum(MODES, mode, "mode")
    p.steal_waves = float(steal_waves)
    p.tile = _enum(tiles, tile, "tile")
    return p, out, dev


def tile_info(T, E, N, K, layout="plain", num_domains=1, tile="auto"):
    """(bm, bn, bound): weight rows and tokens per tile, and an upper bound on tile ids."""
    lib = _load()
    bm, bn, bound = ctypes.c_int(), ctypes.c_int(), ctypes.c_int64()
    _check(lib.ldmoe_tile_info(T, E, N, K, _enum(LAYOUTS, layout, "layout"), num_domains,
                               _enum(TILES, tile, "tile"), ctypes.byref(bm), ctypes.byref(bn),
                               ctypes.byref(bound)))
    return bm.value, bn.value, bound.value


def _convert(w, D, to_loc):
    _need_torch("to_localized" if to_loc else "to_plain")
    lib = _load()
    if to_loc:
        _need(w, "w", torch.bfloat16, w.device, 3)
        E, N, K = w.shape
        if N % D:
            raise ValueError("N = %d is not a multiple of D = %d" % (N, D))
        out = torch.empty((D, E, N // D, K), dtype=w.dtype, device=w.device)
    else:
        _need(w, "w", torch.bfloat16, w.device, 4)
        D, E, ND, K = w.shape
        N = ND * D
        out = torch.empty((E, N, K), dtype=w.dtype, device=w.device)
    with torch.cuda.device(w.device):
        _check(lib.ldmoe_convert_layout(w.data_ptr(), out.data_ptr(), E, N, K, D, int(to_loc),
                                        torch.cuda.current_stream(w.device).cuda_stream))
    return out


def to_localized(w, D):
    """[E, N, K] -> [D, E, N/D, K] (new tensor, device kernel)."""
    return _convert(w, D, True)


def to_plain(w):
    """[D, E, N/D, K] -> [E, N, K] (new tensor, device kernel)."""
    return _convert(w, w.shape[0], False)


def packed_bytes(E, N, K, D):
    """Bytes of the packed layout for these sizes (0 if they are invalid)."""
    return _load().ldmoe_packed_bytes(E, N, K, D)


def pack(w, D=None, out=None):
    """[E, N, K] (plain, give D) or [D, E, N/D, K] (localized) bf16 -> PackedWeights (device
    kernel on the current stream). Build it once, where the weights are loaded. The bytes go to
    new memory, or to `out`: a contiguous 1-D uint8 tensor of exactly packed_bytes(E, N, K, D)
    on w's device (e.g. one allocated up front, where an allocation policy expects it)."""
    _need_torch("pack")
    lib = _load()
    if not isinstance(w, torch.Tensor) or not w.is_cuda:
        raise ValueError("w must be a CUDA tensor")
    _need(w, "w", torch.bfloat16, w.device)
    if w.dim() == 3:
        E, N, K = w.shape
        D = 1 if D is None else D
        src = LAYOUTS["plain"]
    elif w.dim() == 4:
        Dw, E, ND, K = w.shape
        if D is not None and D != Dw:
            raise ValueError("w is localized over %d domains, D = %d given" % (Dw, D))
        D, N, src = Dw, ND * Dw, LAYOUTS["localized"]
    else:
        raise ValueError("w must be [E, N, K] or [D, E, N/D, K], got shape %s" % (tuple(w.shape),))
    if not 1 <= D <= MAX_DOMAINS:
        raise ValueError("D = %d must be in 1..%d" % (D, MAX_DOMAINS))
    n = lib.ldmoe_packed_bytes(E, N, K, D)
    if n == 0:
        raise ValueError("no packed layout for E=%d N=%d K=%d D=%d (N %% D must be 0, E*N < 2^31)" % (E, N, K, D))
    if out is None:
        data = torch.empty(n, dtype=torch.uint8, device=w.device)
    else:
        if (not isinstance(out, torch.Tensor) or out.dtype != torch.uint8 or out.dim() != 1
                or not out.is_contiguous() or out.device != w.device):
            raise ValueError("out must be a contiguous 1-D uint8 tensor on %s" % (w.device,))
        if out.numel() != n:
            raise ValueError("out has %d bytes; E=%d N=%d K=%d D=%d pack into %d" % (out.numel(), E, N, K, D, n))
        data = out
    with torch.cuda.device(w.device):
        _check(lib.ldmoe_pack_weights(w.data_ptr(), src, data.data_ptr(), E, N, K, D,
                                      torch.cuda.current_stream(w.device).cuda_stream))
    return PackedWeights(data, E, N, K, D)


def get_topology():
    """The map as this library's kernels see it (a Topology ctypes struct)."""
    t = Topology()
    _check(_load().ldmoe_get_topology(ctypes.byref(t), ctypes.sizeof(t)))
    return t


def version():
    return _load().ldmoe_version().decode()
