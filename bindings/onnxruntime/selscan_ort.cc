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
// (OrtApi::KernelContext_ParallelFor through bindings/common's parts runner; results are bitwise the
// same for any thread count). The arguments are checked by bindings/common (selscan's operand
// tables and size rules); errors come back as an ONNX Runtime status in the layer's words, naming
// the op, the input (or output) as the node names it and selscan's rule, e.g.
//   selscan: SelectiveScan: invalid size, group count, sequence offsets or index [SELSCAN_ERR_SHAPE]
//     (input 'B': wrong shape: want (batch, N, L) = [2, 5, 37], got [2, 5, 36])
//   selscan: SelectiveScan: ... [SELSCAN_ERR_SHAPE] (input 'cu_seqlens': decreasing: batch=1, ...)
//   selscan: SelectiveScan: ... [SELSCAN_ERR_ALIAS] (output 'last_state': overlaps h0)   (IOBinding)
// No exception crosses into ONNX Runtime; nothing is allocated but the workspace and the checks'
// scratch (operator new).
//
// ONNX Runtime loads the library with SessionOptions.register_custom_ops_library(path), which calls
// RegisterCustomOps below. Build: make ort-ops (build/ort/libselscan_ort.so), or pip install
// ./bindings/torch (selscan_torch.onnx.ort_library() returns its path).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "ort_abi.h"

#define SELSCAN_IMPLEMENTATION
#define SELSCAN_STATIC
#include "selscan.h"
#include "selscan_binding.h" // bindings/common: the argument checks, the parts runner, the messages

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

Api g_api; // set once by RegisterCustomOps (the same table for every session)

void LoadApi(const OrtApi *table) {
    typedef void (*AnyFn)(void);
    const AnyFn *fn = reinterpret_cast<const AnyFn *>(table);
#define SELSCAN_ORT_LOAD(idx, name, ret, params) g_api.name = reinterpret_cast<ret(SELSCAN_ORT_CALL *) params>(fn[idx]);
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

selscan_tensor In(const Tensor &t) { // contiguous: all strides 0
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

// ---- >>ort-op-table: each op's name, inputs and outputs (the kernels' and the OrtCustomOp's) ----------

enum OpKind { kSelectiveScan = 0, kSelectiveStateUpdate, kCausalConv1d, kCausalConv1dUpdate };
// The ops' inputs: bindings/common's order (>>args-order; the forwards' inputs only)
constexpr size_t kScanInputs = bind::kScanFwdInputs, kStepInputs = bind::kStepInputs,
                 kConvInputs = bind::kConvFwdInputs, kConvUpdateInputs = bind::kConvStepInputs;

// An input's or output's type: 'T' (the kernel's dtype), a fixed type, or any (checked at run time).
enum TypeSlot { kSlotT = 0, kSlotF32, kSlotI32, kSlotI64, kSlotAny };

struct OpInfo {
    const char *name;
    size_t n_inputs, n_required; // the inputs before the first optional one are required
    const char *input_names[10];
    TypeSlot inputs[10];
    TypeSlot outputs[2];
    const char *flag_attr;   // the op's 0 / 1 attribute (delta_softplus, dt_softplus, silu)
    const char *second_attr; // the optional second output's attribute; nullptr: both outputs required (y, state_out)
    const char *second_name; // the second output's name
};

const OpInfo kOpInfo[] = {
    // SelectiveScan(u, delta, A, B, C, D?, z?, delta_bias?, h0?, cu_seqlens?) -> (y, last_state?);
    // B / C: T over time, float when constant
    {"SelectiveScan",
     kScanInputs,
     bind::kScanD,
     {"u", "delta", "A", "B", "C", "D", "z", "delta_bias", "h0", "cu_seqlens"},
     {kSlotT, kSlotT, kSlotF32, kSlotAny, kSlotAny, kSlotF32, kSlotT, kSlotF32, kSlotF32, kSlotI64},
     {kSlotT, kSlotF32},
     "delta_softplus",
     "return_last_state",
     "last_state"},
    // SelectiveStateUpdate(state, x, dt, A, B, C, D?, z?, dt_bias?, state_index?) -> (y, state_out)
    {"SelectiveStateUpdate",
     kStepInputs,
     bind::kStepD,
     {"state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias", "state_index"},
     {kSlotF32, kSlotT, kSlotT, kSlotF32, kSlotT, kSlotT, kSlotF32, kSlotT, kSlotF32, kSlotI32},
     {kSlotT, kSlotF32},
     "dt_softplus",
     nullptr,
     "state_out"},
    // CausalConv1d(x, weight, bias?, init_state?, cu_seqlens?) -> (y, final_state?)
    {"CausalConv1d",
     kConvInputs,
     bind::kConvBias,
     {"x", "weight", "bias", "init_state", "cu_seqlens"},
     {kSlotT, kSlotF32, kSlotF32, kSlotT, kSlotI64},
     {kSlotT, kSlotT},
     "silu",
     "return_final_state",
     "final_state"},
    // CausalConv1dUpdate(state, x, weight, bias?, state_index?) -> (y, state_out)
    {"CausalConv1dUpdate",
     kConvUpdateInputs,
     bind::kConvStepBias,
     {"state", "x", "weight", "bias", "state_index"},
     {kSlotT, kSlotT, kSlotF32, kSlotF32, kSlotI32},
     {kSlotT, kSlotT},
     "silu",
     nullptr,
     "state_out"},
};

// A kernel: its op's kind and attributes (kOpInfo's flag_attr and second_attr; -1: not given).
struct Kernel {
    OpKind kind;
    int64_t flag = 0;
    int64_t second = -1;
};

// One call of a kernel: its op's name, its inputs (kOpInfo's order), the node's output count and
// whether the optional second output (the scan's last_state, the conv's final_state) is wanted.
template <size_t N> struct Call {
    const char *op = "";
    Tensor t[N];
    size_t n_out = 0;
    bool want_second = false;
};

// The call's inputs: the required ones present; both outputs where the second is not optional.
// The optional second output is wanted where the node has it and its attribute is not 0 (with 0
// it is an empty (0,) tensor, torch's placeholder); the attribute 1 without it is an error.
template <size_t N> OrtStatus *Read(const OrtKernelContext *ctx, const Kernel &k, Call<N> *c) {
    const OpInfo &info = kOpInfo[k.kind];
    const std::string op = c->op = info.name;
    size_t n_in = 0;
    if (OrtStatus *st = g_api.KernelContext_GetInputCount(ctx, &n_in)) return st;
    if (OrtStatus *st = g_api.KernelContext_GetOutputCount(ctx, &c->n_out)) return st;
    for (size_t i = 0; i < info.n_inputs; i++)
        if (OrtStatus *st = Input(ctx, n_in, i, info.input_names[i], &c->t[i])) return st;
    for (size_t i = 0; i < info.n_required; i++)
        if (!c->t[i].present)
            return Error(ORT_INVALID_ARGUMENT, "selscan " + op + ": input '" + info.input_names[i] + "' is required");
    if (!info.second_attr && c->n_out < 2)
        return Error(ORT_INVALID_ARGUMENT, "selscan " + op + ": the node needs both outputs (y, state_out)");
    if (info.second_attr && k.second == 1 && c->n_out < 2)
        return Error(ORT_INVALID_ARGUMENT, "selscan " + op + ": " + info.second_attr +
                                               "=1 but the node has no second output (" + info.second_name + ")");
    c->want_second = info.second_attr && c->n_out >= 2 && k.second != 0;
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
// empty or is src. A memmove: an output bound (IOBinding) one cache row into its state input overlaps it
// partly, which selscan's validation never sees on these paths (the input state is not its operand).
void CopyOrZero(const Tensor &dst, const Tensor &src, size_t esize) {
    if (!dst.numel || dst.data == src.data) return;
    const size_t bytes = static_cast<size_t>(dst.numel) * esize;
    if (src.present) std::memmove(dst.data, src.data, bytes);
    else std::memset(dst.data, 0, bytes);
}

// ---- >>ort-checks: the arguments, checked by bindings/common (>>bind-args) --------------------------

// Each op's names where they are not selscan's operand names (the node's inputs and outputs, and the sizes its
// rules name), and its outputs, which the messages call outputs ("output 'last_state'"; the rest: "input 'h0'").
// The decode steps' state_out is selscan's state (updated in place); their node's state input is not selscan's
// operand (it is copied to state_out first), so a step has two maps: its inputs' (the checks of the node's
// inputs, where "state" is the input) and its run's (selscan's validation and parts, where it is state_out).
constexpr const char *kOutput = "output";
constexpr bind::NameMap kScanNames[] = {{"dstate", "A"},     {"n_groups", "B"},
                                        {"batch", "u"},      {"n_seqs", "cu_seqlens"},
                                        {"y", "y", kOutput}, {"h_last", "last_state", kOutput}};
constexpr bind::NameMap kStepNames[] = {{"u", "x"},          {"delta", "dt"},      {"delta_bias", "dt_bias"},
                                        {"dstate", "state"}, {"n_cache", "state"}, {"n_groups", "B"},
                                        {"batch", "x"}};
constexpr bind::NameMap kStepRunNames[] = {{"u", "x"},
                                           {"delta", "dt"},
                                           {"delta_bias", "dt_bias"},
                                           {"dstate", "state_out"},
                                           {"n_cache", "state_out"},
                                           {"n_groups", "B"},
                                           {"batch", "x"},
                                           {"y", "y", kOutput},
                                           {"state", "state_out", kOutput}};
constexpr bind::NameMap kConvNames[] = {{"width", "weight"},
                                        {"batch", "x"},
                                        {"n_seqs", "cu_seqlens"},
                                        {"y", "y", kOutput},
                                        {"final_state", "final_state", kOutput}};
constexpr bind::NameMap kConvUpdateNames[] = {
    {"width", "weight"}, {"state_len", "state"}, {"n_cache", "state"}, {"batch", "x"}};
constexpr bind::NameMap kConvUpdateRunNames[] = {{"width", "weight"},      {"state_len", "state_out"},
                                                 {"n_cache", "state_out"}, {"batch", "x"},
                                                 {"y", "y", kOutput},      {"state", "state_out", kOutput}};

bind::Type TypeOf(ONNXTensorElementDataType t) {
    switch (t) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return bind::Type::kF32;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return bind::Type::kF16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return bind::Type::kBF16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return bind::Type::kI32;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return bind::Type::kI64;
    default: return bind::Type::kOther;
    }
}

// state_index's values for the checks to read on the host (int32 only; another type is refused by its dtype rule)
const int32_t *IndexValues(const Tensor &sidx) {
    return sidx.present && sidx.type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32 ? static_cast<const int32_t *>(sidx.data)
                                                                            : nullptr;
}

// cu_seqlens' values for the checks to read on the host (int64 only; another type is refused by its dtype rule)
const int64_t *CuValues(const Tensor &cu) {
    return cu.present && cu.type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 ? static_cast<const int64_t *>(cu.data)
                                                                        : nullptr;
}

// An input as the checks see it: dense, row-major, host memory.
bind::Arg ArgOf(const Tensor &t) {
    bind::Arg a;
    a.present = t.present;
    if (!t.present) return a;
    a.ndim = static_cast<int64_t>(t.dims.size());
    a.sizes = t.dims.data();
    a.type = TypeOf(t.type);
    a.type_name = TypeName(t.type);
    return a;
}

// A refused argument as ONNX Runtime's error (NOT_IMPLEMENTED for what selscan does not support).
OrtStatus *Refused(const bind::Refusal &r, const char *op, const bind::Names &names) {
    const bind::Error e = bind::ErrorOf(r, op, names);
    return Error(e.kind == bind::ErrorKind::kNotImplemented ? ORT_NOT_IMPLEMENTED : ORT_INVALID_ARGUMENT, e.message);
}

// The call's arguments checked by bindings/common (check: its bind::Check*Args; forms: the ones the
// op allows besides selscan's own, names: the op's) into *k: nullptr, or the refusal as an error.
template <typename Args> OrtStatus *Check(bind::Refusal (*check)(const Args &, const bind::Forms &, bind::Checked *),
                                          const Args &args, bind::Forms forms, const char *op, const bind::Names &names,
                                          bind::Checked *k) {
    forms.names = names;
    const bind::Refusal r = check(args, forms, k);
    return r.ok() ? nullptr : Refused(r, op, names);
}

// A call's inputs as the checks see them, in the op's order (bindings/common's >>args-order).
template <size_t N> std::array<bind::Arg, N> ArgsOf(const Call<N> &c) {
    std::array<bind::Arg, N> a;
    for (size_t i = 0; i < N; i++) a[i] = ArgOf(c.t[i]);
    return a;
}

selscan_dtype DtypeOf(ONNXTensorElementDataType t) {
    return t == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16    ? SELSCAN_F16
           : t == ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16 ? SELSCAN_BF16
                                                         : SELSCAN_F32;
}
size_t ElemSize(ONNXTensorElementDataType t) { // (another type is refused by the checks before)
    switch (t) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return 2;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return 8;
    default: return 4;
    }
}

// selscan's status and diag -> an ONNX Runtime error naming the input (the layer's message).
OrtStatus *SelscanError(const char *op, selscan_status st, const selscan_diag &d, const bind::Names &names) {
    return Error(st == SELSCAN_ERR_UNSUPPORTED ? ORT_NOT_IMPLEMENTED : ORT_INVALID_ARGUMENT,
                 bind::ErrorOf(st, op, bind::DiagText(d, names)).message);
}

// ---- >>ort-parts: selscan's parts on ONNX Runtime's intra-op pool -------------------------------

// Threads of the parts: one part per hardware thread (ONNX Runtime's C API does not tell the pool's
// size; the results are bitwise the same for every split, and a pool with fewer threads runs several
// parts each), at most the number of work items.
int64_t Threads() { return std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency())); }
int64_t NumParts(int64_t items) { return std::max<int64_t>(1, std::min<int64_t>(Threads(), items)); }

// Runs fn(&q, part) for every part on ONNX Runtime's pool: bindings/common's parts runner
// (bind::RunParts: each part its own copy and diag, the first failing part's error), the pool
// through KernelContext_ParallelFor.
template <typename P, typename Fn> OrtStatus *RunParts(const OrtKernelContext *ctx, const char *op,
                                                       const bind::Names &names, const P &p, int64_t n_parts,
                                                       const Fn &fn) {
    OrtStatus *pool_error = nullptr;
    auto pool = [&](int64_t n, const auto &body) {
        using Body = std::decay_t<decltype(body)>;
        struct Job {
            const Body *body;
            static void Run(void *user, size_t i) { (*static_cast<Job *>(user)->body)(static_cast<int64_t>(i)); }
        } job{&body};
        pool_error = g_api.KernelContext_ParallelFor(ctx, &Job::Run, static_cast<size_t>(n), 0, &job);
    };
    const bind::Result r = bind::RunParts(p, n_parts, pool, fn);
    if (pool_error) return pool_error; // (no part ran)
    return r.ok() ? nullptr : SelscanError(op, r.status, r.diag, names);
}

// A workspace buffer (operator new: any pointer works, selscan aligns it up inside).
struct Workspace {
    std::vector<unsigned char> buf;
    bool Make(size_t bytes) {
        try {
            buf.resize(bytes);
        } catch (const std::bad_alloc &) { return false; }
        return true;
    }
    void *ptr() { return buf.empty() ? nullptr : buf.data(); }
};

// y = 0 (its elements of esize bytes), for an empty call.
void Zero(const Tensor &y, size_t esize) {
    if (y.numel) std::memset(y.data, 0, static_cast<size_t>(y.numel) * esize);
}

// An operand of a call as selscan's aliasing rule sees it: a tensor (absent or empty: it overlaps nothing) and
// selscan's name of it (the op's map renames it in messages).
struct Operand {
    const Tensor *t;
    const char *name;
};

// A call's inputs as selscan's operands, in bindings/common's order (selscan's: its operands, then cu_seqlens /
// state_index); names: selscan's name of each, nullptr for an input that is not selscan's (the steps' state).
template <size_t N> std::vector<Operand> InputOperands(const Call<N> &c, const char *const *names) {
    std::vector<Operand> v;
    for (size_t i = 0; i < N; i++)
        if (names[i]) v.push_back({&c.t[i], names[i]});
    return v;
}
constexpr const char *kStepOperands[kStepInputs] = {nullptr, "u", "delta", "A",          "B",
                                                    "C",     "D", "z",     "delta_bias", "state_index"};
constexpr const char *kConvUpdateOperands[kConvUpdateInputs] = {nullptr, "x", "weight", "bias", "state_index"};

// Whether a and b share a byte (ONNX Runtime's tensors are dense: their byte ranges).
bool Overlap(const Operand &a, const Operand &b) {
    const Tensor &x = *a.t, &y = *b.t;
    if (!x.present || !y.present || x.numel <= 0 || y.numel <= 0) return false;
    const uintptr_t x0 = reinterpret_cast<uintptr_t>(x.data), y0 = reinterpret_cast<uintptr_t>(y.data);
    return x0 < y0 + static_cast<uintptr_t>(y.numel) * ElemSize(y.type) &&
           y0 < x0 + static_cast<uintptr_t>(x.numel) * ElemSize(x.type);
}

// An empty call's outputs (bind::Checked::Empty, >>bind-empty), which selscan never sees: first selscan's
// aliasing rule, which its validation applies to every call it runs (an output overlaps no later output and no
// input: SELSCAN_ERR_ALIAS, "<output>: overlaps <operand>"), on outs and ins in selscan's order, so that an
// output bound over an input (IOBinding; a last_state over h0, exactly or partly) is refused alike, in the same
// words, with or without anything to compute; then the state (the scan's and the conv's second output, wanted:
// h0 / init_state or 0; the steps' state_out: state, which is not selscan's operand) passes through, before y
// is 0, as a call that computes copies it before it writes y.
OrtStatus *EmptyCall(const char *op, const bind::Names &names, const std::vector<Operand> &outs,
                     const std::vector<Operand> &ins, const Tensor &y, const Tensor *state_out, const Tensor &state_in,
                     size_t y_esize, size_t state_esize) {
    for (size_t i = 0; i < outs.size(); i++) {
        const Operand *hit = nullptr;
        for (size_t j = i + 1; j < outs.size() && !hit; j++)
            if (Overlap(outs[i], outs[j])) hit = &outs[j];
        for (size_t j = 0; j < ins.size() && !hit; j++)
            if (Overlap(outs[i], ins[j])) hit = &ins[j];
        if (!hit) continue;
        const std::string rule = std::string("overlaps ") + hit->name; // selscan's "overlaps <operand>"
        const selscan_diag d = {outs[i].name, rule.c_str(), SELSCAN_RULE_OVERLAPS};
        return SelscanError(op, SELSCAN_ERR_ALIAS, d, names);
    }
    if (state_out) CopyOrZero(*state_out, state_in, state_esize);
    Zero(y, y_esize);
    return nullptr;
}

// A decode step (the step's, the conv update's) on state_out: s validated (the indices, the shapes
// against the state) before state_out = state is written, then stepped in place over n parts.
template <typename S, typename Part>
OrtStatus *RunStep(const OrtKernelContext *ctx, const char *op, const bind::Names &names, S &s,
                   selscan_status (*validate)(const S *), const Tensor &state_out, const Tensor &state, size_t esize,
                   int64_t n, const Part &part) {
    selscan_diag diag = {nullptr, nullptr, SELSCAN_RULE_NONE};
    s.diag = &diag;
    s.state = Out(state_out);
    const selscan_status sst = validate(&s);
    if (sst != SELSCAN_OK) return SelscanError(op, sst, diag, names);
    CopyOrZero(state_out, state, esize);
    return RunParts(ctx, op, names, s, n, part);
}

// ---- >>ort-scan: SelectiveScan ------------------------------------------------------------------

OrtStatus *ScanCompute(const Kernel &kern, OrtKernelContext *ctx) {
    Call<kScanInputs> c;
    if (OrtStatus *st = Read(ctx, kern, &c)) return st;
    const Tensor &u = c.t[bind::kScanU], &delta = c.t[bind::kScanDelta], &A = c.t[bind::kScanA], &B = c.t[bind::kScanB],
                 &C = c.t[bind::kScanC], &D = c.t[bind::kScanD], &z = c.t[bind::kScanZ],
                 &bias = c.t[bind::kScanDeltaBias], &h0 = c.t[bind::kScanH0], &cu = c.t[bind::kScanCuSeqlens];
    bool want_last = c.want_second;

    const bind::Names names = bind::NamesOf(kScanNames, "input");
    const bind::ScanArgs args = bind::ScanArgsOf(ArgsOf(c).data(), false, CuValues(cu));
    bind::Forms forms;
    forms.fixed_bc = forms.groupless_bc = true; // B / C: (dim, N) float constant over time, (batch, N, L) one group
    bind::Checked k;
    if (OrtStatus *st = Check(bind::CheckScanArgs, args, forms, c.op, names, &k)) return st;
    const ONNXTensorElementDataType T = u.type;
    const int64_t batch = k.s.batch, dim = k.s.dim, L = k.s.L, N = k.s.N, G = k.s.G, rows = k.s.rows,
                  n_seqs = k.s.n_seqs;

    Tensor y, last;
    if (OrtStatus *st = Output(ctx, 0, "y", u.dims, &y)) return st;
    if (OrtStatus *st = SecondOutput(ctx, c.n_out, "last_state", {rows, dim, N}, &want_last, &last)) return st;
    if (k.Empty()) { // nothing to scan: y is 0, the last state is h0 (or 0)
        std::vector<Operand> outs = {{&y, "y"}};
        if (want_last) outs.push_back({&last, "h_last"});
        return EmptyCall(c.op, names, outs, InputOperands(c, kOpInfo[kern.kind].input_names), y,
                         want_last ? &last : nullptr, h0, ElemSize(T), 4);
    }
    selscan_problem p;
    std::memset(&p, 0, sizeof p);
    p.batch = batch;
    p.dim = dim;
    p.seqlen = L;
    p.dstate = N;
    p.n_groups = G;
    p.dtype = DtypeOf(T);
    p.flags = (kern.flag ? SELSCAN_DELTA_SOFTPLUS : 0u) | k.flags; // SELSCAN_FIXED_*: the forms of B, C
    if (cu.present) {
        p.cu_seqlens = static_cast<const int64_t *>(cu.data);
        p.n_seqs = n_seqs;
    }
    p.u = In(u);
    p.delta = In(delta);
    p.A = In(A);
    p.B = In(B);
    p.C = In(C);
    p.D = In(D);
    p.z = In(z);
    p.delta_bias = In(bias);
    p.h0 = In(h0);
    p.y = Out(y);
    if (want_last) p.h_last = Out(last);
    selscan_diag diag = {nullptr, nullptr, SELSCAN_RULE_NONE};
    p.diag = &diag;
    // work items of the forward: (batch row, channel tile); a tile is at least 4 channels
    const int64_t n = NumParts(batch * ((dim + 3) / 4));
    size_t ws_bytes = 0;
    selscan_status sst = selscan_workspace_size_parts(&p, nullptr, n, &ws_bytes);
    if (sst != SELSCAN_OK) return SelscanError(c.op, sst, diag, names);
    Workspace ws;
    if (!ws.Make(ws_bytes))
        return Error(ORT_FAIL,
                     "selscan SelectiveScan: out of memory for the workspace (" + std::to_string(ws_bytes) + " bytes)");
    void *wp = ws.ptr();
    return RunParts(ctx, c.op, names, p, n, [&](selscan_problem *q, int64_t part) {
        return selscan_forward_cpu_part(q, part, n, wp, ws_bytes);
    });
}

// ---- >>ort-step: SelectiveStateUpdate -----------------------------------------------------------

OrtStatus *StepCompute(const Kernel &kern, OrtKernelContext *ctx) {
    Call<kStepInputs> c;
    if (OrtStatus *st = Read(ctx, kern, &c)) return st;
    const Tensor &state = c.t[bind::kStepState], &x = c.t[bind::kStepX], &dt = c.t[bind::kStepDt],
                 &A = c.t[bind::kStepA], &B = c.t[bind::kStepB], &C = c.t[bind::kStepC], &D = c.t[bind::kStepD],
                 &z = c.t[bind::kStepZ], &bias = c.t[bind::kStepDtBias], &sidx = c.t[bind::kStepIndex];
    const bind::Names names = bind::NamesOf(kStepNames, "input"), run_names = bind::NamesOf(kStepRunNames, "input");
    const bind::StepArgs args = bind::StepArgsOf(ArgsOf(c).data(), IndexValues(sidx));
    bind::Checked k; // (the indices' values whatever the sizes)
    if (OrtStatus *st = Check(bind::CheckStepArgs, args, bind::Forms(), c.op, names, &k)) return st;
    const ONNXTensorElementDataType T = x.type;
    const int64_t batch = k.s.batch, dim = k.s.dim, N = k.s.N, G = k.s.G, n_cache = k.n_cache;

    Tensor y, state_out;
    if (OrtStatus *st = Output(ctx, 0, "y", x.dims, &y)) return st;
    if (OrtStatus *st = Output(ctx, 1, "state_out", state.dims, &state_out)) return st;
    if (k.Empty()) // no token, or no cache row (every row padding): y 0, the state passes through
        return EmptyCall(c.op, run_names, {{&state_out, "state"}, {&y, "y"}}, InputOperands(c, kStepOperands), y,
                         &state_out, state, ElemSize(T), 4);
    selscan_step_problem s;
    std::memset(&s, 0, sizeof s);
    s.batch = batch;
    s.dim = dim;
    s.dstate = N;
    s.n_groups = G;
    s.n_cache = n_cache;
    s.dtype = DtypeOf(T);
    s.flags = kern.flag ? SELSCAN_DELTA_SOFTPLUS : 0u;
    s.state_index = sidx.present ? static_cast<const int32_t *>(sidx.data) : nullptr;
    s.u = In(x);
    s.delta = In(dt);
    s.A = In(A);
    s.B = In(B);
    s.C = In(C);
    s.D = In(D);
    s.z = In(z);
    s.delta_bias = In(bias);
    s.y = Out(y);
    const int64_t n = bind::StepParts(Threads(), batch, dim); // blocks of 256 channels of a row
    return RunStep(ctx, c.op, run_names, s, selscan_validate_step, state_out, state, 4, n,
                   [&](selscan_step_problem *q, int64_t part) { return selscan_step_cpu_part(q, part, n); });
}

// ---- >>ort-conv: CausalConv1d, CausalConv1dUpdate (selscan.h's causal conv1d, where it has it) ----
#ifdef SELSCAN_CONV_SILU
#define SELSCAN_ORT_HAS_CONV 1

OrtStatus *ConvCompute(const Kernel &kern, OrtKernelContext *ctx) {
    Call<kConvInputs> c;
    if (OrtStatus *st = Read(ctx, kern, &c)) return st;
    const Tensor &x = c.t[bind::kConvX], &w = c.t[bind::kConvWeight], &bias = c.t[bind::kConvBias],
                 &init = c.t[bind::kConvInitState], &cu = c.t[bind::kConvCuSeqlens];
    bool want_fin = c.want_second;
    const bind::Names names = bind::NamesOf(kConvNames, "input");
    const bind::ConvArgs args = bind::ConvArgsOf(ArgsOf(c).data(), false, CuValues(cu));
    bind::Checked k; // (the width before a state is shaped by it)
    if (OrtStatus *st = Check(bind::CheckConvArgs, args, bind::Forms(), c.op, names, &k)) return st;
    const ONNXTensorElementDataType T = x.type;
    const int64_t batch = k.s.batch, dim = k.s.dim, L = k.s.L, W = k.width, rows = k.s.rows, n_seqs = k.s.n_seqs;
    Tensor y, fin;
    if (OrtStatus *st = Output(ctx, 0, "y", x.dims, &y)) return st;
    if (OrtStatus *st = SecondOutput(ctx, c.n_out, "final_state", {rows, dim, W - 1}, &want_fin, &fin)) return st;
    if (k.Empty()) { // nothing to convolve (packed: every sequence empty): the state passes through
        std::vector<Operand> outs = {{&y, "y"}};
        if (want_fin) outs.push_back({&fin, "final_state"});
        return EmptyCall(c.op, names, outs, InputOperands(c, kOpInfo[kern.kind].input_names), y,
                         want_fin ? &fin : nullptr, init, ElemSize(T), ElemSize(T));
    }
    selscan_conv_problem p;
    std::memset(&p, 0, sizeof p);
    p.batch = batch;
    p.dim = dim;
    p.seqlen = L;
    p.width = W;
    p.dtype = DtypeOf(T);
    p.flags = kern.flag ? SELSCAN_CONV_SILU : 0u;
    if (cu.present) {
        p.cu_seqlens = static_cast<const int64_t *>(cu.data);
        p.n_seqs = n_seqs;
    }
    p.x = In(x);
    p.weight = In(w);
    p.bias = In(bias);
    p.init_state = In(init);
    p.y = Out(y);
    if (want_fin) p.final_state = Out(fin);
    const int64_t n = NumParts(dim);
    return RunParts(ctx, c.op, names, p, n,
                    [&](selscan_conv_problem *q, int64_t part) { return selscan_conv_forward_cpu_part(q, part, n); });
}

OrtStatus *ConvUpdateCompute(const Kernel &kern, OrtKernelContext *ctx) {
    Call<kConvUpdateInputs> c;
    if (OrtStatus *st = Read(ctx, kern, &c)) return st;
    const Tensor &state = c.t[bind::kConvStepState], &x = c.t[bind::kConvStepX], &w = c.t[bind::kConvStepWeight],
                 &bias = c.t[bind::kConvStepBias], &sidx = c.t[bind::kConvStepIndex];
    const bind::Names names = bind::NamesOf(kConvUpdateNames, "input"),
                      run_names = bind::NamesOf(kConvUpdateRunNames, "input");
    const bind::ConvStepArgs args = bind::ConvStepArgsOf(ArgsOf(c).data(), IndexValues(sidx));
    bind::Checked k;
    if (OrtStatus *st = Check(bind::CheckConvStepArgs, args, bind::Forms(), c.op, names, &k)) return st;
    const ONNXTensorElementDataType T = x.type;
    const int64_t batch = k.s.batch, dim = k.s.dim, seqlen = k.s.L, W = k.width;
    Tensor y, state_out;
    if (OrtStatus *st = Output(ctx, 0, "y", x.dims, &y)) return st;
    if (OrtStatus *st = Output(ctx, 1, "state_out", state.dims, &state_out)) return st;
    const size_t esize = ElemSize(T);
    if (k.Empty()) // no token, or no cache row (every row padding): y 0, the state passes through
        return EmptyCall(c.op, run_names, {{&state_out, "state"}, {&y, "y"}}, InputOperands(c, kConvUpdateOperands), y,
                         &state_out, state, esize, esize);
    selscan_conv_step_problem s;
    std::memset(&s, 0, sizeof s);
    s.batch = batch;
    s.dim = dim;
    s.width = W;
    s.state_len = k.state_len;
    s.n_cache = k.n_cache;
    s.seqlen = seqlen;
    s.dtype = DtypeOf(T);
    s.flags = kern.flag ? SELSCAN_CONV_SILU : 0u;
    s.state_index = sidx.present ? static_cast<const int32_t *>(sidx.data) : nullptr;
    s.x = In(x);
    s.weight = In(w);
    s.bias = In(bias);
    s.y = Out(y);
    const int64_t n = NumParts(batch * dim);
    return RunStep(ctx, c.op, run_names, s, selscan_validate_conv_step, state_out, state, esize, n,
                   [&](selscan_conv_step_problem *q, int64_t part) { return selscan_conv_step_cpu_part(q, part, n); });
}
#else
#define SELSCAN_ORT_HAS_CONV 0
#endif

// ---- >>ort-ops: the OrtCustomOp tables ----------------------------------------------------------

struct OpDef {
    OrtCustomOp base; // first member: ONNX Runtime hands back &base
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
const char *SELSCAN_ORT_CALL GetExecutionProviderType(const OrtCustomOp *) { return nullptr; } // the CPU
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
    return (i == 0 || !Info(op).second_attr) ? INPUT_OUTPUT_REQUIRED : INPUT_OUTPUT_OPTIONAL;
}
OrtMemType SELSCAN_ORT_CALL GetInputMemoryType(const OrtCustomOp *, size_t) { return OrtMemTypeDefault; }
int SELSCAN_ORT_CALL VariadicMinArity(const OrtCustomOp *) { return 1; }
int SELSCAN_ORT_CALL VariadicHomogeneity(const OrtCustomOp *) { return 1; }
int SELSCAN_ORT_CALL GetStartVersion(const OrtCustomOp *) { return SELSCAN_ORT_OPSET; }
int SELSCAN_ORT_CALL GetEndVersion(const OrtCustomOp *) { return 1000; } // ONNX Runtime's "no end"

// Whether the node carries attribute `name` with a type other than int. ONNX Runtime answers a missing
// attribute and a mistyped one alike (an error status), so: a float or a string read that succeeds, or
// (a list: no reader in the ABI the library uses) ONNX Runtime's own words, "Attribute name and type
// don't match" ("Attibute" in older releases); anything else reads as absent, so that a reworded
// message can never refuse a node that leaves an optional attribute out.
bool OtherTypeAttr(const OrtKernelInfo *info, const char *name, const char *int_error) {
    if (std::strstr(int_error, "type don't match")) return true;
    float f = 0.f;
    size_t n = 0;
    for (OrtStatus *st : {g_api.KernelInfoGetAttribute_float(info, name, &f),
                          g_api.KernelInfoGetAttribute_string(info, name, nullptr, &n)}) {
        if (!st) return true;
        g_api.ReleaseStatus(st);
    }
    return false;
}

// An optional int attribute (0 or 1); *out keeps its default when the node does not set it; one of
// another type is refused (never taken as absent: its default would be a silent wrong answer).
OrtStatus *BoolAttr(const OrtKernelInfo *info, const char *op, const char *name, int64_t *out) {
    int64_t v = 0;
    OrtStatus *st = g_api.KernelInfoGetAttribute_int64(info, name, &v);
    if (st) {
        const std::string why = g_api.GetErrorMessage(st);
        g_api.ReleaseStatus(st);
        if (!OtherTypeAttr(info, name, why.c_str())) return nullptr; // absent: the default
        return Error(ORT_INVALID_ARGUMENT, std::string("selscan ") + op + ": attribute '" + name +
                                               "' must be an int (0 or 1), got another type (ONNX Runtime: " +
                                               why + ")");
    }
    if (v != 0 && v != 1)
        return Error(ORT_INVALID_ARGUMENT, std::string("selscan ") + op + ": attribute '" + name +
                                               "' must be 0 or 1, got " + std::to_string(v));
    *out = v;
    return nullptr;
}

OrtStatus *SELSCAN_ORT_CALL CreateKernelV2(const OrtCustomOp *op, const OrtApi *, const OrtKernelInfo *info,
                                           void **kernel) {
    *kernel = nullptr;
    Kernel *k = new (std::nothrow) Kernel();
    if (!k) return Error(ORT_FAIL, "selscan: out of memory");
    k->kind = Def(op).kind;
    const OpInfo &in = Info(op);
    OrtStatus *st = BoolAttr(info, in.name, in.flag_attr, &k->flag);
    if (!st && in.second_attr) st = BoolAttr(info, in.name, in.second_attr, &k->second);
    if (st) {
        delete k;
        return st;
    }
    *kernel = k;
    return nullptr;
}

OrtStatus *Compute(const Kernel &k, OrtKernelContext *ctx) {
    switch (k.kind) {
    case kSelectiveScan: return ScanCompute(k, ctx);
    case kSelectiveStateUpdate: return StepCompute(k, ctx);
#if SELSCAN_ORT_HAS_CONV
    case kCausalConv1d: return ConvCompute(k, ctx);
    case kCausalConv1dUpdate: return ConvUpdateCompute(k, ctx);
#endif
    default: return Error(ORT_NOT_IMPLEMENTED, "selscan: op not built into this library");
    }
}

OrtStatus *SELSCAN_ORT_CALL KernelComputeV2(void *kernel, OrtKernelContext *ctx) {
    try {
        return Compute(*static_cast<const Kernel *>(kernel), ctx);
    } catch (const std::bad_alloc &) { return Error(ORT_FAIL, "selscan: out of memory"); } catch (...) {
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

#define SELSCAN_ORT_KERNELS(kind)                                                                           \
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

} // namespace

// ---- >>ort-register: the library's entry point ----------------------------------------------------

// Called by ONNX Runtime's register_custom_ops_library. Each call adds one "selscan" domain to the
// session options; the domain is never released (sessions keep using it; a few bytes a call).
extern "C" SELSCAN_ORT_EXPORT OrtStatus *SELSCAN_ORT_CALL RegisterCustomOps(OrtSessionOptions *options,
                                                                            const OrtApiBase *base) {
    if (!base) return nullptr;
    const OrtApi *api = base->GetApi(SELSCAN_ORT_API_VERSION);
    if (!api) { // an older ONNX Runtime: its version-1 table still makes the error
        const OrtApi *v1 = base->GetApi(1);
        if (!v1) return nullptr;
        typedef void (*AnyFn)(void); // entry 0, CreateStatus, is all a version-1 table is sure to have
        g_api.CreateStatus = reinterpret_cast<OrtStatus *(SELSCAN_ORT_CALL *)(OrtErrorCode, const char *)>(
            reinterpret_cast<const AnyFn *>(v1)[0]);
        return Error(ORT_FAIL,
                     std::string("selscan: libselscan_ort needs ONNX Runtime >= 1.17 (C API version 17); this is ") +
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
