"""cases_hardening.py — regression cases of issue 41 (the C side), each a reproduction that
failed before: values parsed whole (Medium 3), relative paths against the start directory
(Medium 4), LDSHIM_LIBCUDA checked before dlopen (High 4). Picked up by run_cases.py.

  hard/strict/...     LDSHIM_DOMAIN, LDSHIM_COMPUTE, LDSHIM_COMPUTE_SMS with leading zeros
                      (taken whole) or over their length bound (refused whole, one warning)
  hard/relative/...   a relative LDSHIM_REPORT and LDSHIM_POLICY in a program that chdir's
  hard/report/...     LDSHIM_REPORT=/dev/stdout redirected to a file (appended) or a pipe
  hard/libcuda/...    a FIFO (hung dlopen), the toolkit's stub, a library with cuInit only, the
                      fake driver by path and through a link (loaded from the checked descriptor)
"""
import os
import shutil
import subprocess
import tempfile
import atexit
import json
import shlex

from run_cases import Case, Fail, report_check, stderr_matches, ldshim_lines

_BASE = tempfile.mkdtemp(prefix="ldshim-hard-")
atexit.register(shutil.rmtree, _BASE, True)


# sh -c IN_DIR DIR PROG ARGS...: start PROG (a path relative to here) in DIR.
IN_DIR = 'p=$(realpath "$1"); shift; cd "$0" && exec "$p" "$@"'


def _dir(name):
    d = os.path.join(_BASE, name)
    os.makedirs(d, exist_ok=True)
    return d


def _field(*keys, want):
    def fn(r):
        v = r
        for k in keys:
            if not isinstance(v, dict) or k not in v:
                raise Fail("report lacks %s" % ".".join(keys))
            v = v[k]
        if v != want:
            raise Fail("report %s = %r, expected %r" % (".".join(keys), v, want))
    return report_check(fn)


def strict_cases():
    C = []
    prog, args = "t_stress", ["chdir-alloc", "/", "8MiB"]
    C.append(Case("hard/strict/domain-0000000000000019", prog, args, "emulated.policy",
                  env={"LDSHIM_STATE": "memory-only", "LDSHIM_DOMAIN": "0000000000000019"},
                  checks=[_field("domain", want=0),
                          stderr_matches(r"^ldshim: warning: config: LDSHIM_DOMAIN=0000000000000019 is not a domain number 0\.\.7", count=1)]))
    C.append(Case("hard/strict/domain-0000000000000001", prog, args, "emulated.policy",
                  env={"LDSHIM_STATE": "memory-only", "LDSHIM_DOMAIN": "0000000000000001"},
                  checks=[_field("domain", want=1), ldshim_lines(0, r"LDSHIM_DOMAIN")]))
    C.append(Case("hard/strict/compute-domain-60-zeros-1", prog, args, "emulated.policy",
                  env={"LDSHIM_STATE": "full", "LDSHIM_COMPUTE": "domain:" + "0" * 60 + "1"},
                  checks=[_field("compute_setting", "compute", want="domain:1")]))
    C.append(Case("hard/strict/compute-sms-30-zeros-100", prog, args, "emulated.policy",
                  env={"LDSHIM_STATE": "full", "LDSHIM_COMPUTE_SMS": "0" * 30 + "100"},
                  checks=[_field("compute_setting", "cap", want=100)]))
    long_v = "domain:" + "0" * 300 + "1"
    C.append(Case("hard/strict/compute-too-long", prog, args, "emulated.policy",
                  env={"LDSHIM_STATE": "full", "LDSHIM_COMPUTE": long_v},
                  checks=[_field("compute_setting", "compute", want="all"),
                          stderr_matches(r"^ldshim: warning: config: LDSHIM_COMPUTE is %d bytes long \(the limit is 255\); ignored$"
                                         % len(long_v), count=1)]))
    return C


def relative_cases(a):
    C = []
    # The program starts elsewhere: the preload list must not depend on the directory.
    pre = {"LD_PRELOAD": ":".join(os.path.abspath(x) for x in a.preload.split(":") if x)}
    here = os.path.dirname(os.path.abspath(__file__))
    # The program starts in d and chdir's to / before its first CUDA call: the report goes to
    # d/relrep.json (the start directory), never /relrep.json.
    d = _dir("rel-report")

    def report_in_start_dir(_, res, d=d):
        if os.path.exists("/relrep-ldshim-hard.json"):
            os.unlink("/relrep-ldshim-hard.json")
            raise Fail("the report went to /relrep-ldshim-hard.json (the directory at exit)")
        if not os.path.isfile(os.path.join(d, "relrep-ldshim-hard.json")):
            raise Fail("no report in the start directory %s" % d)
    C.append(Case("hard/relative/report", "t_stress", ["chdir-alloc", "/", "8MiB"], "emulated.policy",
                  env=dict(pre, LDSHIM_REPORT="relrep-ldshim-hard.json"),
                  wrap=["sh", "-c", IN_DIR, d], checks=[report_in_start_dir]))
    # The policy, relative to the start directory, is read although the program chdir'd.
    p = _dir("rel-policy")
    shutil.copy(os.path.join(here, "policies", "emulated.policy"), os.path.join(p, "rel.policy"))
    C.append(Case("hard/relative/policy", "t_stress", ["chdir-alloc", "/", "8MiB"], "rel.policy",
                  env=dict(pre, LDSHIM_POLICY="rel.policy"), expect={"a_shim": 1},
                  wrap=["sh", "-c", IN_DIR, p]))
    return C


def stdout_report_cases():
    """LDSHIM_REPORT=/dev/stdout with stdout redirected to a file (`>>`: kept content first) or
    a pipe: the report lands in it, beside the program's own lines. Only shell builtins wrap
    the program (a tool such as mktemp fails under the sanitizers' leak check)."""
    C = []
    out = os.path.join(_dir("stdout"), "out.txt")

    def report_in(kept):
        def check(_, res):
            text = res.stdout
            if kept:
                with open(out) as f:
                    text = f.read()
                if not text.startswith("before\n") or "a_shim=1\n" not in text:
                    raise Fail("the file lacks its earlier content or the program's lines: %r" % text[:80])
            i = text.find("{")
            try:
                r = json.JSONDecoder().raw_decode(text[i:])[0] if i >= 0 else None
            except ValueError as e:
                raise Fail("no JSON report in stdout (%s): %r" % (e, text[:200]))
            if not isinstance(r, dict) or "counts" not in r:
                raise Fail("no report in stdout: %r" % text[:200])
        return check
    to_file = 'printf "before\\n" > %s && exec "$0" "$@" >> %s' % (shlex.quote(out), shlex.quote(out))
    C.append(Case("hard/report/stdout-file", "t_runtime", ["alloc", "8MiB"], "emulated.policy",
                  env={"LDSHIM_REPORT": "/dev/stdout"}, wrap=["sh", "-c", to_file],
                  checks=[report_in(True), ldshim_lines(0, pattern=r"report")]))
    C.append(Case("hard/report/stdout-pipe", "t_runtime", ["alloc", "8MiB"], "emulated.policy",
                  env={"LDSHIM_REPORT": "/dev/stdout"}, expect={"a_shim": 1},
                  checks=[report_in(False), ldshim_lines(0, pattern=r"report")]))
    return C


def libcuda_cases(a):
    C = []
    d = _dir("libcuda")
    fifo = os.path.join(d, "fifo.so")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    C.append(Case("hard/libcuda/fifo", "t_runtime", ["alloc", "8MiB"], "emulated.policy",
                  env={"LDSHIM_STATE": "full", "LDSHIM_LIBCUDA": fifo}, timeout=30, expect={"a_shim": 1},
                  checks=[stderr_matches(r"^ldshim: warning: driver: LDSHIM_LIBCUDA=\S+fifo\.so cannot be used \(a FIFO, not a "
                                         r"regular file\); using libcuda\.so\.1$", count=1)]))
    # The fake driver by path, and through a link of the user's: the file checked is the file
    # loaded (dlopen of /proc/self/fd/N, the checked descriptor), and the shim runs on it.
    fake = os.path.join(os.path.abspath(a.build), "fake", "libcuda.so.1")
    link = os.path.join(d, "libcuda-link.so")
    if not os.path.lexists(link):
        os.symlink(fake, link)
    for tag, lib in (("path", fake), ("link", link)):
        C.append(Case("hard/libcuda/" + tag, "t_runtime", ["alloc", "8MiB"], "emulated.policy",
                      env={"LDSHIM_STATE": "full", "LDSHIM_LIBCUDA": lib}, timeout=30, expect={"a_shim": 1},
                      checks=[ldshim_lines(0, pattern=r"LDSHIM_LIBCUDA")]))
    # The shim loads it before the program does (its name is then /proc/self/fd/N): the program
    # reaches it by its soname, and a hooked entry it looks up is still the shim's wrapper; the
    # program's own file on the reused descriptor number, loaded by its /proc name, is that file.
    C.append(Case("hard/libcuda/shim-first", "t_runtime", ["shim-first"], "emulated.policy",
                  env={"LDSHIM_STATE": "full", "LDSHIM_LIBCUDA": fake}, timeout=30,
                  expect={"entry_in": "libldshim.so", "fd_reused": 1, "fd_name_gives_libcuda": 0},
                  checks=[ldshim_lines(0, pattern=r"LDSHIM_LIBCUDA")]))
    # Without /proc (a mount namespace that unmounts it; root only): loaded by name after the
    # name is checked to be the file the descriptor holds.
    no_proc = ["unshare", "-m", "--propagation", "private", "sh", "-c", 'umount -l /proc && exec "$@"', "sh"]
    if a.san or "san" in os.path.basename((a.preload or "").split(":")[0]):
        print("skip hard/libcuda/no-proc: a sanitizer's runtime needs /proc")
    elif subprocess.run(no_proc + ["true"], stderr=subprocess.DEVNULL).returncode != 0:
        print("skip hard/libcuda/no-proc: cannot unmount /proc in a mount namespace (needs root)")
    else:
        C.append(Case("hard/libcuda/no-proc", "t_runtime", ["shim-first"], "emulated.policy",
                      env={"LDSHIM_STATE": "full", "LDSHIM_LIBCUDA": fake}, timeout=30, wrap=no_proc,
                      expect={"entry_in": "libldshim.so"}, checks=[ldshim_lines(0, pattern=r"LDSHIM_LIBCUDA")]))
    # A library that exports cuInit and nothing else the shim needs.
    src, so = os.path.join(d, "cuinit.c"), os.path.join(d, "libcuinit_only.so")
    with open(src, "w") as f:
        f.write("int cuInit(unsigned f) { (void)f; return 0; }\n")
    cc = os.environ.get("CC", "cc")
    if subprocess.run([cc, "-shared", "-fPIC", "-o", so, src]).returncode == 0:
        C.append(Case("hard/libcuda/cuinit-only", "t_runtime", ["alloc", "8MiB"], "emulated.policy",
                      env={"LDSHIM_STATE": "full", "LDSHIM_LIBCUDA": so}, expect={"a_shim": 1},
                      checks=[stderr_matches(r"^ldshim: warning: driver: LDSHIM_LIBCUDA=\S+ cannot be used \(it exports no "
                                             r"cuDriverGetVersion: not a CUDA driver the shim can use\)", count=1)]))
    else:
        print("skip hard/libcuda/cuinit-only: %s cannot build a shared object" % cc)
    stub = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "lib64", "stubs", "libcuda.so")
    if os.path.isfile(stub):
        C.append(Case("hard/libcuda/toolkit-stub", "t_runtime", ["alloc", "8MiB"], "emulated.policy",
                      env={"LDSHIM_STATE": "full", "LDSHIM_LIBCUDA": stub}, expect={"a_shim": 1},
                      checks=[stderr_matches(r"^ldshim: warning: driver: LDSHIM_LIBCUDA=\S+ cannot be used \(its "
                                             r"cuDriverGetVersion fails with error 34: a stub, not a driver\)", count=1)]))
    else:
        print("skip hard/libcuda/toolkit-stub: no %s" % stub)
    return C


def cases(a):
    return strict_cases() + relative_cases(a) + stdout_report_cases() + libcuda_cases(a)
