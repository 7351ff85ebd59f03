// selscan_torch_cuda.h - the CUDA side of the PyTorch ops as seen from selscan_torch.cpp.
//
// selscan_torch_cuda.cu (compiled by nvcc WITHOUT any torch header, which keeps the build fast)
// holds selscan_cuda.cuh's launchers and exports only these wrappers. The stream is passed as a
// void* (a cudaStream_t), so this header needs neither CUDA nor torch.
#ifndef SELSCAN_TORCH_CUDA_H_
#define SELSCAN_TORCH_CUDA_H_

#include <stddef.h>
#include <stdint.h>

#include "selscan.h"

#ifdef __cplusplus
extern "C" {
#endif

// selscan_checkpoint_size_cuda.
selscan_status selscan_torch_cuda_checkpoint_size(const selscan_problem *p, size_t *bytes);
// The workspace: alloc(alloc_ctx, bytes) is called once, after selscan's checks, when the call
// needs one on this device (selscan_cuda_ext.workspace_alloc); it returns NULL on failure.
typedef void *(*selscan_torch_alloc)(void *ctx, size_t bytes);
// selscan_forward_cuda_ex on `stream`: checkpoint (may be NULL) written, cu_seqlens_device the
// device copy of p->cu_seqlens (NULL without packed sequences). On SELSCAN_ERR_CUDA *cuda_error_text
// names the CUDA error (static string).
selscan_status selscan_torch_cuda_forward(const selscan_problem *p, selscan_torch_alloc alloc, void *alloc_ctx,
                                          float *checkpoint, size_t checkpoint_bytes, const int64_t *cu_seqlens_device,
                                          void *stream, const char **cuda_error_text);
// selscan_backward_cuda_ex on `stream`: checkpoint (may be NULL) read.
selscan_status selscan_torch_cuda_backward(const selscan_problem *p, const selscan_grads *g, selscan_torch_alloc alloc,
                                           void *alloc_ctx, const float *checkpoint, size_t checkpoint_bytes,
                                           const int64_t *cu_seqlens_device, void *stream,
                                           const char **cuda_error_text);
// selscan_step_cuda_ex on `stream`.
selscan_status selscan_torch_cuda_step(const selscan_step_problem *s, void *stream, const char **cuda_error_text);

// ---- >>conv: the causal conv1d launchers (selscan.h >>conv-api) ----------------------------------
// selscan_conv_forward_cuda on `stream`; cu_seqlens_device: the device copy of p->cu_seqlens
// (NULL without packed sequences).
selscan_status selscan_torch_cuda_conv_forward(const selscan_conv_problem *p, const int64_t *cu_seqlens_device,
                                               void *stream, const char **cuda_error_text);
// selscan_conv_backward_cuda on `stream`, its workspace (selscan_conv_workspace_size_cuda bytes)
// from alloc(alloc_ctx, bytes) when it needs one (dweight / dbias asked for).
selscan_status selscan_torch_cuda_conv_backward(const selscan_conv_problem *p, const selscan_conv_grads *g,
                                                selscan_torch_alloc alloc, void *alloc_ctx,
                                                const int64_t *cu_seqlens_device, void *stream,
                                                const char **cuda_error_text);
// selscan_conv_step_cuda on `stream` (state_index: device memory).
selscan_status selscan_torch_cuda_conv_step(const selscan_conv_step_problem *s, void *stream,
                                            const char **cuda_error_text);

#ifdef __cplusplus
}
#endif

#endif  // SELSCAN_TORCH_CUDA_H_
