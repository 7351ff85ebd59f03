"""selscan_torch: selscan's selective scan (Mamba's S6) as PyTorch custom ops, CPU and CUDA.

A drop-in for mamba_ssm's functions: change the import only.

    from selscan_torch import selective_scan_fn, selective_state_update, SelectiveScan

The ops (torch.ops.selscan.fwd / bwd / step) and fwd's autograd are registered in C++
(TORCH_LIBRARY schemas, a torch::autograd::Function on the Autograd key); this module adds their
fake (meta) kernels (torch.library.register_fake), so they run in eager mode, under torch.compile(fullgraph=True) and inside CUDA graphs (no host sync, torch's caching
allocator, the current stream).
"""
import math

import torch

from . import _C  # noqa: F401  (loading the extension registers torch.ops.selscan)

__all__ = [
    "selective_scan_fn",
    "selective_state_update",
    "SelectiveScan",
    "cpu_backend",
    "has_cuda_kernels",
    "causal_conv1d_fn",
    "causal_conv1d_update",
    "mamba_inner_fn",
]
__version__ = "0.2.0"

_ops = torch.ops.selscan
_fwd = _ops.fwd.default  # the overload itself: skips the packet's overload resolution a call
_CHUNK = 64  # selscan's checkpoint interval (steps), the same on the CPU and CUDA sides
_CPU_CHECKPOINT_MAX_N = 64  # the CPU backward reads checkpoints only for N <= 64


def cpu_backend():
    """The vector path selscan's CPU kernels use on this machine (avx512f, avx2+fma, neon, portable)."""
    return _ops.cpu_backend()


def has_cuda_kernels():
    """True when the extension was built with its CUDA kernels."""
    return torch._C._dispatch_has_kernel_for_dispatch_key("selscan::fwd", "CUDA")


# ---- fake (meta) kernels: output shapes for torch.compile / FakeTensor ----------------------------


def _checkpoint_numel(device, batch, dim, L, N, n_seqs, packed):
    """Floats in the forward's checkpoint (selscan_checkpoint_size / _cuda; the layouts differ)."""
    chunks = (L + _CHUNK - 1) // _CHUNK
    if device.type == "cuda":
        return batch * dim * chunks * N
    if N > _CPU_CHECKPOINT_MAX_N:
        return 0
    return batch * dim * (chunks + (n_seqs if packed else 1)) * N


@torch.library.register_fake("selscan::fwd")
def _fwd_fake(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, delta_softplus, return_last_state,
              save_checkpoint):
    batch, dim, L = u.shape
    N = A.shape[1]
    packed = cu_seqlens is not None
    n_seqs = cu_seqlens.shape[0] - 1 if packed else 0
    rows = n_seqs if packed else batch
    y = torch.empty_like(u)
    f32 = dict(dtype=torch.float32, device=u.device)
    last = torch.empty((rows, dim, N), **f32) if return_last_state else torch.empty((0,), **f32)
    empty = batch == 0 or dim == 0 or L == 0 or N == 0
    n = 0 if (empty or not save_checkpoint) else _checkpoint_numel(u.device, batch, dim, L, N, n_seqs, packed)
    return y, last, torch.empty((n,), **f32)


@torch.library.register_fake("selscan::bwd")
def _bwd_fake(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, dy, dh_last, checkpoint, delta_softplus,
              grad_mask):
    like = (u, delta, A, B, C, D, z, delta_bias, h0)
    out = []
    for t, m in zip(like, grad_mask):
        if t is not None and m:
            out.append(torch.empty_like(t))
        else:
            out.append(torch.empty((0,), dtype=torch.float32, device=u.device))
    return out


@torch.library.register_fake("selscan::step")
def _step_fake(state, x, dt, A, B, C, D, z, dt_bias, state_index, dt_softplus):
    return torch.empty_like(x)


# ---- autograd ---------------------------------------------------------------------------------
# selscan::fwd's autograd kernel is C++ (csrc/selscan_torch.cpp, ScanFunction on the Autograd
# dispatch key): the forward saves the checkpoint whenever an input requires grad, the backward
# calls selscan::bwd for the gradients autograd asks for. (Python's torch.library.register_autograd
# cost 100-250 us a call: bench/NOTES.md CUDA-torch-v1.)


# ---- the mamba_ssm-compatible API -------------------------------------------------------------


def _f32(t):
    return None if t is None else (t if t.dtype == torch.float32 else t.to(torch.float32))


def _like(t, dtype):
    return None if t is None else (t if t.dtype == dtype else t.to(dtype))


def _cast(t, name, dtype):
    if t.is_complex():
        raise TypeError(f"selscan: complex {name} is not supported (real A, B, C only)")
    return t.to(dtype)


def _bc(t, name, dtype):
    nd = t.dim()
    if nd == 2:  # (dim, N), constant over time: float32
        return t if t.dtype == torch.float32 else _cast(t, name, torch.float32)
    # (batch, N, L) (one group) goes to the op as it is: an unsqueeze here would add a view node
    # to the autograd graph (and its backward) on every call
    return t if t.dtype == dtype else _cast(t, name, dtype)


def _host_offsets(cu_seqlens):
    if not isinstance(cu_seqlens, torch.Tensor):
        return torch.tensor(list(cu_seqlens), dtype=torch.int64)
    # selscan validates the offsets on the host: a CUDA tensor is copied back (a sync); pass a
    # CPU tensor to avoid it.
    return cu_seqlens.to(device="cpu", dtype=torch.int64)


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
    otherwise; the gradient flows through the cast); delta, z and a variable B / C are cast to u's
    dtype when they differ. Complex A / B / C: TypeError.
    """
    # Casts only where a dtype differs (the common call passes through untouched); shapes, devices
    # and strides are checked once, in C++. The checkpoint is saved by the C++ autograd kernel
    # whenever an input requires grad.
    dtype = u.dtype
    f32 = torch.float32
    if A.dtype != f32:
        A = _cast(A, "A", f32)
    if delta.dtype != dtype:
        delta = delta.to(dtype)
    if z is not None and z.dtype != dtype:
        z = z.to(dtype)
    B = _bc(B, "B", dtype)
    C = _bc(C, "C", dtype)
    if D is not None and D.dtype != f32:
        D = D.to(f32)
    if delta_bias is not None and delta_bias.dtype != f32:
        delta_bias = delta_bias.to(f32)
    if h0 is not None and h0.dtype != f32:
        h0 = h0.to(f32)
    if cu_seqlens is not None:
        cu_seqlens = _host_offsets(cu_seqlens)
    y, last, _ = _fwd(u, delta, A, B, C, D, z, delta_bias, h0, cu_seqlens, bool(delta_softplus),
                          bool(return_last_state), False)
    return (y, last) if return_last_state else y


def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
                           state_batch_indices=None):
    """One decode step, in place on state: mamba_ssm's selective_state_update (Triton) signature.

    Single head: state (batch, dim, N) float32 (or (n_cache, dim, N) with state_batch_indices);
    x, dt, z: (batch, dim); A: (dim, N); B, C: (batch, N) or (batch, ngroups, N); D, dt_bias:
    (dim,). Multi-head (Mamba-2 shapes): state (batch, nheads, dim, N), x / dt / z (batch, nheads,
    dim), A (nheads, dim, N), D / dt_bias (nheads, dim); the heads are folded into the channels.
    state_batch_indices (batch,) int: the state row of each batch row; negative: padding (out 0,
    no state touched). Returns out, x's shape and dtype. No autograd (inference).
    """
    if state.dtype != torch.float32:
        raise TypeError(f"selscan: state must be float32 (it is updated in place), got {state.dtype}")
    if A.is_complex():
        raise TypeError("selscan: complex A is not supported (real A only)")
    out_shape = x.shape
    if state.dim() == 4:  # (batch, nheads, dim, N): fold heads into channels (views only for state)
        n_cache, nheads, hdim, N = state.shape
        state = state.view(n_cache, nheads * hdim, N)
        x = x.reshape(x.shape[0], nheads * hdim)
        dt = dt.reshape(dt.shape[0], nheads * hdim)
        z = None if z is None else z.reshape(z.shape[0], nheads * hdim)
        A = A.reshape(nheads * hdim, N)
        D = None if D is None else D.reshape(nheads * hdim)
        dt_bias = None if dt_bias is None else dt_bias.reshape(nheads * hdim)
    dtype = x.dtype
    dt, z = _like(dt, dtype), _like(z, dtype)
    B = _like(B.unsqueeze(1) if B.dim() == 2 else B, dtype)
    C = _like(C.unsqueeze(1) if C.dim() == 2 else C, dtype)
    A, D, dt_bias = _f32(A), _f32(D), _f32(dt_bias)
    idx = None if state_batch_indices is None else state_batch_indices.to(torch.int32)
    out = _ops.step(state, x, dt, A, B, C, D, z, dt_bias, idx, bool(dt_softplus))
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
        return selective_state_update(state, x, dt, self.A(), B, C, self.D, z, dt_bias=self.dt_bias,
                                      dt_softplus=True, state_batch_indices=state_batch_indices)

    def extra_repr(self):
        return f"dim={self.dim}, d_state={self.d_state}"


# ---- the conv and the fused Mamba-1 block (issue 28): causal_conv1d's and mamba_ssm's API -------
from .conv import causal_conv1d_fn, causal_conv1d_update  # noqa: E402
from .block import mamba_inner_fn  # noqa: E402
