/* cuda_quickstart.cu - the quickstart's problem on the GPU: forward and backward of one Mamba-like
 * layer's selective scan (batch 2, dim 256, L 512, N 16; variable B and C, D, z, delta_bias,
 * softplus; (batch, dim, L) layout, f32), checked against the CPU reference. Prints the errors and
 * the times; exit status 0 when every check passes (or when there is no GPU).
 *
 *     nvcc -O3 -arch=sm_90 -std=c++17 -I. examples/cuda_quickstart.cu -o cuda_quickstart
 */
#define SELSCAN_IMPLEMENTATION      /* the CPU reference, for the check */
#define SELSCAN_CUDA_IMPLEMENTATION /* the CUDA launchers */
#include "selscan_cuda.cuh"

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BATCH = 2, DIM = 256, SEQLEN = 512, DSTATE = 16 };

static uint64_t rng_state = 0x5eed5eedULL;
static float uniform(float lo, float hi) {
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return lo + (hi - lo) * (float)((rng_state * 2685821657736338717ULL) >> 40) / 16777216.0f;
}

#define CU(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_)); return 1; } } while (0)
#define OK(call) do { selscan_status st_ = (call); if (st_ != SELSCAN_OK) { \
    fprintf(stderr, "%s failed: %s\n", #call, selscan_status_string(st_)); return 1; } } while (0)

struct Buf { float *h, *ref, *d; size_t n; };
static Buf buf(size_t n, float lo, float hi) {
    Buf b;
    b.n = n;
    b.h = (float *)malloc(n * 4);
    b.ref = (float *)malloc(n * 4);
    for (size_t i = 0; i < n; i++) b.h[i] = lo == hi ? lo : uniform(lo, hi);
    memcpy(b.ref, b.h, n * 4);
    if (cudaMalloc(&b.d, n * 4) != cudaSuccess) exit(1);
    cudaMemcpy(b.d, b.h, n * 4, cudaMemcpyHostToDevice);
    return b;
}
static double rel_err(const Buf &b) { /* device result vs the CPU reference in b.ref */
    cudaMemcpy(b.h, b.d, b.n * 4, cudaMemcpyDeviceToHost);
    double num = 0, den = 0;
    for (size_t i = 0; i < b.n; i++) {
        const double d = (double)b.h[i] - b.ref[i];
        if (b.h[i] != b.h[i]) return INFINITY;
        num += d * d;
        den += (double)b.ref[i] * b.ref[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

int main(void) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("cuda_quickstart: skipped: no GPU\n");
        return 0;
    }
    const size_t nx = (size_t)BATCH * DIM * SEQLEN, nbc = (size_t)BATCH * DSTATE * SEQLEN, na = (size_t)DIM * DSTATE;
    Buf u = buf(nx, -1, 1), delta = buf(nx, -3, 1), z = buf(nx, -2, 2), dy = buf(nx, -1, 1);
    Buf A = buf(na, -4, -0.1f), Bm = buf(nbc, -1, 1), Cm = buf(nbc, -1, 1), D = buf(DIM, -1, 1), bias = buf(DIM, -0.5f, 0.5f);
    Buf y = buf(nx, 0, 0), du = buf(nx, 0, 0), ddelta = buf(nx, 0, 0), dz = buf(nx, 0, 0);
    Buf dA = buf(na, 0, 0), dB = buf(nbc, 0, 0), dC = buf(nbc, 0, 0), dD = buf(DIM, 0, 0), dbias = buf(DIM, 0, 0);

    /* One problem description per side: only the data pointers differ (all strides 0: contiguous). */
    selscan_problem p[2];
    selscan_grads g[2];
    for (int dev = 0; dev < 2; dev++) {
        selscan_problem &q = p[dev];
        selscan_grads &r = g[dev];
        memset(&q, 0, sizeof q);
        memset(&r, 0, sizeof r);
        q.batch = BATCH; q.dim = DIM; q.seqlen = SEQLEN; q.dstate = DSTATE; q.dtype = SELSCAN_F32;
        q.flags = SELSCAN_DELTA_SOFTPLUS;
#define P(field, b) q.field.data = dev ? (void *)b.d : (void *)b.ref
#define G(field, b) r.field.data = dev ? (void *)b.d : (void *)b.ref
        P(u, u); P(delta, delta); P(A, A); P(B, Bm); P(C, Cm); P(D, D); P(z, z); P(delta_bias, bias); P(y, y);
        G(dy, dy); G(du, du); G(ddelta, ddelta); G(dA, dA); G(dB, dB); G(dC, dC); G(dD, dD); G(dz, dz); G(ddelta_bias, dbias);
#undef P
#undef G
    }

    /* CPU reference */
    size_t wsb = 0;
    OK(selscan_workspace_size(&p[0], &g[0], &wsb));
    void *ws = NULL;
    if (posix_memalign(&ws, SELSCAN_WORKSPACE_ALIGN, wsb)) return 1;
    OK(selscan_forward_ref(&p[0], ws, wsb));
    OK(selscan_backward_ref(&p[0], &g[0], ws, wsb));
    free(ws);

    /* GPU: the forward keeps its checkpoint for the backward (what a framework op would do). */
    cudaStream_t stream;
    CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaError_t cerr = cudaSuccess;
    selscan_cuda_ext x;
    memset(&x, 0, sizeof x);
    x.cuda_error = &cerr;
    OK(selscan_checkpoint_size_cuda(&p[1], &x.checkpoint_bytes));
    CU(cudaMalloc(&x.checkpoint_out, x.checkpoint_bytes)); /* the forward writes it */
    x.checkpoint_in = x.checkpoint_out;                     /* the backward reads it */
    size_t fwb = 0, bwb = 0;
    OK(selscan_workspace_size_cuda_ex(&p[1], NULL, &x, &fwb));
    OK(selscan_workspace_size_cuda_ex(&p[1], &g[1], &x, &bwb));
    void *dws = NULL;
    const size_t dwsb = fwb > bwb ? fwb : bwb;
    if (dwsb) CU(cudaMalloc(&dws, dwsb));

    cudaEvent_t e0, e1, e2;
    CU(cudaEventCreate(&e0)); CU(cudaEventCreate(&e1)); CU(cudaEventCreate(&e2));
    float fwd_ms = 1e30f, bwd_ms = 1e30f;
    for (int rep = 0; rep < 20; rep++) { /* best of 20 (the first includes module loading) */
        CU(cudaEventRecord(e0, stream));
        OK(selscan_forward_cuda_ex(&p[1], &x, dws, dwsb, stream));
        CU(cudaEventRecord(e1, stream));
        OK(selscan_backward_cuda_ex(&p[1], &g[1], &x, dws, dwsb, stream));
        CU(cudaEventRecord(e2, stream));
        CU(cudaEventSynchronize(e2));
        float a, b;
        CU(cudaEventElapsedTime(&a, e0, e1));
        CU(cudaEventElapsedTime(&b, e1, e2));
        if (a < fwd_ms) fwd_ms = a;
        if (b < bwd_ms) bwd_ms = b;
    }

    struct { const char *name; Buf *b; double tol; } outs[] = {
        {"y", &y, 1e-4}, {"du", &du, 1e-3}, {"ddelta", &ddelta, 1e-3}, {"dA", &dA, 1e-3}, {"dB", &dB, 1e-3},
        {"dC", &dC, 1e-3}, {"dD", &dD, 1e-3}, {"dz", &dz, 1e-3}, {"ddelta_bias", &dbias, 1e-3}};
    int bad = 0;
    printf("selscan CUDA quickstart: batch %d, dim %d, L %d, N %d, f32, variable B/C, D, z, delta_bias, softplus\n",
           BATCH, DIM, SEQLEN, DSTATE);
    for (auto &o : outs) {
        const double e = rel_err(*o.b);
        printf("  %-12s rel. error vs CPU reference %.2e %s\n", o.name, e, e <= o.tol ? "ok" : "FAIL");
        bad += !(e <= o.tol);
    }
    printf("  GPU forward %.3f ms, backward %.3f ms (best of 20, CUDA events)\n", fwd_ms, bwd_ms);
    printf("%s\n", bad ? "FAILED" : "all checks passed");
    return bad ? 1 : 0;
}
