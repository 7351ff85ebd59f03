// selscan_tf_cuda.h - the CUDA side of the TensorFlow op as seen from selscan_tf_gpu.cc.
//
// selscan_tf_kernels.cu (compiled by nvcc, no TensorFlow headers) holds a private copy of
// selscan_cuda.cuh (SELSCAN_STATIC) and exports only these wrappers. They take the stream as a
// void* (a cudaStream_t) so that this header needs neither CUDA nor TensorFlow.
#ifndef SELSCAN_TF_CUDA_H_
#define SELSCAN_TF_CUDA_H_

#include <stddef.h>

#include "selscan.h"

namespace selscan_tf {

// selscan_workspace_size_cuda (no checkpoint).
selscan_status CudaWorkspaceSize(const selscan_problem* p, const selscan_grads* g, size_t* bytes);
// selscan_forward_cuda_ex / selscan_backward_cuda_ex on `stream`; on SELSCAN_ERR_CUDA,
// *cuda_error_text names the failing CUDA error (static string).
selscan_status CudaForward(const selscan_problem* p, void* workspace, size_t bytes, void* stream,
                           const char** cuda_error_text);
selscan_status CudaBackward(const selscan_problem* p, const selscan_grads* g, void* workspace, size_t bytes,
                            void* stream, const char** cuda_error_text);

}  // namespace selscan_tf

#endif  // SELSCAN_TF_CUDA_H_
