/* cpu_threads.c: selscan's partitioned CPU entry points driven by a pthreads pool.
 *
 * The library owns no threads: selscan_forward_cpu_part / selscan_backward_cpu_part split the
 * work into n_parts parts that any pool runs (OpenMP, TensorFlow's Shard, a job system, ...);
 * selscan_backward_cpu_reduce then sums the per-part partials in a fixed order, so the result is
 * bitwise the same for every n_parts. This program runs a forward and a backward on 4 threads and
 * checks them against the 1-thread entry points.
 *
 *     cc -O2 -I. examples/cpu_threads.c -o cpu_threads -lm -lpthread && ./cpu_threads
 */
#define _POSIX_C_SOURCE 200809L
#define SELSCAN_IMPLEMENTATION
#include "../selscan.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NTHREADS = 4 };

typedef struct task {
    int phase; /* 0 forward, 1 backward, 2 reduce */
    const selscan_problem *p;
    const selscan_grads *g;
    int64_t part;
    void *ws;
    size_t bytes;
    selscan_status st;
} task;

static void *run(void *arg) {
    task *t = (task *)arg;
    if (t->phase == 0) t->st = selscan_forward_cpu_part(t->p, t->part, NTHREADS, t->ws, t->bytes);
    else if (t->phase == 1) t->st = selscan_backward_cpu_part(t->p, t->g, t->part, NTHREADS, t->ws, t->bytes);
    else t->st = selscan_backward_cpu_reduce(t->p, t->g, t->part, NTHREADS, t->ws, t->bytes);
    return NULL;
}

/* Runs one phase on NTHREADS threads; the first failing status, or SELSCAN_OK. */
static selscan_status phase(int which, const selscan_problem *p, const selscan_grads *g, void *ws, size_t bytes) {
    pthread_t th[NTHREADS];
    task t[NTHREADS];
    int i;
    for (i = 0; i < NTHREADS; i++) {
        t[i].phase = which; t[i].p = p; t[i].g = g; t[i].part = i; t[i].ws = ws; t[i].bytes = bytes;
        pthread_create(&th[i], NULL, run, &t[i]);
    }
    for (i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    for (i = 0; i < NTHREADS; i++)
        if (t[i].st != SELSCAN_OK) return t[i].st;
    return SELSCAN_OK;
}

static void *ws_alloc(size_t bytes) { /* plain malloc: every part aligns the shared pointer alike */
    return malloc(bytes ? bytes : 64);
}

static float *array(size_t n, float lo, float hi, unsigned *seed) {
    float *a = (float *)malloc(n * sizeof(float));
    size_t i;
    for (i = 0; i < n; i++) {
        *seed = *seed * 1103515245u + 12345u;
        a[i] = lo + (hi - lo) * (float)(*seed >> 8) / 16777216.0f;
    }
    return a;
}

int main(void) {
    const int64_t batch = 2, dim = 256, L = 300, N = 16;
    const size_t nx = (size_t)(batch * dim * L), nbc = (size_t)(batch * N * L), na = (size_t)(dim * N);
    unsigned seed = 1;
    selscan_problem p;
    selscan_grads g;
    float *y1, *du1, *dA1;
    float *u, *delta, *A, *B, *C, *D, *dy; /* inputs: the library reads them through const pointers */
    size_t bytes;
    void *ws;
    selscan_status st;
    int same;

    memset(&p, 0, sizeof p); /* zero: defaults (contiguous layouts, absent options) */
    p.batch = batch; p.dim = dim; p.seqlen = L; p.dstate = N; p.dtype = SELSCAN_F32;
    p.flags = SELSCAN_DELTA_SOFTPLUS;
    p.u.data = u = array(nx, -1, 1, &seed);
    p.delta.data = delta = array(nx, -3, 1, &seed);
    p.A.data = A = array(na, -4, -0.1f, &seed);
    p.B.data = B = array(nbc, -1, 1, &seed);
    p.C.data = C = array(nbc, -1, 1, &seed);
    p.D.data = D = array((size_t)dim, -1, 1, &seed);
    p.y.data = array(nx, 0, 0, &seed);
    memset(&g, 0, sizeof g);
    g.dy.data = dy = array(nx, -1, 1, &seed);
    g.du.data = array(nx, 0, 0, &seed);
    g.dA.data = array(na, 0, 0, &seed);

    /* 1 thread: the plain entry points */
    if (selscan_workspace_size(&p, &g, &bytes) != SELSCAN_OK) return 1;
    ws = ws_alloc(bytes);
    if (selscan_forward_cpu(&p, ws, bytes) != SELSCAN_OK || selscan_backward_cpu(&p, &g, ws, bytes) != SELSCAN_OK) return 1;
    free(ws);
    y1 = (float *)malloc(nx * 4); memcpy(y1, p.y.data, nx * 4);
    du1 = (float *)malloc(nx * 4); memcpy(du1, g.du.data, nx * 4);
    dA1 = (float *)malloc(na * 4); memcpy(dA1, g.dA.data, na * 4);

    /* NTHREADS threads: one workspace for all parts, sized for NTHREADS parts */
    selscan_workspace_size_parts(&p, &g, NTHREADS, &bytes);
    ws = ws_alloc(bytes);
    st = phase(0, &p, NULL, ws, bytes);                /* forward */
    if (st == SELSCAN_OK) st = phase(1, &p, &g, ws, bytes); /* backward parts */
    if (st == SELSCAN_OK) st = phase(2, &p, &g, ws, bytes); /* then the reduce, after all parts */
    if (st != SELSCAN_OK) {
        printf("error: %s\n", selscan_status_string(st));
        return 1;
    }
    same = memcmp(y1, p.y.data, nx * 4) == 0 && memcmp(du1, g.du.data, nx * 4) == 0 && memcmp(dA1, g.dA.data, na * 4) == 0;
    printf("path %s, %d threads: y, du, dA %s the 1-thread results\n", selscan_cpu_backend(), NTHREADS,
           same ? "bitwise equal to" : "DIFFER from");
    free(ws);
    free(y1); free(du1); free(dA1);
    free(u); free(delta); free(A); free(B); free(C); free(D); free(dy);
    free(p.y.data); free(g.du.data); free(g.dA.data);
    return same ? 0 : 1;
}
