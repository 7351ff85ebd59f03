// step.cpp - selscan::step (the decode step, in place on state; inference only: selscan_torch/__init__.py).
#include "selscan_torch.h"

namespace selscan_torch {
namespace {

// A (batch, ngroups, N) B / C operand of the step, or (batch, N) as one group (the group stride is
// never stepped over; a non-zero one keeps "all strides 0" from arising).
template <typename ST>
ST StepBCOperand(const Tensor& t) {
  ST s = Operand<ST>(t);
  if (t.dim() == 2) {
    s.stride[2] = s.stride[1];
    s.stride[1] = std::max<int64_t>(1, t.numel());
  }
  return s;
}

Tensor Step(const Tensor& state, const Tensor& x_in, const Tensor& dt_in, const Tensor& A_in, const Tensor& B_in,
            const Tensor& C_in, const OptT& D_in, const OptT& z_in, const OptT& dt_bias_in, const OptT& state_index,
            bool dt_softplus, bool A_is_log) {
  const bind::Arg args[] = {ArgOf(state), ArgOf(x_in),    ArgOf(dt_in),      ArgOf(A_in),       ArgOf(B_in),
                            ArgOf(C_in),  ArgOf(D_in),    ArgOf(z_in),       ArgOf(dt_bias_in), ArgOf(state_index)};
  const Checked c = Check(Op::kStep, args, state_index);  // (CPU indices: their values too)
  const int64_t batch = c.k.s.batch, dim = c.k.s.dim, n_cache = c.k.n_cache, N = c.k.s.N, G = c.k.s.G;
  Tensor y = NewLike(x_in);
  if (batch == 0 || dim == 0) return y;
  // an empty cache: every row is padding (checked above on the host; on CUDA rows >= n_cache are
  // padding), so out is 0. Not selscan's call: its n_cache 0 means batch (issue 38, host run)
  if (n_cache == 0) return Zero(y);
  const Tensor x = Readable(x_in), dt = Readable(dt_in), A = Readable(A_in), B = Readable(B_in), C = Readable(C_in);
  const OptT D = Readable(D_in), z = Readable(z_in), dt_bias = Readable(dt_bias_in);  // float32 or x's dtype
  const Tensor sidx = state_index ? Contiguous(*state_index) : Tensor();
  auto read_copy = [&](const Tensor& in, const Tensor& used, const char* name) {  // none may overlap state
    CheckReadCopy(state, "state", "step", in, used, name);
  };
  read_copy(x_in, x, "x");
  read_copy(dt_in, dt, "dt");
  read_copy(A_in, A, "A");
  read_copy(B_in, B, "B");
  read_copy(C_in, C, "C");
  if (D_in) read_copy(*D_in, *D, "D");
  if (z_in) read_copy(*z_in, *z, "z");
  if (dt_bias_in) read_copy(*dt_bias_in, *dt_bias, "dt_bias");
  if (state_index) read_copy(*state_index, sidx, "state_batch_indices");
  selscan_step_problem s;
  std::memset(&s, 0, sizeof s);
  s.batch = batch; s.dim = dim; s.dstate = N; s.n_groups = G; s.n_cache = n_cache;
  s.dtype = c.k.dtype;
  s.flags = c.k.flags |  // D, dt_bias, state in x's dtype: SELSCAN_STEP_D_T, _DELTA_BIAS_T, _STATE_T
            (dt_softplus ? SELSCAN_DELTA_SOFTPLUS : 0u) | (A_is_log ? SELSCAN_STEP_A_LOG : 0u);  // A holds A_log
  s.state_index = state_index ? sidx.const_data_ptr<int32_t>() : nullptr;
  s.state = OutOperand<decltype(s.state)>(state, "state");
  s.u = Operand<decltype(s.u)>(x);  // mamba's x / dt are selscan's u / delta
  s.delta = Operand<decltype(s.delta)>(dt);
  s.A = Operand<decltype(s.A)>(A);
  s.B = StepBCOperand<decltype(s.B)>(B);
  s.C = StepBCOperand<decltype(s.C)>(C);
  s.D = OptOperand<decltype(s.D)>(D);
  s.z = OptOperand<decltype(s.z)>(z);
  s.delta_bias = OptOperand<decltype(s.delta_bias)>(dt_bias);
  s.y = OutOperand<decltype(s.y)>(y, "out");
  Diag diag(NamesOf(kStepNames));
  diag.Attach(&s);
  OnDevice(x, "x", OptT(), [&] {
    const int64_t n = StepParts(batch, dim);
    RunParts(s, n, "step (CPU)", NamesOf(kStepNames), [&](selscan_step_problem* q, int64_t i) { return selscan_step_cpu_part(q, i, n); });
  }, [&](auto& cc) { cc.Check(selscan_binding_cuda_step(&s, &cc.call), "step (CUDA)", diag); });
  return y;
}

}  // namespace
}  // namespace selscan_torch

STABLE_TORCH_LIBRARY_IMPL(selscan, CPU, m) { m.impl("step", TORCH_BOX(&selscan_torch::Step)); }

#ifdef WITH_CUDA
STABLE_TORCH_LIBRARY_IMPL(selscan, CUDA, m) { m.impl("step", TORCH_BOX(&selscan_torch::Step)); }
#endif
