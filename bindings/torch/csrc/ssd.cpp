// ssd.cpp - Mamba-2's SSD scan ops (selscan.h >>ssd-api; issue 40).
// >>ssd: the SSD scan's ops
//
//   selscan::ssd_fwd (x, dt, A, B, C, D?, z?, dt_bias?, initial_states?, seq_idx?, cu_seqlens?,
//                     dt_softplus, dt_min, dt_max, return_final_states) -> (out, final_states)
//   selscan::ssd_bwd (the same inputs, dout, dfinal_states?, dt_softplus, dt_min, dt_max,
//                     grad_mask[9]) -> [dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinitial_states]
//
// mamba_chunk_scan_combined's shapes: x, z, out (batch, L, nheads, headdim) T; dt (batch, L, nheads)
// T; A, dt_bias (nheads) f32; B, C (batch, L, ngroups, dstate) T; D (nheads) or (nheads, headdim)
// f32; seq_idx (batch, L) int32; initial_states / final_states (rows, nheads, headdim, dstate) f32
// (rows: batch, or n_seqs with cu_seqlens). The clamp of dt to [dt_min, dt_max] applies unless the
// bounds are (-inf, inf) (mamba_ssm's default (0, inf) is a clamp). Any strides; out and the
// gradients laid out like their inputs (empty_like). CPU: selscan's fast SSD path on torch's pool
// (bitwise the same for every thread count). CUDA: selscan_cuda.cuh's SSD kernels (>>ssd-cuda;
// deterministic), on the current stream, the workspace from torch's caching allocator. The Python
// side (selscan_torch/ssd.py) adds the autograd, the fake kernels and mamba_ssm's API.
// ============================================================================================

#include <cmath>

#include "selscan_torch.h"

namespace selscan_torch {
namespace {

// The clamp's bounds as the library takes them: none where they are (-inf, inf).
struct DtLimit {
  bool on = false;
  float v[2] = {0.f, 0.f};
  DtLimit(double lo, double hi) {
    on = !(std::isinf(lo) && lo < 0 && std::isinf(hi) && hi > 0);
    v[0] = static_cast<float>(lo);
    v[1] = static_cast<float>(hi);
  }
};

Checked CheckSsd(Op op, const Tensor& x, const Tensor& dt, const Tensor& A, const Tensor& B, const Tensor& C,
                 const OptT& D, const OptT& z, const OptT& dt_bias, const OptT& init, const OptT& seq_idx,
                 const OptT& cu_seqlens, const DtLimit& lim, const Tensor& dy = Tensor(), const OptT& dfinal = OptT()) {
  const bind::Arg args[] = {ArgOf(x),    ArgOf(dt),      ArgOf(A),          ArgOf(B),  ArgOf(C),     ArgOf(D),
                            ArgOf(z),    ArgOf(dt_bias), ArgOf(init),       ArgOf(seq_idx), ArgOf(cu_seqlens),
                            ArgOf(dy),   ArgOf(dfinal)};
  return Check(op, args, cu_seqlens, lim.on ? lim.v : nullptr);
}

selscan_ssd_problem BuildSsd(const bind::Checked& k, const Tensor& x, const Tensor& dt, const Tensor& A,
                             const Tensor& B, const Tensor& C, const OptT& D, const OptT& z, const OptT& dt_bias,
                             const OptT& init, const OptT& seq_idx, const OptT& cu_host, bool softplus,
                             const DtLimit& lim) {
  selscan_ssd_problem p;
  std::memset(&p, 0, sizeof p);
  p.batch = k.s.batch; p.seqlen = k.s.L; p.nheads = k.nheads; p.headdim = k.headdim; p.dstate = k.s.N;
  p.n_groups = k.s.G;
  p.dtype = k.dtype;
  p.flags = k.flags | (softplus ? SELSCAN_SSD_DT_SOFTPLUS : 0u);
  p.dt_min = lim.v[0];
  p.dt_max = lim.v[1];
  if (cu_host) {
    p.cu_seqlens = cu_host->const_data_ptr<int64_t>();
    p.n_seqs = k.s.n_seqs;
  }
  p.x = Operand<decltype(p.x)>(x);
  p.dt = Operand<decltype(p.dt)>(dt);
  p.A = Operand<decltype(p.A)>(A);
  p.B = Operand<decltype(p.B)>(B);
  p.C = Operand<decltype(p.C)>(C);
  p.D = OptOperand<decltype(p.D)>(D);
  p.z = OptOperand<decltype(p.z)>(z);
  p.dt_bias = OptOperand<decltype(p.dt_bias)>(dt_bias);
  p.seq_idx = OptOperand<decltype(p.seq_idx)>(seq_idx);
  p.initial_state = OptOperand<decltype(p.initial_state)>(init);
  return p;
}

std::tuple<Tensor, Tensor> SsdForward(const Tensor& x_in, const Tensor& dt_in, const Tensor& A_in, const Tensor& B_in,
                                      const Tensor& C_in, const OptT& D_in, const OptT& z_in, const OptT& dt_bias_in,
                                      const OptT& init_in, const OptT& seq_idx_in, const OptT& cu_seqlens,
                                      bool dt_softplus, double dt_min, double dt_max, bool return_final_states) {
  const DtLimit lim(dt_min, dt_max);
  const Checked c = CheckSsd(Op::kSsdFwd, x_in, dt_in, A_in, B_in, C_in, D_in, z_in, dt_bias_in, init_in, seq_idx_in,
                             cu_seqlens, lim);
  const bind::Checked& k = c.k;
  NeedKernels(x_in, "x");
  const Tensor x = Readable(x_in), dt = Readable(dt_in), A = Readable(A_in), B = Readable(B_in), C = Readable(C_in);
  const OptT D = Readable(D_in), z = Readable(z_in), dt_bias = Readable(dt_bias_in), init = Readable(init_in),
             seq_idx = Readable(seq_idx_in);
  Tensor y = NewLike(x_in);
  Tensor fin = return_final_states ? NewF32({k.s.rows, k.nheads, k.headdim, k.s.N}, x) : NewF32({0}, x);
  if (k.s.Empty()) {  // no step: the states pass through
    Zero(y);
    if (return_final_states && fin.numel()) {
      if (init) CopyInto(fin, *init);
      else Zero(fin);
    }
    return {y, fin};
  }
  selscan_ssd_problem p = BuildSsd(k, x, dt, A, B, C, D, z, dt_bias, init, seq_idx, c.host, dt_softplus, lim);
  p.y = Operand<decltype(p.y)>(y);
  if (return_final_states) p.final_state = Operand<decltype(p.final_state)>(fin);
  Diag diag(NamesOf(kSsdNames));
  diag.Attach(&p);
  OnDevice(x, "x", c.host, [&] {
    const int64_t n = NumParts();
    size_t ws_bytes = 0;
    Check(selscan_ssd_workspace_size_parts(&p, nullptr, n, &ws_bytes), "SSD forward (CPU)", diag);
    Workspace ws = MakeWorkspace(ws_bytes, x);
    RunParts(p, n, "SSD forward (CPU)", NamesOf(kSsdNames), [&](selscan_ssd_problem* q, int64_t i) {
      return selscan_ssd_forward_cpu_part(q, i, n, ws.ptr, ws.bytes);
    });
  }, [&](auto& cc) { cc.Check(selscan_binding_cuda_ssd_forward(&p, &cc.call), "SSD forward (CUDA)", diag); });
  return {y, fin};
}

enum { kSdx = 0, kSddt, kSdA, kSdB, kSdC, kSdD, kSdz, kSddtBias, kSdInit, kSsdNumGrads };

std::vector<Tensor> SsdBackward(const Tensor& x_in, const Tensor& dt_in, const Tensor& A_in, const Tensor& B_in,
                                const Tensor& C_in, const OptT& D_in, const OptT& z_in, const OptT& dt_bias_in,
                                const OptT& init_in, const OptT& seq_idx_in, const OptT& cu_seqlens,
                                const Tensor& dy_in, const OptT& dfinal_in, bool dt_softplus, double dt_min,
                                double dt_max, std::vector<int64_t> grad_mask) {
  const DtLimit lim(dt_min, dt_max);
  const Checked c = CheckSsd(Op::kSsdBwd, x_in, dt_in, A_in, B_in, C_in, D_in, z_in, dt_bias_in, init_in, seq_idx_in,
                             cu_seqlens, lim, dy_in, dfinal_in);
  const bind::Checked& k = c.k;
  if (grad_mask.size() != kSsdNumGrads)
    Fail(bind::ErrorKind::kValue, "selscan: grad_mask must have 9 entries, got " + std::to_string(grad_mask.size()));
  NeedKernels(x_in, "x");
  const Tensor x = Readable(x_in), dt = Readable(dt_in), A = Readable(A_in), B = Readable(B_in), C = Readable(C_in),
               dy = Readable(dy_in);
  const OptT D = Readable(D_in), z = Readable(z_in), dt_bias = Readable(dt_bias_in), init = Readable(init_in),
             seq_idx = Readable(seq_idx_in), dfinal = Readable(dfinal_in);
  const Tensor* like[kSsdNumGrads] = {&x_in, &dt_in, &A_in, &B_in, &C_in, Ptr(D_in), Ptr(z_in), Ptr(dt_bias_in),
                                      Ptr(init_in)};
  std::vector<Tensor> out(kSsdNumGrads);
  bool want[kSsdNumGrads];
  for (int i = 0; i < kSsdNumGrads; i++) {
    want[i] = like[i] && grad_mask[static_cast<size_t>(i)] != 0;  // a gradient of an input given
    out[i] = want[i] ? NewLike(*like[i]) : NewF32({0}, x);
  }
  if (k.s.Empty()) {  // every gradient 0, except dinitial_states = dfinal_states (the state passes through)
    ZeroGrads(out, want);
    if (want[kSdInit] && dfinal && out[kSdInit].numel()) CopyInto(out[kSdInit], *dfinal);
    return out;
  }
  selscan_ssd_problem p = BuildSsd(k, x, dt, A, B, C, D, z, dt_bias, init, seq_idx, c.host, dt_softplus, lim);
  selscan_ssd_grads g;
  std::memset(&g, 0, sizeof g);
  g.dy = Operand<decltype(g.dy)>(dy);
  g.dfinal_state = OptOperand<decltype(g.dfinal_state)>(dfinal);
  auto grad = [&](int i) { return want[i] ? OptT(out[static_cast<size_t>(i)]) : OptT(); };
  g.dx = OptOperand<decltype(g.dx)>(grad(kSdx));
  g.ddt = OptOperand<decltype(g.ddt)>(grad(kSddt));
  g.dA = OptOperand<decltype(g.dA)>(grad(kSdA));
  g.dB = OptOperand<decltype(g.dB)>(grad(kSdB));
  g.dC = OptOperand<decltype(g.dC)>(grad(kSdC));
  g.dD = OptOperand<decltype(g.dD)>(grad(kSdD));
  g.dz = OptOperand<decltype(g.dz)>(grad(kSdz));
  g.ddt_bias = OptOperand<decltype(g.ddt_bias)>(grad(kSddtBias));
  g.dinitial_state = OptOperand<decltype(g.dinitial_state)>(grad(kSdInit));
  Diag diag(NamesOf(kSsdNames));
  diag.Attach(&p);
  OnDevice(x, "x", c.host, [&] {
    const int64_t n = NumParts();
    size_t ws_bytes = 0;
    Check(selscan_ssd_workspace_size_parts(&p, &g, n, &ws_bytes), "SSD backward (CPU)", diag);
    Workspace ws = MakeWorkspace(ws_bytes, x);
    // phase 1: every part's (batch row, head) items; phase 2, after all of them: the fixed-order sums
    RunParts(p, n, "SSD backward (CPU)", NamesOf(kSsdNames), [&](selscan_ssd_problem* q, int64_t i) {
      return selscan_ssd_backward_cpu_part(q, &g, i, n, ws.ptr, ws.bytes);
    });
    RunParts(p, n, "SSD backward (CPU reduce)", NamesOf(kSsdNames), [&](selscan_ssd_problem* q, int64_t i) {
      return selscan_ssd_backward_cpu_reduce(q, &g, i, n, ws.ptr, ws.bytes);
    });
  }, [&](auto& cc) { cc.Check(selscan_binding_cuda_ssd_backward(&p, &g, &cc.call), "SSD backward (CUDA)", diag); });
  return out;
}

}  // namespace
}  // namespace selscan_torch

STABLE_TORCH_LIBRARY_IMPL(selscan, CPU, m) {
  m.impl("ssd_fwd", TORCH_BOX(&selscan_torch::SsdForward));
  m.impl("ssd_bwd", TORCH_BOX(&selscan_torch::SsdBackward));
}

#ifdef WITH_CUDA
STABLE_TORCH_LIBRARY_IMPL(selscan, CUDA, m) {
  m.impl("ssd_fwd", TORCH_BOX(&selscan_torch::SsdForward));
  m.impl("ssd_bwd", TORCH_BOX(&selscan_torch::SsdBackward));
}
#endif
