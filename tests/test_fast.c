/* test_fast: the fast CPU path (selscan_*_cpu, selscan_*_cpu_part, selscan_backward_cpu_reduce)
   against the scalar reference (selscan_*_ref) on fresh random problems over every option, dtype,
   layout and size (dims with several tiles and backward blocks, partial tiles, N up to 256), for
   n_parts 1, 2, 3, 7 and through pthreads; results must be bitwise the same for every n_parts.
   Each vector path this machine runs is tested (the best one and the portable one, through the
   library's internal dispatch); built with -DSELSCAN_NO_SIMD only the portable one exists. */
#define SELSCAN_IMPLEMENTATION
#include "../selscan.h"
#include "common.h"
#include <pthread.h>

static const int64_t nparts_list[] = {1, 2, 3, 7};
#define NPL 4

/* a dt-typed result of a fast path vs the reference implementation's in the same dtype: k = 2,
   each rounds its own f32 value to dt */
static double tol_of(selscan_dtype dt) { return tc_tol_lowp(dt, 2e-5, 2); }

static double *copy_v(const tc_tensor *t) {
    double *v = (double *)malloc(sizeof(double) * (size_t)(t->count ? t->count : 1));
    memcpy(v, t->v, sizeof(double) * (size_t)t->count);
    return v;
}

/* ---- pthreads driver over the part API ---- */
typedef struct job {
    int kind; /* 0 forward, 1 backward parts, 2 reduce, 3 step */
    const selscan_problem *p;
    const selscan_grads *g;
    const selscan_step_problem *s;
    int64_t part, n;
    void *ws;
    size_t bytes;
    int isa;
    float *ck; /* checkpoints (forward writes, backward reads) or NULL */
    size_t ckbytes;
    selscan_status st;
} job;

static void *job_run(void *arg) {
    job *j = (job *)arg;
    if (j->kind == 0) j->st = selscan__forward_fast(j->p, j->part, j->n, j->ws, j->bytes, j->isa, j->ck, j->ckbytes);
    else if (j->kind == 1) j->st = selscan__backward_fast(j->p, j->g, j->part, j->n, j->ws, j->bytes, j->isa, j->ck, j->ckbytes);
    else if (j->kind == 2) j->st = selscan__backward_reduce(j->p, j->g, j->part, j->n, j->ws, j->bytes);
    else j->st = selscan__step_fast(j->s, j->part, j->n, j->isa);
    return NULL;
}

/* Runs all n parts of one phase, on threads or one after the other (in a shuffled order). */
static float *g_ck; /* checkpoint buffer passed to the parts (NULL: none) */
static size_t g_ckbytes;

static selscan_status run_parts(int kind, const selscan_problem *p, const selscan_grads *g,
                                const selscan_step_problem *s, int64_t n, void *ws, size_t bytes, int isa,
                                int threads) {
    job jobs[16];
    pthread_t th[16];
    int64_t i, order[16];
    selscan_status st = SELSCAN_OK;
    for (i = 0; i < n; i++) {
        jobs[i].kind = kind; jobs[i].p = p; jobs[i].g = g; jobs[i].s = s; jobs[i].part = i; jobs[i].n = n;
        jobs[i].ws = ws; jobs[i].bytes = bytes; jobs[i].isa = isa; jobs[i].st = SELSCAN_OK;
        jobs[i].ck = g_ck; jobs[i].ckbytes = g_ckbytes;
        order[i] = i;
    }
    for (i = n - 1; i > 0; i--) {
        int64_t k = tc_randint(0, i), t = order[i];
        order[i] = order[k]; order[k] = t;
    }
    if (threads) {
        for (i = 0; i < n; i++) pthread_create(&th[i], NULL, job_run, &jobs[i]);
        for (i = 0; i < n; i++) pthread_join(th[i], NULL);
    } else {
        for (i = 0; i < n; i++) job_run(&jobs[order[i]]);
    }
    for (i = 0; i < n; i++)
        if (jobs[i].st != SELSCAN_OK) st = jobs[i].st;
    return st;
}

static int isas[3], nisa;

/* A random configuration with more channels than tc_cfg_random gives (several tiles and
   backward blocks, partial tiles). */
static void cfg_make(tc_cfg *c, selscan_dtype dt, int64_t max_work) {
    tc_cfg_random(c, dt, max_work);
    if (tc_coin(0.7)) {
        int64_t dpg = tc_coin(0.5) ? tc_randint(1, 40) : tc_randint(40, 200);
        c->dim = c->G * dpg;
        while (c->batch * c->dim * c->L * c->N > max_work) {
            if (c->L > 8) c->L /= 2;
            else if (c->N > 1) c->N /= 2;
            else if (c->batch > 1) c->batch--;
            else break;
        }
    }
}

static void test_forward(selscan_dtype dt, int64_t max_work) {
    tc_cfg c;
    tc_prob P;
    char desc[300];
    double *yref, *href = NULL;
    unsigned char *ysnap = NULL, *hsnap = NULL;
    int ia, k;
    size_t bytes;
    void *ws;
    selscan_status st;
    cfg_make(&c, dt, max_work);
    tc_prob_make(&P, &c);
    tc_prob_describe(&P, desc, sizeof desc);
    st = selscan_workspace_size(&P.p, NULL, &bytes);
    ws = tc_ws(bytes);
    st = selscan_forward_ref(&P.p, ws, bytes);
    CHECK(st == SELSCAN_OK, "forward_ref: %s (%s)", selscan_status_string(st), desc);
    tc_ws_free(ws);
    tc_load(&P.y);
    yref = copy_v(&P.y);
    if (P.hlast.mem) { tc_load(&P.hlast); href = copy_v(&P.hlast); }
    for (ia = 0; ia < nisa; ia++) {
        for (k = 0; k <= NPL; k++) { /* NPL: 3 parts on threads */
            const int64_t n = k < NPL ? nparts_list[k] : 3;
            tc_poison(&P.y);
            tc_poison(&P.hlast);
            st = selscan_workspace_size_parts(&P.p, NULL, n, &bytes);
            ws = tc_ws(bytes);
            st = run_parts(0, &P.p, NULL, NULL, n, ws, bytes, isas[ia], k == NPL);
            tc_ws_free(ws);
            if (!CHECK(st == SELSCAN_OK, "forward isa %d parts %lld: %s (%s)", isas[ia], (long long)n, selscan_status_string(st), desc)) continue;
            CHECK(tc_unwritten(&P.y) == 0, "forward isa %d: y unwritten (%s)", isas[ia], desc);
            {
                const double e = tc_rel_err(&P.y, yref);
                CHECK(e <= tol_of(dt), "forward isa %d parts %lld: y rel err %.3g (%s)", isas[ia], (long long)n, e, desc);
            }
            if (href) {
                const double e = tc_rel_err(&P.hlast, href);
                CHECK(e <= 2e-5, "forward isa %d parts %lld: h_last rel err %.3g (%s)", isas[ia], (long long)n, e, desc);
            }
            if (k == 0) {
                free(ysnap); free(hsnap);
                ysnap = tc_snapshot(&P.y);
                hsnap = P.hlast.mem ? tc_snapshot(&P.hlast) : NULL;
            } else {
                CHECK(tc_same(&P.y, ysnap) && (!hsnap || tc_same(&P.hlast, hsnap)),
                      "forward isa %d: parts %lld not bitwise equal to 1 part (%s)", isas[ia], (long long)n, desc);
            }
        }
    }
    /* errors of the part API: nothing written */
    {
        unsigned char *ys = tc_snapshot(&P.y);
        st = selscan_workspace_size_parts(&P.p, NULL, 2, &bytes);
        ws = tc_ws(bytes);
        CHECK(selscan_forward_cpu_part(&P.p, 2, 2, ws, bytes) == SELSCAN_ERR_SHAPE, "part == n_parts (%s)", desc);
        CHECK(selscan_forward_cpu_part(&P.p, -1, 2, ws, bytes) == SELSCAN_ERR_SHAPE, "part < 0 (%s)", desc);
        CHECK(selscan_forward_cpu_part(&P.p, 0, 0, ws, bytes) == SELSCAN_ERR_SHAPE, "n_parts 0 (%s)", desc);
        /* (the size includes 63 bytes of alignment slack: ws + 1 needs all of them) */
        CHECK(bytes == 0 || selscan_forward_cpu_part(&P.p, 1, 2, (char *)ws + 1, bytes - 1) == SELSCAN_ERR_WORKSPACE,
              "workspace one byte short (%s)", desc);
        CHECK(bytes == 0 || selscan_forward_cpu_part(&P.p, 0, 2, (char *)ws + 8, bytes - 8) == SELSCAN_ERR_WORKSPACE,
              "misaligned workspace without the room to align it (%s)", desc);
        CHECK(tc_same(&P.y, ys), "forward part error wrote y (%s)", desc);
        tc_ws_free(ws);
        free(ys);
    }
    /* the plain entry point is the best path with 1 part */
    tc_poison(&P.y);
    st = selscan_workspace_size(&P.p, NULL, &bytes);
    ws = tc_ws(bytes);
    st = selscan_forward_cpu(&P.p, ws, bytes);
    tc_ws_free(ws);
    CHECK(st == SELSCAN_OK && tc_rel_err(&P.y, yref) <= tol_of(dt), "forward_cpu (%s)", desc);
    free(ysnap); free(hsnap); free(yref); free(href);
    tc_prob_free(&P);
}

static void test_backward(selscan_dtype dt, int64_t max_work) {
    tc_cfg c;
    tc_prob P;
    tc_grads G;
    char desc[300];
    tc_tensor *outs[9];
    double *ref[9];
    unsigned char *snap[9], *best[9];
    static const char *names[9] = {"du", "ddelta", "dA", "dB", "dC", "dD", "dz", "dbias", "dh0"};
    const void *gdata[9];
    int ia, k, i;
    unsigned want;
    size_t bytes;
    void *ws;
    selscan_status st;
    cfg_make(&c, dt, max_work);
    c.bcast = 0;
    tc_prob_make(&P, &c);
    want = tc_coin(0.6) ? TC_G_ALL : (unsigned)tc_randint(1, TC_G_ALL);
    tc_grads_make(&G, &P, want, tc_coin(0.5));
    tc_prob_describe(&P, desc, sizeof desc);
    tc_grads_outputs(&G, outs, gdata);
    tc_grads_poison(&G);
    st = selscan_workspace_size(&P.p, &G.g, &bytes);
    CHECK(st == SELSCAN_OK, "backward workspace_size: %s (%s)", selscan_status_string(st), desc);
    ws = tc_ws(bytes);
    st = selscan_backward_ref(&P.p, &G.g, ws, bytes);
    tc_ws_free(ws);
    CHECK(st == SELSCAN_OK, "backward_ref: %s (%s)", selscan_status_string(st), desc);
    for (i = 0; i < 9; i++) {
        ref[i] = NULL;
        snap[i] = NULL;
        best[i] = NULL;
        if (gdata[i]) { tc_load(outs[i]); ref[i] = copy_v(outs[i]); }
    }
    for (ia = 0; ia < nisa; ia++) {
        for (k = 0; k <= NPL; k++) {
            const int64_t n = k < NPL ? nparts_list[k] : 3, nred = tc_randint(1, 5);
            tc_grads_poison(&G);
            st = selscan_workspace_size_parts(&P.p, &G.g, n, &bytes);
            ws = tc_ws(bytes);
            st = run_parts(1, &P.p, &G.g, NULL, n, ws, bytes, isas[ia], k == NPL);
            if (st == SELSCAN_OK) st = run_parts(2, &P.p, &G.g, NULL, nred, ws, bytes, isas[ia], k == NPL);
            tc_ws_free(ws);
            if (!CHECK(st == SELSCAN_OK, "backward isa %d parts %lld: %s (%s)", isas[ia], (long long)n, selscan_status_string(st), desc)) continue;
            for (i = 0; i < 9; i++) {
                double e;
                if (!gdata[i]) continue;
                CHECK(tc_unwritten(outs[i]) == 0, "backward isa %d: %s unwritten (%s)", isas[ia], names[i], desc);
                e = tc_rel_err(outs[i], ref[i]);
                CHECK(e <= (i == 2 || i == 5 || i == 7 || i == 8 ? 2e-5 : tol_of(dt)) ||
                          ((i == 3 || i == 4) && (c.flags & (i == 3 ? SELSCAN_FIXED_B : SELSCAN_FIXED_C)) && e <= 2e-5),
                      "backward isa %d parts %lld: %s rel err %.3g (%s)", isas[ia], (long long)n, names[i], e, desc);
                if (k == 0) {
                    free(snap[i]);
                    snap[i] = tc_snapshot(outs[i]);
                    if (ia == 0) best[i] = tc_snapshot(outs[i]);
                } else {
                    CHECK(tc_same(outs[i], snap[i]), "backward isa %d: %s with %lld parts not bitwise equal to 1 part (%s)", isas[ia], names[i], (long long)n, desc);
                }
            }
        }
        /* with the forward's checkpoints: bitwise the gradients of 1 part without them */
        {
            const int64_t nf = nparts_list[tc_randint(0, NPL - 1)], nb = nparts_list[tc_randint(0, NPL - 1)];
            size_t ckb = 0, fb = 0, bb = 0;
            void *fws, *bws;
            st = selscan_checkpoint_size(&P.p, &ckb);
            CHECK(st == SELSCAN_OK, "checkpoint_size: %s (%s)", selscan_status_string(st), desc);
            g_ck = (float *)malloc(ckb ? ckb : 4);
            g_ckbytes = ckb;
            memset(g_ck, 0xff, ckb);
            selscan_workspace_size_parts(&P.p, NULL, nf, &fb);
            selscan_workspace_size_parts(&P.p, &G.g, nb, &bb);
            fws = tc_ws(fb);
            bws = tc_ws(bb);
            tc_grads_poison(&G);
            st = run_parts(0, &P.p, NULL, NULL, nf, fws, fb, isas[ia], 0);
            if (st == SELSCAN_OK) { /* every float of the checkpoint written (unused slots zeroed) */
                size_t k, left = 0;
                for (k = 0; k < ckb / 4; k++) {
                    uint32_t w;
                    memcpy(&w, g_ck + k, 4);
                    left += w == 0xffffffffu;
                }
                CHECK(left == 0, "isa %d: %zu checkpoint floats unwritten (%s)", isas[ia], left, desc);
            }
            if (st == SELSCAN_OK) st = run_parts(1, &P.p, &G.g, NULL, nb, bws, bb, isas[ia], 1);
            free(g_ck);
            g_ck = NULL;
            if (st == SELSCAN_OK) st = run_parts(2, &P.p, &G.g, NULL, 1, bws, bb, isas[ia], 0);
            CHECK(st == SELSCAN_OK, "checkpointed backward isa %d: %s (%s)", isas[ia], selscan_status_string(st), desc);
            for (i = 0; i < 9; i++)
                if (gdata[i])
                    CHECK(tc_same(outs[i], snap[i]), "isa %d: %s with checkpoints (fwd %lld parts, bwd %lld) not bitwise equal (%s)",
                          isas[ia], names[i], (long long)nf, (long long)nb, desc);
            /* errors: buffer short, overlapping an output or an input of the forward */
            g_ck = (float *)malloc(ckb ? ckb : 4);
            if (ckb >= 4)
                CHECK(selscan__backward_fast(&P.p, &G.g, 0, 1, bws, bb, isas[ia], g_ck, ckb - 4) == SELSCAN_ERR_WORKSPACE,
                      "checkpoints one float short (%s)", desc);
            /* (a 16-bit tensor may start off float alignment: then the alignment check answers) */
            if (G.g.du.data) {
                st = selscan__backward_fast(&P.p, &G.g, 0, 1, bws, bb, isas[ia], (const float *)G.g.du.data, ckb);
                CHECK(st == SELSCAN_ERR_ALIAS || ((uintptr_t)G.g.du.data % 4 && st == SELSCAN_ERR_WORKSPACE),
                      "checkpoints on du: %s (%s)", selscan_status_string(st), desc);
            }
            st = selscan_forward_cpu_ckpt_part(&P.p, 0, 1, fws, fb, (float *)P.p.u.data, ckb);
            CHECK(st == SELSCAN_ERR_ALIAS || ((uintptr_t)P.p.u.data % 4 && st == SELSCAN_ERR_WORKSPACE),
                  "forward checkpoints on u: %s (%s)", selscan_status_string(st), desc);
            free(g_ck);
            g_ck = NULL;
            g_ckbytes = 0;
            tc_ws_free(fws);
            tc_ws_free(bws);
        }
    }
    /* errors of the part API: nothing written */
    tc_grads_poison(&G);
    for (i = 0; i < 9; i++) { free(snap[i]); snap[i] = tc_snapshot(outs[i]); }
    st = selscan_workspace_size_parts(&P.p, &G.g, 3, &bytes);
    ws = tc_ws(bytes);
    CHECK(selscan_backward_cpu_part(&P.p, &G.g, 3, 3, ws, bytes) == SELSCAN_ERR_SHAPE, "backward part == n_parts (%s)", desc);
    CHECK(selscan_backward_cpu_part(&P.p, &G.g, 1, 3, (char *)ws + 1, bytes - 1) == SELSCAN_ERR_WORKSPACE, "backward workspace short (%s)", desc);
    CHECK(selscan_backward_cpu_reduce(&P.p, &G.g, 0, 1, NULL, 0) == SELSCAN_ERR_WORKSPACE ||
              !(G.g.dA.data || G.g.dB.data || G.g.dC.data || G.g.dD.data || G.g.ddelta_bias.data),
          "reduce without workspace (%s)", desc);
    CHECK(selscan_backward_cpu_reduce(&P.p, &G.g, 0, 0, ws, bytes) == SELSCAN_ERR_SHAPE, "reduce n_parts 0 (%s)", desc);
    {
        const selscan_grads gbad = G.g;
        selscan_grads g2 = gbad;
        g2.du.data = (void *)(uintptr_t)P.p.u.data; /* an output on an input */
        if (G.g.du.data) CHECK(selscan_backward_cpu_part(&P.p, &g2, 0, 1, ws, bytes) == SELSCAN_ERR_ALIAS, "du aliasing u (%s)", desc);
        g2 = gbad;
        if (G.g.dA.data) {
            g2.dA.data = ws; /* an output in the workspace */
            CHECK(selscan_backward_cpu_part(&P.p, &g2, 0, 1, ws, bytes) == SELSCAN_ERR_ALIAS, "dA in the workspace (%s)", desc);
            CHECK(selscan_backward_cpu_reduce(&P.p, &g2, 0, 1, ws, bytes) == SELSCAN_ERR_ALIAS, "reduce: dA in the workspace (%s)", desc);
        }
    }
    tc_ws_free(ws);
    for (i = 0; i < 9; i++)
        if (gdata[i]) CHECK(tc_same(outs[i], snap[i]), "backward part error wrote %s (%s)", names[i], desc);
    tc_grads_poison(&G);
    st = selscan_workspace_size(&P.p, &G.g, &bytes);
    ws = tc_ws(bytes);
    st = selscan_backward_cpu(&P.p, &G.g, ws, bytes);
    tc_ws_free(ws);
    CHECK(st == SELSCAN_OK, "backward_cpu: %s (%s)", selscan_status_string(st), desc);
    for (i = 0; i < 9; i++) {
        if (gdata[i]) CHECK(tc_same(outs[i], best[i]), "backward_cpu differs from the best path's 1 part: %s (%s)", names[i], desc);
        free(ref[i]); free(snap[i]); free(best[i]);
    }
    tc_grads_free(&G);
    tc_prob_free(&P);
}

/* Step: random problem, fast vs reference on copies of the state. */
static void test_step(selscan_dtype dt) {
    const int64_t batch = tc_randint(1, 4), G = tc_randint(1, 3), dim = G * tc_randint(1, 90);
    static const int64_t Ns[] = {1, 3, 7, 8, 16, 17, 64, 300};
    const int64_t N = Ns[tc_randint(0, 7)], ncache = batch + tc_randint(0, 3);
    const int fixB = tc_coin(0.2), fixC = tc_coin(0.2), hasz = tc_coin(0.5), hasD = tc_coin(0.6),
              hasb = tc_coin(0.6), sp = tc_coin(0.7), idx = tc_coin(0.5), lay = (int)tc_randint(0, TC_LAYOUT_PADDED);
    tc_tensor state, x, dtt, A, B, C, D, z, bias, y;
    int32_t sidx[8];
    selscan_step_problem s;
    double *yref, *sref;
    unsigned char *ysnap = NULL, *ssnap = NULL, *s0;
    char desc[200];
    int ia, k;
    selscan_status st;
    int64_t i;
    snprintf(desc, sizeof desc, "step %s b%lld d%lld N%lld G%lld%s%s%s%s%s%s%s layout %d", tc_dtname(dt), (long long)batch,
             (long long)dim, (long long)N, (long long)G, fixB ? " fixB" : "", fixC ? " fixC" : "", hasz ? " z" : "",
             hasD ? " D" : "", hasb ? " bias" : "", sp ? " sp" : "", idx ? " idx" : "", lay);
    tc_tensor_make(&state, SELSCAN_F32, 3, idx ? ncache : batch, dim, N, 1, lay, 1);
    tc_tensor_make(&x, dt, 2, batch, dim, 1, 1, lay, 1);
    tc_tensor_make(&dtt, dt, 2, batch, dim, 1, 1, lay, 1);
    tc_tensor_make(&z, dt, 2, batch, dim, 1, 1, lay, hasz);
    tc_tensor_make(&y, dt, 2, batch, dim, 1, 1, lay, 1);
    tc_tensor_make(&A, SELSCAN_F32, 2, dim, N, 1, 1, lay, 1);
    if (fixB) tc_tensor_make(&B, SELSCAN_F32, 2, dim, N, 1, 1, lay, 1);
    else tc_tensor_make(&B, dt, 3, batch, G, N, 1, lay, 1);
    if (fixC) tc_tensor_make(&C, SELSCAN_F32, 2, dim, N, 1, 1, lay, 1);
    else tc_tensor_make(&C, dt, 3, batch, G, N, 1, lay, 1);
    tc_tensor_make(&D, SELSCAN_F32, 1, dim, 1, 1, 1, lay, hasD);
    tc_tensor_make(&bias, SELSCAN_F32, 1, dim, 1, 1, 1, lay, hasb);
    tc_fill(&state, -1, 1); tc_fill(&x, -2, 2); tc_fill(&dtt, sp ? -4 : 0.01, sp ? 3 : 0.6); tc_fill(&z, -3, 3);
    for (i = 0; i < A.count; i++) A.v[i] = (double)(float)-exp(tc_uniform(-3, 1.5));
    tc_store(&A);
    tc_fill(&B, -1, 1); tc_fill(&C, -1, 1); tc_fill(&D, -1, 1); tc_fill(&bias, -1, 1);
    if (idx) { /* distinct rows, some padding */
        int32_t perm[16];
        for (i = 0; i < ncache; i++) perm[i] = (int32_t)i;
        for (i = ncache - 1; i > 0; i--) { int64_t j = tc_randint(0, i); int32_t t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
        for (i = 0; i < batch; i++) sidx[i] = tc_coin(0.2) ? -1 : perm[i];
    }
    memset(&s, 0, sizeof s);
    s.batch = batch; s.dim = dim; s.dstate = N; s.n_groups = G; s.n_cache = idx ? ncache : 0; s.dtype = dt;
    s.flags = (sp ? SELSCAN_DELTA_SOFTPLUS : 0u) | (fixB ? SELSCAN_FIXED_B : 0u) | (fixC ? SELSCAN_FIXED_C : 0u);
    s.state_index = idx ? sidx : NULL;
    s.state = tc_out(&state); s.u = tc_api(&x); s.delta = tc_api(&dtt); s.A = tc_api(&A); s.B = tc_api(&B);
    s.C = tc_api(&C); s.D = tc_api(&D); s.z = tc_api(&z); s.delta_bias = tc_api(&bias); s.y = tc_out(&y);
    s0 = tc_snapshot(&state);
    tc_poison(&y);
    st = selscan_step_ref(&s);
    CHECK(st == SELSCAN_OK, "step_ref: %s (%s)", selscan_status_string(st), desc);
    tc_load(&y); tc_load(&state);
    yref = copy_v(&y); sref = copy_v(&state);
    for (ia = 0; ia < nisa; ia++)
        for (k = 0; k <= NPL; k++) {
            const int64_t n = k < NPL ? nparts_list[k] : 3;
            memcpy(state.mem, s0, (size_t)state.alloc * 4);
            tc_poison(&y);
            st = run_parts(3, NULL, NULL, &s, n, NULL, 0, isas[ia], k == NPL);
            if (!CHECK(st == SELSCAN_OK, "step isa %d parts %lld: %s (%s)", isas[ia], (long long)n, selscan_status_string(st), desc)) continue;
            CHECK(tc_unwritten(&y) == 0, "step: y unwritten (%s)", desc);
            CHECK(tc_rel_err(&y, yref) <= tol_of(dt), "step isa %d: y rel err %.3g (%s)", isas[ia], tc_rel_err(&y, yref), desc);
            CHECK(tc_rel_err(&state, sref) <= 2e-5, "step isa %d: state rel err %.3g (%s)", isas[ia], tc_rel_err(&state, sref), desc);
            if (k == 0) {
                free(ysnap); free(ssnap);
                ysnap = tc_snapshot(&y); ssnap = tc_snapshot(&state);
            } else {
                CHECK(tc_same(&y, ysnap) && tc_same(&state, ssnap), "step isa %d: %lld parts not bitwise equal to 1 (%s)", isas[ia], (long long)n, desc);
            }
        }
    memcpy(state.mem, s0, (size_t)state.alloc * 4);
    st = selscan_step_cpu(&s);
    CHECK(st == SELSCAN_OK && tc_rel_err(&y, yref) <= tol_of(dt), "step_cpu (%s)", desc);
    free(s0);
    free(yref); free(sref); free(ysnap); free(ssnap);
    tc_tensor_free(&state); tc_tensor_free(&x); tc_tensor_free(&dtt); tc_tensor_free(&A); tc_tensor_free(&B);
    tc_tensor_free(&C); tc_tensor_free(&D); tc_tensor_free(&z); tc_tensor_free(&bias); tc_tensor_free(&y);
}

int main(void) {
    int i, d;
    const int quick = tc_quick();
    tc_init("test_fast");
    /* every vector path this CPU runs (an AVX-512 machine runs the AVX2 one too), then portable */
    isas[0] = selscan__use_isa(SELSCAN__ISA_AVX512);
    nisa = 1;
    if (isas[0] == SELSCAN__ISA_AVX512) isas[nisa++] = SELSCAN__ISA_AVX2;
    if (isas[0] != SELSCAN__ISA_PORTABLE) isas[nisa++] = SELSCAN__ISA_PORTABLE;
    printf("paths: %s%s%s\n", selscan_cpu_backend(), isas[0] == SELSCAN__ISA_AVX512 ? ", avx2+fma" : "",
           nisa > 1 ? " and portable" : "");
    for (d = 0; d < 3; d++) {
        const selscan_dtype dt = (selscan_dtype)d;
        for (i = 0; i < (quick ? 6 : 40); i++) test_forward(dt, quick ? 60000 : 200000);
        for (i = 0; i < (quick ? 4 : 25); i++) test_backward(dt, quick ? 30000 : 100000);
        for (i = 0; i < (quick ? 4 : 25); i++) test_step(dt);
    }
    return tc_finish();
}
