/* tests/test_cuda_norm.cu - the CUDA gated RMS norm (selscan_cuda.cuh >>norm-cuda) against the CPU
 * reference (selscan_norm_forward_ref / _backward_ref).
 *
 * Random problems over every dtype, gate mode (before / after the norm, no z), weight or none,
 * group size (1, small, odd, Mamba-2's 1536, over a block's 1024-channel pass) and layout of each
 * (batch, L, dim) operand (contiguous with zero strides, explicit, a channel slice of a wider
 * (batch, L, 3 dim) buffer as the layer's z in zxbcdt, the same slice at an odd element offset
 * (misaligned vector loads), channels-first memory, padded with gaps): out, and dy / dz / dweight
 * (any subset), the backward run twice and compared bitwise (deterministic). Every output
 * poisoned (0xFF bytes, NaN) first: an unwritten element fails; gaps must stay poisoned. A NaN in
 * y reaches its group's outputs only. Host-side validation runs without a GPU (statuses and diag
 * of what the launchers refuse before any launch); with no device the suite stops there. Last
 * line: "N passed, N failed". SELSCAN_TEST_QUICK=1: a smaller matrix.
 */
#define SELSCAN_IMPLEMENTATION
#define SELSCAN_CUDA_IMPLEMENTATION
#include "selscan_cuda.cuh"

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define CUDA_CHECK_SEED 0x9a7ed0ull /* urand / irand's */
#include "cuda_check.h"             /* g_pass / g_fail, CHECK, CU, urand / irand */

/* A (batch, L, dim) or (dim) tensor on the host (h) and the device (d), same layout. */
struct Ten {
    int nd = 0;
    int64_t n[3] = {1, 1, 1}, s[3] = {0, 0, 0}, alloc = 0, base = 0;
    selscan_dtype dt = SELSCAN_F32;
    bool zero = false; /* pass all-zero strides */
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
    /* layout: 0 contiguous (zero strides), 1 explicit, 2 channel slice of (.., 3 dim) at dim,
       3 the same at dim + 1 (odd: misaligned), 4 channels-first, 5 padded */
    void make(selscan_dtype t, int rank, int64_t b, int64_t l, int64_t dm, int layout) {
        nd = rank; dt = t;
        if (rank == 1) { n[0] = dm; n[1] = n[2] = 1; }
        else { n[0] = b; n[1] = l; n[2] = dm; }
        zero = layout == 0;
        base = 0;
        if (rank == 1) {
            s[0] = layout == 5 ? 3 : 1;
            alloc = (dm - 1) * s[0] + 1 + (layout == 5 ? 5 : 0);
            base = layout == 5 ? 2 : 0;
        } else if (layout <= 1) {
            s[2] = 1; s[1] = dm; s[0] = l * dm; alloc = b * l * dm;
        } else if (layout <= 3) {
            s[2] = 1; s[1] = 3 * dm; s[0] = l * 3 * dm; base = layout == 3 ? dm + 1 : dm; alloc = b * l * 3 * dm + 2;
        } else if (layout == 4) {
            s[2] = b * l; s[0] = l; s[1] = 1; alloc = b * l * dm;
        } else {
            s[2] = 2; s[1] = 2 * dm + 3; s[0] = l * s[1] + 5; base = 1; alloc = b * s[0] + 7;
        }
        if (rank == 1) alloc += base;
        h = (unsigned char *)malloc((size_t)alloc * es());
        memset(h, 0xFF, (size_t)alloc * es());
        CU(cudaMalloc(&d, (size_t)alloc * es()));
    }
    void up() { CU(cudaMemcpy(d, h, (size_t)alloc * es(), cudaMemcpyHostToDevice)); }
    void poison() { memset(h, 0xFF, (size_t)alloc * es()); up(); }
    std::vector<unsigned char> down() const {
        std::vector<unsigned char> m((size_t)alloc * es());
        CU(cudaMemcpy(m.data(), d, m.size(), cudaMemcpyDeviceToHost));
        return m;
    }
    template <typename TT> TT api(bool dev) const {
        TT r;
        memset(&r, 0, sizeof r);
        r.data = (unsigned char *)(dev ? d : (void *)h) + base * es();
        if (!zero) for (int k = 0; k < nd; k++) r.stride[k] = s[k];
        return r;
    }
    void release() { free(h); if (d) cudaFree(d); h = NULL; d = NULL; }
};

/* elements outside the tensor's that are not all-0xFF (gaps written) */
static int64_t gaps_dirty(const Ten &t, const std::vector<unsigned char> &m) {
    std::vector<char> mark((size_t)t.alloc, 0);
    for (int64_t i = 0; i < t.count(); i++) mark[(size_t)t.off(i)] = 1;
    int64_t bad = 0;
    for (int64_t e = 0; e < t.alloc; e++)
        if (!mark[(size_t)e])
            for (size_t k = 0; k < t.es(); k++) bad += m[(size_t)e * t.es() + k] != 0xFF;
    return bad;
}
/* ||a - b|| / ||b|| over the tensor's elements (inf on a NaN in one and not the other) */
static double rel_err(const Ten &t, const std::vector<unsigned char> &a, const unsigned char *b) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < t.count(); i++) {
        const double x = t.get(a.data(), i), y = t.get(b, i);
        if (isnan(x) || isnan(y)) {
            if (isnan(x) != isnan(y)) return INFINITY;
            continue;
        }
        num += (x - y) * (x - y);
        den += y * y;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

struct Cfg {
    selscan_dtype dt;
    int64_t batch, L, dim, gs;
    bool z, w, before;
    float eps;
    int ly, lz, lo, ld, ldy, ldz; /* layouts */
    unsigned want;                /* 1 dy, 2 dz, 4 dweight */
    bool nan;                     /* a NaN in y */
};

/* f32 part of the tolerances: the sums of a group in f32 (gs terms, CUDA in a tree, the CPU in
   channel order) and the fast sigmoid (ex2.approx, ~2^-22 relative) against expf; dweight sums
   the rows too. k = 2 for T outputs: both sides round their own f32 result to T. */
static double tol_of(const Cfg &c, int64_t terms, bool lowp) {
    const double f32 = 1e-5 + (double)terms * 2.0 / 16777216.0;
    return lowp ? tc_tol_lowp(c.dt, f32, 2) : f32;
}

static void run_case(const Cfg &c, int id) {
    char desc[200];
    snprintf(desc, sizeof desc, "case %d: dt %d batch %d L %d dim %d gs %d z %d w %d before %d eps %g lay %d%d%d%d%d%d want %u nan %d", id,
             (int)c.dt, (int)c.batch, (int)c.L, (int)c.dim, (int)c.gs, c.z, c.w, c.before, (double)c.eps, c.ly, c.lz, c.lo, c.ld, c.ldy,
             c.ldz, c.want, c.nan);
    Ten y, z, w, out, dout, dy, dz, dw;
    y.make(c.dt, 3, c.batch, c.L, c.dim, c.ly);
    if (c.z) z.make(c.dt, 3, c.batch, c.L, c.dim, c.lz);
    if (c.w) w.make(SELSCAN_F32, 1, 1, 1, c.dim, irand(0, 1) ? 5 : 1);
    out.make(c.dt, 3, c.batch, c.L, c.dim, c.lo);
    dout.make(c.dt, 3, c.batch, c.L, c.dim, c.ld);
    dy.make(c.dt, 3, c.batch, c.L, c.dim, c.ldy);
    if (c.z) dz.make(c.dt, 3, c.batch, c.L, c.dim, c.ldz);
    dw.make(SELSCAN_F32, 1, 1, 1, c.dim, 1);
    for (int64_t i = 0; i < y.count(); i++) {
        y.set(i, (float)urand(-2, 2));
        if (c.z) z.set(i, (float)urand(-4, 4));
        dout.set(i, (float)urand(-1, 1));
    }
    if (c.nan) y.set(irand(0, (int)y.count() - 1), NAN);
    if (c.w) for (int64_t i = 0; i < c.dim; i++) w.set(i, (float)urand(0.5, 1.5));
    y.up(); dout.up();
    if (c.z) z.up();
    if (c.w) w.up();
    auto problem = [&](bool dev) {
        selscan_norm_problem p;
        memset(&p, 0, sizeof p);
        p.batch = c.batch; p.seqlen = c.L; p.dim = c.dim; p.group_size = c.gs; p.eps = c.eps; p.dtype = c.dt;
        p.flags = c.before ? SELSCAN_NORM_BEFORE_GATE : 0u;
        p.y = y.api<selscan_tensor>(dev);
        if (c.z) p.z = z.api<selscan_tensor>(dev);
        if (c.w) p.weight = w.api<selscan_tensor>(dev);
        p.out = out.api<selscan_out_tensor>(dev);
        return p;
    };
    auto grads = [&](bool dev) {
        selscan_norm_grads g;
        memset(&g, 0, sizeof g);
        g.dout = dout.api<selscan_tensor>(dev);
        if (c.want & 1) g.dy = dy.api<selscan_out_tensor>(dev);
        if ((c.want & 2) && c.z) g.dz = dz.api<selscan_out_tensor>(dev);
        if (c.want & 4) g.dweight = dw.api<selscan_out_tensor>(dev);
        return g;
    };
    /* the CPU reference on the host copies */
    selscan_norm_problem hp = problem(false);
    selscan_norm_grads hg = grads(false);
    CHECK(selscan_norm_forward_ref(&hp) == SELSCAN_OK && selscan_norm_backward_ref(&hp, &hg) == SELSCAN_OK, "cpu ref status (%s)", desc);
    std::vector<unsigned char> ro(out.h, out.h + out.alloc * out.es()), rdy(dy.h, dy.h + dy.alloc * dy.es()),
        rdw(dw.h, dw.h + dw.alloc * dw.es()), rdz;
    if (c.z) rdz.assign(dz.h, dz.h + dz.alloc * dz.es());
    /* the device */
    out.poison(); dy.poison(); dw.poison();
    if (c.z) dz.poison();
    selscan_norm_problem p = problem(true);
    selscan_norm_grads g = grads(true);
    selscan_diag dg;
    memset(&dg, 0, sizeof dg);
    p.diag = &dg;
    CHECK(selscan_norm_forward_cuda(&p, NULL, 0) == SELSCAN_OK, "forward status %s (%s)", dg.rule ? dg.rule : "", desc);
    size_t bytes = 0;
    CHECK(selscan_norm_workspace_size_cuda(&p, &g, &bytes) == SELSCAN_OK, "ws size (%s)", desc);
    CHECK((bytes == 0) == !(c.want & 4), "ws size %zu without / with dweight (%s)", bytes, desc);
    void *ws = NULL;
    if (bytes) CU(cudaMalloc(&ws, bytes + 3));
    void *wsu = ws ? (char *)ws + 3 : NULL; /* any address: aligned up inside */
    CHECK(selscan_norm_backward_cuda(&p, &g, NULL, wsu, bytes, 0) == SELSCAN_OK, "backward status %s (%s)", dg.rule ? dg.rule : "", desc);
    CU(cudaDeviceSynchronize());
    const std::vector<unsigned char> mo = out.down(), mdy = dy.down(), mdw = dw.down(), mdz = c.z ? dz.down() : std::vector<unsigned char>();
    const double eo = rel_err(out, mo, ro.data());
    CHECK(eo <= tol_of(c, c.gs, true), "out: %g (%s)", eo, desc);
    CHECK(gaps_dirty(out, mo) == 0, "out's gaps written (%s)", desc);
    if (c.want & 1) {
        const double e = rel_err(dy, mdy, rdy.data());
        CHECK(e <= tol_of(c, 2 * c.gs, true), "dy: %g (%s)", e, desc);
        CHECK(gaps_dirty(dy, mdy) == 0, "dy's gaps written (%s)", desc);
    }
    if ((c.want & 2) && c.z) {
        const double e = rel_err(dz, mdz, rdz.data());
        CHECK(e <= tol_of(c, 2 * c.gs, true), "dz: %g (%s)", e, desc);
        CHECK(gaps_dirty(dz, mdz) == 0, "dz's gaps written (%s)", desc);
    }
    if (c.want & 4) {
        const double e = rel_err(dw, mdw, rdw.data());
        CHECK(e <= tol_of(c, c.batch * c.L + 2 * c.gs, false), "dweight: %g (%s)", e, desc);
    }
    /* what was not asked for stays poisoned */
    if (!(c.want & 1)) CHECK(gaps_dirty(dy, mdy) == 0 && dy.get(mdy.data(), 0) != dy.get(mdy.data(), 0), "dy written unasked (%s)", desc);
    if (!(c.want & 4)) CHECK(dw.get(mdw.data(), 0) != dw.get(mdw.data(), 0), "dweight written unasked (%s)", desc);
    /* deterministic: again, bitwise */
    dy.poison(); dw.poison();
    if (c.z) dz.poison();
    CHECK(selscan_norm_backward_cuda(&p, &g, NULL, wsu, bytes, 0) == SELSCAN_OK, "backward again (%s)", desc);
    CU(cudaDeviceSynchronize());
    CHECK(dy.down() == mdy && dw.down() == mdw && (!c.z || dz.down() == mdz), "backward not bitwise the first (%s)", desc);
    if (ws) CU(cudaFree(ws));
    y.release(); out.release(); dout.release(); dy.release(); dw.release();
    if (c.z) { z.release(); dz.release(); }
    if (c.w) w.release();
}

static void host_validation_tests() {
    char *fake = (char *)(uintptr_t)0x10000000; /* device addresses, never touched */
    selscan_norm_problem p;
    selscan_norm_grads g;
    selscan_diag dg;
    auto base = [&]() {
        memset(&p, 0, sizeof p);
        memset(&g, 0, sizeof g);
        p.batch = 2; p.seqlen = 100; p.dim = 64; p.group_size = 16; p.eps = 1e-5f; p.dtype = SELSCAN_BF16;
        p.flags = SELSCAN_NORM_BEFORE_GATE;
        p.y.data = fake; p.z.data = fake + 0x100000; p.weight.data = fake + 0x200000; p.out.data = fake + 0x300000;
        g.dout.data = fake + 0x400000; g.dy.data = fake + 0x500000; g.dz.data = fake + 0x600000; g.dweight.data = fake + 0x700000;
        memset(&dg, 0, sizeof dg);
        p.diag = &dg;
    };
    auto diag_is = [&](const char *op, const char *rule) { return dg.operand && dg.rule && !strcmp(dg.operand, op) && !strcmp(dg.rule, rule); };
    base();
    p.eps = NAN;
    CHECK(selscan_norm_forward_cuda(&p, NULL, 0) == SELSCAN_ERR_SHAPE && diag_is("eps", "negative, infinite or NaN"), "cuda: eps NaN");
    base();
    p.group_size = 24;
    CHECK(selscan_norm_backward_cuda(&p, &g, NULL, NULL, 0, 0) == SELSCAN_ERR_SHAPE && diag_is("group_size", "does not divide dim"),
          "cuda bwd: group_size 24 of 64");
    base();
    p.flags = 4u;
    CHECK(selscan_norm_forward_cuda(&p, NULL, 0) == SELSCAN_ERR_UNSUPPORTED && diag_is("flags", "unknown flag"), "cuda: flags");
    base();
    p.y.data = NULL;
    CHECK(selscan_norm_forward_cuda(&p, NULL, 0) == SELSCAN_ERR_NULL && diag_is("y", "missing"), "cuda: y missing");
    base();
    p.out.data = (void *)p.y.data;
    CHECK(selscan_norm_forward_cuda(&p, NULL, 0) == SELSCAN_ERR_ALIAS && diag_is("out", "overlaps y"), "cuda: out overlaps y");
    base();
    p.z.data = NULL;
    CHECK(selscan_norm_backward_cuda(&p, &g, NULL, NULL, 0, 0) == SELSCAN_ERR_NULL && diag_is("dz", "asked for without z"),
          "cuda: dz without z");
    base();
    g.dout.data = NULL;
    CHECK(selscan_norm_backward_cuda(&p, &g, NULL, NULL, 0, 0) == SELSCAN_ERR_NULL && diag_is("dout", "missing"), "cuda: dout missing");
    base();
    CHECK(selscan_norm_backward_cuda(&p, NULL, NULL, NULL, 0, 0) == SELSCAN_ERR_NULL && diag_is("grads", "missing"), "cuda: grads NULL");
    { /* the workspace: its size, missing, too small, overlapping an operand; none without dweight */
        size_t bytes = 0;
        base();
        CHECK(selscan_norm_workspace_size_cuda(&p, &g, NULL) == SELSCAN_ERR_NULL && diag_is("bytes", "missing"), "cuda: bytes NULL");
        CHECK(selscan_norm_workspace_size_cuda(&p, &g, &bytes) == SELSCAN_OK && bytes > 0, "cuda: ws size with dweight");
        CHECK(selscan_norm_backward_cuda(&p, &g, NULL, NULL, 0, 0) == SELSCAN_ERR_WORKSPACE && diag_is("workspace", "null"),
              "cuda: workspace NULL");
        CHECK(selscan_norm_backward_cuda(&p, &g, NULL, fake + 0x800000, bytes - 256, 0) == SELSCAN_ERR_WORKSPACE &&
                  diag_is("workspace", "too small"), "cuda: workspace too small");
        CHECK(selscan_norm_backward_cuda(&p, &g, NULL, (void *)p.y.data, bytes, 0) == SELSCAN_ERR_ALIAS &&
                  diag_is("workspace", "overlaps an operand"), "cuda: workspace overlaps y");
        g.dweight.data = NULL;
        CHECK(selscan_norm_workspace_size_cuda(&p, &g, &bytes) == SELSCAN_OK && bytes == 0, "cuda: no workspace without dweight");
    }
    { /* a grid past 2^31 - 1 blocks: y broadcast over rows, out far above it */
        base();
        p.batch = 1; p.seqlen = (int64_t)1 << 31; p.dim = 2; p.group_size = 1;
        p.y.stride[2] = 1; p.z.data = NULL;
        p.out.data = fake + ((int64_t)1 << 32);
        CHECK(selscan_norm_forward_cuda(&p, NULL, 0) == SELSCAN_ERR_UNSUPPORTED && diag_is("dim", "grid over 2^31 - 1 blocks"),
              "cuda: grid over 2^31 - 1 blocks");
    }
}

int main() {
    host_validation_tests();
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) return report_no_gpu("test_cuda_norm");
    cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    const char *qe = getenv("SELSCAN_TEST_QUICK");
    const bool quick = qe && strcmp(qe, "0") != 0;
    printf("test_cuda_norm on %s%s\n", prop.name, quick ? " (quick)" : "");
    const selscan_dtype dts[3] = {SELSCAN_F32, SELSCAN_F16, SELSCAN_BF16};
    int id = 0;
    /* Mamba-2 130m's norm (group 1536 = dim / ngroups), fewer rows; every gate mode and dtype, the
       layer's layouts: y contiguous, z a slice of zxbcdt */
    for (int di = 0; di < 3; di++)
        for (int mode = 0; mode < 3; mode++) {
            Cfg c = {dts[di], 2, 64, 1536, 1536, mode != 2, true, mode == 0, 1e-5f, 0, 2, 0, 0, 0, 0, 7, false};
            run_case(c, id++);
        }
    /* many groups: the backward's row chunks (kNormBlocks / groups: 4 a group here; over 1024 groups, one block a
       group through every row) */
    for (int di = 0; di < 3; di++) {
        Cfg c = {dts[di], 3, 70, 2400, 8, true, true, di == 1, 1e-4f, 1, 2, 1, 0, 0, 5, 7, false};
        run_case(c, id++);
        Cfg d = {dts[di], 2, 9, 1100, 1, true, true, di != 1, 1.0f, 0, 0, 0, 0, 0, 0, 7, false};
        run_case(d, id++);
    }
    /* over 1024 rows a group: backward blocks of several rows (the first two chunks' dweight in
       registers over the rows, a 3000-channel group's third chunk read-add-written row after row) */
    for (int di = 0; di < 3; di++) {
        Cfg c = {dts[di], 2, 700, 1536, 1536, true, true, di != 0, 1e-5f, 0, 2, 0, 0, 0, 0, 7, false};
        run_case(c, id++);
        Cfg d = {dts[di], 1, 1500, 3000, 3000, true, true, di == 0, 1e-5f, 0, 2, 0, 0, 0, 0, 7, false};
        run_case(d, id++);
    }
    const int64_t gss[] = {1, 4, 7, 8, 24, 64, 100, 256, 1536, 2056, 3000};
    const int nrand = quick ? 40 : 240;
    for (int i = 0; i < nrand; i++) {
        Cfg c;
        c.dt = dts[i % 3];
        c.gs = gss[irand(0, 10)];
        c.dim = c.gs * (c.gs >= 1024 ? irand(1, 2) : irand(1, 6));
        c.batch = irand(1, 3);
        c.L = c.gs >= 1024 ? irand(1, 40) : irand(1, 300);
        c.z = urand(0, 1) < 0.75; c.w = urand(0, 1) < 0.75; c.before = urand(0, 1) < 0.5;
        /* a group of one channel is ill-conditioned in the backward (n = +-1) unless eps is large */
        c.eps = c.gs == 1 ? 1.0f : (urand(0, 1) < 0.2 ? 0.0f : (float)urand(1e-6, 1e-2));
        c.ly = irand(0, 5); c.lz = irand(0, 5); c.lo = irand(0, 5); c.ld = irand(0, 5); c.ldy = irand(0, 5); c.ldz = irand(0, 5);
        if (urand(0, 1) < 0.4) c.ly = c.lz = c.lo = c.ld = c.ldy = c.ldz = irand(0, 3); /* all vector loads */
        c.want = (unsigned)irand(1, 7);
        c.nan = i % 17 == 5;
        run_case(c, id++);
    }
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
