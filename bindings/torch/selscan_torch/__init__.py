"""selscan_torch: selscan's selective scan (Mamba's S6) as PyTorch custom ops, CPU and CUDA.

A drop-in for mamba_ssm's functions: change the import only.

    from selscan_torch import selective_scan_fn, selective_state_update, SelectiveScan

The ops (torch.ops.selscan.fwd / bwd / step) are registered in C++ on PyTorch's stable ABI (one
binary for torch 2.11 and every later torch); this module adds their autograd (the Autograd key: the
stable ABI has none) and their fake (meta) kernels (torch.library.register_fake), so they run in eager mode, under torch.compile(fullgraph=True) and inside CUDA graphs (no host sync, torch's caching
allocator, the current stream).
"""
import math

import torch

try:
    from ._build import TORCH as _BUILT_TORCH, TORCH_MIN as _TORCH_MIN
except ImportError:  # a tree whose setup.py has not run: nothing to compare
    _BUILT_TORCH = None
# (torch.version.__version__: the installed build's own record, which code that fakes torch.__version__
# leaves alone)
if _BUILT_TORCH is not None and tuple(int(v) for v in torch.version.__version__.split("+")[0].split(".")[:2]) < _TORCH_MIN:
    # the extension is built on torch's stable ABI as of _TORCH_MIN: an older torch lacks its entry points
    raise ImportError(f"selscan_torch needs torch >= {_TORCH_MIN[0]}.{_TORCH_MIN[1]} (built with torch {_BUILT_TORCH}), "
                      f"and this is torch {torch.version.__version__}")

from . import _C  # noqa: F401,E402  (loading the extension registers torch.ops.selscan)
from . import _checks  # noqa: E402

__all__ = [
    "selective_scan_fn",
    "selective_state_update",
    "SelectiveScan",
    "cpu_backend",
    "has_cuda_kernels",
    "causal_conv1d_fn",
    "causal_conv1d_update",
    "mamba_inner_fn",
    "mamba_chunk_scan_combined",
    "mamba_split_conv1d_scan_combined",
]
__version__ = "0.2.0"

_ops = torch.ops.selscan
_fwd = _ops.fwd.default  # the overload itself: skips the packet's overload resolution a call


def cpu_backend():
    """The vector path selscan's CPU kernels use on this machine (avx512f, avx2+fma, neon, portable)."""
    return _C.cpu_backend()


def has_cuda_kernels():
    """True when the extension was built with its CUDA kernels."""
    return torch._C._dispatch_has_kernel_for_dispatch_key("selscan::fwd", "CUDA")


# ---- fake (meta) kernels: output shapes for torch.compile / FakeTensor ----------------------------
# Each checks its arguments with the C++ kernels' own check first (_checks.check_op: bindings/common's,
# through _C), so an all-meta call is refused where a CPU one would be, and a meta tensor among real
# ones (the dispatcher then picks this kernel) is refused naming it, never answered with uninitialised
# memory. What the library decides (the checkpoint's size, the CUDA plan's unit-L copies) is asked of
# it through _C, never restated here.


def _fwd_y_like(u, args):
    """y as the forward allocates it: like u, except where the op copies an L-strided u to unit L
    strides for selscan's fast CUDA kernels (csrc/scan.cpp >>unit-l; the plan's answer,
    _C.fwd_unit_l, asked on concrete sizes: a CUDA trace is specialized on them): contiguous, like
    the copy."""
    if u.is_cuda and _C.fwd_unit_l(tuple(_checks.describe(t, concrete=True) for t in args)):
        return torch.empty(u.shape, dtype=u.dtype, device=u.device)
    return torch.empty_like(u)


def _checkpoint_numel(u, sizes):
    """Floats in the forward's checkpoint on u's device: selscan_checkpoint_size / _cuda (the
    layouts differ; none where the CPU backward would not read one), asked of the library. Symbolic
    sizes (a dynamic-shape trace): a size the op decides (the library's rule is not restated here)."""
    batch, dim, L, N, G, _, n_seqs = sizes[:7]
    if min(batch, dim, L, N, G, n_seqs) < 0:
        return torch.library.get_ctx().new_dynamic_size()
    return _C.checkpoint_numel(str(u.device), batch, dim, L, N, G, n_seqs)


@torch.library.register_fake("selscan::fwd")
def _fwd_fake(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, delta_softplus, return_last_state,
              save_checkpoint):
    args = (u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens)
    sizes = _checks.check_op("fwd", *args)
    y = _fwd_y_like(u, args)
    f32 = dict(dtype=torch.float32, device=u.device)
    rows = u.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    last = torch.empty((rows, u.shape[1], A.shape[1]), **f32) if return_last_state else torch.empty((0,), **f32)
    empty = u.shape[0] == 0 or u.shape[1] == 0 or u.shape[2] == 0 or A.shape[1] == 0
    n = 0 if (empty or not save_checkpoint) else _checkpoint_numel(u, sizes)
    return y, last, torch.empty((n,), **f32)


@torch.library.register_fake("selscan::bwd")
def _bwd_fake(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, dy, dh_last, checkpoint, delta_softplus,
              grad_mask):
    _checks.check_op("bwd", u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, dy, dh_last, checkpoint)
    if len(grad_mask) != 9:
        raise ValueError(f"selscan: grad_mask must have 9 entries, got {len(grad_mask)}")
    like = (u, delta, A, B, C, D, z, delta_bias, h0)
    out = []
    for t, m in zip(like, grad_mask):
        if t is not None and m:
            out.append(torch.empty_like(t))
        else:
            out.append(torch.empty((0,), dtype=torch.float32, device=u.device))
    return out


@torch.library.register_fake("selscan::step")
def _step_fake(state, x, dt, A, B, C, D, z, dt_bias, state_index, dt_softplus, A_is_log=False):
    _checks.check_op("step", state, x, dt, A, B, C, D, z, dt_bias, state_index)
    return torch.empty_like(x)


# ---- autograd: the Autograd-key kernels (the stable ABI has no autograd: csrc/selscan_torch.h) ----
# selscan::fwd: with grad mode on and an input requiring grad, a node whose backward calls selscan::bwd
# for the gradients autograd asks for; the forward then saves selscan's checkpoint (whatever
# save_checkpoint says) and, on CUDA, copies the L-strided operands of a problem selscan's plan takes
# fast only with unit L strides (csrc/selscan_torch.h >>unit-l; the plan's answer, _C.fwd_unit_l): the
# copies run the forward and are what the backward reads; the backward copies an L-strided dy by the
# same answer. selscan::bwd refuses a double backward; selscan::step is inference-only
# (_checks.not_differentiable / inference_only). The C++ kernel is reached through _checks.call_below (a
# refusal raised as its type).

_bwd = _ops.bwd.default


def _l_strided(t):
    return t is not None and t.dim() > 0 and t.stride(-1) != 1


class _Scan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, delta, A, B, C, D, z, delta_bias, h0, cu, softplus, last):
        # (the CPU kernels take any strides; packed problems are never fast; unit-L operands, the
        # common call, ask nothing)
        if u.is_cuda and cu is None and any(_l_strided(t) for t in (u, delta, B, C, z)):
            args = (u, delta, A, B, C, D, z, delta_bias, h0, None)
            if _C.fwd_unit_l(tuple(_checks.describe(t, concrete=True) for t in args)):
                u, delta, B, C = (t.contiguous() for t in (u, delta, B, C))
                z = None if z is None else z.contiguous()
        y, h_last, ck = _checks.call_below(_fwd, u, delta, A, B, C, D, z, delta_bias, h0, cu, softplus, last, True)
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
        dy, dlast = _checks.backward_cotangents(dy, dlast, s[0], 3)
        # an L-strided dy (a gradient through a transpose: MambaVision's y); the saved operands are
        # the forward's copies
        if dy.dim() == 3 and s[0].is_cuda and s[9] is None and _l_strided(dy):
            if _C.fwd_unit_l(tuple(_checks.describe(t, concrete=True) for t in (*s[:9], None, dy))):
                dy = dy.contiguous()
        # (through bwd's own kernel: with create_graph=True its outputs refuse a double backward)
        g = bwd_call(*s[:10], dy, dlast, s[10], ctx.softplus, mask)
        return (*[g[i] if mask[i] else None for i in range(9)], None, None, None)


def _fwd_autograd(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, delta_softplus, return_last_state,
                  save_checkpoint):
    if _checks.requires_grad((u, delta, A, B, C, D, z, delta_bias, h0)):
        _checks.no_func_transforms("selscan's scan")
        return tuple(_Scan.apply(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, delta_softplus,
                                 return_last_state))
    return _checks.call_below(_fwd, u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, delta_softplus,
                              return_last_state, save_checkpoint)


def _step_autograd(state, x, dt, A, B, C, D, z, dt_bias, state_index, dt_softplus, A_is_log=False):
    return _checks.inference_only(
        "the decode step (selective_state_update)", state,
        (("state", state), ("x", x), ("dt", dt), ("A", A), ("B", B), ("C", C), ("D", D), ("z", z), ("dt_bias", dt_bias)),
        _ops.step.default, (state, x, dt, A, B, C, D, z, dt_bias, state_index, dt_softplus, A_is_log))


_bwd_autograd = _checks.not_differentiable(_bwd, "selective_scan_fn")
_LIB = torch.library.Library("selscan", "IMPL")  # (conv.py adds the conv's kernels to it)
_LIB.impl("fwd", _fwd_autograd, "Autograd")
_LIB.impl("bwd", _bwd_autograd, "Autograd")
_LIB.impl("step", _step_autograd, "Autograd")
# the package's calls of the ops (_checks.direct: the kernels above, without a dispatcher pass, in eager mode)
fwd_call = _checks.direct(_fwd, _fwd_autograd)
bwd_call = _checks.direct(_bwd, _bwd_autograd)
step_call = _checks.direct(_ops.step.default, _step_autograd)


# ---- the mamba_ssm-compatible API -------------------------------------------------------------

# The decode step's path during torch.onnx.export: ONNX has no in-place update, and torch.onnx cannot
# translate torch.export's functional wrapper of an in-place custom op, so while an export runs
# selective_state_update hands the step to the function registered here (selscan_torch.onnx
# registers a functional op plus a copy into state). None until then: the eager path never looks
# past this None.
_onnx_step = None


def _register_onnx_step(fn):
    """Registers fn(state, x, dt, A, B, C, D, z, dt_bias, state_index, dt_softplus) -> y as
    selective_state_update's path while torch.onnx.is_in_onnx_export(): fn steps state (float32)
    in place; A is A itself (A_is_log already applied), D / dt_bias float32 or None, state_index
    int32 or None, B / C (batch, N) or (batch, G, N). None unregisters. Returns the previous one."""
    global _onnx_step
    prev, _onnx_step = _onnx_step, fn
    return prev


def _not_tensors(**args):
    """After an AttributeError in a wrapper: the argument that is not a tensor, named (TypeError)."""
    for name, t in args.items():
        _checks.tensor_arg(t, name, optional=name not in ("u", "delta", "A", "B", "C", "state", "x", "dt"))


def selective_scan_fn(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                      return_last_state=False, cu_seqlens=None, *, h0=None):
    """Mamba's selective scan: mamba_ssm.ops.selective_scan_interface.selective_scan_fn's signature.

    u, delta, z: (batch, dim, L) in float32 / float16 / bfloat16 (any strides, e.g. a transposed
    (batch, L, dim) tensor); A: (dim, N); B, C: (dim, N) constant over time, (batch, N, L) or
    (batch, G, N, L) with G dividing dim; D, delta_bias: (dim,). Returns out (u's dtype) or
    (out, last_state) with last_state (batch, dim, N) float32.

    Extras (keywords in mamba's order): h0 (batch, dim, N), the initial state; cu_seqlens
    (n_seqs + 1,) int64 offsets of packed sequences along L (batch 1; the state restarts at each,
    from h0[s]; last_state is then (n_seqs, dim, N), each sequence's final state). Unlike
    mamba_ssm, a gradient flowing into last_state is propagated.

    dtypes: A, D, delta_bias, h0 and a constant B / C are computed in float32 (cast here when given
    in another floating dtype; the gradient flows through the cast); delta, z and a variable B / C
    are cast to u's dtype when they differ. Complex, integer or bool tensors: TypeError naming the
    argument; cu_seqlens: a list of ints or an integer tensor (see README "What is cast, refused,
    copied").
    """
    # Casts only where a dtype differs (the common call passes through untouched); shapes, devices
    # and strides are checked once, in C++ (the fake kernel asks the same check on meta / fake tensors). The
    # checkpoint is saved by the autograd kernel (_Scan) whenever an input requires grad; on CUDA
    # it copies L-strided operands of a fast-kernel problem (csrc/selscan_torch.h >>unit-l).
    f32 = torch.float32
    cast = _checks.cast
    if not isinstance(u, torch.Tensor):  # (a numpy u has a dtype too: its casts would fail unnamed)
        _checks.tensor_arg(u, "u")
    try:
        dtype = u.dtype  # (the op refuses a u of another dtype, naming it: casts to it are harmless before)
        if A.dtype != f32:
            A = cast(A, "A", f32)
        if delta.dtype != dtype:
            delta = cast(delta, "delta", dtype)
        if z is not None and z.dtype != dtype:
            z = cast(z, "z", dtype)
        # (dim, N) B / C, constant over time: float32; (batch, N, L) (one group) or (batch, G, N, L):
        # u's dtype, passed as they are (an unsqueeze here would add a view node to the autograd
        # graph, and its backward, on every call)
        want = f32 if B.dim() == 2 else dtype
        if B.dtype != want:
            B = cast(B, "B", want)
        want = f32 if C.dim() == 2 else dtype
        if C.dtype != want:
            C = cast(C, "C", want)
        if D is not None and D.dtype != f32:
            D = cast(D, "D", f32)
        if delta_bias is not None and delta_bias.dtype != f32:
            delta_bias = cast(delta_bias, "delta_bias", f32)
        if h0 is not None and h0.dtype != f32:
            h0 = cast(h0, "h0", f32)
    except AttributeError:
        _not_tensors(u=u, delta=delta, A=A, B=B, C=C, D=D, z=z, delta_bias=delta_bias, h0=h0)
        raise
    if cu_seqlens is not None:
        cu_seqlens = _checks.host_offsets(cu_seqlens)
    y, last, _ = fwd_call(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, bool(delta_softplus),
                          bool(return_last_state), False)
    return (y, last) if return_last_state else y


def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
                           state_batch_indices=None, *, A_is_log=False):
    """One decode step, in place on state: mamba_ssm's selective_state_update (Triton) signature.

    Single head: state (batch, dim, N) float32 or x's dtype (or (n_cache, dim, N) with
    state_batch_indices; in x's dtype, as mamba_ssm and transformers allocate it for a float16 /
    bfloat16 model, it is stepped in float32 and stored rounded, no copy);
    x, dt, z: (batch, dim); A: (dim, N); B, C: (batch, N) or (batch, ngroups, N); D, dt_bias:
    (dim,), each float32 or x's dtype (a float16 / bfloat16 model's own: read as they are, no
    conversion kernel; another floating dtype is cast to float32). Multi-head (Mamba-2 shapes): state (batch, nheads, dim, N), x / dt / z (batch, nheads,
    dim), A (nheads, dim, N), D / dt_bias (nheads, dim); the heads are folded into the channels.
    state_batch_indices (batch,) int: the state row of each batch row; negative: padding (out 0,
    no state touched). Returns out, x's shape and dtype. No autograd (inference): with grad mode on,
    an input requiring grad raises. A state whose elements overlap (an expand()ed view) is refused;
    a multi-head state is folded into channels as a view (refused where that is impossible: it is
    never copied).
    A_is_log=True: A is Mamba's A_log (same shape; float32, another floating dtype cast to float32)
    and the step uses A = -exp(A_log), computed inside the kernel in float32 (selscan's
    SELSCAN_STEP_A_LOG; on CUDA bitwise the result of A = -torch.exp(A_log)): no exp / neg kernels
    a token.
    """
    f32 = torch.float32
    cast = _checks.cast
    try:
        out_shape = x.shape
        nd = state.dim()
        if nd == 4:  # (batch, nheads, hdim, N): checked in these shapes, then heads folded into channels
            state, x, dt, A, D, z, dt_bias = _checks.fold_heads(state, x, dt, A, B, C, D, z, dt_bias)
        elif nd != 3 or x.dim() == 3:  # (a 3-D x with a 3-D state: which one is wrong, by A's rank)
            _checks.step_state_rank(state, x, A)
        dtype = x.dtype  # (state and x of other dtypes: refused by the op, naming them)
        # a cast is a copy: state given, so that one overlapping it is refused (the op sees the copy)
        if dt.dtype != dtype:
            dt = cast(dt, "dt", dtype, state)
        if z is not None and z.dtype != dtype:
            z = cast(z, "z", dtype, state)
        if B.dtype != dtype:  # (batch, N) or (batch, ngroups, N): the op takes both as they are
            B = cast(B, "B", dtype, state)
        if C.dtype != dtype:
            C = cast(C, "C", dtype, state)
        if A.dtype != f32:
            A = cast(A, "A", f32, state)
        # D / dt_bias: float32 or x's dtype as they are (the op reads either in x's dtype)
        if D is not None and D.dtype != f32 and D.dtype != dtype:
            D = cast(D, "D", f32, state)
        if dt_bias is not None and dt_bias.dtype != f32 and dt_bias.dtype != dtype:
            dt_bias = cast(dt_bias, "dt_bias", f32, state)
        idx = None if state_batch_indices is None else _checks.state_rows(state_batch_indices, state.shape[0], state_tensor=state)
    except AttributeError:
        _not_tensors(state=state, x=x, dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=dt_bias)
        raise
    if _onnx_step is not None and torch.onnx.is_in_onnx_export():  # _register_onnx_step (float32 D / dt_bias / state)
        if A_is_log:  # the ONNX op takes A itself: -exp(A_log) in the graph
            A = -torch.exp(A)
        D = None if D is None else cast(D, "D", f32)
        dt_bias = None if dt_bias is None else cast(dt_bias, "dt_bias", f32)
        s32 = state if state.dtype == f32 else state.float()
        out = _onnx_step(s32, x, dt, A, B, C, D, z, dt_bias, idx, bool(dt_softplus))
        if s32 is not state:
            state.copy_(s32)
    else:
        out = step_call(state, x, dt, A, B, C, D, z, dt_bias, idx, bool(dt_softplus), bool(A_is_log))
    return out.view(out_shape)


class SelectiveScan(torch.nn.Module):
    """The scan's own parameters for a Mamba-style block: A_log (dim, N) with A = -exp(A_log),
    D (dim,) and dt_bias (dim,) (Mamba's initialisation: A = -[1..N], D = 1, softplus(dt_bias)
    log-uniform in [dt_min, dt_max]). forward(u, delta, B, C, z=None, ...) runs the scan with
    delta_softplus; step(state, x, dt, B, C, z=None) is one decode step."""

    def __init__(self, dim, d_state=16, dt_min=0.001, dt_max=0.1, dt_init_floor=1e-4, device=None, dtype=None):
        super().__init__()
        fk = dict(device=device, dtype=torch.float32)
        self.dim, self.d_state = dim, d_state
        A = torch.arange(1, d_state + 1, **fk).repeat(dim, 1)
        self.A_log = torch.nn.Parameter(torch.log(A))
        self.D = torch.nn.Parameter(torch.ones(dim, **fk))
        dt = torch.exp(torch.rand(dim, **fk) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
        dt = dt.clamp(min=dt_init_floor)
        self.dt_bias = torch.nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)

    def A(self):
        return -torch.exp(self.A_log.float())

    def forward(self, u, delta, B, C, z=None, h0=None, return_last_state=False, cu_seqlens=None):
        return selective_scan_fn(u, delta, self.A(), B, C, self.D, z, delta_bias=self.dt_bias, delta_softplus=True,
                                 return_last_state=return_last_state, cu_seqlens=cu_seqlens, h0=h0)

    def step(self, state, x, dt, B, C, z=None, state_batch_indices=None):
        # inference-only: the parameters enter detached (the output never claims a gradient it
        # cannot have); an input of the caller's requiring grad raises
        return selective_state_update(state, x, dt, self.A().detach(), B, C, self.D.detach(), z,
                                      dt_bias=self.dt_bias.detach(), dt_softplus=True,
                                      state_batch_indices=state_batch_indices)

    def extra_repr(self):
        return f"dim={self.dim}, d_state={self.d_state}"


# ---- the conv and the fused Mamba-1 block (issue 28): causal_conv1d's and mamba_ssm's API -------
from .conv import causal_conv1d_fn, causal_conv1d_update  # noqa: E402
from .block import mamba_inner_fn  # noqa: E402

# ---- Mamba-2's SSD scan (issue 40): mamba_ssm's API ---------------------------------------------
from .ssd import mamba_chunk_scan_combined, mamba_split_conv1d_scan_combined  # noqa: E402


def __getattr__(name):
    # selscan_torch.context_parallel (one sequence sharded over torch.distributed ranks): imported
    # on first use, like `import selscan_torch.context_parallel`
    if name == "context_parallel":
        import importlib

        return importlib.import_module(".context_parallel", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
