// scan.cpp - selscan::fwd / bwd (the selective scan and its gradients) and fwd's autograd kernel.
#include "selscan_torch.h"

namespace selscan_torch {
namespace {

// ---- problem building -------------------------------------------------------------------------

selscan_problem BuildProblem(const bind::Checked& k, const Tensor& u, const Tensor& delta, const Tensor& A,
                             const Tensor& B, const Tensor& C, const OptT& D, const OptT& z, const OptT& delta_bias,
                             const OptT& h0, const OptT& cu_host, bool softplus) {
  selscan_problem p = bind::MakeProblem(k.s, k.dtype, softplus, cu_host ? cu_host->data_ptr<int64_t>() : nullptr);
  p.u = Operand<decltype(p.u)>(u);
  p.delta = Operand<decltype(p.delta)>(delta);
  p.A = Operand<decltype(p.A)>(A);
  p.B = BCOperand<decltype(p.B)>(B);
  p.C = BCOperand<decltype(p.C)>(C);
  p.D = OptOperand<decltype(p.D)>(D);
  p.z = OptOperand<decltype(p.z)>(z);
  p.delta_bias = OptOperand<decltype(p.delta_bias)>(delta_bias);
  p.h0 = OptOperand<decltype(p.h0)>(h0);
  return p;
}

Checked CheckScan(Op op, const Tensor& u, const Tensor& delta, const Tensor& A, const Tensor& B, const Tensor& C,
                  const OptT& D, const OptT& z, const OptT& delta_bias, const OptT& h0, const OptT& cu_seqlens,
                  const Tensor& dy = Tensor(), const OptT& dh_last = OptT(), const Tensor& checkpoint = Tensor()) {
  const bind::Arg args[] = {ArgOf(u), ArgOf(delta), ArgOf(A), ArgOf(B), ArgOf(C), ArgOf(D), ArgOf(z),
                            ArgOf(delta_bias), ArgOf(h0), ArgOf(cu_seqlens), ArgOf(dy), ArgOf(dh_last),
                            ArgOf(checkpoint)};
  return Check(op, args, cu_seqlens);
}

// The args of tensors whose sizes may be symbolic (AOTAutograd runs the autograd kernel on the
// fake tensors of a dynamic-shape trace): concrete sizes and strides (guard_int: the trace is
// specialized on them, as the plan's answer depends on them).
struct ConcreteArgs {
  static constexpr size_t kMax = 11;  // the bwd schema's tensors
  static constexpr int64_t kMaxRank = 8;
  int64_t sizes[kMax][kMaxRank], strides[kMax][kMaxRank];
  bind::Arg a[kMax];
  // false: a tensor of rank > kMaxRank, not described (the op's own check refuses it, naming it);
  // the caller then skips the unit-L question. (In place: this runs on every CUDA training call
  // with an L-strided operand, and a sum() loss's dy is one; vectors cost 22 allocations a call.)
  bool ok = true;
  explicit ConcreteArgs(std::initializer_list<const Tensor*> ts) {
    TORCH_INTERNAL_ASSERT(ts.size() <= kMax);
    size_t i = 0;
    for (const Tensor* t : ts) {
      bind::Arg& x = a[i];
      if (t && t->defined()) {
        const int64_t nd = t->dim();
        if (nd > kMaxRank) {
          ok = false;
          return;
        }
        x = ArgOf(t->device(), t->scalar_type());
        for (int64_t d = 0; d < nd; d++) {
          sizes[i][d] = t->sym_size(d).guard_int(__FILE__, __LINE__);
          strides[i][d] = t->sym_stride(d).guard_int(__FILE__, __LINE__);
        }
        x.ndim = nd;
        x.sizes = sizes[i];
        x.strides = strides[i];
      }
      i++;
    }
  }
};

// Those of u, delta, z, B, C whose L stride is not 1 replaced by contiguous copies.
void ToUnitL(Tensor& u, Tensor& delta, Tensor& B, Tensor& C, OptT& z) {
  u = UnitL(u);
  delta = UnitL(delta);
  z = UnitL(z);
  B = UnitL(B);
  C = UnitL(C);
}

// ---- forward ----------------------------------------------------------------------------------

std::tuple<Tensor, Tensor, Tensor> Forward(const Tensor& u_in, const Tensor& delta_in, const Tensor& A_in,
                                           const Tensor& B_in, const Tensor& C_in, const OptT& D_in,
                                           const OptT& z_in, const OptT& delta_bias_in, const OptT& h0_in,
                                           const OptT& cu_seqlens, bool delta_softplus, bool return_last_state,
                                           bool save_checkpoint) {
  const bind::Arg args[] = {ArgOf(u_in), ArgOf(delta_in), ArgOf(A_in), ArgOf(B_in), ArgOf(C_in),
                            ArgOf(D_in), ArgOf(z_in), ArgOf(delta_bias_in), ArgOf(h0_in), ArgOf(cu_seqlens)};
  const Checked c = Check(Op::kFwd, args, cu_seqlens);
  const Sizes& s = c.k.s;
  NeedKernels(u_in, "u");
  // >>unit-l, after the checks (errors name the user's tensors); a no-op where ForwardAutograd copied
  Tensor u_l = u_in, delta_l = delta_in, B_l = B_in, C_l = C_in;
  OptT z_l = z_in;
  if (WantsUnitL(args, c.k)) ToUnitL(u_l, delta_l, B_l, C_l, z_l);
  const Tensor u = Readable(u_l), delta = Readable(delta_l), A = Readable(A_in), B = Readable(B_l),
               C = Readable(C_l);
  const OptT D = Readable(D_in), z = Readable(z_l), delta_bias = Readable(delta_bias_in), h0 = Readable(h0_in);
  Tensor y = NewLike(u);
  Tensor h_last = NewF32(return_last_state ? at::IntArrayRef{s.rows, s.dim, s.N} : at::IntArrayRef{0}, u);
  if (s.Empty()) {  // (the offsets' values were checked: the rules hold whatever the sizes)
    if (y.numel()) y.zero_();
    if (return_last_state && h_last.numel()) {
      if (h0) h_last.copy_(*h0);
      else h_last.zero_();
    }
    return {y, h_last, NewF32({0}, u)};
  }
  selscan_problem p = BuildProblem(c.k, u, delta, A, B, C, D, z, delta_bias, h0, c.host, delta_softplus);
  p.y = Operand<decltype(p.y)>(y);
  if (return_last_state) p.h_last = Operand<decltype(p.h_last)>(h_last);
  Diag diag(NamesOf(kFwdNames));
  diag.Attach(&p);
  size_t ck_bytes = 0;
  Tensor checkpoint;
  OnDevice(u, "u", c.host, [&] {
    Check(bind::CpuCheckpointBytes(&p, save_checkpoint, &ck_bytes), "checkpoint size", diag);
    checkpoint = NewF32({static_cast<int64_t>(ck_bytes / 4)}, u);
    float* ck = ck_bytes ? checkpoint.data_ptr<float>() : nullptr;
    const int64_t n = NumParts();
    size_t ws_bytes = 0;
    Check(selscan_workspace_size_parts(&p, nullptr, n, &ws_bytes), "forward (CPU)", diag);
    Workspace ws = MakeWorkspace(ws_bytes, u);
    RunParts(p, n, "forward (CPU)", NamesOf(kFwdNames), [&](selscan_problem* q, int64_t i) {
      return ck ? selscan_forward_cpu_ckpt_part(q, i, n, ws.ptr, ws.bytes, ck, ck_bytes)
                : selscan_forward_cpu_part(q, i, n, ws.ptr, ws.bytes);
    });
  }, [&](auto& cc) {
    if (save_checkpoint) Check(selscan_binding_cuda_checkpoint_size(&p, &ck_bytes), "checkpoint size", diag);
    checkpoint = NewF32({static_cast<int64_t>(ck_bytes / 4)}, u);
    float* ck = ck_bytes ? checkpoint.data_ptr<float>() : nullptr;
    cc.Check(selscan_binding_cuda_forward(&p, ck, ck_bytes, &cc.call), "forward (CUDA)", diag);
  });
  return {y, h_last, checkpoint};
}

// ---- backward ---------------------------------------------------------------------------------

enum { kDu = 0, kDdelta, kDA, kDB, kDC, kDD, kDz, kDdeltaBias, kDh0, kNumGrads };

std::vector<Tensor> Backward(const Tensor& u_in, const Tensor& delta_in, const Tensor& A_in, const Tensor& B_in,
                             const Tensor& C_in, const OptT& D_in, const OptT& z_in, const OptT& delta_bias_in,
                             const OptT& h0_in, const OptT& cu_seqlens, const Tensor& dy_in, const OptT& dh_last_in,
                             const Tensor& checkpoint, bool delta_softplus, at::IntArrayRef grad_mask) {
  // (the checkpoint on u's device: the forward makes it there; one elsewhere would be skipped silently)
  const Checked c = CheckScan(Op::kBwd, u_in, delta_in, A_in, B_in, C_in, D_in, z_in, delta_bias_in, h0_in, cu_seqlens,
                              dy_in, dh_last_in, checkpoint);
  const Sizes& s = c.k.s;
  TORCH_CHECK_VALUE(grad_mask.size() == kNumGrads, "selscan: grad_mask must have 9 entries, got ", grad_mask.size());
  const Tensor u = Readable(u_in), delta = Readable(delta_in), A = Readable(A_in), B = Readable(B_in),
               C = Readable(C_in), dy = Readable(dy_in);
  const OptT D = Readable(D_in), z = Readable(z_in), delta_bias = Readable(delta_bias_in), h0 = Readable(h0_in),
             dh_last = Readable(dh_last_in);
  NeedKernels(u, "u");
  const bool present[kNumGrads] = {true, true, true, true, true, D.has_value(), z.has_value(),
                                   delta_bias.has_value(), h0.has_value()};
  const Tensor* like[kNumGrads] = {&u_in, &delta_in, &A_in, &B_in, &C_in, D ? &*D_in : nullptr, z ? &*z_in : nullptr,
                                   delta_bias ? &*delta_bias_in : nullptr, h0 ? &*h0_in : nullptr};
  std::vector<Tensor> out(kNumGrads);
  bool want[kNumGrads];
  for (int i = 0; i < kNumGrads; i++) {
    want[i] = present[i] && grad_mask[i] != 0;
    out[i] = want[i] ? NewLike(*like[i]) : NewF32({0}, u);
  }
  if (s.Empty()) {  // every gradient 0, except dh0 = dh_last (the state passes through)
    ZeroGrads(out, want);
    if (want[kDh0] && dh_last && out[kDh0].numel()) out[kDh0].copy_(*dh_last);
    return out;
  }
  selscan_problem p = BuildProblem(c.k, u, delta, A, B, C, D, z, delta_bias, h0, c.host, delta_softplus);
  selscan_grads g;
  std::memset(&g, 0, sizeof g);
  g.dy = Operand<decltype(g.dy)>(dy);
  g.dh_last = OptOperand<decltype(g.dh_last)>(dh_last);
  auto grad = [&](int i) { return want[i] ? OptT(out[i]) : OptT(); };
  g.du = OptOperand<decltype(g.du)>(grad(kDu));
  g.ddelta = OptOperand<decltype(g.ddelta)>(grad(kDdelta));
  g.dA = OptOperand<decltype(g.dA)>(grad(kDA));
  if (want[kDB]) g.dB = BCOperand<decltype(g.dB)>(out[kDB]);
  if (want[kDC]) g.dC = BCOperand<decltype(g.dC)>(out[kDC]);
  g.dD = OptOperand<decltype(g.dD)>(grad(kDD));
  g.dz = OptOperand<decltype(g.dz)>(grad(kDz));
  g.ddelta_bias = OptOperand<decltype(g.ddelta_bias)>(grad(kDdeltaBias));
  g.dh0 = OptOperand<decltype(g.dh0)>(grad(kDh0));
  Diag diag(NamesOf(kFwdNames));
  diag.Attach(&p);
  OnDevice(u, "u", c.host, [&] {
    const float* ck = nullptr;
    size_t ck_bytes = 0;
    if (checkpoint.is_cpu() && checkpoint.is_contiguous()) {
      Check(bind::CpuCheckpointToRead(&p, checkpoint.numel(), &ck_bytes), "checkpoint size", diag);
      if (ck_bytes) ck = checkpoint.data_ptr<float>();
    }
    const int64_t n = NumParts();
    size_t ws_bytes = 0;
    Check(selscan_workspace_size_parts(&p, &g, n, &ws_bytes), "backward (CPU)", diag);
    Workspace ws = MakeWorkspace(ws_bytes, u);
    // phase 1: the scans of every part (per-part partial sums into the shared workspace) ...
    RunParts(p, n, "backward (CPU)", NamesOf(kFwdNames), [&](selscan_problem* q, int64_t i) {
      return ck ? selscan_backward_cpu_ckpt_part(q, &g, i, n, ws.ptr, ws.bytes, ck, ck_bytes)
                : selscan_backward_cpu_part(q, &g, i, n, ws.ptr, ws.bytes);
    });
    // ... phase 2, after all parts: the fixed-order reductions (dA, dD, ddelta_bias, fixed dB/dC).
    RunParts(p, n, "backward (CPU reduce)", NamesOf(kFwdNames), [&](selscan_problem* q, int64_t i) {
      return selscan_backward_cpu_reduce(q, &g, i, n, ws.ptr, ws.bytes);
    });
  }, [&](auto& cc) {
    // The forward's checkpoint when a CUDA forward saved one (another size: not read).
    const float* ck = nullptr;
    size_t ck_bytes = 0;
    if (checkpoint.is_cuda() && checkpoint.is_contiguous()) {
      Check(bind::CheckpointToRead(&p, checkpoint.numel(), selscan_binding_cuda_checkpoint_size, &ck_bytes),
            "checkpoint size", diag);
      if (ck_bytes) ck = checkpoint.data_ptr<float>();
    }
    cc.Check(selscan_binding_cuda_backward(&p, &g, ck, ck_bytes, &cc.call), "backward (CUDA)", diag);
  });
  return out;
}

// ---- autograd (C++: the Autograd dispatch key) ---------------------------------------------------
//
// selscan::fwd's derivative is selscan::bwd. Registered here rather than with Python's
// torch.library.register_autograd: the Python autograd.Function layer cost 100-250 us a call
// (bench/NOTES.md CUDA-torch-v1); this one is a C++ Node. The forward saves selscan's checkpoint
// whenever a gradient can be asked for (grad mode on and an input requiring grad), whatever
// save_checkpoint says; the backward reads it and computes only the gradients autograd asks for.
// torch.compile traces through it (AOTAutograd runs this kernel on fake tensors: the fake kernels
// of selscan_torch/__init__.py).

using FwdOut = std::tuple<Tensor, Tensor, Tensor>;
using FwdSig = FwdOut(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const OptT&,
                      const OptT&, const OptT&, const OptT&, const OptT&, bool, bool, bool);
using BwdSig = std::vector<Tensor>(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                   const OptT&, const OptT&, const OptT&, const OptT&, const OptT&, const Tensor&,
                                   const OptT&, const Tensor&, bool, at::IntArrayRef);
const c10::TypedOperatorHandle<FwdSig>& FwdOp() {
  static const auto op = OpHandle<FwdSig>("selscan::fwd");
  return op;
}
const c10::TypedOperatorHandle<BwdSig>& BwdOp() {
  static const auto op = OpHandle<BwdSig>("selscan::bwd");
  return op;
}

class ScanFunction : public torch::autograd::Function<ScanFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const Tensor& u_in,
                                                const Tensor& delta_in, const Tensor& A, const Tensor& B_in,
                                                const Tensor& C_in, const OptT& D, const OptT& z_in,
                                                const OptT& delta_bias, const OptT& h0, const OptT& cu_seqlens,
                                                bool delta_softplus, bool return_last_state) {
    at::AutoDispatchBelowADInplaceOrView guard;
    // >>unit-l: the copies run the forward and are what is saved (the backward's fast kernels)
    Tensor u = u_in, delta = delta_in, B = B_in, C = C_in;
    OptT z = z_in;
    // (the CPU kernels take any strides; packed: never fast; all of them unit-L already, the common
    // call: nothing to copy, and the op's own check runs once, in Forward)
    if (u_in.is_cuda() && !cu_seqlens.has_value() &&
        (LStrided(u_in) || LStrided(delta_in) || LStrided(B_in) || LStrided(C_in) || LStrided(z_in))) {
      const ConcreteArgs ca({&u_in, &delta_in, &A, &B_in, &C_in, Ptr(D), Ptr(z_in), Ptr(delta_bias), Ptr(h0), nullptr});
      if (ca.ok) {  // the op's checks first, on the user's tensors (errors name them, not the copies)
        const Checked c = Check(Op::kFwd, ca.a, OptT());
        if (WantsUnitL(ca.a, c.k)) ToUnitL(u, delta, B, C, z);
      }
    }
    auto out = FwdOp().call(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, delta_softplus, return_last_state,
                            /*save_checkpoint=*/true);
    const Tensor& checkpoint = std::get<2>(out);
    ctx->save_for_backward({u, delta, A, B, C, D.value_or(Tensor()), z.value_or(Tensor()),
                            delta_bias.value_or(Tensor()), h0.value_or(Tensor()), cu_seqlens.value_or(Tensor()),
                            checkpoint});
    ctx->saved_data["softplus"] = delta_softplus;
    // which of the 9 differentiable arguments are present (autograd's edges count only those)
    ctx->saved_data["present"] = PresentBits({&D, &z, &delta_bias, &h0});
    ctx->mark_non_differentiable({checkpoint});
    ctx->set_materialize_grads(false);
    return {std::get<0>(out), std::get<1>(out), checkpoint};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool softplus = ctx->saved_data["softplus"].toBool();
    const int64_t present = ctx->saved_data["present"].toInt();
    const Tensor& u = saved[0];
    Tensor dy = grads[0];
    Tensor dlast = grads.size() > 1 ? grads[1] : Tensor();
    // no last_state was returned: its (0,) placeholder (1-D; a real last_state is 3-D; dim() and not
    // numel(): sizes may be symbolic under torch.compile)
    if (dlast.defined() && dlast.dim() != 3) dlast = Tensor();
    const std::vector<int64_t> mask = GradMask(ctx, kNumGrads, 5, present);  // u, delta, A, B, C always there
    torch::autograd::variable_list out(12);  // one per forward argument (after ctx)
    if (!AnyOf(mask)) return out;
    if (!dy.defined()) dy = at::zeros_like(u);  // a loss on last_state alone
    // >>unit-l: an L-strided dy (a gradient through a transpose: MambaVision's y) copied; the saved
    // operands are the forward's unit-L copies
    if (dy.dim() == 3 && u.is_cuda() && !saved[9].defined() && LStrided(dy)) {
      const ConcreteArgs ca({&saved[0], &saved[1], &saved[2], &saved[3], &saved[4], &saved[5], &saved[6], &saved[7],
                             &saved[8], nullptr, &dy});
      if (ca.ok && WantsUnitL(ca.a, Check(Op::kFwd, ca.a, OptT()).k, &ca.a[10])) dy = UnitL(dy);
    }
    auto g = BwdOp().call(saved[0], saved[1], saved[2], saved[3], saved[4], Opt(saved[5]), Opt(saved[6]),
                          Opt(saved[7]), Opt(saved[8]), Opt(saved[9]), dy, Opt(dlast), saved[10], softplus, mask);
    for (int i = 0; i < kNumGrads; i++)
      if (mask[static_cast<size_t>(i)]) out[static_cast<size_t>(i)] = g[static_cast<size_t>(i)];
    return out;
  }
};

FwdOut ForwardAutograd(const Tensor& u, const Tensor& delta, const Tensor& A, const Tensor& B, const Tensor& C,
                       const OptT& D, const OptT& z, const OptT& delta_bias, const OptT& h0, const OptT& cu_seqlens,
                       bool delta_softplus, bool return_last_state, bool save_checkpoint) {
  if (!NeedsGrad({&u, &delta, &A, &B, &C}, {&D, &z, &delta_bias, &h0})) {  // nothing to record: the kernel
    at::AutoDispatchBelowADInplaceOrView guard;
    return FwdOp().call(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, delta_softplus, return_last_state,
                        save_checkpoint);
  }
  auto r = ScanFunction::apply(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, delta_softplus,
                               return_last_state);
  return {r[0], r[1], r[2]};
}

// ---- >>harden-autograd: what has no derivative says so ---------------------------------------
//
// selscan::bwd is not differentiable: NotDifferentiable (selscan_torch.h).
// selscan::step is inference-only: with grad mode on, an input requiring grad is refused before
// anything is written (an output claiming requires_grad would get no gradient). The step's
// in-place update bumps state's version counter (autograd's check on tensors saved for backward).

struct ScanBackwardFunction : NotDifferentiable<ScanBackwardFunction> {
  static constexpr const char* kFunction = "selective_scan_fn";
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext*, const Tensor& u,
                                                const Tensor& delta, const Tensor& A, const Tensor& B,
                                                const Tensor& C, const OptT& D, const OptT& z,
                                                const OptT& delta_bias, const OptT& h0, const OptT& cu_seqlens,
                                                const Tensor& dy, const OptT& dh_last, const Tensor& checkpoint,
                                                bool delta_softplus, std::vector<int64_t> grad_mask) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return BwdOp().call(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, dy, dh_last, checkpoint, delta_softplus,
                        grad_mask);
  }
};

std::vector<Tensor> BackwardAutograd(const Tensor& u, const Tensor& delta, const Tensor& A, const Tensor& B,
                                     const Tensor& C, const OptT& D, const OptT& z, const OptT& delta_bias,
                                     const OptT& h0, const OptT& cu_seqlens, const Tensor& dy, const OptT& dh_last,
                                     const Tensor& checkpoint, bool delta_softplus, at::IntArrayRef grad_mask) {
  if (NeedsGrad({&u, &delta, &A, &B, &C, &dy, &checkpoint}, {&D, &z, &delta_bias, &h0, &dh_last}))
    return ScanBackwardFunction::apply(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, dy, dh_last, checkpoint,
                                       delta_softplus, grad_mask.vec());
  at::AutoDispatchBelowADInplaceOrView guard;
  return BwdOp().call(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, dy, dh_last, checkpoint, delta_softplus,
                      grad_mask);
}

}  // namespace
}  // namespace selscan_torch

TORCH_LIBRARY_IMPL(selscan, CPU, m) {
  m.impl("fwd", &selscan_torch::Forward);
  m.impl("bwd", &selscan_torch::Backward);
}

TORCH_LIBRARY_IMPL(selscan, Autograd, m) {
  m.impl("fwd", &selscan_torch::ForwardAutograd);
  m.impl("bwd", &selscan_torch::BackwardAutograd);
}

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(selscan, CUDA, m) {
  m.impl("fwd", &selscan_torch::Forward);
  m.impl("bwd", &selscan_torch::Backward);
}
#endif
