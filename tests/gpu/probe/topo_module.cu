// topo_module.cu — built with `nvcc -fatbin` and loaded by topo_check through
// cuModuleLoadData, as Triton or NVRTC programs load their code.
#include "tests/gpu/probe/topo_kernel.cuh"
