/* selscan_binding_cuda.h - the CUDA shim every selscan binding shares: selscan_cuda.cuh's launchers
 * behind a few wrappers that need neither CUDA nor a framework (the stream is a void *, a
 * cudaStream_t), so a binding's host-compiler TU (torch's selscan_torch.cpp, TensorFlow's
 * selscan_tf_gpu.cc) calls the kernels without CUDA headers, and its nvcc TU holds no framework
 * header.
 *
 * Declarations (C or C++, no CUDA, no framework):
 *     #include "selscan_binding_cuda.h"
 * Definitions, in the binding's single nvcc TU, after selscan_cuda.cuh's implementation (each
 * binding keeps its own flags: SELSCAN_VALIDATION_ONLY or SELSCAN_STATIC, SELSCAN_CUDA_CHANNELS_LAST):
 *     #define SELSCAN_IMPLEMENTATION
 *     #define SELSCAN_CUDA_IMPLEMENTATION
 *     #include "selscan_cuda.cuh"
 *     #define SELSCAN_BINDING_CUDA_IMPLEMENTATION
 *     #include "selscan_binding_cuda.h"
 *
 * The workspace strategy (>>bind-cuda-workspace): no binding sizes a CUDA workspace beforehand.
 * selscan_cuda_ext.workspace_alloc is handed through: selscan calls it once, after every check and
 * before any launch, only when the call needs a workspace on this device, with exactly the bytes it
 * needs; the binding allocates from its framework's stream-ordered allocator (torch's caching
 * allocator, TensorFlow's allocate_temp) and returns the pointer, or NULL on failure (the call then
 * returns SELSCAN_ERR_WORKSPACE, diag "workspace", and launches nothing). The memory must stay valid
 * until the call's kernels have run on the stream (a framework tensor alive until the op returns).
 *
 * CONTENTS (grep the >>tag)
 *     >>bind-cuda-call       selscan_binding_cuda_call: stream, workspace callback, packed offsets, error text
 *     >>bind-cuda-api        the wrappers (scan forward / backward / step, conv forward / backward / step)
 *     >>bind-cuda-impl       their definitions (SELSCAN_BINDING_CUDA_IMPLEMENTATION)
 */
#ifndef SELSCAN_BINDING_CUDA_H_
#define SELSCAN_BINDING_CUDA_H_

#include <stddef.h>
#include <stdint.h>

#include "selscan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- >>bind-cuda-call: what one call runs on and may use, besides its problem ----------------- */
typedef struct selscan_binding_cuda_call {
    /* in: the cudaStream_t the call runs on (the framework's current / compute stream) */
    void *stream;
    /* in: the workspace on demand (selscan_cuda_ext.workspace_alloc; see >>bind-cuda-workspace
       above); NULL: no workspace (a call that needs one returns SELSCAN_ERR_WORKSPACE) */
    void *(*workspace_alloc)(void *ctx, size_t bytes);
    void *workspace_ctx;
    /* in: the device copy of the problem's cu_seqlens (packed sequences), NULL without */
    const int64_t *cu_seqlens_device;
    /* out: on SELSCAN_ERR_CUDA the failing CUDA error's text (a static string), else "" */
    const char *cuda_error_text;
} selscan_binding_cuda_call;

/* ---- >>bind-cuda-api ---------------------------------------------------------------------------
   Every wrapper runs its launcher on call->stream and sets call->cuda_error_text; none synchronizes.
   Tensor pointers are device memory, selscan's host-side rules unchanged (cu_seqlens: host memory,
   its device copy in call->cu_seqlens_device; a step's state_index: device memory). */

/* selscan_checkpoint_size_cuda: the bytes of the CUDA forward's checkpoint (the state entering
   every 64 steps, f32), which the CUDA backward reads instead of recomputing it. */
selscan_status selscan_binding_cuda_checkpoint_size(const selscan_problem *p, size_t *bytes);
/* selscan_forward_cuda_ex; checkpoint (NULL: none) written, checkpoint_bytes its size. */
selscan_status selscan_binding_cuda_forward(const selscan_problem *p, float *checkpoint, size_t checkpoint_bytes,
                                            selscan_binding_cuda_call *call);
/* selscan_backward_cuda_ex; checkpoint (NULL: none, the states are recomputed) read. */
selscan_status selscan_binding_cuda_backward(const selscan_problem *p, const selscan_grads *g, const float *checkpoint,
                                             size_t checkpoint_bytes, selscan_binding_cuda_call *call);
/* selscan_step_cuda_ex (no workspace, no packed sequences). */
selscan_status selscan_binding_cuda_step(const selscan_step_problem *s, selscan_binding_cuda_call *call);
/* selscan_conv_forward_cuda (no workspace). */
selscan_status selscan_binding_cuda_conv_forward(const selscan_conv_problem *p, selscan_binding_cuda_call *call);
/* selscan_conv_backward_cuda; its workspace (dweight / dbias asked for) through call->workspace_alloc. */
selscan_status selscan_binding_cuda_conv_backward(const selscan_conv_problem *p, const selscan_conv_grads *g,
                                                  selscan_binding_cuda_call *call);
/* selscan_conv_step_cuda (no workspace). */
selscan_status selscan_binding_cuda_conv_step(const selscan_conv_step_problem *s, selscan_binding_cuda_call *call);
/* 1 where the fast forward kernels of the package's CUDA TU take p (a valid problem; its sizes,
   flags and strides, pointers only tested for NULL; no device asked): selscan_cuda.cuh's plan,
   asked instead of restated (a binding copies L-strided operands to unit L strides where the
   copies would send the problem to the fast kernels, that is where p's unit-L form is taken and p
   is not); 0 for an invalid problem. */
int selscan_binding_cuda_fast_forward(const selscan_problem *p);
/* 1 where the package's CUDA TU compiled the fast kernels for any L stride too
   (SELSCAN_CUDA_CHANNELS_LAST), 0 where an operand with a non-unit L stride runs the general ones. */
int selscan_binding_cuda_channels_last(void);

#ifdef __cplusplus
}
#endif
#endif /* SELSCAN_BINDING_CUDA_H_ */

/* ---- >>bind-cuda-impl ------------------------------------------------------------------------- */
#if defined(SELSCAN_BINDING_CUDA_IMPLEMENTATION) && !defined(SELSCAN_BINDING_CUDA_IMPLEMENTED)
#define SELSCAN_BINDING_CUDA_IMPLEMENTED
#if !defined(__CUDACC__) || !defined(SELSCAN_CUDA_CUH)
#error "selscan_binding_cuda.h: SELSCAN_BINDING_CUDA_IMPLEMENTATION belongs in an nvcc TU, after selscan_cuda.cuh"
#endif

namespace selscan_binding_cuda_detail {

/* One call's selscan_cuda_ext (from the call's inputs) and the CUDA error it may report. */
struct Ext {
    cudaError_t err = cudaSuccess;
    selscan_cuda_ext x = {};
    cudaStream_t stream = nullptr;
    selscan_binding_cuda_call *call;
    explicit Ext(selscan_binding_cuda_call *c) : call(c) {
        if (c) {
            x.workspace_alloc = c->workspace_alloc;
            x.workspace_ctx = c->workspace_ctx;
            x.cu_seqlens_device = c->cu_seqlens_device;
            stream = static_cast<cudaStream_t>(c->stream);
        }
        x.cuda_error = &err;
    }
    selscan_status Done(selscan_status st) const {
        if (call) call->cuda_error_text = st == SELSCAN_ERR_CUDA ? cudaGetErrorString(err) : "";
        return st;
    }
};

} // namespace selscan_binding_cuda_detail

extern "C" {

selscan_status selscan_binding_cuda_checkpoint_size(const selscan_problem *p, size_t *bytes) {
    return selscan_checkpoint_size_cuda(p, bytes);
}

selscan_status selscan_binding_cuda_forward(const selscan_problem *p, float *checkpoint, size_t checkpoint_bytes,
                                            selscan_binding_cuda_call *call) {
    selscan_binding_cuda_detail::Ext e(call);
    e.x.checkpoint_out = checkpoint;
    e.x.checkpoint_bytes = checkpoint ? checkpoint_bytes : 0;
    return e.Done(selscan_forward_cuda_ex(p, &e.x, NULL, 0, e.stream));
}

selscan_status selscan_binding_cuda_backward(const selscan_problem *p, const selscan_grads *g, const float *checkpoint,
                                             size_t checkpoint_bytes, selscan_binding_cuda_call *call) {
    selscan_binding_cuda_detail::Ext e(call);
    e.x.checkpoint_in = checkpoint;
    e.x.checkpoint_bytes = checkpoint ? checkpoint_bytes : 0;
    return e.Done(selscan_backward_cuda_ex(p, g, &e.x, NULL, 0, e.stream));
}

selscan_status selscan_binding_cuda_step(const selscan_step_problem *s, selscan_binding_cuda_call *call) {
    selscan_binding_cuda_detail::Ext e(call);
    return e.Done(selscan_step_cuda_ex(s, &e.x, e.stream));
}

selscan_status selscan_binding_cuda_conv_forward(const selscan_conv_problem *p, selscan_binding_cuda_call *call) {
    selscan_binding_cuda_detail::Ext e(call);
    return e.Done(selscan_conv_forward_cuda(p, &e.x, e.stream));
}

selscan_status selscan_binding_cuda_conv_backward(const selscan_conv_problem *p, const selscan_conv_grads *g,
                                                  selscan_binding_cuda_call *call) {
    selscan_binding_cuda_detail::Ext e(call);
    return e.Done(selscan_conv_backward_cuda(p, g, &e.x, NULL, 0, e.stream));
}

selscan_status selscan_binding_cuda_conv_step(const selscan_conv_step_problem *s, selscan_binding_cuda_call *call) {
    selscan_binding_cuda_detail::Ext e(call);
    return e.Done(selscan_conv_step_cuda(s, &e.x, e.stream));
}

int selscan_binding_cuda_channels_last(void) { return SELSCAN_CUDA_CHANNELS_LAST ? 1 : 0; }

int selscan_binding_cuda_fast_forward(const selscan_problem *p) {
    return selscan_cuda_detail::fast_forward_takes(p) ? 1 : 0;
}

} /* extern "C" */

#endif /* SELSCAN_BINDING_CUDA_IMPLEMENTATION */
