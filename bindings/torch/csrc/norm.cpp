// norm.cpp - the gated RMS norm ops (selscan.h >>norm-api): mamba_ssm's RMSNormGated as one op.
// >>norm: the gated norm's ops
//
//   selscan::norm_fwd (y, z?, weight?, group_size, eps, norm_before_gate) -> out
//   selscan::norm_bwd (y, z?, weight?, dout, group_size, eps, norm_before_gate, grad_mask[3])
//                     -> [dy, dz, dweight]
//
// y, z, out, dout (batch, L, dim) T (any strides: z a slice of the layer's zxbcdt), weight (dim)
// float32; group_size 0 means dim. out and the gradients laid out like their inputs (empty_like);
// dweight float32. CPU: selscan_norm_*_cpu_part on torch's pool (the same results for every thread count:
// dweight's sums by 64-row blocks, then the blocks in order). CUDA: selscan_cuda.cuh's norm kernels (>>norm-cuda; deterministic), on the current stream,
// dweight's workspace from torch's caching allocator. The Python side (selscan_torch/norm.py) adds
// the autograd, the fake kernels and the weight's dtype.
// ============================================================================================

#include "selscan_torch.h"

namespace selscan_torch {
namespace {

Checked CheckNorm(Op op, const Tensor& y, const OptT& z, const OptT& weight, int64_t group_size, double eps, bool before,
                  const Tensor& dout = Tensor()) {
  const bind::Arg args[] = {ArgOf(y), ArgOf(z), ArgOf(weight), ArgOf(dout)};
  const double norm[3] = {static_cast<double>(group_size), eps, before ? 1.0 : 0.0};
  return Check(op, args, OptT(), nullptr, norm);
}

selscan_norm_problem BuildNorm(const bind::Checked& k, const Tensor& y, const OptT& z, const OptT& weight,
                               int64_t group_size, double eps, bool before) {
  selscan_norm_problem p;
  std::memset(&p, 0, sizeof p);
  p.batch = k.s.batch; p.seqlen = k.s.L; p.dim = k.s.dim; p.group_size = group_size;
  p.eps = static_cast<float>(eps);
  p.dtype = k.dtype;
  p.flags = before ? SELSCAN_NORM_BEFORE_GATE : 0u;
  p.y = Operand<decltype(p.y)>(y);
  p.z = OptOperand<decltype(p.z)>(z);
  p.weight = OptOperand<decltype(p.weight)>(weight);
  return p;
}

Tensor NormForward(const Tensor& y_in, const OptT& z_in, const OptT& weight_in, int64_t group_size, double eps,
                   bool norm_before_gate) {
  const Checked c = CheckNorm(Op::kNormFwd, y_in, z_in, weight_in, group_size, eps, norm_before_gate);
  NeedKernels(y_in, "y");
  const Tensor y = Readable(y_in);
  const OptT z = Readable(z_in), weight = Readable(weight_in);
  Tensor out = NewLike(y_in);
  if (c.k.s.Empty()) return out;
  selscan_norm_problem p = BuildNorm(c.k, y, z, weight, group_size, eps, norm_before_gate);
  p.out = Operand<decltype(p.out)>(out);
  Diag diag(NamesOf(kNormNames));
  diag.Attach(&p);
  OnDevice(y, "y", OptT(), [&] {
    const int64_t n = NumParts();  // (bitwise the one-part result for any n)
    RunParts(p, n, "norm forward (CPU)", NamesOf(kNormNames),
             [&](selscan_norm_problem* q, int64_t i) { return selscan_norm_forward_cpu_part(q, i, n); });
  }, [&](auto& cc) { cc.Check(selscan_binding_cuda_norm_forward(&p, &cc.call), "norm forward (CUDA)", diag); });
  return out;
}

enum { kNdy = 0, kNdz, kNdweight, kNormNumGrads };

std::vector<Tensor> NormBackward(const Tensor& y_in, const OptT& z_in, const OptT& weight_in, const Tensor& dout_in,
                                 int64_t group_size, double eps, bool norm_before_gate, std::vector<int64_t> grad_mask) {
  const Checked c = CheckNorm(Op::kNormBwd, y_in, z_in, weight_in, group_size, eps, norm_before_gate, dout_in);
  if (grad_mask.size() != kNormNumGrads)
    Fail(bind::ErrorKind::kValue, "selscan: grad_mask must have 3 entries, got " + std::to_string(grad_mask.size()));
  NeedKernels(y_in, "y");
  const Tensor y = Readable(y_in), dout = Readable(dout_in);
  const OptT z = Readable(z_in), weight = Readable(weight_in);
  bool want[kNormNumGrads];
  want[kNdy] = grad_mask[kNdy] != 0;
  want[kNdz] = grad_mask[kNdz] != 0 && z_in.has_value();  // (no z: no gradient of it)
  want[kNdweight] = grad_mask[kNdweight] != 0;
  std::vector<Tensor> out(kNormNumGrads);
  out[kNdy] = want[kNdy] ? NewLike(y_in) : NewF32({0}, y_in);
  out[kNdz] = want[kNdz] ? NewLike(*z_in) : NewF32({0}, y_in);
  out[kNdweight] = want[kNdweight] ? NewF32({c.k.s.dim}, y_in) : NewF32({0}, y_in);
  if (c.k.s.Empty()) {
    ZeroGrads(out, want);
    return out;
  }
  selscan_norm_problem p = BuildNorm(c.k, y, z, weight, group_size, eps, norm_before_gate);
  selscan_norm_grads g;
  std::memset(&g, 0, sizeof g);
  g.dout = Operand<decltype(g.dout)>(dout);
  auto grad = [&](int i) { return want[i] ? OptT(out[static_cast<size_t>(i)]) : OptT(); };
  g.dy = OptOperand<decltype(g.dy)>(grad(kNdy));
  g.dz = OptOperand<decltype(g.dz)>(grad(kNdz));
  g.dweight = OptOperand<decltype(g.dweight)>(grad(kNdweight));
  Diag diag(NamesOf(kNormNames));
  diag.Attach(&p);
  OnDevice(y, "y", OptT(), [&] {
    // parts of 64-row blocks, then dweight's fixed-order reduce: the same gradients for any thread count
    const int64_t n = NumParts();
    size_t ws_bytes = 0;
    Check(selscan_norm_workspace_size_parts(&p, &g, n, &ws_bytes), "norm backward (CPU)", diag);
    Workspace ws = MakeWorkspace(ws_bytes, y);
    RunParts(p, n, "norm backward (CPU)", NamesOf(kNormNames), [&](selscan_norm_problem* q, int64_t i) {
      return selscan_norm_backward_cpu_part(q, &g, i, n, ws.ptr, ws.bytes);
    });
    RunParts(p, n, "norm backward (CPU reduce)", NamesOf(kNormNames), [&](selscan_norm_problem* q, int64_t i) {
      return selscan_norm_backward_cpu_reduce(q, &g, i, n, ws.ptr, ws.bytes);
    });
  }, [&](auto& cc) { cc.Check(selscan_binding_cuda_norm_backward(&p, &g, &cc.call), "norm backward (CUDA)", diag); });
  return out;
}

}  // namespace
}  // namespace selscan_torch

STABLE_TORCH_LIBRARY_IMPL(selscan, CPU, m) {
  m.impl("norm_fwd", TORCH_BOX(&selscan_torch::NormForward));
  m.impl("norm_bwd", TORCH_BOX(&selscan_torch::NormBackward));
}

#ifdef WITH_CUDA
STABLE_TORCH_LIBRARY_IMPL(selscan, CUDA, m) {
  m.impl("norm_fwd", TORCH_BOX(&selscan_torch::NormForward));
  m.impl("norm_bwd", TORCH_BOX(&selscan_torch::NormBackward));
}
#endif
