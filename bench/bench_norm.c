/* bench_norm: the gated RMS norm's CPU entries (selscan_norm_forward_cpu / selscan_norm_backward_cpu, one
   thread) on Mamba-2 130m's norm, (batch 2, L 512, dim 1536), one group, weight, z, every gradient (dy, dz,
   dweight), f32 and bf16, the gate after the norm (norm_before_gate) and inside it; optionally the scalar
   reference (_ref) beside them. Prints the thread's CPU time in ms, best and median of k runs (the VM is shared:
   CPU time leaves out the time the thread was not running), and the floor of the call's traffic: a plain pass
   reading and writing as many bytes (forward y, z -> out; backward y, z, dout -> dy, dz), one thread.
   Usage: bench_norm [reps] [ref]. bench/NOTES.md SSD-torch-v5 has the figures. */
#define _POSIX_C_SOURCE 200809L
#define SELSCAN_IMPLEMENTATION
#include "../selscan.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *fill(size_t n, selscan_dtype dt, float lo, float hi, uint64_t *s) {
    size_t i, es = dt == SELSCAN_F32 ? 4 : 2;
    void *p = malloc(n * es);
    if (!p) abort();
    for (i = 0; i < n; i++) {
        float v;
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        v = lo + (float)((*s >> 40) & 0xffffff) / 16777216.0f * (hi - lo);
        if (dt == SELSCAN_F32) ((float *)p)[i] = v;
        else ((uint16_t *)p)[i] = selscan_f32_to_bf16(v);
    }
    return p;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* which: 0 forward cpu, 1 backward cpu, 2 forward ref, 3 backward ref, 4 the forward's floor, 5 the backward's */
static void run(int which, const selscan_norm_problem *p, const selscan_norm_grads *g, int reps, double *best,
                double *med) {
    double *t = (double *)malloc((size_t)reps * sizeof(double));
    const size_t n = (size_t)(p->batch * p->seqlen * p->dim), es = p->dtype == SELSCAN_F32 ? 4 : 2;
    int r;
    for (r = -1; r < reps; r++) { /* one warm-up */
        const double t0 = cpu_now();
        selscan_status st = SELSCAN_OK;
        switch (which) {
        case 0: st = selscan_norm_forward_cpu(p); break;
        case 1: st = selscan_norm_backward_cpu(p, g); break;
        case 2: st = selscan_norm_forward_ref(p); break;
        case 3: st = selscan_norm_backward_ref(p, g); break;
        default: { /* out = y + z; dy = y + z, dz = dout (bytes as the call's) */
            size_t i;
            if (es == 4) {
                const float *y = (const float *)p->y.data, *z = (const float *)p->z.data, *d = (const float *)g->dout.data;
                float *o = (float *)(which == 4 ? p->out.data : g->dy.data), *o2 = (float *)g->dz.data;
                for (i = 0; i < n; i++) o[i] = y[i] + z[i];
                if (which == 5) for (i = 0; i < n; i++) o2[i] = d[i];
            } else {
                const uint16_t *y = (const uint16_t *)p->y.data, *z = (const uint16_t *)p->z.data, *d = (const uint16_t *)g->dout.data;
                uint16_t *o = (uint16_t *)(which == 4 ? p->out.data : g->dy.data), *o2 = (uint16_t *)g->dz.data;
                for (i = 0; i < n; i++) o[i] = (uint16_t)(y[i] ^ z[i]);
                if (which == 5) for (i = 0; i < n; i++) o2[i] = d[i];
            }
        }
        }
        if (st != SELSCAN_OK) {
            fprintf(stderr, "status %s\n", selscan_status_name(st));
            exit(1);
        }
        if (r >= 0) t[r] = (cpu_now() - t0) * 1e3;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_d);
    *best = t[0];
    *med = t[reps / 2];
    free(t);
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 15, ref = argc > 2 && strcmp(argv[2], "ref") == 0;
    const int64_t B = 2, L = 512, D = 1536;
    const size_t n = (size_t)(B * L * D);
    static const char *const names[] = {"forward cpu", "backward cpu", "forward ref", "backward ref", "forward floor",
                                        "backward floor"};
    int di, before, w;
    printf("bench_norm: (%d, %d, %d), one group, z, weight, dy dz dweight; selscan %s; thread CPU ms, best / median of %d\n",
           (int)B, (int)L, (int)D, selscan_cpu_backend(), reps);
    for (di = 0; di < 2; di++)
        for (before = 1; before >= 0; before--) {
            const selscan_dtype dt = di ? SELSCAN_BF16 : SELSCAN_F32;
            uint64_t s = 12345;
            selscan_norm_problem p;
            selscan_norm_grads g;
            void *y = fill(n, dt, -2, 2, &s), *z = fill(n, dt, -4, 4, &s), *dout = fill(n, dt, -1, 1, &s);
            void *wt = fill((size_t)D, SELSCAN_F32, 0.5f, 1.5f, &s);
            void *out = fill(n, dt, 0, 0, &s), *dy = fill(n, dt, 0, 0, &s), *dz = fill(n, dt, 0, 0, &s);
            void *dw = fill((size_t)D, SELSCAN_F32, 0, 0, &s);
            memset(&p, 0, sizeof p);
            memset(&g, 0, sizeof g);
            p.batch = B; p.seqlen = L; p.dim = D; p.group_size = 0; p.eps = 1e-6f; p.dtype = dt;
            p.flags = before ? SELSCAN_NORM_BEFORE_GATE : 0u;
            p.y.data = y; p.z.data = z; p.weight.data = wt; p.out.data = out;
            g.dout.data = dout; g.dy.data = dy; g.dz.data = dz; g.dweight.data = dw;
            for (w = 0; w < 6; w++) {
                double best, med;
                if ((w == 2 || w == 3) && !ref) continue;
                run(w, &p, &g, w == 2 || w == 3 ? 3 : reps, &best, &med);
                printf("%-5s %-12s %-15s %7.2f %7.2f\n", dt == SELSCAN_F32 ? "f32" : "bf16", before ? "gate after" : "gate inside",
                       names[w], best, med);
            }
            free(y); free(z); free(dout); free(wt); free(out); free(dy); free(dz); free(dw);
        }
    return 0;
}
