// selscan_tf_kernels.cu - the CUDA kernels of the TensorFlow op. Compiled by nvcc WITHOUT any
// TensorFlow header: a private (SELSCAN_STATIC) copy of selscan's CPU validation and CUDA
// kernels, and the few wrappers of selscan_tf_cuda.h that selscan_tf_gpu.cc calls.
#define SELSCAN_IMPLEMENTATION
#define SELSCAN_STATIC
#define SELSCAN_CUDA_IMPLEMENTATION
#define SELSCAN_CUDA_CHANNELS_LAST 1 /* the op's default layout is (batch, L, dim): the fast kernels */
#include "selscan_cuda.cuh"
#include "selscan_tf_cuda.h"

namespace selscan_tf {

selscan_status CudaCheckpointSize(const selscan_problem* p, size_t* bytes) {
  return selscan_checkpoint_size_cuda(p, bytes);
}

selscan_status CudaWorkspaceSize(const selscan_problem* p, const selscan_grads* g, bool with_checkpoint,
                                 size_t* bytes) {
  // The exact size for the call that follows: only whether it gets a checkpoint matters (the
  // forward writes checkpoint_out, the backward reads checkpoint_in); any non-NULL pointer says so.
  static float dummy;
  selscan_cuda_ext x = {};
  if (with_checkpoint) {
    if (g) x.checkpoint_in = &dummy;
    else x.checkpoint_out = &dummy;
  }
  return selscan_workspace_size_cuda_ex(p, g, &x, bytes);
}

selscan_status CudaForward(const selscan_problem* p, void* workspace, size_t bytes, float* checkpoint,
                           size_t checkpoint_bytes, void* stream, const char** cuda_error_text) {
  cudaError_t err = cudaSuccess;
  selscan_cuda_ext x = {};
  x.checkpoint_out = checkpoint;
  x.checkpoint_bytes = checkpoint ? checkpoint_bytes : 0;
  x.cuda_error = &err;
  const selscan_status st = selscan_forward_cuda_ex(p, &x, workspace, bytes, static_cast<cudaStream_t>(stream));
  if (cuda_error_text) *cuda_error_text = st == SELSCAN_ERR_CUDA ? cudaGetErrorString(err) : "";
  return st;
}

selscan_status CudaBackward(const selscan_problem* p, const selscan_grads* g, void* workspace, size_t bytes,
                            const float* checkpoint, size_t checkpoint_bytes, void* stream,
                            const char** cuda_error_text) {
  cudaError_t err = cudaSuccess;
  selscan_cuda_ext x = {};
  x.checkpoint_in = checkpoint;
  x.checkpoint_bytes = checkpoint ? checkpoint_bytes : 0;
  x.cuda_error = &err;
  const selscan_status st =
      selscan_backward_cuda_ex(p, g, &x, workspace, bytes, static_cast<cudaStream_t>(stream));
  if (cuda_error_text) *cuda_error_text = st == SELSCAN_ERR_CUDA ? cudaGetErrorString(err) : "";
  return st;
}

}  // namespace selscan_tf
