"""cases_place.py — every allocation api under every state lands where the state says: the
fake driver records the domain of every allocation (a VMM handle's location, a pool's, a
managed range's preferred location), t_place prints it, and the report's per-api counts must
reconcile (each api made one request of the tagged size)."""
from run_cases import Case, Fail, report_check, stderr_matches, stderr_only

APIS = ("alloc", "vmm", "async", "pool", "pitch", "managed")
REPORT_API = {"alloc": "driver", "vmm": "vmm", "async": "async", "pool": "async", "pitch": "pitch",
              "managed": "managed"}


def where(alloc, vmm, async_, pool, pitch, managed):
    e = dict(zip(("%s_domain" % a for a in APIS), (alloc, vmm, async_, pool, pitch, managed)))
    return {k: v for k, v in e.items() if v is not None}


def reconcile(placed=None, emulated=None):
    """Every api's one tagged request is placed, passed or a fallback; placed/emulated as given."""
    def fn(r):
        apis = r.get("apis")
        if not apis:
            raise Fail("report lacks apis")
        for name, a in apis.items():
            if a["placed"] + a["passed"] + a["fallbacks"] > a["requests"]:
                raise Fail("api %s: placed+passed+fallbacks %d > requests %d" % (
                    name, a["placed"] + a["passed"] + a["fallbacks"], a["requests"]))
            if a["emulated"] > a["placed"]:
                raise Fail("api %s: emulated > placed" % name)
        for name, want in (placed or {}).items():
            if apis[name]["placed"] != want:
                raise Fail("api %s placed %d, expected %d" % (name, apis[name]["placed"], want))
        for name, want in (emulated or {}).items():
            if apis[name]["emulated"] != want:
                raise Fail("api %s emulated %d, expected %d" % (name, apis[name]["emulated"], want))
    return report_check(fn)


def cases(a):
    C = []
    native = {"FAKE_CUDA_DOMAINS": 2, "LDSHIM_BACKEND": "native"}
    stock_where = where(-1, -1, -1, -1, -1, -1)
    C.append(Case("p/noshim", "t_place", ["all", "8MiB"], shim=False, expect=stock_where))
    C.append(Case("p/stock", "t_place", ["all", "8MiB"], "place.policy", env=dict(native, LDSHIM_STATE="stock"),
                  expect=dict(stock_where, alloc_shim=0, pitch_shim=0), quiet=True))
    probe_only = stderr_only(r"^ldshim: (probe: |compute: |rule 'w': falling back)")
    for x in (0, 1):
        for st in ("memory-only", "full-ld", "mismatch-ld"):
            C.append(Case("p/native/%s/d%d" % (st, x), "t_place", ["all", "8MiB"], "place.policy",
                          env=dict(native, LDSHIM_STATE=st, LDSHIM_DOMAIN=x),
                          expect=dict(where(x, x, x, -1, x, x), alloc_shim=1, pitch_shim=1, vmm_shim=0),
                          checks=[reconcile(placed={"driver": 1, "vmm": 1, "async": 1, "pitch": 1, "managed": 1},
                                            emulated={"vmm": 0, "async": 0}),
                                  stderr_matches(r"an allocation from a pool the program created: not moved", 1),
                                  probe_only]))
    for st in ("compute-only", "sm-control"):
        C.append(Case("p/native/%s" % st, "t_place", ["all", "8MiB"], "place.policy",
                      env=dict(native, LDSHIM_STATE=st, LDSHIM_DOMAIN=1),
                      expect=dict(stock_where, alloc_shim=0, pitch_shim=0),
                      checks=[reconcile(placed={"driver": 0, "vmm": 0, "async": 0, "pitch": 0, "managed": 0})]))
    # The split family: split is cuMemAlloc's; the other apis pass through, said once.
    C.append(Case("p/native/full-split", "t_place", ["all", "8MiB"], "place.policy",
                  env=dict(native, LDSHIM_STATE="full"),
                  expect=dict(where("0,1", -1, -1, -1, -1, -1), alloc_shim=1, pitch_shim=0),
                  checks=[stderr_matches(r"split placement applies to cuMemAlloc only", 1),
                          reconcile(placed={"driver": 1, "vmm": 0})]))
    C.append(Case("p/native/rule-domain1", "t_place", ["all", "8MiB"], "place_domain.policy", env=native,
                  expect=dict(where(1, 1, 1, -1, 1, 1), alloc_shim=1, pitch_shim=1),
                  checks=[reconcile(placed={"driver": 1, "vmm": 1, "async": 1, "pitch": 1, "managed": 1})]))
    # A domain the GPU does not have: nothing is placed, and the reason is given.
    C.append(Case("p/native/no-such-domain", "t_place", ["all", "8MiB"], "place.policy",
                  env=dict(native, LDSHIM_STATE="memory-only", LDSHIM_DOMAIN=5),
                  expect=dict(stock_where, alloc_shim=0),
                  checks=[stderr_matches(r"domain 5 does not exist \(device 0 has 2 domains, 0\.\.1\)"),
                          reconcile(placed={"driver": 0, "vmm": 0, "async": 0, "pitch": 0, "managed": 0})]))
    # The emulated backend (Hopper): cuMemAlloc and pitched requests become shim ranges of
    # ordinary memory; the others are counted as placed with no physical effect.
    C.append(Case("p/emulated/memory-only", "t_place", ["all", "8MiB"], "place.policy",
                  env={"LDSHIM_BACKEND": "emulated", "LDSHIM_STATE": "memory-only", "LDSHIM_DOMAIN": 1},
                  expect=dict(stock_where, alloc_shim=1, pitch_shim=1),
                  checks=[reconcile(placed={"driver": 1, "vmm": 1, "async": 1, "pitch": 1, "managed": 1},
                                    emulated={"driver": 1, "vmm": 1, "async": 1, "pitch": 1, "managed": 1})]))
    # A failure of the placed call: the program gets its own call's memory.
    for name in ("cuMemCreate:1", "cuMemPoolCreate:1", "cuMemAllocFromPoolAsync:1", "cuMemAdvise_v2:1"):
        C.append(Case("p/native/fault/%s" % name, "t_place", ["all", "8MiB"], "place.policy",
                      env=dict(native, LDSHIM_STATE="memory-only", LDSHIM_DOMAIN=0, FAKE_CUDA_FAIL=name),
                      checks=[reconcile(), stderr_matches(r"falling back to an ordinary allocation")]))
    return C
