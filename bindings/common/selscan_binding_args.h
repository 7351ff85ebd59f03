// selscan_binding_args.h - the argument checks every selscan binding shares (issue 39: one owner for
// every rule). Included by selscan_binding.h.
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
// The types below need selscan.h alone; the checks need its implementation in the translation unit
// (they read its operand tables and call selscan_check_*sizes): a binding's TU without it (TensorFlow's
// GPU TU) calls the checks of the TU that has it.
#ifndef SELSCAN_BINDING_ARGS_H_
#define SELSCAN_BINDING_ARGS_H_

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <new>
#include <type_traits>
#include <string>
#include <vector>

#include "selscan.h"

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
    std::string diag = std::string(" (") + names.noun + " '" + names.Of(r.operand ? r.operand : "?") +
                       "': " + names.Rule(r.rule.c_str()) + (r.detail.empty() ? "" : ": " + r.detail) + ")";
    Error e = ErrorOf(r.status, where, diag);
    if (r.code == SELSCAN_RULE_DEVICE || r.code == SELSCAN_RULE_NOT_HOST) e.kind = ErrorKind::kValue;
    return e;
}

} // namespace selscan_binding

// ---- >>args-check: the checks (in a TU with selscan.h's implementation) -------------------------
#if defined(SELSCAN__SCAN_OPERANDS) && !defined(SELSCAN_BINDING_ARGS_IMPL_)
#define SELSCAN_BINDING_ARGS_IMPL_
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
    bool Sequences(const Arg &cu_seqlens) {
        if (!cu_seqlens.present) q.rows.alias = &q.batch;
        else if (cu_seqlens.ndim == 1) q.rows.v = SeqsOf(cu_seqlens);
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
            r.user_axis[0] = 0;
            r.user_axis[1] = -1;
            for (int i = 2; i < full; i++) r.user_axis[i] = i - 1;
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
            Shape g;
            g.rank = r.full.rank - 1;
            g.d[0] = r.full.d[0];
            for (int i = 2; i < r.full.rank; i++) g.d[i - 1] = r.full.d[i];
            alts.push_back(FormText(g, nullptr, g.rank, nullptr, false));
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

#undef SELSCAN_BINDING__ROW
#undef SELSCAN_BINDING__NEED_REQ
#undef SELSCAN_BINDING__NEED_FWD
#undef SELSCAN_BINDING__NEED_OPT
#undef SELSCAN_BINDING__IS_OUT_IN
#undef SELSCAN_BINDING__IS_OUT_OUT

} // namespace selscan_binding
#endif // the checks

#endif // SELSCAN_BINDING_ARGS_H_
