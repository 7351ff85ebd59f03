// selscan_tf_kernels.cu - the CUDA kernels of the TensorFlow op. Compiled by nvcc WITHOUT any
// TensorFlow header: a private (SELSCAN_STATIC) copy of selscan's CPU validation and CUDA
// kernels, and the wrappers of the bindings' shared CUDA shim (bindings/common/selscan_binding.h >>bind-cuda),
// which selscan_tf_gpu.cc calls.
#define SELSCAN_IMPLEMENTATION
#define SELSCAN_STATIC
#define SELSCAN_CUDA_IMPLEMENTATION
#define SELSCAN_CUDA_CHANNELS_LAST 1 /* the op's default layout is (batch, L, dim): the fast kernels */
#include "selscan_cuda.cuh"
#define SELSCAN_BINDING_CUDA_IMPLEMENTATION
#include "selscan_binding.h"
