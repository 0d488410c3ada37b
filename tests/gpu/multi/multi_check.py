#!/usr/bin/env python3
"""multi_check.py — one process driving two GPUs, for the shim's two-GPU suite (issue 7).

On each device: 64 MiB fp32 tensors (tagged by multi.policy), a GEMM and elementwise work; then
peer traffic: a contiguous copy device 0 -> 1 (copy engine), a transposed copy (a kernel that
reads the other device's memory when peer access is on), and arithmetic on the copies. libldmoe
is loaded on both devices so the published map of each device can be compared with what the
shim reports for it.

stdout: one SHA-256 per result, nothing else (the suite compares it with a run without the
shim). stderr: "CHECK ok|FAIL name detail" lines for what depends on the state (tagged ranges on
the right device, the map each device's module sees). Exit 1 if a check failed, 2 if fewer than
two GPUs are visible.
"""
import argparse
import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "..", "..", "kernels", "moe"))
import common  # noqa: E402

MAGIC = 0x4C445348
FAILED = []


def check(ok, name, detail=""):
    print("CHECK %s %s %s" % ("ok" if ok else "FAIL", name, detail), file=sys.stderr, flush=True)
    if not ok:
        FAILED.append(name)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=4096, help="matrix side (4096: 64 MiB fp32, what multi.policy tags)")
    ap.add_argument("--seed", type=int, default=99)
    a = ap.parse_args(argv)
    import torch
    import ldmoe
    torch.use_deterministic_algorithms(True)
    if torch.cuda.device_count() < 2:
        print("multi_check: %d GPU(s) visible, needs 2" % torch.cuda.device_count(), file=sys.stderr)
        return 2
    lib = common.shim()
    state = os.environ.get("LDSHIM_STATE", "full") if lib else "none"
    tagged = state in ("memory", "full", "mismatch")
    print("multi_check: shim %s, state %s, peer access 0->1 %s" % (
        lib.ldshim_version().decode() if lib else "absent", state, torch.cuda.can_device_access_peer(0, 1)),
        file=sys.stderr)

    n, res, keep = a.n, {}, {}
    for d in (0, 1):
        dev = torch.device("cuda", d)
        g = torch.Generator(device=dev)
        g.manual_seed(a.seed + d)
        x = torch.randn(n, n, device=dev, generator=g)
        w = torch.randn(n, n, device=dev, generator=g)
        c = x @ w
        res["gemm%d" % d] = common.digest(c)
        res["elementwise%d" % d] = common.digest(torch.relu(c) * 0.25 + x)
        keep[d] = (x, w, c)
        if lib:
            for name, t in (("x", x), ("w", w), ("c", c)):
                info = common.pointer_info(lib, t.data_ptr())
                if tagged:
                    check(info is not None and info.device == d, "tagged-%s-on-device%d" % (name, d),
                          "device=%s domains=%s" % (info.device if info else None, info.num_domains if info else None))
                else:
                    check(info is None, "untagged-%s-device%d (stock)" % (name, d))
        # the map this device's copy of libldmoe sees vs what the shim published for it
        torch.cuda.set_device(d)
        seen = ldmoe.get_topology()
        if lib and tagged:
            pub = common.shim_topology(lib, d)
            same = pub is not None and pub.magic == MAGIC and seen.magic == MAGIC and pub.num_sms == seen.num_sms \
                and pub.flags == seen.flags and bytes(pub.sm_domain) == bytes(seen.sm_domain)
            check(same and seen.num_sms == torch.cuda.get_device_properties(d).multi_processor_count,
                  "map-published-device%d" % d, "magic=%#x sms=%d domains=%d flags=%#x" % (
                      seen.magic, seen.num_sms, seen.num_domains, seen.flags))
        else:
            check(seen.magic == 0, "map-absent-device%d" % d, "magic=%#x" % seen.magic)
    torch.cuda.set_device(0)

    # peer traffic between the two devices' (tagged) ranges
    c0, c1 = keep[0][2], keep[1][2]
    p = c0.to("cuda:1")                            # contiguous: cudaMemcpyPeer
    res["peer_copy"] = common.digest(p)
    q = torch.empty_like(c1)
    q.copy_(c0.t())                                # strided across devices: a copy kernel
    res["peer_transpose"] = common.digest(q)
    r = c1 + p - q * 0.5
    res["peer_mix"] = common.digest(r)
    back = torch.empty_like(c0)
    back.copy_(r)                                  # device 1 -> device 0 into a tagged range
    res["peer_back"] = common.digest(back)
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    for k in sorted(res):
        print("%-16s n=%d sha256=%s" % (k, n, res[k]))
    sys.stdout.flush()
    del keep, c0, c1, p, q, r, back
    torch.cuda.empty_cache()
    if FAILED:
        print("multi_check: %d check(s) failed: %s" % (len(FAILED), " ".join(FAILED)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
