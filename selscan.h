/* selscan.h - the selective scan of Mamba (S6) as a single-header C library.     v0.2.0
 * With the causal depthwise conv1d before it (Mamba-1's conv, >>conv-api): a Mamba-1 mixer core.
 *
 * QUICK START (README.md has a complete program; every call returns a selscan_status)
 *
 *     selscan_problem p;  selscan_grads g;  size_t bytes = 0;  void *ws;
 *     memset(&p, 0, sizeof p);  memset(&g, 0, sizeof g);  (zero: defaults; C and C++ alike)
 *     p.batch = 2; p.dim = 64; p.seqlen = 128; p.dstate = 16;
 *     p.u.data = u; p.delta.data = delta; p.A.data = A; p.B.data = B; p.C.data = C; p.y.data = y;
 *     g.dy.data = dy; g.du.data = du; g.dA.data = dA;               (any subset of gradients)
 *     selscan_workspace_size(&p, &g, &bytes);  ws = malloc(bytes);  (enough for both passes)
 *     selscan_forward_cpu(&p, ws, bytes);                           forward:  y
 *     selscan_backward_cpu(&p, &g, ws, bytes);                      backward: du, dA, ...
 *     selscan_step_problem s;  memset(&s, 0, sizeof s);  ...  s.state.data = state;
 *     selscan_step_cpu(&s);                                         decode step, in place: state, y
 *
 * CONTENTS (grep the >>tag)
 *     >>api          types, flags, status codes, every public declaration; >>conv-api the causal
 *                    conv1d's math, operands, types and entry points; >>ssd-api Mamba-2's SSD
 *                    scan's math, operands, types and entry points; >>norm-api the gated RMS
 *                    norm's (Mamba-2's RMSNormGated); >>operands the operand
 *                    tables validation runs on (the bindings' argument checks read them too)
 *     >>impl         implementation (SELSCAN_IMPLEMENTATION): >>convert dtype conversions (and
 *                    the "adding a dtype" checklist), >>validation shapes / strides / aliasing /
 *                    diag (on the >>operands tables), >>reference the scalar
 *                    oracle, >>step step validation and reference, >>conv the conv's validation
 *                    and >>conv-reference its scalar oracle, >>ssd the SSD scan's validation
 *                    and >>ssd-reference its scalar oracle, >>norm the gated norm's validation,
 *                    >>norm-reference its scalar oracle and its CPU entries' scalar loop,
 *                    >>norm-entry its CPU entries and parts, >>fast the fast CPU path
 *                    (>>fast-tiles, >>fast-isa, >>fast-drivers, >>fast-parts, ...), >>conv-entry
 *                    the conv's fast-path drivers and CPU entry points, >>ssd-entry the SSD
 *                    forward's and backward's, >>entry the public CPU entry points, >>fast-kernels the kernels
 *                    compiled per instruction set (>>fast-forward, >>fast-backward, >>fast-step,
 *                    >>fast-conv, >>fast-ssd, >>fast-norm)
 *     Measurements and the reasons behind the tuning: bench/NOTES.md (labels CPU-vN, CUDA-vN).
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
 *     SELSCAN_VALIDATION_ONLY  with SELSCAN_IMPLEMENTATION: only the internal validation helpers
 *                        (for a CUDA TU, whose CPU entry points come from another TU: faster nvcc)
 *     SELSCAN_HEADER_FILE  this file's name as the implementation includes itself, once per
 *                        instruction set (default "selscan.h"); set it if you renamed the file,
 *                        e.g. -DSELSCAN_HEADER_FILE='"my_selscan.h"'
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
 * NaN in gives NaN out; every NaN the CPU backward (fast path and reference) writes into a
 * gradient is the default quiet NaN, whatever the inputs' NaN signs and payloads: f32
 * 0x7fc00000, f16 0x7e00, bf16 0x7fc0. So the bitwise promises (every split, with or without
 * the checkpoints) hold with Inf / NaN inputs too. (Forward outputs and states keep whatever
 * NaN the arithmetic gives.)
 *
 * Step (decode): one token for a batch of cached states, identical to the forward with L = 1,
 * h0 = state and h_last written back into state (rounded to T with SELSCAN_STEP_STATE_T; with
 * SELSCAN_STEP_A_LOG, A holds Mamba's A_log and the step uses A = -exp(A_log)). See
 * selscan_step_problem.
 *
 * Causal conv1d (Mamba-1's depthwise conv before the scan, with optional silu, init / final
 * state, packed sequences, backward and the decode update): its own problem types and entry
 * points, selscan_conv_*; the math and operands are in >>conv-api.
 *
 * Mamba-2's SSD scan (mamba_chunk_scan_combined's math: one scalar decay per head, B and C shared
 * by groups of heads, D per head or per channel, the z gate, dt_bias / softplus / dt limits,
 * initial and final states, packed sequences by seq_idx or cu_seqlens; backward of every input):
 * its own problem types and entry points, selscan_ssd_* (the exact scalar reference, forward
 * and backward; a fast CPU forward and backward with the parts API; CUDA forward and backward in
 * selscan_cuda.cuh, selscan_ssd_*_cuda); the math and operands are in >>ssd-api.
 *
 * The gated RMS norm after Mamba-2's scan (mamba_ssm's RMSNormGated: a group RMS norm of y with the
 * silu(z) gate before or after it, forward and backward): selscan_norm_* (the scalar reference; CPU
 * entries on the vector path within f32 rounding of it, with a parts API; CUDA in selscan_cuda.cuh,
 * selscan_norm_*_cuda); the math in >>norm-api.
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
 *     dy                      like y                    T
 *     dh_last                 like h_last               f32      optional
 *     du, ddelta, dz          like u                    T        optional (every gradient out)
 *     dA, dD, ddelta_bias     like A, D                 f32      optional
 *     dB, dC                  like B, C                 T / f32  optional; T (variable), f32 (fixed)
 *     dh0                     like h0                   f32      optional
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
 * The library never allocates, never prints, never aborts and is reentrant. The caller owns every
 * buffer, including the workspace: ask selscan_workspace_size() first and pass any pointer to at
 * least that many bytes (malloc's is fine; NULL when the size is 0): the size includes
 * SELSCAN_WORKSPACE_ALIGN - 1 bytes of slack and every entry point aligns the pointer up inside.
 * Every entry point validates all it reads and returns a status; on any error not one output byte
 * is written, and when the problem's diag points at a selscan_diag, it names the operand and the
 * rule that failed. Whatever a backend cannot do, it refuses with SELSCAN_ERR_UNSUPPORTED. All
 * indexing is 64-bit; there is no limit on N, L or dim beyond memory. Outputs must not share an
 * element's byte with each other, any input or the workspace (SELSCAN_ERR_ALIAS). Overlap is
 * judged on elements where that is cheap to prove (views whose byte ranges overlap are accepted
 * when their elements interleave without meeting, e.g. dB and dC as column blocks of one
 * (batch, L, dt_rank + 2N) buffer: Mamba's x_proj layout), on byte ranges otherwise.
 *
 * Global state: exactly two caches, both write-once and idempotent (every thread computes the
 * same value; a race only repeats the computation): the CPU vector path (detected on first use,
 * an atomic int; see CPU PATHS) and, in selscan_cuda.cuh, the per-device attribute cache. Nothing
 * else persists between calls.
 *
 * ---------------------------------------------------------------------------------------------
 * CPU PATHS
 *
 * selscan_*_cpu run a vectorized path picked at run time from CPUID (detected once, on first use,
 * and cached): AVX-512F, else AVX2+FMA+F16C, on x86-64 (per-function target attributes: no -march
 * needed), NEON on arm64, portable C elsewhere or with SELSCAN_NO_SIMD; selscan_cpu_backend()
 * names it. The environment variable SELSCAN_CPU=avx512f|avx2|neon|portable, read once at that
 * first use, forces a lower path (never above what the CPU runs; another value is ignored:
 * selscan_cpu_backend() names the path taken): for bisecting a numeric difference between machines.
 * They run on the calling thread; the *_part forms (see the API) split the work for any thread
 * pool with bitwise the same results for every split. The exponential is a polynomial (within
 * 1.3 ulp; in steps where |dt * A| <= 86 it works on dt * (A log2 e) with A log2 e rounded once,
 * an error of the size of rounding dt * A itself: 3 ulp at |dt A| <= 10), so results differ from
 * selscan_*_ref (plain expf) by rounding only (f32: ~1e-6 relative). The backward keeps one state every 64 steps per
 * channel in flight and recomputes the rest; its workspace holds per-block partial sums of the
 * reductions (about batch * dim * N * L / 32 floats when variable dB and dC are asked for).
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
#define SELSCAN_VERSION_MINOR 2
#define SELSCAN_VERSION_PATCH 0
#define SELSCAN_VERSION (SELSCAN_VERSION_MAJOR * 10000 + SELSCAN_VERSION_MINOR * 100 + SELSCAN_VERSION_PATCH)

#ifndef SELSCAN_DEF
#ifdef SELSCAN_STATIC
#if defined(__GNUC__) || defined(__clang__)
#define SELSCAN_DEF static __attribute__((unused)) /* a TU need not call every function */
#else
#define SELSCAN_DEF static
#endif
#else
#define SELSCAN_DEF extern
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ============================================================================================= */
/* >>api                                    API                                                  */
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
/* The decode step's own flags (selscan_step_problem only; the scan's forward and backward refuse
   them: SELSCAN_ERR_UNSUPPORTED, {"flags", "unknown flag"}). The math is unchanged: every value is
   converted to f32 on load, so a parameter exactly representable in T gives bitwise the result of
   the f32 parameter. For a model in f16 / bf16, whose D and dt_proj.bias are T: no conversion
   kernel before each step (one flag each: transformers' Mamba passes D in T, dt_proj.bias in f32). */
#define SELSCAN_STEP_D_T 8u           /* D is T (the problem's dtype), not f32 */
#define SELSCAN_STEP_DELTA_BIAS_T 32u /* delta_bias is T, not f32 */
#define SELSCAN_STEP_PARAMS_T (SELSCAN_STEP_D_T | SELSCAN_STEP_DELTA_BIAS_T) /* both; A stays f32 */
/* The state is T (the cache of a f16 / bf16 model, which mamba_ssm and transformers allocate in the
   model's dtype): loaded into f32, stepped in f32 (y from the f32 state, as with a f32 state), and
   rounded to T (to nearest even) on the store. So y is bitwise that of a f32 state holding the same
   values, and the new state is that f32 state's result rounded to T. */
#define SELSCAN_STEP_STATE_T 16u
/* A holds Mamba's A_log (the parameter itself, (dim, N) f32): the step uses A = -exp(A_log) per
   element, computed in f32 by the C library's expf (CUDA: expf, not __expf), so the result is
   bitwise that of passing A = -expf(A_log) (on CUDA what -torch.exp(A_log) gives); nothing else
   changes. Saves the two elementwise kernels (exp, neg) a model runs on A_log every token. The CPU
   fast path computes the exponential with its vector exp (within 1.3 ulp of expf). */
#define SELSCAN_STEP_A_LOG 64u
#define SELSCAN__STEP_KNOWN_FLAGS \
    (SELSCAN__KNOWN_FLAGS | SELSCAN_STEP_D_T | SELSCAN_STEP_DELTA_BIAS_T | SELSCAN_STEP_STATE_T | SELSCAN_STEP_A_LOG)

/* The alignment the library gives its workspace internally. Nothing is required of the caller: any
   pointer works (malloc's included), because every selscan_workspace_size* answer includes
   SELSCAN_WORKSPACE_ALIGN - 1 bytes of slack and every entry point aligns the pointer up inside. */
#define SELSCAN_WORKSPACE_ALIGN 64

/* A tensor: data pointer plus element strides per logical dimension (see OPERANDS above).
   data NULL: the optional operand is absent. All strides 0: contiguous in the listed order.
   Inputs are selscan_tensor (read only: a const pointer assigns without a cast); outputs and the
   step's in-place state are selscan_out_tensor. */
typedef struct selscan_tensor {
    const void *data;
    int64_t stride[4];
} selscan_tensor;

typedef struct selscan_out_tensor {
    void *data;
    int64_t stride[4];
} selscan_out_tensor;

#define SELSCAN__STR(x) #x
#define SELSCAN__XSTR(x) SELSCAN__STR(x) /* a macro's value as a string literal */
/* Optional: which operand and which rule an error status is about. Give a pointer to one in
   selscan_problem.diag / selscan_step_problem.diag; on an error status every validate function,
   size query and CPU entry point stores two static strings and a code there, e.g. {"dB",
   "overlaps dC", SELSCAN_RULE_OVERLAPS}, {"workspace", "too small", SELSCAN_RULE_TOO_SMALL},
   {"workspace", "too small"}, {"cu_seqlens", "decreasing"}, {"n_parts", "out of range"},
   {"batch * dim * seqlen", "element count overflows"} (a count rule names the sizes whose product
   overflows); nothing is written on SELSCAN_OK. No allocation, no printing. (A NULL problem
   pointer has no diag to write to.) With the parts API every part stores the same strings: give
   each thread its own copy of the problem (or leave diag NULL). */
/* Validation rules: one list, expanded into the enum selscan_rule (stable codes: match these, not
   the text) and into selscan_rule_string() / selscan_rule_name(). Codes are only ever appended. The
   text is selscan_diag.rule, except for SELSCAN_RULE_OVERLAPS, whose rule names the operand it
   overlaps ("overlaps dC", "overlaps workspace", "overlaps cu_seqlens"). */
#define SELSCAN__RULE_LIST(X)                                                                      \
    X(SELSCAN_RULE_NONE, "")                                /* nothing stored (SELSCAN_OK) */        \
    X(SELSCAN_RULE_MISSING, "missing")                      /* a required pointer is NULL */         \
    X(SELSCAN_RULE_MISSING_N_SEQS, "missing (n_seqs given)")                                        \
    X(SELSCAN_RULE_WITHOUT_Z, "asked for without z")        /* dz without z */                       \
    X(SELSCAN_RULE_NOT_POSITIVE, "not positive")                                                    \
    X(SELSCAN_RULE_NEGATIVE, "negative")                                                            \
    X(SELSCAN_RULE_OUT_OF_RANGE, "out of range")                                                    \
    X(SELSCAN_RULE_NOT_DIVIDING, "does not divide dim")     /* n_groups */                           \
    X(SELSCAN_RULE_BATCH_NOT_1, "not 1 with cu_seqlens")                                            \
    X(SELSCAN_RULE_FIRST_OFFSET, "first offset not 0")                                              \
    X(SELSCAN_RULE_LAST_OFFSET, "last offset not seqlen")                                           \
    X(SELSCAN_RULE_NOT_INCREASING, "decreasing")            /* an offset below the one before */    \
    X(SELSCAN_RULE_INDEX_RANGE, "not below n_cache")        /* state_index */                        \
    X(SELSCAN_RULE_NOT_BATCH, "not batch without state_index") /* n_cache */                         \
    X(SELSCAN_RULE_ROW_TWICE, "row used twice")             /* state_index */                        \
    X(SELSCAN_RULE_WIDTH, "not " SELSCAN__XSTR(SELSCAN_CONV_MIN_WIDTH) " to "                       \
      SELSCAN__XSTR(SELSCAN_CONV_MAX_WIDTH))                 /* the conv's width: "not 2 to 4" */     \
    X(SELSCAN_RULE_BELOW_WIDTH, "below width - 1")          /* the conv step's state_len */          \
    X(SELSCAN_RULE_COUNT_OVERFLOWS, "element count overflows") /* operand: "batch * dim * seqlen" */ \
    X(SELSCAN_RULE_SIZE_OVERFLOWS, "size overflows")        /* workspace / checkpoint bytes */       \
    X(SELSCAN_RULE_UNKNOWN_DTYPE, "unknown dtype")                                                  \
    X(SELSCAN_RULE_UNKNOWN_FLAG, "unknown flag")                                                    \
    X(SELSCAN_RULE_MISALIGNED, "misaligned")                                                        \
    X(SELSCAN_RULE_NOT_FLOAT_ALIGNED, "not float-aligned")  /* checkpoint */                         \
    X(SELSCAN_RULE_NEGATIVE_STRIDE, "negative stride")                                              \
    X(SELSCAN_RULE_SPAN_OVERFLOWS, "span overflows")                                                \
    X(SELSCAN_RULE_ELEMENTS_OVERLAP, "elements overlap")    /* an output's own elements */           \
    X(SELSCAN_RULE_OVERLAPS, "overlaps another operand")    /* rule: "overlaps <operand>" */         \
    X(SELSCAN_RULE_TOO_SMALL, "too small")                  /* workspace / checkpoint */             \
    X(SELSCAN_RULE_NULL, "null")                            /* CUDA: workspace NULL */               \
    X(SELSCAN_RULE_ALLOC_FAILED, "allocation failed")       /* CUDA: workspace_alloc */              \
    X(SELSCAN_RULE_MISSING_PACKED, "missing (packed sequences)") /* CUDA: cu_seqlens_device */       \
    X(SELSCAN_RULE_GRID, "grid over 2^31 - 1 blocks")       /* CUDA */                               \
    X(SELSCAN_RULE_DSTATE_CUDA, "over 512 (CUDA)")          /* CUDA */                               \
    X(SELSCAN_RULE_NO_STEP_KERNEL, "no step kernel of that shape (tuning)") /* CUDA, tuning only */ \
    /* bindings/common's argument checks of a framework's tensors (never selscan's own calls) */     \
    X(SELSCAN_RULE_SHAPE, "wrong shape")                    /* rank or sizes against the others */   \
    X(SELSCAN_RULE_DTYPE, "wrong dtype")                    /* element type */                       \
    X(SELSCAN_RULE_DEVICE, "on another device")             /* not on the reference operand's */     \
    X(SELSCAN_RULE_NOT_HOST, "not in host memory")          /* values read on the host */          \
    SELSCAN__LATER_RULE_LIST(X)

/* the rules appended after the list above (codes are only ever appended): the SSD scan's (>>ssd-api),
   then the packed sequences' "no sequence" (every scan's and the conv's n_seqs <= 0, until then
   SELSCAN_RULE_OUT_OF_RANGE), then the CUDA SSD's shared memory (a dstate whose smallest tile a
   device cannot hold: the backward at dstate 257-512 with headdim > 8 on 64 KiB devices, sm_75),
   then the gated norm's eps (>>norm-api) */
#define SELSCAN__LATER_RULE_LIST(X)                                                                \
    X(SELSCAN_RULE_NOT_DIVIDING_NHEADS, "does not divide nheads") /* SSD: n_groups */              \
    X(SELSCAN_RULE_DT_LIMIT, "dt_min above dt_max, or NaN")      /* SSD: dt_min / dt_max */        \
    X(SELSCAN_RULE_WITH_CU_SEQLENS, "given with cu_seqlens")     /* SSD: seq_idx */                \
    X(SELSCAN_RULE_NO_SEQUENCE, "no sequence (cu_seqlens needs n_seqs + 1 >= 2 offsets)") /* n_seqs */ \
    X(SELSCAN_RULE_SHARED_MEMORY, "over the device's shared memory a block (CUDA)") /* SSD: dstate */ \
    X(SELSCAN_RULE_EPS, "negative, infinite or NaN")             /* the norm's eps */

#define SELSCAN__RULE_ENUM(name, text) name,
typedef enum selscan_rule { SELSCAN__RULE_LIST(SELSCAN__RULE_ENUM) SELSCAN__RULE_COUNT } selscan_rule;
#undef SELSCAN__RULE_ENUM

typedef struct selscan_diag {
    const char *operand; /* "u", "delta", ..., "dB", "workspace", "checkpoint", "n_parts", ... */
    const char *rule;    /* e.g. "negative stride", "overlaps dC", "too small" */
    selscan_rule code;   /* the rule's stable code (SELSCAN_RULE_*): what tests and bindings match */
} selscan_diag;

typedef struct selscan_problem {
    int64_t batch, dim, seqlen, dstate, n_groups; /* n_groups 0 means 1 */
    selscan_dtype dtype;                          /* T */
    unsigned flags;                               /* SELSCAN_DELTA_SOFTPLUS | SELSCAN_FIXED_B | ... */
    const int64_t *cu_seqlens;                    /* optional packed sequences: n_seqs + 1 offsets */
    int64_t n_seqs;                               /* 0 unless cu_seqlens is given */
    selscan_tensor u, delta, A, B, C, D, z, delta_bias, h0; /* inputs */
    selscan_out_tensor y, h_last;                           /* outputs (h_last optional) */
    selscan_diag *diag;                                     /* optional: see selscan_diag */
} selscan_problem;

typedef struct selscan_grads {
    selscan_tensor dy, dh_last;                                          /* incoming (dh_last optional) */
    selscan_out_tensor du, ddelta, dA, dB, dC, dD, dz, ddelta_bias, dh0; /* outgoing, each optional */
} selscan_grads;

/* One decode step for a batch of cached states (the scan's operand names, L = 1). STEP OPERANDS:
     state                   (n_cache, dim, N)       f32 / T  read and written in place; T with SELSCAN_STEP_STATE_T
     u, delta, z, y          (batch, dim)            T        z optional
     A                       (dim, N)                f32      A_log (A = -exp(A_log)) with SELSCAN_STEP_A_LOG
     B, C (variable)         (batch, n_groups, N)    T
     B, C (SELSCAN_FIXED_*)  (dim, N)                f32
     D, delta_bias           (dim)                   f32 / T  optional; T with SELSCAN_STEP_D_T / _DELTA_BIAS_T
     state_index optional, batch int32 values: the state row of each batch row (row i when NULL);
                 a negative value marks padding: y is 0 for that row and no state is touched.
                 On the CPU the indices are validated (< n_cache, no row used twice:
                 SELSCAN_ERR_SHAPE / SELSCAN_ERR_ALIAS). On CUDA they live in device memory and
                 cannot be read by the host: rows >= n_cache are treated as padding there.
     n_cache 0 means batch here (selscan_check_step_sizes reads it as no rows: >>n-cache). */
typedef struct selscan_step_problem {
    int64_t batch, dim, dstate, n_groups, n_cache;
    selscan_dtype dtype;
    unsigned flags; /* the scan's (SELSCAN_DELTA_SOFTPLUS, SELSCAN_FIXED_*), SELSCAN_STEP_D_T, _DELTA_BIAS_T, _STATE_T, _A_LOG */
    const int32_t *state_index;
    selscan_out_tensor state;                           /* read and written in place */
    selscan_tensor u, delta, A, B, C, D, z, delta_bias; /* inputs */
    selscan_out_tensor y;                               /* output */
    selscan_diag *diag;                                 /* optional: see selscan_diag */
} selscan_step_problem;

/* ---- >>conv-api: causal depthwise conv1d (Mamba-1's conv before the scan) ---------------------
   WHAT IT COMPUTES (every backend computes exactly this; W = width, SELSCAN_CONV_MIN_WIDTH <= W <=
   SELSCAN_CONV_MAX_WIDTH)

       y[b,d,t] = act( bias[d] + sum_{k=0}^{W-1} weight[d,k] * xp[b,d,t-(W-1)+k] )

   xp[b,d,t] = x[b,d,t] for t >= 0 and init_state[b,d,(W-1)+t] for -(W-1) <= t < 0 (0 without
   init_state); act = silu (x * sigmoid(x)) with SELSCAN_CONV_SILU, the identity otherwise. The
   sum runs in f32 in that order (bias first, then k = 0 .. W-1), whatever T is.
   final_state[b,d,j] = xp[b,d,L-(W-1)+j], j = 0 .. W-2: the last W-1 inputs (reaching into
   init_state, or 0, when L < W-1): the state a following chunk or the decode step continues from.
   Packed sequences: with cu_seqlens (as for the scan: n_seqs + 1 offsets, first 0, last seqlen,
   non-decreasing) and batch 1, the conv restarts at each sequence start: xp before the start is
   init_state[s] (or 0), never the previous sequence; final_state[s] is sequence s's; init_state,
   final_state, dinit_state and dfinal_state have n_seqs rows. An empty sequence's final_state is
   its init_state (or 0).
   Backward: from dy (and optionally dfinal_state), any subset of dx, dweight, dbias, dinit_state
   (NULL data: not computed; dbias and dinit_state may be asked for without bias / init_state).
   With SELSCAN_CONV_SILU the derivative is recomputed from the pre-activation
   (dpre = dy * s * (1 + pre * (1 - s)), s = sigmoid(pre)); y is not read. dweight and dbias are
   sums over batch and time in a fixed order: bitwise the same every call and for every n_parts.
   Step (decode): seqlen new tokens (1 when 0) per batch row against a rolling state of the last
   state_len >= W-1 inputs, in place: each token shifts the state left by one and appends x; y
   uses the state's last W-1 entries and x (the forward continued by one token).

   OPERANDS (T: the problem's dtype, f32 / f16 / bf16; weight and bias f32, except the step's with
   SELSCAN_CONV_PARAMS_T)
       x, y, dy, dx                 (batch, dim, L)             T
       weight, dweight              (dim, W)                    f32      the step's: T with
                                                                         SELSCAN_CONV_PARAMS_T
       bias, dbias                  (dim)                       f32      optional (the step's: T
                                                                         with SELSCAN_CONV_PARAMS_T)
       init_state, final_state,     (rows, dim, W-1)            T        optional; rows = batch
       dinit_state, dfinal_state                                         or n_seqs
     step:
       state                        (n_cache, dim, state_len)   T        read and written in place
       x, y                         (batch, dim, seqlen)        T        seqlen 1: (batch, dim)
                                                                         with any stride[2] >= 0
                                                                         (not read; negative
                                                                         strides are refused
                                                                         everywhere)
   Element strides per logical dimension in the listed order, all zero = contiguous, like the
   scan's tensors: the channels-last (batch, L, dim) memory of x is x.stride = {L*dim, 1, dim}.
   Outputs may not share a byte with an input, another output or themselves
   (SELSCAN_ERR_ALIAS / SELSCAN_ERR_STRIDE); the step's state is the one operand read and written.
   No workspace on the CPU; CUDA's backward takes one (selscan_cuda.cuh). */
#define SELSCAN_CONV_SILU 1u      /* act = silu */
/* The step only (selscan_conv_step_problem): weight and bias are T, not f32 (a model in f16 / bf16
   passes its conv1d parameters without a conversion kernel a token). Converted to f32 on load: the
   math is unchanged, so parameters exactly representable in T give bitwise the f32 parameters'
   result. The forward and backward refuse it (SELSCAN_ERR_UNSUPPORTED, {"flags", "unknown flag"}):
   a prefill converts its parameters once a layer. */
#define SELSCAN_CONV_PARAMS_T 2u
/* Widths 2 .. 4 on every backend. Width 1 and above 4: SELSCAN_ERR_UNSUPPORTED {"width", "not 2 to
   4"}; 0 and below: SELSCAN_ERR_SHAPE {"width", "not positive"}, like every other size. (A framework
   integration that stands in for a model's conv asks these two, and keeps the model's own conv for
   another width.) */
#define SELSCAN_CONV_MIN_WIDTH 2
#define SELSCAN_CONV_MAX_WIDTH 4
#define SELSCAN__CONV_KNOWN_FLAGS SELSCAN_CONV_SILU
#define SELSCAN__CONV_STEP_KNOWN_FLAGS (SELSCAN_CONV_SILU | SELSCAN_CONV_PARAMS_T)

typedef struct selscan_conv_problem {
    int64_t batch, dim, seqlen, width;
    selscan_dtype dtype;         /* T: x, y, init_state, final_state */
    unsigned flags;              /* SELSCAN_CONV_SILU */
    const int64_t *cu_seqlens;   /* optional packed sequences (batch 1): n_seqs + 1 offsets */
    int64_t n_seqs;              /* 0 unless cu_seqlens is given */
    selscan_tensor x, weight, bias, init_state; /* inputs (bias, init_state optional) */
    selscan_out_tensor y, final_state;          /* outputs (final_state optional) */
    selscan_diag *diag;                         /* optional: see selscan_diag */
} selscan_conv_problem;

typedef struct selscan_conv_grads {
    selscan_tensor dy, dfinal_state;                    /* incoming (dfinal_state optional) */
    selscan_out_tensor dx, dweight, dbias, dinit_state; /* outgoing, each optional */
} selscan_conv_grads;

/* The decode update: state_index optional, batch int32 values: the state row of each batch row
   (row i when NULL, then n_cache must be batch; n_cache 0 means batch, as the step's: >>n-cache);
   a negative value marks padding: y is 0 for that row and no state is touched. On the CPU the indices are validated
   (< n_cache, no row used twice: SELSCAN_ERR_SHAPE / SELSCAN_ERR_ALIAS), as for the scan's step;
   on CUDA they are device memory: rows >= n_cache are padding there. */
typedef struct selscan_conv_step_problem {
    int64_t batch, dim, width, state_len, n_cache; /* state_len >= width - 1 */
    int64_t seqlen;                                /* tokens per row; 0 means 1 */
    selscan_dtype dtype;                           /* T: state, x, y (weight, bias: SELSCAN_CONV_PARAMS_T) */
    unsigned flags;                                /* SELSCAN_CONV_SILU, SELSCAN_CONV_PARAMS_T */
    const int32_t *state_index;
    selscan_out_tensor state;      /* (n_cache, dim, state_len), read and written in place */
    selscan_tensor x, weight, bias; /* inputs (bias optional) */
    selscan_out_tensor y;           /* output */
    selscan_diag *diag;             /* optional: see selscan_diag */
} selscan_conv_step_problem;

SELSCAN_DEF const char *selscan_status_string(selscan_status s);
/* The enumerator's name of a status ("SELSCAN_ERR_SHAPE"), for error messages that name it. */
SELSCAN_DEF const char *selscan_status_name(selscan_status s);
/* A rule's text ("too small"; SELSCAN_RULE_OVERLAPS: "overlaps another operand") and its
   enumerator's name ("SELSCAN_RULE_TOO_SMALL"); "unknown rule" out of range. */
SELSCAN_DEF const char *selscan_rule_string(selscan_rule r);
SELSCAN_DEF const char *selscan_rule_name(selscan_rule r);
SELSCAN_DEF selscan_status selscan_validate(const selscan_problem *p);
SELSCAN_DEF selscan_status selscan_validate_grads(const selscan_problem *p, const selscan_grads *g);
SELSCAN_DEF selscan_status selscan_validate_step(const selscan_step_problem *s);
/* The size rules alone (what bindings/common checks a framework call's arguments with, issue 39):
   the rules a problem's dtype, flags, sizes and host index values obey, with the codes, diag and
   order of the validation (it runs these same functions), but without the operands (no pointer or
   stride is read) and with empty problems accepted: batch, dim or seqlen 0 (the step: batch or dim)
   is an empty problem, which a binding answers without calling selscan (dstate may then be 0
   too; a negative size is SELSCAN_RULE_NEGATIVE). Packed sequences: n_seqs > 0; cu_seqlens' values
   are checked where the pointer is given (NULL: not known here, e.g. in a graph's shape function).
   The steps: has_index says a state_index is given (its pointer, when not NULL, is host memory
   whose values are checked); n_cache is read as it is (0: a cache of no rows), not as batch
   (>>n-cache: why, and who answers such a call). */
SELSCAN_DEF selscan_status selscan_check_sizes(const selscan_problem *p);
SELSCAN_DEF selscan_status selscan_check_step_sizes(const selscan_step_problem *s, int has_index);
/* Workspace bytes for the CPU entry points; g NULL: forward. */
SELSCAN_DEF selscan_status selscan_workspace_size(const selscan_problem *p, const selscan_grads *g, size_t *bytes);
SELSCAN_DEF selscan_status selscan_forward_cpu(const selscan_problem *p, void *workspace, size_t workspace_bytes);
SELSCAN_DEF selscan_status selscan_backward_cpu(const selscan_problem *p, const selscan_grads *g, void *workspace, size_t workspace_bytes);
SELSCAN_DEF selscan_status selscan_step_cpu(const selscan_step_problem *s);

/* Partitioned CPU entry points: the work split into n_parts parts (1 <= n_parts <= 2^24) that any
   thread pool runs concurrently (part = 0 .. n_parts - 1, each exactly once, on one shared
   workspace of selscan_workspace_size_parts(p, g, n_parts) bytes). Results are bitwise the same
   for every n_parts (and equal to the plain entry points, which are the n_parts = 1 case). Work
   items: the forward splits (batch row, 16/8/4/1-channel tile), the backward (batch row, 64
   channels), the step (batch row, 256 channels); more parts than items leave parts idle.
     forward:  run selscan_forward_cpu_part for every part; done.
     backward: run selscan_backward_cpu_part for every part; when all have returned, run
               selscan_backward_cpu_reduce for every part (its own split: any n_parts, the same
               workspace); it writes dA, dD, ddelta_bias and dB, dC. The parts fill dA, dD,
               ddelta_bias and fixed dB / dC with NaN first, so a forgotten reduce shows as NaN
               (variable dB / dC are left as they were: too large to fill for nothing).
     step:     selscan_step_cpu_part for every part (no workspace).
   Each call validates everything, like the plain entry points. All parts get the same workspace
   pointer (any alignment: each part aligns it up alike). Example with OpenMP:
       selscan_workspace_size_parts(&p, NULL, n, &bytes);   ws = malloc(bytes)
       #pragma omp parallel for
       for (i = 0; i < n; i++) st[i] = selscan_forward_cpu_part(&p, i, n, ws, bytes); */
SELSCAN_DEF selscan_status selscan_workspace_size_parts(const selscan_problem *p, const selscan_grads *g, int64_t n_parts, size_t *bytes);
SELSCAN_DEF selscan_status selscan_forward_cpu_part(const selscan_problem *p, int64_t part, int64_t n_parts, void *workspace, size_t workspace_bytes);
SELSCAN_DEF selscan_status selscan_backward_cpu_part(const selscan_problem *p, const selscan_grads *g, int64_t part, int64_t n_parts, void *workspace, size_t workspace_bytes);
SELSCAN_DEF selscan_status selscan_backward_cpu_reduce(const selscan_problem *p, const selscan_grads *g, int64_t part, int64_t n_parts, void *workspace, size_t workspace_bytes);
SELSCAN_DEF selscan_status selscan_step_cpu_part(const selscan_step_problem *s, int64_t part, int64_t n_parts);
/* Checkpoints (optional): a forward that writes its state every 64 steps of every channel into a
   caller buffer of selscan_checkpoint_size() bytes (float-aligned), and a backward that reads it
   instead of running the forward again (about a quarter less work; bitwise the same gradients as
   without it, Inf / NaN inputs included, when both run on one machine and vector path). For N > 64 the backward ignores the buffer. Same
   partitioning and reduce step as selscan_backward_cpu_part. The buffer is an output of the
   forward and an input of the backward (it may not overlap their outputs or the workspace); the
   forward writes every float of it (slots no chunk starts in are zeroed). */
SELSCAN_DEF selscan_status selscan_checkpoint_size(const selscan_problem *p, size_t *bytes);
/* selscan_checkpoint_used: 1 when the CPU backward reads a checkpoint for p (its chunk length is the
   forward's: today N = p->dstate <= 64), 0 when it would ignore one (N > 64, or N < 1, or p NULL).
   Only p->dstate is read. Bindings ask it before allocating a checkpoint, so that none writes a
   buffer the backward will not read and none re-derives the rule. */
SELSCAN_DEF int selscan_checkpoint_used(const selscan_problem *p);
SELSCAN_DEF selscan_status selscan_forward_cpu_ckpt_part(const selscan_problem *p, int64_t part, int64_t n_parts, void *workspace, size_t workspace_bytes, float *ckpt, size_t ckpt_bytes);
SELSCAN_DEF selscan_status selscan_backward_cpu_ckpt_part(const selscan_problem *p, const selscan_grads *g, int64_t part, int64_t n_parts, void *workspace, size_t workspace_bytes, const float *ckpt, size_t ckpt_bytes);
/* The same without the parts API (n_parts = 1, the reduce included): workspace from
   selscan_workspace_size(), bitwise the same results as the parts forms. */
SELSCAN_DEF selscan_status selscan_forward_cpu_ckpt(const selscan_problem *p, void *workspace, size_t workspace_bytes, float *ckpt, size_t ckpt_bytes);
SELSCAN_DEF selscan_status selscan_backward_cpu_ckpt(const selscan_problem *p, const selscan_grads *g, void *workspace, size_t workspace_bytes, const float *ckpt, size_t ckpt_bytes);
/* The vector path the CPU entry points use on this machine: "avx512f", "avx2+fma", "neon" or
   "portable" (SELSCAN_NO_SIMD, no supported extension, or lowered by SELSCAN_CPU). */
SELSCAN_DEF const char *selscan_cpu_backend(void);

/* The scalar reference: the exact, simple implementation every fast path is checked against.
   Same contract and workspace as the entry points above. */
SELSCAN_DEF selscan_status selscan_forward_ref(const selscan_problem *p, void *workspace, size_t workspace_bytes);
SELSCAN_DEF selscan_status selscan_backward_ref(const selscan_problem *p, const selscan_grads *g, void *workspace, size_t workspace_bytes);
SELSCAN_DEF selscan_status selscan_step_ref(const selscan_step_problem *s);

/* ---- causal conv1d entry points (>>conv-api above; >>conv implements them) ----
   The same contract as the scan's: validate everything, no allocation, outputs untouched on any
   error, diag names the operand and rule. No workspace on the CPU. _ref: the exact scalar
   reference; _cpu: the fast path (taps in registers, vectorized across channels where the
   channel stride is 1; results differ from _ref by rounding only: it may contract a * b + c).
   _part: the work split into n_parts (1 <= n_parts <= 2^24) parts for any thread pool (every
   part exactly once, concurrently); bitwise the same results for every n_parts (the plain forms
   are n_parts = 1). Work items: the forward (batch row, 64 channels), the backward 64 channels
   over every batch row and step (so its dweight / dbias need no reduce step), the update (batch
   row, 256 channels). The fast path's kernels use up to ~35 KB of stack. */
SELSCAN_DEF selscan_status selscan_validate_conv(const selscan_conv_problem *p);
SELSCAN_DEF selscan_status selscan_validate_conv_grads(const selscan_conv_problem *p, const selscan_conv_grads *g);
SELSCAN_DEF selscan_status selscan_validate_conv_step(const selscan_conv_step_problem *s);
/* The conv's size rules alone: see selscan_check_sizes. */
SELSCAN_DEF selscan_status selscan_check_conv_sizes(const selscan_conv_problem *p);
SELSCAN_DEF selscan_status selscan_check_conv_step_sizes(const selscan_conv_step_problem *s, int has_index);
SELSCAN_DEF selscan_status selscan_conv_forward_cpu(const selscan_conv_problem *p);
SELSCAN_DEF selscan_status selscan_conv_backward_cpu(const selscan_conv_problem *p, const selscan_conv_grads *g);
SELSCAN_DEF selscan_status selscan_conv_step_cpu(const selscan_conv_step_problem *s);
SELSCAN_DEF selscan_status selscan_conv_forward_cpu_part(const selscan_conv_problem *p, int64_t part, int64_t n_parts);
SELSCAN_DEF selscan_status selscan_conv_backward_cpu_part(const selscan_conv_problem *p, const selscan_conv_grads *g,
                                                          int64_t part, int64_t n_parts);
SELSCAN_DEF selscan_status selscan_conv_step_cpu_part(const selscan_conv_step_problem *s, int64_t part, int64_t n_parts);
SELSCAN_DEF selscan_status selscan_conv_forward_ref(const selscan_conv_problem *p);
SELSCAN_DEF selscan_status selscan_conv_backward_ref(const selscan_conv_problem *p, const selscan_conv_grads *g);
SELSCAN_DEF selscan_status selscan_conv_step_ref(const selscan_conv_step_problem *s);

/* ---- >>ssd-api: Mamba-2's SSD scan (state-spaces/mamba's mamba_chunk_scan_combined) ----------
   WHAT IT COMPUTES (every backend computes exactly this). H = nheads heads of P = headdim
   channels each, N = dstate, G = n_groups (dividing H), head h in group g = h / (H / G). For each
   batch row b, head h, channel p and step t = 0 .. L-1, with the state S[p, 0..N-1] of (b, h, p)
   starting at initial_state[b,h,p,:] (0 when absent):

       dt      = dt_raw[b,t,h] + dt_bias[h]                    (bias 0 when absent)
       dt      = softplus(dt) with SELSCAN_SSD_DT_SOFTPLUS      softplus(x) = x > 20 ? x : log1p(exp(x))
       dt      = dt < dt_min ? dt_min : dt > dt_max ? dt_max : dt    with SELSCAN_SSD_DT_LIMIT
       a       = exp(dt * A[h])                                one decay per (b, t, h)
       S[p,n]  = a * S[p,n] + dt * B[b,t,g,n] * x[b,t,h,p]
       y0      = sum_n C[b,t,g,n] * S[p,n] + Dv * x[b,t,h,p]    Dv = D[h], or D[h,p] with
                                                               SELSCAN_SSD_D_HEADDIM; no term
                                                               when absent (an infinite x stays
                                                               out of it: not 0 * x)
       y[b,t,h,p] = z ? y0 * silu(z[b,t,h,p]) : y0             silu(x) = x / (1 + exp(-x))

   This is the math of mamba_chunk_scan_combined (its chunking is a way of computing it): D is
   added before the gate, the gate is y0 * silu(z), dt_bias is added before the softplus, the
   clamp follows the softplus. One difference: mamba_ssm always clamps, to dt_limit = (0, inf) by
   default, which changes dt only where dt is negative (no softplus); here the clamp is applied only
   with SELSCAN_SSD_DT_LIMIT (dt_min = 0, dt_max = INFINITY gives mamba_ssm's default). A NaN dt
   stays NaN through the clamp. Every value is converted to f32 on load and computed in f32; y is
   rounded to T on the store. final_state[b,h,p,:] (optional) receives S after the last step.

   Sequence boundaries (packed sequences), either of:
     seq_idx   (batch, L) int32: the state restarts from 0 at every t > 0 where seq_idx[b,t] !=
               seq_idx[b,t-1] (only neighbours' equality matters, any values); initial_state
               enters at t = 0 and final_state is the state after t = L-1 (the row's last
               sequence's). mamba_ssm's rule for seq_idx, with one difference: it gives
               initial_states to the tokens whose seq_idx is 0, which is the first sequence when
               seq_idx starts at 0 (as mamba_ssm builds it from cu_seqlens); here the first
               sequence gets it whatever its seq_idx value.
     cu_seqlens (n_seqs + 1 int64 offsets, first 0, last L, non-decreasing) with batch 1: as for
               the Mamba-1 scan, the L axis holds n_seqs sequences back to back; the state restarts
               at each sequence start from initial_state[s] (or 0) and final_state[s] is the state
               at the end of sequence s (mamba_ssm's varlen_states); initial_state, final_state and
               their gradients have n_seqs rows. An empty sequence's final_state is its
               initial_state.
   Not both: SELSCAN_ERR_SHAPE {"seq_idx", "given with cu_seqlens"}.

   Backward: from dy (and optionally dfinal_state), any subset of dx, ddt, dA, dB, dC, dD, dz,
   ddt_bias, dinitial_state (NULL data: not computed). dD, ddt_bias and dinitial_state may be asked
   for without D, dt_bias or initial_state (gradients at 0; dD has D's shape as the flags give it);
   dz needs z. ddt is the gradient of dt_raw: the clamp passes it where dt_min <= dt <= dt_max and
   gives 0 outside (mamba_ssm's rule), softplus' derivative is sigmoid(x) for x <= 20 and 1 above.
   Every sum (dA, dD, ddt_bias over batch rows, steps and channels; ddt over the head's channels and
   states; dB, dC over the group's heads and channels) runs in a fixed order: bitwise the same
   result every call. NaN in gives NaN out; every NaN the CPU backward writes into a gradient is the
   default quiet NaN (as the Mamba-1 scan's: f32 0x7fc00000, f16 0x7e00, bf16 0x7fc0).

   OPERANDS (T: the problem's dtype, f32 / f16 / bf16; L = seqlen)
       x, z, y                 (batch, L, H, P)        T        z optional
       dt                      (batch, L, H)           T        dt_raw above
       A                       (H)                     f32
       B, C                    (batch, L, G, N)        T
       D                       (H)                     f32      optional; (H, P) with SELSCAN_SSD_D_HEADDIM
       dt_bias                 (H)                     f32      optional
       seq_idx                 (batch, L)              int32    optional
       initial_state, final_state (rows, H, P, N)      f32      optional; rows = batch or n_seqs
       dy                      like y                  T
       dfinal_state            like final_state        f32      optional
       dx, ddt, dz             like x, dt, z           T        optional (every gradient out)
       dA, dD, ddt_bias        like A, D, dt_bias      f32      optional
       dB, dC                  like B, C               T        optional
       dinitial_state          like initial_state      f32      optional
   The listed orders are mamba_chunk_scan_combined's (x (batch, seqlen, nheads, headdim), ...);
   element strides per logical dimension in that order, all zero = contiguous, like the scan's
   tensors (a head-major x of (batch, H, L, P) memory: x.stride = {H*L*P, P, L*P, 1}). Inputs may
   broadcast (stride 0); outputs may not share a byte with an input, another output, themselves or
   the workspace. The scan's contract: every entry point validates all it reads and writes nothing
   on an error, naming the operand and rule in diag; no allocation; 64-bit indexing. The workspace:
   selscan_ssd_workspace_size() bytes (g NULL: the forward's), any pointer (aligned up inside). */
#define SELSCAN_SSD_DT_SOFTPLUS 1u /* dt = softplus(dt_raw + dt_bias) */
#define SELSCAN_SSD_DT_LIMIT 2u    /* dt clamped to [dt_min, dt_max] (mamba_ssm's dt_limit) */
#define SELSCAN_SSD_D_HEADDIM 4u   /* D (and dD) is (nheads, headdim): one per channel, not per head */
#define SELSCAN__SSD_KNOWN_FLAGS (SELSCAN_SSD_DT_SOFTPLUS | SELSCAN_SSD_DT_LIMIT | SELSCAN_SSD_D_HEADDIM)

typedef struct selscan_ssd_problem {
    int64_t batch, seqlen, nheads, headdim, dstate, n_groups; /* n_groups 0 means 1 */
    selscan_dtype dtype;                                      /* T */
    unsigned flags;                /* SELSCAN_SSD_DT_SOFTPLUS | SELSCAN_SSD_DT_LIMIT | SELSCAN_SSD_D_HEADDIM */
    float dt_min, dt_max;          /* with SELSCAN_SSD_DT_LIMIT: dt_min <= dt_max, no NaN (infinities ok) */
    const int64_t *cu_seqlens;     /* optional packed sequences: n_seqs + 1 offsets (batch 1) */
    int64_t n_seqs;                /* 0 unless cu_seqlens is given */
    selscan_tensor x, dt, A, B, C, D, z, dt_bias, seq_idx, initial_state; /* inputs */
    selscan_out_tensor y, final_state;                                    /* outputs (final_state optional) */
    selscan_diag *diag;                                                   /* optional: see selscan_diag */
} selscan_ssd_problem;

typedef struct selscan_ssd_grads {
    selscan_tensor dy, dfinal_state;                                            /* incoming (dfinal_state optional) */
    selscan_out_tensor dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinitial_state; /* outgoing, each optional */
} selscan_ssd_grads;

/* SSD entry points: the scan's contract (validate everything, outputs untouched on any error,
   diag names the operand and rule). _ref: the exact scalar reference (f32, expf). */
SELSCAN_DEF selscan_status selscan_validate_ssd(const selscan_ssd_problem *p);
SELSCAN_DEF selscan_status selscan_validate_ssd_grads(const selscan_ssd_problem *p, const selscan_ssd_grads *g);
/* The SSD's size rules alone, as selscan_check_sizes for the scan (a binding's argument checks):
   sizes may be 0 (an empty problem; dstate only when the problem is empty), cu_seqlens may be NULL
   with n_seqs given (its values unknown), seq_idx.data non-NULL only says seq_idx is given. */
SELSCAN_DEF selscan_status selscan_check_ssd_sizes(const selscan_ssd_problem *p);
/* Workspace bytes for the SSD entry points; g NULL: forward. */
SELSCAN_DEF selscan_status selscan_ssd_workspace_size(const selscan_ssd_problem *p, const selscan_ssd_grads *g,
                                                      size_t *bytes);
SELSCAN_DEF selscan_status selscan_ssd_forward_ref(const selscan_ssd_problem *p, void *workspace,
                                                   size_t workspace_bytes);
SELSCAN_DEF selscan_status selscan_ssd_backward_ref(const selscan_ssd_problem *p, const selscan_ssd_grads *g,
                                                    void *workspace, size_t workspace_bytes);
/* The fast CPU forward (>>ssd-entry): vectorized over a head's channels on the vector path of
   selscan_cpu_backend(); the same contract and workspace (selscan_ssd_workspace_size covers both);
   results differ from selscan_ssd_forward_ref by rounding only (fused multiply-adds, the sum over
   the states in two partial sums). _part: the work split into n_parts (1 <= n_parts <= 2^24) parts
   for any thread pool (every part exactly once, concurrently, on one workspace of
   selscan_ssd_workspace_size_parts(p, n_parts) bytes), bitwise the same results for every n_parts;
   work items: (batch row, head, block of 64 channels).
   The fast CPU backward likewise (>>ssd-entry: a head's states vectorized over dstate, chunks of
   16 steps recomputed from checkpoints and walked back), results differing from
   selscan_ssd_backward_ref by rounding only (fused multiply-adds, sums over states and channels
   in another fixed order; one exception, where a term is infinite (an infinite dt or dt_bias, or
   a state that overflows): its sums, grouped otherwise (dx and ddt with dt factored out of the sum
   over the states), may give +-inf where the reference's terms meet inf - inf and give NaN);
   bitwise deterministic: the same gradients for every n_parts and thread
   schedule. _part then _reduce, as the scan's (selscan_backward_cpu_part): every part of
   selscan_ssd_backward_cpu_part exactly once, then (after all of them) every part of
   selscan_ssd_backward_cpu_reduce, on one workspace of selscan_ssd_workspace_size_parts(p, g,
   n_parts) bytes; work items: (batch row, head); the reduce adds the per-item partials of dB, dC
   (over a group's heads) and dA, dD, ddt_bias (over batch rows) in one fixed order. Its workspace:
   those partials (2 batch nheads seqlen r16(dstate) floats with dB and dC asked for, r16(n) = n
   rounded up to 16) and per part about (seqlen / 16 + 17) headdim r16(dstate) floats.
   selscan_ssd_workspace_size_parts: g NULL for the forward's parts. */
SELSCAN_DEF selscan_status selscan_ssd_forward_cpu(const selscan_ssd_problem *p, void *workspace,
                                                   size_t workspace_bytes);
SELSCAN_DEF selscan_status selscan_ssd_workspace_size_parts(const selscan_ssd_problem *p, const selscan_ssd_grads *g,
                                                            int64_t n_parts, size_t *bytes);
SELSCAN_DEF selscan_status selscan_ssd_forward_cpu_part(const selscan_ssd_problem *p, int64_t part, int64_t n_parts,
                                                        void *workspace, size_t workspace_bytes);
SELSCAN_DEF selscan_status selscan_ssd_backward_cpu(const selscan_ssd_problem *p, const selscan_ssd_grads *g,
                                                    void *workspace, size_t workspace_bytes);
SELSCAN_DEF selscan_status selscan_ssd_backward_cpu_part(const selscan_ssd_problem *p, const selscan_ssd_grads *g,
                                                         int64_t part, int64_t n_parts, void *workspace,
                                                         size_t workspace_bytes);
SELSCAN_DEF selscan_status selscan_ssd_backward_cpu_reduce(const selscan_ssd_problem *p, const selscan_ssd_grads *g,
                                                           int64_t part, int64_t n_parts, void *workspace,
                                                           size_t workspace_bytes);

/* ---- >>norm-api: the gated RMS norm (Mamba-2's RMSNormGated, after the SSD scan) -----------------
   WHAT IT COMPUTES (every backend computes exactly this; G = group_size consecutive channels a
   group, dividing dim). For each batch row b, step t and group of channels, all in f32:

       s    = silu(z) = z * sigmoid(z)                          (z absent: no gate)
       u    = y * s   where the gate comes after the norm (SELSCAN_NORM_BEFORE_GATE clear, z given)
       u    = y       otherwise
       r    = 1 / sqrt(mean over the group of u^2 + eps)
       out  = u * r * w * s   with SELSCAN_NORM_BEFORE_GATE and z given (the norm, then the gate)
       out  = u * r * w       otherwise

   w = weight[c] (1 when absent). out is rounded to T (to nearest even). The group's sum of squares
   runs in f32 (the reference: channel order; CUDA and the CPU's vector path: fixed trees, so they
   differ from it by rounding).
   Backward, from dout, with n = u * r and s'(z) = sig * (1 + z * (1 - sig)), sig = sigmoid(z);
   "gate out": SELSCAN_NORM_BEFORE_GATE with z (the gate multiplies the norm's output), "gate in":
   the flag clear with z (the gate inside u):
       dn  = dout * w * s (gate out) or dout * w (gate in, no z)
       du  = r * (dn - n * mean over the group of (dn * n))
       dy  = du * s (gate in) or du (gate out, no z)
       dz  = dout * n * w * s'(z) (gate out) or du * y * s'(z) (gate in)
       dweight[c] = sum over (b, t) of dout * n * s (gate out) or of dout * n (gate in, no z)
   Each of dy, dz, dweight optional (NULL data: not computed); dweight may be asked for without
   weight (the gradient at w = 1); dz needs z (SELSCAN_ERR_NULL {"dz", "asked for without z"}).
   Deterministic: every sum in a fixed order, bitwise the same every call. NaN in, NaN out.

   OPERANDS (T: f32, f16 or bf16; element strides per logical dimension, all zero = contiguous)
       y, z, out               (batch, L, dim)    T        z optional
       weight                  (dim)              f32      optional (absent: 1)
       dout, dy, dz            (batch, L, dim)    T        dy, dz optional
       dweight                 (dim)              f32      optional
   eps: finite and >= 0 (else SELSCAN_ERR_SHAPE {"eps", "negative, infinite or NaN"}); group_size 0
   means dim; one that does not divide dim: SELSCAN_ERR_SHAPE {"group_size", "does not divide dim"}.
   batch, seqlen and dim are positive in a call (0: SELSCAN_ERR_SHAPE, "not positive", as every op's
   sizes); selscan_check_norm_sizes accepts an empty problem, which a binding answers itself.
   Outputs may not share a byte with an input, another output or themselves (SELSCAN_ERR_ALIAS /
   SELSCAN_ERR_STRIDE). No workspace for the plain CPU entries; the partitioned backward and CUDA's
   backward take one for dweight (below; selscan_cuda.cuh). */
#define SELSCAN_NORM_BEFORE_GATE 1u /* out = norm(y) * w * silu(z); clear: norm(y * silu(z)) * w */
#define SELSCAN__NORM_KNOWN_FLAGS SELSCAN_NORM_BEFORE_GATE

typedef struct selscan_norm_problem {
    int64_t batch, seqlen, dim, group_size; /* group_size 0 means dim */
    float eps;                              /* finite, >= 0 */
    selscan_dtype dtype;                    /* T: y, z, out */
    unsigned flags;                         /* SELSCAN_NORM_BEFORE_GATE */
    selscan_tensor y, z, weight;            /* inputs (z, weight optional) */
    selscan_out_tensor out;                 /* output */
    selscan_diag *diag;                     /* optional: see selscan_diag */
} selscan_norm_problem;

typedef struct selscan_norm_grads {
    selscan_tensor dout;                  /* incoming */
    selscan_out_tensor dy, dz, dweight;   /* outgoing, each optional */
} selscan_norm_grads;

/* The same contract as the conv's entry points: validate everything, no allocation, outputs
   untouched on any error, diag names the operand and rule. _ref: the exact scalar reference.
   _cpu: where every input (y, z, weight; the backward's dout) has its channels contiguous, the vector
   path (>>fast-norm, on the instruction set the scan's fast path takes: selscan_cpu_backend(),
   SELSCAN_CPU; avx512f, avx2+fma, neon, not portable): not bitwise the reference, within f32 rounding
   of it: the group's sums lane by lane then over the lanes (a fixed order: each of the gs terms'
   roundings, ~gs u32 relative to the sum of |terms|), the gate's sigmoid by selscan__vexp (1.3 ulp; the
   sigmoid within 3.2 ulp against the reference's 2.5 by expf, measured over every float |z| <= 88; below
   -87 e^-z as e^(-z - 45) e^45, so that it overflows where expf does); outputs of any strides; 32 KiB of stack. NaN where the reference's NaN;
   infinities as the reference's, except where a signed sum's order decides an overflow. Otherwise the
   scalar loop: the reference's arithmetic in its order, bitwise its results, a group's inputs (and
   their sigmoids) loaded once into a stack buffer (groups up to 2048 channels, 40 KiB of stack; larger
   ones run the reference's loop). Either way deterministic: bitwise the same every call, on one
   instruction set (bench/NOTES.md SSD-torch-v4 / v5: the CPU's measurements against torch's). */
SELSCAN_DEF selscan_status selscan_validate_norm(const selscan_norm_problem *p);
SELSCAN_DEF selscan_status selscan_validate_norm_grads(const selscan_norm_problem *p, const selscan_norm_grads *g);
/* The norm's size rules alone: see selscan_check_sizes (batch, seqlen or dim 0: an empty problem). */
SELSCAN_DEF selscan_status selscan_check_norm_sizes(const selscan_norm_problem *p);
SELSCAN_DEF selscan_status selscan_norm_forward_ref(const selscan_norm_problem *p);
SELSCAN_DEF selscan_status selscan_norm_backward_ref(const selscan_norm_problem *p, const selscan_norm_grads *g);
SELSCAN_DEF selscan_status selscan_norm_forward_cpu(const selscan_norm_problem *p);
SELSCAN_DEF selscan_status selscan_norm_backward_cpu(const selscan_norm_problem *p, const selscan_norm_grads *g);
/* Partitioned (the scan's pattern, selscan_backward_cpu_part): n_parts (1 <= n_parts <= 2^24) parts for
   any thread pool, each exactly once, concurrently. Forward: rows (batch row, step) split; bitwise
   selscan_norm_forward_cpu's results for every n_parts. Backward: every part of
   selscan_norm_backward_cpu_part (blocks of 64 rows: dy, dz, and each block's dweight sums into the
   workspace), then, after all of them, every part of selscan_norm_backward_cpu_reduce (dweight: the
   blocks' sums added in block order), on one workspace of selscan_norm_workspace_size_parts(p, g,
   n_parts) bytes (any address; 0 without dweight: NULL is fine; g NULL: the forward's, 0). dy, dz
   bitwise selscan_norm_backward_cpu's; dweight bitwise the same for every n_parts, and to rounding
   the plain form's (which adds the rows in order: another fixed order). */
SELSCAN_DEF selscan_status selscan_norm_workspace_size_parts(const selscan_norm_problem *p, const selscan_norm_grads *g,
                                                             int64_t n_parts, size_t *bytes);
SELSCAN_DEF selscan_status selscan_norm_forward_cpu_part(const selscan_norm_problem *p, int64_t part, int64_t n_parts);
SELSCAN_DEF selscan_status selscan_norm_backward_cpu_part(const selscan_norm_problem *p, const selscan_norm_grads *g,
                                                          int64_t part, int64_t n_parts, void *workspace,
                                                          size_t workspace_bytes);
SELSCAN_DEF selscan_status selscan_norm_backward_cpu_reduce(const selscan_norm_problem *p, const selscan_norm_grads *g,
                                                            int64_t part, int64_t n_parts, void *workspace,
                                                            size_t workspace_bytes);

/* dtype conversions used by the library (round to nearest even, NaN stays NaN). */
SELSCAN_DEF float selscan_f16_to_f32(uint16_t h);
SELSCAN_DEF uint16_t selscan_f32_to_f16(float f);
SELSCAN_DEF float selscan_bf16_to_f32(uint16_t h);
SELSCAN_DEF uint16_t selscan_f32_to_bf16(float f);

#ifdef __cplusplus
}
#endif

/* ---- >>operands: the operand tables (the OPERANDS lists in the docs, once) ----------------------
   X(c, field, ten, io, need, dims, dtype), one row per operand, c passed through:
     field  the public struct's member, also the operand's name in selscan_diag
     ten    the validated selscan__ten member it resolves into: the field's own name (one name from
            a binding to the kernel), except the SSD's dt, resolved as delta (every resolved
            struct's dt is its dtype)
     io     IN (read) or OUT (written; the step's state, read and written, is OUT)
     need   REQ required, FWD required by the forward only (y), OPT optional (NULL data: absent)
     dims   the logical shape: SELSCAN__DIMS_<dims>(q) gives rank, n0 .. n3 from the sizes q
     dtype  T (the problem's dtype), F32, or FIXB / FIXC: T, but (dim, N) f32 when SELSCAN_FIXED_B /
            SELSCAN_FIXED_C is set, or PRM: f32, T when the struct's <ten>T is set (the step's DT /
            delta_biasT: SELSCAN_STEP_D_T / _DELTA_BIAS_T, the conv step's weightT, biasT:
            SELSCAN_CONV_PARAMS_T), or STT: f32, T when SELSCAN_STEP_STATE_T is set
   The order is the order of the checks: which error a call reports first. These drive the
   missing-operand checks, the resolve calls and the input / output lists of the stride and alias
   checks; tests/test_operands.c checks the OPERANDS texts (the scan's and the step's) against them
   (the conv's, in >>conv-api, is not checked: its free-form layout would need its own parser).
   The CUDA launchers (selscan_cuda.cuh) build their alias-check lists and their kernels'
   parameters from these too, their own buffers (workspace, checkpoint, cu_seqlens_device) added
   after the rows. Declared with the API, not in >>impl: the bindings' argument checks
   (bindings/common/selscan_binding.h) read them in any translation unit. */
#define SELSCAN__SCAN_OPERANDS(X, c)                \
    X(c, u, u, IN, REQ, SEQ, T)                     \
    X(c, delta, delta, IN, REQ, SEQ, T)             \
    X(c, A, A, IN, REQ, DN, F32)                    \
    X(c, B, B, IN, REQ, BC, FIXB)                   \
    X(c, C, C, IN, REQ, BC, FIXC)                   \
    X(c, D, D, IN, OPT, DIM, F32)                   \
    X(c, z, z, IN, OPT, SEQ, T)                     \
    X(c, delta_bias, delta_bias, IN, OPT, DIM, F32) \
    X(c, h0, h0, IN, OPT, ROWS, F32)                \
    X(c, y, y, OUT, FWD, SEQ, T)                    \
    X(c, h_last, h_last, OUT, OPT, ROWS, F32)
/* the backward's (selscan_grads); dims and dtype are the problem's (dy like y, dB like B, ...) */
#define SELSCAN__GRAD_OPERANDS(X, c)                   \
    X(c, dy, dy, IN, REQ, SEQ, T)                      \
    X(c, dh_last, dh_last, IN, OPT, ROWS, F32)         \
    X(c, du, du, OUT, OPT, SEQ, T)                     \
    X(c, ddelta, ddelta, OUT, OPT, SEQ, T)             \
    X(c, dA, dA, OUT, OPT, DN, F32)                    \
    X(c, dB, dB, OUT, OPT, BC, FIXB)                   \
    X(c, dC, dC, OUT, OPT, BC, FIXC)                   \
    X(c, dD, dD, OUT, OPT, DIM, F32)                   \
    X(c, dz, dz, OUT, OPT, SEQ, T)                     \
    X(c, ddelta_bias, ddelta_bias, OUT, OPT, DIM, F32) \
    X(c, dh0, dh0, OUT, OPT, ROWS, F32)
/* the decode step's (selscan_step_problem): one token, so no L */
#define SELSCAN__STEP_OPERANDS(X, c)                \
    X(c, state, state, OUT, REQ, CACHE, STT)        \
    X(c, u, u, IN, REQ, TOK, T)                     \
    X(c, delta, delta, IN, REQ, TOK, T)             \
    X(c, A, A, IN, REQ, DN, F32)                    \
    X(c, B, B, IN, REQ, BC1, FIXB)                  \
    X(c, C, C, IN, REQ, BC1, FIXC)                  \
    X(c, D, D, IN, OPT, DIM, PRM)                   \
    X(c, z, z, IN, OPT, TOK, T)                     \
    X(c, delta_bias, delta_bias, IN, OPT, DIM, PRM) \
    X(c, y, y, OUT, REQ, TOK, T)
/* the causal conv's (>>conv-api): selscan_conv_problem, selscan_conv_grads, selscan_conv_step_problem */
#define SELSCAN__CONV_OPERANDS(X, c)                  \
    X(c, x, x, IN, REQ, SEQ, T)                       \
    X(c, weight, weight, IN, REQ, DW, F32)            \
    X(c, bias, bias, IN, OPT, DIM, F32)               \
    X(c, init_state, init_state, IN, OPT, CROWS, T)   \
    X(c, y, y, OUT, FWD, SEQ, T)                      \
    X(c, final_state, final_state, OUT, OPT, CROWS, T)
#define SELSCAN__CONV_GRAD_OPERANDS(X, c)               \
    X(c, dy, dy, IN, REQ, SEQ, T)                       \
    X(c, dfinal_state, dfinal_state, IN, OPT, CROWS, T) \
    X(c, dx, dx, OUT, OPT, SEQ, T)                      \
    X(c, dweight, dweight, OUT, OPT, DW, F32)           \
    X(c, dbias, dbias, OUT, OPT, DIM, F32)              \
    X(c, dinit_state, dinit_state, OUT, OPT, CROWS, T)
#define SELSCAN__CONV_STEP_OPERANDS(X, c)        \
    X(c, state, state, OUT, REQ, CCACHE, T)      \
    X(c, x, x, IN, REQ, SEQ, T)                  \
    X(c, weight, weight, IN, REQ, DW, PRM)       \
    X(c, bias, bias, IN, OPT, DIM, PRM)          \
    X(c, y, y, OUT, REQ, SEQ, T)

/* dims: rank, n0, n1, n2, n3 from the validated sizes q (selscan__prob; TOK, BC1, CACHE: selscan__stp;
   DW, CROWS: selscan__cprob; CCACHE: selscan__cstp) */
#define SELSCAN__DIMS_SEQ(q) 3, (q)->batch, (q)->dim, (q)->L, 1     /* (batch, dim, L) */
#define SELSCAN__DIMS_BC(q) 4, (q)->batch, (q)->G, (q)->N, (q)->L  /* (batch, n_groups, N, L) */
#define SELSCAN__DIMS_ROWS(q) 3, (q)->rows, (q)->dim, (q)->N, 1     /* (rows, dim, N) */
#define SELSCAN__DIMS_DN(q) 2, (q)->dim, (q)->N, 1, 1               /* (dim, N) */
#define SELSCAN__DIMS_DIM(q) 1, (q)->dim, 1, 1, 1                   /* (dim) */
#define SELSCAN__DIMS_TOK(q) 2, (q)->batch, (q)->dim, 1, 1          /* (batch, dim) */
#define SELSCAN__DIMS_BC1(q) 3, (q)->batch, (q)->G, (q)->N, 1       /* (batch, n_groups, N) */
#define SELSCAN__DIMS_CACHE(q) 3, (q)->ncache, (q)->dim, (q)->N, 1  /* (n_cache, dim, N) */
#define SELSCAN__DIMS_DW(q) 2, (q)->dim, (q)->W, 1, 1               /* conv: (dim, W) */
#define SELSCAN__DIMS_CROWS(q) 3, (q)->rows, (q)->dim, (q)->W - 1, 1 /* conv: (rows, dim, W-1) */
#define SELSCAN__DIMS_CCACHE(q) 3, (q)->ncache, (q)->dim, (q)->S, 1 /* conv step: (n_cache, dim, state_len) */
/* The SSD operand tables (the >>operands columns; the OPERANDS list of >>ssd-api, once). dtype I32:
   int32 elements (seq_idx), resolved as 4-byte elements for the stride, span and alias checks. */
#define SELSCAN__SSD_OPERANDS(X, c)                            \
    X(c, x, x, IN, REQ, SSD_X, T)                              \
    X(c, dt, delta, IN, REQ, SSD_DT, T)                        \
    X(c, A, A, IN, REQ, SSD_H, F32)                            \
    X(c, B, B, IN, REQ, SSD_BC, T)                             \
    X(c, C, C, IN, REQ, SSD_BC, T)                             \
    X(c, D, D, IN, OPT, SSD_D, F32)                            \
    X(c, z, z, IN, OPT, SSD_X, T)                              \
    X(c, dt_bias, dt_bias, IN, OPT, SSD_H, F32)                \
    X(c, seq_idx, seq_idx, IN, OPT, SSD_SEQ, I32)              \
    X(c, initial_state, initial_state, IN, OPT, SSD_ROWS, F32) \
    X(c, y, y, OUT, FWD, SSD_X, T)                             \
    X(c, final_state, final_state, OUT, OPT, SSD_ROWS, F32)
#define SELSCAN__SSD_GRAD_OPERANDS(X, c)                         \
    X(c, dy, dy, IN, REQ, SSD_X, T)                              \
    X(c, dfinal_state, dfinal_state, IN, OPT, SSD_ROWS, F32)     \
    X(c, dx, dx, OUT, OPT, SSD_X, T)                             \
    X(c, ddt, ddelta, OUT, OPT, SSD_DT, T)                          \
    X(c, dA, dA, OUT, OPT, SSD_H, F32)                           \
    X(c, dB, dB, OUT, OPT, SSD_BC, T)                            \
    X(c, dC, dC, OUT, OPT, SSD_BC, T)                            \
    X(c, dD, dD, OUT, OPT, SSD_D, F32)                           \
    X(c, dz, dz, OUT, OPT, SSD_X, T)                             \
    X(c, ddt_bias, ddt_bias, OUT, OPT, SSD_H, F32)               \
    X(c, dinitial_state, dinitial_state, OUT, OPT, SSD_ROWS, F32)
/* dims of the SSD operands from the validated sizes q (selscan__sprob: H nheads, P headdim, Dhd D per channel) */
#define SELSCAN__DIMS_SSD_X(q) 4, (q)->batch, (q)->L, (q)->H, (q)->P     /* (batch, L, H, P) */
#define SELSCAN__DIMS_SSD_DT(q) 3, (q)->batch, (q)->L, (q)->H, 1         /* (batch, L, H) */
#define SELSCAN__DIMS_SSD_H(q) 1, (q)->H, 1, 1, 1                        /* (H) */
#define SELSCAN__DIMS_SSD_BC(q) 4, (q)->batch, (q)->L, (q)->G, (q)->N    /* (batch, L, G, N) */
#define SELSCAN__DIMS_SSD_D(q) (q)->Dhd ? 2 : 1, (q)->H, SELSCAN__SSD_D_AXIS1(q), 1, 1 /* (H) or (H, P) */
#define SELSCAN__SSD_D_AXIS1(q) ((q)->Dhd ? (q)->P : 1) /* (bindings/common's checker, whose sizes are
                                                           cells, pushes its own around its check) */
#define SELSCAN__DIMS_SSD_SEQ(q) 2, (q)->batch, (q)->L, 1, 1             /* (batch, L) */
#define SELSCAN__DIMS_SSD_ROWS(q) 4, (q)->rows, (q)->H, (q)->P, (q)->N   /* (rows, H, P, N) */
/* the gated norm's (>>norm-api): selscan_norm_problem, selscan_norm_grads */
#define SELSCAN__NORM_OPERANDS(X, c)      \
    X(c, y, y, IN, REQ, NORM, T)          \
    X(c, z, z, IN, OPT, NORM, T)          \
    X(c, weight, weight, IN, OPT, DIM, F32) \
    X(c, out, out, OUT, FWD, NORM, T)
#define SELSCAN__NORM_GRAD_OPERANDS(X, c)     \
    X(c, dout, dout, IN, REQ, NORM, T)        \
    X(c, dy, dy, OUT, OPT, NORM, T)           \
    X(c, dz, dz, OUT, OPT, NORM, T)           \
    X(c, dweight, dweight, OUT, OPT, DIM, F32)
#define SELSCAN__DIMS_NORM(q) 3, (q)->batch, (q)->L, (q)->dim, 1 /* (batch, L, dim) */
#endif /* SELSCAN_H */

/* ============================================================================================= */
/* >>impl                               IMPLEMENTATION                                            */
/* ============================================================================================= */
#ifdef SELSCAN_IMPLEMENTATION
#ifndef SELSCAN__IMPLEMENTED
#define SELSCAN__IMPLEMENTED

#include <errno.h>
#include <math.h>
#include <stdlib.h> /* getenv (SELSCAN_CPU) */
#include <string.h>

#ifdef __cplusplus
#define SELSCAN__CAST(T, x) static_cast<T>(x)
#define SELSCAN__RCAST(T, x) reinterpret_cast<T>(x)
#define SELSCAN__UNCONST(x) const_cast<void *>(static_cast<const void *>(x)) /* internal: inputs are only read */
#else
#define SELSCAN__CAST(T, x) ((T)(x))
#define SELSCAN__RCAST(T, x) ((T)(x))
#define SELSCAN__UNCONST(x) ((void *)(uintptr_t)(const void *)(x))
#endif

/* Backward checkpoint interval (steps): the backward keeps one state per chunk and recomputes
   the states inside a chunk, so its memory is O(N * L / SELSCAN__CHUNK) per channel in flight. */
#define SELSCAN__CHUNK 64
#define SELSCAN__SOFTPLUS_THRESHOLD 20.0f
/* a static function some translation units do not call (the CUDA side's helpers) */
#if defined(__GNUC__) || defined(__clang__)
#define SELSCAN__MAYBE_UNUSED __attribute__((unused))
#else
#define SELSCAN__MAYBE_UNUSED
#endif

#ifndef SELSCAN_VALIDATION_ONLY /* public functions: the full implementation defines them */
SELSCAN_DEF const char *selscan_status_string(selscan_status s) {
#define SELSCAN__STATUS_TEXT(name, text) text,
    static const char *const texts[] = {SELSCAN__STATUS_LIST(SELSCAN__STATUS_TEXT)};
#undef SELSCAN__STATUS_TEXT
    if (SELSCAN__CAST(int, s) < 0 || SELSCAN__CAST(int, s) >= SELSCAN__CAST(int, SELSCAN__STATUS_COUNT)) return "unknown status";
    return texts[s];
}

SELSCAN_DEF const char *selscan_status_name(selscan_status s) {
#define SELSCAN__STATUS_NAME(name, text) #name,
    static const char *const names[] = {SELSCAN__STATUS_LIST(SELSCAN__STATUS_NAME)};
#undef SELSCAN__STATUS_NAME
    if (SELSCAN__CAST(int, s) < 0 || SELSCAN__CAST(int, s) >= SELSCAN__CAST(int, SELSCAN__STATUS_COUNT)) return "unknown status";
    return names[s];
}

SELSCAN_DEF const char *selscan_rule_string(selscan_rule r) {
#define SELSCAN__RULE_TEXT(name, text) text,
    static const char *const texts[] = {SELSCAN__RULE_LIST(SELSCAN__RULE_TEXT)};
#undef SELSCAN__RULE_TEXT
    if (SELSCAN__CAST(int, r) < 0 || SELSCAN__CAST(int, r) >= SELSCAN__CAST(int, SELSCAN__RULE_COUNT)) return "unknown rule";
    return texts[r];
}

SELSCAN_DEF const char *selscan_rule_name(selscan_rule r) {
#define SELSCAN__RULE_NAME(name, text) #name,
    static const char *const names[] = {SELSCAN__RULE_LIST(SELSCAN__RULE_NAME)};
#undef SELSCAN__RULE_NAME
    if (SELSCAN__CAST(int, r) < 0 || SELSCAN__CAST(int, r) >= SELSCAN__CAST(int, SELSCAN__RULE_COUNT)) return "unknown rule";
    return names[r];
}

#endif /* SELSCAN_VALIDATION_ONLY */
/* --------------------------------------------------------------------------------------------- */
/* >>convert                         dtype conversion                                            */
/* --------------------------------------------------------------------------------------------- */

/* ADDING A DTYPE: every place one touches (grep the names; keep this list current).
   selscan.h
     >>api         enum selscan_dtype (append: the values are ABI); the OPERANDS texts (scan and
                   >>conv-api: T is "f32, f16 or bf16"), the default quiet NaN per dtype in WHAT
                   IT COMPUTES; public converters if it needs them
     >>convert     its to-f32 / from-f32 conversion (round to nearest even, NaN stays NaN) and
                   selscan__load / selscan__store (the element access of every scalar path)
     >>validation  selscan__dtype_ok (the last valid value), selscan__dtype_size
     >>fast-tiles  selscan__cvt_row / the tile stores (the fast path's loads and stores, any ISA)
     >>isa-avx2    selscan__ld8_avx2 / selscan__st8_avx2 (F16C for f16; bf16 by shifts),
                   selscan__prefetch_rows_avx2's element size; >>isa-avx512, >>isa-neon likewise
                   where they load T directly; f32-only shortcuts (q->dt == SELSCAN_F32 tests in
                   >>fast-drivers) stay as they are
   selscan_cuda.cuh
     selscan_cuda_detail::with_dtype: the one selscan_dtype -> element type switch (every launch
                   goes through it), plus ld<T> / st<T> for the element type
     h16 / bwd_params::bf16: bwd_kernel is compiled once for both 2-byte types, a runtime flag
                   picks bf16 (set where backward() fills it: P.bf16 = ...); a third 2-byte type needs a
                   flag value there, a wider one its own bwd_kernel<T> instance
     f32-vs-2-byte tuning choices (short_steps and the launchers test dt == SELSCAN_F32):
                   decide per dtype
   bindings/   each framework's dtype -> bindings/common's Type map (torch: TypeOf in
               csrc/selscan_torch.h, tf: TypeOf in selscan_tf.cc and DtypeOf<T> in selscan_tf_common.h,
               onnxruntime: TypeOf of its ONNX element types; the common layer's DtypeOfType) and
               the dtype lists the ops register
   tests/      common.h (tc_round, tc_encode, tc_esize, tc_dtname, the tolerances TOL_*_<dtype>) and
               the dtype loops of the suites (test_forward, test_backward, test_fast, test_conv,
               test_cuda*) */

#ifndef SELSCAN_VALIDATION_ONLY
static uint32_t selscan__f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float selscan__bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static float selscan__nan_f32(void) { return selscan__bits_f32(0x7fc00000u); }
/* v, or the default quiet NaN (0x7fc00000) when v is any NaN: every NaN the CPU backward writes
   into a gradient (judged on the bits: -ffinite-math-only cannot fold it away) */
static float selscan__canon(float v) {
    return (selscan__f32_bits(v) & 0x7fffffffu) > 0x7f800000u ? selscan__nan_f32() : v;
}

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

#endif /* SELSCAN_VALIDATION_ONLY */
/* --------------------------------------------------------------------------------------------- */
/* >>validation                          validation                                               */
/* --------------------------------------------------------------------------------------------- */

static size_t selscan__dtype_size(selscan_dtype t) { return t == SELSCAN_F32 ? 4u : 2u; }

/* ---- diagnostics: every failing check names its operand and rule (selscan_diag) ---- */

/* Stores (operand, code, rule text) into d when d is non-NULL; the strings are static. The CUDA
   side calls these too (selscan_cuda.cuh). */
static void selscan__diag_set(selscan_diag *d, const char *operand, selscan_rule code, const char *rule) {
    if (d) {
        d->operand = operand;
        d->rule = rule;
        d->code = code;
    }
}
/* a rule's text (selscan_rule_string without the public definition: SELSCAN_VALIDATION_ONLY) */
static const char *selscan__rule_text(selscan_rule code) {
#define SELSCAN__RULE_TEXT(name, text) text,
    static const char *const texts[] = {SELSCAN__RULE_LIST(SELSCAN__RULE_TEXT)};
#undef SELSCAN__RULE_TEXT
    return SELSCAN__CAST(int, code) >= 0 && SELSCAN__CAST(int, code) < SELSCAN__CAST(int, SELSCAN__RULE_COUNT) ? texts[code] : "";
}
static selscan_status selscan__fail(selscan_diag *d, selscan_status st, const char *operand, selscan_rule code) {
    selscan__diag_set(d, operand, code, selscan__rule_text(code));
    return st;
}
/* SELSCAN_ERR_ALIAS, SELSCAN_RULE_OVERLAPS, with the rule text naming the other operand */
static selscan_status selscan__fail_ovl(selscan_diag *d, const char *operand, const char *ovl) {
    selscan__diag_set(d, operand, SELSCAN_RULE_OVERLAPS, ovl);
    return SELSCAN_ERR_ALIAS;
}
/* return status st, naming operand and rule (SELSCAN_RULE_<RULE>) in diag d */
#define SELSCAN__FAIL(d, st, operand, RULE) return selscan__fail((d), (st), (operand), SELSCAN_RULE_##RULE)
/* return SELSCAN_ERR_ALIAS: operand overlaps another (ovl: "overlaps <name>") */
#define SELSCAN__FAIL_OVL(d, operand, ovl) return selscan__fail_ovl((d), (operand), (ovl))

/* A tensor with its strides resolved (defaults filled in) and its shape and dtype attached. */
typedef struct selscan__ten {
    void *data;
    int64_t s[4];     /* element strides */
    int64_t n[4];     /* logical sizes */
    int nd;           /* number of dimensions */
    selscan_dtype dt; /* element type */
    const char *name; /* the operand's name ("u", "dB", ...) and "overlaps <name>": for selscan_diag */
    const char *ovl;
    selscan_diag *diag; /* where a failing check of this tensor reports (may be NULL) */
} selscan__ten;

/* Everything an implementation needs, validated: sizes, flags and resolved tensors. */
typedef struct selscan__prob {
    int64_t batch, dim, L, N, G, dpg, rows; /* dpg: channels per group; rows: state rows */
    selscan_dtype dt;
    int softplus, fixB, fixC;
    const int64_t *cu;
    int64_t nseq;
    selscan__ten u, delta, A, B, C, D, z, delta_bias, h0, y, h_last;
    selscan_diag *diag; /* the problem's diag (may be NULL) */
} selscan__prob;

typedef struct selscan__grd {
    selscan__ten dy, dh_last, du, ddelta, dA, dB, dC, dD, dz, ddelta_bias, dh0;
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

/* Size arithmetic (workspace, checkpoint, scratch layouts): non-negative counts, saturated at
   SELSCAN__SAT, so no intermediate can overflow; a size that reaches SELSCAN__SAT is refused
   (SELSCAN_ERR_SHAPE) before anything is written. Every intermediate of a size is at most the size
   (sums and products of counts >= 1), so a size below SELSCAN__SAT was computed exactly. */
#define SELSCAN__SAT (SELSCAN__CAST(int64_t, 1) << 61)
static int64_t selscan__smul(int64_t a, int64_t b) {
    if (a <= 0 || b <= 0) return 0;
    return a >= SELSCAN__SAT || b >= SELSCAN__SAT || a > SELSCAN__SAT / b ? SELSCAN__SAT : a * b;
}
static int64_t selscan__sadd(int64_t a, int64_t b) { /* a, b in [0, SELSCAN__SAT] */
    return a + b >= SELSCAN__SAT ? SELSCAN__SAT : a + b;
}
/* 1 when a size in bytes fits (below SELSCAN__SAT and size_t). */
static int selscan__size_ok(int64_t bytes) {
    return bytes >= 0 && bytes < SELSCAN__SAT && SELSCAN__CAST(uint64_t, bytes) <= SELSCAN__CAST(uint64_t, SIZE_MAX);
}

/* Resolve strides: all zero means contiguous (row-major in the listed order). data: the tensor's
   pointer (inputs are only ever read through it). */
static void selscan__resolve_data(selscan__ten *r, void *data, const int64_t *stride, const char *name,
                                  const char *ovl, selscan_diag *diag, int nd, int64_t n0, int64_t n1, int64_t n2,
                                  int64_t n3, selscan_dtype dt) {
    int i, allzero = 1;
    r->data = data;
    r->nd = nd;
    r->dt = dt;
    r->name = name;
    r->ovl = ovl;
    r->diag = diag;
    r->n[0] = n0; r->n[1] = n1; r->n[2] = n2; r->n[3] = n3;
    for (i = nd; i < 4; i++) r->n[i] = 1;
    for (i = 0; i < nd; i++) if (stride[i] != 0) allzero = 0;
    if (allzero) {
        int64_t acc = 1;
        for (i = nd - 1; i >= 0; i--) { r->s[i] = acc; acc *= r->n[i]; }
    } else {
        for (i = 0; i < nd; i++) r->s[i] = stride[i];
    }
    for (i = nd; i < 4; i++) r->s[i] = 0;
}

/* need: 1 when the operand must be present (fwd: the call needs y) */
#define SELSCAN__NEED_REQ(fwd) 1
#define SELSCAN__NEED_FWD(fwd) (fwd)
#define SELSCAN__NEED_OPT(fwd) 0
#define SELSCAN__IS_IN_IN(x) x,
#define SELSCAN__IS_IN_OUT(x)
#define SELSCAN__IS_OUT_IN(x)
#define SELSCAN__IS_OUT_OUT(x) x,

/* Row callbacks. c: the struct (pointer) holding the selscan__ten members. */
/* &c->ten, for the inputs (OPD_INS) / outputs (OPD_OUTS) / all (OPD_ALL): `{LIST(SELSCAN__OPD_INS, q)}` */
#define SELSCAN__OPD_INS(c, field, ten, io, need, dims, dtype) SELSCAN__IS_IN_##io(&(c)->ten)
#define SELSCAN__OPD_OUTS(c, field, ten, io, need, dims, dtype) SELSCAN__IS_OUT_##io(&(c)->ten)
#define SELSCAN__OPD_ALL(c, field, ten, io, need, dims, dtype) &(c)->ten,
/* the missing-operand check: c is the public struct (pointer), need_y (in scope for FWD rows)
   whether the call needs y, d the diag */
#define SELSCAN__OPD_NULL(c, field, ten, io, need, dims, dtype) \
    if (SELSCAN__NEED_##need(need_y) && !(c)->field.data) SELSCAN__FAIL(d, SELSCAN_ERR_NULL, #field, MISSING);
/* resolve c->field into dst->ten (sizes from q, diag d): `LIST(SELSCAN__OPD_RESOLVE, p)` with dst, q, d
   in scope. By the dtype column: T the problem's dtype, F32, FIXB / FIXC: (dim, N) f32 when fixed. */
#define SELSCAN__OPD_RESOLVE(c, field, ten, io, need, dims, dtype) SELSCAN__RESOLVE_##dtype(c, field, ten, dims)
#define SELSCAN__RESOLVE_AS(c, field, ten, dims, dt)                                                                \
    selscan__resolve_data(&dst->ten, SELSCAN__UNCONST((c)->field.data), (c)->field.stride, #field, "overlaps " #field, \
                          d, SELSCAN__DIMS_##dims(q), dt);
#define SELSCAN__RESOLVE_T(c, field, ten, dims) SELSCAN__RESOLVE_AS(c, field, ten, dims, q->dt)
#define SELSCAN__RESOLVE_F32(c, field, ten, dims) SELSCAN__RESOLVE_AS(c, field, ten, dims, SELSCAN_F32)
#define SELSCAN__RESOLVE_FIXB(c, field, ten, dims) \
    if (q->fixB) SELSCAN__RESOLVE_AS(c, field, ten, DN, SELSCAN_F32) else SELSCAN__RESOLVE_AS(c, field, ten, dims, q->dt)
#define SELSCAN__RESOLVE_FIXC(c, field, ten, dims) \
    if (q->fixC) SELSCAN__RESOLVE_AS(c, field, ten, DN, SELSCAN_F32) else SELSCAN__RESOLVE_AS(c, field, ten, dims, q->dt)
#define SELSCAN__RESOLVE_PRM(c, field, ten, dims) SELSCAN__RESOLVE_AS(c, field, ten, dims, q->ten##T ? q->dt : SELSCAN_F32)
#define SELSCAN__RESOLVE_STT(c, field, ten, dims) SELSCAN__RESOLVE_AS(c, field, ten, dims, q->stT ? q->dt : SELSCAN_F32)
#define SELSCAN__COUNT(a) SELSCAN__CAST(int, sizeof(a) / sizeof((a)[0]))

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

/* 1 when p is a multiple of align bytes (tensors: their element size; cu_seqlens 8, state_index 4):
   misaligned elements are refused, never read with misaligned loads. */
static int selscan__aligned(const void *p, size_t align) {
    return SELSCAN__RCAST(uintptr_t, p) % align == 0;
}
static const char *selscan__name(const selscan__ten *t) { return t->name ? t->name : "tensor"; }
static const char *selscan__ovl(const selscan__ten *t) { return t->ovl ? t->ovl : "overlaps another operand"; }

/* Strides of a present tensor: non-negative, no overflow; for an output, no two elements at
   one address (sort the dimensions by stride; each must step past the span of the smaller). */
static selscan_status selscan__check_strides(const selscan__ten *t, int is_output) {
    int64_t bytes, s[4], n[4];
    int i, j, k = 0;
    if (!t->data) return SELSCAN_OK;
    if (!selscan__aligned(t->data, selscan__dtype_size(t->dt))) /* misaligned elements */
        SELSCAN__FAIL(t->diag, SELSCAN_ERR_STRIDE, selscan__name(t), MISALIGNED);
    for (i = 0; i < t->nd; i++)
        if (t->s[i] < 0) SELSCAN__FAIL(t->diag, SELSCAN_ERR_STRIDE, selscan__name(t), NEGATIVE_STRIDE);
    if (!selscan__span(t, &bytes)) SELSCAN__FAIL(t->diag, SELSCAN_ERR_STRIDE, selscan__name(t), SPAN_OVERFLOWS);
    if (!is_output) return SELSCAN_OK;
    for (i = 0; i < t->nd; i++) {
        if (t->n[i] <= 1) continue;
        for (j = k; j > 0 && s[j - 1] > t->s[i]; j--) { s[j] = s[j - 1]; n[j] = n[j - 1]; }
        s[j] = t->s[i]; n[j] = t->n[i]; k++;
    }
    {
        int64_t span = 1; /* elements covered by the dimensions so far */
        for (i = 0; i < k; i++) {
            if (s[i] < span) SELSCAN__FAIL(t->diag, SELSCAN_ERR_STRIDE, selscan__name(t), ELEMENTS_OVERLAP);
            span = s[i] * (n[i] - 1) + span;
        }
    }
    return SELSCAN_OK;
}

static int selscan__overlap(const void *a, int64_t abytes, const void *b, int64_t bbytes) {
    /* by the distance from the lower start (no end address is formed: a range reaching the top
       of the address space does not wrap around; a negative byte count reads as overlapping) */
    const uint64_t pa = SELSCAN__CAST(uint64_t, SELSCAN__RCAST(uintptr_t, a)), pb = SELSCAN__CAST(uint64_t, SELSCAN__RCAST(uintptr_t, b));
    if (!a || !b || abytes == 0 || bbytes == 0) return 0;
    return pa <= pb ? pb - pa < SELSCAN__CAST(uint64_t, abytes) : pa - pb < SELSCAN__CAST(uint64_t, bbytes);
}

static int64_t selscan__bytes(const selscan__ten *t) {
    int64_t b = 0;
    if (t->data) selscan__span(t, &b);
    return b;
}

/* 1 when no byte of an element of a is a byte of an element of b, proven cheaply (0: not proven).
   For a modulus M (each byte stride of either tensor in turn): where every dimension of a tensor
   either steps by a multiple of M or, all such dimensions together with the element, spans at
   most M bytes, the tensor's bytes lie in one residue interval [base mod M, + extent) modulo M.
   Two such intervals that do not meet (cyclically) prove the tensors disjoint: e.g. dB and dC
   interleaved in one (batch, L, dt_rank + 2N) buffer. Strides must be validated (non-negative). */
static int selscan__disjoint(const selscan__ten *a, const selscan__ten *b) {
    const selscan__ten *t[2];
    int k, i, j;
    t[0] = a;
    t[1] = b;
    for (k = 0; k < 8; k++) {
        const selscan__ten *c = t[k / 4];
        const int dk = k % 4;
        int64_t M, lo[2], ext[2], dlt;
        int ok = 1;
        if (dk >= c->nd || c->n[dk] <= 1) continue;
        M = c->s[dk] * SELSCAN__CAST(int64_t, selscan__dtype_size(c->dt));
        if (M <= 0) continue;
        for (j = 0; j < 2 && ok; j++) {
            const int64_t es = SELSCAN__CAST(int64_t, selscan__dtype_size(t[j]->dt));
            int64_t e = es;
            for (i = 0; i < t[j]->nd && ok; i++) {
                int64_t sb;
                if (t[j]->n[i] <= 1) continue; /* its stride is not validated: never multiplied */
                sb = t[j]->s[i] * es;
                if (sb % M == 0) continue;
                e += (t[j]->n[i] - 1) * sb; /* spans are validated: no overflow */
                if (e > M) ok = 0;
            }
            ext[j] = e;
            lo[j] = SELSCAN__CAST(int64_t, SELSCAN__RCAST(uintptr_t, t[j]->data) % SELSCAN__CAST(uint64_t, M));
        }
        if (!ok) continue;
        dlt = ((lo[1] - lo[0]) % M + M) % M; /* b's interval starts dlt bytes after a's */
        if (dlt >= ext[0] && dlt + ext[1] <= M) return 1;
    }
    return 0;
}

/* Two present tensors share a byte of their elements (not proven disjoint). */
static int selscan__ten_overlap(const selscan__ten *a, const selscan__ten *b) {
    if (!a->data || !b->data) return 0;
    if (!selscan__overlap(a->data, selscan__bytes(a), b->data, selscan__bytes(b))) return 0;
    return !selscan__disjoint(a, b);
}

/* Every output against every other output and every input; the workspace against all. extra: a
   flat buffer the call reads (its rule text: extra_ovl, e.g. "overlaps cu_seqlens"). */
static selscan_status selscan__check_alias_d(const selscan__ten *const *outs, int nout, const selscan__ten *const *ins,
                                             int nin, const void *extra, int64_t extra_bytes, const char *extra_ovl,
                                             const void *ws, int64_t ws_bytes, selscan_diag *d) {
    int i, j;
    for (i = 0; i < nout; i++) {
        int64_t bi = selscan__bytes(outs[i]);
        if (!outs[i]->data) continue;
        for (j = i + 1; j < nout; j++)
            if (selscan__ten_overlap(outs[i], outs[j]))
                SELSCAN__FAIL_OVL(d, selscan__name(outs[i]), selscan__ovl(outs[j]));
        for (j = 0; j < nin; j++)
            if (selscan__ten_overlap(outs[i], ins[j]))
                SELSCAN__FAIL_OVL(d, selscan__name(outs[i]), selscan__ovl(ins[j]));
        if (selscan__overlap(outs[i]->data, bi, extra, extra_bytes))
            SELSCAN__FAIL_OVL(d, selscan__name(outs[i]), extra_ovl);
        if (selscan__overlap(outs[i]->data, bi, ws, ws_bytes))
            SELSCAN__FAIL_OVL(d, selscan__name(outs[i]), "overlaps workspace");
    }
    for (j = 0; j < nin; j++)
        if (selscan__overlap(ws, ws_bytes, ins[j]->data, selscan__bytes(ins[j])))
            SELSCAN__FAIL_OVL(d, "workspace", selscan__ovl(ins[j]));
    if (selscan__overlap(ws, ws_bytes, extra, extra_bytes)) SELSCAN__FAIL_OVL(d, "workspace", extra_ovl);
    return SELSCAN_OK;
}

/* The same, reporting to the first diag the tensors carry; extra is the sequence offsets. */
static SELSCAN__MAYBE_UNUSED selscan_status selscan__check_alias(const selscan__ten *const *outs, int nout,
                                                                 const selscan__ten *const *ins, int nin, const void *extra,
                                                                 int64_t extra_bytes, const void *ws, int64_t ws_bytes) {
    selscan_diag *d = NULL;
    int i;
    for (i = 0; i < nout && !d; i++) d = outs[i]->diag;
    for (i = 0; i < nin && !d; i++) d = ins[i]->diag;
    return selscan__check_alias_d(outs, nout, ins, nin, extra, extra_bytes, "overlaps cu_seqlens", ws, ws_bytes, d);
}

static int selscan__dtype_ok(selscan_dtype t) {
    return SELSCAN__CAST(int, t) >= 0 && SELSCAN__CAST(int, t) <= SELSCAN__CAST(int, SELSCAN_BF16);
}

/* ---- >>size-rules: the rules of sizes, flags and host values, once -------------------------------
   Each problem kind's in two parts around the missing-operand check (the order of the checks is
   the order of the errors): the validation runs them with empty_ok 0, selscan_check_*sizes (what
   bindings/common asks) with empty_ok 1: 0 taken for batch, dim and seqlen (an empty problem,
   then dstate too: zero_ok), a negative size refused, packed sequences whose offsets are not
   given (n_seqs > 0, cu_seqlens NULL) taken without their values. */
static selscan_status selscan__size_rule(selscan_diag *d, const char *name, int64_t v, int zero_ok) {
    if (zero_ok && v < 0) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, name, NEGATIVE);
    if (!zero_ok && v <= 0) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, name, NOT_POSITIVE);
    return SELSCAN_OK;
}
#define SELSCAN__SIZE_RULE(d, name, v, zero_ok)                                               \
    do {                                                                                      \
        selscan_status st_ = selscan__size_rule((d), (name), (v), (zero_ok));                 \
        if (st_ != SELSCAN_OK) return st_;                                                    \
    } while (0)

/* packed sequences (cu_seqlens; values where the pointer is given, n_seqs given without it when
   values_optional): the scan's and the conv's rule; per_row: the state's elements a row */
static selscan_status selscan__packed_rules(const int64_t *cu, int64_t n_seqs, int64_t batch, int64_t seqlen, int64_t dim,
                                            int64_t per_row, int values_optional, selscan_diag *d) {
    int64_t i;
    if (cu || (values_optional && n_seqs != 0)) {
        /* the row count is checked before cu_seqlens[n_seqs] is read (its index must exist) */
        if (batch != 1) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "batch", BATCH_NOT_1);
        if (n_seqs <= 0) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "n_seqs", NO_SEQUENCE);
        if (!selscan__count_ok(n_seqs, dim, per_row, 1)) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "n_seqs", OUT_OF_RANGE);
        if (!cu) return SELSCAN_OK;
        if (!selscan__aligned(cu, 8)) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "cu_seqlens", MISALIGNED);
        if (cu[0] != 0) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "cu_seqlens", FIRST_OFFSET);
        if (cu[n_seqs] != seqlen) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "cu_seqlens", LAST_OFFSET);
        for (i = 0; i < n_seqs; i++)
            if (cu[i + 1] < cu[i]) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "cu_seqlens", NOT_INCREASING);
    } else if (n_seqs != 0) {
        SELSCAN__FAIL(d, SELSCAN_ERR_NULL, "cu_seqlens", MISSING_N_SEQS);
    }
    return SELSCAN_OK;
}

/* the scan's: before the operands (dtype, flags, sizes, n_groups) */
static selscan_status selscan__scan_sizes1(const selscan_problem *p, int empty_ok, selscan_diag *d) {
    const int64_t G = p->n_groups == 0 ? 1 : p->n_groups;
    const int empty = empty_ok && (p->batch == 0 || p->dim == 0 || p->seqlen == 0);
    if (!selscan__dtype_ok(p->dtype)) SELSCAN__FAIL(d, SELSCAN_ERR_DTYPE, "dtype", UNKNOWN_DTYPE);
    if (p->flags & ~SELSCAN__KNOWN_FLAGS) SELSCAN__FAIL(d, SELSCAN_ERR_UNSUPPORTED, "flags", UNKNOWN_FLAG);
    SELSCAN__SIZE_RULE(d, "batch", p->batch, empty_ok);
    SELSCAN__SIZE_RULE(d, "dim", p->dim, empty_ok);
    SELSCAN__SIZE_RULE(d, "seqlen", p->seqlen, empty_ok);
    SELSCAN__SIZE_RULE(d, "dstate", p->dstate, empty);
    if (G <= 0 || p->dim % G != 0) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "n_groups", NOT_DIVIDING);
    return SELSCAN_OK;
}

/* the scan's: after the operands (packed sequences, element counts) */
static selscan_status selscan__scan_sizes2(const selscan_problem *p, int empty_ok, selscan_diag *d) {
    const int64_t G = p->n_groups == 0 ? 1 : p->n_groups;
    const int packed = p->cu_seqlens || (empty_ok && p->n_seqs != 0);
    const int64_t rows = packed ? p->n_seqs : p->batch;
    selscan_status st = selscan__packed_rules(p->cu_seqlens, p->n_seqs, p->batch, p->seqlen, p->dim, p->dstate, empty_ok, d);
    if (st != SELSCAN_OK) return st;
    /* the diag names the sizes whose product overflows (with cu_seqlens, n_seqs * dim * dstate
       was checked above) */
    if (!selscan__count_ok(p->batch, p->dim, p->seqlen, 1)) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "batch * dim * seqlen", COUNT_OVERFLOWS);
    if (!selscan__count_ok(p->batch, G, p->dstate, p->seqlen))
        SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "batch * n_groups * dstate * seqlen", COUNT_OVERFLOWS);
    if (!selscan__count_ok(rows, p->dim, p->dstate, 1)) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "batch * dim * dstate", COUNT_OVERFLOWS);
    return SELSCAN_OK;
}

/* Sizes, flags, pointers, sequence offsets and strides of a problem (not aliasing, which needs
   the outputs of the pass). need_y: the forward's y is required. */
static selscan_status selscan__check_problem(const selscan_problem *p, selscan__prob *q, int need_y) {
    int64_t G, i;
    selscan_status st;
    selscan_diag *d;
    if (!p) return SELSCAN_ERR_NULL;
    d = p->diag;
    q->diag = d;
    if ((st = selscan__scan_sizes1(p, 0, d)) != SELSCAN_OK) return st;
    SELSCAN__SCAN_OPERANDS(SELSCAN__OPD_NULL, p) /* u, delta, A, B, C; y when need_y */
    if ((st = selscan__scan_sizes2(p, 0, d)) != SELSCAN_OK) return st;
    G = p->n_groups == 0 ? 1 : p->n_groups;
    q->batch = p->batch; q->dim = p->dim; q->L = p->seqlen; q->N = p->dstate; q->G = G; q->dpg = p->dim / G;
    q->rows = p->cu_seqlens ? p->n_seqs : p->batch;
    q->dt = p->dtype;
    q->softplus = (p->flags & SELSCAN_DELTA_SOFTPLUS) != 0;
    q->fixB = (p->flags & SELSCAN_FIXED_B) != 0;
    q->fixC = (p->flags & SELSCAN_FIXED_C) != 0;
    q->cu = p->cu_seqlens; q->nseq = p->n_seqs;
    {
        selscan__prob *dst = q;
        SELSCAN__SCAN_OPERANDS(SELSCAN__OPD_RESOLVE, p)
    }
    {
        const selscan__ten *ins[] = {SELSCAN__SCAN_OPERANDS(SELSCAN__OPD_INS, q)};
        for (i = 0; i < SELSCAN__COUNT(ins); i++)
            if ((st = selscan__check_strides(ins[i], 0)) != SELSCAN_OK) return st;
    }
    return SELSCAN_OK;
}

static selscan_status selscan__check_grads(const selscan__prob *q, const selscan_grads *g, selscan__grd *r) {
    selscan_status st;
    selscan_diag *d = q->diag;
    int i;
    if (!g) SELSCAN__FAIL(d, SELSCAN_ERR_NULL, "grads", MISSING);
    if (!g->dy.data) SELSCAN__FAIL(d, SELSCAN_ERR_NULL, "dy", MISSING);
    if (g->dz.data && !q->z.data) SELSCAN__FAIL(d, SELSCAN_ERR_NULL, "dz", WITHOUT_Z);
    {
        selscan__grd *dst = r;
        SELSCAN__GRAD_OPERANDS(SELSCAN__OPD_RESOLVE, g)
    }
    {
        const selscan__ten *ins[] = {SELSCAN__GRAD_OPERANDS(SELSCAN__OPD_INS, r)};   /* dy, dh_last */
        const selscan__ten *outs[] = {SELSCAN__GRAD_OPERANDS(SELSCAN__OPD_OUTS, r)}; /* du .. dh0 */
        for (i = 0; i < SELSCAN__COUNT(ins); i++)
            if ((st = selscan__check_strides(ins[i], 0)) != SELSCAN_OK) return st;
        for (i = 0; i < SELSCAN__COUNT(outs); i++)
            if ((st = selscan__check_strides(outs[i], 1)) != SELSCAN_OK) return st;
    }
    return SELSCAN_OK;
}

static int64_t selscan__align_up(int64_t x) {
    return (x + SELSCAN_WORKSPACE_ALIGN - 1) / SELSCAN_WORKSPACE_ALIGN * SELSCAN_WORKSPACE_ALIGN;
}

/* A size the caller is told: need plus the slack that lets any pointer be aligned up inside. */
static SELSCAN__MAYBE_UNUSED int64_t selscan__with_slack(int64_t need) { return need > 0 ? need + SELSCAN_WORKSPACE_ALIGN - 1 : 0; }

/* The caller's workspace pointer aligned up to SELSCAN_WORKSPACE_ALIGN, and the bytes left after
   the padding (0 when the padding does not fit). Every CPU entry point works on this. */
static SELSCAN__MAYBE_UNUSED void *selscan__ws_align(void *ws, size_t bytes, size_t *left) {
    size_t pad;
    if (!ws) { *left = bytes; return ws; }
    pad = SELSCAN__CAST(size_t, (SELSCAN_WORKSPACE_ALIGN - SELSCAN__RCAST(uintptr_t, ws) % SELSCAN_WORKSPACE_ALIGN) %
                                    SELSCAN_WORKSPACE_ALIGN);
    *left = bytes >= pad ? bytes - pad : 0;
    return SELSCAN__CAST(char *, ws) + (bytes >= pad ? pad : 0);
}

/* Workspace of the CPU entry points, in bytes (the fast path may need more than the reference;
   selscan_workspace_size() reports the larger). */
#ifndef SELSCAN_VALIDATION_ONLY
static int64_t selscan__ws_forward_ref(const selscan__prob *q) { return selscan__align_up(selscan__smul(q->N, 4)); }
#endif

static int64_t selscan__ws_backward_ref(const selscan__prob *q, const selscan__grd *r) {
    int64_t nck = (q->L + SELSCAN__CHUNK - 1) / SELSCAN__CHUNK + 1;
    int64_t floats = selscan__smul(nck + SELSCAN__CHUNK + 2, q->N); /* chunk-boundary states, one chunk's, dh */
    if (r->dB.data && !q->fixB) floats = selscan__sadd(floats, selscan__smul(q->N, q->L)); /* f32 accumulators of one (batch, group) */
    if (r->dC.data && !q->fixC) floats = selscan__sadd(floats, selscan__smul(q->N, q->L));
    return selscan__align_up(selscan__smul(floats, 4));
}

/* An (already aligned-up) workspace of bytes bytes for a need of need bytes (need <= 0: none). */
static selscan_status selscan__check_ws_d(const void *ws, size_t bytes, int64_t need, selscan_diag *d) {
    if (!selscan__size_ok(need)) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "workspace", SIZE_OVERFLOWS); /* 64 bits / size_t */
    if (need <= 0) return SELSCAN_OK;
    if (!ws) SELSCAN__FAIL(d, SELSCAN_ERR_WORKSPACE, "workspace", MISSING);
    if (bytes < SELSCAN__CAST(size_t, need)) SELSCAN__FAIL(d, SELSCAN_ERR_WORKSPACE, "workspace", TOO_SMALL);
    if (SELSCAN__RCAST(uintptr_t, ws) % SELSCAN_WORKSPACE_ALIGN != 0)
        SELSCAN__FAIL(d, SELSCAN_ERR_WORKSPACE, "workspace", MISALIGNED);
    return SELSCAN_OK;
}
static SELSCAN__MAYBE_UNUSED selscan_status selscan__check_ws(const void *ws, size_t bytes, int64_t need) {
    return selscan__check_ws_d(ws, bytes, need, NULL);
}

/* The forward's outputs and workspace, for a problem selscan__check_problem already accepted:
   outputs' strides, aliasing, workspace (ws_need < 0: not checked; ws already aligned up). */
static selscan_status selscan__validate_forward_outputs(const selscan__prob *q, const void *ws, size_t ws_bytes,
                                                        int64_t ws_need) {
    selscan_status st;
    const selscan__ten *outs[] = {SELSCAN__SCAN_OPERANDS(SELSCAN__OPD_OUTS, q)}; /* y, h_last */
    const selscan__ten *ins[] = {SELSCAN__SCAN_OPERANDS(SELSCAN__OPD_INS, q)};
    int i;
    for (i = 0; i < SELSCAN__COUNT(outs); i++)
        if ((st = selscan__check_strides(outs[i], 1)) != SELSCAN_OK) return st;
    if (ws_need >= 0 && (st = selscan__check_ws_d(ws, ws_bytes, ws_need, q->diag)) != SELSCAN_OK) return st;
    {
        int64_t cub = q->cu ? (q->nseq + 1) * 8 : 0;
        return selscan__check_alias_d(outs, SELSCAN__COUNT(outs), ins, SELSCAN__COUNT(ins), q->cu, cub, "overlaps cu_seqlens", ws_need > 0 ? ws : NULL,
                                      ws_need > 0 ? SELSCAN__CAST(int64_t, ws_bytes) : 0, q->diag);
    }
}

/* Full forward validation: problem, outputs' strides, aliasing, workspace. */
static selscan_status selscan__validate_forward(const selscan_problem *p, selscan__prob *q, const void *ws,
                                                size_t ws_bytes, int64_t ws_need) {
    selscan_status st = selscan__check_problem(p, q, 1);
    if (st != SELSCAN_OK) return st;
    return selscan__validate_forward_outputs(q, ws, ws_bytes, ws_need);
}

static selscan_status selscan__validate_backward(const selscan_problem *p, const selscan_grads *g, selscan__prob *q,
                                                 selscan__grd *r, const void *ws, size_t ws_bytes, int ws_kind) {
    selscan_status st = selscan__check_problem(p, q, 0);
    int64_t need;
    if (st != SELSCAN_OK) return st;
    if ((st = selscan__check_grads(q, g, r)) != SELSCAN_OK) return st;
    need = ws_kind ? selscan__ws_backward_ref(q, r) : -1;
    if (need >= 0 && (st = selscan__check_ws_d(ws, ws_bytes, need, q->diag)) != SELSCAN_OK) return st;
    {
        const selscan__ten *outs[] = {SELSCAN__GRAD_OPERANDS(SELSCAN__OPD_OUTS, r)};
        const selscan__ten *ins[] = {SELSCAN__SCAN_OPERANDS(SELSCAN__OPD_INS, q) SELSCAN__GRAD_OPERANDS(SELSCAN__OPD_INS, r)};
        int64_t cub = q->cu ? (q->nseq + 1) * 8 : 0;
        return selscan__check_alias_d(outs, SELSCAN__COUNT(outs), ins, SELSCAN__COUNT(ins), q->cu, cub, "overlaps cu_seqlens", need > 0 ? ws : NULL,
                                      need > 0 ? SELSCAN__CAST(int64_t, ws_bytes) : 0, q->diag);
    }
}

#ifndef SELSCAN_VALIDATION_ONLY
SELSCAN_DEF selscan_status selscan_validate(const selscan_problem *p) {
    selscan__prob q;
    return selscan__validate_forward(p, &q, NULL, 0, -1);
}

SELSCAN_DEF selscan_status selscan_validate_grads(const selscan_problem *p, const selscan_grads *g) {
    selscan__prob q;
    selscan__grd r;
    return selscan__validate_backward(p, g, &q, &r, NULL, 0, 0);
}

SELSCAN_DEF selscan_status selscan_check_sizes(const selscan_problem *p) {
    selscan_status st;
    if (!p) return SELSCAN_ERR_NULL;
    if ((st = selscan__scan_sizes1(p, 1, p->diag)) != SELSCAN_OK) return st;
    return selscan__scan_sizes2(p, 1, p->diag);
}

/* The fast CPU path's workspace for n_parts parts (defined in the fast CPU path section). */
static int64_t selscan__ws_fast(const selscan__prob *q, const selscan__grd *r, int64_t nparts);

SELSCAN_DEF selscan_status selscan_workspace_size(const selscan_problem *p, const selscan_grads *g, size_t *bytes) {
    selscan__prob q;
    selscan__grd r;
    selscan_status st;
    int64_t ref, fast;
    if (!bytes) return selscan__fail(p ? p->diag : NULL, SELSCAN_ERR_NULL, "bytes", SELSCAN_RULE_MISSING);
    if (g) {
        if ((st = selscan__validate_backward(p, g, &q, &r, NULL, 0, 0)) != SELSCAN_OK) return st;
        ref = selscan__ws_backward_ref(&q, &r);
        fast = selscan__ws_fast(&q, &r, 1);
    } else {
        if ((st = selscan__validate_forward(p, &q, NULL, 0, -1)) != SELSCAN_OK) return st;
        ref = selscan__ws_forward_ref(&q);
        fast = selscan__ws_fast(&q, NULL, 1);
    }
    /* enough for the reference and the fast path, plus the alignment slack (any pointer works) */
    if (!selscan__size_ok(ref) || !selscan__size_ok(fast) || !selscan__size_ok(selscan__with_slack(ref > fast ? ref : fast)))
        return selscan__fail(p->diag, SELSCAN_ERR_SHAPE, "workspace", SELSCAN_RULE_SIZE_OVERFLOWS); /* 64 bits / size_t */
    *bytes = SELSCAN__CAST(size_t, selscan__with_slack(ref > fast ? ref : fast));
    return SELSCAN_OK;
}

#endif /* SELSCAN_VALIDATION_ONLY */
#ifndef SELSCAN_VALIDATION_ONLY
/* --------------------------------------------------------------------------------------------- */
/* >>reference                       scalar reference                                           */
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
    if (q->delta_bias.data) x += SELSCAN__CAST(const float *, q->delta_bias.data)[SELSCAN__AT1(q->delta_bias, d)];
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
                if (q->h_last.data)
                    for (n = 0; n < q->N; n++)
                        SELSCAN__CAST(float *, q->h_last.data)[SELSCAN__AT3(q->h_last, row, d, n)] = h[n];
            }
        }
}

SELSCAN_DEF selscan_status selscan_forward_ref(const selscan_problem *p, void *workspace, size_t workspace_bytes) {
    selscan__prob q;
    selscan_status st = selscan__check_problem(p, &q, 1);
    if (st != SELSCAN_OK) return st;
    workspace = selscan__ws_align(workspace, workspace_bytes, &workspace_bytes);
    st = selscan__validate_forward_outputs(&q, workspace, workspace_bytes, selscan__ws_forward_ref(&q));
    if (st != SELSCAN_OK) return st;
    { /* libm's expf / log1pf may set errno (ERANGE): the caller's errno is kept */
        const int saved_errno = errno;
        selscan__ref_forward(&q, SELSCAN__CAST(float *, workspace));
        errno = saved_errno;
    }
    return SELSCAN_OK;
}

/* Zero the gradients that are sums over batch, time or channels before accumulating. */
static void selscan__zero_sums(const selscan__prob *q, const selscan__grd *r) {
    int64_t d, n;
    for (d = 0; d < q->dim; d++) {
        if (r->dD.data) SELSCAN__CAST(float *, r->dD.data)[SELSCAN__AT1(r->dD, d)] = 0.0f;
        if (r->ddelta_bias.data) SELSCAN__CAST(float *, r->ddelta_bias.data)[SELSCAN__AT1(r->ddelta_bias, d)] = 0.0f;
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
    float dD = 0.0f, ddelta_bias = 0.0f;
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
        dh[n] = r->dh_last.data ? SELSCAN__CAST(const float *, r->dh_last.data)[SELSCAN__AT3(r->dh_last, row, d, n)] : 0.0f;
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
                                   selscan__canon(dyv * y0 * sg * (1.0f + z * (1.0f - sg))));
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
            ddelta_bias += ddt;
            if (r->du.data) selscan__store(r->du.data, SELSCAN__AT3(r->du, b, d, t), q->dt, selscan__canon(du));
            if (r->ddelta.data) selscan__store(r->ddelta.data, SELSCAN__AT3(r->ddelta, b, d, t), q->dt, selscan__canon(ddt));
        }
    }
    if (r->dh0.data)
        for (n = 0; n < N; n++) SELSCAN__CAST(float *, r->dh0.data)[SELSCAN__AT3(r->dh0, row, d, n)] = selscan__canon(dh[n]);
    if (r->dD.data) SELSCAN__CAST(float *, r->dD.data)[SELSCAN__AT1(r->dD, d)] += dD;
    if (r->ddelta_bias.data) SELSCAN__CAST(float *, r->ddelta_bias.data)[SELSCAN__AT1(r->ddelta_bias, d)] += ddelta_bias;
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
                    if (dBacc) selscan__store(r->dB.data, SELSCAN__AT4(r->dB, b, g, n, t), q->dt, selscan__canon(dBacc[n * q->L + t]));
                    if (dCacc) selscan__store(r->dC.data, SELSCAN__AT4(r->dC, b, g, n, t), q->dt, selscan__canon(dCacc[n * q->L + t]));
                }
        }
    for (d = 0; d < q->dim; d++) { /* the sums' NaNs: the default quiet NaN (see selscan__canon) */
        float *x;
        if (r->dD.data) { x = SELSCAN__CAST(float *, r->dD.data) + SELSCAN__AT1(r->dD, d); *x = selscan__canon(*x); }
        if (r->ddelta_bias.data) { x = SELSCAN__CAST(float *, r->ddelta_bias.data) + SELSCAN__AT1(r->ddelta_bias, d); *x = selscan__canon(*x); }
        for (n = 0; n < N; n++) {
            if (r->dA.data) { x = SELSCAN__CAST(float *, r->dA.data) + SELSCAN__AT2(r->dA, d, n); *x = selscan__canon(*x); }
            if (r->dB.data && q->fixB) { x = SELSCAN__CAST(float *, r->dB.data) + SELSCAN__AT2(r->dB, d, n); *x = selscan__canon(*x); }
            if (r->dC.data && q->fixC) { x = SELSCAN__CAST(float *, r->dC.data) + SELSCAN__AT2(r->dC, d, n); *x = selscan__canon(*x); }
        }
    }
}

SELSCAN_DEF selscan_status selscan_backward_ref(const selscan_problem *p, const selscan_grads *g, void *workspace,
                                                size_t workspace_bytes) {
    selscan__prob q;
    selscan__grd r;
    selscan_status st;
    workspace = selscan__ws_align(workspace, workspace_bytes, &workspace_bytes);
    st = selscan__validate_backward(p, g, &q, &r, workspace, workspace_bytes, 1);
    if (st != SELSCAN_OK) return st;
    { /* the caller's errno is kept (see selscan_forward_ref) */
        const int saved_errno = errno;
        selscan__ref_backward(&q, &r, SELSCAN__CAST(float *, workspace));
        errno = saved_errno;
    }
    return SELSCAN_OK;
}

#endif /* SELSCAN_VALIDATION_ONLY */
/* --------------------------------------------------------------------------------------------- */
/* >>step                                  step                                                   */
/* --------------------------------------------------------------------------------------------- */

typedef struct selscan__stp {
    int64_t batch, dim, N, G, dpg, ncache;
    selscan_dtype dt;
    int softplus, fixB, fixC;
    int DT, delta_biasT; /* SELSCAN_STEP_D_T, SELSCAN_STEP_DELTA_BIAS_T: D, delta_bias are T (their selscan__ten's dt) */
    int stT;  /* SELSCAN_STEP_STATE_T: the state is T (state.dt) */
    int alog; /* SELSCAN_STEP_A_LOG: A holds A_log (A = -expf(A_log)) */
    const int32_t *idx;
    selscan__ten state, u, delta, A, B, C, D, z, delta_bias, y;
    selscan_diag *diag; /* the step problem's diag (may be NULL) */
} selscan__stp;

/* idx_on_host: state_index is host memory and is checked here (CPU); 0 for a device pointer
   (CUDA), which is never dereferenced (rows outside [0, n_cache) are padding there). */
/* 1 when no non-negative value of idx[0..n) occurs twice. No allocation: a stack bitmap of
   SELSCAN__IDX_WIN values slides over the index range, visiting only windows that hold an index
   (each pass marks its window and finds the next one), so the cost is n * (windows holding an
   index): one pass for n_cache <= 65536, O(n * min(n, n_cache / 65536)) at worst; small n:
   the pairwise check. */
#define SELSCAN__IDX_WIN 65536
static int selscan__idx_unique(const int32_t *idx, int64_t n) {
    uint64_t bits[SELSCAN__IDX_WIN / 64];
    int64_t i, j, lo = 0;
    if (n <= 32) {
        for (i = 0; i < n; i++)
            for (j = i + 1; j < n && idx[i] >= 0; j++)
                if (idx[j] == idx[i]) return 0;
        return 1;
    }
    for (;;) { /* window [lo, lo + SELSCAN__IDX_WIN) */
        int64_t next = -1;
        memset(bits, 0, sizeof bits);
        for (i = 0; i < n; i++) {
            const int64_t v = idx[i];
            if (v < lo) continue; /* padding (negative) or an earlier window */
            if (v >= lo + SELSCAN__IDX_WIN) {
                if (next < 0 || v < next) next = v;
                continue;
            }
            {
                const uint64_t m = SELSCAN__CAST(uint64_t, 1) << ((v - lo) % 64);
                if (bits[(v - lo) / 64] & m) return 0;
                bits[(v - lo) / 64] |= m;
            }
        }
        if (next < 0) return 1;
        lo = next; /* the next window starts at the smallest index not yet seen */
    }
}

/* >>n-cache: the steps' (the step's, the conv update's) state rows, read in one place. The entry
   points (validation, CPU and CUDA runs: as_is 0) read n_cache 0 as batch, so that a zeroed struct
   steps rows 0 .. batch - 1. selscan_check_*sizes (as_is 1, empty_ok) read it as it is: a binding
   describes a framework's state tensor, whose rows may be 0 (a cache of no rows: every batch row
   padding, no state_index row >= 0 allowed); such a call, like one with batch or dim 0, is an
   empty problem a binding answers itself (y 0, the state untouched: bindings/common >>bind-empty)
   and never hands to an entry point, which would refuse it or read it as batch rows. */
static int64_t selscan__cache_rows(int64_t n_cache, int64_t batch, int as_is) {
    return n_cache == 0 && !as_is ? batch : n_cache;
}

/* >>size-rules of the step: before the operands (n_cache as >>n-cache reads it: as it is when empty_ok) */
static selscan_status selscan__step_sizes1(const selscan_step_problem *s, int empty_ok, int has_index, selscan_diag *d) {
    const int64_t G = s->n_groups == 0 ? 1 : s->n_groups;
    const int64_t ncache = selscan__cache_rows(s->n_cache, s->batch, empty_ok);
    const int empty = empty_ok && (s->batch == 0 || s->dim == 0);
    if (!selscan__dtype_ok(s->dtype)) SELSCAN__FAIL(d, SELSCAN_ERR_DTYPE, "dtype", UNKNOWN_DTYPE);
    if (s->flags & ~SELSCAN__STEP_KNOWN_FLAGS) SELSCAN__FAIL(d, SELSCAN_ERR_UNSUPPORTED, "flags", UNKNOWN_FLAG);
    SELSCAN__SIZE_RULE(d, "batch", s->batch, empty_ok);
    SELSCAN__SIZE_RULE(d, "dim", s->dim, empty_ok);
    SELSCAN__SIZE_RULE(d, "dstate", s->dstate, empty);
    if (G <= 0 || s->dim % G != 0) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "n_groups", NOT_DIVIDING);
    SELSCAN__SIZE_RULE(d, "n_cache", ncache, empty_ok);
    if (!has_index && ncache != s->batch) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "n_cache", NOT_BATCH);
    if (s->state_index && !selscan__aligned(s->state_index, 4))
        SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "state_index", MISALIGNED);
    return SELSCAN_OK;
}

/* host state rows (the steps' state_index: batch entries): every one below n_cache, no row twice */
static selscan_status selscan__index_rules(const int32_t *idx, int64_t batch, int64_t ncache, selscan_diag *d) {
    int64_t i;
    for (i = 0; i < batch; i++)
        if (idx[i] >= ncache) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "state_index", INDEX_RANGE);
    if (!selscan__idx_unique(idx, batch)) SELSCAN__FAIL(d, SELSCAN_ERR_ALIAS, "state_index", ROW_TWICE);
    return SELSCAN_OK;
}

/* the step's: after the operands (element counts; the host indices' values, idx_on_host) */
static selscan_status selscan__step_sizes2(const selscan_step_problem *s, int64_t ncache, int idx_on_host, selscan_diag *d) {
    const int64_t G = s->n_groups == 0 ? 1 : s->n_groups;
    if (!selscan__count_ok(ncache, s->dim, s->dstate, 1)) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "n_cache * dim * dstate", COUNT_OVERFLOWS);
    if (!selscan__count_ok(s->batch, s->dim, 1, 1)) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "batch * dim", COUNT_OVERFLOWS);
    if (!selscan__count_ok(s->batch, G, s->dstate, 1)) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "batch * n_groups * dstate", COUNT_OVERFLOWS);
    if (s->state_index && idx_on_host) return selscan__index_rules(s->state_index, s->batch, ncache, d);
    return SELSCAN_OK;
}

static selscan_status selscan__validate_step_ex(const selscan_step_problem *s, selscan__stp *q, int idx_on_host) {
    int64_t G, i;
    selscan_status st;
    selscan_diag *d;
    if (!s) return SELSCAN_ERR_NULL;
    d = s->diag;
    q->diag = d;
    if ((st = selscan__step_sizes1(s, 0, s->state_index != NULL, d)) != SELSCAN_OK) return st;
    G = s->n_groups == 0 ? 1 : s->n_groups;
    q->ncache = selscan__cache_rows(s->n_cache, s->batch, 0);
    SELSCAN__STEP_OPERANDS(SELSCAN__OPD_NULL, s) /* state, u, delta, A, B, C, y */
    q->batch = s->batch; q->dim = s->dim; q->N = s->dstate; q->G = G; q->dpg = s->dim / G;
    q->dt = s->dtype;
    q->softplus = (s->flags & SELSCAN_DELTA_SOFTPLUS) != 0;
    q->fixB = (s->flags & SELSCAN_FIXED_B) != 0;
    q->fixC = (s->flags & SELSCAN_FIXED_C) != 0;
    q->DT = (s->flags & SELSCAN_STEP_D_T) != 0;
    q->delta_biasT = (s->flags & SELSCAN_STEP_DELTA_BIAS_T) != 0;
    q->stT = (s->flags & SELSCAN_STEP_STATE_T) != 0;
    q->alog = (s->flags & SELSCAN_STEP_A_LOG) != 0;
    q->idx = s->state_index;
    if ((st = selscan__step_sizes2(s, q->ncache, idx_on_host, d)) != SELSCAN_OK) return st;
    {
        selscan__stp *dst = q;
        SELSCAN__STEP_OPERANDS(SELSCAN__OPD_RESOLVE, s)
    }
    {
        const selscan__ten *ins[] = {SELSCAN__STEP_OPERANDS(SELSCAN__OPD_INS, q)};
        const selscan__ten *outs[] = {SELSCAN__STEP_OPERANDS(SELSCAN__OPD_OUTS, q)}; /* state, y */
        for (i = 0; i < SELSCAN__COUNT(ins); i++)
            if ((st = selscan__check_strides(ins[i], 0)) != SELSCAN_OK) return st;
        for (i = 0; i < SELSCAN__COUNT(outs); i++)
            if ((st = selscan__check_strides(outs[i], 1)) != SELSCAN_OK) return st;
        return selscan__check_alias_d(outs, SELSCAN__COUNT(outs), ins, SELSCAN__COUNT(ins), q->idx, q->idx ? q->batch * 4 : 0, "overlaps state_index", NULL, 0,
                                      d);
    }
}

#ifndef SELSCAN_VALIDATION_ONLY
static selscan_status selscan__validate_step(const selscan_step_problem *s, selscan__stp *q) {
    return selscan__validate_step_ex(s, q, 1);
}

SELSCAN_DEF selscan_status selscan_validate_step(const selscan_step_problem *s) {
    selscan__stp q;
    return selscan__validate_step(s, &q);
}

SELSCAN_DEF selscan_status selscan_check_step_sizes(const selscan_step_problem *s, int has_index) {
    selscan_status st;
    if (!s) return SELSCAN_ERR_NULL;
    if ((st = selscan__step_sizes1(s, 1, has_index || s->state_index, s->diag)) != SELSCAN_OK) return st;
    return selscan__step_sizes2(s, s->n_cache, 1, s->diag);
}

static void selscan__ref_step_all(const selscan__stp *q) {
    const float *A = SELSCAN__CAST(const float *, q->A.data);
    int64_t b, d, n;
    for (b = 0; b < q->batch; b++) {
        const int64_t row = q->idx ? q->idx[b] : b;
        for (d = 0; d < q->dim; d++) {
            const int64_t g = d / q->dpg;
            float x, dt, y = 0.0f;
            if (row < 0) { selscan__store(q->y.data, SELSCAN__AT2(q->y, b, d), q->dt, 0.0f); continue; }
            x = selscan__load(q->u.data, SELSCAN__AT2(q->u, b, d), q->dt);
            dt = selscan__load(q->delta.data, SELSCAN__AT2(q->delta, b, d), q->dt);
            if (q->delta_bias.data) dt += selscan__load(q->delta_bias.data, SELSCAN__AT1(q->delta_bias, d), q->delta_bias.dt);
            if (q->softplus) dt = selscan__softplus(dt);
            for (n = 0; n < q->N; n++) {
                const float Bv = q->fixB ? SELSCAN__CAST(const float *, q->B.data)[SELSCAN__AT2(q->B, d, n)]
                                         : selscan__load(q->B.data, SELSCAN__AT3(q->B, b, g, n), q->dt);
                const float Cv = q->fixC ? SELSCAN__CAST(const float *, q->C.data)[SELSCAN__AT2(q->C, d, n)]
                                         : selscan__load(q->C.data, SELSCAN__AT3(q->C, b, g, n), q->dt);
                const int64_t ho = SELSCAN__AT3(q->state, row, d, n);
                /* in f32 (rounded to T on the store with SELSCAN_STEP_STATE_T; y from the f32 value) */
                const float h = selscan__load(q->state.data, ho, q->state.dt);
                const float a = q->alog ? -expf(A[SELSCAN__AT2(q->A, d, n)]) : A[SELSCAN__AT2(q->A, d, n)]; /* SELSCAN_STEP_A_LOG */
                const float hn = expf(dt * a) * h + dt * Bv * x;
                selscan__store(q->state.data, ho, q->state.dt, hn);
                y += Cv * hn;
            }
            if (q->D.data) y += selscan__load(q->D.data, SELSCAN__AT1(q->D, d), q->D.dt) * x;
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
    { /* the caller's errno is kept (see selscan_forward_ref) */
        const int saved_errno = errno;
        selscan__ref_step_all(&q);
        errno = saved_errno;
    }
    return SELSCAN_OK;
}

#endif /* SELSCAN_VALIDATION_ONLY */
/* --------------------------------------------------------------------------------------------- */
/* >>conv                    causal conv1d: validation and reference                             */
/* --------------------------------------------------------------------------------------------- */
/* The math and the operands: >>conv-api. Validation here (also compiled with
   SELSCAN_VALIDATION_ONLY: the CUDA launchers use it), then >>conv-reference, the exact scalar
   oracle. The fast path: >>conv-entry (drivers and entry points) and >>fast-conv (the kernels). */

typedef struct selscan__cprob {
    int64_t batch, dim, L, W, rows; /* rows: state rows (batch or n_seqs) */
    selscan_dtype dt;
    int silu;
    const int64_t *cu;
    int64_t nseq;
    selscan__ten x, weight, bias, init_state, y, final_state;
    selscan_diag *diag;
} selscan__cprob;

typedef struct selscan__cgrd {
    selscan__ten dy, dfinal_state, dx, dweight, dbias, dinit_state;
} selscan__cgrd;

typedef struct selscan__cstp {
    int64_t batch, dim, W, S, ncache, L; /* S: state_len; L: tokens per row */
    selscan_dtype dt;
    int silu;
    int weightT, biasT; /* SELSCAN_CONV_PARAMS_T: weight and bias are T (both; as their selscan__ten's dt) */
    const int32_t *idx;
    selscan__ten state, x, weight, bias, y;
    selscan_diag *diag;
} selscan__cstp;

/* channels a CPU work item (a multiple of every vector width: >>conv-entry); steps a chunk of a
   block's staging in the fast path (a tile's: SELSCAN__FT, twice as many: the same buffers) */
#define SELSCAN__CONV_CB 64
#define SELSCAN__CONV_FT 32

static selscan_status selscan__conv_check_width(int64_t w, selscan_diag *d) {
    if (w <= 0) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "width", NOT_POSITIVE);
    if (w < SELSCAN_CONV_MIN_WIDTH || w > SELSCAN_CONV_MAX_WIDTH) SELSCAN__FAIL(d, SELSCAN_ERR_UNSUPPORTED, "width", WIDTH);
    return SELSCAN_OK;
}

/* Sizes, flags, pointers, sequence offsets and the inputs' strides (the outputs: below). */
/* >>size-rules of the conv: before the operands (dtype, flags, sizes, width) */
static selscan_status selscan__conv_sizes1(const selscan_conv_problem *p, int empty_ok, selscan_diag *d) {
    if (!selscan__dtype_ok(p->dtype)) SELSCAN__FAIL(d, SELSCAN_ERR_DTYPE, "dtype", UNKNOWN_DTYPE);
    if (p->flags & ~SELSCAN__CONV_KNOWN_FLAGS) SELSCAN__FAIL(d, SELSCAN_ERR_UNSUPPORTED, "flags", UNKNOWN_FLAG);
    SELSCAN__SIZE_RULE(d, "batch", p->batch, empty_ok);
    SELSCAN__SIZE_RULE(d, "dim", p->dim, empty_ok);
    SELSCAN__SIZE_RULE(d, "seqlen", p->seqlen, empty_ok);
    return selscan__conv_check_width(p->width, d);
}

/* the conv's: after the operands (packed sequences: the scan's rules; element counts) */
static selscan_status selscan__conv_sizes2(const selscan_conv_problem *p, int empty_ok, selscan_diag *d) {
    const int packed = p->cu_seqlens || (empty_ok && p->n_seqs != 0);
    selscan_status st = selscan__packed_rules(p->cu_seqlens, p->n_seqs, p->batch, p->seqlen, p->dim, p->width, empty_ok, d);
    if (st != SELSCAN_OK) return st;
    /* the diag names the sizes whose product overflows (the scan's rule; with cu_seqlens,
       n_seqs * dim * width was checked above) */
    if (!selscan__count_ok(p->batch, p->dim, p->seqlen, 1)) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "batch * dim * seqlen", COUNT_OVERFLOWS);
    if (!selscan__count_ok(packed ? p->n_seqs : p->batch, p->dim, p->width, 1))
        SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "batch * dim * width", COUNT_OVERFLOWS);
    return SELSCAN_OK;
}

static SELSCAN__MAYBE_UNUSED selscan_status selscan__conv_check_problem(const selscan_conv_problem *p,
                                                                        selscan__cprob *q, int need_y) {
    selscan_status st;
    selscan_diag *d;
    int64_t i;
    if (!p) return SELSCAN_ERR_NULL;
    d = p->diag;
    q->diag = d;
    if ((st = selscan__conv_sizes1(p, 0, d)) != SELSCAN_OK) return st;
    SELSCAN__CONV_OPERANDS(SELSCAN__OPD_NULL, p) /* x, weight; y when need_y */
    if ((st = selscan__conv_sizes2(p, 0, d)) != SELSCAN_OK) return st;
    q->batch = p->batch; q->dim = p->dim; q->L = p->seqlen; q->W = p->width;
    q->rows = p->cu_seqlens ? p->n_seqs : p->batch;
    q->dt = p->dtype;
    q->silu = (p->flags & SELSCAN_CONV_SILU) != 0;
    q->cu = p->cu_seqlens; q->nseq = p->n_seqs;
    {
        selscan__cprob *dst = q;
        SELSCAN__CONV_OPERANDS(SELSCAN__OPD_RESOLVE, p)
    }
    {
        const selscan__ten *ins[] = {SELSCAN__CONV_OPERANDS(SELSCAN__OPD_INS, q)};
        for (i = 0; i < SELSCAN__COUNT(ins); i++)
            if ((st = selscan__check_strides(ins[i], 0)) != SELSCAN_OK) return st;
    }
    return SELSCAN_OK;
}

/* The forward: problem, outputs' strides, aliasing. */
static SELSCAN__MAYBE_UNUSED selscan_status selscan__conv_validate_forward(const selscan_conv_problem *p,
                                                                          selscan__cprob *q) {
    selscan_status st = selscan__conv_check_problem(p, q, 1);
    if (st != SELSCAN_OK) return st;
    {
        const selscan__ten *outs[] = {SELSCAN__CONV_OPERANDS(SELSCAN__OPD_OUTS, q)}; /* y, final_state */
        const selscan__ten *ins[] = {SELSCAN__CONV_OPERANDS(SELSCAN__OPD_INS, q)};
        int i;
        for (i = 0; i < SELSCAN__COUNT(outs); i++)
            if ((st = selscan__check_strides(outs[i], 1)) != SELSCAN_OK) return st;
        return selscan__check_alias_d(outs, SELSCAN__COUNT(outs), ins, SELSCAN__COUNT(ins), q->cu, q->cu ? (q->nseq + 1) * 8 : 0, "overlaps cu_seqlens",
                                      NULL, 0, q->diag);
    }
}

/* The backward: problem (y not needed), gradients' shapes and strides, aliasing. */
static SELSCAN__MAYBE_UNUSED selscan_status selscan__conv_validate_backward(const selscan_conv_problem *p,
                                                                           const selscan_conv_grads *g,
                                                                           selscan__cprob *q, selscan__cgrd *r) {
    selscan_status st = selscan__conv_check_problem(p, q, 0);
    selscan_diag *d;
    int i;
    if (st != SELSCAN_OK) return st;
    d = q->diag;
    if (!g) SELSCAN__FAIL(d, SELSCAN_ERR_NULL, "grads", MISSING);
    if (!g->dy.data) SELSCAN__FAIL(d, SELSCAN_ERR_NULL, "dy", MISSING);
    {
        selscan__cgrd *dst = r;
        SELSCAN__CONV_GRAD_OPERANDS(SELSCAN__OPD_RESOLVE, g)
    }
    {
        const selscan__ten *gins[] = {SELSCAN__CONV_GRAD_OPERANDS(SELSCAN__OPD_INS, r)}; /* dy, dfinal_state */
        const selscan__ten *outs[] = {SELSCAN__CONV_GRAD_OPERANDS(SELSCAN__OPD_OUTS, r)};
        const selscan__ten *ins[] = {SELSCAN__CONV_OPERANDS(SELSCAN__OPD_INS, q) SELSCAN__CONV_GRAD_OPERANDS(SELSCAN__OPD_INS, r)};
        for (i = 0; i < SELSCAN__COUNT(gins); i++)
            if ((st = selscan__check_strides(gins[i], 0)) != SELSCAN_OK) return st;
        for (i = 0; i < SELSCAN__COUNT(outs); i++)
            if ((st = selscan__check_strides(outs[i], 1)) != SELSCAN_OK) return st;
        return selscan__check_alias_d(outs, SELSCAN__COUNT(outs), ins, SELSCAN__COUNT(ins), q->cu, q->cu ? (q->nseq + 1) * 8 : 0, "overlaps cu_seqlens",
                                      NULL, 0, d);
    }
}

/* >>size-rules of the conv's update: before the operands (n_cache as >>n-cache reads it, as the step's) */
static selscan_status selscan__conv_step_sizes1(const selscan_conv_step_problem *s, int empty_ok, int has_index,
                                                selscan_diag *d) {
    selscan_status st;
    const int64_t ncache = selscan__cache_rows(s->n_cache, s->batch, empty_ok);
    if (!selscan__dtype_ok(s->dtype)) SELSCAN__FAIL(d, SELSCAN_ERR_DTYPE, "dtype", UNKNOWN_DTYPE);
    if (s->flags & ~SELSCAN__CONV_STEP_KNOWN_FLAGS) SELSCAN__FAIL(d, SELSCAN_ERR_UNSUPPORTED, "flags", UNKNOWN_FLAG);
    SELSCAN__SIZE_RULE(d, "batch", s->batch, empty_ok);
    SELSCAN__SIZE_RULE(d, "dim", s->dim, empty_ok);
    if (s->seqlen < 0) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "seqlen", NEGATIVE); /* 0 means 1 */
    if ((st = selscan__conv_check_width(s->width, d)) != SELSCAN_OK) return st;
    if (s->state_len < s->width - 1 || s->state_len <= 0)
        SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "state_len", BELOW_WIDTH);
    SELSCAN__SIZE_RULE(d, "n_cache", ncache, empty_ok);
    if (!has_index && ncache != s->batch) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "n_cache", NOT_BATCH);
    if (s->state_index && !selscan__aligned(s->state_index, 4))
        SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "state_index", MISALIGNED);
    return SELSCAN_OK;
}

/* the update's: after the operands (element counts; the host indices' values, idx_on_host) */
static selscan_status selscan__conv_step_sizes2(const selscan_conv_step_problem *s, int64_t ncache, int idx_on_host,
                                                selscan_diag *d) {
    const int64_t L = s->seqlen == 0 ? 1 : s->seqlen;
    if (!selscan__count_ok(ncache, s->dim, s->state_len, 1)) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "n_cache * dim * state_len", COUNT_OVERFLOWS);
    if (!selscan__count_ok(s->batch, s->dim, L, 1)) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "batch * dim * seqlen", COUNT_OVERFLOWS);
    if (!selscan__count_ok(s->dim, s->width, 1, 1)) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "dim * width", COUNT_OVERFLOWS);
    if (s->state_index && idx_on_host) return selscan__index_rules(s->state_index, s->batch, ncache, d);
    return SELSCAN_OK;
}

/* The decode update. idx_on_host: state_index is host memory and checked here (CPU); 0 for a
   device pointer (CUDA), never dereferenced. */
static SELSCAN__MAYBE_UNUSED selscan_status selscan__conv_validate_step_ex(const selscan_conv_step_problem *s,
                                                                          selscan__cstp *q, int idx_on_host) {
    selscan_status st;
    selscan_diag *d;
    int64_t i;
    if (!s) return SELSCAN_ERR_NULL;
    d = s->diag;
    q->diag = d;
    if ((st = selscan__conv_step_sizes1(s, 0, s->state_index != NULL, d)) != SELSCAN_OK) return st;
    q->ncache = selscan__cache_rows(s->n_cache, s->batch, 0);
    q->L = s->seqlen == 0 ? 1 : s->seqlen;
    SELSCAN__CONV_STEP_OPERANDS(SELSCAN__OPD_NULL, s) /* state, x, weight, y */
    q->batch = s->batch; q->dim = s->dim; q->W = s->width; q->S = s->state_len;
    q->dt = s->dtype;
    q->silu = (s->flags & SELSCAN_CONV_SILU) != 0;
    q->weightT = q->biasT = (s->flags & SELSCAN_CONV_PARAMS_T) != 0;
    q->idx = s->state_index;
    if ((st = selscan__conv_step_sizes2(s, q->ncache, idx_on_host, d)) != SELSCAN_OK) return st;
    {
        selscan__cstp *dst = q;
        SELSCAN__CONV_STEP_OPERANDS(SELSCAN__OPD_RESOLVE, s)
    }
    {
        const selscan__ten *ins[] = {SELSCAN__CONV_STEP_OPERANDS(SELSCAN__OPD_INS, q)};
        const selscan__ten *outs[] = {SELSCAN__CONV_STEP_OPERANDS(SELSCAN__OPD_OUTS, q)}; /* state, y */
        for (i = 0; i < SELSCAN__COUNT(ins); i++)
            if ((st = selscan__check_strides(ins[i], 0)) != SELSCAN_OK) return st;
        for (i = 0; i < SELSCAN__COUNT(outs); i++)
            if ((st = selscan__check_strides(outs[i], 1)) != SELSCAN_OK) return st;
        return selscan__check_alias_d(outs, SELSCAN__COUNT(outs), ins, SELSCAN__COUNT(ins), q->idx, q->idx ? q->batch * 4 : 0, "overlaps state_index", NULL,
                                      0, d);
    }
}

#ifndef SELSCAN_VALIDATION_ONLY
SELSCAN_DEF selscan_status selscan_validate_conv(const selscan_conv_problem *p) {
    selscan__cprob q;
    return selscan__conv_validate_forward(p, &q);
}

SELSCAN_DEF selscan_status selscan_validate_conv_grads(const selscan_conv_problem *p, const selscan_conv_grads *g) {
    selscan__cprob q;
    selscan__cgrd r;
    return selscan__conv_validate_backward(p, g, &q, &r);
}

SELSCAN_DEF selscan_status selscan_validate_conv_step(const selscan_conv_step_problem *s) {
    selscan__cstp q;
    return selscan__conv_validate_step_ex(s, &q, 1);
}

SELSCAN_DEF selscan_status selscan_check_conv_sizes(const selscan_conv_problem *p) {
    selscan_status st;
    if (!p) return SELSCAN_ERR_NULL;
    if ((st = selscan__conv_sizes1(p, 1, p->diag)) != SELSCAN_OK) return st;
    return selscan__conv_sizes2(p, 1, p->diag);
}

SELSCAN_DEF selscan_status selscan_check_conv_step_sizes(const selscan_conv_step_problem *s, int has_index) {
    selscan_status st;
    if (!s) return SELSCAN_ERR_NULL;
    if ((st = selscan__conv_step_sizes1(s, 1, has_index || s->state_index, s->diag)) != SELSCAN_OK) return st;
    return selscan__conv_step_sizes2(s, s->n_cache, 1, s->diag);
}

/* ---- >>conv-reference: the exact scalar oracle ---------------------------------------------- */
/* Per (batch row, channel, sequence) a window of the last W inputs in f32; the sum in the order
   of >>conv-api (bias, then k = 0 .. W-1), silu as x * sigmoid(x) with expf. The backward walks
   forward once: each step's dpre adds w[k] * dpre to the W positions it read (an accumulator
   window), and the oldest position, complete then, is written (dx, or dinit_state before the
   sequence start); dweight and dbias are summed per channel over batch rows, then steps. */

/* No contraction of a * b + c into fused operations (gcc's GNU modes do it where the target has
   one, e.g. arm64): the reference is the same arithmetic on every machine. */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

static float selscan__silu_f(float x) { return x * selscan__sigmoid(x); }

/* The sequences of batch row b: [t0, t1) and the state row they use (>>conv-api). */
static int64_t selscan__conv_nseg(const selscan__cprob *q) { return q->cu ? q->nseq : 1; }
static void selscan__conv_seg(const selscan__cprob *q, int64_t b, int64_t k, int64_t *t0, int64_t *t1, int64_t *row) {
    if (q->cu) { *t0 = q->cu[k]; *t1 = q->cu[k + 1]; *row = k; }
    else { *t0 = 0; *t1 = q->L; *row = b; }
}

static void selscan__conv_ref_forward(const selscan__cprob *q) {
    const int H = SELSCAN__CAST(int, q->W) - 1;
    int64_t b, d, s, t;
    int k;
    for (b = 0; b < q->batch; b++)
        for (d = 0; d < q->dim; d++) {
            float w[SELSCAN_CONV_MAX_WIDTH], win[SELSCAN_CONV_MAX_WIDTH];
            const float bias = q->bias.data ? SELSCAN__CAST(const float *, q->bias.data)[SELSCAN__AT1(q->bias, d)] : 0.0f;
            for (k = 0; k <= H; k++) w[k] = SELSCAN__CAST(const float *, q->weight.data)[SELSCAN__AT2(q->weight, d, k)];
            for (s = 0; s < selscan__conv_nseg(q); s++) {
                int64_t t0, t1, row;
                selscan__conv_seg(q, b, s, &t0, &t1, &row);
                for (k = 0; k < H; k++)
                    win[k] = q->init_state.data ? selscan__load(q->init_state.data, SELSCAN__AT3(q->init_state, row, d, k), q->dt) : 0.0f;
                for (t = t0; t < t1; t++) {
                    float acc = bias;
                    win[H] = selscan__load(q->x.data, SELSCAN__AT3(q->x, b, d, t), q->dt);
                    for (k = 0; k <= H; k++) acc += w[k] * win[k];
                    if (q->silu) acc = selscan__silu_f(acc);
                    selscan__store(q->y.data, SELSCAN__AT3(q->y, b, d, t), q->dt, acc);
                    for (k = 0; k < H; k++) win[k] = win[k + 1];
                }
                if (q->final_state.data)
                    for (k = 0; k < H; k++) selscan__store(q->final_state.data, SELSCAN__AT3(q->final_state, row, d, k), q->dt, win[k]);
            }
        }
}

/* The gradient v of input position pos of sequence [t0, t1) (row: its state row): dx, or
   dinit_state for positions before t0. */
static void selscan__conv_ref_put(const selscan__cprob *q, const selscan__cgrd *r, int64_t b, int64_t d, int64_t row,
                                  int64_t t0, int64_t pos, float v) {
    if (pos >= t0) {
        if (r->dx.data) selscan__store(r->dx.data, SELSCAN__AT3(r->dx, b, d, pos), q->dt, v);
    } else if (r->dinit_state.data) {
        selscan__store(r->dinit_state.data, SELSCAN__AT3(r->dinit_state, row, d, pos - t0 + q->W - 1), q->dt, v);
    }
}

static void selscan__conv_ref_backward(const selscan__cprob *q, const selscan__cgrd *r) {
    const int H = SELSCAN__CAST(int, q->W) - 1;
    int64_t b, d, s, t;
    int k;
    for (d = 0; d < q->dim; d++) {
        float w[SELSCAN_CONV_MAX_WIDTH], dw[SELSCAN_CONV_MAX_WIDTH], db = 0.0f;
        const float bias = q->bias.data ? SELSCAN__CAST(const float *, q->bias.data)[SELSCAN__AT1(q->bias, d)] : 0.0f;
        for (k = 0; k <= H; k++) {
            w[k] = SELSCAN__CAST(const float *, q->weight.data)[SELSCAN__AT2(q->weight, d, k)];
            dw[k] = 0.0f;
        }
        for (b = 0; b < q->batch; b++)
            for (s = 0; s < selscan__conv_nseg(q); s++) {
                float win[SELSCAN_CONV_MAX_WIDTH], dacc[SELSCAN_CONV_MAX_WIDTH];
                int64_t t0, t1, row;
                selscan__conv_seg(q, b, s, &t0, &t1, &row);
                for (k = 0; k < H; k++) {
                    win[k] = q->init_state.data ? selscan__load(q->init_state.data, SELSCAN__AT3(q->init_state, row, d, k), q->dt) : 0.0f;
                    dacc[k] = 0.0f;
                }
                for (t = t0; t < t1; t++) {
                    float pre = bias, dp;
                    win[H] = selscan__load(q->x.data, SELSCAN__AT3(q->x, b, d, t), q->dt);
                    dacc[H] = 0.0f;
                    for (k = 0; k <= H; k++) pre += w[k] * win[k];
                    dp = selscan__load(r->dy.data, SELSCAN__AT3(r->dy, b, d, t), q->dt);
                    if (q->silu) {
                        const float sg = selscan__sigmoid(pre);
                        dp = dp * (sg * (1.0f + pre * (1.0f - sg)));
                    }
                    db += dp;
                    for (k = 0; k <= H; k++) {
                        dw[k] += dp * win[k];
                        dacc[k] += w[k] * dp;
                    }
                    selscan__conv_ref_put(q, r, b, d, row, t0, t - H, dacc[0]); /* complete now */
                    for (k = 0; k < H; k++) { win[k] = win[k + 1]; dacc[k] = dacc[k + 1]; }
                }
                for (k = 0; k < H; k++) { /* the last H positions, plus dfinal_state */
                    float v = dacc[k];
                    if (r->dfinal_state.data) v += selscan__load(r->dfinal_state.data, SELSCAN__AT3(r->dfinal_state, row, d, k), q->dt);
                    selscan__conv_ref_put(q, r, b, d, row, t0, t1 - H + k, v);
                }
            }
        for (k = 0; k <= H; k++)
            if (r->dweight.data) SELSCAN__CAST(float *, r->dweight.data)[SELSCAN__AT2(r->dweight, d, k)] = dw[k];
        if (r->dbias.data) SELSCAN__CAST(float *, r->dbias.data)[SELSCAN__AT1(r->dbias, d)] = db;
    }
}

/* Copies one element of dtype t (the state's rolls and appends move elements, never convert). */
static void selscan__copy_elem(void *dst, int64_t doff, const void *src, int64_t soff, selscan_dtype t) {
    const size_t es = selscan__dtype_size(t);
    memcpy(SELSCAN__CAST(char *, dst) + doff * SELSCAN__CAST(int64_t, es),
           SELSCAN__CAST(const char *, src) + soff * SELSCAN__CAST(int64_t, es), es);
}

static void selscan__conv_ref_step(const selscan__cstp *q) {
    const int H = SELSCAN__CAST(int, q->W) - 1;
    int64_t b, d, l, i;
    int k;
    for (b = 0; b < q->batch; b++) {
        const int64_t row = q->idx ? q->idx[b] : b;
        for (d = 0; d < q->dim; d++) {
            const float bias = q->bias.data ? selscan__load(q->bias.data, SELSCAN__AT1(q->bias, d), q->bias.dt) : 0.0f;
            for (l = 0; l < q->L; l++) {
                float acc = bias;
                if (row < 0) { selscan__store(q->y.data, SELSCAN__AT3(q->y, b, d, l), q->dt, 0.0f); continue; }
                for (k = 0; k < H; k++)
                    acc += selscan__load(q->weight.data, SELSCAN__AT2(q->weight, d, k), q->weight.dt) *
                           selscan__load(q->state.data, SELSCAN__AT3(q->state, row, d, q->S - H + k), q->dt);
                acc += selscan__load(q->weight.data, SELSCAN__AT2(q->weight, d, H), q->weight.dt) *
                       selscan__load(q->x.data, SELSCAN__AT3(q->x, b, d, l), q->dt);
                if (q->silu) acc = selscan__silu_f(acc);
                selscan__store(q->y.data, SELSCAN__AT3(q->y, b, d, l), q->dt, acc);
                for (i = 0; i + 1 < q->S; i++) /* roll left by one, x appended */
                    selscan__copy_elem(q->state.data, SELSCAN__AT3(q->state, row, d, i), q->state.data,
                                       SELSCAN__AT3(q->state, row, d, i + 1), q->dt);
                selscan__copy_elem(q->state.data, SELSCAN__AT3(q->state, row, d, q->S - 1), q->x.data,
                                   SELSCAN__AT3(q->x, b, d, l), q->dt);
            }
        }
    }
}

#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC pop_options
#elif defined(__clang__)
#pragma STDC FP_CONTRACT DEFAULT
#endif

SELSCAN_DEF selscan_status selscan_conv_forward_ref(const selscan_conv_problem *p) {
    selscan__cprob q;
    selscan_status st = selscan__conv_validate_forward(p, &q);
    if (st != SELSCAN_OK) return st;
    { /* the caller's errno is kept (see selscan_forward_ref) */
        const int saved_errno = errno;
        selscan__conv_ref_forward(&q);
        errno = saved_errno;
    }
    return SELSCAN_OK;
}

SELSCAN_DEF selscan_status selscan_conv_backward_ref(const selscan_conv_problem *p, const selscan_conv_grads *g) {
    selscan__cprob q;
    selscan__cgrd r;
    selscan_status st = selscan__conv_validate_backward(p, g, &q, &r);
    if (st != SELSCAN_OK) return st;
    {
        const int saved_errno = errno;
        selscan__conv_ref_backward(&q, &r);
        errno = saved_errno;
    }
    return SELSCAN_OK;
}

SELSCAN_DEF selscan_status selscan_conv_step_ref(const selscan_conv_step_problem *s) {
    selscan__cstp q;
    selscan_status st = selscan__conv_validate_step_ex(s, &q, 1);
    if (st != SELSCAN_OK) return st;
    {
        const int saved_errno = errno;
        selscan__conv_ref_step(&q);
        errno = saved_errno;
    }
    return SELSCAN_OK;
}

#endif /* SELSCAN_VALIDATION_ONLY */
/* --------------------------------------------------------------------------------------------- */
/* >>ssd                     Mamba-2's SSD scan: validation and reference                          */
/* --------------------------------------------------------------------------------------------- */
/* The math and the operands: >>ssd-api. Validation here (also compiled with
   SELSCAN_VALIDATION_ONLY, like the conv's), on the operand tables below and the scan's machinery
   (>>operands, >>validation); then >>ssd-reference, the exact scalar oracle. */

typedef struct selscan__sprob {
    int64_t batch, L, H, P, N, G, hpg, rows; /* hpg: heads per group; rows: state rows (batch or n_seqs) */
    selscan_dtype dt;                        /* T (the name the operand tables' RESOLVE_T reads) */
    int softplus, limit, Dhd;                /* SELSCAN_SSD_DT_SOFTPLUS, _DT_LIMIT, _D_HEADDIM */
    float dtmin, dtmax;
    const int64_t *cu;
    int64_t nseq;
    selscan__ten x, delta, A, B, C, D, z, dt_bias, seq_idx, initial_state, y, final_state; /* delta: dt (dt: the dtype) */
    selscan_diag *diag;
} selscan__sprob;

typedef struct selscan__sgrd {
    selscan__ten dy, dfinal_state, dx, ddelta, dA, dB, dC, dD, dz, ddt_bias, dinitial_state; /* ddelta: ddt (as delta: dt) */
} selscan__sgrd;

#define SELSCAN__RESOLVE_I32(c, field, ten, dims) SELSCAN__RESOLVE_AS(c, field, ten, dims, SELSCAN_F32)

/* The SSD's size rules (selscan_check_ssd_sizes; the entry points with empty_ok 0), in two parts around
   the missing-operand check as the scan's (the order of the checks is the order of the errors):
   sizes1: dtype, flags, sizes (0 allowed with empty_ok, dstate only in an empty problem), n_groups,
   the dt limit; sizes2: seq_idx not with packed sequences, the scan's packed-sequence rules
   (selscan__packed_rules; a sequence's states: headdim * dstate a head), element counts. */
static SELSCAN__MAYBE_UNUSED selscan_status selscan__ssd_sizes1(const selscan_ssd_problem *p, int empty_ok, selscan_diag *d) {
    const int64_t G = p->n_groups == 0 ? 1 : p->n_groups;
    const int empty = empty_ok && (p->batch == 0 || p->seqlen == 0 || p->nheads == 0 || p->headdim == 0);
    if (!selscan__dtype_ok(p->dtype)) SELSCAN__FAIL(d, SELSCAN_ERR_DTYPE, "dtype", UNKNOWN_DTYPE);
    if (p->flags & ~SELSCAN__SSD_KNOWN_FLAGS) SELSCAN__FAIL(d, SELSCAN_ERR_UNSUPPORTED, "flags", UNKNOWN_FLAG);
    SELSCAN__SIZE_RULE(d, "batch", p->batch, empty_ok);
    SELSCAN__SIZE_RULE(d, "seqlen", p->seqlen, empty_ok);
    SELSCAN__SIZE_RULE(d, "nheads", p->nheads, empty_ok);
    SELSCAN__SIZE_RULE(d, "headdim", p->headdim, empty_ok);
    SELSCAN__SIZE_RULE(d, "dstate", p->dstate, empty);
    if (G <= 0 || p->nheads % G != 0) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "n_groups", NOT_DIVIDING_NHEADS);
    /* written so that a NaN fails too */
    if ((p->flags & SELSCAN_SSD_DT_LIMIT) && !(p->dt_min <= p->dt_max)) /* the NaN one named, else dt_min */
        SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, p->dt_max != p->dt_max && p->dt_min == p->dt_min ? "dt_max" : "dt_min", DT_LIMIT);
    return SELSCAN_OK;
}

static SELSCAN__MAYBE_UNUSED selscan_status selscan__ssd_sizes2(const selscan_ssd_problem *p, int empty_ok, selscan_diag *d) {
    const int64_t G = p->n_groups == 0 ? 1 : p->n_groups;
    const int packed = p->cu_seqlens || (empty_ok && p->n_seqs != 0);
    const int64_t rows = packed ? p->n_seqs : p->batch;
    /* a head's states per sequence; a product past int64 fails the packed rules' count */
    const int64_t per_head = selscan__count_ok(p->headdim, p->dstate, 1, 1) ? p->headdim * p->dstate : INT64_MAX;
    selscan_status st;
    if (packed && p->seq_idx.data) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "seq_idx", WITH_CU_SEQLENS);
    st = selscan__packed_rules(p->cu_seqlens, p->n_seqs, p->batch, p->seqlen, p->nheads, per_head, empty_ok, d);
    if (st != SELSCAN_OK) return st;
    /* the diag names the sizes whose product overflows (with cu_seqlens, the states' was checked
       above); x's count bounds dt's, seq_idx's and D's */
    if (!selscan__count_ok(p->batch, p->seqlen, p->nheads, p->headdim))
        SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "batch * seqlen * nheads * headdim", COUNT_OVERFLOWS);
    if (!selscan__count_ok(p->batch, p->seqlen, G, p->dstate))
        SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "batch * seqlen * n_groups * dstate", COUNT_OVERFLOWS);
    if (!selscan__count_ok(rows, p->nheads, p->headdim, p->dstate))
        SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "batch * nheads * headdim * dstate", COUNT_OVERFLOWS);
    return SELSCAN_OK;
}

/* Sizes, flags, pointers, sequence offsets and the inputs' strides (the outputs: below). */
static SELSCAN__MAYBE_UNUSED selscan_status selscan__ssd_check_problem(const selscan_ssd_problem *p, selscan__sprob *q,
                                                                       int need_y) {
    int64_t i;
    selscan_status st;
    selscan_diag *d;
    if (!p) return SELSCAN_ERR_NULL;
    d = p->diag;
    q->diag = d;
    if ((st = selscan__ssd_sizes1(p, 0, d)) != SELSCAN_OK) return st;
    SELSCAN__SSD_OPERANDS(SELSCAN__OPD_NULL, p) /* x, dt, A, B, C; y when need_y */
    if ((st = selscan__ssd_sizes2(p, 0, d)) != SELSCAN_OK) return st;
    q->batch = p->batch; q->L = p->seqlen; q->H = p->nheads; q->P = p->headdim; q->N = p->dstate;
    q->G = p->n_groups == 0 ? 1 : p->n_groups; q->hpg = p->nheads / q->G;
    q->rows = p->cu_seqlens ? p->n_seqs : p->batch;
    q->dt = p->dtype;
    q->softplus = (p->flags & SELSCAN_SSD_DT_SOFTPLUS) != 0;
    q->limit = (p->flags & SELSCAN_SSD_DT_LIMIT) != 0;
    q->Dhd = (p->flags & SELSCAN_SSD_D_HEADDIM) != 0;
    q->dtmin = p->dt_min; q->dtmax = p->dt_max;
    q->cu = p->cu_seqlens; q->nseq = p->n_seqs;
    {
        selscan__sprob *dst = q;
        SELSCAN__SSD_OPERANDS(SELSCAN__OPD_RESOLVE, p)
    }
    {
        const selscan__ten *ins[] = {SELSCAN__SSD_OPERANDS(SELSCAN__OPD_INS, q)};
        for (i = 0; i < SELSCAN__COUNT(ins); i++)
            if ((st = selscan__check_strides(ins[i], 0)) != SELSCAN_OK) return st;
    }
    return SELSCAN_OK;
}

static int64_t selscan__ssd_cu_bytes(const selscan__sprob *q) { return q->cu ? (q->nseq + 1) * 8 : 0; }

/* a workspace size (bytes) of an entry point for nparts parts: r NULL for the forward */
typedef int64_t (*selscan__ssd_wsfn)(const selscan__sprob *q, const selscan__sgrd *r, int64_t nparts);

/* The forward: problem, outputs' strides, workspace (ws_need NULL: not checked; ws aligned up),
   aliasing. */
static SELSCAN__MAYBE_UNUSED selscan_status selscan__ssd_validate_forward(const selscan_ssd_problem *p, selscan__sprob *q,
                                                                         const void *ws, size_t ws_bytes,
                                                                         selscan__ssd_wsfn ws_need, int64_t nparts) {
    selscan_status st = selscan__ssd_check_problem(p, q, 1);
    int64_t need = -1;
    int i;
    if (st != SELSCAN_OK) return st;
    {
        const selscan__ten *outs[] = {SELSCAN__SSD_OPERANDS(SELSCAN__OPD_OUTS, q)}; /* y, final_state */
        const selscan__ten *ins[] = {SELSCAN__SSD_OPERANDS(SELSCAN__OPD_INS, q)};
        for (i = 0; i < SELSCAN__COUNT(outs); i++)
            if ((st = selscan__check_strides(outs[i], 1)) != SELSCAN_OK) return st;
        if (ws_need) {
            need = ws_need(q, NULL, nparts);
            if ((st = selscan__check_ws_d(ws, ws_bytes, need, q->diag)) != SELSCAN_OK) return st;
        }
        return selscan__check_alias_d(outs, SELSCAN__COUNT(outs), ins, SELSCAN__COUNT(ins), q->cu,
                                      selscan__ssd_cu_bytes(q), "overlaps cu_seqlens", need > 0 ? ws : NULL,
                                      need > 0 ? SELSCAN__CAST(int64_t, ws_bytes) : 0, q->diag);
    }
}

/* The backward: problem (y not needed), gradients' shapes and strides, workspace, aliasing. */
static SELSCAN__MAYBE_UNUSED selscan_status selscan__ssd_validate_backward(const selscan_ssd_problem *p,
                                                                          const selscan_ssd_grads *g, selscan__sprob *q,
                                                                          selscan__sgrd *r, const void *ws,
                                                                          size_t ws_bytes, selscan__ssd_wsfn ws_need,
                                                                          int64_t nparts) {
    selscan_status st = selscan__ssd_check_problem(p, q, 0);
    selscan_diag *d;
    int64_t need = -1;
    int i;
    if (st != SELSCAN_OK) return st;
    d = q->diag;
    if (!g) SELSCAN__FAIL(d, SELSCAN_ERR_NULL, "grads", MISSING);
    if (!g->dy.data) SELSCAN__FAIL(d, SELSCAN_ERR_NULL, "dy", MISSING);
    if (g->dz.data && !q->z.data) SELSCAN__FAIL(d, SELSCAN_ERR_NULL, "dz", WITHOUT_Z);
    {
        selscan__sgrd *dst = r;
        SELSCAN__SSD_GRAD_OPERANDS(SELSCAN__OPD_RESOLVE, g)
    }
    {
        const selscan__ten *gins[] = {SELSCAN__SSD_GRAD_OPERANDS(SELSCAN__OPD_INS, r)}; /* dy, dfinal_state */
        const selscan__ten *outs[] = {SELSCAN__SSD_GRAD_OPERANDS(SELSCAN__OPD_OUTS, r)};
        const selscan__ten *ins[] = {SELSCAN__SSD_OPERANDS(SELSCAN__OPD_INS, q)
                                         SELSCAN__SSD_GRAD_OPERANDS(SELSCAN__OPD_INS, r)};
        for (i = 0; i < SELSCAN__COUNT(gins); i++)
            if ((st = selscan__check_strides(gins[i], 0)) != SELSCAN_OK) return st;
        for (i = 0; i < SELSCAN__COUNT(outs); i++)
            if ((st = selscan__check_strides(outs[i], 1)) != SELSCAN_OK) return st;
        if (ws_need) {
            need = ws_need(q, r, nparts);
            if ((st = selscan__check_ws_d(ws, ws_bytes, need, d)) != SELSCAN_OK) return st;
        }
        return selscan__check_alias_d(outs, SELSCAN__COUNT(outs), ins, SELSCAN__COUNT(ins), q->cu,
                                      selscan__ssd_cu_bytes(q), "overlaps cu_seqlens", need > 0 ? ws : NULL,
                                      need > 0 ? SELSCAN__CAST(int64_t, ws_bytes) : 0, d);
    }
}

/* Workspace bytes of the reference (aligned up; saturated: selscan__size_ok refuses SELSCAN__SAT).
   Forward: one channel's state (N floats). Backward: one channel's states over a sequence
   ((L + 1) * N), its state gradient (N), the head's ddt sums (L), and f32 (L, N) sums of variable
   dB and dC over the group's heads and channels when they are asked for. */
static SELSCAN__MAYBE_UNUSED int64_t selscan__ssd_ws_ref(const selscan__sprob *q, const selscan__sgrd *r,
                                                         int64_t nparts) {
    int64_t floats;
    (void)nparts; /* one pass */
    if (!r) return selscan__align_up(selscan__smul(q->N, 4));
    floats = selscan__sadd(selscan__smul(selscan__sadd(q->L, 2), q->N), q->L);
    if (r->dB.data) floats = selscan__sadd(floats, selscan__smul(q->L, q->N));
    if (r->dC.data) floats = selscan__sadd(floats, selscan__smul(q->L, q->N));
    return selscan__align_up(selscan__smul(floats, 4));
}

#ifndef SELSCAN_VALIDATION_ONLY
/* The fast forward's workspace for nparts parts (>>ssd-entry). */
static int64_t selscan__ssd_ws_fast(const selscan__sprob *q, const selscan__sgrd *r, int64_t nparts);

SELSCAN_DEF selscan_status selscan_validate_ssd(const selscan_ssd_problem *p) {
    selscan__sprob q;
    return selscan__ssd_validate_forward(p, &q, NULL, 0, NULL, 0);
}

SELSCAN_DEF selscan_status selscan_validate_ssd_grads(const selscan_ssd_problem *p, const selscan_ssd_grads *g) {
    selscan__sprob q;
    selscan__sgrd r;
    return selscan__ssd_validate_backward(p, g, &q, &r, NULL, 0, NULL, 0);
}

SELSCAN_DEF selscan_status selscan_check_ssd_sizes(const selscan_ssd_problem *p) {
    selscan_status st;
    if (!p) return SELSCAN_ERR_NULL;
    if ((st = selscan__ssd_sizes1(p, 1, p->diag)) != SELSCAN_OK) return st;
    return selscan__ssd_sizes2(p, 1, p->diag);
}

SELSCAN_DEF selscan_status selscan_ssd_workspace_size(const selscan_ssd_problem *p, const selscan_ssd_grads *g,
                                                      size_t *bytes) {
    selscan__sprob q;
    selscan__sgrd r;
    selscan_status st;
    int64_t need, fast;
    if (!bytes) return selscan__fail(p ? p->diag : NULL, SELSCAN_ERR_NULL, "bytes", SELSCAN_RULE_MISSING);
    if (g) {
        if ((st = selscan__ssd_validate_backward(p, g, &q, &r, NULL, 0, NULL, 0)) != SELSCAN_OK) return st;
        need = selscan__ssd_ws_ref(&q, &r, 1);
        fast = selscan__ssd_ws_fast(&q, &r, 1);
    } else {
        if ((st = selscan__ssd_validate_forward(p, &q, NULL, 0, NULL, 0)) != SELSCAN_OK) return st;
        need = selscan__ssd_ws_ref(&q, NULL, 1);
        fast = selscan__ssd_ws_fast(&q, NULL, 1);
    }
    if (!selscan__size_ok(fast))
        return selscan__fail(p->diag, SELSCAN_ERR_SHAPE, "workspace", SELSCAN_RULE_SIZE_OVERFLOWS);
    if (fast > need) need = fast; /* enough for the reference and the fast path */
    /* plus the alignment slack (any pointer works) */
    if (!selscan__size_ok(need) || !selscan__size_ok(selscan__with_slack(need)))
        return selscan__fail(p->diag, SELSCAN_ERR_SHAPE, "workspace",
                             SELSCAN_RULE_SIZE_OVERFLOWS); /* 64 bits / size_t */
    *bytes = SELSCAN__CAST(size_t, selscan__with_slack(need));
    return SELSCAN_OK;
}

/* ---- >>ssd-reference: the exact scalar oracle ------------------------------------------------ */
/* One (batch row, head, channel) at a time, the state's N values in f32, the math of >>ssd-api in
   its order with expf / log1pf. The backward recomputes a sequence's states forward (kept whole in
   the workspace), then walks it backward; sums over channels go through f32 accumulators of the
   head (ddt) or group (dB, dC) and are stored once, so every sum has one fixed order. */

/* A sequence of batch row b: [t0, t1), its state row, whether it starts from initial_state and
   whether it ends in final_state. selscan__ssd_seg_next walks a row's sequences (k counts them). */
typedef struct selscan__sseg {
    int64_t t0, t1, row, k;
    int first, last;
} selscan__sseg;

static void selscan__ssd_seg_start(selscan__sseg *s) {
    s->t0 = s->t1 = s->row = s->k = 0;
    s->first = s->last = 0;
}
static int selscan__ssd_seg_next(const selscan__sprob *q, int64_t b, selscan__sseg *s) {
    if (q->cu) { /* cu_seqlens: sequence k uses state row k */
        if (s->k >= q->nseq) return 0;
        s->t0 = q->cu[s->k]; s->t1 = q->cu[s->k + 1]; s->row = s->k;
        s->first = s->last = 1;
    } else {     /* one row per batch row, cut where seq_idx changes */
        if (s->k > 0 && s->t1 >= q->L) return 0;
        s->t0 = s->k > 0 ? s->t1 : 0;
        s->t1 = s->t0 + 1;
        if (q->seq_idx.data) {
            const int32_t *si = SELSCAN__CAST(const int32_t *, q->seq_idx.data);
            while (s->t1 < q->L && si[SELSCAN__AT2(q->seq_idx, b, s->t1)] == si[SELSCAN__AT2(q->seq_idx, b, s->t1 - 1)])
                s->t1++;
        } else {
            s->t1 = q->L;
        }
        s->row = b;
        s->first = s->t0 == 0;
        s->last = s->t1 == q->L;
    }
    s->k++;
    return 1;
}

/* dt of (b, t, h): after the bias, the softplus and the clamp; *pre (optional) the value before
   the clamp, *raw (optional) the value before the softplus. */
static float selscan__ssd_dt(const selscan__sprob *q, int64_t b, int64_t t, int64_t h, float *raw, float *pre) {
    float v = selscan__load(q->delta.data, SELSCAN__AT3(q->delta, b, t, h), q->dt);
    if (q->dt_bias.data) v += SELSCAN__CAST(const float *, q->dt_bias.data)[SELSCAN__AT1(q->dt_bias, h)];
    if (raw) *raw = v;
    if (q->softplus) v = selscan__softplus(v);
    if (pre) *pre = v;
    if (q->limit) v = v < q->dtmin ? q->dtmin : v > q->dtmax ? q->dtmax : v; /* NaN stays NaN */
    return v;
}

static float selscan__ssd_Dv(const selscan__sprob *q, int64_t h, int64_t p) {
    if (!q->D.data) return 0.0f;
    return SELSCAN__CAST(const float *, q->D.data)[q->Dhd ? SELSCAN__AT2(q->D, h, p) : SELSCAN__AT1(q->D, h)];
}
/* acc + Dv v, without D no term (0 v would make an infinite v NaN: mamba_ssm adds no term either) */
static float selscan__ssd_addD(const selscan__sprob *q, float Dv, float v, float acc) { return q->D.data ? acc + Dv * v : acc; }

/* The state entering a sequence into S: initial_state's row, or 0. */
static void selscan__ssd_init_state(const selscan__sprob *q, const selscan__sseg *s, int64_t h, int64_t p, float *S) {
    int64_t n;
    for (n = 0; n < q->N; n++)
        S[n] = s->first && q->initial_state.data ? SELSCAN__CAST(const float *, q->initial_state.data)[SELSCAN__AT4(q->initial_state, s->row, h, p, n)]
                                      : 0.0f;
}

/* One step of channel (b, h, p): S <- a S + dt B x; returns sum_n C S. */
static float selscan__ssd_step(const selscan__sprob *q, int64_t b, int64_t t, int64_t g, float a, float dt, float x,
                               float *S) {
    float acc = 0.0f;
    int64_t n;
    for (n = 0; n < q->N; n++) {
        S[n] = a * S[n] + dt * selscan__load(q->B.data, SELSCAN__AT4(q->B, b, t, g, n), q->dt) * x;
        acc += selscan__load(q->C.data, SELSCAN__AT4(q->C, b, t, g, n), q->dt) * S[n];
    }
    return acc;
}

static void selscan__ssd_ref_forward(const selscan__sprob *q, float *S) {
    const float *A = SELSCAN__CAST(const float *, q->A.data);
    int64_t b, h, p, t, n;
    for (b = 0; b < q->batch; b++)
        for (h = 0; h < q->H; h++) {
            const int64_t g = h / q->hpg;
            const float Ah = A[SELSCAN__AT1(q->A, h)];
            for (p = 0; p < q->P; p++) {
                const float Dv = selscan__ssd_Dv(q, h, p);
                selscan__sseg s;
                selscan__ssd_seg_start(&s);
                while (selscan__ssd_seg_next(q, b, &s)) {
                    selscan__ssd_init_state(q, &s, h, p, S);
                    for (t = s.t0; t < s.t1; t++) {
                        const float x = selscan__load(q->x.data, SELSCAN__AT4(q->x, b, t, h, p), q->dt);
                        const float dt = selscan__ssd_dt(q, b, t, h, NULL, NULL);
                        float y = selscan__ssd_addD(q, Dv, x, selscan__ssd_step(q, b, t, g, expf(dt * Ah), dt, x, S));
                        if (q->z.data) {
                            const float z = selscan__load(q->z.data, SELSCAN__AT4(q->z, b, t, h, p), q->dt);
                            y *= z * selscan__sigmoid(z);
                        }
                        selscan__store(q->y.data, SELSCAN__AT4(q->y, b, t, h, p), q->dt, y);
                    }
                    if (s.last && q->final_state.data)
                        for (n = 0; n < q->N; n++)
                            SELSCAN__CAST(float *, q->final_state.data)[SELSCAN__AT4(q->final_state, s.row, h, p, n)] = S[n];
                }
            }
        }
}

SELSCAN_DEF selscan_status selscan_ssd_forward_ref(const selscan_ssd_problem *p, void *workspace,
                                                   size_t workspace_bytes) {
    selscan__sprob q;
    selscan_status st;
    workspace = selscan__ws_align(workspace, workspace_bytes, &workspace_bytes);
    st = selscan__ssd_validate_forward(p, &q, workspace, workspace_bytes, selscan__ssd_ws_ref, 1);
    if (st != SELSCAN_OK) return st;
    { /* the caller's errno is kept (see selscan_forward_ref) */
        const int saved_errno = errno;
        selscan__ssd_ref_forward(&q, SELSCAN__CAST(float *, workspace));
        errno = saved_errno;
    }
    return SELSCAN_OK;
}

/* Backward of one sequence of channel (b, h, p). hs: (t1 - t0 + 1) * N floats, dh: N; ddt: the
   head's (L) sums of dt's gradient (before the clamp's and softplus' factors); dBacc / dCacc: the
   group's f32 (L, N) sums or NULL; *dA, *dD: this channel's sums. */
static void selscan__ssd_ref_backward_seq(const selscan__sprob *q, const selscan__sgrd *r, int64_t b, int64_t h,
                                          int64_t p, const selscan__sseg *s, float *hs, float *dh, float *ddt,
                                          float *dBacc, float *dCacc, float *dA, float *dD) {
    const int64_t N = q->N, g = h / q->hpg;
    const float Ah = SELSCAN__CAST(const float *, q->A.data)[SELSCAN__AT1(q->A, h)];
    const float Dv = selscan__ssd_Dv(q, h, p);
    int64_t t, n;
    /* hs[(t - t0) * N ..]: the state entering step t; the last row: the state after t1 - 1 */
    selscan__ssd_init_state(q, s, h, p, hs);
    for (t = s->t0; t < s->t1; t++) {
        float *S = hs + (t - s->t0 + 1) * N;
        const float x = selscan__load(q->x.data, SELSCAN__AT4(q->x, b, t, h, p), q->dt);
        const float dt = selscan__ssd_dt(q, b, t, h, NULL, NULL);
        memcpy(S, S - N, SELSCAN__CAST(size_t, N) * 4);
        selscan__ssd_step(q, b, t, g, expf(dt * Ah), dt, x, S);
    }
    for (n = 0; n < N; n++)
        dh[n] = s->last && r->dfinal_state.data
                    ? SELSCAN__CAST(const float *, r->dfinal_state.data)[SELSCAN__AT4(r->dfinal_state, s->row, h, p, n)]
                    : 0.0f;
    for (t = s->t1 - 1; t >= s->t0; t--) {
        const float *S = hs + (t - s->t0 + 1) * N, *Sp = S - N;
        const float x = selscan__load(q->x.data, SELSCAN__AT4(q->x, b, t, h, p), q->dt);
        const float dt = selscan__ssd_dt(q, b, t, h, NULL, NULL);
        const float a = expf(dt * Ah);
        const float dyv = selscan__load(r->dy.data, SELSCAN__AT4(r->dy, b, t, h, p), q->dt);
        float dy0 = dyv, dx, da = 0.0f, dBx = 0.0f;
        if (q->z.data) {
            const float z = selscan__load(q->z.data, SELSCAN__AT4(q->z, b, t, h, p), q->dt);
            const float sg = selscan__sigmoid(z);
            dy0 = dyv * z * sg;
            if (r->dz.data) {
                float y0 = 0.0f;
                for (n = 0; n < N; n++) y0 += selscan__load(q->C.data, SELSCAN__AT4(q->C, b, t, g, n), q->dt) * S[n];
                y0 = selscan__ssd_addD(q, Dv, x, y0);
                selscan__store(r->dz.data, SELSCAN__AT4(r->dz, b, t, h, p), q->dt,
                               selscan__canon(dyv * y0 * sg * (1.0f + z * (1.0f - sg))));
            }
        }
        *dD += dy0 * x;
        dx = q->D.data ? dy0 * Dv : 0.0f; /* (no term without D: selscan__ssd_addD) */
        for (n = 0; n < N; n++) {
            const float Cv = selscan__load(q->C.data, SELSCAN__AT4(q->C, b, t, g, n), q->dt);
            const float Bv = selscan__load(q->B.data, SELSCAN__AT4(q->B, b, t, g, n), q->dt);
            const float dhn = dh[n] + dy0 * Cv; /* gradient of the state after step t */
            if (dCacc) dCacc[t * N + n] += dy0 * S[n];
            da += dhn * Sp[n]; /* of a */
            dBx += dhn * Bv;   /* of dt * x */
            dx += dhn * dt * Bv;
            if (dBacc) dBacc[t * N + n] += dhn * dt * x;
            dh[n] = dhn * a; /* gradient of the state entering step t */
        }
        ddt[t] += da * a * Ah + dBx * x;
        *dA += da * a * dt;
        if (r->dx.data) selscan__store(r->dx.data, SELSCAN__AT4(r->dx, b, t, h, p), q->dt, selscan__canon(dx));
    }
    if (s->first && r->dinitial_state.data)
        for (n = 0; n < N; n++)
            SELSCAN__CAST(float *, r->dinitial_state.data)[SELSCAN__AT4(r->dinitial_state, s->row, h, p, n)] = selscan__canon(dh[n]);
}

static void selscan__ssd_ref_backward(const selscan__sprob *q, const selscan__sgrd *r, float *ws) {
    const int64_t N = q->N, L = q->L;
    float *hs = ws, *dh = hs + (L + 1) * N, *ddt = dh + N, *acc = ddt + L, *dBacc = NULL, *dCacc = NULL;
    float *const dA = SELSCAN__CAST(float *, r->dA.data), *const dD = SELSCAN__CAST(float *, r->dD.data);
    float *const ddt_bias = SELSCAN__CAST(float *, r->ddt_bias.data);
    int64_t b, g, h, p, t, n;
    if (r->dB.data) { dBacc = acc; acc += L * N; }
    if (r->dC.data) dCacc = acc;
    for (h = 0; h < q->H; h++) { /* the sums over batch rows start at 0 */
        if (dA) dA[SELSCAN__AT1(r->dA, h)] = 0.0f;
        if (ddt_bias) ddt_bias[SELSCAN__AT1(r->ddt_bias, h)] = 0.0f;
        if (dD && q->Dhd) for (p = 0; p < q->P; p++) dD[SELSCAN__AT2(r->dD, h, p)] = 0.0f;
        else if (dD) dD[SELSCAN__AT1(r->dD, h)] = 0.0f;
    }
    for (b = 0; b < q->batch; b++)
        for (g = 0; g < q->G; g++) {
            if (dBacc) memset(dBacc, 0, SELSCAN__CAST(size_t, L * N) * 4);
            if (dCacc) memset(dCacc, 0, SELSCAN__CAST(size_t, L * N) * 4);
            for (h = g * q->hpg; h < (g + 1) * q->hpg; h++) {
                float dAh = 0.0f, dbh = 0.0f;
                memset(ddt, 0, SELSCAN__CAST(size_t, L) * 4);
                for (p = 0; p < q->P; p++) {
                    float dDp = 0.0f;
                    selscan__sseg s;
                    selscan__ssd_seg_start(&s);
                    while (selscan__ssd_seg_next(q, b, &s))
                        selscan__ssd_ref_backward_seq(q, r, b, h, p, &s, hs, dh, ddt, dBacc, dCacc, &dAh, &dDp);
                    if (dD) dD[q->Dhd ? SELSCAN__AT2(r->dD, h, p) : SELSCAN__AT1(r->dD, h)] += dDp;
                }
                for (t = 0; t < L; t++) { /* dt's gradient through the clamp and the softplus */
                    float raw, pre, v = ddt[t];
                    selscan__ssd_dt(q, b, t, h, &raw, &pre);
                    if (q->limit && (pre < q->dtmin || pre > q->dtmax)) v = 0.0f; /* clamped: no gradient */
                    if (q->softplus && raw <= SELSCAN__SOFTPLUS_THRESHOLD) v *= selscan__sigmoid(raw);
                    dbh += v;
                    if (r->ddelta.data)
                        selscan__store(r->ddelta.data, SELSCAN__AT3(r->ddelta, b, t, h), q->dt, selscan__canon(v));
                }
                if (dA) dA[SELSCAN__AT1(r->dA, h)] += dAh;
                if (ddt_bias) ddt_bias[SELSCAN__AT1(r->ddt_bias, h)] += dbh;
            }
            for (t = 0; t < L; t++)
                for (n = 0; n < N; n++) {
                    if (dBacc)
                        selscan__store(r->dB.data, SELSCAN__AT4(r->dB, b, t, g, n), q->dt,
                                       selscan__canon(dBacc[t * N + n]));
                    if (dCacc)
                        selscan__store(r->dC.data, SELSCAN__AT4(r->dC, b, t, g, n), q->dt,
                                       selscan__canon(dCacc[t * N + n]));
                }
        }
    for (h = 0; h < q->H; h++) { /* the sums' NaNs: the default quiet NaN (see selscan__canon) */
        float *v;
        if (dA) { v = dA + SELSCAN__AT1(r->dA, h); *v = selscan__canon(*v); }
        if (ddt_bias) { v = ddt_bias + SELSCAN__AT1(r->ddt_bias, h); *v = selscan__canon(*v); }
        if (dD && q->Dhd) for (p = 0; p < q->P; p++) { v = dD + SELSCAN__AT2(r->dD, h, p); *v = selscan__canon(*v); }
        else if (dD) { v = dD + SELSCAN__AT1(r->dD, h); *v = selscan__canon(*v); }
    }
}

SELSCAN_DEF selscan_status selscan_ssd_backward_ref(const selscan_ssd_problem *p, const selscan_ssd_grads *g,
                                                    void *workspace, size_t workspace_bytes) {
    selscan__sprob q;
    selscan__sgrd r;
    selscan_status st;
    workspace = selscan__ws_align(workspace, workspace_bytes, &workspace_bytes);
    st = selscan__ssd_validate_backward(p, g, &q, &r, workspace, workspace_bytes, selscan__ssd_ws_ref, 1);
    if (st != SELSCAN_OK) return st;
    { /* the caller's errno is kept (see selscan_forward_ref) */
        const int saved_errno = errno;
        selscan__ssd_ref_backward(&q, &r, SELSCAN__CAST(float *, workspace));
        errno = saved_errno;
    }
    return SELSCAN_OK;
}

#endif /* SELSCAN_VALIDATION_ONLY: >>ssd */
/* --------------------------------------------------------------------------------------------- */
/* >>norm                    the gated RMS norm: validation and reference                        */
/* --------------------------------------------------------------------------------------------- */
/* The math and the operands: >>norm-api. Validation here (also compiled with
   SELSCAN_VALIDATION_ONLY: the CUDA launchers use it), on the operand tables (>>operands), then
   >>norm-reference, the exact scalar oracle and the CPU entries' scalar loop; their drivers, entry
   points and parts: >>norm-entry; their vector kernels: >>fast-norm. */

typedef struct selscan__nprob {
    int64_t batch, L, dim, gs; /* gs: channels a group */
    float eps;
    selscan_dtype dt;
    int before; /* SELSCAN_NORM_BEFORE_GATE */
    selscan__ten y, z, weight, out;
    selscan_diag *diag;
} selscan__nprob;

typedef struct selscan__ngrd {
    selscan__ten dout, dy, dz, dweight;
} selscan__ngrd;

/* >>size-rules of the norm: before the operands (dtype, flags, sizes, group_size, eps) */
static selscan_status selscan__norm_sizes1(const selscan_norm_problem *p, int empty_ok, selscan_diag *d) {
    const int64_t gs = p->group_size == 0 ? p->dim : p->group_size;
    if (!selscan__dtype_ok(p->dtype)) SELSCAN__FAIL(d, SELSCAN_ERR_DTYPE, "dtype", UNKNOWN_DTYPE);
    if (p->flags & ~SELSCAN__NORM_KNOWN_FLAGS) SELSCAN__FAIL(d, SELSCAN_ERR_UNSUPPORTED, "flags", UNKNOWN_FLAG);
    SELSCAN__SIZE_RULE(d, "batch", p->batch, empty_ok);
    SELSCAN__SIZE_RULE(d, "seqlen", p->seqlen, empty_ok);
    SELSCAN__SIZE_RULE(d, "dim", p->dim, empty_ok);
    if (p->group_size < 0) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "group_size", NEGATIVE);
    /* dim 0 (an empty problem): any group_size divides it */
    if (p->dim > 0 && (gs <= 0 || p->dim % gs != 0)) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "group_size", NOT_DIVIDING);
    /* x * 0 == 0 fails for infinities and NaN alike */
    if (!(p->eps >= 0.0f && p->eps * 0.0f == 0.0f)) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "eps", EPS);
    return SELSCAN_OK;
}

/* the norm's: after the operands (element counts) */
static selscan_status selscan__norm_sizes2(const selscan_norm_problem *p, selscan_diag *d) {
    if (!selscan__count_ok(p->batch, p->seqlen, p->dim, 1)) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "batch * seqlen * dim", COUNT_OVERFLOWS);
    return SELSCAN_OK;
}

static SELSCAN__MAYBE_UNUSED selscan_status selscan__norm_check_problem(const selscan_norm_problem *p, selscan__nprob *q,
                                                                        int need_y) {
    selscan_status st;
    selscan_diag *d;
    int64_t i;
    if (!p) return SELSCAN_ERR_NULL;
    d = p->diag;
    q->diag = d;
    if ((st = selscan__norm_sizes1(p, 0, d)) != SELSCAN_OK) return st;
    SELSCAN__NORM_OPERANDS(SELSCAN__OPD_NULL, p) /* y; out when need_y */
    if ((st = selscan__norm_sizes2(p, d)) != SELSCAN_OK) return st;
    q->batch = p->batch; q->L = p->seqlen; q->dim = p->dim;
    q->gs = p->group_size == 0 ? p->dim : p->group_size;
    q->eps = p->eps;
    q->dt = p->dtype;
    q->before = (p->flags & SELSCAN_NORM_BEFORE_GATE) != 0;
    {
        selscan__nprob *dst = q;
        SELSCAN__NORM_OPERANDS(SELSCAN__OPD_RESOLVE, p)
    }
    {
        const selscan__ten *ins[] = {SELSCAN__NORM_OPERANDS(SELSCAN__OPD_INS, q)};
        for (i = 0; i < SELSCAN__COUNT(ins); i++)
            if ((st = selscan__check_strides(ins[i], 0)) != SELSCAN_OK) return st;
    }
    return SELSCAN_OK;
}

/* The forward: problem, out's strides, aliasing. */
static SELSCAN__MAYBE_UNUSED selscan_status selscan__norm_validate_forward(const selscan_norm_problem *p, selscan__nprob *q) {
    selscan_status st = selscan__norm_check_problem(p, q, 1);
    if (st != SELSCAN_OK) return st;
    {
        const selscan__ten *outs[] = {SELSCAN__NORM_OPERANDS(SELSCAN__OPD_OUTS, q)}; /* out */
        const selscan__ten *ins[] = {SELSCAN__NORM_OPERANDS(SELSCAN__OPD_INS, q)};
        int i;
        for (i = 0; i < SELSCAN__COUNT(outs); i++)
            if ((st = selscan__check_strides(outs[i], 1)) != SELSCAN_OK) return st;
        return selscan__check_alias_d(outs, SELSCAN__COUNT(outs), ins, SELSCAN__COUNT(ins), NULL, 0, "", NULL, 0, q->diag);
    }
}

/* The backward: problem (out not needed), gradients' strides, aliasing. */
static SELSCAN__MAYBE_UNUSED selscan_status selscan__norm_validate_backward(const selscan_norm_problem *p,
                                                                           const selscan_norm_grads *g,
                                                                           selscan__nprob *q, selscan__ngrd *r) {
    selscan_status st = selscan__norm_check_problem(p, q, 0);
    selscan_diag *d;
    int i;
    if (st != SELSCAN_OK) return st;
    d = q->diag;
    if (!g) SELSCAN__FAIL(d, SELSCAN_ERR_NULL, "grads", MISSING);
    if (!g->dout.data) SELSCAN__FAIL(d, SELSCAN_ERR_NULL, "dout", MISSING);
    if (g->dz.data && !q->z.data) SELSCAN__FAIL(d, SELSCAN_ERR_NULL, "dz", WITHOUT_Z);
    {
        selscan__ngrd *dst = r;
        SELSCAN__NORM_GRAD_OPERANDS(SELSCAN__OPD_RESOLVE, g)
    }
    {
        const selscan__ten *gins[] = {SELSCAN__NORM_GRAD_OPERANDS(SELSCAN__OPD_INS, r)}; /* dout */
        const selscan__ten *outs[] = {SELSCAN__NORM_GRAD_OPERANDS(SELSCAN__OPD_OUTS, r)};
        const selscan__ten *ins[] = {SELSCAN__NORM_OPERANDS(SELSCAN__OPD_INS, q) SELSCAN__NORM_GRAD_OPERANDS(SELSCAN__OPD_INS, r)};
        for (i = 0; i < SELSCAN__COUNT(gins); i++)
            if ((st = selscan__check_strides(gins[i], 0)) != SELSCAN_OK) return st;
        for (i = 0; i < SELSCAN__COUNT(outs); i++)
            if ((st = selscan__check_strides(outs[i], 1)) != SELSCAN_OK) return st;
        return selscan__check_alias_d(outs, SELSCAN__COUNT(outs), ins, SELSCAN__COUNT(ins), NULL, 0, "", NULL, 0, d);
    }
}

#ifndef SELSCAN_VALIDATION_ONLY
SELSCAN_DEF selscan_status selscan_validate_norm(const selscan_norm_problem *p) {
    selscan__nprob q;
    return selscan__norm_validate_forward(p, &q);
}

SELSCAN_DEF selscan_status selscan_validate_norm_grads(const selscan_norm_problem *p, const selscan_norm_grads *g) {
    selscan__nprob q;
    selscan__ngrd r;
    return selscan__norm_validate_backward(p, g, &q, &r);
}

SELSCAN_DEF selscan_status selscan_check_norm_sizes(const selscan_norm_problem *p) {
    selscan_status st;
    if (!p) return SELSCAN_ERR_NULL;
    if ((st = selscan__norm_sizes1(p, 1, p->diag)) != SELSCAN_OK) return st;
    return selscan__norm_sizes2(p, p->diag);
}

/* ---- >>norm-reference: the exact scalar oracle ---------------------------------------------- */
/* One (batch row, step, group) at a time: the sum of squares in channel order, then the outputs;
   the backward's sum of dn * n likewise, and dweight summed per channel over batch rows, then steps
   (stored into dweight as it goes: zeroed first). No contraction (as the conv's reference). */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* u (the normalized value before the scale) and the gate s of channel c (s 1 without z) */
static float selscan__norm_u(const selscan__nprob *q, int64_t b, int64_t t, int64_t c, float *s, float *y, float *z) {
    const float yv = selscan__load(q->y.data, SELSCAN__AT3(q->y, b, t, c), q->dt);
    float sv = 1.0f, zv = 0.0f;
    if (q->z.data) {
        zv = selscan__load(q->z.data, SELSCAN__AT3(q->z, b, t, c), q->dt);
        sv = zv * selscan__sigmoid(zv);
    }
    if (s) *s = sv;
    if (y) *y = yv;
    if (z) *z = zv;
    return q->z.data && !q->before ? yv * sv : yv;
}
static float selscan__norm_w(const selscan__nprob *q, int64_t c) {
    return q->weight.data ? SELSCAN__CAST(const float *, q->weight.data)[SELSCAN__AT1(q->weight, c)] : 1.0f;
}
/* r of the group starting at channel c0 */
static float selscan__norm_r(const selscan__nprob *q, int64_t b, int64_t t, int64_t c0) {
    float ss = 0.0f;
    int64_t c;
    for (c = c0; c < c0 + q->gs; c++) {
        const float u = selscan__norm_u(q, b, t, c, NULL, NULL, NULL);
        ss += u * u;
    }
    return 1.0f / sqrtf(ss / SELSCAN__CAST(float, q->gs) + q->eps);
}

/* rows [r0, r1) of the flattened (batch, L) */
static void selscan__norm_ref_fwd_rows(const selscan__nprob *q, int64_t r0, int64_t r1) {
    int64_t i, c0, c;
    for (i = r0; i < r1; i++) {
        const int64_t b = i / q->L, t = i % q->L;
        for (c0 = 0; c0 < q->dim; c0 += q->gs) {
            const float r = selscan__norm_r(q, b, t, c0);
            for (c = c0; c < c0 + q->gs; c++) {
                float s;
                const float u = selscan__norm_u(q, b, t, c, &s, NULL, NULL);
                float o = u * r * selscan__norm_w(q, c);
                if (q->z.data && q->before) o *= s;
                selscan__store(q->out.data, SELSCAN__AT3(q->out, b, t, c), q->dt, o);
            }
        }
    }
}
static void selscan__norm_ref_forward(const selscan__nprob *q) { selscan__norm_ref_fwd_rows(q, 0, q->batch * q->L); }

/* rows [r0, r1); dweight's sums into dw[c * dws] (zeroed first; NULL: not asked for) */
static void selscan__norm_ref_bwd_rows(const selscan__nprob *q, const selscan__ngrd *g, int64_t r0, int64_t r1, float *dw,
                                       int64_t dws) {
    const int gate_after = q->z.data && q->before; /* the gate multiplies after the norm */
    const int gate_in = q->z.data && !q->before;   /* the gate is inside u */
    int64_t i, c0, c;
    if (dw)
        for (c = 0; c < q->dim; c++) dw[c * dws] = 0.0f;
    for (i = r0; i < r1; i++) {
        const int64_t b = i / q->L, t = i % q->L;
        for (c0 = 0; c0 < q->dim; c0 += q->gs) {
            const float r = selscan__norm_r(q, b, t, c0);
            float sdn = 0.0f, m;
            for (c = c0; c < c0 + q->gs; c++) { /* mean of dn * n */
                float s;
                const float n = selscan__norm_u(q, b, t, c, &s, NULL, NULL) * r;
                const float dout = selscan__load(g->dout.data, SELSCAN__AT3(g->dout, b, t, c), q->dt);
                float dn = dout * selscan__norm_w(q, c);
                if (gate_after) dn *= s;
                sdn += dn * n;
            }
            m = sdn / SELSCAN__CAST(float, q->gs);
            for (c = c0; c < c0 + q->gs; c++) {
                float s, yv, zv;
                const float n = selscan__norm_u(q, b, t, c, &s, &yv, &zv) * r, w = selscan__norm_w(q, c);
                const float dout = selscan__load(g->dout.data, SELSCAN__AT3(g->dout, b, t, c), q->dt);
                const float dn = gate_after ? dout * w * s : dout * w, du = r * (dn - n * m);
                if (g->dy.data) selscan__store(g->dy.data, SELSCAN__AT3(g->dy, b, t, c), q->dt, gate_in ? du * s : du);
                if (g->dz.data) {
                    const float sg = selscan__sigmoid(zv), ds = sg * (1.0f + zv * (1.0f - sg));
                    const float dz = gate_after ? dout * n * w * ds : du * yv * ds;
                    selscan__store(g->dz.data, SELSCAN__AT3(g->dz, b, t, c), q->dt, dz);
                }
                if (dw) dw[c * dws] += gate_after ? dout * n * s : dout * n;
            }
        }
    }
}
static void selscan__norm_ref_backward(const selscan__nprob *q, const selscan__ngrd *g) {
    selscan__norm_ref_bwd_rows(q, g, 0, q->batch * q->L, SELSCAN__CAST(float *, g->dweight.data), g->dweight.s[0]);
}

/* The CPU entries' scalar loop (their path where an input's channels are not contiguous; the vector
   kernels: >>fast-norm): the reference's arithmetic in its order (so bitwise its results), with a
   group's y, z, sigmoid(z), u and dout loaded once into stack buffers (groups of up to
   SELSCAN__NORM_CB channels, 40 KiB: Mamba-2's 130m and 370m groups; larger groups run the
   reference's loop): the reference loads each element and takes its sigmoid (expf) again in every
   pass, three passes in the backward. Measured on the 2-core VM (2 x 512 x 1536 f32, one group):
   forward 5.9 ms, backward 10.2 ms, the reference's 14.6 and 31.3. */
#define SELSCAN__NORM_CB 2048
#define SELSCAN__NORM_VB 8192 /* the vector kernels' (>>fast-norm): a group's sigmoids kept (32 KiB of stack) */
typedef struct selscan__nbuf {
    float y[SELSCAN__NORM_CB], z[SELSCAN__NORM_CB], sg[SELSCAN__NORM_CB], u[SELSCAN__NORM_CB], d[SELSCAN__NORM_CB];
} selscan__nbuf;
/* Loads the group at c0 of row (b, t) into B (dout too where g is given); returns r (the reference's
   sum of u^2 in channel order). */
static float selscan__norm_group(const selscan__nprob *q, const selscan__ngrd *g, int64_t b, int64_t t, int64_t c0,
                                 selscan__nbuf *B) {
    const int in = q->z.data && !q->before;
    float ss = 0.0f;
    int64_t c;
    for (c = 0; c < q->gs; c++) {
        const float yv = selscan__load(q->y.data, SELSCAN__AT3(q->y, b, t, c0 + c), q->dt);
        float zv = 0.0f, sg = 0.0f, u = yv;
        if (q->z.data) {
            zv = selscan__load(q->z.data, SELSCAN__AT3(q->z, b, t, c0 + c), q->dt);
            sg = selscan__sigmoid(zv);
            if (in) u = yv * (zv * sg);
        }
        B->y[c] = yv;
        B->z[c] = zv;
        B->sg[c] = sg;
        B->u[c] = u;
        if (g) B->d[c] = selscan__load(g->dout.data, SELSCAN__AT3(g->dout, b, t, c0 + c), q->dt);
        ss += u * u;
    }
    return 1.0f / sqrtf(ss / SELSCAN__CAST(float, q->gs) + q->eps);
}

static void selscan__norm_cpu_fwd_rows(const selscan__nprob *q, int64_t r0, int64_t r1) {
    selscan__nbuf B;
    const int after = q->z.data && q->before;
    int64_t i, c0, c;
    if (q->gs > SELSCAN__NORM_CB) {
        selscan__norm_ref_fwd_rows(q, r0, r1);
        return;
    }
    for (i = r0; i < r1; i++) {
        const int64_t b = i / q->L, t = i % q->L;
        for (c0 = 0; c0 < q->dim; c0 += q->gs) {
            const float r = selscan__norm_group(q, NULL, b, t, c0, &B);
            for (c = 0; c < q->gs; c++) {
                float o = B.u[c] * r * selscan__norm_w(q, c0 + c);
                if (after) o *= B.z[c] * B.sg[c];
                selscan__store(q->out.data, SELSCAN__AT3(q->out, b, t, c0 + c), q->dt, o);
            }
        }
    }
}

/* rows [r0, r1); dweight's sums into dw[c * dws] (zeroed first; NULL: not asked for) */
static void selscan__norm_cpu_bwd_rows(const selscan__nprob *q, const selscan__ngrd *g, int64_t r0, int64_t r1, float *dw,
                                       int64_t dws) {
    selscan__nbuf B;
    const int after = q->z.data && q->before, in = q->z.data && !q->before;
    int64_t i, c0, c;
    if (q->gs > SELSCAN__NORM_CB) {
        selscan__norm_ref_bwd_rows(q, g, r0, r1, dw, dws);
        return;
    }
    if (dw)
        for (c = 0; c < q->dim; c++) dw[c * dws] = 0.0f;
    for (i = r0; i < r1; i++) {
        const int64_t b = i / q->L, t = i % q->L;
        for (c0 = 0; c0 < q->dim; c0 += q->gs) {
            const float r = selscan__norm_group(q, g, b, t, c0, &B);
            float sdn = 0.0f, m;
            for (c = 0; c < q->gs; c++) {
                const float n = B.u[c] * r;
                float dn = B.d[c] * selscan__norm_w(q, c0 + c);
                if (after) dn *= B.z[c] * B.sg[c];
                sdn += dn * n;
            }
            m = sdn / SELSCAN__CAST(float, q->gs);
            for (c = 0; c < q->gs; c++) {
                const float s = q->z.data ? B.z[c] * B.sg[c] : 1.0f, n = B.u[c] * r, w = selscan__norm_w(q, c0 + c);
                const float dout = B.d[c], dn = after ? dout * w * s : dout * w, du = r * (dn - n * m);
                if (g->dy.data) selscan__store(g->dy.data, SELSCAN__AT3(g->dy, b, t, c0 + c), q->dt, in ? du * s : du);
                if (g->dz.data) {
                    const float sg = B.sg[c], zv = B.z[c], ds = sg * (1.0f + zv * (1.0f - sg));
                    const float dz = after ? dout * n * w * ds : du * B.y[c] * ds;
                    selscan__store(g->dz.data, SELSCAN__AT3(g->dz, b, t, c0 + c), q->dt, dz);
                }
                if (dw) dw[(c0 + c) * dws] += after ? dout * n * s : dout * n;
            }
        }
    }
}

#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC pop_options
#elif defined(__clang__)
#pragma STDC FP_CONTRACT DEFAULT
#endif

SELSCAN_DEF selscan_status selscan_norm_forward_ref(const selscan_norm_problem *p) {
    selscan__nprob q;
    selscan_status st = selscan__norm_validate_forward(p, &q);
    if (st != SELSCAN_OK) return st;
    { /* the caller's errno is kept (see selscan_forward_ref) */
        const int saved_errno = errno;
        selscan__norm_ref_forward(&q);
        errno = saved_errno;
    }
    return SELSCAN_OK;
}

SELSCAN_DEF selscan_status selscan_norm_backward_ref(const selscan_norm_problem *p, const selscan_norm_grads *g) {
    selscan__nprob q;
    selscan__ngrd r;
    selscan_status st = selscan__norm_validate_backward(p, g, &q, &r);
    if (st != SELSCAN_OK) return st;
    {
        const int saved_errno = errno;
        selscan__norm_ref_backward(&q, &r);
        errno = saved_errno;
    }
    return SELSCAN_OK;
}

#endif /* SELSCAN_VALIDATION_ONLY: >>norm */
#ifndef SELSCAN_VALIDATION_ONLY

/* --------------------------------------------------------------------------------------------- */
/* >>fast                              fast CPU path                                             */
/* --------------------------------------------------------------------------------------------- */
/* Sections: >>fast (this layout), >>fast-tiles, >>fast-ckpt, >>fast-scratch, >>fast-isa (one
   block per instruction set: >>isa-portable, >>isa-avx2, >>isa-avx512, >>isa-neon), >>fast-drivers,
   >>fast-parts; the kernels are at the end of the file: >>fast-kernels (>>fast-math, >>fast-prep,
   >>fast-forward, >>fast-backward, >>fast-step; the other ops': >>fast-conv, >>fast-ssd, >>fast-norm). */

/* Layout of the work. A tile is W channels of one group (W = 16 with AVX-512, 8 with AVX2+FMA, 4
   with NEON, 1 portable); the state for each n is one vector over the tile's channels, so B and C
   (shared by a group) are broadcast scalars per step. Inputs are loaded chunk by chunk (up to
   SELSCAN__FT steps x W channels), widened to f32 and transposed into the part's scratch; outputs
   are transposed back. Exponentials: selscan__vexp_* (clamped; within 1.3 ulp; 0 below about
   -87.7, +inf from 88.4, NaN stays NaN), or, in a chunk where every |dt * A| <= 86 (checked per
   chunk and tile), selscan__vexp2nc_* on dt * (A log2 e): no clamps, fewer FMA-pipe operations.
   Forward: a work item is one tile of one batch row; items are split into n_parts contiguous
   ranges, each item is independent, so the result does not depend on n_parts. With a checkpoint
   buffer it also stores the state entering every chunk.
   Backward: a work item is a block of SELSCAN__CB channels of one group and batch row. It runs
   the forward keeping the state every T steps (checkpoints; or reads the forward's), then walks
   the chunks backward, recomputing the states and exponentials of one chunk at a time, SELSCAN__BG
   states at a time (states outer, steps inner: the group's states and gradients in registers;
   recompute and walk back of a group through L1 rows). When the sequence fits the part's prep
   cache (SELSCAN__PCMAX), the checkpoint pass also prepares the walk's inputs of every chunk (dt,
   dt u, u, softplus' derivative; with z dy silu(z), dy silu'(z)) and the walk back reads them
   instead of loading and preparing the chunk again (with the forward's checkpoints that pass
   runs too, without the recompute: inputs read first to last). Sums over channels (variable
   dB, dC) are accumulated lane-wise over the block's tiles, reduced over lanes in a fixed order,
   and written as per-block partials to the shared workspace; sums over batch rows (dA, dD,
   ddelta_bias, fixed dB/dC) are written per batch row. selscan_backward_cpu_reduce() sums the
   partials in a fixed order. So every gradient is bitwise the same for every n_parts.
   The kernels (>>fast-kernels) are written once over vector primitives and compiled per
   instruction set (>>fast-isa); the drivers (>>fast-drivers) pick one at run time. */

#define SELSCAN__FT 64   /* forward chunk (steps) */
#define SELSCAN__WMAX 16 /* widest vector (floats); scratch is sized for it */
#define SELSCAN__CB 64   /* channels per backward work item */
#define SELSCAN__SNB 256 /* step: channels and states per block (stack buffers) */
#define SELSCAN__SNA 64  /* step: largest N of the common-layout kernel (its stack buffer) */
#ifndef SELSCAN__PCMAX /* (a test sets it small, so that both sides of the limit run) */
#define SELSCAN__PCMAX (1 << 20) /* backward prep cache: floats a part at most (4 MiB: L <= 4096 without z, 2730 with) */
#endif
#define SELSCAN__BG 4    /* backward: states a group (hand-unrolled, <= 4; their h, dh, dA in registers) */

enum { SELSCAN__ISA_PORTABLE = 0, SELSCAN__ISA_NEON = 1, SELSCAN__ISA_AVX2 = 2, SELSCAN__ISA_AVX512 = 3 };

#if defined(__GNUC__) || defined(__clang__)
#define SELSCAN__INLINE __inline__ __attribute__((always_inline))
#elif defined(_MSC_VER)
#define SELSCAN__INLINE __forceinline
#else
#define SELSCAN__INLINE
#endif
/* a hint that the line at p will be written soon (nothing where the compiler has no such hint) */
#if defined(__GNUC__) || defined(__clang__)
#define SELSCAN__PREFETCHW(p) __builtin_prefetch((p), 1, 3)
#else
#define SELSCAN__PREFETCHW(p) ((void)0)
#endif

#if !defined(SELSCAN_NO_SIMD) && (defined(__x86_64__) || defined(_M_X64)) &&                                  \
    (defined(__GNUC__) || defined(__clang__) || defined(_MSC_VER))
#define SELSCAN__HAVE_X86 1
#include <immintrin.h>
#if defined(__GNUC__) || defined(__clang__)
#include <cpuid.h>
#define SELSCAN__T_AVX2 __attribute__((target("avx2,fma,f16c")))
#define SELSCAN__T_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#else
#include <intrin.h>
#define SELSCAN__T_AVX2
#define SELSCAN__T_AVX512
#endif
#endif

#if !defined(SELSCAN_NO_SIMD) && (defined(__aarch64__) || defined(_M_ARM64))
#define SELSCAN__HAVE_NEON 1
#include <arm_neon.h>
#endif

/* The best path this CPU runs (CPUID + xgetbv on x86-64). */
static int selscan__cpu_isa_detect(void) {
#if defined(SELSCAN__HAVE_X86)
    unsigned c1 = 0, b7 = 0, xcr0 = 0;
    int isa = SELSCAN__ISA_PORTABLE;
#if defined(__GNUC__) || defined(__clang__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return isa;
    c1 = c;
    if (!(c1 & (1u << 27))) return isa; /* OSXSAVE */
    __asm__ __volatile__("xgetbv" : "=a"(a), "=d"(d) : "c"(0));
    xcr0 = a;
    if (__get_cpuid_max(0, NULL) < 7) return isa;
    __cpuid_count(7, 0, a, b, c, d);
    b7 = b;
#else
    int r[4];
    __cpuid(r, 0);
    if (r[0] < 7) return isa;
    __cpuid(r, 1);
    c1 = SELSCAN__CAST(unsigned, r[2]);
    if (!(c1 & (1u << 27))) return isa;
    xcr0 = SELSCAN__CAST(unsigned, _xgetbv(0));
    __cpuidex(r, 7, 0);
    b7 = SELSCAN__CAST(unsigned, r[1]);
#endif
    /* AVX2 + FMA + F16C + AVX, and the OS saves the YMM state */
    if ((b7 & (1u << 5)) && (c1 & (1u << 12)) && (c1 & (1u << 29)) && (c1 & (1u << 28)) && (xcr0 & 6u) == 6u) {
        isa = SELSCAN__ISA_AVX2;
        if ((b7 & (1u << 16)) && (xcr0 & 0xe6u) == 0xe6u) isa = SELSCAN__ISA_AVX512;
    }
    return isa;
#elif defined(SELSCAN__HAVE_NEON)
    return SELSCAN__ISA_NEON;
#else
    return SELSCAN__ISA_PORTABLE;
#endif
}

/* The path the CPU entry points use: detected once, then cached (the library's only global state
   on the CPU side: write-once, idempotent, every thread computes the same value). SELSCAN_CPU in
   the environment (avx512f, avx2, neon, portable; read once, when the cache is filled) lowers it:
   never above what this CPU runs. */
static int selscan__cpu_isa_env(int have) {
    const char *e = getenv("SELSCAN_CPU");
    int want = have;
    if (!e) return have;
    if (strcmp(e, "avx512f") == 0) want = SELSCAN__ISA_AVX512;
    else if (strcmp(e, "avx2") == 0) want = SELSCAN__ISA_AVX2;
    else if (strcmp(e, "neon") == 0) want = SELSCAN__ISA_NEON;
    else if (strcmp(e, "portable") == 0) want = SELSCAN__ISA_PORTABLE;
    if (want > have) want = have;
    if (want == SELSCAN__ISA_NEON && have != SELSCAN__ISA_NEON) want = SELSCAN__ISA_PORTABLE;
    return want;
}

static int selscan__cpu_isa(void) {
    static int cache; /* 0: not filled yet; else the path + 1 */
    int v;
#if defined(__GNUC__) || defined(__clang__)
    v = __atomic_load_n(&cache, __ATOMIC_RELAXED);
#else
    v = *SELSCAN__CAST(volatile int *, &cache);
#endif
    if (v) return v - 1;
    v = selscan__cpu_isa_env(selscan__cpu_isa_detect()) + 1;
#if defined(__GNUC__) || defined(__clang__)
    __atomic_store_n(&cache, v, __ATOMIC_RELAXED);
#else
    *SELSCAN__CAST(volatile int *, &cache) = v;
#endif
    return v - 1;
}

static int selscan__isa_width(int isa) {
    return isa == SELSCAN__ISA_AVX512 ? 16 : isa == SELSCAN__ISA_AVX2 ? 8 : isa == SELSCAN__ISA_NEON ? 4 : 1;
}

/* isa clamped to what this build and CPU can run. */
static int selscan__use_isa(int want) {
    int have = selscan__cpu_isa();
    if (want > have) want = have;
    if (want == SELSCAN__ISA_NEON && have != SELSCAN__ISA_NEON) want = SELSCAN__ISA_PORTABLE;
    if (want < 0) want = SELSCAN__ISA_PORTABLE;
    return want;
}

SELSCAN_DEF const char *selscan_cpu_backend(void) {
    static const char *const names[] = {"portable", "neon", "avx2+fma", "avx512f"};
    return names[selscan__cpu_isa()];
}

static int64_t selscan__r16(int64_t n) { return (n + 15) / 16 * 16; } /* floats, keeps 64-byte alignment */
static int64_t selscan__min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Split [0, n) into parts: [*i0, *i1) of part. */
static void selscan__split(int64_t n, int64_t part, int64_t nparts, int64_t *i0, int64_t *i1) {
    const int64_t q = n / nparts, r = n % nparts;
    *i0 = part * q + selscan__min64(part, r);
    *i1 = *i0 + q + (part < r ? 1 : 0);
}

/* ---- >>fast-tiles: tile loads and stores (any strides, any dtype), per-tile parameters ------ */

static void selscan__cvt_row(float *dst, const void *base, int64_t off, int64_t stride, int64_t n, selscan_dtype t) {
    int64_t i;
    if (t == SELSCAN_F32) {
        const float *p = SELSCAN__CAST(const float *, base) + off;
        if (stride == 1) memcpy(dst, p, SELSCAN__CAST(size_t, n) * 4);
        else for (i = 0; i < n; i++) dst[i] = p[i * stride];
    } else if (t == SELSCAN_BF16) {
        const uint16_t *p = SELSCAN__CAST(const uint16_t *, base) + off;
        for (i = 0; i < n; i++) dst[i] = selscan_bf16_to_f32(p[i * stride]);
    } else {
        const uint16_t *p = SELSCAN__CAST(const uint16_t *, base) + off;
        for (i = 0; i < n; i++) dst[i] = selscan_f16_to_f32(p[i * stride]);
    }
}

/* dst[t * W + l] = x[b, d0 + l, t0 + t] for l < nl, t < nt; lanes nl..W-1 are 0. */
static void selscan__load_tile(float *dst, const selscan__ten *x, int64_t b, int64_t d0, int nl, int W, int64_t t0,
                               int nt, float *tmp) {
    const int64_t off = b * x->s[0] + d0 * x->s[1] + t0 * x->s[2];
    int l, t;
    if (W == 1) {
        selscan__cvt_row(dst, x->data, off, x->s[2], nt, x->dt);
        return;
    }
    if (x->s[1] == 1 || x->s[2] != 1) { /* channels contiguous (or nothing is): row per step */
        for (t = 0; t < nt; t++) {
            selscan__cvt_row(dst + t * W, x->data, off + t * x->s[2], x->s[1], nl, x->dt);
            for (l = nl; l < W; l++) dst[t * W + l] = 0.0f;
        }
        return;
    }
    /* steps contiguous: rows per channel into tmp, then transpose */
    for (l = 0; l < nl; l++) selscan__cvt_row(tmp + l * SELSCAN__FT, x->data, off + l * x->s[1], 1, nt, x->dt);
    for (t = 0; t < nt; t++) {
        for (l = 0; l < nl; l++) dst[t * W + l] = tmp[l * SELSCAN__FT + t];
        for (l = nl; l < W; l++) dst[t * W + l] = 0.0f;
    }
}

static void selscan__store_row(void *base, int64_t off, int64_t stride, const float *src, int64_t n, selscan_dtype t) {
    int64_t i;
    if (t == SELSCAN_F32) {
        float *p = SELSCAN__CAST(float *, base) + off;
        if (stride == 1) memcpy(p, src, SELSCAN__CAST(size_t, n) * 4);
        else for (i = 0; i < n; i++) p[i * stride] = src[i];
    } else if (t == SELSCAN_BF16) {
        uint16_t *p = SELSCAN__CAST(uint16_t *, base) + off;
        for (i = 0; i < n; i++) p[i * stride] = selscan_f32_to_bf16(src[i]);
    } else {
        uint16_t *p = SELSCAN__CAST(uint16_t *, base) + off;
        for (i = 0; i < n; i++) p[i * stride] = selscan_f32_to_f16(src[i]);
    }
}

/* x[b, d0 + l, t0 + t] = src[t * W + l] for l < nl, t < nt. */
static void selscan__store_tile(const float *src, const selscan__ten *x, int64_t b, int64_t d0, int nl, int W,
                                int64_t t0, int nt, float *tmp) {
    const int64_t off = b * x->s[0] + d0 * x->s[1] + t0 * x->s[2];
    int l, t;
    if (W == 1) {
        selscan__store_row(x->data, off, x->s[2], src, nt, x->dt);
        return;
    }
    if (x->s[1] == 1 || x->s[2] != 1) {
        for (t = 0; t < nt; t++) selscan__store_row(x->data, off + t * x->s[2], x->s[1], src + t * W, nl, x->dt);
        return;
    }
    for (l = 0; l < nl; l++) {
        for (t = 0; t < nt; t++) tmp[t] = src[t * W + l];
        selscan__store_row(x->data, off + l * x->s[1], 1, tmp, nt, x->dt);
    }
}

/* Per-tile parameters: A, fixed B / C as [N][W]; D and delta_bias as [W] (0 where absent).
   Returns max |A| over the tile (NaN if some A is NaN). */
static float selscan__tile_params(const selscan__prob *q, int64_t d0, int nl, int W, float *A, float *A2, float *Bf, float *Cf,
                                 float *Dv, float *bv) {
    const int64_t N = q->N;
    float amax = 0.0f;
    int64_t n;
    int l;
    for (n = 0; n < N; n++)
        for (l = 0; l < W; l++) {
            const int in = l < nl;
            A[n * W + l] = in ? SELSCAN__CAST(const float *, q->A.data)[SELSCAN__AT2(q->A, d0 + l, n)] : 0.0f;
            A2[n * W + l] = A[n * W + l] * 1.44269504088896341f; /* A log2(e) */
            if (amax == amax && !(fabsf(A[n * W + l]) <= amax)) amax = fabsf(A[n * W + l]);
            if (q->fixB) Bf[n * W + l] = in ? SELSCAN__CAST(const float *, q->B.data)[SELSCAN__AT2(q->B, d0 + l, n)] : 0.0f;
            if (q->fixC) Cf[n * W + l] = in ? SELSCAN__CAST(const float *, q->C.data)[SELSCAN__AT2(q->C, d0 + l, n)] : 0.0f;
        }
    for (l = 0; l < W; l++) {
        const int in = l < nl;
        Dv[l] = in && q->D.data ? SELSCAN__CAST(const float *, q->D.data)[SELSCAN__AT1(q->D, d0 + l)] : 0.0f;
        bv[l] = in && q->delta_bias.data ? SELSCAN__CAST(const float *, q->delta_bias.data)[SELSCAN__AT1(q->delta_bias, d0 + l)] : 0.0f;
    }
    return amax;
}

/* A (rows, dim, N) f32 state tensor <-> [N][W] (absent: zeros). */
static void selscan__state_in(const selscan__ten *x, int64_t row, int64_t d0, int nl, int W, int64_t N, float *h) {
    int64_t n;
    int l;
    for (n = 0; n < N; n++)
        for (l = 0; l < W; l++)
            h[n * W + l] = x->data && l < nl ? SELSCAN__CAST(const float *, x->data)[SELSCAN__AT3(*x, row, d0 + l, n)] : 0.0f;
}

/* h's first nl lanes into x's rows (h_last; dh0 with canon: its NaNs as the default quiet NaN,
   selscan__canon) */
static void selscan__state_out(const selscan__ten *x, int64_t row, int64_t d0, int nl, int W, int64_t N, const float *h, int canon) {
    int64_t n;
    int l;
    for (l = 0; l < nl; l++)
        for (n = 0; n < N; n++) {
            const float v = h[n * W + l];
            SELSCAN__CAST(float *, x->data)[SELSCAN__AT3(*x, row, d0 + l, n)] = canon ? selscan__canon(v) : v;
        }
}

/* ---- >>fast-ckpt: the forward's chunk states for the backward ------------------------------- */

/* Chunk-state checkpoints written by the forward for the backward (selscan_checkpoint_size):
   (batch, dim, slots, N) f32; the state entering the chunk that starts at step s of sequence k
   is in slot s / SELSCAN__FT + k. */
static int64_t selscan__ck_slots(const selscan__prob *q) {
    return (q->L + SELSCAN__FT - 1) / SELSCAN__FT + (q->cu ? q->nseq : 1);
}

static void selscan__ck_put(const selscan__prob *q, float *ckp, int64_t b, int64_t d0, int nl, int W, int64_t slot,
                            const float *h) {
    const int64_t ns = selscan__ck_slots(q), N = q->N;
    int64_t n;
    int l;
    for (l = 0; l < nl; l++) {
        float *o = ckp + ((b * q->dim + d0 + l) * ns + slot) * N;
        for (n = 0; n < N; n++) o[n] = h[n * W + l];
    }
}

/* Slots [s0, s1) of channels d0 .. d0 + nl - 1 zeroed: the slots no chunk starts in (the
   forward defines every byte of its checkpoint, e.g. a framework op's output). */
static void selscan__ck_zero(const selscan__prob *q, float *ckp, int64_t b, int64_t d0, int nl, int64_t s0, int64_t s1) {
    const int64_t ns = selscan__ck_slots(q), N = q->N;
    int l;
    if (s1 > s0)
        for (l = 0; l < nl; l++) memset(ckp + ((b * q->dim + d0 + l) * ns + s0) * N, 0, SELSCAN__CAST(size_t, (s1 - s0) * N) * 4);
}

static void selscan__ck_get(const selscan__prob *q, const float *ckp, int64_t b, int64_t d0, int nl, int W, int64_t slot,
                            float *h) {
    const int64_t ns = selscan__ck_slots(q), N = q->N;
    int64_t n;
    int l;
    for (n = 0; n < N; n++)
        for (l = 0; l < W; l++) h[n * W + l] = l < nl ? ckp[((b * q->dim + d0 + l) * ns + slot) * N + n] : 0.0f;
}

/* Variable B or C of (b, g) for steps [c0, c0 + nt): a pointer p with p[n * sn + t * st],
   widened into buf ([N][SELSCAN__FT]). Fixed: the tile's
   [N][W] copy (the caller loads vectors). */
static const float *selscan__bc_chunk(const selscan__ten *x, int fixed, const float *tilecopy, int W, int64_t b,
                                      int64_t g, int64_t N, int64_t c0, int nt, float *buf, int64_t *sn, int64_t *st) {
    int64_t n;
    if (fixed) { *sn = W; *st = 0; return tilecopy; }
    /* always copied, also f32: rows L apart (often a multiple of 4 KiB) would fight over the
       same L1 sets */
    for (n = 0; n < N; n++)
        selscan__cvt_row(buf + n * SELSCAN__FT, x->data, b * x->s[0] + g * x->s[1] + n * x->s[2] + c0 * x->s[3], x->s[3],
                         nt, x->dt);
    *sn = SELSCAN__FT; *st = 1;
    return buf;
}

/* Step, common layout: B and C rows of (b, g), f32 rows used in place, others widened into Bb / Cb. */
static void selscan__step_bc(const selscan__stp *q, int64_t b, int64_t g, float *Bb, float *Cb, const float **Bp,
                             const float **Cp) {
    if (q->dt == SELSCAN_F32 && q->B.s[2] == 1) {
        *Bp = SELSCAN__CAST(const float *, q->B.data) + b * q->B.s[0] + g * q->B.s[1];
    } else {
        selscan__cvt_row(Bb, q->B.data, b * q->B.s[0] + g * q->B.s[1], q->B.s[2], q->N, q->dt);
        *Bp = Bb;
    }
    if (q->dt == SELSCAN_F32 && q->C.s[2] == 1) {
        *Cp = SELSCAN__CAST(const float *, q->C.data) + b * q->C.s[0] + g * q->C.s[1];
    } else {
        selscan__cvt_row(Cb, q->C.data, b * q->C.s[0] + g * q->C.s[1], q->C.s[2], q->N, q->dt);
        *Cp = Cb;
    }
}

/* ---- >>fast-scratch: scratch layouts (floats; every region a multiple of 16 floats) --------- */

typedef struct selscan__fscr {
    float *h, *A, *A2, *Bf, *Cf, *Bb, *Cb, *dt, *dtu, *u, *z, *y, *Dv, *bv, *tmp;
} selscan__fscr;

/* Assign the next region of n floats (p NULL: only count). */
#define SELSCAN__TAKE(field, n) (s->field = p ? p + o : NULL, o = selscan__sadd(o, (n)))

static int64_t selscan__fscr_map(selscan__fscr *s, float *p, int64_t N) {
    /* TW + 16: the per-step rows are not a multiple of 4 KiB apart (a load after a store to an
       address 4 KiB away waits for it: "4K aliasing") */
    const int64_t NW = selscan__r16(selscan__smul(N, SELSCAN__WMAX)), NT = selscan__r16(selscan__smul(N, SELSCAN__FT)),
                  TW = SELSCAN__FT * SELSCAN__WMAX + 16;
    int64_t o = 0;
    SELSCAN__TAKE(h, NW); SELSCAN__TAKE(A, NW); SELSCAN__TAKE(A2, NW); SELSCAN__TAKE(Bf, NW); SELSCAN__TAKE(Cf, NW);
    SELSCAN__TAKE(Bb, NT); SELSCAN__TAKE(Cb, NT);
    SELSCAN__TAKE(dt, TW); SELSCAN__TAKE(dtu, TW); SELSCAN__TAKE(u, TW); SELSCAN__TAKE(z, TW); SELSCAN__TAKE(y, TW);
    SELSCAN__TAKE(tmp, TW); SELSCAN__TAKE(Dv, SELSCAN__WMAX); SELSCAN__TAKE(bv, SELSCAN__WMAX);
    return o;
}

/* Backward chunk length: shorter for large N so one chunk's states stay in cache. */
static int64_t selscan__bwd_T(int64_t N) {
    int64_t T = 4096 / N;
    return T > 64 ? 64 : T < 8 ? 8 : T;
}

typedef struct selscan__bscr {
    float *ck, *hs, *ab, *accB, *accC, *dh, *A, *A2, *Bf, *Cf, *dA, *dBf, *dCf, *Dv, *bv, *dD, *db;
    float *dy, *dy0, *z, *sg, *yc, *S, *sA, *du, *ddt, *dz, *Bb, *Cb, *tmp, *wk, *pc;
    int64_t T, ckstride; /* ckstride: floats of checkpoints per tile */
    int64_t TS;          /* rows of the walk's inputs (wk, a prep cache slot): T W + 16 floats apart */
    int64_t pcs, pcn;    /* prep cache: floats per tile and chunk, chunks held (0: none) */
} selscan__bscr;

/* Rows of the walk back's inputs (selscan__wprep): dt, dt u, u, softplus' derivative, and with z
   dy silu(z), dy silu'(z). */
static int selscan__wk_rows(const selscan__prob *q) { return q->z.data ? 6 : 4; }

static int64_t selscan__bscr_map(selscan__bscr *s, float *p, int64_t N, int64_t L, int W, int na) {
    const int64_t T = selscan__bwd_T(N), nck = (L + T - 1) / T, CN = selscan__r16(selscan__smul(SELSCAN__CB, N));
    const int64_t TNW = selscan__r16(selscan__smul(T * SELSCAN__WMAX, N)), TW = selscan__r16(T * SELSCAN__WMAX) + 16; /* + 16: no 4K aliasing */
    const int64_t NT = selscan__r16(selscan__smul(N, SELSCAN__FT)), FW = SELSCAN__FT * SELSCAN__WMAX;
    int64_t o = 0;
    s->T = T;
    s->ckstride = selscan__r16(selscan__smul(selscan__smul(nck + 1, N), W));
    SELSCAN__TAKE(ck, selscan__smul(s->ckstride, SELSCAN__CB / W));
    SELSCAN__TAKE(hs, selscan__r16((T + 1) * SELSCAN__BG * SELSCAN__WMAX)); /* one state group (selscan__bwd_chunk) */
    SELSCAN__TAKE(ab, selscan__r16(T * SELSCAN__BG * SELSCAN__WMAX));
    SELSCAN__TAKE(accB, TNW); SELSCAN__TAKE(accC, TNW);
    SELSCAN__TAKE(dh, CN); SELSCAN__TAKE(A, CN); SELSCAN__TAKE(A2, CN); SELSCAN__TAKE(Bf, CN); SELSCAN__TAKE(Cf, CN);
    SELSCAN__TAKE(dA, CN); SELSCAN__TAKE(dBf, CN); SELSCAN__TAKE(dCf, CN);
    SELSCAN__TAKE(Dv, SELSCAN__CB); SELSCAN__TAKE(bv, SELSCAN__CB); SELSCAN__TAKE(dD, SELSCAN__CB);
    SELSCAN__TAKE(db, SELSCAN__CB);
    SELSCAN__TAKE(dy, TW); SELSCAN__TAKE(dy0, TW); SELSCAN__TAKE(z, TW); SELSCAN__TAKE(sg, TW);
    SELSCAN__TAKE(yc, TW); SELSCAN__TAKE(S, TW); SELSCAN__TAKE(sA, TW); SELSCAN__TAKE(du, TW);
    SELSCAN__TAKE(ddt, TW); SELSCAN__TAKE(dz, TW); SELSCAN__TAKE(tmp, FW);
    SELSCAN__TAKE(Bb, NT); SELSCAN__TAKE(Cb, NT);
    /* the walk's inputs of one chunk and tile (wk), and the prep cache (selscan__bwd_block): the
       same rows and the fast flag (last float) of every chunk and tile when the whole sequence
       fits SELSCAN__PCMAX floats */
    s->TS = T * W + 16;
    s->pcs = selscan__r16(na * s->TS + 1);
    s->pcn = selscan__smul(selscan__smul(na * T * SELSCAN__CB, nck), 1) <= SELSCAN__PCMAX ? nck : 0;
    SELSCAN__TAKE(wk, s->pcs);
    SELSCAN__TAKE(pc, selscan__smul(s->pcn * (SELSCAN__CB / W), s->pcs));
    return o;
}

/* Scratch floats of one backward part: the largest over the vector widths. */
static int64_t selscan__bscr_floats(int64_t N, int64_t L, int na) {
    selscan__bscr s;
    int64_t m = 0, x;
    int w;
    for (w = 1; w <= SELSCAN__WMAX; w *= 2)
        if ((x = selscan__bscr_map(&s, NULL, N, L, w, na)) > m) m = x;
    return m;
}

/* Shared backward partials (floats): offsets, -1 where not needed. */
typedef struct selscan__bsh {
    int64_t A, Bf, Cf, D, delta_bias, B, C, end, nbg;
} selscan__bsh;

/* Row stride (floats) of the per-block dB / dC partials [N][rows]: 64-byte aligned and not a
   multiple of 4 KiB, so the N rows written together do not share L1 sets. */
static int64_t selscan__prow(int64_t L) { return selscan__r16(L) + 16; }

static void selscan__bsh_map(selscan__bsh *h, const selscan__prob *q, const selscan__grd *r) {
    const int64_t bdn = selscan__r16(q->batch * q->dim * q->N), bd = selscan__r16(q->batch * q->dim);
    int64_t o = 0;
    h->nbg = (q->dpg + SELSCAN__CB - 1) / SELSCAN__CB;
    h->A = r->dA.data ? (o += bdn) - bdn : -1;
    h->Bf = r->dB.data && q->fixB ? (o += bdn) - bdn : -1;
    h->Cf = r->dC.data && q->fixC ? (o += bdn) - bdn : -1;
    h->D = r->dD.data ? (o += bd) - bd : -1;
    h->delta_bias = r->ddelta_bias.data ? (o += bd) - bd : -1;
    {
        const int64_t nb = selscan__smul(selscan__smul(q->batch * q->G, h->nbg), selscan__smul(q->N, selscan__prow(q->L)));
        h->B = r->dB.data && !q->fixB ? (o = selscan__sadd(o, nb)) - nb : -1;
        h->C = r->dC.data && !q->fixC ? (o = selscan__sadd(o, nb)) - nb : -1;
    }
    h->end = o;
}

/* ---- >>fast-isa: the kernels per instruction set -----------------------------------------------

   The kernels (>>fast-kernels, at the end of this file) are ordinary functions written once over
   the vector primitives below. Each block here defines the primitives for one instruction set,
   SELSCAN__KSFX (the suffix of the kernels' names: selscan__fwd_tile_avx2, ...) and SELSCAN__ATTR
   (their target attribute), then includes this file again (SELSCAN_HEADER_FILE): in that pass
   only the kernel section compiles, and it ends by #undef-ing all of them. SELSCAN__SFX(name)
   pastes the suffix to a kernel's name.

   primitive (VF: vector type)  portable (W 1)    avx2 (W 8)       avx512 (W 16)     neon (W 4)
   SELSCAN__VF                  float             __m256           __m512            float32x4_t
   SELSCAN__VW                  1                 8                16                4
   VLOAD(p) / VSTORE(p, v)      VW floats at p, unaligned
   VSET1(x)                     x in every lane
   VADD VSUB VMUL VDIV          lane-wise a op b
   VFMA(a, b, c)                a * b + c         fused            fused             fused
                                (portable: never contracted; see below)
   VMAX(a, x) / VMIN(a, x)      max / min, NaN in x stays NaN (neon: NaN in either)
   VGTSEL(a, b, x, y)           a > b ? x : y lane-wise (false for NaN)
   VCANON(v)                    v, with every NaN lane the default quiet NaN 0x7fc00000
   VPOW2I(t)                    2^k for t = k + 1.5 * 2^23 (k the rounded value), exponent bits
   VADDEXP(p, t)                p * 2^k, t as above, by an integer add to p's exponent
   VHSUM(v)                     sum of v's lanes in a fixed order
   VTHSUM(v, out)               out[c] = VHSUM(v[c]), c < VW (avx2: one transposing reduction)
   VTHSUMS(p, stride, out)      out[c] = VHSUM(VLOAD(p + c * stride)), c < VW
   VOPAQUE(v)                   v opaque to the optimizer (no folding across it)
   VLOADT(base, off, dt)        VW elements of dtype dt at base + off (contiguous), widened to f32:
                                selscan__load (portable), selscan__ld8_avx2, selscan__ld16_avx512,
                                selscan__ld4_neon
   VSTORET(base, off, dt, v)    v rounded to dt (nearest even; NaN stays NaN) into VW elements at
                                base + off: selscan__store, selscan__st8_avx2, _st16_avx512, _st4_neon
   LOADTILE / STORETILE         tile load / store: selscan__load_tile (avx2, avx512: the
                                _avx2 forms with 8 x 8 transposes) */

#ifndef SELSCAN_HEADER_FILE /* this file's name (it includes itself): if you renamed it, define this */
#define SELSCAN_HEADER_FILE "selscan.h" /* renamed? -DSELSCAN_HEADER_FILE='"new_name.h"' */
#endif
#define SELSCAN__SFX(name) SELSCAN__SFX2(name, SELSCAN__KSFX)
#define SELSCAN__SFX2(name, sfx) SELSCAN__SFX3(name, sfx)
#define SELSCAN__SFX3(name, sfx) name##_##sfx

/* ---- >>isa-portable: W = 1, plain floats -------------------------------------------------------
   No contraction of a * b + c into one fused operation (gcc's GNU modes do it on targets with an
   FMA instruction, e.g. arm64, and not the same way in every function): the forward and the
   backward's recompute must give the same bits. */
static float selscan__pow2i_s(float t) { /* t = round(x) + 1.5 * 2^23: 2^round(x) */
    uint32_t u = selscan__f32_bits(t);
    return selscan__bits_f32((u << 23) + (127u << 23));
}
static float selscan__opaque_s(float v) { /* a value the optimizer cannot see through */
    volatile float x = v;
    return x;
}
static float selscan__addexp_s(float p, float t) { /* p * 2^k, t = k + 1.5 * 2^23, as an integer add */
    return selscan__bits_f32(selscan__f32_bits(p) + (selscan__f32_bits(t) << 23));
}
#define SELSCAN__KSFX port
#define SELSCAN__ATTR
#define SELSCAN__VF float
#define SELSCAN__VW 1
#define SELSCAN__VLOAD(p) (*(p))
#define SELSCAN__VSTORE(p, v) (*(p) = (v))
#define SELSCAN__VSET1(x) (x)
#define SELSCAN__VADD(a, b) ((a) + (b))
#define SELSCAN__VSUB(a, b) ((a) - (b))
#define SELSCAN__VMUL(a, b) ((a) * (b))
#define SELSCAN__VDIV(a, b) ((a) / (b))
#define SELSCAN__VFMA(a, b, c) ((a) * (b) + (c))
#define SELSCAN__VMAX(a, x) ((x) < (a) ? (a) : (x)) /* NaN x stays */
#define SELSCAN__VMIN(a, x) ((x) > (a) ? (a) : (x))
#define SELSCAN__VGTSEL(a, b, x, y) ((a) > (b) ? (x) : (y))
#define SELSCAN__VCANON(v) selscan__canon(v)
#define SELSCAN__VPOW2I(t) selscan__pow2i_s(t)
#define SELSCAN__VHSUM(v) (v)
#define SELSCAN__VTHSUM(v, out) ((out)[0] = (v)[0])
#define SELSCAN__VTHSUMS(p, stride, out) ((out)[0] = (p)[0])
#define SELSCAN__VADDEXP(p, t) selscan__addexp_s(p, t)
#define SELSCAN__VOPAQUE(v) ((v) = selscan__opaque_s(v))
#define SELSCAN__VLOADT(base, off, dt) selscan__load(base, off, dt)
#define SELSCAN__VSTORET(base, off, dt, v) selscan__store(base, off, dt, v)
#define SELSCAN__LOADTILE selscan__load_tile
#define SELSCAN__STORETILE selscan__store_tile
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__) /* (nvcc's front end knows no such pragma) */
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
#include SELSCAN_HEADER_FILE /* the kernels (>>fast-kernels) as selscan__*_port */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC pop_options
#elif defined(__clang__)
#pragma STDC FP_CONTRACT DEFAULT
#endif
#ifdef SELSCAN__KSFX /* the kernel section #undefs it: this file did not include itself */
#error "selscan.h: SELSCAN_HEADER_FILE must name this file (it includes itself), e.g. -DSELSCAN_HEADER_FILE='\"my_selscan.h\"'"
#endif

#if defined(SELSCAN__HAVE_X86)
/* ---- >>isa-avx2: AVX2 + FMA + F16C, W = 8 --------------------------------------------------- */
static SELSCAN__T_AVX2 SELSCAN__INLINE float selscan__hsum_avx2(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}
/* out[c] = selscan__hsum_avx2 of the 8 floats at p + c * stride, c < 8, bitwise (the same tree of
   adds per lane), by one transposing reduction: 15 shuffles and adds for the 8 sums instead of 32. */
static SELSCAN__T_AVX2 SELSCAN__INLINE void selscan__thsums_avx2(const float *p, int64_t stride, float *out) {
    const __m256 v0 = _mm256_loadu_ps(p), v1 = _mm256_loadu_ps(p + stride), v2 = _mm256_loadu_ps(p + 2 * stride);
    const __m256 v3 = _mm256_loadu_ps(p + 3 * stride), v4 = _mm256_loadu_ps(p + 4 * stride);
    const __m256 v5 = _mm256_loadu_ps(p + 5 * stride), v6 = _mm256_loadu_ps(p + 6 * stride);
    const __m256 v7 = _mm256_loadu_ps(p + 7 * stride);
    /* s_i: [v_2i, v_2i+1], lane k: l_k + l_k+4 */
    const __m256 s0 = _mm256_add_ps(_mm256_permute2f128_ps(v0, v1, 0x20), _mm256_permute2f128_ps(v0, v1, 0x31));
    const __m256 s1 = _mm256_add_ps(_mm256_permute2f128_ps(v2, v3, 0x20), _mm256_permute2f128_ps(v2, v3, 0x31));
    const __m256 s2 = _mm256_add_ps(_mm256_permute2f128_ps(v4, v5, 0x20), _mm256_permute2f128_ps(v4, v5, 0x31));
    const __m256 s3 = _mm256_add_ps(_mm256_permute2f128_ps(v6, v7, 0x20), _mm256_permute2f128_ps(v6, v7, 0x31));
    /* (s0 + s2, s1 + s3) of v0, v2 | v1, v3 and of v4, v6 | v5, v7 */
    const __m256 t0 = _mm256_add_ps(_mm256_shuffle_ps(s0, s1, 0x44), _mm256_shuffle_ps(s0, s1, 0xee));
    const __m256 t1 = _mm256_add_ps(_mm256_shuffle_ps(s2, s3, 0x44), _mm256_shuffle_ps(s2, s3, 0xee));
    const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(t0, t1, 0x88), _mm256_shuffle_ps(t0, t1, 0xdd)); /* v0 v2 v4 v6 | v1 v3 v5 v7 */
    _mm256_storeu_ps(out, _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}
static SELSCAN__T_AVX2 SELSCAN__INLINE void selscan__thsum_avx2(const __m256 *v, float *out) {
    selscan__thsums_avx2(SELSCAN__RCAST(const float *, v), 8, out);
}
/* Tile loads and stores of 8 channels: 8 x 8 transposes when steps are contiguous, vector
   loads when channels are; the generic routines otherwise. */
static SELSCAN__T_AVX2 SELSCAN__INLINE __m256 selscan__ld8_avx2(const void *base, int64_t off, selscan_dtype t) {
    if (t == SELSCAN_F32) return _mm256_loadu_ps(SELSCAN__CAST(const float *, base) + off);
    {
        const __m128i h = _mm_loadu_si128(SELSCAN__RCAST(const __m128i *, SELSCAN__CAST(const uint16_t *, base) + off));
        if (t == SELSCAN_F16) return _mm256_cvtph_ps(h);
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
}

static SELSCAN__T_AVX2 SELSCAN__INLINE void selscan__st8_avx2(void *base, int64_t off, selscan_dtype t, __m256 v) {
    if (t == SELSCAN_F32) {
        _mm256_storeu_ps(SELSCAN__CAST(float *, base) + off, v);
    } else if (t == SELSCAN_F16) {
        _mm_storeu_si128(SELSCAN__RCAST(__m128i *, SELSCAN__CAST(uint16_t *, base) + off),
                         _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    } else { /* bf16: round to nearest even; NaN stays a (quiet) NaN */
        const __m256i x = _mm256_castps_si256(v);
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
        const __m256i qn = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
        r = _mm256_blendv_epi8(r, qn, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
        r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
        _mm_storeu_si128(SELSCAN__RCAST(__m128i *, SELSCAN__CAST(uint16_t *, base) + off), _mm256_castsi256_si128(r));
    }
}

static SELSCAN__T_AVX2 SELSCAN__INLINE void selscan__tr8_avx2(__m256 *r) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20); r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20); r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31); r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31); r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* Rows of W channels, steps contiguous: prefetch the chunks before and after [t0, t0 + FT) (the
   forward walks up, the backward down; many rows 4 KiB apart defeat the hardware prefetchers). */
static SELSCAN__T_AVX2 SELSCAN__INLINE void selscan__prefetch_rows_avx2(const selscan__ten *x, int64_t off, int W,
                                                                       int64_t t0) {
    const int es = x->dt == SELSCAN_F32 ? 4 : 2;
    const char *base = SELSCAN__CAST(const char *, x->data);
    int l, g;
    for (l = 0; l < W; l++)
        for (g = 0; g < SELSCAN__FT * es; g += 64) {
            if (t0 + SELSCAN__FT + g / es < x->n[2]) /* addresses inside the row only */
                _mm_prefetch(base + (off + l * x->s[1] + SELSCAN__FT) * es + g, _MM_HINT_T0);
            if (t0 >= SELSCAN__FT)
                _mm_prefetch(base + (off + l * x->s[1] - SELSCAN__FT) * es + g, _MM_HINT_T0);
        }
}

static SELSCAN__T_AVX2 void selscan__load_tile_avx2(float *dst, const selscan__ten *x, int64_t b, int64_t d0, int nl,
                                                   int W, int64_t t0, int nt, float *tmp) {
    const int64_t off = b * x->s[0] + d0 * x->s[1] + t0 * x->s[2];
    int t = 0, l, g;
    if (nl == W && W % 8 == 0 && x->s[1] == 1) {
        for (; t < nt; t++)
            for (g = 0; g < W; g += 8)
                _mm256_storeu_ps(dst + t * W + g, selscan__ld8_avx2(x->data, off + t * x->s[2] + g, x->dt));
        return;
    }
    if (nl == W && W % 8 == 0 && x->s[2] == 1) {
        __m256 r[8];
        selscan__prefetch_rows_avx2(x, off, W, t0);
        for (; t + 8 <= nt; t += 8)
            for (g = 0; g < W; g += 8) {
                for (l = 0; l < 8; l++) r[l] = selscan__ld8_avx2(x->data, off + (g + l) * x->s[1] + t, x->dt);
                selscan__tr8_avx2(r);
                for (l = 0; l < 8; l++) _mm256_storeu_ps(dst + (t + l) * W + g, r[l]);
            }
    }
    if (t < nt) selscan__load_tile(dst + t * W, x, b, d0, nl, W, t0 + t, nt - t, tmp);
}

static SELSCAN__T_AVX2 void selscan__store_tile_avx2(const float *src, const selscan__ten *x, int64_t b, int64_t d0,
                                                    int nl, int W, int64_t t0, int nt, float *tmp) {
    const int64_t off = b * x->s[0] + d0 * x->s[1] + t0 * x->s[2];
    int t = 0, l, g;
    if (nl == W && W % 8 == 0 && x->s[1] == 1) {
        for (; t < nt; t++)
            for (g = 0; g < W; g += 8)
                selscan__st8_avx2(x->data, off + t * x->s[2] + g, x->dt, _mm256_loadu_ps(src + t * W + g));
        return;
    }
    if (nl == W && W % 8 == 0 && x->s[2] == 1) {
        __m256 r[8], r2[8];
        selscan__prefetch_rows_avx2(x, off, W, t0);
        /* 16 steps a row at once: with rows 4 KiB apart (L = 1024, ...) the rows share L1 sets, and
           a line written half by half gets evicted between its halves */
        for (; t + 16 <= nt; t += 16)
            for (g = 0; g < W; g += 8) {
                for (l = 0; l < 8; l++) r[l] = _mm256_loadu_ps(src + (t + l) * W + g);
                for (l = 0; l < 8; l++) r2[l] = _mm256_loadu_ps(src + (t + 8 + l) * W + g);
                selscan__tr8_avx2(r);
                selscan__tr8_avx2(r2);
                for (l = 0; l < 8; l++) {
                    selscan__st8_avx2(x->data, off + (g + l) * x->s[1] + t, x->dt, r[l]);
                    selscan__st8_avx2(x->data, off + (g + l) * x->s[1] + t + 8, x->dt, r2[l]);
                }
            }
        for (; t + 8 <= nt; t += 8)
            for (g = 0; g < W; g += 8) {
                for (l = 0; l < 8; l++) r[l] = _mm256_loadu_ps(src + (t + l) * W + g);
                selscan__tr8_avx2(r);
                for (l = 0; l < 8; l++) selscan__st8_avx2(x->data, off + (g + l) * x->s[1] + t, x->dt, r[l]);
            }
    }
    if (t < nt) selscan__store_tile(src + t * W, x, b, d0, nl, W, t0 + t, nt - t, tmp);
}

#define SELSCAN__KSFX avx2
#define SELSCAN__ATTR SELSCAN__T_AVX2
#define SELSCAN__VF __m256
#define SELSCAN__VW 8
#define SELSCAN__VLOAD(p) _mm256_loadu_ps(p)
#define SELSCAN__VSTORE(p, v) _mm256_storeu_ps(p, v)
#define SELSCAN__VSET1(x) _mm256_set1_ps(x)
#define SELSCAN__VADD(a, b) _mm256_add_ps(a, b)
#define SELSCAN__VSUB(a, b) _mm256_sub_ps(a, b)
#define SELSCAN__VMUL(a, b) _mm256_mul_ps(a, b)
#define SELSCAN__VDIV(a, b) _mm256_div_ps(a, b)
#define SELSCAN__VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define SELSCAN__VMAX(a, x) _mm256_max_ps(a, x) /* NaN in the second operand stays */
#define SELSCAN__VMIN(a, x) _mm256_min_ps(a, x)
#define SELSCAN__VGTSEL(a, b, x, y) _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_GT_OQ))
#define SELSCAN__VCANON(v) _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)), _mm256_cmp_ps(v, v, _CMP_UNORD_Q))
#define SELSCAN__VPOW2I(t)                                                                                     \
    _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(_mm256_castps_si256(t), 23), _mm256_set1_epi32(127 << 23)))
#define SELSCAN__VHSUM(v) selscan__hsum_avx2(v)
#define SELSCAN__VTHSUM(v, out) selscan__thsum_avx2(v, out)
#define SELSCAN__VTHSUMS(p, stride, out) selscan__thsums_avx2(p, stride, out)
#if defined(__GNUC__) || defined(__clang__)
#define SELSCAN__VOPAQUE(v) __asm__("" : "+x"(v))
#else
#define SELSCAN__VOPAQUE(v) ((void)0)
#endif
#define SELSCAN__VLOADT(base, off, dt) selscan__ld8_avx2(base, off, dt)
#define SELSCAN__VSTORET(base, off, dt, v) selscan__st8_avx2(base, off, dt, v)
#define SELSCAN__LOADTILE selscan__load_tile_avx2
#define SELSCAN__STORETILE selscan__store_tile_avx2
#define SELSCAN__VADDEXP(p, t) _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), _mm256_slli_epi32(_mm256_castps_si256(t), 23)))
#include SELSCAN_HEADER_FILE /* the kernels as selscan__*_avx2 */

/* ---- >>isa-avx512: AVX-512F, W = 16 --------------------------------------------------------- */
static SELSCAN__T_AVX512 SELSCAN__INLINE float selscan__hsum_avx512(__m512 v) {
    float x[16]; /* through memory: g++ 12 warns inside the 512 -> 256 extract intrinsics */
    _mm512_storeu_ps(x, v);
    return selscan__hsum_avx2(_mm256_add_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8)));
}
/* 16 contiguous elements, as selscan__ld8_avx2 / selscan__st8_avx2 do 8 (the maskz forms: g++ 12 warns
   about the undefined source of the plain ones) */
static SELSCAN__T_AVX512 SELSCAN__INLINE __m512 selscan__ld16_avx512(const void *base, int64_t off, selscan_dtype t) {
    if (t == SELSCAN_F32) return _mm512_loadu_ps(SELSCAN__CAST(const float *, base) + off);
    {
        const __m256i h = _mm256_loadu_si256(SELSCAN__RCAST(const __m256i *, SELSCAN__CAST(const uint16_t *, base) + off));
        if (t == SELSCAN_F16) return _mm512_maskz_cvtph_ps(0xffff, h);
        return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, h), 16));
    }
}
static SELSCAN__T_AVX512 SELSCAN__INLINE void selscan__st16_avx512(void *base, int64_t off, selscan_dtype t, __m512 v) {
    __m256i r16;
    if (t == SELSCAN_F32) {
        _mm512_storeu_ps(SELSCAN__CAST(float *, base) + off, v);
        return;
    }
    if (t == SELSCAN_F16) {
        r16 = _mm512_maskz_cvtps_ph(0xffff, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else { /* bf16: round to nearest even; NaN stays a (quiet) NaN */
        const __m512i x = _mm512_castps_si512(v), hi = _mm512_maskz_srli_epi32(0xffff, x, 16);
        const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
        __m512i r = _mm512_maskz_srli_epi32(0xffff, _mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
        r = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), r, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
        r16 = _mm512_maskz_cvtepi32_epi16(0xffff, r);
    }
    _mm256_storeu_si256(SELSCAN__RCAST(__m256i *, SELSCAN__CAST(uint16_t *, base) + off), r16);
}
#define SELSCAN__KSFX avx512
#define SELSCAN__ATTR SELSCAN__T_AVX512
#define SELSCAN__VF __m512
#define SELSCAN__VW 16
#define SELSCAN__VLOAD(p) _mm512_loadu_ps(p)
#define SELSCAN__VSTORE(p, v) _mm512_storeu_ps(p, v)
#define SELSCAN__VSET1(x) _mm512_set1_ps(x)
#define SELSCAN__VADD(a, b) _mm512_add_ps(a, b)
#define SELSCAN__VSUB(a, b) _mm512_sub_ps(a, b)
#define SELSCAN__VMUL(a, b) _mm512_mul_ps(a, b)
#define SELSCAN__VDIV(a, b) _mm512_div_ps(a, b)
#define SELSCAN__VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
/* the maskz forms: g++ 12 warns about the undefined source of the plain ones */
#define SELSCAN__VMAX(a, x) _mm512_maskz_max_ps(0xffff, a, x)
#define SELSCAN__VMIN(a, x) _mm512_maskz_min_ps(0xffff, a, x)
#define SELSCAN__VGTSEL(a, b, x, y) _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_GT_OQ), y, x)
#define SELSCAN__VCANON(v) _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v, _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)))
#define SELSCAN__VPOW2I(t)                                                                                     \
    _mm512_castsi512_ps(_mm512_add_epi32(_mm512_maskz_slli_epi32(0xffff, _mm512_castps_si512(t), 23), _mm512_set1_epi32(127 << 23)))
#define SELSCAN__VHSUM(v) selscan__hsum_avx512(v)
#define SELSCAN__VTHSUM(v, out) do { int i_; for (i_ = 0; i_ < 16; i_++) (out)[i_] = selscan__hsum_avx512((v)[i_]); } while (0)
#define SELSCAN__VTHSUMS(p, stride, out) do { int i_; for (i_ = 0; i_ < 16; i_++) (out)[i_] = selscan__hsum_avx512(_mm512_loadu_ps((p) + i_ * (stride))); } while (0)
#if defined(__GNUC__) || defined(__clang__)
#define SELSCAN__VOPAQUE(v) __asm__("" : "+v"(v))
#else
#define SELSCAN__VOPAQUE(v) ((void)0)
#endif
#define SELSCAN__VLOADT(base, off, dt) selscan__ld16_avx512(base, off, dt)
#define SELSCAN__VSTORET(base, off, dt, v) selscan__st16_avx512(base, off, dt, v)
#define SELSCAN__LOADTILE selscan__load_tile_avx2 /* AVX-512F CPUs have AVX2 */
#define SELSCAN__STORETILE selscan__store_tile_avx2
#define SELSCAN__VADDEXP(p, t) _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), _mm512_maskz_slli_epi32(0xffff, _mm512_castps_si512(t), 23)))
#include SELSCAN_HEADER_FILE /* the kernels as selscan__*_avx512 */
#endif /* SELSCAN__HAVE_X86 */

#if defined(SELSCAN__HAVE_NEON)
/* ---- >>isa-neon: arm64 NEON, W = 4 ---------------------------------------------------------- */
/* 4 contiguous elements, as selscan__ld8_avx2 / selscan__st8_avx2 do 8 (f16 by the FCVT instructions,
   round to nearest even as the FPCR's default; bf16 by shifts) */
static SELSCAN__INLINE float32x4_t selscan__ld4_neon(const void *base, int64_t off, selscan_dtype t) {
    if (t == SELSCAN_F32) return vld1q_f32(SELSCAN__CAST(const float *, base) + off);
    {
        const uint16x4_t h = vld1_u16(SELSCAN__CAST(const uint16_t *, base) + off);
        if (t == SELSCAN_F16) return vcvt_f32_f16(vreinterpret_f16_u16(h));
        return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
    }
}
static SELSCAN__INLINE void selscan__st4_neon(void *base, int64_t off, selscan_dtype t, float32x4_t v) {
    uint16_t *p = SELSCAN__CAST(uint16_t *, base) + off;
    if (t == SELSCAN_F32) {
        vst1q_f32(SELSCAN__CAST(float *, base) + off, v);
    } else if (t == SELSCAN_F16) {
        vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(v)));
    } else { /* bf16: round to nearest even; NaN stays a (quiet) NaN */
        const uint32x4_t x = vreinterpretq_u32_f32(v), hi = vshrq_n_u32(x, 16);
        const uint32x4_t lsb = vandq_u32(hi, vdupq_n_u32(1));
        uint32x4_t r = vshrq_n_u32(vaddq_u32(x, vaddq_u32(lsb, vdupq_n_u32(0x7fff))), 16);
        r = vbslq_u32(vceqq_f32(v, v), r, vorrq_u32(hi, vdupq_n_u32(0x40)));
        vst1_u16(p, vmovn_u32(r));
    }
}
#define SELSCAN__KSFX neon
#define SELSCAN__ATTR
#define SELSCAN__VF float32x4_t
#define SELSCAN__VW 4
#define SELSCAN__VLOAD(p) vld1q_f32(p)
#define SELSCAN__VSTORE(p, v) vst1q_f32(p, v)
#define SELSCAN__VSET1(x) vdupq_n_f32(x)
#define SELSCAN__VADD(a, b) vaddq_f32(a, b)
#define SELSCAN__VSUB(a, b) vsubq_f32(a, b)
#define SELSCAN__VMUL(a, b) vmulq_f32(a, b)
#define SELSCAN__VDIV(a, b) vdivq_f32(a, b)
#define SELSCAN__VFMA(a, b, c) vfmaq_f32(c, a, b)
#define SELSCAN__VMAX(a, x) vmaxq_f32(a, x) /* NaN propagates */
#define SELSCAN__VMIN(a, x) vminq_f32(a, x)
#define SELSCAN__VGTSEL(a, b, x, y) vbslq_f32(vcgtq_f32(a, b), x, y)
#define SELSCAN__VCANON(v) vbslq_f32(vceqq_f32(v, v), v, vreinterpretq_f32_u32(vdupq_n_u32(0x7fc00000u)))
#define SELSCAN__VPOW2I(t)                                                                                     \
    vreinterpretq_f32_s32(vaddq_s32(vshlq_n_s32(vreinterpretq_s32_f32(t), 23), vdupq_n_s32(127 << 23)))
#define SELSCAN__VHSUM(v) vaddvq_f32(v)
#define SELSCAN__VTHSUM(v, out) do { int i_; for (i_ = 0; i_ < 4; i_++) (out)[i_] = vaddvq_f32((v)[i_]); } while (0)
#define SELSCAN__VTHSUMS(p, stride, out) do { int i_; for (i_ = 0; i_ < 4; i_++) (out)[i_] = vaddvq_f32(vld1q_f32((p) + i_ * (stride))); } while (0)
#if defined(__GNUC__) || defined(__clang__)
#define SELSCAN__VOPAQUE(v) __asm__("" : "+w"(v))
#else
#define SELSCAN__VOPAQUE(v) ((void)0)
#endif
#define SELSCAN__VLOADT(base, off, dt) selscan__ld4_neon(base, off, dt)
#define SELSCAN__VSTORET(base, off, dt, v) selscan__st4_neon(base, off, dt, v)
#define SELSCAN__LOADTILE selscan__load_tile
#define SELSCAN__STORETILE selscan__store_tile
#define SELSCAN__VADDEXP(p, t) vreinterpretq_f32_s32(vaddq_s32(vreinterpretq_s32_f32(p), vshlq_n_s32(vreinterpretq_s32_f32(t), 23)))
#include SELSCAN_HEADER_FILE /* the kernels as selscan__*_neon */
#endif /* SELSCAN__HAVE_NEON */

/* ---- >>fast-drivers: workspace sizes, validation, the work items of a part ------------------ */

static int64_t selscan__ws_fast_fwd(const selscan__prob *q, int64_t nparts) {
    selscan__fscr s;
    return selscan__smul(selscan__align_up(selscan__smul(selscan__fscr_map(&s, NULL, q->N), 4)), nparts);
}

/* Shared partials, then one scratch per part. */
static int64_t selscan__ws_fast_bwd(const selscan__prob *q, const selscan__grd *r, int64_t nparts) {
    selscan__bsh h;
    selscan__bsh_map(&h, q, r);
    return selscan__sadd(selscan__align_up(selscan__smul(h.end, 4)),
                         selscan__smul(selscan__align_up(selscan__smul(selscan__bscr_floats(q->N, q->L, selscan__wk_rows(q)), 4)), nparts));
}

static int64_t selscan__ws_fast(const selscan__prob *q, const selscan__grd *r, int64_t nparts) {
    return r ? selscan__ws_fast_bwd(q, r, nparts) : selscan__ws_fast_fwd(q, nparts);
}

/* 1 <= n_parts <= 2^24 (far more than any machine's threads; keeps the sizes in range). */
static selscan_status selscan__check_part(int64_t part, int64_t nparts, selscan_diag *d) {
    if (nparts < 1 || nparts > (SELSCAN__CAST(int64_t, 1) << 24)) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "n_parts", OUT_OF_RANGE);
    if (part < 0 || part >= nparts) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "part", OUT_OF_RANGE);
    return SELSCAN_OK;
}

static int64_t selscan__ck_bytes(const selscan__prob *q) {
    return selscan__smul(selscan__smul(q->batch * q->dim, selscan__ck_slots(q)), q->N * 4);
}

/* The checkpoint buffer: present, large enough, float-aligned, and clear of the tensors (others:
   what it may not overlap) and the workspace. */
static selscan_status selscan__check_ck(const selscan__prob *q, const void *ck, size_t ck_bytes,
                                        const selscan__ten *const *others, int nothers, const void *ws,
                                        size_t ws_bytes) {
    int i;
    selscan_diag *d = q->diag;
    if (!selscan__size_ok(selscan__ck_bytes(q))) SELSCAN__FAIL(d, SELSCAN_ERR_SHAPE, "checkpoint", SIZE_OVERFLOWS);
    if (!ck) SELSCAN__FAIL(d, SELSCAN_ERR_WORKSPACE, "checkpoint", MISSING);
    if (ck_bytes < SELSCAN__CAST(size_t, selscan__ck_bytes(q))) SELSCAN__FAIL(d, SELSCAN_ERR_WORKSPACE, "checkpoint", TOO_SMALL);
    if (SELSCAN__RCAST(uintptr_t, ck) % 4 != 0) SELSCAN__FAIL(d, SELSCAN_ERR_WORKSPACE, "checkpoint", NOT_FLOAT_ALIGNED);
    for (i = 0; i < nothers; i++)
        if (selscan__overlap(others[i]->data, selscan__bytes(others[i]), ck, SELSCAN__CAST(int64_t, ck_bytes)))
            SELSCAN__FAIL_OVL(d, "checkpoint", selscan__ovl(others[i]));
    if (selscan__overlap(ws, SELSCAN__CAST(int64_t, ws_bytes), ck, SELSCAN__CAST(int64_t, ck_bytes)))
        SELSCAN__FAIL_OVL(d, "checkpoint", "overlaps workspace");
    if (q->cu && selscan__overlap(q->cu, (q->nseq + 1) * 8, ck, SELSCAN__CAST(int64_t, ck_bytes)))
        SELSCAN__FAIL_OVL(d, "checkpoint", "overlaps cu_seqlens");
    return SELSCAN_OK;
}

static selscan_status selscan__forward_fast(const selscan_problem *p, int64_t part, int64_t nparts, void *workspace,
                                            size_t bytes, int isa, float *ckpt, size_t ckpt_bytes) {
    selscan__prob q;
    selscan__fscr s;
    selscan_status st;
    int64_t W, ntg, i0, i1, i, per;
    if ((st = selscan__check_part(part, nparts, p ? p->diag : NULL)) != SELSCAN_OK) return st;
    if ((st = selscan__check_problem(p, &q, 1)) != SELSCAN_OK) return st;
    workspace = selscan__ws_align(workspace, bytes, &bytes); /* every part aligns the same pointer alike */
    st = selscan__validate_forward_outputs(&q, workspace, bytes, selscan__ws_fast_fwd(&q, nparts));
    if (st != SELSCAN_OK) return st;
    if (ckpt) {
        const selscan__ten *all[] = {SELSCAN__SCAN_OPERANDS(SELSCAN__OPD_ALL, &q)};
        if ((st = selscan__check_ck(&q, ckpt, ckpt_bytes, all, SELSCAN__COUNT(all), workspace, bytes)) != SELSCAN_OK) return st;
    }
    isa = selscan__use_isa(isa);
    W = selscan__isa_width(isa);
    ntg = (q.dpg + W - 1) / W;
    per = selscan__align_up(selscan__fscr_map(&s, NULL, q.N) * 4);
    selscan__fscr_map(&s, SELSCAN__RCAST(float *, SELSCAN__CAST(char *, workspace) + part * per), q.N);
    selscan__split(q.batch * q.G * ntg, part, nparts, &i0, &i1);
    for (i = i0; i < i1; i++) {
        const int64_t b = i / (q.G * ntg), g = i / ntg % q.G, k = i % ntg, d0 = g * q.dpg + k * W;
        const int nl = SELSCAN__CAST(int, selscan__min64(W, q.dpg - k * W));
        switch (isa) {
#if defined(SELSCAN__HAVE_X86)
        case SELSCAN__ISA_AVX512: selscan__fwd_tile_avx512(&q, b, g, d0, nl, &s, ckpt); break;
        case SELSCAN__ISA_AVX2: selscan__fwd_tile_avx2(&q, b, g, d0, nl, &s, ckpt); break;
#endif
#if defined(SELSCAN__HAVE_NEON)
        case SELSCAN__ISA_NEON: selscan__fwd_tile_neon(&q, b, g, d0, nl, &s, ckpt); break;
#endif
        default: selscan__fwd_tile_port(&q, b, g, d0, nl, &s, ckpt); break;
        }
    }
    return SELSCAN_OK;
}

/* Backward validation plus the fast path's workspace (need: bytes required, -1: shared part only). */
static selscan_status selscan__validate_bwd_fast(const selscan_problem *p, const selscan_grads *g, selscan__prob *q,
                                                 selscan__grd *r, const void *ws, size_t bytes, int64_t nparts,
                                                 int shared_only) {
    selscan_status st = selscan__validate_backward(p, g, q, r, NULL, 0, 0);
    int64_t need;
    selscan__bsh h;
    if (st != SELSCAN_OK) return st;
    selscan__bsh_map(&h, q, r);
    need = shared_only ? selscan__align_up(selscan__smul(h.end, 4)) : selscan__ws_fast_bwd(q, r, nparts);
    if ((st = selscan__check_ws_d(ws, bytes, need, q->diag)) != SELSCAN_OK) return st;
    if (need > 0) {
        const selscan__ten *outs[] = {SELSCAN__GRAD_OPERANDS(SELSCAN__OPD_OUTS, r)};
        const selscan__ten *ins[] = {SELSCAN__SCAN_OPERANDS(SELSCAN__OPD_INS, q) SELSCAN__GRAD_OPERANDS(SELSCAN__OPD_INS, r)};
        int i;
        for (i = 0; i < SELSCAN__COUNT(outs); i++)
            if (selscan__overlap(outs[i]->data, selscan__bytes(outs[i]), ws, SELSCAN__CAST(int64_t, bytes)))
                SELSCAN__FAIL_OVL(q->diag, selscan__name(outs[i]), "overlaps workspace");
        for (i = 0; i < SELSCAN__COUNT(ins); i++)
            if (selscan__overlap(ins[i]->data, selscan__bytes(ins[i]), ws, SELSCAN__CAST(int64_t, bytes)))
                SELSCAN__FAIL_OVL(q->diag, "workspace", selscan__ovl(ins[i]));
        if (q->cu && selscan__overlap(q->cu, (q->nseq + 1) * 8, ws, SELSCAN__CAST(int64_t, bytes)))
            SELSCAN__FAIL_OVL(q->diag, "workspace", "overlaps cu_seqlens");
    }
    return SELSCAN_OK;
}

static selscan_status selscan__backward_fast(const selscan_problem *p, const selscan_grads *g, int64_t part,
                                             int64_t nparts, void *workspace, size_t bytes, int isa,
                                             const float *ckpt, size_t ckpt_bytes) {
    selscan__prob q;
    selscan__grd r;
    selscan__bscr s;
    selscan__bsh h;
    selscan_status st;
    int64_t i0, i1, i, per, sh, d, n;
    float *ws;
    if ((st = selscan__check_part(part, nparts, p ? p->diag : NULL)) != SELSCAN_OK) return st;
    workspace = selscan__ws_align(workspace, bytes, &bytes); /* every part aligns the same pointer alike */
    ws = SELSCAN__CAST(float *, workspace);
    if ((st = selscan__validate_bwd_fast(p, g, &q, &r, workspace, bytes, nparts, 0)) != SELSCAN_OK) return st;
    if (ckpt) {
        const selscan__ten *outs[] = {SELSCAN__GRAD_OPERANDS(SELSCAN__OPD_OUTS, &r)};
        if ((st = selscan__check_ck(&q, ckpt, ckpt_bytes, outs, SELSCAN__COUNT(outs), workspace, bytes)) != SELSCAN_OK) return st;
    }
    isa = selscan__use_isa(isa);
    selscan__bsh_map(&h, &q, &r);
    sh = selscan__align_up(h.end * 4);
    per = selscan__align_up(selscan__bscr_floats(q.N, q.L, selscan__wk_rows(&q)) * 4);
    selscan__bscr_map(&s, SELSCAN__RCAST(float *, SELSCAN__CAST(char *, workspace) + sh + part * per), q.N, q.L,
                      selscan__isa_width(isa), selscan__wk_rows(&q));
    { /* NaN into this part's share of the outputs only the reduce writes (a forgotten reduce shows) */
        const float nan = selscan__nan_f32();
        selscan__split(q.dim, part, nparts, &i0, &i1);
        for (d = i0; d < i1; d++) {
            if (h.D >= 0) SELSCAN__CAST(float *, r.dD.data)[SELSCAN__AT1(r.dD, d)] = nan;
            if (h.delta_bias >= 0) SELSCAN__CAST(float *, r.ddelta_bias.data)[SELSCAN__AT1(r.ddelta_bias, d)] = nan;
            for (n = 0; n < q.N; n++) {
                if (h.A >= 0) SELSCAN__CAST(float *, r.dA.data)[SELSCAN__AT2(r.dA, d, n)] = nan;
                if (h.Bf >= 0) SELSCAN__CAST(float *, r.dB.data)[SELSCAN__AT2(r.dB, d, n)] = nan;
                if (h.Cf >= 0) SELSCAN__CAST(float *, r.dC.data)[SELSCAN__AT2(r.dC, d, n)] = nan;
            }
        }
    }
    selscan__split(q.batch * q.G * h.nbg, part, nparts, &i0, &i1);
    for (i = i0; i < i1; i++) {
        const int64_t b = i / (q.G * h.nbg), gg = i / h.nbg % q.G, k = i % h.nbg, c0 = gg * q.dpg + k * SELSCAN__CB;
        const int nch = SELSCAN__CAST(int, selscan__min64(SELSCAN__CB, q.dpg - k * SELSCAN__CB));
        const int W = selscan__isa_width(isa), nbt = (nch + W - 1) / W;
        float *pB = h.B >= 0 ? ws + h.B + i * q.N * selscan__prow(q.L) : NULL;
        float *pC = h.C >= 0 ? ws + h.C + i * q.N * selscan__prow(q.L) : NULL;
        int j, l;
        switch (isa) {
#if defined(SELSCAN__HAVE_X86)
        case SELSCAN__ISA_AVX512: selscan__bwd_block_avx512(&q, &r, b, gg, c0, nch, &s, pB, pC, ckpt); break;
        case SELSCAN__ISA_AVX2: selscan__bwd_block_avx2(&q, &r, b, gg, c0, nch, &s, pB, pC, ckpt); break;
#endif
#if defined(SELSCAN__HAVE_NEON)
        case SELSCAN__ISA_NEON: selscan__bwd_block_neon(&q, &r, b, gg, c0, nch, &s, pB, pC, ckpt); break;
#endif
        default: selscan__bwd_block_port(&q, &r, b, gg, c0, nch, &s, pB, pC, ckpt); break;
        }
        /* per batch row partials of the sums over batch */
        for (j = 0; j < nbt; j++)
            for (l = 0; l < W && j * W + l < nch; l++) {
                d = c0 + j * W + l;
                for (n = 0; n < q.N; n++) {
                    const int64_t o = (b * q.dim + d) * q.N + n, x = (j * q.N + n) * W + l;
                    if (h.A >= 0) ws[h.A + o] = s.dA[x];
                    if (h.Bf >= 0) ws[h.Bf + o] = s.dBf[x];
                    if (h.Cf >= 0) ws[h.Cf + o] = s.dCf[x];
                }
                if (h.D >= 0) ws[h.D + b * q.dim + d] = s.dD[j * W + l];
                if (h.delta_bias >= 0) ws[h.delta_bias + b * q.dim + d] = s.db[j * W + l];
            }
    }
    return SELSCAN_OK;
}

/* The reduces' sums of per-item partials, each in one fixed order (increasing k), NaN canonical:
   selscan__psum: sum_k ws[off + k * stride], k < nk; selscan__psum_rows: nk rows of n floats
   (kstride apart from src) added lane-wise in blocks of 256 and stored into dst's row (element
   offset doff, element stride ds) in dtype dt. */
static float selscan__psum(const float *ws, int64_t off, int64_t stride, int64_t nk) {
    float s = 0.0f;
    int64_t k;
    for (k = 0; k < nk; k++) s += ws[off + k * stride];
    return selscan__canon(s);
}
static void selscan__psum_rows(const float *src, int64_t kstride, int64_t nk, int64_t n, void *dst, int64_t doff,
                               int64_t ds, selscan_dtype dt) {
    int64_t j0, j, k;
    for (j0 = 0; j0 < n; j0 += 256) {
        float acc[256];
        const int64_t nb = selscan__min64(256, n - j0);
        for (j = 0; j < nb; j++) acc[j] = 0.0f;
        for (k = 0; k < nk; k++)
            for (j = 0; j < nb; j++) acc[j] += src[k * kstride + j0 + j];
        for (j = 0; j < nb; j++) acc[j] = selscan__canon(acc[j]);
        selscan__store_row(dst, doff + j0 * ds, ds, acc, nb, dt);
    }
}

static selscan_status selscan__backward_reduce(const selscan_problem *p, const selscan_grads *g, int64_t part,
                                               int64_t nparts, void *workspace, size_t bytes) {
    selscan__prob q;
    selscan__grd r;
    selscan__bsh h;
    selscan_status st;
    const float *ws;
    int64_t i0, i1, i, n;
    if ((st = selscan__check_part(part, nparts, p ? p->diag : NULL)) != SELSCAN_OK) return st;
    workspace = selscan__ws_align(workspace, bytes, &bytes); /* as the parts aligned it */
    ws = SELSCAN__CAST(const float *, workspace);
    if ((st = selscan__validate_bwd_fast(p, g, &q, &r, workspace, bytes, 1, 1)) != SELSCAN_OK) return st;
    selscan__bsh_map(&h, &q, &r);
    selscan__split(q.dim, part, nparts, &i0, &i1);
    for (i = i0; i < i1; i++) { /* the sums over batch rows */
        const int64_t sN = q.dim * q.N;
        if (h.D >= 0) SELSCAN__CAST(float *, r.dD.data)[SELSCAN__AT1(r.dD, i)] = selscan__psum(ws, h.D + i, q.dim, q.batch);
        if (h.delta_bias >= 0)
            SELSCAN__CAST(float *, r.ddelta_bias.data)[SELSCAN__AT1(r.ddelta_bias, i)] = selscan__psum(ws, h.delta_bias + i, q.dim, q.batch);
        for (n = 0; n < q.N; n++) {
            const int64_t o = i * q.N + n;
            if (h.A >= 0) SELSCAN__CAST(float *, r.dA.data)[SELSCAN__AT2(r.dA, i, n)] = selscan__psum(ws, h.A + o, sN, q.batch);
            if (h.Bf >= 0) SELSCAN__CAST(float *, r.dB.data)[SELSCAN__AT2(r.dB, i, n)] = selscan__psum(ws, h.Bf + o, sN, q.batch);
            if (h.Cf >= 0) SELSCAN__CAST(float *, r.dC.data)[SELSCAN__AT2(r.dC, i, n)] = selscan__psum(ws, h.Cf + o, sN, q.batch);
        }
    }
    if (h.B >= 0 || h.C >= 0) {
        selscan__split(q.batch * q.G * q.N, part, nparts, &i0, &i1);
        for (i = i0; i < i1; i++) { /* row (b, g, n) */
            const int64_t bg = i / q.N, nn = i % q.N, bb = bg / q.G, gg = bg % q.G;
            int which;
            for (which = 0; which < 2; which++) {
                const int64_t off = which ? h.C : h.B;
                const selscan__ten *dst = which ? &r.dC : &r.dB;
                if (off < 0) continue; /* the blocks' partials summed in order */
                selscan__psum_rows(ws + off + (bg * h.nbg * q.N + nn) * selscan__prow(q.L), q.N * selscan__prow(q.L),
                                   h.nbg, q.L, dst->data, SELSCAN__AT4(*dst, bb, gg, nn, 0), dst->s[3], q.dt);
            }
        }
    }
    return SELSCAN_OK;
}

static selscan_status selscan__step_fast(const selscan_step_problem *sp, int64_t part, int64_t nparts, int isa) {
    selscan__stp q;
    selscan_status st;
    int64_t nblk, i0, i1, i;
    if ((st = selscan__check_part(part, nparts, sp ? sp->diag : NULL)) != SELSCAN_OK) return st;
    if ((st = selscan__validate_step(sp, &q)) != SELSCAN_OK) return st;
    isa = selscan__use_isa(isa);
    nblk = (q.dim + SELSCAN__SNB - 1) / SELSCAN__SNB;
    selscan__split(q.batch * nblk, part, nparts, &i0, &i1);
    for (i = i0; i < i1; i++) {
        /* batch-major: each part streams its rows of the state in address order (not
           block-major, which shares a block's rows of A in L1: bench/NOTES.md, CPU-v16) */
        const int64_t b = i / nblk, dlo = i % nblk * SELSCAN__SNB, dhi = selscan__min64(dlo + SELSCAN__SNB, q.dim);
        const int64_t row = q.idx ? q.idx[b] : b;
        if (row < 0) {
            int64_t d;
            for (d = dlo; d < dhi; d++) selscan__store(q.y.data, SELSCAN__AT2(q.y, b, d), q.dt, 0.0f);
            continue;
        }
        switch (isa) {
#if defined(SELSCAN__HAVE_X86)
        case SELSCAN__ISA_AVX512: selscan__step_block_avx512(&q, b, row, dlo, dhi); break;
        case SELSCAN__ISA_AVX2: selscan__step_block_avx2(&q, b, row, dlo, dhi); break;
#endif
#if defined(SELSCAN__HAVE_NEON)
        case SELSCAN__ISA_NEON: selscan__step_block_neon(&q, b, row, dlo, dhi); break;
#endif
        default: selscan__step_block_port(&q, b, row, dlo, dhi); break;
        }
    }
    return SELSCAN_OK;
}

/* ---- >>fast-parts: the public part, reduce and checkpoint entry points ---------------------- */

SELSCAN_DEF selscan_status selscan_workspace_size_parts(const selscan_problem *p, const selscan_grads *g,
                                                        int64_t n_parts, size_t *bytes) {
    selscan__prob q;
    selscan__grd r;
    selscan_status st;
    int64_t need;
    if (!bytes) return selscan__fail(p ? p->diag : NULL, SELSCAN_ERR_NULL, "bytes", SELSCAN_RULE_MISSING);
    if ((st = selscan__check_part(0, n_parts, p ? p->diag : NULL)) != SELSCAN_OK) return st;
    if (g) {
        if ((st = selscan__validate_backward(p, g, &q, &r, NULL, 0, 0)) != SELSCAN_OK) return st;
        need = selscan__ws_fast_bwd(&q, &r, n_parts);
    } else {
        if ((st = selscan__validate_forward(p, &q, NULL, 0, -1)) != SELSCAN_OK) return st;
        need = selscan__ws_fast_fwd(&q, n_parts);
    }
    if (!selscan__size_ok(need) || !selscan__size_ok(selscan__with_slack(need))) /* 64 bits / size_t */
        return selscan__fail(p->diag, SELSCAN_ERR_SHAPE, "workspace", SELSCAN_RULE_SIZE_OVERFLOWS);
    *bytes = SELSCAN__CAST(size_t, selscan__with_slack(need)); /* plus the alignment slack (any pointer works) */
    return SELSCAN_OK;
}

SELSCAN_DEF selscan_status selscan_forward_cpu_part(const selscan_problem *p, int64_t part, int64_t n_parts,
                                                    void *workspace, size_t workspace_bytes) {
    return selscan__forward_fast(p, part, n_parts, workspace, workspace_bytes, SELSCAN__ISA_AVX512, NULL, 0);
}

SELSCAN_DEF selscan_status selscan_backward_cpu_part(const selscan_problem *p, const selscan_grads *g, int64_t part,
                                                     int64_t n_parts, void *workspace, size_t workspace_bytes) {
    return selscan__backward_fast(p, g, part, n_parts, workspace, workspace_bytes, SELSCAN__ISA_AVX512, NULL, 0);
}

SELSCAN_DEF selscan_status selscan_backward_cpu_reduce(const selscan_problem *p, const selscan_grads *g, int64_t part,
                                                       int64_t n_parts, void *workspace, size_t workspace_bytes) {
    return selscan__backward_reduce(p, g, part, n_parts, workspace, workspace_bytes);
}

SELSCAN_DEF selscan_status selscan_step_cpu_part(const selscan_step_problem *s, int64_t part, int64_t n_parts) {
    return selscan__step_fast(s, part, n_parts, SELSCAN__ISA_AVX512);
}

SELSCAN_DEF selscan_status selscan_checkpoint_size(const selscan_problem *p, size_t *bytes) {
    selscan__prob q;
    selscan_status st;
    if (!bytes) return selscan__fail(p ? p->diag : NULL, SELSCAN_ERR_NULL, "bytes", SELSCAN_RULE_MISSING);
    if ((st = selscan__check_problem(p, &q, 0)) != SELSCAN_OK) return st;
    if (!selscan__size_ok(selscan__ck_bytes(&q))) /* does not fit 64 bits / size_t */
        return selscan__fail(p->diag, SELSCAN_ERR_SHAPE, "checkpoint", SELSCAN_RULE_SIZE_OVERFLOWS);
    *bytes = SELSCAN__CAST(size_t, selscan__ck_bytes(&q));
    return SELSCAN_OK;
}

SELSCAN_DEF int selscan_checkpoint_used(const selscan_problem *p) {
    return p && p->dstate >= 1 && selscan__bwd_T(p->dstate) == SELSCAN__FT; /* selscan__bwd_block's useck */
}

SELSCAN_DEF selscan_status selscan_forward_cpu_ckpt_part(const selscan_problem *p, int64_t part, int64_t n_parts,
                                                         void *workspace, size_t workspace_bytes, float *ckpt,
                                                         size_t ckpt_bytes) {
    if (!ckpt) return selscan__fail(p ? p->diag : NULL, SELSCAN_ERR_NULL, "checkpoint", SELSCAN_RULE_MISSING);
    return selscan__forward_fast(p, part, n_parts, workspace, workspace_bytes, SELSCAN__ISA_AVX512, ckpt, ckpt_bytes);
}

SELSCAN_DEF selscan_status selscan_backward_cpu_ckpt_part(const selscan_problem *p, const selscan_grads *g,
                                                          int64_t part, int64_t n_parts, void *workspace,
                                                          size_t workspace_bytes, const float *ckpt,
                                                          size_t ckpt_bytes) {
    if (!ckpt) return selscan__fail(p ? p->diag : NULL, SELSCAN_ERR_NULL, "checkpoint", SELSCAN_RULE_MISSING);
    return selscan__backward_fast(p, g, part, n_parts, workspace, workspace_bytes, SELSCAN__ISA_AVX512, ckpt,
                                  ckpt_bytes);
}

/* ---- >>conv-entry: the conv's CPU entry points (the fast path's drivers) ----------------------
   Work items: the forward (batch row, block of SELSCAN__CONV_CB channels); the backward a block
   of channels over every batch row, so each channel's dweight / dbias is summed by one item in a
   fixed order (no workspace, no reduce step); the update (batch row, SELSCAN__SNB channels).
   Blocks are multiples of every vector width, so a channel runs the same code whatever n_parts:
   bitwise the same results for every split. */

static selscan_status selscan__conv_forward_fast(const selscan_conv_problem *p, int64_t part, int64_t nparts, int isa) {
    selscan__cprob q;
    selscan_status st;
    int64_t nblk, i0, i1, i;
    if ((st = selscan__check_part(part, nparts, p ? p->diag : NULL)) != SELSCAN_OK) return st;
    if ((st = selscan__conv_validate_forward(p, &q)) != SELSCAN_OK) return st;
    isa = selscan__use_isa(isa);
    nblk = (q.dim + SELSCAN__CONV_CB - 1) / SELSCAN__CONV_CB;
    selscan__split(q.batch * nblk, part, nparts, &i0, &i1);
    for (i = i0; i < i1; i++) {
        const int64_t b = i / nblk, dlo = i % nblk * SELSCAN__CONV_CB, dhi = selscan__min64(dlo + SELSCAN__CONV_CB, q.dim);
        switch (isa) {
#if defined(SELSCAN__HAVE_X86)
        case SELSCAN__ISA_AVX512: selscan__conv_fwd_block_avx512(&q, b, dlo, dhi); break;
        case SELSCAN__ISA_AVX2: selscan__conv_fwd_block_avx2(&q, b, dlo, dhi); break;
#endif
#if defined(SELSCAN__HAVE_NEON)
        case SELSCAN__ISA_NEON: selscan__conv_fwd_block_neon(&q, b, dlo, dhi); break;
#endif
        default: selscan__conv_fwd_block_port(&q, b, dlo, dhi); break;
        }
    }
    return SELSCAN_OK;
}

static selscan_status selscan__conv_backward_fast(const selscan_conv_problem *p, const selscan_conv_grads *g,
                                                  int64_t part, int64_t nparts, int isa) {
    selscan__cprob q;
    selscan__cgrd r;
    selscan_status st;
    int64_t nblk, i0, i1, i;
    if ((st = selscan__check_part(part, nparts, p ? p->diag : NULL)) != SELSCAN_OK) return st;
    if ((st = selscan__conv_validate_backward(p, g, &q, &r)) != SELSCAN_OK) return st;
    isa = selscan__use_isa(isa);
    nblk = (q.dim + SELSCAN__CONV_CB - 1) / SELSCAN__CONV_CB;
    selscan__split(nblk, part, nparts, &i0, &i1);
    for (i = i0; i < i1; i++) {
        const int64_t dlo = i * SELSCAN__CONV_CB, dhi = selscan__min64(dlo + SELSCAN__CONV_CB, q.dim);
        switch (isa) {
#if defined(SELSCAN__HAVE_X86)
        case SELSCAN__ISA_AVX512: selscan__conv_bwd_block_avx512(&q, &r, dlo, dhi); break;
        case SELSCAN__ISA_AVX2: selscan__conv_bwd_block_avx2(&q, &r, dlo, dhi); break;
#endif
#if defined(SELSCAN__HAVE_NEON)
        case SELSCAN__ISA_NEON: selscan__conv_bwd_block_neon(&q, &r, dlo, dhi); break;
#endif
        default: selscan__conv_bwd_block_port(&q, &r, dlo, dhi); break;
        }
    }
    return SELSCAN_OK;
}

/* The update of channels [dlo, dhi) of batch row b (cache row row >= 0): scalar, the taps in
   registers, the state's roll a memmove where its entries are contiguous. */
static void selscan__conv_step_rows(const selscan__cstp *q, int64_t b, int64_t row, int64_t dlo, int64_t dhi) {
    const int H = SELSCAN__CAST(int, q->W) - 1;
    const int64_t S = q->S, es = SELSCAN__CAST(int64_t, selscan__dtype_size(q->dt)), ss = q->state.s[2];
    int64_t d, l, i;
    int k;
    for (d = dlo; d < dhi; d++) {
        float w[SELSCAN_CONV_MAX_WIDTH];
        const float bias = q->bias.data ? selscan__load(q->bias.data, SELSCAN__AT1(q->bias, d), q->bias.dt) : 0.0f;
        char *st = SELSCAN__CAST(char *, q->state.data) + (row * q->state.s[0] + d * q->state.s[1]) * es;
        for (k = 0; k <= H; k++) w[k] = selscan__load(q->weight.data, SELSCAN__AT2(q->weight, d, k), q->weight.dt);
        for (l = 0; l < q->L; l++) {
            const int64_t xo = SELSCAN__AT3(q->x, b, d, l);
            float acc = bias;
            for (k = 0; k < H; k++) acc += w[k] * selscan__load(st, (S - H + k) * ss, q->dt);
            acc += w[H] * selscan__load(q->x.data, xo, q->dt);
            if (q->silu) acc = selscan__silu_f(acc);
            selscan__store(q->y.data, SELSCAN__AT3(q->y, b, d, l), q->dt, acc);
            if (ss == 1) memmove(st, st + es, SELSCAN__CAST(size_t, (S - 1) * es));
            else for (i = 0; i + 1 < S; i++) memcpy(st + i * ss * es, st + (i + 1) * ss * es, SELSCAN__CAST(size_t, es));
            selscan__copy_elem(st, (S - 1) * ss, q->x.data, xo, q->dt);
        }
    }
}

static selscan_status selscan__conv_step_fast(const selscan_conv_step_problem *sp, int64_t part, int64_t nparts) {
    selscan__cstp q;
    selscan_status st;
    int64_t nblk, i0, i1, i, d, l;
    int saved_errno;
    if ((st = selscan__check_part(part, nparts, sp ? sp->diag : NULL)) != SELSCAN_OK) return st;
    if ((st = selscan__conv_validate_step_ex(sp, &q, 1)) != SELSCAN_OK) return st;
    saved_errno = errno; /* silu's libm expf may set ERANGE: the caller's errno is kept, as by the reference */
    nblk = (q.dim + SELSCAN__SNB - 1) / SELSCAN__SNB;
    selscan__split(q.batch * nblk, part, nparts, &i0, &i1);
    for (i = i0; i < i1; i++) {
        const int64_t b = i / nblk, dlo = i % nblk * SELSCAN__SNB, dhi = selscan__min64(dlo + SELSCAN__SNB, q.dim);
        const int64_t row = q.idx ? q.idx[b] : b;
        if (row < 0) { /* padding: y = 0, no state touched */
            for (d = dlo; d < dhi; d++)
                for (l = 0; l < q.L; l++) selscan__store(q.y.data, SELSCAN__AT3(q.y, b, d, l), q.dt, 0.0f);
            continue;
        }
        selscan__conv_step_rows(&q, b, row, dlo, dhi);
    }
    errno = saved_errno;
    return SELSCAN_OK;
}

SELSCAN_DEF selscan_status selscan_conv_forward_cpu_part(const selscan_conv_problem *p, int64_t part, int64_t n_parts) {
    return selscan__conv_forward_fast(p, part, n_parts, SELSCAN__ISA_AVX512);
}
SELSCAN_DEF selscan_status selscan_conv_backward_cpu_part(const selscan_conv_problem *p, const selscan_conv_grads *g,
                                                          int64_t part, int64_t n_parts) {
    return selscan__conv_backward_fast(p, g, part, n_parts, SELSCAN__ISA_AVX512);
}
SELSCAN_DEF selscan_status selscan_conv_step_cpu_part(const selscan_conv_step_problem *s, int64_t part, int64_t n_parts) {
    return selscan__conv_step_fast(s, part, n_parts);
}
SELSCAN_DEF selscan_status selscan_conv_forward_cpu(const selscan_conv_problem *p) {
    return selscan_conv_forward_cpu_part(p, 0, 1);
}
SELSCAN_DEF selscan_status selscan_conv_backward_cpu(const selscan_conv_problem *p, const selscan_conv_grads *g) {
    return selscan_conv_backward_cpu_part(p, g, 0, 1);
}
SELSCAN_DEF selscan_status selscan_conv_step_cpu(const selscan_conv_step_problem *s) {
    return selscan_conv_step_cpu_part(s, 0, 1);
}

/* ---- >>ssd-entry: the SSD forward's fast path (drivers) and its CPU entry points -------------
   A work item is a block of up to SELSCAN__SSD_PB channels of one head of one batch row; items
   are split into n_parts contiguous ranges and are independent, so the result does not depend on
   n_parts. Per sequence of the row, the item's states (N rows of the block's channels, padded to a
   multiple of every vector width) live in the part's scratch; each chunk of SELSCAN__SSD_T steps
   is staged there in f32 (x, dt B, C, the decays, the gate z silu(z)), run by the kernel
   selscan__ssd_fwd_chunk_<isa> (>>fast-ssd: vectorized over channels, 8 states in registers),
   and finished here (D x, the gate, the store). dt, the decay a = expf(dt A), dt B and the gate
   are computed as the reference computes them; the kernel's fused multiply-adds and its two
   partial sums over n differ from the reference by rounding only. */
#define SELSCAN__SSD_PB 64 /* channels of a head per work item (a multiple of every vector width) */
#define SELSCAN__SSD_T 32  /* steps per staged chunk */

static int64_t selscan__ssd_pw(const selscan__sprob *q) { return selscan__r16(selscan__min64(q->P, SELSCAN__SSD_PB)); }

/* floats of one part's scratch: the states (N pw), x, y, the gate (3 T pw), dt B and C (2 T N),
   the decays (T); each region a multiple of 16 floats (64 bytes) */
static int64_t selscan__ssd_part_floats(const selscan__sprob *q) {
    const int64_t pw = selscan__ssd_pw(q);
    int64_t f = selscan__smul(q->N, pw);
    f = selscan__sadd(f, 3 * SELSCAN__SSD_T * pw);
    f = selscan__sadd(f, selscan__smul(2 * SELSCAN__SSD_T, selscan__r16(q->N)));
    return selscan__sadd(f, selscan__r16(SELSCAN__SSD_T));
}

static int64_t selscan__ssd_bscr_floats(const selscan__sprob *q);
static int64_t selscan__ssd_ws_bwd_shared(const selscan__sprob *q, const selscan__sgrd *r, int64_t nparts);

/* the fast path's workspace for n_parts parts (bytes; saturated): the forward's, or the
   backward's shared partials then one scratch per part */
static int64_t selscan__ssd_ws_fast(const selscan__sprob *q, const selscan__sgrd *r, int64_t nparts) {
    if (r)
        return selscan__sadd(selscan__ssd_ws_bwd_shared(q, r, 1),
                             selscan__smul(selscan__align_up(selscan__smul(selscan__ssd_bscr_floats(q), 4)), nparts));
    return selscan__smul(selscan__smul(selscan__ssd_part_floats(q), 4), nparts);
}

/* One work item: channels [p0, p0 + np) of head h in batch row b; f: the part's scratch. */
static void selscan__ssd_fwd_item(const selscan__sprob *q, int64_t b, int64_t h, int64_t p0, int64_t np, float *f,
                                  int isa) {
    const int64_t N = q->N, pw = selscan__ssd_pw(q), g = h / q->hpg, T = SELSCAN__SSD_T, NR = selscan__r16(N);
    float *const S = f, *const xb = S + N * pw, *const yb = xb + T * pw, *const zb = yb + T * pw;
    float *const dB = zb + T * pw, *const Cb = dB + T * NR, *const av = Cb + T * NR;
    const float Ah = SELSCAN__CAST(const float *, q->A.data)[SELSCAN__AT1(q->A, h)];
    selscan__sseg s;
    int64_t c0, i, p, n;
    selscan__ssd_seg_start(&s);
    while (selscan__ssd_seg_next(q, b, &s)) {
        memset(S, 0, SELSCAN__CAST(size_t, N * pw) * 4);
        if (s.first && q->initial_state.data)
            for (p = 0; p < np; p++)
                for (n = 0; n < N; n++)
                    S[n * pw + p] = SELSCAN__CAST(const float *, q->initial_state.data)[SELSCAN__AT4(q->initial_state, s.row, h, p0 + p, n)];
        for (c0 = s.t0; c0 < s.t1; c0 += T) {
            const int nt = SELSCAN__CAST(int, selscan__min64(T, s.t1 - c0));
            for (i = 0; i < nt; i++) { /* stage: the reference's dt, a, dt B; x (0 past np), y 0, the gate */
                const int64_t t = c0 + i;
                const float dt = selscan__ssd_dt(q, b, t, h, NULL, NULL);
                av[i] = expf(dt * Ah);
                selscan__cvt_row(dB + i * NR, q->B.data, SELSCAN__AT4(q->B, b, t, g, 0), q->B.s[3], N, q->dt);
                selscan__cvt_row(Cb + i * NR, q->C.data, SELSCAN__AT4(q->C, b, t, g, 0), q->C.s[3], N, q->dt);
                for (n = 0; n < N; n++) dB[i * NR + n] = dt * dB[i * NR + n];
                selscan__cvt_row(xb + i * pw, q->x.data, SELSCAN__AT4(q->x, b, t, h, p0), q->x.s[3], np, q->dt);
                for (p = np; p < pw; p++) xb[i * pw + p] = 0.0f;
                memset(yb + i * pw, 0, SELSCAN__CAST(size_t, pw) * 4);
                if (q->z.data) {
                    selscan__cvt_row(zb + i * pw, q->z.data, SELSCAN__AT4(q->z, b, t, h, p0), q->z.s[3], np, q->dt);
                    for (p = 0; p < np; p++) zb[i * pw + p] *= selscan__sigmoid(zb[i * pw + p]);
                }
            }
            switch (isa) {
#if defined(SELSCAN__HAVE_X86)
            case SELSCAN__ISA_AVX512: selscan__ssd_fwd_chunk_avx512(S, pw, N, NR, nt, xb, av, dB, Cb, yb); break;
            case SELSCAN__ISA_AVX2: selscan__ssd_fwd_chunk_avx2(S, pw, N, NR, nt, xb, av, dB, Cb, yb); break;
#endif
#if defined(SELSCAN__HAVE_NEON)
            case SELSCAN__ISA_NEON: selscan__ssd_fwd_chunk_neon(S, pw, N, NR, nt, xb, av, dB, Cb, yb); break;
#endif
            default: selscan__ssd_fwd_chunk_port(S, pw, N, NR, nt, xb, av, dB, Cb, yb); break;
            }
            for (i = 0; i < nt; i++) { /* finish: + D x, the gate, the store */
                float *const yr = yb + i * pw;
                const float *const xr = xb + i * pw;
                for (p = 0; p < np; p++) {
                    yr[p] = selscan__ssd_addD(q, selscan__ssd_Dv(q, h, p0 + p), xr[p], yr[p]);
                    if (q->z.data) yr[p] *= zb[i * pw + p];
                }
                selscan__store_row(q->y.data, SELSCAN__AT4(q->y, b, c0 + i, h, p0), q->y.s[3], yr, np, q->dt);
            }
        }
        if (s.last && q->final_state.data)
            for (p = 0; p < np; p++)
                for (n = 0; n < N; n++)
                    SELSCAN__CAST(float *, q->final_state.data)[SELSCAN__AT4(q->final_state, s.row, h, p0 + p, n)] = S[n * pw + p];
    }
}

static selscan_status selscan__ssd_forward_fast(const selscan_ssd_problem *p, int64_t part, int64_t nparts,
                                                void *workspace, size_t workspace_bytes) {
    selscan__sprob q;
    selscan_status st;
    int64_t npb, i0, i1, i, need;
    int isa;
    if ((st = selscan__check_part(part, nparts, p ? p->diag : NULL)) != SELSCAN_OK) return st;
    workspace = selscan__ws_align(workspace, workspace_bytes, &workspace_bytes);
    if ((st = selscan__ssd_validate_forward(p, &q, workspace, workspace_bytes, selscan__ssd_ws_fast, nparts)) !=
        SELSCAN_OK)
        return st;
    isa = selscan__cpu_isa();
    need = selscan__ssd_part_floats(&q);
    npb = (q.P + SELSCAN__SSD_PB - 1) / SELSCAN__SSD_PB;
    selscan__split(q.batch * q.H * npb, part, nparts, &i0, &i1);
    { /* the caller's errno is kept (see selscan_forward_ref) */
        const int saved_errno = errno;
        float *const f = SELSCAN__CAST(float *, workspace) + part * need;
        for (i = i0; i < i1; i++) {
            const int64_t b = i / (q.H * npb), h = i / npb % q.H, p0 = i % npb * SELSCAN__SSD_PB;
            selscan__ssd_fwd_item(&q, b, h, p0, selscan__min64(SELSCAN__SSD_PB, q.P - p0), f, isa);
        }
        errno = saved_errno;
    }
    return SELSCAN_OK;
}

SELSCAN_DEF selscan_status selscan_ssd_workspace_size_parts(const selscan_ssd_problem *p, const selscan_ssd_grads *g,
                                                            int64_t n_parts, size_t *bytes) {
    selscan__sprob q;
    selscan__sgrd r;
    selscan_status st;
    int64_t need;
    if (!bytes) return selscan__fail(p ? p->diag : NULL, SELSCAN_ERR_NULL, "bytes", SELSCAN_RULE_MISSING);
    if ((st = selscan__check_part(0, n_parts, p ? p->diag : NULL)) != SELSCAN_OK) return st;
    if (g) {
        if ((st = selscan__ssd_validate_backward(p, g, &q, &r, NULL, 0, NULL, 0)) != SELSCAN_OK) return st;
    } else if ((st = selscan__ssd_validate_forward(p, &q, NULL, 0, NULL, 0)) != SELSCAN_OK) {
        return st;
    }
    need = selscan__ssd_ws_fast(&q, g ? &r : NULL, n_parts);
    if (!selscan__size_ok(need) || !selscan__size_ok(selscan__with_slack(need)))
        return selscan__fail(p->diag, SELSCAN_ERR_SHAPE, "workspace", SELSCAN_RULE_SIZE_OVERFLOWS);
    *bytes = SELSCAN__CAST(size_t, selscan__with_slack(need));
    return SELSCAN_OK;
}

SELSCAN_DEF selscan_status selscan_ssd_forward_cpu_part(const selscan_ssd_problem *p, int64_t part, int64_t n_parts,
                                                        void *workspace, size_t workspace_bytes) {
    return selscan__ssd_forward_fast(p, part, n_parts, workspace, workspace_bytes);
}

SELSCAN_DEF selscan_status selscan_ssd_forward_cpu(const selscan_ssd_problem *p, void *workspace,
                                                   size_t workspace_bytes) {
    return selscan__ssd_forward_fast(p, 0, 1, workspace, workspace_bytes);
}


/* ---- the SSD backward's fast path (drivers; kernels: the end of >>fast-ssd) ------------------
   A work item is one head h of one batch row b (all its P channels); items are split into
   n_parts contiguous ranges. Per sequence of the row: a forward pass keeps the state entering
   every chunk of SELSCAN__SSD_BT steps (checkpoints, P x NR floats each); then, chunk by chunk
   from the last, the chunk's states are recomputed from its checkpoint (selscan__ssd_adv) and
   walked back one step at a time (selscan__ssd_bwd_step: the state's gradient dh, dB / dC rows,
   the decay's gradient and dx's sums over n), the layout vectorized over the states. dt, the
   decay expf(dt A), the gate and the clamp / softplus factors are computed as the reference
   computes them. What an item writes: dx, dz, ddt (its head's sums over channels and states are
   all inside the item) and dinitial_state directly; the sums over heads (dB, dC over the group's
   heads) and over batch rows (dA, dD, ddt_bias) as partials in the workspace's shared region, at
   the item's own place; selscan_ssd_backward_cpu_reduce then adds them in one fixed order (heads,
   batch rows ascending). No item's arithmetic depends on the part it runs in and every sum runs
   in an order fixed by the problem alone: bitwise the same gradients for every n_parts (and
   every thread schedule). */
#define SELSCAN__SSD_BT 16 /* steps per backward chunk (the recomputed states: BT P NR floats) */

/* the shared region's partials (float offsets, -1: not asked for) */
typedef struct selscan__ssh {
    int64_t B, C, A, dt_bias, D, end;
} selscan__ssh;

static void selscan__ssd_ssh_map(selscan__ssh *o, const selscan__sprob *q, const selscan__sgrd *r) {
    const int64_t items = selscan__smul(q->batch, q->H), rows = selscan__smul(items, selscan__smul(q->L, selscan__r16(q->N)));
    int64_t e = 0;
    o->B = o->C = o->A = o->dt_bias = o->D = -1;
    if (r->dB.data) { o->B = e; e = selscan__sadd(e, rows); }
    if (r->dC.data) { o->C = e; e = selscan__sadd(e, rows); }
    if (r->dA.data) { o->A = e; e = selscan__sadd(e, selscan__r16(items)); }
    if (r->ddt_bias.data) { o->dt_bias = e; e = selscan__sadd(e, selscan__r16(items)); }
    if (r->dD.data) { o->D = e; e = selscan__sadd(e, selscan__r16(selscan__smul(items, q->Dhd ? q->P : 1))); }
    o->end = e;
}

/* floats of one part's scratch: the checkpoints (ceil(L / BT) P NR), the chunk's states (BT P
   NR), dh (P NR), B, C (BT NR each), two spare rows (dB, dC not asked for), x, dt x, dy0, the dz
   factor, dx's sums, y0 (BT P16 each), dD's sums and D (P16 each), a, dt, da (16 each), ddt
   (r16(L)) */
static int64_t selscan__ssd_bscr_floats(const selscan__sprob *q) {
    const int64_t NR = selscan__r16(q->N), P16 = selscan__r16(q->P), PN = selscan__smul(q->P, NR);
    int64_t f = selscan__smul((q->L + SELSCAN__SSD_BT - 1) / SELSCAN__SSD_BT, PN);
    f = selscan__sadd(f, selscan__smul(SELSCAN__SSD_BT + 1, PN));
    f = selscan__sadd(f, selscan__smul(2 * SELSCAN__SSD_BT + 2, NR));
    f = selscan__sadd(f, selscan__smul(6 * SELSCAN__SSD_BT + 2, P16));
    return selscan__sadd(f, selscan__sadd(48, selscan__r16(q->L)));
}

static int64_t selscan__ssd_ws_bwd_shared(const selscan__sprob *q, const selscan__sgrd *r, int64_t nparts) {
    selscan__ssh o;
    (void)nparts;
    selscan__ssd_ssh_map(&o, q, r);
    return selscan__align_up(selscan__smul(o.end, 4));
}

/* the ISA's kernel (>>fast-ssd) */
#if defined(SELSCAN__HAVE_X86)
#define SELSCAN__SSD_X86(name, args)                                     \
    case SELSCAN__ISA_AVX512: selscan__##name##_avx512 args; break; \
    case SELSCAN__ISA_AVX2: selscan__##name##_avx2 args; break;
#else
#define SELSCAN__SSD_X86(name, args)
#endif
#if defined(SELSCAN__HAVE_NEON)
#define SELSCAN__SSD_NEON(name, args) case SELSCAN__ISA_NEON: selscan__##name##_neon args; break;
#else
#define SELSCAN__SSD_NEON(name, args)
#endif
#define SELSCAN__SSD_CALL(isa, name, args)                                     \
    switch (isa) {                                                             \
        SELSCAN__SSD_X86(name, args) SELSCAN__SSD_NEON(name, args) default: selscan__##name##_port args; break; \
    }

/* Stage steps [t0, t0 + nt) of head h in batch row b: a, dt, B (rows of NR, pad 0), x, u = dt x;
   with full: C, and dy0 (dy through the gate) and the dz factor dy sg (1 + z (1 - sg)). */
static void selscan__ssd_bwd_stage(const selscan__sprob *q, const selscan__sgrd *r, int64_t b, int64_t h, int64_t t0,
                                   int nt, int full, float *av, float *dtv, float *Bs, float *Cs, float *xs, float *us,
                                   float *g, float *zf) {
    const int64_t N = q->N, NR = selscan__r16(N), P = q->P, P16 = selscan__r16(P), gi = h / q->hpg;
    const float Ah = SELSCAN__CAST(const float *, q->A.data)[SELSCAN__AT1(q->A, h)];
    int64_t p, n;
    int i;
    for (i = 0; i < nt; i++) {
        const int64_t t = t0 + i;
        const float dt = selscan__ssd_dt(q, b, t, h, NULL, NULL);
        float *const x = xs + i * P16, *const u = us + i * P16;
        av[i] = expf(dt * Ah);
        dtv[i] = dt;
        selscan__cvt_row(Bs + i * NR, q->B.data, SELSCAN__AT4(q->B, b, t, gi, 0), q->B.s[3], N, q->dt);
        for (n = N; n < NR; n++) Bs[i * NR + n] = 0.0f;
        selscan__cvt_row(x, q->x.data, SELSCAN__AT4(q->x, b, t, h, 0), q->x.s[3], P, q->dt);
        for (p = 0; p < P; p++) u[p] = dt * x[p];
        if (!full) continue;
        selscan__cvt_row(Cs + i * NR, q->C.data, SELSCAN__AT4(q->C, b, t, gi, 0), q->C.s[3], N, q->dt);
        for (n = N; n < NR; n++) Cs[i * NR + n] = 0.0f;
        selscan__cvt_row(g + i * P16, r->dy.data, SELSCAN__AT4(r->dy, b, t, h, 0), r->dy.s[3], P, q->dt);
        if (q->z.data) {
            float *const gr = g + i * P16, *const zr = zf + i * P16;
            selscan__cvt_row(zr, q->z.data, SELSCAN__AT4(q->z, b, t, h, 0), q->z.s[3], P, q->dt);
            for (p = 0; p < P; p++) {
                const float z = zr[p], sg = selscan__sigmoid(z), dyv = gr[p];
                gr[p] = dyv * z * sg;
                zr[p] = dyv * sg * (1.0f + z * (1.0f - sg));
            }
        }
    }
}

/* One work item: head h of batch row b; sh: the shared partials (o), f: the part's scratch. */
static void selscan__ssd_bwd_item(const selscan__sprob *q, const selscan__sgrd *r, const selscan__ssh *o, float *sh,
                                  int64_t b, int64_t h, float *f, int isa) {
    const int64_t N = q->N, NR = selscan__r16(N), P = q->P, P16 = selscan__r16(P), PN = P * NR, L = q->L;
    const int64_t BT = SELSCAN__SSD_BT, item = b * q->H + h;
    float *const ck = f, *const hs = ck + (L + BT - 1) / BT * PN, *const dh = hs + BT * PN;
    float *const Bs = dh + PN, *const Cs = Bs + BT * NR, *const junkB = Cs + BT * NR, *const junkC = junkB + NR;
    float *const xs = junkC + NR, *const us = xs + BT * P16, *const g = us + BT * P16, *const zf = g + BT * P16;
    float *const bx = zf + BT * P16, *const y0 = bx + BT * P16, *const dDa = y0 + BT * P16, *const Dr = dDa + P16;
    float *const av = Dr + P16, *const dtv = av + 16, *const da = dtv + 16, *const ddt = da + 16;
    float *const dBp = o->B >= 0 ? sh + o->B + item * L * NR : NULL, *const dCp = o->C >= 0 ? sh + o->C + item * L * NR : NULL;
    const float Ah = SELSCAN__CAST(const float *, q->A.data)[SELSCAN__AT1(q->A, h)];
    const int wantz = r->dz.data != NULL;
    float dAs = 0.0f, dbs = 0.0f;
    selscan__sseg s;
    int64_t p, n, t, c;
    int i;
    memset(ddt, 0, SELSCAN__CAST(size_t, L) * 4);
    memset(dDa, 0, SELSCAN__CAST(size_t, P) * 4);
    memset(junkB, 0, SELSCAN__CAST(size_t, 2 * NR) * 4); /* (dB / dC not asked for: summed, never read) */
    for (p = 0; p < P; p++) Dr[p] = selscan__ssd_Dv(q, h, p);
    selscan__ssd_seg_start(&s);
    while (selscan__ssd_seg_next(q, b, &s)) {
        const int64_t nc = (s.t1 - s.t0 + BT - 1) / BT;
        /* the checkpoints: the state entering each chunk */
        memset(ck, 0, SELSCAN__CAST(size_t, PN) * 4);
        if (s.first && q->initial_state.data)
            for (p = 0; p < P; p++)
                for (n = 0; n < N; n++)
                    ck[p * NR + n] = SELSCAN__CAST(const float *, q->initial_state.data)[SELSCAN__AT4(q->initial_state, s.row, h, p, n)];
        for (c = 0; c + 1 < nc; c++) {
            selscan__ssd_bwd_stage(q, r, b, h, s.t0 + c * BT, SELSCAN__CAST(int, BT), 0, av, dtv, Bs, Cs, xs, us, g, zf);
            SELSCAN__SSD_CALL(isa, ssd_adv, (ck + c * PN, P, NR, SELSCAN__CAST(int, BT), av, us, P16, Bs, ck + (c + 1) * PN, 0))
        }
        /* the state's gradient after the sequence */
        memset(dh, 0, SELSCAN__CAST(size_t, PN) * 4);
        if (s.last && r->dfinal_state.data)
            for (p = 0; p < P; p++)
                for (n = 0; n < N; n++)
                    dh[p * NR + n] = SELSCAN__CAST(const float *, r->dfinal_state.data)[SELSCAN__AT4(r->dfinal_state, s.row, h, p, n)];
        for (c = nc - 1; c >= 0; c--) {
            const int64_t t0 = s.t0 + c * BT;
            const int nt = SELSCAN__CAST(int, selscan__min64(BT, s.t1 - t0));
            selscan__ssd_bwd_stage(q, r, b, h, t0, nt, 1, av, dtv, Bs, Cs, xs, us, g, zf);
            SELSCAN__SSD_CALL(isa, ssd_adv, (ck + c * PN, P, NR, nt, av, us, P16, Bs, hs, 1))
            if (dBp) memset(dBp + t0 * NR, 0, SELSCAN__CAST(size_t, nt * NR) * 4);
            if (dCp) memset(dCp + t0 * NR, 0, SELSCAN__CAST(size_t, nt * NR) * 4);
            for (i = nt - 1; i >= 0; i--) {
                const float *const S1 = hs + i * PN, *const S0 = i ? S1 - PN : ck + c * PN;
                t = t0 + i;
                SELSCAN__SSD_CALL(isa, ssd_bwd_step,
                                  (P, N, NR, S1, S0, dh, Bs + i * NR, Cs + i * NR, dBp ? dBp + t * NR : junkB,
                                   dCp ? dCp + t * NR : junkC, g + i * P16, us + i * P16, av[i], bx + i * P16, da + i,
                                   wantz ? y0 + i * P16 : NULL))
            }
            for (i = nt - 1; i >= 0; i--) { /* finish the chunk's steps, the last first (the reference's order) */
                const float *const x = xs + i * P16, *const gr = g + i * P16, *const bxr = bx + i * P16;
                float *const dx = y0 + i * P16; /* y0 is read before dx is written over it */
                float acc = da[i] * av[i] * Ah;
                t = t0 + i;
                for (p = 0; p < P; p++) {
                    const float Dv = Dr[p];
                    acc += x[p] * bxr[p];
                    dDa[p] += gr[p] * x[p];
                    if (wantz) zf[i * P16 + p] = selscan__canon(zf[i * P16 + p] * selscan__ssd_addD(q, Dv, x[p], dx[p]));
                    dx[p] = selscan__canon(gr[p] * Dv + dtv[i] * bxr[p]);
                }
                if (!q->D.data) /* no D term (selscan__ssd_addD; the expression above kept as it was: -O3 fuses it) */
                    for (p = 0; p < P; p++) dx[p] = selscan__canon(dtv[i] * bxr[p]);
                ddt[t] += acc;
                dAs += da[i] * av[i] * dtv[i];
                if (r->dx.data) selscan__store_row(r->dx.data, SELSCAN__AT4(r->dx, b, t, h, 0), r->dx.s[3], dx, P, q->dt);
                if (wantz) selscan__store_row(r->dz.data, SELSCAN__AT4(r->dz, b, t, h, 0), r->dz.s[3], zf + i * P16, P, q->dt);
            }
        }
        if (s.first && r->dinitial_state.data)
            for (p = 0; p < P; p++)
                for (n = 0; n < N; n++)
                    SELSCAN__CAST(float *, r->dinitial_state.data)[SELSCAN__AT4(r->dinitial_state, s.row, h, p, n)] = selscan__canon(dh[p * NR + n]);
    }
    for (t = 0; t < L; t++) { /* dt's gradient through the clamp and the softplus (the reference's rule) */
        float raw, pre, v = ddt[t];
        selscan__ssd_dt(q, b, t, h, &raw, &pre);
        if (q->limit && (pre < q->dtmin || pre > q->dtmax)) v = 0.0f;
        if (q->softplus && raw <= SELSCAN__SOFTPLUS_THRESHOLD) v *= selscan__sigmoid(raw);
        dbs += v;
        if (r->ddelta.data) selscan__store(r->ddelta.data, SELSCAN__AT3(r->ddelta, b, t, h), q->dt, selscan__canon(v));
    }
    if (o->A >= 0) sh[o->A + item] = dAs;
    if (o->dt_bias >= 0) sh[o->dt_bias + item] = dbs;
    if (o->D >= 0) {
        if (q->Dhd) {
            for (p = 0; p < P; p++) sh[o->D + item * P + p] = dDa[p];
        } else {
            float sD = 0.0f;
            for (p = 0; p < P; p++) sD += dDa[p];
            sh[o->D + item] = sD;
        }
    }
}

static selscan_status selscan__ssd_backward_fast(const selscan_ssd_problem *p, const selscan_ssd_grads *g, int64_t part,
                                                 int64_t nparts, void *workspace, size_t workspace_bytes) {
    selscan__sprob q;
    selscan__sgrd r;
    selscan__ssh o;
    selscan_status st;
    int64_t i0, i1, i, h, k, nD, per;
    float *sh, *f;
    int isa;
    if ((st = selscan__check_part(part, nparts, p ? p->diag : NULL)) != SELSCAN_OK) return st;
    workspace = selscan__ws_align(workspace, workspace_bytes, &workspace_bytes); /* every part aligns it alike */
    st = selscan__ssd_validate_backward(p, g, &q, &r, workspace, workspace_bytes, selscan__ssd_ws_fast, nparts);
    if (st != SELSCAN_OK) return st;
    isa = selscan__cpu_isa();
    selscan__ssd_ssh_map(&o, &q, &r);
    sh = SELSCAN__CAST(float *, workspace);
    per = selscan__align_up(selscan__ssd_bscr_floats(&q) * 4);
    f = SELSCAN__RCAST(float *, SELSCAN__CAST(char *, workspace) + selscan__ssd_ws_bwd_shared(&q, &r, 1) + part * per);
    { /* NaN into this part's share of the outputs only the reduce writes (a forgotten reduce shows) */
        const float nan = selscan__nan_f32();
        nD = q.Dhd ? q.P : 1;
        selscan__split(q.H, part, nparts, &i0, &i1);
        for (h = i0; h < i1; h++) {
            if (r.dA.data) SELSCAN__CAST(float *, r.dA.data)[SELSCAN__AT1(r.dA, h)] = nan;
            if (r.ddt_bias.data) SELSCAN__CAST(float *, r.ddt_bias.data)[SELSCAN__AT1(r.ddt_bias, h)] = nan;
            for (k = 0; r.dD.data && k < nD; k++)
                SELSCAN__CAST(float *, r.dD.data)[q.Dhd ? SELSCAN__AT2(r.dD, h, k) : SELSCAN__AT1(r.dD, h)] = nan;
        }
    }
    selscan__split(q.batch * q.H, part, nparts, &i0, &i1);
    { /* the caller's errno is kept (see selscan_forward_ref) */
        const int saved_errno = errno;
        for (i = i0; i < i1; i++) selscan__ssd_bwd_item(&q, &r, &o, sh, i / q.H, i % q.H, f, isa);
        errno = saved_errno;
    }
    return SELSCAN_OK;
}

/* The sums over heads (dB, dC: rows (b, g, t) split over the parts) and over batch rows (dA,
   ddt_bias, dD: heads split over the parts), each in increasing head / batch row. */
static selscan_status selscan__ssd_backward_reduce(const selscan_ssd_problem *p, const selscan_ssd_grads *g,
                                                   int64_t part, int64_t nparts, void *workspace,
                                                   size_t workspace_bytes) {
    selscan__sprob q;
    selscan__sgrd r;
    selscan__ssh o;
    selscan_status st;
    int64_t i0, i1, i, h, k, NR, nD;
    const float *sh;
    if ((st = selscan__check_part(part, nparts, p ? p->diag : NULL)) != SELSCAN_OK) return st;
    workspace = selscan__ws_align(workspace, workspace_bytes, &workspace_bytes); /* as the parts aligned it */
    st = selscan__ssd_validate_backward(p, g, &q, &r, workspace, workspace_bytes, selscan__ssd_ws_bwd_shared, nparts);
    if (st != SELSCAN_OK) return st;
    selscan__ssd_ssh_map(&o, &q, &r);
    sh = SELSCAN__CAST(const float *, workspace);
    NR = selscan__r16(q.N);
    nD = q.Dhd ? q.P : 1;
    selscan__split(q.H, part, nparts, &i0, &i1);
    for (h = i0; h < i1; h++) { /* the sums over batch rows */
        if (o.A >= 0) SELSCAN__CAST(float *, r.dA.data)[SELSCAN__AT1(r.dA, h)] = selscan__psum(sh, o.A + h, q.H, q.batch);
        if (o.dt_bias >= 0)
            SELSCAN__CAST(float *, r.ddt_bias.data)[SELSCAN__AT1(r.ddt_bias, h)] = selscan__psum(sh, o.dt_bias + h, q.H, q.batch);
        for (k = 0; o.D >= 0 && k < nD; k++)
            SELSCAN__CAST(float *, r.dD.data)[q.Dhd ? SELSCAN__AT2(r.dD, h, k) : SELSCAN__AT1(r.dD, h)] =
                selscan__psum(sh, o.D + h * nD + k, q.H * nD, q.batch);
    }
    if (o.B >= 0 || o.C >= 0) {
        selscan__split(q.batch * q.G * q.L, part, nparts, &i0, &i1);
        for (i = i0; i < i1; i++) { /* row (b, g, t) */
            const int64_t t = i % q.L, gi = i / q.L % q.G, bb = i / (q.L * q.G);
            int which;
            for (which = 0; which < 2; which++) {
                const int64_t off = which ? o.C : o.B;
                const selscan__ten *dst = which ? &r.dC : &r.dB;
                if (off < 0) continue; /* the group's heads' partials summed in order */
                selscan__psum_rows(sh + off + ((bb * q.H + gi * q.hpg) * q.L + t) * NR, q.L * NR, q.hpg, q.N, dst->data,
                                   SELSCAN__AT4(*dst, bb, t, gi, 0), dst->s[3], q.dt);
            }
        }
    }
    return SELSCAN_OK;
}

SELSCAN_DEF selscan_status selscan_ssd_backward_cpu_part(const selscan_ssd_problem *p, const selscan_ssd_grads *g,
                                                         int64_t part, int64_t n_parts, void *workspace,
                                                         size_t workspace_bytes) {
    return selscan__ssd_backward_fast(p, g, part, n_parts, workspace, workspace_bytes);
}

SELSCAN_DEF selscan_status selscan_ssd_backward_cpu_reduce(const selscan_ssd_problem *p, const selscan_ssd_grads *g,
                                                           int64_t part, int64_t n_parts, void *workspace,
                                                           size_t workspace_bytes) {
    return selscan__ssd_backward_reduce(p, g, part, n_parts, workspace, workspace_bytes);
}

SELSCAN_DEF selscan_status selscan_ssd_backward_cpu(const selscan_ssd_problem *p, const selscan_ssd_grads *g,
                                                    void *workspace, size_t workspace_bytes) {
    selscan_status st = selscan__ssd_backward_fast(p, g, 0, 1, workspace, workspace_bytes);
    if (st != SELSCAN_OK) return st;
    return selscan__ssd_backward_reduce(p, g, 0, 1, workspace, workspace_bytes);
}
/* ---- >>norm-entry: the gated norm's CPU entries and parts (>>norm-api; the scalar loop: >>norm-reference;
   the vector kernels: >>fast-norm) ---------------------------------------------------------------- */
/* The backward's parts sum dweight over blocks of SELSCAN__NORM_RB rows (each block's rows in
   order, from 0, into its own row of the workspace), the reduce the blocks in order, from 0: one
   order for every n_parts. */
#define SELSCAN__NORM_RB 64
static int64_t selscan__norm_nblk(const selscan__nprob *q) { return (q->batch * q->L + SELSCAN__NORM_RB - 1) / SELSCAN__NORM_RB; }

/* The CPU entries' rows: the vector kernels (>>fast-norm) of the instruction set selscan__cpu_isa picks
   (the one dispatcher: the scan's, SELSCAN_CPU included) where every input of the call (y, z, weight;
   the backward's dout) has its channels contiguous; else, and on the portable path (no vector unit:
   the kernels at one lane measured slower there than the scalar loop, 9.1 against 6.2 ms forward on
   bench_norm's f32 case), the scalar loop (>>norm-reference, the reference's arithmetic: bitwise its
   results). The choice is the inputs', never the outputs' (the
   kernels write any strides) nor the part's: every part of a call and the plain call, and a backward
   with any of dy, dz, dweight asked for, run the same code on a row. */
static int selscan__norm_c1(const selscan__ten *t, int64_t dim, int d) {
    return !t->data || dim == 1 || t->s[d] == 1;
}
static int selscan__norm_vec(const selscan__nprob *q, const selscan__ngrd *g) {
    const int64_t D = q->dim;
    return selscan__norm_c1(&q->y, D, 2) && selscan__norm_c1(&q->z, D, 2) && selscan__norm_c1(&q->weight, D, 0) &&
           (!g || selscan__norm_c1(&g->dout, D, 2));
}
static void selscan__norm_fwd_run(const selscan__nprob *q, int64_t r0, int64_t r1) {
    switch (selscan__norm_vec(q, NULL) ? selscan__cpu_isa() : SELSCAN__ISA_PORTABLE) {
#if defined(SELSCAN__HAVE_X86)
    case SELSCAN__ISA_AVX512: selscan__norm_fwd_rows_avx512(q, r0, r1); break;
    case SELSCAN__ISA_AVX2: selscan__norm_fwd_rows_avx2(q, r0, r1); break;
#endif
#if defined(SELSCAN__HAVE_NEON)
    case SELSCAN__ISA_NEON: selscan__norm_fwd_rows_neon(q, r0, r1); break;
#endif
    default: selscan__norm_cpu_fwd_rows(q, r0, r1); break;
    }
}
static void selscan__norm_bwd_run(const selscan__nprob *q, const selscan__ngrd *g, int64_t r0, int64_t r1, float *dw,
                                  int64_t dws) {
    switch (selscan__norm_vec(q, g) ? selscan__cpu_isa() : SELSCAN__ISA_PORTABLE) {
#if defined(SELSCAN__HAVE_X86)
    case SELSCAN__ISA_AVX512: selscan__norm_bwd_rows_avx512(q, g, r0, r1, dw, dws); break;
    case SELSCAN__ISA_AVX2: selscan__norm_bwd_rows_avx2(q, g, r0, r1, dw, dws); break;
#endif
#if defined(SELSCAN__HAVE_NEON)
    case SELSCAN__ISA_NEON: selscan__norm_bwd_rows_neon(q, g, r0, r1, dw, dws); break;
#endif
    default: selscan__norm_cpu_bwd_rows(q, g, r0, r1, dw, dws); break;
    }
}

SELSCAN_DEF selscan_status selscan_norm_forward_cpu(const selscan_norm_problem *p) {
    selscan__nprob q;
    selscan_status st = selscan__norm_validate_forward(p, &q);
    if (st != SELSCAN_OK) return st;
    { /* the caller's errno is kept (the scalar loop's expf) */
        const int saved_errno = errno;
        selscan__norm_fwd_run(&q, 0, q.batch * q.L);
        errno = saved_errno;
    }
    return SELSCAN_OK;
}

SELSCAN_DEF selscan_status selscan_norm_backward_cpu(const selscan_norm_problem *p, const selscan_norm_grads *g) {
    selscan__nprob q;
    selscan__ngrd r;
    selscan_status st = selscan__norm_validate_backward(p, g, &q, &r);
    if (st != SELSCAN_OK) return st;
    {
        const int saved_errno = errno;
        selscan__norm_bwd_run(&q, &r, 0, q.batch * q.L, SELSCAN__CAST(float *, r.dweight.data), r.dweight.s[0]);
        errno = saved_errno;
    }
    return SELSCAN_OK;
}
static int64_t selscan__norm_ws_parts(const selscan__nprob *q, const selscan__ngrd *r) {
    return r && r->dweight.data ? selscan__align_up(selscan__smul(selscan__smul(selscan__norm_nblk(q), q->dim), 4)) : 0;
}

/* a backward part's checks: the part, the problem, the workspace (aligned up in *ws; its size and
   its overlap with any operand) */
static selscan_status selscan__norm_parts_begin(const selscan_norm_problem *p, const selscan_norm_grads *g, int64_t part,
                                                int64_t nparts, void **ws, size_t *bytes, selscan__nprob *q, selscan__ngrd *r,
                                                int64_t *need) {
    selscan_status st;
    if ((st = selscan__check_part(part, nparts, p ? p->diag : NULL)) != SELSCAN_OK) return st;
    *ws = selscan__ws_align(*ws, *bytes, bytes);
    if ((st = selscan__norm_validate_backward(p, g, q, r)) != SELSCAN_OK) return st;
    *need = selscan__norm_ws_parts(q, r);
    if ((st = selscan__check_ws_d(*ws, *bytes, *need, q->diag)) != SELSCAN_OK) return st;
    if (*need > 0) {
        const selscan__ten *outs[] = {SELSCAN__NORM_GRAD_OPERANDS(SELSCAN__OPD_OUTS, r)};
        const selscan__ten *ins[] = {SELSCAN__NORM_OPERANDS(SELSCAN__OPD_INS, q) SELSCAN__NORM_GRAD_OPERANDS(SELSCAN__OPD_INS, r)};
        return selscan__check_alias_d(outs, SELSCAN__COUNT(outs), ins, SELSCAN__COUNT(ins), NULL, 0, "", *ws, *need, q->diag);
    }
    return SELSCAN_OK;
}

SELSCAN_DEF selscan_status selscan_norm_workspace_size_parts(const selscan_norm_problem *p, const selscan_norm_grads *g,
                                                             int64_t n_parts, size_t *bytes) {
    selscan__nprob q;
    selscan__ngrd r;
    selscan_status st;
    int64_t need = 0;
    if (!bytes) return selscan__fail(p ? p->diag : NULL, SELSCAN_ERR_NULL, "bytes", SELSCAN_RULE_MISSING);
    if ((st = selscan__check_part(0, n_parts, p ? p->diag : NULL)) != SELSCAN_OK) return st;
    if (g) {
        if ((st = selscan__norm_validate_backward(p, g, &q, &r)) != SELSCAN_OK) return st;
        need = selscan__norm_ws_parts(&q, &r);
    } else if ((st = selscan__norm_validate_forward(p, &q)) != SELSCAN_OK) {
        return st;
    }
    if (!selscan__size_ok(need) || !selscan__size_ok(selscan__with_slack(need)))
        return selscan__fail(p->diag, SELSCAN_ERR_SHAPE, "workspace", SELSCAN_RULE_SIZE_OVERFLOWS);
    *bytes = SELSCAN__CAST(size_t, selscan__with_slack(need));
    return SELSCAN_OK;
}

SELSCAN_DEF selscan_status selscan_norm_forward_cpu_part(const selscan_norm_problem *p, int64_t part, int64_t n_parts) {
    selscan__nprob q;
    selscan_status st;
    int64_t r0, r1;
    if ((st = selscan__check_part(part, n_parts, p ? p->diag : NULL)) != SELSCAN_OK) return st;
    if ((st = selscan__norm_validate_forward(p, &q)) != SELSCAN_OK) return st;
    selscan__split(q.batch * q.L, part, n_parts, &r0, &r1);
    {
        const int saved_errno = errno;
        selscan__norm_fwd_run(&q, r0, r1);
        errno = saved_errno;
    }
    return SELSCAN_OK;
}

SELSCAN_DEF selscan_status selscan_norm_backward_cpu_part(const selscan_norm_problem *p, const selscan_norm_grads *g,
                                                          int64_t part, int64_t n_parts, void *workspace,
                                                          size_t workspace_bytes) {
    selscan__nprob q;
    selscan__ngrd r;
    selscan_status st;
    int64_t need, k0, k1, k;
    if ((st = selscan__norm_parts_begin(p, g, part, n_parts, &workspace, &workspace_bytes, &q, &r, &need)) != SELSCAN_OK)
        return st;
    selscan__split(selscan__norm_nblk(&q), part, n_parts, &k0, &k1);
    {
        const int saved_errno = errno;
        for (k = k0; k < k1; k++) {
            const int64_t e = (k + 1) * SELSCAN__NORM_RB, rows = q.batch * q.L;
            selscan__norm_bwd_run(&q, &r, k * SELSCAN__NORM_RB, e < rows ? e : rows,
                                  need ? SELSCAN__CAST(float *, workspace) + k * q.dim : NULL, 1);
        }
        errno = saved_errno;
    }
    return SELSCAN_OK;
}

SELSCAN_DEF selscan_status selscan_norm_backward_cpu_reduce(const selscan_norm_problem *p, const selscan_norm_grads *g,
                                                            int64_t part, int64_t n_parts, void *workspace,
                                                            size_t workspace_bytes) {
    selscan__nprob q;
    selscan__ngrd r;
    selscan_status st;
    int64_t need, c0, c1, c, k, nb;
    if ((st = selscan__norm_parts_begin(p, g, part, n_parts, &workspace, &workspace_bytes, &q, &r, &need)) != SELSCAN_OK)
        return st;
    if (!need) return SELSCAN_OK;
    nb = selscan__norm_nblk(&q);
    selscan__split(q.dim, part, n_parts, &c0, &c1);
    for (c = c0; c < c1; c++) {
        const float *w = SELSCAN__CAST(const float *, workspace);
        float s = 0.0f;
        for (k = 0; k < nb; k++) s += w[k * q.dim + c];
        SELSCAN__CAST(float *, r.dweight.data)[SELSCAN__AT1(r.dweight, c)] = s;
    }
    return SELSCAN_OK;
}

/* --------------------------------------------------------------------------------------------- */
/* >>entry                          public CPU entry points                                      */
/* --------------------------------------------------------------------------------------------- */

SELSCAN_DEF selscan_status selscan_forward_cpu(const selscan_problem *p, void *workspace, size_t workspace_bytes) {
    return selscan_forward_cpu_part(p, 0, 1, workspace, workspace_bytes);
}

SELSCAN_DEF selscan_status selscan_backward_cpu(const selscan_problem *p, const selscan_grads *g, void *workspace,
                                                size_t workspace_bytes) {
    selscan_status st = selscan_backward_cpu_part(p, g, 0, 1, workspace, workspace_bytes);
    if (st != SELSCAN_OK) return st;
    return selscan_backward_cpu_reduce(p, g, 0, 1, workspace, workspace_bytes);
}

SELSCAN_DEF selscan_status selscan_step_cpu(const selscan_step_problem *s) { return selscan_step_cpu_part(s, 0, 1); }

SELSCAN_DEF selscan_status selscan_forward_cpu_ckpt(const selscan_problem *p, void *workspace, size_t workspace_bytes,
                                                    float *ckpt, size_t ckpt_bytes) {
    return selscan_forward_cpu_ckpt_part(p, 0, 1, workspace, workspace_bytes, ckpt, ckpt_bytes);
}

SELSCAN_DEF selscan_status selscan_backward_cpu_ckpt(const selscan_problem *p, const selscan_grads *g, void *workspace,
                                                     size_t workspace_bytes, const float *ckpt, size_t ckpt_bytes) {
    selscan_status st = selscan_backward_cpu_ckpt_part(p, g, 0, 1, workspace, workspace_bytes, ckpt, ckpt_bytes);
    if (st != SELSCAN_OK) return st;
    return selscan_backward_cpu_reduce(p, g, 0, 1, workspace, workspace_bytes);
}

#endif /* SELSCAN_VALIDATION_ONLY */
#endif /* SELSCAN__IMPLEMENTED */
#endif /* SELSCAN_IMPLEMENTATION */

/* ============================================================================================= */
/* >>fast-kernels                   fast CPU path: the kernels                                   */
/* ============================================================================================= */
/* Compiled once per instruction set, where the implementation includes this file again with the
   vector primitives, SELSCAN__KSFX and SELSCAN__ATTR defined (>>fast-isa); skipped otherwise.
   Every name here gets the pass's suffix through SELSCAN__SFX (selscan__fwd_tile ->
   selscan__fwd_tile_avx2): those are the names debuggers and profilers show. */
#if defined(SELSCAN__KSFX) && defined(SELSCAN__IMPLEMENTED)

/* ---- >>fast-math: exp, exp2, log1p, softplus, sigmoid on vectors ---------------------------- */

/* e^x: clamped to [-88, 88.8] (0 below about -87.7, +inf from 88.4, NaN stays NaN), within 1.3 ulp */
static SELSCAN__ATTR SELSCAN__INLINE SELSCAN__VF SELSCAN__SFX(selscan__vexp)(SELSCAN__VF x) {
    SELSCAN__VF t, k, r, r2, p, q;
    x = SELSCAN__VMAX(SELSCAN__VSET1(-88.0f), SELSCAN__VMIN(SELSCAN__VSET1(88.8f), x)); /* NaN stays */
    t = SELSCAN__VFMA(x, SELSCAN__VSET1(1.44269504088896341f), SELSCAN__VSET1(12582912.0f));
    SELSCAN__VOPAQUE(t); /* -ffast-math must not fold (t - magic) back into x log2(e) */
    k = SELSCAN__VSUB(t, SELSCAN__VSET1(12582912.0f)); /* round(x / ln 2) */
    SELSCAN__VOPAQUE(k);
    r = SELSCAN__VFMA(k, SELSCAN__VSET1(-0.693359375f), x);
    r = SELSCAN__VFMA(k, SELSCAN__VSET1(2.12194440e-4f), r);
    /* e^r on |r| <= ln2/2: minimax degree 6 (|rel err| 3e-9), Estrin's scheme (short chains) */
    r2 = SELSCAN__VMUL(r, r);
    p = SELSCAN__VFMA(SELSCAN__VSET1(1.3814467e-3f), r, SELSCAN__VSET1(8.3687805e-3f));
    p = SELSCAN__VFMA(p, r, SELSCAN__VSET1(4.1668394e-2f));
    q = SELSCAN__VFMA(SELSCAN__VSET1(1.6666520e-1f), r, SELSCAN__VSET1(0.49999993f));
    p = SELSCAN__VFMA(p, r2, q);
    p = SELSCAN__VFMA(p, r2, SELSCAN__VADD(r, SELSCAN__VSET1(1.0f)));
    return SELSCAN__VMUL(p, SELSCAN__VPOW2I(t)); /* k = -127: 0; k = 128: inf */
}

/* 2^x for |x| <= 124 only (the caller checks its arguments; x = dt * A * log2(e) with A * log2(e)
   rounded once per tile, an error like that of rounding dt * A): no clamps, the exponent by an
   integer add, 2^f on |f| <= 1/2 by the degree-6 minimax polynomial (|rel err| 3e-9). */
static SELSCAN__ATTR SELSCAN__INLINE SELSCAN__VF SELSCAN__SFX(selscan__vexp2nc)(SELSCAN__VF x) {
    SELSCAN__VF t = SELSCAN__VADD(x, SELSCAN__VSET1(12582912.0f)), k, f;
    SELSCAN__VOPAQUE(t); /* -ffast-math must not fold the rounding away */
    k = SELSCAN__VSUB(t, SELSCAN__VSET1(12582912.0f));
    SELSCAN__VOPAQUE(k);
    f = SELSCAN__VSUB(x, k); /* exact */
    const SELSCAN__VF f2 = SELSCAN__VMUL(f, f);
    SELSCAN__VF p = SELSCAN__VFMA(SELSCAN__VSET1(1.532099249e-4f), f, SELSCAN__VSET1(1.339027457e-3f));
    const SELSCAN__VF q = SELSCAN__VFMA(SELSCAN__VSET1(5.550362023e-2f), f, SELSCAN__VSET1(2.402264733e-1f));
    p = SELSCAN__VFMA(p, f, SELSCAN__VSET1(9.618527837e-3f));
    p = SELSCAN__VFMA(p, f2, q);
    p = SELSCAN__VFMA(p, f2, SELSCAN__VFMA(f, SELSCAN__VSET1(6.931471806e-1f), SELSCAN__VSET1(1.0f)));
    return SELSCAN__VADDEXP(p, t);
}

/* log1p(e) for e in [0, 1]: e q(e), q the degree-8 relative minimax (|rel err| 3.2e-8) */
static SELSCAN__ATTR SELSCAN__INLINE SELSCAN__VF SELSCAN__SFX(selscan__vlog1p01)(SELSCAN__VF e) {
    SELSCAN__VF q = SELSCAN__VFMA(SELSCAN__VSET1(5.193946636e-3f), e, SELSCAN__VSET1(-2.934802716e-2f));
    q = SELSCAN__VFMA(q, e, SELSCAN__VSET1(7.796621236e-2f));
    q = SELSCAN__VFMA(q, e, SELSCAN__VSET1(-1.364083348e-1f));
    q = SELSCAN__VFMA(q, e, SELSCAN__VSET1(1.909525155e-1f));
    q = SELSCAN__VFMA(q, e, SELSCAN__VSET1(-2.484016488e-1f));
    q = SELSCAN__VFMA(q, e, SELSCAN__VSET1(3.331873177e-1f));
    q = SELSCAN__VFMA(q, e, SELSCAN__VSET1(-4.999947493e-1f));
    q = SELSCAN__VFMA(q, e, SELSCAN__VSET1(9.999999684e-1f));
    return SELSCAN__VMUL(e, q);
}

/* x > 20 ? x : log1p(exp(x)), as max(x, 0) + log1p(exp(-|x|)) */
static SELSCAN__ATTR SELSCAN__INLINE SELSCAN__VF SELSCAN__SFX(selscan__vsoftplus)(SELSCAN__VF x) {
    const SELSCAN__VF zero = SELSCAN__VSET1(0.0f);
    SELSCAN__VF ax = SELSCAN__VMAX(x, SELSCAN__VSUB(zero, x));
    SELSCAN__VF r = SELSCAN__VADD(SELSCAN__VMAX(zero, x),
                                  SELSCAN__SFX(selscan__vlog1p01)(SELSCAN__SFX(selscan__vexp)(SELSCAN__VSUB(zero, ax))));
    return SELSCAN__VGTSEL(x, SELSCAN__VSET1(SELSCAN__SOFTPLUS_THRESHOLD), x, r);
}

static SELSCAN__ATTR SELSCAN__INLINE SELSCAN__VF SELSCAN__SFX(selscan__vsigmoid)(SELSCAN__VF x) {
    const SELSCAN__VF one = SELSCAN__VSET1(1.0f);
    return SELSCAN__VDIV(one, SELSCAN__VADD(one, SELSCAN__SFX(selscan__vexp)(SELSCAN__VSUB(SELSCAN__VSET1(0.0f), x))));
}

/* ---- >>fast-prep: a chunk's inputs loaded and prepared -------------------------------------- */

/* Load one chunk of a tile: dt (delta_bias, softplus), dt*u, u; z as silu gate (sg NULL) or raw z with
   its sigmoid in sg; sp (optional): softplus' derivative factor; dy (optional). */
static SELSCAN__ATTR int SELSCAN__SFX(selscan__prep)(const selscan__prob *q, int64_t b, int64_t d0, int nl, int64_t c0,
                                                     int nt, const float *bv, float *dt, float *dtu, float *u, float *z,
                                                     float *sg, float *sp, float *tmp, float lim) {
    const int W = SELSCAN__VW;
    const SELSCAN__VF delta_bias = SELSCAN__VLOAD(bv), one = SELSCAN__VSET1(1.0f), zero = SELSCAN__VSET1(0.0f);
    SELSCAN__VF vm = zero, vs = zero;
    float fm[SELSCAN__WMAX], fs[SELSCAN__WMAX];
    int t, l, ok = 1;
    SELSCAN__LOADTILE(dt, &q->delta, b, d0, nl, W, c0, nt, tmp);
    SELSCAN__LOADTILE(u, &q->u, b, d0, nl, W, c0, nt, tmp);
    if (q->z.data && z) SELSCAN__LOADTILE(z, &q->z, b, d0, nl, W, c0, nt, tmp);
    for (t = 0; t < nt; t++) {
        SELSCAN__VF x = SELSCAN__VADD(SELSCAN__VLOAD(dt + t * W), delta_bias);
        if (q->softplus) { /* softplus = max(x, 0) + log1p(e), sigmoid from the same e = exp(-|x|) */
            const SELSCAN__VF e = SELSCAN__SFX(selscan__vexp)(SELSCAN__VSUB(zero, SELSCAN__VMAX(x, SELSCAN__VSUB(zero, x))));
            if (sp) {
                const SELSCAN__VF r = SELSCAN__VDIV(one, SELSCAN__VADD(one, e));
                SELSCAN__VSTORE(sp + t * W, SELSCAN__VGTSEL(x, SELSCAN__VSET1(SELSCAN__SOFTPLUS_THRESHOLD), one,
                                                            SELSCAN__VGTSEL(x, zero, r, SELSCAN__VMUL(e, r))));
            }
            x = SELSCAN__VGTSEL(x, SELSCAN__VSET1(SELSCAN__SOFTPLUS_THRESHOLD), x,
                                SELSCAN__VADD(SELSCAN__VMAX(zero, x), SELSCAN__SFX(selscan__vlog1p01)(e)));
        } else if (sp) {
            SELSCAN__VSTORE(sp + t * W, one);
        }
        SELSCAN__VSTORE(dt + t * W, x);
        SELSCAN__VSTORE(dtu + t * W, SELSCAN__VMUL(x, SELSCAN__VLOAD(u + t * W)));
        vm = SELSCAN__VMAX(vm, SELSCAN__VMAX(x, SELSCAN__VSUB(zero, x))); /* max |dt| */
        vs = SELSCAN__VFMA(x, zero, vs);                                /* NaN if some dt is NaN or inf */
        if (q->z.data && z) {
            const SELSCAN__VF zv = SELSCAN__VLOAD(z + t * W), s = SELSCAN__SFX(selscan__vsigmoid)(zv);
            if (sg) SELSCAN__VSTORE(sg + t * W, s);
            else SELSCAN__VSTORE(z + t * W, SELSCAN__VMUL(zv, s));
        }
    }
    /* ok: every |dt * A| <= 86, so the chunk may use selscan__vexp2nc */
    SELSCAN__VSTORE(fm, vm);
    SELSCAN__VSTORE(fs, vs);
    for (l = 0; l < W; l++)
        if (!(fm[l] < lim) || fs[l] != 0.0f) ok = 0;
    return ok;
}

/* The walk back's inputs of one chunk of a tile, rows TS floats apart in w (selscan__wk_rows):
   dt (delta_bias, softplus), dt u, u, softplus' derivative (selscan__prep), and with z dy0 = dy silu(z)
   and dyg = dy silu'(z) (dz = dyg y0; without z the walk reads dy itself). z, sg, dy: scratch.
   Returns selscan__prep's fast-exponential flag. */
static SELSCAN__ATTR int SELSCAN__SFX(selscan__wprep)(const selscan__prob *q, const selscan__grd *r, int64_t b,
                                                      int64_t d0, int nl, int64_t c0, int nt, const float *bv, float *w,
                                                      int64_t TS, float *z, float *sg, float *dy, float *tmp,
                                                      float lim) {
    const int W = SELSCAN__VW;
    const int fast = SELSCAN__SFX(selscan__prep)(q, b, d0, nl, c0, nt, bv, w, w + TS, w + 2 * TS, z, sg, w + 3 * TS,
                                                 tmp, lim);
    int t;
    if (q->z.data) {
        const SELSCAN__VF one = SELSCAN__VSET1(1.0f);
        SELSCAN__LOADTILE(dy, &r->dy, b, d0, nl, W, c0, nt, tmp);
        for (t = 0; t < nt; t++) {
            const SELSCAN__VF zv = SELSCAN__VLOAD(z + t * W), sv = SELSCAN__VLOAD(sg + t * W), dv = SELSCAN__VLOAD(dy + t * W);
            SELSCAN__VSTORE(w + 4 * TS + t * W, SELSCAN__VMUL(dv, SELSCAN__VMUL(zv, sv)));
            if (r->dz.data) /* silu'(z) = sg (1 + z (1 - sg)) */
                SELSCAN__VSTORE(w + 5 * TS + t * W,
                                SELSCAN__VMUL(dv, SELSCAN__VMUL(sv, SELSCAN__VFMA(zv, SELSCAN__VSUB(one, sv), one))));
        }
    }
    return fast;
}

/* ---- >>fast-forward: the forward of one tile ------------------------------------------------ */

/* Forward over one chunk: h ([N][W]) advanced nt steps; y[t] = sum_n C h. */
static SELSCAN__ATTR SELSCAN__INLINE void
SELSCAN__SFX(selscan__fwd_inner)(int64_t N, int nt, float *h, const float *A, const float *A2, const float *dt,
                                 const float *dtu, float *y, const float *Bp, int64_t bsn, int64_t bst, const float *Cp,
                                 int64_t csn, int64_t cst, const int fixB, const int fixC, const int fast) {
    const int W = SELSCAN__VW;
    int t;
    int64_t n;
    for (t = 0; t < nt; t++) {
        const SELSCAN__VF vdt = SELSCAN__VLOAD(dt + t * W), vdtu = SELSCAN__VLOAD(dtu + t * W);
        SELSCAN__VF y0 = SELSCAN__VSET1(0.0f), y1 = SELSCAN__VSET1(0.0f);
        const float *Bt = Bp + t * bst, *Ct = Cp + t * cst;
        for (n = 0; n + 1 < N; n += 2) {
            const SELSCAN__VF a0 = fast ? SELSCAN__SFX(selscan__vexp2nc)(SELSCAN__VMUL(vdt, SELSCAN__VLOAD(A2 + n * W)))
                                        : SELSCAN__SFX(selscan__vexp)(SELSCAN__VMUL(vdt, SELSCAN__VLOAD(A + n * W)));
            const SELSCAN__VF a1 = fast ? SELSCAN__SFX(selscan__vexp2nc)(SELSCAN__VMUL(vdt, SELSCAN__VLOAD(A2 + (n + 1) * W)))
                                        : SELSCAN__SFX(selscan__vexp)(SELSCAN__VMUL(vdt, SELSCAN__VLOAD(A + (n + 1) * W)));
            const SELSCAN__VF b0 = fixB ? SELSCAN__VLOAD(Bp + n * W) : SELSCAN__VSET1(Bt[n * bsn]);
            const SELSCAN__VF b1 = fixB ? SELSCAN__VLOAD(Bp + (n + 1) * W) : SELSCAN__VSET1(Bt[(n + 1) * bsn]);
            const SELSCAN__VF h0 = SELSCAN__VFMA(a0, SELSCAN__VLOAD(h + n * W), SELSCAN__VMUL(vdtu, b0));
            const SELSCAN__VF h1 = SELSCAN__VFMA(a1, SELSCAN__VLOAD(h + (n + 1) * W), SELSCAN__VMUL(vdtu, b1));
            SELSCAN__VSTORE(h + n * W, h0);
            SELSCAN__VSTORE(h + (n + 1) * W, h1);
            y0 = SELSCAN__VFMA(fixC ? SELSCAN__VLOAD(Cp + n * W) : SELSCAN__VSET1(Ct[n * csn]), h0, y0);
            y1 = SELSCAN__VFMA(fixC ? SELSCAN__VLOAD(Cp + (n + 1) * W) : SELSCAN__VSET1(Ct[(n + 1) * csn]), h1, y1);
        }
        if (n < N) {
            const SELSCAN__VF a0 = fast ? SELSCAN__SFX(selscan__vexp2nc)(SELSCAN__VMUL(vdt, SELSCAN__VLOAD(A2 + n * W)))
                                        : SELSCAN__SFX(selscan__vexp)(SELSCAN__VMUL(vdt, SELSCAN__VLOAD(A + n * W)));
            const SELSCAN__VF b0 = fixB ? SELSCAN__VLOAD(Bp + n * W) : SELSCAN__VSET1(Bt[n * bsn]);
            const SELSCAN__VF h0 = SELSCAN__VFMA(a0, SELSCAN__VLOAD(h + n * W), SELSCAN__VMUL(vdtu, b0));
            SELSCAN__VSTORE(h + n * W, h0);
            y0 = SELSCAN__VFMA(fixC ? SELSCAN__VLOAD(Cp + n * W) : SELSCAN__VSET1(Ct[n * csn]), h0, y0);
        }
        SELSCAN__VSTORE(y + t * W, SELSCAN__VADD(y0, y1));
    }
}

static SELSCAN__ATTR void SELSCAN__SFX(selscan__fwd_chunk)(int64_t N, int nt, float *h, const float *A, const float *A2,
                                                           const float *dt, const float *dtu, float *y, const float *Bp,
                                                           int64_t bsn, int64_t bst, const float *Cp, int64_t csn,
                                                           int64_t cst, int fixB, int fixC, int fast) {
    if (fast) {
        if (fixB) {
            if (fixC) SELSCAN__SFX(selscan__fwd_inner)(N, nt, h, A, A2, dt, dtu, y, Bp, bsn, bst, Cp, csn, cst, 1, 1,
                                                       1);
            else SELSCAN__SFX(selscan__fwd_inner)(N, nt, h, A, A2, dt, dtu, y, Bp, bsn, bst, Cp, csn, cst, 1, 0, 1);
        } else {
            if (fixC) SELSCAN__SFX(selscan__fwd_inner)(N, nt, h, A, A2, dt, dtu, y, Bp, bsn, bst, Cp, csn, cst, 0, 1,
                                                       1);
            else SELSCAN__SFX(selscan__fwd_inner)(N, nt, h, A, A2, dt, dtu, y, Bp, bsn, bst, Cp, csn, cst, 0, 0, 1);
        }
    } else {
        if (fixB) {
            if (fixC) SELSCAN__SFX(selscan__fwd_inner)(N, nt, h, A, A2, dt, dtu, y, Bp, bsn, bst, Cp, csn, cst, 1, 1,
                                                       0);
            else SELSCAN__SFX(selscan__fwd_inner)(N, nt, h, A, A2, dt, dtu, y, Bp, bsn, bst, Cp, csn, cst, 1, 0, 0);
        } else {
            if (fixC) SELSCAN__SFX(selscan__fwd_inner)(N, nt, h, A, A2, dt, dtu, y, Bp, bsn, bst, Cp, csn, cst, 0, 1,
                                                       0);
            else SELSCAN__SFX(selscan__fwd_inner)(N, nt, h, A, A2, dt, dtu, y, Bp, bsn, bst, Cp, csn, cst, 0, 0, 0);
        }
    }
}

/* Forward of one tile: channels d0 .. d0 + nl - 1 of group g, batch row b. */
static SELSCAN__ATTR void SELSCAN__SFX(selscan__fwd_tile)(const selscan__prob *q, int64_t b, int64_t g, int64_t d0,
                                                          int nl, const selscan__fscr *s, float *ckp) {
    const int W = SELSCAN__VW;
    const int64_t N = q->N;
    int64_t k, c0, cknext = 0;
    int t;
    const float lim = 86.0f / selscan__tile_params(q, d0, nl, W, s->A, s->A2, s->Bf, s->Cf, s->Dv, s->bv);
    for (k = 0; k < selscan__nseg(q); k++) {
        int64_t t0, t1, row;
        selscan__seg(q, b, k, &t0, &t1, &row);
        selscan__state_in(&q->h0, row, d0, nl, W, N, s->h);
        for (c0 = t0; c0 < t1; c0 += SELSCAN__FT) {
            const int nt = SELSCAN__CAST(int, selscan__min64(SELSCAN__FT, t1 - c0));
            int64_t bsn, bst, csn, cst;
            const float *Bp = selscan__bc_chunk(&q->B, q->fixB, s->Bf, W, b, g, N, c0, nt, s->Bb, &bsn, &bst);
            const float *Cp = selscan__bc_chunk(&q->C, q->fixC, s->Cf, W, b, g, N, c0, nt, s->Cb, &csn, &cst);
            if (ckp) { /* slots rise with the chunks; the ones skipped (none, or a sequence's extra) zeroed */
                selscan__ck_zero(q, ckp, b, d0, nl, cknext, c0 / SELSCAN__FT + k);
                selscan__ck_put(q, ckp, b, d0, nl, W, c0 / SELSCAN__FT + k, s->h);
                cknext = c0 / SELSCAN__FT + k + 1;
            }
            const SELSCAN__VF Dv = SELSCAN__VLOAD(s->Dv);
            const int fast = SELSCAN__SFX(selscan__prep)(q, b, d0, nl, c0, nt, s->bv, s->dt, s->dtu, s->u, s->z, NULL,
                                                         NULL, s->tmp, lim);
            SELSCAN__SFX(selscan__fwd_chunk)(N, nt, s->h, s->A, s->A2, s->dt, s->dtu, s->y, Bp, bsn, bst, Cp, csn, cst,
                                             q->fixB, q->fixC, fast);
            for (t = 0; t < nt; t++) {
                SELSCAN__VF y = SELSCAN__VFMA(Dv, SELSCAN__VLOAD(s->u + t * W), SELSCAN__VLOAD(s->y + t * W));
                if (q->z.data) y = SELSCAN__VMUL(y, SELSCAN__VLOAD(s->z + t * W));
                SELSCAN__VSTORE(s->y + t * W, y);
            }
            SELSCAN__STORETILE(s->y, &q->y, b, d0, nl, W, c0, nt, s->tmp);
        }
        if (q->h_last.data) selscan__state_out(&q->h_last, row, d0, nl, W, N, s->h, 0);
    }
    if (ckp) selscan__ck_zero(q, ckp, b, d0, nl, cknext, selscan__ck_slots(q));
}

/* ---- >>fast-backward: recompute and walk back of one block ---------------------------------- */

/* p[i W] = v_i for i < G (G <= 4: the hand-unrolled state groups below). */
static SELSCAN__ATTR SELSCAN__INLINE void
SELSCAN__SFX(selscan__vstore4)(const int G, float *p, SELSCAN__VF v0, SELSCAN__VF v1, SELSCAN__VF v2, SELSCAN__VF v3) {
    SELSCAN__VSTORE(p, v0);
    if (G > 1) SELSCAN__VSTORE(p + SELSCAN__VW, v1);
    if (G > 2) SELSCAN__VSTORE(p + 2 * SELSCAN__VW, v2);
    if (G > 3) SELSCAN__VSTORE(p + 3 * SELSCAN__VW, v3);
}

/* Recompute of one state vector at one step (the body of selscan__rec_group). */
static SELSCAN__ATTR SELSCAN__INLINE void
SELSCAN__SFX(selscan__rec_one)(const int i, SELSCAN__VF *h, const float *An, const float *Bt, const SELSCAN__VF vdt,
                               const SELSCAN__VF vdtu, float *at, float *hn, const int fixB, const int fast,
                               const int keep) {
    const int W = SELSCAN__VW;
    const SELSCAN__VF a = fast ? SELSCAN__SFX(selscan__vexp2nc)(SELSCAN__VMUL(vdt, SELSCAN__VLOAD(An + i * W)))
                               : SELSCAN__SFX(selscan__vexp)(SELSCAN__VMUL(vdt, SELSCAN__VLOAD(An + i * W)));
    const SELSCAN__VF bb = fixB ? SELSCAN__VLOAD(Bt + i * W) : SELSCAN__VSET1(Bt[i * SELSCAN__FT]);
    *h = SELSCAN__VFMA(a, *h, SELSCAN__VMUL(vdtu, bb));
    if (keep) {
        SELSCAN__VSTORE(at + i * W, a);
        SELSCAN__VSTORE(hn + i * W, *h);
    }
}

/* Recompute states n .. n + G - 1 (G = 1 or SELSCAN__BG) of one chunk from hin ([N][W]). keep:
   hs[t * rs] = state before step t (t = 0 .. nt), ab[t * rs] = exp(dt A), the group's vectors
   side by side in rows of rs floats; else only the state after the chunk, into hs. States outer,
   steps inner: the group's states stay in registers. The same operations as
   selscan__fwd_inner, so the states are bitwise the forward's. An: A, or A log2(e) when fast. */
static SELSCAN__ATTR SELSCAN__INLINE void
SELSCAN__SFX(selscan__rec_group)(const int G, int64_t n, int nt, const float *hin, float *hs, float *ab, int64_t rs,
                                 const float *A, const float *dt, const float *dtu, const float *Bp, const int fixB,
                                 const int fast, const int keep) {
    const int W = SELSCAN__VW;
    const int64_t o = n * W;
    SELSCAN__VF h0 = SELSCAN__VLOAD(hin + o), h1 = h0, h2 = h0, h3 = h0;
    int t;
    if (G > 1) h1 = SELSCAN__VLOAD(hin + o + W);
    if (G > 2) h2 = SELSCAN__VLOAD(hin + o + 2 * W);
    if (G > 3) h3 = SELSCAN__VLOAD(hin + o + 3 * W);
    if (keep) SELSCAN__SFX(selscan__vstore4)(G, hs, h0, h1, h2, h3);
    for (t = 0; t < nt; t++) {
        const SELSCAN__VF vdt = SELSCAN__VLOAD(dt + t * W), vdtu = SELSCAN__VLOAD(dtu + t * W);
        const float *Bt = fixB ? Bp + o : Bp + n * SELSCAN__FT + t;
        float *at = ab + t * rs, *hn = hs + (t + 1) * rs;
        SELSCAN__SFX(selscan__rec_one)(0, &h0, A + o, Bt, vdt, vdtu, at, hn, fixB, fast, keep);
        if (G > 1) SELSCAN__SFX(selscan__rec_one)(1, &h1, A + o, Bt, vdt, vdtu, at, hn, fixB, fast, keep);
        if (G > 2) SELSCAN__SFX(selscan__rec_one)(2, &h2, A + o, Bt, vdt, vdtu, at, hn, fixB, fast, keep);
        if (G > 3) SELSCAN__SFX(selscan__rec_one)(3, &h3, A + o, Bt, vdt, vdtu, at, hn, fixB, fast, keep);
    }
    if (!keep) SELSCAN__SFX(selscan__vstore4)(G, hs, h0, h1, h2, h3);
}

static SELSCAN__ATTR SELSCAN__INLINE void
SELSCAN__SFX(selscan__rec_inner)(int64_t n0, int64_t n1, int nt, const float *hin, float *hs, float *ab, int64_t rs,
                                 const float *A, const float *dt, const float *dtu, const float *Bp, const int fixB,
                                 const int fast, const int keep) {
    const int W = SELSCAN__VW;
    int64_t n;
    for (n = n0; n + SELSCAN__BG <= n1; n += SELSCAN__BG)
        SELSCAN__SFX(selscan__rec_group)(SELSCAN__BG, n, nt, hin, hs + (keep ? n - n0 : n) * W, ab + (n - n0) * W, rs,
                                         A, dt, dtu, Bp, fixB, fast, keep);
    for (; n < n1; n++)
        SELSCAN__SFX(selscan__rec_group)(1, n, nt, hin, hs + (keep ? n - n0 : n) * W, ab + (n - n0) * W, rs, A, dt, dtu,
                                         Bp, fixB, fast, keep);
}

/* Recompute of states [n0, n1) over one chunk (selscan__rec_group) from hin ([N][W]). ab NULL: the
   checkpoint pass (hs: the state after the chunk, [N][W]); else n1 - n0 <= SELSCAN__BG and hs, ab
   get the group's rows of rs floats. A2 = A log2(e). */
static SELSCAN__ATTR void SELSCAN__SFX(selscan__rec_chunk)(int64_t n0, int64_t n1, int nt, const float *hin, float *hs,
                                                           float *ab, int64_t rs, const float *A, const float *A2,
                                                           const float *dt, const float *dtu, const float *Bp, int fixB,
                                                           int fast) {
    if (ab) {
        if (fast) {
            if (fixB) SELSCAN__SFX(selscan__rec_inner)(n0, n1, nt, hin, hs, ab, rs, A2, dt, dtu, Bp, 1, 1, 1);
            else SELSCAN__SFX(selscan__rec_inner)(n0, n1, nt, hin, hs, ab, rs, A2, dt, dtu, Bp, 0, 1, 1);
        } else {
            if (fixB) SELSCAN__SFX(selscan__rec_inner)(n0, n1, nt, hin, hs, ab, rs, A, dt, dtu, Bp, 1, 0, 1);
            else SELSCAN__SFX(selscan__rec_inner)(n0, n1, nt, hin, hs, ab, rs, A, dt, dtu, Bp, 0, 0, 1);
        }
    } else {
        if (fast) {
            if (fixB) SELSCAN__SFX(selscan__rec_inner)(n0, n1, nt, hin, hs, hs, rs, A2, dt, dtu, Bp, 1, 1, 0);
            else SELSCAN__SFX(selscan__rec_inner)(n0, n1, nt, hin, hs, hs, rs, A2, dt, dtu, Bp, 0, 1, 0);
        } else {
            if (fixB) SELSCAN__SFX(selscan__rec_inner)(n0, n1, nt, hin, hs, hs, rs, A, dt, dtu, Bp, 1, 0, 0);
            else SELSCAN__SFX(selscan__rec_inner)(n0, n1, nt, hin, hs, hs, rs, A, dt, dtu, Bp, 0, 0, 0);
        }
    }
}

/* Backward over one chunk, steps nt - 1 .. 0. dh: gradient of the state after the chunk (in),
   before it (out). Per step: yc = sum_n C h, S = sum_n dh_n B_n, sA = sum_n dh_n h_prev a A.
   accB / accC: per-step lane-wise dB / dC (variable; the fixed ones accumulate in dBf / dCf).
   Variable B / C are chunk copies ([N][SELSCAN__FT], selscan__bc_chunk), fixed ones [N][W].
   States outer in groups of SELSCAN__BG (hand-unrolled), steps inner: dh and dA of the group stay
   in registers over the chunk, the step's sums go through memory once a group, and the per-step
   vectors (dy0, dt, dtu) are read where used (memory operands, registers free for the group). */
static SELSCAN__ATTR SELSCAN__INLINE void
SELSCAN__SFX(selscan__bwd_one)(const int i, SELSCAN__VF *dh, SELSCAN__VF *dAn, SELSCAN__VF *y, SELSCAN__VF *S,
                               SELSCAN__VF *sA, const float *h1, const float *h0, const float *a, const float *An,
                               const float *Ct, const float *Bt, float *aB, float *aC, const float *dy0,
                               const float *dt, const float *dtu, const int fixB, const int fixC, const int first,
                               const int wanty) {
    const int W = SELSCAN__VW;
    const SELSCAN__VF c = fixC ? SELSCAN__VLOAD(Ct + i * W) : SELSCAN__VSET1(Ct[i * SELSCAN__FT]);
    const SELSCAN__VF b = fixB ? SELSCAN__VLOAD(Bt + i * W) : SELSCAN__VSET1(Bt[i * SELSCAN__FT]);
    const SELSCAN__VF hn = SELSCAN__VLOAD(h1 + i * W);
    const SELSCAN__VF d = SELSCAN__VFMA(SELSCAN__VLOAD(dy0), c, *dh); /* dh after the step */
    const SELSCAN__VF dn = SELSCAN__VMUL(d, SELSCAN__VLOAD(a + i * W)), da = SELSCAN__VMUL(dn, SELSCAN__VLOAD(h0 + i * W));
    if (wanty) *y = SELSCAN__VFMA(c, hn, *y);
    SELSCAN__VSTORE(aC + i * W, fixC || !first ? SELSCAN__VFMA(SELSCAN__VLOAD(dy0), hn, SELSCAN__VLOAD(aC + i * W))
                                               : SELSCAN__VMUL(SELSCAN__VLOAD(dy0), hn));
    *S = SELSCAN__VFMA(d, b, *S);
    SELSCAN__VSTORE(aB + i * W, fixB || !first ? SELSCAN__VFMA(d, SELSCAN__VLOAD(dtu), SELSCAN__VLOAD(aB + i * W))
                                               : SELSCAN__VMUL(d, SELSCAN__VLOAD(dtu)));
    *sA = SELSCAN__VFMA(da, SELSCAN__VLOAD(An + i * W), *sA);
    *dAn = SELSCAN__VFMA(da, SELSCAN__VLOAD(dt), *dAn);
    *dh = dn;
}

/* States n .. n + G - 1 (G = 1 or SELSCAN__BG) over the chunk; hs, ab: their recomputed rows (rs
   floats apart, selscan__rec_group). */
static SELSCAN__ATTR SELSCAN__INLINE void
SELSCAN__SFX(selscan__bwd_group)(const int G, int64_t n, int64_t N, int nt, const float *hs, const float *ab,
                                 int64_t rs, float *dh, const float *A, const float *dt, const float *dtu,
                                 const float *dy0, float *yc, float *Sv, float *sAv, float *accB, float *accC,
                                 float *dA, float *dBf, float *dCf, const float *Bp, const float *Cp, const int fixB,
                                 const int fixC, const int first, const int wanty) {
    const int W = SELSCAN__VW;
    const int64_t NW = N * W, o = n * W;
    SELSCAN__VF dh0 = SELSCAN__VLOAD(dh + o), dA0 = SELSCAN__VLOAD(dA + o), dh1 = dh0, dA1 = dA0, dh2 = dh0, dA2 = dA0,
                dh3 = dh0, dA3 = dA0;
    int t;
    if (G > 1) { dh1 = SELSCAN__VLOAD(dh + o + W); dA1 = SELSCAN__VLOAD(dA + o + W); }
    if (G > 2) { dh2 = SELSCAN__VLOAD(dh + o + 2 * W); dA2 = SELSCAN__VLOAD(dA + o + 2 * W); }
    if (G > 3) { dh3 = SELSCAN__VLOAD(dh + o + 3 * W); dA3 = SELSCAN__VLOAD(dA + o + 3 * W); }
    for (t = nt - 1; t >= 0; t--) {
        const float *h1 = hs + (t + 1) * rs, *h0 = hs + t * rs, *at = ab + t * rs, *An = A + o;
        const float *Bt = fixB ? Bp + o : Bp + n * SELSCAN__FT + t, *Ct = fixC ? Cp + o : Cp + n * SELSCAN__FT + t;
        const float *dy0t = dy0 + t * W, *dtt = dt + t * W, *dtut = dtu + t * W;
        float *aB = (fixB ? dBf : accB + t * NW) + o, *aC = (fixC ? dCf : accC + t * NW) + o;
        SELSCAN__VF y = wanty ? SELSCAN__VLOAD(yc + t * W) : SELSCAN__VSET1(0.0f), S = SELSCAN__VLOAD(Sv + t * W),
                    sA = SELSCAN__VLOAD(sAv + t * W);
        SELSCAN__SFX(selscan__bwd_one)(0, &dh0, &dA0, &y, &S, &sA, h1, h0, at, An, Ct, Bt, aB, aC, dy0t, dtt, dtut,
                                       fixB, fixC, first, wanty);
        if (G > 1) SELSCAN__SFX(selscan__bwd_one)(1, &dh1, &dA1, &y, &S, &sA, h1, h0, at, An, Ct, Bt, aB, aC, dy0t, dtt,
                                                  dtut, fixB, fixC, first, wanty);
        if (G > 2) SELSCAN__SFX(selscan__bwd_one)(2, &dh2, &dA2, &y, &S, &sA, h1, h0, at, An, Ct, Bt, aB, aC, dy0t, dtt,
                                                  dtut, fixB, fixC, first, wanty);
        if (G > 3) SELSCAN__SFX(selscan__bwd_one)(3, &dh3, &dA3, &y, &S, &sA, h1, h0, at, An, Ct, Bt, aB, aC, dy0t, dtt,
                                                  dtut, fixB, fixC, first, wanty);
        if (wanty) SELSCAN__VSTORE(yc + t * W, y);
        SELSCAN__VSTORE(Sv + t * W, S);
        SELSCAN__VSTORE(sAv + t * W, sA);
    }
    SELSCAN__SFX(selscan__vstore4)(G, dh + o, dh0, dh1, dh2, dh3);
    SELSCAN__SFX(selscan__vstore4)(G, dA + o, dA0, dA1, dA2, dA3);
}

static SELSCAN__ATTR SELSCAN__INLINE void
SELSCAN__SFX(selscan__bwd_inner)(int64_t n0, int64_t n1, int64_t N, int nt, const float *hs, const float *ab,
                                 int64_t rs, float *dh, const float *A, const float *dt, const float *dtu,
                                 const float *dy0, float *yc, float *Sv, float *sAv, float *accB, float *accC,
                                 float *dA, float *dBf, float *dCf, const float *Bp, const float *Cp, const int fixB,
                                 const int fixC, const int first, const int wanty) {
    const int W = SELSCAN__VW;
    int64_t n;
    for (n = n0; n + SELSCAN__BG <= n1; n += SELSCAN__BG)
        SELSCAN__SFX(selscan__bwd_group)(SELSCAN__BG, n, N, nt, hs + (n - n0) * W, ab + (n - n0) * W, rs, dh, A, dt,
                                         dtu, dy0, yc, Sv, sAv, accB, accC, dA, dBf, dCf, Bp, Cp, fixB, fixC, first,
                                         wanty);
    for (; n < n1; n++)
        SELSCAN__SFX(selscan__bwd_group)(1, n, N, nt, hs + (n - n0) * W, ab + (n - n0) * W, rs, dh, A, dt, dtu, dy0, yc,
                                         Sv, sAv, accB, accC, dA, dBf, dCf, Bp, Cp, fixB, fixC, first, wanty);
}

/* The walk back of states [n0, n1) with the layout flags as constants. first: the block's first
   tile writes the variable accumulators (no clearing pass). */
static SELSCAN__ATTR SELSCAN__INLINE void
SELSCAN__SFX(selscan__bwd_walk)(int64_t n0, int64_t n1, int64_t N, int nt, const float *hs, const float *ab, int64_t rs,
                                float *dh, const float *A, const float *dt, const float *dtu, const float *dy0,
                                float *yc, float *Sv, float *sAv, float *accB, float *accC, float *dA, float *dBf,
                                float *dCf, const float *Bp, const float *Cp, int fixB, int fixC, int first,
                                const int wanty) {
    if (fixB) {
        if (fixC) SELSCAN__SFX(selscan__bwd_inner)(n0, n1, N, nt, hs, ab, rs, dh, A, dt, dtu, dy0, yc, Sv, sAv, accB,
                                                   accC, dA, dBf, dCf, Bp, Cp, 1, 1, 0, wanty); /* nothing variable */
        else if (first) SELSCAN__SFX(selscan__bwd_inner)(n0, n1, N, nt, hs, ab, rs, dh, A, dt, dtu, dy0, yc, Sv, sAv,
                                                         accB, accC, dA, dBf, dCf, Bp, Cp, 1, 0, 1, wanty);
        else SELSCAN__SFX(selscan__bwd_inner)(n0, n1, N, nt, hs, ab, rs, dh, A, dt, dtu, dy0, yc, Sv, sAv, accB, accC,
                                              dA, dBf, dCf, Bp, Cp, 1, 0, 0, wanty);
    } else if (fixC) {
        if (first) SELSCAN__SFX(selscan__bwd_inner)(n0, n1, N, nt, hs, ab, rs, dh, A, dt, dtu, dy0, yc, Sv, sAv, accB,
                                                    accC, dA, dBf, dCf, Bp, Cp, 0, 1, 1, wanty);
        else SELSCAN__SFX(selscan__bwd_inner)(n0, n1, N, nt, hs, ab, rs, dh, A, dt, dtu, dy0, yc, Sv, sAv, accB, accC,
                                              dA, dBf, dCf, Bp, Cp, 0, 1, 0, wanty);
    } else {
        if (first) SELSCAN__SFX(selscan__bwd_inner)(n0, n1, N, nt, hs, ab, rs, dh, A, dt, dtu, dy0, yc, Sv, sAv, accB,
                                                    accC, dA, dBf, dCf, Bp, Cp, 0, 0, 1, wanty);
        else SELSCAN__SFX(selscan__bwd_inner)(n0, n1, N, nt, hs, ab, rs, dh, A, dt, dtu, dy0, yc, Sv, sAv, accB, accC,
                                              dA, dBf, dCf, Bp, Cp, 0, 0, 0, wanty);
    }
}

/* Backward over one chunk from its entering state hin ([N][W]): per group of SELSCAN__BG states the
   recompute (into hs, ab: rows of SELSCAN__BG vectors, in L1) and at once the walk back. yc NULL:
   sum_n C h not wanted (no z). */
static SELSCAN__ATTR void SELSCAN__SFX(selscan__bwd_chunk)(int64_t N, int nt, const float *hin, float *hs, float *ab,
                                                           float *dh, const float *A, const float *A2, const float *dt,
                                                           const float *dtu, const float *dy0, float *yc, float *Sv,
                                                           float *sAv, float *accB, float *accC, float *dA, float *dBf,
                                                           float *dCf, const float *Bp, const float *Cp, int fixB,
                                                           int fixC, int fast, int first, float *pB, float *pC,
                                                           int64_t ps, int nl) {
    const int W = SELSCAN__VW;
    const int64_t rs = SELSCAN__BG * W, NW = N * W;
    int64_t n0, n1, n;
    int t, l;
    for (t = 0; t < nt; t++) {
        if (yc) SELSCAN__VSTORE(yc + t * W, SELSCAN__VSET1(0.0f));
        SELSCAN__VSTORE(Sv + t * W, SELSCAN__VSET1(0.0f));
        SELSCAN__VSTORE(sAv + t * W, SELSCAN__VSET1(0.0f));
    }
    for (n0 = 0; n0 < N; n0 = n1) {
        n1 = selscan__min64(n0 + SELSCAN__BG, N);
        SELSCAN__SFX(selscan__rec_chunk)(n0, n1, nt, hin, hs, ab, rs, A, A2, dt, dtu, Bp, fixB, fast);
        if (yc) SELSCAN__SFX(selscan__bwd_walk)(n0, n1, N, nt, hs, ab, rs, dh, A, dt, dtu, dy0, yc, Sv, sAv, accB, accC,
                                                dA, dBf, dCf, Bp, Cp, fixB, fixC, first, 1);
        else SELSCAN__SFX(selscan__bwd_walk)(n0, n1, N, nt, hs, ab, rs, dh, A, dt, dtu, dy0, yc, Sv, sAv, accB, accC,
                                             dA, dBf, dCf, Bp, Cp, fixB, fixC, first, 0);
        /* a partial tile (nl < W lanes; the block's first, selscan__bwd_block) leaves 0 in the
           other lanes of the variable accumulators: there the broadcast B or C meets dt u = 0
           and dy0 = 0, and an inf in B or C (or a NaN state it left) would add NaN to dB / dC */
        if (first && nl < W)
            for (t = 0; t < nt; t++)
                for (n = n0; n < n1; n++)
                    for (l = nl; l < W; l++) {
                        if (!fixB) accB[t * NW + n * W + l] = 0.0f;
                        if (!fixC) accC[t * NW + n * W + l] = 0.0f;
                    }
        /* pB / pC given (the block's last tile): the group's per-step dB / dC are complete and
           still in L1; their lane sums go out now, W steps at once by one transposing reduction */
        for (n = n0; n < n1 && (pB || pC); n++) {
            for (t = 0; t + W <= nt; t += W) {
                if (pB) SELSCAN__VTHSUMS(accB + t * NW + n * W, NW, pB + n * ps + t);
                if (pC) SELSCAN__VTHSUMS(accC + t * NW + n * W, NW, pC + n * ps + t);
            }
            for (; t < nt; t++) {
                if (pB) pB[n * ps + t] = SELSCAN__VHSUM(SELSCAN__VLOAD(accB + t * NW + n * W));
                if (pC) pC[n * ps + t] = SELSCAN__VHSUM(SELSCAN__VLOAD(accC + t * NW + n * W));
            }
        }
    }
}

/* Backward of one block: channels c0 .. c0 + nch - 1 of group g, batch row b. pB / pC: this
   block's [N][selscan__prow(L)] partials of variable dB / dC (NULL: not asked). The checkpoint pass goes chunk
   by chunk with the tiles inner, like the walk back: a chunk's variable B / C are copied once for
   all tiles. When the part's prep cache holds the segment (s->pcn chunks), the checkpoint pass
   prepares the walk's inputs (selscan__wprep) into it and the walk back reads them there instead
   of loading and preparing the chunk again. With the forward's checkpoints (ckp) the same pass
   runs without the recompute: the inputs are then read first to last, not in the walk's
   last-to-first order (bench/NOTES.md, CPU-v22). */
static SELSCAN__ATTR void SELSCAN__SFX(selscan__bwd_block)(const selscan__prob *q, const selscan__grd *r, int64_t b,
                                                           int64_t g, int64_t c0, int nch, const selscan__bscr *s,
                                                           float *pB, float *pC, const float *ckp) {
    const int W = SELSCAN__VW, nbt = (nch + SELSCAN__VW - 1) / SELSCAN__VW;
    const int64_t N = q->N, NW = N * W, T = s->T, PS = selscan__prow(q->L);
    const int useck = ckp && T == SELSCAN__FT;
    const int64_t TS = s->TS;
    float lim[SELSCAN__CB];
    int64_t k, c;
    int j, jj, t;
    memset(s->dA, 0, SELSCAN__CAST(size_t, nbt * NW) * 4);
    memset(s->dBf, 0, SELSCAN__CAST(size_t, nbt * NW) * 4);
    memset(s->dCf, 0, SELSCAN__CAST(size_t, nbt * NW) * 4);
    memset(s->dD, 0, SELSCAN__CAST(size_t, nbt * W) * 4);
    memset(s->db, 0, SELSCAN__CAST(size_t, nbt * W) * 4);
    for (j = 0; j < nbt; j++) {
        const int nl = nch - j * W < W ? nch - j * W : W;
        lim[j] = 86.0f / selscan__tile_params(q, c0 + j * W, nl, W, s->A + j * NW, s->A2 + j * NW, s->Bf + j * NW,
                                              s->Cf + j * NW, s->Dv + j * W, s->bv + j * W);
    }
    for (k = 0; k < selscan__nseg(q); k++) {
        int64_t t0, t1, row, nck;
        selscan__seg(q, b, k, &t0, &t1, &row);
        nck = (t1 - t0 + T - 1) / T;
        const int usepc = nck <= s->pcn;
        /* checkpoints: ck[c] = state entering chunk c */
        for (j = 0; j < nbt; j++) {
            const int nl = nch - j * W < W ? nch - j * W : W;
            const int64_t d0 = c0 + j * W;
            float *ck = s->ck + j * s->ckstride;
            selscan__state_in(&q->h0, row, d0, nl, W, N, ck);
            if (useck) /* the forward's chunk states */
                for (c = 1; c < nck; c++) selscan__ck_get(q, ckp, b, d0, nl, W, (t0 + c * T) / SELSCAN__FT + k, ck + c * NW);
            selscan__state_in(&r->dh_last, row, d0, nl, W, N, s->dh + j * NW);
        }
        for (c = 0; c + 1 < nck && (usepc || !useck); c++) {
            const int64_t cs = t0 + c * T;
            const int nt = SELSCAN__CAST(int, T);
            int64_t bsn, bst;
            const float *Bv = useck ? NULL : selscan__bc_chunk(&q->B, q->fixB, s->Bf, W, b, g, N, cs, nt, s->Bb, &bsn, &bst);
            for (j = 0; j < nbt; j++) {
                const int nl = nch - j * W < W ? nch - j * W : W;
                const int64_t d0 = c0 + j * W;
                float *ck = s->ck + j * s->ckstride + c * NW;
                const float *Bp = q->fixB ? s->Bf + j * NW : Bv;
                float *const pc = usepc ? s->pc + (c * nbt + j) * s->pcs : NULL;
                float *const w = pc ? pc : s->wk;
                int fast;
                if (pc) {
                    fast = SELSCAN__SFX(selscan__wprep)(q, r, b, d0, nl, cs, nt, s->bv + j * W, pc, TS, s->z, s->sg,
                                                        s->dy, s->tmp, lim[j]);
                    pc[s->pcs - 1] = SELSCAN__CAST(float, fast);
                } else {
                    fast = SELSCAN__SFX(selscan__prep)(q, b, d0, nl, cs, nt, s->bv + j * W, w, w + TS, w + 2 * TS, NULL,
                                                       NULL, NULL, s->tmp, lim[j]);
                }
                if (!useck)
                    SELSCAN__SFX(selscan__rec_chunk)(0, N, nt, ck, ck + NW, NULL, 0, s->A + j * NW, s->A2 + j * NW, w,
                                                     w + TS, Bp, q->fixB, fast);
            }
        }
        for (c = nck - 1; c >= 0; c--) {
            const int64_t cs = t0 + c * T;
            const int nt = SELSCAN__CAST(int, selscan__min64(T, t1 - cs));
            int64_t bsn, bst, csn, cst;
            const float *Bv = selscan__bc_chunk(&q->B, q->fixB, s->Bf, W, b, g, N, cs, nt, s->Bb, &bsn, &bst);
            const float *Cv = selscan__bc_chunk(&q->C, q->fixC, s->Cf, W, b, g, N, cs, nt, s->Cb, &csn, &cst);
            for (jj = 0; jj < nbt; jj++) {
                /* a partial last tile goes first (selscan__bwd_chunk clears its spare lanes) */
                const int j = nch % W ? (jj + nbt - 1) % nbt : jj;
                const int nl = nch - j * W < W ? nch - j * W : W;
                const int64_t d0 = c0 + j * W;
                const float *Bp = q->fixB ? s->Bf + j * NW : Bv, *Cp = q->fixC ? s->Cf + j * NW : Cv;
                const SELSCAN__VF Dv = SELSCAN__VLOAD(s->Dv + j * W);
                SELSCAN__VF dD = SELSCAN__VLOAD(s->dD + j * W), db = SELSCAN__VLOAD(s->db + j * W);
                const float *const pc = usepc && c + 1 < nck ? s->pc + (c * nbt + j) * s->pcs : NULL;
                const float *const w = pc ? pc : s->wk;
                const float *const dt = w, *const dtu = w + TS, *const u_ = w + 2 * TS, *const sp = w + 3 * TS;
                const float *const dyg = w + 5 * TS;
                const float *dy0p = w + 4 * TS;
                const int fast = pc ? pc[s->pcs - 1] != 0.0f
                                    : SELSCAN__SFX(selscan__wprep)(q, r, b, d0, nl, cs, nt, s->bv + j * W, s->wk, TS,
                                                                   s->z, s->sg, s->dy, s->tmp, lim[j]);
                if (!q->z.data) { /* dy0 = dy */
                    SELSCAN__LOADTILE(s->dy0, &r->dy, b, d0, nl, W, cs, nt, s->tmp);
                    dy0p = s->dy0;
                }
                SELSCAN__SFX(selscan__bwd_chunk)(N, nt, s->ck + j * s->ckstride + c * NW, s->hs, s->ab, s->dh + j * NW,
                                                 s->A + j * NW, s->A2 + j * NW, dt, dtu, dy0p, q->z.data ? s->yc : NULL,
                                                 s->S, s->sA, s->accB, s->accC, s->dA + j * NW, s->dBf + j * NW,
                                                 s->dCf + j * NW, Bp, Cp, q->fixB, q->fixC, fast, jj == 0,
                                                 pB && jj == nbt - 1 ? pB + cs : NULL,
                                                 pC && jj == nbt - 1 ? pC + cs : NULL, PS, nl);
                for (t = nt - 1; t >= 0; t--) {
                    const SELSCAN__VF u = SELSCAN__VLOAD(u_ + t * W), dy0 = SELSCAN__VLOAD(dy0p + t * W);
                    const SELSCAN__VF S = SELSCAN__VLOAD(s->S + t * W);
                    const SELSCAN__VF ddt = SELSCAN__VMUL(SELSCAN__VFMA(u, S, SELSCAN__VLOAD(s->sA + t * W)),
                                                         SELSCAN__VLOAD(sp + t * W));
                    /* the stored gradients' NaNs canonical (selscan__canon); ddt's sum below keeps its own */
                    SELSCAN__VSTORE(s->du + t * W,
                                    SELSCAN__VCANON(SELSCAN__VFMA(SELSCAN__VLOAD(dt + t * W), S, SELSCAN__VMUL(dy0, Dv))));
                    SELSCAN__VSTORE(s->ddt + t * W, SELSCAN__VCANON(ddt));
                    dD = SELSCAN__VFMA(dy0, u, dD);
                    db = SELSCAN__VADD(db, ddt);
                    if (r->dz.data) /* dz = dy silu'(z) y0 */
                        SELSCAN__VSTORE(s->dz + t * W, SELSCAN__VCANON(SELSCAN__VMUL(SELSCAN__VLOAD(dyg + t * W),
                                                                     SELSCAN__VFMA(Dv, u, SELSCAN__VLOAD(s->yc + t * W)))));
                }
                SELSCAN__VSTORE(s->dD + j * W, dD);
                SELSCAN__VSTORE(s->db + j * W, db);
                if (r->du.data) SELSCAN__STORETILE(s->du, &r->du, b, d0, nl, W, cs, nt, s->tmp);
                if (r->ddelta.data) SELSCAN__STORETILE(s->ddt, &r->ddelta, b, d0, nl, W, cs, nt, s->tmp);
                if (r->dz.data) SELSCAN__STORETILE(s->dz, &r->dz, b, d0, nl, W, cs, nt, s->tmp);
            }
        }
        if (r->dh0.data)
            for (j = 0; j < nbt; j++) {
                const int nl = nch - j * W < W ? nch - j * W : W;
                selscan__state_out(&r->dh0, row, c0 + j * W, nl, W, N, s->dh + j * NW, 1);
            }
    }
}

/* ---- >>fast-step: the decode step of one block of channels ---------------------------------- */

/* Step of channels c < ne of a W-channel block in the common layout with N = NV W (NV <= 4,
   hand-unrolled: no loop over n, the polynomial constants stay in registers): per channel the
   exponentials, then the state; yv[c] = C h of channel c (lanes summed by the caller). The same
   operations as the general loops (bitwise the same states and sums). */
static SELSCAN__ATTR SELSCAN__INLINE SELSCAN__VF
SELSCAN__SFX(selscan__step_one)(const int k, const SELSCAN__VF a, float *hp, const float *Bp, const float *Cp,
                                const SELSCAN__VF vdx, const SELSCAN__VF acc) {
    const int W = SELSCAN__VW;
    const SELSCAN__VF h = SELSCAN__VFMA(a, SELSCAN__VLOAD(hp + k * W), SELSCAN__VMUL(vdx, SELSCAN__VLOAD(Bp + k * W)));
    SELSCAN__VSTORE(hp + k * W, h);
    return SELSCAN__VFMA(SELSCAN__VLOAD(Cp + k * W), h, acc);
}

/* SELSCAN_STEP_A_LOG: dst[i] = -exp(src[i s]), i < n (A from A_log, by the vector exp; a partial
   last vector through zero-padded scratch) */
static SELSCAN__ATTR SELSCAN__INLINE void SELSCAN__SFX(selscan__step_neg_exp)(float *dst, const float *src, int64_t s,
                                                                            int64_t n) {
    const int W = SELSCAN__VW;
    float t[SELSCAN__WMAX];
    int64_t i;
    int j;
    for (i = 0; i < n; i += W) {
        const int m = n - i < W ? SELSCAN__CAST(int, n - i) : W;
        SELSCAN__VF a;
        if (s == 1 && m == W) a = SELSCAN__VLOAD(src + i);
        else {
            for (j = 0; j < W; j++) t[j] = j < m ? src[(i + j) * s] : 0.0f;
            a = SELSCAN__VLOAD(t);
        }
        a = SELSCAN__VMUL(SELSCAN__SFX(selscan__vexp)(a), SELSCAN__VSET1(-1.0f)); /* -0 for exp 0, as -expf */
        if (m == W) SELSCAN__VSTORE(dst + i, a);
        else {
            SELSCAN__VSTORE(t, a);
            for (j = 0; j < m; j++) dst[i + j] = t[j];
        }
    }
}

static SELSCAN__ATTR SELSCAN__INLINE void
SELSCAN__SFX(selscan__step_rows)(const int NV, int ne, const float *dtb, const float *dxb, float *h0, int64_t hs1,
                                 const float *A0, int64_t as0, const float *Bp, const float *Cp, SELSCAN__VF *yv,
                                 int64_t nrow) {
    const int W = SELSCAN__VW;
    int c;
    for (c = 0; c < ne; c++) {
        /* the rows of channel c only (no pointer a stride past the last: with a huge stride it
           would lie outside the tensor, even overflow) */
        float *const hp = h0 + c * hs1;
        const float *const Ap = A0 + c * as0;
        const SELSCAN__VF vdt = SELSCAN__VSET1(dtb[c]), vdx = SELSCAN__VSET1(dxb[c]), zero = SELSCAN__VSET1(0.0f);
        /* the state 32 channels on (nrow: channels of hp's row from here on) */
        if (c + 32 < nrow) SELSCAN__PREFETCHW(hp + 32 * hs1);
        const SELSCAN__VF a0 = SELSCAN__SFX(selscan__vexp)(SELSCAN__VMUL(vdt, SELSCAN__VLOAD(Ap)));
        const SELSCAN__VF a1 = NV > 1 ? SELSCAN__SFX(selscan__vexp)(SELSCAN__VMUL(vdt, SELSCAN__VLOAD(Ap + W))) : zero;
        const SELSCAN__VF a2 = NV > 2 ? SELSCAN__SFX(selscan__vexp)(SELSCAN__VMUL(vdt, SELSCAN__VLOAD(Ap + 2 * W))) : zero;
        const SELSCAN__VF a3 = NV > 3 ? SELSCAN__SFX(selscan__vexp)(SELSCAN__VMUL(vdt, SELSCAN__VLOAD(Ap + 3 * W))) : zero;
        SELSCAN__VF acc0 = SELSCAN__SFX(selscan__step_one)(0, a0, hp, Bp, Cp, vdx, zero), acc1 = zero;
        if (NV > 1) acc1 = SELSCAN__SFX(selscan__step_one)(1, a1, hp, Bp, Cp, vdx, zero);
        if (NV > 2) acc0 = SELSCAN__SFX(selscan__step_one)(2, a2, hp, Bp, Cp, vdx, acc0);
        if (NV > 3) acc1 = SELSCAN__SFX(selscan__step_one)(3, a3, hp, Bp, Cp, vdx, acc1);
        yv[c] = NV > 1 ? SELSCAN__VADD(acc0, acc1) : acc0;
    }
}

/* Step of channels [dlo, dhi) of batch row b (all in cache row `row`, >= 0). */
static SELSCAN__ATTR void SELSCAN__SFX(selscan__step_block)(const selscan__stp *q, int64_t b, int64_t row, int64_t dlo,
                                                            int64_t dhi) {
    const int W = SELSCAN__VW;
    float xb[SELSCAN__SNB], dtb[SELSCAN__SNB], zb[SELSCAN__SNB], yb[SELSCAN__SNB], pb[SELSCAN__SNB];
    float hb[SELSCAN__SNB], Ab[SELSCAN__SNB], Bb[SELSCAN__SNB], Cb[SELSCAN__SNB];
    float th[SELSCAN__WMAX], tA[SELSCAN__WMAX], tB[SELSCAN__WMAX], tC[SELSCAN__WMAX];
    const int64_t nd = dhi - dlo, N = q->N;
    int64_t i, d, nb, n;
    selscan__cvt_row(xb, q->u.data, b * q->u.s[0] + dlo * q->u.s[1], q->u.s[1], nd, q->dt);
    selscan__cvt_row(dtb, q->delta.data, b * q->delta.s[0] + dlo * q->delta.s[1], q->delta.s[1], nd, q->dt);
    if (q->z.data) selscan__cvt_row(zb, q->z.data, b * q->z.s[0] + dlo * q->z.s[1], q->z.s[1], nd, q->dt);
    for (i = nd; i < SELSCAN__SNB; i++) xb[i] = dtb[i] = zb[i] = 0.0f;
    if (q->delta_bias.data && q->delta_bias.dt == SELSCAN_F32) { /* vectors where delta_bias is contiguous */
        const float *const bp = SELSCAN__CAST(const float *, q->delta_bias.data) + SELSCAN__AT1(q->delta_bias, dlo);
        i = 0;
        if (q->delta_bias.s[0] == 1)
            for (; i + W <= nd; i += W) SELSCAN__VSTORE(dtb + i, SELSCAN__VADD(SELSCAN__VLOAD(dtb + i), SELSCAN__VLOAD(bp + i)));
        for (; i < nd; i++) dtb[i] += bp[i * q->delta_bias.s[0]];
    } else if (q->delta_bias.data) { /* SELSCAN_STEP_DELTA_BIAS_T: widened first (the same sums) */
        selscan__cvt_row(pb, q->delta_bias.data, SELSCAN__AT1(q->delta_bias, dlo), q->delta_bias.s[0], nd, q->delta_bias.dt);
        for (i = 0; i < nd; i++) dtb[i] += pb[i];
    }
    for (i = 0; i < SELSCAN__SNB; i += W) {
        SELSCAN__VF x = SELSCAN__VLOAD(dtb + i);
        if (q->softplus) x = SELSCAN__SFX(selscan__vsoftplus)(x);
        SELSCAN__VSTORE(dtb + i, x);
        if (q->z.data) {
            const SELSCAN__VF z = SELSCAN__VLOAD(zb + i);
            SELSCAN__VSTORE(zb + i, SELSCAN__VMUL(z, SELSCAN__SFX(selscan__vsigmoid)(z)));
        }
    }
    if (N <= SELSCAN__SNA && N % W == 0 && q->state.s[2] == 1 && q->state.dt == SELSCAN_F32 && q->A.s[1] == 1 && !q->fixB &&
        !q->fixC) {
        /* the common layout: B and C of a group widened once, no per-channel gathers or tails;
           W channels at a time: the W sums over n by one transposing reduction, D and z as
           vectors over the channels (no per-channel scalar tail). N = NV W with NV <= 4 and the
           W channels in one group (the usual case): selscan__step_rows, hand-unrolled over n.
           Else first the exponentials of all W channels (a loop with nothing else live: the
           polynomial constants stay in registers), then the states, n unrolled by 2 W. */
        const int64_t hs1 = q->state.s[1], NV = N / W;
        /* A's rows of the W channels at i: at Ai, as0 apart (A itself, or with SELSCAN_STEP_A_LOG
           -exp(A_log) of those channels in Al, rows of N) */
        const int64_t as0 = q->alog ? N : q->A.s[0];
        float *const hrow = SELSCAN__CAST(float *, q->state.data) + row * q->state.s[0] + dlo * hs1;
        const float *const Arow = SELSCAN__CAST(const float *, q->A.data) + dlo * q->A.s[0];
        float Al[SELSCAN__WMAX * SELSCAN__SNA];
        int64_t g = dlo / q->dpg, gend = (g + 1) * q->dpg - dlo; /* channel index (from dlo) of the next group */
        const float *Bp, *Cp;
        float Db[SELSCAN__SNB], dxb[SELSCAN__SNB], ab[SELSCAN__WMAX * SELSCAN__SNA];
        SELSCAN__VF yv[SELSCAN__VW];
        int c;
        selscan__step_bc(q, b, g, Bb, Cb, &Bp, &Cp);
        if (q->D.data) selscan__cvt_row(Db, q->D.data, SELSCAN__AT1(q->D, dlo), q->D.s[0], nd, q->D.dt);
        for (i = q->D.data ? nd : 0; i < SELSCAN__SNB; i++) Db[i] = 0.0f;
        /* dt x of every channel as vectors (each channel then broadcasts it from memory) */
        for (i = 0; i < SELSCAN__SNB; i += W) SELSCAN__VSTORE(dxb + i, SELSCAN__VMUL(SELSCAN__VLOAD(dtb + i), SELSCAN__VLOAD(xb + i)));
        for (i = 0; i < nd; i += W) {
            const int ne = nd - i < W ? SELSCAN__CAST(int, nd - i) : W;
            const float *const Ai = q->alog ? Al : Arow + i * q->A.s[0];
            if (q->alog)
                for (c = 0; c < ne; c++)
                    SELSCAN__SFX(selscan__step_neg_exp)(Al + c * N, Arow + (i + c) * q->A.s[0], 1, N);
            if (i + ne <= gend && NV <= 4) {
                float *const hp = hrow + i * hs1;
                const float *const Ap = Ai;
                const int64_t nrow = q->dim - dlo - i; /* channels of the state row from hp on */
                if (NV == 1) SELSCAN__SFX(selscan__step_rows)(1, ne, dtb + i, dxb + i, hp, hs1, Ap, as0, Bp, Cp, yv,
                                                              nrow);
                else if (NV == 2) SELSCAN__SFX(selscan__step_rows)(2, ne, dtb + i, dxb + i, hp, hs1, Ap, as0, Bp, Cp,
                                                                   yv, nrow);
                else if (NV == 3) SELSCAN__SFX(selscan__step_rows)(3, ne, dtb + i, dxb + i, hp, hs1, Ap, as0, Bp, Cp,
                                                                   yv, nrow);
                else SELSCAN__SFX(selscan__step_rows)(4, ne, dtb + i, dxb + i, hp, hs1, Ap, as0, Bp, Cp, yv, nrow);
                for (c = ne; c < W; c++) yv[c] = SELSCAN__VSET1(0.0f);
                SELSCAN__VTHSUM(yv, yb + i);
                continue;
            }
            for (c = 0; c < ne; c++) {
                const SELSCAN__VF vdt = SELSCAN__VSET1(dtb[i + c]);
                const float *const Ap = Ai + c * as0;
                for (n = 0; n < N; n += W) SELSCAN__VSTORE(ab + c * N + n,
                                                           SELSCAN__SFX(selscan__vexp)(SELSCAN__VMUL(vdt, SELSCAN__VLOAD(Ap + n))));
            }
            for (c = 0; c < ne; c++) {
                const int64_t di = i + c;
                const SELSCAN__VF vdx = SELSCAN__VSET1(dtb[di] * xb[di]);
                float *const hp = hrow + di * hs1;
                const float *const ap = ab + c * N;
                SELSCAN__VF acc0 = SELSCAN__VSET1(0.0f), acc1 = acc0;
                if (di >= gend) {
                    g++;
                    gend += q->dpg;
                    selscan__step_bc(q, b, g, Bb, Cb, &Bp, &Cp);
                }
                for (n = 0; n + 2 * W <= N; n += 2 * W) {
                    const SELSCAN__VF a0 = SELSCAN__VLOAD(ap + n), a1 = SELSCAN__VLOAD(ap + n + W);
                    const SELSCAN__VF h0 = SELSCAN__VFMA(a0, SELSCAN__VLOAD(hp + n), SELSCAN__VMUL(vdx, SELSCAN__VLOAD(Bp + n)));
                    const SELSCAN__VF h1 = SELSCAN__VFMA(a1, SELSCAN__VLOAD(hp + n + W), SELSCAN__VMUL(vdx, SELSCAN__VLOAD(Bp + n + W)));
                    SELSCAN__VSTORE(hp + n, h0);
                    SELSCAN__VSTORE(hp + n + W, h1);
                    acc0 = SELSCAN__VFMA(SELSCAN__VLOAD(Cp + n), h0, acc0);
                    acc1 = SELSCAN__VFMA(SELSCAN__VLOAD(Cp + n + W), h1, acc1);
                }
                if (n < N) {
                    const SELSCAN__VF h0 = SELSCAN__VFMA(SELSCAN__VLOAD(ap + n), SELSCAN__VLOAD(hp + n), SELSCAN__VMUL(vdx, SELSCAN__VLOAD(Bp + n)));
                    SELSCAN__VSTORE(hp + n, h0);
                    acc0 = SELSCAN__VFMA(SELSCAN__VLOAD(Cp + n), h0, acc0);
                }
                yv[c] = SELSCAN__VADD(acc0, acc1);
            }
            for (; c < W; c++) yv[c] = SELSCAN__VSET1(0.0f);
            SELSCAN__VTHSUM(yv, yb + i); /* yb[i + c] = sum of the lanes of yv[c] */
        }
        for (i = 0; i < nd; i += W) {
            SELSCAN__VF y = SELSCAN__VLOAD(yb + i);
            if (q->D.data) y = SELSCAN__VADD(y, SELSCAN__VMUL(SELSCAN__VLOAD(Db + i), SELSCAN__VLOAD(xb + i)));
            if (q->z.data) y = SELSCAN__VMUL(y, SELSCAN__VLOAD(zb + i));
            SELSCAN__VSTORE(yb + i, y);
        }
        selscan__store_row(q->y.data, b * q->y.s[0] + dlo * q->y.s[1], q->y.s[1], yb, nd, q->dt);
        return;
    }
    for (d = dlo; d < dhi; d++) {
        const int64_t g = d / q->dpg;
        const SELSCAN__VF vdt = SELSCAN__VSET1(dtb[d - dlo]), vdx = SELSCAN__VSET1(dtb[d - dlo] * xb[d - dlo]);
        SELSCAN__VF yv = SELSCAN__VSET1(0.0f);
        /* the channel's state row (elements): stepped in place where f32 and unit-stride, else
           through hb (gathered; a T state (SELSCAN_STEP_STATE_T) widened, rounded back on the store) */
        const int64_t hoff = row * q->state.s[0] + d * q->state.s[1], hs = q->state.s[2];
        const int hdirect = hs == 1 && q->state.dt == SELSCAN_F32;
        float y = 0.0f;
        for (nb = 0; nb < N; nb += SELSCAN__SNB) {
            const int64_t nn = selscan__min64(SELSCAN__SNB, N - nb), nv = nn / W * W;
            float *hp = hb;
            const float *Ap = SELSCAN__CAST(const float *, q->A.data) + d * q->A.s[0] + nb * q->A.s[1];
            const float *Bp, *Cp;
            if (hdirect) hp = SELSCAN__CAST(float *, q->state.data) + hoff + nb;
            else selscan__cvt_row(hb, q->state.data, hoff + nb * hs, hs, nn, q->state.dt);
            if (q->alog) { SELSCAN__SFX(selscan__step_neg_exp)(Ab, Ap, q->A.s[1], nn); Ap = Ab; } /* SELSCAN_STEP_A_LOG */
            else if (q->A.s[1] != 1) { for (n = 0; n < nn; n++) Ab[n] = Ap[n * q->A.s[1]]; Ap = Ab; }
            if (q->fixB) {
                Bp = SELSCAN__CAST(const float *, q->B.data) + d * q->B.s[0] + nb * q->B.s[1];
                if (q->B.s[1] != 1) { for (n = 0; n < nn; n++) Bb[n] = Bp[n * q->B.s[1]]; Bp = Bb; }
            } else if (q->dt == SELSCAN_F32 && q->B.s[2] == 1) {
                Bp = SELSCAN__CAST(const float *, q->B.data) + b * q->B.s[0] + g * q->B.s[1] + nb;
            } else {
                selscan__cvt_row(Bb, q->B.data, b * q->B.s[0] + g * q->B.s[1] + nb * q->B.s[2], q->B.s[2], nn, q->dt);
                Bp = Bb;
            }
            if (q->fixC) {
                Cp = SELSCAN__CAST(const float *, q->C.data) + d * q->C.s[0] + nb * q->C.s[1];
                if (q->C.s[1] != 1) { for (n = 0; n < nn; n++) Cb[n] = Cp[n * q->C.s[1]]; Cp = Cb; }
            } else if (q->dt == SELSCAN_F32 && q->C.s[2] == 1) {
                Cp = SELSCAN__CAST(const float *, q->C.data) + b * q->C.s[0] + g * q->C.s[1] + nb;
            } else {
                selscan__cvt_row(Cb, q->C.data, b * q->C.s[0] + g * q->C.s[1] + nb * q->C.s[2], q->C.s[2], nn, q->dt);
                Cp = Cb;
            }
            for (n = 0; n < nv; n += W) {
                const SELSCAN__VF a = SELSCAN__SFX(selscan__vexp)(SELSCAN__VMUL(vdt, SELSCAN__VLOAD(Ap + n)));
                const SELSCAN__VF h = SELSCAN__VFMA(a, SELSCAN__VLOAD(hp + n), SELSCAN__VMUL(vdx, SELSCAN__VLOAD(Bp + n)));
                SELSCAN__VSTORE(hp + n, h);
                yv = SELSCAN__VFMA(SELSCAN__VLOAD(Cp + n), h, yv);
            }
            if (nv < nn) { /* tail through zero-padded vectors */
                for (i = 0; i < W; i++) {
                    const int in = nv + i < nn;
                    th[i] = in ? hp[nv + i] : 0.0f; tA[i] = in ? Ap[nv + i] : 0.0f;
                    tB[i] = in ? Bp[nv + i] : 0.0f; tC[i] = in ? Cp[nv + i] : 0.0f;
                }
                {
                    const SELSCAN__VF a = SELSCAN__SFX(selscan__vexp)(SELSCAN__VMUL(vdt, SELSCAN__VLOAD(tA)));
                    const SELSCAN__VF h = SELSCAN__VFMA(a, SELSCAN__VLOAD(th), SELSCAN__VMUL(vdx, SELSCAN__VLOAD(tB)));
                    SELSCAN__VSTORE(th, h);
                    /* the pad lanes to 0: an infinite dt or dt x times their 0 is NaN, which y must not see */
                    for (i = nn - nv; i < W; i++) th[i] = 0.0f;
                    yv = SELSCAN__VFMA(SELSCAN__VLOAD(tC), SELSCAN__VLOAD(th), yv);
                }
                for (i = 0; nv + i < nn; i++) hp[nv + i] = th[i];
            }
            if (!hdirect) selscan__store_row(q->state.data, hoff + nb * hs, hs, hb, nn, q->state.dt);
        }
        y = SELSCAN__VHSUM(yv);
        if (q->D.data) y += selscan__load(q->D.data, SELSCAN__AT1(q->D, d), q->D.dt) * xb[d - dlo];
        if (q->z.data) y *= zb[d - dlo];
        yb[d - dlo] = y;
    }
    selscan__store_row(q->y.data, b * q->y.s[0] + dlo * q->y.s[1], q->y.s[1], yb, nd, q->dt);
}

/* ---- >>fast-conv: the causal conv1d's kernels ------------------------------------------------ */
/* (>>conv-entry drives them.) A group of channels is staged chunk by chunk (SELSCAN__CONV_FT
   steps a block, SELSCAN__FT a tile, after the W-1 rows of inputs before the chunk) in f32 as [step][lane] rows of G lanes,
   so every tap of a tile of SELSCAN__VW channels is one vector load; the W weights and the bias
   are vectors in registers. Two stagings, one arithmetic: with channels contiguous in memory
   (channels-last) a group is a whole block (G = SELSCAN__CONV_CB: a step's channels are one
   contiguous run, read and written once), otherwise a tile (G = SELSCAN__VW, steps contiguous:
   8 x 8 transposes). Each lane (channel) runs the reference's arithmetic in the reference's order,
   with fused multiply-adds where the instruction set has them and the vector exponential in
   silu; the staging does not change a lane's arithmetic. Stack: ~35 KB (backward), ~22 KB
   (forward); tmp: the tile loads' transposing scratch (steps contiguous, G = SELSCAN__VW only). */

/* y rows [0, nt) of a tile: xb its first input row (H before the chunk), rows G floats apart */
static SELSCAN__ATTR SELSCAN__INLINE void SELSCAN__SFX(selscan__conv_fwd_rows)(const int W, const int silu, const int nt,
                                                                              const int G, const float *xb, float *yb,
                                                                              const float *wl, const float *bl) {
    const SELSCAN__VF w0 = SELSCAN__VLOAD(wl), w1 = SELSCAN__VLOAD(wl + SELSCAN__VW), vb = SELSCAN__VLOAD(bl);
    const SELSCAN__VF w2 = W > 2 ? SELSCAN__VLOAD(wl + 2 * SELSCAN__VW) : w0;
    const SELSCAN__VF w3 = W > 3 ? SELSCAN__VLOAD(wl + 3 * SELSCAN__VW) : w0;
    int t;
    for (t = 0; t < nt; t++) {
        const float *xr = xb + t * G;
        SELSCAN__VF acc = SELSCAN__VFMA(w0, SELSCAN__VLOAD(xr), vb);
        acc = SELSCAN__VFMA(w1, SELSCAN__VLOAD(xr + G), acc);
        if (W > 2) acc = SELSCAN__VFMA(w2, SELSCAN__VLOAD(xr + 2 * G), acc);
        if (W > 3) acc = SELSCAN__VFMA(w3, SELSCAN__VLOAD(xr + 3 * G), acc);
        if (silu) acc = SELSCAN__VMUL(acc, SELSCAN__SFX(selscan__vsigmoid)(acc));
        SELSCAN__VSTORE(yb + t * G, acc);
    }
}

/* Backward, rows [0, nt) of a tile: gb[t] (dy in) becomes dpre; dweight / dbias accumulate. */
static SELSCAN__ATTR SELSCAN__INLINE void SELSCAN__SFX(selscan__conv_dpre_rows)(const int W, const int silu, const int nt,
                                                                               const int G, const float *xb, float *gb,
                                                                               const float *wl, const float *bl,
                                                                               float *acc) {
    const SELSCAN__VF w0 = SELSCAN__VLOAD(wl), w1 = SELSCAN__VLOAD(wl + SELSCAN__VW), vb = SELSCAN__VLOAD(bl);
    const SELSCAN__VF w2 = W > 2 ? SELSCAN__VLOAD(wl + 2 * SELSCAN__VW) : w0;
    const SELSCAN__VF w3 = W > 3 ? SELSCAN__VLOAD(wl + 3 * SELSCAN__VW) : w0;
    const SELSCAN__VF one = SELSCAN__VSET1(1.0f);
    SELSCAN__VF a0 = SELSCAN__VLOAD(acc), a1 = SELSCAN__VLOAD(acc + SELSCAN__VW), a2 = SELSCAN__VLOAD(acc + 2 * SELSCAN__VW);
    SELSCAN__VF a3 = SELSCAN__VLOAD(acc + 3 * SELSCAN__VW), ab = SELSCAN__VLOAD(acc + 4 * SELSCAN__VW);
    int t;
    for (t = 0; t < nt; t++) {
        const float *xr = xb + t * G;
        const SELSCAN__VF x0 = SELSCAN__VLOAD(xr), x1 = SELSCAN__VLOAD(xr + G);
        const SELSCAN__VF x2 = W > 2 ? SELSCAN__VLOAD(xr + 2 * G) : x0;
        const SELSCAN__VF x3 = W > 3 ? SELSCAN__VLOAD(xr + 3 * G) : x0;
        SELSCAN__VF dp = SELSCAN__VLOAD(gb + t * G);
        if (silu) { /* dpre = dy s (1 + pre (1 - s)), pre recomputed */
            SELSCAN__VF pre = SELSCAN__VFMA(w1, x1, SELSCAN__VFMA(w0, x0, vb)), sg;
            if (W > 2) pre = SELSCAN__VFMA(w2, x2, pre);
            if (W > 3) pre = SELSCAN__VFMA(w3, x3, pre);
            sg = SELSCAN__SFX(selscan__vsigmoid)(pre);
            dp = SELSCAN__VMUL(dp, SELSCAN__VMUL(sg, SELSCAN__VFMA(pre, SELSCAN__VSUB(one, sg), one)));
            SELSCAN__VSTORE(gb + t * G, dp);
        }
        ab = SELSCAN__VADD(ab, dp);
        a0 = SELSCAN__VFMA(dp, x0, a0);
        a1 = SELSCAN__VFMA(dp, x1, a1);
        if (W > 2) a2 = SELSCAN__VFMA(dp, x2, a2);
        if (W > 3) a3 = SELSCAN__VFMA(dp, x3, a3);
    }
    SELSCAN__VSTORE(acc, a0);
    SELSCAN__VSTORE(acc + SELSCAN__VW, a1);
    SELSCAN__VSTORE(acc + 2 * SELSCAN__VW, a2);
    SELSCAN__VSTORE(acc + 3 * SELSCAN__VW, a3);
    SELSCAN__VSTORE(acc + 4 * SELSCAN__VW, ab);
}

/* Backward, input gradients of n positions of a tile: ob[i] = sum_k w[k] gb[i + H - k], k = H
   .. 0 (the reference's order: row i of gb is the first dpre that reads position i). */
static SELSCAN__ATTR SELSCAN__INLINE void SELSCAN__SFX(selscan__conv_dx_rows)(const int W, const int n, const int G,
                                                                             const float *gb, float *ob, const float *wl) {
    const SELSCAN__VF w0 = SELSCAN__VLOAD(wl), w1 = SELSCAN__VLOAD(wl + SELSCAN__VW);
    const SELSCAN__VF w2 = W > 2 ? SELSCAN__VLOAD(wl + 2 * SELSCAN__VW) : w0;
    const SELSCAN__VF w3 = W > 3 ? SELSCAN__VLOAD(wl + 3 * SELSCAN__VW) : w0;
    const SELSCAN__VF zero = SELSCAN__VSET1(0.0f);
    int i;
    for (i = 0; i < n; i++) {
        const float *g = gb + i * G;
        SELSCAN__VF acc;
        if (W == 2) {
            acc = SELSCAN__VFMA(w1, SELSCAN__VLOAD(g), zero);
            acc = SELSCAN__VFMA(w0, SELSCAN__VLOAD(g + G), acc);
        } else if (W == 3) {
            acc = SELSCAN__VFMA(w2, SELSCAN__VLOAD(g), zero);
            acc = SELSCAN__VFMA(w1, SELSCAN__VLOAD(g + G), acc);
            acc = SELSCAN__VFMA(w0, SELSCAN__VLOAD(g + 2 * G), acc);
        } else {
            acc = SELSCAN__VFMA(w3, SELSCAN__VLOAD(g), zero);
            acc = SELSCAN__VFMA(w2, SELSCAN__VLOAD(g + G), acc);
            acc = SELSCAN__VFMA(w1, SELSCAN__VLOAD(g + 2 * G), acc);
            acc = SELSCAN__VFMA(w0, SELSCAN__VLOAD(g + 3 * G), acc);
        }
        SELSCAN__VSTORE(ob + i * G, acc);
    }
}

/* The group's tiles (a constant width each: taps in registers, loops unrolled). */
static SELSCAN__ATTR void SELSCAN__SFX(selscan__conv_fwd_tiles)(const int W, const int silu, const int nt, const int G,
                                                               const float *xb, float *yb, const float *wl,
                                                               const float *bl) {
    const int HM = SELSCAN_CONV_MAX_WIDTH - 1;
    int j;
    for (j = 0; j < G; j += SELSCAN__VW) {
        const float *wj = wl + j * (HM + 1), *bj = bl + j;
        switch (W) {
        case 2: SELSCAN__SFX(selscan__conv_fwd_rows)(2, silu, nt, G, xb + j, yb + j, wj, bj); break;
        case 3: SELSCAN__SFX(selscan__conv_fwd_rows)(3, silu, nt, G, xb + j, yb + j, wj, bj); break;
        default: SELSCAN__SFX(selscan__conv_fwd_rows)(4, silu, nt, G, xb + j, yb + j, wj, bj); break;
        }
    }
}
static SELSCAN__ATTR void SELSCAN__SFX(selscan__conv_dpre_tiles)(const int W, const int silu, const int nt, const int G,
                                                                const float *xb, float *gb, const float *wl,
                                                                const float *bl, float *acc) {
    const int HM = SELSCAN_CONV_MAX_WIDTH - 1;
    int j;
    for (j = 0; j < G; j += SELSCAN__VW) {
        const float *wj = wl + j * (HM + 1), *bj = bl + j;
        float *aj = acc + j * (HM + 2);
        switch (W) {
        case 2: SELSCAN__SFX(selscan__conv_dpre_rows)(2, silu, nt, G, xb + j, gb + j, wj, bj, aj); break;
        case 3: SELSCAN__SFX(selscan__conv_dpre_rows)(3, silu, nt, G, xb + j, gb + j, wj, bj, aj); break;
        default: SELSCAN__SFX(selscan__conv_dpre_rows)(4, silu, nt, G, xb + j, gb + j, wj, bj, aj); break;
        }
    }
}
static SELSCAN__ATTR void SELSCAN__SFX(selscan__conv_dx_tiles)(const int W, const int n, const int G, const float *gb,
                                                              float *ob, const float *wl) {
    const int HM = SELSCAN_CONV_MAX_WIDTH - 1;
    int j;
    for (j = 0; j < G; j += SELSCAN__VW) {
        switch (W) {
        case 2: SELSCAN__SFX(selscan__conv_dx_rows)(2, n, G, gb + j, ob + j, wl + j * (HM + 1)); break;
        case 3: SELSCAN__SFX(selscan__conv_dx_rows)(3, n, G, gb + j, ob + j, wl + j * (HM + 1)); break;
        default: SELSCAN__SFX(selscan__conv_dx_rows)(4, n, G, gb + j, ob + j, wl + j * (HM + 1)); break;
        }
    }
}

/* A group's parameters: lane c (channel d0 + c, c < G) of tile j = c - c % VW: weight k at
   wl[j (HM + 1) + k VW + c % VW], bias at bl[c] (0 past nl). */
static SELSCAN__ATTR void SELSCAN__SFX(selscan__conv_params)(const selscan__cprob *q, int64_t d0, int nl, int G, float *wl,
                                                            float *bl) {
    const int HM = SELSCAN_CONV_MAX_WIDTH - 1;
    int c, k;
    for (c = 0; c < G; c++) {
        const int j = c - c % SELSCAN__VW, l = c % SELSCAN__VW;
        for (k = 0; k <= HM; k++)
            wl[j * (HM + 1) + k * SELSCAN__VW + l] =
                c < nl && k < q->W ? SELSCAN__CAST(const float *, q->weight.data)[SELSCAN__AT2(q->weight, d0 + c, k)] : 0.0f;
        bl[c] = c < nl && q->bias.data ? SELSCAN__CAST(const float *, q->bias.data)[SELSCAN__AT1(q->bias, d0 + c)] : 0.0f;
    }
}

/* H rows of a (rows, dim, W-1) state tensor into h[k G + c] (zeros where absent or past nl). */
static SELSCAN__ATTR void SELSCAN__SFX(selscan__conv_state_in)(const selscan__ten *t, selscan_dtype dt, int64_t row,
                                                              int64_t d0, int nl, int G, int H, float *h) {
    int k, c;
    for (k = 0; k < H; k++)
        for (c = 0; c < G; c++)
            h[k * G + c] = c < nl && t->data ? selscan__load(t->data, SELSCAN__AT3(*t, row, d0 + c, k), dt) : 0.0f;
}
static SELSCAN__ATTR void SELSCAN__SFX(selscan__conv_state_out)(const selscan__ten *t, selscan_dtype dt, int64_t row,
                                                               int64_t d0, int nl, int G, int H, const float *h) {
    int k, c;
    for (c = 0; c < nl; c++)
        for (k = 0; k < H; k++) selscan__store(t->data, SELSCAN__AT3(*t, row, d0 + c, k), dt, h[k * G + c]);
}

/* The staging width of channels [dlo, dhi): the block when its channels are contiguous in every
   tensor staged (x, y or dy, dx), else a tile. */
static SELSCAN__ATTR int SELSCAN__SFX(selscan__conv_group)(const selscan__ten *a, const selscan__ten *b,
                                                          const selscan__ten *c) {
    return a->s[1] == 1 && (!b || !b->data || b->s[1] == 1) && (!c || !c->data || c->s[1] == 1) ? SELSCAN__CONV_CB
                                                                                               : SELSCAN__VW;
}

/* The forward of channels [dlo, dhi) (at most SELSCAN__CONV_CB) of batch row b, every sequence. */
static SELSCAN__ATTR void SELSCAN__SFX(selscan__conv_fwd_block)(const selscan__cprob *q, int64_t b, int64_t dlo, int64_t dhi) {
    enum { HM = SELSCAN_CONV_MAX_WIDTH - 1, CB = SELSCAN__CONV_CB };
    float xb[(HM + SELSCAN__CONV_FT) * CB], yb[SELSCAN__CONV_FT * CB], tmp[SELSCAN__FT * SELSCAN__VW], wl[(HM + 1) * CB], bl[CB];
    const int W = SELSCAN__CAST(int, q->W), H = W - 1, G = SELSCAN__SFX(selscan__conv_group)(&q->x, &q->y, NULL);
    const int FC = G == CB ? SELSCAN__CONV_FT : SELSCAN__FT; /* steps a chunk (the buffers hold either) */
    int64_t d0, s, t0;
    for (d0 = dlo; d0 < dhi; d0 += G) {
        const int nl = SELSCAN__CAST(int, selscan__min64(G, dhi - d0));
        SELSCAN__SFX(selscan__conv_params)(q, d0, nl, G, wl, bl);
        for (s = 0; s < selscan__conv_nseg(q); s++) {
            int64_t s0, s1, row;
            selscan__conv_seg(q, b, s, &s0, &s1, &row);
            SELSCAN__SFX(selscan__conv_state_in)(&q->init_state, q->dt, row, d0, nl, G, H, xb);
            for (t0 = s0; t0 < s1; t0 += FC) {
                const int nt = SELSCAN__CAST(int, selscan__min64(FC, s1 - t0));
                SELSCAN__LOADTILE(xb + H * G, &q->x, b, d0, nl, G, t0, nt, tmp);
                SELSCAN__SFX(selscan__conv_fwd_tiles)(W, q->silu, nt, G, xb, yb, wl, bl);
                SELSCAN__STORETILE(yb, &q->y, b, d0, nl, G, t0, nt, tmp);
                memmove(xb, xb + nt * G, SELSCAN__CAST(size_t, H * G) * 4); /* the last H inputs, for the next chunk */
            }
            if (q->final_state.data) SELSCAN__SFX(selscan__conv_state_out)(&q->final_state, q->dt, row, d0, nl, G, H, xb);
        }
    }
}

/* n input-gradient rows (positions p0 .. p0 + n - 1 of the sequence starting at s0): dx, or the
   rows of hb (dinit_state, [k][G]) for positions before s0. */
static SELSCAN__ATTR void SELSCAN__SFX(selscan__conv_emit)(const selscan__cprob *q, const selscan__cgrd *r, int64_t b,
                                                          int64_t d0, int nl, int G, int64_t s0, int64_t p0, int n,
                                                          const float *ob, float *hb, float *tmp) {
    const int H = SELSCAN__CAST(int, q->W) - 1;
    const int skip = p0 < s0 ? SELSCAN__CAST(int, selscan__min64(n, s0 - p0)) : 0;
    int i;
    for (i = 0; i < skip; i++) memcpy(hb + (p0 + i - s0 + H) * G, ob + i * G, SELSCAN__CAST(size_t, G) * 4);
    if (r->dx.data && n > skip) SELSCAN__STORETILE(ob + skip * G, &r->dx, b, d0, nl, G, p0 + skip, n - skip, tmp);
}

/* The backward of channels [dlo, dhi) (at most SELSCAN__CONV_CB) over every batch row and
   sequence: dx, dinit_state, and their dweight / dbias (each lane summed in the order batch row,
   sequence, step: no reduce step). */
static SELSCAN__ATTR void SELSCAN__SFX(selscan__conv_bwd_block)(const selscan__cprob *q, const selscan__cgrd *r,
                                                               int64_t dlo, int64_t dhi) {
    enum { HM = SELSCAN_CONV_MAX_WIDTH - 1, CB = SELSCAN__CONV_CB };
    float xb[(HM + SELSCAN__CONV_FT) * CB], gb[(2 * HM + SELSCAN__CONV_FT) * CB], ob[SELSCAN__CONV_FT * CB], tmp[SELSCAN__FT * SELSCAN__VW];
    float wl[(HM + 1) * CB], bl[CB], hb[HM * CB], acc[(HM + 2) * CB];
    const int W = SELSCAN__CAST(int, q->W), H = W - 1, need_dx = r->dx.data || r->dinit_state.data;
    const int G = SELSCAN__SFX(selscan__conv_group)(&q->x, &r->dy, &r->dx);
    const int FC = G == CB ? SELSCAN__CONV_FT : SELSCAN__FT; /* steps a chunk (the buffers hold either) */
    int64_t d0, b, s, t0;
    int c, k;
    for (d0 = dlo; d0 < dhi; d0 += G) {
        const int nl = SELSCAN__CAST(int, selscan__min64(G, dhi - d0));
        SELSCAN__SFX(selscan__conv_params)(q, d0, nl, G, wl, bl);
        memset(acc, 0, sizeof acc); /* tile j: dweight k at acc[j (HM + 2) + k VW + lane], dbias at k = 4 */
        for (b = 0; b < q->batch; b++)
            for (s = 0; s < selscan__conv_nseg(q); s++) {
                int64_t s0, s1, row;
                selscan__conv_seg(q, b, s, &s0, &s1, &row);
                SELSCAN__SFX(selscan__conv_state_in)(&q->init_state, q->dt, row, d0, nl, G, H, xb);
                memset(gb, 0, SELSCAN__CAST(size_t, H * G) * 4); /* no dpre before the sequence */
                for (t0 = s0; t0 < s1; t0 += FC) {
                    const int nt = SELSCAN__CAST(int, selscan__min64(FC, s1 - t0));
                    SELSCAN__LOADTILE(xb + H * G, &q->x, b, d0, nl, G, t0, nt, tmp);
                    SELSCAN__LOADTILE(gb + H * G, &r->dy, b, d0, nl, G, t0, nt, tmp);
                    SELSCAN__SFX(selscan__conv_dpre_tiles)(W, q->silu, nt, G, xb, gb + H * G, wl, bl, acc);
                    if (need_dx) { /* positions t0 - H .. t0 + nt - 1 - H are complete */
                        SELSCAN__SFX(selscan__conv_dx_tiles)(W, nt, G, gb, ob, wl);
                        SELSCAN__SFX(selscan__conv_emit)(q, r, b, d0, nl, G, s0, t0 - H, nt, ob, hb, tmp);
                    }
                    memmove(xb, xb + nt * G, SELSCAN__CAST(size_t, H * G) * 4);
                    memmove(gb, gb + nt * G, SELSCAN__CAST(size_t, H * G) * 4);
                }
                if (need_dx) { /* the last H positions: no dpre after the sequence; plus dfinal_state */
                    memset(gb + H * G, 0, SELSCAN__CAST(size_t, H * G) * 4);
                    SELSCAN__SFX(selscan__conv_dx_tiles)(W, H, G, gb, ob, wl);
                    if (r->dfinal_state.data)
                        for (k = 0; k < H; k++)
                            for (c = 0; c < nl; c++)
                                ob[k * G + c] += selscan__load(r->dfinal_state.data, SELSCAN__AT3(r->dfinal_state, row, d0 + c, k), q->dt);
                    SELSCAN__SFX(selscan__conv_emit)(q, r, b, d0, nl, G, s0, s1 - H, H, ob, hb, tmp);
                    if (r->dinit_state.data) SELSCAN__SFX(selscan__conv_state_out)(&r->dinit_state, q->dt, row, d0, nl, G, H, hb);
                }
            }
        for (c = 0; c < nl; c++) {
            const float *a = acc + (c - c % SELSCAN__VW) * (HM + 2) + c % SELSCAN__VW;
            if (r->dweight.data)
                for (k = 0; k < W; k++) SELSCAN__CAST(float *, r->dweight.data)[SELSCAN__AT2(r->dweight, d0 + c, k)] = a[k * SELSCAN__VW];
            if (r->dbias.data) SELSCAN__CAST(float *, r->dbias.data)[SELSCAN__AT1(r->dbias, d0 + c)] = a[4 * SELSCAN__VW];
        }
    }
}

/* ---- >>fast-ssd: the SSD forward's inner tile and the backward's kernels (>>ssd-entry) ------- */
/* One vector of W channels and k <= 8 states n0 .. n0 + k - 1 over nt steps, the states in
   registers: S <- a S + (dt B) x, then y += sum over the k states of C S, in two partial sums (even
   and odd n: two chains of dependent FMAs, not one) added in a fixed order. S: the states, rows ps
   floats apart (n-major); x, y: the step rows, ts floats apart; a: the decays; dB (dt B), Cb: one
   row per step, nr floats apart (from n0). k is a constant where inlined (8): the states are
   registers. */
static SELSCAN__ATTR SELSCAN__INLINE void SELSCAN__SFX(selscan__ssd_fwd_nblk)(const int k, float *S, int64_t ps, int nt,
                                                                              int64_t ts, const float *x,
                                                                              const float *a, const float *dB,
                                                                              const float *Cb, int64_t nr, float *y) {
    const SELSCAN__VF zero = SELSCAN__VSET1(0.0f);
    SELSCAN__VF s0 = zero, s1 = zero, s2 = zero, s3 = zero, s4 = zero, s5 = zero, s6 = zero, s7 = zero;
    int i;
    if (k > 0) s0 = SELSCAN__VLOAD(S);
    if (k > 1) s1 = SELSCAN__VLOAD(S + ps);
    if (k > 2) s2 = SELSCAN__VLOAD(S + 2 * ps);
    if (k > 3) s3 = SELSCAN__VLOAD(S + 3 * ps);
    if (k > 4) s4 = SELSCAN__VLOAD(S + 4 * ps);
    if (k > 5) s5 = SELSCAN__VLOAD(S + 5 * ps);
    if (k > 6) s6 = SELSCAN__VLOAD(S + 6 * ps);
    if (k > 7) s7 = SELSCAN__VLOAD(S + 7 * ps);
    for (i = 0; i < nt; i++) {
        const SELSCAN__VF xv = SELSCAN__VLOAD(x + i * ts), av = SELSCAN__VSET1(a[i]);
        const float *const db = dB + i * nr, *const cb = Cb + i * nr;
        SELSCAN__VF e = SELSCAN__VLOAD(y + i * ts), o = zero;
#define SELSCAN__SSD_ST(j, acc)                                                                          \
    if (k > j) {                                                                                        \
        s##j = SELSCAN__VFMA(av, s##j, SELSCAN__VMUL(SELSCAN__VSET1(db[j]), xv));                       \
        acc = SELSCAN__VFMA(SELSCAN__VSET1(cb[j]), s##j, acc);                                          \
    }
        SELSCAN__SSD_ST(0, e) SELSCAN__SSD_ST(1, o) SELSCAN__SSD_ST(2, e) SELSCAN__SSD_ST(3, o)
        SELSCAN__SSD_ST(4, e) SELSCAN__SSD_ST(5, o) SELSCAN__SSD_ST(6, e) SELSCAN__SSD_ST(7, o)
#undef SELSCAN__SSD_ST
        SELSCAN__VSTORE(y + i * ts, SELSCAN__VADD(e, o));
    }
    if (k > 0) SELSCAN__VSTORE(S, s0);
    if (k > 1) SELSCAN__VSTORE(S + ps, s1);
    if (k > 2) SELSCAN__VSTORE(S + 2 * ps, s2);
    if (k > 3) SELSCAN__VSTORE(S + 3 * ps, s3);
    if (k > 4) SELSCAN__VSTORE(S + 4 * ps, s4);
    if (k > 5) SELSCAN__VSTORE(S + 5 * ps, s5);
    if (k > 6) SELSCAN__VSTORE(S + 6 * ps, s6);
    if (k > 7) SELSCAN__VSTORE(S + 7 * ps, s7);
}

/* A chunk of nt steps of a block of pw channels (a multiple of every W): for each vector of
   channels, the states 8 at a time in increasing n (so y's sums over n run in one fixed order).
   S: N rows of pw floats; xb, yb: nt rows of pw; a: nt; dB, Cb: nt rows of N, nr floats apart. */
static SELSCAN__ATTR void SELSCAN__SFX(selscan__ssd_fwd_chunk)(float *S, int64_t pw, int64_t N, int64_t nr, int nt,
                                                             const float *xb, const float *a, const float *dB,
                                                             const float *Cb, float *yb) {
    int64_t pv, n0;
    for (pv = 0; pv < pw; pv += SELSCAN__VW)
        for (n0 = 0; n0 < N; n0 += 8) {
            if (N - n0 >= 8)
                SELSCAN__SFX(selscan__ssd_fwd_nblk)(8, S + n0 * pw + pv, pw, nt, pw, xb + pv, a, dB + n0, Cb + n0, nr,
                                                    yb + pv);
            else
                SELSCAN__SFX(selscan__ssd_fwd_nblk)
                (SELSCAN__CAST(int, N - n0), S + n0 * pw + pv, pw, nt, pw, xb + pv, a, dB + n0, Cb + n0, nr, yb + pv);
        }
}


/* ---- the SSD backward's kernels (>>ssd-entry's backward drives them) ----------------------------
   The backward's layout is the transpose of the forward's: vectorized over the states n (a
   channel's N states contiguous, rows NR = r16(N) floats apart, the pad lanes 0), so that the
   sums over the channels (dB, dC, the decay's gradient) are lane-wise adds and only dx's sum
   over n is a horizontal one. */

/* nt steps of the recurrence S[p,:] <- a S[p,:] + (dt x)[p] B for k <= 4 vectors of the P NR
   state floats (flat index j: channel j / NR, states j % NR), each in a register over the steps.
   st: store every step's state into hs (row i, rows PN floats apart), else the last into hs. */
static SELSCAN__ATTR SELSCAN__INLINE void SELSCAN__SFX(selscan__ssd_adv_blk)(const int k, const int st,
                                                                             const float *S, int64_t j, int64_t NR,
                                                                             int64_t PN, int nt, const float *a,
                                                                             const float *u, int64_t us,
                                                                             const float *Bs, float *hs) {
    const int64_t p0 = j / NR, n0 = j % NR, p1 = (j + SELSCAN__VW) / NR, n1 = (j + SELSCAN__VW) % NR;
    const int64_t p2 = (j + 2 * SELSCAN__VW) / NR, n2 = (j + 2 * SELSCAN__VW) % NR;
    const int64_t p3 = (j + 3 * SELSCAN__VW) / NR, n3 = (j + 3 * SELSCAN__VW) % NR;
    SELSCAN__VF s0, s1 = SELSCAN__VSET1(0.0f), s2 = s1, s3 = s1;
    int i;
    s0 = SELSCAN__VLOAD(S + j);
    if (k > 1) s1 = SELSCAN__VLOAD(S + j + SELSCAN__VW);
    if (k > 2) s2 = SELSCAN__VLOAD(S + j + 2 * SELSCAN__VW);
    if (k > 3) s3 = SELSCAN__VLOAD(S + j + 3 * SELSCAN__VW);
    for (i = 0; i < nt; i++) {
        const SELSCAN__VF av = SELSCAN__VSET1(a[i]);
        const float *const ur = u + i * us, *const br = Bs + i * NR;
        s0 = SELSCAN__VFMA(av, s0, SELSCAN__VMUL(SELSCAN__VSET1(ur[p0]), SELSCAN__VLOAD(br + n0)));
        if (k > 1) s1 = SELSCAN__VFMA(av, s1, SELSCAN__VMUL(SELSCAN__VSET1(ur[p1]), SELSCAN__VLOAD(br + n1)));
        if (k > 2) s2 = SELSCAN__VFMA(av, s2, SELSCAN__VMUL(SELSCAN__VSET1(ur[p2]), SELSCAN__VLOAD(br + n2)));
        if (k > 3) s3 = SELSCAN__VFMA(av, s3, SELSCAN__VMUL(SELSCAN__VSET1(ur[p3]), SELSCAN__VLOAD(br + n3)));
        if (st) {
            float *const hr = hs + i * PN + j;
            SELSCAN__VSTORE(hr, s0);
            if (k > 1) SELSCAN__VSTORE(hr + SELSCAN__VW, s1);
            if (k > 2) SELSCAN__VSTORE(hr + 2 * SELSCAN__VW, s2);
            if (k > 3) SELSCAN__VSTORE(hr + 3 * SELSCAN__VW, s3);
        }
    }
    if (!st) {
        SELSCAN__VSTORE(hs + j, s0);
        if (k > 1) SELSCAN__VSTORE(hs + j + SELSCAN__VW, s1);
        if (k > 2) SELSCAN__VSTORE(hs + j + 2 * SELSCAN__VW, s2);
        if (k > 3) SELSCAN__VSTORE(hs + j + 3 * SELSCAN__VW, s3);
    }
}

/* nt steps of the recurrence for P channels from the state S (P rows of NR), a: the decays, u
   (dt x): nt rows of us floats, Bs: nt rows of NR. all: the state after step i into hs + i P NR;
   else only the last step's, into hs (which may be S). Four vectors at a time (four independent
   chains of dependent FMAs). */
static SELSCAN__ATTR void SELSCAN__SFX(selscan__ssd_adv)(const float *S, int64_t P, int64_t NR, int nt, const float *a,
                                                       const float *u, int64_t us, const float *Bs, float *hs,
                                                       int all) {
    const int64_t PN = P * NR;
    int64_t j = 0;
    if (all) {
        for (; j + 4 * SELSCAN__VW <= PN; j += 4 * SELSCAN__VW)
            SELSCAN__SFX(selscan__ssd_adv_blk)(4, 1, S, j, NR, PN, nt, a, u, us, Bs, hs);
        for (; j < PN; j += SELSCAN__VW) SELSCAN__SFX(selscan__ssd_adv_blk)(1, 1, S, j, NR, PN, nt, a, u, us, Bs, hs);
    } else {
        for (; j + 4 * SELSCAN__VW <= PN; j += 4 * SELSCAN__VW)
            SELSCAN__SFX(selscan__ssd_adv_blk)(4, 0, S, j, NR, PN, nt, a, u, us, Bs, hs);
        for (; j < PN; j += SELSCAN__VW) SELSCAN__SFX(selscan__ssd_adv_blk)(1, 0, S, j, NR, PN, nt, a, u, us, Bs, hs);
    }
}

/* One step back for k <= 4 channels (rows NR apart): with g = dy0 (the gradient of y before the
   gate and D), u = dt x, per state lane: dhn = dh + g C (the gradient of the state after the
   step), dC += g S1, da += dhn S0, bx += dhn B (dx's sum, horizontal at the end), dB += dhn u,
   dh <- dhn a. S1 / S0: the states after / before the step. da: 4 partial sums added in order.
   wz: also y0 = sum_n C S1 of each channel (for dz) into y. Only the vectors with a state n < N run; in
   the last, where it has pad lanes (lv: 1 in n < N, else 0), S1, S0 and dhn are 0 there: an infinite
   u or g times a pad's B = C = 0 is NaN, which the sums must not see (the reference has no pads). */
static SELSCAN__ATTR SELSCAN__INLINE void SELSCAN__SFX(selscan__ssd_bwd_pblk)(const int k, const int wz, int64_t N, int64_t NR,
                                                                              SELSCAN__VF lv,
                                                                              const float *S1,
                                                                              const float *S0, float *dh,
                                                                              const float *Bi, const float *Ci,
                                                                              float *dBr, float *dCr, const float *g,
                                                                              const float *u, SELSCAN__VF av,
                                                                              SELSCAN__VF *da, float *bx, float *y) {
    const SELSCAN__VF zero = SELSCAN__VSET1(0.0f);
    SELSCAN__VF g0 = zero, g1 = zero, g2 = zero, g3 = zero, u0 = zero, u1 = zero, u2 = zero, u3 = zero;
    SELSCAN__VF y0 = zero, y1 = zero, y2 = zero, y3 = zero;
    SELSCAN__VF b0 = zero, b1 = zero, b2 = zero, b3 = zero, d0 = zero, d1 = zero, d2 = zero, d3 = zero;
    int64_t nv;
    if (k > 0) { g0 = SELSCAN__VSET1(g[0]); u0 = SELSCAN__VSET1(u[0]); }
    if (k > 1) { g1 = SELSCAN__VSET1(g[1]); u1 = SELSCAN__VSET1(u[1]); }
    if (k > 2) { g2 = SELSCAN__VSET1(g[2]); u2 = SELSCAN__VSET1(u[2]); }
    if (k > 3) { g3 = SELSCAN__VSET1(g[3]); u3 = SELSCAN__VSET1(u[3]); }
#define SELSCAN__SSD_BJ(j, M)                                                                        \
    if (k > j) {                                                                                    \
        SELSCAN__VF s1v = SELSCAN__VLOAD(S1 + j * NR + nv), s0v = SELSCAN__VLOAD(S0 + j * NR + nv);  \
        hn = SELSCAN__VFMA(g##j, Cv, SELSCAN__VLOAD(dh + j * NR + nv));                              \
        if (M) {                                                                                    \
            s1v = SELSCAN__VGTSEL(lv, zero, s1v, zero);                                             \
            s0v = SELSCAN__VGTSEL(lv, zero, s0v, zero);                                             \
            hn = SELSCAN__VGTSEL(lv, zero, hn, zero);                                               \
        }                                                                                           \
        dCa = SELSCAN__VFMA(g##j, s1v, dCa);                                                         \
        if (wz) y##j = SELSCAN__VFMA(Cv, s1v, y##j);                                                 \
        d##j = SELSCAN__VFMA(hn, s0v, d##j);                                                         \
        b##j = SELSCAN__VFMA(hn, Bv, b##j);                                                          \
        dBa = SELSCAN__VFMA(hn, u##j, dBa);                                                          \
        SELSCAN__VSTORE(dh + j * NR + nv, SELSCAN__VMUL(hn, av));                                    \
    }
#define SELSCAN__SSD_BV(M)                                                                            \
    {                                                                                               \
        const SELSCAN__VF Bv = SELSCAN__VLOAD(Bi + nv), Cv = SELSCAN__VLOAD(Ci + nv);               \
        SELSCAN__VF dBa = SELSCAN__VLOAD(dBr + nv), dCa = SELSCAN__VLOAD(dCr + nv), hn;             \
        SELSCAN__SSD_BJ(0, M) SELSCAN__SSD_BJ(1, M) SELSCAN__SSD_BJ(2, M) SELSCAN__SSD_BJ(3, M)     \
        SELSCAN__VSTORE(dBr + nv, dBa);                                                             \
        SELSCAN__VSTORE(dCr + nv, dCa);                                                             \
    }
    for (nv = 0; nv + SELSCAN__VW <= N; nv += SELSCAN__VW) SELSCAN__SSD_BV(0)
    if (nv < N) SELSCAN__SSD_BV(1) /* the last vector, with pad lanes */
#undef SELSCAN__SSD_BV
#undef SELSCAN__SSD_BJ
    *da = SELSCAN__VADD(*da, SELSCAN__VADD(SELSCAN__VADD(d0, d1), SELSCAN__VADD(d2, d3)));
    if (k > 0) bx[0] = SELSCAN__VHSUM(b0);
    if (k > 1) bx[1] = SELSCAN__VHSUM(b1);
    if (k > 2) bx[2] = SELSCAN__VHSUM(b2);
    if (k > 3) bx[3] = SELSCAN__VHSUM(b3);
    if (wz && k > 0) y[0] = SELSCAN__VHSUM(y0);
    if (wz && k > 1) y[1] = SELSCAN__VHSUM(y1);
    if (wz && k > 2) y[2] = SELSCAN__VHSUM(y2);
    if (wz && k > 3) y[3] = SELSCAN__VHSUM(y3);
}

/* One step back for all P channels (4 or 2 at a time by the ISA's registers, in increasing p:
   every sum in one fixed order for a given ISA):
   S1, S0, dh: P rows of NR; Bi, Ci, dBr, dCr: rows of NR; g, u, bx: P floats; *da: the sum over
   channels and states of dhn S0 (the gradient of the decay a, before its factor); y (P floats,
   NULL: not wanted): y0 = sum_n C S1 per channel. */
static SELSCAN__ATTR void SELSCAN__SFX(selscan__ssd_bwd_step)(int64_t P, int64_t N, int64_t NR, const float *S1, const float *S0,
                                                            float *dh, const float *Bi, const float *Ci, float *dBr,
                                                            float *dCr, const float *g, const float *u, float a,
                                                            float *bx, float *da, float *y) {
    SELSCAN__VF dv = SELSCAN__VSET1(0.0f), lv;
    const SELSCAN__VF av = SELSCAN__VSET1(a);
    float lanes[SELSCAN__WMAX];
    int64_t p = 0, o;
    int l;
    for (l = 0; l < SELSCAN__VW; l++) lanes[l] = (N - 1) / SELSCAN__VW * SELSCAN__VW + l < N ? 1.0f : 0.0f;
    lv = SELSCAN__VLOAD(lanes); /* the last vector's live lanes */
#define SELSCAN__SSD_PB4(k, wz)                                                                             \
    SELSCAN__SFX(selscan__ssd_bwd_pblk)(k, wz, N, NR, lv, S1 + o, S0 + o, dh + o, Bi, Ci, dBr, dCr, g + p, u + p, av, &dv, \
                                        bx + p, y ? y + p : NULL)
    if (SELSCAN__VW == 16 || SELSCAN__VW == 4) { /* avx512, neon: 32 registers, 4 channels at a time */
        for (; p + 4 <= P; p += 4) {
            o = p * NR;
            if (y) SELSCAN__SSD_PB4(4, 1);
            else SELSCAN__SSD_PB4(4, 0);
        }
    }
    for (; p + 2 <= P; p += 2) { /* avx2, portable: 16 registers, 2 (4 spills) */
        o = p * NR;
        if (y) SELSCAN__SSD_PB4(2, 1);
        else SELSCAN__SSD_PB4(2, 0);
    }
    for (; p < P; p++) {
        o = p * NR;
        if (y) SELSCAN__SSD_PB4(1, 1);
        else SELSCAN__SSD_PB4(1, 0);
    }
#undef SELSCAN__SSD_PB4
    *da = SELSCAN__VHSUM(dv);
}

/* ---- >>fast-norm: the gated RMS norm's rows (>>norm-entry drives them) ------------------------ */
#if SELSCAN__VW > 1 /* (the portable path runs the scalar loop: >>norm-entry) */
/* Rows [r0, r1) of the flattened (batch, L), each group of gs channels in passes of VW channels a vector
   (the forward two, the backward three); the inputs y, z, weight (and dout) with their channels contiguous
   (the driver checks), the outputs any strides (lane by lane where the channels are not contiguous: the
   same values). Pass 1 sums u^2 lane-wise over the group, then over the lanes (VHSUM: a fixed order); the
   backward's pass 2 sums dn * n likewise; the last pass reads the group again and writes the outputs. The gate's sigmoid, 1 / (1 + e^-z) with
   selscan__vexp (>>fast-math), is computed in pass 1 and kept for the group's first SELSCAN__NORM_VB channels
   (computed again, the same bits, past them). A group's last vector of fewer than VW channels goes through
   a VW-float buffer (zeros past the group: they add nothing to the sums). The backward's mean of dn * n
   is the reference's: the sum of dn * (u r); the sigmoid selscan__norm_sigmoid; dweight's sums per channel in row
   order (the reference's order), into dw[c * dws] (zeroed first; NULL: not asked for). */

/* m <= VW elements of dt at base + off (zeros past m) */
static SELSCAN__ATTR SELSCAN__INLINE SELSCAN__VF SELSCAN__SFX(selscan__norm_ld)(const void *base, int64_t off, int m,
                                                                             selscan_dtype dt) {
    float t[SELSCAN__WMAX];
    int i;
    if (m == SELSCAN__VW) return SELSCAN__VLOADT(base, off, dt);
    for (i = 0; i < SELSCAN__VW; i++) t[i] = i < m ? selscan__load(base, off + i, dt) : 0.0f;
    return SELSCAN__VLOAD(t);
}
/* the first m <= VW lanes of v into base + off, lane i at off + i st */
static SELSCAN__ATTR SELSCAN__INLINE void SELSCAN__SFX(selscan__norm_st)(void *base, int64_t off, int64_t st, int m,
                                                                      selscan_dtype dt, SELSCAN__VF v) {
    float t[SELSCAN__WMAX];
    int i;
    if (m == SELSCAN__VW && st == 1) {
        SELSCAN__VSTORET(base, off, dt, v);
        return;
    }
    SELSCAN__VSTORE(t, v);
    for (i = 0; i < m; i++) selscan__store(base, off + i * st, dt, t[i]);
}

/* The gate's sigmoid: selscan__vsigmoid's bits where z >= -87; below, e^-z as e^(-z - 45) e^45 (-z - 45 exact
   by Sterbenz's lemma up to -z = 90, past which both overflow): selscan__vexp overflows from 88.37 where the
   reference's expf does from 88.72, and there the reference's sigmoid is a subnormal, not 0 (a finite out of 0,
   NaN for an infinity). Within ~2.3 ulp there (vexp's 1.3, e^45's rounding and the product's). */
static SELSCAN__ATTR SELSCAN__INLINE SELSCAN__VF SELSCAN__SFX(selscan__norm_sigmoid)(SELSCAN__VF z) {
    const SELSCAN__VF one = SELSCAN__VSET1(1.0f), lo = SELSCAN__VSET1(87.0f), t = SELSCAN__VSUB(SELSCAN__VSET1(0.0f), z);
    const SELSCAN__VF e = SELSCAN__SFX(selscan__vexp)(SELSCAN__VGTSEL(t, lo, SELSCAN__VSUB(t, SELSCAN__VSET1(45.0f)), t));
    return SELSCAN__VDIV(one, SELSCAN__VADD(one, SELSCAN__VGTSEL(t, lo, SELSCAN__VMUL(e, SELSCAN__VSET1(3.49342711e19f)), e)));
}

/* The vector of channels c0 + c .. c0 + c + m - 1 of one row: y, and with z its sigmoid sg (from sgb where
   c < SELSCAN__NORM_VB, which pass 1 fills) and the gate s = z sg; returns u. */
static SELSCAN__ATTR SELSCAN__INLINE SELSCAN__VF SELSCAN__SFX(selscan__norm_in)(const selscan__nprob *q, int64_t yo,
                                                                             int64_t zo, int64_t c, int m, int pass2,
                                                                             float *sgb, SELSCAN__VF *yv, SELSCAN__VF *zv,
                                                                             SELSCAN__VF *sg, SELSCAN__VF *s) {
    *yv = SELSCAN__SFX(selscan__norm_ld)(q->y.data, yo + c, m, q->dt);
    if (!q->z.data) return *yv;
    *zv = SELSCAN__SFX(selscan__norm_ld)(q->z.data, zo + c, m, q->dt);
    if (pass2 && c < SELSCAN__NORM_VB) {
        *sg = SELSCAN__VLOAD(sgb + c);
    } else {
        *sg = SELSCAN__SFX(selscan__norm_sigmoid)(*zv);
        if (c < SELSCAN__NORM_VB) SELSCAN__VSTORE(sgb + c, *sg);
    }
    *s = SELSCAN__VMUL(*zv, *sg);
    return q->before ? *yv : SELSCAN__VMUL(*yv, *s);
}

static SELSCAN__ATTR void SELSCAN__SFX(selscan__norm_fwd_rows)(const selscan__nprob *q, int64_t r0, int64_t r1) {
    float sgb[SELSCAN__NORM_VB];
    const int after = q->z.data && q->before;
    const float *wt = SELSCAN__CAST(const float *, q->weight.data);
    const int64_t gs = q->gs;
    const SELSCAN__VF one = SELSCAN__VSET1(1.0f);
    int64_t i, c0, c;
    for (i = r0; i < r1; i++) {
        const int64_t b = i / q->L, t = i % q->L;
        for (c0 = 0; c0 < q->dim; c0 += gs) {
            const int64_t yo = SELSCAN__AT3(q->y, b, t, c0), zo = SELSCAN__AT3(q->z, b, t, c0);
            const int64_t oo = SELSCAN__AT3(q->out, b, t, c0);
            SELSCAN__VF acc = SELSCAN__VSET1(0.0f), yv, zv = one, sg = one, s = one, vr;
            float r;
            for (c = 0; c < gs; c += SELSCAN__VW) {
                const int m = SELSCAN__CAST(int, selscan__min64(SELSCAN__VW, gs - c));
                const SELSCAN__VF u = SELSCAN__SFX(selscan__norm_in)(q, yo, zo, c, m, 0, sgb, &yv, &zv, &sg, &s);
                acc = SELSCAN__VFMA(u, u, acc);
            }
            r = 1.0f / sqrtf(SELSCAN__VHSUM(acc) / SELSCAN__CAST(float, gs) + q->eps);
            vr = SELSCAN__VSET1(r);
            for (c = 0; c < gs; c += SELSCAN__VW) {
                const int m = SELSCAN__CAST(int, selscan__min64(SELSCAN__VW, gs - c));
                const SELSCAN__VF u = SELSCAN__SFX(selscan__norm_in)(q, yo, zo, c, m, 1, sgb, &yv, &zv, &sg, &s);
                SELSCAN__VF o = SELSCAN__VMUL(u, vr);
                if (wt) o = SELSCAN__VMUL(o, SELSCAN__SFX(selscan__norm_ld)(wt, c0 + c, m, SELSCAN_F32));
                if (after) o = SELSCAN__VMUL(o, s);
                SELSCAN__SFX(selscan__norm_st)(q->out.data, oo + c * q->out.s[2], q->out.s[2], m, q->dt, o);
            }
        }
    }
}

static SELSCAN__ATTR void SELSCAN__SFX(selscan__norm_bwd_rows)(const selscan__nprob *q, const selscan__ngrd *g, int64_t r0,
                                                              int64_t r1, float *dw, int64_t dws) {
    float sgb[SELSCAN__NORM_VB], tmp[SELSCAN__WMAX];
    const int after = q->z.data && q->before, in = q->z.data && !q->before;
    const float *wt = SELSCAN__CAST(const float *, q->weight.data);
    const int64_t gs = q->gs;
    const SELSCAN__VF one = SELSCAN__VSET1(1.0f);
    int64_t i, c0, c;
    int k;
    if (dw)
        for (c = 0; c < q->dim; c++) dw[c * dws] = 0.0f;
    for (i = r0; i < r1; i++) {
        const int64_t b = i / q->L, t = i % q->L;
        for (c0 = 0; c0 < q->dim; c0 += gs) {
            const int64_t yo = SELSCAN__AT3(q->y, b, t, c0), zo = SELSCAN__AT3(q->z, b, t, c0);
            const int64_t d0 = SELSCAN__AT3(g->dout, b, t, c0), yg = SELSCAN__AT3(g->dy, b, t, c0);
            const int64_t zg = SELSCAN__AT3(g->dz, b, t, c0);
            SELSCAN__VF ass = SELSCAN__VSET1(0.0f), adn = ass, yv, zv = one, sg = one, s = one, vr, vnm;
            float r;
            for (c = 0; c < gs; c += SELSCAN__VW) { /* u^2 */
                const int nm = SELSCAN__CAST(int, selscan__min64(SELSCAN__VW, gs - c));
                const SELSCAN__VF u = SELSCAN__SFX(selscan__norm_in)(q, yo, zo, c, nm, 0, sgb, &yv, &zv, &sg, &s);
                ass = SELSCAN__VFMA(u, u, ass);
            }
            r = 1.0f / sqrtf(SELSCAN__VHSUM(ass) / SELSCAN__CAST(float, gs) + q->eps);
            vr = SELSCAN__VSET1(r);
            for (c = 0; c < gs; c += SELSCAN__VW) { /* dn * n, n = u r (not r times a sum of dn * u: that
                                                        overflows, or is 0 * inf, where the reference's is finite) */
                const int nm = SELSCAN__CAST(int, selscan__min64(SELSCAN__VW, gs - c));
                const SELSCAN__VF u = SELSCAN__SFX(selscan__norm_in)(q, yo, zo, c, nm, 1, sgb, &yv, &zv, &sg, &s);
                SELSCAN__VF dn = SELSCAN__SFX(selscan__norm_ld)(g->dout.data, d0 + c, nm, q->dt);
                if (wt) dn = SELSCAN__VMUL(dn, SELSCAN__SFX(selscan__norm_ld)(wt, c0 + c, nm, SELSCAN_F32));
                if (after) dn = SELSCAN__VMUL(dn, s);
                adn = SELSCAN__VFMA(dn, SELSCAN__VMUL(u, vr), adn);
            }
            vnm = SELSCAN__VSET1(-(SELSCAN__VHSUM(adn) / SELSCAN__CAST(float, gs)));
            for (c = 0; c < gs; c += SELSCAN__VW) {
                const int nm = SELSCAN__CAST(int, selscan__min64(SELSCAN__VW, gs - c));
                const SELSCAN__VF u = SELSCAN__SFX(selscan__norm_in)(q, yo, zo, c, nm, 1, sgb, &yv, &zv, &sg, &s);
                const SELSCAN__VF dout = SELSCAN__SFX(selscan__norm_ld)(g->dout.data, d0 + c, nm, q->dt);
                const SELSCAN__VF w = wt ? SELSCAN__SFX(selscan__norm_ld)(wt, c0 + c, nm, SELSCAN_F32) : one;
                const SELSCAN__VF n = SELSCAN__VMUL(u, vr);
                SELSCAN__VF dn = wt ? SELSCAN__VMUL(dout, w) : dout, du;
                if (after) dn = SELSCAN__VMUL(dn, s);
                du = SELSCAN__VMUL(vr, SELSCAN__VFMA(n, vnm, dn)); /* r (dn - n m) */
                if (g->dy.data)
                    SELSCAN__SFX(selscan__norm_st)(g->dy.data, yg + c * g->dy.s[2], g->dy.s[2], nm, q->dt,
                                                   in ? SELSCAN__VMUL(du, s) : du);
                if (g->dz.data) { /* s'(z) = sg (1 + z (1 - sg)) */
                    const SELSCAN__VF ds = SELSCAN__VMUL(sg, SELSCAN__VFMA(zv, SELSCAN__VSUB(one, sg), one));
                    const SELSCAN__VF dz = after ? SELSCAN__VMUL(SELSCAN__VMUL(SELSCAN__VMUL(dout, n), w), ds)
                                                 : SELSCAN__VMUL(SELSCAN__VMUL(du, yv), ds);
                    SELSCAN__SFX(selscan__norm_st)(g->dz.data, zg + c * g->dz.s[2], g->dz.s[2], nm, q->dt, dz);
                }
                if (dw) { /* one add a channel and row: the same bits by vector or by lane */
                    const SELSCAN__VF dn_ = SELSCAN__VMUL(dout, n), term = after ? SELSCAN__VMUL(dn_, s) : dn_;
                    float *p = dw + (c0 + c) * dws;
                    if (dws == 1 && nm == SELSCAN__VW) {
                        SELSCAN__VSTORE(p, SELSCAN__VADD(SELSCAN__VLOAD(p), term));
                    } else {
                        SELSCAN__VSTORE(tmp, term);
                        for (k = 0; k < nm; k++) p[k * dws] += tmp[k];
                    }
                }
            }
        }
    }
}

#endif /* SELSCAN__VW > 1: >>fast-norm */

/* the pass's definitions (>>fast-isa defines them again for the next pass) */
#undef SELSCAN__KSFX
#undef SELSCAN__ATTR
#undef SELSCAN__VF
#undef SELSCAN__VW
#undef SELSCAN__VLOAD
#undef SELSCAN__VSTORE
#undef SELSCAN__VSET1
#undef SELSCAN__VADD
#undef SELSCAN__VSUB
#undef SELSCAN__VMUL
#undef SELSCAN__VDIV
#undef SELSCAN__VFMA
#undef SELSCAN__VMAX
#undef SELSCAN__VMIN
#undef SELSCAN__VGTSEL
#undef SELSCAN__VCANON
#undef SELSCAN__VPOW2I
#undef SELSCAN__VHSUM
#undef SELSCAN__VTHSUM
#undef SELSCAN__VTHSUMS
#undef SELSCAN__VADDEXP
#undef SELSCAN__VOPAQUE
#undef SELSCAN__VLOADT
#undef SELSCAN__VSTORET
#undef SELSCAN__LOADTILE
#undef SELSCAN__STORETILE
#endif /* SELSCAN__KSFX: >>fast-kernels */
