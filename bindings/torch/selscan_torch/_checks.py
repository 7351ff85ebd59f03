"""selscan_torch's argument checks in Python (issue 27: framework ops under bad input).

Two users:

* the fake (meta) kernels of torch.ops.selscan.fwd / bwd / step (selscan_torch/__init__.py): they
  check shapes, dtypes and devices with the rules and messages of the C++ kernels
  (csrc/selscan_torch.cpp: CheckScan, Backward, Step), so that an all-meta call is refused where a
  CPU call would be, and a meta tensor among real ones (where the dispatcher picks the fake kernel)
  is refused naming the argument instead of returning uninitialised memory. Values (offsets,
  indices) are not known there: the real kernels check them.
* the mamba-compatible wrappers (selective_scan_fn, selective_state_update): what is cast, what is
  refused (bindings/torch/README.md, "What is cast, refused, copied"), the host offsets, the state
  row indices, and the multi-head step's shapes before heads are folded into channels.

Messages name the caller's argument (`selscan: <name> ...`); ValueError for shapes, values and
devices, TypeError for dtypes, like the C++ side (TORCH_CHECK_VALUE / TORCH_CHECK_TYPE).
"""
import torch

from . import _C  # noqa: F401  (selscan.h constants and the shared layer's ElementsMeet)

_SCAN_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_F32 = torch.float32
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
# integer dtypes taken for offsets and row indices (torch's uint16 / 32 / 64 lack the ops needed)
_INDEX_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def _shape(t):
    return str(list(t.shape))


def _value(cond, *msg):
    if not cond:
        raise ValueError("selscan: " + "".join(str(m) for m in msg))


def _type(cond, *msg):
    if not cond:
        raise TypeError("selscan: " + "".join(str(m) for m in msg))


def _refuse_shape(where, arg, rule):
    """A refusal in the form of the C++ side's selscan statuses (csrc: Refuse)."""
    raise ValueError(f"selscan: {where}: invalid size, group count, sequence offsets or index [SELSCAN_ERR_SHAPE] "
                     f"(argument '{arg}': {rule})")


def _same_device(ref, ref_name, t, name):
    _value(t.device == ref.device, name, " is on ", t.device, " but ", ref_name, " is on ", ref.device)


def _f32(t, name):
    _type(t.dtype == _F32, name, " must be float32, got ", t.dtype)


def _shape_is(t, want, name, what):
    _value(tuple(t.shape) == tuple(want), name, " must have shape ", what, " = ", list(want), ", got ", _shape(t))


def _scan_dtype(t, name):
    _type(t.dtype in _SCAN_DTYPES, name, " must be float32, float16 or bfloat16, got ", t.dtype)


def _like(t, name, ref, ref_name):
    """t has ref's shape, dtype and device (delta / z / dy like u, dt / z like x)."""
    _shape_is(t, ref.shape, name, ref_name + "'s shape")
    _type(t.dtype == ref.dtype, name, " must have ", ref_name, "'s dtype ", ref.dtype, ", got ", t.dtype)
    _same_device(ref, ref_name, t, name)


def _f32_param(t, name, want, what, ref, ref_name):
    """t is float32 of shape want (what: its description) on ref's device (A, D, the biases, states)."""
    _shape_is(t, want, name, what)
    _f32(t, name)
    _same_device(ref, ref_name, t, name)


def step_param(t, name, want, what, x):
    """A decode step's parameter (D, dt_bias; the conv step's weight, bias): shape want, float32 or
    x's dtype (C++ CheckStepParam), on x's device."""
    _shape_is(t, want, name, what)
    _type(t.dtype == _F32 or t.dtype == x.dtype, name, " must be float32 or x's dtype ", x.dtype, ", got ", t.dtype)
    _same_device(x, "x", t, name)


def _optional_params(D, z, bias, bias_name, dim, ref, ref_name, step=False):
    """The scan's and the step's optional D, z and delta / dt bias, where given: D and the bias
    (dim,) float32 (the step's: float32 or x's dtype), z like ref (u / x); all on ref's device."""
    param = (lambda t, name: step_param(t, name, (dim,), "(dim,)", ref)) if step else (
        lambda t, name: _f32_param(t, name, (dim,), "(dim,)", ref, ref_name))
    if D is not None:
        param(D, "D")
    if z is not None:
        _like(z, "z", ref, ref_name)
    if bias is not None:
        param(bias, bias_name)


def _overlap_refused(state):
    """The C++ CheckInPlace rule: state is updated in place, so its elements must not overlap."""
    _value(not self_overlapping(state), "state is updated in place but its elements overlap (an expand()ed or "
           "broadcast view, strides ", list(state.stride()), " for shape ", _shape(state),
           "); pass a tensor with its own memory (e.g. .clone())")


def _first_bytes(t, state):
    """The byte addresses of t's and state's first elements, or None where they cannot share
    memory (storages apart: the common case, answered without looking at strides). Tensors without
    memory (meta, fake): views of one storage only, by their offsets in it."""
    try:
        if not (t.is_meta or state.is_meta):
            ts, ss = t.untyped_storage(), state.untyped_storage()
            p, q = ts.data_ptr(), ss.data_ptr()
            if p + ts.nbytes() <= q or q + ss.nbytes() <= p:
                return None
            return t.data_ptr(), state.data_ptr()
    except RuntimeError:  # a fake tensor's data pointer
        pass
    if not torch._C._is_alias_of(t, state):
        return None
    return t.storage_offset() * t.element_size(), state.storage_offset() * state.element_size()


def state_alias_refused(t, name, state, where="step", state_name="state"):
    """t is read through a copy the wrapper makes (a cast, heads folded by reshape, narrowed row
    indices): the op's alias check (selscan's) sees the copy, and updating state in place would
    change t behind the caller's back (issue 38). Refused where t shares a byte with state, in the
    op's words (C++ Step refuses its own copies so: a full broadcast, strided indices)."""
    # eager only: skipped while torch.compile traces (these calls would break the graph); another
    # device (another address space): refused by the op, naming t
    if torch.compiler.is_compiling() or t.get_device() != state.get_device() or t.is_meta != state.is_meta:
        return
    first = _first_bytes(t, state)
    if first is not None and t.numel() and state.numel() and _C.elements_meet(
            first[0], t.element_size(), tuple(t.shape), t.stride(), first[1], state.element_size(), tuple(state.shape),
            state.stride()):  # bindings/common's ElementsMeet, the rule C++ CheckReadCopy applies
        raise ValueError(f"selscan: {where}: an output overlaps an input, another output or the workspace "
                         f"[SELSCAN_ERR_ALIAS] (argument '{state_name}': overlaps {name}; updating {state_name} in "
                         f"place would change {name}: pass {name} with its own memory, e.g. {name}.clone())")


def self_overlapping(t):
    """True when t's elements overlap each other (a dim of size > 1 with stride 0: an expand()ed or
    broadcast view) and t has elements: the C++ CheckInPlace rule for in-place outputs."""
    if t.numel() == 0:
        return False
    return any(sz > 1 and st == 0 for sz, st in zip(t.shape, t.stride()))


# ---- the ops' rules (fake kernels) -------------------------------------------------------------


def check_scan(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens):
    """selscan::fwd / bwd's argument rules (C++ CheckScan); returns
    (batch, dim, L, N, rows, n_seqs)."""
    _value(u.dim() == 3, "u must have shape (batch, dim, L), got ", _shape(u))
    _scan_dtype(u, "u")
    _type(not A.is_complex(), "complex A is not supported (real A only)")
    _value(A.dim() == 2, "A must have shape (dim, N), got ", _shape(A))
    if u.shape[1] != A.shape[0]:  # the one of u and A that disagrees with the rest is named
        u_transposed = u.shape[2] == A.shape[0]
        delta_agrees = delta.dim() == 3 and tuple(delta.shape) == tuple(u.shape)
        _value(not u_transposed and delta_agrees, "u must have shape (batch, dim, L) with dim = ", A.shape[0],
               " (A's first dim), got ", _shape(u),
               " (a (batch, L, dim) tensor: pass u.transpose(1, 2))" if u_transposed else "")
        _value(False, "A must have shape (dim, N) with dim = ", u.shape[1], " (u's dim), got ", _shape(A))
    batch, dim, L = u.shape
    _like(delta, "delta", u, "u")
    _f32(A, "A")
    _same_device(u, "u", A, "A")
    N = A.shape[1]

    def bc(t, name):
        _same_device(u, "u", t, name)
        if t.dim() == 2:
            _shape_is(t, (dim, N), name, "(dim, N) (fixed)")
            _f32(t, name)
            return None
        o = 1 if t.dim() == 3 else 2
        _value(t.dim() in (3, 4) and t.shape[0] == batch and t.shape[o] == N and t.shape[o + 1] == L, name,
               " must have shape (dim, N), (batch, N, L) or (batch, G, N, L) with batch = ", batch, ", N = ", N,
               ", L = ", L, ", got ", _shape(t))
        _type(t.dtype == u.dtype, "variable ", name, " must have u's dtype ", u.dtype, ", got ", t.dtype)
        return t.shape[1] if t.dim() == 4 else 1

    gB, gC = bc(B, "B"), bc(C, "C")
    G = 1
    if gB is not None:
        G = gB
    if gC is not None:
        if gB is not None:
            _value(gC == G, "C has ", gC, " groups but B has ", G)
        else:
            G = gC
    _value(G >= 1 and dim % G == 0, "the group count of B/C (", G, ") must divide dim (", dim, ")")
    _optional_params(D, z, delta_bias, "delta_bias", dim, u, "u")
    rows, n_seqs = batch, 0
    if cu_seqlens is not None:
        _value(cu_seqlens.device.type == "cpu", "cu_seqlens must be a CPU tensor (its values are validated on the "
               "host), got one on ", cu_seqlens.device)
        _type(cu_seqlens.dtype == torch.int64, "cu_seqlens must be int64, got ", cu_seqlens.dtype)
        _value(cu_seqlens.dim() == 1 and cu_seqlens.shape[0] >= 2,
               "cu_seqlens must have shape (n_seqs + 1,) with n_seqs >= 1, got ", _shape(cu_seqlens))
        _value(batch == 1, "packed sequences (cu_seqlens) need batch 1, got batch ", batch)
        n_seqs = cu_seqlens.shape[0] - 1
        rows = n_seqs
    if h0 is not None:
        _f32_param(h0, "h0", (rows, dim, N), "(n_seqs, dim, N)" if cu_seqlens is not None else "(batch, dim, N)", u,
                   "u")
    return batch, dim, L, N, rows, n_seqs


def check_fwd(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens):
    """selscan::fwd's rules (C++ Forward)."""
    sizes = check_scan(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens)
    batch, dim, L, N = sizes[:4]
    empty = batch == 0 or dim == 0 or L == 0
    _value(N > 0 or empty, "A must have N >= 1 states, got ", _shape(A))
    return sizes


def check_bwd(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, dy, dh_last, checkpoint, grad_mask):
    """selscan::bwd's rules (C++ Backward)."""
    sizes = check_scan(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens)
    _, dim, _, N, rows, _ = sizes
    _value(len(grad_mask) == 9, "grad_mask must have 9 entries, got ", len(grad_mask))
    _like(dy, "dy", u, "u")
    if dh_last is not None:
        _f32_param(dh_last, "dh_last", (rows, dim, N), "last_state's shape", u, "u")
    _type(checkpoint.numel() == 0 or checkpoint.dtype == _F32, "checkpoint must be float32, got ", checkpoint.dtype)
    # a meta checkpoint among real tensors lands here: refused, never answered with empty memory
    _same_device(u, "u", checkpoint, "checkpoint")
    return sizes


def check_step(state, x, dt, A, B, C, D, z, dt_bias, state_index):
    """selscan::step's rules (C++ Step): single-head shapes, state (n_cache, dim, N)."""
    _value(x.dim() == 2, "x must have shape (batch, dim), got ", _shape(x))
    _scan_dtype(x, "x")
    _value(state.dim() == 3, "state must have shape (n_cache, dim, N), got ", _shape(state))
    _type(state.dtype in (_F32, x.dtype), "state must be float32 or x's dtype ", x.dtype, " (updated in place), got ",
          state.dtype)
    _same_device(x, "x", state, "state")
    _overlap_refused(state)
    _type(not A.is_complex(), "complex A is not supported (real A only)")
    if x.shape[1] != state.shape[1]:
        state_agrees_with_A = A.dim() == 2 and A.shape[0] == state.shape[1]
        _value(not state_agrees_with_A, "x must have shape (batch, dim) with dim = ", state.shape[1],
               " (state's and A's dim), got ", _shape(x))
        _value(False, "state must have shape (n_cache, dim, N) with dim = ", x.shape[1], " (x's dim), got ",
               _shape(state))
    batch, dim = x.shape
    n_cache, N = state.shape[0], state.shape[2]
    _like(dt, "dt", x, "x")
    _f32_param(A, "A", (dim, N), "(dim, N)", x, "x")

    def bc(t, name):
        ok = (t.dim() == 2 and t.shape[0] == batch and t.shape[1] == N) or (
            t.dim() == 3 and t.shape[0] == batch and t.shape[2] == N)
        _value(ok, name, " must have shape (batch, N) or (batch, ngroups, N) with batch = ", batch, ", N = ", N,
               ", got ", _shape(t))
        _type(t.dtype == x.dtype, name, " must have x's dtype ", x.dtype, ", got ", t.dtype)
        _same_device(x, "x", t, name)
        return t.shape[1] if t.dim() == 3 else 1

    G = bc(B, "B")
    gC = bc(C, "C")
    _value(gC == G, "C has ", gC, " groups but B has ", G)
    _value(G >= 1 and dim % G == 0, "ngroups of B/C (", G, ") must divide dim (", dim, ")")
    _optional_params(D, z, dt_bias, "dt_bias", dim, x, "x", step=True)
    if state_index is not None:
        _shape_is(state_index, (batch,), "state_batch_indices", "(batch,)")
        _type(state_index.dtype == torch.int32, "state_batch_indices must be int32 here (the Python wrapper "
              "converts other integer types), got ", state_index.dtype)
        _same_device(x, "x", state_index, "state_batch_indices")
    else:
        _value(n_cache == batch, "state must have shape (batch, dim, N) with batch = ", batch,
               " without state_batch_indices, got ", _shape(state))
    _value(batch == 0 or dim == 0 or N > 0, "state must have N >= 1, got ", _shape(state))


# selscan.h's SELSCAN_CONV_MAX_WIDTH, from the extension (the C++ ops refuse wider weights in the
# same words; test_conv_fake_width_matches_the_op checks the two agree)
CONV_MAX_WIDTH = _C.CONV_MAX_WIDTH


def _conv_width(weight, dim):
    _value(weight.dim() == 2 and weight.shape[0] == dim, "weight must have shape (dim, width) with dim = ", dim,
           ", got ", _shape(weight))
    W = weight.shape[1]
    if not 2 <= W <= CONV_MAX_WIDTH:
        raise NotImplementedError(f"selscan: the conv width (weight.shape[1]) must be 2 .. {CONV_MAX_WIDTH}, got {W}")
    return W


def check_conv(x, weight, bias, init_state, cu_seqlens):
    """selscan::conv_fwd / conv_bwd's rules (C++ CheckConv): the conv's fake kernels refuse what the
    op refuses, a meta tensor among real ones included (issue 38: they returned an output)."""
    _value(x.dim() == 3, "x must have shape (batch, dim, seqlen), got ", _shape(x))
    _scan_dtype(x, "x")
    batch, dim, _ = x.shape
    W = _conv_width(weight, dim)
    _f32(weight, "weight")
    _same_device(x, "x", weight, "weight")
    if bias is not None:
        _f32_param(bias, "bias", (dim,), "(dim,)", x, "x")
    rows = batch
    if cu_seqlens is not None:
        _value(cu_seqlens.device.type == "cpu", "cu_seqlens must be a CPU tensor, got one on ", cu_seqlens.device)
        _type(cu_seqlens.dtype == torch.int64, "cu_seqlens must be int64, got ", cu_seqlens.dtype)
        _value(cu_seqlens.dim() == 1 and cu_seqlens.shape[0] >= 2,
               "cu_seqlens must have shape (n_seqs + 1,) with n_seqs >= 1, got ", _shape(cu_seqlens))
        _value(batch == 1, "packed sequences (cu_seqlens) need batch 1, got batch ", batch)
        rows = cu_seqlens.shape[0] - 1
    if init_state is not None:
        _shape_is(init_state, (rows, dim, W - 1), "initial_states",
                  "(n_seqs, dim, width - 1)" if cu_seqlens is not None else "(batch, dim, width - 1)")
        _type(init_state.dtype == x.dtype, "initial_states must have x's dtype ", x.dtype, ", got ", init_state.dtype)
        _same_device(x, "x", init_state, "initial_states")
    return rows, W


def check_conv_step(state, x, weight, bias, state_index):
    """selscan::conv_step's rules (C++ ConvStep), for its fake kernel."""
    _value(x.dim() in (2, 3), "x must have shape (batch, dim) or (batch, dim, seqlen), got ", _shape(x))
    batch, dim = x.shape[0], x.shape[1]
    _scan_dtype(x, "x")
    W = _conv_width(weight, dim)
    step_param(weight, "weight", (dim, W), "(dim, width)", x)
    _value(state.dim() == 3 and state.shape[1] == dim and state.shape[2] >= W - 1,
           "conv_state must have shape (batch, dim, state_len) with dim = ", dim, " and state_len >= width - 1 = ",
           W - 1, ", got ", _shape(state))
    _type(state.dtype == x.dtype, "conv_state must have x's dtype ", x.dtype, " (it is updated in place), got ",
          state.dtype)
    _same_device(x, "x", state, "conv_state")
    if bias is not None:
        step_param(bias, "bias", (dim,), "(dim,)", x)
    if state_index is not None:
        _shape_is(state_index, (batch,), "conv_state_indices", "(batch,)")
        _type(state_index.dtype == torch.int32, "conv_state_indices must be int32 here (the Python wrapper "
              "converts int64)")
        _same_device(x, "x", state_index, "conv_state_indices")
    else:
        _value(state.shape[0] == batch, "conv_state must have batch = ", batch, " rows without conv_state_indices, "
               "got ", _shape(state))


# ---- the wrappers' rules: what is cast, what is refused ------------------------------------------


def tensor_arg(t, name, optional=False):
    """t must be a tensor (or None where optional)."""
    if t is None and optional:
        return
    _type(isinstance(t, torch.Tensor), name, " must be a torch.Tensor", " or None" if optional else "",
          ", got ", type(t).__name__)


def cast(t, name, dtype, state=None):
    """t in dtype: a floating-point tensor of another dtype is cast (t.to(dtype), rounding to
    nearest; autograd flows through the cast); complex, integer and bool tensors are refused.
    state: the decode step's in-place state, which t (read through the copy) may not overlap."""
    if t.dtype == dtype:
        return t
    tensor_arg(t, name)
    _type(t.is_floating_point(), name, " must be a real floating-point tensor (it is cast to ", dtype,
          "), got ", t.dtype)
    if state is not None:
        state_alias_refused(t, name, state)
    return t.to(dtype)


def host_offsets(cu_seqlens):
    """cu_seqlens as the op takes it: an int64 CPU tensor (values checked by the op). A list / tuple
    of Python ints or an integer tensor (a CUDA one is copied back: a sync); floats, bools,
    complex and meta tensors are refused."""
    if isinstance(cu_seqlens, torch.Tensor):
        _value(cu_seqlens.device.type != "meta", "cu_seqlens is a meta tensor, but its values are read on the "
               "host: pass a CPU tensor or a list of ints")
        _type(cu_seqlens.dtype in _INDEX_DTYPES, "cu_seqlens must be an integer tensor (int64 offsets), got ",
              cu_seqlens.dtype)
        # selscan validates the offsets on the host: a CUDA tensor is copied back (a sync)
        return cu_seqlens.to(device="cpu", dtype=torch.int64)
    _type(isinstance(cu_seqlens, (list, tuple)), "cu_seqlens must be a tensor or a list of ints, got ",
          type(cu_seqlens).__name__)
    for v in cu_seqlens:
        _type(isinstance(v, int) and not isinstance(v, bool), "cu_seqlens must hold ints, got ", type(v).__name__,
              " ", repr(v))
        _value(-(2**63) <= v < 2**63, "cu_seqlens entry ", v, " does not fit int64")
    return torch.tensor(list(cu_seqlens), dtype=torch.int64)


def int_arg(t, name, shape, what):
    """t an integer tensor of shape shape (what: its description), e.g. the conv update's cache_seqlens."""
    tensor_arg(t, name)
    _type(t.dtype in _INDEX_DTYPES, name, " must be an integer tensor, got ", t.dtype)
    _shape_is(t, shape, name, what)


def state_rows(idx, n_cache, name="state_batch_indices", where="step", state="state", state_tensor=None):
    """State row indices as the ops take them: int32 on their device. The rule of the decode
    step's state_batch_indices and the conv update's conv_state_indices (name: the caller's
    argument, where: the op, state: the cache it indexes). Integer dtypes only; checked before
    narrowing: on the CPU every entry must be below n_cache (the op also refuses a row used
    twice); negative entries are padding (made -1). On other devices (no sync) an entry at or past
    n_cache becomes an out-of-range row, which selscan's CUDA kernels treat as padding."""
    tensor_arg(idx, name)
    _type(idx.dtype in _INDEX_DTYPES, name, " must be an integer tensor, got ", idx.dtype)
    if idx.dtype == torch.int32:
        return idx
    if state_tensor is not None:  # narrowed below: a copy
        state_alias_refused(idx, name, state_tensor, where, state)
    if idx.device.type == "cpu" and idx.numel() > 0:
        hi = int(idx.max())
        if hi >= n_cache:
            _refuse_shape(where, name, f"not below n_cache (entry {int(idx.argmax())} is {hi}, "
                          f"n_cache = {n_cache}, state's first dim; negative entries are padding)")
    _value(n_cache <= _INT32_MAX, state, " has ", n_cache, " rows, more than ", name, "' int32 rows reach")
    if idx.dtype == torch.int64:
        idx = idx.clamp(min=-1, max=_INT32_MAX)
    return idx.to(torch.int32)


def step_state_rank(state, x, A):
    """The step's form is the state's rank (3: single head, 4: multi-head), except where x and A
    both have the other form's ranks: then the state is the odd one out and is named (issue 38: a
    3-D state among Mamba-2 shapes blamed x)."""
    nd = state.dim()
    _value(nd in (3, 4), "state must have shape (batch, dim, N) or (batch, nheads, hdim, N), got ", _shape(state))
    if not (isinstance(x, torch.Tensor) and isinstance(A, torch.Tensor)):
        return  # named where it is checked
    if nd == 3 and x.dim() == 3 and A.dim() == 3:
        _value(False, "state must have shape (batch, nheads, hdim, N) for the multi-head x ", _shape(x),
               " (batch, nheads, hdim) and A ", _shape(A), " (nheads, hdim, N), got ", _shape(state))
    if nd == 4 and x.dim() == 2 and A.dim() == 2:
        _value(False, "state must have shape (batch, dim, N) for the single-head x ", _shape(x), " (batch, dim) and A ",
               _shape(A), " (dim, N), got ", _shape(state))


def fold_heads(state, x, dt, A, B, C, D, z, dt_bias):
    """The multi-head step's shapes (Mamba-2: state (batch, nheads, hdim, N), x / dt / z (batch,
    nheads, hdim), A (nheads, hdim, N), D / dt_bias (nheads, hdim), B / C (batch, ngroups, N) with
    ngroups dividing nheads) checked in the caller's names, then the heads folded into channels:
    state as a view (it is updated in place: never a copy; refused where (nheads, hdim) cannot be
    merged), the others by reshape (a copy where their dims do not merge: one overlapping state is
    refused then, as the op refuses the tensors it sees)."""
    step_state_rank(state, x, A)
    n_cache, nheads, hdim, N = state.shape

    def want(t, name, shape, what):
        tensor_arg(t, name)
        _value(tuple(t.shape) == tuple(shape), name, " must have shape ", what, " = ", list(shape),
               " for a (batch, nheads, hdim, N) state, got ", _shape(t))

    tensor_arg(x, "x")
    _value(x.dim() == 3 and x.shape[1:] == (nheads, hdim), "x must have shape (batch, nheads, hdim) with nheads = ",
           nheads, ", hdim = ", hdim, " for a (batch, nheads, hdim, N) state, got ", _shape(x))
    batch = x.shape[0]
    want(dt, "dt", x.shape, "x's shape")
    if z is not None:
        want(z, "z", x.shape, "x's shape")
    want(A, "A", (nheads, hdim, N), "(nheads, hdim, N)")
    if D is not None:
        want(D, "D", (nheads, hdim), "(nheads, hdim)")
    if dt_bias is not None:
        want(dt_bias, "dt_bias", (nheads, hdim), "(nheads, hdim)")
    for t, name in ((B, "B"), (C, "C")):
        tensor_arg(t, name)
        _value(t.dim() in (2, 3) and t.shape[0] == batch and t.shape[-1] == N, name,
               " must have shape (batch, N) or (batch, ngroups, N) with batch = ", batch, ", N = ", N, ", got ",
               _shape(t))
        G = t.shape[1] if t.dim() == 3 else 1
        _value(G >= 1 and nheads % G == 0, name, " has ", G, " groups, which must divide nheads = ", nheads)
    _overlap_refused(state)
    state4 = state
    try:
        state = state.view(n_cache, nheads * hdim, N)
    except RuntimeError:
        _value(False, "state (batch, nheads, hdim, N) with strides ", list(state.stride()), " cannot be viewed as "
               "(batch, nheads * hdim, N): its nheads and hdim dims do not merge, and the step updates it in place "
               "(never a copy); pass a state whose hdim dim is laid out inside its nheads dim (e.g. .contiguous())")
    dim = nheads * hdim
    eager = not torch.compiler.is_compiling()

    def fold(t, name, *shape):
        f = t.reshape(*shape)
        if eager and not torch._C._is_alias_of(f, t):  # a copy: the op's alias check would see it, not t
            state_alias_refused(t, name, state4)
        return f

    x = fold(x, "x", batch, dim)
    dt = fold(dt, "dt", batch, dim)
    z = None if z is None else fold(z, "z", batch, dim)
    A = fold(A, "A", dim, N)
    D = None if D is None else fold(D, "D", dim)
    dt_bias = None if dt_bias is None else fold(dt_bias, "dt_bias", dim)
    return state, x, dt, A, D, z, dt_bias
