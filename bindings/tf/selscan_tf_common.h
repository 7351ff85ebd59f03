// selscan_tf_common.h - shared by the CPU (selscan_tf.cc) and GPU (selscan_tf_gpu.cc) kernels of the
// TensorFlow op: attrs, input checks, the mapping of TensorFlow tensors onto a selscan_problem
// through element strides (no transposes, no copies), and the op kernels themselves (>>op-kernels),
// which leave only the device's calls to each TU.
//
// Memory layouts and strides: selscan_tf_layout.h.
#ifndef SELSCAN_TF_COMMON_H_
#define SELSCAN_TF_COMMON_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"
#include "selscan.h"
#include "selscan_tf_layout.h"

namespace selscan_tf {

using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

// InvalidArgument status with a message built from pieces.
template <typename... Args> absl::Status Invalid(const Args &...args) {
    return absl::InvalidArgumentError(absl::StrCat(args...));
}

// Input positions: bindings/common's order (>>args-order: bind::kScanU, ..., the backward op
// appending dy, dh_last, checkpoint; bind::kStepState, ...).
// Output positions of the backward op.
enum GradOutput { kDu = 0, kDdelta, kDa, kDb, kDc, kDd, kDz, kDdeltaBias, kDh0, kNumGradOutputs };

struct Options {
    bool softplus = false, has_d = false, has_z = false, has_bias = false, has_h0 = false;
    bool return_last_state = false, has_dh_last = false, save_checkpoint = false, has_cu = false;
    bool bld = true; // layout "BLD"; false: "BDL"
};

inline absl::Status ReadOptions(OpKernelConstruction *c, bool backward, Options *o) {
    std::string layout;
    TF_RETURN_IF_ERROR(c->GetAttr("delta_softplus", &o->softplus));
    TF_RETURN_IF_ERROR(c->GetAttr("has_d", &o->has_d));
    TF_RETURN_IF_ERROR(c->GetAttr("has_z", &o->has_z));
    TF_RETURN_IF_ERROR(c->GetAttr("has_delta_bias", &o->has_bias));
    TF_RETURN_IF_ERROR(c->GetAttr("has_h0", &o->has_h0));
    TF_RETURN_IF_ERROR(c->GetAttr("has_cu_seqlens", &o->has_cu));
    TF_RETURN_IF_ERROR(c->GetAttr("layout", &layout));
    if (backward) {
        TF_RETURN_IF_ERROR(c->GetAttr("has_dh_last", &o->has_dh_last));
    } else {
        TF_RETURN_IF_ERROR(c->GetAttr("return_last_state", &o->return_last_state));
        TF_RETURN_IF_ERROR(c->GetAttr("save_checkpoint", &o->save_checkpoint));
    }
    if (layout != "BLD" && layout != "BDL")
        return Invalid("selscan: layout must be \"BLD\" or \"BDL\", got \"", layout, "\"");
    o->bld = layout == "BLD";
    return absl::OkStatus();
}

// ---- the arguments (>>rules) ------------------------------------------------------------------------
// Checked by bindings/common (selscan_binding.h >>bind-args: selscan's operand tables and size rules, the
// library's rule texts), from the kernels (CheckInputs, CheckStepInputs) and the shape functions
// (selscan_tf.cc), so eager calls and graphs refuse the same inputs with the same words, naming the
// user's argument (u, delta, A, B, C, D, z, delta_bias, h0, dy, dh_last, checkpoint, cu_seqlens; the
// step's x, dt, dt_bias, state, state_batch_indices). TensorFlow's own rule: an optional operand is
// wired always, absent when its has_* attr is false.

// An optional operand whose has_* attr is false must be an empty tensor: a non-empty one would be
// ignored without a word (a D the caller thinks applied, a dh_last whose gradient is lost).
inline absl::Status AbsentRule(const char *name, const char *attr, const std::string &shape) {
    return Invalid("selscan: ", name, " is given (shape ", shape, ") but ", attr,
                   " is false: pass an empty tensor for an absent operand, or set ", attr, "=True");
}

// The kernels' checks: the has_* attrs' rule, then the common layer's (s: the sizes; defined in
// selscan_tf.cc, the TU with selscan's implementation, which the checks call).
absl::Status CheckInputs(OpKernelContext *ctx, const Options &o, bool backward, Sizes *s);

template <typename T> struct DtypeOf;
template <> struct DtypeOf<float> { static constexpr selscan_dtype value = SELSCAN_F32; };
template <> struct DtypeOf<Eigen::half> { static constexpr selscan_dtype value = SELSCAN_F16; };
template <> struct DtypeOf<tensorflow::bfloat16> { static constexpr selscan_dtype value = SELSCAN_BF16; };

inline const void *DataOf(const Tensor &t) { return t.data(); } // an input: only read
inline void *OutDataOf(Tensor &t) { return t.data(); }          // an output

// The problem of one call: inputs from the context, outputs y / h_last (h_last may be NULL).
inline selscan_problem BuildProblem(OpKernelContext *ctx, const Options &o, const Sizes &s, selscan_dtype dtype,
                                    Tensor *y, Tensor *h_last) {
    auto in = [&](bool present, int i) { return present ? DataOf(ctx->input(i)) : nullptr; };
    ScanData d;
    d.u = in(true, bind::kScanU);
    d.delta = in(true, bind::kScanDelta);
    d.A = in(true, bind::kScanA);
    d.B = in(true, bind::kScanB);
    d.C = in(true, bind::kScanC);
    d.D = in(o.has_d, bind::kScanD);
    d.z = in(o.has_z, bind::kScanZ);
    d.delta_bias = in(o.has_bias, bind::kScanDeltaBias);
    d.h0 = in(o.has_h0, bind::kScanH0);
    d.y = y ? OutDataOf(*y) : nullptr;
    d.h_last = h_last ? OutDataOf(*h_last) : nullptr;
    const int64_t *cu = o.has_cu ? ctx->input(bind::kScanCuSeqlens).flat<int64_t>().data() : nullptr;
    return ScanProblem(d, s, o.bld, dtype, o.softplus, cu);
}

// The gradients of one call; outs[kNumGradOutputs] are the backward op's outputs (an output of
// an absent optional operand is not computed).
inline selscan_grads BuildGrads(OpKernelContext *ctx, const Options &o, const Sizes &s, Tensor *const *outs) {
    auto out = [&](bool present, int i) { return present ? OutDataOf(*outs[i]) : nullptr; };
    GradData d;
    d.dy = DataOf(ctx->input(bind::kScanDy));
    d.dh_last = o.has_dh_last ? DataOf(ctx->input(bind::kScanDhLast)) : nullptr;
    d.du = out(true, kDu);
    d.ddelta = out(true, kDdelta);
    d.dA = out(true, kDa);
    d.dB = out(true, kDb);
    d.dC = out(true, kDc);
    d.dD = out(o.has_d, kDd);
    d.dz = out(o.has_z, kDz);
    d.ddelta_bias = out(o.has_bias, kDdeltaBias);
    d.dh0 = out(o.has_h0, kDh0);
    return ScanGrads(d, s, o.bld);
}

// Output shapes.
inline TensorShape SeqShape(const Sizes &s, bool bld) {
    return bld ? TensorShape({s.batch, s.L, s.dim}) : TensorShape({s.batch, s.dim, s.L});
}
inline TensorShape StateShape(const Sizes &s) { return TensorShape({s.rows, s.dim, s.N}); }

// Allocates the backward op's outputs (absent optional operands get an empty (0,) gradient).
inline absl::Status AllocateGradOutputs(OpKernelContext *ctx, const Options &o, Tensor **outs) {
    // gradient i is input i's (u .. h0: bindings/common's order)
    static_assert(int(kDh0) == int(bind::kScanH0) && int(kDdeltaBias) == int(bind::kScanDeltaBias), "gradient i is input i's");
    const bool present[kNumGradOutputs] = {true, true, true, true, true, o.has_d, o.has_z, o.has_bias, o.has_h0};
    for (int i = 0; i < kNumGradOutputs; i++) {
        const TensorShape shape = present[i] ? ctx->input(i).shape() : TensorShape({0});
        TF_RETURN_IF_ERROR(ctx->allocate_output(i, shape, &outs[i]));
    }
    return absl::OkStatus();
}

// selscan status -> TensorFlow status (the layer's message: bind::ErrorOf): Internal for CUDA
// failures (with the CUDA error's text, cuda_text), InvalidArgument for the rest, with selscan's
// own message, the argument and rule its diag names, and the sizes. Defined in selscan_tf.cc
// (the TU that holds selscan's implementation).
absl::Status FromSelscan(selscan_status st, const char *where, const Sizes &s, const selscan_diag *diag = nullptr,
                         const char *cuda_text = "", const bind::Names &names = bind::Names());
inline absl::Status FromSelscan(const bind::Result &r, const char *where, const Sizes &s,
                                const bind::Names &names = bind::Names()) {
    return FromSelscan(r.status, where, s, &r.diag, "", names);
}


// A workspace of `bytes` bytes from allocate_temp on the op's device (host memory for CPU
// kernels, device memory for GPU kernels), handed to selscan as it comes: selscan's sizes include
// the slack it needs to align any pointer up inside. NULL when bytes is 0. *tmp keeps it alive.
inline absl::Status AllocateWorkspace(OpKernelContext *ctx, size_t bytes, Tensor *tmp, void **ptr) {
    *ptr = nullptr;
    if (bytes == 0) return absl::OkStatus();
    TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DT_INT8, TensorShape({static_cast<int64_t>(bytes)}), tmp));
    *ptr = tmp->data();
    return absl::OkStatus();
}

// ---- >>op-kernels: SelscanForward / SelscanBackward, written once for both devices -------------
// The checks, the outputs, the empty-problem rule (>>bind-empty) and the problem's mapping are the
// same on every device; Ops (CpuOps in selscan_tf.cc, GpuOps in selscan_tf_gpu.cc) supplies the rest:
//   static void Copy(OpKernelContext*, void* dst, const void* src, size_t bytes);  // on the op's device
//   static void Zero(OpKernelContext*, void* dst, size_t bytes);                   // (GPU: TF's stream)
//   static absl::Status CheckpointBytes(const selscan_problem&, bool save, const Sizes&, size_t* bytes);
//       the forward's checkpoint size on this device (0 when not saved); never asked for an empty problem
//   static absl::Status Forward(OpKernelContext*, const selscan_problem&, const Sizes&, float* checkpoint,
//                               size_t checkpoint_bytes);
//   static absl::Status Backward(OpKernelContext*, const selscan_problem&, const selscan_grads&,
//                                const Sizes&, const Tensor& checkpoint);
//       the forward's checkpoint input: read only when it has this device's size (bind::CheckpointToRead)
template <typename Ops, typename T> class SelscanForwardOp : public tensorflow::OpKernel {
  public:
    explicit SelscanForwardOp(OpKernelConstruction *c) : OpKernel(c) { OP_REQUIRES_OK(c, ReadOptions(c, false, &o_)); }

    void Compute(OpKernelContext *ctx) override {
        Sizes s;
        OP_REQUIRES_OK(ctx, CheckInputs(ctx, o_, false, &s));
        Tensor *y = nullptr, *h_last = nullptr, *checkpoint = nullptr;
        OP_REQUIRES_OK(ctx, ctx->allocate_output(0, SeqShape(s, o_.bld), &y));
        OP_REQUIRES_OK(ctx, ctx->allocate_output(1, o_.return_last_state ? StateShape(s) : TensorShape({0}), &h_last));
        const selscan_problem p =
            BuildProblem(ctx, o_, s, DtypeOf<T>::value, y, o_.return_last_state ? h_last : nullptr);
        // The checkpoint: the state entering every 64 steps, an output so that the backward can read it
        // instead of recomputing it (float32, the device's size and layout; empty when not asked for,
        // for an empty problem, or where the device's backward would not read one).
        size_t ck_bytes = 0;
        if (!s.Empty()) OP_REQUIRES_OK(ctx, Ops::CheckpointBytes(p, o_.save_checkpoint, s, &ck_bytes));
        OP_REQUIRES_OK(
            ctx, ctx->allocate_output(2, TensorShape({static_cast<int64_t>(ck_bytes / sizeof(float))}), &checkpoint));
        if (s.Empty()) { // nothing to scan: y is empty, h_last is h0 (or 0) (the offsets' values were checked)
            if (o_.return_last_state && h_last->TotalBytes() > 0) {
                if (o_.has_h0) Ops::Copy(ctx, h_last->data(), ctx->input(bind::kScanH0).data(), h_last->TotalBytes());
                else Ops::Zero(ctx, h_last->data(), h_last->TotalBytes());
            }
            return;
        }
        OP_REQUIRES_OK(ctx, Ops::Forward(ctx, p, s, ck_bytes ? checkpoint->flat<float>().data() : nullptr, ck_bytes));
    }

  private:
    Options o_;
};

template <typename Ops, typename T> class SelscanBackwardOp : public tensorflow::OpKernel {
  public:
    explicit SelscanBackwardOp(OpKernelConstruction *c) : OpKernel(c) { OP_REQUIRES_OK(c, ReadOptions(c, true, &o_)); }

    void Compute(OpKernelContext *ctx) override {
        Sizes s;
        OP_REQUIRES_OK(ctx, CheckInputs(ctx, o_, true, &s));
        Tensor *outs[kNumGradOutputs] = {};
        OP_REQUIRES_OK(ctx, AllocateGradOutputs(ctx, o_, outs));
        if (s.Empty()) { // all gradients 0, except dh0 = dh_last (the state passes through)
            for (Tensor *t : outs)
                if (t->TotalBytes() > 0) Ops::Zero(ctx, t->data(), t->TotalBytes());
            if (o_.has_h0 && o_.has_dh_last && outs[kDh0]->TotalBytes() > 0)
                Ops::Copy(ctx, outs[kDh0]->data(), ctx->input(bind::kScanDhLast).data(), outs[kDh0]->TotalBytes());
            return;
        }
        const selscan_problem p = BuildProblem(ctx, o_, s, DtypeOf<T>::value, nullptr, nullptr);
        const selscan_grads g = BuildGrads(ctx, o_, s, outs);
        OP_REQUIRES_OK(ctx, Ops::Backward(ctx, p, g, s, ctx->input(bind::kScanCheckpoint)));
    }

  private:
    Options o_;
};

// ---- >>step-kernel: SelscanStep (selective_state_update), written once for both devices -------
// (state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices) -> (out, new_state): one decode token.
// TensorFlow tensors are immutable, so the state is not updated in place: new_state is state's
// buffer when TensorFlow can hand it over (no other user), else a copy, then updated by selscan's
// step. state_batch_indices is a host input (checked here; the GPU side copies it to the device).
// Ops (as above) supplies, besides Copy:
//   static absl::Status Step(OpKernelContext*, const selscan_step_problem&, const Sizes&);

struct StepOptions {
    bool softplus = false, has_d = false, has_z = false, has_bias = false, has_index = false;
};

inline absl::Status ReadStepOptions(OpKernelConstruction *c, StepOptions *o) {
    TF_RETURN_IF_ERROR(c->GetAttr("dt_softplus", &o->softplus));
    TF_RETURN_IF_ERROR(c->GetAttr("has_d", &o->has_d));
    TF_RETURN_IF_ERROR(c->GetAttr("has_z", &o->has_z));
    TF_RETURN_IF_ERROR(c->GetAttr("has_dt_bias", &o->has_bias));
    return c->GetAttr("has_state_batch_indices", &o->has_index);
}

// The step's checks (as CheckInputs; the indices' values too, whatever the sizes). s: batch, dim, N,
// G, rows = n_cache (state's first dim), L = 1.
absl::Status CheckStepInputs(OpKernelContext *ctx, const StepOptions &o, Sizes *s);

template <typename Ops, typename T> class SelscanStepOp : public tensorflow::OpKernel {
  public:
    explicit SelscanStepOp(OpKernelConstruction *c) : OpKernel(c) { OP_REQUIRES_OK(c, ReadStepOptions(c, &o_)); }

    void Compute(OpKernelContext *ctx) override {
        Sizes s;
        OP_REQUIRES_OK(ctx,
                       CheckStepInputs(ctx, o_, &s)); // (the indices: a host input, checked before anything is written)
        const Tensor &state = ctx->input(bind::kStepState);
        Tensor *out = nullptr, *new_state = nullptr;
        OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ctx->input(bind::kStepX).shape(), &out));
        OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({bind::kStepState}, 1, state.shape(), &new_state));
        if (new_state->data() != state.data() && state.TotalBytes() > 0)
            Ops::Copy(ctx, new_state->data(), state.data(), state.TotalBytes());
        if (s.StepEmpty()) { // no token, or no cache row (every row padding): out 0, the state passes through
            if (out->TotalBytes() > 0) Ops::Zero(ctx, out->data(), out->TotalBytes());
            return;
        }
        auto in = [&](bool present, int i) { return present ? DataOf(ctx->input(i)) : nullptr; };
        StepData d;
        d.x = in(true, bind::kStepX);
        d.dt = in(true, bind::kStepDt);
        d.A = in(true, bind::kStepA);
        d.B = in(true, bind::kStepB);
        d.C = in(true, bind::kStepC);
        d.D = in(o_.has_d, bind::kStepD);
        d.z = in(o_.has_z, bind::kStepZ);
        d.dt_bias = in(o_.has_bias, bind::kStepDtBias);
        d.state_index = o_.has_index ? ctx->input(bind::kStepIndex).flat<int32_t>().data() : nullptr;
        d.state = OutDataOf(*new_state);
        d.out = OutDataOf(*out);
        OP_REQUIRES_OK(ctx, Ops::Step(ctx, StepProblem(d, s, DtypeOf<T>::value, o_.softplus), s));
    }

  private:
    StepOptions o_;
};

// Registers the three ops' kernels on DEVICE (DEVICE_CPU / DEVICE_GPU) with Ops, for every dtype T.
#define SELSCAN_TF_REGISTER_KERNELS_T(DEVICE, Ops, T)                                                               \
    REGISTER_KERNEL_BUILDER(Name("SelscanForward").Device(DEVICE).TypeConstraint<T>("T").HostMemory("cu_seqlens"),  \
                            ::selscan_tf::SelscanForwardOp<Ops, T>);                                                \
    REGISTER_KERNEL_BUILDER(Name("SelscanBackward").Device(DEVICE).TypeConstraint<T>("T").HostMemory("cu_seqlens"), \
                            ::selscan_tf::SelscanBackwardOp<Ops, T>);                                               \
    REGISTER_KERNEL_BUILDER(                                                                                        \
        Name("SelscanStep").Device(DEVICE).TypeConstraint<T>("T").HostMemory("state_batch_indices"),                \
        ::selscan_tf::SelscanStepOp<Ops, T>)
#define SELSCAN_TF_REGISTER_KERNELS(DEVICE, Ops)             \
    SELSCAN_TF_REGISTER_KERNELS_T(DEVICE, Ops, float);       \
    SELSCAN_TF_REGISTER_KERNELS_T(DEVICE, Ops, Eigen::half); \
    SELSCAN_TF_REGISTER_KERNELS_T(DEVICE, Ops, tensorflow::bfloat16)

} // namespace selscan_tf

#endif // SELSCAN_TF_COMMON_H_
