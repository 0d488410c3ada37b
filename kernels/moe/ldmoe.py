"""ldmoe.py — thin ctypes wrapper of libldmoe.so for PyTorch tensors.

    import ldmoe
    y = ldmoe.grouped_mm(x, w, offs)                    # w [E, N, K], like torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
    wl = ldmoe.to_localized(w, 2)                       # [2, E, N/2, K]
    y = ldmoe.grouped_mm(x, wl, offs, layout="localized", mode="aware")
    wp = ldmoe.pack(w, 2)                               # packed layout (PackedWeights), built once
    y = ldmoe.grouped_mm(x, wp, offs, mode="aware")     # same result, faster weight streaming

    w8, ws = ldmoe.quantize_rowwise(w)                  # FP8 e4m3 weights, a scale per output channel
    x8, xs = ldmoe.quantize_rowwise(x)                  # ... and per token
    y = ldmoe.grouped_mm_fp8(x8, ldmoe.pack(w8, 2), offs, xs, ldmoe.localize_scales(ws, 2))
    y = ldmoe.grouped_mm_fp8(x, ldmoe.pack(w8, 2), offs, None, ldmoe.localize_scales(ws, 2))  # bf16 x: quantized
                                                        # per token by the library first (quantize_fp8)

    out = ldmoe.moe(x, w13, w2, topk_ids, topk_weights)  # the whole MoE layer in one launch (ldmoe_moe)
    pk = ldmoe.pack_moe(w13, w2, D=2)                   # its packed weights (MoePacked), built once
    out = ldmoe.moe(x, pk, None, topk_ids, topk_weights)

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
           "get_topology", "Topology", "version", "LdmoeError", "LAYOUTS", "MODES", "TILES", "grouped_mm_fp8", "FP8_TILES", "SCALINGS",
           "quantize_rowwise", "quantize_block", "dequantize", "localize_scales", "quantize_fp8",
           "moe", "pack_moe", "MoePacked", "moe_reserve", "moe_errors", "MOE_MAX_EXPERTS", "MOE_MAX_TOPK"]

LAYOUTS = {"plain": 0, "localized": 1, "packed": 2}
MODES = {"auto": 0, "aware": 1, "unaware": 2, "static": 3}
# ldmoe.h's LDMOE_TILE_LIST, names in lower case without underscores (tests/moe/test_tile_list.py
# checks that the two agree; the pip package carries no header to read it from).
TILES = {"auto": 0, "128x128": 3, "128x256": 4, "64x16k4": 7, "64x64k4": 8, "ws256x128ew": 19, "ws128x64c16": 20,
         "ws128x128c16": 21}
# ldmoe.h's LDMOE_FP8_TILE_LIST (ldmoe_grouped_mm_fp8 only), named the same way.
FP8_TILES = {"auto": 0, "ws128x64c16fp8": 22, "ws128x128c16fp8": 23, "ws256x128fp8": 24,
             "ws256x64c16fp8": 25, "ws256x128c16fp8": 26}
SCALINGS = {"rowwise": 1, "block": 2}   # enum ldmoe_fp8_scaling
FP8_MAX = 448.0                          # largest finite float8_e4m3fn
FP8_BLOCK = 128                          # k (and weight rows) per block of the block scales
MAX_SMS = 256
MAX_DOMAINS = 8
TOPOLOGY_MAGIC = 0x4C445348
TOPO_VALID, TOPO_BALANCED, TOPO_AWARE, TOPO_INVERTED, TOPO_BOUND = 1, 2, 4, 8, 16
DOMAIN_NONE = 0xFFFFFFFF


class LdmoeError(RuntimeError):
    pass


class PackedWeights:
    """Weights in libldmoe's packed layout (ldmoe.h, LDMOE_LAYOUT_PACKED), made by pack().

    data: a uint8 CUDA tensor of ldmoe_packed_bytes(E, N, K, D) bytes (ldmoe_packed_bytes_fp8 for
    e4m3 weights) whose slice d (a contiguous 1/D of it) holds rows d*N/D .. (d+1)*N/D - 1 of every
    expert; E, N, K, D: the sizes it was packed for; dtype: the element type of the weights it
    holds, torch.bfloat16 (the default) or torch.float8_e4m3fn (read-only). Built from a saved
    buffer, the sizes are checked against it."""
    __slots__ = ("_data", "_E", "_N", "_K", "_D", "_dtype")

    def __init__(self, data, E, N, K, D, dtype=None):
        _need_torch("PackedWeights")
        if not isinstance(data, torch.Tensor) or data.dtype != torch.uint8 or data.dim() != 1:
            raise TypeError("PackedWeights data must be a 1-D uint8 tensor (what pack() returns)")
        dtype = torch.bfloat16 if dtype is None else dtype
        if dtype not in (torch.bfloat16, _fp8()):
            raise TypeError("PackedWeights dtype must be torch.bfloat16 or torch.float8_e4m3fn, got %s" % (dtype,))
        n = packed_bytes(E, N, K, D, dtype)
        if n == 0 or data.numel() != n:
            raise ValueError("PackedWeights: %d bytes, but E=%d N=%d K=%d D=%d pack into %d (%s)" % (
                data.numel(), E, N, K, D, n, dtype))
        self._data, self._E, self._N, self._K, self._D, self._dtype = data, E, N, K, D, dtype

    data = property(lambda self: self._data)
    E = property(lambda self: self._E)
    N = property(lambda self: self._N)
    K = property(lambda self: self._K)
    D = property(lambda self: self._D)
    dtype = property(lambda self: self._dtype)

    @property
    def device(self):
        return self._data.device

    def __repr__(self):
        return "PackedWeights(E=%d, N=%d, K=%d, D=%d, %s, %d bytes on %s)" % (
            self.E, self.N, self.K, self.D, str(self.dtype).replace("torch.", ""), self.data.numel(), self.data.device)


MOE_MAX_EXPERTS = 256   # ldmoe.h LDMOE_MOE_MAX_EXPERTS
MOE_MAX_TOPK = 16       # LDMOE_MOE_MAX_TOPK
MOE_ERR_BAD_ID = 1      # LDMOE_MOE_ERR_BAD_ID


class MoePacked:
    """w13 and w2 in the layer's packed layout (ldmoe.h, ldmoe_pack_moe_weights), made by pack_moe().

    w13, w2: bf16 (or, fp8 True, float8_e4m3fn) CUDA tensors of the plain shapes [E, 2I, H] and
    [E, H, I] whose bytes are in the packed order (index them only through the library); E, H, I, D: the sizes packed for."""
    __slots__ = ("_w13", "_w2", "_E", "_H", "_I", "_D", "_f8")

    def __init__(self, w13, w2, E, H, I, D, f8=False):
        self._w13, self._w2, self._E, self._H, self._I, self._D, self._f8 = w13, w2, E, H, I, D, f8

    w13 = property(lambda self: self._w13)
    w2 = property(lambda self: self._w2)
    E = property(lambda self: self._E)
    H = property(lambda self: self._H)
    I = property(lambda self: self._I)
    D = property(lambda self: self._D)
    fp8 = property(lambda self: self._f8)   # e4m3 weights (pack_moe of float8_e4m3fn tensors)

    @property
    def device(self):
        return self._w13.device

    def __repr__(self):
        return "MoePacked(E=%d, H=%d, I=%d, D=%d on %s)" % (self.E, self.H, self.I, self.D, self.device)


class _MoeParams(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("w13", ctypes.c_void_p), ("w2", ctypes.c_void_p),
                ("topk_ids", ctypes.c_void_p), ("topk_weights", ctypes.c_void_p), ("out", ctypes.c_void_p),
                ("T", ctypes.c_int64), ("E", ctypes.c_int32), ("H", ctypes.c_int32), ("I", ctypes.c_int32),
                ("k", ctypes.c_int32), ("layout", ctypes.c_int32), ("num_domains", ctypes.c_int32),
                ("mode", ctypes.c_int32), ("steal_waves", ctypes.c_float), ("stream", ctypes.c_void_p)]


class _MoeFp8Params(ctypes.Structure):
    _fields_ = [("base", _MoeParams), ("scaling", ctypes.c_int32), ("w13_scale", ctypes.c_void_p),
                ("w2_scale", ctypes.c_void_p), ("tokens", ctypes.c_int32), ("x_scale", ctypes.c_void_p)]


class _Params(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("w", ctypes.c_void_p), ("offs", ctypes.c_void_p),
                ("y", ctypes.c_void_p), ("T", ctypes.c_int64), ("E", ctypes.c_int32),
                ("N", ctypes.c_int32), ("K", ctypes.c_int32), ("layout", ctypes.c_int32),
                ("num_domains", ctypes.c_int32), ("mode", ctypes.c_int32),
                ("steal_waves", ctypes.c_float), ("stream", ctypes.c_void_p),
                ("tile", ctypes.c_int32)]


class _Fp8Params(ctypes.Structure):
    _fields_ = [("base", _Params), ("scaling", ctypes.c_int32), ("x_scale", ctypes.c_void_p),
                ("w_scale", ctypes.c_void_p)]


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


def _fp8():
    """torch.float8_e4m3fn (PyTorch >= 2.1), or an error that says what is missing."""
    dt = getattr(torch, "float8_e4m3fn", None)
    if dt is None:
        raise LdmoeError("this PyTorch (%s) has no torch.float8_e4m3fn" % torch.__version__)
    return dt


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
    lib.ldmoe_grouped_mm_fp8.argtypes = [ctypes.POINTER(_Fp8Params)]
    lib.ldmoe_convert_layout_fp8.argtypes = lib.ldmoe_convert_layout.argtypes
    lib.ldmoe_packed_bytes_fp8.argtypes = [ctypes.c_int] * 4
    lib.ldmoe_packed_bytes_fp8.restype = ctypes.c_size_t
    lib.ldmoe_pack_weights_fp8.argtypes = lib.ldmoe_pack_weights.argtypes
    lib.ldmoe_quantize_fp8.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                                       ctypes.c_void_p, ctypes.c_void_p]
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
    if (isinstance(w, PackedWeights) and w.dtype != torch.bfloat16) or (
            isinstance(w, torch.Tensor) and w.dtype == getattr(torch, "float8_e4m3fn", None)):
        raise TypeError("w holds float8_e4m3fn weights: use grouped_mm_fp8 (with their scales)")
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
                               _enum(dict(TILES, **FP8_TILES), tile, "tile"), ctypes.byref(bm), ctypes.byref(bn),
                               ctypes.byref(bound)))
    return bm.value, bn.value, bound.value


def _convert(w, D, to_loc):
    _need_torch("to_localized" if to_loc else "to_plain")
    lib = _load()
    fp8 = isinstance(w, torch.Tensor) and w.dtype == getattr(torch, "float8_e4m3fn", None)
    dt = w.dtype if fp8 else torch.bfloat16
    if to_loc:
        _need(w, "w", dt, w.device, 3)
        E, N, K = w.shape
        if N % D:
            raise ValueError("N = %d is not a multiple of D = %d" % (N, D))
        out = torch.empty((D, E, N // D, K), dtype=w.dtype, device=w.device)
    else:
        _need(w, "w", dt, w.device, 4)
        D, E, ND, K = w.shape
        N = ND * D
        out = torch.empty((E, N, K), dtype=w.dtype, device=w.device)
    if not w.is_cuda:
        raise ValueError("w must be a CUDA tensor")
    fn = lib.ldmoe_convert_layout_fp8 if fp8 else lib.ldmoe_convert_layout
    with torch.cuda.device(w.device):
        _check(fn(w.data_ptr(), out.data_ptr(), E, N, K, D, int(to_loc), torch.cuda.current_stream(w.device).cuda_stream))
    return out


def to_localized(w, D):
    """[E, N, K] -> [D, E, N/D, K] (new tensor, device kernel); bf16 or float8_e4m3fn."""
    return _convert(w, D, True)


def to_plain(w):
    """[D, E, N/D, K] -> [E, N, K] (new tensor, device kernel)."""
    return _convert(w, w.shape[0], False)


def packed_bytes(E, N, K, D, dtype=None):
    """Bytes of the packed layout for these sizes (0 if they are invalid); dtype None or
    torch.bfloat16: bf16 weights, torch.float8_e4m3fn (or the string "fp8"): e4m3 weights."""
    fp8 = dtype == "fp8" or (dtype is not None and torch is not None and dtype == getattr(torch, "float8_e4m3fn", 0))
    return (_load().ldmoe_packed_bytes_fp8 if fp8 else _load().ldmoe_packed_bytes)(E, N, K, D)


def pack(w, D=None, out=None):
    """[E, N, K] (plain, give D) or [D, E, N/D, K] (localized) bf16 or float8_e4m3fn ->
    PackedWeights (device kernel on the current stream). Build it once, where the weights are
    loaded. The bytes go to new memory, or to `out`: a contiguous 1-D uint8 tensor of exactly
    packed_bytes(E, N, K, D, w.dtype) on w's device (e.g. one allocated up front, where an
    allocation policy expects it). e4m3 weights need K % 16 == 0; their scales are not part of
    the packed buffer (localize_scales gives them the packed row order)."""
    _need_torch("pack")
    lib = _load()
    if not isinstance(w, torch.Tensor) or not w.is_cuda:
        raise ValueError("w must be a CUDA tensor")
    fp8 = w.dtype == getattr(torch, "float8_e4m3fn", None)
    _need(w, "w", w.dtype if fp8 else torch.bfloat16, w.device)
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
    n = (lib.ldmoe_packed_bytes_fp8 if fp8 else lib.ldmoe_packed_bytes)(E, N, K, D)
    if n == 0:
        raise ValueError("no packed layout for E=%d N=%d K=%d D=%d (N %% D must be 0, E*N < 2^31%s)" % (
            E, N, K, D, ", K % 16 == 0 for float8_e4m3fn" if fp8 else ""))
    if out is None:
        data = torch.empty(n, dtype=torch.uint8, device=w.device)
    else:
        if (not isinstance(out, torch.Tensor) or out.dtype != torch.uint8 or out.dim() != 1
                or not out.is_contiguous() or out.device != w.device):
            raise ValueError("out must be a contiguous 1-D uint8 tensor on %s" % (w.device,))
        if out.numel() != n:
            raise ValueError("out has %d bytes; E=%d N=%d K=%d D=%d pack into %d" % (out.numel(), E, N, K, D, n))
        data = out
    fn = lib.ldmoe_pack_weights_fp8 if fp8 else lib.ldmoe_pack_weights
    with torch.cuda.device(w.device):
        _check(fn(w.data_ptr(), src, data.data_ptr(), E, N, K, D, torch.cuda.current_stream(w.device).cuda_stream))
    return PackedWeights(data, E, N, K, D, w.dtype)


_moe_bound = False


def _moe_lib():
    """libldmoe.so with the layer's signatures declared (only the product library has them)."""
    global _moe_bound
    lib = _load()
    if not _moe_bound:
        lib.ldmoe_moe.argtypes = [ctypes.POINTER(_MoeParams)]
        lib.ldmoe_moe_reserve.argtypes = [ctypes.c_int64] + [ctypes.c_int] * 4 + [ctypes.c_void_p]
        lib.ldmoe_moe_errors.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)]
        lib.ldmoe_moe_packed_bytes.argtypes = [ctypes.c_int] * 4 + [ctypes.POINTER(ctypes.c_size_t)] * 2
        lib.ldmoe_pack_moe_weights.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 4 + [ctypes.c_void_p]
        lib.ldmoe_moe_fp8.argtypes = [ctypes.POINTER(_MoeFp8Params)]
        lib.ldmoe_pack_moe_weights_fp8.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 4 + [ctypes.c_void_p]
        _moe_bound = True
    return lib


def pack_moe(w13, w2, D=None):
    """Plain w13 [E, 2I, H] and w2 [E, H, I], bf16 or float8_e4m3fn (weight-only FP8: moe() then
    takes their 128 x 128 block or per-row scales) -> MoePacked for num_domains D (default: 1) (device
    kernels on the current stream). Build it once, where the weights are loaded."""
    _need_torch("pack_moe")
    lib = _moe_lib()
    if not isinstance(w13, torch.Tensor) or not w13.is_cuda:
        raise ValueError("w13 must be a CUDA tensor")
    dev = w13.device
    f8 = w13.dtype == getattr(torch, "float8_e4m3fn", None)
    dt = w13.dtype if f8 else torch.bfloat16
    _need(w13, "w13", dt, dev, 3)
    _need(w2, "w2", dt, dev, 3)
    E, I2, H = w13.shape
    if I2 % 2:
        raise ValueError("w13 must be [E, 2I, H], got shape %s" % (tuple(w13.shape),))
    I = I2 // 2
    if tuple(w2.shape) != (E, H, I):
        raise ValueError("w2 must be [E, H, I] = [%d, %d, %d], got %s" % (E, H, I, tuple(w2.shape)))
    D = 1 if D is None else int(D)
    b13, b2 = ctypes.c_size_t(), ctypes.c_size_t()
    _check(lib.ldmoe_moe_packed_bytes(E, H, I, D, ctypes.byref(b13), ctypes.byref(b2)))
    p13, p2 = torch.empty_like(w13), torch.empty_like(w2)
    fn = lib.ldmoe_pack_moe_weights_fp8 if f8 else lib.ldmoe_pack_moe_weights
    with torch.cuda.device(dev):
        _check(fn(w13.data_ptr(), w2.data_ptr(), p13.data_ptr(), p2.data_ptr(), E, H, I, D,
                  torch.cuda.current_stream(dev).cuda_stream))
    return MoePacked(p13, p2, E, H, I, D, f8)


def moe(x, w13, w2, topk_ids, topk_weights, *, out=None, mode="auto", steal_waves=0.0, w13_scale=None,
        w2_scale=None, tokens=None, x_scale=None):
    """The whole MoE layer in one launch: out[t] = sum_j topk_weights[t, j] *
    (silu(x[t] @ gate_e.T) * (x[t] @ up_e.T)) @ w2_e.T with e = topk_ids[t, j] (ldmoe.h ldmoe_moe).

    x [T, H] bf16; w13 [E, 2I, H] bf16 (gate rows 0..I-1, up rows I..2I-1) and w2 [E, H, I] bf16,
    or w13 = a MoePacked (pack_moe) with w2 None (or the same MoePacked, or its .w2); topk_ids [T, k] int32; topk_weights [T, k] fp32;
    out [T, H] bf16 (allocated when None). H and I multiples of 64 * D, E <= 256, k <= 16.
    Ids outside [0, E) contribute nothing and set a flag that moe_errors() returns. FP8 weights
    (a MoePacked of e4m3 tensors) take w13_scale [E, 2I/128, H/128] and w2_scale [E, H/128, I/128]
    fp32 (ldmoe_moe_fp8; H and I multiples of 128), or a scale per weight row, [E, 2I] and [E, H];
    tokens="fp8" with them: w8a8 where a wgmma tile runs (x and h quantized to e4m3 inside, a scale
    per token and 128 k of x, 64 k of h; LDMOE_FP8_TOKENS_E4M3), "bf16" (the default) weight-only.
    x may come in float8_e4m3fn with x_scale [T, H/128] fp32 (DeepSeek's 1 x 128: x[t, c] stands for
    x[t, c] * x_scale[t, c // 128]; LDMOE_FP8_TOKENS_E4M3_X): w8a8, tokens "fp8" (or None). Runs on the
    current stream; the first call at a size must come before a CUDA graph capture (or call
    moe_reserve)."""
    _need_torch("moe")
    lib = _moe_lib()
    if not isinstance(x, torch.Tensor) or not x.is_cuda:
        raise ValueError("x must be a CUDA tensor")
    dev = x.device
    x8 = x.dtype == getattr(torch, "float8_e4m3fn", None)
    _need(x, "x", x.dtype if x8 else torch.bfloat16, dev, 2)
    T, H = x.shape
    if tokens is None:
        tokens = "fp8" if x8 else "bf16"
    if isinstance(w13, MoePacked):
        if w2 is not None and w2 is not w13 and w2 is not w13.w2:
            raise ValueError("w13 is a MoePacked: pass w2=None (it holds both)")
        pk = w13
        if pk.device != dev:
            raise ValueError("the packed weights are on %s, x on %s" % (pk.device, dev))
        E, Hw, I, D, lay = pk.E, pk.H, pk.I, pk.D, LAYOUTS["packed"]
        w13t, w2t = pk.w13, pk.w2
    else:
        _need(w13, "w13", torch.bfloat16, dev, 3)
        _need(w2, "w2", torch.bfloat16, dev, 3)
        E, I2, Hw = w13.shape
        if I2 % 2:
            raise ValueError("w13 must be [E, 2I, H], got shape %s" % (tuple(w13.shape),))
        I, D, lay = I2 // 2, 1, LAYOUTS["plain"]
        if tuple(w2.shape) != (E, Hw, I):
            raise ValueError("w2 must be [E, H, I] = [%d, %d, %d], got %s" % (E, Hw, I, tuple(w2.shape)))
        w13t, w2t = w13, w2
    if Hw != H:
        raise ValueError("H mismatch: x has %d, the weights %d" % (H, Hw))
    _need(topk_ids, "topk_ids", torch.int32, dev, 2)
    _need(topk_weights, "topk_weights", torch.float32, dev, 2)
    if topk_ids.shape[0] != T or tuple(topk_weights.shape) != tuple(topk_ids.shape):
        raise ValueError("topk_ids and topk_weights must both be [T=%d, k], got %s and %s" % (
            T, tuple(topk_ids.shape), tuple(topk_weights.shape)))
    k = topk_ids.shape[1]
    if not 1 <= k <= MOE_MAX_TOPK:
        raise ValueError("k = %d must be in 1..%d" % (k, MOE_MAX_TOPK))
    if not 1 <= E <= MOE_MAX_EXPERTS:
        raise ValueError("E = %d must be in 1..%d" % (E, MOE_MAX_EXPERTS))
    if H % (64 * D) or I % (64 * D):
        raise ValueError("H = %d and I = %d must be multiples of 64 * D = %d" % (H, I, 64 * D))
    if out is None:
        out = torch.empty((T, H), dtype=torch.bfloat16, device=dev)
    else:
        _need(out, "out", torch.bfloat16, dev, 2)
        if tuple(out.shape) != (T, H):
            raise ValueError("out must be [%d, %d], got %s" % (T, H, tuple(out.shape)))
    p = _MoeParams()
    p.x, p.w13, p.w2 = x.data_ptr(), w13t.data_ptr(), w2t.data_ptr()
    p.topk_ids, p.topk_weights, p.out = topk_ids.data_ptr(), topk_weights.data_ptr(), out.data_ptr()
    p.T, p.E, p.H, p.I, p.k, p.layout, p.num_domains = T, E, H, I, k, lay, D
    p.mode = _enum(MODES, mode, "mode")
    p.steal_waves = float(steal_waves)
    f8 = isinstance(w13, MoePacked) and w13.fp8
    if tokens not in ("bf16", "fp8"):
        raise ValueError("tokens must be 'bf16' or 'fp8', got %r" % (tokens,))
    if tokens == "fp8" and not f8:
        raise ValueError("tokens='fp8' needs FP8 weights (pack_moe of float8_e4m3fn tensors)")
    if x8 and tokens != "fp8":
        raise ValueError("x in float8_e4m3fn runs w8a8: tokens must be 'fp8' (or None), got %r" % (tokens,))
    if x8 != (x_scale is not None):
        raise ValueError("x_scale [T, H/128] fp32 goes with x in float8_e4m3fn, and only with it")
    if f8:
        if H % 128 or I % 128:
            raise ValueError("FP8 weights: H = %d and I = %d must be multiples of 128" % (H, I))
        # rowwise ([E, 2I], [E, H]: a scale per weight row) when w13_scale has two dimensions
        row = isinstance(w13_scale, torch.Tensor) and w13_scale.dim() == 2
        shapes = ((E, 2 * I), (E, H)) if row else ((E, 2 * I // 128, H // 128), (E, H // 128, I // 128))
        for t, name, shape in ((w13_scale, "w13_scale", shapes[0]), (w2_scale, "w2_scale", shapes[1])):
            if t is None:
                raise ValueError("FP8 weights need %s %s (fp32 %s scales)" % (name, shape, "row" if row else "block"))
            _need(t, name, torch.float32, dev, len(shape))
            if tuple(t.shape) != shape:
                raise ValueError("%s must be %s, got %s" % (name, shape, tuple(t.shape)))
        f = _MoeFp8Params()
        f.base, f.scaling = p, 1 if row else 2   # LDMOE_FP8_ROWWISE / LDMOE_FP8_BLOCK
        f.w13_scale, f.w2_scale = w13_scale.data_ptr(), w2_scale.data_ptr()
        f.tokens = 2 if x8 else 1 if tokens == "fp8" else 0   # LDMOE_FP8_TOKENS_E4M3_X / _E4M3 / _BF16
        if x8:
            _need(x_scale, "x_scale", torch.float32, dev, 2)
            if tuple(x_scale.shape) != (T, H // 128):
                raise ValueError("x_scale must be [T, H/128] = [%d, %d], got %s" % (T, H // 128, tuple(x_scale.shape)))
            f.x_scale = x_scale.data_ptr()
    elif w13_scale is not None or w2_scale is not None:
        raise ValueError("w13_scale / w2_scale are for FP8 weights (pack_moe of float8_e4m3fn tensors)")
    with torch.cuda.device(dev):
        if f8:
            f.base.stream = torch.cuda.current_stream(dev).cuda_stream
            _check(lib.ldmoe_moe_fp8(ctypes.byref(f)))
        else:
            p.stream = torch.cuda.current_stream(dev).cuda_stream
            _check(lib.ldmoe_moe(ctypes.byref(p)))
    return out


def moe_reserve(T, E, H, I, k, device=None):
    """Size the current stream's layer workspace for calls up to these sizes (before a capture)."""
    _need_torch("moe_reserve")
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    with torch.cuda.device(dev):
        _check(_moe_lib().ldmoe_moe_reserve(T, E, H, I, k, torch.cuda.current_stream(dev).cuda_stream))


def moe_errors(device=None):
    """Read and clear the layer's error flags on the current stream (1: an id outside [0, E)
    was seen); synchronizes the stream."""
    _need_torch("moe_errors")
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    v = ctypes.c_uint32()
    with torch.cuda.device(dev):
        _check(_moe_lib().ldmoe_moe_errors(torch.cuda.current_stream(dev).cuda_stream, ctypes.byref(v)))
    return v.value


def get_topology():
    """The map as this library's kernels see it (a Topology ctypes struct)."""
    t = Topology()
    _check(_load().ldmoe_get_topology(ctypes.byref(t), ctypes.sizeof(t)))
    return t


def version():
    return _load().ldmoe_version().decode()


# ---- FP8 e4m3 (ldmoe.h, ldmoe_fp8_params_t; doc/moe.md "FP8") -----------------------------------

def _is_fp8(t):
    return isinstance(t, torch.Tensor) and t.dtype == getattr(torch, "float8_e4m3fn", None)


def _amax_scale(amax):
    # amax times fp32(1/448), spelled out: torch computes `tensor / scalar` that way on the GPU
    # but not always on the CPU, and the library's quantize_fp8 must agree bit for bit.
    # A zero block gets scale 1 (its values quantize to 0 either way, and 0/0 never appears).
    return torch.where(amax > 0, amax * (1.0 / FP8_MAX), torch.ones_like(amax))


def quantize_rowwise(t):
    """(q, scale): t [..., K] (any float dtype, any device) as float8_e4m3fn with one fp32 scale
    per row of the last dimension, t ≈ q.float() * scale[..., None]: scale [...] (weights
    [E, N, K] -> [E, N]; tokens [T, K] -> [T]), the row's amax mapped to 448."""
    _need_torch("quantize_rowwise")
    tf = t.float()
    scale = _amax_scale(tf.abs().amax(dim=-1))
    q = (tf / scale.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(_fp8())
    return q, scale


def quantize_block(t, rows=FP8_BLOCK, cols=FP8_BLOCK):
    """(q, scale): t [..., R, K] as float8_e4m3fn with one fp32 scale per rows x cols block of the
    last two dimensions: scale [..., ceil(R/rows), ceil(K/cols)]. Weights: rows = cols = 128
    (DeepSeek-V3's [E, N/128, K/128]); tokens: quantize_block(x, 1) gives [T, ceil(K/128)] 1x128
    scales, returned as the [T, KB] view of token-contiguous [KB, T] memory, which is the order
    grouped_mm_fp8 reads (so it takes them without a copy)."""
    _need_torch("quantize_block")
    tf = t.float()
    R, K = tf.shape[-2], tf.shape[-1]
    RB, KB = -(-R // rows), -(-K // cols)
    pad = torch.nn.functional.pad(tf, (0, KB * cols - K, 0, RB * rows - R))
    blocks = pad.reshape(*tf.shape[:-2], RB, rows, KB, cols)
    scale = _amax_scale(blocks.abs().amax(dim=(-3, -1)))                         # [..., RB, KB]
    q = (blocks / scale[..., :, None, :, None]).clamp(-FP8_MAX, FP8_MAX)
    q = q.reshape(*tf.shape[:-2], RB * rows, KB * cols)[..., :R, :K].contiguous().to(_fp8())
    if rows == 1 and tf.dim() == 2:
        scale = scale.t().contiguous().t()
    return q, scale


def dequantize(q, scale, scaling):
    """fp32 values of e4m3 `q` with its scales: scaling "rowwise" (scale [...] per row of the last
    dimension) or "block" (scale [..., ceil(R/rb), ceil(K/128)], rb = 1 or 128 from its shape).
    The reference the FP8 results are checked against is computed from these."""
    _need_torch("dequantize")
    qf = q.float()
    if scaling == "rowwise":
        return qf * scale.float().unsqueeze(-1)
    if scaling != "block":
        raise ValueError("scaling must be 'rowwise' or 'block', got %r" % (scaling,))
    R, K = qf.shape[-2], qf.shape[-1]
    rb = 1 if scale.shape[-2] == R else FP8_BLOCK   # 1 x 128 (tokens) or 128 x 128 (weights); R = 1: the same
    s = scale.float().repeat_interleave(rb, dim=-2)[..., :R, :].repeat_interleave(FP8_BLOCK, dim=-1)[..., :K]
    return qf * s


def localize_scales(w_scale, D, scaling="rowwise"):
    """Weight scales of plain [E, N, K] weights in the row order of the localized and packed
    layouts over D domains: rowwise [E, N] -> [D, E, N/D]; block [E, N/128, KB] ->
    [D, E, N/D/128, KB] (needs N/D to be a multiple of 128, so that no scale block straddles two
    slices). Any device; a new contiguous tensor."""
    _need_torch("localize_scales")
    if scaling == "rowwise":
        if w_scale.dim() != 2:
            raise ValueError("rowwise weight scales must be [E, N], got shape %s" % (tuple(w_scale.shape),))
        E, N = w_scale.shape
        if N % D:
            raise ValueError("N = %d is not a multiple of D = %d" % (N, D))
        return w_scale.reshape(E, D, N // D).permute(1, 0, 2).contiguous()
    if scaling == "block":
        if w_scale.dim() != 3:
            raise ValueError("block weight scales must be [E, N/128, KB], got shape %s" % (tuple(w_scale.shape),))
        E, NB, KB = w_scale.shape
        if NB % D:
            raise ValueError("block scales localize only when N/D is a multiple of 128 (%d row blocks, D = %d)" % (NB, D))
        return w_scale.reshape(E, D, NB // D, KB).permute(1, 0, 2, 3).contiguous()
    raise ValueError("scaling must be 'rowwise' or 'block', got %r" % (scaling,))


def _quantize_checked(x, sch):
    """quantize_fp8's checks and outputs (x8, scale, launch): launch() queues the kernel on the
    current stream of x's device."""
    if not isinstance(x, torch.Tensor) or x.dtype != torch.bfloat16:
        raise TypeError("x must be a bfloat16 torch.Tensor, got %s" % (getattr(x, "dtype", type(x).__name__),))
    if x.dim() != 2:
        raise ValueError("x must be [T, K], got shape %s" % (tuple(x.shape),))
    T, K = x.shape
    if K % 16:
        raise ValueError("K = %d must be a multiple of 16" % K)
    if not x.is_contiguous():
        raise ValueError("x must be contiguous")
    if not x.is_cuda:
        raise ValueError("x must be a CUDA tensor")
    x8 = torch.empty((T, K), dtype=_fp8(), device=x.device)
    if sch == SCALINGS["rowwise"]:
        scale = torch.empty((T,), dtype=torch.float32, device=x.device)
    else:
        scale = torch.empty((-(-K // FP8_BLOCK), T), dtype=torch.float32, device=x.device).t()   # [KB, T] memory

    def launch():
        with torch.cuda.device(x.device):
            _check(_load().ldmoe_quantize_fp8(x.data_ptr(), T, K, sch, x8.data_ptr(), scale.data_ptr(),
                                              torch.cuda.current_stream(x.device).cuda_stream))
    return x8, scale, launch


def quantize_fp8(x, scaling="rowwise"):
    """(x8, scale): bf16 activations x [T, K] (contiguous, on the GPU, K % 16 == 0) quantized by
    the library in one kernel (ldmoe_quantize_fp8): rowwise gives scale [T], block [T, KB] 1x128
    scales (token-contiguous memory, the order grouped_mm_fp8 reads). The same values as
    quantize_rowwise(x) / quantize_block(x, 1), bit for bit; asynchronous on the current stream."""
    _need_torch("quantize_fp8")
    x8, scale, launch = _quantize_checked(x, _enum(SCALINGS, scaling, "scaling"))
    launch()
    return x8, scale


def _fp8_params(x, w, offs, x_scale, w_scale, scaling, layout, mode, out, steal_waves, tile):
    """Checked arguments of grouped_mm_fp8 as (_Fp8Params without its stream, out, device, keep,
    pre): keep holds the tensors made here (a reordered x_scale; bf16 x's quantized copy and
    scales) that must live until the launch; pre is None, or (bf16 x) the call that queues the
    quantization kernel, to be made after every other check, right before the GEMM.
    Types, dtypes and shapes are checked first, devices and memory order last, so every
    refusal but the device ones can be seen without a GPU (tests/moe/test_ldmoe_py.py)."""
    _need_torch("grouped_mm_fp8")
    f8 = _fp8()
    sch = _enum(SCALINGS, scaling, "scaling")
    mode_v, tile_v = _enum(MODES, mode, "mode"), _enum(FP8_TILES, tile, "tile")
    if layout is None:
        layout = "packed" if isinstance(w, PackedWeights) else "plain"
    lay = _enum(LAYOUTS, layout, "layout")
    if isinstance(w, PackedWeights) and lay != LAYOUTS["packed"]:
        raise TypeError("w is a PackedWeights but layout is %r" % (layout,))

    def typed(t, name, dtype, ndim):
        if not isinstance(t, torch.Tensor):
            raise TypeError("%s must be a torch.Tensor" % name)
        if t.dtype != dtype:
            raise TypeError("%s must be %s, got %s%s" % (name, dtype, t.dtype, " (or bfloat16 with x_scale None)"
                                                         if name == "x" else ""))
        if t.dim() != ndim:
            raise ValueError("%s must have %d dims, got shape %s" % (name, ndim, tuple(t.shape)))

    quant = isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16
    if quant and x_scale is not None:
        raise ValueError("x is bfloat16, so grouped_mm_fp8 quantizes it itself: pass x_scale=None")
    if not quant:
        typed(x, "x", f8, 2)
    elif x.dim() != 2:
        raise ValueError("x must have 2 dims, got shape %s" % (tuple(x.shape),))
    elif x.shape[1] % 16:
        raise ValueError("K = %d must be a multiple of 16" % x.shape[1])
    if lay == LAYOUTS["packed"]:
        if not isinstance(w, PackedWeights):
            raise TypeError("layout 'packed' takes the PackedWeights that pack() returns")
        if w.dtype != f8:
            raise TypeError("w is a PackedWeights of %s weights; grouped_mm_fp8 takes float8_e4m3fn ones" % (w.dtype,))
        E, N, Kw, D = w.E, w.N, w.K, w.D
        wt = w.data
    else:
        typed(w, "w", f8, 3 if lay == 0 else 4)
        if lay == 0:
            (E, N, Kw), D = w.shape, 1
        else:
            D, E, ND, Kw = w.shape
            N = ND * D
        wt = w
    typed(offs, "offs", torch.int32, 1)
    T, K = x.shape
    if Kw != K:
        raise ValueError("K mismatch: x has %d, w has %d" % (K, Kw))
    if offs.shape[0] != E:
        raise ValueError("offs has %d entries, w has %d experts" % (offs.shape[0], E))
    KB = -(-K // FP8_BLOCK)
    if quant:
        x_scale = torch.empty((T,) if sch == SCALINGS["rowwise"] else (T, KB), dtype=torch.float32)   # shape stand-in
    elif not isinstance(x_scale, torch.Tensor) or x_scale.dtype != torch.float32:
        raise TypeError("x_scale must be a float32 torch.Tensor (or x bfloat16 and x_scale None)")
    if not isinstance(w_scale, torch.Tensor) or w_scale.dtype != torch.float32:
        raise TypeError("w_scale must be a float32 torch.Tensor")
    if sch == SCALINGS["rowwise"]:
        want_x = [(T,), (T, 1)]
        want_w = (E, N) if lay == 0 else (D, E, N // D)
    else:
        want_x = [(T, KB)]
        want_w = (E, -(-N // FP8_BLOCK), KB) if lay == 0 else (D, E, -(-(N // D) // FP8_BLOCK), KB)
    if tuple(x_scale.shape) not in want_x:
        raise ValueError("x_scale for %s scaling must be %s, got %s" % (
            "rowwise" if sch == 1 else "block", " or ".join(str(list(s)) for s in want_x), list(x_scale.shape)))
    if tuple(w_scale.shape) != want_w:
        raise ValueError("w_scale for %s scaling of %s weights must be %s, got %s%s" % (
            "rowwise" if sch == 1 else "block", [k for k, v in LAYOUTS.items() if v == lay][0], list(want_w),
            list(w_scale.shape), "" if lay == 0 else " (localize_scales gives the localized order)"))
    if out is not None:
        typed(out, "out", torch.bfloat16, 2)
        if tuple(out.shape) != (T, N):
            raise ValueError("out must be [%d, %d], got %s" % (T, N, tuple(out.shape)))
    # memory order, then devices
    for t, name in ((x, "x"), (wt, "w"), (offs, "offs"), (w_scale, "w_scale")) + (
            ((out, "out"),) if out is not None else ()):
        if not t.is_contiguous():
            raise ValueError("%s must be contiguous" % name)
    if sch == SCALINGS["rowwise"] and not x_scale.is_contiguous():
        raise ValueError("x_scale must be contiguous")
    if not x.is_cuda:
        raise ValueError("x must be a CUDA tensor")
    dev = x.device
    for t, name in ((wt, "w.data" if lay == LAYOUTS["packed"] else "w"), (offs, "offs")) + (
            () if quant else ((x_scale, "x_scale"),)) + ((w_scale, "w_scale"),) + (
            ((out, "out"),) if out is not None else ()):
        if t.device != dev:
            raise ValueError("%s is on %s, expected %s" % (name, t.device, dev))
    keep, launch = [], None
    if quant:
        x, x_scale, launch = _quantize_checked(x, sch)
        keep += [x, x_scale]
    if sch == SCALINGS["block"] and not x_scale.t().is_contiguous():   # the library reads [KB, T] memory
        x_scale = x_scale.t().contiguous().t()
        keep.append(x_scale)
    if out is None:
        out = torch.empty((T, N), dtype=torch.bfloat16, device=dev)
    p = _Fp8Params()
    b = p.base
    b.x, b.w, b.offs, b.y = x.data_ptr(), wt.data_ptr(), offs.data_ptr(), out.data_ptr()
    b.T, b.E, b.N, b.K = T, E, N, K
    b.layout, b.num_domains = lay, D
    b.mode = mode_v
    b.steal_waves = float(steal_waves)
    b.tile = tile_v
    p.scaling, p.x_scale, p.w_scale = sch, x_scale.data_ptr(), w_scale.data_ptr()
    return p, out, dev, keep, launch


def grouped_mm_fp8(x, w, offs, x_scale, w_scale, scaling="rowwise", layout=None, mode="auto", out=None,
                   steal_waves=0.0, tile="auto"):
    """Y[t] = bf16(sx * sw * (X8[t] @ W8[e(t)].T)) for float8_e4m3fn tokens and weights (ldmoe.h).

    x [T, K] float8_e4m3fn, or bfloat16 with x_scale None: then the library quantizes it first,
    with `scaling`'s activation scales (quantize_fp8: one more kernel on the stream);
    w [E, N, K] (plain), [D, E, N/D, K] (localized) float8_e4m3fn, or a PackedWeights of them
    (pack()); offs [E] int32 as for grouped_mm.
    scaling "rowwise": x_scale [T] (or [T, 1]), w_scale [E, N] plain, [D, E, N/D] otherwise
    (localize_scales); "block": x_scale [T, ceil(K/128)] (1x128; token-contiguous memory, as
    quantize_block returns it, is used as is, other strides are copied into that order),
    w_scale [E, ceil(N/128), ceil(K/128)] plain, [D, E, ceil(N/D/128), ceil(K/128)] otherwise.
    All float32, on x's device. out [T, N] bf16 (allocated when None). mode, steal_waves as for
    grouped_mm; tile: "auto" or a name of FP8_TILES. Needs compute capability 9.0. With bf16 x,
    every check made here precedes the quantization kernel; the library's own (compute
    capability, a tile given by value) come after it, and then nothing is written to out."""
    p, out, dev, keep, pre = _fp8_params(x, w, offs, x_scale, w_scale, scaling, layout, mode, out, steal_waves, tile)
    with torch.cuda.device(dev):
        p.base.stream = torch.cuda.current_stream(dev).cuda_stream
        if pre:
            pre()
        _check(_load().ldmoe_grouped_mm_fp8(ctypes.byref(p)))
    del keep   # freed once queued: the caching allocator reuses it only in this stream's order
    return out
