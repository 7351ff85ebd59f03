// bench/host_cost_nogpu.cu: the host part of selscan_step_cuda_ex (validation, plan, a launch the
// runtime refuses) timed on a machine without a GPU, for before / after comparisons of the library's
// CUDA host path; every call returns SELSCAN_ERR_CUDA there (no device). Not built by make:
//   nvcc -O3 -std=c++17 -arch=sm_90 -I<tree> bench/host_cost_nogpu.cu -o host_cost_nogpu && ./host_cost_nogpu
// (on a GPU machine the launches succeed and this times the queued launches instead).
#define SELSCAN_IMPLEMENTATION
#define SELSCAN_CUDA_IMPLEMENTATION
#include "selscan_cuda.cuh"
#include <chrono>
#include <cstdio>
#include <vector>
int main() {
    const int64_t b = 1, d = 1536, N = 16;
    std::vector<float> st(b * d * N), x(b * d), dt(b * d), A(d * N), B(b * N), C(b * N), D(d), z(b * d), bias(d), y(b * d);
    selscan_step_problem s;
    memset(&s, 0, sizeof s);
    s.batch = b; s.dim = d; s.dstate = N; s.n_groups = 1; s.dtype = SELSCAN_F32; s.flags = SELSCAN_DELTA_SOFTPLUS;
    s.state.data = st.data(); s.u.data = x.data(); s.delta.data = dt.data(); s.A.data = A.data();
    s.B.data = B.data(); s.C.data = C.data(); s.D.data = D.data(); s.z.data = z.data(); s.delta_bias.data = bias.data();
    s.y.data = y.data();
    selscan_status r = SELSCAN_OK;
    for (int rep = 0; rep < 3; rep++) {
        auto t0 = std::chrono::steady_clock::now();
        const int n = 200000;
        for (int i = 0; i < n; i++) r = selscan_step_cuda_ex(&s, NULL, 0);
        auto t1 = std::chrono::steady_clock::now();
        printf("step: %.3f us a call (status %s)\n", std::chrono::duration<double, std::micro>(t1 - t0).count() / n, selscan_status_name(r));
    }
    return 0;
}
