// scan.cpp - selscan::fwd / bwd (the selective scan and its gradients; fwd's autograd: selscan_torch/__init__.py).
#include "selscan_torch.h"

namespace selscan_torch {
namespace {

// ---- problem building -------------------------------------------------------------------------

selscan_problem BuildProblem(const bind::Checked& k, const Tensor& u, const Tensor& delta, const Tensor& A,
                             const Tensor& B, const Tensor& C, const OptT& D, const OptT& z, const OptT& delta_bias,
                             const OptT& h0, const OptT& cu_host, bool softplus) {
  selscan_problem p = bind::MakeProblem(k.s, k.dtype, softplus, cu_host ? cu_host->const_data_ptr<int64_t>() : nullptr);
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
  // >>unit-l, after the checks (errors name the user's tensors); a no-op where the autograd kernel copied
  Tensor u_l = u_in, delta_l = delta_in, B_l = B_in, C_l = C_in;
  OptT z_l = z_in;
  if (WantsUnitL(args, c.k)) ToUnitL(u_l, delta_l, B_l, C_l, z_l);
  const Tensor u = Readable(u_l), delta = Readable(delta_l), A = Readable(A_in), B = Readable(B_l),
               C = Readable(C_l);
  const OptT D = Readable(D_in), z = Readable(z_l), delta_bias = Readable(delta_bias_in), h0 = Readable(h0_in);
  Tensor y = NewLike(u);
  Tensor h_last = return_last_state ? NewF32({s.rows, s.dim, s.N}, u) : NewF32({0}, u);
  if (s.Empty()) {  // (the offsets' values were checked: the rules hold whatever the sizes)
    Zero(y);
    if (return_last_state && h_last.numel()) {
      if (h0) CopyInto(h_last, *h0);
      else Zero(h_last);
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
    float* ck = ck_bytes ? checkpoint.mutable_data_ptr<float>() : nullptr;
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
    float* ck = ck_bytes ? checkpoint.mutable_data_ptr<float>() : nullptr;
    cc.Check(selscan_binding_cuda_forward(&p, ck, ck_bytes, &cc.call), "forward (CUDA)", diag);
  });
  return {y, h_last, checkpoint};
}

// ---- backward ---------------------------------------------------------------------------------

enum { kDu = 0, kDdelta, kDA, kDB, kDC, kDD, kDz, kDdeltaBias, kDh0, kNumGrads };

std::vector<Tensor> Backward(const Tensor& u_in, const Tensor& delta_in, const Tensor& A_in, const Tensor& B_in,
                             const Tensor& C_in, const OptT& D_in, const OptT& z_in, const OptT& delta_bias_in,
                             const OptT& h0_in, const OptT& cu_seqlens, const Tensor& dy_in, const OptT& dh_last_in,
                             const Tensor& checkpoint, bool delta_softplus, std::vector<int64_t> grad_mask) {
  // (the checkpoint on u's device: the forward makes it there; one elsewhere would be skipped silently)
  const Checked c = CheckScan(Op::kBwd, u_in, delta_in, A_in, B_in, C_in, D_in, z_in, delta_bias_in, h0_in, cu_seqlens,
                              dy_in, dh_last_in, checkpoint);
  const Sizes& s = c.k.s;
  if (grad_mask.size() != kNumGrads)
    Fail(bind::ErrorKind::kValue, "selscan: grad_mask must have 9 entries, got " + std::to_string(grad_mask.size()));
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
    if (want[kDh0] && dh_last && out[kDh0].numel()) CopyInto(out[kDh0], *dh_last);
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
      if (ck_bytes) ck = checkpoint.mutable_data_ptr<float>();
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
      if (ck_bytes) ck = checkpoint.mutable_data_ptr<float>();
    }
    cc.Check(selscan_binding_cuda_backward(&p, &g, ck, ck_bytes, &cc.call), "backward (CUDA)", diag);
  });
  return out;
}

}  // namespace
}  // namespace selscan_torch

STABLE_TORCH_LIBRARY_IMPL(selscan, CPU, m) {
  m.impl("fwd", TORCH_BOX(&selscan_torch::Forward));
  m.impl("bwd", TORCH_BOX(&selscan_torch::Backward));
}

#ifdef WITH_CUDA
STABLE_TORCH_LIBRARY_IMPL(selscan, CUDA, m) {
  m.impl("fwd", TORCH_BOX(&selscan_torch::Forward));
  m.impl("bwd", TORCH_BOX(&selscan_torch::Backward));
}
#endif
