/* bench_conv: the causal conv1d's fast CPU path (1 thread, and all threads through the part API on
   pthreads) against the scalar reference (1 thread), forward and backward (dx, dweight, dbias),
   f32 and bf16, contiguous (L stride 1) and channels-last (dim stride 1) x / y / dy / dx.
   Prints best-of-k wall times in ms, the ratio to the reference and the bytes a call must move
   (x + y, or x + dy + dx) per second, and the floor: a plain pass with that traffic (ms; f/1 its
   share of the fast path's 1-thread time). bench/NOTES.md CONV-CPU-v1 has the figures.
   Usage: bench_conv [threads]. SELSCAN_BENCH_QUICK=1: one run per figure. */
#define _POSIX_C_SOURCE 200809L
#define SELSCAN_IMPLEMENTATION
#include "../selscan.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct bcase {
    const char *name;
    int64_t batch, dim, L, W;
} bcase;

static const bcase cases[] = {
    {"mamba-130m/4", 4, 1536, 1024, 4}, /* d_inner 1536, d_conv 4; batch 4 x 1024 tokens */
    {"mamba-1.4b/1", 1, 4096, 2048, 4},
    {"vision", 64, 256, 196, 3},
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
/* the calling thread's CPU time: the 1-thread figures exclude time the thread was not running
   (a shared machine) */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *fill(size_t n, selscan_dtype dt, uint64_t *s) {
    size_t i, es = dt == SELSCAN_F32 ? 4 : 2;
    void *p = malloc(n * es);
    if (!p) abort();
    for (i = 0; i < n; i++) {
        float v;
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        v = (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
        if (dt == SELSCAN_F32) ((float *)p)[i] = v;
        else ((uint16_t *)p)[i] = selscan_f32_to_bf16(v);
    }
    return p;
}

typedef struct job {
    int bwd;
    const selscan_conv_problem *p;
    const selscan_conv_grads *g;
    int64_t part, n;
    selscan_status st;
} job;

static void *run_job(void *a) {
    job *j = (job *)a;
    j->st = j->bwd ? selscan_conv_backward_cpu_part(j->p, j->g, j->part, j->n) : selscan_conv_forward_cpu_part(j->p, j->part, j->n);
    return NULL;
}

/* The bytes-moved floor on this machine now: a plain pass with the call's traffic in the same
   layout (forward: y = x; backward: dx = x + dy), one thread, as the compiler vectorizes it. */
static double time_floor(int bwd, const selscan_conv_problem *p, const selscan_conv_grads *g, int reps) {
    const size_t n = (size_t)(p->batch * p->dim * p->seqlen);
    double best = 1e30;
    int r;
    for (r = 0; r < reps; r++) {
        double t0 = cpu_now(), dt;
        size_t i;
        if (p->dtype == SELSCAN_F32) {
            const float *x = (const float *)p->x.data, *dy = (const float *)g->dy.data;
            float *y = (float *)p->y.data, *dx = (float *)g->dx.data;
            if (bwd) for (i = 0; i < n; i++) dx[i] = x[i] + dy[i];
            else for (i = 0; i < n; i++) y[i] = x[i];
        } else {
            const uint16_t *x = (const uint16_t *)p->x.data, *dy = (const uint16_t *)g->dy.data;
            uint16_t *y = (uint16_t *)p->y.data, *dx = (uint16_t *)g->dx.data;
            if (bwd) for (i = 0; i < n; i++) dx[i] = (uint16_t)(x[i] + dy[i]);
            else for (i = 0; i < n; i++) y[i] = x[i];
        }
        dt = cpu_now() - t0;
        if (dt < best) best = dt;
    }
    return best * 1e3;
}

/* kind 0: reference, 1: fast on 1 thread, 2: fast on nt threads */
static double time_it(int kind, int bwd, const selscan_conv_problem *p, const selscan_conv_grads *g, int nt, int reps) {
    double best = 1e30;
    int r;
    for (r = 0; r < reps; r++) {
        double t0 = kind < 2 ? cpu_now() : now(), dt;
        selscan_status st = SELSCAN_OK;
        if (kind == 0) st = bwd ? selscan_conv_backward_ref(p, g) : selscan_conv_forward_ref(p);
        else if (kind == 1) st = bwd ? selscan_conv_backward_cpu(p, g) : selscan_conv_forward_cpu(p);
        else {
            pthread_t th[64];
            job jobs[64];
            int i;
            for (i = 0; i < nt; i++) {
                jobs[i].bwd = bwd; jobs[i].p = p; jobs[i].g = g; jobs[i].part = i; jobs[i].n = nt;
                pthread_create(&th[i], NULL, run_job, &jobs[i]);
            }
            for (i = 0; i < nt; i++) {
                pthread_join(th[i], NULL);
                if (jobs[i].st != SELSCAN_OK) st = jobs[i].st;
            }
        }
        dt = (kind < 2 ? cpu_now() : now()) - t0;
        if (st != SELSCAN_OK) { fprintf(stderr, "status %s\n", selscan_status_name(st)); exit(1); }
        if (dt < best) best = dt;
    }
    return best * 1e3;
}

int main(int argc, char **argv) {
    int nt = argc > 1 ? atoi(argv[1]) : 2, quick = getenv("SELSCAN_BENCH_QUICK") != NULL;
    size_t c;
    uint64_t seed = 1;
    if (nt < 1) nt = 1;
    if (nt > 64) nt = 64;
    printf("bench_conv: %s path, %d threads; ms best of %d (reference best of %d), 1 thread: the thread's CPU time, "
           "N threads: wall time; GB/s: bytes a call must move\n",
           selscan_cpu_backend(), nt, quick ? 1 : 5, quick ? 1 : 2);
    printf("%-14s %-5s %-3s %-4s %9s %9s %9s %7s %7s %8s %8s %8s %6s\n", "case", "dtype", "lay", "pass", "ref", "fast1", "fastN",
           "x1", "xN", "GB/s 1", "GB/s N", "floor", "f/1");
    for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const bcase *k = &cases[c];
        int di, lay, bwd;
        for (di = 0; di < 2; di++)
            for (lay = 0; lay < 2; lay++) {
                const selscan_dtype dt = di ? SELSCAN_BF16 : SELSCAN_F32;
                const size_t n = (size_t)(k->batch * k->dim * k->L), es = dt == SELSCAN_F32 ? 4 : 2;
                void *x = fill(n, dt, &seed), *y = fill(n, dt, &seed), *dy = fill(n, dt, &seed), *dx = fill(n, dt, &seed);
                float *w = (float *)fill((size_t)(k->dim * k->W), SELSCAN_F32, &seed), *b = (float *)fill((size_t)k->dim, SELSCAN_F32, &seed);
                float *dw = (float *)malloc((size_t)(k->dim * k->W) * 4), *db = (float *)malloc((size_t)k->dim * 4);
                selscan_conv_problem p;
                selscan_conv_grads g;
                memset(&p, 0, sizeof p);
                memset(&g, 0, sizeof g);
                p.batch = k->batch; p.dim = k->dim; p.seqlen = k->L; p.width = k->W; p.dtype = dt; p.flags = SELSCAN_CONV_SILU;
                p.x.data = x; p.y.data = y; p.weight.data = w; p.bias.data = b;
                g.dy.data = dy; g.dx.data = dx; g.dweight.data = dw; g.dbias.data = db;
                if (lay) { /* channels-last: (batch, L, dim) memory */
                    const int64_t s[3] = {k->L * k->dim, 1, k->dim};
                    memcpy(p.x.stride, s, sizeof s); memcpy(p.y.stride, s, sizeof s);
                    memcpy(g.dy.stride, s, sizeof s); memcpy(g.dx.stride, s, sizeof s);
                }
                for (bwd = 0; bwd < 2; bwd++) {
                    const double bytes = (double)n * (double)es * (bwd ? 3 : 2);
                    const double tr = time_it(0, bwd, &p, &g, nt, quick ? 1 : 2);
                    const double t1 = time_it(1, bwd, &p, &g, nt, quick ? 1 : 5);
                    const double tn = time_it(2, bwd, &p, &g, nt, quick ? 1 : 5);
                    const double tf = time_floor(bwd, &p, &g, quick ? 1 : 5);
                    printf("%-14s %-5s %-3s %-4s %9.2f %9.2f %9.2f %7.1f %7.1f %8.1f %8.1f %8.2f %6.2f\n", k->name, di ? "bf16" : "f32",
                           lay ? "bld" : "bdl", bwd ? "bwd" : "fwd", tr, t1, tn, tr / t1, tr / tn, bytes / t1 * 1e-6,
                           bytes / tn * 1e-6, tf, tf / t1);
                    fflush(stdout);
                }
                free(x); free(y); free(dy); free(dx); free(w); free(b); free(dw); free(db);
            }
    }
    return 0;
}
