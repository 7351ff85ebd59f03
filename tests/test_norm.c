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
 *   determinism two calls give bitwise the same outputs; _cpu bitwise _ref
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
} nm_cfg;

typedef struct nm_prob {
    nm_cfg c;
    tc_tensor y, z, w, out, dout, dy, dz, dw;
    selscan_norm_problem p;
    selscan_norm_grads g;
} nm_prob;

static int nm_layout(const nm_cfg *c, int input, int nd) {
    int l = c->layout >= 0 ? c->layout : (int)tc_randint(0, input ? TC_LAYOUT_BCAST : TC_LAYOUT_PADDED);
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
            double ss = 0, r, m = 0;
            for (j = c0; j < c0 + c->gs; j++) {
                const int64_t i = row * c->dim + j;
                const double s = hz ? tc_silu(zv[i]) : 1, u = in ? yv[i] * s : yv[i];
                ss += u * u;
            }
            r = 1.0 / sqrt(ss / (double)c->gs + (double)c->eps);
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
    /* 2060: over the CPU entries' 2048-channel buffer (their reference-loop fallback) */
    static const int64_t gss[] = {1, 2, 3, 4, 8, 16, 24, 64, 2060};
    memset(c, 0, sizeof *c);
    c->dt = dt;
    c->batch = tc_randint(1, 3);
    c->L = tc_randint(1, tc_quick() ? 5 : 9);
    c->gs = gss[tc_randint(0, 8)];
    c->dim = c->gs * tc_randint(1, c->gs >= 1024 ? 1 : c->gs >= 24 ? 2 : 5);
    c->z = tc_coin(0.75);
    c->w = tc_coin(0.75);
    c->before = tc_coin(0.5);
    c->eps = tc_coin(0.2) ? 0.0f : (float)tc_uniform(1e-6, 1e-2);
    c->layout = -1;
}

static const char *nm_describe(const nm_cfg *c, char *buf, size_t n) {
    snprintf(buf, n, "%s batch %d L %d dim %d gs %d z %d w %d before %d eps %g", tc_dtname(c->dt), (int)c->batch, (int)c->L,
             (int)c->dim, (int)c->gs, c->z, c->w, c->before, (double)c->eps);
    return buf;
}

/* Tolerances. The f32 part: the library sums gs squares in f32 (at most gs roundings of the sum,
   relative), a handful more roundings an element; the backward's mean of dn * n likewise, and
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
        double *out, *dy, *dz, *dw, *sy, *sz;
        int64_t cnt;
        unsigned char *snap_out;
        nm_cfg_random(&c, (selscan_dtype)(i % 3));
        nm_describe(&c, desc, sizeof desc);
        nm_make(&P, &c);
        cnt = P.y.count;
        out = (double *)malloc((size_t)cnt * sizeof(double));
        dy = (double *)malloc((size_t)cnt * sizeof(double));
        dz = (double *)malloc((size_t)cnt * sizeof(double));
        dw = (double *)malloc((size_t)c.dim * sizeof(double));
        sy = (double *)malloc((size_t)cnt * sizeof(double));
        sz = (double *)malloc((size_t)cnt * sizeof(double));
        nm_oracle_s(&P, P.y.v, P.z.v, out, dy, dz, dw, sy, sz);
        /* forward: ref, then cpu into a second out (bitwise equal) */
        CHECK(selscan_norm_forward_ref(&P.p) == SELSCAN_OK, "forward_ref status (%s)", desc);
        CHECK(tc_rel_err(&P.out, out) <= nm_tol(&c, c.gs, 1), "out vs oracle: %g (%s)", tc_rel_err(&P.out, out), desc);
        CHECK(tc_gaps_dirty(&P.out) == 0, "out's gaps written (%s)", desc);
        snap_out = tc_snapshot(&P.out);
        tc_poison(&P.out);
        CHECK(selscan_norm_forward_cpu(&P.p) == SELSCAN_OK && tc_same(&P.out, snap_out), "cpu forward not bitwise ref (%s)", desc);
        free(snap_out);
        /* backward: everything at once */
        CHECK(selscan_norm_backward_ref(&P.p, &P.g) == SELSCAN_OK, "backward_ref status (%s)", desc);
        CHECK(nm_err(&P.dy, dy, sy) <= nm_tol(&c, 2 * c.gs, 1), "dy vs oracle: %g (%s)", nm_err(&P.dy, dy, sy), desc);
        if (c.z) CHECK(nm_err(&P.dz, dz, sz) <= nm_tol(&c, 2 * c.gs, 1), "dz vs oracle: %g (%s)", nm_err(&P.dz, dz, sz), desc);
        CHECK(tc_rel_err(&P.dw, dw) <= nm_tol(&c, c.batch * c.L + 2 * c.gs, 0),
              "dweight vs oracle: %g (%s)", tc_rel_err(&P.dw, dw), desc);
        CHECK(!tc_gaps_dirty(&P.dy) && !tc_gaps_dirty(&P.dz) && !tc_gaps_dirty(&P.dw), "gradients' gaps written (%s)", desc);
        { /* cpu: bitwise ref; twice: bitwise (fixed order) */
            unsigned char *s1 = tc_snapshot(&P.dy), *s2 = tc_snapshot(&P.dz), *s3 = tc_snapshot(&P.dw);
            int rep;
            for (rep = 0; rep < 2; rep++) {
                tc_poison(&P.dy); tc_poison(&P.dz); tc_poison(&P.dw);
                CHECK((rep ? selscan_norm_backward_ref(&P.p, &P.g) : selscan_norm_backward_cpu(&P.p, &P.g)) == SELSCAN_OK &&
                          tc_same(&P.dy, s1) && tc_same(&P.dz, s2) && tc_same(&P.dw, s3),
                      "backward %s not bitwise the first ref call (%s)", rep ? "ref again" : "cpu", desc);
            }
            free(s1); free(s2); free(s3);
        }
        /* each gradient alone: the same values, the others untouched */
        {
            int which;
            for (which = 0; which < 3; which++) {
                selscan_norm_grads g = P.g;
                tc_tensor *t[3] = {&P.dy, &P.dz, &P.dw};
                unsigned char *s = tc_snapshot(t[which]);
                if (which == 1 && !c.z) { free(s); continue; }
                if (which != 0) g.dy.data = NULL;
                if (which != 1) g.dz.data = NULL;
                if (which != 2) g.dweight.data = NULL;
                tc_poison(t[which]);
                CHECK(selscan_norm_backward_cpu(&P.p, &g) == SELSCAN_OK && tc_same(t[which], s), "gradient %d alone differs (%s)", which, desc);
                free(s);
            }
        }
        free(out); free(dy); free(dz); free(dw); free(sy); free(sz);
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
    test_nan();
    test_validation();
    test_sizes();
    test_parts();
    return tc_finish();
}
