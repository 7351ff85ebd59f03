// binding_layer.cpp: bindings/common/selscan_binding.h, the layer the framework bindings share,
// compiled alone (C++17, no framework) and run: operand strides and their refusals, the parts
// runner's first error whatever the pool's order, the checkpoint policy the library answers, and
// the error kinds and messages with a per-op name map. Exits 1 on the first failure.
#define SELSCAN_IMPLEMENTATION
#include "../../selscan.h"
#include "../../bindings/common/selscan_binding.h"
#include "../../bindings/common/selscan_binding_cuda.h"  // the CUDA shim's declarations: no CUDA header needed

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace bind = selscan_binding;

static int failures = 0;
#define EXPECT(cond)                                                   \
  do {                                                                 \
    if (!(cond)) {                                                     \
      std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);     \
      failures++;                                                      \
    }                                                                  \
  } while (0)

int main() {
  // operands: a size-1 dim with stride 0 gets a non-zero stride; a full broadcast is found
  float buf[64] = {0};
  {
    const int64_t sz[3] = {2, 1, 4}, st[3] = {4, 0, 1};
    bool all0 = true;
    const selscan_tensor t = bind::Operand<selscan_tensor>(buf, 3, sz, st, &all0);
    EXPECT(!all0 && t.stride[0] == 4 && t.stride[1] == 8 && t.stride[2] == 1 && t.data == buf);
  }
  {
    const int64_t sz[2] = {3, 5}, st[2] = {0, 0}, one[2] = {1, 1};
    EXPECT(bind::FullBroadcast(2, sz, st));
    EXPECT(!bind::FullBroadcast(2, one, st));  // one element: nothing to copy
    selscan_out_tensor o = bind::Absent<selscan_out_tensor>();
    EXPECT(!bind::OutOperand<selscan_out_tensor>(buf, 2, sz, st, &o) && o.data == nullptr);  // refused, untouched
    EXPECT(bind::OutOperand<selscan_out_tensor>(buf, 2, one, st, &o) && o.data == buf);
    const int64_t ex[2] = {3, 0}, exs[2] = {5, 1};
    EXPECT(bind::SelfOverlapping(2, sz, st));
    EXPECT(!bind::SelfOverlapping(2, ex, st));  // empty
    EXPECT(!bind::SelfOverlapping(2, sz, exs));
  }
  // ElementsMeet (an input read through a copy against the in-place output) against the bytes
  // each covers, marked: random views of one buffer (interleaved, broadcast, 1-byte / 2-byte /
  // 4-byte elements, unsorted strides)
  {
    unsigned r = 12345u;
    auto rnd = [&](int n) { r = r * 1103515245u + 12345u; return static_cast<int64_t>((r >> 8) % n); };
    unsigned char mem[4096];
    int mismatches = 0;
    for (int trial = 0; trial < 20000; trial++) {
      int64_t es[2], nd[2], sz[2][3], st[2][3], off[2];
      std::vector<int> cover(sizeof mem, 0);
      for (int t = 0; t < 2; t++) {
        es[t] = int64_t(1) << rnd(3);
        nd[t] = 1 + rnd(3);
        for (int i = 0; i < nd[t]; i++) {
          sz[t][i] = rnd(4) + (rnd(8) == 0 ? 0 : 1);
          st[t][i] = rnd(5) == 0 ? 0 : 1 + rnd(12);
        }
        off[t] = rnd(64) * es[t];
      }
      for (int t = 0; t < 2; t++) {
        for (int64_t i0 = 0; i0 < sz[t][0]; i0++)
          for (int64_t i1 = 0; i1 < (nd[t] > 1 ? sz[t][1] : 1); i1++)
            for (int64_t i2 = 0; i2 < (nd[t] > 2 ? sz[t][2] : 1); i2++) {
              const int64_t e = i0 * st[t][0] + (nd[t] > 1 ? i1 * st[t][1] : 0) + (nd[t] > 2 ? i2 * st[t][2] : 0);
              for (int64_t k = 0; k < es[t]; k++) cover[off[t] + e * es[t] + k] |= 1 << t;
            }
      }
      bool want = false;
      for (int v : cover) want = want || v == 3;
      const bool got = bind::ElementsMeet(mem + off[0], es[0], nd[0], sz[0], st[0], mem + off[1], es[1], nd[1], sz[1],
                                          st[1]);
      mismatches += got != want;
    }
    EXPECT(mismatches == 0);
    const int64_t one[1] = {1}, z[1] = {0}, ssz[3] = {2, 3, 4}, sst[3] = {15, 5, 1};  // a state with a gap each row
    EXPECT(bind::ElementsMeet(buf + 7, 4, 1, one, z, buf, 4, 3, ssz, sst));    // its element 7
    EXPECT(!bind::ElementsMeet(buf + 4, 4, 1, one, z, buf, 4, 3, ssz, sst));   // the gap after row 0
    EXPECT(!bind::ElementsMeet(buf + 30, 4, 1, one, z, buf, 4, 3, ssz, sst));  // past its end
  }
  // the problem header and the empty-problem rule
  bind::Sizes s;
  s.batch = 1; s.dim = 2; s.L = 70; s.N = 4; s.G = 1; s.rows = 1; s.fixed_C = true;
  selscan_problem p = bind::MakeProblem(s, SELSCAN_F32, true);
  EXPECT(p.batch == 1 && p.dim == 2 && p.seqlen == 70 && p.dstate == 4 && p.n_groups == 1);
  EXPECT(p.flags == (SELSCAN_DELTA_SOFTPLUS | SELSCAN_FIXED_C) && p.cu_seqlens == nullptr);
  EXPECT(!s.Empty() && s.StatesOk());
  bind::Sizes e = s;
  e.L = 0; e.N = 0;
  EXPECT(e.Empty() && e.StatesOk());
  e.L = 70;
  EXPECT(!e.StatesOk());
  // the checkpoint policy on a valid problem (dense inputs, fixed C): asked of the library
  std::vector<float> u(140, 0.5f), dl(140, 0.1f), A(2 * 65, -1.0f), B(2 * 65 * 70, 0.2f), C(2 * 65, 0.3f), y(140);
  p.flags = SELSCAN_FIXED_C;
  p.u.data = u.data(); p.delta.data = dl.data(); p.A.data = A.data(); p.B.data = B.data(); p.C.data = C.data();
  p.y.data = y.data();
  size_t bytes = 1;
  EXPECT(bind::CpuCheckpointBytes(&p, false, &bytes) == SELSCAN_OK && bytes == 0);
  EXPECT(bind::CpuCheckpointBytes(&p, true, &bytes) == SELSCAN_OK && bytes > 0);
  const size_t n4 = bytes;
  EXPECT(bind::CpuCheckpointToRead(&p, static_cast<int64_t>(n4 / 4), &bytes) == SELSCAN_OK && bytes == n4);
  EXPECT(bind::CpuCheckpointToRead(&p, static_cast<int64_t>(n4 / 4) + 1, &bytes) == SELSCAN_OK && bytes == 0);
  EXPECT(bind::CpuCheckpointToRead(&p, 0, &bytes) == SELSCAN_OK && bytes == 0);
  p.dstate = 65;  // the CPU backward reads none: none written
  EXPECT(selscan_checkpoint_used(&p) == 0);
  EXPECT(bind::CpuCheckpointBytes(&p, true, &bytes) == SELSCAN_OK && bytes == 0);
  p.dstate = 4;
  // the parts runner: the lowest failing part's status and diag, whatever order the pool runs
  auto reverse_pool = [](int64_t n, const auto& body) {
    for (int64_t i = n - 1; i >= 0; i--) body(i);
  };
  const bind::Result r = bind::RunParts(p, 5, reverse_pool, [](selscan_problem* q, int64_t i) {
    if (i == 2) { q->diag->operand = "u"; q->diag->rule = "overlaps y"; return SELSCAN_ERR_ALIAS; }
    if (i == 4) { q->diag->operand = "B"; q->diag->rule = "bad"; return SELSCAN_ERR_SHAPE; }
    return SELSCAN_OK;
  });
  EXPECT(r.status == SELSCAN_ERR_ALIAS && std::strcmp(r.diag.operand, "u") == 0);
  EXPECT(p.diag == nullptr);  // p itself untouched
  int ran = 0;
  EXPECT(bind::RunParts(p, 3, reverse_pool, [&](selscan_problem*, int64_t) { ran++; return SELSCAN_OK; }).ok() &&
         ran == 3);
  // a real part: the forward runs through the runner
  size_t ws_bytes = 0;
  EXPECT(bind::Call(p, [&](const selscan_problem* q) { return selscan_workspace_size_parts(q, nullptr, 2, &ws_bytes); })
             .ok());
  std::vector<unsigned char> ws(ws_bytes);
  EXPECT(bind::RunParts(p, 2, reverse_pool, [&](const selscan_problem* q, int64_t i) {
           return selscan_forward_cpu_part(q, i, 2, ws.data(), ws.size());
         }).ok());
  p.A.data = nullptr;  // a validation error comes back with selscan's diag
  const bind::Result bad = bind::Call(p, [&](const selscan_problem* q) { return selscan_workspace_size_parts(q, nullptr, 2, &ws_bytes); });
  EXPECT(!bad.ok() && bad.diag.operand && std::strcmp(bad.diag.operand, "A") == 0);
  // errors: kind and message, in the op's names
  static const bind::NameMap kStep[] = {{"u", "x"}, {"y", "out"}};
  const bind::Error err = bind::ErrorOf(r, "step (CPU)", bind::NamesOf(kStep));
  EXPECT(err.kind == bind::ErrorKind::kValue);
  EXPECT(err.message.find("selscan: step (CPU): ") == 0);
  EXPECT(err.message.find("[SELSCAN_ERR_ALIAS] (argument 'x': overlaps out)") != std::string::npos);
  EXPECT(bind::ErrorOf(SELSCAN_ERR_CUDA, "fwd", "", "batch=1", "oom").message.find(" (batch=1): oom") !=
         std::string::npos);
  EXPECT(bind::KindOf(SELSCAN_ERR_DTYPE) == bind::ErrorKind::kType);
  EXPECT(bind::KindOf(SELSCAN_ERR_UNSUPPORTED) == bind::ErrorKind::kNotImplemented);
  EXPECT(bind::KindOf(SELSCAN_ERR_CUDA) == bind::ErrorKind::kDevice);
  EXPECT(bind::ErrorOf(SELSCAN_OK, "fwd", "").ok());
  // host rules (cu_seqlens, state_batch_indices) where selscan is not called; the step's parts and names
  std::string rule;
  const int64_t good_cu[] = {0, 2, 2, 5}, bad_first[] = {1, 5}, bad_last[] = {0, 4}, bad_order[] = {0, 3, 2, 5};
  EXPECT(bind::OffsetsRule(good_cu, 4, 5, &rule) == SELSCAN_OK);
  EXPECT(bind::OffsetsRule(bad_first, 2, 5, &rule) == SELSCAN_ERR_SHAPE && rule.find("first offset") == 0);
  EXPECT(bind::OffsetsRule(bad_last, 2, 5, &rule) == SELSCAN_ERR_SHAPE && rule.find("last offset") == 0);
  EXPECT(bind::OffsetsRule(bad_order, 4, 5, &rule) == SELSCAN_ERR_SHAPE && rule.find("not increasing") == 0);
  const int32_t idx_ok[] = {2, -1, 0}, idx_range[] = {0, 3}, idx_twice[] = {1, -1, 1};
  EXPECT(bind::StateIndexRule(idx_ok, 3, 3, &rule) == SELSCAN_OK);
  EXPECT(bind::StateIndexRule(idx_range, 2, 3, &rule) == SELSCAN_ERR_SHAPE && rule.find("not below n_cache") == 0);
  EXPECT(bind::StateIndexRule(idx_twice, 3, 3, &rule) == SELSCAN_ERR_ALIAS && rule.find("row used twice") == 0);
  EXPECT(bind::StepParts(8, 2, 300) == 4 && bind::StepParts(3, 2, 300) == 3 && bind::StepParts(8, 0, 0) == 1);
  EXPECT(bind::NamesOf(bind::kStepNames).Of("state_index") == "state_batch_indices");
  std::printf("binding_layer: %s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
