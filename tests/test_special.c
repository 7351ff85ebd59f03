/* test_special: the backward's bitwise promise under Inf / NaN inputs (issue 21 item 3). On every
   vector path this machine runs (avx512f, avx2+fma, portable; neon and portable on arm64), for
   f32 / f16 / bf16, with +-inf and NaNs of both signs and odd payloads sprinkled into one input
   at a time (u, delta, A, B, C, D, z, delta_bias, h0, dy, dh_last) and into all of them at once:
     - the plain backward (1 and 3 parts) and the backward with the forward's checkpoints give
       bitwise the same gradients (every NaN the library writes into a gradient is the default
       quiet NaN: 0x7fc00000, f16 0x7e00, bf16 0x7fc0);
     - every gradient element is finite / +inf / -inf / NaN exactly where the scalar reference's
       is, for the outputs where the library's and the reference's arithmetic order allow no
       other answer (see class_checked below).
   Shapes: (2, 32, 88, 5) and N = 16, partial vector tiles, fixed / variable / grouped B and C,
   packed sequences, several chunks; then random problems. */
#define SELSCAN_IMPLEMENTATION
#include "../selscan.h"
#include "common.h"

static int isas[3], nisa;
static const char *isa_name(int isa) {
    return isa == SELSCAN__ISA_AVX512 ? "avx512f" : isa == SELSCAN__ISA_AVX2 ? "avx2" : isa == SELSCAN__ISA_NEON ? "neon" : "portable";
}

enum { S_U, S_DELTA, S_A, S_B, S_C, S_D, S_Z, S_BIAS, S_H0, S_DY, S_DHL, S_ALL, NSITES };
static const char *site_names[NSITES] = {"u", "delta", "A", "B", "C", "D", "z", "delta_bias", "h0", "dy", "dh_last", "all"};
static const char *gnames[9] = {"du", "ddelta", "dA", "dB", "dC", "dD", "dz", "ddelta_bias", "dh0"};

/* A special value's bits in dtype dt: 0 +inf, 1 -inf, 2 quiet NaN, 3 negative NaN with a
   payload, 4 quiet NaN with a payload. */
static void special_bits(selscan_dtype dt, int which, void *dst) {
    if (dt == SELSCAN_F32) {
        static const uint32_t v[5] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc12345u, 0x7fd0f00du};
        memcpy(dst, &v[which], 4);
    } else if (dt == SELSCAN_F16) {
        static const uint16_t v[5] = {0x7c00u, 0xfc00u, 0x7e00u, 0xfe15u, 0x7f0du};
        memcpy(dst, &v[which], 2);
    } else {
        static const uint16_t v[5] = {0x7f80u, 0xff80u, 0x7fc0u, 0xffc5u, 0x7fe3u};
        memcpy(dst, &v[which], 2);
    }
}

/* Special values into t: one element (dense 0) or about one in sixteen. */
static void sprinkle(tc_tensor *t, int dense) {
    int64_t i;
    if (!t->mem || !t->count) return;
    if (!dense) {
        i = tc_randint(0, t->count - 1);
        special_bits(t->dt, (int)tc_randint(0, 4), (unsigned char *)t->data + tc_off(t, i) * tc_esize(t->dt));
    } else {
        for (i = 0; i < t->count; i++)
            if (tc_randint(0, 15) == 0)
                special_bits(t->dt, (int)tc_randint(0, 4), (unsigned char *)t->data + tc_off(t, i) * tc_esize(t->dt));
    }
    tc_load(t);
}

static uint32_t bits_at(const tc_tensor *t, int64_t i) {
    const unsigned char *p = (const unsigned char *)t->data + tc_off(t, i) * tc_esize(t->dt);
    uint32_t u = 0;
    uint16_t h;
    if (t->dt == SELSCAN_F32) memcpy(&u, p, 4);
    else { memcpy(&h, p, 2); u = h; }
    return u;
}
static int is_canonical_nan(selscan_dtype dt, uint32_t u) {
    return dt == SELSCAN_F32 ? u == 0x7fc00000u : dt == SELSCAN_F16 ? u == 0x7e00u : u == 0x7fc0u;
}
/* 0 finite, 1 +inf, 2 -inf, 3 NaN */

static int64_t g_mismatch_total, g_class_total, g_cases;

typedef struct run_out {
    unsigned char *snap[9];
} run_out;

static selscan_status run_bwd(tc_prob *P, tc_grads *G, int isa, int64_t nparts, const float *ck, size_t ckb) {
    size_t bytes = 0;
    void *ws;
    selscan_status st;
    int64_t i;
    tc_grads_poison(G);
    st = selscan_workspace_size_parts(&P->p, &G->g, nparts, &bytes);
    if (st != SELSCAN_OK) return st;
    ws = tc_ws(bytes);
    for (i = 0; i < nparts && st == SELSCAN_OK; i++)
        st = selscan__backward_fast(&P->p, &G->g, i, nparts, ws, bytes, isa, ck, ckb);
    for (i = 0; i < nparts && st == SELSCAN_OK; i++) st = selscan__backward_reduce(&P->p, &G->g, i, nparts, ws, bytes);
    tc_ws_free(ws);
    return st;
}

/* Which outputs' classes (finite, +inf, -inf, NaN) the reference decides. The sums over time,
   batch and channels (dA, dB, dC, dD, dz) and dh0 take the same terms as the
   reference's in another order: their class depends on the order only when finite terms
   overflow, which the values here (|x| <= 3 before the specials) never do. Not decided by it:
     du, ddelta and its sum ddelta_bias: the library forms dt * sum_n dh_n B_n (u * sum_n ...),
       the reference sum_n dh_n dt B_n: with dt (u) = inf the first is +-inf where the second
       adds infinities of both signs (NaN);
     anything, when delta + bias > 20 (big): exp(dt A) below about -87.7 is 0 on the vector
       paths (CPU PATHS in selscan.h), a subnormal in libm's expf, and an inf times it is NaN in
       one and +-inf in the other (states, and all that follows from them). */
static int class_checked(int i, const tc_cfg *c) { return i != 0 && i != 1 && i != 7 && !c->big_delta; }

static void one_case(const tc_cfg *c0, int site, int dense, const char *label) {
    tc_prob P;
    tc_grads G;
    tc_tensor *outs[9];
    const void *gdata[9];
    double *ref[9];
    unsigned char *snap[9];
    char desc[400];
    tc_cfg c = *c0;
    size_t bytes, ckb = 0, fb = 0;
    void *ws, *fws;
    float *ck;
    selscan_status st;
    int ia, i;
    tc_prob_make(&P, &c);
    tc_grads_make(&G, &P, TC_G_ALL, 1);
    tc_grads_outputs(&G, outs, gdata);
    {
        tc_tensor *ins[S_ALL] = {&P.u, &P.delta, &P.A, &P.B, &P.C, &P.D, &P.z, &P.bias, &P.h0, &G.dy, &G.dhlast};
        if (site == S_ALL) for (i = 0; i < S_ALL; i++) sprinkle(ins[i], 1);
        else sprinkle(ins[site], dense);
    }
    tc_prob_describe(&P, desc, sizeof desc);
    snprintf(desc + strlen(desc), sizeof desc - strlen(desc), " [%s, specials in %s%s]", label, site_names[site],
             site == S_ALL || dense ? ", 1 in 16" : ", one");
    /* the reference */
    tc_grads_poison(&G);
    st = selscan_workspace_size(&P.p, &G.g, &bytes);
    ws = tc_ws(bytes);
    st = selscan_backward_ref(&P.p, &G.g, ws, bytes);
    tc_ws_free(ws);
    CHECK(st == SELSCAN_OK, "backward_ref: %s (%s)", selscan_status_string(st), desc);
    for (i = 0; i < 9; i++) {
        ref[i] = NULL;
        snap[i] = NULL;
        if (gdata[i]) {
            tc_load(outs[i]);
            ref[i] = (double *)malloc(sizeof(double) * (size_t)(outs[i]->count ? outs[i]->count : 1));
            memcpy(ref[i], outs[i]->v, sizeof(double) * (size_t)outs[i]->count);
        }
    }
    selscan_checkpoint_size(&P.p, &ckb);
    ck = (float *)malloc(ckb ? ckb : 4);
    selscan_workspace_size(&P.p, NULL, &fb);
    fws = tc_ws(fb);
    for (ia = 0; ia < nisa; ia++) {
        const int isa = isas[ia];
        int form;
        g_cases++;
        /* forms: 0 plain 1 part (the snapshot), 1 plain 3 parts, 2 with checkpoints (2 parts) */
        for (form = 0; form < 3; form++) {
            if (form == 2) {
                st = selscan__forward_fast(&P.p, 0, 1, fws, fb, isa, ck, ckb);
                CHECK(st == SELSCAN_OK, "%s forward with checkpoints: %s (%s)", isa_name(isa), selscan_status_string(st), desc);
                st = run_bwd(&P, &G, isa, 2, ck, ckb);
            } else {
                st = run_bwd(&P, &G, isa, form ? 3 : 1, NULL, 0);
            }
            if (!CHECK(st == SELSCAN_OK, "%s backward form %d: %s (%s)", isa_name(isa), form, selscan_status_string(st), desc)) continue;
            for (i = 0; i < 9; i++) {
                int64_t e, nan_bad = 0, cls_bad = 0, first = -1;
                if (!gdata[i]) continue;
                if (form == 0) {
                    free(snap[i]);
                    snap[i] = tc_snapshot(outs[i]);
                    for (e = 0; e < outs[i]->count; e++) {
                        const double v = tc_get(outs[i], e);
                        if (isnan(v) && !is_canonical_nan(outs[i]->dt, bits_at(outs[i], e))) nan_bad++;
                        if (class_checked(i, &c) && tc_class(v) != tc_class(ref[i][e])) {
                            if (first < 0) first = e;
                            cls_bad++;
                        }
                    }
                    CHECK(nan_bad == 0, "%s: %s has %lld NaNs other than the default quiet NaN (%s)", isa_name(isa),
                          gnames[i], (long long)nan_bad, desc);
                    g_class_total += cls_bad;
                    CHECK(cls_bad == 0, "%s: %s: %lld of %lld elements finite/inf/NaN unlike the reference (first [%lld]: %g, reference %g) (%s)",
                          isa_name(isa), gnames[i], (long long)cls_bad, (long long)outs[i]->count, (long long)first,
                          first >= 0 ? tc_get(outs[i], first) : 0.0, first >= 0 ? ref[i][first] : 0.0, desc);
                } else {
                    int64_t bad = 0;
                    for (e = 0; e < outs[i]->count; e++) {
                        const size_t es = tc_esize(outs[i]->dt), o = (size_t)(tc_off(outs[i], e) + outs[i]->off) * es;
                        if (memcmp(outs[i]->mem + o, snap[i] + o, es)) {
                            if (first < 0) first = e;
                            bad++;
                        }
                    }
                    g_mismatch_total += bad;
                    CHECK(bad == 0, "%s: %s %s: %lld of %lld elements not bitwise the plain 1-part backward's (first [%lld]: %g vs %g) (%s)",
                          isa_name(isa), gnames[i], form == 1 ? "with 3 parts" : "with checkpoints", (long long)bad,
                          (long long)outs[i]->count, (long long)first, first >= 0 ? tc_get(outs[i], first) : 0.0,
                          first >= 0 ? tc_decode(outs[i]->dt, snap[i] + (size_t)(tc_off(outs[i], first) + outs[i]->off) * tc_esize(outs[i]->dt)) : 0.0,
                          desc);
                }
            }
        }
    }
    for (i = 0; i < 9; i++) { free(ref[i]); free(snap[i]); }
    free(ck);
    tc_ws_free(fws);
    tc_grads_free(&G);
    tc_prob_free(&P);
}

static void cfg_fixed(tc_cfg *c, selscan_dtype dt, int64_t batch, int64_t dim, int64_t L, int64_t N, int64_t G,
                      unsigned flags, int nseq) {
    memset(c, 0, sizeof *c);
    c->dt = dt; c->batch = nseq ? 1 : batch; c->dim = dim; c->L = L; c->N = N; c->G = G;
    c->flags = flags;
    c->D = c->z = c->bias = c->h0 = c->hlast = 1;
    c->nseq = nseq;
    c->layout = -1;
}

int main(void) {
    const int quick = tc_quick();
    int d, k, site, i;
    tc_init("test_special");
    isas[0] = selscan__use_isa(SELSCAN__ISA_AVX512);
    nisa = 1;
    if (isas[0] == SELSCAN__ISA_AVX512) isas[nisa++] = SELSCAN__ISA_AVX2;
    if (isas[0] != SELSCAN__ISA_PORTABLE) isas[nisa++] = SELSCAN__ISA_PORTABLE;
    printf("paths:");
    for (i = 0; i < nisa; i++) printf(" %s", isa_name(isas[i]));
    printf("\n");
    for (d = 0; d < 3; d++) {
        const selscan_dtype dt = (selscan_dtype)d;
        const unsigned SP = SELSCAN_DELTA_SOFTPLUS, FB = SELSCAN_FIXED_B, FC = SELSCAN_FIXED_C;
        tc_cfg cs[9];
        static const char *labels[9] = {"(2,32,88,5)", "(2,32,88,16)", "partial tiles", "fixed B", "fixed C",
                                        "fixed B and C", "4 groups", "packed", "no softplus, N 17"};
        /* f32: all nine, specials dense and single; f16 / bf16: five of them, dense (quick: fewer) */
        static const int pick16[5] = {0, 2, 6, 7, 5};
        const int ncs = quick ? (d ? 2 : 5) : d ? 5 : 9;
        cfg_fixed(&cs[0], dt, 2, 32, 88, 5, 1, SP, 0);
        cfg_fixed(&cs[1], dt, 2, 32, 88, 16, 1, SP, 0);
        cfg_fixed(&cs[2], dt, 2, 20, 130, 16, 2, SP, 0);
        cfg_fixed(&cs[3], dt, 2, 24, 100, 16, 1, SP | FB, 0);
        cfg_fixed(&cs[4], dt, 1, 36, 70, 16, 2, SP | FC, 0);
        cfg_fixed(&cs[5], dt, 2, 18, 129, 8, 1, FB | FC, 0);
        cfg_fixed(&cs[6], dt, 2, 40, 90, 16, 4, SP, 0);
        cfg_fixed(&cs[7], dt, 1, 33, 200, 16, 1, SP, 4);
        cfg_fixed(&cs[8], dt, 2, 17, 150, 17, 1, 0, 0);
        for (k = 0; k < ncs; k++) {
            const int x = d ? pick16[k] : k;
            for (site = 0; site < NSITES; site++) {
                one_case(&cs[x], site, 1, labels[x]);
                if (site != S_ALL && !quick && !d) one_case(&cs[x], site, 0, labels[x]);
            }
        }
        for (k = 0; k < (quick ? 4 : 15); k++) {
            tc_cfg c;
            tc_cfg_random(&c, dt, 40000);
            c.bcast = 0;
            if (tc_coin(0.5)) c.dim = c.G * tc_randint(5, 30);
            one_case(&c, (int)tc_randint(0, NSITES - 1), (int)tc_randint(0, 1), "random");
        }
    }
    printf("cases (problem x path): %lld; elements not bitwise equal: %lld; class differences vs the reference: %lld\n",
           (long long)g_cases, (long long)g_mismatch_total, (long long)g_class_total);
    return tc_finish();
}
