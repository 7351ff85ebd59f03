/* tests/fuzz/fuzz_selscan.c - libFuzzer target for selscan's CPU entry points.
 *
 * Build and run: make fuzz (FUZZ_SECONDS, default 60) or make fuzz-ci (bounded, for CI); both
 * use clang -fsanitize=fuzzer,address,undefined. The seed corpus is tests/fuzz/corpus/.
 *
 * Each input is decoded into one call sequence: a forward (fast parts, with or without a
 * checkpoint, and the reference), a backward (fast parts + reduce, with and without the
 * forward's checkpoint, and the reference), a step (fast parts and the reference), or size
 * queries only. Decoded: small real shapes or huge / overflowing ones (with broadcast,
 * zero-stride one-element inputs), strides (contiguous, permuted, random incl. zero / negative /
 * overlapping, huge), flags and dtypes (also invalid ones), cu_seqlens and state_index (also
 * invalid), aliasing between operands, workspace sizes and misaligned pointers, misaligned
 * tensors, special values (NaN / Inf). Outputs are filled with a signalling-NaN canary (never
 * produced by arithmetic). Checks (abort() on failure, so libFuzzer keeps the input):
 *   - no sanitizer report (ASan / UBSan abort on their own);
 *   - inputs are never written; on an error status every output byte is untouched;
 *   - sizes: the reported workspace covers what the reference needs at least, the checkpoint
 *     size is the documented formula (or SELSCAN_ERR_SHAPE when that exceeds SIZE_MAX);
 *   - on OK (problems small enough to run): every logical output element written, bytes
 *     between them untouched, the fast path within tolerance of the reference (finite inputs),
 *     the backward with the forward's checkpoint bitwise equal to the backward without it (also
 *     with NaN / Inf inputs),
 *     the step's unreferenced state rows untouched.
 * Internal entry points (selscan__forward_fast etc.) are called to reach every vector path this
 * CPU has, not only the widest.
 *
 * The SSD scan (Mamba-2, selscan_ssd_*: >>ssd-api): a header byte of the size-query kind with
 * bit 3 set ((byte & 0x0b) == 0x0b) selects it; then a forward, a backward or size queries only.
 * Decoded: shapes (batch, seqlen, nheads, headdim incl. past one 64-channel block, dstate,
 * n_groups dividing nheads or not, empty ones), every optional operand present or absent (D per
 * head or per channel, z, dt_bias, initial / final state, seq_idx, cu_seqlens incl. invalid, both),
 * the dt softplus and limits (incl. inverted / NaN / infinite), dtypes and flags (also invalid),
 * and, as for the scan, strides, aliasing, misalignment, special values, workspace sizes; also a
 * workspace placed over an operand. Its rare choices decode from the high values, so that an
 * input that runs out decodes to the common case. Checks: as for the scan (sanitizers, inputs
 * unwritten, all outputs untouched on an error, every logical output written and gaps untouched
 * on OK); the status is what validation and the workspace size query imply (the workspace's
 * rule exactly); the parts (in either order; the backward's, then its reduces) bitwise equal to
 * the whole call; the fast forward / backward within tolerance of the reference (finite inputs),
 * also their work items run on each ISA this CPU has (bitwise the library's on its own ISA); the
 * size queries against validation, the reference's workspace need and the documented partials;
 * NaN in gives NaN out (y, or dx, NaN wherever an input of its own position is: fast, whole call,
 * reference, items) and every NaN a gradient holds is the default quiet NaN (the special values
 * include NaNs of another sign and payload; the scan's backward checked for it too); NULL
 * problem / grads / size pointers refused by every SSD entry point, nothing written.
 * FUZZ_SELSCAN_MODE=ssd in the environment decodes every input as an SSD case (long SSD runs). */
#define SELSCAN_IMPLEMENTATION
#include "../../selscan.h"
#include "../tol_lowp.h" /* tc_tol_lowp: the f16 / bf16 tolerance rule */

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FZ_WORK_CAP (1 << 15)     /* batch * dim * L * N at most, for the runs that compute */
#define FZ_ALLOC_CAP (1u << 20)   /* bytes of one tensor at most */
#define FZ_WS_CAP (32u << 20)     /* workspace bytes at most */
#define FZ_SSD_WORK_CAP (1 << 13) /* batch * seqlen * nheads * headdim * dstate at most (an SSD case computes 4 times) */

/* ---- input reader ---- */
typedef struct { const uint8_t *p; size_t n, i; } fz_rd;
static uint64_t fz_take(fz_rd *r, int bytes) {
    uint64_t v = 0;
    int k;
    for (k = 0; k < bytes; k++) v |= (uint64_t)(r->i < r->n ? r->p[r->i++] : 0) << (8 * k);
    return v;
}
static unsigned fz_u8(fz_rd *r) { return (unsigned)fz_take(r, 1); }
static unsigned fz_below(fz_rd *r, unsigned n) { return n ? fz_u8(r) % n : 0; }

/* values: a generator seeded from the input (keeps inputs short) */
static uint64_t fz_state;
static uint64_t fz_next(void) {
    uint64_t z = (fz_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double fz_unif(double lo, double hi) { return lo + (hi - lo) * (double)(fz_next() >> 11) * (1.0 / 9007199254740992.0); }

static void fz_fail(const char *what) {
    fprintf(stderr, "fuzz_selscan: check failed: %s\n", what);
    abort();
}
#define FZ_CHECK(c, what) do { if (!(c)) fz_fail(what); } while (0)

/* ---- sizes ---- */
static const int64_t fz_huge[] = {
    (int64_t)1 << 20, ((int64_t)1 << 31) - 1, (int64_t)1 << 31, (int64_t)1 << 32, ((int64_t)1 << 32) + 1,
    (int64_t)1 << 40, (int64_t)1 << 48, (int64_t)1 << 56, ((int64_t)1 << 58) + 3, (int64_t)1 << 59,
    (int64_t)1 << 61, (int64_t)1 << 62, INT64_MAX, INT64_MAX - 63, 0, -1, INT64_MIN, 65, 4097, 1 << 24};
#define FZ_NHUGE ((int)(sizeof fz_huge / sizeof fz_huge[0]))

static int64_t fz_size(fz_rd *r, int huge, int64_t small_max) {
    if (huge && fz_below(r, 3) == 0) return fz_huge[fz_below(r, FZ_NHUGE)];
    return 1 + (int64_t)fz_below(r, (unsigned)small_max);
}

/* ---- tensors ---- */
typedef struct fz_ten {
    const char *name;
    int nd, present, is_out, dsz, dtype; /* dtype: a selscan_dtype (valid or not, as passed) */
    int64_t n[4], st[4], rs[4];          /* logical sizes, passed strides, resolved strides */
    int allocatable, negative, misalign;
    size_t bytes;                        /* span bytes (allocation) */
    unsigned char *mem[3], *data[3], *snap; /* output sets 0..2 (inputs: set 0) */
    int alias_of;                        /* -1, or the index of the tensor whose memory it shares */
    int64_t alias_off;
} fz_ten;

/* saturating products of non-negative counts (negative operands count as 0) */
#define FZ_SAT ((__int128)1 << 100)
static __int128 fz_smul(__int128 a, __int128 b) {
    if (a <= 0 || b <= 0) return 0;
    if (a >= FZ_SAT || b >= FZ_SAT || a > FZ_SAT / b) return FZ_SAT;
    return a * b;
}
static __int128 fz_smul4(int64_t a, int64_t b, int64_t c, int64_t d) { return fz_smul(fz_smul(a, b), fz_smul(c, d)); }

static int fz_esize(int dtype) { return dtype == SELSCAN_F32 ? 4 : 2; }

/* Resolve strides like the library (all zero: contiguous); span in bytes; flags. */
static void fz_layout(fz_ten *t) {
    int i, allzero = 1;
    __int128 acc = 1, last = 0;
    t->negative = 0;
    for (i = 0; i < t->nd; i++) if (t->st[i]) allzero = 0;
    if (allzero) {
        for (i = t->nd - 1; i >= 0; i--) { t->rs[i] = acc > INT64_MAX ? INT64_MAX : (int64_t)acc; acc = fz_smul(acc, t->n[i] > 0 ? t->n[i] : 1); }
    } else {
        for (i = 0; i < t->nd; i++) t->rs[i] = t->st[i];
    }
    for (i = 0; i < t->nd; i++) {
        if (t->rs[i] < 0) t->negative = 1;
        if (t->n[i] > 1 && t->rs[i] > 0) last += fz_smul(t->n[i] - 1, t->rs[i]);
        if (last > ((__int128)1 << 100)) last = (__int128)1 << 100;
    }
    {
        const __int128 b = fz_smul(last + 1, t->dsz);
        t->allocatable = !t->negative && b <= FZ_ALLOC_CAP;
        t->bytes = t->allocatable ? (size_t)b : 64;
        for (i = 0; i < t->nd; i++) if (t->n[i] <= 0) { t->allocatable = 0; t->bytes = 64; }
    }
}

/* Strides of a tensor, by mode. */
static void fz_strides(fz_rd *r, fz_ten *t, int huge) {
    const unsigned mode = fz_below(r, 16);
    int i;
    for (i = 0; i < 4; i++) t->st[i] = 0;
    if (huge && !t->is_out && mode < 10) { /* broadcast a huge shape from a one-element buffer */
        int k = 0;
        for (i = 0; i < t->nd; i++) if (t->n[i] < t->n[k]) k = i;
        t->st[k] = 1; /* every other stride 0: (n[k] - 1) + 1 elements */
        return;
    }
    if (mode < 9) return; /* contiguous */
    if (mode < 11) {      /* a permutation of the dimensions, with padding */
        int perm[4] = {0, 1, 2, 3}, k;
        int64_t acc = 1 + fz_below(r, 2);
        for (i = t->nd - 1; i > 0; i--) { k = (int)fz_below(r, (unsigned)i + 1); int x = perm[i]; perm[i] = perm[k]; perm[k] = x; }
        for (i = t->nd - 1; i >= 0; i--) {
            t->st[perm[i]] = acc;
            if (t->n[perm[i]] > 0 && t->n[perm[i]] < (1 << 20) && acc < (1 << 24)) acc *= t->n[perm[i]];
            else acc = (int64_t)1 << 30;
        }
        return;
    }
    if (mode < 13) { /* broadcast: zero strides, one dimension (if any) stride 1 */
        t->st[fz_below(r, (unsigned)t->nd)] = 1 + fz_below(r, 2);
        return;
    }
    if (mode < 15) { /* random small strides, zero / negative / overlapping */
        for (i = 0; i < t->nd; i++) t->st[i] = (int64_t)fz_below(r, 48) - 4;
        return;
    }
    for (i = 0; i < t->nd; i++) t->st[i] = fz_below(r, 2) ? fz_huge[fz_below(r, FZ_NHUGE)] : (int64_t)fz_below(r, 8);
}

enum { T_U, T_DELTA, T_A, T_B, T_C, T_D, T_Z, T_BIAS, T_H0, T_Y, T_HLAST, T_DY, T_DHLAST,
       T_DU, T_DDELTA, T_DA, T_DB, T_DC, T_DD, T_DZ, T_DBIAS, T_DH0, T_STATE,
       /* the SSD scan's (Mamba-2, >>ssd-api): problem (S_X .. S_HLAST), then grads (S_DY .. S_DH0) */
       S_X, S_DT, S_A, S_B, S_C, S_D, S_Z, S_BIAS, S_SEQ, S_H0, S_Y, S_HLAST, S_DY, S_DHLAST,
       S_DX, S_DDT, S_DA, S_DB, S_DC, S_DD, S_DZ, S_DBIAS, S_DH0, NT };
static const char *fz_names[NT] = {"u", "delta", "A", "B", "C", "D", "z", "delta_bias", "h0", "y", "h_last",
                                   "dy", "dh_last", "du", "ddelta", "dA", "dB", "dC", "dD", "dz", "ddelta_bias",
                                   "dh0", "state",
                                   "ssd x", "ssd dt", "ssd A", "ssd B", "ssd C", "ssd D", "ssd z", "ssd dt_bias",
                                   "ssd seq_idx", "ssd initial_state", "ssd y", "ssd final_state", "ssd dy",
                                   "ssd dfinal_state", "ssd dx", "ssd ddt", "ssd dA", "ssd dB", "ssd dC", "ssd dD",
                                   "ssd dz", "ssd ddt_bias", "ssd dinitial_state"};

typedef struct fz_case {
    fz_ten t[NT];
    int huge, special, kind; /* kind: 0 forward, 1 backward, 2 step, 3 sizes */
    int64_t batch, dim, L, N, G, ncache, nseq;
    int dtype;
    unsigned flags;
    int64_t *cu;
    int32_t *idx;
    int aliased, any_misalign;
    int ssd;                 /* an SSD case (kind: 0 forward, 1 backward, 2 sizes); dim = H, then: */
    int64_t H, P;            /* nheads, headdim (N dstate, G n_groups as passed) */
    float dtmin, dtmax;
    unsigned char *cu_mem;   /* cu placed misaligned inside it (cu then not freed itself) */
} fz_case;

static void fz_ten_set(fz_ten *t, int id, int nd, int64_t n0, int64_t n1, int64_t n2, int64_t n3, int dtype, int out) {
    t->name = fz_names[id];
    t->nd = nd; t->n[0] = n0; t->n[1] = n1; t->n[2] = n2; t->n[3] = n3;
    t->dtype = dtype; t->dsz = fz_esize(dtype); t->is_out = out; t->alias_of = -1;
}

static int64_t fz_off(const fz_ten *t, int64_t i) { /* element offset of logical element i (row-major) */
    int64_t o = 0;
    int d;
    for (d = t->nd - 1; d >= 0; d--) { o += (i % t->n[d]) * t->rs[d]; i /= t->n[d]; }
    return o;
}
static int64_t fz_count(const fz_ten *t) { /* logical elements, saturated at 2^62 */
    __int128 c = 1;
    int d;
    for (d = 0; d < t->nd; d++) { c *= t->n[d] > 0 ? t->n[d] : 0; if (c > ((__int128)1 << 62)) c = (__int128)1 << 62; }
    return (int64_t)c;
}

static void fz_put(const fz_ten *t, unsigned char *base, int64_t off, float v) {
    if (t->dsz == 4) memcpy(base + off * 4, &v, 4);
    else {
        uint16_t h = t->dtype == SELSCAN_F16 ? selscan_f32_to_f16(v) : selscan_f32_to_bf16(v);
        memcpy(base + off * 2, &h, 2);
    }
}
static float fz_get(const fz_ten *t, const unsigned char *base, int64_t off) {
    if (t->dsz == 4) { float v; memcpy(&v, base + off * 4, 4); return v; }
    {
        uint16_t h;
        memcpy(&h, base + off * 2, 2);
        return t->dtype == SELSCAN_F16 ? selscan_f16_to_f32(h) : selscan_bf16_to_f32(h);
    }
}
/* the canary: a signalling NaN in every dtype (arithmetic never produces one) */
static int fz_is_canary(const fz_ten *t, const unsigned char *base, int64_t off) {
    if (t->dsz == 4) { uint32_t u; memcpy(&u, base + off * 4, 4); return u == 0x7f80a5a5u; }
    { uint16_t h; memcpy(&h, base + off * 2, 2); return h == (t->dtype == SELSCAN_F16 ? 0x7c5au : 0x7f85u); }
}
static void fz_canary_fill(const fz_ten *t, unsigned char *mem, size_t bytes) {
    size_t i;
    if (t->dsz == 4) { const uint32_t u = 0x7f80a5a5u; for (i = 0; i + 4 <= bytes; i += 4) memcpy(mem + i, &u, 4); }
    else { const uint16_t h = t->dtype == SELSCAN_F16 ? 0x7c5au : 0x7f85u; for (i = 0; i + 2 <= bytes; i += 2) memcpy(mem + i, &h, 2); }
    for (; i < bytes; i++) mem[i] = 0xa5;
}

static float fz_value(const fz_case *c, int id) {
    if (c->special && (fz_next() & 15) == 0) {
        static const float sp[] = {NAN, INFINITY, -INFINITY, 3e38f, -3e38f, 1e-40f};
        const unsigned k = (unsigned)(fz_next() % 8);
        if (k >= 6) { /* a NaN of negative sign and another payload (the gradients' NaNs stay canonical) */
            const uint32_t u = k == 6 ? 0xffc0beefu : 0x7fa01234u;
            float v;
            memcpy(&v, &u, 4);
            return v;
        }
        return sp[k];
    }
    switch (id) {
    case T_A: /* A, or A_log (the step's SELSCAN_STEP_A_LOG: A = -exp(A_log)) */
        return c->kind == 2 && (c->flags & SELSCAN_STEP_A_LOG) ? (float)fz_unif(-2.0, 3.0) : (float)fz_unif(-1.5, -0.05);
    case T_DELTA: return (float)fz_unif(-1.0, 0.5);
    case S_A: return (float)fz_unif(-1.5, -0.05);
    case S_DT: /* dt_raw: mostly positive without the softplus (a negative dt grows the state) */
        return c->flags & SELSCAN_SSD_DT_SOFTPLUS ? (float)fz_unif(-3.0, 2.0) : (float)fz_unif(-0.2, 1.0);
    case S_Z: return (float)fz_unif(-2.0, 2.0);
    default: return (float)fz_unif(-1.0, 1.0);
    }
}

/* an SSD case small enough to compute (its operands aside): fz_ssd_runnable's sizes */
static int fz_ssd_small(const fz_case *c) {
    if (c->batch <= 0 || c->L <= 0 || c->H <= 0 || c->P <= 0 || c->N <= 0 || c->G < 0 || c->nseq < 0) return 0;
    return fz_smul(fz_smul4(c->batch, c->L, c->H, c->P), c->N) <= FZ_SSD_WORK_CAP;
}

static void fz_alloc(fz_case *c, fz_ten *t, int id, int sets) {
    int k, fill;
    if (!t->present) return;
    fz_layout(t);
    fill = t->allocatable && (!c->ssd || fz_ssd_small(c)); /* an SSD case too large never computes: no values (slow to write) */
    for (k = 0; k < sets; k++) {
        t->mem[k] = (unsigned char *)malloc(t->bytes + (size_t)t->misalign);
        t->data[k] = t->mem[k] + t->misalign;
        if (t->is_out) fz_canary_fill(t, t->mem[k], t->bytes + (size_t)t->misalign);
        else memset(t->mem[k], 0xff, t->bytes + (size_t)t->misalign); /* NaN gaps in inputs */
    }
    if (!t->is_out || id == T_STATE) {
        if (fill && !t->misalign && fz_count(t) > (1 << 20)) { /* broadcast: fill the span */
            int64_t i;
            for (i = 0; i < (int64_t)(t->bytes / (size_t)t->dsz); i++) {
                const float v = fz_value(c, id);
                for (k = 0; k < sets; k++) fz_put(t, t->data[k], i, v);
            }
        } else if (fill && !t->misalign) {
            const int64_t cnt = fz_count(t);
            int64_t i;
            for (i = 0; i < cnt; i++) {
                const float v = fz_value(c, id);
                for (k = 0; k < sets; k++) fz_put(t, t->data[k], fz_off(t, i), v);
            }
        } else if (!t->is_out) {
            for (k = 0; k < sets; k++) memset(t->mem[k], 0, t->bytes + (size_t)t->misalign);
        }
    }
}

static void fz_free(fz_case *c) {
    int i, k;
    for (i = 0; i < NT; i++) {
        for (k = 0; k < 3; k++) if (c->t[i].alias_of < 0) free(c->t[i].mem[k]);
        free(c->t[i].snap);
    }
    if (c->cu_mem) free(c->cu_mem);
    else free(c->cu);
    free(c->idx);
}

static const void *fz_in(const fz_case *c, int id) { return c->t[id].present ? c->t[id].data[0] : NULL; }
static void *fz_out(const fz_case *c, int id, int set) { return c->t[id].present ? c->t[id].data[set] : NULL; }
static void fz_api_in(selscan_tensor *a, const fz_case *c, int id) {
    a->data = fz_in(c, id);
    memcpy(a->stride, c->t[id].st, sizeof a->stride);
}
static void fz_api_out(selscan_out_tensor *a, const fz_case *c, int id, int set) {
    a->data = fz_out(c, id, set);
    memcpy(a->stride, c->t[id].st, sizeof a->stride);
}

/* snapshots: every buffer of the case (inputs and outputs of set k) */
static void fz_snap(fz_case *c, int set) {
    int i;
    for (i = 0; i < NT; i++) {
        fz_ten *t = &c->t[i];
        if (!t->present || t->alias_of >= 0) continue;
        free(t->snap);
        t->snap = (unsigned char *)malloc(t->bytes + (size_t)t->misalign);
        memcpy(t->snap, t->mem[t->is_out ? set : 0], t->bytes + (size_t)t->misalign);
    }
}
static int fz_same(const fz_case *c, int id, int set) {
    const fz_ten *t = &c->t[id];
    if (!t->present || t->alias_of >= 0) return 1;
    return memcmp(t->snap, t->mem[t->is_out ? set : 0], t->bytes + (size_t)t->misalign) == 0;
}
static void fz_check_untouched(const fz_case *c, int set, const char *what) {
    int i;
    for (i = 0; i < NT; i++)
        if (!fz_same(c, i, set)) {
            fprintf(stderr, "fuzz_selscan: %s: %s changed\n", what, c->t[i].name);
            fz_fail("buffer changed on an error status (or an input written)");
        }
}
/* the bytes of tensor id's memory (set `set`) that outputs placed inside it own (the fuzzer's
   aliasing puts an output in another tensor's gaps; selscan accepts it where their elements are
   disjoint): set in mark (t->bytes long); those bytes are the guest's to write */
static void fz_mark_guests(const fz_case *c, int id, int set, unsigned char *mark) {
    const fz_ten *t = &c->t[id];
    const unsigned char *base = t->data[t->is_out ? set : 0];
    int j;
    for (j = 0; j < NT; j++) {
        const fz_ten *a = &c->t[j];
        int64_t k, ac;
        if (j == id || !a->present || a->alias_of != id || !a->is_out) continue;
        ac = fz_count(a);
        for (k = 0; k < ac; k++) {
            const int64_t ab = (int64_t)(a->data[set] - base) + fz_off(a, k) * a->dsz;
            if (ab >= 0 && ab + a->dsz <= (int64_t)t->bytes) memset(mark + ab, 1, (size_t)a->dsz);
        }
    }
}
/* input id unchanged (set 0), except for the bytes of outputs placed inside its memory */
static int fz_input_same(const fz_case *c, int id, int set) {
    const fz_ten *t = &c->t[id];
    unsigned char *mark;
    size_t b;
    int same = 1;
    if (fz_same(c, id, 0)) return 1;
    if (memcmp(t->snap, t->mem[0], (size_t)t->misalign) != 0) return 0;
    mark = (unsigned char *)calloc(t->bytes ? t->bytes : 1, 1);
    fz_mark_guests(c, id, set, mark);
    for (b = 0; b < t->bytes && same; b++)
        if (!mark[b] && t->data[0][b] != t->snap[b + (size_t)t->misalign]) same = 0;
    free(mark);
    return same;
}
static void fz_check_inputs(const fz_case *c, const char *what) {
    int i;
    for (i = 0; i < NT; i++)
        if (!c->t[i].is_out && !fz_input_same(c, i, 0)) {
            fprintf(stderr, "fuzz_selscan: %s: input %s written\n", what, c->t[i].name);
            fz_fail("input written");
        }
}

/* every logical element of output id (set) written, bytes between elements untouched */
static void fz_check_written(const fz_case *c, int id, int set) {
    const fz_ten *t = &c->t[id];
    int64_t i, cnt;
    unsigned char *mark;
    size_t b;
    if (!t->present || t->alias_of >= 0) return;
    cnt = fz_count(t);
    mark = (unsigned char *)calloc(t->bytes, 1);
    for (i = 0; i < cnt; i++) {
        const int64_t o = fz_off(t, i);
        if (fz_is_canary(t, t->data[set], o)) {
            fprintf(stderr, "fuzz_selscan: %s element %lld not written\n", t->name, (long long)i);
            fz_fail("output element not written");
        }
        memset(mark + o * t->dsz, 1, (size_t)t->dsz);
    }
    fz_mark_guests(c, id, set, mark);
    for (b = 0; b < t->bytes; b++)
        if (!mark[b] && t->data[set][b] != t->snap[b + (size_t)t->misalign]) {
            fprintf(stderr, "fuzz_selscan: %s byte %zu between elements written (sizes %lld %lld %lld %lld, strides %lld %lld %lld %lld; "
                    "problem batch %lld dim %lld L %lld N %lld G %lld, flags %#x)\n", t->name, b, (long long)t->n[0], (long long)t->n[1],
                    (long long)t->n[2], (long long)t->n[3], (long long)t->st[0], (long long)t->st[1], (long long)t->st[2], (long long)t->st[3],
                    (long long)c->batch, (long long)c->dim, (long long)c->L, (long long)c->N, (long long)c->G, c->flags);
            fz_fail("gap written");
        }
    free(mark);
}

/* fast (set a) vs reference (set b): tolerance relative to the tensor's largest value */
/* atol: an absolute allowance added (for sums whose terms are much larger than the result) */
static void fz_compare_atol(const fz_case *c, int id, int a, int b, double rtol, double atol) {
    const fz_ten *t = &c->t[id];
    int64_t i, cnt;
    double mx = 0;
    if (!t->present || t->alias_of >= 0) return;
    cnt = fz_count(t);
    for (i = 0; i < cnt; i++) {
        const double v = fabs(fz_get(t, t->data[b], fz_off(t, i)));
        if (!(v < 1e8)) return; /* grown past 1e8 (negative dt: exp(dt A) > 1), overflowed or NaN: not compared */
        if (v > mx) mx = v;
    }
    for (i = 0; i < cnt; i++) {
        const double x = fz_get(t, t->data[a], fz_off(t, i)), y = fz_get(t, t->data[b], fz_off(t, i));
        if (isnan(x) && isnan(y)) continue;
        if (x == y) continue;
        if (!(fabs(x - y) <= rtol * (fabs(y) + 0.1 * mx) + 1e-5 + atol)) {
            fprintf(stderr, "fuzz_selscan: %s[%lld]: fast %.9g, reference %.9g (max %.3g)\n", t->name, (long long)i, x, y, mx);
            fz_fail("fast path differs from the reference");
        }
    }
}
static void fz_compare(const fz_case *c, int id, int a, int b, double rtol) { fz_compare_atol(c, id, a, b, rtol, 0.0); }
/* the largest |value| of tensor id (set), 0 when absent */
static double fz_maxabs(const fz_case *c, int id, int set) {
    const fz_ten *t = &c->t[id];
    int64_t i, cnt;
    double mx = 0;
    if (!t->present || t->alias_of >= 0) return 0.0;
    cnt = fz_count(t);
    for (i = 0; i < cnt; i++) {
        const double v = fabs(fz_get(t, t->data[t->is_out ? set : 0], fz_off(t, i)));
        if (v > mx) mx = v;
    }
    return mx;
}
static void fz_bitwise(const fz_case *c, int id, int a, int b, const char *what) {
    const fz_ten *t = &c->t[id];
    int64_t i, cnt;
    if (!t->present || t->alias_of >= 0) return;
    /* also with Inf / NaN inputs (issue 21 item 3: the gradients' NaNs are the default quiet NaN) */
    cnt = fz_count(t);
    for (i = 0; i < cnt; i++)
        if (memcmp(t->data[a] + fz_off(t, i) * t->dsz, t->data[b] + fz_off(t, i) * t->dsz, (size_t)t->dsz)) {
            fprintf(stderr, "fuzz_selscan: %s[%lld]: %.9g vs %.9g\n", t->name, (long long)i,
                    fz_get(t, t->data[a], fz_off(t, i)), fz_get(t, t->data[b], fz_off(t, i)));
            fz_fail(what);
        }
}

/* every NaN among output id's logical elements (set) is the default quiet NaN (>>ssd-api and the
   scan's backward: f32 0x7fc00000, f16 0x7e00, bf16 0x7fc0, whatever NaNs the inputs held) */
static void fz_check_nan_canon(const fz_case *c, int id, int set, const char *what) {
    const fz_ten *t = &c->t[id];
    int64_t i, cnt;
    if (!t->present || t->alias_of >= 0) return;
    cnt = fz_count(t);
    for (i = 0; i < cnt; i++) {
        const unsigned char *e = t->data[set] + fz_off(t, i) * t->dsz;
        uint32_t u = 0;
        memcpy(&u, e, (size_t)t->dsz);
        if (isnan(fz_get(t, t->data[set], fz_off(t, i))) &&
            u != (t->dsz == 4 ? 0x7fc00000u : t->dtype == SELSCAN_F16 ? 0x7e00u : 0x7fc0u)) {
            fprintf(stderr, "fuzz_selscan: %s: %s[%lld] bits %#x (set %d)\n", what, t->name, (long long)i, (unsigned)u, set);
            fz_fail("a gradient's NaN is not the default quiet NaN");
        }
    }
}

static void fz_check_nan_canon_all(const fz_case *c, int lo, int hi, int set, const char *what) {
    int i;
    for (i = lo; i <= hi; i++) fz_check_nan_canon(c, i, set, what);
}

/* ---- decoding a case ---- */
static void fz_finish(fz_rd *r, fz_case *c, int lo, int hi);
/* packed sequences: cu_seqlens of 1 .. 4 sequences over L (batch 1 unless huge), at times invalid
   (the rare events: where fz_rare says) */
static int fz_rare(fz_rd *r, const fz_case *c, unsigned n) { return fz_below(r, n) == (c->ssd ? n - 1 : 0); }
static void fz_cu(fz_rd *r, fz_case *c) {
    int64_t k, pos = 0;
    c->nseq = 1 + fz_below(r, 4);
    if (!c->huge) c->batch = 1;
    c->cu = (int64_t *)malloc((size_t)(c->nseq + 1) * 8);
    c->cu[0] = 0;
    for (k = 1; k <= c->nseq; k++) {
        pos += c->L > 0 ? (int64_t)fz_below(r, (unsigned)(c->L < 200 ? c->L + 1 : 200)) : 0;
        if (pos > c->L) pos = c->L;
        c->cu[k] = pos;
    }
    c->cu[c->nseq] = c->L;
    if (fz_rare(r, c, 8)) { const unsigned j = fz_below(r, (unsigned)c->nseq + 1); c->cu[j] = (int64_t)((uint64_t)c->cu[j] + fz_below(r, 5) - 2); }
    if (fz_rare(r, c, 16)) c->nseq += fz_below(r, 2) ? -1 : 0; /* cu of n_seqs + 1 entries still */
}
static void fz_decode(fz_rd *r, fz_case *c) {
    const unsigned hdr = fz_u8(r);
    int i;
    c->kind = (int)(hdr & 3);
    c->huge = (hdr >> 2) % 5 == 0;
    c->special = (hdr >> 5) == 7;
    c->dtype = (int)fz_below(r, 3);
    if (fz_below(r, 64) == 0) c->dtype = fz_below(r, 2) ? 3 : -1;
    c->flags = fz_u8(r) & 7u;
    if (fz_below(r, 64) == 0) c->flags |= 8u << fz_below(r, 5); /* one of 8 .. 64 (the step's), or 128 (unknown) */
    else if (c->kind == 2 && fz_below(r, 4) == 0)
        c->flags |= (fz_u8(r) & 15u) << 3; /* the step's D_T / STATE_T / DELTA_BIAS_T / A_LOG together */
    c->batch = fz_size(r, c->huge, 3);
    c->dim = fz_size(r, c->huge, 40);
    c->L = fz_size(r, c->huge, 90);
    c->N = fz_size(r, c->huge, 24);
    c->G = (int64_t)fz_below(r, 3);          /* 0 means 1 */
    if (c->G == 2 && c->dim % 2) c->G = 1;
    if (c->huge && fz_below(r, 8) == 0) c->G = fz_huge[fz_below(r, FZ_NHUGE)];
    c->nseq = 0;
    if (c->kind != 2 && fz_below(r, 5) == 0) fz_cu(r, c);
    {
        const int dt = c->dtype >= 0 && c->dtype <= 2 ? c->dtype : 0, fb = (c->flags & 2u) != 0, fc = (c->flags & 4u) != 0;
        const int64_t G = c->G == 0 ? 1 : c->G, rows = c->nseq > 0 ? c->nseq : c->batch;
        fz_ten *t = c->t;
        if (c->kind == 2) { /* step: (batch, dim) operands; state (ncache, dim, N) */
            c->ncache = fz_below(r, 3) ? 0 : fz_size(r, c->huge, 6);
            /* the state in T with SELSCAN_STEP_STATE_T (D / delta_bias: below) */
            fz_ten_set(&t[T_STATE], T_STATE, 3, c->ncache ? c->ncache : c->batch, c->dim, c->N, 1,
                       (c->flags & SELSCAN_STEP_STATE_T) ? dt : SELSCAN_F32, 1);
            fz_ten_set(&t[T_U], T_U, 2, c->batch, c->dim, 1, 1, dt, 0);
            fz_ten_set(&t[T_DELTA], T_DELTA, 2, c->batch, c->dim, 1, 1, dt, 0);
            fz_ten_set(&t[T_Z], T_Z, 2, c->batch, c->dim, 1, 1, dt, 0);
            fz_ten_set(&t[T_Y], T_Y, 2, c->batch, c->dim, 1, 1, dt, 1);
            if (fb) fz_ten_set(&t[T_B], T_B, 2, c->dim, c->N, 1, 1, SELSCAN_F32, 0);
            else fz_ten_set(&t[T_B], T_B, 3, c->batch, G, c->N, 1, dt, 0);
            if (fc) fz_ten_set(&t[T_C], T_C, 2, c->dim, c->N, 1, 1, SELSCAN_F32, 0);
            else fz_ten_set(&t[T_C], T_C, 3, c->batch, G, c->N, 1, dt, 0);
            t[T_STATE].present = 1;
            if (fz_below(r, 3) == 0) { /* state_index */
                int64_t k, nc = c->ncache ? c->ncache : c->batch;
                if (c->batch > 0 && c->batch <= 4096) {
                    c->idx = (int32_t *)malloc((size_t)c->batch * 4);
                    for (k = 0; k < c->batch; k++) c->idx[k] = (int32_t)(nc < 1000 ? (int64_t)fz_below(r, (unsigned)nc + 2) - 1 : (int64_t)fz_take(r, 4));
                    /* mostly a permutation prefix: valid */
                    if (fz_below(r, 2) && nc >= c->batch && nc < (1 << 20)) for (k = 0; k < c->batch; k++) c->idx[k] = (int32_t)((k * 7 + 3) % nc);
                    if (fz_below(r, 2) && nc >= c->batch && nc < (1 << 20)) for (k = 0; k < c->batch; k++) c->idx[k] = (int32_t)(nc - 1 - k);
                }
            }
        } else {
            fz_ten_set(&t[T_U], T_U, 3, c->batch, c->dim, c->L, 1, dt, 0);
            fz_ten_set(&t[T_DELTA], T_DELTA, 3, c->batch, c->dim, c->L, 1, dt, 0);
            fz_ten_set(&t[T_Z], T_Z, 3, c->batch, c->dim, c->L, 1, dt, 0);
            fz_ten_set(&t[T_Y], T_Y, 3, c->batch, c->dim, c->L, 1, dt, 1);
            if (fb) fz_ten_set(&t[T_B], T_B, 2, c->dim, c->N, 1, 1, SELSCAN_F32, 0);
            else fz_ten_set(&t[T_B], T_B, 4, c->batch, G, c->N, c->L, dt, 0);
            if (fc) fz_ten_set(&t[T_C], T_C, 2, c->dim, c->N, 1, 1, SELSCAN_F32, 0);
            else fz_ten_set(&t[T_C], T_C, 4, c->batch, G, c->N, c->L, dt, 0);
            fz_ten_set(&t[T_H0], T_H0, 3, rows, c->dim, c->N, 1, SELSCAN_F32, 0);
            fz_ten_set(&t[T_HLAST], T_HLAST, 3, rows, c->dim, c->N, 1, SELSCAN_F32, 1);
            t[T_H0].present = fz_below(r, 2);
            t[T_HLAST].present = fz_below(r, 2);
            if (c->kind == 1) {
                const unsigned want = (unsigned)fz_take(r, 2);
                fz_ten_set(&t[T_DY], T_DY, 3, c->batch, c->dim, c->L, 1, dt, 0);
                fz_ten_set(&t[T_DHLAST], T_DHLAST, 3, rows, c->dim, c->N, 1, SELSCAN_F32, 0);
                fz_ten_set(&t[T_DU], T_DU, 3, c->batch, c->dim, c->L, 1, dt, 1);
                fz_ten_set(&t[T_DDELTA], T_DDELTA, 3, c->batch, c->dim, c->L, 1, dt, 1);
                fz_ten_set(&t[T_DZ], T_DZ, 3, c->batch, c->dim, c->L, 1, dt, 1);
                fz_ten_set(&t[T_DA], T_DA, 2, c->dim, c->N, 1, 1, SELSCAN_F32, 1);
                if (fb) fz_ten_set(&t[T_DB], T_DB, 2, c->dim, c->N, 1, 1, SELSCAN_F32, 1);
                else fz_ten_set(&t[T_DB], T_DB, 4, c->batch, G, c->N, c->L, dt, 1);
                if (fc) fz_ten_set(&t[T_DC], T_DC, 2, c->dim, c->N, 1, 1, SELSCAN_F32, 1);
                else fz_ten_set(&t[T_DC], T_DC, 4, c->batch, G, c->N, c->L, dt, 1);
                fz_ten_set(&t[T_DD], T_DD, 1, c->dim, 1, 1, 1, SELSCAN_F32, 1);
                fz_ten_set(&t[T_DBIAS], T_DBIAS, 1, c->dim, 1, 1, 1, SELSCAN_F32, 1);
                fz_ten_set(&t[T_DH0], T_DH0, 3, rows, c->dim, c->N, 1, SELSCAN_F32, 1);
                t[T_DY].present = fz_below(r, 32) != 0;
                t[T_DHLAST].present = want & 1;
                for (i = T_DU; i <= T_DH0; i++) t[i].present = ((want >> (i - T_DU + 1)) & 3) != 0;
            }
        }
        fz_ten_set(&t[T_A], T_A, 2, c->dim, c->N, 1, 1, SELSCAN_F32, 0);
        /* the step's D / delta_bias in T with SELSCAN_STEP_D_T / SELSCAN_STEP_DELTA_BIAS_T (the scan refuses those flags) */
        fz_ten_set(&t[T_D], T_D, 1, c->dim, 1, 1, 1, c->kind == 2 && (c->flags & SELSCAN_STEP_D_T) ? dt : SELSCAN_F32, 0);
        fz_ten_set(&t[T_BIAS], T_BIAS, 1, c->dim, 1, 1, 1, c->kind == 2 && (c->flags & SELSCAN_STEP_DELTA_BIAS_T) ? dt : SELSCAN_F32, 0);
        t[T_U].present = t[T_DELTA].present = t[T_A].present = t[T_B].present = t[T_C].present = 1;
        t[T_Y].present = fz_below(r, 32) != 0;
        t[T_D].present = fz_below(r, 2);
        t[T_Z].present = fz_below(r, 2);
        t[T_BIAS].present = fz_below(r, 2);
        if (fz_below(r, 32) == 0) t[fz_below(r, 5)].present = 0; /* a required operand missing */
        if (t[T_DZ].present && !t[T_Z].present && fz_below(r, 4)) t[T_DZ].present = 0;
    }
    fz_finish(r, c, 0, S_X);
}

/* The decoders' common tail, over the case's tensors [lo, hi): strides (decoded for one tensor in
   two, in four for the SSD's more operands; every one when huge), misalignment, the allocations,
   aliasing (an output placed inside another tensor's memory). */
static void fz_finish(fz_rd *r, fz_case *c, int lo, int hi) {
    const unsigned sdiv = c->ssd ? 4 : 2;
    int i;
    for (i = lo; i < hi; i++) {
        fz_ten *t = &c->t[i];
        if (!t->present) continue;
        if (c->huge || fz_below(r, sdiv) == sdiv - 1) fz_strides(r, t, c->huge);
        if (fz_rare(r, c, 48)) { t->misalign = 1 + (int)fz_below(r, 3); c->any_misalign = 1; }
    }
    /* sizes of the logical shapes: only small enough cases compute */
    for (i = lo; i < hi; i++) {
        int sets = c->t[i].is_out ? 3 : 1;
        fz_alloc(c, &c->t[i], i, sets);
    }
    /* aliasing: an output placed inside another tensor's memory */
    if (fz_rare(r, c, 10)) {
        const int o = lo + (int)fz_below(r, (unsigned)(hi - lo)), other = lo + (int)fz_below(r, (unsigned)(hi - lo));
        fz_ten *a = &c->t[o], *b = &c->t[other];
        if (o != other && a->present && b->present && a->is_out && b->alias_of < 0 && a->alias_of < 0 && a->bytes <= b->bytes &&
            !a->misalign && !b->misalign) {
            const size_t room = b->bytes - a->bytes;
            int k;
            const size_t off = room ? (size_t)(fz_take(r, 4) % (room + 1)) & ~(size_t)3 : 0;
            for (k = 0; k < 3; k++) {
                free(a->mem[k]);
                a->mem[k] = b->mem[b->is_out ? k : 0] + off;
                a->data[k] = a->mem[k];
            }
            a->alias_of = other;
            c->aliased = 1;
        }
    }
}

static int fz_runnable(const fz_case *c) {
    int i;
    __int128 work = fz_smul4(c->batch, c->dim, c->L, c->N);
    if (c->batch <= 0 || c->dim <= 0 || c->L <= 0 || c->N <= 0 || c->G < 0) return 0;
    if (work > FZ_WORK_CAP) return 0;
    if (c->kind == 2 && c->ncache > 4096) return 0;
    if (c->nseq < 0) return 0;
    for (i = 0; i < NT; i++)
        if (c->t[i].present && !c->t[i].allocatable) return 0;
    return 1;
}

/* every failing entry point names an operand and a rule here (all problems point at it) */
static selscan_diag fz_dg;
static void fz_dg_reset(void) { fz_dg.operand = NULL; fz_dg.rule = NULL; }
static void fz_dg_check(selscan_status st, const char *what) {
    if (st == SELSCAN_OK) return;
    if (!fz_dg.operand || !fz_dg.rule || !fz_dg.operand[0] || !fz_dg.rule[0]) {
        fprintf(stderr, "fuzz_selscan: %s: status %d without an operand and rule in diag\n", what, (int)st);
        fz_fail("error status without diag");
    }
}

static void fz_problem(const fz_case *c, selscan_problem *p, int set) {
    memset(p, 0, sizeof *p);
    p->diag = &fz_dg;
    p->batch = c->batch; p->dim = c->dim; p->seqlen = c->L; p->dstate = c->N; p->n_groups = c->G;
    p->dtype = (selscan_dtype)c->dtype; p->flags = c->flags;
    p->cu_seqlens = c->cu; p->n_seqs = c->nseq;
    fz_api_in(&p->u, c, T_U); fz_api_in(&p->delta, c, T_DELTA); fz_api_in(&p->A, c, T_A); fz_api_in(&p->B, c, T_B);
    fz_api_in(&p->C, c, T_C); fz_api_in(&p->D, c, T_D); fz_api_in(&p->z, c, T_Z); fz_api_in(&p->delta_bias, c, T_BIAS);
    fz_api_in(&p->h0, c, T_H0);
    fz_api_out(&p->y, c, T_Y, set); fz_api_out(&p->h_last, c, T_HLAST, set);
}
static void fz_grads(const fz_case *c, selscan_grads *g, int set) {
    memset(g, 0, sizeof *g);
    fz_api_in(&g->dy, c, T_DY); fz_api_in(&g->dh_last, c, T_DHLAST);
    fz_api_out(&g->du, c, T_DU, set); fz_api_out(&g->ddelta, c, T_DDELTA, set); fz_api_out(&g->dA, c, T_DA, set);
    fz_api_out(&g->dB, c, T_DB, set); fz_api_out(&g->dC, c, T_DC, set); fz_api_out(&g->dD, c, T_DD, set);
    fz_api_out(&g->dz, c, T_DZ, set); fz_api_out(&g->ddelta_bias, c, T_DBIAS, set); fz_api_out(&g->dh0, c, T_DH0, set);
}
static void fz_step(const fz_case *c, selscan_step_problem *s, int set) {
    memset(s, 0, sizeof *s);
    s->diag = &fz_dg;
    s->batch = c->batch; s->dim = c->dim; s->dstate = c->N; s->n_groups = c->G; s->n_cache = c->ncache;
    s->dtype = (selscan_dtype)c->dtype; s->flags = c->flags; s->state_index = c->idx;
    fz_api_out(&s->state, c, T_STATE, set);
    fz_api_in(&s->u, c, T_U); fz_api_in(&s->delta, c, T_DELTA); fz_api_in(&s->A, c, T_A); fz_api_in(&s->B, c, T_B);
    fz_api_in(&s->C, c, T_C); fz_api_in(&s->D, c, T_D); fz_api_in(&s->z, c, T_Z); fz_api_in(&s->delta_bias, c, T_BIAS);
    fz_api_out(&s->y, c, T_Y, set);
}

/* the workspace: size by mode, pointer misaligned by mode; NULL for 0 bytes at times */
typedef struct { unsigned char *mem, *ptr; size_t bytes; } fz_ws;
static void fz_ws_make(fz_rd *r, fz_ws *w, size_t need) {
    const unsigned m = fz_below(r, 16);
    size_t bytes = need, mis = 0;
    if (m == 13) bytes = need ? need - 1 - fz_below(r, 64) % need : 0;
    else if (m == 14) bytes = fz_below(r, 200);
    else if (m == 15) bytes = 0;
    if (fz_below(r, 4) == 0) mis = fz_below(r, 64);
    if (bytes > FZ_WS_CAP) bytes = FZ_WS_CAP;
    w->bytes = bytes;
    w->mem = (unsigned char *)malloc(bytes + mis + SELSCAN_WORKSPACE_ALIGN);
    /* aligned base + mis: the library's alignment handling is exercised deliberately */
    w->ptr = w->mem + (SELSCAN_WORKSPACE_ALIGN - (uintptr_t)w->mem % SELSCAN_WORKSPACE_ALIGN) % SELSCAN_WORKSPACE_ALIGN + mis;
    memset(w->ptr, 0xcd, bytes < (1u << 20) ? bytes : (1u << 20)); /* the rest: whatever malloc left */
    if (bytes == 0 && fz_below(r, 2)) w->ptr = NULL;
}
static void fz_ws_free(fz_ws *w) { free(w->mem); }
/* 1 when the library accepts w for a size query's answer need: that answer includes
   SELSCAN_WORKSPACE_ALIGN - 1 bytes of slack, and any pointer is aligned up inside it */
static int fz_ws_enough(const fz_ws *w, size_t need) {
    size_t pad;
    if (need == 0) return 1;
    if (!w->ptr) return 0;
    pad = (SELSCAN_WORKSPACE_ALIGN - (uintptr_t)w->ptr % SELSCAN_WORKSPACE_ALIGN) % SELSCAN_WORKSPACE_ALIGN;
    return w->bytes >= pad && w->bytes - pad + (SELSCAN_WORKSPACE_ALIGN - 1) >= need;
}
static void fz_ws_exact(fz_ws *w, size_t need) {
    w->bytes = need;
    w->mem = (unsigned char *)malloc(need + SELSCAN_WORKSPACE_ALIGN);
    w->ptr = w->mem + (SELSCAN_WORKSPACE_ALIGN - (uintptr_t)w->mem % SELSCAN_WORKSPACE_ALIGN) % SELSCAN_WORKSPACE_ALIGN;
    memset(w->ptr, 0xcd, need < (1u << 20) ? need : (1u << 20));
}

static int fz_isa(fz_rd *r) { return (int)fz_below(r, 4); } /* clamped to the CPU by the library */

static int fz_numeric(const fz_case *c) { return !c->special && !c->aliased && !c->any_misalign && c->dtype >= 0 && c->dtype <= 2; }

/* ---- size checks: what the reference needs at least; the checkpoint formula exactly ---- */
static void fz_check_sizes(const fz_case *c, const selscan_problem *p, const selscan_grads *g) {
    size_t b = 0, cb = 0;
    selscan_status sv, sw, sc, spp;
    int64_t nparts = 1 + (int64_t)(fz_next() % 7);
    size_t bp = 0;
    fz_dg_reset(); sv = g ? selscan_validate_grads(p, g) : selscan_validate(p); fz_dg_check(sv, "validate");
    fz_dg_reset(); sw = selscan_workspace_size(p, g, &b); fz_dg_check(sw, "workspace_size");
    fz_dg_reset(); sc = selscan_checkpoint_size(p, &cb); fz_dg_check(sc, "checkpoint_size");
    fz_dg_reset(); spp = selscan_workspace_size_parts(p, g, nparts, &bp); fz_dg_check(spp, "workspace_size_parts");
    if (sv != SELSCAN_OK) {
        FZ_CHECK(sw == sv, "workspace_size status differs from validate");
        FZ_CHECK(spp == sv, "workspace_size_parts status differs from validate");
    } else {
        FZ_CHECK(sw == SELSCAN_OK || sw == SELSCAN_ERR_SHAPE, "workspace_size status on a valid problem");
        FZ_CHECK(spp == SELSCAN_OK || spp == SELSCAN_ERR_SHAPE, "workspace_size_parts status on a valid problem");
    }
    if (sw == SELSCAN_OK) {
        __int128 need = fz_smul(c->N, 4);
        if (g) {
            if (g->dB.data && !(c->flags & 2u)) need += fz_smul4(c->N, c->L, 4, 1);
            if (g->dC.data && !(c->flags & 4u)) need += fz_smul4(c->N, c->L, 4, 1);
        }
        FZ_CHECK((__int128)b >= need, "workspace size below the reference's need (wrapped?)");
    }
    if (spp == SELSCAN_OK && sw == SELSCAN_OK) FZ_CHECK(bp >= (size_t)(c->N * 4) , "parts workspace size small");
    if (sc == SELSCAN_OK) {
        const int64_t nseg = c->cu ? c->nseq : 1;
        const __int128 want = fz_smul(fz_smul4(c->batch, c->dim, (c->L + 63) / 64 + nseg, c->N), 4);
        FZ_CHECK((__int128)cb == want, "checkpoint size is not batch * dim * slots * N * 4");
    }
    if (sc == SELSCAN_OK && sv == SELSCAN_ERR_SHAPE) fz_fail("checkpoint_size OK on a problem validate refuses for its shape");
}

/* ---- the forward ---- */
static void fz_forward(fz_rd *r, fz_case *c) {
    selscan_problem p;
    size_t need = 0, cb = 0;
    selscan_status st, sw;
    int64_t np = 1 + fz_below(r, 4), k;
    int isa = fz_isa(r), use_ck = fz_below(r, 2);
    fz_ws w;
    float *ck = NULL;
    unsigned char *ckmem = NULL;
    fz_problem(c, &p, 0);
    fz_check_sizes(c, &p, NULL);
    sw = selscan_workspace_size_parts(&p, NULL, np, &need);
    if (sw != SELSCAN_OK) need = fz_below(r, 2) ? 4096 : 0;
    fz_ws_make(r, &w, need);
    /* a valid problem too big to compute here: only a too small workspace may be passed */
    if (!fz_runnable(c) && sw == SELSCAN_OK && (fz_ws_enough(&w, need) || need > FZ_WS_CAP)) { fz_ws_free(&w); return; }
    if (use_ck && selscan_checkpoint_size(&p, &cb) == SELSCAN_OK && cb <= FZ_WS_CAP) {
        ckmem = (unsigned char *)malloc(cb + 4);
        memset(ckmem, 0xa5, cb + 4);
        ck = (float *)(void *)ckmem;
    } else if (use_ck) {
        cb = 64; ckmem = (unsigned char *)malloc(cb); memset(ckmem, 0xa5, cb); ck = (float *)(void *)ckmem;
    }
    fz_snap(c, 0);
    fz_dg_reset();
    st = selscan__forward_fast(&p, 0, np, w.ptr, w.bytes, isa, ck, cb);
    if (st != SELSCAN_OK) {
        int j;
        fz_dg_check(st, "forward");
        fz_check_untouched(c, 0, "forward");
        for (j = 0; ck && j < (int)cb; j++) FZ_CHECK(ckmem[j] == 0xa5, "checkpoint written on an error status");
        /* the reference refuses it too (unless the workspace or checkpoint was the reason) */
        if (st != SELSCAN_ERR_WORKSPACE && st != SELSCAN_ERR_ALIAS) {
            FZ_CHECK(selscan_forward_ref(&p, w.ptr, w.bytes) != SELSCAN_OK, "reference accepted what fast refused");
            fz_check_untouched(c, 0, "forward_ref");
        }
        goto done;
    }
    FZ_CHECK(fz_runnable(c), "a problem too large to compute was accepted with this workspace");
    for (k = 1; k < np; k++) FZ_CHECK(selscan__forward_fast(&p, k, np, w.ptr, w.bytes, isa, ck, cb) == SELSCAN_OK, "a later part failed");
    fz_check_inputs(c, "forward");
    fz_check_written(c, T_Y, 0);
    fz_check_written(c, T_HLAST, 0);
    {
        selscan_problem pr;
        size_t rb = 0;
        fz_ws rw;
        fz_problem(c, &pr, 1);
        FZ_CHECK(selscan_workspace_size(&pr, NULL, &rb) == SELSCAN_OK, "workspace_size after an OK forward");
        fz_ws_exact(&rw, rb);
        st = selscan_forward_ref(&pr, rw.ptr, rw.bytes);
        if (st == SELSCAN_OK && fz_numeric(c)) {
            fz_compare(c, T_Y, 0, 1, tc_tol_lowp((selscan_dtype)c->dtype, 2e-3, 2)); /* k = 2: fast and reference each round to T */
            fz_compare(c, T_HLAST, 0, 1, 2e-3);
        }
        fz_ws_free(&rw);
    }
done:
    fz_ws_free(&w);
    free(ckmem);
}

/* ---- the backward: fast parts + reduce (set 0), with the forward's checkpoint (set 2), reference (set 1) ---- */
static selscan_status fz_bwd_run(const fz_case *c, int set, int64_t np, int isa, fz_ws *w, const float *ck, size_t cb) {
    selscan_problem p;
    selscan_grads g;
    selscan_status st;
    int64_t k;
    fz_problem(c, &p, set);
    fz_grads(c, &g, set);
    st = selscan__backward_fast(&p, &g, 0, np, w->ptr, w->bytes, isa, ck, cb);
    if (st != SELSCAN_OK) return st;
    for (k = 1; k < np; k++) FZ_CHECK(selscan__backward_fast(&p, &g, k, np, w->ptr, w->bytes, isa, ck, cb) == SELSCAN_OK, "a later backward part failed");
    for (k = 0; k < np; k++) FZ_CHECK(selscan_backward_cpu_reduce(&p, &g, k, np, w->ptr, w->bytes) == SELSCAN_OK, "reduce failed");
    return SELSCAN_OK;
}

static void fz_backward(fz_rd *r, fz_case *c) {
    selscan_problem p;
    selscan_grads g;
    size_t need = 0;
    selscan_status st, sw;
    int64_t np = 1 + fz_below(r, 4);
    int isa = fz_isa(r), i;
    fz_ws w;
    fz_problem(c, &p, 0);
    fz_grads(c, &g, 0);
    fz_check_sizes(c, &p, &g);
    sw = selscan_workspace_size_parts(&p, &g, np, &need);
    if (sw != SELSCAN_OK) need = fz_below(r, 2) ? 4096 : 0;
    fz_ws_make(r, &w, need);
    if (!fz_runnable(c) && sw == SELSCAN_OK && (fz_ws_enough(&w, need) || need > FZ_WS_CAP)) { fz_ws_free(&w); return; }
    fz_snap(c, 0);
    fz_dg_reset();
    st = fz_bwd_run(c, 0, np, isa, &w, NULL, 0);
    if (st != SELSCAN_OK) {
        fz_dg_check(st, "backward");
        fz_check_untouched(c, 0, "backward");
        if (st != SELSCAN_ERR_WORKSPACE && st != SELSCAN_ERR_ALIAS) {
            FZ_CHECK(selscan_backward_ref(&p, &g, w.ptr, w.bytes) != SELSCAN_OK, "reference accepted what fast refused");
            fz_check_untouched(c, 0, "backward_ref");
        }
        fz_ws_free(&w);
        return;
    }
    FZ_CHECK(fz_runnable(c), "a backward too large to compute was accepted");
    fz_check_inputs(c, "backward");
    for (i = T_DU; i <= T_DH0; i++) fz_check_written(c, i, 0);
    fz_check_nan_canon_all(c, T_DU, T_DH0, 0, "backward");
    /* reference */
    {
        selscan_problem pr;
        selscan_grads gr;
        size_t rb = 0;
        fz_ws rw;
        fz_problem(c, &pr, 1);
        fz_grads(c, &gr, 1);
        FZ_CHECK(selscan_workspace_size(&pr, &gr, &rb) == SELSCAN_OK, "workspace_size after an OK backward");
        fz_ws_exact(&rw, rb);
        st = selscan_backward_ref(&pr, &gr, rw.ptr, rw.bytes);
        if (st == SELSCAN_OK) fz_check_nan_canon_all(c, T_DU, T_DH0, 1, "backward_ref");
        if (st == SELSCAN_OK && fz_numeric(c) && c->L <= 64)
            for (i = T_DU; i <= T_DH0; i++) fz_compare(c, i, 0, 1, tc_tol_lowp((selscan_dtype)c->t[i].dtype, 5e-3, 2)); /* k = 2, as y */
        fz_ws_free(&rw);
    }
    /* with the forward's checkpoint: bitwise the same gradients */
    if (!c->aliased && c->t[T_Y].present) {
        selscan_problem pf;
        size_t cb = 0;
        int64_t np2 = 1 + fz_below(r, 3), k;
        if (selscan_checkpoint_size(&p, &cb) == SELSCAN_OK && cb <= FZ_WS_CAP) {
            float *ck = (float *)malloc(cb ? cb : 4);
            size_t fneed = 0;
            fz_ws fw;
            fz_problem(c, &pf, 2);
            if (selscan_workspace_size_parts(&pf, NULL, np2, &fneed) != SELSCAN_OK || fneed > FZ_WS_CAP) fneed = 0; /* y may be invalid for a forward */
            fz_ws_exact(&fw, fneed);
            if (fneed) {
                st = SELSCAN_OK;
                for (k = 0; k < np2 && st == SELSCAN_OK; k++) st = selscan__forward_fast(&pf, k, np2, fw.ptr, fw.bytes, isa, ck, cb);
                if (st == SELSCAN_OK) {
                    fz_ws w2;
                    size_t need2 = 0;
                    FZ_CHECK(selscan_workspace_size_parts(&p, &g, np2, &need2) == SELSCAN_OK, "backward size for np2");
                    fz_ws_exact(&w2, need2);
                    {
                        st = fz_bwd_run(c, 2, np2, isa, &w2, ck, cb);
                        if (st != SELSCAN_OK) fprintf(stderr, "fuzz_selscan: status %d\n", (int)st);
                        FZ_CHECK(st == SELSCAN_OK, "backward with the checkpoint refused what the plain one accepted");
                        for (i = T_DU; i <= T_DH0; i++) fz_bitwise(c, i, 0, 2, "backward with the checkpoint not bitwise equal to without");
                    }
                    fz_ws_free(&w2);
                }
            }
            fz_ws_free(&fw);
            free(ck);
        }
    }
    fz_ws_free(&w);
}

/* ---- the step: fast (set 0) vs reference (set 1) ---- */
static void fz_stepcase(fz_rd *r, fz_case *c) {
    selscan_step_problem s;
    selscan__stp q;
    selscan_status st, sv, scu;
    int64_t np = 1 + fz_below(r, 4), k;
    int isa = fz_isa(r);
    fz_step(c, &s, 0);
    fz_dg_reset();
    sv = selscan_validate_step(&s);
    fz_dg_check(sv, "validate_step");
    scu = selscan__validate_step_ex(&s, &q, 0); /* the CUDA launchers' host validation (idx not read) */
    if (sv == SELSCAN_OK) FZ_CHECK(scu == SELSCAN_OK, "CUDA-side step validation refused what the CPU accepts");
    if (!fz_runnable(c) && sv == SELSCAN_OK) return;
    fz_snap(c, 0);
    fz_dg_reset();
    st = selscan__step_fast(&s, 0, np, isa);
    fz_dg_check(st, "step");
    FZ_CHECK((st == SELSCAN_OK) == (sv == SELSCAN_OK), "step status differs from validate_step");
    if (st != SELSCAN_OK) { fz_check_untouched(c, 0, "step"); return; }
    FZ_CHECK(fz_runnable(c), "a step too large to compute was accepted");
    for (k = 1; k < np; k++) FZ_CHECK(selscan__step_fast(&s, k, np, isa) == SELSCAN_OK, "later step part");
    fz_check_inputs(c, "step");
    fz_check_written(c, T_Y, 0);
    {
        /* state rows nobody references: untouched */
        const fz_ten *t = &c->t[T_STATE];
        const int64_t nc = c->ncache ? c->ncache : c->batch;
        int64_t row, d, n, b;
        for (row = 0; row < nc; row++) {
            int used = 0;
            for (b = 0; b < c->batch; b++) if ((c->idx ? c->idx[b] : b) == row) used = 1;
            if (used || t->alias_of >= 0) continue;
            for (d = 0; d < c->dim; d++)
                for (n = 0; n < c->N; n++) {
                    const int64_t o = (row * t->rs[0] + d * t->rs[1] + n * t->rs[2]) * t->dsz;
                    FZ_CHECK(!memcmp(t->data[0] + o, t->snap + t->misalign + o, (size_t)t->dsz), "unreferenced state row written");
                }
        }
    }
    {
        selscan_step_problem sr;
        fz_step(c, &sr, 1);
        st = selscan_step_ref(&sr);
        FZ_CHECK(st == SELSCAN_OK, "step_ref refused what the fast step accepted");
        if (fz_numeric(c)) {
            /* y = (sum_n C h + D u) gate: the fast path's fused multiply-adds and the reference's
               products round apart by up to about 2 N u32 sum |terms|, which the new state h can
               make much larger than y (decays past 1: a negative delta, A_LOG's A down to -e^3) */
            const double zg = c->t[T_Z].present ? fmax(fz_maxabs(c, T_Z, 0), 1.0) : 1.0;
            const double terms = ((double)c->N * fz_maxabs(c, T_C, 0) * fz_maxabs(c, T_STATE, 1) +
                                  fz_maxabs(c, T_D, 0) * fz_maxabs(c, T_U, 0)) * zg;
            fz_compare_atol(c, T_Y, 0, 1, tc_tol_lowp((selscan_dtype)c->dtype, 1e-4, 2), /* k = 2: each side rounds its own f32 value */
                            2.0 * (double)(c->N + 1) * (1.0 / 16777216) * terms);
            fz_compare(c, T_STATE, 0, 1, tc_tol_lowp((selscan_dtype)c->t[T_STATE].dtype, 1e-4, 2));
        }
    }
}

/* ---- the SSD scan (Mamba-2, >>ssd-api): decoding ---- */
/* n_groups: 0 (means 1), 1, nheads, a divisor of nheads, one that may not divide, negative; huge at times */
static int64_t fz_ssd_groups(fz_rd *r, const fz_case *c) {
    const unsigned m = fz_below(r, 12);
    int64_t d, k, n = 0;
    if (c->huge && fz_rare(r, c, 8)) return fz_huge[fz_below(r, FZ_NHUGE)];
    if (c->H <= 0 || c->H > 64) return m & 1;
    switch (m) {
    case 0: case 1: return m;
    case 2: case 9: return c->H;
    case 3: case 4: case 7: case 8: /* the k-th divisor */
        for (d = 1; d <= c->H; d++) n += c->H % d == 0;
        k = (int64_t)fz_below(r, (unsigned)n);
        for (d = 1; d <= c->H; d++) if (c->H % d == 0 && k-- == 0) return d;
        return 1;
    case 5: return 1 + (int64_t)fz_below(r, (unsigned)c->H + 1);
    case 6: return -(int64_t)fz_below(r, 3);
    default: return 1;
    }
}

/* dt_min / dt_max (read with SELSCAN_SSD_DT_LIMIT): mamba_ssm's (0, inf), a range, equal, inverted, NaN, infinite */
static void fz_ssd_limits(fz_rd *r, fz_case *c) {
    switch (fz_below(r, 16)) {
    case 0: case 1: case 8: case 9: case 10: c->dtmin = 0.0f; c->dtmax = INFINITY; break;
    case 2: case 3: case 11: case 12: case 13: case 14: case 15: c->dtmin = (float)fz_unif(0.0, 0.3); c->dtmax = (float)fz_unif(0.35, 1.5); break;
    case 4: c->dtmin = c->dtmax = (float)fz_unif(0.0, 1.0); break;
    case 5: c->dtmin = (float)fz_unif(0.5, 1.0); c->dtmax = (float)fz_unif(-0.5, 0.45); break; /* inverted */
    case 6: { const unsigned w = fz_below(r, 3); c->dtmin = w == 1 ? 0.1f : NAN; c->dtmax = w == 0 ? 0.9f : NAN; break; }
    default: {
        static const float e[][2] = {{-INFINITY, INFINITY}, {-INFINITY, -INFINITY}, {INFINITY, INFINITY}, {INFINITY, -INFINITY}, {-1.0f, 0.0f}};
        const unsigned w = fz_below(r, 5);
        c->dtmin = e[w][0]; c->dtmax = e[w][1];
    }
    }
}

static void fz_ssd_decode(fz_rd *r, fz_case *c) {
    const unsigned hdr = fz_u8(r);
    fz_ten *t = c->t;
    int64_t G, rows, i;
    int dt, seq = 0;
    c->ssd = 1;
    c->kind = (int)fz_below(r, 3); /* 0 forward, 1 backward, 2 sizes only */
    c->huge = (hdr >> 2) % 5 == 0;
    c->special = (hdr >> 5) == 7;
    c->dtype = (int)fz_below(r, 3);
    if (fz_rare(r, c, 64)) c->dtype = fz_below(r, 2) ? 3 : -1;
    c->flags = fz_u8(r) & 7u; /* DT_SOFTPLUS, DT_LIMIT, D_HEADDIM */
    if (fz_rare(r, c, 64)) c->flags |= 8u << fz_below(r, 5); /* unknown */
    c->batch = fz_size(r, c->huge, 3);
    c->L = fz_size(r, c->huge, 70);
    c->H = fz_size(r, c->huge, 6);
    c->P = fz_below(r, 4) ? fz_size(r, c->huge, 8) : fz_size(r, c->huge, 80); /* past 64: two channel blocks */
    c->N = fz_size(r, c->huge, 20);
    if (fz_rare(r, c, c->kind == 2 ? 4 : 64)) { /* an empty problem (only the size queries accept it) */
        int64_t *z[] = {&c->batch, &c->L, &c->H, &c->P, &c->N};
        *z[fz_below(r, 5)] = 0;
    }
    c->dim = c->H;
    c->G = fz_ssd_groups(r, c);
    fz_ssd_limits(r, c);
    c->nseq = 0;
    switch (fz_below(r, 10)) {
    case 8: case 9: { /* cu_seqlens (batch 1 mostly), at times with seq_idx too */
        const int64_t b = c->batch;
        fz_cu(r, c);
        if (fz_rare(r, c, 16)) c->batch = b;
        if (fz_rare(r, c, 32)) { /* cu_seqlens not 8-byte aligned (refused before its values are read) */
            const size_t cb = (size_t)(c->nseq + 2) * 8;
            c->cu_mem = (unsigned char *)malloc(cb + 8);
            memcpy(c->cu_mem + 4, c->cu, cb - 8);
            free(c->cu);
            c->cu = (int64_t *)(void *)(c->cu_mem + 4);
        }
        seq = fz_rare(r, c, 16);
        break;
    }
    case 6: case 7: seq = 1; break;
    default: break;
    }
    dt = c->dtype >= 0 && c->dtype <= 2 ? c->dtype : 0;
    G = c->G > 0 ? c->G : 1;
    rows = c->cu ? c->nseq : c->batch;
    fz_ten_set(&t[S_X], S_X, 4, c->batch, c->L, c->H, c->P, dt, 0);
    fz_ten_set(&t[S_DT], S_DT, 3, c->batch, c->L, c->H, 1, dt, 0);
    fz_ten_set(&t[S_A], S_A, 1, c->H, 1, 1, 1, SELSCAN_F32, 0);
    fz_ten_set(&t[S_B], S_B, 4, c->batch, c->L, G, c->N, dt, 0);
    fz_ten_set(&t[S_C], S_C, 4, c->batch, c->L, G, c->N, dt, 0);
    if (c->flags & SELSCAN_SSD_D_HEADDIM) fz_ten_set(&t[S_D], S_D, 2, c->H, c->P, 1, 1, SELSCAN_F32, 0);
    else fz_ten_set(&t[S_D], S_D, 1, c->H, 1, 1, 1, SELSCAN_F32, 0);
    fz_ten_set(&t[S_Z], S_Z, 4, c->batch, c->L, c->H, c->P, dt, 0);
    fz_ten_set(&t[S_BIAS], S_BIAS, 1, c->H, 1, 1, 1, SELSCAN_F32, 0);
    fz_ten_set(&t[S_SEQ], S_SEQ, 2, c->batch, c->L, 1, 1, SELSCAN_F32, 0); /* int32: 4-byte elements, values below */
    fz_ten_set(&t[S_H0], S_H0, 4, rows, c->H, c->P, c->N, SELSCAN_F32, 0);
    fz_ten_set(&t[S_Y], S_Y, 4, c->batch, c->L, c->H, c->P, dt, 1);
    fz_ten_set(&t[S_HLAST], S_HLAST, 4, rows, c->H, c->P, c->N, SELSCAN_F32, 1);
    for (i = S_X; i <= S_C; i++) t[i].present = 1;
    t[S_Y].present = !fz_rare(r, c, 32);
    t[S_D].present = fz_below(r, 2);
    t[S_Z].present = fz_below(r, 2);
    t[S_BIAS].present = fz_below(r, 2);
    t[S_H0].present = fz_below(r, 2);
    t[S_HLAST].present = fz_below(r, 2);
    t[S_SEQ].present = seq;
    if (fz_rare(r, c, 32)) t[S_X + fz_below(r, 5)].present = 0; /* a required operand missing */
    if (c->kind != 0) {
        const unsigned want = (unsigned)fz_take(r, 3);
        fz_ten_set(&t[S_DY], S_DY, 4, c->batch, c->L, c->H, c->P, dt, 0);
        fz_ten_set(&t[S_DHLAST], S_DHLAST, 4, rows, c->H, c->P, c->N, SELSCAN_F32, 0);
        fz_ten_set(&t[S_DX], S_DX, 4, c->batch, c->L, c->H, c->P, dt, 1);
        fz_ten_set(&t[S_DDT], S_DDT, 3, c->batch, c->L, c->H, 1, dt, 1);
        fz_ten_set(&t[S_DA], S_DA, 1, c->H, 1, 1, 1, SELSCAN_F32, 1);
        fz_ten_set(&t[S_DB], S_DB, 4, c->batch, c->L, G, c->N, dt, 1);
        fz_ten_set(&t[S_DC], S_DC, 4, c->batch, c->L, G, c->N, dt, 1);
        fz_ten_set(&t[S_DD], S_DD, t[S_D].nd, t[S_D].n[0], t[S_D].n[1], 1, 1, SELSCAN_F32, 1);
        fz_ten_set(&t[S_DZ], S_DZ, 4, c->batch, c->L, c->H, c->P, dt, 1);
        fz_ten_set(&t[S_DBIAS], S_DBIAS, 1, c->H, 1, 1, 1, SELSCAN_F32, 1);
        fz_ten_set(&t[S_DH0], S_DH0, 4, rows, c->H, c->P, c->N, SELSCAN_F32, 1);
        t[S_DY].present = !fz_rare(r, c, 32);
        t[S_DHLAST].present = want & 1;
        for (i = S_DX; i <= S_DH0; i++) t[i].present = ((want >> (2 * (i - S_DX) + 1)) & 3) != 3;
        if (t[S_DZ].present && !t[S_Z].present && !fz_rare(r, c, 4)) t[S_DZ].present = 0;
    }
    fz_finish(r, c, S_X, NT);
    /* seq_idx: runs of equal values (only neighbours' equality matters); a huge broadcast one: its span */
    if (t[S_SEQ].present && t[S_SEQ].allocatable && !t[S_SEQ].misalign && fz_ssd_small(c)) {
        const fz_ten *q = &t[S_SEQ];
        const int span = fz_count(q) > (1 << 20);
        const int64_t cnt = span ? (int64_t)(q->bytes / 4) : fz_count(q);
        int32_t v = 0;
        for (i = 0; i < cnt; i++) {
            if (i == 0 || fz_next() % 4 == 0) v = fz_next() % 16 ? (int32_t)(fz_next() % 5) - 1 : (int32_t)fz_next();
            memcpy(q->data[0] + (span ? i : fz_off(q, i)) * 4, &v, 4);
        }
    }
}

static int fz_ssd_runnable(const fz_case *c) {
    int i;
    if (!fz_ssd_small(c)) return 0;
    for (i = S_X; i < NT; i++)
        if (c->t[i].present && !c->t[i].allocatable) return 0;
    return 1;
}

static void fz_ssd_problem(const fz_case *c, selscan_ssd_problem *p, int set) {
    memset(p, 0, sizeof *p);
    p->diag = &fz_dg;
    p->batch = c->batch; p->seqlen = c->L; p->nheads = c->H; p->headdim = c->P; p->dstate = c->N; p->n_groups = c->G;
    p->dtype = (selscan_dtype)c->dtype; p->flags = c->flags; p->dt_min = c->dtmin; p->dt_max = c->dtmax;
    p->cu_seqlens = c->cu; p->n_seqs = c->nseq;
    fz_api_in(&p->x, c, S_X); fz_api_in(&p->dt, c, S_DT); fz_api_in(&p->A, c, S_A); fz_api_in(&p->B, c, S_B);
    fz_api_in(&p->C, c, S_C); fz_api_in(&p->D, c, S_D); fz_api_in(&p->z, c, S_Z); fz_api_in(&p->dt_bias, c, S_BIAS);
    fz_api_in(&p->seq_idx, c, S_SEQ); fz_api_in(&p->initial_state, c, S_H0);
    fz_api_out(&p->y, c, S_Y, set); fz_api_out(&p->final_state, c, S_HLAST, set);
}
static void fz_ssd_grads(const fz_case *c, selscan_ssd_grads *g, int set) {
    memset(g, 0, sizeof *g);
    fz_api_in(&g->dy, c, S_DY); fz_api_in(&g->dfinal_state, c, S_DHLAST);
    fz_api_out(&g->dx, c, S_DX, set); fz_api_out(&g->ddt, c, S_DDT, set); fz_api_out(&g->dA, c, S_DA, set);
    fz_api_out(&g->dB, c, S_DB, set); fz_api_out(&g->dC, c, S_DC, set); fz_api_out(&g->dD, c, S_DD, set);
    fz_api_out(&g->dz, c, S_DZ, set); fz_api_out(&g->ddt_bias, c, S_DBIAS, set); fz_api_out(&g->dinitial_state, c, S_DH0, set);
}

/* NaN in gives NaN out (>>ssd-api): whether input id (present) is NaN at the multi-index i */
static int fz_nan_at(const fz_case *c, int id, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    const fz_ten *t = &c->t[id];
    const int64_t ix[4] = {i0, i1, i2, i3};
    int64_t o = 0;
    int d;
    if (!t->present) return 0;
    for (d = 0; d < t->nd; d++) o += ix[d] * t->rs[d];
    return isnan(fz_get(t, t->data[0], o));
}
/* out (y: forward; dx: backward) at (b, t, h, p) must be NaN where an input of its own position is:
   x (forward) or dy (backward), z at (b,t,h,p), dt at (b,t,h), B or C at (b,t,g,any n), D at h or
   (h,p), dt_bias at h. Each enters it there through products and sums, which keep a NaN, whatever
   the state, decays or sequence boundaries (the clamp and softplus keep it too: >>ssd-api);
   forward: S[p,:] = a S + dt B x, y = C S + D x, times silu(z); backward: dS[p,:] = a' dS' + C dy0,
   dx = dt B dS + D dy0, dy0 = dy silu(z). */
static void fz_ssd_check_nan_out(const fz_case *c, int out, int set, const char *what) {
    const fz_ten *o = &c->t[out];
    const int64_t G = c->G == 0 ? 1 : c->G, hpg = c->H / G;
    int64_t b, t, h, p, n;
    if (!o->present || o->alias_of >= 0 || G <= 0 || hpg <= 0) return;
    for (b = 0; b < c->batch; b++)
        for (t = 0; t < c->L; t++)
            for (h = 0; h < c->H; h++) {
                int row = fz_nan_at(c, S_DT, b, t, h, 0) || fz_nan_at(c, S_BIAS, h, 0, 0, 0) ||
                          (!(c->flags & SELSCAN_SSD_D_HEADDIM) && fz_nan_at(c, S_D, h, 0, 0, 0));
                for (n = 0; n < c->N && !row; n++) row = fz_nan_at(c, S_B, b, t, h / hpg, n) || fz_nan_at(c, S_C, b, t, h / hpg, n);
                for (p = 0; p < c->P; p++) {
                    const int src = row || fz_nan_at(c, out == S_Y ? S_X : S_DY, b, t, h, p) || fz_nan_at(c, S_Z, b, t, h, p) ||
                                    ((c->flags & SELSCAN_SSD_D_HEADDIM) && fz_nan_at(c, S_D, h, p, 0, 0));
                    const int64_t k[4] = {b, t, h, p};
                    int64_t off = 0;
                    int d;
                    for (d = 0; d < 4; d++) off += k[d] * o->rs[d];
                    if (src && !isnan(fz_get(o, o->data[set], off))) {
                        fprintf(stderr, "fuzz_selscan: %s: %s[%lld,%lld,%lld,%lld] = %.9g (set %d), an input there NaN\n", what, o->name,
                                (long long)b, (long long)t, (long long)h, (long long)p, fz_get(o, o->data[set], off), set);
                        fz_fail("ssd: NaN in, no NaN out");
                    }
                }
            }
}

/* a finished SSD call's NaN checks on set: NaN out where an input of the position is NaN; the
   backward's gradients' NaNs canonical */
static void fz_ssd_check_nans(const fz_case *c, int set, int bwd, const char *what) {
    fz_ssd_check_nan_out(c, bwd ? S_DX : S_Y, set, what);
    if (bwd) fz_check_nan_canon_all(c, S_DX, S_DH0, set, what);
}

/* ---- SSD size checks: the size rules against validation, the workspace sizes against what the
   reference needs (>>ssd-reference) and the documented backward partials, n_parts' range ---- */
static void fz_ssd_check_sizes(const fz_case *c, const selscan_ssd_problem *p, const selscan_ssd_grads *g) {
    static const int64_t nps[] = {1, 2, 3, 5, 8, 64, 0, -1, ((int64_t)1 << 24) + 1, INT64_MIN};
    const int64_t np = nps[fz_next() % 10];
    const int np_ok = np >= 1 && np <= ((int64_t)1 << 24);
    const int nonempty = p->batch > 0 && p->seqlen > 0 && p->nheads > 0 && p->headdim > 0;
    size_t b = 0, b1 = 0, bp = 12345;
    selscan_status sv, scs, sw, s1, spp;
    fz_dg_reset(); sv = g ? selscan_validate_ssd_grads(p, g) : selscan_validate_ssd(p); fz_dg_check(sv, "validate_ssd");
    fz_dg_reset(); scs = selscan_check_ssd_sizes(p); fz_dg_check(scs, "check_ssd_sizes");
    fz_dg_reset(); sw = selscan_ssd_workspace_size(p, g, &b); fz_dg_check(sw, "ssd_workspace_size");
    fz_dg_reset(); s1 = selscan_ssd_workspace_size_parts(p, g, 1, &b1); fz_dg_check(s1, "ssd_workspace_size_parts");
    fz_dg_reset(); spp = selscan_ssd_workspace_size_parts(p, g, np, &bp); fz_dg_check(spp, "ssd_workspace_size_parts");
    if (!np_ok) FZ_CHECK(spp == SELSCAN_ERR_SHAPE && bp == 12345, "ssd_workspace_size_parts accepted n_parts out of range");
    if (sv != SELSCAN_OK) {
        FZ_CHECK(sw == sv && s1 == sv, "ssd workspace size status differs from validate");
        if (np_ok) FZ_CHECK(spp == sv, "ssd_workspace_size_parts status differs from validate");
    } else {
        FZ_CHECK(scs == SELSCAN_OK, "check_ssd_sizes refused what validate accepts");
        FZ_CHECK(sw == SELSCAN_OK || sw == SELSCAN_ERR_SHAPE, "ssd_workspace_size status on a valid problem");
        FZ_CHECK(s1 == SELSCAN_OK || s1 == SELSCAN_ERR_SHAPE, "ssd_workspace_size_parts status on a valid problem");
        if (np_ok) FZ_CHECK(spp == SELSCAN_OK || spp == SELSCAN_ERR_SHAPE, "ssd_workspace_size_parts status on a valid problem");
    }
    /* the size rules are validation's (sizes1 before the missing-operand check, sizes2 after) */
    if (scs != SELSCAN_OK && nonempty) FZ_CHECK(sv == scs || sv == SELSCAN_ERR_NULL, "check_ssd_sizes refused what validate does not");
    if (!nonempty || p->dstate <= 0) FZ_CHECK(sv != SELSCAN_OK, "an empty SSD problem validated");
    { /* an empty problem whose other rules hold (not packed; sizes whose products cannot overflow): check_ssd_sizes accepts it */
        const int64_t G = p->n_groups == 0 ? 1 : p->n_groups, m = 1 << 12;
        if (!nonempty && p->batch >= 0 && p->seqlen >= 0 && p->nheads >= 0 && p->headdim >= 0 && p->dstate >= 0 &&
            p->batch <= m && p->seqlen <= m && p->nheads <= m && p->headdim <= m && p->dstate <= m && G <= m &&
            (int)p->dtype >= 0 && (int)p->dtype <= 2 && !(p->flags & ~7u) && G > 0 && p->nheads % G == 0 &&
            (!(p->flags & SELSCAN_SSD_DT_LIMIT) || p->dt_min <= p->dt_max) && !p->cu_seqlens && p->n_seqs == 0)
            FZ_CHECK(scs == SELSCAN_OK, "check_ssd_sizes refused an empty problem");
    }
    if (sw == SELSCAN_OK) { /* what the reference needs: a channel's state; backward: states over L + 1 steps, dh, ddt, dB / dC sums */
        __int128 need = fz_smul(c->N, 4);
        if (g) {
            need = fz_smul(fz_smul(c->L + 2, c->N) + c->L, 4);
            if (g->dB.data) need += fz_smul4(c->L, c->N, 4, 1);
            if (g->dC.data) need += fz_smul4(c->L, c->N, 4, 1);
        }
        FZ_CHECK((__int128)b >= need, "ssd workspace size below the reference's need");
        if (s1 == SELSCAN_OK) FZ_CHECK(b >= b1, "ssd_workspace_size below the one-part fast workspace");
    }
    if (s1 == SELSCAN_OK && spp == SELSCAN_OK) FZ_CHECK(bp >= b1, "ssd workspace for n_parts below one part's");
    if (g && spp == SELSCAN_OK && g->dB.data && g->dC.data) /* the documented dB / dC partials */
        FZ_CHECK((__int128)bp >= fz_smul(fz_smul4(2 * c->batch, c->H, c->L, (c->N + 15) / 16 * 16), 4), "ssd backward workspace below its partials");
}

/* The fast SSD path on a chosen instruction set (clamped to this CPU): the library's drivers take
   selscan__cpu_isa(); these run its work items (>>ssd-entry) on isa in one part, so every vector
   path this CPU has is reached. The backward's sums go through the public reduce. */
static selscan_status fz_ssd_fwd_isa(const selscan_ssd_problem *p, void *ws, size_t bytes, int isa) {
    selscan__sprob q;
    selscan_status st;
    int64_t npb, i;
    int saved;
    ws = selscan__ws_align(ws, bytes, &bytes);
    if ((st = selscan__ssd_validate_forward(p, &q, ws, bytes, selscan__ssd_ws_fast, 1)) != SELSCAN_OK) return st;
    npb = (q.P + SELSCAN__SSD_PB - 1) / SELSCAN__SSD_PB;
    saved = errno; /* (the items' expf / log1pf may set it: the drivers keep the caller's) */
    for (i = 0; i < q.batch * q.H * npb; i++) {
        const int64_t p0 = i % npb * SELSCAN__SSD_PB;
        selscan__ssd_fwd_item(&q, i / (q.H * npb), i / npb % q.H, p0, selscan__min64(SELSCAN__SSD_PB, q.P - p0), (float *)ws, isa);
    }
    errno = saved;
    return SELSCAN_OK;
}
static selscan_status fz_ssd_bwd_isa(const selscan_ssd_problem *p, const selscan_ssd_grads *g, void *ws0, size_t bytes0, int isa) {
    selscan__sprob q;
    selscan__sgrd rg;
    selscan__ssh o;
    selscan_status st;
    size_t bytes = bytes0;
    void *ws = selscan__ws_align(ws0, bytes0, &bytes);
    int64_t i;
    int saved;
    if ((st = selscan__ssd_validate_backward(p, g, &q, &rg, ws, bytes, selscan__ssd_ws_fast, 1)) != SELSCAN_OK) return st;
    selscan__ssd_ssh_map(&o, &q, &rg);
    saved = errno;
    for (i = 0; i < q.batch * q.H; i++)
        selscan__ssd_bwd_item(&q, &rg, &o, (float *)ws, i / q.H, i % q.H,
                              (float *)(void *)((char *)ws + selscan__ssd_ws_bwd_shared(&q, &rg, 1)), isa);
    errno = saved;
    return selscan_ssd_backward_cpu_reduce(p, g, 0, 1, ws0, bytes0);
}

/* The workspace placed over an operand of the call (ids lo .. hi, skip excluded), at a 64-byte
   aligned address inside its span: every SSD entry point must refuse it (at times; 1 when done). */
static int fz_ssd_ws_over(fz_rd *r, const fz_case *c, fz_ws *w, size_t need, int lo, int hi, int skip0, int skip1) {
    const int id = lo + (int)fz_below(r, (unsigned)(hi - lo + 1));
    const fz_ten *t = &c->t[id];
    uintptr_t a, base;
    /* (a span of 64 bytes or more holds one, wherever malloc put it: the same decisions every run) */
    if (!fz_rare(r, c, 16) || need == 0 || id == skip0 || id == skip1 || !t->present || !t->allocatable ||
        t->bytes < SELSCAN_WORKSPACE_ALIGN)
        return 0;
    base = (uintptr_t)t->data[0];
    a = (base + SELSCAN_WORKSPACE_ALIGN - 1) / SELSCAN_WORKSPACE_ALIGN * SELSCAN_WORKSPACE_ALIGN;
    w->ptr = (unsigned char *)a;
    w->bytes = need;
    return 1;
}

/* The status a fast SSD call must return for validation's sv, the size query's sw / need (of its
   n_parts) and workspace w (order: problem, outputs' strides, workspace, aliasing); -1: not known. */
static int fz_ssd_expect(selscan_status sv, selscan_status sw, size_t need, const fz_ws *w) {
    if (sv != SELSCAN_OK) return sv == SELSCAN_ERR_ALIAS ? -1 : (int)sv;
    if (sw != SELSCAN_OK) return -1;
    return fz_ws_enough(w, need) ? SELSCAN_OK : SELSCAN_ERR_WORKSPACE;
}
static void fz_ssd_check_status(selscan_status st, int expect, int over, const char *what) {
    if (over && st == SELSCAN_OK) {
        fprintf(stderr, "fuzz_selscan: %s: status OK\n", what);
        fz_fail("ssd: a workspace over an operand accepted");
    }
    if (!over && expect >= 0 && (int)st != expect) {
        fprintf(stderr, "fuzz_selscan: %s: status %d, expected %d\n", what, (int)st, expect);
        fz_fail("ssd: status differs from validation and the workspace size");
    }
    if (!over && expect < 0 && st == SELSCAN_OK) fz_fail("ssd: OK where validation refused (aliasing) or the size query failed");
}

/* ---- SSD forward: fast parts (set 0; the parts in either order), the whole call (set 2: bitwise
   the same), the reference (set 1: within tolerance), the items on a chosen ISA (set 2) ---- */
static void fz_ssd_forward(fz_rd *r, fz_case *c) {
    selscan_ssd_problem p;
    size_t need = 0;
    selscan_status sv, sw, st;
    const int64_t np = 1 + fz_below(r, 6);
    const int rev = (int)fz_below(r, 2), isa = selscan__use_isa(fz_isa(r));
    int over, expect;
    int64_t k;
    fz_ws w;
    fz_ssd_problem(c, &p, 0);
    fz_ssd_check_sizes(c, &p, NULL);
    fz_dg_reset(); sv = selscan_validate_ssd(&p); fz_dg_check(sv, "validate_ssd");
    sw = selscan_ssd_workspace_size_parts(&p, NULL, np, &need);
    if (sw != SELSCAN_OK) need = fz_below(r, 2) ? 4096 : 0;
    fz_ws_make(r, &w, need);
    over = fz_ssd_ws_over(r, c, &w, need, S_X, S_HLAST, -1, -1);
    expect = fz_ssd_expect(sv, sw, need, &w);
    /* a valid problem too big to compute here: only a too small workspace may be passed */
    if (!over && !fz_ssd_runnable(c) && sw == SELSCAN_OK && (fz_ws_enough(&w, need) || need > FZ_WS_CAP)) { fz_ws_free(&w); return; }
    fz_snap(c, 0);
    fz_dg_reset();
    st = selscan_ssd_forward_cpu_part(&p, rev ? np - 1 : 0, np, w.ptr, w.bytes);
    fz_dg_check(st, "ssd_forward_cpu_part");
    fz_ssd_check_status(st, expect, over, "ssd_forward_cpu_part");
    if (st != SELSCAN_OK) {
        fz_check_untouched(c, 0, "ssd_forward_cpu_part");
        if (sv != SELSCAN_OK) { /* the problem itself is refused: by every entry point */
            FZ_CHECK(selscan_ssd_forward_ref(&p, w.ptr, w.bytes) != SELSCAN_OK, "ssd reference accepted what validate refused");
            FZ_CHECK(selscan_ssd_forward_cpu(&p, w.ptr, w.bytes) != SELSCAN_OK, "ssd_forward_cpu accepted what validate refused");
            fz_check_untouched(c, 0, "ssd_forward_ref / ssd_forward_cpu");
        }
        fz_ws_free(&w);
        return;
    }
    FZ_CHECK(fz_ssd_runnable(c), "an SSD problem too large to compute was accepted with this workspace");
    for (k = 1; k < np; k++)
        FZ_CHECK(selscan_ssd_forward_cpu_part(&p, rev ? np - 1 - k : k, np, w.ptr, w.bytes) == SELSCAN_OK, "a later SSD part failed");
    fz_check_inputs(c, "ssd_forward_cpu_part");
    fz_check_written(c, S_Y, 0);
    fz_check_written(c, S_HLAST, 0);
    fz_ssd_check_nans(c, 0, 0, "ssd_forward_cpu_part");
    {
        selscan_ssd_problem p1, p2;
        size_t rb = 0;
        fz_ws rw;
        fz_ssd_problem(c, &p1, 1);
        fz_ssd_problem(c, &p2, 2);
        FZ_CHECK(selscan_ssd_workspace_size(&p2, NULL, &rb) == SELSCAN_OK, "ssd_workspace_size after an OK forward");
        fz_ws_exact(&rw, rb);
        FZ_CHECK(selscan_ssd_forward_cpu(&p2, rw.ptr, rw.bytes) == SELSCAN_OK, "ssd_forward_cpu refused what its parts accepted");
        fz_bitwise(c, S_Y, 0, 2, "ssd forward parts not bitwise equal to the whole call");
        fz_bitwise(c, S_HLAST, 0, 2, "ssd forward parts not bitwise equal to the whole call");
        FZ_CHECK(selscan_ssd_forward_ref(&p1, rw.ptr, rw.bytes) == SELSCAN_OK, "ssd_forward_ref refused what the fast path accepted");
        fz_ssd_check_nans(c, 1, 0, "ssd_forward_ref");
        if (fz_numeric(c)) {
            /* f32 part: the fast path's fused multiply-adds and two partial sums over n, through L <= 70 steps (headroom for y's cancellation); k = 2: each side rounds y to T */
            fz_compare(c, S_Y, 0, 1, tc_tol_lowp((selscan_dtype)c->dtype, 2e-3, 2));
            fz_compare(c, S_HLAST, 0, 1, 2e-3); /* an f32 state: the f32 part alone (never rounded to T) */
        }
        FZ_CHECK(fz_ssd_fwd_isa(&p2, rw.ptr, rw.bytes, isa) == SELSCAN_OK, "ssd forward items on an ISA");
        fz_ssd_check_nans(c, 2, 0, "ssd forward items on an ISA");
        if (isa == selscan__cpu_isa()) {
            fz_bitwise(c, S_Y, 0, 2, "ssd forward items on the library's ISA differ from its driver");
            fz_bitwise(c, S_HLAST, 0, 2, "ssd forward items on the library's ISA differ from its driver");
        } else if (fz_numeric(c)) { /* another ISA's items against the reference: the same rounding-only bounds */
            fz_compare(c, S_Y, 2, 1, tc_tol_lowp((selscan_dtype)c->dtype, 2e-3, 2));
            fz_compare(c, S_HLAST, 2, 1, 2e-3);
        }
        fz_ws_free(&rw);
    }
    fz_ws_free(&w);
}

/* ---- SSD backward: fast parts then reduces (set 0; either order), the whole call (set 2:
   bitwise), the reference (set 1: within tolerance), the items on a chosen ISA (set 2) ---- */
static void fz_ssd_backward(fz_rd *r, fz_case *c) {
    selscan_ssd_problem p;
    selscan_ssd_grads g;
    size_t need = 0;
    selscan_status sv, sw, st;
    const int64_t np = 1 + fz_below(r, 6);
    const int rev = (int)fz_below(r, 2), isa = selscan__use_isa(fz_isa(r));
    int over, expect, i;
    int64_t k;
    fz_ws w;
    fz_ssd_problem(c, &p, 0);
    fz_ssd_grads(c, &g, 0);
    fz_ssd_check_sizes(c, &p, &g);
    fz_dg_reset(); sv = selscan_validate_ssd_grads(&p, &g); fz_dg_check(sv, "validate_ssd_grads");
    sw = selscan_ssd_workspace_size_parts(&p, &g, np, &need);
    if (sw != SELSCAN_OK) need = fz_below(r, 2) ? 4096 : 0;
    fz_ws_make(r, &w, need);
    over = fz_ssd_ws_over(r, c, &w, need, S_X, S_DH0, S_Y, S_HLAST); /* the backward does not take y, final_state */
    expect = fz_ssd_expect(sv, sw, need, &w);
    if (!over && !fz_ssd_runnable(c) && sw == SELSCAN_OK && (fz_ws_enough(&w, need) || need > FZ_WS_CAP)) { fz_ws_free(&w); return; }
    fz_snap(c, 0);
    fz_dg_reset();
    st = selscan_ssd_backward_cpu_part(&p, &g, rev ? np - 1 : 0, np, w.ptr, w.bytes);
    fz_dg_check(st, "ssd_backward_cpu_part");
    fz_ssd_check_status(st, expect, over, "ssd_backward_cpu_part");
    if (st != SELSCAN_OK) {
        fz_check_untouched(c, 0, "ssd_backward_cpu_part");
        if (sv != SELSCAN_OK) {
            FZ_CHECK(selscan_ssd_backward_ref(&p, &g, w.ptr, w.bytes) != SELSCAN_OK, "ssd backward reference accepted what validate refused");
            FZ_CHECK(selscan_ssd_backward_cpu(&p, &g, w.ptr, w.bytes) != SELSCAN_OK, "ssd_backward_cpu accepted what validate refused");
            FZ_CHECK(selscan_ssd_backward_cpu_reduce(&p, &g, 0, np, w.ptr, w.bytes) != SELSCAN_OK, "ssd reduce accepted what validate refused");
            fz_check_untouched(c, 0, "ssd_backward_ref / ssd_backward_cpu / reduce");
        }
        fz_ws_free(&w);
        return;
    }
    FZ_CHECK(fz_ssd_runnable(c), "an SSD backward too large to compute was accepted");
    for (k = 1; k < np; k++)
        FZ_CHECK(selscan_ssd_backward_cpu_part(&p, &g, rev ? np - 1 - k : k, np, w.ptr, w.bytes) == SELSCAN_OK, "a later SSD backward part failed");
    for (k = 0; k < np; k++)
        FZ_CHECK(selscan_ssd_backward_cpu_reduce(&p, &g, rev ? k : np - 1 - k, np, w.ptr, w.bytes) == SELSCAN_OK, "SSD reduce failed");
    fz_check_inputs(c, "ssd_backward_cpu_part");
    for (i = S_DX; i <= S_DH0; i++) fz_check_written(c, i, 0);
    fz_ssd_check_nans(c, 0, 1, "ssd_backward_cpu_part + reduce");
    {
        selscan_ssd_problem p1, p2;
        selscan_ssd_grads g1, g2;
        size_t rb = 0;
        fz_ws rw;
        fz_ssd_problem(c, &p1, 1); fz_ssd_grads(c, &g1, 1);
        fz_ssd_problem(c, &p2, 2); fz_ssd_grads(c, &g2, 2);
        FZ_CHECK(selscan_ssd_workspace_size(&p2, &g2, &rb) == SELSCAN_OK, "ssd_workspace_size after an OK backward");
        fz_ws_exact(&rw, rb);
        FZ_CHECK(selscan_ssd_backward_cpu(&p2, &g2, rw.ptr, rw.bytes) == SELSCAN_OK, "ssd_backward_cpu refused what its parts accepted");
        for (i = S_DX; i <= S_DH0; i++) fz_bitwise(c, i, 0, 2, "ssd backward parts + reduce not bitwise equal to the whole call");
        FZ_CHECK(selscan_ssd_backward_ref(&p1, &g1, rw.ptr, rw.bytes) == SELSCAN_OK, "ssd_backward_ref refused what the fast path accepted");
        fz_ssd_check_nans(c, 1, 1, "ssd_backward_ref");
        if (fz_numeric(c) && c->L <= 64)
            /* f32 part: the walk back's fused multiply-adds and its sums over states / channels in another order, L <= 64; k = 2: each side rounds a T gradient */
            for (i = S_DX; i <= S_DH0; i++) fz_compare(c, i, 0, 1, tc_tol_lowp((selscan_dtype)c->t[i].dtype, 5e-3, 2));
        FZ_CHECK(fz_ssd_bwd_isa(&p2, &g2, rw.ptr, rw.bytes, isa) == SELSCAN_OK, "ssd backward items on an ISA");
        fz_ssd_check_nans(c, 2, 1, "ssd backward items on an ISA");
        if (isa == selscan__cpu_isa())
            for (i = S_DX; i <= S_DH0; i++) fz_bitwise(c, i, 0, 2, "ssd backward items on the library's ISA differ from its driver");
        else if (fz_numeric(c) && c->L <= 64) /* another ISA's items: the same rounding-only bounds */
            for (i = S_DX; i <= S_DH0; i++) fz_compare(c, i, 2, 1, tc_tol_lowp((selscan_dtype)c->t[i].dtype, 5e-3, 2));
        fz_ws_free(&rw);
    }
    fz_ws_free(&w);
}

/* NULL arguments (the problem, the grads of a backward, the size's out pointer): every entry point
   returns an error status, names bytes in diag where it has one, writes nothing */
static void fz_ssd_null_args(fz_case *c, const selscan_ssd_problem *p, const selscan_ssd_grads *g) {
    unsigned char ws[256];
    size_t b = 7;
    FZ_CHECK(selscan_validate_ssd(NULL) == SELSCAN_ERR_NULL && selscan_validate_ssd_grads(NULL, g) == SELSCAN_ERR_NULL &&
             selscan_check_ssd_sizes(NULL) == SELSCAN_ERR_NULL, "ssd validation of a NULL problem not SELSCAN_ERR_NULL");
    FZ_CHECK(selscan_validate_ssd_grads(p, NULL) != SELSCAN_OK, "ssd validation of NULL grads accepted");
    FZ_CHECK(selscan_ssd_workspace_size(NULL, NULL, &b) == SELSCAN_ERR_NULL && selscan_ssd_workspace_size(p, NULL, NULL) == SELSCAN_ERR_NULL &&
             selscan_ssd_workspace_size_parts(NULL, g, 1, &b) == SELSCAN_ERR_NULL && selscan_ssd_workspace_size_parts(p, g, 1, NULL) == SELSCAN_ERR_NULL &&
             b == 7, "ssd workspace size with a NULL argument not SELSCAN_ERR_NULL (or bytes written)");
    fz_dg_reset(); FZ_CHECK(selscan_ssd_workspace_size(p, g, NULL) == SELSCAN_ERR_NULL, "ssd_workspace_size bytes NULL");
    fz_dg_check(SELSCAN_ERR_NULL, "ssd_workspace_size with bytes NULL");
    fz_snap(c, 0);
    FZ_CHECK(selscan_ssd_forward_ref(NULL, ws, sizeof ws) != SELSCAN_OK && selscan_ssd_forward_cpu(NULL, ws, sizeof ws) != SELSCAN_OK &&
             selscan_ssd_forward_cpu_part(NULL, 0, 1, ws, sizeof ws) != SELSCAN_OK, "ssd forward of a NULL problem accepted");
    FZ_CHECK(selscan_ssd_backward_ref(p, NULL, ws, sizeof ws) != SELSCAN_OK && selscan_ssd_backward_cpu(p, NULL, ws, sizeof ws) != SELSCAN_OK &&
             selscan_ssd_backward_cpu_part(p, NULL, 0, 1, ws, sizeof ws) != SELSCAN_OK &&
             selscan_ssd_backward_cpu_reduce(p, NULL, 0, 1, ws, sizeof ws) != SELSCAN_OK &&
             selscan_ssd_backward_cpu_reduce(NULL, g, 0, 1, ws, sizeof ws) != SELSCAN_OK &&
             selscan_ssd_backward_ref(NULL, g, ws, sizeof ws) != SELSCAN_OK, "ssd backward with NULL grads or problem accepted");
    fz_check_untouched(c, 0, "ssd calls with NULL arguments");
}

static void fz_ssd_case(fz_rd *r, fz_case *c) {
    switch (c->kind) {
    case 0: fz_ssd_forward(r, c); break;
    case 1: fz_ssd_backward(r, c); break;
    default: { /* size queries only (also empty problems, cu_seqlens' values not given) */
        selscan_ssd_problem p;
        selscan_ssd_grads g;
        fz_ssd_problem(c, &p, 0);
        fz_ssd_grads(c, &g, 0);
        if (c->cu && fz_rare(r, c, 4)) p.cu_seqlens = NULL;
        fz_snap(c, 0);
        fz_ssd_check_sizes(c, &p, NULL);
        fz_ssd_check_sizes(c, &p, &g);
        fz_check_untouched(c, 0, "ssd size queries");
        fz_ssd_null_args(c, &p, &g);
        break;
    }
    }
}

/* FUZZ_SELSCAN_MODE=ssd in the environment: every input decodes as an SSD case (a long run on the
   SSD scan alone; make fuzz / fuzz-ci leave it unset: the header byte chooses) */
static int fz_only_ssd = -1;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_rd r = {data, size, 0};
    fz_case c;
    const int saved = errno;
    memset(&c, 0, sizeof c);
    fz_state = 0x1234567ull;
    {
        size_t i;
        for (i = 0; i < size; i++) fz_state = fz_state * 0x100000001b3ull ^ data[i];
    }
    /* the SSD scan: a size-query header (kind 3) with bit 3 set */
    if (fz_only_ssd < 0) { const char *m = getenv("FUZZ_SELSCAN_MODE"); fz_only_ssd = m && !strcmp(m, "ssd"); }
    if (size && ((data[0] & 0x0bu) == 0x0bu || fz_only_ssd)) fz_ssd_decode(&r, &c);
    else fz_decode(&r, &c);
    errno = 4242;
    switch (c.ssd ? 4 : c.kind) {
    case 0: fz_forward(&r, &c); break;
    case 1: fz_backward(&r, &c); break;
    case 2: fz_stepcase(&r, &c); break;
    case 3: {
        selscan_problem p;
        selscan_grads g;
        fz_problem(&c, &p, 0);
        fz_grads(&c, &g, 0);
        fz_check_sizes(&c, &p, NULL);
        fz_check_sizes(&c, &p, &g);
        break;
    }
    default: fz_ssd_case(&r, &c); break;
    }
    FZ_CHECK(errno == 4242, "the library changed errno");
    errno = saved;
    fz_free(&c);
    return 0;
}
