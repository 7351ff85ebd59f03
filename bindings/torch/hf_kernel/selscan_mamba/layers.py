"""The layers `kernels.kernelize` puts in place of transformers' Mamba-1 kernel entry points.

transformers (5.x) decorates five module-level functions of modeling_mamba.py and
modeling_falcon_mamba.py with use_kernel_func_from_hub_with_fallback(name, package): each becomes
a stateless nn.Module registered under `name`, attached to the mixer by use_kernelized_func.
`kernelize` replaces such a module's forward with the forward of the layer of the same name
here. kernels accepts a layer only if it is an nn.Module without a constructor or members of its
own (has_backward / can_torch_compile aside) whose forward has as many parameters, of the same
kinds, as the function it replaces: each forward below takes transformers' parameters, in
transformers' order, and calls selscan_torch's function of mamba_ssm's / causal_conv1d's
signature.

What each computes is what transformers' own PyTorch path computes for the same call (to float32
rounding), with one choice where transformers' hub kernel and its PyTorch path differ:
FalconMamba's dt RMS norm in the fused training call (mamba_inner_fn) is applied to x_proj's
dt_rank slice before dt_proj, as the PyTorch path does (mamba_ssm's kernel applies it after
dt_proj). Arguments transformers' PyTorch fallbacks take and selscan has no use for
(use_mambapy, use_associative_scan) are ignored; keyword arguments of the mamba_ssm /
causal_conv1d functions not in transformers' signatures pass through **kwargs.

has_backward = False on the two decode steps (selscan's steps are inference-only: an input
requiring grad raises): kernelize in Mode.TRAINING keeps transformers' own step functions,
Mode.INFERENCE takes these. can_torch_compile is not claimed (kernelize with
Mode.TORCH_COMPILE keeps transformers' functions).
"""
import torch
from torch import nn

from selscan_torch import (
    causal_conv1d_fn as _causal_conv1d_fn,
    causal_conv1d_update as _causal_conv1d_update,
    mamba_inner_fn as _mamba_inner_fn,
    selective_scan_fn as _selective_scan_fn,
    selective_state_update as _selective_state_update,
)

__all__ = ["selective_scan_fn", "selective_state_update", "mamba_inner_fn", "causal_conv1d_fn",
           "causal_conv1d_update"]

_CONV_KEYWORDS = ("seq_idx", "initial_states", "return_final_states", "final_states_out")
_INNER_KEYWORDS = ("B_proj_bias", "C_proj_bias", "checkpoint_lvl")
_ONES = {}  # (device, dt_rank) -> float32 ones: the weightless dt norm's weight


def _ones(n, device):
    key = (device, n)
    t = _ONES.get(key)
    if t is None:
        t = _ONES[key] = torch.ones(n, dtype=torch.float32, device=device)
    return t


class selective_scan_fn(nn.Module):
    """transformers' mamba_selective_scan(hidden_states, dt, A, B, C, D, z, delta_bias,
    delta_softplus, return_last_state, use_mambapy, use_associative_scan, **kwargs) on selscan's
    selective_scan_fn (the prefill and the non-fused forward): out, or (out, last_state) with a
    float32 last_state."""

    def forward(self, u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                return_last_state=False, use_mambapy=False, use_associative_scan=False, **kwargs):
        return _selective_scan_fn(u, delta, A, B, C, D, z, delta_bias, bool(delta_softplus), bool(return_last_state),
                                  kwargs.get("cu_seqlens"))


class selective_state_update(nn.Module):
    """transformers' mamba_selective_state_update(state, hidden_states, dt, A, B, C, D, dt_bias,
    dt_softplus, z, **kwargs) on selscan's selective_state_update (one decode step, in place on
    state). A state in float32 or x's dtype is stepped as it is; one in another dtype through a
    float32 copy written back."""

    has_backward = False

    def forward(self, state, x, dt, A, B, C, D=None, dt_bias=None, dt_softplus=False, z=None, **kwargs):
        idx = kwargs.get("state_batch_indices")
        if state.dtype == torch.float32 or state.dtype == x.dtype:
            return _selective_state_update(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, idx)
        s = state.float()
        out = _selective_state_update(s, x, dt, A, B, C, D, z, dt_bias, dt_softplus, idx)
        state.copy_(s)
        return out


class mamba_inner_fn(nn.Module):
    """transformers' mamba_inner_fn(xz, conv1d_weight, conv1d_bias, x_proj_weight,
    delta_proj_weight, out_proj_weight, out_proj_bias, A, B, C, D, delta_bias, delta_softplus,
    b_rms_weight, c_rms_weight, dt_rms_weight, b_c_dt_rms_eps, **kwargs) on selscan's fused
    block (the training forward without a cache; transformers' own function returns None there
    and the mixer takes its PyTorch path). With dt_rms_weight (FalconMamba) the dt norm is
    transformers' weightless one on x_proj's dt_rank slice, before dt_proj (the model's
    dt_rms_weight is a placeholder of ones of the intermediate size, which its PyTorch path never
    reads; one of dt_rank entries is used as the weight)."""

    def forward(self, xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight, out_proj_weight,
                out_proj_bias, A, B=None, C=None, D=None, delta_bias=None, delta_softplus=True, b_rms_weight=None,
                c_rms_weight=None, dt_rms_weight=None, b_c_dt_rms_eps=1e-6, **kwargs):
        pre = dt_rms_weight is not None
        if pre:
            R = delta_proj_weight.shape[1]
            if tuple(dt_rms_weight.shape) != (R,):
                dt_rms_weight = _ones(R, xz.device)
        extra = {k: kwargs[k] for k in _INNER_KEYWORDS if k in kwargs}
        return _mamba_inner_fn(xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight, out_proj_weight,
                               out_proj_bias, A, B, C, D, delta_bias, delta_softplus=delta_softplus,
                               b_rms_weight=b_rms_weight, c_rms_weight=c_rms_weight, dt_rms_weight=dt_rms_weight,
                               b_c_dt_rms_eps=b_c_dt_rms_eps, dt_rms_pre_proj=pre, **extra)


class causal_conv1d_fn(nn.Module):
    """transformers' causal_conv1d_fn(hidden_states, weight, bias, activation, **kwargs) on
    selscan's causal_conv1d_fn (activation None, "silu" or "swish"; another is refused with
    selscan's ValueError). causal_conv1d's seq_idx / initial_states / return_final_states /
    final_states_out pass through as keywords; other keywords (the mixer's own) are ignored."""

    def forward(self, x, weight, bias=None, activation=None, **kwargs):
        extra = {k: kwargs[k] for k in _CONV_KEYWORDS if kwargs.get(k) is not None}
        return _causal_conv1d_fn(x, weight, bias, activation=activation, **extra)


class causal_conv1d_update(nn.Module):
    """transformers' causal_conv1d_update(hidden_states, conv_state, weight, bias, activation) on
    selscan's conv step (in place on conv_state)."""

    has_backward = False

    def forward(self, x, conv_state, weight, bias=None, activation=None):
        return _causal_conv1d_update(x, conv_state, weight, bias, activation)
