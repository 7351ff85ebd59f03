// selscan_tf.cc - TensorFlow custom op around selscan (the selective scan of Mamba, S6).
//
// Ops:
//   SelscanForward  (u, delta, a, b, c, d, z, delta_bias, h0) -> (y, h_last)
//   SelscanBackward (u, delta, a, b, c, d, z, delta_bias, h0, dy, dh_last)
//                   -> (du, ddelta, da, db, dc, dd, dz, ddelta_bias, dh0)
// Optional operands are always wired (an empty tensor when absent); the has_* attrs say which are
// present. Layouts and shapes: see selscan_tf_common.h and README.md.
//
// This translation unit holds selscan's implementation (SELSCAN_STATIC: private to this library),
// the op registrations with their shape functions, and the CPU kernels, which run selscan's
// partitioned CPU entry points (one part per thread) on TensorFlow's CPU thread pool. selscan
// gives bitwise the same result for any number of parts, so results do not depend on the
// machine's thread count.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/platform/threadpool.h"

// selscan's implementation, private to this library (the step API is not used by the op).
#define SELSCAN_STATIC
#define SELSCAN_IMPLEMENTATION
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "selscan.h"
#pragma GCC diagnostic pop
#include "selscan_tf_common.h"

namespace selscan_tf {

absl::Status FromSelscan(selscan_status st, const char* where, const Sizes& s, const selscan_diag* diag) {
  if (st == SELSCAN_OK) return absl::OkStatus();
  std::string msg =
      absl::StrCat(where, ": ", selscan_status_string(st), " [", selscan_status_name(st), "] (", s.ToString(), ")");
  if (diag && diag->operand)
    absl::StrAppend(&msg, ": operand ", diag->operand, diag->rule ? absl::StrCat(", ", diag->rule) : "");
  if (st == SELSCAN_ERR_CUDA) return absl::InternalError(msg);
  return absl::InvalidArgumentError(msg);
}

namespace {

using tensorflow::OpKernel;
using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

// ------------------------------------------------------------------------------------------------
// Shape inference (unknown ranks and dimensions are fine: Merge keeps what is known).

struct InferredDims {
  DimensionHandle batch, dim, L, N, G;
  ShapeHandle seq, bc;  // shapes of u-like and B-like tensors
  bool bld = true, has_d = false, has_z = false, has_bias = false, has_h0 = false;
};

absl::Status InferDims(InferenceContext* c, bool backward, InferredDims* d) {
  std::string layout;
  bool has_dh_last = false;
  TF_RETURN_IF_ERROR(c->GetAttr("layout", &layout));
  TF_RETURN_IF_ERROR(c->GetAttr("has_d", &d->has_d));
  TF_RETURN_IF_ERROR(c->GetAttr("has_z", &d->has_z));
  TF_RETURN_IF_ERROR(c->GetAttr("has_delta_bias", &d->has_bias));
  TF_RETURN_IF_ERROR(c->GetAttr("has_h0", &d->has_h0));
  if (backward) TF_RETURN_IF_ERROR(c->GetAttr("has_dh_last", &has_dh_last));
  d->bld = layout != "BDL";
  const int ld = d->bld ? 1 : 2, dd = d->bld ? 2 : 1;

  ShapeHandle u, t;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(kU), 3, &u));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(kDelta), 3, &t));
  TF_RETURN_IF_ERROR(c->Merge(u, t, &u));
  if (d->has_z) {
    TF_RETURN_IF_ERROR(c->WithRank(c->input(kZ), 3, &t));
    TF_RETURN_IF_ERROR(c->Merge(u, t, &u));
  }
  if (backward) {
    TF_RETURN_IF_ERROR(c->WithRank(c->input(kDy), 3, &t));
    TF_RETURN_IF_ERROR(c->Merge(u, t, &u));
  }
  d->batch = c->Dim(u, 0);
  d->L = c->Dim(u, ld);
  d->dim = c->Dim(u, dd);

  ShapeHandle a;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(kA), 2, &a));
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(a, 0), d->dim, &d->dim));
  d->N = c->Dim(a, 1);

  ShapeHandle b, cc;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(kB), 4, &b));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(kC), 4, &cc));
  TF_RETURN_IF_ERROR(c->Merge(b, cc, &b));
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(b, 0), d->batch, &d->batch));
  if (d->bld) {  // (batch, L, G, N)
    TF_RETURN_IF_ERROR(c->Merge(c->Dim(b, 1), d->L, &d->L));
    d->G = c->Dim(b, 2);
    TF_RETURN_IF_ERROR(c->Merge(c->Dim(b, 3), d->N, &d->N));
  } else {  // (batch, G, N, L)
    d->G = c->Dim(b, 1);
    TF_RETURN_IF_ERROR(c->Merge(c->Dim(b, 2), d->N, &d->N));
    TF_RETURN_IF_ERROR(c->Merge(c->Dim(b, 3), d->L, &d->L));
  }
  if (d->has_d) {
    TF_RETURN_IF_ERROR(c->WithRank(c->input(kD), 1, &t));
    TF_RETURN_IF_ERROR(c->Merge(c->Dim(t, 0), d->dim, &d->dim));
  }
  if (d->has_bias) {
    TF_RETURN_IF_ERROR(c->WithRank(c->input(kDeltaBias), 1, &t));
    TF_RETURN_IF_ERROR(c->Merge(c->Dim(t, 0), d->dim, &d->dim));
  }
  auto state = [&](int i) -> absl::Status {
    ShapeHandle h;
    TF_RETURN_IF_ERROR(c->WithRank(c->input(i), 3, &h));
    TF_RETURN_IF_ERROR(c->Merge(c->Dim(h, 0), d->batch, &d->batch));
    TF_RETURN_IF_ERROR(c->Merge(c->Dim(h, 1), d->dim, &d->dim));
    TF_RETURN_IF_ERROR(c->Merge(c->Dim(h, 2), d->N, &d->N));
    return absl::OkStatus();
  };
  if (d->has_h0) TF_RETURN_IF_ERROR(state(kH0));
  if (has_dh_last) TF_RETURN_IF_ERROR(state(kDhLast));
  if (c->ValueKnown(d->dim) && c->ValueKnown(d->G) && c->Value(d->dim) > 0 &&
      (c->Value(d->G) == 0 || c->Value(d->dim) % c->Value(d->G) != 0))
    return Invalid("selscan: ", selscan_status_string(SELSCAN_ERR_SHAPE), " [",
                                               selscan_status_name(SELSCAN_ERR_SHAPE), "]: dim ", c->Value(d->dim),
                                               " is not a multiple of n_groups ", c->Value(d->G));
  d->seq = d->bld ? c->MakeShape({d->batch, d->L, d->dim}) : c->MakeShape({d->batch, d->dim, d->L});
  d->bc = d->bld ? c->MakeShape({d->batch, d->L, d->G, d->N}) : c->MakeShape({d->batch, d->G, d->N, d->L});
  return absl::OkStatus();
}

absl::Status ForwardShape(InferenceContext* c) {
  InferredDims d;
  bool ret = false;
  TF_RETURN_IF_ERROR(InferDims(c, false, &d));
  TF_RETURN_IF_ERROR(c->GetAttr("return_last_state", &ret));
  c->set_output(0, d.seq);
  c->set_output(1, ret ? c->MakeShape({d.batch, d.dim, d.N}) : c->Vector(0));
  bool ck = false;
  TF_RETURN_IF_ERROR(c->GetAttr("save_checkpoint", &ck));
  // Filled by either kernel (its size is selscan's business, and differs between the two).
  c->set_output(2, ck ? c->Vector(InferenceContext::kUnknownDim) : c->Vector(0));
  return absl::OkStatus();
}

absl::Status BackwardShape(InferenceContext* c) {
  InferredDims d;
  TF_RETURN_IF_ERROR(InferDims(c, true, &d));
  c->set_output(kDu, d.seq);
  c->set_output(kDdelta, d.seq);
  c->set_output(kDa, c->MakeShape({d.dim, d.N}));
  c->set_output(kDb, d.bc);
  c->set_output(kDc, d.bc);
  c->set_output(kDd, d.has_d ? c->Vector(d.dim) : c->Vector(0));
  c->set_output(kDz, d.has_z ? d.seq : c->Vector(0));
  c->set_output(kDdeltaBias, d.has_bias ? c->Vector(d.dim) : c->Vector(0));
  c->set_output(kDh0, d.has_h0 ? c->MakeShape({d.batch, d.dim, d.N}) : c->Vector(0));
  return absl::OkStatus();
}

}  // namespace
}  // namespace selscan_tf

REGISTER_OP("SelscanForward")
    .Input("u: T")
    .Input("delta: T")
    .Input("a: float")
    .Input("b: T")
    .Input("c: T")
    .Input("d: float")
    .Input("z: T")
    .Input("delta_bias: float")
    .Input("h0: float")
    .Output("y: T")
    .Output("h_last: float")
    .Output("checkpoint: float")
    .Attr("T: {float, half, bfloat16}")
    .Attr("delta_softplus: bool = false")
    .Attr("has_d: bool = false")
    .Attr("has_z: bool = false")
    .Attr("has_delta_bias: bool = false")
    .Attr("has_h0: bool = false")
    .Attr("return_last_state: bool = false")
    .Attr("save_checkpoint: bool = false")
    .Attr("layout: {'BLD', 'BDL'} = 'BLD'")
    .SetShapeFn(selscan_tf::ForwardShape);

REGISTER_OP("SelscanBackward")
    .Input("u: T")
    .Input("delta: T")
    .Input("a: float")
    .Input("b: T")
    .Input("c: T")
    .Input("d: float")
    .Input("z: T")
    .Input("delta_bias: float")
    .Input("h0: float")
    .Input("dy: T")
    .Input("dh_last: float")
    .Input("checkpoint: float")
    .Output("du: T")
    .Output("ddelta: T")
    .Output("da: float")
    .Output("db: T")
    .Output("dc: T")
    .Output("dd: float")
    .Output("dz: T")
    .Output("ddelta_bias: float")
    .Output("dh0: float")
    .Attr("T: {float, half, bfloat16}")
    .Attr("delta_softplus: bool = false")
    .Attr("has_d: bool = false")
    .Attr("has_z: bool = false")
    .Attr("has_delta_bias: bool = false")
    .Attr("has_h0: bool = false")
    .Attr("has_dh_last: bool = false")
    .Attr("layout: {'BLD', 'BDL'} = 'BLD'")
    .SetShapeFn(selscan_tf::BackwardShape);

namespace selscan_tf {
namespace {

using tensorflow::DEVICE_CPU;

// Number of parts a call is split into: one per thread of TF's CPU pool. selscan's partitioned
// entry points give bitwise the same result for every part count, so this never changes a bit.
int64_t NumParts(OpKernelContext* ctx) {
  return std::max(1, ctx->device()->tensorflow_cpu_worker_threads()->num_threads);
}

// Runs fn(part) for part in [0, n_parts) on TF's CPU thread pool (inline when n_parts is 1).
template <typename Fn>
void ForEachPart(OpKernelContext* ctx, int64_t n_parts, const Fn& fn) {
  if (n_parts <= 1) {
    fn(0);
    return;
  }
  auto* workers = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  using Params = tensorflow::thread::ThreadPool::SchedulingParams;
  workers->ParallelFor(n_parts, Params::Fixed(1), [&](int64_t p0, int64_t p1) {
    for (int64_t part = p0; part < p1; part++) fn(part);
  });
}

// The first failing part's status, with the operand / rule selscan named in that part's diag.
absl::Status FirstError(const std::vector<selscan_status>& sts, const std::vector<selscan_diag>& diags,
                        const char* where, const Sizes& s) {
  for (size_t i = 0; i < sts.size(); i++)
    if (sts[i] != SELSCAN_OK) return FromSelscan(sts[i], where, s, &diags[i]);
  return absl::OkStatus();
}

// Each part gets its own copy of the problem with its own selscan_diag (selscan writes the diag of
// a failing call; parts run on different threads).
struct PartState {
  explicit PartState(int64_t n) : sts(static_cast<size_t>(n), SELSCAN_OK), diags(static_cast<size_t>(n)) {}
  selscan_problem Problem(const selscan_problem& p, int64_t part) {
    selscan_problem q = p;
    diags[static_cast<size_t>(part)] = selscan_diag{nullptr, nullptr};
    q.diag = &diags[static_cast<size_t>(part)];
    return q;
  }
  std::vector<selscan_status> sts;
  std::vector<selscan_diag> diags;
};

template <typename T>
class SelscanForwardCpu : public OpKernel {
 public:
  explicit SelscanForwardCpu(OpKernelConstruction* c) : OpKernel(c) { OP_REQUIRES_OK(c, ReadOptions(c, false, &o_)); }

  void Compute(OpKernelContext* ctx) override {
    Sizes s;
    OP_REQUIRES_OK(ctx, CheckInputs(ctx, o_, false, &s));
    Tensor *y = nullptr, *h_last = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, SeqShape(s, o_.bld), &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, o_.return_last_state ? StateShape(s) : TensorShape({0}), &h_last));
    const selscan_problem p =
        BuildProblem(ctx, o_, s, DtypeOf<T>::value, y, o_.return_last_state ? h_last : nullptr);
    // The checkpoint: the state entering every 64 steps, which the backward then reads instead of
    // recomputing it (selscan_checkpoint_size bytes of floats; empty when not asked for).
    selscan_diag diag = {nullptr, nullptr};
    size_t ck_bytes = 0;
    if (o_.save_checkpoint && !s.Empty()) {
      selscan_problem q = p;
      q.diag = &diag;
      OP_REQUIRES_OK(ctx, FromSelscan(selscan_checkpoint_size(&q, &ck_bytes), "selscan_checkpoint_size", s, &diag));
    }
    Tensor* checkpoint = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({static_cast<int64_t>(ck_bytes / 4)}), &checkpoint));
    if (s.Empty()) {  // nothing to scan: y is empty, h_last is h0 (or 0)
      if (o_.return_last_state && h_last->TotalBytes() > 0) {
        if (o_.has_h0) std::memcpy(h_last->data(), ctx->input(kH0).data(), h_last->TotalBytes());
        else std::memset(h_last->data(), 0, h_last->TotalBytes());
      }
      return;
    }
    const int64_t n_parts = NumParts(ctx);
    size_t bytes = 0;
    {
      selscan_problem q = p;
      q.diag = &diag;
      OP_REQUIRES_OK(ctx, FromSelscan(selscan_workspace_size_parts(&q, nullptr, n_parts, &bytes),
                                      "selscan_forward_cpu", s, &diag));
    }
    Tensor tmp;
    void* ws = nullptr;
    OP_REQUIRES_OK(ctx, AllocateWorkspace(ctx, bytes, &tmp, &ws));
    PartState ps(n_parts);
    float* ck = ck_bytes ? checkpoint->flat<float>().data() : nullptr;
    ForEachPart(ctx, n_parts, [&](int64_t part) {
      const selscan_problem q = ps.Problem(p, part);
      ps.sts[static_cast<size_t>(part)] = ck ? selscan_forward_cpu_ckpt_part(&q, part, n_parts, ws, bytes, ck, ck_bytes)
                                             : selscan_forward_cpu_part(&q, part, n_parts, ws, bytes);
    });
    OP_REQUIRES_OK(ctx, FirstError(ps.sts, ps.diags, "selscan_forward_cpu", s));
  }

 private:
  Options o_;
};

template <typename T>
class SelscanBackwardCpu : public OpKernel {
 public:
  explicit SelscanBackwardCpu(OpKernelConstruction* c) : OpKernel(c) { OP_REQUIRES_OK(c, ReadOptions(c, true, &o_)); }

  void Compute(OpKernelContext* ctx) override {
    Sizes s;
    OP_REQUIRES_OK(ctx, CheckInputs(ctx, o_, true, &s));
    Tensor* outs[kNumGradOutputs] = {};
    OP_REQUIRES_OK(ctx, AllocateGradOutputs(ctx, o_, outs));
    if (s.Empty()) {  // all gradients 0, except dh0 = dh_last (the state passes through)
      for (Tensor* t : outs)
        if (t->TotalBytes() > 0) std::memset(t->data(), 0, t->TotalBytes());
      if (o_.has_h0 && o_.has_dh_last && outs[kDh0]->TotalBytes() > 0)
        std::memcpy(outs[kDh0]->data(), ctx->input(kDhLast).data(), outs[kDh0]->TotalBytes());
      return;
    }
    const selscan_problem p = BuildProblem(ctx, o_, s, DtypeOf<T>::value, nullptr, nullptr);
    const selscan_grads g = BuildGrads(ctx, o_, s, outs);
    const int64_t n_parts = NumParts(ctx);
    selscan_diag diag = {nullptr, nullptr};
    selscan_problem pd = p;
    pd.diag = &diag;
    size_t bytes = 0;
    OP_REQUIRES_OK(ctx, FromSelscan(selscan_workspace_size_parts(&pd, &g, n_parts, &bytes),
                                    "selscan_backward_cpu", s, &diag));
    Tensor tmp;
    void* ws = nullptr;
    OP_REQUIRES_OK(ctx, AllocateWorkspace(ctx, bytes, &tmp, &ws));
    // The forward's checkpoint, when a CPU forward kept one: a checkpoint of another size (none,
    // or a GPU forward's, whose layout differs) is not read; the backward then recomputes it.
    const Tensor& ck_in = ctx->input(kCheckpoint);
    size_t ck_bytes = 0;
    OP_REQUIRES_OK(ctx, FromSelscan(selscan_checkpoint_size(&pd, &ck_bytes), "selscan_checkpoint_size", s, &diag));
    const float* ck = static_cast<size_t>(ck_in.NumElements()) * 4 == ck_bytes && ck_bytes > 0
                          ? ck_in.flat<float>().data() : nullptr;
    PartState ps(n_parts);
    // Phase 1: the scans (per-part partial sums into the shared workspace) ...
    ForEachPart(ctx, n_parts, [&](int64_t part) {
      const selscan_problem q = ps.Problem(p, part);
      ps.sts[static_cast<size_t>(part)] =
          ck ? selscan_backward_cpu_ckpt_part(&q, &g, part, n_parts, ws, bytes, ck, ck_bytes)
             : selscan_backward_cpu_part(&q, &g, part, n_parts, ws, bytes);
    });
    OP_REQUIRES_OK(ctx, FirstError(ps.sts, ps.diags, "selscan_backward_cpu", s));
    // ... phase 2, once all parts are done: the fixed-order reductions (dA, dD, ddelta_bias, dB, dC).
    ForEachPart(ctx, n_parts, [&](int64_t part) {
      const selscan_problem q = ps.Problem(p, part);
      ps.sts[static_cast<size_t>(part)] = selscan_backward_cpu_reduce(&q, &g, part, n_parts, ws, bytes);
    });
    OP_REQUIRES_OK(ctx, FirstError(ps.sts, ps.diags, "selscan_backward_cpu", s));
  }

 private:
  Options o_;
};

#define SELSCAN_TF_REGISTER_CPU(T)                                                                     \
  REGISTER_KERNEL_BUILDER(Name("SelscanForward").Device(DEVICE_CPU).TypeConstraint<T>("T"),          \
                          SelscanForwardCpu<T>);                                                       \
  REGISTER_KERNEL_BUILDER(Name("SelscanBackward").Device(DEVICE_CPU).TypeConstraint<T>("T"),         \
                          SelscanBackwardCpu<T>);
SELSCAN_TF_REGISTER_CPU(float)
SELSCAN_TF_REGISTER_CPU(Eigen::half)
SELSCAN_TF_REGISTER_CPU(tensorflow::bfloat16)
#undef SELSCAN_TF_REGISTER_CPU

}  // namespace
}  // namespace selscan_tf
