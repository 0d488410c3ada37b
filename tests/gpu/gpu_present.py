#!/usr/bin/env python3
"""gpu_present.py — is an NVIDIA GPU usable here? (`make test-gpu` asks before it runs.)

    python3 tests/gpu/gpu_present.py [--libcuda PATH] [--for NAME] [--quiet]

Exit 0 and "NAME: GPU: ..." when CUDA works: libcuda.so.1 loads, is not the project's fake
driver (tests/fake, which exports fakecuda_counts), cuInit(0) succeeds and cuDeviceGetCount
reports at least one device. Exit 1 with the reason otherwise; `nvidia-smi -L` is asked too, so
the reason says when the driver's tool sees a GPU that CUDA cannot use (CUDA_VISIBLE_DEVICES,
a driver/library mismatch, a container without the device nodes).

  --libcuda PATH   the driver library to check (default $LDSHIM_GPU_LIBCUDA, else libcuda.so.1
                   through the dynamic linker)
  --for NAME       prefix of the message (default gpu_present)
  --quiet          no message
Environment: LDSHIM_GPU=1 says yes without looking, LDSHIM_GPU=0 says no; NVIDIA_SMI=PATH
(default nvidia-smi on the PATH).
"""
import argparse
import ctypes
import os
import subprocess
import sys

CUDA_ERRORS = {1: "CUDA_ERROR_INVALID_VALUE", 3: "CUDA_ERROR_NOT_INITIALIZED",
               34: "CUDA_ERROR_STUB_LIBRARY", 35: "CUDA_ERROR_INSUFFICIENT_DRIVER",
               46: "CUDA_ERROR_DEVICES_UNAVAILABLE", 100: "CUDA_ERROR_NO_DEVICE",
               101: "CUDA_ERROR_INVALID_DEVICE", 304: "CUDA_ERROR_OPERATING_SYSTEM",
               803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", 999: "CUDA_ERROR_UNKNOWN"}


def cuda_devices(libcuda):
    """(device count, None) when CUDA works through `libcuda`, else (0, reason)."""
    try:
        lib = ctypes.CDLL(libcuda)
    except OSError as e:
        return 0, "%s does not load (%s)" % (libcuda, str(e).split(":")[-1].strip() or e)
    if hasattr(lib, "fakecuda_counts"):
        return 0, "%s is the project's fake CUDA driver (tests/fake), not a GPU" % libcuda
    for fn in ("cuInit", "cuDeviceGetCount"):
        if not hasattr(lib, fn):
            return 0, "%s has no %s" % (libcuda, fn)
    lib.cuInit.argtypes = [ctypes.c_uint]
    rc = lib.cuInit(0)
    if rc != 0:
        return 0, "cuInit: %s" % CUDA_ERRORS.get(rc, "error %d" % rc)
    n = ctypes.c_int(0)
    rc = lib.cuDeviceGetCount(ctypes.byref(n))
    if rc != 0:
        return 0, "cuDeviceGetCount: %s" % CUDA_ERRORS.get(rc, "error %d" % rc)
    if n.value < 1:
        return 0, "CUDA reports no device"
    return n.value, None


def smi_gpus(smi):
    """GPUs `nvidia-smi -L` lists, or None when it is missing or fails."""
    try:
        r = subprocess.run([smi, "-L"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           universal_newlines=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0:
        return None
    return sum(1 for ln in r.stdout.splitlines() if ln.startswith("GPU "))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="gpu_present.py", description="Is an NVIDIA GPU usable here?")
    ap.add_argument("--libcuda", default=os.environ.get("LDSHIM_GPU_LIBCUDA") or "libcuda.so.1")
    ap.add_argument("--for", dest="who", default="gpu_present")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)

    def say(msg):
        if not a.quiet:
            print("%s: %s" % (a.who, msg))
            sys.stdout.flush()

    forced = os.environ.get("LDSHIM_GPU", "")
    if forced == "1":
        say("GPU assumed (LDSHIM_GPU=1)")
        return 0
    if forced == "0":
        say("no GPU (LDSHIM_GPU=0)")
        return 1
    if forced:
        say("LDSHIM_GPU=%s: expected 1, 0 or unset" % forced)
        return 2
    n, why = cuda_devices(a.libcuda)
    if n:
        say("GPU: %d CUDA device%s through %s" % (n, "" if n == 1 else "s", a.libcuda))
        return 0
    smi = smi_gpus(os.environ.get("NVIDIA_SMI") or "nvidia-smi")
    if smi:
        cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
        why += "; nvidia-smi lists %d GPU%s that CUDA cannot use%s" % (
            smi, "" if smi == 1 else "s", "" if cvd is None else " (CUDA_VISIBLE_DEVICES=%r)" % cvd)
    else:
        why += "; nvidia-smi: %s" % ("no GPU listed" if smi == 0 else "not available")
    say("no GPU: " + why)
    return 1


if __name__ == "__main__":
    sys.exit(main())
