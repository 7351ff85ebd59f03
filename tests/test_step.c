/* test_step: selscan_step_cpu and selscan_step_ref against the fp64 oracle step, with and
   without state_index (cache rows chosen per batch row, n_cache > batch, negative = padding:
   y == 0 and no state touched), every option, dtype and layout. */
#include "../selscan.h" /* the implementation: tests/selscan_impl.c, linked by the Makefile */
#include "common.h"

typedef selscan_status (*step_fn)(const selscan_step_problem *);
static const struct { const char *name; step_fn f; } impls[] = {{"cpu", selscan_step_cpu}, {"ref", selscan_step_ref}};

typedef struct scfg {
    selscan_dtype dt;
    int64_t batch, dim, N, G, ncache;
    unsigned flags;
    int D, z, bias, idx, pad, layout;
} scfg;

static int lay(const scfg *c) { return c->layout >= 0 ? c->layout : (int)tc_randint(0, TC_LAYOUT_PADDED); }

static void step_case(const scfg *c) {
    const int fixB = (c->flags & SELSCAN_FIXED_B) != 0, fixC = (c->flags & SELSCAN_FIXED_C) != 0;
    const int sp = (c->flags & SELSCAN_DELTA_SOFTPLUS) != 0;
    const int64_t ncache = c->idx ? c->ncache : c->batch, dpg = c->dim / c->G;
    tc_tensor x, dt, z, y, A, B, C, D, bias, st;
    int32_t *idx = NULL;
    double *yref, *sref, *h, *Bv, *Cv;
    int64_t b, d, n, i;
    char desc[200];
    size_t k;
    snprintf(desc, sizeof desc, "%s batch %lld dim %lld N %lld G %lld n_cache %lld flags %u D%d z%d bias%d idx%d pad%d layout %d",
             tc_dtname(c->dt), (long long)c->batch, (long long)c->dim, (long long)c->N, (long long)c->G,
             (long long)ncache, c->flags, c->D, c->z, c->bias, c->idx, c->pad, c->layout);
    tc_tensor_make(&x, c->dt, 2, c->batch, c->dim, 1, 1, lay(c), 1);
    tc_tensor_make(&dt, c->dt, 2, c->batch, c->dim, 1, 1, lay(c), 1);
    tc_tensor_make(&z, c->dt, 2, c->batch, c->dim, 1, 1, lay(c), c->z);
    tc_tensor_make(&y, c->dt, 2, c->batch, c->dim, 1, 1, lay(c), 1);
    tc_tensor_make(&A, SELSCAN_F32, 2, c->dim, c->N, 1, 1, lay(c), 1);
    if (fixB) tc_tensor_make(&B, SELSCAN_F32, 2, c->dim, c->N, 1, 1, lay(c), 1);
    else tc_tensor_make(&B, c->dt, 3, c->batch, c->G, c->N, 1, lay(c), 1);
    if (fixC) tc_tensor_make(&C, SELSCAN_F32, 2, c->dim, c->N, 1, 1, lay(c), 1);
    else tc_tensor_make(&C, c->dt, 3, c->batch, c->G, c->N, 1, lay(c), 1);
    tc_tensor_make(&D, SELSCAN_F32, 1, c->dim, 1, 1, 1, lay(c), c->D);
    tc_tensor_make(&bias, SELSCAN_F32, 1, c->dim, 1, 1, 1, lay(c), c->bias);
    tc_tensor_make(&st, SELSCAN_F32, 3, ncache, c->dim, c->N, 1, lay(c), 1);
    tc_fill(&x, -2, 2);
    if (sp) tc_fill(&dt, -4, 3), tc_fill(&bias, -1, 1);
    else tc_fill(&dt, 0.01, 0.6), tc_fill(&bias, 0, 0.1);
    for (i = 0; i < A.count; i++) A.v[i] = (double)(float)-exp(tc_uniform(-3, 1.5));
    tc_store(&A);
    tc_fill(&B, -1, 1); tc_fill(&C, -1, 1); tc_fill(&D, -1, 1); tc_fill(&z, -3, 3); tc_fill(&st, -1, 1);
    if (c->idx) { /* distinct rows from a shuffled [0, n_cache), some rows padding */
        int32_t *perm = (int32_t *)malloc(sizeof(int32_t) * (size_t)ncache);
        for (i = 0; i < ncache; i++) perm[i] = (int32_t)i;
        for (i = ncache - 1; i > 0; i--) { int64_t j = tc_randint(0, i); int32_t t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
        idx = (int32_t *)malloc(sizeof(int32_t) * (size_t)c->batch);
        for (b = 0; b < c->batch; b++) idx[b] = (c->pad && tc_coin(0.3)) ? (tc_coin(0.5) ? -1 : INT32_MIN) : perm[b];
        if (c->pad) idx[0] = -1;
        free(perm);
    }
    /* expected, in double */
    yref = (double *)calloc((size_t)y.count, sizeof(double));
    sref = (double *)malloc(sizeof(double) * (size_t)st.count);
    memcpy(sref, st.v, sizeof(double) * (size_t)st.count);
    Bv = (double *)malloc(sizeof(double) * (size_t)c->N);
    Cv = (double *)malloc(sizeof(double) * (size_t)c->N);
    for (b = 0; b < c->batch; b++) {
        const int64_t row = idx ? idx[b] : b;
        if (row < 0) continue;
        for (d = 0; d < c->dim; d++) {
            const int64_t g = d / dpg;
            h = sref + (row * c->dim + d) * c->N;
            for (n = 0; n < c->N; n++) {
                Bv[n] = fixB ? B.v[d * c->N + n] : B.v[(b * c->G + g) * c->N + n];
                Cv[n] = fixC ? C.v[d * c->N + n] : C.v[(b * c->G + g) * c->N + n];
            }
            yref[b * c->dim + d] = tc_oracle_step(c->N, h, x.v[b * c->dim + d], dt.v[b * c->dim + d], bias.v[d], sp,
                                                  A.v + d * c->N, Bv, Cv, D.v[d], c->z ? &z.v[b * c->dim + d] : NULL);
        }
    }
    for (k = 0; k < sizeof impls / sizeof impls[0]; k++) {
        selscan_step_problem s;
        selscan_status r;
        unsigned char *st0 = tc_snapshot(&st);
        tc_tensor *ins[] = {&x, &dt, &z, &A, &B, &C, &D, &bias};
        unsigned char *snaps[8];
        int same = 1, untouched = 1, padzero = 1;
        double *got = (double *)malloc(sizeof(double) * (size_t)st.count), *want = (double *)malloc(sizeof(double) * (size_t)st.count);
        int64_t ng = 0;
        for (i = 0; i < 8; i++) snaps[i] = tc_snapshot(ins[i]);
        memset(&s, 0, sizeof s);
        s.batch = c->batch; s.dim = c->dim; s.dstate = c->N; s.n_groups = c->G == 1 && tc_coin(0.5) ? 0 : c->G;
        s.n_cache = c->idx ? ncache : (tc_coin(0.5) ? 0 : c->batch);
        s.dtype = c->dt; s.flags = c->flags; s.state_index = idx;
        s.state = tc_out(&st); s.u = tc_api(&x); s.delta = tc_api(&dt); s.z = tc_api(&z); s.y = tc_out(&y);
        s.A = tc_api(&A); s.B = tc_api(&B); s.C = tc_api(&C); s.D = tc_api(&D); s.delta_bias = tc_api(&bias);
        tc_poison(&y);
        r = impls[k].f(&s);
        if (CHECK(r == SELSCAN_OK, "[step/%s] status %s (%s)", impls[k].name, selscan_status_string(r), desc)) {
            double e;
            for (i = 0; i < 8; i++) same &= tc_same(ins[i], snaps[i]);
            CHECK(same, "[step/%s] an input changed (%s)", impls[k].name, desc);
            CHECK(tc_unwritten(&y) == 0 && tc_gaps_dirty(&y) == 0 && tc_gaps_dirty(&st) == 0,
                  "[step/%s] y unwritten %lld, writes outside y %lld / state %lld (%s)", impls[k].name,
                  (long long)tc_unwritten(&y), (long long)tc_gaps_dirty(&y), (long long)tc_gaps_dirty(&st), desc);
            e = tc_rel_err(&y, yref);
            CHECK(e <= tc_tol_fwd(c->dt), "[step/%s] y rel err %.3g (%s)", impls[k].name, e, desc);
            /* state rows: used ones against the oracle, the others bitwise unchanged */
            for (i = 0; i < ncache; i++) {
                int used = 0;
                int64_t m, base = i * c->dim * c->N;
                for (b = 0; b < c->batch; b++) used |= (idx ? idx[b] : b) == i;
                for (m = 0; m < c->dim * c->N; m++) {
                    if (used) { got[ng] = tc_get(&st, base + m); want[ng] = sref[base + m]; ng++; }
                    else untouched &= tc_get(&st, base + m) == st.v[base + m];
                }
            }
            e = tc_rel_err_arr(got, want, ng);
            CHECK(e <= TOL_STATE, "[step/%s] state rel err %.3g (%s)", impls[k].name, e, desc);
            CHECK(untouched, "[step/%s] a cache row no batch row uses changed (%s)", impls[k].name, desc);
            for (b = 0; b < c->batch; b++)
                if (idx && idx[b] < 0)
                    for (d = 0; d < c->dim; d++) padzero &= tc_get(&y, b * c->dim + d) == 0.0;
            CHECK(padzero, "[step/%s] a padding row's y is not 0 (%s)", impls[k].name, desc);
        }
        memcpy(st.mem, st0, (size_t)st.alloc * 4); /* restore the cache for the next implementation */
        free(st0);
        for (i = 0; i < 8; i++) free(snaps[i]);
        free(got);
        free(want);
    }
    free(yref); free(sref); free(Bv); free(Cv); free(idx);
    tc_tensor_free(&x); tc_tensor_free(&dt); tc_tensor_free(&z); tc_tensor_free(&y); tc_tensor_free(&A);
    tc_tensor_free(&B); tc_tensor_free(&C); tc_tensor_free(&D); tc_tensor_free(&bias); tc_tensor_free(&st);
}

int main(void) {
    const selscan_dtype dts[] = {SELSCAN_F32, SELSCAN_F16, SELSCAN_BF16};
    const int quick = tc_quick();
    scfg c;
    int i;
    tc_init("test_step");
    for (i = 0; i < (quick ? 12 : 150); i++) {
        static const int64_t Ns[] = {1, 3, 16, 64, 256};
        static const int64_t Gs[] = {1, 2, 4};
        memset(&c, 0, sizeof c);
        c.dt = dts[i % 3];
        c.G = Gs[tc_randint(0, 2)];
        c.dim = c.G * tc_randint(1, 4);
        c.N = Ns[tc_randint(0, 4)];
        c.batch = tc_randint(1, 6);
        c.flags = (tc_coin(0.7) ? SELSCAN_DELTA_SOFTPLUS : 0u) | (tc_coin(0.3) ? SELSCAN_FIXED_B : 0u) |
                  (tc_coin(0.3) ? SELSCAN_FIXED_C : 0u);
        c.D = tc_coin(0.6); c.z = tc_coin(0.6); c.bias = tc_coin(0.6);
        c.idx = (i / 3) % 3 != 0;              /* without index, with index, with index and padding */
        c.pad = (i / 3) % 3 == 2;
        c.ncache = c.batch + tc_randint(0, 5); /* n_cache > batch most of the time */
        c.layout = tc_coin(0.3) ? (int)tc_randint(0, TC_LAYOUT_PADDED) : -1;
        step_case(&c);
    }
    /* dim beyond 65535, one row padding */
    memset(&c, 0, sizeof c);
    c.dt = SELSCAN_BF16; c.G = 1; c.dim = 70000; c.N = 2; c.batch = 2; c.flags = SELSCAN_DELTA_SOFTPLUS;
    c.D = c.z = c.bias = 1; c.idx = 1; c.pad = 1; c.ncache = 3; c.layout = -1;
    step_case(&c);
    return tc_finish();
}
