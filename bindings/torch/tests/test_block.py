"""Tests of selscan's causal conv1d ops (selscan_torch.conv) and the fused Mamba-1 block
(selscan_torch.block.mamba_inner_fn) against float64 references written from the math
(selscan_torch.reference_block; autograd through them gives the reference gradients).

CPU always; CUDA where a GPU and the extension's CUDA kernels are present (skipped otherwise).
"""
import itertools

import pytest
import torch
import torch.nn.functional as F

import selscan_torch as st
from _common import DEVICES, GTOL, GTOL32, TOL, TOL32, cuda_only, lowp_tol, rel_err
from selscan_torch.reference_block import causal_conv1d_ref, causal_conv1d_update_ref, mamba_inner_ref


def gen(seed):
    return torch.Generator().manual_seed(seed)


def layout(t, kind):
    """The same values in another memory layout: 'contig', 'cl' (channels-last: (b, L, c) memory),
    'cm' ((c, b, L) memory), 'slice' (the first half of a channels-last tensor twice as wide)."""
    if kind == "contig":
        return t.contiguous()
    b, c, L = t.shape
    if kind == "cl":
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    if kind == "cm":
        return t.permute(1, 0, 2).contiguous().permute(1, 0, 2)
    if kind == "slice":
        big = torch.cat([t, torch.randn_like(t)], dim=1).transpose(1, 2).contiguous().transpose(1, 2)
        return big[:, :c]
    raise ValueError(kind)


# ============================================================================================
# causal conv1d
# ============================================================================================


def conv_inputs(batch=2, dim=12, L=19, W=4, dtype=torch.float32, device="cpu", seed=0, init=False):
    g = gen(seed)
    x = torch.randn(batch, dim, L, generator=g).to(dtype).to(device)
    w = (torch.randn(dim, W, generator=g) * 0.5).to(device)
    b = (torch.randn(dim, generator=g) * 0.3).to(device)
    s = torch.randn(batch, dim, W - 1, generator=g).to(dtype).to(device) if init else None
    return x, w, b, s


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("W,act,bias,init,lay", [
    (W, act, bias, init, lay)
    for W, act, bias, init, lay in itertools.product((2, 3, 4), (None, "silu", "swish"), (True, False), (False, True),
                                                     ("contig", "cl", "slice"))
    if not (W == 3 and lay == "slice")])
def test_conv_fwd_bwd(device, W, act, bias, init, lay):
    x, w, b, s = conv_inputs(W=W, device=device, init=init, seed=W)
    b = b if bias else None
    x = layout(x, lay)
    leaves = [t.clone().requires_grad_(True) for t in (x, w) + ((b,) if bias else ()) + ((s,) if init else ())]
    xs, ws = leaves[0], leaves[1]
    bs = leaves[2] if bias else None
    ss = leaves[-1] if init else None
    y, fin = st.causal_conv1d_fn(xs, ws, bs, initial_states=ss, return_final_states=True, activation=act)
    assert y.dtype == x.dtype and y.shape == x.shape and fin.shape == (x.shape[0], x.shape[1], W - 1)
    gy, gf = torch.randn_like(y), torch.randn_like(fin)
    torch.autograd.backward([y, fin], [gy, gf])
    refs = [t.detach().double().requires_grad_(True) for t in leaves]
    xr, wr = refs[0], refs[1]
    br = refs[2] if bias else None
    sr = refs[-1] if init else None
    yr, fr = causal_conv1d_ref(xr, wr, br, sr, act)
    torch.autograd.backward([yr, fr], [gy.double(), gf.double()])
    assert rel_err(y, yr) < TOL[torch.float32]
    assert rel_err(fin, fr) == 0  # the final state is a copy of inputs
    for a, r in zip(leaves, refs):
        assert a.grad.dtype == a.dtype
        assert rel_err(a.grad, r.grad) < GTOL[torch.float32]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_conv_half_dtypes(device, dtype):
    x, w, b, s = conv_inputs(dtype=dtype, device=device, init=True, L=40)
    xs = x.clone().requires_grad_(True)
    ws = w.to(dtype).requires_grad_(True)  # a half weight: used in float32, its gradient in its dtype
    y = st.causal_conv1d_fn(xs, ws, b, initial_states=s, activation="silu")
    gy = torch.randn_like(y)
    y.backward(gy)
    assert ws.grad.dtype == dtype
    xr, wr = x.double().requires_grad_(True), ws.detach().double().requires_grad_(True)
    yr, _ = causal_conv1d_ref(xr, wr, b, s, "silu")
    yr.backward(gy.double())
    assert rel_err(y, yr) < TOL[dtype]
    assert rel_err(xs.grad, xr.grad) < GTOL[dtype]
    assert rel_err(ws.grad, wr.grad) < GTOL[dtype]


@pytest.mark.parametrize("device", DEVICES)
def test_conv_output_layout_follows_x(device):
    x, w, b, _ = conv_inputs(device=device)
    for lay in ("contig", "cl", "cm", "slice"):
        xl = layout(x, lay)
        y = st.causal_conv1d_fn(xl, w, b, activation="silu")
        assert y.is_contiguous() or lay != "contig"
        if lay in ("cl", "slice"):
            assert y.stride(1) == 1  # channels-last in, channels-last out (no transposes)
        if lay == "cm":
            assert y.stride(2) == 1 and y.stride(0) == y.shape[2]
        assert rel_err(y, st.causal_conv1d_fn(x, w, b, activation="silu")) < 1e-6  # paths per layout


@pytest.mark.parametrize("device", DEVICES)
def test_conv_final_states_out_and_weight_3d(device):
    x, w, b, s = conv_inputs(device=device, init=True)
    out = torch.empty(x.shape[0], w.shape[1] - 1, x.shape[1], device=device).transpose(1, 2)
    y, fin = st.causal_conv1d_fn(x, w.unsqueeze(1), b, initial_states=s, return_final_states=True,
                                 final_states_out=out)
    assert fin is out
    _, fr = causal_conv1d_ref(x, w, b, s)
    assert torch.equal(out, fr.float())
    # short sequences: the final state reaches into initial_states
    y2, fin2 = st.causal_conv1d_fn(x[:, :, :2], w, b, initial_states=s, return_final_states=True)
    _, fr2 = causal_conv1d_ref(x[:, :, :2], w, b, s)
    assert torch.equal(fin2, fr2.float())


def seq_idx_ref(x, w, b, seq_idx, init, act):
    """Each row split where its id changes, each piece convolved from zeros (the first from init);
    negative ids give 0."""
    out = torch.zeros(x.shape, dtype=torch.float64)
    for r in range(x.shape[0]):
        ids = seq_idx[r].tolist()
        start = 0
        for t in range(1, len(ids) + 1):
            if t == len(ids) or ids[t] != ids[t - 1]:
                s0 = init[r:r + 1] if (init is not None and start == 0) else None
                y, _ = causal_conv1d_ref(x[r:r + 1, :, start:t], w, b, s0, act)
                out[r, :, start:t] = y[0] * (1.0 if ids[start] >= 0 else 0.0)
                start = t
    return out


@pytest.mark.parametrize("init", [False, True])
def test_conv_seq_idx(init):
    x, w, b, s = conv_inputs(batch=2, L=23, init=init)
    seq_idx = torch.tensor([[0] * 5 + [1] * 9 + [2] * 9, [-1] * 3 + [0] * 2 + [1] * 18], dtype=torch.int32)
    xs = x.clone().requires_grad_(True)
    y = st.causal_conv1d_fn(xs, w, b, seq_idx=seq_idx, initial_states=s, activation="silu")
    assert rel_err(y, seq_idx_ref(x, w, b, seq_idx, s, "silu")) < TOL[torch.float32]
    y.sum().backward()  # autograd through the packed path
    assert xs.grad is not None and torch.isfinite(xs.grad).all()
    with pytest.raises(ValueError):
        st.causal_conv1d_fn(x, w, b, seq_idx=seq_idx, return_final_states=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("W,state_len,L2d,act", [(4, 4, True, "silu"), (4, 3, False, None), (2, 5, False, "silu"),
                                                 (3, 2, True, None)])
def test_conv_update(device, W, state_len, L2d, act):
    g = gen(W * 10 + state_len)
    batch, dim, L = 3, 10, 1 if L2d else 4
    x = torch.randn(batch, dim, L, generator=g).to(device)
    x = x[:, :, 0] if L2d else x
    w = torch.randn(dim, W, generator=g).to(device)
    b = torch.randn(dim, generator=g).to(device)
    state = torch.randn(batch, dim, state_len, generator=g).to(device)
    ref, ref_state = causal_conv1d_update_ref(x, state, w, b, act)
    got_state = state.clone()
    y = st.causal_conv1d_update(x, got_state, w, b, act)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert rel_err(y, ref) < TOL[torch.float32]
    assert torch.equal(got_state, ref_state.float())


@pytest.mark.parametrize("device", DEVICES)
def test_conv_update_state_indices(device):
    g = gen(5)
    batch, dim, W, n_cache = 3, 8, 4, 6
    x = torch.randn(batch, dim, generator=g).to(device)
    w, b = torch.randn(dim, W, generator=g).to(device), torch.randn(dim, generator=g).to(device)
    state = torch.randn(n_cache, dim, W, generator=g).to(device)
    idx = torch.tensor([4, -1, 1], dtype=torch.int32, device=device)
    ref, ref_state = causal_conv1d_update_ref(x, state, w, b, "silu", conv_state_indices=idx)
    got_state = state.clone()
    y = st.causal_conv1d_update(x, got_state, w, b, "silu", conv_state_indices=idx)
    assert rel_err(y, ref) < TOL[torch.float32]
    assert torch.equal(y[1], torch.zeros_like(y[1]))
    assert torch.equal(got_state, ref_state.float())


def circular_ref(x, state, w, b, act, cache_seqlens):
    """causal_conv1d's circular-buffer update, written out per token."""
    x3 = x.unsqueeze(-1) if x.dim() == 2 else x
    batch, dim, L = x3.shape
    W, SL = w.shape[1], state.shape[-1]
    st_ = state.double().clone()
    out = torch.zeros(batch, dim, L, dtype=torch.float64)
    for r in range(batch):
        pos = int(cache_seqlens[r]) % SL
        win = [st_[r, :, (pos - (W - 1) + k) % SL] for k in range(W - 1)]
        for t in range(L):
            xv = x3[r, :, t].double()
            o = sum(w[:, k].double() * win[k] for k in range(W - 1)) + w[:, W - 1].double() * xv + b.double()
            out[r, :, t] = F.silu(o) if act else o
            st_[r, :, (pos + t) % SL] = xv
            win = win[1:] + [xv]
    return (out[:, :, 0] if x.dim() == 2 else out), st_


@pytest.mark.parametrize("L", [1, 3, 9])
def test_conv_update_circular(L):
    g = gen(L)
    batch, dim, W, SL = 3, 6, 4, 7
    x = torch.randn(batch, dim, L, generator=g)
    w, b = torch.randn(dim, W, generator=g), torch.randn(dim, generator=g)
    state = torch.randn(batch, dim, SL, generator=g)
    seqlens = torch.tensor([0, 5, 13], dtype=torch.int32)
    ref, ref_state = circular_ref(x, state, w, b, True, seqlens)
    got_state = state.clone()
    y = st.causal_conv1d_update(x, got_state, w, b, "silu", cache_seqlens=seqlens)
    assert rel_err(y, ref) < TOL[torch.float32]
    assert torch.equal(got_state, ref_state.float())


@pytest.mark.parametrize("device", DEVICES)
def test_conv_update_matches_forward(device):
    """Prefill with final states, then token-by-token updates = one forward over the whole."""
    x, w, b, _ = conv_inputs(batch=2, dim=16, L=12, device=device)
    full = st.causal_conv1d_fn(x, w, b, activation="silu")
    y, fin = st.causal_conv1d_fn(x[:, :, :5], w, b, activation="silu", return_final_states=True)
    state = fin.contiguous()
    outs = [y]
    for t in range(5, 12):
        outs.append(st.causal_conv1d_update(x[:, :, t], state, w, b, "silu").unsqueeze(-1))
    # the forward's fast path may contract a * b + c (selscan.h: rounding only): not bitwise
    assert rel_err(torch.cat(outs, -1), full) < 1e-6


def test_conv_errors():
    x, w, b, s = conv_inputs()
    with pytest.raises(NotImplementedError, match="activation"):
        st.causal_conv1d_fn(x, w, b, activation="gelu")
    with pytest.raises(NotImplementedError, match="width"):
        st.causal_conv1d_fn(x, torch.randn(x.shape[1], 5), b)
    with pytest.raises(ValueError, match="weight"):
        st.causal_conv1d_fn(x, torch.randn(x.shape[1] + 1, 4), b)
    with pytest.raises(ValueError, match="initial_states"):
        st.causal_conv1d_fn(x, w, b, initial_states=torch.randn(x.shape[0], x.shape[1], 2))
    with pytest.raises(TypeError):
        st.causal_conv1d_fn(x.double(), w, b)
    state = torch.randn(x.shape[0], x.shape[1], 4, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="conv_state"):
        st.causal_conv1d_update(x[:, :, 0], state, w, b)
    with pytest.raises(ValueError, match="conv_state"):
        st.causal_conv1d_update(x[:, :, 0], torch.randn(x.shape[0], x.shape[1], 2), w, b)
    # nothing written on error
    good = torch.randn(x.shape[0], x.shape[1], 4)
    keep = good.clone()
    with pytest.raises(ValueError):
        st.causal_conv1d_update(x[:, :, 0], good, w, torch.randn(3), "silu")
    assert torch.equal(good, keep)


@pytest.mark.parametrize("device", DEVICES)
def test_conv_empty_and_nan(device):
    x, w, b, s = conv_inputs(device=device, init=True)
    y, fin = st.causal_conv1d_fn(x[:, :, :0], w, b, initial_states=s, return_final_states=True)
    assert y.shape == (2, 12, 0) and torch.equal(fin, s)
    assert st.causal_conv1d_fn(x[:0], w, b).shape == (0, 12, 19)
    xn = x.clone()
    xn[0, 3, 7] = float("nan")
    y = st.causal_conv1d_fn(xn, w, b)
    W = w.shape[1]
    assert torch.isnan(y[0, 3, 7:7 + W]).all() and not torch.isnan(y[0, 3, 7 + W:]).any()
    assert not torch.isnan(y[1]).any() and not torch.isnan(y[0, 2]).any()


@pytest.mark.parametrize("device", DEVICES)
def test_conv_bitwise_repeatable(device):
    x, w, b, s = conv_inputs(batch=3, dim=64, L=300, device=device, init=True)

    def run():
        leaves = [t.clone().requires_grad_(True) for t in (x, w, b, s)]
        y = st.causal_conv1d_fn(*leaves[:3], initial_states=leaves[3], activation="silu")
        y.backward(torch.ones_like(y))
        return [y.detach()] + [t.grad for t in leaves]

    for a, c in zip(run(), run()):
        assert torch.equal(a, c)


def test_conv_cpu_thread_count_bitwise():
    x, w, b, _ = conv_inputs(batch=2, dim=96, L=64)
    n = torch.get_num_threads()
    outs = []
    for t in (1, max(2, n)):
        torch.set_num_threads(t)
        xs, ws = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
        y = st.causal_conv1d_fn(xs, ws, b, activation="silu")
        y.backward(torch.ones_like(y))
        outs.append((y.detach(), xs.grad, ws.grad))
    torch.set_num_threads(n)
    for a, c in zip(*outs):
        assert torch.equal(a, c)


def test_conv_finite_differences():
    """Directional derivatives of the float32 op against central differences."""
    x, w, b, s = conv_inputs(batch=1, dim=4, L=9, init=True)
    leaves = [t.clone().requires_grad_(True) for t in (x, w, b, s)]
    y = st.causal_conv1d_fn(*leaves[:3], initial_states=leaves[3], activation="silu")
    gy = torch.randn_like(y)
    y.backward(gy)
    for i, t in enumerate((x, w, b, s)):
        v = torch.randn_like(t)
        eps = 1e-2

        def f(delta):
            args = [a.clone() for a in (x, w, b, s)]
            args[i] = args[i] + delta * v
            return (st.causal_conv1d_fn(*args[:3], initial_states=args[3], activation="silu").double()
                    * gy.double()).sum()

        fd = (f(eps) - f(-eps)) / (2 * eps)
        an = (leaves[i].grad.double() * v.double()).sum()
        assert abs((fd - an).item()) <= 2e-3 * max(1.0, abs(an.item())), i


def test_conv_reference_gradcheck():
    """The float64 oracle's autograd against finite differences."""
    g = gen(3)
    x, w, b, s = (torch.randn(1, 3, 6, generator=g, dtype=torch.float64, requires_grad=True),
                  torch.randn(3, 4, generator=g, dtype=torch.float64, requires_grad=True),
                  torch.randn(3, generator=g, dtype=torch.float64, requires_grad=True),
                  torch.randn(1, 3, 3, generator=g, dtype=torch.float64, requires_grad=True))
    assert torch.autograd.gradcheck(lambda *a: causal_conv1d_ref(*a, activation="silu"), (x, w, b, s))


@pytest.mark.parametrize("device", DEVICES)
def test_conv_compile_fullgraph(device):
    torch._dynamo.reset()
    x, w, b, s = conv_inputs(device=device, init=True)

    def f(x, w, b, s, state, xt):
        y, fin = st.causal_conv1d_fn(x, w, b, initial_states=s, return_final_states=True, activation="silu")
        u = st.causal_conv1d_update(xt, state, w.detach(), b.detach(), "silu")  # (inference-only: refuses grad)
        return y, fin, u

    backend = "inductor" if device == "cuda" else "aot_eager"
    cf = torch.compile(f, fullgraph=True, backend=backend)
    leaves_e = [t.clone().requires_grad_(True) for t in (x, w, b, s)]
    leaves_c = [t.clone().requires_grad_(True) for t in (x, w, b, s)]
    st_e, st_c = torch.randn(2, 12, 4, device=device), None
    st_c = st_e.clone()
    xt = torch.randn(2, 12, device=device)
    ye, fe, ue = f(*leaves_e, st_e, xt)
    yc, fc, uc = cf(*leaves_c, st_c, xt)
    assert torch.equal(ye, yc) and torch.equal(fe, fc) and torch.equal(ue, uc) and torch.equal(st_e, st_c)
    (ye.sum() + fe.sum()).backward()
    (yc.sum() + fc.sum()).backward()
    for a, c in zip(leaves_e, leaves_c):
        assert rel_err(c.grad, a.grad) < 1e-6


@pytest.mark.parametrize("device", DEVICES)
def test_conv_opcheck(device):
    """torch.library.opcheck: schema, fake kernels (shapes and strides), autograd, AOT dispatch."""
    for lay, init, fin, dm in [("contig", True, True, False), ("cl", False, True, True), ("slice", True, False, False)]:
        x, w, b, s = conv_inputs(device=device, init=init)
        x = layout(x, lay).requires_grad_()
        args = (x, w.requires_grad_(), b, s, None, True, fin, dm)
        torch.library.opcheck(torch.ops.selscan.conv_fwd, args)
        y, f = torch.ops.selscan.conv_fwd(*[a.detach() if isinstance(a, torch.Tensor) else a for a in args])
        bargs = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args[:5]) + (
            torch.randn_like(y), torch.randn_like(f) if fin else None, True, [1, 1, 1, 1])
        torch.library.opcheck(torch.ops.selscan.conv_bwd, bargs)
    x, w, b, _ = conv_inputs(device=device)
    state = torch.randn(2, 12, 5, device=device)
    torch.library.opcheck(torch.ops.selscan.conv_step, (state, x[:, :, 0], w, b, None, True))
    torch.library.opcheck(torch.ops.selscan.conv_step, (state, x[:, :, :3], w, b,
                                                        torch.tensor([1, -1], dtype=torch.int32, device=device), False))


# ============================================================================================
# mamba_inner_fn
# ============================================================================================


def block_inputs(batch=2, d=8, L=21, W=4, N=4, R=3, Dm=6, rms=None, bias=True, conv_bias=True, proj_bias=False,
                 extra_rows=0, device="cpu", seed=0):
    g = gen(seed)

    def r(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device)

    K = R + 2 * N + extra_rows
    p = dict(conv1d_weight=r(d, 1, W, scale=0.5), conv1d_bias=r(d, scale=0.1) if conv_bias else None,
             x_proj_weight=r(K, d, scale=0.3), delta_proj_weight=r(d, R, scale=0.3), out_proj_weight=r(Dm, d, scale=0.3),
             out_proj_bias=r(Dm) if bias else None, A=(-(torch.rand(d, N, generator=g) + 0.5)).to(device),
             D=r(d), delta_bias=r(d, scale=0.1))
    if proj_bias:
        p["B_proj_bias"], p["C_proj_bias"] = r(N, scale=0.2), r(N, scale=0.2)
    if rms is not None:
        p["b_rms_weight"] = (torch.rand(N, generator=g) + 0.5).to(device)
        p["c_rms_weight"] = (torch.rand(N, generator=g) + 0.5).to(device)
        p["dt_rms_weight"] = (torch.rand(R if rms == "pre" else d, generator=g) + 0.5).to(device)
    xz = r(batch, 2 * d, L)
    return xz, p


def run_block(xz, p, gout=None, lvl=1, pre=False, lay="cl", **kw):
    xz = layout(xz, lay)
    leaves = {k: v.clone().requires_grad_(True) for k, v in p.items() if v is not None}
    xs = xz.clone().requires_grad_(True)
    out = st.mamba_inner_fn(xs, **{k: leaves.get(k) for k in p}, checkpoint_lvl=lvl, dt_rms_pre_proj=pre, **kw)
    if gout is None:
        gout = torch.randn_like(out)
    out.backward(gout)
    grads = {k: v.grad for k, v in leaves.items()}
    grads["xz"] = xs.grad
    return out, grads, gout


def ref_block(xz, p, gout, pre=False, dtype=torch.float64, **kw):
    """mamba_inner_ref's out and gradients, computed in dtype (float64: the reference; float16 /
    bfloat16: the reference's own rounding, every intermediate rounded to dtype)."""
    leaves = {k: v.detach().to(dtype).requires_grad_(True) for k, v in p.items() if v is not None}
    xr = xz.detach().to(dtype).requires_grad_(True)
    out = mamba_inner_ref(xr, **{k: leaves.get(k) for k in p}, dt_rms_pre_proj=pre, dtype=dtype, **kw)
    out.backward(gout.to(dtype))
    grads = {k: v.grad for k, v in leaves.items()}
    grads["xz"] = xr.grad
    return out, grads


def check_lowp_block(out, grads, xz, p, gout, dtype):
    """A float16 / bfloat16 block (autocast or a half model) against the float64 reference, bounded
    by the reference's own error in dtype (ref_block in dtype), measured on the same inputs."""
    ref, rgrads = ref_block(xz, p, gout)
    own, own_grads = ref_block(xz, p, gout, dtype=dtype)
    # k = 3: the op rounds its layers' results to dtype as the dtype reference does (which also
    # rounds the scan's), in another summation order: its error is another draw of the same size as
    # own, measured at most 2.2 own (12 cotangents x the 25 outputs of these two tests, CPU bfloat16)
    assert rel_err(out, ref) < lowp_tol(dtype, TOL32, 3, own=rel_err(own, ref)), ("out", rel_err(out, ref))
    for k in rgrads:
        e = rel_err(grads[k], rgrads[k])
        assert e < lowp_tol(dtype, GTOL32, 3, own=rel_err(own_grads[k], rgrads[k])), (k, e)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("lvl,rms,lay", [(lvl, rms, lay) for lvl in (0, 1) for rms in (None, "post", "pre")
                                         for lay in ("cl", "cm", "contig")])
def test_block_against_reference(device, lvl, rms, lay):
    xz, p = block_inputs(rms=rms, device=device, seed=lvl + 3)
    out, grads, gout = run_block(xz, p, lvl=lvl, pre=rms == "pre", lay=lay)
    ref, rgrads = ref_block(xz, p, gout, pre=rms == "pre")
    assert out.shape == (2, 21, 6) and out.dtype == torch.float32
    assert rel_err(out, ref) < TOL[torch.float32]
    assert set(grads) == set(rgrads)
    for k in rgrads:
        assert grads[k].dtype == (xz.dtype if k == "xz" else p[k].dtype), k
        assert rel_err(grads[k], rgrads[k]) < GTOL[torch.float32], k


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", ["no_biases", "proj_bias", "extra_rows", "fixed_BC", "W2", "N1_R1"])
def test_block_variants(device, variant):
    kw = dict(device=device, seed=11)
    call = {}
    if variant == "no_biases":
        kw.update(bias=False, conv_bias=False)
    elif variant == "proj_bias":
        kw.update(proj_bias=True, rms="post")
    elif variant == "extra_rows":
        kw.update(extra_rows=3)
    elif variant == "W2":
        kw.update(W=2, L=5)
    elif variant == "N1_R1":
        kw.update(N=1, R=1)
    xz, p = block_inputs(**kw)
    if variant == "fixed_BC":  # B and C given (constant over time), x_proj only has dt_rank rows
        g = gen(2)
        d, N = p["A"].shape
        p["x_proj_weight"] = p["x_proj_weight"][:3].clone()
        p["B"] = torch.randn(d, N, generator=g).to(device)
        p["C"] = torch.randn(d, N, generator=g).to(device)
    out, grads, gout = run_block(xz, p, **call)
    ref, rgrads = ref_block(xz, p, gout)
    assert rel_err(out, ref) < TOL[torch.float32]
    for k in rgrads:
        assert rel_err(grads[k], rgrads[k]) < GTOL[torch.float32], k


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_block_autocast(device, dtype):
    if device == "cpu" and dtype == torch.float16:
        pytest.skip("CPU autocast is bfloat16")
    xz, p = block_inputs(d=16, L=33, N=8, R=4, Dm=12, rms="post", device=device, seed=5)
    gout = torch.randn(2, 33, 12, generator=gen(6)).to(device, dtype)
    with torch.autocast(device, dtype=dtype):
        out, grads, _ = run_block(xz.to(dtype), p, gout)
    assert out.dtype == dtype
    for k in grads:
        assert grads[k].dtype == (dtype if k == "xz" else torch.float32), k
    check_lowp_block(out, grads, xz.to(dtype), p, gout, dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_block_half_model(device):
    """A bfloat16 model without autocast: every weight in bfloat16 (the conv / A / D in float32)."""
    xz, p = block_inputs(device=device, seed=8)
    ph = {k: (v.to(torch.bfloat16) if k not in ("A", "D", "delta_bias") and v is not None else v) for k, v in p.items()}
    gout = torch.randn(2, 21, 6, generator=gen(9)).to(device, torch.bfloat16)
    out, grads, _ = run_block(xz.to(torch.bfloat16), ph, gout)
    assert out.dtype == torch.bfloat16
    for k in grads:
        assert grads[k].dtype == ph.get(k, xz.to(torch.bfloat16)).dtype, k
    check_lowp_block(out, grads, xz.to(torch.bfloat16), ph, gout, torch.bfloat16)


def test_lowp_block_bound_rejects_an_injected_error():
    """check_lowp_block's bound (k = 3 times the dtype reference's own error) is not vacuous: the
    bfloat16 model's out and gradients pass it; out, or one gradient, moved by 4x its bound fails."""
    bf = torch.bfloat16
    xz, p = block_inputs(seed=8)
    ph = {k: (v.to(bf) if k not in ("A", "D", "delta_bias") and v is not None else v) for k, v in p.items()}
    gout = torch.randn(2, 21, 6, generator=gen(9)).to(bf)
    out, grads, _ = run_block(xz.to(bf), ph, gout)
    check_lowp_block(out, grads, xz.to(bf), ph, gout, bf)
    ref, rgrads = ref_block(xz.to(bf), ph, gout)
    own, own_grads = ref_block(xz.to(bf), ph, gout, dtype=bf)
    for k in (None, "x_proj_weight", "A"):
        got, r, o = (out, ref, own) if k is None else (grads[k], rgrads[k], own_grads[k])
        tol = lowp_tol(bf, TOL32 if k is None else GTOL32, 3, own=rel_err(o, r))
        bad = got.detach().clone()
        bad.view(-1)[bad.numel() // 3] += 4 * tol * r.abs().max().item()
        with pytest.raises(AssertionError):
            check_lowp_block(bad if k is None else out, grads if k is None else dict(grads, **{k: bad}),
                             xz.to(bf), ph, gout, bf)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("amp", [False, True])
def test_in_proj_cm(device, bias, amp):
    """block.in_proj_cm against transformers' F.linear(h, w, b).transpose(1, 2): values, the cm
    layout, gradients of h / weight / bias (and their dtypes) under autocast too."""
    from selscan_torch.block import in_proj_cm

    g = gen(11)
    h = torch.randn(3, 37, 24, generator=g).to(device).requires_grad_()
    w = (0.2 * torch.randn(40, 24, generator=g)).to(device).requires_grad_()
    b = torch.randn(40, generator=g).to(device).requires_grad_() if bias else None
    gout = torch.randn(3, 40, 37, generator=g).to(device)
    dt = torch.bfloat16
    outs = []
    for fn in (lambda: in_proj_cm(h, w, b), lambda: F.linear(h, w, b).transpose(1, 2)):
        with torch.autocast(device, dtype=dt, enabled=amp):
            y = fn()
        grads = torch.autograd.grad(y, [t for t in (h, w, b) if t is not None], gout)
        outs.append((y, grads))
    (y, gr), (yr, grr) = outs
    assert y.shape == yr.shape and y.dtype == yr.dtype
    assert y.stride(2) == 1 and y.stride(0) == y.shape[2] and y.stride(1) == y.shape[0] * y.shape[2]  # cm layout
    tol = lowp_tol(dt, 1e-5, 2) if amp else 1e-5  # k = 2: two bfloat16 matmuls, each rounding its result
    assert rel_err(y, yr) < tol
    for a, r in zip(gr, grr):
        assert a.dtype == r.dtype and a.shape == r.shape
        assert rel_err(a, r) < tol
    assert gr[0].is_contiguous()  # dh in h's own (row-major) layout


def test_block_checkpoint_levels_agree_bitwise():
    xz, p = block_inputs(seed=4, rms="post")
    o0, g0, gout = run_block(xz, p, lvl=0)
    o1, g1, _ = run_block(xz, p, gout=gout, lvl=1)
    assert torch.equal(o0, o1)
    for k in g0:
        assert torch.equal(g0[k], g1[k]), k


@pytest.mark.parametrize("device", DEVICES)
def test_block_bitwise_repeatable(device):
    xz, p = block_inputs(d=32, L=130, N=16, R=4, device=device, seed=6)
    o0, g0, gout = run_block(xz, p)
    o1, g1, _ = run_block(xz, p, gout=gout)
    assert torch.equal(o0, o1)
    for k in g0:
        assert torch.equal(g0[k], g1[k]), k


def test_block_saves_no_conv_output_at_lvl1():
    """checkpoint_lvl=1 keeps fewer activation bytes than 0 (conv output and delta recomputed)."""
    xz, p = block_inputs(d=32, L=64, N=16, R=4, seed=1)
    sizes = {}
    for lvl in (0, 1):
        packed = []

        def pack(t):
            packed.append(t.numel() * t.element_size())
            return t

        leaves = {k: v.clone().requires_grad_(True) for k, v in p.items() if v is not None}
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            st.mamba_inner_fn(xz.clone().requires_grad_(True), **{k: leaves.get(k) for k in p}, checkpoint_lvl=lvl)
        sizes[lvl] = sum(packed)
    b, d2, L = xz.shape
    assert sizes[0] - sizes[1] >= 2 * b * (d2 // 2) * L * 4  # conv output + delta, float32


def test_block_finite_differences():
    xz, p = block_inputs(batch=1, d=4, L=7, N=2, R=2, Dm=3, rms="post", seed=9)
    out, grads, gout = run_block(xz, p, lay="contig")
    names = ["xz"] + [k for k in p if p[k] is not None]
    for name in names:
        base = xz if name == "xz" else p[name]
        v = torch.randn_like(base)
        eps = 1e-3  # the RMS norms over N = 2 are strongly curved: a larger step is truncation-bound

        def f(delta):
            q = dict(p)
            x = xz
            if name == "xz":
                x = xz + delta * v
            else:
                q[name] = p[name] + delta * v
            return (st.mamba_inner_fn(x, **q).double() * gout.double()).sum()

        fd = (f(eps) - f(-eps)) / (2 * eps)
        an = (grads[name].double() * v.double()).sum()
        assert abs((fd - an).item()) <= 5e-3 * max(1.0, abs(an.item())), name


def test_block_reference_gradcheck():
    xz, p = block_inputs(batch=1, d=3, L=5, N=2, R=1, Dm=2, rms="post", seed=2)
    names = [k for k in p if p[k] is not None]
    args = [xz.double().requires_grad_(True)] + [p[k].double().requires_grad_(True) for k in names]

    def f(x, *vals):
        return mamba_inner_ref(x, **dict(zip(names, vals)), **{k: None for k in p if p[k] is None})

    assert torch.autograd.gradcheck(f, tuple(args))


def test_block_errors():
    xz, p = block_inputs()
    with pytest.raises(ValueError, match="checkpoint_lvl"):
        st.mamba_inner_fn(xz, **p, checkpoint_lvl=2)
    with pytest.raises(TypeError, match="complex"):
        st.mamba_inner_fn(xz, **{**p, "A": p["A"].to(torch.complex64)})
    with pytest.raises(ValueError, match="xz"):
        st.mamba_inner_fn(xz[:, 1:], **p)
    with pytest.raises(ValueError, match="x_proj_weight"):
        st.mamba_inner_fn(xz, **{**p, "x_proj_weight": p["x_proj_weight"][:5]})
    with pytest.raises(ValueError, match="dt_rms_weight"):
        st.mamba_inner_fn(xz, **{**p, "dt_rms_weight": torch.ones(3)})
    with pytest.raises(NotImplementedError, match="width"):
        st.mamba_inner_fn(xz, **{**p, "conv1d_weight": torch.randn(8, 1, 6)})


@pytest.mark.parametrize("device", DEVICES)
def test_block_compile_fullgraph(device):
    torch._dynamo.reset()
    xz, p = block_inputs(rms="post", device=device, seed=7)

    def f(xz, p):
        return st.mamba_inner_fn(layout(xz, "contig").transpose(1, 2).transpose(1, 2), **p)

    backend = "inductor" if device == "cuda" else "aot_eager"
    cf = torch.compile(f, fullgraph=True, backend=backend)
    le = {k: v.clone().requires_grad_(True) for k, v in p.items() if v is not None}
    lc = {k: v.clone().requires_grad_(True) for k, v in p.items() if v is not None}
    xe, xc = xz.clone().requires_grad_(True), xz.clone().requires_grad_(True)
    oe = f(xe, {k: le.get(k) for k in p})
    oc = cf(xc, {k: lc.get(k) for k in p})
    assert rel_err(oc, oe) < 1e-5
    oe.square().sum().backward()
    oc.square().sum().backward()
    assert rel_err(xc.grad, xe.grad) < 1e-4
    for k in le:
        assert rel_err(lc[k].grad, le[k].grad) < 1e-4, k


@cuda_only
def test_block_cuda_matches_cpu():
    xz, p = block_inputs(d=32, L=100, N=16, R=4, rms="post", seed=12)
    oc, gc, gout = run_block(xz, p)
    pd = {k: (v.cuda() if v is not None else None) for k, v in p.items()}
    od, gd, _ = run_block(xz.cuda(), pd, gout=gout.cuda())
    assert rel_err(od, oc) < 1e-5
    for k in gc:
        assert rel_err(gd[k], gc[k]) < 1e-4, k


@cuda_only
def test_block_cuda_graph():
    xz, p = block_inputs(d=32, L=64, N=16, R=4, device="cuda", seed=13)
    leaves = {k: v.clone().requires_grad_(True) for k, v in p.items() if v is not None}
    xs = xz.clone().requires_grad_(True)
    gout = torch.randn(2, 64, 6, device="cuda")

    def step():
        out = st.mamba_inner_fn(xs, **{k: leaves.get(k) for k in p})
        out.backward(gout)
        return out

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            for v in list(leaves.values()) + [xs]:
                v.grad = None
            step()
    torch.cuda.current_stream().wait_stream(s)
    for v in list(leaves.values()) + [xs]:
        v.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o_static = step()
    graph.replay()
    torch.cuda.synchronize()
    oe, ge, _ = run_block(xz, p, gout=gout, lay="contig")
    assert torch.equal(o_static, oe.detach())
    assert torch.equal(xs.grad, ge["xz"])


def test_conv_seq_idx_device_and_meta():
    """causal_conv1d_fn with seq_idx on another device than x read its values back (a meta seq_idx:
    NotImplementedError "Cannot copy out of meta tensor", naming nothing): now refused naming seq_idx; an
    all-meta call gives x's shape as the plain call does (no values to find the sequences in)."""
    x, w, b, _ = conv_inputs(batch=1, L=5, init=False)
    ids = torch.zeros(1, 5, dtype=torch.int32)
    with pytest.raises(ValueError, match="argument 'seq_idx'"):
        st.causal_conv1d_fn(x, w, b, seq_idx=ids.to("meta"))
    y = st.causal_conv1d_fn(x.to("meta"), w.to("meta"), b.to("meta"), seq_idx=ids.to("meta"), activation="silu")
    assert (y.shape, y.dtype, y.device.type) == (x.shape, x.dtype, "meta")
    with pytest.raises(ValueError, match="seq_idx"):
        st.causal_conv1d_fn(x.to("meta"), w.to("meta"), b.to("meta"), seq_idx=torch.zeros(1, 6, dtype=torch.int32, device="meta"))


def test_block_device_refusal_names_the_argument():
    """mamba_inner_fn's tensor on another device than xz: refused by the package's one device rule
    (_checks.same_device, which mamba_split_conv1d_scan_combined calls too), naming the argument passed,
    rather than by a copy of that rule in block.py without the argument's name."""
    xz, p = block_inputs()
    for name in ("out_proj_weight", "conv1d_bias", "delta_bias"):
        with pytest.raises(ValueError, match=rf"argument '{name}'"):
            st.mamba_inner_fn(xz, **{**p, name: p[name].to("meta")})


def test_block_conv_refusal_names_the_argument():
    """mamba_inner_fn's conv weight / bias that its conv refuses (a width outside 2..4, a bias not (dim,)): the
    refusal names conv1d_weight / conv1d_bias, the arguments passed, not the conv op's weight / bias."""
    xz, p = block_inputs()
    d = p["conv1d_weight"].shape[0]
    for name, bad, err in (("conv1d_weight", torch.randn(d, 1, 6), NotImplementedError),
                           ("conv1d_weight", torch.randn(d, 1), NotImplementedError),
                           ("conv1d_bias", torch.randn(d + 1), ValueError),
                           ("conv1d_bias", torch.randn(1, d), ValueError)):
        with pytest.raises(err, match=rf"argument '{name}'"):
            st.mamba_inner_fn(xz, **{**p, name: bad})


def test_block_proj_bias_errors():
    # B_proj_bias / C_proj_bias of the wrong shape: refused naming the argument (before: torch's broadcast error)
    xz, p = block_inputs()
    N = p["A"].shape[1]
    for name in ("B_proj_bias", "C_proj_bias"):
        for bad in (torch.randn(N + 1), torch.randn(1, N)):
            with pytest.raises(ValueError, match=name):
                st.mamba_inner_fn(xz, **p, **{name: bad})


def test_conv_seq_idx_padding_zero_under_nan():
    # positions with a negative id give 0 whatever x holds there (NaN, inf); the others as with finite x
    torch.manual_seed(3)
    x, w, b = torch.randn(2, 3, 8), torch.randn(3, 4), torch.randn(3)
    seq = torch.tensor([[0, 0, 0, -1, -1, 1, 1, 1], [-1, -1, 2, 2, 2, 2, -1, -1]], dtype=torch.int32)
    pad = (seq < 0)[:, None, :].expand_as(x)
    for v in (float("nan"), float("inf")):
        y = st.causal_conv1d_fn(torch.where(pad, v, x), w, b, seq_idx=seq, activation="silu")
        y0 = st.causal_conv1d_fn(torch.where(pad, 0.0, x), w, b, seq_idx=seq, activation="silu")
        assert torch.equal(y[pad], torch.zeros_like(y[pad]))
        assert torch.equal(y[~pad], y0[~pad])


def test_conv_ref_empty():
    # the float64 reference at L = 0: no output column, the final states zeros (or the given ones)
    w = torch.randn(3, 4)
    y, f = causal_conv1d_ref(torch.zeros(2, 3, 0), w)
    assert y.shape == (2, 3, 0) and torch.equal(f, torch.zeros(2, 3, 3, dtype=torch.float64))
    s = torch.randn(2, 3, 3)
    y, f = causal_conv1d_ref(torch.zeros(2, 3, 0), w, None, s)
    assert y.shape == (2, 3, 0) and torch.equal(f, s.double())
