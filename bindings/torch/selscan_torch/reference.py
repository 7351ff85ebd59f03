"""A plain PyTorch reference of the selective scan and the decode step, written from the math
(README "What it computes"), in float64 by default: the tests' oracle. Autograd through it gives
the reference gradients. Slow (a Python loop over L): for checking, not for use.
"""
import torch
import torch.nn.functional as F


def _softplus(x):
    # selscan's (and mamba's) softplus: x above 20 passes through. The log1p branch reads x only where
    # it is taken (no overflow to feed the masked gradient; at exactly 20 its derivative, NaN for NaN)
    return torch.where(x > 20, x, torch.log1p(torch.exp(torch.where(x > 20, torch.zeros_like(x), x))))


def _expand_groups(t, dim):
    """(batch, G, N, L) -> (batch, dim, N, L): channel d uses group d // (dim // G)."""
    G = t.shape[1]
    return t.repeat_interleave(dim // G, dim=1)


def selective_scan_ref(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                       return_last_state=False, cu_seqlens=None, h0=None, dtype=torch.float64):
    """Same arguments and shapes as selscan_torch.selective_scan_fn; computes in `dtype` and
    returns out in `dtype` (the caller rounds), last_state in `dtype`."""
    batch, dim, L = u.shape
    N = A.shape[1]
    u_, dl = u.to(dtype), delta.to(dtype)
    if delta_bias is not None:
        dl = dl + delta_bias.to(dtype)[:, None]
    if delta_softplus:
        dl = _softplus(dl)
    A_ = A.to(dtype)

    def bc(t):
        t = t.to(dtype)
        if t.dim() == 2:
            return t[None, :, :, None].expand(batch, dim, N, L)
        if t.dim() == 3:
            t = t[:, None]
        return _expand_groups(t, dim)

    B_, C_ = bc(B), bc(C)
    starts = {0}
    seq_of_start = {0: 0}
    if cu_seqlens is not None:
        offs = [int(v) for v in (cu_seqlens.tolist() if torch.is_tensor(cu_seqlens) else cu_seqlens)]
        starts = set()
        seq_of_start = {}
        for s in range(len(offs) - 1):
            if offs[s] < offs[s + 1]:
                starts.add(offs[s])
                seq_of_start.setdefault(offs[s], s)
        n_seqs = len(offs) - 1
        ends = {offs[s + 1] - 1: s for s in range(n_seqs) if offs[s] < offs[s + 1]}
    h = None
    ys = []
    lasts = {}
    for t in range(L):
        if t in starts:
            s = seq_of_start[t]
            if h0 is not None:
                h = h0.to(dtype)[s if cu_seqlens is not None else slice(None)]
                if cu_seqlens is not None:
                    h = h[None]
            else:
                h = torch.zeros(batch, dim, N, dtype=dtype, device=u.device)
        dA = torch.exp(dl[:, :, t, None] * A_)
        h = dA * h + (dl[:, :, t] * u_[:, :, t])[:, :, None] * B_[:, :, :, t]
        ys.append((h * C_[:, :, :, t]).sum(-1))
        if cu_seqlens is not None and t in ends:
            lasts[ends[t]] = h[0]
    y = torch.stack(ys, dim=2) if ys else u_.new_zeros(batch, dim, 0)
    if D is not None:
        y = y + u_ * D.to(dtype)[:, None]
    if z is not None:
        y = y * F.silu(z.to(dtype))
    if not return_last_state:
        return y
    if cu_seqlens is None:
        if h is None:  # L == 0: the state passes through
            h = h0.to(dtype) if h0 is not None else torch.zeros(batch, dim, N, dtype=dtype, device=u.device)
        last = h
    else:  # empty sequences keep their h0 (or 0)
        rows = []
        for s in range(n_seqs):
            if s in lasts:
                rows.append(lasts[s])
            elif h0 is not None:
                rows.append(h0.to(dtype)[s])
            else:
                rows.append(torch.zeros(dim, N, dtype=dtype, device=u.device))
        last = torch.stack(rows)
    return y, last


def selective_state_update_ref(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
                               state_batch_indices=None, dtype=torch.float64):
    """One step on a copy: returns (out, new_state) in `dtype`; single-head shapes (state
    (n_cache, dim, N), x (batch, dim), B/C (batch, N) or (batch, G, N)), or Mamba-2's multi-head
    ones (state (n_cache, nheads, hdim, N), x / dt / z (batch, nheads, hdim), A (nheads, hdim, N),
    D / dt_bias (nheads, hdim); B/C groups over heads: head h uses group h // (nheads / G)), which
    are channels d = h * hdim + p of the single-head step (out and new_state in their shapes).
    A negative state_batch_indices entry is padding (out 0, no row touched)."""
    if state.dim() == 4:
        n_cache, nh, hd, N = state.shape
        flat = lambda t, *s: None if t is None else t.reshape(*s)  # noqa: E731
        b = x.shape[0]
        d = nh * hd
        out, new = selective_state_update_ref(flat(state, n_cache, d, N), flat(x, b, d), flat(dt, b, d),
                                              flat(A, d, N), B, C, flat(D, d), flat(z, b, d), flat(dt_bias, d),
                                              dt_softplus, state_batch_indices, dtype)
        return out.reshape(b, nh, hd), new.reshape(n_cache, nh, hd, N)
    batch, dim = x.shape
    N = state.shape[-1]
    new_state = state.to(dtype).clone()
    d = dt.to(dtype)
    if dt_bias is not None:
        d = d + dt_bias.to(dtype)
    if dt_softplus:
        d = _softplus(d)
    B_ = B.to(dtype)
    C_ = C.to(dtype)
    if B_.dim() == 2:
        B_, C_ = B_[:, None], C_[:, None]
    B_ = B_.repeat_interleave(dim // B_.shape[1], dim=1)
    C_ = C_.repeat_interleave(dim // C_.shape[1], dim=1)
    out = torch.zeros(batch, dim, dtype=dtype, device=x.device)
    for b in range(batch):
        row = b if state_batch_indices is None else int(state_batch_indices[b])
        if row < 0:
            continue
        h = torch.exp(d[b, :, None] * A.to(dtype)) * new_state[row] + (d[b] * x[b].to(dtype))[:, None] * B_[b]
        new_state[row] = h
        o = (h * C_[b]).sum(-1)
        if D is not None:
            o = o + x[b].to(dtype) * D.to(dtype)
        if z is not None:
            o = o * F.silu(z[b].to(dtype))
        out[b] = o
    return out, new_state


def ssd_ref(x, dt, A, B, C, D=None, z=None, dt_bias=None, initial_states=None, seq_idx=None, cu_seqlens=None,
            dt_softplus=False, dt_limit=None, dtype=torch.float64):
    """Mamba-2's SSD scan step by step (selscan.h >>ssd-api; not mamba_ssm's chunked algorithm), in
    `dtype`: x (batch, L, H, P), dt (batch, L, H), A (H), B / C (batch, L, G, N), D (H) or (H, P),
    z like x, dt_bias (H), initial_states (rows, H, P, N), seq_idx (batch, L) (the state restarts
    from 0 where it changes), cu_seqlens (n_seqs + 1) offsets of packed sequences (batch 1; each
    starts from initial_states[s] or 0); dt_limit (lo, hi) clamps dt after the softplus. Returns
    out (batch, L, H, P) and the final states (rows, H, P, N; rows = n_seqs with cu_seqlens)."""
    batch, L, H, P = x.shape
    N = B.shape[-1]
    x_, d = x.to(dtype), dt.to(dtype)
    if dt_bias is not None:
        d = d + dt_bias.to(dtype)
    if dt_softplus:
        d = _softplus(d)
    if dt_limit is not None:
        d = d.clamp(min=dt_limit[0], max=dt_limit[1])
    hpg = H // B.shape[2]
    Bh, Ch = (t.to(dtype).repeat_interleave(hpg, dim=2) for t in (B, C))  # (batch, L, H, N)
    a = torch.exp(d * A.to(dtype))  # (batch, L, H)
    starts = {0: 0}
    if cu_seqlens is not None:
        cu = [int(v) for v in cu_seqlens]
        starts = {cu[s]: s for s in range(len(cu) - 1) if cu[s] < cu[s + 1]}
        rows = len(cu) - 1
    else:
        rows = batch
    zeros = x_.new_zeros(batch, H, P, N)

    def init(s):
        if initial_states is None:
            return zeros
        return initial_states.to(dtype)[s:s + 1].expand(batch, H, P, N) if cu_seqlens is not None \
            else initial_states.to(dtype)

    S = init(0)
    ys, finals, seq = [], [None] * rows, None  # seq: the packed sequence being scanned
    for t in range(L):
        if cu_seqlens is not None and t in starts:
            if seq is not None:
                finals[seq] = S[0]
            seq = starts[t]
            S = init(seq)
        elif seq_idx is not None and t > 0:
            # a restart starts from 0 (a selection, not a product with 0: an inf state would give NaN)
            S = torch.where((seq_idx[:, t] == seq_idx[:, t - 1])[:, None, None, None], S, torch.zeros_like(S))
        S = a[:, t, :, None, None] * S + (d[:, t, :, None] * x_[:, t])[..., None] * Bh[:, t, :, None, :]
        y = (S * Ch[:, t, :, None, :]).sum(-1)
        if D is not None:
            Dv = D.to(dtype)
            y = y + (Dv[:, None] if Dv.dim() == 1 else Dv) * x_[:, t]
        if z is not None:
            zt = z[:, t].to(dtype)
            y = y * zt * torch.sigmoid(zt)
        ys.append(y)
    out = torch.stack(ys, dim=1) if L else x_.new_zeros(batch, 0, H, P)
    if cu_seqlens is None:
        return out, S
    if seq is not None:
        finals[seq] = S[0]
    for s in range(rows):  # empty sequences (and any not reached): their initial state
        if finals[s] is None:
            finals[s] = init(s)[0]
    return out, torch.stack(finals)


def mamba_split_conv1d_scan_ref(zxbcdt, w, b, dt_bias, A, D, init, dt_limit, rmsw, eps, Wout, bout, headdim, ngroups,
                                nbg):
    """mamba_ssm's mamba_split_conv1d_scan_combined written from its math in float64 (the split of
    zxbcdt, the causal conv with silu, ssd_ref with dt_softplus, the gate in the scan or the gated group
    RMS norm, norm_before_gate nbg, the SwiGLU halves, out_proj): the tests' oracle. Returns (out,
    final states)."""
    f = lambda t: None if t is None else t.double()  # noqa: E731
    zxbcdt, w, b, Wout, bout = f(zxbcdt), f(w), f(b), f(Wout), f(bout)
    H = A.shape[0]
    dim = H * headdim
    N = (w.shape[0] - dim) // ngroups // 2
    d2 = zxbcdt.shape[-1] - (2 * dim + 2 * ngroups * N + H)
    zx0, z, xBC, dt = torch.split(zxbcdt, [d2, dim, dim + 2 * ngroups * N, H], dim=-1)
    W = w.shape[1]
    xc = F.conv1d(xBC.transpose(1, 2), w[:, None], b, padding=W - 1, groups=w.shape[0])
    xc = F.silu(xc[..., :xBC.shape[1]]).transpose(1, 2)
    x, B, C = torch.split(xc, [dim, ngroups * N, ngroups * N], dim=-1)
    zz = z.unflatten(-1, (H, headdim))
    y, fin = ssd_ref(x.unflatten(-1, (H, headdim)), dt, A, B.unflatten(-1, (ngroups, N)), C.unflatten(-1, (ngroups, N)),
                     D, zz if rmsw is None else None, dt_bias, init, None, None, True, dt_limit)
    y = y.flatten(-2)
    if rmsw is not None:
        if not nbg:
            y = y * F.silu(z)
        g = y.unflatten(-1, (-1, dim // ngroups))
        y = (g * torch.rsqrt(g.square().mean(-1, keepdim=True) + eps)).flatten(-2) * rmsw.double()
        if nbg:
            y = y * F.silu(z)
    if d2:
        z0, x0 = zx0.chunk(2, dim=-1)
        y = torch.cat([F.silu(z0) * x0, y], dim=-1)
    if Wout is not None:
        y = F.linear(y, Wout, bout)
    return y, fin
