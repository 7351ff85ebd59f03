/* test_ssd: Mamba-2's SSD scan (selscan_ssd_*, >>ssd-api), against a float64 naive recurrence
   written here from the math of >>ssd-api (not from the library's code):
   - the forward, the reference and the fast CPU forward (whose parts API must give bitwise
     forward_cpu's result for every n_parts), every element within the f32 rounding bound scaled by
     the absolute sum of its terms (bound());
   - every gradient of the backward against central finite differences (Richardson-extrapolated)
     of the float64 loss sum(dy * y) + sum(dfinal_state * final_state), element-wise within the same
     kind of bound: every combination of the options (D per head / per channel / absent, z,
     dt_bias, softplus, dt limits, initial_state, dfinal_state, seq_idx / cu_seqlens / neither,
     n_groups 1 and > 1) in f32, random combinations in f16 / bf16; any subset of gradients (the
     others untouched, nothing written outside the requested elements, inputs unchanged);
   - bitwise repeatability; seq_idx against cu_seqlens describing the same sequences;
   - validation: each operand's missing pointer, negative stride, span overflow, misalignment,
     own-element overlap and overlap with another operand or the workspace, every size, flag,
     sequence and workspace rule: the status, the operand and rule in diag, no output byte written;
   - NaN propagation: a NaN in any input shows in y; every NaN the backward writes is the default
     quiet NaN. */
#include "../selscan.h" /* the implementation: tests/selscan_impl.c, linked by the Makefile */
#include "common.h"

/* Tolerances: every element against the float64 oracle on the same (dtype-rounded) inputs, within
   the rounding error bound of f32 arithmetic (unit roundoff u32 = 2^-24) scaled by the sum of the
   absolute values of the element's terms, plus the T store's rounding: bound() below. */
#define U32 (1.0 / 16777216.0)

/* ------------------------------------------------------------------------------- problems -- */
typedef struct scfg {
    selscan_dtype dt;
    int64_t batch, L, H, P, N, G;
    int softplus, limit, Dhd; /* flags: SELSCAN_SSD_DT_SOFTPLUS, _DT_LIMIT, _D_HEADDIM */
    int D, z, bias, h0, hlast; /* operands present (hlast: final_state, and dfinal_state in the backward) */
    int seq;                   /* 0: none, 1: seq_idx, 2: cu_seqlens (batch 1) */
    int nseq;                  /* with cu_seqlens */
    int layout;                /* TC_LAYOUT_* for every tensor, -1: random per tensor */
    int bcast;                 /* random input layouts may broadcast (forward only) */
    int bigdt;                 /* with softplus: some dt_raw + dt_bias > 20 (softplus' threshold) */
    int parts;                 /* forward tests: the fast path's parts too */
} scfg;

typedef struct sprob {
    scfg c;
    int64_t rows;
    float dtmin, dtmax;
    int64_t *cu;
    int32_t *sid_mem, *sid; /* seq_idx memory (NULL: absent) and its data pointer */
    int64_t sid_s[2];       /* its strides */
    int64_t *sidv;          /* seq_idx's logical values (batch, L) */
    tc_tensor x, dt, A, B, C, D, z, bias, h0, y, hlast;
    selscan_ssd_problem p;
} sprob;

static int pick(const scfg *c, int input) {
    if (c->layout >= 0) return c->layout;
    return (int)tc_randint(0, input && c->bcast ? TC_LAYOUT_BCAST : TC_LAYOUT_PADDED);
}

static unsigned flags_of(const scfg *c) {
    return (c->softplus ? SELSCAN_SSD_DT_SOFTPLUS : 0u) | (c->limit ? SELSCAN_SSD_DT_LIMIT : 0u) |
           (c->Dhd ? SELSCAN_SSD_D_HEADDIM : 0u);
}

static void prob_api(sprob *S) {
    selscan_ssd_problem *p = &S->p;
    memset(p, 0, sizeof *p);
    p->batch = S->c.batch; p->seqlen = S->c.L; p->nheads = S->c.H; p->headdim = S->c.P; p->dstate = S->c.N;
    p->n_groups = S->c.G == 1 && tc_coin(0.5) ? 0 : S->c.G;
    p->dtype = S->c.dt;
    p->flags = flags_of(&S->c);
    p->dt_min = S->dtmin; p->dt_max = S->dtmax;
    p->cu_seqlens = S->cu;
    p->n_seqs = S->cu ? S->c.nseq : 0;
    p->x = tc_api(&S->x); p->dt = tc_api(&S->dt); p->A = tc_api(&S->A); p->B = tc_api(&S->B); p->C = tc_api(&S->C);
    p->D = tc_api(&S->D); p->z = tc_api(&S->z); p->dt_bias = tc_api(&S->bias); p->initial_state = tc_api(&S->h0);
    if (S->sid) {
        p->seq_idx.data = S->sid;
        p->seq_idx.stride[0] = S->sid_s[0];
        p->seq_idx.stride[1] = S->sid_s[1];
    }
    p->y = tc_out(&S->y);
    p->final_state = tc_out(&S->hlast);
}

/* dt before the clamp (after bias and softplus), in double, from the logical values */
static double pre_dt(const sprob *S, int64_t b, int64_t t, int64_t h) {
    double v = S->dt.v[(b * S->c.L + t) * S->c.H + h] + S->bias.v[h];
    if (S->c.softplus) v = tc_softplus(v);
    return v;
}

/* Keeps every dt (and dt + bias) away from the kinks by more than the finite differences' steps:
   softplus' threshold 20 and the clamp's ends. Resamples the offending dt_raw values. */
static void dt_margins(sprob *S) {
    int64_t b, t, h, tries;
    for (tries = 0; tries < 100; tries++) {
        int bad = 0;
        for (b = 0; b < S->c.batch; b++)
            for (t = 0; t < S->c.L; t++)
                for (h = 0; h < S->c.H; h++) {
                    const int64_t i = (b * S->c.L + t) * S->c.H + h;
                    const double raw = S->dt.v[i] + S->bias.v[h], v = pre_dt(S, b, t, h);
                    if ((S->c.softplus && fabs(raw - 20.0) < 0.05) ||
                        (S->c.limit && (fabs(v - S->dtmin) < 0.02 || fabs(v - S->dtmax) < 0.02))) {
                        S->dt.v[i] = tc_round(S->c.dt, S->c.softplus ? tc_uniform(-3, 1) : tc_uniform(0.05, 1));
                        bad = 1;
                    }
                }
        if (!bad) break;
    }
    tc_store(&S->dt);
    tc_load(&S->dt);
}

static void prob_make(sprob *S, const scfg *c) {
    const selscan_dtype T = c->dt;
    const int64_t Bt = c->batch, L = c->L, H = c->H, P = c->P, N = c->N, G = c->G;
    int64_t b, t, i;
    memset(S, 0, sizeof *S);
    S->c = *c;
    S->rows = c->seq == 2 ? c->nseq : Bt;
    if (c->seq == 2) {
        S->cu = (int64_t *)malloc(sizeof(int64_t) * (size_t)(c->nseq + 1));
        tc_cu_random(S->cu, c->nseq, L);
    }
    S->sidv = (int64_t *)calloc((size_t)(Bt * L), sizeof(int64_t));
    if (c->seq == 1) { /* runs of equal values; any values, changes up or down */
        int64_t alloc;
        const int lay = (int)tc_randint(0, 2);
        for (b = 0; b < Bt; b++) {
            int64_t v = tc_randint(0, 3);
            for (t = 0; t < L; t++) {
                if (t > 0 && tc_coin(0.3)) v = (v + tc_randint(1, 4)) % 6;
                S->sidv[b * L + t] = v;
            }
        }
        if (lay == 0) { S->sid_s[0] = L; S->sid_s[1] = 1; }          /* contiguous */
        else if (lay == 1) { S->sid_s[0] = 2 * L + 1; S->sid_s[1] = 2; } /* strided, padded */
        else { S->sid_s[0] = 1; S->sid_s[1] = Bt; }                   /* (L, batch) memory */
        alloc = (Bt - 1) * S->sid_s[0] + (L - 1) * S->sid_s[1] + 2;
        S->sid_mem = (int32_t *)malloc(sizeof(int32_t) * (size_t)alloc);
        for (i = 0; i < alloc; i++) S->sid_mem[i] = -7; /* gaps: never read */
        S->sid = S->sid_mem + 1;
        for (b = 0; b < Bt; b++)
            for (t = 0; t < L; t++) S->sid[b * S->sid_s[0] + t * S->sid_s[1]] = (int32_t)S->sidv[b * L + t];
        if (lay == 0 && tc_coin(0.5)) S->sid_s[0] = S->sid_s[1] = 0; /* contiguous as zero strides */
    }
    tc_tensor_make(&S->x, T, 4, Bt, L, H, P, pick(c, 1), 1);
    tc_tensor_make(&S->dt, T, 3, Bt, L, H, 1, pick(c, 1), 1);
    /* (1-D tensors never broadcast: one stride 0 reads as "all zero: contiguous") */
    tc_tensor_make(&S->A, SELSCAN_F32, 1, H, 1, 1, 1, pick(c, 0), 1);
    tc_tensor_make(&S->B, T, 4, Bt, L, G, N, pick(c, 1), 1);
    tc_tensor_make(&S->C, T, 4, Bt, L, G, N, pick(c, 1), 1);
    if (c->Dhd) tc_tensor_make(&S->D, SELSCAN_F32, 2, H, P, 1, 1, pick(c, 1), c->D);
    else tc_tensor_make(&S->D, SELSCAN_F32, 1, H, 1, 1, 1, pick(c, 0), c->D);
    tc_tensor_make(&S->z, T, 4, Bt, L, H, P, pick(c, 1), c->z);
    tc_tensor_make(&S->bias, SELSCAN_F32, 1, H, 1, 1, 1, pick(c, 0), c->bias);
    tc_tensor_make(&S->h0, SELSCAN_F32, 4, S->rows, H, P, N, pick(c, 1), c->h0);
    tc_tensor_make(&S->y, T, 4, Bt, L, H, P, pick(c, 0), 1);
    tc_tensor_make(&S->hlast, SELSCAN_F32, 4, S->rows, H, P, N, pick(c, 0), c->hlast);
    tc_fill(&S->x, -1, 1);
    /* (with dt past 20: slow decays, so that no gradient is too small for the differences) */
    if (c->softplus && c->bigdt) tc_fill(&S->A, -0.1, -0.03);
    else tc_fill(&S->A, -1.5, -0.2);
    tc_fill(&S->B, -1, 1);
    tc_fill(&S->C, -1, 1);
    tc_fill(&S->D, -1, 1);
    tc_fill(&S->z, -2, 2);
    tc_fill(&S->bias, -0.5, 0.5);
    tc_fill(&S->h0, -1, 1);
    if (c->softplus) tc_fill(&S->dt, -3, 1);
    else tc_fill(&S->dt, 0.05, 1);
    if (c->softplus && c->bigdt) { /* a few past the threshold: softplus(x) = x there */
        for (i = 0; i < S->dt.count; i += 3) S->dt.v[i] = tc_round(T, tc_uniform(21, 24));
        tc_store(&S->dt);
        tc_load(&S->dt);
    }
    /* the clamp's ends inside the range of dt, so that some are clamped on each side */
    S->dtmin = c->limit ? (float)tc_uniform(0.1, 0.3) : 0.0f;
    S->dtmax = c->limit ? (float)tc_uniform(0.6, 0.9) : 0.0f;
    if (c->limit && c->bigdt && tc_coin(0.5)) S->dtmax = INFINITY;
    if (!c->bcast) dt_margins(S);
    prob_api(S);
}

static void prob_free(sprob *S) {
    tc_tensor *t[] = {&S->x, &S->dt, &S->A, &S->B, &S->C, &S->D, &S->z, &S->bias, &S->h0, &S->y, &S->hlast};
    size_t k;
    for (k = 0; k < sizeof t / sizeof t[0]; k++) tc_tensor_free(t[k]);
    free(S->cu);
    free(S->sid_mem);
    free(S->sidv);
    memset(S, 0, sizeof *S);
}

static void describe(const sprob *S, char *buf, size_t size) {
    const scfg *c = &S->c;
    snprintf(buf, size, "%s batch %lld L %lld H %lld P %lld N %lld G %lld%s%s%s%s%s%s%s%s%s%s", tc_dtname(c->dt),
             (long long)c->batch, (long long)c->L, (long long)c->H, (long long)c->P, (long long)c->N, (long long)c->G,
             c->softplus ? " softplus" : "", c->limit ? " limit" : "",
             c->D ? (c->Dhd ? " D(H,P)" : " D(H)") : (c->Dhd ? " dD(H,P)" : ""), c->z ? " z" : "",
             c->bias ? " dt_bias" : "", c->h0 ? " initial_state" : "", c->hlast ? " final_state" : "",
             c->seq == 1   ? " seq_idx"
             : c->seq == 2 ? " cu_seqlens"
                           : "",
             c->bigdt ? " dt>20" : "", c->layout == TC_LAYOUT_CONTIG ? " contiguous" : "");
}

/* ----------------------------------------------------------------------- float64 oracle -- */
enum { G_DX, G_DDT, G_DA, G_DB, G_DC, G_DD, G_DZ, G_DBIAS, G_DH0, NG };
static const char *gnames[NG] = {"dx", "ddt", "dA", "dB", "dC", "dD", "dz", "ddt_bias", "dinitial_state"};

/* The sequences of batch row b, in order (k = 0, 1, ...; 0 after the last): [t0, t1), the state
   row, whether initial_state enters and final_state is written. t1 carries the position. */
static int oseq(const sprob *S, int64_t b, int64_t k, int64_t *t0, int64_t *t1, int64_t *row, int *first, int *last) {
    const scfg *c = &S->c;
    if (c->seq == 2) {
        if (k >= c->nseq) return 0;
        *t0 = S->cu[k]; *t1 = S->cu[k + 1]; *row = k; *first = *last = 1;
        return 1;
    }
    *t0 = k == 0 ? 0 : *t1;
    if (*t0 >= c->L) return 0;
    *t1 = c->seq == 0 ? c->L : *t0 + 1;
    while (c->seq == 1 && *t1 < c->L && S->sidv[b * c->L + *t1] == S->sidv[b * c->L + *t1 - 1]) ++*t1;
    *row = b; *first = *t0 == 0; *last = *t1 == c->L;
    return 1;
}

/* dt of (b, t, h) after the clamp */
static double odt(const sprob *S, int64_t b, int64_t t, int64_t h) {
    const double v = pre_dt(S, b, t, h);
    return S->c.limit ? (v < S->dtmin ? S->dtmin : v > S->dtmax ? S->dtmax : v) : v;
}

/* logical indices */
#define IX(b, t, h, p) ((((b) * c->L + (t)) * c->H + (h)) * c->P + (p))
#define IDT(b, t, h) (((b) * c->L + (t)) * c->H + (h))
#define IBC(b, t, g, n) ((((b) * c->L + (t)) * c->G + (g)) * c->N + (n))
#define IST(r, h, p, n) ((((r) * c->H + (h)) * c->P + (p)) * c->N + (n))
#define IDV(h, p) (c->Dhd ? (h) * c->P + (p) : (h))
/* ab: every value by its absolute value (the decay a = exp(dt A) is positive either way) */
#define AV(v) (ab ? fabs(v) : (v))

/* The recurrence of >>ssd-api, plainly: per (b, h, p), sequence by sequence. y: batch*L*H*P and
   fin: rows*H*P*N in logical order (fin may be NULL). Reads every tensor's logical values (zeros
   for an absent D, dt_bias or initial_state); z only when present. With ab: the same on absolute
   values, so y and fin are the sums of the absolute values of their terms (the scale of the f32
   rounding errors: see bound()). */
static void oracle(const sprob *S, int ab, double *y, double *fin) {
    const scfg *c = &S->c;
    const int64_t hpg = c->H / c->G;
    double st[64];
    int64_t b, h, p, n, t, k, t0, t1, row;
    int first, last;
    for (b = 0; b < c->batch; b++)
        for (h = 0; h < c->H; h++)
            for (p = 0; p < c->P; p++)
                for (k = 0; oseq(S, b, k, &t0, &t1, &row, &first, &last); k++) {
                    const int64_t g = h / hpg;
                    for (n = 0; n < c->N; n++) st[n] = first ? AV(S->h0.v[IST(row, h, p, n)]) : 0.0;
                    for (t = t0; t < t1; t++) {
                        const double dt = odt(S, b, t, h), a = exp(dt * S->A.v[h]), x = AV(S->x.v[IX(b, t, h, p)]);
                        double yv = 0;
                        for (n = 0; n < c->N; n++) {
                            st[n] = a * st[n] + AV(dt) * AV(S->B.v[IBC(b, t, g, n)]) * x;
                            yv += AV(S->C.v[IBC(b, t, g, n)]) * st[n];
                        }
                        if (c->D || S->D.v[IDV(h, p)] != 0) /* no D: no term, not 0 x (fd_grad's D moves off 0: dD at D = 0) */
                            yv += AV(S->D.v[IDV(h, p)]) * x;
                        if (c->z) yv *= AV(tc_silu(S->z.v[IX(b, t, h, p)]));
                        y[IX(b, t, h, p)] = yv;
                    }
                    if (last && fin)
                        for (n = 0; n < c->N; n++) fin[IST(row, h, p, n)] = st[n];
                }
}

/* The analytic gradients of the loss sum(dy * y) + sum(dfin * fin) (dfin may be NULL) in float64,
   into gr[G_*] (each the size of its input, logical order). With ab: the same on absolute values
   (and |A| where dt's gradient takes d a / d dt = A a), so each gradient is the sum of the absolute
   values of its terms. Only for the tolerances: the gradients checked are the finite differences'. */
static void oracle_bwd(const sprob *S, int ab, const double *dy, const double *dfin, double *const gr[]) {
    const scfg *c = &S->c;
    const int64_t hpg = c->H / c->G;
    double *hs = (double *)malloc(sizeof(double) * (size_t)((c->L + 1) * c->N)), dh[64];
    int64_t b, h, p, n, t, k, t0, t1, row, i;
    int first, last, j;
    const tc_tensor *in[NG] = {&S->x, &S->dt, &S->A, &S->B, &S->C, &S->D, &S->z, &S->bias, &S->h0};
    for (j = 0; j < NG; j++)
        for (i = 0; i < in[j]->count; i++) gr[j][i] = 0;
    for (b = 0; b < c->batch; b++)
        for (h = 0; h < c->H; h++) {
            const int64_t g = h / hpg;
            const double A = S->A.v[h];
            for (p = 0; p < c->P; p++)
                for (k = 0; oseq(S, b, k, &t0, &t1, &row, &first, &last); k++) {
                    for (n = 0; n < c->N; n++) hs[n] = first ? AV(S->h0.v[IST(row, h, p, n)]) : 0.0;
                    for (t = t0; t < t1; t++) {
                        const double dt = odt(S, b, t, h), a = exp(dt * A), x = AV(S->x.v[IX(b, t, h, p)]);
                        for (n = 0; n < c->N; n++)
                            hs[(t - t0 + 1) * c->N + n] =
                                a * hs[(t - t0) * c->N + n] + AV(dt) * AV(S->B.v[IBC(b, t, g, n)]) * x;
                    }
                    for (n = 0; n < c->N; n++) dh[n] = last && dfin ? AV(dfin[IST(row, h, p, n)]) : 0.0;
                    for (t = t1 - 1; t >= t0; t--) {
                        const double *St = hs + (t - t0 + 1) * c->N, *Sp = St - c->N;
                        const double dt = odt(S, b, t, h), a = exp(dt * A), x = AV(S->x.v[IX(b, t, h, p)]);
                        const double Dv = AV(S->D.v[IDV(h, p)]);
                        double dy0 = AV(dy[IX(b, t, h, p)]), da = 0, dBx = 0, dx;
                        if (c->z) {
                            const double z = S->z.v[IX(b, t, h, p)], sg = 1 / (1 + exp(-z));
                            double y0 = Dv * x;
                            for (n = 0; n < c->N; n++) y0 += AV(S->C.v[IBC(b, t, g, n)]) * St[n];
                            /* silu'(z) = sg (1 + z (1 - sg)): its two terms' absolute sum with ab */
                            gr[G_DZ][IX(b, t, h, p)] =
                                dy0 * y0 * (ab ? sg * (1 + fabs(z) * (1 - sg)) : sg * (1 + z * (1 - sg)));
                            dy0 *= AV(z * sg);
                        }
                        gr[G_DD][IDV(h, p)] += dy0 * x;
                        dx = dy0 * Dv;
                        for (n = 0; n < c->N; n++) {
                            const double Bv = AV(S->B.v[IBC(b, t, g, n)]), Cv = AV(S->C.v[IBC(b, t, g, n)]);
                            const double dhn = dh[n] + dy0 * Cv;
                            gr[G_DC][IBC(b, t, g, n)] += dy0 * St[n];
                            da += dhn * Sp[n];
                            dBx += dhn * Bv;
                            dx += dhn * AV(dt) * Bv;
                            gr[G_DB][IBC(b, t, g, n)] += dhn * AV(dt) * x;
                            dh[n] = dhn * a;
                        }
                        gr[G_DDT][IDT(b, t, h)] += da * a * AV(A) + dBx * x; /* d/d dt, before the clamp and softplus */
                        gr[G_DA][h] += da * a * AV(dt);
                        gr[G_DX][IX(b, t, h, p)] = dx;
                    }
                    if (first)
                        for (n = 0; n < c->N; n++) gr[G_DH0][IST(row, h, p, n)] = dh[n];
                }
            for (t = 0; t < c->L; t++) { /* through the clamp and the softplus to dt_raw */
                const double raw = S->dt.v[IDT(b, t, h)] + S->bias.v[h], pre = pre_dt(S, b, t, h);
                double *v = &gr[G_DDT][IDT(b, t, h)];
                if (c->limit && (pre < S->dtmin || pre > S->dtmax)) *v = 0;
                if (c->softplus && raw <= 20) *v /= 1 + exp(-raw);
                gr[G_DBIAS][h] += *v;
            }
        }
    free(hs);
}

/* The error bound of an element computed in f32 and stored in dtype dt: |got - ref| <=
   K u32 mag + u_T |ref| + s_T, with mag the sum of the absolute values of its terms (oracle(ab)):
   a sum or product of f32 values is within (its number of operations) u32 of its terms' absolute
   sum, and K = 8 (L (N + 4) + P H + batch L) covers the longest chain of operations into any
   output here (the recurrence over L steps, the sums over states, channels, heads and steps);
   u_T the store's rounding (0 for f32), s_T half the smallest f16 subnormal (f16 only); floor the
   finite differences' own error. */
static double Kof(const scfg *c) { return 4.0 * (double)(c->L * (c->N + 4) + c->P * c->H + c->batch * c->L); }
static double bound(const scfg *c, selscan_dtype dt, double ref, double mag, double floor) {
    const double uT = dt == SELSCAN_F32 ? 0.0 : dt == SELSCAN_F16 ? 1.0 / 2048 : 1.0 / 256;
    const double sT = dt == SELSCAN_F16 ? ldexp(1.0, -25) : 0.0;
    return Kof(c) * U32 * mag * (1 + uT) + uT * fabs(ref) + sT + floor;
}

/* Every element of got against ref within bound(); returns the elements out of it; *worst: the
   largest |got - ref| / bound seen. */
static int64_t check_elems(const scfg *c, const tc_tensor *got, const double *ref, const double *mag, double floor,
                           double *worst, int64_t *first_bad) {
    int64_t i, bad = 0;
    *first_bad = -1;
    for (i = 0; i < got->count; i++) {
        const double v = tc_get(got, i), e = fabs(v - ref[i]), bd = bound(c, got->dt, ref[i], mag[i], floor);
        if (!(e <= bd)) {
            if (bad++ == 0) *first_bad = i;
        }
        if (got->dt == SELSCAN_F32 && e / bd > *worst) *worst = e / bd; /* (T outputs: their rounding dominates) */
    }
    return bad;
}

static double oracle_loss(const sprob *S, const double *dy, const double *dfin) {
    const int64_t ny = S->x.count, nf = S->h0.count;
    double *y = (double *)malloc(sizeof(double) * (size_t)ny), *f = (double *)calloc((size_t)nf, sizeof(double)), l = 0;
    int64_t i;
    oracle(S, 0, y, f);
    for (i = 0; i < ny; i++) l += dy[i] * y[i];
    if (dfin)
        for (i = 0; i < nf; i++) l += dfin[i] * f[i];
    free(y);
    free(f);
    return l;
}

/* d loss / d v[i] for every logical element of input t: central differences at steps e and e/2,
   Richardson-extrapolated ((4 D(e/2) - D(e)) / 3: error O(e^4)). */
static void fd_grad(sprob *S, tc_tensor *t, const double *dy, const double *dfin, double *out) {
    int64_t i;
    for (i = 0; i < t->count; i++) {
        const double old = t->v[i], e = 1e-3 * (fabs(old) > 1 ? fabs(old) : 1);
        double l[4], d1, d2;
        const double steps[4] = {e, -e, e / 2, -e / 2};
        int k;
        for (k = 0; k < 4; k++) {
            t->v[i] = old + steps[k];
            l[k] = oracle_loss(S, dy, dfin);
        }
        t->v[i] = old;
        d1 = (l[0] - l[1]) / (2 * e);
        d2 = (l[2] - l[3]) / e;
        out[i] = (4 * d2 - d1) / 3;
    }
}

/* ---------------------------------------------------------------------------- gradients -- */

typedef struct sgrads {
    tc_tensor dy, dfin, out[NG];
    unsigned want;
    selscan_ssd_grads g;
} sgrads;

static tc_tensor *grad_input(sprob *S, int k) {
    tc_tensor *t[NG] = {&S->x, &S->dt, &S->A, &S->B, &S->C, &S->D, &S->z, &S->bias, &S->h0};
    return t[k];
}

static void grads_api(sgrads *G) {
    selscan_out_tensor *o[NG] = {&G->g.dx,       &G->g.ddt,           &G->g.dA, &G->g.dB, &G->g.dC, &G->g.dD, &G->g.dz,
                                 &G->g.ddt_bias, &G->g.dinitial_state};
    int k;
    memset(&G->g, 0, sizeof G->g);
    G->g.dy = tc_api(&G->dy);
    G->g.dfinal_state = tc_api(&G->dfin);
    for (k = 0; k < NG; k++)
        if (G->want >> k & 1) *o[k] = tc_out(&G->out[k]);
}

/* dy (and dfinal_state when the problem has final_state) random; the outputs in want (bits G_*;
   dz dropped without z), each allocated (poisoned) either way so that untouched ones can be seen */
static void grads_make(sgrads *G, sprob *S, unsigned want) {
    int k;
    memset(G, 0, sizeof *G);
    if (!S->c.z) want &= ~(1u << G_DZ);
    G->want = want;
    tc_tensor_make(&G->dy, S->c.dt, 4, S->c.batch, S->c.L, S->c.H, S->c.P, pick(&S->c, 0), 1);
    tc_tensor_make(&G->dfin, SELSCAN_F32, 4, S->rows, S->c.H, S->c.P, S->c.N, pick(&S->c, 0), S->c.hlast);
    tc_fill(&G->dy, -1, 1);
    tc_fill(&G->dfin, -1, 1);
    for (k = 0; k < NG; k++) {
        const tc_tensor *in = grad_input(S, k);
        tc_tensor_make(&G->out[k], in->dt, in->nd, in->n[0], in->n[1], in->n[2], in->n[3], pick(&S->c, 0), 1);
    }
    grads_api(G);
}

static void grads_free(sgrads *G) {
    int k;
    tc_tensor_free(&G->dy);
    tc_tensor_free(&G->dfin);
    for (k = 0; k < NG; k++) tc_tensor_free(&G->out[k]);
}

typedef selscan_status (*fwd_fn)(const selscan_ssd_problem *, void *, size_t);
static const struct { const char *name; fwd_fn f; } fwds[] = {{"ref", selscan_ssd_forward_ref}, {"cpu", selscan_ssd_forward_cpu}};

static selscan_status run_fwd_with(const selscan_ssd_problem *p, fwd_fn f) {
    size_t bytes = 0;
    void *ws;
    selscan_status st = selscan_ssd_workspace_size(p, NULL, &bytes);
    if (st != SELSCAN_OK) return st;
    ws = tc_ws(bytes);
    st = f(p, bytes ? ws : NULL, bytes);
    tc_ws_free(ws);
    return st;
}
static selscan_status run_fwd(const selscan_ssd_problem *p) { return run_fwd_with(p, selscan_ssd_forward_ref); }

/* the backwards: the reference and the fast CPU path (one call: part then reduce) */
typedef selscan_status (*bwd_fn)(const selscan_ssd_problem *, const selscan_ssd_grads *, void *, size_t);
static const struct { const char *name; bwd_fn f; } bwds[] = {{"ref", selscan_ssd_backward_ref},
                                                             {"cpu", selscan_ssd_backward_cpu}};
#define NBWD 2

/* A backward (bwds[which]) with poisoned outputs and a fresh workspace: status, the requested
   outputs all written and nothing outside them, the others untouched, inputs unchanged. */
static int run_bwd_with(sprob *S, sgrads *G, const char *desc0, int which) {
    tc_tensor *ins[] = {&S->x, &S->dt, &S->A, &S->B, &S->C, &S->D, &S->z, &S->bias, &S->h0, &G->dy, &G->dfin};
    unsigned char *snaps[11];
    size_t bytes = 0;
    void *ws;
    selscan_status st;
    int i, same = 1, ok;
    int64_t unwritten = 0, dirty = 0;
    char desc[340];
    snprintf(desc, sizeof desc, "backward_%s: %s", bwds[which].name, desc0);
    for (i = 0; i < 11; i++) snaps[i] = tc_snapshot(ins[i]);
    for (i = 0; i < NG; i++) tc_poison(&G->out[i]);
    st = selscan_ssd_workspace_size(&S->p, &G->g, &bytes);
    CHECK(st == SELSCAN_OK, "workspace_size: %s (%s)", selscan_status_string(st), desc);
    ws = tc_ws(bytes);
    st = bwds[which].f(&S->p, &G->g, bytes ? ws : NULL, bytes);
    tc_ws_free(ws);
    ok = CHECK(st == SELSCAN_OK, "backward status %s (%s)", selscan_status_string(st), desc);
    for (i = 0; i < 11; i++) { same &= tc_same(ins[i], snaps[i]); free(snaps[i]); }
    if (!ok) return 0;
    CHECK(same, "backward: an input changed (%s)", desc);
    for (i = 0; i < NG; i++) {
        if (G->want >> i & 1) { unwritten += tc_unwritten(&G->out[i]); dirty += tc_gaps_dirty(&G->out[i]); }
        else dirty += G->out[i].count - tc_unwritten(&G->out[i]);
    }
    CHECK(unwritten == 0 && dirty == 0, "backward: %lld requested elements unwritten, %lld written outside (%s)",
          (long long)unwritten, (long long)dirty, desc);
    return 1;
}
static int run_bwd(sprob *S, sgrads *G, const char *desc) { return run_bwd_with(S, G, desc, 0); }

/* ------------------------------------------------------------------------------ forward -- */
/* The fast forward split into n_parts parts (run one after the other, on one workspace of
   selscan_ssd_workspace_size_parts bytes): bitwise the result of selscan_ssd_forward_cpu. */
static void parts_case(sprob *S, const char *desc) {
    static const int64_t nps[] = {2, 3, 7, 64};
    unsigned char *y1, *f1;
    size_t k;
    tc_poison(&S->y);
    tc_poison(&S->hlast);
    if (!CHECK(run_fwd_with(&S->p, selscan_ssd_forward_cpu) == SELSCAN_OK, "parts: forward_cpu (%s)", desc)) return;
    y1 = tc_snapshot(&S->y);
    f1 = tc_snapshot(&S->hlast);
    for (k = 0; k < sizeof nps / sizeof nps[0]; k++) {
        size_t bytes = 0;
        void *ws;
        int64_t part;
        selscan_status st = selscan_ssd_workspace_size_parts(&S->p, NULL, nps[k], &bytes);
        int ok = st == SELSCAN_OK;
        tc_poison(&S->y);
        tc_poison(&S->hlast);
        ws = tc_ws(bytes);
        for (part = nps[k] - 1; ok && part >= 0; part--) /* any order */
            ok &= selscan_ssd_forward_cpu_part(&S->p, part, nps[k], ws, bytes) == SELSCAN_OK;
        tc_ws_free(ws);
        CHECK(ok && tc_same(&S->y, y1) && tc_same(&S->hlast, f1), "parts: %lld parts not bitwise forward_cpu's (%s)",
              (long long)nps[k], desc);
    }
    free(y1);
    free(f1);
}

static double worst_fwd; /* the largest error seen relative to its tolerance (printed) */

static void fwd_case(const scfg *c) {
    sprob S;
    double *y, *fin, *ym, *fm;
    char desc[300];
    unsigned char *snap;
    selscan_status st;
    int64_t bad, at;
    int k;
    prob_make(&S, c);
    describe(&S, desc, sizeof desc);
    y = (double *)malloc(sizeof(double) * (size_t)S.x.count);
    ym = (double *)malloc(sizeof(double) * (size_t)S.x.count);
    fin = (double *)malloc(sizeof(double) * (size_t)S.h0.count);
    fm = (double *)malloc(sizeof(double) * (size_t)S.h0.count);
    oracle(&S, 0, y, fin);
    oracle(&S, 1, ym, fm);
    snap = tc_snapshot(&S.x);
    for (k = 0; k < 2; k++) {
        const char *nm = fwds[k].name;
        tc_poison(&S.y);
        tc_poison(&S.hlast);
        st = run_fwd_with(&S.p, fwds[k].f);
        if (!CHECK(st == SELSCAN_OK, "forward %s: status %s (%s)", nm, selscan_status_string(st), desc)) continue;
        CHECK(tc_same(&S.x, snap), "forward %s: x changed (%s)", nm, desc);
        CHECK(tc_unwritten(&S.y) == 0 && tc_gaps_dirty(&S.y) == 0,
              "forward %s: y not all written or written outside (%s)", nm, desc);
        bad = check_elems(c, &S.y, y, ym, 0.0, &worst_fwd, &at);
        CHECK(bad == 0, "forward %s: %lld elements of y out of bound, the first [%lld] %.9g vs %.9g (%s)", nm,
              (long long)bad, (long long)at, at >= 0 ? tc_get(&S.y, at) : 0.0, at >= 0 ? y[at] : 0.0, desc);
        if (c->hlast) {
            bad = check_elems(c, &S.hlast, fin, fm, 0.0, &worst_fwd, &at);
            CHECK(tc_unwritten(&S.hlast) == 0 && tc_gaps_dirty(&S.hlast) == 0,
                  "forward %s: final_state not all written or written outside (%s)", nm, desc);
            CHECK(bad == 0, "forward %s: %lld elements of final_state out of bound, the first [%lld] %.9g vs %.9g (%s)",
                  nm, (long long)bad, (long long)at, at >= 0 ? tc_get(&S.hlast, at) : 0.0, at >= 0 ? fin[at] : 0.0, desc);
        }
    }
    if (c->parts) parts_case(&S, desc);
    free(snap);
    free(y);
    free(ym);
    free(fin);
    free(fm);
    prob_free(&S);
}

/* a random configuration with batch * L * H * P * N <= max_work */
static void cfg_random(scfg *c, selscan_dtype dt, int64_t max_work) {
    memset(c, 0, sizeof *c);
    c->dt = dt;
    do {
        c->batch = tc_randint(1, 3);
        c->L = tc_randint(1, 40);
        c->G = tc_randint(1, 3);
        c->H = c->G * tc_randint(1, 3);
        c->P = tc_randint(1, 6);
        c->N = tc_randint(1, 16);
    } while (c->batch * c->L * c->H * c->P * c->N > max_work);
    c->softplus = tc_coin(0.5);
    c->limit = tc_coin(0.4);
    c->Dhd = tc_coin(0.4);
    c->D = tc_coin(0.7);
    c->z = tc_coin(0.5);
    c->bias = tc_coin(0.5);
    c->h0 = tc_coin(0.5);
    c->hlast = tc_coin(0.6);
    c->seq = (int)tc_randint(0, 2);
    if (c->seq == 2) { c->batch = 1; c->nseq = (int)tc_randint(1, 4); }
    c->bigdt = c->softplus && tc_coin(0.2);
    c->layout = tc_coin(0.25) ? TC_LAYOUT_CONTIG : -1;
    c->bcast = 0;
}

static void forward_tests(void) {
    int i, k;
    const selscan_dtype dts[3] = {SELSCAN_F32, SELSCAN_F16, SELSCAN_BF16};
    const int n = tc_quick() ? 20 : 80;
    for (k = 0; k < 3; k++)
        for (i = 0; i < n; i++) {
            scfg c;
            cfg_random(&c, dts[k], 20000);
            c.bcast = tc_coin(0.3); /* broadcast inputs (stride 0) read like any other */
            c.parts = tc_coin(0.2);
            fwd_case(&c);
        }
    /* the fast path's blocks: several chunks (L past 32, sequences across them), heads of more than
       one block of 64 channels (the last partial), states not a multiple of 8, every vector's
       lanes; and a longer sequence in a model's head shape (L 257, P 64, N 32) */
    for (i = 0; i < (tc_quick() ? 3 : 12); i++) {
        static const int64_t Ps[] = {1, 7, 8, 17, 64, 65, 80, 130};
        scfg c;
        cfg_random(&c, dts[i % 3], 1);
        c.batch = c.seq == 2 ? 1 : tc_randint(1, 2);
        c.L = tc_randint(33, 100);
        c.G = tc_randint(1, 2);
        c.H = c.G * tc_randint(1, 2);
        c.P = Ps[tc_randint(0, 7)];
        c.N = tc_randint(1, 20);
        if (c.seq == 2) c.nseq = (int)tc_randint(1, 5);
        c.parts = 1;
        fwd_case(&c);
    }
    {
        scfg c;
        cfg_random(&c, SELSCAN_F32, 1);
        c.batch = 1; c.L = 257; c.H = 2; c.G = 1; c.P = 64; c.N = 32; c.seq = 1; c.nseq = 0; c.parts = 1;
        fwd_case(&c);
    }
    printf("forward: largest error of an f32 output %.3g of its bound\n", worst_fwd);
}

/* ----------------------------------------------------------------------------- backward -- */
static double worst_bwd;

/* every requested gradient against finite differences: every element within bound() of its terms'
   absolute sum (oracle_bwd(ab)); the analytic float64 gradients (oracle_bwd) agree with the
   differences too (a check of the test's own magnitudes' code) */
static void fd_case(const scfg *c, unsigned want) {
    sprob S;
    sgrads G;
    char desc[300];
    double *fd[NG], *an[NG], *mag[NG], floor, lmag = 0;
    int64_t i, bad, at;
    int k, w;
    prob_make(&S, c);
    grads_make(&G, &S, want);
    describe(&S, desc, sizeof desc);
    for (k = 0; k < NG; k++) {
        const int64_t n = grad_input(&S, k)->count;
        fd[k] = (double *)calloc((size_t)n, sizeof(double));
        an[k] = (double *)malloc(sizeof(double) * (size_t)n);
        mag[k] = (double *)malloc(sizeof(double) * (size_t)n);
        if (G.want >> k & 1) fd_grad(&S, grad_input(&S, k), G.dy.v, c->hlast ? G.dfin.v : NULL, fd[k]);
    }
    oracle_bwd(&S, 0, G.dy.v, c->hlast ? G.dfin.v : NULL, an);
    oracle_bwd(&S, 1, G.dy.v, c->hlast ? G.dfin.v : NULL, mag);
    { /* the loss' terms' absolute sum: the scale of the differences' own error (2^-40 of it) */
        double *ym = (double *)malloc(sizeof(double) * (size_t)S.x.count),
               *fm = (double *)calloc((size_t)S.h0.count, sizeof(double));
        oracle(&S, 1, ym, fm);
        for (i = 0; i < S.x.count; i++) lmag += fabs(G.dy.v[i]) * ym[i];
        for (i = 0; c->hlast && i < S.h0.count; i++) lmag += fabs(G.dfin.v[i]) * fm[i];
        free(ym);
        free(fm);
    }
    floor = ldexp(lmag + 1, -40);
    for (k = 0; k < NG; k++) {
        double e = 0;
        if (!(G.want >> k & 1)) continue;
        for (i = 0; i < grad_input(&S, k)->count; i++)
            if (fabs(an[k][i] - fd[k][i]) > 1e-6 * mag[k][i] + floor) e++;
        CHECK(e == 0, "test's own analytic %s differs from the finite differences in %g elements (%s)", gnames[k], e,
              desc);
    }
    for (w = 0; w < NBWD; w++)
        if (run_bwd_with(&S, &G, desc, w))
            for (k = 0; k < NG; k++) {
                if (!(G.want >> k & 1)) continue;
                bad = check_elems(c, &G.out[k], fd[k], mag[k], floor, &worst_bwd, &at);
                CHECK(bad == 0,
                      "backward_%s %s: %lld elements out of bound, the first [%lld] %.9g vs %.9g (terms' size %.3g) (%s)",
                      bwds[w].name, gnames[k], (long long)bad, (long long)at, at >= 0 ? tc_get(&G.out[k], at) : 0.0,
                      at >= 0 ? fd[k][at] : 0.0, at >= 0 ? mag[k][at] : 0.0, desc);
            }
    for (k = 0; k < NG; k++) { free(fd[k]); free(an[k]); free(mag[k]); }
    grads_free(&G);
    prob_free(&S);
}

/* small sizes for finite differences (the oracle runs 4x per input element) */
static void small_sizes(scfg *c) {
    c->batch = c->seq == 2 ? 1 : 2;
    c->L = tc_randint(3, 7);
    c->G = tc_coin(0.5) ? 1 : 2;
    c->H = c->G * tc_randint(1, 2);
    c->P = tc_randint(1, 3);
    c->N = tc_randint(1, 4);
    if (c->seq == 2) c->nseq = (int)tc_randint(1, 3);
}

static void backward_tests(void) {
    unsigned combo;
    int i, k;
    /* f32: every combination of the seven binary options (z, dt_bias, softplus, limit,
       initial_state, final_state, n_groups > 1) with every D (absent per head, per head, per
       channel, absent per channel) and every sequence mode (none, seq_idx, cu_seqlens) */
    for (combo = 0; combo < 128; combo++) {
        int dm, sm;
        if (tc_quick() && combo % 8 != 0) continue;
        for (dm = 0; dm < 4; dm++)
            for (sm = 0; sm < 3; sm++) {
                scfg c;
                memset(&c, 0, sizeof c);
                c.dt = SELSCAN_F32;
                c.z = combo & 1; c.bias = combo >> 1 & 1; c.softplus = combo >> 2 & 1; c.limit = combo >> 3 & 1;
                c.h0 = combo >> 4 & 1; c.hlast = combo >> 5 & 1;
                c.D = dm == 1 || dm == 2; c.Dhd = dm >= 2;
                c.seq = sm;
                c.layout = -1;
                c.bigdt = c.softplus && (combo + (unsigned)dm) % 5 == 0;
                small_sizes(&c);
                if (combo >> 6 & 1) { c.G = 2; c.H = 2 * tc_randint(1, 2); }
                else c.G = 1;
                fd_case(&c, (1u << NG) - 1);
            }
    }
    /* f16 / bf16: random combinations */
    for (k = 0; k < 2; k++)
        for (i = 0; i < (tc_quick() ? 8 : 48); i++) {
            scfg c;
            cfg_random(&c, k ? SELSCAN_BF16 : SELSCAN_F16, 1000);
            small_sizes(&c);
            fd_case(&c, (1u << NG) - 1);
        }
    /* any subset of gradients */
    for (i = 0; i < (tc_quick() ? 10 : 40); i++) {
        scfg c;
        cfg_random(&c, i % 3 == 0 ? SELSCAN_F32 : i % 3 == 1 ? SELSCAN_F16 : SELSCAN_BF16, 1000);
        small_sizes(&c);
        fd_case(&c, (unsigned)tc_randint(1, (1 << NG) - 1));
    }
    printf("backward: largest error of an f32 output %.3g of its bound\n", worst_bwd);
}

/* The fast backward's parts (part calls in reverse order, then the reduce's in another order, on
   one workspace of workspace_size_parts(p, g, n) bytes): bitwise backward_cpu's gradients, which
   G's outputs hold on entry. */
static void bwd_parts_case(sprob *S, sgrads *G, const char *desc) {
    static const int64_t nps[] = {2, 3, 7, 64};
    unsigned char *snap[NG];
    size_t k;
    int j;
    for (j = 0; j < NG; j++) snap[j] = tc_snapshot(&G->out[j]);
    for (k = 0; k < sizeof nps / sizeof nps[0]; k++) {
        size_t bytes = 0;
        void *ws;
        int64_t part;
        int ok = selscan_ssd_workspace_size_parts(&S->p, &G->g, nps[k], &bytes) == SELSCAN_OK, same = 1;
        for (j = 0; j < NG; j++) tc_poison(&G->out[j]);
        ws = tc_ws(bytes);
        for (part = nps[k] - 1; ok && part >= 0; part--)
            ok &= selscan_ssd_backward_cpu_part(&S->p, &G->g, part, nps[k], ws, bytes) == SELSCAN_OK;
        for (part = 0; ok && part < nps[k]; part++) /* odd parts first, then even */
            ok &= selscan_ssd_backward_cpu_reduce(&S->p, &G->g, (2 * part + 1) % (nps[k] | 1) % nps[k], nps[k], ws,
                                                  bytes) == SELSCAN_OK;
        tc_ws_free(ws);
        for (j = 0; j < NG; j++) same &= tc_same(&G->out[j], snap[j]);
        CHECK(ok && same, "backward parts: %lld parts not bitwise backward_cpu's (%s)", (long long)nps[k], desc);
    }
    for (j = 0; j < NG; j++) free(snap[j]);
}

/* The fast backward on shapes past its blocks (several chunks of 16 steps, sequences across
   them, channels not a multiple of 4, states not a multiple of the vector widths): both
   backwards against the float64 analytic gradients (oracle_bwd) within bound() of their terms'
   absolute sums (no finite differences: too many inputs), then the parts bitwise. */
static void bwd_big_case(const scfg *c) {
    sprob S;
    sgrads G;
    char desc[300];
    double *an[NG], *mag[NG];
    int64_t bad, at;
    int k, w;
    prob_make(&S, c);
    grads_make(&G, &S, (1u << NG) - 1);
    describe(&S, desc, sizeof desc);
    for (k = 0; k < NG; k++) {
        an[k] = (double *)malloc(sizeof(double) * (size_t)grad_input(&S, k)->count);
        mag[k] = (double *)malloc(sizeof(double) * (size_t)grad_input(&S, k)->count);
    }
    oracle_bwd(&S, 0, G.dy.v, c->hlast ? G.dfin.v : NULL, an);
    oracle_bwd(&S, 1, G.dy.v, c->hlast ? G.dfin.v : NULL, mag);
    for (w = 0; w < NBWD; w++)
        if (run_bwd_with(&S, &G, desc, w))
            for (k = 0; k < NG; k++) {
                if (!(G.want >> k & 1)) continue;
                bad = check_elems(c, &G.out[k], an[k], mag[k], 0.0, &worst_bwd, &at);
                CHECK(bad == 0,
                      "big backward_%s %s: %lld elements out of bound, the first [%lld] %.9g vs %.9g (terms' size %.3g) (%s)",
                      bwds[w].name, gnames[k], (long long)bad, (long long)at, at >= 0 ? tc_get(&G.out[k], at) : 0.0,
                      at >= 0 ? an[k][at] : 0.0, at >= 0 ? mag[k][at] : 0.0, desc);
            }
    bwd_parts_case(&S, &G, desc); /* G holds backward_cpu's (the last run) */
    for (k = 0; k < NG; k++) { free(an[k]); free(mag[k]); }
    grads_free(&G);
    prob_free(&S);
}

static void bwd_big_tests(void) {
    static const int64_t Ps[] = {1, 3, 4, 5, 13, 64};
    static const int64_t Ns[] = {1, 7, 16, 17, 33, 64};
    int i;
    for (i = 0; i < (tc_quick() ? 3 : 9); i++) {
        scfg c;
        cfg_random(&c, i % 3 == 0 ? SELSCAN_F32 : i % 3 == 1 ? SELSCAN_F16 : SELSCAN_BF16, 1);
        c.batch = c.seq == 2 ? 1 : tc_randint(1, 2);
        c.L = tc_randint(17, 70);
        c.G = tc_randint(1, 2);
        c.H = c.G * tc_randint(1, 2);
        c.P = Ps[tc_randint(0, 5)];
        c.N = Ns[tc_randint(0, 5)];
        if (c.seq == 2) c.nseq = (int)tc_randint(1, 5);
        if (i == 0) { c.P = 64; c.N = 64; c.L = 40; c.seq = 1; c.batch = 1; c.H = c.G; } /* a model's head shape */
        bwd_big_case(&c);
    }
}

/* bitwise: the same call twice gives the same bytes (forward and every gradient) */
static void repeat_tests(void) {
    int i, k, w;
    for (i = 0; i < 12; i++) {
        scfg c;
        sprob S;
        sgrads G;
        unsigned char *snap[NG + 1];
        char desc[300];
        int same = 1;
        cfg_random(&c, i % 3 == 0 ? SELSCAN_F32 : i % 3 == 1 ? SELSCAN_F16 : SELSCAN_BF16, 20000);
        prob_make(&S, &c);
        grads_make(&G, &S, (1u << NG) - 1);
        describe(&S, desc, sizeof desc);
        run_fwd(&S.p);
        snap[NG] = tc_snapshot(&S.y);
        tc_poison(&S.y);
        run_fwd(&S.p);
        same &= tc_same(&S.y, snap[NG]);
        for (w = 0; w < NBWD; w++) {
            run_bwd_with(&S, &G, desc, w);
            for (k = 0; k < NG; k++) snap[k] = tc_snapshot(&G.out[k]);
            run_bwd_with(&S, &G, desc, w);
            for (k = 0; k < NG; k++) { same &= tc_same(&G.out[k], snap[k]); free(snap[k]); }
        }
        CHECK(same, "repeat: not bitwise the same (%s)", desc);
        free(snap[NG]);
        grads_free(&G);
        prob_free(&S);
    }
}

/* seq_idx and cu_seqlens describe the same sequences (batch 1, no empty sequence, no
   initial_state): y and the gradients bitwise the same; final_state is cu_seqlens' last row */
static void packed_identity_tests(void) {
    int i, k;
    for (i = 0; i < 16; i++) {
        scfg c;
        sprob S;
        sgrads G, G2;
        int64_t t, s, *cu;
        int32_t *sid;
        char desc[300];
        unsigned char *ysnap;
        int same = 1;
        selscan_tensor fs;
        cfg_random(&c, i % 2 ? SELSCAN_BF16 : SELSCAN_F32, 3000);
        c.batch = 1; c.seq = 2; c.nseq = (int)tc_randint(1, 4); c.h0 = 0; c.hlast = 1;
        if (c.L < c.nseq) c.L = c.nseq;
        prob_make(&S, &c);
        cu = S.cu;
        cu[0] = 0; /* non-empty sequences */
        for (s = 1; s < c.nseq; s++) cu[s] = s + (c.L - c.nseq) * s / c.nseq;
        cu[c.nseq] = c.L;
        sid = (int32_t *)malloc(sizeof(int32_t) * (size_t)c.L);
        for (s = 0; s < c.nseq; s++)
            for (t = cu[s]; t < cu[s + 1]; t++) sid[t] = (int32_t)(10 + 3 * s);
        grads_make(&G, &S, (1u << NG) - 1);
        grads_make(&G2, &S, (1u << NG) - 1);
        memcpy(G2.dy.v, G.dy.v, sizeof(double) * (size_t)G.dy.count);
        tc_store(&G2.dy);
        for (t = 0; t < G.dfin.count; t++) G.dfin.v[t] = t >= (c.nseq - 1) * c.H * c.P * c.N ? G.dfin.v[t] : 0.0;
        tc_store(&G.dfin);
        describe(&S, desc, sizeof desc);
        CHECK(run_fwd(&S.p) == SELSCAN_OK, "identity: cu_seqlens forward (%s)", desc);
        ysnap = tc_snapshot(&S.y);
        run_bwd(&S, &G, desc);
        /* the same with seq_idx; final_state: a view of cu_seqlens' last row */
        fs = tc_view(&S.hlast, 0, c.nseq - 1);
        S.p.cu_seqlens = NULL; S.p.n_seqs = 0;
        S.p.seq_idx.data = sid; S.p.seq_idx.stride[0] = S.p.seq_idx.stride[1] = 0;
        S.p.final_state = tc_mut(fs);
        G2.g.dfinal_state = tc_view(&G.dfin, 0, c.nseq - 1);
        G2.g.dinitial_state.data = NULL;
        G2.want &= ~(1u << G_DH0);
        S.rows = 1; /* (only the problem's rows change; the tensors stay cu_seqlens') */
        {
            double *last = (double *)malloc(sizeof(double) * (size_t)(c.H * c.P * c.N));
            int64_t j, off = (c.nseq - 1) * c.H * c.P * c.N;
            for (j = 0; j < c.H * c.P * c.N; j++) last[j] = tc_get(&S.hlast, off + j);
            tc_poison(&S.y);
            CHECK(run_fwd(&S.p) == SELSCAN_OK, "identity: seq_idx forward (%s)", desc);
            same &= tc_same(&S.y, ysnap);
            for (j = 0; j < c.H * c.P * c.N; j++) same &= tc_get(&S.hlast, off + j) == last[j];
            free(last);
        }
        {
            selscan_status st;
            size_t bytes = 0;
            void *ws;
            for (k = 0; k < NG; k++) tc_poison(&G2.out[k]);
            st = selscan_ssd_workspace_size(&S.p, &G2.g, &bytes);
            ws = tc_ws(bytes);
            if (st == SELSCAN_OK) st = selscan_ssd_backward_ref(&S.p, &G2.g, ws, bytes);
            tc_ws_free(ws);
            CHECK(st == SELSCAN_OK, "identity: seq_idx backward %s (%s)", selscan_status_string(st), desc);
        }
        for (k = 0; k < NG; k++) { /* the two runs' outputs have their own random layouts: values */
            int64_t j;
            if (!(G2.want >> k & 1)) continue;
            for (j = 0; j < G.out[k].count; j++) same &= tc_get(&G.out[k], j) == tc_get(&G2.out[k], j);
        }
        CHECK(same, "identity: seq_idx and cu_seqlens differ (%s)", desc);
        free(ysnap);
        free(sid);
        grads_free(&G);
        grads_free(&G2);
        prob_free(&S);
    }
}

/* ---------------------------------------------------------------------------------- NaN -- */
static int is_canon_nan(selscan_dtype dt, const tc_tensor *t, int64_t i) {
    const unsigned char *p = (const unsigned char *)t->data + tc_off(t, i) * tc_esize(dt);
    if (dt == SELSCAN_F32) { uint32_t u; memcpy(&u, p, 4); return u == 0x7fc00000u; }
    else { uint16_t h; memcpy(&h, p, 2); return h == (dt == SELSCAN_F16 ? 0x7e00 : 0x7fc0); }
}

/* writes a NaN with a sign and payload (not the default quiet NaN) at logical element i */
static void put_nan(tc_tensor *t, int64_t i) {
    unsigned char *p = (unsigned char *)t->data + tc_off(t, i) * tc_esize(t->dt);
    if (t->dt == SELSCAN_F32) { const uint32_t u = 0xffc12345u; memcpy(p, &u, 4); }
    else { const uint16_t h = t->dt == SELSCAN_F16 ? 0xfe21 : 0xffc3; memcpy(p, &h, 2); }
    t->v[i] = NAN;
}

static void nan_tests(void) {
    int k, i;
    const char *names[] = {"x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_state"};
    for (i = 0; i < 3; i++)
        for (k = 0; k < 9; k++) {
            scfg c;
            sprob S;
            sgrads G;
            tc_tensor *in;
            int64_t e, j, nan_y = 0, nan_other = 0, bad_nan = 0, nan_grads = 0;
            int w;
            char desc[300];
            cfg_random(&c, i == 0 ? SELSCAN_F32 : i == 1 ? SELSCAN_F16 : SELSCAN_BF16, 3000);
            c.batch = 2; c.seq = 0; c.D = c.z = c.bias = c.h0 = c.hlast = 1; c.layout = -1;
            if (k == 1) c.limit = 1; /* a NaN dt stays NaN through the clamp */
            prob_make(&S, &c);
            grads_make(&G, &S, (1u << NG) - 1);
            describe(&S, desc, sizeof desc);
            in = grad_input(&S, k);
            e = tc_randint(0, in->count / 2 > 0 ? in->count / 2 - 1 : 0); /* in batch row 0 (or a parameter) */
            if (k == 0 || k == 1 || k == 3 || k == 4 || k == 6 || k == 8) e = 0; /* batch row 0's first element */
            put_nan(in, e);
            run_fwd(&S.p);
            for (j = 0; j < S.y.count; j++) {
                const int row = j >= S.y.count / 2;
                if (isnan(tc_get(&S.y, j))) { if (row == 0) nan_y++; else nan_other++; }
            }
            /* x, dt, B, C, z, initial_state at row 0: NaN in row 0 only; A, D, dt_bias: a head's in both */
            CHECK(nan_y > 0, "NaN in %s: no NaN in y (%s)", names[k], desc);
            if (k == 0 || k == 1 || k == 3 || k == 4 || k == 6 || k == 8)
                CHECK(nan_other == 0, "NaN in %s (batch row 0): NaN in batch row 1's y (%s)", names[k], desc);
            for (w = 0; w < NBWD; w++) {
                nan_grads = bad_nan = 0;
                run_bwd_with(&S, &G, desc, w);
                for (j = 0; j < NG; j++) {
                    int64_t m;
                    if (!(G.want >> j & 1)) continue;
                    for (m = 0; m < G.out[j].count; m++)
                        if (isnan(tc_get(&G.out[j], m))) {
                            nan_grads++;
                            bad_nan += !is_canon_nan(G.out[j].dt, &G.out[j], m);
                        }
                }
                CHECK(nan_grads > 0 && bad_nan == 0,
                      "NaN in %s: backward_%s: %lld NaN gradients, %lld not the default quiet NaN (%s)", names[k],
                      bwds[w].name, (long long)nan_grads, (long long)bad_nan, desc);
            }
            grads_free(&G);
            prob_free(&S);
        }
    { /* NaN in dy: the gradients it reaches are NaN, all the default quiet NaN */
        scfg c;
        sprob S;
        sgrads G;
        int64_t j, m, nan_grads = 0, bad_nan = 0;
        int w;
        char desc[300];
        cfg_random(&c, SELSCAN_BF16, 3000);
        c.z = c.D = 1;
        prob_make(&S, &c);
        grads_make(&G, &S, (1u << NG) - 1);
        describe(&S, desc, sizeof desc);
        put_nan(&G.dy, G.dy.count - 1);
        for (w = 0; w < NBWD; w++) {
            nan_grads = bad_nan = 0;
            run_bwd_with(&S, &G, desc, w);
            for (j = 0; j < NG; j++)
                if (G.want >> j & 1)
                    for (m = 0; m < G.out[j].count; m++)
                        if (isnan(tc_get(&G.out[j], m))) {
                            nan_grads++;
                            bad_nan += !is_canon_nan(G.out[j].dt, &G.out[j], m);
                        }
            CHECK(nan_grads > 0 && bad_nan == 0,
                  "NaN in dy: backward_%s: %lld NaN gradients, %lld not the default quiet NaN (%s)", bwds[w].name,
                  (long long)nan_grads, (long long)bad_nan, desc);
        }
        grads_free(&G);
        prob_free(&S);
    }
}

/* ------------------------------------------------------------------------ special values -- */
/* A special value at logical element i of t: kind 0 NaN, 1 infinity, 2 the dtype's smallest
   subnormal, 3 zero; neg: its negative. */
static void put_special(tc_tensor *t, int64_t i, int kind, int neg) {
    unsigned char *p = (unsigned char *)t->data + tc_off(t, i) * tc_esize(t->dt);
    if (kind == 0) { put_nan(t, i); return; }
    if (t->dt == SELSCAN_F32) {
        uint32_t u = kind == 1 ? 0x7f800000u : kind == 2 ? 1u : 0u;
        if (neg) u |= 0x80000000u;
        memcpy(p, &u, 4);
    } else {
        uint16_t h = (uint16_t)(kind == 1 ? (t->dt == SELSCAN_F16 ? 0x7c00 : 0x7f80) : kind == 2 ? 1 : 0);
        if (neg) h |= 0x8000;
        memcpy(p, &h, 2);
    }
    t->v[i] = tc_get(t, i);
}

/* elements of got whose class differs from ref's (saved classes: 0 finite, 1 +inf, 2 -inf, 3 NaN) */
static int64_t class_mismatch(const tc_tensor *got, const unsigned char *ref_cls, int64_t *first) {
    int64_t i, bad = 0;
    *first = -1;
    for (i = 0; i < got->count; i++)
        if (tc_class(tc_get(got, i)) != ref_cls[i] && bad++ == 0) *first = i;
    return bad;
}
static unsigned char *classes(const tc_tensor *t) {
    unsigned char *f = (unsigned char *)malloc((size_t)(t->count ? t->count : 1));
    int64_t i;
    for (i = 0; i < t->count; i++) f[i] = t->mem ? (unsigned char)tc_class(tc_get(t, i)) : 0;
    return f;
}

/* elements of got whose finiteness differs from ref's (saved finiteness, 1 finite) */
static int64_t finite_mismatch(const tc_tensor *got, const unsigned char *ref_fin, int64_t *first) {
    int64_t i, bad = 0;
    *first = -1;
    for (i = 0; i < got->count; i++)
        if ((isfinite(tc_get(got, i)) ? 1 : 0) != ref_fin[i] && bad++ == 0) *first = i;
    return bad;
}
static unsigned char *finiteness(const tc_tensor *t) {
    unsigned char *f = (unsigned char *)malloc((size_t)(t->count ? t->count : 1));
    int64_t i;
    for (i = 0; i < t->count; i++) f[i] = !t->mem || isfinite(tc_get(t, i)) ? 1 : 0; /* (absent: not read) */
    return f;
}

/* The fast paths' parts (np parts on one workspace pre-filled with byte fill): status */
static int fwd_parts_fill(sprob *S, int64_t np, int fill) {
    size_t bytes = 0;
    void *ws;
    int64_t part;
    int ok = selscan_ssd_workspace_size_parts(&S->p, NULL, np, &bytes) == SELSCAN_OK;
    ws = tc_ws(bytes);
    memset(ws, fill, bytes);
    for (part = 0; ok && part < np; part++) ok &= selscan_ssd_forward_cpu_part(&S->p, part, np, ws, bytes) == SELSCAN_OK;
    tc_ws_free(ws);
    return ok;
}
static int bwd_parts_fill(sprob *S, sgrads *G, int64_t np, int fill) {
    size_t bytes = 0;
    void *ws;
    int64_t part;
    int ok = selscan_ssd_workspace_size_parts(&S->p, &G->g, np, &bytes) == SELSCAN_OK;
    ws = tc_ws(bytes);
    memset(ws, fill, bytes);
    for (part = 0; ok && part < np; part++)
        ok &= selscan_ssd_backward_cpu_part(&S->p, &G->g, part, np, ws, bytes) == SELSCAN_OK;
    for (part = np - 1; ok && part >= 0; part--)
        ok &= selscan_ssd_backward_cpu_reduce(&S->p, &G->g, part, np, ws, bytes) == SELSCAN_OK;
    tc_ws_free(ws);
    return ok;
}

/* Inf, NaN, signed zeros and subnormals in any input (dy and dfinal_state too), A > 0, A = 0,
   A = -inf, dt limits at infinity: the fast CPU paths element by element against the reference,
   non-finite exactly where the reference's are (moderate values otherwise: no sum comes near f32's
   overflow, where the fast paths' other order of the sums may overflow where the reference's does
   not, or not where it does), every NaN of both backwards the default quiet NaN; then the parts,
   every n_parts 1 .. 8 on workspaces pre-filled with 0x00, 0xFF (NaN) or 0x7F bytes, bitwise the
   one-call results. dy0: no initial_state and a NaN in dy at a sequence's first step, where
   (a 0 state times the NaN gradient) the reference's dA is NaN (the CUDA walks' corner, NOTES
   SSD-CUDA-v10): the fast CPU backward's dA NaN as well. Where every special is an infinity in x, z,
   B, C, D, initial_state, dy or dfinal_state, the fast backward's values are the reference's class by
   class (+inf, -inf, NaN; dstate is mostly not a multiple of 16: the state rows' pad lanes times an
   infinity must not make NaN); an infinite dt, bias or A may differ there (the fast path factors dt
   out of its sums: inf where the reference's terms give NaN). */
static void special_case(selscan_dtype dt, int dy0, int inf1) {
    static const int fills[3] = {0x00, 0xFF, 0x7F};
    scfg c;
    sprob S;
    sgrads G;
    char desc[400];
    unsigned char *fy, *ff, *fg[NG], *cg[NG], *snap[NG + 2];
    int64_t bad, at, np, h = 0;
    int k, j, ns, infs = 0;
    cfg_random(&c, dt, 3000);
    if (dy0) { c.h0 = 0; c.hlast = 1; }
    if (inf1) c.N = tc_randint(1, 3); /* few states: the results an infinity makes are mostly infinities, not NaN */
    prob_make(&S, &c);
    grads_make(&G, &S, (1u << NG) - 1);
    if (tc_coin(0.15)) { S.p.flags |= SELSCAN_SSD_DT_LIMIT; S.p.dt_min = tc_coin(0.5) ? -INFINITY : 0.0f; S.p.dt_max = INFINITY; }
    if (tc_coin(0.05)) { S.p.flags |= SELSCAN_SSD_DT_LIMIT; S.p.dt_min = S.p.dt_max = INFINITY; infs = -1; }
    describe(&S, desc, sizeof desc);
    if (dy0) { /* batch row 0, the first step of a sequence (a non-empty one), head h */
        int64_t t = 0, p = tc_randint(0, c.P - 1);
        h = tc_randint(0, c.H - 1);
        if (c.seq == 2) {
            int64_t s0 = tc_randint(0, c.nseq - 1), s;
            for (s = 0; s < c.nseq && S.cu[(s0 + s) % c.nseq] == S.cu[(s0 + s) % c.nseq + 1]; s++) continue;
            t = s < c.nseq ? S.cu[(s0 + s) % c.nseq] : 0;
        } else if (c.seq == 1) {
            int64_t n = 0;
            for (t = 0; t < c.L; t++) n += t == 0 || S.sidv[t] != S.sidv[t - 1];
            n = tc_randint(0, n - 1);
            for (t = 0; t < c.L; t++) if ((t == 0 || S.sidv[t] != S.sidv[t - 1]) && n-- == 0) break;
        }
        put_nan(&G.dy, ((t * c.H) + h) * c.P + p);
        snprintf(desc + strlen(desc), sizeof desc - strlen(desc), " | NaN dy[0, %lld, %lld, %lld]", (long long)t,
                 (long long)h, (long long)p);
    } else {
        ns = inf1 ? 1 : (int)tc_randint(1, 3);
        for (j = 0; j < ns; j++) {
            static const char *const nm[] = {"x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_state", "dy", "dfinal_state"};
            static const int inf_in[4] = {0, 3, 6, 9}; /* inf1: x, B, z or dy */
            const int w = inf1 ? inf_in[tc_randint(0, 3)] : (int)tc_randint(0, 10);
            tc_tensor *t = w < 9 ? grad_input(&S, w) : w == 9 ? &G.dy : &G.dfin;
            int64_t e;
            if (!t->mem) continue;
            e = tc_randint(0, t->count - 1);
            if (w == 2 && tc_coin(0.5)) { /* a growing decay (small: no overflow), none, a = 0 */
                const int m = (int)tc_randint(0, 2);
                infs = -1;
                if (m == 2) put_special(t, e, 1, 1);
                else { t->v[e] = m == 0 ? 0.0625 : 0.0; tc_encode(SELSCAN_F32, t->v[e], (float *)t->data + tc_off(t, e)); }
                snprintf(desc + strlen(desc), sizeof desc - strlen(desc), " | A[%lld] %s", (long long)e,
                         m == 0 ? "0.0625" : m == 1 ? "0" : "-inf");
                continue;
            }
            {
                const int kind = inf1 ? 1 : (int)tc_randint(0, 3), neg = tc_coin(0.5);
                put_special(t, e, kind, neg);
                if (infs >= 0) infs = kind == 1 && w != 1 && w != 2 && w != 7 ? infs + 1 : -1;
                snprintf(desc + strlen(desc), sizeof desc - strlen(desc), " | %s[%lld] %s%s", nm[w], (long long)e,
                         neg ? "-" : "", kind == 0 ? "nan" : kind == 1 ? "inf" : kind == 2 ? "subnormal" : "0");
            }
        }
    }
    /* forward: the reference's finiteness, then the fast one's, then its parts bitwise */
    tc_poison(&S.y);
    tc_poison(&S.hlast);
    if (!CHECK(run_fwd_with(&S.p, selscan_ssd_forward_ref) == SELSCAN_OK, "special: forward_ref (%s)", desc)) goto done;
    fy = finiteness(&S.y);
    ff = finiteness(&S.hlast);
    tc_poison(&S.y);
    tc_poison(&S.hlast);
    if (CHECK(run_fwd_with(&S.p, selscan_ssd_forward_cpu) == SELSCAN_OK, "special: forward_cpu (%s)", desc)) {
        bad = finite_mismatch(&S.y, fy, &at);
        CHECK(bad == 0, "special: forward_cpu y: %lld elements finite where the reference's are not or not where they are, the first [%lld] %g (%s)",
              (long long)bad, (long long)at, at >= 0 ? tc_get(&S.y, at) : 0.0, desc);
        if (c.hlast) {
            bad = finite_mismatch(&S.hlast, ff, &at);
            CHECK(bad == 0, "special: forward_cpu final_state: %lld elements' finiteness differs, the first [%lld] %g (%s)",
                  (long long)bad, (long long)at, at >= 0 ? tc_get(&S.hlast, at) : 0.0, desc);
        }
        snap[NG] = tc_snapshot(&S.y);
        snap[NG + 1] = tc_snapshot(&S.hlast);
        for (np = 1; np <= 8; np++) {
            tc_poison(&S.y);
            tc_poison(&S.hlast);
            CHECK(fwd_parts_fill(&S, np, fills[np % 3]) && tc_same(&S.y, snap[NG]) && tc_same(&S.hlast, snap[NG + 1]),
                  "special: forward_cpu_part: %lld parts (workspace of 0x%02X bytes) not bitwise forward_cpu's (%s)",
                  (long long)np, fills[np % 3], desc);
        }
        free(snap[NG]);
        free(snap[NG + 1]);
    }
    free(fy);
    free(ff);
    /* backward */
    if (!run_bwd_with(&S, &G, desc, 0)) goto done;
    for (k = 0; k < NG; k++) fg[k] = finiteness(&G.out[k]);
    for (k = 0; k < NG; k++) cg[k] = classes(&G.out[k]);
    if (dy0) CHECK(isnan(tc_get(&G.out[G_DA], h)), "special: backward_ref's dA[%lld] %g, not NaN (%s)", (long long)h,
                   tc_get(&G.out[G_DA], h), desc);
    for (k = 0; k < NG; k++) /* every NaN the default quiet NaN */
        if (G.want >> k & 1) {
            int64_t m, nb = 0;
            for (m = 0; m < G.out[k].count; m++) nb += isnan(tc_get(&G.out[k], m)) && !is_canon_nan(G.out[k].dt, &G.out[k], m);
            CHECK(nb == 0, "special: backward_ref %s: %lld NaN not the default quiet NaN (%s)", gnames[k], (long long)nb, desc);
        }
    if (run_bwd_with(&S, &G, desc, 1)) {
        for (k = 0; k < NG; k++) {
            int64_t m, nb = 0;
            if (!(G.want >> k & 1)) continue;
            bad = finite_mismatch(&G.out[k], fg[k], &at);
            CHECK(bad == 0, "special: backward_cpu %s: %lld elements finite where the reference's are not or not where they are, the first [%lld] %g (%s)",
                  gnames[k], (long long)bad, (long long)at, at >= 0 ? tc_get(&G.out[k], at) : 0.0, desc);
            if (infs > 0) {
                bad = class_mismatch(&G.out[k], cg[k], &at);
                CHECK(bad == 0, "special: backward_cpu %s: %lld elements not the reference's +inf / -inf / NaN, the first [%lld] %g (%s)",
                      gnames[k], (long long)bad, (long long)at, at >= 0 ? tc_get(&G.out[k], at) : 0.0, desc);
            }
            for (m = 0; m < G.out[k].count; m++) nb += isnan(tc_get(&G.out[k], m)) && !is_canon_nan(G.out[k].dt, &G.out[k], m);
            CHECK(nb == 0, "special: backward_cpu %s: %lld NaN not the default quiet NaN (%s)", gnames[k], (long long)nb, desc);
        }
        if (dy0) CHECK(isnan(tc_get(&G.out[G_DA], h)), "special: backward_cpu's dA[%lld] %g where the reference's is NaN (%s)",
                       (long long)h, tc_get(&G.out[G_DA], h), desc);
        for (k = 0; k < NG; k++) snap[k] = tc_snapshot(&G.out[k]);
        for (np = 1; np <= 8; np++) {
            int same = 1;
            for (k = 0; k < NG; k++) tc_poison(&G.out[k]);
            same = bwd_parts_fill(&S, &G, np, fills[np % 3]);
            for (k = 0; k < NG; k++) same &= tc_same(&G.out[k], snap[k]);
            CHECK(same, "special: backward_cpu_part: %lld parts (workspace of 0x%02X bytes) not bitwise backward_cpu's (%s)",
                  (long long)np, fills[np % 3], desc);
        }
        for (k = 0; k < NG; k++) free(snap[k]);
    }
    for (k = 0; k < NG; k++) free(fg[k]);
    for (k = 0; k < NG; k++) free(cg[k]);
done:
    grads_free(&G);
    prob_free(&S);
}

/* Without D there is no D term (not 0 x: >>ssd-api): one step, one state, B = C = 1, an infinite x: y is
   +inf on every entry (0 x made it NaN); dy infinite: dx and dz +inf (dx = dy C dt B, with D: + D dy). */
static void no_d_case(selscan_dtype dt, int hasD) {
    scfg c;
    sprob S;
    sgrads G;
    int k, w;
    memset(&c, 0, sizeof c);
    c.dt = dt; c.batch = c.L = c.G = c.H = c.P = c.N = 1; c.D = hasD; c.z = 1; c.layout = TC_LAYOUT_CONTIG;
    prob_make(&S, &c);
    grads_make(&G, &S, 1u << G_DX | 1u << G_DZ);
    tc_tensor *const ins[6] = {&S.x, &S.dt, &S.B, &S.C, &S.z, &S.D};
    const double vals[6] = {INFINITY, 0.5, 1.0, 1.0, 1.0, 0.5};
    for (k = 0; k < 6; k++) {
        if (!ins[k]->mem) continue;
        ins[k]->v[0] = vals[k];
        tc_encode(ins[k]->dt, vals[k], (char *)ins[k]->data + tc_off(ins[k], 0) * tc_esize(ins[k]->dt));
    }
    S.A.v[0] = -1.0;
    tc_encode(S.A.dt, -1.0, (char *)S.A.data + tc_off(&S.A, 0) * tc_esize(S.A.dt));
    for (w = 0; w < 2; w++) {
        tc_poison(&S.y);
        CHECK(run_fwd_with(&S.p, fwds[w].f) == SELSCAN_OK && tc_class(tc_get(&S.y, 0)) == 1,
              "no D: forward_%s y %g for an infinite x (D %s), not +inf", fwds[w].name, tc_get(&S.y, 0), hasD ? "present" : "absent");
    }
    S.x.v[0] = 1.0; /* the backward: x finite, dy infinite */
    tc_encode(S.x.dt, 1.0, (char *)S.x.data + tc_off(&S.x, 0) * tc_esize(S.x.dt));
    G.dy.v[0] = INFINITY;
    tc_encode(G.dy.dt, INFINITY, (char *)G.dy.data + tc_off(&G.dy, 0) * tc_esize(G.dy.dt));
    for (w = 0; w < 2; w++) {
        tc_poison(&G.out[G_DX]);
        tc_poison(&G.out[G_DZ]);
        if (run_bwd_with(&S, &G, "no D", w))
            CHECK(tc_class(tc_get(&G.out[G_DX], 0)) == 1 && tc_class(tc_get(&G.out[G_DZ], 0)) == 1,
                  "no D: backward_%s dx %g, dz %g for an infinite dy (D %s), not +inf", bwds[w].name, tc_get(&G.out[G_DX], 0),
                  tc_get(&G.out[G_DZ], 0), hasD ? "present" : "absent");
    }
    grads_free(&G);
    prob_free(&S);
}

static void special_tests(void) {
    int i;
    for (i = 0; i < (tc_quick() ? 30 : 120); i++)
        special_case(i % 3 == 0 ? SELSCAN_F32 : i % 3 == 1 ? SELSCAN_F16 : SELSCAN_BF16, i % 4 == 3, 0);
    for (i = 0; i < (tc_quick() ? 30 : 120); i++) special_case(i % 3 == 0 ? SELSCAN_F32 : i % 3 == 1 ? SELSCAN_F16 : SELSCAN_BF16, 0, 1);
    for (i = 0; i < 6; i++) no_d_case(i % 3 == 0 ? SELSCAN_F32 : i % 3 == 1 ? SELSCAN_F16 : SELSCAN_BF16, i / 3);
}

/* --------------------------------------------------------------------------- validation -- */
/* the entry points; F_FWD runs forward_ref, forward_cpu and forward_cpu_part (part 1 of 2) alike,
   F_WSF workspace_size (forward) and workspace_size_parts alike; F_BWD backward_ref, backward_cpu,
   backward_cpu_part and backward_cpu_reduce (part 1 of 2) alike, F_WSB workspace_size (backward)
   and workspace_size_parts(p, g) alike */
enum { F_VAL = 1, F_VALG = 2, F_WSF = 4, F_WSB = 8, F_FWD = 16, F_BWD = 32, F_CPU = 64, F_PART = 128, F_WSP = 256,
       F_BCPU = 512, F_BPART = 1024, F_BRED = 2048, F_WSPB = 4096, F_ONLY = 8192 /* no others added */ };
#define F_ALLF (F_VAL | F_WSF | F_FWD)
#define F_ALLB (F_VALG | F_WSB | F_BWD)
#define F_ALL (F_ALLF | F_ALLB)

static selscan_diag dg;
static const char dsent[] = "sentinel";

/* the base problem every validation case mutates: every operand present, f32, contiguous */
typedef struct vbase {
    sprob S;
    sgrads G;
    void *ws;
    size_t wsb;
} vbase;

static void vbase_make(vbase *V, int seq) {
    scfg c;
    memset(&c, 0, sizeof c);
    c.dt = SELSCAN_F32;
    c.batch = seq == 2 ? 1 : 2; c.L = 3; c.H = 4; c.P = 2; c.N = 3; c.G = 2;
    c.D = c.z = c.bias = c.h0 = c.hlast = 1; c.softplus = 1; c.limit = 1;
    c.seq = seq; c.nseq = 2; c.layout = TC_LAYOUT_CONTIG;
    prob_make(&V->S, &c);
    V->S.p.n_groups = 2;
    V->S.p.diag = &dg;
    grads_make(&V->G, &V->S, (1u << NG) - 1);
    V->wsb = 1 << 16;
    V->ws = tc_ws(V->wsb);
}

static void vbase_free(vbase *V) {
    grads_free(&V->G);
    prob_free(&V->S);
    tc_ws_free(V->ws);
}

static void poison_outs(vbase *V) {
    int k;
    for (k = 0; k < NG; k++) tc_poison(&V->G.out[k]);
    tc_poison(&V->S.y);
    tc_poison(&V->S.hlast);
}

/* every output's bytes (y, final_state, the gradients): poisoned before, compared after */
static int outputs_untouched(vbase *V) {
    int k, ok = 1;
    for (k = 0; k < NG; k++) ok &= tc_unwritten(&V->G.out[k]) == V->G.out[k].count;
    ok &= tc_unwritten(&V->S.y) == V->S.y.count && tc_unwritten(&V->S.hlast) == V->S.hlast.count;
    return ok;
}

/* Runs the entry points in fns on (p, g) and checks: status want, diag {operand, code} (operand
   NULL: not checked; code: the rule), outputs untouched. rule_text: the diag's rule text when not
   NULL (the overlap rules name their other operand). */
static void expect(const char *what, vbase *V, const selscan_ssd_problem *p, const selscan_ssd_grads *g, int fns,
                   selscan_status want, const char *operand, selscan_rule code, const char *rule_text) {
    int f;
    if (fns & F_FWD) fns |= F_CPU | F_PART;
    if (fns & F_WSF) fns |= F_WSP;
    if ((fns & F_BWD) && !(fns & F_ONLY)) fns |= F_BCPU | F_BPART | F_BRED;
    if ((fns & F_WSB) && !(fns & F_ONLY)) fns |= F_WSPB;
    for (f = 1; f <= F_WSPB; f <<= 1) {
        selscan_status st = SELSCAN_OK;
        const char *fn = "";
        size_t bytes = 12345;
        int k;
        if (!(fns & f)) continue;
        for (k = 0; k < NG; k++) tc_poison(&V->G.out[k]);
        tc_poison(&V->S.y);
        tc_poison(&V->S.hlast);
        dg.operand = dg.rule = dsent;
        dg.code = SELSCAN__RULE_COUNT;
        switch (f) {
        case F_VAL: st = selscan_validate_ssd(p); fn = "validate_ssd"; break;
        case F_VALG: st = selscan_validate_ssd_grads(p, g); fn = "validate_ssd_grads"; break;
        case F_WSF: st = selscan_ssd_workspace_size(p, NULL, &bytes); fn = "workspace_size(fwd)"; break;
        case F_WSB: st = selscan_ssd_workspace_size(p, g, &bytes); fn = "workspace_size(bwd)"; break;
        case F_FWD: st = selscan_ssd_forward_ref(p, V->ws, V->wsb); fn = "forward_ref"; break;
        case F_CPU: st = selscan_ssd_forward_cpu(p, V->ws, V->wsb); fn = "forward_cpu"; break;
        case F_PART: st = selscan_ssd_forward_cpu_part(p, 1, 2, V->ws, V->wsb); fn = "forward_cpu_part"; break;
        case F_WSP: st = selscan_ssd_workspace_size_parts(p, NULL, 2, &bytes); fn = "workspace_size_parts"; break;
        case F_BWD: st = selscan_ssd_backward_ref(p, g, V->ws, V->wsb); fn = "backward_ref"; break;
        case F_BCPU: st = selscan_ssd_backward_cpu(p, g, V->ws, V->wsb); fn = "backward_cpu"; break;
        case F_BPART: st = selscan_ssd_backward_cpu_part(p, g, 1, 2, V->ws, V->wsb); fn = "backward_cpu_part"; break;
        case F_BRED: st = selscan_ssd_backward_cpu_reduce(p, g, 1, 2, V->ws, V->wsb); fn = "backward_cpu_reduce"; break;
        case F_WSPB: st = selscan_ssd_workspace_size_parts(p, g, 2, &bytes); fn = "workspace_size_parts(g)"; break;
        }
        CHECK(st == want, "%s: %s returned %s, want %s", what, fn, selscan_status_name(st), selscan_status_name(want));
        if (want == SELSCAN_OK) {
            CHECK(dg.operand == dsent && dg.code == SELSCAN__RULE_COUNT, "%s: %s wrote diag on OK", what, fn);
            continue;
        }
        CHECK(outputs_untouched(V), "%s: %s wrote an output on an error", what, fn);
        CHECK(bytes == 12345, "%s: %s wrote bytes on an error", what, fn);
        if (!p) continue;
        CHECK(dg.code == code, "%s: %s reported %s, want %s", what, fn,
              dg.code < SELSCAN__RULE_COUNT ? selscan_rule_name(dg.code) : "nothing", selscan_rule_name(code));
        if (operand)
            CHECK(dg.operand != dsent && strcmp(dg.operand, operand) == 0, "%s: %s named operand '%s', want '%s'", what,
                  fn, dg.operand == dsent ? "(none)" : dg.operand, operand);
        if (rule_text)
            CHECK(dg.rule != dsent && strcmp(dg.rule, rule_text) == 0, "%s: %s rule '%s', want '%s'", what, fn,
                  dg.rule == dsent ? "(none)" : dg.rule, rule_text);
    }
}

/* the operands of the base problem, by name: their selscan tensors (in or out) */
typedef struct opref {
    const char *name;
    int fns;   /* the entry points that read it */
    int out;   /* an output */
    int req;   /* required (its NULL refused) */
    selscan_tensor *in;
    selscan_out_tensor *o;
    const tc_tensor *t;
} opref;

static int oprefs(vbase *V, selscan_ssd_problem *p, selscan_ssd_grads *g, opref *r) {
    sprob *S = &V->S;
    sgrads *G = &V->G;
    int n = 0;
#define IN(nm, fld, tt, f, rq) \
    r[n].name = nm, r[n].fns = f, r[n].out = 0, r[n].req = rq, r[n].in = &fld, r[n].o = NULL, r[n].t = tt, n++;
#define OUT(nm, fld, tt, f) \
    r[n].name = nm, r[n].fns = f, r[n].out = 1, r[n].req = 0, r[n].in = NULL, r[n].o = &fld, r[n].t = tt, n++;
    IN("x", p->x, &S->x, F_ALL, 1)
    IN("dt", p->dt, &S->dt, F_ALL, 1)
    IN("A", p->A, &S->A, F_ALL, 1)
    IN("B", p->B, &S->B, F_ALL, 1)
    IN("C", p->C, &S->C, F_ALL, 1)
    IN("D", p->D, &S->D, F_ALL, 0)
    IN("z", p->z, &S->z, F_ALL, 0)
    IN("dt_bias", p->dt_bias, &S->bias, F_ALL, 0)
    IN("seq_idx", p->seq_idx, NULL, F_ALL, 0)
    IN("initial_state", p->initial_state, &S->h0, F_ALL, 0)
    OUT("y", p->y, &S->y, F_ALLF)
    OUT("final_state", p->final_state, &S->hlast, F_ALLF)
    IN("dy", g->dy, &G->dy, F_ALLB, 1)
    IN("dfinal_state", g->dfinal_state, &G->dfin, F_ALLB, 0)
    OUT("dx", g->dx, &G->out[G_DX], F_ALLB)
    OUT("ddt", g->ddt, &G->out[G_DDT], F_ALLB)
    OUT("dA", g->dA, &G->out[G_DA], F_ALLB)
    OUT("dB", g->dB, &G->out[G_DB], F_ALLB)
    OUT("dC", g->dC, &G->out[G_DC], F_ALLB)
    OUT("dD", g->dD, &G->out[G_DD], F_ALLB)
    OUT("dz", g->dz, &G->out[G_DZ], F_ALLB)
    OUT("ddt_bias", g->ddt_bias, &G->out[G_DBIAS], F_ALLB)
    OUT("dinitial_state", g->dinitial_state, &G->out[G_DH0], F_ALLB)
#undef IN
#undef OUT
    return n;
}
static int64_t *op_stride(opref *r) { return r->out ? r->o->stride : r->in->stride; }
static const void *op_data(const opref *r) { return r->out ? (const void *)r->o->data : r->in->data; }
static void op_set(opref *r, const void *d) {
    if (r->out) r->o->data = (void *)(uintptr_t)d;
    else r->in->data = d;
}
static int op_nd(const opref *r) { return r->t ? r->t->nd : 2; }
static void op_explicit(opref *r) { /* the strides written out (seq_idx: its own) */
    int k;
    if (!r->t) return;
    for (k = 0; k < r->t->nd; k++) op_stride(r)[k] = r->t->s[k];
}

static opref *find_op(opref *r, int n, const char *name) {
    int i;
    for (i = 0; i < n; i++)
        if (strcmp(r[i].name, name) == 0) return &r[i];
    return NULL;
}

/* selscan_check_ssd_sizes: the size rules alone (a binding's checks): 0 sizes allowed (dstate only
   in an empty problem), cu_seqlens' count without its values, seq_idx "given" by its pointer. */
static void check_sizes_tests(void) {
    static const int64_t cu_ok[3] = {0, 3, 7}, cu_bad[3] = {0, 8, 7};
    static const int32_t given = 0;
    selscan_diag d;
    selscan_ssd_problem p;
    memset(&p, 0, sizeof p);
    p.diag = &d;
    p.batch = 2; p.seqlen = 7; p.nheads = 4; p.headdim = 3; p.dstate = 5; p.n_groups = 2; p.dtype = SELSCAN_F32;
    CHECK(selscan_check_ssd_sizes(&p) == SELSCAN_OK, "check_ssd_sizes: a valid problem refused");
    p.seqlen = 0;
    CHECK(selscan_check_ssd_sizes(&p) == SELSCAN_OK, "check_ssd_sizes: an empty problem refused");
    p.dstate = 0;
    CHECK(selscan_check_ssd_sizes(&p) == SELSCAN_OK, "check_ssd_sizes: dstate 0 of an empty problem refused");
    p.seqlen = 7;
    CHECK(selscan_check_ssd_sizes(&p) == SELSCAN_ERR_SHAPE && d.operand && !strcmp(d.operand, "dstate"),
          "check_ssd_sizes: dstate 0 of a non-empty problem taken");
    p.dstate = 5; p.n_groups = 3;
    CHECK(selscan_check_ssd_sizes(&p) == SELSCAN_ERR_SHAPE && d.code == SELSCAN_RULE_NOT_DIVIDING_NHEADS,
          "check_ssd_sizes: n_groups not dividing nheads taken");
    p.n_groups = 2; p.flags = SELSCAN_SSD_DT_LIMIT; p.dt_min = NAN; p.dt_max = 1.f;
    CHECK(selscan_check_ssd_sizes(&p) == SELSCAN_ERR_SHAPE && d.code == SELSCAN_RULE_DT_LIMIT,
          "check_ssd_sizes: a NaN dt_min taken");
    p.flags = 0; p.batch = 1; p.n_seqs = 2;
    CHECK(selscan_check_ssd_sizes(&p) == SELSCAN_OK, "check_ssd_sizes: n_seqs without its offsets refused");
    p.cu_seqlens = cu_ok;
    CHECK(selscan_check_ssd_sizes(&p) == SELSCAN_OK, "check_ssd_sizes: valid offsets refused");
    p.seq_idx.data = &given;
    CHECK(selscan_check_ssd_sizes(&p) == SELSCAN_ERR_SHAPE && d.code == SELSCAN_RULE_WITH_CU_SEQLENS,
          "check_ssd_sizes: seq_idx with cu_seqlens taken");
    p.seq_idx.data = NULL; p.cu_seqlens = cu_bad;
    CHECK(selscan_check_ssd_sizes(&p) == SELSCAN_ERR_SHAPE && d.code == SELSCAN_RULE_NOT_INCREASING,
          "check_ssd_sizes: decreasing offsets taken");
    p.cu_seqlens = cu_ok; p.batch = 2;
    CHECK(selscan_check_ssd_sizes(&p) == SELSCAN_ERR_SHAPE && d.code == SELSCAN_RULE_BATCH_NOT_1,
          "check_ssd_sizes: packed sequences with batch 2 taken");
    /* the entry points' order (the scan's): sizes, then a missing operand, then the packed rules */
    p.batch = 1; p.cu_seqlens = cu_bad;
    CHECK(selscan_validate_ssd(&p) == SELSCAN_ERR_NULL && d.operand && !strcmp(d.operand, "x"),
          "validate_ssd: bad offsets reported before a missing x");
    p.nheads = 0;
    CHECK(selscan_validate_ssd(&p) == SELSCAN_ERR_SHAPE && d.operand && !strcmp(d.operand, "nheads"),
          "validate_ssd: a missing x reported before nheads 0");
}

static void validation_tests(void) {
    vbase V;
    selscan_ssd_problem p;
    selscan_ssd_grads g;
    opref ops[32];
    int nops, i;
    char what[200];
    vbase_make(&V, 1);
    p = V.S.p;
    g = V.G.g;
    expect("base problem", &V, &p, &g, F_VAL | F_VALG | F_WSF | F_WSB, SELSCAN_OK, NULL, SELSCAN_RULE_NONE, NULL);
    {
        size_t bytes = 0;
        CHECK(selscan_ssd_workspace_size(&p, &g, &bytes) == SELSCAN_OK && bytes > 0 && bytes <= V.wsb,
              "base workspace %zu", bytes);
    }
    /* per operand: missing, negative stride, span overflow, misaligned; outputs: elements overlap */
    nops = oprefs(&V, &p, &g, ops);
    for (i = 0; i < nops; i++) {
        opref *r;
        p = V.S.p;
        g = V.G.g;
        oprefs(&V, &p, &g, ops);
        r = &ops[i];
        if (r->req) {
            op_set(r, NULL);
            snprintf(what, sizeof what, "%s NULL", r->name);
            expect(what, &V, &p, &g, r->fns, SELSCAN_ERR_NULL, r->name, SELSCAN_RULE_MISSING, "missing");
        }
        if (strcmp(r->name, "y") == 0) { /* the backward does not need y */
            op_set(r, NULL);
            expect("y NULL (backward)", &V, &p, &g, F_ALLB, SELSCAN_OK, NULL, SELSCAN_RULE_NONE, NULL);
        }
        p = V.S.p; g = V.G.g; oprefs(&V, &p, &g, ops); r = &ops[i];
        op_explicit(r);
        op_stride(r)[0] = -1;
        snprintf(what, sizeof what, "%s negative stride", r->name);
        expect(what, &V, &p, &g, r->fns, SELSCAN_ERR_STRIDE, r->name, SELSCAN_RULE_NEGATIVE_STRIDE, NULL);
        p = V.S.p; g = V.G.g; oprefs(&V, &p, &g, ops); r = &ops[i];
        op_explicit(r);
        op_stride(r)[0] = INT64_MAX / 4;
        snprintf(what, sizeof what, "%s span overflow", r->name);
        expect(what, &V, &p, &g, r->fns, SELSCAN_ERR_STRIDE, r->name, SELSCAN_RULE_SPAN_OVERFLOWS, NULL);
        p = V.S.p; g = V.G.g; oprefs(&V, &p, &g, ops); r = &ops[i];
        op_set(r, (const char *)op_data(r) + 1);
        snprintf(what, sizeof what, "%s misaligned", r->name);
        expect(what, &V, &p, &g, r->fns, SELSCAN_ERR_STRIDE, r->name, SELSCAN_RULE_MISALIGNED, NULL);
        if (r->out && op_nd(r) > 1) {
            p = V.S.p; g = V.G.g; oprefs(&V, &p, &g, ops); r = &ops[i];
            op_explicit(r);
            op_stride(r)[0] = 0; /* two rows at one address */
            snprintf(what, sizeof what, "%s elements overlap", r->name);
            expect(what, &V, &p, &g, r->fns, SELSCAN_ERR_STRIDE, r->name, SELSCAN_RULE_ELEMENTS_OVERLAP, NULL);
        }
        if (!r->out && op_nd(r) > 1) { /* an input may broadcast */
            p = V.S.p; g = V.G.g; oprefs(&V, &p, &g, ops); r = &ops[i];
            op_explicit(r);
            op_stride(r)[0] = 0;
            snprintf(what, sizeof what, "%s broadcast", r->name);
            expect(what, &V, &p, &g, r->fns & (F_VAL | F_VALG | F_WSF | F_WSB), SELSCAN_OK, NULL, SELSCAN_RULE_NONE,
                   NULL);
        }
    }
    /* overlaps: each output over an input (or another output) of the same size, and the workspace */
    {
        static const char *const pairs[][2] = {
            {"y", "x"}, {"y", "z"}, {"final_state", "initial_state"}, {"y", "final_state"}, {"dx", "x"}, {"dx", "dy"},
            {"ddt", "dt"}, {"dA", "A"}, {"dA", "seq_idx"}, {"dB", "B"}, {"dB", "dC"}, {"dC", "C"}, {"dD", "D"},
            {"dz", "z"}, {"ddt_bias", "dt_bias"}, {"dinitial_state", "initial_state"},
            {"dinitial_state", "dfinal_state"}, {"dx", "dz"}, {"dA", "ddt_bias"}};
        for (i = 0; i < (int)(sizeof pairs / sizeof pairs[0]); i++) {
            opref *a, *b;
            char rule[64];
            p = V.S.p; g = V.G.g; oprefs(&V, &p, &g, ops);
            a = find_op(ops, nops, pairs[i][0]);
            b = find_op(ops, nops, pairs[i][1]);
            op_set(a, op_data(b));
            snprintf(what, sizeof what, "%s over %s", a->name, b->name);
            snprintf(rule, sizeof rule, "overlaps %s", b->name);
            expect(what, &V, &p, &g, a->fns, SELSCAN_ERR_ALIAS, a->name, SELSCAN_RULE_OVERLAPS, rule);
        }
        for (i = 0; i < nops; i++) { /* each output over the workspace */
            opref *r;
            p = V.S.p; g = V.G.g; oprefs(&V, &p, &g, ops);
            r = &ops[i];
            if (!r->out) continue;
            op_set(r, (char *)V.ws + 128);
            snprintf(what, sizeof what, "%s over the workspace", r->name);
            expect(what, &V, &p, &g, r->fns & (F_FWD | F_BWD), SELSCAN_ERR_ALIAS, r->name, SELSCAN_RULE_OVERLAPS,
                   "overlaps workspace");
        }
        { /* an input inside the workspace */
            p = V.S.p; g = V.G.g;
            memcpy((char *)V.ws + 256, V.S.x.data, (size_t)V.S.x.count * 4);
            p.x.data = (char *)V.ws + 256;
            expect("x inside the workspace", &V, &p, &g, F_FWD | F_BWD, SELSCAN_ERR_ALIAS, "workspace",
                   SELSCAN_RULE_OVERLAPS, "overlaps x");
        }
    }
    /* sizes, flags, dt limits, dtype */
    p = V.S.p; g = V.G.g;
#define CASE(stmt, want, opd, RULE, fns)                                          \
    do {                                                                           \
        p = V.S.p; g = V.G.g;                                                      \
        stmt;                                                                      \
        expect(#stmt, &V, &p, &g, fns, want, opd, SELSCAN_RULE_##RULE, NULL);      \
    } while (0)
    CASE(p.batch = 0, SELSCAN_ERR_SHAPE, "batch", NOT_POSITIVE, F_ALL);
    CASE(p.seqlen = -1, SELSCAN_ERR_SHAPE, "seqlen", NOT_POSITIVE, F_ALL);
    CASE(p.nheads = 0, SELSCAN_ERR_SHAPE, "nheads", NOT_POSITIVE, F_ALL);
    CASE(p.headdim = 0, SELSCAN_ERR_SHAPE, "headdim", NOT_POSITIVE, F_ALL);
    CASE(p.dstate = -5, SELSCAN_ERR_SHAPE, "dstate", NOT_POSITIVE, F_ALL);
    CASE(p.n_groups = 3, SELSCAN_ERR_SHAPE, "n_groups", NOT_DIVIDING_NHEADS, F_ALL);
    CASE(p.n_groups = -2, SELSCAN_ERR_SHAPE, "n_groups", NOT_DIVIDING_NHEADS, F_ALL);
    CASE(p.dtype = (selscan_dtype)3, SELSCAN_ERR_DTYPE, "dtype", UNKNOWN_DTYPE, F_ALL);
    CASE(p.dtype = (selscan_dtype)-1, SELSCAN_ERR_DTYPE, "dtype", UNKNOWN_DTYPE, F_ALL);
    CASE(p.flags |= 8u, SELSCAN_ERR_UNSUPPORTED, "flags", UNKNOWN_FLAG, F_ALL);
    CASE(p.flags |= 0x80000000u, SELSCAN_ERR_UNSUPPORTED, "flags", UNKNOWN_FLAG, F_ALL);
    CASE((p.dt_min = 2.0f, p.dt_max = 1.0f), SELSCAN_ERR_SHAPE, "dt_min", DT_LIMIT, F_ALL);
    CASE(p.dt_min = NAN, SELSCAN_ERR_SHAPE, "dt_min", DT_LIMIT, F_ALL);
    CASE(p.dt_max = NAN, SELSCAN_ERR_SHAPE, "dt_max", DT_LIMIT, F_ALL); /* the NaN one named */
    CASE((p.dt_min = NAN, p.dt_max = NAN), SELSCAN_ERR_SHAPE, "dt_min", DT_LIMIT, F_ALL);
    CASE((p.dt_min = -INFINITY, p.dt_max = INFINITY), SELSCAN_OK, NULL, NONE, F_VAL | F_VALG | F_WSF | F_WSB);
    CASE((p.dt_min = 2.0f, p.dt_max = 1.0f, p.flags &= ~SELSCAN_SSD_DT_LIMIT), SELSCAN_OK, NULL, NONE, F_VAL | F_WSF);
    CASE((p.flags &= ~SELSCAN_SSD_D_HEADDIM), SELSCAN_OK, NULL, NONE, F_VAL); /* D (H) is in D (H, P)'s memory */
    CASE(p.n_seqs = 2, SELSCAN_ERR_NULL, "cu_seqlens", MISSING_N_SEQS, F_ALL);
    CASE(g.dz.data = NULL, SELSCAN_OK, NULL, NONE, F_VALG | F_WSB);
    CASE(p.z.data = NULL, SELSCAN_ERR_NULL, "dz", WITHOUT_Z, F_ALLB);
    CASE((p.z.data = NULL, g.dz.data = NULL), SELSCAN_OK, NULL, NONE, F_VALG | F_WSB);
    /* counts: the diag names the product that overflows */
    CASE((p.batch = (int64_t)1 << 31, p.seqlen = (int64_t)1 << 31, p.headdim = (int64_t)1 << 31), SELSCAN_ERR_SHAPE,
         "batch * seqlen * nheads * headdim", COUNT_OVERFLOWS, F_ALL);
    CASE((p.batch = 1, p.seqlen = 16, p.nheads = (int64_t)1 << 20, p.n_groups = (int64_t)1 << 20, p.headdim = 1,
          p.dstate = (int64_t)1 << 40, p.seq_idx.data = NULL),
         SELSCAN_ERR_SHAPE, "batch * seqlen * n_groups * dstate", COUNT_OVERFLOWS, F_ALL);
    CASE((p.batch = 1, p.seqlen = 16, p.nheads = (int64_t)1 << 20, p.n_groups = 1, p.headdim = (int64_t)1 << 20,
          p.dstate = (int64_t)1 << 30, p.seq_idx.data = NULL),
         SELSCAN_ERR_SHAPE, "batch * nheads * headdim * dstate", COUNT_OVERFLOWS, F_ALL);
    { /* the reference's workspace size overflows (every count fits): L = N = 2^29 with dB asked for
         (the states (L + 2) N floats and dB's sums L N: 2^61 bytes). The inputs broadcast (one
         element each), dB is the only output: its 2^60-byte span at an address no other operand's
         bytes come near (never dereferenced: the call is refused first) */
        selscan_ssd_grads g2;
        memset(&g2, 0, sizeof g2);
        p = V.S.p;
        p.batch = 1;
        p.seqlen = (int64_t)1 << 29;
        p.nheads = 1;
        p.n_groups = 1;
        p.headdim = 1;
        p.dstate = (int64_t)1 << 29;
        p.D.data = p.z.data = p.dt_bias.data = p.seq_idx.data = p.initial_state.data = NULL;
        p.y.data = p.final_state.data = NULL;
        memset(p.x.stride, 0, sizeof p.x.stride); p.x.stride[0] = 1;
        memset(p.dt.stride, 0, sizeof p.dt.stride); p.dt.stride[0] = 1;
        memset(p.B.stride, 0, sizeof p.B.stride); p.B.stride[0] = 1;
        memset(p.C.stride, 0, sizeof p.C.stride); p.C.stride[0] = 1;
        g2.dy.data = V.G.g.dy.data; g2.dy.stride[0] = 1;
        g2.dB.data = (void *)((uintptr_t)1 << 62);
        expect("workspace size overflows", &V, &p, &g2, F_WSB | F_BWD | F_ONLY, SELSCAN_ERR_SHAPE, "workspace",
               SELSCAN_RULE_SIZE_OVERFLOWS, NULL);
        /* the fast backward's own need (2^60 bytes of dB partials) fits: too small */
        expect("fast backward's workspace 2^60", &V, &p, &g2, F_BCPU | F_BPART | F_BRED, SELSCAN_ERR_WORKSPACE,
               "workspace", SELSCAN_RULE_TOO_SMALL, NULL);
        g2.dB.data = NULL; /* without dB: 2^60 bytes, accepted by the size query */
        expect("workspace size 2^60", &V, &p, &g2, F_WSB | F_VALG, SELSCAN_OK, NULL, SELSCAN_RULE_NONE, NULL);
    }
    /* workspace, bytes, grads, problem */
    {
        size_t need = 0;
        selscan_ssd_workspace_size(&V.S.p, &V.G.g, &need);
        p = V.S.p; g = V.G.g;
        {
            selscan_status st;
            int k;
            for (k = 0; k < NG; k++) tc_poison(&V.G.out[k]);
            dg.operand = dsent;
            st = selscan_ssd_backward_ref(&p, &g, NULL, need);
            CHECK(st == SELSCAN_ERR_WORKSPACE && dg.code == SELSCAN_RULE_MISSING &&
                      strcmp(dg.operand, "workspace") == 0 && outputs_untouched(&V),
                  "backward: NULL workspace: %s", selscan_status_name(st));
            /* the size covers both backwards; the fast one's is the larger here (the slack is 63 bytes) */
            st = selscan_ssd_backward_cpu(&p, &g, V.ws, need - 64);
            CHECK(st == SELSCAN_ERR_WORKSPACE && dg.code == SELSCAN_RULE_TOO_SMALL && outputs_untouched(&V),
                  "backward_cpu: workspace too small: %s", selscan_status_name(st));
            st = selscan_ssd_backward_ref(&p, &g, V.ws, 63);
            CHECK(st == SELSCAN_ERR_WORKSPACE && dg.code == SELSCAN_RULE_TOO_SMALL && outputs_untouched(&V),
                  "backward_ref: workspace too small: %s", selscan_status_name(st));
            st = selscan_ssd_backward_ref(&p, &g, (char *)V.ws + 3, need); /* any pointer: aligned up inside */
            CHECK(st == SELSCAN_OK, "backward: unaligned workspace pointer: %s", selscan_status_name(st));
            st = selscan_ssd_backward_cpu(&p, &g, (char *)V.ws + 3, need);
            CHECK(st == SELSCAN_OK, "backward_cpu: unaligned workspace pointer: %s", selscan_status_name(st));
            { /* the backward's parts: one workspace of workspace_size_parts(p, g) bytes */
                size_t pb = 0;
                CHECK(selscan_ssd_workspace_size_parts(&p, &g, 3, &pb) == SELSCAN_OK && pb > need,
                      "workspace_size_parts(g): 3 parts");
                poison_outs(&V);
                st = selscan_ssd_backward_cpu_part(&p, &g, 2, 3, V.ws, pb - 64);
                CHECK(st == SELSCAN_ERR_WORKSPACE && dg.code == SELSCAN_RULE_TOO_SMALL && outputs_untouched(&V),
                      "backward_cpu_part: workspace too small: %s", selscan_status_name(st));
                st = selscan_ssd_backward_cpu_reduce(&p, &g, 3, 3, V.ws, pb);
                CHECK(st == SELSCAN_ERR_SHAPE && dg.code == SELSCAN_RULE_OUT_OF_RANGE && strcmp(dg.operand, "part") == 0 &&
                          outputs_untouched(&V),
                      "backward_cpu_reduce: part 3 of 3: %s", selscan_status_name(st));
                st = selscan_ssd_backward_cpu_part(&p, &g, 0, 0, V.ws, pb);
                CHECK(st == SELSCAN_ERR_SHAPE && dg.code == SELSCAN_RULE_OUT_OF_RANGE && strcmp(dg.operand, "n_parts") == 0 &&
                          outputs_untouched(&V),
                      "backward_cpu_part: 0 parts: %s", selscan_status_name(st));
                st = selscan_ssd_backward_cpu_reduce(&p, &g, 0, 2, NULL, pb);
                CHECK(st == SELSCAN_ERR_WORKSPACE && dg.code == SELSCAN_RULE_MISSING && outputs_untouched(&V),
                      "backward_cpu_reduce: NULL workspace: %s", selscan_status_name(st));
            }
            selscan_ssd_workspace_size(&V.S.p, NULL, &need);
            poison_outs(&V);
            st = selscan_ssd_forward_ref(&p, V.ws, 63); /* the reference's state: 3 floats, 64 bytes aligned up */
            CHECK(st == SELSCAN_ERR_WORKSPACE && dg.code == SELSCAN_RULE_TOO_SMALL && outputs_untouched(&V),
                  "forward_ref: workspace too small: %s", selscan_status_name(st));
            st = selscan_ssd_forward_ref(&p, V.ws, 64);
            CHECK(st == SELSCAN_OK, "forward_ref: workspace of its own size: %s", selscan_status_name(st));
            poison_outs(&V);
            st = selscan_ssd_forward_cpu(&p, V.ws, need - 64);
            CHECK(st == SELSCAN_ERR_WORKSPACE && dg.code == SELSCAN_RULE_TOO_SMALL && outputs_untouched(&V),
                  "forward_cpu: workspace too small: %s", selscan_status_name(st));
            st = selscan_ssd_forward_ref(&p, (char *)V.ws + 5, need);
            CHECK(st == SELSCAN_OK, "forward_ref: unaligned workspace pointer: %s", selscan_status_name(st));
            st = selscan_ssd_forward_cpu(&p, (char *)V.ws + 5, need);
            CHECK(st == SELSCAN_OK, "forward_cpu: unaligned workspace pointer: %s", selscan_status_name(st));
            { /* parts: all share one workspace of workspace_size_parts bytes */
                size_t pb = 0;
                CHECK(selscan_ssd_workspace_size_parts(&p, NULL, 3, &pb) == SELSCAN_OK && pb > need - 63,
                      "workspace_size_parts: 3 parts");
                poison_outs(&V);
                st = selscan_ssd_forward_cpu_part(&p, 2, 3, V.ws, pb - 64);
                CHECK(st == SELSCAN_ERR_WORKSPACE && dg.code == SELSCAN_RULE_TOO_SMALL && outputs_untouched(&V),
                      "forward_cpu_part: workspace too small: %s", selscan_status_name(st));
                st = selscan_ssd_forward_cpu_part(&p, 3, 3, V.ws, pb);
                CHECK(st == SELSCAN_ERR_SHAPE && dg.code == SELSCAN_RULE_OUT_OF_RANGE && strcmp(dg.operand, "part") == 0 &&
                          outputs_untouched(&V),
                      "forward_cpu_part: part 3 of 3: %s", selscan_status_name(st));
                st = selscan_ssd_forward_cpu_part(&p, 0, 0, V.ws, pb);
                CHECK(st == SELSCAN_ERR_SHAPE && dg.code == SELSCAN_RULE_OUT_OF_RANGE && strcmp(dg.operand, "n_parts") == 0,
                      "forward_cpu_part: 0 parts: %s", selscan_status_name(st));
                st = selscan_ssd_workspace_size_parts(&p, NULL, (int64_t)1 << 25, &pb);
                CHECK(st == SELSCAN_ERR_SHAPE && strcmp(dg.operand, "n_parts") == 0, "workspace_size_parts: 2^25 parts");
                dg.operand = dsent;
                CHECK(selscan_ssd_workspace_size_parts(&p, NULL, 2, NULL) == SELSCAN_ERR_NULL && strcmp(dg.operand, "bytes") == 0,
                      "workspace_size_parts: bytes NULL");
            }
        }
        dg.operand = dsent;
        CHECK(selscan_ssd_workspace_size(&p, NULL, NULL) == SELSCAN_ERR_NULL && strcmp(dg.operand, "bytes") == 0,
              "workspace_size: bytes NULL");
        CHECK(selscan_ssd_workspace_size(NULL, NULL, &need) == SELSCAN_ERR_NULL, "workspace_size: problem NULL");
        CHECK(selscan_validate_ssd(NULL) == SELSCAN_ERR_NULL &&
                  selscan_ssd_forward_ref(NULL, V.ws, V.wsb) == SELSCAN_ERR_NULL &&
                  selscan_ssd_backward_ref(NULL, &g, V.ws, V.wsb) == SELSCAN_ERR_NULL,
              "problem NULL");
        expect("grads NULL", &V, &p, NULL, F_VALG | F_BWD, SELSCAN_ERR_NULL, "grads", SELSCAN_RULE_MISSING, NULL);
    }
    vbase_free(&V);
    /* packed sequences (cu_seqlens) */
    vbase_make(&V, 2);
    {
        int64_t *cu = V.S.cu;
        expect("cu_seqlens base", &V, &V.S.p, &V.G.g, F_ALL, SELSCAN_OK, NULL, SELSCAN_RULE_NONE, NULL);
        {
            int32_t sid[3] = {0, 0, 0};
            p = V.S.p; g = V.G.g;
            p.seq_idx.data = sid;
            expect("seq_idx with cu_seqlens", &V, &p, &g, F_ALL, SELSCAN_ERR_SHAPE, "seq_idx",
                   SELSCAN_RULE_WITH_CU_SEQLENS, NULL);
        }
        CASE(p.batch = 2, SELSCAN_ERR_SHAPE, "batch", BATCH_NOT_1, F_ALL);
        CASE(p.n_seqs = 0, SELSCAN_ERR_SHAPE, "n_seqs", NO_SEQUENCE, F_ALL);
        CASE(p.n_seqs = -1, SELSCAN_ERR_SHAPE, "n_seqs", NO_SEQUENCE, F_ALL);
        CASE(p.cu_seqlens = (const int64_t *)((const char *)cu + 4), SELSCAN_ERR_SHAPE, "cu_seqlens", MISALIGNED,
             F_ALL);
        cu[0] = 1;
        CASE((void)0, SELSCAN_ERR_SHAPE, "cu_seqlens", FIRST_OFFSET, F_ALL);
        cu[0] = 0; cu[2] = 2;
        CASE((void)0, SELSCAN_ERR_SHAPE, "cu_seqlens", LAST_OFFSET, F_ALL);
        cu[2] = 3; cu[1] = 4;
        CASE((void)0, SELSCAN_ERR_SHAPE, "cu_seqlens", NOT_INCREASING, F_ALL);
        cu[1] = 1;
        { /* final_state over cu_seqlens' memory (a copy inside a buffer that holds final_state whole) */
            int64_t mem[64];
            memcpy(mem, cu, 3 * sizeof(int64_t));
            p = V.S.p; g = V.G.g;
            p.cu_seqlens = mem;
            p.final_state.data = mem;
            expect("final_state over cu_seqlens", &V, &p, &g, F_ALLF, SELSCAN_ERR_ALIAS, "final_state",
                   SELSCAN_RULE_OVERLAPS, "overlaps cu_seqlens");
            p = V.S.p; g = V.G.g;
            p.cu_seqlens = mem;
            g.dinitial_state.data = mem;
            expect("dinitial_state over cu_seqlens", &V, &p, &g, F_ALLB, SELSCAN_ERR_ALIAS, "dinitial_state",
                   SELSCAN_RULE_OVERLAPS, "overlaps cu_seqlens");
        }
    }
#undef CASE
    vbase_free(&V);
}

int main(void) {
    tc_init("test_ssd");
    check_sizes_tests();
    validation_tests();
    forward_tests();
    backward_tests();
    bwd_big_tests();
    repeat_tests();
    packed_identity_tests();
    nan_tests();
    special_tests();
    return tc_finish();
}
