// Build check: a C++17 framework-op style caller holding const float * inputs assigns them to the
// problem without casts (selscan_tensor.data is const void *), malloc's its workspace, runs the
// forward, backward and step, and checks the forward against the reference.
#define SELSCAN_IMPLEMENTATION
#include "../../selscan.h"
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {
struct Inputs { // what a framework hands an op: read-only tensors
    const float *u, *delta, *A, *B, *C;
};

selscan_status run(const Inputs &in, float *y, float *yref, float *dy, float *du, int64_t batch, int64_t dim,
                   int64_t L, int64_t N) {
    selscan_problem p{};
    p.batch = batch; p.dim = dim; p.seqlen = L; p.dstate = N;
    p.flags = SELSCAN_DELTA_SOFTPLUS;
    p.u.data = in.u; p.delta.data = in.delta; p.A.data = in.A; p.B.data = in.B; p.C.data = in.C; // no casts
    p.y.data = y;
    selscan_grads g{};
    g.dy.data = dy;
    g.du.data = du;
    size_t bytes = 0;
    selscan_status st = selscan_workspace_size(&p, &g, &bytes);
    if (st != SELSCAN_OK) return st;
    void *ws = std::malloc(bytes ? bytes : 1);
    st = selscan_forward_cpu(&p, ws, bytes);
    if (st == SELSCAN_OK) st = selscan_backward_cpu(&p, &g, ws, bytes);
    p.y.data = yref;
    if (st == SELSCAN_OK) st = selscan_forward_ref(&p, ws, bytes);
    std::free(ws);
    return st;
}
} // namespace

int main() {
    const int64_t batch = 2, dim = 16, L = 40, N = 8;
    std::vector<float> u(batch * dim * L), delta(u.size()), A(dim * N), B(batch * N * L), C(B.size());
    std::vector<float> y(u.size()), yref(u.size()), dy(u.size(), 1.0f), du(u.size());
    for (size_t i = 0; i < u.size(); i++) { u[i] = std::sin(0.1f * i); delta[i] = std::cos(0.07f * i) - 1.0f; }
    for (size_t i = 0; i < A.size(); i++) A[i] = -1.0f - 0.1f * (i % N);
    for (size_t i = 0; i < B.size(); i++) { B[i] = std::sin(0.3f * i); C[i] = std::cos(0.2f * i); }
    const Inputs in{u.data(), delta.data(), A.data(), B.data(), C.data()};
    selscan_status st = run(in, y.data(), yref.data(), dy.data(), du.data(), batch, dim, L, N);
    double worst = 0;
    for (size_t i = 0; i < y.size(); i++) worst = std::fmax(worst, std::fabs(y[i] - yref[i]) / (1.0 + std::fabs(yref[i])));
    // the step, also from const inputs
    selscan_step_problem s{};
    std::vector<float> state(batch * dim * N), yt(batch * dim);
    const float *cu = u.data(), *cd = delta.data();
    s.batch = batch; s.dim = dim; s.dstate = N;
    s.u.data = cu; s.delta.data = cd; s.A.data = in.A; s.B.data = in.B; s.C.data = in.C;
    s.state.data = state.data(); s.y.data = yt.data();
    if (st == SELSCAN_OK) st = selscan_step_cpu(&s);
    std::printf("const inputs: %s, forward vs reference %.2g\n", selscan_status_string(st), worst);
    return st == SELSCAN_OK && worst < 1e-4 ? 0 : 1;
}
