/* selscan.h - the selective scan of Mamba (S6) as a single-header C library.     v0.1.0
 *
 * Do this:
 *     #define SELSCAN_IMPLEMENTATION
 * before you include this file in *one* C or C++ file to create the implementation.
 * Every other file includes it plainly. Link with -lm.
 *
 *     #include ...
 *     #define SELSCAN_IMPLEMENTATION
 *     #include "selscan.h"
 *
 * Options, as macros defined before the implementation's include:
 *     SELSCAN_STATIC     every function gets internal linkage (private to that translation unit)
 *     SELSCAN_DEF        the linkage of the public functions (default: extern)
 *     SELSCAN_NO_SIMD    the fast CPU path uses portable scalar code only (no runtime dispatch)
 *
 * ---------------------------------------------------------------------------------------------
 * WHAT IT COMPUTES (every backend computes exactly this)
 *
 * For each batch row b, channel d and step t = 0..L-1, with the state h[0..N-1] starting at
 * h0[b,d,:] (zero when h0 is absent), and g = d / (dim / n_groups):
 *
 *     dt   = delta[b,d,t] + delta_bias[d]                  (bias 0 when absent)
 *     dt   = softplus(dt) if SELSCAN_DELTA_SOFTPLUS         softplus(x) = x > 20 ? x : log1p(exp(x))
 *     h[n] = exp(dt * A[d,n]) * h[n] + dt * B[b,g,n,t] * u[b,d,t]
 *     y0   = sum_n C[b,g,n,t] * h[n] + D[d] * u[b,d,t]     (D term 0 when absent)
 *     y    = z ? y0 * silu(z[b,d,t]) : y0                  silu(x) = x / (1 + exp(-x))
 *
 * h_last[b,d,:] (optional) receives the state after the last step. With SELSCAN_FIXED_B
 * (SELSCAN_FIXED_C) B (C) is a (dim, N) f32 matrix constant over time. This is the math of
 * state-spaces/mamba's selective_scan_fn, plus the initial state h0.
 *
 * Packed sequences: with cu_seqlens (n_seqs + 1 offsets, first 0, last seqlen, non-decreasing)
 * and batch 1, the L axis holds n_seqs sequences back to back; the state restarts at each
 * sequence start from h0[s] (or 0) and h_last[s] is the state at the end of sequence s.
 * h0, h_last, dh0 and dh_last then have n_seqs rows instead of batch rows. An empty sequence
 * (two equal offsets) is allowed: its h_last is its h0.
 *
 * Backward: from dy (and optionally dh_last), any subset of du, ddelta, dA, dB, dC, dD, dz,
 * ddelta_bias, dh0 (NULL data: not computed). dD, ddelta_bias and dh0 may be asked for even when
 * D, delta_bias or h0 are absent (they are then gradients at 0); dz needs z. Softplus' derivative
 * is sigmoid(x) for x <= 20 and 1 above. Deterministic: bitwise the same result every call.
 *
 * Step (decode): one token for a batch of cached states, identical to the forward with L = 1,
 * h0 = state and h_last written back into state. See selscan_step_problem.
 *
 * ---------------------------------------------------------------------------------------------
 * OPERANDS: logical shapes, dtypes (T is the problem's dtype: f32, f16 or bf16)
 *
 *     u, delta, z, y          (batch, dim, L)           T        z optional
 *     A                       (dim, N)                  f32
 *     B, C (variable)         (batch, n_groups, N, L)   T
 *     B, C (SELSCAN_FIXED_*)  (dim, N)                  f32
 *     D, delta_bias           (dim)                     f32      optional
 *     h0, h_last              (rows, dim, N)            f32      optional; rows = batch or n_seqs
 *     dy, du, ddelta, dz      like u                    T
 *     dA, dD, ddelta_bias     like A, D                 f32
 *     dB, dC                  like B, C                 T (variable) or f32 (fixed)
 *     dh_last, dh0            like h0                   f32
 *
 * Every tensor is a data pointer plus element strides, one per logical dimension in the order
 * above (stride[0] for the first). All strides 0 means contiguous in that order. So both the
 * (batch, dim, L) and the channels-last (batch, L, dim) memory layouts work without copies:
 * for (batch, L, dim) memory, u.stride = {L*dim, 1, dim}. Input strides may be 0 along a
 * dimension (broadcast); output strides may not make two elements share memory.
 *
 * ---------------------------------------------------------------------------------------------
 * CONTRACT
 *
 * The library never allocates, never prints, never aborts, keeps no global mutable state and is
 * reentrant. The caller owns every buffer, including the workspace: ask selscan_workspace_size()
 * first, pass a block of at least that size aligned to SELSCAN_WORKSPACE_ALIGN bytes (NULL when
 * the size is 0). Every entry point validates all it reads and returns a status; on any error not
 * one output byte is written. Whatever a backend cannot do, it refuses with
 * SELSCAN_ERR_UNSUPPORTED. All indexing is 64-bit; there is no limit on N, L or dim beyond
 * memory. Outputs must not overlap each other, any input or the workspace (checked on the byte
 * range each tensor spans; SELSCAN_ERR_ALIAS).
 *
 * ---------------------------------------------------------------------------------------------
 * LICENSE: MIT. Copyright (c) 2026 the selscan authors.
 *
 * Permission is hereby granted, free of charge, to any person obtaining a copy of this software
 * and associated documentation files (the "Software"), to deal in the Software without
 * restriction, including without limitation the rights to use, copy, modify, merge, publish,
 * distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the
 * Software is furnished to do so, subject to the following conditions: The above copyright
 * notice and this permission notice shall be included in all copies or substantial portions of
 * the Software. THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
 * IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A
 * PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE
 * LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR
 * OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER
 * DEALINGS IN THE SOFTWARE.
 */
#ifndef SELSCAN_H
#define SELSCAN_H

#include <stddef.h>
#include <stdint.h>

#define SELSCAN_VERSION_MAJOR 0
#define SELSCAN_VERSION_MINOR 1
#define SELSCAN_VERSION_PATCH 0
#define SELSCAN_VERSION (SELSCAN_VERSION_MAJOR * 10000 + SELSCAN_VERSION_MINOR * 100 + SELSCAN_VERSION_PATCH)

#ifndef SELSCAN_DEF
#ifdef SELSCAN_STATIC
#define SELSCAN_DEF static
#else
#define SELSCAN_DEF extern
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ============================================================================================= */
/*                                          API                                                  */
/* ============================================================================================= */

/* Status codes: one list, expanded into the enum and into selscan_status_string(). */
#define SELSCAN__STATUS_LIST(X)                                                                   \
    X(SELSCAN_OK, "ok")                                                                           \
    X(SELSCAN_ERR_NULL, "a required pointer is NULL (or an optional operand a request needs)")    \
    X(SELSCAN_ERR_SHAPE, "invalid size, group count, sequence offsets or index")                  \
    X(SELSCAN_ERR_STRIDE, "invalid stride: negative, overflowing, or output elements overlap")    \
    X(SELSCAN_ERR_DTYPE, "invalid dtype")                                                         \
    X(SELSCAN_ERR_ALIAS, "an output overlaps an input, another output or the workspace")          \
    X(SELSCAN_ERR_WORKSPACE, "workspace missing, too small or misaligned")                        \
    X(SELSCAN_ERR_UNSUPPORTED, "not supported by this backend")                                   \
    X(SELSCAN_ERR_CUDA, "a CUDA call failed")

#define SELSCAN__STATUS_ENUM(name, text) name,
typedef enum selscan_status { SELSCAN__STATUS_LIST(SELSCAN__STATUS_ENUM) SELSCAN__STATUS_COUNT } selscan_status;
#undef SELSCAN__STATUS_ENUM

typedef enum selscan_dtype { SELSCAN_F32 = 0, SELSCAN_F16, SELSCAN_BF16 } selscan_dtype;

/* Problem flags. */
#define SELSCAN_DELTA_SOFTPLUS 1u /* dt = softplus(delta + delta_bias) */
#define SELSCAN_FIXED_B 2u        /* B is (dim, N) f32, constant over time */
#define SELSCAN_FIXED_C 4u        /* C is (dim, N) f32, constant over time */
#define SELSCAN__KNOWN_FLAGS (SELSCAN_DELTA_SOFTPLUS | SELSCAN_FIXED_B | SELSCAN_FIXED_C)

/* The workspace must be aligned to this many bytes (malloc may not be enough: use
   aligned_alloc / posix_memalign on the CPU; cudaMalloc is aligned to 256). */
#define SELSCAN_WORKSPACE_ALIGN 64

/* A tensor: data pointer plus element strides per logical dimension (see OPERANDS above).
   data NULL: the optional operand is absent. All strides 0: contiguous in the listed order. */
typedef struct selscan_tensor {
    void *data;
    int64_t stride[4];
} selscan_tensor;

typedef struct selscan_problem {
    int64_t batch, dim, seqlen, dstate, n_groups; /* n_groups 0 means 1 */
    selscan_dtype dtype;                          /* T */
    unsigned flags;                               /* SELSCAN_DELTA_SOFTPLUS | SELSCAN_FIXED_B | ... */
    const int64_t *cu_seqlens;                    /* optional packed sequences: n_seqs + 1 offsets */
    int64_t n_seqs;                               /* 0 unless cu_seqlens is given */
    selscan_tensor u, delta, A, B, C, D, z, delta_bias, h0; /* inputs */
    selscan_tensor y, h_last;                               /* outputs (h_last optional) */
} selscan_problem;

typedef struct selscan_grads {
    selscan_tensor dy, dh_last;                                      /* incoming (dh_last optional) */
    selscan_tensor du, ddelta, dA, dB, dC, dD, dz, ddelta_bias, dh0; /* outgoing, each optional */
} selscan_grads;

/* One decode step for a batch of cached states.
     state       (n_cache, dim, N) f32, read and written in place; n_cache 0 means batch
     x, dt, z, y (batch, dim) T; z optional
     B, C        (batch, n_groups, N) T, or (dim, N) f32 with SELSCAN_FIXED_B / SELSCAN_FIXED_C
     A (dim, N), D and delta_bias (dim): f32
     state_index optional, batch int32 values: the state row of each batch row (row i when NULL);
                 a negative value marks padding: y is 0 for that row and no state is touched.
                 On the CPU the indices are validated (< n_cache, no row used twice:
                 SELSCAN_ERR_SHAPE / SELSCAN_ERR_ALIAS). On CUDA they live in device memory and
                 cannot be read by the host: rows >= n_cache are treated as padding there. */
typedef struct selscan_step_problem {
    int64_t batch, dim, dstate, n_groups, n_cache;
    selscan_dtype dtype;
    unsigned flags;
    const int32_t *state_index;
    selscan_tensor state;
    selscan_tensor x, dt, A, B, C, D, z, delta_bias; /* inputs */
    selscan_tensor y;                                /* output */
} selscan_step_problem;

SELSCAN_DEF const char *selscan_status_string(selscan_status s);
SELSCAN_DEF selscan_status selscan_validate(const selscan_problem *p);
SELSCAN_DEF selscan_status selscan_validate_grads(const selscan_problem *p, const selscan_grads *g);
SELSCAN_DEF selscan_status selscan_validate_step(const selscan_step_problem *s);
/* Workspace bytes for the CPU entry points; g NULL: forward. */
SELSCAN_DEF selscan_status selscan_workspace_size(const selscan_problem *p, const selscan_grads *g, size_t *bytes);
SELSCAN_DEF selscan_status selscan_forward_cpu(const selscan_problem *p, void *workspace, size_t workspace_bytes);
SELSCAN_DEF selscan_status selscan_backward_cpu(const selscan_problem *p, const selscan_grads *g, void *workspace, size_t workspace_bytes);
SELSCAN_DEF selscan_status selscan_step_cpu(const selscan_step_problem *s);

/* The scalar reference: the exact, simple implementation every fast path is checked against.
   Same contract and workspace as the entry points above. */
SELSCAN_DEF selscan_status selscan_forward_ref(const selscan_problem *p, void *workspace, size_t workspace_bytes);
SELSCAN_DEF selscan_status selscan_backward_ref(const selscan_problem *p, const selscan_grads *g, void *workspace, size_t workspace_bytes);
SELSCAN_DEF selscan_status selscan_step_ref(const selscan_step_problem *s);

/* dtype conversions used by the library (round to nearest even, NaN stays NaN). */
SELSCAN_DEF float selscan_f16_to_f32(uint16_t h);
SELSCAN_DEF uint16_t selscan_f32_to_f16(float f);
SELSCAN_DEF float selscan_bf16_to_f32(uint16_t h);
SELSCAN_DEF uint16_t selscan_f32_to_bf16(float f);

#ifdef __cplusplus
}
#endif
#endif /* SELSCAN_H */

/* ============================================================================================= */
/*                                     IMPLEMENTATION                                            */
/* ============================================================================================= */
#ifdef SELSCAN_IMPLEMENTATION
#ifndef SELSCAN__IMPLEMENTED
#define SELSCAN__IMPLEMENTED

#include <math.h>
#include <string.h>

#ifdef __cplusplus
#define SELSCAN__CAST(T, x) static_cast<T>(x)
#define SELSCAN__RCAST(T, x) reinterpret_cast<T>(x)
#else
#define SELSCAN__CAST(T, x) ((T)(x))
#define SELSCAN__RCAST(T, x) ((T)(x))
#endif

/* Backward checkpoint interval (steps): the backward keeps one state per chunk and recomputes
   the states inside a chunk, so its memory is O(N * L / SELSCAN__CHUNK) per channel in flight. */
#define SELSCAN__CHUNK 64
#define SELSCAN__SOFTPLUS_THRESHOLD 20.0f

SELSCAN_DEF const char *selscan_status_string(selscan_status s) {
#define SELSCAN__STATUS_TEXT(name, text) text,
    static const char *const texts[] = {SELSCAN__STATUS_LIST(SELSCAN__STATUS_TEXT)};
#undef SELSCAN__STATUS_TEXT
    if (SELSCAN__CAST(int, s) < 0 || SELSCAN__CAST(int, s) >= SELSCAN__CAST(int, SELSCAN__STATUS_COUNT)) return "unknown status";
    return texts[s];
}

/* --------------------------------------------------------------------------------------------- */
/*                                   dtype conversion                                            */
/* --------------------------------------------------------------------------------------------- */

static uint32_t selscan__f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float selscan__bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

SELSCAN_DEF float selscan_bf16_to_f32(uint16_t h) { return selscan__bits_f32(SELSCAN__CAST(uint32_t, h) << 16); }

SELSCAN_DEF uint16_t selscan_f32_to_bf16(float f) {
    uint32_t x = selscan__f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return SELSCAN__CAST(uint16_t, (x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return SELSCAN__CAST(uint16_t, x >> 16);
}

SELSCAN_DEF float selscan_f16_to_f32(uint16_t h) {
    uint32_t sign = SELSCAN__CAST(uint32_t, h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) { /* zero or subnormal: m * 2^-24, exact in f32 */
        float v = SELSCAN__CAST(float, m) * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (e == 31) return selscan__bits_f32(sign | 0x7f800000u | (m << 13));
    return selscan__bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

SELSCAN_DEF uint16_t selscan_f32_to_f16(float f) {
    uint32_t x = selscan__f32_bits(f), sign = (x >> 16) & 0x8000u, r;
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) return SELSCAN__CAST(uint16_t, sign | 0x7e00u | ((x >> 13) & 0x3ffu)); /* NaN */
    if (x >= 0x477ff000u) return SELSCAN__CAST(uint16_t, sign | 0x7c00u); /* >= 65520 and inf: inf */
    if (x < 0x38800000u) {                                              /* below 2^-14: subnormal */
        uint32_t e = x >> 23, m = (x & 0x7fffffu) | 0x800000u, shift, rem, half;
        if (x < 0x33000000u) return SELSCAN__CAST(uint16_t, sign); /* <= 2^-25 rounds to 0 */
        shift = 126u - e;                                          /* 14..24 */
        rem = m & ((1u << shift) - 1u);
        half = 1u << (shift - 1u);
        r = m >> shift;
        if (rem > half || (rem == half && (r & 1u))) r++;
        return SELSCAN__CAST(uint16_t, sign | r);
    }
    r = (x >> 13) - (112u << 10);
    if ((x & 0x1fffu) > 0x1000u || ((x & 0x1fffu) == 0x1000u && (r & 1u))) r++;
    return SELSCAN__CAST(uint16_t, sign | r);
}

static size_t selscan__dtype_size(selscan_dtype t) { return t == SELSCAN_F32 ? 4u : 2u; }

static float selscan__load(const void *base, int64_t off, selscan_dtype t) {
    if (t == SELSCAN_F32) return SELSCAN__CAST(const float *, base)[off];
    if (t == SELSCAN_F16) return selscan_f16_to_f32(SELSCAN__CAST(const uint16_t *, base)[off]);
    return selscan_bf16_to_f32(SELSCAN__CAST(const uint16_t *, base)[off]);
}

static void selscan__store(void *base, int64_t off, selscan_dtype t, float v) {
    if (t == SELSCAN_F32) SELSCAN__CAST(float *, base)[off] = v;
    else if (t == SELSCAN_F16) SELSCAN__CAST(uint16_t *, base)[off] = selscan_f32_to_f16(v);
    else SELSCAN__CAST(uint16_t *, base)[off] = selscan_f32_to_bf16(v);
}

/* --------------------------------------------------------------------------------------------- */
/*                                      validation                                               */
/* --------------------------------------------------------------------------------------------- */

/* A tensor with its strides resolved (defaults filled in) and its shape and dtype attached. */
typedef struct selscan__ten {
    void *data;
    int64_t s[4];     /* element strides */
    int64_t n[4];     /* logical sizes */
    int nd;           /* number of dimensions */
    selscan_dtype dt; /* element type */
} selscan__ten;

/* Everything an implementation needs, validated: sizes, flags and resolved tensors. */
typedef struct selscan__prob {
    int64_t batch, dim, L, N, G, dpg, rows; /* dpg: channels per group; rows: state rows */
    selscan_dtype dt;
    int softplus, fixB, fixC;
    const int64_t *cu;
    int64_t nseq;
    selscan__ten u, delta, A, B, C, D, z, bias, h0, y, hlast;
} selscan__prob;

typedef struct selscan__grd {
    selscan__ten dy, dhlast, du, ddelta, dA, dB, dC, dD, dz, dbias, dh0;
} selscan__grd;

/* a * b into *out; 0 on overflow (all operands non-negative). */
static int selscan__mul(int64_t a, int64_t b, int64_t *out) {
    if (a != 0 && b > INT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}

static int selscan__count_ok(int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t x;
    return selscan__mul(a, b, &x) && selscan__mul(x, c, &x) && selscan__mul(x, d, &x) &&
           x <= INT64_MAX / 16;
}

/* Resolve strides: all zero means contiguous (row-major in the listed order). */
static void selscan__resolve(selscan__ten *r, const selscan_tensor *t, int nd, int64_t n0, int64_t n1,
                             int64_t n2, int64_t n3, selscan_dtype dt) {
    int i, allzero = 1;
    r->data = t->data;
    r->nd = nd;
    r->dt = dt;
    r->n[0] = n0; r->n[1] = n1; r->n[2] = n2; r->n[3] = n3;
    for (i = nd; i < 4; i++) r->n[i] = 1;
    for (i = 0; i < nd; i++) if (t->stride[i] != 0) allzero = 0;
    if (allzero) {
        int64_t acc = 1;
        for (i = nd - 1; i >= 0; i--) { r->s[i] = acc; acc *= r->n[i]; }
    } else {
        for (i = 0; i < nd; i++) r->s[i] = t->stride[i];
    }
    for (i = nd; i < 4; i++) r->s[i] = 0;
}

/* Byte span [lo, hi) of a tensor; 0 if a stride is negative or the span overflows. */
static int selscan__span(const selscan__ten *t, int64_t *bytes) {
    int64_t last = 0, x;
    int i;
    for (i = 0; i < t->nd; i++) {
        if (t->s[i] < 0) return 0;
        if (!selscan__mul(t->n[i] - 1, t->s[i], &x) || x > INT64_MAX / 16 - last) return 0;
        last += x;
    }
    if (!selscan__mul(last + 1, SELSCAN__CAST(int64_t, selscan__dtype_size(t->dt)), bytes)) return 0;
    return 1;
}

/* Strides of a present tensor: non-negative, no overflow; for an output, no two elements at
   one address (sort the dimensions by stride; each must step past the span of the smaller). */
static selscan_status selscan__check_strides(const selscan__ten *t, int is_output) {
    int64_t bytes, s[4], n[4];
    int i, j, k = 0;
    if (!t->data) return SELSCAN_OK;
    if (!selscan__span(t, &bytes)) return SELSCAN_ERR_STRIDE;
    if (!is_output) return SELSCAN_OK;
    for (i = 0; i < t->nd; i++) {
        if (t->n[i] <= 1) continue;
        for (j = k; j > 0 && s[j - 1] > t->s[i]; j--) { s[j] = s[j - 1]; n[j] = n[j - 1]; }
        s[j] = t->s[i]; n[j] = t->n[i]; k++;
    }
    {
        int64_t span = 1; /* elements covered by the dimensions so far */
        for (i = 0; i < k; i++) {
            if (s[i] < span) return SELSCAN_ERR_STRIDE;
            span = s[i] * (n[i] - 1) + span;
        }
    }
    return SELSCAN_OK;
}

static int selscan__overlap(const void *a, int64_t abytes, const void *b, int64_t bbytes) {
    uintptr_t pa = SELSCAN__RCAST(uintptr_t, a), pb = SELSCAN__RCAST(uintptr_t, b);
    if (!a || !b || abytes == 0 || bbytes == 0) return 0;
    return pa < pb + SELSCAN__CAST(uintptr_t, bbytes) && pb < pa + SELSCAN__CAST(uintptr_t, abytes);
}

static int64_t selscan__bytes(const selscan__ten *t) {
    int64_t b = 0;
    if (t->data) selscan__span(t, &b);
    return b;
}

/* Every output against every other output and every input; the workspace against all. */
static selscan_status selscan__check_alias(const selscan__ten *const *outs, int nout, const selscan__ten *const *ins,
                                           int nin, const void *extra, int64_t extra_bytes, const void *ws,
                                           int64_t ws_bytes) {
    int i, j;
    for (i = 0; i < nout; i++) {
        int64_t bi = selscan__bytes(outs[i]);
        if (!outs[i]->data) continue;
        for (j = i + 1; j < nout; j++)
            if (selscan__overlap(outs[i]->data, bi, outs[j]->data, selscan__bytes(outs[j]))) return SELSCAN_ERR_ALIAS;
        for (j = 0; j < nin; j++)
            if (selscan__overlap(outs[i]->data, bi, ins[j]->data, selscan__bytes(ins[j]))) return SELSCAN_ERR_ALIAS;
        if (selscan__overlap(outs[i]->data, bi, extra, extra_bytes)) return SELSCAN_ERR_ALIAS;
        if (selscan__overlap(outs[i]->data, bi, ws, ws_bytes)) return SELSCAN_ERR_ALIAS;
    }
    for (j = 0; j < nin; j++)
        if (selscan__overlap(ws, ws_bytes, ins[j]->data, selscan__bytes(ins[j]))) return SELSCAN_ERR_ALIAS;
    if (selscan__overlap(ws, ws_bytes, extra, extra_bytes)) return SELSCAN_ERR_ALIAS;
    return SELSCAN_OK;
}

static int selscan__dtype_ok(selscan_dtype t) {
    return SELSCAN__CAST(int, t) >= 0 && SELSCAN__CAST(int, t) <= SELSCAN__CAST(int, SELSCAN_BF16);
}

/* Sizes, flags, pointers, sequence offsets and strides of a problem (not aliasing, which needs
   the outputs of the pass). need_y: the forward's y is required. */
static selscan_status selscan__check_problem(const selscan_problem *p, selscan__prob *q, int need_y) {
    int64_t G, i;
    selscan_status st;
    if (!p) return SELSCAN_ERR_NULL;
    if (!selscan__dtype_ok(p->dtype)) return SELSCAN_ERR_DTYPE;
    if (p->flags & ~SELSCAN__KNOWN_FLAGS) return SELSCAN_ERR_UNSUPPORTED;
    G = p->n_groups == 0 ? 1 : p->n_groups;
    if (p->batch <= 0 || p->dim <= 0 || p->seqlen <= 0 || p->dstate <= 0 || G <= 0 || p->dim % G != 0)
        return SELSCAN_ERR_SHAPE;
    if (!p->u.data || !p->delta.data || !p->A.data || !p->B.data || !p->C.data || (need_y && !p->y.data))
        return SELSCAN_ERR_NULL;
    if (p->cu_seqlens) {
        /* the row count is checked before cu_seqlens[n_seqs] is read (its index must exist) */
        if (p->batch != 1 || p->n_seqs <= 0 || !selscan__count_ok(p->n_seqs, p->dim, p->dstate, 1) ||
            p->cu_seqlens[0] != 0 || p->cu_seqlens[p->n_seqs] != p->seqlen)
            return SELSCAN_ERR_SHAPE;
        for (i = 0; i < p->n_seqs; i++)
            if (p->cu_seqlens[i + 1] < p->cu_seqlens[i]) return SELSCAN_ERR_SHAPE;
    } else if (p->n_seqs != 0) {
        return SELSCAN_ERR_NULL; /* n_seqs without the offsets */
    }
    q->batch = p->batch; q->dim = p->dim; q->L = p->seqlen; q->N = p->dstate; q->G = G; q->dpg = p->dim / G;
    q->rows = p->cu_seqlens ? p->n_seqs : p->batch;
    q->dt = p->dtype;
    q->softplus = (p->flags & SELSCAN_DELTA_SOFTPLUS) != 0;
    q->fixB = (p->flags & SELSCAN_FIXED_B) != 0;
    q->fixC = (p->flags & SELSCAN_FIXED_C) != 0;
    q->cu = p->cu_seqlens; q->nseq = p->n_seqs;
    if (!selscan__count_ok(q->batch, q->dim, q->L, 1) || !selscan__count_ok(q->batch, q->G, q->N, q->L) ||
        !selscan__count_ok(q->rows, q->dim, q->N, 1))
        return SELSCAN_ERR_SHAPE;
    selscan__resolve(&q->u, &p->u, 3, q->batch, q->dim, q->L, 1, q->dt);
    selscan__resolve(&q->delta, &p->delta, 3, q->batch, q->dim, q->L, 1, q->dt);
    selscan__resolve(&q->z, &p->z, 3, q->batch, q->dim, q->L, 1, q->dt);
    selscan__resolve(&q->y, &p->y, 3, q->batch, q->dim, q->L, 1, q->dt);
    selscan__resolve(&q->A, &p->A, 2, q->dim, q->N, 1, 1, SELSCAN_F32);
    if (q->fixB) selscan__resolve(&q->B, &p->B, 2, q->dim, q->N, 1, 1, SELSCAN_F32);
    else selscan__resolve(&q->B, &p->B, 4, q->batch, q->G, q->N, q->L, q->dt);
    if (q->fixC) selscan__resolve(&q->C, &p->C, 2, q->dim, q->N, 1, 1, SELSCAN_F32);
    else selscan__resolve(&q->C, &p->C, 4, q->batch, q->G, q->N, q->L, q->dt);
    selscan__resolve(&q->D, &p->D, 1, q->dim, 1, 1, 1, SELSCAN_F32);
    selscan__resolve(&q->bias, &p->delta_bias, 1, q->dim, 1, 1, 1, SELSCAN_F32);
    selscan__resolve(&q->h0, &p->h0, 3, q->rows, q->dim, q->N, 1, SELSCAN_F32);
    selscan__resolve(&q->hlast, &p->h_last, 3, q->rows, q->dim, q->N, 1, SELSCAN_F32);
    {
        const selscan__ten *ins[] = {&q->u, &q->delta, &q->A, &q->B, &q->C, &q->D, &q->z, &q->bias, &q->h0};
        for (i = 0; i < SELSCAN__CAST(int64_t, sizeof ins / sizeof ins[0]); i++)
            if ((st = selscan__check_strides(ins[i], 0)) != SELSCAN_OK) return st;
    }
    return SELSCAN_OK;
}

static selscan_status selscan__check_grads(const selscan__prob *q, const selscan_grads *g, selscan__grd *r) {
    selscan_status st;
    int i;
    if (!g) return SELSCAN_ERR_NULL;
    if (!g->dy.data) return SELSCAN_ERR_NULL;
    if (g->dz.data && !q->z.data) return SELSCAN_ERR_NULL; /* dz of an absent z */
    selscan__resolve(&r->dy, &g->dy, 3, q->batch, q->dim, q->L, 1, q->dt);
    selscan__resolve(&r->dhlast, &g->dh_last, 3, q->rows, q->dim, q->N, 1, SELSCAN_F32);
    selscan__resolve(&r->du, &g->du, 3, q->batch, q->dim, q->L, 1, q->dt);
    selscan__resolve(&r->ddelta, &g->ddelta, 3, q->batch, q->dim, q->L, 1, q->dt);
    selscan__resolve(&r->dz, &g->dz, 3, q->batch, q->dim, q->L, 1, q->dt);
    selscan__resolve(&r->dA, &g->dA, 2, q->dim, q->N, 1, 1, SELSCAN_F32);
    if (q->fixB) selscan__resolve(&r->dB, &g->dB, 2, q->dim, q->N, 1, 1, SELSCAN_F32);
    else selscan__resolve(&r->dB, &g->dB, 4, q->batch, q->G, q->N, q->L, q->dt);
    if (q->fixC) selscan__resolve(&r->dC, &g->dC, 2, q->dim, q->N, 1, 1, SELSCAN_F32);
    else selscan__resolve(&r->dC, &g->dC, 4, q->batch, q->G, q->N, q->L, q->dt);
    selscan__resolve(&r->dD, &g->dD, 1, q->dim, 1, 1, 1, SELSCAN_F32);
    selscan__resolve(&r->dbias, &g->ddelta_bias, 1, q->dim, 1, 1, 1, SELSCAN_F32);
    selscan__resolve(&r->dh0, &g->dh0, 3, q->rows, q->dim, q->N, 1, SELSCAN_F32);
    if ((st = selscan__check_strides(&r->dy, 0)) != SELSCAN_OK) return st;
    if ((st = selscan__check_strides(&r->dhlast, 0)) != SELSCAN_OK) return st;
    {
        const selscan__ten *outs[] = {&r->du, &r->ddelta, &r->dA, &r->dB, &r->dC, &r->dD, &r->dz, &r->dbias, &r->dh0};
        for (i = 0; i < 9; i++)
            if ((st = selscan__check_strides(outs[i], 1)) != SELSCAN_OK) return st;
    }
    return SELSCAN_OK;
}

static int64_t selscan__align_up(int64_t x) {
    return (x + SELSCAN_WORKSPACE_ALIGN - 1) / SELSCAN_WORKSPACE_ALIGN * SELSCAN_WORKSPACE_ALIGN;
}

/* Workspace of the CPU entry points, in bytes (the fast path may need more than the reference;
   selscan_workspace_size() reports the larger). */
static int64_t selscan__ws_forward_ref(const selscan__prob *q) { return selscan__align_up(q->N * 4); }

static int64_t selscan__ws_backward_ref(const selscan__prob *q, const selscan__grd *r) {
    int64_t nck = (q->L + SELSCAN__CHUNK - 1) / SELSCAN__CHUNK + 1;
    int64_t floats = nck * q->N        /* chunk-boundary states */
                     + (SELSCAN__CHUNK + 1) * q->N /* the states inside one chunk */
                     + q->N;                      /* dh */
    if (r->dB.data && !q->fixB) floats += q->N * q->L; /* f32 accumulators of one (batch, group) */
    if (r->dC.data && !q->fixC) floats += q->N * q->L;
    return selscan__align_up(floats * 4);
}

static selscan_status selscan__check_ws(const void *ws, size_t bytes, int64_t need) {
    if (need <= 0) return SELSCAN_OK;
    if (!ws || bytes < SELSCAN__CAST(size_t, need)) return SELSCAN_ERR_WORKSPACE;
    if (SELSCAN__RCAST(uintptr_t, ws) % SELSCAN_WORKSPACE_ALIGN != 0) return SELSCAN_ERR_WORKSPACE;
    return SELSCAN_OK;
}

/* Full forward validation: problem, outputs' strides, aliasing, workspace. */
static selscan_status selscan__validate_forward(const selscan_problem *p, selscan__prob *q, const void *ws,
                                                size_t ws_bytes, int64_t ws_need) {
    selscan_status st = selscan__check_problem(p, q, 1);
    if (st != SELSCAN_OK) return st;
    if ((st = selscan__check_strides(&q->y, 1)) != SELSCAN_OK) return st;
    if ((st = selscan__check_strides(&q->hlast, 1)) != SELSCAN_OK) return st;
    if (ws_need >= 0 && (st = selscan__check_ws(ws, ws_bytes, ws_need)) != SELSCAN_OK) return st;
    {
        const selscan__ten *outs[] = {&q->y, &q->hlast};
        const selscan__ten *ins[] = {&q->u, &q->delta, &q->A, &q->B, &q->C, &q->D, &q->z, &q->bias, &q->h0};
        int64_t cub = q->cu ? (q->nseq + 1) * 8 : 0;
        return selscan__check_alias(outs, 2, ins, 9, q->cu, cub, ws_need > 0 ? ws : NULL,
                                    ws_need > 0 ? SELSCAN__CAST(int64_t, ws_bytes) : 0);
    }
}

static selscan_status selscan__validate_backward(const selscan_problem *p, const selscan_grads *g, selscan__prob *q,
                                                 selscan__grd *r, const void *ws, size_t ws_bytes, int ws_kind) {
    selscan_status st = selscan__check_problem(p, q, 0);
    int64_t need;
    if (st != SELSCAN_OK) return st;
    if ((st = selscan__check_grads(q, g, r)) != SELSCAN_OK) return st;
    need = ws_kind ? selscan__ws_backward_ref(q, r) : -1;
    if (need >= 0 && (st = selscan__check_ws(ws, ws_bytes, need)) != SELSCAN_OK) return st;
    {
        const selscan__ten *outs[] = {&r->du, &r->ddelta, &r->dA, &r->dB, &r->dC, &r->dD, &r->dz, &r->dbias, &r->dh0};
        const selscan__ten *ins[] = {&q->u, &q->delta, &q->A, &q->B, &q->C, &q->D, &q->z, &q->bias, &q->h0, &r->dy, &r->dhlast};
        int64_t cub = q->cu ? (q->nseq + 1) * 8 : 0;
        return selscan__check_alias(outs, 9, ins, 11, q->cu, cub, need > 0 ? ws : NULL,
                                    need > 0 ? SELSCAN__CAST(int64_t, ws_bytes) : 0);
    }
}

SELSCAN_DEF selscan_status selscan_validate(const selscan_problem *p) {
    selscan__prob q;
    return selscan__validate_forward(p, &q, NULL, 0, -1);
}

SELSCAN_DEF selscan_status selscan_validate_grads(const selscan_problem *p, const selscan_grads *g) {
    selscan__prob q;
    selscan__grd r;
    return selscan__validate_backward(p, g, &q, &r, NULL, 0, 0);
}

SELSCAN_DEF selscan_status selscan_workspace_size(const selscan_problem *p, const selscan_grads *g, size_t *bytes) {
    selscan__prob q;
    selscan__grd r;
    selscan_status st;
    if (!bytes) return SELSCAN_ERR_NULL;
    if (g) {
        if ((st = selscan__validate_backward(p, g, &q, &r, NULL, 0, 0)) != SELSCAN_OK) return st;
        *bytes = SELSCAN__CAST(size_t, selscan__ws_backward_ref(&q, &r));
    } else {
        if ((st = selscan__validate_forward(p, &q, NULL, 0, -1)) != SELSCAN_OK) return st;
        *bytes = SELSCAN__CAST(size_t, selscan__ws_forward_ref(&q));
    }
    return SELSCAN_OK;
}

/* --------------------------------------------------------------------------------------------- */
/*                                    scalar reference                                           */
/* --------------------------------------------------------------------------------------------- */

static float selscan__softplus(float x) { return x > SELSCAN__SOFTPLUS_THRESHOLD ? x : log1pf(expf(x)); }
static float selscan__sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

#define SELSCAN__AT1(t, i) ((i) * (t).s[0])
#define SELSCAN__AT2(t, i, j) ((i) * (t).s[0] + (j) * (t).s[1])
#define SELSCAN__AT3(t, i, j, k) ((i) * (t).s[0] + (j) * (t).s[1] + (k) * (t).s[2])
#define SELSCAN__AT4(t, i, j, k, l) ((i) * (t).s[0] + (j) * (t).s[1] + (k) * (t).s[2] + (l) * (t).s[3])

/* B (or C) at (b, d, n, t), variable or fixed. */
static float selscan__bc(const selscan__ten *t, int fixed, int64_t b, int64_t g, int64_t d, int64_t n, int64_t s) {
    if (fixed) return SELSCAN__CAST(const float *, t->data)[SELSCAN__AT2(*t, d, n)];
    return selscan__load(t->data, SELSCAN__AT4(*t, b, g, n, s), t->dt);
}

/* The segments (sequences) of batch row b: [t0, t1) and the state row they use. */
static int64_t selscan__nseg(const selscan__prob *q) { return q->cu ? q->nseq : 1; }
static void selscan__seg(const selscan__prob *q, int64_t b, int64_t k, int64_t *t0, int64_t *t1, int64_t *row) {
    if (q->cu) { *t0 = q->cu[k]; *t1 = q->cu[k + 1]; *row = k; }
    else { *t0 = 0; *t1 = q->L; *row = b; }
}

/* dt of one step, before (raw) and after the optional softplus. */
static float selscan__dt(const selscan__prob *q, int64_t b, int64_t d, int64_t t, float *raw) {
    float x = selscan__load(q->delta.data, SELSCAN__AT3(q->delta, b, d, t), q->dt);
    if (q->bias.data) x += SELSCAN__CAST(const float *, q->bias.data)[SELSCAN__AT1(q->bias, d)];
    if (raw) *raw = x;
    return q->softplus ? selscan__softplus(x) : x;
}

/* Initial state of a segment into h. */
static void selscan__init_state(const selscan__prob *q, int64_t row, int64_t d, float *h) {
    int64_t n;
    for (n = 0; n < q->N; n++)
        h[n] = q->h0.data ? SELSCAN__CAST(const float *, q->h0.data)[SELSCAN__AT3(q->h0, row, d, n)] : 0.0f;
}

/* One recurrence step of channel d: h <- exp(dt A) h + dt B u; returns sum_n C h. */
static float selscan__ref_step(const selscan__prob *q, int64_t b, int64_t g, int64_t d, int64_t t, float dt, float u,
                               float *h) {
    const float *A = SELSCAN__CAST(const float *, q->A.data);
    float acc = 0.0f;
    int64_t n;
    for (n = 0; n < q->N; n++) {
        float a = expf(dt * A[SELSCAN__AT2(q->A, d, n)]);
        h[n] = a * h[n] + dt * selscan__bc(&q->B, q->fixB, b, g, d, n, t) * u;
        acc += selscan__bc(&q->C, q->fixC, b, g, d, n, t) * h[n];
    }
    return acc;
}

static void selscan__ref_forward(const selscan__prob *q, float *h) {
    int64_t b, d, k, t, n;
    for (b = 0; b < q->batch; b++)
        for (d = 0; d < q->dim; d++) {
            const int64_t g = d / q->dpg;
            const float Dd = q->D.data ? SELSCAN__CAST(const float *, q->D.data)[SELSCAN__AT1(q->D, d)] : 0.0f;
            for (k = 0; k < selscan__nseg(q); k++) {
                int64_t t0, t1, row;
                selscan__seg(q, b, k, &t0, &t1, &row);
                selscan__init_state(q, row, d, h);
                for (t = t0; t < t1; t++) {
                    const float u = selscan__load(q->u.data, SELSCAN__AT3(q->u, b, d, t), q->dt);
                    const float dt = selscan__dt(q, b, d, t, NULL);
                    float y = selscan__ref_step(q, b, g, d, t, dt, u, h) + Dd * u;
                    if (q->z.data) {
                        const float z = selscan__load(q->z.data, SELSCAN__AT3(q->z, b, d, t), q->dt);
                        y *= z * selscan__sigmoid(z);
                    }
                    selscan__store(q->y.data, SELSCAN__AT3(q->y, b, d, t), q->dt, y);
                }
                if (q->hlast.data)
                    for (n = 0; n < q->N; n++)
                        SELSCAN__CAST(float *, q->hlast.data)[SELSCAN__AT3(q->hlast, row, d, n)] = h[n];
            }
        }
}

SELSCAN_DEF selscan_status selscan_forward_ref(const selscan_problem *p, void *workspace, size_t workspace_bytes) {
    selscan__prob q;
    selscan_status st = selscan__check_problem(p, &q, 1);
    if (st != SELSCAN_OK) return st;
    st = selscan__validate_forward(p, &q, workspace, workspace_bytes, selscan__ws_forward_ref(&q));
    if (st != SELSCAN_OK) return st;
    selscan__ref_forward(&q, SELSCAN__CAST(float *, workspace));
    return SELSCAN_OK;
}

/* Zero the gradients that are sums over batch, time or channels before accumulating. */
static void selscan__zero_sums(const selscan__prob *q, const selscan__grd *r) {
    int64_t d, n;
    for (d = 0; d < q->dim; d++) {
        if (r->dD.data) SELSCAN__CAST(float *, r->dD.data)[SELSCAN__AT1(r->dD, d)] = 0.0f;
        if (r->dbias.data) SELSCAN__CAST(float *, r->dbias.data)[SELSCAN__AT1(r->dbias, d)] = 0.0f;
        for (n = 0; n < q->N; n++) {
            if (r->dA.data) SELSCAN__CAST(float *, r->dA.data)[SELSCAN__AT2(r->dA, d, n)] = 0.0f;
            if (r->dB.data && q->fixB) SELSCAN__CAST(float *, r->dB.data)[SELSCAN__AT2(r->dB, d, n)] = 0.0f;
            if (r->dC.data && q->fixC) SELSCAN__CAST(float *, r->dC.data)[SELSCAN__AT2(r->dC, d, n)] = 0.0f;
        }
    }
}

/* Backward of one segment [t0, t1) of channel d in batch row b. Runs the recurrence forward
   once keeping a state every SELSCAN__CHUNK steps, then walks the chunks backward, recomputing
   the states inside each. dBacc / dCacc: f32 (N, L) accumulators for variable B / C. */
static void selscan__ref_backward_segment(const selscan__prob *q, const selscan__grd *r, int64_t b, int64_t d,
                                          int64_t t0, int64_t t1, int64_t row, float *ck, float *hs, float *dh,
                                          float *dBacc, float *dCacc) {
    const int64_t N = q->N, K = SELSCAN__CHUNK, g = d / q->dpg;
    const float *A = SELSCAN__CAST(const float *, q->A.data);
    const float Dd = q->D.data ? SELSCAN__CAST(const float *, q->D.data)[SELSCAN__AT1(q->D, d)] : 0.0f;
    float dD = 0.0f, dbias = 0.0f;
    int64_t t, n, c, nck = (t1 - t0 + K - 1) / K;

    /* Forward: ck[c] = state entering chunk c (ck[0] = h0). */
    selscan__init_state(q, row, d, ck);
    for (c = 0; c < nck; c++) {
        float *h = ck + (c + 1) * N;
        memcpy(h, ck + c * N, SELSCAN__CAST(size_t, N) * 4);
        if (c + 1 == nck) break; /* the last chunk's end state is not needed */
        for (t = t0 + c * K; t < t0 + (c + 1) * K; t++) {
            const float u = selscan__load(q->u.data, SELSCAN__AT3(q->u, b, d, t), q->dt);
            selscan__ref_step(q, b, g, d, t, selscan__dt(q, b, d, t, NULL), u, h);
        }
    }

    /* dh = dh_last (or 0), then the chunks backward. */
    for (n = 0; n < N; n++)
        dh[n] = r->dhlast.data ? SELSCAN__CAST(const float *, r->dhlast.data)[SELSCAN__AT3(r->dhlast, row, d, n)] : 0.0f;
    for (c = nck - 1; c >= 0; c--) {
        const int64_t c0 = t0 + c * K, c1 = c0 + K < t1 ? c0 + K : t1;
        /* hs[(i+1)*N ..] = state after step c0 + i; hs[0 ..] = state entering the chunk. */
        memcpy(hs, ck + c * N, SELSCAN__CAST(size_t, N) * 4);
        for (t = c0; t < c1; t++) {
            float *h = hs + (t - c0 + 1) * N;
            const float u = selscan__load(q->u.data, SELSCAN__AT3(q->u, b, d, t), q->dt);
            memcpy(h, h - N, SELSCAN__CAST(size_t, N) * 4);
            selscan__ref_step(q, b, g, d, t, selscan__dt(q, b, d, t, NULL), u, h);
        }
        for (t = c1 - 1; t >= c0; t--) {
            const float *h = hs + (t - c0 + 1) * N, *hp = h - N;
            const float u = selscan__load(q->u.data, SELSCAN__AT3(q->u, b, d, t), q->dt);
            float raw, dt = selscan__dt(q, b, d, t, &raw);
            float dyv = selscan__load(r->dy.data, SELSCAN__AT3(r->dy, b, d, t), q->dt);
            float ddt = 0.0f, du = 0.0f, dy0 = dyv;
            if (q->z.data) {
                const float z = selscan__load(q->z.data, SELSCAN__AT3(q->z, b, d, t), q->dt);
                const float sg = selscan__sigmoid(z);
                dy0 = dyv * z * sg;
                if (r->dz.data) {
                    float y0 = Dd * u;
                    for (n = 0; n < N; n++) y0 += selscan__bc(&q->C, q->fixC, b, g, d, n, t) * h[n];
                    selscan__store(r->dz.data, SELSCAN__AT3(r->dz, b, d, t), q->dt,
                                   dyv * y0 * sg * (1.0f + z * (1.0f - sg)));
                }
            }
            dD += dy0 * u;
            du = dy0 * Dd;
            for (n = 0; n < N; n++) {
                const float Cv = selscan__bc(&q->C, q->fixC, b, g, d, n, t);
                const float Bv = selscan__bc(&q->B, q->fixB, b, g, d, n, t);
                const float An = A[SELSCAN__AT2(q->A, d, n)];
                const float a = expf(dt * An);
                float dhn, da;
                if (r->dC.data) {
                    if (q->fixC) SELSCAN__CAST(float *, r->dC.data)[SELSCAN__AT2(r->dC, d, n)] += dy0 * h[n];
                    else dCacc[n * q->L + t] += dy0 * h[n];
                }
                dhn = dh[n] + dy0 * Cv; /* gradient of the state after step t */
                da = dhn * hp[n];       /* of exp(dt A) */
                ddt += da * a * An + dhn * Bv * u;
                du += dhn * dt * Bv;
                if (r->dA.data) SELSCAN__CAST(float *, r->dA.data)[SELSCAN__AT2(r->dA, d, n)] += da * a * dt;
                if (r->dB.data) {
                    if (q->fixB) SELSCAN__CAST(float *, r->dB.data)[SELSCAN__AT2(r->dB, d, n)] += dhn * dt * u;
                    else dBacc[n * q->L + t] += dhn * dt * u;
                }
                dh[n] = dhn * a; /* gradient of the state before step t */
            }
            if (q->softplus && raw <= SELSCAN__SOFTPLUS_THRESHOLD) ddt *= selscan__sigmoid(raw);
            dbias += ddt;
            if (r->du.data) selscan__store(r->du.data, SELSCAN__AT3(r->du, b, d, t), q->dt, du);
            if (r->ddelta.data) selscan__store(r->ddelta.data, SELSCAN__AT3(r->ddelta, b, d, t), q->dt, ddt);
        }
    }
    if (r->dh0.data)
        for (n = 0; n < N; n++) SELSCAN__CAST(float *, r->dh0.data)[SELSCAN__AT3(r->dh0, row, d, n)] = dh[n];
    if (r->dD.data) SELSCAN__CAST(float *, r->dD.data)[SELSCAN__AT1(r->dD, d)] += dD;
    if (r->dbias.data) SELSCAN__CAST(float *, r->dbias.data)[SELSCAN__AT1(r->dbias, d)] += dbias;
}

static void selscan__ref_backward(const selscan__prob *q, const selscan__grd *r, float *ws) {
    const int64_t N = q->N, nck = (q->L + SELSCAN__CHUNK - 1) / SELSCAN__CHUNK + 1;
    float *ck = ws, *hs = ck + nck * N, *dh = hs + (SELSCAN__CHUNK + 1) * N, *acc = dh + N;
    float *dBacc = NULL, *dCacc = NULL;
    int64_t b, g, d, k, n, t;
    if (r->dB.data && !q->fixB) { dBacc = acc; acc += N * q->L; }
    if (r->dC.data && !q->fixC) { dCacc = acc; }
    selscan__zero_sums(q, r);
    for (b = 0; b < q->batch; b++)
        for (g = 0; g < q->G; g++) {
            if (dBacc) memset(dBacc, 0, SELSCAN__CAST(size_t, N * q->L) * 4);
            if (dCacc) memset(dCacc, 0, SELSCAN__CAST(size_t, N * q->L) * 4);
            for (d = g * q->dpg; d < (g + 1) * q->dpg; d++)
                for (k = 0; k < selscan__nseg(q); k++) {
                    int64_t t0, t1, row;
                    selscan__seg(q, b, k, &t0, &t1, &row);
                    selscan__ref_backward_segment(q, r, b, d, t0, t1, row, ck, hs, dh, dBacc, dCacc);
                }
            for (n = 0; n < N; n++)
                for (t = 0; t < q->L; t++) {
                    if (dBacc) selscan__store(r->dB.data, SELSCAN__AT4(r->dB, b, g, n, t), q->dt, dBacc[n * q->L + t]);
                    if (dCacc) selscan__store(r->dC.data, SELSCAN__AT4(r->dC, b, g, n, t), q->dt, dCacc[n * q->L + t]);
                }
        }
}

SELSCAN_DEF selscan_status selscan_backward_ref(const selscan_problem *p, const selscan_grads *g, void *workspace,
                                                size_t workspace_bytes) {
    selscan__prob q;
    selscan__grd r;
    selscan_status st = selscan__validate_backward(p, g, &q, &r, workspace, workspace_bytes, 1);
    if (st != SELSCAN_OK) return st;
    selscan__ref_backward(&q, &r, SELSCAN__CAST(float *, workspace));
    return SELSCAN_OK;
}

/* --------------------------------------------------------------------------------------------- */
/*                                        step                                                   */
/* --------------------------------------------------------------------------------------------- */

typedef struct selscan__stp {
    int64_t batch, dim, N, G, dpg, ncache;
    selscan_dtype dt;
    int softplus, fixB, fixC;
    const int32_t *idx;
    selscan__ten state, x, dt_, A, B, C, D, z, bias, y;
} selscan__stp;

/* idx_on_host: state_index is host memory and is checked here (CPU); 0 for a device pointer
   (CUDA), which is never dereferenced (rows outside [0, n_cache) are padding there). */
static selscan_status selscan__validate_step_ex(const selscan_step_problem *s, selscan__stp *q, int idx_on_host) {
    int64_t G, i, j;
    selscan_status st;
    if (!s) return SELSCAN_ERR_NULL;
    if (!selscan__dtype_ok(s->dtype)) return SELSCAN_ERR_DTYPE;
    if (s->flags & ~SELSCAN__KNOWN_FLAGS) return SELSCAN_ERR_UNSUPPORTED;
    G = s->n_groups == 0 ? 1 : s->n_groups;
    q->ncache = s->n_cache == 0 ? s->batch : s->n_cache;
    if (s->batch <= 0 || s->dim <= 0 || s->dstate <= 0 || G <= 0 || s->dim % G != 0 || q->ncache <= 0 ||
        (!s->state_index && q->ncache != s->batch))
        return SELSCAN_ERR_SHAPE;
    if (!s->state.data || !s->x.data || !s->dt.data || !s->A.data || !s->B.data || !s->C.data || !s->y.data)
        return SELSCAN_ERR_NULL;
    q->batch = s->batch; q->dim = s->dim; q->N = s->dstate; q->G = G; q->dpg = s->dim / G;
    q->dt = s->dtype;
    q->softplus = (s->flags & SELSCAN_DELTA_SOFTPLUS) != 0;
    q->fixB = (s->flags & SELSCAN_FIXED_B) != 0;
    q->fixC = (s->flags & SELSCAN_FIXED_C) != 0;
    q->idx = s->state_index;
    if (!selscan__count_ok(q->ncache, q->dim, q->N, 1) || !selscan__count_ok(q->batch, q->dim, 1, 1) ||
        !selscan__count_ok(q->batch, q->G, q->N, 1))
        return SELSCAN_ERR_SHAPE;
    if (q->idx && idx_on_host) {
        for (i = 0; i < q->batch; i++)
            if (q->idx[i] >= q->ncache) return SELSCAN_ERR_SHAPE;
        for (i = 0; i < q->batch; i++)
            for (j = i + 1; j < q->batch && q->idx[i] >= 0; j++)
                if (q->idx[j] == q->idx[i]) return SELSCAN_ERR_ALIAS;
    }
    selscan__resolve(&q->state, &s->state, 3, q->ncache, q->dim, q->N, 1, SELSCAN_F32);
    selscan__resolve(&q->x, &s->x, 2, q->batch, q->dim, 1, 1, q->dt);
    selscan__resolve(&q->dt_, &s->dt, 2, q->batch, q->dim, 1, 1, q->dt);
    selscan__resolve(&q->z, &s->z, 2, q->batch, q->dim, 1, 1, q->dt);
    selscan__resolve(&q->y, &s->y, 2, q->batch, q->dim, 1, 1, q->dt);
    selscan__resolve(&q->A, &s->A, 2, q->dim, q->N, 1, 1, SELSCAN_F32);
    if (q->fixB) selscan__resolve(&q->B, &s->B, 2, q->dim, q->N, 1, 1, SELSCAN_F32);
    else selscan__resolve(&q->B, &s->B, 3, q->batch, q->G, q->N, 1, q->dt);
    if (q->fixC) selscan__resolve(&q->C, &s->C, 2, q->dim, q->N, 1, 1, SELSCAN_F32);
    else selscan__resolve(&q->C, &s->C, 3, q->batch, q->G, q->N, 1, q->dt);
    selscan__resolve(&q->D, &s->D, 1, q->dim, 1, 1, 1, SELSCAN_F32);
    selscan__resolve(&q->bias, &s->delta_bias, 1, q->dim, 1, 1, 1, SELSCAN_F32);
    {
        const selscan__ten *ins[] = {&q->x, &q->dt_, &q->A, &q->B, &q->C, &q->D, &q->z, &q->bias};
        const selscan__ten *outs[] = {&q->state, &q->y};
        for (i = 0; i < 8; i++)
            if ((st = selscan__check_strides(ins[i], 0)) != SELSCAN_OK) return st;
        for (i = 0; i < 2; i++)
            if ((st = selscan__check_strides(outs[i], 1)) != SELSCAN_OK) return st;
        return selscan__check_alias(outs, 2, ins, 8, q->idx, q->idx ? q->batch * 4 : 0, NULL, 0);
    }
}

static selscan_status selscan__validate_step(const selscan_step_problem *s, selscan__stp *q) {
    return selscan__validate_step_ex(s, q, 1);
}

SELSCAN_DEF selscan_status selscan_validate_step(const selscan_step_problem *s) {
    selscan__stp q;
    return selscan__validate_step(s, &q);
}

static void selscan__ref_step_all(const selscan__stp *q) {
    const float *A = SELSCAN__CAST(const float *, q->A.data);
    int64_t b, d, n;
    for (b = 0; b < q->batch; b++) {
        const int64_t row = q->idx ? q->idx[b] : b;
        for (d = 0; d < q->dim; d++) {
            const int64_t g = d / q->dpg;
            float *h = SELSCAN__CAST(float *, q->state.data);
            float x, dt, y = 0.0f;
            if (row < 0) { selscan__store(q->y.data, SELSCAN__AT2(q->y, b, d), q->dt, 0.0f); continue; }
            x = selscan__load(q->x.data, SELSCAN__AT2(q->x, b, d), q->dt);
            dt = selscan__load(q->dt_.data, SELSCAN__AT2(q->dt_, b, d), q->dt);
            if (q->bias.data) dt += SELSCAN__CAST(const float *, q->bias.data)[SELSCAN__AT1(q->bias, d)];
            if (q->softplus) dt = selscan__softplus(dt);
            for (n = 0; n < q->N; n++) {
                const float Bv = q->fixB ? SELSCAN__CAST(const float *, q->B.data)[SELSCAN__AT2(q->B, d, n)]
                                         : selscan__load(q->B.data, SELSCAN__AT3(q->B, b, g, n), q->dt);
                const float Cv = q->fixC ? SELSCAN__CAST(const float *, q->C.data)[SELSCAN__AT2(q->C, d, n)]
                                         : selscan__load(q->C.data, SELSCAN__AT3(q->C, b, g, n), q->dt);
                float *hn = h + SELSCAN__AT3(q->state, row, d, n);
                *hn = expf(dt * A[SELSCAN__AT2(q->A, d, n)]) * *hn + dt * Bv * x;
                y += Cv * *hn;
            }
            if (q->D.data) y += SELSCAN__CAST(const float *, q->D.data)[SELSCAN__AT1(q->D, d)] * x;
            if (q->z.data) {
                const float z = selscan__load(q->z.data, SELSCAN__AT2(q->z, b, d), q->dt);
                y *= z * selscan__sigmoid(z);
            }
            selscan__store(q->y.data, SELSCAN__AT2(q->y, b, d), q->dt, y);
        }
    }
}

SELSCAN_DEF selscan_status selscan_step_ref(const selscan_step_problem *s) {
    selscan__stp q;
    selscan_status st = selscan__validate_step(s, &q);
    if (st != SELSCAN_OK) return st;
    selscan__ref_step_all(&q);
    return SELSCAN_OK;
}

/* --------------------------------------------------------------------------------------------- */
/*                                  public CPU entry points                                      */
/* --------------------------------------------------------------------------------------------- */

SELSCAN_DEF selscan_status selscan_forward_cpu(const selscan_problem *p, void *workspace, size_t workspace_bytes) {
    return selscan_forward_ref(p, workspace, workspace_bytes);
}

SELSCAN_DEF selscan_status selscan_backward_cpu(const selscan_problem *p, const selscan_grads *g, void *workspace,
                                                size_t workspace_bytes) {
    return selscan_backward_ref(p, g, workspace, workspace_bytes);
}

SELSCAN_DEF selscan_status selscan_step_cpu(const selscan_step_problem *s) { return selscan_step_ref(s); }

#endif /* SELSCAN__IMPLEMENTED */
#endif /* SELSCAN_IMPLEMENTATION */
