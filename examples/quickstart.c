/* quickstart.c - the selective scan of one Mamba-like layer on the CPU, forward and backward.
 *
 * A fixed-seed problem (batch 2, dim 256, L 512, N 16; variable B and C, D, z, delta_bias,
 * softplus) in the (batch, dim, L) layout. It runs the forward and the backward, prints a
 * checksum and the times, and checks a few gradient elements against central finite
 * differences of the forward. Exit status 0 when every check passes.
 *
 *     cc -std=c99 -O2 -I. examples/quickstart.c -o quickstart -lm -lpthread
 */
#define _POSIX_C_SOURCE 200112L
#define SELSCAN_IMPLEMENTATION
#include "selscan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { BATCH = 2, DIM = 256, SEQLEN = 512, DSTATE = 16 };

static uint64_t rng_state = 0x5eed5eedULL;
static float uniform(float lo, float hi) { /* xorshift64*: the same numbers on every machine */
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return lo + (hi - lo) * (float)((rng_state * 2685821657736338717ULL) >> 40) / 16777216.0f;
}
static void fill(float *x, size_t n, float lo, float hi) { size_t i; for (i = 0; i < n; i++) x[i] = uniform(lo, hi); }

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void *alloc(size_t bytes) { /* plain malloc (the workspace needs no alignment), never NULL for 0 */
    void *p = malloc(bytes ? bytes : 1);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(1); }
    return p;
}

#define CHECK(call) do { selscan_status st_ = (call); if (st_ != SELSCAN_OK) { \
    fprintf(stderr, "%s failed: %s\n", #call, selscan_status_string(st_)); return 1; } } while (0)

/* loss = sum(dy * y), in double: its gradient with respect to the inputs is what the backward returns. */
static double loss(selscan_problem *p, const float *dy, void *ws, size_t wsb) {
    const float *y = (const float *)p->y.data;
    double s = 0;
    size_t i;
    if (selscan_forward_cpu(p, ws, wsb) != SELSCAN_OK) return NAN;
    for (i = 0; i < (size_t)BATCH * DIM * SEQLEN; i++) s += (double)dy[i] * y[i];
    return s;
}

int main(void) {
    const size_t nx = (size_t)BATCH * DIM * SEQLEN, nbc = (size_t)BATCH * DSTATE * SEQLEN, na = (size_t)DIM * DSTATE;
    float *u = alloc(4 * nx), *delta = alloc(4 * nx), *z = alloc(4 * nx), *y = alloc(4 * nx), *dy = alloc(4 * nx);
    float *du = alloc(4 * nx), *ddelta = alloc(4 * nx), *dz = alloc(4 * nx);
    float *A = alloc(4 * na), *Bm = alloc(4 * nbc), *Cm = alloc(4 * nbc), *D = alloc(4 * DIM), *bias = alloc(4 * DIM);
    float *dA = alloc(4 * na), *dB = alloc(4 * nbc), *dC = alloc(4 * nbc), *dD = alloc(4 * DIM), *dbias = alloc(4 * DIM);
    selscan_problem p = {0};
    selscan_grads g = {0};
    size_t ws_fwd, ws_bwd, i;
    void *ws;
    double t0, t_fwd, t_bwd, sum = 0, sumabs = 0, worst = 0;
    int failures = 0, k;

    /* Mamba's initialisation ranges: A = -(1..N) per state, dt near softplus' knee. */
    for (i = 0; i < na; i++) A[i] = -(float)(1 + i % DSTATE) * uniform(0.5f, 1.5f);
    fill(u, nx, -1, 1); fill(delta, nx, -3, 1); fill(z, nx, -2, 2); fill(dy, nx, -1, 1);
    fill(Bm, nbc, -1, 1); fill(Cm, nbc, -1, 1); fill(D, DIM, 0.5f, 1.5f); fill(bias, DIM, -1, 0);

    p.batch = BATCH; p.dim = DIM; p.seqlen = SEQLEN; p.dstate = DSTATE; p.n_groups = 1;
    p.dtype = SELSCAN_F32;
    p.flags = SELSCAN_DELTA_SOFTPLUS;
    p.u.data = u; p.delta.data = delta; p.A.data = A; p.B.data = Bm; p.C.data = Cm;
    p.D.data = D; p.z.data = z; p.delta_bias.data = bias; p.y.data = y;
    g.dy.data = dy; g.du.data = du; g.ddelta.data = ddelta; g.dz.data = dz; g.dA.data = dA;
    g.dB.data = dB; g.dC.data = dC; g.dD.data = dD; g.ddelta_bias.data = dbias;

    CHECK(selscan_workspace_size(&p, NULL, &ws_fwd));
    CHECK(selscan_workspace_size(&p, &g, &ws_bwd));
    ws = alloc(ws_fwd > ws_bwd ? ws_fwd : ws_bwd);

    t0 = now_ms();
    CHECK(selscan_forward_cpu(&p, ws, ws_fwd));
    t_fwd = now_ms() - t0;
    t0 = now_ms();
    CHECK(selscan_backward_cpu(&p, &g, ws, ws_bwd));
    t_bwd = now_ms() - t0;

    for (i = 0; i < nx; i++) { sum += y[i]; sumabs += fabs(y[i]); }
    printf("selscan %d.%d.%d quickstart: batch %d, dim %d, L %d, N %d, f32, variable B/C, D, z, delta_bias, softplus\n",
           SELSCAN_VERSION_MAJOR, SELSCAN_VERSION_MINOR, SELSCAN_VERSION_PATCH, BATCH, DIM, SEQLEN, DSTATE);
    printf("  y: (%d, %d, %d)  sum %.6f  sum|y| %.6f  y[0,0,%d] %.6f\n", BATCH, DIM, SEQLEN, sum, sumabs, SEQLEN - 1,
           y[SEQLEN - 1]);
    printf("  forward  %8.2f ms   backward %8.2f ms   (one thread; workspace %zu / %zu bytes)\n", t_fwd, t_bwd,
           ws_fwd, ws_bwd);

    /* Finite differences of loss = sum(dy * y) on a few elements of each input. */
    printf("  gradient check against central differences (eps 1e-2):\n");
    {
        struct { const char *name; float *x, *grad; size_t n; } in[] = {
            {"u", u, du, nx}, {"delta", delta, ddelta, nx}, {"z", z, dz, nx}, {"A", A, dA, na},
            {"B", Bm, dB, nbc}, {"C", Cm, dC, nbc}, {"D", D, dD, DIM}, {"delta_bias", bias, dbias, DIM}};
        const float eps = 1e-2f;
        for (k = 0; k < (int)(sizeof in / sizeof in[0]); k++) {
            size_t at = (size_t)(uniform(0, 1) * (float)in[k].n) % in[k].n;
            float keep = in[k].x[at];
            double lp, lm, fd, err;
            in[k].x[at] = keep + eps; lp = loss(&p, dy, ws, ws_fwd);
            in[k].x[at] = keep - eps; lm = loss(&p, dy, ws, ws_fwd);
            in[k].x[at] = keep;
            fd = (lp - lm) / (2.0 * eps);
            err = fabs(fd - in[k].grad[at]) / (fabs(fd) > 1e-2 ? fabs(fd) : 1e-2);
            if (!(err <= 2e-2)) failures++;
            if (err > worst) worst = err;
            printf("    d%-11s[%7zu]  backward %12.6f  finite difference %12.6f  rel. error %.1e %s\n", in[k].name, at,
                   in[k].grad[at], fd, err, err <= 2e-2 ? "ok" : "FAIL");
        }
    }
    printf("%s (worst relative error %.1e)\n", failures ? "gradient check FAILED" : "gradient check passed", worst);
    return failures ? 1 : 0;
}
