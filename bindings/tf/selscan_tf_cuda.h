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

// selscan_checkpoint_size_cuda: bytes of the forward's checkpoint (the state entering every 64
// steps, f32), which the backward can use instead of recomputing it.
selscan_status CudaCheckpointSize(const selscan_problem* p, size_t* bytes);
// selscan_workspace_size_cuda; g NULL: forward. with_checkpoint: the call gets a checkpoint.
selscan_status CudaWorkspaceSize(const selscan_problem* p, const selscan_grads* g, bool with_checkpoint,
                                 size_t* bytes);
// selscan_forward_cuda_ex / selscan_backward_cuda_ex on `stream`. checkpoint (may be NULL): written
// by the forward, read by the backward. On SELSCAN_ERR_CUDA, *cuda_error_text names the failing
// CUDA error (a static string).
selscan_status CudaForward(const selscan_problem* p, void* workspace, size_t bytes, float* checkpoint,
                           size_t checkpoint_bytes, void* stream, const char** cuda_error_text);
selscan_status CudaBackward(const selscan_problem* p, const selscan_grads* g, void* workspace, size_t bytes,
                            const float* checkpoint, size_t checkpoint_bytes, void* stream,
                            const char** cuda_error_text);

}  // namespace selscan_tf

#endif  // SELSCAN_TF_CUDA_H_
