/* tests/test_cuda_conv.cu - the CUDA causal conv1d (selscan_cuda.cuh >>conv) against the CPU reference.
 *
 * Random problems over every dtype, width (2, 3, 4), layout of x / y / dy / dx (contiguous with
 * zero strides, explicit, channels-last (batch, L, dim), padded with gaps, channels-last views of
 * a wider (batch, L, 2 dim) buffer: x = xz[:, :, :dim]; unit step stride with misaligned rows),
 * option (silu, bias, init_state, final_state, dfinal_state, packed sequences with empty ones),
 * L across tiles (1 .. 600; the rows path's cases up to 9000, many segments a row), each call
 * both on the automatic path (the rows kernels where they apply) and with the tiled kernels forced:
 * forward y (relative error) and final_state (bitwise: a copy of inputs); backward dx, dweight,
 * dbias, dinit_state (any subset), run twice and compared bitwise (deterministic); the decode
 * update (seqlen 1 and 3, state_len > W - 1, state_index with padding, out-of-range rows) against
 * the CPU update, y and the whole state. Every output poisoned (0xFF bytes, NaN) first: an
 * unwritten element fails; gaps must stay poisoned. Host-side validation runs without a GPU
 * (statuses and diag of what the launchers refuse before any launch); with no device the suite
 * stops there. Last line: "N passed, N failed". SELSCAN_TEST_QUICK=1: a smaller matrix.
 */
#define SELSCAN_IMPLEMENTATION
#define SELSCAN_CUDA_IMPLEMENTATION
#define SELSCAN__CUDA_TUNING /* selscan_cuda.cuh >>bench: selscan__conv_*_cuda_tuned (the tiled kernels forced) */
#include "selscan_cuda.cuh"

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

#define CUDA_CHECK_SEED 0xc0417d1ull /* urand / irand's */
#include "cuda_check.h" /* g_pass / g_fail, CHECK, CU, urand / irand */


/* A tensor on the host (h) and the device (d), same layout; the allocation holds the tensor at
   element offset base. */
struct Ten {
    int nd = 0;
    int64_t n[3] = {1, 1, 1}, s[3] = {0, 0, 0}, alloc = 0, base = 0;
    selscan_dtype dt = SELSCAN_F32;
    bool zero = false; /* pass all-zero strides (contiguous) */
    unsigned char *h = NULL;
    void *d = NULL;
    size_t es() const { return dt == SELSCAN_F32 ? 4 : 2; }
    int64_t count() const { return n[0] * n[1] * n[2]; }
    int64_t off(int64_t i) const {
        int64_t o = base;
        for (int k = nd - 1; k >= 0; k--) { o += i % n[k] * s[k]; i /= n[k]; }
        return o;
    }
    float get(const unsigned char *m, int64_t i) const {
        const int64_t o = off(i);
        if (dt == SELSCAN_F32) { float f; memcpy(&f, m + o * 4, 4); return f; }
        uint16_t b;
        memcpy(&b, m + o * 2, 2);
        return dt == SELSCAN_F16 ? selscan_f16_to_f32(b) : selscan_bf16_to_f32(b);
    }
    void set(int64_t i, float v) {
        const int64_t o = off(i);
        if (dt == SELSCAN_F32) memcpy(h + o * 4, &v, 4);
        else {
            const uint16_t b = dt == SELSCAN_F16 ? selscan_f32_to_f16(v) : selscan_f32_to_bf16(v);
            memcpy(h + o * 2, &b, 2);
        }
    }
    selscan_tensor api(bool dev) const {
        selscan_tensor t;
        t.data = (const unsigned char *)(dev ? d : (void *)h) + base * es();
        for (int k = 0; k < 4; k++) t.stride[k] = zero || k >= nd ? 0 : s[k];
        return t;
    }
    selscan_out_tensor out(bool dev) const {
        const selscan_tensor a = api(dev);
        selscan_out_tensor o;
        o.data = (void *)a.data;
        memcpy(o.stride, a.stride, sizeof o.stride);
        return o;
    }
    void up() { CU(cudaMemcpy(d, h, alloc * es(), cudaMemcpyHostToDevice)); }
    void poison_dev() { CU(cudaMemset(d, 0xFF, alloc * es())); }
    std::vector<unsigned char> down() const {
        std::vector<unsigned char> v(alloc * es());
        CU(cudaMemcpy(v.data(), d, v.size(), cudaMemcpyDeviceToHost));
        return v;
    }
    void release() {
        free(h);
        if (d) cudaFree(d);
        h = NULL; d = NULL;
    }
};

/* layout: 0 contiguous (zero strides), 1 explicit, 2 channels-last (last dim to position 1),
   3 padded (gaps), 4 channels-last view of a buffer twice as wide in dim (x = xz[:, :, :dim]),
   5 unit step stride with rows one element apart, off an aligned address (misaligned rows),
   6 channels-last with steps dim + 1 elements apart, off an aligned address (misaligned steps) */
static void make(Ten &t, selscan_dtype dt, int nd, int64_t n0, int64_t n1, int64_t n2, int layout, bool dev) {
    t = Ten();
    t.nd = nd; t.dt = dt;
    t.n[0] = n0; t.n[1] = nd > 1 ? n1 : 1; t.n[2] = nd > 2 ? n2 : 1;
    if (nd == 3 && (layout == 2 || layout == 4)) {
        const int64_t wd = layout == 4 ? 2 * t.n[1] : t.n[1];
        t.s[1] = 1; t.s[2] = wd; t.s[0] = wd * t.n[2];
        t.alloc = t.s[0] * t.n[0];
    } else if (nd == 3 && layout == 6) {
        t.s[1] = 1; t.s[2] = t.n[1] + 1; t.s[0] = t.s[2] * t.n[2] + 1;
        t.base = 1;
        t.alloc = 1 + t.s[0] * t.n[0];
    } else if (layout == 5) { /* unit step stride, rows one element apart, one element off the allocation (misaligned rows) */
        t.s[nd - 1] = 1;
        for (int k = nd - 2; k >= 0; k--) t.s[k] = t.s[k + 1] * t.n[k + 1] + 1;
        t.base = 1;
        t.alloc = 1 + t.s[0] * t.n[0];
    } else if (layout == 3) {
        int64_t acc = 1;
        for (int k = nd - 1; k >= 0; k--) { t.s[k] = acc * (k == nd - 1 ? 2 : 1) + (k == nd - 1 ? 0 : 3); acc = t.s[k] * t.n[k]; }
        t.base = 1;
        t.alloc = acc + 4;
    } else {
        int64_t acc = 1;
        for (int k = nd - 1; k >= 0; k--) { t.s[k] = acc; acc *= t.n[k]; }
        t.alloc = acc;
        t.zero = layout == 0;
    }
    if (t.alloc < 1) t.alloc = 1;
    t.h = (unsigned char *)malloc(t.alloc * t.es());
    memset(t.h, 0xFF, t.alloc * t.es());
    if (dev) CU(cudaMalloc(&t.d, t.alloc * t.es()));
}
static void fill(Ten &t, float lo, float hi) {
    for (int64_t i = 0; i < t.count(); i++) t.set(i, (float)urand(lo, hi));
}

/* ||a - b|| / ||b|| over the logical elements (inf on a NaN) */
static double rel_err(const Ten &t, const unsigned char *a, const unsigned char *b) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < t.count(); i++) {
        const double x = t.get(a, i), y = t.get(b, i);
        if (isnan(x) || isnan(y)) return INFINITY;
        num += (x - y) * (x - y);
        den += y * y;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
static bool same_elems(const Ten &t, const unsigned char *a, const unsigned char *b) {
    for (int64_t i = 0; i < t.count(); i++)
        if (memcmp(a + t.off(i) * t.es(), b + t.off(i) * t.es(), t.es())) return false;
    return true;
}
/* bytes outside the logical elements still 0xFF */
static bool gaps_clean(const Ten &t, const unsigned char *m) {
    std::vector<char> mark(t.alloc, 0);
    for (int64_t i = 0; i < t.count(); i++) mark[t.off(i)] = 1;
    for (int64_t e = 0; e < t.alloc; e++)
        if (!mark[e])
            for (size_t k = 0; k < t.es(); k++)
                if (m[e * t.es() + k] != 0xFF) return false;
    return true;
}

/* GPU vs CPU, relative error of a dt-typed output: f32 as measured; f16 / bf16 by tc_tol_lowp
   with k = 2, both sides round their own f32 value to dt */
static double tol(selscan_dtype dt, bool grad) { return tc_tol_lowp(dt, grad ? 3e-5 : 1e-5, 2); }
static const char *dtn(selscan_dtype dt) { return dt == SELSCAN_F32 ? "f32" : dt == SELSCAN_F16 ? "f16" : "bf16"; }

struct Cfg {
    selscan_dtype dt;
    int64_t batch, dim, L, W;
    bool silu, bias, h0, hlast, dhlast;
    int nseq, lx, ly; /* layouts of x / dy (lx) and y / dx (ly) */
    unsigned want;    /* backward outputs: 1 dx, 2 dweight, 4 dbias, 8 dinit_state */
};

static void run_case(const Cfg &c, int id) {
    char name[200];
    snprintf(name, sizeof name, "case %d: %s B%lld D%lld L%lld W%lld%s%s%s%s%s nseq %d layouts %d/%d want %u", id, dtn(c.dt),
             (long long)c.batch, (long long)c.dim, (long long)c.L, (long long)c.W, c.silu ? " silu" : "", c.bias ? " bias" : "",
             c.h0 ? " h0" : "", c.hlast ? " hlast" : "", c.dhlast ? " dhlast" : "", c.nseq, c.lx, c.ly, c.want);
    const int64_t rows = c.nseq ? c.nseq : c.batch, H = c.W - 1;
    std::vector<int64_t> cu;
    int64_t *dcu = NULL;
    if (c.nseq) { /* random offsets, one empty sequence when there are several */
        cu.resize(c.nseq + 1);
        cu[0] = 0;
        for (int s = 1; s < c.nseq; s++) cu[s] = irand(0, (int)c.L);
        cu[c.nseq] = c.L;
        std::sort(cu.begin(), cu.end());
        if (c.nseq >= 2) cu[1] = cu[0];
        CU(cudaMalloc(&dcu, cu.size() * 8));
        CU(cudaMemcpy(dcu, cu.data(), cu.size() * 8, cudaMemcpyHostToDevice));
    }
    Ten x, w, b, h0, y, hl, dy, dhl, dx, dw, db, dh0;
    make(x, c.dt, 3, c.batch, c.dim, c.L, c.lx, true);
    make(w, SELSCAN_F32, 2, c.dim, c.W, 0, irand(0, 3), true);
    make(b, SELSCAN_F32, 1, c.dim, 0, 0, 1, true);
    make(h0, c.dt, 3, rows, c.dim, H, irand(0, 3), true);
    make(y, c.dt, 3, c.batch, c.dim, c.L, c.ly, true);
    make(hl, c.dt, 3, rows, c.dim, H, irand(0, 3), true);
    make(dy, c.dt, 3, c.batch, c.dim, c.L, c.lx, true);
    make(dhl, c.dt, 3, rows, c.dim, H, irand(0, 3), true);
    make(dx, c.dt, 3, c.batch, c.dim, c.L, c.ly, true);
    make(dw, SELSCAN_F32, 2, c.dim, c.W, 0, irand(0, 3), true);
    make(db, SELSCAN_F32, 1, c.dim, 0, 0, 1, true);
    make(dh0, c.dt, 3, rows, c.dim, H, irand(0, 3), true);
    fill(x, -1.5f, 1.5f); fill(w, -0.8f, 0.8f); fill(b, -0.5f, 0.5f); fill(h0, -1.5f, 1.5f); fill(dy, -1, 1); fill(dhl, -1, 1);
    Ten *ins[] = {&x, &w, &b, &h0, &dy, &dhl};
    for (Ten *t : ins) t->up();

    selscan_conv_problem p;
    memset(&p, 0, sizeof p);
    p.batch = c.batch; p.dim = c.dim; p.seqlen = c.L; p.width = c.W; p.dtype = c.dt; p.flags = c.silu ? SELSCAN_CONV_SILU : 0;
    if (c.nseq) { p.cu_seqlens = cu.data(); p.n_seqs = c.nseq; }
    selscan_cuda_ext ext;
    memset(&ext, 0, sizeof ext);
    ext.cu_seqlens_device = dcu;
    cudaError_t cerr = cudaSuccess;
    ext.cuda_error = &cerr;
    selscan_diag dg = {NULL, NULL, SELSCAN_RULE_NONE};
    p.diag = &dg;

    /* the channels-last forward's segment length (>>conv-cl: 64 steps, halved while the grid is under
       conv_cl_fwd_blocks): these small grids take each length by the case's number */
    const int64_t clb[4] = {0, 1024, 40, 200};
    selscan_cuda_detail::conv_cl_fwd_blocks = clb[id % 4];
    /* forward: CPU reference, then the GPU into poisoned outputs */
    auto set_fwd = [&](bool dev) {
        p.x = x.api(dev); p.weight = w.api(dev); p.bias = c.bias ? b.api(dev) : selscan_tensor{NULL, {0, 0, 0, 0}};
        p.init_state = c.h0 ? h0.api(dev) : selscan_tensor{NULL, {0, 0, 0, 0}};
        p.y = y.out(dev);
        p.final_state = c.hlast ? hl.out(dev) : selscan_out_tensor{NULL, {0, 0, 0, 0}};
    };
    set_fwd(false);
    selscan_status st = selscan_conv_forward_ref(&p);
    CHECK(st == SELSCAN_OK, "%s: cpu forward %s", name, selscan_status_name(st));
    const std::vector<unsigned char> yref(y.h, y.h + y.alloc * y.es()), hlref(hl.h, hl.h + hl.alloc * hl.es());
    set_fwd(true);
    /* every call twice: the automatic choice (the rows path where it applies) and the tiled
       kernels forced (selscan__conv_*_cuda_tuned, rows < 0) */
    for (int path = 0; path < 2; path++) {
        const char *pn = path ? "tiled" : "auto";
        y.poison_dev(); hl.poison_dev();
        st = path ? selscan__conv_forward_cuda_tuned(&p, &ext, 0, -1) : selscan_conv_forward_cuda(&p, &ext, 0);
        CU(cudaDeviceSynchronize());
        CHECK(st == SELSCAN_OK, "%s (%s): cuda forward %s (%s %s)", name, pn, selscan_status_name(st), dg.operand ? dg.operand : "",
              dg.rule ? dg.rule : "");
        const std::vector<unsigned char> yg = y.down(), hg = hl.down();
        const double e = rel_err(y, yg.data(), yref.data());
        CHECK(e <= tol(c.dt, false), "%s (%s): y rel err %.3g", name, pn, e);
        CHECK(gaps_clean(y, yg.data()), "%s (%s): y gaps written", name, pn);
        if (c.hlast) CHECK(same_elems(hl, hg.data(), hlref.data()) && gaps_clean(hl, hg.data()), "%s (%s): final_state differs", name, pn);
    }

    /* backward */
    selscan_conv_grads g;
    auto set_bwd = [&](bool dev) {
        memset(&g, 0, sizeof g);
        g.dy = dy.api(dev);
        if (c.dhlast) g.dfinal_state = dhl.api(dev);
        if (c.want & 1) g.dx = dx.out(dev);
        if (c.want & 2) g.dweight = dw.out(dev);
        if (c.want & 4) g.dbias = db.out(dev);
        if (c.want & 8) g.dinit_state = dh0.out(dev);
    };
    set_fwd(false);
    set_bwd(false);
    st = selscan_conv_backward_ref(&p, &g);
    CHECK(st == SELSCAN_OK, "%s: cpu backward %s", name, selscan_status_name(st));
    Ten *outs[] = {&dx, &dw, &db, &dh0};
    const char *onames[] = {"dx", "dweight", "dbias", "dinit_state"};
    std::vector<unsigned char> ref[4];
    for (int k = 0; k < 4; k++) ref[k].assign(outs[k]->h, outs[k]->h + outs[k]->alloc * outs[k]->es());
    set_fwd(true);
    set_bwd(true);
    size_t wsb = 0;
    st = selscan_conv_workspace_size_cuda(&p, &g, &wsb);
    CHECK(st == SELSCAN_OK, "%s: workspace size %s", name, selscan_status_name(st));
    CHECK(((c.want & 6) != 0) == (wsb > 0), "%s: workspace %zu bytes with want %u", name, wsb, c.want);
    void *ws = NULL;
    if (wsb) CU(cudaMalloc(&ws, wsb + 1));
    for (int path = 0; path < 2; path++) {
        const char *pn = path ? "tiled" : "auto";
        std::vector<unsigned char> first[4];
        for (int rep = 0; rep < 2; rep++) {
            for (Ten *t : outs) t->poison_dev();
            if (ws) CU(cudaMemset(ws, 0xCD, wsb + 1));
            /* the second run: the workspace one byte past an aligned address (any address works) */
            void *wp = rep && ws ? (char *)ws + 1 : ws;
            st = path ? selscan__conv_backward_cuda_tuned(&p, &g, &ext, wp, wsb, 0, -1) : selscan_conv_backward_cuda(&p, &g, &ext, wp, wsb, 0);
            CU(cudaDeviceSynchronize());
            CHECK(st == SELSCAN_OK, "%s (%s): cuda backward %s (%s %s)", name, pn, selscan_status_name(st), dg.operand ? dg.operand : "",
                  dg.rule ? dg.rule : "");
            for (int k = 0; k < 4; k++) {
                if (!(c.want & (1u << k))) continue;
                const std::vector<unsigned char> gk = outs[k]->down();
                if (rep == 0) {
                    const double e = rel_err(*outs[k], gk.data(), ref[k].data());
                    CHECK(e <= tol(k == 1 || k == 2 ? SELSCAN_F32 : c.dt, true), "%s (%s): %s rel err %.3g", name, pn, onames[k], e);
                    CHECK(gaps_clean(*outs[k], gk.data()), "%s (%s): %s gaps written", name, pn, onames[k]);
                    first[k] = gk;
                } else {
                    CHECK(gk == first[k], "%s (%s): %s not bitwise the same on a second run", name, pn, onames[k]);
                }
            }
        }
    }
    if (ws) cudaFree(ws);
    /* asked for nothing but dy: a valid no-op */
    {
        selscan_conv_grads g0;
        memset(&g0, 0, sizeof g0);
        g0.dy = dy.api(true);
        CHECK(selscan_conv_backward_cuda(&p, &g0, &ext, NULL, 0, 0) == SELSCAN_OK, "%s: backward with no outputs", name);
    }
    for (Ten *t : {&x, &w, &b, &h0, &y, &hl, &dy, &dhl, &dx, &dw, &db, &dh0}) t->release();
    if (dcu) cudaFree(dcu);
}

/* The update against the CPU update: state (n_cache rows, state_len S), state_index with padding
   (negative) and, on CUDA only, out-of-range rows (padding there too: the CPU reference gets -1).
   prmT: weight and bias in T (SELSCAN_CONV_PARAMS_T), and the same update again with those
   values in f32 without the flag: bitwise the same y and state. */
static void run_step(selscan_dtype dt, int64_t batch, int64_t dim, int64_t W, int64_t S, int64_t L, bool silu, int mode, int id,
                     bool prmT = false) {
    char name[160];
    snprintf(name, sizeof name, "step %d: %s B%lld D%lld W%lld S%lld L%lld%s mode %d%s", id, dtn(dt), (long long)batch, (long long)dim,
             (long long)W, (long long)S, (long long)L, silu ? " silu" : "", mode, prmT ? " params T" : "");
    const int64_t ncache = mode ? batch + 3 : batch;
    std::vector<int32_t> idx(batch), idx_cpu(batch);
    for (int64_t i = 0; i < batch; i++) idx[i] = (int32_t)(ncache - 1 - i);
    if (mode && batch > 1) idx[0] = -1;                       /* padding */
    if (mode == 2 && batch > 2) idx[1] = (int32_t)ncache + 5; /* out of range: padding on CUDA */
    for (int64_t i = 0; i < batch; i++) idx_cpu[i] = idx[i] >= ncache ? -1 : idx[i];
    int32_t *didx = NULL;
    if (mode) {
        CU(cudaMalloc(&didx, batch * 4));
        CU(cudaMemcpy(didx, idx.data(), batch * 4, cudaMemcpyHostToDevice));
    }
    Ten st, x, w, b, y, w32, b32;
    const selscan_dtype pdt = prmT ? dt : SELSCAN_F32;
    make(st, dt, 3, ncache, dim, S, irand(0, 3), true);
    make(x, dt, 3, batch, dim, L, irand(0, 2), true);
    make(w, pdt, 2, dim, W, 0, prmT ? irand(1, 3) : 1, true);
    make(b, pdt, 1, dim, 0, 0, prmT ? irand(1, 3) : 1, true);
    make(y, dt, 3, batch, dim, L, irand(0, 3), true);
    fill(st, -1, 1); fill(x, -1, 1); fill(w, -1, 1); fill(b, -0.5, 0.5);
    make(w32, SELSCAN_F32, 2, dim, W, 0, 1, true); /* w's and b's values in f32 (exact) */
    make(b32, SELSCAN_F32, 1, dim, 0, 0, 1, true);
    for (int64_t i = 0; i < w.count(); i++) w32.set(i, w.get(w.h, i));
    for (int64_t i = 0; i < b.count(); i++) b32.set(i, b.get(b.h, i));
    for (Ten *t : {&st, &x, &w, &b, &w32, &b32}) t->up();
    const std::vector<unsigned char> st0(st.h, st.h + st.alloc * st.es());
    selscan_conv_step_problem s;
    memset(&s, 0, sizeof s);
    s.batch = batch; s.dim = dim; s.width = W; s.state_len = S; s.n_cache = mode ? ncache : 0; s.seqlen = L; s.dtype = dt;
    s.flags = (silu ? SELSCAN_CONV_SILU : 0) | (prmT ? SELSCAN_CONV_PARAMS_T : 0);
    s.state_index = mode ? idx_cpu.data() : NULL;
    s.state = st.out(false); s.x = x.api(false); s.weight = w.api(false); s.bias = b.api(false); s.y = y.out(false);
    selscan_status r = selscan_conv_step_ref(&s);
    CHECK(r == SELSCAN_OK, "%s: cpu %s", name, selscan_status_name(r));
    s.state_index = mode ? didx : NULL;
    s.state = st.out(true); s.x = x.api(true); s.weight = w.api(true); s.bias = b.api(true); s.y = y.out(true);
    y.poison_dev();
    r = selscan_conv_step_cuda(&s, NULL, 0);
    CU(cudaDeviceSynchronize());
    CHECK(r == SELSCAN_OK, "%s: cuda %s", name, selscan_status_name(r));
    const std::vector<unsigned char> yg = y.down(), sg = st.down();
    CHECK(rel_err(y, yg.data(), y.h) <= tol(dt, false), "%s: y rel err %.3g", name, rel_err(y, yg.data(), y.h));
    CHECK(same_elems(st, sg.data(), st.h) && gaps_clean(st, sg.data()), "%s: state differs from the CPU update", name);
    CHECK(gaps_clean(y, yg.data()), "%s: y gaps written", name);
    if (prmT) { /* the f32 parameters of the same values, no flag: bitwise the same */
        CU(cudaMemcpy(st.d, st0.data(), st0.size(), cudaMemcpyHostToDevice));
        y.poison_dev();
        s.flags &= ~SELSCAN_CONV_PARAMS_T;
        s.weight = w32.api(true); s.bias = b32.api(true);
        r = selscan_conv_step_cuda(&s, NULL, 0);
        CU(cudaDeviceSynchronize());
        CHECK(r == SELSCAN_OK, "%s: cuda (f32 parameters) %s", name, selscan_status_name(r));
        const std::vector<unsigned char> y2 = y.down(), s2 = st.down();
        CHECK(same_elems(y, y2.data(), yg.data()) && same_elems(st, s2.data(), sg.data()),
              "%s: parameters in T differ from the same values in f32", name);
    }
    for (Ten *t : {&st, &x, &w, &b, &y, &w32, &b32}) t->release();
    if (didx) cudaFree(didx);
}

/* What the launchers refuse on the host, before any launch (runs without a GPU: the pointers are
   never dereferenced). */
static void host_validation_tests() {
    static float hx[64];
    char *fake = (char *)(uintptr_t)0x10000000; /* device addresses, never touched */
    selscan_conv_problem p;
    selscan_conv_grads g;
    selscan_diag dg;
    auto base = [&]() {
        memset(&p, 0, sizeof p);
        memset(&g, 0, sizeof g);
        p.batch = 2; p.dim = 64; p.seqlen = 100; p.width = 4; p.dtype = SELSCAN_BF16; p.flags = SELSCAN_CONV_SILU;
        p.x.data = fake; p.weight.data = fake + 0x100000; p.y.data = fake + 0x200000;
        g.dy.data = fake + 0x300000; g.dx.data = fake + 0x400000; g.dweight.data = fake + 0x500000;
        dg.operand = dg.rule = NULL;
        p.diag = &dg;
    };
    auto diag_is = [&](const char *op, const char *rule) { return dg.operand && dg.rule && !strcmp(dg.operand, op) && !strcmp(dg.rule, rule); };
    base();
    p.width = 5;
    CHECK(selscan_conv_forward_cuda(&p, NULL, 0) == SELSCAN_ERR_UNSUPPORTED && diag_is("width", "not 2 to 4"), "cuda: width 5");
    base();
    p.flags |= SELSCAN_CONV_PARAMS_T; /* the update's only */
    CHECK(selscan_conv_forward_cuda(&p, NULL, 0) == SELSCAN_ERR_UNSUPPORTED && diag_is("flags", "unknown flag"),
          "cuda: the forward refuses SELSCAN_CONV_PARAMS_T");
    CHECK(selscan_conv_backward_cuda(&p, &g, NULL, NULL, 0, 0) == SELSCAN_ERR_UNSUPPORTED && diag_is("flags", "unknown flag"),
          "cuda: the backward refuses SELSCAN_CONV_PARAMS_T");
    base();
    p.x.data = NULL;
    CHECK(selscan_conv_forward_cuda(&p, NULL, 0) == SELSCAN_ERR_NULL && diag_is("x", "missing"), "cuda: x missing");
    base();
    p.y.data = (void *)p.x.data;
    CHECK(selscan_conv_forward_cuda(&p, NULL, 0) == SELSCAN_ERR_ALIAS && diag_is("y", "overlaps x"), "cuda: y overlaps x");
    { /* packed sequences without the device copy; the device copy overlapping an output */
        static const int64_t cu[3] = {0, 40, 100};
        base();
        p.batch = 1; p.cu_seqlens = cu; p.n_seqs = 2;
        CHECK(selscan_conv_forward_cuda(&p, NULL, 0) == SELSCAN_ERR_NULL && diag_is("cu_seqlens_device", "missing (packed sequences)"),
              "cuda: no cu_seqlens_device");
        selscan_cuda_ext x;
        memset(&x, 0, sizeof x);
        x.cu_seqlens_device = (const int64_t *)(void *)p.y.data;
        CHECK(selscan_conv_forward_cuda(&p, &x, 0) == SELSCAN_ERR_ALIAS && diag_is("cu_seqlens_device", "overlaps an output"),
              "cuda: cu_seqlens_device overlaps y");
        CHECK(selscan_conv_backward_cuda(&p, &g, NULL, NULL, 0, 0) == SELSCAN_ERR_NULL, "cuda bwd: no cu_seqlens_device");
    }
    { /* a grid past 2^31 - 1 blocks: broadcast x (L stride 0), y contiguous far above it */
        base();
        p.batch = 1; p.dim = 1 << 16; p.seqlen = (int64_t)1 << 30;
        p.x.stride[1] = 1; /* (dim stride 1, L stride 0: one row of dim elements) */
        p.y.data = fake + ((int64_t)1 << 32);
        p.width = 2;
        CHECK(selscan_conv_forward_cuda(&p, NULL, 0) == SELSCAN_ERR_UNSUPPORTED && diag_is("dim", "grid over 2^31 - 1 blocks"),
              "cuda: grid over 2^31 - 1 blocks");
    }
    { /* the backward's workspace: size, null, too small, overlapping */
        base();
        size_t bytes = 0;
        CHECK(selscan_conv_workspace_size_cuda(&p, &g, &bytes) == SELSCAN_OK && bytes > 0, "cuda: workspace size");
        CHECK(selscan_conv_workspace_size_cuda(&p, &g, NULL) == SELSCAN_ERR_NULL && diag_is("bytes", "missing"), "cuda: bytes missing");
        CHECK(selscan_conv_backward_cuda(&p, &g, NULL, NULL, bytes, 0) == SELSCAN_ERR_WORKSPACE && diag_is("workspace", "null"),
              "cuda: workspace null");
        CHECK(selscan_conv_backward_cuda(&p, &g, NULL, fake + 0x600000, bytes / 2, 0) == SELSCAN_ERR_WORKSPACE &&
                  diag_is("workspace", "too small"),
              "cuda: workspace too small");
        CHECK(selscan_conv_backward_cuda(&p, &g, NULL, fake + 0x300000, bytes, 0) == SELSCAN_ERR_ALIAS &&
                  diag_is("workspace", "overlaps an operand"),
              "cuda: workspace overlaps dy");
        selscan_conv_grads g2 = g;
        g2.dweight.data = NULL; /* dx only: no workspace */
        CHECK(selscan_conv_workspace_size_cuda(&p, &g2, &bytes) == SELSCAN_OK && bytes == 0, "cuda: dx only needs no workspace");
        g2 = g;
        g2.dbias.data = fake + 0x500000; /* dweight and dbias at one address */
        CHECK(selscan_conv_backward_cuda(&p, &g2, NULL, NULL, 0, 0) == SELSCAN_ERR_ALIAS && diag_is("dweight", "overlaps dbias"),
              "cuda: dweight overlaps dbias");
    }
    { /* the update */
        selscan_conv_step_problem s;
        memset(&s, 0, sizeof s);
        s.batch = 4; s.dim = 8; s.width = 4; s.state_len = 2; s.dtype = SELSCAN_F32;
        s.state.data = fake; s.x.data = fake + 0x1000; s.weight.data = hx; s.y.data = fake + 0x2000;
        dg.operand = dg.rule = NULL;
        s.diag = &dg;
        CHECK(selscan_conv_step_cuda(&s, NULL, 0) == SELSCAN_ERR_SHAPE && diag_is("state_len", "below width - 1"), "cuda step: state_len");
        s.state_len = 3;
        s.y.data = fake + 4;
        CHECK(selscan_conv_step_cuda(&s, NULL, 0) == SELSCAN_ERR_ALIAS && diag_is("state", "overlaps y"), "cuda step: y overlaps state");
    }
}

int main() {
    host_validation_tests();
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        return report_no_gpu("test_cuda_conv");
    }
    cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    const char *qe = getenv("SELSCAN_TEST_QUICK");
    const bool quick = qe && strcmp(qe, "0") != 0;
    printf("test_cuda_conv on %s%s\n", prop.name, quick ? " (quick)" : "");
    const selscan_dtype dts[3] = {SELSCAN_F32, SELSCAN_F16, SELSCAN_BF16};
    int id = 0;
    /* a fixed sweep: every dtype x width x layout pair, all options on */
    for (int di = 0; di < 3; di++)
        for (int W = 2; W <= 4; W++)
            for (int lay = 0; lay < 7; lay++) {
                Cfg c = {dts[di], 2, 70, 150, W, true, true, true, true, true, 0, lay, (lay + 2) % 7, 15};
                run_case(c, id++);
            }
    /* random cases */
    const int nrand = quick ? 30 : 200;
    for (int i = 0; i < nrand; i++) {
        Cfg c;
        c.dt = dts[i % 3];
        c.W = irand(2, 4);
        c.nseq = urand(0, 1) < 0.3 ? irand(1, 6) : 0;
        c.batch = c.nseq ? 1 : irand(1, 3);
        c.dim = urand(0, 1) < 0.3 ? irand(1, 40) : irand(41, 300);
        c.L = urand(0, 1) < 0.2 ? irand(1, 5) : irand(6, 600);
        if (c.L < c.nseq) c.L = c.nseq;
        c.silu = urand(0, 1) < 0.6; c.bias = urand(0, 1) < 0.7; c.h0 = urand(0, 1) < 0.5; c.hlast = urand(0, 1) < 0.5;
        c.dhlast = urand(0, 1) < 0.5;
        c.lx = irand(0, 6); c.ly = irand(0, 6);
        c.want = (unsigned)irand(1, 15);
        run_case(c, id++);
    }
    /* the rows path (>>conv-rows): unit-stride layouts (aligned, misaligned), no init_state /
       packed sequences / dfinal_state, L across lanes, passes and segments (batch 1 and few
       channels: many segments a row) */
    {
        const int64_t Ls[] = {1, 2, 3, 5, 8, 9, 31, 129, 255, 256, 257, 1000, 4099, 9000};
        for (int i = 0; i < (quick ? 24 : 84); i++) {
            Cfg c;
            c.dt = dts[i % 3];
            c.W = 2 + (i / 3) % 3;
            c.nseq = 0; c.h0 = false; c.dhlast = false;
            c.L = Ls[(i * 5) % 14];
            c.batch = irand(1, 3);
            c.dim = c.L >= 1000 ? irand(1, 9) : irand(1, 70);
            c.silu = (i / 9) % 2 == 0; c.bias = urand(0, 1) < 0.7; c.hlast = urand(0, 1) < 0.5;
            const int lays[3] = {0, 1, 5};
            c.lx = lays[irand(0, 2)]; c.ly = lays[irand(0, 2)];
            c.want = (unsigned)irand(1, 15);
            run_case(c, id++);
        }
    }
    /* the channels-last path (>>conv-cl): unit channel stride (aligned, a view of a wider buffer,
       misaligned steps), no init_state / packed sequences / dfinal_state; dims across a thread's 4
       channels and a block's 128, L across a warp's 64 steps and a block's 256 (partial tiles) */
    {
        const int64_t Ls[] = {1, 2, 3, 4, 63, 64, 65, 200, 255, 256, 257, 600, 1030};
        const int64_t Ds[] = {1, 2, 3, 4, 5, 7, 8, 127, 128, 129, 260};
        for (int i = 0; i < (quick ? 36 : 120); i++) {
            Cfg c;
            c.dt = dts[i % 3];
            c.W = 2 + (i / 3) % 3;
            c.nseq = 0; c.h0 = false; c.dhlast = false;
            c.L = Ls[(i * 7) % 13];
            c.dim = Ds[(i * 5) % 11];
            c.batch = irand(1, 3);
            c.silu = (i / 9) % 2 == 0; c.bias = urand(0, 1) < 0.7; c.hlast = urand(0, 1) < 0.5;
            const int lays[3] = {2, 4, 6};
            c.lx = lays[irand(0, 2)]; c.ly = lays[irand(0, 2)];
            c.want = (unsigned)irand(1, 15);
            run_case(c, id++);
        }
    }
    /* the update */
    int sid = 0;
    for (int di = 0; di < 3; di++)
        for (int W = 2; W <= 4; W++)
            for (int mode = 0; mode < 3; mode++) {
                run_step(dts[di], 5, 70, W, W - 1, 1, mode & 1, mode, sid++);
                run_step(dts[di], 3, 33, W, W + 2, 3, true, mode, sid++);
            }
    for (int i = 0; i < (quick ? 5 : 30); i++) { /* one draw a statement: the same cases with every host compiler */
        const int64_t batch = irand(1, 9), dim = irand(1, 300), W = irand(2, 4), S = irand(3, 8), L = irand(1, 4);
        const bool silu = urand(0, 1) < 0.5;
        const int mode = irand(0, 2);
        run_step(dts[i % 3], batch, dim, W, S, L, silu, mode, sid++);
    }
    /* weight and bias in T (SELSCAN_CONV_PARAMS_T): every dtype and width, padded parameter layouts */
    for (int i = 0; i < (quick ? 6 : 24); i++) {
        const int64_t batch = irand(1, 9), dim = irand(1, 300), W = 2 + i % 3, S = W - 1 + irand(0, 3), L = irand(1, 3);
        const bool silu = urand(0, 1) < 0.6;
        const int mode = irand(0, 2);
        run_step(dts[i % 3], batch, dim, W, S, L, silu, mode, sid++, true);
    }
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
