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
#include "selscan_binding.h"  // bindings/common: the layer shared with the other bindings

namespace selscan_tf {

namespace bind = selscan_binding;

// Logical sizes of one call (the op has no packed sequences and no fixed B / C: rows = batch).
using Sizes = bind::Sizes;

// Element strides of each kind of operand, for its logical selscan shape. Inputs are
// selscan_tensor (const data), outputs selscan_out_tensor: the *Tensor functions make inputs, the
// *Out functions outputs, with the same strides.
template <typename Tn>
inline Tn SeqT(decltype(Tn::data) data, const Sizes& s, bool bld) {  // (batch, dim, L)
  Tn t = {};
  t.data = data;
  if (bld) { t.stride[0] = s.L * s.dim; t.stride[1] = 1; t.stride[2] = s.dim; }
  else { t.stride[0] = s.dim * s.L; t.stride[1] = s.L; t.stride[2] = 1; }
  return t;
}
template <typename Tn>
inline Tn BcT(decltype(Tn::data) data, const Sizes& s, bool bld) {  // (batch, G, N, L)
  Tn t = {};
  t.data = data;
  if (bld) { t.stride[0] = s.L * s.G * s.N; t.stride[1] = s.N; t.stride[2] = 1; t.stride[3] = s.G * s.N; }
  else { t.stride[0] = s.G * s.N * s.L; t.stride[1] = s.N * s.L; t.stride[2] = s.L; t.stride[3] = 1; }
  return t;
}
template <typename Tn>
inline Tn MatT(decltype(Tn::data) data, const Sizes& s) {  // (dim, N)
  Tn t = {};
  t.data = data;
  t.stride[0] = s.N; t.stride[1] = 1;
  return t;
}
template <typename Tn>
inline Tn VecT(decltype(Tn::data) data) {  // (dim)
  Tn t = {};
  t.data = data;
  t.stride[0] = 1;
  return t;
}
template <typename Tn>
inline Tn StateT(decltype(Tn::data) data, const Sizes& s) {  // (batch, dim, N)
  Tn t = {};
  t.data = data;
  t.stride[0] = s.dim * s.N; t.stride[1] = s.N; t.stride[2] = 1;
  return t;
}

inline selscan_tensor SeqTensor(const void* d, const Sizes& s, bool bld) { return SeqT<selscan_tensor>(d, s, bld); }
inline selscan_tensor BcTensor(const void* d, const Sizes& s, bool bld) { return BcT<selscan_tensor>(d, s, bld); }
inline selscan_tensor MatTensor(const void* d, const Sizes& s) { return MatT<selscan_tensor>(d, s); }
inline selscan_tensor VecTensor(const void* d) { return VecT<selscan_tensor>(d); }
inline selscan_tensor StateTensor(const void* d, const Sizes& s) { return StateT<selscan_tensor>(d, s); }
inline selscan_out_tensor SeqOut(void* d, const Sizes& s, bool bld) { return SeqT<selscan_out_tensor>(d, s, bld); }
inline selscan_out_tensor BcOut(void* d, const Sizes& s, bool bld) { return BcT<selscan_out_tensor>(d, s, bld); }
inline selscan_out_tensor MatOut(void* d, const Sizes& s) { return MatT<selscan_out_tensor>(d, s); }
inline selscan_out_tensor VecOut(void* d) { return VecT<selscan_out_tensor>(d); }
inline selscan_out_tensor StateOut(void* d, const Sizes& s) { return StateT<selscan_out_tensor>(d, s); }

// One call's operands in the op's layout: the data pointers (NULL: an absent optional operand, or
// an output not computed) -> selscan's problem and gradients. The op (selscan_tf_common.h's
// BuildProblem / BuildGrads) and gpu_check.cu both map through these.
struct ScanData {
  const void *u = nullptr, *delta = nullptr, *A = nullptr, *B = nullptr, *C = nullptr, *D = nullptr, *z = nullptr,
             *delta_bias = nullptr, *h0 = nullptr;
  void *y = nullptr, *h_last = nullptr;
};
inline selscan_problem ScanProblem(const ScanData& d, const Sizes& s, bool bld, selscan_dtype dtype, bool softplus) {
  selscan_problem p = bind::MakeProblem(s, dtype, softplus);
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
inline selscan_grads ScanGrads(const GradData& d, const Sizes& s, bool bld) {
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

}  // namespace selscan_tf

#endif  // SELSCAN_TF_LAYOUT_H_
