/* bench/bench_cuda.cu - the CUDA backend on the benchmark cases of DESIGN.md section 5.
 *
 * Measures in the same run: device-to-device copy bandwidth (bytes read + written) and the
 * ex2.approx throughput; the floor of a case is max(minimal bytes / copy bandwidth,
 * B*D*L*N exponentials / ex2 rate). Minimal bytes (the peer file's definition):
 *   forward  (3 + z) BDL + 2 BNL elements (read u, delta, [z], B, C; write y)
 *   backward (5 + 2z) BDL + 4 BNL elements (read u, delta, [z], dy, B, C; write du, ddelta, [dz], dB, dC)
 * Targets: forward <= max(2 x floor, 20 us), backward <= max(3 x floor, 30 us).
 * Times are medians of many calls timed with CUDA events, rotating over several input sets
 * when one set would fit in L2. The backward is timed with the forward's checkpoint (the way a
 * framework op runs it) and, in a second column, without (it then recomputes the checkpoint).
 * mamba: state-spaces/mamba selective_scan_cuda on an H200 (../shared/peers/h200-mamba-ssm.json).
 *
 * Usage: bench_cuda [case-name-substring | step] [f32|bf16] ("step": only the decode step's table)
 * Environment: SELSCAN_BENCH_FWD_ONLY=1 (forward only), SELSCAN_BENCH_LAYOUT=bld (channels-last
 * tensors: the fast kernels' any-stride instantiations when built with SELSCAN_CUDA_CHANNELS_LAST=1
 * as the Makefile does, else the general kernels), SELSCAN_BENCH_NPT / SELSCAN_BENCH_NLCH (force the
 * forward's plan, for tuning).
 */
#define SELSCAN_IMPLEMENTATION
#define SELSCAN_CUDA_IMPLEMENTATION
#include "selscan_cuda.cuh"

#include <cuda_runtime.h>
#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);        \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define OK(call)                                                                                   \
    do {                                                                                           \
        selscan_status s_ = (call);                                                                \
        if (s_ != SELSCAN_OK) {                                                                    \
            printf("%s: %s\n", #call, selscan_status_string(s_));                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

struct Case {
    const char *name;
    int64_t batch, dim, L, N;
    bool z;
    double peer_fwd[2], peer_bwd[2]; /* ms, [f32, bf16] */
};
static const Case kCases[] = {
    {"lm-train", 8, 3072, 2048, 16, true, {1.7422, 0.8888}, {4.064, 3.4641}},
    {"lm-long", 1, 2048, 32768, 16, true, {2.8993, 1.473}, {6.3038, 5.9317}},
    {"lm-prefill", 1, 1536, 1024, 16, true, {0.0737, 0.0521}, {0.2391, 0.2144}},
    {"lm-2.8b", 4, 5120, 2048, 16, true, {1.4615, 0.7472}, {3.4226, 2.9122}},
    {"vision-s3", 128, 256, 196, 8, false, {0.1543, 0.1546}, {0.4916, 0.4878}},
    {"vision-s4", 128, 512, 49, 8, false, {0.1722, 0.1688}, {0.5035, 0.4754}},
};

__global__ void ex2_kernel(float *out, int iters) {
    float x[8];
    for (int k = 0; k < 8; k++) x[k] = 0.1f * (k + 1) + 1e-6f * threadIdx.x;
    for (int i = 0; i < iters; i++)
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float y;
            asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(-x[k]));
            x[k] = y;
        }
    float s = 0;
    for (int k = 0; k < 8; k++) s += x[k];
    if (s == 12345.0f) out[0] = s;
}

static float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/* fill a device buffer with uniform values in [lo, hi] of dtype dt (16-bit: bf16 pattern) */
__global__ void fill_kernel(void *p, int64_t n, int is16, float lo, float hi, uint32_t seed) {
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
        const float v = lo + (hi - lo) * (h >> 8) * (1.0f / 16777216.0f);
        if (is16) static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v);
        else static_cast<float *>(p)[i] = v;
    }
}
static void *dalloc(size_t bytes) {
    void *p = NULL;
    CU(cudaMalloc(&p, bytes));
    return p;
}
static void dfill(void *p, int64_t n, bool is16, float lo, float hi, uint32_t seed) {
    fill_kernel<<<1024, 256>>>(p, n, is16, lo, hi, seed);
    CU(cudaGetLastError());
}

/* Decode step (selscan_step_cuda): (batch, dim, N) f32 state updated in place, softplus, D, z,
   delta_bias, variable B / C. Floor: its minimal bytes (state read + written, x, dt, z read, y
   written, B / C, A, D, bias read) at the copy bandwidth. Time: 20 launches back to back between two
   events (the rate of queued decode steps, launch gaps included), median of 9; states rotate over
   enough buffers that they come from DRAM, as every layer's state does in a decode loop. */
static void bench_step(cudaStream_t stream, cudaEvent_t e0, cudaEvent_t e1, double bw, const char *only_dt) {
    static const int64_t shapes[][3] = {{1, 5120, 16}, {16, 5120, 16}, {64, 5120, 16}, {256, 5120, 16}, {64, 2048, 16}};
    printf("\nstep (decode; f32 state in place; softplus, D, z, delta_bias): us a call, 20 queued launches, median of 9\n");
    printf("%-16s %-5s | %9s %9s %8s %6s\n", "batch,dim,N", "dtype", "us", "floor us", "GB/s", "x flr");
    for (const auto &sh : shapes) {
        for (int di = 0; di < 2; di++) {
            if (only_dt && strcmp(only_dt, di ? "bf16" : "f32") != 0) continue;
            const int64_t B = sh[0], Dm = sh[1], N = sh[2], BD = B * Dm, DN = Dm * N, BN = B * N;
            const size_t es = di ? 2 : 4, sbytes = static_cast<size_t>(BD * N) * 4;
            const int nsets = static_cast<int>(std::max<size_t>(2, std::min<size_t>(64, 400000000 / sbytes + 1)));
            std::vector<void *> st(nsets);
            for (int k = 0; k < nsets; k++) { st[k] = dalloc(sbytes); dfill(st[k], BD * N, false, -1, 1, 200 + k); }
            void *x = dalloc(BD * es), *dtv = dalloc(BD * es), *z = dalloc(BD * es), *y = dalloc(BD * es);
            void *Bm = dalloc(BN * es), *Cm = dalloc(BN * es), *A = dalloc(DN * 4), *D = dalloc(Dm * 4), *bias = dalloc(Dm * 4);
            dfill(x, BD, di, -1, 1, 1); dfill(dtv, BD, di, -3, 1, 2); dfill(z, BD, di, -2, 2, 3);
            dfill(Bm, BN, di, -1, 1, 4); dfill(Cm, BN, di, -1, 1, 5); dfill(A, DN, false, -4, -0.5f, 6);
            dfill(D, Dm, false, -1, 1, 7); dfill(bias, Dm, false, -0.5f, 0.5f, 8);
            selscan_step_problem s;
            memset(&s, 0, sizeof s);
            s.batch = B; s.dim = Dm; s.dstate = N; s.dtype = di ? SELSCAN_BF16 : SELSCAN_F32; s.flags = SELSCAN_DELTA_SOFTPLUS;
            s.u.data = x; s.delta.data = dtv; s.z.data = z; s.y.data = y; s.B.data = Bm; s.C.data = Cm;
            s.A.data = A; s.D.data = D; s.delta_bias.data = bias;
            std::vector<float> t;
            int k = 0;
            for (int r = 0; r < 11; r++) {
                CU(cudaEventRecord(e0, stream));
                for (int i = 0; i < 20; i++) {
                    s.state.data = st[k++ % nsets];
                    OK(selscan_step_cuda(&s, stream));
                }
                CU(cudaEventRecord(e1, stream));
                CU(cudaEventSynchronize(e1));
                float ms;
                CU(cudaEventElapsedTime(&ms, e0, e1));
                if (r >= 2) t.push_back(ms * 1e3f / 20);
            }
            const float us = median(t);
            const double bytes = 2.0 * sbytes + 4.0 * BD * es + 2.0 * BN * es + DN * 4.0 + 2.0 * Dm * 4;
            char name[64];
            snprintf(name, sizeof name, "%lld,%lld,%lld", (long long)B, (long long)Dm, (long long)N);
            printf("%-16s %-5s | %9.2f %9.2f %8.0f %6.2f\n", name, di ? "bf16" : "f32", us, bytes / bw * 1e6, bytes / (us * 1e-6) / 1e9,
                   us / (bytes / bw * 1e6));
            fflush(stdout);
            for (void *q : st) cudaFree(q);
            void *fr[] = {x, dtv, z, y, Bm, Cm, A, D, bias};
            for (void *q : fr) cudaFree(q);
        }
    }
}

int main(int argc, char **argv) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("bench_cuda: skipped: no GPU\n");
        return 0;
    }
    const char *only = argc > 1 ? argv[1] : NULL;
    const char *only_dt = argc > 2 ? argv[2] : NULL;
    /* tuning: SELSCAN_BENCH_NPT (-1: the general forward kernel instead of the fast one) and
       SELSCAN_BENCH_NLCH (the general kernel's L chunks) force the forward's plan;
       SELSCAN_BENCH_FWD_ONLY=1 times the forward only */
    const int npt_force = getenv("SELSCAN_BENCH_NPT") ? atoi(getenv("SELSCAN_BENCH_NPT")) : 0;
    const int64_t nlch_force = getenv("SELSCAN_BENCH_NLCH") ? atoll(getenv("SELSCAN_BENCH_NLCH")) : 0;
    const bool fwd_only = getenv("SELSCAN_BENCH_FWD_ONLY") && atoi(getenv("SELSCAN_BENCH_FWD_ONLY"));
    /* SELSCAN_BENCH_LAYOUT=bld: channels-last tensors (u, delta, z, y and their gradients as
       (batch, L, dim), B / C as (batch, L, groups, N): a TensorFlow op's layout) */
    const bool bld = getenv("SELSCAN_BENCH_LAYOUT") && strcmp(getenv("SELSCAN_BENCH_LAYOUT"), "bld") == 0;
    if (bld)
        printf("layout: channels-last (%s)\n", SELSCAN_CUDA_CHANNELS_LAST ? "the fast kernels' any-stride instantiations" : "general kernels");
    if (npt_force || nlch_force) printf("forward plan forced: npt %d, L chunks %lld\n", npt_force, (long long)nlch_force);
    cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    cudaStream_t stream;
    CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));

    /* ceilings */
    double bw, ex2rate;
    {
        const size_t bytes = 2ull << 30;
        void *a = dalloc(bytes), *b = dalloc(bytes);
        CU(cudaMemsetAsync(a, 1, bytes, stream));
        std::vector<float> t;
        for (int i = 0; i < 12; i++) {
            CU(cudaEventRecord(e0, stream));
            CU(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
            CU(cudaEventRecord(e1, stream));
            CU(cudaEventSynchronize(e1));
            float ms;
            CU(cudaEventElapsedTime(&ms, e0, e1));
            if (i >= 2) t.push_back(ms);
        }
        bw = 2.0 * bytes / (median(t) * 1e-3);
        cudaFree(a);
        cudaFree(b);
        float *o = static_cast<float *>(dalloc(4));
        const int blocks = prop.multiProcessorCount * 8, threads = 256, iters = 4096;
        t.clear();
        for (int i = 0; i < 8; i++) {
            CU(cudaEventRecord(e0, stream));
            ex2_kernel<<<blocks, threads, 0, stream>>>(o, iters);
            CU(cudaEventRecord(e1, stream));
            CU(cudaEventSynchronize(e1));
            float ms;
            CU(cudaEventElapsedTime(&ms, e0, e1));
            if (i >= 2) t.push_back(ms);
        }
        ex2rate = static_cast<double>(blocks) * threads * iters * 8 / (median(t) * 1e-3);
        cudaFree(o);
    }
    printf("selscan CUDA benchmark on %s (%d SMs): D2D copy %.0f GB/s (read + write), ex2.approx %.3g /s\n", prop.name,
           prop.multiProcessorCount, bw / 1e9, ex2rate);
    printf("%-11s %-5s %4s | %9s %9s %7s %6s %9s %6s | %9s %9s %9s %6s %9s %6s\n", "case", "dtype", "", "fwd ms", "floor ms",
           "GB/s", "x flr", "mamba ms", "vs mb", "bwd ms", "nock ms", "floor ms", "x flr", "mamba ms", "vs mb");

    for (const Case &c : kCases) {
        if (only && !strstr(c.name, only)) continue;
        for (int di = 0; di < 2; di++) {
            if (only_dt && strcmp(only_dt, di ? "bf16" : "f32") != 0) continue;
            const selscan_dtype dt = di ? SELSCAN_BF16 : SELSCAN_F32;
            const size_t es = di ? 2 : 4;
            const int64_t BDL = c.batch * c.dim * c.L, BNL = c.batch * c.N * c.L, DN = c.dim * c.N;
            const size_t set_bytes = (3 + c.z + 1) * BDL * es + 2 * BNL * es;
            const int nsets = std::max<int>(1, std::min<int>(8, static_cast<int>(200e6 / set_bytes) + 1));
            struct Set { void *u, *delta, *z, *B, *C, *y; };
            std::vector<Set> sets(nsets);
            for (int s = 0; s < nsets; s++) {
                Set &S = sets[s];
                S.u = dalloc(BDL * es); dfill(S.u, BDL, di, -1, 1, 11 + s);
                S.delta = dalloc(BDL * es); dfill(S.delta, BDL, di, -3, 1, 22 + s);
                S.z = c.z ? dalloc(BDL * es) : NULL; if (S.z) dfill(S.z, BDL, di, -2, 2, 33 + s);
                S.B = dalloc(BNL * es); dfill(S.B, BNL, di, -1, 1, 44 + s);
                S.C = dalloc(BNL * es); dfill(S.C, BNL, di, -1, 1, 55 + s);
                S.y = dalloc(BDL * es);
            }
            void *A = dalloc(DN * 4), *D = dalloc(c.dim * 4), *bias = dalloc(c.dim * 4);
            dfill(A, DN, false, -4, -0.5f, 66); dfill(D, c.dim, false, -1, 1, 77); dfill(bias, c.dim, false, -0.5f, 0.5f, 88);
            void *dy = dalloc(BDL * es), *du = dalloc(BDL * es), *ddelta = dalloc(BDL * es), *dz = c.z ? dalloc(BDL * es) : NULL;
            void *dB = dalloc(BNL * es), *dC = dalloc(BNL * es), *dA = dalloc(DN * 4), *dD = dalloc(c.dim * 4), *dbias = dalloc(c.dim * 4);
            dfill(dy, BDL, di, -1, 1, 99);
            selscan_problem p;
            memset(&p, 0, sizeof p);
            p.batch = c.batch; p.dim = c.dim; p.seqlen = c.L; p.dstate = c.N; p.dtype = dt; p.flags = SELSCAN_DELTA_SOFTPLUS;
            p.A.data = A; p.D.data = D; p.delta_bias.data = bias;
            const selscan_tensor bdl = {NULL, {c.L * c.dim, 1, c.dim, 0}}, bln = {NULL, {c.L * c.N, c.N, 1, c.N}};
            const selscan_out_tensor bdl_out = {NULL, {c.L * c.dim, 1, c.dim, 0}}, bln_out = {NULL, {c.L * c.N, c.N, 1, c.N}};
            if (bld) { p.u = p.delta = p.z = bdl; p.y = bdl_out; p.B = p.C = bln; }
            auto use = [&](int s) {
                p.u.data = sets[s].u; p.delta.data = sets[s].delta; p.z.data = sets[s].z;
                p.B.data = sets[s].B; p.C.data = sets[s].C; p.y.data = sets[s].y;
            };
            use(0);
            selscan_grads g;
            memset(&g, 0, sizeof g);
            if (bld) g.dy = bdl, g.du = g.ddelta = g.dz = bdl_out, g.dB = g.dC = bln_out;
            g.dy.data = dy; g.du.data = du; g.ddelta.data = ddelta; g.dz.data = dz; g.dB.data = dB; g.dC.data = dC;
            g.dA.data = dA; g.dD.data = dD; g.ddelta_bias.data = dbias;
            selscan_cuda_ext x;
            memset(&x, 0, sizeof x);
            OK(selscan_checkpoint_size_cuda(&p, &x.checkpoint_bytes));
            x.checkpoint_out = static_cast<float *>(dalloc(x.checkpoint_bytes)); /* the forward writes it, */
            x.checkpoint_in = x.checkpoint_out;                                      /* the backward reads it */
            selscan_cuda_ext nock;
            memset(&nock, 0, sizeof nock);
            size_t w1 = 0, w2 = 0, w3 = 0;
            OK(selscan_workspace_size_cuda_ex(&p, NULL, &x, &w1));
            OK(selscan_workspace_size_cuda_ex(&p, &g, &x, &w2));
            OK(selscan_workspace_size_cuda_ex(&p, &g, &nock, &w3));
            const size_t wtune = 3 * (static_cast<size_t>(c.batch * c.dim * ((c.L + 63) / 64) * c.N) * 4 + 256);
            const size_t wsb = std::max(std::max(w1, wtune), std::max(w2, w3));
            void *ws = wsb ? dalloc(wsb) : NULL;

            auto time_it = [&](int which, int reps) {
                std::vector<float> t;
                for (int i = 0; i < reps + 3; i++) {
                    use(i % nsets);
                    CU(cudaEventRecord(e0, stream));
                    if (which == 0) OK(selscan__forward_cuda_tuned(&p, &x, ws, wsb, stream, npt_force, nlch_force));
                    else if (which == 1) OK(selscan_backward_cuda_ex(&p, &g, &x, ws, wsb, stream));
                    else OK(selscan_backward_cuda_ex(&p, &g, &nock, ws, wsb, stream));
                    CU(cudaEventRecord(e1, stream));
                    CU(cudaEventSynchronize(e1));
                    float ms;
                    CU(cudaEventElapsedTime(&ms, e0, e1));
                    if (i >= 3) t.push_back(ms);
                }
                return median(t);
            };
            const float fwd = time_it(0, 30);
            OK(selscan_forward_cuda_ex(&p, &x, ws, wsb, stream)); /* checkpoint of set 0 for... timing only */
            const float bwd = fwd_only ? 0.0f : time_it(1, 20);
            const float bwd_nock = fwd_only ? 0.0f : time_it(2, 10);
            const double fbytes = ((3.0 + c.z) * BDL + 2.0 * BNL) * es, bbytes = ((5.0 + 2 * c.z) * BDL + 4.0 * BNL) * es;
            const double exps = static_cast<double>(BDL) * c.N;
            const double ffloor = std::max(fbytes / bw, exps / ex2rate) * 1e3, bfloor = std::max(bbytes / bw, exps / ex2rate) * 1e3;
            const double ftarget = std::max(2 * ffloor, 0.020), btarget = std::max(3 * bfloor, 0.030);
            printf("%-11s %-5s %4s | %9.4f %9.4f %7.0f %6.2f %9.4f %6.2f | %9.4f %9.4f %9.4f %6.2f %9.4f %6.2f  %s %s\n", c.name,
                   di ? "bf16" : "f32", "", fwd, ffloor, fbytes / (fwd * 1e-3) / 1e9, fwd / ffloor, c.peer_fwd[di],
                   c.peer_fwd[di] / fwd, bwd, bwd_nock, bfloor, bwd / bfloor, c.peer_bwd[di], c.peer_bwd[di] / bwd,
                   fwd <= ftarget ? "fwd:ok" : "fwd:MISS", bwd <= btarget ? "bwd:ok" : "bwd:MISS");
            fflush(stdout);
            for (Set &S : sets) { cudaFree(S.u); cudaFree(S.delta); if (S.z) cudaFree(S.z); cudaFree(S.B); cudaFree(S.C); cudaFree(S.y); }
            void *fr[] = {A, D, bias, dy, du, ddelta, dz, dB, dC, dA, dD, dbias, x.checkpoint_out, ws};
            for (void *q : fr) if (q) cudaFree(q);
        }
    }
    printf("columns: x flr = time / floor (targets: fwd <= 2, bwd <= 3, with 20 / 30 us minimums); vs mb = mamba time / ours;\n"
           "bwd uses the forward's checkpoint, nock recomputes it\n");
    if (!only || strstr("step", only)) bench_step(stream, e0, e1, bw, only_dt);
    return 0;
}
