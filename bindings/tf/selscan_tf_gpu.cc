// selscan_tf_gpu.cc - GPU kernels of the TensorFlow op (compiled only with GOOGLE_CUDA=1).
//
// A host-compiler translation unit: it includes TensorFlow's headers but no CUDA header. The
// kernels live in selscan_tf_kernels.cu (nvcc, no TensorFlow headers) behind the bindings' shared
// CUDA shim (bindings/common/selscan_binding.h >>bind-cuda); this TU is the GPU side of the op kernels
// (GpuOps; the kernels themselves are selscan_tf_common.h's >>op-kernels). Everything runs on
// TensorFlow's own compute stream for the op (ctx->eigen_device<Eigen::GpuDevice>().stream()): no
// default stream, no synchronization; the workspace comes from allocate_temp (TF's stream-ordered
// device allocator), asked for by selscan itself (the shim's workspace_alloc).
#if GOOGLE_CUDA

#define EIGEN_USE_GPU

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "unsupported/Eigen/CXX11/Tensor"
#include "selscan_binding.h" // bindings/common: the CUDA shim (>>bind-cuda) shared with the other bindings
#include "selscan_tf_common.h"

namespace selscan_tf {
namespace {

using tensorflow::DEVICE_GPU;
using GpuDevice = Eigen::GpuDevice;

// One call through the CUDA shim on the op's compute stream. The workspace strategy of the shim:
// selscan asks for exactly the bytes the call needs, after its checks and only when it needs any;
// Alloc takes them from allocate_temp on the op's device and returns the pointer, or NULL when
// TensorFlow refuses (selscan then returns SELSCAN_ERR_WORKSPACE and launches nothing), keeping
// TensorFlow's status for the error.
class GpuCall {
  public:
    explicit GpuCall(OpKernelContext *ctx) : ctx_(ctx) {
        call.stream = static_cast<void *>(ctx->eigen_device<GpuDevice>().stream());
        call.workspace_alloc = &GpuCall::Alloc;
        call.workspace_ctx = this;
    }
    GpuCall(const GpuCall &) = delete;
    GpuCall &operator=(const GpuCall &) = delete;

    // The call's result as a TensorFlow status: selscan's (FromSelscan, with the CUDA error's text),
    // or, when the workspace could not be allocated, allocate_temp's code (e.g. RESOURCE_EXHAUSTED)
    // with selscan's message naming the workspace and TensorFlow's own.
    absl::Status Status(const bind::Result &r, const char *where, const Sizes &s) const {
        const absl::Status st = FromSelscan(r.status, where, s, &r.diag, call.cuda_error_text);
        if (st.ok() || alloc_status_.ok()) return st;
        return absl::Status(alloc_status_.code(),
                            absl::StrCat(st.message(), ": allocate_temp: ", alloc_status_.message()));
    }

    // A device copy of host memory (the packed sequences' offsets, the step's state_batch_indices:
    // host inputs, so that their values are checked on the host), from allocate_temp on the op's
    // stream (*keep holds it). The copy's source is a pageable std::vector: cudaMemcpyAsync has staged
    // it when it returns, so nothing has to outlive the call (the input tensor may be pinned host
    // memory, which an async copy would read later).
    template <typename I> absl::Status ToDevice(const I *src, int64_t n, Tensor *keep, const I **dst) {
        const std::vector<I> host(src, src + n);
        void *ptr = nullptr;
        TF_RETURN_IF_ERROR(AllocateWorkspace(ctx_, host.size() * sizeof(I), keep, &ptr));
        if (ptr) ctx_->eigen_device<GpuDevice>().memcpyHostToDevice(ptr, host.data(), host.size() * sizeof(I));
        *dst = static_cast<const I *>(ptr);
        return absl::OkStatus();
    }
    // Packed sequences: the offsets' device copy for the shim (call.cu_seqlens_device).
    absl::Status Offsets(const selscan_problem &p) {
        if (!p.cu_seqlens) return absl::OkStatus();
        return ToDevice(p.cu_seqlens, p.n_seqs + 1, &cu_dev_, &call.cu_seqlens_device);
    }
    selscan_binding_cuda_call call = {};

  private:
    static void *Alloc(void *self, size_t bytes) {
        auto *c = static_cast<GpuCall *>(self);
        void *ptr = nullptr;
        c->alloc_status_ = AllocateWorkspace(c->ctx_, bytes, &c->tmp_, &ptr);
        return c->alloc_status_.ok() ? ptr : nullptr;
    }
    OpKernelContext *ctx_;
    Tensor cu_dev_; // the offsets' device copy (stream-ordered allocator, as the workspace)
  public:
    Tensor idx_dev_; // the step's state_batch_indices' device copy
  private:
    Tensor tmp_; // the workspace: TF's GPU allocator is stream-ordered, so it may go once the call is enqueued
    absl::Status alloc_status_;
};

// The GPU side of the op kernels (selscan_tf_common.h >>op-kernels).
struct GpuOps {
    static void Copy(OpKernelContext *ctx, void *dst, const void *src, size_t bytes) {
        ctx->eigen_device<GpuDevice>().memcpy(dst, src, bytes);
    }
    static void Zero(OpKernelContext *ctx, void *dst, size_t bytes) {
        ctx->eigen_device<GpuDevice>().memset(dst, 0, bytes);
    }

    // selscan_checkpoint_size_cuda when asked for (its layout differs from the CPU's).
    // The decode step through the shim, on the op's stream (no workspace); state_batch_indices (a
    // host input, checked by the kernel) copied to the device.
    static absl::Status Step(OpKernelContext *ctx, const selscan_step_problem &p_host, const Sizes &s) {
        GpuCall c(ctx);
        selscan_step_problem p = p_host;
        if (p.state_index) TF_RETURN_IF_ERROR(c.ToDevice(p_host.state_index, s.batch, &c.idx_dev_, &p.state_index));
        const bind::Result r =
            bind::Call(p, [&](const selscan_step_problem *q) { return selscan_binding_cuda_step(q, &c.call); });
        return FromSelscan(r.status, "step (CUDA)", s, &r.diag, c.call.cuda_error_text,
                           bind::NamesOf(bind::kStepNames));
    }

    static absl::Status CheckpointBytes(const selscan_problem &p, bool save, const Sizes &s, size_t *bytes) {
        *bytes = 0;
        if (!save) return absl::OkStatus();
        return FromSelscan(
            bind::Call(p, [&](const selscan_problem *q) { return selscan_binding_cuda_checkpoint_size(q, bytes); }),
            "selscan_checkpoint_size_cuda", s);
    }

    static absl::Status Forward(OpKernelContext *ctx, const selscan_problem &p, const Sizes &s, float *ck,
                                size_t ck_bytes) {
        GpuCall c(ctx);
        TF_RETURN_IF_ERROR(c.Offsets(p));
        return c.Status(
            bind::Call(
                p, [&](const selscan_problem *q) { return selscan_binding_cuda_forward(q, ck, ck_bytes, &c.call); }),
            "selscan_forward_cuda", s);
    }

    static absl::Status Backward(OpKernelContext *ctx, const selscan_problem &p, const selscan_grads &g, const Sizes &s,
                                 const Tensor &ck_in) {
        // The forward's checkpoint, when a GPU forward saved one: an empty tensor, or one of another
        // size (a CPU forward's, whose layout differs), is not read: the backward recomputes it.
        size_t ck_bytes = 0;
        TF_RETURN_IF_ERROR(FromSelscan(bind::Call(p,
                                                  [&](const selscan_problem *q) {
                                                      return bind::CheckpointToRead(
                                                          q, ck_in.NumElements(), selscan_binding_cuda_checkpoint_size,
                                                          &ck_bytes);
                                                  }),
                                       "selscan_checkpoint_size_cuda", s));
        const float *ck = ck_bytes ? ck_in.flat<float>().data() : nullptr;
        GpuCall c(ctx);
        TF_RETURN_IF_ERROR(c.Offsets(p));
        return c.Status(bind::Call(p,
                                   [&](const selscan_problem *q) {
                                       return selscan_binding_cuda_backward(q, &g, ck, ck_bytes, &c.call);
                                   }),
                        "selscan_backward_cuda", s);
    }
};

SELSCAN_TF_REGISTER_KERNELS(DEVICE_GPU, GpuOps);

} // namespace
} // namespace selscan_tf

#endif // GOOGLE_CUDA
