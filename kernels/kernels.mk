# kernels/kernels.mk — the topology probe's device code, embedded into libldshim.so.
#
# kernels/probe/probe.cu -> build/kernels/probe.fatbin ($(CUDA_GENCODE): sm_90, sm_100 and
# compute_100 PTX) -> build/kernels/probe_fatbin.o (assembler .incbin, hidden symbol
# ld_probe_fatbin) -> $(SHIM_EXTRA_OBJS), which shim/shim.mk links into the library.

PROBE_KERN_FATBIN := $(BUILD)/kernels/probe.fatbin
PROBE_KERN_OBJ    := $(BUILD)/kernels/probe_fatbin.o
PROBE_KERN_NVFLAGS ?= -O3 -std=c++17 -I. -Ikernels

SHIM_EXTRA_OBJS += $(PROBE_KERN_OBJ)

$(PROBE_KERN_FATBIN): kernels/probe/probe.cu shim/probe_classify.h kernels/ldshim_topology.h
	@mkdir -p $(@D)
	$(NVCC) -fatbin $(CUDA_GENCODE) $(PROBE_KERN_NVFLAGS) -o $@ $<

$(PROBE_KERN_OBJ): kernels/probe/probe_fatbin.S $(PROBE_KERN_FATBIN)
	@mkdir -p $(@D)
	$(CC) -c -DLD_PROBE_FATBIN_PATH='"$(PROBE_KERN_FATBIN)"' -o $@ $<
