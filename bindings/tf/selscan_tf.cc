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

absl::Status FromSelscan(selscan_status st, const char *where, const Sizes &s, const selscan_diag *diag,
                         const char *cuda_text, const bind::Names &names) {
    const bind::Error e = bind::ErrorOf(st, where, diag ? bind::DiagText(*diag, names) : "", s.ToString(), cuda_text);
    switch (e.kind) {
    case bind::ErrorKind::kNone: return absl::OkStatus();
    case bind::ErrorKind::kDevice: return absl::InternalError(e.message);
    default: return absl::InvalidArgumentError(e.message);
    }
}

// ---- >>rules: the arguments, checked by bindings/common --------------------------------------------

namespace {

// The ops' argument names where they are not selscan's operand names, and the sizes its rules name.
constexpr bind::NameMap kScanNames[] = {{"dstate", "A"}, {"n_groups", "B"}, {"batch", "u"}, {"n_seqs", "cu_seqlens"}};
// Layout BLD: the user's axis of each logical axis of (batch, dim, L) and (batch, G, N, L) operands.
const int kSeqBLD[] = {0, 2, 1}, kBcBLD[] = {0, 2, 3, 1};

bind::Type TypeOf(tensorflow::DataType t) {
    switch (t) {
    case tensorflow::DT_FLOAT: return bind::Type::kF32;
    case tensorflow::DT_HALF: return bind::Type::kF16;
    case tensorflow::DT_BFLOAT16: return bind::Type::kBF16;
    case tensorflow::DT_INT32: return bind::Type::kI32;
    case tensorflow::DT_INT64: return bind::Type::kI64;
    default: return bind::Type::kOther;
    }
}

// The sizes of the args one check describes (kept while the check runs).
struct ArgSizes {
    std::vector<std::vector<int64_t>> sizes;
    ArgSizes() { sizes.reserve(16); } // no reallocation: the Args point into these
    // a kernel's input (present: its has_* attr)
    bind::Arg Of(const Tensor &t, bool present = true) {
        bind::Arg a;
        a.present = present;
        if (!present) return a;
        const auto dims = t.shape().dim_sizes(); // (a copy: one begin / end pair)
        sizes.emplace_back(dims.begin(), dims.end());
        a.ndim = static_cast<int64_t>(sizes.back().size());
        a.sizes = sizes.back().data();
        a.type = TypeOf(t.dtype());
        return a;
    }
    // a shape function's input (rank or sizes may be unknown: -1); the dtype is the op's (its attrs)
    bind::Arg Of(tensorflow::shape_inference::InferenceContext *c, int i, bind::Type type, bool present = true) {
        bind::Arg a;
        a.present = present;
        if (!present) return a;
        const auto x = c->input(i);
        a.type = type;
        if (!c->RankKnown(x)) {
            a.ndim = -1;
            return a;
        }
        std::vector<int64_t> v;
        for (int k = 0; k < c->Rank(x); k++) v.push_back(c->ValueKnown(c->Dim(x, k)) ? c->Value(c->Dim(x, k)) : -1);
        sizes.push_back(std::move(v));
        a.ndim = static_cast<int64_t>(sizes.back().size());
        a.sizes = sizes.back().data();
        return a;
    }
};

absl::Status Refused(const bind::Refusal &r, const char *where, const bind::Names &names) {
    return absl::InvalidArgumentError(bind::ErrorOf(r, where, names).message);
}

bind::Forms ScanForms(bool bld) {
    bind::Forms f;
    f.groupless_bc = true; // B / C (batch, L, N) or (batch, N, L): one group, as the user passed them
    f.names = bind::NamesOf(kScanNames);
    if (bld) {
        f.seq_perm = kSeqBLD;
        f.bc_perm = kBcBLD;
    }
    return f;
}

// An optional input: given (its has_* attr), its index, name and attr.
struct Optional {
    bool present;
    int i;
    const char *name;
    const char *attr;
};
// An optional input not given must be empty (AbsentRule otherwise).
absl::Status CheckAbsent(OpKernelContext *ctx, std::initializer_list<Optional> inputs) {
    for (const Optional &o : inputs) {
        if (o.present) continue;
        const Tensor &t = ctx->input(o.i);
        if (t.NumElements() != 0) return AbsentRule(o.name, o.attr, t.shape().DebugString());
    }
    return absl::OkStatus();
}

} // namespace

absl::Status CheckInputs(OpKernelContext *ctx, const Options &o, bool backward, Sizes *s) {
    TF_RETURN_IF_ERROR(CheckAbsent(ctx, {{o.has_d, bind::kScanD, "D", "has_d"},
                                         {o.has_z, bind::kScanZ, "z", "has_z"},
                                         {o.has_bias, bind::kScanDeltaBias, "delta_bias", "has_delta_bias"},
                                         {o.has_h0, bind::kScanH0, "h0", "has_h0"},
                                         {o.has_cu, bind::kScanCuSeqlens, "cu_seqlens", "has_cu_seqlens"},
                                         {o.has_dh_last || !backward, bind::kScanDhLast, "dh_last", "has_dh_last"}}));
    const bool given[bind::kScanBwdInputs] = {true,       true,     true,     true, true,          o.has_d, o.has_z,
                                              o.has_bias, o.has_h0, o.has_cu, true, o.has_dh_last, true};
    ArgSizes z;
    bind::Arg in[bind::kScanBwdInputs];
    for (int i = 0; i < (backward ? bind::kScanBwdInputs : bind::kScanFwdInputs); i++)
        in[i] = z.Of(ctx->input(i), given[i]);
    const Tensor &cu = ctx->input(bind::kScanCuSeqlens);
    const bind::ScanArgs a =
        bind::ScanArgsOf(in, backward, o.has_cu && cu.dims() == 1 ? cu.flat<int64_t>().data() : nullptr);
    const bind::Forms forms = ScanForms(o.bld);
    bind::Checked k;
    const bind::Refusal r = bind::CheckScanArgs(a, forms, &k);
    if (!r.ok()) return Refused(r, backward ? "backward" : "forward", forms.names);
    *s = k.s;
    return absl::OkStatus();
}

absl::Status CheckStepInputs(OpKernelContext *ctx, const StepOptions &o, Sizes *s) {
    TF_RETURN_IF_ERROR(
        CheckAbsent(ctx, {{o.has_d, bind::kStepD, "D", "has_d"},
                          {o.has_z, bind::kStepZ, "z", "has_z"},
                          {o.has_bias, bind::kStepDtBias, "dt_bias", "has_dt_bias"},
                          {o.has_index, bind::kStepIndex, "state_batch_indices", "has_state_batch_indices"}}));
    const bool given[bind::kStepInputs] = {true, true,    true,    true,       true,
                                           true, o.has_d, o.has_z, o.has_bias, o.has_index};
    ArgSizes z;
    bind::Arg in[bind::kStepInputs];
    for (int i = 0; i < bind::kStepInputs; i++) in[i] = z.Of(ctx->input(i), given[i]);
    const Tensor &idx = ctx->input(bind::kStepIndex);
    const bind::StepArgs a =
        bind::StepArgsOf(in, o.has_index && idx.dims() == 1 ? idx.flat<int32_t>().data() : nullptr);
    bind::Forms forms;
    forms.groupless_bc = true; // B / C (batch, N): one group
    forms.names = bind::NamesOf(bind::kStepNames);
    bind::Checked k;
    const bind::Refusal r = bind::CheckStepArgs(a, forms, &k);
    if (!r.ok()) return Refused(r, "step", forms.names);
    *s = k.s;
    return absl::OkStatus();
}

namespace {

using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

// ------------------------------------------------------------------------------------------------
// Shape inference (unknown ranks and dimensions are fine: Merge keeps what is known).

struct InferredDims {
    DimensionHandle batch, dim, L, N, G;
    ShapeHandle seq;      // the shape of u-like tensors
    ShapeHandle b, c;     // B's and C's (dB's, dC's): with the group axis, without (rank 3), or unknown
    DimensionHandle rows; // of h0 / h_last / dh0 / dh_last: batch, or n_seqs with cu_seqlens
    bool bld = true, has_d = false, has_z = false, has_bias = false, has_h0 = false, has_cu = false;
};

// The kernels' checks (the common layer's, as CheckInputs) on the shapes known at trace time (an
// unknown rank or size: taken as it may be), and the sizes they find for the outputs.
absl::Status InferDims(InferenceContext *c, bool backward, InferredDims *d) {
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
    auto known_nonzero = [&](DimensionHandle x) { return c->ValueKnown(x) && c->Value(x) > 0; };
    auto absent = [&](bool present, int i, const char *name, const char *attr) -> absl::Status {
        ShapeHandle x = c->input(i);
        if (present || !c->RankKnown(x)) return absl::OkStatus();
        for (int k = 0; k < c->Rank(x); k++)
            if (!known_nonzero(c->Dim(x, k))) return absl::OkStatus(); // possibly empty: the kernel decides
        return AbsentRule(name, attr, c->DebugString(x));
    };
    TF_RETURN_IF_ERROR(absent(d->has_d, bind::kScanD, "D", "has_d"));
    TF_RETURN_IF_ERROR(absent(d->has_z, bind::kScanZ, "z", "has_z"));
    TF_RETURN_IF_ERROR(absent(d->has_bias, bind::kScanDeltaBias, "delta_bias", "has_delta_bias"));
    TF_RETURN_IF_ERROR(absent(d->has_h0, bind::kScanH0, "h0", "has_h0"));
    TF_RETURN_IF_ERROR(absent(d->has_cu, bind::kScanCuSeqlens, "cu_seqlens", "has_cu_seqlens"));
    if (backward) TF_RETURN_IF_ERROR(absent(has_dh_last, bind::kScanDhLast, "dh_last", "has_dh_last"));
    tensorflow::DataType t_attr;
    TF_RETURN_IF_ERROR(c->GetAttr("T", &t_attr));
    const bind::Type T = TypeOf(t_attr), F = bind::Type::kF32;
    const bind::Type I = bind::Type::kI64, type[bind::kScanBwdInputs] = {T, T, F, T, T, F, T, F, F, I, T, F, F};
    const bool given[bind::kScanBwdInputs] = {true,        true,      true,      true, true,        d->has_d, d->has_z,
                                              d->has_bias, d->has_h0, d->has_cu, true, has_dh_last, true};
    ArgSizes z;
    bind::Arg in[bind::kScanBwdInputs];
    for (int i = 0; i < (backward ? bind::kScanBwdInputs : bind::kScanFwdInputs); i++)
        in[i] = z.Of(c, i, type[i], given[i]);
    const bind::ScanArgs a = bind::ScanArgsOf(in, backward, nullptr);
    const bind::Forms forms = ScanForms(d->bld);
    bind::Checked k;
    const bind::Refusal r = bind::CheckScanArgs(a, forms, &k);
    if (!r.ok()) return Refused(r, backward ? "backward" : "forward", forms.names);
    auto dim = [&](int64_t v) { return v < 0 ? c->UnknownDim() : c->MakeDim(v); };
    d->batch = dim(k.s.batch);
    d->dim = dim(k.s.dim);
    d->L = dim(k.s.L);
    d->N = dim(k.s.N);
    d->G = dim(a.B.ndim == 4 && k.s.G >= 0 ? k.s.G : -1);
    d->rows = dim(k.s.rows);
    d->seq = d->bld ? c->MakeShape({d->batch, d->L, d->dim}) : c->MakeShape({d->batch, d->dim, d->L});
    const ShapeHandle bc = d->bld ? c->MakeShape({d->batch, d->L, d->G, d->N})
                                  : c->MakeShape({d->batch, d->G, d->N, d->L}),
                      bc3 = d->bld ? c->MakeShape({d->batch, d->L, d->N}) : c->MakeShape({d->batch, d->N, d->L});
    auto bc_of = [&](const bind::Arg &x) { return x.ndim == 4 ? bc : x.ndim == 3 ? bc3 : c->UnknownShape(); };
    d->b = bc_of(a.B);
    d->c = bc_of(a.C);
    return absl::OkStatus();
}

absl::Status ForwardShape(InferenceContext *c) {
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

absl::Status BackwardShape(InferenceContext *c) {
    InferredDims d;
    TF_RETURN_IF_ERROR(InferDims(c, true, &d));
    c->set_output(kDu, d.seq);
    c->set_output(kDdelta, d.seq);
    c->set_output(kDa, c->MakeShape({d.dim, d.N}));
    c->set_output(kDb, d.b);
    c->set_output(kDc, d.c);
    c->set_output(kDd, d.has_d ? c->Vector(d.dim) : c->Vector(0));
    c->set_output(kDz, d.has_z ? d.seq : c->Vector(0));
    c->set_output(kDdeltaBias, d.has_bias ? c->Vector(d.dim) : c->Vector(0));
    c->set_output(kDh0, d.has_h0 ? c->MakeShape({d.rows, d.dim, d.N}) : c->Vector(0));
    return absl::OkStatus();
}

// The step's outputs: out like x, new_state like state (the kernel checks the rest, naming the
// argument).
absl::Status StepShape(InferenceContext *c) {
    c->set_output(0, c->input(bind::kStepX));
    c->set_output(1, c->input(bind::kStepState));
    return absl::OkStatus();
}

} // namespace
} // namespace selscan_tf

// The scan's inputs and its attributes before the op's own, the forward's and the backward's (the
// attributes' order is the ops' as before).
#define SELSCAN_TF_SCAN_OP                    \
    .Input("u: T")                            \
        .Input("delta: T")                    \
        .Input("a: float")                    \
        .Input("b: T")                        \
        .Input("c: T")                        \
        .Input("d: float")                    \
        .Input("z: T")                        \
        .Input("delta_bias: float")           \
        .Input("h0: float")                   \
        .Input("cu_seqlens: int64")           \
        .Attr("T: {float, half, bfloat16}")   \
        .Attr("delta_softplus: bool = false") \
        .Attr("has_d: bool = false")          \
        .Attr("has_z: bool = false")          \
        .Attr("has_delta_bias: bool = false") \
        .Attr("has_h0: bool = false")         \
        .Attr("has_cu_seqlens: bool = false")

REGISTER_OP("SelscanForward")
SELSCAN_TF_SCAN_OP.Output("y: T")
    .Output("h_last: float")
    .Output("checkpoint: float")
    .Attr("return_last_state: bool = false")
    .Attr("save_checkpoint: bool = false")
    .Attr("layout: {'BLD', 'BDL'} = 'BLD'")
    .SetShapeFn(selscan_tf::ForwardShape);

REGISTER_OP("SelscanBackward")
SELSCAN_TF_SCAN_OP.Input("dy: T")
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
    .Attr("has_dh_last: bool = false")
    .Attr("layout: {'BLD', 'BDL'} = 'BLD'")
    .SetShapeFn(selscan_tf::BackwardShape);

#undef SELSCAN_TF_SCAN_OP

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
int64_t NumParts(OpKernelContext *ctx) {
    return std::max(1, ctx->device()->tensorflow_cpu_worker_threads()->num_threads);
}

// Runs fn(&q, part) for part in [0, n_parts) on TF's CPU thread pool (bind::RunParts: each part on
// its own copy q of p with its own diag; the first failing part's error).
template <typename P, typename Fn> absl::Status RunParts(OpKernelContext *ctx, const P &p, int64_t n_parts,
                                                         const char *where, const Sizes &s, const Fn &fn,
                                                         const bind::Names &names = bind::Names()) {
    auto pool = [ctx](int64_t n, const auto &body) {
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
    static void Copy(OpKernelContext *, void *dst, const void *src, size_t bytes) { std::memcpy(dst, src, bytes); }
    static void Zero(OpKernelContext *, void *dst, size_t bytes) { std::memset(dst, 0, bytes); }

    // selscan_checkpoint_size bytes of floats, or none where the CPU backward would not read one
    // (bind::CpuCheckpointBytes).
    static absl::Status CheckpointBytes(const selscan_problem &p, bool save, const Sizes &s, size_t *bytes) {
        return FromSelscan(
            bind::Call(p, [&](const selscan_problem *q) { return bind::CpuCheckpointBytes(q, save, bytes); }),
            "selscan_checkpoint_size", s);
    }

    // The workspace of n_parts parts (g: the backward's), from allocate_temp (kept alive by tmp).
    static absl::Status Workspace(OpKernelContext *ctx, const selscan_problem &p, const selscan_grads *g,
                                  int64_t n_parts, const char *where, const Sizes &s, Tensor *tmp, void **ws,
                                  size_t *bytes) {
        TF_RETURN_IF_ERROR(FromSelscan(
            bind::Call(p, [&](const selscan_problem *q) { return selscan_workspace_size_parts(q, g, n_parts, bytes); }),
            where, s));
        return AllocateWorkspace(ctx, *bytes, tmp, ws);
    }

    static absl::Status Forward(OpKernelContext *ctx, const selscan_problem &p, const Sizes &s, float *ck,
                                size_t ck_bytes) {
        const int64_t n_parts = NumParts(ctx);
        size_t bytes = 0;
        Tensor tmp;
        void *ws = nullptr;
        TF_RETURN_IF_ERROR(Workspace(ctx, p, nullptr, n_parts, "selscan_forward_cpu", s, &tmp, &ws, &bytes));
        return RunParts(ctx, p, n_parts, "selscan_forward_cpu", s, [&](const selscan_problem *q, int64_t part) {
            return ck ? selscan_forward_cpu_ckpt_part(q, part, n_parts, ws, bytes, ck, ck_bytes)
                      : selscan_forward_cpu_part(q, part, n_parts, ws, bytes);
        });
    }

    static absl::Status Backward(OpKernelContext *ctx, const selscan_problem &p, const selscan_grads &g, const Sizes &s,
                                 const Tensor &ck_in) {
        const int64_t n_parts = NumParts(ctx);
        size_t bytes = 0;
        Tensor tmp;
        void *ws = nullptr;
        TF_RETURN_IF_ERROR(Workspace(ctx, p, &g, n_parts, "selscan_backward_cpu", s, &tmp, &ws, &bytes));
        // The forward's checkpoint, when a CPU forward kept one: a checkpoint of another size (none,
        // or a GPU forward's, whose layout differs) is not read; the backward then recomputes it.
        size_t ck_bytes = 0;
        TF_RETURN_IF_ERROR(FromSelscan(bind::Call(p,
                                                  [&](const selscan_problem *q) {
                                                      return bind::CpuCheckpointToRead(q, ck_in.NumElements(),
                                                                                       &ck_bytes);
                                                  }),
                                       "selscan_checkpoint_size", s));
        const float *ck = ck_bytes ? ck_in.flat<float>().data() : nullptr;
        // Phase 1: the scans (per-part partial sums into the shared workspace) ...
        TF_RETURN_IF_ERROR(
            RunParts(ctx, p, n_parts, "selscan_backward_cpu", s, [&](const selscan_problem *q, int64_t part) {
                return ck ? selscan_backward_cpu_ckpt_part(q, &g, part, n_parts, ws, bytes, ck, ck_bytes)
                          : selscan_backward_cpu_part(q, &g, part, n_parts, ws, bytes);
            }));
        // ... phase 2, once all parts are done: the fixed-order reductions (dA, dD, ddelta_bias, dB, dC).
        return RunParts(ctx, p, n_parts, "selscan_backward_cpu", s, [&](const selscan_problem *q, int64_t part) {
            return selscan_backward_cpu_reduce(q, &g, part, n_parts, ws, bytes);
        });
    }

    // The decode step: blocks of 256 channels of a row (bind::StepParts), no workspace.
    static absl::Status Step(OpKernelContext *ctx, const selscan_step_problem &p, const Sizes &s) {
        const int64_t n = bind::StepParts(NumParts(ctx), s.batch, s.dim);
        return RunParts(
            ctx, p, n, "step (CPU)", s,
            [&](const selscan_step_problem *q, int64_t part) { return selscan_step_cpu_part(q, part, n); },
            bind::NamesOf(bind::kStepNames));
    }
};

SELSCAN_TF_REGISTER_KERNELS(DEVICE_CPU, CpuOps);

} // namespace
} // namespace selscan_tf
