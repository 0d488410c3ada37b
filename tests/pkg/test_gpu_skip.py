"""`make test-gpu` without a GPU says so and exits 0; with one (a stand-in libcuda that reports a
device) it runs the GPU suites. tests/gpu/gpu_present.py decides. A GPU suite that preloads the
shim has make build it. Suite test-pkg-gpu-skip."""
import glob
import os
import re
import stat

from pkgtest import BUILD, CUDA_HOME, MAKE, PYTHON, ROOT, TmpDirCase, clean_env, make, run

PRESENT = os.path.join(ROOT, "tests", "gpu", "gpu_present.py")
ONEGPU = os.path.join(BUILD, "tests", "pkg", "libonegpu.so")
FAKE = os.path.join(BUILD, "fake", "libcuda.so.1")
STUB = os.path.join(CUDA_HOME, "lib64", "stubs", "libcuda.so")


class GpuPresent(TmpDirCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # nvidia-smi stand-ins: one that lists a GPU, one that fails
        cls.smi_one = os.path.join(cls.tmp, "smi-one")
        with open(cls.smi_one, "w") as f:
            f.write('#!/bin/sh\n[ "$1" = -L ] && echo "GPU 0: NVIDIA H200 (UUID: GPU-0000)"\n')
        cls.smi_none = os.path.join(cls.tmp, "smi-none")
        with open(cls.smi_none, "w") as f:
            f.write("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
        for p in (cls.smi_one, cls.smi_none):
            os.chmod(p, stat.S_IRWXU)

    def present(self, libcuda, smi=None, **env):
        e = clean_env(NVIDIA_SMI=smi or self.smi_none, **env)
        r = run([PYTHON, PRESENT, "--libcuda", libcuda, "--for", "t"], env=e, check=False)
        return r.returncode, r.stdout.strip()

    def test_missing_driver(self):
        rc, out = self.present("/nonexistent/libcuda.so.1")
        self.assertEqual(rc, 1)
        self.assertRegex(out, r"^t: no GPU: /nonexistent/libcuda.so.1 does not load .*; nvidia-smi: not available$")

    def test_fake_driver_is_no_gpu(self):
        # the project's fake driver reports a device; it must not pass for a GPU
        rc, out = self.present(FAKE)
        self.assertEqual(rc, 1)
        self.assertIn("is the project's fake CUDA driver", out)

    def test_toolkit_stub_is_no_gpu(self):
        self.assertTrue(os.path.exists(STUB), "the CUDA toolkit's stub driver %s" % STUB)
        rc, out = self.present(STUB)
        self.assertEqual(rc, 1)
        self.assertIn("cuInit: CUDA_ERROR_STUB_LIBRARY", out)

    def test_one_device(self):
        rc, out = self.present(ONEGPU)
        self.assertEqual((rc, out), (0, "t: GPU: 1 CUDA device through %s" % ONEGPU))

    def test_no_device_and_init_errors(self):
        rc, out = self.present(ONEGPU, ONEGPU_COUNT="0")
        self.assertEqual(rc, 1)
        self.assertIn("CUDA reports no device", out)
        rc, out = self.present(ONEGPU, ONEGPU_INIT_RC="100")
        self.assertEqual(rc, 1)
        self.assertIn("cuInit: CUDA_ERROR_NO_DEVICE", out)

    def test_smi_sees_what_cuda_cannot(self):
        rc, out = self.present(ONEGPU, smi=self.smi_one, ONEGPU_INIT_RC="100", CUDA_VISIBLE_DEVICES="")
        self.assertEqual(rc, 1)
        self.assertIn("nvidia-smi lists 1 GPU that CUDA cannot use (CUDA_VISIBLE_DEVICES='')", out)

    def test_override(self):
        self.assertEqual(self.present("/nonexistent", LDSHIM_GPU="1")[0], 0)
        self.assertEqual(self.present(ONEGPU, LDSHIM_GPU="0")[0], 1)
        rc, out = self.present(ONEGPU, LDSHIM_GPU="yes")
        self.assertEqual(rc, 2)
        self.assertIn("expected 1, 0 or unset", out)


class MakeTestGpu(TmpDirCase):
    def test_skips_without_gpu(self):
        results = os.path.join(self.tmp, "results-none")
        r = make("test-gpu", "RESULTS=" + results,
                 env=clean_env(LDSHIM_GPU_LIBCUDA="/nonexistent/libcuda.so.1", NVIDIA_SMI="/nonexistent"))
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 2, r.stdout)
        self.assertTrue(lines[0].startswith("test-gpu: no GPU: "), lines[0])
        self.assertRegex(lines[1], r"^test-gpu: skipped: no GPU \(\d+ suites not run; LDSHIM_GPU=1 runs them anyway\)$")
        self.assertFalse(os.path.exists(results), "a skipped test-gpu ran a suite")

    def test_runs_with_a_gpu(self):
        results = os.path.join(self.tmp, "results-one")
        r = make("test-gpu", "RESULTS=" + results, "GPU_TEST_SUITES=test-pkg-gpu-standin",
                 env=clean_env(LDSHIM_GPU_LIBCUDA=ONEGPU))
        self.assertIn("test-gpu: GPU: 1 CUDA device", r.stdout)
        self.assertIn("total: 1 passed, 0 failed", r.stdout)
        with open(os.path.join(results, "test-pkg-gpu-standin")) as f:
            self.assertEqual(f.read(), "1 0\n")
        # and a failing GPU suite fails test-gpu
        r = make("test-gpu", "RESULTS=" + results, "GPU_TEST_SUITES=test-pkg-gpu-standin-fails",
                 env=clean_env(LDSHIM_GPU_LIBCUDA=ONEGPU), check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("total: 0 passed, 1 failed", r.stdout)

    def test_preloading_suites_build_the_shim(self):
        # A GPU suite that runs a process under LD_PRELOAD=libldshim.so must make build the shim
        # first: a prerequisite written as $(SHIM_LIB) in a .mk included before shim/shim.mk reads
        # empty, the preload then fails with a warning only, and a "bound" run compares two unbound
        # runs. The suites: every .mk recipe that sets LD_PRELOAD, and e2e (its script preloads).
        suites = {"test-gpu-e2e"}
        for mk in glob.glob(os.path.join(ROOT, "**", "*.mk"), recursive=True):
            if os.path.relpath(mk, ROOT).startswith("build"):
                continue
            target = None
            with open(mk) as f:
                for line in f:
                    m = re.match(r"^(test-gpu[\w-]*):", line)
                    if m:
                        target = m.group(1)
                    elif not line.startswith("\t"):
                        target = None
                    elif target and "LD_PRELOAD=" in line:
                        suites.add(target)
        self.assertIn("test-gpu-moe-layer", suites)
        nb = os.path.join(self.tmp, "nothing-built")
        for t in sorted(suites):
            r = run([MAKE, "-n", "--no-print-directory", "-C", ROOT, "BUILD=" + nb, t], env=clean_env())
            self.assertTrue("-o %s/libldshim.so " % nb in r.stdout, "make %s does not build the shim it preloads" % t)


if __name__ == "__main__":
    import unittest
    unittest.main()
