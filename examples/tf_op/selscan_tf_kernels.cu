// selscan_tf_kernels.cu - the CUDA kernels of the TensorFlow op. Compiled by nvcc WITHOUT any
// TensorFlow header: a private (SELSCAN_STATIC) copy of selscan's CPU validation and CUDA
// kernels, and the few wrappers of selscan_tf_cuda.h that selscan_tf_gpu.cc calls.
#define SELSCAN_IMPLEMENTATION
#define SELSCAN_STATIC
#define SELSCAN_CUDA_IMPLEMENTATION
#include "selscan_cuda.cuh"
#include "selscan_tf_cuda.h"

namespace selscan_tf {

selscan_status CudaWorkspaceSize(const selscan_problem* p, const selscan_grads* g, size_t* bytes) {
  return selscan_workspace_size_cuda(p, g, NULL, bytes);
}

selscan_status CudaForward(const selscan_problem* p, void* workspace, size_t bytes, void* stream,
                           const char** cuda_error_text) {
  cudaError_t err = cudaSuccess;
  selscan_cuda_ext x = {};
  x.cuda_error = &err;
  const selscan_status st = selscan_forward_cuda_ex(p, &x, workspace, bytes, static_cast<cudaStream_t>(stream));
  if (cuda_error_text) *cuda_error_text = st == SELSCAN_ERR_CUDA ? cudaGetErrorString(err) : "";
  return st;
}

selscan_status CudaBackward(const selscan_problem* p, const selscan_grads* g, void* workspace, size_t bytes,
                            void* stream, const char** cuda_error_text) {
  cudaError_t err = cudaSuccess;
  selscan_cuda_ext x = {};
  x.cuda_error = &err;
  const selscan_status st =
      selscan_backward_cuda_ex(p, g, &x, workspace, bytes, static_cast<cudaStream_t>(stream));
  if (cuda_error_text) *cuda_error_text = st == SELSCAN_ERR_CUDA ? cudaGetErrorString(err) : "";
  return st;
}

}  // namespace selscan_tf
