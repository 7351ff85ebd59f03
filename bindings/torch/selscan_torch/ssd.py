"""Mamba-2's SSD scan with mamba_ssm's API (issue 40).

    from selscan_torch import mamba_chunk_scan_combined

The ops torch.ops.selscan.ssd_fwd / ssd_bwd are registered in C++ (csrc/ssd.cpp); this module adds
their autograd (the Autograd key), fake kernels (torch.compile, meta tensors) and
mamba_chunk_scan_combined with mamba_ssm's signature. The math is selscan.h's >>ssd-api: per head h
of P channels, with dt = clamp(softplus?(dt + dt_bias), dt_limit) and a = exp(dt * A[h]),

    S[p, :] = a * S[p, :] + dt * B[group(h)] * x[p],    out = (C . S[p, :] + D x[p]) * silu(z[p]),

computed step by step in float32 (mamba_ssm's chunking is one way of computing it; the results
differ by rounding only). Differences from mamba_ssm: chunk_size is accepted and not used (no
chunks); with seq_idx the first sequence receives initial_states whatever its id (mamba_ssm: the
tokens whose id is 0); cu_seqlens packs sequences by itself (no seq_idx needed) and
return_varlen_states gives each sequence's final state (float32; mamba_ssm: C's dtype).
CPU: selscan's fast SSD path. CUDA: selscan's SSD kernels (selscan_cuda.cuh >>ssd-cuda: dstate up to
512; the backward in chunks (>>ssd-chunk-bwd) without packing at 32 < dstate <= 128, else the walks in
double: the decay's gradient drifted off in float32, bench/RESULTS.md).
Both deterministic (the same gradients every call).
"""
import contextlib
import math
import numbers
import operator

import torch

from . import _C  # noqa: F401  (loading the extension registers torch.ops.selscan)
from . import _checks
from . import _LIB  # the package's Autograd-key kernels (__init__.py)
from . import norm
from .norm import gated_rms_norm

__all__ = ["mamba_chunk_scan_combined", "mamba_split_conv1d_scan_combined"]

_ops = torch.ops.selscan
_ssd_fwd = _ops.ssd_fwd.default
_ssd_bwd = _ops.ssd_bwd.default

def _limit(dt_min, dt_max):
    """The clamp's bounds for the check (None: (-inf, inf), no clamp): the C++ op's rule."""
    return None if (dt_min == -math.inf and dt_max == math.inf) else (dt_min, dt_max)


# ---- fake (meta) kernels ---------------------------------------------------------------------


@torch.library.register_fake("selscan::ssd_fwd")
def _ssd_fwd_fake(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_softplus, dt_min, dt_max,
                  return_final_states):
    _checks.check_op("ssd_fwd", x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens,
                     dt_limit=_limit(dt_min, dt_max))
    batch, _, H, P = x.shape
    rows = batch if cu_seqlens is None else cu_seqlens.shape[0] - 1
    f32 = dict(dtype=torch.float32, device=x.device)
    fin = torch.empty((rows, H, P, B.shape[3]), **f32) if return_final_states else torch.empty((0,), **f32)
    return torch.empty_like(x), fin


@torch.library.register_fake("selscan::ssd_bwd")
def _ssd_bwd_fake(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dout, dfinal_states,
                  dt_softplus, dt_min, dt_max, grad_mask):
    _checks.check_op("ssd_bwd", x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dout,
                     dfinal_states, dt_limit=_limit(dt_min, dt_max))
    if len(grad_mask) != 9:
        raise ValueError(f"selscan: grad_mask must have 9 entries, got {len(grad_mask)}")
    out = []
    for t, m in zip((x, dt, A, B, C, D, z, dt_bias, initial_states), grad_mask):
        out.append(torch.empty_like(t) if t is not None and m else torch.empty((0,), dtype=torch.float32,
                                                                               device=x.device))
    return out


# ---- autograd: the Autograd-key kernels (the scan's pattern, __init__.py) --------------------------


class _Ssd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dt, A, B, C, D, z, dt_bias, init, seq_idx, cu, softplus, dt_min, dt_max, final):
        out, fin = _checks.call_below(_ssd_fwd, x, dt, A, B, C, D, z, dt_bias, init, seq_idx, cu, softplus, dt_min,
                                      dt_max, final)
        _keep_scan_inputs(ctx, x, dt, A, B, C, D, z, dt_bias, init, seq_idx, cu, softplus, dt_min, dt_max)
        return out, fin

    @staticmethod
    def backward(ctx, dout, dfinal):
        return (*_scan_grads(ctx, dout, dfinal, ctx.needs_input_grad[:9]), *(None,) * 6)


def _keep_scan_inputs(ctx, *args):
    """What the scan's backward reads, kept on ctx: the op's 11 tensors (x .. cu_seqlens) saved, then
    (softplus, dt_min, dt_max); _Ssd's and _KeptScan's forward."""
    ctx.save_for_backward(*args[:11])
    ctx.args = args[11:]
    ctx.set_materialize_grads(False)


def _scan_grads(ctx, dout, dfinal, needs):
    """The scan's 9 input gradients (x, dt, A, B, C, D, z, dt_bias, initial_states; None where not needed)
    from ctx's saved inputs and ctx.args: _Ssd's backward and _KeptScan's."""
    s = ctx.saved_tensors
    mask = [int(n) for n in needs]
    if not any(mask):
        return (None,) * 9
    dout, dfinal = _checks.backward_cotangents(dout, dfinal, s[0], 4)
    g = ssd_bwd_call(*s, dout, dfinal, *ctx.args, mask)  # (through ssd_bwd's kernel: no double backward)
    return tuple(g[i] if mask[i] else None for i in range(9))


class _KeptScan(torch.autograd.Function):
    """The scan in the backward's recompute of mamba_split_conv1d_scan_combined (_Layer): its forward hands
    back the out and final states the layer's forward kept (no second scan: the scan's backward reads its
    inputs alone, the kept out feeds the norm), its backward is the scan's."""

    @staticmethod
    def forward(ctx, out, fin, x, dt, A, B, C, D, z, dt_bias, init, seq_idx, cu, softplus, dt_min, dt_max):
        _keep_scan_inputs(ctx, x, dt, A, B, C, D, z, dt_bias, init, seq_idx, cu, softplus, dt_min, dt_max)
        return out, fin

    @staticmethod
    def backward(ctx, dout, dfinal):
        return (None, None, *_scan_grads(ctx, dout, dfinal, ctx.needs_input_grad[2:11]), *(None,) * 5)


def _ssd_fwd_autograd(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_softplus, dt_min,
                      dt_max, return_final_states):
    if _checks.requires_grad((x, dt, A, B, C, D, z, dt_bias, initial_states)):
        _checks.no_func_transforms("selscan's SSD scan")
        return tuple(_Ssd.apply(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_softplus,
                                dt_min, dt_max, return_final_states))
    return _checks.call_below(_ssd_fwd, x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens,
                              dt_softplus, dt_min, dt_max, return_final_states)


_ssd_bwd_autograd = _checks.not_differentiable(_ssd_bwd, "mamba_chunk_scan_combined")
_LIB.impl("ssd_fwd", _ssd_fwd_autograd, "Autograd")
_LIB.impl("ssd_bwd", _ssd_bwd_autograd, "Autograd")
ssd_fwd_call = _checks.direct(_ssd_fwd, _ssd_fwd_autograd)
ssd_bwd_call = _checks.direct(_ssd_bwd, _ssd_bwd_autograd)


# ---- mamba_ssm's API ------------------------------------------------------------------------------


def _dt_bounds(dt_limit):
    """dt_limit as the op's (dt_min, dt_max): None is (-inf, inf), no clamp."""
    if dt_limit is None:
        return -math.inf, math.inf
    try:
        lo, hi = dt_limit
        return float(lo), float(hi)
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"selscan: dt_limit must be None or two numbers (min, max), got {dt_limit!r} "
                         "(argument 'dt_limit')") from e


def _chunk_size(chunk_size):
    """chunk_size as mamba_ssm takes it: None (selscan's; not used) or a positive int (mamba_ssm divides the
    length by it: 0 or a negative one fails there; selscan does not use it, but refuses what mamba_ssm
    cannot run, naming it, rather than accept a call that would fail on mamba_ssm)."""
    if chunk_size is None:
        return
    # (the reprs in the raise alone: under torch.compile(dynamic=True) an int may be symbolic, without a repr)
    if not _checks.is_int(chunk_size):
        raise TypeError(f"selscan: chunk_size must be None or a positive int, got {chunk_size!r} (argument 'chunk_size')")
    if not operator.index(chunk_size) > 0:
        raise ValueError(f"selscan: chunk_size must be None or a positive int, got {chunk_size!r} "
                         "(argument 'chunk_size')")


def _first_row_only(init, n_seqs):
    """mamba_ssm's rule for one initial state with several packed sequences: the first sequence starts
    from it, the others from 0 (n_seqs rows)."""
    return torch.cat([init, init.new_zeros((n_seqs - 1, *init.shape[1:]))])


def run_ids(seq_idx):
    """seq_idx (..., L) of an index dtype (_checks.index_dtype) renumbered 0, 1, ... along L at each change, as int32 of the
    same shape: only neighbours' equality counts (selscan.h's seq_idx rule), so the boundaries are kept
    whatever the values (narrowing would merge ids 2**32 apart)."""
    ids = torch.zeros(seq_idx.shape, dtype=torch.int32, device=seq_idx.device)
    if seq_idx.shape[-1] > 1:
        ids[..., 1:] = (seq_idx[..., 1:] != seq_idx[..., :-1]).cumsum(-1, dtype=torch.int32)
    return ids


def seq_idx_of(cu_seqlens, L, device):
    """The (1, L) int32 ids of packed sequences given by their offsets (sequence s's tokens get s): the
    seq_idx form of cu_seqlens (a list or an integer tensor), for comparing it with a seq_idx and for
    kernels that take only that form (mamba_ssm's SSD scan restarts on seq_idx, not cu_seqlens)."""
    cu = torch.as_tensor(cu_seqlens).to("cpu", torch.int64)
    lengths = (cu[1:] - cu[:-1]).clamp(min=0)
    ids = torch.repeat_interleave(torch.arange(len(lengths), dtype=torch.int32), lengths)
    return ids[:L].reshape(1, -1).to(device)


def conv_packing(seq_idx, cu_seqlens, L):
    """The packing keywords of selscan's causal_conv1d_fn for a transformers mixer's conv over L
    positions, from the model's seq_idx / cu_seqlens (mamba_ssm's keywords, describing the call's own
    positions; the SSD scan restarts where they say, so the conv must too): {"seq_idx": ...} where
    given, else {"cu_seqlens": ...}, else {}. An input longer than the keywords describe holds a cache's
    left context before the call's positions: it continues the first sequence. The values are the
    conv's to check (then the scan's, on the call's own positions), naming seq_idx / cu_seqlens."""
    if seq_idx is not None:
        n = seq_idx.shape[-1] if isinstance(seq_idx, torch.Tensor) and seq_idx.dim() == 2 else L
        if 0 < n < L:
            seq_idx = torch.cat([seq_idx[:, :1].expand(-1, L - n), seq_idx], 1)
        return {"seq_idx": seq_idx}
    if cu_seqlens is None:
        return {}
    cu = _checks.host_offsets(cu_seqlens)
    context = L - int(cu[-1]) if cu.dim() == 1 and cu.numel() > 1 else 0  # (another shape: the op refuses it)
    if context > 0:
        cu = torch.cat([cu[:1], cu[1:] + context])
    return {"cu_seqlens": cu}


def _args(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens):
    """The drop-in's arguments as the op takes them, by the package's rules (_checks): dt / B / C / z
    cast to x's dtype, A / D / dt_bias / initial_states to float32 (complex, integer and bool refused),
    seq_idx of an index dtype (_checks.index_dtype) as int32 (renumbered by its runs: run_ids), cu_seqlens a list or an
    integer tensor on any device as an int64 CPU tensor."""
    _checks.tensor_arg(x, "x")
    T = x.dtype
    args = dict(x=x)
    for name, t, dtype in (("dt", dt, T), ("A", A, torch.float32), ("B", B, T), ("C", C, T), ("D", D, torch.float32),
                           ("z", z, T), ("dt_bias", dt_bias, torch.float32),
                           ("initial_states", initial_states, torch.float32)):
        _checks.tensor_arg(t, name, optional=name in ("D", "z", "dt_bias", "initial_states"))
        args[name] = None if t is None else _checks.cast(t, name, dtype)
    if seq_idx is not None:
        _checks.tensor_arg(seq_idx, "seq_idx")
        _checks.index_dtype(seq_idx, "seq_idx", ": int32 as mamba_ssm's")
        if seq_idx.dtype != torch.int32 and seq_idx.dim() >= 1:
            seq_idx = run_ids(seq_idx)  # not narrowed: ids 2**32 apart would merge
    args["seq_idx"] = seq_idx
    args["cu_seqlens"] = None if cu_seqlens is None else _checks.host_offsets(cu_seqlens)
    return args


def _op_tensors(a, initial_states, seq_idx, cu_seqlens):
    """The ops' 11 tensor operands (x .. cu_seqlens) from _args' dict, with the packing as the caller settled it."""
    return (a["x"], a["dt"], a["A"], a["B"], a["C"], a["D"], a["z"], a["dt_bias"], initial_states, seq_idx, cu_seqlens)


def mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size=None, D=None, z=None, dt_bias=None, initial_states=None,
                              seq_idx=None, cu_seqlens=None, dt_softplus=False, dt_limit=(0.0, float("inf")),
                              return_final_states=False, return_varlen_states=False):
    """mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined on selscan's SSD scan.

    x (batch, L, nheads, headdim); dt (batch, L, nheads); A (nheads); B, C (batch, L, ngroups,
    dstate); D (nheads) or (nheads, headdim); z like x; dt_bias (nheads); initial_states (batch,
    nheads, headdim, dstate); seq_idx (batch, L) integer; cu_seqlens (n_seqs + 1) offsets of
    sequences packed along L (batch 1; a list or an integer tensor, any device: checked on the host).
    x in float32, float16 or bfloat16, dt / B / C / z cast to x's dtype; A, D, dt_bias,
    initial_states in any float dtype (used in float32). chunk_size: accepted for mamba_ssm's
    signature and not used.

    Returns out (x's dtype), and as mamba_ssm: (out, final_states) with return_final_states,
    (out, varlen_states) with return_varlen_states, (out, final_states, varlen_states) with both;
    the states float32. cu_seqlens without return_varlen_states packs the sequences (each starts
    from initial_states[i], or 0), and final_states are then each sequence's (n_seqs rows).
    Differentiable in x, dt, A, B, C, D, z, dt_bias, initial_states (and through final_states).
    """
    _chunk_size(chunk_size)  # (checked, then not used: no chunks, the recurrence step by step)
    a = _args(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, cu_seqlens)
    lo, hi = _dt_bounds(dt_limit)
    limit = _limit(lo, hi)
    if return_varlen_states and cu_seqlens is None:
        raise ValueError("selscan: return_varlen_states needs cu_seqlens (argument 'cu_seqlens')")
    cu_seqlens, seq_idx, init = a["cu_seqlens"], a["seq_idx"], a["initial_states"]
    also_seq_idx = None  # a seq_idx given beside cu_seqlens
    if cu_seqlens is not None:
        if seq_idx is not None:  # mamba_ssm takes both; selscan's op one: seq_idx checked here, its
            # boundaries against cu_seqlens' once the op has checked the offsets' values (below)
            _checks.check_op("ssd_fwd", a["x"], a["dt"], a["A"], a["B"], a["C"], a["D"], a["z"], a["dt_bias"], None,
                             seq_idx, None, dt_limit=limit)
            also_seq_idx, seq_idx = seq_idx, None
        if init is not None and init.dim() == 4 and init.shape[0] == 1 and cu_seqlens.dim() == 1 \
                and cu_seqlens.shape[0] > 2 and x.dim() == 4 and a["B"].dim() == 4 \
                and tuple(init.shape[1:]) == (x.shape[2], x.shape[3], a["B"].shape[3]):
            init = _first_row_only(init, cu_seqlens.shape[0] - 1)  # mamba_ssm's (1, ...) initial_states
    args = _op_tensors(a, init, seq_idx, cu_seqlens)
    want = bool(return_final_states or return_varlen_states)
    out, fin = ssd_fwd_call(*args, bool(dt_softplus), lo, hi, want)
    # (a meta seq_idx has no values to compare: the fake kernels check what meta tensors show)
    if cu_seqlens is not None and also_seq_idx is not None and not also_seq_idx.is_meta and not torch.equal(
            run_ids(seq_idx_of(cu_seqlens, x.shape[1], "cpu")), run_ids(also_seq_idx.reshape(1, -1).cpu())):
        raise ValueError("selscan: seq_idx's sequence boundaries differ from cu_seqlens' (argument 'seq_idx')")
    if not (return_final_states or return_varlen_states):
        return out
    if cu_seqlens is None:
        return out, fin
    # the state after the row's last step: the last non-empty sequence's (all empty: the last row's)
    cu = cu_seqlens.tolist()
    nonempty = [s for s in range(len(cu) - 1) if cu[s + 1] > cu[s]]
    last = nonempty[-1] if nonempty else len(cu) - 2
    # its own tensor, as mamba_ssm's: a view would see varlen_states' in-place writes (and keep every
    # sequence's state alive where only the last one is returned)
    final = fin[last:last + 1].clone()
    if return_final_states and return_varlen_states:
        return out, final, fin
    return (out, final) if return_final_states else (out, fin)


def _autocast_state(device_type):
    """(enabled, dtype) of autocast on device_type; (False, None) where the device has none (meta tensors)."""
    if not torch.amp.is_autocast_available(device_type):
        return False, None
    return torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)


def _autocast(device_type, enabled=False, dtype=None):
    """torch.autocast on device_type as given (default: off), its cache off (a null context where the device
    has no autocast). The cache: _Layer's backward casts new leaves each call, which a cache would keep for as
    long as an enclosing autocast region lasts (a backward inside one: a copy of each weight a step)."""
    if not torch.amp.is_autocast_available(device_type):
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=False)


def _gated_rms_norm(y, z, weight, eps, group_size, norm_before_gate):
    """mamba_ssm's RMSNormGated (no bias) over groups of group_size channels: norm(y) * w * silu(z)
    (norm_before_gate) or norm(y * silu(z)) * w, norm(y) * w without a gate (z None); out in y's dtype. On
    selscan's fused op (norm.py: one pass over y and z each way, where the composition of torch ops it
    replaced took seven: bench/NOTES.md SSD-torch-v4) on the devices in norm.LAYER_DEVICES (the CPU and
    CUDA: norm.py), else the composition; autocast off around it (both compute in float32)."""
    with _autocast(y.device.type):
        if y.device.type not in norm.LAYER_DEVICES:  # (norm.py: where the op is not taken yet, and why)
            return norm._composition(y, z, None if weight is None else weight.float(), group_size, eps, norm_before_gate)
        return gated_rms_norm(y, z, weight, eps, group_size, norm_before_gate)


def mamba_split_conv1d_scan_combined(zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, chunk_size=None,
                                     initial_states=None, seq_idx=None, dt_limit=(0.0, float("inf")),
                                     return_final_states=False, activation="silu", rmsnorm_weight=None,
                                     rmsnorm_eps=1e-6, outproj_weight=None, outproj_bias=None, headdim=None,
                                     ngroups=1, norm_before_gate=True, *, recompute=True):
    """mamba_ssm's mamba_split_conv1d_scan_combined (Mamba-2's layer after in_proj) on selscan's conv and
    SSD scan: zxbcdt (batch, L, 2 d_mlp + 2 dim + 2 ngroups dstate + nheads) split as [z0 | x0 (the
    SwiGLU MLP's halves, d_mlp each), z (dim), xBC (dim + 2 ngroups dstate), dt (nheads)]; the causal
    conv (conv1d_weight (dim + 2 ngroups dstate, width), activation) over xBC; the SSD scan with
    dt_softplus and dt_limit; then either the gate z inside the scan (rmsnorm_weight None) or mamba_ssm's
    gated group RMS norm (groups of dim / ngroups channels; norm_before_gate: norm(y) * w * silu(z), else
    norm(y * silu(z)) * w); the MLP's silu(z0) * x0 in front where d_mlp > 0; out_proj last (where
    outproj_weight is given). D (nheads) with headdim given, or (nheads, headdim). Returns out, or (out,
    final_states float32) with return_final_states. chunk_size: accepted, not used.

    A composition of selscan's ops and torch's (the scan as mamba_chunk_scan_combined runs it, CPU or CUDA).
    recompute (keyword, default True; mamba_ssm's fused function recomputes the conv and the norm in its
    backward): where a gradient is wanted, autograd keeps the layer's inputs and the scan's out (x's dtype,
    batch x L x nheads x headdim) and runs the rest of the layer again in the backward (its own autograd
    Function, _Layer, with the scan's forward kept; the kernels are deterministic, so the second run is bitwise
    the first): the conv's output, x / B / C / dt and the norm's float32 intermediates are not kept, at the
    cost of one more conv, norm and out_proj. False: autograd keeps them. Either allows a second backward
    (retain_graph=True) and create_graph=True (the gradients differentiable again, except through the scan's
    backward, which refuses). Under torch.compile the layer is traced whole either way (the compiler's
    partitioner chooses what its backward keeps and recomputes).
    """
    for name, t in (("zxbcdt", zxbcdt), ("conv1d_weight", conv1d_weight), ("A", A), ("D", D)):
        _checks.tensor_arg(t, name)
    _chunk_size(chunk_size)
    # every tensor on zxbcdt's device: the ops check their own operands, but the conv runs first (a seq_idx
    # elsewhere: its values read back) and the norm and out_proj are torch's (a meta weight: torch's words)
    _checks.same_device("mamba_split_conv1d_scan_combined", "zxbcdt", zxbcdt, (
        ("conv1d_weight", conv1d_weight), ("conv1d_bias", conv1d_bias), ("dt_bias", dt_bias), ("A", A), ("D", D),
        ("initial_states", initial_states), ("seq_idx", seq_idx), ("rmsnorm_weight", rmsnorm_weight),
        ("outproj_weight", outproj_weight), ("outproj_bias", outproj_bias)))
    if activation not in (None, "silu", "swish"):
        raise NotImplementedError(f"selscan: activation must be None, 'silu' or 'swish', got {activation!r} "
                                  "(argument 'activation')")
    if outproj_bias is not None and outproj_weight is None:
        raise ValueError("selscan: outproj_bias without outproj_weight (argument 'outproj_bias')")
    _checks._value(zxbcdt.dim() == 3, "zxbcdt must be (batch, L, channels), got shape ", tuple(zxbcdt.shape))
    # (named before any other tensor is held to zxbcdt's dtype: an integer zxbcdt is the argument at fault)
    _checks.float_arg(zxbcdt, "zxbcdt")
    _checks._value(conv1d_weight.dim() in (2, 3), "conv1d_weight must be (channels, width) or (channels, 1, "
                   "width), got shape ", tuple(conv1d_weight.shape))
    _checks._value(A.dim() == 1 and D.dim() in (1, 2), "A must be (nheads,) and D (nheads,) or (nheads, headdim), "
                   "got shapes ", tuple(A.shape), " and ", tuple(D.shape))
    nheads = A.shape[0]
    _checks._value(D.shape[0] == nheads, "D must have nheads = ", nheads, " (A's length) rows, got shape ",
                   tuple(D.shape), " (argument 'D')")
    if D.dim() == 2:
        headdim = D.shape[1]
    elif headdim is None:
        raise ValueError("selscan: headdim must be given with a (nheads,) D (argument 'headdim')")
    if not (_checks.is_int(headdim) and headdim >= 1):  # (reprs in the raise alone: _chunk_size says why)
        raise ValueError(f"selscan: headdim must be a positive int, got {headdim!r} (argument 'headdim')")
    if not (_checks.is_int(ngroups) and ngroups >= 1 and nheads % ngroups == 0):
        raise ValueError(f"selscan: ngroups must be a positive int dividing nheads = {nheads}, got {ngroups!r} "
                         "(argument 'ngroups')")
    headdim, ngroups = operator.index(headdim), operator.index(ngroups)
    if conv1d_weight.dim() == 3:  # nn.Conv1d's (channels, 1, width)
        conv1d_weight = conv1d_weight.squeeze(1)
    dim = nheads * headdim
    dstate = (conv1d_weight.shape[0] - dim) // ngroups // 2
    given = "'D', " if D.dim() == 2 else "'headdim', "  # where headdim came from: the user's argument
    if dstate <= 0 or conv1d_weight.shape[0] != dim + 2 * ngroups * dstate:  # zxbcdt's size not involved yet
        raise ValueError(f"selscan: conv1d_weight's {conv1d_weight.shape[0]} channels do not split as dim + 2 ngroups "
                         f"dstate (dstate >= 1) with dim = nheads * headdim = {nheads} * {headdim} = {dim}, ngroups = "
                         f"{ngroups} (arguments {given}'ngroups', 'conv1d_weight')")
    d_mlp2 = zxbcdt.shape[-1] - (2 * dim + 2 * ngroups * dstate + nheads)
    if d_mlp2 < 0 or d_mlp2 % 2:  # (zxbcdt or dim wrong: both named)
        raise ValueError(f"selscan: zxbcdt's last size {zxbcdt.shape[-1]} does not split as 2 d_mlp + 2 dim + 2 ngroups "
                         f"dstate + nheads with dim = {dim}, ngroups = {ngroups}, dstate = {dstate} (conv1d_weight's) "
                         f"(arguments 'zxbcdt', {given}'conv1d_weight')")
    if rmsnorm_weight is not None:
        _checks.float_arg(rmsnorm_weight, "rmsnorm_weight")
        _checks._value(tuple(rmsnorm_weight.shape) == (dim,), "rmsnorm_weight must have shape (nheads * headdim,) = ",
                       (dim,), ", got ", tuple(rmsnorm_weight.shape), " (argument 'rmsnorm_weight')")
        if not isinstance(rmsnorm_eps, numbers.Real) or isinstance(rmsnorm_eps, bool):
            raise TypeError(f"selscan: rmsnorm_eps must be a number, got {rmsnorm_eps!r} (argument 'rmsnorm_eps')")
        if not 0 <= rmsnorm_eps < math.inf:  # (NaN fails it too; comparisons: a symbolic float under compile)
            raise ValueError(f"selscan: rmsnorm_eps must be finite and >= 0, got {rmsnorm_eps!r} "
                             "(argument 'rmsnorm_eps')")
        rmsnorm_eps = float(rmsnorm_eps)  # (torch's rms_norm takes a float: a Fraction, a numpy float as one)
    if outproj_weight is not None:
        _checks.tensor_arg(outproj_weight, "outproj_weight")
        _checks.tensor_arg(outproj_bias, "outproj_bias", optional=True)
        width = d_mlp2 // 2 + dim  # the MLP's half and the scan's channels
        _checks._value(outproj_weight.dim() == 2 and outproj_weight.shape[1] == width,
                       "outproj_weight must be (out, d_mlp + nheads * headdim) = (out, ", width, "), got shape ",
                       tuple(outproj_weight.shape), " (argument 'outproj_weight')")
        _checks._value(outproj_bias is None or tuple(outproj_bias.shape) == (outproj_weight.shape[0],),
                       "outproj_bias must have shape (", outproj_weight.shape[0], ",) (outproj_weight's rows), got ",
                       None if outproj_bias is None else tuple(outproj_bias.shape), " (argument 'outproj_bias')")
        if not _autocast_state(zxbcdt.device.type)[0]:  # autocast casts both for the product
            for name, t in (("outproj_weight", outproj_weight), ("outproj_bias", outproj_bias)):
                _checks._type(t is None or t.dtype == zxbcdt.dtype, name, " must have zxbcdt's dtype ",
                              zxbcdt.dtype, " (the product's), got ", None if t is None else t.dtype,
                              " (argument '", name, "')")
    # (_LAYER_TENSORS' order) seq_idx among the tensors: the recompute's saved tensors check their versions (one
    # changed in place before the backward raises, where the recompute would run another packing)
    args = (zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, initial_states, seq_idx, rmsnorm_weight,
            outproj_weight, outproj_bias)
    shape = (d_mlp2, dim, nheads, headdim, ngroups, dstate)
    opts = (dt_limit, activation, rmsnorm_eps, norm_before_gate, bool(return_final_states))
    # (an optional argument of another type: the ops below refuse it, naming it)
    # (under torch.compile the layer is traced whole: the compiler's partitioner chooses what its backward keeps)
    if recompute and not torch.compiler.is_compiling() and _checks.requires_grad(
            [t for t in args if isinstance(t, torch.Tensor)]):
        _checks.no_func_transforms("mamba_split_conv1d_scan_combined")
        out, final = _Layer.apply(shape, opts, *args)
    else:
        out, final = _split_conv1d_scan_layer(*args, shape, opts)[0]
    return (out, final) if return_final_states else out


# causal_conv1d_fn's argument names -> mamba_split_conv1d_scan_combined's (the conv's x: zxbcdt's xBC slice)
_CONV_NAMES = {"weight": "conv1d_weight", "bias": "conv1d_bias", "x": "zxbcdt"}


def _split_conv1d_scan_layer(zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, initial_states, seq_idx,
                             rmsnorm_weight, outproj_weight, outproj_bias, shape, opts, kept=None):
    """mamba_split_conv1d_scan_combined's computation on its checked arguments (shape: the split's sizes):
    ((out, final states: the (0,) placeholder unless opts' last), (the scan's out, its final states)); kept:
    the scan's (out, final states) in _Layer's recompute, handed back instead of a second scan."""
    from .conv import causal_conv1d_fn

    d_mlp2, dim, nheads, headdim, ngroups, dstate = shape
    dt_limit, activation, rmsnorm_eps, norm_before_gate, want_final = opts
    zx0, z, xBC, dt = torch.split(zxbcdt, [d_mlp2, dim, dim + 2 * ngroups * dstate, nheads], dim=-1)
    try:
        xBC = causal_conv1d_fn(xBC.transpose(1, 2), conv1d_weight, conv1d_bias, seq_idx=seq_idx,
                               activation=activation).transpose(1, 2)
    except _checks.REFUSALS as e:  # the conv's refusal, in this function's names
        _checks.raise_renamed(e, _CONV_NAMES)
    x, B, C = torch.split(xBC, [dim, ngroups * dstate, ngroups * dstate], dim=-1)
    x = x.unflatten(-1, (nheads, headdim))
    B, C = B.unflatten(-1, (ngroups, dstate)), C.unflatten(-1, (ngroups, dstate))
    gate_in_scan = rmsnorm_weight is None
    # the scan as mamba_chunk_scan_combined runs it (dt_softplus, no cu_seqlens)
    a = _args(x, dt, A, B, C, D, z.unflatten(-1, (nheads, headdim)) if gate_in_scan else None,
              dt_bias, initial_states, seq_idx, None)
    lo, hi = _dt_bounds(dt_limit)
    sargs = _op_tensors(a, a["initial_states"], a["seq_idx"], None)
    scan = ssd_fwd_call(*sargs, True, lo, hi, want_final) if kept is None else _KeptScan.apply(*kept, *sargs, True,
                                                                                                  lo, hi)
    y = scan[0].flatten(-2)
    if not gate_in_scan:
        y = _gated_rms_norm(y, z, rmsnorm_weight, rmsnorm_eps, dim // ngroups, norm_before_gate)
    if d_mlp2:
        z0, x0 = zx0.chunk(2, dim=-1)
        y = torch.cat([torch.nn.functional.silu(z0) * x0, y], dim=-1)
    if outproj_weight is not None:
        y = torch.nn.functional.linear(y, outproj_weight, outproj_bias)
    return (y, scan[1]), scan


class _Layer(torch.autograd.Function):
    """mamba_split_conv1d_scan_combined with recompute: the forward keeps the layer's inputs and the scan's
    out and final states; the backward runs the layer again on them with the kept scan (_KeptScan: the
    conv, the norm, the MLP's gate and out_proj recomputed, the scan's forward not) and differentiates that
    graph (as torch.utils.checkpoint would, without its per-op dispatch: bench/NOTES.md SSD-torch-v3)."""

    @staticmethod
    def forward(ctx, shape, opts, *args):
        dev = args[0].device.type  # the backward runs where autocast is off: the forward's state goes with it
        ctx.amp = (dev, *_autocast_state(dev))
        (out, final), scan = _split_conv1d_scan_layer(*args, shape, opts)
        ctx.save_for_backward(*args, *scan)
        ctx.shape, ctx.opts = shape, opts
        ctx.set_materialize_grads(False)
        # the caller may change its outputs in place (`out += residual`), the kept ones must stay as they were:
        # copies where an output is the scan's own (a view of it: the gate in the scan, no MLP or out_proj)
        if out is scan[0] or out._base is scan[0]:
            out = out.clone()
        final = final.clone()
        # the final states come from the scan alone (not the norm or out_proj): differentiable as recompute=False's
        # are, only where one of the scan's inputs wants a gradient
        if not any(ctx.needs_input_grad[2 + i] for i in _STATE_INPUTS):
            ctx.mark_non_differentiable(final)
        return out, final

    @staticmethod
    def backward(ctx, dout, dfinal):
        *args, y, fin = ctx.saved_tensors
        needs = ctx.needs_input_grad[2:]
        # create_graph=True (grad mode on here): the recompute on views of the inputs themselves, its gradients
        # differentiable again as recompute=False's (through the scan's backward: its refusal); else on detached
        # leaves, the graph local to this backward. Either way each place its own tensor: one passed as several
        # arguments gets each place's part there (the grad of the input itself would come back whole at each)
        create_graph = torch.is_grad_enabled()
        with _autocast(*ctx.amp):
            with torch.enable_grad():
                leaves = [(t.view_as(t) if create_graph else t.detach().requires_grad_()) if n else t
                          for t, n in zip(args, needs)]
                (out, final), _ = _split_conv1d_scan_layer(*leaves, ctx.shape, ctx.opts, kept=(y, fin))
        pairs = [(o, g) for o, g in ((out, dout), (final, dfinal)) if g is not None and o.requires_grad]
        wanted = [t for t, n in zip(leaves, needs) if n]
        if not pairs or not wanted:
            return (None,) * (2 + len(args))
        g = iter(torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True,
                                     create_graph=create_graph))
        return (None, None, *[next(g) if n else None for n in needs])


# _Layer's tensor inputs (after shape and opts), in mamba_split_conv1d_scan_combined's `args` order, and the
# places of the scan's among them: the final states differentiable in those, as the scan's op has it
_LAYER_TENSORS = ("zxbcdt", "conv1d_weight", "conv1d_bias", "dt_bias", "A", "D", "initial_states", "seq_idx",
                  "rmsnorm_weight", "outproj_weight", "outproj_bias")
_STATE_INPUTS = tuple(_LAYER_TENSORS.index(n) for n in ("zxbcdt", "conv1d_weight", "conv1d_bias", "dt_bias", "A", "D",
                                                         "initial_states"))

