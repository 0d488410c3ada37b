#!/usr/bin/env python3
"""sustained.py — run one libldmoe case back to back for a few seconds per variant, in alternating
blocks, and report each block's median call time together with the SM clock and board power that
nvidia-smi sampled meanwhile. For effects that short interleaved timings hide: a variant that
draws more power (more L2 traffic) runs at a lower clock on a power-limited GPU.

    python3 bench/moe/sustained.py --shape 2 --m 512 --variants ws256x128ew:aware,ws256x128ew:static
    python3 bench/moe/sustained.py --fp8 --shape 0 --m 64 --layout packed --variants auto:aware,auto:aware:0x40000000

--fp8: e4m3 weights and tokens with rowwise scales through the lab's FP8 entry (TILE an FP8 tile
or auto); with the diagnostic lab build (LDMOE_LAB_LIB=build/lab/diag/libldmoe_lab.so) TUNE may
hold LDMOE_TUNE_DIAG_* bits, to see what the math or the stores cost in clock and power.

--shape indexes bench_moe.py's SHAPES (0: 8 experts, 1: 32, 2: 128); equal tokens per expert,
weights in --layout (default localized; or packed), no shim (even map). Variants are TILE:MODE[:TUNE] (mode: auto, aware, unaware,
static; TUNE: LDMOE_TUNE_* bits, e.g. 0x10).
"""
import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

class Sampler(threading.Thread):
    """nvidia-smi clocks.sm and power.draw, sampled until stop()."""

    def __init__(self, gpu):
        super().__init__(daemon=True)
        self.gpu, self.samples, self._halt = gpu, [], threading.Event()

    def run(self):
        cmd = ["nvidia-smi", "-i", str(self.gpu), "--query-gpu=clocks.sm,power.draw",
               "--format=csv,noheader,nounits"]
        while not self._halt.is_set():
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=5).stdout.strip()
                mhz, watts = (float(v) for v in out.split(","))
                self.samples.append((mhz, watts))
            except (OSError, ValueError, subprocess.SubprocessError):
                pass
            time.sleep(0.05)

    def stop(self):
        self._halt.set()
        self.join()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", type=int, default=2, choices=range(3))
    ap.add_argument("--m", type=int, default=512, help="tokens per expert")
    ap.add_argument("--variants", default="auto:aware,auto:static", help="TILE:MODE[:TUNE],...")
    ap.add_argument("--seconds", type=float, default=2.0, help="length of one block")
    ap.add_argument("--rounds", type=int, default=2, help="blocks per variant (alternating)")
    ap.add_argument("--sets", type=int, default=2, help="weight sets used in turn (no L2 carry-over)")
    ap.add_argument("--layout", choices=("localized", "packed"), default="localized", help="ldmoe's weight layout")
    ap.add_argument("--fp8", action="store_true", help="e4m3 weights and tokens, rowwise scales (grouped_mm_fp8)")
    a = ap.parse_args()
    variants = []
    for v in a.variants.split(","):
        f = v.split(":")
        try:
            tune = int(f[2], 0) if len(f) == 3 else 0
        except ValueError:
            tune = -1
        if len(f) not in (2, 3) or f[1] not in ("auto", "aware", "unaware", "static") or tune < 0:
            ap.error("--variants: %r is not TILE:MODE[:TUNE]" % v)
        variants.append((f[0], f[1], tune))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from one_case import equal_case
    torch, ldmoe, (E, K, N), wls, x, offs, y = equal_case(a.shape, a.m, a.sets, a.layout, fp8=a.fp8)

    def call(i, tile, mode, tune):
        if a.fp8:
            (w8, ws), (x8, xs) = wls[i % a.sets], x
            ldmoe.grouped_mm_fp8(x8, w8, offs, xs, ws, layout=a.layout, mode=mode, tile=tile, out=y, tune=tune)
        else:
            ldmoe.grouped_mm(x, wls[i % a.sets], offs, layout=a.layout, mode=mode, tile=tile, out=y, tune=tune)

    for v in variants:   # warm up, and size a block
        for i in range(3):
            call(i, *v)
    torch.cuda.synchronize()
    t0 = time.time()
    for i in range(20):
        call(i, *variants[0])
    torch.cuda.synchronize()
    per_block = max(20, int(a.seconds / ((time.time() - t0) / 20)))
    print("E=%d K=%d N=%d m=%d%s, %d calls per block, %s" % (E, K, N, a.m, " fp8 rowwise" if a.fp8 else "", per_block,
                                                            torch.cuda.get_device_name()))
    print("| round | variant | median µs | SM MHz (mean) | W (mean) | samples |")
    print("|---|---|---|---|---|---|")
    for r in range(a.rounds):
        for tile, mode, tune in variants:
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(per_block)]
            smp = Sampler(torch.cuda.current_device())
            smp.start()
            for i, (s, e) in enumerate(ev):
                s.record()
                call(i, tile, mode, tune)
                e.record()
            torch.cuda.synchronize()
            smp.stop()
            med = statistics.median(s.elapsed_time(e) * 1e3 for s, e in ev)
            mhz = statistics.mean(v[0] for v in smp.samples) if smp.samples else float("nan")
            w = statistics.mean(v[1] for v in smp.samples) if smp.samples else float("nan")
            print("| %d | %s:%s:%#x | %.1f | %.0f | %.0f | %d |" % (r, tile, mode, tune, med, mhz, w, len(smp.samples)))
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
