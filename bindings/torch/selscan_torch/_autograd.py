"""The ops' Autograd-key kernels, and the typed errors of the C++ kernels.

The extension is built on PyTorch's stable ABI (csrc/selscan_torch.h), which registers CPU / CUDA
kernels only: no autograd node, no grad-mode query, no inference tensors or version counters, and a
C++ exception reaches Python as RuntimeError. What needs those is here, registered on the Autograd
dispatch key of each op (so torch.ops.selscan.* and the package's functions behave alike):

- selscan::fwd / conv_fwd: with grad mode on and an input requiring grad, a node whose backward calls
  selscan::bwd / conv_bwd for the gradients autograd asks for. The scan's forward then always saves
  selscan's checkpoint (whatever save_checkpoint says), and on CUDA copies its L-strided operands to
  unit L strides where selscan's plan takes the problem fast only so (csrc/selscan_torch.h
  >>unit-l; the plan's answer through _C.fwd_unit_l): the copies run the forward and are what the
  backward reads. The backward copies an L-strided dy by the same answer.
- selscan::bwd / conv_bwd: not differentiable. With grad mode on and an input requiring grad (a
  backward with create_graph=True) their outputs hang off a node whose backward raises: a double
  backward is an error, never silent zeros.
- selscan::step / conv_step (in-place decode updates, inference only): an input requiring grad with
  grad mode on is refused before anything is written, an inference-tensor state outside inference
  mode too; the update bumps state's version counter (autograd's check on tensors it saved).
- Errors: the C++ kernels' messages start with the Python type they stand for ("ValueError: selscan:
  ..."); these kernels raise that type with the rest of the message. Under torch.inference_mode() the
  dispatcher skips the Autograd key: a refusal there is the RuntimeError, its message naming the type.

Host cost of a Python kernel against the C++ ones the package had before the stable ABI: bench/RESULTS.md
"Issue 42, sixth session" (bench/bench_autograd_bridge.py)."""
import torch

from . import _C
from ._checks import describe

_ops = torch.ops.selscan
_below = torch._C._AutoDispatchBelowAutograd
_TYPED = (("ValueError: ", ValueError), ("TypeError: ", TypeError), ("NotImplementedError: ", NotImplementedError))


def typed_error(e):
    """The exception a C++ kernel's RuntimeError stands for (its message's leading type name), or e."""
    msg = str(e)
    for prefix, cls in _TYPED:
        if msg.startswith(prefix):
            return cls(msg[len(prefix):])
    return e


def call(op, *args):
    """op(*args) with the C++ kernel's refusal raised as its type."""
    try:
        return op(*args)
    except RuntimeError as e:
        t = typed_error(e)
        if t is e:
            raise
        raise t from None


def _requires_grad(ts):
    return any(t is not None and t.requires_grad for t in ts)


def _l_strided(t):
    return t is not None and t.dim() > 0 and t.stride(-1) != 1


# ---- selscan::fwd / bwd ------------------------------------------------------------------------


class _Scan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, delta, A, B, C, D, z, delta_bias, h0, cu, softplus, last):
        # >>unit-l: the copies run the forward and are what is saved (the backward's fast kernels);
        # the CPU kernels take any strides, packed problems are never fast, and unit-L operands (the
        # common call) ask nothing
        if u.is_cuda and cu is None and any(_l_strided(t) for t in (u, delta, B, C, z)):
            args = (u, delta, A, B, C, D, z, delta_bias, h0, None)
            if _C.fwd_unit_l(tuple(describe(t, concrete=True) for t in args)):
                u, delta, B, C = (t.contiguous() for t in (u, delta, B, C))
                z = None if z is None else z.contiguous()
        with _below():
            y, h_last, ck = call(_ops.fwd.default, u, delta, A, B, C, D, z, delta_bias, h0, cu, softplus, last, True)
        ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, h0, cu, ck)
        ctx.softplus = softplus
        ctx.mark_non_differentiable(ck)
        ctx.set_materialize_grads(False)
        return y, h_last, ck

    @staticmethod
    def backward(ctx, dy, dlast, _dck):
        s = ctx.saved_tensors
        mask = [int(n) for n in ctx.needs_input_grad[:9]]
        if not any(mask):
            return (None,) * 12
        if dlast is not None and dlast.dim() != 3:
            dlast = None  # the (0,) placeholder of a last_state not returned
        if dy is None:
            dy = torch.zeros_like(s[0])  # a loss on last_state alone
        # >>unit-l: an L-strided dy (a gradient through a transpose: MambaVision's y) copied where the
        # plan asks; the saved operands are the forward's copies
        if dy.dim() == 3 and s[0].is_cuda and s[9] is None and _l_strided(dy):
            if _C.fwd_unit_l(tuple(describe(t, concrete=True) for t in (*s[:9], None, dy))):
                dy = dy.contiguous()
        # (through bwd's own kernel: with create_graph=True its outputs refuse a double backward)
        g = _ops.bwd.default(*s[:10], dy, dlast, s[10], ctx.softplus, mask)
        return (*[g[i] if mask[i] else None for i in range(9)], None, None, None)


def _fwd(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, delta_softplus, return_last_state, save_checkpoint):
    if torch.is_grad_enabled() and _requires_grad((u, delta, A, B, C, D, z, delta_bias, h0)):
        return tuple(_Scan.apply(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, delta_softplus,
                                 return_last_state))
    with _below():
        return call(_ops.fwd.default, u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, delta_softplus,
                    return_last_state, save_checkpoint)


def _not_differentiable(op, function):
    """The Autograd kernel of a backward op (bwd, conv_bwd): outputs that refuse a double backward."""

    class NotDifferentiable(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            with _below():
                return tuple(call(op, *args))

        @staticmethod
        def backward(ctx, *grads):
            raise RuntimeError(f"selscan: double backward (differentiating the gradients of {function}, e.g. after "
                               f"create_graph=True) is not supported: selscan's backward of {function} is not "
                               f"differentiable")

    def kernel(*args):
        if torch.is_grad_enabled() and _requires_grad([a for a in args if isinstance(a, torch.Tensor)]):
            return list(NotDifferentiable.apply(*args))
        with _below():
            return call(op, *args)

    return kernel


# ---- selscan::conv_fwd / conv_bwd --------------------------------------------------------------


class _Conv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, init_state, cu, silu, final, dim_major):
        with _below():
            y, fs = call(_ops.conv_fwd.default, x, weight, bias, init_state, cu, silu, final, dim_major)
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
        if dfinal is not None and dfinal.dim() != 3:
            dfinal = None  # the (0,) placeholder of a final_state not returned
        if dy is None:
            dy = torch.zeros_like(s[0])  # a loss on final_state alone
        g = _ops.conv_bwd.default(*s, dy, dfinal, ctx.silu, mask)
        return (*[g[i] if mask[i] else None for i in range(4)], None, None, None, None)


def _conv_fwd(x, weight, bias, init_state, cu_seqlens, silu, return_final_state, out_dim_major):
    if torch.is_grad_enabled() and _requires_grad((x, weight, bias, init_state)):
        return tuple(_Conv.apply(x, weight, bias, init_state, cu_seqlens, silu, return_final_state, out_dim_major))
    with _below():
        return call(_ops.conv_fwd.default, x, weight, bias, init_state, cu_seqlens, silu, return_final_state,
                    out_dim_major)


# ---- the decode updates: selscan::step / conv_step ---------------------------------------------


def _inference_only(what, state, named, op, args):
    if torch.is_grad_enabled():
        for name, t in named:
            if t is not None and t.requires_grad:
                raise RuntimeError(f"selscan: {what} is inference-only (no autograd), but {name} requires grad; call "
                                   f"it under torch.no_grad() / torch.inference_mode() or pass {name}.detach()")
    if state.is_inference() and not torch.is_inference_mode_enabled():
        raise ValueError("selscan: state is an inference tensor (made under torch.inference_mode()); an in-place "
                         "update of it must run under torch.inference_mode() too")
    with torch._C._AutoDispatchBelowADInplaceOrView():
        y = call(op, *args)
    torch.autograd.graph.increment_version(state)
    return y


def _step(state, x, dt, A, B, C, D, z, dt_bias, state_index, dt_softplus, A_is_log=False):
    return _inference_only("the decode step (selective_state_update)", state,
                           (("state", state), ("x", x), ("dt", dt), ("A", A), ("B", B), ("C", C), ("D", D), ("z", z),
                            ("dt_bias", dt_bias)),
                           _ops.step.default, (state, x, dt, A, B, C, D, z, dt_bias, state_index, dt_softplus, A_is_log))


def _conv_step(state, x, weight, bias, state_index, silu):
    return _inference_only("the conv update (causal_conv1d_update)", state,
                           (("conv_state", state), ("x", x), ("weight", weight), ("bias", bias)),
                           _ops.conv_step.default, (state, x, weight, bias, state_index, silu))


_LIB = torch.library.Library("selscan", "IMPL")
_LIB.impl("fwd", _fwd, "Autograd")
_LIB.impl("bwd", _not_differentiable(_ops.bwd.default, "selective_scan_fn"), "Autograd")
_LIB.impl("conv_fwd", _conv_fwd, "Autograd")
_LIB.impl("conv_bwd", _not_differentiable(_ops.conv_bwd.default, "causal_conv1d_fn"), "Autograd")
_LIB.impl("step", _step, "Autograd")
_LIB.impl("conv_step", _conv_step, "Autograd")
