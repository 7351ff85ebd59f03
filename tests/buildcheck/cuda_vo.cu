// Build check: the recommended CUDA TU when a C file implements the CPU side: validation helpers
// and kernels only (SELSCAN_VALIDATION_ONLY); linked with impl.c without duplicate symbols. With
// the bindings' CUDA shim (bindings/common/selscan_binding.h >>bind-cuda) defined in it, as the PyTorch
// package's selscan_torch_cuda.cu does (the shim warnings-clean too).
#define SELSCAN_VALIDATION_ONLY
#define SELSCAN_IMPLEMENTATION
#define SELSCAN_CUDA_IMPLEMENTATION
#include "../../selscan_cuda.cuh"
#define SELSCAN_BINDING_CUDA_IMPLEMENTATION
#include "../../bindings/common/selscan_binding.h"

int cuda_vo_status(void) { return selscan_status_string(SELSCAN_OK)[0] == 'o' ? 0 : 1; }
