"""selscan's gated RMS norm (mamba_ssm's RMSNormGated without bias) as one op each way.

The ops torch.ops.selscan.norm_fwd / norm_bwd are registered in C++ (csrc/norm.cpp); this module adds
their autograd (the Autograd key), fake kernels (torch.compile, meta tensors) and gated_rms_norm, which
the Mamba-2 layer (ssd.py) and the RMSNormGated integration call. The math is selscan.h's >>norm-api:
over groups of group_size consecutive channels, in float32,

    norm_before_gate:  out = norm(y) * w * silu(z)       else:  out = norm(y * silu(z)) * w
    norm(u) = u / sqrt(mean(u^2) + eps),                 z None: out = norm(y) * w

out rounded to y's dtype. One pass over y and z (the composition of torch ops it replaces took about
seven, and autograd's backward as many again: bench/NOTES.md SSD-torch-v4).
"""
import math
import numbers

import torch

from . import _C  # noqa: F401  (loading the extension registers torch.ops.selscan)
from . import _checks
from . import _LIB  # the package's Autograd-key kernels (__init__.py)

_ops = torch.ops.selscan
_norm_fwd = _ops.norm_fwd.default
_norm_bwd = _ops.norm_bwd.default
_OP_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Where the Mamba-2 layer (ssd._gated_rms_norm: mamba_split_conv1d_scan_combined, the RMSNormGated integration)
# takes the op instead of the composition of torch ops it replaces (_composition, SSD-torch-v3's): the CPU (its
# vector path, SSD-torch-v5: the 130m layer 1.7-2.5 ms faster at 1 x 512 on the 2-core VM, measured before v5b's
# mends, which made the norm's own backward ~0.4 ms slower) and CUDA (SSD-torch-v4:
# bench/NOTES.md). The op itself runs wherever it is called (its tests).
LAYER_DEVICES = {"cpu", "cuda"}


# ---- fake (meta) kernels ---------------------------------------------------------------------


@torch.library.register_fake("selscan::norm_fwd")
def _norm_fwd_fake(y, z, weight, group_size, eps, norm_before_gate):
    _checks.check_op("norm_fwd", y, z, weight, norm=(group_size, eps, norm_before_gate))  # the C++ op's check
    return torch.empty_like(y)


@torch.library.register_fake("selscan::norm_bwd")
def _norm_bwd_fake(y, z, weight, dout, group_size, eps, norm_before_gate, grad_mask):
    _checks.check_op("norm_bwd", y, z, weight, dout, norm=(group_size, eps, norm_before_gate))
    f32 = dict(dtype=torch.float32, device=y.device)
    return [
        torch.empty_like(y) if grad_mask[0] else torch.empty((0,), **f32),
        torch.empty_like(z) if grad_mask[1] and z is not None else torch.empty((0,), **f32),
        torch.empty((y.shape[2],), **f32) if grad_mask[2] else torch.empty((0,), **f32),
    ]


# ---- autograd ------------------------------------------------------------------------------------


def _composition(y, z, weight, group_size, eps, before):
    """The op's math as torch ops in float32 (differentiable twice): what a double backward differentiates."""
    yf = y.float()
    gate = None if z is None else torch.nn.functional.silu(z.float())
    if gate is not None and not before:
        yf = yf * gate
    yn = torch.nn.functional.rms_norm(yf.unflatten(-1, (-1, group_size)), (group_size,), eps=eps).flatten(-2)
    if weight is not None:
        yn = yn * weight
    if gate is not None and before:
        yn = yn * gate
    return yn.to(y.dtype)


class _Norm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, z, weight, group_size, eps, before):
        out = _checks.call_below(_norm_fwd, y, z, weight, group_size, eps, before)
        ctx.save_for_backward(y, z, weight)
        ctx.cfg = (group_size, eps, before)
        ctx.set_materialize_grads(False)
        return out

    @staticmethod
    def backward(ctx, dout):
        y, z, weight = ctx.saved_tensors
        need = [ctx.needs_input_grad[0], ctx.needs_input_grad[1] and z is not None,
                ctx.needs_input_grad[2] and weight is not None]
        if dout is None or not any(need):
            return (None,) * 6
        if torch.is_grad_enabled():
            # create_graph=True: the gradients must be differentiable again, which the fused backward is not;
            # the composition's graph, differentiated here (its first derivatives equal the op's to rounding)
            ins = [t for t, n in zip((y, z, weight), need) if n]
            with torch.enable_grad():
                out = _composition(y, z, weight, *ctx.cfg)
            g = iter(torch.autograd.grad(out, ins, dout, create_graph=True, allow_unused=True))
            return (*[next(g) if n else None for n in need], None, None, None)
        g = _checks.call_below(_norm_bwd, y, z, weight, dout, *ctx.cfg, [int(n) for n in need])
        return (*[g[i] if need[i] else None for i in range(3)], None, None, None)


def _norm_fwd_autograd(y, z, weight, group_size, eps, norm_before_gate):
    if _checks.requires_grad((y, z, weight)):
        _checks.no_func_transforms("selscan's gated RMS norm")
        return _Norm.apply(y, z, weight, group_size, eps, norm_before_gate)
    return _checks.call_below(_norm_fwd, y, z, weight, group_size, eps, norm_before_gate)


_norm_bwd_autograd = _checks.not_differentiable(_norm_bwd, "the gated RMS norm")
_LIB.impl("norm_fwd", _norm_fwd_autograd, "Autograd")
_LIB.impl("norm_bwd", _norm_bwd_autograd, "Autograd")
norm_fwd_call = _checks.direct(_norm_fwd, _norm_fwd_autograd)


_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check_args(y, z, weight, eps, group_size, norm_before_gate):
    """gated_rms_norm's own rules, before its folds and casts (the op checks what reaches it, in the folded
    shapes): tensors of a float dtype the math takes, z of y's shape, plain int / float / bool scalars."""
    _checks.tensor_arg(y, "y")
    _checks.tensor_arg(z, "z", optional=True)
    _checks.tensor_arg(weight, "weight", optional=True)
    for name, t in (("y", y), ("z", z), ("weight", weight)):
        if t is not None:
            _checks._type(t.dtype in _FLOATS, "argument '", name, "': the gated norm takes float16, bfloat16, float32 or "
                          "float64, got ", t.dtype)
    _checks._value(y.dim() >= 1, "argument 'y': the gated norm needs at least one dimension (the channels), got a "
                   "0-d tensor")
    if z is not None:
        _checks._value(z.shape == y.shape, "argument 'z': must have y's shape ", tuple(y.shape), ", got ",
                       tuple(z.shape))
    _checks._type(_checks.is_int(group_size), "argument 'group_size' must be an int, got ", type(group_size).__name__)
    _checks._type(isinstance(eps, numbers.Real) and not isinstance(eps, bool), "argument 'eps' must be a float, got ",
                  type(eps).__name__)
    _checks._type(isinstance(norm_before_gate, bool) or _checks.is_int(norm_before_gate),
                  "argument 'norm_before_gate' must be a bool, got ", type(norm_before_gate).__name__)


def gated_rms_norm(y, z, weight, eps, group_size, norm_before_gate):
    """mamba_ssm's RMSNormGated (no bias) over groups of group_size channels of y's last dimension, on
    selscan's op: norm(y) * w * silu(z) (norm_before_gate) or norm(y * silu(z)) * w, norm(y) * w with z None;
    out in y's dtype. y and z of any leading shape (folded into the op's (batch, L, dim); a 3-D y and z as
    they are, any strides: z a slice of the layer's zxbcdt). weight (any float dtype, None: 1) goes to the op
    in float32, its gradient comes back in its own dtype (autograd's cast). y and z of different dtypes, or
    of a dtype the op has no kernel for (float64), go to the op in float32 (the math is float32 anyway)."""
    _check_args(y, z, weight, eps, group_size, norm_before_gate)
    shape = y.shape
    dtype = y.dtype
    if group_size == 0:  # (the op's 0: dim; the composition of a double backward needs the size)
        group_size = shape[-1]
    if y.dtype not in _OP_DTYPES or (z is not None and z.dtype != y.dtype):
        y = y.float()
        z = None if z is None else z.float()
    if y.dim() != 3:
        rows = math.prod(shape[:-1])  # (not -1: a last size of 0 leaves it undetermined)
        y = y.reshape(1, rows, shape[-1])
        if z is not None:
            z = z.reshape(1, rows, shape[-1])
    w = None if weight is None else weight.float()
    out = norm_fwd_call(y, z, w, int(group_size), float(eps), bool(norm_before_gate))
    # the op's own tensor where nothing was folded (a view of it would be a view the caller could not change in
    # place where this runs inside an autograd Function: the layer's _Layer returns it)
    if out.shape != shape:
        out = out.reshape(shape)
    return out if out.dtype == dtype else out.to(dtype)
