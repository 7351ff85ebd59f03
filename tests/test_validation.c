/* test_validation: every validation rule broken on purpose, through every entry point that reads
   it (selscan_forward_cpu/_ref, selscan_backward_cpu/_ref, selscan_step_cpu/_ref, selscan_validate,
   selscan_validate_grads, selscan_validate_step, selscan_workspace_size). Each case checks the
   exact status and that not one byte of any buffer the test owns changed (memcmp of snapshots of
   every tensor, the workspace arena, the sequence offsets and the state index). A few positive
   controls (allowed things: broadcast input strides, optional operands absent, adjacent but not
   overlapping buffers, padding indices repeated) must pass. Every error status must name an
   operand and a rule in the problem's selscan_diag, and nothing may be written there on OK
   (tests/test_api.c checks the names themselves for a table of cases). */
#include "../selscan.h" /* the implementation: tests/selscan_impl.c, linked by the Makefile */
#include "common.h"

/* ---------------------------------------------------------------- buffers and snapshots -- */
#define MAXBUF 128
static struct { void *p; size_t n; unsigned char *snap; } bufs[MAXBUF];
static int nbufs;

static void reg(void *p, size_t n) {
    if (!p || nbufs == MAXBUF) return;
    bufs[nbufs].p = p; bufs[nbufs].n = n; bufs[nbufs].snap = NULL; nbufs++;
}
static void reg_t(tc_tensor *t) {
    if (t->mem) reg(t->mem, (size_t)t->alloc * tc_esize(t->dt));
}
static void snap_all(void) {
    int i;
    for (i = 0; i < nbufs; i++) {
        free(bufs[i].snap);
        bufs[i].snap = (unsigned char *)malloc(bufs[i].n);
        memcpy(bufs[i].snap, bufs[i].p, bufs[i].n);
    }
}
static int same_all(void) {
    int i, ok = 1;
    for (i = 0; i < nbufs; i++) ok &= memcmp(bufs[i].snap, bufs[i].p, bufs[i].n) == 0;
    return ok;
}

/* ------------------------------------------------------------------------------ fixtures -- */
static tc_prob P, PK;   /* a full problem; a packed one */
static tc_grads G, GK;  /* all gradients + dh_last for each */
static unsigned char *arena; /* 64-aligned scratch: workspaces, then (from `place`) deliberately placed buffers */
static unsigned char *place;
static size_t arena_bytes;
static size_t wsf, wsb, wsfk, wsbk; /* valid workspace sizes */

static void fixture(tc_prob *X, tc_grads *Y, int packed, unsigned extra_flags) {
    tc_cfg c;
    memset(&c, 0, sizeof c);
    c.dt = SELSCAN_F32; c.batch = packed ? 1 : 2; c.dim = 4; c.L = packed ? 12 : 8; c.N = 3; c.G = 2;
    c.flags = SELSCAN_DELTA_SOFTPLUS | extra_flags;
    c.D = c.z = c.bias = c.h0 = c.hlast = 1;
    c.nseq = packed ? 3 : 0;
    c.layout = TC_LAYOUT_EXPLICIT;
    tc_prob_make(X, &c);
    if (packed) { X->cu[0] = 0; X->cu[1] = 4; X->cu[2] = 4; X->cu[3] = 12; }
    X->p.n_groups = 2;
    tc_grads_make(Y, X, TC_G_ALL, 1);
    reg_t(&X->u); reg_t(&X->delta); reg_t(&X->A); reg_t(&X->B); reg_t(&X->C); reg_t(&X->D); reg_t(&X->z);
    reg_t(&X->bias); reg_t(&X->h0); reg_t(&X->y); reg_t(&X->hlast);
    reg_t(&Y->dy); reg_t(&Y->dhlast); reg_t(&Y->du); reg_t(&Y->ddelta); reg_t(&Y->dA); reg_t(&Y->dB);
    reg_t(&Y->dC); reg_t(&Y->dD); reg_t(&Y->dz); reg_t(&Y->dbias); reg_t(&Y->dh0);
    if (packed) reg(X->cu, sizeof(int64_t) * 4);
}

/* --------------------------------------------------------------------------- expectations -- */
#define F_FWD 1   /* run the forward entry points */
#define F_BWD 2   /* run the backward entry points */
#define F_VAL 4   /* also selscan_validate* and selscan_workspace_size (rules they can see) */
#define F_NOREF 8 /* not the _ref entry points (a size relative to selscan_workspace_size, which
                     reports the larger need of the CPU path; the reference may need less) */

/* Checks that every entry point given in `which` returns `want` and writes nothing. */
/* Every error status names an operand and a rule in p->diag; nothing is written there on OK. */
static selscan_diag dg;
static const char *const dsent = "unset";
/* The rule code (and operand) every entry point of the next case must report (RULE(...) sets
   them; -1 / NULL: any). Every error also has a code whose text is the rule's (the overlap rules:
   "overlaps <operand>"). */
static int want_rule = -1;
static const char *want_operand;
#define RULE(code, operand, stmt) do { want_rule = (code); want_operand = (operand); stmt; want_rule = -1; want_operand = NULL; } while (0)
static void diag_reset(void) { dg.operand = dg.rule = dsent; dg.code = SELSCAN__RULE_COUNT; }
static void diag_check(const char *what, const char *fn, selscan_status st) {
    if (st == SELSCAN_OK) CHECK(dg.operand == dsent && dg.rule == dsent && dg.code == SELSCAN__RULE_COUNT, "%s: %s wrote diag on OK", what, fn);
    else {
        CHECK(dg.operand && dg.rule && dg.operand != dsent && dg.rule != dsent && *dg.operand && *dg.rule,
              "%s: %s returned '%s' without naming the operand", what, fn, selscan_status_string(st));
        CHECK(dg.code > SELSCAN_RULE_NONE && dg.code < SELSCAN__RULE_COUNT && dg.rule != dsent &&
                  (dg.code == SELSCAN_RULE_OVERLAPS ? strncmp(dg.rule, "overlaps ", 9) == 0
                                                    : strcmp(dg.rule, selscan_rule_string(dg.code)) == 0),
              "%s: %s: rule code %d does not match the rule '%s'", what, fn, (int)dg.code, dg.rule != dsent ? dg.rule : "");
        if (want_rule >= 0)
            CHECK(dg.code == (selscan_rule)want_rule, "%s: %s reported %s, want %s", what, fn, selscan_rule_name(dg.code),
                  selscan_rule_name((selscan_rule)want_rule));
        if (want_operand)
            CHECK(dg.operand != dsent && strcmp(dg.operand, want_operand) == 0, "%s: %s named operand '%s', want '%s'", what, fn,
                  dg.operand != dsent ? dg.operand : "", want_operand);
    }
    diag_reset();
}

static void expect(const char *what, const selscan_problem *p0, const selscan_grads *g, void *wsF, size_t bF, void *wsB,
                   size_t bB, int which, selscan_status want) {
    selscan_status st;
    size_t bytes;
    selscan_problem pd;
    const selscan_problem *p = p0;
    if (p0) { pd = *p0; pd.diag = &dg; p = &pd; }
    diag_reset();
#define DG(fn) if (p0) diag_check(what, fn, st)
    snap_all();
    if (which & F_FWD) {
        st = selscan_forward_cpu(p, wsF, bF);
        CHECK(st == want, "%s: forward_cpu returned '%s', want '%s'", what, selscan_status_string(st), selscan_status_string(want));
        DG("forward_cpu");
        if (!(which & F_NOREF)) {
            st = selscan_forward_ref(p, wsF, bF);
            CHECK(st == want, "%s: forward_ref returned '%s', want '%s'", what, selscan_status_string(st), selscan_status_string(want));
            DG("forward_ref");
        }
        if (which & F_VAL) {
            st = selscan_validate(p);
            CHECK(st == want, "%s: validate returned '%s', want '%s'", what, selscan_status_string(st), selscan_status_string(want));
            DG("validate");
            bytes = 12345;
            st = selscan_workspace_size(p, NULL, &bytes);
            DG("workspace_size");
            CHECK(st == want && (want == SELSCAN_OK || bytes == 12345), "%s: workspace_size(forward) returned '%s', want '%s'",
                  what, selscan_status_string(st), selscan_status_string(want));
        }
    }
    if (which & F_BWD) {
        st = selscan_backward_cpu(p, g, wsB, bB);
        CHECK(st == want, "%s: backward_cpu returned '%s', want '%s'", what, selscan_status_string(st), selscan_status_string(want));
        DG("backward_cpu");
        if (!(which & F_NOREF)) {
            st = selscan_backward_ref(p, g, wsB, bB);
            CHECK(st == want, "%s: backward_ref returned '%s', want '%s'", what, selscan_status_string(st), selscan_status_string(want));
            DG("backward_ref");
        }
        if (which & F_VAL) {
            st = selscan_validate_grads(p, g);
            CHECK(st == want, "%s: validate_grads returned '%s', want '%s'", what, selscan_status_string(st), selscan_status_string(want));
            DG("validate_grads");
            bytes = 12345;
            st = selscan_workspace_size(p, g, &bytes);
            DG("workspace_size");
            CHECK(st == want && (want == SELSCAN_OK || bytes == 12345), "%s: workspace_size(backward) returned '%s', want '%s'",
                  what, selscan_status_string(st), selscan_status_string(want));
        }
    }
    if (want != SELSCAN_OK) CHECK(same_all(), "%s: a byte changed although the call failed", what);
#undef DG
}

/* Forward/backward on the main fixture with valid workspaces in the arena. */
static void ex(const char *what, const selscan_problem *p, const selscan_grads *g, int which, selscan_status want) {
    expect(what, p, g, arena, wsf, arena, wsb, which, want);
}

#define PROB(stmt) do { selscan_problem p = P.p; selscan_grads g = G.g; (void)g; stmt; } while (0)
#define PACK(stmt) do { selscan_problem p = PK.p; selscan_grads g = GK.g; (void)g; stmt; } while (0)

static void problem_rules(void) {
    const int ALL = F_FWD | F_BWD | F_VAL, FWD = F_FWD | F_VAL, BWD = F_BWD | F_VAL;
    /* positive controls first: the fixture itself, optional operands absent */
    PROB(ex("valid problem", &p, &g, ALL, SELSCAN_OK));
    PROB(p.D.data = p.z.data = p.delta_bias.data = p.h0.data = p.h_last.data = NULL; g.dz.data = NULL;
         ex("optional operands absent", &p, &g, ALL, SELSCAN_OK));
    PROB(p.y.data = NULL; ex("backward without y", &p, &g, BWD, SELSCAN_OK));
    PROB(p.u.stride[0] = 0; ex("broadcast input stride 0", &p, &g, ALL, SELSCAN_OK));
    PROB(p.A.stride[0] = 0; p.A.stride[1] = 1; ex("A broadcast over channels", &p, &g, ALL, SELSCAN_OK));
    PROB(p.n_groups = 1; p.B.data = P.B.data; ex("n_groups 1 (B read as 1 group)", &p, &g, ALL, SELSCAN_OK));

    /* NULL problem and pointers */
    ex("NULL problem", NULL, &G.g, F_FWD | F_BWD, SELSCAN_ERR_NULL);
    CHECK(selscan_validate(NULL) == SELSCAN_ERR_NULL, "validate(NULL)");
    CHECK(selscan_validate_grads(NULL, &G.g) == SELSCAN_ERR_NULL, "validate_grads(NULL, g)");
    {
        size_t b = 7;
        CHECK(selscan_workspace_size(NULL, NULL, &b) == SELSCAN_ERR_NULL && b == 7, "workspace_size(NULL problem)");
        CHECK(selscan_workspace_size(&P.p, NULL, NULL) == SELSCAN_ERR_NULL, "workspace_size(bytes NULL)");
        CHECK(selscan_workspace_size(&P.p, &G.g, NULL) == SELSCAN_ERR_NULL, "workspace_size(backward, bytes NULL)");
    }
    PROB(p.u.data = NULL; ex("u NULL", &p, &g, ALL, SELSCAN_ERR_NULL));
    PROB(p.delta.data = NULL; ex("delta NULL", &p, &g, ALL, SELSCAN_ERR_NULL));
    PROB(p.A.data = NULL; ex("A NULL", &p, &g, ALL, SELSCAN_ERR_NULL));
    PROB(p.B.data = NULL; ex("B NULL", &p, &g, ALL, SELSCAN_ERR_NULL));
    PROB(p.C.data = NULL; ex("C NULL", &p, &g, ALL, SELSCAN_ERR_NULL));
    PROB(p.y.data = NULL; ex("y NULL", &p, &g, FWD, SELSCAN_ERR_NULL));

    /* sizes */
    PROB(p.batch = 0; ex("batch 0", &p, &g, ALL, SELSCAN_ERR_SHAPE));
    PROB(p.batch = -1; ex("batch -1", &p, &g, ALL, SELSCAN_ERR_SHAPE));
    PROB(p.dim = 0; ex("dim 0", &p, &g, ALL, SELSCAN_ERR_SHAPE));
    PROB(p.dim = -4; ex("dim -4", &p, &g, ALL, SELSCAN_ERR_SHAPE));
    PROB(p.seqlen = 0; ex("seqlen 0", &p, &g, ALL, SELSCAN_ERR_SHAPE));
    PROB(p.seqlen = -8; ex("seqlen -8", &p, &g, ALL, SELSCAN_ERR_SHAPE));
    PROB(p.dstate = 0; ex("dstate 0", &p, &g, ALL, SELSCAN_ERR_SHAPE));
    PROB(p.dstate = -3; ex("dstate -3", &p, &g, ALL, SELSCAN_ERR_SHAPE));
    PROB(p.n_groups = -2; ex("n_groups -2", &p, &g, ALL, SELSCAN_ERR_SHAPE));
    PROB(p.n_groups = 3; ex("n_groups 3 does not divide dim 4", &p, &g, ALL, SELSCAN_ERR_SHAPE));
    PROB(p.n_groups = 8; ex("n_groups 8 > dim 4", &p, &g, ALL, SELSCAN_ERR_SHAPE));
    PROB(p.n_groups = INT64_MAX; ex("n_groups INT64_MAX", &p, &g, ALL, SELSCAN_ERR_SHAPE));
    /* 64-bit overflow of element counts, with explicit and with default (zero) strides */
    PROB(p.batch = (int64_t)1 << 31; p.dim = (int64_t)1 << 31; p.seqlen = (int64_t)1 << 31;
         ex("batch*dim*L overflows int64", &p, &g, ALL, SELSCAN_ERR_SHAPE));
    PROB(p.batch = (int64_t)1 << 31; p.dim = (int64_t)1 << 31; p.seqlen = (int64_t)1 << 31; memset(&p.u.stride, 0, sizeof p.u.stride);
         memset(&p.y.stride, 0, sizeof p.y.stride); ex("count overflow with default strides", &p, &g, ALL, SELSCAN_ERR_SHAPE));
    PROB(p.seqlen = INT64_MAX; ex("seqlen INT64_MAX", &p, &g, ALL, SELSCAN_ERR_SHAPE));
    PROB(p.dstate = INT64_MAX / 2; ex("dstate INT64_MAX/2", &p, &g, ALL, SELSCAN_ERR_SHAPE));
    PROB(p.dstate = (int64_t)1 << 40; p.seqlen = (int64_t)1 << 30; ex("batch*G*N*L (B) overflows", &p, &g, ALL, SELSCAN_ERR_SHAPE));
    PROB(p.dim = (int64_t)1 << 62; ex("dim 2^62 (bytes overflow)", &p, &g, ALL, SELSCAN_ERR_SHAPE));
    PROB(p.batch = (int64_t)1 << 61; ex("batch 2^61: count*16 overflows", &p, &g, ALL, SELSCAN_ERR_SHAPE));

    /* dtype and flags */
    PROB(p.dtype = (selscan_dtype)3; ex("dtype 3", &p, &g, ALL, SELSCAN_ERR_DTYPE));
    PROB(p.dtype = (selscan_dtype)-1; ex("dtype -1", &p, &g, ALL, SELSCAN_ERR_DTYPE));
    PROB(p.flags |= 8u; ex("unknown flag 8", &p, &g, ALL, SELSCAN_ERR_UNSUPPORTED));
    PROB(p.flags |= SELSCAN_STEP_PARAMS_T; ex("the step's SELSCAN_STEP_PARAMS_T", &p, &g, ALL, SELSCAN_ERR_UNSUPPORTED));
    PROB(p.flags |= SELSCAN_STEP_STATE_T; ex("the step's SELSCAN_STEP_STATE_T", &p, &g, ALL, SELSCAN_ERR_UNSUPPORTED));
    PROB(p.flags |= SELSCAN_STEP_DELTA_BIAS_T; ex("the step's SELSCAN_STEP_DELTA_BIAS_T", &p, &g, ALL, SELSCAN_ERR_UNSUPPORTED));
    PROB(p.flags |= SELSCAN_STEP_A_LOG; ex("the step's SELSCAN_STEP_A_LOG", &p, &g, ALL, SELSCAN_ERR_UNSUPPORTED));
    PROB(p.flags |= 0x80000000u; ex("unknown flag 1<<31", &p, &g, ALL, SELSCAN_ERR_UNSUPPORTED));

    /* strides: negative, overflowing, overlapping outputs */
    PROB(p.u.stride[2] = -1; ex("u stride negative", &p, &g, ALL, SELSCAN_ERR_STRIDE));
    PROB(p.delta.stride[0] = -32; ex("delta stride negative", &p, &g, ALL, SELSCAN_ERR_STRIDE));
    PROB(p.z.stride[1] = -8; ex("z stride negative", &p, &g, ALL, SELSCAN_ERR_STRIDE));
    PROB(p.A.stride[1] = -1; ex("A stride negative", &p, &g, ALL, SELSCAN_ERR_STRIDE));
    PROB(p.B.stride[3] = -1; ex("B stride negative", &p, &g, ALL, SELSCAN_ERR_STRIDE));
    PROB(p.C.stride[2] = -8; ex("C stride negative", &p, &g, ALL, SELSCAN_ERR_STRIDE));
    PROB(p.D.stride[0] = -1; ex("D stride negative", &p, &g, ALL, SELSCAN_ERR_STRIDE));
    PROB(p.delta_bias.stride[0] = -1; ex("delta_bias stride negative", &p, &g, ALL, SELSCAN_ERR_STRIDE));
    PROB(p.h0.stride[2] = -1; ex("h0 stride negative", &p, &g, ALL, SELSCAN_ERR_STRIDE));
    PROB(p.y.stride[2] = -1; ex("y stride negative", &p, &g, FWD, SELSCAN_ERR_STRIDE));
    PROB(p.h_last.stride[0] = -12; ex("h_last stride negative", &p, &g, FWD, SELSCAN_ERR_STRIDE));
    PROB(p.u.stride[0] = INT64_MAX / 2; ex("u stride span overflows", &p, &g, ALL, SELSCAN_ERR_STRIDE));
    PROB(p.B.stride[3] = INT64_MAX / 4; ex("B stride span overflows", &p, &g, ALL, SELSCAN_ERR_STRIDE));
    PROB(p.y.stride[1] = INT64_MAX / 3; ex("y stride span overflows", &p, &g, FWD, SELSCAN_ERR_STRIDE));
    PROB(p.y.stride[2] = 0; ex("y stride 0 along L", &p, &g, FWD, SELSCAN_ERR_STRIDE));
    PROB(p.y.stride[0] = 0; ex("y stride 0 along batch", &p, &g, FWD, SELSCAN_ERR_STRIDE));
    PROB(p.y.stride[0] = 1; p.y.stride[1] = 1; p.y.stride[2] = 1; ex("y strides 1,1,1 overlap", &p, &g, FWD, SELSCAN_ERR_STRIDE));
    PROB(p.y.stride[0] = 16; p.y.stride[1] = 2; p.y.stride[2] = 1; ex("y channel stride 2 < L", &p, &g, FWD, SELSCAN_ERR_STRIDE));
    PROB(p.y.stride[0] = 31; ex("y batch stride 31 < 32", &p, &g, FWD, SELSCAN_ERR_STRIDE));
    PROB(p.h_last.stride[1] = 0; ex("h_last stride 0", &p, &g, FWD, SELSCAN_ERR_STRIDE));
    PROB(p.h_last.stride[0] = 12; p.h_last.stride[1] = 2; ex("h_last channel stride 2 < N", &p, &g, FWD, SELSCAN_ERR_STRIDE));
    PROB(p.u.stride[0] = p.u.stride[1] = p.u.stride[2] = 1; ex("input strides may overlap", &p, &g, ALL, SELSCAN_OK));
    PROB(p.C.data = p.B.data; p.delta.data = p.u.data; ex("inputs may share memory (C == B, delta == u)", &p, &g, ALL, SELSCAN_OK));

    /* aliasing: outputs vs inputs, vs each other */
    PROB(p.y.data = P.u.data; ex("y == u", &p, &g, FWD, SELSCAN_ERR_ALIAS));
    PROB(p.y.data = P.delta.data; ex("y == delta", &p, &g, FWD, SELSCAN_ERR_ALIAS));
    PROB(p.y.data = (float *)P.z.data + 63; ex("y overlaps the last element of z", &p, &g, FWD, SELSCAN_ERR_ALIAS));
    PROB(p.y.data = (float *)P.B.data + 5; ex("y inside B", &p, &g, FWD, SELSCAN_ERR_ALIAS));
    PROB(p.y.data = (float *)P.C.data - 63; ex("y ends inside C", &p, &g, FWD, SELSCAN_ERR_ALIAS));
    PROB(p.h_last.data = P.h0.data; ex("h_last == h0", &p, &g, FWD, SELSCAN_ERR_ALIAS));
    PROB(p.h_last.data = P.A.data; ex("h_last over A", &p, &g, FWD, SELSCAN_ERR_ALIAS));
    PROB(p.h_last.data = (float *)P.D.data + 3; ex("h_last over D's last element", &p, &g, FWD, SELSCAN_ERR_ALIAS));
    PROB(p.h_last.data = P.bias.data; ex("h_last over delta_bias", &p, &g, FWD, SELSCAN_ERR_ALIAS));
    PROB(p.h_last.data = (float *)P.y.data + 40; ex("h_last overlaps y", &p, &g, FWD, SELSCAN_ERR_ALIAS));

    /* workspace: too small, NULL, overlapping an output or an input; any alignment accepted (the
       reported size includes SELSCAN_WORKSPACE_ALIGN - 1 bytes of slack; arena + 1 needs all of it) */
    if (wsf > 0) {
        PROB(expect("forward workspace one byte short", &p, &g, arena + 1, wsf - 1, arena, wsb, F_FWD | F_NOREF, SELSCAN_ERR_WORKSPACE));
        PROB(expect("forward workspace at +1, full size", &p, &g, arena + 1, wsf, arena, wsb, F_FWD, SELSCAN_OK));
        PROB(expect("forward workspace NULL", &p, &g, NULL, wsf, arena, wsb, F_FWD, SELSCAN_ERR_WORKSPACE));
        PROB(expect("forward workspace 0 bytes", &p, &g, arena, 0, arena, wsb, F_FWD, SELSCAN_ERR_WORKSPACE));
        PROB(expect("forward workspace misaligned (accepted)", &p, &g, arena + 4, wsf, arena, wsb, F_FWD, SELSCAN_OK));
        PROB(expect("forward workspace misaligned by 32 (accepted)", &p, &g, arena + 32, wsf, arena, wsb, F_FWD, SELSCAN_OK));
        PROB(p.y.data = place; expect("y inside the workspace", &p, &g, arena, arena_bytes, arena, wsb, F_FWD, SELSCAN_ERR_ALIAS));
        PROB(p.h_last.data = arena; expect("h_last at the workspace", &p, &g, arena, wsf, arena, wsb, F_FWD, SELSCAN_ERR_ALIAS));
        /* (sizes end in 63 bytes of slack: wsf + 1 keeps the placed tensors float-aligned) */
        PROB(p.u.data = arena + wsf + 1 - 4; expect("workspace overlaps u", &p, &g, arena, wsf + 1, arena, wsb, F_FWD, SELSCAN_ERR_ALIAS));
        PROB(p.u.data = arena + wsf + 1; expect("u right after the workspace", &p, &g, arena, wsf + 1, arena, wsb, F_FWD, SELSCAN_OK));
    }
    if (wsb > 0) {
        PROB(expect("backward workspace one byte short", &p, &g, arena, wsf, arena + 1, wsb - 1, F_BWD | F_NOREF, SELSCAN_ERR_WORKSPACE));
        PROB(expect("backward workspace NULL", &p, &g, arena, wsf, NULL, wsb, F_BWD, SELSCAN_ERR_WORKSPACE));
        PROB(expect("backward workspace misaligned (accepted)", &p, &g, arena, wsf, arena + 8, wsb, F_BWD, SELSCAN_OK));
        PROB(g.du.data = arena + 64; expect("du inside the workspace", &p, &g, arena, wsf, arena, wsb, F_BWD, SELSCAN_ERR_ALIAS));
        PROB(g.dh0.data = arena + wsb + 1 - 4; expect("dh0 at the workspace's last float", &p, &g, arena, wsf, arena, wsb + 1, F_BWD, SELSCAN_ERR_ALIAS));
        PROB(g.dh0.data = arena + wsb + 1; expect("dh0 right after the workspace", &p, &g, arena, wsf, arena, wsb + 1, F_BWD, SELSCAN_OK));
        if (wsb > 256) PROB(p.B.data = arena + 128; expect("workspace overlaps B (backward)", &p, &g, arena, wsf, arena, wsb, F_BWD, SELSCAN_ERR_ALIAS));
        PROB(g.dy.data = arena + wsb + 1 - 8; expect("workspace overlaps dy", &p, &g, arena, wsf, arena, wsb, F_BWD, SELSCAN_ERR_ALIAS));
    }
    if (wsb > wsf + 63)
        PROB(expect("backward with the forward's workspace size", &p, &g, arena, wsf, arena, wsf, F_BWD | F_NOREF, SELSCAN_ERR_WORKSPACE));

    /* adjacent but not overlapping: allowed */
    {
        unsigned char *blk = place;
        PROB(memcpy(blk, P.u.data, 64 * 4); p.u.data = blk; p.y.data = blk + 64 * 4;
             ex("y right after u", &p, &g, F_FWD, SELSCAN_OK));
    }
}

static void grad_rules(void) {
    const int BWD = F_BWD | F_VAL;
    PROB(ex("NULL grads", &p, NULL, F_BWD, SELSCAN_ERR_NULL));
    CHECK(selscan_validate_grads(&P.p, NULL) == SELSCAN_ERR_NULL, "validate_grads(p, NULL)");
    {
        size_t b;
        /* workspace_size with g NULL is the forward's: fine */
        CHECK(selscan_workspace_size(&P.p, NULL, &b) == SELSCAN_OK, "workspace_size(p, NULL) forward");
    }
    PROB(g.dy.data = NULL; ex("dy NULL", &p, &g, BWD, SELSCAN_ERR_NULL));
    PROB(p.z.data = NULL; ex("dz requested without z", &p, &g, BWD, SELSCAN_ERR_NULL));
    PROB(p.z.data = NULL; g.dz.data = NULL; ex("no z, no dz", &p, &g, BWD, SELSCAN_OK));
    PROB(g.dh_last.data = NULL; ex("dh_last absent", &p, &g, BWD, SELSCAN_OK));
    PROB(g.du.data = g.ddelta.data = g.dA.data = g.dB.data = g.dC.data = g.dD.data = g.dz.data = g.ddelta_bias.data =
             g.dh0.data = NULL;
         ex("no gradient requested", &p, &g, BWD, SELSCAN_OK));
    PROB(g.dy.stride[0] = 0; ex("dy broadcast stride", &p, &g, BWD, SELSCAN_OK));
    /* strides */
    PROB(g.dy.stride[2] = -1; ex("dy stride negative", &p, &g, BWD, SELSCAN_ERR_STRIDE));
    PROB(g.dh_last.stride[1] = -3; ex("dh_last stride negative", &p, &g, BWD, SELSCAN_ERR_STRIDE));
    PROB(g.du.stride[2] = -1; ex("du stride negative", &p, &g, BWD, SELSCAN_ERR_STRIDE));
    PROB(g.du.stride[2] = 0; ex("du stride 0", &p, &g, BWD, SELSCAN_ERR_STRIDE));
    PROB(g.ddelta.stride[1] = 0; ex("ddelta stride 0", &p, &g, BWD, SELSCAN_ERR_STRIDE));
    PROB(g.dz.stride[0] = 1; ex("dz batch stride 1 overlaps", &p, &g, BWD, SELSCAN_ERR_STRIDE));
    PROB(g.dA.stride[0] = 1; g.dA.stride[1] = 1; ex("dA strides overlap", &p, &g, BWD, SELSCAN_ERR_STRIDE));
    PROB(g.dB.stride[3] = 0; ex("dB stride 0 along L", &p, &g, BWD, SELSCAN_ERR_STRIDE));
    PROB(g.dC.stride[2] = 2; ex("dC stride 2 along N overlaps L", &p, &g, BWD, SELSCAN_ERR_STRIDE));
    PROB(g.dD.stride[0] = -1; ex("dD stride negative", &p, &g, BWD, SELSCAN_ERR_STRIDE));
    PROB(g.ddelta_bias.stride[0] = -1; ex("ddelta_bias stride negative", &p, &g, BWD, SELSCAN_ERR_STRIDE));
    PROB(g.dh0.stride[1] = 0; ex("dh0 stride 0", &p, &g, BWD, SELSCAN_ERR_STRIDE));
    PROB(g.du.stride[0] = INT64_MAX / 2; ex("du stride span overflows", &p, &g, BWD, SELSCAN_ERR_STRIDE));
    /* aliasing */
    PROB(g.du.data = P.u.data; ex("du == u", &p, &g, BWD, SELSCAN_ERR_ALIAS));
    PROB(g.du.data = G.dy.data; ex("du == dy", &p, &g, BWD, SELSCAN_ERR_ALIAS));
    PROB(g.ddelta.data = P.delta.data; ex("ddelta == delta", &p, &g, BWD, SELSCAN_ERR_ALIAS));
    PROB(g.dz.data = P.z.data; ex("dz == z", &p, &g, BWD, SELSCAN_ERR_ALIAS));
    PROB(g.dA.data = P.A.data; ex("dA == A", &p, &g, BWD, SELSCAN_ERR_ALIAS));
    PROB(g.dB.data = P.B.data; ex("dB == B", &p, &g, BWD, SELSCAN_ERR_ALIAS));
    PROB(g.dC.data = (float *)P.C.data + 10; ex("dC inside C", &p, &g, BWD, SELSCAN_ERR_ALIAS));
    PROB(g.dD.data = P.D.data; ex("dD == D", &p, &g, BWD, SELSCAN_ERR_ALIAS));
    PROB(g.ddelta_bias.data = P.bias.data; ex("ddelta_bias == delta_bias", &p, &g, BWD, SELSCAN_ERR_ALIAS));
    PROB(g.dh0.data = P.h0.data; ex("dh0 == h0", &p, &g, BWD, SELSCAN_ERR_ALIAS));
    PROB(g.dh0.data = G.dhlast.data; ex("dh0 == dh_last", &p, &g, BWD, SELSCAN_ERR_ALIAS));
    PROB(g.ddelta.data = G.du.data; ex("ddelta == du", &p, &g, BWD, SELSCAN_ERR_ALIAS));
    PROB(g.dC.data = G.dB.data; ex("dC == dB", &p, &g, BWD, SELSCAN_ERR_ALIAS));
    PROB(g.dD.data = (float *)G.dA.data + 11; ex("dD overlaps dA's last element", &p, &g, BWD, SELSCAN_ERR_ALIAS));
    PROB(g.ddelta_bias.data = G.dD.data; ex("ddelta_bias == dD", &p, &g, BWD, SELSCAN_ERR_ALIAS));
    PROB(g.dz.data = (float *)G.dh0.data + 1; ex("dz overlaps dh0", &p, &g, BWD, SELSCAN_ERR_ALIAS));
    /* problem rules reach the backward too (checked in problem_rules with F_BWD) */
}

static void fixed_rules(void) {
    /* fixed B/C: (dim, N) f32 tensors and gradients */
    tc_prob Q;
    tc_grads H;
    const int ALL = F_FWD | F_BWD | F_VAL, BWD = F_BWD | F_VAL, nb0 = nbufs;
    fixture(&Q, &H, 0, SELSCAN_FIXED_B | SELSCAN_FIXED_C);
    {
        selscan_problem p = Q.p;
        selscan_grads g = H.g;
        expect("fixed B/C valid", &p, &g, arena, wsf, arena, arena_bytes, ALL, SELSCAN_OK);
        p.B.stride[1] = -1;
        expect("fixed B stride negative", &p, &g, arena, wsf, arena, arena_bytes, ALL, SELSCAN_ERR_STRIDE);
        p = Q.p;
        g.dB.stride[0] = 1; g.dB.stride[1] = 1;
        expect("fixed dB strides overlap", &p, &g, arena, wsf, arena, arena_bytes, BWD, SELSCAN_ERR_STRIDE);
        g = H.g;
        g.dC.data = Q.C.data;
        expect("fixed dC == C", &p, &g, arena, wsf, arena, arena_bytes, BWD, SELSCAN_ERR_ALIAS);
        g = H.g;
        g.dB.data = (float *)H.dA.data + 11;
        expect("fixed dB overlaps dA", &p, &g, arena, wsf, arena, arena_bytes, BWD, SELSCAN_ERR_ALIAS);
    }
    while (nbufs > nb0) { /* Q and H leave the registry */
        nbufs--;
        free(bufs[nbufs].snap);
    }
    tc_grads_free(&H);
    tc_prob_free(&Q);
}

static void packed_rules(void) {
    const int ALL = F_FWD | F_BWD | F_VAL;
    int64_t cu[4];
#define PEX(what, want) expect(what, &p, &g, arena, wsfk, arena, wsbk, ALL, want)
    PACK(PEX("packed valid", SELSCAN_OK));
    PACK(memcpy(cu, PK.cu, sizeof cu); cu[0] = 1; p.cu_seqlens = cu; PEX("cu_seqlens[0] != 0", SELSCAN_ERR_SHAPE));
    PACK(memcpy(cu, PK.cu, sizeof cu); cu[0] = -1; p.cu_seqlens = cu; PEX("cu_seqlens[0] = -1", SELSCAN_ERR_SHAPE));
    PACK(memcpy(cu, PK.cu, sizeof cu); cu[3] = 11; p.cu_seqlens = cu; PEX("last offset != seqlen", SELSCAN_ERR_SHAPE));
    PACK(memcpy(cu, PK.cu, sizeof cu); cu[3] = 13; p.cu_seqlens = cu; PEX("last offset > seqlen", SELSCAN_ERR_SHAPE));
    PACK(memcpy(cu, PK.cu, sizeof cu); cu[1] = 6; cu[2] = 5; p.cu_seqlens = cu; PEX("offsets decreasing", SELSCAN_ERR_SHAPE));
    PACK(memcpy(cu, PK.cu, sizeof cu); cu[1] = 20; p.cu_seqlens = cu; PEX("offset beyond seqlen", SELSCAN_ERR_SHAPE));
    PACK(p.batch = 2; PEX("batch 2 with cu_seqlens", SELSCAN_ERR_SHAPE));
    PACK(p.n_seqs = 0; PEX("cu_seqlens with n_seqs 0", SELSCAN_ERR_SHAPE));
    PACK(p.n_seqs = -1; PEX("cu_seqlens with n_seqs -1", SELSCAN_ERR_SHAPE));
    PACK(p.n_seqs = 2; PEX("n_seqs 2: cu[2] != seqlen", SELSCAN_ERR_SHAPE));
    PACK(p.cu_seqlens = NULL; PEX("n_seqs without cu_seqlens", SELSCAN_ERR_NULL));
    PACK(memcpy(cu, PK.cu, sizeof cu); cu[1] = 0; cu[2] = 0; p.cu_seqlens = cu; PEX("two empty sequences", SELSCAN_OK));
    /* rows * dim * N overflows: rejected before cu_seqlens[n_seqs] is read (that address does not exist) */
    PACK(p.n_seqs = INT64_MAX / 8 + 5; p.h0.data = p.h_last.data = NULL; g.dh_last.data = g.dh0.data = NULL;
         PEX("n_seqs 2^60 + 5", SELSCAN_ERR_SHAPE));
    /* the offsets are read by the call: outputs must not overlap them */
    {
        int64_t *cuw = (int64_t *)(place + 4096);
        memcpy(cuw, PK.cu, sizeof cu);
        PACK(p.cu_seqlens = cuw; p.y.data = place + 4096 - 16;
             expect("y overlaps cu_seqlens", &p, &g, arena, wsfk, arena, wsbk, F_FWD | F_VAL, SELSCAN_ERR_ALIAS));
        PACK(p.cu_seqlens = cuw; p.h_last.data = cuw + 3;
             expect("h_last overlaps cu_seqlens", &p, &g, arena, wsfk, arena, wsbk, F_FWD | F_VAL, SELSCAN_ERR_ALIAS));
        PACK(p.cu_seqlens = cuw; g.dh0.data = cuw;
             expect("dh0 overlaps cu_seqlens", &p, &g, arena, wsfk, arena, wsbk, F_BWD | F_VAL, SELSCAN_ERR_ALIAS));
        PACK(p.cu_seqlens = cuw; expect("workspace overlaps cu_seqlens", &p, &g, arena, arena_bytes, arena, arena_bytes,
                                        F_FWD | F_BWD, SELSCAN_ERR_ALIAS));
    }
#undef PEX
}

/* --------------------------------------------------------------------------------- step -- */
static tc_tensor sx, sdt, sz, sy, sA, sB, sC, sD, sbias, sstate;
static int32_t sidx[3] = {4, -1, 0};
static selscan_step_problem S0;

static void step_fixture(void) {
    tc_tensor_make(&sx, SELSCAN_F32, 2, 3, 4, 1, 1, TC_LAYOUT_EXPLICIT, 1);
    tc_tensor_make(&sdt, SELSCAN_F32, 2, 3, 4, 1, 1, TC_LAYOUT_EXPLICIT, 1);
    tc_tensor_make(&sz, SELSCAN_F32, 2, 3, 4, 1, 1, TC_LAYOUT_EXPLICIT, 1);
    tc_tensor_make(&sy, SELSCAN_F32, 2, 3, 4, 1, 1, TC_LAYOUT_EXPLICIT, 1);
    tc_tensor_make(&sA, SELSCAN_F32, 2, 4, 3, 1, 1, TC_LAYOUT_EXPLICIT, 1);
    tc_tensor_make(&sB, SELSCAN_F32, 3, 3, 2, 3, 1, TC_LAYOUT_EXPLICIT, 1);
    tc_tensor_make(&sC, SELSCAN_F32, 3, 3, 2, 3, 1, TC_LAYOUT_EXPLICIT, 1);
    tc_tensor_make(&sD, SELSCAN_F32, 1, 4, 1, 1, 1, TC_LAYOUT_EXPLICIT, 1);
    tc_tensor_make(&sbias, SELSCAN_F32, 1, 4, 1, 1, 1, TC_LAYOUT_EXPLICIT, 1);
    tc_tensor_make(&sstate, SELSCAN_F32, 3, 5, 4, 3, 1, TC_LAYOUT_EXPLICIT, 1);
    tc_fill(&sx, -1, 1); tc_fill(&sdt, -1, 1); tc_fill(&sz, -1, 1); tc_fill(&sA, -2, -0.1); tc_fill(&sB, -1, 1);
    tc_fill(&sC, -1, 1); tc_fill(&sD, -1, 1); tc_fill(&sbias, -1, 1); tc_fill(&sstate, -1, 1);
    reg_t(&sx); reg_t(&sdt); reg_t(&sz); reg_t(&sy); reg_t(&sA); reg_t(&sB); reg_t(&sC); reg_t(&sD); reg_t(&sbias);
    reg_t(&sstate);
    reg(sidx, sizeof sidx);
    memset(&S0, 0, sizeof S0);
    S0.batch = 3; S0.dim = 4; S0.dstate = 3; S0.n_groups = 2; S0.n_cache = 5; S0.dtype = SELSCAN_F32;
    S0.flags = SELSCAN_DELTA_SOFTPLUS; S0.state_index = sidx;
    S0.state = tc_out(&sstate); S0.u = tc_api(&sx); S0.delta = tc_api(&sdt); S0.z = tc_api(&sz); S0.y = tc_out(&sy);
    S0.A = tc_api(&sA); S0.B = tc_api(&sB); S0.C = tc_api(&sC); S0.D = tc_api(&sD); S0.delta_bias = tc_api(&sbias);
}

static void sexpect(const char *what, const selscan_step_problem *s0, selscan_status want) {
    selscan_status st;
    selscan_step_problem sd = *s0;
    const selscan_step_problem *s = &sd;
    sd.diag = &dg;
    diag_reset();
    snap_all();
    st = selscan_validate_step(s);
    CHECK(st == want, "%s: validate_step returned '%s', want '%s'", what, selscan_status_string(st), selscan_status_string(want));
    diag_check(what, "validate_step", st);
    if (want != SELSCAN_OK) {
        st = selscan_step_cpu(s);
        CHECK(st == want, "%s: step_cpu returned '%s', want '%s'", what, selscan_status_string(st), selscan_status_string(want));
        diag_check(what, "step_cpu", st);
        st = selscan_step_ref(s);
        CHECK(st == want, "%s: step_ref returned '%s', want '%s'", what, selscan_status_string(st), selscan_status_string(want));
        diag_check(what, "step_ref", st);
        CHECK(same_all(), "%s: a byte changed although the step failed", what);
    } else { /* the call may write y and state: run it on a copy of the state */
        st = selscan_step_cpu(s);
        CHECK(st == want, "%s: step_cpu returned '%s', want '%s'", what, selscan_status_string(st), selscan_status_string(want));
        diag_check(what, "step_cpu", st);
    }
}

#define STEP(stmt) do { selscan_step_problem s = S0; int32_t ix[3]; memcpy(ix, sidx, sizeof ix); (void)ix; stmt; } while (0)

static void step_rules(void) {
    STEP(sexpect("step valid", &s, SELSCAN_OK));
    STEP(s.state_index = NULL; s.n_cache = 0; sexpect("step without index", &s, SELSCAN_OK));
    STEP(s.D.data = s.z.data = s.delta_bias.data = NULL; sexpect("step optional operands absent", &s, SELSCAN_OK));
    STEP(ix[0] = -1; ix[1] = -1; s.state_index = ix; sexpect("two padding rows", &s, SELSCAN_OK));
    STEP(ix[0] = INT32_MIN; s.state_index = ix; sexpect("padding INT32_MIN", &s, SELSCAN_OK));
    CHECK(selscan_step_cpu(NULL) == SELSCAN_ERR_NULL && selscan_step_ref(NULL) == SELSCAN_ERR_NULL &&
              selscan_validate_step(NULL) == SELSCAN_ERR_NULL,
          "step(NULL)");
    STEP(s.state.data = NULL; sexpect("state NULL", &s, SELSCAN_ERR_NULL));
    STEP(s.u.data = NULL; sexpect("u NULL", &s, SELSCAN_ERR_NULL));
    STEP(s.delta.data = NULL; sexpect("delta NULL", &s, SELSCAN_ERR_NULL));
    STEP(s.A.data = NULL; sexpect("A NULL", &s, SELSCAN_ERR_NULL));
    STEP(s.B.data = NULL; sexpect("B NULL", &s, SELSCAN_ERR_NULL));
    STEP(s.C.data = NULL; sexpect("C NULL", &s, SELSCAN_ERR_NULL));
    STEP(s.y.data = NULL; sexpect("y NULL", &s, SELSCAN_ERR_NULL));
    STEP(s.batch = 0; sexpect("step batch 0", &s, SELSCAN_ERR_SHAPE));
    STEP(s.batch = -3; sexpect("step batch -3", &s, SELSCAN_ERR_SHAPE));
    STEP(s.dim = 0; sexpect("step dim 0", &s, SELSCAN_ERR_SHAPE));
    STEP(s.dstate = -1; sexpect("step dstate -1", &s, SELSCAN_ERR_SHAPE));
    STEP(s.n_groups = 3; sexpect("step n_groups 3 of dim 4", &s, SELSCAN_ERR_SHAPE));
    STEP(s.n_groups = -1; sexpect("step n_groups -1", &s, SELSCAN_ERR_SHAPE));
    STEP(s.n_cache = -1; sexpect("n_cache -1", &s, SELSCAN_ERR_SHAPE));
    STEP(s.state_index = NULL; sexpect("n_cache 5 != batch 3 without index", &s, SELSCAN_ERR_SHAPE));
    STEP(s.n_cache = 4; sexpect("index 4 >= n_cache 4", &s, SELSCAN_ERR_SHAPE));
    STEP(ix[2] = 5; s.state_index = ix; sexpect("index 5 >= n_cache 5", &s, SELSCAN_ERR_SHAPE));
    STEP(ix[2] = INT32_MAX; s.state_index = ix; sexpect("index INT32_MAX", &s, SELSCAN_ERR_SHAPE));
    STEP(s.n_cache = 0; sexpect("index 4 >= batch 3 (n_cache 0)", &s, SELSCAN_ERR_SHAPE));
    STEP(ix[2] = 4; s.state_index = ix; sexpect("duplicate index", &s, SELSCAN_ERR_ALIAS));
    STEP(ix[1] = 0; s.state_index = ix; sexpect("duplicate index 0", &s, SELSCAN_ERR_ALIAS));
    STEP(s.batch = (int64_t)1 << 62; s.state_index = NULL; s.n_cache = 0; sexpect("step batch 2^62", &s, SELSCAN_ERR_SHAPE));
    STEP(s.dstate = (int64_t)1 << 62; sexpect("step dstate 2^62", &s, SELSCAN_ERR_SHAPE));
    STEP(s.n_cache = (int64_t)1 << 62; sexpect("step n_cache 2^62", &s, SELSCAN_ERR_SHAPE));
    STEP(s.dtype = (selscan_dtype)7; sexpect("step dtype 7", &s, SELSCAN_ERR_DTYPE));
    STEP(s.flags |= 1u << 20; sexpect("step unknown flag", &s, SELSCAN_ERR_UNSUPPORTED));
    STEP(s.u.stride[1] = -1; sexpect("u stride negative", &s, SELSCAN_ERR_STRIDE));
    STEP(s.B.stride[2] = -1; sexpect("step B stride negative", &s, SELSCAN_ERR_STRIDE));
    STEP(s.A.stride[0] = -3; sexpect("step A stride negative", &s, SELSCAN_ERR_STRIDE));
    STEP(s.state.stride[2] = -1; sexpect("state stride negative", &s, SELSCAN_ERR_STRIDE));
    STEP(s.y.stride[0] = 0; sexpect("step y stride 0", &s, SELSCAN_ERR_STRIDE));
    STEP(s.y.stride[0] = 2; sexpect("step y rows overlap", &s, SELSCAN_ERR_STRIDE));
    STEP(s.state.stride[1] = 0; sexpect("state stride 0", &s, SELSCAN_ERR_STRIDE));
    STEP(s.state.stride[0] = 11; sexpect("state rows overlap", &s, SELSCAN_ERR_STRIDE));
    STEP(s.u.stride[0] = 0; sexpect("u broadcast stride 0", &s, SELSCAN_OK));
    STEP(s.y.data = sx.data; sexpect("y == x", &s, SELSCAN_ERR_ALIAS));
    STEP(s.y.data = sdt.data; sexpect("y == dt", &s, SELSCAN_ERR_ALIAS));
    STEP(s.y.data = (float *)sz.data + 11; sexpect("y overlaps z", &s, SELSCAN_ERR_ALIAS));
    STEP(s.y.data = (float *)sstate.data + 30; sexpect("y overlaps state", &s, SELSCAN_ERR_ALIAS));
    STEP(s.state.data = sA.data; sexpect("state over A", &s, SELSCAN_ERR_ALIAS));
    STEP(s.state.data = (float *)sB.data + 17; sexpect("state overlaps B", &s, SELSCAN_ERR_ALIAS));
    STEP(s.state.data = (float *)sC.data - 59; sexpect("state ends in C", &s, SELSCAN_ERR_ALIAS));
    STEP(s.state.data = sD.data; sexpect("state over D", &s, SELSCAN_ERR_ALIAS));
    STEP(s.y.data = sbias.data; sexpect("y over delta_bias", &s, SELSCAN_ERR_ALIAS));
    {
        int32_t *ixw = (int32_t *)(place + 8192);
        memcpy(ixw, sidx, sizeof sidx);
        STEP(s.state_index = ixw; s.y.data = ixw; sexpect("y overlaps state_index", &s, SELSCAN_ERR_ALIAS));
        STEP(s.state_index = ixw; s.state.data = (float *)ixw - 58; sexpect("state overlaps state_index", &s, SELSCAN_ERR_ALIAS));
    }
}

/* The step's in-place state and its y with explicit strides (all zero is the "contiguous"
   convention and is skipped): every stride triple whose elements overlap (an expand()ed state:
   a 0 stride on a dim of size > 1, or rows / channels stepping inside each other) is refused with
   SELSCAN_ERR_STRIDE naming the operand, on the CPU entry points too (nothing written); the
   verdict is compared with a brute-force count of the addresses. (issue 27: the torch binding
   handed an expanded state over as "all strides 0"; the core must refuse every overlap it can
   see.) */
static int64_t overlap_brute(int nd, const int64_t *n, const int64_t *s) {
    static unsigned char seen[4096];
    int64_t i, j, k, o, hits = 0;
    memset(seen, 0, sizeof seen);
    for (i = 0; i < n[0]; i++)
        for (j = 0; j < (nd > 1 ? n[1] : 1); j++)
            for (k = 0; k < (nd > 2 ? n[2] : 1); k++) {
                o = i * s[0] + j * (nd > 1 ? s[1] : 0) + k * (nd > 2 ? s[2] : 0);
                hits += seen[o];
                seen[o] = 1;
            }
    return hits;
}

static void step_overlap_rules(void) {
    const int64_t sn[3] = {5, 4, 3}, yn[2] = {3, 4};
    int64_t s[3], bad_state = 0, bad_y = 0, refused = 0, accepted = 0;
    char first[160] = "";
    for (s[0] = 0; s[0] < 14; s[0]++)
        for (s[1] = 0; s[1] < 14; s[1]++)
            for (s[2] = 0; s[2] < 14; s[2]++) {
                selscan_step_problem p = S0;
                selscan_diag d = {NULL, NULL, SELSCAN_RULE_NONE};
                selscan_status st;
                const int ovl = overlap_brute(3, sn, s) > 0;
                if (s[0] == 0 && s[1] == 0 && s[2] == 0) continue;
                p.state.stride[0] = s[0]; p.state.stride[1] = s[1]; p.state.stride[2] = s[2];
                p.diag = &d;
                st = selscan_validate_step(&p);
                if (ovl) {
                    refused++;
                    snap_all();
                    if (st != SELSCAN_ERR_STRIDE || !d.operand || strcmp(d.operand, "state") != 0 ||
                        selscan_step_cpu(&p) != SELSCAN_ERR_STRIDE || selscan_step_ref(&p) != SELSCAN_ERR_STRIDE ||
                        !same_all()) {
                        if (!bad_state++)
                            snprintf(first, sizeof first, "state strides (%lld, %lld, %lld): '%s'", (long long)s[0],
                                     (long long)s[1], (long long)s[2], selscan_status_string(st));
                    }
                } else if (st == SELSCAN_OK) {
                    accepted++;
                }
            }
    CHECK(bad_state == 0, "overlapping state strides accepted or misreported: %lld of %lld, first %s",
          (long long)bad_state, (long long)refused, first);
    CHECK(accepted > 0, "some disjoint explicit state strides accepted (%lld)", (long long)accepted);
    for (s[0] = 0; s[0] < 14; s[0]++)
        for (s[1] = 0; s[1] < 14; s[1]++) {
            selscan_step_problem p = S0;
            selscan_diag d = {NULL, NULL, SELSCAN_RULE_NONE};
            selscan_status st;
            if ((s[0] == 0 && s[1] == 0) || overlap_brute(2, yn, s) == 0) continue;
            p.y.stride[0] = s[0]; p.y.stride[1] = s[1];
            p.diag = &d;
            st = selscan_validate_step(&p);
            if (st != SELSCAN_ERR_STRIDE || !d.operand || strcmp(d.operand, "y") != 0) bad_y++;
        }
    CHECK(bad_y == 0, "overlapping step y strides accepted or misreported: %lld", (long long)bad_y);
    /* the expand()ed forms by name: one row for every cache entry, one channel for every channel */
    STEP(s.state.stride[0] = 0; s.state.stride[1] = 3; s.state.stride[2] = 1;
         sexpect("state expanded over n_cache (0, 3, 1)", &s, SELSCAN_ERR_STRIDE));
    STEP(s.state.stride[0] = 12; s.state.stride[1] = 0; s.state.stride[2] = 1;
         sexpect("state expanded over dim (12, 0, 1)", &s, SELSCAN_ERR_STRIDE));
    STEP(s.state.stride[0] = 12; s.state.stride[1] = 3; s.state.stride[2] = 0;
         sexpect("state expanded over N (12, 3, 0)", &s, SELSCAN_ERR_STRIDE));
    STEP(s.state.stride[0] = 0; s.state.stride[1] = 0; s.state.stride[2] = 1;
         sexpect("state one row of N for all (0, 0, 1)", &s, SELSCAN_ERR_STRIDE));
}

/* ------------------------------------------------------------------------- rule codes -- */
/* The stable codes (selscan_rule) of a representative set of cases, matched by code and operand,
   not by text: every entry point each case runs must report them. */
static void rule_codes(void) {
    const int ALL = F_FWD | F_BWD | F_VAL, FWD = F_FWD | F_VAL, BWD = F_BWD | F_VAL;
    int64_t cu[4];
    int i, j, ok = 1;
    /* the list: distinct texts and names, round trips, out-of-range values */
    for (i = 0; i < SELSCAN__RULE_COUNT; i++) {
        const char *t = selscan_rule_string((selscan_rule)i), *nm = selscan_rule_name((selscan_rule)i);
        ok &= t && nm && strncmp(nm, "SELSCAN_RULE_", 13) == 0 && (i == 0 || *t);
        for (j = 0; j < i; j++)
            ok &= strcmp(t, selscan_rule_string((selscan_rule)j)) != 0 && strcmp(nm, selscan_rule_name((selscan_rule)j)) != 0;
    }
    CHECK(ok, "rule texts and names distinct and non-empty");
    CHECK(SELSCAN_RULE_NONE == 0 && strcmp(selscan_rule_name(SELSCAN_RULE_TOO_SMALL), "SELSCAN_RULE_TOO_SMALL") == 0 &&
              strcmp(selscan_rule_string(SELSCAN_RULE_TOO_SMALL), "too small") == 0 &&
              strcmp(selscan_rule_string((selscan_rule)-1), "unknown rule") == 0 &&
              strcmp(selscan_rule_name(SELSCAN__RULE_COUNT), "unknown rule") == 0,
          "rule names, texts and out-of-range codes");

    RULE(SELSCAN_RULE_MISSING, "u", PROB(p.u.data = NULL; ex("code: u NULL", &p, &g, ALL, SELSCAN_ERR_NULL)));
    RULE(SELSCAN_RULE_MISSING, "y", PROB(p.y.data = NULL; ex("code: y NULL", &p, &g, FWD, SELSCAN_ERR_NULL)));
    RULE(SELSCAN_RULE_MISSING, "dy", PROB(g.dy.data = NULL; ex("code: dy NULL", &p, &g, BWD, SELSCAN_ERR_NULL)));
    RULE(SELSCAN_RULE_WITHOUT_Z, "dz", PROB(p.z.data = NULL; ex("code: dz without z", &p, &g, BWD, SELSCAN_ERR_NULL)));
    RULE(SELSCAN_RULE_NOT_POSITIVE, "batch", PROB(p.batch = 0; ex("code: batch 0", &p, &g, ALL, SELSCAN_ERR_SHAPE)));
    RULE(SELSCAN_RULE_NOT_POSITIVE, "dstate", PROB(p.dstate = -3; ex("code: dstate -3", &p, &g, ALL, SELSCAN_ERR_SHAPE)));
    RULE(SELSCAN_RULE_NOT_DIVIDING, "n_groups", PROB(p.n_groups = 3; ex("code: n_groups 3", &p, &g, ALL, SELSCAN_ERR_SHAPE)));
    /* a count overflow names the sizes whose product overflows (issue 41: was "problem") */
    RULE(SELSCAN_RULE_COUNT_OVERFLOWS, "batch * dim * seqlen",
         PROB(p.batch = (int64_t)1 << 31; p.dim = (int64_t)1 << 31; p.seqlen = (int64_t)1 << 31;
              ex("code: count overflow", &p, &g, ALL, SELSCAN_ERR_SHAPE)));
    RULE(SELSCAN_RULE_COUNT_OVERFLOWS, "batch * dim * seqlen",
         PROB(p.batch = (int64_t)1 << 62; ex("code: batch 2^62", &p, &g, ALL, SELSCAN_ERR_SHAPE)));
    RULE(SELSCAN_RULE_COUNT_OVERFLOWS, "batch * n_groups * dstate * seqlen",
         PROB(p.dstate = (int64_t)1 << 40; p.seqlen = (int64_t)1 << 30; ex("code: B's count overflows", &p, &g, ALL, SELSCAN_ERR_SHAPE)));
    RULE(SELSCAN_RULE_COUNT_OVERFLOWS, "batch * dim * dstate", /* only the state's (batch, dim, N) */
         PROB(p.dim = (int64_t)1 << 40; p.n_groups = 1; p.dstate = (int64_t)1 << 30; p.seqlen = 1;
              ex("code: the state's count overflows", &p, &g, ALL, SELSCAN_ERR_SHAPE)));
    RULE(SELSCAN_RULE_UNKNOWN_DTYPE, "dtype", PROB(p.dtype = (selscan_dtype)3; ex("code: dtype 3", &p, &g, ALL, SELSCAN_ERR_DTYPE)));
    RULE(SELSCAN_RULE_UNKNOWN_FLAG, "flags", PROB(p.flags |= 8u; ex("code: flag 8", &p, &g, ALL, SELSCAN_ERR_UNSUPPORTED)));
    RULE(SELSCAN_RULE_NEGATIVE_STRIDE, "B", PROB(p.B.stride[3] = -1; ex("code: B stride negative", &p, &g, ALL, SELSCAN_ERR_STRIDE)));
    RULE(SELSCAN_RULE_SPAN_OVERFLOWS, "u",
         PROB(p.u.stride[0] = INT64_MAX / 2; ex("code: u span overflows", &p, &g, ALL, SELSCAN_ERR_STRIDE)));
    RULE(SELSCAN_RULE_MISALIGNED, "u",
         PROB(p.u.data = (const char *)P.u.data + 1; ex("code: u misaligned", &p, &g, ALL, SELSCAN_ERR_STRIDE)));
    RULE(SELSCAN_RULE_ELEMENTS_OVERLAP, "y",
         PROB(p.y.stride[0] = 1; p.y.stride[1] = 1; p.y.stride[2] = 1; ex("code: y strides overlap", &p, &g, FWD, SELSCAN_ERR_STRIDE)));
    RULE(SELSCAN_RULE_ELEMENTS_OVERLAP, "du", PROB(g.du.stride[2] = 0; ex("code: du stride 0", &p, &g, BWD, SELSCAN_ERR_STRIDE)));
    RULE(SELSCAN_RULE_OVERLAPS, "y", PROB(p.y.data = P.u.data; ex("code: y == u", &p, &g, FWD, SELSCAN_ERR_ALIAS)));
    RULE(SELSCAN_RULE_OVERLAPS, "du", PROB(g.du.data = P.delta.data; ex("code: du == delta", &p, &g, BWD, SELSCAN_ERR_ALIAS)));
    RULE(SELSCAN_RULE_TOO_SMALL, "workspace",
         PROB(expect("code: forward workspace one byte short", &p, &g, arena + 1, wsf - 1, arena, wsb, F_FWD | F_NOREF,
                     SELSCAN_ERR_WORKSPACE)));
    RULE(SELSCAN_RULE_MISSING, "workspace",
         PROB(expect("code: backward workspace NULL", &p, &g, arena, wsf, NULL, wsb, F_BWD, SELSCAN_ERR_WORKSPACE)));
    RULE(SELSCAN_RULE_OVERLAPS, NULL,
         PROB(p.h_last.data = arena; expect("code: h_last at the workspace", &p, &g, arena, wsf, arena, wsb, F_FWD, SELSCAN_ERR_ALIAS)));
#define PEX(what, want) expect(what, &p, &g, arena, wsfk, arena, wsbk, ALL, want)
    RULE(SELSCAN_RULE_FIRST_OFFSET, "cu_seqlens",
         PACK(memcpy(cu, PK.cu, sizeof cu); cu[0] = 1; p.cu_seqlens = cu; PEX("code: cu_seqlens[0] != 0", SELSCAN_ERR_SHAPE)));
    RULE(SELSCAN_RULE_LAST_OFFSET, "cu_seqlens",
         PACK(memcpy(cu, PK.cu, sizeof cu); cu[3] = 11; p.cu_seqlens = cu; PEX("code: last offset", SELSCAN_ERR_SHAPE)));
    RULE(SELSCAN_RULE_NOT_INCREASING, "cu_seqlens",
         PACK(memcpy(cu, PK.cu, sizeof cu); cu[1] = 6; cu[2] = 5; p.cu_seqlens = cu; PEX("code: decreasing", SELSCAN_ERR_SHAPE)));
    RULE(SELSCAN_RULE_BATCH_NOT_1, "batch", PACK(p.batch = 2; PEX("code: batch 2 packed", SELSCAN_ERR_SHAPE)));
    RULE(SELSCAN_RULE_NO_SEQUENCE, "n_seqs", PACK(p.n_seqs = -1; PEX("code: n_seqs -1", SELSCAN_ERR_SHAPE)));
    RULE(SELSCAN_RULE_MISSING_N_SEQS, "cu_seqlens", PACK(p.cu_seqlens = NULL; PEX("code: n_seqs without cu", SELSCAN_ERR_NULL)));
#undef PEX
    RULE(SELSCAN_RULE_MISSING, "state", STEP(s.state.data = NULL; sexpect("code: state NULL", &s, SELSCAN_ERR_NULL)));
    RULE(SELSCAN_RULE_NOT_BATCH, "n_cache",
         STEP(s.state_index = NULL; sexpect("code: n_cache != batch without index", &s, SELSCAN_ERR_SHAPE)));
    RULE(SELSCAN_RULE_INDEX_RANGE, "state_index", STEP(s.n_cache = 4; sexpect("code: index >= n_cache", &s, SELSCAN_ERR_SHAPE)));
    RULE(SELSCAN_RULE_ROW_TWICE, "state_index",
         STEP(ix[2] = 4; s.state_index = ix; sexpect("code: duplicate index", &s, SELSCAN_ERR_ALIAS)));
    RULE(SELSCAN_RULE_ELEMENTS_OVERLAP, "state", STEP(s.state.stride[0] = 11; sexpect("code: state rows overlap", &s, SELSCAN_ERR_STRIDE)));
    RULE(SELSCAN_RULE_OVERLAPS, "y", STEP(s.y.data = sx.data; sexpect("code: step y == u", &s, SELSCAN_ERR_ALIAS)));
    RULE(SELSCAN_RULE_COUNT_OVERFLOWS, "n_cache * dim * dstate",
         STEP(s.dstate = (int64_t)1 << 60; sexpect("code: step state count overflows", &s, SELSCAN_ERR_SHAPE)));
    RULE(SELSCAN_RULE_COUNT_OVERFLOWS, "batch * dim",
         STEP(s.batch = (int64_t)1 << 62; sexpect("code: step batch 2^62", &s, SELSCAN_ERR_SHAPE)));
    RULE(SELSCAN_RULE_COUNT_OVERFLOWS, "batch * n_groups * dstate",
         STEP(s.batch = (int64_t)1 << 40; s.dstate = (int64_t)1 << 20; sexpect("code: step B's count overflows", &s, SELSCAN_ERR_SHAPE)));
}

/* ------------------------------------------------------------------ size rules alone -- */
/* selscan_check_*sizes (issue 39: what bindings/common asks before it builds a problem): the
   validation's size rules with its codes, without operands, with empty problems accepted. */
static int sizes_code(selscan_status st, selscan_status want, selscan_rule rule, const char *operand) {
    if (st != want) return 0;
    if (st == SELSCAN_OK) return dg.code == SELSCAN__RULE_COUNT; /* nothing written on OK */
    return dg.code == rule && strcmp(dg.operand, operand) == 0 && strcmp(dg.rule, selscan_rule_string(rule)) == 0;
}
static void size_rules_alone(void) {
    selscan_problem p;
    selscan_step_problem s;
    selscan_conv_problem c;
    selscan_conv_step_problem cs;
    int64_t cu[3] = {0, 5, 9}, bad[3] = {0, 7, 5};
    int32_t idx[2] = {1, 3}, dup[2] = {2, 2};
#define SZ(init, call, want, rule, opd) \
    do { init; diag_reset(); CHECK(sizes_code(call, want, rule, opd), "sizes: %s", #init); } while (0)
#define SCAN0 memset(&p, 0, sizeof p); p.batch = 2; p.dim = 8; p.seqlen = 9; p.dstate = 4; p.n_groups = 2; p.diag = &dg
    SZ(SCAN0, selscan_check_sizes(&p), SELSCAN_OK, SELSCAN_RULE_NONE, "");
    SZ(SCAN0; p.u.data = NULL, selscan_check_sizes(&p), SELSCAN_OK, SELSCAN_RULE_NONE, ""); /* operands not read */
    SZ(SCAN0; p.n_groups = 3, selscan_check_sizes(&p), SELSCAN_ERR_SHAPE, SELSCAN_RULE_NOT_DIVIDING, "n_groups");
    SZ(SCAN0; p.dim = 0; p.n_groups = 3, selscan_check_sizes(&p), SELSCAN_OK, SELSCAN_RULE_NONE, ""); /* empty */
    SZ(SCAN0; p.dim = 0; p.n_groups = -1, selscan_check_sizes(&p), SELSCAN_ERR_SHAPE, SELSCAN_RULE_NOT_DIVIDING, "n_groups");
    SZ(SCAN0; p.seqlen = 0; p.dstate = 0, selscan_check_sizes(&p), SELSCAN_OK, SELSCAN_RULE_NONE, "");
    SZ(SCAN0; p.dstate = 0, selscan_check_sizes(&p), SELSCAN_ERR_SHAPE, SELSCAN_RULE_NOT_POSITIVE, "dstate");
    SZ(SCAN0; p.batch = -1, selscan_check_sizes(&p), SELSCAN_ERR_SHAPE, SELSCAN_RULE_NEGATIVE, "batch");
    SZ(SCAN0; p.n_seqs = 2, selscan_check_sizes(&p), SELSCAN_ERR_SHAPE, SELSCAN_RULE_BATCH_NOT_1, "batch");
    SZ(SCAN0; p.batch = 1; p.n_seqs = 2, selscan_check_sizes(&p), SELSCAN_OK, SELSCAN_RULE_NONE, ""); /* values unknown */
    SZ(SCAN0; p.batch = 1; p.n_seqs = 2; p.cu_seqlens = cu, selscan_check_sizes(&p), SELSCAN_OK, SELSCAN_RULE_NONE, "");
    SZ(SCAN0; p.batch = 1; p.n_seqs = 2; p.cu_seqlens = bad, selscan_check_sizes(&p), SELSCAN_ERR_SHAPE,
       SELSCAN_RULE_LAST_OFFSET, "cu_seqlens");
    SZ(SCAN0; p.batch = 1; p.seqlen = 0; p.n_seqs = 2; p.cu_seqlens = cu, selscan_check_sizes(&p), SELSCAN_ERR_SHAPE,
       SELSCAN_RULE_LAST_OFFSET, "cu_seqlens"); /* the offsets whatever the sizes */
    SZ(SCAN0; p.flags = 1u << 9, selscan_check_sizes(&p), SELSCAN_ERR_UNSUPPORTED, SELSCAN_RULE_UNKNOWN_FLAG, "flags");
#define STEP0 memset(&s, 0, sizeof s); s.batch = 2; s.dim = 8; s.dstate = 4; s.n_groups = 2; s.n_cache = 2; s.diag = &dg
    SZ(STEP0, selscan_check_step_sizes(&s, 0), SELSCAN_OK, SELSCAN_RULE_NONE, "");
    SZ(STEP0; s.n_cache = 0, selscan_check_step_sizes(&s, 0), SELSCAN_ERR_SHAPE, SELSCAN_RULE_NOT_BATCH, "n_cache");
    SZ(STEP0; s.n_cache = 0, selscan_check_step_sizes(&s, 1), SELSCAN_OK, SELSCAN_RULE_NONE, ""); /* rows unknown */
    SZ(STEP0; s.n_cache = 4; s.state_index = idx, selscan_check_step_sizes(&s, 1), SELSCAN_OK, SELSCAN_RULE_NONE, "");
    SZ(STEP0; s.n_cache = 3; s.state_index = idx, selscan_check_step_sizes(&s, 1), SELSCAN_ERR_SHAPE,
       SELSCAN_RULE_INDEX_RANGE, "state_index");
    SZ(STEP0; s.n_cache = 4; s.dim = 0; s.state_index = dup, selscan_check_step_sizes(&s, 1), SELSCAN_ERR_ALIAS,
       SELSCAN_RULE_ROW_TWICE, "state_index"); /* the rows whatever the sizes */
    SZ(STEP0; s.n_groups = 3, selscan_check_step_sizes(&s, 0), SELSCAN_ERR_SHAPE, SELSCAN_RULE_NOT_DIVIDING, "n_groups");
    SZ(STEP0; s.batch = 0; s.n_cache = 0; s.dstate = 0, selscan_check_step_sizes(&s, 0), SELSCAN_OK, SELSCAN_RULE_NONE, "");
#define CONV0 memset(&c, 0, sizeof c); c.batch = 1; c.dim = 8; c.seqlen = 9; c.width = 4; c.diag = &dg
    SZ(CONV0, selscan_check_conv_sizes(&c), SELSCAN_OK, SELSCAN_RULE_NONE, "");
    SZ(CONV0; c.dim = 0; c.width = 5, selscan_check_conv_sizes(&c), SELSCAN_ERR_UNSUPPORTED, SELSCAN_RULE_WIDTH, "width");
    SZ(CONV0; c.width = 0, selscan_check_conv_sizes(&c), SELSCAN_ERR_SHAPE, SELSCAN_RULE_NOT_POSITIVE, "width");
    SZ(CONV0; c.n_seqs = 2; c.cu_seqlens = bad, selscan_check_conv_sizes(&c), SELSCAN_ERR_SHAPE, SELSCAN_RULE_LAST_OFFSET,
       "cu_seqlens");
#define CSTEP0 memset(&cs, 0, sizeof cs); cs.batch = 2; cs.dim = 8; cs.width = 4; cs.state_len = 3; cs.n_cache = 2; cs.diag = &dg
    SZ(CSTEP0, selscan_check_conv_step_sizes(&cs, 0), SELSCAN_OK, SELSCAN_RULE_NONE, "");
    SZ(CSTEP0; cs.state_len = 2, selscan_check_conv_step_sizes(&cs, 0), SELSCAN_ERR_SHAPE, SELSCAN_RULE_BELOW_WIDTH,
       "state_len");
    SZ(CSTEP0; cs.n_cache = 3, selscan_check_conv_step_sizes(&cs, 0), SELSCAN_ERR_SHAPE, SELSCAN_RULE_NOT_BATCH, "n_cache");
    SZ(CSTEP0; cs.n_cache = 3; cs.dim = 0; cs.state_index = idx, selscan_check_conv_step_sizes(&cs, 1), SELSCAN_ERR_SHAPE,
       SELSCAN_RULE_INDEX_RANGE, "state_index");
#undef SZ
#undef SCAN0
#undef STEP0
#undef CONV0
#undef CSTEP0
    CHECK(selscan_check_sizes(NULL) == SELSCAN_ERR_NULL && selscan_check_step_sizes(NULL, 0) == SELSCAN_ERR_NULL,
          "sizes: NULL problems");
}

/* ------------------------------------------------------------ empty calls, n_cache 0 -- */
/* issue 39 (>>n-cache): a step's n_cache 0 is batch at the entry points and a cache of no rows for
   selscan_check_*sizes; a size 0 is refused by the entry points (a status naming it, nothing
   written) and accepted by the size checks as an empty problem, which a binding answers itself. */
static int all_equal(const float *a, const float *b, int n) { return memcmp(a, b, (size_t)n * sizeof *a) == 0; }
static int all_zero(const float *a, int n) {
    int i, ok = 1;
    for (i = 0; i < n; i++) ok &= a[i] == 0.0f;
    return ok;
}
static int refused_size(selscan_status st, const char *operand) { /* a size 0 refused, by name */
    return st == SELSCAN_ERR_SHAPE && dg.code == SELSCAN_RULE_NOT_POSITIVE && strcmp(dg.operand, operand) == 0;
}
/* The entry point's rules on a decode step problem P (run: its CPU entry point; batch rows nb; its
   state nst floats, y ny floats; st0 / st1 / y0 / y1 scratch, keep the state's values, pad
   nb padding indices): n_cache 0 without state_index is n_cache = batch (bitwise); n_cache 0
   with every row padding touches nothing and gives y 0; batch 0 and dim 0 are refused by name,
   nothing written. */
#define EMPTY_ENTRY(what, P, run, nb, nst, ny, st0, st1, keep, y0, y1, pad)                                         \
    do {                                                                                                           \
        int i_;                                                                                                    \
        memcpy(st0, keep, (nst) * sizeof(float));                                                                  \
        memcpy(st1, keep, (nst) * sizeof(float));                                                                  \
        (P).state_index = NULL; (P).n_cache = 0; (P).state.data = st0; (P).y.data = y0;                            \
        CHECK(run(&(P)) == SELSCAN_OK, what ": n_cache 0 (batch) runs");                                           \
        (P).n_cache = (nb); (P).state.data = st1; (P).y.data = y1;                                                 \
        CHECK(run(&(P)) == SELSCAN_OK && all_equal(st0, st1, nst) && all_equal(y0, y1, ny),                        \
              what ": n_cache 0 is n_cache = batch, bitwise");                                                     \
        memcpy(st0, keep, (nst) * sizeof(float));                                                                  \
        for (i_ = 0; i_ < (ny); i_++) y0[i_] = 7.0f;                                                               \
        (P).n_cache = 0; (P).state_index = pad; (P).state.data = st0; (P).y.data = y0;                             \
        CHECK(run(&(P)) == SELSCAN_OK && all_equal(st0, keep, nst) && all_zero(y0, ny),                            \
              what ": n_cache 0 all padding: y 0, state untouched");                                               \
        (P).state_index = NULL; (P).batch = 0; diag_reset();                                                       \
        CHECK(refused_size(run(&(P)), "batch") && all_equal(st0, keep, nst) && all_zero(y0, ny),                  \
              what ": batch 0 refused, nothing written");                                                          \
        (P).batch = (nb); (P).dim = 0; diag_reset();                                                               \
        CHECK(refused_size(run(&(P)), "dim") && all_equal(st0, keep, nst) && all_zero(y0, ny),                    \
              what ": dim 0 refused, nothing written");                                                            \
    } while (0)

static void empty_rules(void) {
    float st0[3 * 4 * 3], st1[3 * 4 * 3], keep[3 * 4 * 3], y0[3 * 4], y1[3 * 4];
    float cst0[2 * 3 * 2], cst1[2 * 3 * 2], ckeep[2 * 3 * 2], cx[2 * 3], cw[3 * 3], cy0[2 * 3], cy1[2 * 3];
    int32_t pad[3] = {-1, -1, INT32_MIN}, row[3] = {-1, 0, -1}, cpad[2] = {-1, -1};
    selscan_step_problem s;
    selscan_conv_step_problem cs;
    int i;
    /* the step (S0's operands, a dense state and y of batch 3 rows) */
    for (i = 0; i < 36; i++) keep[i] = (float)(i % 7) - 3.0f;
    s = S0;
    s.diag = &dg;
    memset(s.state.stride, 0, sizeof s.state.stride);
    memset(s.y.stride, 0, sizeof s.y.stride);
    EMPTY_ENTRY("empty: step", s, selscan_step_cpu, 3, 36, 12, st0, st1, keep, y0, y1, pad);
    /* the size checks: n_cache 0 is no rows (every batch row padding), batch / dim 0 an empty problem */
    s = S0; s.diag = &dg; s.n_cache = 0; s.state_index = pad; diag_reset();
    CHECK(selscan_check_step_sizes(&s, 1) == SELSCAN_OK, "empty: check_step_sizes n_cache 0, all padding");
    s.state_index = row; diag_reset();
    CHECK(selscan_check_step_sizes(&s, 1) == SELSCAN_ERR_SHAPE && dg.code == SELSCAN_RULE_INDEX_RANGE,
          "empty: check_step_sizes n_cache 0, a row index refused");
    s.dim = 0; diag_reset();
    CHECK(selscan_check_step_sizes(&s, 1) == SELSCAN_ERR_SHAPE && dg.code == SELSCAN_RULE_INDEX_RANGE,
          "empty: check_step_sizes dim 0 still checks the rows");
    s.state_index = pad; diag_reset();
    CHECK(selscan_check_step_sizes(&s, 1) == SELSCAN_OK, "empty: check_step_sizes dim 0");
    s = S0; s.diag = &dg; s.batch = 0; s.n_cache = 0; s.state_index = NULL; diag_reset();
    CHECK(selscan_check_step_sizes(&s, 0) == SELSCAN_OK, "empty: check_step_sizes batch 0, n_cache 0");

    /* the conv update (batch 2, dim 3, width 3, state_len 2; dense operands): the same rules */
    for (i = 0; i < 12; i++) ckeep[i] = (float)(i % 5) - 2.0f;
    for (i = 0; i < 6; i++) cx[i] = (float)i * 0.25f - 0.5f;
    for (i = 0; i < 9; i++) cw[i] = (float)(i % 4) * 0.5f - 0.75f;
    memset(&cs, 0, sizeof cs);
    cs.batch = 2; cs.dim = 3; cs.width = 3; cs.state_len = 2; cs.dtype = SELSCAN_F32; cs.diag = &dg;
    cs.x.data = cx; cs.weight.data = cw;
    EMPTY_ENTRY("empty: conv step", cs, selscan_conv_step_cpu, 2, 12, 6, cst0, cst1, ckeep, cy0, cy1, cpad);
    cs.batch = 2; cs.dim = 3; cs.n_cache = 0; cs.state_index = cpad; diag_reset();
    CHECK(selscan_check_conv_step_sizes(&cs, 1) == SELSCAN_OK, "empty: check_conv_step_sizes n_cache 0, all padding");
    cs.state_index = NULL; diag_reset();
    CHECK(selscan_check_conv_step_sizes(&cs, 0) == SELSCAN_ERR_SHAPE && dg.code == SELSCAN_RULE_NOT_BATCH,
          "empty: check_conv_step_sizes n_cache 0 without state_index: not batch");
    cs.batch = 0; diag_reset();
    CHECK(selscan_check_conv_step_sizes(&cs, 0) == SELSCAN_OK, "empty: check_conv_step_sizes batch 0, n_cache 0");
}
#undef EMPTY_ENTRY

int main(void) {
    tc_init("test_validation");
    CHECK(strcmp(selscan_status_name(SELSCAN_ERR_SHAPE), "SELSCAN_ERR_SHAPE") == 0 &&
              strcmp(selscan_status_name(SELSCAN_OK), "SELSCAN_OK") == 0 &&
              strcmp(selscan_status_name((selscan_status)99), "unknown status") == 0,
          "status names");
    fixture(&P, &G, 0, 0);
    fixture(&PK, &GK, 1, 0);
    CHECK(selscan_workspace_size(&P.p, NULL, &wsf) == SELSCAN_OK && selscan_workspace_size(&P.p, &G.g, &wsb) == SELSCAN_OK &&
              selscan_workspace_size(&PK.p, NULL, &wsfk) == SELSCAN_OK &&
              selscan_workspace_size(&PK.p, &GK.g, &wsbk) == SELSCAN_OK,
          "workspace sizes of the fixtures");
    {
        size_t m = wsf, wsx = 0;
        tc_prob Q;
        tc_grads H;
        int nb0 = nbufs;
        fixture(&Q, &H, 0, SELSCAN_FIXED_B | SELSCAN_FIXED_C);
        selscan_workspace_size(&Q.p, &H.g, &wsx);
        nbufs = nb0;
        tc_grads_free(&H);
        tc_prob_free(&Q);
        if (wsb > m) m = wsb;
        if (wsfk > m) m = wsfk;
        if (wsbk > m) m = wsbk;
        if (wsx > m) m = wsx;
        m = (m + 4095) / 4096 * 4096;
        arena_bytes = m + 16384;
        if (posix_memalign((void **)&arena, 64, arena_bytes) != 0) return 2;
        memset(arena, 0x5A, arena_bytes);
        place = arena + m;
        reg(arena, arena_bytes);
    }
    /* status strings: distinct and named, unknown values handled */
    {
        int i, j, ok = 1;
        for (i = 0; i < SELSCAN__STATUS_COUNT; i++) {
            const char *s = selscan_status_string((selscan_status)i);
            ok &= s && *s && strcmp(s, "unknown status") != 0;
            for (j = 0; j < i; j++) ok &= strcmp(s, selscan_status_string((selscan_status)j)) != 0;
        }
        CHECK(ok, "status strings distinct and non-empty");
        CHECK(strcmp(selscan_status_string((selscan_status)-1), "unknown status") == 0 &&
                  strcmp(selscan_status_string((selscan_status)SELSCAN__STATUS_COUNT), "unknown status") == 0,
              "out-of-range status names");
        CHECK(SELSCAN_OK == 0, "SELSCAN_OK is 0");
    }
    problem_rules();
    grad_rules();
    fixed_rules();
    packed_rules();
    step_fixture();
    step_rules();
    step_overlap_rules();
    rule_codes();
    size_rules_alone();
    empty_rules();
    {
        int i;
        for (i = 0; i < nbufs; i++) free(bufs[i].snap);
    }
    tc_grads_free(&G); tc_grads_free(&GK); tc_prob_free(&P); tc_prob_free(&PK);
    tc_tensor_free(&sx); tc_tensor_free(&sdt); tc_tensor_free(&sz); tc_tensor_free(&sy); tc_tensor_free(&sA);
    tc_tensor_free(&sB); tc_tensor_free(&sC); tc_tensor_free(&sD); tc_tensor_free(&sbias); tc_tensor_free(&sstate);
    free(arena);
    return tc_finish();
}
