"""cases_place.py — every allocation api under every state lands where the state says: the
fake driver records the domain of every allocation (a VMM handle's location, a pool's, a
managed range's preferred location) and which call made it, t_place prints both, and the
counts reconcile: t_place checks at every allocation and free that each is counted once, in
one class (T_COUNTS=1), and the report's per-api counts and totals must agree with it and
with ldshim_get_stats. The shim's memory pools follow the program's settings of the default
pool, are destroyed when they lose a creation race, at a reset and at exit, and a forked
child leaves the parent's alone."""
from run_cases import Case, Fail, out_at_least, report_check, stderr_matches, stderr_only

MiB = 1 << 20
APIS = ("alloc", "vmm", "async", "pool", "pitch", "managed")
# fakecuda_alloc_kind: 0 cuMemAlloc, 1 stream-ordered, 2 managed, 3 cuMemAllocPitch, 4 VMM mapping
STOCK_KIND = {"alloc": 0, "vmm": 4, "async": 1, "pool": 1, "pitch": 3, "managed": 2}


def where(alloc, vmm, async_, pool, pitch, managed):
    e = dict(zip(("%s_domain" % a for a in APIS), (alloc, vmm, async_, pool, pitch, managed)))
    return {k: v for k, v in e.items() if v is not None}


def kinds(alloc_shim=0, pitch_shim=0):
    """The call that made each allocation: a shim range is a VMM mapping; anything else the
    program's own call (a pitched request that falls back gets cuMemAllocPitch's memory)."""
    k = {"%s_kind" % a: v for a, v in STOCK_KIND.items()}
    if alloc_shim:
        k["alloc_kind"] = 4
    if pitch_shim:
        k["pitch_kind"] = 4
    return k


def tagged(alloc, vmm, async_, pool, pitch, managed):
    """What t_place's counts say each allocation was (1 placed, 0 not); async2 is async's."""
    t = dict(zip(("%s_tagged" % a for a in APIS), (alloc, vmm, async_, pool, pitch, managed)))
    t["async2_tagged"] = async_
    return t


def reconcile(placed=None, emulated=None, all_freed=True):
    """Per api: placed + passed + fallbacks <= requests, emulated <= placed, placed/emulated
    as given. Totals: tagged_allocs is the sum of every api's placed, untagged_frees never
    exceeds untagged_allocs, everything freed when the program freed everything, and the
    report's counts equal ldshim_get_stats at the program's end (stdout `counts`)."""
    def fn(r, res):
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
        c = r["counts"]
        if c["tagged_allocs"] != sum(a["placed"] for a in apis.values()):
            raise Fail("counts.tagged_allocs %d != the apis' placed %d" % (
                c["tagged_allocs"], sum(a["placed"] for a in apis.values())))
        if c["untagged_frees"] > c["untagged_allocs"] or c["tagged_frees"] > c["tagged_allocs"]:
            raise Fail("more frees than allocations: %s" % c)
        if all_freed and (c["tagged_frees"] != c["tagged_allocs"] or c["untagged_frees"] != c["untagged_allocs"]):
            raise Fail("the program freed everything, the counts say otherwise: %s" % c)
        got = "%d,%d,%d,%d" % (c["tagged_allocs"], c["tagged_frees"], c["untagged_allocs"], c["untagged_frees"])
        if "counts" in res.out and res.out["counts"] != got:
            raise Fail("ldshim_get_stats %s, the report's counts %s" % (res.out["counts"], got))
    return lambda runner, res: report_check(lambda r: fn(r, res))(runner, res)


def api_counts(api, **want):
    def fn(r):
        a = r["apis"][api]
        for k, v in want.items():
            if a[k] != v:
                raise Fail("apis.%s.%s = %d, expected %d" % (api, k, a[k], v))
    return report_check(fn)


def pool_trims(n):
    def fn(r):
        if r["pool"]["trims"] != n:
            raise Fail("pool.trims = %d, expected %d" % (r["pool"]["trims"], n))
    return report_check(fn)


def cases(a):
    C = []
    native = {"FAKE_CUDA_DOMAINS": 2, "LDSHIM_BACKEND": "native", "T_COUNTS": 1}
    stock_where = where(-1, -1, -1, -1, -1, -1)
    C.append(Case("place/noshim", "t_place", ["all", "8MiB"], shim=False, expect=dict(stock_where, **kinds())))
    C.append(Case("place/stock", "t_place", ["all", "8MiB"], "place.policy", env=dict(native, LDSHIM_STATE="stock",
                                                                              T_COUNTS=None),
                  expect=dict(stock_where, alloc_shim=0, pitch_shim=0, counts="0,0,0,0", **kinds()), quiet=True))
    probe_only = stderr_only(r"^ldshim: warning: (probe: |compute: |alloc: rule 'w': falling back)")
    for x in (0, 1):
        for st in ("memory-only", "full-ld", "mismatch-ld"):
            C.append(Case("place/native/%s/d%d" % (st, x), "t_place", ["all", "8MiB"], "place.policy",
                          env=dict(native, LDSHIM_STATE=st, LDSHIM_DOMAIN=x),
                          expect=dict(where(x, x, x, -1, x, x), alloc_shim=1, pitch_shim=1, vmm_shim=0,
                                      counts="6,6,1,1", **kinds(1, 1), **tagged(1, 1, 1, 0, 1, 1)),
                          checks=[reconcile(placed={"driver": 1, "vmm": 1, "async": 2, "pitch": 1, "managed": 1},
                                            emulated={"vmm": 0, "async": 0}),
                                  stderr_matches(r"an allocation from a pool the program created: not moved", 1),
                                  probe_only]))
    for st in ("compute-only", "sm-control"):
        C.append(Case("place/native/%s" % st, "t_place", ["all", "8MiB"], "place.policy",
                      env=dict(native, LDSHIM_STATE=st, LDSHIM_DOMAIN=1),
                      expect=dict(stock_where, alloc_shim=0, pitch_shim=0, counts="0,0,7,7", **kinds(),
                                  **tagged(0, 0, 0, 0, 0, 0)),
                      checks=[reconcile(placed={"driver": 0, "vmm": 0, "async": 0, "pitch": 0, "managed": 0})]))
    # The split family: split is cuMemAlloc's; the other apis pass through, said once.
    C.append(Case("place/native/full-split", "t_place", ["all", "8MiB"], "place.policy",
                  env=dict(native, LDSHIM_STATE="full"),
                  expect=dict(where("0,1", -1, -1, -1, -1, -1), alloc_shim=1, pitch_shim=0, counts="1,1,6,6",
                              **kinds(1, 0), **tagged(1, 0, 0, 0, 0, 0)),
                  checks=[stderr_matches(r"split placement applies to cuMemAlloc only", 1),
                          reconcile(placed={"driver": 1, "vmm": 0})]))
    C.append(Case("place/native/rule-domain1", "t_place", ["all", "8MiB"], "place_domain.policy", env=native,
                  expect=dict(where(1, 1, 1, -1, 1, 1), alloc_shim=1, pitch_shim=1, counts="6,6,1,1", **kinds(1, 1),
                              **tagged(1, 1, 1, 0, 1, 1)),
                  checks=[reconcile(placed={"driver": 1, "vmm": 1, "async": 2, "pitch": 1, "managed": 1})]))
    # A domain the GPU does not have: nothing is placed, and the reason is given; the pitched
    # request gets the program's own cuMemAllocPitch.
    C.append(Case("place/native/no-such-domain", "t_place", ["all", "8MiB"], "place.policy",
                  env=dict(native, LDSHIM_STATE="memory-only", LDSHIM_DOMAIN=5),
                  expect=dict(stock_where, alloc_shim=0, pitch_shim=0, counts="0,0,7,7", **kinds(),
                              **tagged(0, 0, 0, 0, 0, 0)),
                  checks=[stderr_matches(r"domain 5 does not exist \(device 0 has 2 domains, 0\.\.1\)"),
                          reconcile(placed={"driver": 0, "vmm": 0, "async": 0, "pitch": 0, "managed": 0})]))
    # Below min_split a range is not made: cuMemAlloc and cuMemAllocPitch pass through as the
    # program's own calls; the apis that are not ranges are placed.
    C.append(Case("place/native/below-min-split", "t_place", ["all", "8MiB"], "place_minsplit.policy",
                  env=dict(native, LDSHIM_STATE="memory-only", LDSHIM_DOMAIN=1),
                  expect=dict(where(-1, 1, 1, -1, -1, 1), alloc_shim=0, pitch_shim=0, counts="4,4,3,3", **kinds(),
                              **tagged(0, 1, 1, 0, 0, 1)),
                  checks=[reconcile(placed={"driver": 0, "vmm": 1, "async": 2, "pitch": 0, "managed": 1}),
                          api_counts("pitch", requests=1, passed=1, fallbacks=0)]))
    # The emulated backend (Hopper): cuMemAlloc and pitched requests become shim ranges of
    # ordinary memory; the others are counted as placed with no physical effect, and their
    # frees as tagged frees.
    C.append(Case("place/emulated/memory-only", "t_place", ["all", "8MiB"], "place.policy",
                  env={"LDSHIM_BACKEND": "emulated", "LDSHIM_STATE": "memory-only", "LDSHIM_DOMAIN": 1,
                       "T_COUNTS": 1},
                  expect=dict(stock_where, alloc_shim=1, pitch_shim=1, counts="6,6,1,1", **kinds(1, 1),
                              **tagged(1, 1, 1, 0, 1, 1)),
                  checks=[reconcile(placed={"driver": 1, "vmm": 1, "async": 2, "pitch": 1, "managed": 1},
                                    emulated={"driver": 1, "vmm": 1, "async": 2, "pitch": 1, "managed": 1})]))
    # Memory the program still holds at exit: one shim range and two placed pointers, and the
    # report says so (the runner reconciles every report: live = tagged allocs - frees).
    def kept(r):
        if (r["live"]["ranges"], r["live"]["placed_elsewhere"]) != (1, 2):
            raise Fail("live at exit %s, expected 1 range and 2 placed elsewhere" % r["live"])
    C.append(Case("place/emulated/kept-at-exit", "t_place", ["keep", "8MiB"], "place.policy",
                  env={"LDSHIM_BACKEND": "emulated", "LDSHIM_STATE": "memory-only"}, zero_counts=False,
                  expect={"counts": "3,0,0,0"}, checks=[report_check(kept)]))
    # A failure of the placed call: the program gets its own call's memory, counted once.
    for name in ("cuMemCreate:1", "cuMemPoolCreate:1", "cuMemAllocFromPoolAsync:1", "cuMemAdvise_v2:1"):
        C.append(Case("place/native/fault/%s" % name, "t_place", ["all", "8MiB"], "place.policy",
                      env=dict(native, LDSHIM_STATE="memory-only", LDSHIM_DOMAIN=0, FAKE_CUDA_FAIL=name),
                      checks=[reconcile(), stderr_matches(r"falling back to an ordinary allocation")]))
    # The pitched request's range fails (no pool, so it is made anew: cuMemCreate calls 1-2 are
    # the native backend's check at device setup, 3 cuMemAlloc's range, 4 the program's
    # handle): the program's own cuMemAllocPitch, not a cuMemAlloc of pitch x height.
    C.append(Case("place/native/fault/pitch-range", "t_place", ["all", "8MiB"], "nopool.policy",
                  env=dict(native, LDSHIM_STATE="memory-only", LDSHIM_DOMAIN=0, FAKE_CUDA_FAIL="cuMemCreate:5"),
                  expect=dict(alloc_shim=1, pitch_shim=0, pitch_domain=-1, **kinds(1, 0)),
                  checks=[reconcile(placed={"pitch": 0}), api_counts("pitch", requests=1, fallbacks=1),
                          stderr_matches(r"falling back to an ordinary allocation")]))
    # No backend (native asked for, the driver reports no domains): every api falls back.
    C.append(Case("place/native/no-backend", "t_place", ["all", "8MiB"], "place.policy",
                  env={"LDSHIM_BACKEND": "native", "LDSHIM_STATE": "memory-only", "T_COUNTS": 1},
                  expect=dict(stock_where, alloc_shim=0, pitch_shim=0, counts="0,0,7,7", **kinds(),
                              **tagged(0, 0, 0, 0, 0, 0)),
                  checks=[reconcile(placed={"driver": 0, "vmm": 0, "async": 0, "pitch": 0, "managed": 0})]))

    # Out-of-memory: only the failing call is repeated, after the pool of freed ranges was
    # trimmed. The range cuMemAlloc's 8 MiB leaves in the pool fills the 12 MiB the fake
    # has, so the first cuMemCreate (occurrence 1: untagged) succeeds only after the trim,
    # and stays untagged; the second is the one tagged.
    C.append(Case("place/native/oom-retry", "t_place", ["oom", "8MiB"], "place_occ.policy",
                  env=dict(native, LDSHIM_STATE="memory-only", LDSHIM_DOMAIN=1, FAKE_CUDA_MEM_LIMIT=12 * MiB),
                  expect={"alloc_shim": 1, "vmm1_rc": 0, "vmm1_domain": -1, "vmm2_rc": 0, "vmm2_domain": 1,
                          "counts": "2,2,1,1"},
                  checks=[api_counts("vmm", requests=2, placed=1, passed=1, fallbacks=0), pool_trims(1),
                          reconcile()]))

    # The shim's pool follows the default pool: settings made before the first tagged
    # stream-ordered allocation and after it (device 1's access, the threshold, a reuse flag),
    # the default pool's counters and trim; everything as without the shim but the domain.
    two = {"FAKE_CUDA_DEVICES": 2}
    follows = {"peer_before": 3, "threshold_max": 1, "opportunistic": 0, "peer_revoked": 0, "peer_read": 1,
               "threshold_later": 12345, "opportunistic_later": 1, "def_used": 8 * MiB, "def_used_freed": 0,
               "def_reserved_kept": 8 * MiB, "def_used_high": 8 * MiB, "def_used_high_reset": 0,
               "def_reserved_trimmed": 0}
    C.append(Case("place/pools/noshim", "t_place", ["pools", "8MiB"], shim=False, env=two,
                  expect=dict(follows, async_domain=-1, own_pool=0)))
    for x in (0, 1):
        C.append(Case("place/pools/native/d%d" % x, "t_place", ["pools", "8MiB"], "place.policy",
                      env=dict(native, LDSHIM_STATE="memory-only", LDSHIM_DOMAIN=x, **two),
                      expect=dict(follows, async_domain=x, own_pool=1, counts="1,1,0,0"),
                      checks=[reconcile(placed={"async": 1}), probe_only]))
    # Threads racing to make the device's pool: one wins, the others' pools are destroyed.
    C.append(Case("place/pools/race", "t_place", ["race", 4, "8MiB"], "place.policy",
                  env=dict(native, LDSHIM_STATE="memory-only", LDSHIM_DOMAIN=1, FAKE_CUDA_POOL_CREATE_DELAY_MS=300),
                  expect={"same_pool": 1, "pools_live": 1, "counts": "4,4,0,0"},
                  checks=[out_at_least("pools_created", 2), reconcile(placed={"async": 4})]))
    # A reset destroys the shim's pools (and counts what it took as freed); the next
    # allocation makes a new one.
    C.append(Case("place/pools/reset/noshim", "t_place", ["reset", "8MiB"], shim=False,
                  expect={"before_domain": -1, "after_domain": -1, "pools_before_reset": 0, "pools_after_reset": 0}))
    C.append(Case("place/pools/reset", "t_place", ["reset", "8MiB"], "place.policy",
                  env=dict(native, LDSHIM_STATE="memory-only", LDSHIM_DOMAIN=0),
                  expect={"before_domain": 0, "after_domain": 0, "before_tagged": 1, "after_tagged": 1,
                          "pools_before_reset": 1, "pools_after_reset": 0, "live_tagged_after_reset": 0,
                          "counts": "3,3,0,0"},
                  checks=[reconcile(placed={"async": 3})]))
    # A forked child makes its own pool and destroys only that one at its exit.
    C.append(Case("place/pools/fork/noshim", "t_place", ["fork", "8MiB"], shim=False,
                  expect={"parent_domain": -1, "child_domain": -1, "child_own_pool": 0, "child_status": 0,
                          "child_pools_at_exit": 0, "parent_pools_at_exit": 0}))
    C.append(Case("place/pools/fork", "t_place", ["fork", "8MiB"], "place.policy",
                  env=dict(native, LDSHIM_STATE="memory-only", LDSHIM_DOMAIN=1),
                  expect={"parent_domain": 1, "child_domain": 1, "child_own_pool": 1, "child_status": 0,
                          "child_pools_at_exit": 1, "parent_pools_at_exit": 0},
                  checks=[probe_only]))
    return C
