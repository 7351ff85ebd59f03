"""The layers `kernels.kernelize` puts in place of transformers' Mamba kernel entry points.

transformers (5.x) decorates module-level functions of its Mamba modules with
use_kernel_func_from_hub_with_fallback(name, package): each becomes a stateless nn.Module registered
under `name`, attached to the mixer by use_kernelized_func. Mamba-1 (modeling_mamba.py,
modeling_falcon_mamba.py): selective_scan_fn, selective_state_update, mamba_inner_fn,
causal_conv1d_fn, causal_conv1d_update. Mamba-2 (the Mamba2, Bamba, FalconH1, GraniteMoeHybrid,
NemotronH and Zamba2 modules): mamba_chunk_scan_combined, mamba_split_conv1d_scan_combined,
selective_state_update (multi-head), causal_conv1d_fn, causal_conv1d_update; the names the two
share take both forms.
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
causal_conv1d functions not in transformers' signatures pass through **kwargs (packed sequences:
seq_idx and cu_seqlens reach the scans, and the conv restarts where either says).
The conv layers take what causal_conv1d's kernels take (widths 2 .. 4; None, silu, swish): a model
outside that range raises once kernelized (use_in_transformers() falls back to transformers' own
conv there). Mamba-1's fused training call (mamba_inner_fn) is handed no activation and the
projections' weights, not the modules: where the calling mixer (read from the calling frames) has
another activation than silu, or an adapter / hook on a projection it reads or a norm, it answers
None, as transformers' own body does, and the mixer runs its unfused path (it computed silu on the
bare weights before, silently: a hostile user's run; a caller without that fallback gets an error);
the forward's attention_mask, read there too, masks the conv's output where it pads, as
transformers' unfused path does (the call is not handed it).

Mamba-2's fused training call (mamba_split_conv1d_scan_combined) answers None, as transformers'
own PyTorch body does: the mixer then runs its unfused path (the conv, the SSD scan, its gated
RMS norm and out_proj), on the layers here where they are mapped. That path applies a padding
attention_mask to the conv's output, which the fused call is not handed; selscan's fused function
(selscan_torch.mamba_split_conv1d_scan_combined) composes the same conv and scan, so running it
here would gain nothing and lose the mask.

has_backward = False on the two decode steps (selscan's steps are inference-only: an input
requiring grad raises): kernelize in Mode.TRAINING keeps transformers' own step functions,
Mode.INFERENCE takes these, so a cached forward must then run under torch.no_grad() (generate()
does; use_in_transformers() instead defers such a call to transformers' own step). can_torch_compile is not claimed (kernelize with
Mode.TORCH_COMPILE keeps transformers' functions).
"""
import sys

import torch
from torch import nn

from selscan_torch import (
    causal_conv1d_fn as _causal_conv1d_fn,
    causal_conv1d_update as _causal_conv1d_update,
    mamba_chunk_scan_combined as _mamba_chunk_scan_combined,
    mamba_inner_fn as _mamba_inner_fn,
    selective_scan_fn as _selective_scan_fn,
)
from selscan_torch.integrations import _HY_NORMS as _NORMS  # (FalconMamba's mixer norms, whose weights the block reads)
from selscan_torch.integrations import _fusable, _mixer_padding, _no_hooks
from selscan_torch.integrations import _m2_own_initial_states as _own_initial_states
from selscan_torch.integrations import _standin_selective_state_update as _any_state_step
from selscan_torch.ssd import conv_packing as _conv_packing

__all__ = ["selective_scan_fn", "selective_state_update", "mamba_inner_fn", "causal_conv1d_fn",
           "causal_conv1d_update", "mamba_chunk_scan_combined", "mamba_split_conv1d_scan_combined"]

_CONV_KEYWORDS = ("initial_states", "return_final_states", "final_states_out")
_SSD_KEYWORDS = ("z", "seq_idx", "cu_seqlens", "return_varlen_states")
_INNER_KEYWORDS = ("B_proj_bias", "C_proj_bias", "checkpoint_lvl")
_READS = ("x_proj", "dt_proj", "out_proj")  # the projections whose weights it reads (the mixer calls in_proj)
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
        return _any_state_step(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, kwargs.get("state_batch_indices"))


def _calling_mixer():
    """(mixer, attention_mask, falls_back): the Mamba mixer whose forward made the fused call, that forward's
    attention_mask and whether it runs its unfused path when the call answers None (transformers 5.x's
    `fused_output`), read from the calling frames (transformers' mixers make it from their forward, `self` the
    mixer: an object with A_log and x_proj); (None, None, False) where they cannot be read (under
    torch.compile's tracing, or a caller of another shape)."""
    if torch.compiler.is_compiling():
        return None, None, False
    f = sys._getframe(2)
    for _ in range(12):
        if f is None:
            break
        mixer = f.f_locals.get("self")
        if mixer is not None and hasattr(mixer, "A_log") and hasattr(mixer, "x_proj"):
            return mixer, f.f_locals.get("attention_mask"), "fused_output" in f.f_code.co_varnames
        f = f.f_back
    return None, None, False


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
        mixer, mask, falls_back = _calling_mixer()  # the call says nothing of the conv's activation, of
        # adapters / hooks on the projections whose weights the block reads (in_proj is called by the mixer) and
        # on FalconMamba's norms, nor of the padding the unfused path masks after the conv
        if mixer is not None and not (_fusable(mixer, _READS) and all(
                _no_hooks(n) for n in (getattr(mixer, k, None) for k in _NORMS) if isinstance(n, nn.Module))):
            if falls_back:  # None, as transformers' own body answers: the mixer's unfused path, which applies
                return None  # them (on the route's conv and scan where mapped)
            raise NotImplementedError(
                f"selscan (kernels route): the fused training call computes silu after the conv and reads "
                f"x_proj / dt_proj / out_proj's weights without calling them, but this mixer has activation "
                f"{getattr(mixer, 'activation', None)!r} or an adapter / hook on a projection or norm "
                f"(argument 'activation')")
        pre = dt_rms_weight is not None
        if pre:
            R = delta_proj_weight.shape[1]
            if tuple(dt_rms_weight.shape) != (R,):
                dt_rms_weight = _ones(R, xz.device)
        extra = {k: kwargs[k] for k in _INNER_KEYWORDS if k in kwargs}
        return _mamba_inner_fn(xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight, out_proj_weight,
                               out_proj_bias, A, B, C, D, delta_bias, delta_softplus=delta_softplus,
                               b_rms_weight=b_rms_weight, c_rms_weight=c_rms_weight, dt_rms_weight=dt_rms_weight,
                               b_c_dt_rms_eps=b_c_dt_rms_eps, dt_rms_pre_proj=pre,
                               mask=None if mixer is None else _mixer_padding(mixer, mask), **extra)


class causal_conv1d_fn(nn.Module):
    """transformers' causal_conv1d_fn(hidden_states, weight, bias, activation, **kwargs) on
    selscan's causal_conv1d_fn: widths 2 .. 4 and activation None, "silu" or "swish", as
    causal_conv1d's kernels (another is refused with selscan's NotImplementedError naming weight /
    activation). causal_conv1d's initial_states / return_final_states / final_states_out pass through
    as keywords; packed sequences (seq_idx, or cu_seqlens alone) restart the conv, a cache's left context
    continuing the first sequence (selscan_torch.ssd.conv_packing), where the Mamba-2 scan layer restarts
    too (the Mamba-1 scan layer reads cu_seqlens only; transformers 5.24's Mamba-1 models hand their mixers
    no keywords); other keywords (the mixer's own) are ignored."""

    def forward(self, x, weight, bias=None, activation=None, **kwargs):
        extra = {k: kwargs[k] for k in _CONV_KEYWORDS if kwargs.get(k) is not None}
        extra.update(_conv_packing(kwargs.get("seq_idx"), kwargs.get("cu_seqlens"), x.shape[-1]))
        return _causal_conv1d_fn(x, weight, bias, activation=activation, **extra)


class causal_conv1d_update(nn.Module):
    """transformers' causal_conv1d_update(hidden_states, conv_state, weight, bias, activation) on
    selscan's conv step (in place on conv_state)."""

    has_backward = False

    def forward(self, x, conv_state, weight, bias=None, activation=None):
        return _causal_conv1d_update(x, conv_state, weight, bias, activation)


class mamba_chunk_scan_combined(nn.Module):
    """transformers' mamba2_chunk_scan(hidden_states, dt, A, B, C, chunk_size, D, dt_bias,
    initial_states, dt_softplus, dt_limit, return_final_states, **kwargs) on selscan's
    mamba_chunk_scan_combined (mamba_ssm's signature): out, or (out, final_states) in float32.
    mamba_ssm's z / seq_idx / cu_seqlens / return_varlen_states pass through as keywords; other
    keywords (the model's own) are ignored. chunk_size is accepted and unused (selscan's scan is
    exact per step). initial_states is copied where autograd records the call: a mixer training on a
    cache writes the new state into the cache's tensor it handed here, which the scan keeps for its
    backward."""

    def forward(self, x, dt, A, B, C, chunk_size, D=None, dt_bias=None, initial_states=None, dt_softplus=False,
                dt_limit=(0.0, float("inf")), return_final_states=False, **kwargs):
        extra = {k: kwargs[k] for k in _SSD_KEYWORDS if kwargs.get(k) is not None}
        initial_states = _own_initial_states(initial_states, (x, dt, A, B, C, D, dt_bias, extra.get("z")))
        return _mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=D, dt_bias=dt_bias,
                                          initial_states=initial_states, dt_softplus=bool(dt_softplus),
                                          dt_limit=dt_limit, return_final_states=bool(return_final_states), **extra)


class mamba_split_conv1d_scan_combined(nn.Module):
    """transformers' mamba2_split_conv1d_scan_combined(zxbcdt, conv1d_weight, conv1d_bias, dt_bias,
    A, D, chunk_size, initial_states, dt_limit, return_final_states, activation, rmsnorm_weight,
    rmsnorm_eps, outproj_weight, outproj_bias, headdim, ngroups, norm_before_gate, **kwargs): None,
    as transformers' PyTorch body answers, so that the mixer runs its unfused path, which masks
    padding (see the module's docstring)."""

    def forward(self, zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, chunk_size, initial_states=None,
                dt_limit=(0.0, float("inf")), return_final_states=False, activation="silu", rmsnorm_weight=None,
                rmsnorm_eps=1e-6, outproj_weight=None, outproj_bias=None, headdim=None, ngroups=1,
                norm_before_gate=True, **kwargs):
        return None
