// conv.cpp - the causal depthwise conv1d ops.
// >>conv: causal depthwise conv1d ops (selscan.h >>conv-api; issue 28 item 2)
//
//   selscan::conv_fwd  (x, weight, bias?, init_state?, cu_seqlens?, silu, return_final_state,
//                       out_dim_major) -> (y, final_state)
//   selscan::conv_bwd  (x, weight, bias?, init_state?, cu_seqlens?, dy, dfinal_state?, silu,
//                       grad_mask[4]) -> [dx, dweight, dbias, dinit_state]
//   selscan::conv_step (state!, x, weight, bias?, state_index?, silu) -> y
//
// x (batch, dim, L) T (any strides), weight (dim, W) f32, bias (dim) f32 (conv_step: f32 or T,
// SELSCAN_CONV_PARAMS_T when both are T), init_state / final_state
// (rows, dim, W-1) T with rows = batch (n_seqs with cu_seqlens). y has x's memory order (dense),
// or (dim, batch, L) memory with out_dim_major (the layout the fused block's GEMMs read as one
// (dim, batch * L) matrix). The Python side (selscan_torch/conv.py) adds conv_fwd's autograd (like
// the scan's), fake kernels and causal_conv1d's API.
// ============================================================================================

#include "selscan_torch.h"

namespace selscan_torch {
namespace {

struct ConvSizes {
  int64_t batch = 0, dim = 0, L = 0, W = 0, rows = 0, n_seqs = 0;
  selscan_dtype dtype = SELSCAN_F32;
  OptT cu_host;  // the contiguous host copy of cu_seqlens whose values were checked
};

// The conv's arguments checked by the common layer (conv_fwd; conv_bwd with dy, dfinal_state).
ConvSizes CheckConv(Op op, const Tensor& x, const Tensor& weight, const OptT& bias, const OptT& init_state,
                    const OptT& cu_seqlens, const Tensor& dy = Tensor(), const OptT& dfinal = OptT()) {
  const bind::Arg args[] = {ArgOf(x), ArgOf(weight), ArgOf(bias), ArgOf(init_state), ArgOf(cu_seqlens),
                            ArgOf(dy), ArgOf(dfinal)};
  const Checked c = Check(op, args, cu_seqlens);
  ConvSizes s;
  s.batch = c.k.s.batch; s.dim = c.k.s.dim; s.L = c.k.s.L; s.W = c.k.width; s.rows = c.k.s.rows;
  s.n_seqs = c.k.s.n_seqs;
  s.dtype = c.k.dtype;
  s.cu_host = c.host;
  return s;
}

selscan_conv_problem BuildConv(const ConvSizes& s, const Tensor& x, const Tensor& weight, const OptT& bias,
                               const OptT& init_state, const OptT& cu_host, bool silu) {
  selscan_conv_problem p;
  std::memset(&p, 0, sizeof p);
  p.batch = s.batch; p.dim = s.dim; p.seqlen = s.L; p.width = s.W;
  p.dtype = s.dtype;
  p.flags = silu ? SELSCAN_CONV_SILU : 0u;
  if (cu_host) {
    p.cu_seqlens = cu_host->const_data_ptr<int64_t>();
    p.n_seqs = s.n_seqs;
  }
  p.x = Operand<decltype(p.x)>(x);
  p.weight = Operand<decltype(p.weight)>(weight);
  p.bias = OptOperand<decltype(p.bias)>(bias);
  p.init_state = OptOperand<decltype(p.init_state)>(init_state);
  return p;
}

// CPU parts: blocks of channels (each over every row and step); a few dozen channels a part at least.
int64_t ConvParts(int64_t dim) { return std::min<int64_t>(NumParts(), std::max<int64_t>(1, dim / 32)); }

std::tuple<Tensor, Tensor> ConvForward(const Tensor& x_in, const Tensor& weight_in, const OptT& bias_in,
                                       const OptT& init_in, const OptT& cu_seqlens, bool silu,
                                       bool return_final_state, bool out_dim_major) {
  const ConvSizes s = CheckConv(Op::kConvFwd, x_in, weight_in, bias_in, init_in, cu_seqlens);
  const Tensor x = Readable(x_in), weight = Readable(weight_in);
  const OptT bias = Readable(bias_in), init = Readable(init_in);
  NeedKernels(x, "x");
  const auto dtype = x.scalar_type();
  // out_dim_major: (batch, dim, L) sizes over (dim, batch, L) memory
  const int64_t dim_major[3] = {s.L, s.batch * s.L, 1};
  Tensor y = out_dim_major ? NewStrided({s.batch, s.dim, s.L}, dim_major, dtype, x) : NewInOrderOf(x, SizesOf(x), dtype);
  Tensor fin = return_final_state ? NewTensor({s.rows, s.dim, s.W - 1}, dtype, x) : NewTensor({0}, dtype, x);
  if (s.batch == 0 || s.dim == 0 || s.L == 0) {  // nothing to convolve: each row's state passes through
    if (return_final_state) {
      if (init) CopyInto(fin, *init);
      else Zero(fin);
    }
    return {y, fin};
  }
  selscan_conv_problem p = BuildConv(s, x, weight, bias, init, s.cu_host, silu);
  p.y = Operand<decltype(p.y)>(y);
  if (return_final_state) p.final_state = Operand<decltype(p.final_state)>(fin);
  Diag diag(NamesOf(kConvNames));
  diag.Attach(&p);
  OnDevice(x, "x", s.cu_host, [&] {
    const int64_t n = ConvParts(s.dim);
    RunParts(p, n, "conv forward (CPU)", NamesOf(kConvNames),
             [&](selscan_conv_problem* q, int64_t i) { return selscan_conv_forward_cpu_part(q, i, n); });
  }, [&](auto& cc) { cc.Check(selscan_binding_cuda_conv_forward(&p, &cc.call), "conv forward (CUDA)", diag); });
  return {y, fin};
}

enum { kConvDx = 0, kConvDweight, kConvDbias, kConvDinit, kConvNumGrads };

std::vector<Tensor> ConvBackward(const Tensor& x_in, const Tensor& weight_in, const OptT& bias_in,
                                 const OptT& init_in, const OptT& cu_seqlens, const Tensor& dy_in,
                                 const OptT& dfinal_in, bool silu, std::vector<int64_t> grad_mask) {
  const ConvSizes s = CheckConv(Op::kConvBwd, x_in, weight_in, bias_in, init_in, cu_seqlens, dy_in, dfinal_in);
  if (grad_mask.size() != kConvNumGrads)
    Fail(bind::ErrorKind::kValue, "selscan: grad_mask must have 4 entries, got " + std::to_string(grad_mask.size()));
  const Tensor x = Readable(x_in), weight = Readable(weight_in), dy = Readable(dy_in);
  const OptT bias = Readable(bias_in), init = Readable(init_in), dfinal = Readable(dfinal_in);
  NeedKernels(x, "x");
  const auto dtype = x.scalar_type();
  bool want[kConvNumGrads];
  for (int i = 0; i < kConvNumGrads; i++) want[i] = grad_mask[static_cast<size_t>(i)] != 0;
  std::vector<Tensor> out(kConvNumGrads);
  // dx in dy's memory order: the gradient flows on in the layout the caller's backward produced
  // (the fused block's channel-major dy gives a channel-major dx it concatenates without a transpose)
  out[kConvDx] = want[kConvDx] ? NewInOrderOf(dy, SizesOf(x), dtype) : NewF32({0}, x);
  out[kConvDweight] = want[kConvDweight] ? NewF32({s.dim, s.W}, x) : NewF32({0}, x);
  out[kConvDbias] = want[kConvDbias] ? NewF32({s.dim}, x) : NewF32({0}, x);
  out[kConvDinit] = want[kConvDinit] ? NewTensor({s.rows, s.dim, s.W - 1}, dtype, x) : NewF32({0}, x);
  if (s.batch == 0 || s.dim == 0 || s.L == 0) {  // zeros; dinit_state = dfinal_state
    ZeroGrads(out, want);
    if (want[kConvDinit] && dfinal && out[kConvDinit].numel()) CopyInto(out[kConvDinit], *dfinal);
    return out;
  }
  selscan_conv_problem p = BuildConv(s, x, weight, bias, init, s.cu_host, silu);
  selscan_conv_grads g;
  std::memset(&g, 0, sizeof g);
  g.dy = Operand<decltype(g.dy)>(dy);
  g.dfinal_state = OptOperand<decltype(g.dfinal_state)>(dfinal);
  auto grad = [&](int i) { return want[i] ? OptT(out[i]) : OptT(); };
  g.dx = OptOperand<decltype(g.dx)>(grad(kConvDx));
  g.dweight = OptOperand<decltype(g.dweight)>(grad(kConvDweight));
  g.dbias = OptOperand<decltype(g.dbias)>(grad(kConvDbias));
  g.dinit_state = OptOperand<decltype(g.dinit_state)>(grad(kConvDinit));
  Diag diag(NamesOf(kConvNames));
  diag.Attach(&p);
  OnDevice(x, "x", s.cu_host, [&] {
    const int64_t n = ConvParts(s.dim);
    RunParts(p, n, "conv backward (CPU)", NamesOf(kConvNames),
             [&](selscan_conv_problem* q, int64_t i) { return selscan_conv_backward_cpu_part(q, &g, i, n); });
  }, [&](auto& cc) { cc.Check(selscan_binding_cuda_conv_backward(&p, &g, &cc.call), "conv backward (CUDA)", diag); });
  return out;
}

Tensor ConvStep(const Tensor& state, const Tensor& x_in, const Tensor& weight_in, const OptT& bias_in,
                const OptT& state_index, bool silu) {
  const bind::Arg args[] = {ArgOf(state), ArgOf(x_in), ArgOf(weight_in), ArgOf(bias_in), ArgOf(state_index)};
  const Checked c = Check(Op::kConvStep, args, state_index);  // (CPU indices: their values too)
  const int64_t batch = c.k.s.batch, dim = c.k.s.dim, L = c.k.s.L, W = c.k.width;
  Tensor y = NewInOrderOf(x_in, SizesOf(x_in), x_in.scalar_type());
  if (batch == 0 || dim == 0 || L == 0) return y;
  // an empty cache: every row is padding, out 0 (selscan reads n_cache 0 as batch): Step's rule
  if (state.size(0) == 0) return Zero(y);
  const bool params_t = (c.k.flags & SELSCAN_CONV_PARAMS_T) != 0;  // else those in x's dtype widened
  const Tensor x = Readable(x_in), weight = Readable(params_t ? weight_in : AsF32(weight_in));
  const OptT bias = Readable(params_t ? bias_in : AsF32(bias_in));
  const Tensor sidx = state_index ? Contiguous(*state_index) : Tensor();
  // inputs read through a copy (a full broadcast, a weight / bias cast to float32, strided indices)
  // hide their overlap with conv_state from selscan's alias check: refused as Step refuses them
  auto read_copy = [&](const Tensor& in, const Tensor& used, const char* name) {
    CheckReadCopy(state, "conv_state", "conv step", in, used, name);
  };
  read_copy(x_in, x, "x");
  read_copy(weight_in, weight, "weight");
  if (bias_in) read_copy(*bias_in, *bias, "bias");
  if (state_index) read_copy(*state_index, sidx, "conv_state_indices");
  selscan_conv_step_problem s;
  std::memset(&s, 0, sizeof s);
  s.batch = batch; s.dim = dim; s.width = W; s.state_len = state.size(2); s.n_cache = state.size(0);
  s.seqlen = L;
  s.dtype = c.k.dtype;
  s.flags = (silu ? SELSCAN_CONV_SILU : 0u) | (params_t ? SELSCAN_CONV_PARAMS_T : 0u);
  s.state_index = state_index ? sidx.const_data_ptr<int32_t>() : nullptr;
  s.state = OutOperand<decltype(s.state)>(state, "conv_state");
  s.x = Operand<decltype(s.x)>(x);
  s.weight = Operand<decltype(s.weight)>(weight);
  s.bias = OptOperand<decltype(s.bias)>(bias);
  s.y = OutOperand<decltype(s.y)>(y, "out");
  if (x.dim() == 2) {  // (batch, dim): stride[2] is never stepped over (one token)
    s.x.stride[2] = 1;
    s.y.stride[2] = 1;
  }
  Diag diag(NamesOf(kConvStepNames));
  diag.Attach(&s);
  OnDevice(x, "x", OptT(), [&] {
    const int64_t n = StepParts(batch, dim);
    RunParts(s, n, "conv step (CPU)", NamesOf(kConvStepNames),
             [&](selscan_conv_step_problem* q, int64_t i) { return selscan_conv_step_cpu_part(q, i, n); });
  }, [&](auto& cc) { cc.Check(selscan_binding_cuda_conv_step(&s, &cc.call), "conv step (CUDA)", diag); });
  return y;
}

}  // namespace
}  // namespace selscan_torch

STABLE_TORCH_LIBRARY_IMPL(selscan, CPU, m) {
  m.impl("conv_fwd", TORCH_BOX(&selscan_torch::ConvForward));
  m.impl("conv_bwd", TORCH_BOX(&selscan_torch::ConvBackward));
  m.impl("conv_step", TORCH_BOX(&selscan_torch::ConvStep));
}

#ifdef WITH_CUDA
STABLE_TORCH_LIBRARY_IMPL(selscan, CUDA, m) {
  m.impl("conv_fwd", TORCH_BOX(&selscan_torch::ConvForward));
  m.impl("conv_bwd", TORCH_BOX(&selscan_torch::ConvBackward));
  m.impl("conv_step", TORCH_BOX(&selscan_torch::ConvStep));
}
#endif
