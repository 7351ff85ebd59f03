/* test_step: selscan_step_cpu and selscan_step_ref against the fp64 oracle step, with and
   without state_index (cache rows chosen per batch row, n_cache > batch, negative = padding:
   y == 0 and no state touched), every option, dtype and layout. SELSCAN_STEP_D_T,
   SELSCAN_STEP_DELTA_BIAS_T (D, delta_bias in T; each alone or both: SELSCAN_STEP_PARAMS_T) and
   SELSCAN_STEP_STATE_T (the state in T): against the oracle, and against the
   same call with those values in f32 without the flags: y bitwise, the state bitwise (or, in T,
   the f32 call's state rounded to T); their validation (spans and alignment in T, refused by the
   scan). SELSCAN_STEP_A_LOG (A holds A_log): against the oracle with A = -exp(A_log) in double, and
   against the same call with A = -expf(A_log) without the flag: the reference bitwise, the fast
   path (its vector exp) within a few ulp. */
#include "../selscan.h" /* the implementation: tests/selscan_impl.c, linked by the Makefile */
#include "common.h"

typedef selscan_status (*step_fn)(const selscan_step_problem *);
static const struct { const char *name; step_fn f; } impls[] = {{"cpu", selscan_step_cpu}, {"ref", selscan_step_ref}};

typedef struct scfg {
    selscan_dtype dt;
    int64_t batch, dim, N, G, ncache;
    unsigned flags;
    int D, z, bias, idx, pad, layout;
    int prmT; /* bit 0: SELSCAN_STEP_D_T (D in T), bit 1: SELSCAN_STEP_DELTA_BIAS_T (delta_bias in T) */
    int stT;  /* SELSCAN_STEP_STATE_T: the state in T */
    int alog; /* SELSCAN_STEP_A_LOG: A holds A_log */
} scfg;

static int lay(const scfg *c) { return c->layout >= 0 ? c->layout : (int)tc_randint(0, TC_LAYOUT_PADDED); }

static void step_case(const scfg *c) {
    const int fixB = (c->flags & SELSCAN_FIXED_B) != 0, fixC = (c->flags & SELSCAN_FIXED_C) != 0;
    const int sp = (c->flags & SELSCAN_DELTA_SOFTPLUS) != 0;
    const int64_t ncache = c->idx ? c->ncache : c->batch, dpg = c->dim / c->G;
    const selscan_dtype Ddt = c->prmT & 1 ? c->dt : SELSCAN_F32, bdt = c->prmT & 2 ? c->dt : SELSCAN_F32; /* D's, delta_bias' */
    const selscan_dtype sdt = c->stT ? c->dt : SELSCAN_F32;                                                 /* the state's */
    const unsigned tflags = (c->prmT & 1 ? SELSCAN_STEP_D_T : 0u) | (c->prmT & 2 ? SELSCAN_STEP_DELTA_BIAS_T : 0u) |
                            (c->stT ? SELSCAN_STEP_STATE_T : 0u) | (c->alog ? SELSCAN_STEP_A_LOG : 0u);
    tc_tensor x, dt, z, y, A, B, C, D, bias, st, D32, bias32, st32, Ae;
    int32_t *idx = NULL;
    double *yref, *sref, *h, *Bv, *Cv, *Aor;
    int64_t b, d, n, i;
    char desc[200];
    size_t k;
    snprintf(desc, sizeof desc, "%s batch %lld dim %lld N %lld G %lld n_cache %lld flags %u D%d z%d bias%d idx%d pad%d layout %d%s%s%s",
             tc_dtname(c->dt), (long long)c->batch, (long long)c->dim, (long long)c->N, (long long)c->G,
             (long long)ncache, c->flags, c->D, c->z, c->bias, c->idx, c->pad, c->layout,
             c->prmT == 3 ? " params T" : c->prmT == 1 ? " D T" : c->prmT == 2 ? " delta_bias T" : "",
             c->stT ? " state T" : "", c->alog ? " A_log" : "");
    tc_tensor_make(&x, c->dt, 2, c->batch, c->dim, 1, 1, lay(c), 1);
    tc_tensor_make(&dt, c->dt, 2, c->batch, c->dim, 1, 1, lay(c), 1);
    tc_tensor_make(&z, c->dt, 2, c->batch, c->dim, 1, 1, lay(c), c->z);
    tc_tensor_make(&y, c->dt, 2, c->batch, c->dim, 1, 1, lay(c), 1);
    tc_tensor_make(&A, SELSCAN_F32, 2, c->dim, c->N, 1, 1, lay(c), 1);
    if (fixB) tc_tensor_make(&B, SELSCAN_F32, 2, c->dim, c->N, 1, 1, lay(c), 1);
    else tc_tensor_make(&B, c->dt, 3, c->batch, c->G, c->N, 1, lay(c), 1);
    if (fixC) tc_tensor_make(&C, SELSCAN_F32, 2, c->dim, c->N, 1, 1, lay(c), 1);
    else tc_tensor_make(&C, c->dt, 3, c->batch, c->G, c->N, 1, lay(c), 1);
    tc_tensor_make(&D, Ddt, 1, c->dim, 1, 1, 1, lay(c), c->D);
    tc_tensor_make(&bias, bdt, 1, c->dim, 1, 1, 1, lay(c), c->bias);
    tc_tensor_make(&st, sdt, 3, ncache, c->dim, c->N, 1, lay(c), 1);
    tc_fill(&x, -2, 2);
    if (sp) tc_fill(&dt, -4, 3), tc_fill(&bias, -1, 1);
    else tc_fill(&dt, 0.01, 0.6), tc_fill(&bias, 0, 0.1);
    /* A, or A_log (Mamba's log(1 .. 16) and beyond either side) */
    for (i = 0; i < A.count; i++) A.v[i] = c->alog ? (double)(float)tc_uniform(-2, 3) : (double)(float)-exp(tc_uniform(-3, 1.5));
    tc_store(&A);
    /* the oracle's A: -exp(A_log) in double with the flag; A's f32 values without it */
    Aor = (double *)malloc(sizeof(double) * (size_t)A.count);
    for (i = 0; i < A.count; i++) Aor[i] = c->alog ? -exp(A.v[i]) : A.v[i];
    tc_fill(&B, -1, 1); tc_fill(&C, -1, 1); tc_fill(&D, -1, 1); tc_fill(&z, -3, 3); tc_fill(&st, -1, 1);
    /* the same values in f32 (exact: T is a subset), for the call without the flags */
    tc_tensor_like(&D32, &D, SELSCAN_F32);
    tc_tensor_like(&bias32, &bias, SELSCAN_F32);
    tc_tensor_like(&st32, &st, SELSCAN_F32);
    /* A = -expf(A_log) in f32 (what the reference computes), for the call without SELSCAN_STEP_A_LOG */
    tc_tensor_like(&Ae, &A, SELSCAN_F32);
    if (c->alog) {
        for (i = 0; i < A.count; i++) Ae.v[i] = (double)-expf((float)A.v[i]);
        tc_store(&Ae);
    }
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
                                                  Aor + d * c->N, Bv, Cv, D.v[d], c->z ? &z.v[b * c->dim + d] : NULL);
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
        s.dtype = c->dt; s.flags = c->flags | tflags; s.state_index = idx;
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
            CHECK(e <= (c->stT ? tc_tol_lowp(c->dt, TOL_STATE, 1) : TOL_STATE), "[step/%s] state rel err %.3g (%s)", impls[k].name,
                  e, desc); /* a dt state: rounded once */
            CHECK(untouched, "[step/%s] a cache row no batch row uses changed (%s)", impls[k].name, desc);
            for (b = 0; b < c->batch; b++)
                if (idx && idx[b] < 0)
                    for (d = 0; d < c->dim; d++) padzero &= tc_get(&y, b * c->dim + d) == 0.0;
            CHECK(padzero, "[step/%s] a padding row's y is not 0 (%s)", impls[k].name, desc);
            if (tflags) { /* the call with f32 D / delta_bias / state of the same values, A = -expf(A_log), without the flags */
                unsigned char *yT = tc_snapshot(&y), *s32 = tc_snapshot(&st32);
                int sstate = 1, ysame;
                /* the fast path's A from A_log by its vector exp: within a few ulp of expf's, so y and
                   the state within a few ulp of the f32 call's (T: one rounding of T apart) */
                const int near = c->alog && impls[k].f == selscan_step_cpu;
                double *yw = (double *)malloc(sizeof(double) * (size_t)y.count); /* the flags' y */
                for (i = 0; i < y.count; i++) yw[i] = tc_get(&y, i);
                tc_poison(&y);
                s.flags = c->flags;
                s.D = tc_api(&D32);
                s.delta_bias = tc_api(&bias32);
                s.state = tc_out(&st32);
                if (c->alog) s.A = tc_api(&Ae);
                r = impls[k].f(&s);
                /* the state: bitwise in f32; in T, the f32 call's state rounded to T (to nearest even) */
                if (near) {
                    double *sw = (double *)malloc(sizeof(double) * (size_t)st.count); /* the f32 call's state */
                    for (i = 0; i < st.count; i++) sw[i] = tc_get(&st32, i);
                    ysame = tc_rel_err(&y, yw) <= tc_tol_lowp(c->dt, 1e-5, 2);     /* two y, each rounded */
                    sstate = tc_rel_err(&st, sw) <= tc_tol_lowp(c->stT ? c->dt : SELSCAN_F32, 1e-5, 1); /* vs f32 */
                    free(sw);
                } else {
                    ysame = tc_same(&y, yT);
                    for (i = 0; i < st.count; i++)
                        sstate &= c->stT ? tc_get(&st, i) == tc_round(c->dt, tc_get(&st32, i)) : tc_get(&st, i) == tc_get(&st32, i);
                }
                CHECK(r == SELSCAN_OK && ysame && sstate,
                      "[step/%s] T parameters / state differ from the same values in f32: status %s, y %s, state %s (%s)",
                      impls[k].name, selscan_status_string(r), ysame ? "same" : "DIFFERS", sstate ? "same" : "DIFFERS",
                      desc);
                memcpy(st32.mem, s32, (size_t)st32.alloc * 4);
                free(yT);
                free(yw);
                free(s32);
            }
        }
        memcpy(st.mem, st0, (size_t)st.alloc * tc_esize(st.dt)); /* restore the cache for the next implementation */
        free(st0);
        for (i = 0; i < 8; i++) free(snaps[i]);
        free(got);
        free(want);
    }
    free(yref); free(sref); free(Bv); free(Cv); free(idx); free(Aor);
    tc_tensor_free(&x); tc_tensor_free(&dt); tc_tensor_free(&z); tc_tensor_free(&y); tc_tensor_free(&A);
    tc_tensor_free(&B); tc_tensor_free(&C); tc_tensor_free(&D); tc_tensor_free(&bias); tc_tensor_free(&st);
    tc_tensor_free(&D32); tc_tensor_free(&bias32); tc_tensor_free(&st32); tc_tensor_free(&Ae);
}

/* SELSCAN_STEP_PARAMS_T's and SELSCAN_STEP_STATE_T's validation: D and delta_bias, the state, are
   T tensors (their spans, alignment and overlaps in T's elements); the scan's forward and backward
   refuse the flags. Every failing call
   names the operand and rule and writes nothing. */
static void expect_step(const char *what, const selscan_step_problem *s0, selscan_status want, const char *op, const char *rule,
                        const tc_tensor *st, const tc_tensor *y) {
    static const struct { const char *name; step_fn f; } fns[] = {
        {"cpu", selscan_step_cpu}, {"ref", selscan_step_ref}, {"validate", selscan_validate_step}};
    size_t k;
    for (k = 0; k < sizeof fns / sizeof fns[0]; k++) {
        selscan_step_problem s = *s0;
        selscan_diag dg = {NULL, NULL, SELSCAN_RULE_NONE};
        unsigned char *ss = tc_snapshot(st), *sy = tc_snapshot(y);
        selscan_status r;
        s.diag = &dg;
        r = fns[k].f(&s);
        CHECK(r == want, "[params T/%s] %s: status %s, want %s", fns[k].name, what, selscan_status_name(r), selscan_status_name(want));
        if (want != SELSCAN_OK) {
            CHECK(dg.operand && dg.rule && strcmp(dg.operand, op) == 0 && strcmp(dg.rule, rule) == 0,
                  "[params T/%s] %s: diag {%s, %s}, want {%s, %s}", fns[k].name, what, dg.operand ? dg.operand : "-",
                  dg.rule ? dg.rule : "-", op, rule);
            CHECK(tc_same(st, ss) && tc_same(y, sy), "[params T/%s] %s: an output was written", fns[k].name, what);
        }
        free(ss);
        free(sy);
    }
}

static void params_t_rules(void) {
    const int64_t batch = 2, dim = 8, N = 4;
    tc_tensor x, dt, A, B, C, D, bias, st, y;
    unsigned char *buf = (unsigned char *)malloc(4096);
    selscan_step_problem s0, s;
    tc_tensor_make(&x, SELSCAN_BF16, 2, batch, dim, 1, 1, TC_LAYOUT_CONTIG, 1);
    tc_tensor_make(&dt, SELSCAN_BF16, 2, batch, dim, 1, 1, TC_LAYOUT_CONTIG, 1);
    tc_tensor_make(&A, SELSCAN_F32, 2, dim, N, 1, 1, TC_LAYOUT_CONTIG, 1);
    tc_tensor_make(&B, SELSCAN_BF16, 3, batch, 1, N, 1, TC_LAYOUT_CONTIG, 1);
    tc_tensor_make(&C, SELSCAN_BF16, 3, batch, 1, N, 1, TC_LAYOUT_CONTIG, 1);
    tc_tensor_make(&D, SELSCAN_BF16, 1, dim, 1, 1, 1, TC_LAYOUT_CONTIG, 1);
    tc_tensor_make(&bias, SELSCAN_BF16, 1, dim, 1, 1, 1, TC_LAYOUT_CONTIG, 1);
    tc_tensor_make(&st, SELSCAN_F32, 3, batch, dim, N, 1, TC_LAYOUT_CONTIG, 1);
    tc_tensor_make(&y, SELSCAN_BF16, 2, batch, dim, 1, 1, TC_LAYOUT_CONTIG, 1);
    tc_fill(&x, -1, 1); tc_fill(&dt, 0, 1); tc_fill(&A, -2, -0.5); tc_fill(&B, -1, 1); tc_fill(&C, -1, 1);
    tc_fill(&D, -1, 1); tc_fill(&bias, -1, 1); tc_fill(&st, -1, 1);
    memset(&s0, 0, sizeof s0);
    s0.batch = batch; s0.dim = dim; s0.dstate = N; s0.dtype = SELSCAN_BF16;
    s0.flags = SELSCAN_DELTA_SOFTPLUS | SELSCAN_STEP_PARAMS_T;
    s0.state = tc_out(&st); s0.u = tc_api(&x); s0.delta = tc_api(&dt); s0.A = tc_api(&A); s0.B = tc_api(&B);
    s0.C = tc_api(&C); s0.D = tc_api(&D); s0.delta_bias = tc_api(&bias); s0.y = tc_out(&y);
    expect_step("valid", &s0, SELSCAN_OK, "", "", &st, &y);
    s = s0; s.D.data = (const char *)D.data + 1;
    expect_step("D misaligned for T", &s, SELSCAN_ERR_STRIDE, "D", "misaligned", &st, &y);
    s = s0; s.delta_bias.stride[0] = -1;
    expect_step("delta_bias stride negative", &s, SELSCAN_ERR_STRIDE, "delta_bias", "negative stride", &st, &y);
    s = s0; s.delta_bias.stride[0] = INT64_MAX / 4;
    expect_step("delta_bias span overflows", &s, SELSCAN_ERR_STRIDE, "delta_bias", "span overflows", &st, &y);
    /* D's span is dim elements of T: y just past it is disjoint with the flag, overlaps D read as f32 */
    memset(buf, 0, 4096);
    memcpy(buf, D.data, (size_t)dim * 2);
    s = s0; s.D.data = buf; s.y.data = buf + dim * 2;
    expect_step("y right after D's T span", &s, SELSCAN_OK, "", "", &st, &y);
    s.flags &= ~SELSCAN_STEP_PARAMS_T;
    memset(buf + dim * 2, 0xFF, (size_t)(batch * dim * 2));
    {
        tc_tensor yb = y; /* the view of buf that y is, for the untouched check */
        yb.mem = buf + dim * 2; yb.data = yb.mem; yb.alloc = batch * dim;
        expect_step("y inside D's f32 span (no flag)", &s, SELSCAN_ERR_ALIAS, "y", "overlaps D", &st, &yb);
        s.flags |= SELSCAN_STEP_PARAMS_T;
        s.y.data = buf + dim * 2 - 2; /* y's first element is D's last */
        expect_step("y over D's last T element", &s, SELSCAN_ERR_ALIAS, "y", "overlaps D", &st, &yb);
    }
    /* SELSCAN_STEP_STATE_T: the state's span and alignment in T (bf16) */
    {
        unsigned char *sb = (unsigned char *)calloc(1, 4096);
        const size_t sbytes = (size_t)(batch * dim * N * 2);
        tc_tensor sv = st, yv = y; /* views of sb, for the untouched checks */
        memset(sb, 0xFF, 4096);
        sv.mem = sb; sv.data = sb; sv.alloc = batch * dim * N;
        yv.mem = sb + sbytes; yv.data = yv.mem; yv.alloc = batch * dim;
        s = s0;
        s.flags |= SELSCAN_STEP_STATE_T;
        s.state.data = sb; s.y.data = sb + sbytes; /* y right after the state's T span */
        expect_step("state T, y right after it", &s, SELSCAN_OK, "", "", &sv, &yv);
        s.flags &= ~SELSCAN_STEP_STATE_T; /* the state read as f32: twice the span, over y */
        expect_step("y inside the state's f32 span (no flag)", &s, SELSCAN_ERR_ALIAS, "state", "overlaps y", &sv, &yv);
        s = s0;
        s.flags |= SELSCAN_STEP_STATE_T;
        s.state.data = sb + 1;
        expect_step("state misaligned for T", &s, SELSCAN_ERR_STRIDE, "state", "misaligned", &sv, &yv);
        s.state.data = sb; s.state.stride[0] = dim * N; s.state.stride[1] = N; s.state.stride[2] = 0;
        expect_step("state T elements overlap", &s, SELSCAN_ERR_STRIDE, "state", "elements overlap", &sv, &yv);
        free(sb);
    }
    /* the scan refuses the step's flags */
    {
        selscan_problem p;
        selscan_grads g;
        selscan_diag dg = {NULL, NULL, SELSCAN_RULE_NONE};
        memset(&p, 0, sizeof p);
        memset(&g, 0, sizeof g);
        p.batch = batch; p.dim = dim; p.seqlen = 1; p.dstate = N; p.dtype = SELSCAN_BF16;
        p.diag = &dg;
        p.u = s0.u; p.delta = s0.delta; p.A = s0.A; p.y = s0.y;
        p.B = s0.B; p.C = s0.C; /* (batch, 1, N) read as (batch, G, N, L = 1): strides all 0, contiguous */
        p.D = s0.D; p.delta_bias = s0.delta_bias;
        g.dy = s0.u;
        {
            static const unsigned step_flags[] = {SELSCAN_STEP_PARAMS_T, SELSCAN_STEP_STATE_T, SELSCAN_STEP_A_LOG};
            static const char *const names[] = {"SELSCAN_STEP_PARAMS_T", "SELSCAN_STEP_STATE_T", "SELSCAN_STEP_A_LOG"};
            int k;
            for (k = 0; k < 3; k++) {
                p.flags = step_flags[k];
                dg.operand = NULL;
                CHECK(selscan_validate(&p) == SELSCAN_ERR_UNSUPPORTED && dg.operand && strcmp(dg.operand, "flags") == 0 &&
                          dg.code == SELSCAN_RULE_UNKNOWN_FLAG,
                      "the scan's forward refuses %s", names[k]);
                dg.operand = NULL;
                CHECK(selscan_validate_grads(&p, &g) == SELSCAN_ERR_UNSUPPORTED && dg.operand &&
                          strcmp(dg.operand, "flags") == 0 && dg.code == SELSCAN_RULE_UNKNOWN_FLAG,
                      "the scan's backward refuses %s", names[k]);
            }
        }
    }
    free(buf);
    tc_tensor_free(&x); tc_tensor_free(&dt); tc_tensor_free(&A); tc_tensor_free(&B); tc_tensor_free(&C);
    tc_tensor_free(&D); tc_tensor_free(&bias); tc_tensor_free(&st); tc_tensor_free(&y);
}

/* An infinite u (then dt) at channel 0, every other operand positive: y is +inf there on the fast path as on the
   reference, at dstates with a vector tail (the pad lanes' 0 times the infinity was NaN: 1 / 5 / 15 / 17 / 33) and
   without (16), D absent and present; every element of y and the state in the reference's class (+inf / -inf /
   NaN / finite). Contiguous f32 rows: zero strides. */
static void inf_cases(void) {
    static const int64_t Ns[] = {1, 5, 15, 16, 17, 33};
    enum { DIM = 3, NMAX = 33 };
    int k, which, withD;
    for (k = 0; k < 6; k++)
        for (which = 0; which < 2; which++)
            for (withD = 0; withD < 2; withD++) {
                const int64_t N = Ns[k];
                float st[2][DIM * NMAX], x[DIM], dt[DIM], A[DIM * NMAX], B[NMAX], C[NMAX], D[DIM], y[2][DIM];
                int impl, i, bad = 0;
                for (i = 0; i < DIM * NMAX; i++) { st[0][i] = st[1][i] = 0.5f; A[i] = -1.0f; }
                for (i = 0; i < NMAX; i++) B[i] = C[i] = 1.0f;
                for (i = 0; i < DIM; i++) { x[i] = 0.75f; dt[i] = 0.5f; D[i] = 0.5f; }
                if (which == 0) x[0] = INFINITY; else dt[0] = INFINITY;
                for (impl = 0; impl < 2; impl++) {
                    selscan_step_problem s;
                    selscan_status r;
                    memset(&s, 0, sizeof s);
                    s.batch = 1; s.dim = DIM; s.dstate = N; s.n_groups = 1; s.n_cache = 1; s.dtype = SELSCAN_F32;
                    s.state.data = st[impl]; s.u.data = x; s.delta.data = dt; s.A.data = A; s.B.data = B; s.C.data = C;
                    if (withD) s.D.data = D;
                    s.y.data = y[impl];
                    r = impls[impl].f(&s);
                    CHECK(r == SELSCAN_OK, "step inf N=%lld: %s %s", (long long)N, impls[impl].name, selscan_status_string(r));
                }
                for (i = 0; i < DIM; i++) bad += tc_class(y[0][i]) != tc_class(y[1][i]);
                for (i = 0; i < DIM * N; i++) bad += tc_class(st[0][i]) != tc_class(st[1][i]);
                CHECK(bad == 0 && tc_class(y[1][0]) == 1,
                      "step, an infinite %s, N=%lld, D %d: %d elements not the reference's class (y[0] %g, the reference's %g)",
                      which ? "dt" : "u", (long long)N, withD, bad, y[0][0], y[1][0]);
            }
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
        c.prmT = tc_coin(0.4) ? (int)tc_randint(1, 3) : 0;
        c.stT = tc_coin(0.4);
        c.alog = tc_coin(0.3);
        step_case(&c);
    }
    /* SELSCAN_STEP_PARAMS_T on the fast path's common layout (N = 16, 64, unit strides) and its others */
    for (i = 0; i < (quick ? 6 : 36); i++) {
        static const int64_t Ns[] = {16, 64, 8, 5};
        memset(&c, 0, sizeof c);
        c.dt = dts[i % 3];
        c.G = i % 4 == 3 ? 2 : 1;
        c.dim = c.G * tc_randint(1, 300);
        c.N = Ns[(i / 3) % 4];
        c.batch = tc_randint(1, 3);
        c.flags = tc_coin(0.8) ? SELSCAN_DELTA_SOFTPLUS : 0u;
        c.D = tc_coin(0.8); c.z = tc_coin(0.6); c.bias = tc_coin(0.8);
        c.idx = i % 2; c.pad = i % 5 == 1; c.ncache = c.batch + tc_randint(0, 2);
        c.layout = i % 6 < 4 ? TC_LAYOUT_CONTIG : -1;
        c.prmT = i % 4 == 0 ? 1 : i % 4 == 1 ? 2 : 3;
        c.stT = i % 3 != 1;
        c.alog = i % 5 < 2;
        step_case(&c);
    }
    params_t_rules();
    inf_cases();
    /* dim beyond 65535, one row padding */
    memset(&c, 0, sizeof c);
    c.dt = SELSCAN_BF16; c.G = 1; c.dim = 70000; c.N = 2; c.batch = 2; c.flags = SELSCAN_DELTA_SOFTPLUS;
    c.D = c.z = c.bias = 1; c.idx = 1; c.pad = 1; c.ncache = 3; c.layout = -1;
    step_case(&c);
    c.alog = 1; /* and A from A_log */
    step_case(&c);
    return tc_finish();
}
