/* test_conv: the causal depthwise conv1d (issue 28 item 1; selscan.h >>conv-api).
 *
 *   oracle      the reference forward against a float64 loop written here from the math in
 *               >>conv-api (y; final_state exactly: it is a copy of inputs)
 *   fd          the reference backward against central differences of the float64 loss
 *               sum(dy * y) + sum(dfinal * final_state), every input (x, weight, bias, init_state)
 *   fast        the fast path (selscan_conv_*_cpu) against the reference, forward and backward
 *   parts       n_parts 1..7 and a few larger: every output bitwise the n_parts = 1 result
 *   packed      packed sequences (cu_seqlens) equal to separate calls per sequence
 *   step        the decode update against the forward one token at a time (and seqlen tokens at
 *               once), state_index with padding and unused rows, state_len > W - 1; weight and
 *               bias in T (SELSCAN_CONV_PARAMS_T) against the forward with their values in f32
 *   nan         NaN in x / dy reaches exactly the outputs it should
 *   validation  every rule: status, diag operand and rule, not one output byte written
 *   errno       every entry point keeps the caller's errno (silu's expf overflows)
 *   seqlen 1    x / y's stride[2] is not read (any value >= 0); a negative one is refused
 * Random layouts (contiguous, explicit strides, channels-last, permuted with padding, broadcast
 * inputs) on every case; gaps poisoned with 0xFF (NaN) so stray reads and writes show. */
#include "../selscan.h"
#include "common.h"
#include <errno.h>
#include <math.h>

/* ------------------------------------------------------------------------------- problems -- */
typedef struct cv_cfg {
    selscan_dtype dt;
    int64_t batch, dim, L, W;
    int silu, bias, h0, hlast; /* options */
    int nseq;                  /* > 0: packed sequences, batch 1 */
    int layout;                /* TC_LAYOUT_* for every tensor, or -1: random per tensor */
} cv_cfg;

typedef struct cv_prob {
    cv_cfg c;
    int64_t rows, H;
    int64_t *cu;
    tc_tensor x, w, bias, h0, y, hlast;
    selscan_conv_problem p;
} cv_prob;

typedef struct cv_grads {
    tc_tensor dy, dhlast, dx, dw, dbias, dh0;
    selscan_conv_grads g;
} cv_grads;

static int cv_layout(const cv_cfg *c, int input) {
    if (c->layout >= 0) return c->layout == TC_LAYOUT_BCAST && !input ? TC_LAYOUT_EXPLICIT : c->layout;
    return (int)tc_randint(0, input ? TC_LAYOUT_BCAST : TC_LAYOUT_PADDED);
}

static void cv_api(cv_prob *P) {
    selscan_conv_problem *p = &P->p;
    memset(p, 0, sizeof *p);
    p->batch = P->c.batch; p->dim = P->c.dim; p->seqlen = P->c.L; p->width = P->c.W;
    p->dtype = P->c.dt;
    p->flags = P->c.silu ? SELSCAN_CONV_SILU : 0;
    p->cu_seqlens = P->cu;
    p->n_seqs = P->cu ? P->c.nseq : 0;
    p->x = tc_api(&P->x); p->weight = tc_api(&P->w); p->bias = tc_api(&P->bias); p->init_state = tc_api(&P->h0);
    p->y = tc_out(&P->y); p->final_state = tc_out(&P->hlast);
}

static void cv_make(cv_prob *P, const cv_cfg *c) {
    memset(P, 0, sizeof *P);
    P->c = *c;
    P->H = c->W - 1;
    P->rows = c->nseq > 0 ? c->nseq : c->batch;
    if (c->nseq > 0) {
        P->cu = (int64_t *)malloc((size_t)(c->nseq + 1) * sizeof(int64_t));
        tc_cu_random(P->cu, c->nseq, c->L);
    }
    tc_tensor_make(&P->x, c->dt, 3, c->batch, c->dim, c->L, 1, cv_layout(c, 1), 1);
    tc_tensor_make(&P->w, SELSCAN_F32, 2, c->dim, c->W, 1, 1, cv_layout(c, 1), 1);
    { /* a 1-D broadcast has all strides 0, which the API reads as contiguous: explicit instead */
        const int lb = cv_layout(c, 1);
        tc_tensor_make(&P->bias, SELSCAN_F32, 1, c->dim, 1, 1, 1, lb == TC_LAYOUT_BCAST ? TC_LAYOUT_EXPLICIT : lb, c->bias);
    }
    tc_tensor_make(&P->h0, c->dt, 3, P->rows, c->dim, P->H, 1, cv_layout(c, 1), c->h0);
    tc_tensor_make(&P->y, c->dt, 3, c->batch, c->dim, c->L, 1, cv_layout(c, 0), 1);
    tc_tensor_make(&P->hlast, c->dt, 3, P->rows, c->dim, P->H, 1, cv_layout(c, 0), c->hlast);
    tc_fill(&P->x, -1.5, 1.5);
    tc_fill(&P->w, -0.8, 0.8);
    tc_fill(&P->bias, -0.5, 0.5);
    tc_fill(&P->h0, -1.5, 1.5);
    cv_api(P);
}

static void cv_free(cv_prob *P) {
    tc_tensor_free(&P->x); tc_tensor_free(&P->w); tc_tensor_free(&P->bias); tc_tensor_free(&P->h0);
    tc_tensor_free(&P->y); tc_tensor_free(&P->hlast);
    free(P->cu);
    memset(P, 0, sizeof *P);
}

static void cv_grads_api(cv_grads *G) {
    selscan_conv_grads *g = &G->g;
    memset(g, 0, sizeof *g);
    g->dy = tc_api(&G->dy); g->dfinal_state = tc_api(&G->dhlast);
    g->dx = tc_out(&G->dx); g->dweight = tc_out(&G->dw); g->dbias = tc_out(&G->dbias); g->dinit_state = tc_out(&G->dh0);
}

/* want: bit 0 dx, 1 dweight, 2 dbias, 3 dinit_state; dhlast: dfinal_state given */
static void cv_grads_make(cv_grads *G, const cv_prob *P, unsigned want, int dhlast) {
    const cv_cfg *c = &P->c;
    memset(G, 0, sizeof *G);
    tc_tensor_make(&G->dy, c->dt, 3, c->batch, c->dim, c->L, 1, cv_layout(c, 1), 1);
    tc_tensor_make(&G->dhlast, c->dt, 3, P->rows, c->dim, P->H, 1, cv_layout(c, 1), dhlast);
    tc_tensor_make(&G->dx, c->dt, 3, c->batch, c->dim, c->L, 1, cv_layout(c, 0), (want & 1) != 0);
    tc_tensor_make(&G->dw, SELSCAN_F32, 2, c->dim, c->W, 1, 1, cv_layout(c, 0), (want & 2) != 0);
    tc_tensor_make(&G->dbias, SELSCAN_F32, 1, c->dim, 1, 1, 1, cv_layout(c, 0), (want & 4) != 0);
    tc_tensor_make(&G->dh0, c->dt, 3, P->rows, c->dim, P->H, 1, cv_layout(c, 0), (want & 8) != 0);
    tc_fill(&G->dy, -1, 1);
    tc_fill(&G->dhlast, -1, 1);
    cv_grads_api(G);
}

static void cv_grads_free(cv_grads *G) {
    tc_tensor_free(&G->dy); tc_tensor_free(&G->dhlast); tc_tensor_free(&G->dx);
    tc_tensor_free(&G->dw); tc_tensor_free(&G->dbias); tc_tensor_free(&G->dh0);
}

static void cv_cfg_random(cv_cfg *c, selscan_dtype dt, int64_t max_work) {
    memset(c, 0, sizeof *c);
    c->dt = dt;
    c->W = tc_randint(2, SELSCAN_CONV_MAX_WIDTH);
    c->nseq = tc_coin(0.25) ? (int)tc_randint(1, 5) : 0;
    c->batch = c->nseq ? 1 : tc_randint(1, 3);
    c->dim = tc_coin(0.3) ? tc_randint(1, 5) : tc_randint(6, 150);
    c->L = tc_coin(0.3) ? tc_randint(1, 6) : tc_randint(7, 200);
    while (c->batch * c->dim * c->L > max_work) {
        if (c->L > 8) c->L /= 2;
        else if (c->dim > 8) c->dim /= 2;
        else break;
    }
    if (c->nseq && c->L < c->nseq) c->L = c->nseq;
    c->silu = tc_coin(0.6);
    c->bias = tc_coin(0.7);
    c->h0 = tc_coin(0.5);
    c->hlast = tc_coin(0.5);
    c->layout = tc_coin(0.3) ? (int)tc_randint(0, TC_LAYOUT_BCAST) : -1;
}

static const char *cv_describe(const cv_prob *P, char *buf, size_t n) {
    snprintf(buf, n, "%s B%lld D%lld L%lld W%lld%s%s%s%s nseq %d layout %d", tc_dtname(P->c.dt),
             (long long)P->c.batch, (long long)P->c.dim, (long long)P->c.L, (long long)P->c.W, P->c.silu ? " silu" : "",
             P->c.bias ? " bias" : "", P->c.h0 ? " h0" : "", P->c.hlast ? " hlast" : "", P->c.nseq, P->c.layout);
    return buf;
}

/* ------------------------------------------------------------------- float64 oracle (math) -- */
static void cv_seg(const cv_prob *P, int64_t b, int64_t s, int64_t *t0, int64_t *t1, int64_t *row) {
    if (P->cu) { *t0 = P->cu[s]; *t1 = P->cu[s + 1]; *row = s; }
    else { *t0 = 0; *t1 = P->c.L; *row = b; }
}
static int64_t cv_nseg(const cv_prob *P) { return P->cu ? P->c.nseq : 1; }

/* the padded input xp at position t of the sequence starting at t0 (state row row) */
static double cv_xp(const cv_prob *P, int64_t b, int64_t d, int64_t row, int64_t t0, int64_t t) {
    if (t >= t0) return P->x.v[(b * P->c.dim + d) * P->c.L + t];
    return P->h0.v[(row * P->c.dim + d) * P->H + (t - t0 + P->H)];
}

static void cv_oracle_forward(const cv_prob *P, double *y, double *hlast) {
    const int64_t D = P->c.dim, L = P->c.L, W = P->c.W, H = P->H;
    int64_t b, d, s, t, k;
    for (b = 0; b < P->c.batch; b++)
        for (d = 0; d < D; d++)
            for (s = 0; s < cv_nseg(P); s++) {
                int64_t t0, t1, row;
                cv_seg(P, b, s, &t0, &t1, &row);
                for (t = t0; t < t1; t++) {
                    double pre = P->bias.v[d]; /* zeros when absent */
                    for (k = 0; k < W; k++) pre += P->w.v[d * W + k] * cv_xp(P, b, d, row, t0, t - H + k);
                    if (y) y[(b * D + d) * L + t] = P->c.silu ? tc_silu(pre) : pre;
                }
                if (hlast)
                    for (k = 0; k < H; k++) hlast[(row * D + d) * H + k] = cv_xp(P, b, d, row, t0, t1 - H + k);
            }
}

static double cv_oracle_loss(const cv_prob *P, const double *dy, const double *dhl) {
    const int64_t ny = P->c.batch * P->c.dim * P->c.L, nh = P->rows * P->c.dim * P->H;
    double *y = (double *)malloc((size_t)ny * sizeof(double)), *h = (double *)malloc((size_t)nh * sizeof(double)), s = 0;
    int64_t i;
    cv_oracle_forward(P, y, h);
    for (i = 0; i < ny; i++) s += dy[i] * y[i];
    if (dhl)
        for (i = 0; i < nh; i++) s += dhl[i] * h[i];
    free(y);
    free(h);
    return s;
}

/* central differences of the loss w.r.t. every logical element of the input t */
static void cv_fd(const cv_prob *P, tc_tensor *t, const double *dy, const double *dhl, double *out) {
    int64_t i;
    for (i = 0; i < t->count; i++) {
        const double v = t->v[i], h = 1e-3 * (fabs(v) > 1 ? fabs(v) : 1);
        double lp, lm;
        t->v[i] = v + h;
        lp = cv_oracle_loss(P, dy, dhl);
        t->v[i] = v - h;
        lm = cv_oracle_loss(P, dy, dhl);
        t->v[i] = v;
        out[i] = (lp - lm) / (2 * h);
    }
}

/* ------------------------------------------------------------------------------- helpers -- */
typedef selscan_status (*cv_fwd_fn)(const selscan_conv_problem *);
typedef selscan_status (*cv_bwd_fn)(const selscan_conv_problem *, const selscan_conv_grads *);

static int cv_bitwise(const tc_tensor *a, const tc_tensor *b) { /* same logical elements, same bytes */
    int64_t i;
    const size_t es = tc_esize(a->dt);
    if (!a->mem || !b->mem) return a->mem == b->mem;
    for (i = 0; i < a->count; i++)
        if (memcmp((const unsigned char *)a->data + tc_off(a, i) * es, (const unsigned char *)b->data + tc_off(b, i) * es, es))
            return 0;
    return 1;
}

static void cv_values(const tc_tensor *t, double *out) {
    int64_t i;
    for (i = 0; i < t->count; i++) out[i] = tc_get(t, i);
}

/* ------------------------------------------------------------------------------ oracle ---- */
static void test_oracle(int ncase) {
    int i;
    for (i = 0; i < ncase; i++) {
        cv_cfg c;
        cv_prob P;
        char buf[160];
        double *y, *h;
        selscan_status st;
        cv_cfg_random(&c, (selscan_dtype)(i % 3), 20000);
        cv_make(&P, &c);
        y = (double *)malloc((size_t)P.y.count * sizeof(double));
        h = (double *)malloc((size_t)(P.hlast.count + 1) * sizeof(double));
        cv_oracle_forward(&P, y, h);
        st = selscan_conv_forward_ref(&P.p);
        CHECK(st == SELSCAN_OK, "oracle %s: status %s", cv_describe(&P, buf, sizeof buf), selscan_status_name(st));
        CHECK(tc_rel_err(&P.y, y) <= tc_tol_fwd(c.dt), "oracle %s: y rel err %.3g", cv_describe(&P, buf, sizeof buf),
              tc_rel_err(&P.y, y));
        if (c.hlast) CHECK(tc_rel_err(&P.hlast, h) == 0, "oracle %s: final_state not the inputs", cv_describe(&P, buf, sizeof buf));
        CHECK(tc_gaps_dirty(&P.y) == 0 && tc_gaps_dirty(&P.hlast) == 0, "oracle %s: wrote outside the outputs",
              cv_describe(&P, buf, sizeof buf));
        free(y);
        free(h);
        cv_free(&P);
    }
}

/* -------------------------------------------------------------------------------- fd ------ */
static void test_fd(int ncase) {
    int i;
    for (i = 0; i < ncase; i++) {
        cv_cfg c;
        cv_prob P;
        cv_grads G;
        char buf[160];
        const selscan_dtype dt = i % 4 == 3 ? (selscan_dtype)(1 + i / 4 % 2) : SELSCAN_F32;
        tc_tensor *ins[4], *outs[4];
        const char *names[4] = {"dx", "dweight", "dbias", "dinit_state"};
        int k;
        cv_cfg_random(&c, dt, 600);
        if (c.dim > 6) c.dim = tc_randint(1, 6);
        if (c.L > 40) c.L = tc_randint(c.nseq > 1 ? c.nseq : 1, 40);
        cv_make(&P, &c);
        cv_grads_make(&G, &P, 15, tc_coin(0.6));
        CHECK(selscan_conv_backward_ref(&P.p, &G.g) == SELSCAN_OK, "fd %s: status", cv_describe(&P, buf, sizeof buf));
        ins[0] = &P.x; ins[1] = &P.w; ins[2] = &P.bias; ins[3] = &P.h0;
        outs[0] = &G.dx; outs[1] = &G.dw; outs[2] = &G.dbias; outs[3] = &G.dh0;
        for (k = 0; k < 4; k++) {
            double *fd = (double *)malloc((size_t)ins[k]->count * sizeof(double));
            cv_fd(&P, ins[k], G.dy.v, G.dhlast.mem ? G.dhlast.v : NULL, fd);
            /* absent bias / init_state: the gradient at 0 (the oracle reads v: zeros) */
            CHECK(tc_rel_err(outs[k], fd) <= tc_tol_grad_fd(outs[k]->dt), "fd %s: %s rel err %.3g", cv_describe(&P, buf, sizeof buf), names[k],
                  tc_rel_err(outs[k], fd));
            CHECK(tc_gaps_dirty(outs[k]) == 0, "fd %s: %s wrote outside", cv_describe(&P, buf, sizeof buf), names[k]);
            free(fd);
        }
        cv_grads_free(&G);
        cv_free(&P);
    }
}

/* ------------------------------------------------------------------------------ fast ------ */
/* fast vs reference on the same problem, forward and backward (a second output set) */
static void test_fast(int ncase) {
    int i;
    for (i = 0; i < ncase; i++) {
        cv_cfg c;
        cv_prob P;
        cv_grads G, G2;
        tc_tensor y2, h2;
        char buf[160];
        double *ref;
        selscan_status st;
        int k;
        cv_cfg_random(&c, (selscan_dtype)(i % 3), 40000);
        cv_make(&P, &c);
        tc_tensor_like(&y2, &P.y, c.dt);
        tc_tensor_like(&h2, &P.hlast, c.dt);
        tc_poison(&y2);
        tc_poison(&h2);
        CHECK(selscan_conv_forward_ref(&P.p) == SELSCAN_OK, "fast %s: ref status", cv_describe(&P, buf, sizeof buf));
        P.p.y = tc_out(&y2);
        P.p.final_state = tc_out(&h2);
        st = selscan_conv_forward_cpu(&P.p);
        CHECK(st == SELSCAN_OK, "fast %s: status %s", cv_describe(&P, buf, sizeof buf), selscan_status_name(st));
        ref = (double *)malloc((size_t)(P.y.count + P.hlast.count + 1) * sizeof(double));
        cv_values(&P.y, ref);
        /* k = 2: the fast path and the reference each round their own f32 y to dt */
        CHECK(tc_rel_err(&y2, ref) <= tc_tol_lowp(c.dt, 1e-6, 2), "fast %s: y rel err %.3g",
              cv_describe(&P, buf, sizeof buf), tc_rel_err(&y2, ref));
        CHECK(tc_gaps_dirty(&y2) == 0 && tc_unwritten(&y2) == 0, "fast %s: y gaps / unwritten", cv_describe(&P, buf, sizeof buf));
        if (c.hlast) CHECK(cv_bitwise(&P.hlast, &h2), "fast %s: final_state differs", cv_describe(&P, buf, sizeof buf));
        free(ref);
        cv_api(&P);
        /* backward */
        {
            const unsigned want = (unsigned)tc_randint(1, 15); /* (one draw a statement: the same cases on every compiler) */
            cv_grads_make(&G, &P, want, tc_coin(0.5));
        }
        G2 = G;
        tc_tensor_like(&G2.dx, &G.dx, c.dt);
        tc_tensor_like(&G2.dw, &G.dw, SELSCAN_F32);
        tc_tensor_like(&G2.dbias, &G.dbias, SELSCAN_F32);
        tc_tensor_like(&G2.dh0, &G.dh0, c.dt);
        tc_poison(&G2.dx); tc_poison(&G2.dw); tc_poison(&G2.dbias); tc_poison(&G2.dh0);
        cv_grads_api(&G2);
        CHECK(selscan_conv_backward_ref(&P.p, &G.g) == SELSCAN_OK, "fast %s: bwd ref status", cv_describe(&P, buf, sizeof buf));
        st = selscan_conv_backward_cpu(&P.p, &G2.g);
        CHECK(st == SELSCAN_OK, "fast %s: bwd status %s", cv_describe(&P, buf, sizeof buf), selscan_status_name(st));
        {
            tc_tensor *a[4] = {&G.dx, &G.dw, &G.dbias, &G.dh0}, *b2[4] = {&G2.dx, &G2.dw, &G2.dbias, &G2.dh0};
            const char *names[4] = {"dx", "dweight", "dbias", "dinit_state"};
            for (k = 0; k < 4; k++) {
                /* dweight / dbias f32; dx / dinit_state in dt, k = 2: both sides round their own f32 value */
                double *rv, tol = k == 1 || k == 2 ? 2e-5 : tc_tol_lowp(c.dt, 1e-5, 2);
                if (!a[k]->mem) continue;
                rv = (double *)malloc((size_t)a[k]->count * sizeof(double));
                cv_values(a[k], rv);
                CHECK(tc_rel_err(b2[k], rv) <= tol, "fast %s: %s rel err %.3g", cv_describe(&P, buf, sizeof buf), names[k],
                      tc_rel_err(b2[k], rv));
                CHECK(tc_gaps_dirty(b2[k]) == 0 && tc_unwritten(b2[k]) == 0, "fast %s: %s gaps / unwritten",
                      cv_describe(&P, buf, sizeof buf), names[k]);
                free(rv);
            }
        }
        tc_tensor_free(&G2.dx); tc_tensor_free(&G2.dw); tc_tensor_free(&G2.dbias); tc_tensor_free(&G2.dh0);
        cv_grads_free(&G);
        tc_tensor_free(&y2);
        tc_tensor_free(&h2);
        cv_free(&P);
    }
}

/* ------------------------------------------------------------------------------ parts ----- */
static void test_parts(int ncase) {
    static const int64_t extra[] = {13, 64, 1000};
    int i;
    for (i = 0; i < ncase; i++) {
        cv_cfg c;
        cv_prob P;
        cv_grads G, G2;
        tc_tensor y2, h2;
        char buf[160];
        int64_t np, part, k;
        cv_cfg_random(&c, (selscan_dtype)(i % 3), 40000);
        if (tc_coin(0.5)) c.dim = tc_randint(65, 300); /* several channel blocks */
        cv_make(&P, &c);
        cv_grads_make(&G, &P, 15, tc_coin(0.5));
        CHECK(selscan_conv_forward_cpu(&P.p) == SELSCAN_OK, "parts %s: fwd", cv_describe(&P, buf, sizeof buf));
        CHECK(selscan_conv_backward_cpu(&P.p, &G.g) == SELSCAN_OK, "parts %s: bwd", cv_describe(&P, buf, sizeof buf));
        for (k = 0; k < 10; k++) {
            np = k < 7 ? k + 1 : extra[k - 7];
            tc_tensor_like(&y2, &P.y, c.dt);
            tc_tensor_like(&h2, &P.hlast, c.dt);
            tc_poison(&y2);
            tc_poison(&h2);
            G2 = G;
            tc_tensor_like(&G2.dx, &G.dx, c.dt);
            tc_tensor_like(&G2.dw, &G.dw, SELSCAN_F32);
            tc_tensor_like(&G2.dbias, &G.dbias, SELSCAN_F32);
            tc_tensor_like(&G2.dh0, &G.dh0, c.dt);
            tc_poison(&G2.dx); tc_poison(&G2.dw); tc_poison(&G2.dbias); tc_poison(&G2.dh0);
            cv_grads_api(&G2);
            P.p.y = tc_out(&y2);
            P.p.final_state = tc_out(&h2);
            for (part = np - 1; part >= 0; part--) { /* any order */
                CHECK(selscan_conv_forward_cpu_part(&P.p, part, np) == SELSCAN_OK, "parts fwd status");
                CHECK(selscan_conv_backward_cpu_part(&P.p, &G2.g, part, np) == SELSCAN_OK, "parts bwd status");
            }
            CHECK(cv_bitwise(&P.y, &y2) && cv_bitwise(&P.hlast, &h2), "parts %s: n_parts %lld: forward differs",
                  cv_describe(&P, buf, sizeof buf), (long long)np);
            CHECK(cv_bitwise(&G.dx, &G2.dx) && cv_bitwise(&G.dw, &G2.dw) && cv_bitwise(&G.dbias, &G2.dbias) &&
                      cv_bitwise(&G.dh0, &G2.dh0),
                  "parts %s: n_parts %lld: backward differs", cv_describe(&P, buf, sizeof buf), (long long)np);
            cv_api(&P);
            tc_tensor_free(&y2);
            tc_tensor_free(&h2);
            tc_tensor_free(&G2.dx); tc_tensor_free(&G2.dw); tc_tensor_free(&G2.dbias); tc_tensor_free(&G2.dh0);
        }
        cv_grads_free(&G);
        cv_free(&P);
    }
}

/* ----------------------------------------------------------------------------- packed ----- */
/* cu_seqlens against one call per sequence (batch 1, views into the same tensors). y,
   final_state, dx, dinit_state bitwise; dweight / dbias against the sum of the calls'. */
static void test_packed(int ncase, cv_fwd_fn fwd, cv_bwd_fn bwd, const char *which) {
    int i;
    for (i = 0; i < ncase; i++) {
        cv_cfg c;
        cv_prob P, S;
        cv_grads G, GS;
        char buf[160];
        int64_t s, k, d;
        double *dwsum, *dbsum, *rv;
        cv_cfg_random(&c, (selscan_dtype)(i % 3), 30000);
        c.nseq = (int)tc_randint(2, 6);
        c.batch = 1;
        if (c.L < c.nseq) c.L = c.nseq;
        c.h0 = tc_coin(0.6);
        c.hlast = 1;
        cv_make(&P, &c);
        cv_grads_make(&G, &P, 15, 1);
        CHECK(fwd(&P.p) == SELSCAN_OK, "packed %s fwd", which);
        CHECK(bwd(&P.p, &G.g) == SELSCAN_OK, "packed %s bwd", which);
        /* the same operands, a second set of outputs, written by per-sequence calls */
        S = P;
        tc_tensor_like(&S.y, &P.y, c.dt);
        tc_tensor_like(&S.hlast, &P.hlast, c.dt);
        tc_poison(&S.y);
        tc_poison(&S.hlast);
        GS = G;
        tc_tensor_like(&GS.dx, &G.dx, c.dt);
        tc_tensor_like(&GS.dh0, &G.dh0, c.dt);
        tc_tensor_like(&GS.dw, &G.dw, SELSCAN_F32);
        tc_tensor_like(&GS.dbias, &G.dbias, SELSCAN_F32);
        tc_poison(&GS.dx);
        tc_poison(&GS.dh0);
        dwsum = (double *)calloc((size_t)(c.dim * c.W), sizeof(double));
        dbsum = (double *)calloc((size_t)c.dim, sizeof(double));
        for (s = 0; s < c.nseq; s++) {
            const int64_t t0 = P.cu[s], n = P.cu[s + 1] - P.cu[s];
            if (n == 0) { /* no call of length 0: final_state = init_state, dinit_state = dfinal_state */
                for (d = 0; d < c.dim; d++)
                    for (k = 0; k < P.H; k++) {
                        const int64_t e = (s * c.dim + d) * P.H + k;
                        const size_t es = tc_esize(c.dt);
                        CHECK(tc_get(&P.hlast, e) == (c.h0 ? P.h0.v[e] : 0.0), "packed %s: empty sequence's final_state", which);
                        CHECK(tc_get(&G.dh0, e) == G.dhlast.v[e], "packed %s: empty sequence's dinit_state", which);
                        memcpy((unsigned char *)S.hlast.data + tc_off(&S.hlast, e) * es, (unsigned char *)P.hlast.data + tc_off(&P.hlast, e) * es, es);
                        memcpy((unsigned char *)GS.dh0.data + tc_off(&GS.dh0, e) * es, (unsigned char *)G.dh0.data + tc_off(&G.dh0, e) * es, es);
                    }
                continue;
            }
            {
                selscan_conv_problem p = P.p;
                selscan_conv_grads g = G.g;
                p.cu_seqlens = NULL; p.n_seqs = 0; p.seqlen = n;
                p.x = tc_view(&P.x, 2, t0);
                p.y = tc_mut(tc_view(&S.y, 2, t0));
                p.init_state = tc_view(&P.h0, 0, s);
                p.final_state = tc_mut(tc_view(&S.hlast, 0, s));
                g.dy = tc_view(&G.dy, 2, t0);
                g.dfinal_state = tc_view(&G.dhlast, 0, s);
                g.dx = tc_mut(tc_view(&GS.dx, 2, t0));
                g.dinit_state = tc_mut(tc_view(&GS.dh0, 0, s));
                g.dweight = tc_out(&GS.dw);
                g.dbias = tc_out(&GS.dbias);
                CHECK(fwd(&p) == SELSCAN_OK, "packed %s: seq fwd", which);
                CHECK(bwd(&p, &g) == SELSCAN_OK, "packed %s: seq bwd", which);
                for (k = 0; k < c.dim * c.W; k++) dwsum[k] += tc_get(&GS.dw, k);
                for (k = 0; k < c.dim; k++) dbsum[k] += tc_get(&GS.dbias, k);
            }
        }
        CHECK(cv_bitwise(&P.y, &S.y) && cv_bitwise(&P.hlast, &S.hlast), "packed %s %s: forward differs", which,
              cv_describe(&P, buf, sizeof buf));
        CHECK(cv_bitwise(&G.dx, &GS.dx) && cv_bitwise(&G.dh0, &GS.dh0), "packed %s %s: dx / dinit_state differ", which,
              cv_describe(&P, buf, sizeof buf));
        rv = dwsum;
        CHECK(tc_rel_err(&G.dw, rv) <= TOL_IDENT && tc_rel_err(&G.dbias, dbsum) <= TOL_IDENT,
              "packed %s %s: dweight %.3g dbias %.3g", which, cv_describe(&P, buf, sizeof buf), tc_rel_err(&G.dw, rv),
              tc_rel_err(&G.dbias, dbsum));
        free(dwsum);
        free(dbsum);
        tc_tensor_free(&S.y); tc_tensor_free(&S.hlast);
        tc_tensor_free(&GS.dx); tc_tensor_free(&GS.dh0); tc_tensor_free(&GS.dw); tc_tensor_free(&GS.dbias);
        cv_grads_free(&G);
        cv_free(&P);
    }
}

/* ------------------------------------------------------------------------------- step ----- */
typedef selscan_status (*cv_step_fn)(const selscan_conv_step_problem *);

/* A forward of L tokens against the update run token by token (and all L tokens in one call)
   from a state whose last W-1 entries are the forward's init_state: y per token and the state's
   last W-1 entries against final_state; the state's other entries rolled exactly. Batch rows go
   to random cache rows (state_index, padding rows, unused rows). */
static void test_step(int ncase, cv_step_fn step, int bitwise, const char *which) {
    int i;
    for (i = 0; i < ncase; i++) {
        cv_cfg c;
        cv_prob P;
        char buf[160];
        const int use_idx = tc_coin(0.6), prmT = i % 4 >= 2;
        int64_t S, ncache, b, d, l, k, j;
        int32_t *idx;
        tc_tensor state, state1, x1, y1, yall, wT, bT;
        selscan_conv_step_problem sp;
        cv_cfg_random(&c, (selscan_dtype)(i % 3), 8000);
        c.nseq = 0;
        c.batch = tc_randint(1, 5);
        c.h0 = 1;
        c.hlast = 1;
        if (c.L > 24) c.L = tc_randint(1, 24);
        cv_make(&P, &c);
        /* step y vs the forward's, element by element: k = 2, each rounds its own f32 value to dt */
        const double tol_y = tc_tol_lowp(c.dt, 1e-5, 2);
        if (prmT) { /* weight and bias values exactly representable in T: the forward's f32 ones */
            tc_tensor *pt[2];
            int m;
            pt[0] = &P.w; pt[1] = &P.bias;
            for (m = 0; m < 2; m++) {
                for (k = 0; k < pt[m]->count; k++) pt[m]->v[k] = tc_round(c.dt, pt[m]->v[k]);
                if (pt[m]->mem) { tc_store(pt[m]); tc_load(pt[m]); }
            }
        }
        tc_tensor_like(&wT, &P.w, prmT ? c.dt : SELSCAN_F32);
        tc_tensor_like(&bT, &P.bias, prmT ? c.dt : SELSCAN_F32);
        CHECK(selscan_conv_forward_ref(&P.p) == SELSCAN_OK, "step %s: fwd", which);
        S = P.H + tc_randint(0, 3);
        ncache = use_idx ? c.batch + tc_randint(0, 3) : c.batch;
        idx = (int32_t *)malloc((size_t)c.batch * sizeof(int32_t));
        { /* a random injection of batch rows into cache rows; some rows padding */
            int32_t *perm = (int32_t *)malloc((size_t)ncache * sizeof(int32_t));
            for (k = 0; k < ncache; k++) perm[k] = (int32_t)k;
            for (k = ncache - 1; k > 0; k--) { j = tc_randint(0, k); int32_t t = perm[k]; perm[k] = perm[j]; perm[j] = t; }
            for (b = 0; b < c.batch; b++) idx[b] = use_idx && tc_coin(0.2) ? -1 - (int32_t)tc_randint(0, 5) : perm[b];
            free(perm);
        }
        tc_tensor_make(&state, c.dt, 3, ncache, c.dim, S, 1, tc_coin(0.5) ? TC_LAYOUT_CONTIG : TC_LAYOUT_PADDED, 1);
        tc_fill(&state, -1.5, 1.5);
        for (b = 0; b < c.batch; b++) /* the last W-1 entries of the row: init_state */
            if (!use_idx || idx[b] >= 0)
                for (d = 0; d < c.dim; d++)
                    for (k = 0; k < P.H; k++)
                        state.v[((use_idx ? idx[b] : b) * c.dim + d) * S + S - P.H + k] = P.h0.v[(b * c.dim + d) * P.H + k];
        tc_store(&state);
        tc_tensor_like(&state1, &state, c.dt); /* for the one-call run */
        tc_tensor_make(&x1, c.dt, 2, c.batch, c.dim, 1, 1, TC_LAYOUT_EXPLICIT, 1);
        tc_tensor_make(&y1, c.dt, 2, c.batch, c.dim, 1, 1, TC_LAYOUT_EXPLICIT, 1);
        tc_tensor_make(&yall, c.dt, 3, c.batch, c.dim, c.L, 1, TC_LAYOUT_PADDED, 1);
        memset(&sp, 0, sizeof sp);
        sp.batch = c.batch; sp.dim = c.dim; sp.width = c.W; sp.state_len = S; sp.n_cache = use_idx ? ncache : 0;
        sp.dtype = c.dt; sp.flags = (c.silu ? SELSCAN_CONV_SILU : 0) | (prmT ? SELSCAN_CONV_PARAMS_T : 0);
        sp.state_index = use_idx ? idx : NULL;
        sp.weight = tc_api(&wT); sp.bias = tc_api(&bT);
        for (l = 0; l < c.L; l++) {
            int ok = 1;
            for (b = 0; b < c.batch; b++)
                for (d = 0; d < c.dim; d++) x1.v[b * c.dim + d] = P.x.v[(b * c.dim + d) * c.L + l];
            tc_store(&x1);
            tc_poison(&y1);
            sp.state = tc_out(&state); sp.x = tc_api(&x1); sp.y = tc_out(&y1);
            CHECK(step(&sp) == SELSCAN_OK, "step %s: status", which);
            for (b = 0; b < c.batch; b++)
                for (d = 0; d < c.dim; d++) {
                    const double got = tc_get(&y1, b * c.dim + d), want = tc_get(&P.y, (b * c.dim + d) * c.L + l);
                    if (use_idx && idx[b] < 0) ok &= got == 0.0 && !signbit(got);
                    else if (bitwise) ok &= got == want || (isnan(got) && isnan(want));
                    else ok &= fabs(got - want) <= 1e-6 + tol_y * fabs(want);
                }
            CHECK(ok, "step %s %s: token %lld: y differs from the forward", which, cv_describe(&P, buf, sizeof buf), (long long)l);
        }
        { /* the whole row in one call: seqlen = L */
            sp.seqlen = c.L;
            sp.state = tc_out(&state1); sp.x = tc_api(&P.x); sp.y = tc_out(&yall);
            CHECK(step(&sp) == SELSCAN_OK, "step %s: seqlen status", which);
            sp.seqlen = 0;
        }
        {
            int ok = 1, okall = 1, oky = 1;
            for (k = 0; k < ncache; k++) {
                int64_t bb = -1;
                for (b = 0; b < c.batch; b++)
                    if ((use_idx ? idx[b] : b) == k) bb = b;
                for (d = 0; d < c.dim; d++)
                    for (j = 0; j < S; j++) {
                        const int64_t e = (k * c.dim + d) * S + j;
                        double want;
                        if (bb < 0) want = state.v[e]; /* untouched row */
                        else {
                            const int64_t src = j + c.L; /* position in [old row, x] */
                            want = src < S ? state.v[(k * c.dim + d) * S + src]
                                           : P.x.v[(bb * c.dim + d) * c.L + (src - S)];
                        }
                        ok &= tc_get(&state, e) == want || (isnan(want) && isnan(tc_get(&state, e)));
                        okall &= tc_get(&state1, e) == tc_get(&state, e);
                    }
            }
            for (b = 0; b < c.batch; b++)
                for (d = 0; d < c.dim; d++)
                    for (l = 0; l < c.L; l++) {
                        const double got = tc_get(&yall, (b * c.dim + d) * c.L + l), want = tc_get(&P.y, (b * c.dim + d) * c.L + l);
                        if (use_idx && idx[b] < 0) oky &= got == 0.0;
                        else if (bitwise) oky &= got == want;
                        else oky &= fabs(got - want) <= 1e-6 + tol_y * fabs(want);
                    }
            CHECK(ok, "step %s %s: state not rolled exactly (S %lld)", which, cv_describe(&P, buf, sizeof buf), (long long)S);
            CHECK(okall && oky, "step %s %s: seqlen %lld in one call differs", which, cv_describe(&P, buf, sizeof buf),
                  (long long)c.L);
            CHECK(tc_gaps_dirty(&state) == 0 && tc_gaps_dirty(&yall) == 0, "step %s: wrote outside", which);
        }
        /* final_state: the state's last W-1 entries (checked through the roll above, and here) */
        {
            int ok = 1;
            for (b = 0; b < c.batch; b++) {
                if (use_idx && idx[b] < 0) continue;
                for (d = 0; d < c.dim; d++)
                    for (k = 0; k < P.H; k++)
                        ok &= tc_get(&state, ((use_idx ? idx[b] : b) * c.dim + d) * S + S - P.H + k) ==
                              tc_get(&P.hlast, (b * c.dim + d) * P.H + k);
            }
            CHECK(ok, "step %s %s: state's last W-1 entries differ from final_state", which, cv_describe(&P, buf, sizeof buf));
        }
        tc_tensor_free(&state); tc_tensor_free(&state1); tc_tensor_free(&x1); tc_tensor_free(&y1); tc_tensor_free(&yall);
        tc_tensor_free(&wT); tc_tensor_free(&bT);
        free(idx);
        cv_free(&P);
    }
}

/* step parts: bitwise the n_parts = 1 result */
static void test_step_parts(int ncase) {
    int i;
    for (i = 0; i < ncase; i++) {
        const selscan_dtype dt = (selscan_dtype)(i % 3);
        const int64_t batch = tc_randint(1, 6), dim = tc_randint(1, 700), W = tc_randint(2, 4), S = W - 1 + tc_randint(0, 2);
        const int64_t L = tc_randint(1, 3);
        tc_tensor st, st2, x, w, y, y2;
        selscan_conv_step_problem sp;
        int64_t np;
        tc_tensor_make(&st, dt, 3, batch, dim, S, 1, TC_LAYOUT_CONTIG, 1);
        tc_tensor_make(&x, dt, 3, batch, dim, L, 1, TC_LAYOUT_LASTTO1, 1);
        tc_tensor_make(&w, SELSCAN_F32, 2, dim, W, 1, 1, TC_LAYOUT_CONTIG, 1);
        tc_tensor_make(&y, dt, 3, batch, dim, L, 1, TC_LAYOUT_CONTIG, 1);
        tc_fill(&st, -1, 1); tc_fill(&x, -1, 1); tc_fill(&w, -1, 1);
        tc_tensor_like(&st2, &st, dt);
        memset(&sp, 0, sizeof sp);
        sp.batch = batch; sp.dim = dim; sp.width = W; sp.state_len = S; sp.seqlen = L; sp.dtype = dt;
        sp.flags = i % 2 ? SELSCAN_CONV_SILU : 0;
        sp.state = tc_out(&st); sp.x = tc_api(&x); sp.weight = tc_api(&w); sp.y = tc_out(&y);
        CHECK(selscan_conv_step_cpu(&sp) == SELSCAN_OK, "step parts status");
        for (np = 2; np <= 5; np++) {
            int64_t part;
            tc_tensor_like(&y2, &y, dt);
            tc_poison(&y2);
            tc_store(&st2); /* st2 restarts from the original values (v) */
            sp.state = tc_out(&st2); sp.y = tc_out(&y2);
            for (part = 0; part < np; part++) CHECK(selscan_conv_step_cpu_part(&sp, part, np) == SELSCAN_OK, "step part status");
            CHECK(cv_bitwise(&y, &y2) && cv_bitwise(&st, &st2), "step parts: n_parts %lld differs", (long long)np);
            tc_tensor_free(&y2);
        }
        tc_tensor_free(&st); tc_tensor_free(&st2); tc_tensor_free(&x); tc_tensor_free(&w); tc_tensor_free(&y);
    }
}

/* -------------------------------------------------------------------------------- nan ----- */
/* One NaN in x at (b, d, t): y NaN at exactly t .. t+W-1 of that channel's sequence (and
   final_state where it holds the NaN); one NaN in dy at t: dx NaN at exactly t-W+1 .. t (inside
   the sequence), dweight / dbias of that channel NaN, every other channel finite. */
static void test_nan(cv_fwd_fn fwd, cv_bwd_fn bwd, const char *which) {
    int i;
    for (i = 0; i < 12; i++) {
        cv_cfg c;
        cv_prob P;
        cv_grads G;
        char buf[160];
        int64_t b, d, t, t0 = 0, t1, k, tt, row;
        int oky = 1, okx = 1, okw = 1;
        cv_cfg_random(&c, (selscan_dtype)(i % 3), 5000);
        c.nseq = 0;
        c.h0 = 0;
        c.layout = TC_LAYOUT_CONTIG;
        cv_make(&P, &c);
        t1 = c.L;
        b = tc_randint(0, c.batch - 1); d = tc_randint(0, c.dim - 1); t = tc_randint(0, c.L - 1);
        row = b;
        (void)row;
        P.x.v[(b * c.dim + d) * c.L + t] = NAN;
        tc_store(&P.x);
        cv_grads_make(&G, &P, 7, 0);
        G.dy.v[(b * c.dim + d) * c.L + t] = NAN;
        tc_store(&G.dy);
        /* x NaN makes dweight NaN anyway (dp * x): the dx pattern is judged with a finite x */
        CHECK(fwd(&P.p) == SELSCAN_OK, "nan %s fwd", which);
        for (tt = 0; tt < c.L; tt++)
            for (k = 0; k < c.dim * c.batch; k++) {
                const int64_t bb = k / c.dim, dd = k % c.dim;
                const int want = bb == b && dd == d && tt >= t && tt <= t + P.H;
                oky &= isnan(tc_get(&P.y, (bb * c.dim + dd) * c.L + tt)) == want;
            }
        CHECK(oky, "nan %s %s: y's NaNs not exactly the window", which, cv_describe(&P, buf, sizeof buf));
        P.x.v[(b * c.dim + d) * c.L + t] = 0.25;
        tc_store(&P.x);
        CHECK(bwd(&P.p, &G.g) == SELSCAN_OK, "nan %s bwd", which);
        for (tt = 0; tt < c.L; tt++)
            for (k = 0; k < c.dim * c.batch; k++) {
                const int64_t bb = k / c.dim, dd = k % c.dim;
                const int want = bb == b && dd == d && tt >= t - P.H && tt <= t && tt >= t0 && tt < t1;
                okx &= isnan(tc_get(&G.dx, (bb * c.dim + dd) * c.L + tt)) == want;
            }
        for (k = 0; k < c.dim; k++) {
            int64_t j;
            okw &= isnan(tc_get(&G.dbias, k)) == (k == d);
            for (j = 0; j < c.W; j++) okw &= isnan(tc_get(&G.dw, k * c.W + j)) == (k == d);
        }
        CHECK(okx, "nan %s %s: dx's NaNs not exactly the window", which, cv_describe(&P, buf, sizeof buf));
        CHECK(okw, "nan %s %s: dweight / dbias NaNs not exactly the channel", which, cv_describe(&P, buf, sizeof buf));
        cv_grads_free(&G);
        cv_free(&P);
    }
}

/* ------------------------------------------------------------------------- validation ----- */
typedef struct cv_vcase {
    const char *name;
    selscan_status want;
    const char *operand, *rule;
} cv_vcase;

static int cv_diag_is(const selscan_diag *dg, const char *operand, const char *rule) {
    return dg->operand && dg->rule && strcmp(dg->operand, operand) == 0 && strcmp(dg->rule, rule) == 0;
}

/* Runs fwd (and bwd with G) on a broken problem: the status, the diag, every output untouched. */
static void cv_expect(cv_prob *P, cv_grads *G, int run_fwd, selscan_status want, const char *operand, const char *rule,
                      const char *what) {
    selscan_diag dg;
    unsigned char *sy = tc_snapshot(&P->y), *sh = tc_snapshot(&P->hlast), *sg[4] = {NULL, NULL, NULL, NULL};
    int k;
    if (G) { sg[0] = tc_snapshot(&G->dx); sg[1] = tc_snapshot(&G->dw); sg[2] = tc_snapshot(&G->dbias); sg[3] = tc_snapshot(&G->dh0); }
    for (k = 0; k < 4; k++) { /* ref, fast, part, validate */
        selscan_status st;
        dg.operand = dg.rule = NULL;
        P->p.diag = &dg;
        if (run_fwd) {
            st = k == 0 ? selscan_conv_forward_ref(&P->p) : k == 1 ? selscan_conv_forward_cpu(&P->p)
                 : k == 2 ? selscan_conv_forward_cpu_part(&P->p, 0, 2) : selscan_validate_conv(&P->p);
        } else {
            st = k == 0 ? selscan_conv_backward_ref(&P->p, &G->g) : k == 1 ? selscan_conv_backward_cpu(&P->p, &G->g)
                 : k == 2 ? selscan_conv_backward_cpu_part(&P->p, &G->g, 1, 2) : selscan_validate_conv_grads(&P->p, &G->g);
        }
        CHECK(st == want, "validation %s (entry %d): status %s, want %s", what, k, selscan_status_name(st), selscan_status_name(want));
        if (operand) CHECK(cv_diag_is(&dg, operand, rule), "validation %s (entry %d): diag {%s, %s}, want {%s, %s}", what, k,
                           dg.operand ? dg.operand : "-", dg.rule ? dg.rule : "-", operand, rule);
        CHECK(tc_same(&P->y, sy) && tc_same(&P->hlast, sh), "validation %s: forward outputs written", what);
        if (G)
            CHECK(tc_same(&G->dx, sg[0]) && tc_same(&G->dw, sg[1]) && tc_same(&G->dbias, sg[2]) && tc_same(&G->dh0, sg[3]),
                  "validation %s: gradients written", what);
        P->p.diag = NULL;
    }
    free(sy);
    free(sh);
    for (k = 0; k < 4; k++) free(sg[k]);
}

/* A step problem on every entry point (ref, fast, a part, validate): status, diag, outputs (the
   bytes of o0 / o1, n0 / n1 bytes) untouched on an error. */
static void cv_step_expect(const selscan_conv_step_problem *sp0, selscan_status want, const char *op, const char *rule,
                           const char *what, const void *o0, size_t n0, const void *o1, size_t n1) {
    int e;
    for (e = 0; e < 4; e++) {
        selscan_conv_step_problem sp = *sp0;
        selscan_diag dg = {NULL, NULL, SELSCAN_RULE_NONE};
        unsigned char *c0 = (unsigned char *)malloc(n0), *c1 = (unsigned char *)malloc(n1);
        selscan_status got;
        memcpy(c0, o0, n0);
        memcpy(c1, o1, n1);
        sp.diag = &dg;
        got = e == 0 ? selscan_conv_step_ref(&sp) : e == 1 ? selscan_conv_step_cpu(&sp)
              : e == 2 ? selscan_conv_step_cpu_part(&sp, 1, 3) : selscan_validate_conv_step(&sp);
        CHECK(got == want && (want == SELSCAN_OK || cv_diag_is(&dg, op, rule)), "%s (entry %d): %s {%s, %s}, want %s {%s, %s}", what, e,
              selscan_status_name(got), dg.operand ? dg.operand : "-", dg.rule ? dg.rule : "-", selscan_status_name(want), op, rule);
        if (want != SELSCAN_OK) CHECK(memcmp(c0, o0, n0) == 0 && memcmp(c1, o1, n1) == 0, "%s: outputs written", what);
        free(c0);
        free(c1);
    }
}

static void cv_valid_base(cv_prob *P, cv_grads *G, selscan_dtype dt, int nseq) {
    cv_cfg c;
    memset(&c, 0, sizeof c);
    c.dt = dt; c.batch = nseq ? 1 : 2; c.dim = 5; c.L = 9; c.W = 4; c.silu = 1; c.bias = 1; c.h0 = 1; c.hlast = 1;
    c.nseq = nseq; c.layout = TC_LAYOUT_EXPLICIT;
    cv_make(P, &c);
    tc_poison(&P->y);
    tc_poison(&P->hlast);
    cv_grads_make(G, P, 15, 1);
}

static void test_validation(void) {
    cv_prob P;
    cv_grads G;
    selscan_diag dg;
    int fwd;
    /* the happy path validates */
    cv_valid_base(&P, &G, SELSCAN_BF16, 0);
    CHECK(selscan_validate_conv(&P.p) == SELSCAN_OK && selscan_validate_conv_grads(&P.p, &G.g) == SELSCAN_OK, "valid base");
    CHECK(selscan_conv_forward_ref(NULL) == SELSCAN_ERR_NULL && selscan_conv_forward_cpu(NULL) == SELSCAN_ERR_NULL &&
              selscan_conv_backward_cpu(NULL, NULL) == SELSCAN_ERR_NULL && selscan_conv_step_cpu(NULL) == SELSCAN_ERR_NULL &&
              selscan_conv_step_ref(NULL) == SELSCAN_ERR_NULL,
          "NULL problem");
    cv_grads_free(&G);
    cv_free(&P);

    for (fwd = 1; fwd >= 0; fwd--) {
        const char *F = fwd ? "fwd" : "bwd";
        char what[96];
#define CV_CASE(SETUP, ST, OP, RULE)                                                                                 \
    do {                                                                                                             \
        cv_valid_base(&P, &G, SELSCAN_F16, 0);                                                                       \
        SETUP;                                                                                                       \
        snprintf(what, sizeof what, "%s: %s %s", F, OP, RULE);                                                       \
        cv_expect(&P, &G, fwd, ST, OP, RULE, what);                                                                  \
        cv_grads_free(&G);                                                                                           \
        cv_free(&P);                                                                                                 \
    } while (0)
        CV_CASE(P.p.dtype = (selscan_dtype)7, SELSCAN_ERR_DTYPE, "dtype", "unknown dtype");
        CV_CASE(P.p.flags = 8, SELSCAN_ERR_UNSUPPORTED, "flags", "unknown flag");
        CV_CASE(P.p.flags |= SELSCAN_CONV_PARAMS_T, SELSCAN_ERR_UNSUPPORTED, "flags", "unknown flag"); /* the step's only */
        CV_CASE(P.p.batch = 0, SELSCAN_ERR_SHAPE, "batch", "not positive");
        CV_CASE(P.p.batch = -3, SELSCAN_ERR_SHAPE, "batch", "not positive");
        CV_CASE(P.p.dim = 0, SELSCAN_ERR_SHAPE, "dim", "not positive");
        CV_CASE(P.p.seqlen = 0, SELSCAN_ERR_SHAPE, "seqlen", "not positive");
        CV_CASE(P.p.width = 0, SELSCAN_ERR_SHAPE, "width", "not positive");
        CV_CASE(P.p.width = 1, SELSCAN_ERR_UNSUPPORTED, "width", "not 2 to 4");
        CV_CASE(P.p.width = 5, SELSCAN_ERR_UNSUPPORTED, "width", "not 2 to 4");
        CV_CASE(P.p.x.data = NULL, SELSCAN_ERR_NULL, "x", "missing");
        CV_CASE(P.p.weight.data = NULL, SELSCAN_ERR_NULL, "weight", "missing");
        CV_CASE(P.p.n_seqs = 2, SELSCAN_ERR_NULL, "cu_seqlens", "missing (n_seqs given)");
        CV_CASE(P.p.width = -1, SELSCAN_ERR_SHAPE, "width", "not positive");
        /* a count overflow names the sizes whose product overflows (issue 41: was "problem") */
        CV_CASE(P.p.batch = (int64_t)1 << 40; P.p.seqlen = (int64_t)1 << 40, SELSCAN_ERR_SHAPE, "batch * dim * seqlen", "element count overflows");
        CV_CASE(P.p.batch = (int64_t)1 << 62, SELSCAN_ERR_SHAPE, "batch * dim * seqlen", "element count overflows");
        /* x's count fits (5 * 2^55), the state rows' bound (5 * 4 * 2^55) does not */
        CV_CASE(P.p.batch = (int64_t)1 << 55; P.p.seqlen = 1, SELSCAN_ERR_SHAPE, "batch * dim * width", "element count overflows");
        CV_CASE(P.p.x.stride[1] = -1, SELSCAN_ERR_STRIDE, "x", "negative stride");
        CV_CASE(P.p.x.stride[0] = INT64_MAX / 2, SELSCAN_ERR_STRIDE, "x", "span overflows");
        CV_CASE(P.p.x.data = (const char *)P.p.x.data + 1, SELSCAN_ERR_STRIDE, "x", "misaligned");
        CV_CASE(P.p.weight.stride[1] = -2, SELSCAN_ERR_STRIDE, "weight", "negative stride");
        CV_CASE(P.p.bias.data = (const char *)P.p.bias.data + 2, SELSCAN_ERR_STRIDE, "bias", "misaligned");
        CV_CASE(P.p.init_state.stride[2] = -1, SELSCAN_ERR_STRIDE, "init_state", "negative stride");
        if (fwd) {
            CV_CASE(P.p.y.data = NULL, SELSCAN_ERR_NULL, "y", "missing");
            CV_CASE(P.p.y.stride[2] = 0; P.p.y.stride[1] = 9, SELSCAN_ERR_STRIDE, "y", "elements overlap");
            CV_CASE(P.p.y.stride[0] = -1, SELSCAN_ERR_STRIDE, "y", "negative stride");
            CV_CASE(P.p.final_state.stride[1] = 1; P.p.final_state.stride[2] = 1, SELSCAN_ERR_STRIDE, "final_state", "elements overlap");
            CV_CASE(P.p.y.data = (void *)(uintptr_t)P.p.x.data, SELSCAN_ERR_ALIAS, "y", "overlaps x");
            CV_CASE(P.p.final_state.data = P.p.y.data, SELSCAN_ERR_ALIAS, "y", "overlaps final_state");
            CV_CASE(P.p.final_state.data = (void *)(uintptr_t)P.p.init_state.data, SELSCAN_ERR_ALIAS, "final_state", "overlaps init_state");
            CV_CASE(P.p.weight.data = P.p.y.data, SELSCAN_ERR_ALIAS, "y", "overlaps weight");
        } else {
            CV_CASE(P.p.y.data = NULL; G.g.dy.data = NULL, SELSCAN_ERR_NULL, "dy", "missing");
            CV_CASE(G.g.dy.stride[2] = -1, SELSCAN_ERR_STRIDE, "dy", "negative stride");
            CV_CASE(G.g.dfinal_state.stride[0] = -1, SELSCAN_ERR_STRIDE, "dfinal_state", "negative stride");
            CV_CASE(G.g.dx.stride[2] = 0; G.g.dx.stride[1] = 3, SELSCAN_ERR_STRIDE, "dx", "elements overlap");
            CV_CASE(G.g.dweight.stride[0] = 1; G.g.dweight.stride[1] = 1, SELSCAN_ERR_STRIDE, "dweight", "elements overlap");
            CV_CASE(G.g.dbias.data = (char *)G.g.dbias.data + 1, SELSCAN_ERR_STRIDE, "dbias", "misaligned");
            CV_CASE(G.g.dinit_state.stride[1] = -4, SELSCAN_ERR_STRIDE, "dinit_state", "negative stride");
            CV_CASE(G.g.dx.data = (void *)(uintptr_t)G.g.dy.data, SELSCAN_ERR_ALIAS, "dx", "overlaps dy");
            CV_CASE(G.g.dx.data = (void *)(uintptr_t)P.p.x.data, SELSCAN_ERR_ALIAS, "dx", "overlaps x");
            CV_CASE(G.g.dweight.data = (void *)(uintptr_t)P.p.weight.data, SELSCAN_ERR_ALIAS, "dweight", "overlaps weight");
            CV_CASE(G.g.dbias.data = G.g.dweight.data, SELSCAN_ERR_ALIAS, "dweight", "overlaps dbias");
            CV_CASE(G.g.dinit_state.data = (void *)(uintptr_t)G.g.dfinal_state.data, SELSCAN_ERR_ALIAS, "dinit_state", "overlaps dfinal_state");
            CV_CASE(G.g.dinit_state.data = G.g.dx.data, SELSCAN_ERR_ALIAS, "dx", "overlaps dinit_state");
            /* y is not read by the backward: absent is fine */
            cv_valid_base(&P, &G, SELSCAN_F32, 0);
            P.p.y.data = NULL;
            CHECK(selscan_validate_conv_grads(&P.p, &G.g) == SELSCAN_OK, "bwd without y");
            CHECK(selscan_validate_conv_grads(&P.p, NULL) == SELSCAN_ERR_NULL, "bwd without grads");
            cv_grads_free(&G);
            cv_free(&P);
        }
#undef CV_CASE
        /* packed sequences */
#define CV_CASE_SEQ(SETUP, ST, OP, RULE)                                                                             \
    do {                                                                                                             \
        cv_valid_base(&P, &G, SELSCAN_F32, 3);                                                                       \
        SETUP;                                                                                                       \
        snprintf(what, sizeof what, "%s: %s %s", F, OP, RULE);                                                       \
        cv_expect(&P, &G, fwd, ST, OP, RULE, what);                                                                  \
        cv_grads_free(&G);                                                                                           \
        cv_free(&P);                                                                                                 \
    } while (0)
        CV_CASE_SEQ(P.p.batch = 2, SELSCAN_ERR_SHAPE, "batch", "not 1 with cu_seqlens");
        CV_CASE_SEQ(P.p.n_seqs = 0, SELSCAN_ERR_SHAPE, "n_seqs", "no sequence (cu_seqlens needs n_seqs + 1 >= 2 offsets)");
        CV_CASE_SEQ(P.p.n_seqs = -1, SELSCAN_ERR_SHAPE, "n_seqs", "no sequence (cu_seqlens needs n_seqs + 1 >= 2 offsets)");
        CV_CASE_SEQ(P.cu[0] = 1, SELSCAN_ERR_SHAPE, "cu_seqlens", "first offset not 0");
        CV_CASE_SEQ(P.cu[3] = 8, SELSCAN_ERR_SHAPE, "cu_seqlens", "last offset not seqlen");
        CV_CASE_SEQ(P.cu[1] = 5; P.cu[2] = 4, SELSCAN_ERR_SHAPE, "cu_seqlens", "decreasing");
        CV_CASE_SEQ(P.p.cu_seqlens = (const int64_t *)((const char *)P.cu + 4), SELSCAN_ERR_SHAPE, "cu_seqlens", "misaligned");
        /* the offsets copied into the output's memory (valid offsets, overlapping the output) */
        if (fwd) CV_CASE_SEQ(memcpy(P.y.mem, P.cu, 4 * sizeof(int64_t)); P.p.cu_seqlens = (const int64_t *)(void *)P.y.mem,
                             SELSCAN_ERR_ALIAS, "y", "overlaps cu_seqlens");
        else CV_CASE_SEQ(memcpy(G.dx.mem, P.cu, 4 * sizeof(int64_t)); P.p.cu_seqlens = (const int64_t *)(void *)G.dx.mem,
                         SELSCAN_ERR_ALIAS, "dx", "overlaps cu_seqlens");
#undef CV_CASE_SEQ
    }
    { /* parts */
        cv_valid_base(&P, &G, SELSCAN_F32, 0);
        dg.operand = dg.rule = NULL;
        P.p.diag = &dg;
        CHECK(selscan_conv_forward_cpu_part(&P.p, 0, 0) == SELSCAN_ERR_SHAPE && cv_diag_is(&dg, "n_parts", "out of range"), "n_parts 0");
        CHECK(selscan_conv_forward_cpu_part(&P.p, 2, 2) == SELSCAN_ERR_SHAPE && cv_diag_is(&dg, "part", "out of range"), "part 2 of 2");
        CHECK(selscan_conv_backward_cpu_part(&P.p, &G.g, -1, 2) == SELSCAN_ERR_SHAPE && cv_diag_is(&dg, "part", "out of range"), "part -1");
        CHECK(selscan_conv_forward_cpu_part(&P.p, 0, ((int64_t)1 << 24) + 1) == SELSCAN_ERR_SHAPE, "n_parts 2^24 + 1");
        CHECK(tc_unwritten(&P.y) == P.y.count && tc_unwritten(&G.dx) == G.dx.count, "parts: outputs written");
        cv_grads_free(&G);
        cv_free(&P);
    }
    { /* the step */
        tc_tensor st, x, w, b, y;
        int32_t idx[3] = {0, 2, -1};
        selscan_conv_step_problem sp, s0;
        int k;
        tc_tensor_make(&st, SELSCAN_BF16, 3, 4, 6, 5, 1, TC_LAYOUT_EXPLICIT, 1);
        tc_tensor_make(&x, SELSCAN_BF16, 2, 3, 6, 1, 1, TC_LAYOUT_EXPLICIT, 1);
        tc_tensor_make(&w, SELSCAN_F32, 2, 6, 3, 1, 1, TC_LAYOUT_EXPLICIT, 1);
        tc_tensor_make(&b, SELSCAN_F32, 1, 6, 1, 1, 1, TC_LAYOUT_EXPLICIT, 1);
        tc_tensor_make(&y, SELSCAN_BF16, 2, 3, 6, 1, 1, TC_LAYOUT_EXPLICIT, 1);
        tc_fill(&st, -1, 1); tc_fill(&x, -1, 1); tc_fill(&w, -1, 1); tc_fill(&b, -1, 1);
        memset(&s0, 0, sizeof s0);
        s0.batch = 3; s0.dim = 6; s0.width = 3; s0.state_len = 5; s0.n_cache = 4; s0.dtype = SELSCAN_BF16;
        s0.flags = SELSCAN_CONV_SILU; s0.state_index = idx;
        s0.state = tc_out(&st); s0.x = tc_api(&x); s0.weight = tc_api(&w); s0.bias = tc_api(&b); s0.y = tc_out(&y);
        CHECK(selscan_validate_conv_step(&s0) == SELSCAN_OK, "step base valid");
        for (k = 0; k < 28; k++) {
            selscan_status want = SELSCAN_ERR_SHAPE, got;
            const char *op = "", *rule = "";
            unsigned char *ss = tc_snapshot(&st), *sy;
            int e;
            sp = s0;
            tc_poison(&y);
            sy = tc_snapshot(&y);
            idx[0] = 0; idx[1] = 2; idx[2] = -1;
            switch (k) {
            case 0: sp.dtype = (selscan_dtype)-1; want = SELSCAN_ERR_DTYPE; op = "dtype"; rule = "unknown dtype"; break;
            case 1: sp.flags = 4; want = SELSCAN_ERR_UNSUPPORTED; op = "flags"; rule = "unknown flag"; break;
            case 2: sp.batch = 0; op = "batch"; rule = "not positive"; break;
            case 3: sp.dim = -1; op = "dim"; rule = "not positive"; break;
            case 4: sp.seqlen = -2; op = "seqlen"; rule = "negative"; break;
            case 5: sp.width = 7; want = SELSCAN_ERR_UNSUPPORTED; op = "width"; rule = "not 2 to 4"; break;
            case 6: sp.state_len = 1; op = "state_len"; rule = "below width - 1"; break;
            case 7: sp.n_cache = -1; op = "n_cache"; rule = "not positive"; break;
            case 8: sp.state_index = NULL; op = "n_cache"; rule = "not batch without state_index"; break;
            case 9: sp.state_index = (const int32_t *)((const char *)idx + 2); op = "state_index"; rule = "misaligned"; break;
            case 10: sp.state.data = NULL; want = SELSCAN_ERR_NULL; op = "state"; rule = "missing"; break;
            case 11: sp.x.data = NULL; want = SELSCAN_ERR_NULL; op = "x"; rule = "missing"; break;
            case 12: sp.weight.data = NULL; want = SELSCAN_ERR_NULL; op = "weight"; rule = "missing"; break;
            case 13: sp.y.data = NULL; want = SELSCAN_ERR_NULL; op = "y"; rule = "missing"; break;
            case 14: idx[1] = 4; op = "state_index"; rule = "not below n_cache"; break;
            case 15: idx[1] = 0; want = SELSCAN_ERR_ALIAS; op = "state_index"; rule = "row used twice"; break;
            case 16: sp.x.stride[1] = -1; want = SELSCAN_ERR_STRIDE; op = "x"; rule = "negative stride"; break;
            case 17: sp.state.stride[2] = 0; sp.state.stride[1] = 2; want = SELSCAN_ERR_STRIDE; op = "state"; rule = "elements overlap"; break;
            case 18: sp.y.data = sp.state.data; want = SELSCAN_ERR_ALIAS; op = "state"; rule = "overlaps y"; break;
            case 19: sp.x.data = (const char *)sp.state.data + 2; want = SELSCAN_ERR_ALIAS; op = "state"; rule = "overlaps x"; break;
            case 20: memcpy(y.mem, idx, sizeof idx); free(sy); sy = tc_snapshot(&y); sp.state_index = (const int32_t *)(void *)y.mem;
                     want = SELSCAN_ERR_ALIAS; op = "y"; rule = "overlaps state_index"; break;
            case 21: sp.batch = (int64_t)1 << 40; sp.seqlen = (int64_t)1 << 40; sp.state_index = NULL; sp.n_cache = 0; op = "batch * dim * seqlen"; rule = "element count overflows"; break;
            case 22: sp.bias.data = (const char *)sp.bias.data + 1; want = SELSCAN_ERR_STRIDE; op = "bias"; rule = "misaligned"; break;
            case 23: sp.width = 0; op = "width"; rule = "not positive"; break;
            case 24: sp.y.data = (void *)(uintptr_t)sp.weight.data; want = SELSCAN_ERR_ALIAS; op = "y"; rule = "overlaps weight"; break;
            case 25: sp.batch = (int64_t)1 << 62; op = "batch * dim * seqlen"; rule = "element count overflows"; break;
            case 26: sp.n_cache = (int64_t)1 << 60; op = "n_cache * dim * state_len"; rule = "element count overflows"; break;
            default: sp.state_len = 0; sp.width = 2; op = "state_len"; rule = "below width - 1"; break;
            }
            for (e = 0; e < 4; e++) {
                dg.operand = dg.rule = NULL;
                sp.diag = &dg;
                got = e == 0 ? selscan_conv_step_ref(&sp) : e == 1 ? selscan_conv_step_cpu(&sp)
                      : e == 2 ? selscan_conv_step_cpu_part(&sp, 1, 3) : selscan_validate_conv_step(&sp);
                CHECK(got == want && cv_diag_is(&dg, op, rule), "step validation %d (entry %d): %s {%s, %s}, want %s {%s, %s}", k, e,
                      selscan_status_name(got), dg.operand ? dg.operand : "-", dg.rule ? dg.rule : "-", selscan_status_name(want), op, rule);
                CHECK(tc_same(&st, ss) && tc_same(&y, sy), "step validation %d: outputs written", k);
            }
            free(ss);
            free(sy);
        }
        idx[0] = 0; idx[1] = 2; idx[2] = -1;
        CHECK(selscan_conv_step_cpu_part(&s0, 0, 0) == SELSCAN_ERR_SHAPE, "step n_parts 0");
        { /* SELSCAN_CONV_PARAMS_T: weight and bias in T, their spans and alignment in T's elements */
            unsigned char *buf = (unsigned char *)calloc(1, 256); /* weight (6 x 3 bf16, 36 bytes), then y */
            tc_tensor bT;
            const size_t ystate = (size_t)st.alloc * 2;
            tc_tensor_make(&bT, SELSCAN_BF16, 1, 6, 1, 1, 1, TC_LAYOUT_CONTIG, 1);
            tc_fill(&bT, -1, 1);
            for (k = 0; k < 18; k++) { const uint16_t h = selscan_f32_to_bf16((float)w.v[k]); memcpy(buf + 2 * k, &h, 2); }
            sp = s0;
            sp.flags |= SELSCAN_CONV_PARAMS_T;
            sp.weight.data = buf; memset(sp.weight.stride, 0, sizeof sp.weight.stride);
            sp.bias = tc_api(&bT);
            sp.y.data = buf + 36; memset(sp.y.stride, 0, sizeof sp.y.stride); /* right after weight's T span */
            cv_step_expect(&sp, SELSCAN_OK, "", "", "params T: y right after weight's T span", st.mem, ystate, buf + 36, 36);
            memset(buf + 36, 0xFF, 64);
            {
                selscan_conv_step_problem s2 = sp;
                s2.flags &= ~SELSCAN_CONV_PARAMS_T; /* weight read as f32: 72 bytes, over y */
                cv_step_expect(&s2, SELSCAN_ERR_ALIAS, "y", "overlaps weight", "params T: y inside weight's f32 span (no flag)",
                               st.mem, ystate, buf + 36, 36);
                s2 = sp; s2.y.data = buf + 34; /* y's first element is weight's last */
                cv_step_expect(&s2, SELSCAN_ERR_ALIAS, "y", "overlaps weight", "params T: y over weight's last element", st.mem,
                               ystate, buf + 34, 38);
                s2 = sp; s2.weight.data = buf + 1;
                cv_step_expect(&s2, SELSCAN_ERR_STRIDE, "weight", "misaligned", "params T: weight misaligned", st.mem, ystate,
                               buf + 36, 36);
                s2 = sp; s2.bias.stride[0] = -2;
                cv_step_expect(&s2, SELSCAN_ERR_STRIDE, "bias", "negative stride", "params T: bias stride negative", st.mem,
                               ystate, buf + 36, 36);
                s2 = sp; s2.flags |= 4u;
                cv_step_expect(&s2, SELSCAN_ERR_UNSUPPORTED, "flags", "unknown flag", "params T with an unknown flag", st.mem,
                               ystate, buf + 36, 36);
            }
            tc_tensor_free(&bT);
            free(buf);
        }
        tc_tensor_free(&st); tc_tensor_free(&x); tc_tensor_free(&w); tc_tensor_free(&b); tc_tensor_free(&y);
    }
}

/* errno (issue 41): silu's sigmoid of a pre-activation of -400 is expf(400), which overflows and
   sets ERANGE in a C library with math errno (glibc). Every entry point keeps the caller's errno:
   the fast step called libm's expf and left ERANGE where the reference kept it. Runs on the vector
   path SELSCAN_CPU picks (make test runs this suite on native, avx2 and portable). */
static void test_errno(void) {
    static float x[2 * 4], w[4], y[2 * 4], st[2 * 5], dy[2 * 4], dx[2 * 4], dw[4], db[1];
    volatile float big = 400.0f; /* volatile: the control's expf is not folded at compile time */
    selscan_conv_problem p;
    selscan_conv_grads g;
    selscan_conv_step_problem s;
    selscan_status r;
    int i, e;
    volatile float inf;
    errno = 0;
    inf = expf(big);
    (void)inf;
    if (errno != ERANGE) { /* no math errno here: nothing the entry points could leave */
        printf("test_conv: errno checks skipped: libm's expf does not set ERANGE here\n");
        return;
    }
    for (i = 0; i < 8; i++) { x[i] = -100.0f; dy[i] = 1.0f; }
    for (i = 0; i < 4; i++) w[i] = 1.0f;
    for (i = 0; i < 10; i++) st[i] = -100.0f;
    memset(&p, 0, sizeof p);
    p.batch = 2; p.dim = 1; p.seqlen = 4; p.width = 4; p.dtype = SELSCAN_F32; p.flags = SELSCAN_CONV_SILU;
    p.x.data = x; p.weight.data = w; p.y.data = y;
    memset(&g, 0, sizeof g);
    g.dy.data = dy; g.dx.data = dx; g.dweight.data = dw; g.dbias.data = db;
    memset(&s, 0, sizeof s);
    s.batch = 2; s.dim = 1; s.width = 4; s.state_len = 5; s.seqlen = 4; s.dtype = SELSCAN_F32; s.flags = SELSCAN_CONV_SILU;
    s.state.data = st; s.x.data = x; s.weight.data = w; s.y.data = y;
    for (e = 0; e < 7; e++) {
        static const char *const names[] = {"forward_ref", "forward_cpu", "backward_ref", "backward_cpu",
                                            "step_ref", "step_cpu", "step_cpu_part"};
        errno = 12345;
        r = e == 0 ? selscan_conv_forward_ref(&p) : e == 1 ? selscan_conv_forward_cpu(&p)
            : e == 2 ? selscan_conv_backward_ref(&p, &g) : e == 3 ? selscan_conv_backward_cpu(&p, &g)
            : e == 4 ? selscan_conv_step_ref(&s) : e == 5 ? selscan_conv_step_cpu(&s) : selscan_conv_step_cpu_part(&s, 1, 2);
        CHECK(r == SELSCAN_OK && errno == 12345, "errno: conv %s (%s path): status %s, errno %d, want the caller's 12345", names[e],
              selscan_cpu_backend(), selscan_status_name(r), errno);
    }
}

/* seqlen 1 (>>conv-api: "(batch, dim) with any stride[2] >= 0"): stride[2] is never read, so a
   huge one gives the contiguous result; a negative one is refused like every negative stride. */
static void test_seqlen1_stride(void) {
    static float x[2 * 3], w[3 * 4], y[2 * 3], y1[2 * 3], st[2 * 3 * 3], st0[2 * 3 * 3], st1[2 * 3 * 3];
    selscan_conv_problem p;
    selscan_conv_step_problem s;
    selscan_diag dg;
    int i, k;
    for (i = 0; i < 6; i++) x[i] = 0.25f * (float)(i - 2);
    for (i = 0; i < 12; i++) w[i] = 0.5f - 0.125f * (float)i;
    for (i = 0; i < 18; i++) st0[i] = 0.1f * (float)(i % 7) - 0.3f;
    for (k = 0; k < 2; k++) { /* 0: the forward, 1: the step */
        memset(&p, 0, sizeof p);
        p.batch = 2; p.dim = 3; p.seqlen = 1; p.width = 4; p.dtype = SELSCAN_F32; p.flags = SELSCAN_CONV_SILU;
        p.x.data = x; p.weight.data = w; p.y.data = y;
        memset(&s, 0, sizeof s);
        s.batch = 2; s.dim = 3; s.width = 4; s.state_len = 3; s.dtype = SELSCAN_F32; s.flags = SELSCAN_CONV_SILU;
        s.state.data = st; s.x.data = x; s.weight.data = w; s.y.data = y;
        memcpy(st, st0, sizeof st);
        CHECK((k ? selscan_conv_step_cpu(&s) : selscan_conv_forward_cpu(&p)) == SELSCAN_OK, "seqlen 1 (%s): contiguous", k ? "step" : "fwd");
        memcpy(y1, y, sizeof y1);
        memcpy(st1, st, sizeof st1);
        memset(y, 0xFF, sizeof y);
        memcpy(st, st0, sizeof st);
        p.x.stride[0] = s.x.stride[0] = 3; p.x.stride[1] = s.x.stride[1] = 1; p.x.stride[2] = s.x.stride[2] = INT64_MAX;
        p.y.stride[0] = s.y.stride[0] = 3; p.y.stride[1] = s.y.stride[1] = 1; p.y.stride[2] = s.y.stride[2] = INT64_MAX / 4;
        CHECK((k ? selscan_conv_step_cpu(&s) : selscan_conv_forward_cpu(&p)) == SELSCAN_OK && memcmp(y, y1, sizeof y) == 0 &&
                  memcmp(st, st1, sizeof st) == 0,
              "seqlen 1 (%s): a huge stride[2] gives the contiguous result", k ? "step" : "fwd");
        p.x.stride[2] = s.x.stride[2] = -1;
        dg.operand = dg.rule = NULL;
        p.diag = s.diag = &dg;
        CHECK((k ? selscan_conv_step_cpu(&s) : selscan_conv_forward_cpu(&p)) == SELSCAN_ERR_STRIDE && cv_diag_is(&dg, "x", "negative stride"),
              "seqlen 1 (%s): stride[2] -1 refused", k ? "step" : "fwd");
    }
}

int main(void) {
    const int q = tc_quick();
    tc_init("test_conv");
    test_errno();
    test_seqlen1_stride();
    test_validation();
    test_oracle(q ? 30 : 120);
    test_fd(q ? 8 : 40);
    test_fast(q ? 30 : 150);
    test_parts(q ? 6 : 24);
    test_packed(q ? 6 : 30, selscan_conv_forward_ref, selscan_conv_backward_ref, "ref");
    test_packed(q ? 6 : 30, selscan_conv_forward_cpu, selscan_conv_backward_cpu, "fast");
    test_step(q ? 10 : 60, selscan_conv_step_ref, 1, "ref");
    test_step(q ? 10 : 60, selscan_conv_step_cpu, 0, "fast");
    test_step_parts(q ? 6 : 20);
    test_nan(selscan_conv_forward_ref, selscan_conv_backward_ref, "ref");
    test_nan(selscan_conv_forward_cpu, selscan_conv_backward_cpu, "fast");
    return tc_finish();
}
