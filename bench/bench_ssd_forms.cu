/* bench/bench_ssd_forms.cu - the CUDA SSD forward's forms on the same problems, one process: the walk
 * (ssd_fwd_kernel, the forms' default) and the chunks (ssd_ck_fwd_kernel, selscan_cuda.cuh >>ssd-chunk)
 * in three variants: their products on tensor cores in float32 precision (tf32 parts, three products a
 * pair: mode 1), on the float32 units alone (mode 2), and as one-pass tf32 products (mode 3: below
 * float32's precision, for the comparison only). At the Mamba-2 layer shapes of bench/bench_ssd.py
 * (130m, 1.3b, 2.7b, Nemotron-H-like: headdim 64, dstate 128), softplus + dt_bias + D, no z, batch 8 x
 * 2048 unless given. Times: CUDA events around one call, median of 15 after 3 warm-ups, ms; y of the
 * chunks (mode 1) and of mode 3 against the walk's (largest difference over the largest |y|). The
 * chunks' workspace comes from a buffer allocated once (the allocator hands it out): no allocation
 * is timed. Then the backward (every gradient but dz and dinitial_state) on the walks and in chunks
 * (selscan_cuda.cuh >>ssd-chunk-bwd), timed the same way, and the chunks' gradients against the walks';
 * where the header has ssd_ckb_tc's levels (SELSCAN__CKB_TC_LEVELS), the chunks at each level too (a 2-byte
 * problem's products on tensor cores: every one, the pair products and the local state's, none) and, where it
 * has SELSCAN__CKB_TC_ONE, every one as one-pass tf32 products (level 3: what float32's precision costs).
 * The chunked forward's line "forward hand-off": its time without the hand-off walk's launch (ssd_ck_handoff 0, a
 * tuning build's switch), the launch's cost at this shape; a large batch x heads (e.g. `bf16 64 256`) shows how it
 * grows with the walk's blocks.
 *
 * Usage: make build/bench_ssd_forms && ./build/bench_ssd_forms [f32|f16|bf16] [batch] [L]
 */
#define SELSCAN_IMPLEMENTATION
#define SELSCAN_CUDA_IMPLEMENTATION
#define SELSCAN__CUDA_TUNING /* ssd_ck_mode 3: the one-pass tf32 products, compiled with it only */
#include "selscan_cuda.cuh"

#include <cuda_runtime.h>
#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

struct Pool {
    void *p;
    size_t cap;
};
static void *pool_alloc(void *ctx, size_t bytes) {
    Pool *pl = static_cast<Pool *>(ctx);
    return bytes <= pl->cap ? pl->p : NULL;
}

/* an element of dt at p as float, by the library's conversions */
static float from_bits(const unsigned char *p, selscan_dtype dt) {
    if (dt == SELSCAN_F32) { float f; memcpy(&f, p, 4); return f; }
    uint16_t b; memcpy(&b, p, 2);
    return dt == SELSCAN_BF16 ? selscan_bf16_to_f32(b) : selscan_f16_to_f32(b);
}
/* the largest |a - b| over the largest |a| of two device arrays of n elements (infinity where either is NaN) */
static double rel_diff(const void *da, const void *db, size_t n, selscan_dtype dt) {
    const size_t es = dt == SELSCAN_F32 ? 4 : 2;
    std::vector<unsigned char> ha(n * es), hb(n * es);
    CK(cudaMemcpy(ha.data(), da, n * es, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb.data(), db, n * es, cudaMemcpyDeviceToHost));
    double md = 0, my = 0;
    for (size_t i = 0; i < n; i++) {
        const double a = from_bits(&ha[i * es], dt), b = from_bits(&hb[i * es], dt);
        md = std::max(md, fabs(a - b));
        my = std::max(my, fabs(a));
        if (a != a || b != b) md = INFINITY;
    }
    return md / my;
}

static void *dev_random(size_t n, selscan_dtype dt, float lo, float hi, unsigned &seed) {
    const size_t es = dt == SELSCAN_F32 ? 4 : 2;
    std::vector<unsigned char> h(n * es);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        const float f = lo + (hi - lo) * static_cast<float>(seed >> 8) / 16777216.0f;
        if (es == 4) memcpy(&h[i * 4], &f, 4);
        else { const uint16_t b = dt == SELSCAN_BF16 ? selscan_f32_to_bf16(f) : selscan_f32_to_f16(f); memcpy(&h[i * 2], &b, 2); }
    }
    void *d;
    CK(cudaMalloc(&d, n * es));
    CK(cudaMemcpy(d, h.data(), n * es, cudaMemcpyHostToDevice));
    return d;
}

/* the median of 15 timed calls of call() (after 3 warm-ups), ms, by CUDA events; exits where a call fails */
template <typename F> static double median_ms(const char *what, F &&call) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> ts;
    for (int r = 0; r < 18; r++) {
        CK(cudaEventRecord(e0));
        if (call() != SELSCAN_OK) { fprintf(stderr, "%s failed\n", what); exit(1); }
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 3) ts.push_back(ms);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
}

/* An FNV-1a hash of n bytes of device memory: two builds' outputs compared by one printed line (a kernel change meant
   to keep every bit) */
static uint64_t dev_hash(const void *p, size_t n, uint64_t h = 1469598103934665603ull) {
    std::vector<unsigned char> hb(n);
    CK(cudaMemcpy(hb.data(), p, n, cudaMemcpyDeviceToHost));
    for (unsigned char c : hb) h = (h ^ c) * 1099511628211ull;
    return h;
}

int main(int argc, char **argv) {
    const selscan_dtype dt = argc > 1 && !strcmp(argv[1], "f32") ? SELSCAN_F32 : argc > 1 && !strcmp(argv[1], "f16") ? SELSCAN_F16 : SELSCAN_BF16;
    const int64_t batch = argc > 2 ? atoll(argv[2]) : 8, L = argc > 3 ? atoll(argv[3]) : 2048;
    const struct { const char *name; int64_t H, P, N, G; } shapes[] = {
        {"Mamba2-130m", 24, 64, 128, 1}, {"Mamba2-1.3b", 64, 64, 128, 1}, {"Mamba2-2.7b", 80, 64, 128, 1}, {"Nemotron-H-like", 128, 64, 128, 8}};
    const size_t es = dt == SELSCAN_F32 ? 4 : 2;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("bench_ssd_forms: %s, %s, batch %lld x %lld, softplus + dt_bias + D; ms (median of 15)\n", prop.name,
           dt == SELSCAN_F32 ? "f32" : dt == SELSCAN_F16 ? "f16" : "bf16", (long long)batch, (long long)L);
    printf("| shape | walk fwd | chunks fwd | chunks, float32 units | chunks, tf32 products | walk / chunks | max |diff| / max |y| | the same, tf32 |\n|---|---|---|---|---|---|---|---|\n");
    for (const auto &s : shapes) {
        unsigned seed = 12345;
        const int64_t H = s.H, P = s.P, N = s.N, G = s.G;
        void *x = dev_random(batch * L * H * P, dt, -1, 1, seed), *dtr = dev_random(batch * L * H, dt, -3, 0.5f, seed);
        void *B = dev_random(batch * L * G * N, dt, -1, 1, seed), *C = dev_random(batch * L * G * N, dt, -1, 1, seed);
        void *A = dev_random(H, SELSCAN_F32, -4, -0.2f, seed), *D = dev_random(H, SELSCAN_F32, -1, 1, seed);
        void *bias = dev_random(H, SELSCAN_F32, -0.5f, 0.2f, seed);
        void *y[2];
        CK(cudaMalloc(&y[0], batch * L * H * P * es));
        CK(cudaMalloc(&y[1], batch * L * H * P * es));
        selscan_ssd_problem p;
        memset(&p, 0, sizeof p);
        p.batch = batch; p.seqlen = L; p.nheads = H; p.headdim = P; p.dstate = N; p.n_groups = G; p.dtype = dt;
        p.flags = SELSCAN_SSD_DT_SOFTPLUS;
        p.x.data = x; p.dt.data = dtr; p.A.data = A; p.B.data = B; p.C.data = C; p.D.data = D; p.dt_bias.data = bias;
        p.y.data = y[0];
        size_t need = 0;
        selscan_cuda_detail::ssd_ck_mode = 1; /* the size query answers for the form selected */
        if (selscan_ssd_workspace_size_cuda(&p, NULL, &need) != SELSCAN_OK) { fprintf(stderr, "size query failed\n"); return 1; }
        Pool pool = {NULL, need};
        if (need) CK(cudaMalloc(&pool.p, need));
        selscan_cuda_ext ext;
        memset(&ext, 0, sizeof ext);
        ext.workspace_alloc = pool_alloc;
        ext.workspace_ctx = &pool;
        double med[4], dtf = 0;
        for (int form : {0, 3, 2, 1}) { /* walk, chunks with tf32 products, chunks on the float32 units alone, chunks (y[1]: the chunks' y) */
            selscan_cuda_detail::ssd_ck_mode = form;
            p.y.data = y[form == 0 ? 0 : 1];
            med[form] = median_ms("forward", [&] { return selscan_ssd_forward_cuda(&p, &ext, 0); });
            if (form == 3) dtf = rel_diff(y[0], y[1], batch * L * H * P, dt); /* the tf32 products' y against the walk's */
        }
        const uint64_t yh[2] = {dev_hash(y[0], batch * L * H * P * es), dev_hash(y[1], batch * L * H * P * es)}; /* the walk's y, the default chunks' */
        /* the chunks without the hand-off walk's launch (SSD-CUDA-v30: one launch of the walk's grid, its blocks returning at
           once): that launch's cost; y[0] (the walk's) is untouched, y[1] is rewritten by the same chunks */
        selscan_cuda_detail::ssd_ck_handoff = 0;
        const double noh = median_ms("forward", [&] { return selscan_ssd_forward_cuda(&p, &ext, 0); });
        selscan_cuda_detail::ssd_ck_handoff = 1;
        selscan_cuda_detail::ssd_ck_mode = -1; /* the default again */
        printf("| %s | %.3f | %.3f | %.3f | %.3f | %.2fx | %.2g | %.2g |\n", s.name, med[0], med[1], med[2], med[3], med[0] / med[1],
               rel_diff(y[0], y[1], batch * L * H * P, dt), dtf);
        printf("forward hand-off | %s | chunks %.4f ms, without the hand-off walk's launch %.4f ms: %.1f us (batch x heads %d)\n", s.name, med[1], noh,
               1000.0 * (med[1] - noh), static_cast<int>(batch * H));
        printf("forward bits | %s | walk %016llx chunks %016llx\n", s.name, (unsigned long long)yh[0], (unsigned long long)yh[1]);
        /* the backward: the walks (ssd_ckb_mode 0) and the chunks (1), every gradient but dz / dinitial_state */
        {
            void *dy = dev_random(batch * L * H * P, dt, -1, 1, seed);
            const size_t nbytes[7] = {(size_t)(batch * L * H * P) * es, (size_t)(batch * L * H) * es, (size_t)H * 4, (size_t)(batch * L * G * N) * es,
                                      (size_t)(batch * L * G * N) * es, (size_t)H * 4, (size_t)H * 4};
#if defined(SELSCAN__CKB_TC_ONE)
            constexpr int NFORM = 5; /* the walks; the chunks at ssd_ckb_tc 2 (the default), 1, 0; 3 (one pass) */
#elif defined(SELSCAN__CKB_TC_LEVELS)
            constexpr int NFORM = 4; /* the walks; the chunks at ssd_ckb_tc 2 (the default), 1, 0 */
#else
            constexpr int NFORM = 2; /* the walks, the chunks */
#endif
            void *gr[NFORM][7];
            for (int f = 0; f < NFORM; f++)
                for (int i = 0; i < 7; i++) CK(cudaMalloc(&gr[f][i], nbytes[i]));
            p.y.data = NULL;
            double bm[NFORM];
            for (int f = 0; f < NFORM; f++) {
                selscan_cuda_detail::ssd_ckb_mode = f != 0;
#ifdef SELSCAN__CKB_TC_LEVELS
                selscan_cuda_detail::ssd_ckb_tc = f == 0 ? 2 : f == 4 ? 3 : 3 - f;
#endif
                selscan_ssd_grads g;
                memset(&g, 0, sizeof g);
                g.dy.data = dy; g.dx.data = gr[f][0]; g.ddt.data = gr[f][1]; g.dA.data = gr[f][2]; g.dB.data = gr[f][3];
                g.dC.data = gr[f][4]; g.dD.data = gr[f][5]; g.ddt_bias.data = gr[f][6];
                size_t wsz = 0;
                if (selscan_ssd_workspace_size_cuda(&p, &g, &wsz) != SELSCAN_OK) { fprintf(stderr, "backward size query failed\n"); return 1; }
                void *wsp = NULL;
                if (wsz) CK(cudaMalloc(&wsp, wsz));
                bm[f] = median_ms("backward", [&] { return selscan_ssd_backward_cuda(&p, &g, &ext, wsp, wsz, 0); });
                if (wsp) cudaFree(wsp);
            }
            selscan_cuda_detail::ssd_ckb_mode = 1; /* the defaults again */
#ifdef SELSCAN__CKB_TC_LEVELS
            selscan_cuda_detail::ssd_ckb_tc = 2;
#endif
            const selscan_dtype gdt[7] = {dt, dt, SELSCAN_F32, dt, dt, SELSCAN_F32, SELSCAN_F32};
            const size_t gn[7] = {(size_t)(batch * L * H * P), (size_t)(batch * L * H), (size_t)H, (size_t)(batch * L * G * N), (size_t)(batch * L * G * N),
                                  (size_t)H, (size_t)H};
            printf("backward | %s | walks %.3f ms | chunks %.3f ms | %.2fx | chunks against walks, max |diff| / max |walks|: dx %.2g ddt %.2g dA %.2g dB %.2g dC %.2g dD %.2g ddt_bias %.2g\n",
                   s.name, bm[0], bm[1], bm[0] / bm[1], rel_diff(gr[0][0], gr[1][0], gn[0], gdt[0]), rel_diff(gr[0][1], gr[1][1], gn[1], gdt[1]),
                   rel_diff(gr[0][2], gr[1][2], gn[2], gdt[2]), rel_diff(gr[0][3], gr[1][3], gn[3], gdt[3]), rel_diff(gr[0][4], gr[1][4], gn[4], gdt[4]),
                   rel_diff(gr[0][5], gr[1][5], gn[5], gdt[5]), rel_diff(gr[0][6], gr[1][6], gn[6], gdt[6]));
#ifdef SELSCAN__CKB_TC_LEVELS
            double dl[2] = {0, 0}; /* levels 2 and 1 against 0 (the float32 units), the largest over the gradients */
            for (int l = 0; l < 2; l++)
                for (int i = 0; i < 7; i++) dl[l] = std::max(dl[l], rel_diff(gr[3][i], gr[1 + l][i], gn[i], gdt[i]));
            printf("backward levels | %s | tensor cores: every product %.3f ms, pairs + local state %.3f ms, none %.3f ms | none / every: %.2fx, none / pairs: %.2fx | against none, max |diff| / max: every %.2g, pairs %.2g\n",
                   s.name, bm[1], bm[2], bm[3], bm[3] / bm[1], bm[3] / bm[2], dl[0], dl[1]);
#endif
#ifdef SELSCAN__CKB_TC_ONE
            {
                double d1 = 0;
                for (int i = 0; i < 7; i++) d1 = std::max(d1, rel_diff(gr[3][i], gr[4][i], gn[i], gdt[i]));
                printf("backward one pass | %s | every product, the high tf32 parts alone (below float32's precision) %.3f ms | every / one pass: %.2fx | against none, max |diff| / max: %.2g\n",
                       s.name, bm[4], bm[1] / bm[4], d1);
            }
#endif
            /* each form's gradients as one FNV-1a hash of their bytes: two builds (a kernel change that should keep every
               bit, forms-base) compared by these lines alone */
            printf("backward bits | %s |", s.name);
            for (int f = 0; f < NFORM; f++) {
                uint64_t hsh = 1469598103934665603ull;
                for (int i = 0; i < 7; i++) hsh = dev_hash(gr[f][i], nbytes[i], hsh);
                printf(" form %d %016llx", f, (unsigned long long)hsh);
            }
            printf("\n");
            for (int f = 0; f < NFORM; f++)
                for (int i = 0; i < 7; i++) cudaFree(gr[f][i]);
            cudaFree(dy);
        }
        for (void *q : {x, dtr, B, C, A, D, bias, y[0], y[1], pool.p}) if (q) cudaFree(q);
    }
    return 0;
}
