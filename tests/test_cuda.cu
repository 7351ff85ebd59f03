/* tests/test_cuda.cu - the CUDA backend (selscan_cuda.cuh) against the CPU reference.
 *
 * A matrix of random problems (dtypes, every option, odd L, L = 1, L far past any chunk,
 * N in {1, 2, 8, 16, 64, 256}, groups, strided layouts including (B, L, D), packed sequences with
 * empty ones, checkpoints), backward repeated and compared bitwise, step with padded and
 * out-of-range state indices, and validation errors (status and no output written).
 * Outputs are poisoned (0xFF bytes: NaN) before every call, so unwritten elements fail.
 * Without a device only the host-side validation runs (what the launchers refuse before any
 * launch: overflowing sizes, grids, N, missing operands), then it exits. Last line: "N passed, N failed".
 * SELSCAN_TEST_QUICK=1: a smaller matrix that still runs every kernel and pass (for compute-sanitizer:
 * make test-cuda-sanitize); SELSCAN_TEST_ONLY=text: only the
 * matrix cases whose name contains text. Built with SELSCAN_CUDA_CHANNELS_LAST=1 (test_cuda_cl),
 * the (B, L, D) cases run the fast kernels' any-stride instantiations.
 */
#define SELSCAN_IMPLEMENTATION
#define SELSCAN_CUDA_IMPLEMENTATION
#define SELSCAN__CUDA_TUNING /* selscan_cuda.cuh >>bench: selscan__forward_cuda_tuned, selscan__step_cuda_tuned */
#include "selscan_cuda.cuh"

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include <algorithm>

#define CUDA_CHECK_SEED 0x5e15ca4ull /* urand / irand's */
#include "cuda_check.h" /* g_pass / g_fail, CHECK, CU, urand / irand */

/* Tolerances: relative error ||gpu - cpu|| / ||cpu|| of a dt-typed output (the GPU's exp is
   ex2.approx and its sums run in another order): f32 as measured; f16 / bf16 by tc_tol_lowp with
   k = 2, both sides round their own f32 value to dt (an f32 output of a T problem: no rounding). */
static double tol_of(selscan_dtype dt, int grad) { return tc_tol_lowp(dt, grad ? 2e-4 : 5e-5, 2); }


/* A tensor living on host and device with the same strides. */
struct Ten {
    int nd = 0;
    int64_t n[4] = {1, 1, 1, 1}, s[4] = {0, 0, 0, 0};
    selscan_dtype dt = SELSCAN_F32;
    size_t bytes = 0;
    void *h = NULL, *d = NULL;
    bool zero_strides = false;
    int64_t base = 0; /* elements between the allocation and the tensor (layout 4) */
    int64_t count() const { return n[0] * n[1] * n[2] * n[3]; }
    int64_t off(int64_t i) const { /* logical row-major index -> element offset */
        int64_t o = base;
        for (int k = nd - 1; k >= 0; k--) { o += (i % n[k]) * s[k]; i /= n[k]; }
        return o;
    }
    size_t esz() const { return dt == SELSCAN_F32 ? 4 : 2; }
    float get(const void *base, int64_t i) const {
        const int64_t o = off(i);
        if (dt == SELSCAN_F32) return ((const float *)base)[o];
        uint16_t b = ((const uint16_t *)base)[o];
        return dt == SELSCAN_F16 ? selscan_f16_to_f32(b) : selscan_bf16_to_f32(b);
    }
    void set(int64_t i, float v) {
        const int64_t o = off(i);
        if (dt == SELSCAN_F32) ((float *)h)[o] = v;
        else ((uint16_t *)h)[o] = dt == SELSCAN_F16 ? selscan_f32_to_f16(v) : selscan_f32_to_bf16(v);
    }
    selscan_tensor api(bool dev) const {
        selscan_tensor t;
        t.data = static_cast<char *>(dev ? d : h) + base * esz();
        for (int k = 0; k < 4; k++) t.stride[k] = zero_strides ? 0 : s[k];
        return t;
    }
    selscan_out_tensor out(bool dev) const {
        selscan_tensor i = api(dev);
        selscan_out_tensor o;
        o.data = const_cast<void *>(i.data);
        for (int k = 0; k < 4; k++) o.stride[k] = i.stride[k];
        return o;
    }
};

/* layout: 0 contiguous (zero strides), 1 contiguous explicit, 2 last dim moved to position 1
   (channels-last), 3 padded (gaps between rows), 4 contiguous from one element past an aligned
   address (misaligned for vector accesses). */
static void make(Ten &t, selscan_dtype dt, int nd, int64_t n0, int64_t n1, int64_t n2, int64_t n3, int layout) {
    t.nd = nd; t.dt = dt;
    int64_t n[4] = {n0, n1, n2, n3};
    for (int k = 0; k < 4; k++) t.n[k] = k < nd ? n[k] : 1;
    int order[4] = {0, 1, 2, 3}; /* memory order, outermost first */
    if (layout == 2 && nd >= 3) { /* move last logical dim right after the first */
        int o = 0;
        order[o++] = 0;
        order[o++] = nd - 1;
        for (int k = 1; k < nd - 1; k++) order[o++] = k;
    } else if (layout == 2 && nd == 2) {
        order[0] = 1; order[1] = 0;
    }
    int64_t acc = 1;
    for (int k = nd - 1; k >= 0; k--) {
        t.s[order[k]] = acc;
        acc *= t.n[order[k]] + (layout == 3 ? 1 : 0);
    }
    for (int k = nd; k < 4; k++) t.s[k] = 0;
    t.zero_strides = layout == 0;
    t.base = layout == 4 ? 1 : 0;
    int64_t span = 1 + t.base;
    for (int k = 0; k < nd; k++) span += (t.n[k] - 1) * t.s[k];
    t.bytes = (size_t)span * t.esz();
    t.h = malloc(t.bytes);
    memset(t.h, 0xff, t.bytes);
    CU(cudaMalloc(&t.d, t.bytes));
}
static void fill(Ten &t, double lo, double hi) {
    for (int64_t i = 0; i < t.count(); i++) t.set(i, (float)urand(lo, hi));
    CU(cudaMemcpy(t.d, t.h, t.bytes, cudaMemcpyHostToDevice));
}
/* cudaMemset runs on the legacy default stream, which a cudaStreamNonBlocking stream does not
   wait for: synchronize before the launch that must see it (compute-sanitizer's initcheck and
   synccheck slow the memsets down enough to show the race: outputs NaN, runs differing). */
static void poison(Ten &t) {
    if (!t.h) return;
    memset(t.h, 0xff, t.bytes);
    CU(cudaMemset(t.d, 0xff, t.bytes));
    CU(cudaDeviceSynchronize());
}
static void release(Ten &t) {
    free(t.h);
    if (t.d) cudaFree(t.d);
    t.h = t.d = NULL;
}
static std::vector<unsigned char> fetch(const Ten &t) {
    std::vector<unsigned char> v(t.bytes);
    CU(cudaMemcpy(v.data(), t.d, t.bytes, cudaMemcpyDeviceToHost));
    return v;
}
/* relative error of the device copy (dev bytes) against the host reference values */
static double rel_err(const Ten &t, const std::vector<unsigned char> &dev) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < t.count(); i++) {
        const double a = t.get(dev.data(), i), r = t.get(t.h, i);
        if (!(a == a) || !(r == r) || isinf(a)) return INFINITY;
        num += (a - r) * (a - r);
        den += r * r;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* the elements of the device copy whose class is not the reference's (finite: finite or not only);
   the first few printed */
static int64_t cls_bad(const char *cname, const char *what, const Ten &t, const std::vector<unsigned char> &dev, bool finite = false) {
    int64_t bad = 0;
    for (int64_t i = 0; i < t.count(); i++) {
        const double a = t.get(dev.data(), i), r = t.get(t.h, i);
        if (finite ? (tc_class(a) == 0) == (tc_class(r) == 0) : tc_class(a) == tc_class(r)) continue;
        if (bad++ < 3) printf("  %s: %s[%lld] = %g, the reference's %g\n", cname, what, (long long)i, a, r);
    }
    return bad;
}

static int64_t nonfinite(const Ten &t) { /* in the host (reference) copy */
    int64_t n = 0;
    for (int64_t i = 0; i < t.count(); i++) n += tc_class(t.get(t.h, i)) != 0;
    return n;
}

struct Cfg {
    const char *name;
    selscan_dtype dt;
    int64_t batch, dim, L, N, G;
    unsigned flags;
    bool D, z, bias, h0, hlast, dhlast;
    int layout;        /* layout of (batch, dim, L) tensors and of B/C */
    int nseq;          /* packed sequences (batch 1) with this many, some empty; 0: none */
    bool ck;           /* forward checkpoint given to the backward */
    bool grads_subset; /* only some gradients */
    int ylay;          /* y's own layout (0: the case's): an L-strided y sends the forward to the general
                          kernels while the backward (no y) may take the fast ones, reading their checkpoint */
    int inf;           /* 1: an infinite u, 2: an infinite dy, at (0, 0, L / 3), every other operand positive
                          and |A| small (so every sum's sign is set: an infinity's sign, not a rounding,
                          decides each output); y, h_last and (infinite dy) every gradient's class
                          (+inf / -inf / NaN / finite) compared with the reference's element by
                          element; an infinite u's gradients finite exactly where the reference's are
                          (the general backward recovers h_prev as h - B dt u: inf - inf, NaN where
                          the reference's term is an infinity). 0: values, by tolerance */
};

enum { U, DELTA, A_, B_, C_, D_, Z, BIAS, H0, Y, HLAST, DY, DHLAST, DU, DDELTA, DA, DB, DC, DD, DZ, DBIAS, DH0, NTEN };
static const char *tname[NTEN] = {"u", "delta", "A", "B", "C", "D", "z", "delta_bias", "h0", "y", "h_last", "dy", "dh_last", "du", "ddelta", "dA", "dB", "dC", "dD", "dz", "ddelta_bias", "dh0"};

static void run_case(const Cfg &c) {
    Ten t[NTEN];
    const selscan_dtype T = c.dt, F = SELSCAN_F32;
    const int lay = c.layout;
    const int64_t rows = c.nseq ? c.nseq : c.batch;
    std::vector<int64_t> cu;
    if (c.nseq) { /* random offsets, some equal (empty sequences) */
        cu.push_back(0);
        for (int s = 1; s < c.nseq; s++) cu.push_back(irand(0, (int)c.L));
        cu.push_back(c.L);
        std::sort(cu.begin(), cu.end());
    }
    const double lo = c.inf ? 0.5 : -1; /* the operands' lower end: positive with an infinity */
    make(t[U], T, 3, c.batch, c.dim, c.L, 1, lay); fill(t[U], lo, 1);
    make(t[DELTA], T, 3, c.batch, c.dim, c.L, 1, lay);
    /* without softplus dt = delta + bias stays positive (bias >= -0.5): a negative dt grows the
       state by up to e^2 a step, past f32's range within L ~ 45 */
    if (c.flags & SELSCAN_DELTA_SOFTPLUS) fill(t[DELTA], -3, 1.5); else fill(t[DELTA], c.bias ? 0.51 : 0.01, c.bias ? 1.1 : 0.6);
    /* inf: |A dt h| stays below B u (>= 0.25) for L <= 200, so ddelta's terms keep their sign */
    make(t[A_], F, 2, c.dim, c.N, 1, 1, lay == 3 ? 3 : 0); fill(t[A_], c.inf ? -5e-4 : -4, c.inf ? -1e-4 : -0.1);
    if (c.flags & SELSCAN_FIXED_B) make(t[B_], F, 2, c.dim, c.N, 1, 1, lay); else make(t[B_], T, 4, c.batch, c.G, c.N, c.L, lay);
    fill(t[B_], lo, 1);
    if (c.flags & SELSCAN_FIXED_C) make(t[C_], F, 2, c.dim, c.N, 1, 1, lay); else make(t[C_], T, 4, c.batch, c.G, c.N, c.L, lay);
    fill(t[C_], lo, 1);
    if (c.D) { make(t[D_], F, 1, c.dim, 1, 1, 1, 0); fill(t[D_], lo, 1); }
    if (c.z) { make(t[Z], T, 3, c.batch, c.dim, c.L, 1, lay); fill(t[Z], c.inf ? 0.5 : -2, 2); }
    if (c.bias) { make(t[BIAS], F, 1, c.dim, 1, 1, 1, 0); fill(t[BIAS], -0.5, 0.5); }
    if (c.h0) { make(t[H0], F, 3, rows, c.dim, c.N, 1, lay); fill(t[H0], lo, 1); }
    make(t[Y], T, 3, c.batch, c.dim, c.L, 1, c.ylay ? c.ylay : lay);
    if (c.hlast) make(t[HLAST], F, 3, rows, c.dim, c.N, 1, lay);
    make(t[DY], T, 3, c.batch, c.dim, c.L, 1, lay); fill(t[DY], lo, 1);
    if (c.dhlast) { make(t[DHLAST], F, 3, rows, c.dim, c.N, 1, lay); fill(t[DHLAST], lo, 1); }
    if (c.inf) { /* (row 0, channel 0, step L / 3): logical index L / 3 */
        Ten &ti = t[c.inf == 1 ? U : DY];
        ti.set(c.L / 3, INFINITY);
        CU(cudaMemcpy(ti.d, ti.h, ti.bytes, cudaMemcpyHostToDevice));
    }
    const bool all = !c.grads_subset;
    make(t[DU], T, 3, c.batch, c.dim, c.L, 1, lay);
    if (all) make(t[DDELTA], T, 3, c.batch, c.dim, c.L, 1, lay);
    make(t[DA], F, 2, c.dim, c.N, 1, 1, 0);
    if (all) { if (c.flags & SELSCAN_FIXED_B) make(t[DB], F, 2, c.dim, c.N, 1, 1, 0); else make(t[DB], T, 4, c.batch, c.G, c.N, c.L, lay); }
    if (c.flags & SELSCAN_FIXED_C) make(t[DC], F, 2, c.dim, c.N, 1, 1, 0); else make(t[DC], T, 4, c.batch, c.G, c.N, c.L, lay);
    if (all) make(t[DD], F, 1, c.dim, 1, 1, 1, 0);
    if (c.z && all) make(t[DZ], T, 3, c.batch, c.dim, c.L, 1, lay);
    make(t[DBIAS], F, 1, c.dim, 1, 1, 1, 0);
    if (all) make(t[DH0], F, 3, rows, c.dim, c.N, 1, lay);

    int64_t *dcu = NULL;
    if (c.nseq) {
        CU(cudaMalloc(&dcu, cu.size() * 8));
        CU(cudaMemcpy(dcu, cu.data(), cu.size() * 8, cudaMemcpyHostToDevice));
    }
    selscan_problem p[2];
    selscan_grads g[2];
    for (int dev = 0; dev < 2; dev++) {
        selscan_problem &q = p[dev];
        memset(&q, 0, sizeof q);
        q.batch = c.batch; q.dim = c.dim; q.seqlen = c.L; q.dstate = c.N; q.n_groups = c.G; q.dtype = T; q.flags = c.flags;
        if (c.nseq) { q.cu_seqlens = cu.data(); q.n_seqs = c.nseq; }
        selscan_tensor *dst[] = {&q.u, &q.delta, &q.A, &q.B, &q.C, &q.D, &q.z, &q.delta_bias, &q.h0};
        for (int k = 0; k < Y; k++) if (t[k].h) *dst[k] = t[k].api(dev);
        if (t[Y].h) q.y = t[Y].out(dev);
        if (t[HLAST].h) q.h_last = t[HLAST].out(dev);
        selscan_grads &r = g[dev];
        memset(&r, 0, sizeof r);
        if (t[DY].h) r.dy = t[DY].api(dev);
        if (t[DY + 1].h) r.dh_last = t[DY + 1].api(dev);
        selscan_out_tensor *gd[] = {&r.du, &r.ddelta, &r.dA, &r.dB, &r.dC, &r.dD, &r.dz, &r.ddelta_bias, &r.dh0};
        for (int k = DY + 2; k < NTEN; k++) if (t[k].h) *gd[k - DY - 2] = t[k].out(dev);
    }
    /* CPU reference */
    size_t wsb = 0;
    selscan_status st = selscan_workspace_size(&p[0], NULL, &wsb);
    CHECK(st == SELSCAN_OK, "%s: cpu ws fwd %s", c.name, selscan_status_string(st));
    void *ws = NULL;
    if (posix_memalign(&ws, 64, wsb ? wsb : 64)) exit(1);
    st = selscan_forward_ref(&p[0], ws, wsb);
    CHECK(st == SELSCAN_OK, "%s: cpu fwd %s", c.name, selscan_status_string(st));
    free(ws);
    st = selscan_workspace_size(&p[0], &g[0], &wsb);
    if (posix_memalign(&ws, 64, wsb ? wsb : 64)) exit(1);
    st = selscan_backward_ref(&p[0], &g[0], ws, wsb);
    CHECK(st == SELSCAN_OK, "%s: cpu bwd %s", c.name, selscan_status_string(st));
    free(ws);

    /* GPU forward */
    cudaStream_t stream;
    CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    selscan_cuda_ext x;
    memset(&x, 0, sizeof x);
    x.cu_seqlens_device = dcu;
    cudaError_t cerr = cudaSuccess;
    x.cuda_error = &cerr;
    size_t ckb = 0;
    float *ck = NULL;
    if (c.ck) {
        CHECK(selscan_checkpoint_size_cuda(&p[1], &ckb) == SELSCAN_OK, "%s: ck size", c.name);
        CU(cudaMalloc(&ck, ckb));
        x.checkpoint_out = ck;
        x.checkpoint_bytes = ckb;
    }
    size_t gwb = 0;
    st = selscan_workspace_size_cuda_ex(&p[1], NULL, &x, &gwb);
    CHECK(st == SELSCAN_OK, "%s: gpu ws fwd %s", c.name, selscan_status_string(st));
    void *gws = NULL;
    if (gwb) CU(cudaMalloc(&gws, gwb));
    poison(t[Y]);
    if (t[HLAST].h) poison(t[HLAST]);
    /* SELSCAN_TEST_SHORTK=k: the short-prefill forward forced with k steps a lane wherever it applies (-1: never) */
    static const int shortk = getenv("SELSCAN_TEST_SHORTK") ? atoi(getenv("SELSCAN_TEST_SHORTK")) : 0;
    st = shortk ? selscan__forward_cuda_tuned(&p[1], &x, gws, gwb, stream, 0, 0, 0, shortk) : selscan_forward_cuda_ex(&p[1], &x, gws, gwb, stream);
    CHECK(st == SELSCAN_OK, "%s: gpu fwd %s (%s)", c.name, selscan_status_string(st), cudaGetErrorString(cerr));
    CU(cudaStreamSynchronize(stream));
    CU(cudaGetLastError());
    /* re-run the CPU forward for y/h_last reference (poison wiped the host copies) */
    {
        size_t b2 = 0;
        selscan_workspace_size(&p[0], NULL, &b2);
        void *w2 = NULL;
        if (posix_memalign(&w2, 64, b2 ? b2 : 64)) exit(1);
        selscan_forward_ref(&p[0], w2, b2);
        free(w2);
    }
    const double tf = tol_of(T, 0);
    if (c.inf) {
        CHECK(cls_bad(c.name, "y", t[Y], fetch(t[Y])) == 0, "%s: y's classes", c.name);
        CHECK(c.inf != 1 || nonfinite(t[Y]) > 0, "%s: the reference's y all finite (the case tests nothing)", c.name);
        if (t[HLAST].h) CHECK(cls_bad(c.name, "h_last", t[HLAST], fetch(t[HLAST])) == 0, "%s: h_last's classes", c.name);
    } else {
        double e = rel_err(t[Y], fetch(t[Y]));
        CHECK(e <= tf, "%s: y rel err %.3g > %.3g", c.name, e, tf);
        if (t[HLAST].h) {
            e = rel_err(t[HLAST], fetch(t[HLAST]));
            CHECK(e <= 1e-4, "%s: h_last rel err %.3g", c.name, e);
        }
    }
    if (gws) cudaFree(gws);
    /* GPU backward, twice, bitwise equal */
    x.checkpoint_out = NULL; /* the backward reads the forward's checkpoint, if any */
    x.checkpoint_in = c.ck ? ck : NULL;
    if (!c.ck) x.checkpoint_bytes = 0;
    st = selscan_workspace_size_cuda_ex(&p[1], &g[1], &x, &gwb);
    CHECK(st == SELSCAN_OK, "%s: gpu ws bwd %s", c.name, selscan_status_string(st));
    gws = NULL;
    if (gwb) CU(cudaMalloc(&gws, gwb));
    std::vector<std::vector<unsigned char>> first(NTEN);
    for (int rep = 0; rep < 2; rep++) {
        for (int k = DU; k < NTEN; k++) if (t[k].d) CU(cudaMemset(t[k].d, 0xff, t[k].bytes));
        if (gws) CU(cudaMemset(gws, rep ? 0x55 : 0xff, gwb));
        CU(cudaDeviceSynchronize()); /* the memsets before the backward on `stream` (see poison) */
        st = selscan_backward_cuda_ex(&p[1], &g[1], &x, gws, gwb, stream);
        CHECK(st == SELSCAN_OK, "%s: gpu bwd %s (%s)", c.name, selscan_status_string(st), cudaGetErrorString(cerr));
        CU(cudaStreamSynchronize(stream));
        CU(cudaGetLastError());
        for (int k = DU; k < NTEN; k++) {
            if (!t[k].d) continue;
            std::vector<unsigned char> v = fetch(t[k]);
            if (rep == 0 && c.inf) {
                first[k] = v;
                CHECK(cls_bad(c.name, tname[k], t[k], v, c.inf == 1) == 0, "%s: %s's classes", c.name, tname[k]);
                CHECK(c.inf != 2 || k != DU || nonfinite(t[k]) > 0, "%s: the reference's du all finite (the case tests nothing)", c.name);
            } else if (rep == 0) {
                first[k] = v;
                const double e = rel_err(t[k], v);
                const double tol = tol_of(t[k].dt, 1); /* by the output's own dtype (f32 ones of a T problem too) */
                CHECK(e <= tol, "%s: %s rel err %.3g > %.3g", c.name, tname[k], e, tol);
            } else {
                CHECK(v == first[k], "%s: %s differs between two backward calls", c.name, tname[k]);
            }
        }
    }
    if (gws) cudaFree(gws);
    if (ck) cudaFree(ck);
    if (dcu) cudaFree(dcu);
    cudaStreamDestroy(stream);
    for (int k = 0; k < NTEN; k++) release(t[k]);
}

/* ---------------------------------------------------------------------------------------------- */

/* inf_u: B, C > 0 and an infinite u at (0, 0): that channel's y an infinity of one sign (no D: no term, not 0 u, on
   every kernel as in the reference), compared class by class with the reference's (+inf, -inf, NaN) */
static void run_step_case(selscan_dtype T, int64_t batch, int64_t dim, int64_t N, int64_t G, unsigned flags, bool D,
                          bool z, bool bias, bool index, int layout, int lat = 0, bool inf_u = false) {
    const selscan_dtype F = SELSCAN_F32;
    const int64_t ncache = index ? batch + 3 : batch;
    Ten st, x, dt, A, B, C, Dt, zt, bt, y;
    make(st, F, 3, ncache, dim, N, 1, layout); fill(st, -1, 1);
    make(x, T, 2, batch, dim, 1, 1, layout); fill(x, -1, 1);
    make(dt, T, 2, batch, dim, 1, 1, layout); fill(dt, -2, 1);
    make(A, F, 2, dim, N, 1, 1, 0); fill(A, -4, -0.1);
    if (flags & SELSCAN_FIXED_B) make(B, F, 2, dim, N, 1, 1, 0); else make(B, T, 3, batch, G, N, 1, layout);
    fill(B, inf_u ? 0.1 : -1, 1);
    if (flags & SELSCAN_FIXED_C) make(C, F, 2, dim, N, 1, 1, 0); else make(C, T, 3, batch, G, N, 1, layout);
    fill(C, inf_u ? 0.1 : -1, 1);
    if (D) { make(Dt, F, 1, dim, 1, 1, 1, 0); fill(Dt, inf_u ? 0.1 : -1, 1); }
    if (z) { make(zt, T, 2, batch, dim, 1, 1, layout); fill(zt, inf_u ? 0.5 : -2, 2); }
    if (inf_u) { x.set(0, INFINITY); CU(cudaMemcpy(x.d, x.h, x.bytes, cudaMemcpyHostToDevice)); }
    if (bias) { make(bt, F, 1, dim, 1, 1, 1, 0); fill(bt, -0.5, 0.5); }
    make(y, T, 2, batch, dim, 1, 1, layout);
    std::vector<int32_t> idx(batch), idx_cpu(batch);
    int32_t *didx = NULL;
    if (index) { /* a permutation of cache rows with padding: -1 and rows >= ncache */
        std::vector<int32_t> perm(ncache);
        for (int64_t i = 0; i < ncache; i++) perm[i] = (int32_t)i;
        for (int64_t i = ncache - 1; i > 0; i--) std::swap(perm[i], perm[irand(0, (int)i)]);
        for (int64_t i = 0; i < batch; i++) {
            idx[i] = perm[i];
            if (i % 3 == 1) idx[i] = -1;
            if (i % 5 == 2) idx[i] = (int32_t)(ncache + 7);
            idx_cpu[i] = idx[i] >= ncache ? -1 : idx[i];
        }
        CU(cudaMalloc(&didx, batch * 4));
        CU(cudaMemcpy(didx, idx.data(), batch * 4, cudaMemcpyHostToDevice));
    }
    selscan_step_problem s[2];
    for (int dev = 0; dev < 2; dev++) {
        selscan_step_problem &q = s[dev];
        memset(&q, 0, sizeof q);
        q.batch = batch; q.dim = dim; q.dstate = N; q.n_groups = G; q.n_cache = ncache; q.dtype = T; q.flags = flags;
        q.state_index = index ? (dev ? didx : idx_cpu.data()) : NULL;
        q.state = st.out(dev); q.u = x.api(dev); q.delta = dt.api(dev); q.A = A.api(dev); q.B = B.api(dev); q.C = C.api(dev);
        if (D) q.D = Dt.api(dev);
        if (z) q.z = zt.api(dev);
        if (bias) q.delta_bias = bt.api(dev);
        q.y = y.out(dev);
    }
    poison(y);
    cudaError_t cerr = cudaSuccess;
    selscan_cuda_ext sx;
    memset(&sx, 0, sizeof sx);
    sx.cuda_error = &cerr;
    /* lat: step_lat_kernel forced wherever it applies (the launcher takes it up to 32 blocks an SM) */
    selscan_status r = lat ? selscan__step_cuda_tuned(&s[1], &cerr, 0, 0, 0, -1, 0, 0, 0, lat) : selscan_step_cuda_ex(&s[1], &sx, 0);
    CHECK(r == SELSCAN_OK, "step: gpu %s", selscan_status_string(r));
    CU(cudaDeviceSynchronize());
    r = selscan_step_ref(&s[0]);
    CHECK(r == SELSCAN_OK, "step: cpu %s", selscan_status_string(r));
    if (inf_u) {
        const std::vector<unsigned char> yd = fetch(y);
        int64_t bad = 0;
        for (int64_t i = 0; i < y.count(); i++) bad += tc_class(y.get(yd.data(), i)) != tc_class(y.get(y.h, i));
        CHECK(bad == 0 && tc_class(y.get(y.h, 0)) != 0 && tc_class(y.get(y.h, 0)) != 3,
              "step N=%lld dt=%d D=%d lat=%d, an infinite u: %lld elements of y not the reference's class (y[0] %g, the reference's %g)",
              (long long)N, (int)T, (int)D, lat, (long long)bad, y.get(yd.data(), 0), y.get(y.h, 0));
    } else {
        const double ey = rel_err(y, fetch(y)), es = rel_err(st, fetch(st));
        CHECK(ey <= tol_of(T, 0) && es <= 1e-5, "step N=%lld dt=%d index=%d: y err %.3g, state err %.3g", (long long)N, (int)T,
              (int)index, ey, es);
    }
    if (didx) cudaFree(didx);
    Ten *all[] = {&st, &x, &dt, &A, &B, &C, &Dt, &zt, &bt, &y};
    for (Ten *p : all) release(*p);
}

/* The step against the forward at L = 1 from the same state (h0 = the state, h_last compared with
   the updated state): bitwise equal y and state where both take their fast kernels (float4 state
   rows, N = 8 or 16, variable B / C). */
static void run_step_vs_forward(selscan_dtype T, int64_t batch, int64_t dim, int64_t N, int64_t G, unsigned flags, bool D, bool z,
                                bool bias, int lat = 0) {
    const selscan_dtype F = SELSCAN_F32;
    Ten st, h0, hl, x, dt, A, B, C, Dt, zt, bt, y, y2;
    make(st, F, 3, batch, dim, N, 1, 1); fill(st, -1, 1);
    make(h0, F, 3, batch, dim, N, 1, 1);
    memcpy(h0.h, st.h, st.bytes);
    CU(cudaMemcpy(h0.d, h0.h, h0.bytes, cudaMemcpyHostToDevice));
    make(hl, F, 3, batch, dim, N, 1, 1);
    make(x, T, 2, batch, dim, 1, 1, 1); fill(x, -1, 1);
    make(dt, T, 2, batch, dim, 1, 1, 1); fill(dt, -2, 1);
    make(A, F, 2, dim, N, 1, 1, 1); fill(A, -4, -0.1);
    make(B, T, 3, batch, G, N, 1, 1); fill(B, -1, 1);
    make(C, T, 3, batch, G, N, 1, 1); fill(C, -1, 1);
    if (D) { make(Dt, F, 1, dim, 1, 1, 1, 1); fill(Dt, -1, 1); }
    if (z) { make(zt, T, 2, batch, dim, 1, 1, 1); fill(zt, -2, 2); }
    if (bias) { make(bt, F, 1, dim, 1, 1, 1, 1); fill(bt, -0.5, 0.5); }
    make(y, T, 2, batch, dim, 1, 1, 1);
    make(y2, T, 2, batch, dim, 1, 1, 1);
    poison(y); poison(y2); poison(hl);
    /* the forward's (batch, dim, L = 1) and (batch, G, N, L = 1) views of the step's operands */
    auto as3 = [](const Ten &t) { selscan_tensor r = t.api(true); r.stride[2] = 1; r.stride[3] = 0; return r; };
    auto as3o = [](const Ten &t) { selscan_out_tensor r = t.out(true); r.stride[2] = 1; r.stride[3] = 0; return r; };
    auto as4 = [](const Ten &t) { selscan_tensor r = t.api(true); r.stride[3] = 1; return r; };
    selscan_problem p;
    memset(&p, 0, sizeof p);
    p.batch = batch; p.dim = dim; p.seqlen = 1; p.dstate = N; p.n_groups = G; p.dtype = T; p.flags = flags;
    p.u = as3(x); p.delta = as3(dt); p.A = A.api(true); p.B = as4(B); p.C = as4(C);
    if (D) p.D = Dt.api(true);
    if (z) p.z = as3(zt);
    if (bias) p.delta_bias = bt.api(true);
    p.h0 = h0.api(true); p.h_last = hl.out(true); p.y = as3o(y2);
    size_t wsb = 0;
    CHECK(selscan_workspace_size_cuda(&p, NULL, &wsb) == SELSCAN_OK, "step vs forward: workspace size");
    void *ws = NULL;
    if (wsb) CU(cudaMalloc(&ws, wsb));
    selscan_status r = selscan_forward_cuda(&p, ws, wsb, 0);
    CHECK(r == SELSCAN_OK, "step vs forward: forward %s", selscan_status_string(r));
    selscan_step_problem s;
    memset(&s, 0, sizeof s);
    s.batch = batch; s.dim = dim; s.dstate = N; s.n_groups = G; s.dtype = T; s.flags = flags;
    s.state = st.out(true); s.u = x.api(true); s.delta = dt.api(true); s.A = A.api(true); s.B = B.api(true); s.C = C.api(true);
    if (D) s.D = Dt.api(true);
    if (z) s.z = zt.api(true);
    if (bias) s.delta_bias = bt.api(true);
    s.y = y.out(true);
    r = lat ? selscan__step_cuda_tuned(&s, NULL, 0, 0, 0, -1, 0, 0, 0, lat) : selscan_step_cuda(&s, 0);
    CHECK(r == SELSCAN_OK, "step vs forward: step %s", selscan_status_string(r));
    CU(cudaDeviceSynchronize());
    const std::vector<unsigned char> ys = fetch(y), yf = fetch(y2), hs = fetch(st), hf = fetch(hl);
    CHECK(ys == yf && hs == hf, "step vs forward at L = 1 (dtype %d, batch %lld, dim %lld, N %lld, G %lld): y %s, state %s", (int)T,
          (long long)batch, (long long)dim, (long long)N, (long long)G, ys == yf ? "bitwise" : "DIFFERS", hs == hf ? "bitwise" : "DIFFERS");
    if (ws) cudaFree(ws);
    Ten *all[] = {&st, &h0, &hl, &x, &dt, &A, &B, &C, &Dt, &zt, &bt, &y, &y2};
    for (Ten *q : all) release(*q);
}

/* SELSCAN_STEP_D_T, SELSCAN_STEP_DELTA_BIAS_T, SELSCAN_STEP_STATE_T and SELSCAN_STEP_A_LOG on the
   step kernel the tuning entry forces (selscan__step_cuda_tuned's S, fast, loop, lat): D (pm bit
   0), delta_bias (bit 1) and the state (stT) in T, and A given as A_log (bit 2; A in the case's
   layout then), give bitwise the y of the same kernel with those values in f32 and A = -expf(A_log)
   computed on the device, without the flags, and its state (stT: rounded to T, to nearest even),
   and match the CPU reference with the flags. */
static __global__ void neg_expf_kernel(const float *a, float *o, int64_t n) { /* o = -expf(a), elementwise */
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) o[i] = -expf(a[i]);
}
struct step_force {
    const char *name;
    int S, fast, loop, lat; /* as selscan__step_cuda_tuned takes them */
};
static const step_force kForce[] = {
    {"step_kernel", -1, 0, -1, -1},         /* S < 0: the float4 kernels skipped */
    {"step_vec_kernel", 0, -1, -1, -1},     /* its general form (every layout) */
    {"step_vec_kernel FAST", 0, 0, -1, -1}, /* the common operands' form */
    {"step_loop_kernel", 0, 0, 1, -1},      /* N = 16, FAST operands */
    {"step_lat_kernel", 0, 0, 0, 1},        /* N = 16, FAST operands */
};
static void run_step_params_t(selscan_dtype T, int64_t batch, int64_t dim, int64_t N, int64_t G, unsigned flags, bool z, bool index,
                              int layout, const step_force &f, bool stT, int pm = 3) {
    const selscan_dtype F = SELSCAN_F32;
    const int64_t ncache = index ? batch + 2 : batch;
    Ten st, st32, x, dt, A, Ae, B, C, DT, bT, D32, b32, zt, y;
    make(st, stT ? T : F, 3, ncache, dim, N, 1, layout); fill(st, -1, 1);
    make(st32, F, 3, ncache, dim, N, 1, layout); /* st's values in f32 */
    for (int64_t i = 0; i < st.count(); i++) st32.set(i, st.get(st.h, i));
    CU(cudaMemcpy(st32.d, st32.h, st32.bytes, cudaMemcpyHostToDevice));
    make(x, T, 2, batch, dim, 1, 1, layout); fill(x, -1, 1);
    make(dt, T, 2, batch, dim, 1, 1, layout); fill(dt, -2, 1);
    const bool alog = (pm & 4) != 0;
    /* A, or A_log and Ae = -expf(A_log) by the device's expf. A_log's range gives A in [-3.97,
       -0.135], the plain A's magnitudes. With A_log up to 3 (A down to -20) f16 cases gave inf on
       an H100: the calls without softplus have dt down to -2.5, and exp(-dt |A|) past e^11
       overflows an f16 state (the explanation; the narrower range made them pass) */
    make(A, F, 2, dim, N, 1, 1, alog ? layout : 1);
    if (alog) {
        fill(A, -2, 1.38f);
        make(Ae, F, 2, dim, N, 1, 1, layout);
        const int64_t ne = static_cast<int64_t>(A.bytes / 4);
        neg_expf_kernel<<<static_cast<unsigned>((ne + 127) / 128), 128>>>(static_cast<const float *>(A.d), static_cast<float *>(Ae.d), ne);
        CU(cudaGetLastError());
        CU(cudaMemcpy(Ae.h, Ae.d, Ae.bytes, cudaMemcpyDeviceToHost));
    } else {
        fill(A, -4, -0.1);
    }
    make(B, T, 3, batch, G, N, 1, layout); fill(B, -1, 1);
    make(C, T, 3, batch, G, N, 1, layout); fill(C, -1, 1);
    if (z) { make(zt, T, 2, batch, dim, 1, 1, layout); fill(zt, -2, 2); }
    /* beside aligned operands: D one element past an aligned address, delta_bias strided */
    make(DT, T, 1, dim, 1, 1, 1, layout == 1 ? 4 : 1); fill(DT, -1, 1);
    make(bT, T, 1, dim, 1, 1, 1, layout == 1 ? 3 : 1); fill(bT, -0.5, 0.5);
    make(D32, F, 1, dim, 1, 1, 1, 1);
    make(b32, F, 1, dim, 1, 1, 1, 1);
    for (int64_t i = 0; i < dim; i++) { D32.set(i, DT.get(DT.h, i)); b32.set(i, bT.get(bT.h, i)); }
    CU(cudaMemcpy(D32.d, D32.h, D32.bytes, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(b32.d, b32.h, b32.bytes, cudaMemcpyHostToDevice));
    make(y, T, 2, batch, dim, 1, 1, layout);
    std::vector<int32_t> idx(batch), idx_cpu(batch);
    int32_t *didx = NULL;
    if (index) { /* cache rows reversed, padding: -1 and a row past n_cache */
        for (int64_t i = 0; i < batch; i++) {
            idx[i] = (int32_t)(ncache - 1 - i);
            if (i % 4 == 1) idx[i] = -1;
            if (i % 5 == 3) idx[i] = (int32_t)(ncache + 3);
            idx_cpu[i] = idx[i] >= ncache ? -1 : idx[i];
        }
        CU(cudaMalloc(&didx, batch * 4));
        CU(cudaMemcpy(didx, idx.data(), batch * 4, cudaMemcpyHostToDevice));
    }
    auto problem = [&](bool dev, bool tv) { /* tv: the T values with their flags, else all f32 */
        selscan_step_problem q;
        memset(&q, 0, sizeof q);
        q.batch = batch; q.dim = dim; q.dstate = N; q.n_groups = G; q.n_cache = ncache; q.dtype = T;
        q.flags = flags | (tv ? (pm & 1 ? SELSCAN_STEP_D_T : 0u) | (pm & 2 ? SELSCAN_STEP_DELTA_BIAS_T : 0u) |
                                    (stT ? SELSCAN_STEP_STATE_T : 0u) | (alog ? SELSCAN_STEP_A_LOG : 0u)
                              : 0u);
        q.state_index = index ? (dev ? didx : idx_cpu.data()) : NULL;
        q.state = tv ? st.out(dev) : st32.out(dev); q.u = x.api(dev); q.delta = dt.api(dev); q.B = B.api(dev); q.C = C.api(dev);
        q.A = alog && !tv ? Ae.api(dev) : A.api(dev);
        q.D = tv && (pm & 1) ? DT.api(dev) : D32.api(dev);
        q.delta_bias = tv && (pm & 2) ? bT.api(dev) : b32.api(dev);
        if (z) q.z = zt.api(dev);
        q.y = y.out(dev);
        return q;
    };
    cudaError_t cerr = cudaSuccess;
    auto run = [&](const selscan_step_problem &q) {
        poison(y);
        const selscan_status r = selscan__step_cuda_tuned(&q, &cerr, 0, f.S, 0, -1, f.fast, 0, f.loop, f.lat);
        CU(cudaDeviceSynchronize());
        return r;
    };
    selscan_status r = run(problem(true, true));
    CHECK(r == SELSCAN_OK, "params T (%s): gpu %s", f.name, selscan_status_string(r));
    const std::vector<unsigned char> yT = fetch(y), sT = fetch(st);
    r = run(problem(true, false));
    CHECK(r == SELSCAN_OK, "params T (%s): gpu f32 parameters %s", f.name, selscan_status_string(r));
    const std::vector<unsigned char> y32 = fetch(y), s32 = fetch(st32);
    bool same_state = true; /* st's elements: st32's, rounded to T where st is T */
    for (int64_t i = 0; i < st.count(); i++) {
        const float v = st32.get(s32.data(), i);
        const uint16_t want = T == SELSCAN_F16 ? selscan_f32_to_f16(v) : selscan_f32_to_bf16(v);
        if (stT) same_state &= memcmp(sT.data() + st.off(i) * 2, &want, 2) == 0;
        else same_state &= memcmp(sT.data() + st.off(i) * 4, &v, 4) == 0;
    }
    CHECK(yT == y32 && same_state, "params T%s%s (%s, dtype %d, batch %lld, dim %lld, N %lld, G %lld, layout %d): y %s, state %s than f32 values",
          stT ? ", state T" : "", alog ? ", A_log" : "", f.name, (int)T, (long long)batch, (long long)dim, (long long)N, (long long)G, layout,
          yT == y32 ? "bitwise" : "DIFFERS", same_state ? "bitwise" : "DIFFERS");
    const selscan_step_problem h = problem(false, true);
    r = selscan_step_ref(&h); /* on the host copies: the state's initial values, y */
    CHECK(r == SELSCAN_OK, "params T: cpu %s", selscan_status_string(r));
    const double ey = rel_err(y, yT), es = rel_err(st, sT);
    CHECK(ey <= tol_of(T, 0) && es <= tc_tol_lowp(stT ? T : SELSCAN_F32, 1e-5, 2), "params T%s%s (%s, dtype %d, N %lld): y err %.3g, state err %.3g",
          stT ? ", state T" : "", alog ? ", A_log" : "", f.name, (int)T, (long long)N, ey, es);
    if (didx) cudaFree(didx);
    Ten *all[] = {&st, &st32, &x, &dt, &A, &Ae, &B, &C, &DT, &bT, &D32, &b32, &zt, &y};
    for (Ten *p : all) release(*p);
}

/* ---------------------------------------------------------------------------------------------- */

static void validation_tests() {
    const int64_t b = 2, dim = 8, L = 40, N = 4;
    Ten u, dl, A, B, C, y, dy, du;
    make(u, SELSCAN_F32, 3, b, dim, L, 1, 0); fill(u, -1, 1);
    make(dl, SELSCAN_F32, 3, b, dim, L, 1, 0); fill(dl, 0, 1);
    make(A, SELSCAN_F32, 2, dim, N, 1, 1, 0); fill(A, -1, -0.1);
    make(B, SELSCAN_F32, 4, b, 1, N, L, 0); fill(B, -1, 1);
    make(C, SELSCAN_F32, 4, b, 1, N, L, 0); fill(C, -1, 1);
    make(y, SELSCAN_F32, 3, b, dim, L, 1, 0);
    make(dy, SELSCAN_F32, 3, b, dim, L, 1, 0); fill(dy, -1, 1);
    make(du, SELSCAN_F32, 3, b, dim, L, 1, 0);
    selscan_problem p;
    memset(&p, 0, sizeof p);
    p.batch = b; p.dim = dim; p.seqlen = L; p.dstate = N; p.dtype = SELSCAN_F32;
    p.u = u.api(1); p.delta = dl.api(1); p.A = A.api(1); p.B = B.api(1); p.C = C.api(1); p.y = y.out(1);
    selscan_grads g;
    memset(&g, 0, sizeof g);
    g.dy = dy.api(1); g.du = du.out(1);
    auto y_untouched = [&]() {
        std::vector<unsigned char> v = fetch(y);
        for (unsigned char ch : v) if (ch != 0xff) return false;
        return true;
    };
    auto expect = [&](selscan_problem q, const char *what, selscan_status want, void *ws = NULL, size_t wsb = 0) {
        poison(y);
        selscan_status s = selscan_forward_cuda(&q, ws, wsb, 0);
        CU(cudaDeviceSynchronize());
        CHECK(s == want && y_untouched(), "validation %s: got %s, want %s", what, selscan_status_string(s), selscan_status_string(want));
    };
    { selscan_problem q = p; q.u.data = NULL; expect(q, "null u", SELSCAN_ERR_NULL); }
    { selscan_problem q = p; q.n_groups = 3; expect(q, "groups", SELSCAN_ERR_SHAPE); }
    { selscan_problem q = p; q.dtype = (selscan_dtype)7; expect(q, "dtype", SELSCAN_ERR_DTYPE); }
    { selscan_problem q = p; q.flags = 1u << 10; expect(q, "flags", SELSCAN_ERR_UNSUPPORTED); }
    { selscan_problem q = p; q.y.data = u.d; expect(q, "y aliases u", SELSCAN_ERR_ALIAS); }
    { selscan_problem q = p; q.y.stride[0] = dim * L; q.y.stride[1] = 0; q.y.stride[2] = 1; expect(q, "y overlapping strides", SELSCAN_ERR_STRIDE); }
    { selscan_problem q = p; q.seqlen = 0; expect(q, "L 0", SELSCAN_ERR_SHAPE); }
    {
        int64_t cu[3] = {0, 10, L};
        selscan_problem q = p; q.batch = 1; q.cu_seqlens = cu; q.n_seqs = 2;
        q.u.stride[0] = dim * L; q.u.stride[1] = L; q.u.stride[2] = 1; /* batch-1 views */
        expect(q, "packed without device offsets", SELSCAN_ERR_NULL);
        int64_t bad[3] = {0, 30, 10};
        q.cu_seqlens = bad;
        expect(q, "decreasing offsets", SELSCAN_ERR_SHAPE);
    }
    {
        selscan_problem q = p; q.dstate = 4096; q.A.data = NULL; /* null first */
        expect(q, "null A", SELSCAN_ERR_NULL);
    }
    {   /* workspace: a problem that needs one (small batch*dim: L chunks) */
        selscan_problem q = p;
        size_t need = 0;
        CHECK(selscan_workspace_size_cuda(&q, NULL, &need) == SELSCAN_OK, "ws size");
        if (need) expect(q, "missing workspace", SELSCAN_ERR_WORKSPACE);
        size_t needb = 0;
        CHECK(selscan_workspace_size_cuda(&q, &g, &needb) == SELSCAN_OK && needb > 0, "bwd ws size %zu", needb);
        void *w = NULL, *wbig = NULL;
        CU(cudaMalloc(&w, needb));
        CU(cudaMemset(du.d, 0xff, du.bytes));
        selscan_diag dg = {NULL, NULL, SELSCAN_RULE_NONE};
        q.diag = &dg;
        /* the reported size holds 255 bytes of alignment slack: 256 less is too small */
        selscan_status s = selscan_backward_cuda(&q, &g, w, needb - 256, 0);
        CHECK(s == SELSCAN_ERR_WORKSPACE && dg.operand && !strcmp(dg.operand, "workspace") && !strcmp(dg.rule, "too small"),
              "bwd small workspace: %s (%s: %s)", selscan_status_string(s), dg.operand, dg.rule);
        dg.operand = dg.rule = NULL;
        s = selscan_backward_cuda(&q, &g, NULL, needb, 0);
        CHECK(s == SELSCAN_ERR_WORKSPACE && dg.operand && !strcmp(dg.operand, "workspace"), "bwd null workspace: %s", selscan_status_string(s));
        std::vector<unsigned char> v0 = fetch(du);
        bool untouched0 = true;
        for (unsigned char ch : v0) untouched0 = untouched0 && ch == 0xff;
        CHECK(untouched0, "bwd workspace errors wrote du");
        /* any pointer: a buffer of the reported size at every misalignment gives bitwise the
           aligned call's gradients */
        s = selscan_backward_cuda(&q, &g, w, needb, 0);
        CU(cudaDeviceSynchronize());
        CHECK(s == SELSCAN_OK, "bwd aligned workspace: %s", selscan_status_string(s));
        const std::vector<unsigned char> ref = fetch(du);
        CU(cudaMalloc(&wbig, needb + 256));
        for (int off : {1, 4, 16, 64, 200, 255}) {
            CU(cudaMemset(du.d, 0xff, du.bytes));
            CU(cudaMemset(wbig, 0x55, needb + 256));
            s = selscan_backward_cuda(&q, &g, (char *)wbig + off, needb, 0);
            CU(cudaDeviceSynchronize());
            CHECK(s == SELSCAN_OK && fetch(du) == ref, "bwd workspace at +%d bytes: %s or results differ", off, selscan_status_string(s));
            size_t fneed = 0;
            CHECK(selscan_workspace_size_cuda(&q, NULL, &fneed) == SELSCAN_OK, "fwd ws size");
            poison(y);
            s = selscan_forward_cuda(&q, fneed ? (char *)wbig + off : NULL, fneed, 0);
            CU(cudaDeviceSynchronize());
            CHECK(s == SELSCAN_OK && !y_untouched(), "fwd workspace at +%d bytes: %s", off, selscan_status_string(s));
        }
        CU(cudaMemset(du.d, 0xff, du.bytes));
        q.diag = NULL;
        selscan_grads g2 = g; g2.du.data = w;
        s = selscan_backward_cuda(&q, &g2, w, needb, 0);
        CHECK(s == SELSCAN_ERR_ALIAS, "bwd du aliases workspace: %s", selscan_status_string(s));
        selscan_grads g3 = g; g3.dy.data = NULL;
        s = selscan_backward_cuda(&q, &g3, w, needb, 0);
        CHECK(s == SELSCAN_ERR_NULL, "bwd null dy: %s", selscan_status_string(s));
        selscan_grads g4 = g; g4.dz = dy.out(1);
        s = selscan_backward_cuda(&q, &g4, w, needb, 0);
        CHECK(s == SELSCAN_ERR_NULL, "bwd dz without z: %s", selscan_status_string(s));
        std::vector<unsigned char> v = fetch(du);
        bool untouched = true;
        for (unsigned char ch : v) untouched = untouched && ch == 0xff;
        CHECK(untouched, "bwd errors wrote du");
        selscan_problem q2 = q; q2.dstate = 1024; /* backward limit 512 */
        Ten A2; make(A2, SELSCAN_F32, 2, dim, 1024, 1, 1, 0); fill(A2, -1, -0.1);
        Ten B2; make(B2, SELSCAN_F32, 4, b, 1, 1024, L, 0); fill(B2, -1, 1);
        q2.A = A2.api(1); q2.B = B2.api(1); q2.C = B2.api(1);
        size_t n2 = 0;
        s = selscan_workspace_size_cuda(&q2, &g, &n2);
        CHECK(s == SELSCAN_ERR_UNSUPPORTED, "bwd N=1024: %s", selscan_status_string(s));
        release(A2); release(B2);
        cudaFree(w);
        cudaFree(wbig);
    }
    {   /* the CUDA-only checks name their operand */
        selscan_diag dg = {NULL, NULL, SELSCAN_RULE_NONE};
        selscan_problem q = p;
        q.diag = &dg;
        selscan_cuda_ext x;
        memset(&x, 0, sizeof x);
        size_t ckb = 0;
        CHECK(selscan_checkpoint_size_cuda(&q, &ckb) == SELSCAN_OK && ckb > 0, "ck size");
        float *ck = NULL;
        CU(cudaMalloc(&ck, ckb));
        x.checkpoint_out = ck;
        x.checkpoint_bytes = ckb - 4;
        size_t fneed = 0;
        CHECK(selscan_workspace_size_cuda(&q, NULL, &fneed) == SELSCAN_OK, "fwd ws size");
        void *w = NULL;
        if (fneed) CU(cudaMalloc(&w, fneed));
        poison(y);
        selscan_status s = selscan_forward_cuda_ex(&q, &x, w, fneed, 0);
        CU(cudaDeviceSynchronize());
        CHECK(s == SELSCAN_ERR_WORKSPACE && y_untouched() && dg.operand && !strcmp(dg.operand, "checkpoint") && !strcmp(dg.rule, "too small"),
              "fwd small checkpoint: %s (%s)", selscan_status_string(s), dg.operand);
        x.checkpoint_bytes = ckb;
        x.checkpoint_out = (float *)y.d; /* the checkpoint over y */
        dg.operand = NULL;
        s = selscan_forward_cuda_ex(&q, &x, w, fneed, 0);
        CHECK(s == SELSCAN_ERR_ALIAS && dg.operand && !strcmp(dg.operand, "checkpoint"), "fwd checkpoint over y: %s", selscan_status_string(s));
        x.checkpoint_out = NULL;
        x.checkpoint_in = ck;
        x.checkpoint_bytes = ckb - 4;
        dg.operand = NULL;
        size_t bneed = 0;
        CHECK(selscan_workspace_size_cuda_ex(&q, &g, &x, &bneed) == SELSCAN_OK, "bwd ws size");
        void *wb = NULL;
        if (bneed) CU(cudaMalloc(&wb, bneed));
        CU(cudaMemset(du.d, 0xff, du.bytes));
        s = selscan_backward_cuda_ex(&q, &g, &x, wb, bneed, 0);
        CHECK(s == SELSCAN_ERR_WORKSPACE && dg.operand && !strcmp(dg.operand, "checkpoint"), "bwd small checkpoint: %s", selscan_status_string(s));
        x.checkpoint_bytes = ckb;
        selscan_grads g2 = g;
        g2.du.data = ck; /* du over the checkpoint it reads */
        dg.operand = NULL;
        s = selscan_backward_cuda_ex(&q, &g2, &x, wb, bneed, 0);
        CHECK(s == SELSCAN_ERR_ALIAS && dg.operand && !strcmp(dg.operand, "checkpoint"), "bwd du over the checkpoint: %s", selscan_status_string(s));
        g2 = g;
        g2.du.data = wb;
        dg.operand = NULL;
        s = selscan_backward_cuda_ex(&q, &g2, &x, wb, bneed, 0);
        CHECK(s == SELSCAN_ERR_ALIAS && dg.operand && (!strcmp(dg.operand, "workspace") || !strcmp(dg.operand, "du")),
              "bwd du over the workspace: %s (%s)", selscan_status_string(s), dg.operand);
        std::vector<unsigned char> v = fetch(du);
        bool untouched = true;
        for (unsigned char ch : v) untouched = untouched && ch == 0xff;
        CHECK(untouched, "bwd checkpoint errors wrote du");
        {
            int64_t cu[3] = {0, 10, L};
            selscan_problem qp = q;
            qp.batch = 1; qp.cu_seqlens = cu; qp.n_seqs = 2;
            dg.operand = NULL;
            s = selscan_forward_cuda(&qp, w, fneed, 0);
            CHECK(s == SELSCAN_ERR_NULL && dg.operand && !strcmp(dg.operand, "cu_seqlens_device"), "packed without device offsets: %s (%s)",
                  selscan_status_string(s), dg.operand);
        }
        if (w) cudaFree(w);
        if (wb) cudaFree(wb);
        cudaFree(ck);
    }
    {   /* ext->workspace_alloc: asked once, after every check, for what the call needs on this
           device (any address); NULL from it refuses the call with the outputs untouched */
        struct Pool {
            int calls = 0;
            size_t asked = 0;
            bool fail = false;
            void *mem = NULL;
            static void *alloc(void *ctx, size_t bytes) {
                Pool *pl = static_cast<Pool *>(ctx);
                pl->calls++;
                pl->asked = bytes;
                if (pl->fail || cudaMalloc(&pl->mem, bytes + 16) != cudaSuccess) return NULL;
                return static_cast<char *>(pl->mem) + 3; /* any address */
            }
            void reset(bool f) {
                if (mem) cudaFree(mem);
                mem = NULL;
                calls = 0;
                asked = 0;
                fail = f;
            }
        } pool;
        selscan_cuda_ext x;
        memset(&x, 0, sizeof x);
        x.workspace_alloc = &Pool::alloc;
        x.workspace_ctx = &pool;
        selscan_diag dg = {NULL, NULL, SELSCAN_RULE_NONE};
        selscan_problem q = p;
        q.diag = &dg;
        size_t needb = 0;
        CHECK(selscan_workspace_size_cuda(&q, &g, &needb) == SELSCAN_OK && needb > 0, "bwd ws size %zu", needb);
        void *w = NULL;
        CU(cudaMalloc(&w, needb));
        CU(cudaMemset(du.d, 0xff, du.bytes));
        selscan_status s = selscan_backward_cuda(&q, &g, w, needb, 0);
        CU(cudaDeviceSynchronize());
        const std::vector<unsigned char> ref = fetch(du);
        CU(cudaMemset(du.d, 0xff, du.bytes));
        pool.reset(false);
        s = selscan_backward_cuda_ex(&q, &g, &x, NULL, 0, 0);
        CU(cudaDeviceSynchronize());
        CHECK(s == SELSCAN_OK && pool.calls == 1 && pool.asked > 0 && pool.asked <= needb && fetch(du) == ref,
              "bwd workspace_alloc: %s, %d calls, %zu bytes of %zu, results %s", selscan_status_string(s), pool.calls, pool.asked,
              needb, fetch(du) == ref ? "equal" : "differ");
        CU(cudaMemset(du.d, 0xff, du.bytes));
        pool.reset(true);
        s = selscan_backward_cuda_ex(&q, &g, &x, NULL, 0, 0);
        CU(cudaDeviceSynchronize());
        std::vector<unsigned char> v = fetch(du);
        bool untouched = true;
        for (unsigned char ch : v) untouched = untouched && ch == 0xff;
        CHECK(s == SELSCAN_ERR_WORKSPACE && pool.calls == 1 && untouched && dg.operand && !strcmp(dg.operand, "workspace") &&
                  !strcmp(dg.rule, "allocation failed"),
              "bwd workspace_alloc failing: %s, %d calls", selscan_status_string(s), pool.calls);
        pool.reset(false);
        selscan_grads g3 = g;
        g3.dy.data = NULL;
        s = selscan_backward_cuda_ex(&q, &g3, &x, NULL, 0, 0);
        CHECK(s == SELSCAN_ERR_NULL && pool.calls == 0, "bwd workspace_alloc on a bad call: %s, %d calls", selscan_status_string(s),
              pool.calls);
        selscan_problem q4 = q;
        q4.y.data = u.d;
        s = selscan_forward_cuda_ex(&q4, &x, NULL, 0, 0);
        CHECK(s == SELSCAN_ERR_ALIAS && pool.calls == 0, "fwd workspace_alloc on a bad call: %s, %d calls", selscan_status_string(s),
              pool.calls);
        poison(y);
        s = selscan_forward_cuda_ex(&q, &x, NULL, 0, 0);
        CU(cudaDeviceSynchronize());
        size_t fneed = 0;
        CHECK(selscan_workspace_size_cuda(&q, NULL, &fneed) == SELSCAN_OK, "fwd ws size");
        CHECK(s == SELSCAN_OK && !y_untouched() && pool.calls <= 1 && pool.asked <= fneed, "fwd workspace_alloc: %s, %d calls, %zu bytes",
              selscan_status_string(s), pool.calls, pool.asked);
        pool.reset(false);
        cudaFree(w);
        /* the short-prefill forward (one channel block, L 1024, no checkpoint) uses no workspace:
           none is asked for and none is needed, whatever the reported size says */
        const int64_t sd = 64, sL = 1024, sN = 16;
        Ten su, sdl, sA, sB, sC, sy;
        make(su, SELSCAN_F32, 3, 1, sd, sL, 1, 0); fill(su, -1, 1);
        make(sdl, SELSCAN_F32, 3, 1, sd, sL, 1, 0); fill(sdl, 0, 0.2);
        make(sA, SELSCAN_F32, 2, sd, sN, 1, 1, 0); fill(sA, -1, -0.1);
        make(sB, SELSCAN_F32, 4, 1, 1, sN, sL, 0); fill(sB, -1, 1);
        make(sC, SELSCAN_F32, 4, 1, 1, sN, sL, 0); fill(sC, -1, 1);
        make(sy, SELSCAN_F32, 3, 1, sd, sL, 1, 0);
        selscan_problem ps;
        memset(&ps, 0, sizeof ps);
        ps.batch = 1; ps.dim = sd; ps.seqlen = sL; ps.dstate = sN; ps.dtype = SELSCAN_F32;
        ps.u = su.api(1); ps.delta = sdl.api(1); ps.A = sA.api(1); ps.B = sB.api(1); ps.C = sC.api(1); ps.y = sy.out(1);
        CU(cudaMemset(sy.d, 0xff, sy.bytes));
        s = selscan_forward_cuda_ex(&ps, &x, NULL, 0, 0);
        CU(cudaDeviceSynchronize());
        const std::vector<unsigned char> ys = fetch(sy);
        CHECK(s == SELSCAN_OK && pool.calls == 0 && ys != std::vector<unsigned char>(ys.size(), 0xff),
              "short forward with workspace_alloc: %s, %d calls", selscan_status_string(s), pool.calls);
        s = selscan_forward_cuda(&ps, NULL, 0, 0);
        CU(cudaDeviceSynchronize());
        CHECK(s == SELSCAN_OK && fetch(sy) == ys, "short forward without a workspace: %s", selscan_status_string(s));
        pool.reset(false);
        Ten *st[] = {&su, &sdl, &sA, &sB, &sC, &sy};
        for (Ten *t : st) release(*t);
    }
    {   /* step: bad sizes, aliasing */
        selscan_step_problem s;
        memset(&s, 0, sizeof s);
        s.batch = 2; s.dim = dim; s.dstate = N; s.dtype = SELSCAN_F32;
        s.state = u.out(1); s.u = dl.api(1); s.delta = dl.api(1); s.A = A.api(1); s.B = B.api(1); s.C = C.api(1); s.y = y.out(1);
        s.n_cache = 5; /* without an index n_cache must equal batch */
        CHECK(selscan_step_cuda(&s, 0) == SELSCAN_ERR_SHAPE, "step n_cache without index");
        s.n_cache = 0; s.y.data = u.d;
        CHECK(selscan_step_cuda(&s, 0) == SELSCAN_ERR_ALIAS, "step y aliases state");
    }
    Ten *all[] = {&u, &dl, &A, &B, &C, &y, &dy, &du};
    for (Ten *t : all) release(*t);
}

/* What the launchers refuse on the host, before anything is launched, whatever the sizes: byte
   counts past int64 (SELSCAN_ERR_SHAPE), grids past 2^31 - 1 blocks and N past 512
   (SELSCAN_ERR_UNSUPPORTED), each naming its operand. Broadcast-free but never allocated: the
   tensors are fake device addresses, never dereferenced (a launch would fault, and without a GPU
   return SELSCAN_ERR_CUDA: either fails the test). Runs without a GPU too. */
static void host_validation_tests() {
    auto fake = [](uint64_t a) { return reinterpret_cast<void *>(static_cast<uintptr_t>(a)); };
    const uint64_t in_at = 0x10000, out1 = 1ull << 61, out2 = 1ull << 62;
    auto diag_is = [](const selscan_diag &d, const char *operand, const char *rule) {
        return d.operand && d.rule && !strcmp(d.operand, operand) && (!rule || !strcmp(d.rule, rule));
    };
    selscan_diag dg = {NULL, NULL, SELSCAN_RULE_NONE};
    selscan_problem p;
    memset(&p, 0, sizeof p);
    p.dtype = SELSCAN_F32;
    p.diag = &dg;
    p.u.data = p.delta.data = p.A.data = p.B.data = p.C.data = fake(in_at);
    selscan_grads g;
    memset(&g, 0, sizeof g);
    g.dy.data = fake(in_at);
    g.dA.data = fake(out2);
    size_t b = 0;
    selscan_status s;
    {   /* checkpoint and backward workspace bytes past int64 (dim 2^18, L 2^40, N 512: the 16-step
           checkpoint alone is 2^65 bytes); the counts themselves pass the CPU's validation */
        selscan_problem q = p;
        q.batch = 1; q.dim = 1 << 18; q.seqlen = 1ll << 40; q.dstate = 512;
        CHECK(selscan_validate_grads(&q, &g) == SELSCAN_OK, "host: the huge problem is valid");
        dg.operand = dg.rule = NULL;
        s = selscan_checkpoint_size_cuda(&q, &b);
        CHECK(s == SELSCAN_ERR_SHAPE && diag_is(dg, "checkpoint", "size overflows"), "host: checkpoint size overflow: %s", selscan_status_string(s));
        dg.operand = dg.rule = NULL;
        s = selscan_workspace_size_cuda(&q, &g, &b);
        CHECK(s == SELSCAN_ERR_SHAPE && diag_is(dg, "workspace", "size overflows"), "host: bwd workspace overflow: %s", selscan_status_string(s));
        dg.operand = dg.rule = NULL;
        s = selscan_backward_cuda(&q, &g, NULL, 0, 0);
        CHECK(s == SELSCAN_ERR_SHAPE && diag_is(dg, "workspace", "size overflows"), "host: bwd overflow: %s", selscan_status_string(s));
    }
    {   /* 2^32 channel blocks: past the grid limit (the old plans would have cast the count to 32 bits) */
        selscan_problem q = p;
        q.batch = 1ll << 32; q.dim = 1; q.seqlen = 1; q.dstate = 1;
        q.y.data = fake(out1);
        dg.operand = dg.rule = NULL;
        s = selscan_workspace_size_cuda(&q, NULL, &b);
        CHECK(s == SELSCAN_ERR_UNSUPPORTED && diag_is(dg, "dim", NULL), "host: fwd grid: %s", selscan_status_string(s));
        dg.operand = dg.rule = NULL;
        s = selscan_forward_cuda(&q, NULL, 0, 0);
        CHECK(s == SELSCAN_ERR_UNSUPPORTED && diag_is(dg, "dim", NULL), "host: fwd grid launch: %s", selscan_status_string(s));
        dg.operand = dg.rule = NULL;
        s = selscan_backward_cuda(&q, &g, NULL, 0, 0);
        CHECK(s == SELSCAN_ERR_UNSUPPORTED && diag_is(dg, "dim", NULL), "host: bwd grid launch: %s", selscan_status_string(s));
    }
    {   /* N = 2^40 (the old plan's power-of-two loop overflowed an int on it) */
        selscan_problem q = p;
        q.batch = 1; q.dim = 1; q.seqlen = 1; q.dstate = 1ll << 40;
        q.y.data = fake(out1);
        dg.operand = dg.rule = NULL;
        s = selscan_workspace_size_cuda(&q, NULL, &b);
        CHECK(s == SELSCAN_ERR_UNSUPPORTED && diag_is(dg, "dstate", NULL), "host: N 2^40 fwd: %s", selscan_status_string(s));
        dg.operand = dg.rule = NULL;
        s = selscan_workspace_size_cuda(&q, &g, &b);
        CHECK(s == SELSCAN_ERR_UNSUPPORTED && diag_is(dg, "dstate", NULL), "host: N 2^40 bwd: %s", selscan_status_string(s));
        q.dstate = 513;
        s = selscan_forward_cuda(&q, NULL, 0, 0);
        CHECK(s == SELSCAN_ERR_UNSUPPORTED, "host: N 513 fwd: %s", selscan_status_string(s));
    }
    {   /* the step's SELSCAN_STEP_PARAMS_T: refused by the scan's forward and backward */
        selscan_problem q = p;
        q.batch = 1; q.dim = 4; q.seqlen = 8; q.dstate = 4; q.flags = SELSCAN_STEP_PARAMS_T;
        q.y.data = fake(out1);
        dg.operand = dg.rule = NULL;
        s = selscan_forward_cuda(&q, NULL, 0, 0);
        CHECK(s == SELSCAN_ERR_UNSUPPORTED && diag_is(dg, "flags", "unknown flag"), "host: fwd SELSCAN_STEP_PARAMS_T: %s",
              selscan_status_string(s));
        dg.operand = dg.rule = NULL;
        s = selscan_backward_cuda(&q, &g, NULL, 0, 0);
        CHECK(s == SELSCAN_ERR_UNSUPPORTED && diag_is(dg, "flags", "unknown flag"), "host: bwd SELSCAN_STEP_PARAMS_T: %s",
              selscan_status_string(s));
    }
    {   /* the step: 2^33 rows of one channel, past the grid limit */
        selscan_step_problem t;
        memset(&t, 0, sizeof t);
        t.batch = 1ll << 33; t.dim = 1; t.dstate = 4; t.dtype = SELSCAN_F32; t.diag = &dg;
        t.state.data = fake(out1); t.y.data = fake(out2);
        t.u.data = t.delta.data = t.A.data = t.B.data = t.C.data = fake(in_at);
        dg.operand = dg.rule = NULL;
        s = selscan_step_cuda(&t, 0);
        CHECK(s == SELSCAN_ERR_UNSUPPORTED && diag_is(dg, "dim", NULL), "host: step grid: %s", selscan_status_string(s));
    }
    {   /* packed sequences without their device copy */
        int64_t cu[3] = {0, 3, 8};
        selscan_problem q = p;
        q.batch = 1; q.dim = 4; q.seqlen = 8; q.dstate = 4; q.cu_seqlens = cu; q.n_seqs = 2;
        q.y.data = fake(out1);
        dg.operand = dg.rule = NULL;
        s = selscan_forward_cuda(&q, NULL, 0, 0);
        CHECK(s == SELSCAN_ERR_NULL && diag_is(dg, "cu_seqlens_device", NULL), "host: packed without device offsets: %s", selscan_status_string(s));
        dg.operand = dg.rule = NULL;
        s = selscan_backward_cuda(&q, &g, NULL, 0, 0);
        CHECK(s == SELSCAN_ERR_NULL && diag_is(dg, "cu_seqlens_device", NULL), "host: bwd packed without device offsets: %s", selscan_status_string(s));
    }
}

int main() {
    host_validation_tests();
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        return report_no_gpu(SELSCAN_CUDA_CHANNELS_LAST ? "test_cuda (SELSCAN_CUDA_CHANNELS_LAST)" : "test_cuda");
    }
    cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    const char *qe = getenv("SELSCAN_TEST_QUICK");
    const bool quick = qe && strcmp(qe, "0") != 0;
    printf("test_cuda%s on %s%s\n", SELSCAN_CUDA_CHANNELS_LAST ? " (SELSCAN_CUDA_CHANNELS_LAST)" : "", prop.name, quick ? " (quick)" : "");
    const unsigned SP = SELSCAN_DELTA_SOFTPLUS, FB = SELSCAN_FIXED_B, FC = SELSCAN_FIXED_C;
    const selscan_dtype F32 = SELSCAN_F32, F16 = SELSCAN_F16, BF = SELSCAN_BF16;
    std::vector<Cfg> cases = {
        /* name, dt, batch, dim, L, N, G, flags, D, z, bias, h0, hlast, dhlast, layout, nseq, ck, subset */
        {"basic f32", F32, 2, 16, 100, 16, 1, SP, true, true, true, true, true, true, 0, 0, false, false},
        /* h0 and a checkpoint with y L-strided: the general forward wrote the state entering step 0 before
           h0's reset, which the fast backward read (torch fuzz case 3689, bench/RESULTS.md) */
        {"h0 + ck, y L-strided", F32, 3, 8, 100, 4, 1, SP, true, false, false, true, true, false, 1, 0, true, false, 2},
        {"h0 + ck, y L-strided, L 12, subset", F32, 3, 1, 12, 4, 1, SP, true, false, false, true, true, true, 1, 0, true, true, 2},
        {"basic f16", F16, 2, 16, 100, 16, 1, SP, true, true, true, true, true, true, 0, 0, false, false},
        {"basic bf16", BF, 2, 16, 100, 16, 1, SP, true, true, true, true, true, true, 0, 0, false, false},
        {"L=1", F32, 3, 8, 1, 8, 1, SP, true, true, true, true, true, true, 0, 0, false, false},
        {"odd L 67", F32, 1, 12, 67, 4, 1, 0, false, false, false, false, true, false, 1, 0, false, false},
        {"N=1", F32, 2, 8, 37, 1, 1, SP, true, false, true, true, true, true, 0, 0, false, false},
        {"N=2 bf16", BF, 2, 8, 50, 2, 1, SP, true, true, false, false, false, false, 0, 0, false, false},
        {"N=8 groups 4", F32, 2, 32, 90, 8, 4, SP, true, true, true, true, true, true, 0, 0, false, false},
        {"N=64", F32, 1, 6, 70, 64, 1, SP, true, true, true, true, true, true, 0, 0, false, false},
        {"N=256", F32, 1, 3, 40, 256, 1, SP, true, false, true, true, true, true, 0, 0, false, false},
        {"N=256 bf16 groups", BF, 1, 4, 33, 256, 2, SP, true, true, true, false, true, false, 0, 0, false, false},
        {"N=12 (padded states)", F32, 2, 10, 45, 12, 1, SP, true, true, true, true, true, true, 0, 0, false, false},
        {"long L 2000", F32, 1, 4, 2000, 16, 1, SP, true, true, true, true, true, true, 0, 0, false, false},
        {"long L 5000 bf16", BF, 1, 8, 5000, 16, 1, SP, true, true, true, false, true, false, 0, 0, false, false},
        {"(B,L,D) layout", F32, 2, 24, 80, 16, 1, SP, true, true, true, true, true, true, 2, 0, false, false},
        {"(B,L,D) layout f16", F16, 2, 24, 80, 8, 2, SP, true, true, true, true, true, true, 2, 0, false, false},
        {"padded strides", F32, 2, 9, 55, 16, 3, SP, true, true, true, true, true, true, 3, 0, false, false},
        {"explicit strides bf16", BF, 2, 16, 64, 16, 1, SP, true, true, true, true, true, true, 1, 0, false, false},
        {"fixed B", F32, 2, 8, 60, 16, 1, SP | FB, true, true, true, true, true, true, 0, 0, false, false},
        {"fixed C", F32, 2, 8, 60, 16, 1, SP | FC, true, true, true, true, true, true, 0, 0, false, false},
        {"fixed B and C bf16", BF, 2, 8, 60, 8, 1, FB | FC, true, false, true, true, true, true, 0, 0, false, false},
        {"no softplus", F32, 2, 8, 60, 16, 1, 0, true, true, true, true, true, true, 0, 0, false, false},
        {"packed 5 seqs", F32, 1, 8, 200, 16, 1, SP, true, true, true, true, true, true, 0, 5, false, false},
        {"packed 9 seqs bf16", BF, 1, 8, 300, 16, 1, SP, true, true, true, true, true, true, 0, 9, false, false},
        {"packed no h0", F32, 1, 8, 150, 8, 1, SP, true, true, true, false, true, false, 0, 4, false, false},
        {"checkpoint", F32, 2, 16, 300, 16, 1, SP, true, true, true, true, true, true, 0, 0, true, false},
        {"checkpoint packed", F32, 1, 16, 300, 16, 1, SP, true, true, true, true, true, true, 0, 6, true, false},
        {"grad subset", F32, 2, 16, 100, 16, 1, SP, true, true, true, true, false, false, 0, 0, false, true},
        {"many channels", F32, 2, 600, 70, 16, 1, SP, true, true, true, true, true, true, 0, 0, false, false},
        {"many channels bf16 chunked L", BF, 1, 300, 700, 16, 1, SP, true, true, true, true, true, true, 0, 0, false, false},
        {"dim 70000", F32, 1, 70000, 3, 2, 1, SP, true, true, true, false, true, false, 0, 0, false, false},
        /* the short-prefill forward (few channels, L >= 64, no checkpoint): 4 and 8 steps a lane,
           8 and 16 padded states, partial blocks (channels a group not a multiple of 4), a partial
           last chunk, B / C rows not 16-byte aligned (element copies), u / delta / z misaligned */
        {"short f16 L 1000", F16, 1, 8, 1000, 16, 1, SP, true, true, true, true, true, true, 0, 0, false, false},
        {"short f32 N=5 groups 3", F32, 2, 15, 300, 5, 3, SP, true, true, true, true, true, true, 0, 0, false, false},
        {"short bf16 misaligned", BF, 1, 6, 260, 16, 1, SP, true, true, true, true, true, true, 4, 0, false, false},
        {"short f32 misaligned L 127", F32, 2, 5, 127, 12, 1, 0, true, true, false, true, true, true, 4, 0, false, false},
        {"short f32 no z no D", F32, 1, 8, 513, 16, 1, SP, false, false, false, false, true, false, 0, 0, false, false},
        {"short bf16 padded strides", BF, 1, 7, 600, 8, 1, SP, true, true, true, true, true, true, 3, 0, false, false},
        /* channels-last through the fast kernels: odd channel counts, the chunked passes, the
           4-state kernels, a given checkpoint, a gradient subset */
        {"(B,L,D) bf16 chunked L", BF, 1, 200, 900, 16, 1, SP, true, true, true, true, true, true, 2, 0, false, false},
        {"(B,L,D) f32 odd", F32, 3, 100, 333, 16, 2, SP, true, true, true, false, true, true, 2, 0, false, false},
        {"(B,L,D) f16 N=4", F16, 2, 70, 130, 4, 1, SP, true, false, true, true, false, false, 2, 0, false, false},
        {"(B,L,D) bf16 checkpoint", BF, 2, 64, 260, 16, 1, SP, true, true, true, true, true, true, 2, 0, true, false},
        {"(B,L,D) f32 no softplus groups", F32, 3, 16, 375, 8, 2, 0, true, false, true, true, true, true, 2, 0, false, false},
        {"(B,L,D) grad subset", F32, 2, 48, 90, 16, 1, 0, false, true, false, false, false, false, 2, 0, false, true},
    };
    if (!quick) {
        for (int i = 0; i < 24; i++) { /* random configurations */
            static char names[24][32];
            Cfg c;
            snprintf(names[i], sizeof names[i], "random %d", i);
            c.name = names[i];
            const selscan_dtype dts[3] = {F32, F16, BF};
            c.dt = dts[irand(0, 2)];
            const int Ns[6] = {1, 2, 8, 16, 64, 256};
            c.N = Ns[irand(0, 5)];
            c.G = irand(1, 3);
            c.dim = c.G * irand(1, 12);
            c.L = irand(1, 3) == 1 ? irand(1, 9) : irand(10, 400);
            c.nseq = irand(0, 3) == 0 ? irand(1, 6) : 0;
            c.batch = c.nseq ? 1 : irand(1, 3);
            c.flags = (irand(0, 1) ? SP : 0) | (irand(0, 4) == 0 ? FB : 0) | (irand(0, 4) == 0 ? FC : 0);
            c.D = irand(0, 1); c.z = irand(0, 1); c.bias = irand(0, 1); c.h0 = irand(0, 1); c.hlast = irand(0, 1); c.dhlast = irand(0, 1);
            c.layout = irand(0, 3);
            c.ck = irand(0, 1);
            c.grads_subset = irand(0, 3) == 0;
            c.ylay = irand(0, 3) == 0 ? irand(1, 4) : 0; /* y laid out unlike u, a case in four */
            cases.push_back(c);
        }
    } else { /* every kernel and pass at least once, small (compute-sanitizer runs this) */
        static const char *const quick_set[] = {"basic f32", "basic bf16", "L=1", "N=64", "N=256 bf16 groups", "N=12 (padded states)",
                                                "long L 2000", "(B,L,D) layout f16", "(B,L,D) f32 odd", "(B,L,D) bf16 checkpoint",
                                                "fixed B and C bf16", "packed 5 seqs", "checkpoint", "checkpoint packed", "grad subset",
                                                "short f32 N=5 groups 3", "short bf16 misaligned", "h0 + ck, y L-strided",
                                                "h0 + ck, y L-strided, L 12, subset"};
        std::vector<Cfg> q;
        for (const Cfg &c : cases)
            for (const char *n : quick_set)
                if (!strcmp(c.name, n)) q.push_back(c);
        cases = q;
    }
    /* an infinity in u or dy (Cfg::inf), last: dstate 1-64 (pad states in every kernel's state
       tiling: N below its multiple of 4 / 8 / 16), each forward kernel (fast: a checkpoint keeps the
       short prefill away; channels-last: the fast channels-last kernels in test_cuda_cl, the general
       ones here; general by an L-strided y; short prefill) and backward (fast, general), packed
       sequences (the L-chunk passes' carries across a sequence start / end), without D (Mamba-1's
       D term 0 u when D is absent: NaN, as in the reference) */
    {
        static char names[64][48];
        int k = 0;
        for (int inf = 1; inf <= 2; inf++)
            for (int64_t N : {1, 5, 12, 16, 17, 64}) {
                const selscan_dtype T = k % 3 == 0 ? F32 : k % 3 == 1 ? BF : F16;
                const struct { const char *what; int64_t batch, dim, L; int layout, nseq; bool ck; int ylay; } v[] = {
                    {"fast", 2, 8, 150, 0, 0, true, 0},     {"channels-last", 2, 24, 120, 2, 0, false, 0},
                    {"general", 2, 8, 100, 1, 0, true, 2}, {"packed", 1, 8, 180, 0, 3, false, 0},
                    {"short", 1, 4, 200, 0, 0, false, 0},
                };
                for (const auto &w : v) {
                    Cfg c = {};
                    snprintf(names[k], sizeof names[k], "inf %s N=%lld %s", inf == 1 ? "u" : "dy", (long long)N, w.what);
                    c.name = names[k];
                    c.dt = T; c.batch = w.batch; c.dim = w.dim; c.L = w.L; c.N = N; c.G = 1;
                    c.flags = k % 4 == 3 ? 0u : SP;
                    c.D = k % 5 != 4; c.z = k % 2 == 0; c.bias = k % 3 != 2; c.h0 = k % 2 == 1; c.hlast = true; c.dhlast = k % 3 == 0;
                    c.layout = w.layout; c.nseq = w.nseq; c.ck = w.ck; c.ylay = w.ylay; c.inf = inf;
                    if (!quick || k % 8 == 0) cases.push_back(c);
                    k++;
                }
            }
    }
    const char *only = getenv("SELSCAN_TEST_ONLY"); /* a case-name substring (e.g. for a sanitizer run) */
    for (const Cfg &c : cases) {
        if (only && !strstr(c.name, only)) continue;
        const int before = g_fail;
        run_case(c);
        printf("%-32s %s\n", c.name, g_fail == before ? "ok" : "FAILED");
        if (g_fail != before) /* the configuration, to reproduce it */
            printf("  dtype %d batch %lld dim %lld L %lld N %lld G %lld flags %u D %d z %d bias %d h0 %d hlast %d dhlast %d layout %d nseq %d ck %d subset %d ylay %d inf %d\n",
                   (int)c.dt, (long long)c.batch, (long long)c.dim, (long long)c.L, (long long)c.N, (long long)c.G, c.flags, c.D, c.z, c.bias,
                   c.h0, c.hlast, c.dhlast, c.layout, c.nseq, c.ck, c.grads_subset, c.ylay, c.inf);
        fflush(stdout);
    }
    /* step */
    const int before = g_fail;
    for (int T = 0; T < 3; T++) {
        run_step_case((selscan_dtype)T, 5, 40, 16, 1, SP, true, true, true, false, 0);
        run_step_case((selscan_dtype)T, 7, 24, 8, 2, SP, true, true, true, true, 2);
    }
    run_step_case(F32, 4, 16, 1, 1, 0, false, false, false, true, 0);
    run_step_case(F32, 3, 8, 256, 1, SP | FB | FC, true, true, true, true, 3);
    run_step_case(BF, 6, 12, 64, 3, SP | FC, true, false, true, true, 1);
    /* both step kernels (float4 rows: N % 4 == 0, N <= 128, aligned unit-n rows; else one state a
       thread): every N class, odd channel counts, groups, fixed B / C, index with padding rows,
       contiguous, padded and misaligned layouts */
    {
        static const int64_t Ns[] = {1, 2, 3, 4, 8, 12, 16, 20, 32, 60, 64, 68, 128};
        int k = 0;
        for (int64_t N : Ns)
            for (int lay : {1, 3, 4}) {
                const selscan_dtype T = (selscan_dtype)(k % 3);
                const unsigned fl = (k % 4 == 1 ? 0u : SP) | (k % 5 == 2 ? FB : 0u) | (k % 7 == 3 ? FC : 0u);
                run_step_case(T, 1 + k % 6, 37 + 6 * (k % 2), N, 1, fl, k % 3 != 0,
                              k % 2 == 0, k % 4 != 3, k % 3 == 1, lay);
                k++;
            }
        run_step_case(F32, 9, 96, 16, 3, SP, true, true, true, true, 1); /* 3 groups of 32 channels */
        /* batches of several rows a thread (the row-looping kernel, N = 16): index with padding rows,
           groups, both types */
        run_step_case(F32, 64, 5120, 16, 1, SP, true, true, true, true, 1);
        run_step_case(BF, 80, 2048, 16, 4, SP, true, true, true, false, 1);
        run_step_case(F16, 200, 640, 16, 5, 0, false, true, false, true, 1);
        run_step_case(BF, 2, 5, 16, 5, SP, true, true, true, false, 0);  /* a group a channel */
        /* the latency kernel (N = 16; the launcher's choice up to 32 blocks an SM): a partial last
           channel block with padding rows, groups, no z; and forced: batch 1 of a model's width,
           index with padding rows, groups, no D / z / delta_bias, a group a channel, batches past
           the rule (2000 x 128 / 200, 64 x 5120) */
        run_step_case(BF, 300, 200, 16, 1, SP, true, true, true, true, 1);
        run_step_case(F16, 33, 5120, 16, 2, 0, true, false, true, true, 1);
        run_step_case(F32, 16, 5120, 16, 1, SP, true, true, true, true, 1);
        run_step_case(BF, 1, 1536, 16, 1, SP, true, true, true, false, 1, 1);
        run_step_case(F32, 7, 200, 16, 2, SP, true, true, true, true, 1, 1);
        run_step_case(F16, 33, 96, 16, 3, 0, false, false, false, true, 1, 1);
        run_step_case(BF, 2, 5, 16, 5, SP, true, true, true, false, 0, 1);
        run_step_case(F32, 1, 40, 16, 1, 0, false, true, false, false, 0, 1);
        run_step_case(F32, 2000, 128, 16, 1, SP, true, true, true, true, 1, 1);
        run_step_case(BF, 2000, 200, 16, 2, SP, true, true, true, true, 1, 1);
        run_step_case(F16, 64, 5120, 16, 1, SP, false, true, false, true, 1, 1);
    }
    printf("%-32s %s\n", "step", g_fail == before ? "ok" : "FAILED");
    const int b1 = g_fail; /* the step and the forward at L = 1 bitwise (N = 16 and 8, every dtype, groups) */
    for (int T = 0; T < 3; T++) {
        run_step_vs_forward((selscan_dtype)T, 5, 96, 16, 1, SP, true, true, true);
        run_step_vs_forward((selscan_dtype)T, 3, 64, 8, 2, SP, false, false, true);
        run_step_vs_forward((selscan_dtype)T, 2, 40, 16, 4, 0, true, true, false);
        run_step_vs_forward((selscan_dtype)T, 64, 5120, 16, 2, SP, true, true, true); /* rows a thread */
        run_step_vs_forward((selscan_dtype)T, 16, 5120, 16, 1, SP, true, true, true);  /* the latency kernel */
        run_step_vs_forward((selscan_dtype)T, 1500, 128, 16, 1, SP, true, true, true, 1); /* ... forced, past its rule */
        run_step_vs_forward((selscan_dtype)T, 2, 40, 16, 4, 0, true, true, false, 1);
        run_step_vs_forward((selscan_dtype)T, 1, 1536, 16, 1, SP, true, true, true, 1);
        run_step_vs_forward((selscan_dtype)T, 3, 200, 16, 2, SP, true, true, true, 1);
    }
    printf("%-32s %s\n", "step vs forward at L = 1", g_fail == b1 ? "ok" : "FAILED");
    const int b3 = g_fail; /* SELSCAN_STEP_D_T / _DELTA_BIAS_T, SELSCAN_STEP_STATE_T (f16 / bf16) and SELSCAN_STEP_A_LOG on every step kernel, forced */
    for (int T = 0; T < 3; T++)
        for (int stT = 0; stT < (T == 0 ? 1 : 2); stT++)
            for (const step_force &f : kForce) {
                /* N = 16 common operands (every kernel applies) */
                run_step_params_t((selscan_dtype)T, 5, 256, 16, 1, SP, true, true, 1, f, stT);
                run_step_params_t((selscan_dtype)T, 70, 128, 16, 2, 0, false, false, 1, f, stT);
                /* other N and layouts (the forced kernel where it applies, else the launcher's fallback) */
                run_step_params_t((selscan_dtype)T, 3, 40, 8, 2, SP, true, true, 1, f, stT);
                run_step_params_t((selscan_dtype)T, 4, 37, 5, 1, SP, true, false, 3, f, stT);
                run_step_params_t((selscan_dtype)T, 2, 48, 64, 1, SP, false, true, 1, f, stT);
                run_step_params_t((selscan_dtype)T, 3, 24, 16, 1, SP, true, true, 4, f, stT);
                run_step_params_t((selscan_dtype)T, 2, 20, 12, 1, SP, true, true, 2, f, stT); /* channels-last: n stride != 1 */
                /* D alone in T (transformers' Mamba: dt_proj.bias cast to f32 by the caller), delta_bias alone */
                run_step_params_t((selscan_dtype)T, 5, 256, 16, 1, SP, true, true, 1, f, stT, 1);
                run_step_params_t((selscan_dtype)T, 3, 40, 8, 2, SP, true, false, 1, f, stT, 2);
                /* A from A_log (SELSCAN_STEP_A_LOG): alone and with D / delta_bias in T, the common
                   operands (every kernel) and other N and layouts (A strided, misaligned, padded) */
                run_step_params_t((selscan_dtype)T, 5, 256, 16, 1, SP, true, true, 1, f, stT, 4);
                run_step_params_t((selscan_dtype)T, 70, 128, 16, 2, 0, false, false, 1, f, stT, 7);
                run_step_params_t((selscan_dtype)T, 3, 40, 8, 2, SP, true, true, 1, f, stT, 7);
                run_step_params_t((selscan_dtype)T, 4, 37, 5, 1, SP, true, false, 3, f, stT, 4);
                run_step_params_t((selscan_dtype)T, 2, 48, 64, 1, SP, false, true, 4, f, stT, 4);
                run_step_params_t((selscan_dtype)T, 2, 20, 12, 1, SP, true, true, 2, f, stT, 7);
            }
    printf("%-32s %s\n", "step params / state in T, A_log", g_fail == b3 ? "ok" : "FAILED");
    const int b2 = g_fail;
    validation_tests();
    printf("%-32s %s\n", "validation", g_fail == b2 ? "ok" : "FAILED");
    /* the step with an infinite u, D absent and present: every kernel's y as the reference's (N 1 / 5: a state a
       thread, 8 / 64: float4 rows, 16: the pair kernels, looping and forced latency); last: its fills draw from the
       stream the cases above use */
    const int b4 = g_fail;
    for (int k = 0; k < 12; k++) {
        static const int64_t Ni[6] = {1, 5, 8, 16, 16, 64};
        run_step_case((selscan_dtype)(k % 3), 3, 40, Ni[k % 6], 1, SELSCAN_DELTA_SOFTPLUS, k / 6 == 1, true, true, false, 0, k % 6 == 4 ? 1 : 0, true);
    }
    printf("%-32s %s\n", "step, an infinite u", g_fail == b4 ? "ok" : "FAILED");
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
