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

// _C.cpu_checkpoint_used(N): whether the CPU backward reads a checkpoint for N states, asked of the
// library (selscan_checkpoint_used reads only dstate): the fake kernels' checkpoint size.
static PyObject* CpuCheckpointUsed(PyObject*, PyObject* arg) {
  const long long n = PyLong_AsLongLong(arg);
  if (n == -1 && PyErr_Occurred()) return nullptr;
  selscan_problem p;
  std::memset(&p, 0, sizeof p);
  p.dstate = n;
  return PyBool_FromLong(selscan_checkpoint_used(&p));
}

// A sequence of Python ints as int64 (false with a Python error set otherwise).
static bool Int64s(PyObject* seq, std::vector<int64_t>* out) {
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

// _C.elements_meet(a_byte, a_elem_size, a_sizes, a_strides, b_byte, b_elem_size, b_sizes, b_strides):
// bindings/common's ElementsMeet (whether two strided tensors share a byte) for the Python wrappers'
// own copies (_checks.state_alias_refused), which pass byte addresses (or storage offsets) as ints.
static PyObject* ElementsMeetPy(PyObject*, PyObject* args) {
  long long a, ae, b, be;
  PyObject *as, *ast, *bs, *bst;
  if (!PyArg_ParseTuple(args, "LLOOLLOO", &a, &ae, &as, &ast, &b, &be, &bs, &bst)) return nullptr;
  std::vector<int64_t> asz, astr, bsz, bstr;
  if (!Int64s(as, &asz) || !Int64s(ast, &astr) || !Int64s(bs, &bsz) || !Int64s(bst, &bstr)) return nullptr;
  if (asz.size() != astr.size() || bsz.size() != bstr.size()) {
    PyErr_SetString(PyExc_ValueError, "sizes and strides differ in length");
    return nullptr;
  }
  const bool meet = selscan_binding::ElementsMeet(
      reinterpret_cast<const void*>(static_cast<intptr_t>(a)), ae, static_cast<int64_t>(asz.size()), asz.data(),
      astr.data(), reinterpret_cast<const void*>(static_cast<intptr_t>(b)), be, static_cast<int64_t>(bsz.size()),
      bsz.data(), bstr.data());
  return PyBool_FromLong(meet);
}

// The extension module itself: importing it runs the static TORCH_LIBRARY registrations below.
// CONV_MAX_WIDTH: selscan.h's SELSCAN_CONV_MAX_WIDTH (the conv fake kernels' width bound).
extern "C" PyMODINIT_FUNC PyInit__C(void) {
  static PyMethodDef methods[] = {
      {"cpu_checkpoint_used", CpuCheckpointUsed, METH_O, "selscan_checkpoint_used for a problem of N states"},
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

selscan_dtype DtypeOf(const Tensor& t, const char* name) {
  switch (t.scalar_type()) {
    case at::kFloat: return SELSCAN_F32;
    case at::kHalf: return SELSCAN_F16;
    case at::kBFloat16: return SELSCAN_BF16;
    default:
      TORCH_CHECK_TYPE(false, "selscan: ", name, " must be float32, float16 or bfloat16, got ", t.scalar_type());
  }
  return SELSCAN_F32;
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
constexpr NameMap kFwdNames[] = {{"y", "out"}, {"h_last", "last_state"}, {"seqlen", "L"}, {"dstate", "N"}};
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

// ---- argument checks (before anything reaches selscan: a clear message naming the argument) ----

using Sizes = bind::Sizes;

void SameDeviceAs(const Tensor& ref, const char* ref_name, const Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.device() == ref.device(), "selscan: ", name, " is on ", t.device(), " but ", ref_name,
                    " is on ", ref.device());
}
void SameDevice(const Tensor& ref, const Tensor& t, const char* name) { SameDeviceAs(ref, "u", t, name); }

void CheckF32(const Tensor& t, const char* name) {
  TORCH_CHECK_TYPE(t.scalar_type() == at::kFloat, "selscan: ", name, " must be float32, got ", t.scalar_type());
}

// ---- the decode steps' parameters: float32 or x's dtype -------------------------------------------
// The steps' D / dt_bias (selscan::step) and weight / bias (selscan::conv_step) are float32 or x's
// dtype (a model in float16 / bfloat16: mamba_ssm's and transformers' decode). The step's reach
// selscan as they are, each with its flag (SELSCAN_STEP_D_T, SELSCAN_STEP_DELTA_BIAS_T: read in x's
// dtype, converted on load; no conversion kernel a token). The conv step's have one flag for both
// (SELSCAN_CONV_PARAMS_T): both in x's dtype go as they are, a mix as float32 (the ones in x's
// dtype widened here: exact, one kernel each).
void CheckStepParam(const Tensor& t, const Tensor& x, const char* name) {
  TORCH_CHECK_TYPE(t.scalar_type() == at::kFloat || t.scalar_type() == x.scalar_type(), "selscan: ", name,
                   " must be float32 or x's dtype ", x.scalar_type(), ", got ", t.scalar_type());
}
// Whether the given ones of ps are all in x's dtype (x not float32; at least one given).
// (SELSCAN_CONV_PARAMS_T)
bool StepParamsInT(const Tensor& x, std::initializer_list<const Tensor*> ps) {
  if (x.scalar_type() == at::kFloat) return false;
  bool any = false;
  for (const Tensor* t : ps) {
    if (!t) continue;
    if (t->scalar_type() != x.scalar_type()) return false;
    any = true;
  }
  return any;
}
const Tensor* Given(const OptT& t) { return t.has_value() ? &*t : nullptr; }
Tensor AsF32(const Tensor& t) { return t.scalar_type() == at::kFloat ? t : t.to(at::kFloat); }
OptT AsF32(const OptT& t) { return t.has_value() ? OptT(AsF32(*t)) : OptT(); }

void CheckShape(const Tensor& t, at::IntArrayRef want, const char* name, const char* what) {
  TORCH_CHECK_VALUE(t.sizes() == want, "selscan: ", name, " must have shape ", what, " = ", want, ", got ", Shape(t));
}

Sizes CheckScan(const Tensor& u, const Tensor& delta, const Tensor& A, const Tensor& B, const Tensor& C,
                const OptT& D, const OptT& z, const OptT& delta_bias, const OptT& h0, const OptT& cu_seqlens) {
  Sizes s;
  TORCH_CHECK_VALUE(u.dim() == 3, "selscan: u must have shape (batch, dim, L), got ", Shape(u));
  (void)DtypeOf(u, "u");
  TORCH_CHECK_TYPE(!A.is_complex(), "selscan: complex A is not supported (real A only)");
  TORCH_CHECK_VALUE(A.dim() == 2, "selscan: A must have shape (dim, N), got ", Shape(A));
  // u is checked on its own before the others are compared with it (>>harden-plausible): where u
  // and A disagree on dim, the one that disagrees with the rest is named (a (batch, L, dim) u passed
  // without its transpose is u's error, not delta's)
  if (u.size(1) != A.size(0)) {
    const bool u_transposed = u.size(2) == A.size(0);
    const bool delta_agrees = delta.dim() == 3 && delta.sizes() == u.sizes();
    TORCH_CHECK_VALUE(!u_transposed && delta_agrees, "selscan: u must have shape (batch, dim, L) with dim = ",
                      A.size(0), " (A's first dim), got ", Shape(u),
                      u_transposed ? " (a (batch, L, dim) tensor: pass u.transpose(1, 2))" : "");
    TORCH_CHECK_VALUE(false, "selscan: A must have shape (dim, N) with dim = ", u.size(1), " (u's dim), got ",
                      Shape(A));
  }
  s.batch = u.size(0); s.dim = u.size(1); s.L = u.size(2);
  CheckShape(delta, u.sizes(), "delta", "u's shape");
  TORCH_CHECK_TYPE(delta.scalar_type() == u.scalar_type(), "selscan: delta must have u's dtype ", u.scalar_type(),
                   ", got ", delta.scalar_type());
  SameDevice(u, delta, "delta");
  CheckF32(A, "A");
  SameDevice(u, A, "A");
  s.N = A.size(1);
  auto bc = [&](const Tensor& t, const char* name, bool* fixed) {
    SameDevice(u, t, name);
    if (t.dim() == 2) {
      *fixed = true;
      CheckShape(t, {s.dim, s.N}, name, "(dim, N) (fixed)");
      CheckF32(t, name);
    } else {
      const int64_t o = t.dim() == 3 ? 1 : 2;  // (batch, N, L): one group, no view needed
      TORCH_CHECK_VALUE((t.dim() == 3 || t.dim() == 4) && t.size(0) == s.batch && t.size(o) == s.N &&
                            t.size(o + 1) == s.L,
                        "selscan: ", name, " must have shape (dim, N), (batch, N, L) or (batch, G, N, L) with batch = ",
                        s.batch, ", N = ", s.N, ", L = ", s.L, ", got ", Shape(t));
      TORCH_CHECK_TYPE(t.scalar_type() == u.scalar_type(), "selscan: variable ", name, " must have u's dtype ",
                       u.scalar_type(), ", got ", t.scalar_type());
    }
  };
  bc(B, "B", &s.fixed_B);
  bc(C, "C", &s.fixed_C);
  auto groups = [](const Tensor& t) { return t.dim() == 4 ? t.size(1) : int64_t(1); };
  if (!s.fixed_B) s.G = groups(B);
  if (!s.fixed_C) {
    if (!s.fixed_B) {
      TORCH_CHECK_VALUE(groups(C) == s.G, "selscan: C has ", groups(C), " groups but B has ", s.G);
    } else {
      s.G = groups(C);
    }
  }
  TORCH_CHECK_VALUE(s.G >= 1 && s.dim % s.G == 0, "selscan: the group count of B/C (", s.G,
                    ") must divide dim (", s.dim, ")");
  if (D) { CheckShape(*D, {s.dim}, "D", "(dim,)"); CheckF32(*D, "D"); SameDevice(u, *D, "D"); }
  if (z) {
    CheckShape(*z, u.sizes(), "z", "u's shape");
    TORCH_CHECK_TYPE(z->scalar_type() == u.scalar_type(), "selscan: z must have u's dtype ", u.scalar_type(),
                     ", got ", z->scalar_type());
    SameDevice(u, *z, "z");
  }
  if (delta_bias) {
    CheckShape(*delta_bias, {s.dim}, "delta_bias", "(dim,)");
    CheckF32(*delta_bias, "delta_bias");
    SameDevice(u, *delta_bias, "delta_bias");
  }
  s.rows = s.batch;
  if (cu_seqlens) {
    TORCH_CHECK_VALUE(cu_seqlens->device().is_cpu(), "selscan: cu_seqlens must be a CPU tensor (its values are "
                      "validated on the host), got one on ", cu_seqlens->device());
    TORCH_CHECK_TYPE(cu_seqlens->scalar_type() == at::kLong, "selscan: cu_seqlens must be int64, got ",
                     cu_seqlens->scalar_type());
    TORCH_CHECK_VALUE(cu_seqlens->dim() == 1 && cu_seqlens->size(0) >= 2,
                      "selscan: cu_seqlens must have shape (n_seqs + 1,) with n_seqs >= 1, got ", Shape(*cu_seqlens));
    TORCH_CHECK_VALUE(s.batch == 1, "selscan: packed sequences (cu_seqlens) need batch 1, got batch ", s.batch);
    s.n_seqs = cu_seqlens->size(0) - 1;
    s.rows = s.n_seqs;
  }
  if (h0) {
    CheckShape(*h0, {s.rows, s.dim, s.N}, "h0", cu_seqlens ? "(n_seqs, dim, N)" : "(batch, dim, N)");
    CheckF32(*h0, "h0");
    SameDevice(u, *h0, "h0");
  }
  return s;
}

// ---- problem building -------------------------------------------------------------------------

struct Scan {
  selscan_problem p;
  Tensor cu_host;  // contiguous int64 CPU copy when needed
};

selscan_problem BuildProblem(const Sizes& s, const Tensor& u, const Tensor& delta, const Tensor& A, const Tensor& B,
                             const Tensor& C, const OptT& D, const OptT& z, const OptT& delta_bias, const OptT& h0,
                             const OptT& cu_host, bool softplus) {
  selscan_problem p = bind::MakeProblem(s, DtypeOf(u, "u"), softplus, cu_host ? cu_host->data_ptr<int64_t>() : nullptr);
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

OptT HostCuSeqlens(const OptT& cu) {
  if (!cu) return OptT();
  return cu->contiguous();
}

// >>harden-offsets: the offsets' values, checked by the binding where selscan is not called (an
// empty problem: batch, dim or L 0): the rules of selscan's validation (first 0, last L,
// non-decreasing), reported the same way, so that a bad cu_seqlens is refused whatever the sizes.
void CheckOffsetsValues(const OptT& cu, int64_t L, const char* where) {
  if (!cu) return;
  const Tensor h = cu->contiguous();
  std::string rule;
  const selscan_status st = bind::OffsetsRule(h.data_ptr<int64_t>(), h.numel(), L, &rule);
  if (st != SELSCAN_OK) Refuse(st, where, "cu_seqlens", rule);
}

// ---- >>unit-l: L-strided operands of the CUDA fast kernels' problems, copied ------------------
//
// The CUDA fast kernels (variable B / C, N <= 16, no packed sequences) read unit L strides only,
// unless the channels-last kernels are built (SELSCAN_TORCH_CHANNELS_LAST, off by default for
// their compile time): an L-strided operand (MambaVision's delta, a (b l, d) -> b d l view; a
// gradient through a transpose) would send the whole problem to the general kernels. A contiguous
// copy is cheaper: MambaVision-T's 6 layers' backward ran 1.03 ms on the general kernels (+ local
// pass) against 0.47 ms fast (bench/NOTES.md MODELS-v5). The forward copies u, delta, z, B, C
// (ForwardAutograd's copies are what autograd saves, so the backward has them too), the backward
// dy; y is then contiguous, like the u copy (the fake kernel mirrors that: __init__.py _fwd_y_like).
// (sym_ sizes and strides: AOTAutograd runs the autograd kernel on symbolic fake tensors.)

bool CudaChannelsLast();  // below, beside CpuBackend

// Whether the problem of u, A, B, C is one the CUDA fast kernels take with unit L strides, on a
// build whose fast kernels take nothing else.
bool CudaFastNeedsUnitL(const Tensor& u, const Tensor& A, const Tensor& B, const Tensor& C, bool packed) {
#ifdef WITH_CUDA
  return u.is_cuda() && !packed && u.dim() == 3 && u.sym_size(2) > 1 && B.dim() > 2 && C.dim() > 2 && A.dim() >= 1 &&
         A.sym_size(-1) <= 16 && !CudaChannelsLast();
#else
  (void)u, (void)A, (void)B, (void)C, (void)packed;
  return false;  // no CUDA kernels: a CUDA u is refused (NeedKernels), not copied
#endif
}
// (batch, dim, L) u / delta / z and (batch, [G,] N, L) B / C: L is the last dim.
bool LStrided(const Tensor& t) { return t.dim() > 0 && t.sym_stride(-1) != 1; }
bool LStrided(const OptT& t) { return t.has_value() && t->defined() && LStrided(*t); }
Tensor UnitL(const Tensor& t) { return LStrided(t) ? t.contiguous() : t; }
OptT UnitL(const OptT& t) { return LStrided(t) ? OptT(t->contiguous()) : t; }

// Whether any of the tensors has symbolic sizes or strides (a fake tensor of a dynamic-shape trace).
bool AnySymbolic(std::initializer_list<const Tensor*> ts, std::initializer_list<const OptT*> opts) {
  for (const Tensor* t : ts)
    if (t->defined() && t->unsafeGetTensorImpl()->has_symbolic_sizes_strides()) return true;
  for (const OptT* t : opts)
    if (t->has_value() && (*t)->defined() && (*t)->unsafeGetTensorImpl()->has_symbolic_sizes_strides()) return true;
  return false;
}

// Whether the forward's operands get copies: the policy applies and one of u, delta, z, B, C has an
// L stride that is not 1.
bool WantsUnitLCopies(const Tensor& u, const Tensor& delta, const Tensor& A, const Tensor& B, const Tensor& C,
                      const OptT& z, bool packed) {
  return CudaFastNeedsUnitL(u, A, B, C, packed) &&
         (LStrided(u) || LStrided(delta) || LStrided(z) || LStrided(B) || LStrided(C));
}
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
  const Sizes s = CheckScan(u_in, delta_in, A_in, B_in, C_in, D_in, z_in, delta_bias_in, h0_in, cu_seqlens);
  NeedKernels(u_in, "u");
  // >>unit-l, after the checks (errors name the user's tensors); a no-op where ForwardAutograd copied
  Tensor u_l = u_in, delta_l = delta_in, B_l = B_in, C_l = C_in;
  OptT z_l = z_in;
  if (WantsUnitLCopies(u_l, delta_l, A_in, B_l, C_l, z_l, cu_seqlens.has_value())) ToUnitL(u_l, delta_l, B_l, C_l, z_l);
  const Tensor u = Readable(u_l), delta = Readable(delta_l), A = Readable(A_in), B = Readable(B_l),
               C = Readable(C_l);
  const OptT D = Readable(D_in), z = Readable(z_l), delta_bias = Readable(delta_bias_in), h0 = Readable(h0_in);
  Tensor y = NewLike(u);
  Tensor h_last = NewF32(return_last_state ? at::IntArrayRef{s.rows, s.dim, s.N} : at::IntArrayRef{0}, u);
  if (s.Empty() || s.N == 0) {
    TORCH_CHECK_VALUE(s.N > 0 || s.Empty(), "selscan: A must have N >= 1 states, got ", Shape(A));
    CheckOffsetsValues(cu_seqlens, s.L, "forward");
    if (y.numel()) y.zero_();
    if (return_last_state && h_last.numel()) {
      if (h0) h_last.copy_(*h0);
      else h_last.zero_();
    }
    return {y, h_last, NewF32({0}, u)};
  }
  const OptT cu_host = HostCuSeqlens(cu_seqlens);
  selscan_problem p = BuildProblem(s, u, delta, A, B, C, D, z, delta_bias, h0, cu_host, delta_softplus);
  p.y = Operand<decltype(p.y)>(y);
  if (return_last_state) p.h_last = Operand<decltype(p.h_last)>(h_last);
  Diag diag(NamesOf(kFwdNames));
  diag.Attach(&p);
  size_t ck_bytes = 0;
  Tensor checkpoint;
  OnDevice(u, "u", cu_host, [&] {
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
  }, [&](auto& c) {
    if (save_checkpoint) Check(selscan_binding_cuda_checkpoint_size(&p, &ck_bytes), "checkpoint size", diag);
    checkpoint = NewF32({static_cast<int64_t>(ck_bytes / 4)}, u);
    float* ck = ck_bytes ? checkpoint.data_ptr<float>() : nullptr;
    c.Check(selscan_binding_cuda_forward(&p, ck, ck_bytes, &c.call), "forward (CUDA)", diag);
  });
  return {y, h_last, checkpoint};
}

// ---- backward ---------------------------------------------------------------------------------

enum { kDu = 0, kDdelta, kDA, kDB, kDC, kDD, kDz, kDdeltaBias, kDh0, kNumGrads };

std::vector<Tensor> Backward(const Tensor& u_in, const Tensor& delta_in, const Tensor& A_in, const Tensor& B_in,
                             const Tensor& C_in, const OptT& D_in, const OptT& z_in, const OptT& delta_bias_in,
                             const OptT& h0_in, const OptT& cu_seqlens, const Tensor& dy_in, const OptT& dh_last_in,
                             const Tensor& checkpoint, bool delta_softplus, at::IntArrayRef grad_mask) {
  const Sizes s = CheckScan(u_in, delta_in, A_in, B_in, C_in, D_in, z_in, delta_bias_in, h0_in, cu_seqlens);
  TORCH_CHECK_VALUE(grad_mask.size() == kNumGrads, "selscan: grad_mask must have 9 entries, got ", grad_mask.size());
  CheckShape(dy_in, u_in.sizes(), "dy", "u's shape");
  TORCH_CHECK_TYPE(dy_in.scalar_type() == u_in.scalar_type(), "selscan: dy must have u's dtype ", u_in.scalar_type(),
                   ", got ", dy_in.scalar_type());
  SameDevice(u_in, dy_in, "dy");
  if (dh_last_in) {
    CheckShape(*dh_last_in, {s.rows, s.dim, s.N}, "dh_last", "last_state's shape");
    CheckF32(*dh_last_in, "dh_last");
    SameDevice(u_in, *dh_last_in, "dh_last");
  }
  TORCH_CHECK_TYPE(checkpoint.numel() == 0 || checkpoint.scalar_type() == at::kFloat,
                   "selscan: checkpoint must be float32, got ", checkpoint.scalar_type());
  // the forward makes it on u's device; one elsewhere would be skipped silently (a meta one
  // sends the call to the fake kernel, whose _checks.check_bwd has the same rule)
  SameDevice(u_in, checkpoint, "checkpoint");
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
  if (s.Empty() || s.N == 0) {  // every gradient 0, except dh0 = dh_last (the state passes through)
    CheckOffsetsValues(cu_seqlens, s.L, "backward");
    for (int i = 0; i < kNumGrads; i++)
      if (want[i] && out[i].numel()) out[i].zero_();
    if (want[kDh0] && dh_last && out[kDh0].numel()) out[kDh0].copy_(*dh_last);
    return out;
  }
  const OptT cu_host = HostCuSeqlens(cu_seqlens);
  selscan_problem p = BuildProblem(s, u, delta, A, B, C, D, z, delta_bias, h0, cu_host, delta_softplus);
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
  OnDevice(u, "u", cu_host, [&] {
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
  }, [&](auto& c) {
    // The forward's checkpoint when a CUDA forward saved one (another size: not read).
    const float* ck = nullptr;
    size_t ck_bytes = 0;
    if (checkpoint.is_cuda() && checkpoint.is_contiguous()) {
      Check(bind::CheckpointToRead(&p, checkpoint.numel(), selscan_binding_cuda_checkpoint_size, &ck_bytes),
            "checkpoint size", diag);
      if (ck_bytes) ck = checkpoint.data_ptr<float>();
    }
    c.Check(selscan_binding_cuda_backward(&p, &g, ck, ck_bytes, &c.call), "backward (CUDA)", diag);
  });
  return out;
}

// ---- decode step ------------------------------------------------------------------------------

// The in-place state: refused when its elements overlap each other (an expand()ed or broadcast
// view: strides 0 on a dim of size > 1), whatever selscan's "all strides 0 = contiguous" would
// make of its strides (>>harden-overlap). Other overlapping strides reach selscan, which refuses
// an output whose explicit strides overlap.
// (at::has_internal_overlap's "Yes"; the fake kernels' _checks.self_overlapping is the same rule.)
void CheckInPlace(const Tensor& t, const char* name) {
  const bool overlap = bind::SelfOverlapping(t.dim(), t.sizes().data(), t.strides().data());
  TORCH_CHECK_VALUE(!overlap, "selscan: ", name,
                    " is updated in place but its elements overlap (an expand()ed or broadcast view, strides ",
                    t.strides(), " for shape ", Shape(t), "); pass a tensor with its own memory (e.g. .clone())");
}

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

// State row indices on the host (the CPU ops: the step's state_batch_indices, the conv update's
// conv_state_indices, named by arg): every entry below n_cache, no row twice (negative: padding),
// checked before anything is written -- also where selscan is not called (batch, dim or L 0).
void CheckStateIndexHost(const Tensor& idx, int64_t n_cache, const char* where, const char* arg) {
  const Tensor h = idx.contiguous();
  std::string rule;
  const selscan_status st = bind::StateIndexRule(h.data_ptr<int32_t>(), h.numel(), n_cache, &rule);
  if (st != SELSCAN_OK) Refuse(st, where, arg, rule);
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
  TORCH_CHECK_VALUE(x_in.dim() == 2, "selscan: x must have shape (batch, dim), got ", Shape(x_in));
  (void)DtypeOf(x_in, "x");
  TORCH_CHECK_VALUE(state.dim() == 3, "selscan: state must have shape (n_cache, dim, N), got ", Shape(state));
  TORCH_CHECK_TYPE(state.scalar_type() == at::kFloat || state.scalar_type() == x_in.scalar_type(),
                   "selscan: state must be float32 or x's dtype ", x_in.scalar_type(), " (updated in place), got ",
                   state.scalar_type());
  SameDeviceAs(x_in, "x", state, "state");
  CheckInPlace(state, "state");
  TORCH_CHECK_TYPE(!A_in.is_complex(), "selscan: complex A is not supported (real A only)");
  // x is checked against state and A before the others are compared with it: the one of x and
  // state that disagrees with A on dim is named
  if (x_in.size(1) != state.size(1)) {
    const bool state_agrees_with_A = A_in.dim() == 2 && A_in.size(0) == state.size(1);
    TORCH_CHECK_VALUE(!state_agrees_with_A, "selscan: x must have shape (batch, dim) with dim = ", state.size(1),
                      " (state's and A's dim), got ", Shape(x_in));
    TORCH_CHECK_VALUE(false, "selscan: state must have shape (n_cache, dim, N) with dim = ", x_in.size(1),
                      " (x's dim), got ", Shape(state));
  }
  const int64_t batch = x_in.size(0), dim = x_in.size(1);
  const int64_t n_cache = state.size(0), N = state.size(2);
  CheckShape(dt_in, x_in.sizes(), "dt", "x's shape");
  TORCH_CHECK_TYPE(dt_in.scalar_type() == x_in.scalar_type(), "selscan: dt must have x's dtype ",
                   x_in.scalar_type(), ", got ", dt_in.scalar_type());
  SameDeviceAs(x_in, "x", dt_in, "dt");
  CheckShape(A_in, {dim, N}, "A", "(dim, N)");
  CheckF32(A_in, "A");
  SameDeviceAs(x_in, "x", A_in, "A");
  auto bc = [&](const Tensor& t, const char* name) {
    const bool ok = (t.dim() == 2 && t.size(0) == batch && t.size(1) == N) ||
                    (t.dim() == 3 && t.size(0) == batch && t.size(2) == N);
    TORCH_CHECK_VALUE(ok, "selscan: ", name, " must have shape (batch, N) or (batch, ngroups, N) with batch = ", batch,
                      ", N = ", N, ", got ", Shape(t));
    TORCH_CHECK_TYPE(t.scalar_type() == x_in.scalar_type(), "selscan: ", name, " must have x's dtype ",
                     x_in.scalar_type(), ", got ", t.scalar_type());
    SameDeviceAs(x_in, "x", t, name);
  };
  bc(B_in, "B");
  bc(C_in, "C");
  auto groups = [](const Tensor& t) { return t.dim() == 3 ? t.size(1) : int64_t(1); };
  const int64_t G = groups(B_in);
  TORCH_CHECK_VALUE(groups(C_in) == G, "selscan: C has ", groups(C_in), " groups but B has ", G);
  TORCH_CHECK_VALUE(G >= 1 && dim % G == 0, "selscan: ngroups of B/C (", G, ") must divide dim (", dim, ")");
  if (D_in) { CheckShape(*D_in, {dim}, "D", "(dim,)"); CheckStepParam(*D_in, x_in, "D"); SameDeviceAs(x_in, "x", *D_in, "D"); }
  if (z_in) {
    CheckShape(*z_in, x_in.sizes(), "z", "x's shape");
    TORCH_CHECK_TYPE(z_in->scalar_type() == x_in.scalar_type(), "selscan: z must have x's dtype ",
                     x_in.scalar_type(), ", got ", z_in->scalar_type());
    SameDeviceAs(x_in, "x", *z_in, "z");
  }
  if (dt_bias_in) {
    CheckShape(*dt_bias_in, {dim}, "dt_bias", "(dim,)");
    CheckStepParam(*dt_bias_in, x_in, "dt_bias");
    SameDeviceAs(x_in, "x", *dt_bias_in, "dt_bias");
  }
  if (state_index) {
    CheckShape(*state_index, {batch}, "state_batch_indices", "(batch,)");
    TORCH_CHECK_TYPE(state_index->scalar_type() == at::kInt, "selscan: state_batch_indices must be int32 here "
                     "(the Python wrapper converts other integer types), got ", state_index->scalar_type());
    SameDeviceAs(x_in, "x", *state_index, "state_batch_indices");
    if (state_index->is_cpu()) CheckStateIndexHost(*state_index, n_cache, "step", "state_batch_indices");
  } else {
    TORCH_CHECK_VALUE(n_cache == batch, "selscan: state must have shape (batch, dim, N) with batch = ", batch,
                      " without state_batch_indices, got ", Shape(state));
  }
  Tensor y = NewLike(x_in);
  if (batch == 0 || dim == 0) return y;
  TORCH_CHECK_VALUE(N > 0, "selscan: state must have N >= 1, got ", Shape(state));
  // an empty cache: every row is padding (checked above on the host; on CUDA rows >= n_cache are
  // padding), so out is 0. Not selscan's call: its n_cache 0 means batch (issue 38, host run)
  if (n_cache == 0) return y.zero_();
  const Tensor x = Readable(x_in), dt = Readable(dt_in), A = Readable(A_in), B = Readable(B_in), C = Readable(C_in);
  const OptT D = Readable(D_in), z = Readable(z_in), dt_bias = Readable(dt_bias_in);  // float32 or x's dtype
  auto in_t = [&](const OptT& t) { return t.has_value() && t->scalar_type() != at::kFloat; };
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
  s.dtype = DtypeOf(x, "x");
  s.flags = (dt_softplus ? SELSCAN_DELTA_SOFTPLUS : 0u) | (in_t(D) ? SELSCAN_STEP_D_T : 0u) |
            (in_t(dt_bias) ? SELSCAN_STEP_DELTA_BIAS_T : 0u) |
            (state.scalar_type() != at::kFloat ? SELSCAN_STEP_STATE_T : 0u) |  // not float32: x's dtype (checked above)
            (A_is_log ? SELSCAN_STEP_A_LOG : 0u);                             // A holds A_log: A = -exp(A_log)
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
  }, [&](auto& c) { c.Check(selscan_binding_cuda_step(&s, &c.call), "step (CUDA)", diag); });
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
    if (WantsUnitLCopies(u, delta, A, B, C, z, cu_seqlens.has_value())) {
      // the op's checks first, on the user's tensors, where they can run (not on symbolic sizes:
      // the fake kernel checks the copies' same shapes, dtypes and devices)
      if (!AnySymbolic({&u_in, &delta_in, &A, &B_in, &C_in}, {&D, &z_in, &delta_bias, &h0}))
        (void)CheckScan(u_in, delta_in, A, B_in, C_in, D, z_in, delta_bias, h0, cu_seqlens);
      ToUnitL(u, delta, B, C, z);
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
    if (dy.dim() == 3 && CudaFastNeedsUnitL(u, saved[2], saved[3], saved[4], saved[9].defined())) dy = UnitL(dy);
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
// SELSCAN_CONV_PARAMS_T when both are T: see CheckStepParam), init_state / final_state
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

// selscan's conv operand names -> causal_conv1d's argument names (errors name what the caller passed)
constexpr NameMap kConvNames[] = {{"y", "out"},
                                  {"init_state", "initial_states"},
                                  {"final_state", "final_states"},
                                  {"dinit_state", "dinitial_states"},
                                  {"dfinal_state", "dfinal_states"},
                                  {"seqlen", "L"}};
constexpr NameMap kConvStepNames[] = {{"y", "out"}, {"state", "conv_state"}, {"state_index", "conv_state_indices"}};

struct ConvSizes {
  int64_t batch = 0, dim = 0, L = 0, W = 0, rows = 0, n_seqs = 0;
};

ConvSizes CheckConv(const Tensor& x, const Tensor& weight, const OptT& bias, const OptT& init_state,
                    const OptT& cu_seqlens) {
  ConvSizes s;
  TORCH_CHECK_VALUE(x.dim() == 3, "selscan: x must have shape (batch, dim, seqlen), got ", Shape(x));
  s.batch = x.size(0); s.dim = x.size(1); s.L = x.size(2);
  (void)DtypeOf(x, "x");
  TORCH_CHECK_VALUE(weight.dim() == 2 && weight.size(0) == s.dim, "selscan: weight must have shape (dim, width) with "
                    "dim = ", s.dim, ", got ", Shape(weight));
  s.W = weight.size(1);
  TORCH_CHECK_NOT_IMPLEMENTED(s.W >= 2 && s.W <= SELSCAN_CONV_MAX_WIDTH, "selscan: the conv width (weight.shape[1]) "
                              "must be 2 .. ", SELSCAN_CONV_MAX_WIDTH, ", got ", s.W);
  CheckF32(weight, "weight");
  SameDeviceAs(x, "x", weight, "weight");
  if (bias) { CheckShape(*bias, {s.dim}, "bias", "(dim,)"); CheckF32(*bias, "bias"); SameDeviceAs(x, "x", *bias, "bias"); }
  s.rows = s.batch;
  if (cu_seqlens) {
    TORCH_CHECK_VALUE(cu_seqlens->device().is_cpu(), "selscan: cu_seqlens must be a CPU tensor, got one on ",
                      cu_seqlens->device());
    TORCH_CHECK_TYPE(cu_seqlens->scalar_type() == at::kLong, "selscan: cu_seqlens must be int64, got ",
                     cu_seqlens->scalar_type());
    TORCH_CHECK_VALUE(cu_seqlens->dim() == 1 && cu_seqlens->size(0) >= 2,
                      "selscan: cu_seqlens must have shape (n_seqs + 1,) with n_seqs >= 1, got ", Shape(*cu_seqlens));
    TORCH_CHECK_VALUE(s.batch == 1, "selscan: packed sequences (cu_seqlens) need batch 1, got batch ", s.batch);
    s.n_seqs = cu_seqlens->size(0) - 1;
    s.rows = s.n_seqs;
  }
  if (init_state) {
    CheckShape(*init_state, {s.rows, s.dim, s.W - 1}, "initial_states",
               cu_seqlens ? "(n_seqs, dim, width - 1)" : "(batch, dim, width - 1)");
    TORCH_CHECK_TYPE(init_state->scalar_type() == x.scalar_type(), "selscan: initial_states must have x's dtype ",
                     x.scalar_type(), ", got ", init_state->scalar_type());
    SameDeviceAs(x, "x", *init_state, "initial_states");
  }
  return s;
}

selscan_conv_problem BuildConv(const ConvSizes& s, const Tensor& x, const Tensor& weight, const OptT& bias,
                               const OptT& init_state, const OptT& cu_host, bool silu) {
  selscan_conv_problem p;
  std::memset(&p, 0, sizeof p);
  p.batch = s.batch; p.dim = s.dim; p.seqlen = s.L; p.width = s.W;
  p.dtype = DtypeOf(x, "x");
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
  const ConvSizes s = CheckConv(x_in, weight_in, bias_in, init_in, cu_seqlens);
  const Tensor x = Readable(x_in), weight = Readable(weight_in);
  const OptT bias = Readable(bias_in), init = Readable(init_in);
  NeedKernels(x, "x");
  const auto dtype = x.scalar_type();
  Tensor y = out_dim_major ? NewTensor({s.dim, s.batch, s.L}, dtype, x).permute({1, 0, 2})
                           : NewInOrderOf(x, x.sizes(), dtype);
  Tensor fin = return_final_state ? NewTensor({s.rows, s.dim, s.W - 1}, dtype, x) : NewTensor({0}, dtype, x);
  if (s.batch == 0 || s.dim == 0 || s.L == 0) {  // nothing to convolve: each row's state passes through
    CheckOffsetsValues(cu_seqlens, s.L, "conv forward");  // the scan's rule: empty sequences are valid
    if (return_final_state) {
      if (init) fin.copy_(*init);
      else fin.zero_();
    }
    return {y, fin};
  }
  const OptT cu_host = HostCuSeqlens(cu_seqlens);
  selscan_conv_problem p = BuildConv(s, x, weight, bias, init, cu_host, silu);
  p.y = Operand<decltype(p.y)>(y);
  if (return_final_state) p.final_state = Operand<decltype(p.final_state)>(fin);
  Diag diag(NamesOf(kConvNames));
  diag.Attach(&p);
  OnDevice(x, "x", cu_host, [&] {
    const int64_t n = ConvParts(s.dim);
    RunParts(p, n, "conv forward (CPU)", NamesOf(kConvNames),
             [&](selscan_conv_problem* q, int64_t i) { return selscan_conv_forward_cpu_part(q, i, n); });
  }, [&](auto& c) { c.Check(selscan_binding_cuda_conv_forward(&p, &c.call), "conv forward (CUDA)", diag); });
  return {y, fin};
}

enum { kConvDx = 0, kConvDweight, kConvDbias, kConvDinit, kConvNumGrads };

std::vector<Tensor> ConvBackward(const Tensor& x_in, const Tensor& weight_in, const OptT& bias_in,
                                 const OptT& init_in, const OptT& cu_seqlens, const Tensor& dy_in,
                                 const OptT& dfinal_in, bool silu, at::IntArrayRef grad_mask) {
  const ConvSizes s = CheckConv(x_in, weight_in, bias_in, init_in, cu_seqlens);
  TORCH_CHECK_VALUE(grad_mask.size() == kConvNumGrads, "selscan: grad_mask must have 4 entries, got ",
                    grad_mask.size());
  CheckShape(dy_in, x_in.sizes(), "dy", "x's shape");
  TORCH_CHECK_TYPE(dy_in.scalar_type() == x_in.scalar_type(), "selscan: dy must have x's dtype ", x_in.scalar_type(),
                   ", got ", dy_in.scalar_type());
  SameDeviceAs(x_in, "x", dy_in, "dy");
  if (dfinal_in) {
    CheckShape(*dfinal_in, {s.rows, s.dim, s.W - 1}, "dfinal_states", "final_states' shape");
    TORCH_CHECK_TYPE(dfinal_in->scalar_type() == x_in.scalar_type(), "selscan: dfinal_states must have x's dtype");
    SameDeviceAs(x_in, "x", *dfinal_in, "dfinal_states");
  }
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
    CheckOffsetsValues(cu_seqlens, s.L, "conv backward");
    for (int i = 0; i < kConvNumGrads; i++)
      if (want[i] && out[i].numel()) out[i].zero_();
    if (want[kConvDinit] && dfinal && out[kConvDinit].numel()) out[kConvDinit].copy_(*dfinal);
    return out;
  }
  const OptT cu_host = HostCuSeqlens(cu_seqlens);
  selscan_conv_problem p = BuildConv(s, x, weight, bias, init, cu_host, silu);
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
  OnDevice(x, "x", cu_host, [&] {
    const int64_t n = ConvParts(s.dim);
    RunParts(p, n, "conv backward (CPU)", NamesOf(kConvNames),
             [&](selscan_conv_problem* q, int64_t i) { return selscan_conv_backward_cpu_part(q, &g, i, n); });
  }, [&](auto& c) { c.Check(selscan_binding_cuda_conv_backward(&p, &g, &c.call), "conv backward (CUDA)", diag); });
  return out;
}

Tensor ConvStep(const Tensor& state, const Tensor& x_in, const Tensor& weight_in, const OptT& bias_in,
                const OptT& state_index, bool silu) {
  TORCH_CHECK_VALUE(x_in.dim() == 2 || x_in.dim() == 3, "selscan: x must have shape (batch, dim) or "
                    "(batch, dim, seqlen), got ", Shape(x_in));
  const int64_t batch = x_in.size(0), dim = x_in.size(1), L = x_in.dim() == 3 ? x_in.size(2) : 1;
  (void)DtypeOf(x_in, "x");
  TORCH_CHECK_VALUE(weight_in.dim() == 2 && weight_in.size(0) == dim, "selscan: weight must have shape (dim, width) "
                    "with dim = ", dim, ", got ", Shape(weight_in));
  const int64_t W = weight_in.size(1);
  TORCH_CHECK_NOT_IMPLEMENTED(W >= 2 && W <= SELSCAN_CONV_MAX_WIDTH, "selscan: the conv width (weight.shape[1]) "
                              "must be 2 .. ", SELSCAN_CONV_MAX_WIDTH, ", got ", W);
  CheckStepParam(weight_in, x_in, "weight");
  SameDeviceAs(x_in, "x", weight_in, "weight");
  TORCH_CHECK_VALUE(state.dim() == 3 && state.size(1) == dim && state.size(2) >= W - 1,
                    "selscan: conv_state must have shape (batch, dim, state_len) with dim = ", dim,
                    " and state_len >= width - 1 = ", W - 1, ", got ", Shape(state));
  TORCH_CHECK_TYPE(state.scalar_type() == x_in.scalar_type(), "selscan: conv_state must have x's dtype ",
                   x_in.scalar_type(), " (it is updated in place), got ", state.scalar_type());
  SameDeviceAs(x_in, "x", state, "conv_state");
  CheckInPlace(state, "conv_state");  // an expand()ed state would be written past its view (>>harden-overlap)
  if (bias_in) {
    CheckShape(*bias_in, {dim}, "bias", "(dim,)");
    CheckStepParam(*bias_in, x_in, "bias");
    SameDeviceAs(x_in, "x", *bias_in, "bias");
  }
  if (state_index) {
    CheckShape(*state_index, {batch}, "conv_state_indices", "(batch,)");
    TORCH_CHECK_TYPE(state_index->scalar_type() == at::kInt, "selscan: conv_state_indices must be int32 here "
                     "(the Python wrapper converts int64)");
    SameDeviceAs(x_in, "x", *state_index, "conv_state_indices");
    if (state_index->is_cpu()) CheckStateIndexHost(*state_index, state.size(0), "conv step", "conv_state_indices");
  } else {
    TORCH_CHECK_VALUE(state.size(0) == batch, "selscan: conv_state must have batch = ", batch,
                      " rows without conv_state_indices, got ", Shape(state));
  }
  Tensor y = NewInOrderOf(x_in, x_in.sizes(), x_in.scalar_type());
  if (batch == 0 || dim == 0 || L == 0) return y;
  // an empty cache: every row is padding, out 0 (selscan reads n_cache 0 as batch): Step's rule
  if (state.size(0) == 0) return y.zero_();
  const bool params_t = StepParamsInT(x_in, {&weight_in, Given(bias_in)});
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
  s.dtype = DtypeOf(x, "x");
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
  }, [&](auto& c) { c.Check(selscan_binding_cuda_conv_step(&s, &c.call), "conv step (CUDA)", diag); });
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
