"""cases_compute.py — compute binding (shim/compute.c) on the fake driver's green contexts.

The fake's SMs lie in two locality domains ("sides": TPC t -> t mod 2, FAKE_CUDA_SM_SIDES
otherwise); its probe kernels cannot run, so each case plants a measured (clustered) topology
in the cache, the way a real GPU's first run leaves one. plant_cache() writes the file the
probe cache would (shim/probe_cache.c's format)."""
import json
import os

from run_cases import Case, Fail, report_check, stderr_matches, stderr_only, same_as_noshim

NSMS = 132
UUID = "GPU-fa6ec0da-1300-4900-8a17-0000000000%02x"


def sides(nsms=NSMS):
    return "".join(str((s // 2) % 2) for s in range(nsms))


def fnv1a(data):
    h = 0xcbf29ce484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def cache_text(dev=0, phys=None, driver=13000, valid=1, mode="clustered"):
    phys = phys or sides()
    body = ("ldshim-topology-cache 1\nuuid %s\ndriver %d\nkmod -\ntopology_version 2\nnum_sms %d\n"
            "num_domains 2\nmode %s\nvalid %d\nattempts 1\nnear 280.000\nfar 310.000\n"
            "separation 0.90000\ntpcs_moved 0\nphysical %s\nbalanced %s\nverdict planted by the test\n"
            % (UUID % dev, driver, len(phys), mode, valid, phys, phys))
    body = body.encode()
    return body + b"checksum %016x\n" % fnv1a(body)


def plant(devices=1, phys=None):
    """The argv prefix of a case that plants a measured topology into $LDSHIM_CACHE_DIR."""
    return ["/bin/sh", "-c", 'mkdir -p "$LDSHIM_CACHE_DIR" && ' + " && ".join(
        "printf '%s' > \"$LDSHIM_CACHE_DIR/topology-%s-13000.txt\"" % (
            cache_text(d, phys).decode().replace("\n", "\\n").replace("%", "%%"), UUID % d)
        for d in range(devices)) + ' && exec "$0" "$@"']


def fake_groups(nsms=NSMS, size=8):
    """The fake's cuDevSmResourceSplitByCount groups: side 0's SMs in id order, then side 1's."""
    groups = []
    for side in (0, 1):
        sms = [s for s in range(nsms) if (s // 2) % 2 == side]
        groups += [sms[i:i + size] for i in range(0, len(sms) - size + 1, size)]
    return groups


def groups_text(groups, dev=0, split="bycount:8:0"):
    body = "ldshim-smgroups 1\nuuid %s\ndriver 13000\nnum_sms %d\nsplit %s\ngroups %d\n" % (
        UUID % dev, NSMS, split, len(groups))
    for g in groups:
        mask = 0
        for sm in g:
            mask |= 1 << sm
        body += "g %d -1 %064x\n" % (len(g), mask)
    body = body.encode()
    return body + b"checksum %016x\n" % fnv1a(body)


def plant_groups(groups):
    """argv prefix: a measured topology and an SM-group cache with these groups."""
    name = "smgroups-%s-13000-bycount_8_0.txt" % (UUID % 0)
    pre = plant()
    script = pre[2].replace(' && exec "$0" "$@"', "") + " && printf '%s' > \"$LDSHIM_CACHE_DIR/%s\"" % (
        groups_text(groups).decode().replace("\n", "\\n"), name) + ' && exec "$0" "$@"'
    return ["/bin/sh", "-c", script]


def twice(prefix):
    """argv prefix that runs the program once quietly, then again (the second writes the report)."""
    return prefix[:2] + [prefix[2].replace('exec "$0" "$@"', '"$0" "$@" > /dev/null && exec "$0" "$@"')]


def compute_of(r, dev=0):
    for d in r.get("devices", []):
        if d.get("device") == dev:
            c = d.get("compute")
            if c is None:
                raise Fail("report: device %d has no compute section" % dev)
            return c
    raise Fail("report: no device %d" % dev)


def check_compute(applied, sm_count=None, per_domain=None, reason=None, split=None):
    def fn(r):
        c = compute_of(r)
        if c["applied"] != applied:
            raise Fail("compute applied %s, expected %s (reason: %s)" % (c["applied"], applied, c.get("reason")))
        if sm_count is not None and c["sm_count"] != sm_count:
            raise Fail("compute sm_count %s, expected %s" % (c["sm_count"], sm_count))
        if sm_count is not None and applied != "all" and len(c["sms"]) != sm_count:
            raise Fail("compute sms lists %d SMs, expected %d" % (len(c["sms"]), sm_count))
        if per_domain is not None and c["sms_per_domain"][:len(per_domain)] != per_domain:
            raise Fail("compute sms_per_domain %s, expected %s" % (c["sms_per_domain"], per_domain))
        if reason is not None and reason not in (c.get("reason") or ""):
            raise Fail("compute reason %r lacks %r" % (c.get("reason"), reason))
        if split is not None and c["split"] != split:
            raise Fail("compute split %s, expected %s" % (c["split"], split))
        if applied != "all" and not c["verified"]:
            raise Fail("compute applied but not verified by the marker")
        phases = [c["groups_ms"], c["context_ms"], c["verify_ms"]]
        if min(phases) < 0 or sum(phases) > c["elapsed_ms"] + 0.01:
            raise Fail("compute phases %s do not fit in elapsed_ms %s" % (phases, c["elapsed_ms"]))
    return report_check(fn)


def state_is(want):
    def fn(rep):
        if rep["state"] != want:
            raise Fail("report: state %r, expected %r" % (rep["state"], want))
    return fn


def cases(a):
    C = []
    plant1 = plant()
    bound = {"cur_is_primary": 1, "real_is_green": 1, "pts_rc": 0, "ptsz_rc": 0, "ptds_copy_rc": 0,
             "pts_sync_rc": 0, "event_rc": 0, "wait_rc": 0, "event_pts_rc": 0, "graph_pts_rc": 0,
             "coop_fit_rc": 720, "coop_big_rc": 720, "stream_ctx_primary": 1, "ptr_ctx_primary": 1,
             "pop_primary": 1, "topo_magic": 1, "topo_version": 2, "topo_bound": 1, "green_live": 1,
             "host_topo_small_rc": -1, "host_topo_small_untouched": 1, "host_topo_v1_rc": 0,
             "host_topo_v1_tail_untouched": 1, "host_topo_rc": 0, "host_topo_same": 1}

    # Without the shim (and in stock, and with compute = all) nothing is bound.
    C.append(Case("compute/paths/noshim", "t_compute", ["paths"], shim=False,
                  expect={"null_sms": NSMS, "pts_rc": 0, "ptsz_rc": 0, "attr_sms": NSMS, "green_live": 0}))
    for st in ("stock",):
        C.append(Case("compute/paths/%s" % st, "t_compute", ["paths"], "compute.policy", env={"LDSHIM_STATE": st},
                      wrap=plant1, quiet=True,
                      checks=[lambda r, res: same_as_noshim(r, res, Case("", "t_compute", ["paths"], shim=False))]))
    # LDSHIM_COMPUTE=domain:N alone (no policy, no state) means compute-only in domain N: every
    # path bound; asked for by name, stock stays pass-through; a placement that is not a
    # domain (spread:K) with no state binds nothing, and says so.
    alone = dict(bound, attr_sms=NSMS, topo_bound_sms=64, topo_sm_bound=64, topo_domain=1)
    for tag in ("null", "legacy", "stream", "nbstream", "pts", "ptsz", "graph"):
        alone["%s_sms" % tag] = 64
        alone["%s_side" % tag] = 1
    C.append(Case("compute/paths/compute-alone-binds", "t_compute", ["paths"], env={"LDSHIM_COMPUTE": "domain:1"},
                  wrap=plant1, expect=alone,
                  checks=[check_compute("domain:1", 64, [0, 64], split="aligned"),
                          report_check(state_is("compute-only"))]))
    C.append(Case("compute/paths/policy-compute-alone-binds", "t_compute", ["paths"], "compute_nostate.policy",
                  wrap=plant1, expect=alone,
                  checks=[check_compute("domain:1", 64, [0, 64], split="aligned"),
                          report_check(state_is("compute-only"))]))
    C.append(Case("compute/paths/compute-in-named-stock", "t_compute", ["paths"],
                  env={"LDSHIM_COMPUTE": "domain:0", "LDSHIM_STATE": "stock"}, wrap=plant1, quiet=True,
                  checks=[lambda r, res: same_as_noshim(r, res, Case("", "t_compute", ["paths"], shim=False))]))
    C.append(Case("compute/paths/spread-in-stock", "t_compute", ["paths"], env={"LDSHIM_COMPUTE": "spread:32"},
                  wrap=plant1, expect={"null_sms": NSMS, "real_is_green": 0, "green_live": 0},
                  checks=[stderr_matches(r"^ldshim: warning: config: compute = spread:32 is ignored in state stock", 1)]))
    C.append(Case("compute/paths/all", "t_compute", ["paths"], "compute.policy", env={"LDSHIM_COMPUTE": "all"},
                  wrap=plant1, expect={"null_sms": NSMS, "real_is_green": 0, "topo_bound": 0, "green_live": 0,
                                       "attr_sms": NSMS}))

    # domain:0 and domain:1: every path on the 64 SMs of one side (8 groups of 8 of its 66).
    for dom in (0, 1):
        exp = dict(bound, attr_sms=NSMS, topo_bound_sms=64, topo_sm_bound=64, topo_domain=dom)
        for tag in ("null", "legacy", "stream", "nbstream", "pts", "ptsz", "graph"):
            exp["%s_sms" % tag] = 64
            exp["%s_side" % tag] = dom
        C.append(Case("compute/paths/domain%d" % dom, "t_compute", ["paths"], "compute.policy",
                      env={"LDSHIM_COMPUTE": "domain:%d" % dom}, wrap=plant1, expect=exp,
                      checks=[check_compute("domain:%d" % dom, 64, [64, 0] if dom == 0 else [0, 64], split="aligned")]))
    # The less common entry points that take a stream (tests/unit/stream_hooks.py checks that
    # every one of cuda.h is hooked; these run a few through the fake).
    more = {"prefetch_v1_rc": 0, "prefetch_v1_ptsz_rc": 0, "copy3dpeer_rc": 0, "capinfo_v2_rc": 0, "capinfo_v2_none": 1,
            "grid_async_rc": 0, "occupancy_rc": 0, "instantiate_upload_rc": 0, "instantiate_result": 0,
            "stream_green_rc": 0, "null_green_rc": 0, "stream_green_none": 1, "null_green_none": 1}
    C.append(Case("compute/more-streams/noshim", "t_compute", ["more-streams"], shim=False,
                  expect=dict(more, grid_async_sms=NSMS, occupancy_clusters=NSMS)))
    C.append(Case("compute/more-streams/domain1", "t_compute", ["more-streams"], "compute.policy",
                  env={"LDSHIM_COMPUTE": "domain:1"}, wrap=plant1,
                  expect=dict(more, grid_async_sms=64, grid_async_side=1, occupancy_clusters=64)))
    # A synchronous _ptds copy runs on the thread's own (blocking) stream, not the legacy
    # stream, so another thread's capture of a blocking stream survives it.
    # (The fake cannot capture the per-thread stream of a plain context; bound, it is the
    # thread's own created stream, and a synchronous copy while it captures is refused.)
    for name, kw, pts in (("noshim", dict(shim=False), {"pts_capture_rc": 900}),
                          ("domain0", dict(policy="compute.policy", env={"LDSHIM_COMPUTE": "domain:0"}, wrap=plant1),
                           {"pts_capture_rc": 0, "ptds_in_capture_rc": 900, "pts_end_rc": 0})):
        C.append(Case("compute/ptds-capture/" + name, "t_compute", ["ptds-capture"],
                      expect=dict(pts, ptds_copy_rc=0, capture_end_rc=0, copy_ok=1), **kw))
    C.append(Case("fake/legacy-invalidates-capture", "t_compute", ["ptds-capture", "legacy"], shim=False,
                  expect={"ptds_copy_rc": 906, "capture_end_rc": 901, "copy_ok": 0}))
    # The H200's split: 7 groups on the side of SM 0, 8 on the other.
    h200 = {"FAKE_CUDA_GROUPS_PER_SIDE": "7,8"}
    C.append(Case("compute/h200/domain0", "t_compute", ["paths"], "compute.policy", env=dict(h200, LDSHIM_COMPUTE="domain:0"),
                  wrap=plant1, expect={"null_sms": 56, "null_side": 0, "attr_sms": NSMS, "coop_big_rc": 720},
                  checks=[check_compute("domain:0", 56, [56, 0])]))
    C.append(Case("compute/h200/domain1-cap", "t_compute", ["paths"], "compute.policy",
                  env=dict(h200, LDSHIM_COMPUTE="domain:1", LDSHIM_COMPUTE_SMS=56),
                  wrap=plant1, expect={"null_sms": 56, "null_side": 1, "topo_bound_sms": 56},
                  checks=[check_compute("domain:1", 56, [0, 56])]))
    # The study states on the H200's split (7 groups of 8 on one side, 8 on the other): every
    # bound state gets the smaller side's 56 SMs, so the states differ only in placement.
    # The report's compute_setting says what the state asks for, and the warning about a
    # cooperative launch that does not fit names the placement applied.
    def setting(text):
        def fn(r):
            s = r["compute_setting"]
            if s["compute"] != text or s["equal_sm_count"] is not True:
                raise Fail("compute_setting %s, expected compute %r with equal_sm_count" % (s, text))
        return report_check(fn)
    for st, x, applied, side, per, text in (("compute-only", 1, "domain:1", 1, [0, 56], "domain:1"),
                                            ("full-ld", 0, "domain:0", 0, [56, 0], "domain:0"),
                                            ("full-ld", 1, "domain:1", 1, [0, 56], "domain:1"),
                                            ("mismatch-ld", 0, "domain:1", 1, [0, 56], "the domain after 0"),
                                            ("mismatch-ld", 1, "domain:0", 0, [56, 0], "the domain after 1"),
                                            ("sm-control", 1, "spread:56", "mixed", None,
                                             "spread over as many SMs as a domain binding gets")):
        C.append(Case("compute/study/%s/x%d" % (st, x), "t_compute", ["paths"], "compute.policy",
                      env=dict(h200, LDSHIM_STATE=st, LDSHIM_DOMAIN=x), wrap=plant1,
                      expect={"null_sms": 56, "null_side": side, "graph_sms": 56, "pts_sms": 56,
                              "attr_sms": NSMS},
                      checks=[check_compute(applied, 56, per), setting(text),
                              stderr_matches(r"cooperative launch of 132 blocks failed .* bound to %s \(56 SMs\)" % applied,
                                             1)]))
    C.append(Case("compute/study/memory-only", "t_compute", ["paths"], "compute.policy",
                  env=dict(h200, LDSHIM_STATE="memory-only", LDSHIM_DOMAIN=1), wrap=plant1,
                  expect={"null_sms": NSMS, "real_is_green": 0, "green_live": 0}))
    # A study state overrides the file's compute key, and says so once.
    C.append(Case("compute/study/overrides-compute", "t_compute", ["paths"], "compute.policy",
                  env=dict(h200, LDSHIM_STATE="compute-only", LDSHIM_COMPUTE="spread:32"), wrap=plant1,
                  expect={"null_sms": 56, "null_side": 0},
                  checks=[check_compute("domain:0", 56, [56, 0]),
                          stderr_matches(r"state compute-only sets the compute placement itself; "
                                         r"compute = spread:32 is ignored", 1)]))
    # Two GPUs in one process: each device gets its own binding (a green context per device),
    # switching between them keeps each on its own; the report has one compute entry each.
    def two_bound(applied, per):
        def fn(r):
            for dev in (0, 1):
                c = compute_of(r, dev)
                if c["applied"] != applied or c["sm_count"] != 64 or c["sms_per_domain"][:2] != per:
                    raise Fail("device %d: compute %s / %s SMs / %s" % (dev, c["applied"], c["sm_count"],
                                                                     c["sms_per_domain"]))
        return report_check(fn)
    two = {"FAKE_CUDA_DEVICES": 2}
    exp2 = {"green_live": 2}
    for d in (0, 1):
        for pz in (0, 1):
            exp2.update({"dev%d_pass%d_sms" % (d, pz): 64, "dev%d_pass%d_side" % (d, pz): 1,
                         "dev%d_pass%d_green" % (d, pz): 1, "dev%d_pass%d_cur_is_primary" % (d, pz): 1})
    C.append(Case("compute/twodev/domain1", "t_compute", ["twodev"], "compute.policy",
                  env=dict(two, LDSHIM_COMPUTE="domain:1"), wrap=plant(2), expect=exp2,
                  checks=[two_bound("domain:1", [0, 64])]))
    exp2s = {k: (0 if k.endswith("_side") else v) for k, v in exp2.items()}
    C.append(Case("compute/twodev/full-ld", "t_compute", ["twodev"], "compute.policy",
                  env=dict(two, LDSHIM_STATE="full-ld", LDSHIM_DOMAIN=0), wrap=plant(2), expect=exp2s,
                  checks=[two_bound("domain:0", [64, 0])]))
    # A thread making one device's primary current does not wait for another device's build.
    C.append(Case("compute/twodev/no-wait-for-other-device", "t_compute", ["twodev-race"], "compute.policy",
                  env=dict(two, LDSHIM_COMPUTE="domain:1", FAKE_CUDA_UUID_DELAY="300@0"), wrap=plant(2),
                  expect={"dev1_waited": 0, "dev1_sms": 64, "dev1_side": 1, "dev0_sms": 64, "dev0_side": 1}))
    C.append(Case("compute/twodev/noshim", "t_compute", ["twodev"], shim=False, env=two,
                  expect={"dev0_pass0_sms": NSMS, "dev1_pass1_sms": NSMS, "dev1_pass0_green": 0, "green_live": 0}))
    # spread:K: as evenly from both sides as whole groups allow (4 + 3 groups of 8 = 56).
    C.append(Case("compute/spread56", "t_compute", ["paths"], "compute.policy", env=dict(h200, LDSHIM_COMPUTE="spread:56"),
                  wrap=plant1, expect={"null_sms": 56, "null_side": "mixed", "topo_domain": -1},
                  checks=[check_compute("spread:56", 56, [32, 24])]))
    # fine: co-scheduling ignored, 2-SM groups: every SM of the side (66).
    C.append(Case("compute/fine", "t_compute", ["paths"], "compute.policy",
                  env={"LDSHIM_COMPUTE": "domain:1", "LDSHIM_COMPUTE_SPLIT": "fine"}, wrap=plant1,
                  expect={"null_sms": 66, "null_side": 1}, checks=[check_compute("domain:1", 66, [0, 66], split="fine")]))
    # backfill: the side's 56 SMs topped up to an even share (66) from outside it.
    C.append(Case("compute/backfill", "t_compute", ["paths"], "compute.policy",
                  env=dict(h200, LDSHIM_COMPUTE="domain:0", LDSHIM_COMPUTE_SPLIT="backfill"), wrap=plant1,
                  expect={"null_sms": 64, "null_side": "mixed"},
                  checks=[check_compute("domain:0", 64, [56, 8], split="backfill")]))
    # By default the SM-count attribute stays the device's: a cooperative grid sized by it does
    # not fit the bound SMs (one warning); with LDSHIM_COMPUTE_SMCOUNT=bound it does.
    C.append(Case("compute/smcount-device", "t_compute", ["paths"], "compute.policy", env={"LDSHIM_COMPUTE": "domain:0"},
                  wrap=plant1, expect={"attr_sms": NSMS, "coop_fit_rc": 720, "null_sms": 64},
                  checks=[stderr_matches(r"cooperative launch of 132 blocks failed", 1)]))
    C.append(Case("compute/smcount-bound", "t_compute", ["paths"], "compute.policy",
                  env={"LDSHIM_COMPUTE": "domain:0", "LDSHIM_COMPUTE_SMCOUNT": "bound"}, wrap=plant1,
                  expect={"attr_sms": 64, "coop_fit_rc": 0, "coop_big_rc": 720, "null_sms": 64},
                  checks=[stderr_matches(r"cooperative launch of 65 blocks failed", 1)]))
    # What cuCtxGetCurrent answers can be the green context (diagnostics).
    C.append(Case("compute/current-green", "t_compute", ["paths"], "compute.policy",
                  env={"LDSHIM_COMPUTE": "domain:0", "LDSHIM_COMPUTE_CURRENT": "green"}, wrap=plant1,
                  expect={"cur_is_primary": 0, "null_sms": 64, "stream_ctx_primary": 0}))

    # Fallbacks: one line, unbound, the report says why.
    C.append(Case("compute/fallback/no-map", "t_compute", ["paths"], "compute.policy", env={"LDSHIM_COMPUTE": "domain:0"},
                  expect={"null_sms": NSMS, "real_is_green": 0, "topo_bound": 0, "green_live": 0},
                  checks=[check_compute("all", reason="no measured SM->domain map"),
                          stderr_matches(r"compute: device 0 runs unbound .*no measured SM->domain map", 1)]))
    C.append(Case("compute/fallback/straddle", "t_compute", ["paths"], "compute.policy",
                  env={"LDSHIM_COMPUTE": "domain:0", "FAKE_CUDA_SPLIT": "straddle"}, wrap=plant1,
                  expect={"null_sms": NSMS, "real_is_green": 0, "green_live": 0},
                  checks=[check_compute("all", reason="no SM group lies wholly in domain 0"),
                          stderr_matches(r"runs unbound", 1)]))
    C.append(Case("compute/fallback/no-domain", "t_compute", ["paths"], "compute.policy", env={"LDSHIM_COMPUTE": "domain:5"},
                  wrap=plant1, expect={"null_sms": NSMS},
                  checks=[check_compute("all", reason="no such domain (the GPU has 2 domains, 0..1)")]))
    C.append(Case("compute/fallback/green-create", "t_compute", ["paths"], "compute.policy",
                  env={"LDSHIM_COMPUTE": "domain:0", "FAKE_CUDA_FAIL": "cuGreenCtxCreate:1+"}, wrap=plant1,
                  expect={"null_sms": NSMS, "real_is_green": 0},
                  checks=[check_compute("all", reason="green context for one SM group")]))
    C.append(Case("compute/fallback/no-green-api", "t_compute", ["paths"], "compute.policy",
                  env={"LDSHIM_COMPUTE": "domain:0", "FAKE_CUDA_FAIL": "cuDeviceGetDevResource:1+:801"}, wrap=plant1,
                  expect={"null_sms": NSMS}, checks=[check_compute("all", reason="cuDeviceGetDevResource")]))
    C.append(Case("compute/fallback/probe-off", "t_compute", ["paths"], "compute_probe_off.policy", wrap=plant1,
                  expect={"null_sms": NSMS, "topo_magic": 0},
                  checks=[check_compute("all", reason="no SM->domain map (probe off or failed)"),
                          stderr_matches(r"runs unbound", 1)]))
    C.append(Case("compute/ownctx", "t_compute", ["ownctx"], "compute.policy", env={"LDSHIM_COMPUTE": "domain:0"},
                  wrap=plant1, expect={"own_sms": NSMS},
                  checks=[stderr_matches(r"a context the program created itself \(cuCtxCreate\) runs unbound", 1)]))

    # cudart, dynamic and static, and one built with --default-stream per-thread.
    for prog in ("t_runtime", "t_runtime_static"):
        C.append(Case("compute/rt/%s/noshim" % prog, prog, ["launch", "8MiB"], shim=False,
                      expect={"null_sms": NSMS, "stream_sms": NSMS, "pts_rc": 0}))
        C.append(Case("compute/rt/%s/noshim-per-thread" % prog, prog, ["launch", "8MiB"], shim=False,
                      env={"FAKERT_PER_THREAD": 1}, expect={"null_sms": NSMS, "pts_rc": 0, "pts_sync_rc": 0}))
        for pt in (0, 1):
            C.append(Case("compute/rt/%s/domain1%s" % (prog, "-per-thread" if pt else ""), prog, ["launch", "8MiB"],
                          "compute.policy", env={"LDSHIM_COMPUTE": "domain:1", "FAKERT_PER_THREAD": pt}, wrap=plant1,
                          expect={"null_sms": 64, "null_side": 1, "stream_sms": 64, "stream_side": 1, "pts_rc": 0,
                                  "pts_sms": 64, "pts_side": 1, "pts_sync_rc": 0},
                          checks=[check_compute("domain:1", 64, [0, 64]),
                                  report_check(lambda r: r["rules"][0]["allocations"] == 1 or
                                               (_ for _ in ()).throw(Fail("the 8 MiB rule did not tag")))],
                          green_at_exit=1))     # the runtime never releases the primary
    # The fake reproduces the driver's failure the shim works around: a program that makes a
    # green context current itself cannot use the per-thread default stream.
    C.append(Case("fake/green-per-thread-fails", "t_compute", ["selfgreen"], shim=False,
                  expect={"green_null_sms": 8, "green_null_side": 0, "green_pts_rc": 400}))

    # The SM-group cache: a second process reuses it; a stale one is measured again, once.
    C.append(Case("compute/cache/reuse", "t_compute", ["paths"], "compute.policy", env={"LDSHIM_COMPUTE": "domain:0"},
                  wrap=twice(plant1), expect={"null_sms": 64},
                  checks=[report_check(lambda r: compute_of(r)["groups_from_cache"] or
                                       (_ for _ in ()).throw(Fail("the second run measured the groups again")))]))
    swapped = fake_groups()
    swapped[0], swapped[8] = swapped[8], swapped[0]
    C.append(Case("compute/cache/stale", "t_compute", ["paths"], "compute.policy", env={"LDSHIM_COMPUTE": "domain:0"},
                  wrap=plant_groups(swapped), expect={"null_sms": 64, "null_side": 0},
                  checks=[check_compute("domain:0", 64, [64, 0]),
                          report_check(lambda r: not compute_of(r)["groups_from_cache"] or
                                       (_ for _ in ()).throw(Fail("a stale cache was used"))),
                          stderr_matches(r"SM-group cache is stale .*measuring the groups again", 1)]))
    # A stale cache is measured again inside the same build: the study state's shift to the
    # next domain (mismatch-ld) is applied once, not once per attempt.
    C.append(Case("compute/cache/stale/mismatch-ld", "t_compute", ["paths"], "compute.policy",
                  env={"LDSHIM_STATE": "mismatch-ld", "LDSHIM_DOMAIN": 0}, wrap=plant_groups(swapped),
                  expect={"null_sms": 64, "null_side": 1},
                  checks=[check_compute("domain:1", 64, [0, 64]),
                          stderr_matches(r"SM-group cache is stale .*measuring the groups again", 1)]))
    C.append(Case("compute/cache/good", "t_compute", ["paths"], "compute.policy", env={"LDSHIM_COMPUTE": "domain:1"},
                  wrap=plant_groups(fake_groups()), expect={"null_sms": 64, "null_side": 1},
                  checks=[stderr_only(r"^ldshim: warning: compute: a cooperative launch of 132 blocks failed"),
                          report_check(lambda r: compute_of(r)["groups_from_cache"] or
                                       (_ for _ in ()).throw(Fail("a good cache was not used")))]))

    # CUDA >= 13.4 with locality domains: the driver's split by domain, no measured map needed.
    native = {"FAKE_CUDA_DOMAINS": 2}
    for method, count in (("aligned", 64), ("fine", 66), ("backfill", 66)):
        C.append(Case("compute/native/%s" % method, "t_compute", ["paths"], "compute.policy",
                      env=dict(native, LDSHIM_COMPUTE="domain:1", LDSHIM_COMPUTE_SPLIT=method),
                      expect={"null_sms": count, "null_side": 1, "attr_sms": NSMS, "topo_bound_sms": count},
                      checks=[check_compute("domain:1", count, [0, count], split=method),
                              report_check(lambda r: "locality domain" in compute_of(r)["method"] or
                                           (_ for _ in ()).throw(Fail("not the driver's split")))]))
    C.append(Case("compute/native/spread64", "t_compute", ["paths"], "compute.policy",
                  env=dict(native, LDSHIM_COMPUTE="spread:64"), expect={"null_sms": 64, "null_side": "mixed"},
                  checks=[check_compute("spread:64", 64, [32, 32])]))

    # A failure at any green-context step leaves the program working (bound or not, as the
    # report says) with nothing leaked; the fake's live counts, green contexts included, are
    # checked at exit by every case.
    for name, nth in (("cuDeviceGetDevResource", 1), ("cuDevSmResourceSplitByCount", 1),
                      ("cuDevResourceGenerateDesc", 1), ("cuDevResourceGenerateDesc", 17), ("cuGreenCtxCreate", 1),
                      ("cuGreenCtxCreate", 17), ("cuCtxFromGreenCtx", 1), ("cuCtxFromGreenCtx", 17),
                      ("cuGreenCtxStreamCreate", 1), ("cuGreenCtxStreamCreate", 17), ("cuLibraryLoadData", 1),
                      ("cuLibraryGetKernel", 2), ("cuKernelSetAttribute", 1), ("cuLaunchKernel", 1),
                      ("cuLaunchKernel", 34), ("cuStreamSynchronize", 1), ("cuMemcpyDtoH_v2", 1),
                      ("cuMemAlloc_v2", 1), ("cuPushCurrent_v2", 1)):
        name_ = "cuCtxPushCurrent_v2" if name == "cuPushCurrent_v2" else name
        def consistent(r, res):
            c = compute_of(res.report)
            bound = res.out.get("null_sms") == "64"
            if bound != (c["applied"] != "all"):
                raise Fail("kernels ran on %s SMs but the report says applied=%s (%s)" % (
                    res.out.get("null_sms"), c["applied"], c.get("reason")))
            if not bound and not c.get("reason"):
                raise Fail("unbound without a reason")
        C.append(Case("compute/fault/%s:%d" % (name_, nth), "t_compute", ["paths"], "compute.policy",
                      env={"LDSHIM_COMPUTE": "domain:0", "FAKE_CUDA_FAIL": "%s:%d" % (name_, nth)}, wrap=plant1,
                      checks=[consistent]))

    # ldshim-probe draws the binding the shim would apply (no preload: it links the probe).
    probe_tool = os.path.join("..", "bin", "ldshim-probe")
    C.append(Case("compute/probe-tool", probe_tool, ["--compute", "domain:1", "--compute-sms", "56"], shim=False,
                  env={"LDSHIM_LIBCUDA": "libcuda.so.1", "FAKE_CUDA_GROUPS_PER_SIDE": "7,8"}, wrap=plant1,
                  checks=[stderr_only(r"^$"), lambda r, res: None if (
                      "compute  domain:1: 56 of 132 SMs in 7 group(s)" in res.stdout and "checked with the marker" in res.stdout
                      and res.stdout.count("##") == 28) else (_ for _ in ()).throw(Fail("picture: " + res.stdout[-400:]))]))
    C.append(Case("compute/probe-tool/json", probe_tool, ["--json", "--compute", "spread:64"], shim=False,
                  env={"LDSHIM_LIBCUDA": "libcuda.so.1"}, wrap=plant1,
                  checks=[lambda r, res: None if (json.loads(res.stdout)["compute"]["sm_count"] == 64 and
                                                  json.loads(res.stdout)["compute"]["applied"]) else
                          (_ for _ in ()).throw(Fail("json: " + res.stdout[:300]))]))
    C.append(Case("compute/probe-tool/bad-arg", probe_tool, ["--compute", "all"], shim=False, rc=2, zero_counts=False,
                  checks=[stderr_matches(r"--compute all: expected domain:N or spread:K", 1)]))

    # Threads, reset, fork.
    C.append(Case("compute/threads", "t_compute", ["threads", 16, 200], "compute.policy", env={"LDSHIM_COMPUTE": "domain:1"},
                  wrap=plant1, expect={"threads_ok": 1, "thread_sms": 64, "distinct_ctx": 1}))
    C.append(Case("compute/threads/per-thread-contexts", "t_compute", ["threads", 8, 100], "compute.policy",
                  env={"LDSHIM_COMPUTE": "domain:1", "LDSHIM_COMPUTE_CONTEXTS": "thread"},
                  wrap=plant1, expect={"threads_ok": 1, "thread_sms": 64, "distinct_ctx": 8}))
    # One green context per thread: what another thread made is still the primary's to this
    # one, and a stream outlives the thread that made it.
    xt = {"other_stream_ctx_primary": 1, "other_ptr_ctx_primary": 1, "exited_stream_rc": 0,
          "exited_stream_destroy_rc": 0}
    C.append(Case("compute/threads/per-thread-contexts/cross-thread", "t_compute", ["xthread"], "compute.policy",
                  env={"LDSHIM_COMPUTE": "domain:1", "LDSHIM_COMPUTE_CONTEXTS": "thread"}, wrap=plant1,
                  expect=dict(xt, exited_stream_sms=64, exited_stream_side=1)))
    C.append(Case("compute/threads/cross-thread", "t_compute", ["xthread"], "compute.policy",
                  env={"LDSHIM_COMPUTE": "domain:1"}, wrap=plant1, expect=dict(xt, exited_stream_sms=64)))
    C.append(Case("compute/threads/cross-thread/noshim", "t_compute", ["xthread"], shim=False,
                  expect=dict(xt, exited_stream_sms=NSMS)))
    C.append(Case("compute/reset", "t_compute", ["reset"], "compute.policy", env={"LDSHIM_COMPUTE": "domain:0"},
                  wrap=plant1, expect={"before_sms": 64, "green_after_reset": 0, "same_primary": 1,
                                       "after_sms": 64, "after_side": 0, "green_live": 1}))
    # A second thread that retains the primary while the first still probes waits for the
    # binding instead of running unbound.
    C.append(Case("compute/threads/retain-while-probing", "t_compute", ["race"], "compute.policy",
                  env={"LDSHIM_COMPUTE": "domain:1", "FAKE_CUDA_UUID_DELAY": 300}, wrap=plant1,
                  expect={"b_waited": 1, "b_sms": 64, "b_side": 1, "b_green": 1}))
    # A build that takes longer than the bounded wait (10 s): the waiting thread runs unbound,
    # and says so once.
    C.append(Case("compute/threads/retain-while-probing/timeout", "t_compute", ["race"], "compute.policy",
                  env={"LDSHIM_COMPUTE": "domain:1", "FAKE_CUDA_UUID_DELAY": "12000:1"}, wrap=plant1, timeout=300,
                  expect={"b_waited": 0, "b_sms": NSMS, "b_green": 0},
                  checks=[stderr_matches(r"^ldshim: warning: compute: device 0: its binding is still being built after 10 s; "
                                         r"this thread runs unbound", 1)]))
    # ... also when the thread probing does so for a context it created itself.
    C.append(Case("compute/threads/retain-while-ownctx-probes", "t_compute", ["race", "own"], "compute.policy",
                  env={"LDSHIM_COMPUTE": "domain:1", "FAKE_CUDA_UUID_DELAY": 300}, wrap=plant1,
                  expect={"b_waited": 1, "b_sms": 64, "b_side": 1, "b_green": 1}))
    # A reset while the green context is current: the resetting thread has the primary current
    # again (unbound until the next retain binds it again, then bound without a new
    # cuCtxSetCurrent); another thread is still told its context is the primary.
    C.append(Case("compute/reset/current", "t_compute", ["reset-current"], "compute.policy", env={"LDSHIM_COMPUTE": "domain:0"},
                  wrap=plant1, expect={"before_sms": 64, "other_cur_is_primary": 1, "green_after_reset": 0,
                                       "reset_cur_is_primary": 1, "reset_real_is_green": 0, "reset_launch_rc": 0,
                                       "reset_sms": NSMS, "retain_cur_is_primary": 1, "retain_real_is_green": 1,
                                       "after_sms": 64, "after_side": 0, "green_live": 1}))
    C.append(Case("compute/reset/current/noshim", "t_compute", ["reset-current"], shim=False,
                  expect={"before_sms": NSMS, "other_cur_is_primary": 1, "green_after_reset": 0,
                          "reset_cur_is_primary": 1, "reset_real_is_green": 0, "reset_launch_rc": 0,
                          "reset_sms": NSMS, "retain_cur_is_primary": 1, "retain_real_is_green": 0,
                          "after_sms": NSMS, "green_live": 0}))
    # The program's last release tears the primary down as without the shim (the green
    # context, which holds a reference, goes first); the next retain binds again.
    C.append(Case("compute/release", "t_compute", ["release"], "compute.policy", env={"LDSHIM_COMPUTE": "domain:0"},
                  wrap=plant1, expect={"before_sms": 64, "released_refs": 0, "released_teardowns": 1,
                                       "green_after_release": 0, "released_real_is_green": 0,
                                       "after_sms": 64, "after_side": 0, "green_live": 1}))
    C.append(Case("compute/release/noshim", "t_compute", ["release"], shim=False,
                  expect={"before_sms": NSMS, "released_refs": 0, "released_teardowns": 1, "green_after_release": 0,
                          "released_real_is_green": 0, "after_sms": NSMS, "green_live": 0}))
    # The shim tears nothing down at exit (other libraries' teardown may already have run): an
    # exit handler that runs later still launches, bound, in the live green context, and is
    # told the primary; its release of the primary leaves the binding in place.
    C.append(Case("compute/exit-handler", "t_compute", ["exit"], "compute.policy", env={"LDSHIM_COMPUTE": "domain:0"},
                  wrap=plant1, expect={"main_sms": 64, "exit_launch_rc": 0, "exit_sms": 64, "exit_cur_is_primary": 1},
                  green_at_exit=1))
    C.append(Case("compute/exit-handler/noshim", "t_compute", ["exit"], shim=False,
                  expect={"main_sms": NSMS, "exit_launch_rc": 0, "exit_sms": NSMS, "exit_cur_is_primary": 1}))
    C.append(Case("compute/fork", "t_compute", ["fork"], "compute.policy", env={"LDSHIM_COMPUTE": "domain:0"},
                  wrap=plant1, expect={"parent_sms": 64, "child_sms": 64, "child_side": 0}))
    # The SM-group cache: a second process reads it instead of measuring; a planted stale one
    # is re-measured... (see n/cache below)
    return C
