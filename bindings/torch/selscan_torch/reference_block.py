"""Plain PyTorch references of the causal conv1d (forward and decode update) and of the fused
Mamba-1 block, written from the math, in float64 by default: the tests' oracle for
selscan_torch.conv and selscan_torch.block. Autograd through them gives the reference gradients.
"""
import torch
import torch.nn.functional as F

from .reference import selective_scan_ref


def causal_conv1d_ref(x, weight, bias=None, initial_states=None, activation=None, dtype=torch.float64):
    """(out, final_states) in `dtype`: x (batch, dim, L), weight (dim, W), bias (dim,),
    initial_states (batch, dim, W - 1)."""
    W = weight.shape[-1]
    weight = weight.reshape(weight.shape[0], W)
    x_ = x.to(dtype)
    batch, dim, L = x.shape
    if initial_states is None:
        pad = x_.new_zeros(batch, dim, W - 1)
    else:
        pad = initial_states.to(dtype)
    xp = torch.cat([pad, x_], dim=-1)
    if L == 0:  # (F.conv1d refuses an input shorter than its kernel)
        out = x_.new_zeros(batch, dim, 0)
    else:
        out = F.conv1d(xp, weight.to(dtype).unsqueeze(1), None if bias is None else bias.to(dtype), groups=dim)
    if activation in ("silu", "swish"):
        out = F.silu(out)
    return out, xp[:, :, xp.shape[-1] - (W - 1):]


def causal_conv1d_update_ref(x, conv_state, weight, bias=None, activation=None, conv_state_indices=None,
                             dtype=torch.float64):
    """(out, new_conv_state) in `dtype` on a copy: x (batch, dim) or (batch, dim, L); conv_state
    (n_cache, dim, state_len); negative conv_state_indices: out 0, row untouched."""
    squeeze = x.dim() == 2
    x3 = x.unsqueeze(-1) if squeeze else x
    batch, dim, L = x3.shape
    W = weight.shape[-1]
    state = conv_state.to(dtype).clone()
    out = torch.zeros(batch, dim, L, dtype=dtype, device=x.device)
    for b in range(batch):
        row = b if conv_state_indices is None else int(conv_state_indices[b])
        if row < 0:
            continue
        s = state[row]
        for t in range(L):
            xv = x3[b, :, t].to(dtype)
            win = torch.cat([s[:, s.shape[-1] - (W - 1):], xv[:, None]], dim=-1)
            o = (win * weight.reshape(dim, W).to(dtype)).sum(-1)
            if bias is not None:
                o = o + bias.to(dtype)
            if activation in ("silu", "swish"):
                o = F.silu(o)
            out[b, :, t] = o
            s = torch.cat([s[:, 1:], xv[:, None]], dim=-1)
        state[row] = s
    return (out[:, :, 0] if squeeze else out), state


def _rms(x, w, eps):
    y = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    return y if w is None else y * w


def mamba_inner_ref(xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight, out_proj_weight,
                    out_proj_bias, A, B=None, C=None, D=None, delta_bias=None, B_proj_bias=None, C_proj_bias=None,
                    delta_softplus=True, b_rms_weight=None, c_rms_weight=None, dt_rms_weight=None,
                    b_c_dt_rms_eps=1e-6, dt_rms_pre_proj=False, dtype=torch.float64, mask=None):
    """mamba_inner_fn's math in `dtype` (every input cast to it): returns (batch, L, d_model).
    mask: (batch, L) multiplying the conv's output, as mamba_inner_fn's."""
    c = lambda t: None if t is None else t.to(dtype)  # noqa: E731
    xz = c(xz)
    batch, two_d, L = xz.shape
    d = two_d // 2
    R = delta_proj_weight.shape[1]
    N = A.shape[1]
    x, z = xz[:, :d], xz[:, d:]
    xc, _ = causal_conv1d_ref(x, c(conv1d_weight).reshape(d, -1), c(conv1d_bias), activation="silu", dtype=dtype)
    if mask is not None:
        xc = xc * c(mask)[:, None, :]
    x_dbl = xc.transpose(1, 2) @ c(x_proj_weight).t()  # (b, L, K)
    low = x_dbl[..., :R]
    if dt_rms_weight is not None and dt_rms_pre_proj:
        low = _rms(low, c(dt_rms_weight), b_c_dt_rms_eps)
    delta = low @ c(delta_proj_weight).t()  # (b, L, d)
    if dt_rms_weight is not None and not dt_rms_pre_proj:
        delta = _rms(delta, c(dt_rms_weight), b_c_dt_rms_eps)
    if B is None:
        B = x_dbl[..., R:R + N]
        if B_proj_bias is not None:
            B = B + c(B_proj_bias)
        if b_rms_weight is not None:
            B = _rms(B, c(b_rms_weight), b_c_dt_rms_eps)
        B = B.transpose(1, 2)
    if C is None:
        C = x_dbl[..., x_dbl.shape[-1] - N:]
        if C_proj_bias is not None:
            C = C + c(C_proj_bias)
        if c_rms_weight is not None:
            C = _rms(C, c(c_rms_weight), b_c_dt_rms_eps)
        C = C.transpose(1, 2)
    y = selective_scan_ref(xc, delta.transpose(1, 2), c(A), c(B), c(C), c(D), z, c(delta_bias),
                           delta_softplus=delta_softplus, dtype=dtype)
    return F.linear(y.transpose(1, 2), c(out_proj_weight), c(out_proj_bias))
