// selscan_torch.h - what the PyTorch ops' translation units share (csrc/: selscan_torch.cpp, the
// registration, selscan's implementation and the _C module; scan.cpp; step.cpp; conv.cpp; ssd.cpp; norm.cpp): selscan
// operands from torch tensors, errors and the per-op name maps, the common layer's argument checks
// (Check: each op's TU runs them in place), outputs and
// workspaces from torch's allocator, the CPU parts runner on torch's pool, the device axis (CPU /
// CUDA through the bindings' shared shim).
//
// The ops (STABLE_TORCH_LIBRARY schemas, selscan_torch.cpp):
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
//   selscan::ssd_fwd / ssd_bwd: Mamba-2's SSD scan (CPU; no CUDA kernels yet)              ssd.cpp
//   selscan::norm_fwd / norm_bwd: the gated RMS norm (mamba_ssm's RMSNormGated)              norm.cpp
//
// Shapes are selscan's logical ones (mamba_ssm's): u (batch, dim, L), B/C (batch, G, N, L),
// (batch, N, L) (one group) or (dim, N) f32 (fixed), A (dim, N) f32, ... Every tensor is handed to
// selscan as a pointer plus its torch strides (no copies), except a tensor whose strides are all 0
// (a full broadcast, which selscan's "all strides 0 = contiguous" convention cannot express): that
// one is made contiguous; and where selscan's CUDA plan takes a problem on its fast kernels only
// with unit L strides, its L-strided operands (scan.cpp >>unit-l).
// The Python side (selscan_torch/__init__.py, conv.py) adds the fake kernels and mamba's API.
//
// CPU: selscan's parts API on torch's intra-op pool (torch::stable::parallel_for) (bitwise the same for every thread count; the
// backward's reduce phase after all parts). CUDA (WITH_CUDA): the bindings' shared CUDA shim
// (bindings/common/selscan_binding.h >>bind-cuda, compiled in selscan_torch_cuda.cu) on the current
// stream; workspace and checkpoint from torch's allocator (>>dispatch).
#ifndef SELSCAN_TORCH_H_
#define SELSCAN_TORCH_H_

// PyTorch's stable ABI only (torch/csrc/stable, torch/headeronly; setup.py builds with
// TORCH_STABLE_ONLY and TORCH_TARGET_VERSION 2.11): the extension built once loads in every later
// torch. What the stable ABI has no API for (autograd, grad mode, inference tensors, version counters,
// typed Python errors) is Python's: each op's Autograd-key kernel beside its fake kernel
// (selscan_torch/__init__.py, conv.py), their shared refusals in selscan_torch/_checks.py.
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/device.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "selscan.h"
#include "selscan_binding.h"  // bindings/common: the layer shared with the other bindings, its CUDA shim too

namespace selscan_torch {

using Tensor = torch::stable::Tensor;
using OptT = std::optional<Tensor>;
using ScalarType = torch::headeronly::ScalarType;

// ---- selscan operands from torch tensors -----------------------------------------------------

namespace bind = selscan_binding;

// A selscan tensor (selscan_tensor for inputs, selscan_out_tensor for outputs) of t with the logical
// order of t's dims (the layer's rules: bind::Operand).
template <typename ST>
ST Operand(const Tensor& t, bool* full_broadcast = nullptr) {
  return bind::Operand<ST>(t.data_ptr(), t.dim(), t.sizes().data(), t.strides().data(), full_broadcast);
}

[[noreturn]] inline void ShimFailed(const char* call);  // (>>errors)
// A torch op through the stable ABI (whose header reports a failure by the call's file and line only):
// a failure says torch's reason where the running torch keeps it (ShimFailed).
template <typename F>
auto Stable(const char* op, F f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::runtime_error&) {
    ShimFailed(op);
  }
}
inline Tensor Contiguous(const Tensor& t) {
  return t.is_contiguous() ? t : Stable("aten::contiguous", [&] { return torch::stable::contiguous(t); });
}
// A tensor selscan can read through its strides: unchanged unless it is a full broadcast.
inline Tensor Readable(const Tensor& t) {
  return bind::FullBroadcast(t.dim(), t.sizes().data(), t.strides().data()) ? Contiguous(t) : t;
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
// cannot do, RuntimeError for CUDA failures. The stable ABI carries a C++ exception to Python as
// RuntimeError only: the message starts with the Python type's name ("ValueError: selscan: ..."),
// which the package's Python layer raises as that type (selscan_torch/_checks.py: raise_typed).
[[noreturn]] inline void Fail(bind::ErrorKind kind, const std::string& message) {
  switch (kind) {
    case bind::ErrorKind::kType: throw std::runtime_error("TypeError: " + message);
    case bind::ErrorKind::kNotImplemented: throw std::runtime_error("NotImplementedError: " + message);
    case bind::ErrorKind::kValue: throw std::runtime_error("ValueError: " + message);
    default: throw std::runtime_error(message);
  }
}
inline void Raise(const bind::Error& e) {
  if (e.kind != bind::ErrorKind::kNone) Fail(e.kind, e.message);
}
// >>errors: a call of torch's C shim that failed (an allocation, mostly): the message is torch's own error text
// where the running torch keeps it for the caller (torch_exception_get_what_without_backtrace, torch
// 2.13 and later, found at run time since the build targets 2.11: "CUDA out of memory. Tried to
// allocate ...", which the Python layer raises as torch.OutOfMemoryError), else the call's name.
inline void ShimFailed(const char* call) {
  using Getter = const char* (*)();
  static const Getter what = [] {
    void* f = dlsym(RTLD_DEFAULT, "torch_exception_get_what_without_backtrace");
    if (!f)
      if (void* lib = dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD)) f = dlsym(lib, "torch_exception_get_what_without_backtrace");
    return reinterpret_cast<Getter>(f);
  }();
  const char* text = what ? what() : nullptr;
  if (text && *text) throw std::runtime_error(std::string(text) + " (selscan: in " + call + ")");
  throw std::runtime_error(std::string("selscan: torch's ") + call + " failed (torch keeps its reason from torch 2.13)");
}
#define SELSCAN_TORCH_SHIM(call, name) \
  do {                                  \
    if ((call) != AOTI_TORCH_SUCCESS) ShimFailed(name); \
  } while (0)
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
inline Tensor AsF32(const Tensor& t) {
  return t.scalar_type() == ScalarType::Float ? t : Stable("aten::to", [&] { return torch::stable::to(t, ScalarType::Float); });
}
inline OptT AsF32(const OptT& t) { return t.has_value() ? OptT(AsF32(*t)) : OptT(); }

// ---- >>args: the argument checks, bindings/common's (>>bind-args) ----------------------------------
// Every op's tensors are described (sizes, strides, dtype, device; no data) and checked by the
// common layer against selscan's operand tables and size rules; the fake kernels ask the same
// check through _C.check_args (selscan_torch/_checks.py: check_op), so a meta or fake call is
// refused in the same words. Errors name the caller's argument (the per-op name maps above).

enum class Op { kFwd = 0, kBwd, kStep, kConvFwd, kConvBwd, kConvStep, kSsdFwd, kSsdBwd, kNormFwd, kNormBwd };

inline bind::Type TypeOf(ScalarType st) {
  switch (st) {
    case ScalarType::Float: return bind::Type::kF32;
    case ScalarType::Half: return bind::Type::kF16;
    case ScalarType::BFloat16: return bind::Type::kBF16;
    case ScalarType::Int: return bind::Type::kI32;
    case ScalarType::Long: return bind::Type::kI64;
    default: return bind::Type::kOther;
  }
}
// str(torch dtype): the name the fake kernels pass for a dtype (the same in both paths' messages)
inline const char* TypeName(ScalarType st) {
  switch (st) {
    case ScalarType::Float: return "torch.float32";
    case ScalarType::Half: return "torch.float16";
    case ScalarType::BFloat16: return "torch.bfloat16";
    case ScalarType::Double: return "torch.float64";
    case ScalarType::Long: return "torch.int64";
    case ScalarType::Int: return "torch.int32";
    case ScalarType::Short: return "torch.int16";
    case ScalarType::Char: return "torch.int8";
    case ScalarType::Byte: return "torch.uint8";
    case ScalarType::Bool: return "torch.bool";
    case ScalarType::ComplexHalf: return "torch.complex32";
    case ScalarType::ComplexFloat: return "torch.complex64";
    case ScalarType::ComplexDouble: return "torch.complex128";
    default: return torch::headeronly::toString(st);
  }
}
using DeviceType = torch::headeronly::DeviceType;
inline int64_t DeviceKey(DeviceType type, int64_t index) {
  return (static_cast<int64_t>(type) << 16) | static_cast<int64_t>(static_cast<uint16_t>(index + 1));
}
inline int64_t DeviceKey(const torch::stable::Device& d) { return DeviceKey(d.type(), d.index()); }
// str(torch.device) of a key: the device types a tensor can have here by name (torch's names), others by number
inline std::string DeviceName(int64_t key) {
  static const struct { DeviceType type; const char* name; } kNames[] = {
      {DeviceType::CPU, "cpu"}, {DeviceType::CUDA, "cuda"}, {DeviceType::Meta, "meta"}, {DeviceType::MPS, "mps"},
      {DeviceType::XPU, "xpu"}, {DeviceType::HIP, "hip"}, {DeviceType::PrivateUse1, "privateuseone"}};
  std::string name = "device type " + std::to_string(key >> 16);
  for (const auto& n : kNames)
    if (static_cast<int64_t>(n.type) == (key >> 16)) name = n.name;
  const int64_t index = (key & 0xffff) - 1;
  return index < 0 ? name : name + ":" + std::to_string(index);
}
inline bool IsCudaKey(int64_t key) { return (key >> 16) == static_cast<int64_t>(DeviceType::CUDA); }

inline bind::Arg ArgOf(int64_t device_key, ScalarType st) {  // without its sizes
  bind::Arg a;
  a.present = true;
  a.type = TypeOf(st);
  a.type_name = TypeName(st);
  a.device = device_key;
  a.host = (device_key >> 16) == static_cast<int64_t>(DeviceType::CPU);
  return a;
}
inline bind::Arg ArgOf(const Tensor& t) {
  if (!t.defined()) return bind::Arg();
  bind::Arg a = ArgOf(DeviceKey(t.device()), t.scalar_type());
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

// selscan's SSD operand names -> mamba_chunk_scan_combined's argument names
constexpr NameMap kSsdNames[] = {{"y", "out"},
                                 {"initial_state", "initial_states"},
                                 {"final_state", "final_states"},
                                 {"dinitial_state", "dinitial_states"},
                                 {"dfinal_state", "dfinal_states"},
                                 {"dy", "dout"},
                                 {"seqlen", "x"},
                                 {"nheads", "x"},
                                 {"headdim", "x"},
                                 {"dstate", "B"},
                                 {"n_groups", "B"},
                                 {"batch", "x"},
                                 {"dt_min", "dt_limit (dt_min, dt_max)"},
                                 {"dt_max", "dt_limit (dt_min, dt_max)"},
                                 {"n_seqs", "cu_seqlens"}};

// selscan's norm operand names -> the gated norm's (RMSNormGated's x is y here; sizes read off y)
constexpr NameMap kNormNames[] = {{"seqlen", "y"}, {"batch", "y"}};

inline const char* WhereOf(Op op) {
  static const char* const where[] = {"forward", "backward", "step", "conv forward", "conv backward", "conv step",
                                      "SSD forward", "SSD backward", "norm forward", "norm backward"};
  return where[static_cast<int>(op)];
}
inline Names NamesOfOp(Op op) {
  switch (op) {
    case Op::kFwd: case Op::kBwd: return NamesOf(kFwdNames);
    case Op::kStep: return NamesOf(kStepNames);
    case Op::kConvFwd: case Op::kConvBwd: return NamesOf(kConvNames);
    case Op::kSsdFwd: case Op::kSsdBwd: return NamesOf(kSsdNames);
    case Op::kNormFwd: case Op::kNormBwd: return NamesOf(kNormNames);
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
// host offsets / state rows, or none; dt_limit: the SSD's clamp bounds (min, max), or none; norm: the
// norm's host values (group_size, eps, norm_before_gate), or none (then group_size 0: dim, eps 0).
inline bind::Refusal CheckArgs(Op op, const bind::Arg* a, const int64_t* cu_values, const int32_t* idx_values,
                               bind::Checked* k, const float* dt_limit = nullptr, const double* norm = nullptr) {
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
    case Op::kSsdFwd: case Op::kSsdBwd: {
      bind::SsdArgs s = bind::SsdArgsOf(a, op == Op::kSsdBwd, cu_values);
      if (dt_limit) s.dt_limit = true, s.dt_min = dt_limit[0], s.dt_max = dt_limit[1];
      return bind::CheckSsdArgs(s, f, k);
    }
    case Op::kNormFwd: case Op::kNormBwd: {
      bind::NormArgs s = bind::NormArgsOf(a, op == Op::kNormBwd);
      if (norm) {
        s.group_size = norm[0] >= -9.2e18 && norm[0] <= 9.2e18 ? static_cast<int64_t>(norm[0]) : -1;
        s.eps = static_cast<float>(norm[1]);
        s.before = norm[2] != 0;
      }
      return bind::CheckNormArgs(s, f, k);
    }
    default:
      return bind::CheckConvStepArgs(bind::ConvStepArgsOf(a, idx_values), f, k);
  }
}
// The op's arguments in its schema's order, checked (CheckArgs); with the values of a host
// cu_seqlens / state_index (values, where CPU tensors of the ops' dtypes). Raises the op's error
// naming the argument.
inline Checked Check(Op op, const bind::Arg* args, const OptT& values, const float* dt_limit = nullptr,
                     const double* norm = nullptr) {
  Checked c;
  const int64_t* cu = nullptr;
  const int32_t* idx = nullptr;
  if (values && values->defined() && values->is_cpu() && values->dim() == 1) {
    const bool rows = op == Op::kStep || op == Op::kConvStep;
    if (!rows && values->scalar_type() == ScalarType::Long) {
      c.host = Contiguous(*values);
      cu = c.host->const_data_ptr<int64_t>();
    } else if (rows && values->scalar_type() == ScalarType::Int) {
      c.host = Contiguous(*values);
      idx = c.host->const_data_ptr<int32_t>();
    }
  }
  const bind::Refusal r = CheckArgs(op, args, cu, idx, &c.k, dt_limit, norm);
  if (!r.ok()) Raise(bind::ErrorOf(r, WhereOf(op), NamesOfOp(op)));
  return c;
}

// ---- outputs ----------------------------------------------------------------------------------

// A new tensor of torch's allocator on `like`'s device (aoti_torch_empty_strided: the allocation
// without the dispatcher passes of aten::empty; the host cost of a short CUDA call is mostly such
// overhead, and the ops make up to 10 outputs and placeholders a call); strides: dense in the order
// given (none: contiguous).
inline int32_t AotiDtype(ScalarType st) {
  switch (st) {
    case ScalarType::Float: return aoti_torch_dtype_float32();
    case ScalarType::Half: return aoti_torch_dtype_float16();
    case ScalarType::BFloat16: return aoti_torch_dtype_bfloat16();
    case ScalarType::Int: return aoti_torch_dtype_int32();
    case ScalarType::Long: return aoti_torch_dtype_int64();
    case ScalarType::Byte: return aoti_torch_dtype_uint8();
    default: Fail(bind::ErrorKind::kType, std::string("selscan: no output of dtype ") + TypeName(st));
  }
}
inline Tensor NewStrided(const std::vector<int64_t>& sizes, const int64_t* strides, ScalarType dtype, const Tensor& like) {
  const int64_t nd = static_cast<int64_t>(sizes.size());
  std::vector<int64_t> dense(sizes.size());
  if (!strides) {
    int64_t st = 1;
    for (int64_t d = nd - 1; d >= 0; d--) {
      dense[static_cast<size_t>(d)] = st;
      st *= std::max<int64_t>(1, sizes[static_cast<size_t>(d)]);
    }
    strides = dense.data();
  }
  int32_t device_type = 0;
  SELSCAN_TORCH_SHIM(aoti_torch_get_device_type(like.get(), &device_type), "aoti_torch_get_device_type");
  AtenTensorHandle h = nullptr;
  SELSCAN_TORCH_SHIM(aoti_torch_empty_strided(nd, sizes.data(), strides, AotiDtype(dtype), device_type,
                                              like.get_device_index(), &h),
                     "aoti_torch_empty_strided");
  return Tensor(h);
}
inline Tensor NewTensor(const std::vector<int64_t>& sizes, ScalarType dtype, const Tensor& like) {
  return NewStrided(sizes, nullptr, dtype, like);
}
inline Tensor NewTensor(std::initializer_list<int64_t> sizes, ScalarType dtype, const Tensor& like) {
  return NewStrided(std::vector<int64_t>(sizes), nullptr, dtype, like);
}
inline std::vector<int64_t> SizesOf(const Tensor& t) { return std::vector<int64_t>(t.sizes().begin(), t.sizes().end()); }
inline Tensor NewF32(std::initializer_list<int64_t> sizes, const Tensor& like) { return NewTensor(sizes, ScalarType::Float, like); }
// A dense tensor of `sizes` whose memory order is t's (strides sorted, largest first; ties keep the
// logical order): empty_like's rule for a tensor that is not dense (a view such as xz[:, :d]).
inline Tensor NewInOrderOf(const Tensor& t, const std::vector<int64_t>& sizes, ScalarType dtype) {
  const int64_t nd = t.dim();
  std::vector<int64_t> perm(static_cast<size_t>(nd)), strides(static_cast<size_t>(nd));
  for (int64_t i = 0; i < nd; i++) perm[static_cast<size_t>(i)] = i;
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
    const int64_t sa = t.size(a) == 1 ? 0 : t.stride(a), sb = t.size(b) == 1 ? 0 : t.stride(b);
    return sa > sb;
  });
  int64_t st = 1;
  for (int64_t i = nd - 1; i >= 0; i--) {
    const size_t d = static_cast<size_t>(perm[static_cast<size_t>(i)]);
    strides[d] = st;
    st *= std::max<int64_t>(1, sizes[d]);
  }
  return NewStrided(sizes, strides.data(), dtype, t);
}
// Whether t's elements fill its memory exactly once (c10's is_non_overlapping_and_dense): strides, sorted,
// are those of a permuted contiguous tensor.
inline bool NonOverlappingAndDense(const Tensor& t) {
  const int64_t nd = t.dim();
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < nd; d++)
    if (t.size(d) != 1) perm.push_back(d);
  std::sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return t.stride(a) < t.stride(b); });
  int64_t want = 1;
  for (int64_t d : perm) {
    if (t.stride(d) != want) return false;
    want *= t.size(d);
  }
  return true;
}
// at::empty_like(t)'s layout (preserve_format): t's strides where t is non-overlapping and dense,
// else dense strides in t's stride order (ATen's infer_dense_strides: dims sorted by stride, a stride
// 0 keeping its logical place, equal strides the smaller size inner): the layout y and the gradients
// have always had, which the CUDA plan reads (an L-strided y sends a forward to the general kernels).
inline Tensor NewLike(const Tensor& t) {
  const int64_t nd = t.dim();
  if (NonOverlappingAndDense(t)) return NewStrided(SizesOf(t), t.strides().data(), t.scalar_type(), t);
  std::vector<int64_t> perm(static_cast<size_t>(nd)), strides(static_cast<size_t>(nd));
  for (int64_t i = 0; i < nd; i++) perm[static_cast<size_t>(i)] = nd - 1 - i;  // innermost first
  auto order = [&](int64_t d0, int64_t d1) {  // > 0: d0 goes outside d1
    const int64_t s0 = t.stride(d0), s1 = t.stride(d1);
    if (s0 == 0 || s1 == 0) return 0;
    if (s0 != s1) return s0 < s1 ? -1 : 1;
    return t.size(d0) > t.size(d1) ? 1 : 0;
  };
  for (int64_t i = 1; i < nd; i++) {  // insertion sort: a stride-0 dim never moves
    int64_t d1 = i;
    for (int64_t d0 = i - 1; d0 >= 0; d0--) {
      const int c = order(perm[static_cast<size_t>(d0)], perm[static_cast<size_t>(d1)]);
      if (c > 0) {
        std::swap(perm[static_cast<size_t>(d0)], perm[static_cast<size_t>(d1)]);
        d1 = d0;
      } else if (c < 0) {
        break;
      }
    }
  }
  int64_t st = 1;
  for (int64_t i = 0; i < nd; i++) {
    const size_t d = static_cast<size_t>(perm[static_cast<size_t>(i)]);
    strides[d] = st;
    if (t.size(static_cast<int64_t>(d)) > 1) st *= t.size(static_cast<int64_t>(d));
  }
  return NewStrided(SizesOf(t), strides.data(), t.scalar_type(), t);
}
inline Tensor& Zero(Tensor& t) {
  if (t.numel()) Stable("aten::zero_", [&] { return torch::stable::zero_(t); });
  return t;
}
inline void CopyInto(Tensor& dst, const Tensor& src) {
  Stable("aten::copy_", [&] { return torch::stable::copy_(dst, src); });
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
  w.buf = NewTensor({static_cast<int64_t>(bytes)}, ScalarType::Byte, like);
  w.ptr = w.buf.data_ptr();
  return w;
}

// Parts for the CPU pool: one per intra-op thread (results do not depend on it).
inline int64_t NumParts() { return std::max<int64_t>(1, static_cast<int64_t>(torch::stable::get_num_threads())); }
// The decode steps' parts: blocks of 256 channels of a row, at most one per thread.
inline int64_t StepParts(int64_t batch, int64_t dim) { return bind::StepParts(NumParts(), batch, dim); }

// Runs fn(&q, i) for the parts i = 0 .. n_parts - 1 on the intra-op pool (bind::RunParts), then
// raises the first failing part's error, naming what selscan's diag names.
template <typename P, typename Fn>
void RunParts(const P& p, int64_t n_parts, const char* where, const Names& names, const Fn& fn) {
  auto pool = [](int64_t n, const auto& body) {
    torch::stable::parallel_for(0, n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; i++) body(i);
    });
  };
  Check(bind::RunParts(p, n_parts, pool, fn), where, names);
}

// ---- >>dispatch: one call on its tensors' device ------------------------------------------------

// A CUDA tensor reaching a build without CUDA kernels: refused, naming the argument.
inline void NeedKernels(const Tensor& t, const char* name) {
#ifndef WITH_CUDA
  if (t.is_cuda())
    Fail(bind::ErrorKind::kDevice, std::string("selscan: this build of selscan_torch has no CUDA kernels (built without "
         "nvcc or with SELSCAN_TORCH_CPU_ONLY=1); ") + name + " is on " + DeviceName(DeviceKey(t.device())));
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
  CudaCall(const Tensor& like, const OptT& cu_host) : guard_(like.get_device_index()), like_(like) {
    SELSCAN_TORCH_SHIM(aoti_torch_get_current_cuda_stream(like.get_device_index(), &call.stream),
                       "aoti_torch_get_current_cuda_stream");
    call.workspace_alloc = &CudaCall::Alloc;
    call.workspace_ctx = this;
    if (cu_host) {
      cu_dev_ = Stable("aten::to", [&] { return torch::stable::to(*cu_host, like.device(), /*non_blocking=*/true); });
      call.cu_seqlens_device = cu_dev_.const_data_ptr<int64_t>();
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
      c->ws_ = NewTensor({static_cast<int64_t>(bytes)}, ScalarType::Byte, c->like_);
      return c->ws_.data_ptr();
    } catch (...) {
      c->error_ = std::current_exception();
      return nullptr;
    }
  }
  const torch::stable::accelerator::DeviceGuard guard_;
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
  if (used.get() == in.get() ||
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
  if (!bind::OutOperand<ST>(t.data_ptr(), t.dim(), t.sizes().data(), t.strides().data(), &s))
    Fail(bind::ErrorKind::kValue, std::string("selscan: ") + name + " has all strides 0 (overlapping elements)");
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
// where the plan takes the problem with unit L strides and not as it is (the autograd kernel's copies
// are what autograd saves, so the backward has them too), the backward dy; y is then contiguous,
// like the u copy (the fake kernel asks the same question: _C.fwd_unit_l).

// (batch, dim, L) u / delta / z and (batch, [G,] N, L) B / C: L is the last dim.
inline bool LStrided(const Tensor& t) { return t.dim() > 0 && t.stride(t.dim() - 1) != 1; }
inline bool LStrided(const OptT& t) { return t.has_value() && t->defined() && LStrided(*t); }
inline Tensor UnitL(const Tensor& t) { return LStrided(t) ? Contiguous(t) : t; }
inline OptT UnitL(const OptT& t) { return LStrided(t) ? OptT(Contiguous(*t)) : t; }

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

// ---- what the ops' kernels share -----------------------------------------------------------------
// (Their autograd, the decode updates' grad-mode refusal and state's version bump: Python's,
// selscan_torch/__init__.py and conv.py: the stable ABI has no autograd.)

inline bool Given(const OptT& t) { return t.has_value() && t->defined(); }
inline const Tensor* Ptr(const OptT& t) { return t.has_value() && t->defined() ? &*t : nullptr; }  // (nullptr: absent)

// An empty problem's gradients: each asked for zeroed (out[i], want[i]).
inline void ZeroGrads(std::vector<Tensor>& out, const bool* want) {
  for (size_t i = 0; i < out.size(); i++)
    if (want[i]) Zero(out[i]);
}

}  // namespace selscan_torch

#endif  // SELSCAN_TORCH_H_
