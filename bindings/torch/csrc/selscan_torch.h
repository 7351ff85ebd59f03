// selscan_torch.h - what the PyTorch ops' translation units share (csrc/: selscan_torch.cpp, the
// registration, selscan's implementation and the _C module; scan.cpp; step.cpp; conv.cpp): selscan
// operands from torch tensors, errors and the per-op name maps, the common layer's argument checks
// (Check: each op's TU runs them in place), outputs and
// workspaces from torch's allocator, the CPU parts runner on ATen's pool, the device axis (CPU /
// CUDA through the bindings' shared shim), and the autograd helpers the scan and the conv share.
//
// The ops (TORCH_LIBRARY schemas, selscan_torch.cpp):
//   selscan::fwd  (u, delta, A, B, C, D?, z?, delta_bias?, h0?, cu_seqlens?, delta_softplus,
//                  return_last_state, save_checkpoint) -> (y, last_state, checkpoint)      scan.cpp
//   selscan::bwd  (u, delta, A, B, C, D?, z?, delta_bias?, h0?, cu_seqlens?, dy, dh_last?,
//                  checkpoint, delta_softplus, grad_mask[9]) -> (du, ddelta, dA, dB, dC, dD, dz,
//                  ddelta_bias, dh0)                                                         scan.cpp
//   selscan::step (state!, x, dt, A, B, C, D?, z?, dt_bias?, state_index?, dt_softplus,
//                  A_is_log=False) -> y                                                      step.cpp
//                 (D, dt_bias, state: each float32 or x's dtype, passed as they are: selscan's
//                 SELSCAN_STEP_D_T / _DELTA_BIAS_T / _STATE_T for those in x's dtype, no
//                 conversion or copy kernel a call; a state in x's dtype is stepped in float32
//                 and stored rounded. A_is_log: A is Mamba's A_log, selscan's SELSCAN_STEP_A_LOG
//                 takes A = -exp(A_log) inside the step: no exp / neg kernels a token)
//   selscan::conv_fwd / conv_bwd / conv_step: the causal conv1d                             conv.cpp
//
// Shapes are selscan's logical ones (mamba_ssm's): u (batch, dim, L), B/C (batch, G, N, L),
// (batch, N, L) (one group) or (dim, N) f32 (fixed), A (dim, N) f32, ... Every tensor is handed to
// selscan as a pointer plus its torch strides (no copies), except a tensor whose strides are all 0
// (a full broadcast, which selscan's "all strides 0 = contiguous" convention cannot express): that
// one is made contiguous; and where selscan's CUDA plan takes a problem on its fast kernels only
// with unit L strides, its L-strided operands (scan.cpp >>unit-l).
// The Python side (selscan_torch/__init__.py, conv.py) adds the fake kernels and mamba's API.
//
// CPU: selscan's parts API on at::parallel_for (bitwise the same for every thread count; the
// backward's reduce phase after all parts). CUDA (WITH_CUDA): the bindings' shared CUDA shim
// (bindings/common/selscan_binding.h >>bind-cuda, compiled in selscan_torch_cuda.cu) on the current
// stream; workspace and checkpoint from torch's allocator (>>dispatch).
#ifndef SELSCAN_TORCH_H_
#define SELSCAN_TORCH_H_

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
#include <type_traits>
#include <vector>

#ifdef WITH_CUDA
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "selscan.h"
#include "selscan_binding.h"  // bindings/common: the layer shared with the other bindings, its CUDA shim too

namespace selscan_torch {

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
inline Tensor Readable(const Tensor& t) {
  return bind::FullBroadcast(t.dim(), t.sizes().data(), t.strides().data()) ? t.contiguous() : t;
}
inline OptT Readable(const OptT& t) { return t.has_value() ? OptT(Readable(*t)) : OptT(); }

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

inline std::string Shape(const Tensor& t) { return c10::str(t.sizes()); }

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
inline void Raise(const bind::Error& e) {
  switch (e.kind) {
    case bind::ErrorKind::kNone: return;
    case bind::ErrorKind::kType: TORCH_CHECK_TYPE(false, e.message);
    case bind::ErrorKind::kNotImplemented: TORCH_CHECK_NOT_IMPLEMENTED(false, e.message);
    case bind::ErrorKind::kDevice: TORCH_CHECK(false, e.message);
    case bind::ErrorKind::kValue: TORCH_CHECK_VALUE(false, e.message);
  }
}
inline void CheckText(selscan_status st, const char* where, const std::string& diag_text, const char* cuda_text = "") {
  if (st != SELSCAN_OK) Raise(bind::ErrorOf(st, where, diag_text, "", cuda_text));
}
inline void Check(selscan_status st, const char* where, const Diag& diag, const char* cuda_text = "") {
  if (st != SELSCAN_OK) CheckText(st, where, diag.Text(), cuda_text);
}
inline void Check(const bind::Result& r, const char* where, const Names& names) {
  if (!r.ok()) Raise(bind::ErrorOf(r, where, names));
}
// A refusal of the binding's own checks in selscan's form (status, the argument, the rule).
inline void Refuse(selscan_status st, const char* where, const char* arg, const std::string& rule) {
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
inline Tensor AsF32(const Tensor& t) { return t.scalar_type() == at::kFloat ? t : t.to(at::kFloat); }
inline OptT AsF32(const OptT& t) { return t.has_value() ? OptT(AsF32(*t)) : OptT(); }

// ---- >>args: the argument checks, bindings/common's (>>bind-args) ----------------------------------
// Every op's tensors are described (sizes, strides, dtype, device; no data) and checked by the
// common layer against selscan's operand tables and size rules; the fake kernels ask the same
// check through _C.check_args (selscan_torch/_checks.py: check_op), so a meta or fake call is
// refused in the same words. Errors name the caller's argument (the per-op name maps above).

enum class Op { kFwd = 0, kBwd, kStep, kConvFwd, kConvBwd, kConvStep };

inline bind::Type TypeOf(at::ScalarType st) {
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
inline const char* TypeName(at::ScalarType st) {
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
inline int64_t DeviceKey(const c10::Device& d) {
  return (static_cast<int64_t>(d.type()) << 16) | static_cast<int64_t>(static_cast<uint16_t>(d.index() + 1));
}
inline std::string DeviceName(int64_t key) {
  return c10::Device(static_cast<c10::DeviceType>(key >> 16), static_cast<c10::DeviceIndex>((key & 0xffff) - 1)).str();
}
inline bool IsCudaKey(int64_t key) { return (key >> 16) == static_cast<int64_t>(c10::DeviceType::CUDA); }

inline bind::Arg ArgOf(const c10::Device& d, at::ScalarType st) {  // without its sizes
  bind::Arg a;
  a.present = true;
  a.type = TypeOf(st);
  a.type_name = TypeName(st);
  a.device = DeviceKey(d);
  a.host = d.is_cpu();
  return a;
}
inline bind::Arg ArgOf(const Tensor& t) {
  if (!t.defined()) return bind::Arg();
  bind::Arg a = ArgOf(t.device(), t.scalar_type());
  a.ndim = t.dim();
  a.sizes = t.sizes().data();
  a.strides = t.strides().data();
  return a;
}
inline bind::Arg ArgOf(const OptT& t) { return t.has_value() ? ArgOf(*t) : bind::Arg(); }

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

inline const char* WhereOf(Op op) {
  static const char* const where[] = {"forward", "backward", "step", "conv forward", "conv backward", "conv step"};
  return where[static_cast<int>(op)];
}
inline Names NamesOfOp(Op op) {
  switch (op) {
    case Op::kFwd: case Op::kBwd: return NamesOf(kFwdNames);
    case Op::kStep: return NamesOf(kStepNames);
    case Op::kConvFwd: case Op::kConvBwd: return NamesOf(kConvNames);
    default: return NamesOf(kConvStepNames);
  }
}
// The op's tensors checked (the host values of cu_seqlens / state rows where they are CPU tensors of
// the right dtype): the sizes found, or the framework's error.
struct Checked {
  bind::Checked k;
  OptT host;  // the contiguous host copy of cu_seqlens / state_index whose values were checked
};
// The op's arguments in its schema's order (bindings/common's >>args-order), checked; values: the
// host offsets / state rows, or none.
inline bind::Refusal CheckArgs(Op op, const bind::Arg* a, const int64_t* cu_values, const int32_t* idx_values,
                               bind::Checked* k) {
  bind::Forms f;
  f.device_name = &DeviceName;
  f.names = NamesOfOp(op);
  switch (op) {
    case Op::kFwd: case Op::kBwd:
      f.fixed_bc = f.groupless_bc = true;  // (dim, N) constant over time; (batch, N, L): one group
      return bind::CheckScanArgs(bind::ScanArgsOf(a, op == Op::kBwd, cu_values), f, k);
    case Op::kStep:
      f.groupless_bc = true;  // (batch, N): one group
      return bind::CheckStepArgs(bind::StepArgsOf(a, idx_values), f, k);
    case Op::kConvFwd: case Op::kConvBwd:
      return bind::CheckConvArgs(bind::ConvArgsOf(a, op == Op::kConvBwd, cu_values), f, k);
    default:
      return bind::CheckConvStepArgs(bind::ConvStepArgsOf(a, idx_values), f, k);
  }
}
// The op's arguments in its schema's order, checked (CheckArgs); with the values of a host
// cu_seqlens / state_index (values, where CPU tensors of the ops' dtypes). Raises the op's error
// naming the argument.
inline Checked Check(Op op, const bind::Arg* args, const OptT& values) {
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

// ---- outputs ----------------------------------------------------------------------------------

// A new tensor of torch's allocator on `like`'s device, straight from ATen's empty_cpu / empty_cuda
// (the allocation at::empty makes, without its two dispatcher passes: the host cost of a short
// CUDA call is mostly such overhead, and the ops make up to 10 outputs and placeholders a call).
inline Tensor NewTensor(at::IntArrayRef sizes, at::ScalarType dtype, const Tensor& like) {
#ifdef WITH_CUDA
  if (like.is_cuda()) return at::detail::empty_cuda(sizes, dtype, like.device(), std::nullopt);
#endif
  if (like.is_cpu()) return at::detail::empty_cpu(sizes, dtype);
  return at::empty(sizes, like.options().dtype(dtype));
}
inline Tensor NewF32(at::IntArrayRef sizes, const Tensor& like) { return NewTensor(sizes, at::kFloat, like); }
// at::empty_like(t): a contiguous t's layout directly, any other through empty_like (its strides)
inline Tensor NewLike(const Tensor& t) {
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
inline Workspace MakeWorkspace(size_t bytes, const Tensor& like) {
  Workspace w;
  w.bytes = bytes;
  if (bytes == 0) return w;
  w.buf = NewTensor({static_cast<int64_t>(bytes)}, at::kByte, like);
  w.ptr = w.buf.data_ptr();
  return w;
}

// Parts for the CPU pool: one per intra-op thread (results do not depend on it).
inline int64_t NumParts() { return std::max<int64_t>(1, at::get_num_threads()); }
// The decode steps' parts: blocks of 256 channels of a row, at most one per thread.
inline int64_t StepParts(int64_t batch, int64_t dim) { return bind::StepParts(NumParts(), batch, dim); }

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

// ---- >>dispatch: one call on its tensors' device ------------------------------------------------

// A CUDA tensor reaching a build without CUDA kernels: refused, naming the argument.
inline void NeedKernels(const Tensor& t, const char* name) {
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

// ---- in-place outputs (the steps' state, the conv update's conv_state) ---------------------------

// An input read through a copy (a full broadcast made dense, strided indices made contiguous):
// selscan's alias check sees the copy, and updating the in-place output (out) would change the
// caller's tensor behind its back (issue 38). Refused where it shares a byte with out, as selscan
// refuses the tensor itself (the Python wrapper's own copies: _checks.state_alias_refused).
inline void CheckReadCopy(const Tensor& out, const char* out_name, const char* where, const Tensor& in, const Tensor& used,
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
inline bool LStrided(const Tensor& t) { return t.dim() > 0 && t.sym_stride(-1) != 1; }
inline bool LStrided(const OptT& t) { return t.has_value() && t->defined() && LStrided(*t); }
inline Tensor UnitL(const Tensor& t) { return LStrided(t) ? t.contiguous() : t; }
inline OptT UnitL(const OptT& t) { return LStrided(t) ? OptT(t->contiguous()) : t; }

// Whether the forward of args (the fwd schema's order, checked: k) copies u, delta, z, B and C to
// unit L strides (>>unit-l): a CUDA u, and bindings/common's ScanWantsUnitL (selscan's plan asked).
// y_like: the strides y has (u's; the backward: dy's).
inline bool WantsUnitL(const bind::Arg* a, const bind::Checked& k, const bind::Arg* y_like = nullptr) {
#ifdef WITH_CUDA
  return IsCudaKey(a[bind::kScanU].device) && bind::ScanWantsUnitL(a, k, y_like);
#else
  (void)a, (void)k, (void)y_like;
  return false;  // no CUDA kernels: a CUDA u is refused (NeedKernels), not copied
#endif
}

// ---- >>autograd-helpers: what the scan's and the conv's autograd kernels share ------------------

// The typed handle of one of the ops (selscan::fwd, ...): callers keep it in a static (looked up once).
template <typename Sig>
c10::TypedOperatorHandle<Sig> OpHandle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").template typed<Sig>();
}

inline OptT Opt(const Tensor& t) { return t.defined() ? OptT(t) : OptT(); }
inline bool Given(const OptT& t) { return t.has_value() && t->defined(); }

inline bool AnyRequiresGrad(std::initializer_list<const Tensor*> ts, std::initializer_list<const OptT*> opts) {
  for (const Tensor* t : ts)
    if (t->defined() && t->requires_grad()) return true;
  for (const OptT* t : opts)
    if (t->has_value() && (*t)->defined() && (*t)->requires_grad()) return true;
  return false;
}

// Whether a call records a graph: grad mode on and one of its inputs requiring grad.
inline bool NeedsGrad(std::initializer_list<const Tensor*> ts, std::initializer_list<const OptT*> opts) {
  return at::GradMode::is_enabled() && AnyRequiresGrad(ts, opts);
}

// Bit i set where the i-th of the optional arguments is given (which differentiable arguments
// autograd's edges count).
inline int64_t PresentBits(std::initializer_list<const OptT*> opts) {
  int64_t bits = 0, i = 0;
  for (const OptT* t : opts) bits |= (Given(*t) ? int64_t(1) : int64_t(0)) << i++;
  return bits;
}

// The backward's grad_mask over n differentiable arguments, the first n_required always present,
// the others where `present` (PresentBits) says: edge index = count of the present ones before.
inline std::vector<int64_t> GradMask(torch::autograd::AutogradContext* ctx, int n, int n_required, int64_t present) {
  std::vector<int64_t> mask(static_cast<size_t>(n), 0);
  size_t edge = 0;
  for (int i = 0; i < n; i++) {
    const bool here = i < n_required || ((present >> (i - n_required)) & 1);
    if (here) mask[static_cast<size_t>(i)] = ctx->needs_input_grad(edge++) ? 1 : 0;
  }
  return mask;
}
inline bool AnyOf(const std::vector<int64_t>& mask) {
  for (int64_t m : mask)
    if (m) return true;
  return false;
}

// >>harden-autograd, the backward ops (selscan::bwd, selscan::conv_bwd): no derivative, so with grad
// mode on (a backward with create_graph=True) and an input requiring grad, their outputs hang off a
// node derived from this one (Op: its forward runs the op below autograd; Op::kFunction names the
// user's function), whose backward raises: a double backward is an error, never silent zeros; a
// first backward with create_graph=True that is not differentiated again works as before.
template <typename Op>
struct NotDifferentiable : torch::autograd::Function<Op> {
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*, torch::autograd::variable_list) {
    TORCH_CHECK(false, "selscan: double backward (differentiating the gradients of ", Op::kFunction,
                ", e.g. after create_graph=True) is not supported: selscan's backward of ", Op::kFunction,
                " is not differentiable");
    return {};
  }
};

// >>harden-autograd, the decode updates (selscan::step, selscan::conv_step): no derivative, so with
// grad mode on an input requiring grad is refused before anything is written (an output claiming
// requires_grad would get no gradient); an inference-tensor state only under inference mode; the
// update (call, below autograd) bumps state's version counter (autograd's check on tensors saved for
// backward). what: the user's function, named in the refusal.
struct NamedArg {
  const char* name;
  const Tensor* t;
};
template <typename Call>
Tensor InferenceOnlyUpdate(const char* what, std::initializer_list<NamedArg> args, const Tensor& state, Call call) {
  if (at::GradMode::is_enabled())
    for (const NamedArg& a : args)
      TORCH_CHECK(!(a.t && a.t->defined() && a.t->requires_grad()), "selscan: ", what,
                  " is inference-only (no autograd), but ", a.name, " requires grad; call it under torch.no_grad() / "
                  "torch.inference_mode() or pass ", a.name, ".detach()");
  TORCH_CHECK_VALUE(!state.is_inference() || c10::InferenceMode::is_enabled(),
                    "selscan: state is an inference tensor (made under torch.inference_mode()); an in-place update "
                    "of it must run under torch.inference_mode() too");
  Tensor y;
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    y = call();
  }
  torch::autograd::impl::bump_version(state);
  return y;
}
inline const Tensor* Ptr(const OptT& t) { return t.has_value() && t->defined() ? &*t : nullptr; }  // (nullptr: absent)

// An empty problem's gradients: each asked for zeroed (out[i], want[i]).
inline void ZeroGrads(std::vector<Tensor>& out, const bool* want) {
  for (size_t i = 0; i < out.size(); i++)
    if (want[i] && out[i].numel()) out[i].zero_();
}

}  // namespace selscan_torch

#endif  // SELSCAN_TORCH_H_
