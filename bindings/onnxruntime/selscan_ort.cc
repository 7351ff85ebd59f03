// selscan_ort.cc - selscan's selective scan as ONNX Runtime custom operators (libselscan_ort.so).
//
// Domain "selscan", opset version 1 (SELSCAN_ORT_OPSET). Every op has a kernel per dtype T in
// {float, float16, bfloat16}; all tensors are ONNX Runtime's (dense, row-major), on the CPU.
//
//   SelectiveScan(u, delta, A, B, C, D?, z?, delta_bias?, h0?, cu_seqlens?) -> (y, last_state?)
//     u, delta, z (batch, dim, L) T; A (dim, N) float; B, C (batch, N, L) or (batch, G, N, L) T, or
//     (dim, N) float (constant over time); D, delta_bias (dim) float; h0 (rows, dim, N) float;
//     cu_seqlens (n_seqs + 1) int64 (packed sequences, batch 1; rows = n_seqs, else batch).
//     y (batch, dim, L) T; last_state (rows, dim, N) float, the state after the last step.
//     attributes: delta_softplus (int, default 0); return_last_state (int, default: 1 when the
//     node has the second output; 1 without that output is an error; 0 with it: last_state is an
//     empty (0,) tensor, like torch's placeholder).
//   SelectiveStateUpdate(state, x, dt, A, B, C, D?, z?, dt_bias?, state_index?) -> (y, state_out)
//     one decode step: state (n_cache, dim, N) float; x, dt, z (batch, dim) T; A (dim, N) float;
//     B, C (batch, G, N) T; D, dt_bias (dim) float; state_index (batch) int32 (the state row of
//     each batch row; negative: padding, y 0 and no state row touched). state_out is state with
//     the rows stepped (ONNX has no in-place update: state is copied into state_out, which is then
//     stepped in place). attribute: dt_softplus (int, default 0).
//
// The math is selscan.h's (the forward of selscan_torch.selective_scan_fn, the decode step of
// selective_state_update). Kernels run selscan's parts API on ONNX Runtime's intra-op thread pool
// (OrtApi::KernelContext_ParallelFor; results are bitwise the same for any thread count). Errors
// come back as an ONNX Runtime status naming the op, the input and the rule, e.g.
//   selscan SelectiveScan: input 'B' must have shape (dim, N), (batch, N, L) or (batch, G, N, L) ...
//   selscan SelectiveScan: invalid size, group count, sequence offsets or index [SELSCAN_ERR_SHAPE]
//     (input 'cu_seqlens': not increasing (offset 2 is 10 after 20))
// No exception crosses into ONNX Runtime; nothing is allocated but the workspace and the index
// checks' scratch (operator new).
//
// ONNX Runtime loads the library with SessionOptions.register_custom_ops_library(path), which calls
// RegisterCustomOps below. Build: make ort-ops (build/ort/libselscan_ort.so), or pip install
// ./bindings/torch (selscan_torch.onnx.ort_library() returns its path).
#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "ort_abi.h"

#define SELSCAN_IMPLEMENTATION
#define SELSCAN_STATIC
#include "selscan.h"
#include "selscan_binding.h"  // bindings/common: the host index rules (cu_seqlens, state_index)

#define SELSCAN_ORT_DOMAIN "selscan"
#define SELSCAN_ORT_OPSET 1

namespace {

namespace bind = selscan_binding;

// ---- >>ort-api: the OrtApi entries (ort_abi.h), typed -------------------------------------------

struct Api {
#define SELSCAN_ORT_MEMBER(idx, name, ret, params) ret(SELSCAN_ORT_CALL *name) params = nullptr;
  SELSCAN_ORT_ENTRIES(SELSCAN_ORT_MEMBER)
#undef SELSCAN_ORT_MEMBER
};

Api g_api;  // set once by RegisterCustomOps (the same table for every session)

void LoadApi(const OrtApi *table) {
  typedef void (*AnyFn)(void);
  const AnyFn *fn = reinterpret_cast<const AnyFn *>(table);
#define SELSCAN_ORT_LOAD(idx, name, ret, params) \
  g_api.name = reinterpret_cast<ret(SELSCAN_ORT_CALL *) params>(fn[idx]);
  SELSCAN_ORT_ENTRIES(SELSCAN_ORT_LOAD)
#undef SELSCAN_ORT_LOAD
}

// An error for ONNX Runtime (it owns the status).
OrtStatus *Error(OrtErrorCode code, const std::string &msg) { return g_api.CreateStatus(code, msg.c_str()); }

// ---- >>ort-tensors: inputs and outputs --------------------------------------------------------

const char *TypeName(ONNXTensorElementDataType t) {
  switch (t) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return "float";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return "float16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return "bfloat16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return "int32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return "int64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return "double";
    default: return "another type";
  }
}

std::string ShapeText(const std::vector<int64_t> &d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); i++) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

struct Tensor {
  bool present = false;
  const char *name = "";
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  std::vector<int64_t> dims;
  void *data = nullptr;
  int64_t numel = 0;
  size_t rank() const { return dims.size(); }
};

// Type and shape of an OrtValue.
OrtStatus *Describe(const OrtValue *v, Tensor *t) {
  OrtTensorTypeAndShapeInfo *info = nullptr;
  if (OrtStatus *st = g_api.GetTensorTypeAndShape(v, &info)) return st;
  size_t n = 0;
  OrtStatus *st = g_api.GetTensorElementType(info, &t->type);
  if (!st) st = g_api.GetDimensionsCount(info, &n);
  if (!st) {
    t->dims.assign(n, 0);
    if (n) st = g_api.GetDimensions(info, t->dims.data(), n);
  }
  g_api.ReleaseTensorTypeAndShapeInfo(info);
  if (st) return st;
  t->numel = 1;
  for (int64_t d : t->dims) t->numel *= d;
  return g_api.GetTensorMutableData(const_cast<OrtValue *>(v), &t->data);
}

// Input i (absent: an optional input the node leaves out, or past the node's inputs).
OrtStatus *Input(const OrtKernelContext *ctx, size_t n_inputs, size_t i, const char *name, Tensor *t) {
  t->name = name;
  t->present = false;
  if (i >= n_inputs) return nullptr;
  const OrtValue *v = nullptr;
  if (OrtStatus *st = g_api.KernelContext_GetInput(ctx, i, &v)) return st;
  if (!v) return nullptr;
  t->present = true;
  return Describe(v, t);
}

// Output i with the given shape (an optional output the node names "" has no buffer: absent).
OrtStatus *Output(OrtKernelContext *ctx, size_t i, const char *name, const std::vector<int64_t> &dims, Tensor *t,
                  bool optional = false) {
  t->name = name;
  t->present = false;
  OrtValue *v = nullptr;
  if (OrtStatus *st = g_api.KernelContext_GetOutput(ctx, i, dims.data(), dims.size(), &v)) return st;
  if (!v && optional) return nullptr;
  if (!v) return Error(ORT_FAIL, std::string("selscan: no buffer for output '") + name + "'");
  t->present = true;
  return Describe(v, t);
}

selscan_tensor In(const Tensor &t) {  // contiguous: all strides 0
  selscan_tensor s;
  std::memset(&s, 0, sizeof s);
  s.data = t.present ? t.data : nullptr;
  return s;
}
selscan_out_tensor Out(const Tensor &t) {
  selscan_out_tensor s;
  std::memset(&s, 0, sizeof s);
  s.data = t.present ? t.data : nullptr;
  return s;
}

// The inputs of a kernel call, in the op's order (names[0..n)); the first n_required must be
// present. *n_out: how many outputs the node has.
OrtStatus *Inputs(const OrtKernelContext *ctx, const char *op, const char *const *names, size_t n, size_t n_required,
                  Tensor *t, size_t *n_out) {
  size_t n_in = 0;
  if (OrtStatus *st = g_api.KernelContext_GetInputCount(ctx, &n_in)) return st;
  if (OrtStatus *st = g_api.KernelContext_GetOutputCount(ctx, n_out)) return st;
  for (size_t i = 0; i < n; i++)
    if (OrtStatus *st = Input(ctx, n_in, i, names[i], &t[i])) return st;
  for (size_t i = 0; i < n_required; i++)
    if (!t[i].present)
      return Error(ORT_INVALID_ARGUMENT, std::string("selscan ") + op + ": input '" + names[i] + "' is required");
  return nullptr;
}

// The optional second output of SelectiveScan / CausalConv1d (last_state / final_state) and its
// attribute (return_last_state / return_final_state; attr -1: not given). *want: the node has the
// output and attr is not 0 (with attr 0 the output is an empty (0,) tensor, torch's placeholder);
// attr 1 without the output is an error.
OrtStatus *WantSecondOutput(const char *op, const char *attr_name, int64_t attr, const char *out_name, size_t n_out,
                            bool *want) {
  if (attr == 1 && n_out < 2)
    return Error(ORT_INVALID_ARGUMENT, std::string("selscan ") + op + ": " + attr_name +
                                           "=1 but the node has no second output (" + out_name + ")");
  *want = n_out >= 2 && attr != 0;
  return nullptr;
}

// That output, where the node has it: dims when *want, else (0,). *want stays true only where it
// has a buffer.
OrtStatus *SecondOutput(OrtKernelContext *ctx, size_t n_out, const char *name, const std::vector<int64_t> &dims,
                        bool *want, Tensor *t) {
  if (n_out < 2) return nullptr;
  if (OrtStatus *st = Output(ctx, 1, name, *want ? dims : std::vector<int64_t>{0}, t, true)) return st;
  *want = *want && t->present;
  return nullptr;
}

// dst = src (dst's elements of esize bytes), or zeros where src is absent; nothing where dst is
// empty or is src.
void CopyOrZero(const Tensor &dst, const Tensor &src, size_t esize) {
  if (!dst.numel || dst.data == src.data) return;
  const size_t bytes = static_cast<size_t>(dst.numel) * esize;
  if (src.present) std::memcpy(dst.data, src.data, bytes);
  else std::memset(dst.data, 0, bytes);
}

// ---- >>ort-checks: argument checks with messages naming the input ------------------------------

// Collects the first failed check of a kernel call as "selscan <Op>: <message>".
struct Checker {
  const char *op;
  std::string msg;
  OrtErrorCode code = ORT_INVALID_ARGUMENT;  // the first failure's
  bool ok() const { return msg.empty(); }
  bool Fail(const std::string &m, OrtErrorCode c = ORT_INVALID_ARGUMENT) {
    if (msg.empty()) { msg = std::string("selscan ") + op + ": " + m; code = c; }
    return false;
  }
  // A rule of bindings/common failed on input `input`: worded like SelscanError (selscan's own
  // message for the same rule where selscan is called).
  bool Rule(selscan_status st, const char *input, const std::string &rule) {
    return Fail(std::string(selscan_status_string(st)) + " [" + selscan_status_name(st) + "] (input '" + input +
                "': " + rule + ")");
  }
  bool Type(const Tensor &t, ONNXTensorElementDataType want, const char *what) {
    if (t.type == want) return true;
    return Fail(std::string("input '") + t.name + "' must be " + what + " (" + TypeName(want) + "), got " +
                TypeName(t.type));
  }
  bool Shape(const Tensor &t, const std::vector<int64_t> &want, const char *what) {
    if (t.dims == want) return true;
    return Fail(std::string("input '") + t.name + "' must have shape " + what + " = " + ShapeText(want) + ", got " +
                ShapeText(t.dims));
  }
  // The leading rank check (what: the shape it names); false: return Status().
  bool Rank(const Tensor &t, size_t rank, const char *what) {
    if (t.rank() == rank) return true;
    return Fail(std::string("input '") + t.name + "' must have shape " + what + ", got " + ShapeText(t.dims));
  }
  // t (where given) has ref's shape and type: delta / z like u, dt / z like x.
  void Like(const Tensor &t, const Tensor &ref) {
    if (!t.present) return;
    Shape(t, ref.dims, (std::string(ref.name) + "'s shape").c_str());
    Type(t, ref.type, (std::string(ref.name) + "'s type").c_str());
  }
  // An optional per-channel parameter (D, delta_bias, dt_bias, bias): (dim,) float.
  void PerChannel(const Tensor &t, int64_t dim) {
    if (!t.present) return;
    Shape(t, {dim}, "(dim,)");
    Type(t, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, "float");
  }
  // B's and C's group counts: equal, and dividing dim.
  void Groups(int64_t gB, int64_t gC, int64_t dim) {
    if (gC != gB) Fail("input 'C' has " + std::to_string(gC) + " groups but 'B' has " + std::to_string(gB));
    if (!(gB >= 1 && dim % gB == 0))
      Fail("the group count of B / C (" + std::to_string(gB) + ") must divide dim (" + std::to_string(dim) + ")");
  }
  // cu_seqlens where given: (n_seqs + 1,) int64, batch 1, offsets from 0 to L, non-decreasing.
  // *rows: the state rows (n_seqs, else batch). The values are checked here whatever the sizes:
  // selscan, which checks them too, is not called on an empty problem.
  void CuSeqlens(const Tensor &cu, int64_t batch, int64_t L, int64_t *rows, int64_t *n_seqs) {
    *rows = batch;
    *n_seqs = 0;
    if (!cu.present) return;
    Type(cu, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, "int64");
    if (!(cu.rank() == 1 && cu.dims[0] >= 2))
      Fail("input 'cu_seqlens' must have shape (n_seqs + 1,) with n_seqs >= 1, got " + ShapeText(cu.dims));
    if (batch != 1) Fail("packed sequences (cu_seqlens) need batch 1, got batch " + std::to_string(batch));
    if (!ok()) return;
    std::string rule;
    const selscan_status st = bind::OffsetsRule(static_cast<const int64_t *>(cu.data), cu.dims[0], L, &rule);
    if (st != SELSCAN_OK) { Rule(st, "cu_seqlens", rule); return; }
    *n_seqs = cu.dims[0] - 1;
    *rows = *n_seqs;
  }
  // state_index where given: (batch,) int32, every entry below n_cache (state's rows), no row twice;
  // without it, state has batch rows. Checked here whatever the sizes (selscan is not called on an
  // empty problem, and reads n_cache 0 as batch).
  void StateIndex(const Tensor &sidx, int64_t batch, int64_t n_cache) {
    if (!sidx.present) {
      if (n_cache != batch)
        Fail("input 'state' has " + std::to_string(n_cache) + " rows but x has batch " + std::to_string(batch) +
             " (give state_index to address a larger cache)");
      return;
    }
    Shape(sidx, {batch}, "(batch,)");
    Type(sidx, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32, "int32");
    if (!ok()) return;
    std::string rule;
    const selscan_status st = bind::StateIndexRule(static_cast<const int32_t *>(sidx.data), batch, n_cache, &rule);
    if (st != SELSCAN_OK) Rule(st, "state_index", rule);
  }
  OrtStatus *Status() const { return ok() ? nullptr : Error(code, msg); }
};

selscan_dtype DtypeOf(ONNXTensorElementDataType t) {
  return t == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 ? SELSCAN_F16
         : t == ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16 ? SELSCAN_BF16 : SELSCAN_F32;
}
size_t ElemSize(ONNXTensorElementDataType t) { return t == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT ? 4 : 2; }

// selscan's status and diag -> an ONNX Runtime error naming the input.
OrtStatus *SelscanError(const char *op, selscan_status st, const selscan_diag &d) {
  std::string m = std::string("selscan ") + op + ": " + selscan_status_string(st) + " [" + selscan_status_name(st) + "]";
  if (d.operand) m += std::string(" (input '") + d.operand + "': " + (d.rule ? d.rule : "invalid") + ")";
  return Error(st == SELSCAN_ERR_UNSUPPORTED ? ORT_NOT_IMPLEMENTED : ORT_INVALID_ARGUMENT, m);
}

// ---- >>ort-parts: selscan's parts on ONNX Runtime's intra-op pool -------------------------------

// Parts per call: one per hardware thread (ONNX Runtime's C API does not tell the pool's size; the
// results are bitwise the same for every split, and a pool with fewer threads runs several parts
// each), at most the number of work items.
int64_t NumParts(int64_t items) {
  int64_t hw = static_cast<int64_t>(std::thread::hardware_concurrency());
  return std::max<int64_t>(1, std::min<int64_t>(std::max<int64_t>(hw, 1), items));
}

template <typename P, typename Fn>
struct PartsJob {
  const P *p;
  const Fn *fn;
  std::vector<selscan_status> st;
  std::vector<selscan_diag> diag;
  static void Run(void *user, size_t i) {
    PartsJob *j = static_cast<PartsJob *>(user);
    P q = *j->p;  // each part its own copy: a part writes only its diag
    q.diag = &j->diag[i];
    j->st[i] = (*j->fn)(&q, static_cast<int64_t>(i));
  }
};

// Runs fn(&q, part) for every part on the pool; the first failing part's status as an error.
template <typename P, typename Fn>
OrtStatus *RunParts(const OrtKernelContext *ctx, const char *op, const P &p, int64_t n_parts, const Fn &fn) {
  PartsJob<P, Fn> job;
  job.p = &p;
  job.fn = &fn;
  job.st.assign(static_cast<size_t>(n_parts), SELSCAN_OK);
  job.diag.assign(static_cast<size_t>(n_parts), selscan_diag{nullptr, nullptr, SELSCAN_RULE_NONE});
  if (n_parts == 1) {
    PartsJob<P, Fn>::Run(&job, 0);
  } else if (OrtStatus *st = g_api.KernelContext_ParallelFor(ctx, &PartsJob<P, Fn>::Run, static_cast<size_t>(n_parts),
                                                             0, &job)) {
    return st;
  }
  for (size_t i = 0; i < job.st.size(); i++)
    if (job.st[i] != SELSCAN_OK) return SelscanError(op, job.st[i], job.diag[i]);
  return nullptr;
}

// A workspace buffer (operator new: any pointer works, selscan aligns it up inside).
struct Workspace {
  std::vector<unsigned char> buf;
  bool Make(size_t bytes) {
    try {
      buf.resize(bytes);
    } catch (const std::bad_alloc &) {
      return false;
    }
    return true;
  }
  void *ptr() { return buf.empty() ? nullptr : buf.data(); }
};

// ---- >>ort-scan: SelectiveScan ------------------------------------------------------------------

enum { kU = 0, kDelta, kA, kB, kC, kD, kZ, kDeltaBias, kH0, kCuSeqlens, kScanInputs };

struct ScanKernel {
  int64_t softplus = 0;
  int64_t last_state_attr = -1;  // -1: not given
};

OrtStatus *ScanCompute(const ScanKernel &k, OrtKernelContext *ctx) {
  const char *op = "SelectiveScan";
  static const char *const names[kScanInputs] = {"u", "delta", "A", "B", "C", "D", "z", "delta_bias", "h0", "cu_seqlens"};
  Tensor t[kScanInputs];
  size_t n_out = 0;
  if (OrtStatus *st = Inputs(ctx, op, names, kScanInputs, kD, t, &n_out)) return st;
  const Tensor &u = t[kU], &delta = t[kDelta], &A = t[kA], &B = t[kB], &C = t[kC], &D = t[kD], &z = t[kZ],
               &bias = t[kDeltaBias], &h0 = t[kH0], &cu = t[kCuSeqlens];
  bool want_last = false;
  if (OrtStatus *st = WantSecondOutput(op, "return_last_state", k.last_state_attr, "last_state", n_out, &want_last))
    return st;

  Checker c{op, {}};
  if (!c.Rank(u, 3, "(batch, dim, L)")) return c.Status();
  const ONNXTensorElementDataType T = u.type;
  const int64_t batch = u.dims[0], dim = u.dims[1], L = u.dims[2];
  const ONNXTensorElementDataType F32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  c.Like(delta, u);
  if (A.rank() != 2 || A.dims[0] != dim)
    c.Fail("input 'A' must have shape (dim, N) with dim = " + std::to_string(dim) + ", got " + ShapeText(A.dims));
  c.Type(A, F32, "float");
  if (!c.ok()) return c.Status();
  const int64_t N = A.dims[1];
  bool fixed[2] = {false, false};
  int64_t groups[2] = {1, 1};
  const Tensor *bc[2] = {&B, &C};
  for (int i = 0; i < 2; i++) {
    const Tensor &x = *bc[i];
    if (x.rank() == 2) {
      fixed[i] = true;
      c.Shape(x, {dim, N}, "(dim, N) (constant over time)");
      c.Type(x, F32, "float when constant over time");
    } else {
      const size_t o = x.rank() == 3 ? 1 : 2;
      if (!((x.rank() == 3 || x.rank() == 4) && x.dims[0] == batch && x.dims[o] == N && x.dims[o + 1] == L))
        c.Fail(std::string("input '") + x.name + "' must have shape (dim, N), (batch, N, L) or (batch, G, N, L) with "
               "batch = " + std::to_string(batch) + ", N = " + std::to_string(N) + ", L = " + std::to_string(L) +
               ", got " + ShapeText(x.dims));
      c.Type(x, T, "u's type when it varies over time");
      groups[i] = x.rank() == 4 ? x.dims[1] : 1;
    }
  }
  if (!c.ok()) return c.Status();
  // a B / C constant over time has no groups: the other one's count holds
  const int64_t G = fixed[0] ? groups[1] : groups[0];
  c.Groups(G, fixed[1] ? G : groups[1], dim);
  c.PerChannel(D, dim);
  c.Like(z, u);
  c.PerChannel(bias, dim);
  int64_t rows = 0, n_seqs = 0;
  c.CuSeqlens(cu, batch, L, &rows, &n_seqs);
  if (h0.present) {
    c.Shape(h0, {rows, dim, N}, cu.present ? "(n_seqs, dim, N)" : "(batch, dim, N)");
    c.Type(h0, F32, "float");
  }
  if (!c.ok()) return c.Status();

  Tensor y, last;
  if (OrtStatus *st = Output(ctx, 0, "y", u.dims, &y)) return st;
  if (OrtStatus *st = SecondOutput(ctx, n_out, "last_state", {rows, dim, N}, &want_last, &last)) return st;
  const bool empty = batch == 0 || dim == 0 || L == 0;
  if (empty || N == 0) {  // nothing to scan: y is 0, the last state is h0 (or 0)
    if (!empty) return Error(ORT_INVALID_ARGUMENT, "selscan SelectiveScan: input 'A' must have N >= 1 states, got " +
                                                       ShapeText(A.dims));
    if (y.numel) std::memset(y.data, 0, static_cast<size_t>(y.numel) * ElemSize(T));
    if (want_last) CopyOrZero(last, h0, 4);
    return nullptr;
  }
  selscan_problem p;
  std::memset(&p, 0, sizeof p);
  p.batch = batch; p.dim = dim; p.seqlen = L; p.dstate = N; p.n_groups = G;
  p.dtype = DtypeOf(T);
  p.flags = (k.softplus ? SELSCAN_DELTA_SOFTPLUS : 0u) | (fixed[0] ? SELSCAN_FIXED_B : 0u) |
            (fixed[1] ? SELSCAN_FIXED_C : 0u);
  if (cu.present) {
    p.cu_seqlens = static_cast<const int64_t *>(cu.data);
    p.n_seqs = n_seqs;
  }
  p.u = In(u); p.delta = In(delta); p.A = In(A); p.B = In(B); p.C = In(C);
  p.D = In(D); p.z = In(z); p.delta_bias = In(bias); p.h0 = In(h0);
  p.y = Out(y);
  if (want_last) p.h_last = Out(last);
  selscan_diag diag = {nullptr, nullptr, SELSCAN_RULE_NONE};
  p.diag = &diag;
  // work items of the forward: (batch row, channel tile); a tile is at least 4 channels
  const int64_t n = NumParts(batch * ((dim + 3) / 4));
  size_t ws_bytes = 0;
  selscan_status sst = selscan_workspace_size_parts(&p, nullptr, n, &ws_bytes);
  if (sst != SELSCAN_OK) return SelscanError(op, sst, diag);
  Workspace ws;
  if (!ws.Make(ws_bytes)) return Error(ORT_FAIL, "selscan SelectiveScan: out of memory for the workspace (" +
                                                     std::to_string(ws_bytes) + " bytes)");
  void *wp = ws.ptr();
  return RunParts(ctx, op, p, n, [&](selscan_problem *q, int64_t part) {
    return selscan_forward_cpu_part(q, part, n, wp, ws_bytes);
  });
}

// ---- >>ort-step: SelectiveStateUpdate -----------------------------------------------------------

enum { kState = 0, kX, kDt, kSA, kSB, kSC, kSD, kSZ, kDtBias, kStateIndex, kStepInputs };

struct StepKernel {
  int64_t softplus = 0;
};

OrtStatus *StepCompute(const StepKernel &k, OrtKernelContext *ctx) {
  const char *op = "SelectiveStateUpdate";
  static const char *const names[kStepInputs] = {"state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias", "state_index"};
  Tensor t[kStepInputs];
  size_t n_out = 0;
  if (OrtStatus *st = Inputs(ctx, op, names, kStepInputs, kSD, t, &n_out)) return st;
  if (n_out < 2)
    return Error(ORT_INVALID_ARGUMENT, "selscan SelectiveStateUpdate: the node needs both outputs (y, state_out)");
  const Tensor &state = t[kState], &x = t[kX], &dt = t[kDt], &A = t[kSA], &B = t[kSB], &C = t[kSC], &D = t[kSD],
               &z = t[kSZ], &bias = t[kDtBias], &sidx = t[kStateIndex];
  Checker c{op, {}};
  const ONNXTensorElementDataType F32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  if (!c.Rank(x, 2, "(batch, dim)")) return c.Status();
  const ONNXTensorElementDataType T = x.type;
  const int64_t batch = x.dims[0], dim = x.dims[1];
  if (!(state.rank() == 3 && state.dims[1] == dim))
    c.Fail("input 'state' must have shape (n_cache, dim, N) with dim = " + std::to_string(dim) + ", got " +
           ShapeText(state.dims));
  c.Type(state, F32, "float");
  if (!c.ok()) return c.Status();
  const int64_t n_cache = state.dims[0], N = state.dims[2];
  c.Like(dt, x);
  c.Shape(A, {dim, N}, "(dim, N)");
  c.Type(A, F32, "float");
  for (const Tensor *bc : {&B, &C}) {
    if (!(bc->rank() == 3 && bc->dims[0] == batch && bc->dims[2] == N))
      c.Fail(std::string("input '") + bc->name + "' must have shape (batch, G, N) with batch = " +
             std::to_string(batch) + ", N = " + std::to_string(N) + ", got " + ShapeText(bc->dims));
    c.Type(*bc, T, "x's type");
  }
  if (!c.ok()) return c.Status();
  const int64_t G = B.dims[1];
  c.Groups(G, C.dims[1], dim);
  c.PerChannel(D, dim);
  c.Like(z, x);
  c.PerChannel(bias, dim);
  c.StateIndex(sidx, batch, n_cache);
  if (!c.ok()) return c.Status();

  Tensor y, state_out;
  if (OrtStatus *st = Output(ctx, 0, "y", x.dims, &y)) return st;
  if (OrtStatus *st = Output(ctx, 1, "state_out", state.dims, &state_out)) return st;
  if (batch == 0 || dim == 0) {
    CopyOrZero(state_out, state, 4);
    return nullptr;
  }
  if (N == 0) return Error(ORT_INVALID_ARGUMENT, "selscan SelectiveStateUpdate: input 'state' must have N >= 1, got " +
                                                     ShapeText(state.dims));
  if (n_cache == 0) {  // an empty cache: every row is padding (checked above), y 0; selscan reads n_cache 0 as batch
    std::memset(y.data, 0, static_cast<size_t>(y.numel) * ElemSize(T));
    return nullptr;
  }
  selscan_step_problem s;
  std::memset(&s, 0, sizeof s);
  s.batch = batch; s.dim = dim; s.dstate = N; s.n_groups = G; s.n_cache = n_cache;
  s.dtype = DtypeOf(T);
  s.flags = k.softplus ? SELSCAN_DELTA_SOFTPLUS : 0u;
  s.state_index = sidx.present ? static_cast<const int32_t *>(sidx.data) : nullptr;
  s.u = In(x); s.delta = In(dt); s.A = In(A); s.B = In(B); s.C = In(C);
  s.D = In(D); s.z = In(z); s.delta_bias = In(bias);
  s.y = Out(y);
  s.state = Out(state_out);
  selscan_diag diag = {nullptr, nullptr, SELSCAN_RULE_NONE};
  s.diag = &diag;
  // validate before the copy (the indices, the shapes against the state) ...
  selscan_status sst = selscan_validate_step(&s);
  if (sst != SELSCAN_OK) return SelscanError(op, sst, diag);
  // ... then state_out = state, stepped in place
  CopyOrZero(state_out, state, 4);
  const int64_t n = NumParts(batch * ((dim + 255) / 256));
  return RunParts(ctx, op, s, n, [&](selscan_step_problem *q, int64_t part) {
    return selscan_step_cpu_part(q, part, n);
  });
}

// ---- >>ort-conv: CausalConv1d, CausalConv1dUpdate (selscan.h's causal conv1d, where it has it) ----
#ifdef SELSCAN_CONV_SILU
#define SELSCAN_ORT_HAS_CONV 1

enum { kCx = 0, kCWeight, kCBias, kCInit, kCCuSeqlens, kConvInputs };

struct ConvKernel {
  int64_t silu = 0;
  int64_t final_state_attr = -1;  // -1: not given
};

// The weight: (dim, W) float, W = 2 .. SELSCAN_CONV_MAX_WIDTH. The width is checked here, before
// any output is shaped by it (W - 1 < 0 would be ONNX Runtime's error) and whatever the sizes
// (selscan, which refuses other widths the same way, is not called on an empty problem).
bool CheckWeight(Checker &c, const Tensor &w, int64_t dim) {
  if (!(w.rank() == 2 && w.dims[0] == dim))
    return c.Fail("input 'weight' must have shape (dim, width) with dim = " + std::to_string(dim) + ", got " +
                  ShapeText(w.dims));
  const int64_t W = w.dims[1];
  if (!(W >= 2 && W <= SELSCAN_CONV_MAX_WIDTH))
    return c.Fail("input 'weight' must have width (its second dim) 2 .. " + std::to_string(SELSCAN_CONV_MAX_WIDTH) +
                      ", got " + ShapeText(w.dims),
                  W <= 0 ? ORT_INVALID_ARGUMENT : ORT_NOT_IMPLEMENTED);
  return c.Type(w, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, "float");
}

OrtStatus *ConvCompute(const ConvKernel &k, OrtKernelContext *ctx) {
  const char *op = "CausalConv1d";
  static const char *const names[kConvInputs] = {"x", "weight", "bias", "init_state", "cu_seqlens"};
  Tensor t[kConvInputs];
  size_t n_out = 0;
  if (OrtStatus *st = Inputs(ctx, op, names, kConvInputs, kCBias, t, &n_out)) return st;
  const Tensor &x = t[kCx], &w = t[kCWeight], &bias = t[kCBias], &init = t[kCInit], &cu = t[kCCuSeqlens];
  bool want_fin = false;
  if (OrtStatus *st = WantSecondOutput(op, "return_final_state", k.final_state_attr, "final_state", n_out, &want_fin))
    return st;
  Checker c{op, {}};
  if (!c.Rank(x, 3, "(batch, dim, L)")) return c.Status();
  const ONNXTensorElementDataType T = x.type;
  const int64_t batch = x.dims[0], dim = x.dims[1], L = x.dims[2];
  CheckWeight(c, w, dim);
  if (!c.ok()) return c.Status();
  const int64_t W = w.dims[1];
  c.PerChannel(bias, dim);
  int64_t rows = 0, n_seqs = 0;
  c.CuSeqlens(cu, batch, L, &rows, &n_seqs);
  if (init.present) {
    c.Shape(init, {rows, dim, W - 1}, cu.present ? "(n_seqs, dim, width - 1)" : "(batch, dim, width - 1)");
    c.Type(init, T, "x's type");
  }
  if (!c.ok()) return c.Status();
  Tensor y, fin;
  if (OrtStatus *st = Output(ctx, 0, "y", x.dims, &y)) return st;
  if (OrtStatus *st = SecondOutput(ctx, n_out, "final_state", {rows, dim, W - 1}, &want_fin, &fin)) return st;
  if (batch == 0 || dim == 0) return nullptr;
  if (L == 0) {  // nothing to convolve (packed: every sequence empty): the state passes through
    if (want_fin) CopyOrZero(fin, init, ElemSize(T));
    return nullptr;
  }
  selscan_conv_problem p;
  std::memset(&p, 0, sizeof p);
  p.batch = batch; p.dim = dim; p.seqlen = L; p.width = W;
  p.dtype = DtypeOf(T);
  p.flags = k.silu ? SELSCAN_CONV_SILU : 0u;
  if (cu.present) { p.cu_seqlens = static_cast<const int64_t *>(cu.data); p.n_seqs = n_seqs; }
  p.x = In(x); p.weight = In(w); p.bias = In(bias); p.init_state = In(init);
  p.y = Out(y);
  if (want_fin) p.final_state = Out(fin);
  const int64_t n = NumParts(dim);
  return RunParts(ctx, op, p, n, [&](selscan_conv_problem *q, int64_t part) {
    return selscan_conv_forward_cpu_part(q, part, n);
  });
}

enum { kCuState = 0, kCuX, kCuWeight, kCuBias, kCuStateIndex, kConvUpdateInputs };

OrtStatus *ConvUpdateCompute(const ConvKernel &k, OrtKernelContext *ctx) {
  const char *op = "CausalConv1dUpdate";
  static const char *const names[kConvUpdateInputs] = {"state", "x", "weight", "bias", "state_index"};
  Tensor t[kConvUpdateInputs];
  size_t n_out = 0;
  if (OrtStatus *st = Inputs(ctx, op, names, kConvUpdateInputs, kCuBias, t, &n_out)) return st;
  if (n_out < 2)
    return Error(ORT_INVALID_ARGUMENT, "selscan CausalConv1dUpdate: the node needs both outputs (y, state_out)");
  const Tensor &state = t[kCuState], &x = t[kCuX], &w = t[kCuWeight], &bias = t[kCuBias], &sidx = t[kCuStateIndex];
  Checker c{op, {}};
  if (x.rank() != 2 && x.rank() != 3)
    c.Fail("input 'x' must have shape (batch, dim) or (batch, dim, seqlen), got " + ShapeText(x.dims));
  if (!c.ok()) return c.Status();
  const ONNXTensorElementDataType T = x.type;
  const int64_t batch = x.dims[0], dim = x.dims[1], seqlen = x.rank() == 3 ? x.dims[2] : 1;
  CheckWeight(c, w, dim);
  if (!c.ok()) return c.Status();
  const int64_t W = w.dims[1];
  if (!(state.rank() == 3 && state.dims[1] == dim && state.dims[2] >= W - 1))
    c.Fail("input 'state' must have shape (n_cache, dim, state_len) with dim = " + std::to_string(dim) +
           ", state_len >= width - 1 = " + std::to_string(W - 1) + ", got " + ShapeText(state.dims));
  c.Type(state, T, "x's type");
  c.PerChannel(bias, dim);
  if (!c.ok()) return c.Status();
  c.StateIndex(sidx, batch, state.dims[0]);
  if (!c.ok()) return c.Status();
  Tensor y, state_out;
  if (OrtStatus *st = Output(ctx, 0, "y", x.dims, &y)) return st;
  if (OrtStatus *st = Output(ctx, 1, "state_out", state.dims, &state_out)) return st;
  const size_t esize = ElemSize(T);
  if (batch == 0 || dim == 0 || seqlen == 0) {
    CopyOrZero(state_out, state, esize);
    if (y.numel) std::memset(y.data, 0, static_cast<size_t>(y.numel) * esize);
    return nullptr;
  }
  if (state.dims[0] == 0) {  // an empty cache: every row is padding (checked above), y 0 (selscan: n_cache 0 = batch)
    std::memset(y.data, 0, static_cast<size_t>(y.numel) * esize);
    return nullptr;
  }
  selscan_conv_step_problem s;
  std::memset(&s, 0, sizeof s);
  s.batch = batch; s.dim = dim; s.width = W; s.state_len = state.dims[2]; s.n_cache = state.dims[0];
  s.seqlen = seqlen;
  s.dtype = DtypeOf(T);
  s.flags = k.silu ? SELSCAN_CONV_SILU : 0u;
  s.state_index = sidx.present ? static_cast<const int32_t *>(sidx.data) : nullptr;
  s.x = In(x); s.weight = In(w); s.bias = In(bias);
  s.y = Out(y);
  s.state = Out(state_out);
  selscan_diag diag = {nullptr, nullptr, SELSCAN_RULE_NONE};
  s.diag = &diag;
  selscan_status sst = selscan_validate_conv_step(&s);
  if (sst != SELSCAN_OK) return SelscanError(op, sst, diag);
  CopyOrZero(state_out, state, esize);
  const int64_t n = NumParts(batch * dim);
  return RunParts(ctx, op, s, n, [&](selscan_conv_step_problem *q, int64_t part) {
    return selscan_conv_step_cpu_part(q, part, n);
  });
}
#else
#define SELSCAN_ORT_HAS_CONV 0
struct ConvKernel {
  int64_t silu = 0;
  int64_t final_state_attr = -1;
};
#endif

// ---- >>ort-ops: the OrtCustomOp tables ----------------------------------------------------------

enum OpKind { kSelectiveScan = 0, kSelectiveStateUpdate, kCausalConv1d, kCausalConv1dUpdate };

// An input's or output's type: 'T' (the kernel's dtype), a fixed type, or any (checked at run time).
enum TypeSlot { kSlotT = 0, kSlotF32, kSlotI32, kSlotI64, kSlotAny };

struct OpInfo {
  const char *name;
  size_t n_inputs, n_required;  // the inputs before the first optional one are required
  TypeSlot inputs[10];
  TypeSlot outputs[2];
  bool second_output_optional;
};

const OpInfo kOpInfo[] = {
    // SelectiveScan(u, delta, A, B, C, D?, z?, delta_bias?, h0?, cu_seqlens?) -> (y, last_state?);
    // B / C: T over time, float when constant
    {"SelectiveScan", kScanInputs, kD,
     {kSlotT, kSlotT, kSlotF32, kSlotAny, kSlotAny, kSlotF32, kSlotT, kSlotF32, kSlotF32, kSlotI64},
     {kSlotT, kSlotF32}, true},
    // SelectiveStateUpdate(state, x, dt, A, B, C, D?, z?, dt_bias?, state_index?) -> (y, state_out)
    {"SelectiveStateUpdate", kStepInputs, kSD,
     {kSlotF32, kSlotT, kSlotT, kSlotF32, kSlotT, kSlotT, kSlotF32, kSlotT, kSlotF32, kSlotI32},
     {kSlotT, kSlotF32}, false},
    // CausalConv1d(x, weight, bias?, init_state?, cu_seqlens?) -> (y, final_state?)
    {"CausalConv1d", 5, 2, {kSlotT, kSlotF32, kSlotF32, kSlotT, kSlotI64}, {kSlotT, kSlotT}, true},
    // CausalConv1dUpdate(state, x, weight, bias?, state_index?) -> (y, state_out)
    {"CausalConv1dUpdate", 5, 3, {kSlotT, kSlotT, kSlotF32, kSlotF32, kSlotI32}, {kSlotT, kSlotT}, false},
};

struct OpDef {
  OrtCustomOp base;  // first member: ONNX Runtime hands back &base
  OpKind kind;
  ONNXTensorElementDataType T;
};

const OpDef &Def(const OrtCustomOp *op) { return *reinterpret_cast<const OpDef *>(op); }
const OpInfo &Info(const OrtCustomOp *op) { return kOpInfo[Def(op).kind]; }

ONNXTensorElementDataType SlotType(TypeSlot s, ONNXTensorElementDataType T) {
  switch (s) {
    case kSlotT: return T;
    case kSlotF32: return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
    case kSlotI32: return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;
    case kSlotI64: return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
    default: return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  }
}

const char *SELSCAN_ORT_CALL GetName(const OrtCustomOp *op) { return Info(op).name; }
const char *SELSCAN_ORT_CALL GetExecutionProviderType(const OrtCustomOp *) { return nullptr; }  // the CPU
size_t SELSCAN_ORT_CALL GetInputTypeCount(const OrtCustomOp *op) { return Info(op).n_inputs; }
ONNXTensorElementDataType SELSCAN_ORT_CALL GetInputType(const OrtCustomOp *op, size_t i) {
  return SlotType(Info(op).inputs[i], Def(op).T);
}
size_t SELSCAN_ORT_CALL GetOutputTypeCount(const OrtCustomOp *) { return 2; }
ONNXTensorElementDataType SELSCAN_ORT_CALL GetOutputType(const OrtCustomOp *op, size_t i) {
  return SlotType(Info(op).outputs[i], Def(op).T);
}
OrtCustomOpInputOutputCharacteristic SELSCAN_ORT_CALL GetInputCharacteristic(const OrtCustomOp *op, size_t i) {
  return i < Info(op).n_required ? INPUT_OUTPUT_REQUIRED : INPUT_OUTPUT_OPTIONAL;
}
OrtCustomOpInputOutputCharacteristic SELSCAN_ORT_CALL GetOutputCharacteristic(const OrtCustomOp *op, size_t i) {
  return (i == 0 || !Info(op).second_output_optional) ? INPUT_OUTPUT_REQUIRED : INPUT_OUTPUT_OPTIONAL;
}
OrtMemType SELSCAN_ORT_CALL GetInputMemoryType(const OrtCustomOp *, size_t) { return OrtMemTypeDefault; }
int SELSCAN_ORT_CALL VariadicMinArity(const OrtCustomOp *) { return 1; }
int SELSCAN_ORT_CALL VariadicHomogeneity(const OrtCustomOp *) { return 1; }
int SELSCAN_ORT_CALL GetStartVersion(const OrtCustomOp *) { return SELSCAN_ORT_OPSET; }
int SELSCAN_ORT_CALL GetEndVersion(const OrtCustomOp *) { return 1000; }  // ONNX Runtime's "no end"

// A kernel: the op's kind plus its attributes.
struct Kernel {
  OpKind kind;
  ScanKernel scan;
  StepKernel step;
  ConvKernel conv;
};

// An optional int attribute (0 or 1); *out keeps its default when the node does not set it.
OrtStatus *BoolAttr(const OrtKernelInfo *info, const char *op, const char *name, int64_t *out) {
  int64_t v = 0;
  OrtStatus *st = g_api.KernelInfoGetAttribute_int64(info, name, &v);
  if (st) {  // absent (ONNX Runtime reports a missing attribute as an error): the default
    g_api.ReleaseStatus(st);
    return nullptr;
  }
  if (v != 0 && v != 1)
    return Error(ORT_INVALID_ARGUMENT, std::string("selscan ") + op + ": attribute '" + name + "' must be 0 or 1, got " +
                                           std::to_string(v));
  *out = v;
  return nullptr;
}

OrtStatus *SELSCAN_ORT_CALL CreateKernelV2(const OrtCustomOp *op, const OrtApi *, const OrtKernelInfo *info,
                                           void **kernel) {
  *kernel = nullptr;
  Kernel *k = new (std::nothrow) Kernel();
  if (!k) return Error(ORT_FAIL, "selscan: out of memory");
  k->kind = Def(op).kind;
  const char *name = Info(op).name;
  OrtStatus *st = nullptr;
  switch (k->kind) {
    case kSelectiveScan:
      st = BoolAttr(info, name, "delta_softplus", &k->scan.softplus);
      if (!st) st = BoolAttr(info, name, "return_last_state", &k->scan.last_state_attr);
      break;
    case kSelectiveStateUpdate: st = BoolAttr(info, name, "dt_softplus", &k->step.softplus); break;
    case kCausalConv1d:
      st = BoolAttr(info, name, "silu", &k->conv.silu);
      if (!st) st = BoolAttr(info, name, "return_final_state", &k->conv.final_state_attr);
      break;
    case kCausalConv1dUpdate: st = BoolAttr(info, name, "silu", &k->conv.silu); break;
  }
  if (st) {
    delete k;
    return st;
  }
  *kernel = k;
  return nullptr;
}

OrtStatus *Compute(const Kernel &k, OrtKernelContext *ctx) {
  switch (k.kind) {
    case kSelectiveScan: return ScanCompute(k.scan, ctx);
    case kSelectiveStateUpdate: return StepCompute(k.step, ctx);
#if SELSCAN_ORT_HAS_CONV
    case kCausalConv1d: return ConvCompute(k.conv, ctx);
    case kCausalConv1dUpdate: return ConvUpdateCompute(k.conv, ctx);
#endif
    default: return Error(ORT_NOT_IMPLEMENTED, "selscan: op not built into this library");
  }
}

OrtStatus *SELSCAN_ORT_CALL KernelComputeV2(void *kernel, OrtKernelContext *ctx) {
  try {
    return Compute(*static_cast<const Kernel *>(kernel), ctx);
  } catch (const std::bad_alloc &) {
    return Error(ORT_FAIL, "selscan: out of memory");
  } catch (...) {
    return Error(ORT_RUNTIME_EXCEPTION, "selscan: unexpected C++ exception");
  }
}

void SELSCAN_ORT_CALL KernelDestroy(void *kernel) { delete static_cast<Kernel *>(kernel); }

OpDef MakeOp(OpKind kind, ONNXTensorElementDataType T) {
  OpDef d;
  std::memset(&d, 0, sizeof d);
  d.base.version = SELSCAN_ORT_API_VERSION;
  d.base.GetName = &GetName;
  d.base.GetExecutionProviderType = &GetExecutionProviderType;
  d.base.GetInputType = &GetInputType;
  d.base.GetInputTypeCount = &GetInputTypeCount;
  d.base.GetOutputType = &GetOutputType;
  d.base.GetOutputTypeCount = &GetOutputTypeCount;
  d.base.KernelDestroy = &KernelDestroy;
  d.base.GetInputCharacteristic = &GetInputCharacteristic;
  d.base.GetOutputCharacteristic = &GetOutputCharacteristic;
  d.base.GetInputMemoryType = &GetInputMemoryType;
  d.base.GetVariadicInputMinArity = &VariadicMinArity;
  d.base.GetVariadicInputHomogeneity = &VariadicHomogeneity;
  d.base.GetVariadicOutputMinArity = &VariadicMinArity;
  d.base.GetVariadicOutputHomogeneity = &VariadicHomogeneity;
  d.base.CreateKernelV2 = &CreateKernelV2;
  d.base.KernelComputeV2 = &KernelComputeV2;
  d.base.GetStartVersion = &GetStartVersion;
  d.base.GetEndVersion = &GetEndVersion;
  d.kind = kind;
  d.T = T;
  return d;
}

#define SELSCAN_ORT_KERNELS(kind)                                                                      \
  MakeOp(kind, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT), MakeOp(kind, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16), \
      MakeOp(kind, ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16)

// Static: ONNX Runtime keeps pointers to the ops for the life of every session using them.
OpDef g_ops[] = {
    SELSCAN_ORT_KERNELS(kSelectiveScan),
    SELSCAN_ORT_KERNELS(kSelectiveStateUpdate),
#if SELSCAN_ORT_HAS_CONV
    SELSCAN_ORT_KERNELS(kCausalConv1d),
    SELSCAN_ORT_KERNELS(kCausalConv1dUpdate),
#endif
};

}  // namespace

// ---- >>ort-register: the library's entry point ----------------------------------------------------

// Called by ONNX Runtime's register_custom_ops_library. Each call adds one "selscan" domain to the
// session options; the domain is never released (sessions keep using it; a few bytes a call).
extern "C" SELSCAN_ORT_EXPORT OrtStatus *SELSCAN_ORT_CALL RegisterCustomOps(OrtSessionOptions *options,
                                                                           const OrtApiBase *base) {
  if (!base) return nullptr;
  const OrtApi *api = base->GetApi(SELSCAN_ORT_API_VERSION);
  if (!api) {  // an older ONNX Runtime: its version-1 table still makes the error
    const OrtApi *v1 = base->GetApi(1);
    if (!v1) return nullptr;
    typedef void (*AnyFn)(void);  // entry 0, CreateStatus, is all a version-1 table is sure to have
    g_api.CreateStatus = reinterpret_cast<OrtStatus *(SELSCAN_ORT_CALL *)(OrtErrorCode, const char *)>(
        reinterpret_cast<const AnyFn *>(v1)[0]);
    return Error(ORT_FAIL, std::string("selscan: libselscan_ort needs ONNX Runtime >= 1.17 (C API version 17); this is ") +
                               (base->GetVersionString ? base->GetVersionString() : "older"));
  }
  LoadApi(api);
  OrtCustomOpDomain *domain = nullptr;
  if (OrtStatus *st = g_api.CreateCustomOpDomain(SELSCAN_ORT_DOMAIN, &domain)) return st;
  for (OpDef &op : g_ops)
    if (OrtStatus *st = g_api.CustomOpDomain_Add(domain, &op.base)) return st;
  return g_api.AddCustomOpDomain(options, domain);
}

// For diagnostics (ctypes): selscan's version, and whether the causal conv1d ops are built in (they
// are when selscan.h has the conv API).
extern "C" SELSCAN_ORT_EXPORT int selscan_ort_version(void) { return SELSCAN_VERSION; }
extern "C" SELSCAN_ORT_EXPORT int selscan_ort_has_conv(void) { return SELSCAN_ORT_HAS_CONV; }
