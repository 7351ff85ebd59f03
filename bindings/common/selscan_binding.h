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
//   >>bind-args       the argument checks of a framework call (selscan_binding_args.h): ranks, sizes,
//                     dtypes, devices from selscan's operand tables; the size and host-value rules
//                     (also where selscan is not called, an empty problem) asked of the library
//   >>bind-errors     status -> an error kind and the message text, naming the user's argument
//                     through selscan's diag and a per-op name map
// Nothing here throws or allocates framework memory: errors come back as an Error the binding
// turns into its own exception or status.
//
// Include selscan.h (with or without its implementation) before or through this header.
#ifndef SELSCAN_BINDING_H_
#define SELSCAN_BINDING_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
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
// x is selscan's u, dt its delta, ...); a rule "overlaps <operand>" is renamed the same way.
struct NameMap {
    const char *selscan;
    const char *user;
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
    std::string Rule(const char *rule) const { // "overlaps u" -> "overlaps x"
        static const char kOv[] = "overlaps ";
        if (std::strncmp(rule, kOv, sizeof kOv - 1) == 0) return kOv + Of(rule + sizeof kOv - 1);
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
    return std::string(" (") + names.noun + " '" + names.Of(d.operand) +
           "': " + (d.rule ? names.Rule(d.rule) : "invalid") + ")";
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

#include "selscan_binding_args.h" // >>bind-args: the argument checks

#endif // SELSCAN_BINDING_H_
