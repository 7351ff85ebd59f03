/* ssd_quickstart.c - Mamba-2's SSD scan of one layer on the CPU, forward and backward.
 *
 * A fixed-seed problem in mamba_chunk_scan_combined's layouts (batch 2, L 256, 8 heads of headdim
 * 64, d_state 64, one group of B / C; D per head, z gate, dt_bias, softplus, an initial state and the
 * final state). It runs the fast forward and backward, checks the forward against the exact
 * reference and a few gradient elements against central finite differences of the forward, and
 * prints the times. Exit status 0 when every check passes (`make run-ssd`; `make test` runs it too).
 *
 *     cc -std=c99 -O2 -I. examples/ssd_quickstart.c -o ssd_quickstart -lm -lpthread
 */
#define _POSIX_C_SOURCE 200112L
#define SELSCAN_IMPLEMENTATION
#include "selscan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { BATCH = 2, SEQLEN = 256, NHEADS = 8, HEADDIM = 64, DSTATE = 64, NGROUPS = 1 };

static uint64_t rng_state = 0x55d5eedULL;
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
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(1); }
    return p;
}

#define CHECK(call) do { selscan_status st_ = (call); if (st_ != SELSCAN_OK) { \
    fprintf(stderr, "%s failed: %s\n", #call, selscan_status_string(st_)); return 1; } } while (0)

enum { NX = BATCH * SEQLEN * NHEADS * HEADDIM, NDT = BATCH * SEQLEN * NHEADS, NBC = BATCH * SEQLEN * NGROUPS * DSTATE,
       NS = BATCH * NHEADS * HEADDIM * DSTATE };

/* loss = sum(dy * y) + sum(dfinal * final_state), in double: the backward returns its gradient. */
static double loss(selscan_ssd_problem *p, const float *dy, const float *dfinal, void *ws, size_t wsb) {
    const float *y = (const float *)p->y.data, *fs = (const float *)p->final_state.data;
    double s = 0;
    size_t i;
    if (selscan_ssd_forward_cpu(p, ws, wsb) != SELSCAN_OK) return NAN;
    for (i = 0; i < NX; i++) s += (double)dy[i] * y[i];
    for (i = 0; i < NS; i++) s += (double)dfinal[i] * fs[i];
    return s;
}

int main(void) {
    float *x = alloc(4 * NX), *z = alloc(4 * NX), *y = alloc(4 * NX), *yref = alloc(4 * NX), *dy = alloc(4 * NX);
    float *dt = alloc(4 * NDT), *Bm = alloc(4 * NBC), *Cm = alloc(4 * NBC), *A = alloc(4 * NHEADS);
    float *D = alloc(4 * NHEADS), *dt_bias = alloc(4 * NHEADS), *h0 = alloc(4 * NS), *hT = alloc(4 * NS);
    float *dfinal = alloc(4 * NS), *dx = alloc(4 * NX), *dz = alloc(4 * NX), *ddt = alloc(4 * NDT);
    float *dB = alloc(4 * NBC), *dC = alloc(4 * NBC), *dA = alloc(4 * NHEADS), *dD = alloc(4 * NHEADS);
    float *ddt_bias = alloc(4 * NHEADS), *dh0 = alloc(4 * NS);
    selscan_ssd_problem p = {0};
    selscan_ssd_grads g = {0};
    size_t ws_fwd, ws_bwd, i;
    void *ws;
    double t0, t_fwd, t_bwd, worst_fwd = 0, worst = 0, sum = 0;
    int failures = 0, k;

    /* Mamba-2's initialisation ranges: A = -(1..16) per head, dt_bias = softplus^-1 of dt in [1e-3, 0.1]. */
    for (i = 0; i < NHEADS; i++) A[i] = -uniform(1, 16);
    for (i = 0; i < NHEADS; i++) dt_bias[i] = logf(expm1f(uniform(1e-3f, 0.1f)));
    fill(x, NX, -1, 1); fill(z, NX, -2, 2); fill(dy, NX, -1, 1); fill(dt, NDT, -1, 1);
    fill(Bm, NBC, -1, 1); fill(Cm, NBC, -1, 1); fill(D, NHEADS, 0.5f, 1.5f);
    fill(h0, NS, -0.5f, 0.5f); fill(dfinal, NS, -1, 1);

    p.batch = BATCH; p.seqlen = SEQLEN; p.nheads = NHEADS; p.headdim = HEADDIM; p.dstate = DSTATE;
    p.n_groups = NGROUPS; p.dtype = SELSCAN_F32; p.flags = SELSCAN_SSD_DT_SOFTPLUS;
    p.x.data = x; p.dt.data = dt; p.A.data = A; p.B.data = Bm; p.C.data = Cm; p.D.data = D; p.z.data = z;
    p.dt_bias.data = dt_bias; p.initial_state.data = h0; p.y.data = yref; p.final_state.data = hT;
    g.dy.data = dy; g.dfinal_state.data = dfinal; g.dx.data = dx; g.ddt.data = ddt; g.dA.data = dA;
    g.dB.data = dB; g.dC.data = dC; g.dD.data = dD; g.dz.data = dz; g.ddt_bias.data = ddt_bias;
    g.dinitial_state.data = dh0;

    CHECK(selscan_ssd_workspace_size(&p, NULL, &ws_fwd));
    CHECK(selscan_ssd_workspace_size(&p, &g, &ws_bwd));
    ws = alloc(ws_fwd > ws_bwd ? ws_fwd : ws_bwd);

    /* the fast forward against the exact reference: rounding only (fused multiply-adds, partial sums) */
    CHECK(selscan_ssd_forward_ref(&p, ws, ws_bwd));
    p.y.data = y;
    t0 = now_ms();
    CHECK(selscan_ssd_forward_cpu(&p, ws, ws_bwd));
    t_fwd = now_ms() - t0;
    for (i = 0; i < NX; i++) {
        const double e = fabs((double)y[i] - yref[i]) / (1.0 + fabs((double)yref[i]));
        if (!(e <= worst_fwd)) worst_fwd = e; /* a NaN becomes the worst */
        sum += y[i];
    }
    if (!(worst_fwd < 1e-4)) failures++; /* f32 over 64 states and 256 steps: ~1e-6 seen; a wrong path is O(1) */

    t0 = now_ms();
    CHECK(selscan_ssd_backward_cpu(&p, &g, ws, ws_bwd));
    t_bwd = now_ms() - t0;

    /* a few gradient elements against central differences of the loss (double sums, f32 forward) */
    {
        struct { const char *name; float *v, *grad; size_t n; float h; } probe[] = {
            {"x", x, dx, NX, 1e-2f}, {"dt", dt, ddt, NDT, 1e-2f}, {"A", A, dA, NHEADS, 1e-2f},
            {"B", Bm, dB, NBC, 1e-2f}, {"C", Cm, dC, NBC, 1e-2f}, {"D", D, dD, NHEADS, 1e-2f},
            {"z", z, dz, NX, 1e-2f}, {"dt_bias", dt_bias, ddt_bias, NHEADS, 1e-2f},
            {"initial_state", h0, dh0, NS, 1e-2f}};
        for (k = 0; k < (int)(sizeof probe / sizeof probe[0]); k++) {
            const size_t j = (size_t)(uniform(0, 1) * (float)probe[k].n) % probe[k].n;
            const float keep = probe[k].v[j];
            double lp, lm, fd, e;
            probe[k].v[j] = keep + probe[k].h; lp = loss(&p, dy, dfinal, ws, ws_bwd);
            probe[k].v[j] = keep - probe[k].h; lm = loss(&p, dy, dfinal, ws, ws_bwd);
            probe[k].v[j] = keep;
            fd = (lp - lm) / (2.0 * probe[k].h);
            /* the f32 loss' rounding over ~1e6 terms divided by 2h, plus the O(h^2) truncation */
            e = fabs(fd - probe[k].grad[j]) / (1.0 + fabs(fd));
            if (!(e <= worst)) worst = e;
            if (!(e < 2e-2)) {
                failures++;
                printf("  d%s[%zu]: backward %.6g, finite difference %.6g\n", probe[k].name, j, probe[k].grad[j], fd);
            }
        }
    }

    printf("SSD scan (Mamba-2): batch %d, L %d, %d heads x headdim %d, d_state %d, %d group(s), f32, on %s\n",
           BATCH, SEQLEN, NHEADS, HEADDIM, DSTATE, NGROUPS, selscan_cpu_backend());
    printf("forward  %.2f ms  (checksum %.6f; against the exact reference: worst rel %.1e)\n", t_fwd, sum, worst_fwd);
    printf("backward %.2f ms  (9 gradients against central differences: worst rel %.1e)\n", t_bwd, worst);
    printf("%d passed, %d failed\n", 10 - failures, failures); /* the forward and 9 gradients */
    return failures ? 1 : 0;
}
