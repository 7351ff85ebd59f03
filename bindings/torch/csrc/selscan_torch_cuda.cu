// selscan_torch_cuda.cu - the CUDA kernels of the PyTorch ops. Compiled by nvcc WITHOUT any torch
// header: selscan's validation helpers (SELSCAN_VALIDATION_ONLY: the CPU entry points come from
// selscan_torch.cpp), the kernels and launchers of selscan_cuda.cuh, and the wrappers of
// selscan_torch_cuda.h.
#define SELSCAN_IMPLEMENTATION
#define SELSCAN_VALIDATION_ONLY
#define SELSCAN_CUDA_IMPLEMENTATION
#ifndef SELSCAN_CUDA_CHANNELS_LAST
#define SELSCAN_CUDA_CHANNELS_LAST 0 /* setup.py: SELSCAN_TORCH_CHANNELS_LAST=1 turns it on */
#endif
#include "selscan_cuda.cuh"
#include "selscan_torch_cuda.h"


static const char *cuda_text(selscan_status st, cudaError_t err) {
    return st == SELSCAN_ERR_CUDA ? cudaGetErrorString(err) : "";
}

extern "C" {

selscan_status selscan_torch_cuda_checkpoint_size(const selscan_problem *p, size_t *bytes) {
    return selscan_checkpoint_size_cuda(p, bytes);
}

selscan_status selscan_torch_cuda_forward(const selscan_problem *p, selscan_torch_alloc alloc, void *alloc_ctx,
                                          float *checkpoint, size_t checkpoint_bytes, const int64_t *cu_seqlens_device,
                                          void *stream, const char **cuda_error_text) {
    cudaError_t err = cudaSuccess;
    selscan_cuda_ext x = {};
    x.workspace_alloc = alloc;
    x.workspace_ctx = alloc_ctx;
    x.cu_seqlens_device = cu_seqlens_device;
    x.checkpoint_out = checkpoint;
    x.checkpoint_bytes = checkpoint ? checkpoint_bytes : 0;
    x.cuda_error = &err;
    const selscan_status st = selscan_forward_cuda_ex(p, &x, NULL, 0, static_cast<cudaStream_t>(stream));
    if (cuda_error_text) *cuda_error_text = cuda_text(st, err);
    return st;
}

selscan_status selscan_torch_cuda_backward(const selscan_problem *p, const selscan_grads *g, selscan_torch_alloc alloc,
                                           void *alloc_ctx, const float *checkpoint, size_t checkpoint_bytes,
                                           const int64_t *cu_seqlens_device, void *stream,
                                           const char **cuda_error_text) {
    cudaError_t err = cudaSuccess;
    selscan_cuda_ext x = {};
    x.workspace_alloc = alloc;
    x.workspace_ctx = alloc_ctx;
    x.cu_seqlens_device = cu_seqlens_device;
    x.checkpoint_in = checkpoint;
    x.checkpoint_bytes = checkpoint ? checkpoint_bytes : 0;
    x.cuda_error = &err;
    const selscan_status st =
        selscan_backward_cuda_ex(p, g, &x, NULL, 0, static_cast<cudaStream_t>(stream));
    if (cuda_error_text) *cuda_error_text = cuda_text(st, err);
    return st;
}

selscan_status selscan_torch_cuda_step(const selscan_step_problem *s, void *stream, const char **cuda_error_text) {
    cudaError_t err = cudaSuccess;
    selscan_cuda_ext x = {};
    x.cuda_error = &err;
    const selscan_status st = selscan_step_cuda_ex(s, &x, static_cast<cudaStream_t>(stream));
    if (cuda_error_text) *cuda_error_text = cuda_text(st, err);
    return st;
}

// ---- >>conv: the causal conv1d launchers -----------------------------------------------------------

selscan_status selscan_torch_cuda_conv_forward(const selscan_conv_problem *p, const int64_t *cu_seqlens_device,
                                               void *stream, const char **cuda_error_text) {
    cudaError_t err = cudaSuccess;
    selscan_cuda_ext x = {};
    x.cu_seqlens_device = cu_seqlens_device;
    x.cuda_error = &err;
    const selscan_status st = selscan_conv_forward_cuda(p, &x, static_cast<cudaStream_t>(stream));
    if (cuda_error_text) *cuda_error_text = cuda_text(st, err);
    return st;
}

selscan_status selscan_torch_cuda_conv_backward(const selscan_conv_problem *p, const selscan_conv_grads *g,
                                                selscan_torch_alloc alloc, void *alloc_ctx,
                                                const int64_t *cu_seqlens_device, void *stream,
                                                const char **cuda_error_text) {
    cudaError_t err = cudaSuccess;
    selscan_cuda_ext x = {};
    x.cu_seqlens_device = cu_seqlens_device;
    x.cuda_error = &err;
    if (cuda_error_text) *cuda_error_text = "";
    size_t bytes = 0;
    selscan_status st = selscan_conv_workspace_size_cuda(p, g, &bytes);
    if (st != SELSCAN_OK) return st;
    void *ws = NULL;
    if (bytes > 0) {
        ws = alloc(alloc_ctx, bytes);
        if (!ws) return SELSCAN_ERR_WORKSPACE;
    }
    st = selscan_conv_backward_cuda(p, g, &x, ws, bytes, static_cast<cudaStream_t>(stream));
    if (cuda_error_text) *cuda_error_text = cuda_text(st, err);
    return st;
}

selscan_status selscan_torch_cuda_conv_step(const selscan_conv_step_problem *s, void *stream,
                                            const char **cuda_error_text) {
    cudaError_t err = cudaSuccess;
    selscan_cuda_ext x = {};
    x.cuda_error = &err;
    const selscan_status st = selscan_conv_step_cuda(s, &x, static_cast<cudaStream_t>(stream));
    if (cuda_error_text) *cuda_error_text = cuda_text(st, err);
    return st;
}

}  // extern "C"
