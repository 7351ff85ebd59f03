/* bench_cpu: the fast CPU path (1 thread and all threads, pthreads over the part API) against the
   scalar reference (1 thread), forward and backward, f32 and bf16, on the cases of DESIGN.md
   section 5 and small ones. Prints a table: best-of-k wall times in ms, ratios, element rate
   (batch*dim*L*N per second).
   Then Mamba-2's SSD scan (cases "ssd-*": selscan_ssd_forward_cpu / selscan_ssd_backward_cpu on 1
   and all threads against the references on 1 thread; Melem/s = batch*L*nheads*headdim*dstate).
   Usage: bench_cpu [threads] [case-filter]. SELSCAN_BENCH_QUICK=1: fewer repetitions. */
#define _POSIX_C_SOURCE 200809L
#define SELSCAN_IMPLEMENTATION
#include "../selscan.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct bcase {
    const char *name;
    int64_t batch, dim, L, N;
    int D, z, bias;
    int ref_reps; /* 0: skip the reference (too slow) */
    const char *note;
} bcase;

static const bcase cases[] = {
    {"ggml-peer", 1, 1536, 1024, 16, 0, 0, 0, 1, "ggml's options: softplus, no D, no z"},
    {"ggml-peer-2", 8, 1536, 2048, 16, 0, 0, 0, 0, "ggml's second case; reference not run"},
    {"lm-prefill", 1, 1536, 1024, 16, 1, 1, 1, 1, ""},
    {"lm-train/8", 8, 3072, 256, 16, 1, 1, 1, 1, "L shortened 2048 -> 256"},
    {"vision-s3", 128, 256, 196, 8, 1, 0, 1, 1, ""},
    {"vision-s4", 128, 512, 49, 8, 1, 0, 1, 1, ""},
    {"small", 2, 64, 128, 16, 1, 1, 1, 3, ""},
    {"decode-like", 1, 2048, 16, 16, 1, 1, 1, 3, ""},
    {"N=64", 1, 512, 256, 64, 1, 1, 1, 1, ""},
};

/* free() of a buffer the library only reads (held in a const selscan_tensor) */
static void free_in(const void *p) { free((void *)(uintptr_t)p); }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float frand(uint64_t *s, float lo, float hi) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((*s >> 40) & 0xffffff) / 16777216.0f;
}

static void *fill(size_t n, selscan_dtype dt, uint64_t *seed, float lo, float hi) {
    size_t i, es = dt == SELSCAN_F32 ? 4 : 2;
    void *p = NULL;
    if (posix_memalign(&p, 64, n > 0 ? n * es : 64)) abort();
    for (i = 0; i < n; i++) {
        float v = frand(seed, lo, hi);
        if (dt == SELSCAN_F32) ((float *)p)[i] = v;
        else if (dt == SELSCAN_BF16) ((uint16_t *)p)[i] = selscan_f32_to_bf16(v);
        else ((uint16_t *)p)[i] = selscan_f32_to_f16(v);
    }
    return p;
}

static float *g_ck; /* checkpoints of the last forward (bwd with checkpoints) */
static size_t g_ckbytes;

typedef struct job {
    int kind; /* 0 fwd part, 1 bwd part, 2 reduce, 3 bwd part with checkpoints, 4 step part,
                 5 slice of a copy of count floats from src to dst; 6 / 7 / 8 the SSD's fwd part,
                 bwd part, reduce */
    const selscan_problem *p;
    const selscan_ssd_problem *sp;
    const selscan_ssd_grads *sg;
    const selscan_grads *g;
    const selscan_step_problem *s;
    float *dst;
    const float *src;
    size_t count;
    int64_t part, n;
    void *ws;
    size_t bytes;
    selscan_status st;
} job;

static void *run_job(void *a) {
    job *j = (job *)a;
    if (j->kind == 0) j->st = selscan_forward_cpu_part(j->p, j->part, j->n, j->ws, j->bytes);
    else if (j->kind == 1) j->st = selscan_backward_cpu_part(j->p, j->g, j->part, j->n, j->ws, j->bytes);
    else if (j->kind == 3) j->st = selscan_backward_cpu_ckpt_part(j->p, j->g, j->part, j->n, j->ws, j->bytes, g_ck, g_ckbytes);
    else if (j->kind == 4) j->st = selscan_step_cpu_part(j->s, j->part, j->n);
    else if (j->kind == 6) j->st = selscan_ssd_forward_cpu_part(j->sp, j->part, j->n, j->ws, j->bytes);
    else if (j->kind == 7) j->st = selscan_ssd_backward_cpu_part(j->sp, j->sg, j->part, j->n, j->ws, j->bytes);
    else if (j->kind == 8) j->st = selscan_ssd_backward_cpu_reduce(j->sp, j->sg, j->part, j->n, j->ws, j->bytes);
    else if (j->kind == 5) {
        const size_t lo = j->count * (size_t)j->part / (size_t)j->n, hi = j->count * (size_t)(j->part + 1) / (size_t)j->n;
        memcpy(j->dst + lo, j->src + lo, (hi - lo) * 4);
        j->st = SELSCAN_OK;
    } else j->st = selscan_backward_cpu_reduce(j->p, j->g, j->part, j->n, j->ws, j->bytes);
    return NULL;
}

/* jobs[0 .. n) on n threads (the caller's one of them); parts and n filled in here */
static void run_jobs(job *jobs, int64_t n) {
    pthread_t th[64];
    int64_t i;
    for (i = 0; i < n; i++) { jobs[i].part = i; jobs[i].n = n; }
    for (i = 1; i < n; i++) pthread_create(&th[i], NULL, run_job, &jobs[i]);
    run_job(&jobs[0]);
    for (i = 1; i < n; i++) pthread_join(th[i], NULL);
}

/* n copies of proto (kind, problem, workspace) as parts 0 .. n-1 on n threads */
static int run_phase_job(const job *proto, int64_t n) {
    job jobs[64];
    int64_t i;
    for (i = 0; i < n; i++) jobs[i] = *proto;
    run_jobs(jobs, n);
    for (i = 0; i < n; i++)
        if (jobs[i].st != SELSCAN_OK) {
            fprintf(stderr, "error: %s\n", selscan_status_string(jobs[i].st));
            return 0;
        }
    return 1;
}

static int run_phase(int kind, const selscan_problem *p, const selscan_grads *g, int64_t n, void *ws, size_t bytes) {
    job j;
    memset(&j, 0, sizeof j);
    j.kind = kind; j.p = p; j.g = g; j.ws = ws; j.bytes = bytes;
    return run_phase_job(&j, n);
}

/* One timed call: the scan (p, g; g NULL: forward) or, with sp, the SSD scan (sp, sg); mode 0:
   fast on n threads (the backward: parts, then the reduce's parts), 1: reference, 2: the scan's
   fast backward with the forward's checkpoints (g_ck) */
typedef struct tcall {
    const selscan_problem *p;
    const selscan_grads *g;
    const selscan_ssd_problem *sp;
    const selscan_ssd_grads *sg;
    int mode;
    int64_t n;
} tcall;

static void ssd_phase(int kind, const selscan_ssd_problem *p, const selscan_ssd_grads *g, int64_t n, void *ws,
                      size_t bytes);

static size_t tcall_bytes(const tcall *c) {
    size_t bytes = 0;
    if (c->sp && c->mode == 1) selscan_ssd_workspace_size(c->sp, c->sg, &bytes);
    else if (c->sp) selscan_ssd_workspace_size_parts(c->sp, c->sg, c->n, &bytes);
    else if (c->mode == 1) selscan_workspace_size(c->p, c->g, &bytes);
    else selscan_workspace_size_parts(c->p, c->g, c->n, &bytes);
    return bytes;
}

static void tcall_run(const tcall *c, void *ws, size_t bytes) {
    if (c->sp) {
        if (c->mode == 1 && c->sg) selscan_ssd_backward_ref(c->sp, c->sg, ws, bytes);
        else if (c->mode == 1) selscan_ssd_forward_ref(c->sp, ws, bytes);
        else if (c->sg) { ssd_phase(7, c->sp, c->sg, c->n, ws, bytes); ssd_phase(8, c->sp, c->sg, c->n, ws, bytes); }
        else ssd_phase(6, c->sp, NULL, c->n, ws, bytes);
    } else if (c->mode == 1) {
        if (c->g) selscan_backward_ref(c->p, c->g, ws, bytes);
        else selscan_forward_ref(c->p, ws, bytes);
    } else if (c->g) {
        run_phase(c->mode == 2 ? 3 : 1, c->p, c->g, c->n, ws, bytes);
        run_phase(2, c->p, c->g, c->n, ws, bytes);
    } else {
        run_phase(0, c->p, NULL, c->n, ws, bytes);
    }
}

/* the best of reps wall times of the call, on one workspace */
static double best_of(const tcall *c, int reps) {
    const size_t bytes = tcall_bytes(c);
    void *ws = NULL;
    double best = 1e30;
    int r;
    if (posix_memalign(&ws, 64, bytes ? bytes : 64)) abort();
    for (r = 0; r < reps; r++) {
        double t0 = now(), t;
        tcall_run(c, ws, bytes);
        t = now() - t0;
        if (t < best) best = t;
    }
    free(ws);
    return best;
}

/* mode: 0 fast on n threads, 1 reference */
static double time_fwd(const selscan_problem *p, int mode, int64_t n, int reps) {
    const tcall c = {p, NULL, NULL, NULL, mode, n};
    return best_of(&c, reps);
}

/* mode: 0 fast, 1 reference, 2 fast with the forward's checkpoints (g_ck) */
static double time_bwd(const selscan_problem *p, const selscan_grads *g, int mode, int64_t n, int reps) {
    const tcall c = {p, g, NULL, NULL, mode, n};
    return best_of(&c, reps);
}

/* the step (s) or else a copy of count floats, on n threads; wall seconds */
static double time_step_threads(const selscan_step_problem *s, float *dst, const float *src, size_t count, int64_t n) {
    job jobs[64];
    int64_t i;
    double t0;
    memset(jobs, 0, sizeof jobs);
    for (i = 0; i < n; i++) {
        jobs[i].kind = s ? 4 : 5; jobs[i].s = s; jobs[i].dst = dst; jobs[i].src = src; jobs[i].count = count;
    }
    t0 = now();
    run_jobs(jobs, n);
    t0 = now() - t0;
    for (i = 0; i < n; i++)
        if (jobs[i].st != SELSCAN_OK) abort();
    return t0;
}

/* Step (decode): batch rows of (dim, N) f32 state read and written in place. Ceiling: the
   state's bytes (read + write) at the bandwidth of a memcpy of the same size in the same run, on
   1 thread and on n threads (each copying a slice; thread start-up included in both). */
static void bench_step(int64_t nthr, int quick) {
    static const int64_t shapes[][3] = {{1, 1536, 16}, {16, 2048, 16}, {64, 5120, 16}, {256, 5120, 16}};
    size_t c;
    printf("\nstep (decode), f32, softplus, D, z, bias: ms per call on 1 and %lld threads; state = batch*dim*N*4 bytes;\n"
           "GB/s = state bytes read + written per second; memcpy: a copy of the state's size in the same run\n", (long long)nthr);
    printf("%-18s %8s %8s %8s %8s %9s %9s %9s %9s %9s %9s\n", "batch,dim,N", "state MB", "ref 1t", "fast 1t", "fast Nt",
           "ref/1t", "GB/s 1t", "memcpy 1t", "GB/s Nt", "memcpy Nt", "Nt/memcpy");
    for (c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const int64_t B = shapes[c][0], Dm = shapes[c][1], N = shapes[c][2];
        const size_t ns = (size_t)(B * Dm * N), nx = (size_t)(B * Dm), nbc = (size_t)(B * N);
        const int reps = quick ? 3 : 20;
        uint64_t seed = 7;
        selscan_step_problem s;
        double tr = 1e30, tf = 1e30, tm = 1e30, tfn = 1e30, tmn = 1e30;
        float *src, *dst;
        int r;
        memset(&s, 0, sizeof s);
        s.batch = B; s.dim = Dm; s.dstate = N; s.dtype = SELSCAN_F32; s.flags = SELSCAN_DELTA_SOFTPLUS;
        s.state.data = fill(ns, SELSCAN_F32, &seed, -1, 1);
        s.u.data = fill(nx, SELSCAN_F32, &seed, -2, 2);
        s.delta.data = fill(nx, SELSCAN_F32, &seed, -4, 1);
        s.z.data = fill(nx, SELSCAN_F32, &seed, -3, 3);
        s.y.data = fill(nx, SELSCAN_F32, &seed, 0, 0);
        s.A.data = fill((size_t)(Dm * N), SELSCAN_F32, &seed, -4, -0.05f);
        s.B.data = fill(nbc, SELSCAN_F32, &seed, -1, 1);
        s.C.data = fill(nbc, SELSCAN_F32, &seed, -1, 1);
        s.D.data = fill((size_t)Dm, SELSCAN_F32, &seed, -1, 1);
        s.delta_bias.data = fill((size_t)Dm, SELSCAN_F32, &seed, -1, 1);
        src = (float *)fill(ns, SELSCAN_F32, &seed, -1, 1);
        dst = (float *)fill(ns, SELSCAN_F32, &seed, -1, 1);
        for (r = 0; r < reps; r++) {
            double t0 = now(), t;
            selscan_step_ref(&s);
            t = now() - t0; if (t < tr) tr = t;
            t0 = now();
            selscan_step_cpu(&s);
            t = now() - t0; if (t < tf) tf = t;
            t0 = now();
            memcpy(dst, src, ns * 4);
            t = now() - t0; if (t < tm) tm = t;
            src[r % ns] += dst[(r * 7) % ns]; /* keep the copy */
            t = time_step_threads(&s, NULL, NULL, 0, nthr); if (t < tfn) tfn = t;
            t = time_step_threads(NULL, dst, src, ns, nthr); if (t < tmn) tmn = t;
            src[(r * 3) % ns] += dst[(r * 5) % ns];
        }
        {
            char name[64];
            const double gb = 2.0 * (double)ns * 4 * 1e-9;
            snprintf(name, sizeof name, "%lld,%lld,%lld", (long long)B, (long long)Dm, (long long)N);
            printf("%-18s %8.1f %8.3f %8.3f %8.3f %9.1f %9.1f %9.1f %9.1f %9.1f %9.2f\n", name, ns * 4e-6, tr * 1e3, tf * 1e3,
                   tfn * 1e3, tr / tf, gb / tf, gb / tm, gb / tfn, gb / tmn, tmn / tfn);
        }
        free(s.state.data); free(s.y.data); free(src); free(dst);
        free_in(s.u.data); free_in(s.delta.data); free_in(s.z.data); free_in(s.A.data); free_in(s.B.data);
        free_in(s.C.data); free_in(s.D.data); free_in(s.delta_bias.data);
    }
}

/* ---- Mamba-2's SSD scan ---- */
typedef struct scase {
    const char *name;
    int64_t batch, L, H, P, N, G;
    int ref_reps; /* 0: skip the reference */
    const char *note;
} scase;

static const scase scases[] = {
    {"ssd-small", 1, 128, 4, 64, 64, 1, 3, ""},
    {"ssd-2.7b/L512", 1, 512, 24, 64, 128, 1, 1, "Mamba2-2.7b's layer (80 heads) at 24 heads, L 512"},
};

/* the SSD's phase kind (6 / 7 / 8) on n threads */
static void ssd_phase(int kind, const selscan_ssd_problem *p, const selscan_ssd_grads *g, int64_t n, void *ws,
                      size_t bytes) {
    job j;
    memset(&j, 0, sizeof j);
    j.kind = kind; j.sp = p; j.sg = g; j.ws = ws; j.bytes = bytes;
    if (!run_phase_job(&j, n)) exit(1);
}

/* g NULL: the forward. mode 0: fast on n threads, 1: reference */
static double ssd_time(const selscan_ssd_problem *p, const selscan_ssd_grads *g, int mode, int64_t n, int reps) {
    const tcall c = {NULL, NULL, p, g, mode, n};
    return best_of(&c, reps);
}

/* Mamba2's options: softplus on dt + dt_bias, D per head, z, initial and final state (and its
   gradient); every gradient asked for */
static void bench_ssd(int64_t nthr, int quick, const char *filter) {
    size_t c;
    int d;
    printf("\nMamba-2 SSD scan: softplus, dt_bias, D per head, z, initial / final state, every gradient; ms, best of k\n");
    printf("%-14s %-5s %-4s %9s %9s %9s %8s %8s %10s %10s  %s\n", "case", "dtype", "pass", "ref 1t", "fast 1t",
           "fast Nt", "ref/1t", "1t/Nt", "Melem/s 1t", "Melem/s Nt", "note");
    for (c = 0; c < sizeof scases / sizeof scases[0]; c++) {
        const scase *k = &scases[c];
        if (filter && !strstr(k->name, filter)) continue;
        for (d = 0; d < 2; d++) {
            const selscan_dtype dt = d ? SELSCAN_BF16 : SELSCAN_F32;
            const size_t nx = (size_t)(k->batch * k->L * k->H * k->P), nbc = (size_t)(k->batch * k->L * k->G * k->N);
            const size_t ndt = (size_t)(k->batch * k->L * k->H), ns = (size_t)(k->batch * k->H * k->P * k->N);
            const double elems = (double)nx * (double)k->N;
            const int reps = quick ? 1 : (elems > 5e7 ? 3 : 10);
            uint64_t seed = 11;
            selscan_ssd_problem p;
            selscan_ssd_grads g;
            double tr, t1, tn;
            int pass;
            size_t i;
            memset(&p, 0, sizeof p);
            memset(&g, 0, sizeof g);
            p.batch = k->batch; p.seqlen = k->L; p.nheads = k->H; p.headdim = k->P; p.dstate = k->N;
            p.n_groups = k->G; p.dtype = dt; p.flags = SELSCAN_SSD_DT_SOFTPLUS;
            p.x.data = fill(nx, dt, &seed, -2, 2);
            p.dt.data = fill(ndt, dt, &seed, -4, 1);
            p.A.data = fill((size_t)k->H, SELSCAN_F32, &seed, -4, -0.5f);
            p.B.data = fill(nbc, dt, &seed, -1, 1);
            p.C.data = fill(nbc, dt, &seed, -1, 1);
            p.D.data = fill((size_t)k->H, SELSCAN_F32, &seed, -1, 1);
            p.z.data = fill(nx, dt, &seed, -3, 3);
            p.dt_bias.data = fill((size_t)k->H, SELSCAN_F32, &seed, -1, 1);
            p.initial_state.data = fill(ns, SELSCAN_F32, &seed, -1, 1);
            p.y.data = fill(nx, dt, &seed, 0, 0);
            p.final_state.data = fill(ns, SELSCAN_F32, &seed, 0, 0);
            g.dy.data = fill(nx, dt, &seed, -1, 1);
            g.dfinal_state.data = fill(ns, SELSCAN_F32, &seed, -1, 1);
            g.dx.data = fill(nx, dt, &seed, 0, 0);
            g.ddt.data = fill(ndt, dt, &seed, 0, 0);
            g.dA.data = fill((size_t)k->H, SELSCAN_F32, &seed, 0, 0);
            g.dB.data = fill(nbc, dt, &seed, 0, 0);
            g.dC.data = fill(nbc, dt, &seed, 0, 0);
            g.dD.data = fill((size_t)k->H, SELSCAN_F32, &seed, 0, 0);
            g.dz.data = fill(nx, dt, &seed, 0, 0);
            g.ddt_bias.data = fill((size_t)k->H, SELSCAN_F32, &seed, 0, 0);
            g.dinitial_state.data = fill(ns, SELSCAN_F32, &seed, 0, 0);
            for (pass = 0; pass < 2; pass++) {
                const selscan_ssd_grads *gg = pass ? &g : NULL;
                tr = k->ref_reps ? ssd_time(&p, gg, 1, 1, k->ref_reps) : 0;
                t1 = ssd_time(&p, gg, 0, 1, reps);
                tn = ssd_time(&p, gg, 0, nthr, reps);
                printf("%-14s %-5s %-4s %9.2f %9.2f %9.2f %8.1f %8.2f %10.0f %10.0f  %s\n", k->name, d ? "bf16" : "f32",
                       pass ? "bwd" : "fwd", tr * 1e3, t1 * 1e3, tn * 1e3, tr / t1, t1 / tn, elems / t1 * 1e-6,
                       elems / tn * 1e-6, k->note);
                fflush(stdout);
            }
            {
                const void *ptrs[] = {p.x.data, p.dt.data, p.A.data, p.B.data, p.C.data, p.D.data, p.z.data,
                                      p.dt_bias.data, p.initial_state.data, p.y.data, p.final_state.data, g.dy.data,
                                      g.dfinal_state.data, g.dx.data, g.ddt.data, g.dA.data, g.dB.data, g.dC.data,
                                      g.dD.data, g.dz.data, g.ddt_bias.data, g.dinitial_state.data};
                for (i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) free_in(ptrs[i]);
            }
        }
    }
}

int main(int argc, char **argv) {
    const int64_t want = argc > 1 ? atoi(argv[1]) : sysconf(_SC_NPROCESSORS_ONLN);
    const int64_t nthr = want < 1 ? 1 : want > 64 ? 64 : want; /* the thread arrays hold 64 */
    const char *filter = argc > 2 ? argv[2] : NULL;
    const int quick = getenv("SELSCAN_BENCH_QUICK") && strcmp(getenv("SELSCAN_BENCH_QUICK"), "0");
    const int only_fwd = getenv("SELSCAN_BENCH_FWD") && strcmp(getenv("SELSCAN_BENCH_FWD"), "0");
    size_t c;
    int d;
    printf("selscan CPU benchmark: path %s, %lld threads; best of k runs; Melem/s = batch*dim*L*N / time\n",
           selscan_cpu_backend(), (long long)nthr);
    printf("%-12s %-5s %-4s %9s %9s %9s %8s %8s %10s %10s  %s\n", "case", "dtype", "pass", "ref 1t", "fast 1t",
           "fast Nt", "ref/1t", "1t/Nt", "Melem/s 1t", "Melem/s Nt", "note");
    for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const bcase *k = &cases[c];
        if (filter && !strstr(k->name, filter)) continue;
        for (d = 0; d < 2; d++) {
            const selscan_dtype dt = d ? SELSCAN_BF16 : SELSCAN_F32;
            const size_t nx = (size_t)(k->batch * k->dim * k->L), nbc = (size_t)(k->batch * k->N * k->L);
            const double elems = (double)k->batch * (double)k->dim * (double)k->L * (double)k->N;
            const int reps = quick ? 1 : (elems > 5e8 ? 2 : elems > 5e7 ? 3 : 10);
            uint64_t seed = 42;
            selscan_problem p;
            selscan_grads g;
            double tr, t1, tn, br, b1, bn;
            size_t i;
            memset(&p, 0, sizeof p);
            memset(&g, 0, sizeof g);
            p.batch = k->batch; p.dim = k->dim; p.seqlen = k->L; p.dstate = k->N; p.dtype = dt;
            p.flags = SELSCAN_DELTA_SOFTPLUS;
            p.u.data = fill(nx, dt, &seed, -2, 2);
            p.delta.data = fill(nx, dt, &seed, -4, 1);
            p.A.data = fill((size_t)(k->dim * k->N), SELSCAN_F32, &seed, -4, -0.05f);
            p.B.data = fill(nbc, dt, &seed, -1, 1);
            p.C.data = fill(nbc, dt, &seed, -1, 1);
            if (k->D) p.D.data = fill((size_t)k->dim, SELSCAN_F32, &seed, -1, 1);
            if (k->z) p.z.data = fill(nx, dt, &seed, -3, 3);
            if (k->bias) p.delta_bias.data = fill((size_t)k->dim, SELSCAN_F32, &seed, -1, 1);
            p.y.data = fill(nx, dt, &seed, 0, 0);
            g.dy.data = fill(nx, dt, &seed, -1, 1);
            g.du.data = fill(nx, dt, &seed, 0, 0);
            g.ddelta.data = fill(nx, dt, &seed, 0, 0);
            g.dA.data = fill((size_t)(k->dim * k->N), SELSCAN_F32, &seed, 0, 0);
            g.dB.data = fill(nbc, dt, &seed, 0, 0);
            g.dC.data = fill(nbc, dt, &seed, 0, 0);
            if (k->D) g.dD.data = fill((size_t)k->dim, SELSCAN_F32, &seed, 0, 0);
            if (k->z) g.dz.data = fill(nx, dt, &seed, 0, 0);
            if (k->bias) g.ddelta_bias.data = fill((size_t)k->dim, SELSCAN_F32, &seed, 0, 0);
            tr = k->ref_reps ? time_fwd(&p, 1, 1, k->ref_reps) : 0;
            t1 = time_fwd(&p, 0, 1, reps);
            tn = time_fwd(&p, 0, nthr, reps);
            printf("%-12s %-5s %-4s %9.2f %9.2f %9.2f %8.1f %8.2f %10.0f %10.0f  %s\n", k->name, d ? "bf16" : "f32", "fwd",
                   tr * 1e3, t1 * 1e3, tn * 1e3, tr / t1, t1 / tn, elems / t1 * 1e-6, elems / tn * 1e-6, k->note);
            fflush(stdout);
            if (!only_fwd) {
                br = k->ref_reps ? time_bwd(&p, &g, 1, 1, 1) : 0;
                b1 = time_bwd(&p, &g, 0, 1, reps);
                bn = time_bwd(&p, &g, 0, nthr, reps);
                printf("%-12s %-5s %-4s %9.2f %9.2f %9.2f %8.1f %8.2f %10.0f %10.0f  bwd/fwd %.2f (1t)\n", k->name,
                       d ? "bf16" : "f32", "bwd", br * 1e3, b1 * 1e3, bn * 1e3, br / b1, b1 / bn, elems / b1 * 1e-6,
                       elems / bn * 1e-6, b1 / t1);
                fflush(stdout);
                if (selscan_checkpoint_size(&p, &g_ckbytes) == SELSCAN_OK && posix_memalign((void **)&g_ck, 64, g_ckbytes + 64) == 0) {
                    size_t fb;
                    void *fws = NULL;
                    double c1, cn;
                    selscan_workspace_size_parts(&p, NULL, 1, &fb);
                    if (posix_memalign(&fws, 64, fb ? fb : 64)) abort();
                    selscan_forward_cpu_ckpt_part(&p, 0, 1, fws, fb, g_ck, g_ckbytes);
                    c1 = time_bwd(&p, &g, 2, 1, reps);
                    cn = time_bwd(&p, &g, 2, nthr, reps);
                    printf("%-12s %-5s %-4s %9.2f %9.2f %9.2f %8.1f %8.2f %10.0f %10.0f  bwd/fwd %.2f (1t), with the forward's checkpoints\n",
                           k->name, d ? "bf16" : "f32", "bwck", br * 1e3, c1 * 1e3, cn * 1e3, br / c1, c1 / cn, elems / c1 * 1e-6,
                           elems / cn * 1e-6, c1 / t1);
                    fflush(stdout);
                    free(fws);
                    free(g_ck);
                    g_ck = NULL;
                }
            }
            {
                const void *ptrs[] = {p.u.data, p.delta.data, p.A.data, p.B.data, p.C.data, p.D.data, p.z.data,
                                p.delta_bias.data, p.y.data, g.dy.data, g.du.data, g.ddelta.data, g.dA.data,
                                g.dB.data, g.dC.data, g.dD.data, g.dz.data, g.ddelta_bias.data};
                for (i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) free_in(ptrs[i]);
            }
        }
    }
    if (!filter || strstr("step", filter)) bench_step(nthr, quick);
    if (!filter || strstr(filter, "ssd")) bench_ssd(nthr, quick, filter);
    return 0;
}
