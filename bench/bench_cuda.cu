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
 * mamba: state-spaces/mamba's selective_scan_cuda times kept as constants (kCases[].peer_fwd / peer_bwd, ms):
 * not run by this program. They came with 2c995ba (2026-11-22) from a reference file that is not in the
 * repository; its machine and date are not recorded here. The in-process comparison is bench/bench_torch.py --mamba.
 *
 * Usage: bench_cuda [--graphs] [case-name-substring | step | decode | prefill | conv] [f32|bf16] ("step": only the decode
 * step's table; "conv": only the causal conv1d's, bench_conv). --graphs: the decode step and the short-prefill forward timed under CUDA graph replay
 * (kernel time as a serving loop sees it; see bench_step_graphs), with the copy floors of the same run;
 * SELSCAN_BENCH_STEP_SWEEP=1 adds every step kernel shape (states a thread, rows a block) to that table,
 * SELSCAN_BENCH_STEP_BATCH=n keeps its shapes of batch n only. SELSCAN_BENCH_QUEUED=n: the training
 * cases timed as n calls queued back to back between two events (ms a call; the launch work of one
 * call overlaps the previous call's kernels, as in a training loop), not one synchronised call.
 * Environment: SELSCAN_BENCH_FWD_ONLY=1 (forward only), SELSCAN_BENCH_LAYOUT=bld (channels-last
 * tensors: the fast kernels' any-stride instantiations when built with SELSCAN_CUDA_CHANNELS_LAST=1
 * as the Makefile does, else the general kernels), SELSCAN_BENCH_NPT / SELSCAN_BENCH_NLCH (force the
 * forward's plan, for tuning).
 */
#define SELSCAN_IMPLEMENTATION
#define SELSCAN_CUDA_IMPLEMENTATION
#define SELSCAN__CUDA_TUNING /* selscan_cuda.cuh >>bench: the selscan__*_cuda_tuned entries */
#define SELSCAN__STEP_SWEEP /* the step launcher's every (S, R), for the --graphs table */
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

/* The decode step's operands for (batch, dim, N): u, delta, z, y, B, C in f32 or bf16 (is16), A, D,
   delta_bias f32, random with fixed seeds; softplus. The state is the caller's (s.state unset). */
struct StepInputs {
    void *buf[9];
    selscan_step_problem s;
    StepInputs(int64_t B, int64_t Dm, int64_t N, bool is16) {
        const int64_t BD = B * Dm, BN = B * N, DN = Dm * N;
        const size_t es = is16 ? 2 : 4;
        const int64_t n[9] = {BD, BD, BD, BD, BN, BN, DN, Dm, Dm};
        const float lo[9] = {-1, -3, -2, 0, -1, -1, -4, -1, -0.5f}, hi[9] = {1, 1, 2, 0, 1, 1, -0.5f, 1, 0.5f};
        for (int k = 0; k < 9; k++) {
            const bool t16 = is16 && k < 6; /* A, D, delta_bias stay f32 */
            buf[k] = dalloc(static_cast<size_t>(n[k]) * (t16 ? es : 4));
            if (k != 3) dfill(buf[k], n[k], t16, lo[k], hi[k], static_cast<uint32_t>(k < 3 ? k + 1 : k));
        }
        memset(&s, 0, sizeof s);
        s.batch = B; s.dim = Dm; s.dstate = N; s.dtype = is16 ? SELSCAN_BF16 : SELSCAN_F32;
        s.flags = SELSCAN_DELTA_SOFTPLUS;
        s.u.data = buf[0]; s.delta.data = buf[1]; s.z.data = buf[2]; s.y.data = buf[3];
        s.B.data = buf[4]; s.C.data = buf[5]; s.A.data = buf[6]; s.D.data = buf[7]; s.delta_bias.data = buf[8];
    }
    ~StepInputs() { for (void *q : buf) cudaFree(q); }
};


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
            StepInputs in(B, Dm, N, di);
            selscan_step_problem s = in.s;
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
        }
    }
}

/* ------------------------------------------------------------------------------------------------
   --graphs: kernel time as a serving loop sees it. Each figure: NG calls captured in one CUDA
   graph, one replay timed with CUDA events, median of 11 replays (after one warm-up replay); L2
   flushed (a 256 MB memset, not timed) before every replay.
   Step: the NG calls update NG distinct states (a model's layers), inputs shared; floor = the
   state read + written once at the copy bandwidth measured at the start; "copy" = NG device-to-device
   copies of one state each in a graph, "rmw" = NG launches of a kernel that reads and writes each
   state once in place (float4), both timed the same way: the achievable floors at that size. */
static const int NG = 20;
__global__ void rmw_kernel(float4 *p, int64_t n4) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 v = p[i];
        v.x *= 0.999f; v.y *= 0.999f; v.z *= 0.999f; v.w *= 0.999f;
        p[i] = v;
    }
}
/* bytes (a multiple of 16, 16-byte aligned) at src into L2 by one bulk prefetch (sm_90) */
static __device__ __forceinline__ void pf_l2(const void *src, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
#endif
}
/* The bound (issue 20): bare in-place read-scale-write streams of one state, timed like the step.
   rmw_wave_kernel: a one-wave grid (blocks = SMs x occupancy, or half of it), each block over
   chunks of K x 4 KB (chunk blockIdx.x, + gridDim.x, ...), each thread with K float4 loads in
   flight (unrolled) before its stores. PDL 0: plain launch; 1: launched with programmatic
   dependent launch (launch_dependents, then griddepcontrol.wait before any access); 2: as 1, and
   thread 0 prefetches the block's first chunk into L2 (one bulk prefetch) before the wait. */
template <int K, int PDL>
__global__ void __launch_bounds__(256) rmw_wave_kernel(float4 *p, int64_t n4) {
    const int64_t cw = 256 * K, nch = (n4 + cw - 1) / cw;
    if (PDL) {
        selscan_cuda_detail::pdl_launch_dependents();
        if (PDL == 2 && threadIdx.x == 0 && blockIdx.x < nch) {
            const int64_t c0 = static_cast<int64_t>(blockIdx.x) * cw, m = n4 - c0 < cw ? n4 - c0 : cw;
            pf_l2(p + c0, static_cast<uint32_t>(m * 16));
        }
        selscan_cuda_detail::pdl_wait();
    }
    for (int64_t c = blockIdx.x; c < nch; c += gridDim.x) {
        const int64_t base = c * cw + threadIdx.x;
        float4 v[K];
#pragma unroll
        for (int k = 0; k < K; k++)
            if (base + 256 * k < n4) v[k] = p[base + 256 * k];
#pragma unroll
        for (int k = 0; k < K; k++)
            if (base + 256 * k < n4) {
                float4 w = v[k];
                w.x *= 0.999f; w.y *= 0.999f; w.z *= 0.999f; w.w *= 0.999f;
                p[base + 256 * k] = w;
            }
    }
}
/* launch k over (grid, threads), with programmatic dependent launch when pdl */
template <typename K> static void launch_k(K k, unsigned grid, unsigned threads, bool pdl, cudaStream_t st, float4 *p, int64_t n4) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(threads);
    cfg.stream = st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    CU(cudaLaunchKernelEx(&cfg, k, p, n4));
}
template <typename K> static unsigned wave_blocks(K k, unsigned threads, bool half) {
    int dev = 0, sms = 0, v = 0;
    CU(cudaGetDevice(&dev));
    CU(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CU(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, k, static_cast<int>(threads), 0));
    if (half && v > 1) v /= 2;
    return static_cast<unsigned>(sms * v);
}
struct GraphTimer {
    cudaStream_t stream;
    cudaEvent_t e0, e1;
    void *flush;
    size_t flush_bytes;
    /* capture fn() (which enqueues NG calls on stream), time replays; us per call */
    template <typename F> float time(F fn, int reps = 11) {
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CU(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        fn();
        CU(cudaStreamEndCapture(stream, &g));
        CU(cudaGraphInstantiate(&ge, g, 0));
        std::vector<float> t;
        for (int r = 0; r < reps + 1; r++) {
            CU(cudaMemsetAsync(flush, r & 0xff, flush_bytes, stream));
            CU(cudaEventRecord(e0, stream));
            CU(cudaGraphLaunch(ge, stream));
            CU(cudaEventRecord(e1, stream));
            CU(cudaEventSynchronize(e1));
            float ms;
            CU(cudaEventElapsedTime(&ms, e0, e1));
            if (r > 0) t.push_back(ms * 1e3f / NG);
        }
        CU(cudaGraphExecDestroy(ge));
        CU(cudaGraphDestroy(g));
        return median(t);
    }
};

static void bench_step_graphs(GraphTimer &gt, double bw, const char *only_dt, bool sweep) {
    static const int64_t shapes[][3] = {{1, 5120, 16}, {16, 5120, 16}, {64, 5120, 16}, {256, 5120, 16}, {64, 2048, 16}};
    /* mamba_ssm's selective_state_update (Triton) under graphs: the issue's table (timed 2026-11-24 by the project; its method names no L2 flush) */
    static const double peer[5][2] = {{2.22, 1.95}, {4.52, 4.91}, {12.72, 13.8}, {53.73, 51.33}, {6.29, 6.5}};
    printf("\nstep under CUDA graphs (%d calls a graph, %d distinct f32 states, L2 flushed before each replay; softplus, D, z,\n"
           "delta_bias, variable B / C): us a call, median of 11 replays. v50: the launcher's choice without step_lat_kernel;\n"
           "now: the launcher's choice, with programmatic dependent launch (pdl) and without; floor: state read + written at %.0f GB/s\n",
           NG, NG, bw / 1e9);
    printf("%-14s %-5s | %8s %8s %8s | %8s %8s %8s | %7s %7s | %8s\n", "batch,dim,N", "dtype", "v50", "now", "now-pdl",
           "copy", "rmw", "floor", "x floor", "x rmw", "json-mb");
    int si = 0;
    const int64_t only_batch = getenv("SELSCAN_BENCH_STEP_BATCH") ? atoll(getenv("SELSCAN_BENCH_STEP_BATCH")) : 0;
    for (const auto &sh : shapes) {
        for (int di = 0; di < 2; di++) {
            if (only_dt && strcmp(only_dt, di ? "bf16" : "f32") != 0) continue;
            if (only_batch && sh[0] != only_batch) continue;
            const int64_t B = sh[0], Dm = sh[1], N = sh[2], BD = B * Dm;
            const size_t sbytes = static_cast<size_t>(BD * N) * 4;
            std::vector<void *> st(NG);
            for (int k = 0; k < NG; k++) { st[k] = dalloc(sbytes); dfill(st[k], BD * N, false, -1, 1, 200 + k); }
            StepInputs in(B, Dm, N, di);
            selscan_step_problem s = in.s;
            auto step = [&](int S, int R, int pdl) {
                return gt.time([&] {
                    for (int i = 0; i < NG; i++) {
                        s.state.data = st[i];
                        OK(selscan__step_cuda_tuned(&s, NULL, gt.stream, S, R, pdl));
                    }
                });
            };
            const float now = step(0, 0, -1), nowp = step(0, 0, 0);
            const float prev = gt.time([&] { /* v50's choice (loop / vec kernels, not the latency kernel) */
                for (int i = 0; i < NG; i++) {
                    s.state.data = st[i];
                    OK(selscan__step_cuda_tuned(&s, NULL, gt.stream, 0, 0, -1, 0, 0, 0, -1));
                }
            });
            const float copy = gt.time([&] {
                for (int i = 0; i < NG; i++) CU(cudaMemcpyAsync(st[(i + 1) % NG], st[i], sbytes, cudaMemcpyDeviceToDevice, gt.stream));
            });
            const int64_t n4 = BD * N / 4;
            const float rmw = gt.time([&] {
                for (int i = 0; i < NG; i++) {
                    rmw_kernel<<<static_cast<unsigned>((n4 + 255) / 256), 256, 0, gt.stream>>>(static_cast<float4 *>(st[i]), n4);
                    CU(cudaGetLastError());
                }
            });
            const double floor_us = 2.0 * sbytes / bw * 1e6;
            char name[64];
            snprintf(name, sizeof name, "%lld,%lld,%lld", (long long)B, (long long)Dm, (long long)N);
            printf("%-14s %-5s | %8.2f %8.2f %8.2f | %8.2f %8.2f %8.2f | %7.2f %7.2f | %8.2f\n", name, di ? "bf16" : "f32", prev, now, nowp,
                   copy, rmw, floor_us, now / floor_us, now / rmw, peer[si][di]);
            fflush(stdout);
            if (di == 0 && (!only_dt || strcmp(only_dt, "f32") == 0)) { /* the bound: bare in-place streams, same method */
                float4 *const *s4 = reinterpret_cast<float4 *const *>(st.data());
                auto wave = [&](auto k, unsigned threads, bool pdl, bool half) {
                    const unsigned grid = wave_blocks(k, threads, half);
                    return gt.time([&] {
                        for (int i = 0; i < NG; i++) launch_k(k, grid, threads, pdl, gt.stream, s4[i], n4);
                    });
                };
                printf("   bound (bare rmw, us): wave K2 %.2f | K4 %.2f, pdl %.2f, pdl+pf %.2f, half pdl+pf %.2f | K8 pdl+pf %.2f\n",
                       wave(rmw_wave_kernel<2, 0>, 256, false, false), wave(rmw_wave_kernel<4, 0>, 256, false, false),
                       wave(rmw_wave_kernel<4, 1>, 256, true, false), wave(rmw_wave_kernel<4, 2>, 256, true, false),
                       wave(rmw_wave_kernel<4, 2>, 256, true, true), wave(rmw_wave_kernel<8, 2>, 256, true, false));
                fflush(stdout);
            }
            if (sweep) { /* (S, R, fast form: 1 allowed / -1 never, register bound, loop kernel: 0 auto, 1 forced, -1 never,
                            latency kernel: 0 auto, -1 never, 1 forced) */
                static const int vs[][6] = {{8, 1, 1, 0, 1, -1}, {8, 1, 1, 0, -1, -1}, {8, 1, 1, 0, 0, 1}};
                printf("   sweep S,R,fast,minblocks,loop,lat pdl/no-pdl:");
                for (const auto &v : vs) {
                    auto f = [&](int pdl) {
                        return gt.time([&] {
                            for (int i = 0; i < NG; i++) {
                                s.state.data = st[i];
                                OK(selscan__step_cuda_tuned(&s, NULL, gt.stream, v[0], v[1], pdl, v[2], v[3], v[4], v[5]));
                            }
                        });
                    };
                    printf(" %d,%d,%d,%d,%d,%d %.2f/%.2f", v[0], v[1], v[2], v[3], v[4], v[5], f(-1), f(0));
                }
                printf("\n");
                fflush(stdout);
            }
            for (void *q : st) cudaFree(q);
        }
        si++;
    }
}

/* The decode kernels as a model's graph runs them: each call after a plain kernel (a small
   read-modify-write of batch x dim floats, as in_proj's / dt_proj's GEMM before the conv / the step:
   no programmatic trigger), NG layers a graph, NG distinct states. us a call = (pred + call) - pred,
   median of 11 replays. Step: bf16, the state in bf16 (SELSCAN_STEP_STATE_T, mamba_ssm's cache),
   each kernel choice with programmatic dependent launch (pdl) and without, and the launcher's
   choice with D / delta_bias in bf16 (SELSCAN_STEP_D_T / _DELTA_BIAS_T); conv step: bf16, W 4,
   silu, bias, pdl and without. (Back-to-back calls of one kernel, bench_step_graphs, overlap each
   other's launch through pdl: a model's graph never does.) */
static void bench_decode_model(GraphTimer &gt) {
    static const int64_t shapes[][2] = {{1, 1536}, {16, 1536}, {64, 1536}, {1, 4096}, {16, 4096}, {64, 4096}};
    /* S, R, fast, minb, loop, lat (selscan__step_cuda_tuned) */
    static const int vs[][6] = {{0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 1, -1}, {0, 0, 0, 0, -1, -1}, {4, 0, 0, 0, -1, -1}, {0, 0, 0, 0, 0, 1}};
    printf("\ndecode kernels after a plain kernel (a model's graph), bf16, N 16, %d layers a graph: us a call (pdl / no pdl)\n", NG);
    printf("%-12s | %7s | %13s %13s %13s %13s %13s %13s | %13s\n", "batch,dim", "pred", "step auto", "step loop", "step vec",
           "step vec S4", "step lat", "auto, D/bias T", "conv W4");
    for (const auto &sh : shapes) {
        const int64_t B = sh[0], Dm = sh[1], N = 16, BD = B * Dm;
        std::vector<void *> st(NG), cs(NG);
        for (int k = 0; k < NG; k++) {
            st[k] = dalloc(static_cast<size_t>(BD * N) * 2); dfill(st[k], BD * N, true, -1, 1, 300 + k);
            cs[k] = dalloc(static_cast<size_t>(BD * 4) * 2); dfill(cs[k], BD * 4, true, -1, 1, 400 + k);
        }
        float4 *pb = static_cast<float4 *>(dalloc(static_cast<size_t>(BD) * 4));
        CU(cudaMemset(pb, 0, static_cast<size_t>(BD) * 4));
        const int64_t n4 = BD / 4;
        auto pred = [&] {
            rmw_kernel<<<static_cast<unsigned>((n4 + 255) / 256), 256, 0, gt.stream>>>(pb, n4);
            CU(cudaGetLastError());
        };
        StepInputs in(B, Dm, N, true);
        selscan_step_problem s = in.s;
        s.flags |= SELSCAN_STEP_STATE_T;
        /* the same with D and delta_bias in bf16 (a bf16 model's own parameters, as mamba_ssm's step passes them) */
        void *D16 = dalloc(static_cast<size_t>(Dm) * 2), *b16 = dalloc(static_cast<size_t>(Dm) * 2);
        dfill(D16, Dm, true, -1, 1, 7); dfill(b16, Dm, true, -0.5f, 0.5f, 8);
        selscan_step_problem sT = s;
        sT.D.data = D16; sT.delta_bias.data = b16;
        sT.flags |= SELSCAN_STEP_D_T | SELSCAN_STEP_DELTA_BIAS_T;
        const float tp = gt.time([&] { for (int i = 0; i < NG; i++) pred(); });
        char name[32];
        snprintf(name, sizeof name, "%lld,%lld", (long long)B, (long long)Dm);
        printf("%-12s | %7.2f |", name, tp);
        /* "pdl / no pdl": us a call(layer i, pdl) after pred, pred's own time taken off */
        auto after_pred = [&](auto call) {
            float t[2];
            for (int pdl = 0; pdl < 2; pdl++)
                t[pdl] = gt.time([&] {
                    for (int i = 0; i < NG; i++) {
                        pred();
                        call(i, pdl != 0);
                    }
                }) - tp;
            printf(" %6.2f/%6.2f", t[1], t[0]);
        };
        for (const auto &v : vs)
            after_pred([&](int i, bool pdl) {
                s.state.data = st[i];
                OK(selscan__step_cuda_tuned(&s, NULL, gt.stream, v[0], v[1], pdl ? -1 : 0, v[2], v[3], v[4], v[5]));
            });
        after_pred([&](int i, bool pdl) {
            sT.state.data = st[i];
            OK(selscan__step_cuda_tuned(&sT, NULL, gt.stream, 0, 0, pdl ? -1 : 0));
        });
        void *w = dalloc(static_cast<size_t>(Dm) * 4 * 4), *cb = dalloc(static_cast<size_t>(Dm) * 4);
        dfill(w, Dm * 4, false, -0.5f, 0.5f, 7);
        dfill(cb, Dm, false, -0.5f, 0.5f, 8);
        selscan_conv_step_problem c;
        memset(&c, 0, sizeof c);
        c.batch = B; c.dim = Dm; c.width = 4; c.state_len = 4; c.dtype = SELSCAN_BF16; c.flags = SELSCAN_CONV_SILU;
        c.x.data = in.s.u.data; c.weight.data = w; c.bias.data = cb; c.y.data = in.s.y.data;
        printf(" |");
        after_pred([&](int i, bool pdl) {
            c.state.data = cs[i];
            OK(selscan__conv_step_cuda_tuned(&c, NULL, gt.stream, pdl));
        });
        printf("\n");
        fflush(stdout);
        cudaFree(w); cudaFree(cb); cudaFree(pb); cudaFree(D16); cudaFree(b16);
        for (void *q : st) cudaFree(q);
        for (void *q : cs) cudaFree(q);
    }
}

/* Short prefill forward under graphs: batch 1 (and lm-prefill), z, D, delta_bias, softplus, h_last
   written (what a decode loop needs next), no checkpoint; inputs rotate over sets as in the
   eager table. Also the eager figure of the same call for reference (20 queued calls between
   two events, median of 9). */
static void bench_prefill_graphs(GraphTimer &gt, double bw, double ex2rate, const char *only_dt) {
    /* the issue's short-prefill cases, then larger batches (where the launcher's rule hands over to the fast forward) */
    struct P { int64_t batch, dim, L; double mamba[2]; };
    static const P cases[] = {{1, 1536, 1024, {0.0585, 0.0378}}, {1, 2048, 128, {0, 0}}, {1, 2048, 512, {0, 0}}, {1, 2048, 2048, {0, 0}},
                              {1, 5120, 128, {0, 0}},            {1, 5120, 512, {0, 0}}, {1, 5120, 2048, {0, 0}}, {2, 2048, 512, {0, 0}},
                              {4, 2048, 512, {0, 0}},            {8, 2048, 512, {0, 0}}, {4, 5120, 1024, {0, 0}}, {8, 2048, 2048, {0, 0}}};
    printf("\nshort prefill forward, batch 1 (then larger), N 16, z, D, delta_bias, h_last (no checkpoint): us a call; graphs: %d calls a graph,\n"
           "median of 11 replays (L2 flushed before each); eager: %d queued calls, median of 9; mamba: eager, same-process\n"
           "side-by-side figure measured 2026-11-24 (lm-prefill only)\n", NG, NG);
    /* SELSCAN_BENCH_PREFILL_LCHUNK=s: the fast forward's L chunks forced to s steps (tuning) */
    const int64_t lchunk = getenv("SELSCAN_BENCH_PREFILL_LCHUNK") ? atoll(getenv("SELSCAN_BENCH_PREFILL_LCHUNK")) : 0;
    if (lchunk) printf("fast forward's L chunks forced to %lld steps\n", (long long)lchunk);
    printf("graphs: the launcher's choice; 'fast': the fast forward (short-prefill kernel off); 'K4' / 'K8': the short-prefill\n"
           "kernel forced with 4 / 8 / 16 steps a lane (16: 2-byte types only)\n");
    printf("%-16s %-5s | %9s %9s %9s %9s %9s %9s | %9s %7s | %9s\n", "dim,L", "dtype", "graphs", "fast", "K4", "K8", "K16", "eager", "floor",
           "x floor", "mamba");
    /* SELSCAN_BENCH_PREFILL_CASES=n: the first n rows only */
    const size_t ncases = getenv("SELSCAN_BENCH_PREFILL_CASES") ? static_cast<size_t>(atoi(getenv("SELSCAN_BENCH_PREFILL_CASES"))) : 99;
    for (size_t ci = 0; ci < ncases && ci < sizeof cases / sizeof cases[0]; ci++) {
        const P &c = cases[ci];
        for (int di = 0; di < 2; di++) {
            if (only_dt && strcmp(only_dt, di ? "bf16" : "f32") != 0) continue;
            const int64_t Bt = c.batch, Dm = c.dim, L = c.L, N = 16, BDL = Bt * Dm * L, BNL = Bt * N * L, DN = Dm * N;
            const size_t es = di ? 2 : 4, set_bytes = 5 * BDL * es + 2 * BNL * es;
            const int nsets = std::max<int>(2, std::min<int>(NG, static_cast<int>(200e6 / set_bytes) + 1));
            struct Set { void *u, *delta, *z, *B, *C, *y, *h; };
            std::vector<Set> sets(nsets);
            for (int k = 0; k < nsets; k++) {
                Set &S = sets[k];
                S.u = dalloc(BDL * es); dfill(S.u, BDL, di, -1, 1, 11 + k);
                S.delta = dalloc(BDL * es); dfill(S.delta, BDL, di, -3, 1, 22 + k);
                S.z = dalloc(BDL * es); dfill(S.z, BDL, di, -2, 2, 33 + k);
                S.B = dalloc(BNL * es); dfill(S.B, BNL, di, -1, 1, 44 + k);
                S.C = dalloc(BNL * es); dfill(S.C, BNL, di, -1, 1, 55 + k);
                S.y = dalloc(BDL * es);
                S.h = dalloc(Bt * DN * 4);
            }
            void *A = dalloc(DN * 4), *D = dalloc(Dm * 4), *bias = dalloc(Dm * 4);
            dfill(A, DN, false, -4, -0.5f, 66); dfill(D, Dm, false, -1, 1, 77); dfill(bias, Dm, false, -0.5f, 0.5f, 88);
            selscan_problem p;
            memset(&p, 0, sizeof p);
            p.batch = Bt; p.dim = Dm; p.seqlen = L; p.dstate = N; p.dtype = di ? SELSCAN_BF16 : SELSCAN_F32;
            p.flags = SELSCAN_DELTA_SOFTPLUS;
            p.A.data = A; p.D.data = D; p.delta_bias.data = bias;
            auto use = [&](int k) {
                const Set &S = sets[k % nsets];
                p.u.data = S.u; p.delta.data = S.delta; p.z.data = S.z; p.B.data = S.B; p.C.data = S.C; p.y.data = S.y; p.h_last.data = S.h;
            };
            use(0);
            size_t wsb = 0;
            OK(selscan_workspace_size_cuda(&p, NULL, &wsb));
            void *ws = wsb ? dalloc(wsb) : NULL;
            auto graphed = [&](int shortk) {
                return gt.time([&] {
                    for (int i = 0; i < NG; i++) {
                        use(i);
                        OK(selscan__forward_cuda_tuned(&p, NULL, ws, wsb, gt.stream, 0, 0, lchunk, shortk));
                    }
                });
            };
            const float g = graphed(0), gfast = graphed(-1), g4 = graphed(4), g8 = graphed(8), g16 = di ? graphed(16) : 0.0f;
            std::vector<float> t;
            for (int r = 0; r < 11; r++) {
                CU(cudaEventRecord(gt.e0, gt.stream));
                for (int i = 0; i < NG; i++) {
                    use(i);
                    OK(selscan__forward_cuda_tuned(&p, NULL, ws, wsb, gt.stream, 0, 0, lchunk, 0));
                }
                CU(cudaEventRecord(gt.e1, gt.stream));
                CU(cudaEventSynchronize(gt.e1));
                float ms;
                CU(cudaEventElapsedTime(&ms, gt.e0, gt.e1));
                if (r >= 2) t.push_back(ms * 1e3f / NG);
            }
            const float eager = median(t);
            const double fbytes = 4.0 * BDL * es + 2.0 * BNL * es, exps = static_cast<double>(BDL) * N;
            const double floor_us = std::max(fbytes / bw, exps / ex2rate) * 1e6;
            char name[64];
            if (Bt == 1) snprintf(name, sizeof name, "%lld,%lld", (long long)Dm, (long long)L);
            else snprintf(name, sizeof name, "%lldx%lld,%lld", (long long)Bt, (long long)Dm, (long long)L);
            char mb[32] = "-";
            if (c.mamba[di] > 0) snprintf(mb, sizeof mb, "%.1f", c.mamba[di] * 1e3);
            printf("%-16s %-5s | %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f | %9.2f %7.2f | %9s\n", name, di ? "bf16" : "f32", g, gfast, g4, g8, g16, eager,
                   floor_us, g / floor_us, mb);
            fflush(stdout);
            for (Set &S : sets) { void *fr[] = {S.u, S.delta, S.z, S.B, S.C, S.y, S.h}; for (void *q : fr) cudaFree(q); }
            void *fr[] = {A, D, bias, ws};
            for (void *q : fr) if (q) cudaFree(q);
        }
    }
}


/* The causal conv1d (selscan_cuda.cuh >>conv): forward (silu, bias) and backward (dx, dweight,
   dbias) at Mamba-1 shapes and the Mamba-2 130m layer's xBC (dim + 2 dstate channels), W = 4,
   f32 / bf16, x / y / dy / dx contiguous (bdl: the rows path) or as the channels-last view of a
   (batch, L, 2 dim) buffer (xz: transformers' layout; the channels-last path, >>conv-cl); each
   beside the tiled kernels forced, in the same run. Floor: the bytes a call must move (forward
   x + y, backward x + dy + dx) at the copy bandwidth of this run. */
static void bench_conv(cudaStream_t stream, cudaEvent_t e0, cudaEvent_t e1, double bw, const char *only_dt) {
    struct CC { const char *name; int64_t batch, dim, L; };
    const CC cases[] = {{"130m-train", 8, 1536, 2048}, {"1.4b-train", 4, 4096, 2048}, {"prefill-1", 1, 4096, 512}, {"m2-130m-xBC", 8, 1792, 2048}};
    printf("\nconv1d (W 4, silu, bias; median of 20 calls each synchronised) | fwd ms  x floor | bwd ms  x floor [| tiled kernels forced: the same]\n");
    for (const CC &c : cases)
        for (int di = 0; di < 2; di++)
            for (int lay = 0; lay < 2; lay++) {
                if (only_dt && strcmp(only_dt, di ? "bf16" : "f32") != 0) continue;
                const selscan_dtype dt = di ? SELSCAN_BF16 : SELSCAN_F32;
                const size_t es = di ? 2 : 4;
                const int64_t n = c.batch * c.dim * c.L, nalloc = lay ? 2 * n : n, W = 4;
                void *x = dalloc(nalloc * es), *y = dalloc(nalloc * es), *dy = dalloc(nalloc * es), *dx = dalloc(nalloc * es);
                void *w = dalloc(c.dim * W * 4), *b = dalloc(c.dim * 4), *dw = dalloc(c.dim * W * 4), *db = dalloc(c.dim * 4);
                dfill(x, nalloc, di, -1, 1, 5); dfill(dy, nalloc, di, -1, 1, 6); dfill(w, c.dim * W, false, -0.5f, 0.5f, 7);
                dfill(b, c.dim, false, -0.5f, 0.5f, 8);
                selscan_conv_problem p;
                memset(&p, 0, sizeof p);
                p.batch = c.batch; p.dim = c.dim; p.seqlen = c.L; p.width = W; p.dtype = dt; p.flags = SELSCAN_CONV_SILU;
                p.x.data = x; p.y.data = y; p.weight.data = w; p.bias.data = b;
                selscan_conv_grads g;
                memset(&g, 0, sizeof g);
                g.dy.data = dy; g.dx.data = dx; g.dweight.data = dw; g.dbias.data = db;
                if (lay) { /* x = xz[:, :, :dim].transpose(1, 2) of a (batch, L, 2 dim) tensor */
                    const int64_t st[4] = {c.L * 2 * c.dim, 1, 2 * c.dim, 0};
                    memcpy(p.x.stride, st, sizeof st); memcpy(p.y.stride, st, sizeof st);
                    memcpy(g.dy.stride, st, sizeof st); memcpy(g.dx.stride, st, sizeof st);
                }
                size_t wsb = 0;
                OK(selscan_conv_workspace_size_cuda(&p, &g, &wsb));
                void *ws = wsb ? dalloc(wsb) : NULL;
                auto time_it = [&](bool bwd, int rows) {
                    std::vector<float> t;
                    for (int i = 0; i < 23; i++) {
                        CU(cudaEventRecord(e0, stream));
                        if (bwd) OK(selscan__conv_backward_cuda_tuned(&p, &g, NULL, ws, wsb, stream, rows));
                        else OK(selscan__conv_forward_cuda_tuned(&p, NULL, stream, rows));
                        CU(cudaEventRecord(e1, stream));
                        CU(cudaEventSynchronize(e1));
                        float ms;
                        CU(cudaEventElapsedTime(&ms, e0, e1));
                        if (i >= 3) t.push_back(ms);
                    }
                    return median(t);
                };
                const float f = time_it(false, 0), bk = time_it(true, 0);
                const double ff = 2.0 * n * es / bw * 1e3, bf = 3.0 * n * es / bw * 1e3;
                printf("%-11s %-5s %-3s (%lld, %lld, %lld) | %8.4f %6.2f | %8.4f %6.2f", c.name, di ? "bf16" : "f32", lay ? "xz" : "bdl",
                       (long long)c.batch, (long long)c.dim, (long long)c.L, f, f / ff, bk, bk / bf);
                { /* the tiled kernels beside the rows (bdl) / channels-last (xz) path */
                    const float ft = time_it(false, -1), bt = time_it(true, -1);
                    printf(" | tiled %8.4f %6.2f | %8.4f %6.2f", ft, ft / ff, bt, bt / bf);
                }
                printf("\n");
                fflush(stdout);
                void *fr[] = {x, y, dy, dx, w, b, dw, db, ws};
                for (void *q : fr) if (q) cudaFree(q);
            }
}

int main(int argc, char **argv) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("bench_cuda: skipped: no GPU\n");
        return 0;
    }
    bool graphs = false; /* --graphs (anywhere): the CUDA-graph tables (step, short prefill) instead */
    std::vector<const char *> pos;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--graphs") == 0) graphs = true;
        else pos.push_back(argv[i]);
    }
    const char *only = pos.size() > 0 ? pos[0] : NULL;
    const char *only_dt = pos.size() > 1 ? pos[1] : NULL;
    /* tuning: SELSCAN_BENCH_NPT (-1: the general forward kernel instead of the fast one) and
       SELSCAN_BENCH_NLCH (the general kernel's L chunks) force the forward's plan;
       SELSCAN_BENCH_FWD_ONLY=1 times the forward only */
    const int npt_force = getenv("SELSCAN_BENCH_NPT") ? atoi(getenv("SELSCAN_BENCH_NPT")) : 0;
    const int64_t nlch_force = getenv("SELSCAN_BENCH_NLCH") ? atoll(getenv("SELSCAN_BENCH_NLCH")) : 0;
    const bool fwd_only = getenv("SELSCAN_BENCH_FWD_ONLY") && atoi(getenv("SELSCAN_BENCH_FWD_ONLY"));
    /* queued: that many calls back to back between two events (a training loop's rate: the host's
       launch work overlaps the GPU's), median of 9 samples; else each call timed alone */
    const int queued = getenv("SELSCAN_BENCH_QUEUED") ? std::max(0, atoi(getenv("SELSCAN_BENCH_QUEUED"))) : 0;
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
    if (graphs) {
        GraphTimer gt;
        gt.stream = stream; gt.e0 = e0; gt.e1 = e1;
        gt.flush_bytes = 256u << 20;
        gt.flush = dalloc(gt.flush_bytes);
        const bool sweep = getenv("SELSCAN_BENCH_STEP_SWEEP") && atoi(getenv("SELSCAN_BENCH_STEP_SWEEP"));
        if (!only || strstr("step", only)) bench_step_graphs(gt, bw, only_dt, sweep);
        if (!only || strstr("decode", only)) bench_decode_model(gt);
        if (!only || strstr("prefill", only)) bench_prefill_graphs(gt, bw, ex2rate, only_dt);
        cudaFree(gt.flush);
        return 0;
    }
    if (queued > 0) printf("timing: %d calls queued between two events, ms a call, median of 9\n", queued);
    else printf("timing: each call between two events and synchronised (its host work exposed), median\n");
    printf("mb ref: state-spaces/mamba's times kept as constants since 2c995ba, not run here (in process: "
           "bench/bench_torch.py --mamba)\n");
    printf("%-11s %-5s %4s | %9s %9s %7s %6s %9s %6s | %9s %9s %9s %6s %9s %6s\n", "case", "dtype", "", "fwd ms", "floor ms",
           "GB/s", "x flr", "mb ref ms", "vs ref", "bwd ms", "nock ms", "floor ms", "x flr", "mb ref ms", "vs ref");

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
                const int per = queued > 0 ? queued : 1, samples = queued > 0 ? 9 : reps;
                for (int i = 0, k = 0; i < samples + 3; i++) {
                    CU(cudaEventRecord(e0, stream));
                    for (int c = 0; c < per; c++, k++) {
                        use(k % nsets);
                        if (which == 0) OK(selscan__forward_cuda_tuned(&p, &x, ws, wsb, stream, npt_force, nlch_force));
                        else if (which == 1) OK(selscan_backward_cuda_ex(&p, &g, &x, ws, wsb, stream));
                        else OK(selscan_backward_cuda_ex(&p, &g, &nock, ws, wsb, stream));
                    }
                    CU(cudaEventRecord(e1, stream));
                    CU(cudaEventSynchronize(e1));
                    float ms;
                    CU(cudaEventElapsedTime(&ms, e0, e1));
                    if (i >= 3) t.push_back(ms / per);
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
    if (!only || strstr("conv", only)) bench_conv(stream, e0, e1, bw, only_dt);
    return 0;
}
