// selscan_torch.cpp - selscan's selective scan as PyTorch 2 custom ops: the registration (the ops'
// schemas; their kernels: scan.cpp, step.cpp, conv.cpp, ssd.cpp, norm.cpp), selscan's implementation (this TU) and the
// _C module with what it answers the Python side. What the TUs share: selscan_torch.h.
#include <Python.h>  // the _C module (Python's limited API: abi3), first as Python asks

#define SELSCAN_IMPLEMENTATION
#include "selscan.h"
#include "selscan_torch.h"

namespace selscan_torch {

namespace {

PyObject* CpuBackendPy(PyObject*, PyObject*) { return PyUnicode_FromString(selscan_cpu_backend()); }
// whether the CUDA kernels take any L stride on the fast path (SELSCAN_TORCH_CHANNELS_LAST builds)
PyObject* CudaChannelsLastPy(PyObject*, PyObject*) {
#ifdef WITH_CUDA
  return PyBool_FromLong(selscan_binding_cuda_channels_last() != 0);
#else
  return PyBool_FromLong(0);
#endif
}

}  // namespace
}  // namespace selscan_torch

STABLE_TORCH_LIBRARY(selscan, m) {
  m.def("fwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, Tensor? delta_bias, "
        "Tensor? h0, Tensor? cu_seqlens, bool delta_softplus, bool return_last_state, bool save_checkpoint) "
        "-> (Tensor y, Tensor last_state, Tensor checkpoint)");
  m.def("bwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, Tensor? delta_bias, "
        "Tensor? h0, Tensor? cu_seqlens, Tensor dy, Tensor? dh_last, Tensor checkpoint, bool delta_softplus, "
        "int[] grad_mask) -> Tensor[]");
  m.def("step(Tensor(a!) state, Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, "
        "Tensor? dt_bias, Tensor? state_index, bool dt_softplus, bool A_is_log=False) -> Tensor");
  m.def("conv_fwd(Tensor x, Tensor weight, Tensor? bias, Tensor? init_state, Tensor? cu_seqlens, bool silu, "
        "bool return_final_state, bool out_dim_major) -> (Tensor y, Tensor final_state)");
  m.def("conv_bwd(Tensor x, Tensor weight, Tensor? bias, Tensor? init_state, Tensor? cu_seqlens, Tensor dy, "
        "Tensor? dfinal_state, bool silu, int[] grad_mask) -> Tensor[]");
  m.def("conv_step(Tensor(a!) state, Tensor x, Tensor weight, Tensor? bias, Tensor? state_index, bool silu) "
        "-> Tensor");
  m.def("ssd_fwd(Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, Tensor? dt_bias, "
        "Tensor? initial_states, Tensor? seq_idx, Tensor? cu_seqlens, bool dt_softplus, float dt_min, float dt_max, "
        "bool return_final_states) -> (Tensor out, Tensor final_states)");
  m.def("ssd_bwd(Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, Tensor? dt_bias, "
        "Tensor? initial_states, Tensor? seq_idx, Tensor? cu_seqlens, Tensor dout, Tensor? dfinal_states, "
        "bool dt_softplus, float dt_min, float dt_max, int[] grad_mask) -> Tensor[]");
  m.def("norm_fwd(Tensor y, Tensor? z, Tensor? weight, int group_size, float eps, bool norm_before_gate) -> Tensor");
  m.def("norm_bwd(Tensor y, Tensor? z, Tensor? weight, Tensor dout, int group_size, float eps, bool norm_before_gate, "
        "int[] grad_mask) -> Tensor[]");
}

// ============================================================================================
// >>py: the extension module _C (importing it runs the TORCH_LIBRARY registrations above) and what
// it answers the Python side: the common layer's argument checks and the library's answers for the
// fake kernels (selscan_torch/_checks.py), which ask instead of restating a rule.
// ============================================================================================

namespace selscan_torch {
namespace {

// A sequence of Python ints as int64 (false with a Python error set otherwise).
// (Python's limited API only: the module is built for the stable ABI, abi3.)
bool Int64s(PyObject* seq, std::vector<int64_t>* out) {
  const Py_ssize_t n = PySequence_Size(seq);
  if (n < 0) return false;
  out->resize(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* v = PySequence_GetItem(seq, i);
    if (!v) return false;
    (*out)[static_cast<size_t>(i)] = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if ((*out)[static_cast<size_t>(i)] == -1 && PyErr_Occurred()) return false;
  }
  return true;
}

// The ops' arguments as Python describes them: each None or (sizes, strides, str(dtype),
// str(device)); a size not known (symbolic) is -1.
struct PyArgs {
  std::vector<std::vector<int64_t>> sizes, strides;
  std::vector<std::string> types;
  std::vector<bind::Arg> a;
  bool Parse(PyObject* seq) {
    const Py_ssize_t n = PySequence_Size(seq);
    if (n < 0) return false;
    sizes.resize(static_cast<size_t>(n));  // no reallocation after: the Args point into these
    strides.resize(static_cast<size_t>(n));
    types.resize(static_cast<size_t>(n));
    a.assign(static_cast<size_t>(n), bind::Arg());
    bool ok = true;
    for (Py_ssize_t i = 0; i < n && ok; i++) {
      struct Ref {  // the item, alive while its strings (ty, dev) are read
        PyObject* p;
        ~Ref() { Py_XDECREF(p); }
      } item{PySequence_GetItem(seq, i)};
      PyObject* o = item.p;
      if (!o) return false;
      if (o == Py_None) continue;
      PyObject *sz, *st;
      const char *ty, *dev;
      ok = PyArg_ParseTuple(o, "OOss", &sz, &st, &ty, &dev) && Int64s(sz, &sizes[static_cast<size_t>(i)]) &&
           Int64s(st, &strides[static_cast<size_t>(i)]);
      if (!ok) break;
      types[static_cast<size_t>(i)] = ty;
      ScalarType stype = ScalarType::Undefined;
      for (ScalarType t : {ScalarType::Float, ScalarType::Half, ScalarType::BFloat16, ScalarType::Int, ScalarType::Long})
        if (types[static_cast<size_t>(i)] == TypeName(t)) stype = t;
      bind::Arg& x = a[static_cast<size_t>(i)];
      try {
        x = ArgOf(DeviceKey(torch::stable::Device(std::string(dev))),
                  stype == ScalarType::Undefined ? ScalarType::Double : stype);
      } catch (const std::exception& e) {
        PyErr_SetString(PyExc_ValueError, e.what());
        ok = false;
        break;
      }
      x.type = stype == ScalarType::Undefined ? bind::Type::kOther : TypeOf(stype);
      x.type_name = types[static_cast<size_t>(i)].c_str();
      x.ndim = static_cast<int64_t>(sizes[static_cast<size_t>(i)].size());
      x.sizes = sizes[static_cast<size_t>(i)].data();
      x.strides = strides[static_cast<size_t>(i)].size() == sizes[static_cast<size_t>(i)].size()
                      ? strides[static_cast<size_t>(i)].data() : nullptr;
    }
    return ok;
  }
};

bool OpOf(const char* name, Op* op, size_t* n_args) {
  static const struct { const char* name; Op op; size_t n; } ops[] = {
      {"fwd", Op::kFwd, 10}, {"bwd", Op::kBwd, 13}, {"step", Op::kStep, 10},
      {"conv_fwd", Op::kConvFwd, 5}, {"conv_bwd", Op::kConvBwd, 7}, {"conv_step", Op::kConvStep, 5},
      {"ssd_fwd", Op::kSsdFwd, 11}, {"ssd_bwd", Op::kSsdBwd, 13}, {"norm_fwd", Op::kNormFwd, 3},
      {"norm_bwd", Op::kNormBwd, 4}};
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

// _C.check_args(op, args[, dt_limit]) -> (refusal, sizes): the op's argument check (the one its
// kernels run) on described tensors (the fake kernels'); dt_limit: the SSD's clamp bounds (min, max)
// where it clamps; the norm's: (group_size, eps, norm_before_gate). refusal: None, or (exception name, message, rule code, the argument's name);
// sizes: (batch, dim, L, N, G, rows, n_seqs, n_cache, width, state_len), -1 where not known (the
// SSD's dim: nheads * headdim).
PyObject* CheckArgsPy(PyObject*, PyObject* args) {
  const char* name;
  PyObject* seq;
  PyObject* limit = Py_None;
  if (!PyArg_ParseTuple(args, "sO|O", &name, &seq, &limit)) return nullptr;
  float lim[2] = {0.f, 0.f};
  double norm[3] = {0, 0, 0};
  Op op;
  size_t n = 0;
  PyArgs pa;
  if (!OpOf(name, &op, &n)) return nullptr;
  const bool is_norm = op == Op::kNormFwd || op == Op::kNormBwd;
  if (limit != Py_None && is_norm) {
    long long gs = 0;
    int before = 0;
    if (!PyArg_ParseTuple(limit, "Ldp", &gs, &norm[1], &before)) return nullptr;
    norm[0] = static_cast<double>(gs);
    norm[2] = before;
  } else if (limit != Py_None) {
    double lo = 0, hi = 0;
    if (!PyArg_ParseTuple(limit, "dd", &lo, &hi)) return nullptr;
    lim[0] = static_cast<float>(lo);
    lim[1] = static_cast<float>(hi);
  }
  if (!pa.Parse(seq)) return nullptr;
  if (pa.a.size() != n) return PyErr_Format(PyExc_ValueError, "selscan: %s takes %zu arguments", name, n);
  bind::Checked k;
  const bind::Refusal r = CheckArgs(op, pa.a.data(), nullptr, nullptr, &k, limit != Py_None && !is_norm ? lim : nullptr,
                                    is_norm && limit != Py_None ? norm : nullptr);
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

// _C.fwd_unit_l(args) -> bool: whether selscan::fwd's L-strided operands of these (the fwd schema's
// 10, described) are copied to unit L strides: selscan's CUDA plan's answer (>>unit-l), which the
// autograd kernel follows (it makes the copies it saves) and the fake kernel too (y contiguous where
// u is copied). An 11th, dy (described): whether the backward copies an L-strided dy.
PyObject* FwdUnitLPy(PyObject*, PyObject* seq) {
  PyArgs pa;
  if (!pa.Parse(seq)) return nullptr;
  if (pa.a.size() != 10 && pa.a.size() != 11)
    return PyErr_Format(PyExc_ValueError, "selscan: fwd takes 10 arguments (and dy)");
  bind::Checked k;
  const bool copies = CheckArgs(Op::kFwd, pa.a.data(), nullptr, nullptr, &k).ok() &&
                      WantsUnitL(pa.a.data(), k, pa.a.size() == 11 ? &pa.a[10] : nullptr);
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
    const torch::stable::Device d{std::string(dev)};
    if (d.type() == DeviceType::CUDA) {
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

// CONV_MIN_WIDTH / CONV_MAX_WIDTH: selscan.h's SELSCAN_CONV_MIN_WIDTH / _MAX_WIDTH (for tests and callers such as
// the integrations' width fallback; the checks are the library's).
extern "C" PyMODINIT_FUNC PyInit__C(void) {
  using namespace selscan_torch;
  static PyMethodDef methods[] = {
      {"check_args", CheckArgsPy, METH_VARARGS, "the common layer's argument check of an op on described tensors"},
      {"fwd_unit_l", FwdUnitLPy, METH_O, "whether selscan::fwd copies L-strided operands (selscan's CUDA plan)"},
      {"checkpoint_numel", CheckpointNumelPy, METH_VARARGS, "the forward's checkpoint floats on a device"},
      {"error_message", ErrorMessagePy, METH_VARARGS, "a refusal's message in the common layer's words"},
      {"elements_meet", ElementsMeetPy, METH_VARARGS, "whether two strided tensors share a byte (ElementsMeet)"},
      {"cpu_backend", CpuBackendPy, METH_NOARGS, "the CPU fast path's vector backend (selscan_cpu_backend)"},
      {"cuda_channels_last", CudaChannelsLastPy, METH_NOARGS, "whether the CUDA fast kernels take any L stride"},
      {nullptr, nullptr, 0, nullptr}};
  static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_C", "selscan's PyTorch ops (torch.ops.selscan)", -1,
                                   methods};
  PyObject* m = PyModule_Create(&def);
  if (m && (PyModule_AddIntConstant(m, "CONV_MIN_WIDTH", SELSCAN_CONV_MIN_WIDTH) != 0 ||
            PyModule_AddIntConstant(m, "CONV_MAX_WIDTH", SELSCAN_CONV_MAX_WIDTH) != 0)) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
