// gpu_check.cu - runs the TensorFlow op's CUDA translation unit (selscan_tf_kernels.cu, through
// the same wrappers selscan_tf_gpu.cc calls) with the op's own stride mapping
// (selscan_tf_layout.h) on a GPU, without TensorFlow, and compares every output with selscan's
// CPU path on the same host data. Both layouts, all three dtypes, every optional operand.
// Then times a Mamba-sized case in both layouts. make tf-gpu-check builds and runs it.
//
// What this does NOT run: the TensorFlow glue of selscan_tf_gpu.cc (OpKernel, allocate_temp,
// TF's stream), which needs a CUDA build of TensorFlow.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define SELSCAN_IMPLEMENTATION  // the CPU reference side, in this program
#include "selscan.h"
#include "selscan_tf_cuda.h"
#include "selscan_tf_layout.h"

using namespace selscan_tf;

static int g_pass = 0, g_fail = 0;

#define CUDA_OK(x)                                                                          \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                                         \
    }                                                                                       \
  } while (0)

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float Uniform() {  // [0, 1)
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<float>((g_rng >> 40) & 0xffffff) / 16777216.0f;
}
static float Normalish() { return (Uniform() + Uniform() + Uniform() - 1.5f) * 2.0f; }

// A tensor living twice: host bytes and device bytes.
struct Buf {
  std::vector<unsigned char> host;
  void* dev = nullptr;
  selscan_dtype dt = SELSCAN_F32;
  int64_t n = 0;
  size_t esz() const { return dt == SELSCAN_F32 ? 4 : 2; }
  void Alloc(int64_t count, selscan_dtype t) {
    n = count;
    dt = t;
    host.assign(static_cast<size_t>(n) * esz(), 0);
    CUDA_OK(cudaMalloc(&dev, host.size() ? host.size() : 1));
  }
  float Get(int64_t i) const {
    if (dt == SELSCAN_F32) { float f; std::memcpy(&f, &host[i * 4], 4); return f; }
    uint16_t h;
    std::memcpy(&h, &host[i * 2], 2);
    return dt == SELSCAN_F16 ? selscan_f16_to_f32(h) : selscan_bf16_to_f32(h);
  }
  void Set(int64_t i, float v) {
    if (dt == SELSCAN_F32) { std::memcpy(&host[i * 4], &v, 4); return; }
    uint16_t h = dt == SELSCAN_F16 ? selscan_f32_to_f16(v) : selscan_f32_to_bf16(v);
    std::memcpy(&host[i * 2], &h, 2);
  }
  void Fill(float lo, float hi, bool normal) {
    for (int64_t i = 0; i < n; i++) Set(i, normal ? lo + (hi - lo) * 0.5f * (Normalish() + 1.0f) : lo + (hi - lo) * Uniform());
  }
  void Upload(cudaStream_t s) { CUDA_OK(cudaMemcpyAsync(dev, host.data(), host.size(), cudaMemcpyHostToDevice, s)); }
  void Download(std::vector<unsigned char>* out, cudaStream_t s) const {
    out->resize(host.size());
    CUDA_OK(cudaMemcpyAsync(out->data(), dev, host.size(), cudaMemcpyDeviceToHost, s));
  }
  void Poison(cudaStream_t s) { CUDA_OK(cudaMemsetAsync(dev, 0x7f, host.size(), s)); }
  ~Buf() { if (dev) cudaFree(dev); }
};

static double RelErr(const Buf& ref, const std::vector<unsigned char>& got) {
  Buf g;
  g.dt = ref.dt;
  g.n = ref.n;
  g.host = got;
  double num = 0, den = 0;
  for (int64_t i = 0; i < ref.n; i++) {
    const double a = g.Get(i), b = ref.Get(i);
    if (!std::isfinite(a)) return INFINITY;
    num += (a - b) * (a - b);
    den += b * b;
  }
  return std::sqrt(num) / (den > 0 ? std::sqrt(den) : 1.0);
}

static void Check(const char* what, const std::string& name, double err, double tol) {
  const bool ok = err <= tol;
  (ok ? g_pass : g_fail)++;
  std::printf("%s  %-44s %-8s rel err %.2e (tol %.0e)\n", ok ? "ok  " : "FAIL", name.c_str(), what, err, tol);
}

static const char* DtName(selscan_dtype t) { return t == SELSCAN_F32 ? "f32" : t == SELSCAN_F16 ? "f16" : "bf16"; }

// One case: forward and backward on the GPU vs the CPU, in the op's layout.
static void RunCase(Sizes s, bool bld, selscan_dtype dt, bool all_options, bool use_ck, cudaStream_t stream) {
  const int64_t seq = s.batch * s.dim * s.L, bc = s.batch * s.G * s.N * s.L, st = s.batch * s.dim * s.N;
  const std::string name = std::string(bld ? "BLD " : "BDL ") + DtName(dt) + (all_options ? " all-options" : " plain") +
                           (use_ck ? " ckpt " : " ") + s.ToString();
  Buf u, delta, A, B, C, D, z, bias, h0, y, hl, dy, dhl;
  u.Alloc(seq, dt); u.Fill(-1, 1, true);
  delta.Alloc(seq, dt);  // around softplus' knee with softplus; a positive step without
  if (all_options) delta.Fill(-3, 1, false);
  else delta.Fill(0.05f, 0.6f, false);
  A.Alloc(s.dim * s.N, SELSCAN_F32);
  for (int64_t i = 0; i < A.n; i++) A.Set(i, -std::exp(0.5f * Normalish()));
  B.Alloc(bc, dt); B.Fill(-1, 1, true);
  C.Alloc(bc, dt); C.Fill(-1, 1, true);
  D.Alloc(s.dim, SELSCAN_F32); D.Fill(-1, 1, true);
  z.Alloc(seq, dt); z.Fill(-2, 2, true);
  bias.Alloc(s.dim, SELSCAN_F32); bias.Fill(-0.5f, 0.5f, false);
  h0.Alloc(st, SELSCAN_F32); h0.Fill(-1, 1, true);
  y.Alloc(seq, dt);
  hl.Alloc(st, SELSCAN_F32);
  dy.Alloc(seq, dt); dy.Fill(-1, 1, true);
  dhl.Alloc(st, SELSCAN_F32); dhl.Fill(-1, 1, true);
  for (Buf* b : {&u, &delta, &A, &B, &C, &D, &z, &bias, &h0, &dy, &dhl}) b->Upload(stream);

  auto problem = [&](bool dev) {
    auto P = [&](Buf& b) -> void* { return dev ? b.dev : static_cast<void*>(b.host.data()); };
    selscan_problem p = {};
    p.batch = s.batch; p.dim = s.dim; p.seqlen = s.L; p.dstate = s.N; p.n_groups = s.G;
    p.dtype = dt;
    p.flags = all_options ? SELSCAN_DELTA_SOFTPLUS : 0u;
    p.u = SeqTensor(P(u), s, bld);
    p.delta = SeqTensor(P(delta), s, bld);
    p.A = MatTensor(P(A), s);
    p.B = BcTensor(P(B), s, bld);
    p.C = BcTensor(P(C), s, bld);
    p.D = VecTensor(all_options ? P(D) : nullptr);
    p.z = SeqTensor(all_options ? P(z) : nullptr, s, bld);
    p.delta_bias = VecTensor(all_options ? P(bias) : nullptr);
    p.h0 = StateTensor(all_options ? P(h0) : nullptr, s);
    p.y = SeqOut(P(y), s, bld);
    p.h_last = StateOut(all_options ? P(hl) : nullptr, s);
    return p;
  };

  // ---- forward
  selscan_problem pc = problem(false), pg = problem(true);
  size_t wc = 0, wg = 0;
  size_t ckb = 0;  // the forward's checkpoint, handed to the backward (as the op does)
  float* ck = nullptr;
  if (use_ck) {
    if (CudaCheckpointSize(&pg, &ckb) != SELSCAN_OK) { Check("setup", name, INFINITY, 0); return; }
    CUDA_OK(cudaMalloc(&ck, ckb));
  }
  if (selscan_workspace_size(&pc, nullptr, &wc) != SELSCAN_OK ||
      CudaWorkspaceSize(&pg, nullptr, use_ck, &wg) != SELSCAN_OK) {
    Check("setup", name, INFINITY, 0);
    return;
  }
  void* wsc = wc ? std::aligned_alloc(SELSCAN_WORKSPACE_ALIGN, (wc + 63) / 64 * 64) : nullptr;
  void* wsg = nullptr;
  if (wg) CUDA_OK(cudaMalloc(&wsg, wg));
  selscan_status stc = selscan_forward_cpu(&pc, wsc, wc);
  y.Poison(stream);
  hl.Poison(stream);
  const char* cuda_text = "";
  selscan_status stg = CudaForward(&pg, wsg, wg, ck, ckb, stream, &cuda_text);
  if (stc != SELSCAN_OK || stg != SELSCAN_OK) {
    std::printf("forward status cpu %s, gpu %s %s\n", selscan_status_string(stc), selscan_status_string(stg), cuda_text);
    Check("forward", name, INFINITY, 0);
  } else {
    std::vector<unsigned char> yg, hg;
    y.Download(&yg, stream);
    hl.Download(&hg, stream);
    CUDA_OK(cudaStreamSynchronize(stream));
    const double tol = dt == SELSCAN_F32 ? 1e-5 : dt == SELSCAN_F16 ? 3e-3 : 1e-2;
    Check("y", name, RelErr(y, yg), tol);
    if (all_options) Check("h_last", name, RelErr(hl, hg), 1e-5);
  }
  std::free(wsc);
  if (wsg) cudaFree(wsg);

  // ---- backward (every gradient)
  Buf du, dd, dA, dB, dC, dD, dz, dbias, dh0;
  du.Alloc(seq, dt); dd.Alloc(seq, dt); dA.Alloc(s.dim * s.N, SELSCAN_F32); dB.Alloc(bc, dt); dC.Alloc(bc, dt);
  dD.Alloc(s.dim, SELSCAN_F32); dz.Alloc(seq, dt); dbias.Alloc(s.dim, SELSCAN_F32); dh0.Alloc(st, SELSCAN_F32);
  auto grads = [&](bool dev) {
    auto P = [&](Buf& b) -> void* { return dev ? b.dev : static_cast<void*>(b.host.data()); };
    selscan_grads g = {};
    g.dy = SeqTensor(P(dy), s, bld);
    g.dh_last = StateTensor(all_options ? P(dhl) : nullptr, s);
    g.du = SeqOut(P(du), s, bld);
    g.ddelta = SeqOut(P(dd), s, bld);
    g.dA = MatOut(P(dA), s);
    g.dB = BcOut(P(dB), s, bld);
    g.dC = BcOut(P(dC), s, bld);
    g.dD = VecOut(all_options ? P(dD) : nullptr);
    g.dz = SeqOut(all_options ? P(dz) : nullptr, s, bld);
    g.ddelta_bias = VecOut(all_options ? P(dbias) : nullptr);
    g.dh0 = StateOut(all_options ? P(dh0) : nullptr, s);
    return g;
  };
  pc = problem(false);
  pg = problem(true);
  pc.y = SeqOut(nullptr, s, bld);
  pg.y = SeqOut(nullptr, s, bld);
  pc.h_last = StateOut(nullptr, s);
  pg.h_last = StateOut(nullptr, s);
  selscan_grads gc = grads(false), gg = grads(true);
  if (selscan_workspace_size(&pc, &gc, &wc) != SELSCAN_OK || CudaWorkspaceSize(&pg, &gg, use_ck, &wg) != SELSCAN_OK) {
    Check("setup bwd", name, INFINITY, 0);
    return;
  }
  wsc = wc ? std::aligned_alloc(SELSCAN_WORKSPACE_ALIGN, (wc + 63) / 64 * 64) : nullptr;
  wsg = nullptr;
  if (wg) CUDA_OK(cudaMalloc(&wsg, wg));
  stc = selscan_backward_cpu(&pc, &gc, wsc, wc);
  for (Buf* b : {&du, &dd, &dA, &dB, &dC, &dD, &dz, &dbias, &dh0}) b->Poison(stream);
  stg = CudaBackward(&pg, &gg, wsg, wg, ck, ckb, stream, &cuda_text);
  if (stc != SELSCAN_OK || stg != SELSCAN_OK) {
    std::printf("backward status cpu %s, gpu %s %s\n", selscan_status_string(stc), selscan_status_string(stg), cuda_text);
    Check("backward", name, INFINITY, 0);
  } else {
    const double tol_t = dt == SELSCAN_F32 ? 1e-4 : dt == SELSCAN_F16 ? 5e-3 : 2e-2;
    const double tol_f = dt == SELSCAN_F32 ? 1e-4 : 5e-3;  // f32 sums of T-rounded terms
    struct G { const char* n; Buf* b; bool t; bool opt; } gs[] = {
        {"du", &du, true, false}, {"ddelta", &dd, true, false}, {"dA", &dA, false, false}, {"dB", &dB, true, false},
        {"dC", &dC, true, false}, {"dD", &dD, false, true}, {"dz", &dz, true, true}, {"ddelta_bias", &dbias, false, true},
        {"dh0", &dh0, false, true}};
    std::vector<std::vector<unsigned char>> got(9);
    for (int i = 0; i < 9; i++) gs[i].b->Download(&got[i], stream);
    CUDA_OK(cudaStreamSynchronize(stream));
    for (int i = 0; i < 9; i++)
      if (!gs[i].opt || all_options) Check(gs[i].n, name, RelErr(*gs[i].b, got[i]), gs[i].t ? tol_t : tol_f);
  }
  std::free(wsc);
  if (wsg) cudaFree(wsg);
  if (ck) cudaFree(ck);
}

// Times forward and backward of a Mamba-sized case in one layout (device buffers, no checks).
static void TimeCase(Sizes s, bool bld, selscan_dtype dt, cudaStream_t stream) {
  const int64_t seq = s.batch * s.dim * s.L, bc = s.batch * s.G * s.N * s.L, esz = dt == SELSCAN_F32 ? 4 : 2;
  void *u, *delta, *A, *B, *C, *D, *z, *bias, *y, *dy, *du, *dd, *dA, *dB, *dC, *dD, *dz, *dbias;
  for (void** p : {&u, &delta, &z, &y, &dy, &du, &dd, &dz}) CUDA_OK(cudaMalloc(p, seq * esz));
  for (void** p : {&B, &C, &dB, &dC}) CUDA_OK(cudaMalloc(p, bc * esz));
  for (void** p : {&A, &dA}) CUDA_OK(cudaMalloc(p, s.dim * s.N * 4));
  for (void** p : {&D, &bias, &dD, &dbias}) CUDA_OK(cudaMalloc(p, s.dim * 4));
  for (void* p : {u, delta, z, dy, B, C}) CUDA_OK(cudaMemsetAsync(p, 0x3c, (p == B || p == C ? bc : seq) * esz, stream));
  std::vector<float> a(s.dim * s.N, -1.0f), v(s.dim, 0.5f);
  CUDA_OK(cudaMemcpyAsync(A, a.data(), a.size() * 4, cudaMemcpyHostToDevice, stream));
  CUDA_OK(cudaMemcpyAsync(D, v.data(), v.size() * 4, cudaMemcpyHostToDevice, stream));
  CUDA_OK(cudaMemcpyAsync(bias, v.data(), v.size() * 4, cudaMemcpyHostToDevice, stream));
  selscan_problem p = {};
  p.batch = s.batch; p.dim = s.dim; p.seqlen = s.L; p.dstate = s.N; p.n_groups = s.G;
  p.dtype = dt;
  p.flags = SELSCAN_DELTA_SOFTPLUS;
  p.u = SeqTensor(u, s, bld); p.delta = SeqTensor(delta, s, bld); p.A = MatTensor(A, s);
  p.B = BcTensor(B, s, bld); p.C = BcTensor(C, s, bld); p.D = VecTensor(D); p.z = SeqTensor(z, s, bld);
  p.delta_bias = VecTensor(bias); p.y = SeqOut(y, s, bld);
  selscan_grads g = {};
  g.dy = SeqTensor(dy, s, bld); g.du = SeqOut(du, s, bld); g.ddelta = SeqOut(dd, s, bld);
  g.dA = MatOut(dA, s); g.dB = BcOut(dB, s, bld); g.dC = BcOut(dC, s, bld); g.dD = VecOut(dD);
  g.dz = SeqOut(dz, s, bld); g.ddelta_bias = VecOut(dbias);
  size_t wf = 0, wb = 0, wfc = 0, wbc = 0, ckb = 0;
  selscan_problem pb = p;
  pb.y = SeqOut(nullptr, s, bld);
  if (CudaWorkspaceSize(&p, nullptr, false, &wf) != SELSCAN_OK || CudaWorkspaceSize(&pb, &g, false, &wb) != SELSCAN_OK ||
      CudaWorkspaceSize(&p, nullptr, true, &wfc) != SELSCAN_OK || CudaWorkspaceSize(&pb, &g, true, &wbc) != SELSCAN_OK ||
      CudaCheckpointSize(&p, &ckb) != SELSCAN_OK) {
    std::printf("timing setup failed\n");
    g_fail++;
    return;
  }
  size_t wmax = wf;
  for (size_t w : {wb, wfc, wbc}) wmax = w > wmax ? w : wmax;
  void* ws = nullptr;
  float* ck = nullptr;
  CUDA_OK(cudaMalloc(&ws, wmax + 1));
  CUDA_OK(cudaMalloc(&ck, ckb));
  cudaEvent_t e0, e1;
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));
  float ms[4] = {0, 0, 0, 0};  // forward, backward, forward + checkpoint, backward from the checkpoint
  const int reps = 5;
  for (int pass = 0; pass < 4; pass++) {
    for (int r = -1; r < reps; r++) {  // r = -1: warm-up
      if (r == 0) CUDA_OK(cudaEventRecord(e0, stream));
      selscan_status st;
      switch (pass) {
        case 0: st = CudaForward(&p, ws, wf, nullptr, 0, stream, nullptr); break;
        case 1: st = CudaBackward(&pb, &g, ws, wb, nullptr, 0, stream, nullptr); break;
        case 2: st = CudaForward(&p, ws, wfc, ck, ckb, stream, nullptr); break;
        default: st = CudaBackward(&pb, &g, ws, wbc, ck, ckb, stream, nullptr); break;
      }
      if (st != SELSCAN_OK) { std::printf("timing: %s\n", selscan_status_string(st)); g_fail++; return; }
    }
    CUDA_OK(cudaEventRecord(e1, stream));
    CUDA_OK(cudaEventSynchronize(e1));
    CUDA_OK(cudaEventElapsedTime(&ms[pass], e0, e1));
    ms[pass] /= reps;
  }
  std::printf("time  %-4s %-4s %s: forward %.3f ms, backward %.3f ms | with checkpoint (%.1f MB): forward %.3f ms, "
              "backward %.3f ms\n", bld ? "BLD" : "BDL", DtName(dt), s.ToString().c_str(), ms[0], ms[1], ckb / 1e6,
              ms[2], ms[3]);
  cudaFree(ck);
  for (void* q : {u, delta, A, B, C, D, z, bias, y, dy, du, dd, dA, dB, dC, dD, dz, dbias, ws}) cudaFree(q);
}

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("skipped: no GPU\n0 passed, 0 failed\n");
    return 0;
  }
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  cudaStream_t stream;  // a non-default, non-blocking stream, as TensorFlow's compute stream is
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const Sizes cases[] = {
      {2, 8, 33, 4, 2},     // small, 2 groups
      {3, 130, 150, 16, 1},  // dim past 128, L past a 64-step chunk
      {1, 6, 1, 3, 3},      // L = 1
      {2, 64, 300, 8, 4},
  };
  for (const Sizes& s : cases)
    for (bool bld : {true, false})
      for (selscan_dtype dt : {SELSCAN_F32, SELSCAN_F16, SELSCAN_BF16})
        for (bool all : {true, false})
          for (bool use_ck : {false, true}) RunCase(s, bld, dt, all, use_ck, stream);
  const Sizes big = {8, 3072, 2048, 16, 1};  // lm-train
  for (selscan_dtype dt : {SELSCAN_F32, SELSCAN_BF16})
    for (bool bld : {true, false}) TimeCase(big, bld, dt, stream);
  CUDA_OK(cudaStreamDestroy(stream));
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
