/* test_overflow: size arithmetic that cannot wrap (workspace, parts, checkpoint sizes of huge
   broadcast shapes are refused with SELSCAN_ERR_SHAPE or reported exactly, never wrapped; a
   wrapped size accepted with a small workspace wrote far past it), misaligned tensors / offsets
   refused with SELSCAN_ERR_STRIDE / SELSCAN_ERR_SHAPE before anything is read, and errno kept
   (expf overflow in the reference set ERANGE), and no pointer formed outside a tensor when a
   stride is huge (a size-1 dimension may have any stride: the step advanced its state and A
   pointers by the channel stride past the last channel, UBSan pointer-overflow; issue 21 item 5).
   Findings of tests/fuzz (libFuzzer) and issue 21. */
#define SELSCAN_IMPLEMENTATION
#include "../selscan.h"
#include "common.h"
#include <errno.h>

static float one[64] __attribute__((aligned(64)));
static float yb[64] __attribute__((aligned(64)));

/* a problem of logical size (1, 1, L, N) from one-element inputs (zero strides) */
static void huge_problem(selscan_problem *p, int64_t L, int64_t N) {
    memset(p, 0, sizeof *p);
    p->batch = 1; p->dim = 1; p->seqlen = L; p->dstate = N; p->dtype = SELSCAN_F32;
    p->u.data = one; p->u.stride[2] = L > 1 ? 0 : 1; p->u.stride[0] = 1;
    p->delta = p->u;
    p->A.data = one; p->A.stride[0] = 1;              /* (1, N): N stride 0 */
    p->B.data = one; p->B.stride[0] = 1;              /* (1, 1, N, L): stride 0 over N and L */
    p->C = p->B;
    p->y.data = yb; p->y.stride[2] = 1; p->y.stride[0] = 1; /* (1, 1, L) */
}

/* Step, forward and backward with dim = 1 and every channel stride 2^61 elements (2^63 bytes:
   any pointer formed one channel on overflows), batch 2, on every vector path this CPU runs,
   against the reference. N: 16 (the step's common layout: a multiple of every W, contiguous
   state and A rows), 5 (the general loop); fixed: B and C (dim, N) with the huge stride too. */
static void huge_channel_stride(int64_t N, int fixed, int isa) {
    const int64_t H = (int64_t)1 << 61;
    static float st0[2 * 64], st[2 * 64], st_ref[2 * 64], A[64], B[2 * 64], C[2 * 64], u[2], dl[2], z[2], D[1], bias[1];
    static float y[2], y_ref[2];
    selscan_step_problem s;
    selscan_status r;
    int64_t i;
    for (i = 0; i < 2 * N; i++) {
        st0[i] = (float)tc_uniform(-1, 1);
        B[i] = (float)tc_uniform(-1, 1);
        C[i] = (float)tc_uniform(-1, 1);
    }
    for (i = 0; i < N; i++) A[i] = (float)-exp(tc_uniform(-2, 1));
    for (i = 0; i < 2; i++) { u[i] = (float)tc_uniform(-2, 2); dl[i] = (float)tc_uniform(-2, 1); z[i] = (float)tc_uniform(-2, 2); }
    D[0] = 0.5f; bias[0] = 0.25f;
    memset(&s, 0, sizeof s);
    s.batch = 2; s.dim = 1; s.dstate = N; s.dtype = SELSCAN_F32; s.flags = SELSCAN_DELTA_SOFTPLUS;
    if (fixed) s.flags |= SELSCAN_FIXED_B | SELSCAN_FIXED_C;
    s.state.data = st; s.state.stride[0] = N; s.state.stride[1] = H; s.state.stride[2] = 1;
    s.u.data = u; s.u.stride[0] = 1; s.u.stride[1] = H;
    s.delta.data = dl; s.delta.stride[0] = 1; s.delta.stride[1] = H;
    s.z.data = z; s.z.stride[0] = 1; s.z.stride[1] = H;
    s.y.data = y; s.y.stride[0] = 1; s.y.stride[1] = H;
    s.A.data = A; s.A.stride[0] = H; s.A.stride[1] = 1;
    if (fixed) {
        s.B.data = B; s.B.stride[0] = H; s.B.stride[1] = 1;
        s.C.data = C; s.C.stride[0] = H; s.C.stride[1] = 1;
    } else { /* (batch, n_groups 1, N): the group stride huge */
        s.B.data = B; s.B.stride[0] = N; s.B.stride[1] = H; s.B.stride[2] = 1;
        s.C.data = C; s.C.stride[0] = N; s.C.stride[1] = H; s.C.stride[2] = 1;
    }
    s.D.data = D; s.D.stride[0] = H;
    s.delta_bias.data = bias; s.delta_bias.stride[0] = H;
    memcpy(st, st0, sizeof st);
    r = selscan_step_ref(&s);
    CHECK(r == SELSCAN_OK, "huge channel stride: step_ref N=%lld fixed %d: %s", (long long)N, fixed, selscan_status_string(r));
    memcpy(st_ref, st, sizeof st);
    memcpy(y_ref, y, sizeof y);
    memcpy(st, st0, sizeof st);
    r = selscan__step_fast(&s, 0, 1, isa);
    CHECK(r == SELSCAN_OK, "huge channel stride: step isa %d N=%lld fixed %d: %s", isa, (long long)N, fixed, selscan_status_string(r));
    for (i = 0; i < 2 * N; i++)
        if (!CHECK(fabsf(st[i] - st_ref[i]) <= 1e-5f * (1 + fabsf(st_ref[i])), "huge channel stride: step isa %d N=%lld state[%lld] %g vs %g",
                   isa, (long long)N, (long long)i, st[i], st_ref[i])) break;
    for (i = 0; i < 2; i++)
        CHECK(fabsf(y[i] - y_ref[i]) <= 1e-5f * (1 + fabsf(y_ref[i])), "huge channel stride: step isa %d N=%lld y[%lld] %g vs %g", isa,
              (long long)N, (long long)i, y[i], y_ref[i]);
    { /* forward and backward of the same layout, L = 3: (batch, dim, L) with the dim stride huge */
        static float fu[6], fdl[6], fz[6], fy[6], fy_ref[6], fB[6 * 64], fC[6 * 64], dy[6], du[6], du_ref[6], dA[64], dA_ref[64];
        static unsigned char ws[1 << 20] __attribute__((aligned(64)));
        selscan_problem p;
        selscan_grads g;
        size_t bytes = 0;
        const int64_t L = 3;
        for (i = 0; i < 6; i++) { fu[i] = (float)tc_uniform(-2, 2); fdl[i] = (float)tc_uniform(-2, 1); fz[i] = (float)tc_uniform(-2, 2); dy[i] = (float)tc_uniform(-1, 1); }
        for (i = 0; i < 6 * N; i++) { fB[i] = (float)tc_uniform(-1, 1); fC[i] = (float)tc_uniform(-1, 1); }
        memset(&p, 0, sizeof p);
        p.batch = 2; p.dim = 1; p.seqlen = L; p.dstate = N; p.dtype = SELSCAN_F32; p.flags = s.flags;
        p.u.data = fu; p.u.stride[0] = L; p.u.stride[1] = H; p.u.stride[2] = 1;
        p.delta = p.u; p.delta.data = fdl;
        p.z = p.u; p.z.data = fz;
        p.y.data = fy; p.y.stride[0] = L; p.y.stride[1] = H; p.y.stride[2] = 1;
        p.A = s.A; p.D = s.D; p.delta_bias = s.delta_bias;
        if (fixed) { p.B = s.B; p.C = s.C; }
        else {
            p.B.data = fB; p.B.stride[0] = N * L; p.B.stride[1] = H; p.B.stride[2] = L; p.B.stride[3] = 1;
            p.C = p.B; p.C.data = fC;
        }
        memset(&g, 0, sizeof g);
        g.dy.data = dy; g.dy.stride[0] = L; g.dy.stride[1] = H; g.dy.stride[2] = 1;
        g.du.data = du; g.du.stride[0] = L; g.du.stride[1] = H; g.du.stride[2] = 1;
        g.dA.data = dA; g.dA.stride[0] = H; g.dA.stride[1] = 1;
        r = selscan_workspace_size_parts(&p, &g, 1, &bytes);
        CHECK(r == SELSCAN_OK && bytes <= sizeof ws, "huge channel stride: workspace %s %zu", selscan_status_string(r), bytes);
        if (r != SELSCAN_OK || bytes > sizeof ws) return;
        r = selscan_forward_ref(&p, ws, bytes);
        memcpy(fy_ref, fy, sizeof fy);
        if (r == SELSCAN_OK) r = selscan__forward_fast(&p, 0, 1, ws, bytes, isa, NULL, 0);
        CHECK(r == SELSCAN_OK, "huge channel stride: forward isa %d: %s", isa, selscan_status_string(r));
        for (i = 0; i < 6; i++)
            CHECK(fabsf(fy[i] - fy_ref[i]) <= 1e-5f * (1 + fabsf(fy_ref[i])), "huge channel stride: forward isa %d N=%lld y[%lld] %g vs %g",
                  isa, (long long)N, (long long)i, fy[i], fy_ref[i]);
        r = selscan_backward_ref(&p, &g, ws, bytes);
        memcpy(du_ref, du, sizeof du);
        memcpy(dA_ref, dA, sizeof dA);
        if (r == SELSCAN_OK) r = selscan__backward_fast(&p, &g, 0, 1, ws, bytes, isa, NULL, 0);
        if (r == SELSCAN_OK) r = selscan__backward_reduce(&p, &g, 0, 1, ws, bytes);
        CHECK(r == SELSCAN_OK, "huge channel stride: backward isa %d: %s", isa, selscan_status_string(r));
        for (i = 0; i < 6; i++)
            CHECK(fabsf(du[i] - du_ref[i]) <= 1e-4f * (1 + fabsf(du_ref[i])), "huge channel stride: backward isa %d N=%lld du[%lld] %g vs %g",
                  isa, (long long)N, (long long)i, du[i], du_ref[i]);
        for (i = 0; i < N; i++)
            CHECK(fabsf(dA[i] - dA_ref[i]) <= 1e-4f * (1 + fabsf(dA_ref[i])), "huge channel stride: backward isa %d N=%lld dA[%lld] %g vs %g",
                  isa, (long long)N, (long long)i, dA[i], dA_ref[i]);
    }
}

int main(void) {
    selscan_problem p;
    selscan_grads g;
    size_t bytes;
    selscan_status st;
    int64_t N;
    tc_init("test_overflow");
    /* forward: N large, workspace (about 4 KiB * N) must not wrap */
    for (N = (int64_t)1 << 40; N <= ((int64_t)1 << 58); N = N < ((int64_t)1 << 52) ? N << 6 : ((int64_t)1 << 58) + 1) {
        huge_problem(&p, 4, N);
        bytes = 0;
        st = selscan_workspace_size(&p, NULL, &bytes);
        CHECK(st == SELSCAN_ERR_SHAPE || (st == SELSCAN_OK && bytes >= (size_t)N * 4), "forward N=%lld: status %d bytes %zu", (long long)N, (int)st, bytes);
        st = selscan_workspace_size_parts(&p, NULL, 1 << 24, &bytes);
        CHECK(st == SELSCAN_ERR_SHAPE, "parts N=%lld: status %d bytes %zu", (long long)N, (int)st, bytes);
        {
            static unsigned char ws[8192] __attribute__((aligned(64)));
            st = selscan_forward_cpu(&p, ws, sizeof ws);
            CHECK(st == SELSCAN_ERR_SHAPE || st == SELSCAN_ERR_WORKSPACE, "forward N=%lld accepted a %zu-byte workspace (status %d)", (long long)N, sizeof ws, (int)st);
            st = selscan_forward_cpu(&p, NULL, 0);
            CHECK(st != SELSCAN_OK, "forward N=%lld accepted no workspace", (long long)N);
        }
        st = selscan_checkpoint_size(&p, &bytes);
        CHECK(st == SELSCAN_ERR_SHAPE || (st == SELSCAN_OK && bytes >= (size_t)N * 8), "checkpoint N=%lld: %d %zu", (long long)N, (int)st, bytes);
    }
    /* backward: N * L large (dB / dC accumulators), outputs small (dA of (1, N) broadcast is not an output: dB only) */
    {
        static float dB[64] __attribute__((aligned(64)));
        static float dy[64] __attribute__((aligned(64)));
        huge_problem(&p, (int64_t)1 << 30, (int64_t)1 << 30);
        p.y.data = NULL;
        memset(&g, 0, sizeof g);
        g.dy.data = dy; g.dy.stride[0] = 1; /* (1, 1, L): stride 0 over L */
        g.dB.data = dB; g.dB.stride[0] = 1; g.dB.stride[1] = 1; g.dB.stride[2] = 0; g.dB.stride[3] = 0;
        st = selscan_workspace_size(&p, &g, &bytes);
        CHECK(st != SELSCAN_OK || bytes >= ((size_t)1 << 62), "backward N*L=2^60: status %d bytes %zu (wrapped)", (int)st, bytes);
        st = selscan_backward_cpu(&p, &g, NULL, 0);
        CHECK(st != SELSCAN_OK, "backward N*L=2^60 accepted a NULL workspace");
        st = selscan_backward_ref(&p, &g, NULL, 0);
        CHECK(st != SELSCAN_OK, "backward_ref N*L=2^60 accepted a NULL workspace");
    }
    /* the byte-range overlap test near the top of the address space: an end address formed as
       start + bytes wraps there (the old test said "no overlap" for these); addresses only, never
       dereferenced */
    if (sizeof(uintptr_t) == 8) {
        const void *top = (const void *)(uintptr_t)0xFFFFFFFFFFFFF000ull, *low = (const void *)(uintptr_t)0x1000;
        CHECK(selscan__overlap(top, 0x2000, (const void *)(uintptr_t)0xFFFFFFFFFFFFF800ull, 16), "overlap: a range ending past the top");
        CHECK(selscan__overlap(low, 16, top, INT64_MAX) == 0, "overlap: disjoint, the higher one huge");
        CHECK(selscan__overlap(top, INT64_MAX, low, 16) == 0, "overlap: disjoint, the higher one huge (swapped)");
        CHECK(selscan__overlap((const void *)(uintptr_t)0x8000000000000000ull, INT64_MAX, top, 16), "overlap: a huge range from 2^63 covers top");
        CHECK(selscan__overlap(low, 16, (const char *)low + 16, 16) == 0 && selscan__overlap(low, 17, (const char *)low + 16, 16),
              "overlap: adjacent ranges");
    }
    /* checkpoint size beyond 64 bits: batch * dim * slots * N * 4 */
    {
        huge_problem(&p, (int64_t)1 << 20, (int64_t)1 << 38);
        st = selscan_checkpoint_size(&p, &bytes);
        CHECK(st == SELSCAN_ERR_SHAPE || bytes >= ((size_t)1 << 38) * 4 * 16385, "checkpoint size wrapped: %d %zu", (int)st, bytes);
    }
    /* misaligned float tensor refused */
    {
        static float u[64] __attribute__((aligned(64)));
        huge_problem(&p, 4, 4);
        p.u.data = (const char *)u + 2;
        CHECK(selscan_validate(&p) == SELSCAN_ERR_STRIDE, "misaligned u accepted");
        p.u.data = u;
        p.dtype = SELSCAN_BF16;
        p.u.data = (const char *)u + 1;
        CHECK(selscan_validate(&p) == SELSCAN_ERR_STRIDE, "misaligned bf16 u accepted");
        /* the error names the operand and the rule (selscan_diag) */
        {
            selscan_diag dg = {NULL, NULL, SELSCAN_RULE_NONE};
            p.diag = &dg;
            CHECK(selscan_validate(&p) == SELSCAN_ERR_STRIDE && dg.operand && !strcmp(dg.operand, "u") && dg.rule &&
                      !strcmp(dg.rule, "misaligned"), "misaligned u: diag %s / %s", dg.operand ? dg.operand : "(null)",
                  dg.rule ? dg.rule : "(null)");
            p.diag = NULL;
        }
    }
    /* a workspace size that overflows names the workspace; a misaligned *workspace* pointer is
       accepted (the size query's answer has the alignment slack), unlike misaligned tensors */
    {
        selscan_diag dg = {NULL, NULL, SELSCAN_RULE_NONE};
        static unsigned char ws[1 << 16] __attribute__((aligned(64)));
        huge_problem(&p, 4, (int64_t)1 << 55); /* passes the element-count check; its workspace does not fit */
        p.diag = &dg;
        st = selscan_workspace_size(&p, NULL, &bytes);
        CHECK(st == SELSCAN_ERR_SHAPE && dg.operand && !strcmp(dg.operand, "workspace") && dg.rule &&
                  !strcmp(dg.rule, "size overflows"), "workspace size overflow: status %d diag %s / %s", (int)st,
              dg.operand ? dg.operand : "(null)", dg.rule ? dg.rule : "(null)");
        dg.operand = dg.rule = NULL;
        st = selscan_forward_cpu(&p, ws, sizeof ws);
        CHECK(st == SELSCAN_ERR_SHAPE && dg.operand && !strcmp(dg.operand, "workspace"), "forward N=2^58: status %d diag %s",
              (int)st, dg.operand ? dg.operand : "(null)");
        huge_problem(&p, 4, 4);
        st = selscan_workspace_size(&p, NULL, &bytes);
        CHECK(st == SELSCAN_OK && bytes + 1 <= sizeof ws, "small problem: status %d bytes %zu", (int)st, bytes);
        st = selscan_forward_cpu(&p, ws + 1, bytes);
        CHECK(st == SELSCAN_OK, "a misaligned workspace pointer with the reported size refused: status %d", (int)st);
        st = selscan_forward_ref(&p, ws + 3, bytes);
        CHECK(st == SELSCAN_OK, "forward_ref: a misaligned workspace pointer refused: status %d", (int)st);
    }
    /* errno: the reference's expf overflow keeps the caller's errno */
    {
        static float big[64] __attribute__((aligned(64)));
        static float ws[1024] __attribute__((aligned(64)));
        int i;
        for (i = 0; i < 64; i++) big[i] = 100.0f;
        huge_problem(&p, 4, 4);
        p.A.data = big;  /* exp(dt * 100) overflows */
        p.delta.data = big;
        errno = 12345;
        st = selscan_forward_ref(&p, ws, sizeof ws);
        CHECK(st == SELSCAN_OK && errno == 12345, "forward_ref: status %d errno %d", (int)st, errno);
        p.flags = SELSCAN_DELTA_SOFTPLUS;
        errno = 12345;
        st = selscan_forward_ref(&p, ws, sizeof ws);
        CHECK(st == SELSCAN_OK && errno == 12345, "forward_ref softplus: status %d errno %d", (int)st, errno);
    }
    { /* huge channel strides: every vector path this CPU runs (selscan__use_isa lowers a request) */
        static const int isas[] = {SELSCAN__ISA_AVX512, SELSCAN__ISA_AVX2, SELSCAN__ISA_NEON, SELSCAN__ISA_PORTABLE};
        int k, last = -1;
        for (k = 0; k < 4; k++) {
            const int isa = selscan__use_isa(isas[k]);
            if (isa == last || (k > 0 && isa != isas[k])) continue;
            last = isa;
            huge_channel_stride(16, 0, isa);
            huge_channel_stride(5, 0, isa);
            huge_channel_stride(16, 1, isa);
            huge_channel_stride(8, 0, isa);
        }
    }
    return tc_finish();
}
