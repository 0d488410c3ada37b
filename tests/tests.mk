# tests/tests.mk — every test suite of the project, registered here and nowhere else.
#
# A suite is a phony target whose rule lives beside what it tests (a fragment's .mk: the rule
# builds what it needs and runs it); it writes $(RESULTS)/<suite> holding "<passed> <failed>"
# and fails when a check failed. This file only says which command runs it:
#
#   TEST_SUITES     += NAME   # what it checks     `make test`: CPU only, every commit, < ~10 min
#   LAB_TEST_SUITES += NAME   # what it checks     `make test-lab`: CPU suites that need the lab
#                                                  build of libldmoe, which `make test` does not
#                                                  compile (it would compile every kernel twice)
#   GPU_TEST_SUITES += NAME   # what it checks     `make test-gpu`: needs an NVIDIA GPU
#
# To add a suite: write its rule in your fragment (append the programs it builds to TEST_TARGETS,
# so that `make test` builds them in parallel before the suites run, and never to ALL_TARGETS,
# which is the product), then add one line here in the group it belongs to. The comment after
# the name is its line in `make help`. tests/build/test_build.py (test-build) fails when a
# fragment registers a suite itself or a registered suite has no rule.
#
# The order is the order `make test` runs them in: fast unit suites first.

# ---- CPU: libldshim (shim/, policy/) -------------------------------------------------------
TEST_SUITES += test-shim-core            # CUnit: registry, pool, range layout, image scan (tests/unit/core.mk)
TEST_SUITES += test-policy               # CUnit: the policy language and the ldshim-policy tool (policy/policy.mk)
TEST_SUITES += test-policy-fuzz          # libFuzzer smoke of the policy parser: seeds + 20000 runs
TEST_SUITES += test-fuzz-files           # libFuzzer smoke of policy files on disk and the topology cache reader
TEST_SUITES += test-file                 # CUnit: the C file layer (shim/file.c): reads, atomic writes, output directories
TEST_SUITES += test-file-layer           # no open/fopen/open() in product code outside the C and Python file layers
TEST_SUITES += test-compat               # shim/cuda_compat.h against the CUDA 13.5 header (wheel fetched by .ci/run; skips without it)
TEST_SUITES += test-options              # the LDSHIM_* options table against its accessors, doc/shim.md and the code
TEST_SUITES += test-compute              # CUnit: the compute-binding plan and its SM-group cache format
TEST_SUITES += test-stream-hooks         # every stream-taking entry point of cuda.h is hooked or listed as not needing it
TEST_SUITES += test-probe                # CUnit: the probe's classifier, balancer, cache and orchestration (stub driver)
TEST_SUITES += test-fake                 # integration: test programs under the shim over the fake CUDA driver (tests/fake)
TEST_SUITES += test-mlopart              # CUnit: the MLOPart backend, helper and protocol over the fake driver
TEST_SUITES += test-mlopart-selftest     # the MLOPart GPU program and bench build and parse; a fake program under `backend = mlopart`
TEST_SUITES += test-gpu-shim-selftest    # the shim's GPU report checker, programs and run.sh logic without a GPU
TEST_SUITES += test-gpu-shim-onfake      # the shim's GPU leak cycle over the fake driver, with negative controls
TEST_SUITES += test-gpu-compute-selftest # the compute-binding GPU programs build; run.sh and the Python programs parse
TEST_SUITES += test-gpu-stress-selftest  # the GPU stress program builds and parses; its scripts refuse bad arguments
TEST_SUITES += test-gpu-study-selftest   # the study's programs parse, --help works, bad arguments are refused
TEST_SUITES += test-gpu-multi-selftest   # the multi-GPU suite's logic without a GPU

# ---- CPU: libldmoe (kernels/moe) -----------------------------------------------------------
TEST_SUITES += test-moe                  # CUnit over libldmoe.so: tile numbering, steal rule, AUTO, argument checks
TEST_SUITES += test-moe-layer            # CUnit over libldmoe.so: the fused layer's argument checks and packed sizes
TEST_SUITES += test-moe-layer-sched      # the fused layer's tile numbering and claim rule on the host (impl/layer/layer_sched.h)
TEST_SUITES += test-moe-sched            # the device scheduler on the host, one thread per simulated CTA
TEST_SUITES += test-moe-abi              # ldmoe.py's and ldmoe_lab.py's ctypes structs have the C headers' layout
TEST_SUITES += test-moe-py               # ldmoe.py's FP8 side and the CPU references of the GPU tests
TEST_SUITES += test-moe-order            # bench_moe.py's call orders are balanced
TEST_SUITES += test-moe-layout           # the product's sources know nothing of the lab; one definition per tune bit
TEST_SUITES += test-moe-exports          # libldmoe.so's tile table and exports agree with ldmoe.h, ldmoe.py, ldmoe.map

# ---- CPU: tools, benchmarks' host code, packaging, the build -------------------------------
TEST_SUITES += test-hostile              # the hostile-path matrix: every path variable and registered tool flag x 11 hostile targets
TEST_SUITES += test-fuzz-ab              # seeded mutational fuzz of ldshim-ab's report/histogram reader (20000 inputs)
TEST_SUITES += test-ab                   # ldshim-ab against fake programs, and end to end over the fake driver
TEST_SUITES += test-bench-alloc-selftest # bench_alloc's arguments and its table generator
TEST_SUITES += test-bench-alloc-onfake   # bench_alloc's modes over the fake driver under the shim
TEST_SUITES += test-bench-moe-tools      # gpc_rates.py against its recorded output, and its bad-input errors
TEST_SUITES += test-bench-nccl           # the NCCL benchmark's launcher, sweep and log parser
TEST_SUITES += test-build                # `make` builds the product only; every suite registered here; `make help` complete
TEST_SUITES += test-pkg-tools            # every tool's --version, sonames and links, man pages
TEST_SUITES += test-doc-budget           # README and doc/ within their budgets, no history narrative, every cited record exists
ifneq ($(SAN),1)
# These look at the regular build (build/), which is what gets installed and documented.
TEST_SUITES += test-pkg-install          # make install DESTDIR=... / PREFIX=...: the exact tree, pkg-config, uninstall
TEST_SUITES += test-pkg-python           # pip install . into fresh venvs, offline: ldshim-ab, import ldmoe
TEST_SUITES += test-pkg-gpu-skip         # make test-gpu skips without a GPU, runs with one (stand-in); shim-preloading suites build it
TEST_SUITES += test-docs                 # the shell commands of README.md and doc/*.md that can run on the CPU run
endif

# ---- CPU, lab build of libldmoe (bench/moe/lab) ----------------------------------------------
LAB_TEST_SUITES += test-moe-lab          # CUnit over libldmoe_lab.so: its tiles and arguments
LAB_TEST_SUITES += test-moe-tiles        # the tile lists of ldmoe.h, ldmoe_lab.h, ldmoe.py and both libraries agree

# ---- GPU ----------------------------------------------------------------------------------
GPU_TEST_SUITES += test-gpu-probe        # the topology probe on the GPU (tests/gpu/probe/run.sh)
GPU_TEST_SUITES += test-gpu-shim         # the shim core on the GPU (tests/gpu/shim/run.sh)
GPU_TEST_SUITES += test-gpu-compute      # compute binding: every launch path on the bound SMs
GPU_TEST_SUITES += test-gpu-stress       # threads allocating, querying, launching and freeing under the shim, per state
GPU_TEST_SUITES += test-gpu-mlopart      # the MLOPart backend on the GPU
GPU_TEST_SUITES += test-gpu-moe          # libldmoe's product tiles, then every tile through the lab (counters, tune bits, timeline)
GPU_TEST_SUITES += test-gpu-moe-layer    # the fused MoE layer against an fp32 reference, plainly and bound (bit-identical)
GPU_TEST_SUITES += test-gpu-moe-bound    # the same in a process bound to domain 0 (compute binding)
GPU_TEST_SUITES += test-gpu-e2e          # end to end: serve.py with libldmoe under the shim, every state
GPU_TEST_SUITES += test-gpu-study        # the study's placement states over unmodified programs, one per allocation api
GPU_TEST_SUITES += test-gpu-multi        # two GPUs: one process driving both, two with NCCL (checks nothing on one GPU)
