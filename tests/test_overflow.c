/* test_overflow: size arithmetic that cannot wrap (workspace, parts, checkpoint sizes of huge
   broadcast shapes are refused with SELSCAN_ERR_SHAPE or reported exactly, never wrapped; a
   wrapped size accepted with a small workspace wrote far past it), misaligned tensors / offsets
   refused with SELSCAN_ERR_STRIDE / SELSCAN_ERR_SHAPE before anything is read, and errno kept
   (expf overflow in the reference set ERANGE). Findings of tests/fuzz (libFuzzer) and issue 21. */
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
            selscan_diag dg = {NULL, NULL};
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
        selscan_diag dg = {NULL, NULL};
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
    return tc_finish();
}
