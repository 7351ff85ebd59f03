// selscan_binding.h - the framework-free layer every selscan binding shares (C++17, header-only,
// no framework header: the PyTorch package, the TensorFlow package and the ones to come).
//
// A binding describes its arguments to this layer's checks (>>bind-args), then hands it plain numbers:
//   >>bind-operands   (data pointer, sizes, element strides) -> selscan_tensor / selscan_out_tensor,
//                     with the rules selscan cannot see (a multi-element tensor never has all
//                     strides 0; an in-place output may not overlap itself)
//   >>bind-problem    a small struct of sizes and flags -> the header of a selscan_problem
//   >>bind-empty      the empty-problem rules (what an empty call returns, when N may be 0)
//   >>bind-checkpoint the checkpoint policy, asked of the library (selscan_checkpoint_used /
//                     selscan_checkpoint_size), never re-derived here
//   >>bind-parts      the CPU parts runner on the framework's pool, with per-part diag and the
//                     first failing part's error; the decode step's part count
//   >>bind-args       the argument checks of a framework call: ranks, sizes,
//                     dtypes, devices from selscan's operand tables; the size and host-value rules
//                     (also where selscan is not called, an empty problem) asked of the library
//   >>bind-errors     status -> an error kind and the message text, naming the user's argument
//                     through selscan's diag and a per-op name map
//   >>bind-cuda       the CUDA shim (C declarations any TU may include; its definitions in the
//                     binding's one nvcc TU): selscan_cuda.cuh's launchers behind wrappers that
//                     need neither CUDA nor a framework header
// One file, so that a call's path through the common layer is one file (issue 39). Nothing here throws or allocates framework memory: errors come back as an Error the binding
// turns into its own exception or status.
//
// Include selscan.h (with or without its implementation) before or through this header.
#ifndef SELSCAN_BINDING_H_
#define SELSCAN_BINDING_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "selscan.h"

namespace selscan_binding {

// ---- >>bind-operands: operands from (data, sizes, element strides) ------------------------------

// The number of elements of a (sizes, ndim) tensor (1 for rank 0).
inline int64_t Numel(int64_t ndim, const int64_t *sizes) {
    int64_t n = 1;
    for (int64_t i = 0; i < ndim; i++) n *= sizes[i];
    return n;
}

// A selscan operand (ST: selscan_tensor for inputs, selscan_out_tensor for outputs) with the
// logical order of the given dims (at most 4). A size-1 dim with stride 0 gets a non-zero stride
// (it is never stepped over), so that selscan's "all strides 0 = contiguous" never arises by
// accident; *all_zero is set when every stride is still 0 (a full broadcast of a multi-element
// tensor, which selscan would read as contiguous: the binding copies an input, refuses an output).
template <typename ST> ST Operand(decltype(ST::data) data, int64_t ndim, const int64_t *sizes, const int64_t *strides,
                                  bool *all_zero = nullptr) {
    ST s;
    std::memset(&s, 0, sizeof s);
    s.data = data;
    const int64_t numel = Numel(ndim, sizes);
    bool all0 = ndim > 0;
    for (int64_t i = 0; i < ndim && i < 4; i++) {
        int64_t st = strides[i];
        if (sizes[i] == 1 && st == 0) st = numel > 1 ? numel : 1;
        s.stride[i] = st;
        if (st != 0) all0 = false;
    }
    if (all_zero) *all_zero = all0;
    return s;
}

// An absent optional operand (NULL data).
template <typename ST> ST Absent() {
    ST s;
    std::memset(&s, 0, sizeof s);
    return s;
}

// Whether a tensor needs a dense copy before selscan reads it: more than one element, all strides 0.
inline bool FullBroadcast(int64_t ndim, const int64_t *sizes, const int64_t *strides) {
    if (Numel(ndim, sizes) <= 1) return false;
    bool all0 = false;
    (void)Operand<selscan_tensor>(nullptr, ndim, sizes, strides, &all0);
    return all0;
}

// An output operand is refused when it has all strides 0 for more than one element (selscan would
// read that as contiguous and write past the tensor): false then, *out untouched.
template <typename ST>
bool OutOperand(decltype(ST::data) data, int64_t ndim, const int64_t *sizes, const int64_t *strides, ST *out) {
    bool all0 = false;
    const ST s = Operand<ST>(data, ndim, sizes, strides, &all0);
    if (all0 && Numel(ndim, sizes) > 1) return false;
    *out = s;
    return true;
}

// An output updated in place overlaps itself when a dim of size > 1 has stride 0 (an expanded or
// broadcast view), whatever selscan's "all strides 0 = contiguous" would make of its strides.
// Other overlapping strides reach selscan, which refuses an output whose explicit strides overlap.
inline bool SelfOverlapping(int64_t ndim, const int64_t *sizes, const int64_t *strides) {
    if (Numel(ndim, sizes) == 0) return false;
    for (int64_t i = 0; i < ndim; i++)
        if (sizes[i] > 1 && strides[i] == 0) return true;
    return false;
}

// Whether two strided tensors (data pointer, element size in bytes, sizes, element strides >= 0)
// share a byte of their elements, exactly: a's distinct elements one by one (dims of size 1 or
// stride 0 add none), each looked for in b's index space (b's dims by decreasing stride, each index
// bounded by what the remaining dims can still reach). For an input a binding reads through a copy
// (a full broadcast made dense, strided indices made contiguous), which selscan's own alias check
// cannot see: there a has one element or a few.
inline bool ElementsMeet(const void *a, int64_t a_es, int64_t a_nd, const int64_t *a_sizes, const int64_t *a_strides,
                         const void *b, int64_t b_es, int64_t b_nd, const int64_t *b_sizes, const int64_t *b_strides) {
    if (Numel(a_nd, a_sizes) == 0 || Numel(b_nd, b_sizes) == 0) return false;
    struct Dim {
        int64_t s, n;
    };
    auto stepping = [](int64_t nd, const int64_t *sizes, const int64_t *strides) {
        std::vector<Dim> d;
        for (int64_t i = 0; i < nd; i++)
            if (sizes[i] > 1 && strides[i] != 0) d.push_back({strides[i], sizes[i]});
        return d;
    };
    std::vector<Dim> ad = stepping(a_nd, a_sizes, a_strides), bd = stepping(b_nd, b_sizes, b_strides);
    std::sort(bd.begin(), bd.end(), [](const Dim &x, const Dim &y) { return x.s > y.s; });
    std::vector<int64_t> reach(bd.size() + 1, 0); // the largest element offset dims k.. reach
    for (size_t k = bd.size(); k-- > 0;) reach[k] = reach[k + 1] + (bd[k].n - 1) * bd[k].s;
    auto floor_div = [](int64_t x, int64_t y) { return x / y - ((x % y != 0) && ((x < 0) != (y < 0))); };
    // b has an element e (bytes [e * b_es, + b_es) from b) with lo <= e <= hi, e = sum of i_k * s_k
    auto found = [&](auto &&self, size_t k, int64_t acc, int64_t lo, int64_t hi) -> bool {
        if (k == bd.size()) return lo <= acc && acc <= hi;
        const int64_t s = bd[k].s;
        const int64_t i0 = std::max<int64_t>(0, -floor_div(-(lo - acc - reach[k + 1]), s));
        const int64_t i1 = std::min<int64_t>(bd[k].n - 1, floor_div(hi - acc, s));
        for (int64_t i = i0; i <= i1; i++)
            if (self(self, k + 1, acc + i * s, lo, hi)) return true;
        return false;
    };
    const int64_t base = static_cast<int64_t>(reinterpret_cast<intptr_t>(a) - reinterpret_cast<intptr_t>(b));
    std::vector<int64_t> idx(ad.size(), 0);
    for (;;) {
        int64_t off = base; // this element of a: bytes [off, off + a_es) from b
        for (size_t k = 0; k < ad.size(); k++) off += idx[k] * ad[k].s * a_es;
        const int64_t lo = floor_div(off, b_es), hi = floor_div(off + a_es - 1, b_es);
        if (hi >= 0 && lo <= reach[0] && found(found, 0, 0, lo, hi)) return true;
        size_t k = 0; // the next element of a
        while (k < ad.size() && ++idx[k] == ad[k].n) idx[k++] = 0;
        if (k == ad.size()) return false;
    }
}

// ---- >>bind-problem: sizes and flags -> a selscan_problem ---------------------------------------

// The logical sizes of one scan call (selscan's names: batch, dim, seqlen L, dstate N, n_groups G).
// rows: the rows of h0 / h_last (batch, or n_seqs with packed sequences).
struct Sizes {
    int64_t batch = 0, dim = 0, L = 0, N = 0, G = 1, rows = 0, n_seqs = 0;
    bool fixed_B = false, fixed_C = false;
    // >>bind-empty: a problem with no step to take (batch, dim or L 0). selscan is not called: the
    // forward's y is empty and h_last is h0 (or 0); the backward's gradients are 0, except dh0 =
    // dh_last (the state passes through). N = 0 is refused unless the problem is empty (StatesOk).
    static bool Empty(int64_t batch, int64_t dim, int64_t L) { return batch == 0 || dim == 0 || L == 0; }
    bool Empty() const { return Empty(batch, dim, L); }
    // >>bind-empty of the decode steps (the step's, the conv update's; rows: n_cache, as
    // CheckStepArgs / CheckConvStepArgs set it): no token (batch, dim or L 0), or a cache of no rows
    // (n_cache 0: every batch row is padding, as the checks made sure). selscan is not called (its
    // entry points refuse a size 0 and read n_cache 0 as batch: selscan.h >>n-cache): y is 0 and
    // the state passes through (untouched in place, copied out of place).
    bool StepEmpty() const { return Empty() || rows == 0; }
    bool StatesOk() const { return N >= 1 || Empty(); }
    std::string ToString() const {
        return "batch=" + std::to_string(batch) + ", dim=" + std::to_string(dim) + ", seqlen=" + std::to_string(L) +
               ", dstate=" + std::to_string(N) + ", n_groups=" + std::to_string(G);
    }
};

// The problem's header: sizes, dtype, flags and the packed-sequence offsets (host memory, NULL
// without); the binding fills in the operands.
inline selscan_problem MakeProblem(const Sizes &s, selscan_dtype dtype, bool delta_softplus,
                                   const int64_t *cu_seqlens = nullptr) {
    selscan_problem p;
    std::memset(&p, 0, sizeof p);
    p.batch = s.batch;
    p.dim = s.dim;
    p.seqlen = s.L;
    p.dstate = s.N;
    p.n_groups = s.G;
    p.dtype = dtype;
    p.flags = (delta_softplus ? SELSCAN_DELTA_SOFTPLUS : 0u) | (s.fixed_B ? SELSCAN_FIXED_B : 0u) |
              (s.fixed_C ? SELSCAN_FIXED_C : 0u);
    if (cu_seqlens) {
        p.cu_seqlens = cu_seqlens;
        p.n_seqs = s.n_seqs;
    }
    return p;
}

// ---- >>bind-checkpoint: the checkpoint policy, asked of the library ------------------------------

// Bytes of the checkpoint a CPU forward writes for its backward: 0 when not asked for, for an
// empty problem, or when the library says the CPU backward would not read one
// (selscan_checkpoint_used); else selscan_checkpoint_size. A checkpoint is a vector of floats.
inline selscan_status CpuCheckpointBytes(const selscan_problem *p, bool save, size_t *bytes) {
    *bytes = 0;
    if (!save || Sizes::Empty(p->batch, p->dim, p->seqlen) || !selscan_checkpoint_used(p)) return SELSCAN_OK;
    return selscan_checkpoint_size(p, bytes);
}

// The checkpoint a backward is handed (numel floats; 0: none) is read only when it has exactly the
// size `size_of` reports (selscan_checkpoint_size, or selscan_checkpoint_size_cuda on the GPU side):
// another size (none, or the other device's forward, whose layout differs) is ignored and the
// backward recomputes the states. *bytes: the size to read, 0 for none.
template <typename SizeFn>
selscan_status CheckpointToRead(const selscan_problem *p, int64_t numel, const SizeFn &size_of, size_t *bytes) {
    *bytes = 0;
    if (numel <= 0) return SELSCAN_OK;
    size_t need = 0;
    const selscan_status st = size_of(p, &need);
    if (st != SELSCAN_OK) return st;
    if (need > 0 && static_cast<size_t>(numel) * sizeof(float) == need) *bytes = need;
    return SELSCAN_OK;
}
inline selscan_status CpuCheckpointToRead(const selscan_problem *p, int64_t numel, size_t *bytes) {
    return CheckpointToRead(
        p, numel, [](const selscan_problem *q, size_t *b) { return selscan_checkpoint_size(q, b); }, bytes);
}

// ---- >>bind-parts: the CPU parts runner ---------------------------------------------------------

// What a call returned: its status and, on an error, the operand / rule selscan's diag names.
struct Result {
    selscan_status status = SELSCAN_OK;
    selscan_diag diag = {nullptr, nullptr, SELSCAN_RULE_NONE};
    bool ok() const { return status == SELSCAN_OK; }
};

// Calls fn(q) with q a copy of p whose diag is the Result's (p is selscan_problem, selscan_grads'
// problem or selscan_step_problem, ...): for the single calls around the parts (workspace size,
// checkpoint size).
template <typename P, typename Fn> Result Call(const P &p, const Fn &fn) {
    Result r;
    P q = p;
    q.diag = &r.diag;
    r.status = fn(&q);
    return r;
}

// Runs fn(&q, i) for the parts i = 0 .. n_parts - 1, each on its own copy q of p with its own
// selscan_diag (a failing part writes only its diag; parts run on different threads).
// parallel_for(n, body) is the framework's pool: it calls body(i) once for every i in [0, n), in
// any order and on any threads, and returns when all are done (n_parts 1 runs inline). The Result
// is the first failing part's (the lowest i), so the error does not depend on the scheduling.
template <typename P, typename ParallelFor, typename Fn>
Result RunParts(const P &p, int64_t n_parts, const ParallelFor &parallel_for, const Fn &fn) {
    const size_t n = static_cast<size_t>(n_parts < 1 ? 1 : n_parts);
    std::vector<selscan_status> sts(n, SELSCAN_OK);
    std::vector<selscan_diag> diags(n, selscan_diag{nullptr, nullptr, SELSCAN_RULE_NONE});
    auto part = [&](int64_t i) {
        P q = p;
        q.diag = &diags[static_cast<size_t>(i)];
        sts[static_cast<size_t>(i)] = fn(&q, i);
    };
    if (n == 1) part(0);
    else parallel_for(static_cast<int64_t>(n), part);
    Result r;
    for (size_t i = 0; i < n; i++)
        if (sts[i] != SELSCAN_OK) {
            r.status = sts[i];
            r.diag = diags[i];
            break;
        }
    return r;
}

// The decode step's parts: blocks of 256 channels of a row (selscan_step_cpu_part's work items),
// at most one per thread of the framework's pool (n_threads).
inline int64_t StepParts(int64_t n_threads, int64_t batch, int64_t dim) {
    const int64_t items = batch * ((dim + 255) / 256);
    const int64_t n = n_threads < items ? n_threads : items;
    return n < 1 ? 1 : n;
}

// ---- >>bind-errors: status -> error kind and message --------------------------------------------

// The kind of error a status is, for the framework's own exception / status type.
enum class ErrorKind {
    kNone,           // SELSCAN_OK
    kValue,          // bad shapes, strides, aliasing, ...: ValueError / InvalidArgument
    kType,           // SELSCAN_ERR_DTYPE: TypeError
    kNotImplemented, // SELSCAN_ERR_UNSUPPORTED: what a backend cannot do
    kDevice,         // SELSCAN_ERR_CUDA: a failure of the device (RuntimeError / Internal)
};
inline ErrorKind KindOf(selscan_status st) {
    switch (st) {
    case SELSCAN_OK: return ErrorKind::kNone;
    case SELSCAN_ERR_DTYPE: return ErrorKind::kType;
    case SELSCAN_ERR_UNSUPPORTED: return ErrorKind::kNotImplemented;
    case SELSCAN_ERR_CUDA: return ErrorKind::kDevice;
    default: return ErrorKind::kValue;
    }
}

// >>bind-names: selscan's operand names -> the user's argument names, one map per op (the step's
// x is selscan's u, dt its delta, ...); the operand a rule names ("overlaps <operand>", "... without
// <operand>") is renamed the same way. A map's entry may name its own noun (ONNX Runtime's outputs:
// "output 'last_state'", where its inputs are "input 'h0'").
struct NameMap {
    const char *selscan;
    const char *user;
    const char *noun = nullptr; // what the messages call this one; nullptr: Names::noun
};
struct Names {
    const NameMap *map = nullptr;
    size_t n = 0;
    const char *noun = "argument"; // what the messages call one: "(argument 'x': ...)" (ONNX Runtime: input)
    std::string Of(const char *name) const {
        for (size_t i = 0; i < n; i++)
            if (std::strcmp(map[i].selscan, name) == 0) return map[i].user;
        return name;
    }
    const char *NounOf(const char *name) const { // the noun of operand `name` (its entry's, else noun)
        for (size_t i = 0; i < n; i++)
            if (std::strcmp(map[i].selscan, name) == 0) return map[i].noun ? map[i].noun : noun;
        return noun;
    }
    // " (input 'x': rule)": the operand selscan (or a check) names, in the user's words
    std::string Text(const char *operand, const std::string &rule) const {
        return std::string(" (") + NounOf(operand) + " '" + Of(operand) + "': " + rule + ")";
    }
    std::string Rule(const char *rule) const { // "overlaps u" -> "overlaps x"; "... without state_index" too
        static const char kOv[] = "overlaps ";
        if (std::strncmp(rule, kOv, sizeof kOv - 1) == 0) return kOv + Of(rule + sizeof kOv - 1);
        static const char kWithout[] = " without ";
        if (const char *w = std::strstr(rule, kWithout))
            return std::string(rule, static_cast<size_t>(w - rule)) + kWithout + Of(w + sizeof kWithout - 1);
        return rule;
    }
};
template <size_t K> Names NamesOf(const NameMap (&map)[K], const char *noun = "argument") {
    return Names{map, K, noun};
}

// The decode step's map (both packages name the step's arguments like mamba_ssm's
// selective_state_update: x is selscan's u, dt its delta, ...).
constexpr NameMap kStepNames[] = {
    {"u", "x"},    {"delta", "dt"},     {"delta_bias", "dt_bias"}, {"state_index", "state_batch_indices"},
    {"y", "out"},  {"dstate", "state"}, {"n_cache", "state"},      {"n_groups", "B"},
    {"batch", "x"}};

// " (argument 'x': rule)" for the operand selscan's diag names, "" when it names none.
inline std::string DiagText(const selscan_diag &d, const Names &names = Names()) {
    if (!d.operand) return "";
    return names.Text(d.operand, d.rule ? names.Rule(d.rule) : "invalid");
}

// An error for the framework to raise: its kind and message.
struct Error {
    ErrorKind kind = ErrorKind::kNone;
    std::string message;
    bool ok() const { return kind == ErrorKind::kNone; }
};

// "selscan: <where>: <status text> [<STATUS_NAME>]<diag_text>[ (<context>)][: <device_text>]".
inline Error ErrorOf(selscan_status st, const char *where, const std::string &diag_text,
                     const std::string &context = "", const char *device_text = "") {
    Error e;
    e.kind = KindOf(st);
    if (st == SELSCAN_OK) return e;
    e.message = std::string("selscan: ") + where + ": " + selscan_status_string(st) + " [" + selscan_status_name(st) +
                "]" + diag_text + (context.empty() ? std::string() : " (" + context + ")") +
                (device_text && *device_text ? std::string(": ") + device_text : std::string());
    return e;
}
inline Error ErrorOf(const Result &r, const char *where, const Names &names = Names(), const std::string &context = "",
                     const char *device_text = "") {
    return ErrorOf(r.status, where, DiagText(r.diag, names), context, device_text);
}

} // namespace selscan_binding

// ============================================================================================
// >>bind-args: the argument checks every selscan binding shares (issue 39: one owner for every rule)
// ============================================================================================
//
// A binding describes a call's framework tensors without their data (>>args-arg: rank, sizes,
// strides, element type, device) and hands them over per op (>>args-ops: ScanArgs, StepArgs,
// ConvArgs, ConvStepArgs, members named like selscan's operands); the check answers with the
// library's SELSCAN_RULE_* code, selscan's operand name and the detail, or with the call's sizes,
// dtype and flags:
//   * the operands' forms come from selscan.h's operand tables (SELSCAN__SCAN_OPERANDS, ...: rank,
//     dims, dtype, required / optional, in / out), with the framework forms a binding allows
//     (Forms: B / C without the group axis, constant B / C, a layout's axis order);
//   * their sizes are unified in the table's order (the first operand that shows a size defines
//     it; where a later one disagrees and the others side with it, the first one is named);
//   * the rules between sizes and the host values (n_groups dividing dim, packed sequences, the
//     steps' state rows, the conv's width, ...) are the library's own: selscan_check_*sizes;
//   * the rule texts are the library's (selscan.h's rule list); none is written here.
// Unknown ranks or sizes (< 0: a graph's shape function, a symbolic size) are taken as they may be.
// The binding raises its framework's exception from the Refusal (ErrorOf, with its name map).
//
// The checks compile in any translation unit (selscan.h's >>operands tables are declared with its
// API); they call the library's size rules (selscan_check_*sizes), so the program links a TU that
// holds selscan's implementation.
namespace selscan_binding {

// ---- >>args-arg: a framework tensor, described --------------------------------------------------

// An element type as the checks see it.
enum class Type : int8_t { kF32 = 0, kF16, kBF16, kI32, kI64, kOther };
inline const char *TypeText(Type t) {
    static const char *const names[] = {"float32", "float16", "bfloat16", "int32", "int64", "another type"};
    return names[static_cast<int>(t)];
}
inline bool IsFloat(Type t) { return t == Type::kF32 || t == Type::kF16 || t == Type::kBF16; }
inline selscan_dtype DtypeOfType(Type t) {
    return t == Type::kF16 ? SELSCAN_F16 : t == Type::kBF16 ? SELSCAN_BF16 : SELSCAN_F32;
}
inline Type TypeOfDtype(selscan_dtype d) {
    return d == SELSCAN_F16 ? Type::kF16 : d == SELSCAN_BF16 ? Type::kBF16 : Type::kF32;
}

struct Arg {
    bool present = false;
    int64_t ndim = 0;                 // < 0: the rank is not known
    const int64_t *sizes = nullptr;   // ndim sizes; < 0: not known
    const int64_t *strides = nullptr; // element strides (an in-place operand's self-overlap), nullptr: not known
    Type type = Type::kOther;
    const char *type_name = nullptr; // the framework's name of its dtype, for messages (nullptr: TypeText)
    int64_t device = 0;              // the framework's device key: equal keys, the same device
    bool host = true;                // its memory can be read on the host
    int64_t Numel() const {          // -1: not known
        if (ndim < 0) return -1;
        int64_t n = 1;
        for (int64_t i = 0; i < ndim; i++) {
            if (sizes[i] < 0) return -1;
            n *= sizes[i];
        }
        return n;
    }
    const char *TypeName() const { return type_name ? type_name : TypeText(type); }
};

// The framework forms a binding (an op of it) allows besides selscan's own.
struct Forms {
    bool fixed_bc = false;         // the scan's B / C of rank 2: (dim, N) float32, constant over time (SELSCAN_FIXED_*)
    bool groupless_bc = false;     // B / C without the group axis, one group: (batch, N, L), the step's (batch, N)
    bool token_x = false;          // the conv update's x (batch, dim): one token, L 1
    const int *seq_perm = nullptr; // (batch, dim, L) operands: the user's axis of each (TensorFlow's BLD)
    const int *bc_perm = nullptr;  // (batch, G, N, L) operands: the same
    std::string (*device_name)(int64_t) = nullptr; // a device key's name, for messages
    Names names;                                   // selscan's operand names -> the user's, for the details' words
};

// ---- >>args-ops: one call's arguments, per op (members named like selscan's operands) -----------

// selscan::fwd / bwd, SelscanForward / Backward, SelectiveScan. The outputs are the binding's own
// (not checked); dy, dh_last, checkpoint: the backward's (backward = true).
struct ScanArgs {
    Arg u, delta, A, B, C, D, z, delta_bias, h0, y, h_last;
    Arg dy, dh_last, du, ddelta, dA, dB, dC, dD, dz, ddelta_bias, dh0;
    Arg cu_seqlens, checkpoint;
    const int64_t *cu_values = nullptr; // cu_seqlens' values where the host has them (checked)
    bool backward = false;
};
// The decode step (u is the step's x, delta its dt; state is read and written).
struct StepArgs {
    Arg state, u, delta, A, B, C, D, z, delta_bias, y;
    Arg state_index;
    const int32_t *index_values = nullptr; // state_index's values where the host has them (checked)
};
struct ConvArgs {
    Arg x, weight, bias, init_state, y, final_state;
    Arg dy, dfinal_state, dx, dweight, dbias, dinit_state;
    Arg cu_seqlens;
    const int64_t *cu_values = nullptr;
    bool backward = false;
};
struct ConvStepArgs {
    Arg state, x, weight, bias, y;
    Arg state_index;
    const int32_t *index_values = nullptr;
};
// Mamba-2's SSD scan (selscan_ssd_*; members named like the operand tables' fields). dt_limit: the
// clamp's bounds as the call gives them (SELSCAN_SSD_DT_LIMIT), checked with the sizes.
struct SsdArgs {
    Arg x, dt, A, B, C, D, z, dt_bias, seq_idx, initial_state, y, final_state;
    Arg dy, dfinal_state, dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinitial_state;
    Arg cu_seqlens;
    const int64_t *cu_values = nullptr;
    bool backward = false;
    bool dt_limit = false;
    float dt_min = 0.f, dt_max = 0.f;
};

// The gated RMS norm (selscan_norm_*): group_size (0: dim), eps and the gate's place as the call
// gives them, checked with the sizes.
struct NormArgs {
    Arg y, z, weight, out;
    Arg dout, dy, dz, dweight;
    bool backward = false;
    int64_t group_size = 0;
    float eps = 0.f;
    bool before = false;
};

// ---- >>args-order: each op's inputs in the one order every binding lists them -------------------
// (torch's schemas, the ONNX Runtime ops' and the TensorFlow ops' inputs; a backward appends its
// extra inputs). A binding describes its inputs into an array in this order and takes the op's Args
// from it (ScanArgsOf, ...): the order and the member each position fills are written here only.
enum ScanInput {
    kScanU = 0,
    kScanDelta,
    kScanA,
    kScanB,
    kScanC,
    kScanD,
    kScanZ,
    kScanDeltaBias,
    kScanH0,
    kScanCuSeqlens,
    kScanFwdInputs,
    kScanDy = kScanFwdInputs,
    kScanDhLast,
    kScanCheckpoint,
    kScanBwdInputs
};
enum StepInput {
    kStepState = 0,
    kStepX,
    kStepDt,
    kStepA,
    kStepB,
    kStepC,
    kStepD,
    kStepZ,
    kStepDtBias,
    kStepIndex,
    kStepInputs
};
enum ConvInput {
    kConvX = 0,
    kConvWeight,
    kConvBias,
    kConvInitState,
    kConvCuSeqlens,
    kConvFwdInputs,
    kConvDy = kConvFwdInputs,
    kConvDfinalState,
    kConvBwdInputs
};
enum ConvStepInput { kConvStepState = 0, kConvStepX, kConvStepWeight, kConvStepBias, kConvStepIndex, kConvStepInputs };
enum SsdInput {
    kSsdX = 0,
    kSsdDt,
    kSsdA,
    kSsdB,
    kSsdC,
    kSsdD,
    kSsdZ,
    kSsdDtBias,
    kSsdInitialState,
    kSsdSeqIdx,
    kSsdCuSeqlens,
    kSsdFwdInputs,
    kSsdDy = kSsdFwdInputs,
    kSsdDfinalState,
    kSsdBwdInputs
};

enum NormInput { kNormY = 0, kNormZ, kNormWeight, kNormFwdInputs, kNormDout = kNormFwdInputs, kNormBwdInputs };

// in: kScanFwdInputs Args (kScanBwdInputs with backward); cu_values: cu_seqlens' host values or nullptr
inline ScanArgs ScanArgsOf(const Arg *in, bool backward, const int64_t *cu_values) {
    ScanArgs s;
    s.u = in[kScanU], s.delta = in[kScanDelta], s.A = in[kScanA], s.B = in[kScanB], s.C = in[kScanC];
    s.D = in[kScanD], s.z = in[kScanZ], s.delta_bias = in[kScanDeltaBias], s.h0 = in[kScanH0];
    s.cu_seqlens = in[kScanCuSeqlens], s.cu_values = cu_values;
    if (backward) {
        s.backward = true;
        s.dy = in[kScanDy], s.dh_last = in[kScanDhLast], s.checkpoint = in[kScanCheckpoint];
    }
    return s;
}
inline StepArgs StepArgsOf(const Arg *in, const int32_t *index_values) {
    StepArgs s;
    s.state = in[kStepState], s.u = in[kStepX], s.delta = in[kStepDt], s.A = in[kStepA], s.B = in[kStepB];
    s.C = in[kStepC], s.D = in[kStepD], s.z = in[kStepZ], s.delta_bias = in[kStepDtBias];
    s.state_index = in[kStepIndex], s.index_values = index_values;
    return s;
}
inline ConvArgs ConvArgsOf(const Arg *in, bool backward, const int64_t *cu_values) {
    ConvArgs s;
    s.x = in[kConvX], s.weight = in[kConvWeight], s.bias = in[kConvBias], s.init_state = in[kConvInitState];
    s.cu_seqlens = in[kConvCuSeqlens], s.cu_values = cu_values;
    if (backward) {
        s.backward = true;
        s.dy = in[kConvDy], s.dfinal_state = in[kConvDfinalState];
    }
    return s;
}
inline ConvStepArgs ConvStepArgsOf(const Arg *in, const int32_t *index_values) {
    ConvStepArgs s;
    s.state = in[kConvStepState], s.x = in[kConvStepX], s.weight = in[kConvStepWeight], s.bias = in[kConvStepBias];
    s.state_index = in[kConvStepIndex], s.index_values = index_values;
    return s;
}

inline SsdArgs SsdArgsOf(const Arg *in, bool backward, const int64_t *cu_values) {
    SsdArgs s;
    s.x = in[kSsdX], s.dt = in[kSsdDt], s.A = in[kSsdA], s.B = in[kSsdB], s.C = in[kSsdC], s.D = in[kSsdD];
    s.z = in[kSsdZ], s.dt_bias = in[kSsdDtBias], s.initial_state = in[kSsdInitialState], s.seq_idx = in[kSsdSeqIdx];
    s.cu_seqlens = in[kSsdCuSeqlens], s.cu_values = cu_values;
    if (backward) {
        s.backward = true;
        s.dy = in[kSsdDy], s.dfinal_state = in[kSsdDfinalState];
    }
    return s;
}

inline NormArgs NormArgsOf(const Arg *in, bool backward) {
    NormArgs s;
    s.y = in[kNormY], s.z = in[kNormZ], s.weight = in[kNormWeight];
    if (backward) {
        s.backward = true;
        s.dout = in[kNormDout];
    }
    return s;
}

// What a check refused: selscan's status and rule, selscan's operand name (a binding's name map
// gives the user's), the detail (wanted and given; or the sizes of a size rule).
struct Refusal {
    selscan_status status = SELSCAN_OK;
    selscan_rule code = SELSCAN_RULE_NONE;
    const char *operand = nullptr;
    std::string rule;   // the rule's text (selscan's; "overlaps <operand>" as selscan writes it)
    std::string detail; // e.g. "want (batch, dim, L) = [2, 8, 12], got [2, 9, 12]"
    bool ok() const { return status == SELSCAN_OK; }
};

// What a check found: the sizes (Sizes: -1 where not known; the steps' rows: n_cache), selscan's
// dtype and the flags the argument forms say (SELSCAN_FIXED_*, the steps' SELSCAN_STEP_*_T;
// SELSCAN_CONV_PARAMS_T when the conv update's weight and bias (given) are both T), n_cache, the
// conv's width and state_len.
struct Checked {
    Sizes s;
    selscan_dtype dtype = SELSCAN_F32;
    unsigned flags = 0;
    int64_t n_cache = 0, width = 0, state_len = 0;
    int64_t nheads = 0, headdim = 0; // the SSD's (s.dim: nheads * headdim, -1 where either is not known)
    bool params_mixed = false; // the conv update: weight and bias, one T and one float32
    bool step = false;         // a decode step's (the step's, the conv update's)
    // >>bind-empty, every op's: the call has nothing for selscan to compute, and the binding answers
    // it without calling selscan: Sizes::Empty (the scan, the conv) or Sizes::StepEmpty (the steps).
    bool Empty() const { return step ? s.StepEmpty() : s.Empty(); }
};

// The framework's error for a refusal: "selscan: <where>: <status text> [<STATUS>] (argument 'x':
// <rule>[: <detail>])", the operand in the user's words (names); a device's rule is a value error.
inline Error ErrorOf(const Refusal &r, const char *where, const Names &names = Names()) {
    if (r.ok()) return Error();
    const std::string diag =
        names.Text(r.operand ? r.operand : "?", names.Rule(r.rule.c_str()) + (r.detail.empty() ? "" : ": " + r.detail));
    Error e = ErrorOf(r.status, where, diag);
    if (r.code == SELSCAN_RULE_DEVICE || r.code == SELSCAN_RULE_NOT_HOST) e.kind = ErrorKind::kValue;
    return e;
}

} // namespace selscan_binding

// ---- >>args-check: the checks ------------------------------------------------------------------
namespace selscan_binding {
namespace args_detail {

constexpr int64_t kUnset = INT64_MIN; // a size no operand has shown yet
constexpr int64_t kAny = -1;          // a size not known (< 0)

// A size of the call (batch, dim, L, ...): its value once an operand shows it, and which row did.
struct Cell {
    const char *name = "";
    int64_t v = kUnset;
    int def = -1;
    Cell *alias = nullptr; // rows: batch without packed sequences
};
struct Cells {
    Cell batch, dim, L, N, G, rows, ncache, W, S;
    Cell H, P; // the SSD's nheads, headdim
    int Dhd = 0; // the SSD's D per channel ((H, P)), from D's rank
    Cell offsets, floats; // the lengths of cu_seqlens and of the checkpoint (no rule between them and the rest)
    Cells() {
        batch.name = "batch";
        dim.name = "dim";
        L.name = "L";
        N.name = "N";
        G.name = "G";
        rows.name = "n_seqs";
        ncache.name = "n_cache";
        W.name = "width";
        S.name = "state_len";
        H.name = "nheads";
        P.name = "headdim";
        offsets.name = "n_seqs + 1";
        floats.name = "n";
    }
};
// One axis of an operand's logical shape: a cell plus a constant (width - 1), or a constant (1; kAny).
struct Dim {
    Cell *c = nullptr;
    int64_t add = 0;
    Dim() = default;
    Dim(int64_t v) : add(v) {}                              // NOLINT: selscan's dims tables write literal 1
    Dim(Cell &cell) : c(cell.alias ? cell.alias : &cell) {} // NOLINT
    Dim(Cell *cell, int64_t a) : c(cell), add(a) {}
    int64_t Value() const { // kUnset: not shown yet; < 0: not known
        if (!c) return add;
        if (c->v == kUnset) return kUnset;
        return c->v < 0 ? kAny : c->v + add;
    }
};
inline Dim operator-(Cell &c, int k) { return Dim(c.alias ? c.alias : &c, -k); }
struct Shape {
    int rank = 0;
    Dim d[4];
    Shape() = default;
    Shape(int r, Dim a, Dim b, Dim c, Dim e) : rank(r) {
        d[0] = a;
        d[1] = b;
        d[2] = c;
        d[3] = e;
    }
};

enum Dt : int8_t { kT, kF32, kFIXB, kFIXC, kPRM, kSTT, kI32, kI64, kF32OrEmpty };

struct Row {
    const char *name;
    const Arg *arg;
    bool out, required, host_only = false;
    const char *dims;
    Shape full, fixed;
    Dt dt;
    // the form taken (from the rank): its logical shape and sizes
    bool rank_ok = false, is_fixed = false;
    Shape want;
    int64_t size[4] = {0, 0, 0, 0};
    int user_axis[4] = {0, 1, 2, 3}; // the user's axis of each logical axis (-1: none, an implied 1)
    int full_axis[4] = {0, 1, 2, 3}; // the same for the full form (a layout's order)
};

#define SELSCAN_BINDING__NEED_REQ(fwd) true
#define SELSCAN_BINDING__NEED_FWD(fwd) (fwd)
#define SELSCAN_BINDING__NEED_OPT(fwd) false
// X-macro row callback of selscan.h's operand tables: c is the Checker, its a the op's args, q its cells
#define SELSCAN_BINDING__ROW(c, field, ten, io, need, dims, dtype)                                             \
    (c)->Add(#field, &(c)->a->field, SELSCAN_BINDING__IS_OUT_##io, SELSCAN_BINDING__NEED_##need(false), #dims, \
             Shape(SELSCAN__DIMS_##dims(&(c)->q)), Shape(SELSCAN__DIMS_DN(&(c)->q)), k##dtype);
#define SELSCAN_BINDING__IS_OUT_IN false
#define SELSCAN_BINDING__IS_OUT_OUT true

inline std::string SizesText(const Arg &a) {
    if (a.ndim < 0) return "(rank not known)";
    std::string s = "[";
    for (int64_t i = 0; i < a.ndim; i++)
        s += (i ? ", " : "") + (a.sizes[i] < 0 ? std::string("?") : std::to_string(a.sizes[i]));
    return s + "]";
}

// Packed sequences: n_seqs from cu_seqlens' length (kAny: not known).
inline int64_t SeqsOf(const Arg &cu_seqlens) {
    const int64_t n = cu_seqlens.ndim == 1 ? cu_seqlens.sizes[0] : kAny;
    return n < 0 ? kAny : n - 1;
}

// The rows of one check, in place (no allocation a call, and only the rows added are written: the
// checks run on every op call). Capacity for the largest op (the scan's backward: 24 rows); one more
// is a programming error, refused (SELSCAN_ERR_UNSUPPORTED) by Rows.
struct RowList {
    static constexpr size_t kCap = 40;
    alignas(Row) unsigned char buf[kCap * sizeof(Row)]; // a row is made when added: no kCap rows set up a call
    size_t n = 0;
    bool overflow = false;
    void push_back(const Row &x) {
        if (n < kCap) new (buf + n++ * sizeof(Row)) Row(x);
        else overflow = true;
    }
    size_t size() const { return n; }
    Row *begin() { return std::launder(reinterpret_cast<Row *>(buf)); }
    const Row *begin() const { return std::launder(reinterpret_cast<const Row *>(buf)); }
    Row *end() { return begin() + n; }
    const Row *end() const { return begin() + n; }
    Row &operator[](size_t i) { return begin()[i]; }
    const Row &operator[](size_t i) const { return begin()[i]; }
};
static_assert(std::is_trivially_destructible<Row>::value, "RowList never destroys its rows");

template <typename Args> class Checker {
  public:
    Checker(const Args &args, const Forms &f) : a(&args), forms(f) {}
    const Args *a;
    Cells q;
    Forms forms;
    Refusal ref; // what the check refused (ok: nothing yet)
    RowList rows;
    Type T = Type::kF32;
    const Arg *dev_ref = nullptr; // the operand whose device the others must be on
    const char *dev_ref_name = "";

    void Add(const char *name, const Arg *arg, bool out, bool required, const char *dims, Shape full, Shape fixed,
             Dt dt) {
        if (out && !arg->present) return; // an output the binding makes (only the steps' state is handed in)
        Row r;
        r.name = name;
        r.arg = arg;
        r.out = out;
        r.required = required;
        r.dims = dims;
        r.full = full;
        r.fixed = fixed;
        r.dt = dt;
        rows.push_back(r);
    }
    // The state rows (before the operands): n_seqs with packed sequences (cu_seqlens present; its
    // length shown as a size of its own, host memory), else batch. Whether the sequences are packed.
    // Fewer than 2 offsets: rows left unknown, so that the library's "no sequence" is the refusal,
    // not an h0 / state shape that follows from it.
    bool Sequences(const Arg &cu_seqlens) {
        if (!cu_seqlens.present) q.rows.alias = &q.batch;
        else if (cu_seqlens.ndim == 1 && (cu_seqlens.sizes[0] < 0 || cu_seqlens.sizes[0] >= 2))
            q.rows.v = SeqsOf(cu_seqlens);
        return cu_seqlens.present;
    }
    // a vector operand selscan's tables do not list (cu_seqlens, state_index, checkpoint)
    void AddVector(const char *name, const Arg *arg, Dim n, Dt dt, bool host_only) {
        Row r;
        r.name = name;
        r.arg = arg;
        r.out = false;
        r.required = false;
        r.dims = "VEC";
        r.full = Shape(1, n, 1, 1, 1);
        r.dt = dt;
        r.host_only = host_only;
        rows.push_back(r);
    }

    bool Fail(selscan_status st, selscan_rule code, const char *operand, std::string detail) {
        ref.status = st;
        ref.code = code;
        ref.operand = operand;
        ref.rule = selscan_rule_string(code);
        ref.detail = std::move(detail);
        return false;
    }

    // The problem's first operand (u, x): T is its dtype, the others must be on its device.
    bool Start(const Arg &t, const char *name) {
        dev_ref = &t;
        dev_ref_name = name;
        if (!t.present) return true;
        if (IsFloat(t.type)) {
            T = t.type;
            return true;
        }
        return Fail(SELSCAN_ERR_DTYPE, SELSCAN_RULE_DTYPE, name,
                    std::string("want float32, float16 or bfloat16, got ") + t.TypeName());
    }

    // The form a row's rank selects: its logical shape (want) and the user's axis of each logical one.
    void ChooseForm(Row &r) {
        const Arg &t = *r.arg;
        r.rank_ok = false;
        if (!t.present || t.ndim < 0) return;
        const int full = r.full.rank;
        const bool bc = std::strcmp(r.dims, "BC") == 0 || std::strcmp(r.dims, "BC1") == 0;
        const bool fixable = r.dt == kFIXB || r.dt == kFIXC;
        const int *perm = std::strcmp(r.dims, "SEQ") == 0  ? forms.seq_perm
                          : std::strcmp(r.dims, "BC") == 0 ? forms.bc_perm
                                                           : nullptr;
        for (int i = 0; i < full; i++) r.full_axis[i] = perm ? perm[i] : i;
        if (t.ndim == full) {
            r.want = r.full;
            for (int i = 0; i < full; i++) r.user_axis[i] = perm ? perm[i] : i;
        } else if (bc && forms.groupless_bc && t.ndim == full - 1) { // the group axis (1) implied: G 1
            r.want = r.full;
            GrouplessAxes(r, r.user_axis);
        } else if (fixable && forms.fixed_bc && t.ndim == 2) {
            r.is_fixed = true;
            r.want = r.fixed;
            r.user_axis[0] = 0;
            r.user_axis[1] = 1;
        } else if (forms.token_x && std::strcmp(r.dims, "SEQ") == 0 && t.ndim == full - 1) { // L implied: 1
            r.want = r.full;
            for (int i = 0; i < full - 1; i++) r.user_axis[i] = i;
            r.user_axis[full - 1] = -1;
        } else {
            return;
        }
        for (int i = 0; i < r.want.rank; i++) r.size[i] = r.user_axis[i] < 0 ? 1 : t.sizes[r.user_axis[i]];
        r.rank_ok = true;
    }

    // The user's axis of each logical axis of a B / C without its group axis (logical axis 1, -1: implied):
    // the full form's (its layout's order), less one past the group's, so (batch, L, N) in layout BLD.
    static void GrouplessAxes(const Row &r, int *axes) {
        const int g = r.full_axis[1];
        for (int i = 0; i < r.full.rank; i++) axes[i] = i == 1 ? -1 : r.full_axis[i] - (r.full_axis[i] > g ? 1 : 0);
    }

    // "(batch, dim, L)" for the logical shape s laid out on n user axes (axes: the user's axis of each
    // logical one, -1 none; nullptr: the same order); " = [2, 8, 12]" where every value is known
    using Overrides = std::vector<std::pair<const Cell *, int64_t>>; // cells taken at other values
    static int64_t ValueOf(const Dim &d, const Overrides *over) {
        if (over)
            for (const auto &o : *over)
                if (d.c && d.c == o.first) return o.second + d.add;
        return d.Value();
    }
    std::string FormText(const Shape &s, const int *axes, int n, const Overrides *over = nullptr,
                         bool values = true) const {
        std::vector<std::string> names(static_cast<size_t>(n), "?"), vals(static_cast<size_t>(n), "?");
        bool all = true;
        for (int i = 0; i < s.rank; i++) {
            const int ua = axes ? axes[i] : i;
            if (ua < 0 || ua >= n) continue;
            const Dim &d = s.d[i];
            std::string nm = d.c ? d.c->name : std::to_string(d.add);
            if (d.c && d.add) nm += " - " + std::to_string(-d.add);
            names[static_cast<size_t>(ua)] = nm;
            const int64_t v = ValueOf(d, over);
            if (v < 0) all = false;
            vals[static_cast<size_t>(ua)] = v < 0 ? "?" : std::to_string(v);
        }
        std::string t = "(", u = "[";
        for (int i = 0; i < n; i++) {
            t += (i ? ", " : "") + names[static_cast<size_t>(i)];
            u += (i ? ", " : "") + vals[static_cast<size_t>(i)];
        }
        t += n == 1 ? ",)" : ")";
        return values && all ? t + " = " + u + "]" : t;
    }
    std::string FormOf(const Row &r, const Overrides *over = nullptr) const {
        return FormText(r.want, r.user_axis, static_cast<int>(r.arg->ndim), over);
    }
    // The value most of the rows other than `skip` show for cell c (none: *found false).
    int64_t Majority(const Cell *c, size_t skip, bool *found) const {
        std::vector<std::pair<int64_t, int>> counts;
        for (size_t j = 0; j < rows.size(); j++) {
            if (j == skip || !rows[j].rank_ok) continue;
            for (int e = 0; e < rows[j].want.rank; e++) {
                if (rows[j].want.d[e].c != c || rows[j].want.d[e].add != 0 || rows[j].size[e] < 0) continue;
                bool seen = false;
                for (auto &x : counts)
                    if (x.first == rows[j].size[e]) {
                        x.second++;
                        seen = true;
                    }
                if (!seen) counts.push_back({rows[j].size[e], 1});
            }
        }
        int best = 0;
        int64_t v = 0;
        for (const auto &x : counts)
            if (x.second > best) {
                best = x.second;
                v = x.first;
            }
        *found = best > 0;
        return v;
    }

    // " (its axes i and j swapped: transpose(i, j))" where that would give the wanted sizes
    std::string SwapHint(const Row &r, const Overrides *over) const {
        const Arg &t = *r.arg;
        std::vector<int64_t> want(static_cast<size_t>(t.ndim), -1);
        for (int i = 0; i < r.want.rank; i++) {
            const int ua = r.user_axis[i];
            if (ua < 0) continue;
            const Dim &d = r.want.d[i];
            want[static_cast<size_t>(ua)] = ValueOf(d, over);
        }
        for (int64_t i = 0; i < t.ndim; i++)
            for (int64_t j = i + 1; j < t.ndim; j++) {
                bool ok = t.sizes[i] != t.sizes[j];
                for (int64_t k = 0; k < t.ndim && ok; k++) {
                    const int64_t s = t.sizes[k == i ? j : k == j ? i : k], w = want[static_cast<size_t>(k)];
                    ok = w < 0 || s == w;
                }
                if (ok)
                    return " (its axes " + std::to_string(i) + " and " + std::to_string(j) + " swapped: transpose(" +
                           std::to_string(i) + ", " + std::to_string(j) + ")?)";
            }
        return "";
    }

    bool RankFail(const Row &r) {
        const bool bc = std::strcmp(r.dims, "BC") == 0 || std::strcmp(r.dims, "BC1") == 0;
        const bool fixable = (r.dt == kFIXB || r.dt == kFIXC) && forms.fixed_bc;
        std::vector<std::string> alts;
        if (forms.token_x && std::strcmp(r.dims, "SEQ") == 0) { // (batch, dim) first: the usual one
            Shape s = r.full;
            s.rank -= 1;
            alts.push_back(FormText(s, nullptr, s.rank, nullptr, false));
        }
        alts.push_back(FormText(r.full, r.full_axis, r.full.rank));
        if (bc && forms.groupless_bc) { // without the group axis
            int axes[4];
            GrouplessAxes(r, axes);
            alts.push_back(FormText(r.full, axes, r.full.rank - 1, nullptr, false));
        }
        if (fixable) alts.push_back(FormText(r.fixed, nullptr, r.fixed.rank, nullptr, false) + " (constant over time)");
        std::string want;
        for (size_t i = 0; i < alts.size(); i++) want += (i == 0 ? "" : i + 1 == alts.size() ? " or " : ", ") + alts[i];
        return Fail(SELSCAN_ERR_SHAPE, SELSCAN_RULE_SHAPE, r.name, "want " + want + ", got " + SizesText(*r.arg));
    }

    // The sizes of rows[k] against the cells; on a mismatch, the row at odds with the rest is named.
    bool Unify(size_t k) {
        Row &r = rows[k];
        for (int i = 0; i < r.want.rank; i++) {
            const Dim &d = r.want.d[i];
            const int64_t have = r.size[i];
            if (have < 0) continue; // not known
            if (d.c && d.c->v == kUnset) {
                if (d.add == 0) {
                    d.c->v = have;
                    d.c->def = static_cast<int>(k);
                }
                continue;
            }
            const int64_t want = d.Value();
            if (want < 0 || want == have) continue;
            // the one at odds: the row that defined the cell, where more of the others have this row's value
            if (d.c && d.add == 0 && d.c->def >= 0) {
                int with_this = 0, with_def = 0;
                for (size_t j = 0; j < rows.size(); j++) {
                    if (j == k || static_cast<int>(j) == d.c->def || !rows[j].rank_ok) continue;
                    for (int e = 0; e < rows[j].want.rank; e++)
                        if (rows[j].want.d[e].c == d.c && rows[j].want.d[e].add == 0) {
                            with_this += rows[j].size[e] == have;
                            with_def += rows[j].size[e] == want;
                        }
                }
                if (with_this > with_def) { // the defining row: each of its sizes as most of the others have it
                    const size_t od = static_cast<size_t>(d.c->def);
                    const Row &o = rows[od];
                    Overrides over;
                    for (int e = 0; e < o.want.rank; e++) {
                        const Cell *oc = o.want.d[e].c;
                        bool found = false;
                        const int64_t v = oc && o.want.d[e].add == 0 ? Majority(oc, od, &found) : 0;
                        if (found) over.push_back({oc, v});
                    }
                    return Fail(SELSCAN_ERR_SHAPE, SELSCAN_RULE_SHAPE, o.name,
                                "want " + FormOf(o, &over) + ", got " + SizesText(*o.arg) + SwapHint(o, &over));
                }
            }
            // an implied axis (the group axis of a B without one, a token's L): the full form is wanted
            const std::string form = r.user_axis[i] < 0 ? FormText(r.full, r.full_axis, r.full.rank) : FormOf(r);
            return Fail(SELSCAN_ERR_SHAPE, SELSCAN_RULE_SHAPE, r.name,
                        "want " + form + ", got " + SizesText(*r.arg) + SwapHint(r, nullptr));
        }
        return true;
    }

    bool CheckType(const Row &r) {
        const Arg &t = *r.arg;
        const bool call = r.dt == kT || ((r.dt == kFIXB || r.dt == kFIXC) && !r.is_fixed);
        const bool either = r.dt == kPRM || r.dt == kSTT; // float32 or the call's dtype
        const Type want = call ? T : r.dt == kI32 ? Type::kI32 : r.dt == kI64 ? Type::kI64 : Type::kF32;
        if (r.dt == kF32OrEmpty && t.Numel() == 0) return true;
        if (t.type == want || (either && t.type == T)) return true;
        std::string w = TypeText(want);
        if (either && T != Type::kF32) w += std::string(" or ") + TypeText(T);
        if (call || (either && T != Type::kF32)) w += " (" + forms.names.Of(dev_ref_name) + "'s dtype)";
        if (r.is_fixed) w += " (constant over time)";
        return Fail(SELSCAN_ERR_DTYPE, SELSCAN_RULE_DTYPE, r.name, "want " + w + ", got " + t.TypeName());
    }

    std::string DeviceName(int64_t key) const {
        return forms.device_name ? forms.device_name(key) : "device " + std::to_string(key);
    }

    bool Rows() {
        if (rows.overflow)
            return Fail(SELSCAN_ERR_UNSUPPORTED, SELSCAN_RULE_NONE, "", "more operands than RowList holds");
        for (Row &r : rows) ChooseForm(r);
        for (size_t k = 0; k < rows.size(); k++) {
            Row &r = rows[k];
            const Arg &t = *r.arg;
            if (!t.present) {
                if (r.required && !r.out) return Fail(SELSCAN_ERR_NULL, SELSCAN_RULE_MISSING, r.name, "");
                continue;
            }
            if (t.ndim >= 0 && !r.rank_ok) return RankFail(r);
            if (t.ndim >= 0 && !Unify(k)) return false;
            if (!CheckType(r)) return false;
            if (r.host_only) {
                if (!t.host)
                    return Fail(SELSCAN_ERR_UNSUPPORTED, SELSCAN_RULE_NOT_HOST, r.name,
                                "its values are checked on the host; got one on " + DeviceName(t.device));
            } else if (dev_ref && t.device != dev_ref->device) {
                return Fail(SELSCAN_ERR_UNSUPPORTED, SELSCAN_RULE_DEVICE, r.name,
                            "want " + DeviceName(dev_ref->device) + " (" + forms.names.Of(dev_ref_name) + "'s), got " +
                                DeviceName(t.device));
            }
            if (r.out && t.strides && t.ndim > 0 && Numel(t.ndim, t.sizes) > 0) { // updated in place: no overlap
                for (int64_t i = 0; i < t.ndim; i++)
                    if (t.sizes[i] > 1 && t.strides[i] == 0) {
                        std::string st = "[";
                        for (int64_t j = 0; j < t.ndim; j++) st += (j ? ", " : "") + std::to_string(t.strides[j]);
                        return Fail(SELSCAN_ERR_STRIDE, SELSCAN_RULE_ELEMENTS_OVERLAP, r.name,
                                    "strides " + st + "] for shape " + SizesText(t) +
                                        ", an expand()ed or broadcast view updated in place: pass a tensor with its "
                                        "own memory");
                    }
            }
        }
        return true;
    }

    int64_t V(const Cell &c) const {
        const Cell &x = c.alias ? *c.alias : c;
        return x.v == kUnset ? kAny : x.v;
    }

    // a size rule of the library (selscan_check_*sizes) failed (st, d): its status, rule and operand
    bool Library(selscan_status st, const selscan_diag &d, std::string sizes) {
        ref.status = st;
        ref.code = d.code;
        ref.operand = d.operand;
        ref.rule = d.rule ? d.rule : "";
        ref.detail = std::move(sizes);
        return false;
    }
    // the library's size rules answered (st, d; known: the cells whose sizes the detail shows, its
    // text written only for a refusal: an accepted call allocates nothing here): the refusal, or ok
    // with the sizes found in *out
    Refusal Finish(selscan_status st, const selscan_diag &d, std::initializer_list<const Cell *> known,
                   const Checked &k, Checked *out) {
        if (st == SELSCAN_OK) *out = k;
        else Library(st, d, Known(known));
        return ref;
    }
    std::string Known(std::initializer_list<const Cell *> cs) const {
        std::string s;
        for (const Cell *c : cs) {
            const int64_t v = V(*c);
            if (v >= 0) s += (s.empty() ? "" : ", ") + std::string(c->name) + "=" + std::to_string(v);
        }
        return s;
    }
};

// A size not known taken as one that passes every rule it meets (the rule is decided when known).
inline int64_t Or(int64_t v, int64_t dflt) { return v < 0 ? dflt : v; }

// The found sizes' state rows: n_seqs with packed sequences (kAny: not known), else batch (set before).
inline void SetRows(Sizes *s, const Arg &cu_seqlens) {
    s->n_seqs = cu_seqlens.present ? SeqsOf(cu_seqlens) : 0;
    s->rows = cu_seqlens.present ? s->n_seqs : s->batch;
}

// A library problem, zeroed, its diag d.
template <typename P> P Problem(selscan_diag *d) {
    P p;
    std::memset(&p, 0, sizeof p);
    *d = {nullptr, nullptr, SELSCAN_RULE_NONE};
    p.diag = d;
    return p;
}

// The packed sequences of a library problem (the scan's, the conv's): n_seqs + 1 offsets (not
// known: 1 sequence); fewer than 2: no sequence, refused (n_seqs -1); the values where the host has
// them and L is known.
template <typename P> void SetPacked(P *p, const Arg &cu_seqlens, const int64_t *values, int64_t L) {
    const int64_t n = cu_seqlens.ndim == 1 ? cu_seqlens.sizes[0] : -1;
    p->n_seqs = n < 0 ? 1 : n >= 2 ? n - 1 : -1;
    if (n >= 2 && L >= 0) p->cu_seqlens = values;
}

// The steps' state rows (the step's, the conv update's): n_cache as shown (not known: one that
// passes, 1 with state_index, else batch); the indices where the host has them and the sizes are known.
template <typename S> void SetCache(S *s, const Checked &k, const Arg &state_index, const int32_t *values) {
    s->n_cache = k.n_cache < 0 ? (state_index.present ? 1 : s->batch) : k.n_cache;
    if (k.s.batch >= 0 && k.n_cache >= 0) s->state_index = values;
}

// The conv's width first: it shapes the states (W - 1), whatever the sizes (selscan_check_conv_sizes' rule).
template <typename Args> bool WidthFirst(Checker<Args> &c, const Arg &weight) {
    if (!weight.present || weight.ndim != 2 || weight.sizes[1] < 0) return true;
    selscan_diag d;
    selscan_conv_problem p = Problem<selscan_conv_problem>(&d);
    p.batch = p.dim = p.seqlen = 1;
    p.width = weight.sizes[1];
    const selscan_status st = selscan_check_conv_sizes(&p);
    return st == SELSCAN_OK || c.Library(st, d, "width=" + std::to_string(p.width));
}

} // namespace args_detail

// ---- the four checks ---------------------------------------------------------------------------

// The scan's arguments (forward; backward with a.backward): Refusal ok, or the first rule broken.
inline Refusal CheckScanArgs(const ScanArgs &a, const Forms &forms, Checked *out) {
    using namespace args_detail;
    Checker<ScanArgs> c(a, forms);
    if (!c.Start(a.u, "u")) return c.ref;
    const bool packed = c.Sequences(a.cu_seqlens);
    SELSCAN__SCAN_OPERANDS(SELSCAN_BINDING__ROW, &c)
    if (a.backward) {
        SELSCAN__GRAD_OPERANDS(SELSCAN_BINDING__ROW, &c)
        c.AddVector("checkpoint", &a.checkpoint, Dim(c.q.floats), kF32OrEmpty, false);
    }
    c.AddVector("cu_seqlens", &a.cu_seqlens, Dim(c.q.offsets), kI64, true);
    if (!c.Rows()) return c.ref;
    bool fixB = false, fixC = false;
    for (const Row &r : c.rows) {
        if (r.arg == &a.B) fixB = r.is_fixed;
        if (r.arg == &a.C) fixC = r.is_fixed;
    }
    Checked k;
    k.s.batch = c.V(c.q.batch);
    k.s.dim = c.V(c.q.dim);
    k.s.L = c.V(c.q.L);
    k.s.N = c.V(c.q.N);
    k.s.G = c.q.G.v == kUnset ? 1 : c.V(c.q.G); // no group axis shown (B and C constant): one group
    SetRows(&k.s, a.cu_seqlens);
    k.s.fixed_B = fixB;
    k.s.fixed_C = fixC;
    k.dtype = DtypeOfType(c.T);
    k.flags = (fixB ? SELSCAN_FIXED_B : 0u) | (fixC ? SELSCAN_FIXED_C : 0u);
    // the library's size rules (an unknown size: one that passes them)
    selscan_diag d;
    selscan_problem p = Problem<selscan_problem>(&d);
    p.dtype = k.dtype;
    p.flags = k.flags;
    p.n_groups = k.s.G == 0 ? -1 : Or(k.s.G, 1); // a group axis of 0 is no group (selscan's n_groups 0 means 1)
    p.dim = Or(k.s.dim, p.n_groups > 0 ? p.n_groups : 1);
    p.batch = Or(k.s.batch, 1);
    p.seqlen = Or(k.s.L, 1);
    p.dstate = Or(k.s.N, 1);
    if (k.s.N == 0 && (k.s.batch < 0 || k.s.dim < 0 || k.s.L < 0)) p.dstate = 1; // empty or not: not known
    if (packed) SetPacked(&p, a.cu_seqlens, a.cu_values, k.s.L);
    return c.Finish(selscan_check_sizes(&p), d, {&c.q.batch, &c.q.dim, &c.q.L, &c.q.N, &c.q.G}, k, out);
}

inline Refusal CheckStepArgs(const StepArgs &a, const Forms &forms, Checked *out) {
    using namespace args_detail;
    Checker<StepArgs> c(a, forms);
    if (!c.Start(a.u, "u")) return c.ref;
    SELSCAN__STEP_OPERANDS(SELSCAN_BINDING__ROW, &c)
    c.AddVector("state_index", &a.state_index, Dim(c.q.batch), kI32, false);
    if (!c.Rows()) return c.ref;
    Checked k;
    k.s.batch = c.V(c.q.batch);
    k.s.dim = c.V(c.q.dim);
    k.s.L = 1;
    k.s.N = c.V(c.q.N);
    k.s.G = c.q.G.v == kUnset ? 1 : c.V(c.q.G);
    k.n_cache = c.V(c.q.ncache);
    k.s.rows = k.n_cache;
    k.step = true;
    k.dtype = DtypeOfType(c.T);
    const bool t = c.T != Type::kF32;
    k.flags = (t && a.D.present && a.D.type == c.T ? SELSCAN_STEP_D_T : 0u) |
              (t && a.delta_bias.present && a.delta_bias.type == c.T ? SELSCAN_STEP_DELTA_BIAS_T : 0u) |
              (t && a.state.present && a.state.type == c.T ? SELSCAN_STEP_STATE_T : 0u);
    selscan_diag d;
    selscan_step_problem s = Problem<selscan_step_problem>(&d);
    s.dtype = k.dtype;
    s.flags = k.flags;
    s.n_groups = k.s.G == 0 ? -1 : Or(k.s.G, 1); // (as the scan's)
    s.dim = Or(k.s.dim, s.n_groups > 0 ? s.n_groups : 1);
    s.batch = Or(k.s.batch, 1);
    s.dstate = Or(k.s.N, 1);
    if (k.s.N == 0 && (k.s.batch < 0 || k.s.dim < 0)) s.dstate = 1;
    SetCache(&s, k, a.state_index, a.index_values);
    return c.Finish(selscan_check_step_sizes(&s, a.state_index.present), d,
                    {&c.q.batch, &c.q.dim, &c.q.N, &c.q.G, &c.q.ncache}, k, out);
}

inline Refusal CheckConvArgs(const ConvArgs &a, const Forms &forms, Checked *out) {
    using namespace args_detail;
    Checker<ConvArgs> c(a, forms);
    if (!c.Start(a.x, "x")) return c.ref;
    const bool packed = c.Sequences(a.cu_seqlens);
    if (!WidthFirst(c, a.weight)) return c.ref;
    SELSCAN__CONV_OPERANDS(SELSCAN_BINDING__ROW, &c)
    if (a.backward) SELSCAN__CONV_GRAD_OPERANDS(SELSCAN_BINDING__ROW, &c)
    c.AddVector("cu_seqlens", &a.cu_seqlens, Dim(c.q.offsets), kI64, true);
    if (!c.Rows()) return c.ref;
    Checked k;
    k.s.batch = c.V(c.q.batch);
    k.s.dim = c.V(c.q.dim);
    k.s.L = c.V(c.q.L);
    k.width = c.V(c.q.W);
    SetRows(&k.s, a.cu_seqlens);
    k.dtype = DtypeOfType(c.T);
    selscan_diag d;
    selscan_conv_problem p = Problem<selscan_conv_problem>(&d);
    p.dtype = k.dtype;
    p.batch = Or(k.s.batch, 1);
    p.dim = Or(k.s.dim, 1);
    p.seqlen = Or(k.s.L, 1);
    p.width = Or(k.width, 2);
    if (packed) SetPacked(&p, a.cu_seqlens, a.cu_values, k.s.L);
    return c.Finish(selscan_check_conv_sizes(&p), d, {&c.q.batch, &c.q.dim, &c.q.L, &c.q.W}, k, out);
}

inline Refusal CheckConvStepArgs(const ConvStepArgs &a, const Forms &forms, Checked *out) {
    using namespace args_detail;
    Forms f = forms;
    f.token_x = true;
    Checker<ConvStepArgs> c(a, f);
    if (!c.Start(a.x, "x")) return c.ref;
    if (!WidthFirst(c, a.weight)) return c.ref;
    SELSCAN__CONV_STEP_OPERANDS(SELSCAN_BINDING__ROW, &c)
    c.AddVector("state_index", &a.state_index, Dim(c.q.batch), kI32, false);
    if (!c.Rows()) return c.ref;
    Checked k;
    k.s.batch = c.V(c.q.batch);
    k.s.dim = c.V(c.q.dim);
    k.s.L = c.q.L.v == kUnset ? 1 : c.V(c.q.L);
    k.width = c.V(c.q.W);
    k.state_len = c.V(c.q.S);
    k.n_cache = c.V(c.q.ncache);
    k.s.rows = k.n_cache;
    k.step = true;
    k.dtype = DtypeOfType(c.T);
    const bool t = c.T != Type::kF32;
    const bool wT = a.weight.present && a.weight.type == c.T, bT = a.bias.present && a.bias.type == c.T;
    k.flags = t && wT && (!a.bias.present || bT) ? SELSCAN_CONV_PARAMS_T : 0u;
    k.params_mixed = t && a.bias.present && wT != bT;
    selscan_diag d;
    selscan_conv_step_problem s = Problem<selscan_conv_step_problem>(&d);
    s.dtype = k.dtype;
    s.flags = k.flags;
    s.batch = Or(k.s.batch, 1);
    s.dim = Or(k.s.dim, 1);
    s.seqlen = Or(k.s.L, 1);
    s.width = Or(k.width, 2);
    s.state_len = Or(k.state_len, s.width - 1 < 1 ? 1 : s.width - 1);
    SetCache(&s, k, a.state_index, a.index_values);
    return c.Finish(selscan_check_conv_step_sizes(&s, a.state_index.present), d,
                    {&c.q.batch, &c.q.dim, &c.q.W, &c.q.S, &c.q.ncache}, k, out);
}

// The SSD scan's arguments (forward; backward with a.backward). D's rank says its form: (H) or (H, P)
// (SELSCAN_SSD_D_HEADDIM in k.flags).
#pragma push_macro("SELSCAN__SSD_D_AXIS1") // the table's D axis as a cell (headdim) or the literal 1
#undef SELSCAN__SSD_D_AXIS1
#define SELSCAN__SSD_D_AXIS1(q) ((q)->Dhd ? args_detail::Dim((q)->P) : args_detail::Dim(1))
inline Refusal CheckSsdArgs(const SsdArgs &a, const Forms &forms, Checked *out) {
    using namespace args_detail;
    Checker<SsdArgs> c(a, forms);
    if (!c.Start(a.x, "x")) return c.ref;
    const bool packed = c.Sequences(a.cu_seqlens);
    c.q.Dhd = a.D.present && a.D.ndim == 2;
    SELSCAN__SSD_OPERANDS(SELSCAN_BINDING__ROW, &c)
    if (a.backward) SELSCAN__SSD_GRAD_OPERANDS(SELSCAN_BINDING__ROW, &c)
    c.AddVector("cu_seqlens", &a.cu_seqlens, Dim(c.q.offsets), kI64, true);
    if (!c.Rows()) return c.ref;
    Checked k;
    k.s.batch = c.V(c.q.batch);
    k.s.L = c.V(c.q.L);
    k.s.N = c.V(c.q.N);
    k.s.G = c.V(c.q.G);
    k.nheads = c.V(c.q.H);
    k.headdim = c.V(c.q.P);
    k.s.dim = k.nheads < 0 || k.headdim < 0 ? kAny : k.nheads * k.headdim;
    SetRows(&k.s, a.cu_seqlens);
    k.dtype = DtypeOfType(c.T);
    k.flags = (c.q.Dhd ? SELSCAN_SSD_D_HEADDIM : 0u) | (a.dt_limit ? SELSCAN_SSD_DT_LIMIT : 0u);
    selscan_diag d;
    selscan_ssd_problem p = Problem<selscan_ssd_problem>(&d);
    p.dtype = k.dtype;
    p.flags = k.flags;
    p.dt_min = a.dt_min;
    p.dt_max = a.dt_max;
    p.n_groups = k.s.G == 0 ? -1 : Or(k.s.G, 1); // (as the scan's: a group axis of 0 is no group)
    p.nheads = Or(k.nheads, p.n_groups > 0 ? p.n_groups : 1);
    p.headdim = Or(k.headdim, 1);
    p.batch = Or(k.s.batch, 1);
    p.seqlen = Or(k.s.L, 1);
    p.dstate = Or(k.s.N, 1);
    if (k.s.N == 0 && (k.s.batch < 0 || k.s.L < 0 || k.nheads < 0 || k.headdim < 0)) p.dstate = 1; // (as the scan's)
    static const int32_t kGiven = 0; // seq_idx given: the rule "not with cu_seqlens" reads only that
    if (a.seq_idx.present) p.seq_idx.data = &kGiven;
    if (packed) SetPacked(&p, a.cu_seqlens, a.cu_values, k.s.L);
    return c.Finish(selscan_check_ssd_sizes(&p), d, {&c.q.batch, &c.q.L, &c.q.H, &c.q.P, &c.q.N, &c.q.G}, k, out);
}
#pragma pop_macro("SELSCAN__SSD_D_AXIS1") // the library's again

// The gated RMS norm's arguments (forward; backward with a.backward): y, z, weight (dout).
inline Refusal CheckNormArgs(const NormArgs &a, const Forms &forms, Checked *out) {
    using namespace args_detail;
    Checker<NormArgs> c(a, forms);
    if (!c.Start(a.y, "y")) return c.ref;
    SELSCAN__NORM_OPERANDS(SELSCAN_BINDING__ROW, &c)
    if (a.backward) SELSCAN__NORM_GRAD_OPERANDS(SELSCAN_BINDING__ROW, &c)
    if (!c.Rows()) return c.ref;
    Checked k;
    k.s.batch = c.V(c.q.batch);
    k.s.L = c.V(c.q.L);
    k.s.dim = c.V(c.q.dim);
    k.dtype = DtypeOfType(c.T);
    k.flags = a.before ? SELSCAN_NORM_BEFORE_GATE : 0u;
    selscan_diag d;
    selscan_norm_problem p = Problem<selscan_norm_problem>(&d);
    p.dtype = k.dtype;
    p.flags = k.flags;
    p.batch = Or(k.s.batch, 1);
    p.seqlen = Or(k.s.L, 1);
    p.group_size = a.group_size;
    p.dim = Or(k.s.dim, a.group_size > 0 ? a.group_size : 1); /* not known: one that the group divides */
    p.eps = a.eps;
    return c.Finish(selscan_check_norm_sizes(&p), d, {&c.q.batch, &c.q.L, &c.q.dim}, k, out);
}

#undef SELSCAN_BINDING__ROW
#undef SELSCAN_BINDING__NEED_REQ
#undef SELSCAN_BINDING__NEED_FWD
#undef SELSCAN_BINDING__NEED_OPT
#undef SELSCAN_BINDING__IS_OUT_IN
#undef SELSCAN_BINDING__IS_OUT_OUT

} // namespace selscan_binding

/* ============================================================================================
 * >>bind-cuda: the CUDA shim every selscan binding shares
 * ============================================================================================
 * selscan_cuda.cuh's launchers behind a few wrappers that need neither CUDA nor a framework (the
 * stream is a void *, a cudaStream_t), so a binding's host-compiler TUs (torch's op TUs, TensorFlow's
 * selscan_tf_gpu.cc) call the kernels without CUDA headers, and its nvcc TU holds no framework header.
 *
 * Declarations: this header, as any TU includes it (no CUDA header needed). Definitions, in the
 * binding's single nvcc TU, after selscan_cuda.cuh's implementation (each binding keeps its own
 * flags: SELSCAN_VALIDATION_ONLY or SELSCAN_STATIC, SELSCAN_CUDA_CHANNELS_LAST):
 *     #define SELSCAN_IMPLEMENTATION
 *     #define SELSCAN_CUDA_IMPLEMENTATION
 *     #include "selscan_cuda.cuh"
 *     #define SELSCAN_BINDING_CUDA_IMPLEMENTATION
 *     #include "selscan_binding.h"
 *
 * The workspace strategy (>>bind-cuda-workspace): no binding sizes a CUDA workspace beforehand.
 * selscan_cuda_ext.workspace_alloc is handed through: selscan calls it once, after every check and
 * before any launch, only when the call needs a workspace on this device, with exactly the bytes it
 * needs; the binding allocates from its framework's stream-ordered allocator (torch's caching
 * allocator, TensorFlow's allocate_temp) and returns the pointer, or NULL on failure (the call then
 * returns SELSCAN_ERR_WORKSPACE, diag "workspace", and launches nothing). The memory must stay valid
 * until the call's kernels have run on the stream (a framework tensor alive until the op returns).
 *
 * CONTENTS (grep the >>tag)
 *     >>bind-cuda-call       selscan_binding_cuda_call: stream, workspace callback, packed offsets, error text
 *     >>bind-cuda-api        the wrappers (scan forward / backward / step, conv forward / backward / step)
 *     >>bind-cuda-impl       their definitions (SELSCAN_BINDING_CUDA_IMPLEMENTATION)
 */
#ifdef __cplusplus
extern "C" {
#endif

/* ---- >>bind-cuda-call: what one call runs on and may use, besides its problem ----------------- */
typedef struct selscan_binding_cuda_call {
    /* in: the cudaStream_t the call runs on (the framework's current / compute stream) */
    void *stream;
    /* in: the workspace on demand (selscan_cuda_ext.workspace_alloc; see >>bind-cuda-workspace
       above); NULL: no workspace (a call that needs one returns SELSCAN_ERR_WORKSPACE) */
    void *(*workspace_alloc)(void *ctx, size_t bytes);
    void *workspace_ctx;
    /* in: the device copy of the problem's cu_seqlens (packed sequences), NULL without */
    const int64_t *cu_seqlens_device;
    /* out: on SELSCAN_ERR_CUDA the failing CUDA error's text (a static string), else "" */
    const char *cuda_error_text;
} selscan_binding_cuda_call;

/* ---- >>bind-cuda-api ---------------------------------------------------------------------------
   Every wrapper runs its launcher on call->stream and sets call->cuda_error_text; none synchronizes.
   Tensor pointers are device memory, selscan's host-side rules unchanged (cu_seqlens: host memory,
   its device copy in call->cu_seqlens_device; a step's state_index: device memory). */

/* selscan_checkpoint_size_cuda: the bytes of the CUDA forward's checkpoint (the state entering
   every 64 steps, f32), which the CUDA backward reads instead of recomputing it. */
selscan_status selscan_binding_cuda_checkpoint_size(const selscan_problem *p, size_t *bytes);
/* selscan_forward_cuda_ex; checkpoint (NULL: none) written, checkpoint_bytes its size. */
selscan_status selscan_binding_cuda_forward(const selscan_problem *p, float *checkpoint, size_t checkpoint_bytes,
                                            selscan_binding_cuda_call *call);
/* selscan_backward_cuda_ex; checkpoint (NULL: none, the states are recomputed) read. */
selscan_status selscan_binding_cuda_backward(const selscan_problem *p, const selscan_grads *g, const float *checkpoint,
                                             size_t checkpoint_bytes, selscan_binding_cuda_call *call);
/* selscan_step_cuda_ex (no workspace, no packed sequences). */
selscan_status selscan_binding_cuda_step(const selscan_step_problem *s, selscan_binding_cuda_call *call);
/* selscan_conv_forward_cuda (no workspace). */
selscan_status selscan_binding_cuda_conv_forward(const selscan_conv_problem *p, selscan_binding_cuda_call *call);
/* selscan_conv_backward_cuda; its workspace (dweight / dbias asked for) through call->workspace_alloc. */
selscan_status selscan_binding_cuda_conv_backward(const selscan_conv_problem *p, const selscan_conv_grads *g,
                                                  selscan_binding_cuda_call *call);
/* selscan_conv_step_cuda (no workspace). */
selscan_status selscan_binding_cuda_conv_step(const selscan_conv_step_problem *s, selscan_binding_cuda_call *call);
/* selscan_ssd_forward_cuda; the chunked forward's workspace (its state rings: a 2-byte problem, selscan_cuda.cuh
   >>ssd-chunk) through call->workspace_alloc. */
selscan_status selscan_binding_cuda_ssd_forward(const selscan_ssd_problem *p, selscan_binding_cuda_call *call);
/* selscan_ssd_backward_cuda; its workspace (the partials) through call->workspace_alloc. */
selscan_status selscan_binding_cuda_ssd_backward(const selscan_ssd_problem *p, const selscan_ssd_grads *g,
                                                 selscan_binding_cuda_call *call);
/* selscan_norm_forward_cuda (no workspace). */
selscan_status selscan_binding_cuda_norm_forward(const selscan_norm_problem *p, selscan_binding_cuda_call *call);
/* selscan_norm_backward_cuda; its workspace (dweight's partials) through call->workspace_alloc. */
selscan_status selscan_binding_cuda_norm_backward(const selscan_norm_problem *p, const selscan_norm_grads *g,
                                                  selscan_binding_cuda_call *call);
/* 1 where the fast forward kernels of the package's CUDA TU take p (a valid problem; its sizes,
   flags and strides, pointers only tested for NULL; no device asked): selscan_cuda.cuh's plan,
   asked instead of restated (a binding copies L-strided operands to unit L strides where the
   copies would send the problem to the fast kernels, that is where p's unit-L form is taken and p
   is not); 0 for an invalid problem. */
int selscan_binding_cuda_fast_forward(const selscan_problem *p);
/* 1 where the package's CUDA TU compiled the fast kernels for any L stride too
   (SELSCAN_CUDA_CHANNELS_LAST), 0 where an operand with a non-unit L stride runs the general ones. */
int selscan_binding_cuda_channels_last(void);

#ifdef __cplusplus
}

namespace selscan_binding {
// >>unit-l: whether a CUDA scan forward of args (>>args-order, checked: k) should copy u, delta, z,
// B and C to unit L strides: one of them (or y, whose strides are y_like's: u's, the backward's
// dy's) L-strided, and selscan's plan (selscan_binding_cuda_fast_forward) takes the problem on its
// fast kernels with unit L strides but not as it is. Calls the CUDA shim: a binding's CUDA build only.
inline bool ScanWantsUnitL(const Arg *a, const Checked &k, const Arg *y_like = nullptr) {
    auto l_strided = [](const Arg &t) { return t.present && t.ndim > 0 && t.strides && t.strides[t.ndim - 1] != 1; };
    const Arg &u = a[kScanU], &delta = a[kScanDelta], &B = a[kScanB], &C = a[kScanC], &z = a[kScanZ];
    const Arg &yl = y_like ? *y_like : u;
    if (a[kScanCuSeqlens].present || k.s.Empty() ||
        !(l_strided(u) || l_strided(delta) || l_strided(z) || l_strided(B) || l_strided(C) || l_strided(yl)))
        return false;
    const ScanArgs s = ScanArgsOf(a, false, nullptr);
    static const float kSome[1] = {0.f}; // the plan tests pointers for NULL only
    auto operand = [&](const Arg &t, bool unit, auto *st, bool bc) {
        using ST = std::remove_pointer_t<decltype(st)>;
        if (!t.present) return Absent<ST>();
        ST o = Operand<ST>(const_cast<float *>(kSome), t.ndim, t.sizes, t.strides);
        if (bc && t.ndim == 3) { // (batch, N, L): one group
            o.stride[3] = o.stride[2];
            o.stride[2] = o.stride[1];
            o.stride[1] = std::max<int64_t>(1, Numel(t.ndim, t.sizes));
        }
        if (unit) std::memset(o.stride, 0, sizeof o.stride); // contiguous
        return o;
    };
    auto fast = [&](bool unit) {
        selscan_problem p = MakeProblem(k.s, k.dtype, false);
        p.u = operand(s.u, unit, &p.u, false);
        p.delta = operand(s.delta, unit, &p.delta, false);
        p.A = operand(s.A, unit, &p.A, false);
        p.B = operand(s.B, unit, &p.B, true);
        p.C = operand(s.C, unit, &p.C, true);
        p.D = operand(s.D, unit, &p.D, false);
        p.z = operand(s.z, unit, &p.z, false);
        p.delta_bias = operand(s.delta_bias, unit, &p.delta_bias, false);
        p.h0 = operand(s.h0, unit, &p.h0, false);
        p.y = operand(yl, unit, &p.y, false);
        return selscan_binding_cuda_fast_forward(&p) != 0;
    };
    return fast(true) && !fast(false);
}
} // namespace selscan_binding
#endif

#endif // SELSCAN_BINDING_H_

/* ---- >>bind-cuda-impl ------------------------------------------------------------------------- */
#if defined(SELSCAN_BINDING_CUDA_IMPLEMENTATION) && !defined(SELSCAN_BINDING_CUDA_IMPLEMENTED)
#define SELSCAN_BINDING_CUDA_IMPLEMENTED
#if !defined(__CUDACC__) || !defined(SELSCAN_CUDA_CUH)
#error "selscan_binding.h: SELSCAN_BINDING_CUDA_IMPLEMENTATION belongs in an nvcc TU, after selscan_cuda.cuh"
#endif

namespace selscan_binding_cuda_detail {

/* One call's selscan_cuda_ext (from the call's inputs) and the CUDA error it may report. */
struct Ext {
    cudaError_t err = cudaSuccess;
    selscan_cuda_ext x = {};
    cudaStream_t stream = nullptr;
    selscan_binding_cuda_call *call;
    explicit Ext(selscan_binding_cuda_call *c) : call(c) {
        if (c) {
            x.workspace_alloc = c->workspace_alloc;
            x.workspace_ctx = c->workspace_ctx;
            x.cu_seqlens_device = c->cu_seqlens_device;
            stream = static_cast<cudaStream_t>(c->stream);
        }
        x.cuda_error = &err;
    }
    selscan_status Done(selscan_status st) const {
        if (call) call->cuda_error_text = st == SELSCAN_ERR_CUDA ? cudaGetErrorString(err) : "";
        return st;
    }
};

} // namespace selscan_binding_cuda_detail

extern "C" {

selscan_status selscan_binding_cuda_checkpoint_size(const selscan_problem *p, size_t *bytes) {
    return selscan_checkpoint_size_cuda(p, bytes);
}

selscan_status selscan_binding_cuda_forward(const selscan_problem *p, float *checkpoint, size_t checkpoint_bytes,
                                            selscan_binding_cuda_call *call) {
    selscan_binding_cuda_detail::Ext e(call);
    e.x.checkpoint_out = checkpoint;
    e.x.checkpoint_bytes = checkpoint ? checkpoint_bytes : 0;
    return e.Done(selscan_forward_cuda_ex(p, &e.x, NULL, 0, e.stream));
}

selscan_status selscan_binding_cuda_backward(const selscan_problem *p, const selscan_grads *g, const float *checkpoint,
                                             size_t checkpoint_bytes, selscan_binding_cuda_call *call) {
    selscan_binding_cuda_detail::Ext e(call);
    e.x.checkpoint_in = checkpoint;
    e.x.checkpoint_bytes = checkpoint ? checkpoint_bytes : 0;
    return e.Done(selscan_backward_cuda_ex(p, g, &e.x, NULL, 0, e.stream));
}

selscan_status selscan_binding_cuda_step(const selscan_step_problem *s, selscan_binding_cuda_call *call) {
    selscan_binding_cuda_detail::Ext e(call);
    return e.Done(selscan_step_cuda_ex(s, &e.x, e.stream));
}

selscan_status selscan_binding_cuda_conv_forward(const selscan_conv_problem *p, selscan_binding_cuda_call *call) {
    selscan_binding_cuda_detail::Ext e(call);
    return e.Done(selscan_conv_forward_cuda(p, &e.x, e.stream));
}

selscan_status selscan_binding_cuda_conv_backward(const selscan_conv_problem *p, const selscan_conv_grads *g,
                                                  selscan_binding_cuda_call *call) {
    selscan_binding_cuda_detail::Ext e(call);
    return e.Done(selscan_conv_backward_cuda(p, g, &e.x, NULL, 0, e.stream));
}

selscan_status selscan_binding_cuda_conv_step(const selscan_conv_step_problem *s, selscan_binding_cuda_call *call) {
    selscan_binding_cuda_detail::Ext e(call);
    return e.Done(selscan_conv_step_cuda(s, &e.x, e.stream));
}

selscan_status selscan_binding_cuda_ssd_forward(const selscan_ssd_problem *p, selscan_binding_cuda_call *call) {
    selscan_binding_cuda_detail::Ext e(call);
    return e.Done(selscan_ssd_forward_cuda(p, &e.x, e.stream));
}

selscan_status selscan_binding_cuda_ssd_backward(const selscan_ssd_problem *p, const selscan_ssd_grads *g,
                                                 selscan_binding_cuda_call *call) {
    selscan_binding_cuda_detail::Ext e(call);
    return e.Done(selscan_ssd_backward_cuda(p, g, &e.x, NULL, 0, e.stream));
}

selscan_status selscan_binding_cuda_norm_forward(const selscan_norm_problem *p, selscan_binding_cuda_call *call) {
    selscan_binding_cuda_detail::Ext e(call);
    return e.Done(selscan_norm_forward_cuda(p, &e.x, e.stream));
}

selscan_status selscan_binding_cuda_norm_backward(const selscan_norm_problem *p, const selscan_norm_grads *g,
                                                  selscan_binding_cuda_call *call) {
    selscan_binding_cuda_detail::Ext e(call);
    return e.Done(selscan_norm_backward_cuda(p, g, &e.x, NULL, 0, e.stream));
}

int selscan_binding_cuda_channels_last(void) { return SELSCAN_CUDA_CHANNELS_LAST ? 1 : 0; }

int selscan_binding_cuda_fast_forward(const selscan_problem *p) {
    return selscan_cuda_detail::fast_forward_takes(p) ? 1 : 0;
}

} /* extern "C" */

#endif /* SELSCAN_BINDING_CUDA_IMPLEMENTATION */
