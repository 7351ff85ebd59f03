/* test_api: the v0.2 API rules (issue 18) through the public entry points.
     workspace  any pointer: malloc'ed and deliberately misaligned workspaces (base + 0 .. 63) give
                bitwise the results of an aligned one on every CPU entry point (ref, cpu, parts,
                ckpt); the reported size includes the slack; one byte short of (padding + need)
                is refused.
     overlap    judged on elements where it can be proven: dB / dC interleaved in one
                (batch, L, dt_rank + 2N) gradient buffer (Mamba's x_proj layout, channels-last)
                accepted, gradients bitwise those of separate buffers (cpu, parts, ref); y / h_last
                and the step's state / y interleaved likewise; partial interleaving, equal views and
                views one row apart refused (SELSCAN_ERR_ALIAS).
     diag       a table of bad inputs: the operand and rule each names; untouched on OK.
     ckpt       selscan_forward_cpu_ckpt / selscan_backward_cpu_ckpt bitwise equal to the parts
                forms; a backward part without its reduce leaves NaN in dA, dD, ddelta_bias and
                fixed dB / dC.
     ckpt used  selscan_checkpoint_used answers whether the CPU backward reads a checkpoint (a foreign
                one changes the gradients exactly then; else the gradients are bitwise those without one).
     SELSCAN_CPU  when set, selscan_cpu_backend() reports the path it names (capped). */
#include "../selscan.h" /* the implementation: tests/selscan_impl.c, linked by the Makefile */
#include "common.h"

/* ------------------------------------------------------------------------------- helpers -- */
static tc_prob P;
static tc_grads G;

static void make_problem(selscan_dtype dt, unsigned flags, int64_t batch, int64_t dim, int64_t L, int64_t N) {
    tc_cfg c;
    memset(&c, 0, sizeof c);
    c.dt = dt; c.batch = batch; c.dim = dim; c.L = L; c.N = N; c.G = 1;
    c.flags = SELSCAN_DELTA_SOFTPLUS | flags;
    c.D = c.z = c.bias = c.h0 = c.hlast = 1;
    c.layout = TC_LAYOUT_EXPLICIT;
    tc_prob_make(&P, &c);
    P.p.n_groups = 1;
    tc_grads_make(&G, &P, TC_G_ALL, 1);
}
static void free_problem(void) { tc_grads_free(&G); tc_prob_free(&P); }

/* bytes of each output, for bitwise comparisons */
typedef struct outs { unsigned char *b[11]; } outs;
static tc_tensor *out_t(int i) {
    tc_tensor *t[11] = {&P.y, &P.hlast, &G.du, &G.ddelta, &G.dA, &G.dB, &G.dC, &G.dD, &G.dz, &G.dbias, &G.dh0};
    return t[i];
}
static const char *out_name(int i) {
    static const char *n[11] = {"y", "h_last", "du", "ddelta", "dA", "dB", "dC", "dD", "dz", "ddelta_bias", "dh0"};
    return n[i];
}
static void outs_take(outs *o) { int i; for (i = 0; i < 11; i++) o->b[i] = tc_snapshot(out_t(i)); }
static void outs_free(outs *o) { int i; for (i = 0; i < 11; i++) free(o->b[i]); }
static int outs_same(const outs *o, int first, int last, const char *what) {
    int i, ok = 1;
    for (i = first; i <= last; i++)
        if (!tc_same(out_t(i), o->b[i])) { ok = 0; CHECK(0, "%s: %s differs", what, out_name(i)); }
    return ok;
}
static void poison_all(void) { tc_poison(&P.y); tc_poison(&P.hlast); tc_grads_poison(&G); }

/* every part, then (backward) every reduce part */
static selscan_status fwd_parts(int64_t n, void *ws, size_t b, float *ck, size_t ckb) {
    int64_t i;
    selscan_status st = SELSCAN_OK;
    for (i = 0; i < n && st == SELSCAN_OK; i++)
        st = ck ? selscan_forward_cpu_ckpt_part(&P.p, i, n, ws, b, ck, ckb) : selscan_forward_cpu_part(&P.p, i, n, ws, b);
    return st;
}
static selscan_status bwd_parts(int64_t n, void *ws, size_t b, const float *ck, size_t ckb, int reduce) {
    int64_t i;
    selscan_status st = SELSCAN_OK;
    for (i = n - 1; i >= 0 && st == SELSCAN_OK; i--) /* any order */
        st = ck ? selscan_backward_cpu_ckpt_part(&P.p, &G.g, i, n, ws, b, ck, ckb)
                : selscan_backward_cpu_part(&P.p, &G.g, i, n, ws, b);
    for (i = 0; reduce && i < n && st == SELSCAN_OK; i++) st = selscan_backward_cpu_reduce(&P.p, &G.g, i, n, ws, b);
    return st;
}

static size_t pad_of(const void *p) { return (size_t)((64 - (uintptr_t)p % 64) % 64); }

/* ------------------------------------------------------------------------------ workspace -- */
static void workspace_any_pointer(selscan_dtype dt) {
    size_t wf = 0, wb = 0, wfp = 0, wbp = 0, ckb = 0;
    unsigned char *base;
    float *ck;
    outs ref, cpu, ckf;
    int k;
    char what[128];
    const int64_t NP = 3;
    make_problem(dt, 0, 2, 24, 150, 5);
    CHECK(selscan_workspace_size(&P.p, NULL, &wf) == SELSCAN_OK && selscan_workspace_size(&P.p, &G.g, &wb) == SELSCAN_OK &&
              selscan_workspace_size_parts(&P.p, NULL, NP, &wfp) == SELSCAN_OK &&
              selscan_workspace_size_parts(&P.p, &G.g, NP, &wbp) == SELSCAN_OK && selscan_checkpoint_size(&P.p, &ckb) == SELSCAN_OK,
          "sizes");
    CHECK(wf % 64 == 63 && wb % 64 == 63 && wfp % 64 == 63 && wbp % 64 == 63,
          "reported sizes include SELSCAN_WORKSPACE_ALIGN - 1 bytes of slack (%zu %zu %zu %zu)", wf, wb, wfp, wbp);
    {
        size_t m = wf > wb ? wf : wb;
        if (wfp > m) m = wfp;
        if (wbp > m) m = wbp;
        if (posix_memalign((void **)&base, 64, m + 64) != 0) abort();
    }
    ck = (float *)malloc(ckb);
    /* aligned references */
    poison_all();
    CHECK(selscan_forward_ref(&P.p, base, wf) == SELSCAN_OK && selscan_backward_ref(&P.p, &G.g, base, wb) == SELSCAN_OK, "ref aligned");
    outs_take(&ref);
    poison_all();
    CHECK(selscan_forward_cpu(&P.p, base, wf) == SELSCAN_OK && selscan_backward_cpu(&P.p, &G.g, base, wb) == SELSCAN_OK, "cpu aligned");
    outs_take(&cpu);
    poison_all();
    CHECK(selscan_forward_cpu_ckpt(&P.p, base, wf, ck, ckb) == SELSCAN_OK &&
              selscan_backward_cpu_ckpt(&P.p, &G.g, base, wb, ck, ckb) == SELSCAN_OK,
          "ckpt aligned");
    outs_take(&ckf);
    outs_same(&cpu, 0, 10, "plain ckpt entry points vs without checkpoints"); /* bitwise, same machine */
    for (k = 0; k < 64; k++) {
        unsigned char *ws = base + k;
        snprintf(what, sizeof what, "%s workspace at +%d", tc_dtname(dt), k);
        poison_all();
        CHECK(selscan_forward_ref(&P.p, ws, wf) == SELSCAN_OK && selscan_backward_ref(&P.p, &G.g, ws, wb) == SELSCAN_OK, "%s: ref", what);
        outs_same(&ref, 0, 10, what);
        poison_all();
        CHECK(selscan_forward_cpu(&P.p, ws, wf) == SELSCAN_OK && selscan_backward_cpu(&P.p, &G.g, ws, wb) == SELSCAN_OK, "%s: cpu", what);
        outs_same(&cpu, 0, 10, what);
        poison_all();
        CHECK(fwd_parts(NP, ws, wfp, NULL, 0) == SELSCAN_OK && bwd_parts(NP, ws, wbp, NULL, 0, 1) == SELSCAN_OK, "%s: parts", what);
        outs_same(&cpu, 0, 10, what);
        poison_all();
        CHECK(fwd_parts(NP, ws, wfp, ck, ckb) == SELSCAN_OK && bwd_parts(NP, ws, wbp, ck, ckb, 1) == SELSCAN_OK, "%s: ckpt parts", what);
        outs_same(&ckf, 0, 10, what);
        poison_all();
        CHECK(selscan_forward_cpu_ckpt(&P.p, ws, wf, ck, ckb) == SELSCAN_OK &&
                  selscan_backward_cpu_ckpt(&P.p, &G.g, ws, wb, ck, ckb) == SELSCAN_OK,
              "%s: ckpt", what);
        outs_same(&ckf, 0, 10, what);
        /* the parts' sizes are exact: padding + (reported - slack) passes, one byte less fails */
        {
            const size_t needf = wfp - 63 + pad_of(ws), needb = wbp - 63 + pad_of(ws);
            selscan_diag dg = {NULL, NULL, SELSCAN_RULE_NONE};
            selscan_problem p2 = P.p;
            poison_all();
            CHECK(fwd_parts(NP, ws, needf, NULL, 0) == SELSCAN_OK && bwd_parts(NP, ws, needb, NULL, 0, 1) == SELSCAN_OK,
                  "%s: padding + need accepted", what);
            outs_same(&cpu, 0, 10, what);
            p2.diag = &dg;
            CHECK(selscan_forward_cpu_part(&p2, 1, NP, ws, needf - 1) == SELSCAN_ERR_WORKSPACE &&
                      selscan_backward_cpu_part(&p2, &G.g, 2, NP, ws, needb - 1) == SELSCAN_ERR_WORKSPACE &&
                      dg.operand && strcmp(dg.operand, "workspace") == 0 && strcmp(dg.rule, "too small") == 0,
                  "%s: one byte short refused", what);
        }
    }
    /* malloc's own pointer (16-aligned at best) */
    {
        void *m = malloc(wb > wf ? wb : wf);
        poison_all();
        CHECK(selscan_forward_cpu(&P.p, m, wf) == SELSCAN_OK && selscan_backward_cpu(&P.p, &G.g, m, wb) == SELSCAN_OK, "malloc'ed workspace");
        outs_same(&cpu, 0, 10, "malloc'ed workspace");
        free(m);
    }
    outs_free(&ref); outs_free(&cpu); outs_free(&ckf);
    free(ck);
    free(base);
    free_problem();
}

/* --------------------------------------------------------------------------------- overlap -- */
/* dB / dC (and B / C) as views into one channels-last (batch, L, R + 2N) buffer. */
static void interleaved_dBdC(selscan_dtype dt, int64_t R) {
    const int64_t B = 2, Dm = 16, L = 70, N = 4, W = R + 2 * N;
    const size_t es = tc_esize(dt), nbuf = (size_t)(B * L * W);
    /* backward_ref's dB vs the fast path's, element by element (1 + |y|: a sum of O(1) terms): f32
       1e-5; in dt k = 2, each side rounds its own f32 sum */
    const double tol = tc_tol_lowp(dt, 1e-5, 2);
    unsigned char *gb = (unsigned char *)malloc(nbuf * es), *gb0 = (unsigned char *)malloc(nbuf * es);
    size_t wb = 0, wbp = 0;
    void *ws;
    outs sep;
    selscan_grads g2;
    selscan_diag dg;
    selscan_problem p2;
    char what[96];
    int64_t b, t, j;
    make_problem(dt, 0, B, Dm, L, N);
    snprintf(what, sizeof what, "%s dt_rank %lld", tc_dtname(dt), (long long)R);
    selscan_workspace_size(&P.p, &G.g, &wb);
    selscan_workspace_size_parts(&P.p, &G.g, 4, &wbp);
    ws = malloc(wb > wbp ? wb : wbp);
    poison_all();
    CHECK(selscan_backward_cpu(&P.p, &G.g, ws, wb) == SELSCAN_OK, "%s: separate buffers", what);
    outs_take(&sep);
    memset(gb, 0x11, nbuf * es);
    memcpy(gb0, gb, nbuf * es);
    g2 = G.g;
    g2.dB.data = gb + (size_t)R * es;
    g2.dC.data = gb + (size_t)(R + N) * es;
    g2.dB.stride[0] = g2.dC.stride[0] = L * W; /* (batch, group, N, L) over (batch, L, W) memory */
    g2.dB.stride[1] = g2.dC.stride[1] = N;
    g2.dB.stride[2] = g2.dC.stride[2] = 1;
    g2.dB.stride[3] = g2.dC.stride[3] = W;
    CHECK(selscan_validate_grads(&P.p, &g2) == SELSCAN_OK, "%s: interleaved dB / dC accepted by validate_grads", what);
    {
        int pass;
        for (pass = 0; pass < 3; pass++) {
            selscan_status st;
            int64_t i;
            const char *how = pass == 0 ? "backward_cpu" : pass == 1 ? "4 parts" : "backward_ref";
            tc_grads_poison(&G);
            memcpy(gb, gb0, nbuf * es);
            if (pass == 0) st = selscan_backward_cpu(&P.p, &g2, ws, wb);
            else if (pass == 1) {
                st = SELSCAN_OK;
                for (i = 0; i < 4 && st == SELSCAN_OK; i++) st = selscan_backward_cpu_part(&P.p, &g2, i, 4, ws, wbp);
                for (i = 0; i < 4 && st == SELSCAN_OK; i++) st = selscan_backward_cpu_reduce(&P.p, &g2, i, 4, ws, wbp);
            } else st = selscan_backward_ref(&P.p, &g2, ws, wb);
            CHECK(st == SELSCAN_OK, "%s: %s with interleaved dB / dC: %s", what, how, selscan_status_string(st));
            if (pass < 2) outs_same(&sep, 2, 4, how), outs_same(&sep, 7, 10, how);
            {
                int okB = 1, okC = 1, okR = 1;
                for (b = 0; b < B; b++)
                    for (t = 0; t < L; t++) {
                        const unsigned char *row = gb + (size_t)((b * L + t) * W) * es;
                        for (j = 0; j < N; j++) {
                            const int64_t o = tc_off(&G.dB, ((b * 1 + 0) * N + j) * L + t);
                            const int64_t oc = tc_off(&G.dC, ((b * 1 + 0) * N + j) * L + t);
                            if (pass < 2) { /* bitwise the separate buffers' values */
                                okB &= memcmp(row + (size_t)(R + j) * es, sep.b[5] + (size_t)(o + G.dB.off) * es, es) == 0;
                                okC &= memcmp(row + (size_t)(R + N + j) * es, sep.b[6] + (size_t)(oc + G.dC.off) * es, es) == 0;
                            } else { /* the reference: close to the fast path's */
                                const double x = tc_decode(dt, row + (size_t)(R + j) * es), y = tc_decode(dt, sep.b[5] + (size_t)(o + G.dB.off) * es);
                                okB &= fabs(x - y) <= tol * (1 + fabs(y));
                            }
                        }
                        for (j = 0; j < R; j++) okR &= memcmp(row + (size_t)j * es, gb0 + (size_t)((b * L + t) * W + j) * es, es) == 0;
                    }
                CHECK(okB && okC, "%s: %s: interleaved dB / dC equal to separate buffers", what, how);
                CHECK(okR, "%s: %s: the dt columns untouched", what, how);
            }
        }
    }
    /* true overlaps refused, naming the pair */
    memset(&dg, 0, sizeof dg);
    p2 = P.p;
    p2.diag = &dg;
    {
        selscan_grads g3 = g2;
        g3.dC.data = gb + (size_t)(R + N - 1) * es; /* C's first column inside B's */
        CHECK(selscan_backward_cpu(&p2, &g3, ws, wb) == SELSCAN_ERR_ALIAS && dg.operand && strcmp(dg.operand, "dB") == 0 &&
                  strcmp(dg.rule, "overlaps dC") == 0,
              "%s: dC starting inside dB's columns refused ({%s, %s})", what, dg.operand, dg.rule);
        CHECK(selscan_backward_ref(&p2, &g3, ws, wb) == SELSCAN_ERR_ALIAS, "%s: ref: partial interleave refused", what);
        g3.dC.data = g3.dB.data;
        CHECK(selscan_backward_cpu(&p2, &g3, ws, wb) == SELSCAN_ERR_ALIAS, "%s: equal views refused", what);
        g3.dC.data = gb + (size_t)(R + W) * es; /* one row (step) later */
        CHECK(selscan_backward_cpu(&p2, &g3, ws, wb) == SELSCAN_ERR_ALIAS, "%s: views one row apart refused", what);
        g3 = g2;
        g3.dC.data = gb + (size_t)(R + N + 1) * es; /* a gap of one column: still disjoint */
        g3.dC.stride[3] = W;
        if (R >= 1) { /* (validation only: dC's last row then ends one column past the buffer) */
            g3.dB.data = gb + (size_t)(R - 1) * es;
            /* dC wraps one column into the next row: column 0, which is dB's when R == 1 */
            CHECK(selscan_validate_grads(&P.p, &g3) == (R >= 2 ? SELSCAN_OK : SELSCAN_ERR_ALIAS),
                  "%s: dB / dC one column apart, dC wrapping into the next row: %s", what, R >= 2 ? "accepted" : "refused");
        }
        g3 = g2;
        g3.du.data = gb; /* a contiguous output over the interleaved buffer */
        if ((size_t)(B * Dm * L) <= nbuf)
            CHECK(selscan_backward_cpu(&p2, &g3, ws, wb) == SELSCAN_ERR_ALIAS, "%s: du over the interleaved buffer refused", what);
    }
    outs_free(&sep);
    free(ws);
    free(gb);
    free(gb0);
    free_problem();
}

/* y and h_last side by side in rows of one buffer: (b, d) rows of L + N floats. */
static void interleaved_y_hlast(void) {
    const int64_t B = 2, Dm = 8, L = 20, N = 3, W = L + N;
    float *buf = (float *)malloc(sizeof(float) * (size_t)(B * Dm * W));
    size_t wf = 0;
    void *ws;
    outs sep;
    selscan_problem p2;
    selscan_diag dg;
    int64_t b, d, t, ok = 1;
    make_problem(SELSCAN_F32, 0, B, Dm, L, N);
    selscan_workspace_size(&P.p, NULL, &wf);
    ws = malloc(wf);
    poison_all();
    CHECK(selscan_forward_cpu(&P.p, ws, wf) == SELSCAN_OK, "forward separate");
    outs_take(&sep);
    p2 = P.p;
    p2.y.data = buf;
    p2.h_last.data = buf + L;
    p2.y.stride[0] = p2.h_last.stride[0] = Dm * W;
    p2.y.stride[1] = p2.h_last.stride[1] = W;
    p2.y.stride[2] = p2.h_last.stride[2] = 1;
    CHECK(selscan_forward_cpu(&p2, ws, wf) == SELSCAN_OK, "y / h_last interleaved accepted");
    for (b = 0; b < B; b++)
        for (d = 0; d < Dm; d++) {
            for (t = 0; t < L; t++)
                ok &= memcmp(buf + (b * Dm + d) * W + t, (float *)(void *)sep.b[0] + P.y.off + tc_off(&P.y, (b * Dm + d) * L + t), 4) == 0;
            for (t = 0; t < N; t++)
                ok &= memcmp(buf + (b * Dm + d) * W + L + t, (float *)(void *)sep.b[1] + P.hlast.off + tc_off(&P.hlast, (b * Dm + d) * N + t), 4) == 0;
        }
    CHECK(ok, "y / h_last interleaved: bitwise the separate buffers' values");
    CHECK(selscan_forward_ref(&p2, ws, wf) == SELSCAN_OK, "ref: y / h_last interleaved accepted");
    memset(&dg, 0, sizeof dg);
    p2.diag = &dg;
    p2.h_last.data = buf + L - 1;
    CHECK(selscan_forward_cpu(&p2, ws, wf) == SELSCAN_ERR_ALIAS && dg.operand && strcmp(dg.operand, "y") == 0 &&
              strcmp(dg.rule, "overlaps h_last") == 0,
          "h_last over y's last column refused");
    outs_free(&sep);
    free(ws);
    free(buf);
    free_problem();
}

/* the step's state and y in rows of N + 1 floats */
static void interleaved_step(void) {
    const int64_t B = 3, Dm = 40, N = 6, W = N + 1;
    tc_tensor u, dl, A, Bm, Cm, st, y;
    float *buf = (float *)malloc(sizeof(float) * (size_t)(B * Dm * W));
    selscan_step_problem s, s2;
    selscan_diag dg;
    int64_t b, d, n, ok = 1;
    tc_tensor_make(&u, SELSCAN_F32, 2, B, Dm, 1, 1, TC_LAYOUT_CONTIG, 1);
    tc_tensor_make(&dl, SELSCAN_F32, 2, B, Dm, 1, 1, TC_LAYOUT_CONTIG, 1);
    tc_tensor_make(&A, SELSCAN_F32, 2, Dm, N, 1, 1, TC_LAYOUT_CONTIG, 1);
    tc_tensor_make(&Bm, SELSCAN_F32, 3, B, 1, N, 1, TC_LAYOUT_CONTIG, 1);
    tc_tensor_make(&Cm, SELSCAN_F32, 3, B, 1, N, 1, TC_LAYOUT_CONTIG, 1);
    tc_tensor_make(&st, SELSCAN_F32, 3, B, Dm, N, 1, TC_LAYOUT_CONTIG, 1);
    tc_tensor_make(&y, SELSCAN_F32, 2, B, Dm, 1, 1, TC_LAYOUT_CONTIG, 1);
    tc_fill(&u, -1, 1); tc_fill(&dl, -2, 1); tc_fill(&A, -2, -0.1); tc_fill(&Bm, -1, 1); tc_fill(&Cm, -1, 1); tc_fill(&st, -1, 1);
    for (b = 0; b < B; b++)
        for (d = 0; d < Dm; d++)
            for (n = 0; n < N; n++) buf[(b * Dm + d) * W + n] = ((float *)st.data)[(b * Dm + d) * N + n];
    memset(&s, 0, sizeof s);
    s.batch = B; s.dim = Dm; s.dstate = N; s.dtype = SELSCAN_F32; s.flags = SELSCAN_DELTA_SOFTPLUS;
    s.u = tc_api(&u); s.delta = tc_api(&dl); s.A = tc_api(&A); s.B = tc_api(&Bm); s.C = tc_api(&Cm);
    s.state = tc_out(&st); s.y = tc_out(&y);
    CHECK(selscan_step_cpu(&s) == SELSCAN_OK, "step separate");
    s2 = s;
    s2.state.data = buf;
    s2.state.stride[0] = Dm * W; s2.state.stride[1] = W; s2.state.stride[2] = 1;
    s2.y.data = buf + N;
    s2.y.stride[0] = Dm * W; s2.y.stride[1] = W;
    CHECK(selscan_step_cpu(&s2) == SELSCAN_OK, "step: state / y interleaved accepted");
    for (b = 0; b < B; b++)
        for (d = 0; d < Dm; d++) {
            for (n = 0; n < N; n++) ok &= memcmp(buf + (b * Dm + d) * W + n, (float *)st.data + (b * Dm + d) * N + n, 4) == 0;
            ok &= memcmp(buf + (b * Dm + d) * W + N, (float *)y.data + b * Dm + d, 4) == 0;
        }
    CHECK(ok, "step: interleaved state / y bitwise the separate buffers' values");
    memset(&dg, 0, sizeof dg);
    s2.diag = &dg;
    s2.y.data = buf + N - 1;
    CHECK(selscan_step_cpu(&s2) == SELSCAN_ERR_ALIAS && selscan_step_ref(&s2) == SELSCAN_ERR_ALIAS && dg.operand &&
              strcmp(dg.operand, "state") == 0 && strcmp(dg.rule, "overlaps y") == 0,
          "step: y over the state's last column refused");
    tc_tensor_free(&u); tc_tensor_free(&dl); tc_tensor_free(&A); tc_tensor_free(&Bm); tc_tensor_free(&Cm);
    tc_tensor_free(&st); tc_tensor_free(&y);
    free(buf);
}

/* ------------------------------------------------------------------------ checkpoint used -- */
/* selscan_checkpoint_used says whether the CPU backward reads a checkpoint: a checkpoint of 1e6
   (not the forward's states) changes the gradients exactly when it answers 1; when it answers 0, the
   gradients are bitwise those without a checkpoint. */
static void checkpoint_used(int64_t N) {
    size_t wb = 0, ckb = 0, i;
    void *ws;
    float *ck;
    outs none;
    int used, same;
    char what[64];
    make_problem(SELSCAN_F32, 0, 1, 8, 150, N);
    used = selscan_checkpoint_used(&P.p);
    CHECK(used == (N <= 64), "checkpoint_used(N=%lld) = %d", (long long)N, used);
    selscan_workspace_size_parts(&P.p, &G.g, 2, &wb);
    selscan_checkpoint_size(&P.p, &ckb);
    ws = malloc(wb);
    ck = (float *)malloc(ckb);
    for (i = 0; i < ckb / 4; i++) ck[i] = 1e6f;
    poison_all();
    CHECK(bwd_parts(2, ws, wb, NULL, 0, 1) == SELSCAN_OK, "backward without checkpoint (N=%lld)", (long long)N);
    outs_take(&none);
    poison_all();
    CHECK(bwd_parts(2, ws, wb, ck, ckb, 1) == SELSCAN_OK, "backward with checkpoint (N=%lld)", (long long)N);
    same = 1;
    for (i = 2; i <= 10; i++) same = same && tc_same(out_t((int)i), none.b[i]);
    CHECK(same == !used, "N=%lld: a foreign checkpoint %s the gradients, but checkpoint_used = %d", (long long)N,
          same ? "left" : "changed", used);
    snprintf(what, sizeof what, "ignored checkpoint N=%lld", (long long)N);
    if (!used) outs_same(&none, 2, 10, what); /* names the gradient that differs */
    outs_free(&none);
    free(ws);
    free(ck);
    free_problem();
}

/* ---------------------------------------------------------------------- forgotten reduce -- */
static void forgotten_reduce(unsigned flags) {
    size_t wbp = 0, wfp = 0, ckb = 0;
    void *ws;
    float *ck;
    int pass;
    make_problem(SELSCAN_F32, flags, 2, 20, 90, 4);
    selscan_workspace_size_parts(&P.p, &G.g, 3, &wbp);
    selscan_workspace_size_parts(&P.p, NULL, 3, &wfp);
    selscan_checkpoint_size(&P.p, &ckb);
    ws = malloc(wbp > wfp ? wbp : wfp);
    ck = (float *)malloc(ckb);
    CHECK(fwd_parts(3, ws, wfp, ck, ckb) == SELSCAN_OK, "forward with checkpoints");
    for (pass = 0; pass < 2; pass++) {
        int64_t i;
        int nan_all = 1;
        tc_grads_poison(&G);
        memset(G.dA.mem, 0, (size_t)G.dA.alloc * 4); /* zeros: NaN must be written, not left from the poison */
        memset(G.dD.mem, 0, (size_t)G.dD.alloc * 4);
        memset(G.dbias.mem, 0, (size_t)G.dbias.alloc * 4);
        if (flags & SELSCAN_FIXED_B) memset(G.dB.mem, 0, (size_t)G.dB.alloc * 4);
        if (flags & SELSCAN_FIXED_C) memset(G.dC.mem, 0, (size_t)G.dC.alloc * 4);
        CHECK(bwd_parts(3, ws, wbp, pass ? ck : NULL, ckb, 0) == SELSCAN_OK, "backward parts (no reduce)");
        for (i = 0; i < G.dA.count; i++) nan_all &= isnan(tc_get(&G.dA, i));
        for (i = 0; i < G.dD.count; i++) nan_all &= isnan(tc_get(&G.dD, i)) && isnan(tc_get(&G.dbias, i));
        if (flags & SELSCAN_FIXED_B) for (i = 0; i < G.dB.count; i++) nan_all &= isnan(tc_get(&G.dB, i));
        if (flags & SELSCAN_FIXED_C) for (i = 0; i < G.dC.count; i++) nan_all &= isnan(tc_get(&G.dC, i));
        CHECK(nan_all, "%s without the reduce: dA, dD, ddelta_bias%s NaN", pass ? "ckpt parts" : "parts",
              flags ? ", fixed dB / dC" : "");
        CHECK(tc_unwritten(&G.du) == 0 && tc_unwritten(&G.dh0) == 0, "the parts wrote du and dh0");
        for (i = 0; i < 3; i++) selscan_backward_cpu_reduce(&P.p, &G.g, i, 3, ws, wbp);
        nan_all = 0;
        for (i = 0; i < G.dA.count; i++) nan_all |= isnan(tc_get(&G.dA, i));
        for (i = 0; i < G.dD.count; i++) nan_all |= isnan(tc_get(&G.dD, i)) || isnan(tc_get(&G.dbias, i));
        CHECK(!nan_all, "after the reduce: no NaN left");
    }
    free(ck);
    free(ws);
    free_problem();
}

/* --------------------------------------------------------------------------------- diag -- */
#define SENT ((const char *)"sentinel")
static selscan_diag D0;
static void diag_reset(void) { D0.operand = SENT; D0.rule = SENT; }
static void diag_is(const char *what, selscan_status st, selscan_status want, const char *operand) {
    CHECK(st == want, "%s: returned '%s', want '%s'", what, selscan_status_string(st), selscan_status_string(want));
    if (want == SELSCAN_OK)
        CHECK(D0.operand == SENT && D0.rule == SENT, "%s: diag written on OK", what);
    else
        CHECK(D0.operand && D0.rule && D0.operand != SENT && D0.rule != SENT && strcmp(D0.operand, operand) == 0 && *D0.rule,
              "%s: diag {%s, %s}, want operand %s", what, D0.operand && D0.operand != SENT ? D0.operand : "-",
              D0.rule && D0.rule != SENT ? D0.rule : "-", operand);
}

static void diag_table(void) {
    size_t wf = 0, wb = 0, wfp = 0, ckb = 0;
    void *ws;
    float *ck;
    int64_t cu[4] = {0, 5, 3, 40};
    selscan_problem p;
    selscan_grads g;
    make_problem(SELSCAN_F32, 0, 2, 8, 40, 4);
    selscan_workspace_size(&P.p, NULL, &wf);
    selscan_workspace_size(&P.p, &G.g, &wb);
    selscan_workspace_size_parts(&P.p, NULL, 2, &wfp);
    selscan_checkpoint_size(&P.p, &ckb);
    ws = malloc(wb + wf + wfp);
    ck = (float *)malloc(ckb);
#define DCASE(what, stmt, call, want, operand)                                                                     \
    do {                                                                                                           \
        p = P.p; g = G.g; (void)g; p.diag = &D0; diag_reset(); stmt;                                             \
        diag_is(what, call, want, operand);                                                                        \
    } while (0)
    DCASE("valid forward", (void)0, selscan_forward_cpu(&p, ws, wf), SELSCAN_OK, "");
    DCASE("valid backward", (void)0, selscan_backward_cpu(&p, &g, ws, wb), SELSCAN_OK, "");
    DCASE("valid validate", (void)0, selscan_validate(&p), SELSCAN_OK, "");
    DCASE("valid ckpt forward", (void)0, selscan_forward_cpu_ckpt(&p, ws, wf, ck, ckb), SELSCAN_OK, "");
    DCASE("u stride negative", p.u.stride[1] = -1, selscan_forward_cpu(&p, ws, wf), SELSCAN_ERR_STRIDE, "u");
    DCASE("u stride negative (validate)", p.u.stride[1] = -1, selscan_validate(&p), SELSCAN_ERR_STRIDE, "u");
    DCASE("u NULL", p.u.data = NULL, selscan_forward_ref(&p, ws, wf), SELSCAN_ERR_NULL, "u");
    DCASE("y NULL", p.y.data = NULL, selscan_forward_cpu(&p, ws, wf), SELSCAN_ERR_NULL, "y");
    DCASE("B stride overflow", p.B.stride[3] = INT64_MAX / 4, selscan_validate(&p), SELSCAN_ERR_STRIDE, "B");
    DCASE("h_last elements overlap", p.h_last.stride[1] = 0, selscan_forward_cpu(&p, ws, wf), SELSCAN_ERR_STRIDE, "h_last");
    DCASE("dtype", p.dtype = (selscan_dtype)9, selscan_validate(&p), SELSCAN_ERR_DTYPE, "dtype");
    DCASE("flags", p.flags |= 64u, selscan_forward_cpu(&p, ws, wf), SELSCAN_ERR_UNSUPPORTED, "flags");
    DCASE("batch 0", p.batch = 0, selscan_forward_cpu(&p, ws, wf), SELSCAN_ERR_SHAPE, "batch");
    DCASE("dstate -1", p.dstate = -1, selscan_backward_cpu(&p, &g, ws, wb), SELSCAN_ERR_SHAPE, "dstate");
    DCASE("n_groups 3", p.n_groups = 3, selscan_validate(&p), SELSCAN_ERR_SHAPE, "n_groups");
    DCASE("y over u", p.y.data = (void *)(uintptr_t)p.u.data, selscan_forward_cpu(&p, ws, wf), SELSCAN_ERR_ALIAS, "y");
    DCASE("workspace too small", (void)0, selscan_forward_cpu(&p, ws, 1), SELSCAN_ERR_WORKSPACE, "workspace");
    DCASE("workspace NULL", (void)0, selscan_backward_cpu(&p, &g, NULL, wb), SELSCAN_ERR_WORKSPACE, "workspace");
    DCASE("workspace too small (ref)", (void)0, selscan_backward_ref(&p, &g, ws, 8), SELSCAN_ERR_WORKSPACE, "workspace");
    DCASE("y in the workspace", p.y.data = ws, selscan_forward_cpu(&p, ws, wf), SELSCAN_ERR_ALIAS, "y");
    /* (malloc may place y inside the workspace's range too: then y is named first) */
    p = P.p; p.diag = &D0; diag_reset();
    CHECK(selscan_forward_cpu(&p, (void *)(uintptr_t)p.u.data, wf) == SELSCAN_ERR_ALIAS && D0.operand && D0.rule &&
              ((strcmp(D0.operand, "workspace") == 0 && strcmp(D0.rule, "overlaps u") == 0) || strcmp(D0.rule, "overlaps workspace") == 0),
          "workspace over u: diag {%s, %s}", D0.operand, D0.rule);
    DCASE("dy NULL", g.dy.data = NULL, selscan_backward_cpu(&p, &g, ws, wb), SELSCAN_ERR_NULL, "dy");
    DCASE("grads NULL", (void)0, selscan_validate_grads(&p, NULL), SELSCAN_ERR_NULL, "grads");
    DCASE("dz without z", p.z.data = NULL, selscan_backward_cpu(&p, &g, ws, wb), SELSCAN_ERR_NULL, "dz");
    DCASE("dB over dC", g.dB.data = g.dC.data, selscan_backward_cpu(&p, &g, ws, wb), SELSCAN_ERR_ALIAS, "dB");
    DCASE("dA over A", g.dA.data = (void *)(uintptr_t)p.A.data, selscan_validate_grads(&p, &g), SELSCAN_ERR_ALIAS, "dA");
    DCASE("dD stride", g.dD.stride[0] = -2, selscan_backward_ref(&p, &g, ws, wb), SELSCAN_ERR_STRIDE, "dD");
    DCASE("n_parts 0", (void)0, selscan_forward_cpu_part(&p, 0, 0, ws, wfp), SELSCAN_ERR_SHAPE, "n_parts");
    DCASE("part 2 of 2", (void)0, selscan_backward_cpu_reduce(&p, &g, 2, 2, ws, wb), SELSCAN_ERR_SHAPE, "part");
    DCASE("n_parts 0 (size)", (void)0, selscan_workspace_size_parts(&p, NULL, 0, &wfp), SELSCAN_ERR_SHAPE, "n_parts");
    DCASE("bytes NULL", (void)0, selscan_workspace_size(&p, NULL, NULL), SELSCAN_ERR_NULL, "bytes");
    DCASE("checkpoint NULL", (void)0, selscan_forward_cpu_ckpt(&p, ws, wf, NULL, ckb), SELSCAN_ERR_NULL, "checkpoint");
    DCASE("checkpoint short", (void)0, selscan_forward_cpu_ckpt(&p, ws, wf, ck, ckb - 4), SELSCAN_ERR_WORKSPACE, "checkpoint");
    DCASE("checkpoint over u", (void)0, selscan_forward_cpu_ckpt(&p, ws, wf, (float *)(uintptr_t)p.u.data, ckb),
          SELSCAN_ERR_ALIAS, "checkpoint");
    DCASE("checkpoint in du", (void)0, selscan_backward_cpu_ckpt(&p, &g, ws, wb, (const float *)g.du.data, ckb),
          SELSCAN_ERR_ALIAS, "checkpoint");
    /* packed sequences */
    DCASE("cu_seqlens with batch 2", (p.cu_seqlens = cu, p.n_seqs = 3), selscan_validate(&p), SELSCAN_ERR_SHAPE, "batch");
#undef DCASE
    free(ck);
    free(ws);
    free_problem();
    {
        tc_cfg c;
        memset(&c, 0, sizeof c);
        c.dt = SELSCAN_F32; c.batch = 1; c.dim = 4; c.L = 40; c.N = 3; c.G = 1; c.nseq = 3;
        c.layout = TC_LAYOUT_CONTIG;
        tc_prob_make(&P, &c);
        p = P.p;
        p.h0.data = NULL; p.h_last.data = NULL;
        p.diag = &D0;
        p.cu_seqlens = cu;
        diag_reset();
        diag_is("cu_seqlens decreasing", selscan_validate(&p), SELSCAN_ERR_SHAPE, "cu_seqlens");
        cu[1] = 1; cu[2] = 3; cu[3] = 39;
        diag_reset();
        diag_is("cu_seqlens last offset", selscan_validate(&p), SELSCAN_ERR_SHAPE, "cu_seqlens");
        cu[3] = 40;
        diag_reset();
        diag_is("cu_seqlens valid", selscan_validate(&p), SELSCAN_OK, "");
        p.n_seqs = 0;
        diag_reset();
        diag_is("n_seqs 0 with cu_seqlens", selscan_validate(&p), SELSCAN_ERR_SHAPE, "n_seqs");
        tc_prob_free(&P);
    }
    /* the step */
    {
        const int64_t B = 2, Dm = 4, N = 3;
        tc_tensor u, dl, A, Bm, Cm, st, y;
        int32_t idx[2] = {1, 1};
        selscan_step_problem s, s0;
        tc_tensor_make(&u, SELSCAN_F32, 2, B, Dm, 1, 1, TC_LAYOUT_CONTIG, 1);
        tc_tensor_make(&dl, SELSCAN_F32, 2, B, Dm, 1, 1, TC_LAYOUT_CONTIG, 1);
        tc_tensor_make(&A, SELSCAN_F32, 2, Dm, N, 1, 1, TC_LAYOUT_CONTIG, 1);
        tc_tensor_make(&Bm, SELSCAN_F32, 3, B, 1, N, 1, TC_LAYOUT_CONTIG, 1);
        tc_tensor_make(&Cm, SELSCAN_F32, 3, B, 1, N, 1, TC_LAYOUT_CONTIG, 1);
        tc_tensor_make(&st, SELSCAN_F32, 3, 3, Dm, N, 1, TC_LAYOUT_CONTIG, 1);
        tc_tensor_make(&y, SELSCAN_F32, 2, B, Dm, 1, 1, TC_LAYOUT_CONTIG, 1);
        tc_fill(&u, -1, 1); tc_fill(&dl, -1, 1); tc_fill(&A, -1, -0.1); tc_fill(&Bm, -1, 1); tc_fill(&Cm, -1, 1); tc_fill(&st, -1, 1);
        memset(&s0, 0, sizeof s0);
        s0.batch = B; s0.dim = Dm; s0.dstate = N; s0.n_cache = 3; s0.dtype = SELSCAN_F32; s0.state_index = idx;
        s0.u = tc_api(&u); s0.delta = tc_api(&dl); s0.A = tc_api(&A); s0.B = tc_api(&Bm); s0.C = tc_api(&Cm);
        s0.state = tc_out(&st); s0.y = tc_out(&y); s0.diag = &D0;
#define SCASE(what, stmt, call, want, operand) \
    do { s = s0; stmt; diag_reset(); diag_is(what, call, want, operand); } while (0)
        SCASE("step: state_index used twice", (void)0, selscan_step_cpu(&s), SELSCAN_ERR_ALIAS, "state_index");
        idx[0] = 0;
        SCASE("step: valid", (void)0, selscan_step_cpu(&s), SELSCAN_OK, "");
        SCASE("step: valid (ref)", (void)0, selscan_step_ref(&s), SELSCAN_OK, "");
        SCASE("step: index beyond n_cache", s.n_cache = 1, selscan_validate_step(&s), SELSCAN_ERR_SHAPE, "state_index");
        SCASE("step: u NULL", s.u.data = NULL, selscan_step_cpu(&s), SELSCAN_ERR_NULL, "u");
        SCASE("step: delta stride", s.delta.stride[0] = -1, selscan_step_ref(&s), SELSCAN_ERR_STRIDE, "delta");
        SCASE("step: y over state", s.y.data = st.data, selscan_step_cpu(&s), SELSCAN_ERR_ALIAS, "state");
        SCASE("step: y over u", s.y.data = u.data, selscan_step_cpu(&s), SELSCAN_ERR_ALIAS, "y");
        SCASE("step: n_cache without index", (s.state_index = NULL), selscan_step_cpu(&s), SELSCAN_ERR_SHAPE, "n_cache");
        SCASE("step: n_parts 0", (void)0, selscan_step_cpu_part(&s, 0, 0), SELSCAN_ERR_SHAPE, "n_parts");
#undef SCASE
        tc_tensor_free(&u); tc_tensor_free(&dl); tc_tensor_free(&A); tc_tensor_free(&Bm); tc_tensor_free(&Cm);
        tc_tensor_free(&st); tc_tensor_free(&y);
    }
}

/* -------------------------------------------------------------------------- SELSCAN_CPU -- */
static void cpu_env(void) {
    const char *e = getenv("SELSCAN_CPU"), *b = selscan_cpu_backend();
    CHECK(b && (strcmp(b, "avx512f") == 0 || strcmp(b, "avx2+fma") == 0 || strcmp(b, "neon") == 0 || strcmp(b, "portable") == 0),
          "selscan_cpu_backend() = %s", b ? b : "(null)");
    CHECK(selscan_cpu_backend() == b, "the backend is cached (same answer)");
    if (e && strcmp(e, "portable") == 0) CHECK(strcmp(b, "portable") == 0, "SELSCAN_CPU=portable: backend %s", b);
    if (e && strcmp(e, "avx2") == 0) CHECK(strcmp(b, "avx512f") != 0, "SELSCAN_CPU=avx2: backend %s", b);
    if (e) printf("SELSCAN_CPU=%s: backend %s\n", e, b);
}

int main(void) {
    tc_init("test_api");
    cpu_env();
    workspace_any_pointer(SELSCAN_F32);
    workspace_any_pointer(SELSCAN_BF16);
    interleaved_dBdC(SELSCAN_F32, 48);
    interleaved_dBdC(SELSCAN_F32, 1);
    interleaved_dBdC(SELSCAN_BF16, 7);
    interleaved_dBdC(SELSCAN_F16, 0);
    interleaved_y_hlast();
    interleaved_step();
    forgotten_reduce(0);
    forgotten_reduce(SELSCAN_FIXED_B | SELSCAN_FIXED_C);
    checkpoint_used(1);
    checkpoint_used(64);
    checkpoint_used(65);
    checkpoint_used(128);
    CHECK(selscan_checkpoint_used(NULL) == 0, "checkpoint_used(NULL)");
    diag_table();
    return tc_finish();
}
