"""common.py — helpers shared by the two-GPU checks: result digests and the shim's host API
through ctypes (absent when the program runs without the shim)."""
import ctypes
import hashlib
import os
import sys


def digest(t):
    import torch
    return hashlib.sha256(t.detach().contiguous().cpu().view(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


class PtrInfo(ctypes.Structure):
    _fields_ = [("base", ctypes.c_uint64), ("size", ctypes.c_uint64), ("reserved", ctypes.c_uint64),
                ("slice", ctypes.c_uint64), ("device", ctypes.c_int), ("num_domains", ctypes.c_int),
                ("domain_of", ctypes.c_int * 8), ("rule", ctypes.c_char * 64), ("backend", ctypes.c_char * 16)]


# The struct of kernels/ldshim_topology.h, as ldmoe.py mirrors it (test-moe-abi checks that
# mirror against the header; a second copy here was one version behind).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "kernels", "moe"))
from ldmoe import Topology  # noqa: E402  (importing ldmoe needs neither torch nor the library)


def shim():
    """The preloaded libldshim (its exported API), or None."""
    lib = ctypes.CDLL(None)
    try:
        lib.ldshim_pointer_info
    except AttributeError:
        return None
    lib.ldshim_pointer_info.argtypes = [ctypes.c_uint64, ctypes.POINTER(PtrInfo)]
    lib.ldshim_get_topology.argtypes = [ctypes.c_int, ctypes.POINTER(Topology), ctypes.c_size_t]
    lib.ldshim_version.restype = ctypes.c_char_p
    return lib


def pointer_info(lib, ptr):
    info = PtrInfo()
    return info if lib.ldshim_pointer_info(ptr, ctypes.byref(info)) == 0 else None


def shim_topology(lib, dev):
    t = Topology()
    return t if lib.ldshim_get_topology(dev, ctypes.byref(t), ctypes.sizeof(t)) == 0 else None
