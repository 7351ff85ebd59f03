/* test_backward: every gradient of selscan_backward_cpu and selscan_backward_ref against fp64
   central differences of the oracle's loss sum(dy*y) + sum(dh_last*h_last) (f32 problems);
   f16/bf16 gradients against the library's f32 gradients on the same rounded inputs and against
   the differences; any subset of gradients (the others untouched). */
#include "../selscan.h" /* the implementation: tests/selscan_impl.c, linked by the Makefile */
#include "common.h"

typedef selscan_status (*bwd_fn)(const selscan_problem *, const selscan_grads *, void *, size_t);
static const struct { const char *name; bwd_fn f; } impls[] = {{"cpu", selscan_backward_cpu}, {"ref", selscan_backward_ref}};

static const char *gnames[9] = {"du", "ddelta", "dA", "dB", "dC", "dD", "dz", "ddelta_bias", "dh0"};

static tc_tensor *gout(tc_grads *G, int k) {
    tc_tensor *t[9] = {&G->du, &G->ddelta, &G->dA, &G->dB, &G->dC, &G->dD, &G->dz, &G->dbias, &G->dh0};
    return t[k];
}
static void *gptr(const tc_grads *G, int k) {
    void *t[9] = {G->g.du.data, G->g.ddelta.data, G->g.dA.data, G->g.dB.data, G->g.dC.data, G->g.dD.data,
                  G->g.dz.data, G->g.ddelta_bias.data, G->g.dh0.data};
    return t[k];
}
static tc_tensor *gin(tc_prob *P, int k) {
    tc_tensor *t[9] = {&P->u, &P->delta, &P->A, &P->B, &P->C, &P->D, &P->z, &P->bias, &P->h0};
    return t[k];
}

/* Runs a backward with poisoned outputs and a fresh workspace; checks what every call must hold
   (status, requested outputs all written and nothing outside them, inputs unchanged). */
static int run_bwd(tc_prob *P, tc_grads *G, bwd_fn f, const char *tag, const char *desc) {
    tc_tensor *ins[] = {&P->u, &P->delta, &P->A, &P->B, &P->C, &P->D, &P->z, &P->bias, &P->h0, &G->dy, &G->dhlast};
    unsigned char *snaps[11];
    size_t bytes = 0;
    void *ws;
    selscan_status st;
    int i, same = 1, ok;
    int64_t unwritten = 0, dirty = 0;
    for (i = 0; i < 11; i++) snaps[i] = tc_snapshot(ins[i]);
    tc_grads_poison(G);
    st = selscan_workspace_size(&P->p, &G->g, &bytes);
    CHECK(st == SELSCAN_OK, "[%s] workspace_size: %s (%s)", tag, selscan_status_string(st), desc);
    ws = tc_ws(bytes);
    st = f(&P->p, &G->g, bytes ? ws : NULL, bytes);
    tc_ws_free(ws);
    ok = CHECK(st == SELSCAN_OK, "[%s] status %s (%s)", tag, selscan_status_string(st), desc);
    for (i = 0; i < 11; i++) { same &= tc_same(ins[i], snaps[i]); free(snaps[i]); }
    if (!ok) return 0;
    CHECK(same, "[%s] an input changed (%s)", tag, desc);
    for (i = 0; i < 9; i++) {
        const tc_tensor *t = gout(G, i);
        if (gptr(G, i)) { unwritten += tc_unwritten(t); dirty += tc_gaps_dirty(t); }
        else dirty += t->count - tc_unwritten(t); /* not requested: must stay all poison */
    }
    CHECK(unwritten == 0 && dirty == 0, "[%s] %lld requested elements unwritten, %lld elements/bytes written outside (%s)",
          tag, (long long)unwritten, (long long)dirty, desc);
    return 1;
}

/* f32 problem: every requested gradient against central differences of the fp64 loss. */
static void fd_case(const tc_cfg *c, int dhlast, unsigned want, const char *tag) {
    tc_prob P;
    tc_grads G;
    char desc[300];
    double *fd[9];
    size_t k;
    int i;
    tc_prob_make(&P, c);
    tc_grads_make(&G, &P, want, dhlast);
    tc_prob_describe(&P, desc, sizeof desc - 40);
    snprintf(desc + strlen(desc), 40, "%s", dhlast ? " dh_last" : "");
    for (i = 0; i < 9; i++) {
        fd[i] = NULL;
        if (!gptr(&G, i)) continue;
        fd[i] = (double *)malloc(sizeof(double) * (size_t)gin(&P, i)->count);
        tc_fd_grad(&P, gin(&P, i), G.dy.v, dhlast ? G.dhlast.v : NULL, fd[i]);
    }
    for (k = 0; k < sizeof impls / sizeof impls[0]; k++) {
        char t2[64];
        snprintf(t2, sizeof t2, "%s/%s", tag, impls[k].name);
        if (!run_bwd(&P, &G, impls[k].f, t2, desc)) continue;
        for (i = 0; i < 9; i++) {
            double e;
            double tol;
            if (!fd[i]) continue;
            tol = tc_tol_grad_fd(gout(&G, i)->dt); /* by the gradient's dtype: an f32 one carries no rounding */
            e = tc_rel_err(gout(&G, i), fd[i]);
            CHECK(e <= tol, "[%s] %s rel err vs finite differences %.3g > %.3g (%s)", t2, gnames[i], e, tol, desc);
        }
    }
    for (i = 0; i < 9; i++) free(fd[i]);
    tc_grads_free(&G);
    tc_prob_free(&P);
}

/* A small random configuration for finite differences (the oracle runs 2x per input element). */
static void small_cfg(tc_cfg *c, selscan_dtype dt) {
    tc_cfg_random(c, dt, 400);
    if (c->L > 24) c->L = tc_randint(1, 24);
    c->bcast = 0;
}

/* f16 / bf16: the library on T against the library on f32 with the same rounded values. */
static void dtype_case(const tc_cfg *c, int dhlast) {
    tc_prob P, P32;
    tc_grads G, G32;
    char desc[300];
    size_t k;
    int i;
    tc_prob_make(&P, c);
    tc_prob_like(&P32, &P, SELSCAN_F32);
    tc_grads_make(&G, &P, TC_G_ALL, dhlast);
    tc_grads_make(&G32, &P32, TC_G_ALL, dhlast);
    memcpy(G32.dy.v, G.dy.v, sizeof(double) * (size_t)G.dy.count);
    memcpy(G32.dhlast.v, G.dhlast.v, sizeof(double) * (size_t)G.dhlast.count);
    tc_store(&G32.dy);
    tc_store(&G32.dhlast);
    tc_prob_describe(&P, desc, sizeof desc);
    for (k = 0; k < sizeof impls / sizeof impls[0]; k++) { /* each implementation against its own f32 */
        char t2[64];
        snprintf(t2, sizeof t2, "dtype/%s", impls[k].name);
        if (!run_bwd(&P32, &G32, impls[k].f, "dtype/f32", desc)) continue;
        if (!run_bwd(&P, &G, impls[k].f, t2, desc)) continue;
        for (i = 0; i < 9; i++) {
            tc_tensor *t = gout(&G, i), *r = gout(&G32, i);
            double *ref, e, tol;
            int64_t j;
            if (!gptr(&G, i)) continue;
            ref = (double *)malloc(sizeof(double) * (size_t)r->count);
            for (j = 0; j < r->count; j++) ref[j] = tc_get(r, j);
            tol = tc_tol_grad(t->dt);
            e = tc_rel_err(t, ref);
            CHECK(e <= tol, "[%s] %s rel err vs library f32 %.3g > %.3g (%s)", t2, gnames[i], e, tol, desc);
            free(ref);
        }
    }
    tc_grads_free(&G);
    tc_grads_free(&G32);
    tc_prob_free(&P);
    tc_prob_free(&P32);
}

/* Any subset: requested outputs equal the all-requested run, the others stay untouched. */
static void subset_case(const tc_cfg *c, unsigned want) {
    tc_prob P;
    tc_grads Gall, Gs;
    char desc[300];
    int i;
    tc_prob_make(&P, c);
    tc_grads_make(&Gall, &P, TC_G_ALL, 1);
    tc_grads_make(&Gs, &P, want, 1);
    memcpy(Gs.dy.v, Gall.dy.v, sizeof(double) * (size_t)Gall.dy.count);
    memcpy(Gs.dhlast.v, Gall.dhlast.v, sizeof(double) * (size_t)Gall.dhlast.count);
    tc_store(&Gs.dy);
    tc_store(&Gs.dhlast);
    tc_prob_describe(&P, desc, sizeof desc - 20);
    snprintf(desc + strlen(desc), 20, " want 0x%x", want);
    if (run_bwd(&P, &Gall, selscan_backward_cpu, "subset/all", desc) &&
        run_bwd(&P, &Gs, selscan_backward_cpu, "subset", desc)) {
        for (i = 0; i < 9; i++) {
            tc_tensor *t = gout(&Gs, i), *r = gout(&Gall, i);
            double *ref, e;
            int64_t j;
            if (!gptr(&Gs, i)) continue;
            ref = (double *)malloc(sizeof(double) * (size_t)r->count);
            for (j = 0; j < r->count; j++) ref[j] = tc_get(r, j);
            e = tc_rel_err(t, ref);
            CHECK(e <= TOL_IDENT, "[subset] %s differs from the all-gradients run: %.3g (%s)", gnames[i], e, desc);
            free(ref);
        }
    }
    tc_grads_free(&Gall);
    tc_grads_free(&Gs);
    tc_prob_free(&P);
}

static void base_cfg(tc_cfg *c) {
    memset(c, 0, sizeof *c);
    c->dt = SELSCAN_F32; c->batch = 2; c->dim = 4; c->L = 9; c->N = 3; c->G = 2;
    c->flags = SELSCAN_DELTA_SOFTPLUS;
    c->D = c->z = c->bias = c->h0 = c->hlast = 1;
    c->layout = -1;
    c->big_delta = 1;
}

int main(void) {
    const int quick = tc_quick();
    tc_cfg c;
    int i;
    tc_init("test_backward");

    /* every option alone and together, with and without dh_last */
    for (i = 0; i < 2; i++) {
        int j;
        for (j = 0; j < 9; j++) {
            base_cfg(&c);
            if (j == 1) c.flags = 0;                                           /* no softplus */
            if (j == 2) c.flags |= SELSCAN_FIXED_B;                            /* fixed B */
            if (j == 3) c.flags |= SELSCAN_FIXED_C;                            /* fixed C */
            if (j == 4) c.flags |= SELSCAN_FIXED_B | SELSCAN_FIXED_C;          /* both */
            if (j == 5) c.D = c.z = c.bias = c.h0 = 0;                         /* grads at absent operands */
            if (j == 6) { c.G = 4; c.dim = 8; c.N = 2; }                       /* 4 groups */
            if (j == 7) { c.G = 1; c.batch = 1; c.nseq = 4; c.L = 14; }        /* packed, one empty */
            if (j == 8) { c.layout = TC_LAYOUT_LASTTO1; }                      /* channels-last */
            fd_case(&c, i, TC_G_ALL, "fd");
        }
    }
    /* chunk boundaries of a checkpointing backward: L around 64 and 128 */
    {
        static const int64_t Ls[] = {1, 63, 64, 65, 130};
        for (i = 0; i < 5; i++) {
            base_cfg(&c);
            c.batch = 1; c.dim = 2; c.G = 1; c.N = 2; c.L = Ls[i];
            fd_case(&c, i & 1, TC_G_ALL, "fd/L");
        }
        base_cfg(&c); /* packed with a long sequence */
        c.batch = 1; c.dim = 1; c.G = 1; c.N = 2; c.L = 150; c.nseq = 3;
        fd_case(&c, 1, TC_G_ALL, "fd/packed-long");
    }
    /* large N */
    base_cfg(&c);
    c.batch = 1; c.dim = 1; c.G = 1; c.N = 256; c.L = 3;
    fd_case(&c, 1, TC_G_ALL, "fd/N256");
    /* the softplus threshold: every delta + bias above 20 */
    base_cfg(&c);
    c.big_delta = 2;
    fd_case(&c, 1, TC_G_ALL, "fd/softplus>20");
    /* random f32 problems */
    for (i = 0; i < (quick ? 6 : 80); i++) {
        small_cfg(&c, SELSCAN_F32);
        fd_case(&c, tc_coin(0.5), TC_G_ALL, "fd/random");
    }
    /* f16, bf16: against the library's f32 and against finite differences */
    for (i = 0; i < (quick ? 4 : 40); i++) {
        tc_cfg_random(&c, i & 1 ? SELSCAN_BF16 : SELSCAN_F16, quick ? 5000 : 40000);
        c.bcast = 0;
        dtype_case(&c, tc_coin(0.5));
    }
    for (i = 0; i < (quick ? 2 : 16); i++) {
        small_cfg(&c, i & 1 ? SELSCAN_BF16 : SELSCAN_F16);
        fd_case(&c, tc_coin(0.5), TC_G_ALL, "fd/half");
    }
    /* subsets: each gradient alone, none, random sets */
    for (i = 0; i < 9 + 1 + (quick ? 3 : 12); i++) {
        unsigned want = i < 9 ? 1u << i : i == 9 ? 0u : (unsigned)tc_randint(1, TC_G_ALL);
        base_cfg(&c);
        c.L = 70;
        c.flags |= (i & 2) ? SELSCAN_FIXED_B : 0u;
        c.flags |= (i & 4) ? SELSCAN_FIXED_C : 0u;
        subset_case(&c, want);
    }
    return tc_finish();
}
