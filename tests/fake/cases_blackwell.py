"""cases_blackwell.py — the Blackwell paths that verify themselves (issue 43), on the fake
driver: the read-back of every native slice (FAKE_CUDA_READBACK homes memory wrongly, not at
all, or does not know the attribute); localized slices built from handles of at most a chunk
(LDSHIM_CHUNK forces one; 32 MiB on native by default, one per slice on emulated); the probe
checked against the driver's own answer (split by locality domain, attribute 157,
%locality_domain_id through FAKE_CUDA_PTX95) in every combination, the policy's
topology_source choosing the published map when they disagree."""
from run_cases import Case, Fail, report_check, stderr_matches
from cases_compute import plant, sides

NATIVE = {"FAKE_CUDA_DOMAINS": 2}
PLACED = {"a_shim": 1, "a_slices": 2, "a_domains": "0,1", "a_expect": "0,1"}


def readback(**want):
    """The report's readback counts are exactly `want` (unnamed ones 0)."""
    def fn(r):
        rb = r.get("readback")
        if not isinstance(rb, dict):
            raise Fail("report lacks readback")
        for k in ("right", "wrong_domain", "not_localized", "unverified", "discarded"):
            if rb.get(k) != want.get(k, 0):
                raise Fail("readback.%s = %s, expected %d (%s)" % (k, rb.get(k), want.get(k, 0), rb))
    return report_check(fn)


def fallback_reason(pattern, count):
    def fn(r):
        got = sum(f["count"] for f in r["fallbacks"] if pattern in f["reason"])
        if got != count:
            raise Fail("%d fallbacks with '%s', expected %d: %s" % (got, pattern, count, r["fallbacks"]))
    return report_check(fn)


def cases(a):
    C = []
    # Read-back: right (both slices verified), wrong home and no home (discarded: the request
    # falls back to ordinary memory, nothing left behind), attribute unknown (trusted).
    C.append(Case("readback/right", "t_driver", ["alloc", "link", "8MiB"], "native.policy", env=NATIVE, expect=PLACED,
                  checks=[readback(right=2)]))
    fell = {"a_shim": 0, "a_domains": -1}
    C.append(Case("readback/wrong", "t_driver", ["alloc", "link", "8MiB"], "native.policy",
                  env=dict(NATIVE, FAKE_CUDA_READBACK="wrong"), expect=fell,
                  checks=[readback(wrong_domain=1, discarded=1), fallback_reason("another domain", 1),
                          stderr_matches(r"^ldshim: warning: .*read-back: a slice is homed in another domain", 1)]))
    C.append(Case("readback/unlocalized", "t_driver", ["alloc", "link", "8MiB"], "native.policy",
                  env=dict(NATIVE, FAKE_CUDA_READBACK="unlocalized"), expect=fell,
                  checks=[readback(not_localized=1, discarded=1), fallback_reason("not localized", 1)]))
    C.append(Case("readback/unknown", "t_driver", ["alloc", "link", "8MiB"], "native.policy",
                  env=dict(NATIVE, FAKE_CUDA_READBACK="unknown"), expect=PLACED,
                  checks=[readback(unverified=2)]))
    # Only the second slice of the first range is homed wrongly: that request falls back,
    # the next is placed and verified.
    C.append(Case("readback/wrong-one-slice", "t_driver", ["seq", "8MiB", 2], "native.policy",
                  env=dict(NATIVE, FAKE_CUDA_READBACK="wrong@2"),
                  expect={"s1_shim": 0, "s2_shim": 1, "s2_domains": "0,1"},
                  checks=[readback(right=3, wrong_domain=1, discarded=1), fallback_reason("another domain", 1)]))
    # The emulated backend has no home to verify: nothing is read back.
    C.append(Case("readback/emulated", "t_driver", ["alloc", "link", "8MiB"], "emulated.policy", env=NATIVE,
                  expect={"a_shim": 1, "a_domains": "-1,-1"}, checks=[readback()]))

    # Chunking: handles per range at, below and above the chunk and with odd remainders; each
    # 2 MiB page homed in its slice's domain, one range to the program; its free keeps it whole
    # in the pool (the handles stay until exit, when the pool is drained: nothing left).
    def chunks(name, size, handles, env, policy="chunk.policy", domains=True):
        C.append(Case("chunk/" + name, "t_driver", ["chunks", size], policy, env=env,
                      expect={"handles": handles, "maps": handles, "pages_ok": 1 if domains else 0,
                              "free_interior": 1, "handles_after": handles}))
    force4 = dict(NATIVE, LDSHIM_CHUNK="4MiB")
    chunks("below", "4MiB", 2, force4)           # 2 MiB slices < 4 MiB chunk: one each
    chunks("at", "8MiB", 2, force4)              # 4 MiB slices = chunk
    chunks("above", "16MiB", 4, force4)          # 8 MiB slices: 2 chunks each
    chunks("odd", "20MiB", 6, force4)            # 10 MiB slices: 4 + 4 + 2
    chunks("odd-unaligned", "19MiB", 6, force4)  # 9.5 -> 10 MiB slices, the same
    chunks("native-default", "80MiB", 4, NATIVE)  # 40 MiB slices: 32 + 8 (the stride)
    chunks("native-slice", "80MiB", 2, dict(NATIVE, LDSHIM_CHUNK="slice"))
    chunks("emulated-default", "80MiB", 2, dict(NATIVE, LDSHIM_BACKEND="emulated"), domains=False)
    chunks("emulated-forced", "80MiB", 4, dict(NATIVE, LDSHIM_BACKEND="emulated", LDSHIM_CHUNK="32MiB"),
           domains=False)
    C.append(Case("chunk/bad-option", "t_driver", ["chunks", "80MiB"], "chunk.policy",
                  env=dict(NATIVE, LDSHIM_CHUNK="32 MiB"),
                  expect={"handles": 4, "pages_ok": 1, "handles_after": 4},
                  checks=[stderr_matches(r"^ldshim: warning: config: LDSHIM_CHUNK=32 MiB is not a size", 1)]))
    # The read-back covers every chunk: the 2nd handle homed wrongly discards the range.
    C.append(Case("chunk/readback", "t_driver", ["alloc", "link", "16MiB"], "chunk.policy",
                  env=dict(force4, FAKE_CUDA_READBACK="wrong@2"), expect={"a_shim": 0},
                  checks=[readback(right=1, wrong_domain=1, discarded=1)]))
    # Address range, interior frees and a copy across the seam of a chunked range.
    rng = {"r_shim": 1, "free_interior": 1, "free_seam": 1, "free_base": 0, "range_after_free": 500}
    C.append(Case("chunk/range", "t_driver", ["range", "20MiB"], "chunk.policy", env=force4, expect=rng))
    # IPC refused, peer access granted over every chunk.
    C.append(Case("chunk/ipc", "t_driver", ["ipc", "16MiB", "1MiB"], "chunk.policy", env=force4,
                  expect={"t_shim": 1, "ipc_tagged": 1, "ipc_untagged": 0}))
    C.append(Case("chunk/twodev", "t_driver", ["twodev", "20MiB"], "chunk.policy",
                  env=dict(force4, FAKE_CUDA_DEVICES=2),
                  expect={"d1_shim": 1, "d1_domains": "0,1", "info_device": 1, "enable_peer": 0,
                          "access_after_dev0": 3, "access_after_dev0_last": 3}))

    # The pool keeps a chunked range whole and hands it out again: one miss, then hits (the
    # program's last 3 MiB request, tagged too, is the other miss).
    def pooled(r):
        if r["pool"]["misses"] != 2 or r["pool"]["hits"] != 2:
            raise Fail("pool hits %d misses %d, expected 2 and 2" % (r["pool"]["hits"], r["pool"]["misses"]))
    C.append(Case("chunk/pool-reuse", "t_driver", ["reuse", "20MiB", 3], "chunk.policy", env=force4,
                  expect={"done": 1}, checks=[report_check(pooled)]))
    # Out of memory in the middle of a slice (its 2nd and its 3rd handle): every handle made so
    # far released, the request falls back to ordinary memory.
    for at in (2, 3):
        C.append(Case("chunk/oom-mid-slice/%d" % at, "t_driver", ["inject", "20MiB"], "chunk.policy",
                      env=dict(force4, FAKE_CUDA_FAIL="cuMemCreate:%d" % (at + 2)),   # +2: the backend check
                      expect={"rc": 0, "i_shim": 0, "free": 0},
                      checks=[fallback_reason("cuMemCreate", 1)]))
    # A pooled chunked range gives way when the program runs out of memory.
    def trimmed(r):
        if r["pool"]["trims"] < 1:
            raise Fail("pool trims %d after an OOM with a full pool" % r["pool"]["trims"])
    C.append(Case("chunk/pool-trim", "t_driver", ["trim", "20MiB", "16MiB"], "chunk.policy",
                  env=dict(force4, FAKE_CUDA_MEM_LIMIT=30 << 20), expect={"t_shim": 1, "rc": 0},
                  checks=[report_check(trimmed)]))

    # Truth sources. The planted cache is the probe's (valid) measurement; the fake's sides
    # (TPC t -> t mod 2 unless FAKE_CUDA_SM_SIDES) are the driver's answer.
    halves = "0" * 66 + "1" * 66
    ptx = dict(NATIVE, FAKE_CUDA_PTX95=1)

    def truth(published, split=None, count=None, ldid=None, disagree=False, source=None, sm_domain=None,
              domains=2):
        """split/ldid: (state, agree, compared) or a state; count: (state, agree)."""
        def fn(r):
            d = r["devices"][0]
            t = d.get("truth")
            if not isinstance(t, dict):
                raise Fail("report: device 0 has no truth section")
            if t["driver_domains"] != domains:
                raise Fail("truth.driver_domains %s, expected %d" % (t["driver_domains"], domains))
            for name, want in (("split", split), ("count", count), ("ldid", ldid)):
                got = t["sources"][name]
                want = want if isinstance(want, tuple) else (want or "absent",)
                if got["state"] != want[0]:
                    raise Fail("truth.%s %s (%s), expected %s" % (name, got["state"], got["why"], want[0]))
                if not got["why"]:
                    raise Fail("truth.%s says no why" % name)
                if len(want) > 1 and (got["agree"], got.get("compared")) [:len(want) - 1] != want[1:]:
                    raise Fail("truth.%s agree/compared %s/%s, expected %s" % (name, got["agree"], got["compared"],
                                                                             want[1:]))
            if t["disagree"] != disagree:
                raise Fail("truth.disagree %s, expected %s" % (t["disagree"], disagree))
            if t["published"] != published:
                raise Fail("truth.published %s, expected %s" % (t["published"], published))
            if source is not None and d["probe"]["source"] != source:
                raise Fail("probe.source %s, expected %s" % (d["probe"]["source"], source))
            if sm_domain is not None and "".join(map(str, d["published"]["sm_domain"])) != sm_domain:
                raise Fail("published sm_domain %s, expected %s" % (d["published"]["sm_domain"], sm_domain))
        return report_check(fn)

    args = ["alloc", "link", "8MiB"]
    # Hopper (no locality domains): every source absent, the probe's map published.
    C.append(Case("truth/none", "t_driver", args, "emulated.policy", wrap=plant(),
                  expect={"a_shim": 1}, checks=[truth("probe", domains=0, source="cache", sm_domain=sides())]))
    # All present and agreeing with the measurement: the probe's map stands.
    C.append(Case("truth/agree", "t_driver", args, "truth_driver.policy", env=ptx, wrap=plant(),
                  checks=[truth("probe", split=("ok", 132, 132), count=("ok", 2), ldid=("ok", 132, 132),
                                source="cache", sm_domain=sides())]))
    # The measurement disagrees: the driver's map is published (default), or the probe's.
    warn_drv = stderr_matches(r"^ldshim: warning: topo: device 0: the probe's map disagrees .*publishing the driver's", 1)
    C.append(Case("truth/disagree/driver", "t_driver", args, "truth_driver.policy", env=ptx, wrap=plant(phys=halves),
                  checks=[truth("split", split=("ok", 68, 132), count=("ok", 2), ldid=("ok", 68, 132),
                                disagree=True, source="driver", sm_domain=sides()), warn_drv]))
    C.append(Case("truth/disagree/probe", "t_driver", args, "truth_probe.policy", env=ptx, wrap=plant(phys=halves),
                  checks=[truth("probe", split=("ok", 68, 132), count=("ok", 2), ldid=("ok", 68, 132),
                                disagree=True, source="cache", sm_domain=halves),
                          stderr_matches(r"^ldshim: warning: topo: device 0: .*publishing the probe's", 1)]))
    # Only %locality_domain_id disagrees (on SM 0): the split, which agrees, is the driver's map.
    odd = "10" + sides()[2:]
    C.append(Case("truth/disagree/ldid-only", "t_driver", args, "truth_driver.policy",
                  env=dict(ptx, FAKE_CUDA_LDID_SIDES=odd), wrap=plant(),
                  checks=[truth("split", split=("ok", 132, 132), count=("ok", 2), ldid=("ok", 131, 132),
                                disagree=True, source="driver", sm_domain=sides())]))
    # The split refused: %locality_domain_id alone is the driver's map.
    C.append(Case("truth/split-refused", "t_driver", args, "truth_driver.policy",
                  env=dict(ptx, FAKE_CUDA_FAIL="cuDevSmResourceSplit:1+"), wrap=plant(phys=halves),
                  checks=[truth("ldid", split="failed", count=("ok", 2), ldid=("ok", 68, 132), disagree=True,
                                source="driver", sm_domain=sides())]))
    # A driver that rejects the PTX 9.5 marker: a reason, not an error.
    C.append(Case("truth/ldid-rejected", "t_driver", args, "truth_driver.policy", env=NATIVE, wrap=plant(),
                  expect={"a_shim": 1},
                  checks=[truth("probe", split=("ok", 132, 132), count=("ok", 2), ldid="failed", source="cache")]))
    # Attribute 157 says 70 SMs a domain; the measurement has 66 in each.
    C.append(Case("truth/count-disagrees", "t_driver", args, "truth_driver.policy",
                  env=dict(ptx, FAKE_CUDA_LD_SMCOUNT=70), wrap=plant(),
                  checks=[truth("probe", split=("ok", 132, 132), count=("ok", 0), ldid=("ok", 132, 132),
                                source="cache")]))
    # No measurement (the probe fell back to the even map): the driver's map, whatever the policy.
    for pol in ("driver", "probe"):
        C.append(Case("truth/no-measurement/%s" % pol, "t_driver", args, "truth_%s.policy" % pol,
                      env=dict(ptx, FAKE_CUDA_SM_SIDES=halves),
                      checks=[truth("split", split=("ok", 68, 132), count=("ok", 2), ldid=("ok", 68, 132),
                                    disagree=True, source="driver", sm_domain=halves)]))
    return C
