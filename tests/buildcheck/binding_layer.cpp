// binding_layer.cpp: bindings/common/selscan_binding.h, the layer the framework bindings share,
// compiled alone (C++17, no framework) and run: operand strides and their refusals, the parts
// runner's first error whatever the pool's order, the checkpoint policy the library answers, the
// argument checks (>>bind-args), and the error kinds and messages with a per-op name map.
// Exits 1 on the first failure.
#define SELSCAN_IMPLEMENTATION
#include "../../selscan.h"
#include "../../bindings/common/selscan_binding.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace bind = selscan_binding;

// The CUDA shim's plan query, stood in for (this check links no CUDA): the fast kernels take a problem
// whose u and y have unit L strides (g_fast_as_is: any problem); the last problem asked is kept.
static bool g_fast_as_is = false;
static selscan_problem g_asked;
extern "C" int selscan_binding_cuda_fast_forward(const selscan_problem *p) {
    g_asked = *p;
    return g_fast_as_is || (p->u.stride[2] <= 1 && p->y.stride[2] <= 1);
}

static int failures = 0;
#define EXPECT(cond)                                                    \
    do {                                                                \
        if (!(cond)) {                                                  \
            std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                 \
        }                                                               \
    } while (0)

int main() {
    // operands: a size-1 dim with stride 0 gets a non-zero stride; a full broadcast is found
    float buf[64] = {0};
    {
        const int64_t sz[3] = {2, 1, 4}, st[3] = {4, 0, 1};
        bool all0 = true;
        const selscan_tensor t = bind::Operand<selscan_tensor>(buf, 3, sz, st, &all0);
        EXPECT(!all0 && t.stride[0] == 4 && t.stride[1] == 8 && t.stride[2] == 1 && t.data == buf);
    }
    {
        const int64_t sz[2] = {3, 5}, st[2] = {0, 0}, one[2] = {1, 1};
        EXPECT(bind::FullBroadcast(2, sz, st));
        EXPECT(!bind::FullBroadcast(2, one, st)); // one element: nothing to copy
        selscan_out_tensor o = bind::Absent<selscan_out_tensor>();
        EXPECT(!bind::OutOperand<selscan_out_tensor>(buf, 2, sz, st, &o) && o.data == nullptr); // refused, untouched
        EXPECT(bind::OutOperand<selscan_out_tensor>(buf, 2, one, st, &o) && o.data == buf);
        const int64_t ex[2] = {3, 0}, exs[2] = {5, 1};
        EXPECT(bind::SelfOverlapping(2, sz, st));
        EXPECT(!bind::SelfOverlapping(2, ex, st)); // empty
        EXPECT(!bind::SelfOverlapping(2, sz, exs));
    }
    // ElementsMeet (an input read through a copy against the in-place output) against the bytes
    // each covers, marked: random views of one buffer (interleaved, broadcast, 1-byte / 2-byte /
    // 4-byte elements, unsorted strides)
    {
        unsigned r = 12345u;
        auto rnd = [&](int n) {
            r = r * 1103515245u + 12345u;
            return static_cast<int64_t>((r >> 8) % n);
        };
        unsigned char mem[4096];
        int mismatches = 0;
        for (int trial = 0; trial < 20000; trial++) {
            int64_t es[2], nd[2], sz[2][3], st[2][3], off[2];
            std::vector<int> cover(sizeof mem, 0);
            for (int t = 0; t < 2; t++) {
                es[t] = int64_t(1) << rnd(3);
                nd[t] = 1 + rnd(3);
                for (int i = 0; i < nd[t]; i++) {
                    sz[t][i] = rnd(4) + (rnd(8) == 0 ? 0 : 1);
                    st[t][i] = rnd(5) == 0 ? 0 : 1 + rnd(12);
                }
                off[t] = rnd(64) * es[t];
            }
            for (int t = 0; t < 2; t++) {
                for (int64_t i0 = 0; i0 < sz[t][0]; i0++)
                    for (int64_t i1 = 0; i1 < (nd[t] > 1 ? sz[t][1] : 1); i1++)
                        for (int64_t i2 = 0; i2 < (nd[t] > 2 ? sz[t][2] : 1); i2++) {
                            const int64_t e =
                                i0 * st[t][0] + (nd[t] > 1 ? i1 * st[t][1] : 0) + (nd[t] > 2 ? i2 * st[t][2] : 0);
                            for (int64_t k = 0; k < es[t]; k++) cover[off[t] + e * es[t] + k] |= 1 << t;
                        }
            }
            bool want = false;
            for (int v : cover) want = want || v == 3;
            const bool got =
                bind::ElementsMeet(mem + off[0], es[0], nd[0], sz[0], st[0], mem + off[1], es[1], nd[1], sz[1], st[1]);
            mismatches += got != want;
        }
        EXPECT(mismatches == 0);
        const int64_t one[1] = {1}, z[1] = {0}, ssz[3] = {2, 3, 4}, sst[3] = {15, 5, 1}; // a state with a gap each row
        EXPECT(bind::ElementsMeet(buf + 7, 4, 1, one, z, buf, 4, 3, ssz, sst));          // its element 7
        EXPECT(!bind::ElementsMeet(buf + 4, 4, 1, one, z, buf, 4, 3, ssz, sst));         // the gap after row 0
        EXPECT(!bind::ElementsMeet(buf + 30, 4, 1, one, z, buf, 4, 3, ssz, sst));        // past its end
    }
    // the problem header and the empty-problem rule
    bind::Sizes s;
    s.batch = 1;
    s.dim = 2;
    s.L = 70;
    s.N = 4;
    s.G = 1;
    s.rows = 1;
    s.fixed_C = true;
    selscan_problem p = bind::MakeProblem(s, SELSCAN_F32, true);
    EXPECT(p.batch == 1 && p.dim == 2 && p.seqlen == 70 && p.dstate == 4 && p.n_groups == 1);
    EXPECT(p.flags == (SELSCAN_DELTA_SOFTPLUS | SELSCAN_FIXED_C) && p.cu_seqlens == nullptr);
    EXPECT(!s.Empty() && s.StatesOk());
    bind::Sizes e = s;
    e.L = 0;
    e.N = 0;
    EXPECT(e.Empty() && e.StatesOk());
    e.L = 70;
    EXPECT(!e.StatesOk());
    // the steps' (rows: n_cache): no token, or a cache of no rows
    bind::Sizes t = s;
    EXPECT(!t.StepEmpty());
    t.rows = 0;
    EXPECT(t.StepEmpty() && !t.Empty());
    t.rows = 1;
    t.dim = 0;
    EXPECT(t.StepEmpty() && t.Empty() && bind::Sizes::Empty(1, 0, 70));
    // the checkpoint policy on a valid problem (dense inputs, fixed C): asked of the library
    std::vector<float> u(140, 0.5f), dl(140, 0.1f), A(2 * 65, -1.0f), B(2 * 65 * 70, 0.2f), C(2 * 65, 0.3f), y(140);
    p.flags = SELSCAN_FIXED_C;
    p.u.data = u.data();
    p.delta.data = dl.data();
    p.A.data = A.data();
    p.B.data = B.data();
    p.C.data = C.data();
    p.y.data = y.data();
    size_t bytes = 1;
    EXPECT(bind::CpuCheckpointBytes(&p, false, &bytes) == SELSCAN_OK && bytes == 0);
    EXPECT(bind::CpuCheckpointBytes(&p, true, &bytes) == SELSCAN_OK && bytes > 0);
    const size_t n4 = bytes;
    EXPECT(bind::CpuCheckpointToRead(&p, static_cast<int64_t>(n4 / 4), &bytes) == SELSCAN_OK && bytes == n4);
    EXPECT(bind::CpuCheckpointToRead(&p, static_cast<int64_t>(n4 / 4) + 1, &bytes) == SELSCAN_OK && bytes == 0);
    EXPECT(bind::CpuCheckpointToRead(&p, 0, &bytes) == SELSCAN_OK && bytes == 0);
    p.dstate = 65; // the CPU backward reads none: none written
    EXPECT(selscan_checkpoint_used(&p) == 0);
    EXPECT(bind::CpuCheckpointBytes(&p, true, &bytes) == SELSCAN_OK && bytes == 0);
    p.dstate = 4;
    // the parts runner: the lowest failing part's status and diag, whatever order the pool runs
    auto reverse_pool = [](int64_t n, const auto &body) {
        for (int64_t i = n - 1; i >= 0; i--) body(i);
    };
    const bind::Result r = bind::RunParts(p, 5, reverse_pool, [](selscan_problem *q, int64_t i) {
        if (i == 2) {
            q->diag->operand = "u";
            q->diag->rule = "overlaps y";
            return SELSCAN_ERR_ALIAS;
        }
        if (i == 4) {
            q->diag->operand = "B";
            q->diag->rule = "bad";
            return SELSCAN_ERR_SHAPE;
        }
        return SELSCAN_OK;
    });
    EXPECT(r.status == SELSCAN_ERR_ALIAS && std::strcmp(r.diag.operand, "u") == 0);
    EXPECT(p.diag == nullptr); // p itself untouched
    int ran = 0;
    EXPECT(bind::RunParts(p, 3, reverse_pool,
                          [&](selscan_problem *, int64_t) {
                              ran++;
                              return SELSCAN_OK;
                          })
               .ok() &&
           ran == 3);
    // a real part: the forward runs through the runner
    size_t ws_bytes = 0;
    EXPECT(bind::Call(p, [&](const selscan_problem *q) {
               return selscan_workspace_size_parts(q, nullptr, 2, &ws_bytes);
           }).ok());
    std::vector<unsigned char> ws(ws_bytes);
    EXPECT(bind::RunParts(p, 2, reverse_pool, [&](const selscan_problem *q, int64_t i) {
               return selscan_forward_cpu_part(q, i, 2, ws.data(), ws.size());
           }).ok());
    p.A.data = nullptr; // a validation error comes back with selscan's diag
    const bind::Result bad =
        bind::Call(p, [&](const selscan_problem *q) { return selscan_workspace_size_parts(q, nullptr, 2, &ws_bytes); });
    EXPECT(!bad.ok() && bad.diag.operand && std::strcmp(bad.diag.operand, "A") == 0);
    // errors: kind and message, in the op's names
    static const bind::NameMap kStep[] = {{"u", "x"}, {"y", "out"}};
    const bind::Error err = bind::ErrorOf(r, "step (CPU)", bind::NamesOf(kStep));
    EXPECT(err.kind == bind::ErrorKind::kValue);
    EXPECT(err.message.find("selscan: step (CPU): ") == 0);
    EXPECT(err.message.find("[SELSCAN_ERR_ALIAS] (argument 'x': overlaps out)") != std::string::npos);
    EXPECT(bind::ErrorOf(SELSCAN_ERR_CUDA, "fwd", "", "batch=1", "oom").message.find(" (batch=1): oom") !=
           std::string::npos);
    EXPECT(bind::KindOf(SELSCAN_ERR_DTYPE) == bind::ErrorKind::kType);
    EXPECT(bind::KindOf(SELSCAN_ERR_UNSUPPORTED) == bind::ErrorKind::kNotImplemented);
    EXPECT(bind::KindOf(SELSCAN_ERR_CUDA) == bind::ErrorKind::kDevice);
    EXPECT(bind::ErrorOf(SELSCAN_OK, "fwd", "").ok());
    // >>bind-args: the argument checks (selscan's operand tables and size rules)
    {
        auto arg = [](std::vector<int64_t> &sz, bind::Type t) {
            bind::Arg a;
            a.present = true;
            a.ndim = static_cast<int64_t>(sz.size());
            a.sizes = sz.data();
            a.type = t;
            return a;
        };
        using T = bind::Type;
        std::vector<int64_t> u{2, 8, 12}, A{8, 4}, B{2, 2, 4, 12}, B3{2, 4, 12}, Bfix{8, 4}, ut{2, 12, 8},
            Bg{2, 3, 4, 12}, h0{2, 8, 4}, cu{3}, u1{1, 8, 12}, B1{1, 4, 12}, A0{8, 0}, B0{2, 2, 0, 12}, e{0, 8, 12},
            Be{0, 2, 0, 12};
        bind::ScanArgs good;
        good.u = good.delta = arg(u, T::kF16);
        good.A = arg(A, T::kF32);
        good.B = good.C = arg(B, T::kF16);
        bind::Forms f;
        f.fixed_bc = f.groupless_bc = true;
        auto scan = [&](const bind::ScanArgs &a, bind::Checked *k = nullptr) {
            bind::Checked kk;
            return bind::CheckScanArgs(a, f, k ? k : &kk);
        };
        bind::Checked k;
        EXPECT(scan(good, &k).ok() && k.s.batch == 2 && k.s.dim == 8 && k.s.L == 12 && k.s.N == 4 && k.s.G == 2 &&
               k.dtype == SELSCAN_F16 && k.flags == 0);
        bind::ScanArgs a = good;
        a.B = arg(B3, T::kF16);
        a.C = arg(Bfix, T::kF32);
        EXPECT(scan(a, &k).ok() && k.s.G == 1 && k.flags == SELSCAN_FIXED_C); // one group; constant C
        a = good;
        a.u = arg(ut, T::kF16); // (batch, L, dim): u named (the others have dim 8), with the swap
        bind::Refusal r = scan(a);
        EXPECT(r.code == SELSCAN_RULE_SHAPE && std::string(r.operand) == "u" &&
               r.detail.find("[2, 8, 12], got [2, 12, 8]") != std::string::npos &&
               r.detail.find("transpose(1, 2)") != std::string::npos);
        a = good;
        a.B = a.C = arg(Bg, T::kF16); // 3 groups of 8 channels: the library's rule, its operand and text
        r = scan(a);
        EXPECT(r.status == SELSCAN_ERR_SHAPE && r.code == SELSCAN_RULE_NOT_DIVIDING &&
               std::string(r.operand) == "n_groups" && r.rule == selscan_rule_string(SELSCAN_RULE_NOT_DIVIDING));
        a = good;
        a.D = arg(A, T::kF32); // D (dim,) given (dim, N)
        r = scan(a);
        EXPECT(r.code == SELSCAN_RULE_SHAPE && std::string(r.operand) == "D" &&
               r.detail.find("want (dim,) = [8]") == 0);
        a = good;
        a.delta = arg(u, T::kF32); // u's dtype wanted
        r = scan(a);
        EXPECT(r.status == SELSCAN_ERR_DTYPE && r.code == SELSCAN_RULE_DTYPE && std::string(r.operand) == "delta");
        a = good;
        a.A.device = 7; // another device
        r = scan(a);
        EXPECT(r.code == SELSCAN_RULE_DEVICE && std::string(r.operand) == "A" &&
               bind::ErrorOf(r, "forward").kind == bind::ErrorKind::kValue);
        a = good;
        a.A = arg(A0, T::kF32);
        a.B = a.C = arg(B0, T::kF16); // N = 0 on a non-empty problem: the library's dstate rule
        r = scan(a);
        EXPECT(r.code == SELSCAN_RULE_NOT_POSITIVE && std::string(r.operand) == "dstate");
        a.u = a.delta = arg(e, T::kF16);
        a.B = a.C = arg(Be, T::kF16);
        EXPECT(scan(a, &k).ok() && k.s.Empty()); // ... taken where the problem is empty
        a = good;
        a.u = a.delta = arg(u1, T::kF16);
        a.B = a.C = arg(B1, T::kF16);
        a.cu_seqlens = arg(cu, T::kI64);
        a.h0 = arg(h0, T::kF32); // 2 sequences: h0 has n_seqs rows
        int64_t offs[3] = {0, 5, 12}, bad[3] = {0, 13, 12};
        a.cu_values = offs;
        EXPECT(scan(a, &k).ok() && k.s.rows == 2 && k.s.n_seqs == 2);
        std::vector<int64_t> cu1{1};
        bind::ScanArgs a1 = a;
        a1.cu_seqlens = arg(cu1, T::kI64); // one offset: no sequence (values known or not)
        a1.h0 = bind::Arg();
        r = scan(a1);
        EXPECT(r.code == SELSCAN_RULE_NO_SEQUENCE && std::string(r.operand) == "n_seqs");
        a1.cu_values = offs;
        EXPECT(scan(a1).code == SELSCAN_RULE_NO_SEQUENCE);
        std::vector<int64_t> h0_1{1, 8, 4};
        a1.h0 = arg(h0_1, T::kF32); // an h0 beside it: still "no sequence", not h0's row count
        r = scan(a1);
        EXPECT(r.code == SELSCAN_RULE_NO_SEQUENCE && std::string(r.operand) == "n_seqs");
        a1.h0 = bind::Arg();
        a.cu_values = bad; // the offsets' values: the library's rule
        r = scan(a);
        EXPECT(r.code == SELSCAN_RULE_NOT_INCREASING && std::string(r.operand) == "cu_seqlens");
        a.u = a.delta = arg(u, T::kF16);
        a.cu_values = offs;
        r = scan(a); // batch 2 with cu_seqlens: h0's rows (n_seqs) first, then the library's batch rule
        EXPECT(r.code == SELSCAN_RULE_SHAPE || r.code == SELSCAN_RULE_BATCH_NOT_1);
        a = good;
        a.backward = true; // dy required
        r = scan(a);
        EXPECT(r.status == SELSCAN_ERR_NULL && r.code == SELSCAN_RULE_MISSING && std::string(r.operand) == "dy");
        // unknown sizes (a shape function): taken as they may be; a layout's axis order
        std::vector<int64_t> uq{-1, 12, 8}, Bq{2, 12, 2, -1};
        const int seq[] = {0, 2, 1}, bc[] = {0, 2, 3, 1};
        bind::Forms tf;
        tf.seq_perm = seq;
        tf.bc_perm = bc;
        a = good;
        a.u = a.delta = arg(uq, T::kF32);
        a.B = a.C = arg(Bq, T::kF32);
        EXPECT(bind::CheckScanArgs(a, tf, &k).ok() && k.s.batch == 2 && k.s.dim == 8 && k.s.L == 12 && k.s.N == 4);
        // the step: the state's rows and the indices' values (the library's rules, whatever the sizes)
        std::vector<int64_t> st{4, 8, 4}, x{2, 8}, Bs{2, 4}, idx{2}, x0{2, 0}, st0{4, 0, 4};
        bind::StepArgs s;
        s.state = arg(st, T::kF32);
        s.u = s.delta = arg(x, T::kBF16);
        s.A = arg(A, T::kF32);
        s.B = s.C = arg(Bs, T::kBF16);
        bind::Forms fs;
        fs.groupless_bc = true;
        r = bind::CheckStepArgs(s, fs, &k);
        EXPECT(r.code == SELSCAN_RULE_NOT_BATCH && std::string(r.operand) == "n_cache"); // 4 rows, batch 2, no index
        s.state_index = arg(idx, T::kI32);
        int32_t rows[2] = {3, -1}, twice[2] = {1, 1};
        s.index_values = rows;
        EXPECT(bind::CheckStepArgs(s, fs, &k).ok() && k.n_cache == 4 && k.s.G == 1 && k.s.rows == 4 && !k.Empty());
        { // a cache of no rows, every batch row padding: an empty call (>>bind-empty), not one refused
            std::vector<int64_t> stn{0, 8, 4};
            int32_t pad[2] = {-1, -1};
            bind::StepArgs sn = s;
            sn.state = arg(stn, T::kF32);
            sn.index_values = pad;
            EXPECT(bind::CheckStepArgs(sn, fs, &k).ok() && k.n_cache == 0 && k.Empty() && !k.s.Empty());
            sn.index_values = rows; // a row index into no rows: refused
            EXPECT(bind::CheckStepArgs(sn, fs, &k).code == SELSCAN_RULE_INDEX_RANGE);
        }
        s.state = arg(st0, T::kBF16);
        s.u = s.delta = arg(x0, T::kBF16);
        std::vector<int64_t> A00{0, 4};
        s.A = arg(A00, T::kF32);
        s.index_values = twice; // dim 0: not called, the rows still refused
        r = bind::CheckStepArgs(s, fs, &k);
        EXPECT(r.status == SELSCAN_ERR_ALIAS && r.code == SELSCAN_RULE_ROW_TWICE);
        // the conv: the width's rule first (NOT_IMPLEMENTED past 4), the update's token x
        std::vector<int64_t> cx{2, 8, 12}, w5{8, 5}, w4{8, 4}, cst{2, 8, 3}, cxt{2, 8};
        bind::ConvArgs c;
        c.x = arg(cx, T::kF32);
        c.weight = arg(w5, T::kF32);
        r = bind::CheckConvArgs(c, bind::Forms(), &k);
        EXPECT(r.code == SELSCAN_RULE_WIDTH && bind::ErrorOf(r, "conv").kind == bind::ErrorKind::kNotImplemented);
        bind::ConvStepArgs cs;
        cs.state = arg(cst, T::kBF16);
        cs.x = arg(cxt, T::kBF16);
        cs.weight = arg(w4, T::kBF16);
        EXPECT(bind::CheckConvStepArgs(cs, bind::Forms(), &k).ok() && k.s.L == 1 && k.width == 4 &&
               k.flags == SELSCAN_CONV_PARAMS_T && k.n_cache == 2 && k.s.rows == 2 && !k.Empty());
        std::vector<int64_t> cx0{2, 8, 0}; // seqlen 0: no token
        cs.x = arg(cx0, T::kBF16);
        EXPECT(bind::CheckConvStepArgs(cs, bind::Forms(), &k).ok() && k.s.L == 0 && k.Empty());
        EXPECT(bind::CheckScanArgs(a, tf, &k).ok() && !k.Empty()); // the scan's: Sizes::Empty alone
        // the gated norm: sizes from y, group_size / eps by the library's rules, z's dtype, an unknown dim
        std::vector<int64_t> ny{2, 5, 24}, nz{2, 5, 12}, nw{24}, nq{2, -1, -1};
        bind::NormArgs na;
        na.y = na.z = arg(ny, T::kBF16);
        na.weight = arg(nw, T::kF32);
        na.group_size = 8;
        na.eps = 1e-5f;
        na.before = true;
        EXPECT(bind::CheckNormArgs(na, bind::Forms(), &k).ok() && k.s.batch == 2 && k.s.L == 5 && k.s.dim == 24 &&
               k.dtype == SELSCAN_BF16 && k.flags == SELSCAN_NORM_BEFORE_GATE);
        na.group_size = 7;
        EXPECT(bind::CheckNormArgs(na, bind::Forms(), &k).code == SELSCAN_RULE_NOT_DIVIDING);
        na.group_size = 8;
        na.eps = -1.0f;
        EXPECT(bind::CheckNormArgs(na, bind::Forms(), &k).code == SELSCAN_RULE_EPS);
        na.eps = 1e-5f;
        na.z = arg(nz, T::kBF16);
        r = bind::CheckNormArgs(na, bind::Forms(), &k);
        EXPECT(r.code == SELSCAN_RULE_SHAPE && std::string(r.operand) == "z");
        na.z = arg(ny, T::kF32);
        r = bind::CheckNormArgs(na, bind::Forms(), &k);
        EXPECT(r.code == SELSCAN_RULE_DTYPE && std::string(r.operand) == "z");
        na.z = bind::Arg();
        na.weight = bind::Arg();
        na.y = arg(nq, T::kF32); // symbolic L and dim: the rules a known size would pass
        EXPECT(bind::CheckNormArgs(na, bind::Forms(), &k).ok() && k.s.dim < 0);
    }
    EXPECT(bind::StepParts(8, 2, 300) == 4 && bind::StepParts(3, 2, 300) == 3 && bind::StepParts(8, 0, 0) == 1);
    EXPECT(bind::NamesOf(bind::kStepNames).Of("state_index") == "state_batch_indices");
    // >>unit-l: ScanWantsUnitL copies L-strided operands where the plan takes the unit-L form only
    {
        const int64_t sz[3] = {2, 8, 16}, unit[3] = {128, 16, 1}, lstr[3] = {128, 1, 8}, a_sz[2] = {8, 4},
                      a_st[2] = {4, 1}, bc_sz[4] = {2, 1, 4, 16}, bc_st[4] = {64, 64, 16, 1}, d_sz[1] = {8},
                      d_st[1] = {1};
        auto arg = [](int64_t nd, const int64_t *sz, const int64_t *st, bind::Type t) {
            bind::Arg a;
            a.present = true, a.ndim = nd, a.sizes = sz, a.strides = st, a.type = t;
            return a;
        };
        bind::Arg in[bind::kScanFwdInputs];
        in[bind::kScanU] = in[bind::kScanDelta] = arg(3, sz, unit, bind::Type::kF32);
        in[bind::kScanA] = arg(2, a_sz, a_st, bind::Type::kF32);
        in[bind::kScanB] = in[bind::kScanC] = arg(4, bc_sz, bc_st, bind::Type::kF32);
        in[bind::kScanDeltaBias] = arg(1, d_sz, d_st, bind::Type::kF32);
        bind::Checked k;
        const bind::Refusal r = bind::CheckScanArgs(bind::ScanArgsOf(in, false, nullptr), bind::Forms(), &k);
        if (!r.ok()) std::printf("refused: %s %s\n", r.operand, r.rule.c_str());
        EXPECT(r.ok());
        EXPECT(!bind::ScanWantsUnitL(in, k)); // nothing L-strided: nothing to copy
        in[bind::kScanU] = arg(3, sz, lstr, bind::Type::kF32);
        EXPECT(bind::ScanWantsUnitL(in, k) && g_asked.delta_bias.data && g_asked.u.stride[2] == 8);
        const bind::Arg dy = arg(3, sz, lstr, bind::Type::kF32);
        in[bind::kScanU] = arg(3, sz, unit, bind::Type::kF32);
        EXPECT(bind::ScanWantsUnitL(in, k, &dy) && g_asked.y.stride[2] == 8); // y: the L-strided dy's strides
        EXPECT(!bind::ScanWantsUnitL(in, k)); // (y like u: unit)
        std::vector<int64_t> cu_sz{3};
        const int64_t cu_st[1] = {1};
        in[bind::kScanU] = arg(3, sz, lstr, bind::Type::kF32);
        in[bind::kScanCuSeqlens] = arg(1, cu_sz.data(), cu_st, bind::Type::kI64);
        EXPECT(!bind::ScanWantsUnitL(in, k)); // packed sequences: the general kernels, nothing copied
        in[bind::kScanCuSeqlens] = bind::Arg();
        g_fast_as_is = true; // the fast kernels take it as it is: no copy
        EXPECT(!bind::ScanWantsUnitL(in, k));
    }
    std::printf("binding_layer: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
