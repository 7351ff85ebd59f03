"""The fused Mamba-1 block on selscan: mamba_ssm's mamba_inner_fn (signature and semantics).

    from selscan_torch import mamba_inner_fn

    out = mamba_inner_fn(xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight,
                         out_proj_weight, out_proj_bias, A, D=D, delta_bias=dt_bias)

computes, for xz = in_proj(hidden).transpose(1, 2) (batch, 2 * dim, L) split into x, z:

    xc    = silu(causal_conv1d(x, conv1d_weight, conv1d_bias))            selscan's conv
    x_dbl = x_proj(xc) = [dt_low (R) | B (N) | C (N)]                      one GEMM
    delta = delta_proj_weight @ dt_low                                      one GEMM
    y     = selective_scan(xc, delta, A, B, C, D, z, delta_bias, softplus)  selscan's scan
    out   = out_proj(y)                                                     one GEMM

What it does beyond mamba_ssm's MambaInnerFn:
- No layout copies: every (batch, ·, L) activation lives in (channels, batch * L) memory, the
  layout in which x_proj / delta_proj / out_proj and their gradients are single GEMMs on views,
  and in which the scan reads L-contiguous rows: the conv writes its output there from xz's
  layout (whatever its strides), B and C are read in place from x_proj's output as (batch, N, L)
  strided views, delta comes out of its GEMM already there. (mamba_ssm copies xz when its L
  stride is not 1, and copies B, C and the conv output's transposes.) One exception, on CUDA
  only: a z with an L stride other than 1 (transformers' channels-last xz) is copied for the
  scan, whose fast CUDA kernels need unit L strides (see _scan_z): half of mamba_ssm's xz copy.
- Saved for the backward: xz, x_proj's output and the scan's output y; at checkpoint_lvl=1 (the
  default) the conv output, delta (and the normalised B / C / delta) and the scan's states are
  recomputed in the backward (mamba_ssm recomputes the first three; its scan keeps one state per
  2048 steps, selscan's checkpoint one per 64: kept, it would cost rows * dim * L / 64 * N floats
  a layer, 0.56 GiB over the 130m model's 24 layers at 8 x 2048, more than the recomputation's
  time is worth where memory is the cost); checkpoint_lvl=0 keeps all four (more memory, a faster
  backward).
- The B / C / dt RMS norms (FalconMamba) are differentiated exactly (mamba_ssm's backward passes
  the normalised operands' gradients through as if there were no norm, and returns no gradient
  for the norm weights); with dt_rms_pre_proj=True (a selscan extension) the dt norm is applied to
  x_proj's dt_rank slice before delta_proj, as transformers' FalconMamba PyTorch path does.
- mask=attention_mask (a selscan extension): the conv's output is multiplied by the (batch, L)
  mask before x_proj and the scan, as transformers' PyTorch path masks it (its fused branch does
  not: the conv bias at pad positions then reaches the state), and its gradient likewise.
- CPU and CUDA; deterministic (selscan's ops and plain GEMMs / sums).

Autocast: as mamba_ssm's custom_fwd / custom_bwd: under autocast the three projection weights (and
out_proj_bias) are used in the autocast dtype, the conv, A, D, delta_bias in float32, and the
backward runs in the same dtypes. Any device's autocast (CPU too).
"""
import torch
import torch.nn.functional as F

from . import _C  # noqa: F401
from . import _checks
from . import conv as _conv  # noqa: F401  (registers the conv ops' fake kernels)

__all__ = ["mamba_inner_fn"]

_ops = torch.ops.selscan
from . import bwd_call as _scan_bwd, fwd_call as _scan_fwd  # noqa: E402  (the ops, _checks.direct)
from .conv import conv_bwd_call as _conv_bwd, conv_fwd_call as _conv_fwd  # noqa: E402


# ---- layouts ---------------------------------------------------------------------------------
# An activation (batch, C, L) "in cm layout" has (C, batch, L) memory: .permute(1, 0, 2) of a
# contiguous (C, batch, L) tensor; as a matrix it is the (C, batch * L) view below.


def _cm_matrix(t):
    """(batch, C, L) in cm layout -> its (C, batch * L) matrix (a view)."""
    b, c, L = t.shape
    return t.permute(1, 0, 2).reshape(c, b * L)


def _cm_tensor(m, b, L):
    """(C, batch * L) matrix -> (batch, C, L) view (cm layout when m is contiguous)."""
    return m.view(m.shape[0], b, L).permute(1, 0, 2)


def _scan_z(z):
    """z as the scan reads it. selscan's fast CUDA kernels take rows with unit L stride only
    (unless the extension was built with SELSCAN_TORCH_CHANNELS_LAST=1; otherwise its general
    kernels run, ~2x slower): a channels-last z (transformers' in_proj(h).transpose(1, 2)) is
    copied into cm layout on CUDA, half of what mamba_ssm copies (all of xz). The CPU scan reads
    it in place."""
    if z.is_cuda and z.stride(2) != 1 and z.shape[2] > 1:
        zc = torch.empty((z.shape[1], z.shape[0], z.shape[2]), dtype=z.dtype, device=z.device).permute(1, 0, 2)
        return zc.copy_(z)
    return z


# ---- RMS norm over the feature dim (dim 0) of a (features, batch * L) matrix -------------------
# y = x * rsqrt(mean(x^2) + eps) * w, computed in float32, returned in x's dtype (mamba_ssm's
# rms_norm_forward and transformers' FalconMamba norm).


def _rms_fwd(x, w, eps):
    xf = x.float()
    r = torch.rsqrt(xf.square().mean(0, keepdim=True) + eps)
    y = xf * r
    if w is not None:
        y = y * w.float()[:, None]
    return y.to(x.dtype)


def _rms_bwd(x, w, eps, dy):
    """(dx in x's dtype, dw float32 or None) for _rms_fwd."""
    xf = x.float()
    r = torch.rsqrt(xf.square().mean(0, keepdim=True) + eps)
    xhat = xf * r
    dyf = dy.float()
    dyw = dyf * w.float()[:, None] if w is not None else dyf
    dx = r * (dyw - xhat * (dyw * xhat).mean(0, keepdim=True))
    dw = (dyf * xhat).sum(1) if w is not None else None
    return dx.to(x.dtype), dw


# ---- the block's autograd Function ------------------------------------------------------------


class _Cfg:
    __slots__ = ("b", "d", "L", "R", "N", "K", "var_B", "var_C", "softplus", "lvl", "eps", "dt_pre",
                 "has_out_bias", "has_D", "has_db", "has_cb", "has_bpb", "has_cpb", "dev")


def _project(cfg, x_dbl, delta_proj_weight, B_proj_bias, C_proj_bias, b_rms, c_rms, dt_rms):
    """x_proj's output (K, bL) -> delta (b, d, L) cm layout, B, C (b, N, L) (views when no bias /
    norm applies)."""
    b, L, R, N, eps = cfg.b, cfg.L, cfg.R, cfg.N, cfg.eps
    low = x_dbl[:R]
    if dt_rms is not None and cfg.dt_pre:
        low = _rms_fwd(low, dt_rms, eps)
    delta2d = delta_proj_weight @ low
    if dt_rms is not None and not cfg.dt_pre:
        delta2d = _rms_fwd(delta2d, dt_rms, eps)
    B = C = None
    if cfg.var_B:
        Bm = x_dbl[R:R + N]
        if B_proj_bias is not None:
            Bm = Bm + B_proj_bias[:, None]
        if b_rms is not None:
            Bm = _rms_fwd(Bm, b_rms, eps)
        B = Bm.view(N, b, L).permute(1, 0, 2)
    if cfg.var_C:
        Cm = x_dbl[cfg.K - N:]
        if C_proj_bias is not None:
            Cm = Cm + C_proj_bias[:, None]
        if c_rms is not None:
            Cm = _rms_fwd(Cm, c_rms, eps)
        C = Cm.view(N, b, L).permute(1, 0, 2)
    return _cm_tensor(delta2d, b, L), B, C


# the conv op's argument names -> mamba_inner_fn's (the conv's x: xz's first half)
_CONV_NAMES = {"weight": "conv1d_weight", "bias": "conv1d_bias", "x": "xz"}


class _MambaInnerFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xz, conv_w, conv_b, x_proj_weight, delta_proj_weight, out_proj_weight, out_proj_bias, A, B, C,
                D, delta_bias, B_proj_bias, C_proj_bias, b_rms, c_rms, dt_rms, pad, cfg):
        b, d, L = cfg.b, cfg.d, cfg.L
        x = xz[:, :d]
        z = _scan_z(xz[:, d:])
        with torch.autocast(cfg.dev, enabled=False):
            try:
                conv_out, _ = _conv_fwd(x, conv_w, conv_b, None, None, True, False, True)  # cm layout
            except _checks.REFUSALS as e:  # the conv's refusal, in this function's names
                _checks.raise_renamed(e, _CONV_NAMES)
            if pad is not None:  # in place (fresh; layout kept): rounds as transformers' (h * mask).to(dtype)
                conv_out.mul_(pad)
            x_dbl = x_proj_weight @ _cm_matrix(conv_out)  # (K, bL)
            delta, Bv, Cv = _project(cfg, x_dbl, delta_proj_weight, B_proj_bias, C_proj_bias, b_rms, c_rms, dt_rms)
            Bs = Bv if cfg.var_B else B
            Cs = Cv if cfg.var_C else C
            y, _, ck = _scan_fwd(conv_out, delta, A, Bs, Cs, D, z, delta_bias, None, None, cfg.softplus, False,
                                 cfg.lvl == 0)
            out = F.linear(_cm_matrix(y).t(), out_proj_weight, out_proj_bias)  # (bL, d_model)
        keep = (conv_out, delta, Bv, Cv) if cfg.lvl == 0 else (None, None, None, None)
        ctx.save_for_backward(xz, conv_w, conv_b, x_dbl, x_proj_weight, delta_proj_weight, out_proj_weight, A, B, C,
                              D, delta_bias, B_proj_bias, C_proj_bias, b_rms, c_rms, dt_rms, pad, y, ck, *keep)
        ctx.cfg = cfg
        return out.view(b, L, out.shape[-1])

    @staticmethod
    def backward(ctx, dout):
        cfg = ctx.cfg
        (xz, conv_w, conv_b, x_dbl, x_proj_weight, delta_proj_weight, out_proj_weight, A, B, C, D, delta_bias,
         B_proj_bias, C_proj_bias, b_rms, c_rms, dt_rms, pad, y, ck, conv_out, delta, Bv, Cv) = ctx.saved_tensors
        b, d, L, R, N, K, eps = cfg.b, cfg.d, cfg.L, cfg.R, cfg.N, cfg.K, cfg.eps
        nig = ctx.needs_input_grad
        x = xz[:, :d]
        z = _scan_z(xz[:, d:])
        with torch.autocast(cfg.dev, enabled=False):
            dout2d = dout.reshape(b * L, dout.shape[-1]).to(out_proj_weight.dtype)
            y2d = _cm_matrix(y)
            d_out_w = dout2d.t() @ y2d.t() if nig[5] else None
            d_out_b = dout2d.sum(0) if (cfg.has_out_bias and nig[6]) else None
            dy = _cm_tensor(out_proj_weight.t() @ dout2d.t(), b, L)  # (b, d, L) cm layout
            if cfg.lvl == 1:  # recompute the conv output and delta / B / C
                conv_out, _ = _conv_fwd(x, conv_w, conv_b, None, None, True, False, True)
                if pad is not None:
                    conv_out.mul_(pad)
                delta, Bv, Cv = _project(cfg, x_dbl, delta_proj_weight, B_proj_bias, C_proj_bias, b_rms, c_rms,
                                         dt_rms)
            Bs = Bv if cfg.var_B else B
            Cs = Cv if cfg.var_C else C
            mask = [1, 1, int(nig[7]), int(cfg.var_B or nig[8]), int(cfg.var_C or nig[9]),
                    int(cfg.has_D and nig[10]), 1, int(cfg.has_db and nig[11]), 0]
            du, ddelta, dA, dB, dC, dD, dz, ddb, _ = _scan_bwd(conv_out, delta, A, Bs, Cs, D, z, delta_bias, None,
                                                               None, dy, None, ck, cfg.softplus, mask)
            # x_proj's output gradient (K, bL): [d dt_low | d B | d C] (rows no operand reads: 0)
            full = cfg.var_B and cfg.var_C and K == R + 2 * N
            dx_dbl = x_dbl.new_empty(x_dbl.shape) if full else x_dbl.new_zeros(x_dbl.shape)
            # delta <- delta_proj_weight @ low, low = x_dbl[:R] (normalised first with dt_pre)
            ddelta2d = _cm_matrix(ddelta)
            low = x_dbl[:R]
            d_dt_rms = None
            if dt_rms is not None and not cfg.dt_pre:
                ddelta2d, d_dt_rms = _rms_bwd(delta_proj_weight @ low, dt_rms, eps, ddelta2d)
            low_n = _rms_fwd(low, dt_rms, eps) if (dt_rms is not None and cfg.dt_pre) else low
            d_dt_w = ddelta2d @ low_n.t() if nig[4] else None
            dlow = delta_proj_weight.t() @ ddelta2d
            if dt_rms is not None and cfg.dt_pre:
                dlow, d_dt_rms = _rms_bwd(low, dt_rms, eps, dlow)
            dx_dbl[:R] = dlow
            d_bpb = d_cpb = d_b_rms = d_c_rms = None
            if cfg.var_B:
                dBm = dB.permute(1, 0, 2).reshape(N, b * L)
                if b_rms is not None:
                    pre = x_dbl[R:R + N] if B_proj_bias is None else x_dbl[R:R + N] + B_proj_bias[:, None]
                    dBm, d_b_rms = _rms_bwd(pre, b_rms, eps, dBm)
                    d_b_rms = d_b_rms.to(b_rms.dtype)
                if cfg.has_bpb:
                    d_bpb = dBm.sum(1)
                dx_dbl[R:R + N] = dBm
            if cfg.var_C:
                dCm = dC.permute(1, 0, 2).reshape(N, b * L)
                if c_rms is not None:
                    pre = x_dbl[K - N:] if C_proj_bias is None else x_dbl[K - N:] + C_proj_bias[:, None]
                    dCm, d_c_rms = _rms_bwd(pre, c_rms, eps, dCm)
                    d_c_rms = d_c_rms.to(c_rms.dtype)
                if cfg.has_cpb:
                    d_cpb = dCm.sum(1)
                dx_dbl[K - N:] = dCm
            if d_dt_rms is not None:
                d_dt_rms = d_dt_rms.to(dt_rms.dtype)
            d_x_proj_w = dx_dbl @ _cm_matrix(conv_out).t() if nig[3] else None
            dconv2d = _cm_matrix(du)  # a view when du has u's cm layout (the scan's outputs do)
            dconv2d.addmm_(x_proj_weight.t(), dx_dbl)  # in place: du is the scan's fresh output
            dconv = _cm_tensor(dconv2d, b, L)
            if pad is not None:
                dconv.mul_(pad)  # the masked output's gradient -> the conv's
            cmask = [1, int(nig[1]), int(cfg.has_cb and nig[2]), 0]
            dx, dconv_w, dconv_b, _ = _conv_bwd(x, conv_w, conv_b, None, None, dconv, None, True, cmask)
            # dxz in cm layout ((2 dim, batch, L) memory) whatever xz's: dx (dconv's layout) and dz
            # (the scan's, cm on CUDA) go in as contiguous block copies, not transposes, and
            # in_proj's backward reads the (batch * L, 2 dim) gradient as a column-major matrix
            # view (transformers' xz = in_proj(h).transpose(1, 2)) or a row-major one (mamba_ssm's)
            dxz_m = torch.empty((2 * d, b, L), dtype=xz.dtype, device=xz.device)
            dxz_m[:d].copy_(dx.permute(1, 0, 2))
            dxz_m[d:].copy_(dz.permute(1, 0, 2))
            dxz = dxz_m.permute(1, 0, 2)
        return (dxz, dconv_w if nig[1] else None, dconv_b if cmask[2] else None, d_x_proj_w, d_dt_w, d_out_w,
                d_out_b, dA if nig[7] else None, dB if (not cfg.var_B and nig[8]) else None,
                dC if (not cfg.var_C and nig[9]) else None, dD if mask[5] else None, ddb if mask[7] else None,
                d_bpb, d_cpb, d_b_rms, d_c_rms, d_dt_rms, None, None)


# ---- in_proj into the cm layout ---------------------------------------------------------------


class _InProjCM(torch.autograd.Function):
    """xz = weight @ h^T (+ bias): in_proj's output written as a (2 dim, batch * L) matrix, i.e. xz
    in cm layout, which the block reads without a transpose (x for the conv, z for the scan). The
    backward writes dh row-major ((batch * L, d_model), the layout of h), not the transposed view
    autograd's mm would give the layers below."""

    @staticmethod
    def forward(ctx, h2d, weight, bias):
        with torch.autocast(h2d.device.type, enabled=False):
            out = torch.mm(weight, h2d.t()) if bias is None else torch.addmm(bias[:, None], weight, h2d.t())
        ctx.save_for_backward(h2d, weight)
        ctx.has_bias = bias is not None
        return out

    @staticmethod
    def backward(ctx, dout):
        h2d, weight = ctx.saved_tensors
        nig = ctx.needs_input_grad
        with torch.autocast(h2d.device.type, enabled=False):
            dout = dout.to(weight.dtype)
            dh = torch.mm(dout.t(), weight) if nig[0] else None
            dw = torch.mm(dout, h2d) if nig[1] else None
            db = dout.sum(1) if (ctx.has_bias and nig[2]) else None
        return dh, dw, db


def in_proj_cm(hidden_states, weight, bias=None):
    """F.linear(hidden_states, weight, bias).transpose(1, 2) (transformers' xz) as one GEMM whose
    output is already in cm layout: (batch, L, d_model) -> (batch, 2 dim, L) with (2 dim, batch, L)
    memory. Autocast: as F.linear (weight, bias and hidden_states in the autocast dtype)."""
    b, L, dm = hidden_states.shape
    dev = hidden_states.device.type
    cdt = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else hidden_states.dtype
    h2d = _to(hidden_states.reshape(b * L, dm), "hidden_states", cdt)
    _checks.no_func_transforms("in_proj_cm")
    out = _InProjCM.apply(h2d, _to(weight, "weight", cdt), _to(bias, "bias", cdt))
    return _cm_tensor(out, b, L)


# ---- mamba_ssm's API --------------------------------------------------------------------------


def _to(t, name, dtype):
    """t in dtype (None stays None): a floating-point tensor cast, complex / integer / bool refused
    naming the argument (_checks.cast: never a silent real part or truncation)."""
    return None if t is None else _checks.cast(t, name, dtype)


def mamba_inner_fn(xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight, out_proj_weight, out_proj_bias,
                   A, B=None, C=None, D=None, delta_bias=None, B_proj_bias=None, C_proj_bias=None,
                   delta_softplus=True, checkpoint_lvl=1, b_rms_weight=None, c_rms_weight=None, dt_rms_weight=None,
                   b_c_dt_rms_eps=1e-6, *, dt_rms_pre_proj=False, mask=None):
    """mamba_ssm.ops.selective_scan_interface.mamba_inner_fn on selscan (same signature).

    xz: (batch, 2 * dim, L) any strides (in_proj's output transposed); conv1d_weight (dim, 1, W)
    or (dim, W), W 2 .. 4; conv1d_bias (dim,); x_proj_weight (K, dim) with K = dt_rank + N (B
    variable) + N (C variable); delta_proj_weight (dim, dt_rank); out_proj_weight (d_model, dim);
    out_proj_bias (d_model,); A (dim, N) real; B / C: None (variable, from x_proj's output) or given
    as for selective_scan_fn; D, delta_bias (dim,); B_proj_bias / C_proj_bias (N,) added to the
    variable B / C; checkpoint_lvl 0 (save the conv output, delta and the scan's checkpoint) or 1 (recompute them in the
    backward); b_rms_weight / c_rms_weight (N,) and dt_rms_weight (dim,): RMS norms of B, C and
    delta (FalconMamba), eps b_c_dt_rms_eps. dt_rms_pre_proj=True (keyword, selscan's): the dt
    norm applies to x_proj's dt_rank slice before delta_proj (dt_rms_weight then (dt_rank,)), as
    transformers' FalconMamba PyTorch path computes. mask (keyword, selscan's): None or a
    (batch, L) tensor (an attention_mask, any dtype) multiplying the conv's output (after its
    activation) before x_proj and the scan, as transformers' PyTorch path applies
    attention_mask there. Returns (batch, L, d_model).
    """
    if checkpoint_lvl not in (0, 1):
        raise ValueError(f"selscan: checkpoint_lvl must be 0 or 1, got {checkpoint_lvl}")
    for name, t, optional in (("xz", xz, False), ("conv1d_weight", conv1d_weight, False),
                              ("conv1d_bias", conv1d_bias, True), ("x_proj_weight", x_proj_weight, False),
                              ("delta_proj_weight", delta_proj_weight, False),
                              ("out_proj_weight", out_proj_weight, False),
                              ("out_proj_bias", out_proj_bias, True), ("A", A, False), ("B", B, True), ("C", C, True),
                              ("D", D, True), ("delta_bias", delta_bias, True), ("B_proj_bias", B_proj_bias, True),
                              ("C_proj_bias", C_proj_bias, True), ("b_rms_weight", b_rms_weight, True),
                              ("c_rms_weight", c_rms_weight, True), ("dt_rms_weight", dt_rms_weight, True)):
        _checks.tensor_arg(t, name, optional)
        if t is not None and name.endswith("rms_weight"):  # used as they are (float32 in the norm): real only
            _checks.float_arg(t, name)
        # (F.linear would take a meta weight beside CPU tensors)
        _checks.same_device("mamba_inner_fn", "xz", xz, ((name, t),))
    if A.is_complex():
        raise TypeError("selscan: complex A is not supported (real A only)")
    if xz.dim() != 3 or xz.shape[1] % 2:
        raise ValueError(f"selscan: xz must have shape (batch, 2 * dim, L), got {tuple(xz.shape)}")
    b, two_d, L = xz.shape
    d = two_d // 2
    dev = xz.device.type
    cdt = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else xz.dtype
    if cdt not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"selscan: xz must be float32, float16 or bfloat16, got {cdt}")
    W = conv1d_weight.shape[-1] if conv1d_weight.dim() else 0
    if conv1d_weight.numel() != d * W or conv1d_weight.dim() not in (2, 3) or conv1d_weight.shape[0] != d:
        raise ValueError(f"selscan: conv1d_weight must have shape (dim, 1, width) or (dim, width) with dim = {d}, "
                         f"got {tuple(conv1d_weight.shape)}")
    if A.dim() != 2 or A.shape[0] != d:
        raise ValueError(f"selscan: A must have shape (dim, N) with dim = {d}, got {tuple(A.shape)}")
    N = A.shape[1]
    if delta_proj_weight.dim() != 2 or delta_proj_weight.shape[0] != d:
        raise ValueError(f"selscan: delta_proj_weight must have shape (dim, dt_rank) with dim = {d}, got "
                         f"{tuple(delta_proj_weight.shape)}")
    R = delta_proj_weight.shape[1]
    if x_proj_weight.dim() != 2 or x_proj_weight.shape[1] != d:
        raise ValueError(f"selscan: x_proj_weight must have shape (K, dim) with dim = {d}, got "
                         f"{tuple(x_proj_weight.shape)}")
    K = x_proj_weight.shape[0]
    need = R + (N if B is None else 0) + (N if C is None else 0)
    if K < need or (B is None and K < R + N):
        raise ValueError(f"selscan: x_proj_weight has {K} rows; dt_rank ({R}) + the variable B / C ({need - R}) "
                         f"need {need}")
    if out_proj_weight.dim() != 2 or out_proj_weight.shape[1] != d:
        raise ValueError(f"selscan: out_proj_weight must have shape (d_model, dim) with dim = {d}, got "
                         f"{tuple(out_proj_weight.shape)}")
    if out_proj_bias is not None and tuple(out_proj_bias.shape) != (out_proj_weight.shape[0],):
        raise ValueError(f"selscan: out_proj_bias must have shape (d_model,) = ({out_proj_weight.shape[0]},), got "
                         f"{tuple(out_proj_bias.shape)}")
    for name, t, n in (("b_rms_weight", b_rms_weight, N), ("c_rms_weight", c_rms_weight, N),
                       ("dt_rms_weight", dt_rms_weight, R if dt_rms_pre_proj else d),
                       ("B_proj_bias", B_proj_bias, N), ("C_proj_bias", C_proj_bias, N)):
        if t is not None and tuple(t.shape) != (n,):
            raise ValueError(f"selscan: {name} must have shape ({n},), got {tuple(t.shape)}")
    if mask is not None and (mask.dim() != 2 or tuple(mask.shape) != (b, L) or mask.device != xz.device):
        raise ValueError(f"selscan: mask must have shape (batch, L) = ({b}, {L}) on {xz.device}, got "
                         f"{tuple(mask.shape)} on {mask.device}")
    cfg = _Cfg()
    cfg.b, cfg.d, cfg.L, cfg.R, cfg.N, cfg.K = b, d, L, R, N, K
    cfg.var_B, cfg.var_C = B is None, C is None
    cfg.softplus, cfg.lvl, cfg.eps = bool(delta_softplus), int(checkpoint_lvl), float(b_c_dt_rms_eps)
    cfg.dt_pre = bool(dt_rms_pre_proj)
    cfg.has_out_bias, cfg.has_D, cfg.has_db = out_proj_bias is not None, D is not None, delta_bias is not None
    cfg.has_cb, cfg.has_bpb, cfg.has_cpb = conv1d_bias is not None, B_proj_bias is not None, C_proj_bias is not None
    cfg.dev = dev
    f32 = torch.float32
    # dtypes (outside the Function: autograd returns each gradient in its argument's own dtype)
    xz = _to(xz, "xz", cdt)
    conv_w = _to(conv1d_weight.reshape(d, W), "conv1d_weight", f32)
    conv_b = _to(conv1d_bias, "conv1d_bias", f32)
    x_proj_weight, delta_proj_weight = _to(x_proj_weight, "x_proj_weight", cdt), \
        _to(delta_proj_weight, "delta_proj_weight", cdt)
    out_proj_weight, out_proj_bias = _to(out_proj_weight, "out_proj_weight", cdt), \
        _to(out_proj_bias, "out_proj_bias", cdt)
    A, D, delta_bias = _to(A, "A", f32), _to(D, "D", f32), _to(delta_bias, "delta_bias", f32)
    if B is not None:
        B = _to(B, "B", f32 if B.dim() == 2 else cdt)
    if C is not None:
        C = _to(C, "C", f32 if C.dim() == 2 else cdt)
    B_proj_bias, C_proj_bias = _to(B_proj_bias, "B_proj_bias", cdt), _to(C_proj_bias, "C_proj_bias", cdt)
    if mask is not None:
        mask = mask.detach()[:, None, :]  # (batch, 1, L): broadcast over the channels
    _checks.no_func_transforms("mamba_inner_fn")
    return _MambaInnerFn.apply(xz, conv_w, conv_b, x_proj_weight, delta_proj_weight, out_proj_weight, out_proj_bias,
                               A, B, C, D, delta_bias, B_proj_bias, C_proj_bias, b_rms_weight, c_rms_weight,
                               dt_rms_weight, mask, cfg)
