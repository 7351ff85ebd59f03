// selscan_torch_cuda.cu - the CUDA kernels of the PyTorch ops. Compiled by nvcc WITHOUT any torch
// header: selscan's validation helpers (SELSCAN_VALIDATION_ONLY: the CPU entry points come from
// selscan_torch.cpp), the kernels and launchers of selscan_cuda.cuh, and the wrappers of the
// bindings' shared CUDA shim (bindings/common/selscan_binding.h >>bind-cuda), which the ops' TUs call.
#define SELSCAN_IMPLEMENTATION
#define SELSCAN_VALIDATION_ONLY
#define SELSCAN_CUDA_IMPLEMENTATION
#ifndef SELSCAN_CUDA_CHANNELS_LAST
#define SELSCAN_CUDA_CHANNELS_LAST 0 /* setup.py: SELSCAN_TORCH_CHANNELS_LAST=1 turns it on */
#endif
#include "selscan_cuda.cuh"
#define SELSCAN_BINDING_CUDA_IMPLEMENTATION
#include "selscan_binding.h"
