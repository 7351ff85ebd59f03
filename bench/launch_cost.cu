// bench/launch_cost.cu: the host time of one library call on a GPU (validation, plan, launch: the
// driver's launch included), and the GPU's time a call, for before / after comparisons of the
// library's CUDA host path at the sizes of bench/host_cost.py (the scan forward b1 dim 64 L 16 N 16,
// the decode step b1 dim 1536 N 16, float32), beside bare launches of an empty kernel (with and
// without programmatic dependent launch) that calibrate the driver. Not built by make:
//   nvcc -O3 -std=c++17 -arch=sm_90 -I<tree> bench/launch_cost.cu -o launch_cost && ./launch_cost
// Each figure: median over 7 rounds of n calls queued back to back (host: until the last call
// returns; gpu: events around the round, so max(host, kernel) a call: back to back, tiny kernels
// are bound by the GPU's launch rate, 3-4 us), and "idle": the host time of the call alone with
// a 20 us spin between calls, as a framework's op meets an idle GPU (its other host work between).
#define SELSCAN_IMPLEMENTATION
#define SELSCAN_CUDA_IMPLEMENTATION
#include "selscan_cuda.cuh"
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

static __global__ void empty_kernel(int) {}

template <typename F> static void timed(const char *name, F call, int n = 20000) {
    for (int i = 0; i < 500; i++) call();
    cudaDeviceSynchronize();
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<double> host, gpu;
    for (int r = 0; r < 7; r++) {
        cudaEventRecord(e0);
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < n; i++) call();
        auto t1 = std::chrono::steady_clock::now();
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / n);
        gpu.push_back(ms * 1e3 / n);
    }
    std::sort(host.begin(), host.end());
    std::sort(gpu.begin(), gpu.end());
    std::vector<double> idle;
    for (int r = 0; r < 7; r++) {
        double sum = 0;
        const int m = n / 4;
        for (int i = 0; i < m; i++) {
            auto t0 = std::chrono::steady_clock::now();
            call();
            auto t1 = std::chrono::steady_clock::now();
            sum += std::chrono::duration<double, std::micro>(t1 - t0).count();
            while (std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t1).count() < 20.0) {
            }
        }
        cudaDeviceSynchronize();
        idle.push_back(sum / m);
    }
    std::sort(idle.begin(), idle.end());
    printf("%-40s back to back: host %6.2f us a call (min %6.2f), gpu %6.2f;  idle: host %6.2f us a call (min %6.2f)\n",
           name, host[3], host[0], gpu[3], idle[3], idle[0]);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

static float *dev_floats(size_t n) {
    float *p = nullptr;
    cudaMalloc(&p, n * sizeof(float) + 256);
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) h[i] = 0.01f * static_cast<float>(i % 97) - 0.3f;
    cudaMemcpy(p, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    return p;
}

int main() {
    cudaFree(0);
    cudaStream_t s0 = 0;
    timed("empty kernel <<<1, 128>>>", [&] { empty_kernel<<<1, 128, 0, s0>>>(0); });
    for (int pdl = 0; pdl < 2; pdl++) {
        timed(pdl ? "empty kernel, cudaLaunchKernelEx + PDL" : "empty kernel, cudaLaunchKernelEx", [&] {
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3(1, 24);
            cfg.blockDim = dim3(128);
            cfg.stream = s0;
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            at[0].val.programmaticStreamSerializationAllowed = 1;
            cfg.attrs = at;
            cfg.numAttrs = pdl;
            (void)cudaLaunchKernelEx(&cfg, empty_kernel, 0);
        });
    }
    const int64_t step_sizes[][2] = {{1, 1536}, {64, 4096}, {256, 4096}};
    for (const auto &bd : step_sizes) {  // the decode step
        const int64_t b = bd[0], d = bd[1], N = 16;
        selscan_step_problem s;
        memset(&s, 0, sizeof s);
        s.batch = b; s.dim = d; s.dstate = N; s.n_groups = 1; s.dtype = SELSCAN_F32; s.flags = SELSCAN_DELTA_SOFTPLUS;
        s.state.data = dev_floats(b * d * N); s.u.data = dev_floats(b * d); s.delta.data = dev_floats(b * d);
        float *A = dev_floats(d * N);
        s.A.data = A; s.B.data = dev_floats(b * N); s.C.data = dev_floats(b * N); s.D.data = dev_floats(d);
        s.z.data = dev_floats(b * d); s.delta_bias.data = dev_floats(d); s.y.data = dev_floats(b * d);
        std::vector<float> hA(d * N, -0.5f);
        cudaMemcpy(A, hA.data(), hA.size() * sizeof(float), cudaMemcpyHostToDevice);
        selscan_status st = SELSCAN_OK;
        char name[64];
        snprintf(name, sizeof name, "step b%d dim %d N 16 f32", (int)b, (int)d);
        timed(name, [&] { st = selscan_step_cuda_ex(&s, NULL, s0); }, b > 1 ? 4000 : 20000);
        if (st != SELSCAN_OK) printf("  step: %s\n", selscan_status_name(st));
    }
    {  // the scan forward
        const int64_t b = 1, d = 64, L = 16, N = 16;
        selscan_problem p;
        memset(&p, 0, sizeof p);
        p.batch = b; p.dim = d; p.seqlen = L; p.dstate = N; p.n_groups = 1; p.dtype = SELSCAN_F32; p.flags = SELSCAN_DELTA_SOFTPLUS;
        p.u.data = dev_floats(b * d * L); p.delta.data = dev_floats(b * d * L);
        float *A = dev_floats(d * N);
        std::vector<float> hA(d * N, -0.5f);
        cudaMemcpy(A, hA.data(), hA.size() * sizeof(float), cudaMemcpyHostToDevice);
        p.A.data = A; p.B.data = dev_floats(b * N * L); p.C.data = dev_floats(b * N * L); p.D.data = dev_floats(d);
        p.z.data = dev_floats(b * d * L); p.delta_bias.data = dev_floats(d); p.y.data = dev_floats(b * d * L);
        size_t bytes = 0;
        selscan_status st = selscan_workspace_size_cuda(&p, NULL, &bytes);
        void *ws = nullptr;
        if (bytes) cudaMalloc(&ws, bytes);
        timed("scan forward b1 dim 64 L 16 N 16 f32", [&] { st = selscan_forward_cuda_ex(&p, NULL, ws, bytes, s0); });
        if (st != SELSCAN_OK) printf("  forward: %s\n", selscan_status_name(st));
    }
    return 0;
}
