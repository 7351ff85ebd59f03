// selscan_tf.cc - TensorFlow custom op around selscan (the selective scan of Mamba, S6).
//
// Ops (named like selscan_torch's selscan::fwd / bwd / step):
//   SelscanForward  (u, delta, a, b, c, d, z, delta_bias, h0, cu_seqlens) -> (y, h_last, checkpoint)
//   SelscanBackward (u, delta, a, b, c, d, z, delta_bias, h0, cu_seqlens, dy, dh_last, checkpoint)
//                   -> (du, ddelta, da, db, dc, dd, dz, ddelta_bias, dh0)
//   SelscanStep     (state, x, dt, a, b, c, d, z, dt_bias, state_batch_indices) -> (out, new_state)
// Optional operands are always wired (an empty tensor when absent); the has_* attrs say which are
// present. Layouts and shapes: see selscan_tf_common.h and README.md.
//
// This translation unit holds selscan's implementation (SELSCAN_STATIC: private to this library),
// the op registrations with their shape functions, and the CPU side of the op kernels (CpuOps; the
// kernels themselves are selscan_tf_common.h's >>op-kernels), which runs selscan's partitioned CPU
// entry points (one part per thread) on TensorFlow's CPU thread pool. selscan gives bitwise the
// same result for any number of parts, so results do not depend on the machine's thread count.
#include <algorithm>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/platform/threadpool.h"

// selscan's implementation, private to this library.
#define SELSCAN_STATIC
#define SELSCAN_IMPLEMENTATION
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "selscan.h"
#pragma GCC diagnostic pop
#include "selscan_tf_common.h"

namespace selscan_tf {

absl::Status FromSelscan(selscan_status st, const char* where, const Sizes& s, const selscan_diag* diag,
                         const char* cuda_text, const bind::Names& names) {
  const bind::Error e = bind::ErrorOf(st, where, diag ? bind::DiagText(*diag, names) : "", s.ToString(), cuda_text);
  switch (e.kind) {
    case bind::ErrorKind::kNone: return absl::OkStatus();
    case bind::ErrorKind::kDevice: return absl::InternalError(e.message);
    default: return absl::InvalidArgumentError(e.message);
  }
}

absl::Status HostRuleStatus(selscan_status st, const char* where, const char* arg, const std::string& rule) {
  if (st == SELSCAN_OK) return absl::OkStatus();
  return Invalid(bind::ErrorOf(st, where, std::string(" (argument '") + arg + "': " + rule + ")").message);
}

namespace {

using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

// ------------------------------------------------------------------------------------------------
// Shape inference (unknown ranks and dimensions are fine: Merge keeps what is known).

struct InferredDims {
  DimensionHandle batch, dim, L, N, G;
  ShapeHandle seq, bc;  // shapes of u-like and B-like tensors
  DimensionHandle rows;  // of h0 / h_last / dh0 / dh_last: batch, or n_seqs with cu_seqlens
  bool bld = true, has_d = false, has_z = false, has_bias = false, has_h0 = false, has_cu = false;
};

// The kernels' checks (CheckInputs) as far as the shapes are known at trace time, in the same
// order and with the same messages naming the argument: TensorFlow's own Merge / WithRank errors
// would name only node inputs and shapes.
absl::Status InferDims(InferenceContext* c, bool backward, InferredDims* d) {
  std::string layout;
  bool has_dh_last = false;
  TF_RETURN_IF_ERROR(c->GetAttr("layout", &layout));
  TF_RETURN_IF_ERROR(c->GetAttr("has_d", &d->has_d));
  TF_RETURN_IF_ERROR(c->GetAttr("has_z", &d->has_z));
  TF_RETURN_IF_ERROR(c->GetAttr("has_delta_bias", &d->has_bias));
  TF_RETURN_IF_ERROR(c->GetAttr("has_h0", &d->has_h0));
  TF_RETURN_IF_ERROR(c->GetAttr("has_cu_seqlens", &d->has_cu));
  if (backward) TF_RETURN_IF_ERROR(c->GetAttr("has_dh_last", &has_dh_last));
  d->bld = layout != "BDL";
  const int ld = d->bld ? 1 : 2, dd = d->bld ? 2 : 1;
  const char* lay = d->bld ? "(batch, L, dim) for layout BLD" : "(batch, dim, L) for layout BDL";
  const char* blay = d->bld ? "(batch, L, n_groups, N) for layout BLD" : "(batch, n_groups, N, L) for layout BDL";
  auto str = [&](ShapeHandle x) { return c->DebugString(x); };
  auto with_rank = [&](int i, int r, const char* name, const char* what, ShapeHandle* out) -> absl::Status {
    if (c->WithRank(c->input(i), r, out).ok()) return absl::OkStatus();
    return Invalid("selscan: ", name, " must have rank ", r, " ", what, ", got shape ", str(c->input(i)));
  };
  // Merges the listed axes of operand x into the known dims; on a conflict, "name must have shape want".
  auto merge = [&](ShapeHandle x, std::initializer_list<std::pair<int, DimensionHandle*>> axes, const char* name,
                   const std::function<std::string()>& want) -> absl::Status {
    for (const auto& ax : axes) {
      DimensionHandle m;
      if (!c->Merge(c->Dim(x, ax.first), *ax.second, &m).ok())
        return Invalid("selscan: ", name, " must have shape ", want(), ", got ", str(x));
    }
    for (const auto& ax : axes) TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, ax.first), *ax.second, ax.second));
    return absl::OkStatus();
  };
  auto dstr = [&](DimensionHandle x) { return c->ValueKnown(x) ? std::to_string(c->Value(x)) : std::string("?"); };

  auto known_nonzero = [&](DimensionHandle x) { return c->ValueKnown(x) && c->Value(x) > 0; };
  auto absent = [&](bool present, int i, const char* name, const char* attr) -> absl::Status {
    ShapeHandle x = c->input(i);
    if (present || !c->RankKnown(x)) return absl::OkStatus();
    for (int k = 0; k < c->Rank(x); k++)
      if (!known_nonzero(c->Dim(x, k))) return absl::OkStatus();  // possibly empty: the kernel decides
    return AbsentRule(name, attr, str(x));
  };
  TF_RETURN_IF_ERROR(absent(d->has_d, kD, "D", "has_d"));
  TF_RETURN_IF_ERROR(absent(d->has_z, kZ, "z", "has_z"));
  TF_RETURN_IF_ERROR(absent(d->has_bias, kDeltaBias, "delta_bias", "has_delta_bias"));
  TF_RETURN_IF_ERROR(absent(d->has_h0, kH0, "h0", "has_h0"));
  TF_RETURN_IF_ERROR(absent(d->has_cu, kCuSeqlens, "cu_seqlens", "has_cu_seqlens"));
  if (backward) {
    TF_RETURN_IF_ERROR(absent(has_dh_last, kDhLast, "dh_last", "has_dh_last"));
    if (c->RankKnown(c->input(kCheckpoint)) && c->Rank(c->input(kCheckpoint)) != 1)
      return CheckpointRankRule(str(c->input(kCheckpoint)));
  }

  ShapeHandle u, t;
  TF_RETURN_IF_ERROR(with_rank(kU, 3, "u", lay, &u));
  auto same_as_u = [&](int i, const char* name) -> absl::Status {
    TF_RETURN_IF_ERROR(with_rank(i, 3, name, lay, &t));
    if (!c->Merge(u, t, &u).ok()) return Invalid("selscan: ", name, " must have u's shape ", str(u), ", got ", str(t));
    return absl::OkStatus();
  };
  TF_RETURN_IF_ERROR(same_as_u(kDelta, "delta"));
  if (d->has_z) TF_RETURN_IF_ERROR(same_as_u(kZ, "z"));
  if (backward) TF_RETURN_IF_ERROR(same_as_u(kDy, "dy"));
  d->batch = c->Dim(u, 0);
  d->L = c->Dim(u, ld);
  d->dim = c->Dim(u, dd);
  d->rows = d->batch;
  if (d->has_cu) {  // PackedShapeRule where the rank and sizes are known
    ShapeHandle cu = c->input(kCuSeqlens);
    if (c->RankKnown(cu)) {
      const bool n_known = c->Rank(cu) == 1 && c->ValueKnown(c->Dim(cu, 0));
      if (c->Rank(cu) != 1 || n_known)
        TF_RETURN_IF_ERROR(PackedShapeRule(c->Rank(cu), n_known ? c->Value(c->Dim(cu, 0)) : 0,
                                           c->ValueKnown(d->batch) ? c->Value(d->batch) : 1, str(cu)));
      TF_RETURN_IF_ERROR(c->Subtract(c->Dim(cu, 0), 1, &d->rows));
    } else {
      d->rows = c->UnknownDim();
    }
  }

  ShapeHandle a;
  TF_RETURN_IF_ERROR(with_rank(kA, 2, "A", "(dim, N)", &a));
  TF_RETURN_IF_ERROR(merge(a, {{0, &d->dim}}, "A", [&] { return "(dim, N) with dim=" + dstr(d->dim); }));
  d->N = c->Dim(a, 1);

  ShapeHandle b, cc;
  TF_RETURN_IF_ERROR(with_rank(kB, 4, "B", blay, &b));
  d->G = c->Dim(b, d->bld ? 2 : 1);
  auto bc_want = [&] {
    return std::string(blay) + " = " +
           (d->bld ? "[" + dstr(d->batch) + "," + dstr(d->L) + "," + dstr(d->G) + "," + dstr(d->N) + "]"
                   : "[" + dstr(d->batch) + "," + dstr(d->G) + "," + dstr(d->N) + "," + dstr(d->L) + "]");
  };
  if (d->bld)  // (batch, L, G, N)
    TF_RETURN_IF_ERROR(merge(b, {{0, &d->batch}, {1, &d->L}, {3, &d->N}}, "B", bc_want));
  else  // (batch, G, N, L)
    TF_RETURN_IF_ERROR(merge(b, {{0, &d->batch}, {2, &d->N}, {3, &d->L}}, "B", bc_want));
  TF_RETURN_IF_ERROR(with_rank(kC, 4, "C", blay, &cc));
  if (!c->Merge(b, cc, &b).ok()) return Invalid("selscan: C must have B's shape ", str(b), ", got ", str(cc));
  d->G = c->Dim(b, d->bld ? 2 : 1);
  // The kernels' rules (selscan_tf_common.h >>rules) where the sizes are known.
  if (c->ValueKnown(d->N) && c->Value(d->N) == 0 && known_nonzero(d->batch) && known_nonzero(d->dim) &&
      known_nonzero(d->L))
    return StateRule(0, false, str(a));
  if (c->ValueKnown(d->G) && (c->Value(d->G) < 1 || (c->ValueKnown(d->dim) && c->Value(d->dim) % c->Value(d->G) != 0)))
    return GroupRule(c->ValueKnown(d->dim) ? c->Value(d->dim) : -1, c->Value(d->G));
  auto vec_dim = [&](bool present, int i, const char* name) -> absl::Status {
    if (!present) return absl::OkStatus();
    TF_RETURN_IF_ERROR(with_rank(i, 1, name, "(dim,)", &t));
    return merge(t, {{0, &d->dim}}, name, [&] { return "(dim,) = (" + dstr(d->dim) + ")"; });
  };
  TF_RETURN_IF_ERROR(vec_dim(d->has_d, kD, "D"));
  TF_RETURN_IF_ERROR(vec_dim(d->has_bias, kDeltaBias, "delta_bias"));
  auto state = [&](bool present, int i, const char* name) -> absl::Status {
    if (!present) return absl::OkStatus();
    const char* want = d->has_cu ? "(n_seqs, dim, N)" : "(batch, dim, N)";
    TF_RETURN_IF_ERROR(with_rank(i, 3, name, want, &t));
    return merge(t, {{0, &d->rows}, {1, &d->dim}, {2, &d->N}}, name, [&] {
      return std::string(want) + " = (" + dstr(d->rows) + ", " + dstr(d->dim) + ", " + dstr(d->N) + ")";
    });
  };
  if (!d->has_cu) d->rows = d->batch;  // the same dim: what h0 / dh_last tell of it is merged back
  TF_RETURN_IF_ERROR(state(d->has_h0, kH0, "h0"));
  if (!d->has_cu) d->batch = d->rows;
  if (has_dh_last) TF_RETURN_IF_ERROR(state(has_dh_last, kDhLast, "dh_last"));
  if (!d->has_cu) d->batch = d->rows;
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
  c->set_output(1, ret ? c->MakeShape({d.rows, d.dim, d.N}) : c->Vector(0));
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
  c->set_output(kDh0, d.has_h0 ? c->MakeShape({d.rows, d.dim, d.N}) : c->Vector(0));
  return absl::OkStatus();
}

// The step's outputs: out like x, new_state like state (the kernel checks the rest, naming the
// argument).
absl::Status StepShape(InferenceContext* c) {
  c->set_output(0, c->input(kStX));
  c->set_output(1, c->input(kStState));
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
    .Input("cu_seqlens: int64")
    .Output("y: T")
    .Output("h_last: float")
    .Output("checkpoint: float")
    .Attr("T: {float, half, bfloat16}")
    .Attr("delta_softplus: bool = false")
    .Attr("has_d: bool = false")
    .Attr("has_z: bool = false")
    .Attr("has_delta_bias: bool = false")
    .Attr("has_h0: bool = false")
    .Attr("has_cu_seqlens: bool = false")
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
    .Input("cu_seqlens: int64")
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
    .Attr("has_cu_seqlens: bool = false")
    .Attr("has_dh_last: bool = false")
    .Attr("layout: {'BLD', 'BDL'} = 'BLD'")
    .SetShapeFn(selscan_tf::BackwardShape);

REGISTER_OP("SelscanStep")
    .Input("state: float")
    .Input("x: T")
    .Input("dt: T")
    .Input("a: float")
    .Input("b: T")
    .Input("c: T")
    .Input("d: float")
    .Input("z: T")
    .Input("dt_bias: float")
    .Input("state_batch_indices: int32")
    .Output("out: T")
    .Output("new_state: float")
    .Attr("T: {float, half, bfloat16}")
    .Attr("dt_softplus: bool = false")
    .Attr("has_d: bool = false")
    .Attr("has_z: bool = false")
    .Attr("has_dt_bias: bool = false")
    .Attr("has_state_batch_indices: bool = false")
    .SetShapeFn(selscan_tf::StepShape);

namespace selscan_tf {
namespace {

using tensorflow::DEVICE_CPU;

// Number of parts a call is split into: one per thread of TF's CPU pool. selscan's partitioned
// entry points give bitwise the same result for every part count, so this never changes a bit.
int64_t NumParts(OpKernelContext* ctx) {
  return std::max(1, ctx->device()->tensorflow_cpu_worker_threads()->num_threads);
}

// Runs fn(&q, part) for part in [0, n_parts) on TF's CPU thread pool (bind::RunParts: each part on
// its own copy q of p with its own diag; the first failing part's error).
template <typename P, typename Fn>
absl::Status RunParts(OpKernelContext* ctx, const P& p, int64_t n_parts, const char* where, const Sizes& s,
                      const Fn& fn, const bind::Names& names = bind::Names()) {
  auto pool = [ctx](int64_t n, const auto& body) {
    using Params = tensorflow::thread::ThreadPool::SchedulingParams;
    ctx->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(
        n, Params::Fixed(1), [&](int64_t p0, int64_t p1) {
          for (int64_t part = p0; part < p1; part++) body(part);
        });
  };
  return FromSelscan(bind::RunParts(p, n_parts, pool, fn), where, s, names);
}

// The CPU side of the op kernels (selscan_tf_common.h >>op-kernels): selscan's partitioned CPU entry
// points on TF's CPU pool, the workspace from allocate_temp (host memory).
struct CpuOps {
  static void Copy(OpKernelContext*, void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
  static void Zero(OpKernelContext*, void* dst, size_t bytes) { std::memset(dst, 0, bytes); }

  // selscan_checkpoint_size bytes of floats, or none where the CPU backward would not read one
  // (bind::CpuCheckpointBytes).
  static absl::Status CheckpointBytes(const selscan_problem& p, bool save, const Sizes& s, size_t* bytes) {
    return FromSelscan(bind::Call(p, [&](const selscan_problem* q) { return bind::CpuCheckpointBytes(q, save, bytes); }),
                       "selscan_checkpoint_size", s);
  }

  static absl::Status Forward(OpKernelContext* ctx, const selscan_problem& p, const Sizes& s, float* ck,
                              size_t ck_bytes) {
    const int64_t n_parts = NumParts(ctx);
    size_t bytes = 0;
    TF_RETURN_IF_ERROR(FromSelscan(bind::Call(p, [&](const selscan_problem* q) {
                                     return selscan_workspace_size_parts(q, nullptr, n_parts, &bytes);
                                   }),
                                   "selscan_forward_cpu", s));
    Tensor tmp;
    void* ws = nullptr;
    TF_RETURN_IF_ERROR(AllocateWorkspace(ctx, bytes, &tmp, &ws));
    return RunParts(ctx, p, n_parts, "selscan_forward_cpu", s, [&](const selscan_problem* q, int64_t part) {
      return ck ? selscan_forward_cpu_ckpt_part(q, part, n_parts, ws, bytes, ck, ck_bytes)
                : selscan_forward_cpu_part(q, part, n_parts, ws, bytes);
    });
  }

  static absl::Status Backward(OpKernelContext* ctx, const selscan_problem& p, const selscan_grads& g,
                               const Sizes& s, const Tensor& ck_in) {
    const int64_t n_parts = NumParts(ctx);
    size_t bytes = 0;
    TF_RETURN_IF_ERROR(FromSelscan(bind::Call(p, [&](const selscan_problem* q) {
                                     return selscan_workspace_size_parts(q, &g, n_parts, &bytes);
                                   }),
                                   "selscan_backward_cpu", s));
    Tensor tmp;
    void* ws = nullptr;
    TF_RETURN_IF_ERROR(AllocateWorkspace(ctx, bytes, &tmp, &ws));
    // The forward's checkpoint, when a CPU forward kept one: a checkpoint of another size (none,
    // or a GPU forward's, whose layout differs) is not read; the backward then recomputes it.
    size_t ck_bytes = 0;
    TF_RETURN_IF_ERROR(FromSelscan(bind::Call(p, [&](const selscan_problem* q) {
                                     return bind::CpuCheckpointToRead(q, ck_in.NumElements(), &ck_bytes);
                                   }),
                                   "selscan_checkpoint_size", s));
    const float* ck = ck_bytes ? ck_in.flat<float>().data() : nullptr;
    // Phase 1: the scans (per-part partial sums into the shared workspace) ...
    TF_RETURN_IF_ERROR(RunParts(ctx, p, n_parts, "selscan_backward_cpu", s, [&](const selscan_problem* q, int64_t part) {
      return ck ? selscan_backward_cpu_ckpt_part(q, &g, part, n_parts, ws, bytes, ck, ck_bytes)
                : selscan_backward_cpu_part(q, &g, part, n_parts, ws, bytes);
    }));
    // ... phase 2, once all parts are done: the fixed-order reductions (dA, dD, ddelta_bias, dB, dC).
    return RunParts(ctx, p, n_parts, "selscan_backward_cpu", s, [&](const selscan_problem* q, int64_t part) {
      return selscan_backward_cpu_reduce(q, &g, part, n_parts, ws, bytes);
    });
  }

  // The decode step: blocks of 256 channels of a row (bind::StepParts), no workspace.
  static absl::Status Step(OpKernelContext* ctx, const selscan_step_problem& p, const Sizes& s) {
    const int64_t n = bind::StepParts(NumParts(ctx), s.batch, s.dim);
    return RunParts(
        ctx, p, n, "step (CPU)", s,
        [&](const selscan_step_problem* q, int64_t part) { return selscan_step_cpu_part(q, part, n); },
        bind::NamesOf(bind::kStepNames));
  }
};

SELSCAN_TF_REGISTER_KERNELS(DEVICE_CPU, CpuOps);

}  // namespace
}  // namespace selscan_tf
