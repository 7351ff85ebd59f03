// selscan_tf_layout.h - how the TensorFlow op's tensors map onto selscan's logical operands,
// through element strides (no transposes, no copies), up to a whole problem (ScanProblem /
// ScanGrads). Free of TensorFlow and CUDA headers, so the GPU check (gpu_check.cu) uses exactly
// the op's mapping.
//
// Memory layouts (TensorFlow tensors are dense row-major):
//
//   layout "BLD" (channels-last, the natural TF/Keras layout)     layout "BDL"
//     u, delta, z, y, dy, du, ...  (batch, L, dim)                  (batch, dim, L)
//     B, C, dB, dC                 (batch, L, G, N)                 (batch, G, N, L)
//   both layouts
//     A, dA                        (dim, N)            float32
//     D, delta_bias, dD, ...       (dim)               float32
//     h0, h_last, dh0, dh_last     (batch, dim, N)     float32
//
// selscan's logical shapes are u (batch, dim, L) and B (batch, G, N, L); the strides below say
// where each logical element lives in the TF tensor.
#ifndef SELSCAN_TF_LAYOUT_H_
#define SELSCAN_TF_LAYOUT_H_

#include <cstdint>
#include <string>

#include "selscan.h"
#include "selscan_binding.h" // bindings/common: the layer shared with the other bindings

namespace selscan_tf {

namespace bind = selscan_binding;

// Logical sizes of one call (no fixed B / C; rows = batch, or n_seqs with packed sequences).
using Sizes = bind::Sizes;

// Element strides of each kind of operand, for its logical selscan shape. Inputs are
// selscan_tensor (const data), outputs selscan_out_tensor: the *Tensor functions make inputs, the
// *Out functions outputs, with the same strides.
template <typename Tn> inline Tn SeqT(decltype(Tn::data) data, const Sizes &s, bool bld) { // (batch, dim, L)
    Tn t = {};
    t.data = data;
    if (bld) {
        t.stride[0] = s.L * s.dim;
        t.stride[1] = 1;
        t.stride[2] = s.dim;
    } else {
        t.stride[0] = s.dim * s.L;
        t.stride[1] = s.L;
        t.stride[2] = 1;
    }
    return t;
}
template <typename Tn> inline Tn BcT(decltype(Tn::data) data, const Sizes &s, bool bld) { // (batch, G, N, L)
    Tn t = {};
    t.data = data;
    if (bld) {
        t.stride[0] = s.L * s.G * s.N;
        t.stride[1] = s.N;
        t.stride[2] = 1;
        t.stride[3] = s.G * s.N;
    } else {
        t.stride[0] = s.G * s.N * s.L;
        t.stride[1] = s.N * s.L;
        t.stride[2] = s.L;
        t.stride[3] = 1;
    }
    return t;
}
template <typename Tn> inline Tn MatT(decltype(Tn::data) data, const Sizes &s) { // (dim, N)
    Tn t = {};
    t.data = data;
    t.stride[0] = s.N;
    t.stride[1] = 1;
    return t;
}
template <typename Tn> inline Tn VecT(decltype(Tn::data) data) { // (dim)
    Tn t = {};
    t.data = data;
    t.stride[0] = 1;
    return t;
}
template <typename Tn> inline Tn StateT(decltype(Tn::data) data, const Sizes &s) { // (batch, dim, N)
    Tn t = {};
    t.data = data;
    t.stride[0] = s.dim * s.N;
    t.stride[1] = s.N;
    t.stride[2] = 1;
    return t;
}

inline selscan_tensor SeqTensor(const void *d, const Sizes &s, bool bld) { return SeqT<selscan_tensor>(d, s, bld); }
inline selscan_tensor BcTensor(const void *d, const Sizes &s, bool bld) { return BcT<selscan_tensor>(d, s, bld); }
inline selscan_tensor MatTensor(const void *d, const Sizes &s) { return MatT<selscan_tensor>(d, s); }
inline selscan_tensor VecTensor(const void *d) { return VecT<selscan_tensor>(d); }
inline selscan_tensor StateTensor(const void *d, const Sizes &s) { return StateT<selscan_tensor>(d, s); }
inline selscan_out_tensor SeqOut(void *d, const Sizes &s, bool bld) { return SeqT<selscan_out_tensor>(d, s, bld); }
inline selscan_out_tensor BcOut(void *d, const Sizes &s, bool bld) { return BcT<selscan_out_tensor>(d, s, bld); }
inline selscan_out_tensor MatOut(void *d, const Sizes &s) { return MatT<selscan_out_tensor>(d, s); }
inline selscan_out_tensor VecOut(void *d) { return VecT<selscan_out_tensor>(d); }
inline selscan_out_tensor StateOut(void *d, const Sizes &s) { return StateT<selscan_out_tensor>(d, s); }

// One call's operands in the op's layout: the data pointers (NULL: an absent optional operand, or
// an output not computed) -> selscan's problem and gradients. The op (selscan_tf_common.h's
// BuildProblem / BuildGrads) and gpu_check.cu both map through these.
struct ScanData {
    const void *u = nullptr, *delta = nullptr, *A = nullptr, *B = nullptr, *C = nullptr, *D = nullptr, *z = nullptr,
               *delta_bias = nullptr, *h0 = nullptr;
    void *y = nullptr, *h_last = nullptr;
};
// cu_seqlens: the packed sequences' offsets in host memory (NULL without; s.n_seqs of them + 1).
inline selscan_problem ScanProblem(const ScanData &d, const Sizes &s, bool bld, selscan_dtype dtype, bool softplus,
                                   const int64_t *cu_seqlens = nullptr) {
    selscan_problem p = bind::MakeProblem(s, dtype, softplus, cu_seqlens);
    p.u = SeqTensor(d.u, s, bld);
    p.delta = SeqTensor(d.delta, s, bld);
    p.A = MatTensor(d.A, s);
    p.B = BcTensor(d.B, s, bld);
    p.C = BcTensor(d.C, s, bld);
    p.D = VecTensor(d.D);
    p.z = SeqTensor(d.z, s, bld);
    p.delta_bias = VecTensor(d.delta_bias);
    p.h0 = StateTensor(d.h0, s);
    p.y = SeqOut(d.y, s, bld);
    p.h_last = StateOut(d.h_last, s);
    return p;
}
struct GradData {
    const void *dy = nullptr, *dh_last = nullptr;
    void *du = nullptr, *ddelta = nullptr, *dA = nullptr, *dB = nullptr, *dC = nullptr, *dD = nullptr, *dz = nullptr,
         *ddelta_bias = nullptr, *dh0 = nullptr;
};
inline selscan_grads ScanGrads(const GradData &d, const Sizes &s, bool bld) {
    selscan_grads g = {};
    g.dy = SeqTensor(d.dy, s, bld);
    g.dh_last = StateTensor(d.dh_last, s);
    g.du = SeqOut(d.du, s, bld);
    g.ddelta = SeqOut(d.ddelta, s, bld);
    g.dA = MatOut(d.dA, s);
    g.dB = BcOut(d.dB, s, bld);
    g.dC = BcOut(d.dC, s, bld);
    g.dD = VecOut(d.dD);
    g.dz = SeqOut(d.dz, s, bld);
    g.ddelta_bias = VecOut(d.ddelta_bias);
    g.dh0 = StateOut(d.dh0, s);
    return g;
}

// The decode step (SelscanStep): state (n_cache, dim, N) float32, x / dt / z / out (batch, dim),
// B / C (batch, G, N) (one group: (batch, N), the group axis never stepped over), A (dim, N),
// D / dt_bias (dim). s: batch, dim, N, G, rows = n_cache.
struct StepData {
    const void *x = nullptr, *dt = nullptr, *A = nullptr, *B = nullptr, *C = nullptr, *D = nullptr, *z = nullptr,
               *dt_bias = nullptr;
    const int32_t *state_index = nullptr;
    void *state = nullptr, *out = nullptr;
};
inline selscan_step_problem StepProblem(const StepData &d, const Sizes &s, selscan_dtype dtype, bool softplus) {
    selscan_step_problem p = {};
    p.batch = s.batch;
    p.dim = s.dim;
    p.dstate = s.N;
    p.n_groups = s.G;
    p.n_cache = s.rows;
    p.dtype = dtype;
    p.flags = softplus ? SELSCAN_DELTA_SOFTPLUS : 0u;
    p.state_index = d.state_index;
    auto row = [&](auto t, auto data) { // (batch, dim)
        t.data = data;
        t.stride[0] = s.dim;
        t.stride[1] = 1;
        return t;
    };
    auto bc = [&](const void *data) { // (batch, G, N)
        selscan_tensor t = {};
        t.data = data;
        t.stride[0] = s.G * s.N;
        t.stride[1] = s.N;
        t.stride[2] = 1;
        return t;
    };
    p.state = StateOut(d.state, s);
    p.u = row(selscan_tensor{}, d.x);
    p.delta = row(selscan_tensor{}, d.dt);
    p.A = MatTensor(d.A, s);
    p.B = bc(d.B);
    p.C = bc(d.C);
    p.D = VecTensor(d.D);
    p.z = row(selscan_tensor{}, d.z);
    p.delta_bias = VecTensor(d.dt_bias);
    p.y = row(selscan_out_tensor{}, d.out);
    return p;
}

} // namespace selscan_tf

#endif // SELSCAN_TF_LAYOUT_H_
