/* test_identities: the library against itself.
     packed sequences == one call per sequence (forward and backward; an empty sequence passes
       h0 to h_last and dh_last to dh0);
     forward over [0,L) == [0,k) then [k,L) chained through h_last -> h0, and the backward
       chained through dh0 -> dh_last;
     step == forward with L = 1; L steps == forward. */
#include "../selscan.h" /* the implementation: tests/selscan_impl.c, linked by the Makefile */
#include "common.h"

/* the library against itself: k = 2 in f16 / bf16, each side rounds its own f32 value to dt */
static double tol_ident(selscan_dtype dt) { return tc_tol_lowp(dt, TOL_IDENT, 2); }

static selscan_status fwd(const selscan_problem *p) { return tc_run_cpu(p, NULL, -1); }
static selscan_status bwd(const selscan_problem *p, const selscan_grads *g) { return tc_run_cpu(p, g, -1); }

/* Relative difference of two tensors' stored values. */
static double diff(const tc_tensor *a, const tc_tensor *b) {
    double *r = (double *)malloc(sizeof(double) * (size_t)b->count), e;
    int64_t i;
    for (i = 0; i < b->count; i++) r[i] = tc_get(b, i);
    e = tc_rel_err(a, r);
    free(r);
    return e;
}

/* A tensor like t (same dtype, layout), poisoned. */
static void like(tc_tensor *d, const tc_tensor *t) {
    tc_tensor_like(d, t, t->dt);
    tc_poison(d);
}

/* f32 tensor of doubles accumulated from a tensor's stored values. */
static void acc(double *sum, const tc_tensor *t) {
    int64_t i;
    for (i = 0; i < t->count; i++) sum[i] += tc_get(t, i);
}

/* The problem P restricted to time [t0, t1) of batch-1 row data, state row `row`. */
static selscan_problem sub_problem(const tc_prob *P, int64_t t0, int64_t t1, int64_t row) {
    selscan_problem p = P->p;
    p.cu_seqlens = NULL;
    p.n_seqs = 0;
    p.seqlen = t1 - t0;
    p.u = tc_view(&P->u, 2, t0);
    p.delta = tc_view(&P->delta, 2, t0);
    p.z = tc_view(&P->z, 2, t0);
    p.y = tc_mut(tc_view(&P->y, 2, t0));
    p.B = (P->c.flags & SELSCAN_FIXED_B) ? tc_api_explicit(&P->B) : tc_view(&P->B, 3, t0);
    p.C = (P->c.flags & SELSCAN_FIXED_C) ? tc_api_explicit(&P->C) : tc_view(&P->C, 3, t0);
    p.A = tc_api_explicit(&P->A);
    p.D = tc_api_explicit(&P->D);
    p.delta_bias = tc_api_explicit(&P->bias);
    p.h0 = tc_view(&P->h0, 0, row);
    p.h_last = tc_mut(tc_view(&P->hlast, 0, row));
    return p;
}

/* Gradient outputs of G restricted to [t0, t1) and state row `row`; the summed ones (dA, dD,
   ddelta_bias, fixed dB/dC) go to the tensors of S. */
static selscan_grads sub_grads(const tc_prob *P, const tc_grads *G, const tc_grads *S, int64_t t0, int64_t row) {
    selscan_grads g;
    memset(&g, 0, sizeof g);
    g.dy = tc_view(&G->dy, 2, t0);
    g.dh_last = tc_view(&G->dhlast, 0, row);
    g.du = tc_mut(tc_view(&G->du, 2, t0));
    g.ddelta = tc_mut(tc_view(&G->ddelta, 2, t0));
    g.dz = P->z.mem ? tc_mut(tc_view(&G->dz, 2, t0)) : g.dz;
    g.dB = tc_mut((P->c.flags & SELSCAN_FIXED_B) ? tc_api_explicit(&S->dB) : tc_view(&G->dB, 3, t0));
    g.dC = tc_mut((P->c.flags & SELSCAN_FIXED_C) ? tc_api_explicit(&S->dC) : tc_view(&G->dC, 3, t0));
    g.dA = tc_mut(tc_api_explicit(&S->dA));
    g.dD = tc_mut(tc_api_explicit(&S->dD));
    g.ddelta_bias = tc_mut(tc_api_explicit(&S->dbias));
    g.dh0 = tc_mut(tc_view(&G->dh0, 0, row));
    return g;
}

/* S: P's problem with its outputs in fresh buffers, for the calls on pieces of it; Gs likewise for
   Gp's gradients, T for the gradients summed over the pieces (dA, dD, ddelta_bias, fixed dB / dC). */
static void pieces_make(const tc_prob *P, const tc_grads *Gp, tc_prob *S, tc_grads *Gs, tc_grads *T) {
    *S = *P;
    like(&S->y, &P->y);
    like(&S->hlast, &P->hlast);
    *Gs = *Gp;
    like(&Gs->du, &Gp->du); like(&Gs->ddelta, &Gp->ddelta); like(&Gs->dz, &Gp->dz); like(&Gs->dB, &Gp->dB);
    like(&Gs->dC, &Gp->dC); like(&Gs->dh0, &Gp->dh0);
    *T = *Gp;
    like(&T->dA, &Gp->dA); like(&T->dD, &Gp->dD); like(&T->dbias, &Gp->dbias); like(&T->dB, &Gp->dB);
    like(&T->dC, &Gp->dC);
}

static void pieces_free(tc_prob *S, tc_grads *Gs, tc_grads *T) {
    tc_tensor_free(&S->y); tc_tensor_free(&S->hlast);
    tc_tensor_free(&Gs->du); tc_tensor_free(&Gs->ddelta); tc_tensor_free(&Gs->dz); tc_tensor_free(&Gs->dB);
    tc_tensor_free(&Gs->dC); tc_tensor_free(&Gs->dh0);
    tc_tensor_free(&T->dA); tc_tensor_free(&T->dD); tc_tensor_free(&T->dbias); tc_tensor_free(&T->dB);
    tc_tensor_free(&T->dC);
}

static const char *gn[9] = {"du", "ddelta", "dA", "dB", "dC", "dD", "dz", "ddelta_bias", "dh0"};
static tc_tensor *gt(tc_grads *G, int k) {
    tc_tensor *t[9] = {&G->du, &G->ddelta, &G->dA, &G->dB, &G->dC, &G->dD, &G->dz, &G->dbias, &G->dh0};
    return t[k];
}
static int summed(const tc_prob *P, int k) {
    return k == 2 || k == 5 || k == 7 || (k == 3 && (P->c.flags & SELSCAN_FIXED_B)) ||
           (k == 4 && (P->c.flags & SELSCAN_FIXED_C));
}

/* Compares the gradients of Gp (one call) with Gs (pieces; summed ones accumulated in sums). */
static void compare_grads(const tc_prob *P, tc_grads *Gp, tc_grads *Gs, double **sums, const char *tag,
                          const char *desc) {
    int k;
    for (k = 0; k < 9; k++) {
        double e;
        if (k == 6 && !P->z.mem) continue;
        if (summed(P, k)) {
            e = tc_rel_err(gt(Gp, k), sums[k]);
        } else {
            e = diff(gt(Gs, k), gt(Gp, k));
            CHECK(tc_unwritten(gt(Gs, k)) == 0, "[%s] %s: pieces left elements unwritten (%s)", tag, gn[k], desc);
        }
        CHECK(e <= tol_ident(gt(Gp, k)->dt), "[%s] %s differs by %.3g (%s)", tag, gn[k], e, desc);
    }
}

static void packed_case(const tc_cfg *c) {
    tc_prob P, S;
    tc_grads Gp, Gs, T;
    char desc[300];
    double *sums[9] = {0};
    int64_t s, k, n;
    tc_prob_make(&P, c);
    tc_prob_describe(&P, desc, sizeof desc);
    tc_grads_make(&Gp, &P, TC_G_ALL, 1);
    if (!CHECK(fwd(&P.p) == SELSCAN_OK, "[packed] forward failed (%s)", desc) ||
        !CHECK(bwd(&P.p, &Gp.g) == SELSCAN_OK, "[packed] backward failed (%s)", desc))
        goto out0;
    pieces_make(&P, &Gp, &S, &Gs, &T);
    for (k = 0; k < 9; k++)
        if (summed(&P, k)) sums[k] = (double *)calloc((size_t)gt(&Gp, k)->count, sizeof(double));
    for (s = 0; s < c->nseq; s++) {
        const int64_t t0 = P.cu[s], t1 = P.cu[s + 1];
        if (t1 == t0) { /* empty: h_last = h0, dh0 = dh_last, bitwise */
            int same = 1;
            for (k = 0; k < c->dim; k++)
                for (n = 0; n < c->N; n++) {
                    const int64_t i = (s * c->dim + k) * c->N + n;
                    same &= tc_get(&P.hlast, i) == P.h0.v[i] && tc_get(&Gp.dh0, i) == Gp.dhlast.v[i];
                    tc_encode(SELSCAN_F32, P.h0.v[i], (float *)S.hlast.data + tc_off(&S.hlast, i));
                    tc_encode(SELSCAN_F32, Gp.dhlast.v[i], (float *)Gs.dh0.data + tc_off(&Gs.dh0, i));
                }
            CHECK(same, "[packed] empty sequence %lld: h_last != h0 or dh0 != dh_last (%s)", (long long)s, desc);
            continue;
        }
        {
            selscan_problem p = sub_problem(&S, t0, t1, s);
            selscan_grads g = sub_grads(&S, &Gs, &T, t0, s);
            if (!CHECK(fwd(&p) == SELSCAN_OK && bwd(&p, &g) == SELSCAN_OK, "[packed] a piece failed (%s)", desc))
                goto out;
            for (k = 0; k < 9; k++)
                if (sums[k]) acc(sums[k], gt(&T, k));
        }
    }
    CHECK(diff(&S.y, &P.y) <= tol_ident(c->dt) && tc_unwritten(&S.y) == 0, "[packed] y differs by %.3g (%s)",
          diff(&S.y, &P.y), desc);
    CHECK(diff(&S.hlast, &P.hlast) <= TOL_IDENT, "[packed] h_last differs by %.3g (%s)", diff(&S.hlast, &P.hlast), desc);
    compare_grads(&P, &Gp, &Gs, sums, "packed", desc);
out:
    pieces_free(&S, &Gs, &T);
    for (k = 0; k < 9; k++) free(sums[k]);
out0:
    tc_grads_free(&Gp);
    tc_prob_free(&P);
}

/* [0,L) == [0,k) + [k,L) for every batch row, forward (h_last -> h0) and backward
   (dh0 -> dh_last). */
static void chain_case(const tc_cfg *c, int64_t split) {
    tc_prob P, S;
    tc_grads Gp, Gs, T;
    tc_tensor H, DH;
    char desc[320];
    double *sums[9] = {0};
    int64_t k;
    tc_prob_make(&P, c);
    tc_prob_describe(&P, desc, sizeof desc - 20);
    snprintf(desc + strlen(desc), 20, " split %lld", (long long)split);
    tc_grads_make(&Gp, &P, TC_G_ALL, 1);
    if (!CHECK(fwd(&P.p) == SELSCAN_OK, "[chain] forward failed (%s)", desc) ||
        !CHECK(bwd(&P.p, &Gp.g) == SELSCAN_OK, "[chain] backward failed (%s)", desc))
        goto out0;
    pieces_make(&P, &Gp, &S, &Gs, &T);
    tc_tensor_make(&H, SELSCAN_F32, 3, c->batch, c->dim, c->N, 1, TC_LAYOUT_PADDED, 1);
    tc_tensor_make(&DH, SELSCAN_F32, 3, c->batch, c->dim, c->N, 1, TC_LAYOUT_PADDED, 1);
    for (k = 0; k < 9; k++)
        if (summed(&P, k)) sums[k] = (double *)calloc((size_t)gt(&Gp, k)->count, sizeof(double));
    {
        selscan_problem p1 = sub_problem(&S, 0, split, 0), p2 = sub_problem(&S, split, c->L, 0);
        selscan_grads g1 = sub_grads(&S, &Gs, &T, 0, 0), g2 = sub_grads(&S, &Gs, &T, split, 0);
        p1.h0 = tc_api(&P.h0);
        p1.h_last = tc_mut(tc_api_explicit(&H));
        p2.h0 = tc_api_explicit(&H);
        p2.h_last = tc_out(&S.hlast);
        g2.dh_last = tc_api(&Gp.dhlast);
        g2.dh0 = tc_mut(tc_api_explicit(&DH));
        g1.dh_last = tc_api_explicit(&DH);
        g1.dh0 = tc_out(&Gs.dh0);
        if (!CHECK(fwd(&p1) == SELSCAN_OK && fwd(&p2) == SELSCAN_OK, "[chain] forward pieces failed (%s)", desc))
            goto out;
        CHECK(diff(&S.y, &P.y) <= tol_ident(c->dt) && tc_unwritten(&S.y) == 0, "[chain] y differs by %.3g (%s)",
              diff(&S.y, &P.y), desc);
        CHECK(diff(&S.hlast, &P.hlast) <= TOL_IDENT, "[chain] h_last differs by %.3g (%s)", diff(&S.hlast, &P.hlast),
              desc);
        if (!CHECK(bwd(&p2, &g2) == SELSCAN_OK, "[chain] backward of [k,L) failed (%s)", desc)) goto out;
        for (k = 0; k < 9; k++)
            if (sums[k]) acc(sums[k], gt(&T, k));
        if (!CHECK(bwd(&p1, &g1) == SELSCAN_OK, "[chain] backward of [0,k) failed (%s)", desc)) goto out;
        for (k = 0; k < 9; k++)
            if (sums[k]) acc(sums[k], gt(&T, k));
        compare_grads(&P, &Gp, &Gs, sums, "chain", desc);
    }
out:
    tc_tensor_free(&H); tc_tensor_free(&DH);
    pieces_free(&S, &Gs, &T);
    for (k = 0; k < 9; k++) free(sums[k]);
out0:
    tc_grads_free(&Gp);
    tc_prob_free(&P);
}

/* The step tensors of P's time index t (dropping the L dimension). */
static selscan_tensor at_t(const tc_tensor *t, int Ldim, int64_t ti) {
    selscan_tensor r = tc_view(t, Ldim, ti);
    r.stride[Ldim] = 0;
    return r;
}

/* L steps == forward (L = 1: step == forward with L = 1). */
static void steps_case(const tc_cfg *c) {
    tc_prob P;
    tc_tensor st, y2;
    char desc[300];
    int64_t t, i;
    int ok = 1;
    tc_prob_make(&P, c);
    tc_prob_describe(&P, desc, sizeof desc);
    if (!CHECK(fwd(&P.p) == SELSCAN_OK, "[steps] forward failed (%s)", desc)) goto out0;
    tc_tensor_make(&st, SELSCAN_F32, 3, c->batch, c->dim, c->N, 1, (int)tc_randint(0, TC_LAYOUT_PADDED), 1);
    for (i = 0; i < st.count; i++) st.v[i] = P.h0.v[i];
    tc_store(&st);
    like(&y2, &P.y);
    for (t = 0; t < c->L && ok; t++) {
        selscan_step_problem s;
        selscan_status r;
        memset(&s, 0, sizeof s);
        s.batch = c->batch; s.dim = c->dim; s.dstate = c->N; s.n_groups = P.p.n_groups; s.n_cache = tc_coin(0.5) ? 0 : c->batch;
        s.dtype = c->dt; s.flags = c->flags;
        s.state = tc_out(&st);
        s.u = at_t(&P.u, 2, t); s.delta = at_t(&P.delta, 2, t); s.z = at_t(&P.z, 2, t); s.y = tc_mut(at_t(&y2, 2, t));
        s.B = (c->flags & SELSCAN_FIXED_B) ? tc_api(&P.B) : at_t(&P.B, 3, t);
        s.C = (c->flags & SELSCAN_FIXED_C) ? tc_api(&P.C) : at_t(&P.C, 3, t);
        s.A = tc_api(&P.A); s.D = tc_api(&P.D); s.delta_bias = tc_api(&P.bias);
        r = selscan_step_cpu(&s);
        ok = CHECK(r == SELSCAN_OK, "[steps] step %lld: %s (%s)", (long long)t, selscan_status_string(r), desc);
    }
    if (ok) {
        CHECK(diff(&y2, &P.y) <= tol_ident(c->dt) && tc_unwritten(&y2) == 0, "[steps] y differs by %.3g (%s)",
              diff(&y2, &P.y), desc);
        if (P.hlast.mem)
            CHECK(diff(&st, &P.hlast) <= TOL_IDENT, "[steps] state differs from h_last by %.3g (%s)",
                  diff(&st, &P.hlast), desc);
    }
    tc_tensor_free(&st);
    tc_tensor_free(&y2);
out0:
    tc_prob_free(&P);
}

static void base_cfg(tc_cfg *c, selscan_dtype dt) {
    memset(c, 0, sizeof *c);
    c->dt = dt; c->batch = 2; c->dim = 4; c->L = 150; c->N = 6; c->G = 2;
    c->flags = SELSCAN_DELTA_SOFTPLUS;
    c->D = c->z = c->bias = c->h0 = c->hlast = 1;
    c->layout = -1;
    c->big_delta = 1;
}

int main(void) {
    const selscan_dtype dts[] = {SELSCAN_F32, SELSCAN_F16, SELSCAN_BF16};
    const int quick = tc_quick();
    tc_cfg c;
    int i;
    tc_init("test_identities");
    for (i = 0; i < (quick ? 4 : 30); i++) { /* packed == separate */
        base_cfg(&c, dts[i % 3]);
        c.batch = 1; c.nseq = (int)tc_randint(1, 6); c.L = tc_randint(1, 300);
        c.flags |= (i & 2) ? SELSCAN_FIXED_B : 0u;
        c.flags |= (i & 4) ? SELSCAN_FIXED_C : 0u;
        c.h0 = (i & 8) == 0;
        c.G = (i & 1) ? 4 : 1; c.dim = 4;
        packed_case(&c);
    }
    for (i = 0; i < (quick ? 4 : 25); i++) { /* [0,L) == [0,k) + [k,L) */
        static const int64_t splits[] = {1, 64, 75, 149, 0};
        base_cfg(&c, dts[i % 3]);
        c.flags |= (i & 2) ? SELSCAN_FIXED_B : 0u;
        c.flags |= (i & 4) ? SELSCAN_FIXED_C : 0u;
        c.h0 = (i & 8) == 0;
        chain_case(&c, splits[i % 5] ? splits[i % 5] : tc_randint(1, c.L - 1));
    }
    for (i = 0; i < (quick ? 6 : 40); i++) { /* steps == forward */
        base_cfg(&c, dts[i % 3]);
        c.L = (i % 4) == 0 ? 1 : tc_randint(2, 60);
        c.batch = tc_randint(1, 4);
        c.flags = (tc_coin(0.7) ? SELSCAN_DELTA_SOFTPLUS : 0u) | (tc_coin(0.3) ? SELSCAN_FIXED_B : 0u) |
                  (tc_coin(0.3) ? SELSCAN_FIXED_C : 0u);
        c.D = tc_coin(0.5); c.z = tc_coin(0.5); c.bias = tc_coin(0.5); c.h0 = tc_coin(0.5);
        c.G = (i & 1) ? 2 : 1;
        steps_case(&c);
    }
    return tc_finish();
}
