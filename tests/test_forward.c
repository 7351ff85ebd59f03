/* test_forward: the forward pass (selscan_forward_cpu and selscan_forward_ref) against the fp64
   oracle of tests/common.h on random problems over every option, dtype, layout and size. */
#include "../selscan.h" /* the implementation: tests/selscan_impl.c, linked by the Makefile */
#include "common.h"

typedef selscan_status (*fwd_fn)(const selscan_problem *, void *, size_t);
static const struct { const char *name; fwd_fn f; } impls[] = {{"cpu", selscan_forward_cpu}, {"ref", selscan_forward_ref}};

/* Runs P through both implementations and checks them against the oracle. */
static void run_case(tc_prob *P, const char *tag) {
    char desc[256];
    const int64_t ny = P->c.batch * P->c.dim * P->c.L, nh = P->rows * P->c.dim * P->c.N;
    double *yref = (double *)malloc(sizeof(double) * (size_t)ny), *href = (double *)malloc(sizeof(double) * (size_t)nh);
    tc_tensor *ins[] = {&P->u, &P->delta, &P->A, &P->B, &P->C, &P->D, &P->z, &P->bias, &P->h0};
    unsigned char *snaps[9];
    size_t k, i;
    tc_prob_describe(P, desc, sizeof desc);
    tc_oracle_forward(P, yref, href);
    for (i = 0; i < 9; i++) snaps[i] = tc_snapshot(ins[i]);
    for (k = 0; k < sizeof impls / sizeof impls[0]; k++) {
        size_t bytes = 0;
        void *ws;
        selscan_status st;
        double ey, eh = 0;
        int same = 1;
        tc_poison(&P->y);
        tc_poison(&P->hlast);
        st = selscan_workspace_size(&P->p, NULL, &bytes);
        CHECK(st == SELSCAN_OK, "[%s] workspace_size: %s (%s)", tag, selscan_status_string(st), desc);
        ws = tc_ws(bytes);
        st = impls[k].f(&P->p, bytes ? ws : NULL, bytes);
        tc_ws_free(ws);
        if (!CHECK(st == SELSCAN_OK, "[%s/%s] status %s (%s)", tag, impls[k].name, selscan_status_string(st), desc))
            continue;
        CHECK(tc_unwritten(&P->y) == 0 && tc_unwritten(&P->hlast) == 0 && tc_gaps_dirty(&P->y) == 0 &&
                  tc_gaps_dirty(&P->hlast) == 0,
              "[%s/%s] y unwritten %lld, h_last unwritten %lld, bytes written outside y %lld, h_last %lld (%s)", tag,
              impls[k].name, (long long)tc_unwritten(&P->y), (long long)tc_unwritten(&P->hlast),
              (long long)tc_gaps_dirty(&P->y), (long long)tc_gaps_dirty(&P->hlast), desc);
        for (i = 0; i < 9; i++) same &= tc_same(ins[i], snaps[i]);
        CHECK(same, "[%s/%s] an input changed (%s)", tag, impls[k].name, desc);
        ey = tc_rel_err(&P->y, yref);
        CHECK(ey <= tc_tol_fwd(P->c.dt), "[%s/%s] y rel err %.3g > %.3g (%s)", tag, impls[k].name, ey,
              tc_tol_fwd(P->c.dt), desc);
        if (P->hlast.mem) {
            eh = tc_rel_err(&P->hlast, href);
            CHECK(eh <= TOL_STATE, "[%s/%s] h_last rel err %.3g > %.3g (%s)", tag, impls[k].name, eh, TOL_STATE, desc);
        }
    }
    for (i = 0; i < 9; i++) free(snaps[i]);
    free(yref);
    free(href);
}

static void base_cfg(tc_cfg *c, selscan_dtype dt) {
    memset(c, 0, sizeof *c);
    c->dt = dt; c->batch = 2; c->dim = 4; c->L = 37; c->N = 5; c->G = 2;
    c->flags = SELSCAN_DELTA_SOFTPLUS;
    c->D = c->z = c->bias = c->h0 = c->hlast = 1;
    c->layout = -1;
    c->big_delta = 1;
}

static void one(const tc_cfg *c, const char *tag) {
    tc_prob P;
    tc_prob_make(&P, c);
    run_case(&P, tag);
    tc_prob_free(&P);
}

/* tc_tol_lowp's bound is not vacuous: an f16 / bf16 forward's y passes tc_tol_fwd (k = 1), and the
   same y with an error of 4x that bound added (each element moved by 4 tol rms(y_ref) at a random
   sign, rounded back to dt: an error of 4 tol in tc_rel_err, give or take u) fails it. */
static void tolerance_self_check(void) {
    int di;
    for (di = 0; di < 2; di++) {
        const selscan_dtype dt = di ? SELSCAN_BF16 : SELSCAN_F16;
        const double tol = tc_tol_fwd(dt);
        tc_cfg c;
        tc_prob P;
        double *yref, *href, rms = 0, e, e4;
        size_t bytes = 0;
        void *ws;
        int64_t i, ny;
        base_cfg(&c, dt);
        tc_prob_make(&P, &c);
        ny = P.y.count;
        yref = (double *)malloc(sizeof(double) * (size_t)ny);
        href = (double *)malloc(sizeof(double) * (size_t)(P.rows * c.dim * c.N));
        tc_oracle_forward(&P, yref, href);
        selscan_workspace_size(&P.p, NULL, &bytes);
        ws = tc_ws(bytes);
        CHECK(selscan_forward_cpu(&P.p, bytes ? ws : NULL, bytes) == SELSCAN_OK, "[self-check %s] forward", tc_dtname(dt));
        tc_ws_free(ws);
        e = tc_rel_err(&P.y, yref);
        CHECK(e <= tol, "[self-check %s] y rel err %.3g > %.3g", tc_dtname(dt), e, tol);
        for (i = 0; i < ny; i++) rms += yref[i] * yref[i];
        rms = sqrt(rms / (double)ny);
        for (i = 0; i < ny; i++) P.y.v[i] = tc_round(dt, tc_get(&P.y, i) + (tc_coin(0.5) ? 4 : -4) * tol * rms);
        tc_store(&P.y);
        e4 = tc_rel_err(&P.y, yref);
        CHECK(e4 > tol, "[self-check %s] y with an error of 4x the bound passes: rel err %.3g <= %.3g", tc_dtname(dt), e4, tol);
        free(yref);
        free(href);
        tc_prob_free(&P);
    }
}

int main(void) {
    const selscan_dtype dts[] = {SELSCAN_F32, SELSCAN_F16, SELSCAN_BF16};
    const int quick = tc_quick();
    int di, i;
    tc_cfg c;
    tc_init("test_forward");

    /* every layout for every tensor at once */
    for (di = 0; di < 3; di++)
        for (i = 0; i < TC_NLAYOUTS; i++) {
            base_cfg(&c, dts[di]);
            c.layout = i;
            one(&c, "layout");
        }
    /* state sizes 1 .. 256 */
    {
        static const int64_t Ns[] = {1, 2, 3, 16, 17, 64, 255, 256};
        for (i = 0; i < (int)(sizeof Ns / sizeof Ns[0]); i++) {
            base_cfg(&c, dts[i % 3]);
            c.N = Ns[i]; c.L = Ns[i] >= 64 ? 23 : 41;
            one(&c, "N");
        }
    }
    /* lengths: 1, odd, chunk edges, a few thousand */
    {
        static const int64_t Ls[] = {1, 2, 63, 64, 65, 129, 1001, 3000};
        for (di = 0; di < 3; di++)
            for (i = 0; i < (int)(sizeof Ls / sizeof Ls[0]); i++) {
                if (quick && Ls[i] > 1001) continue;
                base_cfg(&c, dts[di]);
                c.L = Ls[i];
                if (c.L > 500) { c.batch = 1; c.dim = 2; c.G = 1; c.N = 4; }
                one(&c, "L");
            }
    }
    /* groups and fixed B / C */
    for (di = 0; di < 3; di++)
        for (i = 0; i < 12; i++) {
            static const int64_t Gs[] = {1, 2, 4};
            base_cfg(&c, dts[di]);
            c.dim = 8; c.G = Gs[i % 3];
            c.flags = SELSCAN_DELTA_SOFTPLUS | ((i / 3) & 1 ? SELSCAN_FIXED_B : 0u) | ((i / 6) & 1 ? SELSCAN_FIXED_C : 0u);
            one(&c, "groups/fixed");
        }
    /* each optional operand off, alone */
    for (i = 0; i < 7; i++) {
        base_cfg(&c, dts[i % 3]);
        if (i == 0) c.D = 0;
        if (i == 1) c.z = 0;
        if (i == 2) c.bias = 0;
        if (i == 3) c.h0 = 0;
        if (i == 4) c.hlast = 0;
        if (i == 5) c.flags = 0;
        if (i == 6) { c.D = c.z = c.bias = c.h0 = c.hlast = 0; c.flags = 0; }
        one(&c, "optional");
    }
    /* softplus threshold: every delta + bias above 20 */
    for (di = 0; di < 3; di++) {
        tc_prob P;
        int64_t k;
        base_cfg(&c, dts[di]);
        tc_prob_make(&P, &c);
        for (k = 0; k < P.delta.count; k++) P.delta.v[k] = tc_round(c.dt, tc_uniform(21.5, 30));
        tc_store(&P.delta);
        run_case(&P, "softplus>20");
        tc_prob_free(&P);
    }
    /* packed sequences: one sequence, empty first / middle / last, many */
    for (i = 0; i < 8; i++) {
        tc_prob P;
        base_cfg(&c, dts[i % 3]);
        c.batch = 1; c.L = 50; c.nseq = i < 4 ? 3 : (i == 4 ? 1 : 7);
        tc_prob_make(&P, &c);
        if (i < 3) { /* empty sequence at position i */
            int64_t cu[3][4] = {{0, 0, 20, 50}, {0, 20, 20, 50}, {0, 20, 50, 50}};
            memcpy(P.cu, cu[i], sizeof cu[i]);
        }
        run_case(&P, "packed");
        tc_prob_free(&P);
    }
    /* dim beyond 65535 */
    base_cfg(&c, SELSCAN_F32);
    c.batch = 1; c.dim = 70000; c.G = 1; c.L = 2; c.N = 1;
    one(&c, "dim>65535");
    /* random matrix over every option */
    for (di = 0; di < 3; di++)
        for (i = 0; i < (quick ? 6 : 100); i++) {
            tc_cfg_random(&c, dts[di], quick ? 8000 : 100000);
            c.bcast = tc_coin(0.3);
            one(&c, "random");
        }
    tolerance_self_check();
    return tc_finish();
}
