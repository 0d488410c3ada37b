"""serve_fake_graph.py SERVE_ARGS... — run bench/apps/serve.py's CUDA-graph decode path on the
CPU, with torch.cuda's stream and graph API replaced by stand-ins that keep the order of
events (test_serve.py runs it under a python with torch; there is no GPU in CI).

A stand-in cannot record kernels: its capture runs the step once (which a real capture does
not; the next pass's first step rewrites what it wrote) and remembers the step, and replay
runs it again. What it checks is serve.py's side of the protocol: warm-up steps on a side
stream before the capture, the capture on that same stream, replays on the stream the
timing uses, one capture per run, and no other use of the stand-in API. It prints
`fake-graph: <counters>` after serve.py's own output."""

import contextlib
import importlib.util
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SERVE = os.path.join(HERE, "..", "..", "bench", "apps", "serve.py")
spec = importlib.util.spec_from_file_location("serve", SERVE)
serve = importlib.util.module_from_spec(spec)
spec.loader.exec_module(serve)

# serve.py must only use names the real torch.cuda has.
for name in ("Stream", "stream", "current_stream", "graph", "CUDAGraph"):
    assert hasattr(torch.cuda, name), "torch.cuda has no %s" % name


class Stream:
    def __init__(self, device=None):
        self.waits = 0

    def wait_stream(self, other):
        self.waits += 1


main_stream = Stream()
cur = [main_stream]
side = []
count = {"warmup_on_side": 0, "captures": 0, "replays": 0, "eager_steps": 0}
capturing = []


def new_stream(device=None):
    s = Stream(device)
    side.append(s)
    return s


@contextlib.contextmanager
def use_stream(s):
    prev, cur[0] = cur[0], s
    try:
        yield
    finally:
        cur[0] = prev


class CUDAGraph:
    def __init__(self):
        self.step = None

    def replay(self):
        assert self.step is not None, "replay before capture"
        assert cur[0] is main_stream, "replay off the timing stream"
        count["replays"] += 1
        model, args = self.step
        real_step(model, *args)


@contextlib.contextmanager
def graph(g, pool=None, stream=None, capture_error_mode="global"):
    assert stream is not None and side and stream is side[-1], "capture not on the side stream"
    assert count["warmup_on_side"] >= 1, "capture without warm-up on its stream"
    assert side[-1].waits >= 1, "side stream does not wait for the main stream"
    count["captures"] += 1
    capturing.append(g)
    with use_stream(stream):
        yield
    capturing.pop()
    assert g.step is not None, "nothing captured"


real_step = serve.Model.decode_step


def recording_step(self, *args):
    if capturing:
        assert capturing[-1].step is None, "two steps in one capture"
        capturing[-1].step = (self, args)
    elif cur[0] is not main_stream:
        count["warmup_on_side"] += 1
    else:
        count["eager_steps"] += 1
    return real_step(self, *args)


serve.Model.decode_step = recording_step
torch.cuda.Stream = new_stream
torch.cuda.stream = use_stream
torch.cuda.current_stream = lambda device=None: cur[0]
torch.cuda.graph = graph
torch.cuda.CUDAGraph = CUDAGraph

real_parse = serve.parse_args


def parse_with_graphs(argv=None):
    a = real_parse(argv)
    a.graphs = True        # what the default is on a CUDA device
    return a


serve.parse_args = parse_with_graphs
rc = serve.main(sys.argv[1:])
sys.stdout.flush()
print("fake-graph: " + " ".join("%s=%d" % kv for kv in sorted(count.items())))
sys.exit(rc)
