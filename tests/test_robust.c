/* test_robust: NaN / Inf inputs propagate to exactly the outputs they affect (and nowhere else)
   without crashing, forward and backward; random NaN/Inf storms complete with every output
   written; repeated calls give bitwise-identical results (forward, backward, step), whatever the
   workspace held before. */
#include "../selscan.h" /* the implementation: tests/selscan_impl.c, linked by the Makefile */
#include "common.h"

/* the CPU forward / backward on a workspace whose every byte is fill */
static selscan_status fwd(const selscan_problem *p, int fill) { return tc_run_cpu(p, NULL, fill); }
static selscan_status bwd(const selscan_problem *p, const selscan_grads *g, int fill) { return tc_run_cpu(p, g, fill); }

static void base_cfg(tc_cfg *c, selscan_dtype dt) {
    memset(c, 0, sizeof *c);
    c->dt = dt; c->batch = 2; c->dim = 4; c->L = 20; c->N = 3; c->G = 2;
    c->flags = SELSCAN_DELTA_SOFTPLUS;
    c->D = c->z = c->bias = c->h0 = c->hlast = 1;
    c->layout = -1;
}

/* Writes x into logical element i of t's memory. */
static void poke(tc_tensor *t, int64_t i, double x) {
    tc_encode(t->dt, x, (unsigned char *)t->data + tc_off(t, i) * tc_esize(t->dt));
}

/* 1 when the non-finite elements of t are exactly those marked in mask. */
static int mask_ok(const tc_tensor *t, const unsigned char *mask, int64_t *wrong) {
    int64_t i;
    *wrong = 0;
    for (i = 0; i < t->count; i++) {
        const double v = tc_get(t, i);
        *wrong += (mask[i] != 0) != !isfinite(v);
    }
    return *wrong == 0;
}

enum { S_U, S_DELTA, S_Z, S_B, S_C, S_A, S_D, S_BIAS, S_H0, NSITES };
static const char *site_names[NSITES] = {"u", "delta", "z", "B", "C", "A", "D", "delta_bias", "h0"};

/* One non-finite value x at a random element of the input `site`; y and h_last must be
   non-finite exactly where the recurrence carries it. */
static void forward_site(selscan_dtype dt, int site, double x) {
    tc_cfg c;
    tc_prob P;
    const int64_t Bt = 2, Dm = 4, L = 20, N = 3, dpg = 2;
    int64_t b = tc_randint(0, Bt - 1), d = tc_randint(0, Dm - 1), t = tc_randint(0, L - 1), n = tc_randint(0, N - 1);
    int64_t g, bb, dd, tt, nn;
    unsigned char *my = (unsigned char *)calloc((size_t)(Bt * Dm * L), 1), *mh = (unsigned char *)calloc((size_t)(Bt * Dm * N), 1);
    int64_t wy = 0, wh = 0;
    char desc[128];
    base_cfg(&c, dt);
    tc_prob_make(&P, &c);
    g = d / dpg;
    snprintf(desc, sizeof desc, "%s %s = %g at b%lld d%lld t%lld n%lld", tc_dtname(dt), site_names[site], x, (long long)b,
             (long long)d, (long long)t, (long long)n);
#define MY(b_, d_, t_) my[((b_) * Dm + (d_)) * L + (t_)]
#define MH(b_, d_, n_) mh[((b_) * Dm + (d_)) * N + (n_)]
    switch (site) {
    case S_U: case S_DELTA: /* the state of (b, d) from t on */
        poke(site == S_U ? &P.u : &P.delta, (b * Dm + d) * L + t, x);
        for (tt = t; tt < L; tt++) MY(b, d, tt) = 1;
        for (nn = 0; nn < N; nn++) MH(b, d, nn) = 1;
        break;
    case S_Z:
        poke(&P.z, (b * Dm + d) * L + t, x);
        MY(b, d, t) = 1;
        break;
    case S_B: /* h[n] of every channel of group g from t on */
        poke(&P.B, ((b * 2 + g) * N + n) * L + t, x);
        for (dd = g * dpg; dd < (g + 1) * dpg; dd++) {
            for (tt = t; tt < L; tt++) MY(b, dd, tt) = 1;
            MH(b, dd, n) = 1;
        }
        break;
    case S_C: /* y of every channel of group g at t */
        poke(&P.C, ((b * 2 + g) * N + n) * L + t, x);
        for (dd = g * dpg; dd < (g + 1) * dpg; dd++) MY(b, dd, t) = 1;
        break;
    case S_A: /* h[n] of channel d, every batch row and step */
        poke(&P.A, d * N + n, x);
        for (bb = 0; bb < Bt; bb++) {
            for (tt = 0; tt < L; tt++) MY(bb, d, tt) = 1;
            MH(bb, d, n) = 1;
        }
        break;
    case S_D:
        poke(&P.D, d, x);
        for (bb = 0; bb < Bt; bb++)
            for (tt = 0; tt < L; tt++) MY(bb, d, tt) = 1;
        break;
    case S_BIAS:
        poke(&P.bias, d, x);
        for (bb = 0; bb < Bt; bb++) {
            for (tt = 0; tt < L; tt++) MY(bb, d, tt) = 1;
            for (nn = 0; nn < N; nn++) MH(bb, d, nn) = 1;
        }
        break;
    case S_H0:
        poke(&P.h0, (b * Dm + d) * N + n, x);
        for (tt = 0; tt < L; tt++) MY(b, d, tt) = 1;
        MH(b, d, n) = 1;
        break;
    }
#undef MY
#undef MH
    tc_poison(&P.y);
    tc_poison(&P.hlast);
    if (CHECK(fwd(&P.p, 0) == SELSCAN_OK, "[nan/fwd] status (%s)", desc)) {
        CHECK(tc_unwritten(&P.y) == 0 && tc_unwritten(&P.hlast) == 0, "[nan/fwd] outputs unwritten (%s)", desc);
        CHECK(mask_ok(&P.y, my, &wy) && mask_ok(&P.hlast, mh, &wh),
              "[nan/fwd] non-finite pattern wrong: %lld y elements, %lld h_last elements (%s)", (long long)wy,
              (long long)wh, desc);
    }
    free(my);
    free(mh);
    tc_prob_free(&P);
}

/* NaN in dy[b, d, t]: which gradients turn NaN. */
static void backward_dy(selscan_dtype dt, int fixed) {
    tc_cfg c;
    tc_prob P;
    tc_grads G;
    const int64_t Bt = 2, Dm = 4, L = 20, N = 3, dpg = 2, GG = 2;
    int64_t b = tc_randint(0, Bt - 1), d = tc_randint(0, Dm - 1), t = tc_randint(0, L - 1), g = d / dpg, i, tt, nn;
    unsigned char *mu = (unsigned char *)calloc((size_t)(Bt * Dm * L), 1), *mz = (unsigned char *)calloc((size_t)(Bt * Dm * L), 1);
    unsigned char *mA = (unsigned char *)calloc((size_t)(Dm * N), 1), *mD = (unsigned char *)calloc((size_t)Dm, 1);
    unsigned char *mh = (unsigned char *)calloc((size_t)(Bt * Dm * N), 1);
    unsigned char *mB = (unsigned char *)calloc((size_t)(Bt * GG * N * L + Dm * N), 1), *mC = (unsigned char *)calloc((size_t)(Bt * GG * N * L + Dm * N), 1);
    int64_t w[9] = {0};
    char desc[128];
    base_cfg(&c, dt);
    if (fixed) c.flags |= SELSCAN_FIXED_B | SELSCAN_FIXED_C;
    tc_prob_make(&P, &c);
    tc_grads_make(&G, &P, TC_G_ALL, 1);
    snprintf(desc, sizeof desc, "%s%s dy = NaN at b%lld d%lld t%lld", tc_dtname(dt), fixed ? " fixed B/C" : "", (long long)b,
             (long long)d, (long long)t);
    poke(&G.dy, (b * Dm + d) * L + t, NAN);
    for (tt = 0; tt <= t; tt++) mu[(b * Dm + d) * L + tt] = 1; /* du, ddelta: t and before */
    mz[(b * Dm + d) * L + t] = 1;                                 /* dz: only t */
    for (nn = 0; nn < N; nn++) {
        mA[d * N + nn] = 1;
        mh[(b * Dm + d) * N + nn] = 1;
        if (fixed) { mB[d * N + nn] = 1; mC[d * N + nn] = 1; }
        else {
            for (tt = 0; tt <= t; tt++) mB[((b * GG + g) * N + nn) * L + tt] = 1;
            mC[((b * GG + g) * N + nn) * L + t] = 1;
        }
    }
    mD[d] = 1;
    if (CHECK(bwd(&P.p, &G.g, 0) == SELSCAN_OK, "[nan/bwd] status (%s)", desc)) {
        int ok = mask_ok(&G.du, mu, &w[0]) & mask_ok(&G.ddelta, mu, &w[1]) & mask_ok(&G.dz, mz, &w[2]) &
                 mask_ok(&G.dA, mA, &w[3]) & mask_ok(&G.dD, mD, &w[4]) & mask_ok(&G.dbias, mD, &w[5]) &
                 mask_ok(&G.dh0, mh, &w[6]) & mask_ok(&G.dB, mB, &w[7]) & mask_ok(&G.dC, mC, &w[8]);
        CHECK(ok, "[nan/bwd] wrong non-finite pattern: du %lld ddelta %lld dz %lld dA %lld dD %lld dbias %lld dh0 %lld dB %lld dC %lld (%s)",
              (long long)w[0], (long long)w[1], (long long)w[2], (long long)w[3], (long long)w[4], (long long)w[5],
              (long long)w[6], (long long)w[7], (long long)w[8], desc);
    }
    (void)i;
    free(mu); free(mz); free(mA); free(mD); free(mh); free(mB); free(mC);
    tc_grads_free(&G);
    tc_prob_free(&P);
}

/* NaN / +-Inf sprinkled over every input: the calls complete and write every output. */
static void storm(selscan_dtype dt) {
    tc_cfg c;
    tc_prob P;
    tc_grads G;
    tc_tensor *ins[] = {&P.u, &P.delta, &P.z, &P.B, &P.C, &P.A, &P.D, &P.bias, &P.h0, &G.dy, &G.dhlast};
    const double vals[] = {NAN, INFINITY, -INFINITY, 1e30, -1e30};
    int i, k;
    tc_cfg_random(&c, dt, 20000);
    tc_prob_make(&P, &c);
    tc_grads_make(&G, &P, TC_G_ALL, 1);
    for (k = 0; k < 11; k++)
        if (ins[k]->mem)
            for (i = 0; i < 3; i++) poke(ins[k], tc_randint(0, ins[k]->count - 1), vals[tc_randint(0, 4)]);
    tc_poison(&P.y);
    tc_poison(&P.hlast);
    if (CHECK(fwd(&P.p, 0) == SELSCAN_OK, "[storm] forward status")) CHECK(tc_unwritten(&P.y) == 0, "[storm] y unwritten");
    tc_grads_poison(&G);
    if (CHECK(bwd(&P.p, &G.g, 0) == SELSCAN_OK, "[storm] backward status"))
        CHECK(tc_unwritten(&G.du) == 0 && tc_unwritten(&G.dA) == 0 && tc_unwritten(&G.dB) == 0 && tc_unwritten(&G.dh0) == 0,
              "[storm] gradients unwritten");
    tc_grads_free(&G);
    tc_prob_free(&P);
}

/* Twice the same call (different workspace garbage): bitwise the same outputs. */
static void determinism(const tc_cfg *c) {
    tc_prob P;
    tc_grads G;
    tc_tensor *outs[11];
    unsigned char *first[11];
    char desc[300];
    int k, same = 1;
    tc_prob_make(&P, c);
    tc_grads_make(&G, &P, TC_G_ALL, 1);
    tc_prob_describe(&P, desc, sizeof desc);
    outs[0] = &P.y; outs[1] = &P.hlast; outs[2] = &G.du; outs[3] = &G.ddelta; outs[4] = &G.dA; outs[5] = &G.dB;
    outs[6] = &G.dC; outs[7] = &G.dD; outs[8] = &G.dz; outs[9] = &G.dbias; outs[10] = &G.dh0;
    if (!CHECK(fwd(&P.p, 0x00) == SELSCAN_OK && bwd(&P.p, &G.g, 0x00) == SELSCAN_OK, "[determinism] first run (%s)", desc))
        goto out;
    for (k = 0; k < 11; k++) first[k] = tc_snapshot(outs[k]);
    tc_poison(&P.y); tc_poison(&P.hlast); tc_grads_poison(&G);
    if (CHECK(fwd(&P.p, 0xA7) == SELSCAN_OK && bwd(&P.p, &G.g, 0x7F) == SELSCAN_OK, "[determinism] second run (%s)", desc)) {
        for (k = 0; k < 2; k++) same &= tc_same(outs[k], first[k]);
        CHECK(same, "[determinism] forward differs between two identical calls (%s)", desc);
        same = 1;
        for (k = 2; k < 11; k++) same &= tc_same(outs[k], first[k]);
        CHECK(same, "[determinism] backward differs between two identical calls (%s)", desc);
    }
    for (k = 0; k < 11; k++) free(first[k]);
out:
    tc_grads_free(&G);
    tc_prob_free(&P);
}

/* Step twice from the same state: bitwise the same y and state. */
static void step_determinism(void) {
    tc_tensor x, dt, y, A, B, C, st;
    unsigned char *s0, *y1, *st1;
    selscan_step_problem s;
    tc_tensor_make(&x, SELSCAN_BF16, 2, 3, 8, 1, 1, TC_LAYOUT_EXPLICIT, 1);
    tc_tensor_make(&dt, SELSCAN_BF16, 2, 3, 8, 1, 1, TC_LAYOUT_EXPLICIT, 1);
    tc_tensor_make(&y, SELSCAN_BF16, 2, 3, 8, 1, 1, TC_LAYOUT_EXPLICIT, 1);
    tc_tensor_make(&A, SELSCAN_F32, 2, 8, 16, 1, 1, TC_LAYOUT_EXPLICIT, 1);
    tc_tensor_make(&B, SELSCAN_BF16, 3, 3, 1, 16, 1, TC_LAYOUT_EXPLICIT, 1);
    tc_tensor_make(&C, SELSCAN_BF16, 3, 3, 1, 16, 1, TC_LAYOUT_EXPLICIT, 1);
    tc_tensor_make(&st, SELSCAN_F32, 3, 3, 8, 16, 1, TC_LAYOUT_EXPLICIT, 1);
    tc_fill(&x, -1, 1); tc_fill(&dt, -2, 2); tc_fill(&A, -3, -0.1); tc_fill(&B, -1, 1); tc_fill(&C, -1, 1); tc_fill(&st, -1, 1);
    memset(&s, 0, sizeof s);
    s.batch = 3; s.dim = 8; s.dstate = 16; s.dtype = SELSCAN_BF16; s.flags = SELSCAN_DELTA_SOFTPLUS;
    s.state = tc_out(&st); s.u = tc_api(&x); s.delta = tc_api(&dt); s.y = tc_out(&y); s.A = tc_api(&A); s.B = tc_api(&B); s.C = tc_api(&C);
    s0 = tc_snapshot(&st);
    CHECK(selscan_step_cpu(&s) == SELSCAN_OK, "[determinism] step");
    y1 = tc_snapshot(&y);
    st1 = tc_snapshot(&st);
    memcpy(st.mem, s0, (size_t)st.alloc * 4);
    tc_poison(&y);
    CHECK(selscan_step_cpu(&s) == SELSCAN_OK && tc_same(&y, y1) && tc_same(&st, st1), "[determinism] step differs between two identical calls");
    free(s0); free(y1); free(st1);
    tc_tensor_free(&x); tc_tensor_free(&dt); tc_tensor_free(&y); tc_tensor_free(&A); tc_tensor_free(&B); tc_tensor_free(&C);
    tc_tensor_free(&st);
}

int main(void) {
    const selscan_dtype dts[] = {SELSCAN_F32, SELSCAN_F16, SELSCAN_BF16};
    const int quick = tc_quick();
    int i, s;
    tc_cfg c;
    tc_init("test_robust");
    for (i = 0; i < 2; i++)
        for (s = 0; s < NSITES; s++) forward_site(i ? SELSCAN_BF16 : SELSCAN_F32, s, NAN);
    forward_site(SELSCAN_F32, S_U, INFINITY);
    forward_site(SELSCAN_F32, S_U, -INFINITY);
    forward_site(SELSCAN_F16, S_U, INFINITY);
    forward_site(SELSCAN_F32, S_DELTA, INFINITY);
    forward_site(SELSCAN_F32, S_H0, INFINITY);
    forward_site(SELSCAN_BF16, S_Z, INFINITY);
    for (i = 0; i < 6; i++) backward_dy(dts[i % 3], i >= 3);
    for (i = 0; i < (quick ? 3 : 12); i++) storm(dts[i % 3]);
    for (i = 0; i < (quick ? 4 : 16); i++) {
        tc_cfg_random(&c, dts[i % 3], quick ? 20000 : 200000);
        determinism(&c);
    }
    /* a large one: several threads' worth of work if the CPU path is parallel */
    memset(&c, 0, sizeof c);
    c.dt = SELSCAN_BF16; c.batch = 2; c.dim = 64; c.L = quick ? 300 : 1000; c.N = 16; c.G = 1;
    c.flags = SELSCAN_DELTA_SOFTPLUS; c.D = c.z = c.bias = c.h0 = c.hlast = 1; c.layout = TC_LAYOUT_CONTIG;
    determinism(&c);
    step_determinism();
    return tc_finish();
}
