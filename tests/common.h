/* tests/common.h - shared code of selscan's test suites (tests/test_*.c).
 *
 * Include it after selscan.h; exactly one translation unit (the suite) defines
 * SELSCAN_IMPLEMENTATION. Everything here is static inline, so unused parts cost nothing.
 * Compiled as gnu11 (posix_memalign, _Float16 where gcc has it).
 *
 * Checks and counters
 *   CHECK(cond, fmt, ...)   counts a pass, or a failure printed as "FAIL file:line: message";
 *                           evaluates to 1 when cond holds, else 0.
 *   tc_init(name)           prints the suite name and seed; seeds the generator from
 *                           SELSCAN_TEST_SEED (decimal or 0x hex; default TC_DEFAULT_SEED).
 *   tc_finish()             prints the suite's last line "N passed, N failed"; returns the
 *                           process exit status (0 when nothing failed).
 *   tc_failed()             failures so far
 *   tc_quick()              1 when SELSCAN_TEST_QUICK is set and not "0" (smaller random matrix,
 *                           used for the sanitizer run).
 *
 * Tolerances (the ONE place they are stated; relative error ||out - ref|| / ||ref||). The f32
 * ones are measured constants; an f16 / bf16 one is derived from the dtype's rounding by one rule,
 * tc_tol_lowp (the torch tests' _common.lowp_tol): f32 tolerance + k u(dt), k the roundings to dt
 * between the compared values (each stated where used).
 *   TOL_FWD_F32             forward y vs the fp64 oracle on the (dtype-rounded) inputs
 *   TOL_STATE               h_last (always f32) vs the fp64 oracle, for every dtype
 *   TOL_GRAD_FD             f32 gradients vs fp64 central differences of the oracle's loss
 *   TOL_GRAD_SAME           gradients vs the library's f32 gradients on the same rounded values
 *   TOL_IDENT               identities of the library against itself (packed vs separate,
 *                           chained halves, steps vs forward) in f32
 *   tc_unit_roundoff(dt)    u = 2^-p: 2^-24 f32, 2^-11 f16, 2^-8 bf16 (tol_lowp.h)
 *   tc_tol_lowp(dt, f32_tol, k)   f32_tol + k u(dt) for f16 / bf16, f32_tol for f32 (tol_lowp.h)
 *   tc_tol_fwd(dt)          forward vs the oracle: k = 1 (y rounded once from f32)
 *   tc_tol_grad(dt)         a dt-typed gradient vs the library's f32 one: k = 1
 *   tc_tol_grad_fd(dt)      a dt-typed gradient vs fp64 central differences: k = 1
 *   tc_dtname(dt)           "f32", "f16", "bf16"
 *
 * Random numbers (splitmix64, one global stream)
 *   tc_u64(), tc_uniform(lo, hi), tc_randint(lo, hi) (inclusive), tc_coin(p)
 *
 * dtypes, independent of the library's conversion routines
 *   tc_round(dt, x)         x rounded to dtype dt, round-to-nearest-even, overflow to inf (double)
 *   tc_f16_decode(bits), tc_bf16_decode(bits)     exact value of a 16-bit pattern
 *   tc_f16_encode(x), tc_bf16_encode(x)           16-bit pattern of an exactly representable x
 *   tc_encode(dt, x, dst)   store an exactly representable x as dt at dst
 *   tc_esize(dt)            bytes per element
 *   tc_decode(dt, src)      the value stored at src
 *
 * Tensors (tc_tensor): a logical shape, the values the oracle reads (v, row-major logical order,
 * always allocated, zeros for an absent operand), and the memory the library reads or writes
 * (mem, NULL when absent) in one of the layouts TC_LAYOUT_*: contiguous with zero strides passed,
 * contiguous with explicit strides, last dimension moved to position 1 (channels-last: (B,L,D)
 * for u, (B,L,G,N) for B; transposed for 2-D), random permutation with padding and an odd start
 * offset, or broadcast (stride 0 on the first dimension; inputs only). Gaps are filled with the
 * poison byte 0xFF (NaN in every dtype), so a stray read of an input shows up as NaN.
 *   tc_tensor_make(t, dt, nd, n0, n1, n2, n3, layout, present)
 *   tc_tensor_like(dst, src, dt)   same shape and layout, values of src rounded to dt
 *   tc_tensor_free(t)
 *   tc_fill(t, lo, hi)             uniform values, rounded to t's dtype, written to mem
 *   tc_store(t) / tc_load(t)       v -> mem (encoded) / mem -> v (decoded)
 *   tc_get(t, i)                   the value in mem of logical element i
 *   tc_off(t, i)                   element offset of logical element i from t->data
 *   tc_api(t) / tc_api_explicit(t) the selscan_tensor (zero strides or always explicit)
 *   tc_view(t, dim, start)         explicit-stride selscan_tensor starting at index start of dim
 *   tc_poison(t)                   every byte of the allocation = 0xFF
 *   tc_unwritten(t)                logical elements still all-0xFF (not written)
 *   tc_gaps_dirty(t)               bytes outside the logical elements that are no longer 0xFF
 *   tc_snapshot(t) / tc_same(t, snap)   copy of the allocation / 1 if unchanged (memcmp)
 *   tc_rel_err(t, ref)             ||mem values - ref|| / ||ref|| (inf on NaN; absolute if ref 0)
 *   tc_rel_err_arr(a, b, n)        the same for two double arrays
 *
 * Problems (tc_prob): a random problem over every option (tc_cfg) with its tensors and the
 * selscan_problem that points at them.
 *   tc_cfg_random(c, dt, max_work)   random options; batch*dim*L*N <= max_work
 *   tc_prob_make(P, c)               allocate and fill; P->p is ready to call
 *   tc_prob_like(P2, P, dt)          same problem, layouts and (rounded) values in dtype dt
 *   tc_prob_free(P), tc_prob_describe(P, buf, size)
 *   tc_grads_make(G, P, want, dhlast)  dy (and dh_last) random; outputs in want (TC_G_* bits)
 *   tc_grads_free(G)
 *   tc_prob_api(P)                   (re)build P->p from P's tensors (n_groups 0 or 1 at random when 1)
 *   tc_cu_random(cu, nseq, L)        random offsets 0 = cu[0] <= ... <= cu[nseq] = L, one sequence
 *                                    empty when nseq >= 2
 *   tc_grads_api(G), tc_grads_poison(G)   rebuild G->g (every output passed) / poison all outputs
 *   TC_G_DU ... TC_G_DH0, TC_G_ALL   gradient selection bits (want) of tc_grads_make
 *   tc_ws(bytes) / tc_ws_free(p)     64-byte aligned workspace, filled with 0xCD
 *   tc_run_cpu(p, g, fill)           selscan_forward_cpu (g NULL) / selscan_backward_cpu with a
 *                                    workspace of the size selscan asks for (0xCD, or every byte
 *                                    fill when fill >= 0); the size query's or the call's status
 *
 * fp64 oracle (written from DESIGN.md section 1, not from the library's code)
 *   tc_oracle_forward(P, y, hlast)   y (batch*dim*L), hlast (rows*dim*N), logical order; NULL ok
 *   tc_oracle_loss(P, dy, dhl)       sum(dy*y) + sum(dhl*h_last) (dhl may be NULL)
 *   tc_fd_grad(P, x, dy, dhl, out)   central differences of the loss w.r.t. every element of
 *                                    the input tensor x (one of P's tensors), into out
 *   tc_oracle_step(...)              one decode step of one (batch row, channel), in double
 *   tc_softplus(x), tc_silu(x)       in double, softplus with the threshold 20 of DESIGN.md
 */
#ifndef SELSCAN_TESTS_COMMON_H
#define SELSCAN_TESTS_COMMON_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../selscan.h"
#include "tol_lowp.h"

/* ------------------------------------------------------------------ tolerances (one place) -- */
#define TOL_FWD_F32 2e-5
#define TOL_STATE 2e-5
#define TOL_GRAD_FD 2e-3
#define TOL_GRAD_SAME 1e-5
#define TOL_IDENT 1e-5

#define TC_DEFAULT_SEED 20260521ull

/* tc_unit_roundoff, tc_tol_lowp: the f16 / bf16 rule (tol_lowp.h, shared with the CUDA suites) */
static inline double tc_tol_fwd(selscan_dtype dt) { return tc_tol_lowp(dt, TOL_FWD_F32, 1); }
static inline double tc_tol_grad(selscan_dtype dt) { return tc_tol_lowp(dt, TOL_GRAD_SAME, 1); }
static inline double tc_tol_grad_fd(selscan_dtype dt) { return tc_tol_lowp(dt, TOL_GRAD_FD, 1); }
static inline const char *tc_dtname(selscan_dtype dt) {
    return dt == SELSCAN_F32 ? "f32" : dt == SELSCAN_F16 ? "f16" : dt == SELSCAN_BF16 ? "bf16" : "?";
}

/* ------------------------------------------------------------------------ checks, counters -- */
static inline int *tc__counts(void) {
    static int c[2];
    return c;
}

static inline int tc_check(int ok, const char *file, int line, const char *fmt, ...) {
    if (ok) {
        tc__counts()[0]++;
    } else {
        va_list ap;
        tc__counts()[1]++;
        printf("FAIL %s:%d: ", file, line);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
        fflush(stdout);
    }
    return ok;
}
#define CHECK(cond, ...) tc_check((cond) ? 1 : 0, __FILE__, __LINE__, __VA_ARGS__)

static inline int tc_finish(void) {
    printf("%d passed, %d failed\n", tc__counts()[0], tc__counts()[1]);
    fflush(stdout);
    return tc__counts()[1] ? 1 : 0;
}

static inline int tc_failed(void) { return tc__counts()[1]; }

static inline int tc_quick(void) {
    const char *e = getenv("SELSCAN_TEST_QUICK");
    return e && *e && strcmp(e, "0") != 0;
}

/* ---------------------------------------------------------------------------------- random -- */
static inline uint64_t *tc__rng(void) {
    static uint64_t s = TC_DEFAULT_SEED;
    return &s;
}
static inline uint64_t tc_u64(void) {
    uint64_t z = (*tc__rng() += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline double tc_uniform(double lo, double hi) {
    return lo + (hi - lo) * (double)(tc_u64() >> 11) * (1.0 / 9007199254740992.0);
}
static inline int64_t tc_randint(int64_t lo, int64_t hi) { return lo + (int64_t)(tc_u64() % (uint64_t)(hi - lo + 1)); }
static inline int tc_coin(double p) { return tc_uniform(0, 1) < p; }

static inline void tc_init(const char *name) {
    const char *e = getenv("SELSCAN_TEST_SEED");
    uint64_t seed = TC_DEFAULT_SEED;
    if (e && *e) seed = strtoull(e, NULL, 0);
    *tc__rng() = seed;
    printf("%s: seed %llu (set SELSCAN_TEST_SEED to change)%s\n", name, (unsigned long long)seed,
           tc_quick() ? ", quick matrix (SELSCAN_TEST_QUICK)" : "");
    fflush(stdout);
}

/* --------------------------------------------------------------------------------- dtypes -- */
static inline double tc_round(selscan_dtype dt, double x) {
    double a = fabs(x), q, r;
    int e, E, emin, mbits;
    double maxv;
    if (dt == SELSCAN_F32) return (double)(float)x;
    if (isnan(x) || isinf(x) || a == 0) return x;
    if (dt == SELSCAN_F16) { emin = -14; mbits = 10; maxv = 65504.0; }
    else { emin = -126; mbits = 7; maxv = ldexp(255.0, 120); }
    frexp(a, &e);
    E = e - 1 < emin ? emin : e - 1; /* a in [2^E, 2^(E+1)) or subnormal */
    q = ldexp(1.0, E - mbits);       /* spacing of representable values there */
    r = nearbyint(a / q) * q;        /* a / q is exact (power of two); ties to even */
    if (r > maxv) r = INFINITY;
    return copysign(r, x);
}

static inline double tc_f16_decode(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0) v = ldexp((double)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexp((double)(m + 1024), e - 25);
    return (h & 0x8000) ? -v : v;
}

static inline double tc_bf16_decode(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return (double)f;
}

static inline uint16_t tc_f16_encode(double x) { /* x exactly representable in f16 (or inf, NaN) */
    uint16_t s = signbit(x) ? 0x8000 : 0;
    double a = fabs(x);
    int e;
    if (isnan(x)) return (uint16_t)(s | 0x7e00);
    if (isinf(x)) return (uint16_t)(s | 0x7c00);
    if (a < ldexp(1.0, -14)) return (uint16_t)(s | (uint16_t)(a * ldexp(1.0, 24)));
    frexp(a, &e);
    return (uint16_t)(s | ((e - 1 + 15) << 10) | (uint16_t)((a / ldexp(1.0, e - 1) - 1.0) * 1024.0));
}

static inline uint16_t tc_bf16_encode(double x) { /* x exactly representable in bf16 */
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    if (isnan(x)) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)(u >> 16);
}

static inline size_t tc_esize(selscan_dtype dt) { return dt == SELSCAN_F32 ? 4 : 2; }

static inline void tc_encode(selscan_dtype dt, double x, void *dst) {
    if (dt == SELSCAN_F32) { float f = (float)x; memcpy(dst, &f, 4); }
    else { uint16_t h = dt == SELSCAN_F16 ? tc_f16_encode(x) : tc_bf16_encode(x); memcpy(dst, &h, 2); }
}

static inline double tc_decode(selscan_dtype dt, const void *src) {
    if (dt == SELSCAN_F32) { float f; memcpy(&f, src, 4); return (double)f; }
    else {
        uint16_t h;
        memcpy(&h, src, 2);
        return dt == SELSCAN_F16 ? tc_f16_decode(h) : tc_bf16_decode(h);
    }
}

/* -------------------------------------------------------------------------------- tensors -- */
enum { TC_LAYOUT_CONTIG = 0, TC_LAYOUT_EXPLICIT, TC_LAYOUT_LASTTO1, TC_LAYOUT_PADDED, TC_LAYOUT_BCAST, TC_NLAYOUTS };

typedef struct tc_tensor {
    int nd;
    int64_t n[4];       /* logical sizes (1 past nd) */
    int64_t s[4];       /* element strides in memory */
    int64_t count;      /* logical elements */
    int64_t alloc;      /* elements allocated */
    int64_t off;        /* element offset of data from mem */
    int layout;
    selscan_dtype dt;
    unsigned char *mem; /* allocation; NULL: operand absent */
    void *data;         /* mem + off elements */
    double *v;          /* logical values (row-major), always allocated */
} tc_tensor;

static inline int64_t tc_off(const tc_tensor *t, int64_t i) {
    int64_t o = 0;
    int k;
    for (k = t->nd - 1; k >= 0; k--) { o += (i % t->n[k]) * t->s[k]; i /= t->n[k]; }
    return o;
}

static inline void tc__layout(tc_tensor *t) {
    int perm[4] = {0, 1, 2, 3}, k, nd = t->nd;
    int64_t acc = 1;
    t->off = 0;
    if (t->layout == TC_LAYOUT_LASTTO1) {
        if (nd == 2) { perm[0] = 1; perm[1] = 0; }
        else if (nd >= 3) { perm[0] = 0; perm[1] = nd - 1; for (k = 2; k < nd; k++) perm[k] = k - 1; }
    } else if (t->layout == TC_LAYOUT_PADDED) {
        for (k = nd - 1; k > 0; k--) { int j = (int)tc_randint(0, k), x = perm[k]; perm[k] = perm[j]; perm[j] = x; }
        t->off = tc_randint(0, 3) * 2 + 1;
    }
    for (k = nd - 1; k >= 0; k--) {
        int d = perm[k];
        if (t->layout == TC_LAYOUT_PADDED) t->s[d] = acc * (k == nd - 1 ? tc_randint(1, 2) : 1) + (k == nd - 1 ? 0 : tc_randint(0, 3));
        else t->s[d] = acc;
        acc = t->s[d] * t->n[d];
    }
    if (t->layout == TC_LAYOUT_BCAST && nd > 1) t->s[0] = 0, acc = t->s[1] * t->n[1];
    if (t->layout == TC_LAYOUT_BCAST && nd == 1) t->s[0] = 0, acc = 1;
    for (k = nd; k < 4; k++) t->s[k] = 0;
    t->alloc = acc + t->off + (t->layout == TC_LAYOUT_PADDED ? tc_randint(0, 3) : 0);
}

/* Writes v (encoded) into mem at every logical element. */
static inline void tc_store(tc_tensor *t) {
    int64_t i;
    size_t es = tc_esize(t->dt);
    if (!t->mem) return;
    for (i = 0; i < t->count; i++) tc_encode(t->dt, t->v[i], (unsigned char *)t->data + tc_off(t, i) * es);
}

static inline double tc_get(const tc_tensor *t, int64_t i) {
    return tc_decode(t->dt, (const unsigned char *)t->data + tc_off(t, i) * tc_esize(t->dt));
}

static inline void tc_load(tc_tensor *t) {
    int64_t i;
    if (!t->mem) return;
    for (i = 0; i < t->count; i++) t->v[i] = tc_get(t, i);
}

static inline void tc_poison(tc_tensor *t) {
    if (t->mem) memset(t->mem, 0xFF, (size_t)t->alloc * tc_esize(t->dt));
}

static inline void tc_tensor_make(tc_tensor *t, selscan_dtype dt, int nd, int64_t n0, int64_t n1, int64_t n2, int64_t n3,
                                  int layout, int present) {
    int k;
    memset(t, 0, sizeof *t);
    t->nd = nd; t->dt = dt; t->layout = layout;
    t->n[0] = n0; t->n[1] = n1; t->n[2] = n2; t->n[3] = n3;
    for (k = nd; k < 4; k++) t->n[k] = 1;
    t->count = t->n[0] * t->n[1] * t->n[2] * t->n[3];
    t->v = (double *)calloc((size_t)t->count, sizeof(double));
    tc__layout(t);
    if (present) {
        t->mem = (unsigned char *)malloc((size_t)t->alloc * tc_esize(dt));
        t->data = t->mem + (size_t)t->off * tc_esize(dt);
        tc_poison(t);
    }
}

static inline void tc_tensor_like(tc_tensor *d, const tc_tensor *s, selscan_dtype dt) {
    int64_t i;
    *d = *s;
    d->dt = dt;
    d->v = (double *)malloc((size_t)s->count * sizeof(double));
    for (i = 0; i < s->count; i++) d->v[i] = tc_round(dt, s->v[i]);
    if (s->mem) {
        d->mem = (unsigned char *)malloc((size_t)d->alloc * tc_esize(dt));
        d->data = d->mem + (size_t)d->off * tc_esize(dt);
        tc_poison(d);
        tc_store(d);
    }
}

static inline void tc_tensor_free(tc_tensor *t) {
    free(t->mem);
    free(t->v);
    memset(t, 0, sizeof *t);
}

/* Uniform values in [lo, hi), rounded to the dtype; broadcast layouts re-read the memory. */
static inline void tc_fill(tc_tensor *t, double lo, double hi) {
    int64_t i;
    for (i = 0; i < t->count; i++) t->v[i] = tc_round(t->dt, tc_uniform(lo, hi));
    if (t->mem) { tc_store(t); tc_load(t); }
    else memset(t->v, 0, (size_t)t->count * sizeof(double));
}

static inline selscan_tensor tc_api_explicit(const tc_tensor *t) {
    selscan_tensor r;
    int k;
    memset(&r, 0, sizeof r);
    r.data = t->mem ? t->data : NULL;
    for (k = 0; k < t->nd; k++) r.stride[k] = t->s[k];
    return r;
}

static inline selscan_tensor tc_api(const tc_tensor *t) {
    selscan_tensor r = tc_api_explicit(t);
    if (t->layout == TC_LAYOUT_CONTIG) memset(r.stride, 0, sizeof r.stride);
    return r;
}

static inline selscan_tensor tc_view(const tc_tensor *t, int dim, int64_t start) {
    selscan_tensor r = tc_api_explicit(t);
    if (r.data) r.data = (unsigned char *)t->data + (size_t)(start * t->s[dim]) * tc_esize(t->dt);
    return r;
}

/* The same view as an output (selscan_out_tensor); tc_mut converts any input-typed view. */
static inline selscan_out_tensor tc_mut(selscan_tensor t) {
    selscan_out_tensor r;
    memcpy(r.stride, t.stride, sizeof r.stride);
    r.data = (void *)(uintptr_t)t.data;
    return r;
}
static inline selscan_out_tensor tc_out(const tc_tensor *t) { return tc_mut(tc_api(t)); }

static inline int64_t tc_unwritten(const tc_tensor *t) {
    int64_t i, bad = 0;
    size_t es = tc_esize(t->dt), k;
    if (!t->mem) return 0;
    for (i = 0; i < t->count; i++) {
        const unsigned char *p = (const unsigned char *)t->data + tc_off(t, i) * es;
        int all = 1;
        for (k = 0; k < es; k++) all &= p[k] == 0xFF;
        bad += all;
    }
    return bad;
}

static inline int64_t tc_gaps_dirty(const tc_tensor *t) {
    size_t es = tc_esize(t->dt), nb = (size_t)t->alloc * es, k;
    unsigned char *mark;
    int64_t i, bad = 0;
    if (!t->mem) return 0;
    mark = (unsigned char *)calloc(nb, 1);
    for (i = 0; i < t->count; i++) memset(mark + (size_t)(tc_off(t, i) + t->off) * es, 1, es);
    for (k = 0; k < nb; k++) bad += !mark[k] && t->mem[k] != 0xFF;
    free(mark);
    return bad;
}

static inline unsigned char *tc_snapshot(const tc_tensor *t) {
    size_t nb = (size_t)t->alloc * tc_esize(t->dt);
    unsigned char *p = (unsigned char *)malloc(nb ? nb : 1);
    if (t->mem) memcpy(p, t->mem, nb);
    return p;
}
static inline int tc_same(const tc_tensor *t, const unsigned char *snap) {
    return !t->mem || memcmp(t->mem, snap, (size_t)t->alloc * tc_esize(t->dt)) == 0;
}

static inline double tc_rel_err_arr(const double *a, const double *ref, int64_t n) {
    double num = 0, den = 0;
    int64_t i;
    for (i = 0; i < n; i++) {
        double d = a[i] - ref[i];
        if (isnan(a[i]) || isnan(ref[i])) return INFINITY;
        num += d * d;
        den += ref[i] * ref[i];
    }
    if (isnan(num) || isinf(num)) return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline double tc_rel_err(const tc_tensor *t, const double *ref) {
    double *a = (double *)malloc((size_t)t->count * sizeof(double)), r;
    int64_t i;
    for (i = 0; i < t->count; i++) a[i] = tc_get(t, i);
    r = tc_rel_err_arr(a, ref, t->count);
    free(a);
    return r;
}

/* ------------------------------------------------------------------------------ workspace -- */
static inline void *tc_ws(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return NULL;
    memset(p, 0xCD, bytes ? bytes : 64);
    return p;
}
static inline void tc_ws_free(void *p) { free(p); }

static inline selscan_status tc_run_cpu(const selscan_problem *p, const selscan_grads *g, int fill) {
    size_t bytes = 0;
    void *ws;
    selscan_status st = selscan_workspace_size(p, g, &bytes);
    if (st != SELSCAN_OK) return st;
    ws = tc_ws(bytes);
    if (ws && fill >= 0) memset(ws, fill, bytes);
    st = g ? selscan_backward_cpu(p, g, bytes ? ws : NULL, bytes) : selscan_forward_cpu(p, bytes ? ws : NULL, bytes);
    tc_ws_free(ws);
    return st;
}

/* ------------------------------------------------------------------------------- problems -- */
typedef struct tc_cfg {
    selscan_dtype dt;
    int64_t batch, dim, L, N, G;
    unsigned flags;
    int D, z, bias, h0, hlast; /* optional operands present */
    int nseq;                  /* > 0: packed sequences, batch 1 */
    int layout;                /* TC_LAYOUT_* for every tensor, or -1: random per tensor */
    int bcast;                 /* random layouts may broadcast inputs (forward only) */
    int big_delta;             /* with softplus: 1: some delta + bias > 20 (threshold branch), 2: all */
} tc_cfg;

typedef struct tc_prob {
    tc_cfg c;
    int64_t rows;
    int64_t *cu;
    tc_tensor u, delta, A, B, C, D, z, bias, h0, y, hlast;
    selscan_problem p;
} tc_prob;

static inline int tc__pick_layout(const tc_cfg *c, int input) {
    if (c->layout == TC_LAYOUT_BCAST && !input) return TC_LAYOUT_EXPLICIT;
    if (c->layout >= 0) return c->layout;
    return (int)tc_randint(0, (input && c->bcast) ? TC_LAYOUT_BCAST : TC_LAYOUT_PADDED);
}

static inline void tc_prob_api(tc_prob *P) {
    selscan_problem *p = &P->p;
    memset(p, 0, sizeof *p);
    p->batch = P->c.batch; p->dim = P->c.dim; p->seqlen = P->c.L; p->dstate = P->c.N;
    p->n_groups = (P->c.G == 1 && tc_coin(0.5)) ? 0 : P->c.G;
    p->dtype = P->c.dt;
    p->flags = P->c.flags;
    p->cu_seqlens = P->cu;
    p->n_seqs = P->cu ? P->c.nseq : 0;
    p->u = tc_api(&P->u); p->delta = tc_api(&P->delta); p->A = tc_api(&P->A);
    p->B = tc_api(&P->B); p->C = tc_api(&P->C); p->D = tc_api(&P->D); p->z = tc_api(&P->z);
    p->delta_bias = tc_api(&P->bias); p->h0 = tc_api(&P->h0); p->y = tc_out(&P->y);
    p->h_last = tc_out(&P->hlast);
}

static inline void tc_cu_random(int64_t *cu, int nseq, int64_t L) {
    int k, empty = nseq >= 2 ? (int)tc_randint(0, nseq - 1) : -1;
    cu[0] = 0;
    for (k = 1; k < nseq; k++) cu[k] = tc_randint(0, L);
    for (k = 1; k < nseq; k++) { /* sort the inner offsets */
        int j;
        int64_t x = cu[k];
        for (j = k; j > 1 && cu[j - 1] > x; j--) cu[j] = cu[j - 1];
        cu[j] = x;
    }
    cu[nseq] = L;
    if (empty >= 0 && empty + 1 < nseq) cu[empty + 1] = cu[empty]; /* one empty sequence */
    else if (empty >= 0) cu[empty] = L;
}

static inline void tc_prob_make(tc_prob *P, const tc_cfg *c) {
    const tc_cfg *C = c;
    int64_t B = C->batch, Dm = C->dim, L = C->L, N = C->N, G = C->G, i;
    selscan_dtype T = C->dt;
    int fixB = (C->flags & SELSCAN_FIXED_B) != 0, fixC = (C->flags & SELSCAN_FIXED_C) != 0;
    int sp = (C->flags & SELSCAN_DELTA_SOFTPLUS) != 0;
    memset(P, 0, sizeof *P);
    P->c = *c;
    P->rows = C->nseq > 0 ? C->nseq : B;
    if (C->nseq > 0) {
        P->cu = (int64_t *)malloc(sizeof(int64_t) * (size_t)(C->nseq + 1));
        tc_cu_random(P->cu, C->nseq, L);
    }
    tc_tensor_make(&P->u, T, 3, B, Dm, L, 1, tc__pick_layout(C, 1), 1);
    tc_tensor_make(&P->delta, T, 3, B, Dm, L, 1, tc__pick_layout(C, 1), 1);
    tc_tensor_make(&P->z, T, 3, B, Dm, L, 1, tc__pick_layout(C, 1), C->z);
    tc_tensor_make(&P->A, SELSCAN_F32, 2, Dm, N, 1, 1, tc__pick_layout(C, 0), 1);
    if (fixB) tc_tensor_make(&P->B, SELSCAN_F32, 2, Dm, N, 1, 1, tc__pick_layout(C, 0), 1);
    else tc_tensor_make(&P->B, T, 4, B, G, N, L, tc__pick_layout(C, 1), 1);
    if (fixC) tc_tensor_make(&P->C, SELSCAN_F32, 2, Dm, N, 1, 1, tc__pick_layout(C, 0), 1);
    else tc_tensor_make(&P->C, T, 4, B, G, N, L, tc__pick_layout(C, 1), 1);
    tc_tensor_make(&P->D, SELSCAN_F32, 1, Dm, 1, 1, 1, tc__pick_layout(C, 0), C->D);
    tc_tensor_make(&P->bias, SELSCAN_F32, 1, Dm, 1, 1, 1, tc__pick_layout(C, 0), C->bias);
    tc_tensor_make(&P->h0, SELSCAN_F32, 3, P->rows, Dm, N, 1, tc__pick_layout(C, 0), C->h0);
    tc_tensor_make(&P->y, T, 3, B, Dm, L, 1, tc__pick_layout(C, 0), 1);
    tc_tensor_make(&P->hlast, SELSCAN_F32, 3, P->rows, Dm, N, 1, tc__pick_layout(C, 0), C->hlast);

    tc_fill(&P->u, -2, 2);
    if (sp) {
        /* around softplus' knee, both signs; some near and above the threshold 20: delta + bias
           in [19, 19.8], [20.2, 21] or [21.5, 24] (away from the kink, for finite differences) */
        tc_fill(&P->bias, -1, 1);
        for (i = 0; i < P->delta.count; i++) {
            double x = tc_uniform(-4, 3);
            if (C->big_delta == 2 || (C->big_delta && tc_coin(0.08))) {
                const int64_t d = (i / L) % Dm;
                const double r = tc_uniform(0, 1);
                x = (r < 0.5 ? tc_uniform(21.5, 24) : r < 0.75 ? tc_uniform(19, 19.8) : tc_uniform(20.2, 21)) - P->bias.v[d];
            }
            P->delta.v[i] = tc_round(T, x);
        }
        tc_store(&P->delta);
        tc_load(&P->delta);
    } else {
        tc_fill(&P->delta, 0.01, 0.6);
        tc_fill(&P->bias, 0, 0.1);
    }
    for (i = 0; i < P->A.count; i++) P->A.v[i] = (double)(float)-exp(tc_uniform(-3, 1.5));
    tc_store(&P->A);
    tc_load(&P->A);
    tc_fill(&P->B, -1, 1);
    tc_fill(&P->C, -1, 1);
    tc_fill(&P->D, -1, 1);
    tc_fill(&P->z, -3, 3);
    tc_fill(&P->h0, -1, 1);
    tc_prob_api(P);
}

static inline void tc_prob_like(tc_prob *P2, const tc_prob *P, selscan_dtype dt) {
    int fixB = (P->c.flags & SELSCAN_FIXED_B) != 0, fixC = (P->c.flags & SELSCAN_FIXED_C) != 0;
    memset(P2, 0, sizeof *P2);
    P2->c = P->c;
    P2->c.dt = dt;
    P2->rows = P->rows;
    if (P->cu) {
        P2->cu = (int64_t *)malloc(sizeof(int64_t) * (size_t)(P->c.nseq + 1));
        memcpy(P2->cu, P->cu, sizeof(int64_t) * (size_t)(P->c.nseq + 1));
    }
    tc_tensor_like(&P2->u, &P->u, dt);
    tc_tensor_like(&P2->delta, &P->delta, dt);
    tc_tensor_like(&P2->z, &P->z, dt);
    tc_tensor_like(&P2->A, &P->A, SELSCAN_F32);
    tc_tensor_like(&P2->B, &P->B, fixB ? SELSCAN_F32 : dt);
    tc_tensor_like(&P2->C, &P->C, fixC ? SELSCAN_F32 : dt);
    tc_tensor_like(&P2->D, &P->D, SELSCAN_F32);
    tc_tensor_like(&P2->bias, &P->bias, SELSCAN_F32);
    tc_tensor_like(&P2->h0, &P->h0, SELSCAN_F32);
    tc_tensor_like(&P2->y, &P->y, dt);
    tc_tensor_like(&P2->hlast, &P->hlast, SELSCAN_F32);
    tc_prob_api(P2);
    P2->p.n_groups = P->p.n_groups;
}

static inline void tc_prob_free(tc_prob *P) {
    tc_tensor_free(&P->u); tc_tensor_free(&P->delta); tc_tensor_free(&P->A); tc_tensor_free(&P->B);
    tc_tensor_free(&P->C); tc_tensor_free(&P->D); tc_tensor_free(&P->z); tc_tensor_free(&P->bias);
    tc_tensor_free(&P->h0); tc_tensor_free(&P->y); tc_tensor_free(&P->hlast);
    free(P->cu);
    memset(P, 0, sizeof *P);
}

static inline const char *tc_prob_describe(const tc_prob *P, char *buf, size_t size) {
    const tc_cfg *c = &P->c;
    snprintf(buf, size,
             "%s b%lld d%lld L%lld N%lld G%lld%s%s%s%s%s%s%s%s%s nseq%d layouts u%d dl%d z%d A%d B%d C%d y%d hl%d",
             tc_dtname(c->dt), (long long)c->batch, (long long)c->dim, (long long)c->L, (long long)c->N,
             (long long)c->G, (c->flags & SELSCAN_DELTA_SOFTPLUS) ? " sp" : "", (c->flags & SELSCAN_FIXED_B) ? " fixB" : "",
             (c->flags & SELSCAN_FIXED_C) ? " fixC" : "", c->D ? " D" : "", c->z ? " z" : "", c->bias ? " bias" : "",
             c->h0 ? " h0" : "", c->hlast ? " hlast" : "", c->big_delta ? " big" : "", c->nseq, P->u.layout,
             P->delta.layout, P->z.layout, P->A.layout, P->B.layout, P->C.layout, P->y.layout, P->hlast.layout);
    return buf;
}

/* Random options. max_work bounds batch*dim*L*N. */
static inline void tc_cfg_random(tc_cfg *c, selscan_dtype dt, int64_t max_work) {
    static const int64_t Ns[] = {1, 2, 3, 4, 5, 8, 13, 16, 32, 64, 128, 256};
    static const int64_t Ls[] = {1, 2, 3, 7, 16, 31, 63, 64, 65, 127, 200, 513, 1000, 2500};
    int64_t gpick[] = {1, 2, 4};
    memset(c, 0, sizeof *c);
    c->dt = dt;
    c->G = gpick[tc_randint(0, 2)];
    c->dim = c->G * tc_randint(1, 3);
    c->N = Ns[tc_randint(0, (int)(sizeof Ns / sizeof Ns[0]) - 1)];
    c->L = Ls[tc_randint(0, (int)(sizeof Ls / sizeof Ls[0]) - 1)];
    c->nseq = tc_coin(0.2) ? (int)tc_randint(1, 5) : 0;
    c->batch = c->nseq ? 1 : tc_randint(1, 3);
    while (c->batch * c->dim * c->L * c->N > max_work) {
        if (c->N > 4 && tc_coin(0.5)) c->N /= 2;
        else if (c->L > 8) c->L /= 2;
        else if (c->dim > c->G) c->dim -= c->G;
        else if (c->batch > 1) c->batch--;
        else if (c->N > 1) c->N /= 2;
        else break;
    }
    c->flags = (tc_coin(0.7) ? SELSCAN_DELTA_SOFTPLUS : 0u) | (tc_coin(0.2) ? SELSCAN_FIXED_B : 0u) |
               (tc_coin(0.2) ? SELSCAN_FIXED_C : 0u);
    c->D = tc_coin(0.6); c->z = tc_coin(0.6); c->bias = tc_coin(0.6); c->h0 = tc_coin(0.5); c->hlast = tc_coin(0.7);
    c->layout = tc_coin(0.3) ? (int)tc_randint(0, TC_LAYOUT_PADDED) : -1;
    c->big_delta = tc_coin(0.5);
}

/* ------------------------------------------------------------------------------ gradients -- */
enum {
    TC_G_DU = 1, TC_G_DDELTA = 2, TC_G_DA = 4, TC_G_DB = 8, TC_G_DC = 16, TC_G_DD = 32, TC_G_DZ = 64,
    TC_G_DBIAS = 128, TC_G_DH0 = 256, TC_G_ALL = 511
};

typedef struct tc_grads {
    tc_tensor dy, dhlast, du, ddelta, dA, dB, dC, dD, dz, dbias, dh0;
    selscan_grads g;
} tc_grads;

static inline void tc_grads_api(tc_grads *G) {
    memset(&G->g, 0, sizeof G->g);
    G->g.dy = tc_api(&G->dy); G->g.dh_last = tc_api(&G->dhlast); G->g.du = tc_out(&G->du);
    G->g.ddelta = tc_out(&G->ddelta); G->g.dA = tc_out(&G->dA); G->g.dB = tc_out(&G->dB);
    G->g.dC = tc_out(&G->dC); G->g.dD = tc_out(&G->dD); G->g.dz = tc_out(&G->dz);
    G->g.ddelta_bias = tc_out(&G->dbias); G->g.dh0 = tc_out(&G->dh0);
}

/* Grad tensors shaped like P's operands (all allocated; those not in want are not passed). */
static inline void tc_grads_make(tc_grads *G, const tc_prob *P, unsigned want, int dhlast) {
    const tc_cfg *c = &P->c;
    int lay = c->layout >= 0 && c->layout != TC_LAYOUT_BCAST ? c->layout : -1;
#define TC__LAY (lay >= 0 ? lay : (int)tc_randint(0, TC_LAYOUT_PADDED))
    memset(G, 0, sizeof *G);
    tc_tensor_make(&G->dy, c->dt, 3, c->batch, c->dim, c->L, 1, TC__LAY, 1);
    tc_tensor_make(&G->dhlast, SELSCAN_F32, 3, P->rows, c->dim, c->N, 1, TC__LAY, dhlast);
    tc_tensor_make(&G->du, c->dt, 3, c->batch, c->dim, c->L, 1, TC__LAY, 1);
    tc_tensor_make(&G->ddelta, c->dt, 3, c->batch, c->dim, c->L, 1, TC__LAY, 1);
    tc_tensor_make(&G->dz, c->dt, 3, c->batch, c->dim, c->L, 1, TC__LAY, 1);
    tc_tensor_make(&G->dA, SELSCAN_F32, 2, c->dim, c->N, 1, 1, TC__LAY, 1);
    if (c->flags & SELSCAN_FIXED_B) tc_tensor_make(&G->dB, SELSCAN_F32, 2, c->dim, c->N, 1, 1, TC__LAY, 1);
    else tc_tensor_make(&G->dB, c->dt, 4, c->batch, c->G, c->N, c->L, TC__LAY, 1);
    if (c->flags & SELSCAN_FIXED_C) tc_tensor_make(&G->dC, SELSCAN_F32, 2, c->dim, c->N, 1, 1, TC__LAY, 1);
    else tc_tensor_make(&G->dC, c->dt, 4, c->batch, c->G, c->N, c->L, TC__LAY, 1);
    tc_tensor_make(&G->dD, SELSCAN_F32, 1, c->dim, 1, 1, 1, TC__LAY, 1);
    tc_tensor_make(&G->dbias, SELSCAN_F32, 1, c->dim, 1, 1, 1, TC__LAY, 1);
    tc_tensor_make(&G->dh0, SELSCAN_F32, 3, P->rows, c->dim, c->N, 1, TC__LAY, 1);
#undef TC__LAY
    tc_fill(&G->dy, -1, 1);
    tc_fill(&G->dhlast, -1, 1);
    tc_grads_api(G);
    if (!(want & TC_G_DU)) G->g.du.data = NULL;
    if (!(want & TC_G_DDELTA)) G->g.ddelta.data = NULL;
    if (!(want & TC_G_DA)) G->g.dA.data = NULL;
    if (!(want & TC_G_DB)) G->g.dB.data = NULL;
    if (!(want & TC_G_DC)) G->g.dC.data = NULL;
    if (!(want & TC_G_DD)) G->g.dD.data = NULL;
    if (!(want & TC_G_DZ) || !c->z) G->g.dz.data = NULL;
    if (!(want & TC_G_DBIAS)) G->g.ddelta_bias.data = NULL;
    if (!(want & TC_G_DH0)) G->g.dh0.data = NULL;
}

/* The 9 gradient outputs in selscan_grads order (du .. dh0): their tensors, and the data pointer
   each was passed with (NULL: not asked for). */
static inline void tc_grads_outputs(tc_grads *G, tc_tensor *outs[9], const void *gdata[9]) {
    outs[0] = &G->du; outs[1] = &G->ddelta; outs[2] = &G->dA; outs[3] = &G->dB; outs[4] = &G->dC;
    outs[5] = &G->dD; outs[6] = &G->dz; outs[7] = &G->dbias; outs[8] = &G->dh0;
    gdata[0] = G->g.du.data; gdata[1] = G->g.ddelta.data; gdata[2] = G->g.dA.data; gdata[3] = G->g.dB.data;
    gdata[4] = G->g.dC.data; gdata[5] = G->g.dD.data; gdata[6] = G->g.dz.data; gdata[7] = G->g.ddelta_bias.data;
    gdata[8] = G->g.dh0.data;
}

static inline void tc_grads_poison(tc_grads *G) {
    tc_poison(&G->du); tc_poison(&G->ddelta); tc_poison(&G->dA); tc_poison(&G->dB); tc_poison(&G->dC);
    tc_poison(&G->dD); tc_poison(&G->dz); tc_poison(&G->dbias); tc_poison(&G->dh0);
}

static inline void tc_grads_free(tc_grads *G) {
    tc_tensor_free(&G->dy); tc_tensor_free(&G->dhlast); tc_tensor_free(&G->du); tc_tensor_free(&G->ddelta);
    tc_tensor_free(&G->dA); tc_tensor_free(&G->dB); tc_tensor_free(&G->dC); tc_tensor_free(&G->dD);
    tc_tensor_free(&G->dz); tc_tensor_free(&G->dbias); tc_tensor_free(&G->dh0);
}

/* ------------------------------------------------------------------------- fp64 oracle -- */
static inline double tc_softplus(double x) { return x > 20.0 ? x : log1p(exp(x)); }
static inline double tc_silu(double x) { return x / (1.0 + exp(-x)); }

/* Forward of DESIGN.md section 1 in double, from the tensors' v arrays (absent operands read
   as zeros; z absent: no gate). y: batch*dim*L, hlast: rows*dim*N, logical row-major. */
static inline void tc_oracle_forward(const tc_prob *P, double *y, double *hlast) {
    const tc_cfg *c = &P->c;
    const int64_t Bt = c->batch, Dm = c->dim, L = c->L, N = c->N, G = c->G, dpg = Dm / G;
    const int fixB = (c->flags & SELSCAN_FIXED_B) != 0, fixC = (c->flags & SELSCAN_FIXED_C) != 0;
    const int sp = (c->flags & SELSCAN_DELTA_SOFTPLUS) != 0, hasz = P->z.mem != NULL;
    const int64_t nseg = P->cu ? c->nseq : 1;
    double *h = (double *)malloc(sizeof(double) * (size_t)N);
    int64_t b, d, k, t, n;
    for (b = 0; b < Bt; b++)
        for (d = 0; d < Dm; d++) {
            const int64_t g = d / dpg;
            for (k = 0; k < nseg; k++) {
                const int64_t t0 = P->cu ? P->cu[k] : 0, t1 = P->cu ? P->cu[k + 1] : L, row = P->cu ? k : b;
                for (n = 0; n < N; n++) h[n] = P->h0.v[(row * Dm + d) * N + n];
                for (t = t0; t < t1; t++) {
                    const int64_t i = (b * Dm + d) * L + t;
                    const double u = P->u.v[i];
                    double dt = P->delta.v[i] + P->bias.v[d], acc = 0;
                    if (sp) dt = tc_softplus(dt);
                    for (n = 0; n < N; n++) {
                        const double Bv = fixB ? P->B.v[d * N + n] : P->B.v[((b * G + g) * N + n) * L + t];
                        const double Cv = fixC ? P->C.v[d * N + n] : P->C.v[((b * G + g) * N + n) * L + t];
                        h[n] = exp(dt * P->A.v[d * N + n]) * h[n] + dt * Bv * u;
                        acc += Cv * h[n];
                    }
                    acc += P->D.v[d] * u;
                    if (hasz) acc *= tc_silu(P->z.v[i]);
                    if (y) y[i] = acc;
                }
                if (hlast)
                    for (n = 0; n < N; n++) hlast[(row * Dm + d) * N + n] = h[n];
            }
        }
    free(h);
}

static inline double tc_oracle_loss(const tc_prob *P, const double *dy, const double *dhl) {
    const int64_t ny = P->c.batch * P->c.dim * P->c.L, nh = P->rows * P->c.dim * P->c.N;
    double *y = (double *)malloc(sizeof(double) * (size_t)ny), *h = (double *)malloc(sizeof(double) * (size_t)nh);
    double s = 0;
    int64_t i;
    tc_oracle_forward(P, y, h);
    for (i = 0; i < ny; i++) s += dy[i] * y[i];
    if (dhl)
        for (i = 0; i < nh; i++) s += dhl[i] * h[i];
    free(y);
    free(h);
    return s;
}

/* Central differences of the loss w.r.t. every logical element of x (a tensor of P). */
static inline void tc_fd_grad(tc_prob *P, tc_tensor *x, const double *dy, const double *dhl, double *out) {
    int64_t i;
    for (i = 0; i < x->count; i++) {
        const double old = x->v[i], eps = 1e-5 * (fabs(old) > 1 ? fabs(old) : 1);
        double lp, lm;
        x->v[i] = old + eps;
        lp = tc_oracle_loss(P, dy, dhl);
        x->v[i] = old - eps;
        lm = tc_oracle_loss(P, dy, dhl);
        x->v[i] = old;
        out[i] = (lp - lm) / (2 * eps);
    }
}

/* One decode step of one (batch row, channel) in double: updates h[0..N-1], returns y.
   B, C, A: the N values of that row/channel; D, bias: scalars; z: NULL for no gate. */
static inline double tc_oracle_step(int64_t N, double *h, double x, double delta, double bias, int softplus,
                                    const double *A, const double *B, const double *C, double D, const double *z) {
    double dt = delta + bias, acc = 0;
    int64_t n;
    if (softplus) dt = tc_softplus(dt);
    for (n = 0; n < N; n++) {
        h[n] = exp(dt * A[n]) * h[n] + dt * B[n] * x;
        acc += C[n] * h[n];
    }
    acc += D * x;
    if (z) acc *= tc_silu(*z);
    return acc;
}

#endif /* SELSCAN_TESTS_COMMON_H */
