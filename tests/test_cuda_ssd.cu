/* tests/test_cuda_ssd.cu - the CUDA SSD scan (selscan_cuda.cuh >>ssd-cuda) against the CPU reference.
 *
 * Random problems over every dtype, dstate (1 .. 512: every states-a-thread instantiation, padded
 * rows), headdim (1 .. 130: one and several channel slices a head), heads and groups, L (1 .. 400,
 * across tiles), options (softplus, dt limit, dt_bias, D per head or per channel, z, initial_state,
 * final_state, dfinal_state, seq_idx runs, cu_seqlens with empty sequences), layouts (contiguous
 * with zero strides; x / z / dy / dx head-major (batch, H, L, P) memory; B / C with a gap a row),
 * every gradient or a random subset: y and final_state, then dx, ddt, dA, dB, dC, dD, dz, ddt_bias,
 * dinitial_state against selscan_ssd_forward_ref / _backward_ref (relative L2 error a tensor),
 * outputs poisoned first (an unwritten element is a NaN there: fails), the backward run twice and
 * compared bitwise (deterministic), NaN in x gives NaN wherever the reference has one. Then the
 * same on a smaller device's shared memory, emulated (ssd_smem_cap_test: sm_75's 64 KiB, sm_86 /
 * sm_89's 99 KiB): the tiles shrink to fit, and the backward the smallest tile cannot hold is
 * refused (SELSCAN_RULE_SHARED_MEMORY) with its outputs untouched. Host-side refusals and the
 * plans' arithmetic run without a GPU. Last line: "N passed, N failed". SELSCAN_TEST_QUICK=1: fewer cases.
 */
#define SELSCAN_IMPLEMENTATION
#define SELSCAN_CUDA_IMPLEMENTATION
#include "selscan_cuda.cuh"

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

#define CUDA_CHECK_SEED 0x55d0c0dull /* urand / irand's */
#include "cuda_check.h" /* g_pass / g_fail, CHECK, CU, urand / irand */


/* A tensor of up to 4 dims on the host (h) and the device (d), same layout. */
struct Ten {
    int nd = 0;
    int64_t n[4] = {1, 1, 1, 1}, s[4] = {0, 0, 0, 0}, alloc = 0;
    selscan_dtype dt = SELSCAN_F32;
    bool zero = false, given = false, i32 = false;
    unsigned char *h = NULL, *hraw = NULL; /* h / d: the data, lead elements into the allocations */
    void *d = NULL, *draw = NULL;
    size_t es() const { return dt == SELSCAN_F32 || i32 ? 4 : 2; }
    int64_t count() const { return n[0] * n[1] * n[2] * n[3]; }
    int64_t off(int64_t i) const {
        int64_t o = 0;
        for (int k = 3; k >= 0; k--) { o += i % n[k] * s[k]; i /= n[k]; }
        return o;
    }
    float get(const unsigned char *m, int64_t i) const {
        const int64_t o = off(i);
        if (dt == SELSCAN_F32) { float f; memcpy(&f, m + o * 4, 4); return f; }
        uint16_t b;
        memcpy(&b, m + o * 2, 2);
        return dt == SELSCAN_F16 ? selscan_f16_to_f32(b) : selscan_bf16_to_f32(b);
    }
    void set(int64_t i, float v) {
        const int64_t o = off(i);
        if (dt == SELSCAN_F32) memcpy(h + o * 4, &v, 4);
        else {
            const uint16_t b = dt == SELSCAN_F16 ? selscan_f32_to_f16(v) : selscan_f32_to_bf16(v);
            memcpy(h + o * 2, &b, 2);
        }
    }
    selscan_tensor api(bool dev) const {
        selscan_tensor t;
        memset(&t, 0, sizeof t);
        if (!given) return t;
        t.data = dev ? d : (void *)h;
        for (int k = 0; k < 4; k++) t.stride[k] = zero || k >= nd ? 0 : s[k];
        return t;
    }
    selscan_out_tensor out(bool dev) const {
        const selscan_tensor a = api(dev);
        selscan_out_tensor o;
        o.data = (void *)a.data;
        memcpy(o.stride, a.stride, sizeof o.stride);
        return o;
    }
    void up() { if (given) CU(cudaMemcpy(d, h, alloc * es(), cudaMemcpyHostToDevice)); }
    void poison() { if (given) { memset(h, 0xFF, alloc * es()); CU(cudaMemset(d, 0xFF, alloc * es())); } }
    std::vector<unsigned char> down() const {
        std::vector<unsigned char> v(alloc * es());
        if (given) CU(cudaMemcpy(v.data(), d, v.size(), cudaMemcpyDeviceToHost));
        return v;
    }
    void release() {
        free(hraw);
        if (draw) cudaFree(draw);
        h = hraw = NULL; d = draw = NULL;
    }
};

/* logical sizes n0..n3 (nd of them); perm: the memory order of the dims (outermost first), gap:
   extra elements after each innermost row; zero: pass zero strides (contiguous only); lead: the
   data that many elements into its allocation (1: off the 16-byte alignment of the kernels'
   vector loads) */
static void make(Ten &t, selscan_dtype dt, int nd, const int64_t *n, const int *perm, int gap, bool zero, int lead = 0) {
    t = Ten();
    t.nd = nd; t.dt = dt; t.given = true;
    for (int k = 0; k < nd; k++) t.n[k] = n[k];
    int64_t acc = 1;
    for (int i = nd - 1; i >= 0; i--) {
        const int k = perm ? perm[i] : i;
        t.s[k] = acc;
        acc = acc * t.n[k] + (i == nd - 1 ? gap : 0);
    }
    t.alloc = acc < 1 ? 1 : acc;
    t.zero = zero && !perm && !gap;
    t.hraw = (unsigned char *)malloc((t.alloc + lead) * t.es());
    memset(t.hraw, 0xFF, (t.alloc + lead) * t.es());
    CU(cudaMalloc(&t.draw, (t.alloc + lead) * t.es()));
    t.h = t.hraw + lead * t.es();
    t.d = static_cast<unsigned char *>(t.draw) + lead * t.es();
}
static void fill(Ten &t, float lo, float hi) {
    for (int64_t i = 0; i < t.count(); i++) t.set(i, (float)urand(lo, hi));
}

/* ||a - b|| / ||b|| over the logical elements; NaN where b is NaN must be NaN in a (and those
   elements are left out of the norms); a NaN in a where b is finite: inf */
static double rel_err(const Ten &t, const unsigned char *a, const unsigned char *b, bool nan_case) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < t.count(); i++) {
        const double x = t.get(a, i), y = t.get(b, i);
        if (isnan(y)) { if (!isnan(x)) return INFINITY; continue; }
        if (isnan(x) || isinf(x) != isinf(y)) {
            if (nan_case) continue; /* NaN in: the CUDA backward's NaN may reach more steps (selscan_cuda.cuh >>ssd-cuda) */
            return INFINITY;
        }
        if (isinf(y)) continue;
        num += (x - y) * (x - y);
        den += y * y;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* rel_err where an infinity entered: a (CUDA) non-finite exactly where b (the reference) is, of either kind */
static double rel_err_nonfinite(const Ten &t, const unsigned char *a, const unsigned char *b) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < t.count(); i++) {
        const double x = t.get(a, i), y = t.get(b, i);
        if (isfinite(x) != isfinite(y)) return INFINITY;
        if (!isfinite(y)) continue;
        num += (x - y) * (x - y);
        den += y * y;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

struct Worst {
    double v[16] = {0};
} g_worst;
static const char *g_names[] = {"y", "final_state", "dx", "ddt", "dA", "dB", "dC", "dD", "dz", "ddt_bias", "dinitial_state"};

/* Host-side refusals (no GPU needed): the CUDA entries refuse what the CPU's refuse, with the
   same status, and their own rules (dstate over 512, cu_seqlens without its device copy) */
static void host_checks() {
    float x[64] = {0}, dt[8] = {0}, A[2] = {-1, -1}, B[64] = {0}, C[64] = {0}, y[64];
    selscan_ssd_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 1; p.seqlen = 2; p.nheads = 2; p.headdim = 2; p.dstate = 4; p.dtype = SELSCAN_F32;
    p.x.data = x; p.dt.data = dt; p.A.data = A; p.B.data = B; p.C.data = C; p.y.data = y;
    CHECK(selscan_validate_ssd(&p) == SELSCAN_OK, "the valid problem");
    selscan_ssd_problem q = p;
    q.x.data = NULL;
    CHECK(selscan_ssd_forward_cuda(&q, NULL, 0) == SELSCAN_ERR_NULL, "x NULL");
    q = p; q.n_groups = 3;
    CHECK(selscan_ssd_forward_cuda(&q, NULL, 0) == selscan_validate_ssd(&q), "n_groups 3: the CPU's status");
    { /* the forward's workspace: none for the walk (float32's default); the chunks' where they are selected
         (a 2-byte problem's default) and the shapes take them (dstate 33 .. 128, no packed sequences) */
        static float b64[2 * 64], c64[2 * 64];
        int32_t si[2] = {0, 0};
        q = p; q.dstate = 64; q.B.data = b64; q.C.data = c64;
        size_t w0 = 7, w1 = 7, w2 = 7;
        CHECK(selscan_ssd_workspace_size_cuda(&q, NULL, &w0) == SELSCAN_OK && w0 == 0, "forward workspace (float32: the walk): %zu", w0);
        selscan_cuda_detail::ssd_ck_mode = 1;
        CHECK(selscan_ssd_workspace_size_cuda(&q, NULL, &w1) == SELSCAN_OK && w1 > 0, "forward workspace (chunks): %zu", w1);
        q.seq_idx.data = si;
        CHECK(selscan_ssd_workspace_size_cuda(&q, NULL, &w2) == SELSCAN_OK && w2 == 0, "forward workspace (chunks, seq_idx): %zu", w2);
        selscan_cuda_detail::ssd_ck_mode = -1; /* the default: a 2-byte problem's chunks */
        q.seq_idx.data = NULL;
        q.dtype = SELSCAN_BF16;
        size_t w3 = 7;
        CHECK(selscan_ssd_workspace_size_cuda(&q, NULL, &w3) == SELSCAN_OK && w3 == w1, "forward workspace (bf16, the default: chunks): %zu", w3);
    }
    q = p; q.dstate = 513;
    {
        static float big[2 * 2 * 513];
        q.B.data = big; q.C.data = big + 513;
        selscan_diag dg;
        memset(&dg, 0, sizeof dg);
        q.diag = &dg;
        CHECK(selscan_ssd_forward_cuda(&q, NULL, 0) == SELSCAN_ERR_UNSUPPORTED && strcmp(dg.operand, "dstate") == 0, "dstate 513: %s", dg.operand);
        /* the size queries refuse it too, their answer untouched */
        static float dyb[64], dBb[2 * 2 * 513];
        selscan_ssd_grads g2;
        memset(&g2, 0, sizeof g2);
        g2.dy.data = dyb; g2.dB.data = dBb;
        size_t b1 = 7, b2 = 7;
        CHECK(selscan_ssd_workspace_size_cuda(&q, NULL, &b1) == SELSCAN_ERR_UNSUPPORTED && b1 == 7, "dstate 513: forward size query");
        CHECK(selscan_ssd_workspace_size_cuda(&q, &g2, &b2) == SELSCAN_ERR_UNSUPPORTED && b2 == 7, "dstate 513: backward size query");
    }
    int64_t cu[3] = {0, 1, 2};
    q = p; q.cu_seqlens = cu; q.n_seqs = 2;
    CHECK(selscan_ssd_forward_cuda(&q, NULL, 0) == SELSCAN_ERR_NULL, "cu_seqlens without its device copy");
    selscan_ssd_grads g;
    memset(&g, 0, sizeof g);
    size_t bytes = 1;
    CHECK(selscan_ssd_workspace_size_cuda(&p, NULL, &bytes) == SELSCAN_OK && bytes == 0, "forward workspace 0");
    CHECK(selscan_ssd_workspace_size_cuda(&p, &g, &bytes) == SELSCAN_ERR_NULL, "dy missing");
    float dy[64] = {0}, dB[64];
    g.dy.data = dy; g.dB.data = dB;
    CHECK(selscan_ssd_workspace_size_cuda(&p, &g, &bytes) == SELSCAN_OK && bytes >= 2 * 4 * 2, "dB's partials need a workspace: %zu", bytes);
    CHECK(selscan_ssd_backward_cuda(&p, &g, NULL, NULL, 0, 0) == SELSCAN_ERR_WORKSPACE, "backward without its workspace");
}

/* the emulated device's opt-in limit (0: the device's own), and dstate forced by its cases (0: random) */
static int g_cap = 0, g_force_N = 0, g_force_P = 0, g_refusals = 0;
/* the chunked forward's cases (>>ssd-chunk): no packed sequences, up to 700 steps (several chunks),
   a workspace allocator always; g_chunked counts the forwards that took the chunks */
static int g_force_chunk = 0, g_chunked = 0;
/* a packed case (seq_idx, cu_seqlens in turn) without an initial state, a NaN dy at a later sequence's first step where
   there is one, every gradient asked for (>>ssd-cuda: the decay's gradient there NaN, as the recurrence's) */
static int g_force_nanstart = 0;
/* the backwards that ran in chunks (>>ssd-chunk-bwd: their flag down after the call), and those a
   value that is not finite sent to the walks (the flag up) */
static int g_ckb = 0, g_ckb_walked = 0, g_ckb_fit = 0; /* (g_ckb_fit: the device's shared memory held the chunks) */
static double g_worst_ckb[3][9]; /* the chunked backwards' worst relative errors: f32, f16, bf16 x the gradients */
/* ext.workspace_alloc for the forward: cudaMalloc, freed after the case */
static void *test_alloc(void *ctx, size_t bytes) {
    void *d = NULL;
    if (cudaMalloc(&d, bytes) != cudaSuccess) return NULL;
    static_cast<std::vector<void *> *>(ctx)->push_back(d);
    return d;
}
/* the chunked forward's hand-off flag (selscan_cuda.cuh kCkFwdFlagAt: 1 where a block handed the call to the walk) in
   the workspace of allocs' last ask (the size the library asks for; aligned as the launcher aligns it) */
static int ck_fwd_flag(const std::vector<void *> &allocs, const selscan_cuda_detail::ssd_ck_plan &ck) {
    char *ws = NULL;
    int flag = -1;
    if (selscan_cuda_detail::check_workspace(allocs.back(), selscan_cuda_detail::ws_reported(ck.total), ck.total, &ws, NULL) != SELSCAN_OK) return flag;
    CU(cudaMemcpy(&flag, ws + ck.ring + selscan_cuda_detail::kCkFwdFlagAt, 4, cudaMemcpyDeviceToHost));
    return flag;
}
/* the documented refusal: the backward at dstate 257-512 with headdim > 8 on 64 KiB devices */
static bool smem_refused(int N, int P) { return g_cap == 65536 && N > 256 && P > 8; }

/* The plans' shared memory against each limit: within it, and the 64 KiB plan of the Mamba2-130m
   backward (dstate 128, headdim 64) a smaller tile than the default's (so the emulated cases run
   other tiles than the rest) */
static void plan_checks() {
    using namespace selscan_cuda_detail;
    const int caps[3] = {65536 - 64, 101376 - 64, 100 * 1024};
    const int Ns[6] = {16, 32, 64, 128, 256, 512}, Ps[4] = {1, 8, 9, 64};
    for (int c = 0; c < 3; c++)
        for (int n : Ns)
            for (int pp : Ps)
                for (int bwd = 0; bwd < 2; bwd++) {
                    selscan__sprob q;
                    memset(&q, 0, sizeof q);
                    q.batch = 1; q.H = 1; q.N = n; q.P = pp;
                    ssd_plan pl;
                    CHECK(ssd_make_plan(q, bwd, pl, caps[c]), "plan N %d P %d", n, pp);
                    const bool over = c == 0 && bwd && n > 256 && pp > 8; /* smem_refused's rule */
                    CHECK((pl.smem > pl.cap) == over && (over ? pl.TT == 4 : pl.TT == 32 || 4 * ssd_layout(2 * pl.TT, 16 * pl.NPT, pl.PB, pl.nth / 32, bwd).total > pl.cap),
                          "plan cap %d N %d P %d bwd %d: smem %d TT %d", caps[c], n, pp, bwd, pl.smem, pl.TT);
                }
    selscan__sprob q;
    memset(&q, 0, sizeof q);
    q.batch = 1; q.H = 1; q.N = 128; q.P = 64;
    ssd_plan big, small;
    CHECK(ssd_make_plan(q, true, big, 100 * 1024) && ssd_make_plan(q, true, small, 65536 - 64) && big.smem > 65536 - 64 && small.TT < big.TT,
          "130m backward: %d B at TT %d, at 64 KiB TT %d", big.smem, big.TT, small.TT);
}

/* One random problem: forward and backward on CUDA against the reference. */
static void run_case(int ci, bool quick) {
    const selscan_dtype dts[3] = {SELSCAN_F32, SELSCAN_F16, SELSCAN_BF16};
    const selscan_dtype dt = dts[ci % 3];
    const int Ns[] = {1, 5, 16, 24, 64, 100, 128, 200, 256, 512};
    const int Ps[] = {1, 3, 16, 33, 64, 70, 130};
    const int N = g_force_N ? g_force_N : Ns[irand(0, quick ? 8 : 9)], P = g_force_P ? g_force_P : Ps[irand(0, 6)];
    const int G = irand(1, 2), H = G * irand(1, 3);
    const int pack = g_force_nanstart ? 3 + (ci & 1) : g_force_chunk ? irand(0, 2) : irand(0, 4); /* 0, 1, 2: none; 3: seq_idx; 4: cu_seqlens */
    const int64_t batch = pack == 4 ? 1 : irand(1, 3);
    const int64_t L = g_force_chunk ? irand(1, quick ? 300 : 700) : irand(0, 3) == 0 ? irand(1, 8) : irand(1, quick ? 120 : 400);
    const bool nan_case = irand(0, 9) == 0;
    /* a NaN dt (chunk cases only, the forward alone): the decays' running sums spread it as the recurrence does */
    const bool nan_dt = g_force_chunk && !nan_case && irand(0, 7) == 0;
    /* an inf in initial_state (chunk cases, the forward alone): non-finite exactly where the reference is
       (inf or NaN: the chunks' order of products is not the recurrence's, >>ssd-chunk), the rest within bounds */
    const bool inf_h0 = g_force_chunk && !nan_case && !nan_dt && irand(0, 5) == 0;
    /* a NaN entering the backward alone (chunk cases: one in four): in dy, in dfinal_state or in B (the
       backward's B only); the chunks' flag must send it to the walks, and NaN comes out where the reference's is */
    int nan_bwd = g_force_chunk && !nan_case && !nan_dt && !inf_h0 && irand(0, 3) == 0 ? 1 + irand(0, 2) : 0;
    /* and in packed cases (the walks: one in six, and every case ci = 5 mod 16), a NaN dy (below) */
    if (pack >= 3 && !nan_case && (irand(0, 5) == 0 || ci % 16 == 5 || g_force_nanstart)) nan_bwd = 1;
    const bool alloc = g_force_chunk || irand(0, 3) != 0; /* the forward may take the chunks */
    /* the forward's forms (>>ssd-chunk): the default (-1: the chunks for a 2-byte problem, the walk for float32), the
       walk, the chunks, the chunks on the float32 units */
    selscan_cuda_detail::ssd_ck_mode = g_force_chunk ? 1 + (ci & 1) : irand(-1, 2);
    /* the backward: the chunks where the shapes allow (>>ssd-chunk-bwd, the default), or the walks alone */
    selscan_cuda_detail::ssd_ckb_mode = g_force_chunk ? 1 : irand(0, 1);
    /* a 2-byte problem's chunked backward on tensor cores: each level by the case's number (no draw: the same cases
       as before the levels), every product (2, the default), the pair products and the local state (1), none (0) */
    selscan_cuda_detail::ssd_ckb_tc = 2 - (ci / 3) % 3;
    const bool strided = irand(0, 1);
    selscan_ssd_problem p;
    memset(&p, 0, sizeof p);
    p.batch = batch; p.seqlen = L; p.nheads = H; p.headdim = P; p.dstate = N; p.n_groups = G; p.dtype = dt;
    if (irand(0, 1)) p.flags |= SELSCAN_SSD_DT_SOFTPLUS;
    if (irand(0, 2) == 0) { p.flags |= SELSCAN_SSD_DT_LIMIT; p.dt_min = 0.01f; p.dt_max = irand(0, 1) ? 0.08f : INFINITY; }
    const bool hasD = irand(0, 2) != 0, Dhd = hasD && irand(0, 1), hasz = irand(0, 1), hasbias = irand(0, 1);
    if (Dhd) p.flags |= SELSCAN_SSD_D_HEADDIM;
    std::vector<int64_t> cu;
    if (pack == 4) {
        const int ns = irand(1, 4);
        cu.push_back(0);
        for (int i = 1; i < ns; i++) cu.push_back(irand(0, (int)L));
        cu.push_back(L);
        std::sort(cu.begin(), cu.end());
        p.cu_seqlens = cu.data(); p.n_seqs = ns;
    }
    const int64_t rows = pack == 4 ? p.n_seqs : batch;
    const bool hash0 = irand(0, 1) && !g_force_nanstart, hashT = irand(0, 1), hasdT = irand(0, 1);
    const int permx[4] = {0, 2, 1, 3}; /* head-major memory: (batch, H, L, P) */
    Ten x, dtt, A, Bt, Ct, D, z, bias, si, h0, y, hT;
    const int64_t nx[4] = {batch, L, H, P}, ndt[3] = {batch, L, H}, nh[1] = {H}, nbc[4] = {batch, L, G, N};
    const int64_t nD[2] = {H, P}, nsi[2] = {batch, L}, nst[4] = {rows, H, P, N};
    /* the staging's element loop where vectors would be refused: x and B one element off their
       alignment, or x and z rows one element apart */
    const int lead = !strided && irand(0, 3) == 0, xgap = strided && irand(0, 1);
    make(x, dt, 4, nx, strided ? permx : NULL, xgap, true, lead); fill(x, -1, 1);
    make(dtt, dt, 3, ndt, NULL, strided ? 1 : 0, true); fill(dtt, (p.flags & SELSCAN_SSD_DT_SOFTPLUS) ? -3 : 0.001f, (p.flags & SELSCAN_SSD_DT_SOFTPLUS) ? 0.5f : 0.12f);
    make(A, SELSCAN_F32, 1, nh, NULL, 0, true); fill(A, -4, -0.2f);
    make(Bt, dt, 4, nbc, NULL, strided ? 3 : 0, true, lead); fill(Bt, -1, 1);
    make(Ct, dt, 4, nbc, NULL, 0, true); fill(Ct, -1, 1);
    if (hasD) { make(D, SELSCAN_F32, Dhd ? 2 : 1, nD, NULL, 0, true); fill(D, -1, 1); }
    if (hasz) { make(z, dt, 4, nx, strided ? permx : NULL, xgap, true); fill(z, -2, 2); }
    /* without the softplus dt + dt_bias stays >= 0 (a negative dt grows the state exponentially: both
       sides overflow, at different steps) */
    if (hasbias) { make(bias, SELSCAN_F32, 1, nh, NULL, 0, true); fill(bias, (p.flags & SELSCAN_SSD_DT_SOFTPLUS) ? -0.5f : 0.0f, 0.2f); }
    if (pack == 3) {
        make(si, SELSCAN_F32, 2, nsi, NULL, 0, true);
        si.i32 = true;
        for (int64_t b = 0; b < batch; b++) {
            int32_t v = irand(0, 3);
            for (int64_t t = 0; t < L; t++) {
                if (irand(0, 40) == 0) v += irand(1, 2);
                memcpy(si.h + si.off(b * L + t) * 4, &v, 4);
            }
        }
    }
    if (hash0 || inf_h0) { make(h0, SELSCAN_F32, 4, nst, NULL, 0, true); fill(h0, -1, 1); }
    if (inf_h0) h0.set(irand(0, (int)(h0.count() - 1)), irand(0, 1) ? INFINITY : -INFINITY);
    if (nan_case) x.set(irand(0, (int)(x.count() - 1)), NAN);
    if (nan_dt) dtt.set(irand(0, (int)(dtt.count() - 1)), NAN);
    /* left padding (transformers' padded batches): x 0 at each row's first lpad steps, no state enters:
       the reference's ddt there is exactly 0, and so must CUDA's be (the regression 1fda97b fixes) */
    const int64_t lpad = !hash0 && pack <= 2 && !nan_case && !nan_bwd && irand(0, 2) == 0 ? irand(1, (int)L) - 1 : 0;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t t = 0; t < lpad; t++)
            for (int64_t i = 0; i < (int64_t)H * P; i++) x.set((b * L + t) * H * P + i, 0.0f);
    make(y, dt, 4, nx, strided ? permx : NULL, 0, true);
    if (hashT) make(hT, SELSCAN_F32, 4, nst, NULL, 0, true);
    Ten *ins[] = {&x, &dtt, &A, &Bt, &Ct, &D, &z, &bias, &si, &h0};
    for (Ten *t : ins) t->up();
    auto problem = [&](bool dev) {
        selscan_ssd_problem q = p;
        q.x = x.api(dev); q.dt = dtt.api(dev); q.A = A.api(dev); q.B = Bt.api(dev); q.C = Ct.api(dev); q.D = D.api(dev);
        q.z = z.api(dev); q.dt_bias = bias.api(dev); q.seq_idx = si.api(dev); q.initial_state = h0.api(dev);
        q.y = y.out(dev); q.final_state = hT.out(dev);
        return q;
    };
    int64_t *cu_dev = NULL;
    selscan_cuda_ext ext;
    memset(&ext, 0, sizeof ext);
    std::vector<void *> allocs;
    if (alloc) { ext.workspace_alloc = test_alloc; ext.workspace_ctx = &allocs; }
    if (pack == 4) {
        CU(cudaMalloc(&cu_dev, cu.size() * 8));
        CU(cudaMemcpy(cu_dev, cu.data(), cu.size() * 8, cudaMemcpyHostToDevice));
        ext.cu_seqlens_device = cu_dev;
    }
    char what[320];
    snprintf(what, sizeof what, "cap %d lpad %lld case %d: dt %d batch %lld L %lld H %d G %d P %d N %d flags %u D %d z %d bias %d pack %d h0 %d hT %d strided %d lead %d xgap %d nan %d nan_bwd %d",
             g_cap, (long long)lpad, ci, (int)dt, (long long)batch, (long long)L, H, G, P, N, p.flags, hasD + Dhd, hasz, hasbias, pack, hash0, hashT, strided, lead, xgap,
             nan_case, nan_bwd);
    /* forward */
    size_t ws_bytes = 0;
    selscan_ssd_problem ph = problem(false), pd = problem(true);
    CHECK(selscan_ssd_workspace_size(&ph, NULL, &ws_bytes) == SELSCAN_OK, "%s: cpu ws", what);
    std::vector<unsigned char> ws(ws_bytes + 64);
    y.poison(); hT.poison();
    CHECK(selscan_ssd_forward_ref(&ph, ws.data(), ws.size()) == SELSCAN_OK, "%s: reference forward", what);
    bool chunked = false;
    selscan_cuda_detail::ssd_ck_plan ck;
    {
        selscan__sprob sq;
        chunked = selscan__ssd_validate_forward(&pd, &sq, NULL, 0, NULL, 0) == SELSCAN_OK && selscan_cuda_detail::ssd_ck_takes(sq, &ext, ck);
        g_chunked += chunked;
        if (g_force_chunk) CHECK(chunked || N <= 32 || N > 128, "%s: a chunk case not run in chunks", what);
    }
    selscan_status st = selscan_ssd_forward_cuda(&pd, &ext, 0);
    CHECK(st == SELSCAN_OK, "%s: cuda forward status %d", what, (int)st);
    CU(cudaDeviceSynchronize());
    if (chunked) { /* deterministic: a second call gives the same bytes */
        /* B and C in [-1, 1]: no C B^T above float's range, the chunks kept the call (SSD-CUDA-v30) */
        CHECK(ck_fwd_flag(allocs, ck) == 0, "%s: the chunked forward handed the call to the walk", what);
        const std::vector<unsigned char> y1 = y.down();
        CHECK(selscan_ssd_forward_cuda(&pd, &ext, 0) == SELSCAN_OK, "%s: second chunked forward", what);
        CU(cudaDeviceSynchronize());
        CHECK(y.down() == y1, "%s: the chunked forward differs between two calls", what);
    }
    for (void *a : allocs) cudaFree(a);
    allocs.clear();
    const double ftol = tc_tol_lowp(dt, 1e-5, 2); /* f32: rounding of L-step recurrences in another order; lowp: both results rounded to T */
    {
        const std::vector<unsigned char> yd = y.down();
        /* the chunks: NaN exactly where the reference has NaN */
        const double e = inf_h0 ? rel_err_nonfinite(y, yd.data(), y.h) : rel_err(y, yd.data(), y.h, nan_case && !chunked);
        if (e > g_worst.v[0]) g_worst.v[0] = e;
        CHECK(e <= ftol, "%s chunked %d: y rel err %.3g > %.3g", what, (int)chunked, e, ftol);
        if (hashT) {
            const std::vector<unsigned char> hd = hT.down();
            const double e2 = inf_h0 ? rel_err_nonfinite(hT, hd.data(), hT.h) : rel_err(hT, hd.data(), hT.h, nan_case && !chunked);
            if (e2 > g_worst.v[1]) g_worst.v[1] = e2;
            CHECK(e2 <= 1e-5, "%s chunked %d: final_state rel err %.3g", what, (int)chunked, e2); /* f32 states, rounding only */
        }
    }
    if (nan_dt || inf_h0) {
        if (cu_dev) cudaFree(cu_dev);
        for (Ten *t : ins) t->release();
        y.release(); hT.release();
        return;
    }
    /* backward: a random subset of the gradients (every one in two cases of three) */
    Ten dy, dT, dx, ddt, dA, dB, dC, dD, dz, dbias, dh0;
    make(dy, dt, 4, nx, strided ? permx : NULL, 0, true); fill(dy, -1, 1);
    if (hasdT || nan_bwd == 2) { make(dT, SELSCAN_F32, 4, nst, NULL, 0, true); fill(dT, -1, 1); }
    /* a NaN dy: anywhere (with an initial state, and one case in four without), else at a sequence's first step,
       where without an initial state the decay's gradient is the recurrence's G . 0 (>>ssd-cuda: NaN there, where
       the walks once gave 0: bench/NOTES.md SSD-CUDA-v12) */
    int64_t nan_at = -1;
    const bool at_start = nan_bwd == 1 && !hash0 && (irand(0, 3) != 0 || g_force_nanstart);
    if (nan_bwd == 1 && !at_start) nan_at = irand(0, (int)(dy.count() - 1));
    if (at_start) {
        const int64_t b = irand(0, (int)(batch - 1));
        std::vector<int64_t> starts; /* the first steps of row b's sequences */
        for (int64_t t = 0; t < L; t++) {
            int32_t v = 0, u = 0;
            if (pack == 3 && t > 0) { memcpy(&v, si.h + si.off(b * L + t) * 4, 4); memcpy(&u, si.h + si.off(b * L + t - 1) * 4, 4); }
            if (t == 0 || (pack == 3 && v != u) || (pack == 4 && std::find(cu.begin(), cu.end(), t) != cu.end())) starts.push_back(t);
        }
        const int later = g_force_nanstart && starts.size() > 1; /* (forced: a later sequence's start) */
        const int64_t t = starts[irand(later, (int)starts.size() - 1)];
        nan_at = (b * L + t) * H * P + irand(0, (int)(H * P - 1));
    }
    if (nan_at >= 0) dy.set(nan_at, NAN);
    if (nan_bwd == 2) dT.set(irand(0, (int)(dT.count() - 1)), NAN);
    if (nan_bwd == 3) { Bt.set(irand(0, (int)(Bt.count() - 1)), NAN); Bt.up(); }
    const bool all = irand(0, 2) != 0 || g_force_nanstart;
    auto want = [&]() { return all || irand(0, 1); };
    if (want()) make(dx, dt, 4, nx, strided ? permx : NULL, xgap, true); /* (a gap: dx's rows not vectors, stored an element at a time) */
    if (want()) make(ddt, dt, 3, ndt, NULL, 0, true);
    if (want()) make(dA, SELSCAN_F32, 1, nh, NULL, 0, true);
    if (want()) make(dB, dt, 4, nbc, NULL, strided ? 2 : 0, true);
    if (want()) make(dC, dt, 4, nbc, NULL, 0, true);
    if (want()) make(dD, SELSCAN_F32, Dhd ? 2 : 1, nD, NULL, 0, true);
    if (hasz && want()) make(dz, dt, 4, nx, NULL, 0, true);
    if (want()) make(dbias, SELSCAN_F32, 1, nh, NULL, 0, true);
    if (want()) make(dh0, SELSCAN_F32, 4, nst, NULL, 0, true);
    dy.up(); dT.up();
    Ten *gouts[] = {&dx, &ddt, &dA, &dB, &dC, &dD, &dz, &dbias, &dh0};
    auto grads = [&](bool dev) {
        selscan_ssd_grads g;
        memset(&g, 0, sizeof g);
        g.dy = dy.api(dev); g.dfinal_state = dT.api(dev);
        g.dx = dx.out(dev); g.ddt = ddt.out(dev); g.dA = dA.out(dev); g.dB = dB.out(dev); g.dC = dC.out(dev);
        g.dD = dD.out(dev); g.dz = dz.out(dev); g.ddt_bias = dbias.out(dev); g.dinitial_state = dh0.out(dev);
        return g;
    };
    selscan_ssd_grads gh = grads(false), gd = grads(true);
    ph = problem(false); pd = problem(true);
    ph.y.data = NULL; pd.y.data = NULL; ph.final_state.data = NULL; pd.final_state.data = NULL;
    CHECK(selscan_ssd_workspace_size(&ph, &gh, &ws_bytes) == SELSCAN_OK, "%s: cpu bwd ws", what);
    ws.assign(ws_bytes + 64, 0);
    for (Ten *t : gouts) t->poison();
    CHECK(selscan_ssd_backward_ref(&ph, &gh, ws.data(), ws.size()) == SELSCAN_OK, "%s: reference backward", what);
    size_t cws = 0;
    bool any_grad = false;
    for (Ten *t : gouts) any_grad = any_grad || t->given;
    const bool refused = smem_refused(N, P) && any_grad; /* a call with no gradient launches nothing */
    st = selscan_ssd_workspace_size_cuda(&pd, &gd, &cws);
    CHECK(st == (refused ? SELSCAN_ERR_UNSUPPORTED : SELSCAN_OK), "%s: cuda ws status %d (refused %d)", what, (int)st, refused);
    g_refusals += refused;
    void *dws = NULL;
    if (cws) {
        CU(cudaMalloc(&dws, cws));
        CU(cudaMemset(dws, 0xFF, cws)); /* the chunks' flag reads 0 only where the call wrote it */
    }
    std::vector<std::vector<unsigned char>> first(9);
    bool ran_ckb = false;
    /* dD is a float32 sum of batch L P (D a head) or batch L (D a channel) products dy silu(z) x whose random signs
       cancel (full matrix, case 702: to 1.7e-5 of the magnitudes summed, 1.03e-4 of |dD| off): past tol of |dD| it is
       held against the sum in double (dD_64; the reference's is float32 too) within 2^-24 sqrt(depth) sum |terms|:
       roundings at most u of a partial sum, adding as a random walk along at most depth adds (a chunk's or a row's
       steps, the partials' chain, the channels); the linear worst case (depth u sum |terms|) would let a dropped
       channel pass */
    std::vector<double> dD_mag(dD.given ? dD.count() : 0, 0.0), dD_64(dD_mag.size(), 0.0);
    for (int64_t i = 0; dD.given && i < x.count(); i++) {
        const int64_t pp = i % P, hh = i / P % H, k = Dhd ? hh * P + pp : hh;
        const double zv = hasz ? z.get(z.h, i) : 0.0, g = hasz ? zv / (1.0 + exp(-zv)) : 1.0;
        const double term = static_cast<double>(dy.get(dy.h, i)) * g * x.get(x.h, i);
        dD_64[k] += term;
        dD_mag[k] += fabs(term);
    }
    const double dD_round = ldexp(sqrt(static_cast<double>(L + batch + P + 8)), -24);
    for (int rep = 0; rep < 2; rep++) {
        for (Ten *t : gouts) if (t->given) CU(cudaMemset(t->d, 0xFF, t->alloc * t->es()));
        if (refused) {
            selscan_diag dg;
            memset(&dg, 0, sizeof dg);
            pd.diag = &dg;
            st = selscan_ssd_backward_cuda(&pd, &gd, &ext, dws, cws, 0);
            pd.diag = NULL;
            CHECK(st == SELSCAN_ERR_UNSUPPORTED && dg.code == SELSCAN_RULE_SHARED_MEMORY && dg.operand && strcmp(dg.operand, "dstate") == 0,
                  "%s: refused backward: status %d rule %d", what, (int)st, (int)dg.code);
            CU(cudaDeviceSynchronize());
            for (Ten *t : gouts) {
                if (!t->given) continue;
                const std::vector<unsigned char> got = t->down();
                bool same = true;
                for (size_t i = 0; i < got.size(); i++) same = same && got[i] == 0xFF;
                CHECK(same, "%s: refused backward wrote an output", what);
            }
            break;
        }
        st = selscan_ssd_backward_cuda(&pd, &gd, &ext, dws, cws, 0);
        CHECK(st == SELSCAN_OK, "%s: cuda backward status %d", what, (int)st);
        CU(cudaDeviceSynchronize());
        if (rep == 0) { /* which form ran: the chunks' flag in the workspace (down: the chunks; up: the walks) */
            selscan__sprob sq;
            selscan__sgrd sr;
            selscan_cuda_detail::ssd_plan spl;
            selscan_cuda_detail::ssd_ck_plan sck;
            selscan_cuda_detail::ssd_ws sw;
            const bool shape = any_grad && selscan__ssd_validate_backward(&pd, &gd, &sq, &sr, NULL, 0, NULL, 0) == SELSCAN_OK &&
                               selscan_cuda_detail::ssd_make_plan(sq, true, spl, selscan_cuda_detail::ssd_smem_cap()) &&
                               selscan_cuda_detail::ssd_ckb_shape(sq, spl, sck) && selscan_cuda_detail::ssd_ws_layout(sq, sr, spl, sw, &sck);
            const bool ckb = shape && selscan_cuda_detail::ssd_ckb_fits(sck);
            if (g_force_chunk) CHECK(shape || N <= 32 || N > 128 || !any_grad, "%s: a chunk case's backward not in chunks' shapes", what);
            g_ckb_fit += ckb;
            if (ckb) {
                const uintptr_t a = reinterpret_cast<uintptr_t>(dws), pad = (selscan_cuda_detail::kWsAlign - a % selscan_cuda_detail::kWsAlign) % selscan_cuda_detail::kWsAlign;
                int flag = -1;
                CU(cudaMemcpy(&flag, static_cast<char *>(dws) + pad + sw.ckflag, 4, cudaMemcpyDeviceToHost));
                CHECK(flag == (nan_case || nan_bwd ? 1 : 0), "%s: the chunked backward's flag %d (a NaN in x: %d, not finite in the backward: %d)", what, flag,
                      (int)nan_case, nan_bwd);
                g_ckb += flag == 0;
                ran_ckb = flag == 0;
                g_ckb_walked += flag == 1;
            }
        }
        for (int i = 0; i < 9; i++) {
            Ten &t = *gouts[i];
            if (!t.given) continue;
            std::vector<unsigned char> got = t.down();
            if (rep == 0) {
                /* f32: sums of up to batch L P N terms in another order (and the decay's gradient
                   from per-step scalars); lowp: both results rounded to T */
                const double tol = tc_tol_lowp(dt, 1e-4, 2);
                /* NaN in: only the decay's gradient (ddt, dA, ddt_bias) may be NaN where the reference is not */
                const double e = rel_err(t, got.data(), t.h, (nan_case || nan_bwd) && (i == 1 || i == 2 || i == 7));
                /* dD past tol: each element within tol of the sum in double plus its rounding (above) */
                double ed = 0.0;
                for (int64_t k = 0; i == 5 && e > tol && k < t.count(); k++) {
                    const double gv = t.get(got.data(), k), rv = dD_64[k], d = fabs(gv - rv);
                    if (!isfinite(gv) || !isfinite(rv)) ed = INFINITY; /* (not finite: rel_err's verdict stands) */
                    else if (d > 0.0) ed = fmax(ed, d / (tol * fabs(rv) + dD_round * dD_mag[k]));
                }
                if (i == 1)
                    for (int64_t b = 0; b < batch; b++)
                        for (int64_t tt = 0; tt < lpad; tt++)
                            for (int hh = 0; hh < H; hh++)
                                CHECK(t.get(got.data(), (b * L + tt) * H + hh) == 0.0f, "%s: ddt at left-padded step %lld not 0", what, (long long)tt);
                if (e > g_worst.v[2 + i]) g_worst.v[2 + i] = e;
                if (ran_ckb && e > g_worst_ckb[ci % 3][i]) g_worst_ckb[ci % 3][i] = e;
                CHECK(e <= tol || (i == 5 && ed <= 1.0), "%s: %s rel err %.3g > %.3g%s", what, g_names[2 + i], e, tol,
                      i == 5 ? " and past its sum's rounding bound" : "");
                if (i == 5 && e > tol && ed <= 1.0) { /* (said: which cases the bound decides, and how far the sum cancelled) */
                    double rn = 0.0, mn = 0.0;
                    for (int64_t k = 0; k < t.count(); k++) { rn += fabs(t.get(t.h, k)); mn += dD_mag[k]; }
                    printf("%s: dD rel err %.3g > %.3g, within its sum's rounding bound against the sum in double (%.3g of it): |dD| / sum |terms| "
                           "%.3g\n", what, e, tol, ed, mn > 0 ? rn / mn : 0.0);
                }
                first[i] = got;
            } else {
                CHECK(got == first[i], "%s: %s differs between two runs (not deterministic)", what, g_names[2 + i]);
            }
        }
    }
    if (dws) cudaFree(dws);
    if (cu_dev) cudaFree(cu_dev);
    for (Ten *t : ins) t->release();
    for (Ten *t : gouts) t->release();
    y.release(); hT.release(); dy.release(); dT.release();
}

/* The reference's and the GPU's forward (into y: the problems' y), then their backward of dy into dx, dz, dB and dC
   (the ones given; y not asked), outputs poisoned first: inf_cases' and overflow_cases' calls */
static void both_forward(const char *what, int id, const selscan_ssd_problem &ph, const selscan_ssd_problem &pd, Ten &y,
                         const selscan_cuda_ext *ext, std::vector<unsigned char> &ws) {
    y.poison();
    CHECK(selscan_ssd_forward_ref(&ph, ws.data(), ws.size()) == SELSCAN_OK, "%s %d: reference forward", what, id);
    CHECK(selscan_ssd_forward_cuda(&pd, ext, 0) == SELSCAN_OK, "%s %d: forward status", what, id);
    CU(cudaDeviceSynchronize());
}
static void both_backward(const char *what, int id, selscan_ssd_problem ph, selscan_ssd_problem pd, Ten &dy, Ten &dx, Ten &dz, Ten &dB,
                          Ten &dC, const selscan_cuda_ext *ext, std::vector<unsigned char> &ws) {
    ph.y.data = pd.y.data = NULL;
    auto grads = [&](bool dev) {
        selscan_ssd_grads g;
        memset(&g, 0, sizeof g);
        g.dy = dy.api(dev); g.dx = dx.out(dev); g.dz = dz.out(dev); g.dB = dB.out(dev); g.dC = dC.out(dev);
        return g;
    };
    selscan_ssd_grads gh = grads(false), gd = grads(true);
    dx.poison(); dz.poison(); dB.poison(); dC.poison();
    size_t need = 0;
    CHECK(selscan_ssd_workspace_size(&ph, &gh, &need) == SELSCAN_OK && need <= ws.size(), "%s %d: cpu workspace", what, id);
    CHECK(selscan_ssd_backward_ref(&ph, &gh, ws.data(), ws.size()) == SELSCAN_OK, "%s %d: reference backward", what, id);
    CHECK(selscan_ssd_backward_cuda(&pd, &gd, ext, NULL, 0, 0) == SELSCAN_OK, "%s %d: backward status", what, id);
    CU(cudaDeviceSynchronize());
}

/* Infinities the pads must not turn into NaN, on every form, each output's class (+inf, -inf, NaN, finite) element by
   element the CPU reference's. Modes: 0 an infinite x (the forward), then x 1 and an infinite dy (the backward), with
   B = C = 1 and z = 1, D absent or 0.5: y, dx, dz +inf (0 x once made them NaN: without D no term, >>ssd-api; the
   walks' pad states made them NaN at dstate 1); 1 an infinite B, 2 an infinite C at one (step, state), headdim 1:
   dC, dB (the walks' pad channels, x = dy0 = 0 there, made them NaN). dstate 1 (the walks) and 64 (the chunks where
   the mode takes them; the backward's flag sends an infinity to the walks). */
static void inf_cases() {
    const selscan_dtype dts[3] = {SELSCAN_F32, SELSCAN_F16, SELSCAN_BF16};
    for (int ci = 0; ci < 24; ci++) {
        const selscan_dtype dt = dts[ci % 3];
        const bool hasD = ci / 3 % 2;
        const int N = ci / 6 % 2 ? 64 : 1, mode = ci < 12 ? 0 : ci < 18 ? 1 : 2, P = mode ? 1 : 2, L = mode ? 3 : 1;
        selscan_cuda_detail::ssd_ck_mode = N == 64 ? 1 : 0;
        selscan_ssd_problem p;
        memset(&p, 0, sizeof p);
        p.batch = p.nheads = p.n_groups = 1; p.seqlen = L; p.headdim = P; p.dstate = N; p.dtype = dt;
        Ten x, dtt, A, Bt, Ct, D, z, y, dy, dx, dz, dB, dC;
        const int64_t nx[4] = {1, L, 1, P}, ndt[3] = {1, L, 1}, nh[1] = {1}, nbc[4] = {1, L, 1, N};
        auto make_set = [](Ten &t, selscan_dtype d, int nd, const int64_t *n, float v) {
            make(t, d, nd, n, NULL, 0, false);
            for (int64_t i = 0; i < t.count(); i++) t.set(i, v);
        };
        make_set(x, dt, 4, nx, 1.0f);
        make_set(dtt, dt, 3, ndt, 0.5f);
        make_set(A, SELSCAN_F32, 1, nh, -1.0f);
        make_set(Bt, dt, 4, nbc, 1.0f);
        make_set(Ct, dt, 4, nbc, 1.0f);
        if (hasD) make_set(D, SELSCAN_F32, 1, nh, 0.5f);
        make_set(z, dt, 4, nx, 1.0f);
        make_set(dy, dt, 4, nx, 1.0f);
        make(y, dt, 4, nx, NULL, 0, false);
        make(dx, dt, 4, nx, NULL, 0, false);
        make(dz, dt, 4, nx, NULL, 0, false);
        make(dB, dt, 4, nbc, NULL, 0, false);
        make(dC, dt, 4, nbc, NULL, 0, false);
        if (mode == 0) x.set(0, INFINITY);
        if (mode == 1) Bt.set(0, INFINITY);
        if (mode == 2) Ct.set(0, INFINITY);
        Ten *ins[] = {&x, &dtt, &A, &Bt, &Ct, &D, &z, &dy};
        auto problem = [&](bool dev) {
            selscan_ssd_problem q = p;
            q.x = x.api(dev); q.dt = dtt.api(dev); q.A = A.api(dev); q.B = Bt.api(dev); q.C = Ct.api(dev);
            q.D = D.api(dev); q.z = z.api(dev); q.y = y.out(dev);
            return q;
        };
        auto compare = [&](const Ten &t, const char *name, bool want_pinf) {
            const std::vector<unsigned char> got = t.down();
            int64_t bad = 0, first = -1;
            for (int64_t i = 0; i < t.count(); i++)
                if (tc_class(t.get(got.data(), i)) != tc_class(t.get(t.h, i)) && bad++ == 0) first = i;
            CHECK(bad == 0, "inf case %d (mode %d, dt %d, N %d, D %d): %s: %lld elements not the reference's class, the first [%lld] %g, the reference's %g",
                  ci, mode, (int)dt, N, (int)hasD, name, (long long)bad, (long long)first, first >= 0 ? t.get(got.data(), first) : 0.0,
                  first >= 0 ? t.get(t.h, first) : 0.0);
            if (want_pinf) CHECK(tc_class(t.get(t.h, 0)) == 1, "inf case %d: the reference's %s[0] %g, not +inf", ci, name, t.get(t.h, 0));
        };
        std::vector<void *> allocs;
        selscan_cuda_ext ext;
        memset(&ext, 0, sizeof ext);
        ext.workspace_alloc = test_alloc; ext.workspace_ctx = &allocs;
        std::vector<unsigned char> ws(1 << 20);
        for (Ten *t : ins) t->up();
        selscan_ssd_problem ph = problem(false), pd = problem(true);
        both_forward("inf case", ci, ph, pd, y, &ext, ws);
        if (mode == 0 || N == 1) compare(y, "y", mode == 0); /* (the opt-in chunked forward: an infinite B or C times a 0 entering
                                                               state is NaN there, as >>ssd-chunk allows) */
        if (mode == 0) { x.set(0, 1.0f); dy.set(0, INFINITY); x.up(); dy.up(); }
        both_backward("inf case", ci, problem(false), problem(true), dy, dx, dz, dB, dC, &ext, ws);
        compare(dx, "dx", mode == 0);
        compare(dz, "dz", mode == 0);
        compare(dB, "dB", false);
        compare(dC, "dC", false);
        for (void *a : allocs) cudaFree(a);
        for (Ten *t : ins) t->release();
        y.release(); dx.release(); dz.release(); dB.release(); dC.release();
    }
    selscan_cuda_detail::ssd_ck_mode = -1; /* the default again */
}

/* A sum above float's range from finite inputs, which the weight applied after it brings back (SSD-CUDA-v29): bf16,
   the chunks forced, two chunks of 64 steps, headdim 64, dstate 64, dt 1, A -10 (each step's decay e^-10). Step 60: x
   1e36; 61: B 1e36; 63: x = B = 1e18, C 1e-6 (the state leaving chunk 0 about 1e36, finite); chunk 1: C 1e4. Without a
   gate (dy 1e4 in chunk 1) the tensor cores' C Sin^T (forward) and dy0 Sin (dC) reach 6.4e41 before exp(a(0..t)) <=
   e^-10 weighs them, x^T Go (dB at step 60) and B Go^T (dx at 61) 2.9e41 before w(s) <= e^-20; with z = 1 (dy 1 in
   chunk 1) dz's C Sin^T reaches 6.4e41 before exp(a(0..t)). Each at ssd_ckb_tc 2 (the tensor-core body) and 0 (the
   float32 units' body: its B Go^T). Every output finite in the reference (y up to 6.4e37, dC 2.9e37); y, dx, dB, dC
   (and dz) against it (relative L2, bf16's rounding: 1e-2), every element finite. Case 4, the forward alone (SSD-CUDA-v30):
   A -1, dt 1e-5 at step 10 (else 1), B 1e20 at 10, C 1e20 at 11: C B^T 6.4e41 before dt(10) weighs it (y(11) 2.4e36),
   the chunks hand the call to the walk (the workspace's flag read: 1 there, 0 in cases 0-3); case 5, case 4 on the
   chunks' float32 units (ssd_ck_mode 2). */
static void overflow_cases() {
    selscan_cuda_detail::ssd_ckb_mode = 1;
    const int64_t L = 128, P = 64, N = 64;
    for (int cfg = 0; cfg < 6; cfg++) {
        const bool gated = cfg == 2 || cfg == 3, cb = cfg >= 4;
        selscan_cuda_detail::ssd_ck_mode = cfg == 5 ? 2 : 1; /* (5: case 4 on the float32 units' path) */
        selscan_cuda_detail::ssd_ckb_tc = cfg % 2 ? 0 : 2; /* (case 4: the forward alone) */
        selscan_ssd_problem p;
        memset(&p, 0, sizeof p);
        p.batch = p.nheads = p.n_groups = 1; p.seqlen = L; p.headdim = P; p.dstate = N; p.dtype = SELSCAN_BF16;
        Ten x, dtt, A, Bt, Ct, z, y, dy, dx, dB, dC, dz;
        const int64_t nx[4] = {1, L, 1, P}, ndt[3] = {1, L, 1}, nh[1] = {1}, nbc[4] = {1, L, 1, N};
        make(x, SELSCAN_BF16, 4, nx, NULL, 0, false);
        make(dtt, SELSCAN_BF16, 3, ndt, NULL, 0, false);
        make(A, SELSCAN_F32, 1, nh, NULL, 0, false);
        make(Bt, SELSCAN_BF16, 4, nbc, NULL, 0, false);
        make(Ct, SELSCAN_BF16, 4, nbc, NULL, 0, false);
        make(dy, SELSCAN_BF16, 4, nx, NULL, 0, false);
        make(y, SELSCAN_BF16, 4, nx, NULL, 0, false);
        make(dx, SELSCAN_BF16, 4, nx, NULL, 0, false);
        make(dB, SELSCAN_BF16, 4, nbc, NULL, 0, false);
        make(dC, SELSCAN_BF16, 4, nbc, NULL, 0, false);
        if (gated) {
            make(z, SELSCAN_BF16, 4, nx, NULL, 0, false);
            make(dz, SELSCAN_BF16, 4, nx, NULL, 0, false);
            for (int64_t i = 0; i < z.count(); i++) z.set(i, 1.0f);
        }
        A.set(0, cb ? -1.0f : -10.0f);
        for (int64_t t = 0; t < L; t++) {
            dtt.set(t, cb && t == 10 ? 1e-5f : 1.0f);
            float xv = t == 60 ? 1e36f : t == 63 ? 1e18f : 1.0f, bv = t == 61 ? 1e36f : t == 63 ? 1e18f : 1e-3f;
            float cv = t >= 64 ? 1e4f : t == 63 ? 1e-6f : 1.0f;
            const float gv = t < 64 ? 0.0f : gated ? 1.0f : 1e4f;
            if (cb) {
                xv = 1.0f;
                bv = t == 10 ? 1e20f : 1.0f;
                cv = t == 11 ? 1e20f : 1.0f;
            }
            for (int64_t i = 0; i < P; i++) { x.set(t * P + i, xv); dy.set(t * P + i, gv); }
            for (int64_t n = 0; n < N; n++) { Bt.set(t * N + n, bv); Ct.set(t * N + n, cv); }
        }
        Ten *ins[] = {&x, &dtt, &A, &Bt, &Ct, &z, &dy};
        for (Ten *t : ins) t->up();
        auto problem = [&](bool dev) {
            selscan_ssd_problem q = p;
            q.x = x.api(dev); q.dt = dtt.api(dev); q.A = A.api(dev); q.B = Bt.api(dev); q.C = Ct.api(dev); q.z = z.api(dev);
            q.y = y.out(dev);
            return q;
        };
        auto check = [&](const Ten &t, const char *name) {
            const std::vector<unsigned char> got = t.down();
            int64_t nonfinite = 0;
            for (int64_t i = 0; i < t.count(); i++) nonfinite += !isfinite(t.get(t.h, i));
            CHECK(nonfinite == 0, "overflow case %d: the reference's %s has %lld values not finite (not the corner it means)", cfg, name, (long long)nonfinite);
            const double e = rel_err(t, got.data(), t.h, false);
            CHECK(e <= 1e-2, "overflow case %d (gated %d, ssd_ckb_tc %d): %s rel err %.3g > 1e-2 (a sum above float's range before its weight?)", cfg,
                  (int)gated, selscan_cuda_detail::ssd_ckb_tc, name, e);
        };
        std::vector<void *> allocs;
        selscan_cuda_ext ext;
        memset(&ext, 0, sizeof ext);
        ext.workspace_alloc = test_alloc; ext.workspace_ctx = &allocs;
        std::vector<unsigned char> ws(1 << 22);
        selscan_ssd_problem ph = problem(false), pd = problem(true);
        both_forward("overflow case", cfg, ph, pd, y, &ext, ws);
        check(y, "y");
        {
            selscan__sprob sq;
            selscan_cuda_detail::ssd_ck_plan ck;
            const bool chunked = selscan__ssd_validate_forward(&pd, &sq, NULL, 0, NULL, 0) == SELSCAN_OK && selscan_cuda_detail::ssd_ck_takes(sq, &ext, ck);
            CHECK(chunked, "overflow case %d: not in chunks", cfg);
            /* the forward's C Sin^T (0-3) stays in the chunks (the float32 units); C B^T (4, 5) goes to the walk */
            if (chunked) CHECK(ck_fwd_flag(allocs, ck) == (cb ? 1 : 0), "overflow case %d: the hand-off flag %d", cfg, ck_fwd_flag(allocs, ck));
        }
        if (!cb) {
            both_backward("overflow case", cfg, ph, pd, dy, dx, dz, dB, dC, &ext, ws);
            check(dx, "dx");
            check(dB, "dB");
            check(dC, "dC");
            if (gated) check(dz, "dz");
        }
        for (void *a : allocs) cudaFree(a);
        for (Ten *t : ins) t->release();
        y.release(); dx.release(); dB.release(); dC.release(); dz.release();
    }
    selscan_cuda_detail::ssd_ck_mode = -1; /* the defaults again */
    selscan_cuda_detail::ssd_ckb_mode = 1;
    selscan_cuda_detail::ssd_ckb_tc = 2;
}

/* A bf16 forward the chunks take by default (dstate 64) whose ext->workspace_alloc answers NULL: SELSCAN_ERR_WORKSPACE
   after one ask, nothing launched (y's poisoned bytes untouched: >>ssd-api); where the device's shared memory holds no
   chunk block, the walk runs and never asks */
static int g_null_asks = 0;
static void *null_alloc(void *, size_t) {
    g_null_asks++;
    return NULL;
}
static void refused_forward_workspace() {
    const int64_t L = 64, P = 64, N = 64, nx = L * P, nbc = L * N;
    void *x = NULL, *dt = NULL, *A = NULL, *B = NULL, *C = NULL, *y = NULL;
    CU(cudaMalloc(&x, 2 * nx)); CU(cudaMalloc(&y, 2 * nx)); CU(cudaMalloc(&dt, 2 * L)); CU(cudaMalloc(&A, 4));
    CU(cudaMalloc(&B, 2 * nbc)); CU(cudaMalloc(&C, 2 * nbc));
    CU(cudaMemset(x, 0, 2 * nx)); CU(cudaMemset(dt, 0, 2 * L)); CU(cudaMemset(A, 0, 4)); CU(cudaMemset(B, 0, 2 * nbc));
    CU(cudaMemset(C, 0, 2 * nbc)); CU(cudaMemset(y, 0x7f, 2 * nx));
    selscan_ssd_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 1; p.seqlen = L; p.nheads = 1; p.headdim = P; p.dstate = N; p.n_groups = 1; p.dtype = SELSCAN_BF16;
    p.x.data = x; p.dt.data = dt; p.A.data = A; p.B.data = B; p.C.data = C; p.y.data = y;
    selscan_cuda_ext ext;
    memset(&ext, 0, sizeof ext);
    ext.workspace_alloc = null_alloc;
    selscan_cuda_detail::ssd_ck_mode = -1;
    g_null_asks = 0;
    const selscan_status st = selscan_ssd_forward_cuda(&p, &ext, 0);
    CU(cudaDeviceSynchronize());
    std::vector<unsigned char> got(2 * nx);
    CU(cudaMemcpy(got.data(), y, got.size(), cudaMemcpyDeviceToHost));
    bool untouched = true;
    for (unsigned char c : got) untouched = untouched && c == 0x7f;
    CHECK(g_null_asks == 1 ? st == SELSCAN_ERR_WORKSPACE && untouched : g_null_asks == 0 && st == SELSCAN_OK,
          "a refused forward workspace: %s, asked %d time(s), y %s", selscan_status_name(st), g_null_asks, untouched ? "untouched" : "written");
    for (void *a : {x, dt, A, B, C, y}) cudaFree(a);
}

int main() {
    host_checks();
    plan_checks();
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) return report_no_gpu("test_cuda_ssd");
    const bool quick = getenv("SELSCAN_TEST_QUICK") != NULL;
    const int ncases = getenv("SELSCAN_TEST_CASES") ? atoi(getenv("SELSCAN_TEST_CASES")) : quick ? 60 : 400;
    refused_forward_workspace();
    for (int ci = 0; ci < ncases; ci++) run_case(ci, quick);
    const int caps[2] = {65536, 101376}, capN[4] = {64, 128, 256, 512};
    for (int c = 0; c < 2; c++) {
        g_cap = selscan_cuda_detail::ssd_smem_cap_test = caps[c];
        for (int i = 0; i < (quick ? 12 : 40); i++) {
            g_force_N = capN[i % 4];
            g_force_P = i == 3 ? 64 : 0; /* dstate 512, headdim 64: refused at 64 KiB, run at 99 KiB */
            run_case(ncases + c * 100 + i, quick);
        }
    }
    CHECK(g_refusals > 0, "the 64 KiB cases ran no refused backward");
    g_cap = selscan_cuda_detail::ssd_smem_cap_test = g_force_N = g_force_P = 0;
    /* 66: the partials' rows not float4; 99: odd (the tensor-core body's pairs a float at a time) */
    const int ckN[7] = {48, 64, 100, 128, 66, 99, 0}, ckP[4] = {64, 0, 130, 0};
    g_force_chunk = 1;
    for (int i = 0; i < (quick ? 30 : 120); i++) {
        g_force_N = ckN[i % 7];
        g_force_P = ckP[i % 4];
        run_case(ncases + 300 + i, quick);
    }
    g_force_chunk = g_force_N = g_force_P = 0;
    g_force_nanstart = 1;
    for (int i = 0; i < (quick ? 8 : 24); i++) run_case(ncases + 500 + i, quick);
    g_force_nanstart = 0;
    inf_cases();
    overflow_cases();
    selscan_cuda_detail::ssd_ck_mode = -1;
    selscan_cuda_detail::ssd_ckb_mode = 1; /* the defaults again */
    selscan_cuda_detail::ssd_ckb_tc = 2;
    CHECK(g_chunked > 0, "no forward ran in chunks");
    /* (a device whose shared memory holds no chunk block, sm_86 / sm_89, runs the walks alone) */
    CHECK(g_ckb_fit == 0 || (g_ckb > 0 && g_ckb_walked > 0), "backwards in chunks %d, sent to the walks by a value not finite %d", g_ckb, g_ckb_walked);
    printf("test_cuda_ssd: %d forwards in chunks, %d backwards in chunks, %d sent to the walks by a value not finite\n", g_chunked, g_ckb, g_ckb_walked);
    printf("test_cuda_ssd: worst relative errors:");
    for (int i = 0; i < 11; i++) printf(" %s %.2g", g_names[i], g_worst.v[i]);
    for (int d = 0; d < 3; d++) {
        printf("\ntest_cuda_ssd: the chunked backwards' worst relative errors, %s:", d == 0 ? "f32" : d == 1 ? "f16" : "bf16");
        for (int i = 0; i < 9; i++) printf(" %s %.2g", g_names[2 + i], g_worst_ckb[d][i]);
    }
    printf("\n%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
