// selscan_tf_gpu.cc - GPU kernels of the TensorFlow op (compiled only with GOOGLE_CUDA=1).
//
// A host-compiler translation unit: it includes TensorFlow's headers but no CUDA kernel code. The
// kernels live in selscan_tf_kernels.cu (nvcc, no TensorFlow headers) behind selscan_tf_cuda.h.
// Everything runs on TensorFlow's own compute stream for the op
// (ctx->eigen_device<Eigen::GpuDevice>().stream()): no default stream, no synchronization;
// the workspace comes from allocate_temp (TF's stream-ordered device allocator).
#if GOOGLE_CUDA

#define EIGEN_USE_GPU

#include <string>

#include "tensorflow/core/framework/op_kernel.h"
#include "unsupported/Eigen/CXX11/Tensor"
#include "selscan_tf_common.h"
#include "selscan_tf_cuda.h"

namespace selscan_tf {
namespace {

using tensorflow::DEVICE_GPU;
using tensorflow::OpKernel;
using GpuDevice = Eigen::GpuDevice;


template <typename T>
class SelscanForwardGpu : public OpKernel {
 public:
  explicit SelscanForwardGpu(OpKernelConstruction* c) : OpKernel(c) { OP_REQUIRES_OK(c, ReadOptions(c, false, &o_)); }

  void Compute(OpKernelContext* ctx) override {
    Sizes s;
    OP_REQUIRES_OK(ctx, CheckInputs(ctx, o_, false, &s));
    Tensor *y = nullptr, *h_last = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, SeqShape(s, o_.bld), &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, o_.return_last_state ? StateShape(s) : TensorShape({0}), &h_last));
    const GpuDevice& dev = ctx->eigen_device<GpuDevice>();
    Tensor* checkpoint = nullptr;
    if (s.Empty()) {  // y is empty; h_last is h0 (or 0); async on TF's stream
      OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({0}), &checkpoint));
      if (o_.return_last_state && h_last->TotalBytes() > 0) {
        if (o_.has_h0) dev.memcpy(h_last->data(), ctx->input(kH0).data(), h_last->TotalBytes());
        else dev.memset(h_last->data(), 0, h_last->TotalBytes());
      }
      return;
    }
    selscan_diag diag = {nullptr, nullptr, SELSCAN_RULE_NONE};  // the operand / rule of a validation error
    selscan_problem p = BuildProblem(ctx, o_, s, DtypeOf<T>::value, y, o_.return_last_state ? h_last : nullptr);
    p.diag = &diag;
    // The checkpoint (an output, so that the backward can take it instead of recomputing it).
    size_t ck_bytes = 0;
    if (o_.save_checkpoint)
      OP_REQUIRES_OK(ctx, FromSelscan(CudaCheckpointSize(&p, &ck_bytes), "selscan_checkpoint_size_cuda", s, &diag));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({static_cast<int64_t>(ck_bytes / sizeof(float))}),
                                             &checkpoint));
    float* ck = ck_bytes ? checkpoint->flat<float>().data() : nullptr;
    size_t bytes = 0;
    OP_REQUIRES_OK(ctx, FromSelscan(CudaWorkspaceSize(&p, nullptr, ck != nullptr, &bytes), "selscan_forward_cuda", s,
                                    &diag));
    Tensor tmp;
    void* ws = nullptr;
    OP_REQUIRES_OK(ctx, AllocateWorkspace(ctx, bytes, &tmp, &ws));
    const char* cuda_text = "";
    const selscan_status st = CudaForward(&p, ws, bytes, ck, ck_bytes, static_cast<void*>(dev.stream()), &cuda_text);
    OP_REQUIRES_OK(ctx, FromSelscan(st, "selscan_forward_cuda", s, &diag, cuda_text));
  }

 private:
  Options o_;
};

template <typename T>
class SelscanBackwardGpu : public OpKernel {
 public:
  explicit SelscanBackwardGpu(OpKernelConstruction* c) : OpKernel(c) { OP_REQUIRES_OK(c, ReadOptions(c, true, &o_)); }

  void Compute(OpKernelContext* ctx) override {
    Sizes s;
    OP_REQUIRES_OK(ctx, CheckInputs(ctx, o_, true, &s));
    Tensor* outs[kNumGradOutputs] = {};
    OP_REQUIRES_OK(ctx, AllocateGradOutputs(ctx, o_, outs));
    const GpuDevice& dev = ctx->eigen_device<GpuDevice>();
    if (s.Empty()) {  // all gradients 0, except dh0 = dh_last
      for (Tensor* t : outs)
        if (t->TotalBytes() > 0) dev.memset(t->data(), 0, t->TotalBytes());
      if (o_.has_h0 && o_.has_dh_last && outs[kDh0]->TotalBytes() > 0)
        dev.memcpy(outs[kDh0]->data(), ctx->input(kDhLast).data(), outs[kDh0]->TotalBytes());
      return;
    }
    selscan_diag diag = {nullptr, nullptr, SELSCAN_RULE_NONE};
    selscan_problem p = BuildProblem(ctx, o_, s, DtypeOf<T>::value, nullptr, nullptr);
    p.diag = &diag;
    const selscan_grads g = BuildGrads(ctx, o_, s, outs);
    // The forward's checkpoint, when a GPU forward saved one: an empty tensor, or one of another
    // size (a CPU forward's, whose layout differs), is not read: the backward recomputes it.
    const Tensor& checkpoint = ctx->input(kCheckpoint);
    size_t ck_bytes = 0;
    OP_REQUIRES_OK(ctx, FromSelscan(bind::CheckpointToRead(&p, checkpoint.NumElements(), CudaCheckpointSize, &ck_bytes),
                                    "selscan_checkpoint_size_cuda", s, &diag));
    const float* ck = ck_bytes ? checkpoint.flat<float>().data() : nullptr;
    size_t bytes = 0;
    OP_REQUIRES_OK(ctx, FromSelscan(CudaWorkspaceSize(&p, &g, ck != nullptr, &bytes), "selscan_backward_cuda", s,
                                    &diag));
    Tensor tmp;
    void* ws = nullptr;
    OP_REQUIRES_OK(ctx, AllocateWorkspace(ctx, bytes, &tmp, &ws));
    const char* cuda_text = "";
    const selscan_status st =
        CudaBackward(&p, &g, ws, bytes, ck, ck_bytes, static_cast<void*>(dev.stream()), &cuda_text);
    OP_REQUIRES_OK(ctx, FromSelscan(st, "selscan_backward_cuda", s, &diag, cuda_text));
  }

 private:
  Options o_;
};

#define SELSCAN_TF_REGISTER_GPU(T)                                                                     \
  REGISTER_KERNEL_BUILDER(Name("SelscanForward").Device(DEVICE_GPU).TypeConstraint<T>("T"),          \
                          SelscanForwardGpu<T>);                                                       \
  REGISTER_KERNEL_BUILDER(Name("SelscanBackward").Device(DEVICE_GPU).TypeConstraint<T>("T"),         \
                          SelscanBackwardGpu<T>);
SELSCAN_TF_REGISTER_GPU(float)
SELSCAN_TF_REGISTER_GPU(Eigen::half)
SELSCAN_TF_REGISTER_GPU(tensorflow::bfloat16)
#undef SELSCAN_TF_REGISTER_GPU

}  // namespace
}  // namespace selscan_tf

#endif  // GOOGLE_CUDA
