/* selscan_cuda.cuh - CUDA forward, backward and step kernels of selscan (Mamba's S6 scan), and of
 * the causal depthwise conv1d before it (selscan_conv_*_cuda: see >>conv below and selscan.h
 * >>conv-api).
 *
 * Declarations (includable from C and C++; needs cuda_runtime_api.h for cudaStream_t):
 *     #include "selscan_cuda.cuh"
 * Implementation, in exactly one .cu file compiled by nvcc (sm_70 or newer; tuned for sm_90):
 *     #define SELSCAN_IMPLEMENTATION        (the CPU side's validation helpers are reused)
 *     #define SELSCAN_CUDA_IMPLEMENTATION
 *     #include "selscan_cuda.cuh"
 * A project that implements the CPU side (SELSCAN_IMPLEMENTATION) in another translation unit
 * also defines SELSCAN_VALIDATION_ONLY in the CUDA one (recommended: that TU then compiles only
 * the validation helpers and the kernels, a third less nvcc time; the CPU entries come from the
 * other TU), or SELSCAN_STATIC (a private copy of the CPU code and of the launchers, internal
 * linkage, no duplicate symbols; call the launchers from that TU).
 * Every internal name (helpers, kernels, types) lives in namespace selscan_cuda_detail, functions
 * and kernels static (internal linkage): a user's .cu file may have its own cdiv, mk, ld, ... around
 * the include. Only the launchers are global (with SELSCAN__CUDA_TUNING, also >>bench's static
 * selscan__*_cuda_tuned entries).
 *
 * CONTENTS (grep the >>tag)
 *     >>cuda-impl       the implementation's start      >>tuning  the tuning macros and their defaults
 *     >>kparams         the kernels' parameters: scan_params (forward), bwd_params (backward),
 *                       step1_params (step_kernel)                 >>device-helpers  loads, math
 *     >>fwd-general     fwd_kernel, carry_kernel, empty_seq_kernel
 *     >>fwd-fast        fwd_fast_kernel                            >>fwd-short  fwd_short_kernel
 *     >>bwd-general     bwd_kernel, bwd_local_kernel, carry_rev_kernel, reduce_*_kernel
 *     >>bwd-fast        bwd_fast_kernel, bwd_fast_local_kernel
 *     >>step            step_kernel, step_vec_kernel, step_loop_kernel, step_lat_kernel
 *     >>plans           which kernel a problem gets (plan_forward, plan_fast_backward, ...)
 *     >>launch          the launch sequences      >>entry  validation + plan + launch per entry
 *     >>conv            the causal conv1d: conv_fwd / conv_final / conv_bwd / conv_reduce /
 *                       conv_dinit / conv_step kernels and their host side;
 *                       >>conv-rows  conv_fwd_rows / conv_bwd_rows (unit L stride);
 *                       >>conv-cl    conv_fwd_cl / conv_bwd_cl (unit channel stride)
 *     >>norm-cuda       the gated RMS norm: norm_fwd / norm_bwd / norm_reduce kernels, host side
 *     >>ssd-cuda        Mamba-2's SSD scan: ssd_fwd / ssd_bwd (two walks) / ssd_dt / ssd_bc /
 *                       ssd_param kernels and their host side (its DESIGN there)
 *     >>ssd-chunk       the SSD forward in chunks, ssd_ck_fwd_kernel (2-byte problems by default)
 *     >>ssd-chunk-bwd   the SSD backward in chunks: ssd_ckb_loc / ssd_ckb_pass / ssd_ckb kernels
 *                       (the default backward where its shapes hold: ssd_ckb_mode 1)
 *     >>public          the extern "C" entry points
 *     >>bench           bench-only (SELSCAN__CUDA_TUNING): the selscan__*_cuda_tuned entries that
 *                       force the plans' choices (bench/bench_cuda.cu, the CUDA tests)
 *
 * KERNELS: which one runs (decided on the host in >>plans; DESIGN below says how each works)
 *     kernel               chosen when                                           section
 *     fwd_fast_kernel      unit L stride (any L strides with CHANNELS_LAST), variable  >>fwd-fast
 *                          B / C, N <= 16, no packed sequences
 *     fwd_short_kernel     the same problems with no checkpoint to write and under     >>fwd-short
 *                          half a wave of fwd_fast blocks (batch-1 prefill)
 *     fwd_kernel (+ carry) everything else; L split in chunks under half a wave        >>fwd-general
 *     bwd_fast_kernel      as fwd_fast_kernel                                          >>bwd-fast
 *     bwd_kernel (+ carry_rev, reduce_rows / reduce_bc) everything else                >>bwd-general
 *     step_lat_kernel      N = 16, aligned variable B / C, a block a row of 64        >>step
 *                          channels, at most 32 blocks an SM (decode's batches)
 *     step_loop_kernel     N = 16 aligned otherwise, >= two rows a thread of a wave    >>step
 *     step_vec_kernel      float4 state rows (unit n stride, N % 4 == 0, N <= 128)     >>step
 *     step_kernel          any other step                                              >>step
 *     conv_fwd_rows_kernel unit L stride x / y (backward: x / dy / dx), no packed      >>conv-rows
 *     conv_bwd_rows_kernel sequences, init_state or dfinal_state (the fused block's rows)
 *     conv_fwd_cl_kernel   unit channel stride, the same conditions, where the rows    >>conv-cl
 *     conv_bwd_cl_kernel   path does not apply (the Mamba-2 layer's channels-last xBC)
 *     conv_*_kernel        every other causal conv1d call (widths 2..4, any strides)   >>conv
 *     norm_*_kernel        every gated RMS norm call (any group size, any strides)    >>norm-cuda
 *     ssd_ck_fwd_kernel    2-byte SSD forwards without packed sequences, 32 < dstate   >>ssd-chunk
 *                          <= 128, given ext->workspace_alloc (its ring), the block's shared
 *                          memory within the device's opt-in limit (ssd_ck_mode)
 *     ssd_fwd_kernel       every other SSD forward (dstate <= 512, any strides)       >>ssd-cuda
 *     ssd_ckb_*_kernel     SSD backwards without packed sequences, 32 < dstate <= 128,  >>ssd-chunk-bwd
 *       (+ ssd_dt, ssd_bc,  every value finite, a <= 0 (else the walks, launched after, run),
 *       ssd_param)         the block's shared memory within the device's opt-in limit
 *                          (172 KiB at dstate 128, 139 KiB at 64: sm_90; sm_80 (163 KiB)
 *                          dstate <= 64 only); ssd_ckb_mode 0 (tests): the walks alone
 *     ssd_bwd_kernel (+ ssd_dt, ssd_bc, ssd_param) every other SSD backward              >>ssd-cuda
 *                          (on 64 KiB devices, sm_75, dstate <= 256 where headdim > 8)
 *
 * TUNING MACROS: defined before the implementation's include, they set the kernels' register
 * budgets, states a thread and which instantiations are compiled; >>tuning is where each is set,
 * with its default (measured on an H200: bench/DECISIONS.md) and what it does.
 *
 * CONTRACT (the CPU side's, plus):
 * - Every pointer in selscan_problem / selscan_grads / selscan_step_problem is DEVICE memory,
 *   except selscan_problem.cu_seqlens, which stays a HOST array (validated on the host exactly as
 *   on the CPU); its device copy (same n_seqs + 1 int64 values) goes in
 *   selscan_cuda_ext.cu_seqlens_device. Packed sequences without it: SELSCAN_ERR_NULL.
 * - selscan_step_problem.state_index is a device pointer, never read by the host: a row whose
 *   index is negative or >= n_cache is padding (y = 0, no state touched). Duplicate indices are
 *   the caller's responsibility (undefined which write wins).
 * - Launchers validate everything they can on the host (same rules and statuses as the CPU
 *   entries), never allocate (a workspace comes from the caller, or from the caller's
 *   ext->workspace_alloc), never synchronize, run on the caller's stream only (stream 0 only if
 *   the caller passes 0), and return SELSCAN_ERR_CUDA when a launch fails. The failing
 *   cudaError_t is taken with cudaGetLastError() (which clears it) and stored into
 *   *ext->cuda_error when the caller gives one. On a validation error nothing is launched, and
 *   problem.diag / step_problem.diag (when given) names the operand and the rule, also for the
 *   CUDA-only checks: "dstate" (N over 512), "dim" (a grid over 2^31 - 1 blocks), "workspace"
 *   (null, too small, overlaps an operand, size overflows), "checkpoint" (too small, overlaps),
 *   "cu_seqlens_device" (missing, overlaps an output).
 * - Infinities (the Mamba-1 scan): y and h_last take the CPU reference's class (+inf / -inf / NaN)
 *   element by element, and so does every gradient for an infinite dy; for an infinite u a gradient
 *   is non-finite exactly where the reference's is (the general backward recovers the state before
 *   a step as h - B dt u: inf - inf where the reference's term is an infinity). test_cuda's "inf"
 *   cases; pad_states and reset_mark say how the kernels keep it.
 * - Sizes: every byte count, offset and grid of a call is computed with overflow checks; what
 *   does not fit refuses the call (SELSCAN_ERR_SHAPE: a size past int64; SELSCAN_ERR_UNSUPPORTED:
 *   a grid past 2^31 - 1 blocks) before anything is launched, whatever strides make it cheap.
 * - Workspace: selscan_workspace_size_cuda() bytes of device memory at any address (the size
 *   includes 255 bytes of slack; the launchers align the pointer up to 256 inside). It depends on
 *   the shapes and on whether the backward gets a checkpoint, not on the device; 0: NULL is fine.
 *   A call is checked against what its plan on this device uses, which can be less (the
 *   short-prefill forward uses none); ext->workspace_alloc asks for exactly that.
 * - Checkpoint: the forward can save the state entering every SELSCAN_CUDA_CHECKPOINT_INTERVAL
 *   steps (f32, (rows = batch, dim, ceil(L / interval), N), selscan_checkpoint_size_cuda()) in
 *   ext->checkpoint_out, e.g. as an extra output of a framework op; the backward given the same
 *   checkpoint in ext->checkpoint_in skips recomputing it. Without one the backward recomputes it
 *   in its workspace. ext->checkpoint_bytes is the size of whichever is given.
 * - Deterministic: no floating-point atomics; every sum has a fixed order (per-block partial
 *   sums into the workspace, then a fixed-order reduction kernel). Repeated calls give bitwise
 *   identical results. A forward that writes a checkpoint and one that does not may pick
 *   different kernels (few channels, no checkpoint: the short-prefill kernel): their y and h_last
 *   agree to rounding, not bitwise. The backward's results do not depend on it.
 * - Limits: N up to 512; larger N: SELSCAN_ERR_UNSUPPORTED (the CPU entries have no limit).
 *   All indexing is 64-bit (the fast paths index steps in 32 bits and leave L >= 2^30 to the
 *   general kernels); dim, batch and L have no limit beyond a 2^31 - 1 block grid.
 * - exp() runs on the ex2.approx unit (relative error ~2^-22), softplus / sigmoid on the fast
 *   exp / log units: results match the CPU reference to ~1e-6 relative (f32), not bitwise.
 * - The conv (selscan_conv_forward_cuda / _backward_cuda / _step_cuda): the same rules (host
 *   validation with selscan.h's checks, statuses and diag, cu_seqlens on the host with its device
 *   copy in ext->cu_seqlens_device, state_index a device pointer with rows outside [0, n_cache)
 *   as padding, no allocation, the caller's stream). The forward and the update need no
 *   workspace; the backward needs selscan_conv_workspace_size_cuda() bytes when dweight or dbias
 *   is asked for (or ext->workspace_alloc). Deterministic (per-block partials, a fixed-order
 *   reduce). Widths 2 to 4; any strides, coalesced for both the (batch, dim, L) and the
 *   channels-last layouts; grids past 2^31 - 1 blocks: SELSCAN_ERR_UNSUPPORTED ("dim").
 *
 * DESIGN: the forward and the backward of the common layout (rows with unit L stride, variable
 * B/C, N <= 16, no packed sequences; any L strides with SELSCAN_CUDA_CHANNELS_LAST, their CL
 * instantiations) run fwd_fast_kernel / bwd_fast_kernel: 8 states a thread
 * (with N <= 8: 4 states, two threads a channel),
 * tiles prefetched in registers, sums over a channel's lanes by shuffles, the backward's sums over
 * channels by per-warp shared-memory transposes (see their sections); the backward walks 64-step
 * segments back from the forward's checkpoint (or one the fast forward writes first). The same
 * problems without a checkpoint to write and with channels for under half a wave of the fast
 * forward (batch-1 prefill) run fwd_short_kernel instead: a warp a channel, its steps across the
 * lanes (a shuffle scan of the lanes' state maps), one exponential an element. Everything
 * else, and the general backward: a block of
 * 128 threads takes CH channels of one (batch row, group); a thread keeps 4 states of one channel
 * in registers; dt, dt*u and the B/C tile are staged in shared memory per
 * time tile. When the channels give less than one wave of blocks, L is split into chunks (the
 * forward: chunk scans from 0, a carry kernel, rescan; the backward: chunk-local state-gradient
 * pass, a reverse carry kernel). The backward recomputes states from a 16-step checkpoint (made
 * from the forward's 64-step one) and walks each 16-step sub-tile back with its states in
 * registers (unrolled for full sub-tiles of variable B/C with 2 to 8 threads a channel, a rolled
 * loop with the states in local memory otherwise: sequence boundaries, fixed B/C, N <= 4, N > 32);
 * sums over channels and time go through per-block partials in the workspace and fixed-order
 * reduction kernels (deterministic). The general backward is compiled once for both 2-byte types
 * (h16: a runtime flag picks binary16 or bfloat16): compile time, see bench/NOTES.md CUDA-v21.
 * The decode step (float4 state rows: unit n stride, N % 4 == 0, N <= 128, 16-byte aligned rows):
 * step_vec_kernel, 8 or 4 states a lane in 4-state chunks interleaved across a channel's lanes
 * (whole sectors a warp instruction); N = 16 with aligned variable B / C, up to 32 blocks (a
 * row's 64 channels) an SM: step_lat_kernel (every load of a thread issued before the first use,
 * one memory round trip: a model runs the step after a GEMM, so latency is its cost); N = 16 with
 * aligned variable B / C otherwise, >= two rows a thread of a one-wave grid: step_loop_kernel
 * (the next row's state in flight while a row is computed); all launched with programmatic
 * dependent launch, and bitwise the forward's at L = 1 for N = 8 / 16. One
 * state a thread otherwise (step_kernel). Every step kernel reads D / delta_bias in T with
 * SELSCAN_STEP_D_T / _DELTA_BIAS_T and keeps a T state with SELSCAN_STEP_STATE_T (the same kernels: a
 * uniform branch at the loads and stores; the state's chunks then 8-byte aligned), and takes A = -expf(A_log) from A_log with SELSCAN_STEP_A_LOG (once a
 * thread, where A is loaded: a_of). L-chunk plans fill one wave on
 * the current device's multiprocessors (at most 160; workspace sizes assume 160).
 */
#ifndef SELSCAN_CUDA_CUH
#define SELSCAN_CUDA_CUH

#include "selscan.h"
#include <cuda_runtime_api.h>

/* The forward's checkpoint holds the state entering every this many steps. */
#define SELSCAN_CUDA_CHECKPOINT_INTERVAL 64

/* Optional extra arguments of the CUDA entries (NULL or zero-initialized: none). */
typedef struct selscan_cuda_ext {
    const int64_t *cu_seqlens_device; /* device copy of problem.cu_seqlens (packed sequences) */
    float *checkpoint_out;            /* forward: the checkpoint is written here when non-NULL */
    const float *checkpoint_in;       /* backward: the forward's checkpoint, read when non-NULL */
    size_t checkpoint_bytes;          /* of checkpoint_out / checkpoint_in: >= selscan_checkpoint_size_cuda() */
    cudaError_t *cuda_error;          /* out: the failing CUDA error when SELSCAN_ERR_CUDA is returned */
    /* Workspace on demand (forward, backward): when the entry's workspace is NULL and this is set,
       it is called once, after every check and before any launch, only when the call needs a
       workspace on this device, with the bytes it needs (at most selscan_workspace_size_cuda_ex's);
       the call runs in what it returns (any address; NULL: SELSCAN_ERR_WORKSPACE, nothing
       launched). The memory must stay valid until the call's kernels have run (a framework's
       stream-ordered allocator). One validation instead of two, and no buffer a kernel never reads. */
    void *(*workspace_alloc)(void *ctx, size_t bytes);
    void *workspace_ctx;              /* workspace_alloc's first argument */
} selscan_cuda_ext;

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of the checkpoint of a problem: rows * dim * ceil(L / 64) * N * 4 (SELSCAN_ERR_SHAPE when
   that overflows). */
SELSCAN_DEF selscan_status selscan_checkpoint_size_cuda(const selscan_problem *p, size_t *bytes);
/* Workspace bytes of the CUDA forward (g NULL) or backward: enough with or without a checkpoint
   (the same arguments as the CPU's selscan_workspace_size). The _ex form: exactly what a call
   with that ext needs (x may be NULL: no checkpoint). Any address; the size includes the
   alignment slack. */
SELSCAN_DEF selscan_status selscan_workspace_size_cuda(const selscan_problem *p, const selscan_grads *g, size_t *bytes);
SELSCAN_DEF selscan_status selscan_workspace_size_cuda_ex(const selscan_problem *p, const selscan_grads *g,
                                                          const selscan_cuda_ext *x, size_t *bytes);
SELSCAN_DEF selscan_status selscan_forward_cuda(const selscan_problem *p, void *workspace, size_t bytes,
                                                cudaStream_t stream);
SELSCAN_DEF selscan_status selscan_backward_cuda(const selscan_problem *p, const selscan_grads *g, void *workspace,
                                                 size_t bytes, cudaStream_t stream);
SELSCAN_DEF selscan_status selscan_step_cuda(const selscan_step_problem *s, cudaStream_t stream);
SELSCAN_DEF selscan_status selscan_forward_cuda_ex(const selscan_problem *p, const selscan_cuda_ext *x,
                                                   void *workspace, size_t bytes, cudaStream_t stream);
SELSCAN_DEF selscan_status selscan_backward_cuda_ex(const selscan_problem *p, const selscan_grads *g,
                                                    const selscan_cuda_ext *x, void *workspace, size_t bytes,
                                                    cudaStream_t stream);
/* The step uses only x->cuda_error of the ext (x may be NULL). */
SELSCAN_DEF selscan_status selscan_step_cuda_ex(const selscan_step_problem *s, const selscan_cuda_ext *x,
                                                cudaStream_t stream);

/* ---- causal conv1d (selscan.h >>conv-api) ----
   Every tensor pointer is device memory; cu_seqlens stays a host array (validated on the host)
   with its device copy in ext->cu_seqlens_device; the step's state_index is a device pointer
   (rows >= n_cache or negative: padding). ext may be NULL; the conv entries use its
   cu_seqlens_device, cuda_error and (backward) workspace_alloc / workspace_ctx. The forward and
   the step need no workspace. The backward's workspace (dweight / dbias per-block partial sums,
   reduced in a fixed order: deterministic) is selscan_conv_workspace_size_cuda() bytes at any
   address (0 when neither dweight nor dbias is asked for: NULL is fine). */
SELSCAN_DEF selscan_status selscan_conv_workspace_size_cuda(const selscan_conv_problem *p, const selscan_conv_grads *g,
                                                            size_t *bytes);
SELSCAN_DEF selscan_status selscan_conv_forward_cuda(const selscan_conv_problem *p, const selscan_cuda_ext *x,
                                                     cudaStream_t stream);
SELSCAN_DEF selscan_status selscan_conv_backward_cuda(const selscan_conv_problem *p, const selscan_conv_grads *g,
                                                      const selscan_cuda_ext *x, void *workspace, size_t bytes,
                                                      cudaStream_t stream);
SELSCAN_DEF selscan_status selscan_conv_step_cuda(const selscan_conv_step_problem *s, const selscan_cuda_ext *x,
                                                  cudaStream_t stream);

/* ---- the gated RMS norm (selscan.h >>norm-api; >>norm-cuda says how) ----
   Every tensor pointer is device memory; ext may be NULL (the norm uses its cuda_error and, in the
   backward, workspace_alloc / workspace_ctx). The forward needs no workspace; the backward's
   (dweight's per-block partial sums, reduced in a fixed order: deterministic) is
   selscan_norm_workspace_size_cuda() bytes at any address (0 without dweight: NULL is fine). Any
   group_size, any strides; a grid past 2^31 - 1 blocks: SELSCAN_ERR_UNSUPPORTED ("dim"). Results
   differ from selscan_norm_forward_ref / _backward_ref by rounding only (the sums' order, the fast
   sigmoid): tests/test_cuda_norm.cu (bench/GPU_GATE.md: first run at 288b6fe); the torch package's Mamba-2 layer
   calls it on CUDA (bench/NOTES.md SSD-torch-v4). */
SELSCAN_DEF selscan_status selscan_norm_workspace_size_cuda(const selscan_norm_problem *p, const selscan_norm_grads *g,
                                                            size_t *bytes);
SELSCAN_DEF selscan_status selscan_norm_forward_cuda(const selscan_norm_problem *p, const selscan_cuda_ext *x,
                                                     cudaStream_t stream);
SELSCAN_DEF selscan_status selscan_norm_backward_cuda(const selscan_norm_problem *p, const selscan_norm_grads *g,
                                                      const selscan_cuda_ext *x, void *workspace, size_t bytes,
                                                      cudaStream_t stream);

/* ---- Mamba-2's SSD scan (selscan.h >>ssd-api; >>ssd-cuda says how) ----
   The CPU entries' contract and results (f32 inside, the backward's walks in double; differences
   from selscan_ssd_forward_ref by rounding only) with every tensor pointer in device memory;
   cu_seqlens stays a host array (validated on the host) with its device copy in
   ext->cu_seqlens_device. ext may be NULL; the SSD entries use its cu_seqlens_device, cuda_error
   and workspace_alloc / workspace_ctx. dstate up to 512 (SELSCAN_ERR_UNSUPPORTED
   "dstate" above; on a device with 64 KiB of shared memory a block, sm_75, the backward up to 256
   where headdim > 8: SELSCAN_RULE_SHARED_MEMORY; the size query refuses these as the call does, its
   size the same on every device). The forward takes no workspace argument: a 2-byte problem without
   packed sequences at 32 < dstate <= 128 runs in chunks (>>ssd-chunk) when ext->workspace_alloc is
   given, which it asks for selscan_ssd_workspace_size_cuda(p, NULL) bytes (the chains' two-slot state
   rings: 2 batch nheads ceil(headdim / 64) 64 64 ceil(dstate / 64) floats, and a flag a chain; a NULL
   from it fails the call, SELSCAN_ERR_WORKSPACE); every other forward walks and needs none. The backward needs
   selscan_ssd_workspace_size_cuda() bytes at any address (per head and channel slice partials of
   dB / dC: 2 batch seqlen nheads dstate floats when both are asked for and one slice holds a
   head's channels (headdim <= 64 at dstate <= 128; ceil(headdim / PB) times that, PB 64 / 32 / 16
   at dstate <= 128 / 256 / 512), and for the decay's gradient 4 doubles a (batch row, step, head),
   2 more a further slice, and with initial_state rows nheads slices doubles; where the backward may
   run in chunks (>>ssd-chunk-bwd: no packed sequences, 32 < dstate <= 128, headdim <= 64 a slice)
   also the chunks' states and their gradients, 2 batch nheads ceil(headdim / 64) ceil(seqlen / 64)
   64 64 ceil(dstate / 64) floats, their decays and dD's partials a chunk: about twice the walks'
   workspace at Mamba2-130m's layer shape, reserved on every device whether or not a chunk block
   fits its shared memory), and is bitwise
   deterministic (every sum in a fixed order). NaN in gives NaN out; the NaNs written are the
   arithmetic's (not the CPU backward's default quiet NaN); the decay's gradient is built from
   per-step scalars, so with a NaN input ddt, dA and ddt_bias may be NaN at other steps than the
   CPU's. */
SELSCAN_DEF selscan_status selscan_ssd_workspace_size_cuda(const selscan_ssd_problem *p, const selscan_ssd_grads *g,
                                                           size_t *bytes);
SELSCAN_DEF selscan_status selscan_ssd_forward_cuda(const selscan_ssd_problem *p, const selscan_cuda_ext *x,
                                                    cudaStream_t stream);
SELSCAN_DEF selscan_status selscan_ssd_backward_cuda(const selscan_ssd_problem *p, const selscan_ssd_grads *g,
                                                     const selscan_cuda_ext *x, void *workspace, size_t bytes,
                                                     cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* SELSCAN_CUDA_CUH */

/* ============================================================================================= */
/* >>cuda-impl       implementation (SELSCAN_CUDA_IMPLEMENTATION)                                */
/* ============================================================================================= */
#ifdef SELSCAN_CUDA_IMPLEMENTATION
#ifndef SELSCAN__CUDA_IMPLEMENTED
#define SELSCAN__CUDA_IMPLEMENTED

#ifndef SELSCAN__IMPLEMENTED
#error "selscan_cuda.cuh: define SELSCAN_IMPLEMENTATION too (and SELSCAN_STATIC if the CPU side lives in another TU)"
#endif
#ifndef __CUDACC__
#error "selscan_cuda.cuh: the implementation must be compiled by nvcc"
#endif

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>
#include <type_traits>

/* ---------------------------------------------------------------------------------------------- */
/* >>tuning          tuning macros: the only place they are set                                   */
/* ---------------------------------------------------------------------------------------------- */
/* Define one before the implementation's include to override its default. Defaults measured on
   an H200 (bench/DECISIONS.md has each value's measurement, bench/NOTES.md the runs). MINBLOCKS:
   the blocks an SM a kernel's register budget must allow (its __launch_bounds__). */
#ifndef SELSCAN_CUDA_FWD_MINBLOCKS
#define SELSCAN_CUDA_FWD_MINBLOCKS 6       /* fwd_kernel (the general forward) */
#endif
#ifndef SELSCAN_CUDA_BWD_MINBLOCKS
#define SELSCAN_CUDA_BWD_MINBLOCKS 3       /* bwd_kernel (the general backward) */
#endif
#ifndef SELSCAN_CUDA_FAST_FWD_MINBLOCKS
#define SELSCAN_CUDA_FAST_FWD_MINBLOCKS 3  /* fwd_fast_kernel with 8 states a thread */
#endif
#ifndef SELSCAN_CUDA_FAST_FWD4_MINBLOCKS
#define SELSCAN_CUDA_FAST_FWD4_MINBLOCKS 4 /* fwd_fast_kernel with 4 states a thread (N <= 8) */
#endif
#ifndef SELSCAN_CUDA_FAST_FWD_GROUP
#define SELSCAN_CUDA_FAST_FWD_GROUP 2      /* fwd_fast_kernel: steps whose exponentials it computes together */
#endif
#ifndef SELSCAN_CUDA_FAST_BWD_STATES
#define SELSCAN_CUDA_FAST_BWD_STATES 8     /* bwd_fast_kernel: states a thread, 8 (2 threads a channel) or 4 (4; slower on the H200) */
#endif
#ifndef SELSCAN_CUDA_FAST_BWD_MINBLOCKS
#define SELSCAN_CUDA_FAST_BWD_MINBLOCKS 3  /* bwd_fast_kernel with 8 states a thread */
#endif
#ifndef SELSCAN_CUDA_FAST_BWD4_MINBLOCKS
#define SELSCAN_CUDA_FAST_BWD4_MINBLOCKS 4 /* bwd_fast_kernel with 4 states a thread */
#endif
#ifndef SELSCAN_CUDA_SHORT_FWD_STATES
#define SELSCAN_CUDA_SHORT_FWD_STATES 2    /* fwd_short_kernel: states it scans together (K < 16; K = 16 scans one) */
#endif
#ifndef SELSCAN_CUDA_STEP_MINBLOCKS
#define SELSCAN_CUDA_STEP_MINBLOCKS 0      /* step_vec_kernel's FAST form (0: no bound) */
#endif
/* SELSCAN_CUDA_CHANNELS_LAST 1 also compiles the fast kernels for any L strides (e.g. a TensorFlow
   op's (batch, L, dim) tensors; 8 states a thread), which otherwise run the general kernels:
   channels-last forward and backward ~2x faster on the H200, compile time ~+50 % (bench/NOTES.md
   CUDA-v42). */
#ifndef SELSCAN_CUDA_CHANNELS_LAST
#define SELSCAN_CUDA_CHANNELS_LAST 0
#endif
/* Internal, for this repository's benchmark and tests until measured: SELSCAN__SSD_LDMATRIX 1 loads the chunked SSD's
   tensor-core operands that are read along their rows by ldmatrix, 0 by single loads; 2 also the chunked backward's
   pair products (by mma.sync where they were wmma's) (bench/NOTES.md SSD-CUDA-v38) */
#ifndef SELSCAN__SSD_LDMATRIX
#define SELSCAN__SSD_LDMATRIX 0
#endif
/* Flags (undefined by default): SELSCAN_CUDA_NO_PDL, no programmatic dependent launch between a
   call's kernels (sm_90+). Internal, for this repository's benchmark and tests only:
   SELSCAN__CUDA_TUNING compiles >>bench, the entries that force the plans' choices
   (bench/bench_cuda.cu, tests/test_cuda.cu, tests/test_cuda_conv.cu); SELSCAN__STEP_SWEEP, with
   it, the step's sweep shapes (bench/bench_cuda.cu). */

/* Every internal name of the CUDA implementation lives in this namespace (functions and kernels
   static: internal linkage), so a user's .cu file may define its own cdiv, mk, ld, ... around the
   include; the public entries below are the only global names it adds (and, with
   SELSCAN__CUDA_TUNING, >>bench's static selscan__*_cuda_tuned entries). */
namespace selscan_cuda_detail {

/* ---------------------------------------------------------------------------------------------- */
/* >>kparams         kernel parameters                                                            */
/* ---------------------------------------------------------------------------------------------- */

const int kThreads = 128;               /* every kernel's block */
const int kTL = 32;                     /* forward time tile */
const int kCK = SELSCAN_CUDA_CHECKPOINT_INTERVAL;
const int kSub = 16;                    /* backward sub-tile (states kept in registers) */
const int kBwdNPT = 4;                  /* backward: states per thread */

struct ct { /* a tensor on the device: data + element strides */
    void *p;
    int64_t s[4];
};

/* The kernels' parameters, a struct a family: scan_params (forward), bwd_params (backward),
   step1_params (step_kernel); the float4 step kernels take step_params (>>step), the conv's
   conv_params (>>conv). The order of the fields is part of the kernels' code: the compiler's
   loads of neighbouring 4-byte fields decide register allocation (scan_params with NT, CH right
   after fixC gave fwd_kernel 28-36 more bytes of spill stores). These orders keep every kernel's machine
   code as it was with the single struct they were split from (kparams: the step's, the backward's
   and the forward's fields together), the parameters' constant-bank offsets aside (ptxas -v and
   the SASS of the PTX before and after, sm_90). Check again after moving a field. */

/* The forward's kernels (fwd_kernel, fwd_fast_kernel, fwd_short_kernel): the problem, the
   kernels' layout, L chunks, the checkpoint */
struct scan_params {
    int64_t batch, dim, L, N, G, dpg, nseq;
    int64_t ncb;    /* blocks per (batch row, group) */
    int softplus, fixB, fixC;
    int cl;         /* the fast forward's channels-last (any L strides) instantiation (host only) */
    int NT, CH;     /* threads per channel, channels per block */
    int64_t lchunk, nlch; /* L chunking */
    const int64_t *cu;
    ct u, delta, A, B, C, D, z, delta_bias, h0, y, h_last;
    float *ck;
    int64_t nck, ckmask; /* checkpoint: entries per row, interval - 1 */
    int ckshift;         /* log2 of the interval */
    float *S, *P, *Hin;  /* L chunks: end states, decay products, carried-in states */
};

/* The backward's kernels (bwd_kernel, bwd_local_kernel, bwd_fast_kernel, bwd_fast_local_kernel):
   scan_params' fields (ncb after the 4-byte ones here) and the backward's own: the gradients,
   the per-block partial sums */
struct bwd_params {
    int64_t batch, dim, L, N, G, dpg, nseq;
    int softplus, fixB, fixC;
    int bf16;       /* bwd_kernel with T = h16: bfloat16 (else binary16) */
    int NT, CH;     /* threads per channel, channels per block */
    int cl;         /* the fast backward's channels-last instantiation (host only) */
    int64_t ncb;    /* blocks per (batch row, group) */
    int64_t lchunk, nlch; /* L chunking */
    const int64_t *cu;
    ct u, delta, A, B, C, D, z, delta_bias, h0, y, h_last;
    ct dy, dh_last, du, ddelta, dz, dh0;
    float *ck;
    int64_t nck, ckmask; /* checkpoint: entries per row, interval - 1 */
    int ckshift;         /* log2 of the interval */
    float *S, *P, *Hin;  /* Hin: the L chunks' entering state gradients */
    float *scr; /* fast backward: per-block scratch (tile states) */
    float *wdA, *wdD, *wddelta_bias, *wdBf, *wdCf, *wdB, *wdC;
};
/* The fields the two share: the backward's forward passes run on scan_of(its parameters) */
#define SELSCAN__SCAN_FIELDS(X)                                                                           \
    X(batch) X(dim) X(L) X(N) X(G) X(dpg) X(nseq) X(softplus) X(fixB) X(fixC) X(cl) X(NT) X(CH) X(ncb) X(lchunk) \
    X(nlch) X(cu) X(u) X(delta) X(A) X(B) X(C) X(D) X(z) X(delta_bias) X(h0) X(y) X(h_last) X(ck) X(nck)         \
    X(ckmask) X(ckshift) X(S) X(P) X(Hin)
static scan_params scan_of(const bwd_params &b) {
    scan_params f;
    memset(&f, 0, sizeof f);
#define SELSCAN__COPY(m) f.m = b.m;
    SELSCAN__SCAN_FIELDS(SELSCAN__COPY)
#undef SELSCAN__COPY
    return f;
}
#undef SELSCAN__SCAN_FIELDS

/* step_kernel's (one state a thread; the float4 step kernels take step_params, >>step) */
struct step1_params {
    int64_t dim, N, dpg, ncache;
    int softplus, fixB, fixC;
    int DT, delta_biasT;  /* D, delta_bias are T (SELSCAN_STEP_D_T, _DELTA_BIAS_T), else f32 */
    int stT;        /* the state is T (SELSCAN_STEP_STATE_T), else f32 */
    int alog;       /* A holds A_log (SELSCAN_STEP_A_LOG): A = -expf(A_log) */
    const int32_t *idx;
    ct state, u, delta, A, B, C, D, z, delta_bias, y;
    int NT;         /* threads per channel */
};

static ct mk(const selscan__ten &t) {
    ct r;
    r.p = t.data;
    for (int i = 0; i < 4; i++) r.s[i] = t.s[i];
    return r;
}
/* Row callbacks of selscan.h's operand tables (>>operands) filling a kernel's parameters: P.ten =
   mk(c->ten) for each row (c: the validated struct, a pointer; P, the parameters, in scope).
   _GRAD: the gradients the backward kernels read or write per element (dims SEQ, ROWS); the
   parameters' (dims DN, BC, DIM: dA, dB, dC, dD, ddelta_bias) go through per-block partial sums
   in the workspace (bwd_params::wd*) and the reduction kernels instead. */
#define SELSCAN__CUDA_CT(c, field, ten, io, need, dims, dtype) P.ten = mk((c)->ten);
#define SELSCAN__CUDA_CT_GRAD(c, field, ten, io, need, dims, dtype) SELSCAN__CUDA_CT_GRAD_##dims(c, ten)
#define SELSCAN__CUDA_CT_GRAD_SEQ(c, ten) P.ten = mk((c)->ten);
#define SELSCAN__CUDA_CT_GRAD_ROWS(c, ten) P.ten = mk((c)->ten);
#define SELSCAN__CUDA_CT_GRAD_DN(c, ten)
#define SELSCAN__CUDA_CT_GRAD_BC(c, ten)
#define SELSCAN__CUDA_CT_GRAD_DIM(c, ten)

/* ---------------------------------------------------------------------------------------------- */
/* >>device-helpers  device helpers                                                               */
/* ---------------------------------------------------------------------------------------------- */

template <typename T> static __device__ __forceinline__ float ld(const void *p, int64_t i);
template <> __device__ __forceinline__ float ld<float>(const void *p, int64_t i) { return static_cast<const float *>(p)[i]; }
template <> __device__ __forceinline__ float ld<__half>(const void *p, int64_t i) { return __half2float(static_cast<const __half *>(p)[i]); }
template <> __device__ __forceinline__ float ld<__nv_bfloat16>(const void *p, int64_t i) { return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]); }
template <typename T> static __device__ __forceinline__ void st(void *p, int64_t i, float v);
template <> __device__ __forceinline__ void st<float>(void *p, int64_t i, float v) { static_cast<float *>(p)[i] = v; }
template <> __device__ __forceinline__ void st<__half>(void *p, int64_t i, float v) { static_cast<__half *>(p)[i] = __float2half_rn(v); }
template <> __device__ __forceinline__ void st<__nv_bfloat16>(void *p, int64_t i, float v) { static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v); }

/* The general backward (bwd_kernel, the largest kernel) is built for two element types only,
   float and h16: a 2-byte float that is binary16 or bfloat16 by the flag bf (bwd_params::bf16, the
   same for the whole grid). One instantiation for both halves costs a select an element loaded
   and saves a sixth of the header's compile time (bench/NOTES.md CUDA-v21); the forward kept its three
   (measured: up to 12 % slower with h16). */
struct h16 {
    unsigned short bits;
};
template <typename T> static __device__ __forceinline__ float ld(const void *p, int64_t i, bool) { return ld<T>(p, i); }
template <> __device__ __forceinline__ float ld<h16>(const void *p, int64_t i, bool bf) {
    const unsigned short x = static_cast<const unsigned short *>(p)[i];
    return bf ? __uint_as_float(static_cast<uint32_t>(x) << 16) : __half2float(__ushort_as_half(x));
}
template <typename T> static __device__ __forceinline__ void st(void *p, int64_t i, float v, bool) { st<T>(p, i, v); }
template <> __device__ __forceinline__ void st<h16>(void *p, int64_t i, float v, bool bf) {
    static_cast<unsigned short *>(p)[i] = bf ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
}

static __device__ __forceinline__ float ldf(const ct &t, int64_t i) { return static_cast<const float *>(t.p)[i]; }
/* a value of T as float (no implicit conversion: PyTorch builds define __CUDA_NO_HALF_CONVERSIONS__) */
static __device__ __forceinline__ float to_float(float v) { return v; }
static __device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
static __device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
/* A decode step's parameter (D, delta_bias; the conv step's weight, bias): T where pT
   (SELSCAN_STEP_D_T, _DELTA_BIAS_T / SELSCAN_CONV_PARAMS_T; uniform over the grid), f32 otherwise. Loaded
   once a thread: the branch costs nothing measurable. */
template <typename T> static __device__ __forceinline__ float ldp(const void *p, int64_t i, int pT) {
    if constexpr (sizeof(T) == 4) {
        return ld<float>(p, i);
    } else { /* one address for both widths (fewer live registers in the step kernels than two loads' addresses) */
        const void *a = static_cast<const char *>(p) + (i << (pT ? 1 : 2));
        return pT ? ld<T>(a, 0) : ld<float>(a, 0);
    }
}
/* ldp for step_lat_kernel, whose loads are one basic block: both widths by two unpredicated 2-byte
   loads from one address (an f32's two halves, or the T element twice), the width selected after.
   There ldp's two predicated loads into one register made the compiler wait for the first before
   issuing the second, a memory round trip before the thread's later loads (this form: 0.12-0.47 us
   a step faster, bench/NOTES.md CONV-CUDA-v7). In the conv step and the other step kernels it
   measured slower (up to 0.57 us), so they keep ldp. */
template <typename T> static __device__ __forceinline__ float ldp_unpred(const void *p, int64_t i, int pT) {
    if constexpr (sizeof(T) == 4) {
        return ld<float>(p, i);
    } else {
        const unsigned short *a = reinterpret_cast<const unsigned short *>(static_cast<const char *>(p) + (i << (pT ? 1 : 2)));
        const uint32_t lo = a[0], hi = a[pT ? 0 : 1];
        const float t = std::is_same<T, __nv_bfloat16>::value ? __uint_as_float(lo << 16) : __half2float(__ushort_as_half(static_cast<unsigned short>(lo)));
        return pT ? t : __uint_as_float(lo | (hi << 16));
    }
}
/* ... and stored (step_kernel's state with SELSCAN_STEP_STATE_T: rounded to T, to nearest even) */
template <typename T> static __device__ __forceinline__ void stp(void *p, int64_t i, float v, int pT) {
    if (pT) st<T>(p, i, v);
    else st<float>(p, i, v);
}
static __device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
/* Programmatic dependent launch (sm_90+): the fast paths' kernels are launched so that the next
   one's blocks can be scheduled while the one before drains (launch_dependents, early in that
   kernel: only where the next is a small one, the chunk carries and the reductions; a full-wave
   successor scheduled early lands unevenly on the SMs: lm-long's backward without a checkpoint
   +6-8 %, bench/NOTES.md CUDA-v33); each waits here, before touching memory, until the kernel before
   it has completed and its writes are visible. A no-op when not launched so. */
static __device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
static __device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
/* The fast kernels' L strides: 1 (a compile-time constant) unless CL (the channels-last
   instantiations, which take any strides); of a (batch, dim, L) operand and of B / C */
template <bool CL> static __device__ __forceinline__ int lstride(const ct &X) { return CL ? static_cast<int>(X.s[2]) : 1; }
template <bool CL> static __device__ __forceinline__ int bcstride(const ct &X) { return CL ? static_cast<int>(X.s[3]) : 1; }
/* L2 prefetch of the element at p + off (sizeof(T) bytes), for the next tile while this one runs */
template <typename T> static __device__ __forceinline__ void pf(const void *p, int64_t off) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const T *>(p) + off));
}
/* sigmoid and softplus on the fast units; softplus(x) = max(x, 0) + log1p(exp(-|x|)), the log1p by
   its series where exp(-|x|) < 0.05 (relative error ~1e-7) and by lg2.approx above (~1e-5). */
/* Branch-free (selects only), so that tile loops unroll into straight-line code whose loads the
   compiler can issue together. ex2 / lg2 flush denormals: exp(-|x|) below 2^-126 is 0, and
   log1p's argument 1 + e lies in [1, 2]. */
const float kLog2e = 1.4426950408889634f;
const float kLn2 = 0.6931471805599453f;
static __device__ __forceinline__ float lg2(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
static __device__ __forceinline__ float sigm(float x) { return __fdividef(1.0f, 1.0f + ex2(-x * kLog2e)); }
static __device__ __forceinline__ float softplus(float x) {
    const float e = ex2(-fabsf(x) * kLog2e);
    const float ser = e * (1.0f - e * (0.5f - e * (0.33333333f - 0.25f * e)));
    const float l = e < 0.05f ? ser : lg2(1.0f + e) * kLn2;
    const float r = fmaxf(x, 0.0f) + l;
    return x > SELSCAN__SOFTPLUS_THRESHOLD ? x : r;
}
/* softplus(x) and its derivative sigmoid(x) from one exponential */
static __device__ __forceinline__ void softplus_dsig(float x, float *sp, float *dsig) {
    const float e = ex2(-fabsf(x) * kLog2e);
    const float ser = e * (1.0f - e * (0.5f - e * (0.33333333f - 0.25f * e)));
    const float l = e < 0.05f ? ser : lg2(1.0f + e) * kLn2;
    *sp = x > SELSCAN__SOFTPLUS_THRESHOLD ? x : fmaxf(x, 0.0f) + l;
    *dsig = x > SELSCAN__SOFTPLUS_THRESHOLD ? 1.0f : __fdividef(x >= 0.0f ? 1.0f : e, 1.0f + e);
}
/* dt of a (channel, step) from x = delta + delta_bias: softplus(x) when sp (uniform), x otherwise, 0 on
   padding (!v). softplus is evaluated whatever sp and v are, then selected: written as a
   conditional expression around it, it became a branch region an evaluation, which serialized a
   tile's 4-8 evaluations (their exponential and logarithm latencies added up; bench/NOTES.md CUDA-v38). */
static __device__ __forceinline__ float dt_of(float x, bool sp, bool v) {
    const float s = softplus(x);
    const float d = sp ? s : x;
    return v ? d : 0.0f;
}
/* y gated by silu(z) when hz (uniform): evaluated, then selected (as dt_of) */
static __device__ __forceinline__ float gate(float y, float zz, bool hz) {
    const float g = y * (zz * sigm(zz));
    return hz ? g : y;
}

/* The (channel c, step tt) pairs of a CH x TL tile that thread tid visits: c = c + r * dc,
   tt = tt + r * dt for r < R (pairs past the tile, when CH * TL < kThreads, are to be skipped).
   Walking L (tfast) keeps a warp's accesses contiguous when L is the unit stride, walking the
   channels when dim is. Offsets then advance by a constant per r (no 64-bit products per pair). */
struct pairwalk {
    int c, tt, dc, dt, R;
};
static __device__ __forceinline__ pairwalk mkwalk(bool tfast, int tid, int CH, int TL) {
    pairwalk w;
    if (tfast) { w.c = tid / TL; w.tt = tid % TL; w.dc = kThreads / TL; w.dt = 0; }
    else { w.c = tid % CH; w.tt = tid / CH; w.dc = 0; w.dt = kThreads / CH; }
    w.R = (CH * TL + kThreads - 1) / kThreads;
    return w;
}
static __device__ __forceinline__ int64_t wbase(const pairwalk &w, const ct &X, int64_t b, int64_t c0, int64_t t0) {
    return b * X.s[0] + (c0 + w.c) * X.s[1] + (t0 + w.tt) * X.s[2];
}
static __device__ __forceinline__ int64_t wstep(const pairwalk &w, const ct &X) { return w.dc * X.s[1] + w.dt * X.s[2]; }

/* Segment of position t: writes the state row starting at t (or -1) and ending at t (or -1). */
template <typename Prm> static __device__ void seg_flags(const Prm &P, int64_t b, int64_t t, int *start, int *end) {
    if (!P.cu) {
        *start = t == 0 ? static_cast<int>(b) : -1;
        *end = t == P.L - 1 ? static_cast<int>(b) : -1;
        return;
    }
    int64_t lo = 0, hi = P.nseq - 1; /* largest k with cu[k] <= t */
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (P.cu[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    *start = P.cu[lo] == t ? static_cast<int>(lo) : -1;
    *end = P.cu[lo + 1] - 1 == t ? static_cast<int>(lo) : -1;
}

/* ---------------------------------------------------------------------------------------------- */
/* >>fwd-general     forward, general kernels                                                     */
/* ---------------------------------------------------------------------------------------------- */
/* Block: CH channels of one (batch row, group) x one L chunk; thread (channel, j) holds states
   n = j*NPT .. j*NPT+NPT-1 in registers. Per time tile of kTL steps: stage dt, dt*u, u and the
   B/C tile in shared memory (coalesced whichever of L or dim is contiguous), scan, then write y.
   LOCAL (pass 1 of the L-parallel forward): scan the chunk from a zero state and write its end
   state S and decay product P (0 if a sequence starts inside) instead of y. */

static size_t fwd_smem(int NT, int NPT, int CH) {
    const int NPAD = NT * NPT, TP = kTL + 1;
    return (static_cast<size_t>(2 * kTL * (NPAD + 4) + 3 * CH * TP + kThreads * TP) + 2 * kTL + 2) * 4;
}

template <typename T, int NPT, bool LOCAL, bool PADS>
static __global__ void __launch_bounds__(kThreads, SELSCAN_CUDA_FWD_MINBLOCKS) fwd_kernel(const scan_params P) {
    extern __shared__ float4 smem4[];
    const int TP = kTL + 1, NT = P.NT, CH = P.CH, NPAD = NT * NPT, BS = NPAD + 4; /* B/C row stride: fewer bank conflicts */
    float *s_B = reinterpret_cast<float *>(smem4);
    float *s_C = s_B + kTL * BS;
    float *s_dt = s_C + kTL * BS;
    float *s_dtu = s_dt + CH * TP;
    float *s_u = s_dtu + CH * TP;
    float *s_y = s_u + CH * TP;
    int *s_seg = reinterpret_cast<int *>(s_y + kThreads * TP);
    int *s_end = s_seg + kTL;
    int *s_spec = s_end + kTL;

    int64_t bid = blockIdx.x;
    const int64_t lc = bid % P.nlch; bid /= P.nlch;
    const int64_t cb = bid % P.ncb; bid /= P.ncb;
    const int64_t g = bid % P.G, b = bid / P.G;
    const int tid = threadIdx.x, chl = tid / NT, j = tid % NT;
    const int64_t c0 = g * P.dpg + cb * CH; /* first channel of the block */
    const int nchb = static_cast<int>(min(static_cast<int64_t>(CH), P.dpg - cb * CH));
    const bool active = chl < nchb;
    const int64_t d = c0 + (active ? chl : 0);
    const int64_t t0 = lc * P.lchunk, t1 = min(P.L, t0 + P.lchunk);
    const int64_t bd = b * P.dim + d;

    float A2[NPT], h[NPT], pr[NPT], Bf[NPT], Cf[NPT];
    bool live[NPT]; /* PADS: the thread's states n < N (pad_states) */
#pragma unroll
    for (int k = 0; k < NPT; k++) {
        const int64_t n = j * NPT + k;
        const bool nv = active && n < P.N;
        live[k] = n < P.N;
        A2[k] = nv ? ldf(P.A, d * P.A.s[0] + n * P.A.s[1]) * kLog2e : 0.0f;
        Bf[k] = nv && P.fixB ? ldf(P.B, d * P.B.s[0] + n * P.B.s[1]) : 0.0f;
        Cf[k] = nv && P.fixC ? ldf(P.C, d * P.C.s[0] + n * P.C.s[1]) : 0.0f;
        h[k] = nv && !LOCAL && P.nlch > 1 ? P.Hin[(bd * P.nlch + lc) * P.N + n] : 0.0f;
        pr[k] = 1.0f;
    }
    const bool tfast_u = P.u.s[2] == 1 || P.u.s[1] != 1;
    const bool tfast_y = P.y.s[2] == 1 || P.y.s[1] != 1;
    const bool doy = P.y.p != NULL, sp = P.softplus != 0;
    const pairwalk wl = mkwalk(tfast_u, tid, CH, kTL), wy = mkwalk(tfast_y, tid, CH, kTL);
    const int64_t sdl = wstep(wl, P.delta), su = wstep(wl, P.u), sy = wstep(wy, P.y), sz = wstep(wy, P.z);
    const bool tfast_B = P.B.s[3] == 1 || P.B.s[2] != 1;
    const bool tfast_C = P.C.s[3] == 1 || P.C.s[2] != 1;

    for (int64_t tb = t0; tb < t1; tb += kTL) {
        const int tn = static_cast<int>(min(static_cast<int64_t>(kTL), t1 - tb));
        __syncthreads();
        {
            int64_t od = wbase(wl, P.delta, b, c0, tb), ou = wbase(wl, P.u, b, c0, tb);
#pragma unroll 4
        for (int r = 0; r < wl.R; r++, od += sdl, ou += su) { /* straight-line: predicated loads */
            const int c = wl.c + r * wl.dc, tt = wl.tt + r * wl.dt;
            const bool in = c < CH && tt < kTL, v = c < nchb && tt < tn;
            float x = v ? ld<T>(P.delta.p, od) : 0.0f;
            const float uu = v ? ld<T>(P.u.p, ou) : 0.0f;
            x += v && P.delta_bias.p ? ldf(P.delta_bias, (c0 + c) * P.delta_bias.s[0]) : 0.0f;
            const float dt = v ? (sp ? softplus(x) : x) : 0.0f; /* dt_of measured slower here (v38) */
            if (in) {
                s_dt[c * TP + tt] = dt;
                s_dtu[c * TP + tt] = dt * uu;
                s_u[c * TP + tt] = uu;
            }
        }
        }
        if (!P.fixB)
#pragma unroll 4
            for (int i = tid; i < kTL * NPAD; i += kThreads) {
                int n, tt;
                if (tfast_B) { n = i / kTL; tt = i % kTL; }
                else { n = i % NPAD; tt = i / NPAD; }
                s_B[tt * BS + n] = n < P.N && tt < tn ? ld<T>(P.B.p, b * P.B.s[0] + g * P.B.s[1] + n * P.B.s[2] + (tb + tt) * P.B.s[3]) : 0.0f;
            }
        if (!LOCAL && doy && !P.fixC)
#pragma unroll 4
            for (int i = tid; i < kTL * NPAD; i += kThreads) {
                int n, tt;
                if (tfast_C) { n = i / kTL; tt = i % kTL; }
                else { n = i % NPAD; tt = i / NPAD; }
                s_C[tt * BS + n] = n < P.N && tt < tn ? ld<T>(P.C.p, b * P.C.s[0] + g * P.C.s[1] + n * P.C.s[2] + (tb + tt) * P.C.s[3]) : 0.0f;
            }
        if (tid < kTL) { /* warp 0: flags of each step, and whether a 16-step group has any */
            int s0 = -1, e0 = -1;
            if (tid < tn) seg_flags(P, b, tb + tid, &s0, &e0);
            s_seg[tid] = s0;
            s_end[tid] = e0;
            const unsigned m = __ballot_sync(0xffffffffu, s0 >= 0 || e0 >= 0);
            if (tid == 0) { s_spec[0] = (m & 0xffffu) != 0; s_spec[1] = (m >> 16) != 0; }
        }
        __syncthreads();
        if (tb + kTL < t1) { /* next tile into L2 */
            const int64_t tp = tb + kTL;
            const int tnp = static_cast<int>(min(static_cast<int64_t>(kTL), t1 - tp));
            int64_t od = wbase(wl, P.delta, b, c0, tp), ou = wbase(wl, P.u, b, c0, tp);
            int64_t oz = doy && P.z.p ? wbase(wy, P.z, b, c0, tp) : 0;
            for (int r = 0; r < wl.R; r++, od += sdl, ou += su) {
                const int c = wl.c + r * wl.dc, tt = wl.tt + r * wl.dt;
                if (c < nchb && tt < tnp) { pf<T>(P.delta.p, od); pf<T>(P.u.p, ou); }
            }
            if (!LOCAL && doy && P.z.p)
                for (int r = 0; r < wy.R; r++, oz += sz) {
                    const int c = wy.c + r * wy.dc, tt = wy.tt + r * wy.dt;
                    if (c < nchb && tt < tnp) pf<T>(P.z.p, oz);
                }
            for (int i = tid; i < kTL * NPAD; i += kThreads) {
                int n, tt;
                if (tfast_B) { n = i / kTL; tt = i % kTL; }
                else { n = i % NPAD; tt = i / NPAD; }
                if (!P.fixB && n < P.N && tt < tnp) pf<T>(P.B.p, b * P.B.s[0] + g * P.B.s[1] + n * P.B.s[2] + (tp + tt) * P.B.s[3]);
                if (tfast_C) { n = i / kTL; tt = i % kTL; }
                else { n = i % NPAD; tt = i / NPAD; }
                if (!LOCAL && doy && !P.fixC && n < P.N && tt < tnp) pf<T>(P.C.p, b * P.C.s[0] + g * P.C.s[1] + n * P.C.s[2] + (tp + tt) * P.C.s[3]);
            }
        }
        if (active) {
            /* one step: h <- exp(dt A) h + B dt u, y partial into s_y */
            auto core = [&](int tt, auto varbc) {
                constexpr bool VAR = decltype(varbc)::value; /* variable B and C, y wanted */
                const float dt = s_dt[chl * TP + tt], dtu = s_dtu[chl * TP + tt];
                float Bv[NPT], Cv[NPT];
                if (!VAR && P.fixB) {
#pragma unroll
                    for (int k = 0; k < NPT; k++) Bv[k] = Bf[k];
                } else {
                    const float4 *bp = reinterpret_cast<const float4 *>(s_B + tt * BS + j * NPT);
#pragma unroll
                    for (int q = 0; q < NPT / 4; q++) {
                        const float4 v = bp[q];
                        Bv[4 * q] = v.x; Bv[4 * q + 1] = v.y; Bv[4 * q + 2] = v.z; Bv[4 * q + 3] = v.w;
                    }
                }
                if (!LOCAL && (VAR || doy)) {
                    if (!VAR && P.fixC) {
#pragma unroll
                        for (int k = 0; k < NPT; k++) Cv[k] = Cf[k];
                    } else {
                        const float4 *cp = reinterpret_cast<const float4 *>(s_C + tt * BS + j * NPT);
#pragma unroll
                        for (int q = 0; q < NPT / 4; q++) {
                            const float4 v = cp[q];
                            Cv[4 * q] = v.x; Cv[4 * q + 1] = v.y; Cv[4 * q + 2] = v.z; Cv[4 * q + 3] = v.w;
                        }
                    }
                }
                float yp = 0.0f;
#pragma unroll
                for (int k = 0; k < NPT; k++) {
                    const float a = ex2(dt * A2[k]);
                    h[k] = fmaf(a, h[k], Bv[k] * dtu);
                    if constexpr (PADS) h[k] = live[k] ? h[k] : 0.0f;
                    if (LOCAL) pr[k] *= a;
                    else if (VAR || doy) yp = fmaf(Cv[k], h[k], yp);
                }
                if (!LOCAL && (VAR || doy)) s_y[tid * TP + tt] = yp;
            };
            const bool varbc = !P.fixB && (LOCAL || (!P.fixC && doy));
            for (int g16 = 0; g16 < tn; g16 += 16) {
                const int64_t t16 = tb + g16;
                /* checkpoint intervals are multiples of 16 and chunks start at multiples of 16; the state
                   entering step t16, after a sequence start's reset there (h0 or 0: the per-step loop
                   below applies it, so a group with special steps writes it there) */
                const bool ck_here = !LOCAL && P.ck && (t16 & P.ckmask) == 0;
                auto write_ck = [&]() {
#pragma unroll
                    for (int k = 0; k < NPT; k++) {
                        const int64_t n = j * NPT + k;
                        if (n < P.N) P.ck[(bd * P.nck + (t16 >> P.ckshift)) * P.N + n] = h[k];
                    }
                };
                if (g16 + 16 <= tn && !s_spec[g16 >> 4]) {
                    if (ck_here) write_ck();
                    if (varbc) {
#pragma unroll
                        for (int u = 0; u < 16; u++) core(g16 + u, std::true_type());
                    } else {
#pragma unroll
                        for (int u = 0; u < 16; u++) core(g16 + u, std::false_type());
                    }
                    continue;
                }
                for (int tt = g16; tt < tn && tt < g16 + 16; tt++) {
                    const int sg = s_seg[tt];
                    if (sg >= 0) {
#pragma unroll
                        for (int k = 0; k < NPT; k++) {
                            const int64_t n = j * NPT + k;
                            h[k] = P.h0.p && n < P.N ? ldf(P.h0, sg * P.h0.s[0] + d * P.h0.s[1] + n * P.h0.s[2]) : 0.0f;
                            pr[k] = -0.0f; /* a sequence starts: carry_kernel's reset mark (-0 times a decay stays -0) */
                        }
                    }
                    if (ck_here && tt == g16) write_ck();
                    core(tt, std::false_type());
                    const int en = s_end[tt];
                    if (!LOCAL && en >= 0 && P.h_last.p) {
#pragma unroll
                        for (int k = 0; k < NPT; k++) {
                            const int64_t n = j * NPT + k;
                            if (n < P.N) static_cast<float *>(P.h_last.p)[en * P.h_last.s[0] + d * P.h_last.s[1] + n * P.h_last.s[2]] = h[k];
                        }
                    }
                }
            }
        }
        if (!LOCAL && P.y.p) {
            __syncthreads();
            int64_t oy = wbase(wy, P.y, b, c0, tb), oz = P.z.p ? wbase(wy, P.z, b, c0, tb) : 0;
            const bool hz = P.z.p != NULL, hD = P.D.p != NULL;
#pragma unroll 4
            for (int r = 0; r < wy.R; r++, oy += sy, oz += sz) { /* straight-line: predicated */
                const int c = wy.c + r * wy.dc, tt = wy.tt + r * wy.dt;
                const bool v = c < nchb && tt < tn;
                const int cs = v ? c : 0, ts2 = v ? tt : 0;
                const float zz = v && hz ? ld<T>(P.z.p, oz) : 0.0f;
                const float Dd = v && hD ? ldf(P.D, (c0 + c) * P.D.s[0]) : 0.0f;
                float y = 0.0f;
#pragma unroll
                for (int jj = 0; jj < 4; jj++) y += jj < NT ? s_y[(cs * NT + jj) * TP + ts2] : 0.0f;
                for (int jj = 4; jj < NT; jj++) y += s_y[(cs * NT + jj) * TP + ts2];
                y = fmaf(Dd, s_u[cs * TP + ts2], y);
                if (hz) y *= zz * sigm(zz);
                if (v) st<T>(P.y.p, oy, y);
            }
        }
    }
    if (LOCAL && active) {
#pragma unroll
        for (int k = 0; k < NPT; k++) {
            const int64_t n = j * NPT + k;
            if (n < P.N) {
                P.S[(bd * P.nlch + lc) * P.N + n] = h[k];
                P.P[(bd * P.nlch + lc) * P.N + n] = pr[k];
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* >>fwd-fast        forward, fast path (unit L stride, N <= 16)                                  */
/* ---------------------------------------------------------------------------------------------- */
/* For the common layout (u, delta, z, y rows with unit L stride; B, C variable with unit L
   stride; N <= 16; no packed sequences). A thread keeps S states of one channel (TPC = NP / S
   threads a channel, NP = N padded to 8 or 16); a block of 128 threads takes 128 / TPC channels
   of one (batch row, group) and walks L in tiles of kFL steps, double-buffered in shared memory:
   while tile k is scanned, the loads of tile k + 1 are in flight (registers), and after the scan
   they are staged (B and C interleaved per state; dt and dt*u per (step, channel)): one barrier a
   tile. Lane j of a channel owns steps [j*OWN, (j+1)*OWN) of each tile (OWN = kFL / TPC): it
   loads them (vector loads where aligned), computes dt and dt*u, and writes y. The scan runs in
   groups of Q steps: first every exponential and B dt u of the group (independent: the
   exponential unit stays busy even with one warp a scheduler), then the Q steps of the state
   recurrence. The partial y of each step (this lane's states) stays in a register until the
   tile's end, where the channel's lanes reduce-scatter them (recursive halving, fixed order).
   Padding steps (past L, idle channels) have dt = dt*u = 0: the state does not change. */

const int kFL = 16; /* fast forward's time tile; divides the checkpoint interval */

/* K elements of T as raw 32-bit words (bf16 / f16: two a word) */
template <typename T, int K> struct rawv {
    uint32_t w[(K * static_cast<int>(sizeof(T)) + 3) / 4];
};
/* one element's raw bits (a 2-byte type's in the low half) as a float */
template <typename T> static __device__ __forceinline__ float bits_float(uint32_t bits) {
    if constexpr (sizeof(T) == 4) return __uint_as_float(bits);
    else if constexpr (std::is_same<T, __half>::value) return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
    else return __uint_as_float(bits << 16);
}
/* p[i]'s raw bits: loaded now, converted where used (a conversion next to the load would wait
   for it there) */
template <typename T> static __device__ __forceinline__ uint32_t ld_bits(const T *p, int64_t i) {
    if constexpr (sizeof(T) == 4) return reinterpret_cast<const uint32_t *>(p)[i];
    else return reinterpret_cast<const unsigned short *>(p)[i];
}
template <typename T, int K> static __device__ __forceinline__ float raw_get(const rawv<T, K> &r, int k) {
    if constexpr (sizeof(T) == 4) return __uint_as_float(r.w[k]);
    else return bits_float<T>((k & 1) ? r.w[k >> 1] >> 16 : r.w[k >> 1] & 0xffffu);
}
template <typename T> static __device__ __forceinline__ uint32_t raw_bits(float v) {
    if constexpr (std::is_same<T, float>::value) return __float_as_uint(v);
    else if constexpr (std::is_same<T, __half>::value) return __half_as_ushort(__float2half_rn(v));
    else return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
/* K elements at p, n of them valid (the rest read as 0). All valid: 16-byte loads where p allows,
   else 8-byte, else 4-byte words; 2-byte types at an odd element offset read the aligned words around them
   and shift (ext: the elements just before p and just after p + K exist), else element loads. */
template <typename T, int K> static __device__ __forceinline__ void load_raw(rawv<T, K> &r, const T *p, int n, bool ext) {
    constexpr int BYTES = K * static_cast<int>(sizeof(T)), NW = (BYTES + 3) / 4;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (n >= K && BYTES % 16 == 0 && (a & 15) == 0) {
#pragma unroll
        for (int i = 0; i < BYTES / 16; i++) {
            const uint4 v = reinterpret_cast<const uint4 *>(p)[i];
            r.w[4 * i] = v.x; r.w[4 * i + 1] = v.y; r.w[4 * i + 2] = v.z; r.w[4 * i + 3] = v.w;
        }
    } else if (n >= K && BYTES % 8 == 0 && (a & 7) == 0) {
#pragma unroll
        for (int i = 0; i < BYTES / 8; i++) {
            const uint2 v = reinterpret_cast<const uint2 *>(p)[i];
            r.w[2 * i] = v.x; r.w[2 * i + 1] = v.y;
        }
    } else if (n >= K && BYTES % 4 == 0 && (a & 3) == 0) {
#pragma unroll
        for (int i = 0; i < NW; i++) r.w[i] = reinterpret_cast<const uint32_t *>(p)[i];
    } else if (sizeof(T) == 2 && K % 2 == 0 && n >= K && ext) {
        const uint32_t *q = reinterpret_cast<const uint32_t *>(a - 2);
        uint32_t lo = q[0];
#pragma unroll
        for (int i = 0; i < NW; i++) {
            const uint32_t hi = q[i + 1];
            r.w[i] = __funnelshift_r(lo, hi, 16);
            lo = hi;
        }
    } else {
#pragma unroll
        for (int i = 0; i < NW; i++) r.w[i] = 0;
#pragma unroll
        for (int k = 0; k < K; k++) {
            if (k < n) {
                if constexpr (sizeof(T) == 4) r.w[k] = reinterpret_cast<const uint32_t *>(p)[k];
                else r.w[k >> 1] |= static_cast<uint32_t>(reinterpret_cast<const unsigned short *>(p)[k]) << (16 * (k & 1));
            }
        }
    }
}
/* Steps t0 .. t0 + K - 1 of a (batch, dim, L) row whose steps are ls elements apart: load_raw when
   ls is 1 (the unit-stride kernels pass the constant), else element loads packed two a word (the
   channels-last kernels use rawvw below instead). */
template <typename T, int K> static __device__ __forceinline__ void load_seq(rawv<T, K> &r, const T *row, int t0, int n, bool ext, int ls) {
    if (ls == 1) {
        load_raw<T, K>(r, row + t0, n, ext);
        return;
    }
    const T *p = row + static_cast<int64_t>(t0) * ls;
    constexpr int NW = (K * static_cast<int>(sizeof(T)) + 3) / 4;
#pragma unroll
    for (int i = 0; i < NW; i++) r.w[i] = 0;
#pragma unroll
    for (int k = 0; k < K; k++) {
        if (k < n) {
            if constexpr (sizeof(T) == 4) r.w[k] = reinterpret_cast<const uint32_t *>(p)[k * ls];
            else r.w[k >> 1] |= static_cast<uint32_t>(reinterpret_cast<const unsigned short *>(p)[k * ls]) << (16 * (k & 1));
        }
    }
}
/* K floats to p as T (n of them): 16-, 8- or 4-byte stores when aligned and all K valid */
template <typename T, int K> static __device__ __forceinline__ void store_row(T *p, const float (&v)[K], int n) {
    constexpr int BYTES = K * static_cast<int>(sizeof(T)), NW = (BYTES + 3) / 4;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (n >= K && BYTES % 4 == 0 && (a & 3) == 0) {
        uint32_t w[NW];
#pragma unroll
        for (int k = 0; k < K; k++) {
            if constexpr (sizeof(T) == 4) w[k] = raw_bits<T>(v[k]);
            else if (k & 1) w[k >> 1] |= raw_bits<T>(v[k]) << 16;
            else w[k >> 1] = raw_bits<T>(v[k]);
        }
        /* the vector stores in PTX: as uint4 / uint2 assignments nvcc split them into 4-byte stores in
           conv_fwd_cl_kernel (sm_90 SASS: STG.E only; a review's finding, CONV-CUDA-v8) */
        if (BYTES % 16 == 0 && (a & 15) == 0) {
#pragma unroll
            for (int i = 0; i < BYTES / 16; i++)
                asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(reinterpret_cast<uint4 *>(p) + i), "r"(w[4 * i]), "r"(w[4 * i + 1]),
                             "r"(w[4 * i + 2]), "r"(w[4 * i + 3])
                             : "memory");
        } else if (BYTES % 8 == 0 && (a & 7) == 0) {
#pragma unroll
            for (int i = 0; i < BYTES / 8; i++)
                asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(reinterpret_cast<uint2 *>(p) + i), "r"(w[2 * i]), "r"(w[2 * i + 1]) : "memory");
        } else {
#pragma unroll
            for (int i = 0; i < NW; i++) reinterpret_cast<uint32_t *>(p)[i] = w[i];
        }
    } else {
#pragma unroll
        for (int k = 0; k < K; k++)
            if (k < n) st<T>(static_cast<void *>(p), k, v[k]); /* a void * argument: no lookup in T's namespace */
    }
}
/* K elements one a word (a 2-byte type's bits in the low half): the channels-last kernels' raw
   registers, element loads (a warp's lanes read 16 consecutive channels of a step: whole 32-byte
   sectors). Packed two a word, the packing would wait for the loads where they are issued:
   long-scoreboard stalls of the whole tile (bench/NOTES.md CUDA-v42). */
template <typename T, int K> struct rawvw {
    uint32_t w[K];
};
template <typename T, int K> static __device__ __forceinline__ float raw_get(const rawvw<T, K> &r, int k) { return bits_float<T>(r.w[k]); }
/* element e of an NP x kFL (state, step) tile of B or C: the step fastest when the L stride is 1
   (tfast: a warp reads along L), else the state (channels-last: along the states) */
template <int NP> static __device__ __forceinline__ void tile_elem(int e, bool tfast, int *n, int *tt) {
    *n = tfast ? e / kFL : e % NP;
    *tt = tfast ? e % kFL : e / NP;
}
template <typename T, int K> static __device__ __forceinline__ void load_seq(rawvw<T, K> &r, const T *row, int t0, int n, bool, int ls) {
    const T *p = row + static_cast<int64_t>(t0) * ls;
#pragma unroll
    for (int k = 0; k < K; k++) r.w[k] = k < n ? ld_bits<T>(p, k * ls) : 0u;
}
/* the fast kernels' raw registers: packed unless CL */
template <typename T, int K, bool CL> using raw_t = typename std::conditional<CL, rawvw<T, K>, rawv<T, K>>::type;
/* store_row for steps ls elements apart (as load_seq) */
template <typename T, int K> static __device__ __forceinline__ void store_seq(T *row, int t0, const float (&v)[K], int n, int ls) {
    if (ls == 1) {
        store_row<T, K>(row + t0, v, n);
        return;
    }
    T *p = row + static_cast<int64_t>(t0) * ls;
#pragma unroll
    for (int k = 0; k < K; k++)
        if (k < n) st<T>(static_cast<void *>(p), k * ls, v[k]);
}

/* Sum v over the TPC lanes of a channel; lane j ends with the sums of elements
   [j * kFL / TPC, (j + 1) * kFL / TPC) in v[0 .. kFL / TPC). Fixed order: deterministic. */
template <int TPC> static __device__ __forceinline__ void reduce_scatter(float (&v)[kFL], int j) {
    int len = kFL;
#pragma unroll
    for (int m = TPC / 2; m >= 1; m /= 2) {
        len /= 2;
        const bool hi = (j & m) != 0;
#pragma unroll
        for (int i = 0; i < kFL / 2; i++) {
            if (i < len) {
                const float send = hi ? v[i] : v[len + i];
                const float keep = hi ? v[len + i] : v[i];
                v[i] = keep + __shfl_xor_sync(0xffffffffu, send, m);
            }
        }
    }
}

template <int S> constexpr int fast_fwd_minblocks() { return S == 4 ? SELSCAN_CUDA_FAST_FWD4_MINBLOCKS : SELSCAN_CUDA_FAST_FWD_MINBLOCKS; }
template <typename T, int S, int TPC, bool LOCAL, bool CL, bool PADS>
static __global__ void __launch_bounds__(kThreads, fast_fwd_minblocks<S>()) fwd_fast_kernel(const scan_params P) {
    if (LOCAL) pdl_launch_dependents(); /* only before a small kernel (the carry): see pdl_wait */
    pdl_wait();
    constexpr int NP = S * TPC, OWN = kFL / TPC, RS = 2 * NP + 4; /* B/C row: (B, C) per state, padded */
    /* f32 with 8 states, 2 threads a channel: one step a group (its 16-register wider tile loads
       spill otherwise; bench/NOTES.md CUDA-v20); the channels-last kernels too (one element a word:
       with two steps bf16 spilled and was not faster, v42) */
    constexpr int CH = kThreads / TPC, RB = (NP * kFL + kThreads - 1) / kThreads,
                  Q = (sizeof(T) == 4 || CL) && TPC == 2 && S == 8 ? 1 : SELSCAN_CUDA_FAST_FWD_GROUP;
    __shared__ __align__(16) float s_bc[2][kFL * RS];
    __shared__ __align__(16) float2 s_dt[2][kFL * CH]; /* (dt, dt*u) of (step, channel) */

    int64_t bid = blockIdx.x;
    const int64_t lc = bid % P.nlch; bid /= P.nlch;
    const int64_t cb = bid % P.ncb; bid /= P.ncb;
    const int64_t g = bid % P.G, b = bid / P.G;
    const int tid = threadIdx.x, j = tid % TPC, chl = tid / TPC;
    const int64_t cig = cb * CH + chl; /* channel within the group */
    const bool active = cig < P.dpg;
    const int64_t d = g * P.dpg + (active ? cig : 0), N = P.N, bd = b * P.dim + d;
    /* this block's steps; 32-bit step and B / C offsets (plan_fast_forward checks they fit) */
    const int t_beg = static_cast<int>(lc * P.lchunk), L = static_cast<int>(min(P.L, lc * P.lchunk + P.lchunk)), LL = static_cast<int>(P.L);

    const T *urow = static_cast<const T *>(P.u.p) + b * P.u.s[0] + d * P.u.s[1];
    const T *drow = static_cast<const T *>(P.delta.p) + b * P.delta.s[0] + d * P.delta.s[1];
    const T *zrow = P.z.p ? static_cast<const T *>(P.z.p) + b * P.z.s[0] + d * P.z.s[1] : NULL;
    T *yrow = P.y.p ? static_cast<T *>(P.y.p) + b * P.y.s[0] + d * P.y.s[1] : NULL;
    const T *Bg = static_cast<const T *>(P.B.p) + b * P.B.s[0] + g * P.B.s[1];
    const T *Cg = static_cast<const T *>(P.C.p) + b * P.C.s[0] + g * P.C.s[1];
    const int sBn = static_cast<int>(P.B.s[2]), sCn = static_cast<int>(P.C.s[2]), sBt = bcstride<CL>(P.B), sCt = bcstride<CL>(P.C);
    const int lu = lstride<CL>(P.u), ldl = lstride<CL>(P.delta);

    float A2[S], h[S];
    bool live[S]; /* PADS: the thread's states n < N (pad_states) */
#pragma unroll
    for (int k = 0; k < S; k++) {
        const int64_t n = j * S + k;
        const bool nv = active && n < N;
        live[k] = n < N;
        A2[k] = nv ? ldf(P.A, d * P.A.s[0] + n * P.A.s[1]) * kLog2e : 0.0f;
        if (!nv) h[k] = 0.0f;
        else if (lc == 0) h[k] = P.h0.p ? ldf(P.h0, b * P.h0.s[0] + d * P.h0.s[1] + n * P.h0.s[2]) : 0.0f;
        else h[k] = LOCAL ? 0.0f : P.Hin[(bd * P.nlch + lc) * N + n]; /* chunk scan from 0 / carried in */
    }
    float sumdt = 0.0f; /* LOCAL: the chunk's decay product is exp(A sum dt) */
    const float Dd = active && P.D.p ? ldf(P.D, d * P.D.s[0]) : 0.0f;
    const float delta_bias = active && P.delta_bias.p ? ldf(P.delta_bias, d * P.delta_bias.s[0]) : 0.0f;
    const bool sp = P.softplus != 0, hz = zrow != NULL, hy = P.y.p != NULL; /* no y: checkpoint only */

    /* B / C tile (NP x kFL) through registers as raw bits (converted when stored after the scan, so
       that the scan does not wait for the loads); element e = tid + r * kThreads is (state, step)
       with the step fastest when B's and C's L strides are 1, else the state (channels-last) */
    uint32_t rB[RB], rC[RB];
    const bool bc_tfast = !CL || (sBt == 1 && sCt == 1);
    auto load_bc_as = [&](int tb, auto tfast) {
        /* 2-byte types: the thread index read again (volatile): the row predicates derived from
           it were kept across the tile loop, spilled and reloaded at each tile's start
           (bench/NOTES.md CUDA-v40; in f32 the same read moves a spill into the 4-state kernel) */
        constexpr bool TF = decltype(tfast)::value;
        int t = tid;
        if (sizeof(T) == 2) asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
#pragma unroll
        for (int r = 0; r < RB; r++) {
            const int e = t + r * kThreads;
            int n, tt;
            tile_elem<NP>(e, TF, &n, &tt);
            const bool v = e < NP * kFL && n < static_cast<int>(N) && tb + tt < L;
            /* 0 bits: 0.0 in every type */
            rB[r] = v ? ld_bits<T>(Bg, TF ? n * sBn + tb + tt : n * sBn + (tb + tt) * sBt) : 0u;
            rC[r] = v ? ld_bits<T>(Cg, TF ? n * sCn + tb + tt : n * sCn + (tb + tt) * sCt) : 0u;
        }
    };
    auto load_bc = [&](int tb) {
        if (bc_tfast) load_bc_as(tb, std::true_type());
        else load_bc_as(tb, std::false_type());
    };
    auto store_bc_as = [&](int buf, auto tfast) {
        constexpr bool TF = decltype(tfast)::value;
#pragma unroll
        for (int r = 0; r < RB; r++) {
            const int e = tid + r * kThreads;
            int n, tt;
            tile_elem<NP>(e, TF, &n, &tt);
            if (e < NP * kFL)
                *reinterpret_cast<float2 *>(&s_bc[buf][tt * RS + 2 * n]) = make_float2(bits_float<T>(rB[r]), bits_float<T>(rC[r]));
        }
    };
    auto store_bc = [&](int buf) {
        if (bc_tfast) store_bc_as(buf, std::true_type());
        else store_bc_as(buf, std::false_type());
    };
    /* own steps of a tile: count, and raw u / delta loads */
    auto own_count = [&](int tb) {
        const int t0 = tb + j * OWN;
        return active ? max(0, min(OWN, L - t0)) : 0;
    };
    raw_t<T, OWN, CL> ru, rd, rz, cu;
    auto load_own = [&](int tb) {
        const int t0 = tb + j * OWN;
        const int n = own_count(tb);
        const bool ext = t0 >= 1 && t0 + OWN < LL;
        load_seq<T, OWN>(ru, urow, t0, n, ext, lu);
        load_seq<T, OWN>(rd, drow, t0, n, ext, ldl);
    };
    /* dt, dt * u of the own steps into s_dt[buf] (0 on padding) */
    auto stage_dt = [&](int buf, int nown) {
#pragma unroll
        for (int k = 0; k < OWN; k++) {
            const float uu = raw_get<T, OWN>(ru, k), x = raw_get<T, OWN>(rd, k) + delta_bias;
            const float dt = dt_of(x, sp, k < nown);
            s_dt[buf][(j * OWN + k) * CH + chl] = make_float2(dt, dt * uu);
        }
    };

    load_bc(t_beg);
    load_own(t_beg);
    store_bc(0);
    stage_dt(0, own_count(t_beg));
    cu = ru;
    __syncthreads();
    int buf = 0;
    for (int tb = t_beg; tb < L; tb += kFL, buf ^= 1) {
        const int t0 = tb + j * OWN;
        const int nown = own_count(tb);
        const bool more = tb + kFL < L;
        if (more) { load_bc(tb + kFL); load_own(tb + kFL); } /* in flight during the scan */
        if (!LOCAL && hy && hz) { /* used after the scan */
            const int lz = lstride<CL>(P.z);
            load_seq<T, OWN>(rz, zrow, t0, nown, t0 >= 1 && t0 + OWN < LL, lz);
        }
        if (!LOCAL && P.ck && (tb & (kCK - 1)) == 0 && active) {
#pragma unroll
            for (int k = 0; k < S; k++) {
                const int64_t n = j * S + k;
                if (n < N) P.ck[(bd * P.nck + (tb >> 6)) * N + n] = h[k];
            }
        }
        /* the scan: yp[tt] = this lane's states' share of y at step tt */
        float yp[kFL];
#pragma unroll
        for (int tq = 0; tq < kFL; tq += Q) {
            float av[Q][S], bv[Q][S], cv[Q][S];
#pragma unroll
            for (int q = 0; q < Q; q++) {
                const float2 dd = s_dt[buf][(tq + q) * CH + chl];
                if (LOCAL) sumdt += dd.x;
                const float *bc = &s_bc[buf][(tq + q) * RS + 2 * j * S];
#pragma unroll
                for (int k = 0; k < S; k += 2) {
                    const float4 v = *reinterpret_cast<const float4 *>(bc + 2 * k);
                    av[q][k] = ex2(dd.x * A2[k]);
                    av[q][k + 1] = ex2(dd.x * A2[k + 1]);
                    bv[q][k] = v.x * dd.y; cv[q][k] = v.y;
                    bv[q][k + 1] = v.z * dd.y; cv[q][k + 1] = v.w;
                }
            }
            /* then the recurrence: S independent chains a step */
#pragma unroll
            for (int q = 0; q < Q; q++) {
                float y = 0.0f;
#pragma unroll
                for (int k = 0; k < S; k++) {
                    h[k] = fmaf(av[q][k], h[k], bv[q][k]);
                    if constexpr (PADS) h[k] = live[k] ? h[k] : 0.0f;
                    if (!LOCAL && hy) y = fmaf(cv[q][k], h[k], y);
                }
                yp[tq + q] = y;
            }
        }
        if (!LOCAL && hy) {
            reduce_scatter<TPC>(yp, j); /* sums over the channel's lanes: own steps in yp[0 .. OWN) */
            float yv[OWN];
#pragma unroll
            for (int k = 0; k < OWN; k++) {
                const float y = fmaf(Dd, raw_get<T, OWN>(cu, k), yp[k]);
                const float zz = hz ? raw_get<T, OWN>(rz, k) : 0.0f;
                yv[k] = gate(y, zz, hz);
            }
            const int ly = lstride<CL>(P.y);
            if (nown > 0) store_seq<T, OWN>(yrow, t0, yv, nown, ly);
        }
        if (more) {
            store_bc(buf ^ 1);
            stage_dt(buf ^ 1, own_count(tb + kFL));
            cu = ru;
        }
        __syncthreads();
    }
    if (LOCAL && active) { /* chunk end state from 0 (from h0 for chunk 0) and decay product */
#pragma unroll
        for (int k = 0; k < S; k++) {
            const int64_t n = j * S + k;
            if (n < N) {
                P.S[(bd * P.nlch + lc) * N + n] = h[k];
                P.P[(bd * P.nlch + lc) * N + n] = lc == 0 ? -0.0f : ex2(A2[k] * sumdt); /* -0: carry_kernel's reset mark */
            }
        }
    }
    if (!LOCAL && P.h_last.p && active && lc == P.nlch - 1) {
#pragma unroll
        for (int k = 0; k < S; k++) {
            const int64_t n = j * S + k;
            if (n < N) static_cast<float *>(P.h_last.p)[b * P.h_last.s[0] + d * P.h_last.s[1] + n * P.h_last.s[2]] = h[k];
        }
    }
}

/* Pass 2 of the L-parallel forward: the state entering each chunk, in chunk order. */
/* Chunks are walked kCarryBatch at a time: their S and P loaded together first, so a row costs
   nlch / kCarryBatch memory round trips instead of nlch. The same FMAs in the same order. */
const int kCarryBatch = 8;
/* A load issued where it is written: plain loads of a batch were moved next to their uses (one
   memory round trip a chunk: lm-prefill's carry took 10.6 us at ncu's clocks; bench/NOTES.md CUDA-v27) */
static __device__ __forceinline__ float ld_now(const float *p) {
    float v;
    asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
    return v;
}
/* A chunk in which a sequence starts (forward; in the backward: ends) takes nothing from the chunks before it:
   the L-chunk passes mark its decay product (P, M) as -0, and the carries take its S (V) alone there, where
   0 times the state carried in made an infinite state NaN (an infinite u in one packed sequence made every
   later sequence NaN). A product that underflows is +0 and multiplies, as the per-step recurrence does. */
static __device__ __forceinline__ bool reset_mark(float p) { return signbit(p); }
static __global__ void carry_kernel(const float *__restrict__ S, const float *__restrict__ Pr, float *__restrict__ Hin, int64_t rows,
                             int64_t nlch, int64_t N) {
    pdl_wait();
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; /* (b*dim + d)*N + n */
    if (i >= rows * N) return;
    const int64_t bd = i / N, n = i % N, base = bd * nlch * N + n;
    float h = 0.0f;
    for (int64_t c0 = 0; c0 < nlch; c0 += kCarryBatch) {
        float p[kCarryBatch], sv[kCarryBatch];
#pragma unroll
        for (int k = 0; k < kCarryBatch; k++) { /* past the last chunk: the last one again, unused */
            const int64_t c = min(c0 + k, nlch - 1);
            p[k] = ld_now(Pr + base + c * N);
            sv[k] = ld_now(S + base + c * N);
        }
#pragma unroll
        for (int k = 0; k < kCarryBatch; k++) {
            if (c0 + k < nlch) {
                Hin[base + (c0 + k) * N] = h;
                h = reset_mark(p[k]) ? sv[k] : fmaf(p[k], h, sv[k]);
            }
        }
    }
}

/* h_last of empty sequences (their h_last is their h0), and dh0 of empty sequences (= dh_last). */
static __global__ void empty_seq_kernel(const int64_t *cu, int64_t nseq, int64_t dim, int64_t N, ct src, ct dst) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= nseq * dim * N) return;
    const int64_t s = i / (dim * N), d = (i / N) % dim, n = i % N;
    if (cu[s] != cu[s + 1]) return;
    static_cast<float *>(dst.p)[s * dst.s[0] + d * dst.s[1] + n * dst.s[2]] =
        src.p ? ldf(src, s * src.s[0] + d * src.s[1] + n * src.s[2]) : 0.0f;
}

/* ---------------------------------------------------------------------------------------------- */
/* >>fwd-short       forward, short prefill (a channel's steps across a warp's lanes)             */
/* ---------------------------------------------------------------------------------------------- */
/* The fast forward's problems (unit L strides, variable B / C, N <= 16, no packed sequences)
   when its channels leave most of the GPU idle (batch-1 prefill: 1,536-5,120 channels are 3-10 k
   threads of fwd_fast_kernel, which then splits L into chunks and computes every exponential
   twice) and no checkpoint is asked for. A warp takes one channel; a block's kShortWarps channels
   share one (batch row, group), so their B / C. L is walked in chunks of 32 K steps, lane l owning
   steps [l K, l K + K) of a chunk. For each state n of a chunk: the lane's K decays a = exp(dt A)
   and inputs b = B dt u (one exponential an element), their composition over the lane's steps (the
   map h -> p h + q), an inclusive scan of the lanes' maps by shuffles (Hillis-Steele, 5 rounds),
   the state entering the lane from the state carried into the chunk, then the lane's K steps from
   it, adding C h into y. A state's carry stays in a register between chunks (lane n holds state
   n's; shuffles read and write it). States go SG at a time (independent chains for the latencies of the exponentials and shuffles). The next chunk's
   B / C are copied into shared memory (cp.async, raw elements, 16-byte pieces) and its u / delta /
   z loaded into registers while this one is scanned. Padding steps (past L) have dt = dt u = 0
   and B = C = 0. The sum over states into y runs in state order (deterministic). */

const int kShortWarps = 4; /* channels (warps) a block */
/* shared memory of fwd_short_kernel: two buffers of the B / C chunk (raw T, NS rows of 32 K), then
   the warps' A log2(e) */
template <typename T, int K, int NS> constexpr size_t short_smem() {
    return 2 * 2 * static_cast<size_t>(NS) * 32 * K * sizeof(T) + kShortWarps * NS * sizeof(float);
}
/* 16 bytes (the first `bytes` of them from src, the rest 0) to shared dst, asynchronously on
   sm_80+ (done by cp_async_wait); 16-byte aligned src and dst. */
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(dst))), "l"(src),
                 "r"(bytes)
                 : "memory");
#else
    unsigned char *d = static_cast<unsigned char *>(dst);
    for (int i = 0; i < 16; i++) d[i] = i < bytes ? static_cast<const unsigned char *>(src)[i] : 0;
#endif
}
static __device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
static __device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group 0;" ::: "memory");
#endif
}
/* Where a row's 16-byte piece q lies in shared memory: where a lane's K elements are two pieces
   (f32, K = 8), the lanes 4-7 of every 8 hold theirs swapped, so that a quarter warp's 16-byte
   reads of piece 0 (then 1) hit 8 distinct 4-bank groups. */
template <int SEG> static __device__ __forceinline__ int short_piece(int q) { return SEG == 32 ? q ^ ((q >> 3) & 1) : q; }
/* a lane's K elements of a staged B / C row as floats */
template <typename T, int K> static __device__ __forceinline__ void short_row(const unsigned char *row, int lane, float (&v)[K]) {
    constexpr int SEG = K * static_cast<int>(sizeof(T));
    rawv<T, K> r;
    if constexpr (SEG == 32) {
        const uint4 a = *reinterpret_cast<const uint4 *>(row + 16 * short_piece<32>(2 * lane));
        const uint4 b = *reinterpret_cast<const uint4 *>(row + 16 * short_piece<32>(2 * lane + 1));
        r.w[0] = a.x; r.w[1] = a.y; r.w[2] = a.z; r.w[3] = a.w; r.w[4] = b.x; r.w[5] = b.y; r.w[6] = b.z; r.w[7] = b.w;
    } else if constexpr (SEG == 16) {
        const uint4 a = *reinterpret_cast<const uint4 *>(row + 16 * lane);
        r.w[0] = a.x; r.w[1] = a.y; r.w[2] = a.z; r.w[3] = a.w;
    } else {
        static_assert(SEG == 8, "a lane's row segment: 8, 16 or 32 bytes");
        const uint2 a = *reinterpret_cast<const uint2 *>(row + 8 * lane);
        r.w[0] = a.x; r.w[1] = a.y;
    }
#pragma unroll
    for (int k = 0; k < K; k++) v[k] = raw_get<T, K>(r, k);
}

template <typename T, int K, int NS, int SG>
static __global__ void __launch_bounds__(kShortWarps * 32) fwd_short_kernel(const scan_params P) {
    pdl_wait();
    constexpr int CL = 32 * K, SEG = K * static_cast<int>(sizeof(T)), ROWB = CL * static_cast<int>(sizeof(T)), NPC = ROWB / 16,
                  EPP = 16 / static_cast<int>(sizeof(T));
    static_assert(NS % SG == 0 && NS <= 32, "states a group divide the padded states; a lane a state's carry");
    extern __shared__ __align__(16) unsigned char short_sm[];
    unsigned char *s_bc = short_sm; /* [buffer][B, C][state][CL] raw T */
    float *s_A = reinterpret_cast<float *>(short_sm + 2 * 2 * NS * ROWB);

    int64_t bid = blockIdx.x;
    const int64_t cb = bid % P.ncb; bid /= P.ncb;
    const int64_t g = bid % P.G, b = bid / P.G;
    const int tid = threadIdx.x, w = tid / 32, lane = tid % 32;
    const int64_t cig = cb * kShortWarps + w;
    const bool active = cig < P.dpg;
    const int64_t d = g * P.dpg + (active ? cig : 0);
    const int L = static_cast<int>(P.L), N = static_cast<int>(P.N), nch = (L + CL - 1) / CL;
    const T *urow = static_cast<const T *>(P.u.p) + b * P.u.s[0] + d * P.u.s[1];
    const T *drow = static_cast<const T *>(P.delta.p) + b * P.delta.s[0] + d * P.delta.s[1];
    const T *zrow = P.z.p ? static_cast<const T *>(P.z.p) + b * P.z.s[0] + d * P.z.s[1] : NULL;
    T *yrow = static_cast<T *>(P.y.p) + b * P.y.s[0] + d * P.y.s[1];
    const T *Bg = static_cast<const T *>(P.B.p) + b * P.B.s[0] + g * P.B.s[1];
    const T *Cg = static_cast<const T *>(P.C.p) + b * P.C.s[0] + g * P.C.s[1];
    const int sBn = static_cast<int>(P.B.s[2]), sCn = static_cast<int>(P.C.s[2]);
    /* 16-byte pieces by cp.async where B's and C's rows start 16-byte aligned, element copies otherwise */
    const bool bc_al = ((reinterpret_cast<uintptr_t>(Bg) | reinterpret_cast<uintptr_t>(Cg)) & 15) == 0 &&
                       (static_cast<int64_t>(sBn) * static_cast<int64_t>(sizeof(T))) % 16 == 0 &&
                       (static_cast<int64_t>(sCn) * static_cast<int64_t>(sizeof(T))) % 16 == 0;
    auto stage_bc = [&](int c, int buf) { /* chunk c's B / C rows into buffer buf */
        const int t0 = c * CL;
        for (int e = tid; e < 2 * NS * NPC; e += kShortWarps * 32) {
            const int q = e % NPC, row = e / NPC, n = row % NS, isC = row / NS, t = t0 + q * EPP;
            const T *src = isC ? Cg + n * sCn + t : Bg + n * sBn + t;
            const int nv = n < N ? max(0, min(EPP, L - t)) : 0;
            unsigned char *dst = s_bc + (buf * 2 * NS + row) * ROWB + 16 * short_piece<SEG>(q);
            if (bc_al) {
                cp_async16(dst, nv > 0 ? static_cast<const void *>(src) : static_cast<const void *>(Bg), nv * static_cast<int>(sizeof(T)));
            } else {
#pragma unroll
                for (int k = 0; k < EPP; k++) {
                    const uint32_t bits = k < nv ? ld_bits<T>(src, k) : 0u;
                    if constexpr (sizeof(T) == 4) reinterpret_cast<uint32_t *>(dst)[k] = bits;
                    else reinterpret_cast<unsigned short *>(dst)[k] = static_cast<unsigned short>(bits);
                }
            }
        }
        cp_async_commit();
    };
    stage_bc(0, 0);
    const bool nl = active && lane < N; /* lane n keeps state n's carry (uniform reads by shuffles) */
    if (lane < NS) s_A[w * NS + lane] = nl ? ldf(P.A, d * P.A.s[0] + lane * P.A.s[1]) * kLog2e : 0.0f;
    float carry = nl && P.h0.p ? ldf(P.h0, b * P.h0.s[0] + d * P.h0.s[1] + lane * P.h0.s[2]) : 0.0f;
    const float Dd = active && P.D.p ? ldf(P.D, d * P.D.s[0]) : 0.0f;
    const float delta_bias = active && P.delta_bias.p ? ldf(P.delta_bias, d * P.delta_bias.s[0]) : 0.0f;
    const bool sp = P.softplus != 0, hz = zrow != NULL;

    rawv<T, K> ru, rd, rz, nu, nd, nz;
    auto load_x = [&](int c, rawv<T, K> &xu, rawv<T, K> &xd, rawv<T, K> &xz) { /* the lane's u / delta / z of chunk c */
        const int t0 = c * CL + lane * K, n = active ? max(0, min(K, L - t0)) : 0, ext = t0 >= 1 && t0 + K < L;
        load_raw<T, K>(xu, urow + t0, n, ext);
        load_raw<T, K>(xd, drow + t0, n, ext);
        if (hz) load_raw<T, K>(xz, zrow + t0, n, ext);
    };
    load_x(0, ru, rd, rz);
    for (int c = 0; c < nch; c++) {
        const int buf = c & 1, t0 = c * CL + lane * K, nown = active ? max(0, min(K, L - t0)) : 0;
        cp_async_wait();
        __syncthreads(); /* chunk c staged; every warp done with chunk c - 1 (its buffer is refilled next) */
        if (c + 1 < nch) {
            stage_bc(c + 1, buf ^ 1);
            load_x(c + 1, nu, nd, nz);
        }
        float dt[K], dtu[K], yv[K], sdt = 0.0f; /* sdt: the lane's sum of dt (its decay product is exp(A sdt)) */
#pragma unroll
        for (int k = 0; k < K; k++) {
            dt[k] = dt_of(raw_get<T, K>(rd, k) + delta_bias, sp, k < nown);
            dtu[k] = dt[k] * raw_get<T, K>(ru, k);
            sdt += dt[k];
            yv[k] = 0.0f;
        }
        const unsigned char *sB = s_bc + buf * 2 * NS * ROWB, *sC = sB + NS * ROWB;
#pragma unroll 1 /* unrolled: more registers, fewer blocks an SM, slower (bench/NOTES.md CUDA-v61) */
        for (int n0 = 0; n0 < NS; n0 += SG) {
            float a[SG][K], bq[SG][K], p[SG], q[SG];
#pragma unroll
            for (int s = 0; s < SG; s++) { /* decays, inputs and the lane's map h -> p h + q */
                const float A2 = s_A[w * NS + n0 + s];
                float Bv[K];
                short_row<T, K>(sB + (n0 + s) * ROWB, lane, Bv);
#pragma unroll
                for (int k = 0; k < K; k++) {
                    a[s][k] = ex2(dt[k] * A2);
                    bq[s][k] = dtu[k] * Bv[k];
                }
                p[s] = ex2(sdt * A2);
                q[s] = bq[s][0];
#pragma unroll
                for (int k = 1; k < K; k++) q[s] = fmaf(a[s][k], q[s], bq[s][k]);
            }
#pragma unroll
            for (int o = 1; o < 32; o *= 2) { /* the lanes' maps composed: lane l ends with lanes 0..l's */
#pragma unroll
                for (int s = 0; s < SG; s++) {
                    const float pu = __shfl_up_sync(0xffffffffu, p[s], o), qu = __shfl_up_sync(0xffffffffu, q[s], o);
                    if (lane >= o) {
                        q[s] = fmaf(p[s], qu, q[s]);
                        p[s] *= pu;
                    }
                }
            }
#pragma unroll
            for (int s = 0; s < SG; s++) { /* the lane's steps from the state entering it (the lane before's end) */
                const float hc = __shfl_sync(0xffffffffu, carry, n0 + s), hend = fmaf(p[s], hc, q[s]);
                const float hin = __shfl_up_sync(0xffffffffu, hend, 1), hout = __shfl_sync(0xffffffffu, hend, 31);
                if (lane == n0 + s) carry = hout; /* into the next chunk */
                const bool live = n0 + s < N; /* a pad state (B = C = 0): 0 times an infinite u is NaN, which y must not see */
                float h = lane > 0 ? hin : hc, Cv[K];
                short_row<T, K>(sC + (n0 + s) * ROWB, lane, Cv);
#pragma unroll
                for (int k = 0; k < K; k++) {
                    h = fmaf(a[s][k], h, bq[s][k]);
                    yv[k] = fmaf(Cv[k], live ? h : 0.0f, yv[k]);
                }
            }
        }
#pragma unroll
        for (int k = 0; k < K; k++) yv[k] = gate(fmaf(Dd, raw_get<T, K>(ru, k), yv[k]), hz ? raw_get<T, K>(rz, k) : 0.0f, hz);
        if (nown > 0) store_row<T, K>(yrow + t0, yv, nown);
        ru = nu; rd = nd; rz = nz;
    }
    if (P.h_last.p && nl) static_cast<float *>(P.h_last.p)[b * P.h_last.s[0] + d * P.h_last.s[1] + lane * P.h_last.s[2]] = carry;
}

/* ---------------------------------------------------------------------------------------------- */
/* >>bwd-general     backward, general kernels                                                    */
/* ---------------------------------------------------------------------------------------------- */
/* Block: CH channels of one (batch row, group), thread (channel, j) with 4 states. Walks the
   sub-tiles of kSub steps from last to first; in each it recomputes the states and decays from
   the sub-tile's checkpoint (a forward-like pass wrote the state entering every kSub steps into the
   workspace, L-parallel) into registers and walks them backward. Sums over channels (dB, dC) are reduced in the warp (shuffles), then across the
   block's warps (shared memory, fixed order), and written per block into the workspace; sums over
   time (dA, dD, ddelta_bias in registers; fixed dB / dC per thread in shared memory, to keep the
   registers live across the loop few: spills cost more than anything else here, bench/NOTES.md
   CUDA-v14) are written per batch row. */

struct bwd_layout {
    int NPAD, ngrp, SP;
    size_t off_B, off_C, off_dBw, off_dCw, off_dt, off_dtu, off_u, off_dy0, off_dsp, off_fz, off_p0, off_p1, off_p2,
        off_cD, off_cb, off_acc, off_seg, off_end, total;
};

static __host__ __device__ inline bwd_layout bwd_smem(int NT, int CH) {
    bwd_layout l;
    l.NPAD = NT * kBwdNPT;
    l.ngrp = kThreads / (NT > 32 ? NT : 32);
    l.SP = kSub + 1;
    size_t o = 0;
    l.off_B = o; o += kSub * (l.NPAD + 4); /* row stride NPAD + 4: fewer bank conflicts */
    l.off_C = o; o += kSub * (l.NPAD + 4);
    l.off_dBw = o; o += l.ngrp * l.NPAD * l.SP; /* [group][n][step]: conflict-free both ways */
    l.off_dCw = o; o += l.ngrp * l.NPAD * l.SP;
    l.off_dt = o; o += CH * l.SP;
    l.off_dtu = o; o += CH * l.SP;
    l.off_u = o; o += CH * l.SP;
    l.off_dy0 = o; o += CH * l.SP;
    l.off_dsp = o; o += CH * l.SP;
    l.off_fz = o; o += CH * l.SP;
    l.off_p0 = o; o += kThreads * l.SP;
    l.off_p1 = o; o += kThreads * l.SP;
    l.off_p2 = o; o += kThreads * l.SP;
    l.off_cD = o; o += CH * l.SP;
    l.off_cb = o; o += CH * l.SP;
    l.off_acc = o; o += 2 * kBwdNPT * kThreads; /* fixed dB / dC time sums, per thread */
    l.off_seg = o; o += kSub + 1; /* + "any flag in the tile" */
    l.off_end = o; o += kSub;
    l.total = o * 4;
    return l;
}

/* The first two rounds, shared by both versions: lanes 16 apart swap halves of v[4] and add
   (w0, w1: states kb, kb + 1), then lanes 8 apart (x: state kb + (lane & 8 ? 1 : 0)). */
struct warp_fold {
    float w0, w1, x;
    int kb, k;
};
static __device__ __forceinline__ warp_fold warp_fold16(const float v[4], int lane) {
    const unsigned full = 0xffffffffu;
    const bool hi = (lane & 16) != 0;
    const float r0 = __shfl_xor_sync(full, hi ? v[0] : v[2], 16);
    const float r1 = __shfl_xor_sync(full, hi ? v[1] : v[3], 16);
    warp_fold f;
    f.w0 = (hi ? v[2] : v[0]) + r0;
    f.w1 = (hi ? v[3] : v[1]) + r1;
    f.kb = hi ? 2 : 0;
    f.x = 0.0f;
    f.k = f.kb;
    return f;
}
static __device__ __forceinline__ void warp_fold8(warp_fold &f, int lane) {
    const bool m8 = (lane & 8) != 0;
    const float r = __shfl_xor_sync(0xffffffffu, m8 ? f.w0 : f.w1, 8);
    f.x = (m8 ? f.w1 : f.w0) + r;
    f.k = f.kb + (m8 ? 1 : 0);
}

/* Reduce v[4] (this lane's channel, states j*4..j*4+3) over the other channels of the warp and
   store the warp's sums into row[(grp*NPAD + n) * SPs]. Every lane of the warp must call it. */
static __device__ __forceinline__ void warp_scatter(const float v[4], int NT, int tid, int NPAD, float *row, int SPs) {
    const int lane = tid & 31;
    if (NT >= 32) {
        const int grp = tid / NT, j = tid % NT;
#pragma unroll
        for (int k = 0; k < 4; k++) row[(grp * NPAD + j * 4 + k) * SPs] = v[k];
        return;
    }
    const int grp = tid >> 5, j = lane & (NT - 1);
    warp_fold f = warp_fold16(v, lane);
    if (NT == 16) {
        row[(grp * NPAD + j * 4 + f.kb) * SPs] = f.w0;
        row[(grp * NPAD + j * 4 + f.kb + 1) * SPs] = f.w1;
        return;
    }
    warp_fold8(f, lane);
    for (int m = 4; m >= NT; m >>= 1) f.x += __shfl_xor_sync(0xffffffffu, f.x, m);
    if ((lane & 7 & ~(NT - 1)) == 0) row[(grp * NPAD + j * 4 + f.k) * SPs] = f.x;
}

/* warp_scatter for NT = 2, 4 or 8 without branches: the rounds a smaller NT needs are always
   shuffled and their sums selected (one tile loop for the three widths: a third of the compile
   time of three unrolled copies, for two shuffles and a few selects a call). */
static __device__ __forceinline__ void warp_scatter_248(const float v[4], int NT, int tid, int NPAD, float *row, int SPs) {
    const int lane = tid & 31, grp = tid >> 5, j = lane & (NT - 1);
    warp_fold f = warp_fold16(v, lane);
    warp_fold8(f, lane);
    const float x4 = __shfl_xor_sync(0xffffffffu, f.x, 4);
    f.x = NT <= 4 ? f.x + x4 : f.x;
    const float x2 = __shfl_xor_sync(0xffffffffu, f.x, 2);
    f.x = NT <= 2 ? f.x + x2 : f.x;
    if ((lane & 7 & ~(NT - 1)) == 0) row[(grp * NPAD + j * 4 + f.k) * SPs] = f.x;
}

template <typename T, bool PADS>
static __global__ void __launch_bounds__(kThreads, SELSCAN_CUDA_BWD_MINBLOCKS) bwd_kernel(const bwd_params P) {
    const bool BF = P.bf16 != 0;
    extern __shared__ float4 smem4[];
    float *sm = reinterpret_cast<float *>(smem4);
    const int NT = P.NT, CH = P.CH;
    const bwd_layout l = bwd_smem(NT, CH);
    const int NPAD = l.NPAD, SP = l.SP, ngrp = l.ngrp, BS = NPAD + 4;
    float *s_B = sm + l.off_B, *s_C = sm + l.off_C, *s_dBw = sm + l.off_dBw, *s_dCw = sm + l.off_dCw;
    float *s_dt = sm + l.off_dt, *s_dtu = sm + l.off_dtu, *s_u = sm + l.off_u, *s_dy0 = sm + l.off_dy0;
    float *s_dsp = sm + l.off_dsp, *s_fz = sm + l.off_fz;
    float *s_p0 = sm + l.off_p0, *s_p1 = sm + l.off_p1, *s_p2 = sm + l.off_p2;
    float *s_cD = sm + l.off_cD, *s_cb = sm + l.off_cb;
    int *s_seg = reinterpret_cast<int *>(sm + l.off_seg), *s_end = reinterpret_cast<int *>(sm + l.off_end);
    const int NPT = kBwdNPT;

    int64_t bid = blockIdx.x;
    const int64_t lc = bid % P.nlch; bid /= P.nlch;
    const int64_t cb = bid % P.ncb; bid /= P.ncb;
    const int64_t g = bid % P.G, b = bid / P.G;
    const int tid = threadIdx.x, chl = tid / NT, j = tid % NT;
    const int64_t c0 = g * P.dpg + cb * CH;
    const int nchb = static_cast<int>(min(static_cast<int64_t>(CH), P.dpg - cb * CH));
    const bool active = chl < nchb;
    const int64_t d = c0 + (active ? chl : 0), bd = b * P.dim + d;
    const int64_t prow = lc * P.batch + b; /* row of the per-(chunk, batch row) partial sums */
    const int64_t t0 = lc * P.lchunk, t1 = min(P.L, t0 + P.lchunk);
    const bool tfast_u = P.u.s[2] == 1 || P.u.s[1] != 1;
    const bool tfast_B = P.B.s[3] == 1 || P.B.s[2] != 1;
    const bool tfast_C = P.C.s[3] == 1 || P.C.s[2] != 1;
    const pairwalk wl = mkwalk(tfast_u, tid, CH, kSub);
    const int64_t sdl = wstep(wl, P.delta), su = wstep(wl, P.u), sdy = wstep(wl, P.dy), sz = wstep(wl, P.z);
    const int64_t sdu = wstep(wl, P.du), sdd = wstep(wl, P.ddelta), sdz = wstep(wl, P.dz);

    /* Few registers live across the sub-tile loop (the walk's 64-register history needs the
       room): fixed B / C are re-read from global memory (slow path only), their time sums kept in
       shared memory (s_acc), A kept once (log2 e scaled; ddt scaled back by ln 2 per step). */
    float A2[NPT], dh[NPT], dA[NPT], h[NPT];
    bool nv[NPT];
    float *s_acc = sm + l.off_acc; /* [k][tid]: fixed dB (k < 4), fixed dC (k >= 4) */
#pragma unroll
    for (int k = 0; k < NPT; k++) {
        const int64_t n = j * NPT + k;
        nv[k] = active && n < P.N;
        A2[k] = nv[k] ? ldf(P.A, d * P.A.s[0] + n * P.A.s[1]) * kLog2e : 0.0f;
        dh[k] = dA[k] = 0.0f;
        if (P.nlch > 1 && nv[k]) dh[k] = P.Hin[(bd * P.nlch + lc) * P.N + n]; /* from the chunks to the right */
        s_acc[k * kThreads + tid] = 0.0f;
        s_acc[(k + NPT) * kThreads + tid] = 0.0f;
    }
    float accD = 0.0f, accDeltaBias = 0.0f;

    /* Loads one sub-tile [ts, ts + tn) into shared memory; full: everything phase B needs. */
    auto load_tile = [&](int64_t ts, int tn, bool full) {
        int64_t od = wbase(wl, P.delta, b, c0, ts), ou = wbase(wl, P.u, b, c0, ts), ody = wbase(wl, P.dy, b, c0, ts);
        int64_t oz = P.z.p ? wbase(wl, P.z, b, c0, ts) : 0;
        const bool sp = P.softplus != 0, hz = P.z.p != NULL;
#pragma unroll 4
        for (int r = 0; r < wl.R; r++, od += sdl, ou += su, ody += sdy, oz += sz) { /* straight-line */
            const int c = wl.c + r * wl.dc, tt = wl.tt + r * wl.dt;
            const bool in = c < CH && tt < kSub, v = c < nchb && tt < tn;
            float x = v ? ld<T>(P.delta.p, od, BF) : 0.0f;
            float uu = v ? ld<T>(P.u.p, ou, BF) : 0.0f;
            const float dy = v && full ? ld<T>(P.dy.p, ody, BF) : 0.0f;
            const float zz = v && full && hz ? ld<T>(P.z.p, oz, BF) : 0.0f;
            x += v && P.delta_bias.p ? ldf(P.delta_bias, (c0 + c) * P.delta_bias.s[0]) : 0.0f;
            const float dt = v ? (sp ? softplus(x) : x) : 0.0f; /* as fwd_kernel's staging */
            const float dsp = sp && x <= SELSCAN__SOFTPLUS_THRESHOLD ? sigm(x) : 1.0f;
            const float sg = sigm(zz);
            const float dy0 = hz ? dy * zz * sg : dy;
            const float fz = hz ? dy * sg * (1.0f + zz * (1.0f - sg)) : 0.0f;
            if (!in) continue;
            s_dt[c * SP + tt] = dt;
            s_dtu[c * SP + tt] = dt * uu;
            if (full) {
                s_u[c * SP + tt] = uu;
                s_dy0[c * SP + tt] = dy0;
                s_dsp[c * SP + tt] = dsp;
                s_fz[c * SP + tt] = fz;
            }
        }
        if (!P.fixB)
#pragma unroll 4
            for (int i = tid; i < kSub * NPAD; i += kThreads) {
                int n, tt;
                if (tfast_B) { n = i / kSub; tt = i % kSub; }
                else { n = i % NPAD; tt = i / NPAD; }
                s_B[tt * BS + n] = n < P.N && tt < tn ? ld<T>(P.B.p, b * P.B.s[0] + g * P.B.s[1] + n * P.B.s[2] + (ts + tt) * P.B.s[3], BF) : 0.0f;
            }
        if (full && !P.fixC)
#pragma unroll 4
            for (int i = tid; i < kSub * NPAD; i += kThreads) {
                int n, tt;
                if (tfast_C) { n = i / kSub; tt = i % kSub; }
                else { n = i % NPAD; tt = i / NPAD; }
                s_C[tt * BS + n] = n < P.N && tt < tn ? ld<T>(P.C.p, b * P.C.s[0] + g * P.C.s[1] + n * P.C.s[2] + (ts + tt) * P.C.s[3], BF) : 0.0f;
            }
        if (tid < 32) {
            int s0 = -1, e0 = -1;
            if (tid < tn) seg_flags(P, b, ts + tid, &s0, &e0);
            if (tid < kSub) { s_seg[tid] = s0; s_end[tid] = e0; }
            const unsigned m = __ballot_sync(0xffffffffu, s0 >= 0 || e0 >= 0);
            if (tid == 0) s_seg[kSub] = m != 0;
        }
    };
    auto getB = [&](int tt, float *Bv) {
        if (P.fixB) {
#pragma unroll
            for (int k = 0; k < NPT; k++) Bv[k] = nv[k] ? ldf(P.B, d * P.B.s[0] + (j * NPT + k) * P.B.s[1]) : 0.0f;
        } else {
            const float4 v = *reinterpret_cast<const float4 *>(s_B + tt * BS + j * NPT);
            Bv[0] = v.x; Bv[1] = v.y; Bv[2] = v.z; Bv[3] = v.w;
        }
    };
    auto reset = [&](int sg) {
#pragma unroll
        for (int k = 0; k < NPT; k++)
            h[k] = P.h0.p && nv[k] ? ldf(P.h0, sg * P.h0.s[0] + d * P.h0.s[1] + (j * NPT + k) * P.h0.s[2]) : 0.0f;
    };

    /* P.ck holds the state entering every kSub steps (P.nck entries per row) */
    for (int64_t c = (t1 - 1) / kSub; c >= t0 / kSub; c--) {
        {
            const int64_t ts = c * kSub;
            const int tn = static_cast<int>(min(static_cast<int64_t>(kSub), P.L - ts));
            __syncthreads();
#pragma unroll
            for (int k = 0; k < NPT; k++) h[k] = nv[k] ? P.ck[(bd * P.nck + c) * P.N + j * NPT + k] : 0.0f; /* in flight with the tile */
            load_tile(ts, tn, true);
            __syncthreads();
            if (c > t0 / kSub) { /* the next sub-tile (earlier in time) into L2 */
                const int64_t tp = ts - kSub;
                if (active) pf<float>(P.ck, (bd * P.nck + c - 1) * P.N + j * NPT);
                int64_t od = wbase(wl, P.delta, b, c0, tp), ou = wbase(wl, P.u, b, c0, tp), ody = wbase(wl, P.dy, b, c0, tp);
                int64_t oz = P.z.p ? wbase(wl, P.z, b, c0, tp) : 0;
                for (int r = 0; r < wl.R; r++, od += sdl, ou += su, ody += sdy, oz += sz) {
                    const int cc = wl.c + r * wl.dc, tt = wl.tt + r * wl.dt;
                    if (cc < nchb && tt < kSub) {
                        pf<T>(P.delta.p, od); pf<T>(P.u.p, ou); pf<T>(P.dy.p, ody);
                        if (P.z.p) pf<T>(P.z.p, oz);
                    }
                }
                for (int i = tid; i < kSub * NPAD; i += kThreads) {
                    int n, tt;
                    if (tfast_B) { n = i / kSub; tt = i % kSub; }
                    else { n = i % NPAD; tt = i / NPAD; }
                    if (!P.fixB && n < P.N) pf<T>(P.B.p, b * P.B.s[0] + g * P.B.s[1] + n * P.B.s[2] + (tp + tt) * P.B.s[3]);
                    if (tfast_C) { n = i / kSub; tt = i % kSub; }
                    else { n = i % NPAD; tt = i / NPAD; }
                    if (!P.fixC && n < P.N) pf<T>(P.C.p, b * P.C.s[0] + g * P.C.s[1] + n * P.C.s[2] + (tp + tt) * P.C.s[3]);
                }
            }
            float hh[kSub][NPT]; /* the decays are recomputed walking back: registers buy occupancy */
            /* fast path: a full tile without sequence boundaries, variable B and C, 2..8 threads a channel */
            auto fast = [&]() {
#pragma unroll
                for (int tt = 0; tt < kSub; tt++) {
                    const float dt = s_dt[chl * SP + tt], dtu = s_dtu[chl * SP + tt];
                    const float4 bv = *reinterpret_cast<const float4 *>(s_B + tt * BS + j * NPT);
                    const float Bv[NPT] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
                    for (int k = 0; k < NPT; k++) {
                        h[k] = fmaf(ex2(dt * A2[k]), h[k], Bv[k] * dtu);
                        if constexpr (PADS) h[k] = nv[k] ? h[k] : 0.0f;
                        hh[tt][k] = h[k];
                    }
                }
#pragma unroll
                for (int tt = kSub - 1; tt >= 0; tt--) {
                    const float dt = s_dt[chl * SP + tt], dtu = s_dtu[chl * SP + tt], dy0 = s_dy0[chl * SP + tt];
                    const float4 bv = *reinterpret_cast<const float4 *>(s_B + tt * BS + j * NPT);
                    const float4 cv = *reinterpret_cast<const float4 *>(s_C + tt * BS + j * NPT);
                    const float Bv[NPT] = {bv.x, bv.y, bv.z, bv.w}, Cv[NPT] = {cv.x, cv.y, cv.z, cv.w};
                    float ddt = 0.0f, sBu = 0.0f, y0 = 0.0f, vB[NPT], vC[NPT];
#pragma unroll
                    for (int k = 0; k < NPT; k++) {
                        const float dhn = PADS && !nv[k] ? 0.0f : fmaf(dy0, Cv[k], dh[k]);
                        y0 = fmaf(Cv[k], hh[tt][k], y0);
                        vC[k] = dy0 * hh[tt][k];
                        vB[k] = dhn * dtu;
                        const float q = PADS && !nv[k] ? 0.0f : dhn * fmaf(-Bv[k], dtu, hh[tt][k]);
                        ddt = fmaf(q, A2[k], ddt);
                        dA[k] = fmaf(q, dt, dA[k]);
                        sBu = fmaf(dhn, Bv[k], sBu);
                        dh[k] = dhn * ex2(dt * A2[k]);
                    }
                    s_p0[tid * SP + tt] = ddt * kLn2;
                    s_p1[tid * SP + tt] = sBu;
                    s_p2[tid * SP + tt] = y0;
                    warp_scatter_248(vB, NT, tid, NPAD, s_dBw + tt, SP);
                    warp_scatter_248(vC, NT, tid, NPAD, s_dCw + tt, SP);
                }
            };
            const bool fastok = tn == kSub && !s_seg[kSub] && !P.fixB && !P.fixC && P.wdB && P.wdC;
            if (fastok && NT >= 2 && NT <= 8) fast();
            else {
            /* slow path (partial tiles, sequence boundaries, fixed B or C, N <= 4 or N > 32): steps
               not unrolled, its states in local memory (hs: L1), the code once instead of 16 times */
            float hs[kSub][NPT];
#pragma unroll 1
            for (int tt = 0; tt < kSub; tt++) {
                if (tt < tn) {
                    const int sg = s_seg[tt];
                    if (sg >= 0) reset(sg);
                    const float dt = s_dt[chl * SP + tt], dtu = s_dtu[chl * SP + tt];
                    float Bv[NPT];
                    getB(tt, Bv);
#pragma unroll
                    for (int k = 0; k < NPT; k++) {
                        h[k] = fmaf(ex2(dt * A2[k]), h[k], Bv[k] * dtu);
                        if constexpr (PADS) h[k] = nv[k] ? h[k] : 0.0f;
                        hs[tt][k] = h[k];
                    }
                }
            }
#pragma unroll 1
            for (int tt = kSub - 1; tt >= 0; tt--) {
                if (tt < tn) {
                    const int en = s_end[tt];
                    if (en >= 0) {
#pragma unroll
                        for (int k = 0; k < NPT; k++)
                            dh[k] = P.dh_last.p && nv[k] ? ldf(P.dh_last, en * P.dh_last.s[0] + d * P.dh_last.s[1] + (j * NPT + k) * P.dh_last.s[2]) : 0.0f;
                    }
                    const float dt = s_dt[chl * SP + tt], dtu = s_dtu[chl * SP + tt], dy0 = s_dy0[chl * SP + tt];
                    float Bv[NPT], Cv[NPT];
                    getB(tt, Bv);
                    if (P.fixC) {
#pragma unroll
                        for (int k = 0; k < NPT; k++) Cv[k] = nv[k] ? ldf(P.C, d * P.C.s[0] + (j * NPT + k) * P.C.s[1]) : 0.0f;
                    } else {
                        const float4 v = *reinterpret_cast<const float4 *>(s_C + tt * BS + j * NPT);
                        Cv[0] = v.x; Cv[1] = v.y; Cv[2] = v.z; Cv[3] = v.w;
                    }
                    float ddt = 0.0f, sBu = 0.0f, y0 = 0.0f, vB[NPT], vC[NPT];
#pragma unroll
                    for (int k = 0; k < NPT; k++) {
                        const float dhn = PADS && !nv[k] ? 0.0f : fmaf(dy0, Cv[k], dh[k]);
                        y0 = fmaf(Cv[k], hs[tt][k], y0);
                        vC[k] = dy0 * hs[tt][k];
                        vB[k] = dhn * dtu;
                        /* dhn a h_prev: h - B dt u, but a h0 (or 0) at a sequence's first step, where h - B dt u
                           would leave B dt u's rounding (an infinite dhn times it: +-inf where dhn 0 is NaN) */
                        const float ahp = s_seg[tt] < 0 ? fmaf(-Bv[k], dtu, hs[tt][k])
                                        : P.h0.p && nv[k] ? ex2(dt * A2[k]) * ldf(P.h0, s_seg[tt] * P.h0.s[0] + d * P.h0.s[1] + (j * NPT + k) * P.h0.s[2]) : 0.0f;
                        const float q = PADS && !nv[k] ? 0.0f : dhn * ahp;
                        ddt = fmaf(q, A2[k], ddt);
                        dA[k] = fmaf(q, dt, dA[k]);
                        sBu = fmaf(dhn, Bv[k], sBu);
                        dh[k] = dhn * ex2(dt * A2[k]);
                    }
                    if (s_seg[tt] >= 0 && P.dh0.p) {
                        const int sg = s_seg[tt];
#pragma unroll
                        for (int k = 0; k < NPT; k++)
                            if (nv[k]) static_cast<float *>(P.dh0.p)[sg * P.dh0.s[0] + d * P.dh0.s[1] + (j * NPT + k) * P.dh0.s[2]] = dh[k];
                    }
                    s_p0[tid * SP + tt] = ddt * kLn2;
                    s_p1[tid * SP + tt] = sBu;
                    s_p2[tid * SP + tt] = y0;
                    if (P.fixB) {
#pragma unroll
                        for (int k = 0; k < NPT; k++) s_acc[k * kThreads + tid] += vB[k];
                    } else if (P.wdB) {
                        warp_scatter(vB, NT, tid, NPAD, s_dBw + tt, SP);
                    }
                    if (P.fixC) {
#pragma unroll
                        for (int k = 0; k < NPT; k++) s_acc[(k + NPT) * kThreads + tid] += vC[k];
                    } else if (P.wdC) {
                        warp_scatter(vC, NT, tid, NPAD, s_dCw + tt, SP);
                    }
                }
            }
            } /* slow path */
            __syncthreads();
            /* per (channel, step) outputs */
            int64_t odu = wbase(wl, P.du, b, c0, ts), odd = wbase(wl, P.ddelta, b, c0, ts), odz = wbase(wl, P.dz, b, c0, ts);
#pragma unroll 4
            for (int r = 0; r < wl.R; r++, odu += sdu, odd += sdd, odz += sdz) {
                const int cc = wl.c + r * wl.dc, tt = wl.tt + r * wl.dt;
                if (cc >= CH || tt >= kSub) continue;
                float cD = 0.0f, cB = 0.0f;
                if (cc < nchb && tt < tn) {
                    const int64_t dd = c0 + cc;
                    float ddt = 0.0f, sBu = 0.0f, y0 = 0.0f;
                    for (int jj = 0; jj < NT; jj++) {
                        const int o = (cc * NT + jj) * SP + tt;
                        ddt += s_p0[o]; sBu += s_p1[o]; y0 += s_p2[o];
                    }
                    const float uu = s_u[cc * SP + tt], dt = s_dt[cc * SP + tt], dy0 = s_dy0[cc * SP + tt];
                    const float Dd = P.D.p ? ldf(P.D, dd * P.D.s[0]) : 0.0f;
                    ddt = fmaf(sBu, uu, ddt) * s_dsp[cc * SP + tt];
                    if (P.du.p) st<T>(P.du.p, odu, fmaf(sBu, dt, Dd * dy0), BF);
                    if (P.ddelta.p) st<T>(P.ddelta.p, odd, ddt, BF);
                    if (P.dz.p) st<T>(P.dz.p, odz, s_fz[cc * SP + tt] * fmaf(Dd, uu, y0), BF);
                    cD = dy0 * uu;
                    cB = ddt;
                }
                s_cD[cc * SP + tt] = cD;
                s_cb[cc * SP + tt] = cB;
            }
            /* block partial sums of variable dB / dC */
            if ((!P.fixB && P.wdB) || (!P.fixC && P.wdC)) {
                for (int i = tid; i < kSub * NPAD; i += kThreads) {
                    const int n = i / kSub, tt = i % kSub;
                    if (n >= P.N || tt >= tn) continue;
                    const int64_t o = (((cb * P.batch + b) * P.G + g) * P.N + n) * P.L + ts + tt;
                    if (!P.fixB && P.wdB) {
                        float acc = 0.0f;
                        for (int q = 0; q < ngrp; q++) acc += s_dBw[(q * NPAD + n) * SP + tt];
                        P.wdB[o] = acc;
                    }
                    if (!P.fixC && P.wdC) {
                        float acc = 0.0f;
                        for (int q = 0; q < ngrp; q++) acc += s_dCw[(q * NPAD + n) * SP + tt];
                        P.wdC[o] = acc;
                    }
                }
            }
            __syncthreads();
            if (tid < nchb) /* s_cD / s_cb are 0 past tn */
#pragma unroll
                for (int tt = 0; tt < kSub; tt++) {
                    accD += s_cD[tid * SP + tt];
                    accDeltaBias += s_cb[tid * SP + tt];
                }
        }
    }
    /* per batch row partial sums */
#pragma unroll
    for (int k = 0; k < NPT; k++) {
        if (!nv[k]) continue;
        const int64_t o = (prow * P.dim + d) * P.N + j * NPT + k;
        if (P.wdA) P.wdA[o] = dA[k];
        if (P.fixB && P.wdBf) P.wdBf[o] = s_acc[k * kThreads + tid];
        if (P.fixC && P.wdCf) P.wdCf[o] = s_acc[(k + NPT) * kThreads + tid];
    }
    if (tid < nchb) {
        const int64_t o = prow * P.dim + c0 + tid;
        if (P.wdD) P.wdD[o] = accD;
        if (P.wddelta_bias) P.wddelta_bias[o] = accDeltaBias;
    }
}

/* Pass 1 of the L-parallel backward: for each chunk, the state gradient leaving it to the left
   when zero enters from the right (V, dh_last injected at sequence ends) and the product of its
   decays (M, 0 when a sequence ends inside). Thread: (row, channel, 4 states, chunk). */
template <typename T>
static __global__ void __launch_bounds__(kThreads) bwd_local_kernel(const bwd_params P, float *V, float *M) {
    const int64_t NT = P.NT;
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= P.batch * P.dim * NT * P.nlch) return;
    const int j = static_cast<int>(i % NT); i /= NT;
    const int64_t d = i % P.dim; i /= P.dim;
    const int64_t lc = i % P.nlch, b = i / P.nlch, g = d / P.dpg, bd = b * P.dim + d;
    const int64_t t0 = lc * P.lchunk, t1 = min(P.L, t0 + P.lchunk);
    const int NPT = kBwdNPT;
    float A2[NPT], Cf[NPT], dh[NPT], m[NPT];
#pragma unroll
    for (int k = 0; k < NPT; k++) {
        const int64_t n = j * NPT + k;
        const bool nv = n < P.N;
        A2[k] = nv ? ldf(P.A, d * P.A.s[0] + n * P.A.s[1]) * kLog2e : 0.0f;
        Cf[k] = nv && P.fixC ? ldf(P.C, d * P.C.s[0] + n * P.C.s[1]) : 0.0f;
        dh[k] = 0.0f;
        m[k] = 1.0f;
    }
    const float delta_bias = P.delta_bias.p ? ldf(P.delta_bias, d * P.delta_bias.s[0]) : 0.0f;
#pragma unroll 4
    for (int64_t t = t1 - 1; t >= t0; t--) { /* branch-free body: the loads of 4 steps overlap */
        int sg, en;
        seg_flags(P, b, t, &sg, &en);
#pragma unroll
        for (int k = 0; k < NPT; k++) {
            const int64_t n = j * NPT + k;
            const float dl = en >= 0 && P.dh_last.p && n < P.N ? ldf(P.dh_last, en * P.dh_last.s[0] + d * P.dh_last.s[1] + n * P.dh_last.s[2]) : 0.0f;
            dh[k] = en >= 0 ? dl : dh[k];
            m[k] = en >= 0 ? -0.0f : m[k]; /* a sequence ends: carry_rev_kernel's reset_mark */
        }
        const float x = ld<T>(P.delta.p, b * P.delta.s[0] + d * P.delta.s[1] + t * P.delta.s[2]) + delta_bias;
        const float dt = P.softplus ? softplus(x) : x;
        float dy0 = ld<T>(P.dy.p, b * P.dy.s[0] + d * P.dy.s[1] + t * P.dy.s[2]);
        if (P.z.p) {
            const float zz = ld<T>(P.z.p, b * P.z.s[0] + d * P.z.s[1] + t * P.z.s[2]);
            dy0 *= zz * sigm(zz);
        }
#pragma unroll
        for (int k = 0; k < NPT; k++) {
            const int64_t n = j * NPT + k;
            const float Cv = P.fixC ? Cf[k] : n < P.N ? ld<T>(P.C.p, b * P.C.s[0] + g * P.C.s[1] + n * P.C.s[2] + t * P.C.s[3]) : 0.0f;
            const float a = ex2(dt * A2[k]);
            dh[k] = fmaf(dy0, Cv, dh[k]) * a;
            m[k] *= a;
        }
    }
#pragma unroll
    for (int k = 0; k < NPT; k++) {
        const int64_t n = j * NPT + k;
        if (n < P.N) {
            V[(bd * P.nlch + lc) * P.N + n] = dh[k];
            M[(bd * P.nlch + lc) * P.N + n] = m[k];
        }
    }
}

/* Pass 2 of the L-parallel backward: the state gradient entering each chunk from the right. */
static __global__ void carry_rev_kernel(const float *__restrict__ V, const float *__restrict__ M, float *__restrict__ Din, int64_t rows,
                                 int64_t nlch, int64_t N) {
    pdl_wait();
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * N) return;
    const int64_t bd = i / N, n = i % N, base = bd * nlch * N + n;
    float g = 0.0f;
    for (int64_t c0 = nlch - 1; c0 >= 0; c0 -= kCarryBatch) { /* batched as carry_kernel */
        float m[kCarryBatch], v[kCarryBatch];
#pragma unroll
        for (int k = 0; k < kCarryBatch; k++) { /* before the first chunk: the first one again, unused */
            const int64_t c = max(c0 - k, static_cast<int64_t>(0));
            m[k] = ld_now(M + base + c * N);
            v[k] = ld_now(V + base + c * N);
        }
#pragma unroll
        for (int k = 0; k < kCarryBatch; k++) {
            if (c0 - k >= 0) {
                Din[base + (c0 - k) * N] = g;
                g = reset_mark(m[k]) ? v[k] : fmaf(m[k], g, v[k]);
            }
        }
    }
}

/* out[d, n] = sum over r < rows of w[(r * dim + d) * inner + n] (f32), for each job of a launch
   (blockIdx.y: dA, dD, ddelta_bias, fixed dB / dC in one launch). */
/* In a fixed order (deterministic): thread (x, y) of a kRedX x kRedY block adds rows y, y + kRedY,
   ... of element i (loads coalesced across x, kRedY times the threads of one a row), then the
   kRedY partial sums are added in y order. */
const int kRedX = 32, kRedY = 8, kRowJobs = 5;
struct rowsum_job {
    const float *w;
    int64_t inner;
    ct out;
};
struct rowsum_jobs {
    rowsum_job j[kRowJobs];
};
static __global__ void reduce_rows_kernel(const rowsum_jobs J, int64_t rows, int64_t dim) {
    pdl_launch_dependents();
    pdl_wait();
    const float *__restrict__ w = J.j[blockIdx.y].w;
    const int64_t inner = J.j[blockIdx.y].inner;
    const ct &out = J.j[blockIdx.y].out;
    __shared__ float part[kRedY][kRedX];
    const int tx = threadIdx.x % kRedX, ty = threadIdx.x / kRedX;
    const int64_t tot = dim * inner, i = static_cast<int64_t>(blockIdx.x) * kRedX + tx;
    float acc = 0.0f;
    if (i < tot)
#pragma unroll 4
        for (int64_t r = ty; r < rows; r += kRedY) acc += w[r * tot + i];
    part[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && i < tot) {
        float sum = part[0][tx];
#pragma unroll
        for (int k = 1; k < kRedY; k++) sum += part[k][tx];
        const int64_t d = i / inner, n = i % inner;
        static_cast<float *>(out.p)[d * out.s[0] + (inner > 1 ? n * out.s[1] : 0)] = sum;
    }
}

/* out[b, g, n, t] = sum over block k < ncb of w[k][b][g][n][t], stored as T; blockIdx.y picks
   (w0, out0) (dB) or (w1, out1) (dC) */
template <typename T>
static __global__ void reduce_bc_kernel(const float *w0, const float *w1, int64_t ncb, int64_t batch, int64_t G, int64_t N, int64_t L, ct out0,
                                 ct out1) {
    pdl_wait();
    const float *w = blockIdx.y ? w1 : w0;
    const ct &out = blockIdx.y ? out1 : out0;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t tot = batch * G * N * L;
    if (i >= tot) return;
    float acc = 0.0f;
    for (int64_t k = 0; k < ncb; k++) acc += w[k * tot + i];
    const int64_t t = i % L, n = (i / L) % N, g = (i / (L * N)) % G, b = i / (L * N * G);
    st<T>(out.p, b * out.s[0] + g * out.s[1] + n * out.s[2] + t * out.s[3], acc);
}

/* ---------------------------------------------------------------------------------------------- */
/* >>bwd-fast        backward, fast path (unit L stride, N <= 16)                                 */
/* ---------------------------------------------------------------------------------------------- */
/* The backward of the fast forward's layout (and unit L stride dy, du, ddelta, dz), given the
   forward's 64-step checkpoint. A thread keeps S states of one channel, TPC threads a channel:
   S = 8 (N <= 16) or 4 (N <= 8), TPC = 2 (SELSCAN_CUDA_FAST_BWD_STATES 4: S = 4, TPC = 4 for
   every N); a block 128 / TPC channels of one (batch row, group) and walks
   its L range back in 64-step segments (one checkpoint each). Per segment: B and C of all its
   steps into shared memory; phase 1 scans its first 7 tiles of kBT steps forward from the
   checkpoint and keeps the state entering each tile in a per-block scratch of the workspace (L2:
   shared memory is better spent on blocks); phase 2 walks the tiles from the last: recompute the
   tile's states into registers (hh), then walk it back (the state gradient dh in registers, the
   decays recomputed). The next tile's u / delta / dy / z loads are in flight in registers during
   a tile, the previous segment is prefetched into L2. Reductions, all in a fixed order
   (deterministic):
   - over the channel's states (dt and u gradients, y for dz): each step, two chains a lane, then
     shuffles over the TPC lanes; the lane that loaded the step keeps the sums (shared memory);
   - over the channels (dB, dC): each step, a warp transposes its lanes' 2 S terms through shared
     memory (lane = one (B or C, state) of the warp's channels; double-buffered, added up during
     the next step so the loads' latency is hidden), the tile's warp sums are added across warps
     after it and written per block into the workspace (reduce_bc_kernel adds the blocks);
   - over time (dA per thread, dD and ddelta_bias per owning lane): registers, per (chunk, row).
   When the channels give less than a wave, L chunks: bwd_fast_local_kernel walks each chunk back
   from a zero gradient (no states needed), carry_rev_kernel chains them. */

const int kBT = 8;          /* backward fast tile: the states of kBT steps stay in registers */
const int kBTS = kCK / kBT; /* tiles a checkpoint segment */

template <int S, int TPC> struct bwd_fast_smem {
    static_assert(TPC * 2 * S == 32 || (TPC == 2 && S == 4), "a warp's lanes read one (B or C, state) each, or half of one");
    static constexpr int NP = S * TPC, CH = kThreads / TPC, CPW = 32 / TPC, RS = 2 * NP + 4;
    /* warp transpose of the dB / dC terms: rows of WR floats (the warp's channels + padding), 2 S
       rows (B then C terms) a plane, one plane per lane j of a channel (plane stride 16 or 8 mod
       32 words): conflict-free both ways. A reader lane adds RV float4: a whole row, or with
       HALF 2 (16 rows: S 4, TPC 2) half of one (lanes 16-31 the second half). */
    static constexpr int HALF = TPC * 2 * S == 16 ? 2 : 1;
    static constexpr int WR = CPW + 4, WPL = 2 * S * WR + (TPC == 2 ? 16 : 8), WB = TPC * WPL, RV = CPW / 4 / HALF;
    float bc[kCK * RS];             /* the segment's B then C, a row per step */
    float4 ch[kBT][CH];             /* (dt, dt u, dy', u) per (step, channel) */
    float4 sums[kBT][CH];           /* the channel's sums over states (ddt, sBu, y, -) */
    float2 own[kBT][CH];            /* (softplus', dz factor) */
    float wb[2][kThreads / 32][WB]; /* per-warp transposes, double-buffered (read one step later) */
    float red[kBT][kThreads / 32][32]; /* the tile's per-warp dB / dC sums */
};

template <int S> constexpr int fast_bwd_minblocks() { return S == 4 ? SELSCAN_CUDA_FAST_BWD4_MINBLOCKS : SELSCAN_CUDA_FAST_BWD_MINBLOCKS; }
template <typename T, int S, int TPC, bool CL, bool PADS>
static __global__ void __launch_bounds__(kThreads, fast_bwd_minblocks<S>()) bwd_fast_kernel(const bwd_params P) {
    pdl_launch_dependents();
    pdl_wait();
    using SM = bwd_fast_smem<S, TPC>;
    constexpr int NP = SM::NP, CH = SM::CH, RS = SM::RS, OWN = kBT / TPC;
    extern __shared__ float4 smem4[];
    SM &sm = *reinterpret_cast<SM *>(smem4);

    int64_t bid = blockIdx.x;
    const int64_t lc = bid % P.nlch; bid /= P.nlch;
    const int64_t cb = bid % P.ncb; bid /= P.ncb;
    const int64_t g = bid % P.G, b = bid / P.G;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, j = tid % TPC, chl = tid / TPC;
    const int64_t cig = cb * CH + chl; /* channel within the group */
    const bool active = cig < P.dpg;
    const int64_t d = g * P.dpg + (active ? cig : 0), N = P.N, bd = b * P.dim + d;
    /* this block's steps, 32-bit (plan_fast_backward checks that they fit) */
    const int t_beg = static_cast<int>(lc * P.lchunk), t_end = static_cast<int>(min(P.L, lc * P.lchunk + P.lchunk)), LL = static_cast<int>(P.L);
    bool live[S]; /* PADS: the thread's states n < N (pad_states) */
#pragma unroll
    for (int k = 0; k < S; k++) live[k] = j * S + k < N;

    /* rows are formed where used (from the parameter bank): registers are this kernel's limit */
    auto row = [&](const ct &X) { return static_cast<T *>(X.p) + b * X.s[0] + d * X.s[1]; };
    auto bcrow = [&](const ct &X, int n) { return static_cast<const T *>(X.p) + b * X.s[0] + g * X.s[1] + n * X.s[2]; };
    const float *ckrow = P.ck + bd * P.nck * N + j * S; /* + seg * N */
    /* the states entering tiles 1.. of a segment: per-block scratch in the workspace (L2; shared
       memory is better spent on more blocks an SM), thread-major so the accesses coalesce */
    float *hscr = P.scr + static_cast<int64_t>(blockIdx.x) * ((kBTS - 1) * S * kThreads) + tid;

    float A2[S], dh[S], dA[S];
#pragma unroll
    for (int k = 0; k < S; k++) {
        const int64_t n = j * S + k;
        const bool nv = active && n < N;
        A2[k] = nv ? ldf(P.A, d * P.A.s[0] + n * P.A.s[1]) * kLog2e : 0.0f;
        dA[k] = 0.0f;
        if (!nv) dh[k] = 0.0f;
        else if (lc == P.nlch - 1) dh[k] = P.dh_last.p ? ldf(P.dh_last, b * P.dh_last.s[0] + d * P.dh_last.s[1] + n * P.dh_last.s[2]) : 0.0f;
        else dh[k] = P.Hin[(bd * P.nlch + lc) * N + n]; /* from the chunks to the right */
    }
    const float Dd = active && P.D.p ? ldf(P.D, d * P.D.s[0]) : 0.0f;
    const float delta_bias = active && P.delta_bias.p ? ldf(P.delta_bias, d * P.delta_bias.s[0]) : 0.0f;
    const bool sp = P.softplus != 0, hz = P.z.p != NULL;
    float accD = 0.0f, accDeltaBias = 0.0f; /* over the own steps */

    /* own steps [tb + j*OWN, +OWN) of the tile at tb, inside [tb, te) */
    auto own_count = [&](int tb, int te) {
        const int t0 = tb + j * OWN;
        return active ? max(0, min(OWN, te - t0)) : 0;
    };

    for (int seg = (t_end - 1) / kCK; seg >= t_beg / kCK; seg--) {
        const int ts = seg * kCK, te = min(t_end, ts + kCK);
        const int nt = (te - ts + kBT - 1) / kBT;
        __syncthreads(); /* the previous segment is done with the shared buffers */
        /* the segment's B and C: thread (n, 8-step group), zero past te and past N */
        for (int e = tid; e < NP * (kCK / 8); e += kThreads) {
            const int n = e % NP, tg = (e / NP) * 8;
            const int t0 = ts + tg;
            const int cnt = n < N ? max(0, min(8, te - t0)) : 0;
            raw_t<T, 8, CL> rb, rc;
            const bool ext = t0 >= 1 && t0 + 8 < LL;
            load_seq<T, 8>(rb, bcrow(P.B, n), t0, cnt, ext, bcstride<CL>(P.B));
            load_seq<T, 8>(rc, bcrow(P.C, n), t0, cnt, ext, bcstride<CL>(P.C));
#pragma unroll
            for (int k = 0; k < 8; k++)
            {
                sm.bc[(tg + k) * RS + n] = k < cnt ? raw_get<T, 8>(rb, k) : 0.0f;
                sm.bc[(tg + k) * RS + NP + n] = k < cnt ? raw_get<T, 8>(rc, k) : 0.0f;
            }
        }
        float h[S];
#pragma unroll
        for (int k = 0; k < S; k++) {
            const int64_t n = j * S + k;
            h[k] = active && n < N ? ckrow[seg * N + k] : 0.0f;
        }
        /* the own steps' raw u, delta (and dy, z: full) of a tile; the next tile's are in flight
           during this one's scan */
        raw_t<T, OWN, CL> ru, rd, ry, rz;
        auto load_own = [&](int it, bool full) {
            const int t0 = ts + it * kBT + j * OWN;
            const int nown = own_count(ts + it * kBT, te);
            const bool ext = t0 >= 1 && t0 + OWN < LL;
            load_seq<T, OWN>(ru, row(P.u), t0, nown, ext, lstride<CL>(P.u));
            load_seq<T, OWN>(rd, row(P.delta), t0, nown, ext, lstride<CL>(P.delta));
            if (full) {
                load_seq<T, OWN>(ry, row(P.dy), t0, nown, ext, lstride<CL>(P.dy));
                if (hz) load_seq<T, OWN>(rz, row(P.z), t0, nown, ext, lstride<CL>(P.z));
            }
        };
        load_own(0, nt == 1);
        /* tile it's kBT steps forward from h (dt, dt u staged in sm.ch); KEEP: every step's states into hh */
        float hh[kBT][S];
        auto scan_tile = [&](int it, auto keep) {
#pragma unroll
            for (int tt = 0; tt < kBT; tt++) {
                const float4 c = sm.ch[tt][chl];
                const float *bc = &sm.bc[(it * kBT + tt) * RS + j * S];
#pragma unroll
                for (int k = 0; k < S; k += 4) {
                    const float4 v = *reinterpret_cast<const float4 *>(bc + k);
                    const float Bv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        h[k + i] = fmaf(ex2(c.x * A2[k + i]), h[k + i], Bv[i] * c.y);
                        if constexpr (PADS) h[k + i] = live[k + i] ? h[k + i] : 0.0f;
                        if (decltype(keep)::value) hh[tt][k + i] = h[k + i];
                    }
                }
            }
        };
        auto hin_of = [&](int it, int k) { /* the state entering tile it */
            return it == 0 ? (active && j * S + k < N ? ckrow[seg * N + k] : 0.0f) : hscr[((it - 1) * S + k) * kThreads];
        };
        /* phase 1: the states entering tiles 1 .. nt-1 */
        for (int it = 0; it + 1 < nt; it++) {
            {
                const int nown = own_count(ts + it * kBT, te);
#pragma unroll
                for (int k = 0; k < OWN; k++) {
                    const float x = raw_get<T, OWN>(rd, k) + delta_bias;
                    const float dt = dt_of(x, sp, k < nown);
                    sm.ch[j * OWN + k][chl] = make_float4(dt, dt * raw_get<T, OWN>(ru, k), 0.0f, 0.0f);
                }
            }
            __syncthreads();
            load_own(it + 1, it + 2 == nt);
            scan_tile(it, std::false_type());
#pragma unroll
            for (int k = 0; k < S; k++) hscr[(it * S + k) * kThreads] = h[k];
            __syncthreads();
        }
        if (seg > t_beg / kCK) { /* the previous segment into L2 while this one is walked back */
            const int tp = ts - kCK;
            if (lstride<CL>(P.u) == 1) { /* a channel's segment: 1 or 2 lines */
                if (active && j == 0) {
                    pf<T>(row(P.u), tp); pf<T>(row(P.delta), tp); pf<T>(row(P.dy), tp);
                    if (hz) pf<T>(row(P.z), tp);
                    if (sizeof(T) == 4) {
                        pf<T>(row(P.u), tp + 32); pf<T>(row(P.delta), tp + 32); pf<T>(row(P.dy), tp + 32);
                        if (hz) pf<T>(row(P.z), tp + 32);
                    }
                }
            } else if (tid < kCK) { /* channels-last: the block's channels at step tp + tid (1 or 2 lines) */
                const int64_t c0 = g * P.dpg + cb * CH, tq = tp + tid; /* tq >= 0: seg > 0 here */
                auto pfs = [&](const ct &X) {
                    const T *r = static_cast<const T *>(X.p) + b * X.s[0] + c0 * X.s[1] + tq * X.s[2];
                    pf<T>(r, 0);
                    if (sizeof(T) == 4 && cb * CH + 32 < P.dpg) pf<T>(r, 32 * X.s[1]); /* channels that exist */
                };
                pfs(P.u); pfs(P.delta); pfs(P.dy);
                if (hz) pfs(P.z);
            }
            if (active) pf<float>(ckrow, (seg - 1) * N);
            if (bcstride<CL>(P.B) == 1 && bcstride<CL>(P.C) == 1) { /* a state's segment: 1 or 2 lines */
                for (int e = tid; e < 2 * NP; e += kThreads) {
                    const int n = e >> 1;
                    if (n < N) {
                        const T *r = (e & 1) ? bcrow(P.C, n) : bcrow(P.B, n);
                        pf<T>(r, tp);
                        if (sizeof(T) == 4) pf<T>(r, tp + 32);
                    }
                }
            } else if (tid < kCK) { /* the states of step tp + tid */
                pf<T>(bcrow(P.B, 0), (tp + tid) * P.B.s[3]);
                pf<T>(bcrow(P.C, 0), (tp + tid) * P.C.s[3]);
            }
        }
        /* phase 2: the tiles from the last */
        for (int it = nt - 1; it >= 0; it--) {
            const int tb = ts + it * kBT, t0 = tb + j * OWN;
            const int nown = own_count(tb, te);
            /* the states entering the tile, loaded first: their L2 latency overlaps the staging */
#pragma unroll
            for (int k = 0; k < S; k++) h[k] = hin_of(it, k);
            {
#pragma unroll
                for (int k = 0; k < OWN; k++) {
                    const bool v = k < nown;
                    const float x = raw_get<T, OWN>(rd, k) + delta_bias;
                    float spx, dspx; /* evaluated whatever sp is, then selected (see dt_of) */
                    softplus_dsig(x, &spx, &dspx);
                    float dt = sp ? spx : x;
                    const float dsp = sp ? dspx : 1.0f;
                    const float uu = v ? raw_get<T, OWN>(ru, k) : 0.0f;
                    const float dy = v ? raw_get<T, OWN>(ry, k) : 0.0f;
                    const float zz = hz && v ? raw_get<T, OWN>(rz, k) : 0.0f;
                    const float sg = sigm(zz);
                    dt = v ? dt : 0.0f;
                    sm.own[j * OWN + k][chl] = make_float2(v ? dsp : 0.0f, hz ? dy * sg * (1.0f + zz * (1.0f - sg)) : 0.0f);
                    sm.ch[j * OWN + k][chl] = make_float4(dt, dt * uu, hz ? dy * zz * sg : dy, uu);
                }
            }
            __syncthreads();
            if (it > 0) load_own(it - 1, true);
            /* recompute the tile's states */
            scan_tile(it, std::true_type());
            /* walk back */
            const int wofs = warp * SM::WB + j * SM::WPL + lane / TPC;
            const int rofs = warp * SM::WB + (lane % TPC) * SM::WPL + (lane % (32 / SM::HALF) / TPC) * SM::WR +
                             (lane / (32 / SM::HALF)) * (SM::CPW / SM::HALF);
            float4 rv[SM::RV]; /* the previous step's transpose, added up one step later */
#pragma unroll
            for (int i = 0; i < SM::RV; i++) rv[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            auto red_sum = [&]() {
                float s[SM::RV];
#pragma unroll
                for (int i = 0; i < SM::RV; i++) s[i] = (rv[i].x + rv[i].y) + (rv[i].z + rv[i].w);
#pragma unroll
                for (int w = SM::RV / 2; w >= 1; w /= 2)
#pragma unroll
                    for (int i = 0; i < w; i++) s[i] += s[i + w];
                return s[0];
            };
#pragma unroll
            for (int tt = kBT - 1; tt >= 0; tt--) {
                const float4 c = sm.ch[tt][chl];
                const float dt = c.x, dtu = c.y, dy0 = c.z;
                const float *bc = &sm.bc[(it * kBT + tt) * RS + j * S];
                float *wb = &sm.wb[tt & 1][0][0];
                float ddt[2] = {0.0f, 0.0f}, sBu[2] = {0.0f, 0.0f}, y0[2] = {0.0f, 0.0f}; /* two chains each */
#pragma unroll
                for (int k = 0; k < S; k += 2) {
                    const float2 vb = *reinterpret_cast<const float2 *>(bc + k), vc = *reinterpret_cast<const float2 *>(bc + NP + k);
                    const float Bv[2] = {vb.x, vb.y}, Cv[2] = {vc.x, vc.y};
#pragma unroll
                    for (int i = 0; i < 2; i++) {
                        const int kk = k + i;
                        const float hp = tt > 0 ? hh[tt > 0 ? tt - 1 : 0][kk] : hin_of(it, kk);
                        const float dhn = PADS && !live[kk] ? 0.0f : fmaf(dy0, Cv[i], dh[kk]);
                        y0[i] = fmaf(Cv[i], hh[tt][kk], y0[i]);
                        wb[wofs + kk * SM::WR] = dhn * dtu;             /* dB term */
                        wb[wofs + (kk + S) * SM::WR] = dy0 * hh[tt][kk]; /* dC term */
                        sBu[i] = fmaf(dhn, Bv[i], sBu[i]);
                        dh[kk] = PADS && !live[kk] ? 0.0f : dhn * ex2(dt * A2[kk]);
                        const float q = dh[kk] * hp; /* dhn a h_prev */
                        ddt[i] = fmaf(q, A2[kk], ddt[i]);
                        dA[kk] = fmaf(q, dt, dA[kk]);
                    }
                }
                float pd = ddt[0] + ddt[1], pb = sBu[0] + sBu[1], py = y0[0] + y0[1];
#pragma unroll
                for (int m = 1; m < TPC; m *= 2) { /* all the channel's lanes get the same sums */
                    pd += __shfl_xor_sync(0xffffffffu, pd, m);
                    pb += __shfl_xor_sync(0xffffffffu, pb, m);
                    py += __shfl_xor_sync(0xffffffffu, py, m);
                }
                if (j == tt / OWN) sm.sums[tt][chl] = make_float4(pd, pb, py, 0.0f);
                if (tt < kBT - 1) sm.red[tt + 1][warp][lane] = red_sum();
                __syncwarp();
                const float4 *rp = reinterpret_cast<const float4 *>(wb + rofs);
#pragma unroll
                for (int i = 0; i < SM::RV; i++) rv[i] = rp[i];
            }
            sm.red[0][warp][lane] = red_sum();
            /* per (channel, step) outputs of the own steps */
            {
                float vu[OWN], vd[OWN], vz[OWN];
#pragma unroll
                for (int k = 0; k < OWN; k++) {
                    const float4 c = sm.ch[j * OWN + k][chl];   /* dt, dt u, dy', u */
                    const float4 s = sm.sums[j * OWN + k][chl]; /* ddt, sBu, y */
                    const float2 o = sm.own[j * OWN + k][chl];  /* softplus', dz factor */
                    const float ddt = fmaf(s.y, c.w, s.x * kLn2) * o.x;
                    vu[k] = fmaf(s.y, c.x, Dd * c.z);
                    vd[k] = ddt;
                    vz[k] = o.y * fmaf(Dd, c.w, s.z);
                    accD = fmaf(c.z, c.w, accD);
                    accDeltaBias += ddt;
                }
                if (nown > 0) {
                    if (P.du.p) store_seq<T, OWN>(row(P.du), t0, vu, nown, lstride<CL>(P.du));
                    if (P.ddelta.p) store_seq<T, OWN>(row(P.ddelta), t0, vd, nown, lstride<CL>(P.ddelta));
                    if (P.dz.p) store_seq<T, OWN>(row(P.dz), t0, vz, nown, lstride<CL>(P.dz));
                }
            }
            __syncthreads(); /* the tile's warp sums are complete; sm.ch is free */
            /* block sums of dB / dC: (which, n, step) with the step fastest (coalesced rows) */
            for (int e = tid; e < 2 * NP * kBT; e += kThreads) {
                const int tt = e % kBT, n = (e / kBT) % NP, w = e / (kBT * NP);
                const int t = tb + tt;
                float acc = 0.0f;
#pragma unroll
                for (int q = 0; q < kThreads / 32; q++) {
                    const int r = (w * S + n % S) * TPC + n / S; /* the reader lane of (B or C, state) */
                    acc += SM::HALF == 2 ? sm.red[tt][q][r] + sm.red[tt][q][r + 16] : sm.red[tt][q][r];
                }
                float *dst = w ? P.wdC : P.wdB;
                if (dst && n < N && t < te) dst[(((cb * P.batch + b) * P.G + g) * N + n) * P.L + t] = acc;
            }
        }
    }
    /* per (chunk, batch row) partial sums; dh0 */
    const int64_t prow = lc * P.batch + b;
#pragma unroll
    for (int k = 0; k < S; k++) {
        const int64_t n = j * S + k;
        if (!active || n >= N) continue;
        if (P.wdA) P.wdA[(prow * P.dim + d) * N + n] = dA[k];
        if (P.dh0.p && lc == 0) static_cast<float *>(P.dh0.p)[b * P.dh0.s[0] + d * P.dh0.s[1] + n * P.dh0.s[2]] = dh[k];
    }
#pragma unroll
    for (int m = 1; m < TPC; m *= 2) {
        accD += __shfl_xor_sync(0xffffffffu, accD, m);
        accDeltaBias += __shfl_xor_sync(0xffffffffu, accDeltaBias, m);
    }
    if (active && j == 0) {
        if (P.wdD) P.wdD[prow * P.dim + d] = accD;
        if (P.wddelta_bias) P.wddelta_bias[prow * P.dim + d] = accDeltaBias;
    }
}


/* Pass 1 of the L-chunked fast backward (bwd_local_kernel's job for the fast layout): each chunk
   walked back from a zero state gradient (dh_last in the last chunk) gives V, the gradient it
   sends to the state entering it, and M = exp(A sum dt), its decay product. Needs no states: 4
   instructions an element. Tiles of kFL steps, the next tile's loads in flight during the walk. */
template <typename T, int S, int TPC, bool CL>
static __global__ void __launch_bounds__(kThreads) bwd_fast_local_kernel(const bwd_params P, float *V, float *M) {
    pdl_launch_dependents();
    pdl_wait();
    constexpr int NP = S * TPC, CH = kThreads / TPC, OWN = kFL / TPC, RB = (NP * kFL + kThreads - 1) / kThreads;
    __shared__ __align__(16) float s_c[kFL][NP + 4];
    __shared__ float2 s_dt[kFL][CH]; /* (dt, dy') */
    int64_t bid = blockIdx.x;
    const int64_t lc = bid % P.nlch; bid /= P.nlch;
    const int64_t cb = bid % P.ncb; bid /= P.ncb;
    const int64_t g = bid % P.G, b = bid / P.G;
    const int tid = threadIdx.x, j = tid % TPC, chl = tid / TPC;
    const int64_t cig = cb * CH + chl;
    const bool active = cig < P.dpg;
    const int64_t d = g * P.dpg + (active ? cig : 0), N = P.N, bd = b * P.dim + d;
    const int t_beg = static_cast<int>(lc * P.lchunk), t_end = static_cast<int>(min(P.L, lc * P.lchunk + P.lchunk)), LL = static_cast<int>(P.L);
    auto row = [&](const ct &X) { return static_cast<const T *>(X.p) + b * X.s[0] + d * X.s[1]; };
    const T *Cg = static_cast<const T *>(P.C.p) + b * P.C.s[0] + g * P.C.s[1];
    float A2[S], dh[S];
#pragma unroll
    for (int k = 0; k < S; k++) {
        const int64_t n = j * S + k;
        const bool nv = active && n < N;
        A2[k] = nv ? ldf(P.A, d * P.A.s[0] + n * P.A.s[1]) * kLog2e : 0.0f;
        dh[k] = nv && lc == P.nlch - 1 && P.dh_last.p ? ldf(P.dh_last, b * P.dh_last.s[0] + d * P.dh_last.s[1] + n * P.dh_last.s[2]) : 0.0f;
    }
    const float delta_bias = active && P.delta_bias.p ? ldf(P.delta_bias, d * P.delta_bias.s[0]) : 0.0f;
    const bool sp = P.softplus != 0, hz = P.z.p != NULL;
    float sumdt = 0.0f;
    raw_t<T, OWN, CL> rd, ry, rz;
    uint32_t rC[RB]; /* raw bits, converted after the walk (ld_bits) */
    const bool c_tfast = bcstride<CL>(P.C) == 1; /* the C tile's element order (tile_elem) */
    auto load = [&](int tb) {
        const int t0 = tb + j * OWN;
        const int nown = active ? max(0, min(OWN, t_end - t0)) : 0;
        const bool ext = t0 >= 1 && t0 + OWN < LL;
        load_seq<T, OWN>(rd, row(P.delta), t0, nown, ext, lstride<CL>(P.delta));
        load_seq<T, OWN>(ry, row(P.dy), t0, nown, ext, lstride<CL>(P.dy));
        if (hz) load_seq<T, OWN>(rz, row(P.z), t0, nown, ext, lstride<CL>(P.z));
#pragma unroll
        for (int r = 0; r < RB; r++) {
            const int e = tid + r * kThreads;
            int n, tt;
            tile_elem<NP>(e, c_tfast, &n, &tt);
            rC[r] = e < NP * kFL && n < N && tb + tt < t_end ? ld_bits<T>(Cg, n * static_cast<int>(P.C.s[2]) + (tb + tt) * bcstride<CL>(P.C)) : 0u;
        }
        return nown;
    };
    const int last = t_beg + (t_end - 1 - t_beg) / kFL * kFL; /* the last tile's start */
    int nown = load(last);
    for (int tb = last; tb >= t_beg; tb -= kFL) {
#pragma unroll
        for (int k = 0; k < OWN; k++) {
            const bool v = k < nown;
            const float x = raw_get<T, OWN>(rd, k) + delta_bias;
            const float dt = dt_of(x, sp, v);
            const float dy = v ? raw_get<T, OWN>(ry, k) : 0.0f;
            const float zz = hz && v ? raw_get<T, OWN>(rz, k) : 0.0f;
            const float sg = sigm(zz);
            s_dt[j * OWN + k][chl] = make_float2(dt, hz ? dy * zz * sg : dy);
        }
#pragma unroll
        for (int r = 0; r < RB; r++) {
            const int e = tid + r * kThreads;
            int n, tt;
            tile_elem<NP>(e, c_tfast, &n, &tt);
            if (e < NP * kFL) s_c[tt][n] = bits_float<T>(rC[r]);
        }
        __syncthreads();
        if (tb - kFL >= t_beg) nown = load(tb - kFL); /* in flight during the walk */
#pragma unroll
        for (int tt = kFL - 1; tt >= 0; tt--) {
            const float2 c = s_dt[tt][chl];
            sumdt += c.x;
#pragma unroll
            for (int k = 0; k < S; k += 4) {
                const float4 cv = *reinterpret_cast<const float4 *>(&s_c[tt][j * S + k]);
                const float Cv[4] = {cv.x, cv.y, cv.z, cv.w};
#pragma unroll
                for (int i = 0; i < 4; i++) dh[k + i] = fmaf(c.y, Cv[i], dh[k + i]) * ex2(c.x * A2[k + i]);
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int k = 0; k < S; k++) {
        const int64_t n = j * S + k;
        if (active && n < N) {
            V[(bd * P.nlch + lc) * N + n] = dh[k];
            M[(bd * P.nlch + lc) * N + n] = ex2(A2[k] * sumdt);
        }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* >>step            decode step kernels                                                          */
/* ---------------------------------------------------------------------------------------------- */

/* The step's A from its operand: A itself, or with SELSCAN_STEP_A_LOG (alog, uniform over the
   grid) -exp(A_log) by expf, the accurate exp (not __expf): bitwise -expf(A_log) precomputed,
   which is what -torch.exp(A_log) gives on CUDA. Once a thread per element, where A is loaded. */
static __device__ __forceinline__ float a_of(float a, int alog) { return alog ? -expf(a) : a; }

/* The step's y of channel d from its NT lanes' shares yp: summed, D x added, gated by silu(z) (Dd,
   zz: lane 0's); 0 on a padding row (!live). Lane 0 of the channel stores it. */
template <typename T>
static __device__ __forceinline__ void step_store_y(const step1_params &P, int64_t b, int64_t d, int NT, int j, bool valid, bool live,
                                             float yp, float x, float Dd, float zz) {
    for (int m = NT / 2; m >= 1; m >>= 1) yp += __shfl_xor_sync(0xffffffffu, yp, m);
    if (valid && j == 0) {
        float y = 0.0f;
        if (live) {
            y = P.D.p ? fmaf(Dd, x, yp) : yp;
            if (P.z.p) y *= zz * sigm(zz);
        }
        st<T>(P.y.p, b * P.y.s[0] + d * P.y.s[1], y);
    }
}

template <typename T>
static __global__ void __launch_bounds__(kThreads) step_kernel(const step1_params P) {
    const int NT = P.NT, CPB = kThreads / NT;
    const int64_t nblk = (P.dim + CPB - 1) / CPB;
    const int64_t b = blockIdx.x / nblk, d = (blockIdx.x % nblk) * CPB + threadIdx.x / NT;
    const int j = threadIdx.x % NT;
    const bool valid = d < P.dim;
    int64_t row = P.idx ? static_cast<int64_t>(P.idx[b]) : b;
    const bool pad = row < 0 || row >= P.ncache;
    float yp = 0.0f, x = 0.0f;
    if (valid && !pad) {
        const int64_t g = d / P.dpg;
        x = ld<T>(P.u.p, b * P.u.s[0] + d * P.u.s[1]);
        float dt = ld<T>(P.delta.p, b * P.delta.s[0] + d * P.delta.s[1]);
        if (P.delta_bias.p) dt += ldp<T>(P.delta_bias.p, d * P.delta_bias.s[0], P.delta_biasT);
        if (P.softplus) dt = softplus(dt);
        for (int64_t n = j; n < P.N; n += NT) {
            const float Bv = P.fixB ? ldf(P.B, d * P.B.s[0] + n * P.B.s[1]) : ld<T>(P.B.p, b * P.B.s[0] + g * P.B.s[1] + n * P.B.s[2]);
            const float Cv = P.fixC ? ldf(P.C, d * P.C.s[0] + n * P.C.s[1]) : ld<T>(P.C.p, b * P.C.s[0] + g * P.C.s[1] + n * P.C.s[2]);
            const int64_t o = row * P.state.s[0] + d * P.state.s[1] + n * P.state.s[2];
            const float a = ex2(dt * a_of(ldf(P.A, d * P.A.s[0] + n * P.A.s[1]), P.alog) * kLog2e);
            const float hn = fmaf(a, ldp<T>(P.state.p, o, P.stT), dt * Bv * x); /* f32; y from it, the state rounded if T */
            stp<T>(P.state.p, o, hn, P.stT);
            yp = fmaf(Cv, hn, yp);
        }
    }
    const bool lead = valid && !pad && j == 0;
    const float Dd = lead && P.D.p ? ldp<T>(P.D.p, d * P.D.s[0], P.DT) : 0.0f;
    const float zz = lead && P.z.p ? ld<T>(P.z.p, b * P.z.s[0] + d * P.z.s[1]) : 0.0f;
    step_store_y<T>(P, b, d, NT, j, valid, !pad, yp, x, Dd, zz);
}

/* The float4 step kernels' parameters (step_vec_kernel, step_loop_kernel, step_lat_kernel): flat
   pointers and strides, about half step1_params' size (a graph replays the launch with its
   parameters: fewer bytes a launch). B / C: element n of the row of (batch b, group g) at
   b * b0 + g * b1 + n * b2, or fixed (f32, (dim, N)) at d * b0 + n * b2. */
struct step_params {
    int64_t batch, dim, ncache;
    int dpg, N, NT, softplus, fixB, fixC, avec, bvec, cvec, G1;
    int DT, delta_biasT; /* D, delta_bias are T (SELSCAN_STEP_D_T, _DELTA_BIAS_T), else f32 */
    int hT;   /* the state is T (SELSCAN_STEP_STATE_T), else f32: the launchers pick the kernels' H by it */
    int alog; /* A holds A_log (SELSCAN_STEP_A_LOG): A = -expf(A_log), see a_of */
    const int32_t *idx;
    void *h; /* the state: H (the kernels' state type: float, or T where hT) */
    int64_t h0, h1;
    const void *u, *dl, *z;
    int64_t u0, u1, d0, d1, z0, z1;
    void *y;
    int64_t y0, y1;
    const float *A;
    int64_t a0, a1;
    const void *B, *C;
    int64_t b0, b1, b2, c0, c1, c2;
    const void *D, *delta_bias; /* f32, or T where DT / delta_biasT */
    int64_t Ds, bs;
};

/* K consecutive elements of type T at base + off (16-byte aligned, or 8-byte for K * 2 bytes ==
   8) into floats, by 16- / 8-byte loads */
template <typename T, int K> __device__ __forceinline__ void ld_vec(const void *base, int64_t off, float (&o)[K]) {
    if constexpr (sizeof(T) == 4) {
        static_assert(K % 4 == 0, "f32 rows by float4");
        const float4 *p = reinterpret_cast<const float4 *>(static_cast<const float *>(base) + off);
#pragma unroll
        for (int i = 0; i < K / 4; i++) {
            const float4 v = p[i];
            o[4 * i] = v.x; o[4 * i + 1] = v.y; o[4 * i + 2] = v.z; o[4 * i + 3] = v.w;
        }
    } else {
        static_assert(K % 4 == 0, "2-byte rows by 8 or 16 bytes");
        const T *q = static_cast<const T *>(base) + off;
        uint32_t w[K / 2];
        if constexpr (K % 8 == 0) {
#pragma unroll
            for (int i = 0; i < K / 8; i++) {
                const uint4 v = reinterpret_cast<const uint4 *>(q)[i];
                w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
            }
        } else {
            const uint2 v = *reinterpret_cast<const uint2 *>(q);
            w[0] = v.x; w[1] = v.y;
        }
#pragma unroll
        for (int i = 0; i < K / 2; i++) {
            const unsigned short lo = static_cast<unsigned short>(w[i] & 0xffffu), hi = static_cast<unsigned short>(w[i] >> 16);
            if constexpr (std::is_same<T, __nv_bfloat16>::value) {
                o[2 * i] = __uint_as_float(static_cast<uint32_t>(lo) << 16);
                o[2 * i + 1] = __uint_as_float(static_cast<uint32_t>(hi) << 16);
            } else {
                o[2 * i] = __half2float(__ushort_as_half(lo));
                o[2 * i + 1] = __half2float(__ushort_as_half(hi));
            }
        }
    }
}

/* K consecutive floats v stored as type T at base + off (rounded to nearest even for 2-byte
   types), by 16- / 8-byte stores (the alignment ld_vec needs) */
template <typename T, int K> __device__ __forceinline__ void st_vec(void *base, int64_t off, const float (&v)[K]) {
    static_assert(K % 4 == 0, "rows by 8 or 16 bytes");
    if constexpr (sizeof(T) == 4) {
        float4 *p = reinterpret_cast<float4 *>(static_cast<float *>(base) + off);
#pragma unroll
        for (int i = 0; i < K / 4; i++) p[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
    } else {
        uint32_t w[K / 2];
#pragma unroll
        for (int i = 0; i < K / 2; i++) w[i] = raw_bits<T>(v[2 * i]) | (raw_bits<T>(v[2 * i + 1]) << 16);
        T *q = static_cast<T *>(base) + off;
        if constexpr (K % 8 == 0) {
#pragma unroll
            for (int i = 0; i < K / 8; i++) reinterpret_cast<uint4 *>(q)[i] = make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
        } else {
            *reinterpret_cast<uint2 *>(q) = make_uint2(w[0], w[1]);
        }
    }
}

/* The float4 step kernels' state (step_params::h) has the element type H, a template parameter of
   the kernels: float, or T with SELSCAN_STEP_STATE_T (compiled apart, so the f32 state's code is
   the float4 accesses it always was). Its chunks of 4 states go through ld_vec / st_vec (16-byte
   aligned in f32, 8-byte in T: the launcher's rule), stored rounded to T (to nearest even). */
/* Decode step for float4-aligned state rows (unit n stride, N % 4 == 0, N <= 128). A thread has S
   states of a channel (S = 16, 8 or 4) as S / 4 chunks of 4 states interleaved across the NT =
   pow2ceil(N / S) lanes of the channel: lane j's chunk i holds states 4 (j + NT i) .. + 3, so each
   16-byte load or store instruction of a warp covers whole 32-byte sectors of the state, of A and
   of B / C (the retired step_fast_kernel's lanes held S consecutive states: every instruction
   touched each sector half; bench/NOTES.md CUDA-v37). A block: kThreads / NT channels (blockIdx.y)
   of R batch rows (blockIdx.x), A, D, delta_bias loaded once for the R rows; every load of the R
   rows issued before the first use; B / C chunks by 16- or 8-byte loads where unit-stride and
   aligned (bvec / cvec), A by float4 where aligned (avec). Launched with programmatic dependent
   launch where available: it waits for the kernel before it to complete before touching memory and
   lets the next one launch at once. Arithmetic as the forward's at L = 1 (exponent dt (A log2 e), B
   (dt u), D u by an FMA, the gate), and y summed as the forward sums it for N = 8 and 16 (a chain
   over states 0 .. N/2 - 1, one over N/2 .. N - 1, added): state and y bitwise the forward's there
   (tests/test_cuda.cu). */
/* NTC: the lanes a channel as a compile-time constant (0: P.NT at run time). FAST: the common
   operands (A, B, C rows 16-byte aligned with unit n stride, variable B / C, one group per
   dpg known from P.G1), compiled without the other layouts' branches. H: the state's element type
   (float; T with SELSCAN_STEP_STATE_T). */
template <typename T, typename H, int S, int R, int NTC, bool FAST, int MINB>
__global__ void __launch_bounds__(kThreads, MINB) step_vec_kernel(const step_params P) {
    constexpr int NC = S / 4; /* chunks a lane */
    pdl_wait();
    pdl_launch_dependents();
    const int NT = NTC > 0 ? NTC : P.NT;
    const int tid = static_cast<int>(threadIdx.x);
    const int dl32 = static_cast<int>(blockIdx.y) * (kThreads / NT) + tid / NT;
    const int64_t d = dl32, bb = static_cast<int64_t>(blockIdx.x) * R;
    const int j = tid % NT;
    const bool valid = d < P.dim;
    bool cv_[NC]; /* chunk i of this lane inside N */
#pragma unroll
    for (int i = 0; i < NC; i++) cv_[i] = valid && 4 * (j + NT * i) < P.N;
    /* the state rows first (the long loads), then the rest */
    float hv[R][S], Bv[R][S], Cv[R][S], x[R], dl[R], zz[R];
    H *hp[R]; /* the state rows */
    bool live[R], inb[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int64_t b = bb + r;
        inb[r] = valid && b < P.batch;
        const int64_t row = inb[r] ? (P.idx ? static_cast<int64_t>(P.idx[b]) : b) : -1;
        live[r] = row >= 0 && row < P.ncache;
        hp[r] = static_cast<H *>(P.h) + (live[r] ? row * P.h0 + d * P.h1 : 0);
#pragma unroll
        for (int i = 0; i < NC; i++) {
            if constexpr (sizeof(H) == 4) { /* (the f32 state's code of before) */
                float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (live[r] && cv_[i]) v = reinterpret_cast<float4 *>(hp[r])[j + NT * i];
                hv[r][4 * i] = v.x; hv[r][4 * i + 1] = v.y; hv[r][4 * i + 2] = v.z; hv[r][4 * i + 3] = v.w;
            } else {
                float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                if (live[r] && cv_[i]) ld_vec<H, 4>(hp[r], 4 * (j + NT * i), v);
#pragma unroll
                for (int q = 0; q < 4; q++) hv[r][4 * i + q] = v[q];
            }
        }
    }
    const int64_t g = !valid || P.G1 ? 0 : dl32 / P.dpg;
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int64_t b = bb + r;
        x[r] = dl[r] = zz[r] = 0.0f;
#pragma unroll
        for (int k = 0; k < S; k++) Bv[r][k] = Cv[r][k] = 0.0f;
        if (live[r]) {
            x[r] = ld<T>(P.u, b * P.u0 + d * P.u1);
            dl[r] = ld<T>(P.dl, b * P.d0 + d * P.d1);
            if (j == 0 && P.z) zz[r] = ld<T>(P.z, b * P.z0 + d * P.z1);
        }
        const bool fixB = !FAST && P.fixB, fixC = !FAST && P.fixC, bvec = FAST || P.bvec, cvec = FAST || P.cvec;
        const int64_t bo = fixB ? d * P.b0 : b * P.b0 + g * P.b1, co = fixC ? d * P.c0 : b * P.c0 + g * P.c1;
#pragma unroll
        for (int i = 0; i < NC; i++) {
            const int n = 4 * (j + NT * i);
            if (live[r] && cv_[i]) {
                if (bvec) {
                    float t[4];
                    if (fixB) ld_vec<float, 4>(P.B, bo + n, t);
                    else ld_vec<T, 4>(P.B, bo + n, t);
#pragma unroll
                    for (int q = 0; q < 4; q++) Bv[r][4 * i + q] = t[q];
                } else {
#pragma unroll
                    for (int q = 0; q < 4; q++)
                        Bv[r][4 * i + q] = fixB ? static_cast<const float *>(P.B)[bo + (n + q) * P.b2] : ld<T>(P.B, bo + (n + q) * P.b2);
                }
            }
        }
        /* C: the lane's chunks, or (pair, N = 16 on two lanes) states 8j .. 8j + 7 */
        if (S == 8 && NT == 2 && P.N == 16) {
            if (live[r]) {
                float t[8];
                if (cvec) {
                    if (fixC) ld_vec<float, 8>(P.C, co + 8 * j, t);
                    else ld_vec<T, 8>(P.C, co + 8 * j, t);
                } else {
#pragma unroll
                    for (int q = 0; q < 8; q++)
                        t[q] = fixC ? static_cast<const float *>(P.C)[co + (8 * j + q) * P.c2] : ld<T>(P.C, co + (8 * j + q) * P.c2);
                }
#pragma unroll
                for (int q = 0; q < 8; q++) Cv[r][q % S] = t[q]; /* (S == 8 here) */
            }
        } else {
#pragma unroll
            for (int i = 0; i < NC; i++) {
                const int n = 4 * (j + NT * i);
                if (live[r] && cv_[i]) {
                    if (cvec) {
                        float t[4];
                        if (fixC) ld_vec<float, 4>(P.C, co + n, t);
                        else ld_vec<T, 4>(P.C, co + n, t);
#pragma unroll
                        for (int q = 0; q < 4; q++) Cv[r][4 * i + q] = t[q];
                    } else {
#pragma unroll
                        for (int q = 0; q < 4; q++)
                            Cv[r][4 * i + q] = fixC ? static_cast<const float *>(P.C)[co + (n + q) * P.c2] : ld<T>(P.C, co + (n + q) * P.c2);
                    }
                }
            }
        }
    }
    float A2[S];
#pragma unroll
    for (int k = 0; k < S; k++) A2[k] = 0.0f;
    const float *Ar = P.A + d * P.a0;
#pragma unroll
    for (int i = 0; i < NC; i++) {
        const int n = 4 * (j + NT * i);
        if (cv_[i]) {
            if (FAST || P.avec) {
                const float4 v = *reinterpret_cast<const float4 *>(Ar + n);
                A2[4 * i] = v.x; A2[4 * i + 1] = v.y; A2[4 * i + 2] = v.z; A2[4 * i + 3] = v.w;
            } else {
#pragma unroll
                for (int q = 0; q < 4; q++) A2[4 * i + q] = Ar[(n + q) * P.a1];
            }
            if (P.alog) {
#pragma unroll
                for (int q = 0; q < 4; q++) A2[4 * i + q] = a_of(A2[4 * i + q], 1);
            }
        }
    }
    const float delta_bias = valid && P.delta_bias ? ldp<T>(P.delta_bias, d * P.bs, P.delta_biasT) : 0.0f;
    const float Dd = valid && P.D ? ldp<T>(P.D, d * P.Ds, P.DT) : 0.0f;
#pragma unroll
    for (int k = 0; k < S; k++) A2[k] *= kLog2e;
#pragma unroll
    for (int r = 0; r < R; r++) {
        const float dt = dt_of(dl[r] + delta_bias, P.softplus != 0, true), dtx = dt * x[r];
#pragma unroll
        for (int k = 0; k < S; k++) hv[r][k] = fmaf(ex2(dt * A2[k]), hv[r][k], Bv[r][k] * dtx);
#pragma unroll
        for (int i = 0; i < NC; i++)
            if (live[r] && cv_[i]) {
                const float v[4] = {hv[r][4 * i], hv[r][4 * i + 1], hv[r][4 * i + 2], hv[r][4 * i + 3]};
                st_vec<H, 4>(hp[r], 4 * (j + NT * i), v);
            }
        float yp;
        if (S == 8 && NT == 2 && P.N == 16) {
            /* lane 0 owns states 0-3 (chunk 0) and 8-11, lane 1 4-7 and 12-15: each sends the
               chunk the other's chain needs (lane 0 its 8-11, lane 1 its 4-7) */
            float e[4], f[8];
#pragma unroll
            for (int q = 0; q < 4; q++) e[q] = __shfl_xor_sync(0xffffffffu, j == 0 ? hv[r][(4 + q) % S] : hv[r][q], 1);
#pragma unroll
            for (int q = 0; q < 4; q++) {
                f[q] = j == 0 ? hv[r][q] : e[q];
                f[4 + q] = j == 0 ? e[q] : hv[r][(4 + q) % S];
            }
            float yc = 0.0f;
#pragma unroll
            for (int q = 0; q < 8; q++) yc = fmaf(Cv[r][q % S], f[q], yc); /* (S == 8 here) */
            yp = yc;
        } else if (NT == 1) { /* chains over the two halves */
            float y0 = 0.0f, y1 = 0.0f;
#pragma unroll
            for (int k = 0; k < S; k++) {
                if (k < S / 2) y0 = fmaf(Cv[r][k], hv[r][k], y0);
                else y1 = fmaf(Cv[r][k], hv[r][k], y1);
            }
            yp = y0 + y1;
        } else {
            float yc = 0.0f;
#pragma unroll
            for (int k = 0; k < S; k++) yc = fmaf(Cv[r][k], hv[r][k], yc);
            yp = yc;
        }
#pragma unroll
        for (int m = NT / 2; m >= 1; m >>= 1) yp += __shfl_xor_sync(0xffffffffu, yp, m);
        if (inb[r] && j == 0) {
            float y = 0.0f;
            if (live[r]) y = gate(P.D ? fmaf(Dd, x[r], yp) : yp, zz[r], P.z != NULL); /* no D: no term (not 0 x) */
            st<T>(P.y, (bb + r) * P.y0 + d * P.y1, y);
        }
    }
}

/* The N = 16 step kernels' y (step_loop_kernel, step_lat_kernel): lane j of the channel's pair
   holds states 8j..8j+7 in f and their C in Cv; each lane's chain, then the pair's sum (the
   forward's order at L = 1), D u and the gate; lane 0 stores y of (row b, channel d). Every lane
   of the warp calls it (the shuffle). */
template <typename T>
static __device__ __forceinline__ void step_pair_y(const step_params &P, const float (&Cv)[8], const float (&f)[8], int j,
                                                   bool valid, bool live, float Dd, float x, float zz, int64_t b, int64_t d) {
    float yp = 0.0f;
#pragma unroll
    for (int q = 0; q < 8; q++) yp = fmaf(Cv[q], f[q], yp);
    yp += __shfl_xor_sync(0xffffffffu, yp, 1);
    if (valid && j == 0) {
        float y = 0.0f;
        if (live) y = gate(P.D ? fmaf(Dd, x, yp) : yp, zz, P.z != NULL); /* no D: no term (not 0 x) */
        st<T>(P.y, b * P.y0 + d * P.y1, y);
    }
}

/* The N = 16 pair kernels' end (step_loop_kernel, step_lat_kernel): lane j's 8 updated states hv
   (4j .. 4j + 3, 4j + 8 .. 4j + 11) stored to the state row hp where live, exchanged across the
   pair so lane j holds states 8j .. 8j + 7 (Cv's), and y by step_pair_y. Every lane of the warp
   calls it (the shuffles). */
template <typename T, typename H>
static __device__ __forceinline__ void step_pair_store_y(const step_params &P, const float (&hv)[8], const float (&Cv)[8], H *hp, int j,
                                                         bool valid, bool live, float Dd, float x, float zz, int64_t b, int64_t d) {
    if (live) {
        const float v0[4] = {hv[0], hv[1], hv[2], hv[3]}, v1[4] = {hv[4], hv[5], hv[6], hv[7]};
        st_vec<H, 4>(hp, 4 * j, v0);
        st_vec<H, 4>(hp, 4 * j + 8, v1);
    }
    float e[4], f[8];
#pragma unroll
    for (int q = 0; q < 4; q++) e[q] = __shfl_xor_sync(0xffffffffu, j == 0 ? hv[4 + q] : hv[q], 1);
#pragma unroll
    for (int q = 0; q < 4; q++) {
        f[q] = j == 0 ? hv[q] : e[q];
        f[4 + q] = j == 0 ? e[q] : hv[4 + q];
    }
    step_pair_y<T>(P, Cv, f, j, valid, live, Dd, x, zz, b, d);
}

/* Decode step, N = 16 on two lanes a channel with the common operands (step_vec_kernel's FAST
   form), for batches of several rows a thread: a grid of one wave (blockIdx.y: 64 channels,
   blockIdx.x: a slice of the batch rows, every gridDim.x-th row), A, D, delta_bias loaded once,
   and each row's state, u, delta, z loaded one row ahead (register double buffer), so a thread
   always has its next state in flight while it computes the current one (step_vec_kernel with one
   row a thread spends most of a thread's life not loading: DRAM at 62 % of its peak, ncu).
   Arithmetic and sums exactly step_vec_kernel's (bitwise the forward's at L = 1). H: the state's
   element type (step_vec_kernel's). */
template <typename T, typename H>
__global__ void __launch_bounds__(kThreads) step_loop_kernel(const step_params P) {
    pdl_wait();
    pdl_launch_dependents();
    const int tid = static_cast<int>(threadIdx.x), j = tid & 1;
    const int dl32 = static_cast<int>(blockIdx.y) * (kThreads / 2) + (tid >> 1);
    const int64_t d = dl32, stride = gridDim.x;
    const bool valid = d < P.dim;
    /* one row's loads: the state's two chunks (states 4j .. 4j + 3 and 4j + 8 .. 4j + 11), u, delta, z */
    auto fetch = [&](int64_t b, float (&h0)[4], float (&h1)[4], H *&hp, bool &live, float &x, float &dl, float &zz) {
        const int64_t row = valid && b < P.batch ? (P.idx ? static_cast<int64_t>(P.idx[b]) : b) : -1;
        live = row >= 0 && row < P.ncache;
        hp = static_cast<H *>(P.h) + (live ? row * P.h0 + d * P.h1 : 0);
#pragma unroll
        for (int q = 0; q < 4; q++) h0[q] = h1[q] = 0.0f;
        x = dl = zz = 0.0f;
        if (live) {
            ld_vec<H, 4>(hp, 4 * j, h0);
            ld_vec<H, 4>(hp, 4 * j + 8, h1);
            x = ld<T>(P.u, b * P.u0 + d * P.u1);
            dl = ld<T>(P.dl, b * P.d0 + d * P.d1);
            if (j == 0 && P.z) zz = ld<T>(P.z, b * P.z0 + d * P.z1);
        }
    };
    int64_t b = blockIdx.x;
    float n0[4], n1[4];
    H *np;
    bool nlive;
    float nx, ndl, nzz;
    fetch(b, n0, n1, np, nlive, nx, ndl, nzz);
    float A2[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (valid) {
        const float4 a0 = reinterpret_cast<const float4 *>(P.A + d * P.a0)[j], a1 = reinterpret_cast<const float4 *>(P.A + d * P.a0)[j + 2];
        A2[0] = a0.x; A2[1] = a0.y; A2[2] = a0.z; A2[3] = a0.w; A2[4] = a1.x; A2[5] = a1.y; A2[6] = a1.z; A2[7] = a1.w;
        if (P.alog) {
#pragma unroll
            for (int k = 0; k < 8; k++) A2[k] = a_of(A2[k], 1);
        }
    }
#pragma unroll
    for (int k = 0; k < 8; k++) A2[k] *= kLog2e;
    const float delta_bias = valid && P.delta_bias ? ldp<T>(P.delta_bias, d * P.bs, P.delta_biasT) : 0.0f;
    const float Dd = valid && P.D ? ldp<T>(P.D, d * P.Ds, P.DT) : 0.0f;
    const int64_t g = !valid || P.G1 ? 0 : dl32 / P.dpg;
    for (; b < P.batch; b += stride) { /* the same trip count for every thread of the block */
        float hv[8] = {n0[0], n0[1], n0[2], n0[3], n1[0], n1[1], n1[2], n1[3]}, Bv[8], Cv[8];
        H *const cp = np;
        const bool live = nlive;
        const float x = nx, dl = ndl, zz = nzz;
        fetch(b + stride, n0, n1, np, nlive, nx, ndl, nzz);
        { /* the state two rows ahead into L2 (no registers): the next fetch then waits on L2 only */
            const int64_t b2 = b + 2 * stride;
            const int64_t row2 = valid && b2 < P.batch ? (P.idx ? static_cast<int64_t>(P.idx[b2]) : b2) : -1;
            if (row2 >= 0 && row2 < P.ncache) pf<H>(P.h, row2 * P.h0 + d * P.h1 + 8 * j);
        }
#pragma unroll
        for (int k = 0; k < 8; k++) Bv[k] = Cv[k] = 0.0f;
        if (live) {
            const int64_t bo = b * P.b0 + g * P.b1, co = b * P.c0 + g * P.c1;
            float t[4];
            ld_vec<T, 4>(P.B, bo + 4 * j, t);
#pragma unroll
            for (int q = 0; q < 4; q++) Bv[q] = t[q];
            ld_vec<T, 4>(P.B, bo + 4 * j + 8, t);
#pragma unroll
            for (int q = 0; q < 4; q++) Bv[4 + q] = t[q];
            ld_vec<T, 8>(P.C, co + 8 * j, Cv);
        }
        const float dt = dt_of(dl + delta_bias, P.softplus != 0, true), dtx = dt * x;
#pragma unroll
        for (int k = 0; k < 8; k++) hv[k] = fmaf(ex2(dt * A2[k]), hv[k], Bv[k] * dtx);
        step_pair_store_y<T, H>(P, hv, Cv, cp, j, valid, live, Dd, x, zz, b, d);
    }
}

/* Decode step, N = 16 on two lanes a channel with the common operands (step_loop_kernel's form),
   one batch row a pair of lanes (blockIdx.x the row, blockIdx.y 64 channels), written for latency:
   a model runs the step after a GEMM, without a programmatic trigger, so a call costs the chain
   of dependent memory round trips a thread waits on, not bandwidth. Every load is issued first,
   in one basic block (no branch: a lane past dim reads channel 0's operands, a missing z / D /
   delta_bias reads another operand's element, and the loaded values are selected away), then
   the state's loads (after P.idx where given); the conversions and the arithmetic follow. (The
   other step kernels load behind branches, and the compiler puts each branch's conversions
   right behind its loads: 4-5 round trips a thread, bench/NOTES.md CONV-CUDA-v7.) Arithmetic and
   sums exactly step_loop_kernel's (bitwise the forward's at L = 1). H: the state's element type.
   (32 channels a block measured level at batch 1 and 16, 5 % faster at 64 x 1536, 11 % slower
   at 64 x 4096; 16 channels slower everywhere: CONV-CUDA-v7.) */
template <typename T, typename H>
__global__ void __launch_bounds__(kThreads) step_lat_kernel(const step_params P) {
    pdl_wait();
    pdl_launch_dependents();
    const int tid = static_cast<int>(threadIdx.x), j = tid & 1;
    const int dl32 = static_cast<int>(blockIdx.y) * (kThreads / 2) + (tid >> 1);
    const int64_t b = blockIdx.x;
    const bool valid = dl32 < P.dim;
    const int64_t d = valid ? dl32 : 0;
    const int64_t g = P.G1 ? 0 : static_cast<int>(d) / P.dpg;
    /* the operands' loads: A (f32, two float4: states 4j .. 4j + 3, 4j + 8 .. 4j + 11), B (the
       same states), C (states 8j .. 8j + 7), u, delta, z, D, delta_bias */
    const float4 *ap = reinterpret_cast<const float4 *>(P.A + d * P.a0);
    const float4 a0 = ap[j], a1 = ap[j + 2];
    float B0[4], B1[4], Cv[8];
    const int64_t bo = b * P.b0 + g * P.b1;
    ld_vec<T, 4>(P.B, bo + 4 * j, B0);
    ld_vec<T, 4>(P.B, bo + 4 * j + 8, B1);
    ld_vec<T, 8>(P.C, b * P.c0 + g * P.c1 + 8 * j, Cv);
    const int64_t xo = b * P.u0 + d * P.u1;
    const float x = ld<T>(P.u, xo), dl = ld<T>(P.dl, b * P.d0 + d * P.d1);
    const float zl = P.z ? ld<T>(P.z, b * P.z0 + d * P.z1) : ld<T>(P.u, xo);
    const float bl = ldp_unpred<T>(P.delta_bias ? P.delta_bias : static_cast<const void *>(P.A), P.delta_bias ? d * P.bs : 0, P.delta_bias ? P.delta_biasT : 0);
    const float Dl = ldp_unpred<T>(P.D ? P.D : static_cast<const void *>(P.A), P.D ? d * P.Ds : 0, P.D ? P.DT : 0);
    /* the state row: after the index where there is one */
    const int64_t row = valid ? (P.idx ? static_cast<int64_t>(P.idx[b]) : b) : -1;
    const bool live = row >= 0 && row < P.ncache;
    H *const hp = static_cast<H *>(P.h) + (live ? row * P.h0 + d * P.h1 : 0);
    float h0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, h1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (live) {
        ld_vec<H, 4>(hp, 4 * j, h0);
        ld_vec<H, 4>(hp, 4 * j + 8, h1);
    }
    float A2[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
    if (P.alog) {
#pragma unroll
        for (int k = 0; k < 8; k++) A2[k] = a_of(A2[k], 1);
    }
#pragma unroll
    for (int k = 0; k < 8; k++) A2[k] *= kLog2e;
    const float delta_bias = P.delta_bias ? bl : 0.0f, Dd = P.D ? Dl : 0.0f, zz = P.z ? zl : 0.0f;
    const float dt = dt_of(dl + delta_bias, P.softplus != 0, true), dtx = dt * x;
    float hv[8] = {h0[0], h0[1], h0[2], h0[3], h1[0], h1[1], h1[2], h1[3]};
    const float Bv[8] = {B0[0], B0[1], B0[2], B0[3], B1[0], B1[1], B1[2], B1[3]};
#pragma unroll
    for (int k = 0; k < 8; k++) hv[k] = fmaf(ex2(dt * A2[k]), hv[k], Bv[k] * dtx);
    step_pair_store_y<T, H>(P, hv, Cv, hp, j, dl32 < P.dim, live, Dd, x, zz, b, d);
}

/* ---------------------------------------------------------------------------------------------- */
/* >>plans           host side: plans (which kernel, grids, workspace)                            */
/* ---------------------------------------------------------------------------------------------- */

const int kFwdNPT = 4;                  /* general forward: states a thread (8 and 16 measured slower, bench/NOTES.md) */
const int64_t kMaxN = 512;              /* N the general kernels run (kThreads threads x 4 states a channel) */
const int64_t kMaxGrid = 0x7fffffff;    /* blocks of a launch's x dimension */
const int64_t kWsAlign = 256;           /* the workspace's sub-buffers are 256-byte aligned (cudaMalloc's alignment) */

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int pow2ceil(int64_t x) { /* x <= 2^30 */
    int p = 1;
    while (p < x) p <<= 1;
    return p;
}

/* Checked arithmetic of the plans' sizes, offsets and grids (non-negative values): a product or
   sum past kSizeLimit clears ok, and the entry refuses the problem (SELSCAN_ERR_SHAPE) before
   anything is launched. Broadcast (zero-stride) inputs make huge logical shapes cheap to
   express, so nothing here may assume the caller could have allocated them. */
const int64_t kSizeLimit = INT64_MAX / 4;
struct sizecalc {
    bool ok = true;
    int64_t mul(int64_t a, int64_t b) {
        if (a < 0 || b < 0 || (a != 0 && b > kSizeLimit / a)) {
            ok = false;
            return 0;
        }
        return a * b;
    }
    int64_t mul(int64_t a, int64_t b, int64_t c) { return mul(mul(a, b), c); }
    int64_t mul(int64_t a, int64_t b, int64_t c, int64_t d) { return mul(mul(a, b, c), d); }
    int64_t add(int64_t a, int64_t b) {
        if (a < 0 || b < 0 || b > kSizeLimit - a) {
            ok = false;
            return 0;
        }
        return a + b;
    }
    int64_t al(int64_t x) { return mul(cdiv(x, kWsAlign), kWsAlign); } /* x <= kSizeLimit: no overflow inside */
};

/* an error status, with the operand and the rule stored in diag */
static selscan_status fail(selscan_diag *dg, selscan_status st, const char *operand, selscan_rule code) {
    return selscan__fail(dg, st, operand, code);
}
static selscan_status fail_size(selscan_diag *dg) { return fail(dg, SELSCAN_ERR_SHAPE, "workspace", SELSCAN_RULE_SIZE_OVERFLOWS); }
static selscan_status fail_grid(selscan_diag *dg) { return fail(dg, SELSCAN_ERR_UNSUPPORTED, "dim", SELSCAN_RULE_GRID); }
static selscan_status fail_n(selscan_diag *dg) { return fail(dg, SELSCAN_ERR_UNSUPPORTED, "dstate", SELSCAN_RULE_DSTATE_CUDA); }

/* The grids of the small kernels a call may launch (chunk carries, empty sequences; the
   backward's row and dB / dC reductions): every x dimension within kMaxGrid. */
static bool aux_grids_fit(const selscan__prob &q, bool bwd, sizecalc &c) {
    const int64_t carry = cdiv(c.mul(q.batch, q.dim, q.N), 256), empty = cdiv(c.mul(q.nseq, q.dim, q.N), 256);
    if (!bwd) return carry <= kMaxGrid && empty <= kMaxGrid;
    const int64_t rows = cdiv(c.mul(q.dim, q.N), kRedX), bc = cdiv(c.mul(c.mul(q.batch, q.G), c.mul(q.N, q.L)), 256);
    return carry <= kMaxGrid && empty <= kMaxGrid && rows <= kMaxGrid && bc <= kMaxGrid;
}

struct fwd_plan {
    int NT, CH;          /* general kernel: threads a channel (kFwdNPT states each), channels a block */
    int64_t ncb, nlch, lchunk;
    int64_t ws;          /* workspace bytes (the L-chunk buffers), before the alignment slack: the size reported */
    int64_t ws_used;     /* of those, what the kernels chosen for this device use (the short-prefill forward: none) */
    int fastS;           /* fast forward (fwd_fast_kernel, 2 threads a channel): states a thread; 0: none */
    int fastCL;          /* its channels-last (any L strides) instantiation */
    int shortK;          /* short-prefill forward (fwd_short_kernel) with K steps a lane; 0: not used */
};

/* A positive value of the current device, ask(dev), asked once a device and kept in known (0:
   not asked yet, -1: could not be asked); fallback when it cannot be asked. Concurrent first
   calls store the same value. */
template <typename F> static int per_device(volatile int (&known)[64], int fallback, F ask) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return fallback;
    }
    const bool keep = dev >= 0 && dev < 64;
    if (keep && known[dev] != 0) return known[dev] > 0 ? known[dev] : fallback;
    int v = ask(dev);
    if (v <= 0) {
        (void)cudaGetLastError();
        v = -1;
    }
    if (keep) known[dev] = v;
    return v > 0 ? v : fallback;
}
/* An attribute of the current device, asked once a device; 0 when it cannot be asked */
static int current_device_attr(cudaDeviceAttr a, volatile int (&known)[64]) {
    return per_device(known, 0, [&](int dev) {
        int v = 0;
        return cudaDeviceGetAttribute(&v, a, dev) == cudaSuccess ? v : 0;
    });
}

/* Multiprocessors the plans fill a wave of blocks on (L chunks): the current device's (132, an
   H100/H200's, when it cannot be asked), at most kPlanMaxSMs. Workspace sizes are planned for
   kPlanMaxSMs: a plan's workspace only grows with the count, so a size does not depend on the
   device. */
const int64_t kPlanMaxSMs = 160;
static int64_t sm_count() {
    static volatile int known[64];
    const int64_t n = current_device_attr(cudaDevAttrMultiProcessorCount, known);
    return n <= 0 ? 132 : n > kPlanMaxSMs ? kPlanMaxSMs : n;
}

/* fast forward blocks in flight for S states a thread */
static int64_t fast_fwd_slots(int S, int64_t sms) { return sms * (S == 4 ? fast_fwd_minblocks<4>() : fast_fwd_minblocks<8>()); }

/* L chunks of a pass (the forward's cost 2x the exponentials, the fast backward's an extra pass
   over dy): only when the channels give under half a wave of blocks, then as many as fill one
   wave of `slots` blocks (a block's steps are a serial chain); at most one a checkpoint interval.
   blocks >= 1. */
static int64_t lchunk_count(int64_t blocks, int64_t slots, int64_t nck) {
    int64_t nl = blocks * 2 > slots ? 1 : slots / blocks;
    if (nl > nck) nl = nck;
    return nl < 1 ? 1 : nl;
}

/* The fast kernels index steps and B / C rows (from the group's base) in 32 bits */
static bool fast_steps_fit(const selscan__prob &q) {
    const int64_t lim = static_cast<int64_t>(1) << 30;
    return q.L < lim && (q.N - 1) * q.B.s[2] + (q.L - 1) * q.B.s[3] < lim && (q.N - 1) * q.C.s[2] + (q.L - 1) * q.C.s[3] < lim;
}
/* a (batch, dim, L) operand's L stride fits the fast kernels' 32-bit in-row offsets (16 steps) */
static bool fast_lstride(const selscan__ten &t) { return !t.data || t.s[2] < (static_cast<int64_t>(1) << 26); }
/* ... and is 1 (the unit-stride instantiations); the inputs both passes read all have it */
static bool unit_lstride(const selscan__ten &t) { return !t.data || t.s[2] == 1; }
static bool unit_inputs(const selscan__prob &q) {
    return unit_lstride(q.u) && unit_lstride(q.delta) && unit_lstride(q.z) && q.B.s[3] == 1 && q.C.s[3] == 1;
}

/* Steps a lane of the short-prefill forward for q (sblocks blocks; 0: not that kernel), from the
   H200's table (bench/NOTES.md CUDA-v61): 4 (128-step chunks) up to L = 128; 16 for 2-byte types
   from L = 1,024 where one wave holds the grid at 3 blocks an SM (its 158 registers and 64 KB of
   shared memory), 8 otherwise; f32 (whose 8-step form has 64 KB of shared memory, 3 blocks an SM)
   8 where one wave holds it, else 4, and the fast forward from L = 2,048 (faster there). */
static int short_steps(const selscan__prob &q, int64_t sblocks, int64_t sms) {
    const bool one_wave = sblocks <= 3 * sms;
    if (q.L <= 128) return 4;
    if (q.dt == SELSCAN_F32) return q.L > 1024 ? 0 : one_wave ? 8 : 4;
    return q.L >= 1024 && one_wave ? 16 : 8;
}

/* The fast forward's layout for q: two threads a channel with 4 (N <= 8) or 8 (N <= 16) states
   each (N <= 8 with 8 states and one thread a channel ran 1.3-1.7x slower: half the threads, 168
   registers; bench/NOTES.md CUDA-v25). false where the fast forward does not apply (the general
   kernels then). need_y: y is written (the backward's checkpoint pass writes none). */
struct fast_fwd_layout {
    int S;                      /* states a thread */
    int cl;                     /* the channels-last (any L strides) instantiation */
    int64_t ncb, blocks, nck;   /* channel blocks a (batch row, group), blocks of one L chunk, checkpoint intervals */
};
static bool fast_forward_layout(const selscan__prob &q, bool need_y, fast_fwd_layout *fl) {
    const bool ok = !q.cu && !q.fixB && !q.fixC && (q.y.data || !need_y) && q.N <= 16 && fast_lstride(q.u) && fast_lstride(q.delta) &&
                    fast_lstride(q.y) && fast_lstride(q.z);
    if (!ok || !fast_steps_fit(q)) return false;
    /* channels-last (an L stride not 1): the any-stride instantiation, which has 8 states a thread */
    const bool cl = !(unit_inputs(q) && unit_lstride(q.y));
    if (cl && !SELSCAN_CUDA_CHANNELS_LAST) return false; /* not compiled: the general kernels */
    const int tpc = 2;
    sizecalc c;
    fl->S = q.N <= 8 && !cl ? 4 : 8;
    fl->cl = cl;
    fl->ncb = cdiv(q.dpg, kThreads / tpc);
    fl->blocks = c.mul(q.batch, q.G, fl->ncb);
    fl->nck = cdiv(q.L, kCK);
    return c.ok;
}

/* The fast forward's L chunk in steps: when the channels give under half a wave of blocks, L
   chunks as in the general kernel (chunk scans from 0, carry, rescan) to fill one. Chunks pay off
   only when they shorten the serial chain enough: chunked, the forward runs two passes of lchunk
   steps (chunk scans, rescan) and a carry, against one pass of L steps; a pass costs ~5 us before
   its first step and a step ~0.09 us when few blocks run (H200: L = 128 in two chunks 22 us, in
   one 17; bench/NOTES.md CUDA-v60). So one pass (lchunk = L) unless chunks save 64 steps. */
static int64_t fast_forward_lchunk(const selscan__prob &q, const fast_fwd_layout &fl, int64_t sms) {
    const int64_t nl = lchunk_count(fl.blocks, fast_fwd_slots(fl.S, sms), fl.nck);
    const int64_t lchunk = cdiv(fl.nck, nl) * kCK;
    return q.L - 2 * lchunk < 64 ? q.L : lchunk;
}

/* The fast forward with L chunks of lchunk steps into pl (fastS, fastCL, ncb, nlch, lchunk, ws);
   false, pl unchanged, where its grid or workspace does not fit (the general kernels then, whose
   plan refuses what they cannot run). */
static bool fast_forward_chunks(const selscan__prob &q, const fast_fwd_layout &fl, int64_t lchunk, fwd_plan *pl) {
    sizecalc c;
    const int64_t nlch = cdiv(q.L, lchunk);
    const int64_t grid = c.mul(fl.blocks, nlch), ws = nlch > 1 ? c.mul(3, c.al(c.mul(q.batch, q.dim, c.mul(nlch, q.N, 4)))) : 0;
    if (!c.ok || grid > kMaxGrid) return false;
    pl->fastS = fl.S;
    pl->fastCL = fl.cl;
    pl->ncb = fl.ncb;
    pl->nlch = nlch;
    pl->lchunk = lchunk;
    pl->ws = ws;
    return true;
}

/* Where the short-prefill forward (fwd_short_kernel) can run the fast forward's problem: rows long
   enough for a warp's 32 lanes (L >= 64), y wanted, no checkpoint (it keeps no state at the
   checkpoint steps), unit L strides; *sblocks its grid. It uses no workspace (ws_used 0); ws stays
   the fast forward's, so that the reported size does not depend on which kernel a device runs. */
static bool short_forward_fits(const selscan__prob &q, const fast_fwd_layout &fl, bool need_y, bool ck, int64_t *sblocks) {
    const bool short_ok = need_y && !ck && !fl.cl && q.L >= 64; /* need_y: fast_forward_layout checked y is given */
    sizecalc c;
    *sblocks = c.mul(q.batch, q.G, cdiv(q.dpg, kShortWarps));
    return short_ok && c.ok && *sblocks <= kMaxGrid;
}
/* Its steps a lane where the fast forward would run under half a wave of blocks (L chunks, or too
   few channels for even one chunk a block to pay); 0: the fast forward */
static int short_forward_steps(const selscan__prob &q, const fast_fwd_layout &fl, int64_t sblocks, int64_t sms) {
    sizecalc c;
    return c.mul(fl.blocks, 2) <= fast_fwd_slots(fl.S, sms) ? short_steps(q, sblocks, sms) : 0;
}

/* The fast forward's plan for q (fastS 0 when it does not apply), and the short-prefill forward
   where it replaces it (shortK). */
static void plan_fast_forward(const selscan__prob &q, int64_t sms, fwd_plan *pl, bool need_y, bool ck) {
    pl->fastS = pl->fastCL = pl->shortK = 0;
    fast_fwd_layout fl;
    int64_t sblocks;
    if (!fast_forward_layout(q, need_y, &fl) || !fast_forward_chunks(q, fl, fast_forward_lchunk(q, fl, sms), pl)) return;
    if (short_forward_fits(q, fl, need_y, ck, &sblocks)) pl->shortK = short_forward_steps(q, fl, sblocks, sms);
}

/* The general forward's layout (NT, CH, ncb; no fast kernel yet) and its blocks of one L chunk */
static selscan_status plan_forward_layout(const selscan__prob &q, fwd_plan *pl, int64_t *blocks, selscan_diag *dg) {
    if (q.N > kMaxN) return fail_n(dg);
    sizecalc c;
    pl->NT = pow2ceil(cdiv(q.N, kFwdNPT));
    pl->CH = kThreads / pl->NT;
    pl->ncb = cdiv(q.dpg, pl->CH);
    pl->fastS = pl->fastCL = pl->shortK = 0;
    *blocks = c.mul(q.batch, q.G, pl->ncb);
    return c.ok ? SELSCAN_OK : fail_size(dg);
}
/* The general forward's L chunks (2x the exponentials) only when the channels give less than one
   wave of blocks, then as many as fill one wave (SELSCAN_CUDA_FWD_MINBLOCKS an SM): a block's
   steps are a serial chain */
static int64_t forward_lchunks(const selscan__prob &q, int64_t blocks, int64_t sms) {
    return lchunk_count(blocks, sms * SELSCAN_CUDA_FWD_MINBLOCKS, cdiv(q.L, kCK));
}
/* The general forward in nl L chunks (at most one a checkpoint interval): lchunk, nlch, ws, and
   the grids checked */
static selscan_status plan_forward_chunks(const selscan__prob &q, int64_t blocks, int64_t nl, fwd_plan *pl, selscan_diag *dg) {
    sizecalc c;
    const int64_t nck = cdiv(q.L, kCK);
    if (nl > nck) nl = nck;
    pl->lchunk = cdiv(nck, nl) * kCK;
    pl->nlch = cdiv(q.L, pl->lchunk);
    pl->ws = pl->nlch > 1 ? c.mul(3, c.al(c.mul(q.batch, q.dim, c.mul(pl->nlch, q.N, 4)))) : 0;
    const int64_t grid = c.mul(blocks, pl->nlch);
    const bool aux = aux_grids_fit(q, false, c);
    if (!c.ok) return fail_size(dg);
    if (grid > kMaxGrid || !aux) return fail_grid(dg);
    return SELSCAN_OK;
}

/* The forward's plan: the general kernel's layout and L chunks, then the fast forward where it
   applies (try_fast). */
static selscan_status plan_forward(const selscan__prob &q, int64_t sms, fwd_plan *pl, bool try_fast, bool ck, selscan_diag *dg) {
    selscan_status st;
    int64_t blocks;
    if ((st = plan_forward_layout(q, pl, &blocks, dg)) != SELSCAN_OK) return st;
    if ((st = plan_forward_chunks(q, blocks, forward_lchunks(q, blocks, sms), pl, dg)) != SELSCAN_OK) return st;
    if (try_fast) plan_fast_forward(q, sms, pl, true, ck);
    pl->ws_used = pl->shortK ? 0 : pl->ws;
    return SELSCAN_OK;
}

struct bwd_plan {
    int NT, CH;
    int64_t ncb, nck, nck16, nlch, lchunk;
    int64_t ck_bytes; /* the forward's (64-step) checkpoint */
    int64_t ws;       /* workspace bytes, before the alignment slack; offsets of its parts: */
    int64_t off_ck16, off_S, off_P, off_V, off_M, off_Din, off_dA, off_dD, off_ddelta_bias, off_dBf, off_dCf, off_dB, off_dC;
    int64_t off_fws;  /* fast path without a checkpoint: the forward's L-chunk buffers */
    int64_t off_scr;  /* fast path: per-block scratch */
    fwd_plan fp;      /* the pass that writes the kSub-step checkpoint (the fast path: the 64-step one) */
    int fastTPC;      /* fast backward (bwd_fast_kernel): threads a channel; 0: the general kernel */
    int fastCL;       /* its channels-last (any L strides) instantiation */
};

constexpr int kFastBwdS = SELSCAN_CUDA_FAST_BWD_STATES;
/* fast backward blocks in flight for S states a thread */
static int64_t fast_bwd_slots(int S, int64_t sms) { return sms * (S == 4 ? fast_bwd_minblocks<4>() : fast_bwd_minblocks<8>()); }

/* The partial-sum part of a backward's workspace (after `o` bytes), given its L chunks. */
static int64_t plan_partials(const selscan__prob &q, const selscan__grd &r, bwd_plan *pl, int64_t o, sizecalc &c) {
    const int64_t rows = c.mul(q.batch, q.dim);
    const int64_t vm = pl->nlch > 1 ? c.al(c.mul(rows, pl->nlch, q.N, 4)) : 0;
    pl->off_V = o; o = c.add(o, vm);
    pl->off_M = o; o = c.add(o, vm);
    pl->off_Din = o; o = c.add(o, vm);
    const int64_t prows = c.mul(rows, pl->nlch); /* partial sums per (chunk, batch row) */
    pl->off_dA = o; o = c.add(o, r.dA.data ? c.al(c.mul(prows, q.N, 4)) : 0);
    pl->off_dD = o; o = c.add(o, r.dD.data ? c.al(c.mul(prows, 4)) : 0);
    pl->off_ddelta_bias = o; o = c.add(o, r.ddelta_bias.data ? c.al(c.mul(prows, 4)) : 0);
    pl->off_dBf = o; o = c.add(o, r.dB.data && q.fixB ? c.al(c.mul(prows, q.N, 4)) : 0);
    pl->off_dCf = o; o = c.add(o, r.dC.data && q.fixC ? c.al(c.mul(prows, q.N, 4)) : 0);
    const int64_t bc = c.al(c.mul(c.mul(pl->ncb, q.batch, q.G), c.mul(q.N, q.L, 4)));
    pl->off_dB = o; o = c.add(o, r.dB.data && !q.fixB ? bc : 0);
    pl->off_dC = o; o = c.add(o, r.dC.data && !q.fixC ? bc : 0);
    return o;
}

/* The fast backward's plan (false: it does not apply): the problems of the fast forward (the
   channels-last instantiation where an L stride is not 1); without a checkpoint the fast forward
   writes one first. Two threads a channel with 8 (N <= 16) or 4 (N <= 8) states each (N <= 8
   with 8 states and one thread a channel: 1.3-1.9x slower, bench/NOTES.md CUDA-v26) or, with
   SELSCAN_CUDA_FAST_BWD_STATES 4, 4 states and 4 threads a channel. */
static bool plan_fast_backward(const selscan__prob &q, const selscan__grd &r, bool have_ck, int64_t sms, bwd_plan *pl) {
    if (q.cu || q.fixB || q.fixC || q.N > 16 || !fast_lstride(q.u) || !fast_lstride(q.delta) || !fast_lstride(r.dy) ||
        !fast_lstride(q.z) || !fast_lstride(r.du) || !fast_lstride(r.ddelta) || !fast_lstride(r.dz) || !fast_steps_fit(q))
        return false;
    pl->fastCL = !(unit_inputs(q) && unit_lstride(r.dy) && unit_lstride(r.du) && unit_lstride(r.ddelta) && unit_lstride(r.dz));
    if (pl->fastCL && (kFastBwdS != 8 || !SELSCAN_CUDA_CHANNELS_LAST)) return false; /* compiled with 2 threads a channel, if at all */
    const int tpc = kFastBwdS == 8 ? 2 : 4, S = kFastBwdS == 8 && (q.N > 8 || pl->fastCL) ? 8 : 4;
    sizecalc c;
    const int64_t rows = c.mul(q.batch, q.dim), nck = cdiv(q.L, kCK);
    pl->fastTPC = tpc;
    pl->NT = 0; /* the general kernels' layout: unused */
    pl->CH = kThreads / tpc;
    pl->ncb = cdiv(q.dpg, pl->CH);
    pl->nck = nck;
    pl->ck_bytes = c.mul(rows, nck, q.N, 4);
    const int64_t blocks = c.mul(q.batch, q.G, pl->ncb);
    if (!c.ok) return false;
    pl->lchunk = cdiv(nck, lchunk_count(blocks, fast_bwd_slots(S, sms), nck)) * kCK; /* as the fast forward */
    pl->nlch = cdiv(q.L, pl->lchunk);
    int64_t o = 0;
    if (!have_ck) {
        plan_fast_forward(q, sms, &pl->fp, false, true);
        if (!pl->fp.fastS) return false;
        pl->off_ck16 = o; o = c.add(o, c.al(pl->ck_bytes)); /* the 64-step checkpoint */
        pl->off_fws = o; o = c.add(o, pl->fp.ws);
    }
    const int64_t grid = c.mul(blocks, pl->nlch);
    pl->off_scr = o; o = c.add(o, c.al(c.mul(grid, (kBTS - 1) * 8 * kThreads * 4)));
    pl->ws = plan_partials(q, r, pl, o, c);
    const bool aux = aux_grids_fit(q, true, c);
    return c.ok && aux && grid <= kMaxGrid;
}

static selscan_status plan_backward(const selscan__prob &q, const selscan__grd &r, bool have_ck, int64_t sms, bwd_plan *pl,
                                    selscan_diag *dg) {
    if (q.N > kMaxN) return fail_n(dg);
    if (plan_fast_backward(q, r, have_ck, sms, pl)) return SELSCAN_OK;
    selscan_status st;
    sizecalc c;
    pl->fastTPC = pl->fastCL = 0;
    pl->NT = pow2ceil(cdiv(q.N, kBwdNPT));
    pl->CH = kThreads / pl->NT;
    pl->ncb = cdiv(q.dpg, pl->CH);
    pl->nck = cdiv(q.L, kCK);
    pl->nck16 = cdiv(q.L, kSub);
    const int64_t rows = c.mul(q.batch, q.dim);
    pl->ck_bytes = c.mul(rows, pl->nck, q.N, 4);
    const int64_t ck16 = c.al(c.mul(rows, pl->nck16, q.N, 4));
    int64_t o = 0;
    pl->off_ck16 = o; o = c.add(o, ck16);
    if (!have_ck) { /* S, P of a pass-1 forward with kSub-step chunks */
        pl->off_S = o; o = c.add(o, ck16);
        pl->off_P = o; o = c.add(o, ck16);
    }
    /* L chunks when the channels alone give less than one full wave of blocks (lm-long,
       lm-prefill): as many chunks as fill one wave (SELSCAN_CUDA_BWD_MINBLOCKS an SM), so no second, partial wave */
    const int64_t blocks = c.mul(q.batch, q.G, pl->ncb), slots = sms * SELSCAN_CUDA_BWD_MINBLOCKS;
    if (!c.ok) return fail_size(dg);
    int64_t nl = blocks >= slots ? 1 : slots / blocks;
    if (nl > pl->nck16) nl = pl->nck16;
    pl->lchunk = cdiv(pl->nck16, nl) * kSub;
    pl->nlch = cdiv(q.L, pl->lchunk);
    pl->ws = plan_partials(q, r, pl, o, c);
    if ((st = plan_forward(q, sms, &pl->fp, false, true, dg)) != SELSCAN_OK) return st;
    if (have_ck) { pl->fp.lchunk = kCK; pl->fp.nlch = pl->nck; }    /* from the given checkpoint */
    else { pl->fp.lchunk = kSub; pl->fp.nlch = pl->nck16; }         /* pass 1 + carry */
    const int64_t grid = c.mul(blocks, pl->nlch), fgrid = c.mul(q.batch, q.G, pl->fp.ncb, pl->fp.nlch);
    const int64_t lgrid = cdiv(c.mul(rows, pl->NT, pl->nlch), kThreads);
    const bool aux = aux_grids_fit(q, true, c);
    if (!c.ok) return fail_size(dg);
    if (grid > kMaxGrid || fgrid > kMaxGrid || lgrid > kMaxGrid || !aux) return fail_grid(dg);
    return SELSCAN_OK;
}

/* Bytes of the forward's checkpoint: rows * dim * ceil(L / 64) * N floats; -1 on overflow. */
static int64_t checkpoint_bytes(const selscan__prob &q) {
    sizecalc c;
    const int64_t b = c.mul(c.mul(q.batch, q.dim), cdiv(q.L, kCK), q.N, 4);
    return c.ok ? b : -1;
}

/* The workspace a plan needs (ws bytes, 256-byte aligned parts) from any pointer: the size the
   queries report includes kWsAlign - 1 bytes of slack, and the launchers align the pointer up. */
static size_t ws_reported(int64_t ws) { return ws ? static_cast<size_t>(ws + kWsAlign - 1) : 0; }
static selscan_status check_workspace(void *workspace, size_t bytes, int64_t need, char **aligned, selscan_diag *dg) {
    *aligned = NULL;
    if (!need) return SELSCAN_OK;
    if (!workspace) return fail(dg, SELSCAN_ERR_WORKSPACE, "workspace", SELSCAN_RULE_NULL);
    const uintptr_t p = reinterpret_cast<uintptr_t>(workspace);
    const size_t pad = static_cast<size_t>((kWsAlign - static_cast<int64_t>(p % kWsAlign)) % kWsAlign);
    if (bytes < pad || bytes - pad < static_cast<size_t>(need)) return fail(dg, SELSCAN_ERR_WORKSPACE, "workspace", SELSCAN_RULE_TOO_SMALL);
    *aligned = static_cast<char *>(workspace) + pad;
    return SELSCAN_OK;
}

/* A workspace from the caller's x->workspace_alloc where none was given and the plan needs some
   (need bytes, before the alignment slack): called after every check, before any launch. */
static selscan_status take_workspace(const selscan_cuda_ext *x, int64_t need, void **workspace, size_t *bytes, selscan_diag *dg) {
    if (*workspace || !need || !x || !x->workspace_alloc) return SELSCAN_OK;
    *bytes = ws_reported(need);
    *workspace = x->workspace_alloc(x->workspace_ctx, *bytes);
    return *workspace ? SELSCAN_OK : fail(dg, SELSCAN_ERR_WORKSPACE, "workspace", SELSCAN_RULE_ALLOC_FAILED);
}

/* Whether the fast forward kernels this TU compiled take p (a valid problem: its sizes, flags and
   strides; data pointers only tested for NULL, no device asked): the plan's own answer for the
   bindings (bindings/common's selscan_binding_cuda_fast_forward), which copy L-strided operands
   to unit L strides where that sends a problem to the fast kernels, instead of restating the
   plan's conditions. */
static inline bool fast_forward_takes(const selscan_problem *p) { /* inline: unused where no binding asks (-Wunused-function) */
    selscan__prob q;
    fwd_plan pl;
    if (selscan__check_problem(p, &q, 1) != SELSCAN_OK) return false;
    return plan_forward(q, kPlanMaxSMs, &pl, true, false, NULL) == SELSCAN_OK && pl.fastS != 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* >>launch          host side: launches                                                          */
/* ---------------------------------------------------------------------------------------------- */

static selscan_status cuda_fail(cudaError_t e, cudaError_t *out) {
    if (out) *out = e;
    return SELSCAN_ERR_CUDA;
}
#define SELSCAN__CU(call)                                                                          \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) return cuda_fail(e_, err);                                          \
    } while (0)
#define SELSCAN__LAUNCHED() SELSCAN__CU(cudaGetLastError())

/* Opts kernel in to smem bytes of dynamic shared memory on the current device, once a device:
   the attribute persists, and cudaFuncSetAttribute costs microseconds of host time a call (seen
   in a framework op's per-call profile). `done` is the kernel's own record (a static array at
   the call site, one per kernel); concurrent first calls set the same value. A cudaDeviceReset
   drops the attribute but not this record: a program that resets a device and then uses selscan
   on it again sees SELSCAN_ERR_CUDA from those kernels' launches. */
static cudaError_t allow_smem(const void *kernel, int smem, volatile int (&done)[64]) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    const bool known = dev >= 0 && dev < 64;
    if (known && done[dev] >= smem) return cudaSuccess;
    if ((e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) == cudaSuccess && known)
        done[dev] = smem;
    return e;
}

/* The one place a selscan_dtype becomes an element type: f(dtype_tag<T>()) with T float, __half
   or __nv_bfloat16; f is a generic lambda, `using T = typename decltype(tag)::type;`. Called
   qualified (argument-dependent lookup would also find a user's global with_dtype). */
template <typename T> struct dtype_tag {
    typedef T type;
};
template <typename F> static auto with_dtype(selscan_dtype dt, F &&f) -> decltype(f(dtype_tag<float>())) {
    if (dt == SELSCAN_F16) return f(dtype_tag<__half>());
    if (dt == SELSCAN_BF16) return f(dtype_tag<__nv_bfloat16>());
    return f(dtype_tag<float>());
}

/* Launch k on s; with programmatic dependent launch where the device has it (compute capability
   9.0+; SELSCAN_CUDA_NO_PDL turns it off): k must start with pdl_wait(). Errors: cudaGetLastError. */
static bool pdl_available() {
#ifdef SELSCAN_CUDA_NO_PDL
    return false;
#else
    static volatile int known[64]; /* the compute capability's major number, per device */
    return current_device_attr(cudaDevAttrComputeCapabilityMajor, known) >= 9;
#endif
}
template <typename... KArgs, typename... Args>
static void launch_pdl(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl_available() ? 1 : 0;
    (void)cudaLaunchKernelEx(&cfg, k, args...);
}

/* blocks of t threads for n; the plans checked it fits a grid */
static unsigned nblocks(int64_t n, int t) { return static_cast<unsigned>(cdiv(n, t)); }

/* P (scan_params or bwd_params) zeroed, then the problem's fields */
template <typename Prm> static void fill_problem(Prm &P, const selscan__prob &q, const int64_t *dcu) {
    memset(&P, 0, sizeof P);
    P.batch = q.batch; P.dim = q.dim; P.L = q.L; P.N = q.N; P.G = q.G; P.dpg = q.dpg; P.nseq = q.nseq;
    P.softplus = q.softplus; P.fixB = q.fixB; P.fixC = q.fixC;
    P.cu = q.cu ? dcu : NULL;
    SELSCAN__SCAN_OPERANDS(SELSCAN__CUDA_CT, &q)
    P.nck = cdiv(q.L, kCK);
    P.ckmask = kCK - 1;
    P.ckshift = 6;
}

/* Pad states: a kernel's state tiling holds np states a channel (threads a channel x states a
   thread), B = C = 0 and A = 0 past N. An infinite u (dt u) or dy times such a 0 is NaN, which the
   sums over n (y, du, ddt) must not see, so where N < np the kernels take their PADS
   instantiation, which keeps those states and their gradients at 0 (a select an element: a
   kernel template parameter chosen here, so that the unpadded shapes' code is unchanged). The
   L-chunk passes (LOCAL) sum nothing over n and write only n < N: no PADS there. */
static bool pad_states(int64_t N, int64_t np) { return N < np; }

/* the general forward kernel (LOCAL: pass 1 of the L-chunked forward) */
template <bool LOCAL>
static selscan_status launch_fwd(selscan_dtype dt, const scan_params &P, unsigned grid, cudaStream_t stream, cudaError_t *err) {
    const bool pads = !LOCAL && P.y.p && pad_states(P.N, P.NT * kFwdNPT);
    return selscan_cuda_detail::with_dtype(dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const size_t smem = fwd_smem(P.NT, kFwdNPT, P.CH);
        auto go = [&](auto pt) -> selscan_status {
            constexpr bool PADS = !LOCAL && decltype(pt)::value;
            static volatile int done[64]; /* one per (T, LOCAL, PADS): this lambda's instantiation */
            if (smem > 48 * 1024)
                SELSCAN__CU(allow_smem(reinterpret_cast<const void *>(fwd_kernel<T, kFwdNPT, LOCAL, PADS>), static_cast<int>(smem), done));
            fwd_kernel<T, kFwdNPT, LOCAL, PADS><<<grid, kThreads, smem, stream>>>(P);
            SELSCAN__LAUNCHED();
            return SELSCAN_OK;
        };
        return pads ? go(std::true_type()) : go(std::false_type());
    });
}

/* The L-chunked forward's buffers in the workspace: chunk end states S, decay products P and the
   carried-in states Hin (count floats each, 256-byte aligned; Hin is the checkpoint when into_ck). */
static void chunk_buffers(scan_params &P, char *ws, int64_t count, bool into_ck) {
    const int64_t part = cdiv(count * 4, kWsAlign) * kWsAlign;
    P.S = reinterpret_cast<float *>(ws);
    P.P = reinterpret_cast<float *>(ws + part);
    P.Hin = into_ck ? P.ck : reinterpret_cast<float *>(ws + 2 * part);
}

/* the fast forward kernel for P's N and layout */
template <bool LOCAL> static void launch_fwd_fast(selscan_dtype dt, const scan_params &P, unsigned grid, cudaStream_t stream) {
    selscan_cuda_detail::with_dtype(dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        /* S states a thread, 2 threads a channel; PADS (pad_states) where a y is summed */
        auto go = [&](auto s, auto cl) {
            constexpr int S = decltype(s)::value;
            constexpr bool CL = decltype(cl)::value;
            if (!LOCAL && P.y.p && pad_states(P.N, 2 * S)) launch_pdl(fwd_fast_kernel<T, S, 2, LOCAL, CL, !LOCAL>, grid, kThreads, 0, stream, P);
            else launch_pdl(fwd_fast_kernel<T, S, 2, LOCAL, CL, false>, grid, kThreads, 0, stream, P);
        };
#if SELSCAN_CUDA_CHANNELS_LAST
        if (P.cl) go(std::integral_constant<int, 8>(), std::true_type()); /* 8 states only: compile time */
        else
#endif
        if (P.N <= 8) go(std::integral_constant<int, 4>(), std::false_type());
        else go(std::integral_constant<int, 8>(), std::false_type());
    });
}

/* The fast forward: [chunk scans, carry,] scan. */
static selscan_status run_fast_forward(const selscan__prob &q, scan_params P, const fwd_plan &fp, char *ws, cudaStream_t stream,
                                       cudaError_t *err) {
    P.ncb = fp.ncb; P.lchunk = fp.lchunk; P.nlch = fp.nlch; P.cl = fp.fastCL;
    const unsigned grid = static_cast<unsigned>(q.batch * q.G * fp.ncb * fp.nlch);
    if (fp.nlch > 1) {
        const int64_t rows = q.batch * q.dim;
        chunk_buffers(P, ws, rows * fp.nlch * q.N, false);
        launch_fwd_fast<true>(q.dt, P, grid, stream);
        SELSCAN__LAUNCHED();
        launch_pdl(carry_kernel, nblocks(rows * q.N, 256), 256, 0, stream, static_cast<const float *>(P.S), static_cast<const float *>(P.P),
                   P.Hin, rows, fp.nlch, static_cast<int64_t>(q.N));
        SELSCAN__LAUNCHED();
    }
    launch_fwd_fast<false>(q.dt, P, grid, stream);
    SELSCAN__LAUNCHED();
    return SELSCAN_OK;
}

/* The short-prefill forward: one launch, kShortWarps channels a block, K steps a lane, the
   states padded to 8 or 16. */
template <typename T, int K, int NS> static selscan_status launch_fwd_short_t(const scan_params &P, unsigned grid, cudaStream_t stream,
                                                                           cudaError_t *err) {
    constexpr int SG = K >= 16 ? 1 : SELSCAN_CUDA_SHORT_FWD_STATES, smem = static_cast<int>(short_smem<T, K, NS>());
    static volatile int done[64];
    if (smem > 48 * 1024) SELSCAN__CU(allow_smem(reinterpret_cast<const void *>(fwd_short_kernel<T, K, NS, SG>), smem, done));
    launch_pdl(fwd_short_kernel<T, K, NS, SG>, grid, kShortWarps * 32, static_cast<size_t>(smem), stream, P);
    SELSCAN__LAUNCHED();
    return SELSCAN_OK;
}
template <typename T, int K> static selscan_status launch_fwd_short_k(const scan_params &P, unsigned grid, cudaStream_t stream, cudaError_t *err) {
    return P.N <= 8 ? launch_fwd_short_t<T, K, 8>(P, grid, stream, err) : launch_fwd_short_t<T, K, 16>(P, grid, stream, err);
}
static selscan_status run_short_forward(const selscan__prob &q, scan_params P, const fwd_plan &fp, cudaStream_t stream, cudaError_t *err) {
    P.ncb = cdiv(q.dpg, kShortWarps);
    const unsigned grid = static_cast<unsigned>(q.batch * q.G * P.ncb);
    return selscan_cuda_detail::with_dtype(q.dt, [&](auto tag) -> selscan_status {
        using T = typename decltype(tag)::type;
        if (fp.shortK == 4) return launch_fwd_short_k<T, 4>(P, grid, stream, err);
        if constexpr (sizeof(T) == 2) /* 16 steps a lane: 2-byte types only (f32's B / C chunk: 128 KB) */
            if (fp.shortK == 16) return launch_fwd_short_k<T, 16>(P, grid, stream, err);
        return launch_fwd_short_k<T, 8>(P, grid, stream, err);
    });
}

/* h_last (forward: src h0) or dh0 (backward: src dh_last) of the empty packed sequences */
static selscan_status run_empty_seqs(const selscan__prob &q, const int64_t *dcu, const ct &src, const ct &dst, cudaStream_t stream,
                                     cudaError_t *err) {
    bool empty = false;
    for (int64_t s = 0; s < q.nseq; s++) empty = empty || q.cu[s] == q.cu[s + 1];
    if (empty) {
        empty_seq_kernel<<<nblocks(q.nseq * q.dim * q.N, 256), 256, 0, stream>>>(dcu, q.nseq, q.dim, q.N, src, dst);
        SELSCAN__LAUNCHED();
    }
    return SELSCAN_OK;
}

/* The general forward: [pass 1, carry,] pass 3. */
static selscan_status run_forward(const selscan__prob &q, scan_params P, const fwd_plan &fp, char *ws, cudaStream_t stream,
                                  cudaError_t *err) {
    selscan_status st;
    P.NT = fp.NT; P.CH = fp.CH; P.ncb = fp.ncb; P.lchunk = fp.lchunk; P.nlch = fp.nlch;
    const unsigned grid = static_cast<unsigned>(q.batch * q.G * fp.ncb * fp.nlch);
    const int64_t rows = q.batch * q.dim;
    if (fp.nlch > 1) {
        chunk_buffers(P, ws, rows * fp.nlch * q.N, false);
        if ((st = launch_fwd<true>(q.dt, P, grid, stream, err)) != SELSCAN_OK) return st;
        carry_kernel<<<nblocks(rows * q.N, 256), 256, 0, stream>>>(P.S, P.P, P.Hin, rows, fp.nlch, q.N);
        SELSCAN__LAUNCHED();
    }
    if ((st = launch_fwd<false>(q.dt, P, grid, stream, err)) != SELSCAN_OK) return st;
    if (q.cu && q.h_last.data) return run_empty_seqs(q, P.cu, P.h0, P.h_last, stream, err);
    return SELSCAN_OK;
}

/* the fast backward kernel for P's N and layout, as plan_fast_backward chose (states, threads a
   channel): by N and SELSCAN_CUDA_FAST_BWD_STATES (the channels-last instantiation only with 8
   states and 2 threads a channel) */
template <typename T, int S, int TPC, bool CL, bool PADS>
static selscan_status launch_bwd_fast_k(const bwd_params &P, unsigned grid, cudaStream_t stream, cudaError_t *err) {
    const int smem = static_cast<int>(sizeof(bwd_fast_smem<S, TPC>));
    static volatile int done[64];
    SELSCAN__CU(allow_smem(reinterpret_cast<const void *>(bwd_fast_kernel<T, S, TPC, CL, PADS>), smem, done));
    launch_pdl(bwd_fast_kernel<T, S, TPC, CL, PADS>, grid, kThreads, static_cast<size_t>(smem), stream, P);
    SELSCAN__LAUNCHED();
    return SELSCAN_OK;
}
template <typename T, int S, int TPC, bool CL>
static selscan_status launch_bwd_fast_t(const bwd_params &P, unsigned grid, cudaStream_t stream, cudaError_t *err) {
    return pad_states(P.N, S * TPC) ? launch_bwd_fast_k<T, S, TPC, CL, true>(P, grid, stream, err)
                                    : launch_bwd_fast_k<T, S, TPC, CL, false>(P, grid, stream, err);
}
static selscan_status launch_bwd_fast(selscan_dtype dt, const bwd_params &P, unsigned grid, cudaStream_t s, cudaError_t *err) {
    return selscan_cuda_detail::with_dtype(dt, [&](auto tag) -> selscan_status {
        using T = typename decltype(tag)::type;
        if constexpr (kFastBwdS == 4) return launch_bwd_fast_t<T, 4, 4, false>(P, grid, s, err);
#if SELSCAN_CUDA_CHANNELS_LAST
        else if (P.cl) return launch_bwd_fast_t<T, 8, 2, true>(P, grid, s, err);
#endif
        else return P.N <= 8 ? launch_bwd_fast_t<T, 4, 2, false>(P, grid, s, err) : launch_bwd_fast_t<T, 8, 2, false>(P, grid, s, err);
    });
}
/* the L-chunk pass of the fast backward (the same shapes) */
static void launch_bwd_fast_local(selscan_dtype dt, const bwd_params &P, unsigned grid, float *V, float *M, cudaStream_t s) {
    selscan_cuda_detail::with_dtype(dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (kFastBwdS == 4) launch_pdl(bwd_fast_local_kernel<T, 4, 4, false>, grid, kThreads, 0, s, P, V, M);
#if SELSCAN_CUDA_CHANNELS_LAST
        else if (P.cl) launch_pdl(bwd_fast_local_kernel<T, 8, 2, true>, grid, kThreads, 0, s, P, V, M);
#endif
        else if (P.N <= 8) launch_pdl(bwd_fast_local_kernel<T, 4, 2, false>, grid, kThreads, 0, s, P, V, M);
        else launch_pdl(bwd_fast_local_kernel<T, 8, 2, false>, grid, kThreads, 0, s, P, V, M);
    });
}

/* The general backward's checkpoint: the state entering every kSub steps into ck16, from the
   forward's 64-step checkpoint ckin (a rescan writing every kSub steps) or, without one, by pass 1
   with kSub-step chunks and a carry. */
static selscan_status run_ck16(const selscan__prob &q, const bwd_params &P, const bwd_plan &bp, const float *ckin, char *ws,
                               cudaStream_t stream, cudaError_t *err) {
    scan_params F = scan_of(P);
    F.y.p = NULL;
    F.h_last.p = NULL;
    F.NT = bp.fp.NT; F.CH = bp.fp.CH; F.ncb = bp.fp.ncb; F.lchunk = bp.fp.lchunk; F.nlch = bp.fp.nlch;
    const unsigned grid = static_cast<unsigned>(q.batch * q.G * bp.fp.ncb * bp.fp.nlch);
    float *ck16 = reinterpret_cast<float *>(ws + bp.off_ck16);
    if (ckin) {
        F.Hin = const_cast<float *>(ckin); /* only read */
        F.ck = ck16;
        F.nck = bp.nck16;
        F.ckmask = kSub - 1;
        F.ckshift = 4;
        return launch_fwd<false>(q.dt, F, grid, stream, err);
    }
    F.ck = NULL;
    F.S = reinterpret_cast<float *>(ws + bp.off_S);
    F.P = reinterpret_cast<float *>(ws + bp.off_P);
    F.Hin = ck16;
    selscan_status st = launch_fwd<true>(q.dt, F, grid, stream, err);
    if (st != SELSCAN_OK) return st;
    carry_kernel<<<nblocks(q.batch * q.dim * q.N, 256), 256, 0, stream>>>(F.S, F.P, F.Hin, q.batch * q.dim, bp.nck16, q.N);
    SELSCAN__LAUNCHED();
    return SELSCAN_OK;
}

/* The backward pipeline: the checkpoint the main kernel starts from ([fast forward into the
   workspace] on the fast path, run_ck16 on the general one), [the L chunks' state gradients,
   reverse carry,] the main kernel (fast or general), then the fixed-order reductions of its
   per-block partial sums (row sums: dA, dD, ddelta_bias, fixed dB / dC; dB / dC over the channel
   blocks) and dh0 of empty sequences. ckin: the forward's checkpoint or NULL. */
static selscan_status run_backward(const selscan__prob &q, const selscan__grd &r, bwd_params P, const bwd_plan &bp, const float *ckin,
                                   char *ws, cudaStream_t stream, cudaError_t *err) {
    selscan_status st;
    SELSCAN__GRAD_OPERANDS(SELSCAN__CUDA_CT_GRAD, &r)
    if (bp.fastTPC) { /* the fast path reads the 64-step checkpoint: the forward's, or written here */
        P.ck = ckin ? const_cast<float *>(ckin) : reinterpret_cast<float *>(ws + bp.off_ck16);
        P.nck = bp.nck;
        if (!ckin) {
            scan_params F = scan_of(P);
            F.y.p = NULL;
            F.h_last.p = NULL;
            if ((st = run_fast_forward(q, F, bp.fp, ws + bp.off_fws, stream, err)) != SELSCAN_OK) return st;
        }
    } else {
        if ((st = run_ck16(q, P, bp, ckin, ws, stream, err)) != SELSCAN_OK) return st;
        P.ck = reinterpret_cast<float *>(ws + bp.off_ck16);
        P.nck = bp.nck16;
    }
    P.NT = bp.NT; P.CH = bp.CH; P.ncb = bp.ncb; P.nlch = bp.nlch; P.lchunk = bp.lchunk; P.cl = bp.fastCL;
    const unsigned grid = static_cast<unsigned>(q.batch * q.G * bp.ncb * bp.nlch);
    if (bp.nlch > 1) { /* the state gradient entering each L chunk */
        float *V = reinterpret_cast<float *>(ws + bp.off_V), *M = reinterpret_cast<float *>(ws + bp.off_M);
        P.Hin = reinterpret_cast<float *>(ws + bp.off_Din);
        if (bp.fastTPC) {
            launch_bwd_fast_local(q.dt, P, grid, V, M, stream);
        } else {
            const unsigned gl = nblocks(q.batch * q.dim * bp.NT * bp.nlch, kThreads);
            selscan_cuda_detail::with_dtype(q.dt, [&](auto tag) { bwd_local_kernel<typename decltype(tag)::type><<<gl, kThreads, 0, stream>>>(P, V, M); });
        }
        SELSCAN__LAUNCHED();
        launch_pdl(carry_rev_kernel, nblocks(q.batch * q.dim * q.N, 256), 256, 0, stream, static_cast<const float *>(V),
                   static_cast<const float *>(M), P.Hin, q.batch * q.dim, bp.nlch, static_cast<int64_t>(q.N));
        SELSCAN__LAUNCHED();
    }
    P.wdA = r.dA.data ? reinterpret_cast<float *>(ws + bp.off_dA) : NULL;
    P.wdD = r.dD.data ? reinterpret_cast<float *>(ws + bp.off_dD) : NULL;
    P.wddelta_bias = r.ddelta_bias.data ? reinterpret_cast<float *>(ws + bp.off_ddelta_bias) : NULL;
    P.wdBf = r.dB.data && q.fixB ? reinterpret_cast<float *>(ws + bp.off_dBf) : NULL;
    P.wdCf = r.dC.data && q.fixC ? reinterpret_cast<float *>(ws + bp.off_dCf) : NULL;
    P.wdB = r.dB.data && !q.fixB ? reinterpret_cast<float *>(ws + bp.off_dB) : NULL;
    P.wdC = r.dC.data && !q.fixC ? reinterpret_cast<float *>(ws + bp.off_dC) : NULL;
    if (bp.fastTPC) {
        P.scr = reinterpret_cast<float *>(ws + bp.off_scr);
        if ((st = launch_bwd_fast(q.dt, P, grid, stream, err)) != SELSCAN_OK) return st;
    } else { /* bwd_kernel is built for float and h16 (both 2-byte types; P.bf16 picks) */
        const int smem = static_cast<int>(bwd_smem(bp.NT, bp.CH).total);
        static volatile int done_f32[64], done_h16[64];
        auto launch = [&](auto kernel, volatile int (&done)[64]) -> selscan_status {
            if (smem > 48 * 1024) SELSCAN__CU(allow_smem(reinterpret_cast<const void *>(kernel), smem, done));
            kernel<<<grid, kThreads, smem, stream>>>(P);
            SELSCAN__LAUNCHED();
            return SELSCAN_OK;
        };
        static volatile int done_f32p[64], done_h16p[64];
        if (pad_states(q.N, bp.NT * kBwdNPT))
            st = q.dt == SELSCAN_F32 ? launch(bwd_kernel<float, true>, done_f32p) : launch(bwd_kernel<h16, true>, done_h16p);
        else
            st = q.dt == SELSCAN_F32 ? launch(bwd_kernel<float, false>, done_f32) : launch(bwd_kernel<h16, false>, done_h16);
        if (st != SELSCAN_OK) return st;
    }
    { /* the row sums, one launch (a job per output) */
        rowsum_jobs J;
        int nj = 0;
        int64_t inner = 1;
        auto job = [&](const float *w, int64_t in, const selscan__ten &t) {
            J.j[nj].w = w; J.j[nj].inner = in; J.j[nj].out = mk(t);
            nj++;
            inner = in > inner ? in : inner;
        };
        if (P.wdA) job(P.wdA, q.N, r.dA);
        if (P.wdD) job(P.wdD, 1, r.dD);
        if (P.wddelta_bias) job(P.wddelta_bias, 1, r.ddelta_bias);
        if (P.wdBf) job(P.wdBf, q.N, r.dB);
        if (P.wdCf) job(P.wdCf, q.N, r.dC);
        if (nj) {
            launch_pdl(reduce_rows_kernel, dim3(nblocks(q.dim * inner, kRedX), nj), kRedX * kRedY, 0, stream, J, q.batch * bp.nlch, q.dim);
            SELSCAN__LAUNCHED();
        }
    }
    if (P.wdB || P.wdC) { /* dB and dC over the channel blocks, one launch */
        const int ny = (P.wdB ? 1 : 0) + (P.wdC ? 1 : 0);
        const float *w0 = P.wdB ? P.wdB : P.wdC, *w1 = P.wdC;
        const ct o0 = mk(P.wdB ? r.dB : r.dC), o1 = mk(r.dC);
        const dim3 gr(nblocks(q.batch * q.G * q.N * q.L, 256), ny);
        selscan_cuda_detail::with_dtype(q.dt, [&](auto tag) {
            launch_pdl(reduce_bc_kernel<typename decltype(tag)::type>, gr, 256, 0, stream, w0, w1, bp.ncb, q.batch, q.G, q.N, q.L, o0, o1);
        });
        SELSCAN__LAUNCHED();
    }
    if (q.cu && r.dh0.data) return run_empty_seqs(q, P.cu, P.dh_last, P.dh0, stream, err);
    return SELSCAN_OK;
}

/* A flat f32 "tensor" of the given bytes (at least 4) for the alias checks. */
static selscan__ten flat(const void *p, int64_t bytes) {
    selscan__ten t;
    memset(&t, 0, sizeof t);
    t.data = const_cast<void *>(p);
    t.nd = 1;
    t.n[0] = bytes / 4 > 0 ? bytes / 4 : 1;
    t.n[1] = t.n[2] = t.n[3] = 1;
    t.s[0] = 1;
    t.dt = SELSCAN_F32;
    return t;
}

/* out overlaps one of ins: SELSCAN_ERR_ALIAS with (operand, rule) in diag */
static selscan_status check_overlap(const selscan__ten &out, const selscan__ten *const *ins, int nin, selscan_diag *dg,
                                    const char *operand, const char *rule) {
    const selscan__ten *outs[] = {&out};
    if (selscan__check_alias(outs, 1, ins, nin, NULL, 0, NULL, 0) != SELSCAN_OK) return selscan__fail_ovl(dg, operand, rule);
    return SELSCAN_OK;
}

/* The decode step's launch. float4-aligned state rows (unit n stride, N % 4 == 0, N <= 128,
   16-byte aligned rows; a T state, SELSCAN_STEP_STATE_T: 8-byte aligned chunks of 4, the same
   kernels, their state loads and stores in T): step_vec_kernel with S states a thread (from N),
   or for N = 16 on the common operands step_lat_kernel / step_loop_kernel (from the batch), one
   batch row a block, with programmatic dependent launch where the device has it; else
   step_kernel. (The benchmark's forced shapes and sweep: >>bench.) */
/* f(H) with H the state's element type: T where sp.hT (SELSCAN_STEP_STATE_T; 2-byte T only: a f32
   T state is float), float otherwise */
template <typename T, typename F> static auto with_state_type(const step_params &sp, F &&f) -> decltype(f(dtype_tag<float>())) {
    if constexpr (sizeof(T) == 2) {
        if (sp.hT) return f(dtype_tag<T>());
    }
    return f(dtype_tag<float>());
}
template <typename T, int S, int R, int NTC, bool FAST, int MINB>
static void launch_step_vec(const step_params &sp, dim3 grid, bool pdl, cudaStream_t stream) {
    with_state_type<T>(sp, [&](auto h) {
        using H = typename decltype(h)::type;
        if (pdl) launch_pdl(step_vec_kernel<T, H, S, R, NTC, FAST, MINB>, grid, kThreads, 0, stream, sp);
        else step_vec_kernel<T, H, S, R, NTC, FAST, MINB><<<grid, kThreads, 0, stream>>>(sp);
        return 0;
    });
}

/* A float4 step launch: S states a lane (8 or 4 here), one batch row a block; fast: the common
   operands' FAST form; lat: step_lat_kernel; loop_slices > 0: step_loop_kernel with that many
   row slices on the grid's x (0: not used) */
struct step_choice {
    int S;
    bool fast, lat;
    int64_t loop_slices;
};
/* N = 16 (two lanes of 8 states) on the common operands: step_lat_kernel, step_loop_kernel or
   step_vec_kernel<T, 8, 1, 2, true> as c says; everything else: step_vec_kernel with the run-time
   NT, every layout. */
template <typename T, int S>
static void launch_step_vec_s(const step_choice &c, const step_params &sp, dim3 grid, bool pdl, cudaStream_t stream) {
    if constexpr (S == 8) {
        if (sp.NT == 2 && c.fast && c.lat) { /* every load issued before the first use */
            with_state_type<T>(sp, [&](auto h) {
                using H = typename decltype(h)::type;
                if (pdl) launch_pdl(step_lat_kernel<T, H>, grid, kThreads, 0, stream, sp);
                else step_lat_kernel<T, H><<<grid, kThreads, 0, stream>>>(sp);
                return 0;
            });
            return;
        }
        if (sp.NT == 2 && c.fast && c.loop_slices > 0) { /* rows a thread in a one-wave grid */
            dim3 g2(static_cast<unsigned>(c.loop_slices), grid.y);
            with_state_type<T>(sp, [&](auto h) {
                using H = typename decltype(h)::type;
                if (pdl) launch_pdl(step_loop_kernel<T, H>, g2, kThreads, 0, stream, sp);
                else step_loop_kernel<T, H><<<g2, kThreads, 0, stream>>>(sp);
                return 0;
            });
            return;
        }
        if (sp.NT == 2 && c.fast) {
            launch_step_vec<T, S, 1, 2, true, SELSCAN_CUDA_STEP_MINBLOCKS>(sp, grid, pdl, stream);
            return;
        }
    }
    launch_step_vec<T, S, 1, 0, false, 0>(sp, grid, pdl, stream);
}
/* Blocks an SM step_loop_kernel<T, H> holds (its registers), asked once a device; 8 when unknown */
template <typename T, typename H> static int step_loop_bpsm() {
    static volatile int known[64];
    return per_device(known, 8, [](int) {
        int v = 0;
        return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, step_loop_kernel<T, H>, kThreads, 0) == cudaSuccess ? v : 0;
    });
}
static int step_loop_blocks_per_sm(selscan_dtype dt, const step_params &sp) {
    return selscan_cuda_detail::with_dtype(dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return with_state_type<T>(sp, [&](auto h) { return step_loop_bpsm<T, typename decltype(h)::type>(); });
    });
}
/* 16-byte loads of a B / C row: unit n stride, 16-byte aligned base and row strides */
static bool step_rows_vec(const selscan__ten &t, bool fixed, size_t es) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(t.data);
    if (fixed) return t.s[1] == 1 && a % 16 == 0 && (t.s[0] * 4) % 16 == 0;
    return t.s[2] == 1 && a % 16 == 0 && (t.s[0] * static_cast<int64_t>(es)) % 16 == 0 && (t.s[1] * static_cast<int64_t>(es)) % 16 == 0;
}
/* The float4 step kernels apply to q with S states a lane: the state's chunks of 4 (16 bytes in
   f32; 8 in T, SELSCAN_STEP_STATE_T) aligned, the channel blocks within the grid's y (65535) */
static bool step_vec_fits(const selscan__stp &q, int S) {
    const uintptr_t hes = q.stT ? selscan__dtype_size(q.dt) : 4u;
    const bool vec = q.N % 4 == 0 && q.N <= 128 && q.state.s[2] == 1 && q.state.s[1] % 4 == 0 && q.state.s[0] % 4 == 0 &&
                     reinterpret_cast<uintptr_t>(q.state.data) % (4u * hes) == 0;
    return vec && cdiv(q.dim, kThreads / pow2ceil(cdiv(q.N, S))) <= 65535 && q.dpg <= 0x7fffffff;
}
/* The float4 step kernels' parameters for S states a lane and R batch rows a block, and their
   grid (batch rows on x, channel blocks on y) */
static selscan_status step_vec_setup(const selscan__stp &q, int S, int R, step_params *spp, dim3 *grid, selscan_diag *dg) {
    step_params &sp = *spp;
    const size_t es = selscan__dtype_size(q.dt);
    /* 2-byte B / C rows of 4 states: 8-byte loads need 8-byte alignment only; a row of S
       states of either type is a whole number of 16-byte words otherwise */
    memset(&sp, 0, sizeof sp);
    sp.batch = q.batch; sp.dim = q.dim; sp.dpg = static_cast<int>(q.dpg); sp.ncache = q.ncache;
    sp.N = static_cast<int>(q.N); sp.NT = pow2ceil(cdiv(q.N, S)); sp.softplus = q.softplus; sp.fixB = q.fixB; sp.fixC = q.fixC;
    sp.avec = q.A.s[1] == 1 && q.A.s[0] % 4 == 0 && reinterpret_cast<uintptr_t>(q.A.data) % 16 == 0;
    sp.bvec = step_rows_vec(q.B, q.fixB != 0, es);
    sp.cvec = step_rows_vec(q.C, q.fixC != 0, es);
    sp.idx = q.idx;
    sp.h = q.state.data; sp.h0 = q.state.s[0]; sp.h1 = q.state.s[1]; sp.hT = q.stT;
    sp.u = q.u.data; sp.u0 = q.u.s[0]; sp.u1 = q.u.s[1];
    sp.dl = q.delta.data; sp.d0 = q.delta.s[0]; sp.d1 = q.delta.s[1];
    sp.z = q.z.data; sp.z0 = q.z.s[0]; sp.z1 = q.z.s[1];
    sp.y = q.y.data; sp.y0 = q.y.s[0]; sp.y1 = q.y.s[1];
    sp.A = static_cast<const float *>(q.A.data); sp.a0 = q.A.s[0]; sp.a1 = q.A.s[1];
    sp.B = q.B.data; sp.C = q.C.data;
    if (q.fixB) { sp.b0 = q.B.s[0]; sp.b1 = 0; sp.b2 = q.B.s[1]; }
    else { sp.b0 = q.B.s[0]; sp.b1 = q.B.s[1]; sp.b2 = q.B.s[2]; }
    if (q.fixC) { sp.c0 = q.C.s[0]; sp.c1 = 0; sp.c2 = q.C.s[1]; }
    else { sp.c0 = q.C.s[0]; sp.c1 = q.C.s[1]; sp.c2 = q.C.s[2]; }
    sp.D = q.D.data; sp.Ds = q.D.s[0];
    sp.delta_bias = q.delta_bias.data; sp.bs = q.delta_bias.s[0];
    sp.DT = q.DT; sp.delta_biasT = q.delta_biasT; sp.alog = q.alog;
    const int64_t cpb = kThreads / sp.NT, gx = cdiv(q.batch, R), gy = cdiv(q.dim, cpb);
    if (gx > kMaxGrid || gy > 65535) return fail_grid(dg);
    *grid = dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
    sp.G1 = q.G == 1;
    return SELSCAN_OK;
}
/* the common operands (the FAST form): A, B, C rows 16-byte aligned with unit n stride, variable B / C */
static bool step_fast_operands(const step_params &sp) { return sp.avec && sp.bvec && sp.cvec && !sp.fixB && !sp.fixC; }
/* N = 16 as two lanes of 8 states on the common operands, one batch row a block: where
   step_lat_kernel and step_loop_kernel can run */
static bool step_pair_form(const selscan__stp &q, const step_choice &c, int R, const step_params &sp) {
    return c.fast && q.N == 16 && c.S == 8 && R == 1 && sp.NT == 2;
}
/* step_lat_kernel's rule: its grid, a block a row and 64 channels, at most 32 blocks an SM
   (measured after a plain kernel, as a model runs the step after a GEMM: 0.1-0.45 us faster than
   the other kernels up to 64 x 1536 and 16 x 4096, 1 us faster than step_loop_kernel at 64 x 4096
   (4096 blocks); 1.2 us slower at 64 x 5120 (5120 blocks), f32 state, back to back;
   bench/NOTES.md CONV-CUDA-v7). gy: the grid's channel blocks. */
static bool step_lat_rule(const selscan__stp &q, int64_t gy) { return q.batch * gy <= 32 * sm_count(); }
/* step_loop_kernel's row slices: gy channel blocks times slices fill a wave of blocks (the blocks
   an SM its registers allow, asked once a device) */
static int64_t step_loop_slices(const selscan__stp &q, const step_params &sp, int64_t gy) {
    const int64_t slots = sm_count() * step_loop_blocks_per_sm(q.dt, sp);
    return slots / gy > 1 ? slots / gy : 1;
}
/* its rule: at least two rows a thread in one wave (every batch past step_lat_kernel's range: the
   loop kernel's at most 16 blocks an SM make 2 x slices <= 32 x SMs / gy < batch), or batch 1;
   step_vec_kernel otherwise (bench/NOTES.md "CUDA step under graphs") */
static bool step_loop_rule(const selscan__stp &q, int64_t slices) { return q.batch >= 2 * slices || q.batch == 1; }
/* its grid's x for `slices` (0: past 2^31 - 1) */
static int64_t step_loop_grid(const selscan__stp &q, int64_t slices) {
    const int64_t n = cdiv(q.batch, cdiv(q.batch, slices));
    return n > 0x7fffffff ? 0 : n;
}
/* step_kernel: one state a thread, any operands */
static selscan_status launch_step_one(const selscan__stp &q, cudaStream_t stream, cudaError_t *err, selscan_diag *dg) {
    step1_params P;
    memset(&P, 0, sizeof P);
    P.dim = q.dim; P.N = q.N; P.dpg = q.dpg; P.ncache = q.ncache;
    P.softplus = q.softplus; P.fixB = q.fixB; P.fixC = q.fixC; P.idx = q.idx; P.DT = q.DT; P.delta_biasT = q.delta_biasT; P.stT = q.stT;
    P.alog = q.alog;
    SELSCAN__STEP_OPERANDS(SELSCAN__CUDA_CT, &q)
    P.NT = q.N >= 32 ? 32 : pow2ceil(q.N);
    const int64_t grid = q.batch * cdiv(q.dim, kThreads / P.NT);
    if (grid > kMaxGrid) return fail_grid(dg);
    const unsigned gr = static_cast<unsigned>(grid);
    selscan_cuda_detail::with_dtype(q.dt, [&](auto tag) { step_kernel<typename decltype(tag)::type><<<gr, kThreads, 0, stream>>>(P); });
    SELSCAN__LAUNCHED();
    return SELSCAN_OK;
}
static selscan_status launch_step(const selscan__stp &q, cudaStream_t stream, cudaError_t *err, selscan_diag *dg) {
    const bool pdl = pdl_available();
    /* 8 states a lane where N % 8 == 0 (N = 16: two lanes, the forward's split), else 4 (N = 8:
       two lanes of 4, again the forward's split) */
    step_choice c = {q.N % 8 == 0 && q.N != 8 ? 8 : 4, false, false, 0};
    if (!step_vec_fits(q, c.S)) return launch_step_one(q, stream, err, dg);
    step_params sp;
    dim3 grid;
    selscan_status st;
    if ((st = step_vec_setup(q, c.S, 1, &sp, &grid, dg)) != SELSCAN_OK) return st;
    c.fast = step_fast_operands(sp);
    const bool lat_rule = step_lat_rule(q, grid.y), pair = step_pair_form(q, c, 1, sp);
    c.lat = pair && lat_rule;
    if (pair && !c.lat) {
        const int64_t slices = step_loop_slices(q, sp, grid.y);
        if (step_loop_rule(q, slices)) c.loop_slices = step_loop_grid(q, slices);
    }
    selscan_cuda_detail::with_dtype(q.dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (c.S == 8) launch_step_vec_s<T, 8>(c, sp, grid, pdl, stream);
        else launch_step_vec_s<T, 4>(c, sp, grid, pdl, stream);
    });
    SELSCAN__LAUNCHED();
    return SELSCAN_OK;
}

static selscan_status check_ext_cu(const selscan__prob &q, const selscan_cuda_ext *x, selscan_diag *dg) {
    if (q.cu && (!x || !x->cu_seqlens_device)) return fail(dg, SELSCAN_ERR_NULL, "cu_seqlens_device", SELSCAN_RULE_MISSING_PACKED);
    return SELSCAN_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* >>entry           host side: entry points                                                      */
/* ---------------------------------------------------------------------------------------------- */

static selscan_status checkpoint_size(const selscan_problem *p, size_t *bytes) {
    selscan__prob q;
    selscan_status st;
    if (!bytes) return SELSCAN_ERR_NULL;
    if ((st = selscan__check_problem(p, &q, 0)) != SELSCAN_OK) return st;
    const int64_t b = checkpoint_bytes(q);
    if (b < 0) return fail(p->diag, SELSCAN_ERR_SHAPE, "checkpoint", SELSCAN_RULE_SIZE_OVERFLOWS);
    *bytes = static_cast<size_t>(b);
    return SELSCAN_OK;
}

/* have_ck: 0 no checkpoint, 1 with one, 2 the larger of both */
static selscan_status workspace_size(const selscan_problem *p, const selscan_grads *g, int have_ck, size_t *bytes) {
    selscan__prob q;
    selscan__grd r;
    selscan_status st;
    if (!bytes) return SELSCAN_ERR_NULL;
    if (g) {
        bwd_plan bp, bp1;
        if ((st = selscan__validate_backward(p, g, &q, &r, NULL, 0, 0)) != SELSCAN_OK) return st;
        if ((st = plan_backward(q, r, have_ck == 1, kPlanMaxSMs, &bp, p->diag)) != SELSCAN_OK) return st;
        if (have_ck == 2) {
            if ((st = plan_backward(q, r, true, kPlanMaxSMs, &bp1, p->diag)) != SELSCAN_OK) return st;
            if (bp1.ws > bp.ws) bp.ws = bp1.ws;
        }
        *bytes = ws_reported(bp.ws);
    } else {
        fwd_plan fp;
        if ((st = selscan__validate_forward(p, &q, NULL, 0, -1)) != SELSCAN_OK) return st;
        if ((st = plan_forward(q, kPlanMaxSMs, &fp, true, false, p->diag)) != SELSCAN_OK) return st;
        *bytes = ws_reported(fp.ws);
    }
    return SELSCAN_OK;
}

/* The forward's checks before its plan: the problem, the packed sequences' device copy */
static selscan_status forward_begin(const selscan_problem *p, const selscan_cuda_ext *x, selscan__prob *q) {
    selscan_status st;
    if ((st = selscan__check_problem(p, q, 1)) != SELSCAN_OK) return st;
    return check_ext_cu(*q, x, p->diag);
}

/* The forward after its plan fp: the outputs, checkpoint and workspace checked, then the launches */
static selscan_status forward_run(const selscan_problem *p, const selscan_cuda_ext *x, const selscan__prob &q, const fwd_plan &fp,
                                  void *workspace, size_t bytes, cudaStream_t stream) {
    scan_params P;
    selscan_status st;
    char *ws;
    cudaError_t *err = x ? x->cuda_error : NULL;
    selscan_diag *dg = p->diag;
    float *ck = x ? x->checkpoint_out : NULL;
    if ((st = selscan__validate_forward_outputs(&q, NULL, 0, -1)) != SELSCAN_OK) return st;
    const int64_t ck_need = ck ? checkpoint_bytes(q) : 0;
    if (ck_need < 0) return fail(dg, SELSCAN_ERR_SHAPE, "checkpoint", SELSCAN_RULE_SIZE_OVERFLOWS);
    if (ck && x->checkpoint_bytes < static_cast<size_t>(ck_need)) return fail(dg, SELSCAN_ERR_WORKSPACE, "checkpoint", SELSCAN_RULE_TOO_SMALL);
    const selscan__ten ckt = flat(ck, ck_need), cut = flat(q.cu ? x->cu_seqlens_device : NULL, (q.nseq + 1) * 8);
    /* every operand, then cu_seqlens_device, then the checkpoint */
    const selscan__ten *all[] = {SELSCAN__SCAN_OPERANDS(SELSCAN__OPD_ALL, &q) &cut, &ckt}, *cup[] = {&cut};
    const int nall = SELSCAN__COUNT(all);
    if (ck && (st = check_overlap(ckt, all, nall - 1, dg, "checkpoint", "overlaps an operand")) != SELSCAN_OK) return st;
    if (q.cu && ((st = check_overlap(q.y, cup, 1, dg, "cu_seqlens_device", "overlaps y")) != SELSCAN_OK ||
                 (st = check_overlap(q.h_last, cup, 1, dg, "cu_seqlens_device", "overlaps h_last")) != SELSCAN_OK))
        return st;
    if ((st = take_workspace(x, fp.ws_used, &workspace, &bytes, dg)) != SELSCAN_OK) return st;
    if ((st = check_workspace(workspace, bytes, fp.ws_used, &ws, dg)) != SELSCAN_OK) return st;
    const selscan__ten wst = flat(ws, fp.ws_used);
    if (ws && (st = check_overlap(wst, all, nall, dg, "workspace", "overlaps an operand")) != SELSCAN_OK) return st;
    fill_problem(P, q, x ? x->cu_seqlens_device : NULL);
    P.ck = ck;
    if (fp.shortK) return run_short_forward(q, P, fp, stream, err);
    if (fp.fastS) return run_fast_forward(q, P, fp, ws, stream, err);
    return run_forward(q, P, fp, ws, stream, err);
}

/* The forward: checks, the plan (plan_forward, on this device), the launches */
static selscan_status forward(const selscan_problem *p, const selscan_cuda_ext *x, void *workspace, size_t bytes, cudaStream_t stream) {
    selscan__prob q;
    fwd_plan fp;
    selscan_status st;
    if ((st = forward_begin(p, x, &q)) != SELSCAN_OK) return st;
    if ((st = plan_forward(q, sm_count(), &fp, true, x && x->checkpoint_out, p->diag)) != SELSCAN_OK) return st;
    return forward_run(p, x, q, fp, workspace, bytes, stream);
}

static selscan_status backward(const selscan_problem *p, const selscan_grads *g, const selscan_cuda_ext *x, void *workspace,
                               size_t bytes, cudaStream_t stream) {
    selscan__prob q;
    selscan__grd r;
    bwd_plan bp;
    bwd_params P;
    selscan_status st;
    char *ws;
    cudaError_t *err = x ? x->cuda_error : NULL;
    const float *ckin = x ? x->checkpoint_in : NULL;
    if ((st = selscan__validate_backward(p, g, &q, &r, NULL, 0, 0)) != SELSCAN_OK) return st;
    selscan_diag *dg = p->diag;
    if ((st = check_ext_cu(q, x, dg)) != SELSCAN_OK) return st;
    if ((st = plan_backward(q, r, ckin != NULL, sm_count(), &bp, dg)) != SELSCAN_OK) return st;
    if (ckin && x->checkpoint_bytes < static_cast<size_t>(bp.ck_bytes)) return fail(dg, SELSCAN_ERR_WORKSPACE, "checkpoint", SELSCAN_RULE_TOO_SMALL);
    {
        const selscan__ten ckt = flat(ckin, bp.ck_bytes), cut = flat(q.cu ? x->cu_seqlens_device : NULL, (q.nseq + 1) * 8);
        const selscan__ten *outs[] = {SELSCAN__GRAD_OPERANDS(SELSCAN__OPD_OUTS, &r)};
        /* the gradients, the inputs (the problem's, then dy, dh_last), the checkpoint, cu_seqlens_device */
        const selscan__ten *all[] = {SELSCAN__GRAD_OPERANDS(SELSCAN__OPD_OUTS, &r) SELSCAN__SCAN_OPERANDS(SELSCAN__OPD_INS, &q)
                                         SELSCAN__GRAD_OPERANDS(SELSCAN__OPD_INS, &r) &ckt, &cut};
        const selscan__ten *ckp[] = {&ckt}, *cup[] = {&cut};
        for (int i = 0; i < SELSCAN__COUNT(outs); i++) {
            if (ckin && (st = check_overlap(*outs[i], ckp, 1, dg, "checkpoint", "overlaps an output")) != SELSCAN_OK) return st;
            if (q.cu && (st = check_overlap(*outs[i], cup, 1, dg, "cu_seqlens_device", "overlaps an output")) != SELSCAN_OK) return st;
        }
        if ((st = take_workspace(x, bp.ws, &workspace, &bytes, dg)) != SELSCAN_OK) return st;
        if ((st = check_workspace(workspace, bytes, bp.ws, &ws, dg)) != SELSCAN_OK) return st;
        const selscan__ten wst = flat(ws, bp.ws);
        if (ws && (st = check_overlap(wst, all, SELSCAN__COUNT(all), dg, "workspace", "overlaps an operand")) != SELSCAN_OK) return st;
    }
    fill_problem(P, q, x ? x->cu_seqlens_device : NULL);
    P.bf16 = q.dt == SELSCAN_BF16;
    return run_backward(q, r, P, bp, ckin, ws, stream, err);
}

static selscan_status step(const selscan_step_problem *s, const selscan_cuda_ext *x, cudaStream_t stream) {
    cudaError_t *err = x ? x->cuda_error : NULL;
    selscan__stp q;
    selscan_status st = selscan__validate_step_ex(s, &q, 0);
    if (st != SELSCAN_OK) return st;
    return launch_step(q, stream, err, s->diag);
}

/* ---------------------------------------------------------------------------------------------- */
/* >>conv            causal depthwise conv1d (selscan.h >>conv-api), kernels and host             */
/* ---------------------------------------------------------------------------------------------- */
/* A block takes kConvTC channels of one batch row and kConvTL steps (the backward kConvTB such
   tiles in turn): the tile's inputs with their W-1 (backward: 2 (W-1)) halo steps are staged in
   shared memory as [step][channel] floats, loaded and stored with consecutive lanes along
   whichever of the tensor's channel and step strides is the smaller (a warp reads 32 consecutive
   steps of a row in the (batch, dim, L) layout, 32 consecutive channels in the channels-last
   one), so every global access is coalesced in both layouts; the arithmetic reads shared memory
   with lanes along channels (row stride kConvTC + 1: no bank conflicts either way). Sequence
   starts and ends (packed sequences: a binary search of cu_seqlens) are found once per step and
   tile. Each output runs the reference's order (bias, then the W taps; the backward's dx sum from
   the last tap back), with fmaf and the fast sigmoid (sigm: ex2.approx). Backward: dpre is
   recomputed from x over the tile plus its W-1 halo steps; dweight / dbias: each block sums its
   steps per channel in registers (4 row groups a channel, added in a fixed order) into a
   per-block partial in the workspace, and conv_reduce_kernel adds the partials of a channel in
   block order: deterministic, no atomics. final_state and dinit_state: small kernels of one
   thread an element (dinit recomputes the W dpre it needs). The update: one thread a (batch row,
   channel), the taps in registers, the state rolled in place in one pass. */
const int kConvTC = 32;                       /* channels a block */
const int kConvTL = 64;                       /* steps a tile */
const int kConvTB = 4;                        /* backward: tiles a block (its partial covers kConvTB * kConvTL steps) */
const int kConvHM = SELSCAN_CONV_MAX_WIDTH - 1;
const int kConvRS = kConvTC + 1;              /* shared row stride (floats) */

struct conv_params {
    int64_t batch, dim, L, nseq, rows, ncache, S, ntiles; /* ntiles: tiles (backward: blocks) a batch row */
    int W, silu;
    int prmT; /* conv_step_kernel: weight and bias are T (SELSCAN_CONV_PARAMS_T), else f32 */
    int clx, cly, cldy, cldx; /* lanes along channels (1) or steps (0) for that tensor's loads / stores */
    const int64_t *cu;
    const int32_t *idx;
    ct x, weight, bias, init_state, y, final_state, dy, dfinal_state, dx, dweight, dbias, dinit_state, state;
    float *part; /* backward: per-block dweight / dbias partials, [block][dim][W + 1] */
};

/* The sequence of step q of batch row b: [s0, e) and its state row. */
static __device__ __forceinline__ void conv_seg(const conv_params &P, int64_t b, int64_t q, int64_t &s0, int64_t &e, int64_t &row) {
    if (!P.cu) { s0 = 0; e = P.L; row = b; return; }
    int64_t lo = 0, hi = P.nseq; /* cu[lo] <= q < cu[hi] */
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (P.cu[mid] <= q) lo = mid;
        else hi = mid;
    }
    s0 = P.cu[lo]; e = P.cu[lo + 1]; row = lo;
}

/* The tile loops: f(c, i, off) for c < nc, i < n with off = c * s1 + i * s2, a warp's lanes along
   channels (cl) or steps (a warp a step / a channel at a time: no division an element, the access
   that cl makes coalesced). off is kept by additions: no 64-bit product an element (the kernels
   were instruction-bound on index arithmetic, CONV-CUDA-v3). */
template <typename F>
static __device__ __forceinline__ void conv_tile_for(int nc, int n, int cl, int64_t s1, int64_t s2, F &&f) {
    constexpr int NW = kThreads / 32;
    const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
    if (cl) {
        int64_t oi = warp * s2 + lane * s1;
        for (int i = warp; i < n; i += NW, oi += NW * s2) {
            int64_t o = oi;
            for (int c = lane; c < nc; c += 32, o += 32 * s1) f(c, i, o);
        }
    } else {
        int64_t oc = warp * s1 + lane * s2;
        for (int c = warp; c < nc; c += NW, oc += NW * s1) {
            int64_t o = oc;
            for (int i = lane; i < n; i += 32, o += 32 * s2) f(c, i, o);
        }
    }
}

/* s[r * kConvRS + c] = X[b, d0 + c, p0 + r] for r < nr <= MAXR, c < nc (0 outside [0, L) and
   past nc); lanes along channels (cl) or steps. Every load of a thread is issued before the first
   is stored (registers, unrolled): a tile's loads are in flight at once instead of one latency
   each; offsets by additions, the bounds as a 32-bit row range. Shared rows have kConvRS =
   kConvTC + 1 floats: no bank conflict either way. */
template <typename T, int MAXR>
static __device__ __forceinline__ void conv_load(float *s, const ct &X, int64_t b, int64_t d0, int nc, int64_t p0, int nr, int64_t L, int cl) {
    constexpr int NW = kThreads / 32;
    const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
    const T *xb = static_cast<const T *>(X.p) + b * X.s[0] + d0 * X.s[1] + p0 * X.s[2];
    const int64_t sc = X.s[1], sp = X.s[2];
    /* rows r with p0 + r in [0, L): [rlo, rhi) (nr <= MAXR keeps them small) */
    const int rlo = p0 < 0 ? static_cast<int>(min(-p0, static_cast<int64_t>(nr))) : 0;
    const int rhi = static_cast<int>(max(static_cast<int64_t>(rlo), min(static_cast<int64_t>(nr), L - p0)));
    if (cl) { /* a warp a step, lanes along channels */
        constexpr int K = (MAXR + NW - 1) / NW;
        float v[K];
        const T *q = xb + lane * sc + warp * sp;
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int r = warp + k * NW;
            v[k] = r >= rlo && r < rhi && lane < nc ? ld<T>(static_cast<const void *>(q), k * NW * sp) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int r = warp + k * NW;
            if (r < nr) s[r * kConvRS + lane] = v[k];
        }
    } else { /* a warp a channel, lanes along steps */
        constexpr int KC = kConvTC / NW, KR = (MAXR + 31) / 32;
        float v[KC][KR];
        const T *q = xb + warp * sc + lane * sp;
#pragma unroll
        for (int i = 0; i < KC; i++)
#pragma unroll
            for (int j = 0; j < KR; j++) {
                const int c = warp + i * NW, r = lane + j * 32;
                v[i][j] = c < nc && r >= rlo && r < rhi ? ld<T>(static_cast<const void *>(q), i * NW * sc + j * 32 * sp) : 0.0f;
            }
#pragma unroll
        for (int i = 0; i < KC; i++)
#pragma unroll
            for (int j = 0; j < KR; j++) {
                const int c = warp + i * NW, r = lane + j * 32;
                if (r < nr) s[r * kConvRS + c] = v[i][j];
            }
    }
}

/* the tile's weights sw[k * kConvTC + c] (lanes along channels read distinct banks) and biases
   (0 past nc) */
static __device__ __forceinline__ void conv_params_in(const conv_params &P, int64_t d0, int nc, float *sw, float *sb) {
    for (int e = static_cast<int>(threadIdx.x); e < kConvTC * SELSCAN_CONV_MAX_WIDTH; e += kThreads) {
        const int k = e / kConvTC, c = e % kConvTC; /* kConvTC: a power of two */
        sw[e] = c < nc && k < P.W ? ldf(P.weight, (d0 + c) * P.weight.s[0] + k * P.weight.s[1]) : 0.0f;
        if (k == 0) sb[c] = c < nc && P.bias.p ? ldf(P.bias, (d0 + c) * P.bias.s[0]) : 0.0f;
    }
}

/* xp at position pos of the sequence starting at s0 (state row row), channel d: staged x (row
   sr of the tile) or init_state / 0 before s0 */
template <typename T>
static __device__ __forceinline__ float conv_xp(const conv_params &P, const float *sx, int sr, int c, int64_t pos, int64_t s0,
                                                int64_t row, int64_t d, int H) {
    if (pos >= s0) return sx[sr * kConvRS + c];
    return P.init_state.p ? ld<T>(P.init_state.p, row * P.init_state.s[0] + d * P.init_state.s[1] + (H + pos - s0) * P.init_state.s[2]) : 0.0f;
}

template <typename T, int W>
static __global__ void __launch_bounds__(kThreads) conv_fwd_kernel(const conv_params P) {
    constexpr int H = W - 1;
    __shared__ float sx[(kConvTL + kConvHM) * kConvRS], sw[kConvTC * SELSCAN_CONV_MAX_WIDTH], sb[kConvTC];
    __shared__ int64_t s_s0[kConvTL], s_row[kConvTL];
    const int64_t ncb = (P.dim + kConvTC - 1) / kConvTC, blk = blockIdx.x;
    const int64_t d0 = blk % ncb * kConvTC, bt = blk / ncb, b = bt / P.ntiles, t0 = bt % P.ntiles * kConvTL;
    const int nc = static_cast<int>(min(static_cast<int64_t>(kConvTC), P.dim - d0));
    const int nt = static_cast<int>(min(static_cast<int64_t>(kConvTL), P.L - t0));
    for (int i = static_cast<int>(threadIdx.x); i < nt; i += kThreads) {
        int64_t s0, e, row;
        conv_seg(P, b, t0 + i, s0, e, row);
        s_s0[i] = s0; s_row[i] = row;
    }
    conv_params_in(P, d0, nc, sw, sb);
    conv_load<T, kConvTL + kConvHM>(sx, P.x, b, d0, nc, t0 - H, nt + H, P.L, P.clx);
    __syncthreads();
    /* without packed sequences or init_state the staged zeros before step 0 are the inputs */
    const bool plain = !P.cu && !P.init_state.p;
    T *yb = static_cast<T *>(P.y.p) + b * P.y.s[0] + d0 * P.y.s[1] + t0 * P.y.s[2];
    conv_tile_for(nc, nt, P.cly, P.y.s[1], P.y.s[2], [&](int c, int i, int64_t o) {
        float acc = sb[c];
        if (plain) {
#pragma unroll
            for (int k = 0; k < W; k++) acc = fmaf(sw[k * kConvTC + c], sx[(i + k) * kConvRS + c], acc);
        } else {
            const int64_t t = t0 + i, s0 = s_s0[i];
#pragma unroll
            for (int k = 0; k < W; k++)
                acc = fmaf(sw[k * kConvTC + c], conv_xp<T>(P, sx, i + k, c, t - H + k, s0, s_row[i], d0 + c, H), acc);
        }
        if (P.silu) acc *= sigm(acc);
        st<T>(static_cast<void *>(yb), o, acc);
    });
}

/* final_state[s, d, j] = xp at e - H + j of sequence s: a copy of x or init_state (or 0) */
template <typename T>
static __global__ void __launch_bounds__(256) conv_final_kernel(const conv_params P) {
    const int H = P.W - 1;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= P.rows * P.dim * H) return;
    const int64_t s = i / (P.dim * H), d = i / H % P.dim, j = i % H;
    const int64_t s0 = P.cu ? P.cu[s] : 0, e = P.cu ? P.cu[s + 1] : P.L, b = P.cu ? 0 : s, pos = e - H + j;
    const T *src = static_cast<const T *>(pos >= s0 ? P.x.p : P.init_state.p);
    const int64_t off = pos >= s0 ? b * P.x.s[0] + d * P.x.s[1] + pos * P.x.s[2]
                                  : s * P.init_state.s[0] + d * P.init_state.s[1] + (H + pos - s0) * P.init_state.s[2];
    T *dst = static_cast<T *>(P.final_state.p) + s * P.final_state.s[0] + d * P.final_state.s[1] + j * P.final_state.s[2];
    if (src) *dst = src[off];
    else st<T>(static_cast<void *>(dst), 0, 0.0f); /* (void *: no argument-dependent lookup of a user's st) */
}

/* dpre of step q (sequence [s0, ..), state row row) of channel d: x read from global memory */
template <typename T>
static __device__ __forceinline__ float conv_dpre_g(const conv_params &P, int64_t b, int64_t d, int64_t q, int64_t s0, int64_t row,
                                                    const float *w, float bias) {
    const int H = P.W - 1;
    float pre = bias;
    for (int k = 0; k < P.W; k++) {
        const int64_t pos = q - H + k;
        const float v = pos >= s0 ? ld<T>(P.x.p, b * P.x.s[0] + d * P.x.s[1] + pos * P.x.s[2])
                                  : (P.init_state.p ? ld<T>(P.init_state.p, row * P.init_state.s[0] + d * P.init_state.s[1] + (H + pos - s0) * P.init_state.s[2]) : 0.0f);
        pre = fmaf(w[k], v, pre);
    }
    float dp = ld<T>(P.dy.p, b * P.dy.s[0] + d * P.dy.s[1] + q * P.dy.s[2]);
    if (P.silu) {
        const float sg = sigm(pre);
        dp = dp * (sg * fmaf(pre, 1.0f - sg, 1.0f));
    }
    return dp;
}

template <typename T, int W>
static __global__ void __launch_bounds__(kThreads) conv_bwd_kernel(const conv_params P) {
    constexpr int H = W - 1;
    __shared__ float sx[(kConvTL + 2 * kConvHM) * kConvRS], sg[(kConvTL + kConvHM) * kConvRS];
    __shared__ float sw[kConvTC * SELSCAN_CONV_MAX_WIDTH], sb[kConvTC], sred[(SELSCAN_CONV_MAX_WIDTH + 1) * kThreads];
    __shared__ int64_t s_s0[kConvTL + kConvHM], s_e[kConvTL + kConvHM], s_row[kConvTL + kConvHM];
    const int tid = static_cast<int>(threadIdx.x), c = tid % kConvTC, rg = tid / kConvTC;
    const int64_t ncb = (P.dim + kConvTC - 1) / kConvTC, blk = blockIdx.x;
    const int64_t d0 = blk % ncb * kConvTC, bt = blk / ncb, b = bt / P.ntiles, tb = bt % P.ntiles;
    const int nc = static_cast<int>(min(static_cast<int64_t>(kConvTC), P.dim - d0));
    float acc[W + 1];
#pragma unroll
    for (int k = 0; k <= W; k++) acc[k] = 0.0f;
    const bool plain = !P.cu && !P.init_state.p; /* the staged zeros before step 0 are the inputs */
    conv_params_in(P, d0, nc, sw, sb);
    for (int sub = 0; sub < kConvTB; sub++) {
        const int64_t t0 = (tb * kConvTB + sub) * kConvTL;
        if (t0 >= P.L) break;
        const int nt = static_cast<int>(min(static_cast<int64_t>(kConvTL), P.L - t0));
        const int nq = static_cast<int>(min(static_cast<int64_t>(kConvTL + H), P.L - t0)); /* steps with a dpre */
        __syncthreads(); /* the previous tile's readers are done */
        for (int i = tid; i < nq; i += kThreads) {
            int64_t s0, e, row;
            conv_seg(P, b, t0 + i, s0, e, row);
            s_s0[i] = s0; s_e[i] = e; s_row[i] = row;
        }
        conv_load<T, kConvTL + 2 * kConvHM>(sx, P.x, b, d0, nc, t0 - H, nq + H, P.L, P.clx);
        conv_load<T, kConvTL + kConvHM>(sg, P.dy, b, d0, nc, t0, nq, P.L, P.cldy);
        __syncthreads();
        if (c < nc) /* dpre in place; the tile's own steps (r < nt) into the sums */
            for (int r = rg; r < nq; r += kThreads / kConvTC) {
                const int64_t q = t0 + r, s0 = s_s0[r], d = d0 + c;
                float xv[W], pre = sb[c];
#pragma unroll
                for (int k = 0; k < W; k++) {
                    xv[k] = plain ? sx[(r + k) * kConvRS + c] : conv_xp<T>(P, sx, r + k, c, q - H + k, s0, s_row[r], d, H);
                    pre = fmaf(sw[k * kConvTC + c], xv[k], pre);
                }
                float dp = sg[r * kConvRS + c];
                if (P.silu) {
                    const float sgm = sigm(pre);
                    dp = dp * (sgm * fmaf(pre, 1.0f - sgm, 1.0f));
                    sg[r * kConvRS + c] = dp;
                }
                if (r < nt) {
                    acc[W] += dp;
#pragma unroll
                    for (int k = 0; k < W; k++) acc[k] = fmaf(dp, xv[k], acc[k]);
                }
            }
        __syncthreads();
        if (P.dx.p) {
            T *xb = static_cast<T *>(P.dx.p) + b * P.dx.s[0] + d0 * P.dx.s[1] + t0 * P.dx.s[2];
            conv_tile_for(nc, nt, P.cldx, P.dx.s[1], P.dx.s[2], [&](int cc, int i, int64_t o) {
                const int64_t p = t0 + i, end = s_e[i];
                float v = 0.0f;
#pragma unroll
                for (int k = H; k >= 0; k--) /* dpre of p + H - k, inside p's sequence */
                    if (p + H - k < end) v = fmaf(sw[k * kConvTC + cc], sg[(i + H - k) * kConvRS + cc], v);
                if (P.dfinal_state.p && p >= end - H)
                    v += ld<T>(P.dfinal_state.p, s_row[i] * P.dfinal_state.s[0] + (d0 + cc) * P.dfinal_state.s[1] + (p - (end - H)) * P.dfinal_state.s[2]);
                st<T>(static_cast<void *>(xb), o, v);
            });
        }
    }
    if (!P.part) return;
#pragma unroll
    for (int k = 0; k <= W; k++) sred[k * kThreads + tid] = acc[k];
    __syncthreads();
    if (tid < nc) /* the row groups of channel tid, in order */
        for (int k = 0; k <= W; k++) {
            float s = sred[k * kThreads + tid];
            for (int g = 1; g < kThreads / kConvTC; g++) s += sred[k * kThreads + g * kConvTC + tid];
            P.part[(bt * P.dim + d0 + tid) * (W + 1) + k] = s;
        }
}

/* dweight / dbias of (channel, k) = the blocks' partials added in block order */
static __global__ void __launch_bounds__(256) conv_reduce_kernel(const conv_params P, int64_t nblk) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, n = P.dim * (P.W + 1);
    if (i >= n) return;
    float s = 0.0f;
    for (int64_t j = 0; j < nblk; j++) s += P.part[j * n + i];
    const int64_t d = i / (P.W + 1), k = i % (P.W + 1);
    if (k < P.W) {
        if (P.dweight.p) static_cast<float *>(P.dweight.p)[d * P.dweight.s[0] + k * P.dweight.s[1]] = s;
    } else if (P.dbias.p) {
        static_cast<float *>(P.dbias.p)[d * P.dbias.s[0]] = s;
    }
}

/* ---- >>conv-rows: the unit-L-stride path (the fused block's (batch, dim, L) rows) ----
   Where x, y (forward) / x, dy, dx (backward) have unit L stride and there are no packed
   sequences, init_state or dfinal_state, a warp takes one (batch row, channel) row over a segment
   of L: each lane holds K = 16 / sizeof(T) consecutive steps a pass (one 16-byte load an operand
   where the row is aligned, load_raw's narrower loads where not), the W - 1 steps before its own
   come from the lane before (a shuffle; lane 0 from the previous pass's lane 31, or from global
   memory at the segment start), the next pass's loads are in flight while this one computes, and
   nothing goes through shared memory: the staged tiles of conv_fwd_kernel / conv_bwd_kernel cost
   2-byte loads, two shared-memory passes and index arithmetic (bf16 backward 6.7-8.1x its floor,
   bench/NOTES.md CONV-CUDA-v3). Each output runs the reference's order, as the tiled kernels.
   Backward: the dpre of the W - 1 steps after a lane's own (its dx needs them) are recomputed by
   that lane from the next lane's x and dy (lane 31: the next pass's lane 0, prefetched; at the
   segment's end only lane 0 loads the pass after); dweight / dbias: per-lane sums, a fixed
   shuffle tree a warp, one partial a (batch row, segment, channel) for conv_reduce_kernel. */
template <typename T> struct conv_rows_k { static constexpr int K = 16 / static_cast<int>(sizeof(T)); };

/* the warp's row and segment [s0, s1); false past the grid's last row */
static __device__ __forceinline__ bool conv_rows_at(const conv_params &P, int64_t nseg, int64_t seglen, int64_t *b, int64_t *d,
                                                    int64_t *seg, int64_t *s0, int64_t *s1) {
    const int64_t gw = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
    if (gw >= P.batch * P.dim * nseg) return false;
    const int64_t row = gw / nseg;
    *seg = gw % nseg; *b = row / P.dim; *d = row % P.dim;
    *s0 = *seg * seglen; *s1 = min(*s0 + seglen, P.L);
    return true;
}
static __device__ __forceinline__ int conv_rows_n(int64_t lim, int64_t t, int K) { return static_cast<int>(max(static_cast<int64_t>(0), min(lim - t, static_cast<int64_t>(K)))); }

template <typename T, int W>
static __global__ void __launch_bounds__(kThreads) conv_fwd_rows_kernel(const conv_params P, int64_t nseg, int64_t seglen) {
    constexpr int H = W - 1, K = conv_rows_k<T>::K, PASS = 32 * K;
    const unsigned FULL = 0xffffffffu;
    int64_t b, d, seg, s0, s1;
    if (!conv_rows_at(P, nseg, seglen, &b, &d, &seg, &s0, &s1)) return; /* the whole warp */
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const T *xr = static_cast<const T *>(P.x.p) + b * P.x.s[0] + d * P.x.s[1];
    T *yr = static_cast<T *>(P.y.p) + b * P.y.s[0] + d * P.y.s[1];
    float w[W], carry[H];
#pragma unroll
    for (int k = 0; k < W; k++) w[k] = ldf(P.weight, d * P.weight.s[0] + k * P.weight.s[1]);
    const float bias = P.bias.p ? ldf(P.bias, d * P.bias.s[0]) : 0.0f;
#pragma unroll
    for (int j = 0; j < H; j++) carry[j] = s0 - H + j >= 0 ? ld<T>(static_cast<const void *>(xr), s0 - H + j) : 0.0f;
    rawv<T, K> cur, nxt;
    load_raw<T, K>(cur, xr + s0 + lane * K, conv_rows_n(s1, s0 + lane * K, K), false);
    for (int64_t t0 = s0; t0 < s1; t0 += PASS) {
        const int64_t t = t0 + lane * K;
        if (t0 + PASS < s1) load_raw<T, K>(nxt, xr + t + PASS, conv_rows_n(s1, t + PASS, K), false);
        float xv[H + K]; /* x[t - H .. t + K) */
#pragma unroll
        for (int e = 0; e < K; e++) xv[H + e] = raw_get(cur, e);
#pragma unroll
        for (int j = 0; j < H; j++) {
            const float up = __shfl_up_sync(FULL, xv[K + j], 1);
            xv[j] = lane == 0 ? carry[j] : up;
        }
#pragma unroll
        for (int j = 0; j < H; j++) carry[j] = __shfl_sync(FULL, xv[K + j], 31);
        float out[K];
#pragma unroll
        for (int e = 0; e < K; e++) {
            float acc = bias;
#pragma unroll
            for (int k = 0; k < W; k++) acc = fmaf(w[k], xv[e + k], acc);
            if (P.silu) acc *= sigm(acc);
            out[e] = acc;
        }
        const int n = conv_rows_n(s1, t, K);
        if (n > 0) store_row<T, K>(yr + t, out, n);
        cur = nxt;
    }
}

template <typename T, int W>
static __global__ void __launch_bounds__(kThreads) conv_bwd_rows_kernel(const conv_params P, int64_t nseg, int64_t seglen) {
    constexpr int H = W - 1, K = conv_rows_k<T>::K, PASS = 32 * K;
    const unsigned FULL = 0xffffffffu;
    int64_t b, d, seg, s0, s1;
    if (!conv_rows_at(P, nseg, seglen, &b, &d, &seg, &s0, &s1)) return; /* the whole warp */
    const int lane = static_cast<int>(threadIdx.x) % 32, nl = (lane + 1) % 32;
    const int64_t L = P.L;
    const T *xr = static_cast<const T *>(P.x.p) + b * P.x.s[0] + d * P.x.s[1];
    const T *gr = static_cast<const T *>(P.dy.p) + b * P.dy.s[0] + d * P.dy.s[1];
    T *dxr = P.dx.p ? static_cast<T *>(P.dx.p) + b * P.dx.s[0] + d * P.dx.s[1] : NULL;
    float w[W], carry[H], acc[W + 1];
#pragma unroll
    for (int k = 0; k < W; k++) w[k] = ldf(P.weight, d * P.weight.s[0] + k * P.weight.s[1]);
    const float bias = P.bias.p ? ldf(P.bias, d * P.bias.s[0]) : 0.0f;
#pragma unroll
    for (int k = 0; k <= W; k++) acc[k] = 0.0f;
#pragma unroll
    for (int j = 0; j < H; j++) carry[j] = s0 - H + j >= 0 ? ld<T>(static_cast<const void *>(xr), s0 - H + j) : 0.0f;
    rawv<T, K> cx, cg, nx, ng;
    {
        const int n = conv_rows_n(s1, s0 + lane * K, K);
        load_raw<T, K>(cx, xr + s0 + lane * K, n, false);
        load_raw<T, K>(cg, gr + s0 + lane * K, n, false);
    }
    for (int64_t t0 = s0; t0 < s1; t0 += PASS) {
        const int64_t t = t0 + lane * K, tn = t + PASS;
        /* the next pass (inside the segment: every lane; after it: lane 0 only, for lane 31's halo) */
        const int nn = conv_rows_n(t0 + PASS < s1 ? s1 : (lane == 0 ? L : tn), tn, K);
        load_raw<T, K>(nx, xr + tn, nn, false);
        load_raw<T, K>(ng, gr + tn, nn, false);
        float xv[H + K + H], g[K + H]; /* x[t - H .. t + K + H), dy[t .. t + K + H) */
#pragma unroll
        for (int e = 0; e < K; e++) { xv[H + e] = raw_get(cx, e); g[e] = raw_get(cg, e); }
#pragma unroll
        for (int j = 0; j < H; j++) {
            const float up = __shfl_up_sync(FULL, xv[K + j], 1);
            const float rx = __shfl_sync(FULL, lane == 0 ? raw_get(nx, j) : xv[H + j], nl);
            const float rg = __shfl_sync(FULL, lane == 0 ? raw_get(ng, j) : g[j], nl);
            xv[j] = lane == 0 ? carry[j] : up;
            xv[H + K + j] = rx;
            g[K + j] = rg;
        }
#pragma unroll
        for (int j = 0; j < H; j++) carry[j] = __shfl_sync(FULL, xv[K + j], 31);
        float dp[K + H]; /* dpre of steps t .. t + K + H (0 past L) */
#pragma unroll
        for (int e = 0; e < K + H; e++) {
            float pre = bias;
#pragma unroll
            for (int k = 0; k < W; k++) pre = fmaf(w[k], xv[e + k], pre);
            float v = g[e];
            if (P.silu) {
                const float sgm = sigm(pre);
                v = v * (sgm * fmaf(pre, 1.0f - sgm, 1.0f));
            }
            dp[e] = t + e < L ? v : 0.0f;
        }
        const int n = conv_rows_n(s1, t, K);
#pragma unroll
        for (int e = 0; e < K; e++)
            if (e < n) {
                acc[W] += dp[e];
#pragma unroll
                for (int k = 0; k < W; k++) acc[k] = fmaf(dp[e], xv[e + k], acc[k]);
            }
        if (dxr && n > 0) {
            float out[K];
#pragma unroll
            for (int e = 0; e < K; e++) {
                float v = 0.0f;
#pragma unroll
                for (int k = H; k >= 0; k--) /* dpre of t + e + H - k, inside the row */
                    if (t + e + H - k < L) v = fmaf(w[k], dp[e + H - k], v);
                out[e] = v;
            }
            store_row<T, K>(dxr + t, out, n);
        }
        cx = nx; cg = ng;
    }
    if (!P.part) return;
#pragma unroll
    for (int k = 0; k <= W; k++)
#pragma unroll
        for (int m = 16; m >= 1; m >>= 1) acc[k] += __shfl_xor_sync(FULL, acc[k], m);
    if (lane == 0)
#pragma unroll
        for (int k = 0; k <= W; k++) P.part[((b * nseg + seg) * P.dim + d) * (W + 1) + k] = acc[k];
}

/* ---- >>conv-cl: the channels-last path (the Mamba-2 layer's xBC: (batch, L, dim) memory) ----
   Where x, y (forward) / x, dy, dx (backward) have unit channel stride, the rows path does not
   apply and there are no packed sequences, init_state or dfinal_state, a thread takes kConvCK = 4
   consecutive channels of one batch row (one 8-byte load a step and operand for 2-byte T, 16 bytes
   for f32) and walks kConvCS = 64 steps in order, the last W - 1 inputs (backward: also the last
   W - 1 dpre) in registers; a warp's lanes take consecutive channel groups (128 channels of a
   step: whole sectors), a block's four warps four consecutive segments: the tiled backward's tile
   of kConvTB * kConvTL = 256 steps, whose dweight / dbias partial the block sums in warp order
   (the tiled kernel's partial layout: the same workspace and conv_reduce_kernel); the forward's
   segments are shorter where 64 would leave few blocks (conv_cl_plan). The loads of
   kConvCU steps are issued before the first is used. Each output runs the reference's order, as
   the tiled kernels. The automatic choice wherever it applies (conv_cl_path). Why: the tiled kernels stage 32-channel tiles through shared memory with
   2-byte element loads: conv_bwd_kernel took 383 us where causal_conv1d's channels-last backward
   took 104 us (H100, the 130m layer, bench/NOTES.md CONV-CUDA-v8). */
const int kConvCK = 4;  /* channels a thread */
const int kConvCS = 64; /* steps a warp */
const int kConvCU = 8;  /* steps whose loads are issued together (the backward: half, two operands a step) */
static_assert(kConvCS * (kThreads / 32) == kConvTB * kConvTL, "a block's segments are the backward's tile");
static_assert(kConvCS % kConvCU == 0, "the forward's segments halve down to kConvCU");

/* the thread's channels [d, d + nk) and segment [s0, s1) of seg steps of block blockIdx.x (channel
   blocks of 32 * kConvCK, then batch rows, then tiles of 4 seg steps, ntl a row); nk 0: none (past
   dim or L) */
static __device__ __forceinline__ void conv_cl_at(const conv_params &P, int64_t ntl, int seg, int64_t *b, int64_t *tile, int64_t *d, int *nk,
                                                  int64_t *s0, int64_t *s1) {
    const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
    const int64_t ncb = (P.dim + 32 * kConvCK - 1) / (32 * kConvCK), blk = blockIdx.x, bt = blk / ncb;
    *b = bt / ntl; *tile = bt % ntl;
    *d = blk % ncb * (32 * kConvCK) + lane * kConvCK;
    *s0 = (*tile * (kThreads / 32) + warp) * seg;
    *s1 = min(*s0 + seg, P.L);
    *nk = *d < P.dim && *s0 < P.L ? static_cast<int>(min(static_cast<int64_t>(kConvCK), P.dim - *d)) : 0;
}
/* the thread's taps and biases (0 past nk) */
template <int W>
static __device__ __forceinline__ void conv_cl_params(const conv_params &P, int64_t d, int nk, float (&w)[W][kConvCK], float (&bias)[kConvCK]) {
#pragma unroll
    for (int c = 0; c < kConvCK; c++) {
#pragma unroll
        for (int k = 0; k < W; k++) w[k][c] = c < nk ? ldf(P.weight, (d + c) * P.weight.s[0] + k * P.weight.s[1]) : 0.0f;
        bias[c] = c < nk && P.bias.p ? ldf(P.bias, (d + c) * P.bias.s[0]) : 0.0f;
    }
}

template <typename T, int W>
static __global__ void __launch_bounds__(kThreads) conv_fwd_cl_kernel(const conv_params P, int64_t ntl, int seg) {
    constexpr int H = W - 1, K = kConvCK, U = kConvCU;
    int64_t b, tile, d, s0, s1;
    int nk;
    conv_cl_at(P, ntl, seg, &b, &tile, &d, &nk, &s0, &s1);
    if (nk == 0) return;
    const T *xr = static_cast<const T *>(P.x.p) + b * P.x.s[0] + d;
    T *yr = static_cast<T *>(P.y.p) + b * P.y.s[0] + d;
    const int64_t sx = P.x.s[2], sy = P.y.s[2];
    float w[W][K], bias[K], win[H > 0 ? H : 1][K]; /* win[j]: x of step t - H + j */
    conv_cl_params<W>(P, d, nk, w, bias);
#pragma unroll
    for (int j = 0; j < H; j++) {
        rawv<T, K> v;
        if (s0 - H + j >= 0) load_raw<T, K>(v, xr + (s0 - H + j) * sx, nk, false);
#pragma unroll
        for (int c = 0; c < K; c++) win[j][c] = s0 - H + j >= 0 ? raw_get(v, c) : 0.0f;
    }
    for (int64_t t0 = s0; t0 < s1; t0 += U) {
        rawv<T, K> v[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (t0 + u < s1) load_raw<T, K>(v[u], xr + (t0 + u) * sx, nk, false);
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (t0 + u >= s1) break;
            float out[K], xq[K];
#pragma unroll
            for (int c = 0; c < K; c++) {
                xq[c] = raw_get(v[u], c);
                float acc = bias[c];
#pragma unroll
                for (int k = 0; k < H; k++) acc = fmaf(w[k][c], win[k][c], acc);
                acc = fmaf(w[H][c], xq[c], acc);
                if (P.silu) acc *= sigm(acc);
                out[c] = acc;
            }
            store_row<T, K>(yr + (t0 + u) * sy, out, nk);
#pragma unroll
            for (int c = 0; c < K; c++) {
#pragma unroll
                for (int j = 0; j + 1 < H; j++) win[j][c] = win[j + 1][c];
                if (H > 0) win[H - 1][c] = xq[c];
            }
        }
    }
}

template <typename T, int W>
static __global__ void __launch_bounds__(kThreads) conv_bwd_cl_kernel(const conv_params P, int64_t ntl) {
    constexpr int H = W - 1, K = kConvCK, U = kConvCU / 2, NW = kThreads / 32;
    __shared__ float sred[NW][W + 1][32 * K];
    const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
    int64_t b, tile, d, s0, s1;
    int nk;
    conv_cl_at(P, ntl, kConvCS, &b, &tile, &d, &nk, &s0, &s1);
    float acc[W + 1][K];
#pragma unroll
    for (int k = 0; k <= W; k++)
#pragma unroll
        for (int c = 0; c < K; c++) acc[k][c] = 0.0f;
    if (nk > 0) { /* (no return before the block's sums) */
        const int64_t L = P.L, qe = min(s1 + H, L); /* steps with a dpre: [s0, qe); dpre 0 from L on */
        const T *xr = static_cast<const T *>(P.x.p) + b * P.x.s[0] + d;
        const T *gr = static_cast<const T *>(P.dy.p) + b * P.dy.s[0] + d;
        T *dxr = P.dx.p ? static_cast<T *>(P.dx.p) + b * P.dx.s[0] + d : NULL;
        const int64_t sx = P.x.s[2], sg = P.dy.s[2], sdx = P.dx.p ? P.dx.s[2] : 0;
        float w[W][K], bias[K], win[H][K], dpr[H][K]; /* win[j]: x of step q - H + j; dpr[j]: dpre of q - H + j */
        conv_cl_params<W>(P, d, nk, w, bias);
#pragma unroll
        for (int j = 0; j < H; j++) {
            rawv<T, K> v;
            if (s0 - H + j >= 0) load_raw<T, K>(v, xr + (s0 - H + j) * sx, nk, false);
#pragma unroll
            for (int c = 0; c < K; c++) {
                win[j][c] = s0 - H + j >= 0 ? raw_get(v, c) : 0.0f;
                dpr[j][c] = 0.0f; /* (steps before s0: never read) */
            }
        }
        for (int64_t q0 = s0; q0 < s1 + H; q0 += U) {
            rawv<T, K> vx[U], vg[U];
#pragma unroll
            for (int u = 0; u < U; u++)
                if (q0 + u < qe) {
                    load_raw<T, K>(vx[u], xr + (q0 + u) * sx, nk, false);
                    load_raw<T, K>(vg[u], gr + (q0 + u) * sg, nk, false);
                }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int64_t q = q0 + u;
                if (q >= s1 + H) break;
                float dp[K], xq[K];
#pragma unroll
                for (int c = 0; c < K; c++) {
                    xq[c] = 0.0f;
                    dp[c] = 0.0f;
                    if (q < L) {
                        xq[c] = raw_get(vx[u], c);
                        float pre = bias[c];
#pragma unroll
                        for (int k = 0; k < H; k++) pre = fmaf(w[k][c], win[k][c], pre);
                        pre = fmaf(w[H][c], xq[c], pre);
                        float v = raw_get(vg[u], c);
                        if (P.silu) {
                            const float sgm = sigm(pre);
                            v = v * (sgm * fmaf(pre, 1.0f - sgm, 1.0f));
                        }
                        dp[c] = v;
                    }
                    if (q < s1) {
                        acc[W][c] += dp[c];
#pragma unroll
                        for (int k = 0; k < H; k++) acc[k][c] = fmaf(dp[c], win[k][c], acc[k][c]);
                        acc[H][c] = fmaf(dp[c], xq[c], acc[H][c]);
                    }
                }
                if (dxr && q - H >= s0) { /* dx of p = q - H: the dpre of p + H - k = q - k, inside [0, L) */
                    float out[K];
#pragma unroll
                    for (int c = 0; c < K; c++) {
                        float v = 0.0f;
#pragma unroll
                        for (int k = H; k >= 1; k--)
                            if (q - k < L) v = fmaf(w[k][c], dpr[H - k][c], v);
                        if (q < L) v = fmaf(w[0][c], dp[c], v);
                        out[c] = v;
                    }
                    store_row<T, K>(dxr + (q - H) * sdx, out, nk);
                }
#pragma unroll
                for (int c = 0; c < K; c++) {
#pragma unroll
                    for (int j = 0; j + 1 < H; j++) { win[j][c] = win[j + 1][c]; dpr[j][c] = dpr[j + 1][c]; }
                    win[H - 1][c] = xq[c];
                    dpr[H - 1][c] = dp[c];
                }
            }
        }
    }
    if (!P.part) return;
#pragma unroll
    for (int k = 0; k <= W; k++)
#pragma unroll
        for (int c = 0; c < K; c++) sred[warp][k][lane * K + c] = acc[k][c];
    __syncthreads();
    static_assert(kThreads == 32 * K, "a thread a channel of the block's sums");
    const int ch = static_cast<int>(threadIdx.x);
    const int64_t dc = d - lane * K + ch; /* the block's first channel + ch */
    if (dc < P.dim)
        for (int k = 0; k <= W; k++) {
            float s = sred[0][k][ch];
            for (int g = 1; g < NW; g++) s += sred[g][k][ch];
            P.part[((b * ntl + tile) * P.dim + dc) * (W + 1) + k] = s;
        }
}

/* dinit_state[s, d, j]: the dx of position s0 - H + j (before sequence s), from the dpre of
   s0 .. s0 + j (recomputed), plus dfinal_state where that position is one of the last H */
template <typename T>
static __global__ void __launch_bounds__(256) conv_dinit_kernel(const conv_params P) {
    const int H = P.W - 1;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= P.rows * P.dim * H) return;
    const int64_t s = i / (P.dim * H), d = i / H % P.dim, j = i % H;
    const int64_t s0 = P.cu ? P.cu[s] : 0, e = P.cu ? P.cu[s + 1] : P.L, b = P.cu ? 0 : s, p = s0 - H + j;
    float w[SELSCAN_CONV_MAX_WIDTH];
    for (int k = 0; k < P.W; k++) w[k] = ldf(P.weight, d * P.weight.s[0] + k * P.weight.s[1]);
    const float bias = P.bias.p ? ldf(P.bias, d * P.bias.s[0]) : 0.0f;
    float v = 0.0f;
    for (int k = H; k >= 0; k--) {
        const int64_t q = p + H - k;
        if (q >= s0 && q < e) v = fmaf(w[k], conv_dpre_g<T>(P, b, d, q, s0, s, w, bias), v);
    }
    if (P.dfinal_state.p && p >= e - H) v += ld<T>(P.dfinal_state.p, s * P.dfinal_state.s[0] + d * P.dfinal_state.s[1] + (p - (e - H)) * P.dfinal_state.s[2]);
    st<T>(P.dinit_state.p, s * P.dinit_state.s[0] + d * P.dinit_state.s[1] + j * P.dinit_state.s[2], v);
}

/* The update: one thread a (batch row, channel), W a template parameter (the window, taps and
   the state's last H entries in registers, no local memory); y of every token from a window of
   the state's last H entries and the tokens, then the state rolled left by the token count
   (entry i takes entry i + L of [state, x]). Grid: channel blocks on x, batch rows on y (rows
   blockIdx.y, + gridDim.y, ...): no 64-bit division a thread (predicted to close part of the
   ~0.4 us a call it trails causal_conv1d's update by in a decode graph; measured no change,
   bench/NOTES.md CONV-CUDA-v6).
   Launched plainly: with programmatic dependent launch after a kernel that does not trigger it
   (in_proj's GEMM in decode) it measured 0.13-0.17 us slower a call (CONV-CUDA-v6); the
   griddepcontrol instructions stay for selscan__conv_step_cuda_tuned(pdl), no-ops otherwise. */
template <typename T, int W>
static __device__ __forceinline__ void conv_step_row(const conv_params &P, int64_t b, int64_t d) {
    const int64_t row = P.idx ? P.idx[b] : b, L = P.L, S = P.S;
    if (row < 0 || row >= P.ncache) { /* padding: y = 0, no state touched */
        for (int64_t l = 0; l < L; l++) st<T>(P.y.p, b * P.y.s[0] + d * P.y.s[1] + l * P.y.s[2], 0.0f);
        return;
    }
    constexpr int H = W - 1;
    T *sp = static_cast<T *>(P.state.p) + row * P.state.s[0] + d * P.state.s[1];
    const T *xp = static_cast<const T *>(P.x.p) + b * P.x.s[0] + d * P.x.s[1];
    const int64_t ss = P.state.s[2], xs = P.x.s[2];
    float w[W], win[W];
    T last[H]; /* the state's last H entries as stored (the roll rewrites them) */
#pragma unroll
    for (int k = 0; k < W; k++) w[k] = ldp<T>(P.weight.p, d * P.weight.s[0] + k * P.weight.s[1], P.prmT);
    /* the bias (without one: the weight's element, selected away) and the first token loaded with
       the weights and the state, not behind a branch: the compiler waits on a branch's loads at
       its end, and a decode call (L = 1) then waited two round trips (bench/NOTES.md CONV-CUDA-v7) */
    const float bl = ldp<T>(P.bias.p ? P.bias.p : P.weight.p, P.bias.p ? d * P.bias.s[0] : d * P.weight.s[0], P.prmT);
    const float x0 = ld<T>(static_cast<const void *>(xp), 0); /* (L >= 1: validated) void *: see conv_final_kernel */
    const float bias = P.bias.p ? bl : 0.0f;
#pragma unroll
    for (int k = 0; k < H; k++) {
        last[k] = sp[(S - H + k) * ss];
        win[k] = to_float(last[k]);
    }
    for (int64_t l = 0; l < L; l++) {
        float acc = bias;
        win[H] = l == 0 ? x0 : ld<T>(static_cast<const void *>(xp), l * xs);
#pragma unroll
        for (int k = 0; k <= H; k++) acc = fmaf(w[k], win[k], acc);
        if (P.silu) acc *= sigm(acc);
        st<T>(P.y.p, b * P.y.s[0] + d * P.y.s[1] + l * P.y.s[2], acc);
#pragma unroll
        for (int k = 0; k < H; k++) win[k] = win[k + 1];
    }
    /* the state rolled left by L: entry j takes entry j + L of [state, x], in three runs: entries
       read ahead of their rewrite (j + L < S - H), the old last H from registers, the tokens. A
       load then store an entry made the roll a chain of dependent round trips (the compiler cannot
       tell the addresses apart); decode's usual S = W, L = 1 is now W stores and no load. */
    const int64_t j1 = S - H - L; /* [0, j1): from the state; [j1, S - L): from last; [S - L, S): x */
    for (int64_t j = 0; j < j1; j++) sp[j * ss] = sp[(j + L) * ss];
#pragma unroll
    for (int k = 0; k < H; k++)
        if (j1 + k >= 0) sp[(j1 + k) * ss] = last[k];
    for (int64_t j = S - L < 0 ? 0 : S - L; j < S; j++) sp[j * ss] = xp[(j + L - S) * xs];
}
template <typename T, int W>
static __global__ void __launch_bounds__(kThreads) conv_step_kernel(const conv_params P) {
    pdl_wait();
    pdl_launch_dependents();
    const int64_t d = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (d >= P.dim) return;
    for (int64_t b = blockIdx.y; b < P.batch; b += gridDim.y) conv_step_row<T, W>(P, b, d);
}

/* ---- host side ---- */

/* lanes along channels for a tensor's staging: its channel stride is the smaller (and steps are
   not unit-stride) */
static int conv_lanes_cl(const selscan__ten &t) { return t.data && t.s[2] != 1 && t.s[1] <= t.s[2] ? 1 : 0; }

static void conv_fill(conv_params &P, const selscan__cprob &q, const int64_t *dcu) {
    memset(&P, 0, sizeof P);
    P.batch = q.batch; P.dim = q.dim; P.L = q.L; P.nseq = q.nseq; P.rows = q.rows;
    P.W = static_cast<int>(q.W); P.silu = q.silu;
    P.cu = q.cu ? dcu : NULL;
    SELSCAN__CONV_OPERANDS(SELSCAN__CUDA_CT, &q)
    P.clx = conv_lanes_cl(q.x); P.cly = conv_lanes_cl(q.y);
}

/* Grid sizes of a conv call (1-D grids), checked: false when one is past 2^31 - 1 blocks or a
   count overflows. tiles: steps a tile (forward kConvTL, backward kConvTB * kConvTL). */
static bool conv_grids(const selscan__cprob &q, int64_t tiles, int64_t *ntiles, int64_t *main_blocks, int64_t *aux_blocks) {
    sizecalc c;
    *ntiles = cdiv(q.L, tiles);
    *main_blocks = c.mul(c.mul(q.batch, *ntiles), cdiv(q.dim, kConvTC));
    *aux_blocks = cdiv(c.mul(c.mul(q.rows, q.dim), q.W), 256);
    return c.ok && *main_blocks <= kMaxGrid && *aux_blocks <= kMaxGrid && cdiv(c.mul(q.dim, q.W + 1), 256) <= kMaxGrid;
}

/* The rows path (>>conv-rows): where it applies, and its segments. A warp a (row, segment);
   segments as long as the row unless that leaves under ~16k warps (a few waves of an H100 /
   H200: the short-batch, long-L calls), whole passes, never more a row than the tiled backward's
   partials (cdiv(L, kConvTB * kConvTL)): the workspace size does not depend on the path. false:
   the grid would pass 2^31 - 1 blocks. */
static bool conv_rows_plan(const selscan__cprob &q, int64_t *nseg, int64_t *seglen, int64_t *blocks) {
    const int64_t pass = 32 * (16 / static_cast<int64_t>(selscan__dtype_size(q.dt))), rows = q.batch * q.dim;
    const int64_t ns = std::max(static_cast<int64_t>(1), std::min(cdiv(static_cast<int64_t>(16384), rows), cdiv(q.L, static_cast<int64_t>(kConvTB) * kConvTL)));
    *seglen = cdiv(cdiv(q.L, ns), pass) * pass;
    *nseg = cdiv(q.L, *seglen);
    sizecalc c;
    *blocks = cdiv(c.mul(rows, *nseg), static_cast<int64_t>(kThreads / 32));
    return c.ok && *blocks <= kMaxGrid;
}
static bool conv_unit_l(const selscan__ten &t) { return !t.data || t.s[2] == 1; }
static bool conv_unit_c(const selscan__ten &t) { return !t.data || t.s[1] == 1; }
/* The channels-last path (>>conv-cl): its blocks (channel blocks x batch rows x ntl tiles of four
   segments of seg steps). The backward's segments are kConvCS steps (a block a partial's 256 steps);
   the forward's halve down to kConvCU while that leaves under 1024 blocks (two waves of an H100's
   four blocks an SM: a short prefill's few blocks would each walk 64 steps; conv_cl_fwd_blocks, which
   the tests vary so that every segment length runs). false past 2^31 - 1 blocks. */
static int64_t conv_cl_fwd_blocks = 1024;
/* Whether the automatic choice takes the channels-last path (1; 0 gives the tiled kernels, the path
   before CONV-CUDA-v8: bench_cuda's baseline rows). */
static int conv_cl_path = 1;
static bool conv_cl_plan(const selscan__cprob &q, bool fwd, int64_t *ntl, int *seg, int64_t *blocks) {
    sizecalc c;
    const int64_t nb = c.mul(cdiv(q.dim, static_cast<int64_t>(32 * kConvCK)), q.batch);
    *seg = kConvCS;
    while (fwd && *seg > kConvCU && c.ok && c.mul(nb, cdiv(q.L, static_cast<int64_t>(kThreads / 32) * *seg)) < conv_cl_fwd_blocks) *seg /= 2;
    *ntl = cdiv(q.L, static_cast<int64_t>(kThreads / 32) * *seg);
    *blocks = c.mul(nb, *ntl);
    return c.ok && *blocks <= kMaxGrid;
}

template <typename F> static void conv_with_width(int W, F &&f) {
    if (W == 2) f(std::integral_constant<int, 2>());
    else if (W == 3) f(std::integral_constant<int, 3>());
    else f(std::integral_constant<int, 4>());
}

/* The device copy of cu_seqlens: given for packed sequences, not overlapping an output (the
   conv's and the SSD's validated problems: q.cu, q.nseq). */
template <typename Q>
static selscan_status check_cu(const Q &q, const selscan_cuda_ext *x, const selscan__ten *const *outs, int nout, selscan_diag *dg) {
    if (!q.cu) return SELSCAN_OK;
    if (!x || !x->cu_seqlens_device) return fail(dg, SELSCAN_ERR_NULL, "cu_seqlens_device", SELSCAN_RULE_MISSING_PACKED);
    const selscan__ten cut = flat(x->cu_seqlens_device, (q.nseq + 1) * 8);
    const selscan__ten *cup[] = {&cut};
    for (int i = 0; i < nout; i++)
        if (outs[i]->data && check_overlap(*outs[i], cup, 1, dg, "cu_seqlens_device", "overlaps an output") != SELSCAN_OK)
            return SELSCAN_ERR_ALIAS;
    return SELSCAN_OK;
}

/* A conv call's launches: the tiled kernels' grids (ntiles: tiles, backward: blocks, a batch row;
   nblk the main kernel's blocks, naux final_state's / dinit_state's), the rows path (>>conv-rows:
   rows, with nseg segments of seglen steps a row in rblk blocks) where it applies, else the
   channels-last path (>>conv-cl: cl, ntl tiles a row in cblk blocks) where it applies */
struct conv_plan {
    int64_t ntiles, nblk, naux;
    bool rows, cl;
    int64_t nseg, seglen, rblk, ntl, cblk;
    int cseg;
};

/* The conv forward before its launches: validation, its parameters and plan */
static selscan_status conv_forward_begin(const selscan_conv_problem *p, const selscan_cuda_ext *x, selscan__cprob *q, conv_params &P,
                                         conv_plan *pl) {
    selscan_status st;
    if ((st = selscan__conv_validate_forward(p, q)) != SELSCAN_OK) return st;
    selscan_diag *dg = p->diag;
    const selscan__ten *outs[] = {SELSCAN__CONV_OPERANDS(SELSCAN__OPD_OUTS, q)};
    if ((st = check_cu(*q, x, outs, SELSCAN__COUNT(outs), dg)) != SELSCAN_OK) return st;
    if (!conv_grids(*q, kConvTL, &pl->ntiles, &pl->nblk, &pl->naux)) return fail_grid(dg);
    conv_fill(P, *q, x ? x->cu_seqlens_device : NULL);
    P.ntiles = pl->ntiles;
    pl->nseg = pl->seglen = pl->rblk = 0;
    pl->rows = !q->cu && !q->init_state.data && conv_unit_l(q->x) && conv_unit_l(q->y) && conv_rows_plan(*q, &pl->nseg, &pl->seglen, &pl->rblk);
    pl->ntl = pl->cblk = 0;
    pl->cseg = 0;
    pl->cl = conv_cl_path && !pl->rows && !q->cu && !q->init_state.data && conv_unit_c(q->x) && conv_unit_c(q->y) &&
             conv_cl_plan(*q, true, &pl->ntl, &pl->cseg, &pl->cblk);
    return SELSCAN_OK;
}
static selscan_status conv_forward_run(const selscan__cprob &q, const conv_params &P, const conv_plan &pl, cudaStream_t stream,
                                       cudaError_t *err) {
    selscan_cuda_detail::with_dtype(q.dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        conv_with_width(P.W, [&](auto wc) {
            if (pl.rows) conv_fwd_rows_kernel<T, decltype(wc)::value><<<static_cast<unsigned>(pl.rblk), kThreads, 0, stream>>>(P, pl.nseg, pl.seglen);
            else if (pl.cl) conv_fwd_cl_kernel<T, decltype(wc)::value><<<static_cast<unsigned>(pl.cblk), kThreads, 0, stream>>>(P, pl.ntl, pl.cseg);
            else conv_fwd_kernel<T, decltype(wc)::value><<<static_cast<unsigned>(pl.nblk), kThreads, 0, stream>>>(P);
        });
    });
    SELSCAN__LAUNCHED();
    if (q.final_state.data) {
        selscan_cuda_detail::with_dtype(q.dt, [&](auto tag) {
            conv_final_kernel<typename decltype(tag)::type><<<static_cast<unsigned>(pl.naux), 256, 0, stream>>>(P);
        });
        SELSCAN__LAUNCHED();
    }
    return SELSCAN_OK;
}
static selscan_status conv_forward(const selscan_conv_problem *p, const selscan_cuda_ext *x, cudaStream_t stream) {
    selscan__cprob q;
    conv_params P;
    conv_plan pl;
    const selscan_status st = conv_forward_begin(p, x, &q, P, &pl);
    return st != SELSCAN_OK ? st : conv_forward_run(q, P, pl, stream, x ? x->cuda_error : NULL);
}

/* The backward's workspace bytes (before the alignment slack): the per-block partials, when
   dweight or dbias is asked for; -1 when the size overflows. */
static int64_t conv_ws_need(const selscan__cprob &q, const selscan__cgrd &r) {
    if (!r.dweight.data && !r.dbias.data) return 0;
    sizecalc c;
    const int64_t n = c.al(c.mul(c.mul(q.batch, cdiv(q.L, static_cast<int64_t>(kConvTB) * kConvTL)), c.mul(q.dim, q.W + 1), 4));
    return c.ok ? n : -1;
}

static selscan_status conv_workspace_size(const selscan_conv_problem *p, const selscan_conv_grads *g, size_t *bytes) {
    selscan__cprob q;
    selscan__cgrd r;
    selscan_status st;
    if (!bytes) return selscan__fail(p ? p->diag : NULL, SELSCAN_ERR_NULL, "bytes", SELSCAN_RULE_MISSING);
    if ((st = selscan__conv_validate_backward(p, g, &q, &r)) != SELSCAN_OK) return st;
    const int64_t need = conv_ws_need(q, r);
    if (need < 0) return fail_size(p->diag);
    *bytes = ws_reported(need);
    return SELSCAN_OK;
}

/* The conv backward before its launches: validation, the workspace (P.part: the partials), its
   parameters and plan */
static selscan_status conv_backward_begin(const selscan_conv_problem *p, const selscan_conv_grads *g, const selscan_cuda_ext *x,
                                          void *workspace, size_t bytes, selscan__cprob *q, selscan__cgrd *r, conv_params &P,
                                          conv_plan *pl) {
    selscan_status st;
    char *ws;
    if ((st = selscan__conv_validate_backward(p, g, q, r)) != SELSCAN_OK) return st;
    selscan_diag *dg = p->diag;
    const selscan__ten *outs[] = {SELSCAN__CONV_GRAD_OPERANDS(SELSCAN__OPD_OUTS, r)};
    if ((st = check_cu(*q, x, outs, SELSCAN__COUNT(outs), dg)) != SELSCAN_OK) return st;
    if (!conv_grids(*q, static_cast<int64_t>(kConvTB) * kConvTL, &pl->ntiles, &pl->nblk, &pl->naux)) return fail_grid(dg);
    const int64_t need = conv_ws_need(*q, *r);
    if (need < 0) return fail_size(dg);
    if ((st = take_workspace(x, need, &workspace, &bytes, dg)) != SELSCAN_OK) return st;
    if ((st = check_workspace(workspace, bytes, need, &ws, dg)) != SELSCAN_OK) return st;
    if (ws) {
        const selscan__ten wst = flat(ws, need), cut = flat(q->cu ? x->cu_seqlens_device : NULL, (q->nseq + 1) * 8);
        const selscan__ten *all[] = {SELSCAN__CONV_OPERANDS(SELSCAN__OPD_INS, q) SELSCAN__CONV_GRAD_OPERANDS(SELSCAN__OPD_ALL, r) &cut};
        if ((st = check_overlap(wst, all, SELSCAN__COUNT(all), dg, "workspace", "overlaps an operand")) != SELSCAN_OK) return st;
    }
    conv_fill(P, *q, x ? x->cu_seqlens_device : NULL);
    P.ntiles = pl->ntiles;
    SELSCAN__CONV_GRAD_OPERANDS(SELSCAN__CUDA_CT, r)
    P.cldy = conv_lanes_cl(r->dy); P.cldx = conv_lanes_cl(r->dx);
    P.part = need ? reinterpret_cast<float *>(ws) : NULL;
    pl->nseg = pl->seglen = pl->rblk = 0;
    pl->rows = !q->cu && !q->init_state.data && !r->dfinal_state.data && conv_unit_l(q->x) && conv_unit_l(r->dy) && conv_unit_l(r->dx) &&
               conv_rows_plan(*q, &pl->nseg, &pl->seglen, &pl->rblk);
    pl->ntl = pl->cblk = 0;
    pl->cseg = 0;
    pl->cl = conv_cl_path && !pl->rows && !q->cu && !q->init_state.data && !r->dfinal_state.data && conv_unit_c(q->x) && conv_unit_c(r->dy) &&
             conv_unit_c(r->dx) && conv_cl_plan(*q, false, &pl->ntl, &pl->cseg, &pl->cblk);
    return SELSCAN_OK;
}
static selscan_status conv_backward_run(const selscan__cprob &q, const selscan__cgrd &r, const conv_params &P, const conv_plan &pl,
                                        cudaStream_t stream, cudaError_t *err) {
    if (P.dx.p || P.part) {
        selscan_cuda_detail::with_dtype(q.dt, [&](auto tag) {
            using T = typename decltype(tag)::type;
            conv_with_width(P.W, [&](auto wc) {
                if (pl.rows) conv_bwd_rows_kernel<T, decltype(wc)::value><<<static_cast<unsigned>(pl.rblk), kThreads, 0, stream>>>(P, pl.nseg, pl.seglen);
                else if (pl.cl) conv_bwd_cl_kernel<T, decltype(wc)::value><<<static_cast<unsigned>(pl.cblk), kThreads, 0, stream>>>(P, pl.ntl);
                else conv_bwd_kernel<T, decltype(wc)::value><<<static_cast<unsigned>(pl.nblk), kThreads, 0, stream>>>(P);
            });
        });
        SELSCAN__LAUNCHED();
    }
    if (P.part) {
        conv_reduce_kernel<<<nblocks(q.dim * (q.W + 1), 256), 256, 0, stream>>>(P, q.batch * (pl.rows ? pl.nseg : pl.cl ? pl.ntl : pl.ntiles));
        SELSCAN__LAUNCHED();
    }
    if (r.dinit_state.data) {
        selscan_cuda_detail::with_dtype(q.dt, [&](auto tag) {
            conv_dinit_kernel<typename decltype(tag)::type><<<static_cast<unsigned>(pl.naux), 256, 0, stream>>>(P);
        });
        SELSCAN__LAUNCHED();
    }
    return SELSCAN_OK;
}
static selscan_status conv_backward(const selscan_conv_problem *p, const selscan_conv_grads *g, const selscan_cuda_ext *x,
                                    void *workspace, size_t bytes, cudaStream_t stream) {
    selscan__cprob q;
    selscan__cgrd r;
    conv_params P;
    conv_plan pl;
    const selscan_status st = conv_backward_begin(p, g, x, workspace, bytes, &q, &r, P, &pl);
    return st != SELSCAN_OK ? st : conv_backward_run(q, r, P, pl, stream, x ? x->cuda_error : NULL);
}

/* The conv update before its launch: validation, its parameters and grid (channel blocks on x,
   batch rows on y, at most 65535: rows beyond it a loop) */
static selscan_status conv_step_begin(const selscan_conv_step_problem *s, selscan__cstp *q, conv_params &P, dim3 *grid) {
    selscan_status st = selscan__conv_validate_step_ex(s, q, 0);
    if (st != SELSCAN_OK) return st;
    const int64_t gx = cdiv(q->dim, kThreads), gy = q->batch < 65535 ? q->batch : 65535;
    if (gx > kMaxGrid) return fail_grid(s->diag);
    memset(&P, 0, sizeof P);
    P.batch = q->batch; P.dim = q->dim; P.L = q->L; P.S = q->S; P.ncache = q->ncache; P.W = static_cast<int>(q->W); P.silu = q->silu;
    P.prmT = q->weightT; /* (= q->biasT: one flag) */
    P.idx = q->idx;
    SELSCAN__CONV_STEP_OPERANDS(SELSCAN__CUDA_CT, q)
    *grid = dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
    return SELSCAN_OK;
}
/* The conv update, launched plainly (see conv_step_kernel) */
static selscan_status conv_step(const selscan_conv_step_problem *s, const selscan_cuda_ext *x, cudaStream_t stream) {
    selscan__cstp q;
    conv_params P;
    dim3 grid;
    cudaError_t *err = x ? x->cuda_error : NULL;
    const selscan_status st = conv_step_begin(s, &q, P, &grid);
    if (st != SELSCAN_OK) return st;
    selscan_cuda_detail::with_dtype(q.dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        conv_with_width(P.W, [&](auto wc) { conv_step_kernel<T, decltype(wc)::value><<<grid, kThreads, 0, stream>>>(P); });
    });
    SELSCAN__LAUNCHED();
    return SELSCAN_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* >>ssd-cuda        Mamba-2's SSD scan (selscan.h >>ssd-api)                                       */
/* ---------------------------------------------------------------------------------------------- */
/* DESIGN. A block walks one (batch row, head, slice of PB channels) through L in order, the
   slice's PB x N state in registers: a thread holds PPT channels x NPT states, the 16 lanes of a
   channel group the N states of its PPT channels (lane l: states 4l + 64i + 0..3, i.e. float4
   rows of shared memory), so y = sum_n C S is a 16-lane shuffle reduction. B, C, dt and x of a
   tile of TT steps are staged in shared memory; A is one scalar a head, so a step's decay is one
   value of the tile. Sequences (seq_idx / cu_seqlens) restart the walk's state.
   The backward (where >>ssd-chunk-bwd does not take it: packed sequences, dstate <= 32 or > 128, a
   value not finite or an a > 0, a block over the device's shared memory) is two independent walks over the same
   grid (neither stores a state):
   - the forward walk recomputes S and gives dC[t,n] = sum_p S[p,n] dy0[p] (dy0: dy through the
     gate), y0 (dz) and r(t) = sum_p dy0[p] (C S)[p] (plus sum dfinal_state * S at a sequence's
     last step);
   - the reverse walk carries G, the gradient of the state after step t (G = a(t+1) G + dy0 C),
     and gives du[p] = sum_n G B (dx), dB[t,n] = sum_p G dt x[p], xdu(t) = sum_p x du,
     dinitial_state and dD's per-channel sums.
   The decay's gradient needs no state: with q(t) = sum_{p,n} G(t) S(t), g(t) = d loss / d log a(t)
   = q(t) - w(t) (w = dt xdu), and q(t) = r(t) + q(t+1) - w(t+1) within a sequence (q = r at its
   last step): the suffix form; equally g(t) = g(t-1) + w(t-1) - r(t-1), g = sum dinitial_state *
   initial_state at the sequence's first step: the prefix form. Each is a running sum whose
   rounding grows with the steps it spans (exact 0 at padded steps only on its own side: the
   suffix form alone put FalconH1's A_log gradient 1.2e-4 off in a left-padded batch), so
   ssd_dt_kernel computes both (segmented scans over a warp, 32 steps a round) with the sum of
   their terms' magnitudes as each one's error bound and takes, step by step, the form with the
   smaller bound; then ddt = A g + xdu and dA = sum dt g. (Not finite in: at a sequence's first step
   without an initial state g is G . 0, so 0 xdu: NaN where G is, and where x or B is, which the
   reference leaves finite only in a one-step sequence: there the NaN reaches dA too.) The identity
   holds only as far as S and G agree with each other: in float32 their rounding, accumulated over
   the sequence, left A_log's
   gradient up to 6.5e-5 off transformers' in a float32 model (bench/RESULTS.md, issue 40), so the
   backward's walks carry S and G, and r, xdu and the scans, in double (the forward in float): the
   Mamba-2 families' training steps then match transformers' within the tests' float32 bounds
   (measured: bench/NOTES.md SSD-CUDA-v4). Every cross-thread sum
   (per-slice and per-head partials of dB / dC, the per-step scalars, dA / dD / ddt_bias over batch
   rows) runs in a fixed order: the backward is bitwise deterministic. */

struct ssd_params {
    int64_t batch, L, H, P, N, G, hpg, nseq;
    int64_t npsl;  /* channel slices a head */
    int64_t nwalk; /* blocks of one walk: batch * H * npsl */
    int PB, TT;    /* channels a block (threads: 16 PB / PPT), steps a tile */
    int softplus, limit, Dhd;
    int fwd_walk, rev_walk, need_dt; /* the backward's walks; ddt, dA or ddt_bias asked for */
    int vbc, vx;                     /* staging by 8-element vectors: B and C; x, dy and z (ssd_stage) */
    float dtmin, dtmax;
    const int64_t *cu;
    ct x, delta, A, B, C, D, z, dt_bias, seq_idx, initial_state, y, final_state;
    ct dy, dfinal_state, dx, ddelta, dA, dB, dC, dD, dz, ddt_bias, dinitial_state;
    float *wB, *wC; /* (batch, L, H, npsl, N) partials of dB / dC */
    double *wr, *wx; /* (batch, L, H, npsl) r and xdu partials */
    float *wD;       /* (batch, H, P) dD partials */
    float *wA, *wb;  /* (batch, H) dA / ddt_bias partials */
    double *wh;      /* (rows, H, npsl) sum dinitial_state * initial_state a sequence (the prefix form's start) */
    double *wg, *we; /* (batch, L, H) the prefix form of the decay's gradient and its error bound */
    /* the chunked forward (>>ssd-chunk): the chains' two-slot state rings (chain, slot, 64, 64 NB),
       their publish flags, the blocks' ticket counter; channel tiles a head */
    float *ck_ring;
    int *ck_flags;
    unsigned long long *ck_ticket;
    int64_t ck_ntile;
    int ck_simt; /* tests and benchmarks: every chunk on the float32 units' path */
    /* the backward in chunks (>>ssd-chunk-bwd): the chunks' states (then the entering states) and their
       gradients (then the leaving states' gradients), (chain, chunk, 64, 64 NB) each; each chunk's decay
       exp(a(0) + .. + a(Q-1)), (batch, H, chunk); the flag a value that is not finite raises (the walks
       then run); chunks a row */
    float *ckb_S, *ckb_G, *ckb_dec;
    int *ckb_flag;
    int64_t ckb_nch;
    int ckb_tc; /* a 2-byte problem's products on tensor cores: ssd_ckb_tc's level */
    /* the chunked forward's hand-off to the walk (SSD-CUDA-v30): a chunk's C B^T above float's range (inputs finite)
       raises it, and the walk launched after the chunks (ssd_fwd_kernel's HANDOFF form) rewrites y and final_state;
       that walk returns at once where it is down */
    int *ck_fwd_flag;
    int vdx; /* the backward's dx by 8-element vectors (ssd_rows8, ssd_vectors): ssd_ckb_dx_out. (Fields added last: one
                put among the others moved every field after it and the walks' registers with them, SSD-CUDA-v21) */
};

/* channels a thread by states a thread (registers: PPT * NPT <= 32) */
static constexpr __host__ __device__ int ssd_ppt(int npt) { return npt >= 32 ? 1 : npt >= 16 ? 2 : 4; }

/* shared memory of a block, offsets in floats (each a multiple of 4: float4 rows) */
struct ssd_smem {
    int dt, a, B, C, x, y, dy0, w, red, total;
};
static __host__ __device__ ssd_smem ssd_layout(int TT, int NP, int PB, int W, bool bwd) {
    ssd_smem m;
    m.dt = 0; m.a = TT; m.B = 2 * TT; m.C = m.B + TT * NP; m.x = m.C + TT * NP; m.y = m.x + TT * PB;
    /* y: doubles in the backward (its walks' per-step sums) */
    m.dy0 = m.y + (bwd ? 2 : 1) * TT * PB;
    m.w = m.dy0 + (bwd ? TT * PB : 0);
    m.red = m.w + (bwd ? TT * W * NP : 0);
    m.total = m.red + 256;
    return m;
}

/* dt of (b, t, h) after the bias, the softplus and the clamp; raw: before the softplus, pre:
   before the clamp (>>ssd-api) */
template <typename T> static __device__ __forceinline__ float ssd_dt(const ssd_params &P, int64_t b, int64_t t, int64_t h, float &raw, float &pre) {
    float v = ld<T>(P.delta.p, b * P.delta.s[0] + t * P.delta.s[1] + h * P.delta.s[2]);
    if (P.dt_bias.p) v += ldf(P.dt_bias, h * P.dt_bias.s[0]);
    raw = v;
    if (P.softplus) v = v > 20.0f ? v : log1pf(expf(v));
    pre = v;
    if (P.limit) v = v < P.dtmin ? P.dtmin : v > P.dtmax ? P.dtmax : v; /* NaN stays NaN */
    return v;
}
static __device__ __forceinline__ float ssd_sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }
static __device__ __forceinline__ int64_t ssd_at4(const ct &t, int64_t i, int64_t j, int64_t k, int64_t l) {
    return i * t.s[0] + j * t.s[1] + k * t.s[2] + l * t.s[3];
}

/* The first t >= from with seq_idx[b, t] != seq_idx[b, t-1] (L if none), or with rev the last
   t <= from (0 if none), found by the whole block (every thread calls it) */
static __device__ int64_t ssd_find_cut(const ssd_params &P, int64_t b, int64_t from, bool rev, unsigned long long *cut) {
    const int32_t *si = static_cast<const int32_t *>(P.seq_idx.p);
    const int64_t s0 = P.seq_idx.s[0], s1 = P.seq_idx.s[1], nth = blockDim.x;
    if (threadIdx.x == 0) *cut = rev ? 0ull : static_cast<unsigned long long>(P.L);
    __syncthreads();
    for (int64_t base = from;; base += rev ? -nth : nth) {
        const int64_t t = rev ? base - threadIdx.x : base + threadIdx.x;
        const bool c = (rev ? t >= 1 : t < P.L) && si[b * s0 + t * s1] != si[b * s0 + (t - 1) * s1];
        if (c) {
            if (rev) atomicMax(cut, static_cast<unsigned long long>(t));
            else atomicMin(cut, static_cast<unsigned long long>(t));
        }
        const bool done = rev ? base - nth < 1 : base + nth >= P.L;
        if (__syncthreads_or(c) || done) break;
    }
    const int64_t r = static_cast<int64_t>(*cut);
    __syncthreads();
    return r;
}

/* A sequence of a block's walk: [t0, t1), its state row, whether initial_state enters it and
   final_state leaves it; ssd_seg_next walks batch row b's sequences forward or backward (rev) */
struct ssd_seg {
    int64_t t0, t1, row, k;
    bool first, last;
};
static __device__ bool ssd_seg_next(const ssd_params &P, int64_t b, bool rev, ssd_seg &s, unsigned long long *cut) {
    if (P.cu) { /* sequence k: state row k */
        if (s.k >= P.nseq) return false;
        const int64_t k = rev ? P.nseq - 1 - s.k : s.k;
        s.t0 = P.cu[k]; s.t1 = P.cu[k + 1]; s.row = k;
        s.first = s.last = true;
    } else {
        if (s.k > 0 && (rev ? s.t0 <= 0 : s.t1 >= P.L)) return false;
        if (!rev) { s.t0 = s.k ? s.t1 : 0; s.t1 = P.seq_idx.p ? ssd_find_cut(P, b, s.t0 + 1, false, cut) : P.L; }
        else { s.t1 = s.k ? s.t0 : P.L; s.t0 = P.seq_idx.p ? ssd_find_cut(P, b, s.t1 - 1, true, cut) : 0; }
        s.row = b;
        s.first = s.t0 == 0; s.last = s.t1 == P.L;
    }
    s.k++;
    return true;
}

/* state k of lane l of a channel group: its index n in a row of NP = 16 NPT states */
template <int NPT> static __device__ __forceinline__ int ssd_n(int k, int l) {
    constexpr int VW = NPT >= 4 ? 4 : NPT;
    return (k / VW) * (16 * VW) + l * VW + k % VW;
}
template <int NPT> static __device__ __forceinline__ void ssd_row(const float *row, int l, float (&v)[NPT]) {
    constexpr int VW = NPT >= 4 ? 4 : NPT;
#pragma unroll
    for (int k = 0; k < NPT; k += VW) {
        const float *p = row + ssd_n<NPT>(k, l);
        if constexpr (VW == 4) {
            const float4 f = *reinterpret_cast<const float4 *>(p);
            v[k] = f.x; v[k + 1] = f.y; v[k + 2] = f.z; v[k + 3] = f.w;
        } else if constexpr (VW == 2) {
            const float2 f = *reinterpret_cast<const float2 *>(p);
            v[k] = f.x; v[k + 1] = f.y;
        } else {
            v[k] = p[0];
        }
    }
}

/* v[j] (j < K) summed over the 16 lanes of a channel group, halving the values each step: the
   full sum of value j ends in v[0]; returns j on the lane that stores it ((l & (16/K - 1)) == 0),
   -1 on the others */
template <int K, typename V> static __device__ __forceinline__ int ssd_sum16(V (&v)[K], int l) {
    int j = 0;
#pragma unroll
    for (int lev = 0; lev < 4; lev++) {
        const int m = 8 >> lev, half = K >> (lev + 1);
        if (half >= 1) {
            const bool up = (l & m) != 0;
#pragma unroll
            for (int i = 0; i < (half >= 1 ? half : 1); i++) {
                const V send = up ? v[i] : v[i + half], keep = up ? v[i + half] : v[i];
                v[i] = keep + __shfl_xor_sync(0xffffffffu, send, m);
            }
            if (up) j += half;
        } else {
            v[0] += __shfl_xor_sync(0xffffffffu, v[0], m);
        }
    }
    return (l & (16 / K - 1)) == 0 ? j : -1;
}

/* v[k] (a row of NPT states) summed over the warp's two channel groups (lanes l, l ^ 16) into
   dst, the warp's row of NP floats: the lower group stores states k < NPT/2, the upper the rest */
template <int NPT, typename V> static __device__ __forceinline__ void ssd_pair_store(V (&v)[NPT], int lane, float *dst) {
    const int l = lane & 15;
    if constexpr (NPT == 1) {
        v[0] += __shfl_xor_sync(0xffffffffu, v[0], 16);
        if (!(lane & 16)) dst[l] = static_cast<float>(v[0]);
    } else {
        constexpr int HF = NPT / 2;
        const bool up = (lane & 16) != 0;
#pragma unroll
        for (int i = 0; i < HF; i++) {
            const V send = up ? v[i] : v[i + HF], keep = up ? v[i + HF] : v[i];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, 16);
        }
#pragma unroll
        for (int i = 0; i < HF; i++) dst[ssd_n<NPT>(up ? i + HF : i, l)] = static_cast<float>(v[i]);
    }
}

/* a block-wide sum in a fixed order, on thread 0 (every thread calls it; red: 32 values) */
template <typename V> static __device__ V ssd_block_sum(V v, V *red) {
    for (int m = 16; m >= 1; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    V s = 0;
    if (threadIdx.x == 0)
        for (int w = 0; w < static_cast<int>(blockDim.x >> 5); w++) s += red[w];
    return s;
}

/* 8 floats into shared memory by two 16-byte stores (dst 16-byte aligned) */
static __device__ __forceinline__ void ssd_st8(float *dst, const float (&v)[8]) {
    reinterpret_cast<float4 *>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4 *>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

/* Stages steps [c, c + tn) of (b, h) into shared memory: dt and the decay, B and C rows (0 past
   N), x (0 past P) and, for the backward (bwd), dy through the gate. Where rows are contiguous and
   aligned (P.vbc: B and C; P.vx: x, dy and z; ssd_vectors) by 8-element vectors, each thread's loads
   of two vectors issued before their stores: the element-by-element loads waited one global
   latency each, 57 % of the forward's stall samples (bench/NOTES.md SSD-CUDA-v4). The same
   values either way. */
template <typename T, int NPT>
static __device__ void ssd_stage(const ssd_params &P, int64_t b, int64_t h, int64_t c, int tn, int64_t p0, float Ah, const ssd_smem &m,
                                 float *sm, bool bwd) {
    constexpr int NP = 16 * NPT;
    const int tid = threadIdx.x, nth = blockDim.x, PB = P.PB;
    const int64_t g = h / P.hpg;
    for (int i = tid; i < tn; i += nth) {
        float raw, pre;
        const float d = ssd_dt<T>(P, b, c + i, h, raw, pre);
        sm[m.dt + i] = d;
        sm[m.a + i] = expf(d * Ah);
    }
    if (P.vbc) {
        const int nv = NP / 8, total = tn * nv;
        for (int i0 = tid; i0 < total; i0 += 2 * nth) {
            float vb[2][8], vc[2][8];
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int i = i0 + u * nth, tt = i / nv, n = (i - tt * nv) * 8;
                if (i < total && n < P.N) {
                    ld_vec<T, 8>(P.B.p, ssd_at4(P.B, b, c + tt, g, n), vb[u]);
                    ld_vec<T, 8>(P.C.p, ssd_at4(P.C, b, c + tt, g, n), vc[u]);
                } else {
#pragma unroll
                    for (int k = 0; k < 8; k++) vb[u][k] = vc[u][k] = 0.0f;
                }
            }
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int i = i0 + u * nth;
                if (i < total) {
                    ssd_st8(sm + m.B + 8 * i, vb[u]); /* row tt, state n: (tt * nv + n / 8) * 8 = tt * NP + n */
                    ssd_st8(sm + m.C + 8 * i, vc[u]);
                }
            }
        }
    } else {
        for (int i = tid; i < tn * NP; i += nth) {
            const int tt = i / NP, n = i - tt * NP;
            const bool v = n < P.N;
            sm[m.B + i] = v ? ld<T>(P.B.p, ssd_at4(P.B, b, c + tt, g, n)) : 0.0f;
            sm[m.C + i] = v ? ld<T>(P.C.p, ssd_at4(P.C, b, c + tt, g, n)) : 0.0f;
        }
    }
    if (P.vx) {
        const int nv = PB / 8, total = tn * nv;
        for (int i = tid; i < total; i += nth) {
            const int tt = i / nv;
            const int64_t p = p0 + (i - tt * nv) * 8;
            float xv[8], dv[8] = {}, zv[8] = {};
            const bool v = p < P.P;
            if (v) {
                ld_vec<T, 8>(P.x.p, ssd_at4(P.x, b, c + tt, h, p), xv);
                if (bwd) ld_vec<T, 8>(P.dy.p, ssd_at4(P.dy, b, c + tt, h, p), dv);
                if (bwd && P.z.p) ld_vec<T, 8>(P.z.p, ssd_at4(P.z, b, c + tt, h, p), zv);
            }
#pragma unroll
            for (int k = 0; k < 8; k++) {
                if (!v) xv[k] = dv[k] = 0.0f;
                else if (bwd && P.z.p) dv[k] *= zv[k] * ssd_sigmoid(zv[k]);
            }
            ssd_st8(sm + m.x + 8 * i, xv);
            if (bwd) ssd_st8(sm + m.dy0 + 8 * i, dv);
        }
    } else {
        for (int i = tid; i < tn * PB; i += nth) {
            const int tt = i / PB;
            const int64_t p = p0 + (i - tt * PB);
            const bool v = p < P.P;
            sm[m.x + i] = v ? ld<T>(P.x.p, ssd_at4(P.x, b, c + tt, h, p)) : 0.0f;
            if (bwd) {
                float d = 0.0f;
                if (v) {
                    d = ld<T>(P.dy.p, ssd_at4(P.dy, b, c + tt, h, p));
                    if (P.z.p) {
                        const float zv = ld<T>(P.z.p, ssd_at4(P.z, b, c + tt, h, p));
                        d *= zv * ssd_sigmoid(zv);
                    }
                }
                sm[m.dy0 + i] = d;
            }
        }
    }
    __syncthreads();
}

static __device__ __forceinline__ float ssd_Dv(const ssd_params &P, int64_t h, int64_t p) {
    if (!P.D.p || p >= P.P) return 0.0f;
    return ldf(P.D, P.Dhd ? h * P.D.s[0] + p * P.D.s[1] : h * P.D.s[0]);
}
/* acc + Dv v; without D no term (0 v would make an infinite v NaN: >>ssd-api) */
static __device__ __forceinline__ float ssd_addD(const ssd_params &P, float Dv, float v, float acc) { return P.D.p ? fmaf(Dv, v, acc) : acc; }

/* f(j, k, i) for each of a thread's cells (channel p0 + PPT pg + j, state ssd_n(k, l)) inside
   (P, N), i: the cell's element in t, a (rows, H, P, N) state operand, at (row, h) */
template <int NPT, int PPT, typename F>
static __device__ __forceinline__ void ssd_cells(const ssd_params &P, const ct &t, int64_t row, int64_t h, int64_t p0, int pg, int l, F &&f) {
#pragma unroll
    for (int j = 0; j < PPT; j++) {
        const int64_t p = p0 + pg * PPT + j;
#pragma unroll
        for (int k = 0; k < NPT; k++) {
            const int n = ssd_n<NPT>(k, l);
            if (p < P.P && n < P.N) f(j, k, ssd_at4(t, row, h, p, n));
        }
    }
}

static __device__ __forceinline__ float ssd_fma(float a, float b, float c) { return fmaf(a, b, c); }
static __device__ __forceinline__ double ssd_fma(double a, double b, double c) { return fma(a, b, c); }

/* The forward walk of block blk: the forward (BW false: y, final_state) or the backward's
   forward walk (BW: dz, the dC partials, r; its state and sums in double: DESIGN). PADS (ssd_with_walk: N < 16 NPT,
   or a block's channels past P): a thread's pad states n >= N (B = C = 0 there) and pad channels p >= P (x = dy0 =
   0) kept at 0: an infinite u, B or C times a pad's 0 is NaN, which y's sum over n and the dB / dC partials must not
   see. A kernel template parameter chosen on the host (in one kernel both would take the padded one's registers) */
template <typename T, int NPT, bool BW, bool PADS> static __device__ void ssd_walk_fwd(const ssd_params &P, int64_t blk, float *sm, unsigned long long *cut) {
    using W = typename std::conditional<BW, double, float>::type;
    constexpr int NP = 16 * NPT, PPT = ssd_ppt(NPT);
    const int tid = threadIdx.x, nth = blockDim.x, l = tid & 15, pg = tid >> 4, nw = nth >> 5, warp = tid >> 5;
    const int PB = P.PB, TT = P.TT, epl = tid % PB;
    const int64_t psl = blk % P.npsl, h = (blk / P.npsl) % P.H, b = blk / (P.npsl * P.H), p0 = psl * PB;
    bool live[NPT], livep[PPT];
#pragma unroll
    for (int k = 0; k < NPT; k++) live[k] = ssd_n<NPT>(k, l) < P.N;
#pragma unroll
    for (int j = 0; j < PPT; j++) livep[j] = p0 + pg * PPT + j < P.P;
    const float Ah = ldf(P.A, h * P.A.s[0]), Dv = ssd_Dv(P, h, p0 + epl);
    const ssd_smem m = ssd_layout(TT, NP, PB, nw, BW);
    W *const yb = reinterpret_cast<W *>(sm + m.y);
    W S[PPT][NPT];
    ssd_seg s;
    s.k = s.t0 = s.t1 = 0;
    while (ssd_seg_next(P, b, false, s, cut)) {
#pragma unroll
        for (int j = 0; j < PPT; j++)
#pragma unroll
            for (int k = 0; k < NPT; k++) S[j][k] = 0;
        if (s.first && P.initial_state.p)
            ssd_cells<NPT, PPT>(P, P.initial_state, s.row, h, p0, pg, l, [&](int j, int k, int64_t i) { S[j][k] = ldf(P.initial_state, i); });
        for (int64_t c = s.t0; c < s.t1; c += TT) {
            const int tn = static_cast<int>(s.t1 - c < TT ? s.t1 - c : TT);
            __syncthreads(); /* the previous tile's readers are done */
            ssd_stage<T, NPT>(P, b, h, c, tn, p0, Ah, m, sm, BW);
            for (int tt = 0; tt < tn; tt++) {
                const W a = sm[m.a + tt], d = sm[m.dt + tt];
                float Bf[NPT], Cf[NPT];
                W Bv[NPT], Cv[NPT], acc[PPT];
                ssd_row<NPT>(sm + m.B + tt * NP, l, Bf);
                ssd_row<NPT>(sm + m.C + tt * NP, l, Cf);
#pragma unroll
                for (int k = 0; k < NPT; k++) { Bv[k] = Bf[k]; Cv[k] = Cf[k]; }
#pragma unroll
                for (int j = 0; j < PPT; j++) {
                    const W u = d * static_cast<W>(sm[m.x + tt * PB + pg * PPT + j]);
                    acc[j] = 0;
#pragma unroll
                    for (int k = 0; k < NPT; k++) {
                        S[j][k] = ssd_fma(u, Bv[k], a * S[j][k]);
                        if constexpr (PADS) S[j][k] = live[k] && livep[j] ? S[j][k] : W(0);
                        acc[j] = ssd_fma(S[j][k], Cv[k], acc[j]);
                    }
                }
                if constexpr (BW) {
                    if (P.dC.p) {
                        W pc[NPT];
#pragma unroll
                        for (int k = 0; k < NPT; k++) pc[k] = 0;
#pragma unroll
                        for (int j = 0; j < PPT; j++) {
                            const W d0 = sm[m.dy0 + tt * PB + pg * PPT + j];
#pragma unroll
                            for (int k = 0; k < NPT; k++) pc[k] = ssd_fma(S[j][k], d0, pc[k]);
                        }
                        ssd_pair_store<NPT>(pc, tid & 31, sm + m.w + (tt * nw + warp) * NP);
                    }
                }
                const int jj = ssd_sum16<PPT>(acc, l);
                if (jj >= 0) yb[tt * PB + pg * PPT + jj] = acc[0];
            }
            __syncthreads();
            for (int e = tid; e < tn * PB; e += nth) { /* this thread's channel: epl (nth is a multiple of PB) */
                const int tt = e / PB;
                const int64_t t = c + tt, p = p0 + epl;
                if (p >= P.P) continue;
                const float xv = sm[m.x + e];
                const W ysm = yb[e];
                if constexpr (!BW) {
                    float y = ssd_addD(P, Dv, xv, ysm);
                    if (P.z.p) {
                        const float zv = ld<T>(P.z.p, ssd_at4(P.z, b, t, h, p));
                        y *= zv * ssd_sigmoid(zv);
                    }
                    st<T>(P.y.p, ssd_at4(P.y, b, t, h, p), y);
                } else {
                    if (P.dz.p) {
                        const float dyv = ld<T>(P.dy.p, ssd_at4(P.dy, b, t, h, p)), zv = ld<T>(P.z.p, ssd_at4(P.z, b, t, h, p));
                        const float sg = ssd_sigmoid(zv), y0 = ssd_addD(P, Dv, xv, static_cast<float>(ysm));
                        st<T>(P.dz.p, ssd_at4(P.dz, b, t, h, p), dyv * y0 * sg * (1.0f + zv * (1.0f - sg)));
                    }
                    yb[e] = static_cast<W>(sm[m.dy0 + e]) * ysm; /* r's terms */
                }
            }
            if constexpr (BW) {
                __syncthreads();
                const int64_t np = P.P - p0 < PB ? P.P - p0 : PB;
                if (P.need_dt)
                    for (int tt = tid; tt < tn; tt += nth) {
                        W r = 0;
                        for (int pl = 0; pl < np; pl++) r += yb[tt * PB + pl];
                        P.wr[((b * P.L + c + tt) * P.H + h) * P.npsl + psl] = r;
                    }
                if (P.dC.p)
                    for (int e = tid; e < tn * NP; e += nth) {
                        const int tt = e / NP, n = e - tt * NP;
                        if (n >= P.N) continue;
                        float v = 0.0f;
                        for (int w = 0; w < nw; w++) v += sm[m.w + (tt * nw + w) * NP + n];
                        P.wC[(((b * P.L + c + tt) * P.H + h) * P.npsl + psl) * P.N + n] = v;
                    }
            }
        }
        if (!s.last) continue;
        if constexpr (!BW) {
            if (P.final_state.p)
                ssd_cells<NPT, PPT>(P, P.final_state, s.row, h, p0, pg, l,
                                    [&](int j, int k, int64_t i) { static_cast<float *>(P.final_state.p)[i] = static_cast<float>(S[j][k]); });
        } else if (P.need_dt && P.dfinal_state.p && s.t1 > s.t0) { /* q at the sequence's last step: + sum dfinal_state S */
            W v = 0;
            ssd_cells<NPT, PPT>(P, P.dfinal_state, s.row, h, p0, pg, l,
                                [&](int j, int k, int64_t i) { v = ssd_fma(static_cast<W>(ldf(P.dfinal_state, i)), S[j][k], v); });
            v = ssd_block_sum(v, reinterpret_cast<W *>(sm + m.red)); /* its barriers order the r writes above before this */
            if (tid == 0) P.wr[((b * P.L + s.t1 - 1) * P.H + h) * P.npsl + psl] += v;
        }
    }
}

/* The backward's reverse walk of block blk: dx, the dB partials, xdu, dinitial_state, dD's sums
   (its state gradient and sums in double: DESIGN) */
template <typename T, int NPT, bool PADS> static __device__ void ssd_walk_rev(const ssd_params &P, int64_t blk, float *sm, unsigned long long *cut) {
    constexpr int NP = 16 * NPT, PPT = ssd_ppt(NPT);
    const int tid = threadIdx.x, nth = blockDim.x, l = tid & 15, pg = tid >> 4, nw = nth >> 5, warp = tid >> 5;
    const int PB = P.PB, TT = P.TT, epl = tid % PB;
    const int64_t psl = blk % P.npsl, h = (blk / P.npsl) % P.H, b = blk / (P.npsl * P.H), p0 = psl * PB;
    bool live[NPT], livep[PPT]; /* PADS: as ssd_walk_fwd's (an infinite dy0 times a pad's C = 0, a pad channel's 0 times C) */
#pragma unroll
    for (int k = 0; k < NPT; k++) live[k] = ssd_n<NPT>(k, l) < P.N;
#pragma unroll
    for (int j = 0; j < PPT; j++) livep[j] = p0 + pg * PPT + j < P.P;
    const float Ah = ldf(P.A, h * P.A.s[0]), Dv = ssd_Dv(P, h, p0 + epl);
    const ssd_smem m = ssd_layout(TT, NP, PB, nw, true);
    double *const yb = reinterpret_cast<double *>(sm + m.y);
    double G[PPT][NPT];
    float dDacc = 0.0f;
    ssd_seg s;
    s.k = s.t0 = s.t1 = 0;
    while (ssd_seg_next(P, b, true, s, cut)) {
#pragma unroll
        for (int j = 0; j < PPT; j++)
#pragma unroll
            for (int k = 0; k < NPT; k++) G[j][k] = 0.0;
        if (s.last && P.dfinal_state.p)
            ssd_cells<NPT, PPT>(P, P.dfinal_state, s.row, h, p0, pg, l, [&](int j, int k, int64_t i) { G[j][k] = ldf(P.dfinal_state, i); });
        for (int64_t c1 = s.t1; c1 > s.t0;) {
            const int64_t c = c1 - s.t0 > TT ? c1 - TT : s.t0;
            const int tn = static_cast<int>(c1 - c);
            __syncthreads();
            ssd_stage<T, NPT>(P, b, h, c, tn, p0, Ah, m, sm, true);
            for (int tt = tn - 1; tt >= 0; tt--) {
                const double a = sm[m.a + tt], d = sm[m.dt + tt];
                float Bf[NPT], Cf[NPT];
                double Bv[NPT], Cv[NPT], du[PPT], pb[NPT];
                ssd_row<NPT>(sm + m.B + tt * NP, l, Bf);
                ssd_row<NPT>(sm + m.C + tt * NP, l, Cf);
#pragma unroll
                for (int k = 0; k < NPT; k++) { Bv[k] = Bf[k]; Cv[k] = Cf[k]; pb[k] = 0.0; }
#pragma unroll
                for (int j = 0; j < PPT; j++) {
                    const double u = d * static_cast<double>(sm[m.x + tt * PB + pg * PPT + j]), d0 = sm[m.dy0 + tt * PB + pg * PPT + j];
                    du[j] = 0.0;
#pragma unroll
                    for (int k = 0; k < NPT; k++) {
                        double gn = fma(d0, Cv[k], G[j][k]); /* the gradient of the state after step t */
                        if constexpr (PADS) gn = live[k] && livep[j] ? gn : 0.0;
                        du[j] = fma(gn, Bv[k], du[j]);
                        pb[k] = fma(gn, u, pb[k]);
                        G[j][k] = gn * a;
                    }
                }
                if (P.dB.p) ssd_pair_store<NPT>(pb, tid & 31, sm + m.w + (tt * nw + warp) * NP);
                const int jj = ssd_sum16<PPT>(du, l);
                if (jj >= 0) yb[tt * PB + pg * PPT + jj] = du[0];
            }
            __syncthreads();
            for (int e = tid; e < tn * PB; e += nth) {
                const int tt = e / PB;
                const int64_t p = p0 + epl;
                if (p >= P.P) { yb[e] = 0.0; continue; }
                const float xv = sm[m.x + e], d0 = sm[m.dy0 + e];
                const double duv = yb[e];
                if (P.dx.p) st<T>(P.dx.p, ssd_at4(P.dx, b, c + tt, h, p), static_cast<float>(fma(duv, static_cast<double>(sm[m.dt + tt]), static_cast<double>(P.D.p ? d0 * Dv : 0.0f))));
                dDacc = fmaf(d0, xv, dDacc);
                yb[e] = xv * duv; /* xdu's terms */
            }
            __syncthreads();
            if (P.need_dt)
                for (int tt = tid; tt < tn; tt += nth) {
                    double v = 0.0;
                    for (int pl = 0; pl < PB; pl++) v += yb[tt * PB + pl];
                    P.wx[((b * P.L + c + tt) * P.H + h) * P.npsl + psl] = v;
                }
            if (P.dB.p)
                for (int e = tid; e < tn * NP; e += nth) {
                    const int tt = e / NP, n = e - tt * NP;
                    if (n >= P.N) continue;
                    float v = 0.0f;
                    for (int w = 0; w < nw; w++) v += sm[m.w + (tt * nw + w) * NP + n];
                    P.wB[(((b * P.L + c + tt) * P.H + h) * P.npsl + psl) * P.N + n] = v;
                }
            c1 = c;
        }
        if (s.first && P.dinitial_state.p)
            ssd_cells<NPT, PPT>(P, P.dinitial_state, s.row, h, p0, pg, l,
                                [&](int j, int k, int64_t i) { static_cast<float *>(P.dinitial_state.p)[i] = static_cast<float>(G[j][k]); });
        if (s.first && P.wh) { /* the prefix form's start: sum dinitial_state * initial_state */
            double v = 0.0;
            ssd_cells<NPT, PPT>(P, P.initial_state, s.row, h, p0, pg, l,
                                [&](int j, int k, int64_t i) { v = fma(G[j][k], static_cast<double>(ldf(P.initial_state, i)), v); });
            v = ssd_block_sum(v, reinterpret_cast<double *>(sm + m.red));
            if (tid == 0) P.wh[(s.row * P.H + h) * P.npsl + psl] = v;
        }
    }
    if (P.wD) { /* the sums of the threads of one channel, in thread order */
        __syncthreads();
        sm[m.red + tid] = dDacc;
        __syncthreads();
        if (tid < PB && p0 + tid < P.P) {
            float v = 0.0f;
            for (int i = tid; i < nth; i += PB) v += sm[m.red + i];
            P.wD[(b * P.H + h) * P.P + p0 + tid] = v;
        }
    }
}

/* HANDOFF: launched after the chunks, it runs only where they raised P.ck_fwd_flag (a separate instantiation: the
   check at the entry moved the walk's registers, SSD-CUDA-v30) */
template <typename T, int NPT, bool PADS, bool HANDOFF = false> static __global__ void __launch_bounds__(256) ssd_fwd_kernel(const ssd_params P) {
    extern __shared__ float4 ssd_fwd_sm[];
    __shared__ unsigned long long cut;
    if constexpr (HANDOFF)
        if (!*static_cast<volatile const int *>(P.ck_fwd_flag)) return; /* the chunks took the call */
    ssd_walk_fwd<T, NPT, false, PADS>(P, blockIdx.x, reinterpret_cast<float *>(ssd_fwd_sm), &cut);
}

/* the backward's two walks in one grid: the forward walk's blocks first (when it runs) */
template <typename T, int NPT, bool PADS> static __global__ void __launch_bounds__(256) ssd_bwd_kernel(const ssd_params P) {
    extern __shared__ float4 ssd_bwd_sm[];
    __shared__ unsigned long long cut;
    if (P.ckb_flag && !*static_cast<volatile const int *>(P.ckb_flag)) return; /* the chunks took the call (>>ssd-chunk-bwd) */
    const int64_t blk = blockIdx.x;
    if (P.fwd_walk && blk < P.nwalk) ssd_walk_fwd<T, NPT, true, PADS>(P, blk, reinterpret_cast<float *>(ssd_bwd_sm), &cut);
    else ssd_walk_rev<T, NPT, PADS>(P, P.fwd_walk ? blk - P.nwalk : blk, reinterpret_cast<float *>(ssd_bwd_sm), &cut);
}

/* Whether step t + 1 starts a new sequence of batch row b (or t is the row's last) */
static __device__ bool ssd_is_last(const ssd_params &P, int64_t b, int64_t t) {
    if (t >= P.L - 1) return true;
    if (P.cu) { /* t + 1 among the offsets cu[1 .. nseq - 1] */
        int64_t lo = 1, hi = P.nseq - 1;
        while (lo <= hi) {
            const int64_t mid = (lo + hi) >> 1, v = P.cu[mid];
            if (v == t + 1) return true;
            if (v < t + 1) lo = mid + 1; else hi = mid - 1;
        }
        return false;
    }
    if (P.seq_idx.p) {
        const int32_t *si = static_cast<const int32_t *>(P.seq_idx.p);
        return si[b * P.seq_idx.s[0] + (t + 1) * P.seq_idx.s[1]] != si[b * P.seq_idx.s[0] + t * P.seq_idx.s[1]];
    }
    return false;
}

/* The sequence of row 0 holding step t (cu_seqlens): k with cu[k] <= t < cu[k + 1] */
static __device__ int64_t ssd_seq_of(const ssd_params &P, int64_t t) {
    int64_t lo = 0, hi = P.nseq; /* the first k with cu[k] > t, in (0, nseq] */
    while (lo < hi) {
        const int64_t mid = (lo + hi) >> 1;
        if (P.cu[mid] > t) hi = mid; else lo = mid + 1;
    }
    return lo - 1;
}

/* a step's per-step scalars: r and xdu summed over the slices in order, dt (raw, pre, after) */
template <typename T> struct ssd_step_sums {
    double r, xd;
    float d, raw, pre;
    __device__ ssd_step_sums(const ssd_params &P, int64_t b, int64_t h, int64_t t) : r(0.0), xd(0.0), d(0.0f), raw(0.0f), pre(0.0f) {
        const int64_t o = ((b * P.L + t) * P.H + h) * P.npsl;
        for (int64_t i = 0; i < P.npsl; i++) { r += P.wr[o + i]; xd += P.wx[o + i]; }
        float rw, pr;
        d = ssd_dt<T>(P, b, t, h, rw, pr);
        raw = rw; pre = pr;
    }
};

/* ddt and the (b, h) partials of dA and ddt_bias: a warp a (batch row, head), 32 steps a round; the
   prefix form forward (into wg / we), then the suffix form backward and the choice (DESIGN above) */
template <typename T> static __global__ void __launch_bounds__(256) ssd_dt_kernel(const ssd_params P) {
    const int64_t wid = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (wid >= P.batch * P.H) return;
    const int64_t b = wid / P.H, h = wid % P.H;
    const float Ah = ldf(P.A, h * P.A.s[0]);
    double dA = 0.0, db = 0.0;
    /* step t's d loss / d log a (gl) and explicit d loss / d dt (xd): dA's and ddt_bias's terms, ddt */
    auto finish = [&](int64_t t, double gl, double xd, float d, float raw, float pre) {
        dA = fma(static_cast<double>(d), gl, dA);
        float g = static_cast<float>(fma(static_cast<double>(Ah), gl, xd));
        if (P.limit && (pre < P.dtmin || pre > P.dtmax)) g = 0.0f; /* clamped: no gradient */
        if (P.softplus && raw <= 20.0f) g *= ssd_sigmoid(raw);
        db += g;
        if (P.ddelta.p) st<T>(P.ddelta.p, b * P.ddelta.s[0] + t * P.ddelta.s[1] + h * P.ddelta.s[2], g);
    };
    if (P.ckb_flag && !*static_cast<volatile const int *>(P.ckb_flag)) { /* the chunks': g and xd summed over the tiles */
        for (int64_t t = lane; t < P.L; t += 32) {
            const ssd_step_sums<T> q(P, b, h, t);
            finish(t, q.r, q.xd, q.d, q.raw, q.pre);
        }
    } else {
        /* prefix form: g(t) = h0 term + sum_{s = t0}^{t-1} (w(s) - r(s)), bound: the sum of magnitudes */
        double cv = 0.0, ce = 0.0; /* the running sums carried into the next round */
        for (int64_t base = 0; base < P.L; base += 32) {
            const int64_t t = base + lane;
            const bool in = t < P.L;
            double c = 0.0, cm = 0.0, h0 = 0.0;
            bool f = true;
            if (in) {
                const ssd_step_sums<T> q(P, b, h, t);
                const double w = q.d * q.xd;
                c = w - q.r;
                cm = fabs(w) + fabs(q.r);
                f = t == 0 || ssd_is_last(P, b, t - 1); /* t starts a sequence */
                if (f && P.wh && (P.cu || t == 0)) {
                    const int64_t row = P.cu ? ssd_seq_of(P, t) : b;
                    for (int64_t i = 0; i < P.npsl; i++) h0 += P.wh[(row * P.H + h) * P.npsl + i];
                }
            }
            double v = c + h0, e = cm + fabs(h0);
            bool fl = f;
#pragma unroll
            for (int dd = 1; dd < 32; dd <<= 1) { /* inclusive segmented scan, segments opened by f */
                const double ov = __shfl_up_sync(0xffffffffu, v, dd), oe = __shfl_up_sync(0xffffffffu, e, dd);
                const bool of = __shfl_up_sync(0xffffffffu, fl ? 1 : 0, dd) != 0;
                if (lane >= dd && !fl) { v += ov; e += oe; fl = of; }
            }
            if (!fl) { v += cv; e += ce; }
            /* exclusive (the steps before t): the previous lane's inclusive sum, the carry on lane 0, h0 at
               a sequence's first step (not v - c: exact, and its bound covers its rounding) */
            double pv = __shfl_up_sync(0xffffffffu, v, 1), pe = __shfl_up_sync(0xffffffffu, e, 1);
            if (lane == 0) { pv = cv; pe = ce; }
            cv = __shfl_sync(0xffffffffu, v, 31);
            ce = __shfl_sync(0xffffffffu, e, 31);
            if (in) {
                const int64_t o = (b * P.L + t) * P.H + h;
                P.wg[o] = f ? h0 : pv;
                P.we[o] = f ? fabs(h0) : pe;
            }
        }
        __syncwarp();
        /* suffix form: q(t) = r(t) + q(t+1) - w(t+1) within a sequence; bound: the sum of magnitudes */
        double qn = 0.0, en = 0.0, wn = 0.0;
        for (int64_t base = ((P.L - 1) / 32) * 32; base >= 0; base -= 32) {
            const int64_t t = base + lane;
            const bool in = t < P.L;
            double r = 0.0, xd = 0.0;
            float d = 0.0f, raw = 0.0f, pre = 0.0f;
            bool f = true;
            if (in) {
                const ssd_step_sums<T> q(P, b, h, t);
                r = q.r; xd = q.xd; d = q.d; raw = q.raw; pre = q.pre;
                f = ssd_is_last(P, b, t);
            }
            const double w = d * xd;
            double wnext = __shfl_down_sync(0xffffffffu, w, 1);
            if (lane == 31) wnext = wn;
            double v = f ? r : r - wnext; /* q(t) = v(t) + q(t+1) unless t ends its sequence */
            double e = f ? fabs(r) : fabs(r) + fabs(wnext);
            bool fl = f;
#pragma unroll
            for (int dd = 1; dd < 32; dd <<= 1) {
                const double ov = __shfl_down_sync(0xffffffffu, v, dd), oe = __shfl_down_sync(0xffffffffu, e, dd);
                const bool of = __shfl_down_sync(0xffffffffu, fl ? 1 : 0, dd) != 0;
                if (lane + dd < 32 && !fl) { v += ov; e += oe; fl = of; }
            }
            const double q = fl ? v : v + qn, eq = fl ? e : e + en;
            qn = __shfl_sync(0xffffffffu, q, 0);
            en = __shfl_sync(0xffffffffu, eq, 0);
            wn = __shfl_sync(0xffffffffu, w, 0);
            if (in) {
                const int64_t o = (b * P.L + t) * P.H + h;
                const double gs = q - w, gp = P.wg[o];
                const double we = P.we[o];
                /* d loss / d log a(t): the form with the smaller bound; a NaN bound loses (NaN in a forward
                   input at step s: the suffix form is NaN before s, the prefix form after s, as the CPU's).
                   A sequence's first step without an initial state: the prefix form's exact 0 is the
                   recurrence's G(t) . 0, NaN where G(t) is not finite (a NaN dy in the sequence, or in
                   dfinal_state): 0 xd(t) carries G(t)'s NaN (and x(t)'s or B(t)'s, which make ddt(t) NaN anyway) */
                const bool fresh = (t == 0 || ssd_is_last(P, b, t - 1)) && !(P.wh && (P.cu || t == 0));
                const double gl = fresh ? 0.0 * xd : we <= eq || eq != eq ? gp : gs;
                finish(t, gl, xd, d, raw, pre);
            }
        }
    }
    for (int mm = 16; mm >= 1; mm >>= 1) {
        dA += __shfl_xor_sync(0xffffffffu, dA, mm);
        db += __shfl_xor_sync(0xffffffffu, db, mm);
    }
    if (lane == 0) {
        if (P.wA) P.wA[wid] = static_cast<float>(dA);
        if (P.wb) P.wb[wid] = static_cast<float>(db);
    }
}

/* dB and dC: the partials of the group's heads and slices, in order */
template <typename T> static __global__ void __launch_bounds__(256) ssd_bc_kernel(const ssd_params P) {
    const int64_t total = P.batch * P.L * P.G * P.N, cnt = P.hpg * P.npsl;
    for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t n = e % P.N, r1 = e / P.N, g = r1 % P.G, r2 = r1 / P.G, t = r2 % P.L, b = r2 / P.L;
        const int64_t o = (((b * P.L + t) * P.H + g * P.hpg) * P.npsl) * P.N + n;
        if (P.wB) {
            float v = 0.0f;
            for (int64_t i = 0; i < cnt; i++) v += P.wB[o + i * P.N];
            st<T>(P.dB.p, ssd_at4(P.dB, b, t, g, n), v);
        }
        if (P.wC) {
            float v = 0.0f;
            for (int64_t i = 0; i < cnt; i++) v += P.wC[o + i * P.N];
            st<T>(P.dC.p, ssd_at4(P.dC, b, t, g, n), v);
        }
    }
}

/* dA, ddt_bias and dD of head blockIdx.x from their partials, in a fixed order: dD's rows (a batch
   row's, or a batch row's chunk's where the chunks ran: >>ssd-chunk-bwd) in four interleaved parts a
   channel, then the parts in order, then (D a head) the channels in order */
static __global__ void __launch_bounds__(256) ssd_param_kernel(const ssd_params P) {
    __shared__ float red[256];
    const int64_t h = blockIdx.x;
    const int tid = threadIdx.x, pl = tid & 63, part = tid >> 6;
    float *const dD = static_cast<float *>(P.dD.p);
    const int64_t nD = P.ckb_flag && !*static_cast<volatile const int *>(P.ckb_flag) ? P.batch * P.ckb_nch : P.batch;
    if (P.wD) {
        float tot = 0.0f; /* D a head: thread 0's sum over the channels */
        for (int64_t p0 = 0; p0 < P.P; p0 += 64) {
            float v = 0.0f;
            if (p0 + pl < P.P)
                for (int64_t r = part; r < nD; r += 4) v += P.wD[(r * P.H + h) * P.P + p0 + pl];
            red[tid] = v;
            __syncthreads();
            if (tid < 64) red[tid] = ((red[tid] + red[tid + 64]) + red[tid + 128]) + red[tid + 192];
            __syncthreads();
            if (P.Dhd && tid < 64 && p0 + tid < P.P) dD[h * P.dD.s[0] + (p0 + tid) * P.dD.s[1]] = red[tid];
            if (!P.Dhd && tid == 0)
                for (int64_t i = 0; i < 64 && p0 + i < P.P; i++) tot += red[i];
            __syncthreads();
        }
        if (!P.Dhd && tid == 0) dD[h * P.dD.s[0]] = tot;
    }
    if (tid != 0) return;
    if (P.wA) {
        float v = 0.0f;
        for (int64_t b = 0; b < P.batch; b++) v += P.wA[b * P.H + h];
        static_cast<float *>(P.dA.p)[h * P.dA.s[0]] = v;
    }
    if (P.wb) {
        float v = 0.0f;
        for (int64_t b = 0; b < P.batch; b++) v += P.wb[b * P.H + h];
        static_cast<float *>(P.ddt_bias.p)[h * P.ddt_bias.s[0]] = v;
    }
}

/* >>ssd-chunk       the SSD forward in chunks (ssd_ck_fwd_kernel; 2-byte problems by default: ssd_ck_mode) */
/* DESIGN. Mamba-2's chunked form (mamba_ssm's: chunk states, a pass of the states between chunks,
   the chunk's outputs) in one kernel. A block takes a chunk of Q = 64 steps of one (batch row, head,
   tile of 64 channels) and computes, from its staged x, B, C and dt:
     Sloc[p,n] = sum_s w(s) x[s,p] B[s,n]          w(s) = exp(a(s+1) + .. + a(Q-1)) dt(s)
     W[t,s]    = (C[t] . B[s]) exp(a(s+1) + .. + a(t)) dt(s)    s <= t
     y[t,p]    = sum_{s<=t} W[t,s] x[s,p] + exp(a(0) + .. + a(t)) sum_n C[t,n] Sin[p,n] + D x, gated
   (a = dt A; steps past L have dt 0: decay 1, no input). Sin, the state entering the chunk, comes
   from the block of the chunk before: Sin(c+1) = exp(a(0) + .. + a(Q-1)) Sin(c) + Sloc(c). The blocks
   take a ticket as they start (chunk-major over (row, head, tile) chains), so the block a chunk
   waits for started before it and progresses: no deadlock in any schedule. A chain's states pass
   through a ring of two slots in the workspace (f32, one publish flag a chain): the slot block c
   writes (c + 1's) was last read by block c - 1, which finished reading before it published the
   state block c waited for. Everything but the wait and the publish runs before the wait.
   The four products (C B^T, Sloc, W x, C Sin^T) run on tensor cores (ssd_tc_mm: mma.sync m16n8k8 tf32,
   sm_80+) with every float operand split into two tf32 parts (ssd_tf32_split), two or three products a pair:
   float32's precision, as >>ssd-api promises; a 2-byte problem's x, B and C are exact in tf32
   and go in as they are (C B^T one product; the decay weights w(s) on x, exp(a(0..t)) after C Sin^T).
   A chunk with a value that is not finite (x, B, C, dt or a) takes the same products on the float32
   units instead (a split would make inf - inf; a masked 0 times a NaN x
   would spread it to earlier steps): there pairs s > t are skipped, never multiplied by 0.
   A state entering with a value that is not finite takes its product C Sin^T on the float32 units too,
   and so does a chunk with an a > 0 (a chunk-long exponential could overflow where the steps' decays
   do not), and a block whose C Sin^T on tensor cores left float's range (finite operands: the float32
   units weigh C by exp(a(0..t)) first, SSD-CUDA-v29). A C B^T above float's range where its weight
   exp(a(s+1..t)) dt(s) would bring it back (the float32 units' order is the same) raises a flag in the
   workspace, and the walk, launched after the chunks (it returns at once where the flag is down),
   rewrites y and final_state (SSD-CUDA-v30).
   Every decay is the exponential of a sum of the a's it spans: on tensor cores a difference
   of the chunk's prefix sums kept in double, each a at least -128 (float differences of float prefix
   sums would err by the prefix's rounding, ~1e-5 relative at |sum a| ~ 100, where the walk's product
   of exponentials errs ~1e-7); on the float32 units running sums in float, so a decay across an a of
   -inf is 0 and a NaN spreads as in the recurrence (never inf - inf). Infinities themselves need not
   come out as the recurrence's: its order of products is not the chunks' (an inf x times a B with a
   0 gives NaN there, not here; an inf state times a decay that underflows over the chunk but not step
   by step gives NaN here). Deterministic: fixed-order sums.
   The default for 2-byte problems where its shapes hold (1.25-1.47x the walk's speed on an H100 at the
   Mamba2-130m .. Nemotron-H-like layer shapes, bf16: bench/NOTES.md SSD-CUDA-v17); float32 problems take
   the walk (every operand split, three products a pair: 0.95-1.09x the walk's speed there). The chunked
   backward (>>ssd-chunk-bwd) is built on this form. */
static constexpr int kCkQ = 64;       /* steps a chunk */
static constexpr int kCkPT = 64;      /* channels a block */
static constexpr int kCkThreads = 256;
/* shared memory (floats) of NB 64-state halves: x [s][p], B / C [s][n] (B then the entering state
   [p][n]), W [s][t] with t = 16 i + ti stored at ti 4 + i, dt, a, and the decays */
struct ssd_ck_smem {
    int XS, BS, WS, x, B, C, W, dt, a, din, wsuf, misc, csd, total;
};
static __host__ __device__ constexpr ssd_ck_smem ssd_ck_layout(int NB) {
    ssd_ck_smem m{};
    m.XS = kCkPT + 4; m.BS = 64 * NB + 4; m.WS = kCkQ + 4; /* +4: rows 4 banks apart */
    m.x = 0; m.B = m.x + kCkQ * m.XS; m.C = m.B + kCkQ * m.BS; m.W = m.C + kCkQ * m.BS;
    m.dt = m.W + kCkQ * m.WS; m.a = m.dt + kCkQ; m.din = m.a + kCkQ; m.wsuf = m.din + kCkQ; m.misc = m.wsuf + kCkQ;
    m.csd = m.misc + 4; /* Q doubles (8-byte aligned: every offset before is a multiple of 4 floats) */
    m.total = m.csd + 2 * kCkQ;
    return m;
}
static __device__ __forceinline__ int ssd_ck_wix(int s, int t, int WS) { return s * WS + (t & 15) * 4 + (t >> 4); }
/* The inclusive prefix sums of a chunk's a(0..Q-1) in double, by the 32 lanes of one warp (lane l the steps
   2l, 2l + 1). Each a at least -128: an exponent below -103 is 0 in float32 whichever, the spans it is in still
   decay to 0, and the sums stay small enough for their differences to keep the small a's. */
static __device__ __forceinline__ void ssd_ck_prefix(const float *sa, double *csd, int lane) {
    const double a1 = fmaxf(sa[2 * lane + 1], -128.0f);
    double v = static_cast<double>(fmaxf(sa[2 * lane], -128.0f)) + a1;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const double w = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += w;
    }
    csd[2 * lane] = v - a1;
    csd[2 * lane + 1] = v;
}
static __device__ __forceinline__ float ssd_dot4(float4 a, float4 b, float acc) {
    return fmaf(a.w, b.w, fmaf(a.z, b.z, fmaf(a.y, b.y, fmaf(a.x, b.x, acc))));
}

/* whether a (d0, d1, d2, len) operand's rows of len elements are contiguous with every row start
   16-byte aligned (the walks' and the chunks' 8-element vectors: ssd_stage, ssd_ck_part, ssd_ckb_dx_out; the strides
   of size-1 dimensions never used); an empty row is not (ssd_ck_part's fallback reads the operand's first vector) */
static bool ssd_rows8(const ct &t, int64_t d0, int64_t d1, int64_t d2, int64_t len) {
    if (!t.p) return true;
    const int64_t d[3] = {d0, d1, d2};
    bool ok = (reinterpret_cast<uintptr_t>(t.p) & 15) == 0 && len > 0 && len % 8 == 0 && t.s[3] == 1;
    for (int i = 0; i < 3; i++) ok = ok && (d[i] == 1 || t.s[i] % 8 == 0);
    return ok;
}
/* A thread's share of a chunk's operand by 8-element vectors (rows contiguous and aligned: ssd_vectors; lim - c0 a
   multiple of 8): steps s < tn of a (batch, L, j, col) operand's columns [c0, c0 + COLS), 0 where s >= tn or c0 + col >=
   lim, vector u at i = thread + u threads (step i / (COLS / 8), 8 columns). load issues the loads with nothing waiting
   on them: no branch around a load (a vector outside reads the operand's first one, marked to be 0) and the bits kept
   as loaded (rawv), converted by store (a load in a branch, or one converted at once, waits out its global latency
   before the next is issued: SSD-CUDA-v20); so the loads of every part loaded before the first store share one
   global latency. store writes them as floats [s][col] (row stride rs); bad |= a value that is not finite. */
template <typename T, int COLS> struct ssd_ck_part {
    static constexpr int NV = kCkQ * COLS / 8 / kCkThreads, RV = COLS / 8;
    static_assert(NV * 8 * kCkThreads == kCkQ * COLS && NV <= 32, "whole vectors a thread; a bit of ok a vector");
    rawv<T, 8> r[NV];
    uint32_t ok; /* bit u: vector u is inside */
    __device__ __forceinline__ void load(const ct &src, int64_t b, int64_t t0, int64_t j, int64_t c0, int64_t lim, int tn) {
        ok = 0;
#pragma unroll
        for (int u = 0; u < NV; u++) {
            const int i = static_cast<int>(threadIdx.x) + u * kCkThreads, s = i / RV, cl = (i - s * RV) * 8;
            const bool in = s < tn && c0 + cl < lim;
            ok |= in ? 1u << u : 0u;
            const uint4 *const q = reinterpret_cast<const uint4 *>(static_cast<const T *>(src.p) + (in ? ssd_at4(src, b, t0 + s, j, c0 + cl) : 0));
#pragma unroll
            for (int h = 0; h < 2 * static_cast<int>(sizeof(T)) / 4; h++) {
                const uint4 v = q[h];
                r[u].w[4 * h] = v.x; r[u].w[4 * h + 1] = v.y; r[u].w[4 * h + 2] = v.z; r[u].w[4 * h + 3] = v.w;
            }
        }
    }
    __device__ __forceinline__ void store(float *dst, int rs, bool &bad) const {
#pragma unroll
        for (int u = 0; u < NV; u++) {
            const int i = static_cast<int>(threadIdx.x) + u * kCkThreads, s = i / RV, cl = (i - s * RV) * 8;
            float v[8];
#pragma unroll
            for (int e = 0; e < 8; e++) {
                v[e] = ok >> u & 1u ? raw_get(r[u], e) : 0.0f;
                bad = bad || !isfinite(v[e]);
            }
            ssd_st8(dst + s * rs + cl, v);
        }
    }
};
/* Staging of one operand of a chunk into dst [s][col] as ssd_ck_part says: by its vectors where vec, else element
   by element, 8 loads of a thread in flight */
template <typename T, int COLS>
static __device__ __forceinline__ void ssd_ck_stage(bool vec, float *dst, int rs, const ct &src, int64_t b, int64_t t0, int64_t j, int64_t c0, int64_t lim,
                                                    int tn, bool &bad) {
    if (vec) {
        ssd_ck_part<T, COLS> pt;
        pt.load(src, b, t0, j, c0, lim, tn);
        pt.store(dst, rs, bad);
        return;
    }
    for (int i0 = 0; i0 < kCkQ * COLS; i0 += 8 * kCkThreads) {
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int i = i0 + threadIdx.x + u * kCkThreads, s = i / COLS, cl = i - s * COLS;
            v[u] = s < tn && c0 + cl < lim ? ld<T>(src.p, ssd_at4(src, b, t0 + s, j, c0 + cl)) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int i = i0 + threadIdx.x + u * kCkThreads, s = i / COLS, cl = i - s * COLS;
            bad = bad || !isfinite(v[u]);
            dst[s * rs + cl] = v[u];
        }
    }
}

/* the entering state into Ss ([p][n], row stride BS): initial_state (or 0) at chunk 0, else the
   ring's slot once the chain's flag says the chunk before published it; ends with a barrier, which
   answers whether the state holds a value that is not finite */
template <int NB> static __device__ bool ssd_ck_enter(const ssd_params &P, int64_t chain, int64_t c, int64_t b, int64_t h, int64_t p0, float *Ss) {
    constexpr int NP = 64 * NB, BS = ssd_ck_layout(NB).BS;
    const int tid = threadIdx.x;
    bool bad = false;
    if (c == 0) {
        for (int i = tid; i < kCkPT * NP; i += kCkThreads) {
            const int pl = i / NP, n = i - pl * NP;
            const int64_t p = p0 + pl;
            const float v = P.initial_state.p && p < P.P && n < P.N ? ldf(P.initial_state, ssd_at4(P.initial_state, b, h, p, n)) : 0.0f;
            bad = bad || !isfinite(v);
            Ss[pl * BS + n] = v;
        }
    } else {
        if (tid == 0) {
            const volatile int *f = P.ck_flags + chain;
            while (*f < static_cast<int>(c)) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
                __nanosleep(64);
#endif
            }
            __threadfence();
        }
        __syncthreads();
        const float *src = P.ck_ring + (chain * 2 + (c & 1)) * (kCkPT * NP);
        for (int i = 4 * tid; i < kCkPT * NP; i += 4 * kCkThreads) {
            const int pl = i / NP, n = i - pl * NP;
            const float4 v = __ldcg(reinterpret_cast<const float4 *>(src + i));
            bad = bad || !isfinite(v.x) || !isfinite(v.y) || !isfinite(v.z) || !isfinite(v.w);
            *reinterpret_cast<float4 *>(Ss + pl * BS + n) = v;
        }
    }
    return __syncthreads_or(bad); /* the state holds a value that is not finite */
}
/* the chain's flag, once every thread's stores of the leaving state are visible */
static __device__ __forceinline__ void ssd_ck_publish(const ssd_params &P, int64_t chain, int64_t c) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) atomicExch(P.ck_flags + chain, static_cast<int>(c + 1));
}
/* final_state from F ([p][n], row stride BS) */
template <int NB> static __device__ void ssd_ck_final(const ssd_params &P, const float *F, int64_t b, int64_t h, int64_t p0) {
    constexpr int NP = 64 * NB, BS = ssd_ck_layout(NB).BS;
    for (int i = threadIdx.x; i < kCkPT * NP; i += kCkThreads) {
        const int pl = i / NP, n = i - pl * NP;
        const int64_t p = p0 + pl;
        if (p < P.P && n < P.N) static_cast<float *>(P.final_state.p)[ssd_at4(P.final_state, b, h, p, n)] = F[pl * BS + n];
    }
}
/* y = (Y + D x) silu(z) from Y ([t][p], row stride ldy) */
template <typename T> static __device__ void ssd_ck_out(const ssd_params &P, const float *Y, int ldy, const float *xs, int XS, int64_t b, int64_t h,
                                                       int64_t t0, int64_t p0, int tn) {
    for (int i = threadIdx.x; i < kCkQ * kCkPT; i += kCkThreads) {
        const int tl = i / kCkPT, pl = i - tl * kCkPT;
        const int64_t t = t0 + tl, p = p0 + pl;
        if (tl >= tn || p >= P.P) continue;
        float y = ssd_addD(P, ssd_Dv(P, h, p), xs[tl * XS + pl], Y[tl * ldy + pl]);
        if (P.z.p) {
            const float zv = ld<T>(P.z.p, ssd_at4(P.z, b, t, h, p));
            y *= zv * ssd_sigmoid(zv);
        }
        st<T>(P.y.p, ssd_at4(P.y, b, t, h, p), y);
    }
}

/* the entering state's part on the float32 units: Y[i][j] (t = hi + 16 i, p = lo + 16 j) += d(t) sum_n
   C[t,n] Sin[p,n], d = din (exp(a(0..t))), or 1 where C's rows already carry it (din NULL) */
template <int NB> static __device__ __forceinline__ void ssd_ck_enter_part(float (&Y)[4][4], const float *Cs, const float *Ss, const float *din, int hi, int lo) {
    constexpr int NP = 64 * NB, BS = ssd_ck_layout(NB).BS;
    for (int k = 0; k < NP; k += 4) {
        float4 cv[4], sv[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float d = din ? din[hi + 16 * i] : 1.0f;
            const float4 v = *reinterpret_cast<const float4 *>(Cs + (hi + 16 * i) * BS + k);
            cv[i] = din ? make_float4(v.x * d, v.y * d, v.z * d, v.w * d) : v;
        }
#pragma unroll
        for (int j = 0; j < 4; j++) sv[j] = *reinterpret_cast<const float4 *>(Ss + (lo + 16 * j) * BS + k);
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) Y[i][j] = ssd_dot4(cv[i], sv[j], Y[i][j]);
    }
}

/* a cell of an accumulator array not finite: from finite operands, a sum above float's range, which a weight applied
   after the product (exp(a(0..t)), w(s)) may have brought back in range (SSD-CUDA-v29) */
template <int R, int K> static __device__ __forceinline__ bool ssd_acc_overflow(const float (&acc)[R][K]) {
    bool o = false;
#pragma unroll
    for (int j = 0; j < R; j++)
#pragma unroll
        for (int i = 0; i < K; i++) o = o || !isfinite(acc[j][i]);
    return o;
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define SELSCAN__CK_MMA 1 /* the chunks' products on tensor cores (tf32 wmma and mma.sync: sm_80 and later) */
namespace ckw = nvcuda::wmma;
using ck_acc = ckw::fragment<ckw::accumulator, 16, 16, 8, float>;
/* an operand split into a tf32 high part and a tf32 remainder (the backward's wmma products: its pair products and local
   state; the lo lo term of a product is below float32's rounding): float32's precision on tensor cores */
template <typename L> using ck_fa = ckw::fragment<ckw::matrix_a, 16, 16, 8, ckw::precision::tf32, L>;
template <typename L> using ck_fb = ckw::fragment<ckw::matrix_b, 16, 16, 8, ckw::precision::tf32, L>;
template <typename F> static __device__ __forceinline__ void ssd_ck_split(F &hi, F &lo, const float *p, int ld) {
    ckw::load_matrix_sync(hi, p, ld);
#pragma unroll
    for (int i = 0; i < hi.num_elements; i++) {
        const float v = hi.x[i], h = ckw::__float_to_tf32(v);
        hi.x[i] = h;
        lo.x[i] = ckw::__float_to_tf32(v - h);
    }
}
/* v as a tf32 operand (round to nearest, ties away from zero), in mma's register form */
static __device__ __forceinline__ uint32_t ssd_tf32(float v) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
    return r;
}
/* d += a b on tensor cores, mma.m16n8k8 with tf32 operands (sm_80+), the PTX ISA's fragments: lane 4 g + q holds a at
   (row, column) (g, q), (g + 8, q), (g, q + 4), (g + 8, q + 4); b at (q, g), (q + 4, g); d at (g, 2 q), (g, 2 q + 1),
   (g + 8, 2 q), (g + 8, 2 q + 1) */
static __device__ __forceinline__ void ssd_mma8(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
/* d += a b, mma.m16n8k4 with tf32 operands (sm_80+): lane 4 g + q holds a at (g, q), (g + 8, q); b at (q, g); d as
   ssd_mma8's. wmma's 16 x 16 x 8 tf32 product is four of these on sm_90 (two k halves on each 8-column half) */
static __device__ __forceinline__ void ssd_mma4(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
    asm volatile("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(b0));
}
/* ssd_tc_mm's operand readers of a row-major array in shared memory: (r, c) -> a[r][c] (ssd_rowm), and its transpose
   a[c][r] (ssd_colm). a and ld multiples of 4 floats (every chunk layout's arrays and row strides): rows 16-byte
   aligned, so an operand read along its rows (k contiguous: ssd_rowm as A, ssd_colm as B) may come by ldmatrix
   (SELSCAN__SSD_LDMATRIX, ssd_ldm4) */
struct ssd_rowm_t {
    const float *a;
    int ld;
    __device__ __forceinline__ float operator()(int r, int c) const { return a[r * ld + c]; }
};
struct ssd_colm_t {
    const float *a;
    int ld;
    __device__ __forceinline__ float operator()(int r, int c) const { return a[c * ld + r]; }
};
static __device__ __forceinline__ ssd_rowm_t ssd_rowm(const float *a, int ld) { return {a, ld}; }
static __device__ __forceinline__ ssd_colm_t ssd_colm(const float *a, int ld) { return {a, ld}; }
/* Four 8 x 4-float matrices from shared memory in one instruction (ldmatrix .b16, sm_75+; warp-uniform): lane l gives
   row l & 7 of matrix l >> 3 (p: that row's first float, 16-byte aligned) and gets word q of row g of each matrix
   (lane 4 g + q): the words an mma's tf32 fragment wants of them, the same bits LDS would load */
static __device__ __forceinline__ void ssd_ldm4(uint32_t (&r)[4], const float *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(static_cast<unsigned>(__cvta_generic_to_shared(p))));
}
/* A float operand split for the tensor cores (SSD-CUDA-v24): hi = v truncated to tf32 (its low 13 bits cleared, so the
   parts sum to v whatever bits an mma reads), lo = v - hi (exact in float, below hi's last bit) rounded to tf32 by
   cvt.rna (NaN stays NaN). Four instructions where rounding both parts took eight; lo's rounding at most 2^-21 of v
   (both rounded: 2^-22); a finite v near float's largest stays finite (cvt.rna of v rounded it to inf, inf - inf) */
static __device__ __forceinline__ void ssd_tf32_split(float v, uint32_t &hi, uint32_t &lo) {
    hi = __float_as_uint(v) & 0xffffe000u;
    lo = ssd_tf32(v - __uint_as_float(hi));
}
/* acc[j] (rows r0 + g, r0 + g + 8; columns c0 + 8 j + 2 q, + 1: ssd_mma8's d) += sum_{k0 <= k < k1} A(r, k) B(k, c), the
   operands read by fa(r, k) and fb(k, c) from shared memory, k1 - k0 a multiple of 8. SA / SB: that operand a float,
   split into two tf32 parts (ssd_tf32_split; the products lo hi, hi lo, hi hi: about float32's precision); else
   exact in tf32 (a 2-byte problem's x, B, C): one part, as it is. sp false: no split, the operand rounded to tf32
   (ONE: the tuning builds' one-pass level). K4 (no split): each k-step as two m16n8k4 products, k then k + 4 (wmma's
   instructions and order, so wmma's bits) */
template <int NT8, bool SA, bool SB, bool K4 = false, typename FA, typename FB>
static __device__ __forceinline__ void ssd_tc_mm(float (&acc)[NT8][4], const FA &fa, const FB &fb, int r0, int c0, int k0, int k1, bool sp) {
    const int lane = static_cast<int>(threadIdx.x & 31), g = lane >> 2, q = lane & 3;
    /* k-contiguous operands by ldmatrix: A's rows r0 + (0..15), B's columns two tiles at a time (k0 a multiple of 4) */
    constexpr bool LA = SELSCAN__SSD_LDMATRIX && std::is_same<FA, ssd_rowm_t>::value;
    constexpr bool LB = SELSCAN__SSD_LDMATRIX && std::is_same<FB, ssd_colm_t>::value && NT8 % 2 == 0;
    const int mrow = (lane & 7) + 8 * ((lane >> 3) & 1), mcol = 4 * (lane >> 4); /* A: matrix lane >> 3's row */
    const int ncol = (lane & 7) + 8 * (lane >> 4), nrow = 4 * ((lane >> 3) & 1);  /* B: tile j + (lane >> 4) */
    for (int k = k0; k < k1; k += 8) {
        float av[4];
        if constexpr (LA) {
            uint32_t w[4];
            ssd_ldm4(w, fa.a + (r0 + mrow) * fa.ld + k + mcol);
#pragma unroll
            for (int i = 0; i < 4; i++) av[i] = __uint_as_float(w[i]);
        } else {
            av[0] = fa(r0 + g, k + q); av[1] = fa(r0 + g + 8, k + q); av[2] = fa(r0 + g, k + q + 4); av[3] = fa(r0 + g + 8, k + q + 4);
        }
        uint32_t ah[4], al[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            ah[i] = __float_as_uint(av[i]); /* (exact: as it is) */
            al[i] = 0u;
            if (SA && sp) ssd_tf32_split(av[i], ah[i], al[i]);
            else if (SA) ah[i] = ssd_tf32(av[i]);
        }
        uint32_t bw[4];
#pragma unroll
        for (int j = 0; j < NT8; j++) {
            float bv[2];
            if constexpr (LB) {
                if ((j & 1) == 0) ssd_ldm4(bw, fb.a + (c0 + 8 * j + ncol) * fb.ld + k + nrow);
                bv[0] = __uint_as_float(bw[2 * (j & 1)]);
                bv[1] = __uint_as_float(bw[2 * (j & 1) + 1]);
            } else {
                bv[0] = fb(k + q, c0 + 8 * j + g);
                bv[1] = fb(k + q + 4, c0 + 8 * j + g);
            }
            uint32_t bh[2], bl[2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                bh[i] = __float_as_uint(bv[i]);
                bl[i] = 0u;
                if (SB && sp) ssd_tf32_split(bv[i], bh[i], bl[i]);
                else if (SB) bh[i] = ssd_tf32(bv[i]);
            }
            if constexpr (K4) {
                ssd_mma4(acc[j], ah[0], ah[1], bh[0]);
                ssd_mma4(acc[j], ah[2], ah[3], bh[1]);
                continue;
            }
            if (SA && sp) ssd_mma8(acc[j], al, bh);
            if (SB && sp) ssd_mma8(acc[j], ah, bl);
            ssd_mma8(acc[j], ah, bh);
        }
    }
}
/* f(j, i, row, column) for each cell acc[j][i] of ssd_tc_mm's accumulators (rows r0 + g, r0 + g + 8; columns c0 + 8 j +
   2 q, + 1): the one place that says where d's cells are */
template <int NT8, typename F> static __device__ __forceinline__ void ssd_tc_cells(int r0, int c0, const F &f) {
    const int lane = static_cast<int>(threadIdx.x & 31), g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int j = 0; j < NT8; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) f(j, i, r0 + g + 8 * (i >> 1), c0 + 8 * j + 2 * q + (i & 1));
}
/* f(j, h, row, column) for each pair of cells acc[j][2 h], acc[j][2 h + 1] (row r0 + g + 8 h; columns column and
   column + 1, column = c0 + 8 j + 2 q, even where c0 is): a pair a store */
template <int NT8, typename F> static __device__ __forceinline__ void ssd_tc_pairs(int r0, int c0, const F &f) {
    const int lane = static_cast<int>(threadIdx.x & 31), g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int j = 0; j < NT8; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) f(j, h, r0 + g + 8 * h, c0 + 8 * j + 2 * q);
}
#endif

template <typename T, int NB, bool ONE> static __global__ void __launch_bounds__(kCkThreads, 2) ssd_ck_fwd_kernel(const ssd_params P) {
    extern __shared__ __align__(128) float4 ssd_ck_sm4[];
    float *const sm = reinterpret_cast<float *>(ssd_ck_sm4);
    constexpr int Q = kCkQ, NP = 64 * NB;
    constexpr ssd_ck_smem m = ssd_ck_layout(NB);
    constexpr int XS = m.XS, BS = m.BS, WS = m.WS;
    float *const xs = sm + m.x, *const Bs = sm + m.B, *const Cs = sm + m.C, *const Ws = sm + m.W;
    float *const sdt = sm + m.dt, *const sa = sm + m.a, *const sdin = sm + m.din, *const swsuf = sm + m.wsuf;
    unsigned long long *const s_ticket = reinterpret_cast<unsigned long long *>(sm + m.misc + 2);
    const int tid = threadIdx.x, hi = tid >> 4, lo = tid & 15;
    if (tid == 0) *s_ticket = atomicAdd(P.ck_ticket, 1ull);
    __syncthreads();
    const int64_t nchain = P.batch * P.H * P.ck_ntile, id = static_cast<int64_t>(*s_ticket);
    const int64_t c = id / nchain, chain = id - c * nchain;
    const int64_t tile = chain % P.ck_ntile, h = (chain / P.ck_ntile) % P.H, b = chain / (P.ck_ntile * P.H);
    const int64_t g = h / P.hpg, t0 = c * Q, p0 = tile * kCkPT;
    const int tn = static_cast<int>(P.L - t0 < Q ? P.L - t0 : Q);
    const bool more = t0 + Q < P.L; /* a chunk after this one: the state leaves through the ring */
    bool bad = false, apos = false; /* a value of the chunk that is not finite, an a > 0: the float32 units' path (below) */

    /* stage: dt and a (0 past L), x [s][p], B and C [s][n] (0 outside): by vectors where rows are contiguous and
       aligned (P.vx, P.vbc: ssd_vectors), their loads issued before dt's and A's (one global latency for the stage,
       not one an operand: SSD-CUDA-v23; up to 40 words a thread in flight for a 2-byte problem, 80 for float32, under
       the kernel's 128 registers), else element by element */
    ssd_ck_part<T, kCkPT> px;
    ssd_ck_part<T, NP> pB, pC;
    if (P.vx) px.load(P.x, b, t0, h, p0, P.P, tn);
    if (P.vbc) {
        pB.load(P.B, b, t0, g, 0, P.N, tn);
        pC.load(P.C, b, t0, g, 0, P.N, tn);
    }
    const float Ah = ldf(P.A, h * P.A.s[0]);
    if (tid < Q) {
        float d = 0.0f;
        if (tid < tn) {
            float raw, pre;
            d = ssd_dt<T>(P, b, t0 + tid, h, raw, pre);
        }
        sdt[tid] = d;
        sa[tid] = tid < tn ? d * Ah : 0.0f;
        /* an a > 0 (A > 0, or dt < 0 without the softplus) can overflow a chunk-long exponential the
           steps' own decays would not: the float32 path's running sums */
        bad = !isfinite(d) || !isfinite(sa[tid]);
        apos = sa[tid] > 0.0f;
    }
    if (P.vx) px.store(xs, XS, bad);
    else ssd_ck_stage<T, kCkPT>(false, xs, XS, P.x, b, t0, h, p0, P.P, tn, bad);
    if (P.vbc) {
        pB.store(Bs, BS, bad);
        pC.store(Cs, BS, bad);
    } else {
        ssd_ck_stage<T, NP>(false, Bs, BS, P.B, b, t0, g, 0, P.N, tn, bad);
        ssd_ck_stage<T, NP>(false, Cs, BS, P.C, b, t0, g, 0, P.N, tn, bad);
    }
    const bool nonfinite = __syncthreads_or(bad); /* (values alone: the hand-off's test below) */
    bad = nonfinite || __syncthreads_or(apos) || P.ck_simt;
    float *const Ss = Bs; /* the entering state takes B's place once B is used */
#ifdef SELSCAN__CK_MMA
    if (!bad) {
        /* the products by ssd_tc_mm (mma.sync m16n8k8), a warp a strip of 16 rows (warp & 3) and half the columns
           (warp >> 2) of each result; a 2-byte problem's x, B and C are exact in tf32 (EX: taken as they are, one
           part), every float operand (W, w(s) x, the entering state) split in two: float32's precision */
        constexpr bool EX = sizeof(T) == 2, sp = !ONE;
        constexpr int NT8 = NP / 16; /* tiles of 8 states in half a row of states */
        const int warp = tid >> 5, r0 = 16 * (warp & 3), cq = 32 * (warp >> 2), cn = (warp >> 2) * (NP / 2);
        /* decays: each exponent a difference of the chunk's prefix sums of a, kept in double */
        double *const csd = reinterpret_cast<double *>(sm + m.csd);
        if (tid < 32) ssd_ck_prefix(sa, csd, tid);
        /* C B^T (t, s), a warp's block where it reaches the diagonal (steps s <= its last row t) */
        float acc[4][4] = {};
        if (cq <= r0 + 15) ssd_tc_mm<4, !EX, !EX>(acc, ssd_rowm(Cs, BS), ssd_colm(Bs, BS), r0, cq, 0, NP, sp);
        /* weighed by exp(a(s+1..t)) dt(s) after it: a sum above float's range hands the call to the walk */
        if (ssd_acc_overflow(acc)) *P.ck_fwd_flag = 1;
        __syncthreads(); /* csd */
        /* W = C B^T exp(a(s+1..t)) dt(s) on and below the diagonal, 0 above; the decays of Sloc and of the
           entering state */
        const double tot = csd[Q - 1];
        ssd_tc_cells<4>(r0, cq, [&](int j, int i, int t, int s) {
            Ws[t * WS + s] = s <= t ? acc[j][i] * (expf(static_cast<float>(csd[t] - csd[s])) * sdt[s]) : 0.0f;
        });
        if (tid < Q) {
            sdin[tid] = expf(static_cast<float>(csd[tid]));
            swsuf[tid] = expf(static_cast<float>(tot - csd[tid])) * sdt[tid];
            if (tid == 0) sm[m.misc] = expf(static_cast<float>(tot));
        }
        __syncthreads(); /* W, din, wsuf */
        /* Sloc = (w x)^T B (p, n) */
        float sl[NT8][4] = {};
        ssd_tc_mm<NT8, true, !EX>(sl, [xs, swsuf](int p, int s) { return swsuf[s] * xs[s * XS + p]; }, ssd_rowm(Bs, BS), r0, cn, 0, Q, sp);
        /* Y = W x (t, p), s up to the strip's last row */
        float yv[4][4] = {};
        ssd_tc_mm<4, true, !EX>(yv, ssd_rowm(Ws, WS), ssd_rowm(xs, XS), r0, cq, 0, r0 + 16, sp);
        __syncthreads(); /* B's and W's readers are done: the entering state takes B's place */
        const bool sbad = ssd_ck_enter<NB>(P, chain, c, b, h, p0, Ss);
        const float dec = sm[m.misc];
        /* the leaving state dec Sin + Sloc: into the ring (a chunk follows), kept for final_state (none) */
        float *const ring = P.ck_ring + (chain * 2 + ((c + 1) & 1)) * (kCkPT * NP);
        ssd_tc_cells<NT8>(r0, cn, [&](int j, int i, int p, int n) {
            sl[j][i] = fmaf(dec, Ss[p * BS + n], sl[j][i]);
            if (more) ring[p * NP + n] = sl[j][i];
        });
        if (more) ssd_ck_publish(P, chain, c);
        /* Y += exp(a(0..t)) C Sin^T: on tensor cores, or (a state not finite: a split would make inf - inf) on
           the float32 units, Y through W's place (W is used) */
        float *Yb = Cs;
        int ldy = BS;
        bool viaf = sbad; /* C Sin^T on the float32 units */
        float ye[4][4] = {};
        if (!sbad) {
            ssd_tc_mm<4, !EX, true>(ye, ssd_rowm(Cs, BS), ssd_colm(Ss, BS), r0, cq, 0, NP, sp);
            /* a sum above float's range: the float32 units' order, which weighs C by exp(a(0..t)) first */
            viaf = __syncthreads_or(ssd_acc_overflow(ye));
        }
        if (!viaf) {
            ssd_tc_cells<4>(r0, cq, [&](int j, int i, int t, int) { yv[j][i] = fmaf(sdin[t], ye[j][i], yv[j][i]); });
        } else {
            Yb = Ws;
            ldy = WS;
            ssd_tc_cells<4>(r0, cq, [&](int j, int i, int t, int p) { Ws[t * WS + p] = yv[j][i]; });
            __syncthreads();
            float Y[4][4];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) Y[i][j] = Ws[(hi + 16 * i) * WS + lo + 16 * j];
            ssd_ck_enter_part<NB>(Y, Cs, Ss, sdin, hi, lo);
            __syncthreads();
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) Ws[(hi + 16 * i) * WS + lo + 16 * j] = Y[i][j];
        }
        __syncthreads(); /* every reader of C and Sin is done */
        if (!viaf) ssd_tc_cells<4>(r0, cq, [&](int j, int i, int t, int p) { Cs[t * BS + p] = yv[j][i]; });
        if (!more && P.final_state.p) ssd_tc_cells<NT8>(r0, cn, [&](int j, int i, int p, int n) { Ss[p * BS + n] = sl[j][i]; });
        __syncthreads();
        if (!more && P.final_state.p) ssd_ck_final<NB>(P, Ss, b, h, p0);
        ssd_ck_out<T>(P, Yb, ldy, xs, XS, b, h, t0, p0, tn);
        return;
    }
#endif
    /* The float32 units' path: chunks with a value that is not finite (where a split into tf32
       parts would make inf - inf, and a product with a masked 0 would spread a NaN), and devices
       before sm_80. Decays by running sums in float, one row a thread (an a of -inf: decay 0). */
    if (tid < Q) {
        const int t = tid;
        float seg = 0.0f;
        for (int s = t; s >= 0; s--) {
            Ws[ssd_ck_wix(s, t, WS)] = expf(seg) * sdt[s];
            seg += sa[s];
        }
        sdin[t] = expf(seg);
        float suf = 0.0f;
        for (int u = Q - 1; u > t; u--) suf += sa[u];
        swsuf[t] = expf(suf) * sdt[t];
        if (t == 0) sm[m.misc] = expf(suf + sa[0]);
    }
    __syncthreads();
    /* Sloc: channel p = hi + 16 i, states n = 64 k + 4 lo + e */
    float Sl[4][4 * NB];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int e = 0; e < 4 * NB; e++) Sl[i][e] = 0.0f;
    for (int s = 0; s < tn; s++) {
        const float w = swsuf[s];
        float xv[4];
#pragma unroll
        for (int i = 0; i < 4; i++) xv[i] = xs[s * XS + hi + 16 * i] * w;
#pragma unroll
        for (int k = 0; k < NB; k++) {
            const float4 bv = *reinterpret_cast<const float4 *>(Bs + s * BS + 64 * k + 4 * lo);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                Sl[i][4 * k + 0] = fmaf(xv[i], bv.x, Sl[i][4 * k + 0]);
                Sl[i][4 * k + 1] = fmaf(xv[i], bv.y, Sl[i][4 * k + 1]);
                Sl[i][4 * k + 2] = fmaf(xv[i], bv.z, Sl[i][4 * k + 2]);
                Sl[i][4 * k + 3] = fmaf(xv[i], bv.w, Sl[i][4 * k + 3]);
            }
        }
    }
    /* W[t,s] = (C[t] . B[s]) times its decay, t = hi + 16 i, s = lo + 16 j, j <= i (s > t: left unset) */
    {
        float acc[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
        for (int k = 0; k < NP; k += 4) {
            float4 cv[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) cv[i] = *reinterpret_cast<const float4 *>(Cs + (hi + 16 * i) * BS + k);
#pragma unroll
            for (int j = 0; j < 4; j++) bv[j] = *reinterpret_cast<const float4 *>(Bs + (lo + 16 * j) * BS + k);
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j <= i; j++) acc[i][j] = ssd_dot4(cv[i], bv[j], acc[i][j]);
        }
        if (!nonfinite && ssd_acc_overflow(acc)) *P.ck_fwd_flag = 1; /* (as the tensor cores' C B^T, where the chunk's values are finite) */
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j <= i; j++) {
                const int t = hi + 16 * i, s = lo + 16 * j;
                if (s <= t) Ws[ssd_ck_wix(s, t, WS)] *= acc[i][j];
            }
    }
    __syncthreads();
    /* the chunk's own inputs: Y[t,p] = sum_{s<=t} W[t,s] x[s,p], t = hi + 16 i, p = lo + 16 j */
    float Y[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) Y[i][j] = 0.0f;
    {
        const int smax = hi + 48 < tn - 1 ? hi + 48 : tn - 1;
        for (int s = 0; s <= smax; s++) {
            const float4 wv = *reinterpret_cast<const float4 *>(Ws + s * WS + 4 * hi);
            const float w[4] = {wv.x, wv.y, wv.z, wv.w};
            float xv[4];
#pragma unroll
            for (int j = 0; j < 4; j++) xv[j] = xs[s * XS + lo + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
                if (s <= hi + 16 * i)
#pragma unroll
                    for (int j = 0; j < 4; j++) Y[i][j] = fmaf(w[i], xv[j], Y[i][j]);
        }
    }
    /* the entering state, then the leaving one: dec Sin + Sloc into the ring (a chunk follows) */
    __syncthreads(); /* B's readers are done */
    ssd_ck_enter<NB>(P, chain, c, b, h, p0, Ss); /* (any value: this path computes what the recurrence's order would for NaN) */
    const float dec = sm[m.misc];
    if (more) {
        float *dst = P.ck_ring + (chain * 2 + ((c + 1) & 1)) * (kCkPT * NP);
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int k = 0; k < NB; k++) {
                const int pl = hi + 16 * i, n = 64 * k + 4 * lo;
                const float4 s = *reinterpret_cast<const float4 *>(Ss + pl * BS + n);
                const float4 o = make_float4(fmaf(dec, s.x, Sl[i][4 * k]), fmaf(dec, s.y, Sl[i][4 * k + 1]),
                                             fmaf(dec, s.z, Sl[i][4 * k + 2]), fmaf(dec, s.w, Sl[i][4 * k + 3]));
                __stcg(reinterpret_cast<float4 *>(dst + pl * NP + n), o);
            }
        ssd_ck_publish(P, chain, c);
    }
    ssd_ck_enter_part<NB>(Y, Cs, Ss, sdin, hi, lo);
    __syncthreads(); /* every reader of C and Sin is done */
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) Cs[(hi + 16 * i) * BS + lo + 16 * j] = Y[i][j];
    if (!more && P.final_state.p)
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int k = 0; k < NB; k++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int pl = hi + 16 * i, n = 64 * k + 4 * lo + e;
                    Ss[pl * BS + n] = fmaf(dec, Ss[pl * BS + n], Sl[i][4 * k + e]);
                }
    __syncthreads();
    if (!more && P.final_state.p) ssd_ck_final<NB>(P, Ss, b, h, p0);
    ssd_ck_out<T>(P, Cs, BS, xs, XS, b, h, t0, p0, tn);
}

/* ---------------------------------------------------------------------------------------------- */
/* >>ssd-chunk-bwd   the SSD backward in chunks (ssd_ckb_loc / ssd_ckb_pass / ssd_ckb_kernel)         */
/* ---------------------------------------------------------------------------------------------- */
/* DESIGN. The backward of >>ssd-chunk's form, on the float32 units (for a 2-byte problem partly on tensor
   cores: below), as three kernels over chunks of
   Q = 64 steps x tiles of 64 channels of a (batch row, head) (a chain):
   - ssd_ckb_loc_kernel, a block a chunk: the chunk's own state Sloc = sum_s w(s) x(s) B(s)^T (w(s) =
     exp(a(s+1) + .. + a(Q-1)) dt(s)) and its own part of the entering state's gradient
     Gloc = sum_t exp(a(0) + .. + a(t)) dy0(t) C(t)^T (dy0: dy through the gate), into the workspace;
   - ssd_ckb_pass_kernel, a thread four states of a chain: the states through the chunks in order,
     Sin(c+1) = dec(c) Sin(c) + Sloc(c) (dec: the chunk's whole decay), and their gradients in reverse,
     Gout(c-1) = dec(c) Gout(c) + Gloc(c), each written over its local part; dinitial_state;
   - ssd_ckb_kernel, a block a chunk, independent of the others: with Sin and Gout of its chunk, the
     gradients as matrix products: W = (C B^T) o E o dt and V = (dy0 x^T) o E o dt (E(t,s) =
     exp(a(s+1) + .. + a(t)), s <= t), dx = W^T dy0 + w(s) B Gout^T + D dy0, dB = V^T C + w(s) x^T Gout,
     dC = V B + exp(a(0..t)) dy0 Sin, y0 = W x + exp(a(0..t)) C Sin^T (dz), and the per-step scalars of
     the decay: d loss / d a(u) = sum_{t >= u > s} M(t,s) (M = (C B^T) o E o dt o (dy0 x^T)) + sum_{t >= u}
     rho(t) + sum_{s < u} dt(s) tau(s) + dec <Gout, Sin>, with rho(t) = exp(a(0..t)) dy0(t) . (C Sin^T)(t)
     (= C(t) . (exp(a(0..t)) dy0 Sin)(t), dC's own term: the tensor-core body sums it so, C Sin^T only for dz)
     and tau(s) = exp(a(s+1..Q-1)) x(s) . (B Gout^T)(s); the explicit d loss / d dt(s) = sum_t (C B^T o E
     o dy0 x^T)(t,s) + tau(s). Then ssd_dt / ssd_bc / ssd_param reduce them as they do the walks'.
   No sum here runs over the sequence but the pass of the states between chunks (a chunk a step, in
   float32 as the forward's chunks), so float32 suffices where the walks need double, except in the
   pair matrix: C B^T and dy0 x^T are taken in double for M (the decay's gradient is a sum whose terms
   cancel; with float32 inputs and sums they put dA 4.6e-5 off in a left-padded case, in double 6.4e-6:
   bench/NOTES.md SSD-CUDA-v9's emulation). A 2-byte problem takes them on tensor cores instead (x, B, C
   and dy exact in tf32: exact products, float32-width sums; ssd_ckb_pairs_tc), and the local-state
   kernel's two products too (the weighted operand split in two tf32 parts: ssd_ckb_loc_tc); float32
   problems keep the float32 units and double (bench/NOTES.md SSD-CUDA-v14). Deterministic: every sum in a
   fixed order.
   A value that is not finite (x, dy, z, B, C, dt, a, initial_state, dfinal_state, or a state that
   overflows) or an a > 0 raises a flag in the workspace; the chunks' gradient kernel then returns at
   once and the walks, launched after it, run (they return at once when the flag is down): NaN and
   infinities come out where the recurrence puts them. The gradient kernel raises it itself where a pair
   sum on tensor cores leaves float's range (inputs finite), and where a product weighed after it does (dy0
   Sin, C Sin^T, B Go^T, x^T Go; the float32 units' body: B Go^T; SSD-CUDA-v29); its blocks that ran before
   wrote outputs and
   partials which the walks then rewrite, every one (the reductions read the flag after both). Taken (1.65-1.68x the walks on an H200: bench/NOTES.md
   SSD-CUDA-v10; ssd_ckb_mode 0, for the tests, keeps the walks alone) where >>ssd-chunk's shapes hold (no packed sequences, 32 < dstate <= 128), the walks' channel
   slices are the chunks' tiles and the block's shared memory fits the device. */

/* shared memory of the backward's chunk kernels (floats): x and dy0 [s][p], W and V [t][s] (row
   stride XS), B and C [s][n] (BS), S: the entering state, then the leaving state's gradient [p][n]
   (BS), before them the pair matrix's double products [t][s] (row stride PS doubles); the steps'
   values; doubles from dbl (loc: the local-state kernel's, without W, V and S) */
struct ssd_ckb_smem {
    int XS, BS, PS, x, dy, W, V, B, C, S, dt, a, din, wsuf, ex, misc, dbl, total;
};
static __host__ __device__ constexpr ssd_ckb_smem ssd_ckb_layout(int NB, bool loc) {
    ssd_ckb_smem m{};
    m.XS = kCkPT + 4; m.BS = 64 * NB + 4; m.PS = kCkQ + 1;
    m.x = 0; m.dy = m.x + kCkQ * m.XS; m.W = m.dy + kCkQ * m.XS;
    m.V = m.W + (loc ? 0 : kCkQ * m.XS);
    m.B = m.V + (loc ? 0 : kCkQ * m.XS);
    m.C = m.B + kCkQ * m.BS;
    m.S = m.C + kCkQ * m.BS;
    const int ssz = 64 * m.BS > 2 * kCkQ * m.PS ? 64 * m.BS : 2 * kCkQ * m.PS;
    m.dt = m.S + (loc ? 0 : ssz);
    m.a = m.dt + kCkQ; m.din = m.a + kCkQ; m.wsuf = m.din + kCkQ; m.ex = m.wsuf + kCkQ; m.misc = m.ex + kCkQ;
    m.dbl = m.misc + 8; /* csd; then (the gradient kernel) xdp, colM, rowM, gpair, rho, tau, red (16), pr (4 Q: the
                           tensor-core body's row partials of rho and tau, two a row each) */
    m.total = m.dbl + 2 * (loc ? kCkQ : 11 * kCkQ + 16);
    return m;
}

/* Staging of a chunk for the backward: dt and a (0 past L), x and dy0 = dy silu(z) [s][p] (z through
   zt first), B and C [s][n]; csd, the prefix sums of a in double (each a at least -128: >>ssd-chunk),
   din = exp(csd(t)), ex = exp(csd(Q-1) - csd(s)), wsuf = ex dt, misc[0] = exp(csd(Q-1)). Answers
   (every thread) whether a value is not finite or an a > 0. zt must not overlap x, dy or B (C is
   stored after the gate and may take zt's place). AHEAD: the vectorized operands' loads (ssd_ck_part) issued before
   dt's and before any store, their latency and dt's overlapping (up to 112 words a thread in flight: the gradient
   kernel, one block an SM with registers to spare); else an operand loaded and stored at a time (the local-state
   kernel, two blocks an SM within 128 registers). */
template <typename T, int NB, bool AHEAD>
static __device__ bool ssd_ckb_stage(const ssd_params &P, float *sm, const ssd_ckb_smem &m, float *zt, int64_t b, int64_t h, int64_t t0, int64_t p0,
                                     int tn) {
    constexpr int Q = kCkQ, NP = 64 * NB;
    const int tid = threadIdx.x;
    const int64_t g = h / P.hpg;
    float *const xs = sm + m.x, *const dys = sm + m.dy, *const Bs = sm + m.B, *const Cs = sm + m.C;
    float *const sdt = sm + m.dt, *const sa = sm + m.a;
    double *const csd = reinterpret_cast<double *>(sm + m.dbl);
    bool bad = false;
    ssd_ck_part<T, kCkPT> px, pdy, pz;
    ssd_ck_part<T, NP> pB, pC;
    if constexpr (AHEAD) { /* the vectorized operands (an operand element by element: ssd_ck_stage below) */
        if (P.vx) {
            px.load(P.x, b, t0, h, p0, P.P, tn);
            pdy.load(P.dy, b, t0, h, p0, P.P, tn);
            if (P.z.p) pz.load(P.z, b, t0, h, p0, P.P, tn);
        }
        if (P.vbc) {
            pB.load(P.B, b, t0, g, 0, P.N, tn);
            pC.load(P.C, b, t0, g, 0, P.N, tn);
        }
    }
    const float Ah = ldf(P.A, h * P.A.s[0]);
    if (tid < Q) {
        float d = 0.0f;
        if (tid < tn) {
            float raw, pre;
            d = ssd_dt<T>(P, b, t0 + tid, h, raw, pre);
        }
        sdt[tid] = d;
        sa[tid] = tid < tn ? d * Ah : 0.0f;
        bad = !isfinite(d) || !isfinite(sa[tid]) || sa[tid] > 0.0f;
    }
    if (AHEAD && P.vx) {
        px.store(xs, m.XS, bad);
        pdy.store(dys, m.XS, bad);
        if (P.z.p) pz.store(zt, m.XS, bad);
    } else {
        ssd_ck_stage<T, kCkPT>(P.vx, xs, m.XS, P.x, b, t0, h, p0, P.P, tn, bad);
        ssd_ck_stage<T, kCkPT>(P.vx, dys, m.XS, P.dy, b, t0, h, p0, P.P, tn, bad);
        if (P.z.p) ssd_ck_stage<T, kCkPT>(P.vx, zt, m.XS, P.z, b, t0, h, p0, P.P, tn, bad);
    }
    if (AHEAD && P.vbc) pB.store(Bs, m.BS, bad);
    else ssd_ck_stage<T, NP>(P.vbc, Bs, m.BS, P.B, b, t0, g, 0, P.N, tn, bad);
    __syncthreads();
    if (P.z.p)
        for (int i = tid; i < Q * kCkPT; i += kCkThreads) {
            const int s = i / kCkPT, pl = i - s * kCkPT;
            const float zv = zt[s * m.XS + pl];
            dys[s * m.XS + pl] *= zv * ssd_sigmoid(zv);
            bad = bad || !isfinite(dys[s * m.XS + pl]);
        }
    __syncthreads(); /* zt's readers are done */
    if (AHEAD && P.vbc) pC.store(Cs, m.BS, bad);
    else ssd_ck_stage<T, NP>(P.vbc, Cs, m.BS, P.C, b, t0, g, 0, P.N, tn, bad);
    if (tid < 32) ssd_ck_prefix(sa, csd, tid);
    __syncthreads();
    if (tid < Q) {
        const double tot = csd[Q - 1];
        sm[m.din + tid] = expf(static_cast<float>(csd[tid]));
        const float e = expf(static_cast<float>(tot - csd[tid]));
        sm[m.ex + tid] = e;
        sm[m.wsuf + tid] = e * sdt[tid];
        if (tid == 0) sm[m.misc] = expf(static_cast<float>(tot));
    }
    return __syncthreads_or(bad);
}

/* acc[e][f] (row hi + 16 e, column ssd_ckb_col<BM>(f, lo)) += sum_{k0 <= k < k1} rs(row) A(row, k)
   B(column, k): A stored [row][k] (AK false: float4 along k) or [k][row] (AK); B stored [column][k] (BM 0:
   float4 along k, columns lo + 16 f) or [k][column] (BM 1: a word a load, columns lo + 16 f; BM 2: float4
   along the columns, columns 64 (f / 4) + 4 lo + f % 4); rs each row's factor (NULL: 1); k0, k1 multiples
   of 4; TRI: the cells f <= e alone. A warp's loads: two addresses (A); 16 consecutive words, or 16
   float4 rows 4 banks apart, or 256 consecutive bytes (B). */
template <int BM> static __device__ __forceinline__ int ssd_ckb_col(int f, int lo) { return BM == 2 ? 64 * (f >> 2) + 4 * lo + (f & 3) : lo + 16 * f; }
template <int NF, bool AK, int BM, bool TRI, typename V>
static __device__ __forceinline__ void ssd_ckb_mm(V (&acc)[4][NF], const float *A, int lda, const float *Bm, int ldb, int k0, int k1, int hi, int lo,
                                                  const float *rs) {
    static_assert(BM != 2 || NF % 4 == 0, "float4 columns: four a group");
    float r[4];
#pragma unroll
    for (int e = 0; e < 4; e++) r[e] = rs ? rs[hi + 16 * e] : 1.0f;
    for (int k = k0; k < k1; k += 4) {
        float a[4][4], bq[NF][4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if constexpr (AK) {
#pragma unroll
                for (int kk = 0; kk < 4; kk++) a[e][kk] = A[(k + kk) * lda + hi + 16 * e];
            } else {
                const float4 v = *reinterpret_cast<const float4 *>(A + (hi + 16 * e) * lda + k);
                a[e][0] = v.x; a[e][1] = v.y; a[e][2] = v.z; a[e][3] = v.w;
            }
            if (rs)
#pragma unroll
                for (int kk = 0; kk < 4; kk++) a[e][kk] *= r[e];
        }
        if constexpr (BM == 2) {
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
#pragma unroll
                for (int j = 0; j < NF / 4; j++) {
                    const float4 v = *reinterpret_cast<const float4 *>(Bm + (k + kk) * ldb + 64 * j + 4 * lo);
                    bq[4 * j][kk] = v.x; bq[4 * j + 1][kk] = v.y; bq[4 * j + 2][kk] = v.z; bq[4 * j + 3][kk] = v.w;
                }
        } else {
#pragma unroll
            for (int f = 0; f < NF; f++) {
                if constexpr (BM == 1) {
#pragma unroll
                    for (int kk = 0; kk < 4; kk++) bq[f][kk] = Bm[(k + kk) * ldb + lo + 16 * f];
                } else {
                    const float4 v = *reinterpret_cast<const float4 *>(Bm + (lo + 16 * f) * ldb + k);
                    bq[f][0] = v.x; bq[f][1] = v.y; bq[f][2] = v.z; bq[f][3] = v.w;
                }
            }
        }
#pragma unroll
        for (int e = 0; e < 4; e++)
#pragma unroll
            for (int f = 0; f < NF; f++) {
                if (TRI && f > e) continue;
#pragma unroll
                for (int kk = 0; kk < 4; kk++) acc[e][f] = ssd_fma(static_cast<V>(a[e][kk]), static_cast<V>(bq[f][kk]), acc[e][f]);
            }
    }
}

#ifdef SELSCAN__CK_MMA
/* A tf32 operand: loaded, and with round its floats rounded to tf32 (__float_to_tf32: the one-pass level's float
   operands); without, values exact in tf32 (a 2-byte problem's x, B, C, dy), already tf32 values as wmma's contract
   asks: converting them changes no bit and costs two instructions an element on sm_90 (SSD-CUDA-v16) */
template <typename F> static __device__ __forceinline__ void ssd_ck_load_tf32(F &f, const float *p, int ld, bool round) {
    ckw::load_matrix_sync(f, p, ld);
    if (round)
#pragma unroll
        for (int i = 0; i < f.num_elements; i++) f.x[i] = ckw::__float_to_tf32(f.x[i]);
}

/* The pair products of a 2-byte problem on tensor cores: Ws = C B^T and Vs = dy0 x^T, the 10 tiles of 16 x 16
   on or below the diagonal of each (those above left as they were), each tile by one warp (assigned below). x, B, C and dy
   are exact in tf32 (bf16's and f16's significands fit its 10 bits, their exponents its 8), so each product
   is exact and only the sums round, at float32's width (not IEEE's order or rounding: the tensor cores';
   SSD-CUDA-v9's emulation with float32 inputs and sums, a bound above this, put dA 4.6e-5 off,
   test_cuda_ssd's bound for a bf16 problem 7.8e-3); dy0 under a gate (split: dy silu(z), a float) is
   split into a tf32 part and its remainder, two products a step (sp false, the one-pass level: rounded instead) */
template <int NP>
static __device__ __forceinline__ void ssd_ckb_pairs_tc(bool gated, bool sp, const float *Cs, const float *Bs, int BS, const float *dys, const float *xs,
                                                        int XS, float *Ws, float *Vs) {
    const bool split = gated && sp;
    /* the 20 tiles by work, not in turn (SSD-CUDA-v25): a C B^T tile is NP / 8 wmma steps, a dy x^T tile kCkPT / 8
       (twice that split); warps 0-1 two C B^T tiles, warps 2-5 one and two dy x^T tiles, warps 6-7 one and one: the
       longest warp 32 steps at NB 2 where turns gave warps 0-3 40 (under a gate every tile is 16: 48 either way) */
    static_assert(kCkThreads == 256, "ssd_ckb_pairs_tc's tile assignment is for 8 warps");
    const int warp = static_cast<int>(threadIdx.x >> 5);
    for (int it = 0; it < 3; it++) {
        const int k2 = warp < 2 ? (it < 2 ? 2 * warp + it : -1) : it == 0 ? warp + 2 : warp < 6 ? 10 + 2 * (warp - 2) + (it - 1) : it == 1 ? 12 + warp : -1;
        if (k2 < 0) break;
        const bool dxp = k2 >= 10; /* the second product */
        const int kk = dxp ? k2 - 10 : k2, ti = kk < 1 ? 0 : kk < 3 ? 1 : kk < 6 ? 2 : 3, si = kk - ti * (ti + 1) / 2;
#if SELSCAN__SSD_LDMATRIX >= 2
        if (!dxp || !split) { /* by ssd_tc_mm: both operands k-contiguous, by ldmatrix; wmma's HMMAs (K4) in its order */
            float acc2[2][4] = {};
            if (!dxp) ssd_tc_mm<2, false, false, true>(acc2, ssd_rowm(Cs + 16 * ti * BS, BS), ssd_colm(Bs + 16 * si * BS, BS), 0, 0, 0, NP, false);
            else if (gated) ssd_tc_mm<2, true, false, true>(acc2, ssd_rowm(dys + 16 * ti * XS, XS), ssd_colm(xs + 16 * si * XS, XS), 0, 0, 0, kCkPT, false);
            else ssd_tc_mm<2, false, false, true>(acc2, ssd_rowm(dys + 16 * ti * XS, XS), ssd_colm(xs + 16 * si * XS, XS), 0, 0, 0, kCkPT, false);
            float *const out = (dxp ? Vs : Ws) + 16 * ti * XS + 16 * si;
            ssd_tc_cells<2>(0, 0, [&](int j, int i, int r, int c) { out[r * XS + c] = acc2[j][i]; });
            continue;
        }
#endif
        ck_acc acc;
        ckw::fill_fragment(acc, 0.0f);
        if (!dxp) {
            for (int k = 0; k < NP; k += 8) {
                ck_fa<ckw::row_major> a;
                ck_fb<ckw::col_major> b;
                ssd_ck_load_tf32(a, Cs + 16 * ti * BS + k, BS, false);
                ssd_ck_load_tf32(b, Bs + 16 * si * BS + k, BS, false);
                ckw::mma_sync(acc, a, b, acc);
            }
            ckw::store_matrix_sync(Ws + 16 * ti * XS + 16 * si, acc, XS, ckw::mem_row_major);
        } else {
            for (int k = 0; k < kCkPT; k += 8) {
                ck_fa<ckw::row_major> ah, al;
                ck_fb<ckw::col_major> b;
                ssd_ck_load_tf32(b, xs + 16 * si * XS + k, XS, false);
                if (split) {
                    ssd_ck_split(ah, al, dys + 16 * ti * XS + k, XS);
                    ckw::mma_sync(acc, al, b, acc);
                } else
                    ssd_ck_load_tf32(ah, dys + 16 * ti * XS + k, XS, gated); /* dy exact; dy0 under a gate rounded (ONE) */
                ckw::mma_sync(acc, ah, b, acc);
            }
            ckw::store_matrix_sync(Vs + 16 * ti * XS + 16 * si, acc, XS, ckw::mem_row_major);
        }
    }
}
#endif

#ifdef SELSCAN__CK_MMA
/* The chunk's own state and its own part of the entering state's gradient for a 2-byte problem on tensor
   cores: S = (w x)^T B and G = (d dy0)^T C (w(s) = wsuf, d(t) = exp(a(0..t)) = din, on the channels' side: floats,
   split into a tf32 part and its remainder, once a step for all of a warp's tiles; B and C exact in tf32, as they
   are: two products a step), by ssd_tc_mm, a warp a strip of 16 channels (warp & 3) and half the states (warp >> 2),
   each straight from its registers to the workspace ([p][n], row NP). sp false (ONE): the high parts alone */
template <int NP>
static __device__ __forceinline__ void ssd_ckb_loc_tc(bool sp, const float *xs, const float *dys, int XS, const float *Bs, const float *Cs, int BS,
                                                      const float *wsuf, const float *din, float *S, float *G) {
    constexpr int NT8 = NP / 16; /* tiles of 8 states in half a row */
    const int w = static_cast<int>(threadIdx.x >> 5), r0 = 16 * (w & 3), cn = (w >> 2) * (NP / 2);
    const auto out = [&](const float (&acc)[NT8][4], float *dst) {
        ssd_tc_pairs<NT8>(r0, cn, [&](int j, int h, int p, int n) {
            __stcg(reinterpret_cast<float2 *>(dst + p * NP + n), make_float2(acc[j][2 * h], acc[j][2 * h + 1]));
        });
    };
    float sa[NT8][4] = {}, ga[NT8][4] = {};
    ssd_tc_mm<NT8, true, false>(sa, [xs, wsuf, XS](int p, int s) { return wsuf[s] * xs[s * XS + p]; }, ssd_rowm(Bs, BS), r0, cn, 0, kCkQ, sp);
    out(sa, S);
    ssd_tc_mm<NT8, true, false>(ga, [dys, din, XS](int p, int t) { return din[t] * dys[t * XS + p]; }, ssd_rowm(Cs, BS), r0, cn, 0, kCkQ, sp);
    out(ga, G);
}
#endif

/* the sum over the 16 lanes of a row group (lo), on every one of them, in a fixed order */
static __device__ __forceinline__ double ssd_ckb_sum16(double v) {
#pragma unroll
    for (int o = 8; o >= 1; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* which chunk a block takes: (chain, chunk), and the chain's (batch row, head, tile) */
struct ssd_ckb_at {
    int64_t chain, c, b, h, tile, t0, p0;
    int tn;
    __device__ ssd_ckb_at(const ssd_params &P, int64_t blk) {
        chain = blk / P.ckb_nch; c = blk - chain * P.ckb_nch;
        tile = chain % P.ck_ntile; h = (chain / P.ck_ntile) % P.H; b = chain / (P.ck_ntile * P.H);
        t0 = c * kCkQ; p0 = tile * kCkPT;
        tn = static_cast<int>(P.L - t0 < kCkQ ? P.L - t0 : kCkQ);
    }
};

/* the chunk's own state and its own part of the entering state's gradient (DESIGN above) */
/* ONE (the kernels here and ssd_ckb_kernel): the float operands' high tf32 parts alone, one product a pair (ssd_ckb_tc's
   level 3, instantiated with SELSCAN__CUDA_TUNING only: below float32's precision; what the split costs, a
   measurement, never a result to trust); false everywhere else */
template <typename T, int NB, bool ONE = false> static __global__ void __launch_bounds__(kCkThreads, 2) ssd_ckb_loc_kernel(const ssd_params P) {
    extern __shared__ __align__(128) float4 ssd_ckl_sm4[];
    float *const sm = reinterpret_cast<float *>(ssd_ckl_sm4);
    constexpr int NP = 64 * NB;
    constexpr ssd_ckb_smem m = ssd_ckb_layout(NB, true);
    constexpr int XS = m.XS, BS = m.BS;
    const ssd_ckb_at k(P, blockIdx.x);
    const int tid = threadIdx.x, hi = tid >> 4, lo = tid & 15;
    if (ssd_ckb_stage<T, NB, false>(P, sm, m, sm + m.C, k.b, k.h, k.t0, k.p0, k.tn)) {
        if (tid == 0) *P.ckb_flag = 1; /* the walks take the call */
        return;
    }
    if (k.tile == 0 && tid == 0) P.ckb_dec[(k.b * P.H + k.h) * P.ckb_nch + k.c] = sm[m.misc];
    float *const xs = sm + m.x, *const dys = sm + m.dy, *const Bs = sm + m.B, *const Cs = sm + m.C;
    const int64_t o = (k.chain * P.ckb_nch + k.c) * (64 * NP);
#ifdef SELSCAN__CK_MMA
    if (sizeof(T) == 2 && P.ckb_tc >= 1) /* (steps past L: staged as 0, no term) */
        ssd_ckb_loc_tc<NP>(!ONE, xs, dys, XS, Bs, Cs, BS, sm + m.wsuf, sm + m.din, P.ckb_S + o, P.ckb_G + o);
    else
#endif
    {
        static_assert(m.x % 4 == 0 && m.dy % 4 == 0 && m.B % 4 == 0 && m.C % 4 == 0 && XS % 4 == 0 && BS % 4 == 0,
                      "rows of whole 16-byte units: the float4 reads below");
        for (int i = tid; i < kCkQ * NP; i += kCkThreads) { /* B's rows times w(s), C's times exp(a(0..t)) */
            const int s = i / NP, n = i - s * NP;
            Bs[s * BS + n] *= sm[m.wsuf + s];
            Cs[s * BS + n] *= sm[m.din + s];
        }
        __syncthreads();
        /* channel p = 4 hi + e, state n = 64 j + 4 lo + f */
        float Sl[4][4 * NB], Gl[4][4 * NB];
#pragma unroll
        for (int e = 0; e < 4; e++)
#pragma unroll
            for (int f = 0; f < 4 * NB; f++) Sl[e][f] = Gl[e][f] = 0.0f;
        for (int s = 0; s < k.tn; s++) {
            const float4 xv = *reinterpret_cast<const float4 *>(xs + s * XS + 4 * hi), dv = *reinterpret_cast<const float4 *>(dys + s * XS + 4 * hi);
            const float xa[4] = {xv.x, xv.y, xv.z, xv.w}, da[4] = {dv.x, dv.y, dv.z, dv.w};
#pragma unroll
            for (int j = 0; j < NB; j++) {
                const float4 bv = *reinterpret_cast<const float4 *>(Bs + s * BS + 64 * j + 4 * lo), cv = *reinterpret_cast<const float4 *>(Cs + s * BS + 64 * j + 4 * lo);
                const float ba[4] = {bv.x, bv.y, bv.z, bv.w}, ca[4] = {cv.x, cv.y, cv.z, cv.w};
#pragma unroll
                for (int e = 0; e < 4; e++)
#pragma unroll
                    for (int f = 0; f < 4; f++) {
                        Sl[e][4 * j + f] = fmaf(xa[e], ba[f], Sl[e][4 * j + f]);
                        Gl[e][4 * j + f] = fmaf(da[e], ca[f], Gl[e][4 * j + f]);
                    }
            }
        }
#pragma unroll
        for (int e = 0; e < 4; e++)
#pragma unroll
            for (int j = 0; j < NB; j++) {
                const int64_t i = o + (4 * hi + e) * NP + 64 * j + 4 * lo;
                __stcg(reinterpret_cast<float4 *>(P.ckb_S + i), make_float4(Sl[e][4 * j], Sl[e][4 * j + 1], Sl[e][4 * j + 2], Sl[e][4 * j + 3]));
                __stcg(reinterpret_cast<float4 *>(P.ckb_G + i), make_float4(Gl[e][4 * j], Gl[e][4 * j + 1], Gl[e][4 * j + 2], Gl[e][4 * j + 3]));
            }
    }
}

/* the states through the chunks, or (the second half of the grid) their gradients back (DESIGN
   above): a thread four states of a chain, NP the states a row (64 NB); each round's loads before its
   dependent updates */
static __global__ void __launch_bounds__(256) ssd_ckb_pass_kernel(const ssd_params P, int NP) {
    constexpr int R = 8; /* chunks a round */
    const int64_t per = 16 * NP, all = P.batch * P.H * P.ck_ntile * per; /* float4s a chunk, a pass */
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= 2 * all) return;
    const bool grad = i >= all;
    if (grad) i -= all;
    const int64_t chain = i / per, tile = chain % P.ck_ntile, h = (chain / P.ck_ntile) % P.H, b = chain / (P.ck_ntile * P.H);
    const int e = static_cast<int>(i - chain * per) * 4, pl = e / NP, n = e - pl * NP;
    const int64_t p = tile * kCkPT + pl, nch = P.ckb_nch;
    const ct &src = grad ? P.dfinal_state : P.initial_state;
    float v[4];
#pragma unroll
    for (int k = 0; k < 4; k++) v[k] = src.p && p < P.P && n + k < P.N ? ldf(src, ssd_at4(src, b, h, p, n + k)) : 0.0f;
    const float *dec = P.ckb_dec + (b * P.H + h) * nch;
    float4 *const X = reinterpret_cast<float4 *>((grad ? P.ckb_G : P.ckb_S) + chain * nch * 64 * NP + e);
    for (int64_t c0 = 0; c0 < nch; c0 += R) {
        float4 l[R];
        float d[R];
#pragma unroll
        for (int u = 0; u < R; u++) {
            const int64_t c = grad ? nch - 1 - (c0 + u) : c0 + u;
            if (c0 + u < nch) { l[u] = __ldcg(X + c * per); d[u] = dec[c]; }
        }
#pragma unroll
        for (int u = 0; u < R; u++) { /* Sin(c) over Sloc(c), or Gout(c) over Gloc(c) */
            if (c0 + u >= nch) break;
            const int64_t c = grad ? nch - 1 - (c0 + u) : c0 + u;
            __stcg(X + c * per, make_float4(v[0], v[1], v[2], v[3]));
            v[0] = fmaf(d[u], v[0], l[u].x); v[1] = fmaf(d[u], v[1], l[u].y); v[2] = fmaf(d[u], v[2], l[u].z); v[3] = fmaf(d[u], v[3], l[u].w);
        }
    }
    bool bad = false;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        bad = bad || !isfinite(v[k]);
        if (grad && P.dinitial_state.p && p < P.P && n + k < P.N) static_cast<float *>(P.dinitial_state.p)[ssd_at4(P.dinitial_state, b, h, p, n + k)] = v[k];
    }
    if (bad) *P.ckb_flag = 1;
}

/* The gradient kernel's pieces both its bodies run (the float32 units' and, for a 2-byte problem, the tensor
   cores'): the leaving state's gradient Go, <Go, Sin> into red[8] and Go in Sin's place (Ss) */
template <int NB> static __device__ __forceinline__ void ssd_ckb_go(const ssd_params &P, const ssd_ckb_at &k, float *sm) {
    constexpr int NP = 64 * NB, PER = 64 * NP / (4 * kCkThreads), BS = ssd_ckb_layout(NB, false).BS;
    const int tid = threadIdx.x;
    float *const Ss = sm + ssd_ckb_layout(NB, false).S;
    double *const red = reinterpret_cast<double *>(sm + ssd_ckb_layout(NB, false).dbl) + 7 * kCkQ;
    const float *src = P.ckb_G + (k.chain * P.ckb_nch + k.c) * (64 * NP);
    float4 gv[PER];
    double gs = 0.0;
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const int i = 4 * (tid + u * kCkThreads), pl = i / NP, n = i - pl * NP;
        gv[u] = __ldcg(reinterpret_cast<const float4 *>(src + i));
        const float4 s = *reinterpret_cast<const float4 *>(Ss + pl * BS + n);
        gs = fma(static_cast<double>(gv[u].x), static_cast<double>(s.x), gs);
        gs = fma(static_cast<double>(gv[u].y), static_cast<double>(s.y), gs);
        gs = fma(static_cast<double>(gv[u].z), static_cast<double>(s.z), gs);
        gs = fma(static_cast<double>(gv[u].w), static_cast<double>(s.w), gs);
    }
    gs = ssd_block_sum(gs, red); /* its barriers: every reader of Sin is done */
    if (tid == 0) red[8] = gs;
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const int i = 4 * (tid + u * kCkThreads), pl = i / NP, n = i - pl * NP;
        *reinterpret_cast<float4 *>(Ss + pl * BS + n) = gv[u];
    }
}
/* the per-step scalars (rho, tau, gpair, xdp, red[8] complete: after a barrier): d loss / d a(u) into wr, the explicit
   d loss / d dt(s) into wx (ssd_dt); dD's part */
template <int NB> static __device__ __forceinline__ void ssd_ckb_sums_out(const ssd_params &P, const ssd_ckb_at &k, const float *sm) {
    constexpr int Q = kCkQ;
    constexpr ssd_ckb_smem m = ssd_ckb_layout(NB, false);
    const int tid = threadIdx.x;
    const double *const dd = reinterpret_cast<const double *>(sm + m.dbl);
    const double *const xdp = dd + Q, *const gpair = dd + 4 * Q, *const rho = dd + 5 * Q, *const tau = dd + 6 * Q, *const red = dd + 7 * Q;
    const float *const sdt = sm + m.dt, *const xs = sm + m.x, *const dys = sm + m.dy;
    /* warps 0-1 the steps' sums, warps 2-3 dD's: in the tensor-core body no barrier follows, so a block ends with its
       slowest warp, and the two used to be warps 0-1's alone (SSD-CUDA-v28) */
    static_assert(kCkThreads >= 2 * Q && kCkPT <= Q, "the steps' sums and dD's on separate warps");
    if (P.wr && tid < k.tn) {
        const int u = tid;
        /* both sums over a fixed count, a term outside a sum skipped by a select (not added as 0: an infinite tau
           times 0 is NaN): the same additions in the same order as loops over t >= u and s < u, unrolled so that the
           loads run ahead and the two chains interleave */
        double sr = 0.0, sp = 0.0;
#pragma unroll 16
        for (int i = 0; i < Q; i++) {
            const int t = Q - 1 - i;
            const double r = sr + rho[t], f = fma(static_cast<double>(sdt[i]), tau[i], sp);
            sr = t >= u ? r : sr;
            sp = i < u ? f : sp;
        }
        const int64_t o = ((k.b * P.L + k.t0 + u) * P.H + k.h) * P.npsl + k.tile;
        P.wr[o] = gpair[u] + sr + sp + static_cast<double>(sm[m.misc]) * red[8];
        P.wx[o] = xdp[u] + tau[u];
    }
    const int c = tid - Q; /* dD's channel */
    if (P.wD && c >= 0 && c < kCkPT && k.p0 + c < P.P) {
        /* four interleaved partial sums over all Q steps (rows past tn are staged 0): a quarter of the dependent
           chain, the loads issued ahead of it */
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int s = 0; s < Q; s += 4)
#pragma unroll
            for (int e = 0; e < 4; e++) v[e] = fmaf(dys[(s + e) * m.XS + c], xs[(s + e) * m.XS + c], v[e]);
        P.wD[((k.b * P.ckb_nch + k.c) * P.H + k.h) * P.P + k.p0 + c] = (v[0] + v[1]) + (v[2] + v[3]);
    }
}
/* dx from W's place (complete: after a barrier) to the output, whole rows a warp's stores: by 8-element vectors where
   dx's rows allow (P.vdx: a thread two of a chunk's 512 vectors, each one address and one 16-byte store, where element
   by element took 16 of each), else an element a store */
template <typename T> static __device__ __forceinline__ void ssd_ckb_dx_out(const ssd_params &P, const ssd_ckb_at &k, const float *Ws, int XS) {
    if (P.vdx) { /* (a tile's first channel a multiple of 64; XS a multiple of 4, W's place 32-byte aligned: float4 reads) */
        constexpr int RV = kCkPT / 8;
        for (int i = threadIdx.x; i < kCkQ * RV; i += kCkThreads) {
            const int s = i / RV, pl = (i - s * RV) * 8;
            if (s >= k.tn || k.p0 + pl >= P.P) continue; /* (P a multiple of 8: a vector is inside or out) */
            const float4 a = *reinterpret_cast<const float4 *>(Ws + s * XS + pl), c = *reinterpret_cast<const float4 *>(Ws + s * XS + pl + 4);
            const float v[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
            st_vec<T, 8>(P.dx.p, ssd_at4(P.dx, k.b, k.t0 + s, k.h, k.p0 + pl), v);
        }
        return;
    }
    for (int i = threadIdx.x; i < kCkQ * kCkPT; i += kCkThreads) {
        const int s = i / kCkPT, pl = i - s * kCkPT;
        if (s < k.tn && k.p0 + pl < P.P) st<T>(P.dx.p, ssd_at4(P.dx, k.b, k.t0 + s, k.h, k.p0 + pl), Ws[s * XS + pl]);
    }
}
/* dz = dy y sigmoid(z) (1 + z (1 - sigmoid(z))) at (chunk step s, tile column pl), y = y0 + D x */
template <typename T> static __device__ __forceinline__ void ssd_ckb_dz_out(const ssd_params &P, const ssd_ckb_at &k, int s, int pl, float y0, float xv) {
    const int64_t t = k.t0 + s, p = k.p0 + pl;
    if (s >= k.tn || p >= P.P) return;
    const float dyv = ld<T>(P.dy.p, ssd_at4(P.dy, k.b, t, k.h, p)), zv = ld<T>(P.z.p, ssd_at4(P.z, k.b, t, k.h, p));
    const float sg = ssd_sigmoid(zv), yv = ssd_addD(P, ssd_Dv(P, k.h, p), xv, y0);
    st<T>(P.dz.p, ssd_at4(P.dz, k.b, t, k.h, p), dyv * yv * sg * (1.0f + zv * (1.0f - sg)));
}

#ifdef SELSCAN__CK_MMA
/* rows r0 + g and r0 + g + 8 of sum_c U(r, c) acc(r, c) over a warp's columns (acc as ssd_tc_mm's, columns c0 + 8 j + 2 q
   and + 1; U read by fu), in double, summed over the row's four lanes in a fixed order, into pr[r] by lane q 0 */
template <int NT8, typename FU>
static __device__ __forceinline__ void ssd_tc_rowdot(const float (&acc)[NT8][4], const FU &fu, int r0, int c0, double *pr) {
    const int lane = static_cast<int>(threadIdx.x & 31), g = lane >> 2, q = lane & 3;
    double ra = 0.0, rb = 0.0;
#pragma unroll
    for (int j = 0; j < NT8; j++) {
        const int c = c0 + 8 * j + 2 * q;
        ra = fma(static_cast<double>(fu(r0 + g, c)), static_cast<double>(acc[j][0]), ra);
        ra = fma(static_cast<double>(fu(r0 + g, c + 1)), static_cast<double>(acc[j][1]), ra);
        rb = fma(static_cast<double>(fu(r0 + g + 8, c)), static_cast<double>(acc[j][2]), rb);
        rb = fma(static_cast<double>(fu(r0 + g + 8, c + 1)), static_cast<double>(acc[j][3]), rb);
    }
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
        ra += __shfl_xor_sync(0xffffffffu, ra, o);
        rb += __shfl_xor_sync(0xffffffffu, rb, o);
    }
    if (q == 0) {
        pr[r0 + g] = ra;
        pr[r0 + g + 8] = rb;
    }
}
/* The gradients of a chunk of a 2-byte problem on tensor cores, from the entering state staged on: the float32 units'
   body's products and sums (DESIGN above), each product by ssd_tc_mm, a warp a strip of 16 rows (warp % 4) and half the
   columns (warp / 4) of every result; x, B, C and an ungated dy exact in tf32 (as they are), every other operand split;
   the float weights exp(a(0..t)) and w(s) applied to the results' rows */
template <typename T, int NB, bool ONE> static __device__ __forceinline__ void ssd_ckb_grads_tc(const ssd_params &P, const ssd_ckb_at &k, float *sm) {
    constexpr int Q = kCkQ, NP = 64 * NB, NT8 = NP / 16; /* tiles of 8 states in half a row */
    static_assert(kCkThreads == 256 && Q == 64 && kCkPT == 64 && NP % 16 == 0,
                  "8 warps: 4 strips of 16 rows x 2 halves of the columns, 32 channels (4 tiles of 8) a half");
    constexpr ssd_ckb_smem m = ssd_ckb_layout(NB, false);
    constexpr int XS = m.XS, BS = m.BS;
    const int tid = threadIdx.x, w = tid >> 5;
    const int r0 = 16 * (w & 3), half = w >> 2, cn = half * (NP / 2), cp = half * (kCkPT / 2); /* strip; first state, channel */
    const float *const xs = sm + m.x, *const dys = sm + m.dy, *const Vs = sm + m.V, *const Bs = sm + m.B, *const Cs = sm + m.C;
    float *const Ws = sm + m.W;
    const float *const Ss = sm + m.S; /* Sin, then Go (ssd_ckb_go) */
    const float *const din = sm + m.din, *const swsuf = sm + m.wsuf, *const sex = sm + m.ex;
    double *const dd = reinterpret_cast<double *>(sm + m.dbl);
    double *const rho = dd + 5 * Q, *const tau = dd + 6 * Q, *const pr = dd + 7 * Q + 16; /* pr: [rho's, tau's][half][row] */
    constexpr bool sp = !ONE;
    /* dy0: dy silu(z) under a gate, a float (split); else dy, exact in tf32 (as it is: two products a step, not three) */
    const bool gated = P.z.p != NULL;
    float dC[NT8][4], dB[NT8][4], y0[4][4], dX[4][4], xg[4][4];
#pragma unroll
    for (int j = 0; j < NT8; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) dC[j][i] = dB[j][i] = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) y0[j][i] = dX[j][i] = xg[j][i] = 0.0f;
    /* dC = exp(a(0..t)) dy0 Sin; rho(t) = dy0(t) . exp(a(0..t)) C(t) Sin^T = C(t) . dC(t) (the same sum grouped by
       states: C Sin^T itself only for dz) */
    if (gated) ssd_tc_mm<NT8, true, true>(dC, ssd_rowm(dys, XS), ssd_rowm(Ss, BS), r0, cn, 0, kCkPT, sp);
    else ssd_tc_mm<NT8, false, true>(dC, ssd_rowm(dys, XS), ssd_rowm(Ss, BS), r0, cn, 0, kCkPT, sp);
    /* a product weighed after it (dy0 Sin, C Sin^T, B Go^T, x^T Go) whose sum leaves float's range (operands finite:
       the stage and the pass kernel checked them) raises the flag: the walks take the call (SSD-CUDA-v29) */
    bool wide = ssd_acc_overflow(dC);
    ssd_tc_cells<NT8>(r0, cn, [&](int j, int i, int t, int) { dC[j][i] *= din[t]; });
    ssd_tc_rowdot(dC, ssd_rowm(Cs, BS), r0, cn, pr + half * Q);
    /* y0 = exp(a(0..t)) C Sin^T + W x (dz); dx = W^T dy0; dC += V B (W, V: 0 above the diagonal) */
    if (P.dz.p) {
        ssd_tc_mm<4, false, true>(y0, ssd_rowm(Cs, BS), ssd_colm(Ss, BS), r0, cp, 0, NP, sp);
        wide = wide || ssd_acc_overflow(y0);
        ssd_tc_cells<4>(r0, cp, [&](int j, int i, int t, int) { y0[j][i] *= din[t]; });
        ssd_tc_mm<4, true, false>(y0, ssd_rowm(Ws, XS), ssd_rowm(xs, XS), r0, cp, 0, Q, sp);
    }
    if (gated) ssd_tc_mm<4, true, true>(dX, ssd_colm(Ws, XS), ssd_rowm(dys, XS), r0, cp, 0, Q, sp);
    else ssd_tc_mm<4, true, false>(dX, ssd_colm(Ws, XS), ssd_rowm(dys, XS), r0, cp, 0, Q, sp);
    ssd_tc_mm<NT8, true, false>(dC, ssd_rowm(Vs, XS), ssd_rowm(Bs, BS), r0, cn, 0, Q, sp);
    ssd_ckb_go<NB>(P, k, sm); /* its barriers: W's readers are done */
    __syncthreads();
    /* xg = B Go^T, tau(s) = ex(s) x(s) . xg(s); dx = W^T dy0 + w(s) xg + D dy0 into W's place */
    ssd_tc_mm<4, false, true>(xg, ssd_rowm(Bs, BS), ssd_colm(Ss, BS), r0, cp, 0, NP, sp);
    wide = wide || ssd_acc_overflow(xg);
    ssd_tc_rowdot(xg, ssd_rowm(xs, XS), r0, cp, pr + (2 + half) * Q);
    if (P.dx.p)
        ssd_tc_cells<4>(r0, cp, [&](int j, int i, int s, int pl) {
            Ws[s * XS + pl] = ssd_addD(P, ssd_Dv(P, k.h, k.p0 + pl), dys[s * XS + pl], fmaf(swsuf[s], xg[j][i], dX[j][i]));
        });
    /* dB = w(s) x^T Go + V^T C: the weight on the result's rows, x as it is (two products a step, not three) */
    ssd_tc_mm<NT8, false, true>(dB, ssd_rowm(xs, XS), ssd_rowm(Ss, BS), r0, cn, 0, kCkPT, sp);
    if (wide || ssd_acc_overflow(dB)) *P.ckb_flag = 1; /* (the blocks' outputs so far the walks rewrite) */
    ssd_tc_cells<NT8>(r0, cn, [&](int j, int i, int s, int) { dB[j][i] *= swsuf[s]; });
    ssd_tc_mm<NT8, true, false>(dB, ssd_colm(Vs, XS), ssd_rowm(Cs, BS), r0, cn, 0, Q, sp);
    __syncthreads(); /* the row partials, dx */
    if (tid < Q) {
        rho[tid] = pr[tid] + pr[Q + tid];
        tau[tid] = (pr[2 * Q + tid] + pr[3 * Q + tid]) * static_cast<double>(sex[tid]);
    }
    __syncthreads(); /* rho, tau, gpair, red[8] */
    ssd_ckb_sums_out<NB>(P, k, sm);
    if (P.dx.p) ssd_ckb_dx_out<T>(P, k, Ws, XS);
    if (P.dz.p) ssd_tc_cells<4>(r0, cp, [&](int j, int i, int s, int pl) { ssd_ckb_dz_out<T>(P, k, s, pl, y0[j][i], xs[s * XS + pl]); });
    /* the dB / dC partials, a pair of states a store where N is even (then every pair is inside and 8-byte aligned:
       the workspace's buffers are 256-byte aligned, n even) */
    const bool v2 = P.N % 2 == 0;
    /* a thread's two rows' offsets once, not a store's four 64-bit products each (their chain held 4 % of the kernel's
       samples: SSD-CUDA-v26) */
    int64_t rowo[2];
    ssd_tc_pairs<1>(r0, cn, [&](int, int h, int s, int) { rowo[h] = (((k.b * P.L + k.t0 + s) * P.H + k.h) * P.npsl + k.tile) * P.N; });
    ssd_tc_pairs<NT8>(r0, cn, [&](int j, int h, int s, int n) {
        if (s >= k.tn || n >= P.N) return;
        const int64_t o = rowo[h] + n;
        if (v2) {
            if (P.wB) *reinterpret_cast<float2 *>(P.wB + o) = make_float2(dB[j][2 * h], dB[j][2 * h + 1]);
            if (P.wC) *reinterpret_cast<float2 *>(P.wC + o) = make_float2(dC[j][2 * h], dC[j][2 * h + 1]);
            return;
        }
        for (int e = 0; e < 2 && n + e < P.N; e++) {
            if (P.wB) P.wB[o + e] = dB[j][2 * h + e];
            if (P.wC) P.wC[o + e] = dC[j][2 * h + e];
        }
    });
}
#endif

/* The gradients of a chunk on the float32 units, from the entering state staged on (DESIGN above); a thread rows hi +
   16 e and columns lo + 16 f (or ssd_ckb_col's) of every result */
template <typename T, int NB> static __device__ __forceinline__ void ssd_ckb_grads_f32(const ssd_params &P, const ssd_ckb_at &k, float *sm) {
    constexpr int Q = kCkQ, NP = 64 * NB, NF = 4 * NB;
    constexpr ssd_ckb_smem m = ssd_ckb_layout(NB, false);
    constexpr int XS = m.XS, BS = m.BS;
    const int tid = threadIdx.x, hi = tid >> 4, lo = tid & 15;
    float *const xs = sm + m.x, *const dys = sm + m.dy, *const Ws = sm + m.W, *const Vs = sm + m.V;
    float *const Bs = sm + m.B, *const Cs = sm + m.C, *const Ss = sm + m.S;
    const float *const din = sm + m.din, *const swsuf = sm + m.wsuf, *const sex = sm + m.ex;
    double *const dd = reinterpret_cast<double *>(sm + m.dbl);
    double *const rho = dd + 5 * Q, *const tau = dd + 6 * Q;
    /* dC = exp(a(0..t)) dy0 Sin; Ys = exp(a(0..t)) C Sin^T, rho(t) = dy0(t) . Ys(t); y0 = Ys + W x (dz);
       dx = W^T dy0; dC += V B; dB = V^T C */
    float dC[4][NF], dB[4][NF], dX[4][4], y0[4][4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
#pragma unroll
        for (int f = 0; f < NF; f++) dC[e][f] = dB[e][f] = 0.0f;
#pragma unroll
        for (int f = 0; f < 4; f++) dX[e][f] = y0[e][f] = 0.0f;
    }
    ssd_ckb_mm<NF, false, 2, false>(dC, dys, XS, Ss, BS, 0, kCkPT, hi, lo, din);
    ssd_ckb_mm<4, false, 0, false>(y0, Cs, BS, Ss, BS, 0, NP, hi, lo, din);
#pragma unroll
    for (int e = 0; e < 4; e++) {
        double r = 0.0;
#pragma unroll
        for (int f = 0; f < 4; f++) r = fma(static_cast<double>(dys[(hi + 16 * e) * XS + lo + 16 * f]), static_cast<double>(y0[e][f]), r);
        r = ssd_ckb_sum16(r);
        if (lo == 0) rho[hi + 16 * e] = r;
    }
    if (P.dz.p) ssd_ckb_mm<4, false, 1, false>(y0, Ws, XS, xs, XS, 0, Q, hi, lo, NULL);
    ssd_ckb_mm<4, true, 2, false>(dX, Ws, XS, dys, XS, 0, Q, hi, lo, NULL);
    ssd_ckb_mm<NF, false, 2, false>(dC, Vs, XS, Bs, BS, 0, Q, hi, lo, NULL);
    ssd_ckb_mm<NF, true, 2, false>(dB, Vs, XS, Cs, BS, 0, Q, hi, lo, NULL);
    ssd_ckb_go<NB>(P, k, sm); /* the leaving state's gradient Go: <Go, Sin>, then Go in Sin's place */
    __syncthreads();
    /* w(s) B Go^T (dx's, through W's place), tau(s) = ex(s) x(s) . (B Go^T)(s); dB += w(s) x^T Go */
    {
        float xg[4][4];
#pragma unroll
        for (int e = 0; e < 4; e++)
#pragma unroll
            for (int f = 0; f < 4; f++) xg[e][f] = 0.0f;
        ssd_ckb_mm<4, false, 0, false>(xg, Bs, BS, Ss, BS, 0, NP, hi, lo, NULL);
        if (ssd_acc_overflow(xg)) *P.ckb_flag = 1; /* weighed by w(s) after it: a sum above float's range (operands
                                                        finite) sends the call to the walks (SSD-CUDA-v29) */
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int s = hi + 16 * e;
            double r = 0.0;
#pragma unroll
            for (int f = 0; f < 4; f++) {
                r = fma(static_cast<double>(xs[s * XS + lo + 16 * f]), static_cast<double>(xg[e][f]), r);
                Ws[s * XS + lo + 16 * f] = swsuf[s] * xg[e][f]; /* dx's part in dX's columns (W's readers are done) */
            }
            r = ssd_ckb_sum16(r);
            if (lo == 0) tau[s] = r * static_cast<double>(sex[s]);
        }
    }
    ssd_ckb_mm<NF, false, 2, false>(dB, xs, XS, Ss, BS, 0, kCkPT, hi, lo, swsuf);
    __syncthreads(); /* rho, tau, gpair, red[8] */
    ssd_ckb_sums_out<NB>(P, k, sm);
    /* dx (columns 4 lo + f: through W's place, so that a warp's stores are whole rows), dz (columns lo +
       16 f), the dB / dC partials (float4 where the rows allow) */
    if (P.dx.p) {
#pragma unroll
        for (int e = 0; e < 4; e++)
#pragma unroll
            for (int f = 0; f < 4; f++) {
                const int s = hi + 16 * e, pl = ssd_ckb_col<2>(f, lo);
                Ws[s * XS + pl] = ssd_addD(P, ssd_Dv(P, k.h, k.p0 + pl), dys[s * XS + pl], dX[e][f] + Ws[s * XS + pl]);
            }
        __syncthreads();
        ssd_ckb_dx_out<T>(P, k, Ws, XS);
    }
    if (P.dz.p)
#pragma unroll
        for (int e = 0; e < 4; e++)
#pragma unroll
            for (int f = 0; f < 4; f++) ssd_ckb_dz_out<T>(P, k, hi + 16 * e, lo + 16 * f, y0[e][f], xs[(hi + 16 * e) * XS + lo + 16 * f]);
    const bool v4 = P.N % 4 == 0;
#pragma unroll
    for (int e = 0; e < 4; e++)
#pragma unroll
        for (int j = 0; j < NB; j++) {
            const int s = hi + 16 * e, n = 64 * j + 4 * lo;
            if (s >= k.tn || n >= P.N) continue;
            const int64_t o = (((k.b * P.L + k.t0 + s) * P.H + k.h) * P.npsl + k.tile) * P.N + n;
            if (v4) {
                if (P.wB) *reinterpret_cast<float4 *>(P.wB + o) = make_float4(dB[e][4 * j], dB[e][4 * j + 1], dB[e][4 * j + 2], dB[e][4 * j + 3]);
                if (P.wC) *reinterpret_cast<float4 *>(P.wC + o) = make_float4(dC[e][4 * j], dC[e][4 * j + 1], dC[e][4 * j + 2], dC[e][4 * j + 3]);
            } else
#pragma unroll
                for (int ff = 0; ff < 4; ff++) {
                    if (n + ff >= P.N) break;
                    if (P.wB) P.wB[o + ff] = dB[e][4 * j + ff];
                    if (P.wC) P.wC[o + ff] = dC[e][4 * j + ff];
                }
        }
}

/* the gradients of a chunk (DESIGN above); returns at once where the flag is up */
template <typename T, int NB, bool ONE = false> static __global__ void __launch_bounds__(kCkThreads, 1) ssd_ckb_kernel(const ssd_params P) {
    extern __shared__ __align__(128) float4 ssd_ckg_sm4[];
    if (*static_cast<volatile const int *>(P.ckb_flag)) return;
    float *const sm = reinterpret_cast<float *>(ssd_ckg_sm4);
    constexpr int Q = kCkQ, NP = 64 * NB;
    constexpr ssd_ckb_smem m = ssd_ckb_layout(NB, false);
    constexpr int XS = m.XS, BS = m.BS, PS = m.PS;
    static_assert(m.x % 8 == 0 && m.dy % 8 == 0 && m.W % 8 == 0 && m.V % 8 == 0 && m.B % 8 == 0 && m.C % 8 == 0 && XS % 4 == 0 && BS % 4 == 0,
                  "the tensor cores' tiles (ssd_ckb_pairs_tc) start 32-byte aligned, rows whole 16-byte units");
    const ssd_ckb_at k(P, blockIdx.x);
    const int tid = threadIdx.x, hi = tid >> 4, lo = tid & 15;
    /* Go (the pass kernel's, 64 NP floats a block, a workspace beyond L2) is read after the products: asked into L2
       now, a 128-byte line a thread, so that ssd_ckb_go's loads meet L2's latency, not DRAM's (SSD-CUDA-v25) */
    if (tid < 2 * NP) asm volatile("prefetch.global.L2 [%0];" ::"l"(__cvta_generic_to_global(P.ckb_G + (k.chain * P.ckb_nch + k.c) * (64 * NP) + 32 * tid)));
    float *const xs = sm + m.x, *const dys = sm + m.dy, *const Ws = sm + m.W, *const Vs = sm + m.V;
    float *const Bs = sm + m.B, *const Cs = sm + m.C, *const Ss = sm + m.S;
    const float *const sdt = sm + m.dt;
    double *const P2 = reinterpret_cast<double *>(Ss);
    double *const dd = reinterpret_cast<double *>(sm + m.dbl);
    double *const csd = dd, *const xdp = dd + Q, *const colM = dd + 2 * Q, *const rowM = dd + 3 * Q, *const gpair = dd + 4 * Q;
    ssd_ckb_stage<T, NB, true>(P, sm, m, Vs, k.b, k.h, k.t0, k.p0, k.tn); /* (the local-state kernel saw the same values) */

    /* C B^T and dy0 x^T (t = hi + 16 e, s = lo + 16 f): on tensor cores for a 2-byte problem
       (ssd_ckb_pairs_tc: float32 sums; a sum above float's range sends the call to the walks), else in
       double; then W, V and the pair matrix's products */
    bool wide = false;
    {
        double cb[4][4], dx[4][4];
#ifdef SELSCAN__CK_MMA
        if (sizeof(T) == 2 && P.ckb_tc >= 1) {
            ssd_ckb_pairs_tc<NP>(P.z.p != NULL, !ONE, Cs, Bs, BS, dys, xs, XS, Ws, Vs);
            __syncthreads();
#pragma unroll
            for (int e = 0; e < 4; e++)
#pragma unroll
                for (int f = 0; f < 4; f++) { /* each thread its own cells, rewritten below */
                    const int t = hi + 16 * e, s = lo + 16 * f;
                    const float c = s <= t ? Ws[t * XS + s] : 0.0f, d = s <= t ? Vs[t * XS + s] : 0.0f;
                    wide = wide || !isfinite(c) || !isfinite(d);
                    cb[e][f] = c;
                    dx[e][f] = d;
                }
        } else
#endif
        {
#pragma unroll
            for (int e = 0; e < 4; e++)
#pragma unroll
                for (int f = 0; f < 4; f++) cb[e][f] = dx[e][f] = 0.0;
            ssd_ckb_mm<4, false, 0, true>(cb, Cs, BS, Bs, BS, 0, NP, hi, lo, NULL);
            ssd_ckb_mm<4, false, 0, true>(dx, dys, XS, xs, XS, 0, kCkPT, hi, lo, NULL);
        }
#pragma unroll
        for (int e = 0; e < 4; e++)
#pragma unroll
            for (int f = 0; f < 4; f++) {
                const int t = hi + 16 * e, s = lo + 16 * f;
                float w = 0.0f, v = 0.0f;
                double p2 = 0.0;
                if (s <= t) {
                    const float E = expf(static_cast<float>(csd[t] - csd[s]));
                    /* scaled in double, then rounded: a product above float's range times a small
                       weight stays finite, as in the walks' double arithmetic */
                    w = static_cast<float>(cb[e][f] * static_cast<double>(E * sdt[s]));
                    v = static_cast<float>(dx[e][f] * static_cast<double>(E * sdt[s]));
                    p2 = cb[e][f] * static_cast<double>(E) * dx[e][f];
                }
                Ws[t * XS + s] = w;
                Vs[t * XS + s] = v;
                P2[t * PS + s] = p2;
            }
    }
    if (__syncthreads_or(wide)) { /* (inputs finite: the stage checked them) */
        if (tid == 0) *P.ckb_flag = 1; /* the walks take the call; they rewrite whatever this kernel's blocks wrote */
        return;
    }
    /* the entering state's loads, issued here so that their latency passes under the pair sums below; stored in
       P2's place after them (a thread's float4s as ssd_ckb_go's) */
    constexpr int PER = 64 * NP / (4 * kCkThreads);
    float4 sin4[PER];
    {
        const float *const src = P.ckb_S + (k.chain * P.ckb_nch + k.c) * (64 * NP);
#pragma unroll
        for (int u = 0; u < PER; u++) sin4[u] = __ldcg(reinterpret_cast<const float4 *>(src + 4 * (tid + u * kCkThreads)));
    }
    /* the pair matrix's sums: xdp(s) = sum_{t >= s} P2(t,s); colM(k) = dt(k) sum_{t > k} P2(t,k); rowM(k) =
       sum_{s < k} P2(k,s) dt(s); sum_{t >= u > s} M(t,s) = gpair(u) = sum_{k < u} colM(k) - rowM(k). Two threads a
       sum (threads below 2 Q the columns, the rest the rows), each two interleaved chains, joined by a shuffle; gpair
       by one warp's scan: chains of 16 terms where a thread's took 63, and 64 for the prefix (SSD-CUDA-v27) */
    static_assert(kCkThreads == 4 * Q && Q == 64, "two threads a column and a row of the pair matrix; gpair two a lane");
    {
        const int kk = (tid >> 1) & (Q - 1), h = tid & 1;
        double v0 = 0.0, v1 = 0.0;
        if (tid < 2 * Q) {
#pragma unroll 4
            for (int t = kk + 1 + h; t < Q; t += 4) {
                v0 += P2[t * PS + kk];
                if (t + 2 < Q) v1 += P2[(t + 2) * PS + kk];
            }
        } else {
#pragma unroll 4
            for (int s = h; s < kk; s += 4) {
                v0 = fma(P2[kk * PS + s], static_cast<double>(sdt[s]), v0);
                if (s + 2 < kk) v1 = fma(P2[kk * PS + s + 2], static_cast<double>(sdt[s + 2]), v1);
            }
        }
        double v = v0 + v1;
        v += __shfl_xor_sync(0xffffffffu, v, 1);
        if (h == 0 && tid < 2 * Q) {
            colM[kk] = v * static_cast<double>(sdt[kk]);
            xdp[kk] = P2[kk * PS + kk] + v;
        } else if (h == 0)
            rowM[kk] = v;
    }
    __syncthreads(); /* P2's readers are done: the entering state takes its place */
    if (tid < 32) {
        const double a = colM[2 * tid] - rowM[2 * tid], b = a + (colM[2 * tid + 1] - rowM[2 * tid + 1]);
        double inc = b; /* sum over lanes <= this one's */
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const double y = __shfl_up_sync(0xffffffffu, inc, o);
            if (tid >= o) inc += y;
        }
        double ex = __shfl_up_sync(0xffffffffu, inc, 1);
        if (tid == 0) ex = 0.0;
        gpair[2 * tid] = ex;
        gpair[2 * tid + 1] = ex + a;
    }
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const int i = 4 * (tid + u * kCkThreads), pl = i / NP, n = i - pl * NP;
        *reinterpret_cast<float4 *>(Ss + pl * BS + n) = sin4[u];
    }
    __syncthreads();
#ifdef SELSCAN__CK_MMA
    if (sizeof(T) == 2 && P.ckb_tc >= 2) ssd_ckb_grads_tc<T, NB, ONE>(P, k, sm);
    else
#endif
        ssd_ckb_grads_f32<T, NB>(P, k, sm);
}

/* ---- the SSD's host side: plan, workspace, launches ---- */
struct ssd_plan {
    int NPT, PB, TT, nth, smem, cap; /* cap: the shared memory a block may take (ssd_smem_cap) */
    int64_t npsl, nwalk;
};
static int ssd_smem_cap_test = 0; /* tests: a smaller device's opt-in limit, emulated (0: the device's own) */
/* the device's opt-in shared memory a block (the emulated limit where a test sets one; <= 0: not read) */
static int ssd_smem_optin() {
    static volatile int known[64];
    int v = current_device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin, known);
    if (v > 0 && ssd_smem_cap_test > 0 && ssd_smem_cap_test < v) v = ssd_smem_cap_test;
    return v;
}
/* The dynamic shared memory a block of the current device may opt in to, less the kernels' static
   words, at most 100 KiB (sm_75: 64 KiB, sm_86 / sm_89: 99 KiB, sm_80 / sm_90: more); 100 KiB when it
   cannot be read (the launch then reports the device's error) */
static int ssd_smem_cap() {
    constexpr int kMax = 100 * 1024;
    int v = ssd_smem_optin();
    if (v <= 0) return kMax;
    v -= 64;
    return v < kMax ? v : kMax;
}

/* States a thread from N (N <= 512), channels a block (a power of two of channel groups, up to
   8 in the forward, 16 in the backward: one slice a head where headdim allows), the tile from
   cap, the shared-memory budget (ssd_smem_cap; the workspace's size does not depend on it) */
static bool ssd_make_plan(const selscan__sprob &q, bool bwd, ssd_plan &pl, int cap) {
    pl.NPT = q.N <= 16 ? 1 : q.N <= 32 ? 2 : q.N <= 64 ? 4 : q.N <= 128 ? 8 : q.N <= 256 ? 16 : 32;
    const int PPT = ssd_ppt(pl.NPT), maxg = bwd ? 16 : 8;
    int groups = 2;
    while (groups < maxg && static_cast<int64_t>(groups) * PPT < q.P) groups *= 2;
    pl.PB = groups * PPT;
    pl.nth = 16 * groups;
    pl.npsl = cdiv(q.P, pl.PB);
    pl.cap = cap;
    for (pl.TT = 32;; pl.TT /= 2) {
        pl.smem = 4 * ssd_layout(pl.TT, 16 * pl.NPT, pl.PB, pl.nth / 32, bwd).total;
        if (pl.smem <= cap || pl.TT == 4) break;
    }
    sizecalc c;
    pl.nwalk = c.mul(q.batch, q.H, pl.npsl);
    return c.ok;
}

template <typename F> static void ssd_with_npt(int npt, F &&f) {
    switch (npt) {
    case 1: f(std::integral_constant<int, 1>()); break;
    case 2: f(std::integral_constant<int, 2>()); break;
    case 4: f(std::integral_constant<int, 4>()); break;
    case 8: f(std::integral_constant<int, 8>()); break;
    case 16: f(std::integral_constant<int, 16>()); break;
    default: f(std::integral_constant<int, 32>()); break;
    }
}
/* The walks' kernels by NPT and PADS (ssd_walk_fwd): whether the plan has pad states (N < 16 NPT) or pad channels
   (a last slice past P) */
template <typename F> static void ssd_with_walk(const selscan__sprob &q, const ssd_plan &pl, F &&f) {
    const bool pads = q.N < 16 * pl.NPT || pl.npsl * pl.PB > q.P;
    ssd_with_npt(pl.NPT, [&](auto npt) {
        if (pads) f(npt, std::true_type());
        else f(npt, std::false_type());
    });
}

/* The chunked forward's plan (>>ssd-chunk), from the shapes alone: no packed sequences, 32 < dstate
   <= 128, a non-empty problem, a grid and flags in range; its workspace: the rings, then the ticket
   and the flags (zeroed on the stream before the launch) */
struct ssd_ck_plan {
    int NB, smem;
    int64_t ntile, nch, nchain, grid, ring, total;
};
static constexpr int kCkFwdFlagAt = 8; /* the hand-off flag's bytes after the rings: after the ticket (8 bytes), before
                                          the chains' flags (from 64) */
/* Which form a forward takes (>>ssd-chunk): -1 (the default) the chunks for a 2-byte problem, the walk
   for float32 (bench/NOTES.md SSD-CUDA-v17); for the tests and the benchmark: 0 the walk, 1 the chunks
   (tensor cores where a chunk's values are finite), 2 the chunks on the float32 units alone, 3 (with
   SELSCAN__CUDA_TUNING) the chunks with one-pass tf32 products (below float32's precision: a
   measurement, never a result to trust). Where the chunks' shapes do not hold: the walk. */
static int ssd_ck_mode = -1;
#ifdef SELSCAN__CUDA_TUNING /* the benchmark's: 0 leaves the hand-off walk's launch out (its cost measured; a forward whose
                               C B^T overflowed then keeps the chunks' inf), compiled there only */
static int ssd_ck_handoff = 1;
#endif
static bool ssd_ck_chosen(const selscan__sprob &q) { return ssd_ck_mode < 0 ? q.dt != SELSCAN_F32 : ssd_ck_mode != 0; }
static bool ssd_ck_shape(const selscan__sprob &q, ssd_ck_plan &k) {
    if (q.cu || q.seq_idx.data || q.N <= 32 || q.N > 128 || q.batch == 0 || q.L == 0 || q.H == 0 || q.P == 0) return false;
    k.NB = q.N <= 64 ? 1 : 2;
    k.smem = 4 * ssd_ck_layout(k.NB).total;
    sizecalc c;
    k.ntile = cdiv(q.P, kCkPT);
    k.nch = cdiv(q.L, kCkQ);
    k.nchain = c.mul(q.batch, q.H, k.ntile);
    k.grid = c.mul(k.nchain, k.nch);
    k.ring = c.al(c.mul(k.nchain, 2 * kCkPT * 64 * k.NB, 4));
    k.total = c.add(k.ring, c.al(c.add(64, c.mul(k.nchain, 4))));
    return c.ok && k.grid <= kMaxGrid && k.nch < 0x7fffffff;
}
/* Whether a backward may run in chunks (>>ssd-chunk-bwd), from the shapes alone: ssd_ckb_mode (1, the
   default: where they hold; 0: the walks alone, for the tests), >>ssd-chunk's shapes, the walks' channel
   slices the chunks' tiles (the partials' layout the reductions read); ssd_ckb_fits: the device's shared
   memory */
static int ssd_ckb_mode = 1;
/* How much of a 2-byte problem's chunked backward runs on tensor cores (sm_80+; float32 problems never):
   2 (the default) every product (bench/NOTES.md SSD-CUDA-v15), 1 the pair products and the local state's
   (SSD-CUDA-v14), 0 none; the tests run each level, bench_ssd_forms times each; 3 (SELSCAN__CUDA_TUNING only):
   2 with the high parts alone (ONE: ssd_ckb_loc_kernel) */
static int ssd_ckb_tc = 2;
#define SELSCAN__CKB_TC_LEVELS 1 /* (bench_ssd_forms: this header has the levels) */
#define SELSCAN__CKB_TC_ONE 1 /* (bench_ssd_forms: and the one-pass level 3) */
static bool ssd_ckb_shape(const selscan__sprob &q, const ssd_plan &pl, ssd_ck_plan &k) {
    /* (the pass kernel's grid: 8 NB blocks a chain) */
    return ssd_ckb_mode != 0 && ssd_ck_shape(q, k) && pl.npsl == k.ntile && k.nchain <= kMaxGrid / (8 * k.NB);
}
static bool ssd_ckb_fits(const ssd_ck_plan &k) { return 4 * ssd_ckb_layout(k.NB, false).total + 64 <= ssd_smem_optin(); }
/* The backward's workspace: byte offsets of the partials (-1: not needed) and the total */
struct ssd_ws {
    int64_t B, C, r, x, D, A, b, h, g, e, ckS, ckG, ckdec, ckflag, total;
};
/* ck: the chunks' plan where the backward may take them (>>ssd-chunk-bwd; NULL: the walks alone): their
   states and gradients, decays and flag, and dD's partials a chunk */
static bool ssd_ws_layout(const selscan__sprob &q, const selscan__sgrd &r, const ssd_plan &pl, ssd_ws &w, const ssd_ck_plan *ck = NULL) {
    sizecalc c;
    const int64_t tok = c.mul(q.batch, q.L, q.H, pl.npsl);
    const bool need_dt = r.ddelta.data || r.dA.data || r.ddt_bias.data;
    int64_t off = 0;
    auto take = [&](bool want, int64_t count, int64_t size = 4) -> int64_t { /* count values of size bytes */
        if (!want) return -1;
        const int64_t o = off;
        off = c.add(off, c.al(c.mul(count, size)));
        return o;
    };
    w.B = take(r.dB.data != NULL, c.mul(tok, q.N));
    w.C = take(r.dC.data != NULL, c.mul(tok, q.N));
    w.r = take(need_dt, tok, 8);
    w.x = take(need_dt, tok, 8);
    w.D = take(r.dD.data != NULL, c.mul(q.batch, ck ? ck->nch : 1, q.H, q.P));
    w.A = take(r.dA.data != NULL, c.mul(q.batch, q.H));
    w.b = take(r.ddt_bias.data != NULL, c.mul(q.batch, q.H));
    w.h = take(need_dt && q.initial_state.data != NULL, c.mul(q.rows, q.H, pl.npsl), 8);
    w.g = take(need_dt, c.mul(q.batch, q.L, q.H), 8);
    w.e = take(need_dt, c.mul(q.batch, q.L, q.H), 8);
    const int64_t st = ck ? c.mul(ck->nchain, ck->nch, 64 * 64 * ck->NB) : 0;
    w.ckS = take(ck != NULL, st);
    w.ckG = take(ck != NULL, st);
    w.ckdec = take(ck != NULL, ck ? c.mul(q.batch, q.H, ck->nch) : 0);
    w.ckflag = take(ck != NULL, 16);
    w.total = off;
    return c.ok;
}

/* P.vbc / P.vx once every operand is filled in (bwd: dy and z are staged too) */
static void ssd_vectors(ssd_params &P, bool bwd) {
    P.vbc = ssd_rows8(P.B, P.batch, P.L, P.G, P.N) && ssd_rows8(P.C, P.batch, P.L, P.G, P.N);
    P.vx = P.PB % 8 == 0 && ssd_rows8(P.x, P.batch, P.L, P.H, P.P) &&
           (!bwd || (ssd_rows8(P.dy, P.batch, P.L, P.H, P.P) && ssd_rows8(P.z, P.batch, P.L, P.H, P.P)));
    P.vdx = bwd && ssd_rows8(P.dx, P.batch, P.L, P.H, P.P);
}

static void ssd_fill(ssd_params &P, const selscan__sprob &q, const ssd_plan &pl, const int64_t *cu_dev) {
    memset(&P, 0, sizeof P);
    P.batch = q.batch; P.L = q.L; P.H = q.H; P.P = q.P; P.N = q.N; P.G = q.G; P.hpg = q.hpg;
    P.nseq = q.cu ? q.nseq : 0;
    P.npsl = pl.npsl; P.nwalk = pl.nwalk; P.PB = pl.PB; P.TT = pl.TT;
    P.softplus = q.softplus; P.limit = q.limit; P.Dhd = q.Dhd;
    P.dtmin = q.dtmin; P.dtmax = q.dtmax;
    P.cu = q.cu ? cu_dev : NULL;
    SELSCAN__SSD_OPERANDS(SELSCAN__CUDA_CT, (&q))
}

/* validation of a call's launch sizes (the size queries' too): dstate (its limit; the smallest tile's
   shared memory, where the call launches a walk), the grid */
static selscan_status ssd_check_launch(const selscan__sprob &q, const ssd_plan &pl, int64_t walks, selscan_diag *dg) {
    if (q.N > 512) return fail(dg, SELSCAN_ERR_UNSUPPORTED, "dstate", SELSCAN_RULE_DSTATE_CUDA);
    if (walks > 0 && pl.smem > pl.cap) return fail(dg, SELSCAN_ERR_UNSUPPORTED, "dstate", SELSCAN_RULE_SHARED_MEMORY);
    sizecalc c;
    const int64_t grid = c.mul(pl.nwalk, walks), dtw = c.mul(q.batch, q.H, 32), hp = c.mul(q.H, q.P);
    if (!c.ok) return fail_size(dg);
    if (grid > kMaxGrid || cdiv(dtw, 256) > kMaxGrid || q.H > kMaxGrid || hp > kMaxGrid * 256) return fail_grid(dg); /* (ssd_param: a block a head) */
    return SELSCAN_OK;
}

/* whether this call runs in chunks: the shapes, a workspace to be had (ext->workspace_alloc: the
   forward takes no workspace argument), the device's shared memory */
static bool ssd_ck_takes(const selscan__sprob &q, const selscan_cuda_ext *x, ssd_ck_plan &k) {
    if (!ssd_ck_chosen(q) || !x || !x->workspace_alloc || !ssd_ck_shape(q, k)) return false;
    return k.smem + 64 <= ssd_smem_optin();
}

/* the forward's walk (ssd_fwd_kernel) with P's fields; HANDOFF: after the chunks, returning at once unless they raised
   P.ck_fwd_flag (their shapes, 32 < dstate <= 128, give 4 or 8 states a thread: the only instantiations). launch
   false: the shared-memory opt-in alone (the hand-off's, taken before the chunks are queued) */
template <bool HANDOFF> static cudaError_t ssd_walk_forward(const selscan__sprob &q, const ssd_plan &pl, const ssd_params &P, cudaStream_t stream,
                                                             bool launch = true) {
    cudaError_t e = cudaSuccess;
    selscan_cuda_detail::with_dtype(q.dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        ssd_with_walk(q, pl, [&](auto npt, auto pads) {
            constexpr int NPT = decltype(npt)::value;
            constexpr bool PADS = decltype(pads)::value;
            if constexpr (!HANDOFF || NPT == 4 || NPT == 8) {
                static volatile int done[64];
                if ((e = allow_smem(reinterpret_cast<const void *>(ssd_fwd_kernel<T, NPT, PADS, HANDOFF>), pl.smem, done)) == cudaSuccess && launch)
                    ssd_fwd_kernel<T, NPT, PADS, HANDOFF><<<static_cast<unsigned>(pl.nwalk), pl.nth, pl.smem, stream>>>(P);
            } else
                e = cudaErrorInvalidValue; /* (unreachable: ssd_ck_takes holds the chunks' shapes) */
        });
    });
    return e;
}

static selscan_status ssd_ck_forward(const selscan__sprob &q, const ssd_ck_plan &k, const ssd_plan &pl, const selscan_cuda_ext *x,
                                     cudaStream_t stream, selscan_diag *dg) {
    selscan_status st;
    cudaError_t *err = x->cuda_error;
    void *workspace = NULL;
    size_t bytes = 0;
    char *ws;
    if ((st = take_workspace(x, k.total, &workspace, &bytes, dg)) != SELSCAN_OK) return st;
    if ((st = check_workspace(workspace, bytes, k.total, &ws, dg)) != SELSCAN_OK) return st;
    {
        const selscan__ten wst = flat(ws, k.total);
        const selscan__ten *all[] = {SELSCAN__SSD_OPERANDS(SELSCAN__OPD_INS, (&q)) SELSCAN__SSD_OPERANDS(SELSCAN__OPD_OUTS, (&q))};
        if ((st = check_overlap(wst, all, SELSCAN__COUNT(all), dg, "workspace", "overlaps an operand")) != SELSCAN_OK) return st;
    }
    ssd_plan none; /* (the chunks' params take no walk plan) */
    memset(&none, 0, sizeof none);
    ssd_params P;
    ssd_fill(P, q, none, NULL);
    P.PB = kCkPT;
    ssd_vectors(P, false);
    P.ck_ring = reinterpret_cast<float *>(ws);
    P.ck_ticket = reinterpret_cast<unsigned long long *>(ws + k.ring);
    P.ck_flags = reinterpret_cast<int *>(ws + k.ring + 64);
    P.ck_ntile = k.ntile;
    P.ck_simt = ssd_ck_mode == 2;
    P.ck_fwd_flag = reinterpret_cast<int *>(ws + k.ring + kCkFwdFlagAt);
    /* the walk, which runs where a chunk raised the hand-off (SSD-CUDA-v30): its shared-memory opt-in taken before
       anything is queued, so that a refusal leaves y and final_state as they were */
    ssd_params W;
    ssd_fill(W, q, pl, NULL);
    ssd_vectors(W, false);
    W.ck_fwd_flag = P.ck_fwd_flag;
    SELSCAN__CU(ssd_walk_forward<true>(q, pl, W, stream, false));
    SELSCAN__CU(cudaMemsetAsync(ws + k.ring, 0, static_cast<size_t>(k.total - k.ring), stream));
    cudaError_t e = cudaSuccess;
    selscan_cuda_detail::with_dtype(q.dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        auto go = [&](auto nb, auto one) {
            constexpr int NB = decltype(nb)::value;
            constexpr bool ONE = decltype(one)::value;
            static volatile int done[64];
            if ((e = allow_smem(reinterpret_cast<const void *>(ssd_ck_fwd_kernel<T, NB, ONE>), k.smem, done)) == cudaSuccess)
                ssd_ck_fwd_kernel<T, NB, ONE><<<static_cast<unsigned>(k.grid), kCkThreads, k.smem, stream>>>(P);
        };
#ifdef SELSCAN__CUDA_TUNING /* the benchmark's one-pass tf32 products: compiled there only */
        if (ssd_ck_mode == 3) {
            if (k.NB == 1) go(std::integral_constant<int, 1>(), std::true_type());
            else go(std::integral_constant<int, 2>(), std::true_type());
            return;
        }
#endif
        if (k.NB == 1) go(std::integral_constant<int, 1>(), std::false_type());
        else go(std::integral_constant<int, 2>(), std::false_type());
    });
    SELSCAN__CU(e);
#ifdef SELSCAN__CUDA_TUNING
    if (ssd_ck_handoff)
#endif
        SELSCAN__CU(ssd_walk_forward<true>(q, pl, W, stream));
    SELSCAN__LAUNCHED();
    return SELSCAN_OK;
}

static selscan_status ssd_forward(const selscan_ssd_problem *p, const selscan_cuda_ext *x, cudaStream_t stream) {
    selscan__sprob q;
    selscan_status st;
    cudaError_t *err = x ? x->cuda_error : NULL;
    if ((st = selscan__ssd_validate_forward(p, &q, NULL, 0, NULL, 0)) != SELSCAN_OK) return st;
    selscan_diag *dg = p->diag;
    const selscan__ten *outs[] = {SELSCAN__SSD_OPERANDS(SELSCAN__OPD_OUTS, (&q))};
    if ((st = check_cu(q, x, outs, SELSCAN__COUNT(outs), dg)) != SELSCAN_OK) return st;
    ssd_plan pl;
    if (!ssd_make_plan(q, false, pl, ssd_smem_cap())) return fail_size(dg);
    if ((st = ssd_check_launch(q, pl, 1, dg)) != SELSCAN_OK) return st;
    ssd_ck_plan ck;
    if (ssd_ck_takes(q, x, ck)) return ssd_ck_forward(q, ck, pl, x, stream, dg);
    ssd_params P;
    ssd_fill(P, q, pl, x ? x->cu_seqlens_device : NULL);
    ssd_vectors(P, false);
    SELSCAN__CU(ssd_walk_forward<false>(q, pl, P, stream));
    SELSCAN__LAUNCHED();
    return SELSCAN_OK;
}

/* the backward before its launches: validation, the plan, the workspace and the parameters */
static selscan_status ssd_backward_begin(const selscan_ssd_problem *p, const selscan_ssd_grads *g, const selscan_cuda_ext *x,
                                         void *workspace, size_t bytes, selscan__sprob &q, selscan__sgrd &r, ssd_plan &pl, ssd_params &P,
                                         bool size_only, int64_t *need_out, ssd_ck_plan *ck_out = NULL) {
    selscan_status st;
    if ((st = selscan__ssd_validate_backward(p, g, &q, &r, NULL, 0, NULL, 0)) != SELSCAN_OK) return st;
    selscan_diag *dg = p->diag;
    if (!ssd_make_plan(q, true, pl, ssd_smem_cap())) return fail_size(dg);
    const bool need_dt = r.ddelta.data || r.dA.data || r.ddt_bias.data; /* the walks the call runs */
    const int walks = (r.dC.data || r.dz.data || need_dt) + (r.dx.data || r.dB.data || r.dinitial_state.data || r.dD.data || need_dt);
    ssd_ck_plan ck;
    const bool ckb = walks > 0 && ssd_ckb_shape(q, pl, ck); /* the workspace holds the chunks' part (from the shapes alone) */
    ssd_ws w;
    if (!ssd_ws_layout(q, r, pl, w, ckb ? &ck : NULL)) return fail_size(dg); /* (its size does not depend on the tile) */
    if ((st = ssd_check_launch(q, pl, walks, dg)) != SELSCAN_OK) return st; /* the size query refuses what the call would */
    if (size_only) {
        *need_out = w.total;
        return SELSCAN_OK;
    }
    const selscan__ten *outs[] = {SELSCAN__SSD_GRAD_OPERANDS(SELSCAN__OPD_OUTS, (&r))};
    if ((st = check_cu(q, x, outs, SELSCAN__COUNT(outs), dg)) != SELSCAN_OK) return st;
    char *ws;
    if ((st = take_workspace(x, w.total, &workspace, &bytes, dg)) != SELSCAN_OK) return st;
    if ((st = check_workspace(workspace, bytes, w.total, &ws, dg)) != SELSCAN_OK) return st;
    if (ws) {
        const selscan__ten wst = flat(ws, w.total), cut = flat(q.cu ? x->cu_seqlens_device : NULL, (q.nseq + 1) * 8);
        const selscan__ten *all[] = {SELSCAN__SSD_OPERANDS(SELSCAN__OPD_INS, (&q)) SELSCAN__SSD_GRAD_OPERANDS(SELSCAN__OPD_ALL, (&r)) &cut};
        if ((st = check_overlap(wst, all, SELSCAN__COUNT(all), dg, "workspace", "overlaps an operand")) != SELSCAN_OK) return st;
    }
    ssd_fill(P, q, pl, x ? x->cu_seqlens_device : NULL);
    SELSCAN__SSD_GRAD_OPERANDS(SELSCAN__CUDA_CT, (&r))
    ssd_vectors(P, true);
    auto at = [&](int64_t o) { return o < 0 ? static_cast<float *>(NULL) : reinterpret_cast<float *>(ws + o); };
    auto atd = [&](int64_t o) { return o < 0 ? static_cast<double *>(NULL) : reinterpret_cast<double *>(ws + o); };
    P.wB = at(w.B); P.wC = at(w.C); P.wr = atd(w.r); P.wx = atd(w.x); P.wD = at(w.D); P.wA = at(w.A); P.wb = at(w.b);
    P.wh = atd(w.h); P.wg = atd(w.g); P.we = atd(w.e);
    P.need_dt = w.r >= 0;
    P.fwd_walk = r.dC.data || r.dz.data || P.need_dt;
    P.rev_walk = r.dx.data || r.dB.data || r.dinitial_state.data || r.dD.data || P.need_dt;
    if (ckb && ck_out && ssd_ckb_fits(ck)) { /* the chunks take the call unless a value is not finite (>>ssd-chunk-bwd) */
        *ck_out = ck;
        P.ckb_S = at(w.ckS); P.ckb_G = at(w.ckG); P.ckb_dec = at(w.ckdec);
        P.ckb_flag = reinterpret_cast<int *>(ws + w.ckflag);
        P.ckb_nch = ck.nch;
        P.ckb_tc = ssd_ckb_tc;
        P.ck_ntile = ck.ntile;
    }
    return SELSCAN_OK;
}

static selscan_status ssd_backward(const selscan_ssd_problem *p, const selscan_ssd_grads *g, const selscan_cuda_ext *x, void *workspace,
                                   size_t bytes, cudaStream_t stream) {
    selscan__sprob q;
    selscan__sgrd r;
    ssd_plan pl;
    ssd_params P;
    cudaError_t *err = x ? x->cuda_error : NULL;
    ssd_ck_plan ck;
    const selscan_status st = ssd_backward_begin(p, g, x, workspace, bytes, q, r, pl, P, false, NULL, &ck);
    if (st != SELSCAN_OK) return st;
    const int walks = P.fwd_walk + P.rev_walk;
    cudaError_t e = cudaSuccess;
    if (P.ckb_flag) SELSCAN__CU(cudaMemsetAsync(P.ckb_flag, 0, 4, stream));
    selscan_cuda_detail::with_dtype(q.dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        auto walk = [&](bool launch) { /* launch false: the walks' shared-memory opt-in alone */
            ssd_with_walk(q, pl, [&](auto npt, auto pads) {
                constexpr int NPT = decltype(npt)::value;
                constexpr bool PADS = decltype(pads)::value;
                static volatile int done[64];
                if ((e = allow_smem(reinterpret_cast<const void *>(ssd_bwd_kernel<T, NPT, PADS>), pl.smem, done)) == cudaSuccess && launch)
                    ssd_bwd_kernel<T, NPT, PADS><<<static_cast<unsigned>(pl.nwalk * walks), pl.nth, pl.smem, stream>>>(P);
            });
        };
        if (walks) walk(false); /* every opt-in before anything is queued: a refusal leaves the gradients as they were */
        if (e == cudaSuccess && P.ckb_flag) { /* the chunks (>>ssd-chunk-bwd), then the walks, which return at once unless the flag is up */
            auto go = [&](auto nb, auto one) {
                constexpr int NB = decltype(nb)::value;
                constexpr bool ONE = decltype(one)::value;
                static volatile int d1[64], d2[64];
                const int s1 = 4 * ssd_ckb_layout(NB, true).total, s2 = 4 * ssd_ckb_layout(NB, false).total;
                if ((e = allow_smem(reinterpret_cast<const void *>(ssd_ckb_loc_kernel<T, NB, ONE>), s1, d1)) != cudaSuccess) return;
                if ((e = allow_smem(reinterpret_cast<const void *>(ssd_ckb_kernel<T, NB, ONE>), s2, d2)) != cudaSuccess) return;
                ssd_ckb_loc_kernel<T, NB, ONE><<<static_cast<unsigned>(ck.grid), kCkThreads, s1, stream>>>(P);
                ssd_ckb_pass_kernel<<<nblocks(2 * ck.nchain * 16 * 64 * NB, 256), 256, 0, stream>>>(P, 64 * NB);
                ssd_ckb_kernel<T, NB, ONE><<<static_cast<unsigned>(ck.grid), kCkThreads, s2, stream>>>(P);
            };
#ifdef SELSCAN__CUDA_TUNING /* the benchmark's one-pass level: compiled there only */
            if (ssd_ckb_tc == 3 && q.dt != SELSCAN_F32) {
                if (ck.NB == 1) go(std::integral_constant<int, 1>(), std::true_type());
                else go(std::integral_constant<int, 2>(), std::true_type());
            } else
#endif
            if (ck.NB == 1) go(std::integral_constant<int, 1>(), std::false_type());
            else go(std::integral_constant<int, 2>(), std::false_type());
        }
        if (e == cudaSuccess && walks) walk(true);
        if (e == cudaSuccess && P.need_dt) ssd_dt_kernel<T><<<nblocks(q.batch * q.H * 32, 256), 256, 0, stream>>>(P);
        if (e == cudaSuccess && (P.wB || P.wC)) {
            const int64_t n = cdiv(q.batch * q.L * q.G * q.N, 256);
            ssd_bc_kernel<T><<<static_cast<unsigned>(n < 65536 * 8 ? n : 65536 * 8), 256, 0, stream>>>(P);
        }
    });
    SELSCAN__CU(e);
    if (P.wA || P.wb || P.wD) ssd_param_kernel<<<static_cast<unsigned>(q.H), 256, 0, stream>>>(P);
    SELSCAN__LAUNCHED();
    return SELSCAN_OK;
}

static selscan_status ssd_workspace_size(const selscan_ssd_problem *p, const selscan_ssd_grads *g, size_t *bytes) {
    if (!bytes) return selscan__fail(p ? p->diag : NULL, SELSCAN_ERR_NULL, "bytes", SELSCAN_RULE_MISSING);
    if (!g) { /* the forward: none for the walk (the chunks' is asked of ext->workspace_alloc); refused as the forward refuses */
        selscan__sprob q;
        ssd_plan pl;
        selscan_status st = selscan__ssd_validate_forward(p, &q, NULL, 0, NULL, 0);
        if (st == SELSCAN_OK && !ssd_make_plan(q, false, pl, ssd_smem_cap())) st = fail_size(p->diag);
        if (st == SELSCAN_OK) st = ssd_check_launch(q, pl, 1, p->diag);
        ssd_ck_plan ck;
        if (st == SELSCAN_OK) *bytes = ssd_ck_chosen(q) && ssd_ck_shape(q, ck) ? ws_reported(ck.total) : 0;
        return st;
    }
    selscan__sprob q;
    selscan__sgrd r;
    ssd_plan pl;
    ssd_params P;
    int64_t need = 0;
    const selscan_status st = ssd_backward_begin(p, g, NULL, NULL, 0, q, r, pl, P, true, &need);
    if (st == SELSCAN_OK) *bytes = ws_reported(need);
    return st;
}

/* ---------------------------------------------------------------------------------------------- */
/* >>norm-cuda       the gated RMS norm (selscan.h >>norm-api), kernels and host                  */
/* ---------------------------------------------------------------------------------------------- */
/* One block of kThreads a (row, group) in the forward, a (chunk of rows, group) in the backward;
   row = (batch row, step). A thread takes kNormV consecutive channels at a time (16-byte loads
   and stores for 2-byte T where every (batch, L, dim) operand has unit channel stride: load_raw /
   store_row, which fall back to word or element accesses on misaligned or partial chunks), else
   one channel at a time through the strides. Two passes over the group: the sums (forward: of u^2;
   backward: of u^2 and dn * u together), a block reduction in a fixed tree (shuffles, then the
   warps' sums in warp order: deterministic), then the outputs from a second read of the group's
   inputs (cache hits: a group is at most a few KiB at Mamba-2's sizes). The backward's dweight:
   each block adds its rows' dout * n (* s) per channel, in row order, into its own partial row
   [block][dim] in the workspace (a channel's owner thread is the same for every row of the block:
   its first two chunks' sums in registers, written once; further chunks (groups over 2048
   channels) read-add-write the partial row, no synchronization needed), and norm_reduce_kernel adds
   the blocks' partials of a channel in a fixed order (eight runs of blocks in parallel, then the
   eight sums in order): bitwise the same every call. silu's sigmoid on the fast
   exp unit (sigm), 1 / sqrtf (IEEE): results differ from the CPU reference by rounding only. */
const int kNormV = 8;                 /* channels a thread's chunk */
const int64_t kNormBlocks = 1024;     /* backward: (row chunk, group) blocks aimed at (a few waves) */

struct norm_params {
    int64_t rows, L, dim, gs, ngroups; /* rows: batch * L */
    int64_t rchunk;                    /* backward: rows a block */
    float eps;
    int before, hz;                    /* SELSCAN_NORM_BEFORE_GATE; z given */
    ct y, z, weight, out, dout, dy, dz, dweight;
    float *part;                       /* backward: per-block dweight partials, [block][dim] */
};

/* a (batch, L, dim) tensor's element offset; rw: the row's (batch row, step), divided once a row */
struct norm_row {
    int64_t b, l;
};
static __device__ __forceinline__ int64_t norm_at(const ct &t, const norm_row &rw, int64_t c) {
    return rw.b * t.s[0] + rw.l * t.s[1] + c * t.s[2];
}

/* the block's sums of a and b, in a fixed order; every thread gets them (sh: 2 * kThreads / 32 floats) */
static __device__ __forceinline__ void norm_block_sum2(float &a, float &b, float *sh) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_xor_sync(0xffffffffu, a, o);
        b += __shfl_xor_sync(0xffffffffu, b, o);
    }
    const int w = threadIdx.x / 32, nw = kThreads / 32;
    __syncthreads(); /* sh is free (an earlier call's readers are done) */
    if ((threadIdx.x & 31) == 0) {
        sh[w] = a;
        sh[nw + w] = b;
    }
    __syncthreads();
    a = sh[0];
    b = sh[nw];
    for (int i = 1; i < nw; i++) {
        a += sh[i];
        b += sh[nw + i];
    }
}

/* kNormV channels from c (n of them valid) of a (batch, L, dim) operand into f: VEC through
   load_raw (unit channel stride), else one at a time by the strides */
template <typename T, bool VEC>
static __device__ __forceinline__ void norm_load(float (&f)[kNormV], const ct &t, const norm_row &rw, int64_t c, int n) {
    if (VEC) {
        rawv<T, kNormV> r;
        load_raw<T, kNormV>(r, static_cast<const T *>(t.p) + norm_at(t, rw, c), n, false);
#pragma unroll
        for (int k = 0; k < kNormV; k++) f[k] = raw_get<T, kNormV>(r, k);
    } else {
        const int64_t o = norm_at(t, rw, c);
#pragma unroll
        for (int k = 0; k < kNormV; k++) f[k] = k < n ? ld<T>(t.p, o + k * t.s[2]) : 0.0f;
    }
}
template <typename T, bool VEC>
static __device__ __forceinline__ void norm_store(const ct &t, const norm_row &rw, int64_t c, const float (&f)[kNormV], int n) {
    if (VEC) {
        store_row<T, kNormV>(static_cast<T *>(t.p) + norm_at(t, rw, c), f, n);
    } else {
        const int64_t o = norm_at(t, rw, c);
#pragma unroll
        for (int k = 0; k < kNormV; k++)
            if (k < n) st<T>(t.p, o + k * t.s[2], f[k]);
    }
}
/* weight of channels c .. c + n - 1 (1 where absent) */
static __device__ __forceinline__ void norm_weight(float (&w)[kNormV], const norm_params &P, int64_t c, int n) {
#pragma unroll
    for (int k = 0; k < kNormV; k++)
        w[k] = P.weight.p && k < n ? static_cast<const float *>(P.weight.p)[(c + k) * P.weight.s[0]] : 1.0f;
}

/* u and the gate s of a chunk (s 1 without z), sg the sigmoid of z (the backward's s' reads it: one
   exponential a channel; unused, the compiler drops it) */
template <typename T, bool VEC>
static __device__ __forceinline__ void norm_u(const norm_params &P, const norm_row &rw, int64_t c, int n, float (&y)[kNormV], float (&z)[kNormV],
                                              float (&s)[kNormV], float (&u)[kNormV], float (&sg)[kNormV]) {
    norm_load<T, VEC>(y, P.y, rw, c, n);
    if (P.hz) norm_load<T, VEC>(z, P.z, rw, c, n);
#pragma unroll
    for (int k = 0; k < kNormV; k++) {
        sg[k] = P.hz ? sigm(z[k]) : 1.0f;
        s[k] = P.hz ? z[k] * sg[k] : 1.0f;
        u[k] = P.hz && !P.before ? y[k] * s[k] : y[k];
    }
}

template <typename T, bool VEC> static __global__ void __launch_bounds__(kThreads) norm_fwd_kernel(const norm_params P) {
    __shared__ float sh[2 * kThreads / 32];
    const int64_t row = static_cast<int64_t>(blockIdx.x) / P.ngroups, c0 = (static_cast<int64_t>(blockIdx.x) % P.ngroups) * P.gs;
    const int64_t step = static_cast<int64_t>(kThreads) * kNormV;
    const norm_row rw = {row / P.L, row % P.L};
    float ss = 0.0f, unused = 0.0f;
    for (int64_t j = static_cast<int64_t>(threadIdx.x) * kNormV; j < P.gs; j += step) {
        const int n = static_cast<int>(P.gs - j < kNormV ? P.gs - j : kNormV);
        float y[kNormV], z[kNormV], s[kNormV], u[kNormV], sg[kNormV];
        norm_u<T, VEC>(P, rw, c0 + j, n, y, z, s, u, sg);
#pragma unroll
        for (int k = 0; k < kNormV; k++) ss = fmaf(u[k], u[k], ss); /* (the absent ones are 0) */
    }
    norm_block_sum2(ss, unused, sh);
    const float r = 1.0f / sqrtf(ss / static_cast<float>(P.gs) + P.eps);
    const bool after = P.hz && P.before;
    for (int64_t j = static_cast<int64_t>(threadIdx.x) * kNormV; j < P.gs; j += step) {
        const int n = static_cast<int>(P.gs - j < kNormV ? P.gs - j : kNormV);
        float y[kNormV], z[kNormV], s[kNormV], u[kNormV], sg[kNormV], w[kNormV], o[kNormV];
        norm_u<T, VEC>(P, rw, c0 + j, n, y, z, s, u, sg);
        norm_weight(w, P, c0 + j, n);
#pragma unroll
        for (int k = 0; k < kNormV; k++) o[k] = after ? u[k] * r * w[k] * s[k] : u[k] * r * w[k];
        norm_store<T, VEC>(P.out, rw, c0 + j, o, n);
    }
}

/* Rows [blk * rchunk, + rchunk) of one group; dweight's partial of the block in P.part. */
template <typename T, bool VEC> static __global__ void __launch_bounds__(kThreads) norm_bwd_kernel(const norm_params P) {
    __shared__ float sh[2 * kThreads / 32];
    const int64_t blk = static_cast<int64_t>(blockIdx.x) / P.ngroups, c0 = (static_cast<int64_t>(blockIdx.x) % P.ngroups) * P.gs;
    const int64_t r0 = blk * P.rchunk, r1 = r0 + P.rchunk < P.rows ? r0 + P.rchunk : P.rows;
    const int64_t step = static_cast<int64_t>(kThreads) * kNormV;
    const bool after = P.hz && P.before, in = P.hz && !P.before;
    float *part = P.part ? P.part + blk * P.dim + c0 : NULL;
    /* dweight of the thread's first two chunks in registers over the block's rows (a group of up to
       2 * kThreads * kNormV channels: Mamba-2's); further chunks read-add-write their partial row */
    float acc0[kNormV], acc1[kNormV];
#pragma unroll
    for (int k = 0; k < kNormV; k++) acc0[k] = acc1[k] = 0.0f;
    for (int64_t row = r0; row < r1; row++) {
        const norm_row rw = {row / P.L, row % P.L};
        float ss = 0.0f, sd = 0.0f;
        for (int64_t j = static_cast<int64_t>(threadIdx.x) * kNormV; j < P.gs; j += step) {
            const int n = static_cast<int>(P.gs - j < kNormV ? P.gs - j : kNormV);
            float y[kNormV], z[kNormV], s[kNormV], u[kNormV], sg[kNormV], w[kNormV], d[kNormV];
            norm_u<T, VEC>(P, rw, c0 + j, n, y, z, s, u, sg);
            norm_weight(w, P, c0 + j, n);
            norm_load<T, VEC>(d, P.dout, rw, c0 + j, n);
#pragma unroll
            for (int k = 0; k < kNormV; k++) {
                const float dn = after ? d[k] * w[k] * s[k] : d[k] * w[k];
                ss = fmaf(u[k], u[k], ss);
                sd = fmaf(dn, u[k], sd);
            }
        }
        norm_block_sum2(ss, sd, sh);
        const float r = 1.0f / sqrtf(ss / static_cast<float>(P.gs) + P.eps);
        const float m = r * (sd / static_cast<float>(P.gs)); /* mean of dn * n */
        int q = 0; /* the thread's chunk number */
        for (int64_t j = static_cast<int64_t>(threadIdx.x) * kNormV; j < P.gs; j += step, q++) {
            const int n = static_cast<int>(P.gs - j < kNormV ? P.gs - j : kNormV);
            float y[kNormV], z[kNormV], s[kNormV], u[kNormV], sg[kNormV], w[kNormV], d[kNormV], gy[kNormV], gz[kNormV];
            norm_u<T, VEC>(P, rw, c0 + j, n, y, z, s, u, sg);
            norm_weight(w, P, c0 + j, n);
            norm_load<T, VEC>(d, P.dout, rw, c0 + j, n);
#pragma unroll
            for (int k = 0; k < kNormV; k++) {
                const float nn = u[k] * r, dn = after ? d[k] * w[k] * s[k] : d[k] * w[k], du = r * (dn - nn * m);
                gy[k] = in ? du * s[k] : du;
                if (P.hz) {
                    const float ds = sg[k] * (1.0f + z[k] * (1.0f - sg[k]));
                    gz[k] = after ? d[k] * nn * w[k] * ds : du * y[k] * ds;
                } else {
                    gz[k] = 0.0f;
                }
                if (part && k < n) { /* this thread's channel: rows in order */
                    const float g = after ? d[k] * nn * s[k] : d[k] * nn;
                    if (q == 0) acc0[k] += g;
                    else if (q == 1) acc1[k] += g;
                    else part[j + k] = row == r0 ? g : part[j + k] + g;
                }
            }
            if (P.dy.p) norm_store<T, VEC>(P.dy, rw, c0 + j, gy, n);
            if (P.dz.p) norm_store<T, VEC>(P.dz, rw, c0 + j, gz, n);
        }
    }
    if (part) {
        const int64_t j0 = static_cast<int64_t>(threadIdx.x) * kNormV, j1 = j0 + step;
#pragma unroll
        for (int k = 0; k < kNormV; k++) {
            if (j0 + k < P.gs) part[j0 + k] = acc0[k];
            if (j1 + k < P.gs) part[j1 + k] = acc1[k];
        }
    }
}

/* dweight[c] = the blocks' partials of c in a fixed order: a block of 8 warps takes 32 channels, warp w
   adds the partials of blocks [w nblk / 8, (w + 1) nblk / 8) in order, then its lane the 8 sums in warp
   order (one thread a channel over 1024 partials was a serial chain of L2 loads on dim / 256 blocks: a
   review's estimate 40-60 us at the 130m shape) */
static __global__ void __launch_bounds__(256) norm_reduce_kernel(const norm_params P, int64_t nblk) {
    __shared__ float sh[8][32];
    const int lane = static_cast<int>(threadIdx.x) % 32, w = static_cast<int>(threadIdx.x) / 32;
    const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + lane, j1 = nblk * (w + 1) / 8;
    float s = 0.0f;
    if (c < P.dim)
        for (int64_t j = nblk * w / 8; j < j1; j++) s += P.part[j * P.dim + c];
    sh[w][lane] = s;
    __syncthreads();
    if (w == 0 && c < P.dim) {
        float t = sh[0][lane];
        for (int i = 1; i < 8; i++) t += sh[i][lane];
        static_cast<float *>(P.dweight.p)[c * P.dweight.s[0]] = t;
    }
}

/* unit channel stride on every (batch, L, dim) operand given: the vector loads */
static bool norm_vec(const selscan__ten *const *ts, int n) {
    for (int i = 0; i < n; i++)
        if (ts[i]->data && ts[i]->s[2] != 1) return false;
    return true;
}

static void norm_fill(norm_params &P, const selscan__nprob &q) {
    memset(&P, 0, sizeof P);
    P.rows = q.batch * q.L; P.L = q.L; P.dim = q.dim; P.gs = q.gs; P.ngroups = q.dim / q.gs;
    P.eps = q.eps; P.before = q.before; P.hz = q.z.data != NULL;
    SELSCAN__NORM_OPERANDS(SELSCAN__CUDA_CT, &q)
}

/* rows a backward block (so that about kNormBlocks blocks run), and the row chunks */
static void norm_chunks(const selscan__nprob &q, int64_t *rchunk, int64_t *nchunks) {
    const int64_t rows = q.batch * q.L, ng = q.dim / q.gs;
    int64_t want = cdiv(kNormBlocks, ng);
    if (want > rows) want = rows;
    *rchunk = cdiv(rows, want);
    *nchunks = cdiv(rows, *rchunk);
}

/* The backward's workspace bytes (before the alignment slack): the per-block partials when
   dweight is asked for; -1 when the size overflows. */
static int64_t norm_ws_need(const selscan__nprob &q, const selscan__ngrd &r) {
    if (!r.dweight.data) return 0;
    int64_t rchunk, nch;
    norm_chunks(q, &rchunk, &nch);
    sizecalc c;
    const int64_t n = c.al(c.mul(c.mul(nch, q.dim), 4));
    return c.ok ? n : -1;
}

static selscan_status norm_forward(const selscan_norm_problem *p, const selscan_cuda_ext *x, cudaStream_t stream) {
    selscan__nprob q;
    norm_params P;
    cudaError_t *err = x ? x->cuda_error : NULL;
    selscan_status st;
    if ((st = selscan__norm_validate_forward(p, &q)) != SELSCAN_OK) return st;
    sizecalc c;
    const int64_t nblk = c.mul(c.mul(q.batch, q.L), q.dim / q.gs);
    if (!c.ok || nblk > kMaxGrid) return fail_grid(p->diag);
    norm_fill(P, q);
    const selscan__ten *ts[] = {&q.y, &q.z, &q.out};
    const bool vec = norm_vec(ts, SELSCAN__COUNT(ts));
    selscan_cuda_detail::with_dtype(q.dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (vec) norm_fwd_kernel<T, true><<<static_cast<unsigned>(nblk), kThreads, 0, stream>>>(P);
        else norm_fwd_kernel<T, false><<<static_cast<unsigned>(nblk), kThreads, 0, stream>>>(P);
    });
    SELSCAN__LAUNCHED();
    return SELSCAN_OK;
}

static selscan_status norm_workspace_size(const selscan_norm_problem *p, const selscan_norm_grads *g, size_t *bytes) {
    selscan__nprob q;
    selscan__ngrd r;
    selscan_status st;
    if (!bytes) return selscan__fail(p ? p->diag : NULL, SELSCAN_ERR_NULL, "bytes", SELSCAN_RULE_MISSING);
    if ((st = selscan__norm_validate_backward(p, g, &q, &r)) != SELSCAN_OK) return st;
    const int64_t need = norm_ws_need(q, r);
    if (need < 0) return fail_size(p->diag);
    *bytes = ws_reported(need);
    return SELSCAN_OK;
}

static selscan_status norm_backward(const selscan_norm_problem *p, const selscan_norm_grads *g, const selscan_cuda_ext *x,
                                    void *workspace, size_t bytes, cudaStream_t stream) {
    selscan__nprob q;
    selscan__ngrd r;
    norm_params P;
    cudaError_t *err = x ? x->cuda_error : NULL;
    selscan_status st;
    char *ws;
    if ((st = selscan__norm_validate_backward(p, g, &q, &r)) != SELSCAN_OK) return st;
    selscan_diag *dg = p->diag;
    int64_t rchunk, nch;
    norm_chunks(q, &rchunk, &nch);
    sizecalc c;
    const int64_t nblk = c.mul(nch, q.dim / q.gs);
    if (!c.ok || nblk > kMaxGrid || cdiv(q.dim, 32) > kMaxGrid) return fail_grid(dg);
    const int64_t need = norm_ws_need(q, r);
    if (need < 0) return fail_size(dg);
    if ((st = take_workspace(x, need, &workspace, &bytes, dg)) != SELSCAN_OK) return st;
    if ((st = check_workspace(workspace, bytes, need, &ws, dg)) != SELSCAN_OK) return st;
    if (ws) {
        const selscan__ten wst = flat(ws, need);
        const selscan__ten *all[] = {SELSCAN__NORM_OPERANDS(SELSCAN__OPD_INS, &q) SELSCAN__NORM_GRAD_OPERANDS(SELSCAN__OPD_ALL, &r)};
        if ((st = check_overlap(wst, all, SELSCAN__COUNT(all), dg, "workspace", "overlaps an operand")) != SELSCAN_OK) return st;
    }
    if (!r.dy.data && !r.dz.data && !r.dweight.data) return SELSCAN_OK; /* nothing asked for */
    norm_fill(P, q);
    SELSCAN__NORM_GRAD_OPERANDS(SELSCAN__CUDA_CT, &r)
    P.rchunk = rchunk;
    P.part = need ? reinterpret_cast<float *>(ws) : NULL;
    const selscan__ten *ts[] = {&q.y, &q.z, &r.dout, &r.dy, &r.dz};
    const bool vec = norm_vec(ts, SELSCAN__COUNT(ts));
    selscan_cuda_detail::with_dtype(q.dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (vec) norm_bwd_kernel<T, true><<<static_cast<unsigned>(nblk), kThreads, 0, stream>>>(P);
        else norm_bwd_kernel<T, false><<<static_cast<unsigned>(nblk), kThreads, 0, stream>>>(P);
    });
    SELSCAN__LAUNCHED();
    if (P.part) {
        norm_reduce_kernel<<<nblocks(q.dim, 32), 256, 0, stream>>>(P, nch);
        SELSCAN__LAUNCHED();
    }
    return SELSCAN_OK;
}

} /* namespace selscan_cuda_detail */

/* ---------------------------------------------------------------------------------------------- */
/* >>public          public entries                                                               */
/* ---------------------------------------------------------------------------------------------- */

extern "C" {

SELSCAN_DEF selscan_status selscan_checkpoint_size_cuda(const selscan_problem *p, size_t *bytes) {
    return selscan_cuda_detail::checkpoint_size(p, bytes);
}

SELSCAN_DEF selscan_status selscan_workspace_size_cuda(const selscan_problem *p, const selscan_grads *g, size_t *bytes) {
    return selscan_cuda_detail::workspace_size(p, g, 2, bytes);
}

SELSCAN_DEF selscan_status selscan_workspace_size_cuda_ex(const selscan_problem *p, const selscan_grads *g,
                                                          const selscan_cuda_ext *x, size_t *bytes) {
    return selscan_cuda_detail::workspace_size(p, g, x && x->checkpoint_in ? 1 : 0, bytes);
}

SELSCAN_DEF selscan_status selscan_forward_cuda_ex(const selscan_problem *p, const selscan_cuda_ext *x,
                                                   void *workspace, size_t bytes, cudaStream_t stream) {
    return selscan_cuda_detail::forward(p, x, workspace, bytes, stream);
}

SELSCAN_DEF selscan_status selscan_forward_cuda(const selscan_problem *p, void *workspace, size_t bytes,
                                                cudaStream_t stream) {
    return selscan_cuda_detail::forward(p, NULL, workspace, bytes, stream);
}

SELSCAN_DEF selscan_status selscan_backward_cuda_ex(const selscan_problem *p, const selscan_grads *g,
                                                    const selscan_cuda_ext *x, void *workspace, size_t bytes,
                                                    cudaStream_t stream) {
    return selscan_cuda_detail::backward(p, g, x, workspace, bytes, stream);
}

SELSCAN_DEF selscan_status selscan_backward_cuda(const selscan_problem *p, const selscan_grads *g, void *workspace,
                                                 size_t bytes, cudaStream_t stream) {
    return selscan_cuda_detail::backward(p, g, NULL, workspace, bytes, stream);
}

SELSCAN_DEF selscan_status selscan_step_cuda_ex(const selscan_step_problem *s, const selscan_cuda_ext *x,
                                                cudaStream_t stream) {
    return selscan_cuda_detail::step(s, x, stream);
}

SELSCAN_DEF selscan_status selscan_step_cuda(const selscan_step_problem *s, cudaStream_t stream) {
    return selscan_cuda_detail::step(s, NULL, stream);
}

SELSCAN_DEF selscan_status selscan_ssd_workspace_size_cuda(const selscan_ssd_problem *p, const selscan_ssd_grads *g, size_t *bytes) {
    return selscan_cuda_detail::ssd_workspace_size(p, g, bytes);
}

SELSCAN_DEF selscan_status selscan_ssd_forward_cuda(const selscan_ssd_problem *p, const selscan_cuda_ext *x, cudaStream_t stream) {
    return selscan_cuda_detail::ssd_forward(p, x, stream);
}

SELSCAN_DEF selscan_status selscan_ssd_backward_cuda(const selscan_ssd_problem *p, const selscan_ssd_grads *g, const selscan_cuda_ext *x,
                                                     void *workspace, size_t bytes, cudaStream_t stream) {
    return selscan_cuda_detail::ssd_backward(p, g, x, workspace, bytes, stream);
}

SELSCAN_DEF selscan_status selscan_conv_workspace_size_cuda(const selscan_conv_problem *p, const selscan_conv_grads *g,
                                                            size_t *bytes) {
    return selscan_cuda_detail::conv_workspace_size(p, g, bytes);
}

SELSCAN_DEF selscan_status selscan_conv_forward_cuda(const selscan_conv_problem *p, const selscan_cuda_ext *x,
                                                     cudaStream_t stream) {
    return selscan_cuda_detail::conv_forward(p, x, stream);
}

SELSCAN_DEF selscan_status selscan_conv_backward_cuda(const selscan_conv_problem *p, const selscan_conv_grads *g,
                                                      const selscan_cuda_ext *x, void *workspace, size_t bytes,
                                                      cudaStream_t stream) {
    return selscan_cuda_detail::conv_backward(p, g, x, workspace, bytes, stream);
}

SELSCAN_DEF selscan_status selscan_conv_step_cuda(const selscan_conv_step_problem *s, const selscan_cuda_ext *x,
                                                  cudaStream_t stream) {
    return selscan_cuda_detail::conv_step(s, x, stream);
}

SELSCAN_DEF selscan_status selscan_norm_workspace_size_cuda(const selscan_norm_problem *p, const selscan_norm_grads *g, size_t *bytes) {
    return selscan_cuda_detail::norm_workspace_size(p, g, bytes);
}

SELSCAN_DEF selscan_status selscan_norm_forward_cuda(const selscan_norm_problem *p, const selscan_cuda_ext *x, cudaStream_t stream) {
    return selscan_cuda_detail::norm_forward(p, x, stream);
}

SELSCAN_DEF selscan_status selscan_norm_backward_cuda(const selscan_norm_problem *p, const selscan_norm_grads *g, const selscan_cuda_ext *x,
                                                      void *workspace, size_t bytes, cudaStream_t stream) {
    return selscan_cuda_detail::norm_backward(p, g, x, workspace, bytes, stream);
}

} /* extern "C" */

/* ============================================================================================= */
/* >>bench           bench-only: forced plans and kernels (SELSCAN__CUDA_TUNING)                 */
/* ============================================================================================= */
/* Compiled only where SELSCAN__CUDA_TUNING is defined before the implementation's include
   (bench/bench_cuda.cu; tests/test_cuda.cu and tests/test_cuda_conv.cu, to reach every kernel):
   entries that force what the plans above choose by rule, for the benchmark's tuning tables.
   Nothing above depends on this section; it adds no kernel instantiation, except the step's
   sweep shapes with SELSCAN__STEP_SWEEP too (bench/bench_cuda.cu): step_vec_kernel with R = 2
   batch rows a block, S = 16 states a lane, and the FAST form's register bounds of 12 / 16
   blocks an SM (bench/DECISIONS.md: CUDA-v37, v48, v51 / v52: all slower). */
#ifdef SELSCAN__CUDA_TUNING
namespace selscan_cuda_detail {

/* The forward's plan forced (zero: the rule): nlch > 0 the general kernel's L chunks, lchunk > 0
   the fast forward's chunk length in steps (rounded up to kFL), shortk the short-prefill forward
   never (< 0) or wherever it applies with K = shortk (4 / 8 / 16; 16 only for 2-byte types, f32
   runs 8). */
struct fwd_tune {
    int64_t nlch, lchunk;
    int shortk;
};
/* plan_fast_forward (need_y) with tu's forcing */
static void plan_fast_forward_tuned(const selscan__prob &q, int64_t sms, fwd_plan *pl, bool ck, const fwd_tune &tu) {
    pl->fastS = pl->fastCL = pl->shortK = 0;
    fast_fwd_layout fl;
    int64_t sblocks;
    if (!fast_forward_layout(q, true, &fl)) return;
    const int64_t lchunk = tu.lchunk > 0 ? cdiv(tu.lchunk, kFL) * kFL : fast_forward_lchunk(q, fl, sms);
    if (!fast_forward_chunks(q, fl, lchunk, pl)) return;
    if (!short_forward_fits(q, fl, true, ck, &sblocks) || tu.shortk < 0) return;
    if (tu.shortk > 0) pl->shortK = tu.shortk <= 4 ? 4 : tu.shortk >= 16 ? 16 : 8;
    else pl->shortK = short_forward_steps(q, fl, sblocks, sms);
}
/* plan_forward with tu's forcing; try_fast false: the general kernel */
static selscan_status plan_forward_tuned(const selscan__prob &q, int64_t sms, fwd_plan *pl, bool try_fast, bool ck, const fwd_tune &tu,
                                         selscan_diag *dg) {
    selscan_status st;
    int64_t blocks;
    if ((st = plan_forward_layout(q, pl, &blocks, dg)) != SELSCAN_OK) return st;
    const int64_t nl = tu.nlch > 0 ? tu.nlch : forward_lchunks(q, blocks, sms);
    if ((st = plan_forward_chunks(q, blocks, nl, pl, dg)) != SELSCAN_OK) return st;
    if (try_fast) plan_fast_forward_tuned(q, sms, pl, ck, tu);
    pl->ws_used = pl->shortK ? 0 : pl->ws;
    return SELSCAN_OK;
}
static selscan_status forward_tuned(const selscan_problem *p, const selscan_cuda_ext *x, void *workspace, size_t bytes,
                                    cudaStream_t stream, bool try_fast, const fwd_tune &tu) {
    selscan__prob q;
    fwd_plan fp;
    selscan_status st;
    if ((st = forward_begin(p, x, &q)) != SELSCAN_OK) return st;
    if ((st = plan_forward_tuned(q, sm_count(), &fp, try_fast, x && x->checkpoint_out, tu, p->diag)) != SELSCAN_OK) return st;
    return forward_run(p, x, q, fp, workspace, bytes, stream);
}

/* The step's kernel forced (zero: the rule): S states a lane (< 0: step_kernel, the float4
   kernels skipped), R batch rows a block, pdl: < 0 programmatic dependent launch where the device
   has it, 0 never; fast < 0: never the FAST form; minb: the FAST form's register bound (12 or 16
   blocks an SM, SELSCAN__STEP_SWEEP); loop < 0: never step_loop_kernel, > 0: wherever it
   applies; lat < 0: never step_lat_kernel, 0: by its rule where nothing else is forced, > 0:
   wherever it applies. */
struct step_tune {
    int S, R, pdl, fast, minb, loop, lat;
};
/* step_vec_kernel in the sweep's shapes: R batch rows a block (R = 1: launch_step_vec_s, the
   launcher's kernels), the FAST form's register bound minb where 12 or 16 */
template <typename T, int S, int R>
static void launch_step_vec_sweep(int minb, const step_choice &c, const step_params &sp, dim3 grid, bool pdl, cudaStream_t stream) {
    if constexpr (S == 8) {
        if (sp.NT == 2 && c.fast && !c.lat && c.loop_slices == 0 && (minb == 12 || minb == 16)) {
            if (minb == 12) launch_step_vec<T, S, R, 2, true, 12>(sp, grid, pdl, stream);
            else launch_step_vec<T, S, R, 2, true, 16>(sp, grid, pdl, stream);
            return;
        }
    }
    if constexpr (R == 1) {
        launch_step_vec_s<T, S>(c, sp, grid, pdl, stream);
    } else {
        if constexpr (S == 8) {
            if (sp.NT == 2 && c.fast) {
                launch_step_vec<T, S, R, 2, true, SELSCAN_CUDA_STEP_MINBLOCKS>(sp, grid, pdl, stream);
                return;
            }
        }
        launch_step_vec<T, S, R, 0, false, 0>(sp, grid, pdl, stream);
    }
}
template <typename T, int R>
static bool launch_step_vec_sweep_r(int minb, const step_choice &c, const step_params &sp, dim3 grid, bool pdl, cudaStream_t stream) {
    if (c.S == 8) launch_step_vec_sweep<T, 8, R>(minb, c, sp, grid, pdl, stream);
    else if (c.S == 4) launch_step_vec_sweep<T, 4, R>(minb, c, sp, grid, pdl, stream);
    else if (c.S == 16) launch_step_vec_sweep<T, 16, R>(minb, c, sp, grid, pdl, stream);
    else return false;
    return true;
}
/* the float4 kernel of c with R rows a block and tu.minb; false: no kernel of that shape compiled
   (without SELSCAN__STEP_SWEEP: the launcher's, S 8 or 4 and R 1, minb ignored) */
template <typename T>
static bool launch_step_vec_tuned(const step_tune &tu, int R, const step_choice &c, const step_params &sp, dim3 grid, bool pdl,
                                  cudaStream_t stream) {
#ifdef SELSCAN__STEP_SWEEP
    if (R == 1) return launch_step_vec_sweep_r<T, 1>(tu.minb, c, sp, grid, pdl, stream);
    if (R == 2) return launch_step_vec_sweep_r<T, 2>(tu.minb, c, sp, grid, pdl, stream);
    return false;
#else
    (void)tu;
    if (R != 1 || (c.S != 8 && c.S != 4)) return false;
    if (c.S == 8) launch_step_vec_s<T, 8>(c, sp, grid, pdl, stream);
    else launch_step_vec_s<T, 4>(c, sp, grid, pdl, stream);
    return true;
#endif
}
/* launch_step with tu's forcing */
static selscan_status launch_step_tuned(const selscan__stp &q, const step_tune &tu, cudaStream_t stream, cudaError_t *err,
                                        selscan_diag *dg) {
    const bool pdl = tu.pdl != 0 && pdl_available();
    const int R = tu.R > 0 ? tu.R : 1;
    step_choice c = {tu.S > 0 ? tu.S : q.N % 8 == 0 && q.N != 8 ? 8 : 4, false, false, 0};
    if (tu.S < 0 || !step_vec_fits(q, c.S)) return launch_step_one(q, stream, err, dg);
    step_params sp;
    dim3 grid;
    selscan_status st;
    if ((st = step_vec_setup(q, c.S, R, &sp, &grid, dg)) != SELSCAN_OK) return st;
    c.fast = tu.fast >= 0 && step_fast_operands(sp);
    const bool lat_rule = tu.lat == 0 && tu.S <= 0 && tu.R <= 0 && tu.loop <= 0 && step_lat_rule(q, grid.y);
    const bool pair = step_pair_form(q, c, R, sp);
    c.lat = pair && (tu.lat > 0 || lat_rule);
    if (pair && !c.lat && tu.loop >= 0) {
        const int64_t slices = step_loop_slices(q, sp, grid.y);
        if (step_loop_rule(q, slices) || tu.loop > 0) c.loop_slices = step_loop_grid(q, slices);
    }
    const bool ok = selscan_cuda_detail::with_dtype(q.dt, [&](auto tag) {
        return launch_step_vec_tuned<typename decltype(tag)::type>(tu, R, c, sp, grid, pdl, stream);
    });
    if (!ok) return fail(dg, SELSCAN_ERR_UNSUPPORTED, "state", SELSCAN_RULE_NO_STEP_KERNEL);
    SELSCAN__LAUNCHED();
    return SELSCAN_OK;
}

/* The conv forward / backward with the rows and channels-last paths never taken (rows < 0) or by their rules (0) */
static selscan_status conv_forward_tuned(const selscan_conv_problem *p, const selscan_cuda_ext *x, cudaStream_t stream, int rows) {
    selscan__cprob q;
    conv_params P;
    conv_plan pl;
    const selscan_status st = conv_forward_begin(p, x, &q, P, &pl);
    if (st != SELSCAN_OK) return st;
    if (rows < 0) pl.rows = pl.cl = false;
    return conv_forward_run(q, P, pl, stream, x ? x->cuda_error : NULL);
}
static selscan_status conv_backward_tuned(const selscan_conv_problem *p, const selscan_conv_grads *g, const selscan_cuda_ext *x,
                                          void *workspace, size_t bytes, cudaStream_t stream, int rows) {
    selscan__cprob q;
    selscan__cgrd r;
    conv_params P;
    conv_plan pl;
    const selscan_status st = conv_backward_begin(p, g, x, workspace, bytes, &q, &r, P, &pl);
    if (st != SELSCAN_OK) return st;
    if (rows < 0) pl.rows = pl.cl = false;
    return conv_backward_run(q, r, P, pl, stream, x ? x->cuda_error : NULL);
}
/* The conv update with programmatic dependent launch (pdl), or plainly: conv_step itself */
static selscan_status conv_step_tuned(const selscan_conv_step_problem *s, const selscan_cuda_ext *x, cudaStream_t stream, bool pdl) {
    if (!pdl) return conv_step(s, x, stream);
    selscan__cstp q;
    conv_params P;
    dim3 grid;
    cudaError_t *err = x ? x->cuda_error : NULL;
    const selscan_status st = conv_step_begin(s, &q, P, &grid);
    if (st != SELSCAN_OK) return st;
    selscan_cuda_detail::with_dtype(q.dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        conv_with_width(P.W, [&](auto wc) { launch_pdl(conv_step_kernel<T, decltype(wc)::value>, grid, kThreads, 0, stream, P); });
    });
    SELSCAN__LAUNCHED();
    return SELSCAN_OK;
}

} /* namespace selscan_cuda_detail */

/* The forward with its plan forced: npt < 0 runs the general kernel where the fast one would apply
   (other values: the automatic choice); nlch > 0 forces the general kernel's L chunks (its
   workspace then holds 3 * batch * dim * nlch * N floats, each third 256-byte aligned, plus 255
   bytes of alignment slack); lchunk > 0 the fast forward's L chunks of that many steps (the same
   workspace); shortk < 0 never the short-prefill forward, 4 / 8 / 16 wherever it applies with
   that many steps a lane (0: the automatic choice). (bench/bench_cuda.cu, tests/test_cuda.cu) */
static SELSCAN__MAYBE_UNUSED selscan_status selscan__forward_cuda_tuned(const selscan_problem *p, const selscan_cuda_ext *x, void *workspace,
                                                                        size_t bytes, cudaStream_t stream, int npt, int64_t nlch,
                                                                        int64_t lchunk = 0, int shortk = 0) {
    return selscan_cuda_detail::forward_tuned(p, x, workspace, bytes, stream, npt >= 0,
                                              selscan_cuda_detail::fwd_tune{nlch, lchunk, shortk});
}

/* The step with its kernel's shape forced (S states a thread, R batch rows a block; 0: automatic;
   S < 0: step_kernel, the float4 kernels skipped), programmatic dependent launch on (pdl < 0:
   where available) or off (0), the FAST form never (fast < 0), its register bound (minb, with
   SELSCAN__STEP_SWEEP), step_loop_kernel never (loop < 0) or wherever it applies (loop > 0),
   step_lat_kernel never (lat < 0), by the launcher's rule (lat 0: not when S, R or loop is
   forced) or wherever it applies (lat 1) (bench/bench_cuda.cu, tests/test_cuda.cu). A shape not
   compiled: SELSCAN_ERR_UNSUPPORTED (SELSCAN_RULE_NO_STEP_KERNEL). */
static SELSCAN__MAYBE_UNUSED selscan_status selscan__step_cuda_tuned(const selscan_step_problem *s, cudaError_t *err, cudaStream_t stream,
                                                                     int S, int R, int pdl, int fast = 0, int minb = 0, int loop = 0,
                                                                     int lat = 0) {
    selscan__stp q;
    selscan_status st = selscan__validate_step_ex(s, &q, 0);
    if (st != SELSCAN_OK) return st;
    return selscan_cuda_detail::launch_step_tuned(q, selscan_cuda_detail::step_tune{S, R, pdl, fast, minb, loop, lat}, stream, err,
                                                  s->diag);
}

/* The conv forward / backward with the rows path (>>conv-rows) and the channels-last path
   (>>conv-cl) never taken (rows < 0) or wherever they apply (0): the tiled kernels' tests and tuning (bench/bench_cuda.cu,
   tests/test_cuda_conv.cu). */
static SELSCAN__MAYBE_UNUSED selscan_status selscan__conv_forward_cuda_tuned(const selscan_conv_problem *p, const selscan_cuda_ext *x,
                                                                             cudaStream_t stream, int rows) {
    return selscan_cuda_detail::conv_forward_tuned(p, x, stream, rows);
}
static SELSCAN__MAYBE_UNUSED selscan_status selscan__conv_backward_cuda_tuned(const selscan_conv_problem *p, const selscan_conv_grads *g,
                                                                              const selscan_cuda_ext *x, void *workspace, size_t bytes,
                                                                              cudaStream_t stream, int rows) {
    return selscan_cuda_detail::conv_backward_tuned(p, g, x, workspace, bytes, stream, rows);
}
/* The conv step with programmatic dependent launch (pdl true) or without (conv_step's way). */
static SELSCAN__MAYBE_UNUSED selscan_status selscan__conv_step_cuda_tuned(const selscan_conv_step_problem *s, const selscan_cuda_ext *x,
                                                                          cudaStream_t stream, bool pdl) {
    return selscan_cuda_detail::conv_step_tuned(s, x, stream, pdl);
}
#endif /* SELSCAN__CUDA_TUNING */

#undef SELSCAN__CU
#undef SELSCAN__LAUNCHED
#undef SELSCAN__CUDA_CT
#undef SELSCAN__CUDA_CT_GRAD
#undef SELSCAN__CUDA_CT_GRAD_SEQ
#undef SELSCAN__CUDA_CT_GRAD_ROWS
#undef SELSCAN__CUDA_CT_GRAD_DN
#undef SELSCAN__CUDA_CT_GRAD_BC
#undef SELSCAN__CUDA_CT_GRAD_DIM

#endif /* SELSCAN__CUDA_IMPLEMENTED */
#endif /* SELSCAN_CUDA_IMPLEMENTATION */
