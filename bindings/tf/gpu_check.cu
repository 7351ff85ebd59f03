// gpu_check.cu - runs the TensorFlow op's CUDA translation unit (selscan_tf_kernels.cu, through
// the bindings' shared CUDA shim that selscan_tf_gpu.cc calls, bindings/common/selscan_binding.h >>bind-cuda)
// with the op's own stride mapping (selscan_tf_layout.h's ScanProblem / ScanGrads) on a GPU,
// without TensorFlow, and compares every output with selscan's CPU path on the same host data.
// Both layouts, all three dtypes, every optional operand. The workspace comes as the op gets it:
// through the shim's workspace_alloc (here cudaMalloc of exactly the bytes asked for, where the op
// uses allocate_temp); a refused allocation must give SELSCAN_ERR_WORKSPACE with every output
// untouched. Then times a Mamba-sized case in both layouts. make tf-gpu-check builds and runs it.
//
// What this does NOT run: the TensorFlow glue of selscan_tf_gpu.cc (OpKernel, allocate_temp,
// TF's stream), which needs a CUDA build of TensorFlow.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#define SELSCAN_IMPLEMENTATION // the CPU reference side, in this program
#include "selscan.h"
#include "selscan_binding.h"
#include "selscan_tf_layout.h"
#include "tests/tol_lowp.h" // tc_tol_lowp: the f16 / bf16 tolerance rule of the C / CUDA suites

using namespace selscan_tf;

static int g_pass = 0, g_fail = 0;

#define CUDA_OK(x)                                                                               \
    do {                                                                                         \
        cudaError_t e_ = (x);                                                                    \
        if (e_ != cudaSuccess) {                                                                 \
            std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
            std::exit(2);                                                                        \
        }                                                                                        \
    } while (0)

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float Uniform() { // [0, 1)
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((g_rng >> 40) & 0xffffff) / 16777216.0f;
}
static float Normalish() { return (Uniform() + Uniform() + Uniform() - 1.5f) * 2.0f; }

// A tensor living twice: host bytes and device bytes.
struct Buf {
    std::vector<unsigned char> host;
    void *dev = nullptr;
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
        if (dt == SELSCAN_F32) {
            float f;
            std::memcpy(&f, &host[i * 4], 4);
            return f;
        }
        uint16_t h;
        std::memcpy(&h, &host[i * 2], 2);
        return dt == SELSCAN_F16 ? selscan_f16_to_f32(h) : selscan_bf16_to_f32(h);
    }
    void Set(int64_t i, float v) {
        if (dt == SELSCAN_F32) {
            std::memcpy(&host[i * 4], &v, 4);
            return;
        }
        uint16_t h = dt == SELSCAN_F16 ? selscan_f32_to_f16(v) : selscan_f32_to_bf16(v);
        std::memcpy(&host[i * 2], &h, 2);
    }
    void Fill(float lo, float hi, bool normal) {
        for (int64_t i = 0; i < n; i++)
            Set(i, normal ? lo + (hi - lo) * 0.5f * (Normalish() + 1.0f) : lo + (hi - lo) * Uniform());
    }
    void Upload(cudaStream_t s) { CUDA_OK(cudaMemcpyAsync(dev, host.data(), host.size(), cudaMemcpyHostToDevice, s)); }
    void Download(std::vector<unsigned char> *out, cudaStream_t s) const {
        out->resize(host.size());
        CUDA_OK(cudaMemcpyAsync(out->data(), dev, host.size(), cudaMemcpyDeviceToHost, s));
    }
    void Poison(cudaStream_t s) { CUDA_OK(cudaMemsetAsync(dev, 0x7f, host.size(), s)); }
    ~Buf() {
        if (dev) cudaFree(dev);
    }
};

static double RelErr(const Buf &ref, const std::vector<unsigned char> &got) {
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

static void Check(const char *what, const std::string &name, double err, double tol) {
    const bool ok = err <= tol;
    (ok ? g_pass : g_fail)++;
    std::printf("%s  %-44s %-8s rel err %.2e (tol %.0e)\n", ok ? "ok  " : "FAIL", name.c_str(), what, err, tol);
}

static const char *DtName(selscan_dtype t) { return t == SELSCAN_F32 ? "f32" : t == SELSCAN_F16 ? "f16" : "bf16"; }

// The workspace as the op gets it (the shim's workspace_alloc): device memory of the bytes selscan
// asks for, kept until the call's kernels have run (a fresh Workspace a call here; TimeCase reuses
// one, growing it, as a caching allocator would). refuse: answer NULL, as allocate_temp does when
// the device is out of memory.
struct Workspace {
    void *ptr = nullptr;
    size_t cap = 0;
    int calls = 0;
    bool refuse = false;
    static void *Alloc(void *self, size_t bytes) {
        auto *w = static_cast<Workspace *>(self);
        w->calls++;
        if (w->refuse) return nullptr;
        if (bytes > w->cap) {
            if (w->ptr) CUDA_OK(cudaFree(w->ptr));
            CUDA_OK(cudaMalloc(&w->ptr, bytes));
            w->cap = bytes;
        }
        return w->ptr;
    }
    selscan_binding_cuda_call Call(cudaStream_t stream) {
        selscan_binding_cuda_call c = {};
        c.stream = stream;
        c.workspace_alloc = &Workspace::Alloc;
        c.workspace_ctx = this;
        return c;
    }
    ~Workspace() {
        if (ptr) cudaFree(ptr);
    }
};

// The refused workspace (NULL from workspace_alloc): SELSCAN_ERR_WORKSPACE, nothing launched (the
// poisoned outputs unchanged); or OK where the call needed no workspace (never asked).
static void CheckRefused(const char *what, const std::string &name, selscan_status st, const Workspace &ws,
                         std::initializer_list<const Buf *> outs, cudaStream_t stream) {
    bool untouched = true;
    for (const Buf *b : outs) {
        std::vector<unsigned char> got;
        b->Download(&got, stream);
        CUDA_OK(cudaStreamSynchronize(stream));
        for (unsigned char c : got) untouched = untouched && c == 0x7f;
    }
    const bool ok = ws.calls == 0 ? st == SELSCAN_OK : ws.calls == 1 && st == SELSCAN_ERR_WORKSPACE && untouched;
    (ok ? g_pass : g_fail)++;
    std::printf("%s  %-44s %-8s workspace refused: %s, asked %d time(s), outputs %s\n", ok ? "ok  " : "FAIL",
                name.c_str(), what, selscan_status_name(st), ws.calls, untouched ? "untouched" : "WRITTEN");
}

// The operands of one case, where they live (host or device bytes of the same buffers).
static ScanData ScanOf(bool dev, bool all_options, Buf &u, Buf &delta, Buf &A, Buf &B, Buf &C, Buf &D, Buf &z,
                       Buf &bias, Buf &h0, Buf *y, Buf *hl) {
    auto P = [&](Buf &b) -> void * { return dev ? b.dev : static_cast<void *>(b.host.data()); };
    ScanData d;
    d.u = P(u);
    d.delta = P(delta);
    d.A = P(A);
    d.B = P(B);
    d.C = P(C);
    if (all_options) {
        d.D = P(D);
        d.z = P(z);
        d.delta_bias = P(bias);
        d.h0 = P(h0);
    }
    d.y = y ? P(*y) : nullptr;
    d.h_last = hl && all_options ? P(*hl) : nullptr;
    return d;
}

// One case: forward and backward on the GPU vs the CPU, in the op's layout.
static void RunCase(Sizes s, bool bld, selscan_dtype dt, bool all_options, bool use_ck, cudaStream_t stream) {
    const int64_t seq = s.batch * s.dim * s.L, bc = s.batch * s.G * s.N * s.L, st = s.batch * s.dim * s.N;
    const std::string name = std::string(bld ? "BLD " : "BDL ") + DtName(dt) +
                             (all_options ? " all-options" : " plain") + (use_ck ? " ckpt " : " ") + s.ToString();
    Buf u, delta, A, B, C, D, z, bias, h0, y, hl, dy, dhl;
    u.Alloc(seq, dt);
    u.Fill(-1, 1, true);
    delta.Alloc(seq, dt); // around softplus' knee with softplus; a positive step without
    if (all_options) delta.Fill(-3, 1, false);
    else delta.Fill(0.05f, 0.6f, false);
    A.Alloc(s.dim * s.N, SELSCAN_F32);
    for (int64_t i = 0; i < A.n; i++) A.Set(i, -std::exp(0.5f * Normalish()));
    B.Alloc(bc, dt);
    B.Fill(-1, 1, true);
    C.Alloc(bc, dt);
    C.Fill(-1, 1, true);
    D.Alloc(s.dim, SELSCAN_F32);
    D.Fill(-1, 1, true);
    z.Alloc(seq, dt);
    z.Fill(-2, 2, true);
    bias.Alloc(s.dim, SELSCAN_F32);
    bias.Fill(-0.5f, 0.5f, false);
    h0.Alloc(st, SELSCAN_F32);
    h0.Fill(-1, 1, true);
    y.Alloc(seq, dt);
    hl.Alloc(st, SELSCAN_F32);
    dy.Alloc(seq, dt);
    dy.Fill(-1, 1, true);
    dhl.Alloc(st, SELSCAN_F32);
    dhl.Fill(-1, 1, true);
    for (Buf *b : {&u, &delta, &A, &B, &C, &D, &z, &bias, &h0, &dy, &dhl}) b->Upload(stream);
    auto problem = [&](bool dev, bool with_outputs) {
        return ScanProblem(ScanOf(dev, all_options, u, delta, A, B, C, D, z, bias, h0, with_outputs ? &y : nullptr,
                                  with_outputs ? &hl : nullptr),
                           s, bld, dt, all_options);
    };

    // ---- forward
    selscan_problem pc = problem(false, true), pg = problem(true, true);
    size_t wc = 0;
    size_t ckb = 0; // the forward's checkpoint, handed to the backward (as the op does)
    float *ck = nullptr;
    if (use_ck) {
        if (selscan_binding_cuda_checkpoint_size(&pg, &ckb) != SELSCAN_OK) {
            Check("setup", name, INFINITY, 0);
            return;
        }
        CUDA_OK(cudaMalloc(&ck, ckb));
    }
    if (selscan_workspace_size(&pc, nullptr, &wc) != SELSCAN_OK) {
        Check("setup", name, INFINITY, 0);
        return;
    }
    void *wsc = wc ? std::aligned_alloc(SELSCAN_WORKSPACE_ALIGN, (wc + 63) / 64 * 64) : nullptr;
    selscan_status stc = selscan_forward_cpu(&pc, wsc, wc);
    std::free(wsc);
    { // a refused workspace first: nothing written
        y.Poison(stream);
        hl.Poison(stream);
        Workspace ws;
        ws.refuse = true;
        selscan_binding_cuda_call call = ws.Call(stream);
        CheckRefused("forward", name, selscan_binding_cuda_forward(&pg, ck, ckb, &call), ws, {&y, &hl}, stream);
    }
    Workspace wsf;
    selscan_binding_cuda_call call = wsf.Call(stream);
    y.Poison(stream);
    hl.Poison(stream);
    selscan_status stg = selscan_binding_cuda_forward(&pg, ck, ckb, &call);
    if (stc != SELSCAN_OK || stg != SELSCAN_OK) {
        std::printf("forward status cpu %s, gpu %s %s\n", selscan_status_string(stc), selscan_status_string(stg),
                    call.cuda_error_text);
        Check("forward", name, INFINITY, 0);
    } else {
        std::vector<unsigned char> yg, hg;
        y.Download(&yg, stream);
        hl.Download(&hg, stream);
        CUDA_OK(cudaStreamSynchronize(stream));
        const double tol = tc_tol_lowp(dt, 1e-5, 2); // k = 2: GPU and CPU each round their own f32 y to dt
        Check("y", name, RelErr(y, yg), tol);
        if (all_options) Check("h_last", name, RelErr(hl, hg), 1e-5);
    }

    // ---- backward (every gradient)
    Buf du, dd, dA, dB, dC, dD, dz, dbias, dh0;
    du.Alloc(seq, dt);
    dd.Alloc(seq, dt);
    dA.Alloc(s.dim * s.N, SELSCAN_F32);
    dB.Alloc(bc, dt);
    dC.Alloc(bc, dt);
    dD.Alloc(s.dim, SELSCAN_F32);
    dz.Alloc(seq, dt);
    dbias.Alloc(s.dim, SELSCAN_F32);
    dh0.Alloc(st, SELSCAN_F32);
    auto grads = [&](bool dev) {
        auto P = [&](Buf &b) -> void * { return dev ? b.dev : static_cast<void *>(b.host.data()); };
        GradData d;
        d.dy = P(dy);
        d.du = P(du);
        d.ddelta = P(dd);
        d.dA = P(dA);
        d.dB = P(dB);
        d.dC = P(dC);
        if (all_options) {
            d.dh_last = P(dhl);
            d.dD = P(dD);
            d.dz = P(dz);
            d.ddelta_bias = P(dbias);
            d.dh0 = P(dh0);
        }
        return ScanGrads(d, s, bld);
    };
    pc = problem(false, false);
    pg = problem(true, false);
    selscan_grads gc = grads(false), gg = grads(true);
    if (selscan_workspace_size(&pc, &gc, &wc) != SELSCAN_OK) {
        Check("setup bwd", name, INFINITY, 0);
        return;
    }
    wsc = wc ? std::aligned_alloc(SELSCAN_WORKSPACE_ALIGN, (wc + 63) / 64 * 64) : nullptr;
    stc = selscan_backward_cpu(&pc, &gc, wsc, wc);
    std::free(wsc);
    for (Buf *b : {&du, &dd, &dA, &dB, &dC, &dD, &dz, &dbias, &dh0}) b->Poison(stream);
    { // a refused workspace first: nothing written
        Workspace ws;
        ws.refuse = true;
        selscan_binding_cuda_call c = ws.Call(stream);
        CheckRefused("backward", name, selscan_binding_cuda_backward(&pg, &gg, ck, ckb, &c), ws,
                     {&du, &dd, &dA, &dB, &dC, &dD, &dz, &dbias, &dh0}, stream);
    }
    for (Buf *b : {&du, &dd, &dA, &dB, &dC, &dD, &dz, &dbias, &dh0}) b->Poison(stream);
    Workspace wsb;
    call = wsb.Call(stream);
    stg = selscan_binding_cuda_backward(&pg, &gg, ck, ckb, &call);
    if (stc != SELSCAN_OK || stg != SELSCAN_OK) {
        std::printf("backward status cpu %s, gpu %s %s\n", selscan_status_string(stc), selscan_status_string(stg),
                    call.cuda_error_text);
        Check("backward", name, INFINITY, 0);
    } else {
        // a dt-typed gradient: k = 2, as y; an f32 one (dA, dD, ddelta_bias, dh0): computed in f32 from the
        // same dt inputs and dy on both sides (the GPU's checkpoints and sums are f32), no rounding to dt
        const double tol_t = tc_tol_lowp(dt, 1e-4, 2);
        const double tol_f = 1e-4;
        struct G {
            const char *n;
            Buf *b;
            bool t;
            bool opt;
        } gs[] = {{"du", &du, true, false},  {"ddelta", &dd, true, false},
                  {"dA", &dA, false, false}, {"dB", &dB, true, false},
                  {"dC", &dC, true, false},  {"dD", &dD, false, true},
                  {"dz", &dz, true, true},   {"ddelta_bias", &dbias, false, true},
                  {"dh0", &dh0, false, true}};
        std::vector<std::vector<unsigned char>> got(9);
        for (int i = 0; i < 9; i++) gs[i].b->Download(&got[i], stream);
        CUDA_OK(cudaStreamSynchronize(stream));
        for (int i = 0; i < 9; i++)
            if (!gs[i].opt || all_options) Check(gs[i].n, name, RelErr(*gs[i].b, got[i]), gs[i].t ? tol_t : tol_f);
    }
    CUDA_OK(cudaStreamSynchronize(stream)); // before the workspaces and the checkpoint go
    if (ck) cudaFree(ck);
}

// Times forward and backward of a Mamba-sized case in one layout (device buffers, no checks).
static void TimeCase(Sizes s, bool bld, selscan_dtype dt, cudaStream_t stream) {
    const int64_t seq = s.batch * s.dim * s.L, bc = s.batch * s.G * s.N * s.L, esz = dt == SELSCAN_F32 ? 4 : 2;
    void *u, *delta, *A, *B, *C, *D, *z, *bias, *y, *dy, *du, *dd, *dA, *dB, *dC, *dD, *dz, *dbias;
    for (void **p : {&u, &delta, &z, &y, &dy, &du, &dd, &dz}) CUDA_OK(cudaMalloc(p, seq * esz));
    for (void **p : {&B, &C, &dB, &dC}) CUDA_OK(cudaMalloc(p, bc * esz));
    for (void **p : {&A, &dA}) CUDA_OK(cudaMalloc(p, s.dim * s.N * 4));
    for (void **p : {&D, &bias, &dD, &dbias}) CUDA_OK(cudaMalloc(p, s.dim * 4));
    for (void *p : {u, delta, z, dy, B, C})
        CUDA_OK(cudaMemsetAsync(p, 0x3c, (p == B || p == C ? bc : seq) * esz, stream));
    std::vector<float> a(s.dim * s.N, -1.0f), v(s.dim, 0.5f);
    CUDA_OK(cudaMemcpyAsync(A, a.data(), a.size() * 4, cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaMemcpyAsync(D, v.data(), v.size() * 4, cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaMemcpyAsync(bias, v.data(), v.size() * 4, cudaMemcpyHostToDevice, stream));
    ScanData sd;
    sd.u = u;
    sd.delta = delta;
    sd.A = A;
    sd.B = B;
    sd.C = C;
    sd.D = D;
    sd.z = z;
    sd.delta_bias = bias;
    sd.y = y;
    const selscan_problem p = ScanProblem(sd, s, bld, dt, true);
    sd.y = nullptr;
    const selscan_problem pb = ScanProblem(sd, s, bld, dt, true);
    GradData gd;
    gd.dy = dy;
    gd.du = du;
    gd.ddelta = dd;
    gd.dA = dA;
    gd.dB = dB;
    gd.dC = dC;
    gd.dD = dD;
    gd.dz = dz;
    gd.ddelta_bias = dbias;
    const selscan_grads g = ScanGrads(gd, s, bld);
    size_t ckb = 0;
    if (selscan_binding_cuda_checkpoint_size(&p, &ckb) != SELSCAN_OK) {
        std::printf("timing setup failed\n");
        g_fail++;
        return;
    }
    float *ck = nullptr;
    CUDA_OK(cudaMalloc(&ck, ckb));
    Workspace ws; // grown during the warm-ups, then reused (a caching allocator's way)
    selscan_binding_cuda_call call = ws.Call(stream);
    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    float ms[4] = {0, 0, 0, 0}; // forward, backward, forward + checkpoint, backward from the checkpoint
    const int reps = 5;
    for (int pass = 0; pass < 4; pass++) {
        for (int r = -1; r < reps; r++) { // r = -1: warm-up
            if (r == 0) CUDA_OK(cudaEventRecord(e0, stream));
            selscan_status st;
            switch (pass) {
            case 0: st = selscan_binding_cuda_forward(&p, nullptr, 0, &call); break;
            case 1: st = selscan_binding_cuda_backward(&pb, &g, nullptr, 0, &call); break;
            case 2: st = selscan_binding_cuda_forward(&p, ck, ckb, &call); break;
            default: st = selscan_binding_cuda_backward(&pb, &g, ck, ckb, &call); break;
            }
            if (st != SELSCAN_OK) {
                std::printf("timing: %s\n", selscan_status_string(st));
                g_fail++;
                return;
            }
        }
        CUDA_OK(cudaEventRecord(e1, stream));
        CUDA_OK(cudaEventSynchronize(e1));
        CUDA_OK(cudaEventElapsedTime(&ms[pass], e0, e1));
        ms[pass] /= reps;
    }
    std::printf("time  %-4s %-4s %s: forward %.3f ms, backward %.3f ms | with checkpoint (%.1f MB): forward %.3f ms, "
                "backward %.3f ms\n",
                bld ? "BLD" : "BDL", DtName(dt), s.ToString().c_str(), ms[0], ms[1], ckb / 1e6, ms[2], ms[3]);
    cudaFree(ck);
    for (void *q : {u, delta, A, B, C, D, z, bias, y, dy, du, dd, dA, dB, dC, dD, dz, dbias}) cudaFree(q);
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
    cudaStream_t stream; // a non-default, non-blocking stream, as TensorFlow's compute stream is
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const Sizes cases[] = {
        {2, 8, 33, 4, 2},     // small, 2 groups
        {3, 130, 150, 16, 1}, // dim past 128, L past a 64-step chunk
        {1, 6, 1, 3, 3},      // L = 1
        {2, 64, 300, 8, 4},
    };
    for (const Sizes &s : cases)
        for (bool bld : {true, false})
            for (selscan_dtype dt : {SELSCAN_F32, SELSCAN_F16, SELSCAN_BF16})
                for (bool all : {true, false})
                    for (bool use_ck : {false, true}) RunCase(s, bld, dt, all, use_ck, stream);
    const Sizes big = {8, 3072, 2048, 16, 1}; // lm-train
    for (selscan_dtype dt : {SELSCAN_F32, SELSCAN_BF16})
        for (bool bld : {true, false}) TimeCase(big, bld, dt, stream);
    CUDA_OK(cudaStreamDestroy(stream));
    std::printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
