#!/usr/bin/env python3
"""nccl_check.py — two processes, one GPU each, a PyTorch all-reduce through NCCL over tensors
that multi.policy tags (issue 7). NCCL's NVLink multicast stays off (NCCL_NVLS_ENABLE=0): the
two-GPU hosts are shared and multicast can take their GPUs out of service.

Each rank fills a 64 MiB fp32 tensor from its own seed, all-reduces (sum), all-gathers a second
tagged tensor, and reports digests; the parent prints them on stdout (nothing else), so the
suite can compare runs with and without the shim. stderr: "CHECK ok|FAIL" lines for the tagged
ranges seen in each rank. Exit 1 on a failed check or rank, 2 with fewer than two GPUs.
"""
import argparse
import os
import socket
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import common  # noqa: E402

os.environ["NCCL_NVLS_ENABLE"] = "0"


def worker(rank, world, port, n, q):
    import torch
    import torch.distributed as dist
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
        g = torch.Generator(device=dev)
        g.manual_seed(500 + rank)
        t = torch.randn(n * n, device=dev, generator=g)          # 64 MiB: tagged
        parts = [torch.empty(n * n // world, device=dev) for _ in range(world)]
        mine = torch.randn(n * n // world, device=dev, generator=g)
        big = torch.empty(n * n, device=dev)                      # all-gather target, 64 MiB: tagged
        checks = []
        lib = common.shim()
        state = os.environ.get("LDSHIM_STATE", "full") if lib else "none"
        if lib:
            for name, x in (("t", t), ("big", big)):
                info = common.pointer_info(lib, x.data_ptr())
                want = state in ("memory", "full", "mismatch")
                ok = (info is not None and info.device == rank) if want else info is None
                checks.append((ok, "rank%d-%s-%s" % (rank, name, "tagged" if want else "untagged"),
                               "device=%s" % (info.device if info else None)))
        dist.all_reduce(t)
        dist.all_gather(parts, mine)
        dist.all_gather_into_tensor(big, mine)
        torch.cuda.synchronize()
        out = {"allreduce": common.digest(t), "allgather": common.digest(torch.cat(parts)),
               "allgather_into": common.digest(big)}
        dist.barrier()
        dist.destroy_process_group()
        q.put((rank, out, checks, None))
    except Exception as e:   # noqa: BLE001 — reported by the parent
        q.put((rank, None, [], "%s: %s" % (type(e).__name__, e)))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=4096, help="tensor of n*n fp32 (4096: 64 MiB, what multi.policy tags)")
    ap.add_argument("--timeout", type=float, default=120.0)
    a = ap.parse_args(argv)
    import torch
    import torch.multiprocessing as mp
    if torch.cuda.device_count() < 2:
        print("nccl_check: %d GPU(s) visible, needs 2" % torch.cuda.device_count(), file=sys.stderr)
        return 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, 2, port, a.n, q)) for r in range(2)]
    for p in procs:
        p.start()
    got, bad = {}, 0
    for _ in procs:
        try:
            rank, out, checks, err = q.get(timeout=a.timeout)
        except Exception:   # noqa: BLE001
            print("nccl_check: a rank did not report within %.0f s" % a.timeout, file=sys.stderr)
            bad += 1
            break
        for ok, name, detail in checks:
            print("CHECK %s %s %s" % ("ok" if ok else "FAIL", name, detail), file=sys.stderr)
            bad += not ok
        if err:
            print("nccl_check: rank %d failed: %s" % (rank, err), file=sys.stderr)
            bad += 1
        else:
            got[rank] = out
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
        bad += p.exitcode not in (0, None) and 1 or 0
    for rank in sorted(got):
        for k in sorted(got[rank]):
            print("rank%d %-15s sha256=%s" % (rank, k, got[rank][k]))
    if len(got) == 2 and got[0]["allreduce"] != got[1]["allreduce"]:
        print("CHECK FAIL ranks-agree allreduce digests differ between the ranks", file=sys.stderr)
        bad += 1
    return 1 if bad or len(got) != 2 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
