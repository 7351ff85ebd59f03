"""Issue 27 (framework ops under bad input): one test per cause found on the CPU build, each failing
on the code before the fix. Every refusal must name the caller's argument and leave every input
(the in-place state included) bit-identical; CPU always, CUDA where present.
"""
import re
import sys

import pytest
import torch

import selscan_torch as st
from _common import TOL, rel_err
from selscan_torch.reference import selective_scan_ref, selective_state_update_ref

HAS_CUDA = torch.cuda.is_available() and st.has_cuda_kernels()
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])
ops = torch.ops.selscan


def names(msg, arg):
    """arg named in msg as a word (delta, not delta_bias)."""
    return re.search(r"(?<![\w])" + re.escape(arg) + r"(?![\w])", msg) is not None


def raises_naming(arg, fn, exc=(ValueError, TypeError)):
    with pytest.raises(exc) as info:
        fn()
    assert names(str(info.value), arg), (arg, str(info.value))
    return str(info.value)


def scan_inputs(batch=2, dim=4, L=8, N=3, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g).to(device)  # noqa: E731
    return dict(u=r(batch, dim, L), delta=r(batch, dim, L) * 0.5, A=(-(torch.rand(dim, N, generator=g) + 0.3)).to(device),
                B=r(batch, N, L), C=r(batch, N, L), D=r(dim), z=r(batch, dim, L), delta_bias=r(dim) * 0.3,
                h0=r(batch, dim, N))


def step_inputs(batch=2, dim=4, N=3, n_cache=None, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g).to(device)  # noqa: E731
    return dict(state=r(n_cache or batch, dim, N), x=r(batch, dim), dt=r(batch, dim) * 0.5,
                A=(-(torch.rand(dim, N, generator=g) + 0.3)).to(device), B=r(batch, N), C=r(batch, N), D=r(dim),
                z=r(batch, dim), dt_bias=r(dim) * 0.3)


def snapshot(ts):
    return [t.detach().clone() for t in ts if isinstance(t, torch.Tensor) and t.device.type != "meta"]


def unchanged(ts, snap):
    live = [t for t in ts if isinstance(t, torch.Tensor) and t.device.type != "meta"]
    return all(torch.equal(a.detach(), b) for a, b in zip(live, snap))


SCAN_ARGS = ["u", "delta", "A", "B", "C", "D", "z", "delta_bias", "h0"]
STEP_ARGS = ["x", "dt", "A", "B", "C", "D", "z", "dt_bias"]


def call_scan(x, **kw):
    return st.selective_scan_fn(x["u"], x["delta"], x["A"], x["B"], x["C"], x["D"], x["z"], x["delta_bias"], True,
                                True, h0=x["h0"], **kw)


def call_step(s, **kw):
    return st.selective_state_update(s["state"], s["x"], s["dt"], s["A"], s["B"], s["C"], s["D"], s["z"],
                                     s["dt_bias"], True, **kw)


# ---- 1. an in-place state whose elements overlap (heap overflow) -----------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_1_expanded_state_refused_nothing_written(device):
    s = step_inputs(device=device)
    for shape, view in [((2, 4, 3), lambda b: b[:1].expand(2, 4, 3)),            # strides (0, 0, 0)
                        ((2, 4, 3), lambda b: b[:12].view(1, 4, 3).expand(2, 4, 3)),  # (0, 3, 1)
                        ((2, 4, 3), lambda b: b[:3].view(1, 1, 3).expand(2, 4, 3)),   # (0, 0, 1)
                        ((2, 2, 2, 3), lambda b: b[:1].expand(2, 2, 2, 3))]:          # multi-head, all 0
        base = torch.zeros(64, device=device)
        state = view(base)
        ss = dict(s, state=state)
        if state.dim() == 4:
            ss.update(x=s["x"].view(2, 2, 2), dt=s["dt"].view(2, 2, 2), z=s["z"].view(2, 2, 2),
                      A=s["A"].view(2, 2, 3), D=s["D"].view(2, 2), dt_bias=s["dt_bias"].view(2, 2))
        raises_naming("state", lambda: call_step(ss))
        assert (base == 0).all(), "bytes written around the refused state"
    # the raw op as well
    base = torch.zeros(64, device=device)
    raises_naming("state", lambda: ops.step(base[:1].expand(2, 4, 3), s["x"], s["dt"], s["A"], s["B"], s["C"], None,
                                            None, None, None, False))
    assert (base == 0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_1_expanded_conv_state_refused_nothing_written(device):
    """The causal conv's decode update is in place too: an expand()ed conv_state is refused."""
    for view in (lambda b: b[:1].expand(2, 4, 3), lambda b: b[:12].view(1, 4, 3).expand(2, 4, 3)):
        base = torch.zeros(64, device=device)
        x, w = torch.randn(2, 4, device=device), torch.randn(4, 4, device=device)
        raises_naming("conv_state", lambda: st.causal_conv1d_update(x, view(base), w, None, "silu"))
        assert (base == 0).all(), "bytes written around the refused conv_state"


# ---- 2. meta tensors: among real ones, and all-meta shape checks ------------------------------------


@pytest.mark.parametrize("arg", SCAN_ARGS)
def test_2_meta_among_cpu_scan_refused(arg):
    x = scan_inputs()
    x[arg] = x[arg].to("meta")
    raises_naming(arg, lambda: call_scan(x))
    m = st.SelectiveScan(4, 3)
    if arg in ("u", "delta", "B", "C", "z", "h0"):
        raises_naming(arg, lambda: m(x["u"], x["delta"], x["B"], x["C"], z=x["z"], h0=x["h0"]))


@pytest.mark.parametrize("arg", SCAN_ARGS + ["dy"])
def test_2_meta_among_cpu_raw_ops_refused(arg):
    x = scan_inputs()
    y, hl, ck = ops.fwd(*[x[k] for k in SCAN_ARGS], None, True, True, True)
    x["dy"] = torch.randn_like(y)
    x[arg] = x[arg].to("meta")
    if arg != "dy":
        raises_naming(arg, lambda: ops.fwd(*[x[k] for k in SCAN_ARGS], None, True, True, True))
    raises_naming(arg, lambda: ops.bwd(*[x[k] for k in SCAN_ARGS], None, x["dy"], hl, ck, True, [1] * 9))


@pytest.mark.parametrize("arg", ["state"] + STEP_ARGS)
def test_2_meta_among_cpu_step_refused(arg):
    s = step_inputs()
    s[arg] = s[arg].to("meta")
    snap = snapshot(s.values())
    raises_naming(arg, lambda: call_step(s))
    raises_naming(arg, lambda: ops.step(s["state"], s["x"], s["dt"], s["A"], s["B"], s["C"], s["D"], s["z"],
                                        s["dt_bias"], None, True))
    assert unchanged(s.values(), snap)


def test_2_all_meta_checks_shapes():
    x = {k: v.to("meta") for k, v in scan_inputs(L=8).items()}
    y, hl = call_scan(x)  # a good all-meta call: the shapes
    assert y.shape == (2, 4, 8) and y.device.type == "meta" and hl.shape == (2, 4, 3)
    bad = dict(x, delta=x["delta"][..., :5])
    raises_naming("delta", lambda: call_scan(bad))
    raises_naming("A", lambda: call_scan(dict(x, A=x["A"][:, :2].contiguous().T)))
    raises_naming("h0", lambda: call_scan(dict(x, h0=x["h0"][:1])))
    s = {k: v.to("meta") for k, v in step_inputs().items()}
    assert call_step(s).shape == (2, 4)
    raises_naming("dt", lambda: call_step(dict(s, dt=s["dt"][:, :3])))
    raises_naming("state", lambda: call_step(dict(s, state=torch.empty(1, device="meta").expand(2, 4, 3))))


# ---- 3. state_batch_indices: never truncated --------------------------------------------------------


def test_3_state_batch_indices_not_truncated():
    s = step_inputs(n_cache=3)
    snap = snapshot(s.values())
    for bad in ([0, 2**32 + 1], [0, 2**31], [3, 0]):
        raises_naming("state_batch_indices", lambda: call_step(s, state_batch_indices=torch.tensor(bad)))
        assert unchanged(s.values(), snap)
    for bad in (torch.tensor([0.0, 1.7]), torch.tensor([0, 1], dtype=torch.complex64), torch.tensor([True, False])):
        raises_naming("state_batch_indices", lambda: call_step(s, state_batch_indices=bad), TypeError)
        assert unchanged(s.values(), snap)
    # -2**63 is a negative entry: padding (out 0, no row touched), not row 0
    idx = torch.tensor([-(2**63), 2])
    ref_out, ref_state = selective_state_update_ref(s["state"], s["x"], s["dt"], s["A"], s["B"], s["C"], s["D"],
                                                    s["z"], s["dt_bias"], True, idx)
    state = s["state"].clone()
    out = call_step(dict(s, state=state), state_batch_indices=idx)
    assert (out[0] == 0).all() and torch.equal(state[:2], s["state"][:2])
    assert torch.allclose(out.double(), ref_out, atol=1e-5) and torch.allclose(state.double(), ref_state, atol=1e-6)
    # with dim 0 (nothing to compute) the range is still checked
    s0 = step_inputs(dim=0, n_cache=3)
    raises_naming("state_batch_indices", lambda: call_step(s0, state_batch_indices=torch.tensor([0, 5])))
    raises_naming("state_batch_indices", lambda: ops.step(s0["state"], s0["x"], s0["dt"], s0["A"], s0["B"], s0["C"],
                                                          None, None, None, torch.tensor([0, 5], dtype=torch.int32),
                                                          False))


# ---- 4. complex tensors refused, not made real ------------------------------------------------------


@pytest.mark.parametrize("arg", ["delta", "z", "D", "delta_bias", "h0", "B", "C", "A"])
def test_4_complex_scan_refused(arg):
    x = scan_inputs()
    x[arg] = torch.complex(x[arg], x[arg])
    raises_naming(arg, lambda: call_scan(x), TypeError)


@pytest.mark.parametrize("arg", STEP_ARGS)
def test_4_complex_step_refused(arg):
    s = step_inputs()
    s[arg] = torch.complex(s[arg], s[arg])
    snap = snapshot(s.values())
    raises_naming(arg, lambda: call_step(s), TypeError)
    assert unchanged(s.values(), snap)


# ---- 5. cu_seqlens: always validated, integers only -------------------------------------------------


def test_5_cu_seqlens_checked_whatever_the_sizes():
    for dim, L in [(4, 0), (0, 6)]:
        x = scan_inputs(batch=1, dim=dim, L=L)
        x["h0"] = None
        for bad in ([3, -7, 2], [0, 5, 2], [1, L], [0, L + 1]):
            raises_naming("cu_seqlens", lambda: call_scan(x, cu_seqlens=bad))
            raises_naming("cu_seqlens", lambda: ops.fwd(*[x[k] for k in SCAN_ARGS], torch.tensor(bad), False, True,
                                                        False))
    x = scan_inputs(batch=1, L=6)
    x["h0"] = None
    for bad in (torch.tensor([0.0, 2.5, 6.0]), [0, 2.5, 6], [0, True, 6], torch.tensor([0, 1, 6], dtype=torch.bool)):
        raises_naming("cu_seqlens", lambda: call_scan(x, cu_seqlens=bad), TypeError)


# ---- 6. cu_seqlens on meta (the wrapper) ------------------------------------------------------------


def test_6_cu_seqlens_meta_named():
    x = scan_inputs(batch=1, L=6)
    x["h0"] = None
    raises_naming("cu_seqlens", lambda: call_scan(x, cu_seqlens=torch.tensor([0, 2, 6], device="meta")))


# ---- 7. autograd: no silent wrong gradients -----------------------------------------------------------


def test_7_step_with_grad_refused_state_untouched():
    s = step_inputs()
    snap = snapshot(s.values())
    for arg in STEP_ARGS:
        t = dict(s)
        t[arg] = s[arg].clone().requires_grad_(True)
        with pytest.raises(RuntimeError) as info:
            call_step(t)
        assert names(str(info.value), arg) and "inference" in str(info.value)
        assert unchanged(s.values(), snap)
        with torch.no_grad():  # fine without grad mode
            call_step(dict(t, state=s["state"].clone()))
    # the raw op too
    with pytest.raises(RuntimeError, match="x requires grad"):
        ops.step(s["state"], s["x"].clone().requires_grad_(True), s["dt"], s["A"], s["B"], s["C"], None, None, None,
                 None, False)
    assert unchanged(s.values(), snap)
    # the module's step: its parameters enter detached; the output claims no gradient
    m = st.SelectiveScan(4, 3)
    out = m.step(s["state"].clone(), s["x"], s["dt"], s["B"], s["C"])
    assert not out.requires_grad


def test_7_step_bumps_state_version():
    s = step_inputs()
    v = s["state"]._version
    call_step(s)
    assert s["state"]._version > v


def test_7_double_backward_raises_not_zeros():
    x = {k: v.double().float() for k, v in scan_inputs().items()}
    u = x["u"].clone().requires_grad_(True)
    y = st.selective_scan_fn(u, x["delta"], x["A"], x["B"], x["C"], x["D"], x["z"], x["delta_bias"], True)
    g, = torch.autograd.grad(y.square().sum(), u, create_graph=True)
    # the first derivative is right with create_graph=True
    ud = x["u"].double().requires_grad_(True)
    yr = selective_scan_ref(ud, x["delta"], x["A"], x["B"], x["C"], x["D"], x["z"], x["delta_bias"], True)
    gr, = torch.autograd.grad(yr.square().sum(), ud)
    assert torch.allclose(g.double(), gr, rtol=1e-4, atol=1e-4)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(g.sum(), u)


def test_7_conv_double_backward_raises_not_zeros():
    """causal_conv1d_fn's backward is not differentiable: a second derivative is an error (it was
    silently zero: conv_bwd had no autograd kernel; a hostile user's run, sixth session)."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, 9, generator=g).requires_grad_(True)
    w = torch.randn(4, 3, generator=g).requires_grad_(True)
    y = st.causal_conv1d_fn(x, w, None, activation="silu")
    gx, = torch.autograd.grad(y.square().sum(), x, create_graph=True)
    xd, wd = x.detach().double().requires_grad_(True), w.detach().double()
    yd = torch.nn.functional.silu(torch.nn.functional.conv1d(xd, wd[:, None], padding=2, groups=4)[..., :9])
    gr, = torch.autograd.grad(yd.square().sum(), xd)
    assert torch.allclose(gx.double(), gr, rtol=1e-4, atol=1e-5)  # the first derivative is right
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(gx.sum(), [x, w])


def test_7_conv_update_with_grad_refused_state_untouched():
    """causal_conv1d_update is inference-only, as the scan's step: with grad mode on, an input
    requiring grad is refused naming it, nothing written (it passed autograd by: an output without a
    gradient); under no_grad it runs and bumps conv_state's version."""
    g = torch.Generator().manual_seed(4)
    state, x = torch.randn(2, 4, 3, generator=g), torch.randn(2, 4, generator=g)
    w, b = torch.randn(4, 4, generator=g), torch.randn(4, generator=g)
    for name in ("conv_state", "x", "weight", "bias"):
        args = dict(conv_state=state, x=x, weight=w, bias=b)
        args[name] = args[name].clone().requires_grad_(True)
        snap = snapshot(args.values())  # (the clone requiring grad included: conv_state's is the one written)
        with pytest.raises(RuntimeError) as info:
            st.causal_conv1d_update(args["x"], args["conv_state"], args["weight"], args["bias"], "silu")
        assert names(str(info.value), name) and "inference" in str(info.value)
        assert unchanged(args.values(), snap)
    v = state._version
    with torch.no_grad():
        st.causal_conv1d_update(x, state, w.requires_grad_(True), b, "silu")
    assert state._version > v


def test_7_block_refuses_complex_integer_and_other_devices():
    """mamba_inner_fn casts only real floating-point arguments (complex and integer ones refused
    naming them, as selective_scan_fn does; it dropped the imaginary part), and takes every tensor on
    xz's device (a meta out_proj_weight gave out_proj_bias broadcast, F.linear taking it)."""
    g = torch.Generator().manual_seed(5)
    b, d, L, N, R, dm = 2, 4, 5, 3, 2, 3
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    args = dict(xz=r(b, 2 * d, L), conv1d_weight=r(d, 1, 4), conv1d_bias=r(d), x_proj_weight=r(R + 2 * N, d),
                delta_proj_weight=r(d, R), out_proj_weight=r(dm, d), out_proj_bias=r(dm),
                A=-torch.rand(d, N, generator=g), D=r(d), delta_bias=r(d))
    for k in ("D", "delta_bias", "conv1d_bias", "conv1d_weight", "out_proj_bias", "x_proj_weight"):
        bad = dict(args, **{k: args[k].to(torch.complex64)})
        raises_naming(k, lambda: st.mamba_inner_fn(**bad), TypeError)
    for k in ("D", "delta_bias"):
        bad = dict(args, **{k: torch.ones(d, dtype=torch.int64)})
        raises_naming(k, lambda: st.mamba_inner_fn(**bad), TypeError)
    for k in ("out_proj_weight", "out_proj_bias", "D"):
        bad = dict(args, **{k: args[k].to("meta")})
        raises_naming(k, lambda: st.mamba_inner_fn(**bad), ValueError)
    raises_naming("x_proj_weight", lambda: st.mamba_inner_fn(**dict(args, x_proj_weight=None)), TypeError)


# ---- 8. the multi-head step validates before it reshapes ----------------------------------------------


def mh_inputs(batch=2, nh=2, hd=3, N=4, G=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    return dict(state=r(batch, nh, hd, N), x=r(batch, nh, hd), dt=r(batch, nh, hd) * 0.5,
                A=-(torch.rand(nh, hd, N, generator=g) + 0.3), B=r(batch, G, N), C=r(batch, G, N), D=r(nh, hd),
                z=r(batch, nh, hd), dt_bias=r(nh, hd) * 0.3)


def mh_ref(s):
    b, nh, hd, N = s["state"].shape
    flat = lambda t, *shape: t.reshape(*shape)  # noqa: E731
    return selective_state_update_ref(flat(s["state"], b, nh * hd, N), flat(s["x"], b, -1), flat(s["dt"], b, -1),
                                      flat(s["A"], nh * hd, N), s["B"], s["C"], flat(s["D"], -1), flat(s["z"], b, -1),
                                      flat(s["dt_bias"], -1), True)


def test_8_multihead_validates_first():
    s = mh_inputs()
    snap = snapshot(s.values())
    for arg, bad in [("x", torch.tensor(1.0)), ("x", torch.randn(2, 6)), ("x", torch.randn(2, 3, 2)),
                     ("dt", torch.tensor(1.0)), ("dt", torch.randn(2, 2, 2)), ("z", torch.randn(2, 6)),
                     ("A", torch.randn(6, 4)), ("A", torch.tensor(1.0)), ("D", torch.randn(6)),
                     ("dt_bias", torch.randn(3, 2)), ("B", torch.randn(2, 3, 4)), ("C", torch.tensor(1.0))]:
        msg = raises_naming(arg, lambda: call_step(dict(s, **{arg: bad})), ValueError)
        assert "is invalid for input of size" not in msg
        assert unchanged(s.values(), snap)
    raises_naming("state", lambda: call_step(dict(s, state=torch.randn(2, 2, 3, 4, 1))), ValueError)


def test_8_multihead_shape_refusals_show_the_state_and_x():
    """Found by a hostile user's run (thirty-first session): a state whose dstate (or heads) disagreed with A, B and
    C blamed A alone, with nheads / hdim / N shown as numbers whose source (the state) went unnamed; the message now
    shows the state's and x's shapes beside the argument held to them."""
    s = mh_inputs()
    snap = snapshot(s.values())
    b, nh, hd, N = s["state"].shape
    msg = raises_naming("A", lambda: call_step(dict(s, state=torch.randn(b, nh, hd, N + 1))), ValueError)
    assert f"state {[b, nh, hd, N + 1]}" in msg and f"x {[b, nh, hd]}" in msg
    msg = raises_naming("dt", lambda: call_step(dict(s, x=s["x"][:1])), ValueError)
    assert f"x {[1, nh, hd]}" in msg
    assert unchanged(s.values(), snap)


def test_8_multihead_noncontiguous_state():
    s = mh_inputs(G=2)
    ref_out, ref_state = mh_ref(s)
    # mergeable (nheads, hdim) in a larger buffer (N sliced, every other batch row): in place, no copy
    big = torch.zeros(4, 2, 3, 7)
    view = big[::2, :, :, :4]
    view.copy_(s["state"])
    before = big.clone()
    out = call_step(dict(s, state=view))
    assert torch.allclose(out.double(), ref_out.view(out.shape), atol=1e-5)
    assert torch.allclose(view.double(), ref_state.view(view.shape), atol=1e-6)
    mask = torch.ones_like(big, dtype=torch.bool)
    mask[::2, :, :, :4] = False
    assert torch.equal(big[mask], before[mask])  # nothing outside the view written
    # not mergeable (hdim outside nheads): refused, untouched (never a silent copy)
    perm = s["state"].permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)
    keep = perm.clone()
    raises_naming("state", lambda: call_step(dict(s, state=perm)), ValueError)
    assert torch.equal(perm, keep)


# ---- 9. errors in the user's names ---------------------------------------------------------------------


def test_9_step_errors_in_user_names():
    s = step_inputs()
    state = s["state"].clone()
    msg = raises_naming("x", lambda: call_step(dict(s, state=state, x=state[:, :, 0])))  # x aliases the state
    assert not names(msg, "u")
    msg = raises_naming("dt_bias", lambda: call_step(dict(s, state=state, dt_bias=state[0, :, 1])))
    assert not names(msg, "delta_bias")
    msg = raises_naming("dt", lambda: call_step(dict(s, state=state, dt=state[:, :, 2])))
    assert not names(msg, "delta")
    assert torch.equal(state, s["state"])


def test_9_transposed_u_names_u():
    x = scan_inputs(batch=2, dim=4, L=8)
    msg = raises_naming("u", lambda: call_scan(dict(x, u=x["u"].transpose(1, 2).contiguous())))
    assert "transpose" in msg and not msg.startswith("selscan: delta")
    # and a wrong A (u and delta agree) names A
    raises_naming("A", lambda: call_scan(dict(x, A=torch.randn(5, 3))))


# ---- issue 38: the causal conv's decode update and packed sequences ----------------------------------


def conv_update_inputs(batch=2, dim=4, W=4, n_cache=3, state_len=3, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g).to(device)  # noqa: E731
    return r(batch, dim), r(n_cache, dim, state_len), r(dim, W), r(dim)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("circular", [False, True])
def test_38_3_conv_state_indices_not_truncated(device, circular):
    """conv_state_indices follows state_batch_indices' rule: integers only, never narrowed to int32
    silently; -2**63 is padding, not row 0; on the CPU rows checked in range (also with dim 0)."""
    x, state, w, b = conv_update_inputs(state_len=5 if circular else 3, device=device)
    kw = dict(cache_seqlens=torch.tensor([1, 6], device=device)) if circular else {}

    def update(idx, s=state):
        return st.causal_conv1d_update(x, s, w, b, "silu", conv_state_indices=idx, **kw)

    snap = state.clone()
    if device == "cpu":  # on CUDA an out-of-range row is padding (no sync), as in the step
        for bad in ([0, 2**32 + 1], [0, 2**31], [3, 0]):
            raises_naming("conv_state_indices", lambda: update(torch.tensor(bad)))
            assert torch.equal(state, snap)
    for bad in (torch.tensor([0.0, 1.0]), torch.tensor([0, 1], dtype=torch.complex64), torch.tensor([True, False])):
        raises_naming("conv_state_indices", lambda: update(bad.to(device)), TypeError)
        assert torch.equal(state, snap)
    got, want = state.clone(), state.clone()
    y = update(torch.tensor([-(2**63), 2], device=device), got)
    y_ref = update(torch.tensor([-1, 2], dtype=torch.int32, device=device), want)
    assert (y[0] == 0).all() and torch.equal(y, y_ref) and torch.equal(got, want)
    assert torch.equal(got[:2], state[:2]) and not torch.equal(got[2], state[2])
    if device == "cpu" and not circular:  # dim 0: nothing to compute, the rows still checked
        x0, s0, w0, rows = torch.zeros(2, 0), torch.zeros(3, 0, 3), torch.zeros(0, 4), torch.tensor([0, 5])
        raises_naming("conv_state_indices", lambda: st.causal_conv1d_update(x0, s0, w0, conv_state_indices=rows))
        raises_naming("conv_state_indices", lambda: ops.conv_step(s0, x0, w0, None, rows.int(), False))


@pytest.mark.parametrize("device", DEVICES)
def test_38_4_circular_update_refuses_what_the_plain_update_refuses(device):
    """The circular update (cache_seqlens) refuses state_len < width - 1 and a row used twice with
    the plain update's messages, before anything is written."""
    x, state, w, b = conv_update_inputs(n_cache=2, state_len=5, device=device)

    def same_refusal(state, idx):
        msgs = []
        for kw in ({}, dict(cache_seqlens=torch.tensor([1, 6], device=device))):
            snap = state.clone()
            with pytest.raises(ValueError) as info:
                st.causal_conv1d_update(x, state, w, b, "silu", conv_state_indices=idx, **kw)
            assert torch.equal(state, snap)
            msgs.append(str(info.value))
        assert msgs[0] == msgs[1], msgs
        return msgs[0]

    assert names(same_refusal(state[:, :, :2].clone(), None), "conv_state")  # width 4: state_len 2 < 3
    if device == "cpu":  # rows are checked on the host (CUDA: no sync, as in the step)
        for idx in (torch.tensor([1, 1]).int(), torch.tensor([1, 1]), torch.tensor([0, 2]).int()):
            assert names(same_refusal(state, idx), "conv_state_indices")
    seqlens = torch.tensor([1.0, 6.0], device=device)
    raises_naming("cache_seqlens", lambda: st.causal_conv1d_update(x, state, w, b, cache_seqlens=seqlens), TypeError)
    raises_naming("cache_seqlens", lambda: st.causal_conv1d_update(x, state, w, b, cache_seqlens=seqlens[:1].long()))


@pytest.mark.parametrize("device", DEVICES)
def test_38_6_conv_empty_packed_sequences(device):
    """Packed sequences with no token (L 0, cu_seqlens [0, 0, 0]) are valid, as for the scan: each
    sequence's final state is its initial state (zeros without), its gradient passes through; the
    offsets are still checked whatever the sizes."""
    dim, W = 4, 4
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g).to(device).requires_grad_(True)  # noqa: E731
    x, w, b, init = r(1, dim, 0), r(dim, W), r(dim), r(2, dim, W - 1)
    cu = torch.tensor([0, 0, 0])
    y, fin = ops.conv_fwd(x, w, b, init, cu, True, True, False)
    assert y.shape == (1, dim, 0) and torch.equal(fin, init)
    dfin = torch.randn(2, dim, W - 1, generator=g).to(device)
    (fin * dfin).sum().backward()
    assert torch.equal(init.grad, dfin) and (w.grad == 0).all() and (b.grad == 0).all() and x.grad.shape == x.shape
    y, fin = ops.conv_fwd(x.detach(), w.detach(), None, None, cu, False, True, False)
    assert fin.shape == (2, dim, W - 1) and (fin == 0).all()
    for dim_, bad in ((dim, [0, 1, 0]), (dim, [1, 0]), (0, [0, 3, 0])):
        xb, wb = torch.zeros(1, dim_, 0, device=device), torch.zeros(dim_, W, device=device)
        raises_naming("cu_seqlens", lambda: ops.conv_fwd(xb, wb, None, None, torch.tensor(bad), False, True, False))
    # causal_conv1d_fn's packed path (seq_idx) with no token, or no row
    for batch, L in ((2, 0), (0, 5)):
        xs = torch.zeros(batch, dim, L, device=device)
        seq_idx = torch.zeros(batch, L, dtype=torch.int32, device=device)
        assert st.causal_conv1d_fn(xs, w.detach(), b.detach(), seq_idx=seq_idx, activation="silu").shape == xs.shape


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF shared objects (Linux)")
def test_38_extension_runs_on_the_shared_libstdcxx():
    """Issue 38's CUDA crashes: a compiler that links libstdc++ statically (the GPU machines' CXX) put a
    private libstdc++ into _C beside the shared one torch loads; the first error message that formatted
    a number (a shape) crashed the process. setup.py links torch's libstdc++.so.6 then: _C must name it
    among its NEEDED libraries (the string is in the dynamic string table only when it is linked)."""
    import selscan_torch._C as ext

    with open(ext.__file__, "rb") as f:
        assert b"libstdc++.so.6" in f.read(), f"{ext.__file__} carries its own libstdc++ (no NEEDED libstdc++.so.6)"


# ---- issue 38, cause 9: left from the framework-op fuzz --------------------------------------------


def metadata(ts):
    return [(tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.device) for t in ts
            if isinstance(t, torch.Tensor)]


def test_38_9a_bwd_tensor_on_another_device_refused():
    """A checkpoint (or dy, dh_last) on another device than u: refused naming it. A meta one among
    CPU tensors sends the call to the fake kernel, which returned empty memory (values ~1e36)."""
    x = scan_inputs()
    y, hl, ck = ops.fwd(*[x[k] for k in SCAN_ARGS], None, True, True, True)
    assert ck.numel() > 0
    dy, dl = torch.randn_like(y), torch.randn_like(hl)
    others = ["meta"] + (["cuda"] if HAS_CUDA else [])
    for other in others:
        for arg in ("checkpoint", "dy", "dh_last"):
            a = dict(dy=dy, dh_last=dl, checkpoint=ck)
            a[arg] = a[arg].to(other)
            ins = [x[k] for k in SCAN_ARGS] + list(a.values())
            snap, meta = snapshot(ins), metadata(ins)
            raises_naming(arg, lambda: ops.bwd(*[x[k] for k in SCAN_ARGS], None, a["dy"], a["dh_last"],
                                               a["checkpoint"], True, [1] * 9), ValueError)
            assert unchanged(ins, snap) and metadata(ins) == meta
    # all meta but a CPU checkpoint: the fake kernel's rule
    xm = {k: v.to("meta") for k, v in x.items()}
    raises_naming("checkpoint", lambda: ops.bwd(*[xm[k] for k in SCAN_ARGS], None, dy.to("meta"), dl.to("meta"), ck,
                                                True, [1] * 9), ValueError)
    if HAS_CUDA:  # u on the GPU, the checkpoint on the CPU: the C++ rule (the CUDA kernel is picked)
        xc = {k: v.cuda() for k, v in x.items()}
        _, _, ckc = ops.fwd(*[xc[k] for k in SCAN_ARGS], None, True, True, True)
        raises_naming("checkpoint", lambda: ops.bwd(*[xc[k] for k in SCAN_ARGS], None, dy.cuda(), dl.cuda(),
                                                    ckc.cpu(), True, [1] * 9), ValueError)


def rank_variants(t):
    """t with one rank added or dropped (0-d, each dim dropped, a dim added anywhere, two merged)."""
    out = [t.new_zeros(())]
    out += [t.select(i, 0).clone() for i in range(t.dim())]
    out += [t.unsqueeze(i).clone() for i in range(t.dim() + 1)]
    out += [t.flatten(i, i + 1).clone() for i in range(t.dim() - 1)]
    return out


@pytest.mark.parametrize("heads", [True, False])
def test_38_9b_step_rank_mismatch_names_the_argument(heads):
    """Every argument of the step with a rank added or dropped: the error is about that argument (its
    message starts with its name). A 3-D state among Mamba-2 shapes blamed x; a 4-D state among
    single-head shapes blamed x too."""
    base = mh_inputs(nh=4, hd=3, N=5, G=2, seed=3)
    if not heads:
        b, nh, hd, N = base["state"].shape
        base = dict(base, state=base["state"].reshape(b, nh * hd, N), x=base["x"].reshape(b, -1),
                    dt=base["dt"].reshape(b, -1), z=base["z"].reshape(b, -1), A=base["A"].reshape(nh * hd, N),
                    D=base["D"].reshape(-1), dt_bias=base["dt_bias"].reshape(-1))
    for arg in ["state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias"]:
        for bad in rank_variants(base[arg]):
            if arg in ("B", "C") and bad.dim() in (2, 3):
                continue  # (batch, N) and (batch, ngroups, N) are both B / C forms
            s = dict(base, **{arg: bad})
            snap, meta = snapshot(s.values()), metadata(s.values())
            with pytest.raises(ValueError) as info:
                call_step(s)
            msg = str(info.value)
            # about arg: the op's "(argument 'x': ...)", or the wrapper's own "selscan: x ..." (multi-head shapes)
            about = re.search(r"\(argument '(\w+)'", msg)
            assert (about.group(1) if about else msg.split()[1]) == arg, (arg, tuple(bad.shape), msg)
            assert unchanged(s.values(), snap) and metadata(s.values()) == meta


def refused_alias(arg, call, ins):
    """call() refused, naming state and arg, with every input's values and metadata (its version
    counter too: nothing was updated in place) as before."""
    snap, meta, versions = snapshot(ins), metadata(ins), [t._version for t in ins]
    msg = raises_naming(arg, call, ValueError)
    assert names(msg, "state"), msg
    assert unchanged(ins, snap) and metadata(ins) == meta and [t._version for t in ins] == versions
    return msg


def test_38_9c_step_input_read_through_a_copy_overlapping_state_refused():
    """An input sharing the state's memory reaches the op as a copy where the wrapper folds heads
    (a view that does not merge), casts, or the op makes a full broadcast dense: selscan's alias
    check saw the copy, and the in-place update changed the caller's input. Refused now, naming it
    and state, nothing written."""
    # the wrapper's copies: heads folded by reshape (x, dt, z, D, dt_bias as views that do not merge)
    for arg in ("x", "dt", "z", "D", "dt_bias"):
        s = mh_inputs(nh=4, hd=3, N=5)
        shape = s[arg].shape
        st_ = s["state"]
        s[arg] = st_[:, :, 0, :3] if arg in ("x", "dt", "z") else st_[0, :, 1, :3]  # (b, nh, hd) / (nh, hd)
        assert s[arg].shape == shape
        refused_alias(arg, lambda: call_step(s), list(s.values()))
    # the wrapper's casts: a float32 dt / B viewing a float32 state, x in bfloat16; A in bfloat16
    # viewing a bfloat16 state (A is cast to float32)
    s = step_inputs(batch=2, dim=4, N=3)
    sb = {k: (v.bfloat16() if k in ("x", "z", "C") else v) for k, v in s.items()}
    for arg, view in (("dt", lambda st_: st_[:, :, 1]), ("B", lambda st_: st_[:2, 0, :])):
        t = dict(sb, state=sb["state"].clone(), B=sb["B"].bfloat16())
        t[arg] = view(t["state"])
        refused_alias(arg, lambda: call_step(t), list(t.values()))
    t = {k: (v.bfloat16() if k != "A" else v) for k, v in s.items()}
    t["A"] = t["state"][0]
    refused_alias("A", lambda: call_step(t), list(t.values()))
    # the op's copies: a full broadcast of one of state's elements (dense before selscan reads it),
    # through the wrapper and the raw op
    for arg in ("x", "dt", "A", "B", "C", "D", "z", "dt_bias"):
        t = dict(s, state=s["state"].clone())
        t[arg] = t["state"].view(-1)[7:8].expand(s[arg].shape)
        refused_alias(arg, lambda: call_step(t), list(t.values()))
        refused_alias(arg, lambda: ops.step(*[t[k] for k in ["state"] + STEP_ARGS], None, True), list(t.values()))
    # ... and int32 row indices read through a contiguous copy (every other int32 of the state's
    # memory: rows 0 and 1 as float bit patterns)
    t = dict(s, state=torch.zeros(3, 4, 3))
    t["state"].view(torch.int32).view(-1)[2] = 1
    idx = t["state"].view(torch.int32).view(-1)[0:4:2]
    assert idx.tolist() == [0, 1] and not idx.is_contiguous()
    refused_alias("state_batch_indices", lambda: call_step(t, state_batch_indices=idx), list(t.values()) + [idx])


def test_38_9c_step_input_in_the_state_gaps_exact():
    """An input in the gaps of the state's memory (interleaved, no element shared): accepted, the
    reference's result, the input's values and metadata untouched -- through the op as it is, a
    folded copy and a cast (the alias checks are exact, not byte-range)."""
    b, nh, hd, N = 2, 2, 3, 4
    s = mh_inputs(batch=b, nh=nh, hd=hd, N=N)
    for how in ("as-is", "folded-copy", "cast", "broadcast"):
        buf = torch.randn(b, nh, hd, N + 2)
        state = buf[..., :N]  # heads merge: a view
        t = dict(s, state=state)
        if how == "as-is":
            t["x"] = buf[..., N]
        elif how == "folded-copy":  # (nheads, hdim) do not merge (hdim stride 0): reshape copies x
            t["x"] = buf[:, :, :1, N].expand(b, nh, hd)
        elif how == "cast":
            t["dt"] = buf[..., N + 1]
            t = {k: (v.half() if k in ("x", "z", "B", "C") else v) for k, v in t.items()}
        else:  # a full broadcast of a gap element: made dense by the op
            t["D"] = buf[0, 0, 0, N:N + 1].expand(nh, hd)
        ins = [v for k, v in t.items() if k != "state"]
        keep = [v.clone() for v in ins]
        meta = metadata(ins)
        xdt = t["x"].dtype  # the reference reads what the op reads: dt in x's dtype
        ref_out, ref_state = mh_ref({k: (v.clone() if k == "state" else v.to(xdt).float() if k == "dt" else v.float())
                                     for k, v in t.items()})
        out = call_step(t)
        # out in x's dtype (float16 "cast": one rounding to it, TOL[float16]); the state is float32
        assert rel_err(out, ref_out.view(out.shape)) < TOL[out.dtype], how
        assert rel_err(state, ref_state.view(state.shape)) < TOL[torch.float32], how
        assert all(torch.equal(a, k) for a, k in zip(ins, keep)) and metadata(ins) == meta, how


# ---- issue 38, the hostile run on the merged fixes ---------------------------------------------------


def test_38_host_conv_update_input_read_through_a_copy_overlapping_conv_state_refused():
    """The conv update's op reads some inputs through a copy (a full broadcast made dense, a weight /
    bias widened to float32 where the other is float32, strided int32 indices made contiguous):
    selscan's alias check saw the copy and the update changed the caller's input. Refused, as the
    scan's step refuses them, naming conv_state and the input, nothing written."""
    def cases():
        s = torch.randn(2, 4, 4)  # x: one element of the state, broadcast
        yield "x", s, lambda: st.causal_conv1d_update(s.view(-1)[5:6].expand(2, 4), s, torch.randn(4, 4))
        s = torch.randn(2, 4, 4)
        yield "weight", s, lambda: st.causal_conv1d_update(torch.randn(2, 4), s, s.view(-1)[3:4].expand(4, 4))
        s = torch.randn(2, 4, 4).bfloat16()  # bfloat16 weight + float32 bias: the weight is widened
        yield "weight", s, lambda: st.causal_conv1d_update(torch.randn(2, 4).bfloat16(), s, s[1], torch.randn(4))
        s = torch.randn(2, 4, 4).bfloat16()  # float32 weight + bfloat16 bias: the bias is widened
        yield "bias", s, lambda: st.causal_conv1d_update(torch.randn(2, 4).bfloat16(), s, torch.randn(4, 4), s[1, 0])
        s = torch.zeros(3, 4, 4)  # int32 rows 0, 1: every other int32 of the state's memory
        s.view(torch.int32).view(-1)[2] = 1
        idx = s.view(torch.int32).view(-1)[0:4:2]
        yield "conv_state_indices", s, lambda: st.causal_conv1d_update(torch.randn(2, 4), s, torch.randn(4, 4),
                                                                       conv_state_indices=idx)
        s = torch.zeros(3, 4, 4)
        s.view(torch.int32).view(-1)[2] = 1
        idx = s.view(torch.int32).view(-1)[0:4:2]
        yield "conv_state_indices", s, lambda: ops.conv_step(s, torch.randn(2, 4), torch.randn(4, 4), None, idx, False)

    for arg, s, call in cases():
        snap, version = s.clone(), s._version
        msg = raises_naming(arg, call, ValueError)
        assert names(msg, "conv_state") and "SELSCAN_ERR_ALIAS" in msg, msg
        assert torch.equal(s, snap) and s._version == version


def test_38_host_circular_update_input_overlapping_conv_state_refused():
    """The circular update (cache_seqlens) steps a gathered copy of the window and scatters x into
    conv_state: an input sharing conv_state's memory (x, weight, bias, cache_seqlens, rows) was
    changed by the scatter. Refused as the plain update refuses it, nothing written."""
    cs = torch.tensor([0, 1])
    calls = {
        "x": lambda s: st.causal_conv1d_update(s[:, :, 1], s, torch.randn(4, 4), cache_seqlens=cs),
        "weight": lambda s: st.causal_conv1d_update(torch.randn(2, 4), s, s[0], cache_seqlens=cs),
        "bias": lambda s: st.causal_conv1d_update(torch.randn(2, 4), s, torch.randn(4, 4), s[1, 0], cache_seqlens=cs),
        "cache_seqlens": lambda s: st.causal_conv1d_update(torch.randn(2, 4), s, torch.randn(4, 4),
                                                           cache_seqlens=s.view(torch.int32)[0, 0, :2]),
    }
    for arg, call in calls.items():
        s = torch.randn(2, 4, 4)
        if arg == "cache_seqlens":
            s.view(torch.int32)[0, 0, :2] = torch.tensor([3, 5], dtype=torch.int32)
        snap = s.clone()
        msg = raises_naming(arg, lambda: call(s), ValueError)
        assert names(msg, "conv_state"), msg
        assert torch.equal(s, snap)


@pytest.mark.parametrize("circular", [False, True])
def test_38_host_empty_cache_all_padding(circular):
    """A cache of 0 rows with every row index padding: out 0, as padding gives (selscan's n_cache 0
    means batch: the op answered 'state missing'; the circular update raised IndexError)."""
    kw = dict(cache_seqlens=torch.tensor([0, 1])) if circular else {}
    y = st.causal_conv1d_update(torch.randn(2, 4), torch.zeros(0, 4, 3), torch.randn(4, 4),
                                conv_state_indices=torch.tensor([-1, -1]), **kw)
    assert y.shape == (2, 4) and not y.any()
    if not circular:
        s = step_inputs(batch=2, n_cache=1)
        s["state"] = s["state"][:0]
        y = call_step(s, state_batch_indices=torch.tensor([-1, -1]))
        assert y.shape == (2, 4) and not y.any()
        with pytest.raises(ValueError, match="state_batch_indices"):
            call_step(s, state_batch_indices=torch.tensor([-1, 0]))


def test_38_host_conv_fakes_refuse_what_the_ops_refuse():
    """A meta tensor among CPU ones goes to the conv ops' fake kernels, which returned an output
    unchecked: now they refuse it naming the argument, as the scan's fakes do."""
    x, w = torch.randn(2, 4, 6), torch.randn(4, 3)
    raises_naming("weight", lambda: st.causal_conv1d_fn(x, w.to("meta")))
    raises_naming("weight", lambda: st.causal_conv1d_fn(x.to("meta"), w))
    raises_naming("initial_states", lambda: st.causal_conv1d_fn(x, w, initial_states=torch.zeros(2, 4, 2,
                                                                                                 device="meta")))
    raises_naming("bias", lambda: ops.conv_fwd(x.to("meta"), w.to("meta"), torch.zeros(5, device="meta"), None, None,
                                               False, False, False))
    xs, s = torch.randn(2, 4), torch.randn(3, 4, 3)
    raises_naming("conv_state", lambda: st.causal_conv1d_update(xs, s.to("meta"), torch.randn(4, 4),
                                                                conv_state_indices=torch.tensor([0, 1])))
    raises_naming("conv_state_indices", lambda: st.causal_conv1d_update(
        xs, s, torch.randn(4, 4), conv_state_indices=torch.tensor([0, 1], dtype=torch.int32, device="meta")))
    raises_naming("conv_state", lambda: st.causal_conv1d_update(xs.to("meta"), s, torch.randn(4, 4, device="meta"),
                                                                conv_state_indices=torch.tensor([0, 1])))
    raises_naming("x", lambda: st.causal_conv1d_fn([1.0], w), TypeError)
    # the width bound the fakes use is the op's (selscan.h's SELSCAN_CONV_MAX_WIDTH)
    W = st._C.CONV_MAX_WIDTH
    st.causal_conv1d_fn(x, torch.randn(4, W))
    with pytest.raises(NotImplementedError, match=rf"argument 'weight': .*width={W + 1}") as info:
        st.causal_conv1d_fn(x, torch.randn(4, W + 1))
    with pytest.raises(NotImplementedError) as meta_info:
        st.causal_conv1d_fn(x.to("meta"), torch.randn(4, W + 1, device="meta"))
    assert str(meta_info.value) == str(info.value).split("\n")[0]


def test_38_host_final_states_out_overlapping_an_input_refused():
    """final_states_out is written after the conv: a view of x (or of the initial states) among the
    inputs would have changed them behind the caller's back; refused naming both, nothing written."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 8, 12, generator=g)
    w, b = torch.randn(8, 4, generator=g), torch.randn(8, generator=g)
    init = torch.randn(2, 8, 3, generator=g)
    for name, out in (("x", x[:, :, :3]), ("initial_states", init)):
        before = (x.clone(), init.clone())
        with pytest.raises(ValueError, match=rf"final_states_out.*overlaps {name}"):
            st.causal_conv1d_fn(x, w, b, initial_states=init, return_final_states=True, final_states_out=out)
        assert torch.equal(x, before[0]) and torch.equal(init, before[1])
    y, fin = st.causal_conv1d_fn(x, w, b, initial_states=init, return_final_states=True,
                                 final_states_out=torch.empty(2, 8, 3))
    assert fin.shape == (2, 8, 3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arg", ["u", "delta", "z", "B"])
def test_39_high_rank_l_strided_with_grad_refused(device, arg):
    """A training call whose operand has a rank past what the CUDA forward's unit-L question describes
    in place (> 8), L-strided: refused by the op's own check naming it (the question skipped), no
    crash, no copy; a rank-4 one too (the check of described tensors)."""
    for rank in (9, 4):
        x = scan_inputs(device=device, seed=3)
        for k in ("u", "delta", "z", "B", "C", "D", "delta_bias", "A"):
            x[k] = x[k].requires_grad_()
        t = x[arg].detach()
        bad = t.reshape((1,) * (rank - t.dim()) + tuple(t.shape)).transpose(-1, -2).contiguous().transpose(-1, -2)
        assert bad.stride(-1) != 1 and bad.dim() == rank
        x[arg] = bad.requires_grad_()
        raises_naming(arg, lambda: call_scan(x))


def test_conv_final_states_out_checked_before_written():
    """causal_conv1d_fn's final_states_out: causal_conv1d's buffer of final_states' exact shape,
    dtype and device; another refused naming it, nothing written (it was broadcast into, or cast
    to an integer buffer, by a plain copy_). The step's state_batch_indices named in its rule too."""
    g = torch.Generator().manual_seed(6)
    x, w = torch.randn(2, 4, 7, generator=g), torch.randn(4, 3, generator=g)
    for bad, exc in ((torch.zeros(5, 2, 4, 2), ValueError), (torch.zeros(2, 4, 1), ValueError),
                     (torch.zeros(2, 4, 2, dtype=torch.int32), TypeError)):
        snap = bad.clone()
        raises_naming("final_states_out", lambda: st.causal_conv1d_fn(x, w, None, return_final_states=True,
                                                                      final_states_out=bad), exc)
        assert torch.equal(bad, snap)
    buf = torch.zeros(2, 4, 2)
    y, fin = st.causal_conv1d_fn(x, w, None, return_final_states=True, final_states_out=buf)
    assert fin is buf and torch.equal(buf, x[:, :, -2:])
    s = step_inputs()
    msg = raises_naming("state", lambda: call_step(dict(s, state=s["state"][:1])))
    assert "without state_batch_indices" in msg, msg


def test_dropin_arguments_named():
    """What is not a tensor, or not one of the peers' shapes / dtypes, is refused naming the user's
    argument (before: numpy u, a float bias or initial_states, a float or list seq_idx, a 0-dim
    conv1d_weight and a mis-sized out_proj_bias gave PyTorch's own errors, or were accepted)."""
    g = torch.Generator().manual_seed(7)
    x, w = torch.randn(2, 4, 7, generator=g), torch.randn(4, 3, generator=g)
    u = torch.randn(1, 4, 5, generator=g)
    raises_naming("u", lambda: st.selective_scan_fn(u.numpy(), u, -torch.rand(4, 2), torch.randn(1, 2, 5),
                                                    torch.randn(1, 2, 5)), TypeError)
    raises_naming("bias", lambda: st.causal_conv1d_fn(x, w, 1.0), TypeError)
    raises_naming("initial_states", lambda: st.causal_conv1d_fn(x, w, None, initial_states=1.0), TypeError)
    raises_naming("seq_idx", lambda: st.causal_conv1d_fn(x, w, None, seq_idx=torch.zeros(2, 7)), TypeError)
    raises_naming("seq_idx", lambda: st.causal_conv1d_fn(x, w, None, seq_idx=[[0] * 7] * 2), TypeError)
    assert torch.equal(st.causal_conv1d_fn(x, w, None, seq_idx=torch.zeros(2, 7, dtype=torch.int32)),
                       st.causal_conv1d_fn(x, w, None))
    b, d, L, N, R, dm = 2, 4, 5, 3, 2, 3
    args = dict(xz=torch.randn(b, 2 * d, L, generator=g), conv1d_weight=torch.randn(d, 1, 4, generator=g),
                conv1d_bias=None, x_proj_weight=torch.randn(R + 2 * N, d, generator=g),
                delta_proj_weight=torch.randn(d, R, generator=g), out_proj_weight=torch.randn(dm, d, generator=g),
                out_proj_bias=torch.randn(dm, generator=g), A=-torch.rand(d, N, generator=g))
    raises_naming("conv1d_weight", lambda: st.mamba_inner_fn(**dict(args, conv1d_weight=torch.tensor(1.0))))
    raises_naming("out_proj_bias", lambda: st.mamba_inner_fn(**dict(args, out_proj_bias=torch.randn(dm + 1))))
    assert st.mamba_inner_fn(**args).shape == (b, L, dm)
