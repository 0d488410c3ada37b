"""cases_reliability.py — the shim must never be the reason a program fails, hangs or loses a
file (issue 24). Picked up by run_cases.py (extra_cases); every case is a fresh process.

  rel/fault/...     every driver call the shim makes fails, at several call numbers: the
                    program ends with the memory it asked for or exactly the error a run
                    without the shim returns at the same place, and nothing is left alive
  rel/stress/...    threads allocating, querying, launching, freeing (t_stress stress)
  rel/lazy/...      the policy is read at the first CUDA call, once; other processes stay silent
  rel/report/...    planted links, special files, long paths, unwritable places
  rel/cache/...     planted, forged and foreign topology cache files
  rel/env/...       hostile environment values
  rel/libcuda/...   a wrong LDSHIM_LIBCUDA
  rel/huge, rel/json/...  slice-count overflow; JSON of non-UTF-8 names

Extending the fault injection: add a name to SHIM_CALLS (every call the shim makes, in any
process it runs in), and to TEARDOWN if a persistent failure of it leaks by nature (then only
single failures are injected). Nothing else is needed.

Cases needing root (device nodes, other users' files, a private mount namespace) print
"skip <name>: <reason>" when they cannot run.
"""
import atexit
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

from run_cases import Case, Fail, MiB, ldshim_lines, report_check, stderr_matches

# Every driver entry the shim calls itself (shim/*.c through the ld_driver_t table, the
# probe, the publication path), plus the program-facing calls it wraps.
SHIM_CALLS = [
    "cuCtxGetCurrent", "cuCtxGetDevice", "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2", "cuCtxSetCurrent",
    "cuCtxSynchronize", "cuDeviceGetAttribute", "cuDeviceGetUuid_v2", "cuDevicePrimaryCtxGetState",
    "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2",
    "cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetAddressRange_v2", "cuPointerGetAttribute", "cuPointerGetAttributes",
    "cuMemAddressReserve", "cuMemAddressFree", "cuMemCreate", "cuMemRelease", "cuMemMap", "cuMemUnmap",
    "cuMemSetAccess", "cuMemGetAllocationGranularity",
    "cuModuleLoadData", "cuModuleGetFunction", "cuModuleGetGlobal_v2", "cuModuleUnload", "cuFuncSetAttribute",
    "cuLaunchKernel", "cuStreamCreate", "cuStreamDestroy_v2", "cuStreamSynchronize",
    "cuThreadExchangeStreamCaptureMode", "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2", "cuMemsetD8_v2",
    "cuGetProcAddress_v2", "cuLibraryGetGlobal",
]
# The MLOPart backend: the shim imports, its helper process creates and exports.
MLOPART_CALLS = ["cuMemImportFromShareableHandle", "cuMemExportToShareableHandle", "cuMemCreate", "cuMemRelease",
                 "cuDevicePrimaryCtxRetain"]
# A persistent failure of these leaks by nature (nothing can release what the driver keeps
# refusing to release), with or without the shim: only single failures are injected.
TEARDOWN = {"cuMemUnmap", "cuMemRelease", "cuMemAddressFree", "cuMemFree_v2", "cuModuleUnload",
            "cuDevicePrimaryCtxRelease_v2", "cuStreamDestroy_v2", "cuCtxPopCurrent_v2"}
# Also injected as CUDA_ERROR_OUT_OF_MEMORY, the code that makes the shim trim its pool.
OOM_LIKE = {"cuMemCreate", "cuMemAddressReserve", "cuMemAlloc_v2", "cuMemMap"}
UNKNOWN = 999                    # CUDA_ERROR_UNKNOWN: no call returns it by itself
OOM = 2

FIG = {"fault_cases": 0, "fault_calls": set(), "stress": [], "env_values": 0, "report_cases": 0,
       "cache_cases": 0, "lazy_cases": 0}
_BASE = tempfile.mkdtemp(prefix="ldshim-rel-")
atexit.register(shutil.rmtree, _BASE, True)


def _figures():
    out = os.environ.get("LDSHIM_REL_FIGURES")
    if not out:
        return
    fig = dict(FIG, fault_calls=sorted(FIG["fault_calls"]))
    with open(out, "w") as f:
        json.dump(fig, f, indent=1)


atexit.register(_figures)


def no_key(key, why):
    def check(_, res):
        if key in res.out:
            raise Fail(why)
    return check


def no_chars(chars, why):
    def check(_, res):
        if any(c in res.stderr for c in chars):
            raise Fail(why)
    return check


def private_dir(name):
    d = os.path.join(_BASE, name.replace("/", "_"))
    os.makedirs(d, exist_ok=True)
    return d


def skip(name, why):
    print("skip %s: %s" % (name, why))


# ---- fault injection ------------------------------------------------------------------------

_clean = {}


def clean_run(runner, case):
    """The run without the shim and without injected faults (the normal result of each
    site, e.g. the fake's CUDA_ERROR_NOT_SUPPORTED for a launch); one per environment."""
    env = {k: v for k, v in case.env.items() if k != "FAKE_CUDA_FAIL"}
    key = (case.prog, tuple(case.args), tuple(sorted((k, str(v)) for k, v in env.items())))
    if key not in _clean:
        _clean[key] = runner.run(Case("", case.prog, case.args, shim=False, env=env)).out
    return _clean[key]


def fault_check(stock_case, inj_name, inj_code, reports_dir=None):
    """Site by site: every error the shim run saw is the one the stock run saw at the same
    place, the site's normal result, or the injected error delivered to the program's own
    call of the injected function (the shim's calls shift the driver's call numbering). The
    data read back is right wherever the allocation succeeded, the program finished, and
    nothing is left alive."""
    def check(runner, res):
        clean = clean_run(runner, stock_case)
        stock = runner.run(stock_case)
        if stock.rc != 0 or stock.out.get("steps_done") != "1":
            raise Fail("the run without the shim failed (%d): %s" % (stock.rc, stock.stderr[-200:]))
        if res.out.get("steps_done") != "1":
            raise Fail("the program did not finish")
        for k, v in res.out.items():
            if k.endswith("_data") and v != "ok":
                raise Fail("%s=%s: the memory does not hold what was written" % (k, v))
            if k.endswith("_ok") and v != "1":
                raise Fail("%s=%s" % (k, v))
            if "." not in k or v == "0":
                continue
            api = k.split(".", 1)[1]
            if stock.out.get(k) == v or clean.get(k) == v or (api == inj_name and v == str(inj_code)):
                continue
            raise Fail("%s=%s: the run without the shim got %s there" % (k, v, stock.out.get(k, "no call")))
        if reports_dir is not None:
            all_zero(reports_dir)
        FIG["fault_cases"] += 1
        FIG["fault_calls"].add(inj_name)
    return check


def all_zero(d):
    """Every process's FAKE_CUDA_REPORT (path with %p) in d: nothing alive at exit."""
    files = [f for f in os.listdir(d) if f.startswith("fake.")]
    if not files:
        raise Fail("no FAKE_CUDA_REPORT in %s" % d)
    for fn in files:
        with open(os.path.join(d, fn)) as f:
            counts = dict(kv.split("=") for kv in f.read().split())
        live = {k: v for k, v in counts.items() if v != "0"}
        if live:
            raise Fail("%s: objects alive at exit: %s" % (fn, live))
        os.unlink(os.path.join(d, fn))


def specs(name, thin):
    nths = (1, 3) if thin else (1, 2, 3, 5)
    codes = [UNKNOWN] + ([OOM] if name in OOM_LIKE else [])
    out = []
    for code in codes:
        for n in nths:
            out.append(("%s:%d:%d" % (name, n, code), code))
        if name not in TEARDOWN:
            out.append(("%s:1+:%d" % (name, code), code))
    return out


def fault_cases(a, thin):
    C = []
    native = {"FAKE_CUDA_DOMAINS": 2}
    for name in SHIM_CALLS:
        for spec, code in specs(name, thin):
            env = dict(native, FAKE_CUDA_FAIL=spec)
            base = Case("", "t_stress", ["workload", "4MiB", "1MiB"], shim=False, env=env)
            C.append(Case("rel/fault/native/" + spec, "t_stress", ["workload", "4MiB", "1MiB"], "rel.policy", env=env,
                          checks=[fault_check(base, name, code)]))
    # The emulated backend builds the same ranges with other handles.
    for name in ("cuMemCreate", "cuMemMap", "cuMemSetAccess", "cuMemUnmap", "cuMemRelease", "cuMemAddressReserve",
                 "cuMemAddressFree"):
        for spec, code in specs(name, True):
            env = {"FAKE_CUDA_FAIL": spec, "LDSHIM_BACKEND": "emulated"}
            base = Case("", "t_stress", ["workload", "4MiB", "1MiB"], shim=False, env=env)
            C.append(Case("rel/fault/emulated/" + spec, "t_stress", ["workload", "4MiB", "1MiB"], "rel.policy",
                          env=env, checks=[fault_check(base, name, code)]))
    # MLOPart: the helper process (which inherits FAKE_CUDA_FAIL) creates and exports, the
    # shim imports. Every process of the run reports its own live objects (%p).
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for name in MLOPART_CALLS:
        for spec, code in specs(name, True):
            d = private_dir("mlo-" + spec)
            tmp = os.path.join(d, "tmp")
            os.makedirs(tmp, exist_ok=True)
            env = {"FAKE_CUDA_FAIL": spec, "FAKE_CUDA_REPORT": os.path.join(d, "fake.%p.txt"), "TMPDIR": tmp,
                   "LDSHIM_MPS_CONTROL": os.path.join(root, "tests/mlopart/fake-mps-control"),
                   "LDSHIM_MLOPART_HELPER": os.path.abspath(os.path.join(a.build, "ldshim-mlopart-helper")),
                   "LDSHIM_MLOPART_TIMEOUT_MS": 5000}
            base = Case("", "t_stress", ["workload", "16MiB", "1MiB"], shim=False, env=env)
            C.append(Case("rel/fault/mlopart/" + spec, "t_stress", ["workload", "16MiB", "1MiB"],
                          os.path.join(root, "tests/mlopart/mlopart.policy"), env=env, zero_counts=False,
                          checks=[fault_check(base, name, code, reports_dir=d), nothing_left(tmp)]))
    return C


def nothing_left(tmpdir):
    """The helper's private directory (under TMPDIR) is removed once the program exits."""
    def check(_, res):
        import time
        for _ in range(100):
            if not os.listdir(tmpdir):
                return
            time.sleep(0.05)
        raise Fail("left in TMPDIR: %s" % os.listdir(tmpdir))
    return check


# ---- stress ----------------------------------------------------------------------------------

def stress_cases(a):
    C = []
    iters = max(400, a.stress_iters // 4)
    args = ["stress", 16, iters, "4MiB,8MiB,24MiB", "64KiB,1MiB"]

    def launches_as_without(base, res_name):
        def check(runner, res):
            b = runner.run(base)
            if b.rc != 0:
                raise Fail("without the shim: exit %d" % b.rc)
            for k in ("launch_rc", "launch_codes", "ops", "threads"):
                if b.out.get(k) != res.out.get(k):
                    raise Fail("%s=%s, without the shim %s" % (k, res.out.get(k), b.out.get(k)))
            fig = {k: int(res.out[k]) for k in ("threads", "ops", "allocs", "queries", "launches", "handoffs",
                                                 "shim_live_ranges", "shim_live_bytes", "shim_tagged_allocs")}
            fig["fake_live_objects"] = sum(int(x) for x in res.out["fake_live"].split(","))
            fig["case"] = res_name[0]
            FIG["stress"].append(fig)
        return check

    for backend, env in (("native", {"FAKE_CUDA_DOMAINS": 2}), ("emulated", {"LDSHIM_BACKEND": "emulated"})):
        base = Case("", "t_stress", args, shim=False, env=env)
        res_name = ["rel/stress/" + backend]
        C.append(Case(res_name[0], "t_stress", args, "rel.policy", env=env,
                      expect={"shim_live_ranges": 0, "shim_live_bytes": 0, "fake_live": "0,0,0,0,0"},
                      timeout=900 if a.san else 300, checks=[launches_as_without(base, res_name)]))
    return C


# ---- the policy is read at the first CUDA call ------------------------------------------------

def absolute_preload(a):
    """The runner's LD_PRELOAD with absolute paths: these processes change directory."""
    return ":".join(os.path.abspath(p) if p else p for p in (a.preload or "").split(":"))


def option_names():
    """The LDSHIM_* names of the options table, from shim/options.h's X-macro rows."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "shim", "options.h")) as f:
        return ["LDSHIM_" + n for n in re.findall(r"^\s+X\((\w+),", f.read(), re.M)]


def options_listed_once(_, res):
    """LDSHIM_LOG=debug: each variable of the table once, set ones with their value, before
    the configuration's own info line; an empty value is unset."""
    lines = res.stderr.splitlines()
    names = option_names()
    if len(names) < 20:
        raise Fail("read only %d option names from shim/options.h" % len(names))
    listed = [l for l in lines if l.startswith("ldshim: debug: config: option ")]
    if len(listed) != len(names):
        raise Fail("%d option lines for %d options" % (len(listed), len(names)))
    for n in names:
        mine = [l for l in listed if re.match(r"ldshim: debug: config: option %s(=.* \(set\)| unset \(default: .+\))$" % n, l)]
        if len(mine) != 1:
            raise Fail("%d lines for %s" % (len(mine), n))
    for want in (r"option LDSHIM_LOG=debug \(set\)$", r"option LDSHIM_STATE=full \(set\)$",
                 r"option LDSHIM_POLICY=/\S+emulated\.policy \(set\)$",
                 r"option LDSHIM_PROBE_DUMP unset \(default: none\)$"):
        if not any(re.search(want, l) for l in listed):
            raise Fail("no line /%s/" % want)
    state = [i for i, l in enumerate(lines) if l.startswith("ldshim: info: config: state full, backend emulated")]
    if len(state) != 1 or lines.index(listed[-1]) > state[0]:
        raise Fail("the table does not come once before the state line")


def log_subsystems(allowed, need=()):
    """Every info and debug line carries a subsystem matching `allowed`; the lines of `need`
    ("debug: alloc", ...) are there, so the filter let something through."""
    def check(_, res):
        lines = res.stderr.splitlines()
        shown = [l for l in lines if re.match(r"ldshim: (info|debug): ", l)]
        stray = [l for l in shown if not re.match(r"ldshim: (info|debug): (%s): " % allowed, l)]
        if stray:
            raise Fail("a line of another subsystem: %s" % stray[0][:200])
        for n in need:
            if not any(l.startswith("ldshim: %s: " % n) for l in shown):
                raise Fail("no 'ldshim: %s:' line" % n)
    return check


def lazy_cases(a):
    C = []
    pre = {"LD_PRELOAD": absolute_preload(a)}
    if a.san:
        # LeakSanitizer would report the leaks of sh, python and uname themselves.
        pre["ASAN_OPTIONS"] = "detect_leaks=0:halt_on_error=1"
    bad_rel = "tests/fake/policies/bad_syntax.policy"      # relative to the runner's directory
    good_rel = "tests/fake/policies/emulated.policy"
    silent = ["/bin/sh", "-c", 'cd / && /bin/true && "$0" -c "import os; os.chdir(\'/\')" && uname >/dev/null',
              sys.executable]
    # A shell, `true`, python and uname, after a chdir, with a relative bad policy: nothing
    # printed, exit 0, even with strict set (strict applies to CUDA programs).
    for tag, extra in (("plain", {}), ("strict", {"LDSHIM_STRICT": 1}), ("all-bad-env", BAD_ENV_ALL)):
        C.append(Case("rel/lazy/no-cuda-silent/" + tag, silent[0], silent[1:],
                      env=dict(extra, LDSHIM_POLICY=bad_rel, LDSHIM_LOG="info", **pre), quiet=True, zero_counts=False))
    # LDSHIM_LOG=debug lists the options table, but only at the first CUDA call.
    C.append(Case("rel/lazy/no-cuda-silent/debug", silent[0], silent[1:],
                  env=dict(LDSHIM_POLICY=good_rel, LDSHIM_LOG="debug", **pre), quiet=True, zero_counts=False))
    C.append(Case("rel/lazy/debug-lists-the-options", "t_stress", ["first-call", 4, "8MiB"], "emulated.policy",
                  env={"LDSHIM_LOG": "debug", "LDSHIM_STATE": "full", "LDSHIM_PROBE_DUMP": ""},
                  expect={"first_call_threads": 4}, checks=[options_listed_once]))
    # LDSHIM_LOG_SUBSYS keeps the info and debug lines of the subsystems it names; warnings
    # (here a bad LDSHIM_DOMAIN's, subsystem config) are written whatever it says.
    C.append(Case("rel/log/subsys-keeps-named", "t_stress", ["first-call", 4, "8MiB"], "emulated.policy",
                  env={"LDSHIM_LOG": "debug", "LDSHIM_LOG_SUBSYS": "ALLOC,backend", "LDSHIM_DOMAIN": "99"},
                  expect={"first_call_threads": 4},
                  checks=[log_subsystems(r"alloc|backend", need=("debug: alloc", "info: backend")),
                          stderr_matches(r"^ldshim: warning: config: LDSHIM_DOMAIN=99 is not a domain number", 1)]))
    C.append(Case("rel/log/subsys-excludes", "t_stress", ["first-call", 4, "8MiB"], "emulated.policy",
                  env={"LDSHIM_LOG": "info", "LDSHIM_LOG_SUBSYS": "^config"}, expect={"first_call_threads": 4},
                  checks=[log_subsystems(r"(?!config\b)\w+", need=("info: backend",))]))
    # A value naming no subsystem is refused whole: one warning naming it, every subsystem shown.
    for tag, val, name in (("unknown", "probe,bogus", "'bogus'"), ("empty-name", "probe,,alloc", "an empty name"),
                           ("trailing-comma", "alloc,", "an empty name")):
        C.append(Case("rel/log/subsys-refused/" + tag, "t_stress", ["first-call", 4, "8MiB"], "emulated.policy",
                      env={"LDSHIM_LOG": "info", "LDSHIM_LOG_SUBSYS": val}, expect={"first_call_threads": 4},
                      checks=[stderr_matches(r"^ldshim: warning: config: LDSHIM_LOG_SUBSYS (names no subsystem|has) "
                                             + re.escape(name) + r" \(it takes config,", 1),
                              stderr_matches(r"^ldshim: warning: config: LDSHIM_LOG_SUBSYS", 1),
                              stderr_matches(r"^ldshim: info: config: state full", 1)]))

    # The same with a per-process report (%p, as ldshim-ab and per_domain.py set it): each of
    # these processes writes its report at exit, and writing it must not read the policy
    # either (no message, no strict exit 3 from the destructor), nor print a study state's
    # warning about the file's compute key.
    rd = private_dir("lazy-report-p")
    for tag, extra in (("strict-report-p", dict(LDSHIM_STRICT=1, LDSHIM_POLICY=bad_rel)),
                       ("study-report-p", dict(LDSHIM_POLICY=good_rel, LDSHIM_STATE="compute-only",
                                               LDSHIM_COMPUTE="spread:8"))):
        C.append(Case("rel/lazy/no-cuda-silent/" + tag, silent[0], silent[1:],
                      env=dict(extra, LDSHIM_REPORT=os.path.join(rd, tag + ".%p.json"), LDSHIM_LOG="info", **pre),
                      quiet=True, zero_counts=False))

    # Reads no file: the policy is a FIFO with a writer waiting for a reader. A process that
    # opened it would let the writer through (opened=1). The CUDA program does open it (and
    # refuses it as a FIFO): the positive control.
    d = private_dir("lazy-fifo")
    script = ('fifo=$1; shift; rm -f "$fifo" "$fifo.opened"; mkfifo "$fifo"; '
              '( exec 3>"$fifo"; echo x > "$fifo.opened" ) & w=$!; sleep 0.2; "$@"; st=$?; sleep 0.3; '
              'if [ -e "$fifo.opened" ]; then echo opened=1; else echo opened=0; fi; '
              'kill $w 2>/dev/null; wait; rm -f "$fifo" "$fifo.opened"; exit $st')
    fifo = os.path.join(d, "policy.fifo")
    C.append(Case("rel/lazy/no-cuda-reads-nothing", "/bin/sh", ["-c", "cd / && /bin/true"],
                  env=dict(pre, LDSHIM_POLICY=fifo), wrap=["/bin/sh", "-c", script, "sh", fifo],
                  expect={"opened": 0}, quiet=True, zero_counts=False))
    C.append(Case("rel/lazy/cuda-reads-the-policy", "t_stress", ["chdir-alloc", "/", "8MiB"],
                  env={"LDSHIM_POLICY": fifo}, wrap=["/bin/sh", "-c", script, "sh", fifo],
                  expect={"opened": 1, "a_shim": 0},
                  checks=[stderr_matches(r"^ldshim: error: policy: \S+policy\.fifo:0:0: cannot open: a FIFO, not a regular file$")]))

    # A relative policy is resolved against the directory the process started in, once.
    C.append(Case("rel/lazy/relative-policy-after-chdir", "t_stress", ["chdir-alloc", "/", "8MiB"],
                  env={"LDSHIM_POLICY": good_rel}, expect={"a_shim": 1}))
    # strict: main runs, the program ends with 3 at its first CUDA call.
    C.append(Case("rel/lazy/strict-at-first-call", "t_stress", ["before-cuda", "8MiB"], "strict_bad.policy", rc=3,
                  zero_counts=False, expect={"before": 1},
                  checks=[stderr_matches(r"^ldshim: error: policy: strict = on: refusing to run with a bad policy \(exit status 3\)$"),
                          no_key("after", "the program went on after its first CUDA call")]))
    # 16 threads reach the shim for the first time together: the policy is read once.
    C.append(Case("rel/lazy/first-call-once", "t_stress", ["first-call", 16, "8MiB"], "emulated.policy",
                  env={"LDSHIM_LOG": "info"}, expect={"first_call_threads": 16},
                  checks=[stderr_matches(r"^ldshim: info: config: state full, backend emulated, compute all, 3 rule\(s\), policy ", count=1)]))

    # A process that never touched CUDA writes no report to the shared path, and a
    # per-process one (%p) says it read no policy.
    d = private_dir("lazy-report")

    def no_report(_, res):
        if res.report is not None:
            raise Fail("a process that never touched CUDA wrote the report")

    def unread(_, res):
        files = [f for f in os.listdir(d) if f.startswith("r.")]
        if len(files) != 1:
            raise Fail("per-process reports: %s" % files)
        r = json_file(os.path.join(d, files[0]))
        os.unlink(os.path.join(d, files[0]))
        if r.get("policy_read") is not False or r.get("state") != "stock":
            raise Fail("policy_read %s, state %s" % (r.get("policy_read"), r.get("state")))
    C.append(Case("rel/lazy/no-report-of-no-cuda", "/bin/true", [], "emulated.policy", zero_counts=False, quiet=True,
                  checks=[no_report]))
    C.append(Case("rel/lazy/pid-report-of-no-cuda", "/bin/true", [], "emulated.policy", zero_counts=False, quiet=True,
                  env={"LDSHIM_REPORT": os.path.join(d, "r.%p.json")}, checks=[unread]))

    def read(r):
        if r.get("policy_read") is not True or r.get("state") != "full":
            raise Fail("policy_read %s, state %s" % (r.get("policy_read"), r.get("state")))
    C.append(Case("rel/lazy/report-of-cuda", "t_stress", ["chdir-alloc", "/", "8MiB"], "emulated.policy",
                  expect={"a_shim": 1}, checks=[report_check(read)]))
    FIG["lazy_cases"] += len(C)
    return C


# ---- the report --------------------------------------------------------------------------------

def json_file(path):
    with open(path, "rb") as f:
        return json.loads(f.read().decode("utf-8"))   # strict: invalid UTF-8 fails


def report_cases(a):
    C = []
    root = os.geteuid() == 0
    prog, args = "t_stress", ["chdir-alloc", "/", "8MiB"]

    # A link planted where the old code put its temporary file: the file it points at keeps
    # its bytes, and the report arrives whole at its own path.
    d = private_dir("report-link")
    victim = os.path.join(d, "victim")
    rep = os.path.join(d, "report.json")
    plant = ('printf precious > "$1"; chmod 600 "$1"; for i in 0 1 2 3 4 5 6 7 8 9; do '
             'ln -sf "$1" "$2.tmp.$$"; done; shift 2; exec "$@"')

    def link_untouched(_, res):
        with open(victim) as f:
            if f.read() != "precious":
                raise Fail("the planted link's target was overwritten")
        r = json_file(rep)
        if r.get("state") != "full":
            raise Fail("report state %s" % r.get("state"))
        if os.path.islink(rep):
            raise Fail("the report path is a link")
    C.append(Case("rel/report/planted-temp-link", prog, args, "emulated.policy", env={"LDSHIM_REPORT": rep},
                  wrap=["/bin/sh", "-c", plant, "sh", victim, rep], expect={"a_shim": 1}, checks=[link_untouched]))

    # A link planted at the report path itself by another user: not followed.
    if root:
        d2 = private_dir("report-foreign-link")
        tgt, lnk = os.path.join(d2, "target"), os.path.join(d2, "report.json")
        prep = 'printf keep > "$1"; ln -sf "$1" "$2"; chown -h 65534:65534 "$2"; shift 2; exec "$@"'

        def foreign_untouched(_, res):
            with open(tgt) as f:
                if f.read() != "keep":
                    raise Fail("the link owned by another user was followed")
        C.append(Case("rel/report/foreign-link", prog, args, "emulated.policy", env={"LDSHIM_REPORT": lnk},
                      wrap=["/bin/sh", "-c", prep, "sh", tgt, lnk], expect={"a_shim": 1},
                      checks=[foreign_untouched,
                              stderr_matches(r"^ldshim: warning: report: cannot write report .*: it is a symbolic link owned by uid 65534")]))
    else:
        skip("rel/report/foreign-link", "needs root to make a link owned by another user")

    # A character device stays one (written in place). Here a private copy of /dev/null's
    # node; below the real /dev/null in a private mount namespace.
    if root:
        d3 = private_dir("report-chardev")
        node = os.path.join(d3, "null")
        mk = 'rm -f "$1"; mknod -m 666 "$1" c 1 3 || exit 97; shift; "$@"; st=$?; stat -c devtype=%F "$0"; exit $st'
        C.append(Case("rel/report/char-device", prog, args, "emulated.policy", env={"LDSHIM_REPORT": node},
                      wrap=["/bin/sh", "-c", mk, node, node], expect={"a_shim": 1, "devtype": "character special file"},
                      quiet=False))
        ns = ('mount -t tmpfs ldshim-test /dev || exit 98; mknod -m 666 /dev/null c 1 3; "$@"; st=$?; '
              'stat -c devtype=%F /dev/null; exit $st')
        probe = subprocess.run(["unshare", "-m", "/bin/sh", "-c", "mount -t tmpfs x /mnt"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        if probe.returncode == 0:
            C.append(Case("rel/report/dev-null-private-namespace", prog, args, "emulated.policy",
                          env={"LDSHIM_REPORT": "/dev/null"}, wrap=["unshare", "-m", "/bin/sh", "-c", ns, "sh"],
                          expect={"a_shim": 1, "devtype": "character special file"}))
        else:
            skip("rel/report/dev-null-private-namespace", "unshare -m with a tmpfs mount is not allowed here")
    else:
        skip("rel/report/char-device", "mknod needs root")
        skip("rel/report/dev-null-private-namespace", "a private mount namespace needs root")

    # A FIFO: written in place when someone reads, refused without waiting when nobody does.
    d4 = private_dir("report-fifo")
    fifo, got = os.path.join(d4, "r.fifo"), os.path.join(d4, "got.json")
    # (The FIFO is removed before the runner looks for a report there: it would wait on it.)
    rd = ('rm -f "$1"; mkfifo "$1"; timeout 20 cat "$1" > "$2" & r=$!; sleep 0.5; f=$1; shift 2; "$@"; st=$?; '
          'wait $r; test -p "$f" && echo fifo_kept=1; rm -f "$f"; exit $st')

    def fifo_json(_, res):
        r = json_file(got)
        if r.get("state") != "full":
            raise Fail("report through the FIFO: state %s" % r.get("state"))
    C.append(Case("rel/report/fifo-with-reader", prog, args, "emulated.policy", env={"LDSHIM_REPORT": fifo},
                  wrap=["/bin/sh", "-c", rd, "sh", fifo, got], expect={"a_shim": 1, "fifo_kept": 1},
                  checks=[fifo_json]))
    lone = os.path.join(d4, "lone.fifo")
    C.append(Case("rel/report/fifo-without-reader", prog, args, "emulated.policy", env={"LDSHIM_REPORT": lone},
                  wrap=["/bin/sh", "-c", 'rm -f "$1"; mkfifo "$1"; f=$1; shift; "$@"; st=$?; '
                                         'test -p "$f" && echo fifo_kept=1; rm -f "$f"; exit $st', "sh", lone],
                  expect={"a_shim": 1, "fifo_kept": 1}, timeout=30,
                  checks=[stderr_matches(r"^ldshim: warning: report: cannot write report \S+lone\.fifo: it is a FIFO without a reader; not written$")]))

    # Places the report cannot go: the reason is said.
    d5 = os.path.join(private_dir("report-dir"), "adir")
    C.append(Case("rel/report/directory", prog, args, "emulated.policy", env={"LDSHIM_REPORT": d5},
                  wrap=["/bin/sh", "-c", 'mkdir "$1"; d=$1; shift; "$@"; st=$?; test -d "$d" && echo dir_kept=1; '
                                         'rmdir "$d"; exit $st', "sh", d5],
                  expect={"a_shim": 1, "dir_kept": 1},
                  checks=[stderr_matches(r"^ldshim: warning: report: cannot write report \S+: it is a directory; only a regular file")]))
    C.append(Case("rel/report/missing-directory", prog, args, "emulated.policy",
                  env={"LDSHIM_REPORT": "/nonexistent-ldshim-dir/r.json"}, expect={"a_shim": 1},
                  checks=[stderr_matches(r"^ldshim: warning: report: cannot write report /nonexistent-ldshim-dir/r\.json: its directory: "
                                         r"No such file or directory$")]))

    # Longer than the shim keeps: refused with a warning, nothing written anywhere (the old
    # code cut the path and wrote to the shorter one).
    d6 = private_dir("report-long")
    fd = os.open(d6, os.O_RDONLY)
    path = d6
    try:
        while len(path) < 4600:
            comp = "x" * 200
            os.mkdir(comp, dir_fd=fd)
            nfd = os.open(comp, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd
            path += "/" + comp
    finally:
        os.close(fd)
    longp = path + "/report.json"

    def nothing_written(_, res):
        for _, _, files, _ in os.fwalk(d6):
            if files:
                raise Fail("a file was written: %s" % files)
    C.append(Case("rel/report/too-long", prog, args, "emulated.policy", env={"LDSHIM_REPORT": longp},
                  expect={"a_shim": 1},
                  checks=[nothing_written,
                          stderr_matches(r"^ldshim: warning: config: LDSHIM_REPORT is %d bytes long \(the limit is 4095\); ignored$"
                                         % len(longp), count=1)]))
    # %p expanded past the limit is refused the same way.
    C.append(Case("rel/report/too-long-after-expansion", prog, args, "emulated.policy",
                  env={"LDSHIM_REPORT": d6 + "/" + "%p" * 1500}, expect={"a_shim": 1},
                  checks=[nothing_written,
                          stderr_matches(r"^ldshim: warning: report: cannot write report .*: (the path is longer than 4095 bytes|"
                                         r"File name too long)$")]))

    # A policy path that is not UTF-8: the report is still JSON that json.load reads.
    d7 = private_dir("report-utf8")
    odd = os.path.join(d7, "p\udcff\udcfe\x1b[1m.policy")          # raw bytes ff fe and an escape
    with open(os.fsencode(odd), "wb") as f, open(os.path.join(os.path.dirname(__file__), "policies",
                                                              "emulated.policy"), "rb") as g:
        f.write(g.read())
    r7 = os.path.join(d7, "report.json")

    def odd_json(_, res):
        r = json_file(r7)
        want = os.fsencode(odd).decode("utf-8", "replace")
        if r.get("policy") != want:
            raise Fail("policy %r, expected %r" % (r.get("policy"), want))
        if "\x1b" in res.stderr:
            raise Fail("an escape character reached stderr")
    C.append(Case("rel/report/non-utf8-policy-path", prog, args, None, env={"LDSHIM_POLICY": odd, "LDSHIM_REPORT": r7,
                                                                            "LDSHIM_LOG": "info"},
                  expect={"a_shim": 1}, checks=[odd_json]))
    bad_odd = os.path.join(d7, "bad\udcff\x07.policy")
    with open(os.fsencode(bad_odd), "wb") as f:
        f.write(b"bogus = 1\n")
    r8 = os.path.join(d7, "report2.json")

    def bad_odd_json(_, res):
        r = json_file(r8)
        if not isinstance(r.get("policy_error"), str) or "\ufffd" not in r["policy_error"]:
            raise Fail("policy_error %r" % r.get("policy_error"))
        if "\x07" in res.stderr or "\ufffd" in res.stderr:
            raise Fail("a control or invalid byte reached stderr")
    C.append(Case("rel/report/non-utf8-policy-error", prog, args, None,
                  env={"LDSHIM_POLICY": bad_odd, "LDSHIM_REPORT": r8}, expect={"a_shim": 0},
                  checks=[bad_odd_json, stderr_matches(r"^ldshim: error: policy: \S+bad\?\?\.policy:1:1: unknown key 'bogus'")]))
    FIG["report_cases"] += len(C)
    return C


# ---- the topology cache ---------------------------------------------------------------------------

UUID0 = "GPU-fa6ec0da-1300-4900-8a17-000000000000"      # the fake's device 0 (fake_core.c)


def fnv(b):
    h = 0xcbf29ce484222325
    for c in b:
        h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff
    return h


def kmod():
    """What the shim keys the cache with: the kernel module's version, "-" without one."""
    try:
        with open("/sys/module/nvidia/version") as f:
            return f.read().split()[0]
    except (OSError, IndexError):
        return "-"


def cache_entry(physical, balanced=None, moved=0, verdict="clustered: accepted"):
    """A cache file for the fake's device 0 (shim/probe_cache.c's format), checksum right."""
    balanced = balanced or physical
    body = ("ldshim-topology-cache 1\nuuid %s\ndriver 13000\nkmod %s\ntopology_version 2\nnum_sms 132\n"
            "num_domains 2\nmode clustered\nvalid 1\nattempts 1\nnear 290.000\nfar 320.000\nseparation 1.20000\n"
            "tpcs_moved %d\nphysical %s\nbalanced %s\nverdict %s\n"
            % (UUID0, kmod(), moved, physical, balanced, verdict))
    b = body.encode()
    return b + ("checksum %016x\n" % fnv(b)).encode()


def cache_cases(a):
    C = []
    good = "".join("01"[(i // 2) % 2] for i in range(132))       # TPC t -> domain t mod 2: 66/66
    zero = "0" * 132
    name = "topology-%s-13000.txt" % UUID0
    native = {"FAKE_CUDA_DOMAINS": 2}
    prog, args = "t_stress", ["chdir-alloc", "/", "8MiB"]

    def source(want):
        def fn(r):
            src = r["devices"][0]["probe"]["source"] if r.get("devices") else None
            if src != want:
                raise Fail("probe source %s, expected %s" % (src, want))
        return report_check(fn)

    def planted(tag, content=None, fifo=False, link=False, mode=0o600, dir_mode=0o700, owner=None):
        d = private_dir("cache-" + tag)
        os.chmod(d, 0o700)
        p = os.path.join(d, name)
        if fifo:
            os.mkfifo(p, 0o600)
        elif link:
            real = os.path.join(d, "real.txt")
            with open(real, "wb") as f:
                f.write(content)
            os.symlink(real, p)
        else:
            with open(p, "wb") as f:
                f.write(content)
            os.chmod(p, mode)
        if owner is not None:
            os.chown(p, owner, owner)
        os.chmod(d, dir_mode)
        return d

    # The positive control: a sound entry is used.
    C.append(Case("rel/cache/sound-entry-used", prog, args, "native.policy",
                  env=dict(native, LDSHIM_CACHE_DIR=planted("sound", cache_entry(good))), expect={"a_shim": 1},
                  checks=[source("cache")]))
    cases = [("fifo", dict(fifo=True), "not a regular file"),
             ("link", dict(content=cache_entry(good), link=True), "a symbolic link"),
             ("all-zero-map", dict(content=cache_entry(zero)), "no SM in domain 1"),
             ("forged-balanced", dict(content=cache_entry(good, balanced="10" + good[2:])),
              "balanced map does not follow"),
             ("world-writable-file", dict(content=cache_entry(good), mode=0o666), "writable by others"),
             ("world-writable-dir", dict(content=cache_entry(good), dir_mode=0o777), "writable by everyone"),
             ("group-writable-dir", dict(content=cache_entry(good), dir_mode=0o770), "writable by its group")]
    if os.geteuid() == 0:
        cases.append(("foreign-owner", dict(content=cache_entry(good), owner=65534), "owned by another user"))
    else:
        skip("rel/cache/foreign-owner", "needs root to make a file owned by another user")
    for tag, kw, why in cases:
        C.append(Case("rel/cache/" + tag, prog, args, "native.policy",
                      env=dict(native, LDSHIM_CACHE_DIR=planted(tag, **kw)), expect={"a_shim": 1}, timeout=30,
                      # The cache ignored, the probe (which cannot run on the fake) falls back to the
                      # even map, and the driver's own answer (the fake knows its domains) outranks it.
                      checks=[source("driver"), stderr_matches(r"^ldshim: warning: probe: ignoring topology cache: .*" + why)]))
    # Escape codes in a cached verdict never reach stderr raw.
    d = planted("escape-verdict", cache_entry(good, verdict="ok \x1b]0;owned\x07\x1b[2J"))
    C.append(Case("rel/cache/escape-verdict", prog, args, "native.policy",
                  env=dict(native, LDSHIM_CACHE_DIR=d, LDSHIM_LOG="info"), expect={"a_shim": 1},
                  checks=[source("cache"), no_chars("\x1b\x07", "an escape character reached stderr")]))
    FIG["cache_cases"] += len(C)
    return C


# ---- the environment --------------------------------------------------------------------------

BAD_ENV = [
    ("LDSHIM_STATE", "bogus"), ("LDSHIM_STATE", "FULL"), ("LDSHIM_STATE", "x" * 5000),
    ("LDSHIM_BACKEND", "bogus"), ("LDSHIM_BACKEND", "\x1b[31m"), ("LDSHIM_LOG", "loud"), ("LDSHIM_LOG", "9" * 300),
    ("LDSHIM_STRICT", "yes"), ("LDSHIM_STRICT", "0"), ("LDSHIM_MISMATCH", "maps"),
    ("LDSHIM_POLICY", "/dev/zero"), ("LDSHIM_POLICY", "/"), ("LDSHIM_POLICY", "/" + "p" * 5000),
    ("LDSHIM_POLICY", "no\x1b[2Jsuch.policy"), ("LDSHIM_REPORT", "%"), ("LDSHIM_REPORT", "%p%p%p%p"),
    ("LDSHIM_REPORT", "/proc/version"), ("LDSHIM_CACHE_DIR", "/dev/null"), ("LDSHIM_CACHE_DIR", "relative/dir"),
    ("LDSHIM_CACHE_DIR", "/proc"), ("LDSHIM_PROBE_FORCE", "yes please"), ("LDSHIM_PROBE_DUMP", "/nonexistent"),
    ("LDSHIM_MLOPART_TIMEOUT_MS", "-5"), ("LDSHIM_MLOPART_TIMEOUT_MS", "99999999999999999999"),
    ("LDSHIM_MLOPART_HELPER", "/nonexistent"), ("LDSHIM_LIBCUDA", "/nonexistent/libcuda.so.1"),
    ("LDSHIM_LIBCUDA", "libm.so.6"), ("LDSHIM_LIBCUDA", "/dev/zero"), ("XDG_CACHE_HOME", ""), ("HOME", ""),
    ("LDSHIM_LOG_SUBSYS", "bogus"), ("LDSHIM_LOG_SUBSYS", "\x1b[31m"), ("LDSHIM_LOG_SUBSYS", "^"),
    ("LDSHIM_LOG_SUBSYS", "p" * 2000),
]
BAD_ENV_ALL = {k: v for k, v in BAD_ENV if k not in ("LDSHIM_POLICY", "LDSHIM_REPORT", "LDSHIM_CACHE_DIR")}


def env_cases(a):
    C = []
    for i, (k, v) in enumerate(BAD_ENV):
        tag = "%s-%d" % (k.lower(), i)
        d = private_dir("env-" + tag)
        env = {k: v}
        if k == "LDSHIM_REPORT":
            env[k] = os.path.join(d, v) if not v.startswith("/") else v
        else:
            env["LDSHIM_REPORT"] = os.path.join(d, "r.json")
        # The program's own result is unharmed; the shim may say what it did not like.
        C.append(Case("rel/env/" + tag, "t_stress", ["chdir-alloc", d, "8MiB"], "emulated.policy", env=env,
                      timeout=60, checks=[only_ldshim_lines]))
    FIG["env_values"] += len(BAD_ENV)
    return C


def only_ldshim_lines(_, res):
    if res.rc != 0:
        raise Fail("exit %d" % res.rc)
    stray = [l for l in res.stderr.splitlines() if not re.match(r"ldshim: (error|warning|info|debug): ", l)]
    if stray:
        raise Fail("stderr not from the shim: %s" % " | ".join(stray)[:300])
    if "\x1b" in res.stderr:
        raise Fail("an escape character reached stderr")


# ---- LDSHIM_LIBCUDA, the overflow, JSON of odd names --------------------------------------------

def misc_cases(a):
    C = []
    from run_cases import same_as_noshim
    for tag, lib in (("missing", "/nonexistent/libcuda.so.1"), ("not-cuda", "libm.so.6")):
        base = Case("", "t_driver", ["stock", "8MiB", "1MiB"], shim=False)
        C.append(Case("rel/libcuda/%s/stock" % tag, "t_driver", ["stock", "8MiB", "1MiB"], "emulated.policy",
                      env={"LDSHIM_STATE": "stock", "LDSHIM_LIBCUDA": lib},
                      checks=[lambda r, res, b=base: same_as_noshim(r, res, b),
                              stderr_matches(r"^ldshim: warning: driver: LDSHIM_LIBCUDA=\S+ cannot be used .*; using libcuda\.so\.1$",
                                             count=1)]))
        C.append(Case("rel/libcuda/%s/full" % tag, "t_stress", ["chdir-alloc", "/", "8MiB"], "emulated.policy",
                      env={"LDSHIM_LIBCUDA": lib}, expect={"a_shim": 1}))

    # 2^64 - 2^21 bytes in two or three slices would wrap the reservation: the request goes to
    # the driver, which answers as it does without the shim.
    for nd in (2, 3):
        for size in ("18446744073709551614", "18446744073707454464", "9223372036854775808"):
            env = {"FAKE_CUDA_DOMAINS": nd}
            base = Case("", "t_stress", ["huge", size], shim=False, env=env)
            C.append(Case("rel/huge/%dd/%s" % (nd, size), "t_stress", ["huge", size], "rel.policy", env=env,
                          checks=[lambda r, res, b=base: same_as_noshim(r, res, b)]))

    # No GPU: the driver loads but has no device. Every call the program makes answers as it
    # does without the shim, and the shim adds nothing to stderr.
    for prog, args in (("t_stress", ["workload", "8MiB", "1MiB"]), ("t_runtime", ["alloc", "8MiB"])):
        env = {"FAKE_CUDA_DEVICES": 0}
        base = Case("", prog, args, shim=False, env=env)
        C.append(Case("rel/no-gpu/" + prog, prog, args, "emulated.policy", env=env, rc=None,
                      checks=[lambda r, res, b=base: same_as_noshim(r, res, b), ldshim_lines(0)]))

    # ldshim-probe --json with a file name that is not UTF-8 and holds an escape.
    if not os.path.exists(os.path.join(a.build, "bin", "ldshim-probe")):
        skip("rel/json/ldshim-probe-odd-name", "no ldshim-probe in %s (it is built by make, and by test-tsan)" % a.build)
        return C
    d = private_dir("probe-json")
    odd = os.path.join(d, "m\udcff\x1b.csv")
    with open(os.fsencode(odd), "w") as f:
        for s in range(8):
            f.write("%d,%s\n" % (s, ",".join(str(300 + (s % 2) * 40 + (l % 3)) for l in range(16))))

    def probe_json(_, res):
        for line in res.stdout.splitlines():
            j = json.loads(line)
            if j.get("file") != os.fsencode(odd).decode("utf-8", "replace"):
                raise Fail("file %r" % j.get("file"))
            return
        raise Fail("no JSON line")
    C.append(Case("rel/json/ldshim-probe-odd-name", "../bin/ldshim-probe", ["--classify", odd, "--json"], shim=False,
                  zero_counts=False, wrap=["/bin/sh", "-c", '"$@"; exit 0', "sh"], checks=[probe_json]))
    return C


def cases(a):
    thin = a.san or a.stress_iters <= 500
    return (fault_cases(a, thin) + stress_cases(a) + lazy_cases(a) + report_cases(a) + cache_cases(a) +
            env_cases(a) + misc_cases(a))
