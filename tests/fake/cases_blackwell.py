"""cases_blackwell.py — the Blackwell paths that verify themselves (issue 43), on the fake
driver: the read-back of every native slice (FAKE_CUDA_READBACK homes memory wrongly, not at
all, or does not know the attribute)."""
from run_cases import Case, Fail, report_check, stderr_matches

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
    C.append(Case("rb/right", "t_driver", ["alloc", "link", "8MiB"], "native.policy", env=NATIVE, expect=PLACED,
                  checks=[readback(right=2)]))
    fell = {"a_shim": 0, "a_domains": -1}
    C.append(Case("rb/wrong", "t_driver", ["alloc", "link", "8MiB"], "native.policy",
                  env=dict(NATIVE, FAKE_CUDA_READBACK="wrong"), expect=fell,
                  checks=[readback(wrong_domain=1, discarded=1), fallback_reason("another domain", 1),
                          stderr_matches(r"^ldshim: warning: .*read-back: a slice is homed in another domain", 1)]))
    C.append(Case("rb/unlocalized", "t_driver", ["alloc", "link", "8MiB"], "native.policy",
                  env=dict(NATIVE, FAKE_CUDA_READBACK="unlocalized"), expect=fell,
                  checks=[readback(not_localized=1, discarded=1), fallback_reason("not localized", 1)]))
    C.append(Case("rb/unknown", "t_driver", ["alloc", "link", "8MiB"], "native.policy",
                  env=dict(NATIVE, FAKE_CUDA_READBACK="unknown"), expect=PLACED,
                  checks=[readback(unverified=2)]))
    # Only the second slice of the first range is homed wrongly: that request falls back,
    # the next is placed and verified.
    C.append(Case("rb/wrong-one-slice", "t_driver", ["seq", "8MiB", 2], "native.policy",
                  env=dict(NATIVE, FAKE_CUDA_READBACK="wrong@2"),
                  expect={"s1_shim": 0, "s2_shim": 1, "s2_domains": "0,1"},
                  checks=[readback(right=3, wrong_domain=1, discarded=1), fallback_reason("another domain", 1)]))
    # The emulated backend has no home to verify: nothing is read back.
    C.append(Case("rb/emulated", "t_driver", ["alloc", "link", "8MiB"], "emulated.policy", env=NATIVE,
                  expect={"a_shim": 1, "a_domains": "-1,-1"}, checks=[readback()]))
    return C
