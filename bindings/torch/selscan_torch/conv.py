"""selscan's causal depthwise conv1d (Mamba-1's conv before the scan) with causal_conv1d's API.

    from selscan_torch import causal_conv1d_fn, causal_conv1d_update

The ops torch.ops.selscan.conv_fwd / conv_bwd / conv_step are registered in C++ (csrc/conv.cpp);
this module adds their autograd (the Autograd key) and fake kernels (so
torch.compile(fullgraph=True) and CUDA graphs see the real output shapes and strides) and the two
functions of causal_conv1d 1.x with its signatures and semantics:

    y[b, d, t] = act(bias[d] + sum_k weight[d, k] * x[b, d, t - (W - 1) + k]),  act = silu or identity,

with x before t = 0 taken from initial_states (zeros without it). Widths 2 .. 4. x any strides
(channels-last x.transpose(1, 2) of a (batch, L, dim) tensor included, no copy); float32,
float16, bfloat16. The sum runs in float32.
"""
import torch

from . import _C  # noqa: F401  (loading the extension registers torch.ops.selscan)
from . import _checks
from . import _LIB  # the package's Autograd-key kernels (__init__.py)

__all__ = ["causal_conv1d_fn", "causal_conv1d_update"]

_ops = torch.ops.selscan
_conv_fwd = _ops.conv_fwd.default
_conv_bwd = _ops.conv_bwd.default
_conv_step = _ops.conv_step.default
_ACTIVATIONS = (None, "silu", "swish")


def width_supported(weight):
    """Whether selscan's conv takes weight's width (its last dimension): selscan.h's
    SELSCAN_CONV_MIN_WIDTH .. SELSCAN_CONV_MAX_WIDTH (2 .. 4); the ops refuse another with
    NotImplementedError. For callers that keep a model's own conv for other widths."""
    return _C.CONV_MIN_WIDTH <= weight.shape[-1] <= _C.CONV_MAX_WIDTH


# ---- fake (meta) kernels ---------------------------------------------------------------------


def _dense_in_order_of(t, dtype=None):
    """A dense tensor of t's sizes in t's memory order (strides sorted, largest first, size-1 dims
    as stride 0, ties in logical order): the C++ ops' NewInOrderOf."""
    dtype = t.dtype if dtype is None else dtype
    nd = t.dim()
    key = [0 if t.shape[i] == 1 else t.stride(i) for i in range(nd)]
    perm = sorted(range(nd), key=lambda i: -key[i])  # sorted() is stable: ties keep the logical order
    if perm == list(range(nd)):
        return torch.empty(t.shape, dtype=dtype, device=t.device)
    inv = [0] * nd
    for j, i in enumerate(perm):
        inv[i] = j
    return torch.empty([t.shape[i] for i in perm], dtype=dtype, device=t.device).permute(inv)


@torch.library.register_fake("selscan::conv_fwd")
def _conv_fwd_fake(x, weight, bias, init_state, cu_seqlens, silu, return_final_state, out_dim_major):
    _checks.check_op("conv_fwd", x, weight, bias, init_state, cu_seqlens)  # the C++ ops' check
    batch, dim, L = x.shape
    W = weight.shape[1]
    if out_dim_major:
        y = torch.empty((dim, batch, L), dtype=x.dtype, device=x.device).permute(1, 0, 2)
    else:
        y = _dense_in_order_of(x)
    rows = cu_seqlens.shape[0] - 1 if cu_seqlens is not None else batch
    fin = torch.empty((rows, dim, W - 1) if return_final_state else (0,), dtype=x.dtype, device=x.device)
    return y, fin


@torch.library.register_fake("selscan::conv_bwd")
def _conv_bwd_fake(x, weight, bias, init_state, cu_seqlens, dy, dfinal_state, silu, grad_mask):
    _checks.check_op("conv_bwd", x, weight, bias, init_state, cu_seqlens, dy, dfinal_state)
    batch, dim, L = x.shape
    W = weight.shape[1]
    rows = cu_seqlens.shape[0] - 1 if cu_seqlens is not None else batch
    f32 = dict(dtype=torch.float32, device=x.device)
    empty = lambda: torch.empty((0,), **f32)  # noqa: E731
    return [
        _dense_in_order_of(dy) if grad_mask[0] else empty(),  # dx in dy's memory order (the C++ op's rule)
        torch.empty((dim, W), **f32) if grad_mask[1] else empty(),
        torch.empty((dim,), **f32) if grad_mask[2] else empty(),
        torch.empty((rows, dim, W - 1), dtype=x.dtype, device=x.device) if grad_mask[3] else empty(),
    ]


@torch.library.register_fake("selscan::conv_step")
def _conv_step_fake(state, x, weight, bias, state_index, silu):
    _checks.check_op("conv_step", state, x, weight, bias, state_index)  # (an overlapping conv_state too)
    return _dense_in_order_of(x)


# ---- autograd: the Autograd-key kernels (the scan's pattern, __init__.py) --------------------------


class _Conv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, init_state, cu, silu, final, dim_major):
        y, fs = _checks.call_below(_conv_fwd, x, weight, bias, init_state, cu, silu, final, dim_major)
        ctx.save_for_backward(x, weight, bias, init_state, cu)
        ctx.silu = silu
        ctx.set_materialize_grads(False)
        return y, fs

    @staticmethod
    def backward(ctx, dy, dfinal):
        s = ctx.saved_tensors
        mask = [int(n) for n in ctx.needs_input_grad[:4]]
        if not any(mask):
            return (None,) * 8
        dy, dfinal = _checks.backward_cotangents(dy, dfinal, s[0], 3)
        g = conv_bwd_call(*s, dy, dfinal, ctx.silu, mask)  # (through conv_bwd's kernel: no double backward)
        return (*[g[i] if mask[i] else None for i in range(4)], None, None, None, None)


def _conv_fwd_autograd(x, weight, bias, init_state, cu_seqlens, silu, return_final_state, out_dim_major):
    if _checks.requires_grad((x, weight, bias, init_state)):
        _checks.no_func_transforms("selscan's causal conv1d")
        return tuple(_Conv.apply(x, weight, bias, init_state, cu_seqlens, silu, return_final_state, out_dim_major))
    return _checks.call_below(_conv_fwd, x, weight, bias, init_state, cu_seqlens, silu, return_final_state,
                              out_dim_major)


def _conv_step_autograd(state, x, weight, bias, state_index, silu):
    return _checks.inference_only("the conv update (causal_conv1d_update)", state,
                                  (("conv_state", state), ("x", x), ("weight", weight), ("bias", bias)),
                                  _conv_step, (state, x, weight, bias, state_index, silu))


_conv_bwd_autograd = _checks.not_differentiable(_conv_bwd, "causal_conv1d_fn")
_LIB.impl("conv_fwd", _conv_fwd_autograd, "Autograd")
_LIB.impl("conv_bwd", _conv_bwd_autograd, "Autograd")
_LIB.impl("conv_step", _conv_step_autograd, "Autograd")
# the package's calls of the ops (_checks.direct: the kernels above, without a dispatcher pass, in eager mode)
conv_fwd_call = _checks.direct(_conv_fwd, _conv_fwd_autograd)
conv_bwd_call = _checks.direct(_conv_bwd, _conv_bwd_autograd)
conv_step_call = _checks.direct(_conv_step, _conv_step_autograd)


# ---- causal_conv1d's API -----------------------------------------------------------------------


def _silu_flag(activation):
    if activation not in _ACTIVATIONS:  # causal_conv1d's exception type, with the argument named
        raise NotImplementedError(f"selscan: activation must be None, 'silu' or 'swish', got {activation!r} "
                                  "(argument 'activation')")
    return activation in ("silu", "swish")


def _weight2d(weight, keep=None):
    """weight as (dim, W); float32, or as it is where its dtype is keep (the update's x dtype)."""
    _checks.tensor_arg(weight, "weight")
    if weight.dim() == 3 and weight.shape[1] == 1:  # nn.Conv1d's (dim, 1, W)
        weight = weight.squeeze(1)
    return _f32(weight, keep, "weight")


def _f32(t, keep=None, name="bias"):
    """t float32, or as it is where its dtype is keep; another floating dtype cast, an integer,
    bool or complex one refused naming it (_checks.cast, the scan's rule)."""
    _checks.tensor_arg(t, name, optional=True)
    return None if t is None else (t if t.dtype in (torch.float32, keep) else _checks.cast(t, name, torch.float32))


def _runs_to_offsets(row):
    """seq_idx of one row (L,) -> (cu_seqlens int64 CPU, run ids, first run's id): a new
    sequence starts wherever the id changes."""
    ids = row.to(device="cpu", dtype=torch.int64)
    L = ids.shape[0]
    change = torch.nonzero(ids[1:] != ids[:-1]).flatten() + 1
    starts = torch.cat([torch.zeros(1, dtype=torch.int64), change])
    cu = torch.cat([starts, torch.tensor([L], dtype=torch.int64)])
    return cu, ids[starts]


def _conv_seq_idx(x, weight, bias, seq_idx, initial_states, silu):
    """seq_idx (batch, L) int: the conv restarts wherever the id changes along L (causal_conv1d
    compares ids inside each window: the same for ids that do not recur after a change, the
    usual packed layout); positions with a negative id give 0. initial_states, when given,
    continue each row's first sequence. Host sync (the run boundaries are read back)."""
    batch, dim, L = x.shape
    if seq_idx.shape != (batch, L):
        raise ValueError(f"selscan: seq_idx must have shape (batch, seqlen) = {(batch, L)}, got {tuple(seq_idx.shape)}")
    if batch == 0 or L == 0 or x.is_meta:  # no token (or no values, meta): the plain op's output (its checks, its shape)
        return conv_fwd_call(x, weight, bias, initial_states, None, silu, False, False)[0]
    W = weight.shape[1]
    outs = []
    for b in range(batch):
        cu, run_ids = _runs_to_offsets(seq_idx[b])
        init = None
        if initial_states is not None:
            n = cu.shape[0] - 1
            first = initial_states[b : b + 1]
            init = torch.cat([first, first.new_zeros((n - 1, dim, W - 1))]) if n > 1 else first
        y, _ = conv_fwd_call(x[b : b + 1], weight, bias, init, cu, silu, False, False)
        if bool((run_ids < 0).any()):  # 0 there, also where x is NaN or inf (a mask's product would keep a NaN)
            y = torch.where(seq_idx[b] >= 0, y, y.new_zeros(()))
        outs.append(y)
    return torch.cat(outs) if batch > 1 else outs[0]


def causal_conv1d_fn(x, weight, bias=None, seq_idx=None, initial_states=None, return_final_states=False,
                     final_states_out=None, activation=None, *, cu_seqlens=None):
    """causal_conv1d.causal_conv1d_fn on selscan's conv (same signature and results).

    x: (batch, dim, seqlen) any strides; weight: (dim, width), width 2 .. 4 (nn.Conv1d's
    (dim, 1, width) accepted); bias: (dim,); seq_idx: (batch, seqlen) int, packed sequences (the
    conv restarts where the id changes; negative ids give 0; no final states with it);
    initial_states: (batch, dim, width - 1); final_states_out: (batch, dim, width - 1) written in
    place when given; activation: None, "silu" or "swish". Returns out (x's shape and dtype) or
    (out, final_states). Autograd: x, weight, bias and initial_states (and through final_states).
    weight and bias are used in float32 (their gradients come back in their own dtype);
    initial_states is cast to x's dtype. cu_seqlens (keyword; selscan's, not causal_conv1d's): packed
    sequences as offsets, as selscan's scan takes them (x of batch 1; the offsets checked by the op's
    rules, selscan.h's), initial_states and final states one row a sequence; not with seq_idx.
    """
    silu = _silu_flag(activation)
    _checks.tensor_arg(x, "x")
    if return_final_states and final_states_out is not None:  # written after y: an input it overlaps would change
        _checks.tensor_arg(final_states_out, "final_states_out")
        for t, name in ((x, "x"), (weight, "weight"), (bias, "bias"), (initial_states, "initial_states")):
            if isinstance(t, torch.Tensor):
                _checks.state_alias_refused(t, name, final_states_out, "conv", "final_states_out")
    weight = _weight2d(weight)
    bias = _f32(bias)
    _checks.tensor_arg(initial_states, "initial_states", optional=True)
    if initial_states is not None and initial_states.dtype != x.dtype:
        initial_states = _checks.cast(initial_states, "initial_states", x.dtype)
    if seq_idx is not None:
        _checks.tensor_arg(seq_idx, "seq_idx")
        _checks.index_dtype(seq_idx, "seq_idx", ": int32 as causal_conv1d's")
        if cu_seqlens is not None:
            raise ValueError("selscan: seq_idx and cu_seqlens both given: pass one of them (argument 'seq_idx')")
        if return_final_states:
            raise ValueError("If seq_idx is not None, we don't return final_states_out")
        _checks.same_device("causal_conv1d_fn", "x", x, (("seq_idx", seq_idx),))  # its values are read back
        return _conv_seq_idx(x, weight, bias, seq_idx, initial_states, silu)
    cu = None if cu_seqlens is None else _checks.host_offsets(cu_seqlens)
    y, fin = conv_fwd_call(x, weight, bias, initial_states, cu, silu, bool(return_final_states), False)
    if not return_final_states:
        return y
    if final_states_out is not None:  # causal_conv1d's buffer: exactly final_states' shape, dtype, device
        _checks._value(final_states_out.shape == fin.shape and final_states_out.device == fin.device,
                       "final_states_out must have shape ", tuple(fin.shape), " on ", fin.device,
                       " (final_states'), got ", tuple(final_states_out.shape), " on ", final_states_out.device)
        _checks._type(final_states_out.dtype == fin.dtype, "final_states_out must be ", fin.dtype,
                      " (x's dtype, as final_states), got ", final_states_out.dtype)
        final_states_out.copy_(fin)
        fin = final_states_out
    return y, fin


def _update_circular(x3, conv_state, weight, bias, silu, cache_seqlens, idx):
    """The circular-buffer update (cache_seqlens): the W-1 entries before cache_seqlens %
    state_len are gathered, selscan's step runs on that window, and x is scattered back at
    cache_seqlens + t (mod state_len). idx: the rows as state_rows gives them (int32); negative
    or (CUDA, unchecked) out of range: padding, out 0, no state touched."""
    batch, dim, L = x3.shape
    W = weight.shape[1]
    state_len = conv_state.shape[-1]
    dev = x3.device
    _checks.int_arg(cache_seqlens, "cache_seqlens", (batch,), "(batch,)")
    if conv_state.shape[0] == 0:  # an empty cache: every row is padding (checked by the op), out 0
        return torch.zeros_like(x3)
    if idx is not None:
        idx = idx.to(device=dev, dtype=torch.int64)
        valid = (idx >= 0) & (idx < conv_state.shape[0])  # the op's padding rule
        rows = torch.where(valid, idx, torch.zeros_like(idx))
    else:
        valid = torch.ones(batch, dtype=torch.bool, device=dev)
        rows = torch.arange(batch, device=dev)
    seq = cache_seqlens.to(device=dev, dtype=torch.int64)
    pos = torch.remainder(seq[:, None] + torch.arange(-(W - 1), 0, device=dev)[None, :], state_len)
    window = conv_state[rows[:, None, None], torch.arange(dim, device=dev)[None, :, None], pos[:, None, :]]
    window = window.contiguous()
    step_index = torch.where(valid, torch.arange(batch, device=dev), torch.full_like(rows, -1)).to(torch.int32)
    y = _step(window, x3, weight, bias, step_index, silu)
    keep = min(L, state_len)  # later tokens overwrite earlier ones: write only the survivors
    wpos = torch.remainder(seq[:, None] + torch.arange(L - keep, L, device=dev)[None, :], state_len)
    sel = torch.nonzero(valid).flatten()  # host sync: padding rows must not be written
    if sel.numel():
        r, p = rows[sel], wpos[sel]
        conv_state[r[:, None, None], torch.arange(dim, device=dev)[None, :, None], p[:, None, :]] = \
            x3[sel][:, :, L - keep:].to(conv_state.dtype)
    return y


# The conv update's path during torch.onnx.export (ONNX has no in-place update; as selscan_torch's
# _register_onnx_step for the scan's step): selscan_torch.onnx registers an out-of-place op plus a
# copy into the state. None until then: the eager path never looks past this None.
_onnx_conv_step = None


def _register_onnx_conv_step(fn):
    """Registers fn(state, x, weight, bias, state_index, silu) -> y as causal_conv1d_update's path
    while torch.onnx.is_in_onnx_export(): fn updates state in place; weight / bias float32 (bias
    None or not), state_index int32 or None. None unregisters. Returns the previous one."""
    global _onnx_conv_step
    prev, _onnx_conv_step = _onnx_conv_step, fn
    return prev


def _step(state, x, weight, bias, idx, silu):
    if _onnx_conv_step is not None and torch.onnx.is_in_onnx_export():  # its ONNX op: float32 weight / bias
        return _onnx_conv_step(state, x, _f32(weight, name="weight"), _f32(bias), idx, silu)
    return conv_step_call(state, x, weight, bias, idx, silu)


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None,
                         conv_state_indices=None):
    """causal_conv1d.causal_conv1d_update on selscan's conv step: in place on conv_state.

    x: (batch, dim) or (batch, dim, seqlen); conv_state: (batch, dim, state_len) with state_len >=
    width - 1, x's dtype (or (n_cache, dim, state_len) with conv_state_indices (batch,) int: the
    state row of each batch row; negative: padding, out 0 and no state touched); weight (dim,
    width); bias (dim,); weight and bias float32 or x's dtype (both in x's dtype, as a float16 /
    bfloat16 model has them: read as they are, no conversion kernel; another floating dtype is cast
    to float32); cache_seqlens (batch,) int: conv_state is a circular buffer written at
    cache_seqlens % state_len. Returns out, x's shape and dtype. No autograd (inference).
    """
    silu = _silu_flag(activation)
    _checks.tensor_arg(x, "x")
    _checks.tensor_arg(conv_state, "conv_state")
    w_in, b_in = weight, bias
    weight = _weight2d(weight, x.dtype)
    bias = _f32(bias, x.dtype)
    # an input the op reads through a copy hides its overlap with conv_state from the op's alias
    # check: a cast weight / bias here, every input with cache_seqlens (the window below is a copy,
    # and x is scattered into conv_state), the narrowed indices (state_rows)
    circular = cache_seqlens is not None
    for t_in, t, name in ((x, x, "x"), (w_in, weight, "weight"), (b_in, bias, "bias"),
                          (cache_seqlens, cache_seqlens, "cache_seqlens"),
                          (conv_state_indices, conv_state_indices, "conv_state_indices")):
        if isinstance(t_in, torch.Tensor) and (circular or t.dtype != t_in.dtype):
            _checks.state_alias_refused(t_in, name, conv_state, "conv step", "conv_state")
    # the decode step's row rule: integers only, checked before narrowing to int32 (-2**63 is padding)
    idx = None if conv_state_indices is None else _checks.state_rows(
        conv_state_indices, conv_state.shape[0] if conv_state.dim() else 0, "conv_state_indices", "conv step",
        "conv_state", state_tensor=None if circular else conv_state)
    if circular:
        x3 = x.unsqueeze(-1) if x.dim() == 2 else x
        # the plain update's checks (the op's: shapes, dtypes, devices, state_len >= width - 1, rows in
        # range and used once) on no token, so nothing is written: the window below hides them from the op
        conv_step_call(conv_state, x3[:, :, :0] if x3.dim() == 3 else x3, weight, bias, idx, silu)
        y = _update_circular(x3, conv_state, weight, bias, silu, cache_seqlens, idx)
        return y.squeeze(-1) if x.dim() == 2 else y
    return _step(conv_state, x, weight, bias, idx, silu)
