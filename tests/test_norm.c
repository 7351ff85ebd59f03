/* test_norm: the gated RMS norm (selscan.h >>norm-api).
 *
 *   oracle      selscan_norm_forward_ref / _cpu against a float64 loop written here from the math
 *               in >>norm-api (every dtype, every gate mode, with / without weight, group sizes
 *               from 1 to dim, random layouts per tensor: contiguous, explicit strides,
 *               channels-first, permuted with padding, broadcast inputs; gaps poisoned)
 *   backward    selscan_norm_backward_ref / _cpu against the float64 gradients written here, each
 *               of dy, dz, dweight asked for alone and together
 *   fd          the float64 gradients here against central differences of the float64 loss
 *               sum(dout * out) (checks the derivation), and the library's f32 gradients too
 *   nan         a NaN in y / z / dout reaches its group's outputs and no other group's
 *   dtypes      f16 / bf16 outputs bitwise their f32 twin's (the same inputs as f32) rounded to T
 *   cpu vs ref  _cpu (its vector path: >>fast-norm) against _ref element by element, within tolerances
 *               from f32 rounding (nm_close: the sums' order, the vector sigmoid), NaN where _ref's NaN,
 *               the same infinities; cases with every input's channels contiguous (the vector path) and
 *               random layouts (either path); special inputs (infinities, |z| up to 100) in test_special
 *   determinism two calls give bitwise the same outputs (_cpu and _ref each)
 *   validation  every rule: status, diag operand and code, not one output byte written
 *   sizes       selscan_check_norm_sizes: empty problems accepted, the same rules otherwise
 *   parts       the partitioned entries: forward / dy / dz bitwise the plain calls, dweight bitwise
 *               the same for every n_parts, the workspace's and parts' refusals */
#define SELSCAN_IMPLEMENTATION
#include "../selscan.h"
#include "common.h"
#include <math.h>

typedef struct nm_cfg {
    selscan_dtype dt;
    int64_t batch, L, dim, gs;
    int z, w, before;
    float eps;
    int layout; /* -1: random per tensor */
    int vec;    /* with layout -1: inputs only in layouts with the channels contiguous (the CPU entries' vector
                   path; its outputs any layout) */
} nm_cfg;

typedef struct nm_prob {
    nm_cfg c;
    tc_tensor y, z, w, out, dout, dy, dz, dw;
    selscan_norm_problem p;
    selscan_norm_grads g;
} nm_prob;

static int nm_layout(const nm_cfg *c, int input, int nd) {
    int l = c->layout >= 0 ? c->layout : (int)tc_randint(0, input ? TC_LAYOUT_BCAST : TC_LAYOUT_PADDED);
    if (c->layout < 0 && c->vec && input) l = tc_coin(0.5) ? TC_LAYOUT_BCAST : (int)tc_randint(0, 1); /* channel stride 1 */
    /* a 1-D broadcast has all strides 0, which the API reads as contiguous: explicit instead */
    if (l == TC_LAYOUT_BCAST && (!input || nd == 1)) l = TC_LAYOUT_EXPLICIT;
    return l;
}

static void nm_api(nm_prob *P) {
    memset(&P->p, 0, sizeof P->p);
    memset(&P->g, 0, sizeof P->g);
    P->p.batch = P->c.batch; P->p.seqlen = P->c.L; P->p.dim = P->c.dim;
    P->p.group_size = P->c.gs == P->c.dim && tc_coin(0.5) ? 0 : P->c.gs; /* 0 means dim */
    P->p.eps = P->c.eps;
    P->p.dtype = P->c.dt;
    P->p.flags = P->c.before ? SELSCAN_NORM_BEFORE_GATE : 0u;
    P->p.y = tc_api(&P->y); P->p.z = tc_api(&P->z); P->p.weight = tc_api(&P->w);
    P->p.out = tc_out(&P->out);
    P->g.dout = tc_api(&P->dout);
    P->g.dy = tc_out(&P->dy); P->g.dz = tc_out(&P->dz); P->g.dweight = tc_out(&P->dw);
}

static void nm_make(nm_prob *P, const nm_cfg *c) {
    const nm_cfg *k = c;
    memset(P, 0, sizeof *P);
    P->c = *c;
    tc_tensor_make(&P->y, k->dt, 3, k->batch, k->L, k->dim, 1, nm_layout(k, 1, 3), 1);
    tc_tensor_make(&P->z, k->dt, 3, k->batch, k->L, k->dim, 1, nm_layout(k, 1, 3), k->z);
    tc_tensor_make(&P->w, SELSCAN_F32, 1, k->dim, 1, 1, 1, nm_layout(k, 1, 1), k->w);
    tc_tensor_make(&P->out, k->dt, 3, k->batch, k->L, k->dim, 1, nm_layout(k, 0, 3), 1);
    tc_tensor_make(&P->dout, k->dt, 3, k->batch, k->L, k->dim, 1, nm_layout(k, 1, 3), 1);
    tc_tensor_make(&P->dy, k->dt, 3, k->batch, k->L, k->dim, 1, nm_layout(k, 0, 3), 1);
    tc_tensor_make(&P->dz, k->dt, 3, k->batch, k->L, k->dim, 1, nm_layout(k, 0, 3), k->z);
    tc_tensor_make(&P->dw, SELSCAN_F32, 1, k->dim, 1, 1, 1, nm_layout(k, 0, 1), 1);
    tc_fill(&P->y, -2, 2);
    tc_fill(&P->z, -4, 4);
    tc_fill(&P->w, 0.5, 1.5);
    tc_fill(&P->dout, -1, 1);
    nm_api(P);
}

static void nm_free(nm_prob *P) {
    tc_tensor *t[] = {&P->y, &P->z, &P->w, &P->out, &P->dout, &P->dy, &P->dz, &P->dw};
    size_t i;
    for (i = 0; i < sizeof t / sizeof t[0]; i++) tc_tensor_free(t[i]);
}

/* ---- the float64 oracle, from >>norm-api ---- */
static double nm_sig(double x) { return 1.0 / (1.0 + exp(-x)); }

/* r = 1 / sqrt(mean(u^2) + eps) over the group of channels c0.. of the row starting at element i0 */
static double nm_group_r(const nm_prob *P, const double *yv, const double *zv, int64_t i0, int64_t c0) {
    const nm_cfg *c = &P->c;
    const int hz = c->z, in = c->z && !c->before;
    double ss = 0;
    int64_t j;
    for (j = c0; j < c0 + c->gs; j++) {
        const double s = hz ? tc_silu(zv[i0 + j]) : 1, u = in ? yv[i0 + j] * s : yv[i0 + j];
        ss += u * u;
    }
    return 1.0 / sqrt(ss / (double)c->gs + (double)c->eps);
}

/* out (batch*L*dim, logical order); dy, dz, dw may be NULL (the backward's, from dout). sy, sz
   (may be NULL): the magnitudes dy and dz are computed from, |r| (|dn| + |n m|) times the factors
   after it: du = r (dn - n m) cancels where the group's n are near +-1 (a group of one channel
   with a small eps), and an f32 du is then exact only to rounding of those terms, not of du. */
static void nm_oracle_s(const nm_prob *P, const double *yv, const double *zv, double *out, double *dy, double *dz, double *dw,
                        double *sy, double *sz) {
    const nm_cfg *c = &P->c;
    const int hz = c->z, after = c->z && c->before, in = c->z && !c->before;
    int64_t row, c0, j;
    if (dw) for (j = 0; j < c->dim; j++) dw[j] = 0;
    for (row = 0; row < c->batch * c->L; row++)
        for (c0 = 0; c0 < c->dim; c0 += c->gs) {
            double m = 0;
            const double r = nm_group_r(P, yv, zv, row * c->dim, c0);
            for (j = c0; j < c0 + c->gs; j++) {
                const int64_t i = row * c->dim + j;
                const double s = hz ? tc_silu(zv[i]) : 1, u = in ? yv[i] * s : yv[i], w = c->w ? P->w.v[j] : 1;
                const double n = u * r;
                if (out) out[i] = after ? n * w * s : n * w;
                m += (after ? P->dout.v[i] * w * s : P->dout.v[i] * w) * n;
            }
            m /= (double)c->gs;
            for (j = c0; j < c0 + c->gs; j++) {
                const int64_t i = row * c->dim + j;
                const double s = hz ? tc_silu(zv[i]) : 1, u = in ? yv[i] * s : yv[i], w = c->w ? P->w.v[j] : 1;
                const double n = u * r, d = P->dout.v[i], dn = after ? d * w * s : d * w, du = r * (dn - n * m);
                const double sg = hz ? nm_sig(zv[i]) : 0, ds = sg * (1 + zv[i] * (1 - sg));
                const double sc = fabs(r) * (fabs(dn) + fabs(n * m));
                if (dy) dy[i] = in ? du * s : du;
                if (dz) dz[i] = hz ? (after ? d * n * w * ds : du * yv[i] * ds) : 0;
                if (sy) sy[i] = in ? sc * fabs(s) : sc;
                if (sz) sz[i] = hz ? (after ? fabs(d * n * w * ds) : sc * fabs(yv[i] * ds)) : 0;
                if (dw) dw[j] += after ? d * n * s : d * n;
            }
        }
}

static void nm_oracle(const nm_prob *P, const double *yv, const double *zv, double *out, double *dy, double *dz, double *dw) {
    nm_oracle_s(P, yv, zv, out, dy, dz, dw, NULL, NULL);
}

/* ||t - ref|| / ||scale|| (inf on NaN) */
static double nm_err(const tc_tensor *t, const double *ref, const double *scale) {
    double num = 0, den = 0;
    int64_t i;
    for (i = 0; i < t->count; i++) {
        const double a = tc_get(t, i);
        if (isnan(a) || isnan(ref[i])) return INFINITY;
        num += (a - ref[i]) * (a - ref[i]);
        den += scale[i] * scale[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The scales of nm_close's bounds, from the float64 values: per element of out, dy, dz (logical order)
   and per channel of dweight. With n = u r, dn, m as in >>norm-api and a = the group's mean of |dn n|:
   out |out|; du r (|dn| + |n| a) (|m| <= a: the cancellation in dn - n m, and m's error, relative to a);
   dy that (times |s| with the gate inside u); dz |dout n w| sg (1 + |z|) (gate after) or du's scale
   |y| sg (1 + |z|) (inside): sg (1 + |z|) bounds s'(z) and its error from sg's (the 1 - sg cancels);
   dweight the sum over rows of |its terms|. */
static void nm_scales(const nm_prob *P, double *so, double *sy, double *sz, double *sw) {
    const nm_cfg *c = &P->c;
    const int hz = c->z, after = c->z && c->before, in = c->z && !c->before;
    const double *yv = P->y.v, *zv = P->z.v;
    int64_t row, c0, j;
    for (j = 0; j < c->dim; j++) sw[j] = 0;
    for (row = 0; row < c->batch * c->L; row++)
        for (c0 = 0; c0 < c->dim; c0 += c->gs) {
            double a = 0;
            const double r = nm_group_r(P, yv, zv, row * c->dim, c0);
            for (j = c0; j < c0 + c->gs; j++) {
                const int64_t i = row * c->dim + j;
                const double s = hz ? tc_silu(zv[i]) : 1, u = in ? yv[i] * s : yv[i], w = c->w ? P->w.v[j] : 1;
                a += fabs((after ? P->dout.v[i] * w * s : P->dout.v[i] * w) * u * r);
            }
            a /= (double)c->gs;
            for (j = c0; j < c0 + c->gs; j++) {
                const int64_t i = row * c->dim + j;
                const double s = hz ? tc_silu(zv[i]) : 1, u = in ? yv[i] * s : yv[i], w = c->w ? P->w.v[j] : 1;
                const double n = u * r, d = P->dout.v[i], dn = after ? d * w * s : d * w;
                const double sg = hz ? nm_sig(zv[i]) : 0, dsa = sg * (1 + fabs(zv[i]));
                const double sdu = fabs(r) * (fabs(dn) + fabs(n) * a);
                so[i] = fabs(after ? n * w * s : n * w);
                sy[i] = in ? sdu * fabs(s) : sdu;
                sz[i] = hz ? (after ? fabs(d * n * w) * dsa : sdu * fabs(yv[i]) * dsa) : 0;
                sw[j] += fabs(after ? d * n * s : d * n);
            }
        }
}

/* The CPU entries (t: their vector path, or the scalar loop bitwise the reference's) against the
   reference's values ref (logical order), element by element: NaN where ref is NaN (and only there), the
   same infinities, else |t - ref| <= k u32 scale + u(T) (|t| + |ref|) + 1e-30. k u32 scale: both compute
   in f32 from the same inputs, each within (k / 2) u32 scale of the exact value (k stated where used);
   u(T) (|t| + |ref|): each f32 value rounded once to T (0 for f32), relative; d(T) + 8 d(f32) (d: the
   smallest subnormal): the same roundings where the values are subnormal in T (half d(T) each), and a few
   f32 operations' in f32's subnormal range. Returns 1 when every element passes (the first failure
   printed). */
static int nm_close(const tc_tensor *t, const double *ref, const double *scale, double k, const char *what, const char *desc) {
    const double u32 = tc_unit_roundoff(SELSCAN_F32), uT = t->dt == SELSCAN_F32 ? 0 : tc_unit_roundoff(t->dt);
    const double dmin = (t->dt == SELSCAN_F16 ? 0x1p-24 : t->dt == SELSCAN_BF16 ? 0x1p-133 : 0x1p-149) + 8 * 0x1p-149;
    int64_t i, bad = 0, first = -1;
    for (i = 0; i < t->count; i++) {
        const double a = tc_get(t, i), b = ref[i];
        int ok;
        if (isnan(b) || isnan(a)) ok = isnan(a) && isnan(b);
        else if (isinf(b) || isinf(a)) ok = a == b;
        else if (!isfinite(scale[i])) ok = 1; /* (test_special: an infinite input in the float64 scale, both finite) */
        else ok = fabs(a - b) <= k * u32 * scale[i] + uT * (fabs(a) + fabs(b)) + dmin;
        if (!ok && bad++ == 0) first = i;
    }
    if (first >= 0)
        return CHECK(0, "%s: %d elements over the tolerance, the first %d: cpu %.9g ref %.9g scale %g (k %g) (%s)", what, (int)bad,
                     (int)first, tc_get(t, first), ref[first], scale[first], k, desc);
    return CHECK(1, "%s", what);
}

static double *nm_values(const tc_tensor *t) {
    double *v = (double *)malloc((size_t)(t->count ? t->count : 1) * sizeof(double));
    int64_t i;
    for (i = 0; i < t->count; i++) v[i] = t->mem ? tc_get(t, i) : 0; /* (absent: zeros, not compared) */
    return v;
}

/* the tolerances' k (nm_close) of the CPU entries against the reference, gs channels a group, rows rows:
   out: each path within (gs / 2 + 24) u32 |out| of the exact value: half of its sum of squares' gs
   roundings through the 1 / sqrt (and a few: / gs, + eps, sqrt, 1 / x), the gate z sg (sg within 3.2
   ulp on the vector path, 2.5 by the reference's expf: measured over every float |z| <= 88; then z sg:
   <= 8 u32) twice with u = y s (in u and through r), a few products; */
static double nm_k_out(int64_t gs) { return 2.0 * ((double)gs / 2 + 24); }
/* dy, dz: each within (3 gs / 2 + 48) u32 of the scale: r's error as out's, m's the sum's gs
   roundings plus its terms' (n's, as out's) relative to the mean of |dn n| (a, in the scale), dz's s'(z)
   from sg's error (<= 8 u32 relative to sg (1 + |z|), in the scale); */
static double nm_k_grad(int64_t gs) { return 2.0 * (3.0 * (double)gs / 2 + 48); }
/* dweight: the rows' sums in the same order on both paths; each within (gs / 2 + 32 + rows) u32 of the
   sum of |terms|: its terms' errors (n and s, as out's) and rows roundings of the running sum. */
static double nm_k_dw(int64_t gs, int64_t rows) { return 2.0 * ((double)gs / 2 + 32 + (double)rows); }

static double nm_loss(const nm_prob *P, const double *yv, const double *zv) {
    const int64_t n = P->c.batch * P->c.L * P->c.dim;
    double *o = (double *)malloc((size_t)n * sizeof(double)), l = 0;
    int64_t i;
    nm_oracle(P, yv, zv, o, NULL, NULL, NULL);
    for (i = 0; i < n; i++) l += P->dout.v[i] * o[i];
    free(o);
    return l;
}

static void nm_cfg_random(nm_cfg *c, selscan_dtype dt) {
    /* 2060: over the scalar loop's 2048-channel buffer (its reference-loop fallback); 8200: over the vector
       kernels' 8192 kept sigmoids (the rest computed again); 1536: Mamba-2 130m's; the vector widths' tails */
    static const int64_t gss[] = {1, 2, 3, 4, 8, 16, 24, 64, 1536, 2060, 8200};
    memset(c, 0, sizeof *c);
    c->dt = dt;
    c->batch = tc_randint(1, 3);
    c->L = tc_randint(1, tc_quick() ? 5 : 9);
    c->gs = gss[tc_randint(0, 10)];
    c->dim = c->gs * tc_randint(1, c->gs >= 1024 ? 1 : c->gs >= 24 ? 2 : 5);
    c->z = tc_coin(0.75);
    c->w = tc_coin(0.75);
    c->before = tc_coin(0.5);
    c->eps = tc_coin(0.2) ? 0.0f : (float)tc_uniform(1e-6, 1e-2);
    c->layout = -1;
}

static const char *nm_describe(const nm_cfg *c, char *buf, size_t n) {
    snprintf(buf, n, "%s batch %d L %d dim %d gs %d z %d w %d before %d eps %g%s", tc_dtname(c->dt), (int)c->batch, (int)c->L,
             (int)c->dim, (int)c->gs, c->z, c->w, c->before, (double)c->eps, c->vec ? " vec layouts" : "");
    return buf;
}

/* Tolerances. The f32 part: the library sums gs squares in f32 (at most gs roundings of the sum,
   relative), a handful more roundings an element (the CPU's vector sigmoid, 3.2 ulp, among them); the
   backward's mean of dn * n likewise, and
   dweight sums batch * L terms. So f32 error ~ (terms + 16) u32, and k = 1 rounding of the
   output to T for the T-typed outputs (dweight is f32). */
static double nm_tol(const nm_cfg *c, int64_t terms, int lowp) {
    const double f32 = (double)(terms + 16) * tc_unit_roundoff(SELSCAN_F32);
    return lowp ? tc_tol_lowp(c->dt, f32, 1) : f32;
}

static void test_oracle(void) {
    const int cases = tc_quick() ? 40 : 160;
    int i;
    for (i = 0; i < cases; i++) {
        nm_prob P;
        nm_cfg c;
        char desc[160];
        double *out, *dy, *dz, *dw, *sy, *sz, *ko, *ky, *kz, *kw, *ro, *ry, *rz, *rw;
        int64_t cnt, rows;
        unsigned char *snap_out;
        nm_cfg_random(&c, (selscan_dtype)(i % 3));
        c.vec = i % 4 < 2; /* half the cases: every input's channels contiguous (the vector path) */
        nm_describe(&c, desc, sizeof desc);
        nm_make(&P, &c);
        cnt = P.y.count;
        rows = c.batch * c.L;
        out = (double *)malloc((size_t)cnt * sizeof(double));
        dy = (double *)malloc((size_t)cnt * sizeof(double));
        dz = (double *)malloc((size_t)cnt * sizeof(double));
        dw = (double *)malloc((size_t)c.dim * sizeof(double));
        sy = (double *)malloc((size_t)cnt * sizeof(double));
        sz = (double *)malloc((size_t)cnt * sizeof(double));
        ko = (double *)malloc((size_t)cnt * sizeof(double));
        ky = (double *)malloc((size_t)cnt * sizeof(double));
        kz = (double *)malloc((size_t)cnt * sizeof(double));
        kw = (double *)malloc((size_t)c.dim * sizeof(double));
        nm_oracle_s(&P, P.y.v, P.z.v, out, dy, dz, dw, sy, sz);
        nm_scales(&P, ko, ky, kz, kw);
        /* forward: ref against the oracle; cpu against ref (nm_close), and against the oracle; cpu twice: bitwise */
        CHECK(selscan_norm_forward_ref(&P.p) == SELSCAN_OK, "forward_ref status (%s)", desc);
        CHECK(tc_rel_err(&P.out, out) <= nm_tol(&c, c.gs, 1), "out vs oracle: %g (%s)", tc_rel_err(&P.out, out), desc);
        CHECK(tc_gaps_dirty(&P.out) == 0, "out's gaps written (%s)", desc);
        ro = nm_values(&P.out);
        tc_poison(&P.out);
        CHECK(selscan_norm_forward_cpu(&P.p) == SELSCAN_OK, "forward_cpu status (%s)", desc);
        nm_close(&P.out, ro, ko, nm_k_out(c.gs), "cpu out vs ref", desc);
        CHECK(tc_rel_err(&P.out, out) <= nm_tol(&c, c.gs, 1), "cpu out vs oracle: %g (%s)", tc_rel_err(&P.out, out), desc);
        CHECK(tc_gaps_dirty(&P.out) == 0, "cpu out's gaps written (%s)", desc);
        snap_out = tc_snapshot(&P.out);
        tc_poison(&P.out);
        CHECK(selscan_norm_forward_cpu(&P.p) == SELSCAN_OK && tc_same(&P.out, snap_out), "cpu forward twice: not bitwise (%s)", desc);
        free(snap_out);
        /* backward: everything at once, ref then cpu */
        CHECK(selscan_norm_backward_ref(&P.p, &P.g) == SELSCAN_OK, "backward_ref status (%s)", desc);
        CHECK(nm_err(&P.dy, dy, sy) <= nm_tol(&c, 2 * c.gs, 1), "dy vs oracle: %g (%s)", nm_err(&P.dy, dy, sy), desc);
        if (c.z) CHECK(nm_err(&P.dz, dz, sz) <= nm_tol(&c, 2 * c.gs, 1), "dz vs oracle: %g (%s)", nm_err(&P.dz, dz, sz), desc);
        CHECK(nm_err(&P.dw, dw, kw) <= nm_tol(&c, c.batch * c.L + 2 * c.gs, 0), /* (relative to the sum of |terms|: rows cancel) */
              "dweight vs oracle: %g (%s)", nm_err(&P.dw, dw, kw), desc);
        CHECK(!tc_gaps_dirty(&P.dy) && !tc_gaps_dirty(&P.dz) && !tc_gaps_dirty(&P.dw), "gradients' gaps written (%s)", desc);
        ry = nm_values(&P.dy); rz = nm_values(&P.dz); rw = nm_values(&P.dw);
        { /* ref again: bitwise */
            unsigned char *s1 = tc_snapshot(&P.dy), *s2 = tc_snapshot(&P.dz), *s3 = tc_snapshot(&P.dw);
            tc_poison(&P.dy); tc_poison(&P.dz); tc_poison(&P.dw);
            CHECK(selscan_norm_backward_ref(&P.p, &P.g) == SELSCAN_OK && tc_same(&P.dy, s1) && tc_same(&P.dz, s2) && tc_same(&P.dw, s3),
                  "backward ref twice: not bitwise (%s)", desc);
            free(s1); free(s2); free(s3);
        }
        tc_poison(&P.dy); tc_poison(&P.dz); tc_poison(&P.dw);
        CHECK(selscan_norm_backward_cpu(&P.p, &P.g) == SELSCAN_OK, "backward_cpu status (%s)", desc);
        nm_close(&P.dy, ry, ky, nm_k_grad(c.gs), "cpu dy vs ref", desc);
        if (c.z) nm_close(&P.dz, rz, kz, nm_k_grad(c.gs), "cpu dz vs ref", desc);
        nm_close(&P.dw, rw, kw, nm_k_dw(c.gs, rows), "cpu dweight vs ref", desc);
        CHECK(nm_err(&P.dy, dy, sy) <= nm_tol(&c, 2 * c.gs, 1), "cpu dy vs oracle: %g (%s)", nm_err(&P.dy, dy, sy), desc);
        if (c.z) CHECK(nm_err(&P.dz, dz, sz) <= nm_tol(&c, 2 * c.gs, 1), "cpu dz vs oracle: %g (%s)", nm_err(&P.dz, dz, sz), desc);
        CHECK(nm_err(&P.dw, dw, kw) <= nm_tol(&c, c.batch * c.L + 2 * c.gs, 0), /* (relative to the sum of |terms|: rows cancel) */
              "cpu dweight vs oracle: %g (%s)", nm_err(&P.dw, dw, kw), desc);
        CHECK(!tc_gaps_dirty(&P.dy) && !tc_gaps_dirty(&P.dz) && !tc_gaps_dirty(&P.dw), "cpu gradients' gaps written (%s)", desc);
        { /* cpu twice: bitwise (fixed order); each gradient alone: the same bits, the others untouched */
            unsigned char *s[3];
            tc_tensor *t[3] = {&P.dy, &P.dz, &P.dw};
            int which;
            for (which = 0; which < 3; which++) s[which] = tc_snapshot(t[which]);
            tc_poison(&P.dy); tc_poison(&P.dz); tc_poison(&P.dw);
            CHECK(selscan_norm_backward_cpu(&P.p, &P.g) == SELSCAN_OK && tc_same(&P.dy, s[0]) && tc_same(&P.dz, s[1]) &&
                      tc_same(&P.dw, s[2]), "backward cpu twice: not bitwise (%s)", desc);
            for (which = 0; which < 3; which++) {
                selscan_norm_grads g = P.g;
                unsigned char *o1 = tc_snapshot(t[(which + 1) % 3]), *o2 = tc_snapshot(t[(which + 2) % 3]);
                if (which == 1 && !c.z) { free(o1); free(o2); continue; }
                if (which != 0) g.dy.data = NULL;
                if (which != 1) g.dz.data = NULL;
                if (which != 2) g.dweight.data = NULL;
                tc_poison(t[which]);
                CHECK(selscan_norm_backward_cpu(&P.p, &g) == SELSCAN_OK && tc_same(t[which], s[which]) &&
                          tc_same(t[(which + 1) % 3], o1) && tc_same(t[(which + 2) % 3], o2),
                      "gradient %d alone differs, or another written (%s)", which, desc);
                free(o1); free(o2);
            }
            for (which = 0; which < 3; which++) free(s[which]);
        }
        free(out); free(dy); free(dz); free(dw); free(sy); free(sz);
        free(ko); free(ky); free(kz); free(kw); free(ro); free(ry); free(rz); free(rw);
        nm_free(&P);
    }
}

/* The oracle's analytic gradients against central differences of its loss (double), and the
   library's f32 gradients against the same differences. */
static void test_fd(void) {
    int i;
    for (i = 0; i < 24; i++) {
        nm_prob P;
        nm_cfg c;
        char desc[160];
        int64_t cnt, k, j;
        double *dy, *dz, *dw, *fy, *fz, *fw, *yv, *zv;
        memset(&c, 0, sizeof c);
        c.dt = SELSCAN_F32;
        c.batch = 2; c.L = 3; c.gs = (int64_t)tc_randint(2, 6); /* (one channel: n = +-1, a flat loss) */ c.dim = c.gs * tc_randint(1, 3);
        c.z = i % 3 != 2; c.w = 1; c.before = i % 2;
        c.eps = i % 4 == 0 ? 0.0f : 1e-3f;
        c.layout = -1;
        c.vec = i % 2;
        nm_describe(&c, desc, sizeof desc);
        nm_make(&P, &c);
        cnt = P.y.count;
        dy = (double *)calloc((size_t)cnt, sizeof(double)); dz = (double *)calloc((size_t)cnt, sizeof(double));
        fy = (double *)calloc((size_t)cnt, sizeof(double)); fz = (double *)calloc((size_t)cnt, sizeof(double));
        dw = (double *)calloc((size_t)c.dim, sizeof(double)); fw = (double *)calloc((size_t)c.dim, sizeof(double));
        yv = (double *)malloc((size_t)cnt * sizeof(double)); zv = (double *)malloc((size_t)cnt * sizeof(double));
        memcpy(yv, P.y.v, (size_t)cnt * sizeof(double));
        memcpy(zv, P.z.v, (size_t)cnt * sizeof(double));
        nm_oracle(&P, yv, zv, NULL, dy, dz, dw);
        for (k = 0; k < cnt; k++) {
            const double h = 1e-5;
            double a, b, sv = yv[k];
            yv[k] = sv + h; a = nm_loss(&P, yv, zv); yv[k] = sv - h; b = nm_loss(&P, yv, zv); yv[k] = sv;
            fy[k] = (a - b) / (2 * h);
            if (c.z) {
                sv = zv[k];
                zv[k] = sv + h; a = nm_loss(&P, yv, zv); zv[k] = sv - h; b = nm_loss(&P, yv, zv); zv[k] = sv;
                fz[k] = (a - b) / (2 * h);
            }
        }
        for (j = 0; j < c.dim; j++) {
            const double h = 1e-5, sv = P.w.v[j];
            double a, b;
            P.w.v[j] = sv + h; a = nm_loss(&P, yv, zv); P.w.v[j] = sv - h; b = nm_loss(&P, yv, zv); P.w.v[j] = sv;
            fw[j] = (a - b) / (2 * h);
        }
        /* central differences in double with h 1e-5: truncation ~h^2, cancellation ~1e-16 / h */
        CHECK(tc_rel_err_arr(dy, fy, cnt) <= 1e-7, "oracle dy vs fd: %g (%s)", tc_rel_err_arr(dy, fy, cnt), desc);
        if (c.z) CHECK(tc_rel_err_arr(dz, fz, cnt) <= 1e-7, "oracle dz vs fd: %g (%s)", tc_rel_err_arr(dz, fz, cnt), desc);
        CHECK(tc_rel_err_arr(dw, fw, c.dim) <= 1e-7, "oracle dweight vs fd: %g (%s)", tc_rel_err_arr(dw, fw, c.dim), desc);
        CHECK(selscan_norm_backward_cpu(&P.p, &P.g) == SELSCAN_OK, "backward status (%s)", desc);
        CHECK(tc_rel_err(&P.dy, fy) <= TOL_GRAD_FD, "dy vs fd: %g (%s)", tc_rel_err(&P.dy, fy), desc);
        if (c.z) CHECK(tc_rel_err(&P.dz, fz) <= TOL_GRAD_FD, "dz vs fd: %g (%s)", tc_rel_err(&P.dz, fz), desc);
        CHECK(tc_rel_err(&P.dw, fw) <= TOL_GRAD_FD, "dweight vs fd: %g (%s)", tc_rel_err(&P.dw, fw), desc);
        free(dy); free(dz); free(dw); free(fy); free(fz); free(fw); free(yv); free(zv);
        nm_free(&P);
    }
}

/* The inputs in P as their dtype stores them (1e19 is inf in f16), then the CPU entries against the reference:
   out, dy, dz (with z) and dweight by nm_close, what: the check's name ("special", "extremes") */
static void nm_cpu_vs_ref(nm_prob *P, const nm_cfg *c, const char *what, const char *desc) {
    static const char *const names[4] = {"out", "dy", "dz", "dweight"};
    tc_tensor *const outs[4] = {&P->out, &P->dy, &P->dz, &P->dw};
    const double kt[4] = {nm_k_out(c->gs), nm_k_grad(c->gs), nm_k_grad(c->gs), nm_k_dw(c->gs, c->batch * c->L)};
    double *ks[4], *rs[4];
    char name[64];
    int i;
    tc_store(&P->y); tc_store(&P->z); tc_store(&P->dout);
    tc_load(&P->y); tc_load(&P->z); tc_load(&P->dout);
    for (i = 0; i < 4; i++) ks[i] = (double *)malloc((size_t)(i < 3 ? P->y.count : c->dim) * sizeof(double));
    nm_scales(P, ks[0], ks[1], ks[2], ks[3]);
    CHECK(selscan_norm_forward_ref(&P->p) == SELSCAN_OK && selscan_norm_backward_ref(&P->p, &P->g) == SELSCAN_OK, "ref status (%s)", desc);
    for (i = 0; i < 4; i++) rs[i] = nm_values(outs[i]);
    for (i = 0; i < 4; i++) tc_poison(outs[i]);
    CHECK(selscan_norm_forward_cpu(&P->p) == SELSCAN_OK && selscan_norm_backward_cpu(&P->p, &P->g) == SELSCAN_OK, "cpu status (%s)", desc);
    for (i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "%s: cpu %s vs ref", what, names[i]);
        if (i != 2 || c->z) nm_close(outs[i], rs[i], ks[i], kt[i], name, desc);
        free(ks[i]);
        free(rs[i]);
    }
}

/* Special inputs through the CPU entries (the vector path: contiguous tensors) against the reference:
   z = +-inf, +-100, +-88.5 and +-87.9 (around selscan__vexp's clamps), y = +inf, y = 1e19 (u^2 = 1e38:
   the sum of squares overflows), dout = +-inf, a group of zeros (eps 0: r = inf): NaN where the
   reference's NaN and only there, the same infinities, the rest within nm_close's tolerances. */
static void test_special(void) {
    static const double zs[] = {INFINITY, -INFINITY, 100, -100, 88.5, -88.5, 87.9, -87.9};
    int dti, before, e;
    for (dti = 0; dti < 3; dti++)
        for (before = 0; before < 2; before++)
            for (e = 0; e < 2; e++) {
                nm_prob P;
                nm_cfg c;
                char desc[160];
                int64_t k;
                memset(&c, 0, sizeof c);
                c.dt = (selscan_dtype)dti; c.batch = 2; c.L = 5; c.gs = 24; c.dim = 48; c.z = 1; c.w = 1; c.before = before;
                c.eps = e ? 0.0f : 1e-5f;
                c.layout = TC_LAYOUT_CONTIG;
                nm_describe(&c, desc, sizeof desc);
                nm_make(&P, &c);
                for (k = 0; k < 8; k++) P.z.v[0 * 48 + 3 * k + 1] = zs[k];      /* row 0, group 0 */
                for (k = 0; k < 8; k++) P.z.v[1 * 48 + 24 + 2 * k] = zs[7 - k]; /* row 1, group 1 */
                P.y.v[2 * 48 + 5] = INFINITY;                                  /* row 2, group 0 */
                for (k = 0; k < 4; k++) P.y.v[2 * 48 + 24 + 5 * k] = k % 2 ? -1e19 : 1e19; /* row 2, group 1 */
                P.dout.v[3 * 48 + 7] = INFINITY;                               /* row 3, group 0 */
                P.dout.v[3 * 48 + 30] = -INFINITY;                             /* row 3, group 1 */
                for (k = 0; k < 24; k++) P.y.v[4 * 48 + 24 + k] = 0;           /* row 4, group 1 */
                P.z.v[5 * 48 + 9] = 100; P.dout.v[5 * 48 + 9] = INFINITY;      /* row 5 */
                nm_cpu_vs_ref(&P, &c, "special", desc);
                nm_free(&P);
            }
}

/* Extremes where the vector path's arithmetic once left the reference's (a hostile review's reproducers, f32,
   one group of 16, channels alternating two values): the backward's mean as r times a sum of dn * u (it
   overflowed to -inf, or made 0 * inf = NaN, or fell into subnormals, where the reference's sum of dn * (u r)
   did not), and z in (-88.73, -88.37] (the vector sigmoid 0 where the reference's is subnormal: a finite out
   0, an infinite one NaN). Each against the reference by nm_close, the CPU entries on every instruction set
   the run takes. */
static void test_extremes(void) {
    static const struct {
        const char *name;
        int z, before;
        float eps;
        double y[2], z0, d[2];
    } cs[] = {
        {"dn * u overflows", 0, 0, 1e-5f, {4e18, 4e18}, 0, {1e20, 1e20}},
        {"u^2 and dn * u overflow (r 0)", 0, 0, 1e-5f, {1e20, 1e20}, 0, {1e20, 1e20}},
        {"dn * u subnormal, eps 0", 0, 0, 0.0f, {2e-20, 1e-20}, 0, {2e-25, 1e-25}},
        {"z -88.5 inside u, y 1e30", 1, 0, 1e-5f, {1e30, 1e30}, -88.5, {1, 1}},
        {"z -88.5 inside u, eps 0", 1, 0, 0.0f, {1, 1}, -88.5, {1, 1}},
        {"z -88.5 after the norm", 1, 1, 1e-5f, {1, 2}, -88.5, {1e30, 1e30}},
    };
    size_t n;
    for (n = 0; n < sizeof cs / sizeof cs[0]; n++) {
        nm_prob P;
        nm_cfg c;
        char desc[200];
        int64_t k;
        memset(&c, 0, sizeof c);
        c.dt = SELSCAN_F32; c.batch = 1; c.L = 1; c.gs = 16; c.dim = 16; c.z = cs[n].z; c.before = cs[n].before;
        c.eps = cs[n].eps;
        c.layout = TC_LAYOUT_CONTIG;
        snprintf(desc, sizeof desc, "%s", cs[n].name);
        nm_make(&P, &c);
        for (k = 0; k < 16; k++) {
            P.y.v[k] = cs[n].y[k % 2];
            P.dout.v[k] = cs[n].d[k % 2];
            if (c.z) P.z.v[k] = cs[n].z0;
        }
        nm_cpu_vs_ref(&P, &c, "extremes", desc);
        nm_free(&P);
    }
}

/* The loads and stores of f16 / bf16 (the vector path's, e.g. selscan__st16_avx512, and its tails'): the
   CPU entries compute in f32 after an exact widening, so a T problem's outputs are, bit for bit, its f32
   twin's (the same values, f32 tensors) rounded to T by selscan_f32_to_f16 / _bf16; dweight (f32) the same. */
static void test_dtypes(void) {
    int i;
    for (i = 0; i < (tc_quick() ? 8 : 24); i++) {
        nm_prob P, F;
        nm_cfg c, c32;
        char desc[160];
        int64_t k, bad = 0;
        tc_tensor *tt[4], *tf[4];
        int j;
        nm_cfg_random(&c, i % 2 ? SELSCAN_BF16 : SELSCAN_F16);
        if (c.gs > 1536) c.gs = 40, c.dim = 80;
        c.vec = 1; /* (the twin is contiguous: both on the vector path) */
        c32 = c;
        c32.dt = SELSCAN_F32;
        c32.layout = TC_LAYOUT_CONTIG;
        nm_describe(&c, desc, sizeof desc);
        nm_make(&P, &c);
        nm_make(&F, &c32);
        memcpy(F.y.v, P.y.v, (size_t)P.y.count * sizeof(double));
        memcpy(F.dout.v, P.dout.v, (size_t)P.y.count * sizeof(double));
        memcpy(F.w.v, P.w.v, (size_t)c.dim * sizeof(double));
        if (c.z) memcpy(F.z.v, P.z.v, (size_t)P.y.count * sizeof(double));
        tc_store(&F.y); tc_store(&F.z); tc_store(&F.w); tc_store(&F.dout);
        CHECK(selscan_norm_forward_cpu(&P.p) == SELSCAN_OK && selscan_norm_backward_cpu(&P.p, &P.g) == SELSCAN_OK &&
                  selscan_norm_forward_cpu(&F.p) == SELSCAN_OK && selscan_norm_backward_cpu(&F.p, &F.g) == SELSCAN_OK,
              "status (%s)", desc);
        tt[0] = &P.out; tt[1] = &P.dy; tt[2] = &P.dz; tt[3] = &P.dw;
        tf[0] = &F.out; tf[1] = &F.dy; tf[2] = &F.dz; tf[3] = &F.dw;
        for (j = 0; j < 4; j++) {
            if (!tt[j]->mem) continue;
            for (k = 0; k < tt[j]->count; k++) {
                const float f = (float)tc_get(tf[j], k);
                const unsigned char *at = (const unsigned char *)tt[j]->data + tc_off(tt[j], k) * tc_esize(tt[j]->dt);
                uint16_t h, want;
                if (j == 3) { bad += (float)tc_get(tt[j], k) != f; continue; }
                memcpy(&h, at, 2);
                want = c.dt == SELSCAN_F16 ? selscan_f32_to_f16(f) : selscan_f32_to_bf16(f);
                bad += h != want;
            }
        }
        CHECK(bad == 0, "%d outputs not their f32 twin's rounded to %s (%s)", (int)bad, tc_dtname(c.dt), desc);
        nm_free(&P);
        nm_free(&F);
    }
}

/* A NaN in one element of y (z, dout) reaches the outputs that read it: out of its group (its
   element only where z is the gate after the norm), dy of its group (through the group's mean),
   dz of its group or of its element, dweight of its channel (a sum over every row). */
static void test_nan(void) {
    /* source (0 y, 1 z, 2 dout), before, and whether out / dz / dweight spread to the group (n NaN
       across it: the NaN inside u) or stay at the element / channel */
    static const int cases[][5] = {{0, 0, 1, 1, 1}, {0, 1, 1, 1, 1}, {1, 0, 1, 1, 1}, {1, 1, 0, 0, 0}, {2, 0, 0, 1, 0}, {2, 1, 0, 0, 0}};
    int ci, dti;
    for (ci = 0; ci < 6; ci++)
        for (dti = 0; dti < 3; dti++) {
            nm_prob P;
            nm_cfg c;
            int64_t k, i, bad = 0, row, grp;
            const int which = cases[ci][0], out_grp = cases[ci][2], dz_grp = cases[ci][3], dw_grp = cases[ci][4];
            tc_tensor *src;
            memset(&c, 0, sizeof c);
            c.dt = (selscan_dtype)dti; c.batch = 2; c.L = 3; c.gs = 4; c.dim = 12; c.z = 1; c.w = 1; c.before = cases[ci][1];
            c.eps = 1e-5f; c.layout = TC_LAYOUT_CONTIG;
            nm_make(&P, &c);
            src = which == 0 ? &P.y : which == 1 ? &P.z : &P.dout;
            k = tc_randint(0, P.y.count - 1);
            src->v[k] = NAN;
            tc_store(src);
            row = k / c.dim; grp = (k % c.dim) / c.gs;
            CHECK(selscan_norm_forward_cpu(&P.p) == SELSCAN_OK && selscan_norm_backward_cpu(&P.p, &P.g) == SELSCAN_OK, "status");
            for (i = 0; i < P.out.count; i++) {
                const int in_grp = i / c.dim == row && (i % c.dim) / c.gs == grp;
                const int o = which < 2 && (out_grp ? in_grp : i == k), dz = dz_grp ? in_grp : i == k;
                bad += o != isnan(tc_get(&P.out, i));
                bad += in_grp != isnan(tc_get(&P.dy, i));
                bad += dz != isnan(tc_get(&P.dz, i));
            }
            for (i = 0; i < c.dim; i++) bad += (dw_grp ? i / c.gs == grp : i == k % c.dim) != isnan(tc_get(&P.dw, i));
            CHECK(bad == 0, "NaN case %d (%s): %d outputs NaN where they should not be or not where they should", ci, tc_dtname(c.dt),
                  (int)bad);
            nm_free(&P);
        }
}

/* ---- validation: every rule, outputs untouched ---- */
typedef struct nm_bad {
    const char *what;
    selscan_status st;
    const char *operand;
    selscan_rule code;
    int bwd; /* 0 forward, 1 backward, 2 both */
} nm_bad;

static int nm_expect(nm_prob *P, const selscan_norm_problem *p, const selscan_norm_grads *g, const nm_bad *b, int bwd) {
    selscan_diag d;
    selscan_norm_problem q = *p;
    unsigned char *s[4];
    tc_tensor *t[4] = {&P->out, &P->dy, &P->dz, &P->dw};
    selscan_status st;
    int k, same = 1, ok;
    for (k = 0; k < 4; k++) s[k] = tc_snapshot(t[k]);
    memset(&d, 0, sizeof d);
    q.diag = &d;
    st = bwd ? selscan_norm_backward_cpu(&q, g) : selscan_norm_forward_cpu(&q);
    for (k = 0; k < 4; k++) { same &= tc_same(t[k], s[k]); free(s[k]); }
    ok = CHECK(st == b->st && d.code == b->code && d.operand && strcmp(d.operand, b->operand) == 0 && same,
               "%s (%s): status %s code %s operand %s untouched %d; want %s %s %s", b->what, bwd ? "bwd" : "fwd",
               selscan_status_name(st), selscan_rule_name(d.code), d.operand ? d.operand : "-", same,
               selscan_status_name(b->st), selscan_rule_name(b->code), b->operand);
    /* the validate entry gives the same answer */
    memset(&d, 0, sizeof d);
    st = bwd ? selscan_validate_norm_grads(&q, g) : selscan_validate_norm(&q);
    CHECK(st == b->st && d.code == b->code, "%s: validate_norm%s disagrees (%s)", b->what, bwd ? "_grads" : "", selscan_rule_name(d.code));
    return ok;
}

static void test_validation(void) {
    nm_prob P;
    nm_cfg c;
    memset(&c, 0, sizeof c);
    c.dt = SELSCAN_BF16; c.batch = 2; c.L = 5; c.gs = 8; c.dim = 16; c.z = 1; c.w = 1; c.before = 1; c.eps = 1e-5f;
    c.layout = TC_LAYOUT_CONTIG;
    nm_make(&P, &c);
    P.p.group_size = 8;
#define NM_CASE(WHAT, ST, OPD, CODE, BWD, MUT)                                              \
    do {                                                                                    \
        selscan_norm_problem p = P.p;                                                       \
        selscan_norm_grads g = P.g;                                                         \
        const nm_bad b = {WHAT, ST, OPD, SELSCAN_RULE_##CODE, BWD};                         \
        MUT;                                                                                \
        (void)g;                                                                            \
        if (BWD != 1) nm_expect(&P, &p, &g, &b, 0);                                         \
        if (BWD != 0) nm_expect(&P, &p, &g, &b, 1);                                         \
    } while (0)
    NM_CASE("dtype", SELSCAN_ERR_DTYPE, "dtype", UNKNOWN_DTYPE, 2, p.dtype = (selscan_dtype)7);
    NM_CASE("flags", SELSCAN_ERR_UNSUPPORTED, "flags", UNKNOWN_FLAG, 2, p.flags = 2u);
    NM_CASE("batch 0", SELSCAN_ERR_SHAPE, "batch", NOT_POSITIVE, 2, p.batch = 0);
    NM_CASE("seqlen -1", SELSCAN_ERR_SHAPE, "seqlen", NOT_POSITIVE, 2, p.seqlen = -1);
    NM_CASE("dim 0", SELSCAN_ERR_SHAPE, "dim", NOT_POSITIVE, 2, p.dim = 0);
    NM_CASE("group_size -8", SELSCAN_ERR_SHAPE, "group_size", NEGATIVE, 2, p.group_size = -8);
    NM_CASE("group_size 6", SELSCAN_ERR_SHAPE, "group_size", NOT_DIVIDING, 2, p.group_size = 6);
    NM_CASE("group_size 32", SELSCAN_ERR_SHAPE, "group_size", NOT_DIVIDING, 2, p.group_size = 32);
    NM_CASE("eps -1", SELSCAN_ERR_SHAPE, "eps", EPS, 2, p.eps = -1e-6f);
    NM_CASE("eps inf", SELSCAN_ERR_SHAPE, "eps", EPS, 2, p.eps = INFINITY);
    NM_CASE("eps nan", SELSCAN_ERR_SHAPE, "eps", EPS, 2, p.eps = NAN);
    NM_CASE("y missing", SELSCAN_ERR_NULL, "y", MISSING, 2, p.y.data = NULL);
    NM_CASE("out missing", SELSCAN_ERR_NULL, "out", MISSING, 0, p.out.data = NULL);
    NM_CASE("count", SELSCAN_ERR_SHAPE, "batch * seqlen * dim", COUNT_OVERFLOWS, 2, (p.batch = INT64_C(1) << 40, p.seqlen = INT64_C(1) << 20));
    NM_CASE("y misaligned", SELSCAN_ERR_STRIDE, "y", MISALIGNED, 2, p.y.data = (const char *)p.y.data + 1);
    NM_CASE("z negative stride", SELSCAN_ERR_STRIDE, "z", NEGATIVE_STRIDE, 2, (p.z.stride[0] = -1, p.z.stride[1] = 16, p.z.stride[2] = 1));
    NM_CASE("weight span", SELSCAN_ERR_STRIDE, "weight", SPAN_OVERFLOWS, 2, p.weight.stride[0] = INT64_C(1) << 62);
    NM_CASE("out elements overlap", SELSCAN_ERR_STRIDE, "out", ELEMENTS_OVERLAP, 0, (p.out.stride[0] = 80, p.out.stride[1] = 8, p.out.stride[2] = 1));
    NM_CASE("out is y", SELSCAN_ERR_ALIAS, "out", OVERLAPS, 0, p.out.data = (void *)(uintptr_t)p.y.data);
    NM_CASE("out is weight", SELSCAN_ERR_ALIAS, "out", OVERLAPS, 0, p.out.data = (void *)(uintptr_t)p.weight.data);
    {
        selscan_diag d;
        selscan_norm_problem q = P.p;
        memset(&d, 0, sizeof d);
        q.diag = &d;
        CHECK(selscan_norm_backward_cpu(&q, NULL) == SELSCAN_ERR_NULL && d.code == SELSCAN_RULE_MISSING && d.operand &&
                  strcmp(d.operand, "grads") == 0, "grads NULL");
    }
    NM_CASE("dout missing", SELSCAN_ERR_NULL, "dout", MISSING, 1, g.dout.data = NULL);
    NM_CASE("dz without z", SELSCAN_ERR_NULL, "dz", WITHOUT_Z, 1, p.z.data = NULL);
    NM_CASE("dy elements overlap", SELSCAN_ERR_STRIDE, "dy", ELEMENTS_OVERLAP, 1, (g.dy.stride[0] = 0, g.dy.stride[1] = 16, g.dy.stride[2] = 1));
    NM_CASE("dy is dout", SELSCAN_ERR_ALIAS, "dy", OVERLAPS, 1, g.dy.data = (void *)(uintptr_t)g.dout.data);
    NM_CASE("dy is dz", SELSCAN_ERR_ALIAS, "dy", OVERLAPS, 1, g.dz.data = g.dy.data);
    NM_CASE("dz is z", SELSCAN_ERR_ALIAS, "dz", OVERLAPS, 1, g.dz.data = (void *)(uintptr_t)p.z.data);
    NM_CASE("dweight is weight", SELSCAN_ERR_ALIAS, "dweight", OVERLAPS, 1, g.dweight.data = (void *)(uintptr_t)p.weight.data);
    NM_CASE("dweight misaligned", SELSCAN_ERR_STRIDE, "dweight", MISALIGNED, 1, g.dweight.data = (char *)g.dweight.data + 2);
#undef NM_CASE
    /* valid: still OK after all that (the cases copied the problem) */
    CHECK(selscan_norm_forward_cpu(&P.p) == SELSCAN_OK && selscan_norm_backward_cpu(&P.p, &P.g) == SELSCAN_OK, "the valid problem");
    CHECK(selscan_norm_forward_cpu(NULL) == SELSCAN_ERR_NULL, "NULL problem");
    nm_free(&P);
}

static void test_sizes(void) {
    selscan_norm_problem p;
    selscan_diag d;
    memset(&p, 0, sizeof p);
    p.diag = &d;
    p.batch = 0; p.seqlen = 3; p.dim = 8; p.group_size = 4; p.eps = 1e-6f;
    CHECK(selscan_check_norm_sizes(&p) == SELSCAN_OK, "empty batch accepted");
    p.batch = 2; p.dim = 0; p.group_size = 3;
    CHECK(selscan_check_norm_sizes(&p) == SELSCAN_OK, "empty dim accepted (any group_size)");
    p.dim = 8;
    memset(&d, 0, sizeof d);
    CHECK(selscan_check_norm_sizes(&p) == SELSCAN_ERR_SHAPE && d.code == SELSCAN_RULE_NOT_DIVIDING, "group_size 3 of dim 8");
    p.group_size = 0;
    CHECK(selscan_check_norm_sizes(&p) == SELSCAN_OK, "group_size 0 means dim");
    p.batch = -1;
    memset(&d, 0, sizeof d);
    CHECK(selscan_check_norm_sizes(&p) == SELSCAN_ERR_SHAPE && d.code == SELSCAN_RULE_NEGATIVE, "batch -1 refused");
    p.batch = 1; p.eps = -INFINITY;
    memset(&d, 0, sizeof d);
    CHECK(selscan_check_norm_sizes(&p) == SELSCAN_ERR_SHAPE && d.code == SELSCAN_RULE_EPS && strcmp(d.operand, "eps") == 0, "eps -inf");
    CHECK(strcmp(selscan_rule_name(SELSCAN_RULE_EPS), "SELSCAN_RULE_EPS") == 0 && SELSCAN_RULE_EPS + 1 == SELSCAN__RULE_COUNT,
          "SELSCAN_RULE_EPS named and last");
}

/* The parts: forward bitwise the plain call; backward dy, dz bitwise it, dweight bitwise the same for
   every n_parts and within the oracle's tolerance; the workspace's and parts' refusals. */
static void test_parts(void) {
    static const int64_t nps[] = {1, 2, 3, 5, 7, 64};
    int i;
    for (i = 0; i < (tc_quick() ? 12 : 48); i++) {
        nm_prob P;
        nm_cfg c;
        char desc[160];
        unsigned char *so, *sy, *sz, *sw = NULL;
        double *dw;
        size_t k;
        nm_cfg_random(&c, (selscan_dtype)(i % 3));
        c.vec = i % 2; /* half: the vector path's parts */
        c.L = tc_randint(1, 150); /* blocks of 64 rows: several */
        if (c.gs > 64) c.L = tc_randint(1, 3);
        nm_describe(&c, desc, sizeof desc);
        nm_make(&P, &c);
        dw = (double *)malloc((size_t)c.dim * sizeof(double));
        nm_oracle(&P, P.y.v, P.z.v, NULL, NULL, NULL, dw);
        CHECK(selscan_norm_forward_cpu(&P.p) == SELSCAN_OK && selscan_norm_backward_cpu(&P.p, &P.g) == SELSCAN_OK, "plain (%s)", desc);
        so = tc_snapshot(&P.out); sy = tc_snapshot(&P.dy); sz = tc_snapshot(&P.dz);
        for (k = 0; k < sizeof nps / sizeof nps[0]; k++) {
            const int64_t n = nps[k];
            size_t bytes = 0;
            unsigned char *ws;
            int64_t j;
            int ok = 1;
            tc_poison(&P.out); tc_poison(&P.dy); tc_poison(&P.dz); tc_poison(&P.dw);
            for (j = 0; j < n; j++) ok &= selscan_norm_forward_cpu_part(&P.p, j, n) == SELSCAN_OK;
            CHECK(ok && tc_same(&P.out, so), "forward parts %d not bitwise the plain call (%s)", (int)n, desc);
            CHECK(selscan_norm_workspace_size_parts(&P.p, &P.g, n, &bytes) == SELSCAN_OK && bytes > 0, "ws size (%s)", desc);
            ws = (unsigned char *)malloc(bytes + 3);
            for (j = n - 1; j >= 0; j--) ok &= selscan_norm_backward_cpu_part(&P.p, &P.g, j, n, ws + 3, bytes) == SELSCAN_OK;
            for (j = 0; j < n; j++) ok &= selscan_norm_backward_cpu_reduce(&P.p, &P.g, j, n, ws + 3, bytes) == SELSCAN_OK;
            CHECK(ok && tc_same(&P.dy, sy) && tc_same(&P.dz, sz), "backward parts %d: dy / dz not bitwise the plain call (%s)", (int)n, desc);
            if (!sw) {
                sw = tc_snapshot(&P.dw);
                CHECK(tc_rel_err(&P.dw, dw) <= nm_tol(&c, c.batch * c.L + 2 * c.gs, 0), "parts' dweight vs oracle: %g (%s)",
                      tc_rel_err(&P.dw, dw), desc);
            } else {
                CHECK(tc_same(&P.dw, sw), "dweight with %d parts not bitwise 1 part's (%s)", (int)n, desc);
            }
            free(ws);
        }
        free(so); free(sy); free(sz); free(sw); free(dw);
        nm_free(&P);
    }
    { /* refusals: outputs untouched */
        nm_prob P;
        nm_cfg c;
        size_t bytes = 0;
        unsigned char *ws, *s1, *s2;
        selscan_diag d;
        selscan_norm_problem q;
        selscan_norm_grads g;
        memset(&c, 0, sizeof c);
        c.dt = SELSCAN_F16; c.batch = 2; c.L = 70; c.gs = 8; c.dim = 16; c.z = 1; c.w = 1; c.eps = 1e-5f; c.layout = TC_LAYOUT_CONTIG;
        nm_make(&P, &c);
        q = P.p;
        q.diag = &d;
        CHECK(selscan_norm_workspace_size_parts(&q, &P.g, 2, &bytes) == SELSCAN_OK && bytes >= 3 * 16 * 4, "ws size");
        ws = (unsigned char *)malloc(bytes);
        s1 = tc_snapshot(&P.dy); s2 = tc_snapshot(&P.dw);
        memset(&d, 0, sizeof d);
        CHECK(selscan_norm_backward_cpu_part(&q, &P.g, 0, 2, NULL, 0) == SELSCAN_ERR_WORKSPACE && d.code == SELSCAN_RULE_MISSING,
              "workspace NULL: %s", selscan_rule_name(d.code));
        memset(&d, 0, sizeof d);
        CHECK(selscan_norm_backward_cpu_reduce(&q, &P.g, 0, 2, ws, 64) == SELSCAN_ERR_WORKSPACE && d.code == SELSCAN_RULE_TOO_SMALL,
              "workspace too small: %s", selscan_rule_name(d.code));
        memset(&d, 0, sizeof d);
        CHECK(selscan_norm_backward_cpu_part(&q, &P.g, 2, 2, ws, bytes) == SELSCAN_ERR_SHAPE && d.code == SELSCAN_RULE_OUT_OF_RANGE &&
              strcmp(d.operand, "part") == 0, "part 2 of 2");
        memset(&d, 0, sizeof d);
        CHECK(selscan_norm_forward_cpu_part(&q, 0, 0) == SELSCAN_ERR_SHAPE && strcmp(d.operand, "n_parts") == 0, "n_parts 0");
        {   /* the workspace over dout's memory: refused, nothing written */
            unsigned char *big = (unsigned char *)malloc(bytes + (size_t)P.dout.alloc * 2);
            selscan_norm_grads g2 = P.g;
            memcpy(big, P.dout.mem, (size_t)P.dout.alloc * 2);
            g2.dout.data = big;
            memset(&d, 0, sizeof d);
            CHECK(selscan_norm_backward_cpu_part(&q, &g2, 0, 1, big, bytes + (size_t)P.dout.alloc * 2) == SELSCAN_ERR_ALIAS &&
                      d.code == SELSCAN_RULE_OVERLAPS && strcmp(d.operand, "workspace") == 0, "workspace overlaps dout: %s %s",
                  d.operand ? d.operand : "-", selscan_rule_name(d.code));
            free(big);
        }
        CHECK(tc_same(&P.dy, s1) && tc_same(&P.dw, s2), "refused parts wrote an output");
        g = P.g;
        g.dweight.data = NULL;
        CHECK(selscan_norm_workspace_size_parts(&q, &g, 3, &bytes) == SELSCAN_OK && bytes == 0 &&
                  selscan_norm_backward_cpu_part(&q, &g, 1, 3, NULL, 0) == SELSCAN_OK &&
                  selscan_norm_backward_cpu_reduce(&q, &g, 1, 3, NULL, 0) == SELSCAN_OK, "no dweight: no workspace");
        CHECK(selscan_norm_workspace_size_parts(&q, NULL, 3, &bytes) == SELSCAN_OK && bytes == 0, "forward: no workspace");
        free(ws); free(s1); free(s2);
        nm_free(&P);
    }
}

int main(void) {
    tc_init("test_norm");
    test_oracle();
    test_fd();
    test_special();
    test_extremes();
    test_dtypes();
    test_nan();
    test_validation();
    test_sizes();
    test_parts();
    return tc_finish();
}
