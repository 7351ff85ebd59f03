// selscan_torch.cpp - selscan's selective scan as PyTorch 2 custom ops (TORCH_LIBRARY schemas).
//
//   selscan::fwd  (u, delta, A, B, C, D?, z?, delta_bias?, h0?, cu_seqlens?, delta_softplus,
//                  return_last_state, save_checkpoint) -> (y, last_state, checkpoint)
//   selscan::bwd  (u, delta, A, B, C, D?, z?, delta_bias?, h0?, cu_seqlens?, dy, dh_last?,
//                  checkpoint, delta_softplus, grad_mask[9]) -> (du, ddelta, dA, dB, dC, dD, dz,
//                  ddelta_bias, dh0)
//   selscan::step (state!, x, dt, A, B, C, D?, z?, dt_bias?, state_index?, dt_softplus,
//                  A_is_log=False) -> y
//                 (D, dt_bias, state: each float32 or x's dtype, passed as they are: selscan's
//                 SELSCAN_STEP_D_T / _DELTA_BIAS_T / _STATE_T for those in x's dtype, no
//                 conversion or copy kernel a call; a state in x's dtype is stepped in float32
//                 and stored rounded. A_is_log: A is Mamba's A_log, selscan's SELSCAN_STEP_A_LOG
//                 takes A = -exp(A_log) inside the step: no exp / neg kernels a token)
//
// Shapes are selscan's logical ones (mamba_ssm's): u (batch, dim, L), B/C (batch, G, N, L),
// (batch, N, L) (one group) or (dim, N) f32 (fixed), A (dim, N) f32, ... Every tensor is handed to selscan as a pointer plus
// its torch strides (no copies), except a tensor whose strides are all 0 (a full broadcast, which
// selscan's "all strides 0 = contiguous" convention cannot express): that one is made contiguous;
// and on CUDA builds without the channels-last kernels, the L-strided operands of a fast-kernel
// problem (>>unit-l).
// The Python side (selscan_torch/__init__.py) adds the fake kernels, autograd and mamba's API.
//
// CPU: selscan's parts API on at::parallel_for (bitwise the same for every thread count; the
// backward's reduce phase after all parts). CUDA (WITH_CUDA): the bindings' shared CUDA shim
// (bindings/common/selscan_binding_cuda.h, compiled in selscan_torch_cuda.cu) on the current
// stream; workspace and checkpoint from torch's allocator (>>dispatch).
#include <Python.h>

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <string>
#include <vector>

#ifdef WITH_CUDA
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#define SELSCAN_IMPLEMENTATION
#include "selscan.h"
#include "selscan_binding.h"       // bindings/common: the layer shared with the other bindings
#include "selscan_binding_cuda.h"  // bindings/common: their CUDA shim (no CUDA header; called WITH_CUDA only)

namespace selscan_torch {
namespace {

using at::Tensor;
using OptT = c10::optional<Tensor>;

// ---- selscan operands from torch tensors -----------------------------------------------------

namespace bind = selscan_binding;

// A selscan tensor (selscan_tensor for inputs, selscan_out_tensor for outputs) of t with the logical
// order of t's dims (the layer's rules: bind::Operand).
template <typename ST>
ST Operand(const Tensor& t, bool* full_broadcast = nullptr) {
  return bind::Operand<ST>(t.data_ptr(), t.dim(), t.sizes().data(), t.strides().data(), full_broadcast);
}

// A tensor selscan can read through its strides: unchanged unless it is a full broadcast.
Tensor Readable(const Tensor& t) {
  return bind::FullBroadcast(t.dim(), t.sizes().data(), t.strides().data()) ? t.contiguous() : t;
}
OptT Readable(const OptT& t) { return t.has_value() ? OptT(Readable(*t)) : OptT(); }

// A variable B / C operand: (batch, G, N, L) as it is, (batch, N, L) as one group (the group
// stride is never stepped over; a non-zero one keeps "all strides 0" from arising).
template <typename ST>
ST BCOperand(const Tensor& t) {
  if (t.dim() != 3) return Operand<ST>(t);
  ST s = Operand<ST>(t);
  s.stride[3] = s.stride[2];
  s.stride[2] = s.stride[1];
  s.stride[1] = std::max<int64_t>(1, t.numel());
  return s;
}

template <typename ST>
ST OptOperand(const OptT& t) {
  return t.has_value() ? Operand<ST>(*t) : bind::Absent<ST>();
}

std::string Shape(const Tensor& t) { return c10::str(t.sizes()); }

// ---- errors ----------------------------------------------------------------------------------

static_assert(SELSCAN_VERSION >= 200, "selscan_torch needs selscan v0.2 (const inputs, selscan_diag)");

// ---- >>harden-names: selscan's operand names -> the user's argument names, per op ----------
// selscan's diag names its own operands (the step's x is selscan's u, dt its delta, ...); errors
// name what the caller passed (bind::Names; a rule "overlaps <operand>" is renamed the same way).
using bind::NameMap;
using bind::Names;
using bind::NamesOf;
constexpr NameMap kFwdNames[] = {{"y", "out"},        {"h_last", "last_state"}, {"seqlen", "L"},
                                 {"dstate", "A"},     {"n_groups", "B"},         {"batch", "u"},
                                 {"n_seqs", "cu_seqlens"}};
using bind::kStepNames;  // x, dt, dt_bias, state_batch_indices, out, N (shared with selscan_tf)

// selscan's report of the failing operand (filled only on an error status), in the op's names.
struct Diag {
  selscan_diag d = {nullptr, nullptr, SELSCAN_RULE_NONE};
  Names names;
  Diag() = default;
  explicit Diag(Names n) : names(n) {}
  template <typename P>
  void Attach(P* p) { p->diag = &d; }
  std::string Text() const { return bind::DiagText(d, names); }
};

// selscan status -> Python exception: ValueError for validation failures (naming the argument
// where selscan's diag says it), TypeError for dtypes, NotImplementedError for what a backend
// cannot do, RuntimeError for CUDA failures.
void Raise(const bind::Error& e) {
  switch (e.kind) {
    case bind::ErrorKind::kNone: return;
    case bind::ErrorKind::kType: TORCH_CHECK_TYPE(false, e.message);
    case bind::ErrorKind::kNotImplemented: TORCH_CHECK_NOT_IMPLEMENTED(false, e.message);
    case bind::ErrorKind::kDevice: TORCH_CHECK(false, e.message);
    case bind::ErrorKind::kValue: TORCH_CHECK_VALUE(false, e.message);
  }
}
void CheckText(selscan_status st, const char* where, const std::string& diag_text, const char* cuda_text = "") {
  if (st != SELSCAN_OK) Raise(bind::ErrorOf(st, where, diag_text, "", cuda_text));
}
void Check(selscan_status st, const char* where, const Diag& diag, const char* cuda_text = "") {
  if (st != SELSCAN_OK) CheckText(st, where, diag.Text(), cuda_text);
}
void Check(const bind::Result& r, const char* where, const Names& names) {
  if (!r.ok()) Raise(bind::ErrorOf(r, where, names));
}
// A refusal of the binding's own checks in selscan's form (status, the argument, the rule).
void Refuse(selscan_status st, const char* where, const char* arg, const std::string& rule) {
  CheckText(st, where, std::string(" (argument '") + arg + "': " + rule + ")");
}

using Sizes = bind::Sizes;

// ---- the decode steps' parameters: float32 or x's dtype -------------------------------------------
// The steps' D / dt_bias (selscan::step) and weight / bias (selscan::conv_step) are float32 or x's
// dtype (a model in float16 / bfloat16: mamba_ssm's and transformers' decode; the common check's
// rule). The step's reach selscan as they are, each with its flag (SELSCAN_STEP_D_T,
// SELSCAN_STEP_DELTA_BIAS_T: read in x's dtype, converted on load; no conversion kernel a token).
// The conv step's have one flag for both (SELSCAN_CONV_PARAMS_T): both in x's dtype go as they
// are, a mix as float32 (the ones in x's dtype widened here: exact, one kernel each).
Tensor AsF32(const Tensor& t) { return t.scalar_type() == at::kFloat ? t : t.to(at::kFloat); }
OptT AsF32(const OptT& t) { return t.has_value() ? OptT(AsF32(*t)) : OptT(); }

// ---- >>args: the argument checks, bindings/common's (selscan_binding_args.h) ---------------------
// Every op's tensors are described (sizes, strides, dtype, device; no data) and checked by the
// common layer against selscan's operand tables and size rules; the fake kernels ask the same
// check through _C.check_args (selscan_torch/_checks.py: check_op), so a meta or fake call is
// refused in the same words. Errors name the caller's argument (the per-op name maps above).

enum class Op { kFwd = 0, kBwd, kStep, kConvFwd, kConvBwd, kConvStep };

bind::Type TypeOf(at::ScalarType st) {
  switch (st) {
    case at::kFloat: return bind::Type::kF32;
    case at::kHalf: return bind::Type::kF16;
    case at::kBFloat16: return bind::Type::kBF16;
    case at::kInt: return bind::Type::kI32;
    case at::kLong: return bind::Type::kI64;
    default: return bind::Type::kOther;
  }
}
// str(torch dtype): the name the fake kernels pass for a dtype (the same in both paths' messages)
const char* TypeName(at::ScalarType st) {
  switch (st) {
    case at::kFloat: return "torch.float32";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kDouble: return "torch.float64";
    case at::kLong: return "torch.int64";
    case at::kInt: return "torch.int32";
    case at::kShort: return "torch.int16";
    case at::kChar: return "torch.int8";
    case at::kByte: return "torch.uint8";
    case at::kBool: return "torch.bool";
    case at::kComplexHalf: return "torch.complex32";
    case at::kComplexFloat: return "torch.complex64";
    case at::kComplexDouble: return "torch.complex128";
    default: return c10::toString(st);
  }
}
int64_t DeviceKey(const c10::Device& d) {
  return (static_cast<int64_t>(d.type()) << 16) | static_cast<int64_t>(static_cast<uint16_t>(d.index() + 1));
}
std::string DeviceName(int64_t key) {
  return c10::Device(static_cast<c10::DeviceType>(key >> 16), static_cast<c10::DeviceIndex>((key & 0xffff) - 1)).str();
}
bool IsCudaKey(int64_t key) { return (key >> 16) == static_cast<int64_t>(c10::DeviceType::CUDA); }

bind::Arg ArgOf(const c10::Device& d, at::ScalarType st) {  // without its sizes
  bind::Arg a;
  a.present = true;
  a.type = TypeOf(st);
  a.type_name = TypeName(st);
  a.device = DeviceKey(d);
  a.host = d.is_cpu();
  return a;
}
bind::Arg ArgOf(const Tensor& t) {
  if (!t.defined()) return bind::Arg();
  bind::Arg a = ArgOf(t.device(), t.scalar_type());
  a.ndim = t.dim();
  a.sizes = t.sizes().data();
  a.strides = t.strides().data();
  return a;
}
bind::Arg ArgOf(const OptT& t) { return t.has_value() ? ArgOf(*t) : bind::Arg(); }

// selscan's conv operand names -> causal_conv1d's argument names (errors name what the caller passed)
constexpr NameMap kConvNames[] = {{"y", "out"},
                                  {"init_state", "initial_states"},
                                  {"final_state", "final_states"},
                                  {"dinit_state", "dinitial_states"},
                                  {"dfinal_state", "dfinal_states"},
                                  {"seqlen", "L"},
                                  {"width", "weight"},
                                  {"batch", "x"},
                                  {"n_seqs", "cu_seqlens"}};
constexpr NameMap kConvStepNames[] = {{"y", "out"},           {"state", "conv_state"}, {"state_index", "conv_state_indices"},
                                      {"width", "weight"},     {"state_len", "conv_state"}, {"n_cache", "conv_state"},
                                      {"batch", "x"}};

const char* WhereOf(Op op) {
  static const char* const where[] = {"forward", "backward", "step", "conv forward", "conv backward", "conv step"};
  return where[static_cast<int>(op)];
}
Names NamesOfOp(Op op) {
  switch (op) {
    case Op::kFwd: case Op::kBwd: return NamesOf(kFwdNames);
    case Op::kStep: return NamesOf(kStepNames);
    case Op::kConvFwd: case Op::kConvBwd: return NamesOf(kConvNames);
    default: return NamesOf(kConvStepNames);
  }
}
// The op's arguments in its schema's order (fwd: u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens;
// bwd: then dy, dh_last, checkpoint; step: state, x, dt, A, B, C, D, z, dt_bias, state_index;
// conv_fwd: x, weight, bias, init_state, cu_seqlens; conv_bwd: then dy, dfinal_state; conv_step:
// state, x, weight, bias, state_index), checked; values: the host offsets / state rows, or none.
bind::Refusal CheckArgs(Op op, const bind::Arg* a, const int64_t* cu_values, const int32_t* idx_values,
                        bind::Checked* k) {
  bind::Forms f;
  f.device_name = &DeviceName;
  f.names = NamesOfOp(op);
  switch (op) {
    case Op::kFwd: case Op::kBwd: {
      bind::ScanArgs s;
      s.u = a[0]; s.delta = a[1]; s.A = a[2]; s.B = a[3]; s.C = a[4]; s.D = a[5]; s.z = a[6]; s.delta_bias = a[7];
      s.h0 = a[8]; s.cu_seqlens = a[9]; s.cu_values = cu_values;
      if (op == Op::kBwd) {
        s.backward = true;
        s.dy = a[10]; s.dh_last = a[11]; s.checkpoint = a[12];
      }
      f.fixed_bc = f.groupless_bc = true;  // (dim, N) constant over time; (batch, N, L): one group
      return bind::CheckScanArgs(s, f, k);
    }
    case Op::kStep: {
      bind::StepArgs s;
      s.state = a[0]; s.u = a[1]; s.delta = a[2]; s.A = a[3]; s.B = a[4]; s.C = a[5]; s.D = a[6]; s.z = a[7];
      s.delta_bias = a[8]; s.state_index = a[9]; s.index_values = idx_values;
      f.groupless_bc = true;  // (batch, N): one group
      return bind::CheckStepArgs(s, f, k);
    }
    case Op::kConvFwd: case Op::kConvBwd: {
      bind::ConvArgs s;
      s.x = a[0]; s.weight = a[1]; s.bias = a[2]; s.init_state = a[3]; s.cu_seqlens = a[4]; s.cu_values = cu_values;
      if (op == Op::kConvBwd) {
        s.backward = true;
        s.dy = a[5]; s.dfinal_state = a[6];
      }
      return bind::CheckConvArgs(s, f, k);
    }
    default: {
      bind::ConvStepArgs s;
      s.state = a[0]; s.x = a[1]; s.weight = a[2]; s.bias = a[3]; s.state_index = a[4]; s.index_values = idx_values;
      return bind::CheckConvStepArgs(s, f, k);
    }
  }
}

// The op's tensors checked (the host values of cu_seqlens / state rows where they are CPU tensors of
// the right dtype): the sizes found, or the framework's error.
struct Checked {
  bind::Checked k;
  OptT host;  // the contiguous host copy of cu_seqlens / state_index whose values were checked
};
Checked Check(Op op, const bind::Arg* args, const OptT& values) {
  Checked c;
  const int64_t* cu = nullptr;
  const int32_t* idx = nullptr;
  if (values && values->defined() && values->is_cpu() && values->dim() == 1) {
    const bool rows = op == Op::kStep || op == Op::kConvStep;
    if (!rows && values->scalar_type() == at::kLong) {
      c.host = values->contiguous();
      cu = c.host->data_ptr<int64_t>();
    } else if (rows && values->scalar_type() == at::kInt) {
      c.host = values->contiguous();
      idx = c.host->data_ptr<int32_t>();
    }
  }
  const bind::Refusal r = CheckArgs(op, args, cu, idx, &c.k);
  if (!r.ok()) Raise(bind::ErrorOf(r, WhereOf(op), NamesOfOp(op)));
  return c;
}
Checked CheckScan(Op op, const Tensor& u, const Tensor& delta, const Tensor& A, const Tensor& B, const Tensor& C,
                  const OptT& D, const OptT& z, const OptT& delta_bias, const OptT& h0, const OptT& cu_seqlens,
                  const Tensor& dy = Tensor(), const OptT& dh_last = OptT(), const Tensor& checkpoint = Tensor()) {
  const bind::Arg args[] = {ArgOf(u), ArgOf(delta), ArgOf(A), ArgOf(B), ArgOf(C), ArgOf(D), ArgOf(z),
                            ArgOf(delta_bias), ArgOf(h0), ArgOf(cu_seqlens), ArgOf(dy), ArgOf(dh_last),
                            ArgOf(checkpoint)};
  return Check(op, args, cu_seqlens);
}

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

// ---- outputs ----------------------------------------------------------------------------------

// A new tensor of torch's allocator on `like`'s device, straight from ATen's empty_cpu / empty_cuda
// (the allocation at::empty makes, without its two dispatcher passes: the host cost of a short
// CUDA call is mostly such overhead, and the ops make up to 10 outputs and placeholders a call).
Tensor NewTensor(at::IntArrayRef sizes, at::ScalarType dtype, const Tensor& like) {
#ifdef WITH_CUDA
  if (like.is_cuda()) return at::detail::empty_cuda(sizes, dtype, like.device(), std::nullopt);
#endif
  if (like.is_cpu()) return at::detail::empty_cpu(sizes, dtype);
  return at::empty(sizes, like.options().dtype(dtype));
}
Tensor NewF32(at::IntArrayRef sizes, const Tensor& like) { return NewTensor(sizes, at::kFloat, like); }
// at::empty_like(t): a contiguous t's layout directly, any other through empty_like (its strides)
Tensor NewLike(const Tensor& t) {
  return t.is_contiguous() ? NewTensor(t.sizes(), t.scalar_type(), t) : at::empty_like(t);
}

// A byte buffer of torch's allocator on `like`'s device (the CPU parts) holding `bytes` bytes:
// selscan's sizes include the slack it needs to align any pointer up inside, so the buffer is
// handed over as it comes.
struct Workspace {
  Tensor buf;
  void* ptr = nullptr;
  size_t bytes = 0;
};
Workspace MakeWorkspace(size_t bytes, const Tensor& like) {
  Workspace w;
  w.bytes = bytes;
  if (bytes == 0) return w;
  w.buf = NewTensor({static_cast<int64_t>(bytes)}, at::kByte, like);
  w.ptr = w.buf.data_ptr();
  return w;
}

// Parts for the CPU pool: one per intra-op thread (results do not depend on it).
int64_t NumParts() { return std::max<int64_t>(1, at::get_num_threads()); }
// The decode steps' parts: blocks of 256 channels of a row, at most one per thread.
int64_t StepParts(int64_t batch, int64_t dim) { return bind::StepParts(NumParts(), batch, dim); }

// Runs fn(&q, i) for the parts i = 0 .. n_parts - 1 on the intra-op pool (bind::RunParts), then
// raises the first failing part's error, naming what selscan's diag names.
template <typename P, typename Fn>
void RunParts(const P& p, int64_t n_parts, const char* where, const Names& names, const Fn& fn) {
  auto pool = [](int64_t n, const auto& body) {
    at::parallel_for(0, n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; i++) body(i);
    });
  };
  Check(bind::RunParts(p, n_parts, pool, fn), where, names);
}

// ---- >>unit-l: L-strided operands of the CUDA fast kernels' problems, copied ------------------
//
// The CUDA fast kernels read unit L strides only, unless the channels-last kernels are built
// (SELSCAN_TORCH_CHANNELS_LAST, off by default for their compile time): an L-strided operand
// (MambaVision's delta, a (b l, d) -> b d l view; a gradient through a transpose) would send the
// whole problem to the general kernels. A contiguous copy is cheaper: MambaVision-T's 6 layers'
// backward ran 1.03 ms on the general kernels (+ local pass) against 0.47 ms fast (bench/NOTES.md
// MODELS-v5). Which problems the fast kernels take is selscan's plan's answer
// (selscan_binding_cuda_fast_forward), never restated here: the forward copies u, delta, z, B, C
// where the plan takes the problem with unit L strides and not as it is (ForwardAutograd's copies
// are what autograd saves, so the backward has them too), the backward dy; y is then contiguous,
// like the u copy (the fake kernel asks the same question: _C.fwd_unit_l).

// (batch, dim, L) u / delta / z and (batch, [G,] N, L) B / C: L is the last dim.
bool LStrided(const bind::Arg& t) { return t.present && t.ndim > 0 && t.strides && t.strides[t.ndim - 1] != 1; }
bool LStrided(const Tensor& t) { return t.dim() > 0 && t.sym_stride(-1) != 1; }
bool LStrided(const OptT& t) { return t.has_value() && t->defined() && LStrided(*t); }
Tensor UnitL(const Tensor& t) { return LStrided(t) ? t.contiguous() : t; }
OptT UnitL(const OptT& t) { return LStrided(t) ? OptT(t->contiguous()) : t; }

// Whether the forward of args (the fwd schema's order, checked: k) copies u, delta, z, B and C to
// unit L strides: a CUDA u, one of them L-strided, and selscan's plan takes the problem on its fast
// kernels with unit L strides but not as it is. y_like: the strides y has (u's; the backward: dy's).
bool WantsUnitL(const bind::Arg* a, const bind::Checked& k, const bind::Arg* y_like = nullptr) {
#ifdef WITH_CUDA
  const bind::Arg& yl = y_like ? *y_like : a[0];
  if (!IsCudaKey(a[0].device) || a[9].present || k.s.Empty() ||
      !(LStrided(a[0]) || LStrided(a[1]) || LStrided(a[6]) || LStrided(a[3]) || LStrided(a[4]) || LStrided(yl)))
    return false;
  static const float kSome[1] = {0.f};  // the plan tests pointers for NULL only
  auto operand = [&](const bind::Arg& t, bool unit, auto* st, bool bc) {
    using ST = std::remove_pointer_t<decltype(st)>;
    if (!t.present) return bind::Absent<ST>();
    ST o = bind::Operand<ST>(const_cast<float*>(kSome), t.ndim, t.sizes, t.strides);
    if (bc && t.ndim == 3) {  // (batch, N, L): one group (BCOperand)
      o.stride[3] = o.stride[2];
      o.stride[2] = o.stride[1];
      o.stride[1] = std::max<int64_t>(1, bind::Numel(t.ndim, t.sizes));
    }
    if (unit) std::memset(o.stride, 0, sizeof o.stride);  // contiguous
    return o;
  };
  auto fast = [&](bool unit) {
    selscan_problem p = bind::MakeProblem(k.s, k.dtype, false);
    p.u = operand(a[0], unit, &p.u, false);
    p.delta = operand(a[1], unit, &p.delta, false);
    p.A = operand(a[2], unit, &p.A, false);
    p.B = operand(a[3], unit, &p.B, true);
    p.C = operand(a[4], unit, &p.C, true);
    p.D = operand(a[5], unit, &p.D, false);
    p.z = operand(a[6], unit, &p.z, false);
    p.delta_bias = operand(a[7], unit, &p.delta_bias, false);
    p.h0 = operand(a[8], unit, &p.h0, false);
    p.y = operand(yl, unit, &p.y, false);
    return selscan_binding_cuda_fast_forward(&p) != 0;
  };
  return fast(true) && !fast(false);
#else
  (void)a, (void)k, (void)y_like;
  return false;  // no CUDA kernels: a CUDA u is refused (NeedKernels), not copied
#endif
}

// The args of tensors whose sizes may be symbolic (AOTAutograd runs the autograd kernel on the
// fake tensors of a dynamic-shape trace): concrete sizes and strides (guard_int: the trace is
// specialized on them, as the plan's answer depends on them).
struct ConcreteArgs {
  std::vector<std::vector<int64_t>> sizes, strides;
  std::vector<bind::Arg> a;
  explicit ConcreteArgs(std::initializer_list<const Tensor*> ts) {
    sizes.reserve(ts.size());
    strides.reserve(ts.size());
    for (const Tensor* t : ts) {
      bind::Arg x;
      if (t && t->defined()) {
        x = ArgOf(t->device(), t->scalar_type());
        std::vector<int64_t> sz, st;
        for (const c10::SymInt& v : t->sym_sizes()) sz.push_back(v.guard_int(__FILE__, __LINE__));
        for (const c10::SymInt& v : t->sym_strides()) st.push_back(v.guard_int(__FILE__, __LINE__));
        sizes.push_back(std::move(sz));
        strides.push_back(std::move(st));
        x.ndim = static_cast<int64_t>(sizes.back().size());
        x.sizes = sizes.back().data();
        x.strides = strides.back().data();
      }
      a.push_back(x);
    }
  }
};
const Tensor* Ptr(const OptT& t) { return t.has_value() && t->defined() ? &*t : nullptr; }

// Those of u, delta, z, B, C whose L stride is not 1 replaced by contiguous copies.
void ToUnitL(Tensor& u, Tensor& delta, Tensor& B, Tensor& C, OptT& z) {
  u = UnitL(u);
  delta = UnitL(delta);
  z = UnitL(z);
  B = UnitL(B);
  C = UnitL(C);
}

// ---- >>dispatch: one call on its tensors' device ------------------------------------------------

// A CUDA tensor reaching a build without CUDA kernels: refused, naming the argument.
void NeedKernels(const Tensor& t, const char* name) {
#ifndef WITH_CUDA
  TORCH_CHECK(!t.is_cuda(), "selscan: this build of selscan_torch has no CUDA kernels (built without nvcc or with "
              "SELSCAN_TORCH_CPU_ONLY=1); ", name, " is on ", t.device());
#else
  (void)t;
  (void)name;
#endif
}

#ifdef WITH_CUDA
// One call through the CUDA shim on `like`'s device and current stream (a selscan_binding_cuda_call):
// the workspace from torch's caching allocator when selscan asks for one (its workspace_alloc: after
// selscan's checks, only when the call needs a workspace on this device, exactly its size), the
// packed offsets' device copy (cu_host: their host copy, or none). An allocation error is kept and
// rethrown once selscan has returned (no exception crosses its frames). Both tensors go when the
// call has been enqueued: torch's caching allocator is stream-ordered.
class CudaCall {
 public:
  CudaCall(const Tensor& like, const OptT& cu_host) : guard_(like.device()), like_(like) {
    call.stream = static_cast<void*>(c10::cuda::getCurrentCUDAStream(like.device().index()).stream());
    call.workspace_alloc = &CudaCall::Alloc;
    call.workspace_ctx = this;
    if (cu_host) {
      cu_dev_ = cu_host->to(like.device(), /*non_blocking=*/true);
      call.cu_seqlens_device = cu_dev_.data_ptr<int64_t>();
    }
  }
  CudaCall(const CudaCall&) = delete;
  CudaCall& operator=(const CudaCall&) = delete;
  // Raises what failed: torch's allocation error first, then selscan's status (with the CUDA error's text).
  void Check(selscan_status st, const char* where, const Diag& diag) const {
    if (error_) std::rethrow_exception(error_);
    selscan_torch::Check(st, where, diag, call.cuda_error_text);
  }
  selscan_binding_cuda_call call = {};

 private:
  static void* Alloc(void* ctx, size_t bytes) {
    auto* c = static_cast<CudaCall*>(ctx);
    try {
      c->ws_ = NewTensor({static_cast<int64_t>(bytes)}, at::kByte, c->like_);
      return c->ws_.data_ptr();
    } catch (...) {
      c->error_ = std::current_exception();
      return nullptr;
    }
  }
  const c10::cuda::CUDAGuard guard_;
  const Tensor& like_;
  Tensor cu_dev_, ws_;
  std::exception_ptr error_;
};
#endif

// The device axis, written once for every op: on_cuda(CudaCall&) for a CUDA x (this build's
// kernels; `name` names x in the refusal of a build without them), on_cpu() otherwise.
template <typename OnCpu, typename OnCuda>
void OnDevice(const Tensor& x, const char* name, const OptT& cu_host, const OnCpu& on_cpu, const OnCuda& on_cuda) {
  if (!x.is_cuda()) return on_cpu();
  NeedKernels(x, name);
#ifdef WITH_CUDA
  CudaCall c(x, cu_host);
  on_cuda(c);
#else
  (void)cu_host;
  (void)on_cuda;
#endif
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
    for (int i = 0; i < kNumGrads; i++)
      if (want[i] && out[i].numel()) out[i].zero_();
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

// ---- decode step ------------------------------------------------------------------------------

// An input read through a copy (a full broadcast made dense, strided indices made contiguous):
// selscan's alias check sees the copy, and updating the in-place output (out) would change the
// caller's tensor behind its back (issue 38). Refused where it shares a byte with out, as selscan
// refuses the tensor itself (the Python wrapper's own copies: _checks.state_alias_refused).
void CheckReadCopy(const Tensor& out, const char* out_name, const char* where, const Tensor& in, const Tensor& used,
                   const char* name) {
  if (used.is_same(in) ||
      !bind::ElementsMeet(in.data_ptr(), in.element_size(), in.dim(), in.sizes().data(), in.strides().data(),
                          out.data_ptr(), out.element_size(), out.dim(), out.sizes().data(), out.strides().data()))
    return;
  const std::string n = name;
  Refuse(SELSCAN_ERR_ALIAS, where, out_name, "overlaps " + n + "; updating " + out_name + " in place would change " +
         n + ": pass " + n + " with its own memory, e.g. " + n + ".clone()");
}

// An output operand: never "all strides 0" for more than one element (selscan would read that as
// contiguous and write past the tensor).
template <typename ST>
ST OutOperand(const Tensor& t, const char* name) {
  ST s;
  TORCH_CHECK_VALUE(bind::OutOperand<ST>(t.data_ptr(), t.dim(), t.sizes().data(), t.strides().data(), &s),
                    "selscan: ", name, " has all strides 0 (overlapping elements)");
  return s;
}

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
  if (n_cache == 0) return y.zero_();
  const Tensor x = Readable(x_in), dt = Readable(dt_in), A = Readable(A_in), B = Readable(B_in), C = Readable(C_in);
  const OptT D = Readable(D_in), z = Readable(z_in), dt_bias = Readable(dt_bias_in);  // float32 or x's dtype
  const Tensor sidx = state_index ? state_index->contiguous() : Tensor();
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
  s.state_index = state_index ? sidx.data_ptr<int32_t>() : nullptr;
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

const c10::TypedOperatorHandle<FwdOut(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                      const OptT&, const OptT&, const OptT&, const OptT&, const OptT&, bool, bool,
                                      bool)>&
FwdOp() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("selscan::fwd", "")
                             .typed<FwdOut(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                           const OptT&, const OptT&, const OptT&, const OptT&, const OptT&, bool,
                                           bool, bool)>();
  return op;
}

const c10::TypedOperatorHandle<std::vector<Tensor>(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                   const Tensor&, const OptT&, const OptT&, const OptT&, const OptT&,
                                                   const OptT&, const Tensor&, const OptT&, const Tensor&, bool,
                                                   at::IntArrayRef)>&
BwdOp() {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("selscan::bwd", "")
          .typed<std::vector<Tensor>(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                     const OptT&, const OptT&, const OptT&, const OptT&, const OptT&, const Tensor&,
                                     const OptT&, const Tensor&, bool, at::IntArrayRef)>();
  return op;
}

inline OptT Opt(const Tensor& t) { return t.defined() ? OptT(t) : OptT(); }

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
    if (u_in.is_cuda() && !cu_seqlens.has_value()) {  // (the CPU kernels take any strides; packed: never fast)
      const ConcreteArgs ca({&u_in, &delta_in, &A, &B_in, &C_in, Ptr(D), Ptr(z_in), Ptr(delta_bias), Ptr(h0), nullptr});
      // the op's checks first, on the user's tensors (errors name them, not the copies)
      const Checked c = Check(Op::kFwd, ca.a.data(), OptT());
      if (WantsUnitL(ca.a.data(), c.k)) ToUnitL(u, delta, B, C, z);
    }
    auto out = FwdOp().call(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, delta_softplus, return_last_state,
                            /*save_checkpoint=*/true);
    const Tensor& checkpoint = std::get<2>(out);
    ctx->save_for_backward({u, delta, A, B, C, D.value_or(Tensor()), z.value_or(Tensor()),
                            delta_bias.value_or(Tensor()), h0.value_or(Tensor()), cu_seqlens.value_or(Tensor()),
                            checkpoint});
    ctx->saved_data["softplus"] = delta_softplus;
    // which of the 9 differentiable arguments are present (autograd's edges count only those)
    int64_t present = 0;
    const OptT* opt[4] = {&D, &z, &delta_bias, &h0};
    for (int i = 0; i < 4; i++)
      if (opt[i]->has_value() && (*opt[i])->defined()) present |= int64_t(1) << i;
    ctx->saved_data["present"] = present;
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
    // grad_mask over the 9 differentiable arguments; edge index = count of the present ones before
    std::vector<int64_t> mask(9, 0);
    size_t edge = 0;
    for (int i = 0; i < 9; i++) {
      const bool here = i < 5 || ((present >> (i - 5)) & 1);
      if (here) mask[i] = ctx->needs_input_grad(edge++) ? 1 : 0;
    }
    torch::autograd::variable_list out(12);  // one per forward argument (after ctx)
    bool any = false;
    for (int i = 0; i < 9; i++) any = any || mask[i];
    if (!any) return out;
    if (!dy.defined()) dy = at::zeros_like(u);  // a loss on last_state alone
    // >>unit-l: an L-strided dy (a gradient through a transpose: MambaVision's y) copied; the saved
    // operands are the forward's unit-L copies
    if (dy.dim() == 3 && u.is_cuda() && !saved[9].defined() && LStrided(dy)) {
      const ConcreteArgs ca({&saved[0], &saved[1], &saved[2], &saved[3], &saved[4], &saved[5], &saved[6], &saved[7],
                             &saved[8], nullptr, &dy});
      const Checked c = Check(Op::kFwd, ca.a.data(), OptT());
      if (WantsUnitL(ca.a.data(), c.k, &ca.a[10])) dy = UnitL(dy);
    }
    auto g = BwdOp().call(saved[0], saved[1], saved[2], saved[3], saved[4], Opt(saved[5]), Opt(saved[6]),
                          Opt(saved[7]), Opt(saved[8]), Opt(saved[9]), dy, Opt(dlast), saved[10], softplus, mask);
    for (int i = 0; i < 9; i++)
      if (mask[i]) out[i] = g[i];
    return out;
  }
};

FwdOut ForwardAutograd(const Tensor& u, const Tensor& delta, const Tensor& A, const Tensor& B, const Tensor& C,
                       const OptT& D, const OptT& z, const OptT& delta_bias, const OptT& h0, const OptT& cu_seqlens,
                       bool delta_softplus, bool return_last_state, bool save_checkpoint) {
  bool needs_grad = false;
  if (at::GradMode::is_enabled()) {
    needs_grad = u.requires_grad() || delta.requires_grad() || A.requires_grad() || B.requires_grad() ||
                 C.requires_grad();
    for (const OptT* t : {&D, &z, &delta_bias, &h0})
      needs_grad = needs_grad || (t->has_value() && (*t)->defined() && (*t)->requires_grad());
  }
  if (!needs_grad) {  // nothing to record: straight to the kernel
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
// selscan::bwd is not differentiable: with grad mode on (a backward with create_graph=True) and an
// input requiring grad, its outputs hang off ScanBackwardFunction, whose backward raises. A double
// backward through selective_scan_fn is an error, never silent zeros; a first backward with
// create_graph=True that is not differentiated again works as before.
// selscan::step is inference-only: with grad mode on, an input requiring grad is refused before
// anything is written (an output claiming requires_grad would get no gradient). The step's
// in-place update bumps state's version counter (autograd's check on tensors saved for backward).

class ScanBackwardFunction : public torch::autograd::Function<ScanBackwardFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const Tensor& u,
                                                const Tensor& delta, const Tensor& A, const Tensor& B,
                                                const Tensor& C, const OptT& D, const OptT& z,
                                                const OptT& delta_bias, const OptT& h0, const OptT& cu_seqlens,
                                                const Tensor& dy, const OptT& dh_last, const Tensor& checkpoint,
                                                bool delta_softplus, std::vector<int64_t> grad_mask) {
    (void)ctx;
    at::AutoDispatchBelowADInplaceOrView guard;
    return BwdOp().call(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, dy, dh_last, checkpoint, delta_softplus,
                        grad_mask);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    (void)ctx;
    (void)grads;
    TORCH_CHECK(false, "selscan: double backward (differentiating the gradients of selective_scan_fn, e.g. after "
                "create_graph=True) is not supported: selscan's backward is not differentiable");
    return {};
  }
};

bool AnyRequiresGrad(std::initializer_list<const Tensor*> ts, std::initializer_list<const OptT*> opts) {
  for (const Tensor* t : ts)
    if (t->defined() && t->requires_grad()) return true;
  for (const OptT* t : opts)
    if (t->has_value() && (*t)->defined() && (*t)->requires_grad()) return true;
  return false;
}

std::vector<Tensor> BackwardAutograd(const Tensor& u, const Tensor& delta, const Tensor& A, const Tensor& B,
                                     const Tensor& C, const OptT& D, const OptT& z, const OptT& delta_bias,
                                     const OptT& h0, const OptT& cu_seqlens, const Tensor& dy, const OptT& dh_last,
                                     const Tensor& checkpoint, bool delta_softplus, at::IntArrayRef grad_mask) {
  if (at::GradMode::is_enabled() &&
      AnyRequiresGrad({&u, &delta, &A, &B, &C, &dy, &checkpoint}, {&D, &z, &delta_bias, &h0, &dh_last}))
    return ScanBackwardFunction::apply(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, dy, dh_last, checkpoint,
                                       delta_softplus, grad_mask.vec());
  at::AutoDispatchBelowADInplaceOrView guard;
  return BwdOp().call(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, dy, dh_last, checkpoint, delta_softplus,
                      grad_mask);
}

const c10::TypedOperatorHandle<Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&, const OptT&, const OptT&, const OptT&, const OptT&, bool, bool)>&
StepOp() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("selscan::step", "")
                             .typed<Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                           const Tensor&, const OptT&, const OptT&, const OptT&, const OptT&, bool,
                                           bool)>();
  return op;
}

Tensor StepAutograd(const Tensor& state, const Tensor& x, const Tensor& dt, const Tensor& A, const Tensor& B,
                    const Tensor& C, const OptT& D, const OptT& z, const OptT& dt_bias, const OptT& state_index,
                    bool dt_softplus, bool A_is_log) {
  if (at::GradMode::is_enabled()) {
    const std::pair<const char*, const Tensor*> args[] = {{"state", &state}, {"x", &x}, {"dt", &dt}, {"A", &A},
                                                          {"B", &B},         {"C", &C}};
    const std::pair<const char*, const OptT*> opts[] = {{"D", &D}, {"z", &z}, {"dt_bias", &dt_bias}};
    auto refuse = [](const char* name) {
      TORCH_CHECK(false, "selscan: the decode step (selective_state_update) is inference-only (no autograd), but ",
                  name, " requires grad; call it under torch.no_grad() / torch.inference_mode() or pass ", name,
                  ".detach()");
    };
    for (const auto& a : args)
      if (a.second->requires_grad()) refuse(a.first);
    for (const auto& a : opts)
      if (a.second->has_value() && (*a.second)->defined() && (*a.second)->requires_grad()) refuse(a.first);
  }
  TORCH_CHECK_VALUE(!state.is_inference() || c10::InferenceMode::is_enabled(),
                    "selscan: state is an inference tensor (made under torch.inference_mode()); an in-place update "
                    "of it must run under torch.inference_mode() too");
  Tensor y;
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    y = StepOp().call(state, x, dt, A, B, C, D, z, dt_bias, state_index, dt_softplus, A_is_log);
  }
  torch::autograd::impl::bump_version(state);
  return y;
}

std::string CpuBackend() { return selscan_cpu_backend(); }
// whether the CUDA kernels take any L stride on the fast path (SELSCAN_TORCH_CHANNELS_LAST builds)
bool CudaChannelsLast() {
#ifdef WITH_CUDA
  return selscan_binding_cuda_channels_last() != 0;
#else
  return false;
#endif
}

}  // namespace
}  // namespace selscan_torch

TORCH_LIBRARY(selscan, m) {
  m.def("fwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, Tensor? delta_bias, "
        "Tensor? h0, Tensor? cu_seqlens, bool delta_softplus, bool return_last_state, bool save_checkpoint) "
        "-> (Tensor y, Tensor last_state, Tensor checkpoint)");
  m.def("bwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, Tensor? delta_bias, "
        "Tensor? h0, Tensor? cu_seqlens, Tensor dy, Tensor? dh_last, Tensor checkpoint, bool delta_softplus, "
        "int[] grad_mask) -> Tensor[]");
  m.def("step(Tensor(a!) state, Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, "
        "Tensor? dt_bias, Tensor? state_index, bool dt_softplus, bool A_is_log=False) -> Tensor");
  m.def("cpu_backend() -> str", &selscan_torch::CpuBackend);
  m.def("cuda_channels_last() -> bool", &selscan_torch::CudaChannelsLast);
}

TORCH_LIBRARY_IMPL(selscan, CPU, m) {
  m.impl("fwd", &selscan_torch::Forward);
  m.impl("bwd", &selscan_torch::Backward);
  m.impl("step", &selscan_torch::Step);
}

TORCH_LIBRARY_IMPL(selscan, Autograd, m) {
  m.impl("fwd", &selscan_torch::ForwardAutograd);
  m.impl("bwd", &selscan_torch::BackwardAutograd);
  m.impl("step", &selscan_torch::StepAutograd);
}

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(selscan, CUDA, m) {
  m.impl("fwd", &selscan_torch::Forward);
  m.impl("bwd", &selscan_torch::Backward);
  m.impl("step", &selscan_torch::Step);
}
#endif

// ============================================================================================
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
// (dim, batch * L) matrix). conv_fwd's autograd is C++ (ConvFunction, like the scan's). The Python
// side (selscan_torch/conv.py) adds fake kernels and causal_conv1d's API.
// ============================================================================================

namespace selscan_torch {
namespace {

// A dense tensor of `sizes` whose memory order is t's (strides sorted, largest first; ties keep the
// logical order): empty_like's rule for tensors that are not dense (a view such as xz[:, :d]).
Tensor NewInOrderOf(const Tensor& t, at::IntArrayRef sizes, at::ScalarType dtype) {
  const int64_t nd = t.dim();
  std::vector<int64_t> perm(static_cast<size_t>(nd));
  for (int64_t i = 0; i < nd; i++) perm[static_cast<size_t>(i)] = i;
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
    const int64_t sa = t.size(a) == 1 ? 0 : t.stride(a), sb = t.size(b) == 1 ? 0 : t.stride(b);
    return sa > sb;
  });
  bool identity = true;
  for (int64_t i = 0; i < nd; i++) identity = identity && perm[static_cast<size_t>(i)] == i;
  if (identity) return NewTensor(sizes, dtype, t);
  std::vector<int64_t> psizes(static_cast<size_t>(nd)), inv(static_cast<size_t>(nd));
  for (int64_t i = 0; i < nd; i++) {
    psizes[static_cast<size_t>(i)] = sizes[static_cast<size_t>(perm[static_cast<size_t>(i)])];
    inv[static_cast<size_t>(perm[static_cast<size_t>(i)])] = i;
  }
  return NewTensor(psizes, dtype, t).permute(inv);
}

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
    p.cu_seqlens = cu_host->data_ptr<int64_t>();
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
  Tensor y = out_dim_major ? NewTensor({s.dim, s.batch, s.L}, dtype, x).permute({1, 0, 2})
                           : NewInOrderOf(x, x.sizes(), dtype);
  Tensor fin = return_final_state ? NewTensor({s.rows, s.dim, s.W - 1}, dtype, x) : NewTensor({0}, dtype, x);
  if (s.batch == 0 || s.dim == 0 || s.L == 0) {  // nothing to convolve: each row's state passes through
    if (return_final_state) {
      if (init) fin.copy_(*init);
      else fin.zero_();
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
                                 const OptT& dfinal_in, bool silu, at::IntArrayRef grad_mask) {
  const ConvSizes s = CheckConv(Op::kConvBwd, x_in, weight_in, bias_in, init_in, cu_seqlens, dy_in, dfinal_in);
  TORCH_CHECK_VALUE(grad_mask.size() == kConvNumGrads, "selscan: grad_mask must have 4 entries, got ",
                    grad_mask.size());
  const Tensor x = Readable(x_in), weight = Readable(weight_in), dy = Readable(dy_in);
  const OptT bias = Readable(bias_in), init = Readable(init_in), dfinal = Readable(dfinal_in);
  NeedKernels(x, "x");
  const auto dtype = x.scalar_type();
  bool want[kConvNumGrads];
  for (int i = 0; i < kConvNumGrads; i++) want[i] = grad_mask[static_cast<size_t>(i)] != 0;
  std::vector<Tensor> out(kConvNumGrads);
  // dx in dy's memory order: the gradient flows on in the layout the caller's backward produced
  // (the fused block's channel-major dy gives a channel-major dx it concatenates without a transpose)
  out[kConvDx] = want[kConvDx] ? NewInOrderOf(dy, x.sizes(), dtype) : NewF32({0}, x);
  out[kConvDweight] = want[kConvDweight] ? NewF32({s.dim, s.W}, x) : NewF32({0}, x);
  out[kConvDbias] = want[kConvDbias] ? NewF32({s.dim}, x) : NewF32({0}, x);
  out[kConvDinit] = want[kConvDinit] ? NewTensor({s.rows, s.dim, s.W - 1}, dtype, x) : NewF32({0}, x);
  if (s.batch == 0 || s.dim == 0 || s.L == 0) {  // zeros; dinit_state = dfinal_state
    for (int i = 0; i < kConvNumGrads; i++)
      if (want[i] && out[i].numel()) out[i].zero_();
    if (want[kConvDinit] && dfinal && out[kConvDinit].numel()) out[kConvDinit].copy_(*dfinal);
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
  Tensor y = NewInOrderOf(x_in, x_in.sizes(), x_in.scalar_type());
  if (batch == 0 || dim == 0 || L == 0) return y;
  // an empty cache: every row is padding, out 0 (selscan reads n_cache 0 as batch): Step's rule
  if (state.size(0) == 0) return y.zero_();
  const bool params_t = (c.k.flags & SELSCAN_CONV_PARAMS_T) != 0;  // else those in x's dtype widened
  const Tensor x = Readable(x_in), weight = Readable(params_t ? weight_in : AsF32(weight_in));
  const OptT bias = Readable(params_t ? bias_in : AsF32(bias_in));
  const Tensor sidx = state_index ? state_index->contiguous() : Tensor();
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
  s.state_index = state_index ? sidx.data_ptr<int32_t>() : nullptr;
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

// ---- conv_fwd's autograd (C++, the Autograd key; the scan's ScanFunction pattern) ----------------

using ConvFwdOut = std::tuple<Tensor, Tensor>;
using ConvFwdSig = ConvFwdOut(const Tensor&, const Tensor&, const OptT&, const OptT&, const OptT&, bool, bool, bool);
using ConvBwdSig = std::vector<Tensor>(const Tensor&, const Tensor&, const OptT&, const OptT&, const OptT&,
                                       const Tensor&, const OptT&, bool, at::IntArrayRef);

const c10::TypedOperatorHandle<ConvFwdSig>& ConvFwdOp() {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("selscan::conv_fwd", "").typed<ConvFwdSig>();
  return op;
}
const c10::TypedOperatorHandle<ConvBwdSig>& ConvBwdOp() {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("selscan::conv_bwd", "").typed<ConvBwdSig>();
  return op;
}

class ConvFunction : public torch::autograd::Function<ConvFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const Tensor& x,
                                                const Tensor& weight, const OptT& bias, const OptT& init_state,
                                                const OptT& cu_seqlens, bool silu, bool return_final_state,
                                                bool out_dim_major) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto out = ConvFwdOp().call(x, weight, bias, init_state, cu_seqlens, silu, return_final_state, out_dim_major);
    ctx->save_for_backward({x, weight, bias.value_or(Tensor()), init_state.value_or(Tensor()),
                            cu_seqlens.value_or(Tensor())});
    ctx->saved_data["silu"] = silu;
    int64_t present = 0;
    if (bias.has_value() && bias->defined()) present |= 1;
    if (init_state.has_value() && init_state->defined()) present |= 2;
    ctx->saved_data["present"] = present;
    ctx->set_materialize_grads(false);
    return {std::get<0>(out), std::get<1>(out)};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool silu = ctx->saved_data["silu"].toBool();
    const int64_t present = ctx->saved_data["present"].toInt();
    const Tensor& x = saved[0];
    Tensor dy = grads[0];
    Tensor dfinal = grads.size() > 1 ? grads[1] : Tensor();
    if (dfinal.defined() && dfinal.dim() != 3) dfinal = Tensor();  // the (0,) placeholder
    // grad_mask over (x, weight, bias, init_state); edge index = count of the present ones before
    std::vector<int64_t> mask(kConvNumGrads, 0);
    size_t edge = 0;
    for (int i = 0; i < kConvNumGrads; i++) {
      const bool here = i < 2 || ((present >> (i - 2)) & 1);
      if (here) mask[static_cast<size_t>(i)] = ctx->needs_input_grad(edge++) ? 1 : 0;
    }
    torch::autograd::variable_list out(8);  // one per forward argument (after ctx)
    bool any = false;
    for (int64_t m : mask) any = any || m;
    if (!any) return out;
    if (!dy.defined()) dy = at::zeros_like(x);  // a loss on final_state alone
    auto g = ConvBwdOp().call(saved[0], saved[1], Opt(saved[2]), Opt(saved[3]), Opt(saved[4]), dy, Opt(dfinal), silu,
                              mask);
    for (int i = 0; i < kConvNumGrads; i++)
      if (mask[static_cast<size_t>(i)]) out[static_cast<size_t>(i)] = g[static_cast<size_t>(i)];
    return out;
  }
};

ConvFwdOut ConvForwardAutograd(const Tensor& x, const Tensor& weight, const OptT& bias, const OptT& init_state,
                               const OptT& cu_seqlens, bool silu, bool return_final_state, bool out_dim_major) {
  bool needs_grad = false;
  if (at::GradMode::is_enabled()) {
    needs_grad = x.requires_grad() || weight.requires_grad();
    for (const OptT* t : {&bias, &init_state})
      needs_grad = needs_grad || (t->has_value() && (*t)->defined() && (*t)->requires_grad());
  }
  if (!needs_grad) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return ConvFwdOp().call(x, weight, bias, init_state, cu_seqlens, silu, return_final_state, out_dim_major);
  }
  auto r = ConvFunction::apply(x, weight, bias, init_state, cu_seqlens, silu, return_final_state, out_dim_major);
  return {r[0], r[1]};
}

}  // namespace
}  // namespace selscan_torch

TORCH_LIBRARY_FRAGMENT(selscan, m) {
  m.def("conv_fwd(Tensor x, Tensor weight, Tensor? bias, Tensor? init_state, Tensor? cu_seqlens, bool silu, "
        "bool return_final_state, bool out_dim_major) -> (Tensor y, Tensor final_state)");
  m.def("conv_bwd(Tensor x, Tensor weight, Tensor? bias, Tensor? init_state, Tensor? cu_seqlens, Tensor dy, "
        "Tensor? dfinal_state, bool silu, int[] grad_mask) -> Tensor[]");
  m.def("conv_step(Tensor(a!) state, Tensor x, Tensor weight, Tensor? bias, Tensor? state_index, bool silu) "
        "-> Tensor");
}

TORCH_LIBRARY_IMPL(selscan, CPU, m) {
  m.impl("conv_fwd", &selscan_torch::ConvForward);
  m.impl("conv_bwd", &selscan_torch::ConvBackward);
  m.impl("conv_step", &selscan_torch::ConvStep);
}

TORCH_LIBRARY_IMPL(selscan, Autograd, m) {
  m.impl("conv_fwd", &selscan_torch::ConvForwardAutograd);
  // the decode update has no derivative (inference): autograd passes it by, its output needs no grad
  m.impl("conv_step", torch::CppFunction::makeFallthrough());
}

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(selscan, CUDA, m) {
  m.impl("conv_fwd", &selscan_torch::ConvForward);
  m.impl("conv_bwd", &selscan_torch::ConvBackward);
  m.impl("conv_step", &selscan_torch::ConvStep);
}
#endif

// ============================================================================================
// >>py: the extension module _C (importing it runs the TORCH_LIBRARY registrations above) and what
// it answers the Python side: the common layer's argument checks and the library's answers for the
// fake kernels (selscan_torch/_checks.py), which ask instead of restating a rule.
// ============================================================================================

namespace selscan_torch {
namespace {

// A sequence of Python ints as int64 (false with a Python error set otherwise).
bool Int64s(PyObject* seq, std::vector<int64_t>* out) {
  PyObject* f = PySequence_Fast(seq, "sizes / strides must be a sequence of ints");
  if (!f) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(f);
  out->resize(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; i++) {
    (*out)[static_cast<size_t>(i)] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(f, i));
    if ((*out)[static_cast<size_t>(i)] == -1 && PyErr_Occurred()) break;
  }
  Py_DECREF(f);
  return !PyErr_Occurred();
}

// The ops' arguments as Python describes them: each None or (sizes, strides, str(dtype),
// str(device)); a size not known (symbolic) is -1.
struct PyArgs {
  std::vector<std::vector<int64_t>> sizes, strides;
  std::vector<std::string> types;
  std::vector<bind::Arg> a;
  bool Parse(PyObject* seq) {
    PyObject* f = PySequence_Fast(seq, "args must be a sequence");
    if (!f) return false;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(f);
    sizes.resize(static_cast<size_t>(n));  // no reallocation after: the Args point into these
    strides.resize(static_cast<size_t>(n));
    types.resize(static_cast<size_t>(n));
    a.assign(static_cast<size_t>(n), bind::Arg());
    bool ok = true;
    for (Py_ssize_t i = 0; i < n && ok; i++) {
      PyObject* o = PySequence_Fast_GET_ITEM(f, i);
      if (o == Py_None) continue;
      PyObject *sz, *st;
      const char *ty, *dev;
      ok = PyArg_ParseTuple(o, "OOss", &sz, &st, &ty, &dev) && Int64s(sz, &sizes[static_cast<size_t>(i)]) &&
           Int64s(st, &strides[static_cast<size_t>(i)]);
      if (!ok) break;
      types[static_cast<size_t>(i)] = ty;
      c10::ScalarType stype = c10::ScalarType::Undefined;
      for (at::ScalarType t : {at::kFloat, at::kHalf, at::kBFloat16, at::kInt, at::kLong})
        if (types[static_cast<size_t>(i)] == TypeName(t)) stype = t;
      bind::Arg& x = a[static_cast<size_t>(i)];
      try {
        x = ArgOf(c10::Device(std::string(dev)), stype == c10::ScalarType::Undefined ? at::kDouble : stype);
      } catch (const std::exception& e) {
        PyErr_SetString(PyExc_ValueError, e.what());
        ok = false;
        break;
      }
      x.type = stype == c10::ScalarType::Undefined ? bind::Type::kOther : TypeOf(stype);
      x.type_name = types[static_cast<size_t>(i)].c_str();
      x.ndim = static_cast<int64_t>(sizes[static_cast<size_t>(i)].size());
      x.sizes = sizes[static_cast<size_t>(i)].data();
      x.strides = strides[static_cast<size_t>(i)].size() == sizes[static_cast<size_t>(i)].size()
                      ? strides[static_cast<size_t>(i)].data() : nullptr;
    }
    Py_DECREF(f);
    return ok;
  }
};

bool OpOf(const char* name, Op* op, size_t* n_args) {
  static const struct { const char* name; Op op; size_t n; } ops[] = {
      {"fwd", Op::kFwd, 10}, {"bwd", Op::kBwd, 13}, {"step", Op::kStep, 10},
      {"conv_fwd", Op::kConvFwd, 5}, {"conv_bwd", Op::kConvBwd, 7}, {"conv_step", Op::kConvStep, 5}};
  for (const auto& o : ops)
    if (std::strcmp(o.name, name) == 0) {
      *op = o.op;
      *n_args = o.n;
      return true;
    }
  PyErr_Format(PyExc_ValueError, "selscan: no op %s", name);
  return false;
}

const char* ExceptionName(bind::ErrorKind k) {
  switch (k) {
    case bind::ErrorKind::kType: return "TypeError";
    case bind::ErrorKind::kNotImplemented: return "NotImplementedError";
    case bind::ErrorKind::kDevice: return "RuntimeError";
    default: return "ValueError";
  }
}

// _C.check_args(op, args) -> (refusal, sizes): the op's argument check (the one its kernels run)
// on described tensors (the fake kernels'). refusal: None, or (exception name, message, rule code,
// the argument's name); sizes: (batch, dim, L, N, G, rows, n_seqs, n_cache, width, state_len), -1
// where not known.
PyObject* CheckArgsPy(PyObject*, PyObject* args) {
  const char* name;
  PyObject* seq;
  if (!PyArg_ParseTuple(args, "sO", &name, &seq)) return nullptr;
  Op op;
  size_t n = 0;
  PyArgs pa;
  if (!OpOf(name, &op, &n) || !pa.Parse(seq)) return nullptr;
  if (pa.a.size() != n) return PyErr_Format(PyExc_ValueError, "selscan: %s takes %zu arguments", name, n);
  bind::Checked k;
  const bind::Refusal r = CheckArgs(op, pa.a.data(), nullptr, nullptr, &k);
  if (!r.ok()) {
    const bind::Error e = bind::ErrorOf(r, WhereOf(op), NamesOfOp(op));
    const std::string arg = NamesOfOp(op).Of(r.operand ? r.operand : "");
    return Py_BuildValue("(ssis)O", ExceptionName(e.kind), e.message.c_str(), static_cast<int>(r.code), arg.c_str(),
                         Py_None);
  }
  return Py_BuildValue("O(LLLLLLLLLL)", Py_None, static_cast<long long>(k.s.batch), static_cast<long long>(k.s.dim),
                       static_cast<long long>(k.s.L), static_cast<long long>(k.s.N), static_cast<long long>(k.s.G),
                       static_cast<long long>(k.s.rows), static_cast<long long>(k.s.n_seqs),
                       static_cast<long long>(k.n_cache), static_cast<long long>(k.width),
                       static_cast<long long>(k.state_len));
}

// _C.fwd_unit_l(args) -> bool: whether selscan::fwd copies the L-strided operands of these (the
// fwd schema's, described) to unit L strides: selscan's CUDA plan's answer (>>unit-l), which the fake
// kernel follows for y's layout (contiguous where the op copies u).
PyObject* FwdUnitLPy(PyObject*, PyObject* seq) {
  PyArgs pa;
  if (!pa.Parse(seq)) return nullptr;
  if (pa.a.size() != 10) return PyErr_Format(PyExc_ValueError, "selscan: fwd takes 10 arguments");
  bind::Checked k;
  const bool copies = CheckArgs(Op::kFwd, pa.a.data(), nullptr, nullptr, &k).ok() && WantsUnitL(pa.a.data(), k);
  return PyBool_FromLong(copies);
}

// _C.checkpoint_numel(device, batch, dim, L, N, G, n_seqs) -> int: the floats of the checkpoint the
// forward saves on that device (str(torch.device)): selscan_checkpoint_size (0 where the CPU
// backward would not read one), selscan_checkpoint_size_cuda on CUDA; a valid, non-empty problem.
PyObject* CheckpointNumelPy(PyObject*, PyObject* args) {
  const char* dev;
  long long batch, dim, L, N, G, n_seqs;
  if (!PyArg_ParseTuple(args, "sLLLLLL", &dev, &batch, &dim, &L, &N, &G, &n_seqs)) return nullptr;
  bind::Sizes s;
  s.batch = batch; s.dim = dim; s.L = L; s.N = N; s.G = G; s.n_seqs = n_seqs; s.rows = n_seqs ? n_seqs : batch;
  std::vector<int64_t> cu;
  if (n_seqs > 0) {  // offsets that pass: the size does not depend on them
    cu.assign(static_cast<size_t>(n_seqs + 1), L);
    cu[0] = 0;
  }
  selscan_problem p = bind::MakeProblem(s, SELSCAN_F32, false, n_seqs > 0 ? cu.data() : nullptr);
  static const float kSome[1] = {0.f};  // required operands present (contiguous); nothing is read
  p.u.data = p.delta.data = p.A.data = p.B.data = p.C.data = kSome;
  size_t bytes = 0;
  bind::Result r;
  try {
    const c10::Device d{std::string(dev)};
    if (d.is_cuda()) {
#ifdef WITH_CUDA
      r = bind::Call(p, [&](const selscan_problem* q) { return selscan_binding_cuda_checkpoint_size(q, &bytes); });
#else
      PyErr_Format(PyExc_RuntimeError, "selscan: this build of selscan_torch has no CUDA kernels (built without nvcc or "
                   "with SELSCAN_TORCH_CPU_ONLY=1); u is on %s", dev);  // NeedKernels' words
      return nullptr;
#endif
    } else {
      r = bind::Call(p, [&](const selscan_problem* q) { return bind::CpuCheckpointBytes(q, true, &bytes); });
    }
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
    return nullptr;
  }
  if (!r.ok()) {
    PyErr_SetString(PyExc_ValueError, bind::ErrorOf(r, "checkpoint size", NamesOf(kFwdNames)).message.c_str());
    return nullptr;
  }
  return PyLong_FromLongLong(static_cast<long long>(bytes / sizeof(float)));
}

// _C.error_message(status name, where, argument, rule) -> str: the message of a refusal the Python
// wrappers make themselves (their own copies' overlap with an in-place state), in the layer's words.
PyObject* ErrorMessagePy(PyObject*, PyObject* args) {
  const char *status, *where, *arg, *rule;
  if (!PyArg_ParseTuple(args, "ssss", &status, &where, &arg, &rule)) return nullptr;
  for (int i = 0; i < SELSCAN__STATUS_COUNT; i++)
    if (std::strcmp(selscan_status_name(static_cast<selscan_status>(i)), status) == 0)
      return PyUnicode_FromString(
          bind::ErrorOf(static_cast<selscan_status>(i), where, std::string(" (argument '") + arg + "': " + rule + ")")
              .message.c_str());
  return PyErr_Format(PyExc_ValueError, "selscan: no status %s", status);
}

// _C.elements_meet(a_byte, a_elem_size, a_sizes, a_strides, b_byte, b_elem_size, b_sizes, b_strides):
// bindings/common's ElementsMeet (whether two strided tensors share a byte) for the Python wrappers'
// own copies (_checks.state_alias_refused), which pass byte addresses (or storage offsets) as ints.
PyObject* ElementsMeetPy(PyObject*, PyObject* args) {
  long long a, ae, b, be;
  PyObject *as, *ast, *bs, *bst;
  if (!PyArg_ParseTuple(args, "LLOOLLOO", &a, &ae, &as, &ast, &b, &be, &bs, &bst)) return nullptr;
  std::vector<int64_t> asz, astr, bsz, bstr;
  if (!Int64s(as, &asz) || !Int64s(ast, &astr) || !Int64s(bs, &bsz) || !Int64s(bst, &bstr)) return nullptr;
  if (asz.size() != astr.size() || bsz.size() != bstr.size()) {
    PyErr_SetString(PyExc_ValueError, "sizes and strides differ in length");
    return nullptr;
  }
  const bool meet = bind::ElementsMeet(
      reinterpret_cast<const void*>(static_cast<intptr_t>(a)), ae, static_cast<int64_t>(asz.size()), asz.data(),
      astr.data(), reinterpret_cast<const void*>(static_cast<intptr_t>(b)), be, static_cast<int64_t>(bsz.size()),
      bsz.data(), bstr.data());
  return PyBool_FromLong(meet);
}

}  // namespace
}  // namespace selscan_torch

// CONV_MAX_WIDTH: selscan.h's SELSCAN_CONV_MAX_WIDTH (for tests and callers; the checks are the library's).
extern "C" PyMODINIT_FUNC PyInit__C(void) {
  using namespace selscan_torch;
  static PyMethodDef methods[] = {
      {"check_args", CheckArgsPy, METH_VARARGS, "the common layer's argument check of an op on described tensors"},
      {"fwd_unit_l", FwdUnitLPy, METH_O, "whether selscan::fwd copies L-strided operands (selscan's CUDA plan)"},
      {"checkpoint_numel", CheckpointNumelPy, METH_VARARGS, "the forward's checkpoint floats on a device"},
      {"error_message", ErrorMessagePy, METH_VARARGS, "a refusal's message in the common layer's words"},
      {"elements_meet", ElementsMeetPy, METH_VARARGS, "whether two strided tensors share a byte (ElementsMeet)"},
      {nullptr, nullptr, 0, nullptr}};
  static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_C", "selscan's PyTorch ops (torch.ops.selscan)", -1,
                                   methods};
  PyObject* m = PyModule_Create(&def);
  if (m && PyModule_AddIntConstant(m, "CONV_MAX_WIDTH", SELSCAN_CONV_MAX_WIDTH) != 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
